'use strict';
// The stated requirement of the Node binding (issue 13): writes never block
// the event loop.  A 1 ms timer runs while 16 async writers write in FULL
// durability (each write waits for a flush, in a writer thread); the lag of
// the timer (how late each tick fires) must stay under 5 ms at p99.  The
// figures are printed, so a run shows the margin, not just a pass.  Under a
// sanitizer (BINDLOG_SANITIZE, set by the CMake build) everything runs
// several times slower and the figure means nothing: it is printed only.
const test = require('node:test');
const assert = require('node:assert/strict');
const { performance } = require('node:perf_hooks');
const { openStore, percentile } = require('./helpers');

const WRITERS = 16;
const DURATION_MS = 1500;
const LAG_P99_LIMIT_MS = 5;

test('16 async writers in FULL: the event loop\'s lag stays under 5 ms at p99', async (t) => {
    const { store } = openStore(t, { durability: 'full' });
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
            const key = `agent:main:w${w}:${i}`;
            await store.bind(key, `w${w}-s${i}`);
            const g = store.get(key).generation; // a synchronous read between writes, as a gateway does
            await store.split(key, `w${w}-s${i}`, `w${w}-c${i}`, g);
            writes += 2;
            i++;
        }
    }
    const t0 = performance.now();
    const writers = Array.from({ length: WRITERS }, (_, w) => writer(w));
    await new Promise((r) => setTimeout(r, DURATION_MS));
    running = false;
    await Promise.all(writers);
    const secs = (performance.now() - t0) / 1000;

    lags.sort((a, b) => a - b);
    const p50 = percentile(lags, 50);
    const p99 = percentile(lags, 99);
    const max = lags[lags.length - 1];
    const s = store.stats();
    console.log(`# loop lag with ${WRITERS} writers in FULL: p50 ${p50.toFixed(2)} ms, ` +
        `p99 ${p99.toFixed(2)} ms, max ${max.toFixed(2)} ms over ${lags.length} ticks; ` +
        `${Math.round(writes / secs)} writes/s, ${(s.groupedEvents / s.commits).toFixed(1)} events per commit`);
    assert.ok(writes > 0);
    if (process.env.BINDLOG_SANITIZE) {
        t.skip(`timing not checked under the sanitizer ${process.env.BINDLOG_SANITIZE}`);
        return;
    }
    assert.ok(lags.length > 200, `only ${lags.length} ticks`);
    assert.ok(p99 < LAG_P99_LIMIT_MS, `loop lag p99 ${p99.toFixed(2)} ms >= ${LAG_P99_LIMIT_MS} ms`);
});
