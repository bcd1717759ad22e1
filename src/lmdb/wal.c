/*
 * wal.c -- the write-ahead log file: header, frames, the ring reader and
 * the scan for the valid prefix (wal.h; docs/format.md has the bytes).
 *
 * Log file header (the first 64 bytes of a 4096-byte block):
 *   0  8  magic "BLWALOG\0"
 *   8  4  version (2; 1 is still read: the same bytes)
 *   12 4  header size (4096)
 *   16 8  cap: bytes of the ring
 *   24 8  salt
 *   32 8  filled: bytes of the ring's first lap known written (zeros or
 *         frames); the rest was only reserved (see bl_wal_create)
 *   40 16 reserved, zero
 *   56 8  XXH3-64 of bytes [0, 56)
 * Recovery takes the salt and cap from LMDB's meta "wal" record, written
 * when the store is created: an intact header that names another salt or
 * cap is another store's log and is refused; a damaged header loses
 * nothing (frames carry the salt themselves; a damaged `filled` reads as 0
 * and costs a refill).
 *
 * Frame header (64 bytes, then the body, then zero padding to 8 bytes):
 *   0  4  magic "BLWF"
 *   4  2  flags (bit 0 WRAP; others zero)
 *   6  2  version (2; version 1 frames, with zeros at 48, are still read)
 *   8  8  salt
 *   16 8  pos: the frame's logical position
 *   24 8  first LSN (WRAP: the next LSN)
 *   32 4  number of records
 *   36 4  body length
 *   40 8  time_ms of the group's last record (i64)
 *   48 8  durable: a logical position up to which the log was known
 *         flushed when the frame was written (0: nothing known).  A frame
 *         after a break in the log that says the log was flushed beyond
 *         the break proves the break is damage, not a torn tail
 *         (bl_wal_past_break)
 *   56 8  checksum: XXH3-64 of the body seeded with XXH3-64 of header bytes
 *         [0, 56) seeded with the previous frame's checksum (the chain)
 * Body entries (8-byte header, then bytes):
 *   0 1 kind (1 record, 2 put)   1 1 table (put; 0 for a record)
 *   2 2 key length (put; 0 for a record)   4 4 value length
 *   then key, then value (a record: its bytes, ending in its own checksum)
 */
#define _GNU_SOURCE
#include "lmdb/wal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL /* a frame is checksummed per group: no library calls */
#include <xxhash.h>

#include "core/error.h"
#include "platform/platform.h"
#include "core/record.h"
#include "lmdb/store.h"

#define WAL_MAGIC "BLWALOG"
#define FRAME_MAGIC 0x46574c42u /* "BLWF" read as little-endian */

/* ---- the file ------------------------------------------------------------ */

char *bl_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p != NULL) {
        memcpy(p, dir, a);
        p[a] = '/';
        memcpy(p + a + 1, name, b + 1);
    }
    return p;
}

static int errno_code(int err)
{
    switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return BINDLOG_ENOSPC;
    case ENOMEM:
        return BINDLOG_ENOMEM;
    case EACCES:
    case EPERM:
    case EROFS:
        return BINDLOG_EACCES;
    case ENOENT:
        return BINDLOG_ENOTFOUND;
    default:
        return BINDLOG_EIO;
    }
}

static void header_encode(unsigned char *h, uint64_t cap, uint64_t salt, uint64_t filled)
{
    memset(h, 0, 64);
    memcpy(h, WAL_MAGIC, 8);
    bl_put32(h + 8, BL_WAL_VERSION);
    bl_put32(h + 12, BL_WAL_HDR);
    bl_put64(h + 16, cap);
    bl_put64(h + 24, salt);
    bl_put64(h + 32, filled);
    bl_put64(h + 56, XXH3_64bits(h, 56));
}

static int write_all(int fd, const void *p, size_t n, off_t off)
{
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = pwrite(fd, b, n, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (w == 0)
            return ENOSPC;
        b += w;
        n -= (size_t)w;
        off += w;
    }
    return 0;
}

int bl_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int rc = bl_plat_flush_file(fd);
    close(fd);
    return rc;
}

int bl_wal_create(const char *dir, uint64_t cap, uint64_t salt, int nosync)
{
    char *path = bl_path_join(dir, BL_WAL_FILE);
    unsigned char blk[BL_WAL_HDR];
    int fd, err = 0;

    if (path == NULL)
        return BINDLOG_ENOMEM;
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        err = errno;
        free(path);
        return bl_err_set(errno_code(err), "%s: cannot create the log: %s", BL_WAL_FILE,
                          strerror(err));
    }
    free(path);
    memset(blk, 0, sizeof blk);
    header_encode(blk, cap, salt, 0);
    /* Reserve every block now, so that writing the log can never run out
     * of space; the zeros that make later overwrites cheap (no extent to
     * convert, nothing to journal at fdatasync) are written by the
     * background thread ahead of the writers (bl_wal_fill). */
    char step[64];
    snprintf(step, sizeof step, "cannot reserve %llu bytes",
             (unsigned long long)(BL_WAL_HDR + cap));
    err = bl_plat_reserve(fd, (off_t)(BL_WAL_HDR + cap), 0);
    if (err == EOPNOTSUPP || err == EINVAL) /* a filesystem without fallocate: write the zeros now */
        err = bl_plat_write_zeros(fd, BL_WAL_HDR, (off_t)cap);
    if (err == 0) {
        snprintf(step, sizeof step, "writing the new log's header");
        err = write_all(fd, blk, sizeof blk, 0);
    }
    if (err == 0 && !nosync) {
        snprintf(step, sizeof step, "flushing the new log");
        err = bl_plat_flush_file(fd);
    }
    close(fd);
    if (err == 0 && !nosync) {
        snprintf(step, sizeof step, "flushing the directory after creating the log");
        err = bl_sync_dir(dir);
    }
    if (err != 0) {
        bl_wal_remove(dir);
        return bl_err_set(errno_code(err), "%s: %s: %s", BL_WAL_FILE, step, strerror(err));
    }
    return 0;
}

void bl_wal_remove(const char *dir)
{
    char *path = bl_path_join(dir, BL_WAL_FILE);
    if (path != NULL)
        unlink(path);
    free(path);
}

uint64_t bl_wal_filled(int fd, uint64_t cap)
{
    unsigned char h[64];
    if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h || memcmp(h, WAL_MAGIC, 8) != 0 ||
        bl_get64(h + 56) != XXH3_64bits(h, 56) || bl_get64(h + 16) != cap)
        return 0;
    uint64_t f = bl_get64(h + 32);
    return f > cap ? cap : f;
}

int bl_wal_header(int fd, uint64_t *salt, uint64_t *cap)
{
    unsigned char h[64];
    if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h || memcmp(h, WAL_MAGIC, 8) != 0 ||
        bl_get64(h + 56) != XXH3_64bits(h, 56))
        return 0;
    *salt = bl_get64(h + 24);
    *cap = bl_get64(h + 16);
    return 1;
}

int bl_wal_set_filled(int fd, uint64_t cap, uint64_t salt, uint64_t filled)
{
    unsigned char h[64];
    header_encode(h, cap, salt, filled);
    int err = write_all(fd, h, sizeof h, 0);
    return err == 0 ? 0 : bl_err_set(errno_code(err), "%s: header: %s", BL_WAL_FILE,
                                     strerror(err));
}

int bl_wal_open(const char *dir, int read_only, uint64_t cap, uint64_t salt, int *fdp)
{
    char *path = bl_path_join(dir, BL_WAL_FILE);
    unsigned char h[64];
    struct stat st;
    int fd, err;

    *fdp = -1;
    if (path == NULL)
        return BINDLOG_ENOMEM;
    fd = open(path, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW);
    err = errno;
    free(path);
    if (fd < 0) {
        if (err == ENOENT)
            return bl_err_set(BINDLOG_ENOTFOUND, "%s is missing", BL_WAL_FILE);
        if (err == ELOOP)
            return bl_err_set(BINDLOG_ENOTSTORE, "%s is a symbolic link", BL_WAL_FILE);
        return bl_err_set(errno_code(err), "%s: %s", BL_WAL_FILE, strerror(err));
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return bl_err_set(BINDLOG_ENOTSTORE, "%s is not a regular file", BL_WAL_FILE);
    }
    ssize_t n = pread(fd, h, sizeof h, 0);
    if (n == (ssize_t)sizeof h && memcmp(h, WAL_MAGIC, 8) == 0 &&
        bl_get64(h + 56) == XXH3_64bits(h, 56) && bl_get32(h + 8) > BL_WAL_VERSION) {
        close(fd);
        return bl_err_set(BINDLOG_EVERSION, "%s: log version %u is newer than this library's %u",
                          BL_WAL_FILE, bl_get32(h + 8), BL_WAL_VERSION);
    }
    /* An intact header must name this store's log: a log copied in from
     * another store (or a ring of another size) would otherwise open as an
     * empty log, every event after the checkpoint silently gone. */
    if (n == (ssize_t)sizeof h && memcmp(h, WAL_MAGIC, 8) == 0 &&
        bl_get64(h + 56) == XXH3_64bits(h, 56) &&
        (bl_get64(h + 24) != salt || bl_get64(h + 16) != cap)) {
        close(fd);
        return bl_err_set(BINDLOG_ECORRUPT,
                          "%s belongs to another log: its header names salt %016llx and a "
                          "%llu-byte ring, data.mdb's meta \"wal\" salt %016llx and %llu bytes; "
                          "the events after the last checkpoint are not in it (run 'bindlog "
                          "recover' to see what is left)",
                          BL_WAL_FILE, (unsigned long long)bl_get64(h + 24),
                          (unsigned long long)bl_get64(h + 16), (unsigned long long)salt,
                          (unsigned long long)cap);
    }
    /* A damaged header is no reason to refuse: the frames are checked on
     * their own.  A short file is: writes would extend it. */
    if ((uint64_t)st.st_size < BL_WAL_HDR + cap) {
        close(fd);
        return bl_err_set(BINDLOG_ECORRUPT,
                          "%s is %llu bytes, shorter than its %llu-byte ring: the log was cut",
                          BL_WAL_FILE, (unsigned long long)st.st_size,
                          (unsigned long long)(BL_WAL_HDR + cap));
    }
    *fdp = fd;
    return 0;
}

int bl_wal_pwrite(int fd, uint64_t cap, uint64_t pos, const void *buf, size_t len)
{
    int err = write_all(fd, buf, len, (off_t)(BL_WAL_HDR + pos % cap));
    if (err == 0)
        return 0;
    return bl_err_set(err == ENOSPC || err == EDQUOT ? BINDLOG_ENOSPC : BINDLOG_EIO,
                      "%s: writing %zu bytes at position %llu: %s", BL_WAL_FILE, len,
                      (unsigned long long)pos, strerror(err));
}

int bl_wal_sync(int fd)
{
    int err = bl_plat_flush(fd);
    if (err != 0)
        return bl_err_set(BINDLOG_EIO, "%s: fdatasync failed: %s", BL_WAL_FILE, strerror(err));
    if (bl_plat_flush_weakened())
        bl_err_set(0, "%s: the file system refuses F_FULLFSYNC: FULL flushes with fsync, "
                      "which does not reach the disk on macOS", BL_WAL_FILE);
    return 0;
}

/* ---- frames ------------------------------------------------------------- */

/* The chained checksum: the header's first 56 bytes hashed with the
 * previous frame's checksum as seed, then the body with that as seed. */
static uint64_t frame_sum(const unsigned char *hdr, const unsigned char *body, size_t body_len,
                          uint64_t prev_chain)
{
    uint64_t h = XXH3_64bits_withSeed(hdr, 56, prev_chain);
    return XXH3_64bits_withSeed(body, body_len, h);
}

uint64_t bl_wframe_seal(unsigned char *hdr, unsigned flags, uint64_t salt, uint64_t pos,
                        uint64_t first_lsn, uint32_t nrec, uint32_t body_len, int64_t time_ms,
                        uint64_t durable, uint64_t prev_chain)
{
    bl_put32(hdr, FRAME_MAGIC);
    bl_put16(hdr + 4, (uint16_t)flags);
    bl_put16(hdr + 6, BL_WAL_FRAME_VERSION);
    bl_put64(hdr + 8, salt);
    bl_put64(hdr + 16, pos);
    bl_put64(hdr + 24, first_lsn);
    bl_put32(hdr + 32, nrec);
    bl_put32(hdr + 36, body_len);
    bl_put64(hdr + 40, (uint64_t)time_ms);
    bl_put64(hdr + 48, durable);
    uint64_t sum = frame_sum(hdr, hdr + BL_WAL_FRAME_HDR, body_len, prev_chain);
    bl_put64(hdr + 56, sum);
    return sum;
}

/* Decode a frame header at buf (BL_WAL_FRAME_HDR bytes there) into *f: 1
 * if its magic, version, flags and reserved bytes are right, else 0.  A
 * version-1 frame has zeros where version 2 keeps `durable`. */
static int frame_decode(const unsigned char *buf, bl_wframe *f)
{
    unsigned version = bl_get16(buf + 6);
    if (bl_get32(buf) != FRAME_MAGIC || version < 1 || version > BL_WAL_FRAME_VERSION)
        return 0;
    f->flags = bl_get16(buf + 4);
    f->salt = bl_get64(buf + 8);
    f->pos = bl_get64(buf + 16);
    f->first_lsn = bl_get64(buf + 24);
    f->nrec = bl_get32(buf + 32);
    f->body_len = bl_get32(buf + 36);
    f->time_ms = (int64_t)bl_get64(buf + 40);
    f->durable = bl_get64(buf + 48);
    f->sum = bl_get64(buf + 56);
    f->body = buf + BL_WAL_FRAME_HDR;
    return (f->flags & ~BL_WF_KNOWN) == 0 && (version > 1 || f->durable == 0);
}

int bl_wframe_check(const unsigned char *buf, size_t avail, uint64_t salt, uint64_t cap,
                    const bl_wal_at *at, bl_wframe *f)
{
    uint64_t off = at->pos % cap;

    if (avail < BL_WAL_FRAME_HDR || off + BL_WAL_FRAME_HDR > cap)
        return 0;
    if (!frame_decode(buf, f) || f->salt != salt || f->pos != at->pos ||
        f->first_lsn != at->lsn + 1)
        return 0;
    if (f->flags & BL_WF_WRAP) {
        if (f->nrec != 0 || f->body_len != 0)
            return 0;
    } else {
        /* a frame leaves room for a WRAP frame behind it */
        if (f->nrec == 0 || off + bl_wframe_size(f->body_len) + BL_WAL_FRAME_HDR > cap)
            return 0;
    }
    if (avail < BL_WAL_FRAME_HDR + (size_t)f->body_len)
        return -(int)(BL_WAL_FRAME_HDR + f->body_len - avail > 0x7fffffff
                          ? 0x7fffffff
                          : BL_WAL_FRAME_HDR + f->body_len - avail);
    if (frame_sum(buf, f->body, f->body_len, at->chain) != f->sum)
        return 0;
    return bl_wframe_body_ok(f) ? 1 : 0;
}

void bl_wentry_hdr(unsigned char *out, unsigned kind, unsigned table, size_t klen, size_t vlen)
{
    out[0] = (unsigned char)kind;
    out[1] = (unsigned char)table;
    bl_put16(out + 2, (uint16_t)klen);
    bl_put32(out + 4, (uint32_t)vlen);
}

int bl_wbody_next(const unsigned char *body, size_t len, size_t *off, bl_wentry *e)
{
    size_t o = *off;
    if (o == len)
        return 0;
    if (len - o < BL_WE_HDR)
        return -1;
    const unsigned char *h = body + o;
    e->kind = h[0];
    e->table = h[1];
    e->klen = bl_get16(h + 2);
    e->vlen = bl_get32(h + 4);
    o += BL_WE_HDR;
    if (e->kind == BL_WE_RECORD) {
        if (e->table != 0 || e->klen != 0)
            return -1;
    } else if (e->kind != BL_WE_PUT) {
        return -1;
    }
    if (e->klen > len - o || e->vlen > len - o - e->klen)
        return -1;
    e->key = body + o;
    e->val = body + o + e->klen;
    *off = o + e->klen + e->vlen;
    return 1;
}

int bl_wframe_body_ok(const bl_wframe *f)
{
    size_t off = 0;
    uint32_t nrec = 0;
    bl_wentry e;
    int rc;

    if (f->flags & BL_WF_WRAP)
        return 1;
    while ((rc = bl_wbody_next(f->body, f->body_len, &off, &e)) > 0) {
        if (e.kind == BL_WE_RECORD) {
            bl_record r;
            if (e.vlen > BL_RECORD_MAX || bl_record_decode(e.val, e.vlen, &r) != 0 ||
                r.lsn != f->first_lsn + nrec)
                return 0;
            nrec++;
            continue;
        }
        if (nrec == 0) /* a put belongs to the record before it */
            return 0;
        switch (e.table) {
        case BL_DB_META:
        case BL_DB_BINDINGS:
        case BL_DB_SESSIONS:
        case BL_DB_CHILDREN:
        case BL_DB_HISTORY:
            break;
        default:
            return 0;
        }
        if (e.klen == 0 || e.klen > BL_WE_KEY_MAX || e.vlen > BL_WE_VAL_MAX)
            return 0;
    }
    return rc == 0 && nrec == f->nrec;
}

uint64_t bl_wframe_next(const bl_wframe *f, uint64_t cap)
{
    if (f->flags & BL_WF_WRAP)
        return (f->pos / cap + 1) * cap;
    return f->pos + bl_wframe_size(f->body_len);
}

/* ---- reading the ring --------------------------------------------------- */

#define READ_BLOCK ((size_t)256 << 10)

void bl_wreader_init(bl_wreader *r, int fd, uint64_t cap)
{
    memset(r, 0, sizeof(*r));
    r->fd = fd;
    r->cap = cap;
}

void bl_wreader_free(bl_wreader *r)
{
    free(r->buf);
    r->buf = NULL;
}

/* Does the buffer hold [pos, pos + n)?  (Without pos + n, which a
 * position read from a damaged header could make wrap.) */
static int wr_holds(const bl_wreader *r, uint64_t pos, uint64_t n)
{
    return r->buf != NULL && pos >= r->base && pos - r->base <= r->len &&
           n <= r->len - (pos - r->base);
}

/* Make [pos, pos + want) available in the buffer, as far as the lap allows:
 * returns a pointer to pos and the bytes available there in *avail. */
static int wr_fill(bl_wreader *r, uint64_t pos, size_t want, const unsigned char **p,
                   size_t *avail)
{
    uint64_t lap_left = r->cap - pos % r->cap;
    if (want > lap_left)
        want = (size_t)lap_left;
    if (wr_holds(r, pos, want)) {
        *p = r->buf + (pos - r->base);
        *avail = (size_t)(r->len - (pos - r->base));
        return 0;
    }
    size_t need = want > READ_BLOCK ? want : READ_BLOCK;
    if (need > lap_left)
        need = (size_t)lap_left;
    if (need > r->bufcap) {
        unsigned char *nb = realloc(r->buf, need);
        if (nb == NULL)
            return BINDLOG_ENOMEM;
        r->buf = nb;
        r->bufcap = need;
    }
    size_t got = 0;
    while (got < need) {
        ssize_t n = pread(r->fd, r->buf + got, need - got,
                          (off_t)(BL_WAL_HDR + (pos + got) % r->cap));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            r->len = 0;
            return bl_err_set(BINDLOG_EIO, "%s: reading at position %llu: %s", BL_WAL_FILE,
                              (unsigned long long)pos, strerror(errno));
        }
        if (n == 0)
            break; /* the file ends early: what is missing is not a frame */
        got += (size_t)n;
    }
    r->base = pos;
    r->len = got;
    *p = r->buf;
    *avail = got;
    return 0;
}

int bl_wreader_frame(bl_wreader *r, uint64_t salt, const bl_wal_at *at, bl_wframe *f)
{
    const unsigned char *p;
    size_t avail;
    int fresh = !wr_holds(r, at->pos, BL_WAL_FRAME_HDR);
    int rc = wr_fill(r, at->pos, BL_WAL_FRAME_HDR, &p, &avail);
    if (rc != 0)
        return rc;
    rc = bl_wframe_check(p, avail, salt, r->cap, at, f);
    if (rc == 0 && !fresh) {
        /* the buffer was read before this frame was written (the log is
         * live): look at the file again before calling it the end */
        r->len = 0;
        if ((rc = wr_fill(r, at->pos, BL_WAL_FRAME_HDR, &p, &avail)) != 0)
            return rc;
        rc = bl_wframe_check(p, avail, salt, r->cap, at, f);
    }
    if (rc >= 0)
        return rc;
    /* the body is longer than what is buffered: read it whole */
    size_t whole = BL_WAL_FRAME_HDR + (size_t)f->body_len;
    r->len = 0; /* force a read from pos */
    if ((rc = wr_fill(r, at->pos, whole, &p, &avail)) != 0)
        return rc;
    rc = bl_wframe_check(p, avail, salt, r->cap, at, f);
    return rc < 0 ? 0 : rc;
}

int bl_wal_scan(int fd, uint64_t cap, uint64_t salt, const bl_wal_at *start, uint64_t last_lsn,
                bl_wal_frame_fn fn, void *ctx, bl_wal_at *end)
{
    bl_wreader r;
    bl_wal_at at = *start;
    bl_wframe f;
    int rc;

    bl_wreader_init(&r, fd, cap);
    for (;;) {
        rc = bl_wreader_frame(&r, salt, &at, &f);
        if (rc <= 0)
            break;
        if (f.nrec != 0 && last_lsn != UINT64_MAX && f.first_lsn + f.nrec - 1 > last_lsn) {
            rc = 0;
            break;
        }
        bl_wal_at next = {at.lsn + f.nrec, bl_wframe_next(&f, cap), f.sum};
        if (fn != NULL && (rc = fn(ctx, &f, &next)) != 0)
            break;
        at = next;
        if (last_lsn != UINT64_MAX && at.lsn >= last_lsn) {
            rc = 0;
            break;
        }
    }
    bl_wreader_free(&r);
    *end = at;
    return rc;
}

/* ---- frames on their own: looking past a break --------------------------- */

int bl_wframe_loose(const unsigned char *buf, size_t avail, uint64_t cap, uint64_t off,
                    bl_wframe *f)
{
    if (avail < BL_WAL_FRAME_HDR || off % 8 != 0 || off + BL_WAL_FRAME_HDR > cap)
        return 0;
    if (!frame_decode(buf, f) || (f->flags & BL_WF_WRAP) || f->nrec == 0 ||
        f->pos % cap != off || f->durable > f->pos ||
        off + bl_wframe_size(f->body_len) + BL_WAL_FRAME_HDR > cap)
        return 0;
    if (avail < BL_WAL_FRAME_HDR + (size_t)f->body_len)
        return -(int)(BL_WAL_FRAME_HDR + f->body_len - avail);
    return bl_wframe_body_ok(f);
}

/* Read [off, off + n) of the ring (within one lap) into buf: the bytes
 * read (fewer when the file ends early), or -1 on an I/O error. */
static ssize_t ring_read(int fd, uint64_t off, unsigned char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)(BL_WAL_HDR + off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return bl_err_set(BINDLOG_EIO, "%s: reading at ring byte %llu: %s", BL_WAL_FILE,
                              (unsigned long long)(off + got), strerror(errno)),
                   -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* The ring is read in blocks of this size into one buffer (from the heap,
 * where a process that opens stores again and again finds it again); a
 * frame that runs past a block's end is read on its own.  Mapping the ring
 * whole instead cost more on the development machine: 4.3-4.5 ms against
 * 1.8-2.4 ms per open of a store in a process that had opened others, and
 * 10.5-11.3 ms against 7.3-8.2 ms for a `bindlog get` process (first
 * touches of a mapping's pages are faults; a small buffer's are few). */
#define SCAN_BLOCK ((size_t)64 << 10)

int bl_wal_loose_scan(int fd, uint64_t cap, bl_wal_want_fn want, bl_wal_loose_fn fn, void *ctx)
{
    unsigned char *blk = malloc(SCAN_BLOCK), *one = NULL;
    size_t onecap = 0;
    int rc = 0;

    if (blk == NULL)
        return BINDLOG_ENOMEM;
    uint64_t base = 0, off = 0;
    size_t len = 0;
    while (off + BL_WAL_FRAME_HDR <= cap) {
        if (off < base || off + BL_WAL_FRAME_HDR > base + len) {
            /* the next block, from off */
            size_t n = cap - off < SCAN_BLOCK ? (size_t)(cap - off) : SCAN_BLOCK;
            ssize_t got = ring_read(fd, off, blk, n);
            if (got < 0) {
                rc = BINDLOG_EIO;
                break;
            }
            base = off;
            len = (size_t)got;
            if (len < BL_WAL_FRAME_HDR)
                break; /* the file ends early */
        }
        const unsigned char *p = blk + (off - base);
        size_t avail = len - (size_t)(off - base);
        if (bl_get32(p) != FRAME_MAGIC) {
            /* on to the next magic at an 8-byte boundary (memchr skips
             * zeros at memory speed); blocks start 8-byte aligned */
            const unsigned char *q = p + 1, *end = blk + len;
            for (;;) {
                q = memchr(q, 'B', (size_t)(end - q));
                if (q == NULL || (end - q >= 4 && (size_t)(q - blk) % 8 == 0 &&
                                  memcmp(q, "BLWF", 4) == 0))
                    break;
                q++;
            }
            /* none left in this block: read on from its last header's room */
            off = q != NULL ? base + (uint64_t)(q - blk)
                            : (base + len - BL_WAL_FRAME_HDR + 8) & ~(uint64_t)7;
            if (off <= base + (uint64_t)(p - blk))
                off = base + (uint64_t)(p - blk) + 8;
            continue;
        }
        bl_wframe f;
        if (want != NULL && (!frame_decode(p, &f) || !want(ctx, &f, off))) {
            off += 8;
            continue;
        }
        int v = bl_wframe_loose(p, avail, cap, off, &f);
        if (v < 0) {
            /* the body runs past the block: read the frame alone */
            size_t whole = BL_WAL_FRAME_HDR + (size_t)f.body_len;
            if (whole > onecap) {
                unsigned char *nb = realloc(one, whole);
                if (nb == NULL) {
                    rc = BINDLOG_ENOMEM;
                    break;
                }
                one = nb;
                onecap = whole;
            }
            ssize_t got = ring_read(fd, off, one, whole);
            if (got < 0) {
                rc = BINDLOG_EIO;
                break;
            }
            v = bl_wframe_loose(one, (size_t)got, cap, off, &f);
        }
        if (v != 1) {
            off += 8;
            continue;
        }
        if ((rc = fn(ctx, &f, off)) != 0)
            break;
        /* a valid frame holds no other frame's header: go on after it */
        off += bl_wframe_size(f.body_len);
    }
    free(one);
    free(blk);
    return rc;
}

typedef struct past {
    uint64_t salt, cap;
    const bl_wal_at *end;
    bl_wal_break *out;
} past;

/* Only frames that could matter: this log's beyond the end (within a
 * lap), and whatever lies at the break. */
static int past_want(void *ctx, const bl_wframe *f, uint64_t off)
{
    past *p = ctx;
    if (off == p->end->pos % p->cap)
        return 1;
    return f->salt == p->salt && f->pos >= p->end->pos && f->pos < p->end->pos + p->cap &&
           f->first_lsn > p->end->lsn;
}

static int past_frame(void *ctx, const bl_wframe *f, uint64_t off)
{
    past *p = ctx;
    if (f->salt != p->salt) {
        if (off == p->end->pos % p->cap) {
            p->out->foreign = 1;
            p->out->foreign_salt = f->salt;
        }
        return 0;
    }
    /* a frame of this log written after the break: where the ring lies
     * ahead of the end (within one lap), with LSNs beyond the last one
     * applied */
    if (f->pos < p->end->pos || f->pos >= p->end->pos + p->cap || f->first_lsn <= p->end->lsn)
        return 0;
    p->out->frames++;
    if (f->first_lsn + f->nrec - 1 > p->out->last_lsn)
        p->out->last_lsn = f->first_lsn + f->nrec - 1;
    if (f->durable > p->out->durable)
        p->out->durable = f->durable;
    return 0;
}

int bl_wal_past_break(int fd, uint64_t cap, uint64_t salt, const bl_wal_at *end,
                      bl_wal_break *out)
{
    past p = {salt, cap, end, out};
    memset(out, 0, sizeof(*out));
    return bl_wal_loose_scan(fd, cap, past_want, past_frame, &p);
}

/* ---- a log without its store ---------------------------------------------- */

static int orphan_frame(void *ctx, const bl_wframe *f, uint64_t off)
{
    bl_wal_orphan *o = ctx;
    (void)off;
    uint64_t last = f->first_lsn + f->nrec - 1;
    if (o->frames == 0 || f->first_lsn < o->first_lsn)
        o->first_lsn = f->first_lsn;
    if (last > o->last_lsn)
        o->last_lsn = last;
    o->frames++;
    return 0;
}

int bl_wal_orphan_frames(const char *dir, bl_wal_orphan *out)
{
    char *path = bl_path_join(dir, BL_WAL_FILE);
    struct stat st;
    uint64_t salt, cap;
    int fd, rc;

    memset(out, 0, sizeof(*out));
    if (path == NULL)
        return BINDLOG_ENOMEM;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    free(path);
    if (fd < 0)
        return 0; /* none (or none this process may read: the open says why) */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size <= BL_WAL_HDR) {
        close(fd);
        return 0;
    }
    /* the ring as the header says, or as the file's size says when the
     * header is damaged (a frame's position is checked against it) */
    if (!bl_wal_header(fd, &salt, &cap) || cap > (uint64_t)st.st_size - BL_WAL_HDR)
        cap = ((uint64_t)st.st_size - BL_WAL_HDR) & ~(uint64_t)7;
    rc = bl_wal_loose_scan(fd, cap, NULL, orphan_frame, out);
    close(fd);
    return rc;
}

int bl_wal_refuse_orphan(const char *dir, const char *what)
{
    bl_wal_orphan o;
    int rc = bl_wal_orphan_frames(dir, &o);
    if (rc != 0 || o.frames == 0)
        return rc;
    char lsns[64];
    if (o.first_lsn == o.last_lsn)
        snprintf(lsns, sizeof lsns, "LSN %llu", (unsigned long long)o.first_lsn);
    else
        snprintf(lsns, sizeof lsns, "LSNs %llu-%llu", (unsigned long long)o.first_lsn,
                 (unsigned long long)o.last_lsn);
    return bl_err_set(BINDLOG_ECORRUPT,
                      "%s, yet %s holds %llu frame%s of a log (%s): the store "
                      "they were written into is gone (its data.mdb deleted, emptied or "
                      "replaced).  Nothing was written: restore data.mdb from a backup, or "
                      "move %s away to start a new store",
                      what, BL_WAL_FILE, (unsigned long long)o.frames,
                      o.frames == 1 ? "" : "s", lsns, BL_WAL_FILE);
}
