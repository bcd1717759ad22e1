#!/usr/bin/env bash
# scripts/damage-campaign.sh -- the damage campaign, reproducible.
#
#   scripts/damage-campaign.sh [BUILD_DIR] [-- damage_campaign options...]
#
# Builds (if needed) a Release tree in BUILD_DIR (default build-release/) and
# runs tests/damage_campaign with --full, in two halves:
#
# data.mdb: makes the 5,154-event store with examples/gateway_sim (as
# scripts/demo.sh runs it): 2,760 damaged copies (160 truncations, 1,100
# single-byte changes, 200 multi-byte, 200 page headers, 150 random pages,
# 150 zeroed pages, 800 meta-page damages), each through ten commands of the
# Release CLI under a timeout, every copy check flags through `bindlog
# recover` too.  Prints the crash / hang table per damage kind and command,
# wrong answers and failed recoveries.
#
# bindlog.wal and bindlog.shm: stores whose writer acknowledged 110 or 120
# FULL events and died without closing (one never checkpointed, one
# checkpointed after 40), 392 damaged copies over 16 kinds (truncation, torn
# tail, flipped header and body bytes, zeroed ranges, swapped, duplicated and
# foreign frames, foreign logs, shortened or grown rings, the file header;
# the shm flipped, zeroed, cut, deleted, foreign), each through a read-write
# and a read-only open, a get of every key, check, recover and the ten CLI
# commands.  Prints silent losses / refusals / dropped tails per kind and
# command, then crashes and hangs, then one line per loss.
#
# Every crash, hang or loss is printed with its copy (kind, index, the
# damage) for reproduction.
#
# To measure another CLI and library on the same copies (e.g. main's, before
# a change), build it and run its damage_campaign:
#   scripts/damage-campaign.sh /path/to/other/build-release
# Only one half: scripts/damage-campaign.sh build-release -- --kinds log
# (or --kinds data, or a list of kinds: see damage_campaign's usage).
# A short run: scripts/damage-campaign.sh build-release -- --per-kind 5
# The copies depend only on the seed (--seed, default 16) and the stores.
# The exit status is 1 if anything crashed, hung or lost an acknowledged
# event silently (--allow-loss: losses are counted, not failed on).
#
# About 15 minutes for data.mdb and 1.5 for the log on 2 idle cores;
# docs/reliability.md has the figures.
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
    --work "$work/copies" --full --jobs 2 --strict "$@"
