/*
 * snap.c -- snapshots: an LMDB read transaction plus the log's tail
 * (store.h, "snapshots").
 *
 * Taking one, in this order:
 *   1. the visible end (bl_wal_read_bound): the snapshot's head; the index
 *      is caught up to it;
 *   2. the index's groups up to that end, referenced (their memory stays
 *      whatever the index does afterwards);
 *   3. an LMDB read transaction, begun after 2, so its meta "head" H is at
 *      least the index's base when the groups were taken (the index drops
 *      a group only after LMDB committed it): the groups cover every
 *      record after H up to the snapshot's head.  Groups LMDB already
 *      holds are let go.
 * A checkpoint may commit between 1 and 3 and take H past the head read in
 * 1; the snapshot then simply is LMDB's (newer) state.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lmdb/limits.h"
#include "lmdb/pagecheck.h"
#include "lmdb/tail.h"
#include "lmdb/walenv.h"

int bl_snap_open(bl_env *e, bl_snap *s, int fresh)
{
    uint64_t bound;
    bl_wal_at base;
    bl_head h;
    int rc;

    memset(s, 0, sizeof(*s));
    s->e = e;
    if ((rc = bl_wal_read_bound(e, &bound)) != 0)
        return rc;
    if ((rc = bl_tail_groups(&e->wal->tail, bound, &s->gs, &s->ngs, &base)) != 0)
        return rc;
    rc = fresh ? bl_read_begin_fresh(e, &s->txn) : bl_read_begin(e, &s->txn);
    if (rc != 0) {
        bl_tail_groups_free(s->gs, s->ngs);
        s->gs = NULL;
        return rc;
    }
    if ((rc = bl_meta_get_head(e, s->txn, &h)) != 0) {
        bl_snap_close(s);
        return rc;
    }
    s->lmdb_head = h.lsn;
    s->head = bound > h.lsn ? bound : h.lsn;
    if (base.lsn > h.lsn) {
        bl_snap_close(s);
        return bl_err_set(BINDLOG_ECORRUPT,
                          "snapshot: LMDB's head %llu is behind the log index's base %llu",
                          (unsigned long long)h.lsn, (unsigned long long)base.lsn);
    }
    /* let go of the groups LMDB holds */
    size_t first = 0;
    while (first < s->ngs && s->gs[first]->last_lsn <= h.lsn)
        bl_tgroup_unref(s->gs[first++]);
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
    memmove(s->gs, s->gs + first, (s->ngs - first) * sizeof(*s->gs));
    s->ngs -= first;
    return 0;
}

void bl_snap_close(bl_snap *s)
{
    if (s->txn != NULL)
        bl_read_end(s->e, s->txn);
    s->txn = NULL;
    bl_tail_groups_free(s->gs, s->ngs);
    s->gs = NULL;
    s->ngs = 0;
    for (int i = 0; i < BL_DB_COUNT; i++) {
        free(s->tab[i]);
        s->tab[i] = NULL;
        s->built[i] = 0;
    }
}

/* ---- views shared between snapshots ---------------------------------------- */

/*
 * A snapshot that reads a table of the tail sorts that table's entries
 * once (bl_tail_sorted): some milliseconds for a full 8 MiB log.  A tool
 * that takes many snapshots of a store at rest, `bindlog lineage` with an
 * iterator per session of a tree, sorted the same entries hundreds of
 * times.  So the last view of each table is kept, with references to its
 * groups, and a snapshot of the very same groups and bounds copies it
 * instead: the same groups (held, so their addresses cannot be reused) and
 * the same bounds make the same entries.  A trim lets the kept views go
 * (bl_wal_trim), so that they never hold memory the index gave up for
 * long; a view that does not match is simply replaced.
 */

/* A view is built by a pass over every version of the snapshot's groups,
 * whatever few of them are the table's: below this many versions it is
 * rebuilt faster than shared. */
#define VIEW_SHARE_MIN 1024

static void view_free(bl_sview *v)
{
    bl_tail_groups_free(v->gs, v->ngs);
    free(v->tab);
    v->gs = NULL;
    v->ngs = 0;
    v->tab = NULL;
    v->n = 0;
}

void bl_snap_views_drop(bl_walenv *w)
{
    bl_sview old[BL_DB_COUNT];
    pthread_mutex_lock(&w->views_mu);
    memcpy(old, w->views, sizeof(old));
    for (int i = 0; i < BL_DB_COUNT; i++) {
        w->views[i].gs = NULL;
        w->views[i].ngs = 0;
        w->views[i].tab = NULL;
        w->views[i].n = 0;
    }
    pthread_mutex_unlock(&w->views_mu);
    for (int i = 0; i < BL_DB_COUNT; i++)
        view_free(&old[i]);
}

/* Copy the kept view of db into the snapshot if it is the snapshot's:
 * 1, or 0 (none, another, or no memory: sort it). */
static int view_reuse(bl_snap *s, int db)
{
    bl_walenv *w = s->e->wal;
    const bl_sview *v = &w->views[db];
    int hit = 0;
    pthread_mutex_lock(&w->views_mu);
    if (v->gs != NULL && v->ngs == s->ngs && v->above == s->lmdb_head && v->bound == s->head &&
        /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
        memcmp(v->gs, s->gs, s->ngs * sizeof(*s->gs)) == 0) {
        bl_tent *copy = v->n != 0 ? malloc(v->n * sizeof(*copy)) : NULL;
        if (v->n == 0 || copy != NULL) {
            if (v->n != 0)
                memcpy(copy, v->tab, v->n * sizeof(*copy));
            s->tab[db] = copy;
            s->ntab[db] = v->n;
            hit = 1;
        }
    }
    pthread_mutex_unlock(&w->views_mu);
    if (hit)
        atomic_fetch_add_explicit(&w->views_shared, 1, memory_order_relaxed);
    return hit;
}

/* Keep the snapshot's view of db for the next snapshots, when it is the
 * second view built for these bounds in a row: a writing process, whose
 * every commit moves the bounds, pays one look under the lock, not a copy
 * of each view it builds.  A failure to allocate only loses the sharing. */
static void view_keep(bl_snap *s, int db)
{
    bl_walenv *w = s->e->wal;
    bl_sview v = {NULL, s->ngs, s->lmdb_head, s->head, NULL, s->ntab[db], s->lmdb_head, s->head};
    size_t versions = 0;
    for (size_t i = 0; i < s->ngs; i++)
        versions += s->gs[i]->nver;
    if (versions < VIEW_SHARE_MIN)
        return;
    pthread_mutex_lock(&w->views_mu);
    int again = w->views[db].seen_above == s->lmdb_head && w->views[db].seen_bound == s->head;
    w->views[db].seen_above = s->lmdb_head;
    w->views[db].seen_bound = s->head;
    pthread_mutex_unlock(&w->views_mu);
    if (!again)
        return;
    const size_t n = v.n;
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
    v.gs = malloc(s->ngs * sizeof(*v.gs));
    v.tab = n != 0 ? malloc(n * sizeof(*v.tab)) : NULL;
    if (v.gs == NULL || (n != 0 && v.tab == NULL)) {
        free(v.gs);
        free(v.tab);
        return;
    }
    if (n != 0)
        memcpy(v.tab, s->tab[db], n * sizeof(*v.tab));
    for (size_t i = 0; i < s->ngs; i++) {
        bl_tgroup_ref(s->gs[i]);
        v.gs[i] = s->gs[i];
    }
    pthread_mutex_lock(&w->views_mu);
    bl_sview old = w->views[db];
    w->views[db] = v;
    pthread_mutex_unlock(&w->views_mu);
    view_free(&old);
}

int bl_snap_table(bl_snap *s, int db, const bl_tent **ents, size_t *n)
{
    if (!s->built[db]) {
        if (s->ngs == 0 || !view_reuse(s, db)) {
            int rc = bl_tail_sorted(s->gs, s->ngs, (unsigned)db, s->lmdb_head, s->head, &s->tab[db],
                                    &s->ntab[db]);
            if (rc != 0)
                return rc;
            if (s->ngs != 0)
                view_keep(s, db);
        }
        s->built[db] = 1;
    }
    *ents = s->tab[db];
    *n = s->ntab[db];
    return 0;
}

/* The newest version of a meta key among the snapshot's groups, searched
 * from the newest group back: every frame ends with the group's meta puts
 * (head, counts, statistics), so the search stops in the newest group,
 * where a sorted view of meta would sort three puts per frame. */
static const bl_tver *meta_find(const bl_snap *s, const void *key, size_t klen)
{
    for (size_t i = s->ngs; i-- > 0;) {
        const bl_tgroup *g = s->gs[i];
        for (uint32_t j = g->nver; j-- > 0;) {
            const bl_tver *t = &g->ver[j];
            if (t->table == BL_DB_META && t->lsn > s->lmdb_head && t->lsn <= s->head &&
                t->klen == klen && memcmp(t->key, key, klen) == 0)
                return t;
        }
    }
    return NULL;
}

static int snap_get(bl_snap *s, int db, const bl_pc_db *root, const void *key, size_t klen,
                    MDB_val *v)
{
    const bl_tent *ents;
    size_t n;
    int rc;

    if (s->ngs != 0 && db == BL_DB_META && !s->built[db]) {
        const bl_tver *t = meta_find(s, key, klen);
        if (t != NULL) {
            *v = (MDB_val){t->vlen, (void *)t->val};
            return 0;
        }
    } else if (s->ngs != 0) {
        if ((rc = bl_snap_table(s, db, &ents, &n)) != 0)
            return rc;
        const bl_tent *t = bl_tent_find(ents, n, key, klen);
        if (t != NULL) {
            *v = (MDB_val){t->vlen, (void *)t->val};
            return 0;
        }
    }
    MDB_val k = {klen, (void *)key};
    if (root != NULL)
        return bl_pc_get_at(s->e, root, db, &k, v);
    return bl_pc_get(s->e, s->txn, db, &k, v); /* a damaged page is an error, not a crash */
}

int bl_snap_get(bl_snap *s, int db, const void *key, size_t klen, MDB_val *v)
{
    return snap_get(s, db, NULL, key, klen, v);
}

int bl_snap_ref_at(bl_snap *s, const bl_pc_db *root, int what, uint64_t lsn, const char *id,
                   size_t id_len, const void **v, size_t *n)
{
    unsigned char kb[8];
    MDB_val val;
    int rc;

    bl_put64be(kb, lsn);
    rc = what == BL_REF_BASE
             ? snap_get(s, BL_DB_BASE_SESSIONS, root ? &root[1] : NULL, id, id_len, &val)
             : snap_get(s, BL_DB_LOG, root ? &root[0] : NULL, kb, 8, &val);
    if (rc == 0) {
        *v = val.mv_data;
        *n = val.mv_size;
    }
    return rc;
}

int bl_snap_ref(void *ctx, int what, uint64_t lsn, const char *id, size_t id_len,
                const void **v, size_t *n)
{
    return bl_snap_ref_at(ctx, NULL, what, lsn, id, id_len, v, n);
}

int bl_snap_session(bl_snap *s, const void *id, size_t id_len, bl_sval *out)
{
    MDB_val v;
    int rc = bl_snap_get(s, BL_DB_SESSIONS, id, id_len, &v);
    if (rc != 0)
        return rc;
    return bl_sval_read(v.mv_data, v.mv_size, (const char *)id, id_len, bl_snap_ref, s, out);
}

uint64_t bl_snap_entries(bl_snap *s, int db)
{
    MDB_stat st;
    const bl_tent *ents;
    size_t n;
    uint64_t count = mdb_stat(s->txn, s->e->dbi[db], &st) == 0 ? st.ms_entries : 0;

    if (s->ngs == 0)
        return count;
    if (db == BL_DB_LOG) {
        /* records are dense: count the LSNs of the groups in view */
        for (size_t i = 0; i < s->ngs; i++) {
            uint64_t lo = s->gs[i]->first_lsn, hi = s->gs[i]->last_lsn;
            lo = lo > s->lmdb_head ? lo : s->lmdb_head + 1;
            hi = hi < s->head ? hi : s->head;
            count += hi >= lo ? hi - lo + 1 : 0;
        }
        return count;
    }
    if (bl_snap_table(s, db, &ents, &n) != 0)
        return count;
    for (size_t i = 0; i < n; i++) {
        MDB_val k = {ents[i].klen, (void *)ents[i].key}, v;
        if (mdb_get(s->txn, s->e->dbi[db], &k, &v) != 0)
            count++; /* a key LMDB does not have yet */
    }
    return count;
}

int bl_snap_head(bl_snap *s, bl_head *h)
{
    MDB_val v;
    int rc = bl_snap_get(s, BL_DB_META, "head", 4, &v);
    memset(h, 0, sizeof(*h));
    if (rc == BINDLOG_ENOTFOUND)
        return 0;
    return rc != 0 ? rc : bl_head_decode(v.mv_data, v.mv_size, h);
}

int bl_snap_counts(bl_snap *s, bl_counts *c)
{
    MDB_val v;
    int rc = bl_snap_get(s, BL_DB_META, "counts", 6, &v);
    memset(c, 0, sizeof(*c));
    if (rc == BINDLOG_ENOTFOUND)
        return 0;
    if (rc != 0)
        return rc;
    if (!bl_counts_len_ok(v.mv_size))
        return bl_err_set(BINDLOG_ECORRUPT, "meta \"counts\" is %zu bytes, not %d or %d",
                          v.mv_size, BL_COUNTS_BYTES_V3, BL_COUNTS_BYTES);
    bl_counts_decode(v.mv_data, v.mv_size, c);
    return 0;
}

int bl_snap_gstats(bl_snap *s, bl_gstats *g)
{
    MDB_val v;
    int rc = bl_snap_get(s, BL_DB_META, "stats", 5, &v);
    memset(g, 0, sizeof(*g));
    if (rc == BINDLOG_ENOTFOUND)
        return 0;
    return rc != 0 ? rc : bl_gstats_decode(v.mv_data, v.mv_size, g);
}
