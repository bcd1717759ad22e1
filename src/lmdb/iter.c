/*
 * iter.c -- the LMDB backend's reads: point lookups and iterators over the
 * log, a key's history (the chain of its records), bindings, sessions and
 * a session's lineage.
 *
 * Point reads look the key up in the index of the log's tail, at or below
 * the visible end, and only on a miss in LMDB, on the calling thread's
 * cached read transaction (walenv.h, I3).  An iterator owns one snapshot
 * (snap.c: an LMDB read transaction plus the tail's groups) for its whole
 * life, but holds the map lock only inside each next call: between calls
 * the map may grow, and the bl_cursor underneath re-seeks when it did.
 * Everything a next call returns is copied into the iterator's own
 * buffers, so it stays valid until the next call however the map moves.
 * Arguments were checked above the seam (api.c).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lmdb/limits.h"
#include "lmdb/pagecheck.h"
#include "lmdb/store.h"
#include "lmdb/tail.h"
#include "lmdb/walenv.h"

/* LMDB's iterator; the generic part (ops, handle, kind) comes first. */
typedef struct lmdb_iter {
    bindlog_iter base;
    bl_snap snap;
    int open;                               /* snap is open */
    bl_cursor cur;
    uint64_t to_lsn;                        /* BL_IT_LOG: last LSN wanted */
    unsigned char prefix[8];                /* children: be64 of the parent's created_lsn */
    size_t prefix_len;
    char parent[BINDLOG_ID_MAX + 1];        /* children: the parent's id */
    size_t parent_len;
    uint64_t chain_lsn;                     /* children: the next link of the sibling chain */
    char next_id[BINDLOG_ID_MAX + 1];       /* ancestors: the next session to visit */
    size_t next_len;
    uint64_t steps, max_steps;              /* ancestors: cycle guard for damaged stores */
    uint64_t next_before;                   /* ancestors: the next one's child's created_lsn */
    uint64_t *chain;                        /* history: the key's LSNs, newest first */
    size_t nchain;                          /* history: LSNs not handed out yet */
    bl_rec_buf rb;                          /* records handed to the caller */
} lmdb_iter;

static void copy_str(char *dst, const char *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ---- point reads ---------------------------------------------------------- */

/* Fill a binding from its stored value; ENOTFOUND for a tombstone. */
static int fill_binding(bindlog_binding *out, const void *v, size_t n)
{
    bl_bval b;
    int rc = bl_bval_decode(v, n, &b);
    if (rc != 0)
        return rc;
    copy_str(out->session_id, b.sid, b.sid_len);
    out->generation = b.generation;
    out->lsn = b.lsn;
    out->updated_ms = b.updated_ms;
    out->last_activity_ms = b.last_activity_ms;
    return b.sid_len == 0 ? BINDLOG_ENOTFOUND : 0; /* a tombstone routes nowhere */
}

static int tail_binding(void *ctx, const bl_tver *v) { return fill_binding(ctx, v->val, v->vlen); }

int bl_lmdb_get(bindlog *h, const char *key, size_t n, bindlog_binding *out)
{
    MDB_txn *txn;
    MDB_val k, v;
    uint64_t bound;
    int rc;

    /* every field is set below; no need to clear the 560-byte struct */
    out->session_id[0] = '\0';
    out->generation = out->lsn = 0;
    out->updated_ms = 0;
    out->last_activity_ms = 0;
    copy_str(out->key, key, n);
    if ((rc = bl_wal_read_bound(h->e, &bound)) != 0)
        return rc;
    if (bl_tail_get(&h->e->wal->tail, BL_DB_BINDINGS, key, n, bound, tail_binding, out, &rc))
        return rc;
    if ((rc = bl_read_begin(h->e, &txn)) != 0)
        return rc;
    k = (MDB_val){n, (void *)key};
    rc = bl_pc_get(h->e, txn, BL_DB_BINDINGS, &k, &v);
    if (rc == 0)
        rc = fill_binding(out, v.mv_data, v.mv_size);
    bl_read_end(h->e, txn);
    return rc;
}

/* A reference value's record for bl_lmdb_session_get: the tail (up to the
 * read's bound), else LMDB, in a transaction begun only after the tail was
 * asked (the index drops a group only once LMDB holds it). */
typedef struct sess_get {
    bl_env *e;
    uint64_t bound;
    MDB_txn *txn;
    unsigned char *rb;
    size_t rcap;
} sess_get;

static int sess_get_ref(void *ctx, int what, uint64_t lsn, const char *id, size_t id_len,
                        const void **v, size_t *n)
{
    sess_get *sg = ctx;
    unsigned char kb[8];
    size_t len = 0;
    int rc;

    bl_put64be(kb, lsn);
    if (what == BL_REF_RECORD) {
        rc = bl_wal_tail_get(sg->e, BL_DB_LOG, kb, 8, sg->bound, &sg->rb, &sg->rcap, &len);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            *v = sg->rb;
            *n = len;
            return 0;
        }
    }
    if (sg->txn == NULL && (rc = bl_read_begin(sg->e, &sg->txn)) != 0) {
        sg->txn = NULL;
        return rc;
    }
    MDB_val k = {8, kb}, val;
    if (what == BL_REF_BASE)
        k = (MDB_val){id_len, (void *)id};
    if ((rc = bl_pc_get(sg->e, sg->txn, what == BL_REF_BASE ? BL_DB_BASE_SESSIONS : BL_DB_LOG, &k,
                        &val)) != 0)
        return rc;
    *v = val.mv_data;
    *n = val.mv_size;
    return 0;
}

int bl_lmdb_session_get(bindlog *h, const char *id, size_t n, bindlog_session *out,
                        void *origin_buf, size_t origin_cap)
{
    sess_get sg = {h->e, 0, NULL, NULL, 0};
    unsigned char *vb = NULL;
    size_t vcap = 0, vlen = 0;
    const void *val = NULL;
    bl_sval sv;
    int rc;

    if ((rc = bl_wal_read_bound(h->e, &sg.bound)) != 0)
        return rc;
    rc = bl_wal_tail_get(h->e, BL_DB_SESSIONS, id, n, sg.bound, &vb, &vcap, &vlen);
    if (rc == 1) {
        val = vb;
        rc = 0;
    } else if (rc == 0 && (rc = bl_read_begin(h->e, &sg.txn)) == 0) {
        MDB_val k = {n, (void *)id}, v;
        rc = bl_pc_get(h->e, sg.txn, BL_DB_SESSIONS, &k, &v);
        val = v.mv_data;
        vlen = v.mv_size;
    } else {
        sg.txn = NULL;
    }
    if (rc == 0)
        rc = bl_sval_read(val, vlen, id, n, sess_get_ref, &sg, &sv);
    if (rc == 0)
        bl_session_fill(out, id, n, &sv, origin_buf, origin_cap);
    if (sg.txn != NULL)
        bl_read_end(h->e, sg.txn);
    free(sg.rb);
    free(vb);
    return rc;
}

/* ---- iterators ------------------------------------------------------------ */

static void iter_close(bindlog_iter *base)
{
    lmdb_iter *it = (lmdb_iter *)base;
    bl_map_rdlock(it->base.h->e);
    bl_cursor_close(&it->cur);
    if (it->open)
        bl_snap_close(&it->snap); /* unlocks the map */
    else
        bl_map_unlock(it->base.h->e);
    bl_rec_buf_free(&it->rb);
    free(it->chain);
    free(it);
}

static int next_log(lmdb_iter *it, bindlog_record *rec)
{
    MDB_val k, v;
    int rc = bl_cursor_next(&it->cur, &k, &v);
    if (rc <= 0)
        return rc;
    if (k.mv_size != 8)
        return BINDLOG_ECORRUPT;
    uint64_t lsn = bl_get64be(k.mv_data);
    if (lsn > it->to_lsn) {
        it->cur.state = 2;
        return 0;
    }
    return bl_rec_emit(&it->rb, v.mv_data, v.mv_size, lsn, rec);
}

/* A key's history is the chain of its records (format 3): the binding
 * names the key's last record, each record the one before it (prev_lsn).
 * The chain runs newest first and the iterator hands records out oldest
 * first, so start_history() walks it once and keeps the LSNs (8 bytes a
 * record); next_history() reads them back from the same snapshot. */
static int next_history(lmdb_iter *it, bindlog_record *rec)
{
    MDB_val v;
    unsigned char lk[8];
    int rc;

    if (it->nchain == 0)
        return 0;
    uint64_t lsn = it->chain[--it->nchain];
    bl_put64be(lk, lsn);
    rc = bl_snap_get(&it->snap, BL_DB_LOG, lk, 8, &v);
    if (rc == BINDLOG_ENOTFOUND)
        rc = BINDLOG_ECORRUPT; /* it was there when the chain was walked */
    if (rc != 0)
        return rc;
    return bl_rec_emit(&it->rb, v.mv_data, v.mv_size, lsn, rec);
}

/* Walk the key's chain from its binding back to its first retained record. */
static int start_history(lmdb_iter *it, const char *key, size_t n)
{
    bl_env *e = it->base.h->e;
    MDB_val v;
    bl_bval b;
    bl_record r;
    unsigned char lk[8];
    size_t cap = 0;
    int rc;

    bl_map_rdlock(e);
    rc = bl_snap_get(&it->snap, BL_DB_BINDINGS, key, n, &v);
    if (rc == 0)
        rc = bl_bval_decode(v.mv_data, v.mv_size, &b);
    uint64_t lsn = rc == 0 ? b.lsn : 0;
    if (rc == BINDLOG_ENOTFOUND)
        rc = 0; /* a key never seen has no history */
    while (rc == 0 && lsn != 0) {
        bl_put64be(lk, lsn);
        rc = bl_snap_get(&it->snap, BL_DB_LOG, lk, 8, &v);
        if (rc == BINDLOG_ENOTFOUND) {
            rc = 0; /* compacted away: the retained history ends here */
            break;
        }
        if (rc == 0)
            rc = bl_record_decode(v.mv_data, v.mv_size, &r);
        if (rc != 0)
            break;
        if (r.lsn != lsn || r.key_len != n || memcmp(r.key, key, n) != 0) {
            rc = bl_err_set(BINDLOG_ECORRUPT, "the history chain of the key leads to LSN %llu, "
                                              "a record of another key or position",
                            (unsigned long long)lsn);
            break;
        }
        if (r.version < 2) {
            rc = bl_err_set(BINDLOG_ECORRUPT, "the record at LSN %llu is of version %u, "
                                              "which does not chain its key's history",
                            (unsigned long long)lsn, r.version);
            break;
        }
        if (it->nchain == cap) {
            size_t nc = cap ? 2 * cap : 16;
            uint64_t *p = realloc(it->chain, nc * sizeof(*p));
            if (p == NULL) {
                rc = BINDLOG_ENOMEM;
                break;
            }
            it->chain = p;
            cap = nc;
        }
        it->chain[it->nchain++] = lsn;
        lsn = r.prev_lsn; /* below lsn (the decoder checks): the walk ends */
    }
    bl_map_unlock(e);
    return rc;
}

static int next_record(bindlog_iter *base, bindlog_record *rec)
{
    lmdb_iter *it = (lmdb_iter *)base;
    int rc;
    bl_map_rdlock(it->base.h->e);
    rc = it->base.kind == BL_IT_LOG ? next_log(it, rec) : next_history(it, rec);
    bl_map_unlock(it->base.h->e);
    return rc;
}

/* ---- bindings ------------------------------------------------------------ */

static int next_binding(bindlog_iter *base, bindlog_binding *out)
{
    lmdb_iter *it = (lmdb_iter *)base;
    MDB_val k, v;
    bl_bval b;
    int rc;

    bl_map_rdlock(it->base.h->e);
    rc = bl_cursor_next(&it->cur, &k, &v);
    if (rc > 0 && !bl_valid_key(k.mv_data, k.mv_size))
        rc = BINDLOG_ECORRUPT;
    if (rc > 0 && (rc = bl_bval_decode(v.mv_data, v.mv_size, &b)) == 0) {
        memset(out, 0, sizeof(*out));
        copy_str(out->key, k.mv_data, k.mv_size);
        copy_str(out->session_id, b.sid, b.sid_len);
        out->generation = b.generation;
        out->lsn = b.lsn;
        out->updated_ms = b.updated_ms;
        out->last_activity_ms = b.last_activity_ms;
        rc = 1;
    }
    bl_map_unlock(it->base.h->e);
    return rc;
}

/* ---- sessions ------------------------------------------------------------ */

/* Look up one session by id and fill the caller's struct: 1, or a
 * negative code (*sv and *out are filled only on 1). */
static int emit_session(lmdb_iter *it, const void *id, size_t id_len, bindlog_session *out,
                        void *buf, size_t cap, bl_sval *sv)
{
    MDB_val v;
    int rc = bl_snap_get(&it->snap, BL_DB_SESSIONS, id, id_len, &v);
    if (rc == BINDLOG_ENOTFOUND && it->base.kind != BL_IT_ANCESTORS)
        return BINDLOG_ECORRUPT; /* an index names a session that is not there */
    if (rc == 0)
        rc = bl_sval_read(v.mv_data, v.mv_size, id, id_len, bl_snap_ref, &it->snap, sv);
    if (rc != 0)
        return rc < 0 ? rc : BINDLOG_EIO; /* both say 0 or a negative code */
    bl_session_fill(out, id, id_len, sv, buf, cap);
    return 1;
}

/*
 * The next child of a children iterator along the parent's sibling chain
 * (formats 6 and 7): the record at it->chain_lsn created it, and its value names
 * the record of the next older sibling.  1 with the child filled in; 0 once
 * the chain reaches a record the log no longer holds (compacted: the
 * children table has that child and every older one); or an error.  A
 * record that does not create a child of the parent, or a child whose
 * value says it was created elsewhere, is BINDLOG_ECORRUPT.
 */
static int next_linked_child(lmdb_iter *it, bindlog_session *out, void *buf, size_t cap,
                             bl_sval *sv)
{
    const void *rv;
    size_t rn;
    bl_record rec;
    uint64_t lsn = it->chain_lsn;
    int rc = bl_snap_ref(&it->snap, BL_REF_RECORD, lsn, NULL, 0, &rv, &rn);

    if (rc == BINDLOG_ENOTFOUND) {
        it->chain_lsn = 0;
        return 0;
    }
    if (rc == 0 && (rc = bl_record_decode(rv, rn, &rec)) == BINDLOG_EVERSION)
        rc = BINDLOG_ECORRUPT;
    if (rc == BINDLOG_ECORRUPT)
        return bl_err_set(rc,
                          "session '%s' has its child created at LSN %" PRIu64
                          ", whose record is damaged",
                          it->parent, lsn);
    if (rc != 0)
        return rc;
    if ((rec.type != BINDLOG_EVENT_SPLIT && rec.type != BINDLOG_EVENT_NEW_SESSION) ||
        rec.other_len != it->parent_len || memcmp(rec.other, it->parent, it->parent_len) != 0)
        return bl_err_set(BINDLOG_ECORRUPT,
                          "session '%s' names the record at LSN %" PRIu64
                          " as the creation of a child, which it is not",
                          it->parent, lsn);
    if ((rc = emit_session(it, rec.sid, rec.sid_len, out, buf, cap, sv)) < 0)
        return rc;
    if (sv->created_lsn != lsn || sv->sibling_lsn >= lsn)
        return bl_err_set(BINDLOG_ECORRUPT,
                          "session '%s', the child of '%s' created at LSN %" PRIu64
                          ", says otherwise",
                          out->session_id, it->parent, lsn);
    it->chain_lsn = sv->sibling_lsn;
    return 1;
}

static int next_session(bindlog_iter *base, bindlog_session *out, void *buf, size_t cap)
{
    lmdb_iter *it = (lmdb_iter *)base;
    MDB_val k, v;
    bl_sval sv;
    int rc;

    bl_map_rdlock(it->base.h->e);
    switch (it->base.kind) {
    case BL_IT_SESSIONS:
        rc = bl_cursor_next(&it->cur, &k, &v);
        if (rc > 0 && !bl_valid_id(k.mv_data, k.mv_size))
            rc = BINDLOG_ECORRUPT;
        if (rc > 0 && (rc = bl_sval_read(v.mv_data, v.mv_size, k.mv_data, k.mv_size,
                                         bl_snap_ref, &it->snap, &sv)) == 0) {
            bl_session_fill(out, k.mv_data, k.mv_size, &sv, buf, cap);
            rc = 1;
        }
        break;
    case BL_IT_CHILDREN:
        if (it->prefix_len == 0) { /* the parent does not exist */
            rc = 0;
            break;
        }
        if (it->chain_lsn != 0 && (rc = next_linked_child(it, out, buf, cap, &sv)) != 0)
            break; /* one from the sibling chain, or an error */
        rc = bl_cursor_next(&it->cur, &k, &v);
        if (rc > 0 && (k.mv_size <= it->prefix_len ||
                       memcmp(k.mv_data, it->prefix, it->prefix_len) != 0)) {
            it->cur.state = 2;
            rc = 0;
        }
        if (rc > 0)
            rc = emit_session(it, (const char *)k.mv_data + it->prefix_len,
                              k.mv_size - it->prefix_len, out, buf, cap, &sv);
        if (rc > 0 && (sv.parent_len != it->parent_len ||
                       memcmp(sv.parent, it->parent, it->parent_len) != 0))
            rc = bl_err_set(BINDLOG_ECORRUPT,
                            "the children table names session '%s' as a child of '%s', "
                            "whose parent it is not",
                            out->session_id, it->parent);
        break;
    default: /* BL_IT_ANCESTORS */
        if (it->next_len == 0) {
            rc = 0;
            break;
        }
        if (++it->steps > it->max_steps) {
            rc = BINDLOG_ECORRUPT; /* a parent cycle: the store is damaged */
            break;
        }
        rc = emit_session(it, it->next_id, it->next_len, out, buf, cap, &sv);
        /* the lineage ends at a parent the store does not hold, or that
         * was created after its child: a session re-created under a lost
         * parent's id after bindlog_recover (bl_child_indexed) */
        if (rc == BINDLOG_ENOTFOUND ||
            (rc > 0 && !bl_child_indexed(it->next_before, sv.created_lsn))) {
            it->next_len = 0;
            rc = 0;
        }
        if (rc > 0) {
            copy_str(it->next_id, sv.parent, sv.parent_len);
            it->next_len = sv.parent_len;
            it->next_before = sv.created_lsn;
        }
        break;
    }
    bl_map_unlock(it->base.h->e);
    return rc;
}

static const bl_iter_ops lmdb_iter_ops = {next_record, next_binding, next_session, iter_close};

/* Position an ancestors iterator on the session's parent. */
static int start_ancestors(lmdb_iter *it, const char *id, size_t n)
{
    bl_env *e = it->base.h->e;
    bl_sval sv;
    int rc;

    bl_map_rdlock(e);
    rc = bl_snap_session(&it->snap, id, n, &sv);
    if (rc == 0) {
        copy_str(it->next_id, sv.parent, sv.parent_len);
        it->next_len = sv.parent_len;
        it->next_before = sv.created_lsn;
        it->max_steps = bl_snap_entries(&it->snap, BL_DB_SESSIONS);
    }
    bl_map_unlock(e);
    return rc;
}

/* Find the parent of a children iterator: its youngest child starts the
 * sibling chain, and its created_lsn is the children table's key prefix.  A session that does not exist has no children (prefix_len
 * stays 0). Caller holds the map lock. */
static int start_children(lmdb_iter *it, const char *id, size_t n)
{
    MDB_val v;
    bl_sval sv;
    int rc = bl_snap_get(&it->snap, BL_DB_SESSIONS, id, n, &v);
    if (rc == BINDLOG_ENOTFOUND)
        return 0;
    if (rc == 0) /* only its created_lsn: no need to resolve */
        rc = bl_sval_decode_any(v.mv_data, v.mv_size, &sv);
    if (rc != 0)
        return rc;
    copy_str(it->parent, id, n);
    it->parent_len = n;
    it->chain_lsn = sv.child_lsn;
    bl_put64be(it->prefix, sv.created_lsn);
    it->prefix_len = 8;
    return 0;
}

int bl_lmdb_iter(bindlog *h, int kind, const char *arg, size_t arg_len, uint64_t from,
                 uint64_t to, bindlog_iter **out)
{
    bl_env *e = h->e;
    unsigned char seek[BINDLOG_KEY_MAX + 1];
    size_t seek_len = 0;
    int db = -1;
    lmdb_iter *it;
    int rc;

    *out = NULL;
    switch (kind) {
    case BL_IT_LOG:
        db = BL_DB_LOG;
        bl_put64be(seek, from);
        seek_len = 8;
        break;
    case BL_IT_CHILDREN:
        /* entries of one parent: the be64 of its created_lsn (start_children) */
        db = BL_DB_CHILDREN;
        break;
    case BL_IT_BINDINGS:
        db = BL_DB_BINDINGS;
        break;
    case BL_IT_SESSIONS:
        db = BL_DB_SESSIONS;
        break;
    default: /* BL_IT_ANCESTORS: lookups, no cursor */
        break;
    }

    it = calloc(1, sizeof(*it));
    if (it == NULL)
        return BINDLOG_ENOMEM;
    it->base.ops = &lmdb_iter_ops;
    it->base.h = h;
    it->base.kind = kind;
    it->to_lsn = to;
    if ((rc = bl_snap_open(e, &it->snap, 1)) != 0) {
        free(it);
        return rc;
    }
    it->open = 1;
    if (kind == BL_IT_CHILDREN && (rc = start_children(it, arg, arg_len)) == 0) {
        memcpy(seek, it->prefix, it->prefix_len);
        seek_len = it->prefix_len;
        if (seek_len == 0)
            db = -1; /* no such parent: nothing to iterate */
    }
    if (rc == 0 && db >= 0)
        rc = bl_pc_guard_iter(e, it->snap.txn, kind, seek, seek_len, to); /* what the cursor will read */
    if (rc == 0 && db >= 0)
        rc = bl_cursor_open_snap(&it->cur, &it->snap, db, seek, seek_len);
    bl_map_unlock(e);
    if (rc == 0 && kind == BL_IT_ANCESTORS)
        rc = start_ancestors(it, arg, arg_len);
    if (rc == 0 && kind == BL_IT_HISTORY)
        rc = start_history(it, arg, arg_len);
    if (rc != 0) {
        iter_close(&it->base);
        return rc;
    }
    *out = &it->base;
    return 0;
}
