/*
 * etcd_read.c -- the etcd backend's reads: point reads, iterators,
 * statistics, the digest, lsn_at_time, and bindlog_wait's watch
 * (docs/scale-out.md, "Reads").  The write path is backend_etcd.c.
 *
 * Point reads are one linearizable range each.  Everything that reads
 * more than one key first reads the meta records (linearizable), then
 * the rest at that revision, so that it sees one snapshot.
 */
#define _GNU_SOURCE
#include "etcd/etcd_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- point reads ------------------------------------------------------------------ */

static void copy_str(char *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
    dst[n] = '\0';
}

int bl_es_op_get(bindlog *h, const char *key, size_t n, bindlog_binding *out)
{
    bl_etcd_kvs kvs;
    bl_bval b;
    int rc;

    memset(out, 0, sizeof(*out));
    copy_str(out->key, key, n);
    rc = bl_es_get(bl_es_of(h), BL_ES_BINDINGS, key, n, 0, &kvs);
    if (rc == 0 && (rc = bl_bval_decode(kvs.kvs[0].value, kvs.kvs[0].value_len, &b)) == 0) {
        copy_str(out->session_id, b.sid, b.sid_len);
        out->generation = b.generation;
        out->lsn = b.lsn;
        out->updated_ms = b.updated_ms;
        out->last_activity_ms = b.last_activity_ms;
        if (b.sid_len == 0)
            rc = BINDLOG_ENOTFOUND;
    }
    bl_etcd_kvs_free(&kvs);
    return bl_es_error(rc, BINDLOG_EIO);
}

int bl_es_op_session_get(bindlog *h, const char *id, size_t n, bindlog_session *out,
                            void *buf, size_t cap)
{
    bl_etcd_kvs kvs;
    bl_sval sv;
    int rc = bl_es_get(bl_es_of(h), BL_ES_SESSIONS, id, n, 0, &kvs);
    if (rc == 0 && (rc = bl_sval_decode(kvs.kvs[0].value, kvs.kvs[0].value_len, &sv)) == 0)
        bl_session_fill(out, id, n, &sv, buf, cap);
    bl_etcd_kvs_free(&kvs);
    return bl_es_error(rc, BINDLOG_EIO);
}

/* ---- iterators ------------------------------------------------------------------ */

/*
 * An iterator reads at the revision of a linearizable meta read made when
 * it opened.  If etcd compacts that revision while the iterator lives, its
 * next page fails with BINDLOG_EBUSY: open a new one.
 */
typedef struct etcd_iter {
    bindlog_iter base;
    bl_estore *st;
    int64_t rev;
    bl_es_pager pg;
    int have_pg;
    int empty;                        /* a log range from > to: nothing */
    char next_id[BINDLOG_ID_MAX + 1]; /* ancestors: the next session */
    size_t next_len;
    uint64_t steps, max_steps;
    uint64_t next_before; /* ancestors: the next one's child's created_lsn */
    bl_rec_buf rb;   /* records handed to the caller */
    bl_etcd_kvs one; /* the last single-key read handed out */
} etcd_iter;

static void iter_close(bindlog_iter *base)
{
    etcd_iter *it = (etcd_iter *)base;
    if (it->have_pg)
        bl_es_pager_close(&it->pg);
    bl_etcd_kvs_free(&it->one);
    bl_rec_buf_free(&it->rb);
    free(it);
}

static int page_err(int rc) { return rc < 0 ? bl_es_error(rc, BINDLOG_EBUSY) : rc; }

static int next_record(bindlog_iter *base, bindlog_record *rec)
{
    etcd_iter *it = (etcd_iter *)base;
    const bl_etcd_kv *kv;
    int rc;
    if (it->empty)
        return 0;
    for (;;) {
        if ((rc = bl_es_pager_next(&it->pg, &kv)) <= 0)
            return page_err(rc);
        size_t n;
        const unsigned char *name;
        uint64_t lsn;
        if (it->base.kind == BL_IT_LOG) {
            name = bl_es_key_name(it->st, BL_ES_LOG, kv, &n);
            if (name == NULL || bl_es_lsn_parse(name, n, &lsn) != 0)
                return BINDLOG_ECORRUPT;
            return bl_rec_emit(&it->rb, kv->value, kv->value_len, lsn, rec);
        }
        /* history: name = key 0x00 lsn */
        name = bl_es_key_name(it->st, BL_ES_HISTORY, kv, &n);
        if (name == NULL || n < BL_ES_LSN_DIGITS + 1 ||
            bl_es_lsn_parse(name + n - BL_ES_LSN_DIGITS, BL_ES_LSN_DIGITS, &lsn) != 0)
            return BINDLOG_ECORRUPT;
        char d[BL_ES_LSN_DIGITS];
        bl_es_lsn_format(lsn, d);
        bl_etcd_kvs_free(&it->one); /* the previous item's */
        rc = bl_es_get(it->st, BL_ES_LOG, d, sizeof d, it->rev, &it->one);
        if (rc == BINDLOG_ENOTFOUND)
            continue; /* compacted away */
        if (rc != 0)
            return page_err(rc);
        return bl_rec_emit(&it->rb, it->one.kvs[0].value, it->one.kvs[0].value_len, lsn, rec);
    }
}

static int next_binding(bindlog_iter *base, bindlog_binding *out)
{
    etcd_iter *it = (etcd_iter *)base;
    const bl_etcd_kv *kv;
    bl_bval b;
    size_t n;
    int rc = bl_es_pager_next(&it->pg, &kv);
    if (rc <= 0)
        return page_err(rc);
    const unsigned char *name = bl_es_key_name(it->st, BL_ES_BINDINGS, kv, &n);
    if (name == NULL || !bl_valid_key((const char *)name, n))
        return BINDLOG_ECORRUPT;
    if ((rc = bl_bval_decode(kv->value, kv->value_len, &b)) != 0)
        return rc;
    memset(out, 0, sizeof(*out));
    copy_str(out->key, name, n);
    copy_str(out->session_id, b.sid, b.sid_len);
    out->generation = b.generation;
    out->lsn = b.lsn;
    out->updated_ms = b.updated_ms;
    out->last_activity_ms = b.last_activity_ms;
    return 1;
}

/* Read session `id` at the iterator's revision and fill `out`. */
static int emit_session(etcd_iter *it, const void *id, size_t n, bindlog_session *out,
                        void *buf, size_t cap, bl_sval *sv)
{
    bl_etcd_kvs_free(&it->one); /* the previous item's */
    int rc = bl_es_get(it->st, BL_ES_SESSIONS, id, n, it->rev, &it->one);
    if (rc == BINDLOG_ENOTFOUND && it->base.kind != BL_IT_ANCESTORS)
        return BINDLOG_ECORRUPT; /* an index names a session that is not there */
    if (rc == 0)
        rc = bl_sval_decode(it->one.kvs[0].value, it->one.kvs[0].value_len, sv);
    else
        rc = page_err(rc);
    if (rc != 0)
        return rc < 0 ? rc : BINDLOG_EIO; /* both say 0 or a negative code */
    bl_session_fill(out, id, n, sv, buf, cap);
    return 1;
}

static int next_session(bindlog_iter *base, bindlog_session *out, void *buf, size_t cap)
{
    etcd_iter *it = (etcd_iter *)base;
    const bl_etcd_kv *kv;
    const unsigned char *name;
    bl_sval sv;
    size_t n;
    int rc;

    switch (it->base.kind) {
    case BL_IT_SESSIONS:
        if ((rc = bl_es_pager_next(&it->pg, &kv)) <= 0)
            return page_err(rc);
        name = bl_es_key_name(it->st, BL_ES_SESSIONS, kv, &n);
        if (name == NULL || !bl_valid_id((const char *)name, n))
            return BINDLOG_ECORRUPT;
        if ((rc = bl_sval_decode(kv->value, kv->value_len, &sv)) != 0)
            return rc;
        bl_session_fill(out, (const char *)name, n, &sv, buf, cap);
        return 1;
    case BL_IT_CHILDREN: {
        if ((rc = bl_es_pager_next(&it->pg, &kv)) <= 0)
            return page_err(rc);
        name = bl_es_key_name(it->st, BL_ES_CHILDREN, kv, &n);
        const unsigned char *z = name ? memchr(name, 0, n) : NULL;
        if (z == NULL || z + 1 == name + n)
            return BINDLOG_ECORRUPT;
        char child[BINDLOG_ID_MAX + 1];
        size_t cn = (size_t)(name + n - z - 1);
        if (cn > BINDLOG_ID_MAX)
            return BINDLOG_ECORRUPT;
        memcpy(child, z + 1, cn);
        return emit_session(it, child, cn, out, buf, cap, &sv);
    }
    default: /* BL_IT_ANCESTORS */
        if (it->next_len == 0)
            return 0;
        if (++it->steps > it->max_steps)
            return BINDLOG_ECORRUPT; /* a parent cycle */
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
        return rc;
    }
}

static const bl_iter_ops etcd_iter_ops = {next_record, next_binding, next_session, iter_close};

/* Count the keys of `table` at `rev`. */
static int count_table(bl_estore *st, int table, int64_t rev, uint64_t *n)
{
    bl_ebuf b = {0}, e = {0};
    bl_etcd_kvs kvs = {0};
    int rc = bl_es_table_range(st, table, NULL, 0, &b, &e);
    if (rc == 0)
        rc = bl_etcd_range(st->c, b.p, b.len, e.p, e.len, rev, 0, BL_ETCD_COUNT_ONLY, &kvs);
    if (rc == 0)
        *n = (uint64_t)kvs.count;
    bl_etcd_kvs_free(&kvs);
    bl_ebuf_free(&b);
    bl_ebuf_free(&e);
    return rc;
}

int bl_es_op_iter(bindlog *h, int kind, const char *arg, size_t arg_len, uint64_t from,
                          uint64_t to, bindlog_iter **out)
{
    bl_estore *st = bl_es_of(h);
    bl_es_meta m;
    bl_ebuf b = {0}, e = {0};
    etcd_iter *it;
    int rc;

    *out = NULL;
    if ((rc = bl_es_meta_read(st, 0, &m)) != 0)
        return bl_es_error(rc, BINDLOG_EIO);
    it = calloc(1, sizeof(*it));
    if (it == NULL)
        return BINDLOG_ENOMEM;
    it->base.ops = &etcd_iter_ops;
    it->base.h = h;
    it->base.kind = kind;
    it->st = st;
    it->rev = m.revision;

    switch (kind) {
    case BL_IT_LOG: {
        char d[BL_ES_LSN_DIGITS];
        if (from > to) {
            it->empty = 1; /* an empty range */
            break;
        }
        if ((rc = bl_es_table_range(st, BL_ES_LOG, NULL, 0, &b, &e)) != 0)
            break;
        bl_es_lsn_format(from, d);
        if ((rc = bl_es_key(st, BL_ES_LOG, d, sizeof d, &b)) != 0)
            break;
        if (to < UINT64_MAX) {
            bl_es_lsn_format(to + 1, d);
            rc = bl_es_key(st, BL_ES_LOG, d, sizeof d, &e);
        }
        break;
    }
    case BL_IT_HISTORY:
    case BL_IT_CHILDREN: {
        char nm[BINDLOG_KEY_MAX + 2];
        memcpy(nm, arg, arg_len);
        nm[arg_len] = '\0';
        rc = bl_es_table_range(st, kind == BL_IT_HISTORY ? BL_ES_HISTORY : BL_ES_CHILDREN, nm,
                               arg_len + 1, &b, &e);
        break;
    }
    case BL_IT_BINDINGS:
        rc = bl_es_table_range(st, BL_ES_BINDINGS, NULL, 0, &b, &e);
        break;
    case BL_IT_SESSIONS:
        rc = bl_es_table_range(st, BL_ES_SESSIONS, NULL, 0, &b, &e);
        break;
    default: { /* BL_IT_ANCESTORS */
        bl_sval sv;
        bl_etcd_kvs_free(&it->one); /* the previous item's */
        rc = bl_es_get(st, BL_ES_SESSIONS, arg, arg_len, it->rev, &it->one);
        if (rc == 0)
            rc = bl_sval_decode(it->one.kvs[0].value, it->one.kvs[0].value_len, &sv);
        if (rc == 0) {
            copy_str(it->next_id, sv.parent, sv.parent_len);
            it->next_len = sv.parent_len;
            it->next_before = sv.created_lsn;
            rc = count_table(st, BL_ES_SESSIONS, it->rev, &it->max_steps);
        }
        break;
    }
    }
    if (rc == 0 && kind != BL_IT_ANCESTORS && !it->empty) {
        rc = bl_es_pager_open(&it->pg, st, b.p, b.len, e.p, e.len, it->rev, 0);
        it->have_pg = rc == 0;
    }
    bl_ebuf_free(&b);
    bl_ebuf_free(&e);
    if (rc != 0) {
        iter_close(&it->base);
        return bl_es_error(rc, BINDLOG_EIO);
    }
    *out = &it->base;
    return 0;
}

/* ---- statistics, digest, lsn_at_time ---------------------------------------------- */

int bl_es_op_stats(bindlog *h, bindlog_stats *out)
{
    bl_estore *st = bl_es_of(h);
    bl_es_meta m;
    bl_etcd_status_info info;
    int rc;

    memset(out, 0, sizeof(*out));
    if ((rc = bl_es_meta_read(st, 0, &m)) != 0)
        return bl_es_error(rc, BINDLOG_EIO);
    if ((rc = count_table(st, BL_ES_LOG, m.revision, &out->log_records)) != 0 ||
        (rc = count_table(st, BL_ES_BINDINGS, m.revision, &out->bindings)) != 0 ||
        (rc = count_table(st, BL_ES_SESSIONS, m.revision, &out->sessions)) != 0)
        return bl_es_error(rc, BINDLOG_EIO);
    out->head_lsn = m.head_lsn;
    out->base_lsn = m.base_lsn;
    out->live_bindings = m.counts.live_bindings;
    out->live_sessions = m.counts.live_sessions;
    memcpy(out->applied, m.counts.applied, sizeof(out->applied));
    out->format_version = m.format;
    if (bl_etcd_status(st->c, &info) == 0 && info.db_size > 0)
        out->file_size = (uint64_t)info.db_size;
    bl_group_stats(&st->g, out);
    out->durability = h->durability;
    return 0;
}

int bl_es_op_digest(bindlog *h, unsigned char out[BINDLOG_DIGEST_SIZE], uint64_t *head_lsn)
{
    bl_estore *st = bl_es_of(h);
    bl_es_meta m;
    int rc = bl_es_meta_read(st, 0, &m);
    if (rc == 0)
        rc = bl_es_digest_tables(st, BL_ES_BINDINGS, BL_ES_SESSIONS, m.revision, out);
    if (rc == 0 && head_lsn != NULL)
        *head_lsn = m.head_lsn;
    return bl_es_error(rc, BINDLOG_EBUSY);
}

/* The head LSN, from a linearizable read of meta. */
static int etcd_read_head(bindlog *h, uint64_t *head)
{
    bl_es_meta m;
    int rc = bl_es_meta_read(bl_es_of(h), 0, &m);
    if (rc != 0)
        return bl_es_error(rc, BINDLOG_EIO);
    *head = m.head_lsn;
    return 0;
}

/* What a wait watches for: a head past after_lsn. */
typedef struct head_watch {
    uint64_t after_lsn;
    uint64_t head;    /* the head the event carried */
} head_watch;

/* A change of meta "head": stop once it passes after_lsn.  A value that
 * does not decode (a deletion) stops too: the re-read will say why. */
static int on_head(void *ctx, const bl_etcd_kv *kv)
{
    head_watch *w = ctx;
    if (kv->value_len != 16)
        return 1;
    w->head = bl_get64(kv->value);
    return w->head > w->after_lsn;
}

/* A watch that fails falls back to polling for this long before trying
 * the watch again; a stream lives at most WATCH_MAX_MS, then the head is
 * read again and a new one set (so a silently dead connection costs at
 * most that). */
#define WAIT_FALLBACK_MS 1000
#define WATCH_MAX_MS 30000
#define POLL_MS 20

/*
 * Wait on etcd: read meta (linearizable) at revision R; if the head has
 * not passed after_lsn, watch meta "head" from R + 1, so no commit after
 * the read can slip by, until an event carries a head past after_lsn or
 * the time is up.  Every commit of every process moves "head", so one
 * event wakes every waiter at once, with no polling.  If the watch cannot
 * be set or breaks (an endpoint died, a proxy that cuts streams), the wait
 * polls the head every POLL_MS instead for WAIT_FALLBACK_MS, then tries
 * the watch again.
 */
int bl_es_op_wait(bindlog *h, uint64_t after_lsn, int timeout_ms, uint64_t *head)
{
    bl_estore *st = bl_es_of(h);
    long deadline = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;
    bl_ebuf key = {0};
    int rc;

    if ((rc = bl_es_key(st, BL_ES_META, "head", 4, &key)) != 0)
        return rc;
    for (;;) {
        bl_es_meta m;
        if ((rc = bl_es_meta_read(st, 0, &m)) != 0) {
            rc = bl_es_error(rc, BINDLOG_EIO);
            break;
        }
        *head = m.head_lsn;
        long left = deadline < 0 ? WATCH_MAX_MS : deadline - mono_ms();
        if (m.head_lsn > after_lsn || left <= 0)
            break;
        head_watch w = {after_lsn, 0};
        rc = bl_etcd_watch(st->c, key.p, key.len, m.revision + 1,
                           left < WATCH_MAX_MS ? left : WATCH_MAX_MS, on_head, &w);
        if (rc == 1 && w.head > after_lsn) {
            *head = w.head;
            rc = 0;
            break;
        }
        if (rc >= 0 || rc == BL_ETCD_ECOMPACTED)
            continue; /* time up, a deletion, or R compacted meanwhile: read again */
        /* no watch: poll a while, then try the watch again */
        left = deadline < 0 ? WAIT_FALLBACK_MS : deadline - mono_ms();
        rc = bl_wait_poll(h, after_lsn, (int)(left < WAIT_FALLBACK_MS ? left : WAIT_FALLBACK_MS),
                          head, etcd_read_head, POLL_MS);
        if (rc != 0 || *head > after_lsn)
            break;
    }
    bl_ebuf_free(&key);
    return rc;
}

int bl_es_op_lsn_at_time(bindlog *h, int64_t time_ms, uint64_t *lsn)
{
    bl_estore *st = bl_es_of(h);
    bl_es_meta m;
    bl_etcd_kvs kvs = {0};
    uint64_t lo, hi;
    int rc = bl_es_meta_read(st, 0, &m);
    if (rc != 0)
        return bl_es_error(rc, BINDLOG_EIO);
    /* times never decrease along the log: a partition point of
     * [base + 1, head + 1] */
    lo = m.base_lsn + 1;
    hi = m.head_lsn + 1;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        char d[BL_ES_LSN_DIGITS];
        bl_record rec;
        bl_es_lsn_format(mid, d);
        rc = bl_es_get(st, BL_ES_LOG, d, sizeof d, m.revision, &kvs);
        if (rc == BINDLOG_ENOTFOUND)
            rc = BINDLOG_ECORRUPT; /* a hole in the retained log */
        if (rc == 0)
            rc = bl_record_decode(kvs.kvs[0].value, kvs.kvs[0].value_len, &rec);
        if (rc == 0 && rec.lsn != mid)
            rc = BINDLOG_ECORRUPT;
        if (rc != 0)
            break;
        if (rec.time_ms >= time_ms)
            hi = mid;
        else
            lo = mid + 1;
        bl_etcd_kvs_free(&kvs);
    }
    bl_etcd_kvs_free(&kvs);
    if (rc != 0)
        return bl_es_error(rc, BINDLOG_EBUSY);
    *lsn = lo;
    return 0;
}

