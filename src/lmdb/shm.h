/*
 * shm.h -- what the processes of one store share: `bindlog.shm`, a small
 * file every process maps MAP_SHARED.
 *
 * It holds the two locks that serialise writers and checkpointers across
 * processes (robust process-shared mutexes: a holder that dies hands the
 * next locker EOWNERDEAD, never a lock that stays taken), the written end
 * of the log, the visible end (what readers may see: in FULL, only frames
 * already flushed), the checkpoint's progress, and the futex words that wake
 * bindlog_wait() callers and writers waiting for log space.
 *
 * Nothing in it is durable.  The first process to map the file after every
 * process has let go (it takes an exclusive lock on the file, which no
 * other attached process could hold) rebuilds its content from LMDB and the
 * log (recovery, walenv.c); processes that attach later take a shared lock
 * and trust it.  A process that dies keeps nothing locked: OFD locks and
 * robust mutexes are released with it.  docs/format.md lists the fields.
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

#define BL_SHM_FILE "bindlog.shm"
#define BL_SHM_SIZE 4096u
#define BL_SHM_VERSION 1u

typedef struct bl_shm {
    char magic[8];              /* "BLSHMEM\0" */
    uint32_t version;           /* BL_SHM_VERSION */
    uint32_t size;              /* sizeof(bl_shm) */
    uint64_t salt, cap;         /* the log this describes (from LMDB meta "wal") */
    bl_plat_xlock wlock;        /* writers: decide + append, across processes */
    bl_plat_xlock clock;        /* checkpointers */
    /* The written end: the point after the last frame appended.  Changed
     * only under wlock, read without it through the seqlock end_seq (odd
     * while being changed). */
    _Atomic uint32_t end_seq;
    _Atomic uint64_t end_lsn, end_pos, end_chain;
    /* The visible end: the last LSN readers may see.  Only grows (until a
     * recovery rebuilds the file).  <= end_lsn. */
    _Atomic uint64_t vis_lsn;
    /* The checkpoint: LMDB holds every record up to ckpt_lsn; the log's
     * space before ckpt_pos may be overwritten.  Changed under clock (or
     * wlock for a direct write), read through the seqlock ckpt_seq. */
    _Atomic uint32_t ckpt_seq;
    _Atomic uint64_t ckpt_lsn, ckpt_pos, ckpt_chain;
    /* 1 while LMDB may hold a checkpoint that was committed without a sync
     * (a NONE-mode checkpointer): a FULL or NORMAL writer syncs LMDB before
     * it overwrites log space. */
    _Atomic uint32_t ckpt_unsynced;
    /* Wake-ups: a publisher bumps head_futex and wakes it only when
     * head_waiters says somebody sleeps there (bindlog_wait); space_futex
     * likewise for writers waiting for a checkpoint to free log space. */
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
    bl_shm *m;
    char *path; /* dir/bindlog.shm */
    int made;   /* this open created the file */
} bl_shmh;

/*
 * Open and map dir/bindlog.shm, creating it (0600) unless read_only, and
 * take this process's lock on it.  *alone = 1: no other process has it
 * (exclusive lock held): the caller must bl_shm_init() it, then
 * bl_shm_share().  *alone = 0: other processes use it (shared lock held):
 * the caller checks it with bl_shm_valid().  BINDLOG_ENOTFOUND when it does
 * not exist and read_only, BINDLOG_EACCES when it cannot be opened for
 * writing, BINDLOG_EBUSY when the file was removed while this open waited
 * for its lock (try again), other BINDLOG_E* on errors.
 */
int bl_shm_open(const char *dir, int read_only, bl_shmh *h, int *alone);
void bl_shm_close(bl_shmh *h);
/* Close, and remove the file if this open created it and still holds it
 * alone: a failed open leaves nothing behind.  A process that opened the
 * file meanwhile finds it unlinked once it has the lock, and starts over. */
void bl_shm_discard(bl_shmh *h);

/* Rebuild the content (the exclusive lock is held): fresh locks, ends at
 * `end` (written and visible), checkpoint at `ckpt`. */
int bl_shm_init(bl_shmh *h, uint64_t salt, uint64_t cap, const bl_wal_at *end,
                const bl_wal_at *ckpt);
/* Turn the exclusive lock into a shared one (atomically). */
int bl_shm_share(bl_shmh *h);
/* 1 if the content describes the log (salt, cap) in this layout. */
int bl_shm_valid(const bl_shmh *h, uint64_t salt, uint64_t cap);

/* Lock a cross-process mutex of the file (platform.h: a robust mutex, or an
 * fcntl lock).  0 (*owner_died 0), 0 with *owner_died 1 (its holder died:
 * the caller repairs what it guards, then calls bl_plat_xlock_consistent),
 * or BINDLOG_EIO. */
int bl_shm_lock(bl_plat_xlock *mu, int *owner_died);
void bl_shm_unlock(bl_plat_xlock *mu);

void bl_shm_get_end(bl_shm *m, bl_wal_at *at);
void bl_shm_set_end(bl_shm *m, const bl_wal_at *at);     /* wlock held */
void bl_shm_get_ckpt(bl_shm *m, bl_wal_at *at);
void bl_shm_set_ckpt(bl_shm *m, const bl_wal_at *at);    /* clock or wlock held */

/* Raise the visible end to lsn (never lowers it) and wake bindlog_wait()
 * sleepers if there are any. */
void bl_shm_publish(bl_shm *m, uint64_t lsn);
/* Lower it (recovery of a dead writer's state only; wlock held). */
void bl_shm_set_vis(bl_shm *m, uint64_t lsn);

/* Sleep until head_futex moves from `seen` or timeout_ms passes (-1:
 * none); the caller registered itself in head_waiters. */
void bl_shm_sleep(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms);
/* Wake every sleeper on word. */
void bl_shm_wake(_Atomic uint32_t *word);

#endif /* BL_SHM_H */
