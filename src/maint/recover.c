/*
 * recover.c -- bindlog_recover(): rebuild a store from what is intact.
 *
 * The salvage (recover.h; data.mdb in recover_mdb.c) gives intact log
 * records by LSN, the meta records, the base image if its tables are whole,
 * and evidence of the stored state: bindings and sessions (each carries
 * the LSN that last changed it) and the history index.  The rebuild walks
 * the LSNs from the base image (or from 1 when the image is damaged) to the
 * head, on a state kept in a scratch store Y:
 *
 *   - an intact record is re-derived exactly (bl_replay_one: decided again
 *     by the state machine, byte-identical, as replay and check do);
 *   - an intact record that does not re-derive (it follows a loss: its key
 *     or session is not in the state the log would have produced) is
 *     applied by its effect: the state before it is made what the record
 *     says it was (the key's binding and generation, the bound session live
 *     on that key), then the record is decided and must give its own bytes;
 *   - a lost LSN is replaced by what the stored state says about it: the
 *     bindings whose last change it was, the sessions created or ended
 *     there.  Its effect on anything else is lost.
 *
 * The last LSN handled by the second or third rule is the cut: up to it
 * the state is built from evidence, after it every record re-derived
 * exactly.  The new store is made by replay itself (bindlog_replay) from an
 * intermediate store X holding the state at the cut as its base image and
 * the records after it as its log, so the new store is exactly what replay
 * makes of any store and passes check (which recover runs to be sure).
 * The state at the cut is built by a second run of the same walk stopped
 * at the cut: the walk is deterministic.  With nothing lost the cut is the
 * base image (or 0) and the new store replays the whole log: the same
 * digest as the original.
 *
 * What was lost, for the report: the lost LSN ranges; the keys whose
 * history has a gap (named by evidence of a lost LSN, or holding a record
 * applied by effect or skipped); lost LSNs that nothing ties to a key.
 */
#define _GNU_SOURCE
#include "maint/recover.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <dirent.h>

#include "core/error.h"

/* ---- the salvage ------------------------------------------------------------ */

typedef struct srec {
    uint64_t lsn;
    const unsigned char *p;
    size_t n;
    int trust;
} srec;

typedef struct sent {
    const unsigned char *k, *v;
    size_t kn, vn;
    uint64_t a, b; /* bindings: lsn; sessions: created, ended */
} sent;

typedef struct shist {
    uint64_t lsn;
    const unsigned char *k;
    size_t kn;
} shist;

#define VEC(T)                                                                             \
    struct {                                                                               \
        T *v;                                                                              \
        size_t n, cap;                                                                     \
    }

struct bl_salvage {
    VEC(srec) recs;
    VEC(sent) state[2]; /* stored bindings, sessions */
    VEC(sent) base[2];  /* base image bindings, sessions */
    VEC(shist) hist;
    bl_salvage_meta meta;
    int have_meta, base_damaged;
    VEC(struct mapping { void *p; size_t n; }) maps;
    uint64_t pages, damaged, conflicts;
};

#define PUSH(vec, item)                                                                    \
    ((vec).n == (vec).cap && grow((void **)&(vec).v, &(vec).cap, sizeof(*(vec).v)) != 0   \
         ? BINDLOG_ENOMEM                                                                  \
         : ((vec).v[(vec).n++] = (item), 0))

/* qsort that takes an empty array (whose pointer may be NULL). */
static void sort(void *v, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(v, n, size, cmp);
}

static int grow(void **v, size_t *cap, size_t size)
{
    size_t nc = *cap ? 2 * *cap : 64;
    void *nv = realloc(*v, nc * size);
    if (nv == NULL)
        return BINDLOG_ENOMEM;
    *v = nv;
    *cap = nc;
    return 0;
}

int bl_salvage_record(bl_salvage *sv, uint64_t lsn, const unsigned char *p, size_t n, int trust)
{
    srec r = {lsn, p, n, trust};
    return PUSH(sv->recs, r);
}

int bl_salvage_entry(bl_salvage *sv, int table, const unsigned char *k, size_t kn,
                     const unsigned char *v, size_t vn)
{
    int sessions = table == BL_DB_SESSIONS || table == BL_DB_BASE_SESSIONS;
    int base = table == BL_DB_BASE_BINDINGS || table == BL_DB_BASE_SESSIONS;
    sent e = {k, v, kn, vn, 0, 0};
    if (sessions) {
        bl_sval s;
        if (!bl_valid_id((const char *)k, kn) || bl_sval_decode(v, vn, &s) != 0) {
            if (base)
                sv->base_damaged = 1;
            return 0;
        }
        e.a = s.created_lsn;
        e.b = s.ended_lsn;
    } else {
        bl_bval b;
        if (!bl_valid_key((const char *)k, kn) || bl_bval_decode(v, vn, &b) != 0) {
            if (base)
                sv->base_damaged = 1;
            return 0;
        }
        e.a = b.lsn;
    }
    return base ? PUSH(sv->base[sessions], e) : PUSH(sv->state[sessions], e);
}

int bl_salvage_history(bl_salvage *sv, const unsigned char *k, size_t kn)
{
    if (kn < 10 || k[kn - 9] != 0 || !bl_valid_key((const char *)k, kn - 9))
        return 0;
    shist h = {bl_get64be(k + kn - 8), k, kn - 9};
    return PUSH(sv->hist, h);
}

void bl_salvage_set_meta(bl_salvage *sv, const bl_salvage_meta *m)
{
    sv->meta = *m;
    sv->have_meta = 1;
}

void bl_salvage_base_damaged(bl_salvage *sv) { sv->base_damaged = 1; }

void bl_salvage_pages(bl_salvage *sv, uint64_t pages, uint64_t damaged)
{
    sv->pages += pages;
    sv->damaged += damaged;
}

int bl_salvage_keep(bl_salvage *sv, void *map, size_t len)
{
    struct mapping m = {map, len};
    return PUSH(sv->maps, m);
}

static void salvage_free(bl_salvage *sv)
{
    for (size_t i = 0; i < sv->maps.n; i++)
        munmap(sv->maps.v[i].p, sv->maps.v[i].n);
    free(sv->maps.v);
    free(sv->recs.v);
    for (int i = 0; i < 2; i++) {
        free(sv->state[i].v);
        free(sv->base[i].v);
    }
    free(sv->hist.v);
}

/* The sources, most trusted first.  The write-ahead log of format 2 goes
 * here, before data.mdb. */
static const struct {
    const char *name;
    bl_salvage_fn fn;
    int required;
} sources[] = {
    {"data.mdb", bl_salvage_mdb, 1},
};

/* ---- indexes over the salvage ------------------------------------------------- */

static int cmp_rec(const void *a, const void *b)
{
    const srec *x = a, *y = b;
    if (x->lsn != y->lsn)
        return x->lsn < y->lsn ? -1 : 1;
    return y->trust - x->trust; /* the most trusted copy first */
}

/* Sort records by LSN and keep one copy of each: the most trusted (copies
 * of one LSN are the same bytes; count those that are not). */
static void dedupe_records(bl_salvage *sv)
{
    size_t o = 0;
    sort(sv->recs.v, sv->recs.n, sizeof(srec), cmp_rec);
    for (size_t i = 0; i < sv->recs.n; i++) {
        if (o > 0 && sv->recs.v[o - 1].lsn == sv->recs.v[i].lsn) {
            const srec *k = &sv->recs.v[o - 1], *d = &sv->recs.v[i];
            if (k->n != d->n || memcmp(k->p, d->p, k->n) != 0)
                sv->conflicts++;
            continue;
        }
        sv->recs.v[o++] = sv->recs.v[i];
    }
    sv->recs.n = o;
}

static int cmp_key(const unsigned char *a, size_t an, const unsigned char *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    return c != 0 ? c : an < bn ? -1 : an > bn;
}

static int cmp_sent_key(const void *a, const void *b)
{
    const sent *x = a, *y = b;
    return cmp_key(x->k, x->kn, y->k, y->kn);
}

/* An entry index by an LSN field. */
typedef struct byl {
    uint64_t lsn;
    const sent *e;
} byl;

static int cmp_byl(const void *a, const void *b)
{
    const byl *x = a, *y = b;
    return x->lsn < y->lsn ? -1 : x->lsn > y->lsn;
}

static int cmp_hist(const void *a, const void *b)
{
    const shist *x = a, *y = b;
    return x->lsn < y->lsn ? -1 : x->lsn > y->lsn;
}

typedef struct evidence {
    byl *bind;          /* stored bindings by the LSN that last changed them */
    byl *created, *ended;
    size_t nbind, ncreated, nended;
} evidence;

static int evidence_build(bl_salvage *sv, evidence *ev)
{
    memset(ev, 0, sizeof *ev);
    sort(sv->state[1].v, sv->state[1].n, sizeof(sent), cmp_sent_key);
    sort(sv->hist.v, sv->hist.n, sizeof(shist), cmp_hist);
    ev->bind = malloc((sv->state[0].n + 1) * sizeof(byl));
    ev->created = malloc((sv->state[1].n + 1) * sizeof(byl));
    ev->ended = malloc((sv->state[1].n + 1) * sizeof(byl));
    if (ev->bind == NULL || ev->created == NULL || ev->ended == NULL)
        return BINDLOG_ENOMEM;
    for (size_t i = 0; i < sv->state[0].n; i++)
        ev->bind[ev->nbind++] = (byl){sv->state[0].v[i].a, &sv->state[0].v[i]};
    for (size_t i = 0; i < sv->state[1].n; i++) {
        const sent *e = &sv->state[1].v[i];
        ev->created[ev->ncreated++] = (byl){e->a, e};
        if (e->b)
            ev->ended[ev->nended++] = (byl){e->b, e};
    }
    sort(ev->bind, ev->nbind, sizeof(byl), cmp_byl);
    sort(ev->created, ev->ncreated, sizeof(byl), cmp_byl);
    sort(ev->ended, ev->nended, sizeof(byl), cmp_byl);
    return 0;
}

static void evidence_free(evidence *ev)
{
    free(ev->bind);
    free(ev->created);
    free(ev->ended);
}

/* The first index of `lsn` in a byl array (or n). */
static size_t byl_find(const byl *v, size_t n, uint64_t lsn)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].lsn < lsn)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The stored session `id`, or NULL. */
static const sent *stored_session(const bl_salvage *sv, const char *id, size_t n)
{
    size_t lo = 0, hi = sv->state[1].n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_key(sv->state[1].v[mid].k, sv->state[1].v[mid].kn, (const unsigned char *)id,
                        n);
        if (c == 0)
            return &sv->state[1].v[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- keys with a gap ----------------------------------------------------------- */

typedef struct keyset {
    char **v;
    size_t n, cap;
} keyset;

static int keyset_add(keyset *ks, const void *k, size_t n)
{
    if (ks == NULL)
        return 0;
    if (ks->n == ks->cap && grow((void **)&ks->v, &ks->cap, sizeof(char *)) != 0)
        return BINDLOG_ENOMEM;
    char *s = malloc(n + 1);
    if (s == NULL)
        return BINDLOG_ENOMEM;
    memcpy(s, k, n);
    s[n] = '\0';
    ks->v[ks->n++] = s;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void keyset_unique(keyset *ks)
{
    size_t o = 0;
    sort(ks->v, ks->n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < ks->n; i++) {
        if (o > 0 && strcmp(ks->v[o - 1], ks->v[i]) == 0) {
            free(ks->v[i]);
            continue;
        }
        ks->v[o++] = ks->v[i];
    }
    ks->n = o;
}

/* ---- the walk over the LSNs ------------------------------------------------------ */

typedef struct walk {
    bl_salvage *sv;
    const evidence *ev;
    bl_env *y;               /* the state (a scratch store) */
    uint64_t start, head, stop;
    bl_replayer r;
    uint64_t cut;
    size_t ri;               /* next record index */
    /* the report (first run only) */
    keyset *gap;
    bindlog_recover_report *rep;
    uint64_t range_first;    /* open lost range, 0 = none */
    VEC(bindlog_lsn_range) ranges;
    bindlog_progress_fn progress;
    void *pctx;
} walk;

static int put_raw(MDB_txn *txn, MDB_dbi dbi, const void *k, size_t kn, const void *v, size_t vn)
{
    MDB_val key = {kn, (void *)k}, val = {vn, (void *)v};
    return bl_mdb_error(mdb_put(txn, dbi, &key, &val, 0));
}

static int put_bval(walk *w, MDB_txn *txn, const void *k, size_t kn, const bl_bval *b)
{
    unsigned char buf[16 + BINDLOG_ID_MAX + 64];
    size_t n = bl_bval_encode(b, buf, sizeof buf);
    return n ? put_raw(txn, w->y->dbi[BL_DB_BINDINGS], k, kn, buf, n) : BINDLOG_ECORRUPT;
}

static int put_sval(walk *w, MDB_txn *txn, const void *id, size_t n, const bl_sval *s)
{
    size_t cap = bl_sval_size(s);
    unsigned char *buf = malloc(cap ? cap : 1);
    if (buf == NULL)
        return BINDLOG_ENOMEM;
    size_t len = bl_sval_encode(s, buf, cap);
    int rc = len ? put_raw(txn, w->y->dbi[BL_DB_SESSIONS], id, n, buf, len) : BINDLOG_ECORRUPT;
    free(buf);
    return rc;
}

static int get_raw(MDB_txn *txn, MDB_dbi dbi, const void *k, size_t kn, MDB_val *v)
{
    MDB_val key = {kn, (void *)k};
    return bl_mdb_error(mdb_get(txn, dbi, &key, v));
}

/* A key that held `sid` now that sid moved to another key: unbound, since
 * the record that moved it away is lost (its generation still moves on). */
static int displace(walk *w, MDB_txn *txn, const char *key, size_t kn, const char *sid,
                    size_t sn, uint64_t lsn, int64_t t)
{
    MDB_val v;
    bl_bval b;
    if (get_raw(txn, w->y->dbi[BL_DB_BINDINGS], key, kn, &v) != 0 ||
        bl_bval_decode(v.mv_data, v.mv_size, &b) != 0 || b.sid_len != sn ||
        memcmp(b.sid, sid, sn) != 0)
        return 0;
    b.sid = "";
    b.sid_len = 0;
    b.generation++;
    b.lsn = lsn;
    b.updated_ms = t;
    int rc = put_bval(w, txn, key, kn, &b);
    return rc ? rc : keyset_add(w->gap, key, kn);
}

/* A session live in the state that the record says its key no longer had:
 * ended where the record is (how it ended is lost). */
static int end_orphan(walk *w, MDB_txn *txn, const char *sid, size_t sn, uint64_t lsn,
                      int64_t t)
{
    MDB_val v;
    bl_sval s;
    if (get_raw(txn, w->y->dbi[BL_DB_SESSIONS], sid, sn, &v) != 0 ||
        bl_sval_decode(v.mv_data, v.mv_size, &s) != 0 || s.ended_lsn != 0)
        return 0;
    s.ended_lsn = lsn;
    s.ended_ms = t;
    s.reason = "";
    s.reason_len = 0;
    return put_sval(w, txn, sid, sn, &s);
}

/* The view a record applied by its effect is decided against: the state,
 * with the record's key bound as the record says it was before it. */
typedef struct fview {
    bl_view base;
    const bl_record *rec;
    bl_bval prior;
    int known;
    bl_sval bound;       /* the session prior.sid, live on the record's key */
    int bound_found;
    const char *moved_key; /* BIND: the key the target was live on, if another */
    size_t moved_len;
} fview;

static int same(const char *a, size_t an, const char *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

static int fv_binding(void *ctx, const char *key, size_t n, bl_bval *out)
{
    fview *fv = ctx;
    if (same(key, n, fv->rec->key, fv->rec->key_len)) {
        if (!fv->known)
            return BINDLOG_ENOTFOUND;
        *out = fv->prior;
        return 0;
    }
    return fv->base.binding(fv->base.ctx, key, n, out);
}

static int fv_session(void *ctx, const char *id, size_t n, bl_sval *out)
{
    fview *fv = ctx;
    const bl_record *rec = fv->rec;
    if (fv->prior.sid_len && same(id, n, fv->prior.sid, fv->prior.sid_len)) {
        *out = fv->bound;
        return 0;
    }
    if ((rec->type == BINDLOG_EVENT_NEW_SESSION || rec->type == BINDLOG_EVENT_SPLIT) &&
        same(id, n, rec->sid, rec->sid_len))
        return BINDLOG_ENOTFOUND; /* the record creates it */
    int rc = fv->base.session(fv->base.ctx, id, n, out);
    if (rc == 0 && rec->type == BINDLOG_EVENT_BIND && same(id, n, rec->sid, rec->sid_len) &&
        out->ended_lsn == 0) {
        /* live, though the record says its key was bound to something else:
         * it ended in a lost record (and the key it was live on, if another,
         * lost it there) */
        if (!same(out->key, out->key_len, rec->key, rec->key_len)) {
            fv->moved_key = out->key;
            fv->moved_len = out->key_len;
        }
        out->ended_lsn = rec->lsn;
        out->ended_ms = rec->time_ms;
    }
    return rc;
}

/* Apply an intact record that does not re-derive, by its effect.  0,
 * 1 (skipped: even so it does not give its own bytes), or an error. */
static int by_effect(walk *w, MDB_txn *txn, bl_tables *t, const srec *sr)
{
    bl_record rec;
    bl_event ev;
    bl_plan plan;
    fview fv;
    bl_bval cur;
    int rc;

    if (bl_record_decode(sr->p, sr->n, &rec) != 0 || bl_event_from_record(&rec, &ev) != 0)
        return 1;
    memset(&fv, 0, sizeof fv);
    bl_view_init(&fv.base, t);
    fv.rec = &rec;
    /* the binding before the record, as the record says it was */
    rc = fv.base.binding(fv.base.ctx, rec.key, rec.key_len, &cur);
    if (rc < 0 && rc != BINDLOG_ENOTFOUND)
        return rc;
    fv.known = rc == 0;
    fv.prior = fv.known ? cur : (bl_bval){"", 0, 0, 0, 0};
    /* what the key was bound to in the state, if the record disagrees */
    char orphan[BINDLOG_ID_MAX];
    size_t orphan_len = 0;
    switch (rec.type) {
    case BINDLOG_EVENT_BIND:
    case BINDLOG_EVENT_NEW_SESSION:
        fv.prior.sid = rec.other;
        fv.prior.sid_len = rec.other_len;
        break;
    case BINDLOG_EVENT_SPLIT:
        fv.prior.sid = rec.other;
        fv.prior.sid_len = rec.other_len;
        break;
    default: /* INVALIDATE, UNBIND: the session bound before and after */
        fv.prior.sid = rec.sid;
        fv.prior.sid_len = rec.sid_len;
        break;
    }
    if (fv.known && cur.sid_len && cur.sid_len <= sizeof orphan &&
        !same(cur.sid, cur.sid_len, fv.prior.sid, fv.prior.sid_len) &&
        !same(cur.sid, cur.sid_len, rec.sid, rec.sid_len)) {
        memcpy(orphan, cur.sid, cur.sid_len);
        orphan_len = cur.sid_len;
    }
    if (rec.type == BINDLOG_EVENT_SPLIT)
        fv.prior.generation = rec.generation;
    else if (rec.generation == 0)
        return 1;
    else
        fv.prior.generation = rec.generation - 1;
    fv.known = fv.known || fv.prior.sid_len != 0;
    /* the session bound before: live on the record's key */
    const char *moved_bound = NULL;
    size_t moved_bound_len = 0;
    if (fv.prior.sid_len) {
        rc = fv.base.session(fv.base.ctx, fv.prior.sid, fv.prior.sid_len, &fv.bound);
        if (rc < 0 && rc != BINDLOG_ENOTFOUND)
            return rc;
        if (rc == BINDLOG_ENOTFOUND) {
            memset(&fv.bound, 0, sizeof fv.bound);
            fv.bound.parent = fv.bound.reason = "";
            fv.bound.origin = "";
        } else if (fv.bound.ended_lsn == 0 &&
                   !same(fv.bound.key, fv.bound.key_len, rec.key, rec.key_len)) {
            moved_bound = fv.bound.key;
            moved_bound_len = fv.bound.key_len;
        }
        fv.bound.key = rec.key;
        fv.bound.key_len = rec.key_len;
        fv.bound.ended_lsn = 0;
        fv.bound.ended_ms = 0;
        fv.bound.reason = "";
        fv.bound.reason_len = 0;
    }

    bl_view view = {&fv, fv_binding, fv_session};
    rc = bl_decide(&view, &ev, rec.lsn, rec.time_ms, &plan);
    if (rc != BINDLOG_APPLIED)
        return rc < 0 && rc != BINDLOG_ENOTFOUND && rc != BINDLOG_EEXIST &&
                       rc != BINDLOG_ECONFLICT && rc != BINDLOG_EINVAL && rc != BINDLOG_ECORRUPT
                   ? rc
                   : 1;
    if ((rc = bl_plan_encode(&plan, &w->r.enc)) != 0)
        return rc;
    if (w->r.enc.rec_len != sr->n || memcmp(w->r.enc.buf + w->r.enc.rec_off, sr->p, sr->n) != 0)
        return 1;
    /* copies of the displaced keys before the writes move what they point at */
    char mk[BINDLOG_KEY_MAX + 1], bk[BINDLOG_KEY_MAX + 1];
    size_t mkn = fv.moved_key ? fv.moved_len : 0, bkn = moved_bound ? moved_bound_len : 0;
    if (mkn > BINDLOG_KEY_MAX || bkn > BINDLOG_KEY_MAX)
        return 1;
    if (mkn)
        memcpy(mk, fv.moved_key, mkn);
    if (bkn)
        memcpy(bk, moved_bound, bkn);
    /* INVALIDATE writes no session: the one it leaves bound must be live */
    unsigned char *keep = NULL;
    size_t keep_len = 0;
    if (rec.type == BINDLOG_EVENT_INVALIDATE) {
        keep_len = bl_sval_size(&fv.bound);
        if ((keep = malloc(keep_len)) == NULL)
            return BINDLOG_ENOMEM;
        keep_len = bl_sval_encode(&fv.bound, keep, keep_len);
    }
    int map_full;
    rc = bl_tables_apply(t, &plan, &w->r.enc, &map_full);
    if (rc == 0 && keep != NULL)
        rc = put_raw(txn, w->y->dbi[BL_DB_SESSIONS], rec.sid, rec.sid_len, keep, keep_len);
    free(keep);
    if (rc != 0)
        return rc;
    bl_counts_apply(&w->r.counts, &plan);
    if (mkn && (rc = displace(w, txn, mk, mkn, rec.sid, rec.sid_len, rec.lsn, rec.time_ms)) != 0)
        return rc;
    if (bkn && (rc = displace(w, txn, bk, bkn, fv.prior.sid, fv.prior.sid_len, rec.lsn,
                              rec.time_ms)) != 0)
        return rc;
    if (orphan_len && (rc = end_orphan(w, txn, orphan, orphan_len, rec.lsn, rec.time_ms)) != 0)
        return rc;
    if (rec.time_ms > w->r.last_time)
        w->r.last_time = rec.time_ms;
    return keyset_add(w->gap, rec.key, rec.key_len);
}

/* A lost LSN: what the stored state says happened there.  Returns 0 or an
 * error; *named is set when some evidence names the LSN. */
static int lost_lsn(walk *w, MDB_txn *txn, uint64_t lsn, int *named)
{
    const evidence *ev = w->ev;
    int rc;

    *named = 0;
    /* the history index names the key */
    shist probe = {lsn, NULL, 0};
    const shist *h = w->sv->hist.n ? bsearch(&probe, w->sv->hist.v, w->sv->hist.n,
                                             sizeof(shist), cmp_hist)
                                   : NULL;
    if (h != NULL) {
        *named = 1;
        if ((rc = keyset_add(w->gap, h->k, h->kn)) != 0)
            return rc;
    }
    /* sessions created there, live from then on */
    for (size_t i = byl_find(ev->created, ev->ncreated, lsn);
         i < ev->ncreated && ev->created[i].lsn == lsn; i++) {
        const sent *e = ev->created[i].e;
        bl_sval s;
        if (bl_sval_decode(e->v, e->vn, &s) != 0)
            continue;
        *named = 1;
        if (s.ended_lsn > lsn) {
            s.ended_lsn = 0;
            s.ended_ms = 0;
            s.reason = "";
            s.reason_len = 0;
        }
        if ((rc = put_sval(w, txn, e->k, e->kn, &s)) != 0 ||
            (rc = keyset_add(w->gap, s.key, s.key_len)) != 0)
            return rc;
    }
    /* bindings last changed there */
    for (size_t i = byl_find(ev->bind, ev->nbind, lsn); i < ev->nbind && ev->bind[i].lsn == lsn;
         i++) {
        const sent *e = ev->bind[i].e;
        bl_bval b, old;
        MDB_val v;
        if (bl_bval_decode(e->v, e->vn, &b) != 0)
            continue;
        *named = 1;
        if ((rc = keyset_add(w->gap, e->k, e->kn)) != 0)
            return rc;
        /* the session it was bound to until then ends here */
        if (get_raw(txn, w->y->dbi[BL_DB_BINDINGS], e->k, e->kn, &v) == 0 &&
            bl_bval_decode(v.mv_data, v.mv_size, &old) == 0 && old.sid_len &&
            !same(old.sid, old.sid_len, b.sid, b.sid_len)) {
            char sid[BINDLOG_ID_MAX];
            size_t sn = old.sid_len;
            bl_sval s;
            memcpy(sid, old.sid, sn);
            if (get_raw(txn, w->y->dbi[BL_DB_SESSIONS], sid, sn, &v) == 0 &&
                bl_sval_decode(v.mv_data, v.mv_size, &s) == 0 && s.ended_lsn == 0) {
                const sent *st = stored_session(w->sv, sid, sn);
                bl_sval ss;
                s.ended_lsn = lsn;
                s.ended_ms = b.updated_ms;
                s.reason = "";
                s.reason_len = 0;
                if (st != NULL && bl_sval_decode(st->v, st->vn, &ss) == 0 && ss.ended_lsn == lsn) {
                    s.reason = ss.reason;
                    s.reason_len = ss.reason_len;
                }
                if ((rc = put_sval(w, txn, sid, sn, &s)) != 0)
                    return rc;
            }
        }
        if ((rc = put_raw(txn, w->y->dbi[BL_DB_BINDINGS], e->k, e->kn, e->v, e->vn)) != 0)
            return rc;
        /* and the session it is bound to is live on it */
        if (b.sid_len) {
            const sent *st = stored_session(w->sv, b.sid, b.sid_len);
            bl_sval s;
            char other[BINDLOG_KEY_MAX];
            size_t other_len = 0;
            if (get_raw(txn, w->y->dbi[BL_DB_SESSIONS], b.sid, b.sid_len, &v) == 0 &&
                bl_sval_decode(v.mv_data, v.mv_size, &s) == 0) {
                /* keep what the state has; a key it was live on loses it */
                if (s.ended_lsn == 0 && s.key_len <= sizeof other &&
                    !same(s.key, s.key_len, (const char *)e->k, e->kn)) {
                    memcpy(other, s.key, s.key_len);
                    other_len = s.key_len;
                }
            } else if (st != NULL && bl_sval_decode(st->v, st->vn, &s) == 0) {
                /* what the store had */
            } else {
                memset(&s, 0, sizeof s);
                s.parent = s.reason = "";
                s.origin = "";
                s.created_ms = b.updated_ms;
            }
            s.key = (const char *)e->k;
            s.key_len = e->kn;
            s.ended_lsn = 0;
            s.ended_ms = 0;
            s.reason = "";
            s.reason_len = 0;
            char sid[BINDLOG_ID_MAX];
            memcpy(sid, b.sid, b.sid_len);
            if ((rc = put_sval(w, txn, sid, b.sid_len, &s)) != 0)
                return rc;
            if (other_len &&
                (rc = displace(w, txn, other, other_len, sid, b.sid_len, lsn, b.updated_ms)) != 0)
                return rc;
        }
        if (b.updated_ms > w->r.last_time)
            w->r.last_time = b.updated_ms;
    }
    /* sessions ended there */
    for (size_t i = byl_find(ev->ended, ev->nended, lsn); i < ev->nended && ev->ended[i].lsn == lsn;
         i++) {
        const sent *e = ev->ended[i].e;
        bl_sval s, st;
        MDB_val v;
        if (bl_sval_decode(e->v, e->vn, &st) != 0)
            continue;
        *named = 1;
        if ((rc = keyset_add(w->gap, st.key, st.key_len)) != 0)
            return rc;
        /* the store says how it ended, unless the state saw it end later */
        if (get_raw(txn, w->y->dbi[BL_DB_SESSIONS], e->k, e->kn, &v) == 0 &&
            bl_sval_decode(v.mv_data, v.mv_size, &s) == 0 && s.ended_lsn >= lsn)
            continue;
        /* its key, if still bound to it, moved on there: to the session
         * created there on that key (a split keeps the generation), else
         * somewhere no evidence says (unbound until a later record says) */
        bl_bval kb;
        if (get_raw(txn, w->y->dbi[BL_DB_BINDINGS], st.key, st.key_len, &v) == 0 &&
            bl_bval_decode(v.mv_data, v.mv_size, &kb) == 0 &&
            same(kb.sid, kb.sid_len, (const char *)e->k, e->kn)) {
            const sent *next = NULL;
            for (size_t j = byl_find(ev->created, ev->ncreated, lsn);
                 j < ev->ncreated && ev->created[j].lsn == lsn; j++) {
                bl_sval c;
                if (bl_sval_decode(ev->created[j].e->v, ev->created[j].e->vn, &c) == 0 &&
                    same(c.key, c.key_len, st.key, st.key_len))
                    next = ev->created[j].e;
            }
            kb.generation += !(next != NULL && same(st.reason, st.reason_len, "compression", 11));
            kb.sid = next != NULL ? (const char *)next->k : "";
            kb.sid_len = next != NULL ? next->kn : 0;
            kb.lsn = lsn;
            kb.updated_ms = st.ended_ms;
            if ((rc = put_bval(w, txn, st.key, st.key_len, &kb)) != 0)
                return rc;
        }
        if ((rc = put_raw(txn, w->y->dbi[BL_DB_SESSIONS], e->k, e->kn, e->v, e->vn)) != 0)
            return rc;
    }
    return 0;
}

static void note_range(walk *w, uint64_t lsn, int lost)
{
    if (lost && w->range_first == 0) {
        w->range_first = lsn;
    } else if (!lost && w->range_first != 0) {
        bindlog_lsn_range r = {w->range_first, lsn - 1};
        if (PUSH(w->ranges, r) != 0)
            w->rep->nranges = SIZE_MAX; /* reported as ENOMEM at the end */
        w->range_first = 0;
    }
}

/* One LSN.  0 or an error. */
static int step(walk *w, MDB_txn *txn, bl_tables *t, uint64_t n)
{
    const srec *sr = NULL;
    int rc, map_full, named;

    while (w->ri < w->sv->recs.n && w->sv->recs.v[w->ri].lsn < n)
        w->ri++;
    if (w->ri < w->sv->recs.n && w->sv->recs.v[w->ri].lsn == n)
        sr = &w->sv->recs.v[w->ri];
    w->r.next_lsn = n;
    if (w->rep != NULL)
        note_range(w, n, sr == NULL);
    if (sr == NULL) {
        w->cut = n;
        if ((rc = lost_lsn(w, txn, n, &named)) != 0)
            return rc;
        if (w->rep != NULL) {
            w->rep->records_lost++;
            if (!named)
                w->rep->unknown_lost++;
        }
        return 0;
    }
    rc = bl_replay_one(&w->r, t, sr->p, sr->n, n, &map_full);
    if (rc == 0)
        return 0;
    if (rc != BINDLOG_ECORRUPT && rc != BINDLOG_EVERSION && rc != 1)
        return rc; /* storage */
    w->cut = n;
    rc = by_effect(w, txn, t, sr);
    if (rc < 0)
        return rc;
    if (w->rep != NULL) {
        if (rc == 0) {
            w->rep->records_by_effect++;
        } else {
            bl_record rec;
            w->rep->records_skipped++;
            if (bl_record_decode(sr->p, sr->n, &rec) == 0 &&
                (rc = keyset_add(w->gap, rec.key, rec.key_len)) != 0)
                return rc;
        }
    }
    return 0;
}

/* The base image into the state. */
static int seed(walk *w, MDB_txn *txn)
{
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < w->sv->base[s].n; i++) {
            const sent *e = &w->sv->base[s].v[i];
            int rc = put_raw(txn, w->y->dbi[s ? BL_DB_SESSIONS : BL_DB_BINDINGS], e->k, e->kn, e->v,
                             e->vn);
            if (rc != 0)
                return rc;
        }
    return 0;
}

/* Walk LSNs start+1..stop on the state in w->y.  Chunks of records per
 * write transaction, as replay does. */
static int walk_run(walk *w)
{
    MDB_txn *txn;
    bl_tables t;
    uint64_t n = w->start + 1;
    int rc, map_full = 0, first = 1;

    w->ri = 0;
    w->cut = w->start;
    do {
        if ((rc = bl_wtxn_begin(w->y, &txn)) != 0)
            return rc;
        bl_tables_live(w->y, txn, &t);
        t.children = t.history = t.log = 0; /* the state is what replay needs */
        if (first && (rc = seed(w, txn)) != 0) {
            bl_wtxn_abort(w->y, txn);
            return rc;
        }
        first = 0;
        for (unsigned k = 0; rc == 0 && k < BL_CHUNK_RECORDS && n <= w->stop; k++, n++)
            rc = step(w, txn, &t, n);
        if (rc != 0) {
            bl_wtxn_abort(w->y, txn);
            return rc;
        }
        if ((rc = bl_wtxn_commit(w->y, txn, &map_full)) != 0)
            return rc;
        if (w->progress != NULL)
            w->progress(w->pctx, n - 1 - w->start, w->head - w->start);
    } while (n <= w->stop);
    if (w->rep != NULL)
        note_range(w, w->stop + 1, 0);
    return 0;
}

/* Live entries of a state, for the base image's counters. */
static int count_live(bl_env *e, uint64_t *lb, uint64_t *ls)
{
    MDB_txn *txn;
    int rc;
    *lb = *ls = 0;
    if ((rc = bl_read_begin_fresh(e, &txn)) != 0)
        return rc;
    for (int s = 0; s < 2 && rc == 0; s++) {
        bl_cursor c;
        MDB_val k, v;
        if ((rc = bl_cursor_open(&c, e, txn, e->dbi[s ? BL_DB_SESSIONS : BL_DB_BINDINGS], NULL,
                                 0)) != 0)
            break;
        while ((rc = bl_cursor_next(&c, &k, &v)) > 0) {
            if (s) {
                bl_sval sv;
                *ls += bl_sval_decode(v.mv_data, v.mv_size, &sv) == 0 && sv.ended_lsn == 0;
            } else {
                bl_bval b;
                *lb += bl_bval_decode(v.mv_data, v.mv_size, &b) == 0 && b.sid_len != 0;
            }
        }
        bl_cursor_close(&c);
    }
    bl_read_end(e, txn);
    return rc;
}

/* ---- the intermediate store and the new one ------------------------------------- */

static int open_scratch(const char *dir, uint64_t size, bindlog **out)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.map_size = (size_t)(3 * size + ((uint64_t)256 << 20));
    return bindlog_open(out, dir, &o);
}

/* X: the state of y as its base image at `cut`, the records after it as
 * its log. */
static int build_x(bl_salvage *sv, bl_env *y, const bl_base *base, uint64_t head_lsn,
                   int64_t head_time, bl_env *x)
{
    MDB_txn *txn, *ytxn;
    int rc, map_full = 0;

    if ((rc = bl_wtxn_begin(x, &txn)) != 0)
        return rc;
    if ((rc = bl_read_begin_fresh(y, &ytxn)) != 0) {
        bl_wtxn_abort(x, txn);
        return rc;
    }
    for (int s = 0; s < 2 && rc == 0; s++) {
        bl_cursor c;
        MDB_val k, v;
        if ((rc = bl_cursor_open(&c, y, ytxn, y->dbi[s ? BL_DB_SESSIONS : BL_DB_BINDINGS], NULL,
                                 0)) != 0)
            break;
        while ((rc = bl_cursor_next(&c, &k, &v)) > 0)
            if ((rc = bl_mdb_error(mdb_put(txn, x->dbi[s ? BL_DB_BASE_SESSIONS : BL_DB_BASE_BINDINGS],
                                           &k, &v, MDB_APPEND))) != 0)
                break;
        bl_cursor_close(&c);
    }
    bl_read_end(y, ytxn);
    for (size_t i = 0; rc == 0 && i < sv->recs.n; i++) {
        const srec *r = &sv->recs.v[i];
        unsigned char kb[8];
        if (r->lsn <= base->lsn || r->lsn > head_lsn)
            continue;
        bl_put64be(kb, r->lsn);
        MDB_val k = {8, kb}, v = {r->n, (void *)r->p};
        rc = bl_mdb_error(mdb_put(txn, x->dbi[BL_DB_LOG], &k, &v, MDB_APPEND));
    }
    if (rc == 0 && (rc = bl_base_put(x, txn, base)) != 0)
        rc = bl_mdb_error(rc);
    bl_head h = {head_lsn, head_time};
    if (rc == 0 && (rc = bl_meta_put_head(x, txn, &h)) != 0)
        rc = bl_mdb_error(rc);
    if (rc != 0) {
        bl_wtxn_abort(x, txn);
        return rc;
    }
    return bl_wtxn_commit(x, txn, &map_full);
}

static int dir_is_new(const char *dir)
{
    struct stat st;
    DIR *d;
    struct dirent *de;
    int rc = 0;
    if (stat(dir, &st) != 0)
        return errno == ENOENT ? 0 : bl_mdb_error(errno);
    if (!S_ISDIR(st.st_mode) || (d = opendir(dir)) == NULL)
        return BINDLOG_EEXIST;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            rc = BINDLOG_EEXIST;
            break;
        }
    closedir(d);
    return rc;
}

static int recover(const char *dir, const char *out_dir, bindlog_recover_report *rep,
                   bindlog_progress_fn progress, void *pctx)
{
    bl_salvage sv;
    evidence ev;
    keyset gap = {NULL, 0, 0};
    walk w;
    bindlog *y = NULL, *y2 = NULL, *x = NULL, *out = NULL;
    char *scratch = NULL, path[4200];
    int rc;

    memset(&sv, 0, sizeof sv);
    memset(&ev, 0, sizeof ev);
    memset(&w, 0, sizeof w);
    if ((rc = dir_is_new(out_dir)) != 0)
        return rc == BINDLOG_EEXIST
                   ? bl_err_set(rc, "the output directory is not empty: recover needs a new one")
                   : rc;

    /* salvage */
    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) {
        rc = sources[i].fn(&sv, dir);
        if (rc == BINDLOG_ENOTFOUND && !sources[i].required)
            rc = 0;
        if (rc != 0)
            goto out;
    }
    dedupe_records(&sv);
    if ((rc = evidence_build(&sv, &ev)) != 0)
        goto out;
    rep->pages = sv.pages;
    rep->damaged_pages = sv.damaged;
    rep->records_found = sv.recs.n;

    /* where the walk starts and ends */
    int base_ok = sv.have_meta && !sv.base_damaged;
    uint64_t base_lsn = sv.have_meta && sv.meta.have_base ? sv.meta.base.lsn : 0;
    bl_base base = {0};
    if (base_lsn > 0 && base_ok) {
        base = sv.meta.base;
        rep->base_image = 1;
    } else if (base_lsn > 0 || (!sv.have_meta && (sv.base[0].n || sv.base[1].n))) {
        rep->base_image = -1; /* start at LSN 1 with what survives of the compacted log */
        sv.base[0].n = sv.base[1].n = 0;
    } else {
        sv.base[0].n = sv.base[1].n = 0;
    }
    uint64_t head = sv.have_meta && sv.meta.have_head ? sv.meta.head.lsn : 0;
    if (sv.recs.n && sv.recs.v[sv.recs.n - 1].lsn > head)
        head = sv.recs.v[sv.recs.n - 1].lsn;
    if (head < base.lsn)
        head = base.lsn;
    rep->head_lsn = head;
    rep->head_known = sv.have_meta && sv.meta.whole;
    rep->base_lsn = base.lsn;

    /* first walk: what is lost, and the cut */
    if ((scratch = bl_scratch_dir("recover")) == NULL) {
        rc = bl_mdb_error(errno);
        goto out;
    }
    uint64_t size = 0;
    for (size_t i = 0; i < sv.maps.n; i++)
        size += sv.maps.v[i].n;
    snprintf(path, sizeof path, "%s/a", scratch);
    if ((rc = open_scratch(path, size, &y)) != 0)
        goto out;
    w.sv = &sv;
    w.ev = &ev;
    w.y = y->e;
    w.start = base.lsn;
    w.head = w.stop = head;
    w.gap = &gap;
    w.rep = rep;
    w.progress = progress;
    w.pctx = pctx;
    bl_replayer_init(&w.r, base.lsn + 1, base.time_ms, &base.counts);
    if ((rc = walk_run(&w)) != 0)
        goto out;
    uint64_t cut = w.cut;
    bl_replayer_free(&w.r);
    if (rep->nranges == SIZE_MAX) {
        rc = BINDLOG_ENOMEM;
        goto out;
    }

    /* second walk, stopped at the cut: the state the new log starts from */
    snprintf(path, sizeof path, "%s/b", scratch);
    if ((rc = open_scratch(path, size, &y2)) != 0)
        goto out;
    walk w2 = w;
    w2.y = y2->e;
    w2.stop = cut;
    w2.gap = NULL;
    w2.rep = NULL;
    w2.progress = NULL;
    memset(&w2.ranges, 0, sizeof w2.ranges);
    bl_replayer_init(&w2.r, base.lsn + 1, base.time_ms, &base.counts);
    if ((rc = walk_run(&w2)) != 0) {
        bl_replayer_free(&w2.r);
        goto out;
    }
    bl_base at = {cut, w2.r.last_time, w2.r.counts};
    bl_replayer_free(&w2.r);
    if ((rc = count_live(y2->e, &at.counts.live_bindings, &at.counts.live_sessions)) != 0)
        goto out;

    /* X, then replay into the new store */
    int64_t head_time = at.time_ms;
    for (size_t i = 0; i < sv.recs.n; i++)
        if (sv.recs.v[i].lsn > cut && sv.recs.v[i].lsn <= head) {
            bl_record rec;
            if (bl_record_decode(sv.recs.v[i].p, sv.recs.v[i].n, &rec) == 0 &&
                rec.time_ms > head_time)
                head_time = rec.time_ms;
        }
    snprintf(path, sizeof path, "%s/x", scratch);
    if ((rc = open_scratch(path, size, &x)) != 0)
        goto out;
    if ((rc = build_x(&sv, y2->e, &at, head, head_time, x->e)) != 0)
        goto out;
    bindlog_close(y);
    bindlog_close(y2);
    y = y2 = NULL;
    uint64_t last = 0;
    rc = bindlog_replay(x, out_dir, UINT64_MAX, INT64_MAX, rep->digest, &last, NULL, NULL);
    if (rc != 0) {
        rc = bl_err_set(rc == BINDLOG_ECORRUPT ? BINDLOG_ECORRUPT : rc,
                        "replaying the salvaged log into %s failed: %s", out_dir,
                        bl_err_isset() ? bl_err_get() : bindlog_strerror(rc));
        goto out;
    }
    rep->cut_lsn = cut > base.lsn ? cut : 0;
    rep->records_rederived = head - (cut > base.lsn ? cut : base.lsn);
    rep->new_head_lsn = last;

    /* the new store must check clean */
    bindlog_check_report chk;
    if ((rc = bindlog_open(&out, out_dir, NULL)) != 0 ||
        (rc = bindlog_check(out, &chk, NULL, NULL)) != 0)
        goto out;
    if (chk.problems != 0) {
        rc = bl_err_set(BINDLOG_ECORRUPT, "the rebuilt store does not check clean: %s",
                        chk.message);
        goto out;
    }

    keyset_unique(&gap);
    rep->keys = gap.v;
    rep->nkeys = gap.n;
    gap.v = NULL;
    gap.n = 0;
    rep->ranges = w.ranges.v;
    rep->nranges = w.ranges.n;
    w.ranges.v = NULL;
out:
    bindlog_close(out);
    bindlog_close(x);
    bindlog_close(y);
    bindlog_close(y2);
    bl_scratch_remove(scratch);
    free(scratch);
    for (size_t i = 0; i < gap.n; i++)
        free(gap.v[i]);
    free(gap.v);
    free(w.ranges.v);
    evidence_free(&ev);
    salvage_free(&sv);
    if (rc != 0)
        rep->nranges = 0;
    return rc;
}

int bindlog_recover(const char *dir, const char *out_dir, bindlog_recover_report *rep,
                    bindlog_progress_fn progress, void *progress_ctx)
{
    char q[BL_ERR_QUOTE_MAX];
    int rc;

    bl_err_clear();
    if (rep != NULL)
        memset(rep, 0, sizeof(*rep));
    if (dir == NULL || dir[0] == '\0' || out_dir == NULL || out_dir[0] == '\0' || rep == NULL)
        rc = BINDLOG_EINVAL;
    else
        rc = recover(dir, out_dir, rep, progress, progress_ctx);
    return bl_api_done(rc, "recover %s",
                       dir ? bl_err_bytes(q, sizeof q, dir, strnlen(dir, 4096)) : "(null)");
}

void bindlog_recover_report_free(bindlog_recover_report *rep)
{
    if (rep == NULL)
        return;
    for (size_t i = 0; i < rep->nkeys; i++)
        free(rep->keys[i]);
    free(rep->keys);
    free(rep->ranges);
    rep->keys = NULL;
    rep->ranges = NULL;
    rep->nkeys = rep->nranges = 0;
}
