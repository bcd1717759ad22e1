"""bindlog -- crash-safe session bindings for chat gateways.

A pure-Python (ctypes) binding of libbindlog.  Open a :class:`Store`, route
keys to sessions with :meth:`Store.bind` / :meth:`Store.new_session`,
publish compression splits with :meth:`Store.split`, and read the outcome of
each call from the returned :class:`Result`::

    import bindlog

    with bindlog.Store("/var/lib/gateway/bindings") as store:
        store.bind("agent:main:telegram:dm:42", "s-1", origin={"chat": 42})
        b = store.get("agent:main:telegram:dm:42")
        r = store.split(b.key, b.session_id, "s-2", run_generation=b.generation)
        if r.outcome is bindlog.Outcome.STALE:
            ...  # /stop or /new arrived while the run was compressing

The shared library is found through ``BINDLOG_LIBRARY``, next to this
package, or the system's library path; it is loaded on first use (or by
:func:`load_library`).  See docs/python.md.
"""
from __future__ import annotations

from . import _ffi
from ._ffi import LibraryNotFoundError
from .errors import (
    BindlogError,
    BindlogIOError,
    Busy,
    Conflict,
    Corrupt,
    Exists,
    InvalidArgument,
    NoSpace,
    NotAStore,
    NotFound,
    OutOfMemory,
    Panic,
    PermissionDenied,
    ReadOnly,
    StoreClosed,
    VersionMismatch,
)
from .store import Store, library_version, vacuum
from .types import (
    ANY_GENERATION,
    Binding,
    CheckReport,
    Event,
    EventType,
    Lineage,
    Outcome,
    Record,
    ReplayResult,
    Result,
    Session,
    Stats,
)

__version__ = "0.1.0"

KEY_MAX = _ffi.KEY_MAX
ID_MAX = _ffi.ID_MAX
REASON_MAX = _ffi.REASON_MAX
ORIGIN_MAX = _ffi.ORIGIN_MAX


def load_library() -> str:
    """Load libbindlog now (it is otherwise loaded by the first Store) and
    return its path.  Raises :class:`LibraryNotFoundError` (an ImportError)
    listing every place tried."""
    return _ffi.load()._name


def has_feature(name: str) -> bool:
    """Whether the loaded library has maintenance function `name`
    (``"check"``, ``"replay"``, ``"compact"``, ``"export"``, ``"import"``,
    ``"lsn_at_time"``, ``"vacuum"``)."""
    return _ffi.has("bindlog_" + name)


__all__ = [
    "ANY_GENERATION",
    "KEY_MAX",
    "ID_MAX",
    "REASON_MAX",
    "ORIGIN_MAX",
    "Store",
    "Outcome",
    "EventType",
    "Event",
    "Result",
    "Binding",
    "Session",
    "Record",
    "Lineage",
    "Stats",
    "CheckReport",
    "ReplayResult",
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
    "LibraryNotFoundError",
    "library_version",
    "load_library",
    "has_feature",
    "vacuum",
]
