// examples/gateway.mjs -- a chat gateway's turn loop on bindlog, in Node.
//
//   node examples/gateway.mjs [STORE_DIR]      (npm install bindlog first)
//
// A gateway routes every chat to a session key and each key to its current
// session.  A *run* (one turn of the agent) remembers (sessionId, generation)
// when it starts; when the turn's context grew too large it ends with a
// compression split into a child session.  Meanwhile the user may type /stop
// (invalidate: the running turn becomes stale), /new (a fresh session) or
// /resume (go back to an older one).  bindlog makes the split a
// compare-and-swap, so a run that was stopped or overtaken can never move the
// key: its split comes back 'stale' or 'moved' and the gateway drops the
// result instead of writing into the wrong conversation.
//
// The script plays a few chats at once, with the races of a real gateway,
// prints what happened and checks every outcome against what the rules
// predict (exit 1 on any surprise).  A follower (store.follow()) prints
// the change feed as an audit trail would see it.
import { Store, BindlogError } from 'bindlog';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const ownDir = process.argv[2] === undefined;
const dir = ownDir ? join(mkdtempSync(join(tmpdir(), 'bindlog-gateway-')), 'store') : process.argv[2];
const store = Store.open(dir, { durability: 'full' });
let surprises = 0;
let ids = 0;
const newId = (chat) => `${chat}-s${++ids}`;

function expect(what, got, want) {
    const ok = got === want;
    if (!ok)
        surprises++;
    console.log(`  ${ok ? 'ok  ' : 'FAIL'} ${what}: ${got}${ok ? '' : ` (expected ${want})`}`);
}

// The session a message goes to: the key's binding, or a new session on
// first contact (expect '' = only if the key is still unbound, so two
// messages racing on a new chat cannot both create one).
async function route(key, chat) {
    const b = store.get(key);
    if (b !== null)
        return b;
    const r = await store.bind(key, newId(chat), { expect: '', origin: { chat, via: 'telegram' } });
    return { sessionId: r.sessionId, generation: r.generation };
}

// One turn: remember (sessionId, generation), work, then publish the split
// if the context was compressed.  `during` runs while the agent "thinks":
// the user's commands arriving mid-turn.
async function turn(key, chat, { compress = true, during = async () => {} } = {}) {
    const run = await route(key, chat);
    const child = newId(chat);
    await during();
    await sleep(5); // the model's answer
    if (!compress)
        return { outcome: 'none', sessionId: run.sessionId };
    const r = await store.split(key, run.sessionId, child, run.generation,
        { origin: { chat, compressedFrom: run.sessionId } });
    // isCurrent, not the outcome alone: a split retried after /stop is
    // 'already' (it went in) with a higher generation, and the run must stop
    if (r.isCurrent(run.generation))
        console.log(`  ${key}: turn compressed ${run.sessionId} -> ${r.sessionId} (lsn ${r.lsn})`);
    else
        console.log(`  ${key}: turn result dropped, ${r.outcome}: the key is on ${r.sessionId} ` +
            `at generation ${r.generation}, the run had ${run.generation}`);
    return r;
}

async function chatA() {
    const key = 'agent:main:telegram:dm:1001';
    console.log(`${key}: a turn that compresses, then a retried split`);
    const r = await turn(key, 'c1001');
    expect('split at the end of the turn', r.outcome, 'applied');
    const again = await store.split(key, store.session(r.sessionId).parentId, r.sessionId, r.generation);
    expect('the same split retried after a lost reply', again.outcome, 'already');
    expect('the retried split: the run is still current', again.isCurrent(r.generation), true);
    await store.invalidate(key, { reason: 'stop' }); // /stop after the reply was lost
    const late = await store.split(key, store.session(r.sessionId).parentId, r.sessionId, r.generation);
    expect('the split retried after /stop', late.outcome, 'already');
    expect('... but the run is no longer current', late.isCurrent(r.generation), false);
}

async function chatB() {
    const key = 'agent:main:telegram:dm:1002';
    await route(key, 'c1002');
    console.log(`${key}: /stop and /new arrive while the run is compressing`);
    const r = await turn(key, 'c1002', {
        during: async () => {
            await store.invalidate(key, { reason: 'stop' }); // /stop
            await store.newSession(key, newId('c1002'));      // /new
        },
    });
    expect('the stopped run\'s split', r.outcome, 'stale');
    const next = await turn(key, 'c1002');
    expect('the next turn on the new session', next.outcome, 'applied');
}

async function chatC() {
    const key = 'agent:main:discord:channel:77';
    const first = await route(key, 'c77');
    console.log(`${key}: /resume to an older session while a run works`);
    await turn(key, 'c77', { compress: false });
    const older = first.sessionId;
    await store.newSession(key, newId('c77'));
    const r = await turn(key, 'c77', {
        during: async () => {
            const back = await store.bind(key, older, { reason: 'resume' }); // /resume
            expect('/resume of the first session', back.outcome, 'applied');
        },
    });
    expect('the overtaken run\'s split', r.outcome, 'stale');
    expect('the key routes to', store.get(key).sessionId, older);
}

async function chatD() {
    const key = 'agent:main:slack:dm:U42';
    await route(key, 'cU42');
    console.log(`${key}: two runs of the same generation race to split`);
    const [x, y] = await Promise.all([turn(key, 'cU42'), turn(key, 'cU42')]);
    expect('exactly one of the two splits applied',
        [x.outcome, y.outcome].sort().join(' + '), 'applied + moved');
}

const audit = [];
const follower = (async () => {
    for await (const rec of store.follow({ from: 1 }))
        audit.push(`${rec.lsn} ${rec.type} ${rec.key} ${rec.otherId ? `${rec.otherId} -> ` : ''}${rec.sessionId}`);
})();

try {
    await Promise.all([chatA(), chatB(), chatC(), chatD()]);
    try {
        await store.split('agent:main:telegram:dm:9999', 'x', 'y', 1);
        expect('a split of a key never seen', 'accepted', 'BINDLOG_ENOTFOUND');
    } catch (err) {
        expect('a split of a key never seen', err instanceof BindlogError ? err.code : err, 'BINDLOG_ENOTFOUND');
        console.log(`  (${err.message})`);
    }
    const head = store.stats().headLsn;
    while (audit.length < head)
        await sleep(5);
    console.log(`change feed (${audit.length} events):`);
    for (const line of audit)
        console.log(`  ${line}`);
    const s = store.stats();
    console.log(`store: ${s.headLsn} events, ${s.liveBindings} keys bound, ${s.sessions} sessions, ` +
        `${s.commits} commits for ${s.groupedEvents} calls, digest ${store.digest()}`);
} finally {
    store.close(); // ends the follower
    await follower;
    if (ownDir)
        rmSync(join(dir, '..'), { recursive: true, force: true });
}
console.log(surprises === 0 ? 'gateway: every outcome as predicted' : `gateway: ${surprises} surprises`);
process.exitCode = surprises === 0 ? 0 : 1;
