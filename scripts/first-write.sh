#!/usr/bin/env bash
# first-write.sh -- what a restarted writer pays for its first write, with
# the whole-store page walk running beside it (docs/design.md, "Damaged
# files: where pages are validated").
#
#   scripts/first-write.sh FIRST_WRITE STORE [RUNS]
#
# FIRST_WRITE is a built bench/bindlog-first-write (a Release build for
# figures worth quoting: cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release
# && cmake --build build-rel --target bindlog-first-write), STORE a store
# directory, e.g. one bulk-loaded by
#   bindlog-bench --only bulk --events 130000 --keep --dir DIR   (DIR/bulk, ~150 MB)
#   bindlog-bench --only bulk --events 1300000 --keep --dir DIR  (DIR/bulk, ~0.9 GB)
# Each run opens STORE in a new process, binds a new key, binds another and
# closes; twice: with the first write right after open (delay 0: a request
# that comes with the restart) and 3 s after it (the background walk is
# over by then); then, with no write, a close 50 ms after open (while the
# walk of a large store is still under way).  Every run with writes adds
# two keys to STORE.  The file is read once
# first, so the figures are for a warm page cache.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 FIRST_WRITE STORE [RUNS]" >&2
    exit 2
fi
tool=$1
store=$2
runs=${3:-5}
echo "store: $store ($(du -h "$store/data.mdb" | cut -f1) data.mdb), load: $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$store/data.mdb" >/dev/null
for delay in 0 3000; do
    echo "-- first write ${delay} ms after open, FULL"
    "$tool" "$store" --runs "$runs" --delay "$delay" --durability full
done
echo "-- close 50 ms after open, no write"
"$tool" "$store" --runs "$runs" --delay 50 --no-write
