"""Threads sharing one Store, and processes writing one store."""
from __future__ import annotations

import multiprocessing
import threading
import time
import unittest
from collections import Counter

from support import PKG_ROOT, StoreTestCase

import bindlog
from bindlog import Outcome

THREADS = 16
ROUNDS = 12
KEYS = 4


class Threads(StoreTestCase):
    def test_concurrent_splits_exactly_one_applied_per_parent_and_generation(self) -> None:
        s = self.store
        for k in range(KEYS):
            s.bind(f"k{k}", f"k{k}-r0")
        barrier = threading.Barrier(THREADS)
        results = []  # (key, round, thread, Result)
        errors = []
        lock = threading.Lock()

        def runner(t: int) -> None:
            try:
                for rnd in range(ROUNDS):
                    barrier.wait(timeout=30)
                    for k in range(KEYS):
                        key = f"k{k}"
                        # every thread starts its "turn" on the same parent
                        parent = f"{key}-r{rnd}"
                        gen = s.generation(key)
                        child = f"{key}-r{rnd}-t{t}"
                        r = s.split(key, parent, child, gen, origin={"t": t, "r": rnd})
                        with lock:
                            results.append((key, rnd, t, r))
                    barrier.wait(timeout=30)
                    if t == 0:  # the winner's child becomes next round's parent
                        for k in range(KEYS):
                            key = f"k{k}"
                            cur = s.get(key).session_id
                            s.bind(key, f"{key}-r{rnd + 1}", expect=cur, origin={"round": rnd + 1})
                    barrier.wait(timeout=30)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=runner, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        self.assertEqual(errors, [])
        self.assertEqual(len(results), THREADS * ROUNDS * KEYS)
        per = Counter()
        for key, rnd, t, r in results:
            per[(key, rnd, r.outcome)] += 1
            self.assertIn(r.outcome, (Outcome.APPLIED, Outcome.MOVED))
            if r.outcome is Outcome.MOVED:
                self.assertEqual(r.lsn, 0)
        for k in range(KEYS):
            for rnd in range(ROUNDS):
                key = f"k{k}"
                self.assertEqual(per[(key, rnd, Outcome.APPLIED)], 1, (key, rnd))
                self.assertEqual(per[(key, rnd, Outcome.MOVED)], THREADS - 1, (key, rnd))
        # the losers left no trace: only the winners' children exist
        winners = {(key, rnd): r.session_id for key, rnd, t, r in results
                   if r.outcome is Outcome.APPLIED}
        children = {x.session_id for x in s.sessions() if "-t" in x.session_id}
        self.assertEqual(children, set(winners.values()))
        st = s.stats()
        # KEYS binds + per round KEYS splits + KEYS rebinds
        self.assertEqual(st.head_lsn, KEYS + ROUNDS * KEYS * 2)
        self.assertEqual(st.events["split"]["applied"], ROUNDS * KEYS)
        self.assertEqual(st.events["split"]["moved"], ROUNDS * KEYS * (THREADS - 1))
        lsns = sorted(r.lsn for *_, r in results if r.lsn)
        self.assertEqual(len(lsns), len(set(lsns)))

    def test_readers_and_writers_share_a_store_while_it_closes(self) -> None:
        s = self.store
        s.bind("k", "s0")
        stop = threading.Event()
        seen = Counter()
        seen_lock = threading.Lock()

        def count(what: str) -> None:
            with seen_lock:
                seen[what] += 1

        def reader() -> None:
            while not stop.is_set():
                try:
                    b = s.get("k")
                    list(s.history("k"))
                    if b is not None:
                        count("read")
                except bindlog.StoreClosed:
                    count("closed")
                    return

        def writer(t: int) -> None:
            while not stop.is_set():
                try:
                    s.invalidate("k", reason=f"w{t}")
                except bindlog.StoreClosed:
                    count("closed")
                    return

        ths = [threading.Thread(target=reader) for _ in range(4)]
        ths += [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for th in ths:
            th.start()
        time.sleep(0.3)
        s.close()  # waits for calls in flight, then closes the handle
        stop.set()
        for th in ths:
            th.join(30)
        self.assertGreater(seen["read"], 0)
        self.assertEqual(seen["closed"], len(ths))
        with bindlog.Store(self.path) as again:
            st = again.stats()
            self.assertEqual(st.head_lsn, again.generation("k"))
            self.assertEqual(len(list(again.log())), st.head_lsn)


# ---- processes -----------------------------------------------------------------

def _process_worker(path: str, name: str, n: int, start: "multiprocessing.synchronize.Event",
                    out: "multiprocessing.Queue") -> None:
    import sys
    if PKG_ROOT not in sys.path:
        sys.path.insert(0, PKG_ROOT)
    import bindlog as bl
    outcomes = Counter()
    start.wait(30)
    with bl.Store(path, durability="normal") as st:
        for i in range(n):
            # own keys: every event applies
            st.bind(f"{name}:k{i % 10}", f"{name}-s{i}")
            # a shared key both processes race to split
            b = st.get("shared")
            r = st.split("shared", b.session_id, f"{name}-split{i}", b.generation)
            outcomes[r.outcome.name] += 1
    out.put((name, dict(outcomes)))


class Processes(StoreTestCase):
    def test_two_processes_write_one_store(self) -> None:
        self.store.bind("shared", "root")
        head0 = self.head()
        ctx = multiprocessing.get_context("spawn")
        start = ctx.Event()
        q = ctx.Queue()
        n = 150
        procs = [ctx.Process(target=_process_worker, args=(self.path, name, n, start, q))
                 for name in ("p1", "p2")]
        for p in procs:
            p.start()
        start.set()
        results = dict(q.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(60)
            self.assertEqual(p.exitcode, 0)
        splits_applied = sum(r.get("APPLIED", 0) for r in results.values())
        for r in results.values():
            self.assertEqual(sum(r.values()), n)
            self.assertLessEqual(set(r), {"APPLIED", "MOVED"})
        st = self.store.stats()
        # every bind applied (distinct sessions), every APPLIED split logged once
        self.assertEqual(st.head_lsn, head0 + 2 * n + splits_applied)
        self.assertEqual(st.applied["split"], splits_applied)
        self.assertEqual(st.applied["bind"], 1 + 2 * n)
        lsns = [r.lsn for r in self.store.log()]
        self.assertEqual(lsns, list(range(1, st.head_lsn + 1)))
        # the chain of splits on the shared key is one unbroken lineage
        cur = self.store.get("shared").session_id
        chain = [x.session_id for x in self.store.ancestors(cur)]
        self.assertEqual(len(chain), splits_applied)
        self.assertEqual(chain[-1], "root")
        for name in ("p1", "p2"):
            for k in range(10):
                last = max(i for i in range(n) if i % 10 == k)
                self.assertEqual(self.store.get(f"{name}:k{k}").session_id, f"{name}-s{last}")


if __name__ == "__main__":
    unittest.main()
