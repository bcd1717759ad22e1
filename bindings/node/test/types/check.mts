// Compiled (never run) by `tsc -p test/types` in types.test.js: the API of
// README.md and docs/node.md type-checks against index.d.ts under --strict,
// and each misuse marked @ts-expect-error is refused, so the declarations
// are neither missing nor too loose.
import { Store, ANY_GENERATION, BindlogError, StoreClosedError, parseSessionsJson, version,
    dailyBoundaryMs, policyFromOpenClaw, policyFromHermes } from 'bindlog';
import type { Result, Binding, Session, LogRecord, Stats, Outcome, BatchEvent, ImportEntry,
    RouteResult, RouteOutcome, ResetPolicy } from 'bindlog';

async function gateway(dir: string): Promise<void> {
    const store: Store = Store.open(dir, { durability: 'full', writerThreads: 8 });
    const ro = new Store(dir, { readOnly: true });
    const key = 'agent:main:telegram:dm:1';

    const first: Result = await store.bind(key, 'A', { expect: '', reason: null, origin: { peer: 'tg' } });
    const outcome: Outcome = first.outcome;
    const b: Binding | null = store.get(key);
    if (b === null) return;
    const gen: number = b.generation;
    const r = await store.split(key, b.sessionId, 'C', gen, { origin: Buffer.from('x') });
    if (r.outcome === 'stale' || r.outcome === 'moved') console.log(r.sessionId, r.lsn + 1);
    const goOn: boolean = r.isCurrent(gen) && r.isCurrent(BigInt(gen));
    // @ts-expect-error a generation is a number or a bigint
    r.isCurrent('1');
    try { store.get(key); } catch (e) {
        if (e instanceof StoreClosedError) { const c: 'BINDLOG_ECLOSED' = e.code; console.log(c, goOn); }
    }
    await store.split(key, 'C', 'D', ANY_GENERATION, { origin: 'text' });
    await store.split(key, 'D', 'E', 7n);
    await store.newSession(key, 'F', { reason: 'new', origin: new Uint8Array([1]) });
    await store.invalidate(key, { reason: 'stop' });
    await store.unbind(key);
    const batch: BatchEvent[] = [
        { type: 'bind', key, sessionId: 'G', expect: '' },
        { type: 'split', key, parentId: 'G', childId: 'H', runGeneration: 1 },
        { type: 'invalidate', key },
    ];
    const results: Result[] = await store.applyBatch(batch);
    console.log(results.length, outcome, version);

    const now: Result = store.splitSync(key, 'H', 'H1', 2n, { origin: { via: 'sync' } });
    const batchNow: Result[] = store.applyBatchSync([{ type: 'unbind', key, reason: 'idle' }]);
    store.bindSync(key, 'H2', { expect: '' });
    store.newSessionSync(key, 'H3');
    store.invalidateSync(key, { reason: 'stop' });
    store.unbindSync(key);
    const imported: Array<Result | BindlogError> = store.importEntriesSync([{ key: 'j', sessionId: 'J' }]);
    console.log(now.generation, batchNow.length, imported.length);

    const parsed = parseSessionsJson('{}', 'openclaw');
    const entries: ImportEntry[] = [...parsed.entries, { key, sessionId: 'I', timeMs: new Date() }];
    for (const item of await store.importEntries(entries)) {
        if (item instanceof BindlogError) console.log(item.code, item.index, parsed.skipped.length);
        else console.log(item.outcome);
    }

    const s: Session | null = store.session('C');
    if (s !== null) console.log(s.origin.toString('utf8'), s.endedLsn, s.parentId);
    for (const rec of store.history(key)) console.log(rec.lsn, rec.type, rec.origin?.length);
    for (const rec of store.log({ from: 1, to: 10n })) console.log(rec.key);
    for await (const rec of store.follow({ from: 1 })) {
        const x: LogRecord = rec;
        if (x.type === 'split') break;
    }
    const st: Stats = store.stats();
    console.log(st.headLsn, st.applied.split, st.durability, store.digest(), store.path, store.closed);

    try {
        await store.bind(key, 'Z');
    } catch (e) {
        if (e instanceof BindlogError) console.log(e.code, e.errno, e.index, e.message);
    }
    ro.close();
    store.close();

    // @ts-expect-error the key is a string
    store.bind(1, 'A');
    // @ts-expect-error split needs the run's generation
    store.split(key, 'A', 'B');
    // @ts-expect-error a sync write returns its Result, not a promise
    const notAPromise: Promise<Result> = store.bindSync(key, 'A');
    console.log(notAPromise);
    // @ts-expect-error no such durability
    Store.open(dir, { durability: 'fast' });
    // @ts-expect-error unknown option
    store.bind(key, 'A', { reasn: 'x' });
    // @ts-expect-error outcomes are four strings
    const bad: Outcome = 'ok';
    // @ts-expect-error a split event needs parentId
    await store.applyBatch([{ type: 'split', key, childId: 'X', runGeneration: 1 }]);
    // @ts-expect-error only the two formats of bindlog import-json
    parseSessionsJson('{}', 'json');
    // @ts-expect-error get may return null
    const g2: number = store.get(key).generation;
    console.log(bad, g2);
}

void gateway;

async function routing(store: Store): Promise<void> {
    const key = 'agent:main:telegram:dm:1';
    const r: RouteResult = await store.route(key, { mode: 'idle', idleMs: 3_600_000, origin: { chat: 1 } });
    const o: RouteOutcome = r.outcome;
    const why: 'idle' | 'daily' | null = r.reason;
    const s2: RouteResult = store.routeSync(key, {
        mode: 'dailyAndIdle', idleMs: 60_000, atHour: 4, timeZone: 'Europe/Berlin', now: new Date(),
        freshSessionId: 'x',
    });
    const pol: ResetPolicy = policyFromOpenClaw({ mode: 'daily', atHour: 4, idleMinutes: 30 });
    await store.route(key, { ...pol, ...policyFromHermes({ mode: 'none' }) });
    const n: number = await store.expire({ idleMs: 1000, prefix: 'agent:main:cron:', dryRun: true });
    const m: number = store.expireSync({ before: Date.now() });
    const at: number = dailyBoundaryMs(4, 'America/New_York', Date.now()) + dailyBoundaryMs(4);
    const last: number | undefined = store.get(key)?.lastActivityMs;
    console.log(o, why, s2.previousId, n, m, at, last, s2.lastActivityMs);
    // @ts-expect-error no such mode
    await store.route(key, { mode: 'weekly' });
    // @ts-expect-error idle is in milliseconds: idleMs
    await store.route(key, { mode: 'idle', idle: 5 });
    // @ts-expect-error route outcomes are three strings
    const bad: RouteOutcome = 'applied';
    // @ts-expect-error expire needs its options
    await store.expire();
    // @ts-expect-error OpenClaw modes are daily and idle
    policyFromOpenClaw({ mode: 'both' });
    console.log(bad);
}

void routing;
