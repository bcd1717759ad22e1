"""bindlog -- crash-safe session bindings for chat gateways.

libbindlog through ctypes (the package carries its own copy of the
library, compiled when it is installed).  Open a :class:`Store` (or, in
asyncio programs, an :class:`AsyncStore`), route
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

The shared library is found through ``BINDLOG_LIBRARY``, in this package
(``bindlog/libbindlog.so``, built by ``pip install``), or the system's
library path; it is loaded on first use (or by :func:`load_library`).  See
docs/python.md.
"""
from . import _ffi
from ._ffi import LibraryNotFoundError
from .aio import AsyncStore
from .errors import (
    BindlogError,
    BindlogIOError,
    Busy,
    Conflict,
    Corrupt,
    Exists,
    ForkError,
    InvalidArgument,
    NoSpace,
    NotAStore,
    NotFound,
    NotSupported,
    OutOfMemory,
    Panic,
    PermissionDenied,
    ReadOnly,
    StoreClosed,
    VersionMismatch,
)
from .maint import vacuum
from .route import ResetMode, ResetPolicy, RouteOutcome, RouteResult, daily_boundary_ms
from .snapshot import Snapshot
from .store import Store, library_version
from .types import (
    ANY_GENERATION,
    Binding,
    CheckReport,
    Durability,
    Event,
    EventCounts,
    EventType,
    ImportEntry,
    ImportOutcome,
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
    return str(_ffi.load()._name)


def has_feature(name: str) -> bool:
    """Whether the loaded library has maintenance function `name`
    (``"check"``, ``"replay"``, ``"compact"``, ``"export"``, ``"import"``,
    ``"import_entries"``, ``"lsn_at_time"``, ``"vacuum"``)."""
    return _ffi.has("bindlog_" + name)


__all__ = [
    "ANY_GENERATION",
    "KEY_MAX",
    "ID_MAX",
    "REASON_MAX",
    "ORIGIN_MAX",
    "Store",
    "AsyncStore",
    "Snapshot",
    "Durability",
    "EventCounts",
    "Outcome",
    "EventType",
    "Event",
    "ImportEntry",
    "ImportOutcome",
    "Result",
    "ResetMode",
    "ResetPolicy",
    "RouteOutcome",
    "RouteResult",
    "daily_boundary_ms",
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
    "NotSupported",
    "StoreClosed",
    "ForkError",
    "LibraryNotFoundError",
    "library_version",
    "load_library",
    "has_feature",
    "vacuum",
]
