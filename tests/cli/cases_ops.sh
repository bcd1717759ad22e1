# cases_ops.sh -- steps for operating a gateway on bindlog (issue 14):
# errors that name what failed, stat --prometheus, dump --log --follow and
# import-json.  Sourced by cases.sh after the maintenance steps.
# The JSON files are copied beside the store, so messages name them as
# data/NAME (the source path differs between checkouts).
cp -r "$HERE/data" "$WORK/data"
D=data
export D HERE

# ---- stat --prometheus ------------------------------------------------------------
t stat_prometheus -d "$STORE" stat --prometheus
t usage_stat_two_formats -d "$STORE" stat --json --prometheus
# The output passes a strict checker of the text format (tests/cli/promcheck.py),
# and Prometheus' own linter when it is installed (scripts/deps.sh installs it).
if command -v python3 >/dev/null; then
    tsh stat_prometheus_valid '"$BL" -d "$STORE" stat --prometheus | python3 "$HERE/promcheck.py"'
fi
if command -v promtool >/dev/null; then
    tsh stat_prometheus_promtool '"$BL" -d "$STORE" stat --prometheus | promtool check metrics && echo "promtool check metrics: ok"'
fi

# ---- dump --log --follow --------------------------------------------------------------
t usage_follow_bindings -d "$STORE" dump --bindings --follow
t usage_follow_to -d "$STORE" dump --follow --to 5
# A follower process prints what two writer processes commit meanwhile: every
# record once, in LSN order, none missed; SIGTERM ends it with exit 0.
tsh follow_cross_process '"$BL" -d fol bind --create k0 s0 >/dev/null || exit 1
"$BL" -d fol dump --log --follow --json > fol.out 2> fol.err &
f=$!
( for i in $(seq 1 30); do "$BL" -d fol bind "a:$i" "sa-$i" >/dev/null || exit 1; done ) &
w1=$!
( for i in $(seq 1 30); do "$BL" -d fol bind "b:$i" "sb-$i" >/dev/null || exit 1; done ) &
w2=$!
wait $w1; echo "writer 1 exit $?"
wait $w2; echo "writer 2 exit $?"
for i in $(seq 200); do [ "$(wc -l < fol.out)" -ge 61 ] && break; sleep 0.05; done
kill -TERM $f; wait $f; echo "follower exit $?"
sed -e "s/^{\"lsn\":\([0-9]*\),.*/\1/" fol.out | awk "\$1 != NR { bad = 1 } END { print (bad ? \"OUT OF ORDER\" : \"in order, none twice, none missed:\"), NR, \"records\" }"
cat fol.err'
# SIGINT ends it the same way; --from starts past the head and waits for it.
tsh follow_sigint '"$BL" -d fol dump --follow --from 62 > fol2.out 2>&1 &
f=$!
sleep 0.3
"$BL" -d fol bind c:1 sc-1 >/dev/null
for i in $(seq 100); do [ "$(wc -l < fol2.out)" -ge 2 ] && break; sleep 0.05; done
kill -INT $f; wait $f; echo "follower exit $?"
sed -e "s/  20[0-9-]*T[0-9:.]*Z  /  <time>  /" fol2.out'

# ---- errors name what failed -----------------------------------------------------------
tsh error_foreign_dir 'mkdir -p foreign && echo mine > foreign/notes.txt && "$BL" -d foreign bind k s --create'

# ---- import-json ---------------------------------------------------------------------
t help_import_json import-json --help
t usage_import_json_no_format -d ij import-json "$D/openclaw.json"
t usage_import_json_bad_format -d ij import-json --format clawdbot "$D/openclaw.json"
t usage_import_json_no_file -d ij import-json --format openclaw
t import_json_openclaw_dry -d ij import-json --format openclaw "$D/openclaw.json" --dry-run
tsh import_json_dry_wrote_nothing '[ -e ij ] && echo "store created" || echo "no store created"'
t import_json_openclaw -d ij import-json --format openclaw "$D/openclaw.json"
t import_json_openclaw_again -d ij import-json --format openclaw "$D/openclaw.json" --json
t import_json_openclaw_log -d ij dump
t import_json_openclaw_check -d ij check
tsh import_json_hermes 'TZ=UTC "$BL" -d ijh import-json --format hermes "$D/hermes.json"'
tsh import_json_hermes_json 'TZ=UTC "$BL" -d ijh import-json --format hermes "$D/hermes.json" --json'
t import_json_hermes_sessions -d ijh dump --sessions --json
# Without an offset a hermes time is the machine's local time.
tsh import_json_hermes_tz 'TZ=Europe/Paris "$BL" -d ijp import-json --format hermes "$D/hermes.json" >/dev/null 2>&1; "$BL" -d ijp dump --log --json | sed -e "s/.*\"time\":\"\([^\"]*\)\".*\"key\":\"\([^\"]*\)\".*/\1 \2/"'
# Files that are not JSON, or not the right JSON: nothing imported, exit 3.
for b in trailing-comma comment truncated utf8 array; do
    t "import_json_bad_$b" -d ijbad import-json --format openclaw "$D/bad-$b.json"
done
tsh import_json_bad_wrote_nothing '[ -e ijbad ] && echo "store created" || echo "no store created"'
tsh import_json_deep 'printf "{\"k\": {\"sessionId\": \"s\", \"updatedAt\": 1, \"x\": " > deep.json; for i in $(seq 70); do printf "[" >> deep.json; done; for i in $(seq 70); do printf "]" >> deep.json; done; printf "}}\n" >> deep.json; "$BL" -d ijdeep import-json --format openclaw deep.json'
tsh import_json_huge 'truncate -s 300M huge.json && "$BL" -d ijhuge import-json --format openclaw huge.json; rc=$?; rm -f huge.json; [ -e ijhuge ] && echo "store created" || echo "no store created"; exit $rc'
tsh import_json_missing_file '"$BL" -d ijm import-json --format openclaw no-such.json'
tsh import_json_stdin '"$BL" -d ijs import-json --format openclaw - < "$D/openclaw.json" >/dev/null 2>&1; echo "exit $?"; "$BL" -d ijs stat --json | grep -o "\"head_lsn\":[0-9]*"'
# 10,000 entries (epoch ms, in reverse time order): all applied in time
# order, then a second run all already.  (The rate is measured by
# scripts/import-rate.sh, not here.)
tsh import_json_10k 'awk "BEGIN { printf \"{\\n\"; for (i = 0; i < 10000; i++) printf \"%s\\\"agent:main:telegram:dm:%d\\\": {\\\"sessionId\\\": \\\"sess-%05d\\\", \\\"updatedAt\\\": %.0f, \\\"chatType\\\": \\\"direct\\\"}\\n\", (i ? \",\" : \"\"), i, i, 1767225600000 + (10000 - i) * 1000; printf \"}\\n\" }" > big.json
"$BL" -d ij10k import-json --format openclaw big.json; echo "exit $?"
"$BL" -d ij10k import-json --format openclaw big.json | grep -E "^(applied|already)"; echo "exit $?"
"$BL" -d ij10k dump --from 1 --to 1 --json | grep -o "\"key\":\"[^\"]*\""
"$BL" -d ij10k check | tail -1'

# ---- expire: the cron-run cleanup --------------------------------------------------------
# Five finished cron runs a day old, one from this morning, and a chat key
# as old as the oldest runs: --prefix keeps the chat key, a dry run writes
# nothing, and a second run finds nothing left.
t help_expire expire --help
t usage_expire_no_idle -d exp expire
t usage_expire_bad_idle -d exp expire --idle 3
tsh expire_cron_runs 'for i in 1 2 3 4 5; do BINDLOG_CLOCK_MS=$((1767225600000 + i * 60000)) "$BL" -d exp new --create "agent:main:cron:nightly:run:$i" "run-$i" >/dev/null || exit 1; done
BINDLOG_CLOCK_MS=$((1767225600000 + 86400000)) "$BL" -d exp new agent:main:cron:nightly:run:6 run-6 >/dev/null
BINDLOG_CLOCK_MS=$((1767225600000 + 86400000)) "$BL" -d exp bind agent:main:telegram:dm:42 chat-42 >/dev/null
export BINDLOG_CLOCK_MS=$((1767225600000 + 90000000))
"$BL" -d exp expire --idle 24h --prefix agent:main:cron: --dry-run; echo "exit $?"
"$BL" -d exp expire --idle 24h --prefix agent:main:cron:; echo "exit $?"
"$BL" -d exp expire --idle 24h --prefix agent:main:cron: --json; echo "exit $?"
"$BL" -d exp dump --bindings
"$BL" -d exp dump --log --from 8
"$BL" -d exp check | tail -1'
