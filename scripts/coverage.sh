#!/usr/bin/env bash
# coverage.sh -- which lines of the library the test suite runs (gcov).
#
#   scripts/coverage.sh [BUILD_DIR] [-- CTEST_ARGS...]
#
# Configures BUILD_DIR (default build-cov/ in this checkout) as a Debug
# build compiled and linked with --coverage, builds it, runs ctest there
# (by default every test but the install, packaging, fuzzing and benchmark
# ones; CTEST_ARGS replace that selection, e.g. `-- -LE etcd` to leave the
# etcd clusters out), then prints gcovr's per-file line coverage of the
# library (src/) and of the bindlog tool (tools/) with their totals, and
# writes BUILD_DIR/coverage-{src,tools}.txt (the same tables, with the
# lines never run) and BUILD_DIR/coverage-{src,tools}.html.
#
# The failed tests are reported, not fatal: exported_symbols always fails
# in this build (gcov's own symbols are exported).  A test's forked
# children that leave by _exit (crash, kill and process-race tests) write
# no counts, so the code only they run shows as never run.  gcovr is a
# Debian package (`make coverage` installs it through scripts/deps.sh).
#
# Exit status: 0 when the report was written, 2 on a usage or setup error.
set -uo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=$src/build-cov
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    build=$1
    shift
fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then
    shift
fi
if [ $# -gt 0 ]; then
    select=("$@")
else
    select=(-LE "install|pack|fuzz|bench")
fi
if ! command -v gcovr >/dev/null 2>&1; then
    echo "gcovr is not installed (apt-get install gcovr)" >&2
    exit 2
fi

cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="--coverage -O0" \
    -DCMAKE_EXE_LINKER_FLAGS=--coverage -DCMAKE_SHARED_LINKER_FLAGS=--coverage \
    -DBINDLOG_WERROR=OFF >"$build.cmake.log" 2>&1 || {
    echo "configure failed: $build.cmake.log" >&2
    exit 2
}
cmake --build "$build" -j"$(nproc)" >"$build.build.log" 2>&1 || {
    echo "build failed: $build.build.log" >&2
    exit 2
}
find "$build" -name '*.gcda' -delete
(cd "$build" && ctest "${select[@]}" -j"$(nproc)" --output-on-failure >ctest.log 2>&1)
grep -E "tests passed|tests failed" "$build/ctest.log"
grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted)\)" "$build/ctest.log" || true

# Counters of threads racing on one line can come out negative in gcov's
# output; gcovr skips those lines rather than the file.
cd "$src" || exit 2
for part in src tools; do
    echo "== $part/"
    gcovr -r "$src" --object-directory "$build" -f "$part/" --gcov-ignore-parse-errors \
        --print-summary --txt "$build/coverage-$part.txt" \
        --html-details "$build/coverage-$part.html" 2>"$build/gcovr-$part.log" |
        grep -E "^(lines|functions|branches):"
    grep -E "^$part/" "$build/coverage-$part.txt" |
        awk '{printf "%-36s %6s %6s %5s\n", $1, $2, $3, $4}'
done
echo "tables with the lines never run: $build/coverage-src.txt, $build/coverage-tools.txt"
