/*
 * recover_walk.c -- the rebuild of bindlog_recover(): one walk over the
 * LSNs on a scratch state (recover.c explains the rules and the cut).
 *
 * For each LSN: an intact record is re-derived exactly (bl_replay_one); an
 * intact record that does not re-derive is applied by the after-images its
 * log frame carries (by_image), or, without them, by its effect
 * (by_effect: the state before it is made what the record says it was,
 * then the record is decided and must give its own bytes); a lost LSN
 * takes what the stored state says happened there (lost_lsn).  The state
 * is kept consistent as it goes: a key is only ever bound to a live
 * session of its own, so that the deltas of later records stay exact.
 */
#define _GNU_SOURCE
#include "maint/recover.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/error.h"
#include "lmdb/wal.h"

/* ---- the bl_walk over the LSNs ------------------------------------------------------ */

static int put_raw(MDB_txn *txn, MDB_dbi dbi, const void *k, size_t kn, const void *v, size_t vn)
{
    MDB_val key = {kn, (void *)k}, val = {vn, (void *)v};
    return bl_mdb_error(mdb_put(txn, dbi, &key, &val, 0));
}

static int put_bval(bl_walk *w, MDB_txn *txn, const void *k, size_t kn, const bl_bval *b)
{
    unsigned char buf[16 + BINDLOG_ID_MAX + 64];
    size_t n = bl_bval_encode(b, buf, sizeof buf);
    return n ? put_raw(txn, w->y->dbi[BL_DB_BINDINGS], k, kn, buf, n) : BINDLOG_ECORRUPT;
}

/* A session value from evidence (the stored state, the salvage): without
 * its sibling chain, whose links may name records from after the LSN the
 * walk is at; build_x (recover.c) links the state at the cut again. */
static int put_sval(bl_walk *w, MDB_txn *txn, const void *id, size_t n, const bl_sval *given)
{
    bl_sval unlinked;
    bl_sval_copy(&unlinked, given);
    const bl_sval *s = &unlinked;
    unlinked.child_lsn = unlinked.sibling_lsn = 0;
    size_t cap = bl_sval_size(s);
    unsigned char *buf = malloc(cap ? cap : 1);
    if (buf == NULL)
        return BINDLOG_ENOMEM;
    size_t len = bl_sval_encode(s, buf, cap);
    int rc = len ? put_raw(txn, w->y->dbi[BL_DB_SESSIONS], id, n, buf, len) : BINDLOG_ECORRUPT;
    free(buf);
    return rc;
}

/* A stored session value (whole, marked or not) into the state, without
 * its sibling chain (put_sval). */
static int put_evidence(bl_walk *w, MDB_txn *txn, const void *k, size_t kn, const void *v,
                        size_t vn)
{
    bl_sval s;
    if (bl_sval_decode(v, vn, &s) != 0 || (s.child_lsn == 0 && s.sibling_lsn == 0))
        return put_raw(txn, w->y->dbi[BL_DB_SESSIONS], k, kn, v, vn);
    s.child_lsn = s.sibling_lsn = 0;
    size_t cap = bl_sval_size(&s);
    unsigned char *buf = malloc(cap ? cap : 1);
    if (buf == NULL)
        return BINDLOG_ENOMEM;
    size_t len = bl_sval_encode_base(&s, buf, cap);
    int rc = len ? put_raw(txn, w->y->dbi[BL_DB_SESSIONS], k, kn, buf, len) : BINDLOG_ECORRUPT;
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
static int displace(bl_walk *w, MDB_txn *txn, const char *key, size_t kn, const char *sid,
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
    return rc ? rc : bl_keyset_add(w->gap, key, kn);
}

/* A session live in the state that the record says its key no longer had:
 * ended where the record is (how it ended is lost). */
static int end_orphan(bl_walk *w, MDB_txn *txn, const char *sid, size_t sn, uint64_t lsn,
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
    bl_sval bound;         /* the session prior.sid, live on the record's key */
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
static int by_effect(bl_walk *w, MDB_txn *txn, bl_tables *t, const bl_srec *sr)
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
    fv.prior = fv.known ? cur : (bl_bval){"", 0, 0, 0, 0, 0};
    /* what the key was bound to in the state, if the record disagrees */
    char orphan[BINDLOG_ID_MAX];
    size_t orphan_len = 0;
    switch (rec.type) {
    case BINDLOG_EVENT_BIND:
    case BINDLOG_EVENT_NEW_SESSION:
    case BINDLOG_EVENT_SPLIT:
        fv.prior.sid = rec.other;
        fv.prior.sid_len = rec.other_len;
        break;
    case BINDLOG_EVENT_ROUTE:
        /* an activity on whatever the key is bound to now: it moves
         * nothing but the last activity */
        if (!fv.known || cur.sid_len == 0)
            return 1;
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
    if (rec.type == BINDLOG_EVENT_SPLIT || rec.type == BINDLOG_EVENT_ROUTE)
        fv.prior.generation = rec.generation;
    else if (rec.generation == 0)
        return 1;
    else
        fv.prior.generation = rec.generation - 1;
    /* the key's previous event, as the record names it (version 2 on): the
     * state may still show an older one, when the one it names is lost */
    if (rec.version >= 2)
        fv.prior.lsn = rec.prev_lsn;
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
    return bl_keyset_add(w->gap, rec.key, rec.key_len);
}

/* The session after-images of a frame's body as the walk's state keeps
 * them: whole.  A reference (formats 5 to 7) is made whole from the record, when
 * the record created the session, else from the state's value of the same
 * creation; one that cannot be is not usable (1).  pval/pvn point at the
 * body or at whole[i] (malloc'ed, freed by the caller); *count says how
 * many.  0, 1 or an error. */
static int image_puts(bl_walk *w, MDB_txn *txn, const bl_srec *sr, const bl_record *rec,
                      unsigned char **whole, const unsigned char **pval, size_t *pvn, size_t *count)
{
    enum { MAXS = 4 };
    bl_wentry e;
    size_t off = 0, n = 0;
    int rc;

    while ((rc = bl_wbody_next(sr->after, sr->after_n, &off, &e)) == 1) {
        if (e.kind != BL_WE_PUT || e.table != BL_DB_SESSIONS)
            continue;
        if (n == MAXS)
            return 1;
        pval[n] = e.val;
        pvn[n] = e.vlen;
        if (e.vlen != 0 && e.val[0] == 3) {
            bl_sval s, st;
            MDB_val v;
            if (!bl_valid_id((const char *)e.key, e.klen) || bl_sval_decode_any(e.val, e.vlen, &s) != 0)
                return 1;
            if (s.created_lsn == rec->lsn) {
                if (bl_sval_resolve(&s, (const char *)e.key, e.klen, rec) != 0) {
                    bl_err_clear();
                    return 1;
                }
            } else if (get_raw(txn, w->y->dbi[BL_DB_SESSIONS], e.key, e.klen, &v) == 0 &&
                       bl_sval_decode(v.mv_data, v.mv_size, &st) == 0 &&
                       bl_sval_take_creation(&s, &st) == 0) {
                /* from the state's value of the same creation */
            } else if (bl_sval_decode_any(e.val, e.vlen, &s) != 0 ||
                       bl_salvage_lost_creation(w->sv, &s, e.key, e.klen,
                                                same((const char *)e.key, e.klen, rec->other,
                                                     rec->other_len)
                                                    ? rec->key
                                                    : NULL,
                                                rec->key_len) != 0) {
                return 1; /* created in a lost record, on a key nothing names */
            }
            size_t cap = bl_sval_size(&s);
            if ((whole[n] = malloc(cap ? cap : 1)) == NULL)
                return BINDLOG_ENOMEM;
            if ((pvn[n] = bl_sval_encode_base(&s, whole[n], cap)) == 0)
                return 1;
            pval[n] = whole[n];
        }
        n++;
    }
    *count = n;
    return rc < 0 ? 1 : 0;
}

static int by_image_puts(bl_walk *w, MDB_txn *txn, const bl_srec *sr, const bl_record *rp,
                         const unsigned char *const *pval, const size_t *pvn, size_t nimg);

/* Apply an intact record that does not re-derive by the state it left:
 * the after-images its log frame carries (the key's binding, the sessions
 * it created or ended; lmdb/wal.h), exact where by_effect can only infer.
 * What the state held that the record's event replaced and the lost
 * records before it would have changed is made consistent as by_effect
 * does: a session still live on the key is ended there, a key that still
 * held a session the record puts on another key is unbound.  0, 1 (the
 * after-images are not usable: fall back to by_effect), or an error. */
static int by_image(bl_walk *w, MDB_txn *txn, const bl_srec *sr)
{
    bl_record rec;
    int rc;
    enum { MAXS = 4 };
    /* the sessions' after-images as the walk's state keeps them: whole (a
     * reference is made whole from this record or the state's value) */
    unsigned char *whole[MAXS] = {NULL};
    const unsigned char *pval[MAXS];
    size_t pvn[MAXS], nimg = 0;

    if (bl_record_decode(sr->p, sr->n, &rec) != 0 || rec.type >= BINDLOG_EVENT_COUNT)
        return 1;
    rc = image_puts(w, txn, sr, &rec, whole, pval, pvn, &nimg);
    if (rc == 0)
        rc = by_image_puts(w, txn, sr, &rec, pval, pvn, nimg);
    for (size_t i = 0; i < MAXS; i++)
        free(whole[i]);
    return rc;
}

/* by_image()'s work once the sessions' after-images are whole: pval[i]
 * (pvn[i] bytes) for the i-th session put of the body, nimg of them. */
static int by_image_puts(bl_walk *w, MDB_txn *txn, const bl_srec *sr, const bl_record *rp,
                         const unsigned char *const *pval, const size_t *pvn, size_t nimg)
{
    bl_record rec = *rp;
    bl_wentry e;
    bl_bval nb;
    size_t off = 0;
    int rc, nbind = 0;
    enum { MAXS = 4 };
    struct {
        char key[BINDLOG_KEY_MAX];
        size_t kn;
        char sid[BINDLOG_ID_MAX];
        size_t sn;
    } moved[MAXS];
    size_t nmoved = 0;
    const char *psid[MAXS];
    size_t psn[MAXS], nput = 0;

    /* check every put first: nothing is written unless all are usable */
    while ((rc = bl_wbody_next(sr->after, sr->after_n, &off, &e)) == 1) {
        if (e.kind != BL_WE_PUT)
            return 1;
        if (e.table == BL_DB_BINDINGS) {
            if (!same((const char *)e.key, e.klen, rec.key, rec.key_len) ||
                bl_bval_decode(e.val, e.vlen, &nb) != 0 || nbind++)
                return 1;
        } else if (e.table == BL_DB_SESSIONS) {
            bl_sval ns, os;
            MDB_val v;
            if (!bl_valid_id((const char *)e.key, e.klen) || nput >= nimg ||
                bl_sval_decode(pval[nput], pvn[nput], &ns) != 0)
                return 1;
            psid[nput] = (const char *)e.key;
            psn[nput++] = e.klen;
            /* live on another key in the state: that key lost it in a
             * record that is lost */
            if (ns.ended_lsn == 0 &&
                get_raw(txn, w->y->dbi[BL_DB_SESSIONS], e.key, e.klen, &v) == 0 &&
                bl_sval_decode(v.mv_data, v.mv_size, &os) == 0 && os.ended_lsn == 0 &&
                !same(os.key, os.key_len, ns.key, ns.key_len) && os.key_len <= BINDLOG_KEY_MAX &&
                nmoved < MAXS) {
                memcpy(moved[nmoved].key, os.key, os.key_len);
                moved[nmoved].kn = os.key_len;
                memcpy(moved[nmoved].sid, e.key, e.klen);
                moved[nmoved++].sn = e.klen;
            }
        }
    }
    if (rc != 0 || nbind != 1)
        return 1;
    /* the session the state has on the key, if the record does not put it:
     * it ended in a lost record */
    char orphan[BINDLOG_ID_MAX];
    size_t orphan_len = 0;
    MDB_val v;
    bl_bval cur;
    if (get_raw(txn, w->y->dbi[BL_DB_BINDINGS], rec.key, rec.key_len, &v) == 0 &&
        bl_bval_decode(v.mv_data, v.mv_size, &cur) == 0 && cur.sid_len &&
        cur.sid_len <= sizeof orphan && !same(cur.sid, cur.sid_len, nb.sid, nb.sid_len)) {
        int put = 0;
        for (size_t i = 0; i < nput; i++)
            put |= same(cur.sid, cur.sid_len, psid[i], psn[i]);
        if (!put) {
            memcpy(orphan, cur.sid, cur.sid_len);
            orphan_len = cur.sid_len;
        }
    }
    if (orphan_len && (rc = end_orphan(w, txn, orphan, orphan_len, rec.lsn, rec.time_ms)) != 0)
        return rc;
    for (size_t i = 0; i < nmoved; i++)
        if ((rc = displace(w, txn, moved[i].key, moved[i].kn, moved[i].sid, moved[i].sn, rec.lsn,
                           rec.time_ms)) != 0)
            return rc;
    /* then the after-images themselves */
    off = 0;
    nput = 0;
    while (bl_wbody_next(sr->after, sr->after_n, &off, &e) == 1) {
        if (e.table == BL_DB_BINDINGS)
            rc = put_raw(txn, w->y->dbi[e.table], e.key, e.klen, e.val, e.vlen);
        else if (e.table == BL_DB_SESSIONS) {
            /* the walk above saw as many as image_puts */
            rc = nput < nimg
                     ? put_raw(txn, w->y->dbi[e.table], e.key, e.klen, pval[nput], pvn[nput])
                     : BINDLOG_ECORRUPT;
            nput++;
        }
        if (rc != 0)
            return rc;
    }
    w->r.counts.applied[rec.type]++;
    if (rec.time_ms > w->r.last_time)
        w->r.last_time = rec.time_ms;
    return bl_keyset_add(w->gap, rec.key, rec.key_len);
}

/* A lost LSN: what the stored state says happened there.  Returns 0 or an
 * error; *named is set when some bl_evidence names the LSN. */
static int lost_lsn(bl_walk *w, MDB_txn *txn, uint64_t lsn, int *named)
{
    const bl_evidence *ev = w->ev;
    int rc;

    *named = 0;
    /* the history index names the key */
    bl_shist probe = {lsn, NULL, 0};
    const bl_shist *h = w->sv->hist.n ? bsearch(&probe, w->sv->hist.v, w->sv->hist.n,
                                             sizeof(bl_shist), bl_rv_cmp_hist)
                                   : NULL;
    if (h != NULL) {
        *named = 1;
        if ((rc = bl_keyset_add(w->gap, h->k, h->kn)) != 0)
            return rc;
    }
    /* sessions created there, live from then on */
    for (size_t i = bl_evidence_find(ev->created, ev->ncreated, lsn);
         i < ev->ncreated && ev->created[i].lsn == lsn; i++) {
        const bl_sent *e = ev->created[i].e;
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
            (rc = bl_keyset_add(w->gap, s.key, s.key_len)) != 0)
            return rc;
    }
    /* bindings last changed there */
    for (size_t i = bl_evidence_find(ev->bind, ev->nbind, lsn); i < ev->nbind && ev->bind[i].lsn == lsn;
         i++) {
        const bl_sent *e = ev->bind[i].e;
        bl_bval b, old;
        MDB_val v;
        if (bl_bval_decode(e->v, e->vn, &b) != 0)
            continue;
        *named = 1;
        if ((rc = bl_keyset_add(w->gap, e->k, e->kn)) != 0)
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
                const bl_sent *st = bl_salvage_session(w->sv, sid, sn);
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
            const bl_sent *st = bl_salvage_session(w->sv, b.sid, b.sid_len);
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
    for (size_t i = bl_evidence_find(ev->ended, ev->nended, lsn); i < ev->nended && ev->ended[i].lsn == lsn;
         i++) {
        const bl_sent *e = ev->ended[i].e;
        bl_sval s, st;
        MDB_val v;
        if (bl_sval_decode(e->v, e->vn, &st) != 0)
            continue;
        *named = 1;
        if ((rc = bl_keyset_add(w->gap, st.key, st.key_len)) != 0)
            return rc;
        /* the store says how it ended, unless the state saw it end later */
        if (get_raw(txn, w->y->dbi[BL_DB_SESSIONS], e->k, e->kn, &v) == 0 &&
            bl_sval_decode(v.mv_data, v.mv_size, &s) == 0 && s.ended_lsn >= lsn)
            continue;
        /* its key, if still bound to it, moved on there: to the session
         * created there on that key (a split keeps the generation), else
         * somewhere no bl_evidence says (unbound until a later record says) */
        bl_bval kb;
        if (get_raw(txn, w->y->dbi[BL_DB_BINDINGS], st.key, st.key_len, &v) == 0 &&
            bl_bval_decode(v.mv_data, v.mv_size, &kb) == 0 &&
            same(kb.sid, kb.sid_len, (const char *)e->k, e->kn)) {
            const bl_sent *next = NULL;
            for (size_t j = bl_evidence_find(ev->created, ev->ncreated, lsn);
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
        if ((rc = put_evidence(w, txn, e->k, e->kn, e->v, e->vn)) != 0)
            return rc;
    }
    return 0;
}

static void note_range(bl_walk *w, uint64_t lsn, int lost)
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

/* 1 when the frame's after-images hold whole a session that the state
 * holds with the same creation LSN but another parent or creation time.
 * The state's value was then salvaged after the record that created the
 * session was lost (no parent, no origin, a guessed time:
 * bl_salvage_lost_creation), and this later frame, a re-open on another
 * key, still says what that record did.  Its record may re-derive on the
 * state all the same; its after-images are applied instead, so that what
 * they know reaches the base image at the cut.  In an undamaged log the
 * after-images equal the state and this is never 1. */
static int frame_knows_creation(bl_walk *w, MDB_txn *txn, const bl_srec *sr)
{
    bl_wentry e;
    size_t off = 0;
    if (sr->after == NULL)
        return 0;
    while (bl_wbody_next(sr->after, sr->after_n, &off, &e) == 1) {
        bl_sval ns, os;
        MDB_val v;
        if (e.kind != BL_WE_PUT || e.table != BL_DB_SESSIONS || e.vlen == 0 || e.val[0] != 2 ||
            bl_sval_decode(e.val, e.vlen, &ns) != 0 ||
            get_raw(txn, w->y->dbi[BL_DB_SESSIONS], e.key, e.klen, &v) != 0 ||
            bl_sval_decode(v.mv_data, v.mv_size, &os) != 0)
            continue;
        if (os.created_lsn == ns.created_lsn &&
            (!same(os.parent, os.parent_len, ns.parent, ns.parent_len) ||
             os.created_ms != ns.created_ms))
            return 1;
    }
    return 0;
}

/* One LSN.  0 or an error. */
static int step(bl_walk *w, MDB_txn *txn, bl_tables *t, uint64_t n)
{
    const bl_srec *sr = NULL;
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
    rc = frame_knows_creation(w, txn, sr) ? 1 : bl_replay_one(&w->r, t, sr->p, sr->n, n, &map_full);
    if (rc == 0)
        return 0;
    if (rc != BINDLOG_ECORRUPT && rc != BINDLOG_EVERSION && rc != 1)
        return rc; /* storage */
    w->cut = n;
    rc = sr->after != NULL ? by_image(w, txn, sr) : 1;
    if (rc == 1)
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
                (rc = bl_keyset_add(w->gap, rec.key, rec.key_len)) != 0)
                return rc;
        }
    }
    return 0;
}

/* The base image into the state. */
static int seed(bl_walk *w, MDB_txn *txn)
{
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < w->sv->base[s].n; i++) {
            const bl_sent *e = &w->sv->base[s].v[i];
            int rc = put_raw(txn, w->y->dbi[s ? BL_DB_SESSIONS : BL_DB_BINDINGS], e->k, e->kn, e->v,
                             e->vn);
            if (rc != 0)
                return rc;
        }
    return 0;
}

/* Walk LSNs start+1..stop on the state in w->y.  Chunks of records per
 * write transaction, as replay does. */
int bl_walk_run(bl_walk *w)
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
        /* ... with every session whole (marked where the store keeps a
         * reference: bl_replay_one on tables without a log), since the
         * walk reads and rewrites values of records it may not have */
        t.reflog = t.refbase = 0;
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
int bl_walk_count_live(bl_env *e, uint64_t *lb, uint64_t *ls)
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
