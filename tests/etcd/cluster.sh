#!/usr/bin/env bash
# tests/etcd/cluster.sh -- a throwaway etcd cluster on the loopback interface.
#
# Used by the etcd tests (tests/test_etcd_client.c, later the backend tests)
# and by hand.  Every member listens on 127.0.0.1 only, on free ports picked
# at run time from BL_ETCD_PORT_MIN..BL_ETCD_PORT_MAX (default 23790-23899),
# and keeps its data, log and pid file in DIR.  Members are numbered from 0
# in the order of the endpoint list that `start` prints.
#
#   cluster.sh check                 exit 0 if etcd and etcdctl can be found
#   cluster.sh start N DIR           start an N-member cluster (N = 1..5) in DIR
#                                    (made if missing) and wait until every
#                                    member is healthy; print the client
#                                    endpoints "127.0.0.1:P0,127.0.0.1:P1,..."
#   cluster.sh stop DIR              SIGTERM every member (SIGKILL after 2 s)
#   cluster.sh kill-member DIR I     SIGKILL member I and wait until it is gone
#   cluster.sh restart-member DIR I  start member I again on its old ports and
#                                    data and wait until it listens; it serves
#                                    once it has rejoined a quorum (which needs
#                                    a majority of members up)
#   cluster.sh wait-healthy DIR [S]  wait up to S seconds (default 30) until
#                                    every member is up and the cluster serves
#   cluster.sh leader DIR            print the index of the current leader
#   cluster.sh endpoints DIR         print the client endpoints again
#   cluster.sh certs DIR             make the test certificates in DIR (below)
#
# TLS and auth (issue 15).  With BL_ETCD_TLS=1, `start` makes certificates
# in DIR/tls (`certs`) and the members serve https on their client ports
# with the server certificate, asking every client for a certificate signed
# by the test CA (--client-cert-auth).  With BL_ETCD_AUTH=1 as well, it
# then creates users and roles and turns etcd's auth on:
#   root  (role root)        password in DIR/tls/root.password
#   gw    (role bindlog-gw)  password in DIR/tls/gw.password; read and write
#                            on the prefix $BL_ETCD_AUTH_PREFIX only
#                            (default "bindlog-test/"): a gateway's least
#                            privilege (docs/scale-out.md)
# Passwords are random per cluster.  DIR/tls holds, all PEM, made with
# openssl at start and valid for two days:
#   ca.pem                the test CA (servers and clients trust it)
#   server.pem/.key       the members' certificate, for IP 127.0.0.1 only
#                         (so "localhost" is a host name mismatch)
#   client.pem/.key       a client certificate signed by the CA, without a
#                         CommonName (etcd's HTTP gateway refuses one with a
#                         CN under --client-cert-auth)
#   client-cn.pem/.key    the same with CN=gw: refused by the gateway
#   untrusted-ca.pem      a second CA nobody trusts, and
#   untrusted.pem/.key    a client certificate it signed
#
# Environment:
#   ETCD, ETCDCTL            the binaries (default: etcd and etcdctl on PATH)
#   BL_ETCD_PORT_MIN/_MAX    the port range to pick from
#   BL_ETCD_MAX_TXN_OPS      etcd --max-txn-ops (default 128, etcd's own
#                            default, so tests see what production sees)
#   BL_ETCD_HEARTBEAT_MS     etcd --heartbeat-interval (default 100)
#   BL_ETCD_ELECTION_MS      etcd --election-timeout (default 1000)
#   BL_ETCD_QUOTA_BYTES      etcd --quota-backend-bytes (default: etcd's, 2 GiB)
#   BL_ETCD_TLS, BL_ETCD_AUTH, BL_ETCD_AUTH_PREFIX   see above
#   BL_ETCD_AUTH_TOKEN_TTL   etcd --auth-token-ttl, seconds (default 300)
#   BL_CLUSTER_OWNER_PID     if set at `start`: a watchdog stops the cluster
#                            when that process exits, so a crashed or killed
#                            test does not leave etcd running
#
# Ports are picked under a lock (flock on $TMPDIR/bindlog-etcd-ports.lock,
# held until the members listen), so concurrent runs of this script never
# pick the same ports; a port taken by anything else between the check and
# etcd's bind makes the member exit, and `start` then retries on other ports.
set -euo pipefail

ETCD=${ETCD:-etcd}
ETCDCTL=${ETCDCTL:-etcdctl}
export ETCDCTL_API=3
PORT_MIN=${BL_ETCD_PORT_MIN:-23790}
PORT_MAX=${BL_ETCD_PORT_MAX:-23899}
MAX_TXN_OPS=${BL_ETCD_MAX_TXN_OPS:-128}
HEARTBEAT_MS=${BL_ETCD_HEARTBEAT_MS:-100}
ELECTION_MS=${BL_ETCD_ELECTION_MS:-1000}
QUOTA_BYTES=${BL_ETCD_QUOTA_BYTES:-0}
TLS=${BL_ETCD_TLS:-0}
AUTH=${BL_ETCD_AUTH:-0}
AUTH_PREFIX=${BL_ETCD_AUTH_PREFIX:-bindlog-test/}
TOKEN_TTL=${BL_ETCD_AUTH_TOKEN_TTL:-300}
LOCK_FILE=${TMPDIR:-/tmp}/bindlog-etcd-ports.lock

die() {
    echo "cluster.sh: $*" >&2
    exit 1
}

usage() {
    sed -n '4,54p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# ctl ARGS...: etcdctl on the cluster, with its TLS files and root's
# password when the cluster has them.
ctl() {
    local -a flags=()
    if [ "${TLS:-0}" = 1 ]; then
        flags+=(--cacert "$DIR/tls/ca.pem" --cert "$DIR/tls/client.pem" --key "$DIR/tls/client.key")
    fi
    if [ "${AUTH_ON:-0}" = 1 ]; then
        flags+=(--user "root:$(cat "$DIR/tls/root.password")")
    fi
    "$ETCDCTL" "${flags[@]}" "$@"
}

scheme() {
    [ "${TLS:-0}" = 1 ] && echo https || echo http
}

# make_certs DIR: the test CA, server and client certificates (see above).
make_certs() {
    local d=$1
    command -v openssl >/dev/null || die "openssl not found (needed for BL_ETCD_TLS=1)"
    mkdir -p "$d"
    (
        cd "$d"
        umask 077
        local ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
        ca() { openssl req -x509 "${ec[@]}" -keyout "$1.key" -out "$1.pem" -days 2 -subj "$2"; }
        # issue NAME CA SUBJECT EXTENSIONS
        issue() {
            openssl req "${ec[@]}" -keyout "$1.key" -out "$1.csr" -subj "$3"
            printf '%s\n' "$4" >"$1.ext"
            openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial \
                -out "$1.pem" -days 2 -extfile "$1.ext"
            rm -f "$1.csr" "$1.ext"
        }
        ca ca "/CN=bindlog test CA"
        ca untrusted-ca "/CN=bindlog untrusted CA"
        issue server ca "/O=bindlog test etcd" \
            $'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth'
        issue client ca "/O=bindlog gateways" "extendedKeyUsage=clientAuth"
        issue client-cn ca "/CN=gw" "extendedKeyUsage=clientAuth"
        issue untrusted untrusted-ca "/O=bindlog gateways" "extendedKeyUsage=clientAuth"
        rm -f ./*.srl
    ) >/dev/null 2>&1 || die "openssl failed to make the certificates in $d"
}

# setup_auth: users, roles and auth on (BL_ETCD_AUTH=1; see above).
setup_auth() {
    local root_pw gw_pw
    root_pw=$(openssl rand -hex 16)
    gw_pw=$(openssl rand -hex 16)
    (umask 077 && printf '%s' "$root_pw" >"$DIR/tls/root.password" &&
        printf '%s' "$gw_pw" >"$DIR/tls/gw.password")
    {
        ctl --endpoints="$CTL_ENDPOINTS" user add root --new-user-password="$root_pw" &&
            ctl --endpoints="$CTL_ENDPOINTS" user grant-role root root &&
            ctl --endpoints="$CTL_ENDPOINTS" role add bindlog-gw &&
            ctl --endpoints="$CTL_ENDPOINTS" role grant-permission bindlog-gw --prefix=true \
                readwrite "$AUTH_PREFIX" &&
            ctl --endpoints="$CTL_ENDPOINTS" user add gw --new-user-password="$gw_pw" &&
            ctl --endpoints="$CTL_ENDPOINTS" user grant-role gw bindlog-gw &&
            ctl --endpoints="$CTL_ENDPOINTS" auth enable
    } >/dev/null 2>"$DIR/auth-setup.log" || return 1
    AUTH_ON=1
}

# alive PID: the process exists and is not a zombie.  Members are not our
# children once the starting shell exits, and the container's init may not
# reap them, so `kill -0` alone would see a dead member as running.
alive() {
    local pid=$1 stat
    [ -n "$pid" ] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ] && [ "${stat%% *}" != X ]
}

# Every local TCP port in use (any state), one per line, from /proc.
used_ports() {
    local f line local_addr
    for f in /proc/net/tcp /proc/net/tcp6; do
        [ -r "$f" ] || continue
        while read -r _ local_addr _; do
            [ "$local_addr" = local_address ] && continue
            echo $((16#${local_addr##*:}))
        done <"$f"
    done
}

# pick_ports COUNT: print COUNT free ports from the range, starting at a
# random offset so that parallel users of the range spread out.
pick_ports() {
    local count=$1 span=$((PORT_MAX - PORT_MIN + 1)) used start i port got=0
    used=" $(used_ports | tr '\n' ' ') "
    start=$((RANDOM % span))
    for ((i = 0; i < span && got < count; i++)); do
        port=$((PORT_MIN + (start + i) % span))
        case $used in *" $port "*) continue ;; esac
        echo "$port"
        got=$((got + 1))
    done
    [ "$got" -eq "$count" ] || die "fewer than $count free ports in $PORT_MIN-$PORT_MAX"
}

load_env() {
    DIR=$1
    [ -f "$DIR/cluster.env" ] || die "$DIR: no cluster (missing cluster.env)"
    # shellcheck disable=SC1091
    . "$DIR/cluster.env"
}

member_pid() {
    cat "$DIR/m$1.pid" 2>/dev/null || true
}

client_port() {
    local -a p=($CLIENT_PORTS)
    echo "${p[$1]}"
}

check_index() {
    [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -lt "$N" ] || die "no member $1 (members are 0..$((N - 1)))"
}

# start_member I STATE: launch member I in the background (its own session,
# stdin/stdout/stderr detached so that a caller reading our stdout through a
# pipe sees EOF when this script exits).
start_member() {
    local i=$1 state=$2 cp pp sc
    local -a c=($CLIENT_PORTS) p=($PEER_PORTS) tls=()
    cp=${c[$i]}
    pp=${p[$i]}
    sc=$(scheme)
    if [ "${TLS:-0}" = 1 ]; then
        tls=(--cert-file "$DIR/tls/server.pem" --key-file "$DIR/tls/server.key"
            --client-cert-auth --trusted-ca-file "$DIR/tls/ca.pem"
            --auth-token simple --auth-token-ttl "$TOKEN_TTL")
    fi
    setsid "$ETCD" --name "m$i" --data-dir "$DIR/m$i.data" \
        --listen-client-urls "$sc://127.0.0.1:$cp" \
        --advertise-client-urls "$sc://127.0.0.1:$cp" "${tls[@]}" \
        --listen-peer-urls "http://127.0.0.1:$pp" \
        --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
        --initial-cluster "$INITIAL_CLUSTER" \
        --initial-cluster-state "$state" \
        --initial-cluster-token "$TOKEN" \
        --heartbeat-interval "$HEARTBEAT_MS" --election-timeout "$ELECTION_MS" \
        --max-txn-ops "$MAX_TXN_OPS" --quota-backend-bytes "$QUOTA_BYTES" \
        --logger zap --log-outputs stderr \
        </dev/null >>"$DIR/m$i.log" 2>&1 9>&- &
    echo $! >"$DIR/m$i.pid"
}

# listening PORT: something listens on 127.0.0.1:PORT.  A restarted member
# listens at once but answers clients only after it has rejoined a quorum.
listening() {
    local hex line
    hex=$(printf '%04X' "$1")
    while read -r _ local_addr _ st _; do
        [ "$local_addr" = "0100007F:$hex" ] && [ "$st" = 0A ] && return 0
    done </proc/net/tcp
    return 1
}

# healthy: every member answers a quorum read.
healthy() {
    ctl --endpoints="$CTL_ENDPOINTS" --dial-timeout=1s --command-timeout=2s \
        endpoint health >/dev/null 2>&1
}

stop_members() {
    local i pid t
    for ((i = 0; i < N; i++)); do
        pid=$(member_pid "$i")
        alive "$pid" && kill -TERM "$pid" 2>/dev/null || true
    done
    # A throwaway cluster needs no graceful leader transfer (which can take
    # seconds while the other members are stopping too): 2 s, then SIGKILL.
    for ((t = 0; t < 20; t++)); do
        local any=0
        for ((i = 0; i < N; i++)); do
            alive "$(member_pid "$i")" && any=1
        done
        [ $any -eq 0 ] && return 0
        sleep 0.1
    done
    for ((i = 0; i < N; i++)); do
        pid=$(member_pid "$i")
        alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
    done
    for ((t = 0; t < 50; t++)); do
        local left=0
        for ((i = 0; i < N; i++)); do
            alive "$(member_pid "$i")" && left=1
        done
        [ $left -eq 0 ] && return 0
        sleep 0.1
    done
}

cmd_start() {
    local n=$1 attempt i t ok
    [[ $n =~ ^[1-5]$ ]] || die "N must be 1..5"
    command -v "$ETCD" >/dev/null || die "etcd not found (set ETCD)"
    command -v "$ETCDCTL" >/dev/null || die "etcdctl not found (set ETCDCTL)"
    DIR=$2
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd)
    [ ! -f "$DIR/cluster.env" ] || die "$DIR already holds a cluster"
    [ "$AUTH" != 1 ] || [ "$TLS" = 1 ] || die "BL_ETCD_AUTH=1 needs BL_ETCD_TLS=1"
    [ "$TLS" != 1 ] || make_certs "$DIR/tls"
    AUTH_ON=0
    exec 9>"$LOCK_FILE"
    flock -w 120 9 || die "could not lock $LOCK_FILE"
    for attempt in 1 2 3 4 5; do
        local -a ports=($(pick_ports $((2 * n))))
        [ ${#ports[@]} -eq $((2 * n)) ] || die "could not pick $((2 * n)) ports"
        N=$n
        CLIENT_PORTS="${ports[*]:0:n}"
        PEER_PORTS="${ports[*]:n:n}"
        TOKEN="bindlog-$$-$RANDOM-$attempt"
        INITIAL_CLUSTER=""
        ENDPOINTS=""
        CTL_ENDPOINTS=""
        for ((i = 0; i < n; i++)); do
            INITIAL_CLUSTER+="${INITIAL_CLUSTER:+,}m$i=http://127.0.0.1:${ports[n + i]}"
            ENDPOINTS+="${ENDPOINTS:+,}127.0.0.1:${ports[i]}"
            CTL_ENDPOINTS+="${CTL_ENDPOINTS:+,}$(scheme)://127.0.0.1:${ports[i]}"
        done
        rm -rf "$DIR"/m*.data "$DIR"/m*.pid
        for ((i = 0; i < n; i++)); do
            start_member "$i" new
        done
        ok=0
        for ((t = 0; t < 300; t++)); do
            local dead=0
            for ((i = 0; i < n; i++)); do
                alive "$(member_pid "$i")" || dead=1
            done
            [ $dead -eq 1 ] && break
            if healthy; then
                ok=1
                break
            fi
            sleep 0.1
        done
        if [ $ok -eq 1 ] && [ "$AUTH" = 1 ] && ! setup_auth; then
            echo "cluster.sh: turning auth on failed:" >&2
            cat "$DIR/auth-setup.log" >&2 || true
            ok=0
        fi
        if [ $ok -eq 1 ]; then
            cat >"$DIR/cluster.env" <<EOF
N=$N
CLIENT_PORTS="$CLIENT_PORTS"
PEER_PORTS="$PEER_PORTS"
TOKEN="$TOKEN"
INITIAL_CLUSTER="$INITIAL_CLUSTER"
ENDPOINTS="$ENDPOINTS"
CTL_ENDPOINTS="$CTL_ENDPOINTS"
TLS=$TLS
AUTH_ON=$AUTH_ON
TOKEN_TTL=$TOKEN_TTL
MAX_TXN_OPS=$MAX_TXN_OPS
HEARTBEAT_MS=$HEARTBEAT_MS
ELECTION_MS=$ELECTION_MS
QUOTA_BYTES=$QUOTA_BYTES
EOF
            flock -u 9
            exec 9>&-
            if [ -n "${BL_CLUSTER_OWNER_PID:-}" ]; then
                local owner=$BL_CLUSTER_OWNER_PID self=$0
                (
                    while alive "$owner" && [ -f "$DIR/cluster.env" ]; do sleep 1; done
                    [ -f "$DIR/cluster.env" ] && "$self" stop "$DIR"
                ) </dev/null >/dev/null 2>&1 &
            fi
            echo "$ENDPOINTS"
            return 0
        fi
        stop_members
        echo "cluster.sh: attempt $attempt failed (ports $CLIENT_PORTS / $PEER_PORTS); last log lines:" >&2
        for ((i = 0; i < n; i++)); do
            tail -n 3 "$DIR/m$i.log" >&2 2>/dev/null || true
        done
    done
    die "could not start a $n-member cluster in $DIR"
}

cmd_stop() {
    load_env "$1"
    stop_members
    rm -f "$DIR/cluster.env"
}

cmd_kill_member() {
    local pid t
    load_env "$1"
    check_index "$2"
    pid=$(member_pid "$2")
    alive "$pid" || die "member $2 is not running"
    kill -KILL "$pid"
    for ((t = 0; t < 100; t++)); do
        alive "$pid" || return 0
        sleep 0.05
    done
    die "member $2 (pid $pid) did not die"
}

cmd_restart_member() {
    local i=$2 t
    load_env "$1"
    check_index "$i"
    ! alive "$(member_pid "$i")" || die "member $i is still running"
    start_member "$i" existing
    for ((t = 0; t < 300; t++)); do
        alive "$(member_pid "$i")" || die "member $i exited; see $DIR/m$i.log"
        listening "$(client_port "$i")" && return 0
        sleep 0.1
    done
    die "member $i did not come back"
}

cmd_wait_healthy() {
    local secs=${2:-30} t0=$SECONDS i
    load_env "$1"
    [[ $secs =~ ^[0-9]+$ ]] || die "bad seconds: $secs"
    while ((SECONDS - t0 < secs)); do
        local up=1
        for ((i = 0; i < N; i++)); do
            alive "$(member_pid "$i")" || up=0
        done
        [ $up -eq 1 ] && healthy && return 0
        sleep 0.2
    done
    die "cluster in $DIR not healthy after $secs s"
}

cmd_leader() {
    local i line
    load_env "$1"
    for ((i = 0; i < N; i++)); do
        alive "$(member_pid "$i")" || continue
        # simple format: endpoint, id, version, db size, is leader, ...
        line=$(ctl --endpoints="$(scheme)://127.0.0.1:$(client_port "$i")" --dial-timeout=1s \
            --command-timeout=2s endpoint status -w simple 2>/dev/null) || continue
        IFS=, read -r _ _ _ _ is_leader _ <<<"$line"
        if [ "${is_leader// /}" = true ]; then
            echo "$i"
            return 0
        fi
    done
    die "no member is leader"
}

[ $# -ge 1 ] || usage
case $1 in
check)
    command -v "$ETCD" >/dev/null && command -v "$ETCDCTL" >/dev/null
    ;;
start)
    [ $# -eq 3 ] || usage
    cmd_start "$2" "$3"
    ;;
stop)
    [ $# -eq 2 ] || usage
    cmd_stop "$2"
    ;;
kill-member)
    [ $# -eq 3 ] || usage
    cmd_kill_member "$2" "$3"
    ;;
restart-member)
    [ $# -eq 3 ] || usage
    cmd_restart_member "$2" "$3"
    ;;
wait-healthy)
    [ $# -ge 2 ] && [ $# -le 3 ] || usage
    cmd_wait_healthy "$2" "${3:-}"
    ;;
leader)
    [ $# -eq 2 ] || usage
    cmd_leader "$2"
    ;;
endpoints)
    [ $# -eq 2 ] || usage
    load_env "$2"
    echo "$ENDPOINTS"
    ;;
certs)
    [ $# -eq 2 ] || usage
    make_certs "$2"
    ;;
*)
    usage
    ;;
esac
