#!/usr/bin/env bash
# test/pack-install.sh -- the package as a user gets it, with no checkout:
#
#   1. npm pack in bindings/node (prepack vendors the C library into deps/,
#      postpack removes it again);
#   2. npm install of the tarball in an empty directory, with an empty npm
#      cache and --offline, so that nothing at all can be downloaded: the
#      addon compiles from the tarball against Node's installed headers;
#   3. a seed scenario (SPEC section 2, stories 1 and 2) with require(), and
#      examples/gateway.mjs with `import ... from 'bindlog'`, against the
#      installed package;
#   4. the CLI in the package: `npx bindlog --version` names the package's
#      version, `npx bindlog --help` runs, `npx bindlog check` passes on the
#      store the seed scenario wrote.
#
# Run by ctest (node_pack_install) and by .ci/run, whose log keeps the
# transcript.  Needs node, npm, a C compiler, make, python3, liblmdb-dev,
# libxxhash-dev (scripts/deps.sh).  Exit 0 when everything passed.
set -euo pipefail

pkg=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$pkg/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bindlog-pack.XXXXXX")
trap 'rm -rf "$work"' EXIT

# a user with nothing cached, and npm told to ask no registry
export HOME="$work/home"
export npm_config_cache="$work/npm-cache"
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
mkdir -p "$HOME"

step() { printf '\n== %s\n' "$*"; }

step "npm pack (in $pkg)"
(cd "$pkg" && npm pack --pack-destination "$work" 2>&1)
tgz=$(ls "$work"/bindlog-*.tgz)
[ ! -e "$pkg/deps" ] || { echo "FAIL: postpack left $pkg/deps behind"; exit 1; }

step "tarball: $(basename "$tgz")"
tar tzf "$tgz" | sort >"$work/contents"
echo "$(wc -l <"$work/contents") files; library sources vendored:"
grep -c '^package/deps/bindlog/src/' "$work/contents" | sed 's/^/  /'
for need in package/package.json package/binding.gyp package/index.js package/index.mjs package/route.js \
    package/index.d.ts package/src/addon.c package/scripts/build.js package/scripts/sources.js \
    package/deps/bindlog/include/bindlog.h package/deps/bindlog/src/core/api.c \
    package/deps/bindlog/src/lmdb/store.c package/deps/bindlog/src/maint/replay.c \
    package/bin/bindlog.js package/deps/bindlog/tools/bindlog.c \
    package/deps/bindlog/src/platform/platform.h package/deps/lmdb/mdb.c package/deps/lmdb/LICENSE \
    package/deps/lmdb/COPYRIGHT package/deps/xxhash/xxhash.c package/deps/xxhash/LICENSE; do
    grep -qx "$need" "$work/contents" || { echo "FAIL: $need is not in the tarball"; exit 1; }
done
if grep -E '^package/(test|bench|build|node_modules)/|^package/deps/bindlog/src/etcd/' "$work/contents"; then
    echo "FAIL: the files above do not belong in the tarball"
    exit 1
fi

step "npm install --offline $(basename "$tgz") (in an empty directory)"
mkdir "$work/app"
cd "$work/app"
npm install --offline --foreground-scripts --no-package-lock "$tgz" 2>&1
addon=node_modules/bindlog/build/Release/bindlog.node
[ -f "$addon" ] || { echo "FAIL: $addon was not built"; exit 1; }
if command -v readelf >/dev/null 2>&1; then
    echo "NEEDED: $(readelf -d "$addon" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')"
    if readelf -d "$addon" | grep -Eq 'libcurl|libjson-c'; then
        echo "FAIL: the addon links the etcd backend's libraries"
        exit 1
    fi
    # LMDB and xxHash are built in from the tarball's deps/: only libc is needed
    if readelf -d "$addon" | grep -Eq 'liblmdb|libxxhash'; then
        echo "FAIL: the addon links the system's liblmdb or libxxhash, not the bundled sources"
        exit 1
    fi
fi

step "seed scenario with require('bindlog')"
node - <<'JS'
const assert = require('node:assert/strict');
const { Store, BindlogError } = require('bindlog');
(async () => {
    const store = Store.open('./store', { durability: 'full' });
    const key = 'agent:main:telegram:dm:12345';
    await store.bind(key, 'A', { expect: '' });
    const { sessionId, generation: g } = store.get(key);
    let r = await store.split(key, sessionId, 'C', g, { origin: { peer: 'telegram' } });
    assert.deepEqual(r, { outcome: 'applied', lsn: 2, generation: g, sessionId: 'C' });
    assert.equal((await store.split(key, 'A', 'C', g)).outcome, 'already');
    assert.equal(store.session('A').endReason, 'compression');
    await store.invalidate(key);             // /stop
    await store.newSession(key, 'B');        // /new
    r = await store.split(key, 'C', 'D', g); // the stopped run
    assert.equal(r.outcome, 'stale');
    assert.equal(store.session('D'), null);
    assert.equal(store.stats().headLsn, 4);
    await assert.rejects(store.unbind('nobody'), (e) => e instanceof BindlogError && e.code === 'BINDLOG_ENOTFOUND');
    assert.throws(() => Store.open('etcd://127.0.0.1:2379/x'), (e) => e.code === 'BINDLOG_ENOTSUP');
    store.close();
    console.log(`seed scenario: ok (bindlog ${require('bindlog').version}, ${[...Store.open('./store').log()].length} records)`);
})().catch((e) => { console.error(e); process.exit(1); });
JS

step "examples/gateway.mjs with import { Store } from 'bindlog'"
cp "$repo/examples/gateway.mjs" .
node gateway.mjs

step "npx bindlog: the CLI in the package"
want=$(node -p "require('bindlog/package.json').version")
got=$(npx --offline bindlog --version)
echo "$got"
case "$got" in
    "bindlog $want "*) ;;
    *) echo "FAIL: npx bindlog --version says '$got', the package is $want"; exit 1 ;;
esac
npx --offline bindlog --help | head -3
npx --offline bindlog -d ./store check

step "pack-install: the tarball installed offline and ran"
