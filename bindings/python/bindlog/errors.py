"""Exceptions raised by the bindlog package.

Every error code of the C library becomes a subclass of :class:`BindlogError`
carrying ``code`` (the negative ``BINDLOG_E*`` value) and ``message``: the
library's own account of the failure (``bindlog_last_error()``), which names
the call, its subject and what went wrong, e.g. ``split agent:main:x: key is
not bound``.  Values the binding refuses itself, before calling C, get the
same form (``bind agent:main:x: session_id contains a control character``).
The outcomes ALREADY, STALE and MOVED are *not* errors: they come back as
:class:`bindlog.Outcome` values in a :class:`bindlog.Result`.
"""
from __future__ import annotations

import errno as _errno
from typing import Any, Dict, Optional, Tuple, Type

from . import _ffi

__all__ = [
    "BindlogError",
    "NotFound",
    "InvalidArgument",
    "Exists",
    "Conflict",
    "Corrupt",
    "VersionMismatch",
    "BindlogIOError",
    "NoSpace",
    "OutOfMemory",
    "Busy",
    "ReadOnly",
    "NotAStore",
    "PermissionDenied",
    "Panic",
    "NotSupported",
    "StoreClosed",
    "ForkError",
    "error_for",
    "quote",
]


class BindlogError(Exception):
    """Base class of every bindlog error.

    Attributes:
        code: the C error code (negative ``BINDLOG_E*``), or ``None`` for
            errors raised by the binding itself (:class:`StoreClosed`).
        name: the symbolic name, e.g. ``"BINDLOG_ENOTFOUND"``.
        message: what failed and why: the call, its subject (a key, a
            session, a path) and the detail, as ``bindlog_last_error()``
            gave it.
        index: for :meth:`bindlog.Store.apply_batch`, the index of the event
            that failed; otherwise ``None``.
    """

    code: Optional[int] = None
    name: str = "BINDLOG_UNKNOWN"

    def __init__(self, code: Optional[int], message: str, index: Optional[int] = None) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.index = index
        if code is not None:
            self.name = _NAMES.get(code, "BINDLOG_UNKNOWN")

    def __reduce__(self) -> Tuple[Any, ...]:  # picklable (multiprocessing)
        return (self.__class__, (self.code, self.message, self.index))

    def _in_call(self, call: str, subject: Any = None) -> "BindlogError":
        """Prefix the message with the call and its subject, as the C
        library does (``"split agent:main:x: ..."``); returns self."""
        where = call if subject is None else f"{call} {quote(subject)}"
        self.message = f"{where}: {self.message}"
        self.args = (self.code, self.message)
        return self

    def __str__(self) -> str:
        where = f" (batch event {self.index})" if self.index is not None else ""
        return f"{self.message} [{self.name}]{where}"


class NotFound(BindlogError, LookupError):
    """BINDLOG_ENOTFOUND: no such key, session, store or record."""


class InvalidArgument(BindlogError, ValueError):
    """BINDLOG_EINVAL: a bad argument.  Also a :class:`ValueError`; the
    binding raises it itself, before calling C, for values it can check."""


class Exists(BindlogError):
    """BINDLOG_EEXIST: the session id already exists."""


class Conflict(BindlogError):
    """BINDLOG_ECONFLICT: the session is the live binding of another key."""


class Corrupt(BindlogError):
    """BINDLOG_ECORRUPT: damaged data (checksum, length or encoding)."""


class VersionMismatch(BindlogError):
    """BINDLOG_EVERSION: written by a newer, unsupported format."""


class _OSErrorMixin(BindlogError, OSError):
    """A BindlogError that is also an :class:`OSError` with a POSIX
    ``errno`` (``strerror`` is the library's message, ``filename`` None),
    so ``except OSError`` catches a full disk as it does for a file write."""

    posix_errno: int = _errno.EIO

    def __init__(self, code: Optional[int], message: str, index: Optional[int] = None) -> None:
        BindlogError.__init__(self, code, message, index)
        self.errno = self.posix_errno
        self.strerror = message

    def __str__(self) -> str:
        return BindlogError.__str__(self)


class BindlogIOError(_OSErrorMixin):
    """BINDLOG_EIO: an I/O error; the operation did not happen.  Also an
    :class:`OSError` with ``errno`` EIO."""

    posix_errno = _errno.EIO


class NoSpace(_OSErrorMixin):
    """BINDLOG_ENOSPC: no space left on the device or in the map.  Also an
    :class:`OSError` with ``errno`` ENOSPC."""

    posix_errno = _errno.ENOSPC


class OutOfMemory(BindlogError):
    """BINDLOG_ENOMEM: out of memory."""


class Busy(BindlogError):
    """BINDLOG_EBUSY: resource busy (reader table full, store locked)."""


class ReadOnly(BindlogError):
    """BINDLOG_EREADONLY: a write through a read-only store."""


class NotAStore(BindlogError):
    """BINDLOG_ENOTSTORE: the directory holds something that is not a store."""


class PermissionDenied(_OSErrorMixin, PermissionError):
    """BINDLOG_EACCES: permission denied.  Also a :class:`PermissionError`
    (an OSError) with ``errno`` EACCES."""

    posix_errno = _errno.EACCES


class Panic(BindlogError):
    """BINDLOG_EPANIC: a fatal I/O error made the handle unusable.  Close
    every Store on this directory and reopen; never retry and carry on."""


class NotSupported(BindlogError):
    """BINDLOG_ENOTSUP: not supported by this build of the library (e.g. an
    ``etcd://`` store with the package's own libbindlog, which has no etcd
    backend: point ``BINDLOG_LIBRARY`` at a full build)."""


class StoreClosed(BindlogError, ValueError):
    """The :class:`bindlog.Store` was closed.  ``code`` is ``None`` (the
    library never saw the call); ``name`` is ``"BINDLOG_ECLOSED"``, the
    code Node's StoreClosedError carries.  Also a :class:`ValueError`, like
    I/O on a closed file."""

    name = "BINDLOG_ECLOSED"

    def __init__(self, message: str = "store is closed") -> None:
        super().__init__(None, message)

    def __reduce__(self) -> Tuple[Any, ...]:
        return (self.__class__, (self.message,))


class ForkError(BindlogError, RuntimeError):
    """BINDLOG_EFORK: a :class:`bindlog.Store` or :class:`bindlog.AsyncStore`
    was used in a child process after ``fork``: its handle, locks and
    threads belong to the parent.  Open the store in the child instead (the
    child's own open gets an environment of its own).  Raised by the binding
    before it touches any of its own locks, and by the library for a handle
    that reaches it; ``code`` is ``BINDLOG_EFORK`` (-16) either way.  Also a
    :class:`RuntimeError`."""


_NAMES: Dict[int, str] = {
    _ffi.ENOTFOUND: "BINDLOG_ENOTFOUND",
    _ffi.EINVAL: "BINDLOG_EINVAL",
    _ffi.EEXIST: "BINDLOG_EEXIST",
    _ffi.ECONFLICT: "BINDLOG_ECONFLICT",
    _ffi.ECORRUPT: "BINDLOG_ECORRUPT",
    _ffi.EVERSION: "BINDLOG_EVERSION",
    _ffi.EIO: "BINDLOG_EIO",
    _ffi.ENOSPC: "BINDLOG_ENOSPC",
    _ffi.ENOMEM: "BINDLOG_ENOMEM",
    _ffi.EBUSY: "BINDLOG_EBUSY",
    _ffi.EREADONLY: "BINDLOG_EREADONLY",
    _ffi.ENOTSTORE: "BINDLOG_ENOTSTORE",
    _ffi.EACCES: "BINDLOG_EACCES",
    _ffi.EPANIC: "BINDLOG_EPANIC",
    _ffi.ENOTSUP: "BINDLOG_ENOTSUP",
    _ffi.EFORK: "BINDLOG_EFORK",
}

#: Error code -> exception class.
ERRORS: Dict[int, Type[BindlogError]] = {
    _ffi.ENOTFOUND: NotFound,
    _ffi.EINVAL: InvalidArgument,
    _ffi.EEXIST: Exists,
    _ffi.ECONFLICT: Conflict,
    _ffi.ECORRUPT: Corrupt,
    _ffi.EVERSION: VersionMismatch,
    _ffi.EIO: BindlogIOError,
    _ffi.ENOSPC: NoSpace,
    _ffi.ENOMEM: OutOfMemory,
    _ffi.EBUSY: Busy,
    _ffi.EREADONLY: ReadOnly,
    _ffi.ENOTSTORE: NotAStore,
    _ffi.EACCES: PermissionDenied,
    _ffi.EPANIC: Panic,
    _ffi.ENOTSUP: NotSupported,
    _ffi.EFORK: ForkError,
}


def error_for(code: int, context: str = "", index: Optional[int] = None) -> BindlogError:
    """The exception for C return code `code` (negative).

    Call it in the thread that made the failing call, before that thread's
    next bindlog call: the message is that thread's ``bindlog_last_error()``
    (the call, its subject and the detail).  `context` ("split", ...) is
    used only when the library left no message."""
    text = ""
    try:
        lib = _ffi.load()
        text = (lib.bindlog_last_error() or b"").decode("utf-8", "replace")
        if not text:
            text = lib.bindlog_strerror(code).decode("utf-8", "replace")
            text = f"{context}: {text}" if context else text
    except ImportError:
        text = f"{context}: error {code}" if context else f"error {code}"
    cls = ERRORS.get(code, BindlogError)
    return cls(code, text, index)


def error_with(code: int, message: str) -> BindlogError:
    """The exception for C code `code` with `message` (the library's words
    for one event of bindlog_apply_each); the code's text when empty."""
    if not message:
        try:
            message = _ffi.load().bindlog_strerror(code).decode("utf-8", "replace")
        except ImportError:
            message = f"error {code}"
    return ERRORS.get(code, BindlogError)(code, message)


def quote(value: Any, limit: int = 160) -> str:
    """`value` (a key, an id, a path) as it goes inside a message, the way
    the C library writes caller bytes: printable ASCII as is, backslash
    and every other byte as ``\\xNN``, long ones cut with ``...``."""
    if isinstance(value, str):
        try:
            b = value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a lone surrogate that no bytes stand for
            b = value.encode("utf-8", "backslashreplace")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        b = bytes(value)
    else:
        return f"<{type(value).__name__}>"
    if not b:
        return '""'  # as the C library writes an empty key or id
    out = []
    n = 0
    for c in b:
        piece = chr(c) if 0x20 <= c < 0x7F and c != 0x5C else f"\\x{c:02x}"
        if n + len(piece) > limit - 4:
            out.append("...")
            break
        out.append(piece)
        n += len(piece)
    return "".join(out)
