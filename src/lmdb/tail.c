/*
 * tail.c -- the index of the log's tail (tail.h).
 */
#define _GNU_SOURCE
#include "lmdb/tail.h"

#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL /* every event links and looks up keys: no library calls */
#include <xxhash.h>

#include "bindlog.h"
#include "core/record.h"
#include "lmdb/store.h"
#include "platform/platform.h"

/* The map's hash of (table, key); each version keeps its own, so probes
 * compare it before any key byte and growing or deleting never hashes. */
static uint32_t hash_of(unsigned table, const void *key, size_t klen)
{
    return (uint32_t)XXH3_64bits_withSeed(key, klen, table);
}

int bl_key_cmp(const void *a, size_t an, const void *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    if (c != 0)
        return c;
    return an < bn ? -1 : an > bn;
}

/* ---- group memory ----------------------------------------------------------- */

/*
 * A group of a batch holds hundreds of KiB; the leader allocates it and the
 * checkpointer frees it a fold later, a dozen at a time.  From malloc,
 * part of each came back as fresh pages (the allocator trims and splits):
 * page faults were most of the caller's in apply_batch x1000, a fault
 * costing ~1 us on a bare host and 10-15 us under a hypervisor that
 * shadows page tables.  Blocks of GK_MIN bytes and more are therefore kept
 * when freed, up to GK_BYTES in all, process-wide, for the next groups of
 * about their size; a new one is allocated with an eighth more room than
 * asked, so that the next groups of a similar size fit it.  The blocks go
 * back to malloc when the last index of the process is destroyed (no store
 * open keeps none).  The lock is taken around fork() so that a child
 * finds it free.
 */
#define GK_MIN ((size_t)64 << 10)
#define GK_BYTES ((size_t)16 << 20)
#define GK_SLOTS 32

static pthread_mutex_t gk_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t size;
} gk_block[GK_SLOTS];
static size_t gk_n, gk_bytes, gk_tails; /* blocks, their bytes, live indexes */

static void gk_lock(void) { pthread_mutex_lock(&gk_mu); }
static void gk_unlock(void) { pthread_mutex_unlock(&gk_mu); }
static void gk_register(void) { (void)pthread_atfork(gk_lock, gk_unlock, gk_unlock); }

/* A block of at least `bytes`; *size gets its size. */
static void *gk_alloc(size_t bytes, size_t *size)
{
    if (bytes >= GK_MIN) {
        gk_lock();
        for (size_t i = 0; i < gk_n; i++)
            if (gk_block[i].size >= bytes && gk_block[i].size / 2 <= bytes) {
                void *p = gk_block[i].p;
                *size = gk_block[i].size;
                gk_bytes -= *size;
                gk_block[i] = gk_block[--gk_n];
                gk_unlock();
                return p;
            }
        gk_unlock();
        bytes += bytes / 8;
    }
    *size = bytes;
    return malloc(bytes);
}

static void gk_free(void *p, size_t size)
{
    if (size >= GK_MIN) {
        gk_lock();
        if (gk_tails > 0 && gk_n < GK_SLOTS && gk_bytes + size <= GK_BYTES) {
            gk_block[gk_n].p = p;
            gk_block[gk_n++].size = size;
            gk_bytes += size;
            p = NULL;
        }
        gk_unlock();
    }
    free(p);
}

/* One more index (+1) or one fewer (-1); the last one's end frees the
 * kept blocks. */
static void gk_tail_count(int delta)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    void *drop[GK_SLOTS];
    size_t ndrop = 0;

    (void)pthread_once(&once, gk_register);
    gk_lock();
    gk_tails = delta > 0 ? gk_tails + 1 : gk_tails - 1;
    if (gk_tails == 0) {
        for (size_t i = 0; i < gk_n; i++)
            drop[ndrop++] = gk_block[i].p;
        gk_n = gk_bytes = 0;
    }
    gk_unlock();
    for (size_t i = 0; i < ndrop; i++)
        free(drop[i]);
}

/* ---- groups ---------------------------------------------------------------- */

bl_tgroup *bl_tgroup_make(const bl_wframe *f, const bl_wal_at *after)
{
    size_t nent = 0, off = 0;
    bl_wentry e;

    while (bl_wbody_next(f->body, f->body_len, &off, &e) > 0)
        nent++;
    size_t bytes = sizeof(bl_tgroup) + nent * sizeof(bl_tver) + (size_t)f->nrec * 8 +
                   f->body_len;
    size_t block;
    bl_tgroup *g = gk_alloc(bytes, &block);
    if (g == NULL)
        return NULL;
    memset(g, 0, sizeof(*g));
    g->block = block;
    g->ver = (bl_tver *)(g + 1);
    unsigned char *lsnkeys = (unsigned char *)(g->ver + nent);
    unsigned char *body = lsnkeys + (size_t)f->nrec * 8;
    memcpy(body, f->body, f->body_len);
    atomic_init(&g->refs, 1);
    g->first_lsn = f->first_lsn;
    g->last_lsn = f->first_lsn + f->nrec - 1;
    g->after = *after;
    g->time_ms = f->time_ms;
    g->bytes = bytes;

    uint64_t lsn = f->first_lsn - 1;
    uint32_t n = 0;
    off = 0;
    while (bl_wbody_next(body, f->body_len, &off, &e) > 0) {
        bl_tver *v = &g->ver[n++];
        memset(v, 0, sizeof(*v));
        v->g = g;
        if (e.kind == BL_WE_RECORD) {
            lsn++;
            unsigned char *k = lsnkeys + 8 * (lsn - f->first_lsn);
            bl_put64be(k, lsn);
            v->table = BL_DB_LOG;
            v->key = k;
            v->klen = 8;
        } else {
            v->table = e.table;
            v->key = e.key;
            v->klen = (uint32_t)e.klen;
        }
        v->val = e.val;
        v->vlen = (uint32_t)e.vlen;
        v->lsn = lsn;
        v->hash = hash_of(v->table, v->key, v->klen);
    }
    g->nver = n;
    return g;
}

void bl_tgroup_ref(bl_tgroup *g) { atomic_fetch_add(&g->refs, 1); }

void bl_tgroup_unref(bl_tgroup *g)
{
    if (g != NULL && atomic_fetch_sub(&g->refs, 1) == 1)
        gk_free(g, g->block);
}

/* ---- the map ---------------------------------------------------------------- */

static int same(const bl_tver *v, uint32_t h, unsigned table, const void *key, size_t klen)
{
    return v->hash == h && v->table == table && v->klen == klen &&
           memcmp(v->key, key, klen) == 0;
}

/* The slot holding (table, key) of hash h, or the empty slot where it
 * would go. */
static size_t find_h(const bl_tail *t, uint32_t h, unsigned table, const void *key, size_t klen)
{
    size_t i = (size_t)h & (t->nslots - 1);
    /* the slot's hash first: a probe past another key reads no version */
    while (t->slots[i].v != NULL &&
           (t->slots[i].hash != h || !same(t->slots[i].v, h, table, key, klen)))
        i = (i + 1) & (t->nslots - 1);
    return i;
}

static size_t find(const bl_tail *t, unsigned table, const void *key, size_t klen)
{
    return find_h(t, hash_of(table, key, klen), table, key, klen);
}

/* The slot of v's key. */
static size_t find_v(const bl_tail *t, const bl_tver *v)
{
    return find_h(t, v->hash, v->table, v->key, v->klen);
}

static int grow(bl_tail *t)
{
    size_t n = t->nslots ? 2 * t->nslots : 1024;
    bl_tslot *old = t->slots;
    size_t oldn = t->nslots;
    bl_tslot *s = bl_plat_map_anon(n * sizeof(*s), 1); /* zeroed, faulted in */
    if (s == NULL)
        return BINDLOG_ENOMEM;
    t->slots = s;
    t->nslots = n;
    for (size_t i = 0; i < oldn; i++)
        if (old[i].v != NULL)
            t->slots[find_v(t, old[i].v)] = old[i];
    bl_plat_unmap_anon(old, oldn * sizeof(*old));
    return 0;
}

/* Delete slot i, shifting later members of its probe run back (no
 * tombstones, so lookups stay short however often keys come and go). */
static void delete_slot(bl_tail *t, size_t i)
{
    size_t mask = t->nslots - 1, j = i;
    t->slots[i].v = NULL;
    t->used--;
    for (;;) {
        j = (j + 1) & mask;
        if (t->slots[j].v == NULL)
            return;
        size_t home = (size_t)t->slots[j].hash & mask;
        /* slot j may move to i if its home is not in (i, j] (cyclically) */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            t->slots[i] = t->slots[j];
            t->slots[j].v = NULL;
            i = j;
        }
    }
}

void bl_tail_init(bl_tail *t, const bl_wal_at *base)
{
    memset(t, 0, sizeof(*t));
    (void)bl_srw_init(&t->lock, 0); /* as pthread_rwlock_init: never fails on Linux or macOS */
    t->base = t->end = *base;
    atomic_init(&t->end_lsn, base->lsn);
    atomic_init(&t->base_lsn, base->lsn);
    atomic_init(&t->nver, 0);
    atomic_init(&t->bytes, 0);
    gk_tail_count(+1);
}

/* ---- kept records ------------------------------------------------------------ */

/* Keep the records of a group joining the index (groups come oldest
 * first): each goes whole after the last one, or at the ring's start when
 * it would not fit before its end.  Under the exclusive lock. */
static void keep_records(bl_tail *t, const bl_tgroup *g)
{
    if (!t->keep)
        return; /* no group was ever decided here: nobody would read them */
    if (t->kept == NULL) {
        /* 9.5 MiB, written from their starts as LSNs go by: mapped at
         * first touch, so that a store of a few thousand records never
         * takes more than it uses (the ring on huge pages, a fault a
         * 2 MiB; populated at once, every open that wrote paid ~1 ms and
         * 9.5 MiB) */
        t->kept = bl_plat_map_anon(BL_TAIL_KEPT * sizeof(*t->kept), 0);
        t->kept_ring = bl_plat_map_anon(BL_TAIL_KEPT_BYTES, 0);
        if (t->kept == NULL || t->kept_ring == NULL) {
            /* no memory: LMDB has every record anyway */
            bl_plat_unmap_anon(t->kept, BL_TAIL_KEPT * sizeof(*t->kept));
            bl_plat_unmap_anon(t->kept_ring, BL_TAIL_KEPT_BYTES);
            t->kept = NULL;
            t->kept_ring = NULL;
            return;
        }
    }
    for (uint32_t i = 0; i < g->nver; i++) {
        const bl_tver *v = &g->ver[i];
        if (v->table != BL_DB_LOG || v->vlen > BL_TAIL_KEPT_MAX)
            continue;
        uint64_t at = t->kept_end;
        size_t off = (size_t)(at % BL_TAIL_KEPT_BYTES);
        if (off + v->vlen > BL_TAIL_KEPT_BYTES) {
            at += BL_TAIL_KEPT_BYTES - off;
            off = 0;
        }
        memcpy(t->kept_ring + off, v->val, v->vlen);
        t->kept[v->lsn % BL_TAIL_KEPT] = (bl_tkept){v->lsn, at, v->vlen};
        t->kept_end = at + v->vlen;
    }
}

/* Every kept record is overwritten from here on, as far as slots know. */
static void forget_kept(bl_tail *t)
{
    t->kept_end += BL_TAIL_KEPT_BYTES;
}

int bl_tail_kept(const bl_tail *t, uint64_t lsn, const void **rec, size_t *len)
{
    const bl_tkept *k;
    if (t->kept == NULL || lsn == 0 || (k = &t->kept[lsn % BL_TAIL_KEPT])->lsn != lsn ||
        t->kept_end - k->at > BL_TAIL_KEPT_BYTES)
        return 0;
    *rec = t->kept_ring + k->at % BL_TAIL_KEPT_BYTES;
    *len = k->len;
    return 1;
}

static void drop_all(bl_tail *t)
{
    while (t->oldest != NULL) {
        bl_tgroup *g = t->oldest;
        t->oldest = g->next;
        bl_tgroup_unref(g);
    }
    t->newest = NULL;
    if (t->slots != NULL)
        memset(t->slots, 0, t->nslots * sizeof(*t->slots));
    t->used = 0;
    atomic_store(&t->nver, 0);
    atomic_store(&t->bytes, 0);
}

void bl_tail_reset(bl_tail *t, const bl_wal_at *base)
{
    bl_srw_wrlock(&t->lock);
    drop_all(t);
    forget_kept(t);
    t->base = t->end = *base;
    atomic_store(&t->end_lsn, base->lsn);
    atomic_store(&t->base_lsn, base->lsn);
    bl_srw_wrunlock(&t->lock);
}

void bl_tail_destroy(bl_tail *t)
{
    drop_all(t);
    bl_plat_unmap_anon(t->slots, t->nslots * sizeof(*t->slots));
    bl_plat_unmap_anon(t->kept, BL_TAIL_KEPT * sizeof(*t->kept));
    bl_plat_unmap_anon(t->kept_ring, BL_TAIL_KEPT_BYTES);
    t->slots = NULL;
    t->nslots = 0;
    t->kept = NULL;
    t->kept_ring = NULL;
    bl_srw_destroy(&t->lock);
    gk_tail_count(-1);
}

int bl_tail_link(bl_tail *t, bl_tgroup *g)
{
    bl_srw_wrlock(&t->lock);
    for (uint32_t i = 0; i < g->nver; i++) {
        if ((t->used + 1) * 2 > t->nslots && grow(t) != 0) {
            /* undo the versions linked so far and give up on the group */
            for (uint32_t j = i; j-- > 0;) {
                bl_tver *v = &g->ver[j];
                size_t s = find_v(t, v);
                if (v->older != NULL) {
                    v->older->newer = NULL;
                    t->slots[s].v = v->older;
                } else {
                    delete_slot(t, s);
                }
            }
            bl_srw_wrunlock(&t->lock);
            return BINDLOG_ENOMEM;
        }
        bl_tver *v = &g->ver[i];
        size_t s = find_v(t, v);
        v->newer = NULL;
        v->older = t->slots[s].v;
        if (v->older != NULL)
            v->older->newer = v;
        else
            t->used++;
        t->slots[s] = (bl_tslot){v, v->hash};
    }
    keep_records(t, g);
    g->next = NULL;
    if (t->newest != NULL)
        t->newest->next = g;
    else
        t->oldest = g;
    t->newest = g;
    t->end = g->after;
    atomic_fetch_add(&t->nver, g->nver);
    atomic_fetch_add(&t->bytes, g->bytes);
    atomic_store(&t->end_lsn, t->end.lsn);
    bl_srw_wrunlock(&t->lock);
    return 0;
}

void bl_tail_advance(bl_tail *t, const bl_wal_at *after)
{
    bl_srw_wrlock(&t->lock);
    t->end = *after;
    if (t->oldest == NULL)
        t->base = *after; /* nothing before it to keep */
    atomic_store(&t->end_lsn, t->end.lsn);
    bl_srw_wrunlock(&t->lock);
}

/* Unlink the oldest group's versions: each is the oldest of its key. */
static void unlink_group(bl_tail *t, bl_tgroup *g)
{
    for (uint32_t i = 0; i < g->nver; i++) {
        bl_tver *v = &g->ver[i];
        if (v->newer != NULL) {
            v->newer->older = NULL;
            continue;
        }
        size_t s = find_v(t, v);
        if (t->slots[s].v == v)
            delete_slot(t, s);
    }
    atomic_fetch_sub(&t->nver, g->nver);
    atomic_fetch_sub(&t->bytes, g->bytes);
}

int bl_tail_trim(bl_tail *t, const bl_wal_at *ckpt)
{
    bl_srw_wrlock(&t->lock);
    if (t->pins > 0) {
        bl_srw_wrunlock(&t->lock);
        return 0;
    }
    if (ckpt->lsn >= t->end.lsn) {
        /* everything is in LMDB (or the log moved on without this index,
         * after a direct write): restart at the checkpoint */
        if (ckpt->lsn > t->end.lsn || ckpt->pos != t->end.pos) {
            t->end = *ckpt;
            forget_kept(t); /* frames this index never saw: keep nothing */
        }
        drop_all(t);
        t->base = t->end;
    } else {
        while (t->oldest != NULL && t->oldest->last_lsn <= ckpt->lsn) {
            bl_tgroup *g = t->oldest;
            t->oldest = g->next;
            if (t->oldest == NULL)
                t->newest = NULL;
            t->base = g->after;
            unlink_group(t, g);
            bl_tgroup_unref(g);
        }
    }
    atomic_store(&t->base_lsn, t->base.lsn);
    atomic_store(&t->end_lsn, t->end.lsn);
    bl_srw_wrunlock(&t->lock);
    return 1;
}

void bl_tail_pin(bl_tail *t)
{
    bl_srw_wrlock(&t->lock);
    t->pins++;
    t->keep = 1; /* a leader: kept records are worth their memory from now on */
    bl_srw_wrunlock(&t->lock);
}

void bl_tail_unpin(bl_tail *t)
{
    bl_srw_wrlock(&t->lock);
    t->pins--;
    bl_srw_wrunlock(&t->lock);
}

int bl_tail_get(bl_tail *t, unsigned table, const void *key, size_t klen, uint64_t bound,
                bl_tail_copy_fn fn, void *ctx, int *fnrc)
{
    int found = 0;
    if (atomic_load_explicit(&t->nver, memory_order_acquire) == 0)
        return 0;
    bl_srw_rdlock(&t->lock);
    if (t->nslots != 0) {
        size_t s = find(t, table, key, klen);
        for (const bl_tver *v = t->slots[s].v; v != NULL; v = v->older)
            if (v->lsn <= bound) {
                *fnrc = fn(ctx, v);
                found = 1;
                break;
            }
    }
    bl_srw_rdunlock(&t->lock);
    return found;
}

int bl_tail_groups(bl_tail *t, uint64_t bound, bl_tgroup ***out, size_t *n, bl_wal_at *base)
{
    size_t cnt = 0, cap = 16;
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
    bl_tgroup **gs = malloc(cap * sizeof(*gs));
    if (gs == NULL)
        return BINDLOG_ENOMEM;
    bl_srw_rdlock(&t->lock);
    *base = t->base;
    for (bl_tgroup *g = t->oldest; g != NULL && g->first_lsn <= bound; g = g->next) {
        if (cnt == cap) {
            /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
            bl_tgroup **ng = realloc(gs, 2 * cap * sizeof(*gs));
            if (ng == NULL) {
                bl_srw_rdunlock(&t->lock);
                bl_tail_groups_free(gs, cnt);
                return BINDLOG_ENOMEM;
            }
            gs = ng;
            cap *= 2;
        }
        bl_tgroup_ref(g);
        gs[cnt++] = g;
    }
    bl_srw_rdunlock(&t->lock);
    *out = gs;
    *n = cnt;
    return 0;
}

void bl_tail_groups_free(bl_tgroup **gs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bl_tgroup_unref(gs[i]);
    free(gs);
}

/* ---- sorted views ----------------------------------------------------------- */

static int tent_cmp(const void *a, const void *b)
{
    const bl_tent *x = a, *y = b;
    int c = bl_key_cmp(x->key, x->klen, y->key, y->klen);
    if (c != 0)
        return c;
    return x->lsn < y->lsn ? -1 : x->lsn > y->lsn;
}

int bl_tail_sorted(bl_tgroup *const *gs, size_t n, unsigned table, uint64_t above,
                   uint64_t bound, bl_tent **out, size_t *count)
{
    size_t cnt = 0, cap = 0;
    bl_tent *e = NULL;

    *out = NULL;
    *count = 0;
    for (size_t i = 0; i < n; i++) {
        const bl_tgroup *g = gs[i];
        if (g->last_lsn <= above || g->first_lsn > bound)
            continue;
        for (uint32_t j = 0; j < g->nver; j++) {
            const bl_tver *v = &g->ver[j];
            if (v->table != table || v->lsn <= above || v->lsn > bound)
                continue;
            if (cnt == cap) {
                size_t nc = cap ? 2 * cap : 64;
                bl_tent *ne = realloc(e, nc * sizeof(*ne));
                if (ne == NULL) {
                    free(e);
                    return BINDLOG_ENOMEM;
                }
                e = ne;
                cap = nc;
            }
            e[cnt++] = (bl_tent){v->key, v->val, v->klen, v->vlen, v->lsn};
        }
    }
    if (cnt == 0) {
        free(e);
        return 0;
    }
    /* LOG versions come in key order already; others need sorting */
    if (table != BL_DB_LOG)
        qsort(e, cnt, sizeof(*e), tent_cmp);
    /* keep the newest of each key: the last of each run */
    size_t w = 0;
    for (size_t i = 0; i < cnt; i++) {
        if (i + 1 < cnt && bl_key_cmp(e[i].key, e[i].klen, e[i + 1].key, e[i + 1].klen) == 0)
            continue;
        e[w++] = e[i];
    }
    *out = e;
    *count = w;
    return 0;
}

const bl_tent *bl_tent_find(const bl_tent *e, size_t n, const void *key, size_t klen)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = bl_key_cmp(e[mid].key, e[mid].klen, key, klen);
        if (c == 0)
            return &e[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
