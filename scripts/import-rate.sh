#!/usr/bin/env bash
# scripts/import-rate.sh -- how fast `bindlog import-json` moves a sessions.json in.
#
#   scripts/import-rate.sh BINDLOG_BINARY [ENTRIES [RUNS]]
#
# Writes an openclaw-format sessions.json of ENTRIES (default 10000) keys,
# each with a realistic entry (session id, update time, channel, token
# counts), then, RUNS times (default 5), imports it into a new store with the
# default durability (FULL) and times the whole command: reading and parsing
# the file, sorting by time, and committing (entries share group commits).
# Prints each run and the median rate in entries/s.  Issue 14 asks for at
# least 50,000 entries/s on a 10k-entry file; this is where that is measured
# (never in a timed unit test).
set -euo pipefail

bin=${1:?usage: $0 BINDLOG_BINARY [ENTRIES [RUNS]]}
n=${2:-10000}
runs=${3:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/bindlog-import-rate.XXXXXX")
trap 'rm -rf "$work"' EXIT

awk -v n="$n" 'BEGIN {
    printf "{\n"
    for (i = 0; i < n; i++)
        printf "%s  \"agent:main:telegram:dm:%d\": {\"sessionId\": \"%08x-4d2a-4c1e-9f00-%012d\", \"updatedAt\": %.0f, \"chatType\": \"direct\", \"lastChannel\": \"telegram\", \"inputTokens\": %d, \"outputTokens\": %d}\n", (i ? "," : ""), 100000 + i, i * 2654435761 % 4294967296, i, 1767225600000 + ((i * 7919) % n) * 1000, i * 13 % 9000, i * 31 % 20000
    printf "}\n"
}' > "$work/sessions.json"
echo "file: $n entries, $(wc -c < "$work/sessions.json") bytes"

rates=()
for r in $(seq "$runs"); do
    rm -rf "$work/store"
    t0=$(date +%s%N)
    "$bin" -d "$work/store" import-json --format openclaw "$work/sessions.json" > "$work/out" 2>&1 || {
        cat "$work/out"; exit 1; }
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    rate=$(( n * 1000 / (ms > 0 ? ms : 1) ))
    grep -q "^applied: *$n\$" "$work/out" || { echo "not every entry applied:"; cat "$work/out"; exit 1; }
    echo "run $r: $ms ms, $rate entries/s"
    rates+=("$rate")
done
median=$(printf '%s\n' "${rates[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
echo "median: $median entries/s ($n entries, durability full, $(nproc) cores)"
