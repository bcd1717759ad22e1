#!/usr/bin/env bash
# scripts/lint.sh -- static analysis of the library sources (src/*/*.c).
#
# Runs cppcheck and clang-tidy over src/*/*.c with the compile commands of a
# CMake build (both library configurations: release and bindlog_faults,
# which compiles the failpoints in), using the checked-in .clang-tidy and
# .cppcheck-suppressions (each suppression says why).  Prints every finding
# and a summary; exits 0 when both tools report nothing, 1 when either
# reports something, 2 when a tool is missing or cannot run.
#
#   scripts/lint.sh                  configure a scratch build under /tmp
#   LINT_BUILD_DIR=dir scripts/lint.sh   reuse/make that build dir
#   LINT_JOBS=n                      clang-tidy processes (default: nproc)
#   CLANG_TIDY=clang-tidy-14 CPPCHECK=cppcheck   tool names
set -uo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
CPPCHECK=${CPPCHECK:-cppcheck}
CLANG_TIDY=${CLANG_TIDY:-$(command -v clang-tidy-14 || command -v clang-tidy || echo clang-tidy)}
jobs=${LINT_JOBS:-$(nproc 2>/dev/null || echo 2)}

for tool in "$CPPCHECK" "$CLANG_TIDY" cmake; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "lint: $tool not found (Debian: apt-get install cppcheck clang-tidy)" >&2
        exit 2
    fi
done

build=${LINT_BUILD_DIR:-}
cleanup=""
if [ -z "$build" ]; then
    build=$(mktemp -d /tmp/bindlog-lint.XXXXXX)
    cleanup=$build
fi
trap '[ -n "$cleanup" ] && rm -rf "$cleanup"' EXIT

if ! cmake -S "$root" -B "$build" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
    -DBINDLOG_BUILD_TESTS=OFF -DBINDLOG_BUILD_TOOLS=OFF -DBINDLOG_BUILD_EXAMPLES=OFF \
    -DBINDLOG_FAILPOINTS=ON -DBINDLOG_WERROR=OFF >"$build/lint-cmake.log" 2>&1; then
    cat "$build/lint-cmake.log" >&2
    echo "lint: cmake failed" >&2
    exit 2
fi
db="$build/compile_commands.json"

# ---- cppcheck ---------------------------------------------------------------
echo "== cppcheck ($("$CPPCHECK" --version))"
"$CPPCHECK" --project="$db" --file-filter='*/src/*' \
    --enable=warning,style,performance,portability --std=c11 \
    --suppressions-list="$root/.cppcheck-suppressions" --inline-suppr \
    --error-exitcode=1 -q -j "$jobs" \
    --template='{file}:{line}: {severity}/{id}: {message}' 2>"$build/cppcheck.out"
cpp_rc=$?
sed "s|$root/||" "$build/cppcheck.out"
cpp_n=$(grep -c ': [a-z]*/[A-Za-z]*: ' "$build/cppcheck.out" || true)

# ---- clang-tidy ---------------------------------------------------------------
echo "== clang-tidy ($("$CLANG_TIDY" --version | grep -o 'version [0-9.]*'))"
: >"$build/tidy.out"
crashed=""
export CLANG_TIDY build
printf '%s\n' "$root"/src/*/*.c |
    xargs -P "$jobs" -I{} sh -c \
        '"$CLANG_TIDY" -p "$build" --quiet "$1" >"$build/tidy.$(basename "$1").out" 2>/dev/null
         rc=$?; [ $rc -gt 1 ] && echo "$1" >>"$build/tidy.crashed"; exit 0' _ {}
for f in "$build"/tidy.*.c.out; do
    [ -e "$f" ] && cat "$f" >>"$build/tidy.out"
done
[ -e "$build/tidy.crashed" ] && crashed=$(sed "s|$root/||" "$build/tidy.crashed" | tr '\n' ' ')
grep -E '^/.*: (warning|error): ' "$build/tidy.out" | sed "s|$root/||" | sort -u
tidy_n=$(grep -E '^/.*: (warning|error): ' "$build/tidy.out" | sort -u | wc -l)

echo "== summary: cppcheck $cpp_n finding(s), clang-tidy $tidy_n finding(s)"
if [ -n "$crashed" ]; then
    echo "   clang-tidy crashed on: $crashed(a tool bug, not a finding)"
fi
if [ "$cpp_rc" -ne 0 ] && [ "$cpp_n" -eq 0 ]; then
    echo "lint: cppcheck failed to run" >&2
    exit 2
fi
[ "$cpp_n" -eq 0 ] && [ "$tidy_n" -eq 0 ] && exit 0
exit 1
