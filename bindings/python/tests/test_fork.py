"""Fork: a Store or AsyncStore used in a fork child raises ForkError
instead of touching the parent's handle, locks and threads."""
from __future__ import annotations

import asyncio
import ctypes
import os
import unittest
from typing import Callable, Dict

from support import StoreTestCase

import bindlog

KEY = "agent:main:irc:chan:9"


def in_child(checks: Dict[str, Callable[[], None]]) -> Dict[str, str]:
    """Fork; in the child run each check and report what it raised (or
    "ok") through a pipe; return the reports."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test runner
        code = 0
        try:
            os.close(r)
            lines = []
            for name, fn in checks.items():
                try:
                    fn()
                    lines.append(f"{name}\tok\t")
                except BaseException as exc:  # noqa: BLE001
                    msg = str(exc).replace("\n", " ").replace("\t", " ")
                    lines.append(f"{name}\t{type(exc).__name__}\t{msg}")
            os.write(w, ("\n".join(lines) + "\n").encode())
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        raise AssertionError(f"the child failed: status {status}")
    out = {}
    for line in data.decode().splitlines():
        name, what, msg = line.split("\t", 2)
        out[name] = what if what == "ok" else f"{what}: {msg}"
    return out


@unittest.skipUnless(hasattr(os, "fork"), "no fork on this platform")
class Fork(StoreTestCase):
    def test_any_call_in_a_child_raises_fork_error(self) -> None:
        s = self.store
        s.bind(KEY, "a")
        gen = s.log()  # a generator made in the parent
        other = os.path.join(self.dir, "other")
        def reopen_and_write() -> None:
            # the child's own open: an environment of its own, not the parent's.
            # No background checkpointer thread in it: ThreadSanitizer (CI runs
            # this under it) kills a child of a threaded parent that starts one.
            os.environ["BINDLOG_CHECKPOINT"] = "manual"
            with bindlog.Store(self.path) as mine:
                r = mine.bind(f"{KEY}:child", "from-child")
                assert r.applied and r.lsn == 2, r

        reports = in_child({
            "get": lambda: s.get(KEY),
            "bind": lambda: s.bind(KEY, "b"),
            "split": lambda: s.split(KEY, "a", "c"),
            "stats": lambda: s.stats(),
            "log": lambda: list(s.log()),
            "parent-generator": lambda: list(gen),
            "follow": lambda: list(s.follow(timeout=0)),
            "reopen-inherited": reopen_and_write,
            "open-other": lambda: bindlog.Store(other, durability="none").close(),
            "close": lambda: s.close(),
        })
        for call in ("get", "bind", "split", "stats", "log", "parent-generator", "follow"):
            self.assertTrue(reports[call].startswith("ForkError: "), (call, reports[call]))
            self.assertIn("fork", reports[call])
        # the child opens the parent's store itself, and other stores
        self.assertEqual(reports["reopen-inherited"], "ok")
        self.assertEqual(reports["open-other"], "ok")
        self.assertEqual(reports["close"], "ok")  # forgets the parent's handle only
        # the parent's store is untouched and goes on
        self.assertEqual(s.get(KEY).session_id, "a")
        self.assertEqual(s.get(f"{KEY}:child").session_id, "from-child")  # the child's write
        self.assertIs(s.split(KEY, "a", "c").outcome, bindlog.Outcome.APPLIED)
        self.assertEqual([r.lsn for r in gen], [1, 2, 3])  # the bind, the child's, the split
        self.assertTrue(os.path.isdir(other))

    def test_fork_error_is_clear(self) -> None:
        reports = in_child({"get": lambda: self.store.get(KEY)})
        msg = reports["get"]
        self.assertIn(self.path, msg)
        self.assertIn(str(os.getpid()), msg)  # names the parent that opened it
        self.assertIn("spawn", msg)

    def test_the_library_refuses_a_parent_handle_itself(self) -> None:
        """Past the binding's own check, straight to the C call: the
        library answers BINDLOG_EFORK, which the binding raises as
        ForkError with the library's message."""
        s = self.store
        s.bind(KEY, "a")
        parent = os.getpid()

        def raw_get() -> None:
            out = bindlog._ffi.bindlog_binding()
            rc = int(s._lib.bindlog_get(s._h, KEY.encode(), ctypes.byref(out)))
            err = bindlog.errors.error_for(rc, "get")
            assert rc == bindlog._ffi.EFORK and isinstance(err, bindlog.ForkError), (rc, err)
            raise err

        reports = in_child({"raw-get": raw_get})
        msg = reports["raw-get"]
        self.assertTrue(msg.startswith(f"ForkError: get {KEY}: the handle was opened by process {parent} "
                                       "and this is process "), msg)
        self.assertIn("Open the store in this process", msg)
        self.assertTrue(msg.endswith("[BINDLOG_EFORK]"), msg)
        self.assertEqual(s.get(KEY).session_id, "a")

    def test_async_store_in_a_child(self) -> None:
        path = os.path.join(self.dir, "aio")

        async def parent_side() -> bindlog.AsyncStore:
            s = bindlog.AsyncStore(path, durability="none")
            await s.bind(KEY, "a")  # the writer pool is running
            return s

        loop = asyncio.new_event_loop()
        try:
            s = loop.run_until_complete(parent_side())

            def write_in_child() -> None:
                asyncio.run(s.bind(KEY, "b"))

            def close_in_child() -> None:
                asyncio.run(s.close())

            reports = in_child({
                "write": write_in_child,
                "read": lambda: s.get(KEY),
                "close": close_in_child,
            })
            self.assertTrue(reports["write"].startswith("ForkError: "), reports["write"])
            self.assertTrue(reports["read"].startswith("ForkError: "), reports["read"])
            self.assertEqual(reports["close"], "ok")
            self.assertIs(loop.run_until_complete(s.bind(KEY, "c")).outcome, bindlog.Outcome.APPLIED)
            loop.run_until_complete(s.close())
        finally:
            loop.close()


if __name__ == "__main__":
    unittest.main()
