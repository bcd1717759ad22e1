/*
 * recover_wal.c -- the write-ahead log as a salvage source of
 * bindlog_recover() (recover.h).
 *
 * In format 2 the records of the last group commits may exist only in
 * bindlog.wal: the checkpoint folds them into data.mdb later.  This source
 * reads the log exactly as recovery at open does (bl_wal_scan, lmdb/wal.h):
 * from the point data.mdb's meta records name (meta "head" and meta "wal":
 * the LSN, the position and the checksum chain right after the last
 * checkpoint), frame after frame, each one valid only with the log's salt,
 * its own position, the next LSN, a checksum seeded with the previous
 * frame's, a body that parses exactly and records that decode with their
 * LSNs; the first frame that is not valid ends the log.  The records of
 * the valid frames are handed over with the highest trust (a copy in the
 * log is the one the writer last wrote).
 *
 * The log never decides alone where it starts: without data.mdb's meta
 * records (a damaged meta table on both trees) there is no chain to verify
 * the first frame with, and the log is reported as not read.  The file is
 * opened read-only, never followed as a link, never written.
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

/* One valid frame: its records (bl_wframe_check verified that each
 * decodes with its LSN, first_lsn + i). */
static int on_frame(void *ctx, const bl_wframe *f, const bl_wal_at *after)
{
    scan *s = ctx;
    size_t off = 0;
    uint64_t lsn = f->first_lsn;
    bl_wentry e;
    (void)after;
    while (bl_wbody_next(f->body, f->body_len, &off, &e) == 1) {
        if (e.kind != BL_WE_RECORD)
            continue;
        unsigned char *copy = arena_copy(s, e.val, e.vlen);
        if (copy == NULL)
            return BINDLOG_ENOMEM;
        int rc = bl_salvage_record(s->sv, lsn, copy, e.vlen, BL_TRUST_WAL);
        if (rc != 0)
            return rc;
        if (s->records++ == 0)
            s->first = lsn;
        s->last = lsn++;
    }
    return 0;
}

static int not_read(bl_salvage *sv, const char *why)
{
    sv->wal_state = -1;
    snprintf(sv->wal_why, sizeof sv->wal_why, "%s", why);
    return 0;
}

int bl_salvage_wal(bl_salvage *sv, const char *dir)
{
    char path[4200];
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
    if (!sv->have_meta || !sv->meta.have_head || !sv->meta.have_wal) {
        close(fd);
        return not_read(sv, "data.mdb's meta records \"head\" and \"wal\" are lost, so where "
                            "the log starts is unknown");
    }
    uint64_t cap = sv->meta.wal_cap;
    if (cap < BL_WAL_MIN_CAP || cap > BL_WAL_MAX_CAP || cap % 8 != 0) {
        close(fd);
        return not_read(sv, "data.mdb's meta \"wal\" names a log size no store has");
    }

    scan s;
    memset(&s, 0, sizeof s);
    s.sv = sv;
    bl_wal_at start = {sv->meta.head.lsn, sv->meta.wal_pos, sv->meta.wal_chain}, end;
    rc = bl_wal_scan(fd, cap, sv->meta.wal_salt, &start, UINT64_MAX, on_frame, &s, &end);
    close(fd);
    if (rc == BINDLOG_ENOMEM)
        return rc;
    if (rc != 0) {
        char why[160];
        snprintf(why, sizeof why, "reading it failed: %s", bindlog_strerror(rc));
        return not_read(sv, why);
    }
    sv->wal_state = 1;
    sv->wal_first = s.first;
    sv->wal_last = s.last;
    return 0;
}
