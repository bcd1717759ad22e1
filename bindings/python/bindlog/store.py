"""The :class:`Store`: a bindlog store opened through libbindlog.

A Store wraps one C handle (``bindlog *``).  Every method converts and checks
its arguments in Python first (``TypeError`` for wrong types,
:class:`~bindlog.InvalidArgument` -- a ``ValueError`` -- for bad values), so
bad input never reaches C, then calls the library with the GIL released.
"""
from __future__ import annotations

import ctypes
import io
import json
import os
import shutil
import tempfile
import threading
from ctypes import byref, c_size_t, c_uint64, c_ubyte, c_void_p
from typing import Any, BinaryIO, Callable, Iterator, List, Optional, Sequence, Tuple, Union

from . import _ffi
from .errors import InvalidArgument, NotFound, StoreClosed, error_for
from .types import (
    ANY_GENERATION,
    Binding,
    CheckReport,
    Event,
    EventType,
    Lineage,
    Origin,
    Outcome,
    Record,
    ReplayResult,
    Result,
    Session,
    Stats,
    Text,
)

__all__ = ["Store", "vacuum", "library_version"]

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
Progress = Callable[[int, int], None]

_DURABILITY = {
    "full": _ffi.DURABILITY_FULL,
    "normal": _ffi.DURABILITY_NORMAL,
    "none": _ffi.DURABILITY_NONE,
}
_DURABILITY_NAMES = {v: k for k, v in _DURABILITY.items()}
_OUTCOME_COLUMNS = ("applied", "already", "stale", "moved", "error")
_EVENT_NAMES = {t.value: t.name.lower() for t in EventType}

# ---- argument conversion ----------------------------------------------------


def _bytes_of(value: Any, what: str) -> bytes:
    if isinstance(value, str):
        try:
            return value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise InvalidArgument(_ffi.EINVAL, f"{what}: not encodable as UTF-8 ({exc})") from None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise TypeError(f"{what} must be str or bytes, not {type(value).__name__}")


def _has_control(b: bytes) -> bool:
    return any(c < 0x20 or c == 0x7F for c in b)


def _key(value: Any, what: str = "key") -> bytes:
    """A session key: 1..KEY_MAX bytes, no NUL."""
    b = _bytes_of(value, what)
    if not b:
        raise InvalidArgument(_ffi.EINVAL, f"{what} is empty")
    if len(b) > _ffi.KEY_MAX:
        raise InvalidArgument(_ffi.EINVAL, f"{what} is {len(b)} bytes, longer than {_ffi.KEY_MAX}")
    if b"\0" in b:
        raise InvalidArgument(_ffi.EINVAL, f"{what} contains a NUL byte")
    return b


def _id(value: Any, what: str = "session_id") -> bytes:
    """A session id: 1..ID_MAX bytes, no control bytes (0x00-0x1F, 0x7F)."""
    b = _bytes_of(value, what)
    if not b:
        raise InvalidArgument(_ffi.EINVAL, f"{what} is empty")
    if len(b) > _ffi.ID_MAX:
        raise InvalidArgument(_ffi.EINVAL, f"{what} is {len(b)} bytes, longer than {_ffi.ID_MAX}")
    if _has_control(b):
        raise InvalidArgument(_ffi.EINVAL, f"{what} contains a control character")
    return b


def _expect(value: Any) -> Optional[bytes]:
    """BIND's expected binding: None (no check), "" (only if unbound) or an id."""
    if value is None:
        return None
    b = _bytes_of(value, "expect")
    return b if not b else _id(b, "expect")


def _reason(value: Any) -> Optional[bytes]:
    """A reason: None (the default), or 0..REASON_MAX bytes without control bytes."""
    if value is None:
        return None
    b = _bytes_of(value, "reason")
    if len(b) > _ffi.REASON_MAX:
        raise InvalidArgument(_ffi.EINVAL, f"reason is {len(b)} bytes, longer than {_ffi.REASON_MAX}")
    if _has_control(b):
        raise InvalidArgument(_ffi.EINVAL, "reason contains a control character")
    return b


def _origin(value: Any) -> Optional[bytes]:
    """An origin: None (none given), bytes-like, str (UTF-8) or dict/list (JSON)."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        b = bytes(value)
    elif isinstance(value, str):
        b = value.encode("utf-8")
    elif isinstance(value, (dict, list)):
        try:
            b = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise TypeError(f"origin is not JSON-serialisable: {exc}") from None
    else:
        raise TypeError(
            f"origin must be bytes, str, dict or list, not {type(value).__name__}"
        )
    if len(b) > _ffi.ORIGIN_MAX:
        raise InvalidArgument(
            _ffi.EINVAL, f"origin is {len(b)} bytes, longer than {_ffi.ORIGIN_MAX}"
        )
    return b


def _u64(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < 0 or value > _ffi.UINT64_MAX:
        raise InvalidArgument(_ffi.EINVAL, f"{what} {value} is out of range 0..2**64-1")
    return value


def _generation(value: Any) -> int:
    return _u64(value, "run_generation")


def _s(b: Optional[bytes]) -> str:
    return b.decode("utf-8", "surrogateescape") if b else ""


def _fspath(path: Any) -> bytes:
    try:
        b = os.fsencode(path)
    except TypeError:
        raise TypeError(f"path must be str, bytes or os.PathLike, not {type(path).__name__}") from None
    if not b:
        raise InvalidArgument(_ffi.EINVAL, "path is empty")
    if b"\0" in b:
        raise InvalidArgument(_ffi.EINVAL, "path contains a NUL byte")
    return b


class _Progress:
    """A C progress callback around a Python callable; an exception raised by
    the callable is kept and re-raised once the C call returns."""

    def __init__(self, fn: Optional[Progress]) -> None:
        self.fn = fn
        self.error: Optional[BaseException] = None
        if fn is None:
            self.c = _ffi.progress_fn()  # NULL
        else:

            def call(_ctx: Any, done: int, total: int) -> None:
                if self.error is not None:
                    return
                try:
                    fn(done, total)
                except BaseException as exc:  # noqa: BLE001 - re-raised after the call
                    self.error = exc

            self.c = _ffi.progress_fn(call)

    def reraise(self) -> None:
        if self.error is not None:
            raise self.error


def library_version() -> str:
    """The loaded libbindlog's version string, e.g. ``"0.1.0"``."""
    return _ffi.load().bindlog_version().decode()


def vacuum(path: PathLike) -> Tuple[int, int]:
    """Rewrite the store in directory `path` to its live size; only while no
    writer has it open (:class:`~bindlog.Busy` otherwise).  Returns the data
    file's size before and after.  Raises NotImplementedError if the loaded
    library has no ``bindlog_vacuum``."""
    fn = _ffi.optional("bindlog_vacuum")
    p = _fspath(path)
    before, after = c_uint64(), c_uint64()
    rc = fn(p, byref(before), byref(after))
    if rc < 0:
        raise error_for(rc, f"vacuum {os.fsdecode(p)!r}")
    return before.value, after.value


# ---- iterators ---------------------------------------------------------------


class _CIter:
    """One C iterator, closed exactly once (by its generator or by Store.close)."""

    __slots__ = ("store", "ptr")

    def __init__(self, store: "Store", ptr: c_void_p) -> None:
        self.store = store
        self.ptr = ptr

    def close(self) -> None:
        store = self.store
        with store._cv:
            ptr, self.ptr = self.ptr, None
            store._iters.discard(self)
            if not ptr:
                return
            store._active += 1  # Store.close must wait for this iter_close
        try:
            store._lib.bindlog_iter_close(ptr)
        finally:
            store._leave()


# ---- the store ----------------------------------------------------------------


class Store:
    """An open bindlog store.

    ``Store(path, durability="full", read_only=False)`` opens (and unless
    read-only creates) the store in directory `path`.  Use it as a context
    manager or call :meth:`close`.  One Store may be shared by any number of
    threads: the library is thread-safe and the GIL is released during every
    call, and concurrent writes are grouped into one commit.  Several
    processes may open the same store at once (open it *in* each process:
    a Store cannot be pickled or inherited across ``fork``).

    Args:
        path: the store directory (created 0700 with missing parents).
        durability: ``"full"`` (an APPLIED outcome survives power loss),
            ``"normal"`` (survives a process crash) or ``"none"`` (tests, bulk
            loads).
        read_only: open read-only: writes raise :class:`~bindlog.ReadOnly`,
            a missing store raises :class:`~bindlog.NotFound`.
        map_size: initial LMDB map size in bytes (0: the default; the map
            grows by itself).
        max_readers: LMDB reader slots (0: the default, 126).

    Raises:
        NotFound, NotAStore, VersionMismatch, PermissionDenied, Corrupt,
        BindlogIOError, ...: the store cannot be opened.
        LibraryNotFoundError (an ImportError): libbindlog cannot be loaded.

    Methods called after :meth:`close` raise :class:`~bindlog.StoreClosed`.
    """

    def __init__(
        self,
        path: PathLike,
        durability: str = "full",
        read_only: bool = False,
        *,
        map_size: int = 0,
        max_readers: int = 0,
    ) -> None:
        self._h: Optional[c_void_p] = None  # set first: __del__ may run on failure
        self._cv = threading.Condition(threading.Lock())
        self._active = 0
        self._closing = False
        self._iters: set = set()
        p = _fspath(path)
        if not isinstance(durability, str):
            raise TypeError(f"durability must be a str, not {type(durability).__name__}")
        if durability not in _DURABILITY:
            raise InvalidArgument(
                _ffi.EINVAL, f"durability must be 'full', 'normal' or 'none', not {durability!r}"
            )
        if not isinstance(read_only, bool):
            raise TypeError(f"read_only must be a bool, not {type(read_only).__name__}")
        _u64(map_size, "map_size")
        if isinstance(max_readers, bool) or not isinstance(max_readers, int):
            raise TypeError("max_readers must be an int")
        if not 0 <= max_readers <= 0xFFFFFFFF:
            raise InvalidArgument(_ffi.EINVAL, "max_readers is out of range")
        self._lib = _ffi.load()
        opts = _ffi.bindlog_options()
        opts.version = _ffi.OPTIONS_VERSION
        opts.durability = _DURABILITY[durability]
        opts.read_only = 1 if read_only else 0
        opts.map_size = map_size
        opts.max_readers = max_readers
        h = c_void_p()
        rc = self._lib.bindlog_open(byref(h), p, byref(opts))
        if rc < 0:
            raise error_for(rc, f"cannot open store {os.fsdecode(p)!r}")
        self._h = h
        self._path = os.fsdecode(p)
        self._durability = durability
        self._read_only = read_only

    # ---- life cycle ----

    @property
    def path(self) -> str:
        """The store directory, as given."""
        return self._path

    @property
    def durability(self) -> str:
        return self._durability

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def closed(self) -> bool:
        return self._h is None or self._closing

    def close(self) -> None:
        """Close the store.  Waits for calls in progress in other threads,
        closes iterators (generators) still open, then the handle.  Idempotent."""
        with self._cv:
            if self._h is None or self._closing:
                return
            self._closing = True
            while self._active:
                self._cv.wait()
            iters = list(self._iters)
        for it in iters:
            it.close()
        with self._cv:
            # a generator may have been closing its iterator meanwhile
            while self._active:
                self._cv.wait()
            h, self._h = self._h, None
        self._lib.bindlog_close(h)

    def __enter__(self) -> "Store":
        self._enter()
        self._leave()
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

    def _enter(self) -> c_void_p:
        with self._cv:
            if self._h is None or self._closing:
                raise StoreClosed()
            self._active += 1
            return self._h

    def _leave(self) -> None:
        with self._cv:
            self._active -= 1
            if self._active == 0:
                self._cv.notify_all()

    # ---- events ----

    def _event(self, name: str, fn: Callable, *args: Any) -> Result:
        out = _ffi.bindlog_result()
        h = self._enter()
        try:
            rc = fn(h, *args, byref(out))
        finally:
            self._leave()
        if rc < 0:
            raise error_for(rc, name)
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
        k, sid, exp, why, org = _key(key), _id(session_id), _expect(expect), _reason(reason), _origin(origin)
        return self._event(
            "bind", self._lib.bindlog_bind, k, sid, exp, why, org, len(org) if org else 0
        )

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
        k, sid, why, org = _key(key), _id(session_id), _reason(reason), _origin(origin)
        return self._event(
            "new_session", self._lib.bindlog_new_session, k, sid, why, org, len(org) if org else 0
        )

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
        k, par, child = _key(key), _id(parent_id, "parent_id"), _id(child_id, "child_id")
        gen, org = _generation(run_generation), _origin(origin)
        if par == child:
            raise InvalidArgument(_ffi.EINVAL, "parent_id and child_id are the same session")
        return self._event(
            "split", self._lib.bindlog_split, k, par, child, gen, org, len(org) if org else 0
        )

    def invalidate(self, key: Text, reason: Optional[Text] = None) -> Result:
        """INVALIDATE: ``/stop``.  Bumps the key's generation without moving
        it, so runs started before become STALE.

        Raises:
            NotFound: the key is unbound.
        """
        k, why = _key(key), _reason(reason)
        return self._event("invalidate", self._lib.bindlog_invalidate, k, why)

    def unbind(self, key: Text, reason: Optional[Text] = None) -> Result:
        """UNBIND: idle expiry.  Ends the bound session with `reason`
        (default ``"unbind"``), leaves a tombstone, bumps the generation.
        ALREADY on a tombstone.

        Raises:
            NotFound: the key was never bound.
        """
        k, why = _key(key), _reason(reason)
        return self._event("unbind", self._lib.bindlog_unbind, k, why)

    def apply_batch(self, events: Sequence[Event]) -> List[Result]:
        """Apply `events` in order in one write transaction, each seeing the
        ones before it.  STALE, MOVED and ALREADY do not abort the batch; an
        error in any event writes nothing and raises that error with
        ``exc.index`` set to the failing event's index."""
        if isinstance(events, (str, bytes)) or not hasattr(events, "__iter__"):
            raise TypeError("events must be a sequence of bindlog.Event")
        events = list(events)
        n = len(events)
        arr = (_ffi.bindlog_event * max(n, 1))()
        keep: List[bytes] = []  # keep every buffer alive during the call
        for i, ev in enumerate(events):
            if not isinstance(ev, Event):
                raise TypeError(f"events[{i}] must be a bindlog.Event, not {type(ev).__name__}")
            c = arr[i]
            try:
                t = EventType(ev.type)
            except ValueError:
                raise InvalidArgument(_ffi.EINVAL, f"events[{i}]: unknown type {ev.type!r}", i) from None
            try:
                c.type = int(t)
                c.key = _key(ev.key)
                if t in (EventType.BIND, EventType.NEW_SESSION):
                    c.session_id = _id(ev.session_id)
                elif t is EventType.SPLIT:
                    c.session_id = _id(ev.session_id, "child_id")
                    c.expect = _id(ev.expect, "parent_id")
                    if c.expect == c.session_id:
                        raise InvalidArgument(_ffi.EINVAL, "parent_id and child_id are the same session")
                    c.generation = _generation(ev.generation)
                if t is EventType.BIND:
                    c.expect = _expect(ev.expect)
                if t is not EventType.SPLIT:
                    c.reason = _reason(ev.reason)
                if t in (EventType.BIND, EventType.NEW_SESSION, EventType.SPLIT):
                    org = _origin(ev.origin)
                    if org is not None:
                        buf = ctypes.create_string_buffer(org, len(org) or 1)
                        keep.append(buf)  # type: ignore[arg-type]
                        c.origin = ctypes.cast(buf, c_void_p)
                        c.origin_len = len(org)
            except InvalidArgument as exc:
                exc.index = i
                exc.message = f"events[{i}]: {exc.message}"
                raise
            except TypeError as exc:
                raise TypeError(f"events[{i}]: {exc}") from None
        out = (_ffi.bindlog_result * max(n, 1))()
        err = c_size_t()
        h = self._enter()
        try:
            rc = self._lib.bindlog_apply_batch(h, arr, n, out, byref(err))
        finally:
            self._leave()
        if rc < 0:
            idx = err.value if err.value < n else None
            raise error_for(rc, "apply_batch", idx)
        return [Result._from_c(out[i].outcome, out[i]) for i in range(n)]

    # ---- reads ----

    def _get(self, key: Text) -> Tuple[int, "_ffi.bindlog_binding"]:
        k = _key(key)
        out = _ffi.bindlog_binding()
        h = self._enter()
        try:
            rc = self._lib.bindlog_get(h, k, byref(out))
        finally:
            self._leave()
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
        return self._get(key)[1].generation

    def __contains__(self, key: object) -> bool:
        """``key in store``: the key is bound to a session."""
        return self.get(key) is not None  # type: ignore[arg-type]

    def session(self, session_id: Text) -> Optional[Session]:
        """The session `session_id` with its origin, or None if unknown."""
        sid = _id(session_id)
        out = _ffi.bindlog_session()
        cap = 1024
        while True:
            buf = ctypes.create_string_buffer(cap)
            h = self._enter()
            try:
                rc = self._lib.bindlog_session_get(h, sid, byref(out), buf, cap)
            finally:
                self._leave()
            if rc == _ffi.ENOTFOUND:
                return None
            if rc < 0:
                raise error_for(rc, "session")
            if out.origin_len <= cap:
                return Session._from_c(out, buf.raw[: out.origin_len])
            cap = out.origin_len  # grew since: read again with room for it

    # ---- iteration ----

    def _iterate(self, opener: Callable[[c_void_p, Any], int], step: Callable[[c_void_p], Any]) -> Iterator[Any]:
        """A generator over a C iterator: opened on the first next(), closed
        when the generator finishes, is closed, is garbage-collected, or the
        Store closes."""
        it: Optional[_CIter] = None
        try:
            h = self._enter()
            try:
                ptr = c_void_p()
                rc = opener(h, byref(ptr))
                if rc < 0:
                    raise error_for(rc, "iterator")
                it = _CIter(self, ptr)
                with self._cv:
                    self._iters.add(it)
            finally:
                self._leave()
            while True:
                self._enter()
                try:
                    if it.ptr is None:
                        raise StoreClosed()
                    item = step(it.ptr)
                finally:
                    self._leave()
                if item is None:
                    return
                yield item
        finally:
            if it is not None:
                it.close()

    def _records(self, opener: Callable) -> Iterator[Record]:
        rec = _ffi.bindlog_record()
        lib = self._lib

        def step(ptr: c_void_p) -> Optional[Record]:
            rc = lib.bindlog_iter_next_record(ptr, byref(rec))
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
                _s(ctypes.string_at(rec.key, rec.key_len)),
                _s(rec.session_id),
                _s(rec.other_id),
                _s(rec.reason),
                origin,
            )

        return self._iterate(opener, step)

    def _sessions(self, opener: Callable) -> Iterator[Session]:
        out = _ffi.bindlog_session()
        buf = ctypes.create_string_buffer(_ffi.ORIGIN_MAX)
        lib = self._lib

        def step(ptr: c_void_p) -> Optional[Session]:
            rc = lib.bindlog_iter_next_session(ptr, byref(out), buf, _ffi.ORIGIN_MAX)
            if rc < 0:
                raise error_for(rc, "session iterator")
            if rc == 0:
                return None
            return Session._from_c(out, buf.raw[: min(out.origin_len, _ffi.ORIGIN_MAX)])

        return self._iterate(opener, step)

    def log(self, from_lsn: int = 1, to_lsn: Optional[int] = None) -> Iterator[Record]:
        """Log records with ``from_lsn <= lsn <= to_lsn`` (None: to the head),
        oldest first, from one snapshot taken at the first ``next()``.
        Compacted records are not there.  Close the generator (or exhaust
        it) promptly: an open snapshot keeps LMDB from reusing pages."""
        lo = _u64(from_lsn, "from_lsn")
        hi = _ffi.UINT64_MAX if to_lsn is None else _u64(to_lsn, "to_lsn")
        self._check_open()
        return self._records(lambda h, p: self._lib.bindlog_log_iter(h, lo, hi, p))

    def history(self, key: Text) -> Iterator[Record]:
        """Every retained log record that touched `key`, oldest first."""
        k = _key(key)
        self._check_open()
        return self._records(lambda h, p: self._lib.bindlog_history_iter(h, k, p))

    def bindings(self) -> Iterator[Binding]:
        """Every binding, tombstones included (``binding.bound`` is False),
        in key byte order."""
        self._check_open()
        out = _ffi.bindlog_binding()
        lib = self._lib

        def step(ptr: c_void_p) -> Optional[Binding]:
            rc = lib.bindlog_iter_next_binding(ptr, byref(out))
            if rc < 0:
                raise error_for(rc, "bindings iterator")
            return Binding._from_c(out) if rc else None

        return self._iterate(lambda h, p: lib.bindlog_bindings_iter(h, p), step)

    def sessions(self) -> Iterator[Session]:
        """Every session, in id byte order."""
        self._check_open()
        return self._sessions(lambda h, p: self._lib.bindlog_sessions_iter(h, p))

    def children(self, session_id: Text) -> Iterator[Session]:
        """The direct children of `session_id` (split from or opened after
        it), in id order.  An unknown session has none."""
        sid = _id(session_id)
        self._check_open()
        return self._sessions(lambda h, p: self._lib.bindlog_children_iter(h, sid, p))

    def ancestors(self, session_id: Text) -> Iterator[Session]:
        """The parent of `session_id`, its parent, ... up to the root.
        Raises NotFound (at the first ``next()``) for an unknown session."""
        sid = _id(session_id)
        self._check_open()
        return self._sessions(lambda h, p: self._lib.bindlog_ancestors_iter(h, sid, p))

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

    def _check_open(self) -> None:
        self._enter()
        self._leave()

    # ---- statistics, digest ----

    def stats(self) -> Stats:
        """Statistics from one snapshot (see :class:`~bindlog.Stats`)."""
        out = _ffi.bindlog_stats()
        h = self._enter()
        try:
            rc = self._lib.bindlog_stats_get(h, byref(out))
        finally:
            self._leave()
        if rc < 0:
            raise error_for(rc, "stats")
        applied = {name: out.applied[t] for t, name in _EVENT_NAMES.items()}
        events = {
            name: {col: out.events[t][i] for i, col in enumerate(_OUTCOME_COLUMNS)}
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
        )

    def digest_at(self) -> Tuple[str, int]:
        """The state digest (32 hex digits) and the head LSN of its snapshot."""
        d = (c_ubyte * _ffi.DIGEST_SIZE)()
        head = c_uint64()
        h = self._enter()
        try:
            rc = self._lib.bindlog_digest(h, d, byref(head))
        finally:
            self._leave()
        if rc < 0:
            raise error_for(rc, "digest")
        return bytes(d).hex(), head.value

    def digest(self) -> str:
        """The state digest, 32 lower-case hex digits: two stores with the
        same digest hold the same bindings and sessions."""
        return self.digest_at()[0]

    # ---- maintenance (bound lazily: NotImplementedError if missing) ----

    def _maint(self, name: str, fn: Callable, *args: Any, progress: Optional[Progress] = None) -> int:
        cb = _Progress(progress)
        h = self._enter()
        try:
            rc = fn(h, *args, cb.c, None)
        finally:
            self._leave()
        cb.reraise()
        return rc

    def check(self, progress: Optional[Progress] = None) -> CheckReport:
        """Verify one snapshot: checksums, LSN density, replay == state.
        Returns a report (``report.ok``); raises only if the check could not
        run.  `progress(done, total)` is called now and then."""
        fn = _ffi.optional("bindlog_check")
        out = _ffi.bindlog_check_report()
        rc = self._maint("check", fn, byref(out), progress=progress)
        if rc < 0:
            raise error_for(rc, "check")
        return CheckReport(
            out.problems,
            out.records,
            out.head_lsn,
            out.first_bad_lsn,
            _s(out.first_bad_key),
            out.message.decode("utf-8", "replace"),
            bytes(out.state_digest).hex(),
            bytes(out.replay_digest).hex(),
        )

    def replay(
        self,
        out_dir: PathLike,
        to_lsn: Optional[int] = None,
        to_time_ms: Optional[int] = None,
        progress: Optional[Progress] = None,
    ) -> ReplayResult:
        """Rebuild the state from the log (up to `to_lsn` / `to_time_ms`,
        None for everything) into a new store at `out_dir`, which must not
        exist or be empty.  Returns its digest and the last LSN replayed."""
        fn = _ffi.optional("bindlog_replay")
        p = _fspath(out_dir)
        lsn = _ffi.UINT64_MAX if to_lsn is None else _u64(to_lsn, "to_lsn")
        if to_time_ms is None:
            t = _ffi.INT64_MAX
        elif isinstance(to_time_ms, bool) or not isinstance(to_time_ms, int):
            raise TypeError("to_time_ms must be an int")
        else:
            t = to_time_ms
        d = (c_ubyte * _ffi.DIGEST_SIZE)()
        last = c_uint64()
        rc = self._maint("replay", fn, p, lsn, t, d, byref(last), progress=progress)
        if rc < 0:
            raise error_for(rc, f"replay into {os.fsdecode(p)!r}")
        return ReplayResult(os.fsdecode(p), bytes(d).hex(), last.value)

    def lsn_at_time(self, time_ms: int) -> int:
        """The smallest LSN whose record's time is >= `time_ms` (head + 1 if none)."""
        fn = _ffi.optional("bindlog_lsn_at_time")
        if isinstance(time_ms, bool) or not isinstance(time_ms, int):
            raise TypeError("time_ms must be an int")
        out = c_uint64()
        h = self._enter()
        try:
            rc = fn(h, time_ms, byref(out))
        finally:
            self._leave()
        if rc < 0:
            raise error_for(rc, "lsn_at_time")
        return out.value

    def compact(self, keep_from_lsn: int, progress: Optional[Progress] = None) -> int:
        """Fold every record with ``lsn < keep_from_lsn`` into the base image
        and drop it (online).  Returns the number of records removed."""
        fn = _ffi.optional("bindlog_compact")
        keep = _u64(keep_from_lsn, "keep_from_lsn")
        removed = c_uint64()
        rc = self._maint("compact", fn, keep, byref(removed), progress=progress)
        if rc < 0:
            raise error_for(rc, "compact")
        return removed.value

    def export(
        self,
        dest: Union[PathLike, BinaryIO],
        from_lsn: int = 1,
        progress: Optional[Progress] = None,
    ) -> int:
        """Write a portable, checksummed stream of the store to `dest`: a
        path (created or truncated) or a binary file object opened for
        writing (written at its current position).  ``from_lsn > 1`` makes
        an incremental stream.  Returns the number of records written."""
        fn = _ffi.optional("bindlog_export")
        lsn = _u64(from_lsn, "from_lsn")
        records = c_uint64()

        def run(fd: int) -> None:
            rc = self._maint("export", fn, lsn, fd, byref(records), progress=progress)
            if rc < 0:
                raise error_for(rc, "export")

        if isinstance(dest, (str, bytes, os.PathLike)):
            with open(_fspath(dest), "wb") as f:
                run(f.fileno())
                os.fsync(f.fileno())
            return records.value
        if not hasattr(dest, "write"):
            raise TypeError("dest must be a path or a binary file object")
        fd = _fileno(dest)
        if fd is None:  # BytesIO and the like: go through a temporary file
            with tempfile.TemporaryFile() as tmp:
                run(tmp.fileno())
                tmp.seek(0)
                shutil.copyfileobj(tmp, dest)
            return records.value
        dest.flush()
        run(fd)
        _resync(dest, fd)
        return records.value

    def import_(self, src: Union[PathLike, BinaryIO], progress: Optional[Progress] = None) -> int:
        """Read a stream written by :meth:`export` from `src` (a path or a
        binary file object, read from its current position): a full stream
        into an empty store restores it, an incremental one starting at
        head + 1 appends.  A torn or altered stream is refused whole with
        Corrupt (``exc.offset`` = the byte offset of the problem).  Returns
        the number of records applied."""
        fn = _ffi.optional("bindlog_import")
        records = c_uint64()
        err_off = c_uint64()

        def run(fd: int) -> None:
            rc = self._maint("import", fn, fd, byref(records), byref(err_off), progress=progress)
            if rc < 0:
                exc = error_for(rc, f"import (stream offset {err_off.value})")
                exc.offset = err_off.value  # type: ignore[attr-defined]
                raise exc

        if isinstance(src, (str, bytes, os.PathLike)):
            with open(_fspath(src), "rb") as f:
                run(f.fileno())
            return records.value
        if not hasattr(src, "read"):
            raise TypeError("src must be a path or a binary file object")
        fd = _fileno(src)
        if fd is None:
            with tempfile.TemporaryFile() as tmp:
                shutil.copyfileobj(src, tmp)
                tmp.flush()
                tmp.seek(0)
                run(tmp.fileno())
            return records.value
        if src.seekable():
            os.lseek(fd, src.tell(), os.SEEK_SET)  # drop what Python buffered ahead
        run(fd)
        _resync(src, fd)
        return records.value


def _fileno(f: Any) -> Optional[int]:
    try:
        return f.fileno()
    except (AttributeError, io.UnsupportedOperation, OSError):
        return None


def _resync(f: Any, fd: int) -> None:
    """After C moved the descriptor's offset, move the file object there too."""
    try:
        if f.seekable():
            f.seek(os.lseek(fd, 0, os.SEEK_CUR))
    except (OSError, ValueError):
        pass
