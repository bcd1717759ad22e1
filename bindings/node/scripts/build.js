'use strict';
// scripts/build.js -- build the addon with node-gyp, offline.
//
// npm runs this as the package's install script (and the repository's CMake
// build runs it on a staged copy).  node-gyp on its own downloads Node's
// headers unless told where installed ones are, so this script tells it:
//
//   nodedir   $npm_config_nodedir if set, else the prefix of the running node
//             (/usr for /usr/bin/node) when <prefix>/include/node/node_api.h
//             is there and node_version.h matches the running version
//             (Debian's libnode-dev and nodesource's nodejs both put them there);
//             otherwise node-gyp's own default (which downloads).
//   node-gyp  $npm_config_node_gyp (npm sets it for install scripts: the copy
//             npm bundles), a node-gyp next to this package, npm's bundled
//             copy beside the running node, or node-gyp on PATH.
//
//   node scripts/build.js [--check] [extra node-gyp arguments]
// --check only reports what would be used and exits 1 if the build cannot
// run offline (CMake asks this before it registers the Node tests).
// CFLAGS and LDFLAGS from the environment reach the compiler (gyp's make
// generator reads them): the CMake build passes -Werror and sanitizers.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');

const pkg = path.resolve(__dirname, '..');

function nodeVersionOf(prefix) {
    try {
        const h = fs.readFileSync(path.join(prefix, 'include', 'node', 'node_version.h'), 'utf8');
        const num = (name) => (h.match(new RegExp(`#define ${name} (\\d+)`)) || [])[1];
        return `v${num('NODE_MAJOR_VERSION')}.${num('NODE_MINOR_VERSION')}.${num('NODE_PATCH_VERSION')}`;
    } catch {
        return null;
    }
}

function findNodedir() {
    if (process.env.npm_config_nodedir)
        return { dir: process.env.npm_config_nodedir, why: '$npm_config_nodedir' };
    const prefix = path.resolve(path.dirname(fs.realpathSync(process.execPath)), '..');
    if (fs.existsSync(path.join(prefix, 'include', 'node', 'node_api.h')) &&
        nodeVersionOf(prefix) === process.version)
        return { dir: prefix, why: `the headers installed with ${process.execPath}` };
    return null;
}

function findNodeGyp() {
    const candidates = [];
    if (process.env.npm_config_node_gyp)
        candidates.push(process.env.npm_config_node_gyp);
    try {
        candidates.push(require.resolve('node-gyp/bin/node-gyp.js', { paths: [pkg] }));
    } catch { /* not a local dependency */ }
    const bin = path.dirname(fs.realpathSync(process.execPath));
    for (const lib of ['../lib/node_modules', '../share/nodejs', '../lib/node_modules/npm/node_modules'])
        candidates.push(path.resolve(bin, lib, 'npm/node_modules/node-gyp/bin/node-gyp.js'),
            path.resolve(bin, lib, 'node-gyp/bin/node-gyp.js'));
    for (const c of candidates)
        if (c && fs.existsSync(c))
            return { cmd: process.execPath, args: [c], where: c };
    for (const dir of (process.env.PATH || '').split(path.delimiter)) {
        const c = path.join(dir, 'node-gyp');
        if (dir && fs.existsSync(c))
            return { cmd: c, args: [], where: c };
    }
    return null;
}

function main(argv) {
    const check = argv[0] === '--check';
    const extra = check ? argv.slice(1) : argv;
    const gyp = findNodeGyp();
    const nodedir = findNodedir();
    if (check) {
        console.log(`node      ${process.execPath} ${process.version} (Node-API ${process.versions.napi})`);
        console.log(`node-gyp  ${gyp ? gyp.where : 'not found'}`);
        console.log(`nodedir   ${nodedir ? `${nodedir.dir} (${nodedir.why})` : 'none: node-gyp would download the headers'}`);
        return gyp && nodedir ? 0 : 1;
    }
    if (!gyp) {
        console.error('bindlog: node-gyp not found (npm bundles it; on Debian: apt-get install npm, or node-gyp)');
        return 1;
    }
    const args = [...gyp.args, 'rebuild'];
    // under make (the CMake build) the jobserver already sets the parallelism
    if (!/--jobserver/.test(process.env.MAKEFLAGS || ''))
        args.push(`--jobs=${Math.min(os.cpus().length || 1, 4)}`);
    if (nodedir)
        args.push(`--nodedir=${nodedir.dir}`);
    args.push(...extra);
    console.log(`bindlog: ${[gyp.cmd, ...args].join(' ')}`);
    const r = spawnSync(gyp.cmd, args, { cwd: pkg, stdio: 'inherit' });
    if (r.error) {
        console.error(`bindlog: could not run node-gyp: ${r.error.message}`);
        return 1;
    }
    return r.status === null ? 1 : r.status;
}

process.exitCode = main(process.argv.slice(2));
