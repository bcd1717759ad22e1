'use strict';
// bindlog -- crash-safe session bindings for chat gateways, on LMDB.
//
// The JavaScript face of the Node-API addon (src/*.c).  This file checks
// options and converts origins; the addon checks every argument's type again
// and does the work.  Writes return promises settled off the main thread;
// reads are synchronous.  See index.d.ts for the API and docs/node.md in the
// repository for the design.

const native = loadAddon();

function loadAddon() {
    const tried = [];
    for (const rel of ['./build/Release/bindlog.node', './build/Debug/bindlog.node']) {
        try {
            return require(rel);
        } catch (err) {
            if (err && err.code !== 'MODULE_NOT_FOUND')
                throw err;
            tried.push(rel);
        }
    }
    throw new Error(`bindlog: the native addon is not built (looked for ${tried.join(', ')} ` +
        `in ${__dirname}); run \`npm rebuild bindlog\` or \`node scripts/build.js\` there`);
}

/** A failed bindlog call: `code` is the C error name, `message` says what failed. */
class BindlogError extends Error {
    constructor(message, code, errno) {
        super(message);
        this.name = 'BindlogError';
        this.code = code;
        this.errno = errno;
    }
}

/** A call on a closed store (Python: bindlog.StoreClosed): code
 * 'BINDLOG_ECLOSED', no C error value (the library never saw the call). */
class StoreClosedError extends BindlogError {
    constructor(message = 'the store is closed') {
        super(message, 'BINDLOG_ECLOSED', undefined);
        this.name = 'StoreClosedError';
    }
}
/**
 * result.isCurrent(runGeneration): is the run that made this write still
 * the key's current run?  True when the outcome is 'applied' or 'already'
 * AND the key's generation is still `runGeneration` (the generation the
 * run started under).  A split retried after /stop comes back 'already'
 * (the split did go in) with a higher generation: the run was stopped, and
 * this says false.  The same rule as Python's Result.is_current and the C
 * comparison next to BINDLOG_ALREADY in bindlog.h.  Every write's result
 * carries it as a non-enumerable method.
 */
function isCurrent(runGeneration) {
    if (typeof runGeneration !== 'number' && typeof runGeneration !== 'bigint')
        throw new TypeError(`isCurrent: runGeneration must be a number or a bigint, not ${describe(runGeneration)}`);
    if (typeof runGeneration === 'number' && !Number.isSafeInteger(runGeneration))
        throw new RangeError('isCurrent: runGeneration must be a safe integer or a bigint');
    if (this.outcome !== 'applied' && this.outcome !== 'already')
        return false;
    return BigInt(this.generation) === BigInt(runGeneration);
}
native.init(BindlogError, StoreClosedError, isCurrent);
const routing = require('./route.js');

/** Pass as runGeneration to skip a split's generation check. */
const ANY_GENERATION = 0xFFFFFFFFFFFFFFFFn;
const LAST_LSN = 0xFFFFFFFFFFFFFFFFn;
const DURABILITY = { full: 0, normal: 1, none: 2 };
const EVENT_TYPES = { bind: 1, newSession: 2, split: 3, invalidate: 4, unbind: 5 };
const DEFAULT_WRITER_THREADS = 16;
const FOLLOW_BATCH = 256; // records read per snapshot while following
const ROUTE_OPTIONS = ['now', ...routing.POLICY_OPTIONS, 'freshSessionId', 'origin'];
const EXPIRE_OPTIONS = ['idleMs', 'before', 'now', 'prefix', 'dryRun'];

function describe(v) {
    if (v === null)
        return 'null';
    if (Array.isArray(v))
        return 'an array';
    return typeof v === 'object' ? 'an object' : `a ${typeof v}`;
}

// The options object of `call`: undefined/null is {}; an unknown name is a
// TypeError (a misspelt `reason` must not silently become the default).
function options(opts, call, allowed) {
    if (opts === undefined || opts === null)
        return {};
    if (typeof opts !== 'object' || Array.isArray(opts))
        throw new TypeError(`${call}: options must be an object, not ${describe(opts)}`);
    for (const k of Object.keys(opts))
        if (!allowed.includes(k))
            throw new TypeError(`${call}: unknown option '${k}' (known: ${allowed.join(', ')})`);
    return opts;
}

// origin: a string (UTF-8), a Buffer/Uint8Array (as is), or any other object
// (stored as its JSON).  undefined/null: none given.
function originArg(origin, call) {
    if (origin === undefined || origin === null)
        return undefined;
    if (typeof origin === 'string')
        return Buffer.from(origin, 'utf8');
    if (origin instanceof Uint8Array)
        return origin;
    if (origin instanceof ArrayBuffer)
        return new Uint8Array(origin);
    if (typeof origin === 'object') {
        let json;
        try {
            json = JSON.stringify(origin);
        } catch (err) {
            throw new TypeError(`${call}: origin is not JSON-serialisable: ${err.message}`);
        }
        return Buffer.from(json, 'utf8');
    }
    throw new TypeError(`${call}: origin must be a string, a Buffer or an object, not ${describe(origin)}`);
}

function* records(it) {
    try {
        for (let r = it.next(); r !== null; r = it.next())
            yield r;
    } finally {
        it.close();
    }
}

let waitIds = 0;

// The change feed: an async iterator over log records from `from` on, built
// on bindlog_wait.  Records are read synchronously, FOLLOW_BATCH at a time
// from one snapshot; when there are none, a wait runs on the store's waiter
// thread.  It never skips a record: a record compacted away before it was
// read is a BINDLOG_ENOTFOUND error.  It ends when the store closes or the
// loop is left (`break`, return()).
class Follow {
    #n;
    #next;
    #buf = [];
    #i = 0;
    #done = false;
    #waitId = 0;
    #chain = Promise.resolve();

    #until;

    constructor(n, from, until = Infinity) {
        this.#n = n;
        this.#next = from;
        this.#until = until;
    }

    [Symbol.asyncIterator]() {
        return this;
    }

    next() {
        // one step at a time, even if next() is called again before it settles
        const p = this.#chain.then(() => this.#step());
        this.#chain = p.then(() => {}, () => {});
        return p;
    }

    return(value) {
        this.#done = true;
        if (this.#waitId !== 0)
            this.#n.cancelWait(this.#waitId);
        return Promise.resolve({ value, done: true });
    }

    async #step() {
        for (;;) {
            if (this.#i < this.#buf.length)
                return { value: this.#buf[this.#i++], done: false };
            if (this.#done || this.#n.closed() || this.#next > this.#until)
                return this.#finish();
            if (this.#fill())
                continue;
            this.#waitId = (waitIds = (waitIds % 0xFFFFFFFF) + 1);
            let head;
            try {
                head = await this.#n.wait(this.#next - 1, this.#waitId);
            } finally {
                this.#waitId = 0;
            }
            if (head === -1 || this.#done || this.#n.closed())
                return this.#finish();
            if (!this.#fill())
                throw new BindlogError(`follow: LSN ${this.#next} is no longer in the log ` +
                    `(the head is ${head}): compacted away before it was read`,
                    'BINDLOG_ENOTFOUND', -1);
        }
    }

    #finish() {
        this.#done = true;
        this.#buf = [];
        this.#i = 0;
        return { value: undefined, done: true };
    }

    // Read what follows #next; true if anything was read.
    #fill() {
        const it = this.#n.logIter(this.#next, LAST_LSN);
        this.#buf = [];
        this.#i = 0;
        try {
            for (let k = 0; k < FOLLOW_BATCH; k++) {
                const r = it.next();
                if (r === null || r.lsn > this.#until)
                    break;
                if (r.lsn !== this.#next) {
                    this.#done = true;
                    throw new BindlogError(`follow: LSNs ${this.#next}..${r.lsn - 1} are no longer ` +
                        'in the log: compacted away before they were read', 'BINDLOG_ENOTFOUND', -1);
                }
                this.#buf.push(r);
                this.#next++;
            }
        } finally {
            it.close();
        }
        return this.#buf.length > 0;
    }
}

function batchEvent(ev, i, name = 'applyBatch') {
    const call = `${name}: events[${i}]`;
    if (ev === null || typeof ev !== 'object' || Array.isArray(ev))
        throw new TypeError(`${call} must be an object, not ${describe(ev)}`);
    const type = EVENT_TYPES[ev.type];
    if (type === undefined || !Object.hasOwn(EVENT_TYPES, ev.type))
        throw new TypeError(`${call}.type must be one of ${Object.keys(EVENT_TYPES).join(', ')}`);
    switch (ev.type) {
    case 'bind':
        options(ev, call, ['type', 'key', 'sessionId', 'expect', 'reason', 'origin']);
        return [type, ev.key, ev.sessionId, ev.expect, 0, ev.reason, originArg(ev.origin, call)];
    case 'newSession':
        options(ev, call, ['type', 'key', 'sessionId', 'reason', 'origin']);
        return [type, ev.key, ev.sessionId, undefined, 0, ev.reason, originArg(ev.origin, call)];
    case 'split':
        options(ev, call, ['type', 'key', 'parentId', 'childId', 'runGeneration', 'origin']);
        return [type, ev.key, ev.childId, ev.parentId, ev.runGeneration, undefined,
            originArg(ev.origin, call)];
    default: // invalidate, unbind
        options(ev, call, ['type', 'key', 'reason']);
        return [type, ev.key, undefined, undefined, 0, ev.reason, undefined];
    }
}

function importEntry(e, i, name = 'importEntries') {
    const call = `${name}: entries[${i}]`;
    if (e === null || typeof e !== 'object' || Array.isArray(e))
        throw new TypeError(`${call} must be an object, not ${describe(e)}`);
    options(e, call, ['key', 'sessionId', 'timeMs', 'origin']);
    let t = e.timeMs === undefined || e.timeMs === null ? 0 : e.timeMs;
    if (t instanceof Date)
        t = t.getTime();
    if (typeof t !== 'number')
        throw new TypeError(`${call}.timeMs must be a number of milliseconds or a Date, not ${describe(t)}`);
    if (!Number.isSafeInteger(t))
        throw new RangeError(`${call}.timeMs must be a whole number of milliseconds`);
    return [e.key, e.sessionId, t, originArg(e.origin, call)];
}

const MAX_TIME_MS = 253402300799999; // 9999-12-31T23:59:59.999Z
const ISO_TIME = /^(\d{4}-\d{2}-\d{2})(?:T(\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?))?(Z|[+-]\d{2}:?\d{2})?$/;

// An entry's time: whole milliseconds, or an ISO-8601 string (no offset:
// local time, as Python's datetime.now().isoformat() writes it).
function entryTime(v, name) {
    let ms;
    if (typeof v === 'number') {
        if (!Number.isSafeInteger(v) || v < 0)
            return [null, `${name} is not a whole, non-negative number of milliseconds`];
        ms = v;
    } else if (typeof v === 'string') {
        const m = ISO_TIME.exec(v);
        // Date.parse reads a date-only string as UTC: make it local like the rest
        ms = m === null ? NaN : Date.parse(m[2] === undefined && m[3] === undefined ? `${m[1]}T00:00:00` : v);
        if (Number.isNaN(ms))
            return [null, `${name} is not an ISO-8601 date and time (like 2026-01-01T10:00:00Z)`];
    } else {
        return [null, `${name} is ${describe(v)}, not a time`];
    }
    if (ms <= 0 || ms > MAX_TIME_MS)
        return [null, `${name} is out of range (1970 to 9999)`];
    return [ms, null];
}

/**
 * A gateway's sessions.json as entries for store.importEntries(): the
 * formats of `bindlog import-json` (docs/tools.md).  `data` is the file's
 * text, a Buffer, or the parsed object.  Returns { entries, skipped,
 * ignored }: skipped lists { key, reason: 'malformed', detail } for entries
 * without a session id or time; ignored counts notes (a member named _...
 * whose value is not an object).  Each entry's origin is the entry itself,
 * as compact JSON.
 */
function parseSessionsJson(data, format) {
    if (format !== 'openclaw' && format !== 'hermes')
        throw new TypeError(`parseSessionsJson: format must be 'openclaw' or 'hermes', not ${String(format)}`);
    let obj = data;
    if (typeof data === 'string' || data instanceof Uint8Array)
        obj = JSON.parse(typeof data === 'string' ? data : Buffer.from(data).toString('utf8'));
    if (obj === null || typeof obj !== 'object' || Array.isArray(obj))
        throw new TypeError(`parseSessionsJson: the sessions file must hold a JSON object, not ${describe(obj)}`);
    const idName = format === 'openclaw' ? 'sessionId' : 'session_id';
    const out = { entries: [], skipped: [], ignored: 0 };
    for (const [key, v] of Object.entries(obj)) {
        const skip = (detail) => out.skipped.push({ key, reason: 'malformed', detail });
        if (v === null || typeof v !== 'object' || Array.isArray(v)) {
            if (key.startsWith('_'))
                out.ignored++;
            else
                skip(`the entry is ${describe(v)}, not an object`);
            continue;
        }
        const sid = v[idName];
        if (typeof sid !== 'string') {
            skip(sid === undefined ? `${idName} is missing` : `${idName} is ${describe(sid)}, not a string`);
            continue;
        }
        let time;
        let why;
        if (format === 'hermes') {
            if (v.session_key !== undefined && v.session_key !== key) {
                skip('session_key is not the entry\'s own key (which one routes?)');
                continue;
            }
            if (v.updated_at !== undefined && v.updated_at !== null)
                [time, why] = entryTime(v.updated_at, 'updated_at');
            else if (v.created_at !== undefined && v.created_at !== null)
                [time, why] = entryTime(v.created_at, 'created_at');
            else
                why = 'updated_at and created_at are missing';
        } else if (v.updatedAt === undefined) {
            why = 'updatedAt is missing';
        } else {
            [time, why] = entryTime(v.updatedAt, 'updatedAt');
        }
        if (why) {
            skip(why);
            continue;
        }
        out.entries.push({ key, sessionId: sid, timeMs: time, origin: Buffer.from(JSON.stringify(v)) });
    }
    return out;
}

/** An open store.  Writes return promises (their *Sync twins block and
 * return); reads are synchronous. */
/**
 * store.snapshot(): get(), generation(), has() and session() as of one
 * head LSN (`headLsn`), whatever is written meanwhile.  Untouched state is
 * read as is; state changed since is rebuilt from the key's log records up
 * to headLsn.  A read that would need records compacted away since throws
 * BINDLOG_ENOTFOUND rather than answer with newer state.  Holds nothing
 * open: it may live as long as needed.
 */
class Snapshot {
    #store;

    constructor(store, headLsn) {
        this.#store = store;
        this.headLsn = headLsn;
    }

    #compacted(what) {
        return new BindlogError(`snapshot at LSN ${this.headLsn}: ${what} changed since, and the ` +
            `records it would be rebuilt from were compacted away`, 'BINDLOG_ENOTFOUND', -1);
    }

    // the key's last record up to headLsn that changed its binding (a
    // 'route' record only moves its last activity; the library keeps them
    // out of a key's history, this is belt and braces), or null
    #lastUpTo(key) {
        let last = null;
        for (const r of this.#store.history(key)) {
            if (r.lsn > this.headLsn)
                break;
            if (r.type !== 'route')
                last = r;
        }
        if (last === null && this.#store.stats().baseLsn > 0)
            throw this.#compacted(`'${key}'`);
        return last;
    }

    /** The key's binding as of headLsn, or null.  lastActivityMs is the
     * key's current one while the binding is unchanged since headLsn, and 0
     * when it is rebuilt from the log (a key's history has no 'route'
     * records). */
    get(key) {
        const cur = this.#store.get(key);
        if (cur !== null && cur.lsn <= this.headLsn)
            return cur;
        const r = this.#lastUpTo(key);
        if (r === null || r.type === 'unbind')
            return null;
        // lastActivityMs as of headLsn is not known here: a key's history
        // holds no 'route' records, so a rebuilt binding reports 0
        return {
            key: r.key, sessionId: r.sessionId, generation: r.generation, lsn: r.lsn, updatedMs: r.timeMs,
            lastActivityMs: 0,
        };
    }

    /** Whether the key was bound as of headLsn. */
    has(key) {
        return this.get(key) !== null;
    }

    /** The key's generation as of headLsn (0 if never seen). */
    generation(key) {
        const r = this.#lastUpTo(key);
        return r === null ? 0 : r.generation;
    }

    /** The session as of headLsn, or null if it did not exist then. */
    session(id) {
        const s = this.#store.session(id);
        if (s === null || s.createdLsn > this.headLsn)
            return null;
        const recs = [...this.#store.history(s.key)];
        const touched = s.endedLsn > this.headLsn ||
            recs.some((r) => r.lsn > this.headLsn && (r.sessionId === id || r.otherId === id));
        if (!touched)
            return s;
        const base = this.#store.stats().baseLsn;
        if (base > 0 && base >= s.createdLsn)
            throw this.#compacted(`session '${id}'`);
        let end = null;
        for (const r of recs) {
            if (r.lsn > this.headLsn)
                break;
            if (r.lsn < s.createdLsn)
                continue;
            if (r.sessionId === id && (r.type === 'bind' || r.type === 'newSession' || r.type === 'split'))
                end = null;
            else if (r.otherId === id || (r.type === 'unbind' && r.sessionId === id))
                end = r;
        }
        return end === null ? { ...s, endedLsn: 0, endedMs: 0, endReason: '' }
            : { ...s, endedLsn: end.lsn, endedMs: end.timeMs, endReason: end.reason };
    }
}

class Store {
    #n;

    constructor(dir, opts) {
        if (typeof dir !== 'string')
            throw new TypeError(`open: dir must be a string, not ${describe(dir)}`);
        const o = options(opts, 'open', ['durability', 'readOnly', 'writerThreads']);
        const durability = o.durability === undefined ? 'full' : o.durability;
        if (!Object.hasOwn(DURABILITY, durability))
            throw new TypeError(`open: durability must be 'full', 'normal' or 'none', not ${String(durability)}`);
        if (o.readOnly !== undefined && typeof o.readOnly !== 'boolean')
            throw new TypeError(`open: readOnly must be a boolean, not ${describe(o.readOnly)}`);
        const threads = o.writerThreads === undefined ? DEFAULT_WRITER_THREADS : o.writerThreads;
        if (!Number.isInteger(threads) || threads < 1 || threads > 1024)
            throw new TypeError('open: writerThreads must be an integer from 1 to 1024');
        this.#n = new native.NativeStore(dir, DURABILITY[durability], o.readOnly === true, threads);
    }

    /** Open (and, unless readOnly, create) the store in `dir`. */
    static open(dir, opts) {
        return new Store(dir, opts);
    }

    get path() {
        return this.#n.path();
    }

    get closed() {
        return this.#n.closed();
    }

    bind(key, sessionId, opts) {
        const o = options(opts, 'bind', ['expect', 'reason', 'origin']);
        return this.#n.bind(key, sessionId, o.expect, o.reason, originArg(o.origin, 'bind'));
    }

    newSession(key, sessionId, opts) {
        const o = options(opts, 'newSession', ['reason', 'origin']);
        return this.#n.newSession(key, sessionId, o.reason, originArg(o.origin, 'newSession'));
    }

    split(key, parentId, childId, runGeneration, opts) {
        const o = options(opts, 'split', ['origin']);
        return this.#n.split(key, parentId, childId, runGeneration, originArg(o.origin, 'split'));
    }

    invalidate(key, opts) {
        const o = options(opts, 'invalidate', ['reason']);
        return this.#n.invalidate(key, o.reason);
    }

    unbind(key, opts) {
        const o = options(opts, 'unbind', ['reason']);
        return this.#n.unbind(key, o.reason);
    }

    applyBatch(events) {
        if (!Array.isArray(events))
            throw new TypeError(`applyBatch: events must be an array, not ${describe(events)}`);
        return this.#n.applyBatch(events.map((e, i) => batchEvent(e, i)));
    }

    /**
     * Route one inbound message of `key` (bindlog_route, SPEC 2b): in one
     * write, read the key's last activity, decide by the reset policy,
     * record this message's activity.  Resolves { outcome: 'routed' |
     * 'created' | 'reset', reason: 'idle' | 'daily' | null, sessionId (where
     * this message goes), previousId, generation, lsn, lastActivityMs (the
     * activity before this message) }.  Runs on the writer threads like
     * every write, so concurrent routes share group commits; of several
     * routes of one key at a boundary exactly one resets.
     */
    route(key, opts) {
        const o = options(opts, 'route', ROUTE_OPTIONS);
        const [now, mode, idle, boundary, fresh] = routing.routeArgs(o, 'route');
        return this.#n.route(key, now, mode, idle, boundary, fresh, originArg(o.origin, 'route'));
    }

    /** route() on this thread: returns the result (or throws) once durable. */
    routeSync(key, opts) {
        const o = options(opts, 'routeSync', ROUTE_OPTIONS);
        const [now, mode, idle, boundary, fresh] = routing.routeArgs(o, 'routeSync');
        return this.#n.routeSync(key, now, mode, idle, boundary, fresh, originArg(o.origin, 'routeSync'));
    }

    /**
     * Unbind (reason 'expired') every bound key idle for more than idleMs
     * (or active last before `before`), only keys starting with `prefix`
     * when given; resolves the count (dryRun: the count that would go,
     * nothing written).
     */
    expire(opts) {
        const o = options(opts, 'expire', EXPIRE_OPTIONS);
        const [cutoff, prefix, dry] = routing.expireArgs(o, 'expire');
        return this.#n.expire(cutoff, prefix, dry);
    }

    expireSync(opts) {
        const o = options(opts, 'expireSync', EXPIRE_OPTIONS);
        const [cutoff, prefix, dry] = routing.expireArgs(o, 'expireSync');
        return this.#n.expireSync(cutoff, prefix, dry);
    }

    /** bindlog_import_entries: BIND each entry (only if its key is unbound),
     * in order of timeMs, each logged with its own time; each applied or
     * refused alone.  Resolves one Result or BindlogError per entry. */
    importEntries(entries) {
        if (!Array.isArray(entries))
            throw new TypeError(`importEntries: entries must be an array, not ${describe(entries)}`);
        return this.#n.importEntries(entries.map((e, i) => importEntry(e, i)));
    }

    // The *Sync writes: the same calls, made on this thread.  They return
    // the Result (or throw the BindlogError) once the write is durable as
    // the store's durability says, blocking the event loop meanwhile (a
    // FULL write waits for its flush), as better-sqlite3's writes do.  For
    // a program that makes one write at a time and can afford the block,
    // they save the two thread hand-offs of a promise.

    bindSync(key, sessionId, opts) {
        const o = options(opts, 'bindSync', ['expect', 'reason', 'origin']);
        return this.#n.bindSync(key, sessionId, o.expect, o.reason, originArg(o.origin, 'bindSync'));
    }

    newSessionSync(key, sessionId, opts) {
        const o = options(opts, 'newSessionSync', ['reason', 'origin']);
        return this.#n.newSessionSync(key, sessionId, o.reason, originArg(o.origin, 'newSessionSync'));
    }

    splitSync(key, parentId, childId, runGeneration, opts) {
        const o = options(opts, 'splitSync', ['origin']);
        return this.#n.splitSync(key, parentId, childId, runGeneration, originArg(o.origin, 'splitSync'));
    }

    invalidateSync(key, opts) {
        const o = options(opts, 'invalidateSync', ['reason']);
        return this.#n.invalidateSync(key, o.reason);
    }

    unbindSync(key, opts) {
        const o = options(opts, 'unbindSync', ['reason']);
        return this.#n.unbindSync(key, o.reason);
    }

    applyBatchSync(events) {
        if (!Array.isArray(events))
            throw new TypeError(`applyBatchSync: events must be an array, not ${describe(events)}`);
        return this.#n.applyBatchSync(events.map((e, i) => batchEvent(e, i, 'applyBatchSync')));
    }

    importEntriesSync(entries) {
        if (!Array.isArray(entries))
            throw new TypeError(`importEntriesSync: entries must be an array, not ${describe(entries)}`);
        return this.#n.importEntriesSync(entries.map((e, i) => importEntry(e, i, 'importEntriesSync')));
    }

    get(key) {
        return this.#n.get(key);
    }

    session(id) {
        return this.#n.session(id);
    }

    history(key) {
        return records(this.#n.historyIter(key)); // opened now: a bad key throws here
    }

    log(opts) {
        const o = options(opts, 'log', ['from', 'to']);
        return records(this.#n.logIter(o.from === undefined ? 0 : o.from,
            o.to === undefined ? LAST_LSN : o.to));
    }

    follow(opts) {
        const o = options(opts, 'follow', ['from', 'until']);
        let until = Infinity;
        if (o.until === 'head') {
            until = this.#n.head();
        } else if (typeof o.until === 'number' || typeof o.until === 'bigint') {
            until = Number(o.until);
            if (!Number.isSafeInteger(until) || until < 0)
                throw new RangeError('follow: until must be an LSN from 0 to 2^53 - 1');
        } else if (o.until !== undefined) {
            throw new TypeError(`follow: until must be 'head' or an LSN, not ${describe(o.until)}`);
        }
        let from = o.from;
        if (from === undefined) {
            from = this.#n.head() + 1;
        } else if (typeof from === 'bigint') {
            if (from < 1n || from > BigInt(Number.MAX_SAFE_INTEGER))
                throw new RangeError('follow: from must be an LSN from 1 to 2^53 - 1');
            from = Number(from);
        } else if (typeof from !== 'number') {
            throw new TypeError(`follow: from must be a number, not ${describe(from)}`);
        } else if (!Number.isSafeInteger(from) || from < 1) {
            throw new RangeError('follow: from must be an LSN from 1 to 2^53 - 1');
        }
        this.#n.head(); // a closed store throws now, not at the first next()
        return new Follow(this.#n, from, until);
    }

    /**
     * Reads that agree with each other, as of the head LSN now: see
     * Snapshot.  The C API holds no read transaction across calls, so a
     * snapshot is built on the log (a binding or session changed since is
     * rebuilt from the key's records up to its LSN).
     */
    snapshot() {
        return new Snapshot(this, this.#n.head());
    }

    stats() {
        return this.#n.stats();
    }

    digest() {
        return this.#n.digest();
    }

    /** Close the store: writes already made finish first; idempotent. */
    close() {
        this.#n.close();
    }
}

module.exports = {
    Store,
    BindlogError,
    StoreClosedError,
    Snapshot,
    ANY_GENERATION,
    parseSessionsJson,
    dailyBoundaryMs: routing.dailyBoundaryMs,
    policyFromOpenClaw: routing.policyFromOpenClaw,
    policyFromHermes: routing.policyFromHermes,
    version: native.version(),
};
