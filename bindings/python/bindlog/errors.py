"""Exceptions raised by the bindlog package.

Every error code of the C library becomes a subclass of :class:`BindlogError`
carrying ``code`` (the negative ``BINDLOG_E*`` value) and ``message``.  The
outcomes ALREADY, STALE and MOVED are *not* errors: they come back as
:class:`bindlog.Outcome` values in a :class:`bindlog.Result`.
"""
from __future__ import annotations

from typing import Dict, Optional, Type

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
    "StoreClosed",
    "error_for",
]


class BindlogError(Exception):
    """Base class of every bindlog error.

    Attributes:
        code: the C error code (negative ``BINDLOG_E*``), or ``None`` for
            errors raised by the binding itself (:class:`StoreClosed`).
        name: the symbolic name, e.g. ``"BINDLOG_ENOTFOUND"``.
        message: a readable description.
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

    def __reduce__(self):  # picklable (multiprocessing) with code, message, index
        return (self.__class__, (self.code, self.message, self.index))

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


class BindlogIOError(BindlogError):
    """BINDLOG_EIO: an I/O error; the operation did not happen."""


class NoSpace(BindlogError):
    """BINDLOG_ENOSPC: no space left on the device or in the map."""


class OutOfMemory(BindlogError):
    """BINDLOG_ENOMEM: out of memory."""


class Busy(BindlogError):
    """BINDLOG_EBUSY: resource busy (reader table full, store locked)."""


class ReadOnly(BindlogError):
    """BINDLOG_EREADONLY: a write through a read-only store."""


class NotAStore(BindlogError):
    """BINDLOG_ENOTSTORE: the directory holds something that is not a store."""


class PermissionDenied(BindlogError):
    """BINDLOG_EACCES: permission denied."""


class Panic(BindlogError):
    """BINDLOG_EPANIC: a fatal I/O error made the handle unusable.  Close
    every Store on this directory and reopen; never retry and carry on."""


class StoreClosed(BindlogError, ValueError):
    """The :class:`bindlog.Store` was closed.  ``code`` is ``None``.  Also a
    :class:`ValueError`, like I/O on a closed file."""

    name = "STORE_CLOSED"

    def __init__(self, message: str = "store is closed") -> None:
        super().__init__(None, message)

    def __reduce__(self):
        return (self.__class__, (self.message,))


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
}


def error_for(code: int, context: str = "", index: Optional[int] = None) -> BindlogError:
    """The exception for C return code `code` (negative), with the library's
    own description and an optional context ("bindlog_split(...)")."""
    try:
        text = _ffi.load().bindlog_strerror(code).decode("utf-8", "replace")
    except ImportError:
        text = "error"
    message = f"{context}: {text}" if context else text
    cls = ERRORS.get(code, BindlogError)
    return cls(code, message, index)
