/*
 * stats.c -- the state digest of LMDB tables, and the statistics.
 *
 * The digest's encoding lives in core/digest.c; this file feeds it the
 * bindings and sessions tables in key order, from one snapshot (LMDB plus
 * the log's tail, snap.c).  Statistics read one snapshot too: the
 * store-wide counters are meta records the log's frames carry and the
 * checkpoint folds, so every handle of every process reads the same.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lmdb/pagecheck.h"
#include "lmdb/store.h"
#include "lmdb/walenv.h"

/* Entries hashed between releases of the map lock, so growth is not held
 * up for the whole scan of a large store. */
#define DIGEST_CHUNK 4096

/* One entry of a table: a session kept as a reference (formats 5 to 7) is
 * hashed as the whole value it stands for, resolved through get. */
static int hash_entry(bl_digest *st, int tag, const MDB_val *k, const MDB_val *v, bl_ref_fn get,
                      void *ctx)
{
    if (tag == 'S' && v->mv_size != 0 && ((const unsigned char *)v->mv_data)[0] == 3 &&
        k->mv_size != 0 && k->mv_size <= BINDLOG_ID_MAX) {
        bl_sval sv;
        int rc = bl_sval_read(v->mv_data, v->mv_size, k->mv_data, k->mv_size, get, ctx, &sv);
        return rc != 0 ? rc : bl_digest_add_sval(st, k->mv_data, k->mv_size, &sv);
    }
    return bl_digest_add(st, tag, k->mv_data, k->mv_size, v->mv_data, v->mv_size);
}

/* Hash a table. */
static int hash_cursor(bl_cursor *c, bl_env *e, int tag, int keep_lock, bl_digest *st,
                       bl_ref_fn get, void *ctx)
{
    MDB_val k, v;
    int rc;
    unsigned long n = 0;

    while ((rc = bl_cursor_next(c, &k, &v)) > 0) {
        if ((rc = hash_entry(st, tag, &k, &v, get, ctx)) != 0)
            break;
        if (!keep_lock && ++n % DIGEST_CHUNK == 0) {
            bl_map_unlock(e);
            bl_map_rdlock(e);
        }
    }
    bl_cursor_close(c);
    return rc;
}

/* ---- the sessions of a snapshot on two threads ------------------------------ */

/*
 * Resolving a reference costs a search of the log for the record that
 * created the session, in no order the cache can follow: most of a
 * digest's time in a store whose sessions are references.  So this thread
 * walks the sessions in runs of DIGEST_CHUNK, a helper resolves and
 * encodes the second half of each run into a gatherer while this thread
 * does the first half, and this thread then hashes the helper's bytes in
 * their place.  The bytes hashed, and the first error met in id order,
 * are those of hash_cursor.  The helper reads through the table roots
 * this thread took (bl_pc_root) and the snapshot's tail, built before it
 * starts; it never calls LMDB, and reads the map only while this thread
 * holds the map lock for it.
 */
#define SPLIT_MIN (2 * DIGEST_CHUNK) /* fewer sessions: not worth a thread */

static _Atomic uint64_t split_done; /* entries the helpers hashed, for tests */

void bl_digest_split_tally(uint64_t *entries)
{
    *entries = atomic_load(&split_done);
}

typedef struct split {
    bl_snap *s;
    bl_pc_db root[2]; /* the log's, the base image's sessions' */
    MDB_val (*ents)[2];
    size_t lo, hi; /* the helper's part of the run */
    bl_digest *g;  /* its gatherer */
    int rc;
    char msg[BL_ERRMSG_MAX];
    int state; /* 0 idle, 1 a run posted, 2 quit */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} split;

static int split_ref(void *ctx, int what, uint64_t lsn, const char *id, size_t id_len,
                     const void **v, size_t *n)
{
    split *sp = ctx;
    return bl_snap_ref_at(sp->s, sp->root, what, lsn, id, id_len, v, n);
}

static void *split_thread(void *arg)
{
    split *sp = arg;

    pthread_mutex_lock(&sp->mu);
    for (;;) {
        while (sp->state == 0)
            pthread_cond_wait(&sp->cv, &sp->mu);
        if (sp->state == 2)
            break;
        pthread_mutex_unlock(&sp->mu);
        int rc = 0;
        for (size_t i = sp->lo; rc == 0 && i < sp->hi; i++)
            rc = hash_entry(sp->g, 'S', &sp->ents[i][0], &sp->ents[i][1], split_ref, sp);
        if (rc == 0)
            atomic_fetch_add(&split_done, sp->hi - sp->lo);
        sp->msg[0] = '\0';
        if (rc != 0 && bl_err_isset())
            snprintf(sp->msg, sizeof sp->msg, "%s", bl_err_get());
        pthread_mutex_lock(&sp->mu);
        sp->rc = rc;
        sp->state = 0;
        pthread_cond_broadcast(&sp->cv);
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}

/* Set up the helper: 0, or nonzero with nothing to undo (the caller then
 * hashes on its own). */
static int split_start(split *sp, bl_snap *s)
{
    const bl_tent *t;
    size_t n;

    memset(sp, 0, sizeof(*sp));
    sp->s = s;
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2 || bl_snap_entries(s, BL_DB_SESSIONS) < SPLIT_MIN)
        return -1;
    /* what the helper reads, made here: the roots and the tail's tables */
    if (bl_pc_root(s->e, s->txn, BL_DB_LOG, &sp->root[0]) != 0 ||
        bl_pc_root(s->e, s->txn, BL_DB_BASE_SESSIONS, &sp->root[1]) != 0 ||
        bl_snap_table(s, BL_DB_LOG, &t, &n) != 0 ||
        bl_snap_table(s, BL_DB_BASE_SESSIONS, &t, &n) != 0) {
        bl_err_clear();
        return -1;
    }
    if ((sp->ents = malloc(DIGEST_CHUNK * sizeof(*sp->ents))) == NULL ||
        (sp->g = bl_digest_new_gather()) == NULL) {
        free(sp->ents);
        return -1;
    }
    pthread_mutex_init(&sp->mu, NULL);
    pthread_cond_init(&sp->cv, NULL);
    if (pthread_create(&sp->th, NULL, split_thread, sp) != 0) {
        pthread_mutex_destroy(&sp->mu);
        pthread_cond_destroy(&sp->cv);
        bl_digest_free(sp->g);
        free(sp->ents);
        return -1;
    }
    return 0;
}

static void split_stop(split *sp)
{
    pthread_mutex_lock(&sp->mu);
    sp->state = 2;
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
    pthread_join(sp->th, NULL);
    pthread_mutex_destroy(&sp->mu);
    pthread_cond_destroy(&sp->cv);
    bl_digest_free(sp->g);
    free(sp->ents);
}

/* One run of n entries: the helper's half posted, this thread's hashed,
 * the helper's taken.  0 or the first error in id order. */
static int split_run(split *sp, bl_digest *st, size_t n)
{
    size_t half = n / 2;
    int rc = 0, hrc;

    pthread_mutex_lock(&sp->mu);
    sp->lo = half;
    sp->hi = n;
    sp->state = 1;
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
    for (size_t i = 0; rc == 0 && i < half; i++)
        rc = hash_entry(st, 'S', &sp->ents[i][0], &sp->ents[i][1], bl_snap_ref, sp->s);
    pthread_mutex_lock(&sp->mu);
    while (sp->state == 1)
        pthread_cond_wait(&sp->cv, &sp->mu);
    hrc = sp->rc;
    pthread_mutex_unlock(&sp->mu);
    if (rc != 0)
        return rc; /* an earlier entry's error */
    if (hrc != 0) {
        if (sp->msg[0] != '\0')
            bl_err_set(hrc, "%s", sp->msg);
        return hrc;
    }
    return bl_digest_take(st, sp->g);
}

static int hash_sessions(bl_cursor *c, bl_snap *s, int keep_lock, bl_digest *st)
{
    split sp;
    int rc = 0;

    if (split_start(&sp, s) != 0)
        return hash_cursor(c, s->e, 'S', keep_lock, st, bl_snap_ref, s);
    for (;;) {
        size_t n = 0;
        MDB_val k, v;
        while (n < DIGEST_CHUNK && (rc = bl_cursor_next(c, &k, &v)) > 0) {
            sp.ents[n][0] = k;
            sp.ents[n][1] = v;
            n++;
        }
        if (rc < 0)
            break;
        if ((rc = split_run(&sp, st, n)) != 0 || n < DIGEST_CHUNK)
            break;
        if (!keep_lock) {
            bl_map_unlock(s->e);
            bl_map_rdlock(s->e);
        }
    }
    split_stop(&sp);
    bl_cursor_close(c);
    return rc;
}

static int hash_table(bl_env *e, MDB_txn *txn, MDB_dbi dbi, int tag, int keep_lock,
                      bl_digest *st, bl_ref_fn get, void *ctx)
{
    bl_cursor c;
    int rc;

    if ((rc = bl_cursor_open(&c, e, txn, dbi, NULL, 0)) != 0)
        return rc;
    return hash_cursor(&c, e, tag, keep_lock, st, get, ctx);
}

int bl_digest_tables(bl_env *e, MDB_txn *txn, MDB_dbi bindings, MDB_dbi sessions,
                     int keep_lock, bl_ref_fn get, void *ctx,
                     unsigned char out[BINDLOG_DIGEST_SIZE])
{
    bl_digest *st = bl_digest_new();
    int rc;

    if (st == NULL)
        return BINDLOG_ENOMEM;
    rc = hash_table(e, txn, bindings, 'B', keep_lock, st, NULL, NULL);
    if (rc == 0)
        rc = hash_table(e, txn, sessions, 'S', keep_lock, st, get, ctx);
    if (rc == 0)
        bl_digest_final(st, out);
    bl_digest_free(st);
    return rc;
}

int bl_digest_snap(bl_snap *s, int keep_lock, unsigned char out[BINDLOG_DIGEST_SIZE])
{
    bl_digest *st = bl_digest_new();
    bl_cursor c;
    int rc;

    if (st == NULL)
        return BINDLOG_ENOMEM;
    rc = bl_cursor_open_snap(&c, s, BL_DB_BINDINGS, NULL, 0);
    if (rc == 0)
        rc = hash_cursor(&c, s->e, 'B', keep_lock, st, NULL, NULL);
    if (rc == 0 && (rc = bl_cursor_open_snap(&c, s, BL_DB_SESSIONS, NULL, 0)) == 0)
        rc = hash_sessions(&c, s, keep_lock, st);
    if (rc == 0)
        bl_digest_final(st, out);
    bl_digest_free(st);
    return rc;
}

int bl_lmdb_digest(bindlog *s, unsigned char out[BINDLOG_DIGEST_SIZE], uint64_t *head_lsn)
{
    bl_snap snap;
    bl_head head;
    int rc;

    if (s == NULL || out == NULL)
        return BINDLOG_EINVAL;
    if ((rc = bl_snap_open(s->e, &snap, 0)) != 0)
        return rc;
    rc = bl_pc_guard_tables(s->e, snap.txn, BL_PC_BIT(BL_DB_BINDINGS) | BL_PC_BIT(BL_DB_SESSIONS));
    if (rc == 0)
        rc = bl_snap_head(&snap, &head);
    if (rc == 0)
        rc = bl_digest_snap(&snap, 0, out);
    if (rc == 0 && head_lsn != NULL)
        *head_lsn = head.lsn;
    bl_snap_close(&snap);
    return rc;
}

static uint64_t file_size(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    struct stat st;
    uint64_t size = 0;
    if (p != NULL) {
        snprintf(p, n, "%s/%s", dir, name);
        if (stat(p, &st) == 0)
            size = (uint64_t)st.st_size;
        free(p);
    }
    return size;
}

int bl_lmdb_stats(bindlog *s, bindlog_stats *out)
{
    bl_env *e;
    bl_snap snap;
    MDB_envinfo info;
    MDB_stat est;
    bl_head head;
    bl_counts counts;
    bl_gstats gst;
    MDB_val v;
    int rc;

    if (s == NULL || out == NULL)
        return BINDLOG_EINVAL;
    e = s->e;
    memset(out, 0, sizeof(*out));
    if ((rc = bl_snap_open(e, &snap, 0)) != 0)
        return rc;
    if ((rc = bl_snap_head(&snap, &head)) == 0 && (rc = bl_snap_counts(&snap, &counts)) == 0 &&
        (rc = bl_snap_gstats(&snap, &gst)) == 0 &&
        (rc = bl_meta_get_u64(e, snap.txn, "base", &out->base_lsn)) == 0) {
        out->head_lsn = head.lsn;
        out->checkpoint_lsn = snap.lmdb_head;
        out->log_records = bl_snap_entries(&snap, BL_DB_LOG);
        out->bindings = bl_snap_entries(&snap, BL_DB_BINDINGS);
        out->sessions = bl_snap_entries(&snap, BL_DB_SESSIONS);
        out->live_bindings = counts.live_bindings;
        out->live_sessions = counts.live_sessions;
        memcpy(out->applied, counts.applied, sizeof(out->applied));
        if (bl_snap_get(&snap, BL_DB_META, "format", 6, &v) == 0 && v.mv_size == 4)
            out->format_version = bl_get32(v.mv_data);
        mdb_env_info(e->env, &info);
        mdb_env_stat(e->env, &est);
        out->map_size = info.me_mapsize;
        out->map_used = (uint64_t)(info.me_last_pgno + 1) * est.ms_psize;
        out->readers_used = info.me_numreaders;
        out->readers_max = info.me_maxreaders;
    }
    bl_snap_close(&snap);
    if (rc != 0)
        return rc;

    bl_group_stats(&e->g, out);
    /* the commit counts are the store's, not this process's */
    out->commits = gst.commits;
    out->grouped_events = gst.grouped_events;
    out->durability = s->durability;
    out->file_size = file_size(e->path, "data.mdb");
    out->log_size = file_size(e->path, BL_WAL_FILE);
    out->log_used = bl_wal_used(e);
    return 0;
}
