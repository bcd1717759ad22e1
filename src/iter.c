/*
 * iter.c -- iterators over the log, a key's history, bindings and sessions,
 * and a session's lineage.
 *
 * An iterator owns one read transaction (its snapshot) for its whole life,
 * but holds the map lock only inside each next call: between calls the map
 * may grow, and the bl_cursor underneath re-seeks when it did.  Everything a
 * next call returns is copied into the iterator's own buffers, so it stays
 * valid until the next call however the map moves.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "store.h"

enum { IT_LOG = 1, IT_HISTORY, IT_BINDINGS, IT_SESSIONS, IT_CHILDREN, IT_ANCESTORS };

struct bindlog_iter {
    bindlog *h;
    int kind;
    MDB_txn *txn;
    bl_cursor cur;
    uint64_t to_lsn;                        /* IT_LOG: last LSN wanted */
    unsigned char prefix[BINDLOG_KEY_MAX + 1]; /* IT_HISTORY key 0x00, IT_CHILDREN parent 0x00 */
    size_t prefix_len;
    char next_id[BINDLOG_ID_MAX + 1];       /* IT_ANCESTORS: the next session to visit */
    size_t next_len;
    uint64_t steps, max_steps;              /* IT_ANCESTORS: cycle guard for damaged stores */
    /* copies handed to the caller */
    char key[BINDLOG_KEY_MAX + 1], sid[BINDLOG_ID_MAX + 1], other[BINDLOG_ID_MAX + 1];
    char reason[BINDLOG_REASON_MAX + 1];
    unsigned char *origin;
    size_t origin_cap;
};

static int iter_new(bindlog *h, int kind, MDB_dbi dbi, const void *seek, size_t seek_len,
                    bindlog_iter **out)
{
    bindlog_iter *it;
    int rc;

    *out = NULL;
    it = calloc(1, sizeof(*it));
    if (it == NULL)
        return BINDLOG_ENOMEM;
    it->h = h;
    it->kind = kind;
    if ((rc = bl_read_begin_fresh(h->e, &it->txn)) != 0) {
        free(it);
        return rc;
    }
    if (dbi != 0)
        rc = bl_cursor_open(&it->cur, h->e, it->txn, dbi, seek, seek_len);
    bl_map_unlock(h->e);
    if (rc != 0) {
        bindlog_iter_close(it);
        return rc;
    }
    *out = it;
    return 0;
}

void bindlog_iter_close(bindlog_iter *it)
{
    if (it == NULL)
        return;
    bl_map_rdlock(it->h->e);
    bl_cursor_close(&it->cur);
    if (it->txn != NULL)
        mdb_txn_abort(it->txn);
    bl_map_unlock(it->h->e);
    free(it->origin);
    free(it);
}

static void copy_str(char *dst, const char *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ---- records ------------------------------------------------------------ */

int bindlog_log_iter(bindlog *s, uint64_t from_lsn, uint64_t to_lsn, bindlog_iter **out)
{
    unsigned char k[8];
    int rc;

    if (out != NULL)
        *out = NULL;
    if (s == NULL || out == NULL)
        return BINDLOG_EINVAL;
    bl_put64be(k, from_lsn);
    rc = iter_new(s, IT_LOG, s->e->dbi[BL_DB_LOG], k, sizeof(k), out);
    if (rc == 0)
        (*out)->to_lsn = to_lsn;
    return rc;
}

int bindlog_history_iter(bindlog *s, const char *key, bindlog_iter **out)
{
    size_t n;
    int rc;

    if (out != NULL)
        *out = NULL;
    if (s == NULL || key == NULL || out == NULL)
        return BINDLOG_EINVAL;
    n = strnlen(key, BINDLOG_KEY_MAX + 1);
    if (!bl_valid_key(key, n))
        return BINDLOG_EINVAL;
    unsigned char prefix[BINDLOG_KEY_MAX + 1];
    memcpy(prefix, key, n);
    prefix[n] = 0;
    rc = iter_new(s, IT_HISTORY, s->e->dbi[BL_DB_HISTORY], prefix, n + 1, out);
    if (rc == 0) {
        memcpy((*out)->prefix, prefix, n + 1);
        (*out)->prefix_len = n + 1;
    }
    return rc;
}

/* Decode a log value found under `lsn` into the caller's record. */
static int emit_record(bindlog_iter *it, const MDB_val *v, uint64_t lsn, bindlog_record *rec)
{
    bl_record r;
    int rc = bl_record_decode(v->mv_data, v->mv_size, &r);
    if (rc != 0)
        return rc;
    if (r.lsn != lsn)
        return BINDLOG_ECORRUPT; /* a record stored under another LSN's key */
    if (r.origin_len > it->origin_cap) {
        unsigned char *p = realloc(it->origin, r.origin_len);
        if (p == NULL)
            return BINDLOG_ENOMEM;
        it->origin = p;
        it->origin_cap = r.origin_len;
    }
    copy_str(it->key, r.key, r.key_len);
    copy_str(it->sid, r.sid, r.sid_len);
    copy_str(it->other, r.other, r.other_len);
    copy_str(it->reason, r.reason, r.reason_len);
    if (r.origin_len)
        memcpy(it->origin, r.origin, r.origin_len);
    rec->lsn = r.lsn;
    rec->type = (int)r.type;
    rec->time_ms = r.time_ms;
    rec->generation = r.generation;
    rec->key = it->key;
    rec->key_len = r.key_len;
    rec->session_id = it->sid;
    rec->other_id = it->other;
    rec->reason = it->reason;
    rec->origin = r.origin_len ? it->origin : NULL;
    rec->origin_len = r.origin_len;
    rec->origin_present = (r.flags & BL_REC_ORIGIN) != 0;
    return 1;
}

static int next_log(bindlog_iter *it, bindlog_record *rec)
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
    return emit_record(it, &v, lsn, rec);
}

static int next_history(bindlog_iter *it, bindlog_record *rec)
{
    MDB_val k, v;
    int rc;

    for (;;) {
        rc = bl_cursor_next(&it->cur, &k, &v);
        if (rc <= 0)
            return rc;
        if (k.mv_size != it->prefix_len + 8 || memcmp(k.mv_data, it->prefix, it->prefix_len)) {
            it->cur.state = 2;
            return 0;
        }
        uint64_t lsn = bl_get64be((const unsigned char *)k.mv_data + it->prefix_len);
        unsigned char lk[8];
        bl_put64be(lk, lsn);
        MDB_val key = {8, lk};
        rc = mdb_get(it->txn, it->h->e->dbi[BL_DB_LOG], &key, &v);
        if (rc == MDB_NOTFOUND)
            continue; /* compacted away: its history entry goes with it soon */
        if (rc != 0)
            return bl_mdb_error(rc);
        return emit_record(it, &v, lsn, rec);
    }
}

int bindlog_iter_next_record(bindlog_iter *it, bindlog_record *rec)
{
    int rc;
    if (it == NULL || rec == NULL || (it->kind != IT_LOG && it->kind != IT_HISTORY))
        return BINDLOG_EINVAL;
    bl_map_rdlock(it->h->e);
    rc = it->kind == IT_LOG ? next_log(it, rec) : next_history(it, rec);
    bl_map_unlock(it->h->e);
    return rc;
}

/* ---- bindings ------------------------------------------------------------ */

int bindlog_bindings_iter(bindlog *s, bindlog_iter **out)
{
    if (out != NULL)
        *out = NULL;
    if (s == NULL || out == NULL)
        return BINDLOG_EINVAL;
    return iter_new(s, IT_BINDINGS, s->e->dbi[BL_DB_BINDINGS], NULL, 0, out);
}

int bindlog_iter_next_binding(bindlog_iter *it, bindlog_binding *out)
{
    MDB_val k, v;
    bl_bval b;
    int rc;

    if (it == NULL || out == NULL || it->kind != IT_BINDINGS)
        return BINDLOG_EINVAL;
    bl_map_rdlock(it->h->e);
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
        rc = 1;
    }
    bl_map_unlock(it->h->e);
    return rc;
}

/* ---- sessions ------------------------------------------------------------ */

int bindlog_sessions_iter(bindlog *s, bindlog_iter **out)
{
    if (out != NULL)
        *out = NULL;
    if (s == NULL || out == NULL)
        return BINDLOG_EINVAL;
    return iter_new(s, IT_SESSIONS, s->e->dbi[BL_DB_SESSIONS], NULL, 0, out);
}

static int check_id(const char *id, size_t *n)
{
    if (id == NULL)
        return BINDLOG_EINVAL;
    *n = strnlen(id, BINDLOG_ID_MAX + 1);
    return bl_valid_id(id, *n) ? 0 : BINDLOG_EINVAL;
}

int bindlog_children_iter(bindlog *s, const char *session_id, bindlog_iter **out)
{
    unsigned char prefix[BINDLOG_ID_MAX + 1];
    size_t n;
    int rc;

    if (out != NULL)
        *out = NULL;
    if (s == NULL || out == NULL || check_id(session_id, &n) != 0)
        return BINDLOG_EINVAL;
    memcpy(prefix, session_id, n);
    prefix[n] = 0;
    rc = iter_new(s, IT_CHILDREN, s->e->dbi[BL_DB_CHILDREN], prefix, n + 1, out);
    if (rc == 0) {
        memcpy((*out)->prefix, prefix, n + 1);
        (*out)->prefix_len = n + 1;
    }
    return rc;
}

int bindlog_ancestors_iter(bindlog *s, const char *session_id, bindlog_iter **out)
{
    MDB_val k, v;
    MDB_stat st;
    bl_sval sv;
    size_t n;
    int rc;

    if (out != NULL)
        *out = NULL;
    if (s == NULL || out == NULL || check_id(session_id, &n) != 0)
        return BINDLOG_EINVAL;
    if ((rc = iter_new(s, IT_ANCESTORS, 0, NULL, 0, out)) != 0)
        return rc;
    bindlog_iter *it = *out;
    bl_map_rdlock(s->e);
    k = (MDB_val){n, (void *)session_id};
    rc = bl_mdb_error(mdb_get(it->txn, s->e->dbi[BL_DB_SESSIONS], &k, &v));
    if (rc == 0)
        rc = bl_sval_decode(v.mv_data, v.mv_size, &sv);
    if (rc == 0) {
        copy_str(it->next_id, sv.parent, sv.parent_len);
        it->next_len = sv.parent_len;
        rc = bl_mdb_error(mdb_stat(it->txn, s->e->dbi[BL_DB_SESSIONS], &st));
        it->max_steps = st.ms_entries;
    }
    bl_map_unlock(s->e);
    if (rc != 0) {
        bindlog_iter_close(it);
        *out = NULL;
    }
    return rc;
}

/* Look up one session by id and fill the caller's struct. */
static int emit_session(bindlog_iter *it, const void *id, size_t id_len, bindlog_session *out,
                        void *buf, size_t cap, bl_sval *sv)
{
    MDB_val k = {id_len, (void *)id}, v;
    int rc = mdb_get(it->txn, it->h->e->dbi[BL_DB_SESSIONS], &k, &v);
    if (rc == MDB_NOTFOUND)
        return BINDLOG_ECORRUPT; /* an index names a session that is not there */
    if (rc != 0)
        return bl_mdb_error(rc);
    if ((rc = bl_sval_decode(v.mv_data, v.mv_size, sv)) != 0)
        return rc;
    bl_session_fill(out, id, id_len, sv, buf, cap);
    return 1;
}

int bindlog_iter_next_session(bindlog_iter *it, bindlog_session *out, void *buf, size_t cap)
{
    MDB_val k, v;
    bl_sval sv;
    int rc;

    if (it == NULL || out == NULL || (buf == NULL && cap != 0) ||
        (it->kind != IT_SESSIONS && it->kind != IT_CHILDREN && it->kind != IT_ANCESTORS))
        return BINDLOG_EINVAL;
    bl_map_rdlock(it->h->e);
    switch (it->kind) {
    case IT_SESSIONS:
        rc = bl_cursor_next(&it->cur, &k, &v);
        if (rc > 0 && !bl_valid_id(k.mv_data, k.mv_size))
            rc = BINDLOG_ECORRUPT;
        if (rc > 0 && (rc = bl_sval_decode(v.mv_data, v.mv_size, &sv)) == 0) {
            bl_session_fill(out, k.mv_data, k.mv_size, &sv, buf, cap);
            rc = 1;
        }
        break;
    case IT_CHILDREN:
        rc = bl_cursor_next(&it->cur, &k, &v);
        if (rc > 0 && (k.mv_size <= it->prefix_len ||
                       memcmp(k.mv_data, it->prefix, it->prefix_len) != 0)) {
            it->cur.state = 2;
            rc = 0;
        }
        if (rc > 0)
            rc = emit_session(it, (const char *)k.mv_data + it->prefix_len,
                              k.mv_size - it->prefix_len, out, buf, cap, &sv);
        break;
    default: /* IT_ANCESTORS */
        if (it->next_len == 0) {
            rc = 0;
            break;
        }
        if (++it->steps > it->max_steps) {
            rc = BINDLOG_ECORRUPT; /* a parent cycle: the store is damaged */
            break;
        }
        rc = emit_session(it, it->next_id, it->next_len, out, buf, cap, &sv);
        if (rc > 0) {
            copy_str(it->next_id, sv.parent, sv.parent_len);
            it->next_len = sv.parent_len;
        }
        break;
    }
    bl_map_unlock(it->h->e);
    return rc;
}
