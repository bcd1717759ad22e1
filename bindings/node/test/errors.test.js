'use strict';
// Bad input through the Node binding: a wrong JavaScript type throws a
// TypeError (RangeError for an impossible number) at once, before any I/O;
// a value the library refuses rejects the promise with a BindlogError whose
// code is the C name and whose message is bindlog_last_error(); neither
// writes anything.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { bindlog, openStore, tempDir, rejectsWith, logOf } = require('./helpers');

const { Store, BindlogError } = bindlog;

// The state must not move: same head, same digest, same log.
function snapshot(store) {
    return { head: store.stats().headLsn, digest: store.digest(), log: logOf(store).length };
}

test('wrong JavaScript types throw a TypeError at once and write nothing', async (t) => {
    const { store } = openStore(t);
    await store.bind('k', 'A');
    const before = snapshot(store);
    const circular = {};
    circular.self = circular;
    const typeErrors = [
        () => store.bind(1, 'A'),
        () => store.bind('k', undefined),
        () => store.bind('k', 'B', 'not options'),
        () => store.bind('k', 'B', { reasn: 'typo' }),
        () => store.bind('k', 'B', { expect: 5 }),
        () => store.bind('k', 'B', { reason: {} }),
        () => store.bind('k', 'B', { origin: 42 }),
        () => store.bind('k', 'B', { origin: circular }),
        () => store.bind('k', 'B', { origin: { big: 1n } }),
        () => store.newSession(['k'], 'B'),
        () => store.split('k', 'A', 'B'),
        () => store.split('k', 'A', 'B', '1'),
        () => store.split('k', 'A', null, 1),
        () => store.split('k', 'A', 'B', 1, { origin: true }),
        () => store.invalidate(Symbol('k')),
        () => store.unbind('k', { reason: 1 }),
        () => store.applyBatch('not an array'),
        () => store.applyBatch([null]),
        () => store.applyBatch([{ type: 'nope', key: 'k' }]),
        () => store.applyBatch([{ type: 'split', key: 'k', parentId: 'A', childId: 'B' }]),
        () => store.applyBatch([{ type: 'bind', key: 'k', sessionId: 'B', parentId: 'A' }]),
        () => store.applyBatch([{ type: 'toString', key: 'k' }]),
        () => store.get(5),
        () => store.get(),
        () => store.session({}),
        () => store.history(null),
        () => store.log({ from: 'x' }),
        () => store.log({ since: 1 }),
        () => store.follow({ from: '1' }),
        () => Store.open(5),
        () => Store.open('x', { durability: 'fast' }),
        () => Store.open('x', { readOnly: 'yes' }),
        () => Store.open('x', { writerThreads: 0 }),
    ];
    for (const [i, f] of typeErrors.entries())
        assert.throws(f, TypeError, `case ${i}: ${f}`);
    const rangeErrors = [
        () => store.split('k', 'A', 'B', -1),
        () => store.split('k', 'A', 'B', 1.5),
        () => store.split('k', 'A', 'B', 2 ** 53),
        () => store.split('k', 'A', 'B', -1n),
        () => store.split('k', 'A', 'B', 2n ** 64n),
        () => store.log({ from: -1 }),
        () => store.follow({ from: 0 }),
    ];
    for (const [i, f] of rangeErrors.entries())
        assert.throws(f, RangeError, `range case ${i}: ${f}`);
    assert.deepEqual(snapshot(store), before);
});

test('values the library refuses reject with BINDLOG_EINVAL and write nothing', async (t) => {
    const { store } = openStore(t);
    await store.bind('k', 'A');
    const before = snapshot(store);
    await rejectsWith(store.bind('x'.repeat(401), 'S'), 'BINDLOG_EINVAL', /^bind /);
    await rejectsWith(store.bind('', 'S'), 'BINDLOG_EINVAL');
    await rejectsWith(store.bind('k2', 'S\n'), 'BINDLOG_EINVAL');
    await rejectsWith(store.bind('k2', 'i'.repeat(129)), 'BINDLOG_EINVAL');
    await rejectsWith(store.bind('k2', 'S', { reason: 'r'.repeat(65) }), 'BINDLOG_EINVAL');
    await rejectsWith(store.bind('k2', 'S', { origin: Buffer.alloc(65537) }), 'BINDLOG_EINVAL');
    await rejectsWith(store.bind('k\u0000hidden', 'S'), 'BINDLOG_EINVAL', /NUL/);
    await rejectsWith(store.newSession('k', 'S\u0000'), 'BINDLOG_EINVAL', /NUL/);
    await rejectsWith(store.split('k', 'A', 'A', 1), 'BINDLOG_EINVAL');
    await rejectsWith(store.invalidate('k', { reason: '\u0007' }), 'BINDLOG_EINVAL');
    assert.deepEqual(snapshot(store), before);
    // the largest values that are allowed do go in
    await store.bind('x'.repeat(400), 'i'.repeat(128), { origin: Buffer.alloc(65536, 1), reason: 'r'.repeat(64) });
    assert.equal(store.session('i'.repeat(128)).origin.length, 65536);
});

test('state errors reject with their code and the library\'s message', async (t) => {
    const { store } = openStore(t);
    await store.bind('k', 'A');
    await store.bind('j', 'J');
    const before = snapshot(store);
    let err = await rejectsWith(store.split('nokey', 'A', 'B', 1), 'BINDLOG_ENOTFOUND');
    assert.equal(err.message, 'split nokey: key is not bound');
    assert.equal(err.errno, -1);
    assert.equal(err.name, 'BindlogError');
    assert.ok(err instanceof Error);
    assert.ok(err.stack.includes('BindlogError'));
    await rejectsWith(store.invalidate('nokey'), 'BINDLOG_ENOTFOUND', /invalidate nokey/);
    await rejectsWith(store.unbind('nokey'), 'BINDLOG_ENOTFOUND');
    await rejectsWith(store.bind('k', 'J'), 'BINDLOG_ECONFLICT', /bind k/);
    await rejectsWith(store.newSession('k', 'J'), 'BINDLOG_EEXIST');
    await rejectsWith(store.split('k', 'A', 'J', 1), 'BINDLOG_EEXIST');
    assert.deepEqual(snapshot(store), before);
    // a message stays with its own call: the next success has none to leak
    assert.equal((await store.bind('k', 'A')).outcome, 'already');
});

test('a batch with one bad event rejects with its index and writes none of it', async (t) => {
    const { store } = openStore(t);
    await store.bind('k', 'A');
    const before = snapshot(store);
    const err = await rejectsWith(store.applyBatch([
        { type: 'bind', key: 'n1', sessionId: 'N1' },
        { type: 'split', key: 'k', parentId: 'A', childId: 'B', runGeneration: 1 },
        { type: 'newSession', key: 'n2', sessionId: 'A' }, // A exists: EEXIST
        { type: 'bind', key: 'n3', sessionId: 'N3' },
    ]), 'BINDLOG_EEXIST');
    assert.equal(err.index, 2);
    assert.deepEqual(snapshot(store), before);
    assert.equal(store.get('n1'), null);
    assert.equal(store.session('B'), null);
    const bad = await rejectsWith(store.applyBatch([
        { type: 'bind', key: 'n1', sessionId: 'N1' },
        { type: 'bind', key: 'n2', sessionId: 'bad\u0001id' },
    ]), 'BINDLOG_EINVAL');
    assert.equal(bad.index, 1);
    const nul = await rejectsWith(store.applyBatch([
        { type: 'bind', key: 'n1', sessionId: 'N1' },
        { type: 'invalidate', key: 'k' },
        { type: 'bind', key: 'n\u00002', sessionId: 'N2' },
    ]), 'BINDLOG_EINVAL', /events\[2\]\.key contains a NUL/);
    assert.equal(nul.index, 2);
    assert.deepEqual(snapshot(store), before);
});

test('read-only handles, missing stores, etcd:// and things that are not stores', async (t) => {
    const dir = tempDir(t);
    assert.throws(() => Store.open(dir, { readOnly: true }),
        (e) => e instanceof BindlogError && e.code === 'BINDLOG_ENOTFOUND' && e.message.includes(dir));
    assert.equal(fs.existsSync(dir), false, 'a read-only open creates nothing');
    const w = Store.open(dir, { durability: 'none' });
    await w.bind('k', 'A');
    const ro = Store.open(dir, { readOnly: true });
    t.after(() => { ro.close(); w.close(); });
    await rejectsWith(ro.bind('k2', 'B'), 'BINDLOG_EREADONLY');
    await rejectsWith(ro.bind('', 'B'), 'BINDLOG_EINVAL', null); // arguments are checked first
    assert.equal(ro.get('k').sessionId, 'A');

    assert.throws(() => Store.open('etcd://127.0.0.1:2379/x'),
        (e) => e instanceof BindlogError && e.code === 'BINDLOG_ENOTSUP');
    assert.throws(() => Store.open('ftp://host/x'), (e) => e.code === 'BINDLOG_EINVAL');
    assert.throws(() => Store.open(''), (e) => e.code === 'BINDLOG_EINVAL');
    const file = path.join(path.dirname(dir), 'plain-file');
    fs.writeFileSync(file, 'not a store');
    assert.throws(() => Store.open(file), (e) => e instanceof BindlogError && /^BINDLOG_E/.test(e.code));
    const other = path.join(path.dirname(dir), 'other');
    fs.mkdirSync(other);
    fs.writeFileSync(path.join(other, 'data.mdb'), Buffer.alloc(8192, 0x5a));
    assert.throws(() => Store.open(other), (e) => e instanceof BindlogError && /^BINDLOG_E/.test(e.code));
    assert.equal(fs.readFileSync(path.join(other, 'data.mdb')).equals(Buffer.alloc(8192, 0x5a)), true,
        'a refused file is left as it was');
});

test('a closed store rejects writes and throws on reads; close is idempotent', async (t) => {
    const { store } = openStore(t);
    await store.bind('k', 'A');
    const it = store.log();
    store.close();
    store.close();
    assert.equal(store.closed, true);
    await rejectsWith(store.bind('k', 'B'), 'BINDLOG_ECLOSED', /closed/);
    await rejectsWith(store.split('k', 'A', 'B', 1), 'BINDLOG_ECLOSED', /closed/);
    assert.throws(() => store.split(1, 'A', 'B', 1), TypeError, 'types are still checked first');
    assert.throws(() => store.get('k'), (e) => e instanceof bindlog.StoreClosedError && e.code === 'BINDLOG_ECLOSED' && /closed/.test(e.message));
    assert.throws(() => store.stats(), BindlogError);
    assert.throws(() => store.follow(), BindlogError);
    assert.throws(() => it.next(), (e) => e instanceof BindlogError && /closed/.test(e.message),
        'an iterator of a closed store');
});
