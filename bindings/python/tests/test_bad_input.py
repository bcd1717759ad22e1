"""Bad input: wrong types raise TypeError, bad values ValueError
(InvalidArgument) before reaching C, a closed store raises StoreClosed;
in every case nothing is written."""
from __future__ import annotations

import unittest

from support import StoreTestCase

import bindlog
from bindlog import Event

KEY = "agent:main:discord:chan:7"


class BadInput(StoreTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.store.bind(KEY, "s1", origin=b"peer")
        self.before = (self.head(), self.store.digest())

    def tearDown(self) -> None:
        if not self.store.closed:
            self.assertNothingWritten(*self.before)

    def expect_error(self, exc: type, fn, *args, **kw) -> BaseException:
        with self.assertRaises(exc) as cm:
            fn(*args, **kw)
        return cm.exception

    def assertNeverReachedC(self) -> None:
        # the C library counts every call it refused; Python-side checks
        # must have stopped these before they got there
        errors = {t: c["error"] for t, c in self.store.stats().events.items()}
        self.assertEqual(errors, dict.fromkeys(errors, 0))

    def test_wrong_types_raise_type_error(self) -> None:
        s = self.store
        for bad in (None, 42, 4.2, ["k"], object()):
            with self.subTest(bad=bad):
                self.expect_error(TypeError, s.bind, bad, "s2")
                self.expect_error(TypeError, s.bind, KEY, bad)
                self.expect_error(TypeError, s.new_session, bad, "s2")
                self.expect_error(TypeError, s.split, KEY, bad, "s2")
                self.expect_error(TypeError, s.split, KEY, "s1", bad)
                self.expect_error(TypeError, s.invalidate, bad)
                self.expect_error(TypeError, s.unbind, bad)
                self.expect_error(TypeError, s.get, bad)
                self.expect_error(TypeError, s.session, bad)
                self.expect_error(TypeError, s.history, bad)
        self.expect_error(TypeError, s.bind, KEY, "s2", expect=5)
        self.expect_error(TypeError, s.bind, KEY, "s2", reason=5)
        self.expect_error(TypeError, s.bind, KEY, "s2", origin=5)
        self.expect_error(TypeError, s.bind, KEY, "s2", origin={"x": object()})
        self.expect_error(TypeError, s.split, KEY, "s1", "s2", "1")
        self.expect_error(TypeError, s.split, KEY, "s1", "s2", 1.0)
        self.expect_error(TypeError, s.split, KEY, "s1", "s2", True)
        self.expect_error(TypeError, s.split, KEY, "s1", "s2", None)
        self.expect_error(TypeError, s.log, "1")
        self.expect_error(TypeError, s.apply_batch, "not events")
        self.expect_error(TypeError, s.apply_batch, [("bind", KEY, "s2")])
        self.expect_error(TypeError, bindlog.Store, 5)
        self.expect_error(TypeError, bindlog.Store, self.path, durability=0)
        self.assertNeverReachedC()

    def test_bad_values_raise_value_error(self) -> None:
        s = self.store
        bad_keys = ["", b"", "k" * 401, "a\0b", b"a\0b", "\ud800"]
        bad_ids = ["", "x" * 129, "é" * 65, "a\nb", "tab\there", "\x7f", "a\0b", b"\x01", "esc\x1b"]
        for k in bad_keys:
            with self.subTest(key=k):
                e = self.expect_error(ValueError, s.bind, k, "s2")
                self.assertIsInstance(e, bindlog.InvalidArgument)
                self.assertEqual(e.code, -2)
                self.expect_error(ValueError, s.invalidate, k)
                self.expect_error(ValueError, s.get, k)
                self.expect_error(ValueError, s.generation, k)
        for i in bad_ids:
            with self.subTest(id=i):
                self.expect_error(ValueError, s.bind, KEY, i)
                self.expect_error(ValueError, s.new_session, KEY, i)
                self.expect_error(ValueError, s.split, KEY, "s1", i)
                self.expect_error(ValueError, s.split, KEY, i, "s9")
                self.expect_error(ValueError, s.session, i)
                self.expect_error(ValueError, s.children, i)
        self.expect_error(ValueError, s.bind, KEY, "s2", reason="r" * 65)
        self.expect_error(ValueError, s.bind, KEY, "s2", reason="line\nbreak")
        self.expect_error(ValueError, s.bind, KEY, "s2", expect="bad\nid")
        self.expect_error(ValueError, s.bind, KEY, "s2", origin=b"x" * (bindlog.ORIGIN_MAX + 1))
        self.expect_error(ValueError, s.split, KEY, "s1", "s1")
        self.expect_error(ValueError, s.split, KEY, "s1", "s2", -1)
        self.expect_error(ValueError, s.split, KEY, "s1", "s2", 2**64)
        self.expect_error(ValueError, bindlog.Store, self.path, durability="fast")
        self.expect_error(ValueError, bindlog.Store, "")
        # a bad event anywhere in a batch: nothing of the batch is written
        e = self.expect_error(ValueError, s.apply_batch,
                              [Event.bind("k2", "s5"), Event.split(KEY, "s1", "bad\x00")])
        self.assertEqual(e.index, 1)
        # a field an event type does not take is refused, naming it (the C
        # library's rule), not dropped
        T = bindlog.EventType
        wrong = [
            (Event(T.NEW_SESSION, KEY, "s5", expect="s1"), "new_session", "expected session (expect)"),
            (Event(T.SPLIT, KEY, "s5", "s1", 1, reason="r"), "split", "reason"),
            (Event(T.INVALIDATE, KEY, session_id="s1"), "invalidate", "session id"),
            (Event(T.INVALIDATE, KEY, expect="s1"), "invalidate", "expected session (expect)"),
            (Event(T.INVALIDATE, KEY, origin=b"o"), "invalidate", "origin"),
            (Event(T.UNBIND, KEY, session_id="s1"), "unbind", "session id"),
            (Event(T.UNBIND, KEY, expect="s1"), "unbind", "expected session (expect)"),
            (Event(T.UNBIND, KEY, origin="o"), "unbind", "origin"),
        ]
        for ev, name, what in wrong:
            with self.subTest(event=ev):
                e = self.expect_error(bindlog.InvalidArgument, s.apply_batch, [Event.bind("k2", "s5"), ev])
                self.assertEqual(e.index, 1)
                self.assertEqual(e.message, f"apply_batch event 1 ({name} {KEY}): "
                                         f"this event type takes no {what} (leave it None)")
        # limits are exact: the longest valid values are accepted (then undone)
        self.assertIsNone(s.get("k" * 400))
        self.assertIsNone(s.session("x" * 128))
        self.assertNeverReachedC()

    def test_keys_may_hold_control_bytes_but_not_nul(self) -> None:
        # the contract: keys are any bytes but NUL (ids may not hold control bytes)
        r = self.store.bind("weird\tkey", "s-tab")
        self.assertIs(r.outcome, bindlog.Outcome.APPLIED)
        self.assertEqual(self.store.get(b"weird\tkey").session_id, "s-tab")
        self.before = (self.head(), self.store.digest())

    def test_state_errors_are_exceptions_and_write_nothing(self) -> None:
        s = self.store
        e = self.expect_error(bindlog.NotFound, s.split, "never-bound", "a", "b")
        self.assertEqual((e.code, e.name), (-1, "BINDLOG_ENOTFOUND"))
        self.assertIsInstance(e, LookupError)
        self.expect_error(bindlog.NotFound, s.invalidate, "never-bound")
        self.expect_error(bindlog.NotFound, s.unbind, "never-bound")
        s.bind("other", "s-other")
        self.before = (self.head(), self.store.digest())
        e = self.expect_error(bindlog.Conflict, s.bind, KEY, "s-other")
        self.assertEqual(e.code, -4)
        # the library's message names the call, the key, and who holds the session
        self.assertTrue(e.message.startswith(f"bind {KEY}: "), e.message)
        self.assertIn("live binding", e.message)
        self.assertIn("other", e.message)
        self.expect_error(bindlog.Exists, s.new_session, KEY, "s-other")
        self.expect_error(bindlog.Exists, s.split, KEY, "s1", "s-other")
        # an error in a batch writes nothing of it and names the event
        e = self.expect_error(bindlog.Exists, s.apply_batch,
                              [Event.invalidate(KEY), Event.new_session(KEY, "s-other")])
        self.assertEqual(e.index, 1)
        self.assertIsInstance(e, bindlog.BindlogError)

    def test_closed_store(self) -> None:
        s = self.store
        gen = s.log()
        s.close()
        s.close()  # idempotent
        self.assertTrue(s.closed)
        for call in (lambda: s.bind(KEY, "s2"), lambda: s.get(KEY), lambda: s.session("s1"),
                     lambda: s.stats(), lambda: s.digest(), lambda: list(s.log()),
                     lambda: s.split(KEY, "s1", "s2", 1), lambda: s.apply_batch([]),
                     lambda: list(gen), lambda: s.__enter__()):
            e = self.expect_error(bindlog.StoreClosed, call)
            self.assertIsInstance(e, ValueError)
            self.assertIsInstance(e, bindlog.BindlogError)
            self.assertIn("closed", str(e))
        # bad input is still reported as such on a closed store
        self.expect_error(TypeError, s.bind, None, "s2")
        with bindlog.Store(self.path) as again:
            self.assertEqual((again.stats().head_lsn, again.digest()), self.before)

    def test_read_only_store(self) -> None:
        with bindlog.Store(self.path, read_only=True) as ro:
            self.assertEqual(ro.get(KEY).session_id, "s1")
            e = self.expect_error(bindlog.ReadOnly, ro.bind, KEY, "s2")
            self.assertEqual(e.code, -11)
            self.expect_error(bindlog.ReadOnly, ro.invalidate, KEY)
            # argument checks come first, as in C
            self.expect_error(ValueError, ro.bind, "", "s2")

    def test_open_errors(self) -> None:
        import os
        missing = os.path.join(self.dir, "missing")
        self.expect_error(bindlog.NotFound, bindlog.Store, missing, read_only=True)
        self.assertFalse(os.path.exists(missing))
        junk = os.path.join(self.dir, "junk")
        os.mkdir(junk)
        with open(os.path.join(junk, "data.mdb"), "wb") as f:
            f.write(b"this is not an LMDB file" * 1000)
        with self.assertRaises(bindlog.BindlogError) as cm:
            bindlog.Store(junk)
        self.assertIsInstance(cm.exception, (bindlog.NotAStore, bindlog.Corrupt))


if __name__ == "__main__":
    unittest.main()
