"""The :class:`Store`: a bindlog store opened through libbindlog.

A Store wraps one C handle (``bindlog *``).  Every method converts and checks
its arguments in Python first (``TypeError`` for wrong types,
:class:`~bindlog.InvalidArgument` -- a ``ValueError`` -- for bad values), so
bad input never reaches C, then calls the library with the GIL released.
A failing call raises the exception of its C code with the library's own
message (``bindlog_last_error()``).  The maintenance calls (check, replay,
compact, export, import) are in maint.py; :class:`bindlog.AsyncStore`
(aio.py) wraps a Store for asyncio.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref
from ctypes import byref, c_size_t, c_ubyte, c_uint64, c_void_p
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, TypeVar, Union

from typing import Literal

from . import _args, _ffi, _fork
from ._args import Clock, PathLike
from .errors import (
    BindlogError,
    ForkError,
    InvalidArgument,
    NotFound,
    StoreClosed,
    error_for,
    error_with,
    quote,
)
from .maint import Maintenance, vacuum
from . import route as _route
from .route import Duration, ModeName, Now, ResetMode, ResetPolicy, RouteResult, TimeZone
from .snapshot import Snapshot
from .types import (
    ANY_GENERATION,
    Binding,
    Event,
    EventType,
    Lineage,
    Origin,
    Record,
    Result,
    Session,
    Durability,
    EventCounts,
    Stats,
    Text,
)

__all__ = ["Store", "vacuum", "library_version"]

_DURABILITY_NAMES = {v: k for k, v in _args.DURABILITY.items()}
_OUTCOME_COLUMNS = ("applied", "already", "stale", "moved", "error")
_EVENT_NAMES = {t.value: t.name.lower() for t in EventType}
#: longest single sleep inside the library while following or waiting: the
#: bound on how long close() and Ctrl-C wait for a waiting thread
WAIT_SLICE_MS = 100
#: records read per snapshot by follow()
FOLLOW_BATCH = 256

T = TypeVar("T")


def library_version() -> str:
    """The loaded libbindlog's version string, e.g. ``"0.1.0"``."""
    return str(_ffi.load().bindlog_version().decode())


# ---- iterators ---------------------------------------------------------------


class _CIter:
    """One C iterator, closed exactly once (by its _Iterator, the store's
    next call after that was dropped, or Store.close).

    The library writes the iterator's pointer straight into ``cptr`` (it is
    registered in the store's ``_iters`` before it is opened), so no signal
    can fall between the open and the registration; closers of one iterator
    go one at a time under ``lock`` (a C lock in a ``with``), and the
    pointer is cleared before the close call with no call in between."""

    __slots__ = ("store", "cptr", "lock", "closing")

    def __init__(self, store: "Store") -> None:
        self.store = store
        self.cptr = c_void_p()
        # re-entrant: a thread already inside close() (Store.close(), or
        # _bury from a call made while closing) may come back to it
        self.lock = threading.RLock()
        self.closing = False

    @property
    def ptr(self) -> Optional[int]:
        return self.cptr.value

    def close(self) -> None:
        store = self.store
        if store._epoch != _fork.epoch:
            self.cptr.value = None  # the parent's snapshot: never touched in a child
            return
        with store._token(), self.lock:
            if self.closing:
                return  # a finaliser run inside this thread's own close(): it finishes the job
            try:
                self.closing = True  # (inside the try: a signal cannot leave it set)
                p = self.cptr.value
                if p:
                    # (no call between these two lines: nothing a signal can split)
                    self.cptr.value = None
                    store._lib.bindlog_iter_close(p)
            finally:
                self.closing = False
        store._iters.discard(self)


class _Iterator(Iterator[T]):
    """What bindings(), log(), history(), sessions() ... return.

    Not a generator, and no ``__del__``: a generator's ``finally`` (or a
    ``__del__``) runs Python code when the collector drops the iterator,
    and a Ctrl-C that lands there is printed as "Exception ignored" and
    lost -- the program never sees its KeyboardInterrupt.  Dropping this
    object runs no Python code at all: a weak reference whose callback is
    the C function ``list.append`` queues it on its store, and the store's
    next call (or close) closes the C iterator."""

    __slots__ = ("_store", "_it", "_opener", "_step", "_state", "_ref", "__weakref__")

    def __init__(self, store: "Store", opener: Callable[[c_void_p, Any], int],
                 step: Callable[[c_void_p], Optional[T]]) -> None:
        self._store = store
        self._it = _CIter(store)
        self._opener = opener
        self._step = step
        self._state = 0  # 0 not opened, 1 open, 2 done
        self._ref: Any = None

    def __iter__(self) -> "_Iterator[T]":
        return self

    def __next__(self) -> T:
        if self._state == 2:
            raise StopIteration
        store, it = self._store, self._it
        try:
            # it.lock: one step at a time even when threads share this iterator
            with store._token(), it.lock:
                h = store._handle()
                if self._state == 2:
                    raise StopIteration  # another thread finished it meanwhile
                if self._state == 0:
                    self._state = 1
                    # registered before the open: the library writes the pointer into it
                    store._iters.add(it)
                    self._ref = weakref.ref(self, store._graves.append)
                    store._dropped[self._ref] = it
                    rc = int(self._opener(h, byref(it.cptr)))
                    if rc < 0:
                        raise error_for(rc, "iterator")
                if not it.cptr.value:
                    raise StoreClosed(f"store {quote(store._path)} is closed")
                item = self._step(it.cptr)
        except BaseException:
            self.close()
            raise
        if item is None:
            self.close()
            raise StopIteration
        return item

    def close(self) -> None:
        """Close the iterator now (idempotent); next() then stops."""
        self._state = 2
        self._it.close()
        if self._ref is not None:
            self._store._dropped.pop(self._ref, None)  # closed: nothing left for the store to do


# ---- the store ----------------------------------------------------------------


class Store(Maintenance):
    """An open bindlog store.

    ``Store(path, *, durability="full", read_only=False)`` opens (and unless
    read-only creates) the store in directory `path`.  Use it as a context
    manager or call :meth:`close`.  One Store may be shared by any number of
    threads: the library is thread-safe and the GIL is released during every
    call, and concurrent writes are grouped into one commit.  Several
    processes may open the same store at once (open it *in* each process:
    a Store cannot be pickled, and any call on it in a child process after
    ``fork`` raises :class:`~bindlog.ForkError`).

    Args:
        path: the store directory (created 0700 with missing parents).
        durability: ``"full"`` (an APPLIED outcome survives power loss),
            ``"normal"`` (survives a process crash) or ``"none"`` (tests, bulk
            loads).
        read_only: open read-only: writes raise :class:`~bindlog.ReadOnly`,
            a missing store raises :class:`~bindlog.NotFound`.
        map_size: initial LMDB map size in bytes (0: the default; the map
            grows by itself).
        max_readers: LMDB reader slots for the calling threads and processes
            (0: the default, 126; at most 65536); the store adds one for its
            own thread.
        clock: the time of this handle's events: a callable returning
            milliseconds since the Unix epoch (None: the system clock).  For
            migrations that log entries with their original time, tests and
            simulations.  It is called from whichever thread commits, inside
            the write transaction: keep it fast and thread-safe.  A record's
            time never goes below the previous record's (the library keeps
            the log's times monotonic), so feed entries in time order.

    Raises:
        NotFound, NotAStore, VersionMismatch, PermissionDenied, Corrupt,
        BindlogIOError, NotSupported, ...: the store cannot be opened.
        LibraryNotFoundError (an ImportError): libbindlog cannot be loaded.

    Methods called after :meth:`close` raise :class:`~bindlog.StoreClosed`.
    """

    def __init__(
        self,
        path: PathLike,
        *,
        durability: Durability = "full",
        read_only: bool = False,
        map_size: int = 0,
        max_readers: int = 0,
        clock: Optional[Clock] = None,
    ) -> None:
        self._h: Optional[c_void_p] = None  # set first: __del__ may run on failure
        # Calls in progress are counted without any Python-level counter or
        # condition a KeyboardInterrupt could leave behind (see _token)
        self._tokens: Dict[int, Any] = {}
        self._close_lock = threading.Lock()
        self._closing = False
        self._iters: Set[_CIter] = set()
        # iterators dropped without close(): their weak references (a C
        # callback, list.append, queues them without running Python code)
        # and their C iterators, closed by the next call (_bury)
        self._graves: List[Any] = []
        self._dropped: Dict[Any, _CIter] = {}
        self._epoch = _fork.epoch
        self._pid = os.getpid()
        self._path = ""
        try:
            p = _args.fspath(path)
        except InvalidArgument as exc:
            raise exc._in_call("open") from None
        self._path = os.fsdecode(p)
        try:
            mode = _args.durability(durability)
            if not isinstance(read_only, bool):
                raise TypeError(f"read_only must be a bool, not {type(read_only).__name__}")
            _args.u64(map_size, "map_size")
            if isinstance(max_readers, bool) or not isinstance(max_readers, int):
                raise TypeError("max_readers must be an int")
            if not 0 <= max_readers <= 0xFFFFFFFF:
                raise InvalidArgument(_ffi.EINVAL, "max_readers is out of range")
            self._clock = None if clock is None else _args.ClockCallback(clock)
            self._clock_fn = clock
        except InvalidArgument as exc:
            raise exc._in_call("open", p) from None
        self._lib = _ffi.load()
        opts = _ffi.bindlog_options()
        opts.version = _ffi.OPTIONS_VERSION
        opts.durability = mode
        opts.read_only = 1 if read_only else 0
        opts.map_size = map_size
        opts.max_readers = max_readers
        if self._clock is not None:
            opts.clock_ms = self._clock.c
        h = c_void_p()
        rc = int(self._lib.bindlog_open(byref(h), p, byref(opts)))
        if rc < 0:
            raise error_for(rc, f"open {quote(p)}")
        self._h = h
        self._durability = durability
        self._read_only = read_only

    # ---- life cycle ----

    @property
    def path(self) -> str:
        """The store directory, as given."""
        return self._path

    @property
    def durability(self) -> Durability:
        """The durability this handle was opened with."""
        return self._durability

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def closed(self) -> bool:
        return self._h is None or self._closing

    def close(self) -> None:
        """Close the store.  Waits for calls in progress in other threads
        (a thread in :meth:`follow` or :meth:`wait` within 0.1 s), closes
        iterators still open, then the handle.  Idempotent.

        In a child process after ``fork`` it only forgets the handle: the
        handle, its snapshots and its locks are the parent's and are left
        untouched."""
        if self._epoch != _fork.epoch:
            # the library frees the handle's memory and nothing of the
            # parent's (no lock of this object's is taken: another thread
            # of the parent may have held one at the fork)
            h, self._h = self._h, None
            self._iters = set()
            self._graves = []
            self._dropped = {}
            if h:
                self._lib.bindlog_close(h)
            return
        with self._close_lock:
            if self._h is None:
                return
            # new calls raise StoreClosed from here on (each checks the flag
            # while it holds its thread's token: _handle)
            self._closing = True
        me = threading.get_ident()
        self._wait_calls(me)
        for it in list(self._iters):
            it.close()
        self._wait_calls(me)  # another thread may have been closing an iterator meanwhile
        self._graves.clear()
        self._dropped.clear()
        with self._close_lock:
            h = self._h
            if h is None:
                return  # another thread's close got there first
            # (no call between these two lines: nothing a signal can split)
            self._h = None
            self._lib.bindlog_close(h)

    def _wait_calls(self, me: int) -> None:
        """Wait until no other thread is inside a call on this store: take
        and drop each thread's token.  The calling thread's own token is
        skipped: it is in close(), not in a call (so a token the main
        thread could have left held -- it is the only thread a signal
        handler interrupts -- never blocks its own close)."""
        for ident, tok in list(self._tokens.items()):
            if ident != me:
                with tok:
                    pass

    def __enter__(self) -> "Store":
        self._check_open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if getattr(self, "_h", None) is not None:
                self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("read-only" if self._read_only else "open")
        return f"<bindlog.Store {getattr(self, '_path', '?')!r} {state}>"

    def __reduce__(self) -> Any:
        raise TypeError("a bindlog.Store cannot be pickled: open the store in each process")

    def _fork_error(self) -> ForkError:
        return ForkError(
            _ffi.EFORK,
            f"store {quote(self._path)}: used in process {os.getpid()}, a fork child of process "
            f"{self._pid} that opened it; its handle, locks and threads stay the parent's.  "
            "Open the store in the child instead (with multiprocessing, start workers with "
            "the 'spawn' or 'forkserver' method)"
        )

    def _token(self) -> Any:
        """This thread's token: a re-entrant C lock (``threading.RLock``)
        that the thread holds, in a ``with`` statement, for the length of
        each call into the library.  :meth:`close` waits for the calls in
        progress by taking every other thread's token in turn.

        Why not a counter under a Condition: ``Condition.__enter__`` and
        ``wait`` are Python code, and a KeyboardInterrupt landing between an
        acquire and its ``try`` (or between a counter's increment and its
        ``try``) left the lock held or the count up, and close() hung.  A
        C lock's ``with`` releases whatever interrupts its body, nothing
        here is counted, and a signal handler only ever interrupts the main
        thread, whose own token close() skips.  Raises ForkError in a
        child process, before any lock is touched."""
        if self._epoch != _fork.epoch:
            raise self._fork_error()  # before any lock: one may have been held at the fork
        if self._graves:
            self._bury()
        tok = self._tokens.get(threading.get_ident())
        if tok is None:
            tok = self._tokens.setdefault(threading.get_ident(), threading.RLock())
        return tok

    def _handle(self) -> c_void_p:
        """The C handle, for a call made while holding this thread's token;
        StoreClosed once close() has begun."""
        h = self._h
        if h is None or self._closing:
            raise StoreClosed(f"store {quote(self._path)} is closed")
        return h

    def _check_open(self) -> None:
        with self._token():
            self._handle()

    # ---- events ----

    # Each write is two steps: _prep_<call> checks and converts the
    # arguments (raising TypeError / InvalidArgument) and returns a _Call;
    # _event makes the C call.  Store does both in the caller's thread;
    # AsyncStore does the first on the loop and the second on a writer
    # thread, so a bad argument raises before anything is queued.

    def _event(self, name: str, fn: Callable[..., int], *args: Any) -> Result:
        out = _ffi.bindlog_result()
        with self._token():
            rc = int(fn(self._handle(), *args, byref(out)))
        if rc < 0:
            raise error_for(rc, name)  # this thread's last error: read before any other call
        return Result._from_c(rc, out)

    def bind(
        self,
        key: Text,
        session_id: Text,
        expect: Optional[Text] = None,
        reason: Optional[Text] = None,
        origin: Optional[Origin] = None,
    ) -> Result:
        """BIND: route `key` to `session_id` (first contact, ``/resume``, repair).

        ALREADY if the key is already bound to `session_id`; MOVED if
        `expect` is given and differs from the current binding (``""`` means
        "only if the key is unbound").  Otherwise creates `session_id` as a
        root session (or re-opens it; its origin is replaced only when
        `origin` is given), ends the previous session with `reason` (default
        ``"switch"``) and bumps the generation.

        Raises:
            Conflict: `session_id` is the live binding of another key.
        """
        return self._event(*self._prep_bind(key, session_id, expect, reason, origin))

    def _prep_bind(self, key: Text, session_id: Text, expect: Optional[Text], reason: Optional[Text],
                   origin: Optional[Origin]) -> "_Call":
        try:
            k, sid = _args.key(key), _args.sid(session_id)
            exp, why, org = _args.expect(expect), _args.reason(reason), _args.origin(origin)
        except InvalidArgument as exc:
            raise exc._in_call("bind", key) from None
        return ("bind", self._lib.bindlog_bind, k, sid, exp, why, org, len(org) if org else 0)

    def new_session(
        self,
        key: Text,
        session_id: Text,
        reason: Optional[Text] = None,
        origin: Optional[Origin] = None,
    ) -> Result:
        """NEW_SESSION: ``/new``, ``/reset``.  Creates `session_id` with the
        current binding as its parent, ends the previous session with
        `reason` (default ``"new_session"``), binds, bumps the generation.
        ALREADY if the key is already bound to `session_id`.

        Raises:
            Exists: `session_id` already exists.
        """
        return self._event(*self._prep_new_session(key, session_id, reason, origin))

    def _prep_new_session(self, key: Text, session_id: Text, reason: Optional[Text],
                          origin: Optional[Origin]) -> "_Call":
        try:
            k, sid = _args.key(key), _args.sid(session_id)
            why, org = _args.reason(reason), _args.origin(origin)
        except InvalidArgument as exc:
            raise exc._in_call("new_session", key) from None
        return ("new_session", self._lib.bindlog_new_session, k, sid, why, org, len(org) if org else 0)

    def split(
        self,
        key: Text,
        parent_id: Text,
        child_id: Text,
        run_generation: int = ANY_GENERATION,
        origin: Optional[Origin] = None,
    ) -> Result:
        """SPLIT: publish a compression split ``parent_id -> child_id``, a
        compare-and-swap.  In order: NotFound if the key is unbound; ALREADY
        if it is bound to `child_id` (the split is in; compare
        ``result.generation`` with yours to see whether you are still
        current); STALE if `run_generation` is not :data:`ANY_GENERATION`
        and differs from the key's generation; MOVED if the key is not
        bound to `parent_id`.  Otherwise creates `child_id` (origin =
        `origin`, or a copy of the parent's when None), ends the parent with
        ``"compression"`` and binds the child; the generation is unchanged.

        Raises:
            NotFound: the key is unbound.
            Exists: `child_id` already exists.
            InvalidArgument: `parent_id` == `child_id`, or a bad value.
        """
        return self._event(*self._prep_split(key, parent_id, child_id, run_generation, origin))

    def _prep_split(self, key: Text, parent_id: Text, child_id: Text, run_generation: int,
                    origin: Optional[Origin]) -> "_Call":
        try:
            k, par, child = _args.key(key), _args.sid(parent_id, "parent_id"), _args.sid(child_id, "child_id")
            gen, org = _args.u64(run_generation, "run_generation"), _args.origin(origin)
            if par == child:
                raise InvalidArgument(_ffi.EINVAL, "parent_id and child_id are the same session")
        except InvalidArgument as exc:
            raise exc._in_call("split", key) from None
        return ("split", self._lib.bindlog_split, k, par, child, gen, org, len(org) if org else 0)

    def invalidate(self, key: Text, reason: Optional[Text] = None) -> Result:
        """INVALIDATE: ``/stop``.  Bumps the key's generation without moving
        it, so runs started before become STALE.

        Raises:
            NotFound: the key is unbound.
        """
        return self._event(*self._prep_key_event("invalidate", key, reason))

    def _prep_key_event(self, name: str, key: Text, reason: Optional[Text]) -> "_Call":
        """invalidate and unbind: a key and a reason."""
        try:
            k, why = _args.key(key), _args.reason(reason)
        except InvalidArgument as exc:
            raise exc._in_call(name, key) from None
        fn = self._lib.bindlog_invalidate if name == "invalidate" else self._lib.bindlog_unbind
        return (name, fn, k, why)

    def unbind(self, key: Text, reason: Optional[Text] = None) -> Result:
        """UNBIND: idle expiry.  Ends the bound session with `reason`
        (default ``"unbind"``), leaves a tombstone, bumps the generation.
        ALREADY on a tombstone.

        Raises:
            NotFound: the key was never bound.
        """
        return self._event(*self._prep_key_event("unbind", key, reason))

    # ---- inbound routing ----

    def route(
        self,
        key: Text,
        *,
        now: Optional[Now] = None,
        policy: Optional[ResetPolicy] = None,
        mode: Optional[Union[ModeName, ResetMode]] = None,
        idle: Optional[Duration] = None,
        at_hour: Optional[int] = None,
        tz: TimeZone = None,
        daily_boundary_ms: Optional[int] = None,
        fresh_session_id: Optional[Text] = None,
        origin: Optional[Origin] = None,
    ) -> RouteResult:
        """Route one inbound message of `key`: which session does it go to
        now?  One write transaction reads the key's last activity, decides
        by the reset policy and records this message's activity
        (SPEC section 2b):

        * ROUTED: the binding is fresh (or the mode is ``"none"``): the
          same session; a small ROUTE record sets the last activity to now;
          generation unchanged, so the key's runs stay current;
        * CREATED: the key is unbound: `fresh_session_id` is bound (a
          NEW_SESSION, reason ``"new_session"``);
        * RESET: the binding is stale by the policy: `fresh_session_id` is
          bound with the old session as its parent, the old one ends, the
          generation goes up (runs on the old session get STALE); logged as
          a NEW_SESSION with reason ``"idle"`` or ``"daily"``, which
          :meth:`follow` shows like ``/new``.

        Whatever the outcome, this message goes to ``result.session_id``:
        the message that triggers a reset is the new session's first, never
        dropped.  Freshness is judged on the activity *before* this message
        (the later of the key's last routed message and its last binding
        change), so recording activity never makes a stale session look
        fresh; concurrent routes of one key at a boundary give exactly one
        RESET, and all of them land in the new session.

        Args:
            key: the session key.
            now: the message's time: ms since the epoch or an aware datetime
                (None: the store's clock).  A clock that went back is held
                at the log's last time; last activity never goes backwards.
            policy: a :class:`ResetPolicy`, or instead the keywords `mode`
                (``"none"``, the default, ``"idle"``, ``"daily"``,
                ``"both"``, ``"daily_and_idle"``), `idle` (seconds or a
                timedelta), `at_hour` and `tz` (the daily boundary computed
                from `now`, :func:`~bindlog.daily_boundary_ms`) or
                `daily_boundary_ms` (a boundary you computed).
            fresh_session_id: the id to bind on CREATED or RESET (it must
                not exist); None: a new ``uuid4`` string.  Unused when the
                answer is ROUTED.
            origin: the new session's origin (CREATED, RESET).

        Raises:
            TypeError, InvalidArgument: a bad argument or policy (before
                anything is written).
            Exists: the fresh session id already exists (CREATED, RESET).
            ReadOnly: a read-only store.
        """
        return self._route(self._prep_route(key, now, policy, mode, idle, at_hour, tz,
                                            daily_boundary_ms, fresh_session_id, origin))

    def _now_ms(self) -> int:
        """The store's clock now (the one given to the Store, or the system's)."""
        fn = self._clock_fn
        if fn is not None:
            t = fn()
            if not isinstance(t, bool) and isinstance(t, int) and t > 0:
                return t
        return time.time_ns() // 1_000_000

    def _prep_route(self, key: Text, now: Any, policy: Any, mode: Any, idle: Any, at_hour: Any,
                    tz: Any, boundary: Any, fresh_session_id: Any, origin: Any) -> "_Call":
        try:
            k = _args.key(key)
            pol = _route.policy_of(policy, mode, idle, at_hour, tz, boundary)
            # None: the library's clock (0), unless the boundary is computed
            # here from now, which must then be the same now
            t = 0 if now is None else _route.now_ms(now)
            if t == 0 and pol.at_hour is not None and pol.reset_mode.uses_daily:
                t = self._now_ms()
            cpol = pol._c(t)
            fresh = _args.sid(_route.fresh_id(fresh_session_id), "fresh_session_id")
            org = _args.origin(origin)
        except InvalidArgument as exc:
            raise exc._in_call("route", key) from None
        return (k, t, cpol, fresh, org, len(org) if org else 0)

    def _route(self, call: "_Call") -> RouteResult:
        k, t, cpol, fresh, org, n = call
        out = _ffi.bindlog_route_result()
        with self._token():
            rc = int(self._lib.bindlog_route(self._handle(), k, t, byref(cpol), fresh, org, n, byref(out)))
        if rc < 0:
            raise error_for(rc, "route")
        return RouteResult._from_c(rc, out)

    def expire(
        self,
        idle: Optional[Duration] = None,
        *,
        before: Optional[Now] = None,
        prefix: Optional[Text] = None,
        dry_run: bool = False,
        now: Optional[Now] = None,
    ) -> int:
        """Unbind every bound key idle for longer than `idle` (its last
        activity, as :meth:`route` judges it, before ``now - idle``), or
        with activity before the time `before`; only keys starting with
        `prefix` when it is given (``"agent:main:cron:"``: finished cron
        runs).  Each goes as an UNBIND with reason ``"expired"`` (in the
        change feed: :attr:`Record.expired`), in group commits; a key routed
        meanwhile stays.  Returns how many keys were unbound, or with
        ``dry_run=True`` how many would be (nothing is written).

        Raises:
            TypeError, InvalidArgument: neither or both of `idle` and
                `before`, a bad duration, time or prefix.
            ReadOnly: a read-only store (a dry run is fine).
        """
        return self._expire(*self._prep_expire(idle, before, prefix, dry_run, now))

    def _prep_expire(self, idle: Any, before: Any, prefix: Any, dry_run: Any,
                     now: Any) -> Tuple[int, Optional[bytes], bool]:
        try:
            if (idle is None) == (before is None):
                raise InvalidArgument(_ffi.EINVAL, "give idle (a duration) or before (a time), one of them")
            if before is not None:
                cutoff = _route.now_ms(before, "before")
            else:
                t = self._now_ms() if now is None else _route.now_ms(now)
                cutoff = max(0, t - _route.idle_ms(idle))
            pre = None if prefix is None else _args.bytes_of(prefix, "prefix")
            if pre is not None and len(pre) > _ffi.KEY_MAX:
                raise InvalidArgument(_ffi.EINVAL, f"prefix is {len(pre)} bytes, longer than {_ffi.KEY_MAX}")
            if pre is not None and b"\0" in pre:
                raise InvalidArgument(_ffi.EINVAL, "prefix contains a NUL byte")
            if not isinstance(dry_run, bool):
                raise TypeError(f"dry_run must be a bool, not {type(dry_run).__name__}")
        except InvalidArgument as exc:
            raise exc._in_call("expire", prefix) from None
        return cutoff, pre, dry_run

    def _expire(self, cutoff: int, prefix: Optional[bytes], dry_run: bool) -> int:
        count = c_uint64()
        with self._token():
            rc = int(self._lib.bindlog_expire(self._handle(), cutoff, prefix, 1 if dry_run else 0, byref(count)))
        if rc < 0:
            raise error_for(rc, "expire")
        return int(count.value)

    def apply_batch(self, events: Sequence[Event]) -> List[Result]:
        """Apply `events` in order in one write transaction, each seeing the
        ones before it.  STALE, MOVED and ALREADY do not abort the batch; an
        error in any event writes nothing and raises that error with
        ``exc.index`` set to the failing event's index."""
        return self._batch(self._prep_batch(events))

    def _prep_batch(self, events: Sequence[Event]) -> "_Batch":
        if isinstance(events, (str, bytes)) or not hasattr(events, "__iter__"):
            raise TypeError("events must be a sequence of bindlog.Event")
        evs = list(events)
        n = len(evs)
        arr = (_ffi.bindlog_event * max(n, 1))()
        keep: List[Any] = []  # keep every buffer alive during the call
        for i, ev in enumerate(evs):
            if not isinstance(ev, Event):
                raise TypeError(f"events[{i}] must be a bindlog.Event, not {type(ev).__name__}")
            try:
                _fill_event(arr[i], ev, keep)
            except InvalidArgument as exc:
                exc.index = i
                raise exc._in_call(f"apply_batch event {i} ({_event_name(ev)} {quote(ev.key)})") from None
            except TypeError as exc:
                raise TypeError(f"events[{i}]: {exc}") from None
        return _Batch(arr, n, keep)

    @staticmethod
    def _events_of(calls: Sequence["_Call"]) -> Any:
        """The C events of prepared single-event calls (_prep_bind & co);
        their bytes live in `calls`."""
        n = len(calls)
        arr = (_ffi.bindlog_event * n)()
        for c, call in zip(arr, calls):
            name, args = call[0], call[2:]
            org: Optional[bytes] = None
            if name == "bind":
                c.type = _ffi.EVENT_BIND
                c.key, c.session_id, c.expect, c.reason, org = args[:5]
            elif name == "new_session":
                c.type = _ffi.EVENT_NEW_SESSION
                c.key, c.session_id, c.reason, org = args[:4]
            elif name == "split":
                c.type = _ffi.EVENT_SPLIT
                c.key, c.expect, c.session_id, c.generation, org = args[:5]
            else:
                c.type = _ffi.EVENT_INVALIDATE if name == "invalidate" else _ffi.EVENT_UNBIND
                c.key, c.reason = args
            if org is not None:
                c.origin = ctypes.cast(ctypes.c_char_p(org), c_void_p)  # org lives in `calls`
                c.origin_len = len(org)
        return arr

    def _calls_each(self, calls: Sequence["_Call"]) -> List[Tuple[Optional[Result], Optional[BindlogError]]]:
        """Make several prepared single-event calls one bindlog_apply_each:
        each event decided and applied alone, all in shared group commits.
        Per call, (result, None) or (None, its exception, with the words
        its single call would have had).  For AsyncStore's writer threads
        (aio.py)."""
        n = len(calls)
        arr = self._events_of(calls)
        out = (_ffi.bindlog_result * n)()
        codes = (ctypes.c_int * n)()
        msgs = ctypes.create_string_buffer(n * _ffi.EACH_MESSAGE_MAX)
        with self._token():
            self._lib.bindlog_apply_each(self._handle(), arr, n, out, codes, msgs)
        res: List[Tuple[Optional[Result], Optional[BindlogError]]] = []
        for i in range(n):
            rc = int(codes[i])
            if rc >= 0:
                res.append((Result._from_c(rc, out[i]), None))
                continue
            at = i * _ffi.EACH_MESSAGE_MAX
            raw = msgs.raw[at : at + _ffi.EACH_MESSAGE_MAX].split(b"\0", 1)[0]
            res.append((None, error_with(rc, raw.decode("utf-8", "replace"))))
        return res

    def _batch(self, batch: "_Batch") -> List[Result]:
        arr, n = batch.arr, batch.n
        out = (_ffi.bindlog_result * max(n, 1))()
        err = c_size_t()
        with self._token():
            rc = int(self._lib.bindlog_apply_batch(self._handle(), arr, n, out, byref(err)))
        if rc < 0:
            idx = err.value if err.value < n else None
            raise error_for(rc, "apply_batch", idx)
        return [Result._from_c(out[i].outcome, out[i]) for i in range(n)]

    # ---- reads ----

    def _get(self, key: Text) -> Tuple[int, "_ffi.bindlog_binding"]:
        try:
            k = _args.key(key)
        except InvalidArgument as exc:
            raise exc._in_call("get", key) from None
        out = _ffi.bindlog_binding()
        with self._token():
            rc = int(self._lib.bindlog_get(self._handle(), k, byref(out)))
        if rc < 0 and rc != _ffi.ENOTFOUND:
            raise error_for(rc, "get")
        return rc, out

    def get(self, key: Text) -> Optional[Binding]:
        """The binding of `key`, or None when it routes nowhere (never bound,
        or unbound).  Use :meth:`generation` for an unbound key's epoch."""
        rc, out = self._get(key)
        return None if rc == _ffi.ENOTFOUND else Binding._from_c(out)

    def generation(self, key: Text) -> int:
        """The key's current generation, bound or not (0 if never seen)."""
        return int(self._get(key)[1].generation)

    def __contains__(self, key: object) -> bool:
        """``key in store``: the key is bound to a session."""
        if not isinstance(key, (str, bytes)):
            return False
        return self.get(key) is not None

    def __getitem__(self, key: Text) -> Binding:
        """``store[key]``: the key's binding; KeyError when it routes nowhere."""
        b = self.get(key)
        if b is None:
            raise KeyError(key)
        return b

    def __len__(self) -> int:
        """``len(store)``: the number of keys bound to a session."""
        return int(self.stats().live_bindings)

    def __bool__(self) -> bool:
        """A Store is true, even when empty (``len`` counts its bindings)."""
        return True

    def __iter__(self) -> Iterator[str]:
        """``for key in store``: the bound keys, in key byte order, from one
        snapshot (:meth:`bindings` without the tombstones)."""
        return (b.key for b in self.bindings() if b.bound)

    def keys(self) -> Iterator[str]:
        """The bound keys (as iterating the store)."""
        return iter(self)

    def snapshot(self) -> "Snapshot":
        """Reads that agree with each other: ``with store.snapshot() as
        snap:`` then ``snap.get(key)``, ``snap[key]``, ``key in snap``,
        ``snap.generation(key)``, ``snap.session(id)``, all as of the head
        LSN when the snapshot was taken (``snap.head_lsn``), whatever is
        written meanwhile.  The C API holds no read transaction across
        calls, so it is built on the log: see :mod:`bindlog.snapshot`."""
        self._check_open()
        return Snapshot(self)

    def session(self, session_id: Text) -> Optional[Session]:
        """The session `session_id` with its origin, or None if unknown."""
        try:
            sid = _args.sid(session_id)
        except InvalidArgument as exc:
            raise exc._in_call("session_get", session_id) from None
        out = _ffi.bindlog_session()
        cap = 1024
        while True:
            buf = ctypes.create_string_buffer(cap)
            with self._token():
                rc = int(self._lib.bindlog_session_get(self._handle(), sid, byref(out), buf, cap))
            if rc == _ffi.ENOTFOUND:
                return None
            if rc < 0:
                raise error_for(rc, "session_get")
            if out.origin_len <= cap:
                return Session._from_c(out, buf.raw[: out.origin_len])
            cap = out.origin_len  # grew since: read again with room for it

    # ---- iteration ----

    def _iterate(
        self, opener: Callable[[c_void_p, Any], int], step: Callable[[c_void_p], Optional[T]]
    ) -> "_Iterator[T]":
        """An iterator over a C iterator: opened on the first next(), closed
        when it is exhausted, fails, is closed, is garbage-collected, or the
        Store closes."""
        self._bury()
        return _Iterator(self, opener, step)

    def _bury(self) -> None:
        """Close the C iterators of iterators dropped without close()
        (see _Iterator): from an ordinary call, where a Ctrl-C is raised
        to the caller instead of being lost in a finaliser."""
        graves = self._graves
        while graves:
            try:
                ref = graves.pop()
            except IndexError:  # another thread emptied it meanwhile
                return
            it = self._dropped.pop(ref, None)
            if it is not None:
                it.close()

    def _records(self, opener: Callable[[c_void_p, Any], int]) -> "_Iterator[Record]":
        rec = _ffi.bindlog_record()
        lib = self._lib

        def step(ptr: c_void_p) -> Optional[Record]:
            rc = int(lib.bindlog_iter_next_record(ptr, byref(rec)))
            if rc < 0:
                raise error_for(rc, "log iterator")
            if rc == 0:
                return None
            origin = None
            if rec.origin_present:
                origin = ctypes.string_at(rec.origin, rec.origin_len) if rec.origin_len else b""
            return Record(
                rec.lsn,
                EventType(rec.type),
                rec.time_ms,
                rec.generation,
                _args.text(ctypes.string_at(rec.key, rec.key_len)),
                _args.text(rec.session_id),
                _args.text(rec.other_id),
                _args.text(rec.reason),
                origin,
            )

        return self._iterate(opener, step)

    def _sessions(self, opener: Callable[[c_void_p, Any], int]) -> Iterator[Session]:
        out = _ffi.bindlog_session()
        buf = ctypes.create_string_buffer(_ffi.ORIGIN_MAX)
        lib = self._lib

        def step(ptr: c_void_p) -> Optional[Session]:
            rc = int(lib.bindlog_iter_next_session(ptr, byref(out), buf, _ffi.ORIGIN_MAX))
            if rc < 0:
                raise error_for(rc, "session iterator")
            if rc == 0:
                return None
            return Session._from_c(out, buf.raw[: min(out.origin_len, _ffi.ORIGIN_MAX)])

        return self._iterate(opener, step)

    def log(self, from_lsn: int = 1, to_lsn: Optional[int] = None) -> Iterator[Record]:
        """Log records with ``from_lsn <= lsn <= to_lsn`` (None: to the head),
        oldest first, from one snapshot taken at the first ``next()``.
        Compacted records are not there.  Close the iterator (or exhaust
        it) promptly: an open snapshot keeps LMDB from reusing pages."""
        try:
            lo = _args.u64(from_lsn, "from_lsn")
            hi = _ffi.UINT64_MAX if to_lsn is None else _args.u64(to_lsn, "to_lsn")
        except InvalidArgument as exc:
            raise exc._in_call("log") from None
        self._check_open()
        return self._records(lambda h, p: int(self._lib.bindlog_log_iter(h, lo, hi, p)))

    def history(self, key: Text) -> Iterator[Record]:
        """Every retained log record that touched `key`, oldest first."""
        try:
            k = _args.key(key)
        except InvalidArgument as exc:
            raise exc._in_call("history", key) from None
        self._check_open()
        return self._records(lambda h, p: int(self._lib.bindlog_history_iter(h, k, p)))

    def bindings(self) -> Iterator[Binding]:
        """Every binding, tombstones included (``binding.bound`` is False),
        in key byte order."""
        self._check_open()
        out = _ffi.bindlog_binding()
        lib = self._lib

        def step(ptr: c_void_p) -> Optional[Binding]:
            rc = int(lib.bindlog_iter_next_binding(ptr, byref(out)))
            if rc < 0:
                raise error_for(rc, "bindings iterator")
            return Binding._from_c(out) if rc else None

        return self._iterate(lambda h, p: int(lib.bindlog_bindings_iter(h, p)), step)

    def sessions(self) -> Iterator[Session]:
        """Every session, in id byte order."""
        self._check_open()
        return self._sessions(lambda h, p: int(self._lib.bindlog_sessions_iter(h, p)))

    def children(self, session_id: Text) -> Iterator[Session]:
        """The direct children of `session_id` (split from or opened after
        it): those whose creating record the log holds newest first, then
        the compacted ones in id order.  An unknown session has none."""
        try:
            sid = _args.sid(session_id)
        except InvalidArgument as exc:
            raise exc._in_call("children", session_id) from None
        self._check_open()
        return self._sessions(lambda h, p: int(self._lib.bindlog_children_iter(h, sid, p)))

    def ancestors(self, session_id: Text) -> Iterator[Session]:
        """The parent of `session_id`, its parent, ... up to the root.
        Raises NotFound (at the first ``next()``) for an unknown session."""
        try:
            sid = _args.sid(session_id)
        except InvalidArgument as exc:
            raise exc._in_call("ancestors", session_id) from None
        self._check_open()
        return self._sessions(lambda h, p: int(self._lib.bindlog_ancestors_iter(h, sid, p)))

    def lineage(self, session_id: Text) -> Optional[Lineage]:
        """`session_id` with its ancestors (parent first) and direct
        children, or None if the session is unknown."""
        s = self.session(session_id)
        if s is None:
            return None
        try:
            anc = tuple(self.ancestors(session_id))
        except NotFound:  # removed in between: cannot happen today, be safe
            return None
        return Lineage(s, anc, tuple(self.children(session_id)))

    # ---- the change feed ----

    def _wait_slice(self, after_lsn: int, timeout_ms: int) -> int:
        """One bindlog_wait of at most timeout_ms; returns the head seen."""
        head = c_uint64()
        with self._token():
            rc = int(self._lib.bindlog_wait(self._handle(), after_lsn, timeout_ms, byref(head)))
        if rc < 0:
            raise error_for(rc, "wait")
        return head.value

    def wait(self, after_lsn: int, timeout: Optional[float] = None) -> int:
        """Sleep until the head LSN is greater than `after_lsn` (an event was
        committed, by any handle or process) or `timeout` seconds have
        passed (None: no limit; 0: look once), and return the head LSN seen:
        compare it with `after_lsn` to tell a change from a timeout.  The
        thread sleeps in the library in slices of at most 0.1 s, so
        :meth:`close` (StoreClosed) and Ctrl-C interrupt it promptly."""
        try:
            after = _args.u64(after_lsn, "after_lsn")
            limit = _args.seconds(timeout, "timeout")
        except InvalidArgument as exc:
            raise exc._in_call("wait") from None
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            if deadline is None:
                ms = WAIT_SLICE_MS
            else:
                ms = max(0, min(WAIT_SLICE_MS, int((deadline - time.monotonic()) * 1000 + 0.999)))
            head = self._wait_slice(after, ms)
            if head > after or (deadline is not None and time.monotonic() >= deadline):
                return head

    def _read_after(self, next_lsn: int, limit: int = FOLLOW_BATCH) -> List[Record]:
        """Up to `limit` records from next_lsn on, read from one snapshot
        that is closed before they are handed out; raises NotFound when the
        records from next_lsn on were compacted away."""
        it = self._records(lambda h, p: int(self._lib.bindlog_log_iter(h, next_lsn, next_lsn + limit - 1, p)))
        try:
            recs = list(it)
        finally:
            it.close()
        if recs and recs[0].lsn != next_lsn:
            raise NotFound(
                _ffi.ENOTFOUND,
                f"follow from LSN {next_lsn}: records {next_lsn}..{recs[0].lsn - 1} were compacted "
                f"away (the log now starts at {recs[0].lsn}; follow from stats().base_lsn + 1)",
            )
        return recs

    def _check_gap(self, next_lsn: int, head: int) -> None:
        """Nothing was read from next_lsn on, yet the head is past it: the
        records were compacted away."""
        if head >= next_lsn:
            base = self.stats().base_lsn
            if base >= next_lsn:
                raise NotFound(
                    _ffi.ENOTFOUND,
                    f"follow from LSN {next_lsn}: records up to {base} were compacted away "
                    "(follow from stats().base_lsn + 1)",
                )

    def follow(self, from_lsn: int = 1, *, timeout: Optional[float] = None,
               until: Union[None, int, Literal["head"]] = None) -> Iterator[Record]:
        """The change feed: every log record from `from_lsn` on, oldest
        first, then each new one as it is committed -- by this handle, other
        handles, other processes -- forever, or until no record came for
        `timeout` seconds (None: never stop; 0: stop once caught up).

        A generator built on :meth:`wait` and :meth:`log`: records are read
        in batches of 256, each batch from a snapshot closed before its
        records are yielded, so a slow consumer holds no snapshot open.  A
        change made by another process is seen within the library's wait
        latency (50 ms at p99, SPEC section 8).

        `until` stops it instead at an LSN: ``until="head"`` at the head as
        it is when follow() is called (a first follower catching up, or a
        batch job, ends there instead of waiting), an int at that LSN (the
        record with it is the last yielded).  Nothing to read up to there:
        the iterator is empty.

        Raises NotFound when records it has not yielded yet were compacted
        away (it never skips records silently); StoreClosed once the store
        is closed (a thread blocked in it wakes within 0.1 s)."""
        try:
            lsn = max(_args.u64(from_lsn, "from_lsn"), 1)
            limit = _args.seconds(timeout, "timeout")
        except InvalidArgument as exc:
            raise exc._in_call("follow") from None
        stop = self._until(until)
        return self._follow(lsn, limit, stop)

    def _until(self, until: Any) -> Optional[int]:
        """follow()'s `until` as an LSN (None: no end); checks the store is open."""
        if until is None:
            self._check_open()
            return None
        if until == "head":
            return int(self.stats().head_lsn)
        try:
            stop = _args.u64(until, "until")
        except InvalidArgument as exc:
            raise exc._in_call("follow") from None
        except TypeError:
            raise TypeError(f'until must be "head", an LSN or None, not {type(until).__name__}') from None
        self._check_open()
        return stop

    def _follow(self, next_lsn: int, limit: Optional[float], stop: Optional[int] = None) -> Iterator[Record]:
        head = 0
        while True:
            if stop is not None and next_lsn > stop:
                return
            recs = self._read_after(next_lsn)
            if recs:
                for rec in recs:
                    if stop is not None and rec.lsn > stop:
                        return
                    next_lsn = rec.lsn + 1
                    yield rec
                continue
            if head >= next_lsn:  # the head passed next_lsn, the log has nothing there
                self._check_gap(next_lsn, head)
                time.sleep(0.005)  # (not compacted: a read not caught up yet; look again)
            head = self.wait(next_lsn - 1, limit)
            if head < next_lsn:
                return  # nothing new for `timeout` seconds

    # ---- statistics, digest ----

    def stats(self) -> Stats:
        """Statistics from one snapshot (see :class:`~bindlog.Stats`)."""
        out = _ffi.bindlog_stats()
        with self._token():
            rc = int(self._lib.bindlog_stats_get(self._handle(), byref(out)))
        if rc < 0:
            raise error_for(rc, "stats")
        applied = {name: int(out.applied[t]) for t, name in _EVENT_NAMES.items()}
        events: Dict[str, EventCounts] = {
            name: EventCounts(applied=int(out.events[t][0]), already=int(out.events[t][1]),
                              stale=int(out.events[t][2]), moved=int(out.events[t][3]),
                              error=int(out.events[t][4]))
            for t, name in _EVENT_NAMES.items()
        }
        return Stats(
            out.head_lsn,
            out.base_lsn,
            out.log_records,
            out.bindings,
            out.live_bindings,
            out.sessions,
            out.live_sessions,
            applied,
            events,
            out.commits,
            out.grouped_events,
            out.map_size,
            out.map_used,
            out.file_size,
            out.readers_used,
            out.readers_max,
            _DURABILITY_NAMES.get(out.durability, str(out.durability)),
            out.format_version,
            out.checkpoint_lsn,
            out.log_size,
            out.log_used,
        )

    def digest_at(self) -> Tuple[str, int]:
        """The state digest (32 hex digits) and the head LSN of its snapshot."""
        d = (c_ubyte * _ffi.DIGEST_SIZE)()
        head = c_uint64()
        with self._token():
            rc = int(self._lib.bindlog_digest(self._handle(), d, byref(head)))
        if rc < 0:
            raise error_for(rc, "digest")
        return bytes(d).hex(), head.value

    def digest(self) -> str:
        """The state digest, 32 lower-case hex digits: two stores with the
        same digest hold the same bindings and sessions."""
        return self.digest_at()[0]


# ---- prepared calls ----------------------------------------------------------------

#: a checked, converted write: (call name, C function, C arguments...)
_Call = Tuple[Any, ...]


class _Batch:
    """A checked, converted batch: the C array and the buffers it points to."""

    __slots__ = ("arr", "n", "keep")

    def __init__(self, arr: Any, n: int, keep: List[Any]) -> None:
        self.arr = arr
        self.n = n
        self.keep = keep



def _event_name(ev: Event) -> str:
    try:
        return EventType(ev.type).name.lower()
    except ValueError:
        return "unknown"


#: Event's optional fields, their words, and the event types that take them.
_EVENT_FIELDS = (
    ("session_id", "session id", (EventType.BIND, EventType.NEW_SESSION, EventType.SPLIT)),
    ("expect", "expected session (expect)", (EventType.BIND, EventType.SPLIT)),
    ("reason", "reason",
     (EventType.BIND, EventType.NEW_SESSION, EventType.INVALIDATE, EventType.UNBIND)),
    ("origin", "origin", (EventType.BIND, EventType.NEW_SESSION, EventType.SPLIT)),
)


def _fill_event(c: "_ffi.bindlog_event", ev: Event, keep: List[Any]) -> None:
    """Convert one batch event into its C struct; buffers go to `keep`."""
    try:
        t = EventType(ev.type)
    except ValueError:
        raise InvalidArgument(_ffi.EINVAL, f"unknown event type {ev.type!r}") from None
    c.type = int(t)
    c.key = _args.key(ev.key)
    # a field the type does not take is refused, as the C library refuses it
    for name, what, takers in _EVENT_FIELDS:
        if getattr(ev, name) is not None and t not in takers:
            raise InvalidArgument(_ffi.EINVAL, f"this event type takes no {what} (leave it None)")
    if t in (EventType.BIND, EventType.NEW_SESSION):
        c.session_id = _args.sid(ev.session_id)
    elif t is EventType.SPLIT:
        c.session_id = _args.sid(ev.session_id, "child_id")
        c.expect = _args.sid(ev.expect, "parent_id")
        if c.expect == c.session_id:
            raise InvalidArgument(_ffi.EINVAL, "parent_id and child_id are the same session")
        c.generation = _args.u64(ev.generation, "run_generation")
    if t is EventType.BIND:
        c.expect = _args.expect(ev.expect)
    if t is not EventType.SPLIT:
        c.reason = _args.reason(ev.reason)
    if t in (EventType.BIND, EventType.NEW_SESSION, EventType.SPLIT):
        org = _args.origin(ev.origin)
        if org is not None:
            buf = ctypes.create_string_buffer(org, len(org) or 1)
            keep.append(buf)
            c.origin = ctypes.cast(buf, c_void_p)
            c.origin_len = len(org)
