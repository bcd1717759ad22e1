#!/usr/bin/env bash
# run.sh -- golden-file tests of the bindlog command-line tool.
#
#   tests/cli/run.sh BINDLOG_BINARY [WORKDIR]
#   UPDATE=1 tests/cli/run.sh ...      rewrite the golden files from this run
#
# cases.sh (beside this file) is a script of steps; each step
#   t NAME ARGS...        runs "bindlog ARGS..." (stdin from /dev/null)
#   tsh NAME 'COMMAND'    runs a shell command line ($BL is the binary,
#                         $STORE the test store, $WORK the scratch dir)
# and compares its stdout, stderr and exit code with golden/NAME.out,
# golden/NAME.err and golden/NAME.code.  Steps run in order and share the
# store, so later steps see what earlier write commands did.  Event times
# come from BINDLOG_CLOCK_MS, which the cases set, so output is the same on
# every run; what still varies (the scratch path, file and map sizes) is
# masked by filter() below.  Exit status: 0 when every step matched.
set -u

if [ $# -lt 1 ]; then
    echo "usage: $0 BINDLOG_BINARY [WORKDIR]" >&2
    exit 2
fi
BL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
GOLD=$HERE/golden
WORK=${2:-${TMPDIR:-/tmp}/bindlog-cli-test.$$}
case $WORK in /*) ;; *) WORK=$PWD/$WORK ;; esac
rm -rf "$WORK"
mkdir -p "$WORK" "$GOLD"
STORE=$WORK/store
export BL STORE WORK
unset BINDLOG_DIR BINDLOG_CLOCK_MS
# Byte-exact sorting and messages whatever the caller's locale.
export LC_ALL=C

pass=0
fail=0
failed=""

# Masks what legitimately differs between machines and runs.
filter() {
    sed -e "s#$WORK#<WORK>#g" \
        -e 's/^\(map_size\|map_used\|file_size\|readers\):\( *\).*/\1:\2<masked>/' \
        -e 's/"\(map_size\|map_used\|file_size\|readers_used\)":[0-9]*/"\1":0/g' \
        -e 's/^\(size_before\|size_after\):\( *\).*/\1:\2<masked>/' \
        -e 's/^bindlog_\(map_size_bytes\|map_used_bytes\|file_size_bytes\|readers\) .*/bindlog_\1 <masked>/' \
        -e 's/"\(size_before\|size_after\)":[0-9]*/"\1":0/g'
}

# check NAME: compares $WORK/cur.{out,err,code} with the goldens.
check() {
    local name=$1 ok=1 kind
    filter <"$WORK/cur.out" >"$WORK/cur.out.f"
    filter <"$WORK/cur.err" >"$WORK/cur.err.f"
    if [ "${UPDATE:-0}" = 1 ]; then
        cp "$WORK/cur.out.f" "$GOLD/$name.out"
        cp "$WORK/cur.err.f" "$GOLD/$name.err"
        cp "$WORK/cur.code" "$GOLD/$name.code"
        pass=$((pass + 1))
        return
    fi
    for kind in out err code; do
        local got=$WORK/cur.$kind
        [ $kind = code ] || got=$got.f
        if [ ! -f "$GOLD/$name.$kind" ]; then
            echo "FAIL $name: no golden file golden/$name.$kind (run with UPDATE=1)"
            ok=0
        elif ! diff -u --label "golden/$name.$kind" --label "actual" "$GOLD/$name.$kind" "$got"; then
            echo "FAIL $name: $kind differs"
            ok=0
        fi
    done
    if [ $ok = 1 ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        failed="$failed $name"
    fi
}

t() {
    local name=$1
    shift
    (cd "$WORK" && "$BL" "$@" </dev/null >"$WORK/cur.out" 2>"$WORK/cur.err")
    echo $? >"$WORK/cur.code"
    check "$name"
}

tsh() {
    local name=$1
    (cd "$WORK" && bash -c "$2" </dev/null >"$WORK/cur.out" 2>"$WORK/cur.err")
    echo $? >"$WORK/cur.code"
    check "$name"
}

# shellcheck source=cases.sh
. "$HERE/cases.sh"

echo "cli golden tests: $pass passed, $fail failed"
[ $fail = 0 ] || echo "failed:$failed"
[ $fail = 0 ] && rm -rf "$WORK"
[ $fail = 0 ]
