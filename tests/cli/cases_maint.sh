# cases_maint.sh -- steps for check, replay, compact, export and import,
# sourced by cases.sh when the tool has them.  They run on the store that
# cases.sh built (head LSN 10, times 00:00:00..00:00:08).

# ---- check ----------------------------------------------------------------------
t check -d "$STORE" check
t check_json -d "$STORE" check --json
t help_check check --help

# ---- replay ---------------------------------------------------------------------
t replay_full -d "$STORE" replay --out rp-full
t replay_to_lsn -d "$STORE" replay --out rp-5 --to-lsn 5
t replay_to_lsn_bindings -d rp-5 dump --bindings
t replay_to_time -d "$STORE" replay --out rp-t --to-time 2026-01-01T00:00:04Z --json
t replay_to_time_ms -d "$STORE" replay -o rp-tms --to-time 1767225603000
t replay_check -d rp-full check
t replay_not_empty -d "$STORE" replay --out rp-full
t replay_no_out -d "$STORE" replay
t replay_both_cuts -d "$STORE" replay --out x --to-lsn 3 --to-time 1
t replay_bad_time -d "$STORE" replay --out x --to-time 2026-01-01T00:00:00
t replay_bad_date -d "$STORE" replay --out x --to-time 2026-02-30
t help_replay replay --help

# ---- export / import ----------------------------------------------------------------
t export_full -d "$STORE" export -o full.bls
# export -o writes a new temporary beside FILE and renames it over FILE: a
# link planted at the old predictable name FILE.partial leads nowhere, no
# temporary is left, and a FILE that is not a regular file is refused and
# left as it was (issue 16: root's export followed shared/bk.bls.partial
# into a victim, and replaced /dev/null with a regular file).
tsh export_planted_partial 'echo victim > victim.txt && ln -s victim.txt shared.bls.partial &&
"$BL" -d "$STORE" export -o shared.bls >/dev/null; echo "exit $?"
cat victim.txt; cmp shared.bls full.bls && echo "shared.bls complete"
ls -A | grep -c "^\.shared" || true'
tsh export_dev_null '"$BL" -d "$STORE" export -o /dev/null; echo "exit $?"; test -c /dev/null && echo "/dev/null is still a character device"'
tsh export_fifo 'mkfifo out.fifo && "$BL" -d "$STORE" export -o out.fifo; echo "exit $?"; test -p out.fifo && echo "still a fifo"'
tsh export_directory 'mkdir out.dir && "$BL" -d "$STORE" export -o out.dir; echo "exit $?"; test -d out.dir && ls -A out.dir | wc -l'
tsh export_symlink 'echo victim > victim2.txt && ln -s victim2.txt link.bls && "$BL" -d "$STORE" export -o link.bls; echo "exit $?"; cat victim2.txt; test -L link.bls && echo "still a link"'
tsh export_over_regular 'echo old > old.bls && "$BL" -d "$STORE" export -o old.bls >/dev/null && cmp old.bls full.bls && echo "replaced"; ls -l old.bls | cut -c1-10'
tsh export_no_directory '"$BL" -d "$STORE" export -o no-such-dir/x.bls; echo "exit $?"'
t import_full -d restored import -i full.bls
tsh import_same_digest '"$BL" -d "$STORE" stat | grep "^digest"; "$BL" -d restored stat | grep "^digest"'
tsh export_stdout '"$BL" -d "$STORE" export > piped.bls && cmp piped.bls full.bls && echo identical'
t import_into_nonempty -d restored import -i full.bls
# Incremental: a standby at LSN 5 (a replay) catches up with a stream from 6.
t export_incremental -d "$STORE" export --from-lsn 6 -o incr.bls --json
t import_incremental -d rp-5 import -i incr.bls
t import_incremental_again -d rp-5 import -i incr.bls
tsh import_incremental_digest '"$BL" -d rp-5 check --json | grep -o "\"state_digest\":\"[0-9a-f]*\""'
tsh import_stdin '"$BL" -d from-stdin import --json < full.bls'
tsh import_torn 'head -c 100 full.bls > torn.bls && "$BL" -d torn import -i torn.bls; rc=$?; test -e torn || echo "no store left at torn"; exit $rc'
t import_missing_file -d x import -i no-such-file.bls
# A refused import leaves nothing behind (issue 16: `import -i /etc/hostname`
# into a new directory left a store there, which a later write without
# --create then used).  Into a missing or empty directory the store is built
# beside it and moved into place once accepted; into a store, nothing of a
# refused stream is applied (same digest).
tsh import_refused_new_dir 'echo "not a stream" > junk.txt
"$BL" -d newt import -i junk.txt; echo "exit $?"
test -e newt || echo "no newt"; ls -A | grep -c "import-" || true
"$BL" -d newt bind k s; echo "exit $?"; test -e newt || echo "still no newt"'
tsh import_refused_empty_dir 'mkdir emptyd && "$BL" -d emptyd import -i junk.txt; echo "exit $?"; ls -A emptyd | wc -l'
# An empty directory whose parent the importer may not write in has no room
# for a store beside it: the store is made in place, and a refused stream
# unmakes every file of it (the log and shared memory included).  Denying
# the parent takes a user other than root: run where root may become nobody
# and nobody may run the tool with nothing on stderr (a coverage build's tool
# says there that nobody cannot write its counts).
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null &&
    err=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$BL" --version 2>&1 >/dev/null) &&
    [ -z "$err" ]; then
    tsh import_refused_in_place 'd=$(mktemp -d) && chmod 755 "$d" && mkdir "$d/empty" && chown 65534:65534 "$d/empty" &&
head -c -1 full.bls > "$d/torn.bls" && cp full.bls "$d/full.bls" && chmod 644 "$d/torn.bls" "$d/full.bls" || exit 9
nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
nobody "$BL" -d "$d/empty" import -i "$d/torn.bls" 2>&1 | sed "s|$d|D|g"; echo "exit ${PIPESTATUS[0]}"
echo "left in the directory: $(ls -A "$d/empty" | wc -l) files"
nobody "$BL" -d "$d/empty" import -i "$d/full.bls" >/dev/null; echo "exit $?"
ls -A "$d/empty"; nobody "$BL" -d "$d/empty" check | tail -1
rm -rf "$d"'
fi
tsh import_refused_into_store 'cp -r restored ahead && BINDLOG_CLOCK_MS=1767225609000 "$BL" -d ahead bind extra:1 extra-1 >/dev/null &&
BINDLOG_CLOCK_MS=1767225609000 "$BL" -d ahead bind extra:2 extra-2 >/dev/null &&
"$BL" -d ahead export --from-lsn 11 -o ahead.bls >/dev/null && head -c -1 ahead.bls > ahead-torn.bls
a=$("$BL" -d restored stat --json | grep -o "\"digest\":\"[0-9a-f]*\",\"digest_lsn\":[0-9]*")
"$BL" -d restored import -i ahead-torn.bls; echo "exit $?"
b=$("$BL" -d restored stat --json | grep -o "\"digest\":\"[0-9a-f]*\",\"digest_lsn\":[0-9]*")
[ "$a" = "$b" ] && echo "digest and head unchanged: $b"'
tsh import_new_nested '"$BL" -d nest/a/b import -i full.bls >/dev/null; echo "exit $?"; ls -A nest/a/b; "$BL" -d nest/a/b check | tail -1
"$BL" -d nest2/a/b import -i junk.txt 2>/dev/null; echo "exit $?"; test -e nest2 || echo "no nest2"'
# On a terminal, work that lasts over a second shows a progress line on
# stderr and wipes it before the report: an import fed through a FIFO that
# stays empty for 2 s after the new store's data.mdb appears (so however
# slowly the tool starts, under memcheck too), run on a pseudo-terminal
# (script(1); ^M is a carriage return).  Without a terminal, as in every
# other case here, none.
if command -v script >/dev/null && script -qec true /dev/null >/dev/null 2>&1; then
    tsh import_progress_on_a_terminal 'rm -f slow.fifo && mkfifo slow.fifo || exit 9
{ (for i in $(seq 600); do ls .slow.import-*/data.mdb >/dev/null 2>&1 && break; sleep 0.05; done
   sleep 2; cat full.bls) > slow.fifo & }
script -qec "\"$BL\" -d slow import -i slow.fifo" /dev/null | cat -v; echo "exit ${PIPESTATUS[0]}"'
fi
t help_export export --help
t help_import import --help

# ---- compact --------------------------------------------------------------------
t compact_none -d "$STORE" compact
t compact_two_modes -d "$STORE" compact --keep-from 3 --keep-last 2
t compact_bad_duration -d "$STORE" compact --older-than 5x
t compact_negative_duration -d "$STORE" compact --older-than -5s
t compact_keep_from -d "$STORE" compact --keep-from 4
t compact_check -d "$STORE" check
t compact_history -d "$STORE" history "$K"
tsh compact_older_than 'BINDLOG_CLOCK_MS=1767225610000 "$BL" -d "$STORE" compact --older-than 5s --json'
t compact_keep_last -d "$STORE" compact --keep-last 2
t compact_stat -d "$STORE" stat
t compact_dump -d "$STORE" dump
tsh compact_replay_digest '"$BL" -d "$STORE" replay --out rp-after --json'
t vacuum -d "$STORE" compact --vacuum
t vacuum_check -d "$STORE" check
# A writer holding the store open (an import waiting on a FIFO, past its
# open: it holds bindlog.lock) makes vacuum refuse with EBUSY; once it is
# gone vacuum runs.
tsh vacuum_busy 'mkfifo fifo
"$BL" -d "$STORE" import -i fifo >/dev/null 2>&1 &
pid=$!
exec 3>fifo
for i in $(seq 100); do ls -l /proc/$pid/fd 2>/dev/null | grep -q bindlog.lock && break; sleep 0.05; done
"$BL" -d "$STORE" compact --vacuum; echo "exit $?"
exec 3>&-
wait $pid
"$BL" -d "$STORE" compact --vacuum >/dev/null; echo "exit $?"'
t help_compact compact --help

# ---- a damaged copy -------------------------------------------------------------
# Flip one byte of a reason that only a log record holds: check names the
# record's LSN and exits 1.
if command -v python3 >/dev/null; then
tsh check_corrupt 'cp -r "$STORE" bad && BINDLOG_CLOCK_MS=1767225620000 "$BL" -d bad invalidate "$K" --reason zz-flip-me-zz >/dev/null &&
python3 -c "
import sys
p = \"bad/data.mdb\"
b = bytearray(open(p, \"rb\").read())
i = b.find(b\"zz-flip-me-zz\")
assert i >= 0 and b.find(b\"zz-flip-me-zz\", i + 1) < 0
b[i + 3] ^= 0x01
open(p, \"wb\").write(b)
" && "$BL" -d bad check'
fi

# A flipped length byte in a log record's node header (a 536 MB value that
# runs off the map) killed dump --log and check with SIGBUS (issue 16):
# now dump stops with an error (exit 3), and check reports it (exit 1).
if command -v python3 >/dev/null; then
tsh check_flipped_length 'cp -r "$STORE" flipped && h=$("$BL" -d flipped stat --json | grep -o "\"head_lsn\":[0-9]*" | cut -d: -f2) && python3 -c "
import struct, sys
p = \"flipped/data.mdb\"
b = bytearray(open(p, \"rb\").read())
key = struct.pack(\">Q\", int(sys.argv[1]))
n = 0
i = b.find(key)
while i >= 0:
    lo, hi, fl, ks = struct.unpack_from(\"<HHHH\", b, i - 8)
    if ks == 8 and fl == 0 and hi == 0 and b[i + 8] == 4:
        struct.pack_into(\"<H\", b, i - 6, 0x2000)
        n += 1
    i = b.find(key, i + 1)
assert n > 0
open(p, \"wb\").write(b)
" "$h" && "$BL" -d flipped dump --log >/dev/null; echo "dump exit $?"; "$BL" -d flipped check | grep -E "^(problems|first_bad_lsn|message|result)"'
fi

# ---- beside a writing process ----------------------------------------------------
# A writer process binds 60 keys while check, dump and compact run over and
# over on the same store; every run must succeed and the store check clean.
tsh live_writer 'cp -r "$STORE" live
( for i in $(seq 60); do "$BL" -d live bind "live:$i" "live-$i" >/dev/null || exit 1; done ) &
w=$!
runs=0
while kill -0 $w 2>/dev/null; do
    "$BL" -d live check >/dev/null || { echo "check failed during writes"; exit 1; }
    "$BL" -d live dump --json >/dev/null || { echo "dump failed during writes"; exit 1; }
    "$BL" -d live compact --keep-last 5 >/dev/null || { echo "compact failed during writes"; exit 1; }
    runs=$((runs + 1))
done
wait $w; echo "writer exit $?"
[ $runs -gt 0 ] && echo "inspected while writing"
"$BL" -d live check | tail -1
"$BL" -d live stat --json | grep -o "\"live_bindings\":[0-9]*"'
