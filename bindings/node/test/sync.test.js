'use strict';
// The *Sync writes: the same calls as the promise writes, made on the
// JavaScript thread.  They must decide exactly as their twins (same
// outcomes, same records, same state), throw what their twins reject with,
// write nothing when they throw, and mix with promise writes in flight.
const test = require('node:test');
const assert = require('node:assert/strict');
const { bindlog, openStore, tempDir, rejectsWith, logOf } = require('./helpers');

const { Store, BindlogError } = bindlog;

// One gateway story, as [method, args]: every event type and every outcome.
const STORY = [
    ['bind', ['tg:1', 'A']],
    ['bind', ['tg:1', 'A']], // already
    ['split', ['tg:1', 'A', 'A1', 1, { origin: { chat: 1 } }]],
    ['split', ['tg:1', 'A', 'A2', 1]], // moved: A1 is current
    ['invalidate', ['tg:1', { reason: 'stop' }]],
    ['split', ['tg:1', 'A1', 'A3', 1]], // stale: the generation moved
    ['newSession', ['tg:1', 'B', { reason: 'new', origin: 'x' }]],
    ['bind', ['tg:2', 'C', { expect: '' }]],
    ['bind', ['tg:2', 'D', { expect: 'Z' }]], // moved: expect fails
    ['unbind', ['tg:2', { reason: 'idle' }]],
    ['applyBatch', [[
        { type: 'bind', key: 'tg:3', sessionId: 'E' },
        { type: 'split', key: 'tg:3', parentId: 'E', childId: 'E1', runGeneration: 1 },
        { type: 'invalidate', key: 'tg:3' },
    ]]],
    ['importEntries', [[
        { key: 'tg:4', sessionId: 'F', timeMs: 1000 },
        { key: 'tg:1', sessionId: 'G', timeMs: 1001 }, // moved: tg:1 routes to B
        { key: 'tg:5', sessionId: 'B', timeMs: 1002 }, // refused: B is tg:1's
    ]]],
];

// A result or an error as plain data, comparable across the two ways.
function plain(v) {
    if (Array.isArray(v))
        return v.map(plain);
    if (v instanceof BindlogError)
        return { error: v.code, message: v.message, index: v.index };
    return { ...v };
}

// A record without its time (the two stores write at different moments).
const untimed = ({ timeMs, ...rest }) => rest; // eslint-disable-line no-unused-vars

test('a *Sync write decides, logs and returns exactly what its promise twin does', async (t) => {
    const { store: a } = openStore(t);
    const { store: s } = openStore(t);
    for (const [method, args] of STORY) {
        const viaPromise = plain(await a[method](...args));
        const r = s[`${method}Sync`](...args);
        assert.ok(!(r instanceof Promise), `${method}Sync returns its result, not a promise`);
        const renamed = JSON.parse(JSON.stringify(plain(r)).replaceAll(`${method}Sync`, method));
        assert.deepEqual(renamed, viaPromise, `${method}(${JSON.stringify(args)})`);
    }
    // the log decides the state; times differ (the stores wrote at
    // different moments), so the digests do, and nothing else may
    assert.deepEqual(logOf(s).map(untimed), logOf(a).map(untimed));
    for (const key of ['tg:1', 'tg:2', 'tg:3', 'tg:4', 'tg:5'])
        assert.deepEqual(s.get(key) && { ...s.get(key), updatedMs: 0, lastActivityMs: 0 },
            a.get(key) && { ...a.get(key), updatedMs: 0, lastActivityMs: 0 }, key);
    for (const id of ['A', 'A1', 'B', 'C', 'E', 'E1', 'F'])
        assert.deepEqual({ ...s.session(id), createdMs: 0, endedMs: 0 },
            { ...a.session(id), createdMs: 0, endedMs: 0 }, id);
    assert.equal(s.stats().headLsn, a.stats().headLsn);
});

test('*Sync errors are thrown at once, name the call, and write nothing', async (t) => {
    const { store } = openStore(t);
    store.bindSync('k', 'A');
    store.bindSync('j', 'J');
    const before = { head: store.stats().headLsn, digest: store.digest() };
    const throwsCode = (fn, code, pattern) => assert.throws(fn, (e) => {
        assert.ok(e instanceof BindlogError, `expected a BindlogError, got ${e}`);
        assert.equal(e.code, code, e.message);
        if (pattern)
            assert.match(e.message, pattern);
        return true;
    });
    throwsCode(() => store.splitSync('nokey', 'A', 'B', 1), 'BINDLOG_ENOTFOUND', /^split nokey: key is not bound$/);
    throwsCode(() => store.invalidateSync('nokey'), 'BINDLOG_ENOTFOUND', /invalidate nokey/);
    throwsCode(() => store.unbindSync('nokey'), 'BINDLOG_ENOTFOUND');
    throwsCode(() => store.bindSync('k', 'J'), 'BINDLOG_ECONFLICT', /bind k/);
    throwsCode(() => store.newSessionSync('k', 'J'), 'BINDLOG_EEXIST');
    throwsCode(() => store.bindSync('k\u0000x', 'J'), 'BINDLOG_EINVAL', /bindSync: key contains a NUL/);
    throwsCode(() => store.splitSync('k', 'A', 'bad\u0001id', 1), 'BINDLOG_EINVAL');
    const batch = assert.throws(() => store.applyBatchSync([
        { type: 'bind', key: 'n1', sessionId: 'N1' },
        { type: 'newSession', key: 'n2', sessionId: 'A' }, // A exists
    ]), (e) => e instanceof BindlogError && e.code === 'BINDLOG_EEXIST' && e.index === 1);
    assert.equal(batch, undefined);
    throwsCode(() => store.applyBatchSync([
        { type: 'bind', key: 'n1', sessionId: 'N1' },
        { type: 'bind', key: 'n\u00002', sessionId: 'N2' },
    ]), 'BINDLOG_EINVAL', /applyBatchSync: events\[1\]\.key contains a NUL/);
    // wrong JavaScript types: a TypeError, as for the promise twins
    assert.throws(() => store.bindSync(1, 'A'), TypeError);
    assert.throws(() => store.splitSync('k', 'A', 'B'), TypeError);
    assert.throws(() => store.splitSync('k', 'A', 'B', 1, { origin: true }), TypeError);
    assert.throws(() => store.unbindSync('k', { reasn: 'typo' }), /unbindSync/);
    assert.throws(() => store.applyBatchSync('x'), /applyBatchSync: events must be an array/);
    assert.throws(() => store.applyBatchSync([{ type: 'nope', key: 'k' }]), /applyBatchSync: events\[0\]/);
    assert.throws(() => store.importEntriesSync([{ key: 'k', sessionId: 'A', timeMs: 'x' }]),
        /importEntriesSync: entries\[0\]\.timeMs/);
    assert.deepEqual({ head: store.stats().headLsn, digest: store.digest() }, before);
    // a refused import entry is an item, not a throw
    const items = store.importEntriesSync([{ key: 'k2', sessionId: 'A', timeMs: 5 }]);
    assert.ok(items[0] instanceof BindlogError);
    assert.equal(items[0].code, 'BINDLOG_ECONFLICT');
    assert.equal(items[0].index, 0);
});

test('*Sync writes on a read-only or closed store throw', async (t) => {
    const dir = tempDir(t);
    const w = Store.open(dir, { durability: 'none' });
    w.bindSync('k', 'A');
    const ro = Store.open(dir, { readOnly: true });
    assert.throws(() => ro.bindSync('k2', 'B'), (e) => e.code === 'BINDLOG_EREADONLY');
    assert.throws(() => ro.applyBatchSync([{ type: 'bind', key: 'k2', sessionId: 'B' }]),
        (e) => e.code === 'BINDLOG_EREADONLY');
    ro.close();
    w.close();
    assert.throws(() => w.splitSync('k', 'A', 'B', 1),
        (e) => e instanceof bindlog.StoreClosedError && e instanceof BindlogError &&
            e.code === 'BINDLOG_ECLOSED' && e.errno === undefined &&
            e.message === 'splitSync: the store is closed');
    // the promise twin still rejects rather than throws
    await rejectsWith(w.split('k', 'A', 'B', 1), 'BINDLOG_ECLOSED', /^split: the store is closed$/);
});

test('a FULL *Sync write is on disk when it returns', async (t) => {
    const dir = tempDir(t);
    const s = Store.open(dir, { durability: 'full' });
    const r = s.newSessionSync('tg:9', 'S1', { origin: Buffer.from([1, 2, 3]) });
    assert.equal(r.outcome, 'applied');
    // another handle (a reader in this process) sees it at once
    const ro = Store.open(dir, { readOnly: true });
    assert.equal(ro.get('tg:9').sessionId, 'S1');
    assert.deepEqual([...ro.session('S1').origin], [1, 2, 3]);
    ro.close();
    s.close();
    const again = Store.open(dir, { readOnly: true });
    assert.equal(again.get('tg:9').lsn, r.lsn);
    again.close();
});

test('*Sync writes mix with promise writes in flight', async (t) => {
    const { store } = openStore(t, { durability: 'normal', writerThreads: 4 });
    const keys = Array.from({ length: 8 }, (_, i) => `k${i}`);
    store.applyBatchSync(keys.map((key) => ({ type: 'bind', key, sessionId: `${key}-s0` })));
    const cur = keys.map((key) => `${key}-s0`);
    const ROUNDS = 50;
    const turn = () => new Promise((r) => setImmediate(r));
    // even keys: awaited promise splits (several in flight at once, one per
    // key); odd keys: sync splits, one per turn of the loop, made while
    // the promise writes are on the writer threads
    const one = async (i) => {
        let applied = 0;
        for (let round = 1; round <= ROUNDS; round++) {
            const child = `${keys[i]}-s${round}`;
            const r = i % 2 === 0 ? await store.split(keys[i], cur[i], child, 1)
                : store.splitSync(keys[i], cur[i], child, 1);
            if (r.outcome === 'applied')
                applied++;
            cur[i] = child;
            if (i % 2 === 1)
                await turn();
        }
        return applied;
    };
    const applied = await Promise.all(keys.map((_, i) => one(i)));
    assert.deepEqual(applied, keys.map(() => ROUNDS));
    keys.forEach((key, i) => assert.equal(store.get(key).sessionId, cur[i]));
    const lsns = logOf(store).map((r) => r.lsn);
    assert.equal(lsns.length, keys.length * (ROUNDS + 1));
    assert.deepEqual(lsns, lsns.slice().sort((x, y) => x - y));
    assert.ok(store.stats().commits < lsns.length, 'promise writes still share group commits');
});
