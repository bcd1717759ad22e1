#!/usr/bin/env bash
# maint-speed.sh -- time the maintenance commands on a large store.
#
#   scripts/maint-speed.sh TOOL STORE [WORKDIR]
#
# TOOL is a built `bindlog` (a Release build for figures worth quoting),
# STORE a store directory (e.g. one bulk-loaded by
# `bindlog-bench --only bulk --events 5700000 --keep --dir DIR`, in DIR/bulk).
# Runs check, replay, export and import (into a new store) once each and
# prints wall time, records per second (log records of STORE) and maximum
# resident set size, the peak of its anonymous part (heap and stacks: the
# rest is the stores' memory-mapped files, which the kernel can drop at
# will), plus the bulk path's phase times (BINDLOG_BULK_DEBUG).
# WORKDIR (default: a new directory under $TMPDIR) receives the replayed
# store, the stream and the imported store, and is removed at the end
# unless KEEP=1.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 TOOL STORE [WORKDIR]" >&2
    exit 2
fi
tool=$1
store=$2
work=${3:-$(mktemp -d "${TMPDIR:-/tmp}/bindlog-speed-XXXXXX")}
mkdir -p "$work"
cleanup() { [ "${KEEP:-0}" = 1 ] || rm -rf "$work"; }
trap cleanup EXIT

records=$("$tool" -d "$store" stat | awk '$1 == "log_records:" { print $2 }')
echo "store: $store ($records log records, $(du -sh "$store" | cut -f1))"
printf '%-8s %9s %12s %10s %10s  %s\n' command seconds records/s "max RSS" "peak anon" \
    "bulk phases"

# run NAME COMMAND...: time one command, print its row
run() {
    local name=$1
    shift
    rm -f "$work/time"
    BINDLOG_BULK_DEBUG=1 /usr/bin/time -f '%e %M' -o "$work/time" "$@" \
        >"$work/$name.out" 2>"$work/$name.err" &
    local pid=$! anon=0 a child
    # sample the tool's anonymous memory (time's child) until it exits
    while kill -0 "$pid" 2>/dev/null; do
        for child in $(pgrep -P "$pid"); do
            a=$(awk '$1 == "RssAnon:" { print $2 }' "/proc/$child/status" 2>/dev/null || echo 0)
            [ "${a:-0}" -gt "$anon" ] && anon=$a
        done
        sleep 0.1
    done
    if ! wait "$pid"; then
        echo "$name failed:" >&2
        cat "$work/$name.err" >&2
        exit 1
    fi
    read -r secs rss <"$work/time"
    local phases
    phases=$(sed -n 's/^bulk: //p' "$work/$name.err" | tail -1)
    awk -v n="$name" -v s="$secs" -v r="$records" -v m="$rss" -v a="$anon" -v p="$phases" \
        'BEGIN { printf "%-8s %9.2f %12.0f %7.0f MB %7.0f MB  %s\n", n, s, r / s, m / 1024,
                 a / 1024, p }'
}

rm -rf "$work/replay" "$work/import" "$work/stream.blx"
run check "$tool" -d "$store" check
run replay "$tool" -d "$store" replay --out "$work/replay"
run export "$tool" -d "$store" export -o "$work/stream.blx"
run import "$tool" -d "$work/import" import -i "$work/stream.blx"
grep -h '^result:\|^digest:' "$work/check.out" "$work/replay.out" | sed 's/^/  /'
