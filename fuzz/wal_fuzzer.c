/*
 * wal_fuzzer.c -- arbitrary bytes as the write-ahead log (and the shared
 * memory) of a store: open must never crash, and must never apply a frame
 * whose checksum, salt, position or LSN is wrong.
 *
 * Input: the log's ring from the position recovery starts at (WB_START of
 * the template store, wal_base.h: 8 KiB before the end of the ring's first
 * lap, so inputs cross the end of the ring), zeros after the input, up to
 * the 64 KiB of the ring.  An input of odd length also becomes the shared
 * memory file (its first 4 KiB, each byte inverted).
 *
 * Per input:
 *   1. a reference scan, written here independently of src/lmdb/wal.c (the
 *      frame rules of docs/format.md, the records checked with the
 *      library's record decoder): how many records the valid prefix holds;
 *   2. bindlog_open (recovery), then the head LSN must be exactly that: more
 *      means an invalid frame was applied, fewer that a valid one was lost
 *      (abort either way); and when a frame of this log past that prefix
 *      says the log was flushed beyond it (or another log's frame lies at
 *      its end), the break is damage to acknowledged frames: the open must
 *      refuse with BINDLOG_ECORRUPT, never open the shorter log;
 *   3. every record read back in order with the right LSN, a get, the
 *      statistics, bindlog_check (which must not crash; a log of forged but
 *      well-checksummed frames may legitimately disagree with itself), a
 *      checkpoint and a close (the fold into LMDB), then a read-only
 *      reopen with the same head.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/record.h"
#include "wal_base.h"

static char g_root[4096], g_tmpl[4200], g_dir[4200];
static unsigned char *g_data;
static size_t g_data_len;

static void die(const char *what)
{
    fprintf(stderr, "wal_fuzzer: %s\n", what);
    abort();
}

static void put(const char *dir, const char *name, const void *p, size_t n)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        die("cannot write a store file");
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w <= 0)
            die("short write");
        b += w;
        n -= (size_t)w;
    }
    close(fd);
}

static void clear_dir(const char *dir)
{
    static const char *const names[] = {"data.mdb", "lock.mdb", "bindlog.lock", "bindlog.wal",
                                        "bindlog.shm"};
    char path[4400];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *base = getenv("BINDLOG_FUZZ_TMPDIR");
    struct stat st;
    if (base == NULL)
        base = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                                                                            : getenv("TMPDIR");
    if (base == NULL)
        base = "/tmp";
    snprintf(g_root, sizeof g_root, "%s/bindlog-walfuzz-XXXXXX", base);
    if (mkdtemp(g_root) == NULL)
        die("mkdtemp");
    snprintf(g_tmpl, sizeof g_tmpl, "%s/tmpl", g_root);
    snprintf(g_dir, sizeof g_dir, "%s/store", g_root);
    if (mkdir(g_tmpl, 0700) != 0 || mkdir(g_dir, 0700) != 0)
        die("mkdir");
    if (wb_make_template(g_tmpl) != 0)
        die("cannot make the template store");
    char path[4400];
    snprintf(path, sizeof path, "%s/data.mdb", g_tmpl);
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) != 0)
        die("template");
    g_data_len = (size_t)st.st_size;
    g_data = malloc(g_data_len);
    if (g_data == NULL || read(fd, g_data, g_data_len) != (ssize_t)g_data_len)
        die("template read");
    close(fd);
    setenv("BINDLOG_CHECKPOINT", "manual", 1); /* no background thread: deterministic */
    return 0;
}

/* ---- the reference scan ------------------------------------------------- */

static uint64_t rd64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A frame header's version is 1 (zeros at 48) or 2 (`durable` at 48). */
static int header_ok(const unsigned char *h)
{
    unsigned flags = h[4] | (unsigned)h[5] << 8;
    return memcmp(h, "BLWF", 4) == 0 && (h[6] == 1 || h[6] == 2) && h[7] == 0 &&
           (flags & ~1u) == 0 && (h[6] == 2 || rd64(h + 48) == 0);
}

/* The body at b (blen bytes) of a frame of nrec records from first_lsn:
 * entries that tile it exactly, records in LSN order, puts after a record,
 * into a table that takes puts. */
static int body_ok(const unsigned char *b, uint32_t blen, uint64_t first_lsn, uint32_t nrec)
{
    size_t o = 0;
    uint32_t seen = 0;
    int ok = 1;
    while (ok && o < blen) {
        if (blen - o < 8)
            return 0;
        unsigned kind = b[o], table = b[o + 1];
        size_t klen = (size_t)b[o + 2] | (size_t)b[o + 3] << 8;
        size_t vlen = rd32(b + o + 4);
        o += 8;
        if (klen > blen - o || vlen > blen - o - klen)
            return 0;
        if (kind == 1) {
            bl_record r;
            ok = table == 0 && klen == 0 && vlen <= BL_RECORD_MAX &&
                 bl_record_decode(b + o, vlen, &r) == 0 && r.lsn == first_lsn + seen;
            seen++;
        } else if (kind == 2) {
            /* meta 0, bindings 2, sessions 3, children 4, history 5 */
            ok = seen > 0 && (table == 0 || (table >= 2 && table <= 5)) && klen >= 1 &&
                 klen <= 511 && vlen <= ((size_t)1 << 20);
        } else {
            ok = 0;
        }
        o += klen + vlen;
    }
    return ok && seen == nrec;
}

/* Records in the valid prefix of `ring`, following docs/format.md; *end_pos
 * gets the position after it. */
static uint64_t reference_records(const unsigned char *ring, uint64_t *end_pos)
{
    uint64_t pos = WB_START, lsn = 0, chain = WB_SALT;
    for (int frames = 0; frames < 100000; frames++) {
        uint64_t off = pos % WB_CAP;
        if (off + 64 > WB_CAP)
            break;
        const unsigned char *h = ring + off;
        unsigned flags = h[4] | (unsigned)h[5] << 8;
        if (!header_ok(h) || rd64(h + 8) != WB_SALT || rd64(h + 16) != pos ||
            rd64(h + 24) != lsn + 1)
            break;
        uint32_t nrec = rd32(h + 32), blen = rd32(h + 36);
        uint64_t size = (64 + (uint64_t)blen + 7) & ~(uint64_t)7;
        if (flags & 1) {
            if (nrec != 0 || blen != 0)
                break;
        } else if (nrec == 0 || off + size + 64 > WB_CAP) {
            break;
        }
        uint64_t sum = XXH3_64bits_withSeed(ring + off + 64, blen,
                                            XXH3_64bits_withSeed(h, 56, chain));
        if (sum != rd64(h + 56))
            break;
        if (!(flags & 1) && !body_ok(ring + off + 64, blen, lsn + 1, nrec))
            break;
        lsn += nrec;
        chain = sum;
        pos = (flags & 1) ? (pos / WB_CAP + 1) * WB_CAP : pos + size;
    }
    *end_pos = pos;
    return lsn;
}

/* The frame at ring byte off on its own (no chain): 1 with its salt, pos,
 * LSNs and durable point, if it is one. */
static int loose_frame(const unsigned char *ring, uint64_t off, uint64_t *salt, uint64_t *pos,
                       uint64_t *first, uint64_t *nrec, uint64_t *durable)
{
    const unsigned char *h = ring + off;
    if (off + 64 > WB_CAP || !header_ok(h) || (h[4] & 1))
        return 0;
    uint32_t n = rd32(h + 32), blen = rd32(h + 36);
    uint64_t size = (64 + (uint64_t)blen + 7) & ~(uint64_t)7;
    *salt = rd64(h + 8);
    *pos = rd64(h + 16);
    *first = rd64(h + 24);
    *nrec = n;
    *durable = rd64(h + 48);
    return n != 0 && *pos % WB_CAP == off && *durable <= *pos && off + size + 64 <= WB_CAP &&
           body_ok(ring + off + 64, blen, *first, n);
}

/* The oracle of a break (docs/format.md, "Torn tail or damage"): 1 if a
 * frame of this log past the end at end_pos (LSNs beyond `lsn`, within a
 * lap) says the log was flushed beyond the end, or a frame of another log
 * lies at the end: recovery must refuse then. */
static int reference_refuses(const unsigned char *ring, uint64_t end_pos, uint64_t lsn)
{
    for (uint64_t off = 0; off + 64 <= WB_CAP; off += 8) {
        uint64_t salt, pos, first, nrec, durable;
        if (!loose_frame(ring, off, &salt, &pos, &first, &nrec, &durable))
            continue;
        if (salt != WB_SALT) {
            if (off == end_pos % WB_CAP)
                return 1;
            continue;
        }
        if (pos >= end_pos && pos < end_pos + WB_CAP && first > lsn && durable > end_pos)
            return 1;
    }
    return 0;
}

/* ---- the target -------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned char ring[WB_CAP];
    unsigned char hdr[BL_WAL_HDR];
    char path[4400];

    if (g_data == NULL)
        LLVMFuzzerInitialize(NULL, NULL);
    memset(ring, 0, sizeof ring);
    for (size_t i = 0; i < size && i < WB_CAP; i++)
        ring[(WB_START + i) % WB_CAP] = data[i];
    uint64_t end_pos;
    uint64_t expect = reference_records(ring, &end_pos);
    int refuse = reference_refuses(ring, end_pos, expect);
    if (getenv("BINDLOG_FUZZ_VERBOSE") != NULL)
        fprintf(stderr, "wal_fuzzer: the valid prefix holds %llu records\n",
                (unsigned long long)expect);

    clear_dir(g_dir);
    put(g_dir, "data.mdb", g_data, g_data_len);
    snprintf(path, sizeof path, "%s/bindlog.wal", g_tmpl);
    int fd = open(path, O_RDONLY);
    if (fd < 0 || read(fd, hdr, sizeof hdr) != (ssize_t)sizeof hdr)
        die("template log");
    close(fd);
    snprintf(path, sizeof path, "%s/bindlog.wal", g_dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, hdr, sizeof hdr) != (ssize_t)sizeof hdr ||
        write(fd, ring, sizeof ring) != (ssize_t)sizeof ring)
        die("log write");
    close(fd);
    if (size % 2) {
        unsigned char shm[4096];
        size_t n = size < sizeof shm ? size : sizeof shm;
        for (size_t i = 0; i < n; i++)
            shm[i] = (unsigned char)~data[i];
        put(g_dir, "bindlog.shm", shm, n);
    }

    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    bindlog *s = NULL;
    int rc = bindlog_open(&s, g_dir, &o);
    if (refuse && rc != BINDLOG_ECORRUPT) {
        /* a break in frames the log was flushed beyond: the events after it
         * were acknowledged, so recovery must refuse, never open shorter */
        fprintf(stderr, "wal_fuzzer: open gave %d (%s)\n", rc, bindlog_last_error());
        die("a break in flushed frames was not refused");
    }
    if (rc != 0) {
        /* refused is fine (a damaged shared file alone never is: it is
         * rebuilt), but only with a real error code */
        if (rc > 0 || rc < BINDLOG_ERROR_MIN)
            die("open returned a code that is not an error");
        return 0;
    }
    bindlog_stats st;
    if (bindlog_stats_get(s, &st) != 0)
        die("stats failed on an opened store");
    if (st.head_lsn > expect)
        die("recovery applied a frame the reference scan refuses");
    if (st.head_lsn < expect)
        die("recovery stopped before the end of the valid prefix");

    bindlog_iter *it;
    bindlog_record rec;
    uint64_t n = 0;
    if (bindlog_log_iter(s, 0, UINT64_MAX, &it) == 0) {
        while ((rc = bindlog_iter_next_record(it, &rec)) == 1)
            if (rec.lsn != ++n)
                die("the log read back is not dense");
        bindlog_iter_close(it);
        if (rc == 0 && n != st.head_lsn)
            die("the log read back is not the head");
    }
    bindlog_binding b;
    bindlog_get(s, "k", &b);
    bindlog_check_report rep;
    bindlog_check(s, &rep, NULL, NULL);
    bindlog_checkpoint(s, NULL);
    bindlog_close(s);

    o.read_only = 1;
    if (bindlog_open(&s, g_dir, &o) == 0) {
        if (bindlog_stats_get(s, &st) == 0 && st.head_lsn != expect)
            die("the head changed across a checkpoint and a reopen");
        bindlog_close(s);
    }
    return 0;
}
