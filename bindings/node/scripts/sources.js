'use strict';
// scripts/sources.js -- what binding.gyp compiles, found at build time so that
// no list of C files is kept by hand: a new file in the library's src/core,
// src/lmdb or src/maint (or in the addon's src/) is picked up by the next build.
//
//   node scripts/sources.js sources   the addon's src/*.c, then the library's
//   node scripts/sources.js include   the include directories
//   node scripts/sources.js cli       the CLI's tools/*.c, then the library's
//                                     (the `bindlog` executable, bin/bindlog.js)
//   node scripts/sources.js deps      LMDB's and xxHash's .c files when the
//                                     package carries them (deps/lmdb,
//                                     deps/xxhash: the tarball always does)
//   node scripts/sources.js isystem   -isystem flags for them (their warnings
//                                     are not the addon's)
//   node scripts/sources.js libraries what to link: -lpthread alone with the
//                                     bundled sources, else the system's
//                                     -llmdb -lxxhash too
//
// The library is looked for first in deps/bindlog (the copy `npm pack` puts
// in the tarball), then in the repository around this package (../..).
// src/etcd is never compiled in (it is the separate etcd module, loaded for
// etcd:// only when installed: src/core/module.h), so the addon needs
// neither libcurl nor json-c.  Paths are relative
// to the package directory, with forward slashes, as gyp wants them.
const fs = require('fs');
const path = require('path');

const pkg = path.resolve(__dirname, '..');
const LAYERS = ['core', 'lmdb', 'maint', 'platform'];

function libraryRoot() {
    for (const rel of ['deps/bindlog', '../..']) {
        const dir = path.join(pkg, rel);
        if (fs.existsSync(path.join(dir, 'include', 'bindlog.h')) &&
            fs.existsSync(path.join(dir, 'src', 'core')))
            return rel;
    }
    process.stderr.write('bindlog: the library sources are missing: neither ' +
        `${path.join(pkg, 'deps/bindlog')} (a packed copy) nor the repository ` +
        `around ${pkg} holds include/bindlog.h and src/core\n`);
    process.exit(1);
}

function cFiles(rel) {
    return fs.readdirSync(path.join(pkg, rel))
        .filter((f) => f.endsWith('.c'))
        .sort()
        .map((f) => `${rel}/${f}`);
}

// deps/ (the tarball) holding LMDB's and xxHash's sources, or null.
function bundledRoot() {
    const d = 'deps';
    return fs.existsSync(path.join(pkg, d, 'bundled_mdb.c')) &&
        fs.existsSync(path.join(pkg, d, 'lmdb', 'mdb.c')) &&
        fs.existsSync(path.join(pkg, d, 'xxhash', 'xxhash.c')) ? d : null;
}

function main(what) {
    const root = libraryRoot();
    const deps = bundledRoot();
    if (what === 'deps')
        return deps ? [`${deps}/bundled_mdb.c`, `${deps}/bundled_midl.c`, `${deps}/bundled_xxhash.c`] : [];
    if (what === 'isystem')
        // absolute: gyp rewrites include_dirs, not flags, and compiles from build/
        return deps ? ['-isystem', path.join(pkg, deps, 'lmdb'), '-isystem',
            path.join(pkg, deps, 'xxhash')] : [];
    if (what === 'libraries')
        return deps ? ['-lpthread'] : ['-llmdb', '-lxxhash', '-lpthread'];
    if (what === 'sources')
        return [cFiles('src'), ...LAYERS.map((l) => cFiles(`${root}/src/${l}`))].flat();
    if (what === 'cli')
        return [cFiles(`${root}/tools`), ...LAYERS.map((l) => cFiles(`${root}/src/${l}`))].flat();
    if (what === 'include')
        return [`${root}/include`, `${root}/src`];
    if (what === 'root')
        return [root];
    process.stderr.write('usage: node scripts/sources.js sources|include|cli|root\n');
    process.exit(2);
}

if (require.main === module)
    process.stdout.write(main(process.argv[2]).join(' ') + '\n');

module.exports = { libraryRoot, LAYERS };
