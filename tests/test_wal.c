/*
 * test_wal.c -- the write-ahead log: its frames and the scan for the valid
 * prefix (src/lmdb/wal.c), then the store around it: reads of the tail
 * before a checkpoint, recovery at open, the log full, batches across a
 * torn frame, the format-2 gate and the log file's checks.
 *
 * Cross-process behaviour (other processes' frames, the shared memory,
 * statistics, wake-ups) is in test_wal_procs.c.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindlog.h"
#include "core/record.h"
#include "lmdb/store.h"
#include "lmdb/wal.h"
#include "lmdb/shm.h"
#include "lmdb/tail.h"
#include "lmdb/walenv.h"
#include "testutil.h"
#define XXH_INLINE_ALL
#include <xxhash.h>

#define CAP ((uint64_t)64 << 10)
#define SALT 0x5a17u

/* ---- building frames by hand ------------------------------------------------ */

/* A frame of `nrec` records (LSNs first..) with one put each, into buf;
 * returns its size in the ring.  `tag` varies the bytes. */
static size_t make_frame(unsigned char *buf, uint64_t pos, uint64_t first, uint32_t nrec,
                         uint64_t chain, int tag, uint64_t *sum)
{
    size_t len = BL_WAL_FRAME_HDR;
    for (uint32_t i = 0; i < nrec; i++) {
        unsigned char rec[256];
        char key[32], sid[32];
        snprintf(key, sizeof key, "k%d-%u", tag, i);
        snprintf(sid, sizeof sid, "s%d-%u", tag, i);
        bl_record r = {.lsn = first + i, .time_ms = 1000 + (int64_t)i, .generation = 1,
                       .type = BINDLOG_EVENT_BIND, .key = key, .key_len = strlen(key),
                       .sid = sid, .sid_len = strlen(sid), .reason = "switch",
                       .reason_len = 6};
        size_t rn = bl_record_encode(&r, rec, sizeof rec);
        assert_true(rn > 0);
        bl_wentry_hdr(buf + len, BL_WE_RECORD, 0, 0, rn);
        memcpy(buf + len + BL_WE_HDR, rec, rn);
        len += BL_WE_HDR + rn;
        bl_wentry_hdr(buf + len, BL_WE_PUT, BL_DB_BINDINGS, strlen(key), 3);
        memcpy(buf + len + BL_WE_HDR, key, strlen(key));
        memcpy(buf + len + BL_WE_HDR + strlen(key), "val", 3);
        len += BL_WE_HDR + strlen(key) + 3;
    }
    size_t size = bl_wframe_size(len - BL_WAL_FRAME_HDR);
    memset(buf + len, 0, size - len);
    *sum = bl_wframe_seal(buf, 0, SALT, pos, first, nrec, (uint32_t)(len - BL_WAL_FRAME_HDR),
                          2000, 0, chain);
    return size;
}

/* A ring file of CAP bytes, all zero. */
static int ring_file(const char *dir)
{
    assert_int_equal(bl_wal_create(dir, CAP, SALT, 1), 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, BL_WAL_FILE);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    return fd;
}

static void put_frame(int fd, uint64_t pos, const unsigned char *buf, size_t size)
{
    assert_int_equal(bl_wal_pwrite(fd, CAP, pos, buf, size), 0);
}

typedef struct seen {
    uint64_t frames, records;
} seen;

static int count_cb(void *ctx, const bl_wframe *f, const bl_wal_at *after)
{
    seen *s = ctx;
    (void)after;
    s->frames++;
    s->records += f->nrec;
    return 0;
}

/* ---- frames ------------------------------------------------------------------ */

static void wal__frame_round_trip(void **state)
{
    (void)state;
    unsigned char buf[4096];
    uint64_t sum;
    size_t size = make_frame(buf, 128, 7, 3, 99, 1, &sum);
    bl_wal_at at = {6, 128, 99};
    bl_wframe f;

    assert_int_equal(size % 8, 0);
    assert_int_equal(bl_wframe_check(buf, size, SALT, CAP, &at, &f), 1);
    assert_int_equal(f.first_lsn, 7);
    assert_int_equal(f.nrec, 3);
    assert_int_equal(f.sum, sum);
    assert_int_equal(bl_wframe_next(&f, CAP), 128 + size);
    /* a header alone says how much more to read */
    assert_true(bl_wframe_check(buf, BL_WAL_FRAME_HDR, SALT, CAP, &at, &f) < 0);
}

static void wal__every_flipped_byte_is_refused(void **state)
{
    (void)state;
    unsigned char buf[4096];
    uint64_t sum;
    size_t size = make_frame(buf, 0, 1, 2, SALT, 2, &sum);
    size_t used = BL_WAL_FRAME_HDR + bl_get32(buf + 36);
    bl_wal_at at = {0, 0, SALT};
    bl_wframe f;

    for (size_t i = 0; i < used; i++)
        for (int bit = 0; bit < 8; bit += 3) {
            buf[i] ^= (unsigned char)(1u << bit);
            if (bl_wframe_check(buf, size, SALT, CAP, &at, &f) == 1)
                fail_msg("a frame with bit %d of byte %zu flipped was accepted", bit, i);
            buf[i] ^= (unsigned char)(1u << bit);
        }
    assert_int_equal(bl_wframe_check(buf, size, SALT, CAP, &at, &f), 1);
}

static void wal__salt_position_lsn_and_chain_each_count(void **state)
{
    (void)state;
    unsigned char buf[4096];
    uint64_t sum;
    size_t size = make_frame(buf, 512, 10, 1, 42, 3, &sum);
    bl_wframe f;
    bl_wal_at good = {9, 512, 42};
    bl_wal_at bad_pos = {9, 512 + CAP, 42}, bad_lsn = {8, 512, 42}, bad_chain = {9, 512, 43};

    assert_int_equal(bl_wframe_check(buf, size, SALT, CAP, &good, &f), 1);
    assert_int_equal(bl_wframe_check(buf, size, SALT + 1, CAP, &good, &f), 0);
    assert_int_equal(bl_wframe_check(buf, size, SALT, CAP, &bad_pos, &f), 0); /* another lap */
    assert_int_equal(bl_wframe_check(buf, size, SALT, CAP, &bad_lsn, &f), 0);
    assert_int_equal(bl_wframe_check(buf, size, SALT, CAP, &bad_chain, &f), 0);
}

/* Re-version a sealed frame and checksum it again (docs/format.md). */
static void reseal(unsigned char *buf, unsigned version, uint64_t durable, uint64_t chain)
{
    buf[6] = (unsigned char)version;
    bl_put64(buf + 48, durable);
    uint64_t h = XXH3_64bits_withSeed(buf, 56, chain);
    bl_put64(buf + 56, XXH3_64bits_withSeed(buf + BL_WAL_FRAME_HDR, bl_get32(buf + 36), h));
}

/* A log of the previous release holds version-1 frames (zeros where
 * version 2 keeps `durable`): they still count, and stand on their own;
 * a version-1 frame with bytes at 48, or a version 3, does not. */
static void wal__version_1_frames_are_still_read(void **state)
{
    (void)state;
    unsigned char buf[4096];
    uint64_t sum;
    size_t size = make_frame(buf, 512, 10, 2, 42, 3, &sum);
    bl_wal_at at = {9, 512, 42};
    bl_wframe f;

    reseal(buf, 1, 0, 42);
    assert_int_equal(bl_wframe_check(buf, size, SALT, CAP, &at, &f), 1);
    assert_int_equal(f.durable, 0);
    assert_int_equal(bl_wframe_loose(buf, size, CAP, 512, &f), 1);
    reseal(buf, 1, 256, 42);
    assert_int_equal(bl_wframe_check(buf, size, SALT, CAP, &at, &f), 0);
    reseal(buf, 3, 0, 42);
    assert_int_equal(bl_wframe_check(buf, size, SALT, CAP, &at, &f), 0);
    reseal(buf, 2, 256, 42);
    assert_int_equal(bl_wframe_check(buf, size, SALT, CAP, &at, &f), 1);
    assert_int_equal(f.durable, 256);
    /* standing on its own: the position where it lies, durable <= pos */
    assert_int_equal(bl_wframe_loose(buf, size, CAP, 512, &f), 1);
    assert_int_equal(bl_wframe_loose(buf, size, CAP, 520, &f), 0);
    reseal(buf, 2, 513, 42);
    assert_int_equal(bl_wframe_loose(buf, size, CAP, 512, &f), 0);
}

static void wal__body_parser_refuses_garbage(void **state)
{
    (void)state;
    unsigned char body[64];
    size_t off;
    bl_wentry e;

    memset(body, 0, sizeof body);
    bl_wentry_hdr(body, 9, 0, 0, 0); /* unknown kind */
    off = 0;
    assert_int_equal(bl_wbody_next(body, 8, &off, &e), -1);
    bl_wentry_hdr(body, BL_WE_PUT, BL_DB_BINDINGS, 4, 100); /* runs past the end */
    off = 0;
    assert_int_equal(bl_wbody_next(body, 20, &off, &e), -1);
    bl_wentry_hdr(body, BL_WE_RECORD, 3, 0, 0); /* a record with a table byte */
    off = 0;
    assert_int_equal(bl_wbody_next(body, 8, &off, &e), -1);
    off = 0;
    assert_int_equal(bl_wbody_next(body, 5, &off, &e), -1); /* half a header */
    off = 0;
    assert_int_equal(bl_wbody_next(body, 0, &off, &e), 0);
}

/* ---- the scan ------------------------------------------------------------------ */

/* Write n frames of 2 records from the start; returns the chain points. */
static void write_frames(int fd, int n, bl_wal_at *pts, int tag)
{
    unsigned char buf[4096];
    bl_wal_at at = {0, 0, SALT};
    pts[0] = at;
    for (int i = 0; i < n; i++) {
        uint64_t sum;
        size_t size = make_frame(buf, at.pos, at.lsn + 1, 2, at.chain, tag * 100 + i, &sum);
        put_frame(fd, at.pos, buf, size);
        at = (bl_wal_at){at.lsn + 2, at.pos + size, sum};
        pts[i + 1] = at;
    }
}

static void wal__scan_stops_at_a_torn_frame(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walscan");
    int fd = ring_file(dir);
    bl_wal_at pts[6], start = {0, 0, SALT}, end;
    seen s = {0, 0};

    write_frames(fd, 5, pts, 1);
    assert_int_equal(bl_wal_scan(fd, CAP, SALT, &start, UINT64_MAX, count_cb, &s, &end), 0);
    assert_int_equal(s.frames, 5);
    assert_int_equal(end.lsn, 10);
    assert_int_equal(end.pos, pts[5].pos);

    /* tear the third frame: one byte in the middle of its body */
    unsigned char b = 0;
    uint64_t mid = (pts[2].pos + pts[3].pos) / 2;
    assert_int_equal(pread(fd, &b, 1, (off_t)(BL_WAL_HDR + mid)), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)(BL_WAL_HDR + mid)), 1);
    s = (seen){0, 0};
    assert_int_equal(bl_wal_scan(fd, CAP, SALT, &start, UINT64_MAX, count_cb, &s, &end), 0);
    assert_int_equal(s.frames, 2); /* the frames after it never count */
    assert_int_equal(end.lsn, 4);
    assert_int_equal(end.pos, pts[2].pos);

    /* a bound on the LSN stops before a frame that goes past it */
    s = (seen){0, 0};
    assert_int_equal(bl_wal_scan(fd, CAP, SALT, &start, 3, count_cb, &s, &end), 0);
    assert_int_equal(s.frames, 1);
    close(fd);
    tu_rmtree(dir);
    free(dir);
}

/* A frame rewritten with the same size and LSNs but other bytes (a group
 * that failed and was written again by someone else) leaves the next
 * frame, from the old chain, at the right position with the right LSN:
 * the chain keeps it out. */
static void wal__leftover_of_an_overwritten_chain_is_not_applied(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walchain");
    int fd = ring_file(dir);
    unsigned char buf[4096];
    bl_wal_at pts[4], start = {0, 0, SALT}, end;
    seen s = {0, 0};
    uint64_t sum;

    write_frames(fd, 3, pts, 2);
    /* frame 2 again, same size, other key bytes (tag 9 vs 2xx: same lengths) */
    size_t size = make_frame(buf, pts[1].pos, pts[1].lsn + 1, 2, pts[1].chain, 299, &sum);
    assert_int_equal(pts[1].pos + size, pts[2].pos);
    put_frame(fd, pts[1].pos, buf, size);
    assert_int_equal(bl_wal_scan(fd, CAP, SALT, &start, UINT64_MAX, count_cb, &s, &end), 0);
    assert_int_equal(s.frames, 2); /* frame 3 belongs to the old chain */
    assert_int_equal(end.lsn, 4);
    close(fd);
    tu_rmtree(dir);
    free(dir);
}

/* The ring's next lap overwrites the first frames; frames of the old lap
 * after the new end are at the right offsets but not the right positions. */
static void wal__a_stale_lap_is_not_applied(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("wallap");
    int fd = ring_file(dir);
    unsigned char buf[4096];
    bl_wal_at at = {0, 0, SALT}, end;
    seen s = {0, 0};
    uint64_t n = 0;

    /* lap 0: frames until the ring is nearly full, then WRAP */
    for (;;) {
        uint64_t sum;
        size_t size = make_frame(buf, at.pos, at.lsn + 1, 2, at.chain, (int)n, &sum);
        if (at.pos % CAP + size + BL_WAL_FRAME_HDR > CAP) {
            unsigned char w[BL_WAL_FRAME_HDR];
            uint64_t ws = bl_wframe_seal(w, BL_WF_WRAP, SALT, at.pos, at.lsn + 1, 0, 0, 0, 0,
                                         at.chain);
            put_frame(fd, at.pos, w, sizeof w);
            at = (bl_wal_at){at.lsn, (at.pos / CAP + 1) * CAP, ws};
            break;
        }
        put_frame(fd, at.pos, buf, size);
        at = (bl_wal_at){at.lsn + 2, at.pos + size, sum};
        n++;
    }
    bl_wal_at lap1 = at;
    /* lap 1: two frames over the first ones */
    for (int i = 0; i < 2; i++) {
        uint64_t sum;
        size_t size = make_frame(buf, at.pos, at.lsn + 1, 2, at.chain, 500 + i, &sum);
        put_frame(fd, at.pos, buf, size);
        at = (bl_wal_at){at.lsn + 2, at.pos + size, sum};
    }
    assert_int_equal(bl_wal_scan(fd, CAP, SALT, &(bl_wal_at){0, 0, SALT}, UINT64_MAX, count_cb,
                                 &s, &end),
                     0);
    /* from the start: lap 0 up to the point lap 1 overwrote, then nothing */
    assert_true(s.frames < n);
    s = (seen){0, 0};
    assert_int_equal(bl_wal_scan(fd, CAP, SALT, &lap1, UINT64_MAX, count_cb, &s, &end), 0);
    assert_int_equal(s.frames, 2); /* lap 0's third frame onwards is stale */
    assert_int_equal(end.pos, at.pos);
    assert_int_equal(end.lsn, at.lsn);
    close(fd);
    tu_rmtree(dir);
    free(dir);
}

/* ---- the store ------------------------------------------------------------------ */

static bindlog *open_opts(const char *dir, int durability, uint64_t log_size, int ro)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = durability;
    o.log_size = log_size;
    o.read_only = ro;
    int rc = bindlog_open(&s, dir, &o);
    if (rc != 0)
        fail_msg("open %s: %s (%s)", dir, bindlog_code_name(rc), bindlog_last_error());
    return s;
}

static void bind_n(bindlog *s, int from, int n, const char *prefix)
{
    char key[64], sid[64];
    for (int i = from; i < from + n; i++) {
        snprintf(key, sizeof key, "%s-k%d", prefix, i % 50);
        snprintf(sid, sizeof sid, "%s-s%d", prefix, i);
        assert_int_equal(bindlog_bind(s, key, sid, NULL, NULL, "origin", 6, NULL),
                         BINDLOG_APPLIED);
    }
}

static void assert_clean(bindlog *s)
{
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    if (rep.problems)
        fail_msg("check: %s", rep.message);
}

static void wal__reads_see_the_tail_before_any_checkpoint(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("waltail");
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    bindlog *s = open_opts(dir, BINDLOG_DURABILITY_NORMAL, 0, 0);
    bindlog_stats st;
    bindlog_binding b;
    bindlog_session ss;
    unsigned char d0[BINDLOG_DIGEST_SIZE], d1[BINDLOG_DIGEST_SIZE];
    uint64_t lsn, head;

    bind_n(s, 0, 120, "t");
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 120);
    assert_int_equal(st.checkpoint_lsn, 0); /* all of it is in the log only */
    assert_int_equal(st.log_records, 120);
    assert_int_equal(st.bindings, 50);
    assert_int_equal(st.commits, 120);
    assert_int_equal(st.grouped_events, 120);
    assert_true(st.log_size > 0);
    assert_int_equal(bindlog_get(s, "t-k19", &b), 0);
    assert_string_equal(b.session_id, "t-s119");
    assert_int_equal(bindlog_session_get(s, "t-s3", &ss, NULL, 0), 0);
    assert_int_equal(ss.ended_lsn, 54); /* ended by the bind of t-s53 */
    /* iterators: the log, a key's history, bindings */
    bindlog_iter *it;
    bindlog_record rec;
    int n = 0;
    assert_int_equal(bindlog_log_iter(s, 0, UINT64_MAX, &it), 0);
    while (bindlog_iter_next_record(it, &rec) == 1)
        assert_int_equal(rec.lsn, (uint64_t)++n);
    bindlog_iter_close(it);
    assert_int_equal(n, 120);
    assert_int_equal(bindlog_history_iter(s, "t-k7", &it), 0);
    n = 0;
    while (bindlog_iter_next_record(it, &rec) == 1)
        n++;
    bindlog_iter_close(it);
    assert_int_equal(n, 3); /* s7, s57, s107 */
    assert_int_equal(bindlog_digest(s, d0, &head), 0);
    assert_int_equal(head, 120);
    assert_clean(s);

    /* folding changes where things are, not what they are */
    assert_int_equal(bindlog_checkpoint(s, &lsn), 0);
    assert_int_equal(lsn, 120);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.checkpoint_lsn, 120);
    assert_int_equal(st.bindings, 50);
    assert_int_equal(bindlog_digest(s, d1, NULL), 0);
    assert_memory_equal(d0, d1, sizeof d0);
    /* and half folded: some in LMDB, some in the log */
    bind_n(s, 120, 30, "t");
    assert_int_equal(bindlog_get(s, "t-k19", &b), 0);
    assert_string_equal(b.session_id, "t-s119");
    assert_int_equal(bindlog_get(s, "t-k21", &b), 0);
    assert_string_equal(b.session_id, "t-s121");
    assert_clean(s);
    bindlog_close(s);
    unsetenv("BINDLOG_CHECKPOINT");
    tu_rmtree(dir);
    free(dir);
}

/* The ids of sid's children, newest first, joined by ',' into out. */
static void children_list(bindlog *s, const char *sid, char *out, size_t cap)
{
    bindlog_iter *it;
    bindlog_session ss;
    size_t len = 0;
    int rc;
    out[0] = '\0';
    assert_int_equal(bindlog_children_iter(s, sid, &it), 0);
    while ((rc = bindlog_iter_next_session(it, &ss, NULL, 0)) == 1)
        len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? "," : "", ss.session_id);
    assert_int_equal(rc, 0);
    bindlog_iter_close(it);
}

/*
 * Snapshots of the same state share the sorted view of a table of the
 * log's tail (snap.c): `bindlog lineage` takes an iterator per session.
 * Each shared view must be exactly the state of the snapshot that copies
 * it: after a commit (new bounds) and after a checkpoint (a trim), the
 * iterators see the new children, not the kept view's.
 */
static void wal__iterators_share_a_view_only_of_the_same_state(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walview");
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    bindlog *s = open_opts(dir, BINDLOG_DURABILITY_NONE, 0, 0);
    bl_walenv *w = s->e->wal;
    const char *k = "agent:main:telegram:dm:5";
    char got[256], want[256], parent[32], child[32];
    bindlog_result r;
    enum { CHAIN = 600 };

    /* a chain of splits, all of it in the log's tail (no checkpoint) */
    assert_int_equal(bindlog_bind(s, k, "c-0", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    for (int i = 1; i <= CHAIN; i++) {
        snprintf(parent, sizeof parent, "c-%d", i - 1);
        snprintf(child, sizeof child, "c-%d", i);
        assert_int_equal(bindlog_split(s, k, parent, child, BINDLOG_ANY_GENERATION, NULL, 0, &r),
                         BINDLOG_APPLIED);
    }
    uint64_t shared0 = atomic_load(&w->views_shared);
    for (int i = 0; i <= CHAIN; i++) {
        snprintf(parent, sizeof parent, "c-%d", i);
        children_list(s, parent, got, sizeof got);
        if (i < CHAIN)
            snprintf(want, sizeof want, "c-%d", i + 1);
        else
            want[0] = '\0';
        assert_string_equal(got, want);
    }
    /* 601 iterators of one state: all but the first few copied a view */
    assert_true(atomic_load(&w->views_shared) - shared0 >= CHAIN);

    /* a commit moves the bounds: c-10 gets a second child, newest first */
    assert_int_equal(bindlog_bind(s, k, "c-10", "c-600", "resume", NULL, 0, NULL), BINDLOG_APPLIED);
    assert_int_equal(bindlog_split(s, k, "c-10", "x-1", BINDLOG_ANY_GENERATION, NULL, 0, &r),
                     BINDLOG_APPLIED);
    for (int round = 0; round < 4; round++) {
        children_list(s, "c-10", got, sizeof got);
        assert_string_equal(got, "x-1,c-11");
        children_list(s, "c-300", got, sizeof got);
        assert_string_equal(got, "c-301");
    }

    /* a checkpoint trims the index and lets the kept views go */
    assert_int_equal(bindlog_checkpoint(s, NULL), 0);
    for (int round = 0; round < 3; round++) {
        children_list(s, "c-10", got, sizeof got);
        assert_string_equal(got, "x-1,c-11");
    }
    /* and the log's tail grows again past the checkpoint */
    assert_int_equal(bindlog_split(s, k, "x-1", "x-2", BINDLOG_ANY_GENERATION, NULL, 0, &r),
                     BINDLOG_APPLIED);
    children_list(s, "x-1", got, sizeof got);
    assert_string_equal(got, "x-2");
    /* every commit, refused ones too, leaves the count of callers inside
     * one (the page walk holds its first reads while it is not 0; it is
     * kept from a writable open to the end of the walk's read) */
    assert_int_equal(bindlog_split(s, k, "x-2", "x-3", BINDLOG_ANY_GENERATION, NULL, 0, &r),
                     BINDLOG_APPLIED);
    assert_int_equal(bindlog_split(s, k, "c-1", "c-2", BINDLOG_ANY_GENERATION, NULL, 0, &r),
                     BINDLOG_MOVED);
    assert_int_equal(bindlog_bind(s, k, "bad\nid", NULL, NULL, NULL, 0, NULL), BINDLOG_EINVAL);
    assert_int_equal(atomic_load(&w->committing), 0);
    assert_clean(s);
    bindlog_close(s);
    unsetenv("BINDLOG_CHECKPOINT");
    tu_rmtree(dir);
    free(dir);
}

static void wal__recovery_at_open_replays_the_log(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walrecover");
    bindlog_close(open_opts(dir, BINDLOG_DURABILITY_FULL, 0, 0));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* a process that dies without closing: nothing folded */
        setenv("BINDLOG_CHECKPOINT", "manual", 1);
        bindlog *s = NULL;
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        o.durability = BINDLOG_DURABILITY_NORMAL;
        if (bindlog_open(&s, dir, &o) != 0)
            _exit(2);
        char key[32], sid[32];
        for (int i = 0; i < 300; i++) {
            snprintf(key, sizeof key, "r-k%d", i % 40);
            snprintf(sid, sizeof sid, "r-s%d", i);
            if (bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
                _exit(3);
        }
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    bindlog *s = open_opts(dir, BINDLOG_DURABILITY_FULL, 0, 1); /* read-only */
    bindlog_stats st;
    bindlog_binding b;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 300);
    assert_int_equal(st.checkpoint_lsn, 0);
    assert_int_equal(bindlog_get(s, "r-k19", &b), 0);
    assert_string_equal(b.session_id, "r-s299");
    assert_clean(s);
    bindlog_close(s);
    /* a writer's close folds it */
    s = open_opts(dir, BINDLOG_DURABILITY_FULL, 0, 0);
    bindlog_close(s);
    s = open_opts(dir, BINDLOG_DURABILITY_FULL, 0, 1);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.checkpoint_lsn, 300);
    assert_int_equal(st.head_lsn, 300);
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

static void wal__a_full_log_is_checkpointed_by_its_writer(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walfull");
    setenv("BINDLOG_CHECKPOINT", "manual", 1); /* no background thread: the writer must */
    bindlog *s = open_opts(dir, BINDLOG_DURABILITY_NONE, 64 << 10, 0);
    bindlog_stats st;

    bind_n(s, 0, 3000, "f"); /* about 20 times what the log holds */
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 3000);
    assert_true(st.checkpoint_lsn > 2000);
    assert_int_equal(st.log_size, BL_WAL_HDR + (64 << 10));
    assert_clean(s);
    bindlog_close(s);
    unsetenv("BINDLOG_CHECKPOINT");
    tu_rmtree(dir);
    free(dir);
}

/* A checkpoint writes each key's newest value, whatever its keys share:
 * short keys, keys that are prefixes of others, keys alike in their first
 * 8 bytes (what the fold sorts by before it compares whole keys), each
 * written several times, in several batches and groups, before one
 * checkpoint. */
static void wal__a_checkpoint_writes_the_newest_value_of_every_key(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walfold");
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    bindlog *s = open_opts(dir, BINDLOG_DURABILITY_NONE, 4 << 20, 0);
    static const char *const fixed[] = {"a", "ab", "abcdefg", "abcdefgh", "abcdefgh0",
                                        "abcdefgha", "abcdefghab", "b", "abcdefg0"};
    enum { NFIX = sizeof fixed / sizeof fixed[0], NGEN = 300, NKEY = NFIX + NGEN, ROUNDS = 4 };
    static char keys[NKEY][48], sids[NKEY][48];
    bindlog_event ev[NKEY];
    bindlog_result r[NKEY];
    size_t bad;
    uint64_t lsn;

    for (int i = 0; i < NFIX; i++)
        snprintf(keys[i], sizeof keys[i], "%s", fixed[i]);
    for (int i = 0; i < NGEN; i++) /* same first 8 bytes; decimal, not zero padded */
        snprintf(keys[NFIX + i], sizeof keys[0], "agent:main:dm:%d", (i * 7919) % 1000);
    for (int round = 0; round < ROUNDS; round++) {
        /* each round binds every key to a new session, in reverse order in
         * the odd rounds, half of it in one batch and the rest one event
         * a group */
        for (int i = 0; i < NKEY; i++) {
            int k = round % 2 ? NKEY - 1 - i : i;
            snprintf(sids[k], sizeof sids[k], "fold-%d-%d", round, k);
            ev[i] = (bindlog_event){BINDLOG_EVENT_BIND, keys[k], sids[k], NULL, 0, NULL, "o", 1};
        }
        assert_int_equal(bindlog_apply_batch(s, ev, NKEY / 2, r, &bad), 0);
        for (int i = NKEY / 2; i < NKEY; i++)
            assert_int_equal(bindlog_apply_batch(s, &ev[i], 1, r, &bad), 0);
    }
    assert_int_equal(bindlog_checkpoint(s, &lsn), 0);
    assert_int_equal(lsn, (uint64_t)NKEY * ROUNDS);
    bindlog_close(s);
    /* closed: the log is empty, every value comes from data.mdb */
    s = open_opts(dir, BINDLOG_DURABILITY_NONE, 0, 1);
    for (int k = 0; k < NKEY; k++) {
        bindlog_binding b;
        char want[48];
        snprintf(want, sizeof want, "fold-%d-%d", ROUNDS - 1, k);
        assert_int_equal(bindlog_get(s, keys[k], &b), 0);
        assert_string_equal(b.session_id, want);
    }
    assert_clean(s);
    bindlog_close(s);
    unsetenv("BINDLOG_CHECKPOINT");
    tu_rmtree(dir);
    free(dir);
}

static void wal__a_group_larger_than_half_the_log_is_enospc(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walbig");
    bindlog *s = open_opts(dir, BINDLOG_DURABILITY_NONE, 64 << 10, 0);
    static char origin[16000];
    bindlog_event ev[3];
    bindlog_result r[3];
    size_t bad = 99;
    uint64_t head;
    unsigned char d0[BINDLOG_DIGEST_SIZE], d1[BINDLOG_DIGEST_SIZE];

    memset(origin, 'o', sizeof origin);
    bind_n(s, 0, 5, "g");
    assert_int_equal(bindlog_digest(s, d0, &head), 0);
    for (int i = 0; i < 3; i++) {
        static char keys[3][24], sids[3][24]; /* room for any int */
        snprintf(keys[i], sizeof keys[i], "big%d", i);
        snprintf(sids[i], sizeof sids[i], "big-s%d", i);
        ev[i] = (bindlog_event){BINDLOG_EVENT_BIND, keys[i], sids[i], NULL, 0, NULL, origin,
                                sizeof origin};
    }
    /* 3 records + 3 sessions, each with a 16 KB origin: about 96 KB */
    assert_int_equal(bindlog_apply_batch(s, ev, 3, r, &bad), BINDLOG_ENOSPC);
    assert_non_null(strstr(bindlog_last_error(), "half"));
    assert_int_equal(bindlog_digest(s, d1, NULL), 0);
    assert_memory_equal(d0, d1, sizeof d0);
    /* one at a time fits */
    assert_int_equal(bindlog_apply_batch(s, ev, 1, r, &bad), 0);
    assert_int_equal(r[0].lsn, head + 1);
    assert_clean(s);
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

/* The pages LMDB's free list holds in records (one a commit, keyed by its
 * transaction id) up to `upto`, and the highest key. */
static uint64_t free_pages_upto(bl_env *e, uint64_t upto, uint64_t *maxkey)
{
    MDB_txn *txn;
    MDB_cursor *c;
    MDB_val k, v;
    uint64_t n = 0;
    *maxkey = 0;
    assert_int_equal(mdb_txn_begin(e->env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_cursor_open(txn, 0, &c), 0);
    while (mdb_cursor_get(c, &k, &v, MDB_NEXT) == 0) {
        size_t id, pages;
        memcpy(&id, k.mv_data, sizeof id);
        memcpy(&pages, v.mv_data, sizeof pages); /* an IDL: its count first */
        if (id <= upto)
            n += pages;
        if (id > *maxkey)
            *maxkey = id;
    }
    mdb_cursor_close(c);
    mdb_txn_abort(txn);
    return n;
}

/* Checkpoints back to back: LMDB reuses a page only from the second commit
 * after the one that freed it, so without the settling commit a checkpoint
 * could never take the pages its predecessor freed, and a store whose
 * checkpoints rewrite the same leaves carried a second copy of them. */
static void wal__a_checkpoint_reuses_the_pages_the_one_before_freed(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walreuse");
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    bindlog *s = open_opts(dir, BINDLOG_DURABILITY_NONE, 4 << 20, 0);
    enum { NKEY = 2000, ROUNDS = 3 };
    static char keys[NKEY][48], sids[NKEY][48];
    bindlog_event ev[NKEY];
    bindlog_result r[NKEY];
    size_t bad;
    uint64_t lsn, freed = 0, maxkey = 0, maxkey2;

    for (int i = 0; i < NKEY; i++)
        snprintf(keys[i], sizeof keys[i], "agent:main:telegram:dm:%d", (i * 7919) % 100000);
    for (int round = 0; round < ROUNDS; round++) {
        /* every key bound to a new session: every bindings leaf rewritten */
        for (int i = 0; i < NKEY; i++) {
            snprintf(sids[i], sizeof sids[i], "reuse-%d-%05d", round, i);
            ev[i] = (bindlog_event){BINDLOG_EVENT_BIND, keys[i], sids[i], NULL, 0, NULL, "o", 1};
        }
        assert_int_equal(bindlog_apply_batch(s, ev, NKEY, r, &bad), 0);
        assert_int_equal(bindlog_checkpoint(s, &lsn), 0);
        assert_int_equal(lsn, (uint64_t)NKEY * (round + 1));
        if (round == ROUNDS - 1) {
            /* the previous checkpoint's records are all but used up */
            uint64_t left = free_pages_upto(s->e, maxkey, &maxkey2);
            if (left * 10 > freed)
                fail_msg("the checkpoint left %llu of the %llu pages freed before it",
                         (unsigned long long)left, (unsigned long long)freed);
        } else if (round == ROUNDS - 2) {
            /* it rewrote the leaves the round before wrote: they are free */
            freed = free_pages_upto(s->e, UINT64_MAX, &maxkey);
            assert_true(freed > 20);
        }
    }
    assert_clean(s);
    bindlog_close(s);
    unsetenv("BINDLOG_CHECKPOINT");
    tu_rmtree(dir);
    free(dir);
}

/* Find the last frame of the log (for damaging it): its position in the
 * file and its size. */
static void last_frame(const char *dir, off_t *off, size_t *size)
{
    bindlog *s = open_opts(dir, BINDLOG_DURABILITY_NONE, 0, 1);
    bl_env *e = s->e;
    MDB_txn *txn;
    MDB_val k = {3, (void *)"wal"}, v;
    bl_head h;
    assert_int_equal(mdb_txn_begin(e->env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_get(txn, e->dbi[BL_DB_META], &k, &v), 0);
    uint64_t cap = bl_get64((unsigned char *)v.mv_data + 8);
    bl_wal_at at = {0, bl_get64((unsigned char *)v.mv_data + 16),
                    bl_get64((unsigned char *)v.mv_data + 24)};
    uint64_t salt = bl_get64(v.mv_data);
    assert_int_equal(bl_meta_get_head(e, txn, &h), 0);
    at.lsn = h.lsn;
    mdb_txn_abort(txn);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, BL_WAL_FILE);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    bl_wreader r;
    bl_wframe f;
    bl_wreader_init(&r, fd, cap);
    *size = 0;
    while (bl_wreader_frame(&r, salt, &at, &f) == 1) {
        *off = (off_t)(BL_WAL_HDR + at.pos % cap);
        *size = BL_WAL_FRAME_HDR + f.body_len;
        at = (bl_wal_at){at.lsn + f.nrec, bl_wframe_next(&f, cap), f.sum};
    }
    bl_wreader_free(&r);
    close(fd);
    bindlog_close(s);
    assert_true(*size > 0);
}

static void wal__a_torn_batch_is_all_or_nothing(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("waltorn");
    bindlog_close(open_opts(dir, BINDLOG_DURABILITY_NONE, 0, 0));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("BINDLOG_CHECKPOINT", "manual", 1);
        bindlog *s = NULL;
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        if (bindlog_open(&s, dir, &o) != 0)
            _exit(2);
        if (bindlog_bind(s, "a", "a1", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
            _exit(3);
        bindlog_event ev[4] = {
            {BINDLOG_EVENT_BIND, "b", "b1", NULL, 0, NULL, NULL, 0},
            {BINDLOG_EVENT_NEW_SESSION, "b", "b2", NULL, 0, NULL, NULL, 0},
            {BINDLOG_EVENT_SPLIT, "b", "b3", "b2", BINDLOG_ANY_GENERATION, NULL, NULL, 0},
            {BINDLOG_EVENT_INVALIDATE, "a", NULL, NULL, 0, NULL, NULL, 0},
        };
        bindlog_result r[4];
        if (bindlog_apply_batch(s, ev, 4, r, NULL) != 0)
            _exit(4);
        _exit(0); /* no close: the log is not folded */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    off_t off = 0;
    size_t size = 0;
    last_frame(dir, &off, &size);
    /* damage the batch's frame in its middle: the whole batch goes */
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, BL_WAL_FILE);
    int fd = open(path, O_RDWR);
    unsigned char byte;
    assert_int_equal(pread(fd, &byte, 1, off + (off_t)size / 2), 1);
    byte ^= 1;
    assert_int_equal(pwrite(fd, &byte, 1, off + (off_t)size / 2), 1);
    close(fd);

    bindlog *s = open_opts(dir, BINDLOG_DURABILITY_NONE, 0, 0);
    bindlog_stats st;
    bindlog_binding b;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 1);
    assert_int_equal(bindlog_get(s, "b", &b), BINDLOG_ENOTFOUND);
    assert_int_equal(bindlog_get(s, "a", &b), 0);
    assert_int_equal(b.generation, 1); /* the batch's invalidate is gone too */
    assert_clean(s);
    /* and the log goes on from there */
    assert_int_equal(bindlog_bind(s, "b", "b9", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

/* Rewrite meta "format" in data.mdb directly. */
static void set_format(const char *dir, uint32_t fmt)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    unsigned char b[4] = {(unsigned char)fmt, 0, 0, 0};
    MDB_val k = {6, (void *)"format"}, v = {4, b};
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 16), 0);
    assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

static void wal__a_format_1_store_names_bindlog_upgrade(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walfmt");
    bindlog *s = open_opts(dir, BINDLOG_DURABILITY_NONE, 0, 0);
    bindlog_close(s);
    set_format(dir, 1);
    for (int ro = 0; ro < 2; ro++) {
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        o.read_only = ro;
        s = (bindlog *)(uintptr_t)1;
        assert_int_equal(bindlog_open(&s, dir, &o), BINDLOG_EVERSION);
        assert_null(s);
        assert_non_null(strstr(bindlog_last_error(), "bindlog upgrade"));
    }
    set_format(dir, BINDLOG_FORMAT_VERSION);
    bindlog_close(open_opts(dir, BINDLOG_DURABILITY_NONE, 0, 0));
    tu_rmtree(dir);
    free(dir);
}

static void wal__the_log_file_is_checked_at_open(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walfile");
    char path[4200], moved[4300];
    bindlog *s = open_opts(dir, BINDLOG_DURABILITY_NONE, 0, 0);
    bindlog_close(s);
    snprintf(path, sizeof path, "%s/%s", dir, BL_WAL_FILE);
    snprintf(moved, sizeof moved, "%s.away", path);
    bindlog_options o = BINDLOG_OPTIONS_INIT;

    /* missing: what it held is unknown, so the store is not opened */
    assert_int_equal(rename(path, moved), 0);
    assert_int_equal(bindlog_open(&s, dir, &o), BINDLOG_ENOTFOUND);
    assert_non_null(strstr(bindlog_last_error(), BL_WAL_FILE));
    /* a symbolic link is not followed */
    assert_int_equal(symlink(moved, path), 0);
    assert_int_equal(bindlog_open(&s, dir, &o), BINDLOG_ENOTSTORE);
    assert_non_null(strstr(bindlog_last_error(), "symbolic link"));
    unlink(path);
    /* cut short */
    assert_int_equal(rename(moved, path), 0);
    assert_int_equal(truncate(path, 8192), 0);
    assert_int_equal(bindlog_open(&s, dir, &o), BINDLOG_ECORRUPT);
    assert_non_null(strstr(bindlog_last_error(), "cut"));

    /* the shared memory as a symbolic link: refused, its target untouched */
    char shm[4200], target[4300];
    struct stat st;
    snprintf(shm, sizeof shm, "%s/%s", dir, BL_SHM_FILE);
    snprintf(target, sizeof target, "%s/elsewhere", dir);
    assert_int_equal(rename(shm, target), 0);
    assert_int_equal(truncate(target, 100), 0);
    assert_int_equal(symlink(target, shm), 0);
    for (int ro = 1; ro >= 0; ro--) {
        o.read_only = ro;
        assert_int_equal(bindlog_open(&s, dir, &o), BINDLOG_ENOTSTORE);
        assert_non_null(strstr(bindlog_last_error(), BL_SHM_FILE " is a symbolic link"));
    }
    assert_int_equal(stat(target, &st), 0);
    assert_int_equal(st.st_size, 100);
    tu_rmtree(dir);
    free(dir);
}

/* Another store's log, put in place of this one's: none of its frames
 * count (the salt), and the store opens as it was. */
static void wal__another_stores_log_is_never_applied(void **state)
{
    (void)state;
    char *a = tu_mkdtemp("walsalta"), *b = tu_mkdtemp("walsaltb");
    char pa[4200], pb[4200];
    unsigned char d0[BINDLOG_DIGEST_SIZE], d1[BINDLOG_DIGEST_SIZE];

    bindlog *s = open_opts(b, BINDLOG_DURABILITY_NONE, 0, 0);
    bind_n(s, 0, 3, "b");
    assert_int_equal(bindlog_digest(s, d0, NULL), 0);
    bindlog_close(s);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("BINDLOG_CHECKPOINT", "manual", 1);
        bindlog *x = NULL;
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        if (bindlog_open(&x, a, &o) != 0)
            _exit(2);
        for (int i = 0; i < 20; i++)
            bindlog_invalidate(x, "nothing", NULL, NULL); /* refused: not logged */
        char key[32];
        for (int i = 0; i < 20; i++) {
            snprintf(key, sizeof key, "b-k%d", i % 3); /* the same keys as b */
            bindlog_bind(x, key, key, NULL, NULL, NULL, 0, NULL);
        }
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    snprintf(pa, sizeof pa, "%s/%s", a, BL_WAL_FILE);
    snprintf(pb, sizeof pb, "%s/%s", b, BL_WAL_FILE);
    assert_int_equal(rename(pa, pb), 0);
    /* its header names another salt: refused, read-write and read-only */
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    for (int ro = 0; ro < 2; ro++) {
        o.read_only = ro;
        s = NULL;
        assert_int_equal(bindlog_open(&s, b, &o), BINDLOG_ECORRUPT);
        assert_non_null(strstr(bindlog_last_error(), "bindlog.wal belongs to another log"));
    }
    /* with that header damaged, its frames still never count */
    int fd = open(pb, O_RDWR);
    unsigned char c;
    assert_true(fd >= 0);
    /* a byte of the header's checksum, flipped (writing a constant left it
     * whole once in 256 runs, where the checksum held that byte already) */
    assert_int_equal(pread(fd, &c, 1, 60), 1);
    c ^= 0xff;
    assert_int_equal(pwrite(fd, &c, 1, 60), 1);
    close(fd);
    s = open_opts(b, BINDLOG_DURABILITY_NONE, 0, 0);
    assert_int_equal(bindlog_digest(s, d1, NULL), 0);
    assert_memory_equal(d0, d1, sizeof d0);
    assert_clean(s);
    bindlog_close(s);
    tu_rmtree(a);
    tu_rmtree(b);
    free(a);
    free(b);
}

/* An iterator opened before the checkpointer grows the map must not use the
 * old map: mdb_cursor_open loads the table's root page at once, so even a
 * cursor not yet stepped re-seeks after a remap (found by machine_fuzzer's
 * 64 KiB maps, with the checkpointer growing them in the background). */
static void wal__an_iterator_survives_a_remap_before_its_first_step(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walremap");
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    bindlog_stats st0, st1;
    bindlog_iter *it;
    bindlog_binding b;
    uint64_t ck;
    int rc, n = 0;

    o.durability = BINDLOG_DURABILITY_NONE;
    o.map_size = 64 * 1024;
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    bind_n(s, 0, 5, "early");
    assert_int_equal(bindlog_checkpoint(s, &ck), 0);
    assert_int_equal(bindlog_stats_get(s, &st0), 0);
    assert_int_equal(bindlog_bindings_iter(s, &it), 0);
    /* grow the map under the open iterator: thousands of new keys, folded */
    char key[64], sid[64];
    for (int i = 0; i < 3000; i++) {
        snprintf(key, sizeof key, "late-%d", i);
        snprintf(sid, sizeof sid, "late-s%d", i);
        assert_int_equal(bindlog_bind(s, key, sid, NULL, NULL, "origin", 6, NULL),
                         BINDLOG_APPLIED);
    }
    assert_int_equal(bindlog_checkpoint(s, &ck), 0);
    assert_int_equal(bindlog_stats_get(s, &st1), 0);
    assert_true(st1.map_size > st0.map_size); /* the map was remapped */
    while ((rc = bindlog_iter_next_binding(it, &b)) == 1) {
        assert_non_null(strstr(b.key, "early-k"));
        n++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(n, 5); /* the iterator's snapshot, whole */
    bindlog_iter_close(it);
    assert_clean(s);
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

/* ---- the index's kept records (tail.c) --------------------------------------- */

/* Link a group of nrec BIND records (LSNs first..), each with an origin of
 * olen bytes of the letter its LSN picks, to t. */
static void kept_link(bl_tail *t, uint64_t first, uint32_t nrec, size_t olen)
{
    size_t cap = BL_WAL_FRAME_HDR + (size_t)nrec * (olen + 160);
    unsigned char *buf = malloc(cap), *rec = malloc(olen + 160), *origin = malloc(olen + 1);
    size_t len = BL_WAL_FRAME_HDR;
    assert_non_null(buf);
    assert_non_null(rec);
    assert_non_null(origin);
    for (uint32_t i = 0; i < nrec; i++) {
        uint64_t lsn = first + i;
        char key[32], sid[32];
        snprintf(key, sizeof key, "k%llu", (unsigned long long)lsn);
        snprintf(sid, sizeof sid, "s%llu", (unsigned long long)lsn);
        memset(origin, 'a' + (int)(lsn % 26), olen);
        bl_record r = {.lsn = lsn, .time_ms = 1000, .generation = 1,
                       .type = BINDLOG_EVENT_BIND, .key = key, .key_len = strlen(key),
                       .sid = sid, .sid_len = strlen(sid), .reason = "switch",
                       .reason_len = 6, .flags = BL_REC_ORIGIN, .origin = origin,
                       .origin_len = olen};
        size_t rn = bl_record_encode(&r, rec, olen + 160);
        assert_true(rn > 0);
        bl_wentry_hdr(buf + len, BL_WE_RECORD, 0, 0, rn);
        memcpy(buf + len + BL_WE_HDR, rec, rn);
        len += BL_WE_HDR + rn;
    }
    bl_wframe f = {.first_lsn = first, .nrec = nrec, .time_ms = 1000,
                   .body_len = (uint32_t)(len - BL_WAL_FRAME_HDR),
                   .body = buf + BL_WAL_FRAME_HDR};
    bl_wal_at after = {first + nrec - 1, t->end.pos + len, SALT};
    bl_tgroup *g = bl_tgroup_make(&f, &after);
    assert_non_null(g);
    assert_int_equal(bl_tail_link(t, g), 0); /* the index takes g's reference */
    free(buf);
    free(rec);
    free(origin);
}

/* r is the record kept_link() made for lsn, with an origin of olen bytes. */
static void expect_linked_record(const bl_record *r, uint64_t lsn, size_t olen)
{
    assert_int_equal(r->lsn, lsn);
    assert_int_equal(r->origin_len, olen);
    for (size_t i = 0; i < olen; i++)
        if (((const char *)r->origin)[i] != 'a' + (int)(lsn % 26))
            fail_msg("record %llu: origin byte %zu is wrong", (unsigned long long)lsn, i);
}

/* 1 if the record at lsn is kept, and then it is that record, whole. */
static int kept_has(bl_tail *t, uint64_t lsn, size_t olen)
{
    const void *v;
    size_t n;
    bl_record r;
    if (!bl_tail_kept(t, lsn, &v, &n))
        return 0;
    assert_int_equal(bl_record_decode(v, n, &r), 0);
    expect_linked_record(&r, lsn, olen);
    return 1;
}

/* The record at lsn, read from its group through the index's map. */
static int map_rec(void *ctx, const bl_tver *v)
{
    bl_record *r = ctx;
    return bl_record_decode(v->val, v->vlen, r);
}

static int map_has(bl_tail *t, uint64_t lsn, size_t olen)
{
    unsigned char k[8];
    bl_record r;
    int fnrc = -1;
    bl_put64be(k, lsn);
    if (!bl_tail_get(t, BL_DB_LOG, k, 8, UINT64_MAX, map_rec, &r, &fnrc))
        return 0;
    assert_int_equal(fnrc, 0);
    expect_linked_record(&r, lsn, olen);
    return 1;
}

/* A group's memory is kept when the index lets it go and handed to the
 * next group of about its size; a small group is not given it; the last
 * index's end gives the kept blocks back (ASan and valgrind see them
 * freed).  The cache is the process's: this test's index is its only one
 * (every store of the tests before it is closed). */
static void wal__group_memory_goes_to_the_next_group(void **state)
{
    (void)state;
    bl_tail t;
    bl_wal_at base = {0, 0, SALT};
    bl_tail_init(&t, &base);

    kept_link(&t, 1, 100, 1000); /* ~110 KiB */
    bl_tgroup *g1 = t.newest;
    size_t block = g1->block, bytes1 = g1->bytes;
    assert_int_equal(block, bytes1 + bytes1 / 8); /* room for the next ones */
    bl_wal_at end = t.end;
    assert_int_equal(bl_tail_trim(&t, &end), 1); /* g1 is let go */
    assert_null(t.newest);
    kept_link(&t, 101, 100, 1000); /* longer keys: a few bytes more */
    assert_true(t.newest->bytes > bytes1);
    assert_ptr_equal(t.newest, g1);
    assert_int_equal(t.newest->block, block); /* not a block of its own size */
    for (uint64_t l = 101; l <= 200; l++)
        assert_int_equal(map_has(&t, l, 1000), 1);

    end = t.end;
    assert_int_equal(bl_tail_trim(&t, &end), 1);
    kept_link(&t, 201, 40, 1000); /* ~45 KiB: the kept block is too large for it */
    assert_true(t.newest != g1);
    kept_link(&t, 241, 90, 1000); /* ~100 KiB: it takes the block */
    assert_ptr_equal(t.newest, g1);
    assert_int_equal(t.newest->block, block);
    bl_tail_destroy(&t);
}

static void wal__the_index_keeps_the_newest_records_whole(void **state)
{
    (void)state;
    bl_tail t;
    bl_wal_at base = {0, 0, SALT};
    bl_tail_init(&t, &base);

    /* a process that never decided a group keeps nothing */
    kept_link(&t, 1, 10, 10);
    assert_int_equal(kept_has(&t, 5, 10), 0);
    bl_tail_pin(&t);
    bl_tail_unpin(&t);
    kept_link(&t, 11, 10, 10);
    assert_int_equal(kept_has(&t, 5, 10), 0); /* linked before */
    for (uint64_t l = 11; l <= 20; l++)
        assert_int_equal(kept_has(&t, l, 10), 1);
    assert_int_equal(kept_has(&t, 21, 10), 0);
    assert_int_equal(kept_has(&t, 0, 10), 0);

    /* a record too long for the ring is left to LMDB */
    kept_link(&t, 21, 1, BL_TAIL_KEPT_MAX);
    assert_int_equal(kept_has(&t, 21, BL_TAIL_KEPT_MAX), 0);

    /* ~1 KiB records: the ring wraps after ~8,000; every slot still names
     * its LSN, so only the ring's position tells what was overwritten */
    uint64_t first = 22, last = first + 20000 - 1;
    for (uint64_t l = first; l <= last; l += 100)
        kept_link(&t, l, 100, 1000);
    uint64_t oldest = last;
    while (oldest > first && kept_has(&t, oldest - 1, 1000))
        oldest--;
    uint64_t nkept = last - oldest + 1;
    if (nkept < 7000 || nkept > BL_TAIL_KEPT_BYTES / 1000)
        fail_msg("%llu records of ~1 KiB kept in a ring of %u bytes", (unsigned long long)nkept,
                 BL_TAIL_KEPT_BYTES);
    for (uint64_t l = first; l < oldest; l++)
        assert_int_equal(kept_has(&t, l, 1000), 0);

    /* a checkpoint trims the map, not the kept records */
    bl_wal_at end = t.end;
    assert_int_equal(bl_tail_trim(&t, &end), 1);
    assert_int_equal(kept_has(&t, last, 1000), 1);
    assert_int_equal(kept_has(&t, oldest, 1000), 1);
    /* a log that moved on without this index: nothing kept is trusted */
    bl_wal_at past = {last + 5, end.pos + 4096, SALT};
    assert_int_equal(bl_tail_trim(&t, &past), 1);
    assert_int_equal(kept_has(&t, last, 1000), 0);

    /* small records: slots, not bytes, run out after BL_TAIL_KEPT */
    first = last + 6;
    uint64_t n = 70000; /* > BL_TAIL_KEPT, whole groups of 1000 */
    for (uint64_t l = first; l < first + n; l += 1000)
        kept_link(&t, l, 1000, 0);
    last = first + n - 1;
    assert_int_equal(kept_has(&t, first, 0), 0);
    assert_int_equal(kept_has(&t, last - BL_TAIL_KEPT, 0), 0);
    assert_int_equal(kept_has(&t, last - BL_TAIL_KEPT + 1, 0), 1);
    assert_int_equal(kept_has(&t, last, 0), 1);

    /* a restarted index forgets them all */
    bl_tail_reset(&t, &(bl_wal_at){last, t.end.pos, SALT});
    assert_int_equal(kept_has(&t, last, 0), 0);
    kept_link(&t, last + 1, 1, 0);
    assert_int_equal(kept_has(&t, last + 1, 0), 1);
    bl_tail_destroy(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wal__frame_round_trip),
        cmocka_unit_test(wal__every_flipped_byte_is_refused),
        cmocka_unit_test(wal__salt_position_lsn_and_chain_each_count),
        cmocka_unit_test(wal__version_1_frames_are_still_read),
        cmocka_unit_test(wal__body_parser_refuses_garbage),
        cmocka_unit_test(wal__scan_stops_at_a_torn_frame),
        cmocka_unit_test(wal__leftover_of_an_overwritten_chain_is_not_applied),
        cmocka_unit_test(wal__a_stale_lap_is_not_applied),
        cmocka_unit_test(wal__reads_see_the_tail_before_any_checkpoint),
        cmocka_unit_test(wal__recovery_at_open_replays_the_log),
        cmocka_unit_test(wal__a_full_log_is_checkpointed_by_its_writer),
        cmocka_unit_test(wal__a_checkpoint_writes_the_newest_value_of_every_key),
        cmocka_unit_test(wal__a_checkpoint_reuses_the_pages_the_one_before_freed),
        cmocka_unit_test(wal__a_group_larger_than_half_the_log_is_enospc),
        cmocka_unit_test(wal__a_torn_batch_is_all_or_nothing),
        cmocka_unit_test(wal__a_format_1_store_names_bindlog_upgrade),
        cmocka_unit_test(wal__the_log_file_is_checked_at_open),
        cmocka_unit_test(wal__another_stores_log_is_never_applied),
        cmocka_unit_test(wal__an_iterator_survives_a_remap_before_its_first_step),
        cmocka_unit_test(wal__the_index_keeps_the_newest_records_whole),
        cmocka_unit_test(wal__group_memory_goes_to_the_next_group),
        cmocka_unit_test(wal__iterators_share_a_view_only_of_the_same_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
