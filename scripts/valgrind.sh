#!/usr/bin/env bash
# valgrind.sh -- the unit suites and the CLI's golden tests under valgrind's
# memcheck (`make valgrind`).
#
#   scripts/valgrind.sh BUILD_DIR [TEST ...]
#
# BUILD_DIR is a plain (not sanitizer) build with its tests built, e.g.
# build/ after `make build`.  Each test program runs under
#   valgrind --fair-sched=yes --leak-check=full --child-silent-after-fork=yes
# with the environment ctest gives it (valgrind runs one thread at a time;
# without --fair-sched, the reader threads' loops in test_concurrency can
# keep the thread that holds the writers' lock off the CPU past the
# 10-second lock timeout, and a write fails with BINDLOG_EBUSY); it passes when the program exits 0
# and memcheck reports nothing: no invalid read or write, no use of an
# uninitialised value, no byte definitely or indirectly lost.  The forked
# children of a test (a writer killed with SIGKILL, a process racing for a
# lock) are left out: they leave by _exit on purpose, with the parent's
# allocations still held.  Then the CLI's golden tests run with the
# bindlog tool itself under memcheck (every command, every error path the
# golden files cover).  Without TEST arguments, the default list below
# runs; the etcd suites, the power-loss and kill campaigns and the tests
# that mount a file system are left to ctest (they run for minutes under
# valgrind, or need root and a fixture).
#
# Prints one line per test, then a summary; exit status 0 when every test
# is clean, 1 otherwise.  Each test's memcheck log is kept in
# BUILD_DIR/valgrind/<test>.log.
set -uo pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 BUILD_DIR [TEST ...]" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
shift
src=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v valgrind >/dev/null 2>&1; then
    echo "valgrind is not installed (apt-get install valgrind)" >&2
    exit 2
fi

tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
    tests=(test_api test_seed test_route test_record test_stream test_check test_compact
           test_recover test_replay test_import test_limits test_open test_upgrade test_bulk
           test_errors test_persist test_wal test_wal_damage test_wal_fill test_wal_pagewalk
           test_wal_shm test_wal_procs test_random test_pagecheck test_platform test_wait
           test_concurrency test_fork test_world faults/test_allocfail)
fi

out=$build/valgrind
rm -rf "$out"
mkdir -p "$out/tmp" "$out/cli"
# what tests/CMakeLists.txt gives every test (BINDLOG_TEST_ENV)
export BINDLOG_TEST_TMPDIR=$out/tmp TMPDIR=$out/tmp
export BINDLOG_TEST_DATA=$src/tests/data BINDLOG_TEST_SOURCE_DIR=$src
if [ -e "$build/libbindlog-etcd.so" ]; then
    export BINDLOG_ETCD_MODULE=$build/libbindlog-etcd.so
fi

vg=(valgrind --quiet --fair-sched=yes --leak-check=full --show-leak-kinds=definite,indirect
    --errors-for-leak-kinds=definite,indirect --child-silent-after-fork=yes)
failed=0
passed=0
for t in "${tests[@]}"; do
    name=$(basename "$t")
    if [ ! -x "$build/tests/$t" ]; then
        echo "[  FAILED  ] $name: $build/tests/$t is not built"
        failed=$((failed + 1))
        continue
    fi
    log=$out/$name.log
    start=$(date +%s)
    (cd "$build/tests" && "${vg[@]}" --log-file="$log" "./$t" >"$out/$name.out" 2>&1)
    rc=$?
    secs=$(($(date +%s) - start))
    if [ $rc -eq 0 ] && [ ! -s "$log" ]; then
        echo "[       OK ] $name (${secs} s)"
        passed=$((passed + 1))
    else
        echo "[  FAILED  ] $name (exit $rc, ${secs} s): $log"
        head -n 20 "$log" | sed 's/^/    /'
        [ $rc -ne 0 ] && tail -n 5 "$out/$name.out" | sed 's/^/    /'
        failed=$((failed + 1))
    fi
done

# the CLI's golden tests, the tool under memcheck (one log per process)
wrapper=$out/bindlog-under-valgrind
cat >"$wrapper" <<EOF
#!/bin/sh
exec ${vg[*]} --log-file=$out/cli/%p.log $build/tools/bindlog "\$@"
EOF
chmod +x "$wrapper"
start=$(date +%s)
bash "$src/tests/cli/run.sh" "$wrapper" "$out/tmp/cli" >"$out/cli_golden.out" 2>&1
rc=$?
secs=$(($(date +%s) - start))
dirty=$(find "$out/cli" -type f -size +0 | head -n 5)
if [ $rc -eq 0 ] && [ -z "$dirty" ]; then
    echo "[       OK ] cli_golden, the tool under memcheck (${secs} s)"
    passed=$((passed + 1))
else
    echo "[  FAILED  ] cli_golden, the tool under memcheck (exit $rc, ${secs} s)"
    tail -n 5 "$out/cli_golden.out" | sed 's/^/    /'
    for f in $dirty; do head -n 20 "$f" | sed 's/^/    /'; done
    failed=$((failed + 1))
fi

echo "[==========] valgrind: $passed clean, $failed failed"
[ $failed -eq 0 ]
