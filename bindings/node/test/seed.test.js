'use strict';
// The seed scenarios of SPEC section 2 through the Node binding, and the
// shape of every result, binding, session and record it returns.  Each test
// checks the whole trace an event leaves or must not leave: binding, log
// records, sessions, origins.
const test = require('node:test');
const assert = require('node:assert/strict');
const v8 = require('node:v8');
const vm = require('node:vm');
const { bindlog, openStore, logOf, tempDir } = require('./helpers');

const { ANY_GENERATION } = bindlog;
const KEY = 'agent:main:telegram:dm:12345';

test('seed 1: a split is published even if the turn then fails; a retry is already', async (t) => {
    const { store } = openStore(t);
    const originA = { peer: 'telegram:12345' };
    let r = await store.bind(KEY, 'A', { expect: '', origin: originA });
    assert.deepEqual(r, { outcome: 'applied', lsn: 1, generation: 1, sessionId: 'A' });

    const run = store.get(KEY); // the run starts: it remembers (A, g)
    assert.equal(run.sessionId, 'A');
    const g = run.generation;

    const originC = Buffer.from('{"peer":"telegram:12345","split":1}');
    r = await store.split(KEY, run.sessionId, 'C', g, { origin: originC });
    assert.deepEqual(r, { outcome: 'applied', lsn: 2, generation: g, sessionId: 'C' });
    // ... and then the turn fails: nothing else happens.

    const b = store.get(KEY);
    assert.equal(b.sessionId, 'C');
    assert.equal(b.generation, g);
    assert.equal(b.lsn, 2);
    assert.equal(b.key, KEY);
    const log = logOf(store);
    assert.equal(log.length, 2);
    assert.deepEqual(
        { lsn: log[1].lsn, type: log[1].type, key: log[1].key, sessionId: log[1].sessionId,
          otherId: log[1].otherId, reason: log[1].reason, generation: log[1].generation },
        { lsn: 2, type: 'split', key: KEY, sessionId: 'C', otherId: 'A', reason: 'compression',
          generation: g });
    assert.deepEqual(log[1].origin, originC);
    assert.deepEqual(JSON.parse(log[0].origin), originA);

    const c = store.session('C');
    assert.equal(c.parentId, 'A');
    assert.equal(c.key, KEY);
    assert.equal(c.createdLsn, 2);
    assert.equal(c.endedLsn, 0);
    assert.deepEqual(c.origin, originC);
    const a = store.session('A');
    assert.equal(a.endedLsn, 2);
    assert.equal(a.endReason, 'compression');
    assert.deepEqual(JSON.parse(a.origin.toString()), originA);

    // the retry after a lost reply: already, nothing written
    const digest = store.digest();
    r = await store.split(KEY, 'A', 'C', g, { origin: originC });
    assert.deepEqual(r, { outcome: 'already', lsn: 0, generation: g, sessionId: 'C' });
    assert.equal(store.stats().headLsn, 2);
    assert.equal(store.digest(), digest);
});

test('seed 2: /stop and /new while the run compresses make the late split stale, traceless', async (t) => {
    const { store } = openStore(t);
    await store.bind(KEY, 'A', { expect: '' });
    const g = store.get(KEY).generation;

    let r = await store.invalidate(KEY, { reason: 'stop' }); // /stop
    assert.deepEqual(r, { outcome: 'applied', lsn: 2, generation: g + 1, sessionId: 'A' });
    r = await store.newSession(KEY, 'B', { origin: 'fresh' }); // /new
    assert.deepEqual(r, { outcome: 'applied', lsn: 3, generation: g + 2, sessionId: 'B' });

    const digest = store.digest();
    r = await store.split(KEY, 'A', 'C', g, { origin: 'late' }); // the run finishes compressing
    assert.deepEqual(r, { outcome: 'stale', lsn: 0, generation: g + 2, sessionId: 'B' });
    assert.equal(store.session('C'), null);
    assert.equal(store.stats().headLsn, 3);
    assert.equal(logOf(store).length, 3);
    assert.equal(store.digest(), digest);
    assert.equal(store.get(KEY).sessionId, 'B');
    assert.equal(store.session('B').parentId, 'A');
    assert.equal(store.session('A').endReason, 'new_session');
    assert.equal(logOf(store)[1].reason, 'stop');
});

test('seed 3: the identity guard stops a second run of the same generation, and ANY_GENERATION', async (t) => {
    const { store } = openStore(t);
    await store.bind(KEY, 'A', { expect: '' });
    const g = store.get(KEY).generation;
    // two runs of generation g both started on A; the first splits A->C
    let r = await store.split(KEY, 'A', 'C', g);
    assert.equal(r.outcome, 'applied');
    const digest = store.digest();
    r = await store.split(KEY, 'A', 'D', g);
    assert.deepEqual(r, { outcome: 'moved', lsn: 0, generation: g, sessionId: 'C' });
    assert.equal(store.session('D'), null);
    assert.equal(store.digest(), digest);

    // a gateway that does not number its runs passes ANY_GENERATION; after
    // a /resume moved the key to B, its split of A is still stopped
    const key2 = `${KEY}:2`;
    await store.bind(key2, 'A2', { expect: '' });
    r = await store.bind(key2, 'B2'); // /resume
    assert.equal(r.outcome, 'applied');
    const head = store.stats().headLsn;
    r = await store.split(key2, 'A2', 'C2', ANY_GENERATION);
    assert.deepEqual(r, { outcome: 'moved', lsn: 0, generation: 2, sessionId: 'B2' });
    assert.equal(store.session('C2'), null);
    assert.equal(store.stats().headLsn, head);
    // ... and on the right parent ANY_GENERATION goes through
    r = await store.split(key2, 'B2', 'C2', ANY_GENERATION);
    assert.equal(r.outcome, 'applied');
});

test('generations: a number, a bigint and ANY_GENERATION are all accepted', async (t) => {
    const { store } = openStore(t);
    await store.bind('k', 'A');
    assert.equal((await store.split('k', 'A', 'B', 1n)).outcome, 'applied');
    assert.equal((await store.split('k', 'B', 'C', 2)).outcome, 'stale');
    assert.equal((await store.split('k', 'B', 'C', 2n ** 64n - 2n)).outcome, 'stale');
    assert.equal((await store.split('k', 'B', 'C', ANY_GENERATION)).outcome, 'applied');
    assert.equal(ANY_GENERATION, 0xFFFFFFFFFFFFFFFFn);
});

test('origins: string, Buffer, Uint8Array and objects (as JSON); a split copies the parent\'s', async (t) => {
    const { store } = openStore(t);
    await store.bind('k1', 'S1', { origin: 'text é' });
    await store.bind('k2', 'S2', { origin: Buffer.from([0, 1, 2, 255]) });
    await store.bind('k3', 'S3', { origin: new Uint8Array([7, 8]) });
    await store.bind('k4', 'S4', { origin: { chat: 42, tags: ['a'] } });
    await store.bind('k5', 'S5');
    await store.bind('k6', 'S6', { origin: '' });
    assert.equal(store.session('S1').origin.toString('utf8'), 'text é');
    assert.deepEqual([...store.session('S2').origin], [0, 1, 2, 255]);
    assert.deepEqual([...store.session('S3').origin], [7, 8]);
    assert.deepEqual(JSON.parse(store.session('S4').origin), { chat: 42, tags: ['a'] });
    assert.equal(store.session('S5').origin.length, 0);
    const log = logOf(store);
    assert.equal(log[4].origin, null, 'no origin given: null in the record');
    assert.deepEqual(log[5].origin, Buffer.alloc(0), 'an explicitly empty origin');
    await store.split('k4', 'S4', 'S4b', 1);
    assert.deepEqual(JSON.parse(store.session('S4b').origin), { chat: 42, tags: ['a'] });
});

test('reads: get, session, history and log return plain values; unknown is null', async (t) => {
    const { store } = openStore(t);
    assert.equal(store.get('nobody'), null);
    assert.equal(store.session('nothing'), null);
    assert.deepEqual([...store.history('nobody')], []);
    assert.deepEqual(logOf(store), []);

    await store.bind('k', 'A', { reason: 'first' });
    await store.newSession('k', 'B');
    await store.bind('other', 'X');
    await store.unbind('k', { reason: 'idle' });
    assert.equal(store.get('k'), null, 'a tombstone routes nowhere');
    const h = [...store.history('k')];
    assert.deepEqual(h.map((r) => [r.lsn, r.type, r.sessionId, r.otherId, r.generation, r.reason]), [
        [1, 'bind', 'A', '', 1, 'first'],
        [2, 'newSession', 'B', 'A', 2, 'new_session'],
        [4, 'unbind', 'B', '', 3, 'idle'],
    ]);
    for (const r of h) {
        assert.equal(typeof r.timeMs, 'number');
        assert.ok(r.timeMs > 1.6e12);
    }
    assert.deepEqual([...store.log({ from: 2, to: 3 })].map((r) => r.lsn), [2, 3]);
    assert.deepEqual([...store.log({ from: 3n })].map((r) => r.lsn), [3, 4]);
    assert.deepEqual([...store.log({ from: 5 })], []);
    const b = store.session('B');
    assert.equal(b.endReason, 'idle');
    assert.equal(b.endedLsn, 4);
    assert.equal(b.parentId, 'A');

    const s = store.stats();
    assert.equal(s.headLsn, 4);
    assert.equal(s.liveBindings, 1);
    assert.equal(s.bindings, 2);
    assert.deepEqual(s.applied, { bind: 2, newSession: 1, split: 0, invalidate: 0, unbind: 1, route: 0 });
    assert.equal(s.durability, 'none');
    assert.match(store.digest(), /^[0-9a-f]{32}$/);
    assert.match(bindlog.version, /^\d+\.\d+\.\d+$/);
});

test('applyBatch: one transaction, results in order, each event seeing the ones before', async (t) => {
    const { store } = openStore(t);
    const rs = await store.applyBatch([
        { type: 'bind', key: 'k', sessionId: 'A', expect: '', origin: { n: 1 } },
        { type: 'split', key: 'k', parentId: 'A', childId: 'B', runGeneration: 1 },
        { type: 'split', key: 'k', parentId: 'A', childId: 'C', runGeneration: 1 },
        { type: 'invalidate', key: 'k', reason: 'stop' },
        { type: 'newSession', key: 'k', sessionId: 'D' },
        { type: 'unbind', key: 'k' },
    ]);
    assert.deepEqual(rs.map((r) => r.outcome), ['applied', 'applied', 'moved', 'applied', 'applied', 'applied']);
    assert.deepEqual(rs.map((r) => r.generation), [1, 1, 1, 2, 3, 4]);
    assert.equal(store.stats().commits, 1, 'one transaction');
    assert.deepEqual(await store.applyBatch([]), []);
});

test('history and log iterators read one snapshot and may be left early', async (t) => {
    const { store } = openStore(t);
    for (let i = 0; i < 10; i++)
        await store.bind(`k${i}`, `s${i}`);
    const it = store.log();
    assert.equal(it.next().value.lsn, 1);
    await store.bind('late', 'sl'); // after the snapshot
    assert.equal([...it].length, 9, 'the snapshot does not see the later write');
    for (const r of store.log()) {
        if (r.lsn === 3)
            break; // return() closes the native iterator
    }
    assert.equal(logOf(store).length, 11);
});

test('an iterator keeps its store open while it reads, even with no other reference', async (t) => {
    const dir = tempDir(t);
    const w = bindlog.Store.open(dir, { durability: 'none' });
    for (let i = 0; i < 5; i++)
        await w.bind('k', `s${i}`);
    w.close();
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc');
    const it = bindlog.Store.open(dir, { readOnly: true }).history('k'); // the store is unreachable now
    const first = it.next().value;
    for (let i = 0; i < 3; i++) {
        gc();
        await new Promise((r) => setImmediate(r));
    }
    assert.equal(first.lsn, 1);
    assert.deepEqual([...it].map((r) => r.lsn), [2, 3, 4, 5]);
});
