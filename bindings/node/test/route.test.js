'use strict';
// Inbound routing (SPEC section 2b) through the Node binding: route(),
// routeSync(), expire(), the policy options, dailyBoundaryMs() and the
// gateways' own settings.  The scenarios are the bug classes route() exists
// to end: activity recorded before freshness is judged, the triggering
// message lost, a restart re-arming the idle clock, concurrent messages at a
// boundary resetting twice, a run from before a reset writing into the new
// session, daily-and-idle, a clock going back, and mode none resetting.
const test = require('node:test');
const assert = require('node:assert/strict');
const { bindlog, openStore, logOf } = require('./helpers');

const { Store, BindlogError, dailyBoundaryMs, policyFromOpenClaw, policyFromHermes } = bindlog;
const KEY = 'agent:main:telegram:dm:42';
const MIN = 60000;
const HOUR = 60 * MIN;
// later than any real clock in these tests: the log's times never go back,
// so events the store stamps itself (bind, split) stay before ours
const T0 = Date.parse('2030-01-15T10:00:00Z');
const ms = (iso) => Date.parse(iso);

test('dailyBoundaryMs: the latest boundary at or before now, across DST changes', () => {
    const cases = [
        // [hour, zone, now, boundary] worked out from the zones' rules by hand
        [4, 'Europe/Berlin', '2026-01-15T12:00:00Z', '2026-01-15T03:00:00Z'],
        [4, 'Europe/Berlin', '2026-01-15T02:59:59Z', '2026-01-14T03:00:00Z'],
        [4, 'Europe/Berlin', '2026-01-15T03:00:00Z', '2026-01-15T03:00:00Z'],
        [4, 'Europe/Berlin', '2026-07-15T12:00:00Z', '2026-07-15T02:00:00Z'],
        [0, 'UTC', '2026-03-01T00:00:00Z', '2026-03-01T00:00:00Z'],
        [23, 'UTC', '2026-03-01T22:59:59Z', '2026-02-28T23:00:00Z'],
        // Berlin springs forward 2026-03-29 01:00 UTC; 02:00 never happens
        [4, 'Europe/Berlin', '2026-03-29T12:00:00Z', '2026-03-29T02:00:00Z'],
        [2, 'Europe/Berlin', '2026-03-29T12:00:00Z', '2026-03-29T01:00:00Z'],
        [2, 'Europe/Berlin', '2026-03-29T00:59:59Z', '2026-03-28T01:00:00Z'],
        // ... and falls back 2026-10-25 01:00 UTC; 02:00 happens twice
        [2, 'Europe/Berlin', '2026-10-25T12:00:00Z', '2026-10-25T00:00:00Z'],
        [4, 'Europe/Berlin', '2026-10-25T12:00:00Z', '2026-10-25T03:00:00Z'],
        [4, 'Europe/Berlin', '2026-10-25T02:59:00Z', '2026-10-24T02:00:00Z'],
        // New York: forward 2026-03-08 at 02:00 EST, back 2026-11-01 at 02:00 EDT
        [2, 'America/New_York', '2026-03-08T12:00:00Z', '2026-03-08T07:00:00Z'],
        [4, 'America/New_York', '2026-03-08T12:00:00Z', '2026-03-08T08:00:00Z'],
        [4, 'America/New_York', '2026-03-08T07:59:59Z', '2026-03-07T09:00:00Z'],
        [1, 'America/New_York', '2026-11-01T12:00:00Z', '2026-11-01T05:00:00Z'],
        [4, 'America/New_York', '2026-11-01T12:00:00Z', '2026-11-01T09:00:00Z'],
    ];
    for (const [hour, zone, now, want] of cases)
        assert.equal(new Date(dailyBoundaryMs(hour, zone, ms(now))).toISOString(), new Date(ms(want)).toISOString(),
            `${hour}:00 ${zone} at ${now}`);
    assert.equal(dailyBoundaryMs(4, 'UTC', new Date('2026-01-15T12:00:00Z')), ms('2026-01-15T04:00:00Z'));
    const b = dailyBoundaryMs(4);
    assert.ok(b <= Date.now() && b > Date.now() - 25 * HOUR);
    assert.throws(() => dailyBoundaryMs(24, 'UTC', 0), { name: 'RangeError', message: /hour 24 is not an hour from 0 to 23/ });
    assert.throws(() => dailyBoundaryMs('4', 'UTC', 0), { name: 'TypeError', message: /hour must be an hour/ });
    assert.throws(() => dailyBoundaryMs(4, 'Mars/Olympus', 0), { name: 'RangeError', message: /'Mars\/Olympus' is not a known time zone/ });
    assert.throws(() => dailyBoundaryMs(4, 'UTC', -1), { name: 'RangeError', message: /now must be a whole, non-negative/ });
});

test('the gateways\' reset settings as route() options', () => {
    assert.deepEqual(policyFromOpenClaw(), { mode: 'daily', atHour: 4 });
    assert.deepEqual(policyFromOpenClaw({ mode: 'daily', atHour: 6 }, { timeZone: 'Europe/Berlin' }),
        { mode: 'daily', atHour: 6, timeZone: 'Europe/Berlin' });
    assert.deepEqual(policyFromOpenClaw({ mode: 'daily', idleMinutes: 120 }), { mode: 'both', atHour: 4, idleMs: 2 * HOUR });
    assert.deepEqual(policyFromOpenClaw({ mode: 'idle', idleMinutes: 30 }), { mode: 'idle', idleMs: 30 * MIN });
    assert.throws(() => policyFromOpenClaw({ mode: 'idle' }), /'idle' needs idleMinutes/);
    assert.throws(() => policyFromOpenClaw({ mode: 'never' }), /'never' is not 'daily' or 'idle'/);
    assert.deepEqual(policyFromHermes(), { mode: 'both', idleMs: 1440 * MIN, atHour: 4 });
    assert.deepEqual(policyFromHermes({ mode: 'none', at_hour: 3 }), { mode: 'none' });
    assert.deepEqual(policyFromHermes({ mode: 'idle', idle_minutes: 240 }), { mode: 'idle', idleMs: 240 * MIN });
    assert.throws(() => policyFromHermes({ mode: 'both', idle_minutes: 0 }), /idle_minutes 0 is not a positive/);
    assert.throws(() => policyFromHermes({ mode: 'sometimes' }), /not both, idle, daily or none/);
});

test('route: created, routed, reset; the decision reads the activity before this message', async (t) => {
    const { store } = openStore(t);
    const idle = { mode: 'idle', idleMs: 30 * MIN };
    let r = await store.route(KEY, { ...idle, now: T0, freshSessionId: 's-1', origin: { chat: 42 } });
    assert.deepEqual(r, { outcome: 'created', reason: null, sessionId: 's-1', previousId: '', generation: 1,
        lsn: 1, lastActivityMs: 0 });
    assert.deepEqual(JSON.parse(store.session('s-1').origin), { chat: 42 });
    r = await store.route(KEY, { ...idle, now: T0 + 10 * MIN, freshSessionId: 'unused' });
    assert.deepEqual(r, { outcome: 'routed', reason: null, sessionId: 's-1', previousId: '', generation: 1,
        lsn: 2, lastActivityMs: T0 });
    assert.equal(store.session('unused'), null);
    const b = store.get(KEY);
    assert.equal(b.lastActivityMs, T0 + 10 * MIN);
    assert.equal(b.updatedMs, T0);
    assert.equal(b.lsn, 1); // a routed message does not change the binding
    // OpenClaw #11520: activity bumped before freshness was read, so idle never fired
    r = await store.route(KEY, { ...idle, now: T0 + 41 * MIN, freshSessionId: 's-2' });
    assert.equal(r.outcome, 'reset');
    assert.equal(r.reason, 'idle');
    assert.equal(r.lastActivityMs, T0 + 10 * MIN);
});

test('route: the message that triggers a reset goes to the new session, in one record', async (t) => {
    const { store } = openStore(t);
    store.routeSync(KEY, { now: T0, freshSessionId: 'old' });
    const head = store.stats().headLsn;
    const r = store.routeSync(KEY, { mode: 'idle', idleMs: HOUR, now: T0 + 2 * HOUR, freshSessionId: 'new',
        origin: 'msg-7' });
    assert.deepEqual(r, { outcome: 'reset', reason: 'idle', sessionId: 'new', previousId: 'old', generation: 2,
        lsn: head + 1, lastActivityMs: T0 });
    assert.equal(store.stats().headLsn, head + 1);
    assert.equal(store.get(KEY).sessionId, 'new');
    assert.equal(store.get(KEY).lastActivityMs, T0 + 2 * HOUR);
    const s = store.session('new');
    assert.equal(s.parentId, 'old');
    assert.equal(s.origin.toString(), 'msg-7');
    assert.equal(store.session('old').endReason, 'idle');
    const rec = logOf(store).at(-1);
    assert.deepEqual([rec.type, rec.reason, rec.otherId, rec.sessionId], ['newSession', 'idle', 'old', 'new']);
});

test('route: reopening keeps the true last activity (no re-armed idle clock)', async (t) => {
    const { store, dir } = openStore(t);
    await store.route(KEY, { now: T0, freshSessionId: 's-1' });
    await store.route(KEY, { now: T0 + 5 * MIN, freshSessionId: 'x' });
    const digest = store.digest();
    store.close();
    const again = Store.open(dir, { durability: 'none' });
    t.after(() => again.close());
    assert.equal(again.digest(), digest);
    assert.equal(again.get(KEY).lastActivityMs, T0 + 5 * MIN);
    const r = await again.route(KEY, { mode: 'idle', idleMs: HOUR, now: T0 + 3 * HOUR, freshSessionId: 's-2' });
    assert.equal(r.outcome, 'reset');
    assert.equal(r.lastActivityMs, T0 + 5 * MIN);
});

test('importEntries takes the gateway\'s update time as the last activity', async (t) => {
    // hermes-agent PR #78618: a recovered session must not become fresh at import
    const { store } = openStore(t);
    const [res] = await store.importEntries([{ key: KEY, sessionId: 's-1', timeMs: T0 - 3 * HOUR }]);
    assert.equal(res.outcome, 'applied');
    assert.equal(store.get(KEY).lastActivityMs, T0 - 3 * HOUR);
    const r = await store.route(KEY, { mode: 'idle', idleMs: HOUR, now: T0, freshSessionId: 's-2' });
    assert.deepEqual([r.outcome, r.previousId, r.lastActivityMs], ['reset', 's-1', T0 - 3 * HOUR]);
});

test('snapshots: a binding as of its LSN, routed messages since or not', async (t) => {
    const { store } = openStore(t);
    await store.route(KEY, { now: T0, freshSessionId: 's-1' });
    await store.route(KEY, { now: T0 + MIN });
    const snap = store.snapshot();
    await store.route(KEY, { now: T0 + 2 * MIN });
    assert.deepEqual(snap.get(KEY), { key: KEY, sessionId: 's-1', generation: 1, lsn: 1, updatedMs: T0,
        lastActivityMs: T0 + 2 * MIN });
    await store.route(KEY, { mode: 'idle', idleMs: MIN, now: T0 + HOUR, freshSessionId: 's-2' });
    assert.deepEqual(snap.get(KEY), { key: KEY, sessionId: 's-1', generation: 1, lsn: 1, updatedMs: T0,
        lastActivityMs: 0 });
    assert.equal(snap.session('s-1').endedLsn, 0);
    assert.equal(store.get(KEY).sessionId, 's-2');
});

for (const n of [2, 16]) {
    test(`route: ${n} concurrent routes at a boundary give exactly one reset`, async (t) => {
        const { store } = openStore(t, { durability: 'full' });
        await store.route(KEY, { now: T0, freshSessionId: 'old' });
        const rs = await Promise.all(Array.from({ length: n }, (_, i) =>
            store.route(KEY, { mode: 'idle', idleMs: HOUR, now: T0 + 2 * HOUR, freshSessionId: `new-${i}` })));
        const resets = rs.filter((r) => r.outcome === 'reset');
        assert.equal(resets.length, 1, JSON.stringify(rs.map((r) => r.outcome)));
        assert.deepEqual(new Set(rs.map((r) => r.sessionId)), new Set([resets[0].sessionId]));
        assert.deepEqual(new Set(rs.map((r) => r.generation)), new Set([2]));
        assert.equal(store.get(KEY).sessionId, resets[0].sessionId);
        assert.equal(rs.filter((r) => r.outcome === 'routed').length, n - 1);
    });
}

test('route: a run started before a reset gets stale on its split', async (t) => {
    const { store } = openStore(t);
    await store.route(KEY, { now: T0, freshSessionId: 'A' });
    const run = store.get(KEY);
    const r = await store.route(KEY, { mode: 'daily', atHour: 4, timeZone: 'UTC', now: T0 + 25 * HOUR,
        freshSessionId: 'B' });
    assert.deepEqual([r.outcome, r.reason], ['reset', 'daily']);
    const head = store.stats().headLsn;
    const s = await store.split(KEY, run.sessionId, 'A-child', run.generation);
    assert.equal(s.outcome, 'stale');
    assert.equal(store.stats().headLsn, head);
    assert.equal(store.session('A-child'), null);
    // a routed message leaves the generation alone: the new run stays current
    const gen = store.get(KEY).generation;
    assert.equal((await store.route(KEY, { now: T0 + 25 * HOUR + MIN })).generation, gen);
    assert.equal((await store.split(KEY, 'B', 'B-child', gen)).outcome, 'applied');
});

test('route: daily, daily-and-idle and both', async (t) => {
    const { store } = openStore(t);
    const daily = { mode: 'daily', atHour: 4, timeZone: 'UTC' };
    await store.route(KEY, { ...daily, now: ms('2030-01-15T03:59:00Z'), freshSessionId: 's-1' });
    let r = await store.route(KEY, { ...daily, now: ms('2030-01-15T04:00:30Z'), freshSessionId: 's-2' });
    assert.deepEqual([r.outcome, r.reason, r.previousId], ['reset', 'daily', 's-1']);
    r = await store.route(KEY, { ...daily, now: ms('2030-01-16T03:59:59Z'), freshSessionId: 's-3' });
    assert.equal(r.outcome, 'routed');
    r = await store.route(KEY, { mode: 'daily', dailyBoundaryMs: ms('2030-01-16T04:00:00Z'),
        now: ms('2030-01-16T04:00:00Z'), freshSessionId: 's-3' });
    assert.equal(r.outcome, 'reset');

    const dai = { mode: 'dailyAndIdle', idleMs: HOUR, atHour: 4, timeZone: 'UTC' };
    const K2 = 'agent:main:discord:channel:9';
    await store.route(K2, { ...dai, now: ms('2030-01-17T03:30:00Z'), freshSessionId: 'd-1' });
    r = await store.route(K2, { ...dai, now: ms('2030-01-17T04:10:00Z'), freshSessionId: 'd-2' });
    assert.equal(r.outcome, 'routed', 'past the boundary but idle only 40 minutes');
    r = await store.route(K2, { ...dai, now: ms('2030-01-17T05:30:00Z'), freshSessionId: 'd-2' });
    assert.equal(r.outcome, 'routed', 'idle 80 minutes but active since the boundary');
    r = await store.route(K2, { ...dai, mode: 'daily_and_idle', now: ms('2030-01-18T04:30:00Z'), freshSessionId: 'd-2' });
    assert.equal(r.outcome, 'reset');
    r = await store.route(K2, { mode: 'both', idleMs: HOUR, atHour: 4, timeZone: 'UTC',
        now: ms('2030-01-18T05:31:00Z'), freshSessionId: 'd-3' });
    assert.deepEqual([r.outcome, r.reason], ['reset', 'idle']);
});

test('route: a clock going back moves nothing backwards', async (t) => {
    const { store } = openStore(t);
    await store.route(KEY, { now: T0, freshSessionId: 's-1' });
    await store.route(KEY, { now: T0 + 10 * MIN });
    const r = await store.route(KEY, { mode: 'idle', idleMs: 5 * MIN, now: T0 - HOUR, freshSessionId: 's-2' });
    assert.equal(r.outcome, 'routed');
    assert.equal(r.lastActivityMs, T0 + 10 * MIN);
    assert.equal(store.get(KEY).lastActivityMs, T0 + 10 * MIN);
    const times = logOf(store).map((x) => x.timeMs);
    assert.deepEqual(times, [...times].sort((a, b) => a - b));
});

test('route: mode none never resets', async (t) => {
    const { store } = openStore(t);
    await store.route(KEY, { now: T0, freshSessionId: 's-1' });
    for (const days of [1, 30, 400]) {
        const now = T0 + days * 24 * HOUR;
        assert.equal((await store.route(KEY, { mode: 'none', now, freshSessionId: `n-${days}` })).outcome, 'routed');
        assert.equal((await store.route(KEY, { ...policyFromHermes({ mode: 'none' }), now })).outcome, 'routed');
        assert.equal(store.routeSync(KEY, { now }).sessionId, 's-1');
    }
    assert.equal(store.get(KEY).generation, 1);
});

test('route: the fresh id defaults to a UUID', async (t) => {
    const { store } = openStore(t);
    const r = await store.route(KEY);
    assert.equal(r.outcome, 'created');
    assert.match(r.sessionId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal((await store.route(KEY)).sessionId, r.sessionId);
});

test('follow shows routes, automatic resets and expiry with their reasons', async (t) => {
    const { store } = openStore(t);
    await store.route(KEY, { now: T0, freshSessionId: 's-1' });
    await store.route(KEY, { now: T0 + MIN });
    await store.route(KEY, { mode: 'idle', idleMs: HOUR, now: T0 + 3 * HOUR, freshSessionId: 's-2' });
    assert.equal(await store.expire({ idleMs: HOUR, now: T0 + 30 * HOUR }), 1);
    const seen = [];
    for await (const rec of store.follow({ from: 1, until: 'head' }))
        seen.push(rec);
    assert.deepEqual(seen.map((r) => [r.type, r.type === 'route' ? '' : r.reason]),
        [['newSession', 'new_session'], ['route', ''], ['newSession', 'idle'], ['unbind', 'expired']]);
    assert.deepEqual([seen[1].key, seen[1].timeMs, seen[1].generation], [KEY, T0 + MIN, 1]);
    // the hook that saves context before an idle reset: the ended and the new session
    assert.deepEqual([seen[2].otherId, seen[2].sessionId], ['s-1', 's-2']);
    assert.equal(store.stats().applied.route, 1);
});

test('expire: a prefix and a dry run', async (t) => {
    const { store } = openStore(t);
    for (let i = 0; i < 40; i++)
        store.routeSync(`agent:main:cron:nightly:run:${String(i).padStart(4, '0')}`, { now: T0 + i, freshSessionId: `run-${i}` });
    store.routeSync('agent:main:telegram:dm:7', { now: T0, freshSessionId: 'dm-7' });
    store.routeSync('agent:main:cron:nightly:run:0039', { now: T0 + 2 * HOUR });
    const digest = store.digest();
    const opts = { idleMs: HOUR, now: T0 + 2 * HOUR, prefix: 'agent:main:cron:' };
    assert.equal(await store.expire({ ...opts, dryRun: true }), 39);
    assert.equal(store.digest(), digest);
    assert.equal(store.expireSync(opts), 39);
    assert.equal(store.get('agent:main:cron:nightly:run:0000'), null);
    assert.equal(store.session('run-0').endReason, 'expired');
    assert.notEqual(store.get('agent:main:cron:nightly:run:0039'), null);
    assert.notEqual(store.get('agent:main:telegram:dm:7'), null);
    assert.equal(await store.expire(opts), 0);
    assert.equal(await store.expire({ before: new Date(T0 + HOUR), dryRun: true }), 1);
    assert.equal(await store.expire({ before: T0 + HOUR }), 1);
    assert.equal(store.stats().liveBindings, 1);
});

test('route and expire: bad arguments throw or reject with clear messages', async (t) => {
    const { store, dir } = openStore(t);
    assert.throws(() => store.route(KEY, { mode: 'idle' }), { name: 'RangeError', message: /route: mode 'idle' needs idleMs/ });
    assert.throws(() => store.route(KEY, { mode: 'weekly' }), { name: 'RangeError', message: /mode 'weekly' is not one of none, idle/ });
    assert.throws(() => store.route(KEY, { mode: 'daily' }), /needs atHour \(with timeZone\) or dailyBoundaryMs/);
    assert.throws(() => store.route(KEY, { mode: 'daily', atHour: 4, dailyBoundaryMs: 1 }), /not both/);
    assert.throws(() => store.route(KEY, { mode: 'idle', idleMs: 0 }), /idleMs must be a whole, positive/);
    assert.throws(() => store.route(KEY, { mode: 'idle', idleMs: '5m' }), { name: 'TypeError' });
    assert.throws(() => store.route(KEY, { idle: 5 }), { name: 'TypeError', message: /route: unknown option 'idle'/ });
    assert.throws(() => store.route(KEY, { mode: 'daily', atHour: 4, timeZone: 'Nowhere/Land' }), /not a known time zone/);
    assert.throws(() => store.route(KEY, { now: 'now' }), { name: 'TypeError', message: /now must be milliseconds/ });
    assert.throws(() => store.route(KEY, { freshSessionId: 5 }), { name: 'TypeError' });
    assert.throws(() => store.route(42), { name: 'TypeError', message: /route: key must be a string/ });
    assert.throws(() => store.routeSync(KEY, { freshSessionId: 'a\nb' }), (e) =>
        e instanceof BindlogError && e.code === 'BINDLOG_EINVAL' && /route/.test(e.message));
    await assert.rejects(store.route('', { freshSessionId: 'x' }), (e) => e instanceof BindlogError && e.code === 'BINDLOG_EINVAL');
    assert.throws(() => store.expire({}), /give idleMs \(a duration\) or before \(a time\), one of them/);
    assert.throws(() => store.expire({ idleMs: 1, before: 1 }), /one of them/);
    assert.throws(() => store.expire({ idleMs: 1, dryRun: 'yes' }), { name: 'TypeError', message: /dryRun must be a boolean/ });
    assert.throws(() => store.expire({ idleMs: 1, prefix: 7 }), { name: 'TypeError', message: /prefix must be a string/ });
    assert.equal(store.stats().headLsn, 0);
    await store.route(KEY, { now: T0, freshSessionId: 's-1' });
    await store.route('agent:other', { now: T0, freshSessionId: 'taken' });
    await assert.rejects(store.route(KEY, { mode: 'idle', idleMs: MIN, now: T0 + HOUR, freshSessionId: 'taken' }),
        (e) => e instanceof BindlogError && e.code === 'BINDLOG_EEXIST');
    assert.equal(store.get(KEY).sessionId, 's-1');
    const ro = Store.open(dir, { readOnly: true });
    t.after(() => ro.close());
    await assert.rejects(ro.route(KEY), (e) => e.code === 'BINDLOG_EREADONLY');
    assert.equal(ro.expireSync({ idleMs: MIN, now: T0 + HOUR, dryRun: true }), 2);
    assert.throws(() => ro.expireSync({ idleMs: MIN, now: T0 + HOUR }), (e) => e.code === 'BINDLOG_EREADONLY');
    store.close();
    await assert.rejects(store.route(KEY), (e) => e.code === 'BINDLOG_ECLOSED');
});
