'use strict';
// The package as users load it, by name: `import { Store } from 'bindlog'`
// (the "import" condition: index.mjs) and `require('bindlog')` (index.js),
// from a directory whose node_modules/bindlog is the package under test.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { PKG, tempDir, runNode } = require('./helpers');

function project(t) {
    const dir = tempDir(t, 'project');
    fs.mkdirSync(path.join(dir, 'node_modules'), { recursive: true });
    fs.symlinkSync(PKG, path.join(dir, 'node_modules', 'bindlog'), 'dir');
    return dir;
}

test('ESM: import { Store, ANY_GENERATION, BindlogError } from \'bindlog\'', async (t) => {
    const dir = project(t);
    fs.writeFileSync(path.join(dir, 'main.mjs'), `
import { Store, ANY_GENERATION, BindlogError, version } from 'bindlog';
import bindlog from 'bindlog';
import { createRequire } from 'node:module';
const cjs = createRequire(import.meta.url)('bindlog');
if (cjs.Store !== Store || bindlog.Store !== Store) throw new Error('ESM and CommonJS differ');
const store = Store.open(new URL('./store', import.meta.url).pathname, { durability: 'none' });
await store.bind('k', 'A', { expect: '' });
const { generation } = store.get('k');
const r = await store.split('k', 'A', 'C', generation, { origin: { via: 'esm' } });
let code = '';
try { await store.split('k', 'A', 'D', ANY_GENERATION); await store.unbind('none'); }
catch (e) { code = e instanceof BindlogError ? e.code : String(e); }
store.close();
console.log(JSON.stringify({ outcome: r.outcome, code, version }));
`);
    const r = await runNode(path.join(dir, 'main.mjs'), [], { cwd: dir });
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.deepEqual(out, { outcome: 'applied', code: 'BINDLOG_ENOTFOUND', version: out.version });
});

test('CommonJS: require(\'bindlog\') by name', async (t) => {
    const dir = project(t);
    fs.writeFileSync(path.join(dir, 'main.js'), `
const { Store } = require('bindlog');
const store = Store.open(__dirname + '/store', { durability: 'none' });
store.newSession('k', 'S').then((r) => { console.log(r.outcome); store.close(); });
`);
    const r = await runNode(path.join(dir, 'main.js'), [], { cwd: dir });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'applied\n');
});
