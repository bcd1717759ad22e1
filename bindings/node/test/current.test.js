'use strict';
// result.isCurrent(runGeneration): the retry edge.  A split retried after
// /stop is 'already' (the split went in) with a higher generation.
const test = require('node:test');
const assert = require('node:assert/strict');
const { bindlog, openStore } = require('./helpers');

test('isCurrent: a retried split after /stop is already but not current', async (t) => {
    const { store } = openStore(t);
    const b = await store.bind('k', 'A');
    const gen = b.generation;
    assert.equal(b.isCurrent(gen), true);
    const s = await store.split('k', 'A', 'B', gen);
    assert.equal(s.outcome, 'applied');
    assert.equal(s.isCurrent(gen), true);
    assert.equal(s.isCurrent(BigInt(gen)), true, 'a bigint generation compares too');
    await store.invalidate('k'); // /stop
    const retry = await store.split('k', 'A', 'B', gen);
    assert.equal(retry.outcome, 'already');
    assert.equal(retry.isCurrent(gen), false, 'the run was stopped');
    const stale = store.splitSync('k', 'B', 'C', gen);
    assert.equal(stale.outcome, 'stale');
    assert.equal(stale.isCurrent(gen), false);
    assert.deepEqual(Object.keys(retry), ['outcome', 'lsn', 'generation', 'sessionId'],
        'isCurrent is not enumerable');
    assert.throws(() => retry.isCurrent('1'), TypeError);
    assert.throws(() => retry.isCurrent(0.5), RangeError);
    const [r] = await store.applyBatch([{ type: 'bind', key: 'k2', sessionId: 'X' }]);
    assert.equal(r.isCurrent(r.generation), true, 'batch results carry it too');
});

test('StoreClosedError: its own class and code, a BindlogError', async (t) => {
    const { store } = openStore(t);
    store.close();
    assert.throws(() => store.get('k'), (e) => e instanceof bindlog.StoreClosedError &&
        e instanceof bindlog.BindlogError && e.name === 'StoreClosedError' &&
        e.code === 'BINDLOG_ECLOSED' && e.message === 'get: the store is closed');
});

test('follow({ until: "head" }) stops at the head at the call; snapshot() reads as of one LSN', async (t) => {
    const { store } = openStore(t);
    const g = (await store.bind('k', 'A')).generation;
    await store.bind('gone', 'G');
    const feed = store.follow({ from: 1, until: 'head' });
    const snap = store.snapshot();
    await store.split('k', 'A', 'B', g);
    await store.invalidate('k');
    await store.unbind('gone');
    await store.bind('new', 'N');
    const lsns = [];
    for await (const r of feed)
        lsns.push(r.lsn);
    assert.deepEqual(lsns, [1, 2]);
    const two = [];
    for await (const r of store.follow({ from: 3, until: 4 }))
        two.push(r.lsn);
    assert.deepEqual(two, [3, 4]);
    assert.throws(() => store.follow({ until: 'tail' }), TypeError);

    assert.equal(snap.headLsn, 2);
    assert.equal(snap.get('k').sessionId, 'A');
    assert.equal(snap.generation('k'), g);
    assert.equal(snap.has('gone'), true);
    assert.equal(snap.get('new'), null);
    assert.equal(snap.session('A').endedLsn, 0, 'A ended after the snapshot');
    assert.equal(snap.session('B'), null, 'B was created after it');
    assert.equal(store.get('k').sessionId, 'B');
});
