'use strict';
// The stated requirement of the Node binding (issue 13): writes never block
// the event loop.  A 1 ms timer runs while 16 async writers write in FULL
// durability (each write waits for a flush, in a writer thread); the lag of
// the timer (how late each tick fires) must stay under 5 ms at p99.
//
// Margin: the machine this runs on is shared and often oversubscribed, and
// a main thread that is runnable but not scheduled shows up as lag no
// binding can prevent.  So a measurement is tried up to ATTEMPTS times and
// the test passes when one of them meets the limit; every attempt's figures
// are printed.  A binding that did block the loop would miss it every time:
// each write in FULL waits for a flush of milliseconds (better-sqlite3's
// rows in docs/node.md: 19-202 ms at p99).  Under a sanitizer
// (BINDLOG_SANITIZE, set by the CMake build) everything runs several times
// slower and the figure means nothing: it is printed only.
const test = require('node:test');
const assert = require('node:assert/strict');
const { performance } = require('node:perf_hooks');
const { openStore, percentile } = require('./helpers');

const WRITERS = 16;
const DURATION_MS = 1500;
const LAG_P99_LIMIT_MS = 5;
const ATTEMPTS = 3;

async function measure(store, attempt) {
    const lags = [];
    let running = true;
    let writes = 0;

    function tick(due) {
        lags.push(performance.now() - due);
        if (running) {
            const next = performance.now() + 1;
            setTimeout(() => tick(next), 1);
        }
    }
    setTimeout(() => tick(performance.now() + 1), 1);

    async function writer(w) {
        let i = 0;
        while (running) {
            const key = `agent:main:a${attempt}:w${w}:${i}`;
            await store.bind(key, `a${attempt}-w${w}-s${i}`);
            const g = store.get(key).generation; // a synchronous read between writes, as a gateway does
            await store.split(key, `a${attempt}-w${w}-s${i}`, `a${attempt}-w${w}-c${i}`, g);
            writes += 2;
            i++;
        }
    }
    const t0 = performance.now();
    const before = store.stats();
    const writers = Array.from({ length: WRITERS }, (_, w) => writer(w));
    await new Promise((r) => setTimeout(r, DURATION_MS));
    running = false;
    await Promise.all(writers);
    const secs = (performance.now() - t0) / 1000;
    const after = store.stats();

    lags.sort((a, b) => a - b);
    const m = {
        p50: percentile(lags, 50), p99: percentile(lags, 99), max: lags[lags.length - 1],
        ticks: lags.length, rate: writes / secs,
        perCommit: (after.groupedEvents - before.groupedEvents) / (after.commits - before.commits),
    };
    console.log(`# attempt ${attempt}: loop lag with ${WRITERS} writers in FULL: p50 ${m.p50.toFixed(2)} ms, ` +
        `p99 ${m.p99.toFixed(2)} ms, max ${m.max.toFixed(2)} ms over ${m.ticks} ticks; ` +
        `${Math.round(m.rate)} writes/s, ${m.perCommit.toFixed(1)} events per commit`);
    return m;
}

test('16 async writers in FULL: the event loop\'s lag stays under 5 ms at p99', async (t) => {
    const { store } = openStore(t, { durability: 'full' });
    const sanitized = process.env.BINDLOG_SANITIZE;
    const tries = [];
    for (let attempt = 1; attempt <= (sanitized ? 1 : ATTEMPTS); attempt++) {
        const m = await measure(store, attempt);
        assert.ok(m.rate > 0);
        tries.push(m);
        if (m.p99 < LAG_P99_LIMIT_MS && m.ticks > 200)
            break;
    }
    if (sanitized) {
        t.skip(`timing not checked under the sanitizer ${sanitized}`);
        return;
    }
    const best = tries.reduce((a, b) => (b.p99 < a.p99 ? b : a));
    assert.ok(best.ticks > 200, `only ${best.ticks} ticks`);
    assert.ok(best.p99 < LAG_P99_LIMIT_MS,
        `loop lag p99 ${tries.map((m) => m.p99.toFixed(2)).join(', ')} ms in ${tries.length} attempts: ` +
        `none under ${LAG_P99_LIMIT_MS} ms`);
});
