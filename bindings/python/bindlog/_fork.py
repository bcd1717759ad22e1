"""Fork detection (private).

A store handle belongs to the process that opened it: its LMDB environment,
its locks, the group commit's threads and the AsyncStore's writer pool do
not survive ``fork``.  LMDB forbids using an environment in a forked child,
and a lock that another thread of the parent held at the fork stays held
forever in the child.  So:

- every Store remembers the fork *epoch* it was opened in; a handler
  registered with :func:`os.register_at_fork` bumps the epoch in each child,
  and every call on a Store from an older epoch raises
  :class:`~bindlog.ForkError` before touching anything of the parent's (its
  Python locks included: one may have been held at the fork);
- the child also remembers which store directories the parent had open at
  the fork: the library keeps one environment per store directory and
  process, and the child's copy of it is the parent's, so opening the same
  directory again in the child is refused too.  Other directories open
  normally.

A child started with multiprocessing's ``spawn`` or ``forkserver`` method
is a fresh process: none of this applies there.
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Optional, Set, Tuple

DevIno = Tuple[int, int]

#: bumped in every forked child; a Store records it at open
epoch = 0
#: (st_dev, st_ino) of the store directories open in an ancestor at a fork
inherited: Set[DevIno] = set()
#: every Store open in this process (weakly), to know what a child inherits
_open: "weakref.WeakSet[Any]" = weakref.WeakSet()
_open_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global epoch, _open_lock
    epoch += 1
    # the lock may have been held by another thread at the fork: renew it
    _open_lock = threading.Lock()
    for store in list(_open):
        dev_ino = getattr(store, "_dev_ino", None)
        if dev_ino is not None:
            inherited.add(dev_ino)
    _open.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def opened(store: Any) -> None:
    """Record a Store opened in this process."""
    with _open_lock:
        _open.add(store)


def closed(store: Any) -> None:
    with _open_lock:
        _open.discard(store)


def dev_ino(path: bytes) -> Optional[DevIno]:
    """The identity of a store directory, or None (not a local path)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def was_inherited(path: bytes) -> bool:
    """Whether `path` is a store directory an ancestor had open at a fork."""
    if not inherited:
        return False
    di = dev_ino(path)
    return di is not None and di in inherited
