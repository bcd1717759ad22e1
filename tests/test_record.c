/*
 * test_record.c -- the byte encodings of src/core/record.c.
 *
 * Damaged inputs are always decoded from a heap copy of exactly the bytes
 * under test, so a sanitizer or valgrind catches any read past the end.
 * Records that must fail on a field rule (not on the checksum) are built by
 * patching a valid encoding and resealing it with a fresh XXH3-64, which the
 * test computes itself so that it checks the checksum too.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/record.h"

/* ---- helpers ----------------------------------------------------------- */

/* A record with every field set and a small origin. */
static bl_record sample_record(void)
{
    static const char origin[] = "{\"peer\":\"telegram:12345\",\"msg\":42}";
    bl_record r = {
        .lsn = 0x0102030405060708ull,
        .time_ms = 1700000000123,
        .generation = 7,
        .type = BINDLOG_EVENT_SPLIT,
        .flags = BL_REC_ORIGIN,
        .key = "agent:main:telegram:dm:12345",
        .sid = "sess-child",
        .other = "sess-parent",
        .reason = "compression",
        .origin = origin,
    };
    r.key_len = strlen(r.key);
    r.sid_len = strlen(r.sid);
    r.other_len = strlen(r.other);
    r.reason_len = strlen(r.reason);
    r.origin_len = sizeof origin - 1;
    return r;
}

/* Encode r into a fresh heap buffer of exactly its size. */
static unsigned char *encode_record(const bl_record *r, size_t *len)
{
    size_t n = bl_record_size(r);
    unsigned char *b = malloc(n);
    assert_non_null(b);
    assert_int_equal(bl_record_encode(r, b, n), n);
    *len = n;
    return b;
}

/* Decode a heap copy of exactly len bytes of b. */
static int decode_copy(const unsigned char *b, size_t len)
{
    unsigned char *c = malloc(len ? len : 1);
    assert_non_null(c);
    if (len)
        memcpy(c, b, len);
    bl_record r;
    int rc = bl_record_decode(c, len, &r);
    free(c);
    return rc;
}

/* Rewrite the checksum of a record of len bytes after a deliberate patch. */
static void reseal(unsigned char *b, size_t len)
{
    bl_put64(b + len - 8, XXH3_64bits(b, len - 8));
}

static void assert_bytes(const void *a, size_t alen, const void *b, size_t blen)
{
    assert_int_equal(alen, blen);
    if (alen)
        assert_memory_equal(a, b, alen);
}

static void assert_records_equal(const bl_record *a, const bl_record *b)
{
    assert_true(a->lsn == b->lsn);
    assert_true(a->time_ms == b->time_ms);
    assert_true(a->generation == b->generation);
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->flags, b->flags);
    assert_bytes(a->key, a->key_len, b->key, b->key_len);
    assert_bytes(a->sid, a->sid_len, b->sid, b->sid_len);
    assert_bytes(a->other, a->other_len, b->other, b->other_len);
    assert_bytes(a->reason, a->reason_len, b->reason, b->reason_len);
    assert_bytes(a->origin, a->origin_len, b->origin, b->origin_len);
}

/* Encode, decode, compare; decoded strings must point into the buffer. */
static void round_trip_record(const bl_record *r)
{
    size_t n;
    unsigned char *b = encode_record(r, &n);
    bl_record d;
    assert_int_equal(bl_record_decode(b, n, &d), 0);
    assert_records_equal(r, &d);
    assert_true((const unsigned char *)d.key == b + BL_RECORD_FIXED);
    assert_true((const unsigned char *)d.origin + d.origin_len == b + n - BL_RECORD_CHECKSUM);
    free(b);
}

/* Patch one byte of a valid record, reseal it, expect rc. */
static void expect_patched(size_t off, unsigned char val, int rc)
{
    bl_record r = sample_record();
    size_t n;
    unsigned char *b = encode_record(&r, &n);
    b[off] = val;
    reseal(b, n);
    assert_int_equal(decode_copy(b, n), rc);
    free(b);
}

/* ---- records ----------------------------------------------------------- */

static void record__round_trip(void **state)
{
    (void)state;
    bl_record r = sample_record();
    round_trip_record(&r);

    /* Every optional field empty, no origin flag, negative time. */
    bl_record e = {.lsn = 1, .time_ms = -5, .type = BINDLOG_EVENT_INVALIDATE, .key = "k", .key_len = 1};
    round_trip_record(&e);
    assert_int_equal(bl_record_size(&e), BL_RECORD_FIXED + 1 + BL_RECORD_CHECKSUM);

    /* An explicitly empty origin is distinct from no origin: only the flag says so. */
    e.flags = BL_REC_ORIGIN;
    round_trip_record(&e);
}

static void record__max_size(void **state)
{
    (void)state;
    static char key[BINDLOG_KEY_MAX], sid[BINDLOG_ID_MAX], other[BINDLOG_ID_MAX];
    static char reason[BINDLOG_REASON_MAX];
    static unsigned char origin[BINDLOG_ORIGIN_MAX];
    memset(key, 0xff, sizeof key); /* keys may hold any byte but NUL */
    memset(sid, 'S', sizeof sid);
    memset(other, 0x80, sizeof other);
    memset(reason, '~', sizeof reason);
    for (size_t i = 0; i < sizeof origin; i++)
        origin[i] = (unsigned char)(i * 31u); /* includes NULs: origin is opaque */
    bl_record r = {.lsn = BINDLOG_LSN_MAX, .time_ms = BINDLOG_TIME_MIN_MS,
                   .generation = UINT64_MAX - 1,
                   .type = BINDLOG_EVENT_UNBIND, .flags = BL_REC_ORIGIN,
                   .key = key, .key_len = sizeof key, .sid = sid, .sid_len = sizeof sid,
                   .other = other, .other_len = sizeof other, .reason = reason,
                   .reason_len = sizeof reason, .origin = origin, .origin_len = sizeof origin};
    assert_int_equal(bl_record_size(&r), BL_RECORD_MAX);
    round_trip_record(&r);

    /* Truncations of the largest record, sampled around each field edge. */
    size_t n;
    unsigned char *b = encode_record(&r, &n);
    for (size_t len = 0; len < n; len += (len < 700 || len > n - 700) ? 1 : 997)
        assert_int_equal(decode_copy(b, len), BINDLOG_ECORRUPT);
    free(b);
}

static void record__golden_bytes(void **state)
{
    (void)state;
    /* Pins the layout documented in docs/format.md ("Example"). */
    static const unsigned char want[] = {
        0x02, 0x01, 0x01, 0x00,                         /* version 2, BIND, flags ORIGIN */
        0x2a, 0, 0, 0, 0, 0, 0, 0,                      /* lsn 42 */
        0xe8, 0x03, 0, 0, 0, 0, 0, 0,                   /* time_ms 1000 */
        0x03, 0, 0, 0, 0, 0, 0, 0,                      /* generation 3 */
        0x01, 0x00, 0x02, 0x01, 0x02, 0x01, 0, 0, 0,    /* lengths 1,2,1,2,1 */
        0x28, 0, 0, 0, 0, 0, 0, 0,                      /* prev_lsn 40 */
        'k', 's', '1', 's', 'r', 'x', 0x7b,             /* key sid other reason origin */
    };
    bl_record r = {.lsn = 42, .prev_lsn = 40, .time_ms = 1000, .generation = 3,
                   .type = BINDLOG_EVENT_BIND, .flags = BL_REC_ORIGIN, .key = "k", .key_len = 1,
                   .sid = "s1", .sid_len = 2, .other = "s", .other_len = 1, .reason = "rx",
                   .reason_len = 2, .origin = "{", .origin_len = 1};
    unsigned char b[sizeof want + 8];
    assert_int_equal(bl_record_encode(&r, b, sizeof b), sizeof b);
    assert_memory_equal(b, want, sizeof want);
    assert_true(bl_get64(b + sizeof want) == XXH3_64bits(want, sizeof want));
    /* XXH3-64 output is frozen since xxHash 0.8, so the value itself is pinned too. */
    static const unsigned char sum[8] = {0x14, 0xe6, 0x86, 0x0a, 0x12, 0xd1, 0xe1, 0xa8};
    assert_memory_equal(b + sizeof want, sum, sizeof sum);
    bl_record d;
    assert_int_equal(bl_record_decode(b, sizeof b, &d), 0);
    assert_int_equal(d.version, 2);
    assert_int_equal(d.prev_lsn, 40);
    assert_true(bl_record_same(&d, &r));
}

/* Version 1 (formats 1 and 2, old export streams) still decodes: the same
 * record without prev_lsn, which then reads as 0 and is not compared. */
static void record__version1_still_decodes(void **state)
{
    (void)state;
    static const unsigned char v1[] = {
        0x01, 0x01, 0x01, 0x00, 0x2a, 0, 0, 0, 0, 0, 0, 0, 0xe8, 0x03, 0, 0, 0, 0, 0, 0,
        0x03, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0x02, 0x01, 0x02, 0x01, 0, 0, 0,
        'k', 's', '1', 's', 'r', 'x', 0x7b,
        0x3f, 0x86, 0x64, 0xfa, 0x6c, 0xf6, 0x59, 0xc2, /* the version-1 example's checksum */
    };
    bl_record d;
    assert_int_equal(bl_record_decode(v1, sizeof v1, &d), 0);
    assert_int_equal(d.version, 1);
    assert_int_equal(d.prev_lsn, 0);
    assert_int_equal(d.lsn, 42);
    assert_memory_equal(d.key, "k", 1);
    assert_memory_equal(d.origin, "{", 1);
    /* the same fields re-derived in version 2, with a prev_lsn: the same record */
    bl_record r = d;
    r.version = 2;
    r.prev_lsn = 40;
    assert_true(bl_record_same(&r, &d));
    /* between two version-2 records prev_lsn counts */
    bl_record r2 = r;
    r2.prev_lsn = 41;
    assert_false(bl_record_same(&r, &r2));
    /* a version-2 record must chain backwards: prev_lsn below lsn */
    unsigned char b[128];
    r.prev_lsn = 42;
    assert_int_equal(bl_record_encode(&r, b, sizeof b), 0);
}

static void record__every_truncation_rejected(void **state)
{
    (void)state;
    bl_record r = sample_record();
    size_t n;
    unsigned char *b = encode_record(&r, &n);
    for (size_t len = 0; len < n; len++)
        assert_int_equal(decode_copy(b, len), BINDLOG_ECORRUPT);
    assert_int_equal(decode_copy(b, n), 0);
    free(b);
}

static void record__single_bit_flips_rejected(void **state)
{
    (void)state;
    bl_record r = sample_record();
    size_t n;
    unsigned char *b = encode_record(&r, &n);
    for (size_t i = 0; i < n; i++) {
        for (unsigned bit = 0; bit < 8; bit++) {
            b[i] ^= (unsigned char)(1u << bit);
            /* ECORRUPT, never EVERSION: the version byte is not trusted
             * until the checksum says the record is intact. */
            assert_int_equal(decode_copy(b, n), BINDLOG_ECORRUPT);
            b[i] ^= (unsigned char)(1u << bit);
        }
    }
    free(b);
}

static void record__trailing_bytes(void **state)
{
    (void)state;
    bl_record r = sample_record();
    size_t n;
    unsigned char *b = encode_record(&r, &n);
    unsigned char *t = malloc(n + 1);
    assert_non_null(t);

    /* Appended after the checksum: the checksum no longer sits last. */
    memcpy(t, b, n);
    t[n] = 0;
    assert_int_equal(decode_copy(t, n + 1), BINDLOG_ECORRUPT);

    /* Slipped in before a valid checksum: the lengths do not add up. */
    memcpy(t, b, n - 8);
    t[n - 8] = 'z';
    reseal(t, n + 1);
    assert_int_equal(decode_copy(t, n + 1), BINDLOG_ECORRUPT);
    free(t);
    free(b);
}

static void record__newer_version(void **state)
{
    (void)state;
    expect_patched(0, BINDLOG_RECORD_VERSION + 1, BINDLOG_EVERSION);
    expect_patched(0, 0xff, BINDLOG_EVERSION);
    expect_patched(0, 0, BINDLOG_ECORRUPT);

    /* A newer record need not share version 1's layout: a resealed blob that
     * is shorter than our fixed part still reports the version. */
    unsigned char b[9] = {BINDLOG_RECORD_VERSION + 1};
    reseal(b, sizeof b);
    assert_int_equal(decode_copy(b, sizeof b), BINDLOG_EVERSION);
    b[0] = BINDLOG_RECORD_VERSION;
    reseal(b, sizeof b);
    assert_int_equal(decode_copy(b, sizeof b), BINDLOG_ECORRUPT);
}

static void record__resealed_bad_fields(void **state)
{
    (void)state;
    bl_record r = sample_record();
    size_t key_at = BL_RECORD_FIXED, sid_at = key_at + r.key_len;
    size_t other_at = sid_at + r.sid_len, reason_at = other_at + r.other_len;

    expect_patched(1, 0, BINDLOG_ECORRUPT);              /* type 0 */
    expect_patched(1, BINDLOG_EVENT_COUNT, BINDLOG_ECORRUPT);
    expect_patched(2, BL_REC_ORIGIN | 0x04, BINDLOG_ECORRUPT); /* reserved flag bit */
    expect_patched(3, 0x80, BINDLOG_ECORRUPT);           /* reserved high flag byte */
    expect_patched(2, 0, BINDLOG_ECORRUPT);              /* origin bytes without the flag */
    expect_patched(28, (unsigned char)(r.key_len + 1), BINDLOG_ECORRUPT); /* lengths */
    expect_patched(30, (unsigned char)(r.sid_len - 1), BINDLOG_ECORRUPT);
    expect_patched(31, 0xff, BINDLOG_ECORRUPT);
    expect_patched(32, 0, BINDLOG_ECORRUPT);
    expect_patched(36, 0x01, BINDLOG_ECORRUPT);          /* origin_len + 16 MiB */
    expect_patched(key_at + 3, '\0', BINDLOG_ECORRUPT);  /* NUL in key */
    expect_patched(sid_at, '\n', BINDLOG_ECORRUPT);      /* control bytes */
    expect_patched(other_at + 1, 0x7f, BINDLOG_ECORRUPT);
    expect_patched(reason_at, 0x1f, BINDLOG_ECORRUPT);
    expect_patched(sid_at, 0x80, 0);                     /* high bytes are fine */
}

/* lsn 0 only when all eight bytes are zero: patch them all at once. */
static void record__lsn_zero(void **state)
{
    (void)state;
    bl_record r = sample_record();
    size_t n;
    unsigned char *b = encode_record(&r, &n);
    bl_put64(b + 4, 0);
    reseal(b, n);
    assert_int_equal(decode_copy(b, n), BINDLOG_ECORRUPT);
    free(b);
    r.lsn = 0;
    unsigned char buf[BL_RECORD_MAX];
    assert_int_equal(bl_record_encode(&r, buf, sizeof buf), 0);
}

/* LSNs above BINDLOG_LSN_MAX and times outside years 0-9999 are damage:
 * refused by the decoder even when the checksum is right, and never
 * encoded.  The limits themselves are fine. */
static void record__lsn_and_time_limits(void **state)
{
    (void)state;
    static const struct {
        uint64_t lsn;
        int64_t t;
        int rc;
    } cases[] = {
        {BINDLOG_LSN_MAX, 1000, 0},
        {BINDLOG_LSN_MAX + 1, 1000, BINDLOG_ECORRUPT},
        {UINT64_MAX - 2, 1000, BINDLOG_ECORRUPT}, /* the forged stream */
        {UINT64_MAX, 1000, BINDLOG_ECORRUPT},
        {5, BINDLOG_TIME_MIN_MS, 0},
        {5, BINDLOG_TIME_MAX_MS, 0},
        {5, BINDLOG_TIME_MIN_MS - 1, BINDLOG_ECORRUPT},
        {5, BINDLOG_TIME_MAX_MS + 1, BINDLOG_ECORRUPT},
        {5, INT64_MAX, BINDLOG_ECORRUPT}, /* year 292278994 */
        {5, INT64_MIN, BINDLOG_ECORRUPT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bl_record r = sample_record();
        size_t n;
        unsigned char *b = encode_record(&r, &n);
        bl_put64(b + 4, cases[i].lsn);
        bl_put64(b + 12, (uint64_t)cases[i].t);
        reseal(b, n);
        assert_int_equal(decode_copy(b, n), cases[i].rc);
        free(b);
        unsigned char buf[BL_RECORD_MAX];
        r.lsn = cases[i].lsn;
        r.time_ms = cases[i].t;
        assert_int_equal(bl_record_encode(&r, buf, sizeof buf) != 0, cases[i].rc == 0);
    }

    /* state values: the LSNs and times they carry come from records */
    bl_bval bv = {.sid = "s", .sid_len = 1, .generation = 1, .lsn = BINDLOG_LSN_MAX + 1,
                  .updated_ms = 5};
    unsigned char b[BL_BVAL_MAX];
    bl_bval dv;
    assert_int_equal(bl_bval_encode(&bv, b, sizeof b), 0);
    bv.lsn = 1, bv.updated_ms = BINDLOG_TIME_MAX_MS + 1;
    assert_int_equal(bl_bval_encode(&bv, b, sizeof b), 0);
    bv.updated_ms = 5;
    size_t bn = bl_bval_encode(&bv, b, sizeof b);
    assert_int_equal(bn, 27);
    bl_put64(b + 18, (uint64_t)INT64_MAX);
    assert_int_equal(bl_bval_decode(b, bn, &dv), BINDLOG_ECORRUPT);
    bl_put64(b + 18, 5);
    bl_put64(b + 10, UINT64_MAX);
    assert_int_equal(bl_bval_decode(b, bn, &dv), BINDLOG_ECORRUPT);

    bl_sval sv = {.key = "k", .key_len = 1, .created_lsn = 1, .created_ms = 1,
                  .ended_ms = BINDLOG_TIME_MIN_MS - 1};
    static unsigned char sb[BL_SVAL_MAX];
    bl_sval ds;
    assert_int_equal(bl_sval_encode(&sv, sb, sizeof sb), 0);
    sv.ended_ms = 0, sv.created_lsn = BINDLOG_LSN_MAX + 1;
    assert_int_equal(bl_sval_encode(&sv, sb, sizeof sb), 0);
    sv.created_lsn = 1;
    size_t sn = bl_sval_encode(&sv, sb, sizeof sb);
    assert_int_equal(sn, 43);
    bl_put64(sb + 26, (uint64_t)INT64_MAX); /* created_ms */
    assert_int_equal(bl_sval_decode(sb, sn, &ds), BINDLOG_ECORRUPT);
    bl_put64(sb + 26, 1);
    bl_put64(sb + 18, BINDLOG_LSN_MAX + 1); /* ended_lsn */
    assert_int_equal(bl_sval_decode(sb, sn, &ds), BINDLOG_ECORRUPT);
}

/* A record whose lengths are over the limits but consistent and resealed. */
static int decode_oversized(size_t key, size_t sid, size_t other, size_t reason, size_t origin)
{
    size_t n = BL_RECORD_FIXED + key + sid + other + reason + origin + 8;
    unsigned char *b = calloc(1, n);
    assert_non_null(b);
    b[0] = BINDLOG_RECORD_VERSION;
    b[1] = BINDLOG_EVENT_BIND;
    bl_put16(b + 2, BL_REC_ORIGIN);
    bl_put64(b + 4, 1);
    bl_put16(b + 28, (uint16_t)key);
    b[30] = (unsigned char)sid;
    b[31] = (unsigned char)other;
    b[32] = (unsigned char)reason;
    bl_put32(b + 33, (uint32_t)origin);
    memset(b + BL_RECORD_FIXED, 'a', n - BL_RECORD_FIXED - 8);
    reseal(b, n);
    int rc = decode_copy(b, n);
    free(b);
    return rc;
}

static void record__limits(void **state)
{
    (void)state;
    assert_int_equal(decode_oversized(BINDLOG_KEY_MAX, BINDLOG_ID_MAX, BINDLOG_ID_MAX,
                                      BINDLOG_REASON_MAX, BINDLOG_ORIGIN_MAX), 0);
    assert_int_equal(decode_oversized(BINDLOG_KEY_MAX + 1, 1, 1, 1, 1), BINDLOG_ECORRUPT);
    assert_int_equal(decode_oversized(1, BINDLOG_ID_MAX + 1, 1, 1, 1), BINDLOG_ECORRUPT);
    assert_int_equal(decode_oversized(1, 1, BINDLOG_ID_MAX + 1, 1, 1), BINDLOG_ECORRUPT);
    assert_int_equal(decode_oversized(1, 1, 1, BINDLOG_REASON_MAX + 1, 1), BINDLOG_ECORRUPT);
    assert_int_equal(decode_oversized(1, 1, 1, 1, BINDLOG_ORIGIN_MAX + 1), BINDLOG_ECORRUPT);
    assert_int_equal(decode_oversized(0, 1, 1, 1, 1), BINDLOG_ECORRUPT);

    /* The encoder refuses what the decoder would, and a short buffer. */
    bl_record r = sample_record();
    static unsigned char buf[BL_RECORD_MAX + 1];
    size_t n = bl_record_size(&r);
    assert_int_equal(bl_record_encode(&r, buf, n - 1), 0);
    assert_int_equal(bl_record_encode(&r, NULL, 0), 0);
    bl_record bad = r;
    bad.key_len = BINDLOG_KEY_MAX + 1;
    assert_int_equal(bl_record_encode(&bad, buf, sizeof buf), 0);
    bad = r, bad.reason_len = BINDLOG_REASON_MAX + 1;
    assert_int_equal(bl_record_encode(&bad, buf, sizeof buf), 0);
    bad = r, bad.origin_len = BINDLOG_ORIGIN_MAX + 1;
    assert_int_equal(bl_record_encode(&bad, buf, sizeof buf), 0);
    bad = r, bad.type = 0;
    assert_int_equal(bl_record_encode(&bad, buf, sizeof buf), 0);
    bad = r, bad.flags = 0x04;
    assert_int_equal(bl_record_encode(&bad, buf, sizeof buf), 0);
    bad = r, bad.flags = 0; /* origin without the flag */
    assert_int_equal(bl_record_encode(&bad, buf, sizeof buf), 0);
    bad = r, bad.sid = "a\tb", bad.sid_len = 3;
    assert_int_equal(bl_record_encode(&bad, buf, sizeof buf), 0);
    bad = r, bad.key_len = 0;
    assert_int_equal(bl_record_encode(&bad, buf, sizeof buf), 0);
}

/* ---- binding values ---------------------------------------------------- */

static void bval__round_trip(void **state)
{
    (void)state;
    static char sid[BINDLOG_ID_MAX];
    memset(sid, 'q', sizeof sid);
    bl_bval cases[] = {
        {.sid = sid, .sid_len = sizeof sid, .generation = UINT64_MAX - 1, .lsn = BINDLOG_LSN_MAX,
         .updated_ms = BINDLOG_TIME_MAX_MS},
        {.sid = NULL, .sid_len = 0, .generation = 9, .lsn = 12, .updated_ms = -1}, /* tombstone */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bl_bval *v = &cases[i];
        unsigned char b[26 + BINDLOG_ID_MAX];
        size_t n = bl_bval_encode(v, b, sizeof b);
        assert_int_equal(n, bl_bval_size(v));
        assert_int_equal(n, 26 + v->sid_len);
        assert_int_equal(bl_bval_encode(v, b, n - 1), 0);
        bl_bval d;
        assert_int_equal(bl_bval_decode(b, n, &d), 0);
        assert_bytes(v->sid, v->sid_len, d.sid, d.sid_len);
        assert_true(d.generation == v->generation && d.lsn == v->lsn);
        assert_true(d.updated_ms == v->updated_ms);
    }
}

/* A ROUTE record: the key and the activity time, nothing else: 53 +
 * key_len bytes (docs/format.md).  The activity flag belongs to a BIND or
 * NEW_SESSION only. */
static void record__route_is_small(void **state)
{
    (void)state;
    bl_record r = {.version = BINDLOG_RECORD_VERSION, .lsn = 9, .prev_lsn = 3,
                   .time_ms = 1767225600000, .generation = 2, .type = BINDLOG_EVENT_ROUTE,
                   .key = "agent:main:telegram:dm:12345", .sid = "", .other = "", .reason = ""};
    r.key_len = strlen(r.key);
    size_t n;
    unsigned char *b = encode_record(&r, &n);
    assert_int_equal(n, 53 + r.key_len);
    assert_int_equal(n, 81);
    bl_record d;
    assert_int_equal(bl_record_decode(b, n, &d), 0);
    assert_int_equal(d.type, BINDLOG_EVENT_ROUTE);
    assert_true(d.time_ms == r.time_ms && d.prev_lsn == 3 && d.generation == 2);
    free(b);
    r.flags = BL_REC_ACTIVITY;
    assert_int_equal(bl_record_encode(&r, NULL, 0), 0);
    unsigned char buf[128];
    assert_int_equal(bl_record_encode(&r, buf, sizeof buf), 0); /* not on a ROUTE */
    r.type = BINDLOG_EVENT_NEW_SESSION;
    r.sid = "s2";
    r.sid_len = 2;
    assert_int_equal(bl_record_encode(&r, buf, sizeof buf), 53 + r.key_len + 2);
}

/* The interim last activity: 8 trailing bytes, present only when not 0;
 * an explicit 0 there is refused (one encoding per state). */
static void bval__last_activity(void **state)
{
    (void)state;
    bl_bval v = {.sid = "abc", .sid_len = 3, .generation = 1, .lsn = 1, .updated_ms = 5,
                 .last_activity_ms = 1767225600000};
    unsigned char b[BL_BVAL_FIXED + 3 + 8];
    bl_bval d;
    assert_int_equal(bl_bval_size(&v), sizeof b);
    assert_int_equal(bl_bval_encode(&v, b, sizeof b), sizeof b);
    assert_int_equal(bl_bval_decode(b, sizeof b, &d), 0);
    assert_true(d.last_activity_ms == v.last_activity_ms);
    assert_int_equal(bl_bval_decode(b, sizeof b - 8, &d), 0); /* an older value */
    assert_true(d.last_activity_ms == 0);
    memset(b + BL_BVAL_FIXED + 3, 0, 8);
    assert_int_equal(bl_bval_decode(b, sizeof b, &d), BINDLOG_ECORRUPT);
    assert_int_equal(bl_bval_decode(b, sizeof b - 1, &d), BINDLOG_ECORRUPT);
    v.last_activity_ms = BINDLOG_TIME_MAX_MS + 1;
    assert_int_equal(bl_bval_encode(&v, b, sizeof b), 0);
}

static void bval__damage(void **state)
{
    (void)state;
    bl_bval v = {.sid = "abc", .sid_len = 3, .generation = 1, .lsn = 1, .updated_ms = 5};
    unsigned char b[29];
    unsigned char t[30];
    assert_int_equal(bl_bval_encode(&v, b, sizeof b), sizeof b);
    bl_bval d;
    for (size_t len = 0; len < sizeof b; len++) {
        unsigned char *c = malloc(len ? len : 1);
        memcpy(c, b, len);
        assert_int_equal(bl_bval_decode(c, len, &d), BINDLOG_ECORRUPT);
        free(c);
    }
    memcpy(t, b, sizeof b);
    t[29] = 'x';
    assert_int_equal(bl_bval_decode(t, sizeof t, &d), BINDLOG_ECORRUPT); /* trailing */
    t[0] = 2;
    assert_int_equal(bl_bval_decode(t, sizeof b, &d), BINDLOG_EVERSION);
    t[0] = 0;
    assert_int_equal(bl_bval_decode(t, sizeof b, &d), BINDLOG_ECORRUPT);
    t[0] = 1, t[27] = 0x1b;
    assert_int_equal(bl_bval_decode(t, sizeof b, &d), BINDLOG_ECORRUPT); /* control byte */
    t[1] = 4, t[27] = 'b';
    assert_int_equal(bl_bval_decode(t, sizeof t, &d), 0); /* sid_len covers the extra byte */
    assert_int_equal(d.sid_len, 4);

    v.sid_len = BINDLOG_ID_MAX + 1;
    assert_int_equal(bl_bval_encode(&v, t, sizeof t), 0);
    unsigned char big[26 + 255] = {1, 255};
    memset(big + 26, 'a', 255);
    assert_int_equal(bl_bval_decode(big, sizeof big, &d), BINDLOG_ECORRUPT); /* sid over limit */
}

/* ---- session values ---------------------------------------------------- */

static bl_sval sample_sval(void)
{
    bl_sval v = {.key = "agent:main:discord:chan:9", .parent = "sess-a", .reason = "switch",
                 .origin = "\0\1{}", .origin_len = 4, .created_lsn = 3, .ended_lsn = 8,
                 .created_ms = 1000, .ended_ms = 2000};
    v.key_len = strlen(v.key);
    v.parent_len = strlen(v.parent);
    v.reason_len = strlen(v.reason);
    return v;
}

static void assert_svals_equal(const bl_sval *a, const bl_sval *b)
{
    assert_bytes(a->key, a->key_len, b->key, b->key_len);
    assert_bytes(a->parent, a->parent_len, b->parent, b->parent_len);
    assert_bytes(a->reason, a->reason_len, b->reason, b->reason_len);
    assert_bytes(a->origin, a->origin_len, b->origin, b->origin_len);
    assert_true(a->created_lsn == b->created_lsn && a->ended_lsn == b->ended_lsn);
    assert_true(a->created_ms == b->created_ms && a->ended_ms == b->ended_ms);
}

static void sval_round_trip_one(const bl_sval *v)
{
    size_t n = bl_sval_size(v);
    unsigned char *b = malloc(n);
    assert_non_null(b);
    assert_int_equal(bl_sval_encode(v, b, n), n);
    assert_int_equal(bl_sval_encode(v, b, n - 1), 0);
    bl_sval d;
    assert_int_equal(bl_sval_decode(b, n, &d), 0);
    assert_svals_equal(v, &d);
    free(b);
}

static void sval__round_trip(void **state)
{
    (void)state;
    bl_sval v = sample_sval();
    sval_round_trip_one(&v);

    bl_sval root = {.key = "k", .key_len = 1, .created_lsn = 1, .created_ms = -3};
    sval_round_trip_one(&root);
    assert_int_equal(bl_sval_size(&root), 42 + 1);

    static char key[BINDLOG_KEY_MAX], parent[BINDLOG_ID_MAX], reason[BINDLOG_REASON_MAX];
    static unsigned char origin[BINDLOG_ORIGIN_MAX];
    memset(key, 1, sizeof key);
    memset(parent, 'p', sizeof parent);
    memset(reason, ' ', sizeof reason);
    memset(origin, 0, sizeof origin);
    bl_sval max = {.key = key, .key_len = sizeof key, .parent = parent, .parent_len = sizeof parent,
                   .reason = reason, .reason_len = sizeof reason, .origin = origin,
                   .origin_len = sizeof origin, .created_lsn = BINDLOG_LSN_MAX,
                   .ended_lsn = BINDLOG_LSN_MAX, .created_ms = BINDLOG_TIME_MIN_MS,
                   .ended_ms = BINDLOG_TIME_MAX_MS};
    sval_round_trip_one(&max);

    max.parent_len = BINDLOG_ID_MAX + 1;
    assert_int_equal(bl_sval_encode(&max, NULL, 0), 0);
    max.parent_len = BINDLOG_ID_MAX, max.origin_len = BINDLOG_ORIGIN_MAX + 1;
    static unsigned char buf[42 + BINDLOG_KEY_MAX + BINDLOG_ID_MAX + BINDLOG_REASON_MAX + BINDLOG_ORIGIN_MAX + 1];
    assert_int_equal(bl_sval_encode(&max, buf, sizeof buf), 0);
}

static void sval__truncations(void **state)
{
    (void)state;
    bl_sval v = sample_sval();
    size_t n = bl_sval_size(&v);
    unsigned char *b = malloc(n + 1);
    assert_non_null(b);
    assert_int_equal(bl_sval_encode(&v, b, n), n);
    bl_sval d;
    for (size_t len = 0; len < n; len++) {
        unsigned char *c = malloc(len ? len : 1);
        memcpy(c, b, len);
        assert_int_equal(bl_sval_decode(c, len, &d), BINDLOG_ECORRUPT);
        free(c);
    }
    b[n] = 'x';
    assert_int_equal(bl_sval_decode(b, n + 1, &d), BINDLOG_ECORRUPT); /* trailing */
    free(b);
}

/* Patch one byte of the sample session value, expect rc. */
static void expect_sval_patched(size_t off, unsigned char val, int rc)
{
    bl_sval v = sample_sval();
    size_t n = bl_sval_size(&v);
    unsigned char *b = malloc(n);
    assert_non_null(b);
    assert_int_equal(bl_sval_encode(&v, b, n), n);
    b[off] = val;
    bl_sval d;
    assert_int_equal(bl_sval_decode(b, n, &d), rc);
    free(b);
}

static void sval__bad_fields(void **state)
{
    (void)state;
    bl_sval v = sample_sval();
    size_t parent_at = 42 + v.key_len, reason_at = parent_at + v.parent_len;
    expect_sval_patched(0, 2, BINDLOG_EVERSION);
    expect_sval_patched(0, 0, BINDLOG_ECORRUPT);
    expect_sval_patched(1, 1, BINDLOG_ECORRUPT); /* reserved flags */
    expect_sval_patched(2, 0, BINDLOG_ECORRUPT); /* key_len changed */
    expect_sval_patched(4, 0xff, BINDLOG_ECORRUPT);
    expect_sval_patched(9, 0x80, BINDLOG_ECORRUPT); /* origin_len 2 GiB */
    expect_sval_patched(42, 0, BINDLOG_ECORRUPT);   /* NUL in key */
    expect_sval_patched(parent_at, '\r', BINDLOG_ECORRUPT);
    expect_sval_patched(reason_at, 0x7f, BINDLOG_ECORRUPT);
    expect_sval_patched(42, 0x01, 0); /* control bytes are fine in keys */
}

/* ---- validation -------------------------------------------------------- */

/* The id rule, read eight bytes at a time, against the byte rule: every
 * byte value at every position of ids of 1..24 bytes, in a field of
 * bytes that are themselves borderline (0x20, 0x7E, 0x80, 0xFF), so that a
 * borrow from one byte into the next would show. */
static void valid__id_rule_every_byte_everywhere(void **state)
{
    (void)state;
    static const unsigned char fill[] = {0x20, 0x7e, 0x80, 0xff, 'a'};
    char id[24];
    for (size_t f = 0; f < sizeof fill; f++)
        for (size_t n = 1; n <= sizeof id; n++)
            for (size_t at = 0; at < n; at++)
                for (int c = 0; c < 256; c++) {
                    memset(id, fill[f], n);
                    id[at] = (char)c;
                    int want = !(c < 0x20 || c == 0x7f);
                    if (bl_valid_id(id, n) != want)
                        fail_msg("id of %zu bytes of 0x%02x with 0x%02x at %zu: got %d", n,
                                 fill[f], c, at, !want);
                }
}

static void valid__key_id_reason(void **state)
{
    (void)state;
    static char big[BINDLOG_KEY_MAX + 1];
    memset(big, 'a', sizeof big);

    assert_true(bl_valid_key("a", 1));
    assert_true(bl_valid_key("\x01\x7f\xff", 3));
    assert_true(bl_valid_key(big, BINDLOG_KEY_MAX));
    assert_false(bl_valid_key(big, BINDLOG_KEY_MAX + 1));
    assert_false(bl_valid_key("", 0));
    assert_false(bl_valid_key("a\0b", 3));
    assert_false(bl_valid_key(NULL, 1));

    assert_true(bl_valid_id("sess-1", 6));
    assert_true(bl_valid_id("\x80\xfe", 2));
    assert_true(bl_valid_id(big, BINDLOG_ID_MAX));
    assert_false(bl_valid_id(big, BINDLOG_ID_MAX + 1));
    assert_false(bl_valid_id("", 0));
    assert_false(bl_valid_id(NULL, 0));
    assert_false(bl_valid_id("a\0", 2));
    assert_false(bl_valid_id("a\x1f", 2));
    assert_false(bl_valid_id("\x7f", 1));
    assert_true(bl_valid_id(" ", 1));

    assert_true(bl_valid_reason(NULL, 0));
    assert_true(bl_valid_reason("", 0));
    assert_true(bl_valid_reason(big, BINDLOG_REASON_MAX));
    assert_false(bl_valid_reason(big, BINDLOG_REASON_MAX + 1));
    assert_false(bl_valid_reason("x\ty", 3));
    assert_false(bl_valid_reason("\x7f", 1));
    assert_false(bl_valid_reason(NULL, 1));
}

static void endian__helpers(void **state)
{
    (void)state;
    unsigned char b[8];
    bl_put64(b, 0x0102030405060708ull);
    assert_int_equal(b[0], 0x08);
    assert_int_equal(b[7], 0x01);
    assert_true(bl_get64(b) == 0x0102030405060708ull);
    bl_put64be(b, 0x0102030405060708ull);
    assert_int_equal(b[0], 0x01);
    assert_true(bl_get64be(b) == 0x0102030405060708ull);
    bl_put32(b, 0xdeadbeefu);
    assert_true(bl_get32(b) == 0xdeadbeefu);
    bl_put16(b, 0xbeef);
    assert_int_equal(bl_get16(b), 0xbeef);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(record__round_trip),
        cmocka_unit_test(record__max_size),
        cmocka_unit_test(record__golden_bytes),
        cmocka_unit_test(record__version1_still_decodes),
        cmocka_unit_test(record__every_truncation_rejected),
        cmocka_unit_test(record__single_bit_flips_rejected),
        cmocka_unit_test(record__trailing_bytes),
        cmocka_unit_test(record__newer_version),
        cmocka_unit_test(record__resealed_bad_fields),
        cmocka_unit_test(record__lsn_zero),
        cmocka_unit_test(record__limits),
        cmocka_unit_test(record__lsn_and_time_limits),
        cmocka_unit_test(bval__round_trip),
        cmocka_unit_test(bval__last_activity),
        cmocka_unit_test(record__route_is_small),
        cmocka_unit_test(bval__damage),
        cmocka_unit_test(sval__round_trip),
        cmocka_unit_test(sval__truncations),
        cmocka_unit_test(sval__bad_fields),
        cmocka_unit_test(valid__key_id_reason),
        cmocka_unit_test(valid__id_rule_every_byte_everywhere),
        cmocka_unit_test(endian__helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
