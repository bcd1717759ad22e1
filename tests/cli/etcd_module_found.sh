#!/bin/sh
# etcd_module_found.sh BINDLOG -- the CLI of a build tree finds the etcd
# module with no BINDLOG_ETCD_MODULE: an etcd:// location then fails on its
# endpoint (nothing listens on port 9 of the loopback: BINDLOG_EIO, exit 3),
# never with BINDLOG_ENOTSUP ("not supported by this build").
set -u
cli=$1
err=$(timeout 30 "$cli" -d etcd://127.0.0.1:9/bindlog-module-probe stat 2>&1 >/dev/null)
rc=$?
printf '%s\n' "$err"
case $err in
*BINDLOG_ENOTSUP*) echo "FAIL: the etcd module was not found beside $cli"; exit 1 ;;
*BINDLOG_EIO*) ;;
*) echo "FAIL: expected BINDLOG_EIO from an endpoint that does not answer"; exit 1 ;;
esac
[ "$rc" -eq 3 ] || { echo "FAIL: exit $rc, expected 3"; exit 1; }
echo "1 passed, 0 failed"
