"""Store.snapshot(): many reads that agree with each other.

The C API has no public read transaction to hold across calls (each read
and each iterator takes its own snapshot), so a :class:`Snapshot` is built
on what exists: it pins the head LSN when it is taken and answers every
read *as of that LSN*.  A binding or session that no write touched since
is returned as read; one changed since is rebuilt from the key's log
records up to the pinned LSN (:meth:`Store.history`, itself one snapshot).
The answers are exactly those of one read transaction at the pinned head,
as long as the records involved are still in the log: a read that would
need records compacted away since raises :class:`~bindlog.NotFound`
saying so, rather than answer with newer state.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterator, List, Optional

from . import _ffi
from .errors import NotFound, quote
from .types import Binding, EventType, Record, Session, Text

if TYPE_CHECKING:
    from .store import Store

__all__ = ["Snapshot"]


class Snapshot:
    """Reads as of one head LSN (:attr:`head_lsn`); see the module's text.

    ``with store.snapshot() as snap:`` then ``snap.get(key)``,
    ``snap[key]`` (KeyError when unbound), ``key in snap``,
    ``snap.generation(key)``, ``snap.session(session_id)``.  Nothing is
    held open between reads, so a snapshot may live as long as needed;
    leaving the ``with`` block only ends its use."""

    def __init__(self, store: "Store") -> None:
        self._store = store
        #: the head LSN the snapshot reads as of
        self.head_lsn: int = int(store.stats().head_lsn)
        self._closed = False

    def __enter__(self) -> "Snapshot":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"<bindlog.Snapshot of {self._store.path!r} at LSN {self.head_lsn}>"

    def _live(self) -> "Store":
        if self._closed:
            raise ValueError("the snapshot was used after its with block")
        return self._store

    def _base(self) -> int:
        return int(self._live().stats().base_lsn)

    def _compacted(self, key: Text, base: int) -> NotFound:
        return NotFound(
            _ffi.ENOTFOUND,
            f"snapshot at LSN {self.head_lsn}: {quote(key)} changed since, and the log records "
            f"up to LSN {base} it would be rebuilt from were compacted away",
        )

    def _last_upto(self, key: Text) -> Optional[Record]:
        """The key's last record with lsn <= head_lsn that changed its
        binding (a ROUTE record only moves its last activity), or None when
        it had none; NotFound when that record may have been compacted away."""
        recs = [r for r in self._live().history(key)
                if r.lsn <= self.head_lsn and r.type is not EventType.ROUTE]
        if recs:
            return recs[-1]  # every record in (base, head] is retained
        base = self._base()
        if base > 0:
            raise self._compacted(key, base)
        return None

    def get(self, key: Text) -> Optional[Binding]:
        """The key's binding as of :attr:`head_lsn`, or None.  Its
        ``last_activity_ms`` is the key's current one while the binding is
        unchanged since head_lsn (messages routed since count: a routed
        message does not change the binding), and 0 when the binding is
        rebuilt from the log (a key's history holds no ROUTE records)."""
        store = self._live()
        rc, out = store._get(key)
        if int(out.lsn) <= self.head_lsn:  # untouched since (or never bound)
            return None if rc == _ffi.ENOTFOUND else Binding._from_c(out)
        r = self._last_upto(key)
        if r is None or r.type is EventType.UNBIND:
            return None
        # last_activity_ms as of head_lsn is not known here: ROUTE records
        # are not in a key's history (they would make it grow with every
        # message), so a rebuilt binding reports 0
        return Binding(r.key, r.session_id, r.generation, r.lsn, r.time_ms, 0)

    def generation(self, key: Text) -> int:
        """The key's generation as of :attr:`head_lsn` (0 if never seen)."""
        store = self._live()
        _rc, out = store._get(key)
        if int(out.lsn) <= self.head_lsn:
            return int(out.generation)
        r = self._last_upto(key)
        return r.generation if r is not None else 0

    def __getitem__(self, key: Text) -> Binding:
        b = self.get(key)
        if b is None:
            raise KeyError(key)
        return b

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, (str, bytes)):
            return False
        return self.get(key) is not None

    def session(self, session_id: Text) -> Optional[Session]:
        """The session as of :attr:`head_lsn`, or None if it did not exist
        then: one created later is None, one ended later is live, one
        re-opened later (a BIND) is ended as it was."""
        store = self._live()
        s = store.session(session_id)
        if s is None or s.created_lsn > self.head_lsn:
            return None
        later = [r for r in store.history(s.key) if r.lsn > self.head_lsn]
        touched = s.ended_lsn > self.head_lsn or any(
            s.session_id in (r.session_id, r.other_id) for r in later)
        if not touched:
            return s
        # its end as of head_lsn: the last record up to there that ended it
        base = self._base()
        if base > 0 and base >= s.created_lsn:
            raise self._compacted(session_id, base)
        end: Optional[Record] = None
        for r in store.history(s.key):
            if r.lsn > self.head_lsn:
                break
            if r.lsn < s.created_lsn:
                continue
            if r.session_id == s.session_id and r.type in (EventType.BIND, EventType.NEW_SESSION,
                                                           EventType.SPLIT):
                end = None  # (re)opened here
            elif r.other_id == s.session_id or (r.type is EventType.UNBIND and r.session_id == s.session_id):
                end = r
        if end is None:
            return replace(s, ended_lsn=0, ended_ms=0, end_reason="")
        return replace(s, ended_lsn=end.lsn, ended_ms=end.time_ms, end_reason=end.reason)

    def keys(self) -> Iterator[str]:
        """Not offered: listing every key as of an LSN would rebuild the
        whole state; iterate :meth:`Store.bindings` (one snapshot) instead."""
        raise NotImplementedError("Snapshot.keys: use Store.bindings(), which reads one snapshot")
