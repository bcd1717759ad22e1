#!/usr/bin/env python3
"""AsyncStore against threads on a Store: throughput and the event loop's lag.

    python3 bindings/python/bench/asyncio_bench.py [--tasks 16] [--events 400]
        [--durability full] [--rounds 5] [--writers 16,4,1] [--no-blocking] [--dir DIR]

Every round runs, on a fresh store each:
  threads   TASKS threads sharing one Store, each writing EVENTS events;
  asyncio   TASKS tasks on one AsyncStore (writer pool of W threads, for each
            W of --writers) writing the same events, while a probe task
            sleeps 1 ms in a loop and records how late it wakes (the loop's
            lag);
  blocking  (context) the same tasks calling the Store's methods straight
            from the loop, as a gateway without AsyncStore would: fewer
            events, since they serialise.
Each task (or thread) writes on its own key: a BIND, then a chain of
SPLITs (every event applied, one record each), as a gateway's compressions.

With --trace, each line also gives the median time a write spends in the
library and the time between a writer's return from one write and its next
(for a task: the trip through the loop and the writer pool).

Prints one line per run and a summary: the median over the rounds of
events/s, the asyncio/threads ratio (target >= 0.9 at W=16), and the lag's
p50/p99/max (target p99 < 2 ms), with the load average, since the figures
move with what else the machine runs.  The package is the installed one when
there is one (with its own library), else the source tree's with the
library BINDLOG_LIBRARY names.  About 30 s on an idle 2-core machine.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import bindlog  # the installed package, with its own library
except ImportError:  # the source tree's (then BINDLOG_LIBRARY names the library)
    sys.path.insert(0, os.path.dirname(HERE))
    import bindlog


#: --trace: per key, (entered, left) the library for each write
TRACE: Dict[bytes, List[Tuple[float, float]]] = {}


def trace_calls() -> None:
    """Wrap the Store's C call (a private method: this is a bench) to see
    where a write's time goes: in the library, and between a write's return
    and the same writer's next one (for a task, the trip through the loop)."""
    from bindlog.store import Store
    inner = Store._event

    def traced(self: Store, name: str, fn: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(self, name, fn, *args)
        finally:
            TRACE.setdefault(args[0], []).append((t0, time.perf_counter()))

    setattr(Store, "_event", traced)
    # AsyncStore hands the writes of one loop turn to the library as one
    # batch: each of them spends the batch's time there
    inner_batch = Store._calls_as_batch

    def traced_batch(self: Store, calls: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner_batch(self, calls)
        finally:
            t1 = time.perf_counter()
            for call in calls:
                TRACE.setdefault(call[2], []).append((t0, t1))

    setattr(Store, "_calls_as_batch", traced_batch)


def trace_summary() -> str:
    inside = [b - a for v in TRACE.values() for a, b in v]
    gaps = [v[i + 1][0] - v[i][1] for v in TRACE.values() for i in range(len(v) - 1)]
    TRACE.clear()
    if not gaps:
        return ""
    return (f"  in the library p50 {pct(inside, 50) * 1e3:.3f} ms, between a writer's writes "
            f"p50 {pct(gaps, 50) * 1e3:.3f} p90 {pct(gaps, 90) * 1e3:.3f} ms")


def pct(xs: Sequence[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def events_of(t: int, n: int) -> List[Tuple[str, ...]]:
    """Task t's events: bind, then n - 1 splits along a chain."""
    key = f"agent:main:bench:{t}"
    out: List[Tuple[str, ...]] = [("bind", key, f"t{t}-s0")]
    for i in range(1, n):
        out.append(("split", key, f"t{t}-s{i - 1}", f"t{t}-s{i}"))
    return out


def run_threads(path: str, tasks: int, n: int, durability: str) -> Tuple[float, float]:
    with bindlog.Store(path, durability=durability) as s:
        start = threading.Barrier(tasks + 1)

        def worker(t: int) -> None:
            evs = events_of(t, n)
            start.wait()
            for ev in evs:
                if ev[0] == "bind":
                    s.bind(ev[1], ev[2])
                else:
                    s.split(ev[1], ev[2], ev[3])

        ths = [threading.Thread(target=worker, args=(t,)) for t in range(tasks)]
        for th in ths:
            th.start()
        start.wait()
        t0 = time.perf_counter()
        for th in ths:
            th.join()
        dt = time.perf_counter() - t0
        st = s.stats()
        assert st.head_lsn == tasks * n
    return tasks * n / dt, st.grouped_events / max(st.commits, 1)


async def probe(stop: asyncio.Event, lags: List[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append((time.perf_counter() - t0 - 0.001) * 1000.0)


async def run_asyncio(path: str, tasks: int, n: int, durability: str, writers: int,
                      blocking: bool = False) -> Tuple[float, List[float], float]:
    lags: List[float] = []
    stop = asyncio.Event()
    async with bindlog.AsyncStore(path, durability=durability, writers=writers) as s:
        sync = s.store

        async def worker(t: int) -> None:
            for ev in events_of(t, n):
                if blocking:  # the Store's own call, on the loop
                    if ev[0] == "bind":
                        sync.bind(ev[1], ev[2])
                    else:
                        sync.split(ev[1], ev[2], ev[3])
                    await asyncio.sleep(0)  # let the other tasks in
                elif ev[0] == "bind":
                    await s.bind(ev[1], ev[2])
                else:
                    await s.split(ev[1], ev[2], ev[3])

        p = asyncio.ensure_future(probe(stop, lags))
        await asyncio.sleep(0.05)  # the probe's first samples on a quiet loop
        lags.clear()
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(t) for t in range(tasks)))
        dt = time.perf_counter() - t0
        stop.set()
        await p
        st = s.stats()
        assert st.head_lsn == tasks * n
    return tasks * n / dt, lags, st.grouped_events / max(st.commits, 1)


async def idle_lag(seconds: float) -> List[float]:
    lags: List[float] = []
    stop = asyncio.Event()
    p = asyncio.ensure_future(probe(stop, lags))
    await asyncio.sleep(seconds)
    stop.set()
    await p
    return lags


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--events", type=int, default=400, help="events per task (default 400)")
    ap.add_argument("--durability", default="full", choices=("full", "normal", "none"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--writers", default="16,4,1", help="AsyncStore pool sizes to run (default 16,4,1)")
    ap.add_argument("--no-blocking", action="store_true", help="skip the blocking (no AsyncStore) runs")
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temporary directory)")
    ap.add_argument("--trace", action="store_true",
                    help="also time each write in the library and between a writer's writes")
    a = ap.parse_args(argv)
    if a.trace:
        trace_calls()
    writers = [int(w) for w in a.writers.split(",") if w]
    root = tempfile.mkdtemp(prefix="bindlog-aio-bench-", dir=a.dir)
    load0 = os.getloadavg()
    print(f"bindlog {bindlog.library_version()} ({bindlog.load_library()}), python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in load0)}")
    print(f"{a.tasks} writers x {a.events} events, durability {a.durability}, {a.rounds} rounds")
    idle = asyncio.run(idle_lag(0.5))
    print(f"idle loop: lag p50 {pct(idle, 50):.3f} ms  p99 {pct(idle, 99):.3f} ms  max {max(idle):.3f} ms")
    # name -> [(events/s, lags, events per commit)]
    runs: Dict[str, List[Tuple[float, List[float], float]]] = {}
    k = 0

    def one(name: str, r: int) -> None:
        nonlocal k
        k += 1
        path = os.path.join(root, f"s{k}")
        if name == "threads":
            rate, epc = run_threads(path, a.tasks, a.events, a.durability)
            lags: List[float] = []
        elif name == "blocking":
            n = max(2, a.events // 8)  # they serialise: fewer events keep the run short
            rate, lags, epc = asyncio.run(run_asyncio(path, a.tasks, n, a.durability, 1, blocking=True))
        else:
            w = int(name.split("=")[1])
            n = a.events if w >= 4 else max(2, a.events // 8)
            rate, lags, epc = asyncio.run(run_asyncio(path, a.tasks, n, a.durability, w))
        runs.setdefault(name, []).append((rate, lags, epc))
        lag = (f"  lag p50 {pct(lags, 50):.3f} p99 {pct(lags, 99):.3f} max {max(lags):.3f} ms"
               if lags else "")
        print(f"round {r + 1}: {name:<20s} {rate:8.0f} events/s  {epc:5.1f} events/commit{lag}"
              + (trace_summary() if a.trace else ""))
        shutil.rmtree(path, ignore_errors=True)

    order = ["threads"] + [f"writers={w}" for w in writers]
    try:
        for r in range(a.rounds):
            # alternate the order, so that a drift in the machine's load
            # does not always favour the same side
            for name in (order if r % 2 == 0 else order[::-1]):
                one(name, r)
            if not a.no_blocking:
                one("blocking", r)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(x[0] for x in runs["threads"])
    print(f"summary (medians of {a.rounds} rounds; load average before "
          f"{' '.join(f'{x:.2f}' for x in load0)}, after {' '.join(f'{x:.2f}' for x in os.getloadavg())}):")
    for name, rs in runs.items():
        rate = statistics.median(x[0] for x in rs)
        epc = statistics.median(x[2] for x in rs)
        line = f"  {name:<20s} {rate:8.0f} events/s = {rate / base:.2f}x threads, {epc:5.1f} events/commit"
        if rs[0][1]:
            p50 = statistics.median(pct(x[1], 50) for x in rs)
            p99 = statistics.median(pct(x[1], 99) for x in rs)
            worst = max(max(x[1]) for x in rs)
            line += f"; loop lag p50 {p50:.3f} ms, p99 {p99:.3f} ms, max {worst:.3f} ms"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
