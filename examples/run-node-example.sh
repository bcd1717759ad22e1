#!/bin/sh
# run-node-example.sh PKG EXAMPLE -- run one of examples/ as a user would:
# in an empty project whose node_modules/bindlog is the package PKG (the
# staged, built copy of bindings/node).  A .mts example is first compiled
# with the package's own TypeScript (bindings/node/node_modules, from `npm
# ci`) under --strict against the package's declarations, then run.
# The example checks its own outcomes and exits non-zero on a surprise.
# Without node (or, for .mts, without TypeScript) it skips (exit 77), a
# failure when BINDLOG_REQUIRE_NODE=1 (CI).
set -eu
pkg=$1
example=$2
here=$(cd "$(dirname "$0")" && pwd)
nodemods=$here/../bindings/node/node_modules

skip() {
    echo "skipped: $*"
    [ "${BINDLOG_REQUIRE_NODE:-0}" = 1 ] && { echo "BINDLOG_REQUIRE_NODE=1: a failure"; exit 1; }
    exit 77
}
command -v node >/dev/null 2>&1 || skip "node is not installed"
[ -f "$pkg/build/Release/bindlog.node" ] || skip "the addon is not built ($pkg)"

project=$(mktemp -d "${TMPDIR:-/tmp}/bindlog-example-XXXXXX")
trap 'rm -rf "$project"' EXIT
mkdir -p "$project/node_modules/@types"
ln -s "$pkg" "$project/node_modules/bindlog"
name=$(basename "$example")
cp "$example" "$project/$name"
cd "$project"
case $name in
*.mts)
    [ -x "$nodemods/.bin/tsc" ] || skip "TypeScript is not installed (cd bindings/node && npm ci)"
    ln -s "$nodemods/@types/node" node_modules/@types/node
    "$nodemods/.bin/tsc" --strict --module nodenext --moduleResolution nodenext \
        --target es2022 --types node "$name"
    node "${name%.mts}.mjs"
    ;;
*)
    node "$name"
    ;;
esac
