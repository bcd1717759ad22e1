/*
 * recover_wal.c -- the write-ahead log as a salvage source of
 * bindlog_recover() (recover.h).
 *
 * In format 2 the records of the last group commits may exist only in
 * bindlog.wal: the checkpoint folds them into data.mdb later.  This source
 * reads the log in two passes:
 *
 *   1. the chain, exactly as recovery at open reads it (bl_wal_scan,
 *      lmdb/wal.h): from the point data.mdb's meta records name (meta
 *      "head" and meta "wal": the LSN, the position and the checksum chain
 *      right after the last checkpoint; a store never checkpointed has meta
 *      "wal" at position 0 and no "head" yet), frame after frame until the
 *      first one that is not valid;
 *   2. the ring, for frames of the same log past where the chain broke that
 *      stand on their own (bl_wal_loose_scan: salt, position, a body that
 *      parses, records that decode with their own checksums and
 *      consecutive LSNs), so that a damaged frame loses its own LSNs and
 *      nothing more; leftovers of an older history are told apart by the
 *      point each frame says the log was flushed to (salvage_loose).
 *
 * Whose log it is: data.mdb's meta "wal", else the log's header, else the
 * salt most frames carry.  A header naming another salt than meta "wal" is
 * another store's log, reported as not read.  Records are handed over with
 * the highest trust (a copy in the log is the one the writer last wrote).
 * The file is opened read-only, never followed as a link, never written.
 */
#define _GNU_SOURCE
#include "maint/recover.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "lmdb/wal.h"

#define ARENA_CHUNK ((size_t)1 << 20)

/* Copies of the records, in mappings the salvage unmaps when it is freed
 * (the scan's buffer is reused from frame to frame). */
typedef struct scan {
    bl_salvage *sv;
    unsigned char *chunk;
    size_t used, cap;
    uint64_t first, last, records;
    uint64_t durable; /* the last frame's durable point */
} scan;

static unsigned char *arena_copy(scan *s, const unsigned char *p, size_t n)
{
    if (s->chunk == NULL || s->cap - s->used < n) {
        size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        void *m = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        if (bl_salvage_keep(s->sv, m, cap) != 0) {
            munmap(m, cap);
            return NULL;
        }
        s->chunk = m;
        s->used = 0;
        s->cap = cap;
    }
    unsigned char *q = s->chunk + s->used;
    memcpy(q, p, n);
    s->used += (n + 7) & ~(size_t)7;
    if (s->used > s->cap)
        s->used = s->cap;
    return q;
}

/* Hand over one record of a frame with its after-images: the body bytes
 * [a, b) of the entries that follow it (its puts; after the group's last
 * record, the group's meta puts too, which the rebuild ignores). */
static int take_record(scan *s, uint64_t lsn, const bl_wentry *rec, const unsigned char *a,
                       const unsigned char *b)
{
    unsigned char *copy = arena_copy(s, rec->val, rec->vlen);
    unsigned char *after = b > a ? arena_copy(s, a, (size_t)(b - a)) : NULL;
    if (copy == NULL || (b > a && after == NULL))
        return BINDLOG_ENOMEM;
    int rc = bl_salvage_record_after(s->sv, lsn, copy, rec->vlen, BL_TRUST_WAL, after,
                                     after != NULL ? (size_t)(b - a) : 0);
    if (rc != 0)
        return rc;
    if (s->records++ == 0)
        s->first = lsn;
    s->last = lsn;
    return 0;
}

/* One valid frame: its records (bl_wframe_check verified that each
 * decodes with its LSN, first_lsn + i), each with the puts after it. */
static int on_frame(void *ctx, const bl_wframe *f, const bl_wal_at *after)
{
    scan *s = ctx;
    size_t off = 0, rec_end = 0;
    uint64_t lsn = f->first_lsn;
    bl_wentry e, rec;
    int have = 0, rc;
    (void)after;
    s->durable = f->durable;
    for (;;) {
        size_t at = off;
        int more = bl_wbody_next(f->body, f->body_len, &off, &e) == 1;
        if (!more || e.kind == BL_WE_RECORD) {
            if (have && (rc = take_record(s, lsn++, &rec, f->body + rec_end, f->body + at)) != 0)
                return rc;
            if (!more)
                break;
            rec = e;
            rec_end = off;
            have = 1;
        }
    }
    return 0;
}

static int not_read(bl_salvage *sv, const char *why)
{
    sv->wal_state = -1;
    snprintf(sv->wal_why, sizeof sv->wal_why, "%s", why);
    return 0;
}

/* ---- frames found on their own ------------------------------------------ */

/* A frame of the ring scan that stands on its own (bl_wframe_loose). */
typedef struct loose {
    uint64_t off, pos, first, last, durable;
} loose;

typedef struct ring {
    uint64_t salt;            /* 0: count salts (sal, nsal) instead */
    uint64_t after_lsn;       /* keep frames with LSNs beyond this ... */
    uint64_t after_pos;       /* ... lying at or after this position (within a lap) */
    uint64_t cap;
    VEC(loose) frames;
    struct {
        uint64_t salt, n;
    } sal[16];
    size_t nsal;
} ring;

static int ring_frame(void *ctx, const bl_wframe *f, uint64_t off)
{
    ring *g = ctx;
    if (g->salt == 0) {
        size_t i = 0;
        while (i < g->nsal && g->sal[i].salt != f->salt)
            i++;
        if (i == g->nsal && g->nsal < sizeof g->sal / sizeof g->sal[0])
            g->sal[g->nsal++].salt = f->salt;
        if (i < g->nsal)
            g->sal[i].n++;
        return 0;
    }
    if (f->salt != g->salt || f->first_lsn + f->nrec - 1 <= g->after_lsn ||
        f->pos < g->after_pos || (g->after_pos != 0 && f->pos >= g->after_pos + g->cap))
        return 0;
    loose l = {off, f->pos, f->first_lsn, f->first_lsn + f->nrec - 1, f->durable};
    return PUSH(g->frames, l);
}

/* By first LSN; of two frames for the same LSNs (leftovers of a history a
 * crash cut short, written over later), the one that knew the log flushed
 * further is the newer. */
static int cmp_loose(const void *a, const void *b)
{
    const loose *x = a, *y = b;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    if (x->durable != y->durable)
        return x->durable > y->durable ? -1 : 1;
    return x->pos > y->pos ? -1 : x->pos < y->pos;
}

/* Read the frame found at `off` again and hand its records over. */
static int take_loose(scan *s, int fd, uint64_t cap, const loose *l)
{
    bl_wframe f;
    int rc = 0;
    size_t want = BL_WAL_FRAME_HDR;
    unsigned char *buf = NULL;
    for (int pass = 0; pass < 2; pass++) {
        unsigned char *nb = realloc(buf, want);
        if (nb == NULL) {
            free(buf);
            return BINDLOG_ENOMEM;
        }
        buf = nb;
        ssize_t n = pread(fd, buf, want, (off_t)(BL_WAL_HDR + l->off));
        rc = bl_wframe_loose(buf, n < 0 ? 0 : (size_t)n, cap, l->off, &f);
        if (rc >= 0)
            break;
        want = BL_WAL_FRAME_HDR + (size_t)f.body_len;
    }
    rc = rc == 1 ? on_frame(s, &f, NULL) : 0;
    free(buf);
    return rc;
}

/*
 * The ring's frames of this log after the point the chain reached (`end`,
 * or everything when the chain could not be followed): every one that
 * stands on its own, by LSN, one per LSN: a damaged frame loses its own
 * LSNs and nothing more.
 *
 * Past a chain that ends, only frames of the writer that wrote its last
 * frame count, not leftovers of an older history (a tail a crash tore,
 * dropped at the next open and then written over in part, so that some of
 * its frames remain beyond the new end, never acknowledged).  `durable`
 * tells them apart: it only grows while a writer runs, and a writer that
 * recovers a torn log starts from the torn point, beyond anything the
 * torn history had flushed.  So a frame past the end counts when it says
 * at least what the chain's last frame says (`min_durable`).
 */
static int salvage_loose(scan *s, int fd, uint64_t cap, uint64_t salt, const bl_wal_at *end,
                         uint64_t min_durable)
{
    ring g;
    int rc;
    memset(&g, 0, sizeof g);
    g.salt = salt;
    g.cap = cap;
    g.after_lsn = end != NULL ? end->lsn : 0;
    g.after_pos = end != NULL ? end->pos : 0;
    if ((rc = bl_wal_loose_scan(fd, cap, NULL, ring_frame, &g)) != 0)
        goto out;
    size_t k = 0;
    for (size_t i = 0; i < g.frames.n; i++)
        if (g.frames.v[i].durable >= min_durable)
            g.frames.v[k++] = g.frames.v[i];
    g.frames.n = k;
    bl_rv_sort(g.frames.v, g.frames.n, sizeof(loose), cmp_loose);
    uint64_t last = g.after_lsn;
    for (size_t i = 0; i < g.frames.n && rc == 0; i++) {
        if (g.frames.v[i].first <= last)
            continue; /* an older copy of LSNs already taken */
        if ((rc = take_loose(s, fd, cap, &g.frames.v[i])) == 0)
            last = g.frames.v[i].last;
    }
out:
    free(g.frames.v);
    return rc;
}

/* The salt most frames of the ring carry (0 when there are none). */
static int majority_salt(int fd, uint64_t cap, uint64_t *salt)
{
    ring g;
    memset(&g, 0, sizeof g);
    int rc = bl_wal_loose_scan(fd, cap, NULL, ring_frame, &g);
    *salt = 0;
    uint64_t best = 0;
    for (size_t i = 0; i < g.nsal; i++)
        if (g.sal[i].n > best) {
            best = g.sal[i].n;
            *salt = g.sal[i].salt;
        }
    return rc;
}

static int cap_ok(uint64_t cap)
{
    return cap >= BL_WAL_MIN_CAP && cap <= BL_WAL_MAX_CAP && cap % 8 == 0;
}

int bl_salvage_wal(bl_salvage *sv, const char *dir)
{
    char path[4200], why[160];
    struct stat st;
    int fd, rc;

    if (snprintf(path, sizeof path, "%s/" BL_WAL_FILE, dir) >= (int)sizeof path)
        return BINDLOG_EINVAL;
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        if (err == ENOENT)
            return BINDLOG_ENOTFOUND; /* format 1, or a log never made: nothing to read */
        return not_read(sv, err == ELOOP ? "it is a symbolic link" : strerror(err));
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return not_read(sv, "it is not a regular file");
    }

    /* Whose log, and how big: data.mdb's meta "wal" (written when the
     * store was made), else the log's own header, else the size of the
     * file and the salt most of its frames carry. */
    int have_wal = sv->have_meta && sv->meta.have_wal && cap_ok(sv->meta.wal_cap);
    uint64_t hsalt = 0, hcap = 0, salt = 0, cap = 0;
    int hdr = bl_wal_header(fd, &hsalt, &hcap);
    if (have_wal) {
        salt = sv->meta.wal_salt;
        cap = sv->meta.wal_cap;
        if (hdr && (hsalt != salt || hcap != cap)) {
            close(fd);
            snprintf(why, sizeof why,
                     "it is another log (salt %016llx, data.mdb's is %016llx): the events "
                     "after the last checkpoint are not in it",
                     (unsigned long long)hsalt, (unsigned long long)salt);
            return not_read(sv, why);
        }
    } else if (hdr && cap_ok(hcap)) {
        salt = hsalt;
        cap = hcap;
    } else if (st.st_size > (off_t)BL_WAL_HDR && cap_ok((uint64_t)st.st_size - BL_WAL_HDR)) {
        cap = (uint64_t)st.st_size - BL_WAL_HDR;
        if ((rc = majority_salt(fd, cap, &salt)) != 0 || salt == 0) {
            close(fd);
            return rc == BINDLOG_ENOMEM ? rc : not_read(sv, "neither data.mdb nor its header says "
                                                            "whose log it is, and no frame in it "
                                                            "stands on its own");
        }
    } else {
        close(fd);
        return not_read(sv, "neither data.mdb's meta \"wal\" nor its header is readable, and its "
                            "size is not a log's");
    }
    /* A file cut short is read as far as it goes: its frames are intact up
     * to the cut, and what lay after is lost without anything to count it
     * by (said in wal_why, with the log read). */
    int cut = (uint64_t)st.st_size < BL_WAL_HDR + cap;

    scan s;
    memset(&s, 0, sizeof s);
    s.sv = sv;
    /* The chain from the checkpoint, as recovery reads it: a store never
     * checkpointed has meta "wal" (position 0) and no meta "head" yet. */
    int chain = have_wal && (sv->meta.have_head || sv->meta.whole);
    bl_wal_at start = {sv->meta.have_head ? sv->meta.head.lsn : 0, sv->meta.wal_pos,
                       sv->meta.wal_chain},
              end = start;
    rc = 0;
    if (chain)
        rc = bl_wal_scan(fd, cap, salt, &start, UINT64_MAX, on_frame, &s, &end);
    /* Then every frame of this log beyond where the chain broke: each
     * stands on its own (its records carry their own checksums). */
    if (rc == 0)
        rc = salvage_loose(&s, fd, cap, salt, chain ? &end : NULL, chain ? s.durable : 0);
    close(fd);
    if (rc == BINDLOG_ENOMEM)
        return rc;
    if (rc != 0) {
        snprintf(why, sizeof why, "reading it failed: %s", bindlog_strerror(rc));
        return not_read(sv, why);
    }
    sv->wal_state = 1;
    sv->wal_first = s.first;
    sv->wal_last = s.last;
    if (cut)
        snprintf(sv->wal_why, sizeof sv->wal_why,
                 "it is cut short (%llu of %llu bytes): frames past the cut are lost, and "
                 "nothing tells how many events they held",
                 (unsigned long long)st.st_size, (unsigned long long)(BL_WAL_HDR + cap));
    return 0;
}
