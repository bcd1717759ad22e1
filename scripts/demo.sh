#!/usr/bin/env bash
# scripts/demo.sh -- the main job: a gateway workload against an embedded
# store, then what the operator's tools see in it.
#
# Usage: scripts/demo.sh BUILD_DIR STORE_DIR [gateway_sim arguments...]
# Called by `make demo`.  Every tool shown here opens the store read-only,
# as an operator would beside a running gateway.
set -euo pipefail

build=$1
store=$2
shift 2
cli="$build/tools/bindlog"
key=agent:main:telegram:dm:100000000

step() { printf '\n==== %s\n' "$*"; }

step "gateway simulation: 1,000 chats, splits, /new, /stop, /resume, late and racing splits"
rm -rf "$store"
"$build/examples/gateway_sim" "$store" "$@"

step "bindlog -d $store stat"
"$cli" -d "$store" stat

step "bindlog get $key"
"$cli" -d "$store" get "$key"

step "bindlog history $key   (last 8 events of this chat)"
"$cli" -d "$store" history "$key" | tail -n 8

sid=$("$cli" -d "$store" get "$key" --json | sed -n 's/.*"session_id":"\([^"]*\)".*/\1/p')
step "bindlog lineage $sid   (its chain from the root; a long one shortened here)"
lineage=$("$cli" -d "$store" lineage "$sid")
lines=$(wc -l <<<"$lineage")
if [ "$lines" -le 12 ]; then
    printf '%s\n' "$lineage"
else
    head -n 2 <<<"$lineage"
    echo "... $((lines - 8)) more sessions of the chain ..."
    tail -n 6 <<<"$lineage"
fi

step "bindlog dump --log --from the last 5 records"
head_lsn=$("$cli" -d "$store" stat | sed -n 's/^head_lsn: *//p')
"$cli" -d "$store" dump --log --from $((head_lsn - 4))

step "bindlog check   (checksums, LSN density, indexes, replay digest == state digest)"
"$cli" -d "$store" check
