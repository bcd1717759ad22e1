/*
 * shim.h -- control interface of the I/O fault and power-loss shim
 * (libbindlog_shim.so, tests/faults/shim.c), loaded with LD_PRELOAD.
 *
 * The shim interposes open/openat, write/writev/pwrite/pwritev,
 * fsync/fdatasync/msync, close, and the calls that change a directory
 * (rename/renameat/renameat2, link/linkat, unlink/unlinkat, mkdir/mkdirat).
 * It *tracks* the file descriptors of files whose path contains the
 * tracked directory, and for those it can
 *   - fail the n-th write or the n-th sync with an errno (EIO, ENOSPC...),
 *   - fail the n-th directory operation: a rename, link, unlink or mkdir
 *     naming a path under the tracked directory, or a sync of a descriptor
 *     of such a directory (the flush that makes a rename durable).  These
 *     are counted apart (SHIM_DIR) and never journalled: a power loss is
 *     only ever taken at a write or a sync of a file,
 *   - keep an undo journal of every write since the file's last
 *     fsync/fdatasync (the bytes the write overwrote, read just before it);
 *     a write through an O_DSYNC/O_SYNC descriptor is durable at once and
 *     only recorded as a barrier,
 *   - simulate a power loss at the n-th tracked I/O operation (write or
 *     sync, counted from when it was armed): the operation is not done, the
 *     journal is written to a file and the process _exit()s with
 *     SHIM_CRASH_EXIT.  The files then hold everything written ("the page
 *     cache"); reverting journal entries in reverse order gives what the
 *     disk may hold after the power loss.
 *
 * Configuration by environment, read when the shim loads:
 *   BINDLOG_SHIM_DIR=dir            track files whose path contains dir
 *   BINDLOG_SHIM_FAIL=write|sync:N:EIO|ENOSPC[:COUNT]
 *                                   fail the N-th tracked write (or sync)
 *                                   and the COUNT-1 after it (default 1;
 *                                   -1 = every one from then on)
 *   BINDLOG_SHIM_CRASH_AFTER=N      power loss at the N-th tracked operation
 *   BINDLOG_SHIM_JOURNAL=path       where the journal goes at a power loss
 *   BINDLOG_SHIM_CRASH_SIGNAL=SIG   on signal SIG, power loss at the next
 *                                   tracked operation
 * and at run time through the functions below, which a preloaded test
 * finds with dlsym(RTLD_DEFAULT, ...) (see faultutil.h).
 *
 * Journal file: a sequence of records, little-endian (the machine's order:
 * the journal never leaves the machine):
 *   'Z' name[64] u64 durable_size               one per tracked file
 *   'W' name[64] u64 seq u64 off u64 len u64 size_before, then len bytes:
 *        the content [off, off+len) had before the write (zeros past
 *        size_before)
 *   'D' name[64] u64 seq u64 off u64 len        a durable (O_DSYNC) write
 * ('W' and 'D' in seq order.)
 */
#ifndef BINDLOG_SHIM_H
#define BINDLOG_SHIM_H

#define SHIM_CRASH_EXIT 86
#define SHIM_NAME_MAX 64

enum { SHIM_WRITE = 0, SHIM_SYNC = 1, SHIM_DIR = 2 };

/* Track files opened from now on whose path contains `dir` (NULL: none). */
typedef void (*shim_track_fn)(const char *dir);
/* Fail the nth (1 = next) tracked write, sync or directory operation from
 * now, and count-1 more
 * after it (-1: all), with errno err.  err 0 disarms. */
typedef void (*shim_fail_fn)(int what, long nth, int err, long count);
/* Power loss at the nth tracked operation from now; journal to `path`. */
typedef void (*shim_crash_after_fn)(long nth, const char *path);
/* Tracked writes, syncs or directory operations done (or failed) so far. */
typedef long (*shim_ops_fn)(int what);
/* What a power loss now could still take away from the files (and
 * directories) called `name` (NULL: all of them) tracked since the last
 * track call: their writes not yet flushed, plus 1 for each whose name was
 * made (created, renamed or linked there, or mkdir) and its directory not
 * flushed since.  -1 when no file of that name was tracked since then. */
typedef long (*shim_unsynced_fn)(const char *name);

#endif /* BINDLOG_SHIM_H */
