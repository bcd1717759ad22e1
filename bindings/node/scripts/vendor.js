'use strict';
// scripts/vendor.js -- put the C library's sources beside the addon, so that
// the package builds where there is no bindlog checkout.
//
//   node scripts/vendor.js            (npm's prepack) copy the repository's
//                                     include/bindlog.h and src/{core,lmdb,maint}/*.[ch]
//                                     into deps/bindlog/, which package.json's
//                                     "files" puts in the tarball
//                                     and LMDB's and xxHash's sources with their
//                                     licences (the repository's vendor/, made
//                                     by scripts/vendor-sources.sh, run here if
//                                     it is missing) into deps/lmdb, deps/xxhash
//   node scripts/vendor.js --clean    (npm's postpack) remove deps/ again
//   node scripts/vendor.js --stage DIR
//                                     copy the package as the tarball holds it
//                                     (the "files" of package.json, the library
//                                     vendored) into DIR: the CMake build
//                                     compiles and tests that copy, so the tests
//                                     see the layout users install
//
// src/etcd is left out on purpose: it is the separate etcd module
// (libbindlog-etcd.so), which the library loads for etcd:// when one is
// installed (src/core/module.h); without it etcd:// is BINDLOG_ENOTSUP.
const fs = require('fs');
const path = require('path');
const { LAYERS } = require('./sources.js');

const pkg = path.resolve(__dirname, '..');
const repo = path.resolve(pkg, '..', '..');

function die(msg) {
    process.stderr.write(`bindlog vendor: ${msg}\n`);
    process.exit(1);
}

function vendorInto(dest, needDeps) {
    if (!fs.existsSync(path.join(repo, 'include', 'bindlog.h')))
        return false;
    fs.rmSync(dest, { recursive: true, force: true });
    fs.mkdirSync(path.join(dest, 'include'), { recursive: true });
    fs.copyFileSync(path.join(repo, 'include', 'bindlog.h'), path.join(dest, 'include', 'bindlog.h'));
    let n = 1;
    // the library's layers, and the CLI's tools/ (the `bindlog` executable)
    for (const dir of [...LAYERS.map((l) => path.join('src', l)), 'tools']) {
        const from = path.join(repo, dir);
        const to = path.join(dest, dir);
        fs.mkdirSync(to, { recursive: true });
        for (const f of fs.readdirSync(from).sort()) {
            if (!/\.[ch]$/.test(f))
                continue;
            fs.copyFileSync(path.join(from, f), path.join(to, f));
            n++;
        }
    }
    return n + vendorDeps(path.dirname(dest), needDeps);
}

// LMDB and xxHash beside deps/bindlog: the addon builds them in whenever
// they are there (scripts/sources.js), so that it needs only libc.
const BUNDLED = {
    lmdb: ['mdb.c', 'midl.c', 'lmdb.h', 'midl.h', 'LICENSE', 'COPYRIGHT', 'VERSION'],
    xxhash: ['xxhash.c', 'xxhash.h', 'LICENSE', 'VERSION'],
};

// needDeps (npm pack): fetch them if missing, and fail without them; the
// CMake build's staged copy takes them only if they are there.
function vendorDeps(deps, needDeps) {
    const from = process.env.BINDLOG_VENDOR_DIR || path.join(repo, 'vendor');
    const complete = () => Object.entries(BUNDLED).every(([lib, files]) =>
        files.every((f) => fs.existsSync(path.join(from, lib, f))));
    if (!complete() && !needDeps)
        return 0;
    if (!complete()) {
        const script = path.join(repo, 'scripts', 'vendor-sources.sh');
        require('child_process').spawnSync('bash', [script, from], { stdio: 'inherit' });
        if (!complete())
            die(`LMDB's and xxHash's sources are missing from ${from} ` +
                '(run scripts/vendor-sources.sh as root: it needs apt-get source)');
    }
    let n = 0;
    // one wrapper a file, which includes it as a system header (-isystem,
    // scripts/sources.js): the addon's own warnings stay errors, theirs are
    // not ours to judge
    for (const [lib, file] of [['lmdb', 'mdb.c'], ['lmdb', 'midl.c'], ['xxhash', 'xxhash.c']]) {
        fs.mkdirSync(deps, { recursive: true });
        fs.writeFileSync(path.join(deps, `bundled_${path.basename(file, '.c')}.c`),
            `/* ${lib}'s ${file}, compiled into the addon (scripts/vendor.js) */\n` +
            `#include <${file}>\n`);
        n++;
    }
    for (const [lib, files] of Object.entries(BUNDLED)) {
        fs.rmSync(path.join(deps, lib), { recursive: true, force: true });
        fs.mkdirSync(path.join(deps, lib), { recursive: true });
        for (const f of files) {
            fs.copyFileSync(path.join(from, lib, f), path.join(deps, lib, f));
            n++;
        }
    }
    return n;
}

function stage(dir) {
    const meta = JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf8'));
    fs.mkdirSync(dir, { recursive: true });
    for (const entry of ['package.json', ...meta.files]) {
        if (entry === 'deps')
            continue; // vendored fresh below
        const from = path.join(pkg, entry);
        const to = path.join(dir, entry);
        if (!fs.existsSync(from))
            die(`${entry} is listed in package.json "files" but missing`);
        fs.rmSync(to, { recursive: true, force: true });
        fs.mkdirSync(path.dirname(to), { recursive: true });
        fs.cpSync(from, to, { recursive: true });
    }
    const n = vendorInto(path.join(dir, 'deps', 'bindlog'), false);
    if (!n)
        die(`no bindlog repository around ${pkg}`);
    console.log(`bindlog: staged the package in ${dir} (${n} library files)`);
}

const [mode, arg] = process.argv.slice(2);
if (mode === '--clean') {
    fs.rmSync(path.join(pkg, 'deps'), { recursive: true, force: true });
} else if (mode === '--stage') {
    if (!arg)
        die('--stage needs a directory');
    stage(path.resolve(arg));
} else if (mode === undefined) {
    const n = vendorInto(path.join(pkg, 'deps', 'bindlog'), true);
    if (n)
        console.log(`bindlog: vendored ${n} library files into deps/bindlog`);
    else if (!fs.existsSync(path.join(pkg, 'deps', 'bindlog', 'include', 'bindlog.h')))
        die(`no bindlog repository around ${pkg} and no deps/bindlog to pack`);
} else {
    die('usage: node scripts/vendor.js [--clean | --stage DIR]');
}
