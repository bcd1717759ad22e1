"""Store.follow() and Store.wait(): the change feed, synchronously."""
from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
import unittest
from typing import Any, List

from support import PKG_ROOT, StoreTestCase

import bindlog

KEY = "agent:main:matrix:room:1"


def _writer_process(path: str, n: int, go: Any) -> None:
    if PKG_ROOT not in sys.path and os.environ.get("BINDLOG_TEST_INSTALLED") != "1":
        sys.path.insert(0, PKG_ROOT)
    import bindlog as bl
    if not go.wait(60):
        raise SystemExit("never told to go")
    with bl.Store(path, durability="normal") as s:
        s.bind(KEY, "p-0")
        for i in range(1, n):
            s.split(KEY, f"p-{i - 1}", f"p-{i}")


class Follow(StoreTestCase):
    def test_past_records_then_new_ones_from_another_thread(self) -> None:
        s = self.store
        s.bind(KEY, "a")
        got: List[bindlog.Record] = []
        feed = s.follow()

        def writer() -> None:
            for i in range(4):
                time.sleep(0.01)
                s.split(KEY, "a" if i == 0 else f"c{i - 1}", f"c{i}")

        th = threading.Thread(target=writer)
        th.start()
        for rec in feed:
            got.append(rec)
            if len(got) == 5:
                break
        feed.close()
        th.join(30)
        self.assertEqual([r.lsn for r in got], [1, 2, 3, 4, 5])
        self.assertEqual(got[-1].session_id, "c3")

    def test_timeout_ends_the_feed_and_from_lsn_skips_the_past(self) -> None:
        s = self.store
        for i in range(3):
            s.bind(f"{KEY}:{i}", f"s{i}")
        self.assertEqual([r.lsn for r in s.follow(timeout=0)], [1, 2, 3])
        self.assertEqual([r.lsn for r in s.follow(from_lsn=3, timeout=0.05)], [3])
        self.assertEqual(list(s.follow(from_lsn=4, timeout=0)), [])
        # more than one read batch (256 records per snapshot)
        s.apply_batch([bindlog.Event.bind(f"{KEY}:b{i}", f"b{i}") for i in range(600)])
        self.assertEqual([r.lsn for r in s.follow(timeout=0)], list(range(1, 604)))

    def test_wait(self) -> None:
        s = self.store
        self.assertEqual(s.wait(0, timeout=0), 0)
        t0 = time.monotonic()
        self.assertEqual(s.wait(0, timeout=0.15), 0)
        self.assertGreaterEqual(time.monotonic() - t0, 0.14)
        threading.Timer(0.05, lambda: s.bind(KEY, "a")).start()
        self.assertEqual(s.wait(0, timeout=30), 1)
        self.assertEqual(s.wait(0), 1)  # already past: at once
        with self.assertRaises(TypeError):
            s.wait("0")  # type: ignore[arg-type]
        with self.assertRaises(bindlog.InvalidArgument):
            s.wait(0, timeout=-1)

    def test_close_ends_a_waiting_follower(self) -> None:
        errors: List[BaseException] = []

        def follower() -> None:
            try:
                for _ in self.store.follow():
                    pass
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        th = threading.Thread(target=follower)
        th.start()
        time.sleep(0.05)
        self.store.close()  # waits for the follower's current wait slice
        th.join(10)
        self.assertFalse(th.is_alive())
        self.assertEqual(len(errors), 1)
        self.assertIsInstance(errors[0], bindlog.StoreClosed)

    @unittest.skipUnless(bindlog.has_feature("compact"), "no bindlog_compact in this library")
    def test_compacted_records_are_never_skipped_silently(self) -> None:
        s = self.store
        s.bind(KEY, "a")
        for i in range(5):
            s.split(KEY, "a" if i == 0 else f"c{i - 1}", f"c{i}")
        feed = s.follow()
        self.assertEqual(next(feed).lsn, 1)  # reads a batch of 1..6
        feed.close()
        s.compact(4)  # records 1..3 go into the base image
        with self.assertRaises(bindlog.NotFound) as cm:
            next(s.follow(from_lsn=2))
        self.assertIn("compacted", cm.exception.message)
        self.assertEqual([r.lsn for r in s.follow(from_lsn=s.stats().base_lsn + 1, timeout=0)], [4, 5, 6])

    def test_follow_sees_another_process_writes(self) -> None:
        n = 20
        ctx = multiprocessing.get_context("spawn")
        go = ctx.Event()
        p = ctx.Process(target=_writer_process, args=(self.path, n, go))
        p.start()
        got: List[int] = []
        try:
            go.set()
            for rec in self.store.follow(timeout=30):
                got.append(rec.lsn)
                if len(got) == n:
                    break
        finally:
            p.join(60)
        self.assertEqual(p.exitcode, 0)
        self.assertEqual(got, list(range(1, n + 1)))
        self.assertEqual(self.store.get(KEY).session_id, f"p-{n - 1}")


if __name__ == "__main__":
    unittest.main()
