/*
 * ckpt.c -- the checkpoint: fold the log's tail into LMDB, then let the log
 * space be reused; its background thread; quiescing the log for direct
 * LMDB writes; the writers' lock and its repair (walenv.h).
 *
 * One checkpoint is one LMDB write transaction:
 *   1. under the checkpointers' lock (shared memory), take the visible end
 *      as the target (I1: never fold a frame that is not visible) and catch
 *      the index up to it;
 *   2. begin the write transaction and read LMDB's head H: that, not the
 *      shared memory, is where the fold starts (a checkpointer that died
 *      after its commit left the shared memory behind LMDB);
 *   3. take the index's groups after H up to the target; put the newest
 *      value of every (table, key) they touch, in key order (a key written
 *      a thousand times since the last checkpoint is written once), and
 *      append their records to the log table in LSN order (MDB_APPEND);
 *   4. meta "wal" := the log position and chain after the last group, in
 *      the same transaction as the meta puts the groups carry (head,
 *      counts, statistics), so LMDB always names where recovery starts;
 *   5. commit with LMDB's own syncs (FULL and NORMAL; none in NONE); then
 *      publish the new checkpoint in the shared memory and wake writers
 *      waiting for space;
 *   6. a settling commit (settle(), below), so that the next checkpoint can
 *      reuse the pages this one freed; then trim the index.
 * A checkpoint that fails leaves LMDB as it was and is retried later: a
 * full disk is BINDLOG_ENOSPC, never a panic (LMDB writes its meta page
 * only after every data page is written).
 *
 * The background thread runs in each process that has the store open for
 * writing: woken by a leader when the tail passes half of the log,
 * and once a second otherwise (age), it folds whatever is visible.  A
 * caller runs a checkpoint itself only when the log is full.
 */
#define _GNU_SOURCE
#include "lmdb/walenv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/failpoint.h"
#include "core/record.h"
#include "lmdb/pagecheck.h"
#include "platform/platform.h"

/* ---- the writers' lock ------------------------------------------------------ */

int bl_wal_lock(bl_env *e)
{
    bl_walenv *w = e->wal;
    bl_shm *m = w->shm.m;
    bl_wal_at from, end, ck;
    int died, bad, rc;

    if (m == NULL)
        return bl_err_set(BINDLOG_EREADONLY, "the store is open without its shared memory");
    if ((rc = bl_shm_lock(m, &m->wlock, &died, w->lock_ms)) != 0)
        return rc;
    bad = bl_shm_get_end(m, &from) != 0;
    if (died || bad) {
        /* Its last holder died holding it, maybe between writing a frame
         * and recording it (the record itself is double-buffered: its
         * current copy is whole), or a stray write damaged the record.
         * The log says what was written: scan from the recorded end (from
         * the checkpoint when the record is unusable) and adopt every
         * valid frame. */
        if (bad && (rc = bl_wal_ckpt(e, &from)) != 0)
            goto fail;
        rc = bl_wal_scan(w->fd, w->cap, w->salt, &from, UINT64_MAX, NULL, NULL, &end);
        if (rc != 0)
            goto fail; /* could not read the log: leave it to the next one */
        bl_shm_set_end(m, &end);
        from = end;
        if (died)
            bl_plat_xlock_consistent(&m->wlock);
    }
    /* the visible end lies between the checkpoint and the written end */
    uint64_t vis = atomic_load(&m->vis_lsn);
    if (vis > from.lsn)
        bl_shm_set_vis(m, from.lsn);
    else if (bl_shm_get_ckpt(m, &ck) == 0 && vis < ck.lsn && ck.lsn <= from.lsn)
        bl_shm_publish(m, ck.lsn);
    if ((rc = bl_shm_linked(&w->shm)) != 0) {
        bl_shm_unlock(m, &m->wlock);
        return rc;
    }
    return 0;
fail:
    bl_shm_unlock(m, &m->wlock);
    return rc;
}

void bl_wal_unlock(bl_env *e) { bl_shm_unlock(e->wal->shm.m, &e->wal->shm.m->wlock); }

/* ---- folding ------------------------------------------------------------------ */

/*
 * The puts of a fold, in the order they are written: by table, then by
 * key as LMDB orders it.  A key written more than once in the fold is put
 * once, with its newest value: the older versions are dropped before the
 * sort (a key of the bindings table moves on most events, a session is
 * written when it starts and again when it ends: a third of a bulk load's
 * puts), found through the versions' hashes.  Each entry carries its
 * key's first 8 bytes as a big-endian number (zero padded): many
 * comparisons end there, without following the pointer to the key (qsort
 * over pointers to the versions, each comparison two cache misses and a
 * call to memcmp, was a tenth of the checkpoint).
 */
typedef struct fput {
    uint64_t pfx;
    uint32_t klen;
    const bl_tver *v;
} fput;

typedef struct fold {
    fput *puts, *tmp;
    size_t nputs, cap;
    uint32_t *seen; /* the newest versions met, by hash: index in tmp + 1 */
    size_t nseen;   /* slots, a power of two */
} fold;

static uint64_t key_prefix(const unsigned char *k, size_t n)
{
    unsigned char b[8] = {0};
    memcpy(b, k, n < 8 ? n : 8);
    return bl_get64be(b);
}

/* a before b?  (Zero padding keeps the prefix's order LMDB's: a key that
 * is shorter than 8 bytes and a prefix of another ties or sorts first,
 * and a tie goes to the whole keys.  No two entries have the same key.) */
static inline int fput_before(const fput *a, const fput *b)
{
    if (a->pfx != b->pfx)
        return a->pfx < b->pfx;
    return bl_key_cmp(a->v->key, a->klen, b->v->key, b->klen) < 0;
}

/* Sort p[0..n) (tmp: room for n more): insertion sort of runs of 16,
 * then bottom-up merges; O(n log n) whatever the keys. */
static void fput_sort(fput *p, fput *tmp, size_t n)
{
    enum { RUN = 16 };
    for (size_t lo = 0; lo < n; lo += RUN) {
        size_t hi = lo + RUN < n ? lo + RUN : n;
        for (size_t i = lo + 1; i < hi; i++) {
            fput x = p[i];
            size_t j = i;
            for (; j > lo && fput_before(&x, &p[j - 1]); j--)
                p[j] = p[j - 1];
            p[j] = x;
        }
    }
    fput *src = p, *dst = tmp;
    for (size_t w = RUN; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                dst[k++] = fput_before(&src[j], &src[i]) ? src[j++] : src[i++];
            while (i < mid)
                dst[k++] = src[i++];
            while (j < hi)
                dst[k++] = src[j++];
        }
        fput *t = src;
        src = dst;
        dst = t;
    }
    if (src != p)
        memcpy(p, src, n * sizeof(*p));
}

/* Room in f for `total` puts: 0 or ENOMEM. */
static int fold_room(fold *f, size_t total)
{
    if (total > f->cap) {
        size_t nc = f->cap ? f->cap : 1024;
        while (nc < total)
            nc *= 2;
        fput *np = realloc(f->puts, nc * sizeof(*np)), *nt;
        if (np == NULL)
            return ENOMEM;
        f->puts = np;
        if ((nt = realloc(f->tmp, nc * sizeof(*nt))) == NULL)
            return ENOMEM;
        f->tmp = nt;
        f->cap = nc;
    }
    size_t slots = 1024;
    while (slots < 2 * total)
        slots *= 2;
    if (slots > f->nseen) {
        uint32_t *ns = realloc(f->seen, slots * sizeof(*ns));
        if (ns == NULL)
            return ENOMEM;
        f->seen = ns;
        f->nseen = slots;
    }
    memset(f->seen, 0, f->nseen * sizeof(*f->seen));
    return 0;
}

/* 1 if a newer version of v's key is among tmp[0..) already (recording
 * v's place, `at`, when it is not). */
static int fold_seen(fold *f, const bl_tver *v, uint32_t at)
{
    size_t mask = f->nseen - 1;
    for (size_t i = v->hash & mask;; i = (i + 1) & mask) {
        uint32_t s = f->seen[i];
        if (s == 0) {
            f->seen[i] = at + 1;
            return 0;
        }
        /* a slot says at + 1 only once the caller has written tmp[at] */
        /* NOLINTNEXTLINE(clang-analyzer-core.uninitialized.Assign) */
        const bl_tver *o = f->tmp[s - 1].v;
        if (o->hash == v->hash && o->table == v->table && o->klen == v->klen &&
            memcmp(o->key, v->key, v->klen) == 0)
            return 1;
    }
}

/* Apply groups gs[0..n) (records after H) to txn.  A raw LMDB code.
 * The puts go in key order through one cursor per table: LMDB then finds
 * a key that lands on the leaf page of the one before without descending
 * the tree again; the records are appended through a cursor too. */
static int fold_groups(bl_env *e, MDB_txn *txn, bl_tgroup *const *gs, size_t n, fold *f)
{
    size_t count[BL_DB_COUNT] = {0}, at[BL_DB_COUNT], total = 0, kept = 0;
    int rc = 0;

    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < gs[i]->nver; j++) {
            unsigned t = gs[i]->ver[j].table;
            if (t != BL_DB_LOG && t < BL_DB_COUNT)
                total++;
        }
    if ((rc = fold_room(f, total)) != 0)
        return rc;
    /* newest first, each key's first meeting kept: its newest value */
    for (size_t i = n; i-- > 0;)
        for (uint32_t j = gs[i]->nver; j-- > 0;) {
            const bl_tver *v = &gs[i]->ver[j];
            if (v->table == BL_DB_LOG || v->table >= BL_DB_COUNT || fold_seen(f, v, (uint32_t)kept))
                continue;
            f->tmp[kept++] = (fput){key_prefix(v->key, v->klen), v->klen, v};
            count[v->table]++;
        }
    /* by table, then each table by key */
    for (size_t t = 0, off = 0; t < BL_DB_COUNT; t++) {
        at[t] = off;
        off += count[t];
    }
    for (size_t i = 0; i < kept; i++)
        f->puts[at[f->tmp[i].v->table]++] = f->tmp[i];
    f->nputs = kept;
    for (size_t t = 0, off = 0; rc == 0 && t < BL_DB_COUNT; off += count[t], t++) {
        if (count[t] == 0)
            continue;
        fput *p = f->puts + off;
        size_t m = count[t];
        MDB_cursor *c;
        fput_sort(p, f->tmp, m);
        if ((rc = mdb_cursor_open(txn, e->dbi[t], &c)) != 0)
            break;
        for (size_t i = 0; rc == 0 && i < m; i++) {
            const bl_tver *v = p[i].v;
            MDB_val key = {v->klen, (void *)v->key}, val = {v->vlen, (void *)v->val};
            rc = mdb_cursor_put(c, &key, &val, 0);
        }
        mdb_cursor_close(c);
    }
    if (rc != 0)
        return rc;
    MDB_cursor *c;
    if ((rc = mdb_cursor_open(txn, e->dbi[BL_DB_LOG], &c)) != 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < n; i++)
        for (uint32_t j = 0; rc == 0 && j < gs[i]->nver; j++) {
            const bl_tver *v = &gs[i]->ver[j];
            if (v->table == BL_DB_LOG) {
                MDB_val key = {8, (void *)v->key}, val = {v->vlen, (void *)v->val};
                rc = mdb_cursor_put(c, &key, &val, MDB_APPEND);
            }
        }
    mdb_cursor_close(c);
    return rc;
}

/* Let the index drop what a fold just put in LMDB.  A leader of this
 * process pins the index while it decides its group, which under a
 * steady stream of batches is most of the time: a single attempt left the
 * groups of several folds in memory (60 batches of 1,000 events where one
 * fold is 12), and with them a larger map for every decision to probe.
 * So the attempt is repeated in the gaps between groups, 50 us apart, for
 * 10 ms at most; then the next fold or reader trims. */
static void trim_after_fold(bl_env *e)
{
    for (int i = 0; i < 200 && !bl_wal_trim(e); i++) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

/* This thread's CPU time, for BINDLOG_CKPT_DEBUG. */
static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Did LMDB mark its environment fatally failed (a failed meta write)? */
static int lmdb_panicked(bl_env *e)
{
    MDB_txn *probe;
    int p = mdb_txn_begin(e->env, NULL, MDB_RDONLY, &probe);
    if (p == 0)
        mdb_txn_abort(probe);
    return p == MDB_PANIC;
}

/* Publish LMDB's checkpoint in the shared memory if it is ahead (clock
 * held). */
static void publish_ckpt(bl_walenv *w, const bl_wal_at *at, int synced)
{
    bl_shm *m = w->shm.m;
    bl_wal_at cur;
    if (bl_shm_get_ckpt(m, &cur) != 0) {
        cur.lsn = 0; /* damaged: this checkpoint, just read from LMDB, replaces it */
        cur.pos = UINT64_MAX;
    }
    if (!synced)
        bl_shm_store32(&m->ckpt_unsynced, 1);
    if (at->lsn > cur.lsn || (at->lsn == cur.lsn && at->pos != cur.pos))
        bl_shm_set_ckpt(m, at);
    if (atomic_load(&m->space_waiters) != 0)
        bl_shm_wake(&m->space_futex);
}

/*
 * The settling commit, right after a checkpoint's: an LMDB write
 * transaction that writes meta "wal" again, unchanged.  LMDB keeps the
 * snapshot before the last commit whole (its meta page is the one a torn
 * meta write falls back to), so the pages a commit frees can be reused only
 * from the second commit after it on.  A checkpoint rewrites every leaf its
 * puts touch, a third of the sessions tree at random keys, so
 * with checkpoints back to back the next one could not reuse what this one
 * freed and the file grew by a second copy of those leaves (a fresh bulk
 * load: 369 free bytes an event of 992).  After this commit, which frees
 * only the few pages it touches itself, the next checkpoint reuses the
 * pages this one freed.  It changes no value, so it is as safe as any
 * commit; it syncs as the checkpoint did (an unsynced meta page could reach
 * the disk before its data).  A failure leaves the store as it was and
 * only the reuse is lost, except LMDB's panic, which the caller reports.
 */
static int settle(bl_env *e, const bl_wal_meta *wm)
{
    MDB_txn *txn;
    bl_map_rdlock(e);
    int mrc = mdb_txn_begin(e->env, NULL, 0, &txn);
    if (mrc == 0) {
        mdb_env_set_flags(e->env, MDB_NOSYNC, e->wal->ckpt_mode == BINDLOG_DURABILITY_NONE);
        if ((mrc = bl_meta_put_wal(e, txn, wm)) == 0)
            mrc = mdb_txn_commit(txn);
        else
            mdb_txn_abort(txn);
    }
    bl_map_unlock(e);
    return mrc != 0 && lmdb_panicked(e) ? mrc : 0;
}

/* One fold, the checkpointers' lock held.  *done: records folded. */
static int fold_once(bl_env *e, uint64_t target, uint64_t *done)
{
    bl_walenv *w = e->wal;
    fold f = {NULL, NULL, 0, 0, NULL, 0};
    int rc = 0;

    *done = 0;
    for (int attempt = 0;; attempt++) {
        MDB_txn *txn;
        bl_head head;
        bl_wal_meta wm;
        bl_tgroup **gs = NULL;
        size_t n = 0, first = 0;
        bl_wal_at base;

        bl_map_rdlock(e);
        int mrc = mdb_txn_begin(e->env, NULL, 0, &txn);
        if (mrc == MDB_MAP_RESIZED) {
            bl_map_unlock(e);
            if ((rc = bl_env_resize(e, 1)) != 0)
                break;
            continue;
        }
        if (mrc != 0) {
            bl_map_unlock(e);
            rc = bl_mdb_error(mrc);
            break;
        }
        if ((rc = bl_meta_get_head(e, txn, &head)) != 0 ||
            (rc = bl_meta_get_wal(e, txn, &wm)) != 0) {
            mdb_txn_abort(txn);
            bl_map_unlock(e);
            break;
        }
        if (head.lsn >= target) {
            /* nothing to fold; make sure the shared memory knows LMDB's */
            bl_wal_at at = {head.lsn, wm.pos, wm.chain};
            mdb_txn_abort(txn);
            bl_map_unlock(e);
            publish_ckpt(w, &at, 1);
            rc = 0;
            break;
        }
        if ((rc = bl_tail_groups(&w->tail, target, &gs, &n, &base)) != 0) {
            mdb_txn_abort(txn);
            bl_map_unlock(e);
            break;
        }
        while (first < n && gs[first]->last_lsn <= head.lsn)
            first++;
        if (first == n || gs[first]->first_lsn != head.lsn + 1 ||
            gs[n - 1]->last_lsn != target) {
            rc = bl_err_set(BINDLOG_ECORRUPT,
                            "folding the log into data.mdb: its tail in memory does not "
                            "continue LMDB's head %llu up to %llu",
                            (unsigned long long)head.lsn, (unsigned long long)target);
            mdb_txn_abort(txn);
            bl_map_unlock(e);
            bl_tail_groups_free(gs, n);
            break;
        }
        const bl_tgroup *last = gs[n - 1];
        wm.pos = last->after.pos;
        wm.chain = last->after.chain;
        double c0 = w->debug ? cpu_ms() : 0, c1 = 0;
        mrc = fold_groups(e, txn, gs + first, n - first, &f);
        if (w->debug)
            c1 = cpu_ms();
        if (mrc == 0)
            mrc = bl_meta_put_wal(e, txn, &wm);
        if (mrc == 0 && (rc = BL_FAILPOINT("ckpt.begin")) != 0) {
            mdb_txn_abort(txn);
            bl_map_unlock(e);
            bl_tail_groups_free(gs, n);
            break;
        }
        if (mrc == 0) {
            /* inside the write transaction: no other commit of this
             * process can read the flags meanwhile */
            mdb_env_set_flags(e->env, MDB_NOSYNC, w->ckpt_mode == BINDLOG_DURABILITY_NONE);
            mrc = mdb_txn_commit(txn);
            if (w->debug)
                fprintf(stderr,
                        "bindlog checkpoint: %llu events, %zu puts; CPU ms: sort and puts "
                        "%.1f, commit %.1f\n",
                        (unsigned long long)(target - head.lsn), f.nputs, c1 - c0,
                        cpu_ms() - c1);
        } else {
            mdb_txn_abort(txn);
        }
        bl_map_unlock(e);
        bl_wal_at at = {target, wm.pos, wm.chain};
        bl_tail_groups_free(gs, n);
        if (mrc == MDB_MAP_FULL && attempt < 64) {
            if ((rc = bl_env_resize(e, 0)) != 0)
                break;
            continue;
        }
        if (mrc != 0) {
            if (lmdb_panicked(e)) {
                rc = bl_group_panic(&e->g, "data.mdb: LMDB failed while writing its meta page: %s",
                                    mdb_strerror(mrc));
            } else {
                /* nothing reached a meta page: LMDB is as it was.  A short
                 * write on a full file system (EIO) is a full disk too. */
                rc = bl_write_error(e, mrc);
                bl_err_set(rc, "folding the log into data.mdb: %s", mdb_strerror(mrc));
            }
            break;
        }
        if ((rc = BL_FAILPOINT("ckpt.after")) != 0) {
            /* committed; the shared memory is not told: the next
             * checkpointer finds LMDB ahead and publishes it */
            break;
        }
        publish_ckpt(w, &at, w->ckpt_mode != BINDLOG_DURABILITY_NONE);
        *done = target - head.lsn;
        rc = 0;
        if ((mrc = settle(e, &wm)) != 0)
            rc = bl_group_panic(&e->g, "data.mdb: LMDB failed while writing its meta page: %s",
                                mdb_strerror(mrc));
        break;
    }
    free(f.puts);
    free(f.tmp);
    free(f.seen);
    return rc;
}

int bl_ckpt_run(bl_env *e, int wlock_held)
{
    bl_walenv *w = e->wal;
    bl_shm *m = w->shm.m;
    int rc;
    uint64_t done = 0;

    if (m == NULL || w->log_rdonly)
        return 0;
    if (bl_group_panicked(&e->g))
        return bl_group_panic_again(&e->g);
    if (wlock_held) {
        /* frames written but not visible (their writer is flushing, or
         * died before it could): flush and publish them, so they can be
         * folded */
        bl_wal_at end;
        if ((rc = bl_shm_get_end(m, &end)) != 0) /* checked by bl_wal_lock */
            return bl_err_set(rc, "%s: the log's written end fails its check", BL_SHM_FILE);
        if (atomic_load(&m->vis_lsn) < end.lsn) {
            if (w->ckpt_mode != BINDLOG_DURABILITY_NONE) {
                if (bl_wal_sync(w->fd) != 0)
                    return bl_group_panic(&e->g, "%s", bl_err_get());
                bl_wal_flushed(e, end.pos);
            }
            bl_shm_publish(m, end.lsn);
        }
    }
    /* The checkpoint is what writes data.mdb: a file with a damaged page
     * takes nothing, lest LMDB's copy-on-write hand out a page the damage
     * still uses (docs/design.md, "Damaged files").  So the whole-store
     * walk's verdict is needed here -- and only here: the commits that
     * wrote the frames touched nothing but the log.  Waits for what is
     * left of the background walk, or walks in this thread when there is
     * none; then the damage, if any, refuses every checkpoint and the
     * frames stay in the log. */
    bl_wal_at folded;
    int nothing = bl_shm_get_ckpt(m, &folded) == 0 && atomic_load(&m->vis_lsn) <= folded.lsn;
    if (!nothing && (rc = bl_ckpt_walk_wait(e, 1)) != 0) {
        atomic_fetch_add(&w->ckpt_failures, 1);
        return rc;
    }
    if ((rc = bl_wal_clock(e)) != 0)
        return rc;
    uint64_t target = atomic_load(&m->vis_lsn);
    bl_wal_at end;
    if ((rc = bl_shm_get_end(m, &end)) != 0) {
        bl_wal_cunlock(e);
        if (wlock_held) /* bl_wal_lock found it whole: damaged since */
            return bl_err_set(rc, "%s: the log's written end fails its check", BL_SHM_FILE);
        if ((rc = bl_wal_end(e, &end)) != 0) /* repairs it under the writers' lock */
            return rc;
        if ((rc = bl_wal_clock(e)) != 0)
            return rc;
    }
    if (target > end.lsn)
        target = end.lsn; /* a stray write: never fold past the written end */
    rc = bl_wal_catch_up(e, target);
    if (rc == 0)
        rc = fold_once(e, target, &done);
    bl_wal_cunlock(e);
    if (rc == 0) {
        trim_after_fold(e);
        if (done)
            atomic_fetch_add(&w->checkpoints, 1);
    } else {
        atomic_fetch_add(&w->ckpt_failures, 1);
    }
    return rc;
}

int bl_ckpt_settle(bl_env *e)
{
    int rc;
    if (e->wal->shm.m == NULL)
        return 0;
    if ((rc = bl_wal_clock(e)) != 0)
        return rc;
    bl_wal_cunlock(e);
    return 0;
}

int bl_lmdb_checkpoint(bindlog *h, uint64_t *lsn)
{
    bl_env *e = h->e;
    if (e->wal->shm.m == NULL || e->wal->log_rdonly)
        return bl_err_set(BINDLOG_EREADONLY, "the store is open without its shared memory");
    int rc = bl_ckpt_run(e, 0);
    bl_wal_at at = {0, 0, 0};
    int crc = bl_wal_ckpt(e, &at);
    *lsn = at.lsn;
    return rc != 0 ? rc : crc;
}

/* ---- zero-filling the ring ------------------------------------------------------ */

#define FILL_STEP ((size_t)256 << 10)

/* This process's account of its zero-fill (bl_walenv.fill), for tests and
 * the docs' figures: what a step wrote, whether it began below the highest
 * byte this process had already zeroed (zeroed again) or below the
 * written end (from the tail).  Under the writers' lock. */
static void fill_count(bl_walenv *w, uint64_t from, uint64_t to, uint64_t end)
{
    bl_fill_stats *f = &w->fill;
    atomic_fetch_add(&f->steps, 1);
    atomic_fetch_add(&f->bytes, to - from);
    uint64_t hi = atomic_load(&f->hi);
    if (from < hi)
        atomic_fetch_add(&f->again, (to < hi ? to : hi) - from);
    if (from < end)
        atomic_fetch_add(&f->behind, 1);
    if (to > hi)
        atomic_store(&f->hi, to);
}

/* Write zeros over the next part of the ring's first lap that neither a
 * frame nor an earlier step wrote: from the fill frontier `filled`, which
 * only grows (commits raise it past their frames, never lower it), or from
 * the written end if the writers overtook it (a step that failed, say).
 * So each byte of the ring is zeroed at most once in the store's life, and
 * never behind the written end (nothing there is read); under the writers'
 * lock so that no frame lands there meanwhile.  Returns 1 while there is
 * more to fill, 0 when the ring is filled (or cannot be: a write failed).
 * The frontier goes to the log's header under the same lock (so that the
 * header never moves backwards either) and survives a restart; the flush
 * after a step is this thread's, never a commit's. */
static int fill_step(bl_env *e)
{
    static const unsigned char zero[FILL_STEP];
    bl_walenv *w = e->wal;
    bl_shm *m = w->shm.m;
    bl_wal_at end;
    int more = 0;

    if (atomic_load(&m->filled) >= w->cap)
        return 0;
    if (bl_wal_lock(e) != 0)
        return 0;
    bl_shm_get_end(m, &end); /* checked by bl_wal_lock */
    uint64_t from = atomic_load(&m->filled);
    if (end.pos >= w->cap) {
        bl_shm_store64(&m->filled, w->cap); /* the writers went all the way round */
    } else {
        if (from < end.pos)
            from = end.pos;
        uint64_t to = from + FILL_STEP < w->cap ? from + FILL_STEP : w->cap;
        if (to > from && bl_wal_pwrite(w->fd, w->cap, from, zero, (size_t)(to - from)) != 0) {
            bl_wal_unlock(e);
            bl_err_clear();
            return 0; /* a full disk, say: the writers fill it as they go */
        }
        if (to > from)
            fill_count(w, from, to, end.pos);
        bl_shm_store64(&m->filled, to);
        more = to < w->cap;
    }
    bl_wal_set_filled(w->fd, w->cap, w->salt, atomic_load(&m->filled));
    bl_wal_unlock(e);
    /* the blocks' allocation is made durable here, before a frame's flush
     * would have to journal it; the flush covers the frames written
     * before it too */
    if (w->ckpt_mode != BINDLOG_DURABILITY_NONE && bl_wal_sync(w->fd) == 0)
        bl_wal_flushed(e, end.pos);
    bl_err_clear();
    return more;
}

/* ---- the background thread ------------------------------------------------ */

typedef struct ckpt_arg {
    bl_env *e;
    unsigned gen; /* the thread runs while the environment's generation is this */
} ckpt_arg;

/* Asked by the walk now and then, told how far it is: has the thread been
 * told to stop?  The walk.step failpoint slows the walk down (sleep) or
 * stops it short (eio: the first write then walks itself). */
static int walk_stop(void *p, uint64_t done, uint64_t total)
{
    ckpt_arg *a = p;
    bl_walenv *w = a->e->wal;
    if (BL_FAILPOINT("walk.step") != 0)
        return 1;
    pthread_mutex_lock(&w->cmu);
    w->walk_done = done;
    w->walk_total = total;
    if (w->walk_watchers > 0)
        pthread_cond_broadcast(&w->wcv);
    int stop = w->gen != a->gen;
    pthread_mutex_unlock(&w->cmu);
    return stop;
}

/*
 * The whole-store page walk that a process's first write needs
 * (pagecheck.h), run here from open so that the write does not pay for
 * it.  bl_ckpt_open marked it BL_WALK_RUNNING when it made the thread, so
 * that a write arriving before the thread runs waits for it too.  Called
 * with cmu held, returns with it held.  A walk that is stopped (close) or
 * fails for want of memory leaves BL_WALK_TODO: the first write then walks
 * itself.  Damage is kept with its message, for every write.
 */
static void walk_store(ckpt_arg *a)
{
    bl_env *e = a->e;
    bl_walenv *w = e->wal;

    w->walk_t0_ns = bl_mono_ns();
    w->walk_done = w->walk_total = 0;
    pthread_mutex_unlock(&w->cmu);
    bl_err_clear();
    /* the walk's reads of pages not cached yield to the commits' flushes
     * of the log (at idle I/O priority where the system has one); the
     * checkpoints after it run at the thread's own priority again */
    int ioprio, idle = bl_plat_io_idle_begin(&ioprio) == 0;
    int rc = bl_pc_guard_store_bg(e, walk_stop, a);
    if (idle)
        bl_plat_io_idle_end(ioprio);
    pthread_mutex_lock(&w->cmu);
    if (rc == 0) {
        atomic_store_explicit(&w->store_checked, 1, memory_order_release);
        w->walk = BL_WALK_DONE;
    } else if (rc == BINDLOG_ECORRUPT) {
        w->walk_rc = rc;
        bl_pc_copy(w->walk_msg, sizeof w->walk_msg, bl_err_get());
        w->walk = BL_WALK_BAD;
    } else {
        w->walk = BL_WALK_TODO;
    }
    bl_err_clear();
    pthread_cond_broadcast(&w->wcv);
}

static void *ckpt_main(void *p)
{
    ckpt_arg a = *(ckpt_arg *)p;
    bl_env *e = a.e;
    bl_walenv *w = e->wal;
    int64_t backoff_ms = 0;

    free(p);
    pthread_mutex_lock(&w->cmu);
#define STOPPED (w->gen != a.gen)
    if (!STOPPED && w->walk == BL_WALK_RUNNING)
        walk_store(&a);
    if (!w->active && !STOPPED) {
        /* started by open, and no commit since: the walk was all there was
         * to do; a commit starts a new thread (bl_ckpt_start) */
        w->exited = 1;
        pthread_mutex_unlock(&w->cmu);
        return NULL;
    }
    while (!STOPPED) {
        if (!w->kicked || backoff_ms) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            int64_t ms = backoff_ms ? backoff_ms : 1000;
            ts.tv_sec += (time_t)(ms / 1000);
            ts.tv_nsec += (long)(ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&w->ccv, &w->cmu, &ts);
        }
        if (STOPPED)
            break;
        w->kicked = 0;
        pthread_mutex_unlock(&w->cmu);
        bl_shm *m = w->shm.m;
        int rc = 0;
        bl_wal_at ck = {0, 0, 0};
        if (bl_wal_ckpt(e, &ck) != 0)
            bl_err_clear();
        if (atomic_load(&m->vis_lsn) > ck.lsn && !bl_group_panicked(&e->g))
            rc = bl_ckpt_run(e, 0);
        /* the zero-fill, one step at a time while nobody asks to stop */
        while (!bl_group_panicked(&e->g) && fill_step(e)) {
            pthread_mutex_lock(&w->cmu);
            int stop = STOPPED;
            pthread_mutex_unlock(&w->cmu);
            if (stop)
                break;
        }
        /* a failure (a full disk) is retried later, more slowly each time */
        backoff_ms = rc == 0 ? 0 : (backoff_ms ? (backoff_ms < 2000 ? 2 * backoff_ms : 4000) : 50);
        pthread_mutex_lock(&w->cmu);
        /* Leaders kick while the log's use is past the trigger, and it
         * stays past it until this checkpoint is published: the kicks of
         * the groups that committed meanwhile would start another fold at
         * once, of what little came in during this one (400-1,000 events
         * against 2,900 at 64 writers, at nearly the same cost a
         * checkpoint).  A kick stands only if the log is still past the
         * trigger now; a leader that crosses it later kicks again (under
         * cmu, so it cannot be lost between this look and the wait). */
        if (w->kicked && rc == 0 && bl_wal_used(e) < w->trigger)
            w->kicked = 0;
    }
    pthread_mutex_unlock(&w->cmu);
#undef STOPPED
    return NULL;
}

void bl_ckpt_kick(bl_env *e)
{
    bl_walenv *w = e->wal;
    pthread_mutex_lock(&w->cmu);
    if (!w->kicked) {
        w->kicked = 1;
        pthread_cond_signal(&w->ccv);
    }
    pthread_mutex_unlock(&w->cmu);
}

void bl_ckpt_want(bl_env *e)
{
    if (e->wal != NULL)
        atomic_store(&e->wal->want_thread, 1);
}

/* Start the thread, checkpointing (active) or only walking; cmu held. */
static int thread_start(bl_env *e, int active)
{
    bl_walenv *w = e->wal;
    if (w->thread_on && w->exited) {
        pthread_join(w->thread, NULL); /* a walk-only thread, over */
        w->thread_on = w->exited = 0;
    }
    if (w->thread_on) {
        if (active && !w->active) {
            /* the walk-only thread goes on as the checkpointer, starting
             * with the zero-fill of a new log */
            w->active = 1;
            w->kicked = 1;
            pthread_cond_signal(&w->ccv);
        }
        return 0;
    }
    ckpt_arg *a = malloc(sizeof(*a));
    if (a == NULL)
        return ENOMEM;
    *a = (ckpt_arg){e, w->gen};
    w->active = active;
    w->kicked = active; /* start with the zero-fill of a new log */
    int rc = pthread_create(&w->thread, NULL, ckpt_main, a);
    if (rc != 0)
        free(a);
    w->thread_on = rc == 0;
    return rc;
}

static int thread_wanted(const bl_walenv *w)
{
    return w != NULL && w->shm.m != NULL && !w->log_rdonly && !w->manual;
}

int bl_ckpt_open(bl_env *e)
{
    bl_walenv *w = e->wal;
    int rc = 0;
    if (!thread_wanted(w) || e->pc == NULL) {
        bl_pc_reads_usual(e); /* no walk will read the file ahead of the reads */
        return 0;
    }
    pthread_mutex_lock(&w->cmu);
    if (!w->thread_on && w->walk == BL_WALK_TODO && !atomic_load(&w->store_checked)) {
        w->walk = BL_WALK_RUNNING; /* from now: a first write waits for it */
        if ((rc = thread_start(e, 0)) != 0)
            w->walk = BL_WALK_TODO;
    }
    int walking = w->walk == BL_WALK_RUNNING;
    pthread_mutex_unlock(&w->cmu);
    if (!walking)
        bl_pc_reads_usual(e);
    return rc == 0 ? 0 : BINDLOG_ENOMEM;
}

int bl_ckpt_start(bl_env *e)
{
    bl_walenv *w = e->wal;
    int rc = 0;
    if (!thread_wanted(w))
        return 0;
    pthread_mutex_lock(&w->cmu);
    rc = thread_start(e, 1);
    pthread_mutex_unlock(&w->cmu);
    return rc == 0 ? 0 : BINDLOG_ENOMEM;
}

void bl_ckpt_stop(bl_env *e)
{
    bl_walenv *w = e->wal;
    pthread_mutex_lock(&w->cmu);
    int on = w->thread_on;
    pthread_t t = w->thread;
    w->thread_on = w->exited = w->active = 0;
    w->gen++; /* that thread's generation is over (its walk too); a new one may start */
    pthread_cond_broadcast(&w->ccv);
    pthread_mutex_unlock(&w->cmu);
    if (!on)
        return;
    pthread_join(t, NULL);
    /* stopped before its walk began: nobody will walk now but a writer */
    pthread_mutex_lock(&w->cmu);
    if (w->walk == BL_WALK_RUNNING) {
        w->walk = BL_WALK_TODO;
        pthread_cond_broadcast(&w->wcv);
    }
    pthread_mutex_unlock(&w->cmu);
}

void bl_ckpt_walk_settle(bl_env *e)
{
    bl_walenv *w = e->wal;
    if (w == NULL || atomic_load_explicit(&w->store_checked, memory_order_acquire))
        return;
    pthread_mutex_lock(&w->cmu);
    while (w->walk == BL_WALK_RUNNING)
        pthread_cond_wait(&w->wcv, &w->cmu);
    pthread_mutex_unlock(&w->cmu);
}

/* Whether the running walk, going on at the pace it has kept so far, ends
 * after `deadline` (bl_mono_ns); 0 while it has not told how far it is. */
static int walk_ends_after(const bl_walenv *w, int64_t deadline)
{
    if (w->walk_done == 0 || w->walk_total <= w->walk_done)
        return 0;
    int64_t now = bl_mono_ns();
    double spent = (double)(now - w->walk_t0_ns);
    double left = spent * (double)(w->walk_total - w->walk_done) / (double)w->walk_done;
    return (double)now + left > (double)deadline;
}

int bl_ckpt_walk_settle_for(bl_env *e, int64_t ms)
{
    bl_walenv *w = e->wal;
    struct timespec ts;
    if (w == NULL || atomic_load_explicit(&w->store_checked, memory_order_acquire))
        return 1;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    int64_t deadline = bl_mono_ns() + ms * 1000000;
    int settled = 0;
    pthread_mutex_lock(&w->cmu);
    w->walk_watchers++;
    while (w->walk == BL_WALK_RUNNING) {
        /* a walk that will not be done in time is not waited for: at the
         * pace it has kept so far, what is left of it ends past the
         * deadline (a CLI write on a store of a million events: ~400 ms
         * of walk, of which close waited 100 ms for nothing) */
        if (walk_ends_after(w, deadline)) {
            settled = BL_WALK_TOO_LONG;
            break;
        }
        if (pthread_cond_timedwait(&w->wcv, &w->cmu, &ts) == ETIMEDOUT)
            break;
    }
    w->walk_watchers--;
    if (w->walk != BL_WALK_RUNNING)
        settled = 1;
    pthread_mutex_unlock(&w->cmu);
    return settled;
}

int bl_ckpt_walk_wait(bl_env *e, int wait)
{
    bl_walenv *w = e->wal;
    int rc;

    if (atomic_load_explicit(&w->store_checked, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&w->cmu);
    while (wait && w->walk == BL_WALK_RUNNING)
        pthread_cond_wait(&w->wcv, &w->cmu);
    int state = w->walk;
    if (state == BL_WALK_BAD)
        rc = bl_err_set(w->walk_rc, "%s", w->walk_msg);
    pthread_mutex_unlock(&w->cmu);
    if (state == BL_WALK_BAD)
        return rc;
    if (state == BL_WALK_RUNNING)
        return 0; /* no verdict yet, and the caller does not need one */
    if (state != BL_WALK_DONE && (rc = bl_pc_guard_all(e, BL_PC_EVERYTHING)) != 0)
        return rc;
    atomic_store_explicit(&w->store_checked, 1, memory_order_release);
    return 0;
}

/* ---- direct LMDB writes ------------------------------------------------- */

int bl_wal_quiesce(bl_env *e)
{
    int rc = bl_wal_lock(e);
    if (rc != 0)
        return rc;
    if ((rc = bl_ckpt_run(e, 1)) != 0) {
        bl_wal_unlock(e);
        return rc;
    }
    return 0;
}

void bl_wal_resume(bl_env *e)
{
    bl_walenv *w = e->wal;
    bl_shm *m = w->shm.m;
    MDB_txn *txn;
    bl_head head;
    bl_wal_meta wm;

    /* the checkpoint is the checkpointers' to write: their lock too */
    int clocked = bl_wal_clock(e) == 0;
    if (clocked && bl_txn_begin(e, MDB_RDONLY, &txn) == 0) {
        if (bl_meta_get_head(e, txn, &head) == 0 && bl_meta_get_wal(e, txn, &wm) == 0) {
            bl_wal_at at = {head.lsn, wm.pos, wm.chain}, end;
            if (bl_shm_get_end(m, &end) != 0 || at.lsn >= end.lsn) {
                bl_shm_set_end(m, &at);
                bl_shm_set_ckpt(m, &at);
                bl_shm_publish(m, at.lsn);
            }
        }
        mdb_txn_abort(txn);
    }
    if (clocked)
        bl_wal_cunlock(e);
    bl_wal_unlock(e);
    bl_wal_trim(e);
}
