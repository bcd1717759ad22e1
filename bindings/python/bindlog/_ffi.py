"""ctypes declarations mirroring ``include/bindlog.h``.

This module is private: it finds and loads ``libbindlog``, declares the
structs with exactly the header's field order and types, and sets the
argument and result types of every function the package uses.

The maintenance functions (``bindlog_check``, ``bindlog_replay``,
``bindlog_compact``, ``bindlog_export``, ``bindlog_import``,
``bindlog_import_entries``, ``bindlog_lsn_at_time``, ``bindlog_vacuum``)
are bound lazily through
:func:`optional`, so a library built without them still loads; only calling
one raises :class:`NotImplementedError` naming the missing symbol.

The library is opened with :class:`ctypes.CDLL` (never ``PyDLL``), so the GIL
is released for the duration of every call and threads sharing one
:class:`bindlog.Store` really run concurrently inside the library.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_int,
    c_int64,
    c_size_t,
    c_ubyte,
    c_uint,
    c_uint64,
    c_void_p,
)
from typing import Any, Callable, Dict, List, Optional

# ---- constants (include/bindlog.h) ------------------------------------------

KEY_MAX = 400
ID_MAX = 128
REASON_MAX = 64
ORIGIN_MAX = 65536
ANY_GENERATION = 2**64 - 1
DIGEST_SIZE = 16
EACH_MESSAGE_MAX = 640  # BINDLOG_EACH_MESSAGE_MAX

APPLIED, ALREADY, STALE, MOVED = 0, 1, 2, 3
OUTCOME_COUNT = 4

ENOTFOUND = -1
EINVAL = -2
EEXIST = -3
ECONFLICT = -4
ECORRUPT = -5
EVERSION = -6
EIO = -7
ENOSPC = -8
ENOMEM = -9
EBUSY = -10
EREADONLY = -11
ENOTSTORE = -12
EACCES = -13
EPANIC = -14
ENOTSUP = -15
EFORK = -16

EVENT_BIND = 1
EVENT_NEW_SESSION = 2
EVENT_SPLIT = 3
EVENT_INVALIDATE = 4
EVENT_UNBIND = 5
EVENT_ROUTE = 6
EVENT_COUNT = 7

ROUTED, CREATED, RESET = 4, 5, 6
RESET_NONE, RESET_IDLE, RESET_DAILY, RESET_BOTH, RESET_DAILY_AND_IDLE = 0, 1, 2, 3, 4

DURABILITY_FULL = 0
DURABILITY_NORMAL = 1
DURABILITY_NONE = 2

OPTIONS_VERSION = 4

STAT_ERROR = OUTCOME_COUNT
STAT_COLUMNS = OUTCOME_COUNT + 1

UINT64_MAX = 2**64 - 1
INT64_MAX = 2**63 - 1

# ---- structs -----------------------------------------------------------------
# Field order and types follow include/bindlog.h exactly; tests/test_layout.py
# compares them with the header text and with a C program's sizeof/offsetof.

clock_fn = CFUNCTYPE(c_int64, c_void_p)
progress_fn = CFUNCTYPE(None, c_void_p, c_uint64, c_uint64)


class bindlog_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("durability", c_int),
        ("read_only", c_int),
        ("map_size", c_size_t),
        ("max_readers", c_uint),
        ("clock_ms", clock_fn),
        ("clock_ctx", c_void_p),
        # version 2: etcd in production (NULL / 0: the ETCDCTL_* defaults)
        ("etcd_cacert", c_char_p),
        ("etcd_cert", c_char_p),
        ("etcd_key", c_char_p),
        ("etcd_user", c_char_p),
        ("etcd_password", c_char_p),
        ("etcd_max_txn_ops", c_uint),
        # version 3: the write-ahead log (0: the default size)
        ("log_size", c_uint64),
        # version 4: the bound of waits for other processes (0: the default)
        ("lock_timeout_ms", c_int),
    ]


class bindlog_result(Structure):
    _fields_ = [
        ("outcome", c_int),
        ("lsn", c_uint64),
        ("generation", c_uint64),
        ("session_id", c_char * (ID_MAX + 1)),
    ]


class bindlog_binding(Structure):
    _fields_ = [
        ("session_id", c_char * (ID_MAX + 1)),
        ("generation", c_uint64),
        ("lsn", c_uint64),
        ("updated_ms", c_int64),
        ("key", c_char * (KEY_MAX + 1)),
        ("last_activity_ms", c_int64),
    ]


class bindlog_session(Structure):
    _fields_ = [
        ("session_id", c_char * (ID_MAX + 1)),
        ("key", c_char * (KEY_MAX + 1)),
        ("parent_id", c_char * (ID_MAX + 1)),
        ("created_lsn", c_uint64),
        ("ended_lsn", c_uint64),
        ("created_ms", c_int64),
        ("ended_ms", c_int64),
        ("end_reason", c_char * (REASON_MAX + 1)),
        ("origin_len", c_size_t),
    ]


class bindlog_event(Structure):
    _fields_ = [
        ("type", c_int),
        ("key", c_char_p),
        ("session_id", c_char_p),
        ("expect", c_char_p),
        ("generation", c_uint64),
        ("reason", c_char_p),
        ("origin", c_void_p),
        ("origin_len", c_size_t),
    ]


class bindlog_record(Structure):
    _fields_ = [
        ("lsn", c_uint64),
        ("type", c_int),
        ("time_ms", c_int64),
        ("generation", c_uint64),
        ("key", c_void_p),  # const char *, read with key_len
        ("key_len", c_size_t),
        ("session_id", c_char_p),
        ("other_id", c_char_p),
        ("reason", c_char_p),
        ("origin", c_void_p),
        ("origin_len", c_size_t),
        ("origin_present", c_int),
    ]


class bindlog_stats(Structure):
    _fields_ = [
        ("head_lsn", c_uint64),
        ("base_lsn", c_uint64),
        ("log_records", c_uint64),
        ("bindings", c_uint64),
        ("live_bindings", c_uint64),
        ("sessions", c_uint64),
        ("live_sessions", c_uint64),
        ("applied", c_uint64 * EVENT_COUNT),
        ("events", (c_uint64 * STAT_COLUMNS) * EVENT_COUNT),
        ("commits", c_uint64),
        ("grouped_events", c_uint64),
        ("map_size", c_uint64),
        ("map_used", c_uint64),
        ("file_size", c_uint64),
        ("readers_used", c_uint),
        ("readers_max", c_uint),
        ("durability", c_int),
        ("format_version", c_uint),
        ("checkpoint_lsn", c_uint64),
        ("log_size", c_uint64),
        ("log_used", c_uint64),
    ]


class bindlog_policy(Structure):
    _fields_ = [
        ("mode", c_int),
        ("idle_ms", c_int64),
        ("daily_boundary_ms", c_int64),
    ]


class bindlog_route_result(Structure):
    _fields_ = [
        ("outcome", c_int),
        ("reason", c_int),
        ("lsn", c_uint64),
        ("generation", c_uint64),
        ("last_activity_ms", c_int64),
        ("session_id", c_char * (ID_MAX + 1)),
        ("previous_id", c_char * (ID_MAX + 1)),
    ]


class bindlog_check_report(Structure):
    _fields_ = [
        ("problems", c_uint64),
        ("records", c_uint64),
        ("head_lsn", c_uint64),
        ("first_bad_lsn", c_uint64),
        ("first_bad_key", c_char * (KEY_MAX + 1)),
        ("message", c_char * 512),
        ("state_digest", c_ubyte * DIGEST_SIZE),
        ("replay_digest", c_ubyte * DIGEST_SIZE),
    ]


class bindlog_import_entry(Structure):
    _fields_ = [
        ("key", c_char_p),
        ("session_id", c_char_p),
        ("time_ms", c_int64),
        ("origin", c_void_p),
        ("origin_len", c_size_t),
    ]


class bindlog_lsn_range(Structure):
    _fields_ = [
        ("first", c_uint64),
        ("last", c_uint64),
    ]


class bindlog_recover_report(Structure):
    _fields_ = [
        ("pages", c_uint64),
        ("damaged_pages", c_uint64),
        ("records_found", c_uint64),
        ("head_lsn", c_uint64),
        ("head_known", c_int),
        ("base_lsn", c_uint64),
        ("base_image", c_int),
        ("records_lost", c_uint64),
        ("records_by_effect", c_uint64),
        ("records_skipped", c_uint64),
        ("cut_lsn", c_uint64),
        ("records_rederived", c_uint64),
        ("nranges", c_size_t),
        ("ranges", c_void_p),  # bindlog_lsn_range *
        ("nkeys", c_size_t),
        ("keys", c_void_p),  # char **
        ("unknown_lost", c_uint64),
        ("new_head_lsn", c_uint64),
        ("digest", c_ubyte * DIGEST_SIZE),
        ("log_state", c_int),
        ("log_records", c_uint64),
        ("log_first_lsn", c_uint64),
        ("log_last_lsn", c_uint64),
        ("log_why", c_char * 160),
    ]


class bindlog_upgrade_report(Structure):
    _fields_ = [
        ("from_format", c_uint),
        ("upgraded", c_int),
        ("head_lsn", c_uint64),
        ("base_lsn", c_uint64),
        ("records", c_uint64),
        ("bindings", c_uint64),
        ("sessions", c_uint64),
        ("digest", c_ubyte * DIGEST_SIZE),
        ("staging_left", c_int),
    ]


#: Every struct declared here, by its C name (used by the layout tests).
STRUCTS = {
    cls.__name__: cls
    for cls in (
        bindlog_options,
        bindlog_result,
        bindlog_binding,
        bindlog_session,
        bindlog_event,
        bindlog_record,
        bindlog_stats,
        bindlog_check_report,
        bindlog_import_entry,
        bindlog_lsn_range,
        bindlog_recover_report,
        bindlog_upgrade_report,
        bindlog_policy,
        bindlog_route_result,
    )
}

# ---- function signatures ---------------------------------------------------

_h = c_void_p  # bindlog *
_it = c_void_p  # bindlog_iter *

_REQUIRED = {
    "bindlog_version": (c_char_p, []),
    "bindlog_strerror": (c_char_p, [c_int]),
    "bindlog_last_error": (c_char_p, []),
    "bindlog_code_name": (c_char_p, [c_int]),
    "bindlog_event_name": (c_char_p, [c_int]),
    "bindlog_open": (c_int, [POINTER(c_void_p), c_char_p, POINTER(bindlog_options)]),
    "bindlog_close": (None, [_h]),
    "bindlog_path": (c_char_p, [_h]),
    "bindlog_bind": (
        c_int,
        [_h, c_char_p, c_char_p, c_char_p, c_char_p, c_char_p, c_size_t, POINTER(bindlog_result)],
    ),
    "bindlog_new_session": (
        c_int,
        [_h, c_char_p, c_char_p, c_char_p, c_char_p, c_size_t, POINTER(bindlog_result)],
    ),
    "bindlog_split": (
        c_int,
        [_h, c_char_p, c_char_p, c_char_p, c_uint64, c_char_p, c_size_t, POINTER(bindlog_result)],
    ),
    "bindlog_invalidate": (c_int, [_h, c_char_p, c_char_p, POINTER(bindlog_result)]),
    "bindlog_unbind": (c_int, [_h, c_char_p, c_char_p, POINTER(bindlog_result)]),
    "bindlog_apply_batch": (
        c_int,
        [_h, POINTER(bindlog_event), c_size_t, POINTER(bindlog_result), POINTER(c_size_t)],
    ),
    "bindlog_apply_each": (
        c_int,
        [_h, POINTER(bindlog_event), c_size_t, POINTER(bindlog_result), POINTER(c_int), c_void_p],
    ),
    "bindlog_route": (
        c_int,
        [_h, c_char_p, c_int64, POINTER(bindlog_policy), c_char_p, c_char_p, c_size_t,
         POINTER(bindlog_route_result)],
    ),
    "bindlog_expire": (c_int, [_h, c_int64, c_char_p, c_int, POINTER(c_uint64)]),
    "bindlog_get": (c_int, [_h, c_char_p, POINTER(bindlog_binding)]),
    "bindlog_session_get": (
        c_int,
        [_h, c_char_p, POINTER(bindlog_session), c_void_p, c_size_t],
    ),
    "bindlog_log_iter": (c_int, [_h, c_uint64, c_uint64, POINTER(c_void_p)]),
    "bindlog_history_iter": (c_int, [_h, c_char_p, POINTER(c_void_p)]),
    "bindlog_iter_next_record": (c_int, [_it, POINTER(bindlog_record)]),
    "bindlog_bindings_iter": (c_int, [_h, POINTER(c_void_p)]),
    "bindlog_iter_next_binding": (c_int, [_it, POINTER(bindlog_binding)]),
    "bindlog_sessions_iter": (c_int, [_h, POINTER(c_void_p)]),
    "bindlog_children_iter": (c_int, [_h, c_char_p, POINTER(c_void_p)]),
    "bindlog_ancestors_iter": (c_int, [_h, c_char_p, POINTER(c_void_p)]),
    "bindlog_iter_next_session": (
        c_int,
        [_it, POINTER(bindlog_session), c_void_p, c_size_t],
    ),
    "bindlog_iter_close": (None, [_it]),
    "bindlog_stats_get": (c_int, [_h, POINTER(bindlog_stats)]),
    "bindlog_digest": (c_int, [_h, POINTER(c_ubyte), POINTER(c_uint64)]),
    "bindlog_wait": (c_int, [_h, c_uint64, c_int, POINTER(c_uint64)]),
}

_OPTIONAL = {
    "bindlog_fsync": (c_int, [c_int]),
    "bindlog_check": (
        c_int,
        [_h, POINTER(bindlog_check_report), progress_fn, c_void_p],
    ),
    "bindlog_replay": (
        c_int,
        [
            _h,
            c_char_p,
            c_uint64,
            c_int64,
            POINTER(c_ubyte),
            POINTER(c_uint64),
            progress_fn,
            c_void_p,
        ],
    ),
    "bindlog_lsn_at_time": (c_int, [_h, c_int64, POINTER(c_uint64)]),
    "bindlog_compact": (
        c_int,
        [_h, c_uint64, POINTER(c_uint64), progress_fn, c_void_p],
    ),
    "bindlog_vacuum": (c_int, [c_char_p, POINTER(c_uint64), POINTER(c_uint64)]),
    "bindlog_export": (
        c_int,
        [_h, c_uint64, c_int, POINTER(c_uint64), progress_fn, c_void_p],
    ),
    "bindlog_import": (
        c_int,
        [_h, c_int, POINTER(c_uint64), POINTER(c_uint64), progress_fn, c_void_p],
    ),
    "bindlog_import_entries": (
        c_int,
        [
            _h,
            POINTER(bindlog_import_entry),
            c_size_t,
            POINTER(bindlog_result),
            POINTER(c_int),
            progress_fn,
            c_void_p,
        ],
    ),
}

# ---- loading ----------------------------------------------------------------


class LibraryNotFoundError(ImportError):
    """libbindlog could not be loaded; ``tried`` lists every attempt."""

    def __init__(self, tried: List[str], hint: str = "") -> None:
        self.tried = list(tried)
        lines = "\n".join("  " + t for t in self.tried)
        super().__init__(
            "bindlog: cannot load the libbindlog shared library. Tried:\n"
            + lines
            + "\n"
            + (
                hint
                or "Reinstall the package (pip install ./bindings/python compiles the library "
                "into it), set BINDLOG_LIBRARY to the full path of a libbindlog.so, or "
                "install the library on the system's library path."
            )
        )


_lock = threading.Lock()
_NOT_FOUND_BY_FIND_LIBRARY = 'ctypes.util.find_library("bindlog")'
_lib: Optional[ctypes.CDLL] = None
_optional_cache: Dict[str, Callable[..., Any]] = {}
#: the library pip builds into the package
PACKAGE_LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libbindlog.so")


def _candidates() -> List[str]:
    """Where the library is looked for, in order: BINDLOG_LIBRARY alone when
    it is set (an explicit choice is never silently replaced by another
    copy); otherwise the package's own copy, then the system's."""
    env = os.environ.get("BINDLOG_LIBRARY")
    if env:
        return [env]
    out = [PACKAGE_LIBRARY]
    found = ctypes.util.find_library("bindlog")
    out.append(found if found else _NOT_FOUND_BY_FIND_LIBRARY)
    out.append("libbindlog.so.0")
    out.append("libbindlog.so")
    return out


def _declare(lib: ctypes.CDLL) -> None:
    for name, (restype, argtypes) in _REQUIRED.items():
        fn = getattr(lib, name)  # AttributeError: not a bindlog library
        fn.restype = restype
        fn.argtypes = argtypes


def load() -> ctypes.CDLL:
    """Load libbindlog once (thread-safe) and return it."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried: List[str] = []
        env = os.environ.get("BINDLOG_LIBRARY")
        for path in _candidates():
            if path == _NOT_FOUND_BY_FIND_LIBRARY:
                tried.append(f"{path}: not found")
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as exc:
                tried.append(f"{path}: {exc}")
                continue
            try:
                _declare(lib)
            except AttributeError as exc:
                tried.append(f"{path}: loaded, but it is not libbindlog ({exc})")
                continue
            _lib = lib
            return lib
        if env:
            raise LibraryNotFoundError(
                tried, "BINDLOG_LIBRARY is set, so no other copy was tried: point it at a "
                "libbindlog.so, or unset it to use the package's own library."
            )
        tried.insert(0, "BINDLOG_LIBRARY: not set")
        raise LibraryNotFoundError(tried)


def optional(name: str) -> Callable[..., Any]:
    """A maintenance function, or NotImplementedError if the library lacks it."""
    cached = _optional_cache.get(name)
    if cached is not None:
        return cached
    lib = load()
    try:
        fn: Callable[..., Any] = getattr(lib, name)
    except AttributeError:
        raise NotImplementedError(
            f"{name} is not exported by the loaded libbindlog ({lib._name}); "
            "this build of the library does not provide it"
        ) from None
    restype, argtypes = _OPTIONAL[name]
    setattr(fn, "restype", restype)
    setattr(fn, "argtypes", argtypes)
    _optional_cache[name] = fn
    return fn


def has(name: str) -> bool:
    """Whether the loaded library exports `name`."""
    try:
        optional(name) if name in _OPTIONAL else getattr(load(), name)
    except (NotImplementedError, AttributeError):
        return False
    return True
