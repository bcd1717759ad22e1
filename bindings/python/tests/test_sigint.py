"""Ctrl-C safety: one SIGINT at a random point into sync and async
writers, readers, iterators and followers, hundreds of times (each in its
own process, sigint_campaign.py); close() must return every time and the
store must check clean.  ``BINDLOG_SIGINT_TRIES`` sets the tries per mode
(default 30, seven modes; 5 under a sanitizer's preloaded runtime, whose
children start several times slower)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import unittest

import support  # noqa: F401  (the package under test, BINDLOG_LIBRARY)

HERE = os.path.dirname(os.path.abspath(__file__))


class SigintTest(unittest.TestCase):
    def test_sigint__close_returns_and_check_passes_every_time(self) -> None:
        sanitized = "san" in os.environ.get("LD_PRELOAD", "")
        tries = int(os.environ.get("BINDLOG_SIGINT_TRIES") or (5 if sanitized else 30))
        env = dict(os.environ)
        p = subprocess.run(
            [sys.executable, os.path.join(HERE, "sigint_campaign.py"), "--tries", str(tries),
             "--timeout", "10"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=env,
            timeout=600,
        )
        sys.stdout.write(p.stdout)
        self.assertEqual(p.returncode, 0, "a child hung in close, exited badly or left a store "
                         "that does not check:\n" + p.stdout)
        self.assertIn("split: %d tries, 0 hang, 0 bad-exit, 0 bad-check" % tries, p.stdout)


class IteratorCloseReentryTest(support.StoreTestCase):
    def test_sigint__iterator_close_reentered_by_its_finaliser_returns(self) -> None:
        # the garbage collector can run a generator's finaliser (which
        # closes its C iterator) on the very thread already closing that
        # iterator (Store.close after a Ctrl-C left the generator in a
        # cycle): the nested close must return, the outer one close it once
        for i in range(3):
            self.store.bind(f"agent:main:telegram:{i}", f"s{i}")
        gen = self.store.log()
        next(gen)
        (it,) = list(self.store._iters)
        done = []

        def nested() -> None:
            with it.lock:  # as the outer close holds it ...
                it.closing = True
                it.close()  # ... the finaliser's close re-enters
                it.closing = False
            it.close()
            done.append(it.ptr is None)

        t = threading.Thread(target=nested, daemon=True)
        t.start()
        t.join(10)
        self.assertFalse(t.is_alive(), "a re-entered iterator close deadlocked")
        self.assertEqual(done, [True])
        self.store.close()


if __name__ == "__main__":
    unittest.main()
