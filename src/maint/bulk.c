/*
 * bulk.c -- partitioned re-derivation of a whole log (see bulk.h).
 *
 * Threads: during the scan, the caller's thread feeds entries and a copier
 * thread spills the records it references (bl_bulk_record_ref); in
 * bl_bulk_run(), the caller's thread and one more decide partitions, then
 * a merge thread merges the runs and hands entries to the caller's thread
 * (which calls the sink and hashes the digest) through a ring.  Without a
 * second CPU everything runs on the caller's thread.
 *
 * Files: one spill file for the scan (each partition's entries, appended in
 * blocks of up to SPILL_BLOCK bytes; a partition remembers where its blocks
 * are), and per decide thread one file each for key runs, session runs and
 * children runs (a partition's run is one segment of those).  All are unlinked as
 * soon as they are created.
 *
 * Records fed by reference (bl_bulk_record_ref: replay and check, reading
 * a store's map; a full import, from its own transaction's pages) are not
 * spilled at all while there are at most REF_MAX of them: each partition
 * keeps the references in LSN order, after the image entries of its
 * spill, and its decide thread gathers them a block at a time into its
 * block buffer before deciding them.  Past REF_MAX the references so far
 * are spilled in order and the copier takes the rest, as before.
 *
 * Spill entry:    u8 tag, u32 len, payload
 *   'b' image binding   u16 key_len, key, binding value
 *   's' image session   u8 id_len, id, session value
 *   'r' record          u64 lsn (its position), record bytes
 * Integers are in host order: the files never leave this process.
 *
 * This file: the scan, the copier and bl_bulk_run(); deciding a partition
 * is bulk_decide.c, the merge bulk_merge.c (bulk_int.h: what they share).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define XXH_INLINE_ALL /* hashing names is on the hot path: no library calls */
#include <xxhash.h>

#include "maint/bulk_int.h"
#include "core/machine.h"
#include "platform/platform.h"

#define MAX_PARTS 512
#define DEFAULT_PARTS 64 /* when the input size is unknown */
#define MIN_PARTS 16     /* when the input has room for them (see bl_bulk_open) */
/* Records decided in place from the caller's memory (see above): 24 bytes
 * of reference each, so at most 24 MiB. */
#define REF_MAX ((size_t)1 << 20)

static atomic_uint_fast64_t tally_finished, tally_fell_back;

void bl_bulk_tally(uint64_t *finished, uint64_t *fell_back)
{
    if (finished != NULL)
        *finished = atomic_load(&tally_finished);
    if (fell_back != NULL)
        *fell_back = atomic_load(&tally_fell_back);
}

int bl_bulk_enabled(void)
{
    const char *v = getenv("BINDLOG_BULK");
    return v == NULL || strcmp(v, "0") != 0;
}

static int io_error(void)
{
    return errno == ENOSPC ? BINDLOG_ENOSPC : errno == ENOMEM ? BINDLOG_ENOMEM : BINDLOG_EIO;
}

/* ---- temporary files --------------------------------------------------- */

static int tmp_open(const char *dir, int *fd)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/bindlog-bulk-XXXXXX", dir) >= (int)sizeof(path))
        return BINDLOG_EINVAL;
    if ((*fd = mkstemp(path)) < 0)
        return io_error();
    unlink(path);
    return 0;
}

int bl_bulk_write_all(int fd, const void *p, size_t n, uint64_t off)
{
    const unsigned char *c = p;
    while (n > 0) {
        ssize_t w = pwrite(fd, c, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? io_error() : BINDLOG_EIO;
        c += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

int bl_bulk_read_all(int fd, void *p, size_t n, uint64_t off)
{
    unsigned char *c = p;
    while (n > 0) {
        ssize_t r = pread(fd, c, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? io_error() : BINDLOG_EIO; /* our own file came up short */
        c += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* ---- the scan: partitions spilled in blocks --------------------------- */


/* Seconds on the monotonic clock. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds of the whole process. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int bl_bulk_debug_on(void)
{
    const char *v = getenv("BINDLOG_BULK_DEBUG");
    return v != NULL && strcmp(v, "0") != 0;
}

void bl_bulk_set_progress(bl_bulk *b, bindlog_progress_fn fn, void *ctx, uint64_t total)
{
    b->progress = fn;
    b->progress_ctx = ctx;
    b->total = total;
}

const char *bl_bulk_why(const bl_bulk *b)
{
    return b == NULL ? NULL : b->why;
}

int bl_bulk_open(bl_bulk **out, const char *tmpdir, uint64_t size_hint)
{
    bl_bulk *b = calloc(1, sizeof(*b));
    uint64_t forced = 0, refs = 0;
    int force = bl_plat_env_number("BINDLOG_BULK_PARTITIONS", UINT32_MAX, &forced) && forced > 0;
    int rc;

    *out = NULL;
    if (b == NULL)
        return BINDLOG_ENOMEM;
    b->spill = -1;
    for (int k = 0; k < RUN_COUNT; k++)
        for (int i = 0; i < MAX_THREADS; i++)
            b->rfd[k][i] = -1;
    pthread_mutex_init(&b->mu, NULL);
    b->t_open = now_s();
    b->c_open = cpu_s();
    if (force)
        b->nparts = (unsigned)forced;
    else if (size_hint == 0)
        b->nparts = DEFAULT_PARTS;
    else
        b->nparts = (unsigned)((size_hint + BL_BULK_PART_BYTES - 1) / BL_BULK_PART_BYTES);
    /* Small inputs: more, smaller partitions.  A decide thread reuses its
     * memory from one partition to the next, and fresh pages cost a fault
     * and a clearing each, so the fewer partitions are decided at a time
     * out of the whole, the less memory is ever touched (100k records: 16
     * partitions fault in 2,300 pages, 4 partitions 5,500); and two
     * threads share 16 partitions evenly, not 3. */
    if (!force) {
        uint64_t small = size_hint / BL_BULK_PART_MIN_BYTES;
        if (small > MIN_PARTS)
            small = MIN_PARTS;
        if (b->nparts < small)
            b->nparts = (unsigned)small;
    }
    if (b->nparts < 1)
        b->nparts = 1;
    if (b->nparts > MAX_PARTS)
        b->nparts = MAX_PARTS;
    /* BINDLOG_BULK_REF_MAX=N: spill the references after N records (0: from
     * the first), so that the tests take that turn on small stores */
    b->ref_max =
        bl_plat_env_number("BINDLOG_BULK_REF_MAX", SIZE_MAX, &refs) ? (size_t)refs : REF_MAX;
    b->refs_off = b->ref_max == 0;
    b->ref_cap0 = (size_t)(size_hint / b->nparts / 128);
    if (b->ref_cap0 < 1024)
        b->ref_cap0 = 1024;
    if (b->ref_cap0 > REF_MAX / b->nparts + 1024)
        b->ref_cap0 = REF_MAX / b->nparts + 1024;
    if ((b->tmpdir = strdup(tmpdir)) == NULL ||
        (b->parts = calloc(b->nparts, sizeof(part))) == NULL) {
        bl_bulk_free(b);
        return BINDLOG_ENOMEM;
    }
    if ((rc = tmp_open(tmpdir, &b->spill)) != 0) {
        bl_bulk_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

static int copier_finish(bl_bulk *b);

void bl_bulk_free(bl_bulk *b)
{
    if (b == NULL)
        return;
    copier_finish(b);
    if (b->why != NULL)
        atomic_fetch_add(&tally_fell_back, 1);
    for (unsigned p = 0; b->parts != NULL && p < b->nparts; p++) {
        free(b->parts[p].buf);
        free(b->parts[p].blocks);
        free(b->parts[p].refs);
    }
    free(b->parts);
    if (b->spill >= 0)
        close(b->spill);
    for (int k = 0; k < RUN_COUNT; k++)
        for (int i = 0; i < MAX_THREADS; i++)
            if (b->rfd[k][i] >= 0)
                close(b->rfd[k][i]);
    pthread_mutex_destroy(&b->mu);
    free(b->tmpdir);
    free(b);
}

int bl_bulk_fall_back(bl_bulk *b, const char *why)
{
    if (b->why == NULL)
        b->why = why;
    return BL_BULK_FALLBACK;
}

static int own_failure(bl_bulk *b, int rc);

static int part_flush(bl_bulk *b, part *p)
{
    if (p->len == 0)
        return 0;
    if (p->nblocks == p->capblocks) {
        size_t cap = p->capblocks ? 2 * p->capblocks : 16;
        block *nb = realloc(p->blocks, cap * sizeof(block));
        if (nb == NULL)
            return BINDLOG_ENOMEM;
        p->blocks = nb;
        p->capblocks = cap;
    }
    int rc = bl_bulk_write_all(b->spill, p->buf, p->len, b->spill_size);
    if (rc != 0)
        return rc;
    p->blocks[p->nblocks++] = (block){b->spill_size, (uint32_t)p->len};
    b->spill_size += p->len;
    p->len = 0;
    return 0;
}

/* Append one entry (tag, then the pieces) to partition `pi`. */
static int spill(bl_bulk *b, unsigned pi, int tag, const void *a, size_t an, const void *c,
                 size_t cn, const void *d, size_t dn)
{
    part *p = &b->parts[pi];
    size_t n = 5 + an + cn + dn;
    uint32_t len = (uint32_t)(an + cn + dn);
    int rc;

    if (n > SPILL_BLOCK)
        return bl_bulk_fall_back(b, "entry larger than a spill block");
    if (p->buf == NULL && (p->buf = malloc(SPILL_BLOCK)) == NULL)
        return BINDLOG_ENOMEM;
    if (p->len + n > SPILL_BLOCK && (rc = part_flush(b, p)) != 0)
        return rc;
    unsigned char *o = p->buf + p->len;
    o[0] = (unsigned char)tag;
    memcpy(o + 1, &len, 4);
    memcpy(o + 5, a, an);
    if (cn)
        memcpy(o + 5 + an, c, cn);
    if (dn)
        memcpy(o + 5 + an + cn, d, dn);
    p->len += n;
    p->bytes += n;
    return 0;
}

static unsigned part_of(const bl_bulk *b, const void *key, size_t len)
{
    /* the high half: the in-memory tables hash with the low bits */
    return (unsigned)((XXH3_64bits(key, len) >> 32) % b->nparts);
}

int bl_bulk_image_binding(bl_bulk *b, const void *key, size_t key_len, const void *val,
                          size_t val_len)
{
    unsigned char h[2];
    if (key_len == 0 || key_len > BINDLOG_KEY_MAX)
        return bl_bulk_fall_back(b, "image binding with a bad key length");
    memcpy(h, &(uint16_t){(uint16_t)key_len}, 2);
    return own_failure(b, spill(b, part_of(b, key, key_len), 'b', h, 2, key, key_len, val,
                                val_len));
}

int bl_bulk_image_session(bl_bulk *b, const void *id, size_t id_len, const void *val,
                          size_t val_len, const void *key, size_t key_len)
{
    unsigned char h = (unsigned char)id_len;
    if (id_len == 0 || id_len > BINDLOG_ID_MAX || key_len == 0)
        return bl_bulk_fall_back(b, "damaged image session");
    /* a session lives with the key it is (or was last) bound to */
    return own_failure(b, spill(b, part_of(b, key, key_len), 's', &h, 1, id, id_len, val, val_len));
}

/* The partition of a record, by its key; UINT_MAX if it has none. */
static unsigned record_part(const bl_bulk *b, const unsigned char *r, size_t len)
{
    bl_record_head h;
    if (bl_record_peek(r, len, &h) != 0 || h.key_len == 0)
        return UINT_MAX;
    return part_of(b, h.key, h.key_len);
}

static int refs_to_spill(bl_bulk *b);

int bl_bulk_record(bl_bulk *b, const void *bytes, size_t len, uint64_t lsn)
{
    int rc;
    /* records fed by reference before this one come first: those held in
     * the partitions, and those the copier has still to spill (it must not
     * spill beside this thread either) */
    if (b->nrefs > 0 && (rc = refs_to_spill(b)) != 0)
        return rc;
    if (b->cp != NULL && (rc = copier_finish(b)) != 0)
        return own_failure(b, rc);
    unsigned p = record_part(b, bytes, len);
    if (p == UINT_MAX)
        return bl_bulk_fall_back(b, "record without a key");
    return own_failure(b, spill(b, p, 'r', &lsn, 8, bytes, len, NULL, 0));
}

/* ---- the copier ----------------------------------------------------------
 *
 * A record left where the caller keeps it would be read again when its
 * partition is decided: in partition order, which jumps through the
 * caller's memory and stalls on nearly every record (measured: ~450 ns a
 * record).  Copied into the spill while it is still in the cache, it is
 * read back in blocks.  The copy runs on a second thread (the other core
 * idles during the scan otherwise): the caller queues references in
 * batches, the copier spills them in order.  Without a second CPU the
 * caller copies them itself. */

#define COPY_BATCH 8192

typedef struct copier {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ref *batch[2];
    size_t n[2];     /* a handed-over batch's size; 0 = free */
    int fill;        /* the batch the caller fills */
    size_t filled;
    int end, rc;
    const char *why;
    bl_bulk *b;
} copier;

static void *copier_thread(void *arg)
{
    copier *c = arg;
    int rc = 0;
    for (int k = 0;; k ^= 1) {
        pthread_mutex_lock(&c->mu);
        while (c->n[k] == 0 && !c->end)
            pthread_cond_wait(&c->cv, &c->mu);
        size_t n = c->n[k];
        pthread_mutex_unlock(&c->mu);
        if (n == 0)
            break; /* ended, nothing left */
        for (size_t i = 0; rc == 0 && i < n; i++) {
            const ref *r = &c->batch[k][i];
            unsigned p = record_part(c->b, r->p, r->len);
            if (p == UINT_MAX) {
                c->why = "record without a key"; /* handed to b->why at the end */
                rc = BL_BULK_FALLBACK;
            } else {
                rc = spill(c->b, p, 'r', &r->lsn, 8, r->p, r->len, NULL, 0);
            }
        }
        pthread_mutex_lock(&c->mu);
        c->n[k] = 0;
        if (rc != 0)
            c->rc = rc;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
    return NULL;
}

/* Hand the batch being filled to the copier (waiting for it to be free). */
static int copier_hand(copier *c)
{
    int rc;
    pthread_mutex_lock(&c->mu);
    c->n[c->fill] = c->filled;
    pthread_cond_broadcast(&c->cv);
    c->fill ^= 1;
    while (c->n[c->fill] != 0 && c->rc == 0)
        pthread_cond_wait(&c->cv, &c->mu);
    rc = c->rc;
    pthread_mutex_unlock(&c->mu);
    c->filled = 0;
    return rc;
}

/* Wait for the copier to spill everything queued; frees it.  Its result. */
static int copier_finish(bl_bulk *b)
{
    copier *c = b->cp;
    int rc = 0;
    if (c == NULL)
        return 0;
    if (c->filled)
        rc = copier_hand(c);
    pthread_mutex_lock(&c->mu);
    c->end = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->th, NULL);
    if (rc == 0)
        rc = c->rc;
    if (c->why != NULL)
        bl_bulk_fall_back(b, c->why);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->batch[0]);
    free(c->batch[1]);
    free(c);
    b->cp = NULL;
    return rc;
}

static copier *copier_start(bl_bulk *b)
{
    copier *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->b = b;
    c->batch[0] = malloc(COPY_BATCH * sizeof(ref));
    c->batch[1] = malloc(COPY_BATCH * sizeof(ref));
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (c->batch[0] == NULL || c->batch[1] == NULL ||
        pthread_create(&c->th, NULL, copier_thread, c) != 0) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        free(c->batch[0]);
        free(c->batch[1]);
        free(c);
        return NULL;
    }
    return c;
}

/* More than REF_MAX references: spill those held so far, each partition's
 * in order (after its image entries, before any record to come), and let
 * the copier take the rest. */
static int refs_to_spill(bl_bulk *b)
{
    int rc = 0;
    for (unsigned pi = 0; pi < b->nparts; pi++) {
        part *p = &b->parts[pi];
        for (size_t i = 0; rc == 0 && i < p->nrefs; i++)
            rc = spill(b, pi, 'r', &p->refs[i].lsn, 8, p->refs[i].p, p->refs[i].len, NULL, 0);
        free(p->refs);
        p->refs = NULL;
        p->nrefs = p->caprefs = 0;
    }
    b->nrefs = 0;
    b->refs_off = 1;
    return own_failure(b, rc);
}

/* Hold a record by reference in its partition.  0, or BL_BULK_FALLBACK. */
static int ref_add(bl_bulk *b, const void *bytes, size_t len, uint64_t lsn, const void *key,
                   size_t key_len)
{
    if (key_len == 0)
        return bl_bulk_fall_back(b, "record without a key");
    unsigned pi = part_of(b, key, key_len);
    part *p = &b->parts[pi];
    if (p->nrefs == p->caprefs) {
        size_t cap = p->caprefs ? 2 * p->caprefs : b->ref_cap0;
        ref *nr = realloc(p->refs, cap * sizeof(ref));
        if (nr == NULL)
            return own_failure(b, BINDLOG_ENOMEM);
        p->refs = nr;
        p->caprefs = cap;
    }
    p->refs[p->nrefs++] = (ref){bytes, lsn, (uint32_t)len};
    return ++b->nrefs >= b->ref_max ? refs_to_spill(b) : 0;
}

int bl_bulk_record_ref(bl_bulk *b, const void *bytes, size_t len, uint64_t lsn, const void *key,
                       size_t key_len)
{
    if (len > BL_RECORD_MAX)
        return bl_bulk_fall_back(b, "record longer than any record");
    if (!b->refs_off)
        return ref_add(b, bytes, len, lsn, key, key_len);
    if (b->cp == NULL && !b->no_copier && sysconf(_SC_NPROCESSORS_ONLN) >= 2 &&
        (b->cp = copier_start(b)) == NULL)
        b->no_copier = 1;
    if (b->cp == NULL)
        return bl_bulk_record(b, bytes, len, lsn); /* one CPU: copy it here */
    copier *c = b->cp;
    c->batch[c->fill][c->filled++] = (ref){bytes, lsn, (uint32_t)len};
    return c->filled == COPY_BATCH ? own_failure(b, copier_hand(c)) : 0;
}

/* The caller's sink, remembering whether an error came from it. */
typedef struct sink_guard {
    const bl_bulk_sink *s;
    int rc;
    bl_bulk *b;
} sink_guard;

/* Progress through the merge, every 65536 keys and sessions. */
static void merge_progress(bl_bulk *b)
{
    if (b->progress != NULL && ++b->merged % 65536 == 0 && b->entries > 0)
        b->progress(b->progress_ctx,
                    2 * (b->total / 3) + b->total / 3 * (b->merged < b->entries ? b->merged
                                                                                  : b->entries) /
                                             b->entries,
                    b->total);
}

static int guard_binding(void *ctx, const void *k, size_t kn, const void *v, size_t vn)
{
    sink_guard *g = ctx;
    merge_progress(g->b);
    return g->rc = g->s->binding(g->s->ctx, k, kn, v, vn);
}

static int guard_session(void *ctx, const void *k, size_t kn, const void *v, size_t vn)
{
    sink_guard *g = ctx;
    merge_progress(g->b);
    return g->rc = g->s->session(g->s->ctx, k, kn, v, vn);
}

static int guard_child(void *ctx, uint64_t parent_lsn, const void *c, size_t cn)
{
    sink_guard *g = ctx;
    return g->rc = g->s->child(g->s->ctx, parent_lsn, c, cn);
}

/* An error of the bulk path's own (its temporary files, its memory) is a
 * reason to take the sequential path, which needs neither. */
static int own_failure(bl_bulk *b, int rc)
{
    if (rc >= 0)
        return rc;
    bl_bulk_fall_back(b, rc == BINDLOG_ENOMEM ? "out of memory"
                 : rc == BINDLOG_ENOSPC ? "no room for its temporary files"
                                        : "its temporary files failed");
    return BL_BULK_FALLBACK;
}

static int bulk_run(bl_bulk *b, const bl_bulk_sink *sink, bl_bulk_counts *counts,
                    unsigned char digest[BINDLOG_DIGEST_SIZE]);

int bl_bulk_run(bl_bulk *b, const bl_bulk_sink *sink, bl_bulk_counts *counts,
                unsigned char digest[BINDLOG_DIGEST_SIZE])
{
    sink_guard g = {sink, 0, b};
    bl_bulk_sink guarded = {&g, guard_binding, guard_session, guard_child};
    int rc = bulk_run(b, &guarded, counts, digest);
    if (rc < 0 && g.rc == 0)
        rc = own_failure(b, rc);
    return rc;
}

static int bulk_run(bl_bulk *b, const bl_bulk_sink *sink, bl_bulk_counts *counts,
                    unsigned char digest[BINDLOG_DIGEST_SIZE])
{
    bl_digest *dg = NULL;
    bl_bulk_worker w[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu >= 2 && b->nparts >= 2 ? 2 : 1, started = 0, rc = 0;
    double t_scan = now_s(), t_decide = 0, c_scan = cpu_s(), c_decide = 0;

    rc = copier_finish(b);
    for (unsigned p = 0; rc == 0 && p < b->nparts; p++) {
        rc = part_flush(b, &b->parts[p]);
        free(b->parts[p].buf);
        b->parts[p].buf = NULL;
    }
    for (int t = 0; rc == 0 && t < nt; t++)
        for (int k = 0; rc == 0 && k < RUN_COUNT; k++)
            rc = tmp_open(b->tmpdir, &b->rfd[k][t]);
    if (rc != 0)
        goto out;
    for (int t = 0; t < nt; t++) {
        w[t] = (bl_bulk_worker){b, t, 0};
        if (t == 0 || pthread_create(&th[t], NULL, bl_bulk_decide_thread, &w[t]) != 0)
            continue;
        started |= 1 << t;
    }
    bl_bulk_decide_thread(&w[0]);
    for (int t = 1; t < nt; t++)
        if (started & (1 << t))
            pthread_join(th[t], NULL);
    /* (a thread that could not start left its partitions to thread 0) */
    rc = b->rc;
    t_decide = now_s();
    c_decide = cpu_s();
    if (rc == 0 && digest != NULL && (dg = bl_digest_new()) == NULL)
        rc = BINDLOG_ENOMEM;
    if (rc == 0)
        rc = bl_bulk_merge_all(b, sink, (int)(ncpu >= 2 ? 2 : 1), dg);
    if (rc == 0 && dg != NULL)
        bl_digest_final(dg, digest);
    bl_digest_free(dg);
    if (bl_bulk_debug_on())
        fprintf(stderr,
                "bulk: %u partitions, %.1f MB spilled; scan %.3f s (cpu %.3f), decide %.3f s "
                "(cpu %.3f), merge %.3f s (cpu %.3f); rc %d%s%s\n",
                b->nparts, (double)b->spill_size / 1e6, t_scan - b->t_open, c_scan - b->c_open,
                t_decide - t_scan, c_decide - c_scan, now_s() - t_decide, cpu_s() - c_decide, rc,
                b->why ? ": " : "", b->why ? b->why : "");
    if (rc == 0 && counts != NULL)
        *counts = b->counts;
out:
    if (rc == 0)
        atomic_fetch_add(&tally_finished, 1);
    return rc;
}
