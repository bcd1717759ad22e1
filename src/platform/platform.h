/*
 * platform.h -- what differs between the systems bindlog runs on, behind one
 * small interface.  Nothing outside src/platform/ includes a system-specific
 * header (the linux/ and os/ headers, sys/syscall.h ...); it calls these instead.
 *
 * One file a platform, selected by CMake (-DBINDLOG_PLATFORM=auto|linux|
 * darwin|posix):
 *   linux.c   futex, fallocate, getrandom, O_TMPFILE, secure_getenv,
 *             fdatasync, OFD locks, robust mutexes, ioprio_set (glibc
 *             and musl);
 *   darwin.c  os_sync_wait_on_address (macOS 14.4+, found at run time) or
 *             __ulock_wait, F_PREALLOCATE, getentropy, issetugid,
 *             fcntl(F_FULLFSYNC), setiopolicy_np;
 *   posix.c   the portable fallback of every item (the BSDs; on Linux with
 *             BINDLOG_PLATFORM=posix, which defines BL_PLATFORM_POSIX, so
 *             that CI runs the whole suite on the fallbacks).
 *
 * Functions return 0 or an errno value unless said otherwise; none of them
 * touches bindlog's last error (this layer sits below src/core), the caller
 * turns the errno into a BINDLOG_E* code and a message.
 */
#ifndef BL_PLATFORM_H
#define BL_PLATFORM_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>

#if !defined(BL_PLATFORM_POSIX) && defined(__linux__)
#define BL_PLATFORM_LINUX 1
#elif !defined(BL_PLATFORM_POSIX) && defined(__APPLE__)
#define BL_PLATFORM_DARWIN 1
#elif !defined(BL_PLATFORM_POSIX)
#define BL_PLATFORM_POSIX 1
#endif

/* The name of the layer compiled in: "linux", "darwin" or "posix". */
const char *bl_plat_name(void);

/* ---- a shared 32-bit word: wait and wake across processes ---------------- */

/* Sleep while *word == seen, at most timeout_ms (-1: no limit).  May return
 * early (a signal, a spurious wake-up): the caller re-checks its condition.
 * The word may live in a MAP_SHARED mapping used by several processes. */
void bl_plat_wait(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms);
/* Wake every thread of every process sleeping on word. */
void bl_plat_wake_all(_Atomic uint32_t *word);
/* The same two for a word that only this process's threads wait on (in
 * its own memory, not a shared mapping): cheaper where the system has
 * process-private waits (Linux's private futexes, Darwin's non-shared
 * address waits).  A word is waited on and woken either way, never both. */
void bl_plat_wait_local(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms);
void bl_plat_wake_all_local(_Atomic uint32_t *word);

/* ---- locks of an open file description ---------------------------------- */

enum { BL_PLAT_UNLOCK = 0, BL_PLAT_SHARED = 1, BL_PLAT_EXCLUSIVE = 2 };

/*
 * A lock that belongs to fd's open file description, not to the process:
 * closing another descriptor of the same file (LMDB's own, a check's, a
 * backup's, the CLI's) leaves it held; two descriptions conflict even
 * within one process; the kernel drops it when the last descriptor of the
 * description is closed (a fork's child shares it) or its process dies.
 * A process's POSIX fcntl lock has none of these properties: every close of
 * any descriptor of the file drops it.
 *
 * Linux: an OFD lock (F_OFD_SETLK) on byte `byte`.  Elsewhere: flock(),
 * which covers the whole file (`byte` is ignored: one such lock a file)
 * and also locks a directory's descriptor.  flock and fcntl locks are
 * independent on macOS, the BSDs and Linux, so neither meets LMDB's fcntl
 * locks (and bindlog.lock's flock is on another file).
 *
 * BL_PLAT_FDLOCK_ATOMIC: 1 where turning an exclusive lock into a shared
 * one, or back, keeps it held throughout (OFD locks); 0 where the old lock
 * is dropped before the new one is taken (flock: another process may get
 * in between, and a refused non-blocking upgrade may leave nothing held):
 * the caller then serialises every exclusive attempt and every conversion
 * under a second lock (src/lmdb/shm.c, "the gate").
 *
 * type: BL_PLAT_UNLOCK, BL_PLAT_SHARED or BL_PLAT_EXCLUSIVE.  wait = 0:
 * EAGAIN (EWOULDBLOCK, or EACCES) when another holder conflicts.
 */
#if defined(BL_PLATFORM_LINUX)
#define BL_PLAT_FDLOCK_ATOMIC 1
#else
#define BL_PLAT_FDLOCK_ATOMIC 0
#endif
int bl_plat_fdlock(int fd, off_t byte, int type, int wait);
/* 1 if another open file description (of any process) holds a lock on fd's
 * file (byte `byte`) that an exclusive one would conflict with, else 0 (1
 * when it cannot tell).  fd must hold none itself: with flock the question
 * is a non-blocking exclusive lock, let go at once (so, where
 * BL_PLAT_FDLOCK_ATOMIC is 0, it is an exclusive attempt like any other). */
int bl_plat_fdlock_held(int fd, off_t byte);

/* ---- the cross-process mutex of a shared mapping ------------------------- */

/*
 * A mutex living in a MAP_SHARED mapping, whose holder's death is noticed by
 * the next locker ("owner died": it repairs what the lock guards, then calls
 * bl_plat_xlock_consistent; unlocking without that leaves it flagged for the
 * next locker).  A robust process-shared pthread mutex where the system has
 * one (BL_PLAT_ROBUST, Linux); elsewhere an fcntl lock on one byte of the
 * mapped file (the kernel drops it when the holder dies, as SQLite's and
 * LMDB's are), a process-local mutex between the threads of one process, and
 * a word in the mapping saying it is held (still set when its holder died).
 * That fcntl lock is the process's (two locks share one file, which flock
 * cannot do): the process must never open and close the mapped file a
 * second time while it holds one (bindlog maps bindlog.shm once per store
 * and process, and opens it nowhere else while it maps it).
 */
#if defined(BL_PLATFORM_LINUX)
#include <pthread.h>
#define BL_PLAT_ROBUST 1
typedef pthread_mutex_t bl_plat_xlock;
#else
#define BL_PLAT_ROBUST 0
typedef struct bl_plat_xlock {
    _Atomic uint32_t held; /* the holder's pid while held (0: free) */
    uint32_t byte;         /* which byte of the file the fcntl lock takes */
} bl_plat_xlock;
#endif

/* Make a fresh lock (nobody else has the mapping). */
int bl_plat_xlock_init(bl_plat_xlock *l, uint32_t byte);
/* Tie l (in this process's mapping of the file open as fd) to fd; undone by
 * bl_plat_xlock_detach before the mapping goes.  No-ops where BL_PLAT_ROBUST. */
int bl_plat_xlock_attach(bl_plat_xlock *l, int fd);
void bl_plat_xlock_detach(bl_plat_xlock *l);
/* 0 (*owner_died 0 or 1), ETIMEDOUT once timeout_ms (-1: none) passed,
 * or another errno value. */
int bl_plat_xlock_lock(bl_plat_xlock *l, int *owner_died, int64_t timeout_ms);
void bl_plat_xlock_consistent(bl_plat_xlock *l);
void bl_plat_xlock_unlock(bl_plat_xlock *l);

/* ---- files ---------------------------------------------------------------- */

/* Allocate the blocks of [0, len) of fd without writing them (fallocate,
 * F_PREALLOCATE).  keep_size: never change the file's size.  EOPNOTSUPP
 * where the system or file system cannot: the caller writes zeros
 * (bl_plat_write_zeros) or goes without. */
int bl_plat_reserve(int fd, off_t len, int keep_size);
/* Write zeros over [off, off + len) of fd: the fallback of bl_plat_reserve. */
int bl_plat_write_zeros(int fd, off_t off, off_t len);

/* A nameless temporary file in the directory dirfd, read-write: O_TMPFILE
 * where there is one, else created as `name` (O_EXCL) and unlinked at once.
 * A descriptor, or -1 with errno set. */
int bl_plat_tmpfile_at(int dirfd, const char *name);

/* Write what fd holds to stable storage (data and the metadata needed to
 * read it back): fdatasync on Linux; fcntl(F_FULLFSYNC) on macOS, where
 * fsync does not reach the disk, falling back to fsync only where the file
 * system refuses F_FULLFSYNC (bl_plat_flush_weakened() then says so once).
 * EINTR is retried.  0, or the errno value (errno is left set too, so that
 * `bl_plat_flush(fd) != 0` can replace `fsync(fd) != 0`). */
int bl_plat_flush(int fd);
/* The same for a whole file or a directory (every attribute): fsync;
 * fcntl(F_FULLFSYNC) on macOS as above. */
int bl_plat_flush_file(int fd);
/* 1 once per process, at the first call after a flush had to fall back to
 * a weaker one, else 0: the caller says it (once) in its last error. */
int bl_plat_flush_weakened(void);

/* Start writing fd's dirty pages back without waiting for them
 * (sync_file_range on Linux), so that a later flush finds most of them on
 * the disk already.  BL_PLAT_WRITEBACK is 0 where there is no such call
 * (the function then does nothing): callers skip what would feed it. */
#if defined(BL_PLATFORM_LINUX)
#define BL_PLAT_WRITEBACK 1
#else
#define BL_PLAT_WRITEBACK 0
#endif
void bl_plat_writeback(int fd);

/* Make reads of fd read what they ask for and no more: no read-ahead
 * around them, which the kernel may size at megabytes (Linux
 * `read_ahead_kb`; 8 MiB on some virtual disks), so that a reader of its
 * own pieces keeps each request to the disk as small as the piece.  Linux
 * posix_fadvise(POSIX_FADV_RANDOM), macOS fcntl(F_RDAHEAD, 0); nothing on
 * the portable layer. */
void bl_plat_read_exact(int fd);

/* 1 if every page of [addr, addr + len) of a file mapping (addr aligned
 * to the system's page) is in memory, so that reading it costs no disk
 * read; 0 if one is not; -1 where it cannot be told (mincore on Linux and
 * macOS; always -1 on the portable layer, and where mincore fails). */
int bl_plat_resident(const void *addr, size_t len);

/* ---- threads ---------------------------------------------------------------- */

/* Make rwlocks made with `a` prefer writers (a stream of readers must not
 * starve a writer): glibc needs to be told; macOS's already do; elsewhere
 * the system's policy stands. */
void bl_plat_rwlock_prefer_writers(pthread_rwlockattr_t *a);

/* Make the calling thread's disk I/O yield to every other I/O of the
 * system (a background scan must not delay a commit's flush) until
 * bl_plat_io_idle_end(*saved) puts back what it had: Linux ioprio_set
 * (IOPRIO_CLASS_IDLE) for the thread, honoured by the bfq and mq-deadline
 * schedulers; macOS setiopolicy_np(IOPOL_THROTTLE) for the thread.  0, or
 * the errno value (ENOTSUP on the portable layer, which has no such call:
 * the thread then goes on at its usual priority, and _end does nothing). */
int bl_plat_io_idle_begin(int *saved);
void bl_plat_io_idle_end(int saved);

/* ---- clocks ------------------------------------------------------------------ */

/* The monotonic clock (POSIX CLOCK_MONOTONIC: Linux, macOS 10.12+, the
 * portable layer), for deadlines and durations. */
static inline int64_t bl_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t bl_mono_ms(void)
{
    return bl_mono_ns() / 1000000;
}

/* ---- memory ------------------------------------------------------------------ */

/* `bytes` of zeroed memory for tables that a leader fills while every
 * writer of its group waits (a table of megabytes has thousands of 4 KiB
 * pages, and a fault costs ~1 us on a bare host, 10-15 us under a
 * hypervisor that shadows page tables).  Linux: a multiple of 2 MiB goes
 * on transparent huge pages where THP allows them (one fault a 2 MiB).
 * populate: its pages are mapped before it returns, so that the first
 * writes take no fault at all (MADV_POPULATE_WRITE for huge pages,
 * MAP_POPULATE for the rest) -- for a table written all over at once; 0:
 * at first touch -- for one filled from its start, which a small store
 * may never fill.  macOS: a plain anonymous mapping (pages at first
 * touch).  The portable layer: calloc.  NULL if there is no memory.  Give
 * it back with bl_plat_unmap_anon(p, bytes), bytes as allocated. */
void *bl_plat_map_anon(size_t bytes, int populate);
void bl_plat_unmap_anon(void *p, size_t bytes);

/* ---- the process ----------------------------------------------------------- */

/* n random bytes for salts (getrandom, getentropy, /dev/urandom). */
int bl_plat_random(void *buf, size_t n);
/* getenv, but NULL in a set-user-id or set-group-id program (secure_getenv,
 * issetugid, or comparing real and effective ids). */
const char *bl_plat_secure_getenv(const char *name);

/* A number from the environment (the tests' knobs, such as
 * BINDLOG_BULK_PARTITIONS): 1 with it in *out when `name` holds decimal
 * digits only, of a value no larger than max; 0 when it is unset or holds
 * anything else, which leaves the knob off. */
static inline int bl_plat_env_number(const char *name, uint64_t max, uint64_t *out)
{
    const char *v = getenv(name);
    char *end;
    if (v == NULL || *v < '0' || *v > '9')
        return 0;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0' || n > max)
        return 0;
    *out = (uint64_t)n;
    return 1;
}

#endif /* BL_PLATFORM_H */
