/*
 * bulk_merge.c -- the last phase of a bulk replay (bulk.h): the runs of
 * every partition merged in table order (bindings by key, then sessions
 * by id, then children index entries by the parent's created_lsn and the
 * child id), digested, and handed to the caller's sink; on a thread of its
 * own when there is a second CPU.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "maint/bulk_int.h"

/* ---- merge -------------------------------------------------------------- */

typedef struct rrun {
    int fd;
    uint64_t off, end;     /* file range still to read */
    unsigned char *buf;
    size_t len, pos;
    /* the current entry */
    const char *name;
    size_t name_len;
    const unsigned char *val;
    size_t val_len;
    uint64_t pfx;          /* the name's first 8 bytes, big-endian, zero-padded;
                            * children: the parent's created_lsn */
} rrun;

/* Make n bytes available at buf+pos.  0, 1 at the end of the run, or an error. */
static int rr_need(rrun *r, size_t n)
{
    if (r->len - r->pos >= n)
        return 0;
    if (r->off == r->end)
        return r->len == r->pos ? 1 : BINDLOG_EIO;
    memmove(r->buf, r->buf + r->pos, r->len - r->pos);
    r->len -= r->pos;
    r->pos = 0;
    size_t want = RUN_BUF - r->len;
    if (want > r->end - r->off)
        want = (size_t)(r->end - r->off);
    int rc = bl_bulk_read_all(r->fd, r->buf + r->len, want, r->off);
    if (rc != 0)
        return rc;
    r->off += want;
    r->len += want;
    return r->len - r->pos >= n ? 0 : BINDLOG_EIO;
}

/* Load the next entry of a run of this kind (RUN_KEYS, RUN_SESS or
 * RUN_KIDS; bulk_decide.c gives the layouts).  0, 1 at the end, or an
 * error. */
static int rr_next(rrun *r, int kind)
{
    if (kind == RUN_KIDS) {
        int rc = rr_need(r, 9);
        if (rc != 0)
            return rc;
        size_t nl = r->buf[r->pos + 8];
        if ((rc = rr_need(r, 9 + nl)) != 0)
            return rc < 0 ? rc : BINDLOG_EIO;
        memcpy(&r->pfx, r->buf + r->pos, 8);
        r->name = (const char *)r->buf + r->pos + 9;
        r->name_len = nl;
        r->val = NULL;
        r->val_len = 0;
        r->pos += 9 + nl;
        return 0;
    }
    int is_key = kind == RUN_KEYS;
    size_t nl_bytes = is_key ? 2 : 1;
    int rc = rr_need(r, nl_bytes);
    if (rc != 0)
        return rc;
    size_t nl = r->buf[r->pos];
    if (is_key) {
        uint16_t v;
        memcpy(&v, r->buf + r->pos, 2);
        nl = v;
    }
    if ((rc = rr_need(r, nl_bytes + nl + 4)) != 0)
        return rc < 0 ? rc : BINDLOG_EIO;
    uint32_t vl;
    memcpy(&vl, r->buf + r->pos + nl_bytes + nl, 4);
    size_t total = nl_bytes + nl + 4 + vl;
    if ((rc = rr_need(r, total)) != 0)
        return rc < 0 ? rc : BINDLOG_EIO;
    const unsigned char *e = r->buf + r->pos;
    r->name = (const char *)e + nl_bytes;
    r->name_len = nl;
    r->pfx = 0;
    for (size_t i = 0; i < 8; i++)
        r->pfx = r->pfx << 8 | (i < nl ? (unsigned char)r->name[i] : 0u);
    r->val = e + nl_bytes + nl + 4;
    r->val_len = vl;
    r->pos += total;
    return 0;
}

static int rr_less(const rrun *a, const rrun *b)
{
    if (a->pfx != b->pfx)
        return a->pfx < b->pfx;
    return bl_bulk_name_cmp(a->name, a->name_len, b->name, b->name_len) < 0;
}

static void heap_down(rrun **h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < n && rr_less(h[l], h[m]))
            m = l;
        if (l + 1 < n && rr_less(h[l + 1], h[m]))
            m = l + 1;
        if (m == i)
            return;
        rrun *t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Where the merge's digest entries go, each as bl_digest_add() takes it
 * (a session already in version 1, so that only hashing is left): into the
 * digest at once, or, with the merge on a thread of its own, onto the ring
 * for the caller's thread to hash.  That thread (the sink: LMDB writes or
 * comparisons) waits on the merge; the hashing evens the two out. */
typedef struct dsink {
    int (*add)(void *ctx, int tag, const void *k, size_t kn, const void *v, size_t vn);
    void *ctx;
} dsink;

static int digest_now(void *ctx, int tag, const void *k, size_t kn, const void *v, size_t vn)
{
    return bl_digest_add(ctx, tag, k, kn, v, vn);
}

/* Merge the runs of one kind (RUN_KEYS, RUN_SESS, RUN_KIDS) into sink, and
 * their digest entries into ds (NULL: no digest). */
static int merge(bl_bulk *b, int kind, const bl_bulk_sink *sink, const dsink *ds)
{
    static const char *const twice[RUN_COUNT] = {
        "a key in two partitions", "a session used by keys of two partitions",
        "a children index entry made in two partitions"};
    rrun *runs = calloc(b->nparts, sizeof(rrun));
    rrun **heap = calloc(b->nparts, sizeof(rrun *));
    unsigned char *canon = ds != NULL && kind == RUN_SESS ? malloc(BL_SVAL_MAX) : NULL;
    char last[BINDLOG_KEY_MAX + 1];
    uint64_t last_pfx = 0;
    size_t last_len = 0, n = 0;
    int rc = 0, have_last = 0;

    if (runs == NULL || heap == NULL || (ds != NULL && kind == RUN_SESS && canon == NULL)) {
        rc = BINDLOG_ENOMEM;
        goto out;
    }
    for (unsigned p = 0; rc == 0 && p < b->nparts; p++) {
        const seg *s = &b->parts[p].run[kind];
        rrun *r = &runs[p];
        r->fd = b->rfd[kind][s->file];
        r->off = s->off;
        r->end = s->off + s->len;
        if ((r->buf = malloc(RUN_BUF)) == NULL) {
            rc = BINDLOG_ENOMEM;
            break;
        }
        int nrc = rr_next(r, kind);
        if (nrc == 0)
            heap[n++] = r;
        else if (nrc < 0)
            rc = nrc;
    }
    for (size_t i = n; rc == 0 && i-- > 0;)
        heap_down(heap, n, i);
    while (rc == 0 && n > 0) {
        rrun *r = heap[0];
        size_t nl = r->name_len;
        if (have_last && last_pfx == r->pfx && last_len == nl && memcmp(last, r->name, nl) == 0) {
            /* an entry of two partitions: a session used by keys of both */
            rc = bl_bulk_fall_back(b, twice[kind]);
            break;
        }
        memcpy(last, r->name, nl);
        last_len = nl;
        last_pfx = r->pfx;
        have_last = 1;
        if (kind == RUN_KIDS) {
            rc = sink->child(sink->ctx, r->pfx, last, nl);
        } else if (kind == RUN_KEYS) {
            if (ds != NULL && (rc = ds->add(ds->ctx, 'B', last, nl, r->val, r->val_len)) != 0)
                break;
            rc = sink->binding(sink->ctx, last, nl, r->val, r->val_len);
        } else {
            /* Decoded once, for the digest (hashed whole) and for the live
             * table's reference form when the value is marked for it; not
             * at all when neither is wanted.  The values are the decide's
             * own encodings: a value that does not decode or encode again
             * is the sequential path's to name. */
            unsigned char rv[BL_SVAL_REF_MAX];
            bl_sval sv;
            int marked = r->val_len >= 2 && r->val[0] == 2 && (r->val[1] & BL_SVAL_F_REF);
            size_t rn = 0, cn = 0;
            if ((ds != NULL || marked) &&
                (bl_sval_decode_trusted(r->val, r->val_len, &sv) != 0 ||
                 (ds != NULL && (cn = bl_sval_encode_v1(&sv, canon, BL_SVAL_MAX)) == 0) ||
                 (marked && (rn = bl_sval_encode_ref(&sv, rv, sizeof rv)) == 0))) {
                rc = bl_bulk_fall_back(b, "a session does not encode");
                break;
            }
            if (ds != NULL && (rc = ds->add(ds->ctx, 'S', last, nl, canon, cn)) != 0)
                break;
            rc = marked ? sink->session(sink->ctx, last, nl, rv, rn)
                        : sink->session(sink->ctx, last, nl, r->val, r->val_len);
        }
        if (rc != 0)
            break;
        int nrc = rr_next(r, kind);
        if (nrc < 0) {
            rc = nrc;
            break;
        }
        if (nrc == 1)
            heap[0] = heap[--n];
        heap_down(heap, n, 0);
    }
out:
    for (unsigned p = 0; runs != NULL && p < b->nparts; p++)
        free(runs[p].buf);
    free(runs);
    free(heap);
    free(canon);
    return rc;
}

/* ---- the merge on a thread of its own ----------------------------------
 *
 * The merge (reading runs, the heap) and the sink (LMDB writes or
 * comparisons, which must stay on the caller's thread: LMDB transactions
 * are bound to it) take about as long as each other, so the merge runs on
 * a second thread and hands its output over through a ring of entries:
 *   u8 kind ('B', 'S', 'C'; 'b', 's': a digest entry of that tag, the
 *   session's value in version 1; 0: wrap to the start), 3 bytes unused,
 *   u16 name_len, u16 unused, u32 val_len, name, val, padded to 8 bytes
 * ('C': the name is the parent's created_lsn, 8 bytes in host order, the
 * value the child id).  The producer publishes in slices, so the two rarely touch the lock. */

#define RING_BYTES ((size_t)1 << 20)
#define RING_SLICE ((size_t)128 << 10)
#define RING_HDR 12

typedef struct ring {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned char *buf;
    uint64_t head;     /* producer: bytes written (its own view) */
    uint64_t pub;      /* bytes the consumer may read (under mu) */
    uint64_t tail;     /* bytes the consumer is done with (under mu) */
    uint64_t tail_seen; /* producer's copy of tail */
    int done, rc;      /* producer finished, with rc */
    int stop;          /* consumer failed: producer gives up */
    bl_bulk *b;
    bl_digest *dg;
    unsigned long full_waits, empty_waits; /* BINDLOG_BULK_DEBUG: who waited on whom */
} ring;

static int ring_publish(ring *r, int done, int rc)
{
    int stop;
    pthread_mutex_lock(&r->mu);
    r->pub = r->head;
    if (done) {
        r->done = 1;
        r->rc = rc;
    }
    stop = r->stop;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return stop;
}

static int ring_put(ring *r, int kind, const void *name, size_t nl, const void *val, size_t vl)
{
    size_t need = (RING_HDR + nl + vl + 7) & ~(size_t)7;
    size_t at = (size_t)(r->head % RING_BYTES);
    size_t waste = at + need > RING_BYTES ? RING_BYTES - at : 0;

    /* room for the entry (and the wrap before it) */
    if (r->head + waste + need - r->tail_seen > RING_BYTES) {
        pthread_mutex_lock(&r->mu);
        r->pub = r->head;
        pthread_cond_broadcast(&r->cv);
        while (r->head + waste + need - r->tail > RING_BYTES && !r->stop) {
            r->full_waits++;
            pthread_cond_wait(&r->cv, &r->mu);
        }
        r->tail_seen = r->tail;
        int stop = r->stop;
        pthread_mutex_unlock(&r->mu);
        if (stop)
            return BINDLOG_EIO; /* the consumer's error is the one returned */
    }
    if (waste) {
        r->buf[at] = 0;
        r->head += waste;
        at = 0;
    }
    unsigned char *e = r->buf + at;
    uint16_t n16 = (uint16_t)nl;
    uint32_t v32 = (uint32_t)vl;
    e[0] = (unsigned char)kind;
    memcpy(e + 4, &n16, 2);
    memcpy(e + 8, &v32, 4);
    memcpy(e + RING_HDR, name, nl);
    if (vl)
        memcpy(e + RING_HDR + nl, val, vl);
    r->head += need;
    if (r->head - r->pub >= RING_SLICE && ring_publish(r, 0, 0))
        return BINDLOG_EIO;
    return 0;
}

static int ring_binding(void *ctx, const void *k, size_t kn, const void *v, size_t vn)
{
    return ring_put(ctx, 'B', k, kn, v, vn);
}

static int ring_session(void *ctx, const void *k, size_t kn, const void *v, size_t vn)
{
    return ring_put(ctx, 'S', k, kn, v, vn);
}

static int ring_child(void *ctx, uint64_t parent_lsn, const void *c, size_t cn)
{
    return ring_put(ctx, 'C', &parent_lsn, 8, c, cn);
}

static int ring_digest(void *ctx, int tag, const void *k, size_t kn, const void *v, size_t vn)
{
    return ring_put(ctx, tag == 'B' ? 'b' : 's', k, kn, v, vn);
}

/* Every kind of run, in turn. */
static int merge_kinds(bl_bulk *b, const bl_bulk_sink *sink, const dsink *ds)
{
    int rc = 0;
    for (int kind = 0; rc == 0 && kind < RUN_COUNT; kind++)
        rc = merge(b, kind, sink, ds);
    return rc;
}

static void *merge_thread(void *arg)
{
    ring *r = arg;
    bl_bulk_sink sink = {r, ring_binding, ring_session, ring_child};
    dsink ds = {ring_digest, r};
    ring_publish(r, 1, merge_kinds(r->b, &sink, r->dg != NULL ? &ds : NULL));
    return NULL;
}

/* Take the merged entries off the ring into `sink` until the producer is
 * done.  Returns the sink's error, or the producer's result. */
static int ring_drain(ring *r, const bl_bulk_sink *sink)
{
    uint64_t tail = 0;
    int rc = 0;

    for (;;) {
        uint64_t pub;
        int done, prc;
        pthread_mutex_lock(&r->mu);
        r->tail = tail;
        pthread_cond_broadcast(&r->cv);
        while (r->pub == tail && !r->done) {
            r->empty_waits++;
            pthread_cond_wait(&r->cv, &r->mu);
        }
        pub = r->pub;
        done = r->done;
        prc = r->rc;
        pthread_mutex_unlock(&r->mu);
        while (rc == 0 && tail < pub) {
            const unsigned char *e = r->buf + tail % RING_BYTES;
            if (e[0] == 0) {
                tail += RING_BYTES - tail % RING_BYTES;
                continue;
            }
            uint16_t nl;
            uint32_t vl;
            memcpy(&nl, e + 4, 2);
            memcpy(&vl, e + 8, 4);
            const unsigned char *name = e + RING_HDR, *val = name + nl;
            switch (e[0]) {
            case 'B':
                rc = sink->binding(sink->ctx, name, nl, val, vl);
                break;
            case 'S':
                rc = sink->session(sink->ctx, name, nl, val, vl);
                break;
            case 'b':
            case 's':
                rc = bl_digest_add(r->dg, e[0] == 'b' ? 'B' : 'S', name, nl, val, vl);
                break;
            default: {
                uint64_t lsn;
                memcpy(&lsn, name, 8);
                rc = sink->child(sink->ctx, lsn, val, vl);
                break;
            }
            }
            tail += (RING_HDR + nl + vl + 7) & ~(size_t)7;
        }
        if (rc != 0) {
            pthread_mutex_lock(&r->mu);
            r->stop = 1;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
            return rc;
        }
        if (done && tail == pub)
            return prc;
    }
}

/* Merge into `sink`, on a second thread when there is one. */
int bl_bulk_merge_all(bl_bulk *b, const bl_bulk_sink *sink, int threads, bl_digest *dg)
{
    ring r;
    pthread_t th;
    int rc;

    dsink now = {digest_now, dg};
    if (threads < 2 || (r.buf = malloc(RING_BYTES)) == NULL)
        return merge_kinds(b, sink, dg != NULL ? &now : NULL);
    r.head = r.pub = r.tail = r.tail_seen = 0;
    r.full_waits = r.empty_waits = 0;
    r.done = r.rc = r.stop = 0;
    r.b = b;
    r.dg = dg;
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    if (pthread_create(&th, NULL, merge_thread, &r) != 0) {
        free(r.buf);
        pthread_mutex_destroy(&r.mu);
        pthread_cond_destroy(&r.cv);
        return merge_kinds(b, sink, dg != NULL ? &now : NULL);
    }
    rc = ring_drain(&r, sink);
    pthread_join(th, NULL);
    if (bl_bulk_debug_on())
        fprintf(stderr, "bulk: merge ring: producer waited %lu times, consumer %lu times\n",
                r.full_waits, r.empty_waits);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
    free(r.buf);
    return rc;
}

