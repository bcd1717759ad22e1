/*
 * walenv.h -- the write-ahead log of one environment (one store in one
 * process): the log file, the shared memory, this process's index of the
 * tail, the background checkpointer, and the operations built on them.
 *
 *   walenv.c   open (creation, recovery, attaching), catch-up, close,
 *              the visible end for reads, bindlog_wait()
 *   commit.c   the write path: decide against LMDB + the tail, append a
 *              frame, flush, publish
 *   ckpt.c     the checkpoint: fold the tail into LMDB, recycle the log;
 *              its background thread; quiescing for direct LMDB writes
 *   snap.c     snapshots: an LMDB read transaction plus the tail, for
 *              iterators, statistics, the digest and maintenance
 *
 * The invariants every part keeps (docs/design.md, "The write-ahead log"):
 *   I1  ckpt <= vis <= end (LSNs): the checkpoint folds only visible
 *       frames, and only written frames become visible.
 *   I2  LMDB's meta "head" is the checkpoint (or later, after a direct
 *       write), and meta "wal" names the log position and chain right
 *       after it: recovery starts there.
 *   I3  The index covers the log from its base to its end, and its base
 *       is a checkpoint that LMDB holds: a miss in the index is answered
 *       by any LMDB snapshot begun after the miss.
 *   I4  Log space before the checkpoint's position is overwritten only
 *       after that checkpoint is durable in LMDB (as durable as the mode
 *       of the writer about to overwrite it asks).
 */
#ifndef BL_WALENV_H
#define BL_WALENV_H

#include <pthread.h>
#include <stdint.h>

#include "core/error.h"
#include "lmdb/shm.h"
#include "lmdb/store.h"
#include "lmdb/tail.h"
#include "lmdb/wal.h"

/* The default bound of cross-process waits (bindlog_options.lock_timeout_ms). */
#define BL_LOCK_TIMEOUT_MS 10000

/* meta "wal": salt u64, cap u64, pos u64, chain u64 (docs/format.md) */
#define BL_META_WAL_SIZE 32

typedef struct bl_wal_meta {
    uint64_t salt, cap;
    uint64_t pos, chain; /* the log point right after meta "head" */
} bl_wal_meta;

struct bl_wbuild;

/* What this process's zero-fill of the ring did (ckpt.c, fill_step): steps
 * and bytes written, bytes it zeroed a second time, steps that began below
 * the written end, and the highest byte it zeroed.  Never reset. */
typedef struct bl_fill_stats {
    _Atomic uint64_t steps, bytes, again, behind, hi;
} bl_fill_stats;

/* A sorted view of one table's tail entries (bl_snap_table), kept for the
 * next snapshot of the same groups and bounds: snap.c, "views shared
 * between snapshots".  The view's entries point into its groups, which it
 * holds referenced. */
typedef struct bl_sview {
    bl_tgroup **gs; /* NULL: empty */
    size_t ngs;
    uint64_t above, bound; /* the snapshot's LMDB head and head */
    bl_tent *tab;
    size_t n;
    /* the bounds of the last view built, kept or not: a view is kept only
     * when a second snapshot builds it for the same bounds */
    uint64_t seen_above, seen_bound;
} bl_sview;

typedef struct bl_walenv {
    int fd;                   /* bindlog.wal */
    int log_rdonly;           /* opened O_RDONLY: this process never writes it */
    uint64_t salt, cap;
    bl_shmh shm;              /* shm.m NULL: private mode (see walenv.c) */
    bl_tail tail;
    pthread_mutex_t ingest;   /* one catch-up at a time */
    bl_wreader rd;            /* its reader (under ingest) */

    /* the leader's scratch: frame builder and overlay (commit.c) */
    struct bl_wbuild *build;

    /* the background checkpointer (ckpt.c) */
    pthread_mutex_t cmu;
    pthread_cond_t ccv;
    pthread_t thread;
    int thread_on, kicked;
    int active;               /* the thread checkpoints (else it only walks) */
    int exited;               /* a walk-only thread ended: join it */
    _Atomic int want_thread;  /* start it at the next commit (bl_ckpt_want) */
    _Atomic int store_checked; /* the whole LMDB file passed the page validator */
    _Atomic int committing;    /* callers inside a commit while bl_pc_reading_ahead */
    /* the whole-store page walk, in the thread from open (under cmu) */
    int walk;                 /* BL_WALK_* */
    int walk_rc;              /* BL_WALK_BAD: its code and last-error detail */
    char walk_msg[BL_ERRMSG_MAX];
    /* how far it is: since walk_t0_ns (monotonic), walk_done of walk_total
     * entries (the walk's own count: bl_pc_guard_store_bg) */
    int64_t walk_t0_ns;
    uint64_t walk_done, walk_total;
    int walk_watchers;        /* waiting on its pace: wcv at each report too */
    pthread_cond_t wcv;       /* signalled when walk leaves BL_WALK_RUNNING */
    unsigned gen;             /* bumped to stop the running thread */
    int manual;               /* BINDLOG_CHECKPOINT=manual: no background thread */
    int ckpt_mode;            /* durability of this process's checkpoints */
    int64_t lock_ms;          /* bound of every cross-process wait (-1: none) */
    uint64_t trigger;         /* tail bytes that start a checkpoint */
    int debug;                /* BINDLOG_CKPT_DEBUG: each checkpoint's costs to stderr */
    _Atomic uint64_t checkpoints, ckpt_failures;
    bl_fill_stats fill;       /* this process's zero-fill (tests, figures) */
    pthread_mutex_t views_mu; /* guards views */
    bl_sview views[BL_DB_COUNT];
    _Atomic uint64_t views_shared; /* snapshots that copied a kept view (tests) */
} bl_walenv;

/* ---- walenv.c ------------------------------------------------------------------ */

/* Open the log of e (its LMDB environment is open): create the store if
 * it is missing and may_create, recover or attach, fill the index.
 * Sets e->wal.  0 or BINDLOG_E* with a last-error detail. */
int bl_walenv_open(bl_env *e, const bindlog_options *o, int may_create);
/* Before the last handle goes: stop the background thread and run the
 * last checkpoint (when writable and not panicked).  Never fails. */
void bl_walenv_finish(bl_env *e);
/* Close: the thread, the files, the index.  Never fails. */
void bl_walenv_close(bl_env *e);

/* The meta "wal" record.  Getter: BINDLOG_ECORRUPT for a bad size,
 * BINDLOG_ENOTFOUND when missing.  Putter: a raw LMDB code. */
int bl_meta_get_wal(bl_env *e, MDB_txn *txn, bl_wal_meta *m);
int bl_meta_put_wal(bl_env *e, MDB_txn *txn, const bl_wal_meta *m);

/* Bring the index up to `lsn` (catch-up from the log; a resync from the
 * checkpoint when the index fell behind it).  0 or BINDLOG_E*. */
int bl_wal_catch_up(bl_env *e, uint64_t lsn);

/* Before a read of the current state: trim the index after a checkpoint,
 * catch up to the visible end, and return that end in *bound (the last
 * LSN this read may see).  0 or BINDLOG_E*. */
int bl_wal_read_bound(bl_env *e, uint64_t *bound);

/* Let go of the sorted views kept for later snapshots (snap.c): after a
 * trim, so that they do not hold the groups it dropped.  Never fails. */
void bl_snap_views_drop(bl_walenv *w);

/* Look (table, key) up in the tail at or below bound; copies the value
 * into *out (a malloc buffer grown as needed: buf and cap).  1 found, 0 not
 * in the tail. */
int bl_wal_tail_get(bl_env *e, unsigned table, const void *key, size_t klen, uint64_t bound,
                    unsigned char **buf, size_t *cap, size_t *len);

/* The newest value of (table, key) in the tail, in place: *val points into
 * the index's groups, which stay while the caller pins the index
 * (bl_tail_pin: a leader deciding its group).  1 found, 0 not in the tail. */
int bl_wal_tail_peek(bl_env *e, unsigned table, const void *key, size_t klen,
                     const void **val, size_t *len);

/* The checkpointers' lock, waiting at most lock_ms (BINDLOG_EBUSY naming
 * the holder).  0 or BINDLOG_E*. */
int bl_wal_clock(bl_env *e);
void bl_wal_cunlock(bl_env *e);

/* The shared checkpoint; a copy that fails its check is rebuilt from
 * LMDB (under the checkpointers' lock unless this thread holds it). */
int bl_wal_ckpt(bl_env *e, bl_wal_at *at);
/* The shared written end, outside the writers' lock; a copy that fails
 * its check is rebuilt from the log under the writers' lock. */
int bl_wal_end(bl_env *e, bl_wal_at *at);

/* The visible head LSN (what bindlog_wait compares), without catching up. */
uint64_t bl_wal_head(bl_env *e);

/* Trim the index to the shared checkpoint if it moved.  1 if done (or
 * nothing to do), 0 if deferred: a leader of this process pins the index
 * while it decides. */
int bl_wal_trim(bl_env *e);

/* A flush of the log that began when the written end was at `pos` has
 * completed: raise the shared `durable` point to pos (never lowers it). */
void bl_wal_flushed(bl_env *e, uint64_t pos);

/* Log bytes not yet checkpointed (written end - checkpoint position). */
uint64_t bl_wal_used(bl_env *e);

/* ---- walcheck.c --------------------------------------------------------------- */

/* What bl_wal_verify found: the first bad frame, in words. */
typedef struct bl_wal_finding {
    int bad;
    uint64_t lsn;     /* the first LSN the bad frame should hold */
    uint64_t frames;  /* frames verified */
    char msg[400];
} bl_wal_finding;

/* bindlog_check's part: read bindlog.wal from the snapshot's checkpoint to
 * its head as recovery does (checksums, salt, positions, LSN continuity,
 * records decoding), compare each record with the snapshot's, and look
 * past the end for damage (wal.h).  0 with *out filled (out->bad), or an
 * I/O error. */
int bl_wal_verify(bl_snap *ss, bl_wal_finding *out);

/* ---- commit.c ---------------------------------------------------------------- */

/* Free the leader's scratch.  NULL is a no-op. */
void bl_commit_free(struct bl_wbuild *b);

/* ---- ckpt.c -------------------------------------------------------------- */

/* Fold every visible frame into LMDB now, in this thread.  `wlock_held`:
 * the caller holds the writers' lock (a leader out of log space, or a
 * quiesce), so frames written but not visible may be flushed and
 * published first.  0 (also when there was nothing to do) or BINDLOG_E*;
 * ENOSPC leaves everything as it was. */
int bl_ckpt_run(bl_env *e, int wlock_held);

/* Wait for a checkpoint that another thread or process is running (the
 * background checkpointer, say) to end; returns at once if none is.  A
 * leader out of log space calls it before folding in its own thread: the
 * checkpoint in progress usually makes the room, and the leader can go on
 * writing while the background thread folds the rest.  0 or BINDLOG_E*
 * (the checkpointers' lock). */
int bl_ckpt_settle(bl_env *e);

/* Wake the background checkpointer (a leader saw the tail grow). */
void bl_ckpt_kick(bl_env *e);
/*
 * The background thread (writable environments only, and not with
 * BINDLOG_CHECKPOINT=manual).  Open starts it (bl_ckpt_open) to run the
 * whole-store page walk that the first write needs, off every caller's
 * path; alone, it ends after the walk.  It starts checkpointing at the
 * first commit after bl_ckpt_want() (bl_ckpt_start), so that a process that
 * opens a store without writing never checkpoints or zero-fills the log,
 * and is single-threaded again once the walk is over (or the store
 * closed).  bl_ckpt_stop stops it, walk included, and joins it.
 * bl_ckpt_open and bl_ckpt_start return 0 or BINDLOG_ENOMEM (no thread:
 * the first write walks in its own thread, as with manual checkpoints).
 */
int bl_ckpt_open(bl_env *e);
int bl_ckpt_start(bl_env *e);
void bl_ckpt_want(bl_env *e);
void bl_ckpt_stop(bl_env *e);

/* The walk's states (bl_walenv.walk). */
enum { BL_WALK_TODO, BL_WALK_RUNNING, BL_WALK_DONE, BL_WALK_BAD };

/*
 * The whole-store page walk's verdict.  With `wait` (the checkpoint, the
 * only writer of data.mdb: ckpt.c), waits for the background walk while it
 * runs (for what is left of it).  Without (a commit, which writes only the
 * log: commit.c), a walk still running is no answer yet and returns 0 at
 * once.  Then: 0 when it passed, its BINDLOG_ECORRUPT and message when it
 * found damage, and when there was no walk or it was stopped short, the
 * walk itself, in the calling thread.  0 or BINDLOG_E* with a last-error
 * detail.  Sets store_checked once the store passed.
 */
int bl_ckpt_walk_wait(bl_env *e, int wait);
/* Wait while the background walk runs (its result is then in the page
 * validator's memory): bl_pc_guard_all, so that compaction, vacuum and
 * import do not walk the store a second time beside it.  Never fails. */
void bl_ckpt_walk_settle(bl_env *e);
/* The same for at most `ms` milliseconds: 1 when no walk runs any more
 * (its verdict is in, or there was none), 0 when it still runs after the
 * wait, BL_WALK_TOO_LONG as soon as the pace it has kept says that it
 * will not be done by then (the walk tells how far it is every thousand
 * or so entries). */
int bl_ckpt_walk_settle_for(bl_env *e, int64_t ms);
#define BL_WALK_TOO_LONG (-1)

/* Direct LMDB writes (import, the targets of replay and check, the etcd
 * mirror) bypass the log.  bl_wal_quiesce takes the writers' lock and
 * checkpoints the whole log, so that LMDB is the whole state; then the
 * caller writes LMDB; bl_wal_resume moves the log's ends to LMDB's new
 * head and releases the lock.  bl_wal_quiesce returns 0 or BINDLOG_E*
 * (nothing held then). */
int bl_wal_quiesce(bl_env *e);
void bl_wal_resume(bl_env *e);

/* Lock / unlock the writers' lock (robust: a dead holder's state is
 * repaired from the log; so is a written end that fails its check, and a
 * visible end beyond it).  Waits at most lock_ms: BINDLOG_EBUSY naming the
 * holder.  BINDLOG_EIO when bindlog.shm was removed or replaced under this
 * process.  0 or BINDLOG_E*. */
int bl_wal_lock(bl_env *e);
void bl_wal_unlock(bl_env *e);

#endif /* BL_WALENV_H */
