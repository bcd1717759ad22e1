#!/usr/bin/env bash
# scripts/recover-exact.sh -- how often `bindlog recover` rebuilds a store
# whose log lost frames to exactly the state the writer had.
#
#   scripts/recover-exact.sh BUILD_DIR [OTHER_CLI]
#
# For the damage campaign's log kinds that damage frames in place (whdr,
# wbody, wzero, wswap, wdup, wfframe: 250 copies, as in its --full run),
# writes each copy with BUILD_DIR/tests/damage_campaign --write-copy,
# recovers it with BUILD_DIR/tools/bindlog (and OTHER_CLI, an older build's,
# when given) and compares the new store's state digest with the undamaged
# store's.  Among the copies recover rebuilt with a loss (exit 1), the new
# store can only equal the undamaged one when every lost event's effect was
# overwritten by later intact events; the count says how often it does.
set -u
B=${1:?usage: $0 BUILD_DIR [OTHER_CLI]}
CLI=$B/tools/bindlog
OTHER=${2:-}
CAMP=$B/tests/damage_campaign
W=$(mktemp -d "${TMPDIR:-/tmp}/recover-exact.XXXXXX")
trap 'rm -rf "$W"' EXIT
copies=0 lossy=0 same=0 same_other=0
for kind in whdr:60 wbody:60 wzero:40 wswap:30 wdup:30 wfframe:30; do
    k=${kind%%:*} n=${kind##*:}
    for ((i = 0; i < n; i++)); do
        rm -rf "$W/c" "$W/n" "$W/o" "$W/orig"
        msg=$("$CAMP" --cli "$CLI" --work "$W/work" --kinds log --write-copy "$k:$i" "$W/c" 2>&1)
        st=$(printf '%s\n' "$msg" | grep -o 'store [A-D]' | head -1 | cut -c7)
        [ -n "$st" ] || continue
        cp -r "$W/work/log/log-stores/$st" "$W/orig"
        want=$("$CLI" -d "$W/orig" stat 2>/dev/null | awk '/^digest:/{print $2}')
        copies=$((copies + 1))
        "$CLI" recover "$W/c" --out "$W/n" >"$W/n.txt" 2>&1
        [ $? -eq 1 ] || continue
        lossy=$((lossy + 1))
        [ "$(awk '/^digest:/{print $2}' "$W/n.txt")" = "$want" ] && same=$((same + 1))
        if [ -n "$OTHER" ]; then
            "$OTHER" recover "$W/c" --out "$W/o" >"$W/o.txt" 2>&1
            [ "$(awk '/^digest:/{print $2}' "$W/o.txt")" = "$want" ] && same_other=$((same_other + 1))
        fi
    done
done
echo "copies: $copies; recovered with a loss: $lossy; new store's digest equal to the undamaged store's: $same"
[ -n "$OTHER" ] && echo "the same with $OTHER: $same_other"
exit 0
