/*
 * test_limits.c -- every length and number from a store or a stream is
 * checked against its limit before it is used.
 *
 * Lengths: LMDB hands back whatever length a node header says.  These tests
 * forge the header itself -- the bytes of a leaf node in a copy of
 * data.mdb, as a flipped bit would leave them (a 160-byte record read as
 * 536,871,072 bytes) -- rather than storing an oversize value through
 * LMDB, which would only test LMDB.  Before the checks, hashing or copying
 * such a value ran off the map (SIGBUS); now every reader refuses it with
 * BINDLOG_ECORRUPT and a message naming the table, the entry and the
 * length, and check reports it.
 *
 * Numbers: LSNs stay at or below BINDLOG_LSN_MAX (2^63 - 1) and times
 * within years 0-9999 (BINDLOG_TIME_*_MS): forged streams beyond them are
 * refused at the right byte offset with nothing applied, the decoders
 * refuse such records, the event that would need LSN 2^63 is refused with
 * BINDLOG_ENOSPC, and a clock past year 9999 logs nothing.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "bindlog.h"
#include "core/backend.h"
#include "core/digest.h"
#include "core/error.h"
#include "core/record.h"
#include "lmdb/limits.h"
#include "lmdb/walenv.h"
#include "testutil.h"

typedef struct fx {
    char *tmp;
    char dir[1024];
    int64_t now;
} fx;

static int64_t fx_clock(void *ctx)
{
    int64_t *t = ctx;
    return *t += 10;
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    f->tmp = tu_mkdtemp("limits");
    snprintf(f->dir, sizeof(f->dir), "%s/store", f->tmp);
    f->now = 1767225600000; /* 2026-01-01 */
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    tu_rmtree(f->tmp);
    free(f->tmp);
    free(f);
    return 0;
}

static bindlog *open_store(fx *f, const char *dir, int read_only)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.read_only = read_only;
    o.clock_ms = fx_clock;
    o.clock_ctx = &f->now;
    int rc = bindlog_open(&s, dir, &o);
    if (rc != 0)
        fail_msg("open %s: %s", dir, bindlog_last_error());
    return s;
}

static void assert_error_mentions(const char *what)
{
    const char *m = bindlog_last_error();
    if (strstr(m, what) == NULL)
        fail_msg("last error \"%s\" does not mention \"%s\"", m, what);
}

/* ---- the decoders' own bounds ------------------------------------------------ */

/* Lengths past the limit are refused before a byte is read: the buffers
 * below are far shorter than the lengths claimed, so reading them would be
 * an ASan finding (and, with a mapped store, a SIGBUS). */
static void limits__decoders_refuse_over_limit_lengths(void **state)
{
    (void)state;
    unsigned char small[64] = {1};
    bl_record r;
    bl_bval b;
    bl_sval sv;

    bl_err_clear();
    assert_int_equal(bl_record_decode(small, (size_t)536871072, &r), BINDLOG_ECORRUPT);
    assert_non_null(strstr(bl_err_get(), "536871072 bytes is over the limit"));
    assert_int_equal(bl_record_decode(small, BL_RECORD_MAX + 1, &r), BINDLOG_ECORRUPT);
    assert_int_equal(bl_bval_decode(small, BL_BVAL_MAX + 1, &b), BINDLOG_ECORRUPT);
    assert_non_null(strstr(bl_err_get(), "binding value"));
    assert_int_equal(bl_sval_decode(small, (size_t)1879048335, &sv), BINDLOG_ECORRUPT);
    assert_non_null(strstr(bl_err_get(), "session value of 1879048335 bytes"));
    assert_int_equal(bl_sval_decode_trusted(small, BL_SVAL_MAX + 1, &sv), BINDLOG_ECORRUPT);

    bl_digest *d = bl_digest_new();
    assert_non_null(d);
    assert_int_equal(bl_digest_add(d, 'B', "k", 1, small, (size_t)1879048335), BINDLOG_ECORRUPT);
    assert_non_null(strstr(bl_err_get(), "bindings table, key k: value of 1879048335 bytes"));
    assert_int_equal(bl_digest_add(d, 'S', "s", 1, small, BL_SVAL_MAX + 1), BINDLOG_ECORRUPT);
    assert_int_equal(bl_digest_add(d, 'B', small, BINDLOG_KEY_MAX + 1, small, 30),
                     BINDLOG_ECORRUPT);
    assert_int_equal(bl_digest_add(d, 'S', small, 0, small, 30), BINDLOG_ECORRUPT);
    /* the largest legal entries still go in */
    unsigned char *big = calloc(1, BL_SVAL_MAX);
    assert_int_equal(bl_digest_add(d, 'S', "s", 1, big, BL_SVAL_MAX), 0);
    assert_int_equal(bl_digest_add(d, 'B', "k", 1, big, BL_BVAL_MAX), 0);
    free(big);
    bl_digest_free(d);
}

/* The table of limits itself: keys and values of each table, the largest
 * legal ones in, one byte more out, with a message naming table and entry. */
static void limits__table_limits(void **state)
{
    (void)state;
    static unsigned char big[BL_RECORD_MAX + 1];
    unsigned char lsn[8];
    bl_put64be(lsn, 42);
    static const struct {
        int db;
        size_t kmax, vmax;
    } t[] = {
        {BL_DB_META, BL_META_KEY_MAX, BL_META_VALUE_MAX},
        {BL_DB_LOG, 8, BL_RECORD_MAX},
        {BL_DB_BINDINGS, BINDLOG_KEY_MAX, BL_BVAL_MAX},
        {BL_DB_BASE_BINDINGS, BINDLOG_KEY_MAX, BL_BVAL_MAX},
        {BL_DB_SESSIONS, BINDLOG_ID_MAX, BL_SVAL_MAX},
        {BL_DB_BASE_SESSIONS, BINDLOG_ID_MAX, BL_SVAL_MAX},
        {BL_DB_CHILDREN, BL_LCHILD_KEY_MAX, 0},
        {BL_DB_HISTORY, BL_HISTORY_KEY_MAX, 0},
    };
    memset(big, 'a', sizeof big);
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        MDB_val k = {t[i].kmax, t[i].db == BL_DB_LOG ? (void *)lsn : (void *)big};
        MDB_val v = {t[i].vmax, big};
        assert_int_equal(bl_entry_check(t[i].db, &k, &v), 0);
        v.mv_size = t[i].vmax + 1;
        bl_err_clear();
        assert_int_equal(bl_entry_check(t[i].db, &k, &v), BINDLOG_ECORRUPT);
        assert_non_null(strstr(bl_err_get(), bl_db_name(t[i].db)));
        assert_non_null(strstr(bl_err_get(), "is over the limit"));
        v.mv_size = t[i].vmax;
        k.mv_size = t[i].kmax + 1;
        assert_int_equal(bl_entry_check(t[i].db, &k, &v), BINDLOG_ECORRUPT);
        k.mv_size = 0;
        assert_int_equal(bl_entry_check(t[i].db, &k, &v), BINDLOG_ECORRUPT);
    }
    MDB_val k = {8, lsn}, v = {536871072, big};
    assert_int_equal(bl_entry_check(BL_DB_LOG, &k, &v), BINDLOG_ECORRUPT);
    assert_string_equal(bl_err_get(), "data.mdb: table log, LSN 42: value of 536871072 bytes "
                                      "is over the limit of 66311 bytes (a damaged page)");
    /* a children key is a parent's 8-byte LSN and a child id: 8 bytes is short */
    k = (MDB_val){8, lsn};
    v.mv_size = 0;
    assert_int_equal(bl_entry_check(BL_DB_CHILDREN, &k, &v), BINDLOG_ECORRUPT);
    k.mv_size = 9;
    k.mv_data = big;
    assert_int_equal(bl_entry_check(BL_DB_CHILDREN, &k, &v), 0);
    /* a table not in the list: LMDB's own key limit, the largest value */
    k.mv_size = 511;
    k.mv_data = big;
    v.mv_size = BL_RECORD_MAX;
    assert_int_equal(bl_entry_check(-1, &k, &v), 0);
    v.mv_size = BL_RECORD_MAX + 1;
    assert_int_equal(bl_entry_check(-1, &k, &v), BINDLOG_ECORRUPT);
}

/* ---- forging a node header in data.mdb -------------------------------------------- */

typedef struct file_bytes {
    unsigned char *p;
    size_t n;
} file_bytes;

static file_bytes slurp(const char *path)
{
    file_bytes b = {0};
    int fd = open(path, O_RDONLY);
    struct stat st;
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    b.n = (size_t)st.st_size;
    b.p = malloc(b.n);
    assert_int_equal(pread(fd, b.p, b.n, 0), (ssize_t)b.n);
    close(fd);
    return b;
}

static void spill(const char *path, const file_bytes *b)
{
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, b->p, b->n, 0), (ssize_t)b->n);
    close(fd);
}

/*
 * Set the data size of every LMDB leaf node whose key is `key` (and whose
 * data starts with `first`) to `size`, in dir/data.mdb.  A leaf node is
 * u16 mn_lo, u16 mn_hi (the data size, low and high halves on a
 * little-endian machine), u16 mn_flags, u16 mn_ksize, the key, the data.
 * Stale copies of the node in free pages are patched too, which is
 * harmless.  Returns how many nodes were patched.
 */
static int forge_node_size(const char *dir, const void *key, size_t klen, unsigned char first,
                           uint32_t size)
{
    char path[1100];
    int n = 0;
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    file_bytes b = slurp(path);
    for (size_t off = 8; off + klen + 1 <= b.n; off++) {
        if (memcmp(b.p + off, key, klen) != 0 || b.p[off + klen] != first)
            continue;
        unsigned char *node = b.p + off - 8;
        if (bl_get16(node + 6) != klen || bl_get16(node + 4) != 0 || bl_get16(node + 2) != 0)
            continue;
        bl_put16(node, (uint16_t)size);
        bl_put16(node + 2, (uint16_t)(size >> 16));
        n++;
    }
    spill(path, &b);
    free(b.p);
    return n;
}

/* The size a flipped bit of mn_hi gives a small value: 2^29 more. */
#define FLIPPED(len) ((uint32_t)(len) + (UINT32_C(1) << 29))

static void bind_ok(bindlog *s, const char *key, const char *sid)
{
    bindlog_result r;
    assert_int_equal(bindlog_bind(s, key, sid, NULL, NULL, "o", 1, &r), BINDLOG_APPLIED);
}

/* Five events; the third (LSN 3) is the bind of "victim-key". */
static void make_store(fx *f)
{
    bindlog *s = open_store(f, f->dir, 0);
    bindlog_result r;
    bind_ok(s, "key-a", "sess-a");
    bind_ok(s, "key-b", "sess-b");
    bind_ok(s, "victim-key", "victim-sess");
    assert_int_equal(bindlog_new_session(s, "key-a", "sess-a2", NULL, NULL, 0, &r),
                     BINDLOG_APPLIED);
    assert_int_equal(bindlog_split(s, "key-b", "sess-b", "sess-b2", BINDLOG_ANY_GENERATION,
                                   NULL, 0, &r),
                     BINDLOG_APPLIED);
    bindlog_close(s);
}

static int read_log(bindlog *s, uint64_t *seen)
{
    bindlog_iter *it;
    bindlog_record rec;
    int rc;
    *seen = 0;
    /* a damaged page may refuse the iterator at once (the page validator) */
    if ((rc = bindlog_log_iter(s, 0, UINT64_MAX, &it)) != 0)
        return rc;
    while ((rc = bindlog_iter_next_record(it, &rec)) > 0)
        (*seen)++;
    bindlog_iter_close(it);
    return rc;
}

static void limits__forged_log_record_length_is_refused(void **state)
{
    fx *f = *state;
    unsigned char k3[8];
    char out[1100];
    bindlog_check_report rep;
    uint64_t seen, n;

    make_store(f);
    bl_put64be(k3, 3);
    /* a log record: key be64 LSN, data starting with the version byte 4
     * (99 bytes: a 16-byte head, 75 of strings, the checksum) */
    assert_true(forge_node_size(f->dir, k3, 8, 4, FLIPPED(99)) >= 1);

    bindlog *s = open_store(f, f->dir, 1);
    assert_int_equal(read_log(s, &seen), BINDLOG_ECORRUPT);
    /* the page validator refuses the log's page before any record of it is
     * handed out; the length limits would have stopped at record 3 */
    assert_true(seen <= 2);
    assert_error_mentions("table log");
    assert_error_mentions("LSN 3: value of 536871011 bytes");

    bindlog_iter *it;
    bindlog_record rec;
    /* the key's history chain is walked when the iterator opens */
    assert_int_equal(bindlog_history_iter(s, "victim-key", &it), BINDLOG_ECORRUPT);
    (void)rec;
    assert_error_mentions("LSN 3");

    /* the state names the record too: victim-sess, which LSN 3 created, is
     * kept as a reference to it (format 5), so the digest of the state
     * stops there; the other sessions still read */
    unsigned char d[BINDLOG_DIGEST_SIZE];
    bindlog_session ss;
    assert_int_equal(bindlog_digest(s, d, NULL), BINDLOG_ECORRUPT);
    assert_error_mentions("LSN 3");
    assert_int_equal(bindlog_session_get(s, "victim-sess", &ss, NULL, 0), BINDLOG_ECORRUPT);
    assert_int_equal(bindlog_session_get(s, "sess-a", &ss, NULL, 0), 0);

    snprintf(out, sizeof(out), "%s/export.bls", f->tmp);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_int_equal(bindlog_export(s, 0, fd, &n, NULL, NULL), BINDLOG_ECORRUPT);
    close(fd);
    snprintf(out, sizeof(out), "%s/replayed", f->tmp);
    assert_int_equal(bindlog_replay(s, out, UINT64_MAX, INT64_MAX, NULL, NULL, NULL, NULL),
                     BINDLOG_ECORRUPT);
    uint64_t lsn;
    assert_int_equal(bindlog_lsn_at_time(s, 1767225600030, &lsn), BINDLOG_ECORRUPT);

    /* check reports it (exit 1 in the CLI), it does not fail */
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_true(rep.problems >= 1);
    assert_int_equal(rep.first_bad_lsn, 3);
    if (strstr(rep.message, "536871011 bytes") == NULL)
        fail_msg("check says \"%s\"", rep.message);
    bindlog_close(s);

    /* compaction over it writes nothing */
    s = open_store(f, f->dir, 0);
    bindlog_stats st;
    assert_int_equal(bindlog_compact(s, 5, &n, NULL, NULL), BINDLOG_ECORRUPT);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.base_lsn, 0);
    assert_int_equal(st.log_records, 5);
    bindlog_close(s);
}

static void limits__forged_binding_length_is_refused(void **state)
{
    fx *f = *state;
    bindlog_binding b;
    bindlog_check_report rep;
    bindlog_result r;

    make_store(f);
    /* a binding value: version byte 2 first (21 bytes: a 10-byte head, the id) */
    assert_true(forge_node_size(f->dir, "victim-key", 10, 2, FLIPPED(21)) >= 1);

    bindlog *s = open_store(f, f->dir, 0);
    assert_int_equal(bindlog_get(s, "key-a", &b), 0);
    assert_int_equal(bindlog_get(s, "victim-key", &b), BINDLOG_ECORRUPT);
    assert_error_mentions("table bindings");
    assert_error_mentions("key victim-key: value of 536870933 bytes");
    unsigned char d[BINDLOG_DIGEST_SIZE];
    assert_int_equal(bindlog_digest(s, d, NULL), BINDLOG_ECORRUPT);
    assert_error_mentions("key victim-key");

    /* the page validator refuses the iterator at once, or its first step */
    bindlog_iter *it;
    int rc, n = 0;
    if ((rc = bindlog_bindings_iter(s, &it)) == 0) {
        while ((rc = bindlog_iter_next_binding(it, &b)) > 0)
            n++;
        bindlog_iter_close(it);
    }
    assert_int_equal(rc, BINDLOG_ECORRUPT);

    /* a write to the key is refused, nothing logged; and so is a write to
     * any other key once the whole-store walk a writable open starts has
     * found the damage: LMDB's writes could spread it (a page freed or
     * reused while the damage still references it), so a store with a
     * damaged page takes no write (docs/design.md, "Damaged files"; a
     * write before the walk's verdict reaches the log only) */
    bl_ckpt_walk_settle(s->e);
    bindlog_stats st;
    assert_int_equal(bindlog_bind(s, "victim-key", "other", NULL, NULL, NULL, 0, &r),
                     BINDLOG_ECORRUPT);
    assert_error_mentions("victim-key");
    assert_int_equal(bindlog_bind(s, "key-c", "sess-c", NULL, NULL, NULL, 0, &r),
                     BINDLOG_ECORRUPT);
    assert_error_mentions("victim-key");
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 5);

    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_true(rep.problems >= 1);
    if (strstr(rep.message, "table bindings") == NULL ||
        strstr(rep.message, "key victim-key") == NULL)
        fail_msg("check says \"%s\"", rep.message);
    bindlog_close(s);
}

static void limits__forged_session_length_is_refused(void **state)
{
    fx *f = *state;
    bindlog_session ss;
    bindlog_check_report rep;
    bindlog_result r;

    make_store(f);
    /* its value is a reference (format 5): version byte 3 */
    assert_true(forge_node_size(f->dir, "victim-sess", 11, 3, (uint32_t)1879048335) >= 1);

    bindlog *s = open_store(f, f->dir, 0);
    assert_int_equal(bindlog_session_get(s, "sess-a", &ss, NULL, 0), 0);
    assert_int_equal(bindlog_session_get(s, "victim-sess", &ss, NULL, 0), BINDLOG_ECORRUPT);
    assert_error_mentions("table sessions");
    assert_error_mentions("session victim-sess: value of 1879048335 bytes");

    bindlog_iter *it;
    int rc;
    if ((rc = bindlog_sessions_iter(s, &it)) == 0) {
        while ((rc = bindlog_iter_next_session(it, &ss, NULL, 0)) > 0)
            ;
        bindlog_iter_close(it);
    }
    assert_int_equal(rc, BINDLOG_ECORRUPT);
    assert_int_equal(bindlog_ancestors_iter(s, "victim-sess", &it), BINDLOG_ECORRUPT);

    /* splitting the damaged session reads it: refused */
    assert_int_equal(bindlog_split(s, "victim-key", "victim-sess", "child", BINDLOG_ANY_GENERATION,
                                   NULL, 0, &r),
                     BINDLOG_ECORRUPT);

    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_true(rep.problems >= 1);
    if (strstr(rep.message, "victim-sess") == NULL)
        fail_msg("check says \"%s\"", rep.message);
    bindlog_close(s);
}

/* ---- forged streams ---------------------------------------------------------- */

typedef struct sbuf {
    unsigned char *p;
    size_t n, cap;
} sbuf;

static void sput(sbuf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

/* A BIND record of key -> sid (no origin, key unbound before) as
 * record.c encodes it, written by hand so that any LSN and time can go in
 * (the encoder refuses those beyond the limits). */
static size_t bind_record(unsigned char *b, uint64_t lsn, int64_t t, const char *key,
                          const char *sid)
{
    size_t kl = strlen(key), sl = strlen(sid), pos = 2;
    b[0] = BINDLOG_RECORD_VERSION;
    b[1] = BINDLOG_EVENT_BIND | BL_REC_STD_REASON << 4; /* reason "switch", the standard one */
    pos += bl_varint_put(b + pos, lsn);
    pos += bl_varint_put(b + pos, bl_zigzag(t));
    pos += bl_varint_put(b + pos, 1); /* generation after the event */
    pos += bl_varint_put(b + pos, 0); /* no previous record of the key */
    pos += bl_varint_put(b + pos, kl);
    pos += bl_varint_put(b + pos, 2 * sl); /* the id's code: its text follows (not a UUID) */
    pos += bl_varint_put(b + pos, 0);
    pos += bl_varint_put(b + pos, 0); /* reason: by the flag */
    pos += bl_varint_put(b + pos, 0);
    memcpy(b + pos, key, kl);
    pos += kl;
    memcpy(b + pos, sid, sl);
    pos += sl;
    bl_put64(b + pos, XXH3_64bits(b, pos));
    return pos + 8;
}

/*
 * A full stream, checksummed everywhere and with the right trailer: header
 * (first_lsn), an empty base image at base_time, then n BINDs "k<i>" ->
 * "s<i>" at LSNs first_lsn + i and times t[i], and a trailer whose digest
 * is that of the state they make (values written by hand, like the
 * records).  With numbers within the limits it imports; so a refusal of
 * one beyond them is the limit's doing, not the forger's.  *rec_off[i]
 * receives the offset of record i's frame.
 */
static sbuf forge_stream(uint64_t first, int64_t base_time, const int64_t *t, int n,
                         uint64_t *rec_off)
{
    sbuf b = {0};
    unsigned char hdr[32], frame[5 + 96], rec[256], val[128];
    memcpy(hdr, "BLSTREAM", 8);
    bl_put32(hdr + 8, 1);
    bl_put32(hdr + 12, 1); /* IMAGE: a full stream */
    bl_put64(hdr + 16, first);
    bl_put64(hdr + 24, XXH3_64bits(hdr, 24));
    sput(&b, hdr, sizeof hdr);

    memset(frame, 0, sizeof frame);
    frame[0] = 'C';
    bl_put32(frame + 1, 96);
    bl_put64(frame + 5, (uint64_t)base_time); /* counters and sizes all zero */
    bl_put64(frame + 5 + 88, XXH3_64bits(frame, 5 + 88));
    sput(&b, frame, sizeof frame);

    bl_digest *dg = bl_digest_new();
    for (int pass = 0; pass < 3; pass++) {
        for (int i = 0; i < n; i++) {
            char key[16], sid[16];
            uint64_t lsn = first + (uint64_t)i;
            snprintf(key, sizeof key, "k%d", i);
            snprintf(sid, sizeof sid, "s%d", i);
            size_t kl = strlen(key), sl = strlen(sid);
            if (pass == 0) {
                size_t len = bind_record(rec, lsn, t[i], key, sid);
                unsigned char fh[5] = {'R'};
                bl_put32(fh + 1, (uint32_t)len);
                rec_off[i] = b.n;
                sput(&b, fh, 5);
                sput(&b, rec, len);
            } else if (pass == 1) { /* binding value: version, sid_len, gen, lsn, time, sid */
                val[0] = 1;
                val[1] = (unsigned char)sl;
                bl_put64(val + 2, 1);
                bl_put64(val + 10, lsn);
                bl_put64(val + 18, (uint64_t)t[i]);
                memcpy(val + 26, sid, sl);
                assert_int_equal(bl_digest_add(dg, 'B', key, kl, val, 26 + sl), 0);
            } else { /* session value: a live root session of key, no origin */
                memset(val, 0, 42);
                val[0] = 1;
                bl_put16(val + 2, (uint16_t)kl);
                bl_put64(val + 10, lsn);
                bl_put64(val + 26, (uint64_t)t[i]);
                memcpy(val + 42, key, kl);
                assert_int_equal(bl_digest_add(dg, 'S', sid, sl, val, 42 + kl), 0);
            }
        }
    }
    unsigned char tr[5 + 48];
    tr[0] = 'T';
    bl_put32(tr + 1, 48);
    bl_put64(tr + 5, (uint64_t)n);
    bl_put64(tr + 13, first + (uint64_t)n - 1);
    bl_put64(tr + 21, (uint64_t)(n ? t[n - 1] : base_time));
    bl_digest_final(dg, tr + 29);
    bl_digest_free(dg);
    sput(&b, tr, 5 + 40);
    unsigned char sum[8];
    bl_put64(sum, XXH3_64bits(b.p, b.n));
    sput(&b, sum, 8);
    return b;
}

/* Import the bytes through a file; returns the code, *off the offset. */
static int import_forged(fx *f, bindlog *s, const sbuf *b, uint64_t *off)
{
    char path[1100];
    uint64_t n;
    snprintf(path, sizeof(path), "%s/forged.bls", f->tmp);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b->p, b->n), (ssize_t)b->n);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    *off = 0;
    int rc = bindlog_import(s, fd, &n, off, NULL, NULL);
    close(fd);
    return rc;
}

/* The store is as new: nothing of a refused stream applied. */
static void assert_empty(bindlog *s)
{
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 0);
    assert_int_equal(st.base_lsn, 0);
    assert_int_equal(st.log_records, 0);
    assert_int_equal(st.bindings, 0);
    assert_int_equal(st.sessions, 0);
}

static bindlog *new_target(fx *f, const char *name)
{
    char dir[1100];
    snprintf(dir, sizeof(dir), "%s/%s", f->tmp, name);
    return open_store(f, dir, 0);
}

/* The forger is right: within the limits its streams import and check
 * clean, at any LSN up to the last. */
static void limits__forged_stream_control(void **state)
{
    fx *f = *state;
    int64_t t[3] = {1000, 2000, 3000};
    uint64_t off[3], o;
    bindlog_check_report rep;

    sbuf b = forge_stream(1, 0, t, 3, off);
    bindlog *s = new_target(f, "ok1");
    assert_int_equal(import_forged(f, s, &b, &o), 0);
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 0);
    bindlog_close(s);
    free(b.p);
}

/* Issue 16's reproduction: a well-checksummed stream with first_lsn =
 * 2^64 - 3 and three binds took LSN 2^64 - 1 and broke check, replay,
 * export and every later write.  Refused at the first_lsn field. */
static void limits__stream_at_the_top_of_the_lsn_range_is_refused(void **state)
{
    fx *f = *state;
    int64_t t[3] = {1000, 2000, 3000};
    uint64_t off[3], o;

    sbuf b = forge_stream(UINT64_MAX - 2, 0, t, 3, off);
    bindlog *s = new_target(f, "top");
    assert_int_equal(import_forged(f, s, &b, &o), BINDLOG_ECORRUPT);
    assert_int_equal(o, 16);
    assert_error_mentions("first_lsn 18446744073709551613 is beyond the last LSN");
    assert_empty(s);
    free(b.p);

    /* a stream starting one below the ceiling: its second record would
     * need LSN 2^63, refused at that record's frame */
    b = forge_stream(BINDLOG_LSN_MAX, 0, t, 2, off);
    assert_int_equal(import_forged(f, s, &b, &o), BINDLOG_ECORRUPT);
    assert_int_equal(o, off[1]);
    assert_error_mentions("LSN 9223372036854775808 is beyond the last LSN");
    assert_empty(s);
    free(b.p);
    bindlog_close(s);
}

/* A store may reach the last LSN; the event after it is refused with
 * BINDLOG_ENOSPC, writes nothing, and every reader still works. */
static void limits__last_lsn_then_enospc(void **state)
{
    fx *f = *state;
    int64_t t[2] = {1000, 2000};
    uint64_t off[2], o, n;
    bindlog_result r;
    bindlog_stats st;
    bindlog_check_report rep;
    unsigned char d1[BINDLOG_DIGEST_SIZE], d2[BINDLOG_DIGEST_SIZE];
    char path[1100];

    sbuf b = forge_stream(BINDLOG_LSN_MAX - 1, 0, t, 2, off);
    bindlog *s = new_target(f, "last");
    assert_int_equal(import_forged(f, s, &b, &o), 0);
    free(b.p);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_true(st.head_lsn == BINDLOG_LSN_MAX);
    assert_int_equal(bindlog_digest(s, d1, NULL), 0);

    assert_int_equal(bindlog_bind(s, "k9", "s9", NULL, NULL, NULL, 0, &r), BINDLOG_ENOSPC);
    assert_error_mentions("the log's LSN space is exhausted");
    assert_int_equal(bindlog_invalidate(s, "k0", NULL, &r), BINDLOG_ENOSPC);
    /* what logs nothing is still answered */
    assert_int_equal(bindlog_bind(s, "k0", "s0", NULL, NULL, NULL, 0, &r), BINDLOG_ALREADY);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_true(st.head_lsn == BINDLOG_LSN_MAX);
    assert_int_equal(bindlog_digest(s, d2, NULL), 0);
    assert_memory_equal(d1, d2, sizeof d1);

    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 0);
    assert_true(rep.head_lsn == BINDLOG_LSN_MAX);
    uint64_t count = 0;
    assert_int_equal(read_log(s, &count), 0);
    assert_int_equal(count, 2);
    snprintf(path, sizeof(path), "%s/last-replayed", f->tmp);
    uint64_t last = 0;
    assert_int_equal(bindlog_replay(s, path, UINT64_MAX, INT64_MAX, d2, &last, NULL, NULL), 0);
    assert_true(last == BINDLOG_LSN_MAX);
    assert_memory_equal(d1, d2, sizeof d1);
    snprintf(path, sizeof(path), "%s/last.bls", f->tmp);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_int_equal(bindlog_export(s, 0, fd, &n, NULL, NULL), 0);
    assert_int_equal(n, 2);
    close(fd);
    bindlog_close(s);
}

/* Issue 16's other reproduction: time_ms = INT64_MAX (the year 292278994)
 * was accepted and stamped every later event.  Refused at its frame, as is
 * a base image time outside years 0-9999. */
static void limits__stream_time_out_of_range_is_refused(void **state)
{
    fx *f = *state;
    int64_t t[3] = {1000, INT64_MAX, INT64_MAX};
    uint64_t off[3], o;

    bindlog *s = new_target(f, "time");
    sbuf b = forge_stream(1, 0, t, 3, off);
    assert_int_equal(import_forged(f, s, &b, &o), BINDLOG_ECORRUPT);
    assert_int_equal(o, off[1]);
    assert_error_mentions("record at LSN 2: time_ms 9223372036854775807 is outside years 0-9999");
    assert_empty(s);
    free(b.p);

    int64_t early[1] = {BINDLOG_TIME_MIN_MS - 1};
    b = forge_stream(1, BINDLOG_TIME_MIN_MS - 1, early, 1, off);
    assert_int_equal(import_forged(f, s, &b, &o), BINDLOG_ECORRUPT);
    assert_int_equal(o, 32); /* the 'C' frame */
    assert_error_mentions("base time_ms");
    assert_empty(s);
    free(b.p);

    /* the edges themselves are fine */
    int64_t edge[2] = {BINDLOG_TIME_MIN_MS, BINDLOG_TIME_MAX_MS};
    b = forge_stream(1, BINDLOG_TIME_MIN_MS, edge, 2, off);
    assert_int_equal(import_forged(f, s, &b, &o), 0);
    free(b.p);
    bindlog_close(s);
}

/* A clock past year 9999 logs nothing (BINDLOG_EINVAL); the year 9999
 * itself is fine, and a clock before year 0 has gone back: the event takes
 * the previous record's time. */
static int64_t fixed_clock(void *ctx) { return *(int64_t *)ctx; }

static void limits__clock_out_of_range_logs_nothing(void **state)
{
    fx *f = *state;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s;
    bindlog_result r;
    bindlog_stats st;
    int64_t now = 1767225600000;

    o.durability = BINDLOG_DURABILITY_NONE;
    o.clock_ms = fixed_clock;
    o.clock_ctx = &now;
    assert_int_equal(bindlog_open(&s, f->dir, &o), 0);
    assert_int_equal(bindlog_bind(s, "a", "s1", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    now = INT64_MAX;
    assert_int_equal(bindlog_bind(s, "b", "s2", NULL, NULL, NULL, 0, &r), BINDLOG_EINVAL);
    assert_error_mentions("outside years 0-9999");
    bindlog_event ev[2] = {{.type = BINDLOG_EVENT_INVALIDATE, .key = "a"},
                           {.type = BINDLOG_EVENT_BIND, .key = "c", .session_id = "s3"}};
    bindlog_result out[2];
    size_t ei = 9;
    assert_int_equal(bindlog_apply_batch(s, ev, 2, out, &ei), BINDLOG_EINVAL);
    assert_int_equal(ei, 0);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 1);

    now = BINDLOG_TIME_MAX_MS;
    assert_int_equal(bindlog_bind(s, "b", "s2", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    now = INT64_MIN;
    assert_int_equal(bindlog_bind(s, "c", "s3", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    bindlog_iter *it;
    bindlog_record rec;
    assert_int_equal(bindlog_log_iter(s, 3, 3, &it), 0);
    assert_int_equal(bindlog_iter_next_record(it, &rec), 1);
    assert_true(rec.time_ms == BINDLOG_TIME_MAX_MS);
    bindlog_iter_close(it);
    bindlog_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(limits__decoders_refuse_over_limit_lengths),
        cmocka_unit_test(limits__table_limits),
        cmocka_unit_test_setup_teardown(limits__forged_log_record_length_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(limits__forged_binding_length_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(limits__forged_session_length_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(limits__forged_stream_control, setup, teardown),
        cmocka_unit_test_setup_teardown(limits__stream_at_the_top_of_the_lsn_range_is_refused,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(limits__last_lsn_then_enospc, setup, teardown),
        cmocka_unit_test_setup_teardown(limits__stream_time_out_of_range_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(limits__clock_out_of_range_logs_nothing, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
