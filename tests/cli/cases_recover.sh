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

# bindlog.wal: a writer acknowledged 100 FULL events and died without
# closing (tests/cli/dying_writer.c), so they are in the log only.
if command -v python3 >/dev/null && [ -n "${BINDLOG_DYING_WRITER:-}" ]; then
# frame FRAME_LSN of DIR/bindlog.wal: flip a byte of its body, or zero the
# second half of it (a torn write)
walpoke() {
    python3 -c "
import struct, sys
p, lsn, how = sys.argv[1] + '/bindlog.wal', int(sys.argv[2]), sys.argv[3]
b = bytearray(open(p, 'rb').read())
for o in range(4096, len(b) - 64, 8):
    if b[o:o+4] == b'BLWF' and struct.unpack_from('<Q', b, o + 24)[0] == lsn:
        size = (64 + struct.unpack_from('<I', b, o + 36)[0] + 7) & ~7
        if how == 'flip':
            b[o + 64 + 20] ^= 0x10
        else:
            b[o + size // 2:o + size] = bytes(size - size // 2)
        break
open(p, 'wb').write(b)
" "$@"
}
export -f walpoke
# One flipped byte in the body of frame 50: every command refuses the
# store, naming the byte and LSNs 50-100; check reports it (exit 1);
# recover keeps the 99 intact frames and names LSN 50 lost (exit 1).
tsh wal_flipped_frame '"$BINDLOG_DYING_WRITER" wal1 100 && walpoke wal1 50 flip &&
{ "$BL" -d wal1 get k080; echo "get exit $?"; "$BL" -d wal1 check; echo "check exit $?";
  "$BL" recover wal1 --out wal1-new; echo "recover exit $?";
  "$BL" -d wal1-new get k080 | head -1; "$BL" -d wal1-new check | tail -1; }'
# A torn last frame is the tail a crash may leave: the store opens at 99.
tsh wal_torn_tail '"$BINDLOG_DYING_WRITER" wal2 100 && walpoke wal2 100 torn &&
{ "$BL" -d wal2 stat --json | grep -o "\"head_lsn\":[0-9]*"; "$BL" -d wal2 check | tail -1; }'
# Another store'"'"'s log copied over a store never checkpointed: refused;
# recover does not take its events and says the log was not read (exit 1).
tsh wal_foreign_log '"$BINDLOG_DYING_WRITER" wal3 100 && "$BINDLOG_DYING_WRITER" wal4 100 &&
cp wal4/bindlog.wal wal3/bindlog.wal &&
{ "$BL" -d wal3 get k080; echo "get exit $?"; "$BL" -d wal3 check; echo "check exit $?";
  "$BL" recover wal3 --out wal3-new; echo "recover exit $?"; } 2>&1 |
sed -E "s/(salt|is) [0-9a-f]{16}/\1 <salt>/g"'
fi
