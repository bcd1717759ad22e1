'use strict';
// Inbound routing with reset policies (SPEC section 2b), the JavaScript side
// of store.route(): the policy options, the daily boundary computed with Intl
// (correct across DST changes), and the gateways' own reset settings mapped
// onto a policy.  Nothing here touches the store; index.js passes the
// checked values to the addon (src/writer.c), which calls bindlog_route().

const { randomUUID } = require('node:crypto');

/** Policy modes by name, as BINDLOG_RESET_* (a RESET's reason is 'idle' or 'daily'). */
const RESET_MODES = { none: 0, idle: 1, daily: 2, both: 3, dailyAndIdle: 4 };
const MODE_ALIASES = { daily_and_idle: 'dailyAndIdle' };
const REASON_NAMES = ['none', 'idle', 'daily', 'both', 'dailyAndIdle'];
const MS_PER_DAY = 86400000;
const INT64_SAFE_MAX = Number.MAX_SAFE_INTEGER;

function describe(v) {
    if (v === null)
        return 'null';
    if (Array.isArray(v))
        return 'an array';
    return typeof v === 'object' ? 'an object' : `a ${typeof v}`;
}

// A time in ms since the epoch: a non-negative safe integer or a Date.
function timeMs(v, what, call) {
    if (v instanceof Date)
        v = v.getTime();
    if (typeof v !== 'number')
        throw new TypeError(`${call}: ${what} must be milliseconds since the epoch or a Date, not ${describe(v)}`);
    if (!Number.isSafeInteger(v) || v < 0)
        throw new RangeError(`${call}: ${what} must be a whole, non-negative number of milliseconds`);
    return v;
}

function hourArg(hour, call, what = 'atHour') {
    if (typeof hour !== 'number')
        throw new TypeError(`${call}: ${what} must be an hour from 0 to 23, not ${describe(hour)}`);
    if (!Number.isInteger(hour) || hour < 0 || hour > 23)
        throw new RangeError(`${call}: ${what} ${hour} is not an hour from 0 to 23`);
    return hour;
}

const formatters = new Map();

// The Intl formatter of a zone (cached: making one costs far more than using it).
function formatter(timeZone, call) {
    let f = formatters.get(timeZone);
    if (f === undefined) {
        try {
            f = new Intl.DateTimeFormat('en-US', {
                timeZone, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric',
                hour: 'numeric', minute: 'numeric', second: 'numeric',
            });
        } catch (err) {
            throw new RangeError(`${call}: timeZone '${timeZone}' is not a known time zone (${err.message})`);
        }
        formatters.set(timeZone, f);
    }
    return f;
}

// The wall clock of instant t in the zone, as the ms of that wall time read as UTC.
function wallMs(f, t) {
    const p = {};
    for (const { type, value } of f.formatToParts(new Date(t)))
        p[type] = Number(value);
    return Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second);
}

// The zone's UTC offset at instant t, in ms (whole seconds).
function offsetAt(f, t) {
    const s = Math.floor(t / 1000) * 1000;
    return wallMs(f, s) - s;
}

// The first instant of the wall day (y, m, d) whose wall clock reads hour:00
// or later.  A wall time the zone skips (spring forward) is the end of the
// gap; one it repeats (fall back) is its first occurrence -- as Python's
// zoneinfo with fold=0, so both bindings agree.
function atHour(f, y, m, d, hour) {
    const wall = Date.UTC(y, m, d, hour);
    const before = offsetAt(f, wall - MS_PER_DAY);
    const after = offsetAt(f, wall + MS_PER_DAY);
    const fits = [before, after].map((o) => wall - o).filter((t) => wallMs(f, t) === wall);
    if (fits.length > 0)
        return Math.min(...fits);
    return wall - before; // in the gap: the offset before it, as fold=0 does
}

/**
 * The latest daily reset boundary at or before `now`: the instant the wall
 * clock in `timeZone` last read `hour`:00, in ms since the epoch (the
 * dailyBoundaryMs of a 'daily' policy).  `timeZone` is an IANA name
 * ('Europe/Berlin'); undefined is the host's zone (both gateways default to
 * it).  On a DST day the boundary is the first instant whose wall time is
 * hour:00 or later: 02:00 on Berlin's spring-forward day is 03:00 CEST.
 */
function dailyBoundaryMs(hour, timeZone, now) {
    const call = 'dailyBoundaryMs';
    hourArg(hour, call, 'hour');
    if (timeZone !== undefined && timeZone !== null && typeof timeZone !== 'string')
        throw new TypeError(`${call}: timeZone must be a time zone name, not ${describe(timeZone)}`);
    const zone = timeZone === undefined || timeZone === null
        ? Intl.DateTimeFormat().resolvedOptions().timeZone : timeZone;
    const t = now === undefined || now === null ? Date.now() : timeMs(now, 'now', call);
    const f = formatter(zone, call);
    const w = new Date(wallMs(f, t));
    const y = w.getUTCFullYear();
    const m = w.getUTCMonth();
    const d = w.getUTCDate();
    const b = atHour(f, y, m, d, hour);
    return b <= t ? b : atHour(f, y, m, d - 1, hour); // Date.UTC takes day 0 as the month's last
}

const POLICY_OPTIONS = ['mode', 'idleMs', 'atHour', 'timeZone', 'dailyBoundaryMs'];

/**
 * route()'s options as the addon's arguments:
 * [nowMs, mode, idleMs, dailyBoundaryMs, freshSessionId].  nowMs 0 lets
 * the library's clock decide, unless the boundary is computed here from
 * atHour (then both use one `now`).
 */
function routeArgs(o, call) {
    let name = o.mode === undefined || o.mode === null ? 'none' : o.mode;
    if (typeof name !== 'string')
        throw new TypeError(`${call}: mode must be a string, not ${describe(name)}`);
    name = MODE_ALIASES[name] || name;
    if (!Object.hasOwn(RESET_MODES, name))
        throw new RangeError(`${call}: mode '${o.mode}' is not one of ${Object.keys(RESET_MODES).join(', ')}`);
    const mode = RESET_MODES[name];
    const usesIdle = mode === 1 || mode === 3 || mode === 4;
    const usesDaily = mode >= 2;
    let idle = 0;
    if (o.idleMs !== undefined && o.idleMs !== null) {
        if (typeof o.idleMs !== 'number')
            throw new TypeError(`${call}: idleMs must be a number of milliseconds, not ${describe(o.idleMs)}`);
        if (!Number.isSafeInteger(o.idleMs) || o.idleMs <= 0)
            throw new RangeError(`${call}: idleMs must be a whole, positive number of milliseconds`);
        idle = o.idleMs;
    } else if (usesIdle) {
        throw new RangeError(`${call}: mode '${name}' needs idleMs`);
    }
    const hasHour = o.atHour !== undefined && o.atHour !== null;
    const hasBoundary = o.dailyBoundaryMs !== undefined && o.dailyBoundaryMs !== null;
    if (hasHour && hasBoundary)
        throw new TypeError(`${call}: give atHour or dailyBoundaryMs, not both`);
    if (usesDaily && !hasHour && !hasBoundary)
        throw new RangeError(`${call}: mode '${name}' needs atHour (with timeZone) or dailyBoundaryMs`);
    if (o.timeZone !== undefined && o.timeZone !== null && !hasHour)
        throw new TypeError(`${call}: timeZone is the zone of atHour, which is not given`);
    let now = o.now === undefined || o.now === null ? 0 : timeMs(o.now, 'now', call);
    let boundary = 0;
    if (hasHour) {
        hourArg(o.atHour, call);
        if (usesDaily) {
            if (now === 0)
                now = Date.now();
            boundary = dailyBoundaryMs(o.atHour, o.timeZone, now);
        } else if (o.timeZone !== undefined && o.timeZone !== null) {
            formatter(o.timeZone, call);
        }
    } else if (hasBoundary) {
        boundary = timeMs(o.dailyBoundaryMs, 'dailyBoundaryMs', call);
    }
    let fresh = o.freshSessionId;
    if (fresh === undefined || fresh === null)
        fresh = randomUUID();
    else if (typeof fresh !== 'string')
        throw new TypeError(`${call}: freshSessionId must be a string, not ${describe(fresh)}`);
    return [now, mode, usesIdle ? idle : 0, usesDaily ? boundary : 0, fresh];
}

/** expire()'s options as the addon's arguments: [cutoffMs, prefix, dryRun]. */
function expireArgs(o, call) {
    const hasIdle = o.idleMs !== undefined && o.idleMs !== null;
    const hasBefore = o.before !== undefined && o.before !== null;
    if (hasIdle === hasBefore)
        throw new TypeError(`${call}: give idleMs (a duration) or before (a time), one of them`);
    let cutoff;
    if (hasBefore) {
        if (o.now !== undefined)
            throw new TypeError(`${call}: now goes with idleMs, not before`);
        cutoff = timeMs(o.before, 'before', call);
    } else {
        if (typeof o.idleMs !== 'number')
            throw new TypeError(`${call}: idleMs must be a number of milliseconds, not ${describe(o.idleMs)}`);
        if (!Number.isSafeInteger(o.idleMs) || o.idleMs <= 0)
            throw new RangeError(`${call}: idleMs must be a whole, positive number of milliseconds`);
        const now = o.now === undefined || o.now === null ? Date.now() : timeMs(o.now, 'now', call);
        cutoff = Math.max(0, now - o.idleMs);
    }
    if (o.prefix !== undefined && o.prefix !== null && typeof o.prefix !== 'string')
        throw new TypeError(`${call}: prefix must be a string, not ${describe(o.prefix)}`);
    if (o.dryRun !== undefined && typeof o.dryRun !== 'boolean')
        throw new TypeError(`${call}: dryRun must be a boolean, not ${describe(o.dryRun)}`);
    return [cutoff, o.prefix === null ? undefined : o.prefix, o.dryRun === true];
}

function minutes(v, what, call) {
    if (typeof v !== 'number')
        throw new TypeError(`${call}: ${what} must be a number of minutes, not ${describe(v)}`);
    if (!(v > 0) || !Number.isFinite(v))
        throw new RangeError(`${call}: ${what} ${v} is not a positive number of minutes`);
    return Math.round(v * 60000);
}

/**
 * OpenClaw's reset settings as route() options.  `reset` is the block that
 * applies to the message: resetByChannel[channel], else resetByType[type]
 * ('dm' or 'direct', 'group', 'thread'), else session.reset -- pick it before the
 * call.  { mode: 'daily' | 'idle', atHour, idleMinutes }: 'daily' with
 * idleMinutes is 'both' (whichever expires first); no block at all is
 * OpenClaw's default, daily at 04:00 on the host's clock.
 */
function policyFromOpenClaw(reset, { timeZone } = {}) {
    const call = 'policyFromOpenClaw';
    const r = reset === undefined || reset === null ? {} : reset;
    if (typeof r !== 'object' || Array.isArray(r))
        throw new TypeError(`${call}: reset must be an object (session.reset), not ${describe(r)}`);
    const mode = r.mode === undefined ? 'daily' : r.mode;
    const idleMs = r.idleMinutes === undefined || r.idleMinutes === null ? undefined
        : minutes(r.idleMinutes, 'idleMinutes', call);
    if (mode === 'idle') {
        if (idleMs === undefined)
            throw new RangeError(`${call}: reset mode 'idle' needs idleMinutes`);
        return { mode: 'idle', idleMs };
    }
    if (mode !== 'daily')
        throw new RangeError(`${call}: reset mode '${mode}' is not 'daily' or 'idle'`);
    const atHour = hourArg(r.atHour === undefined ? 4 : r.atHour, call);
    const out = { mode: idleMs === undefined ? 'daily' : 'both', atHour };
    if (idleMs !== undefined)
        out.idleMs = idleMs;
    if (timeZone !== undefined)
        out.timeZone = timeZone;
    return out;
}

/**
 * hermes-agent's session_reset block as route() options:
 * { mode: 'both' | 'idle' | 'daily' | 'none', at_hour, idle_minutes },
 * with hermes' defaults (both, 4, 1440).
 */
function policyFromHermes(sessionReset, { timeZone } = {}) {
    const call = 'policyFromHermes';
    const r = sessionReset === undefined || sessionReset === null ? {} : sessionReset;
    if (typeof r !== 'object' || Array.isArray(r))
        throw new TypeError(`${call}: session_reset must be an object, not ${describe(r)}`);
    const mode = r.mode === undefined ? 'both' : r.mode;
    if (!['both', 'idle', 'daily', 'none'].includes(mode))
        throw new RangeError(`${call}: session_reset mode '${mode}' is not both, idle, daily or none`);
    const out = { mode };
    if (mode === 'idle' || mode === 'both')
        out.idleMs = minutes(r.idle_minutes === undefined ? 1440 : r.idle_minutes, 'idle_minutes', call);
    if (mode === 'daily' || mode === 'both') {
        out.atHour = hourArg(r.at_hour === undefined ? 4 : r.at_hour, call, 'at_hour');
        if (timeZone !== undefined)
            out.timeZone = timeZone;
    }
    return out;
}

// A reset reason as JavaScript sees it.
function reasonName(n) {
    return n === 1 || n === 2 ? REASON_NAMES[n] : null;
}

module.exports = {
    RESET_MODES,
    POLICY_OPTIONS,
    INT64_SAFE_MAX,
    dailyBoundaryMs,
    routeArgs,
    expireArgs,
    policyFromOpenClaw,
    policyFromHermes,
    reasonName,
};
