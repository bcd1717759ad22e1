"""Maintenance calls of a store: check, replay, compaction, export, import,
and import_entries (a gateway's routing table moved in).

:class:`Maintenance` is a base class of :class:`bindlog.Store`; these
methods live here to keep store.py to events and reads.  They bind C
functions that may be missing from older builds of the library: each is
looked up on first call (:func:`bindlog.has_feature` tells whether one is
there) and raises ``NotImplementedError`` naming the C symbol if it is not.
"""
from __future__ import annotations

import ctypes
import io
import os
import shutil
import tempfile
from ctypes import byref, c_ubyte, c_uint64, c_void_p
from typing import Any, BinaryIO, Callable, Iterable, List, Optional, Tuple, Union

from . import _args, _ffi
from ._args import PathLike, Progress
from .errors import ERRORS, BindlogError, InvalidArgument, error_for, quote
from .types import CheckReport, ImportEntry, ImportOutcome, ReplayResult, Result, Session

__all__ = ["Maintenance", "vacuum"]


def vacuum(path: PathLike) -> Tuple[int, int]:
    """Rewrite the store in directory `path` to its live size; only while no
    writer has it open (:class:`~bindlog.Busy` otherwise).  Returns the data
    file's size before and after.  Raises NotImplementedError if the loaded
    library has no ``bindlog_vacuum``."""
    fn = _ffi.optional("bindlog_vacuum")
    try:
        p = _args.fspath(path)
    except InvalidArgument as exc:
        raise exc._in_call("vacuum") from None
    before, after = c_uint64(), c_uint64()
    rc = int(fn(p, byref(before), byref(after)))
    if rc < 0:
        raise error_for(rc, f"vacuum {quote(p)}")
    return before.value, after.value


def _full_flush(fd: int, call: str) -> None:
    """Flush a file the package wrote to the disk itself: the library's
    bindlog_fsync (F_FULLFSYNC on macOS, where fsync stops at the drive's
    cache); os.fsync with a library that predates it."""
    try:
        fn = _ffi.optional("bindlog_fsync")
    except NotImplementedError:
        os.fsync(fd)
        return
    rc = int(fn(fd))
    if rc < 0:
        raise error_for(rc, call)


class Maintenance:
    """The maintenance half of :class:`bindlog.Store` (see there)."""

    _lib: ctypes.CDLL

    def _token(self) -> Any:  # provided by Store
        raise NotImplementedError

    def _handle(self) -> c_void_p:  # provided by Store
        raise NotImplementedError

    def session(self, session_id: Any) -> Optional[Session]:  # provided by Store
        raise NotImplementedError

    def _maint(self, fn: Callable[..., int], *args: Any, progress: Optional[Progress] = None) -> int:
        cb = _args.Callback(progress)
        with self._token():
            rc = int(fn(self._handle(), *args, cb.c, None))
        cb.reraise()
        return rc

    def check(self, progress: Optional[Progress] = None) -> CheckReport:
        """Verify one snapshot: checksums, LSN density, replay == state.
        Returns a report (``report.ok``); raises only if the check could not
        run.  `progress(done, total)` is called now and then."""
        fn = _ffi.optional("bindlog_check")
        out = _ffi.bindlog_check_report()
        rc = self._maint(fn, byref(out), progress=progress)
        if rc < 0:
            raise error_for(rc, "check")
        return CheckReport(
            out.problems,
            out.records,
            out.head_lsn,
            out.first_bad_lsn,
            _args.text(out.first_bad_key),
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
        try:
            p = _args.fspath(out_dir)
            lsn = _ffi.UINT64_MAX if to_lsn is None else _args.u64(to_lsn, "to_lsn")
            t = _ffi.INT64_MAX if to_time_ms is None else _args.i64(to_time_ms, "to_time_ms")
        except InvalidArgument as exc:
            raise exc._in_call("replay") from None
        d = (c_ubyte * _ffi.DIGEST_SIZE)()
        last = c_uint64()
        rc = self._maint(fn, p, lsn, t, d, byref(last), progress=progress)
        if rc < 0:
            raise error_for(rc, f"replay into {quote(p)}")
        return ReplayResult(os.fsdecode(p), bytes(d).hex(), last.value)

    def lsn_at_time(self, time_ms: int) -> int:
        """The smallest LSN whose record's time is >= `time_ms` (head + 1 if none)."""
        fn = _ffi.optional("bindlog_lsn_at_time")
        try:
            t = _args.i64(time_ms, "time_ms")
        except InvalidArgument as exc:
            raise exc._in_call("lsn_at_time") from None
        out = c_uint64()
        with self._token():
            rc = int(fn(self._handle(), t, byref(out)))
        if rc < 0:
            raise error_for(rc, "lsn_at_time")
        return out.value

    def compact(self, keep_from_lsn: int, progress: Optional[Progress] = None) -> int:
        """Fold every record with ``lsn < keep_from_lsn`` into the base image
        and drop it (online).  Returns the number of records removed."""
        fn = _ffi.optional("bindlog_compact")
        try:
            keep = _args.u64(keep_from_lsn, "keep_from_lsn")
        except InvalidArgument as exc:
            raise exc._in_call("compact") from None
        removed = c_uint64()
        rc = self._maint(fn, keep, byref(removed), progress=progress)
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
        try:
            lsn = _args.u64(from_lsn, "from_lsn")
        except InvalidArgument as exc:
            raise exc._in_call("export") from None
        records = c_uint64()

        def run(fd: int) -> None:
            rc = self._maint(fn, lsn, fd, byref(records), progress=progress)
            if rc < 0:
                raise error_for(rc, "export")

        if isinstance(dest, (str, bytes, os.PathLike)):
            with open(_args.fspath(dest), "wb") as f:
                run(f.fileno())
                _full_flush(f.fileno(), "export")
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
            rc = self._maint(fn, fd, byref(records), byref(err_off), progress=progress)
            if rc < 0:
                exc = error_for(rc, "import")
                exc.offset = err_off.value  # type: ignore[attr-defined]
                raise exc

        if isinstance(src, (str, bytes, os.PathLike)):
            with open(_args.fspath(src), "rb") as f:
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


    def import_entries(
        self, entries: Iterable[ImportEntry], progress: Optional[Progress] = None
    ) -> List[ImportOutcome]:
        """Move a gateway's routing table in: for each entry, BIND(key,
        session_id, expect="" -- only if the key is unbound --, reason
        "import", origin), logged with the entry's own ``time_ms``, in
        order of time; each entry goes in or is refused alone, while
        thousands share one commit and one sync.  Running the same import
        again changes nothing (every entry comes back ALREADY).

        Returns one :class:`~bindlog.ImportOutcome` per entry, in the
        entries' order: a result (APPLIED, ALREADY, MOVED) or an error that
        was not raised (Conflict, InvalidArgument) naming the key.  Raises
        only for what stops the whole call (ReadOnly, a storage error: then
        ``exc.outcomes`` says which entries went in; running it again is
        safe), and TypeError for an entry that is not an ImportEntry or has
        values of the wrong type.  `progress(done, total)` counts entries.
        Needs ``bindlog_import_entries`` in the library."""
        fn = _ffi.optional("bindlog_import_entries")
        items = list(entries)
        errors: List[Optional[Exception]] = [None] * len(items)
        conv: List[Tuple[int, bytes, bytes, int, Optional[bytes]]] = []
        for i, e in enumerate(items):
            if not isinstance(e, ImportEntry):
                raise TypeError(f"entries[{i}] must be a bindlog.ImportEntry, not {type(e).__name__}")
            try:
                k, sid = _args.key(e.key), _args.sid(e.session_id)
                t = _args.i64(e.time_ms, "time_ms")
                if t < 0:
                    raise InvalidArgument(_ffi.EINVAL, f"time_ms {t} is before the Unix epoch")
                conv.append((i, k, sid, t, _args.origin(e.origin)))
            except InvalidArgument as exc:
                errors[i] = exc._in_call("import_entries", e.key)
            except TypeError as exc:
                raise TypeError(f"entries[{i}]: {exc}") from None
        n = len(conv)
        arr = (_ffi.bindlog_import_entry * max(n, 1))()
        keep: List[Any] = []
        for j, (_, k, sid, t, org) in enumerate(conv):
            c = arr[j]
            c.key, c.session_id, c.time_ms = k, sid, t
            if org is not None:
                buf = ctypes.create_string_buffer(org, len(org) or 1)
                keep.append(buf)
                c.origin = ctypes.cast(buf, c_void_p)
                c.origin_len = len(org)
        out = (_ffi.bindlog_result * max(n, 1))()
        codes = (ctypes.c_int * max(n, 1))()
        failed: Optional[BindlogError] = None
        if n:
            rc = self._maint(fn, arr, n, out, codes, progress=progress)
            if rc < 0:
                failed = error_for(rc, "import_entries")
        results: List[Optional[Result]] = [None] * len(items)
        for j, (i, *_rest) in enumerate(conv):
            code = int(codes[j])
            if code >= 0:
                results[i] = Result._from_c(code, out[j])
            else:
                errors[i] = self._entry_error(code, items[i])
        outcomes = [ImportOutcome(e, results[i], errors[i]) for i, e in enumerate(items)]
        if failed is not None:
            failed.outcomes = outcomes  # type: ignore[attr-defined]
            raise failed
        return outcomes

    def _entry_error(self, code: int, e: ImportEntry) -> BindlogError:
        """The error of one refused entry, named like the library's messages."""
        text = _ffi.load().bindlog_strerror(code).decode("utf-8", "replace")
        if code == _ffi.ECONFLICT:
            holder = self.session(e.session_id)
            if holder is not None:
                text = f"session {quote(e.session_id)} is the live binding of key {quote(holder.key)}"
        cls = ERRORS.get(code, BindlogError)
        return cls(code, f"import_entries {quote(e.key)}: {text}")


def _fileno(f: Any) -> Optional[int]:
    try:
        return int(f.fileno())
    except (AttributeError, io.UnsupportedOperation, OSError):
        return None


def _resync(f: Any, fd: int) -> None:
    """After C moved the descriptor's offset, move the file object there too."""
    try:
        if f.seekable():
            f.seek(os.lseek(fd, 0, os.SEEK_CUR))
    except (OSError, ValueError):
        pass
