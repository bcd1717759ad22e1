#!/usr/bin/env bash
# make_format6.sh -- rebuild tests/data/format6/stores.tar.gz, the format-6
# golden stores of tests/test_upgrade.c (upgrade__format6_stores; the
# format after 6 upgrades them).
#
#   tests/data/format6/make_format6.sh [COMMIT]     (default dc61641)
#
# Checks out COMMIT (a main with on-disk format 6) into a temporary
# worktree, builds its library, compiles gen_format6.c against it (public
# API only) and writes three stores with it:
#   plain/      about 500 events over 40 keys, never compacted, closed
#               cleanly
#   compacted/  the same, compacted before LSN 300, then about 100 more
#               events
#   crashed/    the same events as plain/, the process gone without a close:
#               its last records are only in bindlog.wal
# The events are those of tests/data/format4's stores (the digests are
# theirs); most sessions are references to their records, some are whole,
# and in compacted/ some resolve through the base image.
# data.mdb and bindlog.wal of each go into the tarball (lock.mdb,
# bindlog.shm and bindlog.lock are made again by whoever opens the store).
# expected.txt records what format-6 code said of each store: its head LSN
# and state digest, and the extra checks gen_format6.c prints (base image,
# checkpointed LSN, counts, applied counters, two sessions' children).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(git -C "$HERE" rev-parse --show-toplevel)
COMMIT=${1:-dc61641}
TMP=$(mktemp -d)
trap 'git -C "$REPO" worktree remove --force "$TMP/src" >/dev/null 2>&1 || true; rm -rf "$TMP"' EXIT

git -C "$REPO" worktree add --detach "$TMP/src" "$COMMIT" >/dev/null
cmake -S "$TMP/src" -B "$TMP/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DBINDLOG_BUILD_TESTS=OFF -DBINDLOG_BUILD_EXAMPLES=OFF -DBINDLOG_FAILPOINTS=OFF >/dev/null
cmake --build "$TMP/build" -j2 --target bindlog_static >/dev/null
cc -std=c11 -O1 -Wall -Wextra -Werror -I"$TMP/src/include" -DBINDLOG_STATIC "$HERE/gen_format6.c" \
    "$TMP/build/libbindlog.a" $(pkg-config --libs lmdb libxxhash) -lpthread -o "$TMP/gen"

mkdir -p "$TMP/out"
: >"$TMP/expected.txt"
for s in plain:0: compacted:300: crashed:0:crash; do
    IFS=: read -r name keep crash <<<"$s"
    "$TMP/gen" "$TMP/stores/$name" "$keep" $crash >"$TMP/$name.txt"
    mkdir -p "$TMP/out/$name"
    cp "$TMP/stores/$name/data.mdb" "$TMP/stores/$name/bindlog.wal" "$TMP/out/$name/"
    sed "s/^/$name /" "$TMP/$name.txt" >>"$TMP/expected.txt"
done
echo "commit $(git -C "$REPO" rev-parse "$COMMIT")" >>"$TMP/expected.txt"
tar -C "$TMP/out" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - plain compacted crashed |
    gzip -9n >"$HERE/stores.tar.gz"
cp "$TMP/expected.txt" "$HERE/expected.txt"
ls -l "$HERE/stores.tar.gz"
cat "$HERE/expected.txt"
