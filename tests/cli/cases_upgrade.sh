# cases_upgrade.sh -- `bindlog upgrade` on the format-1 golden stores
# (tests/data/format1/: written by format-1 code, commit ac406c8; sourced by
# cases.sh).  The digests printed must be the ones expected.txt recorded
# from that code.

F1=$HERE/../data/format1/stores.tar.gz
export F1
mkdir -p "$WORK/f1" && tar -C "$WORK/f1" -xzf "$F1"

t help_upgrade upgrade --help
t upgrade_no_dir upgrade
t upgrade_old_store_refused -d f1/plain stat
t upgrade_plain upgrade f1/plain
tsh upgrade_plain_after '"$BL" -d f1/plain check | tail -3; ls f1/plain f1/plain/format1-backup'
t upgrade_again upgrade f1/plain
t upgrade_compacted_json -d f1/compacted upgrade --json
t upgrade_compacted_history -d f1/compacted history agent:main:telegram:dm:3
t upgrade_missing upgrade f1/nope
t upgrade_a_file upgrade f1/plain/data.mdb
t upgrade_etcd upgrade etcd://127.0.0.1:2379/x
tsh upgrade_cut_file 'mkdir cut1 && tar -C cut1 -xzf "$F1" plain && truncate -s 100000 cut1/plain/data.mdb &&
{ "$BL" upgrade cut1/plain; echo "exit $?"; ls -a cut1/plain; }'
tsh upgrade_busy 'mkdir busy1 && tar -C busy1 -xzf "$F1" plain && touch busy1/plain/bindlog.lock &&
{ flock -s busy1/plain/bindlog.lock "$BL" upgrade busy1/plain; echo "exit $?"; }'
