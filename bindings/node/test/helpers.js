'use strict';
// Shared by the tests: where the package is, temporary stores, child processes.
//
// BINDLOG_NODE_PKG names the package directory to test (the CMake build sets
// it to its staged and built copy); by default the package around this file.
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const PKG = path.resolve(process.env.BINDLOG_NODE_PKG || path.join(__dirname, '..'));
const bindlog = require(PKG);

const TMP_ROOT = process.env.BINDLOG_TEST_TMPDIR || os.tmpdir();

// A fresh directory for one test, removed when the test ends.
function tempDir(t, name = 'store') {
    fs.mkdirSync(TMP_ROOT, { recursive: true });
    const dir = fs.mkdtempSync(path.join(TMP_ROOT, 'bindlog-node-'));
    t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
    return path.join(dir, name);
}

// A store opened for one test (durability 'none' unless asked), closed at its end.
function openStore(t, opts = {}) {
    const dir = tempDir(t);
    const store = bindlog.Store.open(dir, { durability: 'none', ...opts });
    t.after(() => store.close());
    return { store, dir };
}

// Every record of the log, as plain objects.
function logOf(store) {
    return [...store.log()];
}

// Run `node file args...`; resolves { code, stdout, stderr }.
function runNode(file, args = [], opts = {}) {
    return new Promise((resolve, reject) => {
        const child = spawn(process.execPath, [...(opts.nodeArgs || []), file, ...args], {
            env: { ...process.env, BINDLOG_NODE_PKG: PKG, ...(opts.env || {}) },
            cwd: opts.cwd,
            stdio: ['ignore', 'pipe', 'pipe'],
        });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d) => { stdout += d; });
        child.stderr.on('data', (d) => { stderr += d; });
        child.on('error', reject);
        child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
        if (opts.onSpawn)
            opts.onSpawn(child);
    });
}

// Assert that `p` rejects with a BindlogError of `code`; returns the error.
async function rejectsWith(p, code, pattern) {
    assert.ok(p instanceof Promise, 'a write returns a promise, even for bad input');
    let err;
    try {
        await p;
    } catch (e) {
        err = e;
    }
    assert.ok(err, `expected a rejection with ${code}`);
    assert.ok(err instanceof bindlog.BindlogError, `expected a BindlogError, got ${err}`);
    assert.equal(err.code, code, err.message);
    if (pattern)
        assert.match(err.message, pattern);
    return err;
}

function percentile(sorted, p) {
    return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

module.exports = { PKG, bindlog, tempDir, openStore, logOf, runNode, rejectsWith, percentile };
