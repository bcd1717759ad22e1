"""The clock keyword (event times for migrations) and the messages every
exception carries."""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import unittest
import warnings
from typing import List

from support import INSTALLED, StoreTestCase, tmp_root

import bindlog

KEY = "agent:main:telegram:dm:77"


class Clock(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="bindlog-py-clock-", dir=tmp_root())
        self.addCleanup(shutil.rmtree, self.dir, True)

    def test_events_take_the_clock_time(self) -> None:
        now = [1_600_000_000_000]
        with bindlog.Store(os.path.join(self.dir, "s"), durability="none", clock=lambda: now[0]) as s:
            # a migration: entries go in in order of their original time
            for i, t in enumerate((1_600_000_000_000, 1_650_000_000_000, 1_700_000_000_000)):
                now[0] = t
                s.bind(f"{KEY}:{i}", f"s{i}", expect="", origin={"updatedAt": t})
            self.assertEqual([r.time_ms for r in s.log()],
                             [1_600_000_000_000, 1_650_000_000_000, 1_700_000_000_000])
            self.assertEqual(s.get(f"{KEY}:1").updated_ms, 1_650_000_000_000)
            self.assertEqual(s.session("s2").created_ms, 1_700_000_000_000)
            self.assertEqual(s.lsn_at_time(1_650_000_000_000), 2)
            # the log's times never go back: an older time takes the previous one
            now[0] = 1
            s.invalidate(f"{KEY}:2")
            self.assertEqual(s.get(f"{KEY}:2").updated_ms, 1_700_000_000_000)

    def test_a_failing_clock_warns_and_the_system_time_is_used(self) -> None:
        def broken() -> int:
            raise RuntimeError("clock source down")

        with bindlog.Store(os.path.join(self.dir, "s"), durability="none", clock=broken) as s, \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = s.bind(KEY, "a")
        self.assertIs(r.outcome, bindlog.Outcome.APPLIED)
        self.assertTrue(any("clock source down" in str(w.message) for w in caught), caught)
        with bindlog.Store(os.path.join(self.dir, "s"), read_only=True) as s:
            self.assertGreater(s.get(KEY).updated_ms, 1_600_000_000_000)

    def test_clock_must_return_an_int(self) -> None:
        with bindlog.Store(os.path.join(self.dir, "s"), durability="none", clock=lambda: 1.5) as s, \
                warnings.catch_warnings(record=True) as caught:  # type: ignore[arg-type, return-value]
            warnings.simplefilter("always")
            s.bind(KEY, "a")
        self.assertTrue(any("not int" in str(w.message) for w in caught), caught)
        with self.assertRaises(TypeError):
            bindlog.Store(os.path.join(self.dir, "t"), clock=5)  # type: ignore[arg-type]

    def test_the_clock_runs_in_the_committing_thread(self) -> None:
        names: List[str] = []

        def clock() -> int:
            names.append(threading.current_thread().name)
            return 1_700_000_000_000

        with bindlog.Store(os.path.join(self.dir, "s"), durability="none", clock=clock) as s:
            th = threading.Thread(target=s.bind, args=(KEY, "a"), name="gateway-worker")
            th.start()
            th.join(30)
        self.assertEqual(names, ["gateway-worker"])


class Messages(StoreTestCase):
    def test_library_errors_name_the_call_and_subject(self) -> None:
        s = self.store
        with self.assertRaises(bindlog.NotFound) as cm:
            s.split("agent:main:x", "a", "b")
        self.assertEqual(cm.exception.message, "split agent:main:x: key is not bound")
        self.assertEqual(str(cm.exception), "split agent:main:x: key is not bound [BINDLOG_ENOTFOUND]")
        s.bind(KEY, "s1")
        s.bind("holder", "s2")
        with self.assertRaises(bindlog.Conflict) as cm2:
            s.bind(KEY, "s2")
        msg = cm2.exception.message
        self.assertTrue(msg.startswith(f"bind {KEY}: "), msg)
        self.assertIn("holder", msg)  # the key that holds the session
        with self.assertRaises(bindlog.Exists) as cm3:
            s.new_session(KEY, "s2")
        self.assertTrue(cm3.exception.message.startswith(f"new_session {KEY}: "), cm3.exception.message)

    def test_caller_bytes_are_escaped(self) -> None:
        with self.assertRaises(bindlog.NotFound) as cm:
            self.store.invalidate("tab\there\\")
        self.assertTrue(cm.exception.message.startswith("invalidate tab\\x09here\\x5c: "),
                        cm.exception.message)

    def test_the_bindings_own_checks_read_the_same_way(self) -> None:
        s = self.store
        cases = [
            (lambda: s.bind(KEY, "bad\nid"), f"bind {KEY}: session_id contains a control character"),
            (lambda: s.split(KEY, "a", "a"), f"split {KEY}: parent_id and child_id are the same session"),
            (lambda: s.invalidate(KEY, reason="x" * 65), f"invalidate {KEY}: reason is 65 bytes, longer than 64"),
            (lambda: s.get(""), 'get "": key is empty'),
            (lambda: s.session("a\x7f"), "session_get a\\x7f: session_id contains a control character"),
            (lambda: s.log(-1), "log: from_lsn -1 is out of range 0..2**64-1"),
        ]
        for fn, message in cases:
            with self.subTest(message=message), self.assertRaises(bindlog.InvalidArgument) as cm:
                fn()
            self.assertEqual(cm.exception.message, message)
        with self.assertRaises(bindlog.InvalidArgument) as cm:
            s.apply_batch([bindlog.Event.bind(KEY, "ok"), bindlog.Event.split(KEY, "p", "p")])
        self.assertEqual(cm.exception.index, 1)
        self.assertEqual(cm.exception.message,
                         f"apply_batch event 1 (split {KEY}): parent_id and child_id are the same session")

    def test_open_errors_name_the_path(self) -> None:
        not_a_store = os.path.join(self.dir, "plain")
        os.makedirs(not_a_store)
        with open(os.path.join(not_a_store, "notes.txt"), "w") as f:
            f.write("not a store")
        with self.assertRaises(bindlog.NotAStore) as cm:
            bindlog.Store(not_a_store)
        self.assertTrue(cm.exception.message.startswith(f"open {not_a_store}: "), cm.exception.message)
        with self.assertRaises(bindlog.NotFound) as cm2:
            bindlog.Store(os.path.join(self.dir, "missing"), read_only=True)
        self.assertIn(os.path.join(self.dir, "missing"), cm2.exception.message)
        with self.assertRaises(bindlog.InvalidArgument) as cm3:
            bindlog.Store(os.path.join(self.dir, "x"), durability="fast")
        self.assertTrue(cm3.exception.message.startswith("open "), cm3.exception.message)

    @unittest.skipUnless(INSTALLED, "the package's own library (built without etcd) is tested installed")
    def test_etcd_is_not_supported_by_the_packages_library(self) -> None:
        with self.assertRaises(bindlog.NotSupported) as cm:
            bindlog.Store("etcd://127.0.0.1:1/bindlog-test")
        self.assertEqual(cm.exception.code, -15)
        self.assertIn("etcd", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
