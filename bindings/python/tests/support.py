"""Shared helpers of the bindlog Python tests.

The tests import the package from the source tree (``bindings/python``)
and find libbindlog through ``BINDLOG_LIBRARY`` (ctest sets it) or the
package's usual search.  With ``BINDLOG_TEST_INSTALLED=1`` they test the
package installed in the running Python instead (its own compiled library,
unless BINDLOG_LIBRARY says otherwise): the fresh-install test runs them so.
Temporary stores go under ``BINDLOG_TEST_TMPDIR`` or ``TMPDIR``.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)
INSTALLED = os.environ.get("BINDLOG_TEST_INSTALLED") == "1"
if INSTALLED:
    # the installed package, never the source tree next to these tests
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != PKG_ROOT]
elif PKG_ROOT not in sys.path:
    sys.path.insert(0, PKG_ROOT)

import bindlog  # noqa: E402

if INSTALLED and os.path.dirname(os.path.dirname(os.path.abspath(bindlog.__file__))) == PKG_ROOT:
    raise ImportError(f"BINDLOG_TEST_INSTALLED=1, yet bindlog came from the source tree {PKG_ROOT}")

REPO_ROOT = os.path.dirname(os.path.dirname(PKG_ROOT))
HEADER = os.environ.get("BINDLOG_HEADER") or os.path.join(REPO_ROOT, "include", "bindlog.h")


def tmp_root() -> str:
    root = os.environ.get("BINDLOG_TEST_TMPDIR") or tempfile.gettempdir()
    os.makedirs(root, exist_ok=True)
    return root


class StoreTestCase(unittest.TestCase):
    """A test case with a fresh temporary directory and store per test."""

    durability = "none"

    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="bindlog-py-", dir=tmp_root())
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, "store")
        self.store = bindlog.Store(self.path, durability=self.durability)
        self.addCleanup(self.store.close)

    def head(self) -> int:
        return self.store.stats().head_lsn

    def assertNothingWritten(self, head_before: int, digest_before: str) -> None:
        self.assertEqual(self.store.stats().head_lsn, head_before)
        self.assertEqual(self.store.digest(), digest_before)
