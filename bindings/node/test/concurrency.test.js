'use strict';
// Concurrency through the Node binding: promises in flight at once, two
// processes on one store, the change feed across processes, and close()
// while writes are pending.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { bindlog, openStore, tempDir, runNode, logOf } = require('./helpers');

const { Store } = bindlog;
const FIXTURES = path.join(__dirname, 'fixtures');

test('200 concurrent splits of one (parent, generation): exactly one applies', async (t) => {
    const { store } = openStore(t, { durability: 'full' });
    await store.bind('k', 'A', { origin: 'root' });
    const g = store.get('k').generation;
    const rs = await Promise.all(Array.from({ length: 200 },
        (_, i) => store.split('k', 'A', `C${i}`, g, { origin: `child ${i}` })));
    const applied = rs.filter((r) => r.outcome === 'applied');
    assert.equal(applied.length, 1);
    assert.equal(rs.filter((r) => r.outcome === 'moved').length, 199);
    const winner = applied[0].sessionId;
    for (const r of rs) {
        assert.equal(r.generation, g);
        assert.equal(r.sessionId, winner, 'every loser is told where the key went');
    }
    assert.equal(store.get('k').sessionId, winner);
    assert.equal(store.stats().headLsn, 2);
    assert.equal(store.stats().sessions, 2, 'no loser left a session');
    assert.equal(store.session(winner).origin.toString(), `child ${winner.slice(1)}`);
});

test('concurrent writes in FULL share group commits', async (t) => {
    const { store } = openStore(t, { durability: 'full' });
    const n = 64;
    await Promise.all(Array.from({ length: n }, (_, i) => store.bind(`k${i}`, `s${i}`)));
    const s = store.stats();
    assert.equal(s.headLsn, n);
    console.log(`# ${n} concurrent binds in FULL: ${s.commits} commits, ` +
        `${(s.groupedEvents / s.commits).toFixed(1)} events per commit`);
    assert.ok(s.commits < n / 2, `${s.commits} commits for ${n} concurrent writes`);
});

test('two Node processes write one store at once; the log stays dense', async (t) => {
    const dir = tempDir(t);
    const store = Store.open(dir, { durability: 'normal' });
    t.after(() => store.close());
    const children = ['p1', 'p2'].map((p) =>
        runNode(path.join(FIXTURES, 'writer.js'), [dir, '150', p, '8']));
    const mine = Promise.all(Array.from({ length: 50 }, (_, i) => store.bind(`p0-${i}`, `p0-s${i}`)));
    const [a, b] = await Promise.all(children);
    await mine;
    for (const r of [a, b]) {
        assert.equal(r.code, 0, r.stderr);
        assert.equal(JSON.parse(r.stdout).applied, 150);
    }
    const log = logOf(store);
    assert.equal(log.length, 350);
    assert.deepEqual(log.map((r) => r.lsn), Array.from({ length: 350 }, (_, i) => i + 1));
    for (const p of ['p0', 'p1', 'p2'])
        assert.equal(log.filter((r) => r.key.startsWith(`${p}-`)).length, p === 'p0' ? 50 : 150);
    assert.equal(store.get('p2-149').sessionId, 'p2-s149');
    assert.equal(store.stats().applied.bind, 350, 'the persistent counters saw every process');
});

test('follow() sees another process\'s writes, in order, without a gap', async (t) => {
    const dir = tempDir(t);
    const store = Store.open(dir, { durability: 'none' });
    t.after(() => store.close());
    await store.bind('before', 'b0');
    const feed = store.follow(); // from head + 1: only what comes next
    const child = runNode(path.join(FIXTURES, 'writer.js'), [dir, '40', 'other', '1', '2']);
    const seen = [];
    const timer = setTimeout(() => store.close(), 20000); // never hang the suite
    for await (const rec of feed) {
        seen.push(rec);
        if (seen.length === 40)
            break;
    }
    clearTimeout(timer);
    const r = await child;
    assert.equal(r.code, 0, r.stderr);
    assert.equal(seen.length, 40);
    assert.deepEqual(seen.map((x) => x.lsn), Array.from({ length: 40 }, (_, i) => i + 2));
    assert.deepEqual(seen.map((x) => x.key), Array.from({ length: 40 }, (_, i) => `other-${i}`));
    assert.ok(seen.every((x) => x.type === 'bind' && Buffer.isBuffer(x.origin) === false));
});

test('follow({ from }) replays the past, then waits; close() ends it, break cancels the wait', async (t) => {
    const { store } = openStore(t);
    for (let i = 0; i < 300; i++) // more than one read batch
        await store.bind(`k${i}`, `s${i}`);
    const got = [];
    const done = (async () => {
        for await (const rec of store.follow({ from: 5 }))
            got.push(rec.lsn);
    })();
    await new Promise((r) => setTimeout(r, 30));
    await store.bind('live', 'L');
    await new Promise((r) => setTimeout(r, 60));
    const closing = Date.now();
    store.close(); // the waiting follower ends, promptly
    await done;
    assert.ok(Date.now() - closing < 1000);
    assert.deepEqual(got, Array.from({ length: 297 }, (_, i) => i + 5));

    const { store: s2 } = openStore(t);
    const feed = s2.follow();
    const pending = feed.next(); // waits: nothing written yet
    const t0 = Date.now();
    await feed.return();
    assert.deepEqual(await pending, { value: undefined, done: true });
    assert.ok(Date.now() - t0 < 1000, 'a cancelled wait ends within a slice');
    assert.deepEqual(await feed.next(), { value: undefined, done: true });
});

test('close() with writes pending: every accepted write completes and resolves', async (t) => {
    const dir = tempDir(t);
    let store = Store.open(dir, { durability: 'full', writerThreads: 4 });
    const ps = Array.from({ length: 100 }, (_, i) => store.bind(`k${i}`, `s${i}`));
    store.close();
    const late = assert.rejects(store.bind('late', 'x'), (e) => e instanceof bindlog.StoreClosedError && e.code === 'BINDLOG_ECLOSED');
    const rs = await Promise.all(ps);
    assert.ok(rs.every((r) => r.outcome === 'applied'));
    await late;
    store = Store.open(dir, { readOnly: true });
    t.after(() => store.close());
    assert.equal(store.stats().headLsn, 100);
    assert.equal(store.get('k99').sessionId, 's99');
});

test('the process exits by itself: pending writes, an unclosed store, a follow left early', async (t) => {
    for (const mode of ['pending', 'open', 'follow', 'idle']) {
        const dir = tempDir(t, mode);
        let child;
        const killer = setTimeout(() => child && child.kill('SIGKILL'), 15000);
        const r = await runNode(path.join(FIXTURES, 'exit.js'), [dir, mode], { onSpawn: (c) => { child = c; } });
        clearTimeout(killer);
        assert.equal(r.signal, null, `${mode}: the process hung and was killed`);
        assert.equal(r.code, 0, `${mode}: ${r.stderr}`);
        assert.match(r.stdout, new RegExp(`done ${mode}\\n$`));
        if (mode === 'pending')
            assert.match(r.stdout, /settled 50/);
    }
});

test('worker threads terminated mid-write, and stores left to the garbage collector', async (t) => {
    const dir = tempDir(t, 'workers');
    const r = await runNode(path.join(FIXTURES, 'workers.js'), [dir], { nodeArgs: ['--expose-gc'] });
    assert.equal(r.signal, null, r.stderr);
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.equal(out.head, out.rounds, 'a terminated worker\'s accepted writes were all made');
});

test('two handles on one store in one process share it', async (t) => {
    const dir = tempDir(t);
    const a = Store.open(dir, { durability: 'none' });
    const b = Store.open(dir, { durability: 'none' });
    await Promise.all([a.bind('x', 'X'), b.bind('y', 'Y')]);
    assert.equal(a.get('y').sessionId, 'Y');
    a.close();
    assert.equal(b.get('x').sessionId, 'X', 'closing one handle leaves the other working');
    await b.bind('z', 'Z');
    b.close();
});
