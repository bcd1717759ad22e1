/*
 * bulk_lmdb.c -- the LMDB side of the bulk replay (bulk.h): feeding a
 * store's base image and log into it, and writing its merged output into a
 * store's tables with MDB_APPEND.
 *
 * The merged output arrives in each table's key order, and the tables it
 * fills are empty (a new store for replay, a scratch store for check, an
 * empty store for import), so every write is an append: LMDB fills its pages
 * left to right and never searches or splits in the middle.
 */
#define _GNU_SOURCE
#include "maint/maint.h"
#include "platform/platform.h"
#include "core/error.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Data written per transaction of our own (replay): large enough that
 * commits cost little (the target syncs only at the end), and small enough
 * that LMDB's dirty pages come back from its own free list: each committed
 * transaction's pages are reused by the next, where a larger one takes
 * every page fresh from malloc, a page fault each (11-15 us on the
 * development VM).  The bench's 100k-record replay of a full log, 16 MB of
 * records: 3,790 page faults a replay with 8 MiB chunks, 1,910 with 1 MiB,
 * and its time 138 to 127 ms (three rounds of nine replays each). */
#define APPEND_CHUNK ((size_t)1 << 20)

/* Start writing back what the transaction just committed wrote, without
 * waiting for it (Linux; elsewhere nothing): the target's one sync at the
 * end then finds most of its pages on the disk already, where it would
 * otherwise write the whole store then (about 25 ms for the bench's
 * 100k-record replay, against 4 ms).  The CPU spent is the same: it is
 * the writeback the sync would start.  A failure here is no failure: the
 * sync at the end reports what did not reach the disk. */
static void app_writeback(bl_env *e)
{
    int fd;
    if (BL_PLAT_WRITEBACK && mdb_env_get_fd(e->env, &fd) == 0)
        bl_plat_writeback(fd);
}

/* ---- writeback while one long commit writes ------------------------------------ */

struct bl_writeback {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    bl_env *e;
};

static void *writeback_thread(void *arg)
{
    struct bl_writeback *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 1000000; /* every millisecond: ~2 MB written by then */
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &until);
        if (w->stop)
            break;
        pthread_mutex_unlock(&w->mu);
        app_writeback(w->e);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

bl_writeback *bl_writeback_start(bl_env *e)
{
    if (!BL_PLAT_WRITEBACK) {
        (void)e;
        return NULL;
    }
    struct bl_writeback *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->e = e;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->th, NULL, writeback_thread, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return NULL;
    }
    return w;
}

void bl_writeback_stop(bl_writeback *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

int bl_reserve_map(bl_env *e, uint64_t want)
{
    for (int i = 0; i < 64; i++) {
        MDB_envinfo info;
        MDB_stat st;
        bl_map_rdlock(e);
        mdb_env_info(e->env, &info);
        mdb_env_stat(e->env, &st);
        bl_map_unlock(e);
        uint64_t used = (uint64_t)(info.me_last_pgno + 1) * st.ms_psize;
        if (info.me_mapsize >= used + want)
            return 0;
        int rc = bl_env_resize(e, 0);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* ---- appending to tables ---------------------------------------------------- */

static void app_close_cursors(bl_appender *a)
{
    for (int i = 0; i < BL_DB_COUNT; i++) {
        if (a->cur[i] != NULL)
            mdb_cursor_close(a->cur[i]);
        a->cur[i] = NULL;
    }
}

static int app_begin(bl_appender *a)
{
    int rc;
    /* an appended page is full: 3x the data covers page headers, branch
     * pages and values that take overflow pages of their own */
    if ((rc = bl_reserve_map(a->e, 3 * (uint64_t)APPEND_CHUNK + ((uint64_t)64 << 20))) != 0)
        return rc;
    a->bytes = 0;
    return bl_wtxn_begin(a->e, &a->txn);
}

int bl_appender_init(bl_appender *a, bl_env *e, MDB_txn *txn)
{
    memset(a, 0, sizeof(*a));
    a->e = e;
    if (txn != NULL) {
        a->txn = txn;
        return 0;
    }
    a->own = 1;
    return app_begin(a);
}

int bl_appender_put(bl_appender *a, int db, const void *k, size_t kn, const void *v, size_t vn)
{
    return bl_appender_put_at(a, db, k, kn, v, vn, NULL);
}

int bl_appender_put_at(bl_appender *a, int db, const void *k, size_t kn, const void *v,
                       size_t vn, const void **at)
{
    MDB_val key = {kn, (void *)k}, val = {vn, (void *)v};
    int rc, map_full = 0;

    if (a->txn == NULL)
        return BINDLOG_EINVAL; /* a failed commit ended it */
    if (a->own && a->bytes >= APPEND_CHUNK) {
        app_close_cursors(a);
        rc = bl_wtxn_commit(a->e, a->txn, &map_full);
        a->txn = NULL;
        if (rc != 0)
            return rc;
        app_writeback(a->e);
        if ((rc = app_begin(a)) != 0)
            return rc;
    }
    if (a->cur[db] == NULL && (rc = mdb_cursor_open(a->txn, a->e->dbi[db], &a->cur[db])) != 0)
        return bl_mdb_error(rc);
    rc = mdb_cursor_put(a->cur[db], &key, &val, MDB_APPEND | (at != NULL ? MDB_RESERVE : 0));
    if (rc == MDB_MAP_FULL)
        a->map_full = 1;
    if (rc != 0)
        /* MDB_KEYEXIST: a key out of order or twice (a damaged input) */
        return rc == MDB_KEYEXIST ? BINDLOG_ECORRUPT : bl_mdb_error(rc);
    if (at != NULL) {
        /* the room LMDB made for the value, in a dirty page of this
         * transaction: an appended node is never moved by a later append */
        memcpy(val.mv_data, v, vn);
        *at = val.mv_data;
    }
    a->bytes += kn + vn + 16;
    return 0;
}

int bl_appender_finish(bl_appender *a)
{
    int rc = 0, map_full = 0;
    app_close_cursors(a);
    if (a->own && a->txn != NULL && (rc = bl_wtxn_commit(a->e, a->txn, &map_full)) == 0)
        app_writeback(a->e);
    a->txn = NULL;
    return rc;
}

void bl_appender_abort(bl_appender *a)
{
    app_close_cursors(a);
    if (a->own && a->txn != NULL)
        bl_wtxn_abort(a->e, a->txn);
    a->txn = NULL;
}

/* ---- the sink: merged state into the live tables ------------------------------ */

static int sink_binding(void *ctx, const void *key, size_t key_len, const void *val,
                        size_t val_len)
{
    return bl_appender_put(ctx, BL_DB_BINDINGS, key, key_len, val, val_len);
}

static int sink_session(void *ctx, const void *id, size_t id_len, const void *val,
                        size_t val_len)
{
    return bl_appender_put(ctx, BL_DB_SESSIONS, id, id_len, val, val_len);
}

static int sink_child(void *ctx, uint64_t parent_lsn, const void *child, size_t child_len)
{
    unsigned char k[BL_LCHILD_KEY_MAX];
    return bl_appender_put(ctx, BL_DB_CHILDREN, k, bl_lchild_key(k, parent_lsn, child, child_len),
                           "", 0);
}

void bl_appender_sink(bl_appender *a, bl_bulk_sink *s)
{
    s->ctx = a;
    s->binding = sink_binding;
    s->session = sink_session;
    s->child = sink_child;
}

/* ---- feeding a store's base image and log ------------------------------------- */

int bl_bulk_feed_image(bl_bulk *b, bl_env *src, MDB_txn *stxn, bl_appender *base_out,
                       uint64_t *live_bindings, uint64_t *live_sessions)
{
    *live_bindings = *live_sessions = 0;
    for (int sess = 0; sess < 2; sess++) {
        int db = sess ? BL_DB_BASE_SESSIONS : BL_DB_BASE_BINDINGS;
        bl_cursor c;
        MDB_val k, v;
        unsigned long n = 0;
        int rc;

        if ((rc = bl_cursor_open(&c, src, stxn, src->dbi[db], NULL, 0)) != 0)
            return rc;
        while ((rc = bl_cursor_next(&c, &k, &v)) > 0) {
            if (sess) {
                bl_sval s;
                if (bl_sval_decode(v.mv_data, v.mv_size, &s) != 0) {
                    rc = BL_BULK_FALLBACK; /* the sequential path names it */
                    break;
                }
                *live_sessions += s.ended_lsn == 0;
                rc = bl_bulk_image_session(b, k.mv_data, k.mv_size, v.mv_data, v.mv_size, s.key,
                                           s.key_len);
            } else {
                bl_bval bv;
                if (bl_bval_decode(v.mv_data, v.mv_size, &bv) != 0) {
                    rc = BL_BULK_FALLBACK;
                    break;
                }
                *live_bindings += bv.sid_len != 0;
                rc = bl_bulk_image_binding(b, k.mv_data, k.mv_size, v.mv_data, v.mv_size);
            }
            if (rc == 0 && base_out != NULL)
                rc = bl_appender_put(base_out, db, k.mv_data, k.mv_size, v.mv_data, v.mv_size);
            if (rc != 0)
                break;
            if (++n % 65536 == 0) {
                bl_map_unlock(src); /* let this process's writers grow the map */
                bl_map_rdlock(src);
            }
        }
        bl_cursor_close(&c);
        if (rc == BINDLOG_ECORRUPT)
            rc = BL_BULK_FALLBACK; /* a damaged length or page: named by the sequential path */
        if (rc != 0)
            return rc;
    }
    return 0;
}

int bl_bulk_feed_log(bl_bulk *b, bl_bulk_scan *x)
{
    bl_cursor c;
    MDB_val k, v;
    unsigned char kb[8];
    int rc;

    bl_put64be(kb, x->next_lsn);
    if ((rc = bl_cursor_open_snap(&c, x->ss, BL_DB_LOG, kb, 8)) != 0)
        return rc;
    while (x->next_lsn <= x->last_lsn) {
        if ((rc = bl_cursor_next(&c, &k, &v)) < 0) {
            if (rc == BINDLOG_ECORRUPT)
                rc = BL_BULK_FALLBACK; /* a damaged length or page: the sequential path names it */
            break;
        }
        /* a hole, a foreign key or time going back: the sequential path
         * gives the exact report */
        bl_record_head h;
        if (rc == 0 || k.mv_size != 8 || bl_get64be(k.mv_data) != x->next_lsn ||
            bl_record_peek(v.mv_data, v.mv_size, &h) != 0) {
            rc = BL_BULK_FALLBACK;
            break;
        }
        int64_t t = h.time_ms;
        if (t < x->last_time) {
            rc = BL_BULK_FALLBACK;
            break;
        }
        if (t > x->to_time) {
            /* the stop is decided on this record's time: it must be intact */
            bl_record r;
            rc = bl_record_decode(v.mv_data, v.mv_size, &r) == 0 ? 0 : BL_BULK_FALLBACK;
            break;
        }
        rc = 0;
        if (x->log_later != NULL)
            rc = bl_logcopy_add(x->log_later, v.mv_data, v.mv_size, x->next_lsn);
        else if (x->log_out != NULL)
            rc = bl_appender_put(x->log_out, BL_DB_LOG, k.mv_data, 8, v.mv_data, v.mv_size);
        if (rc != 0)
            break;
        /* by reference: the map lock is held until the bulk run is done
         * (no breathing here), so the snapshot's pages stay mapped */
        if ((rc = bl_bulk_record_ref(b, v.mv_data, v.mv_size, x->next_lsn, h.key, h.key_len)) != 0)
            break;
        x->next_lsn++;
        x->last_time = t;
        /* the scan is the first third of the work (bl_bulk_set_progress) */
        if (++x->scanned % 65536 == 0 && x->progress != NULL && x->total > 0)
            x->progress(x->progress_ctx, x->total / 3 * (x->scanned < x->total ? x->scanned
                                                                                 : x->total) /
                                             x->total,
                        x->total);
        rc = 0;
    }
    bl_cursor_close(&c);
    return rc;
}

/* ---- the log copied on a thread of its own ------------------------------------- */

/* Records handed to the thread at a time: the adds publish this many
 * together, and the thread copies their references out under the lock (so
 * that the array may grow meanwhile). */
#define LC_BATCH 1024

struct bl_logcopy {
    struct lc_rec {
        const unsigned char *p;
        size_t len;
    } *recs;
    size_t n, cap;        /* added, room; the adding thread's */
    size_t avail;         /* published to the thread (mu) */
    int ended;            /* no more will be added (mu) */
    uint64_t first_lsn;
    bl_env *dst;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started, joined, rc;
    char msg[BL_ERRMSG_MAX]; /* the thread's detail, for the joining thread */
};

bl_logcopy *bl_logcopy_new(uint64_t records)
{
    bl_logcopy *lc = calloc(1, sizeof(*lc));
    if (lc == NULL)
        return NULL;
    lc->cap = records > 0 && records < ((size_t)1 << 24) ? (size_t)records : 1024;
    if ((lc->recs = malloc(lc->cap * sizeof(*lc->recs))) == NULL) {
        free(lc);
        return NULL;
    }
    pthread_mutex_init(&lc->mu, NULL);
    pthread_cond_init(&lc->cv, NULL);
    return lc;
}

static void publish(bl_logcopy *lc, int end)
{
    pthread_mutex_lock(&lc->mu);
    lc->avail = lc->n;
    if (end)
        lc->ended = 1;
    pthread_cond_signal(&lc->cv);
    pthread_mutex_unlock(&lc->mu);
}

int bl_logcopy_add(bl_logcopy *lc, const void *rec, size_t len, uint64_t lsn)
{
    if (lc->ended)
        return BINDLOG_EINVAL; /* joined: nothing more goes in */
    if (lc->n == 0)
        lc->first_lsn = lsn; /* read by the thread only once a record is published */
    else if (lsn != lc->first_lsn + lc->n)
        return BINDLOG_EINVAL; /* the caller feeds consecutive LSNs */
    if (lc->n == lc->cap) {
        pthread_mutex_lock(&lc->mu); /* the thread reads the array under it */
        struct lc_rec *nr = realloc(lc->recs, 2 * lc->cap * sizeof(*nr));
        if (nr != NULL) {
            lc->recs = nr;
            lc->cap *= 2;
        }
        pthread_mutex_unlock(&lc->mu);
        if (nr == NULL)
            return BINDLOG_ENOMEM;
    }
    lc->recs[lc->n++] = (struct lc_rec){rec, len};
    if (lc->n - lc->avail >= LC_BATCH) /* avail only moves here: no lock to read it */
        publish(lc, 0);
    return 0;
}

static void *logcopy_thread(void *arg)
{
    bl_logcopy *lc = arg;
    struct lc_rec batch[LC_BATCH];
    bl_appender a;
    unsigned char k[8];
    size_t done = 0;
    int rc = bl_appender_init(&a, lc->dst, NULL);

    while (rc == 0) {
        size_t m;
        uint64_t first;
        pthread_mutex_lock(&lc->mu);
        while (lc->avail == done && !lc->ended)
            pthread_cond_wait(&lc->cv, &lc->mu);
        m = lc->avail - done < LC_BATCH ? lc->avail - done : LC_BATCH;
        memcpy(batch, lc->recs + done, m * sizeof(*batch));
        first = lc->first_lsn;
        pthread_mutex_unlock(&lc->mu);
        /* cppcheck-suppress knownConditionTrueFalse ; the wait above lets avail grow */
        if (m == 0)
            break; /* ended, and every record copied */
        /* cppcheck-suppress knownConditionTrueFalse ; as above */
        for (size_t i = 0; rc == 0 && i < m; i++) {
            bl_put64be(k, first + done + i);
            rc = bl_appender_put(&a, BL_DB_LOG, k, 8, batch[i].p, batch[i].len);
        }
        done += m;
    }
    if (rc == 0)
        rc = bl_appender_finish(&a);
    else
        bl_appender_abort(&a);
    if (rc != 0 && bl_err_isset())
        snprintf(lc->msg, sizeof lc->msg, "%s", bl_err_get());
    lc->rc = rc;
    return NULL;
}

/* The copy is over: its result, with its detail on the calling thread. */
static int logcopy_done(bl_logcopy *lc)
{
    lc->joined = 1;
    if (lc->rc != 0 && lc->msg[0] != '\0')
        bl_err_set(lc->rc, "%s", lc->msg);
    return lc->rc;
}

void bl_logcopy_start(bl_logcopy *lc, bl_env *dst)
{
    lc->dst = dst;
    lc->started = pthread_create(&lc->th, NULL, logcopy_thread, lc) == 0;
}

int bl_logcopy_join(bl_logcopy *lc)
{
    if (lc->joined)
        return lc->rc;
    publish(lc, 1);
    if (lc->started)
        pthread_join(lc->th, NULL);
    else if (lc->dst != NULL)
        logcopy_thread(lc); /* no thread: the whole copy on this one, now */
    return logcopy_done(lc);
}

void bl_logcopy_free(bl_logcopy *lc)
{
    if (lc == NULL)
        return;
    bl_logcopy_join(lc);
    pthread_mutex_destroy(&lc->mu);
    pthread_cond_destroy(&lc->cv);
    free(lc->recs);
    free(lc);
}

uint64_t bl_bulk_size_hint(bl_env *e, MDB_txn *txn)
{
    MDB_stat st;
    uint64_t pages = 0;
    static const int dbs[] = {BL_DB_LOG, BL_DB_BASE_BINDINGS, BL_DB_BASE_SESSIONS};
    for (size_t i = 0; i < sizeof(dbs) / sizeof(dbs[0]); i++)
        if (mdb_stat(txn, e->dbi[dbs[i]], &st) == 0)
            pages += st.ms_leaf_pages + st.ms_overflow_pages;
    mdb_env_stat(e->env, &st);
    return pages * st.ms_psize;
}
