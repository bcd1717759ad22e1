#!/usr/bin/env bash
# scripts/vendor-sources.sh -- fetch LMDB's and xxHash's sources, with their
# licence files, into a git-ignored folder (default: vendor/ at the top of
# the tree), for the self-contained packages (the npm tarball, the Python
# sdist) and for the cross builds (scripts/cross-build.sh).
#
# They come from Debian's source packages, so the versions are the ones
# Debian ships and the tarballs are checked by apt against the archive's
# signatures: a deb-src line is added to apt's sources if there is none
# (root only), then `apt-get source lmdb xxhash` unpacks them (with Debian's
# patches applied) in a scratch folder.  What is kept:
#   vendor/lmdb/    mdb.c midl.c lmdb.h midl.h LICENSE COPYRIGHT VERSION
#   vendor/xxhash/  xxhash.c xxhash.h LICENSE VERSION
# Never commit them: the folder is in .gitignore.  Run again to refresh;
# nothing is fetched when both folders are complete (use --force to refetch).
#
#   bash scripts/vendor-sources.sh [--force] [DEST]
set -euo pipefail

force=0
if [[ ${1:-} == --force ]]; then force=1; shift; fi
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/vendor}

complete() {
    local f
    for f in lmdb/mdb.c lmdb/midl.c lmdb/lmdb.h lmdb/midl.h lmdb/LICENSE xxhash/xxhash.c \
        xxhash/xxhash.h xxhash/LICENSE; do
        [[ -s $dest/$f ]] || return 1
    done
}
if [[ $force == 0 ]] && complete; then
    echo "vendor-sources: $dest already holds lmdb $(cat "$dest/lmdb/VERSION") and xxhash $(cat "$dest/xxhash/VERSION")"
    exit 0
fi

# A deb-src line, copied from the first deb822 "Types: deb" stanza (or the
# sources.list line) of the main archive.
if ! grep -rqs '^Types:.*deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    if [[ $(id -u) != 0 ]]; then
        echo "vendor-sources: apt has no deb-src line; as root, add one (or run this as root)" >&2
        exit 1
    fi
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
        awk 'BEGIN{RS=""; ORS="\n\n"} /Types: deb/ && /URIs: http:\/\/deb.debian.org\/debian$/ || /URIs: http:\/\/deb.debian.org\/debian\n/ {sub(/Types: deb/, "Types: deb-src"); print; exit}' \
            /etc/apt/sources.list.d/debian.sources > /etc/apt/sources.list.d/bindlog-deb-src.sources
    else
        grep -h '^deb ' /etc/apt/sources.list | head -1 | sed 's/^deb /deb-src /' \
            > /etc/apt/sources.list.d/bindlog-deb-src.list
    fi
    apt-get update -qq
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
(cd "$scratch" && apt-get source -qq lmdb xxhash >/dev/null 2>&1) || {
    echo "vendor-sources: apt-get source lmdb xxhash failed (is dpkg-dev installed?)" >&2
    (cd "$scratch" && apt-get source lmdb xxhash) >&2 || true
    exit 1
}
lsrc=$(find "$scratch" -maxdepth 4 -name mdb.c -path '*liblmdb*' | head -1)
xsrc=$(find "$scratch" -maxdepth 3 -name xxhash.h | head -1)
if [[ -z $lsrc || -z $xsrc ]]; then
    echo "vendor-sources: the source packages do not hold mdb.c and xxhash.h where expected" >&2
    exit 1
fi
ldir=$(dirname "$lsrc")
xdir=$(dirname "$xsrc")
rm -rf "$dest/lmdb" "$dest/xxhash"
mkdir -p "$dest/lmdb" "$dest/xxhash"
cp "$ldir"/{mdb.c,midl.c,lmdb.h,midl.h,LICENSE,COPYRIGHT} "$dest/lmdb/"
cp "$xdir"/{xxhash.c,xxhash.h,LICENSE} "$dest/xxhash/"
basename "$(find "$scratch" -maxdepth 1 -type d -name 'lmdb-*' | head -1)" | sed 's/^lmdb-//' > "$dest/lmdb/VERSION"
basename "$(find "$scratch" -maxdepth 1 -type d -name 'xxhash-*' | head -1)" | sed 's/^xxhash-//' > "$dest/xxhash/VERSION"
echo "vendor-sources: lmdb $(cat "$dest/lmdb/VERSION") and xxhash $(cat "$dest/xxhash/VERSION") in $dest"
