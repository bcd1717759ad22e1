/*
 * recover_salvage.c -- what bindlog_recover()'s sources found, and the
 * indexes the rebuild reads it through (recover.h).
 *
 * Records, entries and history keys point into the sources' mappings,
 * which live until the salvage is freed.  Copies of one LSN are kept once,
 * the most trusted; the stored bindings and sessions are indexed by the
 * LSNs their fields name (a binding's last change, a session's creation
 * and end), which is what the rebuild asks about a lost LSN.
 */
#define _GNU_SOURCE
#include "maint/recover.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/error.h"

/* ---- the salvage ------------------------------------------------------------ */

/* qsort that takes an empty array (whose pointer may be NULL). */
void bl_rv_sort(void *v, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(v, n, size, cmp);
}

int bl_rv_grow(void **v, size_t *cap, size_t size)
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
    return bl_salvage_record_after(sv, lsn, p, n, trust, NULL, 0);
}

int bl_salvage_record_after(bl_salvage *sv, uint64_t lsn, const unsigned char *p, size_t n,
                            int trust, const unsigned char *after, size_t an)
{
    bl_srec r = {lsn, p, n, trust, after, an};
    int rc = PUSH(sv->recs, r);
    /* From version 2 on a record names its key's previous record: if that
     * one is lost, this names its key, as format 2's history index did. */
    bl_record_head rh;
    if (rc == 0 && bl_record_peek(p, n, &rh) == 0 && rh.version >= 2 && rh.prev_lsn != 0) {
        bl_shist h = {rh.prev_lsn, rh.key, rh.key_len};
        rc = PUSH(sv->hist, h);
    }
    return rc;
}

int bl_salvage_entry(bl_salvage *sv, int table, const unsigned char *k, size_t kn,
                     const unsigned char *v, size_t vn)
{
    int sessions = table == BL_DB_SESSIONS || table == BL_DB_BASE_SESSIONS;
    int base = table == BL_DB_BASE_BINDINGS || table == BL_DB_BASE_SESSIONS;
    bl_sent e = {k, v, kn, vn, 0, 0};
    if (sessions) {
        bl_sval s; /* a reference is made whole by bl_salvage_resolve */
        if (!bl_valid_id((const char *)k, kn) || bl_sval_decode_any(v, vn, &s) != 0) {
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
    bl_shist h = {bl_get64be(k + kn - 8), k, kn - 9};
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

void bl_salvage_free(bl_salvage *sv)
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
    for (size_t i = 0; i < sv->bufs.n; i++)
        free(sv->bufs.v[i]);
    free(sv->bufs.v);
}

/* ---- indexes over the salvage ------------------------------------------------- */

static int cmp_rec(const void *a, const void *b)
{
    const bl_srec *x = a, *y = b;
    if (x->lsn != y->lsn)
        return x->lsn < y->lsn ? -1 : 1;
    return y->trust - x->trust; /* the most trusted copy first */
}

/* Sort records by LSN and keep one copy of each: the most trusted (copies
 * of one LSN are the same bytes; count those that are not). */
void bl_salvage_dedupe(bl_salvage *sv)
{
    size_t o = 0;
    bl_rv_sort(sv->recs.v, sv->recs.n, sizeof(bl_srec), cmp_rec);
    for (size_t i = 0; i < sv->recs.n; i++) {
        if (o > 0 && sv->recs.v[o - 1].lsn == sv->recs.v[i].lsn) {
            const bl_srec *k = &sv->recs.v[o - 1], *d = &sv->recs.v[i];
            if (k->n != d->n || memcmp(k->p, d->p, k->n) != 0)
                sv->conflicts++;
            continue;
        }
        sv->recs.v[o++] = sv->recs.v[i];
    }
    sv->recs.n = o;
}

const bl_srec *bl_salvage_find_record(const bl_salvage *sv, uint64_t lsn)
{
    size_t lo = 0, hi = sv->recs.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sv->recs.v[mid].lsn < lsn)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < sv->recs.n && sv->recs.v[lo].lsn == lsn ? &sv->recs.v[lo] : NULL;
}

/* The base image's session `id`, whole, or NULL (a linear search: the
 * base entries are not sorted yet, and references to compacted records
 * are few). */
static const bl_sent *base_session(const bl_salvage *sv, const unsigned char *id, size_t n)
{
    for (size_t i = 0; i < sv->base[1].n; i++) {
        const bl_sent *e = &sv->base[1].v[i];
        if (e->kn == n && memcmp(e->k, id, n) == 0 && e->vn != 0 && e->v[0] != 3)
            return e;
    }
    return NULL;
}

int bl_salvage_lost_creation(const bl_salvage *sv, bl_sval *s, const void *id, size_t id_len,
                             const char *key, size_t key_len)
{
    for (size_t i = 0; key == NULL && i < sv->hist.n; i++)
        if (sv->hist.v[i].lsn == s->created_lsn) {
            key = (const char *)sv->hist.v[i].k;
            key_len = sv->hist.v[i].kn;
        }
    /* else the stored binding that names it (one bound to it still) */
    for (size_t i = 0; key == NULL && id != NULL && i < sv->state[0].n; i++) {
        const bl_sent *e = &sv->state[0].v[i];
        bl_bval b;
        if (bl_bval_decode(e->v, e->vn, &b) == 0 && b.sid_len == id_len &&
            memcmp(b.sid, id, id_len) == 0) {
            key = (const char *)e->k;
            key_len = e->kn;
        }
    }
    if (key == NULL)
        return -1;
    s->key = key;
    s->key_len = key_len;
    s->parent = "";
    s->parent_len = 0;
    s->origin = "";
    s->origin_len = 0;
    s->created_ms = BINDLOG_TIME_MIN_MS;
    const bl_srec *r = NULL;
    for (size_t i = 0; i < sv->recs.n && sv->recs.v[i].lsn < s->created_lsn; i++)
        r = &sv->recs.v[i];
    bl_record_head rh;
    if (r != NULL && bl_record_peek(r->p, r->n, &rh) == 0)
        s->created_ms = rh.time_ms;
    if (s->ended_lsn != 0 && s->ended_ms < s->created_ms)
        s->created_ms = s->ended_ms;
    s->ref = 0; /* whole from now on: nothing to refer to */
    return 0;
}

/* Make one reference whole: 1 done, 0 it resolves nowhere, or an error. */
static int resolve_one(bl_salvage *sv, bl_sent *e)
{
    bl_sval s, b;
    bl_record rec;
    const bl_srec *r;
    const bl_sent *be;

    if (bl_sval_decode_any(e->v, e->vn, &s) != 0)
        return 0;
    bl_err_clear();
    /* whole from its record, else from the base image, else as a lost
     * creation */
    int whole =
        ((r = bl_salvage_find_record(sv, s.created_lsn)) != NULL &&
         bl_record_decode(r->p, r->n, &rec) == 0 &&
         bl_sval_resolve(&s, (const char *)e->k, e->kn, &rec) == 0) ||
        ((be = base_session(sv, e->k, e->kn)) != NULL && bl_sval_decode(be->v, be->vn, &b) == 0 &&
         b.ref && bl_sval_take_creation(&s, &b) == 0);
    if (!whole) {
        bl_err_clear();
        if (bl_salvage_lost_creation(sv, &s, e->k, e->kn, NULL, 0) != 0)
            return 0;
    }
    size_t n = bl_sval_size(&s);
    unsigned char *buf = malloc(n);
    if (buf == NULL)
        return BINDLOG_ENOMEM;
    if (bl_sval_encode_base(&s, buf, n) != n || PUSH(sv->bufs, (void *)buf) != 0) {
        free(buf);
        return BINDLOG_ENOMEM;
    }
    e->v = buf;
    e->vn = n;
    return 1;
}

int bl_salvage_resolve(bl_salvage *sv)
{
    for (int t = 0; t < 2; t++) {
        bl_sentvec *vec = t ? &sv->base[1] : &sv->state[1];
        size_t o = 0;
        for (size_t i = 0; i < vec->n; i++) {
            bl_sent e = vec->v[i];
            if (e.vn != 0 && e.v[0] == 3) {
                int rc = resolve_one(sv, &e);
                if (rc < 0)
                    return rc;
                if (rc == 0) {
                    if (t)
                        sv->base_damaged = 1; /* an image holds whole values only */
                    continue;
                }
            }
            vec->v[o++] = e;
        }
        vec->n = o;
    }
    return 0;
}

int bl_rv_cmp_key(const unsigned char *a, size_t an, const unsigned char *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    return c != 0 ? c : an < bn ? -1 : an > bn;
}

static int cmp_sent_key(const void *a, const void *b)
{
    const bl_sent *x = a, *y = b;
    return bl_rv_cmp_key(x->k, x->kn, y->k, y->kn);
}

/* An entry index by an LSN field. */

static int cmp_byl(const void *a, const void *b)
{
    const bl_byl *x = a, *y = b;
    return x->lsn < y->lsn ? -1 : x->lsn > y->lsn;
}

int bl_rv_cmp_hist(const void *a, const void *b)
{
    const bl_shist *x = a, *y = b;
    return x->lsn < y->lsn ? -1 : x->lsn > y->lsn;
}

int bl_evidence_build(bl_salvage *sv, bl_evidence *ev)
{
    memset(ev, 0, sizeof *ev);
    bl_rv_sort(sv->state[1].v, sv->state[1].n, sizeof(bl_sent), cmp_sent_key);
    bl_rv_sort(sv->hist.v, sv->hist.n, sizeof(bl_shist), bl_rv_cmp_hist);
    ev->bind = malloc((sv->state[0].n + 1) * sizeof(bl_byl));
    ev->created = malloc((sv->state[1].n + 1) * sizeof(bl_byl));
    ev->ended = malloc((sv->state[1].n + 1) * sizeof(bl_byl));
    if (ev->bind == NULL || ev->created == NULL || ev->ended == NULL)
        return BINDLOG_ENOMEM;
    for (size_t i = 0; i < sv->state[0].n; i++)
        ev->bind[ev->nbind++] = (bl_byl){sv->state[0].v[i].a, &sv->state[0].v[i]};
    for (size_t i = 0; i < sv->state[1].n; i++) {
        const bl_sent *e = &sv->state[1].v[i];
        ev->created[ev->ncreated++] = (bl_byl){e->a, e};
        if (e->b)
            ev->ended[ev->nended++] = (bl_byl){e->b, e};
    }
    bl_rv_sort(ev->bind, ev->nbind, sizeof(bl_byl), cmp_byl);
    bl_rv_sort(ev->created, ev->ncreated, sizeof(bl_byl), cmp_byl);
    bl_rv_sort(ev->ended, ev->nended, sizeof(bl_byl), cmp_byl);
    return 0;
}

void bl_evidence_free(bl_evidence *ev)
{
    free(ev->bind);
    free(ev->created);
    free(ev->ended);
}

/* The first index of `lsn` in a bl_byl array (or n). */
size_t bl_evidence_find(const bl_byl *v, size_t n, uint64_t lsn)
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
const bl_sent *bl_salvage_session(const bl_salvage *sv, const char *id, size_t n)
{
    size_t lo = 0, hi = sv->state[1].n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = bl_rv_cmp_key(sv->state[1].v[mid].k, sv->state[1].v[mid].kn, (const unsigned char *)id,
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

int bl_keyset_add(bl_keyset *ks, const void *k, size_t n)
{
    if (ks == NULL)
        return 0;
    if (ks->n == ks->cap && bl_rv_grow((void **)&ks->v, &ks->cap, sizeof(char *)) != 0)
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

void bl_keyset_unique(bl_keyset *ks)
{
    size_t o = 0;
    bl_rv_sort(ks->v, ks->n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < ks->n; i++) {
        if (o > 0 && strcmp(ks->v[o - 1], ks->v[i]) == 0) {
            free(ks->v[i]);
            continue;
        }
        ks->v[o++] = ks->v[i];
    }
    ks->n = o;
}
