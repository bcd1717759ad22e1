// examples/gateway_turn.mts -- one chat's turns on bindlog, in TypeScript.
//
//   npm install bindlog typescript @types/node
//   npx tsc --module nodenext --target es2022 --strict gateway_turn.mts && node gateway_turn.mjs [STORE_DIR]
//
// A gateway routes a chat to a session key and the key to its current
// session.  A *run* (one turn of the agent) remembers (sessionId, generation)
// when it starts.  This program plays what every gateway meets, typed end to
// end by the package's declarations:
//
//   1. first contact: bind the key, but only if it is still unbound;
//   2. a run compresses its context and continues in a child session (the
//      split is a compare-and-swap), and a retried split is recognised;
//   3. /stop while a second run is compressing: its late split is 'stale'
//      and writes nothing;
//   4. the change feed: a follower prints every record as it is committed.
//
// Every outcome is checked; the program exits 1 on any surprise, so CI runs
// it as a test.  With no STORE_DIR it works in a temporary directory it
// removes at the end.
import { Store, BindlogError, type LogRecord, type Outcome } from 'bindlog';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const KEY = 'agent:main:telegram:dm:12345';
let surprises = 0;

function expect<T>(what: string, got: T, want: T): void {
    const ok = JSON.stringify(got) === JSON.stringify(want);
    if (!ok)
        surprises++;
    console.log(`  ${ok ? 'ok  ' : 'FAIL'} ${what}: ${String(got)}${ok ? '' : ` (expected ${String(want)})`}`);
}

/** Where a turn stands: the session it works in, the generation it started at. */
interface Run {
    session: string;
    generation: number;
}

function runStart(store: Store): Run {
    const b = store.get(KEY);               // synchronous: microseconds, no flush
    if (b === null)
        throw new Error(`${KEY} is not bound`);
    return { session: b.sessionId, generation: b.generation };
}

/** Publish a split.  The run goes on in the child only if the split is in
 *  and nothing bumped the generation since the run started. */
async function compress(store: Store, run: Run, child: string): Promise<Outcome> {
    const r = await store.split(KEY, run.session, child, run.generation,
        { origin: { peer: 'telegram', chat: 12345, via: 'compression' } });
    if ((r.outcome === 'applied' || r.outcome === 'already') && r.generation === run.generation)
        run.session = child;
    return r.outcome;
}

async function gateway(dir: string): Promise<void> {
    const store = Store.open(dir, { durability: 'full' });
    const seen: LogRecord[] = [];
    const feed = (async () => {
        for await (const rec of store.follow({ from: store.stats().headLsn + 1 })) {
            console.log(`    feed: lsn ${rec.lsn} ${rec.type} -> ${rec.sessionId} (generation ${rec.generation}, ${rec.reason})`);
            seen.push(rec);
        }
    })();

    console.log('first contact');
    expect('bind A (only if unbound)', (await store.bind(KEY, 'sess-A', { expect: '' })).outcome, 'applied');
    expect('a racing first contact binds nothing', (await store.bind(KEY, 'sess-B', { expect: '' })).outcome, 'moved');

    console.log('a turn compresses and continues in a child');
    const run = runStart(store);
    const retry: Run = { ...run };             // as it stood before compressing
    expect('split A -> C', await compress(store, run, 'sess-C'), 'applied');
    expect('the retried split is recognised', await compress(store, retry, 'sess-C'), 'already');
    expect('the retrying run goes on in the child', retry.session, 'sess-C');

    console.log('/stop while the next turn is compressing');
    const late = runStart(store);
    const stop = await store.invalidate(KEY, { reason: '/stop' });
    expect('/stop bumps the generation', stop.generation, late.generation + 1);
    expect("the stopped run's split is refused", await compress(store, late, 'sess-D'), 'stale');
    expect('... and left no session behind', store.session('sess-D'), null);
    expect('the key still routes to the child', store.get(KEY)?.sessionId, 'sess-C');
    try {
        await store.split(KEY, 'sess-C', 'sess-C', late.generation);
        expect('a split onto itself is refused', 'resolved', 'rejected');
    } catch (e) {
        expect('a split onto itself is refused', e instanceof BindlogError ? e.code : String(e), 'BINDLOG_EINVAL');
    }

    console.log('the change feed');
    for (let i = 0; i < 100 && seen.length < 3; i++)
        await new Promise((resolve) => setTimeout(resolve, 10));
    expect('records seen by the follower', seen.map((r) => r.type), ['bind', 'split', 'invalidate']);
    store.close();                             // ends the follower
    await feed;
}

const own = process.argv[2] === undefined;
const base = own ? mkdtempSync(join(tmpdir(), 'bindlog-turn-')) : '';
try {
    await gateway(own ? join(base, 'store') : process.argv[2]!);
} finally {
    if (own)
        rmSync(base, { recursive: true, force: true });
}
console.log(`${surprises ? 'FAILED' : 'ok'}: ${surprises} surprise(s)`);
process.exitCode = surprises ? 1 : 0;
