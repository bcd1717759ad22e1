"""Fork detection (private).

A store handle belongs to the process that opened it: its LMDB environment,
its locks, the group commit's threads and the AsyncStore's writer pool do
not survive ``fork``, and a lock that another thread of the parent held at
the fork stays held forever in the child.  The library refuses a parent's
handle in a child itself (BINDLOG_EFORK, raised as
:class:`~bindlog.ForkError`), but a Store has Python locks of its own that
it takes before reaching the library.  So every Store remembers the fork
*epoch* it was opened in; a handler registered with
:func:`os.register_at_fork` bumps the epoch in each child, and every call on
a Store from an older epoch raises ForkError before touching anything (its
Python locks included).

The child may open any store, the parent's included: the library gives
the child's open an environment of its own, never the parent's.

A child started with multiprocessing's ``spawn`` or ``forkserver`` method
is a fresh process: none of this applies there.
"""
from __future__ import annotations

import os

#: bumped in every forked child; a Store records it at open
epoch = 0


def _after_fork_in_child() -> None:
    global epoch
    epoch += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
