'use strict';
// examples/gateway.mjs runs as a user would run it: in a project whose
// node_modules/bindlog is the package under test.  The example checks every
// outcome itself and exits 1 on a surprise.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { PKG, tempDir, runNode } = require('./helpers');

const EXAMPLE = path.resolve(__dirname, '..', '..', '..', 'examples', 'gateway.mjs');

test('examples/gateway.mjs: the turn loop with /stop, /new, /resume and racing splits', async (t) => {
    const dir = tempDir(t, 'project');
    fs.mkdirSync(path.join(dir, 'node_modules'), { recursive: true });
    fs.symlinkSync(PKG, path.join(dir, 'node_modules', 'bindlog'), 'dir');
    fs.copyFileSync(EXAMPLE, path.join(dir, 'gateway.mjs'));
    const r = await runNode(path.join(dir, 'gateway.mjs'), [path.join(dir, 'store')], { cwd: dir });
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /gateway: every outcome as predicted\n$/);
    assert.doesNotMatch(r.stdout, /FAIL/);
    assert.match(r.stdout, /change feed \(\d+ events\)/);
});
