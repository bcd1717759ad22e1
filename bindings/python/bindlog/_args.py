"""Argument conversion and checks shared by Store and AsyncStore (private).

Every public method converts its arguments here before anything reaches C:
a wrong type raises ``TypeError``, a bad value
:class:`~bindlog.InvalidArgument` (a ``ValueError``) whose message says which
argument and why; the method then prefixes the call and its subject
(:meth:`BindlogError._in_call`), so the message reads like the library's
own: ``bind agent:main:x: session_id contains a control character``.
"""
from __future__ import annotations

import json
import os
import re
import time
import warnings
from typing import Any, Callable, Optional, Union

from . import _ffi
from .errors import InvalidArgument

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
#: ``progress(done, total)`` of the long maintenance calls.
Progress = Callable[[int, int], None]
#: A clock: a callable returning milliseconds since the Unix epoch.
Clock = Callable[[], int]

DURABILITY = {
    "full": _ffi.DURABILITY_FULL,
    "normal": _ffi.DURABILITY_NORMAL,
    "none": _ffi.DURABILITY_NONE,
}


def bytes_of(value: Any, what: str) -> bytes:
    if isinstance(value, str):
        try:
            return value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise InvalidArgument(_ffi.EINVAL, f"{what}: not encodable as UTF-8 ({exc})") from None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise TypeError(f"{what} must be str or bytes, not {type(value).__name__}")


_CONTROL = re.compile(b"[\\x00-\\x1f\\x7f]")


def has_control(b: bytes) -> bool:
    """Whether b holds a control byte (0x00-0x1F, 0x7F).  A regular
    expression: a loop over the bytes in Python cost an AsyncStore write
    several microseconds of the event loop's time."""
    return _CONTROL.search(b) is not None


def key(value: Any, what: str = "key") -> bytes:
    """A session key: 1..KEY_MAX bytes, no NUL."""
    b = bytes_of(value, what)
    if not b:
        raise InvalidArgument(_ffi.EINVAL, f"{what} is empty")
    if len(b) > _ffi.KEY_MAX:
        raise InvalidArgument(_ffi.EINVAL, f"{what} is {len(b)} bytes, longer than {_ffi.KEY_MAX}")
    if b"\0" in b:
        raise InvalidArgument(_ffi.EINVAL, f"{what} contains a NUL byte")
    return b


def sid(value: Any, what: str = "session_id") -> bytes:
    """A session id: 1..ID_MAX bytes, no control bytes (0x00-0x1F, 0x7F)."""
    b = bytes_of(value, what)
    if not b:
        raise InvalidArgument(_ffi.EINVAL, f"{what} is empty")
    if len(b) > _ffi.ID_MAX:
        raise InvalidArgument(_ffi.EINVAL, f"{what} is {len(b)} bytes, longer than {_ffi.ID_MAX}")
    if has_control(b):
        raise InvalidArgument(_ffi.EINVAL, f"{what} contains a control character")
    return b


def expect(value: Any) -> Optional[bytes]:
    """BIND's expected binding: None (no check), "" (only if unbound) or an id."""
    if value is None:
        return None
    b = bytes_of(value, "expect")
    return b if not b else sid(b, "expect")


def reason(value: Any) -> Optional[bytes]:
    """A reason: None (the default), or 0..REASON_MAX bytes without control bytes."""
    if value is None:
        return None
    b = bytes_of(value, "reason")
    if len(b) > _ffi.REASON_MAX:
        raise InvalidArgument(_ffi.EINVAL, f"reason is {len(b)} bytes, longer than {_ffi.REASON_MAX}")
    if has_control(b):
        raise InvalidArgument(_ffi.EINVAL, "reason contains a control character")
    return b


def origin(value: Any) -> Optional[bytes]:
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
        raise TypeError(f"origin must be bytes, str, dict or list, not {type(value).__name__}")
    if len(b) > _ffi.ORIGIN_MAX:
        raise InvalidArgument(_ffi.EINVAL, f"origin is {len(b)} bytes, longer than {_ffi.ORIGIN_MAX}")
    return b


def u64(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < 0 or value > _ffi.UINT64_MAX:
        raise InvalidArgument(_ffi.EINVAL, f"{what} {value} is out of range 0..2**64-1")
    return value


def i64(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not -(2**63) <= value <= _ffi.INT64_MAX:
        raise InvalidArgument(_ffi.EINVAL, f"{what} {value} is out of range of a 64-bit time")
    return value


def seconds(value: Any, what: str) -> Optional[float]:
    """A timeout in seconds: None (none) or a number >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds or None, not {type(value).__name__}")
    if not value >= 0:  # also refuses NaN
        raise InvalidArgument(_ffi.EINVAL, f"{what} {value!r} is not a number of seconds >= 0")
    return float(value)


def text(b: Optional[bytes]) -> str:
    return b.decode("utf-8", "surrogateescape") if b else ""


def fspath(path: Any) -> bytes:
    try:
        b = os.fsencode(path)
    except TypeError:
        raise TypeError(f"path must be str, bytes or os.PathLike, not {type(path).__name__}") from None
    if not b:
        raise InvalidArgument(_ffi.EINVAL, "path is empty")
    if b"\0" in b:
        raise InvalidArgument(_ffi.EINVAL, "path contains a NUL byte")
    return b


def durability(value: Any) -> int:
    if not isinstance(value, str):
        raise TypeError(f"durability must be a str, not {type(value).__name__}")
    if value not in DURABILITY:
        raise InvalidArgument(_ffi.EINVAL, f"durability must be 'full', 'normal' or 'none', not {value!r}")
    return DURABILITY[value]


class Callback:
    """A C progress callback around a Python callable; an exception raised by
    the callable is kept and re-raised once the C call returns."""

    def __init__(self, fn: Optional[Progress]) -> None:
        self.error: Optional[BaseException] = None
        if fn is None:
            self.c = _ffi.progress_fn(0)  # NULL
            return
        if not callable(fn):
            raise TypeError(f"progress must be callable, not {type(fn).__name__}")
        user = fn

        def call(_ctx: Any, done: int, total: int) -> None:
            if self.error is not None:
                return
            try:
                user(done, total)
            except BaseException as exc:  # noqa: BLE001 - re-raised after the call
                self.error = exc

        self.c = _ffi.progress_fn(call)

    def reraise(self) -> None:
        if self.error is not None:
            raise self.error


class ClockCallback:
    """The C clock (``bindlog_options.clock_ms``) around a Python callable.

    The library calls it from whichever thread commits the event (the group
    commit's leader), inside the write transaction.  It must return an
    ``int`` of milliseconds since the Unix epoch; if it raises or returns
    something else, the event gets the system clock's time instead and a
    ``RuntimeWarning`` says why (an exception cannot travel through C back
    to the caller, whose event may be someone else's commit)."""

    def __init__(self, fn: Clock) -> None:
        if not callable(fn):
            raise TypeError(f"clock must be callable, not {type(fn).__name__}")

        def call(_ctx: Any) -> int:
            try:
                ms = fn()
                if isinstance(ms, bool) or not isinstance(ms, int):
                    raise TypeError(f"clock returned {type(ms).__name__}, not int")
                if not -(2**63) <= ms <= _ffi.INT64_MAX:
                    raise ValueError(f"clock returned {ms}, out of range of a 64-bit time")
                return ms
            except Exception as exc:  # noqa: BLE001 - reported, system time used
                warnings.warn(
                    f"bindlog: the store's clock failed ({exc!r}); the event was given the "
                    "system clock's time",
                    RuntimeWarning,
                    stacklevel=1,
                )
                return time.time_ns() // 1_000_000

        self.c = _ffi.clock_fn(call)
