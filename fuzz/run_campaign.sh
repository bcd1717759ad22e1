#!/bin/sh
# run_campaign.sh -- build one libFuzzer target with clang and run it.
#
#   fuzz/run_campaign.sh TARGET SECONDS [libFuzzer options...]
#
# TARGET is record, machine, cli, stream, json, wal or mdb (fuzz/<TARGET>_fuzzer.c).  CI runs each
# for 30 s; long campaigns just pass more seconds (and e.g. -jobs=N -workers=N
# -- but the store of machine_fuzzer lives on /dev/shm, so mind its size).
#
# Environment:
#   BINDLOG_FUZZ_BUILD  build directory (default build-fuzz/ in this checkout, so
#                       two checkouts never share a CMake cache); reused between
#                       runs, so only the first build is slow
#   CC                  clang to use (default clang)
#
# The committed corpus fuzz/corpora/TARGET is read but never written: new
# inputs go to $BINDLOG_FUZZ_BUILD/corpus/TARGET, crashes and other artifacts
# to $BINDLOG_FUZZ_BUILD/artifacts/TARGET/, the log to
# $BINDLOG_FUZZ_BUILD/TARGET.log.  To keep new coverage, merge it into the
# committed corpus (files renamed cov-<sha1>):
#   $BINDLOG_FUZZ_BUILD/fuzz/TARGET_fuzzer -merge=1 fuzz/corpora/TARGET \
#       $BINDLOG_FUZZ_BUILD/corpus/TARGET
# Every crash becomes fuzz/corpora/TARGET/regress-<what> (ctest replays it).
#
# Exit status: libFuzzer's (0 = no finding in the time given).
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 TARGET SECONDS [libFuzzer options...]" >&2
    exit 2
fi
target=$1
seconds=$2
shift 2

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BINDLOG_FUZZ_BUILD:-$root/build-fuzz}
cc=${CC:-clang}

if [ ! -f "$root/fuzz/${target}_fuzzer.c" ]; then
    echo "$0: no fuzz target '$target' (fuzz/${target}_fuzzer.c)" >&2
    exit 2
fi

# logs go inside the build directory, never beside it (that is the checkout)
mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DBINDLOG_ENABLE_FUZZING=ON -DBINDLOG_BUILD_TESTS=OFF -DBINDLOG_BUILD_TOOLS=OFF \
    -DBINDLOG_BUILD_EXAMPLES=OFF >"$build/campaign-cmake.log" 2>&1 || {
    cat "$build/campaign-cmake.log" >&2
    exit 3
}
cmake --build "$build" --target "${target}_fuzzer" -j "${JOBS:-2}" >"$build/campaign-build.log" 2>&1 || {
    cat "$build/campaign-build.log" >&2
    exit 3
}

corpus="$build/corpus/$target"
artifacts="$build/artifacts/$target"
mkdir -p "$corpus" "$artifacts"

# Per-target defaults; options given on the command line come later and win.
case $target in
record) defaults="-max_len=4096" ;;
machine) defaults="-max_len=2048" ;;
cli) defaults="-max_len=512 -close_fd_mask=2" ;;
mdb) defaults="-max_len=400000" ;;
*) defaults="" ;;
esac

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

log="$build/$target.log"
echo "fuzzing $target for $seconds s; log $log, artifacts $artifacts/" >&2
set +e
# shellcheck disable=SC2086  # $defaults is a list of options
"$build/fuzz/${target}_fuzzer" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$artifacts/" $defaults "$@" "$corpus" "$root/fuzz/corpora/$target" \
    >"$log" 2>&1
status=$?
set -e
# The summary: the last progress line and the final statistics.
grep -E '^#[0-9]+.*(cov|DONE)' "$log" | tail -n 1 >&2 || true
grep -E '^stat::' "$log" >&2 || true
if [ $status -ne 0 ]; then
    echo "$target: libFuzzer exited with $status; see $log and $artifacts/" >&2
    tail -n 40 "$log" >&2
fi
exit $status
