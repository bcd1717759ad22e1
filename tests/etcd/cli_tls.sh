#!/usr/bin/env bash
# tests/etcd/cli_tls.sh -- the bindlog tool on etcds:// with its etcdctl-style
# flags and the ETCDCTL_* environment, against the etcds fixture
# (tests/etcd/cluster.sh with BL_ETCD_TLS=1 BL_ETCD_AUTH=1).
#
#   cli_tls.sh BINDLOG_BINARY FIXTURE_DIR
#
# Checks exit codes and outputs, and that no output of any run (stdout or
# stderr, success or failure) ever contains a password.  Prints one line
# per check and "N passed, N failed"; exits 0 when all passed, 0 with a
# SKIPPED line when the fixture is absent (unless BINDLOG_REQUIRE_ETCD=1).
set -u

BL=$1
FX=$2
if [ ! -s "$FX/endpoints" ]; then
    if [ "${BINDLOG_REQUIRE_ETCD:-0}" = 1 ]; then
        echo "no etcds fixture in $FX" >&2
        exit 1
    fi
    echo "[  SKIPPED ] no etcd with TLS and auth: cli_tls skipped"
    exit 0
fi
EPS=$(head -n 1 "$FX/endpoints")
TLS=$FX/tls
GW_PW=$(cat "$TLS/gw.password")
ROOT_PW=$(cat "$TLS/root.password")
WRONG=not-the-password-cli-51c0
LOC="etcds://$EPS/bindlog-test/cli-$$-$RANDOM"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/bindlog-cli-tls.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
unset ETCDCTL_CACERT ETCDCTL_CERT ETCDCTL_KEY ETCDCTL_USER ETCDCTL_PASSWORD BINDLOG_DIR
FILES=(--cacert "$TLS/ca.pem" --cert "$TLS/client.pem" --key "$TLS/client.key")

pass=0
fail=0
n=0

# run WANT_CODE NAME ARGS...: run the tool, keep its output, check the code.
run() {
    local want=$1 name=$2 code
    shift 2
    n=$((n + 1))
    "$BL" "$@" >"$OUT/$n.out" 2>"$OUT/$n.err" </dev/null
    code=$?
    if [ "$code" = "$want" ]; then
        pass=$((pass + 1))
        echo "ok   $name (exit $code)"
    else
        fail=$((fail + 1))
        echo "FAIL $name: exit $code, expected $want"
        sed 's/^/     | /' "$OUT/$n.out" "$OUT/$n.err"
    fi
}

# expect NAME PATTERN: the last run's stdout matches.
expect() {
    if grep -q -- "$2" "$OUT/$n.out"; then
        pass=$((pass + 1))
        echo "ok   $1"
    else
        fail=$((fail + 1))
        echo "FAIL $1: output lacks '$2'"
        sed 's/^/     | /' "$OUT/$n.out"
    fi
}

run 0 "bind with --user user:password" -d "$LOC" "${FILES[@]}" --user "gw:$GW_PW" \
    bind --create chat:1 s1
run 0 "get with --user and --password" -d "$LOC" "${FILES[@]}" --user gw --password "$GW_PW" \
    get chat:1
expect "get shows the binding" "session_id: *s1"
run 0 "--flag=value forms" -d "$LOC" "--cacert=$TLS/ca.pem" "--cert=$TLS/client.pem" \
    "--key=$TLS/client.key" "--user=gw:$GW_PW" "--max-txn-ops=256" split chat:1 s1 s2 --generation 1
run 0 "stat" -d "$LOC" "${FILES[@]}" --user "gw:$GW_PW" stat
expect "stat shows the head" "head_lsn: *2"
run 0 "stat --json" -d "$LOC" "${FILES[@]}" --user "gw:$GW_PW" stat --json
(
    export ETCDCTL_CACERT=$TLS/ca.pem ETCDCTL_CERT=$TLS/client.pem ETCDCTL_KEY=$TLS/client.key
    export ETCDCTL_USER=gw ETCDCTL_PASSWORD=$GW_PW
    "$BL" -d "$LOC" history chat:1 >"$OUT/env.out" 2>"$OUT/env.err"
    echo $? >"$OUT/env.code"
)
n=$((n + 1))
cp "$OUT/env.out" "$OUT/$n.out"
cp "$OUT/env.err" "$OUT/$n.err"
if [ "$(cat "$OUT/env.code")" = 0 ]; then
    pass=$((pass + 1))
    echo "ok   the ETCDCTL_* environment alone"
else
    fail=$((fail + 1))
    echo "FAIL the ETCDCTL_* environment alone: exit $(cat "$OUT/env.code")"
    sed 's/^/     | /' "$OUT/env.err"
fi
expect "history shows the split" "split"

run 3 "wrong password" -d "$LOC" "${FILES[@]}" --user "gw:$WRONG" get chat:1
run 3 "root's password is not gw's" -d "$LOC" "${FILES[@]}" --user "gw:$ROOT_PW" get chat:1
run 3 "no credentials" -d "$LOC" "${FILES[@]}" get chat:1
run 3 "untrusted CA" -d "$LOC" --cacert "$TLS/untrusted-ca.pem" --cert "$TLS/client.pem" \
    --key "$TLS/client.key" --user "gw:$GW_PW" get chat:1
run 3 "outside gw's prefix" -d "etcds://$EPS/bindlog-other/cli-$$" "${FILES[@]}" \
    --user "gw:$GW_PW" stat
run 2 "credentials in the location" -d "etcds://gw:$GW_PW@$EPS/bindlog-test/x" "${FILES[@]}" stat
run 2 "a user without a password" -d "$LOC" "${FILES[@]}" --user gw stat
run 2 "--max-txn-ops out of range" -d "$LOC" "${FILES[@]}" --user "gw:$GW_PW" --max-txn-ops 3 stat
run 2 "--cacert without a value" -d "$LOC" --cacert

# no run printed a password, whatever it did
leaks=$(grep -l -F -e "$GW_PW" -e "$ROOT_PW" -e "$WRONG" "$OUT"/*.out "$OUT"/*.err 2>/dev/null)
if [ -z "$leaks" ]; then
    pass=$((pass + 1))
    echo "ok   no output of $n runs holds a password"
else
    fail=$((fail + 1))
    echo "FAIL a password was printed in: $leaks"
fi

# remove the store, as root
ETCDCTL_API=3 "${ETCDCTL:-etcdctl}" --endpoints="https://$EPS" --cacert "$TLS/ca.pem" \
    --cert "$TLS/client.pem" --key "$TLS/client.key" --user "root:$ROOT_PW" \
    del --prefix "${LOC#etcds://$EPS/}/" >/dev/null 2>&1 || true
echo "cli etcds tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
