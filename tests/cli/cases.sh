# cases.sh -- the steps of the CLI golden tests, sourced by run.sh.
# Each `t NAME ARGS...` / `tsh NAME 'CMD'` compares with golden/NAME.*.
# The store is built with the tool's own write commands; `at S` sets the
# event clock to 2026-01-01T00:00:00Z + S seconds (BINDLOG_CLOCK_MS).

T0=1767225600000
at() { export BINDLOG_CLOCK_MS=$((T0 + $1 * 1000)); }
K='agent:main:telegram:dm:1001'
K2='agent:main:discord:chan:7'
# A key that would recolour a terminal, and one with invalid UTF-8.
KESC=$'agent:main:slack:\x1b[31mred\x07'
KBAD=$'agent:main:bad:\xff\xfe'
export K K2 KESC KBAD

# ---- usage errors (exit 2) and help ----------------------------------------
t usage_no_command
t usage_unknown_command frobnicate
t usage_unknown_global_option --frob
t usage_help --help
t usage_version_like -d
t usage_no_dir stat
t usage_unknown_option -d "$STORE" stat --frob
t usage_missing_arg -d "$STORE" get
t usage_extra_arg -d "$STORE" get a b
t usage_missing_value -d "$STORE" dump --from
t usage_bad_number -d "$STORE" dump --from 12abc
t usage_negative_number -d "$STORE" dump --to -1
t usage_overflow -d "$STORE" dump --to 18446744073709551616
t usage_flag_with_value -d "$STORE" stat --json=yes
t usage_two_kinds -d "$STORE" dump --log --bindings
t usage_range_not_log -d "$STORE" dump --sessions --from 3
t usage_from_after_to -d "$STORE" dump --from 9 --to 3
t usage_split_missing_child -d "$STORE" split k a
t usage_bad_generation -d "$STORE" split k a b --generation 1x
t usage_two_origins -d "$STORE" bind k a --origin x --origin-file /dev/null
t usage_origin_twice -d "$STORE" bind k a --origin x --origin y
t usage_write_extra_arg -d "$STORE" bind k a b
t usage_generation_max -d "$STORE" split k a b --generation 18446744073709551615
# An origin the library would refuse is refused whole, never cut; an origin
# file that cannot be read says why (exit 3), and nothing is written.
tsh usage_origin_too_long '"$BL" -d "$STORE" bind k a --origin "$(head -c 65537 /dev/zero | tr "\\0" x)"'
tsh usage_origin_file_too_large 'head -c 65537 /dev/zero > big.origin && "$BL" -d "$STORE" bind k a --origin-file big.origin'
t origin_file_missing -d "$STORE" bind k a --origin-file no-such.origin
t origin_file_directory -d "$STORE" bind k a --origin-file .
tsh usage_bad_clock 'BINDLOG_CLOCK_MS=soon "$BL" -d "$STORE" stat'
for c in stat get history lineage dump bind new split invalidate unbind; do
    t "help_$c" "$c" --help
done

# ---- a missing store (exit 3) -----------------------------------------------
t missing_store_stat -d "$STORE" stat
t missing_store_dump -d "$STORE" dump
t missing_store_write -d "$STORE" bind "$K" s-1
tsh not_a_store 'mkdir -p notastore && echo hello > notastore/data.mdb && "$BL" -d notastore stat'

# ---- building a store with the write commands ----------------------------------
at 0
t bind_create -d "$STORE" bind "$K" s-1 --create --origin '{"peer":"telegram","chat":1001}'
at 1
t bind_retry -d "$STORE" bind "$K" s-1
t bind_second_key -d "$STORE" bind "$K2" d-1 --expect '' --json
at 2
t split -d "$STORE" split "$K" s-1 s-2 --generation 1
t split_retry -d "$STORE" split "$K" s-1 s-2 --generation 1
at 3
t split_twin_moved -d "$STORE" split "$K" s-1 s-3 --generation 1
t invalidate -d "$STORE" invalidate "$K" --reason stop
at 4
t new_session -d "$STORE" new "$K" s-4 --reason /new
t split_late_stale -d "$STORE" split "$K" s-2 s-5 --generation 1 --json
at 5
t split_any -d "$STORE" split "$K" s-4 s-5 --origin ''
t new_exists -d "$STORE" new "$K" s-1
t bind_conflict -d "$STORE" bind "$K2" s-5
t bind_expect_moved -d "$STORE" bind "$K2" d-2 --expect d-0
t bind_bad_id -d "$STORE" bind "$K2" $'d\x01x'
at 6
t bind_escape_key -d "$STORE" bind "$KESC" e-1 --origin $'ok\x1b]0;pwned\x07 \xc2\x9b done'
tsh bind_origin_file 'printf "\\001\\377binary" > origin.bin && "$BL" -d "$STORE" bind "$KBAD" $'"'"'b-\xff'"'"' --origin-file origin.bin --json'
at 7
t resume -d "$STORE" bind "$K" s-1 --expect s-5 --reason resume
at 8
t unbind -d "$STORE" unbind "$K2" --reason idle
t unbind_again -d "$STORE" unbind "$K2"
t unbind_never -d "$STORE" unbind nobody
t invalidate_unbound -d "$STORE" invalidate "$K2"
unset BINDLOG_CLOCK_MS

# ---- inspection ---------------------------------------------------------------
t stat -d "$STORE" stat
t stat_json -d "$STORE" stat --json
tsh stat_env_dir 'BINDLOG_DIR="$STORE" "$BL" stat --json'
t get -d "$STORE" get "$K"
t get_json -d "$STORE" get "$K" --json
t get_unbound -d "$STORE" get "$K2"
t get_unbound_json -d "$STORE" get "$K2" --json
t get_never -d "$STORE" get nobody
t get_escape -d "$STORE" get "$KESC"
t get_escape_json -d "$STORE" get "$KESC" --json
t get_bad_utf8 -d "$STORE" get "$KBAD" --json
t history -d "$STORE" history "$K"
t history_json -d "$STORE" history "$K" --json
t history_escape -d "$STORE" history "$KESC"
t history_unknown -d "$STORE" history nobody
t history_dashdash -d "$STORE" history -- -not-an-option
t lineage_middle -d "$STORE" lineage s-2
t lineage_root -d "$STORE" lineage s-1
t lineage_leaf -d "$STORE" lineage s-5
t lineage_dot -d "$STORE" lineage s-1 --dot
t lineage_unknown -d "$STORE" lineage nope
t lineage_bad_utf8 -d "$STORE" lineage $'b-\xff' --dot
# A tree that branches: two splits from t-1 (after a /resume), two from
# t-4, a /new after t-6, a split from t-2 after another /resume.  Only
# sessions with several children indent; a chain stays in one column.
KT='agent:main:telegram:dm:77'
tsh lineage_tree_build 'set -e; at() { export BINDLOG_CLOCK_MS=$(('"$T0"' + $1 * 1000)); }
S=tree; at 10; "$BL" -d $S bind '"$KT"' t-1 --create >/dev/null
at 11; "$BL" -d $S split '"$KT"' t-1 t-2 >/dev/null
at 12; "$BL" -d $S split '"$KT"' t-2 t-3 >/dev/null
at 13; "$BL" -d $S bind '"$KT"' t-1 --reason resume >/dev/null
at 14; "$BL" -d $S split '"$KT"' t-1 t-4 >/dev/null
at 15; "$BL" -d $S split '"$KT"' t-4 t-5 >/dev/null
at 16; "$BL" -d $S bind '"$KT"' t-4 --reason resume >/dev/null
at 17; "$BL" -d $S split '"$KT"' t-4 t-6 >/dev/null
at 18; "$BL" -d $S new '"$KT"' t-7 >/dev/null
at 19; "$BL" -d $S bind '"$KT"' t-2 --reason resume >/dev/null
at 20; "$BL" -d $S split '"$KT"' t-2 t-8
"$BL" -d $S check | tail -n 1'
t lineage_tree_root -d tree lineage t-1
t lineage_tree_middle -d tree lineage t-4
t lineage_tree_chain -d tree lineage t-7
t lineage_tree_dot -d tree lineage t-4 --dot
# A chain of 200 splits (deeper than the walk's first 64 levels of stack):
# every session in one column, so no line grows with the depth.
tsh lineage_long_chain 'set -e; "$BL" -d chain bind k c-0 --create >/dev/null
for i in $(seq 1 200); do "$BL" -d chain split k c-$((i - 1)) c-$i >/dev/null; done
"$BL" -d chain lineage c-0 >lineage.txt
echo "$(wc -l <lineage.txt) lines, the longest $(awk "{ if (length(\$0) > n) n = length(\$0) } END { print n }" lineage.txt) characters"
head -n 2 lineage.txt; tail -n 2 lineage.txt
"$BL" -d chain lineage c-100 | sed -n "100,102p"'
t dump -d "$STORE" dump
t dump_range -d "$STORE" dump --from 3 --to 5
t dump_range_empty -d "$STORE" dump --from 100
t dump_json -d "$STORE" dump --log --json
t dump_bindings -d "$STORE" dump --bindings
t dump_bindings_json -d "$STORE" dump --bindings --json
t dump_sessions -d "$STORE" dump --sessions
t dump_sessions_json -d "$STORE" dump --sessions --json
# Every --json line must parse as JSON on its own.
if command -v python3 >/dev/null; then
    tsh json_parses 'for w in --log --bindings --sessions; do "$BL" -d "$STORE" dump $w --json; done | python3 -c "import sys, json; n = 0
for line in sys.stdin: json.loads(line); n += 1
print(n, \"lines parsed\")"'
fi
# Inspection never writes: the read-only open leaves the store as it was.
tsh readonly_store 'chmod -R a-w "$STORE" && "$BL" -d "$STORE" stat --json | grep -o "\"digest\":\"[0-9a-f]*\""; rc=$?; chmod -R u+w "$STORE"; exit $rc'

# ---- maintenance ----------------------------------------------------------------
. "$HERE/cases_maint.sh"

# ---- operations (issue 14) ------------------------------------------------------
. "$HERE/cases_ops.sh"

# ---- damaged stores and recover (issue 16) ----------------------------------------
. "$HERE/cases_recover.sh"

# ---- upgrade from format 1 (issue 11 item 7) ---------------------------------------
. "$HERE/cases_upgrade.sh"
