/*
 * shm.h -- what the processes of one store share: `bindlog.shm`, a small
 * file every process maps MAP_SHARED.
 *
 * It holds the two locks that serialise writers and checkpointers across
 * processes (robust process-shared mutexes: a holder that dies hands the
 * next locker EOWNERDEAD, never a lock that stays taken; every wait for
 * them is bounded, and a lock held too long is BINDLOG_EBUSY naming its
 * holder's pid), the written end of the log, the visible end (what readers
 * may see: in FULL, only frames already flushed), the checkpoint's
 * progress, and the futex words that wake bindlog_wait() callers and
 * writers waiting for log space.
 *
 * Every field is written in one store, or through a double-buffered record
 * (the written end, the checkpoint): the writer fills the copy not in use,
 * with a check word, then flips the record's counter in one store.  A
 * writer that dies anywhere leaves the last complete copy current; a
 * reader never waits for a writer.  A copy that fails its check (a stray
 * write) is rebuilt from the log or LMDB by the caller (walenv.c, ckpt.c).
 * docs/design.md has the table of fields, writers, locks and repairs.
 *
 * Nothing in it is durable, but it is the one meeting point of the
 * processes that have the store open, so it is rebuilt only when none
 * has: that is decided by a lock on data.mdb (the "world lock": an OFD
 * lock on a byte far beyond anything LMDB uses on Linux, a flock
 * elsewhere; never a process's fcntl lock, which any close of data.mdb in
 * the process would drop), which a process holds for as long as it has
 * the store open -- shared, or exclusive while it rebuilds bindlog.shm.
 * data.mdb cannot be removed or replaced without destroying the store, so
 * a deleted or replaced bindlog.shm makes a newcomer refuse (BINDLOG_EBUSY),
 * never rebuild beside a live writer; the processes that still map the
 * removed file notice at their next commit (the file's link count) and
 * fail it with a clear error.
 *
 * The layout is this library version's own: processes of one store must
 * run the same library version (the version field refuses others).
 */
#ifndef BL_SHM_H
#define BL_SHM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "lmdb/wal.h"
#include "platform/platform.h"

#define BL_SHM_FILE    "bindlog.shm"
#define BL_SHM_SIZE    4096u
#define BL_SHM_VERSION 2u

/* The world lock's byte in data.mdb (LMDB's map never reaches 2^62). */
#define BL_SHM_WORLD_OFF ((off_t)1 << 62)

/* One copy of a log point, with its check word (shm.c: a hash of the
 * point and of the record counter it was written for). */
typedef struct bl_shm_copy {
    _Atomic uint64_t lsn, pos, chain, check;
} bl_shm_copy;

/* A double-buffered log point: copy[cur & 1] is current. */
typedef struct bl_shm_rec {
    _Atomic uint32_t cur;
    uint32_t pad;
    bl_shm_copy copy[2];
} bl_shm_rec;

typedef struct bl_shm {
    char magic[8];             /* "BLSHMEM\0" */
    uint32_t version;          /* BL_SHM_VERSION */
    uint32_t size;             /* sizeof(bl_shm) */
    uint64_t salt, cap;        /* the log this describes (from LMDB meta "wal") */
    uint64_t dev, ino;         /* the file this content was built in (a copy is refused) */
    _Atomic int32_t init_pid;  /* the process that built it (or is building it) */
    _Atomic int32_t wlock_pid; /* the holder of wlock, 0 when free */
    _Atomic int32_t clock_pid; /* the holder of clock, 0 when free */
    uint32_t pad;
    bl_plat_xlock wlock; /* writers: decide + append, across processes (platform.h) */
    bl_plat_xlock clock; /* checkpointers */
    /* The written end: the point after the last frame appended.  Written
     * only under wlock. */
    bl_shm_rec end;
    /* The visible end: the last LSN readers may see.  Only grows (until a
     * recovery rebuilds the file).  <= the written end. */
    _Atomic uint64_t vis_lsn;
    /* The checkpoint: LMDB holds every record up to its LSN; the log's
     * space before its position may be overwritten.  Written under clock. */
    bl_shm_rec ckpt;
    /* 1 while LMDB may hold a checkpoint that was committed without a sync
     * (a NONE-mode checkpointer): a FULL or NORMAL writer syncs LMDB before
     * it overwrites log space. */
    _Atomic uint32_t ckpt_unsynced;
    /* Wake-ups: a publisher bumps head_futex and wakes it only when
     * head_waiters says somebody sleeps there (bindlog_wait); space_futex
     * likewise for writers waiting for a checkpoint to free log space.
     * Sleepers sleep in bounded slices, so a counter left wrong by a dead
     * process costs a useless wake-up at most, never a lost one. */
    _Atomic uint32_t head_futex, head_waiters;
    _Atomic uint32_t space_futex, space_waiters;
    /* Statistics of the wake-ups (for the docs' cost figures). */
    _Atomic uint64_t wakes;
    /* Bytes of the ring's first lap written (zeros or frames), raised
     * under wlock: the background zero-fill works beyond it and beyond the
     * written end (ckpt.c). */
    _Atomic uint64_t filled;
    /* How far the log is known flushed: the written end at the start of
     * the last fdatasync of the log that completed (a FULL group's, the
     * zero-fill's, a checkpoint's, recovery's).  Only grows; every frame
     * carries it (wal.h, "Torn tail or damage").  bl_wal_flushed raises it. */
    _Atomic uint64_t durable;
} bl_shm;

/* A process's mapping of the file. */
typedef struct bl_shmh {
    int fd;
    int world_fd;       /* data.mdb, for the world lock (kept until close) */
    int gate_fd;        /* the store directory, where the world lock's
                         * conversions need the gate (shm.c); else -1 */
    int64_t timeout_ms; /* the bound of every wait for the world lock or the gate */
    bl_shm *m;
    char *path; /* dir/bindlog.shm */
    int made;   /* this open created the file */
} bl_shmh;

/*
 * Take this process's world lock on dir/data.mdb (waiting at most
 * timeout_ms for a process that rebuilds the shared file), then open and
 * map dir/bindlog.shm.  *alone = 1: no other process has the store open
 * (exclusive world lock held): the file is created if missing, and the
 * caller must bl_shm_init() it, then bl_shm_share().  *alone = 0: other
 * processes have it open (shared world lock held): the caller checks it
 * with bl_shm_valid().  BINDLOG_ENOTFOUND when it cannot be used by this
 * read-only opener (missing, or data.mdb not writable and nobody attached:
 * private mode), BINDLOG_EACCES when it cannot be opened for writing,
 * BINDLOG_EBUSY when it is missing or being rebuilt while other processes
 * have the store open (with a last-error message), other BINDLOG_E* on
 * errors.
 */
int bl_shm_open(const char *dir, int read_only, int64_t timeout_ms, bl_shmh *h, int *alone);
void bl_shm_close(bl_shmh *h);
/* Close, and remove the file if this open created it and still holds the
 * store alone: a failed open leaves nothing behind. */
void bl_shm_discard(bl_shmh *h);

/* Rebuild the content (the exclusive lock is held): fresh locks, ends at
 * `end` (written and visible), checkpoint at `ckpt`. */
int bl_shm_init(bl_shmh *h, uint64_t salt, uint64_t cap, const bl_wal_at *end,
                const bl_wal_at *ckpt);
/* Turn the exclusive world lock into a shared one, with nobody able to
 * take it exclusively in between (atomically, or under the gate).  May
 * fail (BINDLOG_EBUSY: the gate held beyond the timeout, BINDLOG_EIO). */
int bl_shm_share(bl_shmh *h);
/* 1 if the content describes the log (salt, cap) in this layout, and was
 * built in this very file. */
int bl_shm_valid(const bl_shmh *h, uint64_t salt, uint64_t cap);
/* 0 while the mapped file still has a name; BINDLOG_EIO with a last-error
 * message once it was removed or replaced (renamed over). */
int bl_shm_linked(const bl_shmh *h);

/* Lock a robust mutex of the file (wlock or clock), waiting at most
 * timeout_ms (< 0: no bound).  0 (*owner_died 0), 0 with *owner_died 1
 * (its holder died: the caller repairs what it guards, then calls
 * pthread_mutex_consistent), BINDLOG_EBUSY after the timeout (the message
 * names the holder's pid), or BINDLOG_EIO. */
int bl_shm_lock(bl_shm *m, bl_plat_xlock *mu, int *owner_died, int64_t timeout_ms);
void bl_shm_unlock(bl_shm *m, bl_plat_xlock *mu);

/* The double-buffered points.  Getters: 0, or BINDLOG_ECORRUPT (no
 * last-error message: the caller rebuilds it, or says so) when the current
 * copy fails its check (a stray write).
 * Setters: the record's lock held (wlock for end, clock for ckpt). */
int bl_shm_get_end(bl_shm *m, bl_wal_at *at);
void bl_shm_set_end(bl_shm *m, const bl_wal_at *at);
int bl_shm_get_ckpt(bl_shm *m, bl_wal_at *at);
void bl_shm_set_ckpt(bl_shm *m, const bl_wal_at *at);

/* Raise the visible end to lsn (never lowers it) and wake bindlog_wait()
 * sleepers if there are any. */
void bl_shm_publish(bl_shm *m, uint64_t lsn);
/* Lower it (recovery of a dead writer's state only; wlock held). */
void bl_shm_set_vis(bl_shm *m, uint64_t lsn);
/* Store a one-word field (filled, ckpt_unsynced) with its failpoints. */
void bl_shm_store64(_Atomic uint64_t *f, uint64_t v);
void bl_shm_store32(_Atomic uint32_t *f, uint32_t v);

/* Sleep until *word moves from `seen` or timeout_ms passes (-1: none);
 * the caller registered itself in the word's waiter counter. */
void bl_shm_sleep(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms);
/* Wake every sleeper on word. */
void bl_shm_wake(_Atomic uint32_t *word);

#endif /* BL_SHM_H */
