"""The Store API: events and outcomes, reads, iterators, stats, digest,
batches, origins, str/bytes handling."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import unittest
from typing import Any

from support import StoreTestCase

import bindlog
from bindlog import Event, EventType, Outcome

K = "agent:main:slack:thread:99"


class Events(StoreTestCase):
    def test_bind_outcomes_and_generations(self) -> None:
        s = self.store
        self.assertEqual(s.generation(K), 0)
        self.assertIsNone(s.get(K))
        r = s.bind(K, "a", expect="")
        self.assertEqual(r, bindlog.Result(Outcome.APPLIED, 1, 1, "a"))
        self.assertTrue(r.applied)
        with self.assertRaises(AttributeError):
            r.lsn = 5  # frozen
        self.assertIs(s.bind(K, "a", expect="zzz").outcome, Outcome.ALREADY)
        moved = s.bind(K, "b", expect="")
        self.assertIs(moved.outcome, Outcome.MOVED)
        self.assertEqual((moved.lsn, moved.session_id), (0, "a"))
        r = s.bind(K, "b", expect="a", reason="/resume")
        self.assertEqual((r.outcome, r.generation), (Outcome.APPLIED, 2))
        self.assertEqual(s.session("a").end_reason, "/resume")
        self.assertEqual(s.session("b").parent_id, "")  # BIND makes roots

    def test_new_session_invalidate_unbind(self) -> None:
        s = self.store
        s.bind(K, "a")
        r = s.new_session(K, "n1", origin="plain text origin")
        self.assertEqual((r.outcome, r.generation), (Outcome.APPLIED, 2))
        n1 = s.session("n1")
        self.assertEqual((n1.parent_id, n1.origin), ("a", b"plain text origin"))
        self.assertEqual(s.session("a").end_reason, "new_session")
        self.assertIs(s.new_session(K, "n1").outcome, Outcome.ALREADY)
        b_before = s.get(K)
        r = s.invalidate(K, reason="/stop")
        self.assertEqual((r.outcome, r.generation, r.session_id), (Outcome.APPLIED, 3, "n1"))
        b = s.get(K)
        self.assertEqual((b.session_id, b.generation, b.lsn), ("n1", 3, r.lsn))
        self.assertGreaterEqual(b.updated_ms, b_before.updated_ms)
        self.assertEqual(list(s.history(K))[-1].reason, "/stop")
        r = s.unbind(K, reason="idle")
        self.assertEqual((r.outcome, r.generation, r.session_id), (Outcome.APPLIED, 4, ""))
        self.assertIsNone(s.get(K))
        self.assertNotIn(K, s)
        self.assertEqual(s.generation(K), 4)  # a tombstone keeps its number
        self.assertIs(s.unbind(K).outcome, Outcome.ALREADY)
        self.assertEqual(s.session("n1").end_reason, "idle")
        tomb = [b for b in s.bindings() if b.key == K][0]
        self.assertFalse(tomb.bound)
        self.assertEqual(s.bind(K, "a").generation, 5)  # never goes back

    def test_str_and_bytes_are_the_same_key(self) -> None:
        s = self.store
        s.bind("ключ:😀", "сессия-1")
        self.assertEqual(s.get("ключ:😀".encode()).session_id, "сессия-1")
        self.assertEqual(s.session(b"\xd1\x81\xd0\xb5\xd1\x81\xd1\x81\xd0\xb8\xd1\x8f-1").key, "ключ:😀")
        # a key that is not UTF-8 round-trips through str (surrogateescape)
        s.bind(b"raw\xff\xfekey", "r1")
        [b] = [b for b in s.bindings() if b.session_id == "r1"]
        self.assertEqual(s.get(b.key).session_id, "r1")
        self.assertEqual(b.key.encode("utf-8", "surrogateescape"), b"raw\xff\xfekey")

    def test_origins(self) -> None:
        s = self.store
        s.bind("k1", "dict", origin={"chat": 1, "name": "Zoë"})
        s.bind("k2", "list", origin=[1, 2, 3])
        s.bind("k3", "bytes", origin=bytearray(b"\x00\x01binary"))
        s.bind("k4", "none")
        self.assertEqual(s.session("dict").origin_json(), {"chat": 1, "name": "Zoë"})
        self.assertEqual(json.loads(s.session("dict").origin), {"chat": 1, "name": "Zoë"})
        self.assertEqual(s.session("list").origin_json(), [1, 2, 3])
        self.assertEqual(s.session("bytes").origin, b"\x00\x01binary")
        self.assertEqual(s.session("none").origin, b"")
        self.assertIsNone(s.session("none").origin_json())
        # a split with an explicitly empty origin does not copy the parent's
        s.split("k1", "dict", "child-empty", origin=b"")
        self.assertEqual(s.session("child-empty").origin, b"")
        # the log tells "no origin" from "empty origin"
        recs = {r.session_id: r for r in s.log()}
        self.assertIsNone(recs["none"].origin)
        self.assertEqual(recs["child-empty"].origin, b"")
        # origins larger than the first read buffer, up to the limit
        for n in (1025, 5000, bindlog.ORIGIN_MAX):
            blob = os.urandom(n)
            s.bind(f"big{n}", f"big{n}", origin=blob)
            self.assertEqual(s.session(f"big{n}").origin, blob)
            self.assertEqual([x.origin for x in s.sessions() if x.session_id == f"big{n}"], [blob])
            self.assertEqual(list(s.history(f"big{n}"))[0].origin, blob)

    def test_apply_batch(self) -> None:
        s = self.store
        self.assertEqual(s.apply_batch([]), [])
        res = s.apply_batch([
            Event.bind(K, "a", origin={"p": 1}),
            Event.split(K, "a", "c", run_generation=1),
            Event.split(K, "a", "d", run_generation=1),  # sees the previous: MOVED
            Event.invalidate(K, reason="/stop"),
            Event.split(K, "c", "e", run_generation=1),  # STALE now
            Event.new_session(K, "n"),
            Event.unbind(K),
            Event.unbind(K),
        ])
        self.assertEqual([r.outcome for r in res], [
            Outcome.APPLIED, Outcome.APPLIED, Outcome.MOVED, Outcome.APPLIED,
            Outcome.STALE, Outcome.APPLIED, Outcome.APPLIED, Outcome.ALREADY])
        self.assertEqual([r.lsn for r in res], [1, 2, 0, 3, 0, 4, 5, 0])
        self.assertEqual(s.session("c").origin_json(), {"p": 1})
        self.assertEqual(s.stats().head_lsn, 5)


class Reads(StoreTestCase):
    def setUp(self) -> None:
        super().setUp()
        s = self.store
        for i in range(5):
            s.bind(f"key{i}", f"root{i}", origin={"i": i})
        s.split("key0", "root0", "c1", 1)
        s.split("key0", "c1", "c2", 1)
        s.new_session("key0", "n1")

    def test_log_ranges(self) -> None:
        s = self.store
        all_ = list(s.log())
        self.assertEqual([r.lsn for r in all_], list(range(1, 9)))
        self.assertEqual([r.lsn for r in s.log(3, 5)], [3, 4, 5])
        self.assertEqual([r.lsn for r in s.log(from_lsn=7)], [7, 8])
        self.assertEqual(list(s.log(100)), [])
        times = [r.time_ms for r in all_]
        self.assertEqual(times, sorted(times))
        self.assertEqual(all_[5].type, EventType.SPLIT)
        self.assertEqual((all_[5].key, all_[5].session_id, all_[5].other_id), ("key0", "c1", "root0"))

    def test_lineage_children_ancestors(self) -> None:
        s = self.store
        self.assertEqual([x.session_id for x in s.ancestors("n1")], ["c2", "c1", "root0"])
        self.assertEqual([x.session_id for x in s.children("root0")], ["c1"])
        self.assertEqual([x.session_id for x in s.children("c2")], ["n1"])
        self.assertEqual(list(s.children("unknown")), [])
        with self.assertRaises(bindlog.NotFound):
            list(s.ancestors("unknown"))
        lin = s.lineage("c1")
        self.assertEqual(lin.session.session_id, "c1")
        self.assertEqual([x.session_id for x in lin.ancestors], ["root0"])
        self.assertEqual([x.session_id for x in lin.children], ["c2"])
        self.assertIsNone(s.lineage("unknown"))

    def test_bindings_sessions(self) -> None:
        s = self.store
        keys = [b.key for b in s.bindings()]
        self.assertEqual(keys, sorted(keys))
        self.assertEqual(len(keys), 5)
        self.assertEqual({b.key: b.session_id for b in s.bindings()}["key0"], "n1")
        ids = [x.session_id for x in s.sessions()]
        self.assertEqual(ids, sorted(ids))
        self.assertEqual(len(ids), 8)
        st = s.stats()
        self.assertEqual((st.bindings, st.live_bindings, st.sessions, st.live_sessions),
                         (5, 5, 8, 5))
        self.assertEqual(st.applied, {"bind": 5, "new_session": 1, "split": 2,
                                      "invalidate": 0, "unbind": 0})
        self.assertEqual((st.head_lsn, st.log_records, st.base_lsn), (8, 8, 0))
        self.assertEqual(st.durability, "none")
        self.assertGreaterEqual(st.format_version, 1)

    def test_dropping_an_open_iterator_runs_no_python_code(self) -> None:
        # A Ctrl-C that lands while Python runs a finaliser is printed as
        # "Exception ignored" and lost: dropping an iterator must run none
        # (its C iterator is closed by the store's next call instead)
        s = self.store
        for make in (s.log, s.bindings, s.sessions, lambda: s.history("key0")):
            it = make()
            next(it)
            ran: list = []

            def profile(frame: Any, event: str, arg: Any) -> None:
                if event == "call":
                    ran.append(frame.f_code.co_name)

            sys.setprofile(profile)
            del it
            sys.setprofile(None)
            self.assertEqual(ran, [], "Python code ran when an open iterator was dropped")
            s.stats()
            self.assertEqual(len(s._iters), 0)

    def test_iterators_close_when_abandoned(self) -> None:
        s = self.store
        g = s.log()
        self.assertEqual(len(s._iters), 0)  # opened lazily, at the first next()
        next(g)
        self.assertEqual(len(s._iters), 1)
        for _ in s.sessions():
            break  # the for loop drops the iterator: the store's next call closes it
        self.assertEqual(len(s._iters), 2)
        s.stats()
        self.assertEqual(len(s._iters), 1)
        g.close()
        self.assertEqual(len(s._iters), 0)
        h = s.history("key0")
        next(h)
        del h
        gc.collect()
        s.get("key0")
        self.assertEqual(len(s._iters), 0)
        # an iterator still open when the store closes is closed with it
        g = s.bindings()
        next(g)
        s.close()
        with self.assertRaises(bindlog.StoreClosed):
            next(g)

    def test_iterator_snapshot(self) -> None:
        s = self.store
        g = s.log()
        first = next(g)
        s.invalidate("key1")
        rest = list(g)
        self.assertEqual([first.lsn] + [r.lsn for r in rest], list(range(1, 9)))
        self.assertEqual(len(list(s.log())), 9)

    def test_digest(self) -> None:
        s = self.store
        d1, head = s.digest_at()
        self.assertRegex(d1, r"^[0-9a-f]{32}$")
        self.assertEqual(head, 8)
        self.assertEqual(s.digest(), d1)
        s.invalidate("key1")
        self.assertNotEqual(s.digest(), d1)

    def test_durability_and_reopen(self) -> None:
        p = os.path.join(self.dir, "full")
        with bindlog.Store(p, durability="full") as f:
            self.assertEqual(f.stats().durability, "full")
            f.bind("k", "s")
        with bindlog.Store(p, durability="normal") as f:
            self.assertEqual(f.get("k").session_id, "s")
            self.assertIn("normal", repr(f) + f.durability)
        self.assertRegex(bindlog.library_version(), r"^\d+\.\d+\.\d+")

    def test_two_handles_in_one_process(self) -> None:
        with bindlog.Store(self.path) as other:
            other.invalidate("key2")
            self.assertEqual(self.store.generation("key2"), 2)
        self.assertEqual(self.store.get("key2").generation, 2)


class Library(unittest.TestCase):
    def test_cdll_releases_the_gil(self) -> None:
        import ctypes
        from bindlog import _ffi
        lib = _ffi.load()
        self.assertIs(type(lib), ctypes.CDLL)
        self.assertNotIsInstance(lib, ctypes.PyDLL)

    def _load_in_child(self, env: dict) -> "subprocess.CompletedProcess[str]":
        import subprocess
        import sys
        code = ("import bindlog, sys\n"
                "try:\n    path = bindlog.load_library()\n"
                "except bindlog.LibraryNotFoundError as e:\n"
                "    assert isinstance(e, ImportError)\n"
                "    print(e); sys.exit(0)\n"
                "print('FOUND', path); sys.exit(2)\n")
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=60)

    def test_library_not_found_lists_what_was_tried(self) -> None:
        from support import PKG_ROOT
        if os.path.exists(os.path.join(PKG_ROOT, "bindlog", "libbindlog.so")):
            self.skipTest("the source tree holds a built library (an editable install)")
        env = dict(os.environ, PYTHONPATH=PKG_ROOT, LD_LIBRARY_PATH="/no/such/dir")
        env.pop("BINDLOG_LIBRARY", None)
        p = self._load_in_child(env)
        if p.returncode == 2 and p.stdout.startswith("FOUND "):
            self.skipTest("a libbindlog is installed where the search finds it: " + p.stdout)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(os.path.join(PKG_ROOT, "bindlog", "libbindlog.so"), p.stdout)
        self.assertIn("libbindlog.so.0", p.stdout)
        self.assertIn("BINDLOG_LIBRARY: not set", p.stdout)
        self.assertIn("pip install", p.stdout)

    def test_bindlog_library_is_the_only_copy_tried_when_set(self) -> None:
        # an explicit BINDLOG_LIBRARY is never silently replaced by the
        # package's own copy or the system's
        env = dict(os.environ, BINDLOG_LIBRARY="/no/such/dir/libbindlog.so",
                   PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(bindlog.__file__))))
        p = self._load_in_child(env)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("/no/such/dir/libbindlog.so", p.stdout)
        self.assertNotIn("libbindlog.so.0", p.stdout)
        self.assertIn("BINDLOG_LIBRARY is set", p.stdout)

    def test_missing_optional_symbol_raises_not_implemented(self) -> None:
        from bindlog import _ffi
        _ffi._OPTIONAL["bindlog_no_such_function"] = (None, [])
        try:
            with self.assertRaises(NotImplementedError) as cm:
                _ffi.optional("bindlog_no_such_function")
            self.assertIn("bindlog_no_such_function", str(cm.exception))
            self.assertFalse(bindlog.has_feature("no_such_function"))
        finally:
            del _ffi._OPTIONAL["bindlog_no_such_function"]

    def test_errors_pickle(self) -> None:
        import pickle
        e = bindlog.errors.error_for(-4, "bind", 3)
        e2 = pickle.loads(pickle.dumps(e))
        self.assertIs(type(e2), bindlog.Conflict)
        self.assertEqual((e2.code, e2.message, e2.index), (e.code, e.message, 3))
        c = pickle.loads(pickle.dumps(bindlog.StoreClosed()))
        self.assertIsInstance(c, bindlog.StoreClosed)
        for code in range(-15, 0):
            err = bindlog.errors.error_for(code)
            self.assertEqual(err.code, code)
            self.assertTrue(err.name.startswith("BINDLOG_E"))
            self.assertIsNot(type(err), bindlog.BindlogError)


if __name__ == "__main__":
    unittest.main()
