'use strict';
// Moving a gateway's routing table in: store.importEntries() (the library's
// bindlog_import_entries) and parseSessionsJson() for the two sessions.json
// formats of `bindlog import-json`.
const test = require('node:test');
const assert = require('node:assert/strict');
const { bindlog, openStore, tempDir, logOf } = require('./helpers');

const { Store, BindlogError, parseSessionsJson } = bindlog;
const T0 = Date.UTC(2026, 0, 1, 10, 0, 0);

test('importEntries: each entry bound alone, in time order, logged with its time; a rerun is already', async (t) => {
    const { store } = openStore(t);
    // times never go back along the log: the first record is older than every entry
    await store.importEntries([{ key: 'taken', sessionId: 'elsewhere', timeMs: T0 + 100 }]);
    const entries = [
        { key: 'k3', sessionId: 's3', timeMs: T0 + 3000, origin: { n: 3 } },
        { key: 'k1', sessionId: 's1', timeMs: new Date(T0 + 1000) },
        { key: 'taken', sessionId: 's9', timeMs: T0 + 500 },          // bound to another session: moved
        { key: 'k2', sessionId: 's1', timeMs: T0 + 2000 },            // s1 is k1's (older): conflict
        { key: 'k4', sessionId: 'bad\u0001id', timeMs: T0 + 4000 },  // refused: invalid
    ];
    const rs = await store.importEntries(entries);
    assert.equal(rs.length, 5);
    assert.equal(rs[0].outcome, 'applied');
    assert.equal(rs[1].outcome, 'applied');
    assert.deepEqual({ outcome: rs[2].outcome, sessionId: rs[2].sessionId }, { outcome: 'moved', sessionId: 'elsewhere' });
    assert.ok(rs[3] instanceof BindlogError);
    assert.equal(rs[3].code, 'BINDLOG_ECONFLICT');
    assert.equal(rs[3].index, 3);
    assert.match(rs[3].message, /^importEntries k2: /);
    assert.ok(rs[4] instanceof BindlogError);
    assert.equal(rs[4].code, 'BINDLOG_EINVAL');
    const log = logOf(store).slice(1);
    assert.deepEqual(log.map((r) => [r.key, r.sessionId, r.timeMs, r.reason]), [
        ['k1', 's1', T0 + 1000, 'import'],
        ['k3', 's3', T0 + 3000, 'import'],
    ]);
    assert.deepEqual(JSON.parse(store.session('s3').origin), { n: 3 });
    const again = await store.importEntries(entries.slice(0, 2));
    assert.deepEqual(again.map((r) => r.outcome), ['already', 'already']);
    assert.equal(store.stats().headLsn, 3);
    assert.deepEqual(await store.importEntries([]), []);
});

test('importEntries: wrong types throw at once; a read-only store rejects the call', async (t) => {
    const { store, dir } = openStore(t);
    assert.throws(() => store.importEntries('x'), TypeError);
    assert.throws(() => store.importEntries([{ key: 'k', sessionId: 's', timeMs: '2026' }]), TypeError);
    assert.throws(() => store.importEntries([{ key: 'k', sessionId: 's', when: 1 }]), TypeError);
    assert.throws(() => store.importEntries([{ key: 'k', sessionId: 5 }]), TypeError);
    assert.throws(() => store.importEntries([{ key: 'k', sessionId: 's', timeMs: 1.5 }]), RangeError);
    assert.throws(() => store.importEntries([{ key: 'k', sessionId: 's', timeMs: new Date('nope') }]), RangeError);
    assert.equal(store.stats().headLsn, 0);
    const ro = Store.open(dir, { readOnly: true });
    t.after(() => ro.close());
    await assert.rejects(ro.importEntries([{ key: 'k', sessionId: 's' }]),
        (e) => e instanceof BindlogError && e.code === 'BINDLOG_EREADONLY');
});

test('parseSessionsJson: openclaw and hermes files into entries; malformed ones skipped with why', async (t) => {
    const openclaw = JSON.stringify({
        'agent:main:telegram:dm:1': { sessionId: 'oc-1', updatedAt: T0 + 5, model: 'x' },
        'agent:main:telegram:dm:2': { sessionId: 'oc-2', updatedAt: '2026-01-01T10:00:01.250Z' },
        'agent:main:telegram:dm:3': { sessionId: 'oc-3', updatedAt: '2026-01-01T12:00:02+02:00' },
        'agent:main:telegram:dm:4': { sessionId: 'oc-4' },
        'agent:main:telegram:dm:5': { updatedAt: T0 },
        'agent:main:telegram:dm:6': { sessionId: 'oc-6', updatedAt: 'yesterday' },
        'agent:main:telegram:dm:7': 'just a string',
        _note: 'kept by hand',
    });
    const p = parseSessionsJson(openclaw, 'openclaw');
    assert.deepEqual(p.entries.map((e) => [e.key, e.sessionId, e.timeMs]), [
        ['agent:main:telegram:dm:1', 'oc-1', T0 + 5],
        ['agent:main:telegram:dm:2', 'oc-2', T0 + 1250],
        ['agent:main:telegram:dm:3', 'oc-3', T0 + 2000],
    ]);
    assert.deepEqual(JSON.parse(p.entries[0].origin), { sessionId: 'oc-1', updatedAt: T0 + 5, model: 'x' });
    assert.deepEqual(p.skipped.map((s) => [s.key.slice(-1), s.reason, s.detail]), [
        ['4', 'malformed', 'updatedAt is missing'],
        ['5', 'malformed', 'sessionId is missing'],
        ['6', 'malformed', 'updatedAt is not an ISO-8601 date and time (like 2026-01-01T10:00:00Z)'],
        ['7', 'malformed', 'the entry is a string, not an object'],
    ]);
    assert.equal(p.ignored, 1);

    const hermes = {
        _README: 'written by the gateway',
        'agent:main:discord:chan:9': { session_key: 'agent:main:discord:chan:9', session_id: 'h-9',
            created_at: T0, updated_at: T0 + 60000, origin: { platform: 'discord' } },
        'agent:main:discord:chan:8': { session_key: 'agent:main:discord:chan:8', session_id: 'h-8', created_at: T0 + 1 },
        'agent:main:discord:chan:7': { session_key: 'agent:main:discord:chan:6', session_id: 'h-7', created_at: T0 },
    };
    const h = parseSessionsJson(Buffer.from(JSON.stringify(hermes)), 'hermes');
    assert.deepEqual(h.entries.map((e) => [e.sessionId, e.timeMs]), [['h-9', T0 + 60000], ['h-8', T0 + 1]]);
    assert.equal(h.skipped[0].detail, "session_key is not the entry's own key (which one routes?)");
    assert.equal(h.ignored, 1);
    assert.deepEqual(parseSessionsJson(hermes, 'hermes').entries.length, 2);

    const { store } = openStore(t);
    const rs = await store.importEntries([...p.entries, ...h.entries]);
    assert.deepEqual(rs.map((r) => r.outcome), ['applied', 'applied', 'applied', 'applied', 'applied']);
    assert.equal(store.get('agent:main:discord:chan:9').sessionId, 'h-9');

    assert.throws(() => parseSessionsJson('[1]', 'openclaw'), TypeError);
    assert.throws(() => parseSessionsJson('{', 'openclaw'), SyntaxError);
    assert.throws(() => parseSessionsJson('{}', 'json'), TypeError);
    void tempDir;
});
