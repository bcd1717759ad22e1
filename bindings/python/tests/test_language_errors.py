"""Errors in Python's own classes, and Result.is_current (the retry edge)."""
from __future__ import annotations

import errno
import os
import pickle
import unittest

import support
from support import StoreTestCase, bindlog


class OsErrorTest(unittest.TestCase):
    def test_errors__io_errors_are_oserrors_with_errno(self) -> None:
        for cls, code, eno in ((bindlog.NoSpace, -8, errno.ENOSPC), (bindlog.BindlogIOError, -7, errno.EIO),
                               (bindlog.PermissionDenied, -13, errno.EACCES)):
            e = cls(code, "write x: it failed")
            self.assertIsInstance(e, OSError)
            self.assertIsInstance(e, bindlog.BindlogError)
            self.assertEqual(e.errno, eno)
            self.assertEqual(e.code, code)
            self.assertEqual(str(e), f"write x: it failed [{e.name}]")
            back = pickle.loads(pickle.dumps(e))
            self.assertEqual((type(back), back.errno, back.message), (cls, eno, e.message))
        self.assertIsInstance(bindlog.PermissionDenied(-13, "x"), PermissionError)
        self.assertNotIsInstance(bindlog.NotFound(-1, "x"), OSError)

    @unittest.skipIf(os.geteuid() == 0, "root is never denied")
    def test_errors__permission_denied_is_caught_as_permission_error(self) -> None:
        d = support.tmp_root()
        import tempfile
        root = tempfile.mkdtemp(dir=d)
        self.addCleanup(os.chmod, root, 0o700)
        os.chmod(root, 0o500)
        with self.assertRaises(PermissionError):
            bindlog.Store(os.path.join(root, "s"))

    def test_errors__store_closed_is_named_as_in_node(self) -> None:
        e = bindlog.StoreClosed()
        self.assertEqual(e.name, "BINDLOG_ECLOSED")
        self.assertIsNone(e.code)


class IsCurrentTest(StoreTestCase):
    def test_result__is_current_after_stop_is_false(self) -> None:
        s = self.store
        gen = s.bind("k", "A").generation
        r = s.split("k", "A", "B", gen)
        self.assertTrue(r.is_current(gen))
        s.invalidate("k")  # /stop
        retry = s.split("k", "A", "B", gen)
        self.assertIs(retry.outcome, bindlog.Outcome.ALREADY)
        self.assertFalse(retry.is_current(gen), "ALREADY with a higher generation: the run was stopped")
        self.assertFalse(s.split("k", "B", "C", gen).is_current(gen))  # STALE
        self.assertFalse(s.bind("k", "Z", expect="nope").is_current(s.generation("k")))  # MOVED
        with self.assertRaises(TypeError):
            retry.is_current("1")  # type: ignore[arg-type]


if __name__ == "__main__":
    unittest.main()
