#!/usr/bin/env bash
# scripts/damage-campaign.sh -- issue 16's damage campaign, reproducible.
#
#   scripts/damage-campaign.sh [BUILD_DIR] [-- damage_campaign options...]
#
# Builds (if needed) a Release tree in BUILD_DIR (default build-release/),
# makes the 5,154-event store with examples/gateway_sim (as scripts/demo.sh
# runs it), then runs tests/damage_campaign with --full: 2,760 damaged copies
# (160 truncations, 1,100 single-byte changes, 200 multi-byte, 200 page
# headers, 150 random pages, 150 zeroed pages, 800 meta-page damages), each
# through ten commands of the Release CLI under a timeout, every copy check
# flags through `bindlog recover` too.  Prints the crash / hang table per
# damage kind and command, wrong answers and failed recoveries, and every
# copy that crashed or hung (kind, index, the damage) for reproduction.
#
# To measure another CLI on the same copies (e.g. main's, before a change):
#   scripts/damage-campaign.sh build-release -- --cli /path/to/other/bindlog
# A short run: scripts/damage-campaign.sh build-release -- --per-kind 5
# The copies depend only on the seed (--seed, default 16) and the store.
#
# About 15 minutes on 2 idle cores; docs/reliability.md has the figures.
set -euo pipefail

cd "$(dirname "$0")/.."
build=build-release
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    build=$1
    shift
fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift

if [ ! -x "$build/tools/bindlog" ] || [ ! -x "$build/tests/damage_campaign" ] ||
    [ ! -x "$build/examples/gateway_sim" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$build" -j2 --target bindlog_cli gateway_sim damage_campaign
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/damage-campaign.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "making the 5,154-event store with gateway_sim..." >&2
"$build/examples/gateway_sim" "$work/store" >/dev/null

"$build/tests/damage_campaign" --store "$work/store" --cli "$build/tools/bindlog" \
    --work "$work/copies" --full --jobs 2 "$@"
