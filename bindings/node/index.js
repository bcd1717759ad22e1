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
native.init(BindlogError);

/** Pass as runGeneration to skip a split's generation check. */
const ANY_GENERATION = 0xFFFFFFFFFFFFFFFFn;
const LAST_LSN = 0xFFFFFFFFFFFFFFFFn;
const DURABILITY = { full: 0, normal: 1, none: 2 };
const EVENT_TYPES = { bind: 1, newSession: 2, split: 3, invalidate: 4, unbind: 5 };
const DEFAULT_WRITER_THREADS = 16;
const FOLLOW_BATCH = 256; // records read per snapshot while following

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

    constructor(n, from) {
        this.#n = n;
        this.#next = from;
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
            if (this.#done || this.#n.closed())
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
                if (r === null)
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

function batchEvent(ev, i) {
    const call = `applyBatch: events[${i}]`;
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

/** An open store.  Writes return promises; reads are synchronous. */
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
        return this.#n.applyBatch(events.map(batchEvent));
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
        const o = options(opts, 'follow', ['from']);
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
        return new Follow(this.#n, from);
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
    ANY_GENERATION,
    version: native.version(),
};
