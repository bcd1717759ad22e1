'use strict';
// Signals, process.exit() and worker termination at random moments into a
// process busy with a store (fixtures/signals.js): the process ends within
// its time, and the store it leaves opens, reads whole, and passes
// `bindlog check` (BINDLOG_CLI, set by ctest; the package's own bin when
// it carries one).  BINDLOG_SIGNAL_TRIES sets the tries per mode (default 12).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');
const { PKG, bindlog, tempDir } = require('./helpers');

const FIXTURE = path.join(__dirname, 'fixtures', 'signals.js');
const TRIES = Number(process.env.BINDLOG_SIGNAL_TRIES || 12);

function cli() {
    if (process.env.BINDLOG_CLI)
        return process.env.BINDLOG_CLI;
    const own = path.join(PKG, 'bin', 'bindlog.js');
    return fs.existsSync(own) ? own : null;
}

function once(dir, mode, delayMs) {
    return new Promise((resolve, reject) => {
        const child = spawn(process.execPath, [FIXTURE, dir, mode, String(delayMs)], {
            env: { ...process.env, BINDLOG_NODE_PKG: PKG },
            stdio: ['ignore', 'pipe', 'pipe'],
        });
        let out = '';
        let err = '';
        let hung = false;
        const killer = setTimeout(() => { hung = true; child.kill('SIGKILL'); }, 15000);
        child.stdout.on('data', (d) => {
            out += d;
            if (out.startsWith('busy\n') && (mode === 'handler' || mode === 'default') && !child.sent) {
                child.sent = true;
                setTimeout(() => child.kill('SIGINT'), delayMs);
            }
        });
        child.stderr.on('data', (d) => { err += d; });
        child.on('error', reject);
        child.on('close', (code, signal) => { clearTimeout(killer); resolve({ code, signal, out, err, hung }); });
    });
}

function verify(dir, what) {
    const s = bindlog.Store.open(dir, { readOnly: true });
    try {
        const st = s.stats();
        let n = 0;
        for (const rec of s.log()) {
            n += 1;
            assert.equal(rec.lsn, n, `${what}: the log is dense`);
        }
        assert.equal(n, st.headLsn, `${what}: every record up to the head is there`);
    } finally {
        s.close();
    }
    const exe = cli();
    if (exe) {
        const args = exe.endsWith('.js') ? [exe, '-d', dir, 'check'] : ['-d', dir, 'check'];
        const r = spawnSync(exe.endsWith('.js') ? process.execPath : exe, args, { encoding: 'utf8' });
        assert.equal(r.status, 0, `${what}: bindlog check: ${r.stdout}${r.stderr}`);
    }
}

for (const mode of ['handler', 'default', 'exit', 'worker']) {
    test(`signals: ${mode}, ${TRIES} tries at random moments: the process ends and the store checks`, async (t) => {
        if (!cli())
            t.diagnostic('no bindlog CLI (BINDLOG_CLI unset): the store is read back, not checked');
        for (let i = 0; i < TRIES; i++) {
            const dir = tempDir(t, `${mode}-${i}`);
            const delay = Math.floor(Math.random() * 200);
            const r = await once(dir, mode, delay);
            const what = `${mode} try ${i} (after ${delay} ms)`;
            assert.equal(r.hung, false, `${what}: the process hung: ${r.out}${r.err}`);
            assert.match(r.out, /^busy\n/, `${what}: ${r.err}`);
            if (mode === 'default') {
                assert.equal(r.signal, 'SIGINT', `${what}: ${r.err}`);
            } else {
                assert.equal(r.code, 0, `${what}: ${r.err}`);
                if (mode !== 'exit')
                    assert.match(r.out, /closed\n$/, what);
            }
            verify(dir, what);
        }
    });
}
