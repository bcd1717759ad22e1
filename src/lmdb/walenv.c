/*
 * walenv.c -- the write-ahead log of one environment: opening (creation,
 * recovery, attaching to the shared memory), catch-up of the index,
 * the visible end for reads, bindlog_wait(), closing (walenv.h).
 *
 * Opening.  The shared-memory file says whether other processes have the
 * store open (shm.c):
 *   - alone: this process owns the truth-finding.  It creates the store if
 *     there is none (the log file first, preallocated; then LMDB's tables
 *     and meta records in one transaction), then *recovers*: LMDB's meta
 *     "head" and "wal" name the checkpoint and the log position right after
 *     it; the scan (wal.c) reads the valid prefix of the log from there,
 *     frame by frame, into the index.  Where that valid prefix ends, it
 *     looks past the break (bl_wal_past_break): a frame of this log after
 *     it that says the log was flushed beyond it, or a frame of another
 *     log at it, makes the break damage to acknowledged events, and the
 *     open is refused (BINDLOG_ECORRUPT) before anything is written, so
 *     nothing overwrites the frames after the break; otherwise the break
 *     is the never-flushed tail a crash may tear, dropped from there on.
 *     The shared memory is rebuilt with that end as both the written and
 *     the visible end.  Nothing is written
 *     into LMDB: the next checkpoint folds the recovered frames like any
 *     others, so opening stays cheap whatever the tail holds.
 *   - not alone: the shared memory is live; the index starts at its
 *     checkpoint and catches up to its visible end.
 *   - private (a read-only handle that cannot open the shared file: it is
 *     missing, or not writable by this user): recovery into the index as if
 *     alone, and every read probes the log for frames after the index's end
 *     (a pread of one header when nothing is new).  Nothing is created.
 *
 * Reads.  A read of the current state compares the shared visible end with
 * the index's end (two loads), catches up when the log moved, trims the
 * index when the checkpoint moved, and then looks the key up in the index
 * at or below the visible end before it asks LMDB (I3, walenv.h).
 */
#define _GNU_SOURCE
#include "lmdb/walenv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/failpoint.h"
#include "core/record.h"
#include "platform/platform.h"

/* ---- meta "wal" ------------------------------------------------------------ */

int bl_meta_get_wal(bl_env *e, MDB_txn *txn, bl_wal_meta *m)
{
    MDB_val k = {3, (void *)"wal"}, v;
    int rc = mdb_get(txn, e->dbi[BL_DB_META], &k, &v);
    memset(m, 0, sizeof(*m));
    if (rc == MDB_NOTFOUND)
        return BINDLOG_ENOTFOUND;
    if (rc != 0)
        return bl_mdb_error(rc);
    if (v.mv_size != BL_META_WAL_SIZE)
        return bl_err_set(BINDLOG_ECORRUPT, "meta \"wal\" is %zu bytes, not %d", v.mv_size,
                          BL_META_WAL_SIZE);
    const unsigned char *p = v.mv_data;
    m->salt = bl_get64(p);
    m->cap = bl_get64(p + 8);
    m->pos = bl_get64(p + 16);
    m->chain = bl_get64(p + 24);
    if (m->cap < BL_WAL_MIN_CAP || m->cap > BL_WAL_MAX_CAP || m->cap % 8 != 0)
        return bl_err_set(BINDLOG_ECORRUPT, "meta \"wal\" names a %llu-byte log",
                          (unsigned long long)m->cap);
    return 0;
}

int bl_meta_put_wal(bl_env *e, MDB_txn *txn, const bl_wal_meta *m)
{
    unsigned char b[BL_META_WAL_SIZE];
    MDB_val k = {3, (void *)"wal"}, v = {sizeof b, b};
    bl_put64(b, m->salt);
    bl_put64(b + 8, m->cap);
    bl_put64(b + 16, m->pos);
    bl_put64(b + 24, m->chain);
    return mdb_put(txn, e->dbi[BL_DB_META], &k, &v, 0);
}

/* ---- ingesting frames ------------------------------------------------------- */

static int ingest_frame(bl_tail *t, const bl_wframe *f, const bl_wal_at *after)
{
    if (f->flags & BL_WF_WRAP) {
        bl_tail_advance(t, after);
        return 0;
    }
    bl_tgroup *g = bl_tgroup_make(f, after);
    if (g == NULL)
        return BINDLOG_ENOMEM;
    int rc = bl_tail_link(t, g);
    if (rc != 0)
        bl_tgroup_unref(g);
    return rc;
}

static int scan_cb(void *ctx, const bl_wframe *f, const bl_wal_at *after)
{
    return ingest_frame(ctx, f, after);
}

/* Where LMDB's checkpoint leaves the log: meta "head" and "wal". */
static int lmdb_point(bl_env *e, bl_wal_at *at, bl_wal_meta *wm)
{
    MDB_txn *txn;
    bl_head head;
    int rc = bl_txn_begin(e, MDB_RDONLY, &txn);
    if (rc != 0)
        return rc;
    rc = bl_meta_get_head(e, txn, &head);
    if (rc == 0)
        rc = bl_meta_get_wal(e, txn, wm);
    mdb_txn_abort(txn);
    if (rc == BINDLOG_ENOTFOUND)
        return bl_err_set(BINDLOG_ECORRUPT, "meta \"wal\" is missing: not a format %d store",
                          BINDLOG_FORMAT_VERSION);
    if (rc != 0)
        return rc;
    at->lsn = head.lsn;
    at->pos = wm->pos;
    at->chain = wm->chain;
    return 0;
}

/* This thread holds the checkpointers' lock (bl_wal_clock). */
static _Thread_local int holds_clock;

int bl_wal_clock(bl_env *e)
{
    bl_shm *m = e->wal->shm.m;
    int died, rc = bl_shm_lock(m, &m->clock, &died, e->wal->lock_ms);
    if (rc != 0)
        return rc;
    if (died)
        bl_plat_xlock_consistent(&m->clock); /* LMDB is the truth; the point is repaired
                                               * from it when it fails its check */
    holds_clock = 1;
    return 0;
}

void bl_wal_cunlock(bl_env *e)
{
    holds_clock = 0;
    bl_shm_unlock(e->wal->shm.m, &e->wal->shm.m->clock);
}

int bl_wal_ckpt(bl_env *e, bl_wal_at *at)
{
    bl_walenv *w = e->wal;
    bl_shm *m = w->shm.m;
    bl_wal_meta wm;
    int rc, locked = 0;

    if (bl_shm_get_ckpt(m, at) == 0)
        return 0;
    /* damaged (a stray write): rebuilt from LMDB under the checkpointers'
     * lock; LMDB's checkpoint may be unsynced, so the next FULL or NORMAL
     * writer syncs LMDB before it reuses log space */
    if (!holds_clock) {
        if ((rc = bl_wal_clock(e)) != 0)
            return rc;
        locked = 1;
    }
    rc = 0;
    if (bl_shm_get_ckpt(m, at) != 0) {
        if ((rc = lmdb_point(e, at, &wm)) == 0) {
            bl_shm_store32(&m->ckpt_unsynced, 1);
            bl_shm_set_ckpt(m, at);
        }
    }
    if (locked)
        bl_wal_cunlock(e);
    return rc;
}

int bl_wal_end(bl_env *e, bl_wal_at *at)
{
    bl_shm *m = e->wal->shm.m;
    if (bl_shm_get_end(m, at) == 0)
        return 0;
    int rc = bl_wal_lock(e); /* repairs it */
    if (rc != 0)
        return rc;
    rc = bl_shm_get_end(m, at);
    bl_wal_unlock(e);
    return rc == 0 ? 0 : bl_err_set(rc, "%s: the log's written end fails its check", BL_SHM_FILE);
}

/* Catch up on frames after the index's end: up to `lsn` (UINT64_MAX: as
 * far as the log is valid, the private mode's probe).  Caller holds
 * w->ingest. */
static int catch_up_locked(bl_env *e, uint64_t lsn)
{
    bl_walenv *w = e->wal;
    bl_tail *t = &w->tail;
    bl_wframe f;
    int rc, resyncs = 0;

    for (;;) {
        bl_wal_at at;
        bl_srw_rdlock(&t->lock);
        at = t->end;
        bl_srw_rdunlock(&t->lock);
        if (lsn != UINT64_MAX && at.lsn >= lsn)
            return 0;
        rc = bl_wreader_frame(&w->rd, w->salt, &at, &f);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            bl_wal_at next = {at.lsn + f.nrec, bl_wframe_next(&f, w->cap), f.sum};
            if ((rc = ingest_frame(t, &f, &next)) != 0)
                return rc;
            continue;
        }
        /* No valid frame here.  Either the checkpoint moved past this
         * point and the space was reused (restart at the checkpoint), or
         * this is the end of the log. */
        bl_wal_at ck;
        bl_wal_meta wm;
        /* (a shared point that fails its check is read from LMDB here,
         * not repaired: the checkpointers' lock is taken before ingest,
         * never after) */
        if ((w->shm.m == NULL || bl_shm_get_ckpt(w->shm.m, &ck) != 0) &&
            (rc = lmdb_point(e, &ck, &wm)) != 0)
            return rc;
        if (ck.lsn >= at.lsn && (ck.lsn > at.lsn || ck.pos != at.pos) && resyncs < 64) {
            resyncs++;
            if (!bl_tail_trim(t, &ck)) {
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL); /* a leader pins the index: shortly */
            }
            continue;
        }
        if (lsn == UINT64_MAX)
            return 0; /* private mode: this is the end for now */
        return bl_err_set(BINDLOG_ECORRUPT,
                          "%s: no valid frame at position %llu (LSN %llu expected, the log "
                          "says LSNs up to %llu exist): the log is damaged",
                          BL_WAL_FILE, (unsigned long long)at.pos,
                          (unsigned long long)at.lsn + 1, (unsigned long long)lsn);
    }
}

int bl_wal_catch_up(bl_env *e, uint64_t lsn)
{
    bl_walenv *w = e->wal;
    if (lsn != UINT64_MAX && atomic_load(&w->tail.end_lsn) >= lsn)
        return 0;
    pthread_mutex_lock(&w->ingest);
    int rc = catch_up_locked(e, lsn);
    pthread_mutex_unlock(&w->ingest);
    return rc;
}

int bl_wal_trim(bl_env *e)
{
    bl_walenv *w = e->wal;
    bl_wal_at at;
    if (w->shm.m == NULL || bl_wal_ckpt(e, &at) != 0)
        return 1;
    if (at.lsn <= atomic_load_explicit(&w->tail.base_lsn, memory_order_acquire))
        return 1;
    /* trimming past the end restarts the index; that is catch-up's job,
     * under the ingest lock, so that no frame is linked on a stale end */
    pthread_mutex_lock(&w->ingest);
    int done = bl_tail_trim(&w->tail, &at);
    pthread_mutex_unlock(&w->ingest);
    if (done)
        bl_snap_views_drop(w);
    return done;
}

int bl_wal_read_bound(bl_env *e, uint64_t *bound)
{
    bl_walenv *w = e->wal;
    int rc;

    if (w->shm.m == NULL) {
        /* private mode: whatever valid frames the log has now */
        if ((rc = bl_wal_catch_up(e, UINT64_MAX)) != 0)
            return rc;
        *bound = atomic_load(&w->tail.end_lsn);
        return 0;
    }
    uint64_t vis = atomic_load_explicit(&w->shm.m->vis_lsn, memory_order_acquire);
    bl_wal_at end;
    if ((rc = bl_wal_end(e, &end)) != 0)
        return rc;
    if (vis > end.lsn)
        vis = end.lsn; /* a stray write: never read past the written end */
    bl_wal_trim(e);
    if (vis > atomic_load_explicit(&w->tail.end_lsn, memory_order_acquire) &&
        (rc = bl_wal_catch_up(e, vis)) != 0)
        return rc;
    *bound = vis;
    return 0;
}

typedef struct copy_ctx {
    unsigned char **buf;
    size_t *cap, *len;
} copy_ctx;

static int copy_val(void *ctx, const bl_tver *v)
{
    copy_ctx *c = ctx;
    if (v->vlen > *c->cap) {
        size_t n = v->vlen < 256 ? 256 : v->vlen;
        unsigned char *nb = realloc(*c->buf, n);
        if (nb == NULL)
            return BINDLOG_ENOMEM;
        *c->buf = nb;
        *c->cap = n;
    }
    if (v->vlen)
        memcpy(*c->buf, v->val, v->vlen);
    *c->len = v->vlen;
    return 0;
}

int bl_wal_tail_get(bl_env *e, unsigned table, const void *key, size_t klen, uint64_t bound,
                    unsigned char **buf, size_t *cap, size_t *len)
{
    copy_ctx c = {buf, cap, len};
    int fnrc = 0;
    if (!bl_tail_get(&e->wal->tail, table, key, klen, bound, copy_val, &c, &fnrc))
        return 0;
    return fnrc < 0 ? fnrc : 1;
}

typedef struct peek_ctx {
    const void **val;
    size_t *len;
} peek_ctx;

static int peek_val(void *ctx, const bl_tver *v)
{
    peek_ctx *c = ctx;
    *c->val = v->val;
    *c->len = v->vlen;
    return 0;
}

int bl_wal_tail_peek(bl_env *e, unsigned table, const void *key, size_t klen,
                     const void **val, size_t *len)
{
    peek_ctx c = {val, len};
    int fnrc = 0;
    return bl_tail_get(&e->wal->tail, table, key, klen, UINT64_MAX, peek_val, &c, &fnrc);
}

uint64_t bl_wal_head(bl_env *e)
{
    bl_walenv *w = e->wal;
    if (w->shm.m != NULL)
        return atomic_load(&w->shm.m->vis_lsn);
    return atomic_load(&w->tail.end_lsn);
}

uint64_t bl_wal_used(bl_env *e)
{
    bl_walenv *w = e->wal;
    if (w->shm.m == NULL)
        return 0;
    bl_wal_at end, ck;
    if (bl_shm_get_end(w->shm.m, &end) != 0 || bl_shm_get_ckpt(w->shm.m, &ck) != 0)
        return 0; /* damaged: repaired by the next commit or checkpoint */
    return end.pos > ck.pos ? end.pos - ck.pos : 0;
}

/* ---- opening ------------------------------------------------------------------ */

static uint64_t new_salt(void)
{
    uint64_t s = 0;
    if (bl_plat_random(&s, sizeof s) != 0 || s == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^
            ((uint64_t)getpid() << 32);
    }
    return s ? s : 1;
}

static uint64_t cap_of(const bindlog_options *o)
{
    uint64_t c = o->log_size ? (uint64_t)o->log_size : BL_WAL_DEFAULT_CAP;
    c = (c + 4095) & ~(uint64_t)4095;
    if (c < BL_WAL_MIN_CAP)
        c = BL_WAL_MIN_CAP;
    if (c > BL_WAL_MAX_CAP)
        c = BL_WAL_MAX_CAP;
    return c;
}

void bl_wal_flushed(bl_env *e, uint64_t pos)
{
    bl_shm *m = e->wal->shm.m;
    uint64_t d = atomic_load(&m->durable);
    if (d >= pos)
        return;
    (void)BL_FAILPOINT("shm.durable.before");
    while (d < pos && !atomic_compare_exchange_weak(&m->durable, &d, pos))
        ;
    (void)BL_FAILPOINT("shm.durable.after");
}

/* Recover the log from LMDB's checkpoint into the index; *end gets the
 * point after the last valid frame.  A break in what was flushed (or a
 * frame of another log at the break) is refused: BINDLOG_ECORRUPT naming
 * the file, the byte, the LSNs at risk and the way out. */
static int recover(bl_env *e, const bl_wal_at *start, int created, bl_wal_at *end)
{
    bl_walenv *w = e->wal;
    bl_wal_break b;
    int rc = bl_wal_scan(w->fd, w->cap, w->salt, start, UINT64_MAX, scan_cb, &w->tail, end);
    if (rc != 0)
        return rc;
    /* a log this open made holds its header and nothing else: no frame
     * past the end to look for (the look reads the whole ring: 4-5 ms of
     * a new store's open for the default 8 MiB) */
    if (created)
        return 0;
    if ((rc = bl_wal_past_break(w->fd, w->cap, w->salt, end, &b)) != 0)
        return rc;
    unsigned long long at = BL_WAL_HDR + end->pos % w->cap, next = end->lsn + 1;
    if (!b.foreign && b.durable <= end->pos)
        return 0; /* a torn tail (or none): the log ends here */
    char why[200], risk[80];
    if (b.durable > end->pos)
        snprintf(why, sizeof why,
                 "the frame there is not the one expected (LSN %llu), yet %llu later frames of "
                 "this log say it was flushed up to position %llu",
                 next, (unsigned long long)b.frames, (unsigned long long)b.durable);
    else
        snprintf(why, sizeof why,
                 "where LSN %llu was expected lies a frame of another log (salt %016llx, this "
                 "store's is %016llx)",
                 next, (unsigned long long)b.foreign_salt, (unsigned long long)w->salt);
    if (b.last_lsn >= next)
        snprintf(risk, sizeof risk, "LSNs %llu-%llu", next, (unsigned long long)b.last_lsn);
    else
        snprintf(risk, sizeof risk, "LSNs from %llu on", next);
    return bl_err_set(BINDLOG_ECORRUPT,
                      "%s is damaged at byte %llu (log position %llu): %s; %s were acknowledged "
                      "and are at risk: nothing is written to this store until 'bindlog "
                      "recover' has rebuilt it",
                      BL_WAL_FILE, at, (unsigned long long)end->pos, why, risk);
}

static void walenv_free(bl_walenv *w)
{
    if (w == NULL)
        return;
    bl_shm_close(&w->shm);
    if (w->fd >= 0)
        close(w->fd);
    bl_snap_views_drop(w);
    pthread_mutex_destroy(&w->views_mu);
    bl_tail_destroy(&w->tail);
    bl_wreader_free(&w->rd);
    pthread_mutex_destroy(&w->ingest);
    pthread_mutex_destroy(&w->cmu);
    pthread_cond_destroy(&w->ccv);
    pthread_cond_destroy(&w->wcv);
    bl_commit_free(w->build);
    free(w);
}

/* 1 if the store's tables exist (with the magic), 0 if not, <0 error. */
static int store_exists(bl_env *e)
{
    MDB_txn *txn;
    MDB_dbi meta;
    int rc = bl_txn_begin(e, MDB_RDONLY, &txn);
    if (rc != 0)
        return rc;
    rc = mdb_dbi_open(txn, "meta", 0, &meta);
    if (rc == 0) {
        MDB_val k = {5, (void *)"magic"}, v;
        rc = mdb_get(txn, meta, &k, &v) == 0 ? 1 : 0;
    } else {
        rc = rc == MDB_NOTFOUND ? 0 : bl_mdb_error(rc);
    }
    mdb_txn_abort(txn);
    return rc;
}

/* The steps of an open that found itself alone (or private). */
static int open_alone(bl_env *e, const bindlog_options *o, int may_create, int private_mode,
                      bl_wal_at *ck, bl_wal_at *end, uint64_t *durable)
{
    bl_walenv *w = e->wal;
    bl_wal_meta wm;
    int rc = store_exists(e), created = 0;
    if (rc < 0)
        return rc;
    if (rc == 0) {
        /* No store, yet maybe a log: frames are only written into a store
         * that exists, so a log with any says its tables were lost (data.mdb
         * deleted, emptied or replaced).  Creating a store would truncate
         * the log; refuse before anything is written.  Alone, no other
         * process can be making the store meanwhile. */
        if ((rc = bl_wal_refuse_orphan(e->path, "data.mdb holds no store")) != 0)
            return rc;
        if (!may_create || private_mode) {
            /* says why it is not a store; a store that appeared since
             * store_exists looked is not opened half way either */
            rc = bl_env_init_tables(e, 0, 0, 0);
            return rc != 0 ? rc : bl_err_set(BINDLOG_EBUSY, "the store was created meanwhile");
        }
        uint64_t salt = new_salt(), cap = cap_of(o);
        if ((rc = bl_wal_create(e->path, cap, salt, o->durability == BINDLOG_DURABILITY_NONE)) !=
            0)
            return rc;
        if ((rc = bl_env_init_tables(e, 1, salt, cap)) != 0) {
            bl_wal_remove(e->path); /* no store names it: leave nothing behind */
            return rc;
        }
        created = 1;
    } else if ((rc = bl_env_init_tables(e, 0, 0, 0)) != 0) {
        return rc;
    }
    if ((rc = lmdb_point(e, ck, &wm)) != 0)
        return rc;
    w->salt = wm.salt;
    w->cap = wm.cap;
    rc = bl_wal_open(e->path, w->log_rdonly, w->cap, w->salt, &w->fd);
    if (rc != 0)
        return rc;
    bl_wreader_init(&w->rd, w->fd, w->cap);
    bl_tail_reset(&w->tail, ck);
    if ((rc = recover(e, ck, created, end)) != 0)
        return rc;
    /* Recovered frames may be only in the page cache (a process crash in
     * NORMAL, or before a FULL flush): make them durable before anyone
     * reads them, unless this store runs without flushes.  Only a flush
     * that happened says how far the log is durable (frames carry it), so
     * the log is flushed even with nothing recovered: a writer without
     * flushes (NONE) may have left frames before the checkpoint in the
     * page cache only.  Without a flush, frames say nothing (0) until the
     * next one. */
    *durable = 0;
    if (!w->log_rdonly && o->durability != BINDLOG_DURABILITY_NONE) {
        if ((rc = bl_wal_sync(w->fd)) != 0)
            return rc;
        *durable = end->pos;
    }
    return 0;
}

/* Attach to a live shared memory: the index starts at its checkpoint. */
static int open_attached(bl_env *e)
{
    bl_walenv *w = e->wal;
    bl_wal_meta wm;
    bl_wal_at ck;
    int rc = bl_env_init_tables(e, 0, 0, 0);
    if (rc != 0)
        return rc;
    if ((rc = lmdb_point(e, &ck, &wm)) != 0)
        return rc;
    if (!bl_shm_valid(&w->shm, wm.salt, wm.cap))
        return BINDLOG_EBUSY; /* being rebuilt, or stale: try again */
    w->salt = wm.salt;
    w->cap = wm.cap;
    if ((rc = bl_wal_open(e->path, w->log_rdonly, w->cap, w->salt, &w->fd)) != 0)
        return rc;
    bl_wreader_init(&w->rd, w->fd, w->cap);
    if ((rc = bl_wal_ckpt(e, &ck)) != 0)
        return rc;
    bl_tail_reset(&w->tail, &ck);
    return bl_wal_catch_up(e, atomic_load(&w->shm.m->vis_lsn));
}

int bl_walenv_open(bl_env *e, const bindlog_options *o, int may_create)
{
    bl_walenv *w = calloc(1, sizeof(*w));
    const char *cm = getenv("BINDLOG_CHECKPOINT");
    int rc = 0, alone = 0;

    if (w == NULL)
        return BINDLOG_ENOMEM;
    w->fd = -1;
    w->shm.fd = -1;
    pthread_mutex_init(&w->ingest, NULL);
    pthread_mutex_init(&w->views_mu, NULL);
    pthread_mutex_init(&w->cmu, NULL);
    pthread_cond_init(&w->ccv, NULL);
    pthread_cond_init(&w->wcv, NULL);
    bl_tail_init(&w->tail, &(bl_wal_at){0, 0, 0});
    w->manual = cm != NULL && strcmp(cm, "manual") == 0;
    w->debug = getenv("BINDLOG_CKPT_DEBUG") != NULL;
    w->ckpt_mode = o->durability;
    w->log_rdonly = e->env_rdonly || o->read_only;
    w->lock_ms = o->lock_timeout_ms == 0 ? BL_LOCK_TIMEOUT_MS
                 : o->lock_timeout_ms < 0 ? -1
                                          : (int64_t)o->lock_timeout_ms;
    e->wal = w;
    int64_t deadline = w->lock_ms < 0 ? INT64_MAX : bl_mono_ms() + w->lock_ms;

    for (int attempt = 0;; attempt++) {
        bl_wal_at ck, end;
        uint64_t durable = 0;
        int64_t left =
            w->lock_ms < 0 ? -1 : deadline - bl_mono_ms(); /* what is left of the bound */
        if (w->lock_ms >= 0 && left < 0)
            left = 0;
        rc = bl_shm_open(e->path, o->read_only || e->env_rdonly, left, &w->shm, &alone);
        if (rc == BINDLOG_ENOTFOUND || (rc == BINDLOG_EACCES && o->read_only)) {
            /* a read-only handle without the shared file: private mode */
            bl_err_clear();
            w->shm.m = NULL;
            rc = open_alone(e, o, 0, 1, &ck, &end, &durable);
            break;
        }
        if (rc != 0 && rc != BINDLOG_EBUSY)
            break;
        if (rc == 0 && alone) {
            rc = open_alone(e, o, may_create, 0, &ck, &end, &durable);
            if (rc == 0)
                rc = bl_shm_init(&w->shm, w->salt, w->cap, &end, &ck);
            if (rc == 0) {
                atomic_store(&w->shm.m->durable, durable);
                uint64_t filled = bl_wal_filled(w->fd, w->cap);
                /* a log that went round once was written all over */
                bl_shm_store64(&w->shm.m->filled, end.pos >= w->cap ? w->cap : filled);
                rc = bl_shm_share(&w->shm);
            }
            break;
        }
        if (rc == 0 && (rc = open_attached(e)) != BINDLOG_EBUSY)
            break;
        /* the shared file is being set up, or was left half set up by a
         * process that died: let go and start over */
        bl_shm_close(&w->shm);
        if (w->fd >= 0) {
            close(w->fd);
            w->fd = -1;
        }
        bl_wreader_free(&w->rd);
        if (bl_mono_ms() >= deadline) {
            if (!bl_err_isset())
                bl_err_set(BINDLOG_EBUSY, "%s does not describe this store's log, and other "
                                          "processes have the store open",
                           BL_SHM_FILE);
            rc = BINDLOG_EBUSY;
            break;
        }
        bl_err_clear();
        struct timespec ts = {0, (long)(1 + (attempt % 10)) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (rc != 0) {
        bl_shm_discard(&w->shm); /* if this open made it and holds it alone */
        walenv_free(w);
        e->wal = NULL;
        return rc;
    }
    /* Half the log: a fold's cost is mostly the pages its puts dirty, and
     * twice the events share more of them (64 FULL writers: 7.3 us of
     * checkpoint CPU per event at a quarter, 5.2 at half); the other half
     * leaves room for the writers while it runs, and a group's frame is a
     * quarter at most (below). */
    w->trigger = w->cap / 2;
    bl_group_hold(&e->g, 1); /* FULL: what arrives during a flush is one group */
    /* a frame must fit in half the log; the estimate is from above, and
     * writers of other processes share the log: a quarter */
    bl_group_budget(&e->g, w->cap / 4);
    return 0;
}

/* How long close waits for the whole-store walk before it leaves the log
 * unfolded (docs/design.md, "Damaged files"): enough for the walk of a
 * store of a few hundred thousand entries.  A walk whose pace so far says
 * it needs longer is not waited for at all: a CLI call on a store whose
 * walk takes a second pays nothing for it. */
#define CLOSE_WALK_WAIT_MS 100

void bl_walenv_finish(bl_env *e)
{
    bl_walenv *w = e->wal;
    if (w == NULL)
        return;
    int writes = !w->log_rdonly && w->shm.m != NULL && !bl_group_panicked(&e->g);
    int fold = 1;
    /* the last handle of a writing process folds what it can, so that a
     * store at rest has an empty log (and opens in a few milliseconds).
     * That checkpoint needs the whole-store walk's verdict: a walk under
     * way is given a moment to finish (rather than stopped and done again
     * from the start in this thread); if it needs longer (by its pace so
     * far, or after the moment), the frames stay in the log, flushed, for
     * the next writer's checkpoint to fold, and a short-lived process (a
     * CLI write) does not pay for a walk of a large store after all. */
    bl_wal_at folded;
    if (writes && (bl_shm_get_ckpt(w->shm.m, &folded) != 0 ||
                   atomic_load(&w->shm.m->vis_lsn) > folded.lsn))
        /* the close.walk failpoint stands for a walk still under way when
         * the wait is over */
        fold =
            bl_ckpt_walk_settle_for(e, CLOSE_WALK_WAIT_MS) == 1 && BL_FAILPOINT("close.walk") == 0;
    bl_ckpt_stop(e);
    if (!writes)
        return;
    if (fold)
        bl_ckpt_run(e, 0);
    else if (w->ckpt_mode != BINDLOG_DURABILITY_NONE) {
        /* as durable as the checkpoint would have made them */
        bl_wal_at end;
        int known = bl_shm_get_end(w->shm.m, &end) == 0; /* a damaged end: flush all the same */
        if (bl_wal_sync(w->fd) == 0 && known)
            bl_wal_flushed(e, end.pos);
    }
}

void bl_walenv_close(bl_env *e)
{
    bl_walenv *w = e->wal;
    if (w == NULL)
        return;
    bl_ckpt_stop(e);
    walenv_free(w);
    e->wal = NULL;
}

/* ---- bindlog_wait --------------------------------------------------------- */

static int private_head(bindlog *h, uint64_t *head)
{
    uint64_t b = 0;
    int rc = bl_wal_read_bound(h->e, &b);
    *head = b;
    return rc;
}

/* A sleep on the shared memory's head word: the publisher of a frame
 * wakes it (shm.c), across processes.  An idle waiter costs nothing but a
 * sleeping thread; a wake-up costs one system call per publisher only
 * while somebody waits. */
int bl_lmdb_wait(bindlog *h, uint64_t after_lsn, int timeout_ms, uint64_t *head)
{
    bl_env *e = h->e;
    bl_walenv *w = e->wal;
    if (bl_group_panicked(&e->g))
        return bl_group_panic_again(&e->g);
    if (w->shm.m == NULL)
        return bl_wait_poll(h, after_lsn, timeout_ms, head, private_head, 5);
    bl_shm *m = w->shm.m;
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : bl_mono_ms() + timeout_ms;
    for (;;) {
        (void)BL_FAILPOINT("shm.waiters.before");
        atomic_fetch_add(&m->head_waiters, 1);
        (void)BL_FAILPOINT("shm.waiters.after");
        uint32_t seen = atomic_load(&m->head_futex);
        uint64_t vis = atomic_load(&m->vis_lsn);
        int64_t left = deadline - bl_mono_ms();
        if (vis > after_lsn || left <= 0) {
            atomic_fetch_sub(&m->head_waiters, 1);
            *head = vis;
            return 0;
        }
        bl_shm_sleep(&m->head_futex, seen, timeout_ms < 0 ? -1 : left);
        atomic_fetch_sub(&m->head_waiters, 1);
        if (bl_group_panicked(&e->g))
            return bl_group_panic_again(&e->g);
    }
}
