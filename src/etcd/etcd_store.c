/*
 * etcd_store.c -- the etcd backend's key layout, meta records, reads at one
 * revision, paged scans and the state digest (etcd_store.h).
 */
#define _GNU_SOURCE
#include "etcd/etcd_store.h"

#include <stdlib.h>
#include <string.h>

#include "core/digest.h"

/* ---- buffers and keys ------------------------------------------------------- */

int bl_ebuf_reserve(bl_ebuf *b, size_t cap)
{
    if (cap <= b->cap)
        return 0;
    size_t n = b->cap ? b->cap : 64;
    while (n < cap)
        n *= 2;
    unsigned char *p = realloc(b->p, n);
    if (p == NULL)
        return BINDLOG_ENOMEM;
    b->p = p;
    b->cap = n;
    return 0;
}

int bl_ebuf_append(bl_ebuf *b, const void *p, size_t n)
{
    if (n >= SIZE_MAX - b->len || bl_ebuf_reserve(b, b->len + n + 1) != 0)
        return BINDLOG_ENOMEM;
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0; /* handy for text; not counted */
    return 0;
}

void bl_ebuf_free(bl_ebuf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* b = PREFIX "/" T "/" */
static int table_start(const bl_estore *st, int table, bl_ebuf *b)
{
    unsigned char t[2] = {(unsigned char)table, '/'};
    b->len = 0;
    if (bl_ebuf_append(b, st->prefix, st->prefix_len) != 0)
        return BINDLOG_ENOMEM;
    return bl_ebuf_append(b, t, 2);
}

int bl_es_key(const bl_estore *st, int table, const void *name, size_t name_len, bl_ebuf *b)
{
    if (table_start(st, table, b) != 0)
        return BINDLOG_ENOMEM;
    return bl_ebuf_append(b, name, name_len);
}

void bl_es_lsn_format(uint64_t lsn, char out[BL_ES_LSN_DIGITS])
{
    for (int i = BL_ES_LSN_DIGITS - 1; i >= 0; i--) {
        out[i] = (char)('0' + lsn % 10);
        lsn /= 10;
    }
}

int bl_es_lsn_parse(const void *p, size_t n, uint64_t *lsn)
{
    const unsigned char *s = p;
    uint64_t v = 0;
    if (n != BL_ES_LSN_DIGITS)
        return BINDLOG_ECORRUPT;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return BINDLOG_ECORRUPT;
        unsigned d = s[i] - '0';
        if (v > (UINT64_MAX - d) / 10)
            return BINDLOG_ECORRUPT;
        v = v * 10 + d;
    }
    *lsn = v;
    return 0;
}

int bl_es_log_key(const bl_estore *st, uint64_t lsn, bl_ebuf *b)
{
    char d[BL_ES_LSN_DIGITS];
    bl_es_lsn_format(lsn, d);
    return bl_es_key(st, BL_ES_LOG, d, sizeof d, b);
}

int bl_es_history_key(const bl_estore *st, const char *key, size_t key_len, uint64_t lsn,
                      bl_ebuf *b)
{
    char d[BL_ES_LSN_DIGITS];
    bl_es_lsn_format(lsn, d);
    if (bl_es_key(st, BL_ES_HISTORY, key, key_len, b) != 0 || bl_ebuf_append(b, "", 1) != 0)
        return BINDLOG_ENOMEM;
    return bl_ebuf_append(b, d, sizeof d);
}

int bl_es_child_key(const bl_estore *st, const char *parent, size_t parent_len,
                    const char *child, size_t child_len, bl_ebuf *b)
{
    if (bl_es_key(st, BL_ES_CHILDREN, parent, parent_len, b) != 0 ||
        bl_ebuf_append(b, "", 1) != 0)
        return BINDLOG_ENOMEM;
    return bl_ebuf_append(b, child, child_len);
}

int bl_es_table_range(const bl_estore *st, int table, const void *name, size_t name_len,
                      bl_ebuf *begin, bl_ebuf *end)
{
    if (bl_es_key(st, table, name, name_len, begin) != 0 || begin->len > SIZE_MAX - 2 ||
        bl_ebuf_reserve(end, begin->len + 2) != 0)
        return BINDLOG_ENOMEM;
    end->len = bl_etcd_prefix_end(begin->p, begin->len, end->p);
    end->p[end->len] = 0;
    return 0;
}

const unsigned char *bl_es_key_name(const bl_estore *st, int table, const bl_etcd_kv *kv,
                                    size_t *name_len)
{
    size_t n = st->prefix_len;
    if (kv->key_len < n + 2 || memcmp(kv->key, st->prefix, n) != 0 ||
        kv->key[n] != (unsigned char)table || kv->key[n + 1] != '/')
        return NULL;
    *name_len = kv->key_len - n - 2;
    return kv->key + n + 2;
}

/* ---- meta ---------------------------------------------------------------------- */

size_t bl_es_counts_encode(unsigned char out[BL_ES_COUNTS_BYTES], const bl_es_counts *c)
{
    for (int i = 0; i < BINDLOG_EVENT_ROUTE; i++)
        bl_put64(out + 8 * i, c->applied[i]);
    bl_put64(out + 8 * BINDLOG_EVENT_ROUTE, c->live_bindings);
    bl_put64(out + 8 * (BINDLOG_EVENT_ROUTE + 1), c->live_sessions);
    if (c->applied[BINDLOG_EVENT_ROUTE] == 0)
        return BL_ES_COUNTS_BYTES_V3;
    bl_put64(out + BL_ES_COUNTS_BYTES_V3, c->applied[BINDLOG_EVENT_ROUTE]);
    return BL_ES_COUNTS_BYTES;
}

int bl_es_counts_decode(const void *in, size_t len, bl_es_counts *c)
{
    const unsigned char *p = in;
    memset(c, 0, sizeof(*c));
    if (len != BL_ES_COUNTS_BYTES && len != BL_ES_COUNTS_BYTES_V3)
        return BINDLOG_ECORRUPT;
    for (int i = 0; i < BINDLOG_EVENT_ROUTE; i++)
        c->applied[i] = bl_get64(p + 8 * i);
    c->live_bindings = bl_get64(p + 8 * BINDLOG_EVENT_ROUTE);
    c->live_sessions = bl_get64(p + 8 * (BINDLOG_EVENT_ROUTE + 1));
    if (len == BL_ES_COUNTS_BYTES)
        c->applied[BINDLOG_EVENT_ROUTE] = bl_get64(p + BL_ES_COUNTS_BYTES_V3);
    return 0;
}

int bl_es_error(int rc, int compacted)
{
    if (rc == BL_ETCD_ECOMPACTED)
        return compacted;
    /* the client's words (which endpoint, what it said) become the detail,
     * unless a closer layer set one already */
    if (rc < 0 && !bl_err_isset() && bl_etcd_last_error()[0] != '\0')
        bl_err_set(rc, "%s", bl_etcd_last_error());
    return rc;
}

static int name_is(const unsigned char *n, size_t len, const char *s)
{
    return len == strlen(s) && memcmp(n, s, len) == 0;
}

int bl_es_meta_parse(const bl_estore *st, const bl_etcd_kvs *kvs, int64_t revision,
                     bl_es_meta *m)
{
    int rc = 0, magic = 0;

    memset(m, 0, sizeof(*m));
    m->revision = revision;
    for (size_t i = 0; i < kvs->n && rc == 0; i++) {
        const bl_etcd_kv *kv = &kvs->kvs[i];
        size_t n;
        const unsigned char *name = bl_es_key_name(st, BL_ES_META, kv, &n);
        const unsigned char *v = kv->value;
        size_t vl = kv->value_len;
        if (name == NULL)
            continue;
        if (name_is(name, n, "magic")) {
            if (vl != strlen(BL_ES_MAGIC) || memcmp(v, BL_ES_MAGIC, vl) != 0)
                rc = BINDLOG_ENOTSTORE;
            magic = 1;
        } else if (name_is(name, n, "format")) {
            if (vl != 4)
                rc = BINDLOG_ECORRUPT;
            else
                m->format = bl_get32(v);
        } else if (name_is(name, n, "head")) {
            if (vl != 16) {
                rc = BINDLOG_ECORRUPT;
            } else {
                m->head_lsn = bl_get64(v);
                m->head_time_ms = (int64_t)bl_get64(v + 8);
                m->head_mod = kv->mod_revision;
            }
        } else if (name_is(name, n, "counts")) {
            rc = bl_es_counts_decode(v, vl, &m->counts);
            m->counts_mod = kv->mod_revision;
        } else if (name_is(name, n, "base")) {
            if (vl != 8)
                rc = BINDLOG_ECORRUPT;
            else
                m->base_lsn = bl_get64(v);
            m->base_mod = kv->mod_revision;
        } else if (name_is(name, n, "base_time")) {
            if (vl != 8)
                rc = BINDLOG_ECORRUPT;
            else
                m->base_time_ms = (int64_t)bl_get64(v);
        } else if (name_is(name, n, "base_counts")) {
            rc = bl_es_counts_decode(v, vl, &m->base_counts);
        } else if (name_is(name, n, "import")) {
            m->import_mod = kv->mod_revision;
        }
    }
    if (rc == 0 && !magic)
        rc = BINDLOG_ENOTSTORE;
    if (rc == 0 && (m->format == 0 || m->head_mod == 0))
        rc = BINDLOG_ECORRUPT;
    if (rc == 0 && m->format > BL_ES_FORMAT)
        rc = BINDLOG_EVERSION;
    return rc;
}

int bl_es_meta_read(bl_estore *st, int64_t revision, bl_es_meta *m)
{
    bl_ebuf b = {0}, e = {0};
    bl_etcd_kvs kvs = {0};
    int rc;

    memset(m, 0, sizeof(*m));
    if ((rc = bl_es_table_range(st, BL_ES_META, NULL, 0, &b, &e)) != 0)
        goto out;
    rc = bl_etcd_range(st->c, b.p, b.len, e.p, e.len, revision, 0, 0, &kvs);
    if (rc == 0)
        rc = bl_es_meta_parse(st, &kvs, kvs.revision, m);
out:
    bl_etcd_kvs_free(&kvs);
    bl_ebuf_free(&b);
    bl_ebuf_free(&e);
    return rc;
}

int bl_es_get(bl_estore *st, int table, const void *name, size_t name_len, int64_t revision,
              bl_etcd_kvs *kvs)
{
    bl_ebuf k = {0};
    int rc;
    memset(kvs, 0, sizeof(*kvs));
    if ((rc = bl_es_key(st, table, name, name_len, &k)) == 0)
        rc = bl_etcd_range(st->c, k.p, k.len, NULL, 0, revision, 0, 0, kvs);
    bl_ebuf_free(&k);
    if (rc == 0 && kvs->n == 0)
        rc = BINDLOG_ENOTFOUND;
    return rc;
}

/* ---- paged scans ------------------------------------------------------------ */

int bl_es_pager_open(bl_es_pager *pg, bl_estore *st, const void *begin, size_t begin_len,
                     const void *end, size_t end_len, int64_t revision, int flags)
{
    memset(pg, 0, sizeof(*pg));
    pg->st = st;
    pg->revision = revision;
    pg->flags = flags & (BL_ETCD_KEYS_ONLY | BL_ETCD_SORT_DESCEND);
    if (bl_ebuf_append(&pg->begin, begin, begin_len) != 0 ||
        bl_ebuf_append(&pg->end, end, end_len) != 0 ||
        bl_ebuf_append(&pg->next, (flags & BL_ETCD_SORT_DESCEND) ? end : begin,
                       (flags & BL_ETCD_SORT_DESCEND) ? end_len : begin_len) != 0) {
        bl_es_pager_close(pg);
        return BINDLOG_ENOMEM;
    }
    return 0;
}

/* Fetch the page after the current one. */
static int fetch(bl_es_pager *pg)
{
    int desc = (pg->flags & BL_ETCD_SORT_DESCEND) != 0;
    int rc;
    bl_etcd_kvs_free(&pg->page);
    pg->pos = 0;
    if (desc)
        rc = bl_etcd_range(pg->st->c, pg->begin.p, pg->begin.len, pg->next.p, pg->next.len,
                           pg->revision, BL_ES_PAGE, pg->flags, &pg->page);
    else
        rc = bl_etcd_range(pg->st->c, pg->next.p, pg->next.len, pg->end.p, pg->end.len,
                           pg->revision, BL_ES_PAGE, pg->flags, &pg->page);
    if (rc != 0)
        return rc;
    pg->started = 1;
    pg->revision = pg->page.revision; /* pin the snapshot */
    if (!pg->page.more || pg->page.n == 0) {
        pg->done = 1;
        return 0;
    }
    const bl_etcd_kv *last = &pg->page.kvs[pg->page.n - 1];
    pg->next.len = 0;
    if (desc) /* the next page ends (exclusive) at the last key */
        return bl_ebuf_append(&pg->next, last->key, last->key_len);
    /* ascending: starts right after the last key (the key plus a NUL byte) */
    if (bl_ebuf_append(&pg->next, last->key, last->key_len) != 0 ||
        bl_ebuf_append(&pg->next, "", 1) != 0)
        return BINDLOG_ENOMEM;
    return 0;
}

int bl_es_pager_next(bl_es_pager *pg, const bl_etcd_kv **kv)
{
    while (!pg->started || pg->pos >= pg->page.n) {
        if (pg->started && pg->done)
            return 0;
        int rc = fetch(pg);
        if (rc != 0)
            return rc < 0 ? rc : BINDLOG_EIO; /* bl_etcd_range: 0 or a negative code */
        if (pg->page.n == 0 && pg->done)
            return 0;
    }
    *kv = &pg->page.kvs[pg->pos++];
    return 1;
}

void bl_es_pager_close(bl_es_pager *pg)
{
    bl_etcd_kvs_free(&pg->page);
    bl_ebuf_free(&pg->next);
    bl_ebuf_free(&pg->begin);
    bl_ebuf_free(&pg->end);
}

int bl_es_scan(bl_estore *st, int table, const void *name, size_t name_len, int64_t revision,
               int (*fn)(void *ctx, const bl_etcd_kv *kv), void *ctx, int64_t *revision_out)
{
    bl_ebuf b = {0}, e = {0};
    bl_es_pager pg;
    const bl_etcd_kv *kv;
    int rc;

    if ((rc = bl_es_table_range(st, table, name, name_len, &b, &e)) != 0) {
        bl_ebuf_free(&b);
        bl_ebuf_free(&e);
        return rc;
    }
    rc = bl_es_pager_open(&pg, st, b.p, b.len, e.p, e.len, revision, 0);
    bl_ebuf_free(&b);
    bl_ebuf_free(&e);
    if (rc != 0)
        return rc;
    while ((rc = bl_es_pager_next(&pg, &kv)) > 0)
        if ((rc = fn(ctx, kv)) != 0)
            break;
    if (revision_out != NULL)
        *revision_out = pg.revision;
    bl_es_pager_close(&pg);
    return rc;
}

/* ---- digest ---------------------------------------------------------------------- */

/* The state digest of core/digest.c (values hashed in their canonical
 * version-1 form, whichever version the prefix holds), over the tables as
 * of one revision. */
typedef struct hash_ctx {
    bl_estore *st;
    int table, tag;
    bl_digest *d;
} hash_ctx;

static int hash_one(void *ctx, const bl_etcd_kv *kv)
{
    hash_ctx *h = ctx;
    size_t n;
    const unsigned char *name = bl_es_key_name(h->st, h->table, kv, &n);
    if (name == NULL)
        return BINDLOG_ECORRUPT;
    return bl_digest_add(h->d, h->tag, name, n, kv->value, kv->value_len);
}

int bl_es_digest_tables(bl_estore *st, int btable, int stable, int64_t revision,
                        unsigned char out[BINDLOG_DIGEST_SIZE])
{
    hash_ctx h = {st, btable, 'B', bl_digest_new()};
    int rc;
    if (h.d == NULL)
        return BINDLOG_ENOMEM;
    rc = bl_es_scan(st, btable, NULL, 0, revision, hash_one, &h, NULL);
    if (rc == 0) {
        h.table = stable;
        h.tag = 'S';
        rc = bl_es_scan(st, stable, NULL, 0, revision, hash_one, &h, NULL);
    }
    if (rc == 0)
        bl_digest_final(h.d, out);
    bl_digest_free(h.d);
    return rc;
}
