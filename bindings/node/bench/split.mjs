// bench/split.mjs -- the Node rows of bindlog's benchmark (docs/node.md).
//
//   cd bindings/node/bench && npm install --build-from-source --nodedir=/usr
//   node split.mjs [--seconds 3] [--slices 6] [--overhead-n 20000] [--rounds 3] [--c-bench PATH] [--only split|overhead]
//
// 1. The checked split, the gateway's end of turn, in FULL durability:
//    bindlog (Store.split, a compare-and-swap in one logged transaction)
//    against better-sqlite3 in WAL mode with synchronous=FULL doing the same
//    in one IMMEDIATE transaction (read the key's row, compare generation
//    and binding, create the child session, end the parent, move the key,
//    append a log row).  One async writer, then 16 at once; each row runs
//    for --seconds, in --slices turns alternating with its peers, and
//    reports splits/s, the latency of one split (p50, p99) and the event
//    loop's lag (a 1 ms timer, p99): better-sqlite3 is
//    synchronous, so its 16 "writers" take turns on the main thread and
//    every flush blocks the loop; bindlog's flushes happen in writer threads.
//    A third row makes bindlog's splits with splitSync, on the loop's
//    thread one per turn exactly as better-sqlite3's: the same model.
// 2. The binding's overhead per call: the same calls from C (the program
//    bindlog_node_overhead, bench/overhead.c, built by CMake) and from Node,
//    durability NONE so that no flush hides the call's own cost.
//
// The package tested is $BINDLOG_NODE_PKG, else the CMake build's staged copy
// (build/bindings/node/pkg), else bindings/node itself (built in place).
// Prints the machine's load before and after: the figures in docs/node.md
// say which were taken on a loaded machine.
import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir, cpus } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '..', '..', '..');
const require = createRequire(import.meta.url);

function arg(name, dflt) {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? process.argv[i + 1] : dflt;
}
const SECONDS = Number(arg('seconds', '3'));
const OVERHEAD_N = Number(arg('overhead-n', '20000'));
const KEYS_PER_WRITER = 64;

const pkgDir = process.env.BINDLOG_NODE_PKG ||
    [join(repo, 'build', 'bindings', 'node', 'pkg'), resolve(here, '..')]
        .find((d) => existsSync(join(d, 'build', 'Release', 'bindlog.node')));
if (!pkgDir)
    throw new Error('no built bindlog package: build the repository with CMake or set BINDLOG_NODE_PKG');
const { Store } = require(pkgDir);
let Database = null;
try {
    Database = require('better-sqlite3');
} catch {
    console.log('better-sqlite3 is not installed here: its rows are skipped ' +
        '(npm install --build-from-source --nodedir=/usr in bindings/node/bench)');
}

const scratch = mkdtempSync(join(process.env.TMPDIR || tmpdir(), 'bindlog-node-bench-'));
process.on('exit', () => rmSync(scratch, { recursive: true, force: true }));
let dirs = 0;
const freshDir = () => join(scratch, `d${++dirs}`);
const ORIGIN = JSON.stringify({ peer: 'telegram', chat: 12345, msg: 7, via: 'bench' });

function pct(sorted, p) {
    return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : NaN;
}

// A 1 ms timer: how late each tick fires, until stop().
function lagMonitor() {
    const lags = [];
    let on = true;
    const tick = (due) => {
        lags.push(performance.now() - due);
        if (on) {
            const next = performance.now() + 1;
            setTimeout(() => tick(next), 1);
        }
    };
    setTimeout(() => tick(performance.now() + 1), 1);
    return () => {
        on = false;
        return lags.sort((a, b) => a - b);
    };
}

// A contender: `writers` async loops, each splitting its own keys;
// split(w, i) makes writer w's i-th split and resolves its outcome.  The
// contenders of one writer count run in turns of SECONDS / SLICES each,
// alternating, so that each sees the same moments of a shared, noisy disk
// (one contender's 3 s after another's measured the disk's mood as much as
// the store); each writer's i carries on from one turn to the next.
const SLICES = Number(arg('slices', '6'));

function contender(name, writers, split, close) {
    return { name, writers, split, close, next: new Array(writers).fill(0), lat: [], lags: [], ops: 0, secs: 0, bad: 0 };
}

async function turn(c, seconds) {
    const stopLag = lagMonitor();
    const t0 = performance.now();
    const end = t0 + seconds * 1000;
    await Promise.all(Array.from({ length: c.writers }, async (_, w) => {
        while (performance.now() < end) {
            const s = performance.now();
            const outcome = await c.split(w, c.next[w]++);
            c.lat.push(performance.now() - s);
            if (outcome !== 'applied')
                c.bad++;
            c.ops++;
        }
    }));
    c.secs += (performance.now() - t0) / 1000;
    c.lags.push(...stopLag());
}

async function runRows(contenders) {
    for (let k = 0; k < SLICES; k++)
        for (let j = 0; j < contenders.length; j++) // a different one goes first each turn
            await turn(contenders[(j + k) % contenders.length], SECONDS / SLICES);
    return contenders.map((c) => {
        c.close();
        if (c.bad)
            throw new Error(`${c.name}: ${c.bad} splits were not applied`);
        c.lat.sort((x, y) => x - y);
        c.lags.sort((x, y) => x - y);
        const row = { name: c.name, writers: c.writers, rate: c.ops / c.secs, p50: pct(c.lat, 50),
            p99: pct(c.lat, 99), lag99: pct(c.lags, 99), perCommit: c.perCommit };
        console.log(`| ${row.name} | ${row.writers} | ${Math.round(row.rate)} | ${row.p50.toFixed(2)} | ` +
            `${row.p99.toFixed(2)} | ${row.lag99.toFixed(2)} |`);
        return row;
    });
}

// Per writer: KEYS_PER_WRITER keys, each split again and again into a new
// child (a split never bumps the generation, so every one is applied).
function keyspace(writers) {
    return Array.from({ length: writers }, (_, w) => ({
        keys: Array.from({ length: KEYS_PER_WRITER }, (_, k) => `agent:main:telegram:dm:${w}-${k}`),
        cur: Array.from({ length: KEYS_PER_WRITER }, (_, k) => `w${w}-k${k}-s0`),
    }));
}

function bindlogRow(writers) {
    const store = Store.open(freshDir(), { durability: 'full' });
    const ks = keyspace(writers);
    store.applyBatchSync(ks.flatMap(({ keys, cur }) => keys.map((key, k) => ({ type: 'bind', key, sessionId: cur[k] }))));
    const c = contender('bindlog FULL', writers, async (w, i) => {
        const k = i % KEYS_PER_WRITER;
        const child = `w${w}-k${k}-s${Math.floor(i / KEYS_PER_WRITER) + 1}`;
        const r = await store.split(ks[w].keys[k], ks[w].cur[k], child, 1, { origin: ORIGIN });
        ks[w].cur[k] = child;
        return r.outcome;
    }, () => {
        const s = store.stats();
        c.perCommit = s.groupedEvents / s.commits;
        store.close();
    });
    return c;
}

// The same splits through splitSync: made on the loop's thread, one per
// turn of the loop, exactly as the better-sqlite3 row makes its own.
function bindlogSyncRow(writers) {
    const store = Store.open(freshDir(), { durability: 'full' });
    const ks = keyspace(writers);
    store.applyBatchSync(ks.flatMap(({ keys, cur }) => keys.map((key, k) => ({ type: 'bind', key, sessionId: cur[k] }))));
    const yieldToLoop = () => new Promise((r) => setImmediate(r));
    return contender('bindlog FULL, splitSync', writers, async (w, i) => {
        await yieldToLoop();
        const k = i % KEYS_PER_WRITER;
        const child = `w${w}-k${k}-s${Math.floor(i / KEYS_PER_WRITER) + 1}`;
        const r = store.splitSync(ks[w].keys[k], ks[w].cur[k], child, 1, { origin: ORIGIN });
        ks[w].cur[k] = child;
        return r.outcome;
    }, () => store.close());
}

function sqliteOpen(writers) {
    const db = new Database(join(freshDir() + '.sqlite'));
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.exec(`
        CREATE TABLE bindings(key TEXT PRIMARY KEY, session_id TEXT NOT NULL,
            generation INTEGER NOT NULL, lsn INTEGER NOT NULL, updated_ms INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE sessions(id TEXT PRIMARY KEY, key TEXT NOT NULL, parent_id TEXT NOT NULL,
            created_lsn INTEGER NOT NULL, created_ms INTEGER NOT NULL, ended_lsn INTEGER NOT NULL DEFAULT 0,
            ended_ms INTEGER NOT NULL DEFAULT 0, end_reason TEXT NOT NULL DEFAULT '', origin BLOB) WITHOUT ROWID;
        CREATE TABLE log(lsn INTEGER PRIMARY KEY, type INTEGER NOT NULL, time_ms INTEGER NOT NULL,
            key TEXT NOT NULL, session_id TEXT NOT NULL, other_id TEXT NOT NULL, reason TEXT NOT NULL,
            generation INTEGER NOT NULL, origin BLOB);`);
    const q = {
        binding: db.prepare('SELECT session_id, generation FROM bindings WHERE key = ?'),
        exists: db.prepare('SELECT 1 FROM sessions WHERE id = ?'),
        nextLsn: db.prepare('SELECT coalesce(max(lsn), 0) + 1 AS lsn FROM log').pluck(),
        addSession: db.prepare('INSERT INTO sessions(id, key, parent_id, created_lsn, created_ms, origin) VALUES (?, ?, ?, ?, ?, ?)'),
        endSession: db.prepare('UPDATE sessions SET ended_lsn = ?, ended_ms = ?, end_reason = ? WHERE id = ?'),
        move: db.prepare('UPDATE bindings SET session_id = ?, lsn = ?, updated_ms = ? WHERE key = ?'),
        log: db.prepare('INSERT INTO log VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)'),
        bind: db.prepare('INSERT INTO bindings VALUES (?, ?, 1, 0, 0)'),
        root: db.prepare("INSERT INTO sessions(id, key, parent_id, created_lsn, created_ms) VALUES (?, ?, '', 0, 0)"),
    };
    const ks = keyspace(writers);
    db.transaction(() => {
        for (const { keys, cur } of ks)
            keys.forEach((key, k) => { q.bind.run(key, cur[k]); q.root.run(cur[k], key); });
    })();
    // The checked split: the same checks, in the same order, as bindlog's SPLIT.
    const split = db.transaction((key, parent, child, gen, origin) => {
        const row = q.binding.get(key);
        if (row === undefined)
            return 'notfound';
        if (row.session_id === child)
            return 'already';
        if (row.generation !== gen)
            return 'stale';
        if (row.session_id !== parent)
            return 'moved';
        if (q.exists.get(child) !== undefined)
            throw new Error('EEXIST');
        const lsn = q.nextLsn.get();
        const now = Date.now();
        q.addSession.run(child, key, parent, lsn, now, origin);
        q.endSession.run(lsn, now, 'compression', parent);
        q.move.run(child, lsn, now, key);
        q.log.run(lsn, 3, now, key, child, parent, 'compression', gen, origin);
        return 'applied';
    });
    return { db, ks, split: split.immediate };
}

function sqliteRow(writers) {
    const { db, ks, split } = sqliteOpen(writers);
    const origin = Buffer.from(ORIGIN);
    const yieldToLoop = () => new Promise((r) => setImmediate(r));
    return contender('better-sqlite3 WAL, synchronous=FULL', writers, async (w, i) => {
        await yieldToLoop(); // a request handler: one split per turn of the loop
        const k = i % KEYS_PER_WRITER;
        const child = `w${w}-k${k}-s${Math.floor(i / KEYS_PER_WRITER) + 1}`;
        const outcome = split(ks[w].keys[k], ks[w].cur[k], child, 1, origin);
        ks[w].cur[k] = child;
        return outcome;
    }, () => db.close());
}

// ---- overhead per call -------------------------------------------------------------
// Each figure is the best of ROUNDS runs (C and Node alternating): on a
// shared machine the minimum is the figure least disturbed by other work.
const ROUNDS = Number(arg('rounds', '3'));

function cOverhead() {
    const candidates = [arg('c-bench'), join(repo, 'build', 'bindings', 'node', 'bindlog_node_overhead')];
    const exe = candidates.find((c) => c && existsSync(c));
    if (!exe)
        return null;
    return JSON.parse(execFileSync(exe, [freshDir(), String(OVERHEAD_N)], { encoding: 'utf8' }));
}

async function nodeOverhead() {
    const n = OVERHEAD_N;
    const store = Store.open(freshDir(), { durability: 'none' });
    const keys = Array.from({ length: n }, (_, i) => `k${i}`);
    const sids = Array.from({ length: n }, (_, i) => `s${i}`);
    const kids = Array.from({ length: n }, (_, i) => `c${i}`);
    const grandkids = Array.from({ length: n }, (_, i) => `d${i}`);
    for (let i = 0; i < n; i += 1000) // as overhead.c: batches of 1000
        await store.applyBatch(keys.slice(i, i + 1000).map((key, j) => ({ type: 'bind', key, sessionId: sids[i + j] })));
    for (let i = 0; i < n; i++) // warm up the JIT on the read path
        store.get(keys[i]);
    const cpu = () => { const u = process.cpuUsage(); return u.user + u.system; }; // µs, all threads
    let t = performance.now();
    let c = cpu();
    for (let i = 0; i < n; i++)
        if (store.get(keys[i]) === null)
            throw new Error('get');
    const get = ((performance.now() - t) * 1000) / n;
    const getCpu = (cpu() - c) / n;
    t = performance.now();
    c = cpu();
    for (let i = 0; i < n; i++)
        if ((await store.split(keys[i], sids[i], kids[i], 1)).outcome !== 'applied')
            throw new Error('split');
    const serial = ((performance.now() - t) * 1000) / n;
    const serialCpu = (cpu() - c) / n;
    t = performance.now();
    c = cpu();
    let next = 0;
    await Promise.all(Array.from({ length: 64 }, async () => {
        while (next < n) {
            const i = next++;
            if ((await store.split(keys[i], kids[i], grandkids[i], 1)).outcome !== 'applied')
                throw new Error('split');
        }
    }));
    const pipelined = ((performance.now() - t) * 1000) / n;
    const pipelinedCpu = (cpu() - c) / n;
    const s = store.stats();
    const greats = Array.from({ length: n }, (_, i) => `e${i}`);
    t = performance.now();
    c = cpu();
    for (let i = 0; i < n; i++)
        if (store.splitSync(keys[i], grandkids[i], greats[i], 1).outcome !== 'applied')
            throw new Error('splitSync');
    const sync = ((performance.now() - t) * 1000) / n;
    const syncCpu = (cpu() - c) / n;
    store.close();
    return { get, serial, pipelined, sync, getCpu, serialCpu, pipelinedCpu, syncCpu,
        perCommit: s.groupedEvents / s.commits };
}

async function overheadRounds() {
    let c = null;
    let js = null;
    const best = (a, b) => {
        if (!a)
            return b;
        const out = {};
        for (const k of Object.keys(b))
            out[k] = Math.min(a[k], b[k]);
        return out;
    };
    for (let r = 0; r < ROUNDS; r++) {
        const cr = cOverhead();
        if (cr)
            c = best(c, cr);
        js = best(js, await nodeOverhead());
    }
    return { c, js };
}

// ---- main ----------------------------------------------------------------------------
const load0 = loadavg();
console.log(`bindlog ${require(pkgDir).version} from ${pkgDir}; node ${process.version}; ` +
    `${cpus().length} cores (${cpus()[0].model}); load average ${load0.map((x) => x.toFixed(2)).join(' ')}`);
const only = arg('only', '');
if (only !== 'overhead')
    await splitRows();
if (only !== 'split')
    await overheadRows();

async function splitRows() {
    console.log(`\nThe checked split in FULL durability, ${SECONDS} s per row in ${SLICES} alternating turns:\n`);
    console.log('| store | writers | splits/s | split p50 ms | split p99 ms | loop lag p99 ms |');
    console.log('|---|---:|---:|---:|---:|---:|');
    const rows = [];
    for (const w of [1, 16])
        rows.push(...await runRows([bindlogRow(w), bindlogSyncRow(w), ...(Database ? [sqliteRow(w)] : [])]));
    for (const r of rows.filter((x) => x.perCommit))
        console.log(`(bindlog x${r.writers}: ${r.perCommit.toFixed(1)} splits per group commit)`);
    if (!Database)
        return;
    for (const w of [1, 16]) {
        const q = rows.find((r) => r.writers === w && !r.name.startsWith('bindlog'));
        for (const b of rows.filter((r) => r.writers === w && r.name.startsWith('bindlog')))
            console.log(`x${w}: ${b.name} / better-sqlite3 = ${(b.rate / q.rate).toFixed(2)}x the splits per second`);
    }
}

async function overheadRows() {
    console.log(`\nOverhead per call (durability NONE, ${OVERHEAD_N} calls each, best of ${ROUNDS} rounds):\n`);
    const { c, js } = await overheadRounds();
    console.log('| call | C µs | Node µs | overhead µs | C CPU µs | Node CPU µs | overhead CPU µs |');
    console.log('|---|---:|---:|---:|---:|---:|---:|');
    const fmt = (x) => (x === undefined || Number.isNaN(x) ? '—' : x.toFixed(2));
    const row = (name, cw, nw, cc, nc) => console.log(`| ${name} | ${fmt(cw)} | ${fmt(nw)} | ` +
        `${c ? fmt(nw - cw) : '—'} | ${fmt(cc)} | ${fmt(nc)} | ${c ? fmt(nc - cc) : '—'} |`);
    row('get (synchronous)', c?.get_us, js.get, c?.get_cpu_us, js.getCpu);
    row('split, one at a time (awaited)', c?.split_us, js.serial, c?.split_cpu_us, js.serialCpu);
    row('split, 64 in flight (per call)', c?.split_us, js.pipelined, c?.split_cpu_us, js.pipelinedCpu);
    row('splitSync, one at a time', c?.split_us, js.sync, c?.split_cpu_us, js.syncCpu);
    if (!c)
        console.log('(no C figures: build the repository with CMake for bindlog_node_overhead, or pass --c-bench)');
    console.log(`(64 in flight: ${js.perCommit.toFixed(1)} splits per commit)`);
}

const load1 = loadavg();
console.log(`\nload average after: ${load1.map((x) => x.toFixed(2)).join(' ')}`);
