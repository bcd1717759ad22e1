/*
 * bulk.c -- partitioned re-derivation of a whole log (see bulk.h).
 *
 * Threads: during the scan, the caller's thread feeds entries and a copier
 * thread spills the records it references (bl_bulk_record_ref); in
 * bl_bulk_run(), the caller's thread and one more decide partitions, then
 * a merge thread merges the runs and hands entries to the caller's thread
 * (which calls the sink) through a ring.  Without a second CPU everything
 * runs on the caller's thread.
 *
 * Files: one spill file for the scan (each partition's entries, appended in
 * blocks of up to SPILL_BLOCK bytes; a partition remembers where its blocks
 * are), and per decide thread one file for key runs and one for session
 * runs (a partition's run is one segment of those).  All are unlinked as
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
 * Key run entry:     u16 key_len, key, u32 val_len, val
 * Session run entry: u8 id_len, id, u32 val_len, val, u32 n, n x (u8 len, child id)
 * Integers are in host order: the files never leave this process.
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

#include "maint/bulk.h"
#include "core/digest.h"
#include "core/machine.h"
#include "core/record.h"

#define SPILL_BLOCK ((size_t)128 << 10) /* > the largest entry (a record: 66 KiB) */
#define RUN_BUF ((size_t)128 << 10) /* > the largest run entry (a session: 66 KiB) */
/* a record held by reference is gathered into one block before it is
 * decided (decide_part), and bl_bulk_record_ref refuses longer ones */
_Static_assert(BL_RECORD_MAX <= SPILL_BLOCK, "a record fits in a spill block");
#define MAX_PARTS 512
#define DEFAULT_PARTS 64 /* when the input size is unknown */
#define MIN_PARTS 16     /* when the input has room for them (see bl_bulk_open) */
#define MAX_THREADS 2
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

static int write_all(int fd, const void *p, size_t n, uint64_t off)
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

static int read_all(int fd, void *p, size_t n, uint64_t off)
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

/* An append-only buffered writer. */
typedef struct wfile {
    int fd;
    unsigned char *buf;
    size_t len;
    uint64_t size; /* bytes written to the file, plus len */
} wfile;

static int wf_flush(wfile *w)
{
    int rc = write_all(w->fd, w->buf, w->len, w->size - w->len);
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

/* ---- the scan: partitions spilled in blocks --------------------------- */

typedef struct block {
    uint64_t off;
    uint32_t len;
} block;

typedef struct seg {
    int file;      /* index of the decide thread whose files hold it */
    uint64_t off, len;
} seg;

typedef struct ref {
    const void *p;
    uint64_t lsn;
    uint32_t len;
} ref;

typedef struct part {
    unsigned char *buf; /* the block being filled */
    size_t len;
    block *blocks;
    size_t nblocks, capblocks;
    uint64_t bytes;
    ref *refs;      /* records decided in place, after the spilled entries */
    size_t nrefs, caprefs;
    seg keys, sess; /* its runs, once decided */
} part;

struct bl_bulk {
    char *tmpdir;
    int spill;
    uint64_t spill_size;
    unsigned nparts;
    part *parts;
    const char *why;
    /* decide */
    int kfd[MAX_THREADS], sfd[MAX_THREADS];
    atomic_uint next_part;
    atomic_int stop;   /* a thread failed: the others stop too */
    int rc;            /* first failure */
    pthread_mutex_t mu;
    bl_bulk_counts counts;
    double t_open, c_open; /* BINDLOG_BULK_DEBUG: phase times, wall and CPU */
    /* the copier: records fed by reference are copied into the spill by a
     * second thread, in the order they come (see bl_bulk_record_ref) */
    struct copier *cp;
    int no_copier;
    size_t nrefs;      /* records held by reference in the partitions */
    size_t ref_max;    /* REF_MAX, or BINDLOG_BULK_REF_MAX for the tests */
    size_t ref_cap0;   /* first size of a partition's references (its share
                        * of the input at 192 bytes a record, a quarter
                        * more than the bench's: no regrowth, whose copy
                        * faults in pages twice) */
    int refs_off;      /* more than REF_MAX came: references spilled, copier on */
    /* progress: the scan is the first third of `total`, deciding the
     * second, merging the last (bl_bulk_set_progress) */
    bindlog_progress_fn progress;
    void *progress_ctx;
    uint64_t total;
    unsigned parts_done;      /* under mu */
    uint64_t entries, merged; /* keys and sessions decided (under mu) / merged */
};

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

static int debug_on(void)
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
    const char *force = getenv("BINDLOG_BULK_PARTITIONS");
    int rc;

    *out = NULL;
    if (b == NULL)
        return BINDLOG_ENOMEM;
    b->spill = -1;
    for (int i = 0; i < MAX_THREADS; i++)
        b->kfd[i] = b->sfd[i] = -1;
    pthread_mutex_init(&b->mu, NULL);
    b->t_open = now_s();
    b->c_open = cpu_s();
    if (force != NULL && atoi(force) > 0)
        b->nparts = (unsigned)atoi(force);
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
    if (force == NULL || atoi(force) <= 0) {
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
    const char *refs = getenv("BINDLOG_BULK_REF_MAX");
    b->ref_max = refs != NULL && atoi(refs) >= 0 ? (size_t)atoi(refs) : REF_MAX;
    b->refs_off = b->ref_max == 0;
    b->ref_cap0 = (size_t)(size_hint / b->nparts / 192);
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
    for (int i = 0; i < MAX_THREADS; i++) {
        if (b->kfd[i] >= 0)
            close(b->kfd[i]);
        if (b->sfd[i] >= 0)
            close(b->sfd[i]);
    }
    pthread_mutex_destroy(&b->mu);
    free(b->tmpdir);
    free(b);
}

static int fall_back(bl_bulk *b, const char *why)
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
    int rc = write_all(b->spill, p->buf, p->len, b->spill_size);
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
        return fall_back(b, "entry larger than a spill block");
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
        return fall_back(b, "image binding with a bad key length");
    memcpy(h, &(uint16_t){(uint16_t)key_len}, 2);
    return own_failure(b, spill(b, part_of(b, key, key_len), 'b', h, 2, key, key_len, val,
                                val_len));
}

int bl_bulk_image_session(bl_bulk *b, const void *id, size_t id_len, const void *val,
                          size_t val_len)
{
    bl_sval s;
    unsigned char h = (unsigned char)id_len;
    if (id_len == 0 || id_len > BINDLOG_ID_MAX || bl_sval_decode(val, val_len, &s) != 0 ||
        s.key_len == 0)
        return fall_back(b, "damaged image session");
    /* a session lives with the key it is (or was last) bound to */
    return own_failure(b, spill(b, part_of(b, s.key, s.key_len), 's', &h, 1, id, id_len, val,
                                val_len));
}

/* The partition of a record, by its key; UINT_MAX if it has none. */
static unsigned record_part(const bl_bulk *b, const unsigned char *r, size_t len)
{
    if (len < BL_RECORD_FIXED + BL_RECORD_CHECKSUM)
        return UINT_MAX;
    size_t key_len = bl_get16(r + 28);
    if (key_len == 0 || BL_RECORD_FIXED + key_len + BL_RECORD_CHECKSUM > len)
        return UINT_MAX;
    return part_of(b, r + BL_RECORD_FIXED, key_len);
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
        return fall_back(b, "record without a key");
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
    int next;        /* the batch the copier takes next */
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
        fall_back(b, c->why);
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
static int ref_add(bl_bulk *b, const void *bytes, size_t len, uint64_t lsn)
{
    unsigned pi = record_part(b, bytes, len);
    if (pi == UINT_MAX)
        return fall_back(b, "record without a key");
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

int bl_bulk_record_ref(bl_bulk *b, const void *bytes, size_t len, uint64_t lsn)
{
    if (len > BL_RECORD_MAX)
        return fall_back(b, "record longer than any record");
    if (!b->refs_off)
        return ref_add(b, bytes, len, lsn);
    if (b->cp == NULL && !b->no_copier && sysconf(_SC_NPROCESSORS_ONLN) >= 2 &&
        (b->cp = copier_start(b)) == NULL)
        b->no_copier = 1;
    if (b->cp == NULL)
        return bl_bulk_record(b, bytes, len, lsn); /* one CPU: copy it here */
    copier *c = b->cp;
    c->batch[c->fill][c->filled++] = (ref){bytes, lsn, (uint32_t)len};
    return c->filled == COPY_BATCH ? own_failure(b, copier_hand(c)) : 0;
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

typedef struct kid {
    uint32_t parent, child;
} kid;

typedef struct pend {    /* an image session's parent, resolved at the end */
    const char *parent;
    uint32_t parent_len, child;
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
    /* the children index of the image: its parent is looked up at the end,
     * it may come later; the parent bytes live in the stored value, which
     * the arena keeps until the partition is done */
    const ent *e = &d->sess.v[idx];
    GROW(d->pd, d->npd, d->cappd);
    d->pd[d->npd++] = (pend){(const char *)e->val + ((const unsigned char *)s.parent - val),
                             (uint32_t)s.parent_len, idx};
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
    if ((rc = bl_plan_encode_state(&plan, &d->enc)) != 0)
        return rc;

    const unsigned char *b = d->enc.buf;
    if ((rc = tab_put(d, &d->keys, rec.key, rec.key_len, b + d->enc.bval_off, d->enc.bval_len,
                      &ki)) != 0)
        return rc;
    for (unsigned i = 0; i < plan.nsess; i++)
        if ((rc = tab_put(d, &d->sess, b + d->enc.sid_off[i], plan.sess[i].id_len,
                          b + d->enc.sval_off[i], d->enc.sval_len[i], &si)) != 0)
            return rc;
    if (d->enc.child_len) {
        const char *ck = (const char *)b + d->enc.child_off;
        size_t pl = plan.child_parent_len, cl = d->enc.child_len - pl - 1;
        int64_t pi = tab_find(&d->sess, ck, pl, XXH3_64bits(ck, pl));
        int64_t ci = tab_find(&d->sess, ck + pl + 1, cl, XXH3_64bits(ck + pl + 1, cl));
        if (pi < 0 || ci < 0)
            return (d->why = "a child's parent is not in its partition"), BL_BULK_FALLBACK;
        GROW(d->k, d->nk, d->capk);
        d->k[d->nk++] = (kid){(uint32_t)pi, (uint32_t)ci};
    }
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

static int name_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c != 0 ? c : (al > bl) - (al < bl);
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
                     name_cmp(ey->name, ey->name_len, ex->name, ex->name_len) < 0))
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
    size_t *cnt = calloc((size_t)n + 1, sizeof(size_t));
    kid *tmp = malloc((d->nk ? d->nk : 1) * sizeof(kid));
    int rc = 0;
    if (cnt == NULL || tmp == NULL) {
        free(cnt);
        free(tmp);
        return BINDLOG_ENOMEM;
    }
    /* by (parent rank, child rank): counting sort on the child, then a
     * stable one on the parent */
    for (int pass = 0; pass < 2; pass++) {
        memset(cnt, 0, ((size_t)n + 1) * sizeof(size_t));
        kid *from = pass == 0 ? d->k : tmp, *to = pass == 0 ? tmp : d->k;
        for (size_t i = 0; i < d->nk; i++)
            cnt[d->sess.v[pass == 0 ? from[i].child : from[i].parent].rank + 1]++;
        for (uint32_t r = 0; r < n; r++)
            cnt[r + 1] += cnt[r];
        for (size_t i = 0; i < d->nk; i++)
            to[cnt[d->sess.v[pass == 0 ? from[i].child : from[i].parent].rank]++] = from[i];
    }
    size_t ki = 0;
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
        uint32_t vl = e->val_len, nk = 0;
        size_t k0 = ki;
        while (ki < d->nk && d->k[ki].parent == order[r])
            ki++, nk++;
        if ((rc = wf_put(w, &il, 1)) == 0 && (rc = wf_put(w, e->name, il)) == 0 &&
            (rc = wf_put(w, &vl, 4)) == 0 && (rc = wf_put(w, e->val, vl)) == 0)
            rc = wf_put(w, &nk, 4);
        for (size_t j = k0; rc == 0 && j < ki; j++) {
            const ent *c = &d->sess.v[d->k[j].child];
            uint8_t cl = (uint8_t)c->name_len;
            if ((rc = wf_put(w, &cl, 1)) == 0)
                rc = wf_put(w, c->name, cl);
        }
    }
    free(cnt);
    free(tmp);
    return rc;
}

/* Records held by reference: how many places ahead to prefetch. */
#define REF_PREFETCH 16

/* Decide partition pi; its runs go to thread t's files. */
static int decide_part(bl_bulk *b, unsigned pi, int t, dstate *d, wfile *kw, wfile *sw)
{
    part *p = &b->parts[pi];
    uint32_t *korder = NULL, *sorder = NULL;
    int rc = 0;

    dstate_reset(d);
    for (size_t bi = 0; rc == 0 && bi < p->nblocks; bi++) {
        if (atomic_load(&b->stop))
            return 0;
        if ((rc = read_all(b->spill, d->in, p->blocks[bi].len, p->blocks[bi].off)) != 0)
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
    for (size_t i = 0; rc == 0 && i < d->npd; i++) {
        const pend *q = &d->pd[i];
        int64_t pidx = tab_find(&d->sess, q->parent, q->parent_len,
                                XXH3_64bits(q->parent, q->parent_len));
        if (pidx < 0) {
            d->why = "an image session's parent is not in its partition";
            rc = BL_BULK_FALLBACK;
            break;
        }
        GROW(d->k, d->nk, d->capk);
        d->k[d->nk++] = (kid){(uint32_t)pidx, q->child};
    }
    if (rc == 0 && ((korder = rank_names(d->keys.v, d->keys.n)) == NULL ||
                    (sorder = rank_names(d->sess.v, d->sess.n)) == NULL))
        rc = BINDLOG_ENOMEM;
    if (rc == 0) {
        p->keys = (seg){t, kw->size, 0};
        rc = write_key_run(d, korder, kw);
        p->keys.len = kw->size - p->keys.off;
    }
    if (rc == 0) {
        p->sess = (seg){t, sw->size, 0};
        rc = write_session_run(d, sorder, sw);
        p->sess.len = sw->size - p->sess.off;
    }
    free(korder);
    free(sorder);
    return rc;
}

typedef struct worker {
    bl_bulk *b;
    int t;
    int rc;
} worker;

static void *decide_thread(void *arg)
{
    worker *w = arg;
    bl_bulk *b = w->b;
    dstate d;
    wfile kw = {b->kfd[w->t], NULL, 0, 0}, sw = {b->sfd[w->t], NULL, 0, 0};
    int rc = 0;

    memset(&d, 0, sizeof(d));
    kw.buf = malloc(RUN_BUF);
    sw.buf = malloc(RUN_BUF);
    d.in = malloc(SPILL_BLOCK);
    if (kw.buf == NULL || sw.buf == NULL || d.in == NULL)
        rc = BINDLOG_ENOMEM;
    while (rc == 0 && !atomic_load(&b->stop)) {
        unsigned pi = atomic_fetch_add(&b->next_part, 1);
        if (pi >= b->nparts)
            break;
        rc = decide_part(b, pi, w->t, &d, &kw, &sw);
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
    if (rc == 0)
        rc = wf_flush(&kw);
    if (rc == 0)
        rc = wf_flush(&sw);
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
    free(kw.buf);
    free(sw.buf);
    w->rc = rc;
    return NULL;
}

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
    uint64_t pfx;          /* the name's first 8 bytes, big-endian, zero-padded */
    uint32_t items;        /* sessions: children still to read */
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
    int rc = read_all(r->fd, r->buf + r->len, want, r->off);
    if (rc != 0)
        return rc;
    r->off += want;
    r->len += want;
    return r->len - r->pos >= n ? 0 : BINDLOG_EIO;
}

/* Load the next entry's header, name and value (is_key: key run layout).
 * 0, 1 at the end, or an error. */
static int rr_next(rrun *r, int is_key)
{
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
    size_t total = nl_bytes + nl + 4 + vl + (is_key ? 0 : 4); /* sessions: children count */
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
    r->items = 0;
    if (!is_key)
        memcpy(&r->items, e + total - 4, 4);
    r->pos += total;
    return 0;
}

static int rr_less(const rrun *a, const rrun *b)
{
    if (a->pfx != b->pfx)
        return a->pfx < b->pfx;
    return name_cmp(a->name, a->name_len, b->name, b->name_len) < 0;
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

static int merge(bl_bulk *b, int is_key, const bl_bulk_sink *sink, bl_digest *dg)
{
    rrun *runs = calloc(b->nparts, sizeof(rrun));
    rrun **heap = calloc(b->nparts, sizeof(rrun *));
    char last[BINDLOG_KEY_MAX + 1];
    size_t last_len = 0, n = 0;
    int rc = 0, have_last = 0;

    if (runs == NULL || heap == NULL) {
        rc = BINDLOG_ENOMEM;
        goto out;
    }
    for (unsigned p = 0; rc == 0 && p < b->nparts; p++) {
        const seg *s = is_key ? &b->parts[p].keys : &b->parts[p].sess;
        rrun *r = &runs[p];
        r->fd = is_key ? b->kfd[s->file] : b->sfd[s->file];
        r->off = s->off;
        r->end = s->off + s->len;
        if ((r->buf = malloc(RUN_BUF)) == NULL) {
            rc = BINDLOG_ENOMEM;
            break;
        }
        int nrc = rr_next(r, is_key);
        if (nrc == 0)
            heap[n++] = r;
        else if (nrc < 0)
            rc = nrc;
    }
    for (size_t i = n; rc == 0 && i-- > 0;)
        heap_down(heap, n, i);
    while (rc == 0 && n > 0) {
        rrun *r = heap[0];
        char name[BINDLOG_KEY_MAX + 1];
        size_t nl = r->name_len;
        memcpy(name, r->name, nl);
        if (have_last && last_len == nl && memcmp(last, name, nl) == 0) {
            /* a session used by keys of two partitions */
            rc = fall_back(b, is_key ? "a key in two partitions"
                                     : "a session used by keys of two partitions");
            break;
        }
        memcpy(last, name, nl);
        last_len = nl;
        have_last = 1;
        if (dg != NULL && (rc = bl_digest_add(dg, is_key ? 'B' : 'S', name, nl, r->val,
                                              r->val_len)) != 0)
            break;
        rc = is_key ? sink->binding(sink->ctx, name, nl, r->val, r->val_len)
                    : sink->session(sink->ctx, name, nl, r->val, r->val_len);
        for (uint32_t i = r->items; rc == 0 && i > 0; i--) { /* a session's children */
            if ((rc = rr_need(r, 1)) != 0 || (rc = rr_need(r, 1 + r->buf[r->pos])) != 0)
                break;
            size_t cl = r->buf[r->pos];
            rc = sink->child(sink->ctx, name, nl, r->buf + r->pos + 1, cl);
            r->pos += 1 + cl;
        }
        if (rc > 0)
            rc = BINDLOG_EIO; /* a run ended inside an entry */
        if (rc != 0)
            break;
        int nrc = rr_next(r, is_key);
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
    return rc;
}

/* ---- the merge on a thread of its own ----------------------------------
 *
 * The merge (reading runs, the heap) and the sink (LMDB writes or
 * comparisons, which must stay on the caller's thread: LMDB transactions
 * are bound to it) take about as long as each other, so the merge runs on
 * a second thread and hands its output over through a ring of entries:
 *   u8 kind ('B', 'H', 'S', 'C'; 0: wrap to the start), 3 bytes unused,
 *   u16 name_len, u16 unused, u32 val_len, name, val, padded to 8 bytes.
 * The producer publishes in slices, so the two rarely touch the lock. */

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

static int ring_child(void *ctx, const void *p, size_t pn, const void *c, size_t cn)
{
    return ring_put(ctx, 'C', p, pn, c, cn);
}

static void *merge_thread(void *arg)
{
    ring *r = arg;
    bl_bulk_sink sink = {r, ring_binding, ring_session, ring_child};
    int rc = merge(r->b, 1, &sink, r->dg);
    if (rc == 0)
        rc = merge(r->b, 0, &sink, r->dg);
    ring_publish(r, 1, rc);
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
            default:
                rc = sink->child(sink->ctx, name, nl, val, vl);
                break;
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
static int merge_all(bl_bulk *b, const bl_bulk_sink *sink, int threads, bl_digest *dg)
{
    ring r;
    pthread_t th;
    int rc;

    if (threads < 2 || (r.buf = malloc(RING_BYTES)) == NULL) {
        rc = merge(b, 1, sink, dg);
        return rc == 0 ? merge(b, 0, sink, dg) : rc;
    }
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
        rc = merge(b, 1, sink, dg);
        return rc == 0 ? merge(b, 0, sink, dg) : rc;
    }
    rc = ring_drain(&r, sink);
    pthread_join(th, NULL);
    if (debug_on())
        fprintf(stderr, "bulk: merge ring: producer waited %lu times, consumer %lu times\n",
                r.full_waits, r.empty_waits);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
    free(r.buf);
    return rc;
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

static int guard_child(void *ctx, const void *p, size_t pn, const void *c, size_t cn)
{
    sink_guard *g = ctx;
    return g->rc = g->s->child(g->s->ctx, p, pn, c, cn);
}

/* An error of the bulk path's own (its temporary files, its memory) is a
 * reason to take the sequential path, which needs neither. */
static int own_failure(bl_bulk *b, int rc)
{
    if (rc >= 0)
        return rc;
    fall_back(b, rc == BINDLOG_ENOMEM ? "out of memory"
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
    worker w[MAX_THREADS];
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
        if ((rc = tmp_open(b->tmpdir, &b->kfd[t])) == 0)
            rc = tmp_open(b->tmpdir, &b->sfd[t]);
    if (rc != 0)
        goto out;
    for (int t = 0; t < nt; t++) {
        w[t] = (worker){b, t, 0};
        if (t == 0 || pthread_create(&th[t], NULL, decide_thread, &w[t]) != 0)
            continue;
        started |= 1 << t;
    }
    decide_thread(&w[0]);
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
        rc = merge_all(b, sink, (int)(ncpu >= 2 ? 2 : 1), dg);
    if (rc == 0 && dg != NULL)
        bl_digest_final(dg, digest);
    bl_digest_free(dg);
    if (debug_on())
        fprintf(stderr,
                "bulk: %u partitions, %.1f MB spilled; scan %.2f s (cpu %.2f), decide %.2f s "
                "(cpu %.2f), merge %.2f s (cpu %.2f); rc %d%s%s\n",
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
