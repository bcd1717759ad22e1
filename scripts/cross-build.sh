#!/usr/bin/env bash
# scripts/cross-build.sh -- compile and link bindlog for the platforms this
# machine is not: aarch64-macos, x86_64-macos and x86_64-linux-musl, with
# zig's C compiler (it carries every target's libc headers and links macOS
# binaries without an SDK).
#
# For each target: every file of src/core, src/lmdb, src/maint, src/platform
# and tools/ is compiled with the project's warnings and -Werror; LMDB and
# xxHash are compiled from their sources (scripts/vendor-sources.sh, without
# -Werror: they are not ours); then linked: the shared library
# (libbindlog.dylib / libbindlog.so), the CLI (bindlog) and the seed-scenario
# program tests/seed_check.c.  The musl build also RUNS seed_check (a static
# musl executable runs on any Linux).  The Node addon's C (bindings/node/src,
# against Node's headers) and the Python package's library (the same sources
# as the shared library, with the flags setup.py uses) are compiled for the
# macOS targets.  A table of what passed is printed at the end; the exit
# status is 1 if anything failed.
#
#   ZIG=/path/to/zig bash scripts/cross-build.sh [OUTDIR] [TARGET...]
#
# ZIG defaults to `zig` on PATH.  OUTDIR defaults to build-cross/.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build-cross}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(aarch64-macos x86_64-macos x86_64-linux-musl)
zig=${ZIG:-zig}
jobs=${JOBS:-2}
node_inc=${NODE_INCLUDE:-/usr/include/node}

if ! "$zig" version >/dev/null 2>&1; then
    echo "cross-build: no zig (set ZIG=/path/to/zig; .ci/run installs 0.11 from npm)" >&2
    exit 1
fi
bash "$root/scripts/vendor-sources.sh" || exit 1
vendor=$root/vendor
# zig keeps its cache of compiled libc pieces here: reused across runs
export ZIG_GLOBAL_CACHE_DIR=${ZIG_GLOBAL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/bindlog-zig}
export ZIG_LOCAL_CACHE_DIR=$ZIG_GLOBAL_CACHE_DIR

warn=(-std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wshadow -Wstrict-prototypes -Werror -O2)
lib_sources=()
for d in core lmdb maint platform; do
    lib_sources+=("$root"/src/$d/*.c)
done
tool_sources=("$root"/tools/*.c)

declare -A result
fail=0

for t in "${targets[@]}"; do
    o=$out/$t
    rm -rf "$o"
    mkdir -p "$o"
    mac=0
    extra=()
    if [[ $t == *macos* ]]; then
        mac=1
        extra=(-D_DARWIN_C_SOURCE=1)
    fi
    inc=(-I"$root/include" -I"$root/src" -I"$vendor/lmdb" -I"$vendor/xxhash")
    echo "== $t"

    # the dependencies, from source
    ok=1
    for f in "$vendor/lmdb/mdb.c" "$vendor/lmdb/midl.c" "$vendor/xxhash/xxhash.c"; do
        "$zig" cc -target "$t" -O2 -fPIC -w -I"$vendor/lmdb" -I"$vendor/xxhash" "${extra[@]}" \
            -c "$f" -o "$o/dep_$(basename "$f" .c).o" 2>>"$o/errors.log" || ok=0
    done
    result[$t,deps]=$([[ $ok == 1 ]] && echo ok || echo FAIL)

    # the library, -Werror
    ok=1
    for f in "${lib_sources[@]}"; do
        n=$(basename "$(dirname "$f")")_$(basename "$f" .c)
        "$zig" cc -target "$t" "${warn[@]}" -Wmissing-prototypes -fPIC -fvisibility=hidden \
            -DBINDLOG_BUILDING "${extra[@]}" "${inc[@]}" -c "$f" -o "$o/lib_$n.o" \
            2>>"$o/errors.log" || { ok=0; echo "  library: $f" >>"$o/errors.log"; }
    done
    nlib=$(ls "$o"/lib_*.o 2>/dev/null | wc -l)
    [[ $nlib == "${#lib_sources[@]}" ]] || ok=0
    result[$t,library]=$([[ $ok == 1 ]] && echo compiled || echo FAIL)

    # the shared library: LMDB and xxHash inside, only libc outside
    if [[ $ok == 1 ]]; then
        so=$o/libbindlog.so
        [[ $mac == 1 ]] && so=$o/libbindlog.dylib
        if "$zig" cc -target "$t" -shared -o "$so" "$o"/lib_*.o "$o"/dep_*.o -lpthread \
            2>>"$o/errors.log"; then
            result[$t,library]=linked
        else
            result[$t,library]="FAIL (link)"
        fi
    fi

    # the CLI and seed_check, linked with the library's objects (static
    # executables on musl)
    ok=1
    for f in "${tool_sources[@]}" "$root/tests/seed_check.c"; do
        "$zig" cc -target "$t" "${warn[@]}" -DBINDLOG_STATIC "${extra[@]}" -I"$root/include" \
            -c "$f" -o "$o/exe_$(basename "$f" .c).o" 2>>"$o/errors.log" || {
            ok=0
            echo "  program: $f" >>"$o/errors.log"
        }
    done
    static=()
    [[ $t == *musl* ]] && static=(-static)
    if [[ $ok == 1 ]] &&
        "$zig" cc -target "$t" "${static[@]}" -o "$o/bindlog" \
            $(ls "$o"/exe_*.o | grep -v seed_check) "$o"/lib_*.o "$o"/dep_*.o -lpthread \
            2>>"$o/errors.log"; then
        result[$t,cli]=linked
    else
        result[$t,cli]=FAIL
    fi
    if "$zig" cc -target "$t" "${static[@]}" -o "$o/seed_check" "$o/exe_seed_check.o" \
        "$o"/lib_*.o "$o"/dep_*.o -lpthread 2>>"$o/errors.log"; then
        result[$t,seed_check]=linked
        if [[ $t == x86_64-linux-musl && $(uname -m) == x86_64 ]]; then
            if TMPDIR=${TMPDIR:-/tmp} "$o/seed_check" >"$o/seed_check.out" 2>&1; then
                result[$t,seed_check]="linked, ran: $(tail -1 "$o/seed_check.out")"
            else
                result[$t,seed_check]="RUN FAILED: $(tail -1 "$o/seed_check.out")"
            fi
        fi
    else
        result[$t,seed_check]=FAIL
    fi

    # the bindings' C, macOS only (compile)
    if [[ $mac == 1 ]]; then
        ok=1
        if [[ -f $node_inc/node_api.h ]]; then
            for f in "$root"/bindings/node/src/*.c; do
                "$zig" cc -target "$t" -std=c11 -D_POSIX_C_SOURCE=200809L -D_DARWIN_C_SOURCE=1 \
                    -DBINDLOG_STATIC -Wall -Wextra -Werror -fvisibility=hidden -I"$node_inc" \
                    "${inc[@]}" -c "$f" -o "$o/node_$(basename "$f" .c).o" 2>>"$o/errors.log" ||
                    ok=0
            done
            result[$t,node]=$([[ $ok == 1 ]] && echo compiled || echo FAIL)
        else
            result[$t,node]="skipped (no $node_inc/node_api.h)"
        fi
        # the Python package's library: setup.py's flags (-fPIC, hidden
        # visibility, BINDLOG_BUILDING), linked as the .dylib it ships
        if "$zig" cc -target "$t" -shared -o "$o/python-libbindlog.dylib" "$o"/lib_*.o \
            "$o"/dep_*.o -lpthread 2>>"$o/errors.log"; then
            result[$t,python]=linked
        else
            result[$t,python]=FAIL
        fi
    fi
done

echo
printf '%-20s %-10s %-10s %-10s %-10s %-10s %s\n' target deps library cli node python seed_check
for t in "${targets[@]}"; do
    printf '%-20s %-10s %-10s %-10s %-10s %-10s %s\n' "$t" "${result[$t,deps]}" \
        "${result[$t,library]}" "${result[$t,cli]}" "${result[$t,node]:--}" \
        "${result[$t,python]:--}" "${result[$t,seed_check]}"
    for k in deps library cli node python seed_check; do
        case ${result[$t,$k]:-} in *FAIL*) fail=1 ;; esac
    done
    if [[ -s $out/$t/errors.log ]]; then
        echo "--- $t: $out/$t/errors.log"
        head -20 "$out/$t/errors.log"
    fi
done
exit $fail
