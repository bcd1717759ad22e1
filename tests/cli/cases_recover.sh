# cases_recover.sh -- damaged stores and `bindlog recover` (sourced by cases.sh).
#
# Copies of the test store are damaged with dd or a few lines of Python (a
# zeroed log leaf, a zeroed log root, a cut file); the commands must say
# what is damaged and where, never crash, and recover must build a store
# that checks clean and say what was lost.

t help_recover recover --help
t recover_no_out recover "$STORE"
t recover_intact recover "$STORE" --out rec-intact
t recover_intact_check -d rec-intact check
t recover_not_new recover "$STORE" --out "$STORE"

if command -v python3 >/dev/null; then
# A store of 600 events (import-json of a generated sessions.json), then
# the first leaf of its log zeroed: check names the page and its LSNs,
# dump refuses, recover rebuilds it with the stored state as evidence.
tsh recover_zeroed_leaf 'python3 -c "
import json
print(json.dumps({\"agent:main:telegram:dm:%d\" % i: {\"sessionId\": \"s-%d\" % i, \"updatedAt\": 1767225600000 + i} for i in range(600)}))
" > big.json && "$BL" -d big import-json --format openclaw big.json >/dev/null 2>&1 &&
python3 -c "
import struct
p = \"big/data.mdb\"
b = bytearray(open(p, \"rb\").read())
ps = 4096
leaves = []
for pg in range(2, len(b) // ps):
    o = pg * ps
    pgno, flags, lower = struct.unpack_from(\"<QxxHH\", b, o)
    if pgno != pg or flags != 2 or lower < 18:
        continue
    n = (lower - 16) // 2
    offs = struct.unpack_from(\"<%dH\" % n, b, o + 16)
    if all(struct.unpack_from(\"<H\", b, o + x + 6)[0] == 8 for x in offs):
        leaves.append((struct.unpack_from(\">Q\", b, o + offs[0] + 8)[0], pg))
leaves.sort()
assert len(leaves) >= 2
b[leaves[1][1] * ps:(leaves[1][1] + 1) * ps] = bytes(ps)
open(p, \"wb\").write(b)
" && { "$BL" -d big check; echo "check exit $?"; "$BL" -d big dump --log >/dev/null; echo "dump exit $?"; "$BL" recover big --out big-new; echo "recover exit $?"; "$BL" -d big-new check | tail -1; "$BL" -d big-new get agent:main:telegram:dm:77 | head -1; }'
fi

tsh recover_cut_file 'cp -r "$STORE" cut && size=$(stat -c %s cut/data.mdb) &&
truncate -s $((size / 2)) cut/data.mdb &&
{ "$BL" -d cut get "$K"; echo "get exit $?"; "$BL" recover cut --out cut-new --json | head -1 | grep -o "\"records_found\":[0-9]*,\"head_lsn\":[0-9]*"; echo "recover exit ${PIPESTATUS[0]}"; "$BL" -d cut-new check | tail -1; }'
