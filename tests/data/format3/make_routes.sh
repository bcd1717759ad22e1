#!/usr/bin/env bash
# make_routes.sh -- rebuild tests/data/format3/routes.tar.gz, the format-3
# golden stores with routing of tests/test_upgrade.c.
#
#   tests/data/format3/make_routes.sh [COMMIT]     (default e1621d2)
#
# Checks out COMMIT (the last main with on-disk format 3) into a temporary
# worktree, builds its library, compiles gen_routes.c against it (public API
# only) and writes two stores with it:
#   routed/          about 300 calls, routes among them, closed cleanly
#   routed-crashed/  the same, the process gone without a close: its last
#                    records are only in bindlog.wal
# data.mdb and bindlog.wal of each go into the tarball (lock.mdb,
# bindlog.shm and bindlog.lock are made again by whoever opens the store).
# expected_routes.txt records what format-3 code said of each store: its
# head LSN, its state digest and every key's last activity.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(git -C "$HERE" rev-parse --show-toplevel)
COMMIT=${1:-e1621d2}
TMP=$(mktemp -d)
trap 'git -C "$REPO" worktree remove --force "$TMP/src" >/dev/null 2>&1 || true; rm -rf "$TMP"' EXIT

git -C "$REPO" worktree add --detach "$TMP/src" "$COMMIT" >/dev/null
cmake -S "$TMP/src" -B "$TMP/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DBINDLOG_BUILD_TESTS=OFF -DBINDLOG_BUILD_EXAMPLES=OFF -DBINDLOG_FAILPOINTS=OFF >/dev/null
cmake --build "$TMP/build" -j2 --target bindlog_static >/dev/null
cc -std=c11 -O1 -I"$TMP/src/include" -DBINDLOG_STATIC "$HERE/gen_routes.c" \
    "$TMP/build/libbindlog.a" $(pkg-config --libs lmdb libxxhash) -lpthread -o "$TMP/gen"

mkdir -p "$TMP/out"
: >"$TMP/expected.txt"
for s in routed: routed-crashed:crash; do
    IFS=: read -r name crash <<<"$s"
    "$TMP/gen" "$TMP/stores/$name" $crash >"$TMP/$name.txt"
    mkdir -p "$TMP/out/$name"
    cp "$TMP/stores/$name/data.mdb" "$TMP/stores/$name/bindlog.wal" "$TMP/out/$name/"
    sed "s/^/$name /" "$TMP/$name.txt" >>"$TMP/expected.txt"
done
echo "commit $(git -C "$REPO" rev-parse "$COMMIT")" >>"$TMP/expected.txt"
tar -C "$TMP/out" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - routed routed-crashed |
    gzip -9n >"$HERE/routes.tar.gz"
cp "$TMP/expected.txt" "$HERE/expected_routes.txt"
ls -l "$HERE/routes.tar.gz"
cat "$HERE/expected_routes.txt"
