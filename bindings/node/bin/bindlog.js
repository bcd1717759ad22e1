#!/usr/bin/env node
'use strict';
// bin/bindlog.js -- `npx bindlog ...`: the bindlog CLI (tools/ of the
// repository) that `npm install` built beside the addon
// (build/Release/bindlog_cli, binding.gyp).  Runs it with this process's
// arguments and stdio and exits with its status (or its signal).
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const exe = process.env.BINDLOG_CLI || path.join(__dirname, '..', 'build', 'Release', 'bindlog_cli');
const r = spawnSync(exe, process.argv.slice(2), { stdio: 'inherit' });
if (r.error) {
    process.stderr.write(`bindlog: cannot run the CLI ${exe}: ${r.error.message} ` +
        '(run `npm rebuild bindlog` to build it)\n');
    process.exit(3);
}
if (r.signal)
    process.kill(process.pid, r.signal);
process.exit(r.status === null ? 3 : r.status);
