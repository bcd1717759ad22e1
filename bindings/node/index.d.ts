// Type declarations of the npm package `bindlog` (index.js, index.mjs).
//
// LSNs and generations are numbers: exact up to Number.MAX_SAFE_INTEGER
// (2^53 - 1 events, which no store reaches); past that the addon returns a
// bigint rather than a wrong number.
/// <reference types="node" />

/** What a write did, as the C outcomes BINDLOG_APPLIED, _ALREADY, _STALE, _MOVED. */
export type Outcome = 'applied' | 'already' | 'stale' | 'moved';

/** Event types, as in applyBatch() and in log records; 'route' (a routed
 * message on a fresh binding: only its last activity changes) is written by
 * route() alone, never by a batch. */
export type EventType = 'bind' | 'newSession' | 'split' | 'invalidate' | 'unbind' | 'route';

/** Durability of the writes of one handle (C: BINDLOG_DURABILITY_*). */
export type Durability = 'full' | 'normal' | 'none';

/**
 * Opaque bytes kept with a session: a string (stored as UTF-8), bytes as
 * they are, or any other object (stored as its JSON).
 */
export type Origin = string | Uint8Array | ArrayBuffer | object;

/** A generation to check a split against, or ANY_GENERATION to skip the check. */
export type RunGeneration = number | bigint;

/** The result of one write: resolves every write's promise (errors reject). */
/** What a write did. */
export interface Result {
    readonly outcome: Outcome;
    /** The record written; 0 when nothing was logged. */
    readonly lsn: number;
    /** The key's generation after the call. */
    readonly generation: number;
    /** The key's binding after the call; '' if none. */
    readonly sessionId: string;
    /**
     * Is the run still the key's current one?  True when the outcome is
     * 'applied' or 'already' and `generation` equals `runGeneration` (the
     * generation the run started under).  A split retried after /stop is
     * 'already' (it did go in) with a higher generation: false, stop the run.
     * (A non-enumerable method: results still deep-equal plain objects.)
     */
    isCurrent(runGeneration: number | bigint): boolean;
}

/** A key's binding (store.get). */
export interface Binding {
    key: string;
    sessionId: string;
    generation: number;
    /** The last event that changed this binding. */
    lsn: number;
    updatedMs: number;
    /** The time of the key's last routed message (route()), 0 if none.
     * Durable: only a routed message moves it, never backwards; open,
     * recovery and replay keep it.  route() judges freshness by the later
     * of this and updatedMs. */
    lastActivityMs: number;
}

/** A session (store.session). */
export interface Session {
    id: string;
    /** The key it was last bound to. */
    key: string;
    /** '' for a root session. */
    parentId: string;
    createdLsn: number;
    createdMs: number;
    /** 0 while the session is live. */
    endedLsn: number;
    endedMs: number;
    endReason: string;
    /** The origin bytes (empty when none was ever given). */
    origin: Buffer;
}

/** One log record (history, log, follow). */
export interface LogRecord {
    lsn: number;
    type: EventType;
    timeMs: number;
    /** The key's generation after the event. */
    generation: number;
    key: string;
    /** The key's binding after the event (split: the child; unbind: the session it ended). */
    sessionId: string;
    /** bind/newSession: the previous binding; split: the parent; otherwise ''. */
    otherId: string;
    /** The effective reason ('' if none). */
    reason: string;
    /** The event's origin; null when the event carried none. */
    origin: Buffer | null;
}

/** Store-wide statistics (C: bindlog_stats). */
export interface Stats {
    headLsn: number;
    baseLsn: number;
    logRecords: number;
    bindings: number;
    liveBindings: number;
    sessions: number;
    liveSessions: number;
    /** Applied events by type over the store's life, from every process. */
    applied: Record<EventType, number>;
    /** Write transactions committed by this process. */
    commits: number;
    /** Events those commits carried (group commit: groupedEvents / commits per flush). */
    groupedEvents: number;
    mapSize: number;
    mapUsed: number;
    fileSize: number;
    readersUsed: number;
    readersMax: number;
    durability: Durability;
    formatVersion: number;
}

export interface OpenOptions {
    /** Default 'full': an 'applied' write survives power loss. */
    durability?: Durability;
    /** Every write rejects with BINDLOG_EREADONLY; a missing store is BINDLOG_ENOTFOUND. */
    readOnly?: boolean;
    /** Threads that make this store's blocking write calls, 1..1024 (default 16). */
    writerThreads?: number;
}

export interface BindOptions {
    /** Only if the key is bound to this session now ('' = only if unbound); else 'moved'. */
    expect?: string | null;
    /** Why the previous session ended (default 'switch'). */
    reason?: string | null;
    origin?: Origin | null;
}

export interface NewSessionOptions {
    /** Why the previous session ended (default 'new_session'). */
    reason?: string | null;
    origin?: Origin | null;
}

export interface SplitOptions {
    /** The child's origin (default: a copy of the parent's). */
    origin?: Origin | null;
}

export interface ReasonOptions {
    reason?: string | null;
}

export interface LogOptions {
    /** First LSN (default: the oldest retained). */
    from?: number | bigint;
    /** Last LSN (default: the head). */
    to?: number | bigint;
}

export interface FollowOptions {
    /** First LSN to yield (default: the head at the call + 1, i.e. only new events). */
    from?: number | bigint;
    /** Stop at this LSN (the last one yielded), or at 'head': the head when
     * follow() is called (a first follower catching up ends there). */
    until?: 'head' | number | bigint;
}

/**
 * Reads as of one head LSN (store.snapshot()).  Built on the log: state
 * changed since is rebuilt from the key's records up to headLsn; a read
 * needing records compacted away since throws BINDLOG_ENOTFOUND.
 */
export declare class Snapshot {
    private constructor();
    readonly headLsn: number;
    get(key: string): Binding | null;
    has(key: string): boolean;
    generation(key: string): number;
    session(id: string): Session | null;
}

export type BatchEvent =
    | { type: 'bind'; key: string; sessionId: string; expect?: string | null; reason?: string | null; origin?: Origin | null }
    | { type: 'newSession'; key: string; sessionId: string; reason?: string | null; origin?: Origin | null }
    | { type: 'split'; key: string; parentId: string; childId: string; runGeneration: RunGeneration; origin?: Origin | null }
    | { type: 'invalidate'; key: string; reason?: string | null }
    | { type: 'unbind'; key: string; reason?: string | null };

/** What route() did (C: BINDLOG_ROUTED, _CREATED, _RESET). */
export type RouteOutcome = 'routed' | 'created' | 'reset';

/** A reset policy's mode (C: BINDLOG_RESET_*): 'both' resets when either
 * idle or daily says so, 'dailyAndIdle' only when both do. */
export type ResetMode = 'none' | 'idle' | 'daily' | 'both' | 'dailyAndIdle';

/** A gateway's reset policy, as route()'s options. */
export interface ResetPolicy {
    /** Default 'none': never reset. */
    mode?: ResetMode;
    /** The idle timeout in ms (modes with idle in them). */
    idleMs?: number;
    /** The daily reset hour 0..23 in timeZone: the boundary is computed from
     * the call's `now` (dailyBoundaryMs()). */
    atHour?: number;
    /** The zone of atHour (IANA name); default the host's. */
    timeZone?: string;
    /** A daily boundary you computed, instead of atHour. */
    dailyBoundaryMs?: number;
}

export interface RouteOptions extends ResetPolicy {
    /** The message's time (ms since the epoch, or a Date); default the store's clock. */
    now?: number | Date;
    /** The session to bind on 'created' or 'reset' (must not exist); default
     * a new crypto.randomUUID().  Unused when the answer is 'routed'. */
    freshSessionId?: string;
    /** The new session's origin. */
    origin?: Origin | null;
}

/** Where a message goes (route()). */
export interface RouteResult {
    readonly outcome: RouteOutcome;
    /** 'reset': the policy that fired; otherwise null. */
    readonly reason: 'idle' | 'daily' | null;
    /** The session this message goes to. */
    readonly sessionId: string;
    /** 'reset': the session that ended; otherwise ''. */
    readonly previousId: string;
    /** The key's generation after the call ('reset' bumps it: older runs get 'stale'). */
    readonly generation: number;
    /** The record this call wrote; 0 for a 'routed' message at the time the
     * key's activity already stands at (nothing changed, nothing logged). */
    readonly lsn: number;
    /** The key's last activity before this message (what was judged); 0 if none. */
    readonly lastActivityMs: number;
}

/** expire()'s options: idleMs or before, one of them. */
export interface ExpireOptions {
    /** Unbind keys idle for longer than this many ms (before now - idleMs). */
    idleMs?: number;
    /** Or: keys whose last activity is before this time. */
    before?: number | Date;
    /** The time idleMs counts back from; default Date.now(). */
    now?: number | Date;
    /** Only keys starting with this ('agent:main:cron:'). */
    prefix?: string;
    /** Count only; write nothing. */
    dryRun?: boolean;
}

/**
 * The latest daily reset boundary at or before `now` (default Date.now()):
 * the instant the wall clock in `timeZone` (default the host's) last read
 * hour:00, in ms.  Correct across DST changes: a skipped hour is the end of
 * the gap, a repeated one its first occurrence.  RangeError for an hour
 * outside 0..23 or an unknown zone.
 */
export declare function dailyBoundaryMs(hour: number, timeZone?: string | null, now?: number | Date): number;

/** OpenClaw's reset block (session.reset, resetByType[t], resetByChannel[c]). */
export interface OpenClawReset {
    mode?: 'daily' | 'idle';
    atHour?: number;
    idleMinutes?: number;
}

/** hermes-agent's session_reset block. */
export interface HermesSessionReset {
    mode?: 'both' | 'idle' | 'daily' | 'none';
    at_hour?: number;
    idle_minutes?: number;
}

/** OpenClaw's reset settings as route() options ('daily' with idleMinutes is
 * 'both'; no block is OpenClaw's default, daily at 04:00). */
export declare function policyFromOpenClaw(reset?: OpenClawReset | null,
                                           options?: { timeZone?: string }): ResetPolicy;
/** hermes-agent's session_reset as route() options (defaults both, 4, 1440). */
export declare function policyFromHermes(sessionReset?: HermesSessionReset | null,
                                         options?: { timeZone?: string }): ResetPolicy;

/** One entry of a gateway's routing table, for importEntries(). */
export interface ImportEntry {
    key: string;
    sessionId: string;
    /** The entry's last update (ms since the epoch, or a Date): its time in the
     * log and its place in the order; 0 or absent = now. */
    timeMs?: number | Date | null;
    /** The session's origin, e.g. the entry itself. */
    origin?: Origin | null;
}

/** What parseSessionsJson() made of a sessions file. */
export interface ParsedSessions {
    entries: ImportEntry[];
    /** Entries without a usable session id or time, with the reason. */
    skipped: { key: string; reason: 'malformed'; detail: string }[];
    /** Notes: members named _... whose value is not an object. */
    ignored: number;
}

/**
 * A gateway's sessions.json (the formats of `bindlog import-json`) as entries
 * for store.importEntries().  `data` is the file's text, its bytes, or the
 * parsed object.  Throws SyntaxError for text that is not JSON and
 * TypeError for a file that is not an object.
 */
export declare function parseSessionsJson(data: string | Uint8Array | object,
                                          format: 'openclaw' | 'hermes'): ParsedSessions;

/** Pass as runGeneration to skip a split's generation check (2^64 - 1). */
export declare const ANY_GENERATION: bigint;

/** The C library's version, e.g. '0.1.0'. */
export declare const version: string;

/** A failed bindlog call; a rejected write's promise carries one. */
export declare class BindlogError extends Error {
    constructor(message: string, code: string, errno?: number);
    /** The C error name: 'BINDLOG_EINVAL', 'BINDLOG_ENOTFOUND', ...;
     * 'BINDLOG_ECLOSED' for a closed store (StoreClosedError). */
    readonly code: string;
    /** The C error value (negative); undefined for StoreClosedError. */
    readonly errno: number | undefined;
    /** applyBatch: the index of the event that failed. */
    readonly index?: number;
}

/**
 * A call on a closed store (Python: bindlog.StoreClosed); code
 * 'BINDLOG_ECLOSED'.  The library never saw the call: `errno` is undefined.
 */
export declare class StoreClosedError extends BindlogError {
    constructor(message?: string);
    readonly code: 'BINDLOG_ECLOSED';
}

/**
 * An open store.  Writes return promises settled off the main thread (one of
 * the store's writer threads makes the blocking call; concurrent writes share
 * group commits).  Reads are synchronous.  A wrong argument type throws a
 * TypeError at once; a value the library refuses rejects with a BindlogError.
 */
export declare class Store {
    constructor(dir: string, options?: OpenOptions);
    /** Open (and, unless readOnly, create) the store in `dir`; throws a BindlogError. */
    static open(dir: string, options?: OpenOptions): Store;

    readonly path: string;
    readonly closed: boolean;

    /** BIND: route key to sessionId (first contact, /resume). Generation + 1. */
    bind(key: string, sessionId: string, options?: BindOptions): Promise<Result>;
    /** NEW_SESSION: /new, /reset.  Generation + 1. */
    newSession(key: string, sessionId: string, options?: NewSessionOptions): Promise<Result>;
    /** SPLIT: a compression split, a compare-and-swap on (parentId, runGeneration). */
    split(key: string, parentId: string, childId: string, runGeneration: RunGeneration,
          options?: SplitOptions): Promise<Result>;
    /** INVALIDATE: /stop.  Generation + 1, binding unchanged. */
    invalidate(key: string, options?: ReasonOptions): Promise<Result>;
    /** UNBIND: idle expiry.  Leaves a tombstone, generation + 1. */
    unbind(key: string, options?: ReasonOptions): Promise<Result>;
    /** Apply events in order in one transaction; on an error none is written
     * and the BindlogError's `index` names the failing event. */
    applyBatch(events: readonly BatchEvent[]): Promise<Result[]>;

    /**
     * Move a gateway's routing table in (C: bindlog_import_entries): BIND each
     * entry's key to its session only if the key is unbound, in order of
     * timeMs, each logged with its own time (reason 'import'); entries share
     * commits, and each is applied or refused alone.  Resolves one item per
     * entry: a Result ('applied', 'already', or 'moved' when the key routes
     * elsewhere), or a BindlogError for a refused entry (BINDLOG_ECONFLICT:
     * the session is another key's; BINDLOG_EINVAL), with `index` set.
     * Rejects only when the call itself fails (BINDLOG_EREADONLY, I/O).
     */
    importEntries(entries: readonly ImportEntry[]): Promise<Array<Result | BindlogError>>;

    /**
     * Route one inbound message (C: bindlog_route): in one write, read the
     * key's last activity, decide by the policy, record this message's
     * activity.  'routed': the same session; 'created': the key was unbound;
     * 'reset': stale by the policy, a new session bound (a newSession record
     * with reason 'idle' or 'daily', seen by follow()).  The message goes to
     * `sessionId` whatever the outcome.  Concurrent routes of one key at a
     * boundary give exactly one 'reset'.
     */
    route(key: string, options?: RouteOptions): Promise<RouteResult>;
    /** Unbind idle keys (reason 'expired'); resolves the count (dryRun: would be). */
    expire(options: ExpireOptions): Promise<number>;

    /*
     * The same writes made on the calling thread: each returns what its
     * promise twin resolves (or throws the BindlogError it rejects with) once
     * the write is as durable as the store's durability says, and blocks the
     * event loop meanwhile (in FULL, for one flush), as better-sqlite3 does.
     * They skip the two thread hand-offs of an awaited write, so a program
     * making one write at a time gets its results sooner; writes from many
     * requests at once are faster as promises, which share group commits.
     * Sync and promise writes may be mixed on one store.
     */
    /** BIND, on this thread (see bind). */
    bindSync(key: string, sessionId: string, options?: BindOptions): Result;
    /** NEW_SESSION, on this thread (see newSession). */
    newSessionSync(key: string, sessionId: string, options?: NewSessionOptions): Result;
    /** SPLIT, on this thread (see split). */
    splitSync(key: string, parentId: string, childId: string, runGeneration: RunGeneration,
              options?: SplitOptions): Result;
    /** INVALIDATE, on this thread (see invalidate). */
    invalidateSync(key: string, options?: ReasonOptions): Result;
    /** UNBIND, on this thread (see unbind). */
    unbindSync(key: string, options?: ReasonOptions): Result;
    /** applyBatch on this thread: all or none; throws with `index` set. */
    applyBatchSync(events: readonly BatchEvent[]): Result[];
    /** importEntries on this thread: one Result or BindlogError per entry. */
    importEntriesSync(entries: readonly ImportEntry[]): Array<Result | BindlogError>;
    /** route on this thread (see route). */
    routeSync(key: string, options?: RouteOptions): RouteResult;
    /** expire on this thread (see expire). */
    expireSync(options: ExpireOptions): number;

    /** The key's binding, or null if it routes nowhere (never bound, or unbound). */
    get(key: string): Binding | null;
    /** The session, or null if unknown. */
    session(id: string): Session | null;
    /** Every retained record that touched `key`, oldest first (one snapshot). */
    history(key: string): IterableIterator<LogRecord>;
    /** Log records from..to, oldest first (one snapshot). */
    log(options?: LogOptions): IterableIterator<LogRecord>;
    /** The change feed: every record from `from` on, waiting for new ones;
     * ends when the store closes or the loop is left. */
    follow(options?: FollowOptions): AsyncIterableIterator<LogRecord>;
    /** Reads that agree with each other, as of the head LSN now. */
    snapshot(): Snapshot;
    stats(): Stats;
    /** The state digest, 32 hex digits (equal digests: equal states). */
    digest(): string;
    /** Close: writes already made finish first (their promises still settle),
     * followers end, iterators close.  Idempotent. */
    close(): void;
}
