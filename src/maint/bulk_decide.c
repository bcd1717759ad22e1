/*
 * bulk_decide.c -- deciding one partition of a bulk replay (bulk.h) in
 * memory: its entries replayed in LSN order with bl_decide() against hash
 * tables of its own keys and sessions, then sorted and written out as three
 * runs (keys; sessions; children index entries) to the decide thread's
 * files.
 *
 * Key run entry:      u16 key_len, key, u32 val_len, val
 * Session run entry:  u8 id_len, id, u32 val_len, val
 * Children run entry: u64 parent's created_lsn, u8 len, child id
 *                     (sorted as the LMDB children table: record.h,
 *                     bl_lchild_key)
 * Integers are in host order: the files never leave this process.
 *
 * A child and its parent are in the same partition: a split's or a /new's
 * parent is the session its key was bound to, read through the partition's
 * own view (bl_decide), and an image session's parent is looked up in the
 * partition's image (a parent elsewhere sends the run to the sequential
 * path).
 */
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL /* hashing names is on the hot path: no library calls */
#include <xxhash.h>

#include "maint/bulk_int.h"
#include "core/machine.h"

/* An append-only buffered writer. */
typedef struct wfile {
    int fd;
    unsigned char *buf;
    size_t len;
    uint64_t size; /* bytes written to the file, plus len */
} wfile;

static int wf_flush(wfile *w)
{
    int rc = bl_bulk_write_all(w->fd, w->buf, w->len, w->size - w->len);
    w->len = 0;
    return rc;
}

static int wf_put(wfile *w, const void *p, size_t n)
{
    const unsigned char *c = p;
    while (n > 0) {
        if (w->len == RUN_BUF) {
            int rc = wf_flush(w);
            if (rc != 0)
                return rc;
        }
        size_t take = RUN_BUF - w->len < n ? RUN_BUF - w->len : n;
        memcpy(w->buf + w->len, c, take);
        w->len += take;
        w->size += take;
        c += take;
        n -= take;
    }
    return 0;
}

/* ---- decide: one partition in memory --------------------------------- */

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    unsigned char data[];
} arena_chunk;

typedef struct ent {
    uint64_t hash;
    const char *name;
    unsigned char *val;
    uint32_t name_len, val_len, val_cap;
    uint32_t rank;
} ent;

typedef struct etab {
    ent *v;
    uint32_t n, cap;
    uint32_t *slot; /* index + 1; 0 = empty */
    uint32_t mask;
} etab;

typedef struct kid {     /* a children index entry */
    uint64_t lsn;        /* the parent's created_lsn */
    uint32_t child;      /* the child's index in sess */
    uint32_t rank;       /* (while sorting) the child's rank */
} kid;

typedef struct pend {    /* an image session's parent, resolved after the image */
    const char *parent;
    uint32_t parent_len, child;
    uint64_t child_lsn;  /* the child's created_lsn */
} pend;

typedef struct skey {
    uint64_t pfx;
    uint32_t idx;
} skey;

typedef struct dstate {
    arena_chunk *arena, *full;
    etab keys, sess;
    kid *k;
    size_t nk, capk;
    pend *pd;
    size_t npd, cappd;
    bl_encoded enc;
    bl_bulk_counts counts;
    unsigned char *in;  /* one spill block */
    const char *why;
} dstate;

static void *arena_alloc(dstate *d, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    /* d->arena: chunks with room, first the current one; d->full: used up */
    while (d->arena != NULL && d->arena->cap - d->arena->used < n &&
           d->arena->used > d->arena->cap / 2) {
        arena_chunk *c = d->arena;
        d->arena = c->next;
        c->next = d->full;
        d->full = c;
    }
    if (d->arena == NULL || d->arena->cap - d->arena->used < n) {
        size_t cap = n > ((size_t)1 << 20) ? n : (size_t)1 << 20;
        arena_chunk *c = malloc(sizeof(arena_chunk) + cap);
        if (c == NULL)
            return NULL;
        c->next = d->arena;
        c->used = 0;
        c->cap = cap;
        d->arena = c;
    }
    void *p = d->arena->data + d->arena->used;
    d->arena->used += n;
    return p;
}

/* Forget the partition, keeping the memory for the next one (fresh pages
 * from the kernel cost a fault and a clearing each). */
static void dstate_reset(dstate *d)
{
    while (d->full != NULL) {
        arena_chunk *c = d->full;
        d->full = c->next;
        c->next = d->arena;
        d->arena = c;
    }
    for (arena_chunk *c = d->arena; c != NULL; c = c->next)
        c->used = 0;
    d->keys.n = d->sess.n = 0;
    if (d->keys.slot != NULL)
        memset(d->keys.slot, 0, ((size_t)d->keys.mask + 1) * sizeof(uint32_t));
    if (d->sess.slot != NULL)
        memset(d->sess.slot, 0, ((size_t)d->sess.mask + 1) * sizeof(uint32_t));
    d->nk = d->npd = 0;
    memset(&d->counts, 0, sizeof(d->counts));
    d->why = NULL;
}

static void dstate_free(dstate *d)
{
    while (d->arena != NULL) {
        arena_chunk *n = d->arena->next;
        free(d->arena);
        d->arena = n;
    }
    while (d->full != NULL) {
        arena_chunk *n = d->full->next;
        free(d->full);
        d->full = n;
    }
    free(d->keys.v);
    free(d->keys.slot);
    free(d->sess.v);
    free(d->sess.slot);
    free(d->k);
    free(d->pd);
    free(d->in);
    free(d->enc.buf);
    memset(d, 0, sizeof(*d));
}

static int64_t tab_find(const etab *t, const void *name, size_t len, uint64_t h)
{
    if (t->slot == NULL)
        return -1;
    for (uint32_t i = (uint32_t)h & t->mask;; i = (i + 1) & t->mask) {
        uint32_t s = t->slot[i];
        if (s == 0)
            return -1;
        const ent *e = &t->v[s - 1];
        if (e->hash == h && e->name_len == len && memcmp(e->name, name, len) == 0)
            return s - 1;
    }
}

static int tab_grow(etab *t)
{
    uint32_t nslots = t->slot == NULL ? 1024 : 2 * (t->mask + 1);
    uint32_t *slot = calloc(nslots, sizeof(uint32_t));
    if (slot == NULL)
        return BINDLOG_ENOMEM;
    for (uint32_t j = 0; j < t->n; j++) {
        uint32_t i = (uint32_t)t->v[j].hash & (nslots - 1);
        while (slot[i] != 0)
            i = (i + 1) & (nslots - 1);
        slot[i] = j + 1;
    }
    free(t->slot);
    t->slot = slot;
    t->mask = nslots - 1;
    return 0;
}

/* Set name's value (inserting the name if new).  *idx receives its index. */
static int tab_put(dstate *d, etab *t, const void *name, size_t len, const void *val,
                   size_t val_len, uint32_t *idx)
{
    uint64_t h = XXH3_64bits(name, len);
    int64_t i = tab_find(t, name, len, h);
    ent *e;

    if (i < 0) {
        if ((t->n + 1) * 2 > (t->slot == NULL ? 0 : t->mask + 1) && tab_grow(t) != 0)
            return BINDLOG_ENOMEM;
        if (t->n == t->cap) {
            uint32_t cap = t->cap ? 2 * t->cap : 1024;
            ent *nv = realloc(t->v, (size_t)cap * sizeof(ent));
            if (nv == NULL)
                return BINDLOG_ENOMEM;
            t->v = nv;
            t->cap = cap;
        }
        char *nm = arena_alloc(d, len);
        if (nm == NULL)
            return BINDLOG_ENOMEM;
        memcpy(nm, name, len);
        i = t->n++;
        e = &t->v[i];
        *e = (ent){.hash = h, .name = nm, .name_len = (uint32_t)len};
        uint32_t s = (uint32_t)h & t->mask;
        while (t->slot[s] != 0)
            s = (s + 1) & t->mask;
        t->slot[s] = (uint32_t)i + 1;
    } else {
        e = &t->v[i];
    }
    if (val_len > e->val_cap) {
        /* the old value stays in the arena: views decoded from it stay valid */
        size_t cap = val_len + 32;
        if ((e->val = arena_alloc(d, cap)) == NULL)
            return BINDLOG_ENOMEM;
        e->val_cap = (uint32_t)cap;
    }
    memcpy(e->val, val, val_len);
    e->val_len = (uint32_t)val_len;
    *idx = (uint32_t)i;
    return 0;
}

static int view_binding(void *ctx, const char *key, size_t len, bl_bval *out)
{
    dstate *d = ctx;
    int64_t i = tab_find(&d->keys, key, len, XXH3_64bits(key, len));
    if (i < 0)
        return BINDLOG_ENOTFOUND;
    return bl_bval_decode(d->keys.v[i].val, d->keys.v[i].val_len, out);
}

static int view_session(void *ctx, const char *id, size_t len, bl_sval *out)
{
    dstate *d = ctx;
    int64_t i = tab_find(&d->sess, id, len, XXH3_64bits(id, len));
    if (i < 0)
        return BINDLOG_ENOTFOUND;
    /* every value here was validated or encoded by this process */
    return bl_sval_decode_trusted(d->sess.v[i].val, d->sess.v[i].val_len, out);
}

#define GROW(arr, n, cap)                                                        \
    do {                                                                         \
        if ((n) == (cap)) {                                                      \
            size_t c_ = (cap) ? 2 * (cap) : 4096;                                \
            void *p_ = realloc((arr), c_ * sizeof(*(arr)));                      \
            if (p_ == NULL)                                                      \
                return BINDLOG_ENOMEM;                                           \
            (arr) = p_;                                                          \
            (cap) = c_;                                                          \
        }                                                                        \
    } while (0)

static int add_image_binding(dstate *d, const unsigned char *p, size_t len)
{
    bl_bval v;
    uint32_t idx;
    uint16_t k16 = 0;
    if (len >= 2)
        memcpy(&k16, p, 2);
    size_t kl = k16;
    if (len < 2 || 2 + kl > len)
        return (d->why = "damaged spill entry"), BL_BULK_FALLBACK;
    const char *key = (const char *)p + 2;
    if (!bl_valid_key(key, kl) || bl_bval_decode(p + 2 + kl, len - 2 - kl, &v) != 0)
        return (d->why = "damaged binding in the base image"), BL_BULK_FALLBACK;
    if (tab_find(&d->keys, key, kl, XXH3_64bits(key, kl)) >= 0)
        return (d->why = "binding twice in the base image"), BL_BULK_FALLBACK;
    return tab_put(d, &d->keys, key, kl, p + 2 + kl, len - 2 - kl, &idx);
}

static int add_image_session(dstate *d, const unsigned char *p, size_t len)
{
    bl_sval s;
    uint32_t idx;
    size_t il = len >= 1 ? p[0] : 0;
    if (len < 1 || 1 + il > len)
        return (d->why = "damaged spill entry"), BL_BULK_FALLBACK;
    const char *id = (const char *)p + 1;
    const unsigned char *val = p + 1 + il;
    size_t vl = len - 1 - il;
    if (!bl_valid_id(id, il) || bl_sval_decode(val, vl, &s) != 0 ||
        (s.parent_len && !bl_valid_id(s.parent, s.parent_len)))
        return (d->why = "damaged session in the base image"), BL_BULK_FALLBACK;
    if (tab_find(&d->sess, id, il, XXH3_64bits(id, il)) >= 0)
        return (d->why = "session twice in the base image"), BL_BULK_FALLBACK;
    int rc = tab_put(d, &d->sess, id, il, val, vl, &idx);
    if (rc != 0 || s.parent_len == 0)
        return rc;
    /* the children index of the image: its parent is looked up once the
     * whole image is in (resolve_pending), it may come later.  The
     * parent's id is copied into the arena: a record may rewrite the
     * session's value in place meanwhile (its end), and with varints that
     * moves the bytes after the numbers. */
    char *parent = arena_alloc(d, s.parent_len);
    if (parent == NULL)
        return BINDLOG_ENOMEM;
    memcpy(parent, s.parent, s.parent_len);
    GROW(d->pd, d->npd, d->cappd);
    d->pd[d->npd++] = (pend){parent, (uint32_t)s.parent_len, idx, s.created_lsn};
    return 0;
}

/* The image sessions' children index entries, once the partition's whole
 * image is in and before any record changes it: the key holds the parent's
 * created_lsn, which the image gives (as the sequential path reads it). */
static int resolve_pending(dstate *d)
{
    for (size_t i = 0; i < d->npd; i++) {
        const pend *q = &d->pd[i];
        bl_sval pv;
        int64_t pidx = tab_find(&d->sess, q->parent, q->parent_len,
                                XXH3_64bits(q->parent, q->parent_len));
        if (pidx < 0) {
            /* elsewhere, or nowhere (a recovered store): the sequential
             * path looks it up in the whole image */
            d->why = "an image session's parent is not in its partition";
            return BL_BULK_FALLBACK;
        }
        if (bl_sval_decode_trusted(d->sess.v[pidx].val, d->sess.v[pidx].val_len, &pv) != 0)
            return (d->why = "damaged session in the base image"), BL_BULK_FALLBACK;
        if (!bl_child_indexed(q->child_lsn, pv.created_lsn))
            continue;
        GROW(d->k, d->nk, d->capk);
        d->k[d->nk++] = (kid){pv.created_lsn, q->child, 0};
    }
    d->npd = 0;
    return 0;
}

static int add_record(dstate *d, const unsigned char *bytes, size_t len, uint64_t lsn)
{
    bl_record rec;
    bl_event ev;
    bl_plan plan;
    bl_view view = {d, view_binding, view_session};
    uint32_t ki, si;
    int rc;

    if (d->npd > 0 && (rc = resolve_pending(d)) != 0)
        return rc;
    if (bl_record_decode(bytes, len, &rec) != 0 || rec.lsn != lsn ||
        bl_event_from_record(&rec, &ev) != 0)
        return (d->why = "a record does not decode"), BL_BULK_FALLBACK;
    rc = bl_decide(&view, &ev, rec.lsn, rec.time_ms, &plan);
    if (rc != BINDLOG_APPLIED)
        return (d->why = "a record does not apply within its partition"), BL_BULK_FALLBACK;
    /* The same fields in the current record version give the same bytes:
     * comparing fields spares encoding and checksumming the record again. */
    if (bytes[0] != BINDLOG_RECORD_VERSION || !bl_record_same(&plan.rec, &rec))
        return (d->why = "a record re-derives to other bytes"), BL_BULK_FALLBACK;
    /* the state keeps every session whole, marked when the live table
     * keeps it as a reference (the merge hands that form to the sink) */
    d->enc.ref_ok = BL_SVAL_BASE;
    d->enc.links = 1;
    if ((rc = bl_plan_encode_state(&plan, &d->enc)) != 0)
        return rc;

    const unsigned char *b = d->enc.buf;
    if ((rc = tab_put(d, &d->keys, rec.key, rec.key_len, b + d->enc.bval_off, d->enc.bval_len,
                      &ki)) != 0)
        return rc;
    for (unsigned i = 0; i < plan.nsess; i++) {
        if ((rc = tab_put(d, &d->sess, b + d->enc.sid_off[i], plan.sess[i].id_len,
                          b + d->enc.sval_off[i], d->enc.sval_len[i], &si)) != 0)
            return rc;
    }
    /* formats 6 and 7: a child its record creates is linked through the session
     * values (the plan's puts hold the chain), not indexed */
    d->counts.applied[rec.type]++;
    d->counts.live_bindings += plan.d_live_bindings;
    d->counts.live_sessions += plan.d_live_sessions;
    d->counts.records++;
    return 0;
}

/* ---- sorting names (byte order, shorter first) -------------------------- */

static uint64_t pfx_at(const ent *e, size_t depth)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 8; i++) {
        size_t j = depth + i;
        v = v << 8 | (j < e->name_len ? (unsigned char)e->name[j] : 0u);
    }
    return v;
}

/* Sort a[0..n) by the names of ents, all equal before `depth`.  Names hold
 * no NUL byte, so a name that ends inside the 8-byte window never ties with
 * a longer one there: padding with zeros keeps byte order. */
static void sort_names(const ent *ents, skey *a, skey *tmp, size_t n, size_t depth)
{
    if (n < 2)
        return;
    for (size_t i = 0; i < n; i++)
        a[i].pfx = pfx_at(&ents[a[i].idx], depth);
    if (n <= 24) {
        for (size_t i = 1; i < n; i++) {
            skey x = a[i];
            const ent *ex = &ents[x.idx];
            size_t j = i;
            while (j > 0) {
                const ent *ey = &ents[a[j - 1].idx];
                if (a[j - 1].pfx < x.pfx ||
                    (a[j - 1].pfx == x.pfx &&
                     bl_bulk_name_cmp(ey->name, ey->name_len, ex->name, ex->name_len) < 0))
                    break;
                a[j] = a[j - 1];
                j--;
            }
            a[j] = x;
        }
        return;
    }
    /* LSD radix sort on the 64-bit prefix, skipping bytes that never vary */
    size_t count[8][256];
    memset(count, 0, sizeof(count));
    for (size_t i = 0; i < n; i++)
        for (int byte = 0; byte < 8; byte++)
            count[byte][(a[i].pfx >> (8 * byte)) & 0xff]++;
    skey *src = a, *dst = tmp;
    for (int byte = 0; byte < 8; byte++) {
        size_t *c = count[byte], sum = 0;
        if (c[(src[0].pfx >> (8 * byte)) & 0xff] == n)
            continue;
        for (int v = 0; v < 256; v++) {
            size_t t = c[v];
            c[v] = sum;
            sum += t;
        }
        for (size_t i = 0; i < n; i++)
            dst[c[(src[i].pfx >> (8 * byte)) & 0xff]++] = src[i];
        skey *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, n * sizeof(skey));
    /* ties: names longer than the window, sorted on the next 8 bytes */
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && a[j].pfx == a[i].pfx)
            j++;
        if (j - i > 1)
            sort_names(ents, a + i, tmp, j - i, depth + 8);
        i = j;
    }
}

/* Fill ents[].rank with each name's position in byte order, and return the
 * order itself (ents' indexes), or NULL when out of memory. */
static uint32_t *rank_names(ent *ents, uint32_t n)
{
    skey *a = malloc((n ? n : 1) * sizeof(skey)), *tmp = malloc((n ? n : 1) * sizeof(skey));
    uint32_t *order = malloc((n ? n : 1) * sizeof(uint32_t));
    if (a == NULL || tmp == NULL || order == NULL) {
        free(a);
        free(tmp);
        free(order);
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++)
        a[i].idx = i;
    sort_names(ents, a, tmp, n, 0);
    for (uint32_t r = 0; r < n; r++) {
        order[r] = a[r].idx;
        ents[a[r].idx].rank = r;
    }
    free(a);
    free(tmp);
    return order;
}

/* ---- writing a partition's runs ---------------------------------------- */

/* Entries are written in name order, not in the order they were made: ask
 * for the one this many places ahead while writing one. */
#define RUN_PREFETCH 8

static int write_key_run(dstate *d, const uint32_t *order, wfile *w)
{
    uint32_t n = d->keys.n;
    int rc = 0;
    for (uint32_t r = 0; rc == 0 && r < n; r++) {
        const ent *e = &d->keys.v[order[r]];
        if (r + RUN_PREFETCH < n) {
            const ent *f = &d->keys.v[order[r + RUN_PREFETCH]];
            __builtin_prefetch(f->name);
            __builtin_prefetch(f->val);
        }
        uint16_t kl = (uint16_t)e->name_len;
        uint32_t vl = e->val_len;
        if ((rc = wf_put(w, &kl, 2)) == 0 && (rc = wf_put(w, e->name, kl)) == 0 &&
            (rc = wf_put(w, &vl, 4)) == 0)
            rc = wf_put(w, e->val, vl);
    }
    return rc;
}

static int write_session_run(dstate *d, const uint32_t *order, wfile *w)
{
    uint32_t n = d->sess.n;
    int rc = 0;
    for (uint32_t r = 0; rc == 0 && r < n; r++) {
        const ent *e = &d->sess.v[order[r]];
        if (r + RUN_PREFETCH < n) {
            /* sorted order jumps through the partition's memory */
            const ent *f = &d->sess.v[order[r + RUN_PREFETCH]];
            __builtin_prefetch(f->name);
            for (uint32_t o = 0; o < f->val_len && o < 256; o += 64)
                __builtin_prefetch(f->val + o);
        }
        uint8_t il = (uint8_t)e->name_len;
        uint32_t vl = e->val_len;
        if ((rc = wf_put(w, &il, 1)) == 0 && (rc = wf_put(w, e->name, il)) == 0 &&
            (rc = wf_put(w, &vl, 4)) == 0)
            rc = wf_put(w, e->val, vl);
    }
    return rc;
}

/* The children index entries in the children table's order: by the
 * parent's created_lsn, then the child id (its rank among the sessions,
 * rank_names()); an entry made twice is written once, as a put of the
 * same key would leave it. */
static int write_kid_run(dstate *d, wfile *w)
{
    size_t nk = d->nk, n = d->sess.n;
    size_t *cnt = calloc(n ? n : 1, sizeof(size_t));
    kid *tmp = malloc((nk ? nk : 1) * sizeof(kid));
    int rc = 0;
    if (cnt == NULL || tmp == NULL) {
        free(cnt);
        free(tmp);
        return BINDLOG_ENOMEM;
    }
    /* counting sort on the child's rank, then a stable LSD radix sort on
     * the parent's LSN, skipping the bytes all entries share */
    for (size_t i = 0; i < nk; i++) {
        d->k[i].rank = d->sess.v[d->k[i].child].rank;
        cnt[d->k[i].rank]++;
    }
    for (size_t r = 0, sum = 0; r < n; r++) {
        size_t c = cnt[r];
        cnt[r] = sum;
        sum += c;
    }
    for (size_t i = 0; i < nk; i++)
        tmp[cnt[d->k[i].rank]++] = d->k[i];
    kid *src = tmp, *dst = d->k;
    size_t count[8][256];
    memset(count, 0, sizeof(count));
    for (size_t i = 0; i < nk; i++)
        for (int byte = 0; byte < 8; byte++)
            count[byte][(src[i].lsn >> (8 * byte)) & 0xff]++;
    for (int byte = 0; byte < 8 && nk > 1; byte++) {
        unsigned sh = 8u * (unsigned)byte;
        size_t *c = count[byte];
        if (c[(src[0].lsn >> sh) & 0xff] == nk)
            continue;
        for (size_t v = 0, sum = 0; v < 256; v++) {
            size_t t = c[v];
            c[v] = sum;
            sum += t;
        }
        for (size_t i = 0; i < nk; i++)
            dst[c[(src[i].lsn >> sh) & 0xff]++] = src[i];
        kid *t = src;
        src = dst;
        dst = t;
    }
    for (size_t i = 0; rc == 0 && i < nk; i++) {
        /* the children's names lie all over the partition's memory */
        if (i + 2 * RUN_PREFETCH < nk)
            __builtin_prefetch(&d->sess.v[src[i + 2 * RUN_PREFETCH].child]);
        if (i + RUN_PREFETCH < nk)
            __builtin_prefetch(d->sess.v[src[i + RUN_PREFETCH].child].name);
        if (i > 0 && src[i].lsn == src[i - 1].lsn && src[i].child == src[i - 1].child)
            continue;
        const ent *c = &d->sess.v[src[i].child];
        uint8_t cl = (uint8_t)c->name_len;
        if ((rc = wf_put(w, &src[i].lsn, 8)) == 0 && (rc = wf_put(w, &cl, 1)) == 0)
            rc = wf_put(w, c->name, cl);
    }
    free(cnt);
    free(tmp);
    return rc;
}

/* Records held by reference: how many places ahead to prefetch. */
#define REF_PREFETCH 16

/* Decide partition pi; its runs go to thread t's files. */
static int decide_part(bl_bulk *b, unsigned pi, int t, dstate *d, wfile *wf)
{
    part *p = &b->parts[pi];
    uint32_t *korder = NULL, *sorder = NULL;
    int rc = 0;

    dstate_reset(d);
    for (size_t bi = 0; rc == 0 && bi < p->nblocks; bi++) {
        if (atomic_load(&b->stop))
            return 0;
        if ((rc = bl_bulk_read_all(b->spill, d->in, p->blocks[bi].len, p->blocks[bi].off)) != 0)
            break;
        for (size_t o = 0; rc == 0 && o < p->blocks[bi].len;) {
            const unsigned char *e = d->in + o;
            uint32_t len;
            memcpy(&len, e + 1, 4);
            if (e[0] == 'b') {
                rc = add_image_binding(d, e + 5, len);
            } else if (e[0] == 's') {
                rc = add_image_session(d, e + 5, len);
            } else {
                uint64_t lsn;
                memcpy(&lsn, e + 5, 8);
                rc = add_record(d, e + 13, len - 8, lsn);
            }
            o += 5 + (size_t)len;
        }
    }
    /* the records held by reference, in LSN order after the spilled image
     * entries.  They lie apart in the caller's memory: decided there, each
     * would wait for memory (the decide takes long enough per record that
     * prefetching does not hide it), so they are first gathered into the
     * block buffer in a tight loop that keeps many loads in flight, then
     * decided from there */
    for (size_t i = 0; rc == 0 && i < p->nrefs;) {
        size_t j = i, fill = 0;
        if (atomic_load(&b->stop))
            return 0;
        while (j < p->nrefs && fill + p->refs[j].len <= SPILL_BLOCK) {
            if (j + REF_PREFETCH < p->nrefs) {
                const ref *f = &p->refs[j + REF_PREFETCH];
                for (uint32_t o = 0; o < f->len && o < 512; o += 64)
                    __builtin_prefetch((const unsigned char *)f->p + o);
            }
            memcpy(d->in + fill, p->refs[j].p, p->refs[j].len);
            fill += p->refs[j].len;
            j++;
        }
        for (fill = 0; rc == 0 && i < j; i++) {
            rc = add_record(d, d->in + fill, p->refs[i].len, p->refs[i].lsn);
            fill += p->refs[i].len;
        }
    }
    /* (a partition without records: its image's children) */
    if (rc == 0 && d->npd > 0)
        rc = resolve_pending(d);
    if (rc == 0 && ((korder = rank_names(d->keys.v, d->keys.n)) == NULL ||
                    (sorder = rank_names(d->sess.v, d->sess.n)) == NULL))
        rc = BINDLOG_ENOMEM;
    for (int k = 0; rc == 0 && k < RUN_COUNT; k++) {
        p->run[k] = (seg){t, wf[k].size, 0};
        rc = k == RUN_KEYS   ? write_key_run(d, korder, &wf[k])
             : k == RUN_SESS ? write_session_run(d, sorder, &wf[k])
                             : write_kid_run(d, &wf[k]);
        p->run[k].len = wf[k].size - p->run[k].off;
    }
    free(korder);
    free(sorder);
    return rc;
}

void *bl_bulk_decide_thread(void *arg)
{
    bl_bulk_worker *w = arg;
    bl_bulk *b = w->b;
    dstate d;
    wfile wf[RUN_COUNT];
    int rc = 0;

    memset(&d, 0, sizeof(d));
    for (int k = 0; k < RUN_COUNT; k++) {
        wf[k] = (wfile){b->rfd[k][w->t], malloc(RUN_BUF), 0, 0};
        if (wf[k].buf == NULL)
            rc = BINDLOG_ENOMEM;
    }
    d.in = malloc(SPILL_BLOCK);
    if (d.in == NULL)
        rc = BINDLOG_ENOMEM;
    while (rc == 0 && !atomic_load(&b->stop)) {
        unsigned pi = atomic_fetch_add(&b->next_part, 1);
        if (pi >= b->nparts)
            break;
        rc = decide_part(b, pi, w->t, &d, wf);
        if (rc == 0) {
            pthread_mutex_lock(&b->mu);
            for (int i = 0; i < BINDLOG_EVENT_COUNT; i++)
                b->counts.applied[i] += d.counts.applied[i];
            b->counts.live_bindings += d.counts.live_bindings;
            b->counts.live_sessions += d.counts.live_sessions;
            b->counts.records += d.counts.records;
            b->entries += (uint64_t)d.keys.n + d.sess.n;
            uint64_t done = b->total / 3 + b->total / 3 * ++b->parts_done / b->nparts;
            pthread_mutex_unlock(&b->mu);
            /* progress is reported on the caller's thread only (bindlog.h) */
            if (w->t == 0 && b->progress != NULL)
                b->progress(b->progress_ctx, done, b->total);
        }
    }
    for (int k = 0; rc == 0 && k < RUN_COUNT; k++)
        rc = wf_flush(&wf[k]);
    if (rc != 0) {
        pthread_mutex_lock(&b->mu);
        if (b->rc == 0 || (b->rc == BL_BULK_FALLBACK && rc < 0))
            b->rc = rc;
        if (rc == BL_BULK_FALLBACK && b->why == NULL)
            b->why = d.why;
        pthread_mutex_unlock(&b->mu);
        atomic_store(&b->stop, 1);
    }
    dstate_free(&d);
    for (int k = 0; k < RUN_COUNT; k++)
        free(wf[k].buf);
    w->rc = rc;
    return NULL;
}

