"""Value types returned by :class:`bindlog.Store`.

All are frozen dataclasses (immutable, hashable, comparable) built from
copies of the C structs: nothing here points into the store.

Keys and session ids come back as ``str``, decoded from UTF-8 with
``surrogateescape``, so a key that is not valid UTF-8 still round-trips when
passed back in.  Origins stay ``bytes``.
"""
from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Dict, Literal, Optional, Tuple, TypedDict, Union

from . import _ffi
from .route import ResetMode

__all__ = [
    "ANY_GENERATION",
    "Outcome",
    "EventType",
    "Result",
    "Binding",
    "Session",
    "Record",
    "Lineage",
    "Stats",
    "CheckReport",
    "ReplayResult",
    "Event",
    "ImportEntry",
    "ImportOutcome",
    "Origin",
    "Text",
    "Durability",
    "EventCounts",
]

#: A durability mode: ``"full"`` (an APPLIED outcome survives power loss),
#: ``"normal"`` (survives a process crash) or ``"none"`` (tests, bulk loads).
Durability = Literal["full", "normal", "none"]


class EventCounts(TypedDict):
    """One event type's calls through a handle, by result (:attr:`Stats.events`)."""

    applied: int
    already: int
    stale: int
    moved: int
    error: int


#: Pass as ``run_generation`` to :meth:`Store.split` to skip the generation
#: check (the identity check, parent == current binding, still applies).
ANY_GENERATION: int = _ffi.ANY_GENERATION

#: A key, session id or reason: ``str`` (encoded as UTF-8) or ``bytes``.
Text = Union[str, bytes]
#: An origin: ``bytes``-like, ``str`` (UTF-8) or a JSON-serialisable
#: ``dict``/``list`` (``json.dumps``, compact, UTF-8).
Origin = Union[bytes, bytearray, memoryview, str, Dict[str, Any], list]


class Outcome(enum.IntEnum):
    """The outcome of a mutating call (non-negative C return values)."""

    APPLIED = _ffi.APPLIED  #: state changed; one log record written
    ALREADY = _ffi.ALREADY  #: state already as requested (a retry); nothing written
    STALE = _ffi.STALE  #: the run's generation is not the key's current one; nothing written
    MOVED = _ffi.MOVED  #: the key is not bound to the expected session; nothing written


class EventType(enum.IntEnum):
    """Log record / batch event types (``BINDLOG_EVENT_*``)."""

    BIND = _ffi.EVENT_BIND
    NEW_SESSION = _ffi.EVENT_NEW_SESSION
    SPLIT = _ffi.EVENT_SPLIT
    INVALIDATE = _ffi.EVENT_INVALIDATE
    UNBIND = _ffi.EVENT_UNBIND
    #: a routed message on a fresh binding (:meth:`Store.route`'s ROUTED):
    #: only the key's last activity (the record's time) changes.  Only
    #: route() writes it; it is not a batch event.
    ROUTE = _ffi.EVENT_ROUTE


def _s(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class Result:
    """What a mutating call did.

    Attributes:
        outcome: APPLIED, ALREADY, STALE or MOVED.
        lsn: the LSN of the record written; 0 when nothing was logged.
        generation: the key's generation after the call.
        session_id: the key's binding after the call, ``""`` if none.
    """

    outcome: Outcome
    lsn: int
    generation: int
    session_id: str

    @property
    def applied(self) -> bool:
        """True when the call changed the state (outcome APPLIED)."""
        return self.outcome is Outcome.APPLIED

    def is_current(self, run_generation: int) -> bool:
        """Is the run that made this call still the key's current run?

        True when the outcome is APPLIED or ALREADY *and* the key's
        generation is still `run_generation` (the generation the run
        started under).  Use it instead of testing the outcome alone: a
        split retried after ``/stop`` comes back ALREADY (the split did go
        in) with a higher generation -- the run was stopped, and this says
        False.  The same rule as Node's ``result.isCurrent()`` and the C
        comparison next to ``BINDLOG_ALREADY`` in bindlog.h."""
        if isinstance(run_generation, bool) or not isinstance(run_generation, int):
            raise TypeError(f"run_generation must be an int, not {type(run_generation).__name__}")
        return self.outcome in (Outcome.APPLIED, Outcome.ALREADY) and self.generation == run_generation

    @classmethod
    def _from_c(cls, outcome: int, r: "_ffi.bindlog_result") -> "Result":
        return cls(Outcome(outcome), r.lsn, r.generation, _s(r.session_id))


@dataclass(frozen=True)
class Binding:
    """A key's binding (see :meth:`Store.get`).

    Attributes:
        key: the session key.
        session_id: the session the key routes to.
        generation: the key's epoch; never decreases.
        lsn: the last event that changed this binding.
        updated_ms: that event's time, ms since the Unix epoch.
        last_activity_ms: the time of the key's last routed message
            (:meth:`Store.route`), 0 if none.  Durable state: only a routed
            message moves it, never backwards; open, recovery, replay and
            import keep it.  route() judges freshness by the later of this
            and `updated_ms`.
    """

    key: str
    session_id: str
    generation: int
    lsn: int
    updated_ms: int
    last_activity_ms: int = 0

    @property
    def bound(self) -> bool:
        """False for a tombstone (an unbound key, as :meth:`Store.bindings`
        returns them)."""
        return self.session_id != ""

    @classmethod
    def _from_c(cls, b: "_ffi.bindlog_binding") -> "Binding":
        return cls(_s(b.key), _s(b.session_id), b.generation, b.lsn, b.updated_ms, b.last_activity_ms)


@dataclass(frozen=True)
class Session:
    """A session (see :meth:`Store.session`).

    Attributes:
        session_id: its id.
        key: the key it was last bound to.
        parent_id: the session it was split from or opened after; ``""``
            for a root.
        created_lsn, created_ms: the event that created it.
        ended_lsn, ended_ms: the event that ended it; 0 while live.
        end_reason: why it ended (``"compression"``, ``"new_session"``, ...).
        origin: the gateway's opaque origin bytes (``b""`` if none).
    """

    session_id: str
    key: str
    parent_id: str
    created_lsn: int
    ended_lsn: int
    created_ms: int
    ended_ms: int
    end_reason: str
    origin: bytes = field(repr=False)

    @property
    def live(self) -> bool:
        """True while the session has not ended."""
        return self.ended_lsn == 0

    def origin_json(self) -> Any:
        """The origin parsed as JSON (UTF-8); ``None`` when it is empty.
        Raises :class:`json.JSONDecodeError` (a ValueError) if it is not JSON."""
        if not self.origin:
            return None
        return json.loads(self.origin.decode("utf-8"))

    @classmethod
    def _from_c(cls, s: "_ffi.bindlog_session", origin: bytes) -> "Session":
        return cls(
            _s(s.session_id),
            _s(s.key),
            _s(s.parent_id),
            s.created_lsn,
            s.ended_lsn,
            s.created_ms,
            s.ended_ms,
            _s(s.end_reason),
            origin,
        )


@dataclass(frozen=True)
class Record:
    """One log record (see :meth:`Store.log` and :meth:`Store.history`).

    Attributes:
        lsn: its log sequence number.
        type: the event type.
        time_ms: its time, ms since the Unix epoch (never decreases along the log).
        generation: the key's generation after the event.
        key: the key it touched.
        session_id: the key's binding after the event (SPLIT: the child;
            UNBIND: the session it ended).  A ROUTE record carries only
            the key and its time (the key's new last activity).
        other_id: BIND/NEW_SESSION: the previous binding; SPLIT: the parent;
            otherwise ``""``.
        reason: the effective reason (``""`` if none).
        origin: the origin the event carried, or ``None`` if it carried none.
    """

    lsn: int
    type: EventType
    time_ms: int
    generation: int
    key: str
    session_id: str
    other_id: str
    reason: str
    origin: Optional[bytes] = field(repr=False)

    def origin_json(self) -> Any:
        """The origin parsed as JSON; ``None`` when absent or empty."""
        if not self.origin:
            return None
        return json.loads(self.origin.decode("utf-8"))

    @property
    def reset_reason(self) -> Optional[ResetMode]:
        """:attr:`ResetMode.IDLE` or :attr:`ResetMode.DAILY` for an automatic
        reset (the NEW_SESSION of :meth:`Store.route`'s RESET, logged with
        reason ``"idle"`` or ``"daily"``: the same value as that call's
        ``RouteResult.reason``), else None.  A gateway's hook that saves a
        session's context before it is reset watches for it in
        :meth:`Store.follow`: ``other_id`` is the session that ended,
        ``session_id`` the new one."""
        if self.type is EventType.NEW_SESSION and self.reason in ("idle", "daily"):
            return ResetMode.IDLE if self.reason == "idle" else ResetMode.DAILY
        return None

    @property
    def expired(self) -> bool:
        """True for an UNBIND made by :meth:`Store.expire` (reason
        ``"expired"``): ``session_id`` is the session that ended."""
        return self.type is EventType.UNBIND and self.reason == "expired"


@dataclass(frozen=True)
class Lineage:
    """A session with its ancestors (parent first, root last) and its
    direct children (in `Store.children`'s order)."""

    session: Session
    ancestors: Tuple[Session, ...]
    children: Tuple[Session, ...]

    @property
    def root(self) -> Session:
        """The root of the chain (the session itself if it has no parent)."""
        return self.ancestors[-1] if self.ancestors else self.session


@dataclass(frozen=True)
class Stats:
    """Statistics of a store (see :meth:`Store.stats`).

    ``applied`` counts APPLIED events by event name over the store's whole
    life (every process); ``events`` counts the calls made through this
    Store (this handle) by event name and result (``"applied"``,
    ``"already"``, ``"stale"``, ``"moved"``, ``"error"``).

    The write-ahead log, as ``bindlog stat`` shows it: ``checkpoint_lsn`` is
    the last LSN folded into the data file (records after it are in the log
    only: ``head_lsn - checkpoint_lsn``), ``log_size`` the log's ring size
    in bytes and ``log_used`` the bytes of it holding frames not yet
    checkpointed.
    """

    head_lsn: int
    base_lsn: int
    log_records: int
    bindings: int
    live_bindings: int
    sessions: int
    live_sessions: int
    applied: Dict[str, int]
    events: Dict[str, EventCounts]
    commits: int
    grouped_events: int
    map_size: int
    map_used: int
    file_size: int
    readers_used: int
    readers_max: int
    durability: str
    format_version: int
    checkpoint_lsn: int = 0
    log_size: int = 0
    log_used: int = 0

    def __hash__(self) -> int:  # dict fields: hash the scalar part only
        return hash((self.head_lsn, self.base_lsn, self.log_records, self.commits))


@dataclass(frozen=True)
class CheckReport:
    """What :meth:`Store.check` found.  ``ok`` is True when ``problems == 0``."""

    problems: int
    records: int
    head_lsn: int
    first_bad_lsn: int
    first_bad_key: str
    message: str
    state_digest: str
    replay_digest: str

    @property
    def ok(self) -> bool:
        return self.problems == 0


@dataclass(frozen=True)
class ReplayResult:
    """What :meth:`Store.replay` produced: the new store's digest (hex) and
    the last LSN replayed."""

    path: str
    digest: str
    last_lsn: int


@dataclass(frozen=True)
class Event:
    """One event of :meth:`Store.apply_batch`.  Build with the class
    methods (:meth:`bind`, :meth:`new_session`, :meth:`split`,
    :meth:`invalidate`, :meth:`unbind`); arguments are checked when the
    batch is applied."""

    type: EventType
    key: Text
    session_id: Optional[Text] = None
    expect: Optional[Text] = None
    generation: int = 0
    reason: Optional[Text] = None
    origin: Optional[Origin] = field(default=None, hash=False, compare=False)

    @classmethod
    def bind(
        cls,
        key: Text,
        session_id: Text,
        expect: Optional[Text] = None,
        reason: Optional[Text] = None,
        origin: Optional[Origin] = None,
    ) -> "Event":
        return cls(EventType.BIND, key, session_id, expect, 0, reason, origin)

    @classmethod
    def new_session(
        cls,
        key: Text,
        session_id: Text,
        reason: Optional[Text] = None,
        origin: Optional[Origin] = None,
    ) -> "Event":
        return cls(EventType.NEW_SESSION, key, session_id, None, 0, reason, origin)

    @classmethod
    def split(
        cls,
        key: Text,
        parent_id: Text,
        child_id: Text,
        run_generation: int = ANY_GENERATION,
        origin: Optional[Origin] = None,
    ) -> "Event":
        return cls(EventType.SPLIT, key, child_id, parent_id, run_generation, None, origin)

    @classmethod
    def invalidate(cls, key: Text, reason: Optional[Text] = None) -> "Event":
        return cls(EventType.INVALIDATE, key, None, None, 0, reason, None)

    @classmethod
    def unbind(cls, key: Text, reason: Optional[Text] = None) -> "Event":
        return cls(EventType.UNBIND, key, None, None, 0, reason, None)


@dataclass(frozen=True)
class ImportEntry:
    """One entry of :meth:`Store.import_entries`: a key of a gateway's
    routing table (``sessions.json``) and the session it routes to.

    Attributes:
        key: the session key.
        session_id: the session it routes to.
        time_ms: the entry's last update, ms since the Unix epoch: the time
            its BIND is logged with, and the order entries go in (0: the
            store's clock at the call).
        origin: the session's origin, e.g. the entry itself (a dict is
            stored as compact JSON), or None.
    """

    key: Text
    session_id: Text
    time_ms: int = 0
    origin: Optional[Origin] = field(default=None, hash=False, compare=False)


@dataclass(frozen=True)
class ImportOutcome:
    """What :meth:`Store.import_entries` did with one entry: a ``result``
    (APPLIED; ALREADY: bound so already; MOVED: the key routes to another
    session, ``result.session_id``) or an ``error`` that was not raised
    (:class:`~bindlog.Conflict`: the session is the live binding of another
    key; :class:`~bindlog.InvalidArgument`: a key, id, origin or time the
    store refuses), whose message names the key."""

    entry: ImportEntry
    result: Optional[Result]
    error: Optional[Exception] = None

    @property
    def outcome(self) -> Optional[Outcome]:
        """The entry's outcome, or None when it was refused with an error."""
        return self.result.outcome if self.result is not None else None

    @property
    def imported(self) -> bool:
        """True when the key routes to the entry's session now (APPLIED or ALREADY)."""
        return self.outcome in (Outcome.APPLIED, Outcome.ALREADY)
