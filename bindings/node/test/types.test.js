'use strict';
// index.d.ts against TypeScript: test/types/check.mts uses the whole API and
// marks each misuse @ts-expect-error; `tsc --strict --noEmit` must accept it.
// TypeScript is a dev dependency (`npm ci --ignore-scripts` in bindings/node
// installs it); without it the test is skipped, unless BINDLOG_REQUIRE_NODE=1
// (CI), which makes a missing compiler a failure.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { runNode } = require('./helpers');

const tsc = path.join(__dirname, '..', 'node_modules', 'typescript', 'bin', 'tsc');

test('index.d.ts type-checks the documented API under --strict and refuses misuse', async (t) => {
    if (!fs.existsSync(tsc)) {
        const msg = 'TypeScript is not installed: run `npm ci --ignore-scripts` in bindings/node';
        if (process.env.BINDLOG_REQUIRE_NODE === '1')
            assert.fail(`${msg} (BINDLOG_REQUIRE_NODE=1)`);
        t.skip(msg);
        return;
    }
    const r = await runNode(tsc, ['-p', path.join(__dirname, 'types'), '--strict', '--noEmit']);
    assert.equal(r.code, 0, `tsc found problems:\n${r.stdout}${r.stderr}`);
});
