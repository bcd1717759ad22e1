"""The :class:`AsyncStore`: a Store for asyncio programs.

Writes are coroutines.  Each checks and converts its arguments on the
loop (a bad one raises before anything is queued) and waits for the end of
the loop's turn: the single-event writes the loop's tasks made in one turn
then go together to one of the store's own writer threads (never the
loop's default executor, which other code shares), which makes them one
``bindlog_apply_each`` call: each event decided alone, a refused one
failing by itself, all in shared group commits (_run_writes).  One trip through a thread and the GIL for
the writes of tasks that resumed together, instead of one each: they reach
the library together and share its group commit (measured in
bench/asyncio_bench.py and docs/python.md).  The library releases the GIL
while it commits, so the loop goes on serving other tasks; writes of later
turns go to other threads of the pool (16 by default) and share the
library's group commits with those in flight.

Reads (get, session, history, log, stats, ...) stay synchronous: they take
microseconds and never wait for a flush.  The long maintenance calls
(check, replay, compact, export, import_) are coroutines on the pool too.

:meth:`AsyncStore.wait` and :meth:`AsyncStore.follow` are served by one
watcher thread per store, started while a task waits and gone when none
does: it sleeps in the library's ``bindlog_wait`` in slices of at most
0.1 s and wakes the waiting tasks through the loop.  A waiting task is
cancelled at once; close() stops the watcher within one slice.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from typing import (
    Any,
    Literal,
    Dict,
    AsyncIterator,
    BinaryIO,
    Callable,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from . import _args, _ffi, _fork
from ._pool import WriterPool
from ._args import Clock, PathLike, Progress
from .errors import InvalidArgument, StoreClosed, quote
from .snapshot import Snapshot
from .route import Duration, ModeName, Now, ResetMode, ResetPolicy, RouteResult, TimeZone
from .store import WAIT_SLICE_MS, Store
from .types import (
    ANY_GENERATION,
    Binding,
    CheckReport,
    Event,
    ImportEntry,
    ImportOutcome,
    Lineage,
    Origin,
    Record,
    ReplayResult,
    Result,
    Session,
    Durability,
    Stats,
    Text,
)

__all__ = ["AsyncStore", "DEFAULT_WRITERS"]

#: writer threads per AsyncStore unless told otherwise: as many events as
#: can share one group commit from this store
DEFAULT_WRITERS = 16
#: records read per snapshot by AsyncStore.follow, on the loop's thread
ASYNC_FOLLOW_BATCH = 64
#: the most single-event writes one writer thread carries into the library
#: as one batch (AsyncStore._flush_writes), and the most bytes of keys, ids,
#: reasons and origins: a group's frame must fit in half the store's log
COALESCE_MAX = 64
COALESCE_BYTES = 256 * 1024

R = TypeVar("R")


class _Watcher:
    """The thread behind AsyncStore.wait/follow (see the module docstring).

    Tasks register (after_lsn, future) pairs; the thread runs while any is
    registered, sleeping in bindlog_wait past the last head it saw, and
    hands each new head to the loop, which resolves the futures it
    satisfies.  Everything shared with the thread is under `lock`; futures
    are only touched on the loop's thread."""

    def __init__(self, store: Store, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self.loop = loop
        self.lock = threading.Lock()
        self.head = 0  # the last head the thread saw
        self.waiters: List[Tuple[int, "asyncio.Future[int]"]] = []
        self.thread: Optional[threading.Thread] = None
        self.stopping = False

    async def wait(self, after: int) -> int:
        fut: "asyncio.Future[int]" = self.loop.create_future()
        entry = (after, fut)
        with self.lock:
            if self.stopping:
                raise StoreClosed(f"store {quote(self.store.path)} is closed")
            self.waiters.append(entry)
            if self.thread is None:
                # from the last head seen: every change from there on is
                # published, whatever each waiter waits past
                self.thread = threading.Thread(
                    target=self._run, args=(self.head,), name="bindlog-watcher", daemon=True
                )
                self.thread.start()
        try:
            return await fut
        finally:
            with self.lock:
                if entry in self.waiters:
                    self.waiters.remove(entry)

    def _run(self, seen: int) -> None:
        while True:
            with self.lock:
                if self.stopping or not self.waiters:
                    self.thread = None
                    return
            try:
                head = self.store._wait_slice(seen, WAIT_SLICE_MS)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting tasks
                with self.lock:
                    self.thread = None
                self._call(self._fail, exc)
                return
            if head > seen:
                seen = head
                self._call(self._publish, head)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody is left to wake
            pass

    def _publish(self, head: int) -> None:
        self.head = max(self.head, head)
        with self.lock:
            ready = [w for w in self.waiters if head > w[0]]
        for _, fut in ready:
            if not fut.done():
                fut.set_result(head)

    def _fail(self, exc: BaseException) -> None:
        with self.lock:
            waiting = list(self.waiters)
        for _, fut in waiting:
            if not fut.done():
                fut.set_exception(exc)

    async def stop(self) -> None:
        with self.lock:
            self.stopping = True
            thread = self.thread
        self._fail(StoreClosed(f"store {quote(self.store.path)} is closed"))
        while thread is not None and thread.is_alive():  # within one wait slice
            await asyncio.sleep(0.005)


def _call_bytes(call: Any) -> int:
    """About how many bytes a prepared call adds to a group's frame: its
    origin (bind, new_session and split end with its length), and 1 KiB
    for the key, ids and reason, which the library bounds."""
    return 1024 + (int(call[-1]) if call[0] in ("bind", "new_session", "split") else 0)


def _run_writes(live: List[int], store: Store, calls: List[Any]) -> List[Tuple[Any, Optional[BaseException]]]:
    """On a writer thread: the calls `live` indexes, as one
    bindlog_apply_each when there are several: independent events, each
    decided and applied alone (a refused one fails by itself, with the
    words its single call would have had) and all sharing the library's
    group commits."""
    part = [calls[i] for i in live]
    if len(part) > 1:
        try:
            return list(store._calls_each(part))
        except BaseException:  # noqa: BLE001 - the store closed: each hears it alone
            pass
    outs: List[Tuple[Any, Optional[BaseException]]] = []
    for call in part:
        try:
            outs.append((store._event(*call), None))
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            outs.append((None, e))
    return outs


class AsyncStore:
    """A bindlog store for asyncio: :class:`Store`'s methods and keywords,
    with the writes as coroutines that never block the event loop.

    ``AsyncStore(path, *, durability="full", read_only=False, map_size=0,
    max_readers=0, clock=None, writers=16)`` opens the store at once, as
    :class:`Store` does (``await AsyncStore.open(...)`` opens it in a thread
    instead); use it with ``async with`` or ``await store.close()``.

    Awaitable: :meth:`bind`, :meth:`new_session`, :meth:`split`,
    :meth:`invalidate`, :meth:`unbind`, :meth:`apply_batch`, :meth:`route`,
    :meth:`expire`, :meth:`wait`,
    and the maintenance calls :meth:`check`, :meth:`replay`,
    :meth:`compact`, :meth:`export`, :meth:`import_`.  Synchronous: the
    reads.  :meth:`follow` is an async iterator.

    Args:
        writers: the writer threads of this store (1..1024): how many
            batches of writes (those of one turn of the loop, 64 at most)
            can be inside the library at once, sharing its group commits.
        (the others as for :class:`Store`)

    Cancelling a task that awaits a write: if the write had not started, it
    is dropped; if it had, it completes (the outcome is lost to the task,
    and a retry of a bind, new_session or split returns ALREADY).

    One event loop at a time for :meth:`wait` and :meth:`follow`: they
    refuse (RuntimeError) while tasks of another loop wait on the store.
    The writes may be awaited from any loop.  Any call in a child process after ``fork`` raises
    :class:`~bindlog.ForkError`.
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
        writers: int = DEFAULT_WRITERS,
    ) -> None:
        self._store: Optional[Store] = None  # set first: __del__ may run on failure
        if isinstance(writers, bool) or not isinstance(writers, int):
            raise TypeError(f"writers must be an int, not {type(writers).__name__}")
        if not 1 <= writers <= 1024:
            raise InvalidArgument(_ffi.EINVAL, f"writers {writers} is out of range 1..1024")._in_call(
                "open", _args.fspath(path)
            )
        self._store = Store(
            path, durability=durability, read_only=read_only, map_size=map_size,
            max_readers=max_readers, clock=clock
        )
        self._writers = writers
        self._pool = WriterPool(writers, "bindlog-writer")
        # single-event writes submitted during the current turn of each
        # loop, not yet handed to the pool (_queue_write)
        self._pending: Dict[asyncio.AbstractEventLoop, List[Tuple["asyncio.Future[Any]", Any]]] = {}
        self._closing = False
        self._closed: Optional["asyncio.Future[None]"] = None
        self._watcher: Optional[_Watcher] = None

    @classmethod
    async def open(
        cls,
        path: PathLike,
        *,
        durability: Durability = "full",
        read_only: bool = False,
        map_size: int = 0,
        max_readers: int = 0,
        clock: Optional[Clock] = None,
        writers: int = DEFAULT_WRITERS,
    ) -> "AsyncStore":
        """Open the store in a thread (an open may create files or read a
        log back) and return the AsyncStore."""
        make = functools.partial(
            cls,
            path,
            durability=durability,
            read_only=read_only,
            map_size=map_size,
            max_readers=max_readers,
            clock=clock,
            writers=writers,
        )
        loop = asyncio.get_running_loop()
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bindlog-open") as once:
            return await loop.run_in_executor(once, make)

    # ---- life cycle ----

    @property
    def store(self) -> Store:
        """The synchronous :class:`Store` underneath (its writes block)."""
        if self._store is None:
            raise StoreClosed("store is not open")
        return self._store

    @property
    def path(self) -> str:
        return self.store.path

    @property
    def durability(self) -> Durability:
        """The durability this handle was opened with."""
        return self.store.durability

    @property
    def read_only(self) -> bool:
        return self.store.read_only

    @property
    def writers(self) -> int:
        """The number of writer threads."""
        return self._writers

    @property
    def closed(self) -> bool:
        return self._closing or self.store.closed

    def _check(self) -> Store:
        """The store, or ForkError / StoreClosed before anything is touched."""
        store = self.store
        if store._epoch != _fork.epoch:
            raise store._fork_error()
        if self._closing or store.closed:
            raise StoreClosed(f"store {quote(store.path)} is closed")
        return store

    async def close(self) -> None:
        """Close the store: new calls raise StoreClosed at once; writes
        already submitted complete (this waits for them), waiting tasks
        (:meth:`wait`, :meth:`follow`) get StoreClosed, then the writer
        threads end and the handle is closed.  Idempotent; concurrent
        closes all wait for the one that runs.

        In a child process after ``fork`` it only forgets the parent's
        handle (see :meth:`Store.close`)."""
        store = self._store
        if store is None:
            return
        if store._epoch != _fork.epoch:
            store.close()
            return
        if self._closed is not None:
            await asyncio.shield(self._closed)
            return
        self._closed = asyncio.get_running_loop().create_future()
        self._closing = True
        try:
            # this loop's queued writes go in before the drain (another
            # loop's flush its own, or hear StoreClosed: _flush_writes)
            self._flush_writes(asyncio.get_running_loop())
            await self._pool.drain()  # the writes already submitted
            self._pool.shutdown()
            if self._watcher is not None:
                await self._watcher.stop()
            store.close()
        finally:
            self._closed.set_result(None)

    async def __aenter__(self) -> "AsyncStore":
        self._check()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        store = getattr(self, "_store", None)
        if pool is not None and store is not None and store._epoch == _fork.epoch:
            pool.shutdown()  # the threads end; the Store closes itself when collected

    def __repr__(self) -> str:
        if self._store is None:
            return "<bindlog.AsyncStore (not open)>"
        state = "closed" if self.closed else ("read-only" if self.read_only else "open")
        return f"<bindlog.AsyncStore {self._store.path!r} {state}, {self._writers} writers>"

    def __reduce__(self) -> Any:
        raise TypeError("a bindlog.AsyncStore cannot be pickled: open the store in each process")

    # ---- writes: run on the writer threads ----

    def _submit(self, fn: Callable[..., R], *args: Any) -> "asyncio.Future[R]":
        self._check()
        return self._pool.submit(fn, *args)

    def _queue_write(self, call: Any) -> "asyncio.Future[Result]":
        """A single-event write (a prepared call): queued until the end of
        the loop's turn, when every write the loop's tasks made in it goes
        to one writer thread (_flush_writes).  The caller has checked the
        store (_check)."""
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[Result]" = loop.create_future()
        pending = self._pending.get(loop)
        if pending is None:
            pending = self._pending[loop] = []
            loop.call_soon(self._flush_writes, loop)
        pending.append((fut, call))
        return fut

    def _flush_writes(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand the loop's queued writes to the writer pool, COALESCE_MAX
        per job.  One thread carrying many writes into the library as one
        batch costs one wake-up of one thread instead of one per write, so
        the writes of tasks that resumed together reach the library
        together and share a group commit (measured: docs/python.md)."""
        pending = self._pending.pop(loop, None)
        if not pending:
            return
        store = self._store
        parts: List[List[Tuple["asyncio.Future[Any]", Any]]] = [[]]
        size = 0
        for item in pending:
            n = _call_bytes(item[1])
            if parts[-1] and (len(parts[-1]) == COALESCE_MAX or size + n > COALESCE_BYTES):
                parts.append([])
                size = 0
            parts[-1].append(item)
            size += n
        for i, part in enumerate(parts):
            try:
                self._pool.submit_each([f for f, _ in part], _run_writes, store, [c for _, c in part])
            except RuntimeError:  # closed meanwhile (by a task of another loop)
                closed = f"store {quote(store.path if store else '')} is closed"
                for rest in parts[i:]:
                    for f, _ in rest:
                        if not f.done():
                            f.set_exception(StoreClosed(closed))
                return

    async def bind(
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

        A coroutine: the arguments are checked on the loop (a bad one raises
        TypeError / InvalidArgument before anything is queued); the write
        goes with the other writes of this turn of the loop to a writer
        thread and shares the library's group commits.  Cancelling the
        awaiting task after the write started does not undo it (a retry
        returns ALREADY).  StoreClosed after :meth:`close`."""
        store = self._check()
        return await self._queue_write(store._prep_bind(key, session_id, expect, reason, origin))

    async def new_session(
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

        A coroutine: the arguments are checked on the loop (a bad one raises
        TypeError / InvalidArgument before anything is queued); the write
        goes with the other writes of this turn of the loop to a writer
        thread and shares the library's group commits.  Cancelling the
        awaiting task after the write started does not undo it (a retry
        returns ALREADY).  StoreClosed after :meth:`close`."""
        store = self._check()
        return await self._queue_write(store._prep_new_session(key, session_id, reason, origin))

    async def split(
        self,
        key: Text,
        parent_id: Text,
        child_id: Text,
        run_generation: int = ANY_GENERATION,
        origin: Optional[Origin] = None,
    ) -> Result:
        """SPLIT: publish a compression split ``parent_id -> child_id``, a
        compare-and-swap.  In order: NotFound if the key is unbound; ALREADY
        if it is bound to `child_id` (the split is in -- but check
        ``result.is_current(run_generation)``: after a ``/stop`` the
        generation is higher and the run must stop); STALE if
        `run_generation` is not :data:`ANY_GENERATION` and differs from the
        key's generation; MOVED if the key is not bound to `parent_id`.
        Otherwise creates `child_id` (origin = `origin`, or a copy of the
        parent's when None), ends the parent with ``"compression"`` and binds
        the child; the generation is unchanged.

        Raises:
            NotFound: the key is unbound.
            Exists: `child_id` already exists.
            InvalidArgument: `parent_id` == `child_id`, or a bad value.

        A coroutine: the arguments are checked on the loop (a bad one raises
        TypeError / InvalidArgument before anything is queued); the write
        goes with the other writes of this turn of the loop to a writer
        thread and shares the library's group commits.  Cancelling the
        awaiting task after the write started does not undo it (a retry
        returns ALREADY).  StoreClosed after :meth:`close`."""
        store = self._check()
        return await self._queue_write(store._prep_split(key, parent_id, child_id, run_generation, origin))

    async def invalidate(self, key: Text, reason: Optional[Text] = None) -> Result:
        """INVALIDATE: ``/stop``.  Bumps the key's generation without moving
        it, so runs started before become STALE (and their retried splits
        ALREADY but not :meth:`~bindlog.Result.is_current`).

        Raises:
            NotFound: the key is unbound.

        A coroutine: the arguments are checked on the loop (a bad one raises
        TypeError / InvalidArgument before anything is queued); the write
        goes with the other writes of this turn of the loop to a writer
        thread and shares the library's group commits.  Cancelling the
        awaiting task after the write started does not undo it (a retry
        returns ALREADY).  StoreClosed after :meth:`close`."""
        store = self._check()
        return await self._queue_write(store._prep_key_event("invalidate", key, reason))

    async def unbind(self, key: Text, reason: Optional[Text] = None) -> Result:
        """UNBIND: idle expiry.  Ends the bound session with `reason`
        (default ``"unbind"``), leaves a tombstone, bumps the generation.
        ALREADY on a tombstone.

        Raises:
            NotFound: the key was never bound.

        A coroutine: the arguments are checked on the loop (a bad one raises
        TypeError / InvalidArgument before anything is queued); the write
        goes with the other writes of this turn of the loop to a writer
        thread and shares the library's group commits.  Cancelling the
        awaiting task after the write started does not undo it (a retry
        returns ALREADY).  StoreClosed after :meth:`close`."""
        store = self._check()
        return await self._queue_write(store._prep_key_event("unbind", key, reason))

    async def route(
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
        """Route one inbound message of `key` (see :meth:`Store.route`):
        ROUTED, CREATED or RESET, with the session the message goes to.

        A coroutine: the arguments and the policy are checked on the loop
        (a bad one raises before anything is queued); the call runs on one
        of the store's writer threads, so concurrent routes share the
        library's group commits, and of several routes of one key at a
        boundary exactly one RESETs.  StoreClosed after :meth:`close`."""
        store = self._check()
        call = store._prep_route(key, now, policy, mode, idle, at_hour, tz, daily_boundary_ms,
                                 fresh_session_id, origin)
        return await self._submit(store._route, call)

    async def expire(
        self,
        idle: Optional[Duration] = None,
        *,
        before: Optional[Now] = None,
        prefix: Optional[Text] = None,
        dry_run: bool = False,
        now: Optional[Now] = None,
    ) -> int:
        """Unbind idle keys (see :meth:`Store.expire`) on a writer thread;
        returns the count (with ``dry_run=True``, the count that would go)."""
        store = self._check()
        return await self._submit(store._expire, *store._prep_expire(idle, before, prefix, dry_run, now))

    async def apply_batch(self, events: Sequence[Event]) -> List[Result]:
        """Apply `events` in order in one write transaction, each seeing the
        ones before it.  STALE, MOVED and ALREADY do not abort the batch; an
        error in any event writes nothing and raises that error with
        ``exc.index`` set to the failing event's index.

        A coroutine: the events are checked on the loop, then the batch runs
        on a writer thread (alone: it is never merged with other writes).
        StoreClosed after :meth:`close`."""
        store = self._check()
        return await self._submit(store._batch, store._prep_batch(events))

    # ---- reads: synchronous ----

    def get(self, key: Text) -> Optional[Binding]:
        """The binding of `key`, or None when it routes nowhere (never bound,
        or unbound).  Synchronous: a read takes microseconds and never waits
        for a flush."""
        return self.store.get(key)

    def generation(self, key: Text) -> int:
        """The key's current generation, bound or not (0 if never seen).
        Synchronous."""
        return self.store.generation(key)

    def __getitem__(self, key: Text) -> Binding:
        """``store[key]``: the key's binding; KeyError when it routes nowhere."""
        return self._check()[key]

    def __len__(self) -> int:
        """``len(store)``: the number of keys bound to a session."""
        return len(self._check())

    def __bool__(self) -> bool:
        """An AsyncStore is true, even when empty."""
        return True

    def __iter__(self) -> Iterator[str]:
        """``for key in store``: the bound keys, in key byte order."""
        return iter(self._check())

    def __contains__(self, key: object) -> bool:
        """``key in store``: the key is bound to a session."""
        return key in self.store

    def snapshot(self) -> Snapshot:
        """Reads as of one head LSN (see :meth:`Store.snapshot`); synchronous."""
        return self._check().snapshot()

    def session(self, session_id: Text) -> Optional[Session]:
        """The session `session_id` with its origin, or None if unknown.
        Synchronous."""
        return self.store.session(session_id)

    def lineage(self, session_id: Text) -> Optional[Lineage]:
        """`session_id` with its ancestors (parent first) and direct
        children, or None if the session is unknown.  Synchronous."""
        return self.store.lineage(session_id)

    def ancestors(self, session_id: Text) -> Iterator[Session]:
        """The parent of `session_id`, its parent, ... up to the root (a
        generator; NotFound at the first ``next()`` for an unknown session)."""
        return self.store.ancestors(session_id)

    def children(self, session_id: Text) -> Iterator[Session]:
        """The direct children of `session_id` (a generator), in
        `Store.children`'s order."""
        return self.store.children(session_id)

    def history(self, key: Text) -> Iterator[Record]:
        """Every retained log record that touched `key`, oldest first (a
        generator over one snapshot: close or exhaust it promptly)."""
        return self.store.history(key)

    def log(self, from_lsn: int = 1, to_lsn: Optional[int] = None) -> Iterator[Record]:
        """Log records with ``from_lsn <= lsn <= to_lsn`` (None: to the head),
        oldest first, from one snapshot taken at the first ``next()`` (a
        generator: close or exhaust it promptly).  Compacted records are not
        there."""
        return self.store.log(from_lsn, to_lsn)

    def bindings(self) -> Iterator[Binding]:
        """Every binding, tombstones included (``binding.bound`` is False), in
        key byte order (a generator over one snapshot)."""
        return self.store.bindings()

    def sessions(self) -> Iterator[Session]:
        """Every session, in id byte order (a generator over one snapshot)."""
        return self.store.sessions()

    def stats(self) -> Stats:
        """Statistics from one snapshot (see :class:`~bindlog.Stats`: counts,
        the map, the write-ahead log's checkpoint_lsn, log_size, log_used)."""
        return self.store.stats()

    def digest(self) -> str:
        """The state digest, 32 lower-case hex digits: two stores with the
        same digest hold the same bindings and sessions."""
        return self.store.digest()

    def digest_at(self) -> Tuple[str, int]:
        """The state digest and the head LSN of its snapshot."""
        return self.store.digest_at()

    def lsn_at_time(self, time_ms: int) -> int:
        """The smallest LSN whose record's time is >= `time_ms` (head + 1 if
        none)."""
        return self.store.lsn_at_time(time_ms)

    # ---- the change feed ----

    def _watcher_here(self) -> _Watcher:
        loop = asyncio.get_running_loop()
        w = self._watcher
        if w is not None and w.loop is not loop:
            with w.lock:
                idle = w.thread is None and not w.waiters
            if not (idle or w.loop.is_closed()):
                raise RuntimeError("AsyncStore.wait/follow: tasks of another event loop are waiting on this store")
            w = None  # the other loop is done with it: start afresh on this one
        if w is None:
            w = self._watcher = _Watcher(self.store, loop)
        return w

    async def wait(self, after_lsn: int, timeout: Optional[float] = None) -> int:
        """Wait until the head LSN is greater than `after_lsn` or `timeout`
        seconds passed (None: no limit; 0: look once); return the head LSN
        seen (see :meth:`Store.wait`).  The loop is never blocked: the
        store's watcher thread does the sleeping."""
        try:
            after = _args.u64(after_lsn, "after_lsn")
            limit = _args.seconds(timeout, "timeout")
        except InvalidArgument as exc:
            raise exc._in_call("wait") from None
        store = self._check()
        head = store._wait_slice(after, 0)  # a look at the head: no sleep
        if head > after or limit == 0:
            return head
        watcher = self._watcher_here()
        if limit is None:
            return await watcher.wait(after)
        try:
            return await asyncio.wait_for(watcher.wait(after), limit)
        except asyncio.TimeoutError:
            return store._wait_slice(after, 0)

    def follow(self, from_lsn: int = 1, *, timeout: Optional[float] = None,
               until: Union[None, int, Literal["head"]] = None) -> AsyncIterator[Record]:
        """The change feed as an async iterator (see :meth:`Store.follow`)::

            async for rec in store.follow(from_lsn=store.stats().head_lsn + 1):
                ...

        Records are read on the loop's thread, 64 per snapshot; the waits in
        between are :meth:`wait`'s, so cancelling the consuming task stops
        it at once.  Ends after `timeout` seconds without a new record (None:
        never), or at `until`: ``"head"`` (the head when follow() is called)
        or an LSN, the last one yielded.  Raises StoreClosed when the store
        closes, NotFound if records it has not yielded yet were compacted
        away."""
        try:
            lsn = max(_args.u64(from_lsn, "from_lsn"), 1)
            limit = _args.seconds(timeout, "timeout")
        except InvalidArgument as exc:
            raise exc._in_call("follow") from None
        stop = self._check()._until(until)
        return self._follow(lsn, limit, stop)

    async def _follow(self, next_lsn: int, limit: Optional[float],
                      stop: Optional[int] = None) -> AsyncIterator[Record]:
        head = 0
        while True:
            if stop is not None and next_lsn > stop:
                return
            store = self._check()
            recs = store._read_after(next_lsn, ASYNC_FOLLOW_BATCH)
            if recs:
                for rec in recs:
                    if stop is not None and rec.lsn > stop:
                        return
                    next_lsn = rec.lsn + 1
                    yield rec
                continue
            if head >= next_lsn:
                store._check_gap(next_lsn, head)
                await asyncio.sleep(0.005)
            head = await self.wait(next_lsn - 1, limit)
            if head < next_lsn:
                return

    # ---- maintenance: on the writer threads ----

    async def check(self, progress: Optional[Progress] = None) -> CheckReport:
        """See :meth:`Store.check`; `progress` is called on a writer thread."""
        return await self._submit(self.store.check, progress)

    async def replay(
        self,
        out_dir: PathLike,
        to_lsn: Optional[int] = None,
        to_time_ms: Optional[int] = None,
        progress: Optional[Progress] = None,
    ) -> ReplayResult:
        """See :meth:`Store.replay`; `progress` is called on a writer thread."""
        return await self._submit(self.store.replay, out_dir, to_lsn, to_time_ms, progress)

    async def compact(self, keep_from_lsn: int, progress: Optional[Progress] = None) -> int:
        """See :meth:`Store.compact`; `progress` is called on a writer thread."""
        return await self._submit(self.store.compact, keep_from_lsn, progress)

    async def export(
        self,
        dest: Union[PathLike, BinaryIO],
        from_lsn: int = 1,
        progress: Optional[Progress] = None,
    ) -> int:
        """See :meth:`Store.export`; `progress` is called on a writer thread."""
        return await self._submit(self.store.export, dest, from_lsn, progress)

    async def import_(self, src: Union[PathLike, BinaryIO], progress: Optional[Progress] = None) -> int:
        """See :meth:`Store.import_`; `progress` is called on a writer thread."""
        return await self._submit(self.store.import_, src, progress)

    async def import_entries(
        self, entries: Iterable[ImportEntry], progress: Optional[Progress] = None
    ) -> List[ImportOutcome]:
        """See :meth:`Store.import_entries`; `progress` is called on a writer thread."""
        return await self._submit(self.store.import_entries, list(entries), progress)
