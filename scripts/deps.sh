#!/usr/bin/env bash
# scripts/deps.sh -- make sure bindlog's build dependencies are installed.
#
# Checks for: a C compiler, make, cmake, pkg-config, the LMDB, xxHash, cmocka
# and SQLite development packages, lmdb-utils (mdb_stat, mdb_dump), python3
# (binding tests), libcurl + json-c + etcd (the etcd backend and its tests),
# openssl (the etcd TLS tests make their certificates with it), clang with
# libFuzzer's runtime (fuzz harnesses), prometheus (promtool, the CLI tests'
# lint of stat --prometheus), python3-wheel and mypy for the Python package
# (its offline install, its type check), and for the Node binding node with
# npm (whose bundled node-gyp builds the addon), Node's headers and g++
# (node-gyp links with it), groff (the man pages' test formats them),
# valgrind (make valgrind), cppcheck with clang-tidy (scripts/lint.sh), and
# gcovr (make coverage).
# Quiet and exit 0 when everything is present.  Otherwise, as root, installs
# the missing Debian/Ubuntu packages with apt-get; as any other user, prints
# the apt-get command to run and exits 1.  Safe to run any number of times.
set -euo pipefail

# Debian package -> how to tell it is usable without dpkg (a command or a
# pkg-config module).  dpkg-query is asked first where it exists.
packages=(cmake gcc libc6-dev make pkg-config liblmdb-dev libxxhash-dev libcmocka-dev
    lmdb-utils libsqlite3-dev
    # the Python binding's tests, its offline install (pip install
    # --no-build-isolation needs setuptools and wheel) and its type check
    python3 python3-setuptools python3-venv python3-wheel mypy
    # the etcd backend: its client libraries and a real etcd for the tests
    libcurl4-openssl-dev libjson-c-dev etcd-server etcd-client openssl
    # libFuzzer harnesses (clang with its runtime)
    clang libclang-rt-14-dev
    # promtool, which lints the output of bindlog stat --prometheus in the CLI tests
    prometheus
    # the Node binding: node-gyp compiles C with cc but links with g++
    g++
    # groff, which formats the man pages in the man_pages test
    groff-base
    # valgrind's memcheck (make valgrind, scripts/valgrind.sh)
    valgrind
    # static analysis (scripts/lint.sh, a CI gate)
    cppcheck clang-tidy
    # line coverage (make coverage, scripts/coverage.sh)
    gcovr)

have_pkg() {
    local pkg=$1
    if command -v dpkg-query >/dev/null 2>&1; then
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' && return 0
    fi
    # Fallback (no dpkg, or installed from source): look for what the package provides.
    case $pkg in
    cmake | make | pkg-config) command -v "$pkg" >/dev/null 2>&1 ;;
    gcc) command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1 ;;
    libc6-dev) [ -e /usr/include/stdio.h ] ;;
    liblmdb-dev) pkg-config --exists lmdb 2>/dev/null ;;
    libxxhash-dev) pkg-config --exists libxxhash 2>/dev/null ;;
    libcmocka-dev) pkg-config --exists cmocka 2>/dev/null ;;
    libsqlite3-dev) pkg-config --exists sqlite3 2>/dev/null ;;
    lmdb-utils) command -v mdb_stat >/dev/null 2>&1 ;;
    python3) command -v python3 >/dev/null 2>&1 ;;
    python3-setuptools) python3 -c 'import setuptools' >/dev/null 2>&1 ;;
    python3-venv) python3 -c 'import ensurepip' >/dev/null 2>&1 ;;
    python3-wheel) python3 -c 'import wheel' >/dev/null 2>&1 ;;
    mypy) command -v mypy >/dev/null 2>&1 ;;
    libcurl4-openssl-dev) pkg-config --exists libcurl 2>/dev/null ;;
    libjson-c-dev) pkg-config --exists json-c 2>/dev/null ;;
    etcd-server) command -v etcd >/dev/null 2>&1 ;;
    etcd-client) command -v etcdctl >/dev/null 2>&1 ;;
    openssl) command -v openssl >/dev/null 2>&1 ;;
    clang) command -v clang >/dev/null 2>&1 ;;
    prometheus) command -v promtool >/dev/null 2>&1 ;;
    g++) command -v g++ >/dev/null 2>&1 ;;
    groff-base) command -v groff >/dev/null 2>&1 ;;
    valgrind) command -v valgrind >/dev/null 2>&1 ;;
    cppcheck) command -v cppcheck >/dev/null 2>&1 ;;
    clang-tidy) command -v clang-tidy >/dev/null 2>&1 || command -v clang-tidy-14 >/dev/null 2>&1 ;;
    gcovr) command -v gcovr >/dev/null 2>&1 ;;
    *) return 1 ;;
    esac
}

missing=()
for pkg in "${packages[@]}"; do
    have_pkg "$pkg" || missing+=("$pkg")
done

# ---- BEGIN node (bindings/node) ----
# The Node binding needs node, npm (it bundles node-gyp: Debian's own node-gyp
# package depends on Debian's nodejs and cannot sit beside nodesource's) and
# Node's headers beside node (<prefix>/include/node/node_api.h), so that the
# addon builds offline.  Machines of this kind come with nodesource's nodejs
# 20, which holds all three.  Without node, Debian's nodejs (18) with
# libnode-dev (the headers) and npm (with node-gyp) do the same.
if ! command -v node >/dev/null 2>&1; then
    missing+=(nodejs libnode-dev npm)
else
    node_prefix=$(node -p 'require("path").resolve(require("path").dirname(require("fs").realpathSync(process.execPath)), "..")' 2>/dev/null || echo /usr)
    [ -e "$node_prefix/include/node/node_api.h" ] || missing+=(libnode-dev)
    command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
# ---- END node ----

[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "bindlog: missing build dependencies: ${missing[*]}" >&2
    echo "Install them as root with:" >&2
    echo "  $cmd" >&2
    exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "bindlog: missing build dependencies (${missing[*]}) and no apt-get to install them" >&2
    exit 1
fi

echo "bindlog: installing ${missing[*]}"
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
