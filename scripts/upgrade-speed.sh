#!/usr/bin/env bash
# upgrade-speed.sh -- time `bindlog upgrade` on large format-1 stores.
#
#   scripts/upgrade-speed.sh TOOL [N...]      (default N: 200000 1000000)
#
# TOOL is a built `bindlog` of this tree.  For each N, the library at
# commit ac406c8 (the last with on-disk format 1; built once in a temporary
# worktree) writes a store of N BIND events over 50,000 keys, in batches of
# 1,000, durability NONE; then TOOL upgrades it, timed with /usr/bin/time
# (wall seconds, peak RSS), and checks it.  Prints one line per store:
#   N records  SIZE format-1 data.mdb  SECONDS s  RSS KB peak  SIZE new data.mdb
# The stores are removed at the end unless KEEP=1 (then their directory is
# printed).  docs/tools.md ("upgrade") quotes a run.
set -euo pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 TOOL [N...]" >&2
    exit 2
fi
tool=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(200000 1000000)
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d "${TMPDIR:-/tmp}/bindlog-upgrade-speed-XXXXXX")
cleanup() {
    git -C "$repo" worktree remove --force "$work/src" >/dev/null 2>&1 || true
    if [ "${KEEP:-0}" = 1 ]; then echo "kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

git -C "$repo" worktree add --detach "$work/src" ac406c8 >/dev/null 2>&1
cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBINDLOG_BUILD_TESTS=OFF \
    -DBINDLOG_BUILD_EXAMPLES=OFF -DBINDLOG_FAILPOINTS=OFF >/dev/null
cmake --build "$work/build" -j2 --target bindlog_static >/dev/null
cat >"$work/gen.c" <<'C'
#include <bindlog.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s;
    static char keys[1000][32], sids[1000][32];
    bindlog_event ev[1000];
    long n = argc > 2 ? atol(argv[2]) : 0;
    o.durability = BINDLOG_DURABILITY_NONE;
    if (bindlog_open(&s, argv[1], &o) != 0)
        return 1;
    for (long i = 0; i < n; i += 1000) {
        for (int j = 0; j < 1000; j++) {
            snprintf(keys[j], 32, "agent:main:k%ld", (i + j) % 50000);
            snprintf(sids[j], 32, "s-%ld", i + j);
            ev[j] = (bindlog_event){BINDLOG_EVENT_BIND, keys[j], sids[j], NULL, 0, NULL, NULL, 0};
        }
        if (bindlog_apply_batch(s, ev, 1000, NULL, NULL) != 0) {
            fprintf(stderr, "%s\n", bindlog_last_error());
            return 2;
        }
    }
    bindlog_close(s);
    return 0;
}
C
cc -O2 -I"$work/src/include" -DBINDLOG_STATIC "$work/gen.c" "$work/build/libbindlog.a" \
    $(pkg-config --libs lmdb libxxhash) -lpthread -o "$work/gen"

for n in "${sizes[@]}"; do
    d=$work/s$n
    "$work/gen" "$d" "$n"
    old=$(stat -c %s "$d/data.mdb")
    /usr/bin/time -f "%e %M" -o "$work/time" "$tool" upgrade "$d" >/dev/null
    "$tool" -d "$d" check >/dev/null
    read -r secs rss <"$work/time"
    new=$(stat -c %s "$d/data.mdb")
    echo "$n records  $old format-1 data.mdb  $secs s  $rss KB peak  $new new data.mdb"
done
