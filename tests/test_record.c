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

#include "core/error.h"
#include "core/machine.h"
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
        .reason = "compressing", /* not a standard reason: stored as bytes */
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

/* The bytes of r's strings, which end right before the checksum. */
static size_t strings_len(const bl_record *r)
{
    return r->key_len + r->sid_len + r->other_len + r->reason_len + r->origin_len;
}

/* Where the key starts in an encoding of n bytes of r. */
static size_t key_at(const bl_record *r, size_t n) { return n - BL_RECORD_CHECKSUM - strings_len(r); }

/*
 * A version-3 record written by hand, field by field as docs/format.md
 * lays it out, without the encoder's checks: numbers and lengths beyond
 * the limits go in as they are (the decoder must refuse them).  Sealed
 * with its checksum.  Returns its length.
 */
static size_t raw_version(const bl_record *r, unsigned char *b, unsigned version)
{
    size_t pos = 2;
    b[0] = (unsigned char)version;
    b[1] = (unsigned char)(r->type | r->flags << 4);
    pos += bl_varint_put(b + pos, r->lsn);
    pos += bl_varint_put(b + pos, ((uint64_t)r->time_ms << 1) ^ (uint64_t)(r->time_ms >> 63));
    pos += bl_varint_put(b + pos, r->generation);
    pos += bl_varint_put(b + pos, r->prev_lsn ? r->lsn - r->prev_lsn : 0);
    pos += bl_varint_put(b + pos, r->key_len);
    /* version 4: an id's code, 2 x its length (here always as text) */
    pos += bl_varint_put(b + pos, version >= 4 ? 2 * (uint64_t)r->sid_len : r->sid_len);
    pos += bl_varint_put(b + pos, version >= 4 ? 2 * (uint64_t)r->other_len : r->other_len);
    pos += bl_varint_put(b + pos, r->reason_len);
    pos += bl_varint_put(b + pos, r->origin_len);
    const void *s[5] = {r->key, r->sid, r->other, r->reason, r->origin};
    size_t l[5] = {r->key_len, r->sid_len, r->other_len, r->reason_len, r->origin_len};
    for (int i = 0; i < 5; i++) {
        if (l[i] != 0 && s[i] != NULL)
            memcpy(b + pos, s[i], l[i]);
        else if (l[i] != 0)
            memset(b + pos, 'a', l[i]);
        pos += l[i];
    }
    bl_put64(b + pos, XXH3_64bits(b, pos));
    return pos + 8;
}

/* A record of the current version by hand, every field as given (ids as
 * text, reasons as bytes): what a forger or a buggy encoder could write. */
static size_t raw_rec(const bl_record *r, unsigned char *b)
{
    return raw_version(r, b, BINDLOG_RECORD_VERSION);
}

/* Encode, decode, compare; decoded strings must point into the buffer. */
static void round_trip_record(const bl_record *r)
{
    size_t n;
    unsigned char *b = encode_record(r, &n);
    bl_record d;
    assert_int_equal(bl_record_decode(b, n, &d), 0);
    assert_records_equal(r, &d);
    assert_true((const unsigned char *)d.key == b + key_at(r, n));
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
    /* version, type, nine one-byte varints (time -5 zigzags to 9), the key */
    assert_int_equal(bl_record_size(&e), 11 + 1 + BL_RECORD_CHECKSUM);

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
    /* the longest head: 9-byte LSN and gap, 7-byte time, 10-byte generation */
    bl_record r = {.lsn = BINDLOG_LSN_MAX, .prev_lsn = 1, .time_ms = BINDLOG_TIME_MIN_MS,
                   .generation = UINT64_MAX - 1,
                   .type = BINDLOG_EVENT_UNBIND, .flags = BL_REC_ORIGIN,
                   .key = key, .key_len = sizeof key, .sid = sid, .sid_len = sizeof sid,
                   .other = other, .other_len = sizeof other, .reason = reason,
                   .reason_len = sizeof reason, .origin = origin, .origin_len = sizeof origin};
    assert_int_equal(bl_record_size(&r), BL_RECORD_MAX);
    assert_int_equal(bl_record_room(&r), BL_RECORD_MAX);
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
        0x04, 0x11,                                     /* version 4, BIND | ORIGIN << 4 */
        0x2a,                                           /* lsn 42 */
        0xd0, 0x0f,                                     /* time_ms 1000, zigzagged: 2000 */
        0x03,                                           /* generation 3 */
        0x02,                                           /* prev_lsn 40: 42 - 2 */
        0x01,                                           /* key_len 1 */
        0x04, 0x02,                                     /* id codes: 2 x 2, 2 x 1 (text) */
        0x02, 0x01,                                     /* reason_len 2, origin_len 1 */
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
    static const unsigned char sum[8] = {0x03, 0xee, 0xc5, 0x67, 0xb7, 0x93, 0xa1, 0xd3};
    assert_memory_equal(b + sizeof want, sum, sizeof sum);
    bl_record d;
    assert_int_equal(bl_record_decode(b, sizeof b, &d), 0);
    assert_int_equal(d.version, 4);
    assert_int_equal(d.prev_lsn, 40);
    assert_true(bl_record_same(&d, &r));
    /* the hand-made encoding of the tests is the same bytes */
    unsigned char h[sizeof b];
    assert_int_equal(raw_rec(&r, h), sizeof b);
    assert_memory_equal(h, b, sizeof b);
    /* what import and recover read of it before decoding */
    bl_record_head hd;
    assert_int_equal(bl_record_peek(b, sizeof b, &hd), 0);
    assert_true(hd.lsn == 42 && hd.prev_lsn == 40 && hd.time_ms == 1000 && hd.version == 4);
    assert_true(hd.key == b + 12 && hd.key_len == 1);
    assert_int_equal(bl_record_peek(b, 12, &hd), -1);
}

/* A standard reason (the frozen defaults of record.c) is the type byte's
 * bit 6 and no bytes; the bytes of one, or the bit with bytes or on a
 * type without a standard reason, are damage (one encoding per record). */
static void record__standard_reason_is_a_flag(void **state)
{
    (void)state;
    static const char *const std[] = {NULL, "switch", "new_session", "compression",
                                      "invalidate", "unbind"};
    for (int t = BINDLOG_EVENT_BIND; t <= BINDLOG_EVENT_UNBIND; t++) {
        bl_record r = sample_record();
        r.type = t;
        if (t != BINDLOG_EVENT_SPLIT && t != BINDLOG_EVENT_BIND && t != BINDLOG_EVENT_NEW_SESSION)
            r.other = "", r.other_len = 0;
        r.reason = std[t];
        r.reason_len = strlen(std[t]);
        size_t n;
        unsigned char *b = encode_record(&r, &n);
        assert_int_equal(b[1], t | (BL_REC_ORIGIN | BL_REC_STD_REASON) << 4);
        bl_record d;
        assert_int_equal(bl_record_decode(b, n, &d), 0);
        assert_true(bl_record_same(&d, &r));
        assert_int_equal(d.flags, BL_REC_ORIGIN);
        /* the same record with its reason's bytes: no longer the one encoding */
        unsigned char raw[512];
        size_t rn = raw_rec(&r, raw);
        assert_int_equal(rn, n + strlen(std[t]));
        assert_int_equal(decode_copy(raw, rn), BINDLOG_ECORRUPT);
        /* another type's standard reason is bytes */
        r.reason = std[t == 1 ? 2 : 1];
        r.reason_len = strlen(r.reason);
        free(b);
        b = encode_record(&r, &n);
        assert_int_equal(b[1] & (BL_REC_STD_REASON << 4), 0);
        assert_int_equal(bl_record_decode(b, n, &d), 0);
        assert_true(bl_record_same(&d, &r));
        free(b);
    }
    /* the flag with reason bytes, or on a ROUTE (no standard reason) */
    bl_record r = sample_record();
    unsigned char raw[512];
    r.flags |= BL_REC_STD_REASON;
    assert_int_equal(decode_copy(raw, raw_rec(&r, raw)), BINDLOG_ECORRUPT);
    r = (bl_record){.lsn = 9, .prev_lsn = 3, .time_ms = 5, .generation = 1,
                    .type = BINDLOG_EVENT_ROUTE, .flags = BL_REC_STD_REASON, .key = "k",
                    .key_len = 1};
    assert_int_equal(decode_copy(raw, raw_rec(&r, raw)), BINDLOG_ECORRUPT);
    r.flags = 0;
    assert_int_equal(decode_copy(raw, raw_rec(&r, raw)), 0);
}

/* Version 4 keeps a UUID in canonical lower-case text as its 16 bytes,
 * code 1 in the head; any other id as text, code 2 x its length.  One
 * encoding per record: the text of such a UUID, or an odd code other than
 * 1, is damage.  Decoded, the id is text again, held by the bl_record
 * itself (not the input), and a session resolved from it keeps its own
 * copy of the parent. */
static void record__uuid_ids_are_16_bytes(void **state)
{
    (void)state;
    static const char child[] = "0b6f7f0e-4a0b-4c7e-9d41-8a8e2a7c1f00";
    static const char parent[] = "5d0c1b9e-7f3a-4e21-b6c8-2f9d4e8a0b13";
    static const unsigned char child16[16] = {0x0b, 0x6f, 0x7f, 0x0e, 0x4a, 0x0b, 0x4c, 0x7e,
                                              0x9d, 0x41, 0x8a, 0x8e, 0x2a, 0x7c, 0x1f, 0x00};
    static const unsigned char parent16[16] = {0x5d, 0x0c, 0x1b, 0x9e, 0x7f, 0x3a, 0x4e, 0x21,
                                               0xb6, 0xc8, 0x2f, 0x9d, 0x4e, 0x8a, 0x0b, 0x13};
    bl_record r = {.lsn = 7, .prev_lsn = 5, .time_ms = 1000, .generation = 2,
                   .type = BINDLOG_EVENT_SPLIT, .flags = BL_REC_ORIGIN, .key = "k",
                   .key_len = 1, .sid = child, .sid_len = 36, .other = parent,
                   .other_len = 36, .reason = "rx", .reason_len = 2,
                   .origin = "{}", .origin_len = 2};
    size_t n;
    unsigned char *b = encode_record(&r, &n);
    unsigned char raw[256];
    size_t rn = raw_rec(&r, raw);
    assert_int_equal(n + 2 * 20, rn); /* 16 bytes each instead of 36 */
    assert_int_equal(bl_record_room(&r), rn); /* room for the text, enough */
    /* head: version, type, lsn, time, generation, gap, key_len, the codes */
    static const unsigned char head[] = {0x04, 0x13, 0x07, 0xd0, 0x0f, 0x02, 0x02,
                                         0x01, 0x01, 0x01, 0x02, 0x02};
    assert_memory_equal(b, head, sizeof head);
    assert_memory_equal(b + sizeof head + 1, child16, 16);
    assert_memory_equal(b + sizeof head + 17, parent16, 16);

    bl_record d;
    assert_int_equal(bl_record_decode(b, n, &d), 0);
    assert_true(bl_record_same(&d, &r));
    assert_true(d.sid == d.id_text[0] && d.other == d.id_text[1]);
    assert_int_equal(d.sid_len, 36);
    assert_memory_equal(d.other, parent, 36);
    assert_int_equal(bl_record_size(&d), n);

    /* a reference resolved from it holds the parent itself */
    bl_sval v;
    memset(&v, 0, sizeof v);
    v.ref = 1;
    v.created_lsn = 7;
    assert_int_equal(bl_sval_resolve(&v, child, 36, &d), 0);
    assert_true(v.parent == v.parent_text);
    memset(d.id_text, 'x', sizeof d.id_text); /* the record's text gone */
    assert_memory_equal(v.parent, parent, 36);
    bl_sval c;
    bl_sval_copy(&c, &v);
    memset(v.parent_text, 'y', sizeof v.parent_text);
    assert_true(c.parent == c.parent_text);
    assert_memory_equal(c.parent, parent, 36);
    free(b);

    /* the text of a lower-case UUID in a version-4 record: damage */
    assert_int_equal(decode_copy(raw, rn), BINDLOG_ECORRUPT);
    /* upper case, or any other id, stays text and round-trips */
    char upper[37];
    for (int i = 0; i < 36; i++)
        upper[i] = (char)(parent[i] >= 'a' && parent[i] <= 'f' ? parent[i] - 32 : parent[i]);
    upper[36] = '\0';
    r.other = upper;
    b = encode_record(&r, &n);
    assert_int_equal(b[9], 72); /* 2 x 36: text */
    assert_int_equal(bl_record_decode(b, n, &d), 0);
    assert_true(d.other == (const char *)b + sizeof head + 17);
    assert_memory_equal(d.other, upper, 36);
    free(b);
    /* an odd code other than 1 */
    r.other = parent;
    b = encode_record(&r, &n);
    memcpy(raw, b, n);
    raw[9] = 0x03;
    reseal(raw, n);
    assert_int_equal(decode_copy(raw, n), BINDLOG_ECORRUPT);
    free(b);
    /* near misses are not UUIDs: a missing dash, a non-hex digit, 35 chars */
    unsigned char u[16];
    assert_int_equal(bl_uuid_pack(parent, 36, u), 1);
    assert_memory_equal(u, parent16, 16);
    char bad[37];
    memcpy(bad, parent, 37);
    bad[8] = '0';
    assert_int_equal(bl_uuid_pack(bad, 36, u), 0);
    memcpy(bad, parent, 37);
    bad[0] = 'g';
    assert_int_equal(bl_uuid_pack(bad, 36, u), 0);
    assert_int_equal(bl_uuid_pack(parent, 35, u), 0);
    /* every byte at every digit's place: only the 16 lower-case digits
     * pack, each to its value */
    for (size_t at = 0; at < 36; at++) {
        if (at == 8 || at == 13 || at == 18 || at == 23)
            continue;
        size_t digit = at - (at > 8) - (at > 13) - (at > 18) - (at > 23);
        for (int ch = 0; ch < 256; ch++) {
            memcpy(bad, parent, 37);
            bad[at] = (char)ch;
            int hex = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
            assert_int_equal(bl_uuid_pack(bad, 36, u), hex);
            if (!hex)
                continue;
            unsigned nib = ch <= '9' ? (unsigned)(ch - '0') : (unsigned)(ch - 'a' + 10);
            unsigned char want[16];
            memcpy(want, parent16, 16);
            want[digit / 2] = (unsigned char)(digit % 2 ? (want[digit / 2] & 0xf0) | nib
                                                        : (want[digit / 2] & 0x0f) | nib << 4);
            assert_memory_equal(u, want, 16);
        }
    }
    char text[36];
    bl_uuid_text(child16, text);
    assert_memory_equal(text, child, 36);
    /* every byte value at every position: lowercase digits in the 8-4-4-4-12
     * layout, and packing the text gives the bytes back */
    for (int at = 0; at < 16; at++)
        for (int byte = 0; byte < 256; byte++) {
            unsigned char in[16], back[16];
            for (int i = 0; i < 16; i++)
                in[i] = (unsigned char)(i * 37 + 11);
            in[at] = (unsigned char)byte;
            bl_uuid_text(in, text);
            for (int i = 0; i < 36; i++) {
                int dash = i == 8 || i == 13 || i == 18 || i == 23;
                char t = text[i];
                if (dash ? t != '-' : !((t >= '0' && t <= '9') || (t >= 'a' && t <= 'f')))
                    fail_msg("byte 0x%02x at %d: '%c' at %d", byte, at, t, i);
            }
            assert_int_equal(bl_uuid_pack(text, 36, back), 1);
            assert_memory_equal(back, in, 16);
        }
}

/* Version 2 (format 3) still decodes: the example in its fixed layout. */
static void record__version2_still_decodes(void **state)
{
    (void)state;
    static const unsigned char v2[] = {
        0x02, 0x01, 0x01, 0x00, 0x2a, 0, 0, 0, 0, 0, 0, 0, 0xe8, 0x03, 0, 0, 0, 0, 0, 0,
        0x03, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0x02, 0x01, 0x02, 0x01, 0, 0, 0,
        0x28, 0, 0, 0, 0, 0, 0, 0, 'k', 's', '1', 's', 'r', 'x', 0x7b,
        0x14, 0xe6, 0x86, 0x0a, 0x12, 0xd1, 0xe1, 0xa8, /* the version-2 example's checksum */
    };
    bl_record d;
    assert_int_equal(bl_record_decode(v2, sizeof v2, &d), 0);
    assert_int_equal(d.version, 2);
    assert_int_equal(d.prev_lsn, 40);
    assert_true(d.lsn == 42 && d.time_ms == 1000 && d.generation == 3);
    assert_memory_equal(d.key, "k", 1);
    assert_memory_equal(d.origin, "{", 1);
    bl_record_head hd;
    assert_int_equal(bl_record_peek(v2, sizeof v2, &hd), 0);
    assert_true(hd.lsn == 42 && hd.prev_lsn == 40 && hd.key == v2 + BL_RECORD_FIXED);
    /* re-encoded, it is the version-4 example */
    unsigned char b[27];
    assert_int_equal(bl_record_encode(&d, b, sizeof b), sizeof b);
    assert_int_equal(b[0], 4);
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
    /* the same fields re-derived in version 3, with a prev_lsn: the same record */
    bl_record r = d;
    r.version = 3;
    r.prev_lsn = 40;
    assert_true(bl_record_same(&r, &d));
    /* between two records of version 2 or later prev_lsn counts */
    bl_record r2 = r;
    r2.prev_lsn = 41;
    assert_false(bl_record_same(&r, &r2));
    /* a record must chain backwards: prev_lsn below lsn */
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
    size_t n = bl_record_size(&r), key = key_at(&r, n);
    /* the five length varints end the head, one byte each here */
    size_t lens = key - 5, sid_at = key + r.key_len;
    size_t other_at = sid_at + r.sid_len, reason_at = other_at + r.other_len;

    expect_patched(1, 0x10, BINDLOG_ECORRUPT);           /* type 0 */
    expect_patched(1, 0x10 | BINDLOG_EVENT_COUNT, BINDLOG_ECORRUPT); /* type 7 */
    expect_patched(1, 0x10 | 0x08 | BINDLOG_EVENT_SPLIT, BINDLOG_ECORRUPT); /* type bit 3 */
    expect_patched(1, 0x90 | BINDLOG_EVENT_SPLIT, BINDLOG_ECORRUPT); /* reserved flag bit 7 */
    expect_patched(1, 0x50 | BINDLOG_EVENT_SPLIT, BINDLOG_ECORRUPT); /* standard reason, with bytes */
    expect_patched(1, 0x30 | BINDLOG_EVENT_SPLIT, BINDLOG_ECORRUPT); /* activity on a SPLIT */
    expect_patched(1, 0x90 | BINDLOG_EVENT_SPLIT, BINDLOG_ECORRUPT);
    expect_patched(1, BINDLOG_EVENT_SPLIT, BINDLOG_ECORRUPT); /* origin bytes without the flag */
    expect_patched(lens, (unsigned char)(r.key_len + 1), BINDLOG_ECORRUPT); /* lengths */
    expect_patched(lens + 1, (unsigned char)(r.sid_len - 1), BINDLOG_ECORRUPT);
    expect_patched(lens + 2, 0x7f, BINDLOG_ECORRUPT);
    expect_patched(lens + 3, 0, BINDLOG_ECORRUPT);
    expect_patched(lens + 4, 0x80, BINDLOG_ECORRUPT);    /* a varint that runs on */
    expect_patched(key + 3, '\0', BINDLOG_ECORRUPT);     /* NUL in key */
    expect_patched(sid_at, '\n', BINDLOG_ECORRUPT);      /* control bytes */
    expect_patched(other_at + 1, 0x7f, BINDLOG_ECORRUPT);
    expect_patched(reason_at, 0x1f, BINDLOG_ECORRUPT);
    expect_patched(sid_at, 0x80, 0);                     /* high bytes are fine */
}

/* Varints have one encoding each: a longer form of the same number, or
 * bits beyond 64, are damage. */
static void record__varint_forms(void **state)
{
    (void)state;
    uint64_t v;
    unsigned char b[12];
    static const uint64_t nums[] = {0, 1, 127, 128, 16383, 16384, UINT64_MAX / 2, UINT64_MAX};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        size_t n = bl_varint_put(b, nums[i]);
        assert_int_equal(n, bl_varint_size(nums[i]));
        assert_int_equal(bl_varint_get(b, n, &v), n);
        assert_true(v == nums[i]);
        assert_int_equal(bl_varint_get(b, n - 1, &v), 0); /* cut short */
    }
    static const unsigned char longer[] = {0x81, 0x00};   /* 1 in two bytes */
    assert_int_equal(bl_varint_get(longer, 2, &v), 0);
    static const unsigned char over[] = {0xff, 0xff, 0xff, 0xff, 0xff,
                                         0xff, 0xff, 0xff, 0xff, 0x02}; /* bit 64 */
    assert_int_equal(bl_varint_get(over, 10, &v), 0);
    static const unsigned char eleven[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                           0x80, 0x80, 0x80, 0x80, 0x01};
    assert_int_equal(bl_varint_get(eleven, 11, &v), 0);
    assert_true(bl_zigzag(-1) == 1 && bl_zigzag(1) == 2 &&
                bl_unzigzag(bl_zigzag(INT64_MIN)) == INT64_MIN);

    /* a record whose LSN is written in a longer form, resealed */
    bl_record r = sample_record();
    r.lsn = 5;
    r.prev_lsn = 0;
    unsigned char rb[256], lb[257];
    size_t n = raw_rec(&r, rb);
    assert_int_equal(decode_copy(rb, n), 0);
    memcpy(lb, rb, 2);
    lb[2] = 0x85, lb[3] = 0x00;
    memcpy(lb + 4, rb + 3, n - 3);
    reseal(lb, n + 1);
    assert_int_equal(decode_copy(lb, n + 1), BINDLOG_ECORRUPT);
}

/* lsn 0 is damage, and never encoded. */
static void record__lsn_zero(void **state)
{
    (void)state;
    bl_record r = sample_record();
    static unsigned char buf[BL_RECORD_MAX];
    r.lsn = 0;
    r.prev_lsn = 0;
    size_t n = raw_rec(&r, buf);
    assert_int_equal(decode_copy(buf, n), BINDLOG_ECORRUPT);
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
        unsigned char buf[BL_RECORD_MAX];
        r.lsn = cases[i].lsn;
        r.prev_lsn = 0;
        r.time_ms = cases[i].t;
        assert_int_equal(decode_copy(buf, raw_rec(&r, buf)), cases[i].rc);
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
    assert_int_equal(bn, 7); /* 2, generation 1, lsn 1, time 10, activity 0, "s" */
    assert_int_equal(bl_bval_decode(b, bn, &dv), 0);
    /* by hand: the same value with a time of INT64_MAX, then an LSN of
     * 2^64-1, then an activity of INT64_MAX */
    unsigned char h[40] = {2, 1, 1, 1};
    size_t hn = 4 + bl_varint_put(h + 4, bl_zigzag(INT64_MAX));
    h[hn++] = 0;
    h[hn++] = 's';
    assert_int_equal(bl_bval_decode(h, hn, &dv), BINDLOG_ECORRUPT);
    hn = 3 + bl_varint_put(h + 3, UINT64_MAX);
    h[hn++] = 10;
    h[hn++] = 0;
    h[hn++] = 's';
    assert_int_equal(bl_bval_decode(h, hn, &dv), BINDLOG_ECORRUPT);
    h[3] = 1, h[4] = 10;
    hn = 5 + bl_varint_put(h + 5, bl_zigzag(INT64_MAX));
    h[hn++] = 's';
    assert_int_equal(bl_bval_decode(h, hn, &dv), BINDLOG_ECORRUPT);

    bl_sval sv = {.key = "k", .key_len = 1, .created_lsn = 1, .created_ms = 1,
                  .ended_ms = BINDLOG_TIME_MIN_MS - 1};
    static unsigned char sb[BL_SVAL_MAX];
    bl_sval ds;
    assert_int_equal(bl_sval_encode(&sv, sb, sizeof sb), 0);
    sv.ended_ms = 0, sv.created_lsn = BINDLOG_LSN_MAX + 1;
    assert_int_equal(bl_sval_encode(&sv, sb, sizeof sb), 0);
    sv.created_lsn = 1;
    size_t sn = bl_sval_encode(&sv, sb, sizeof sb);
    assert_int_equal(sn, 11); /* 2, eight one-byte varints, "k" */
    assert_int_equal(bl_sval_decode(sb, sn, &ds), 0);
    /* by hand: created_ms INT64_MAX, then ended_lsn 2^63 */
    unsigned char sh[48] = {2, 0, 1, 0, 0, 0, 1, 0};
    hn = 8 + bl_varint_put(sh + 8, bl_zigzag(INT64_MAX));
    sh[hn++] = 0;
    sh[hn++] = 'k';
    assert_int_equal(bl_sval_decode(sh, hn, &ds), BINDLOG_ECORRUPT);
    hn = 7 + bl_varint_put(sh + 7, BINDLOG_LSN_MAX + 1);
    sh[hn++] = 2;
    sh[hn++] = 0;
    sh[hn++] = 'k';
    assert_int_equal(bl_sval_decode(sh, hn, &ds), BINDLOG_ECORRUPT);
}

/* A record whose lengths are over the limits but consistent and resealed. */
static int decode_oversized(size_t key, size_t sid, size_t other, size_t reason, size_t origin)
{
    bl_record r = {.lsn = 1, .type = BINDLOG_EVENT_BIND, .flags = BL_REC_ORIGIN,
                   .key_len = key, .sid_len = sid, .other_len = other, .reason_len = reason,
                   .origin_len = origin};
    unsigned char *b = calloc(1, 64 + key + sid + other + reason + origin);
    assert_non_null(b);
    int rc = decode_copy(b, raw_rec(&r, b));
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
        unsigned char b[BL_BVAL_MAX];
        size_t n = bl_bval_encode(v, b, sizeof b);
        assert_int_equal(n, bl_bval_size(v));
        /* the first: a 10-byte generation, 9-byte LSN, 7-byte time, no
         * activity (1 byte) */
        assert_int_equal(n, (i == 0 ? BL_BVAL_HEAD_MAX - 6 : 2 + 1 + 1 + 1 + 1) + v->sid_len);
        assert_int_equal(bl_bval_encode(v, b, n - 1), 0);
        bl_bval d;
        assert_int_equal(bl_bval_decode(b, n, &d), 0);
        assert_bytes(v->sid, v->sid_len, d.sid, d.sid_len);
        assert_true(d.generation == v->generation && d.lsn == v->lsn);
        assert_true(d.updated_ms == v->updated_ms);
    }
}

static void bval__damage(void **state)
{
    (void)state;
    bl_bval v = {.sid = "abc", .sid_len = 3, .generation = 1, .lsn = 1, .updated_ms = 5};
    unsigned char b[9];
    unsigned char t[10];
    assert_int_equal(bl_bval_encode(&v, b, sizeof b), sizeof b);
    static const unsigned char want[9] = {2, 3, 1, 1, 10, 0, 'a', 'b', 'c'};
    assert_memory_equal(b, want, sizeof want);
    bl_bval d;
    for (size_t len = 0; len < sizeof b; len++) {
        unsigned char *c = malloc(len ? len : 1);
        memcpy(c, b, len);
        assert_int_equal(bl_bval_decode(c, len, &d), BINDLOG_ECORRUPT);
        free(c);
    }
    memcpy(t, b, sizeof b);
    t[9] = 'x';
    assert_int_equal(bl_bval_decode(t, sizeof t, &d), BINDLOG_ECORRUPT); /* trailing */
    t[0] = 3;
    assert_int_equal(bl_bval_decode(t, sizeof b, &d), BINDLOG_EVERSION);
    t[0] = 0;
    assert_int_equal(bl_bval_decode(t, sizeof b, &d), BINDLOG_ECORRUPT);
    t[0] = 2, t[7] = 0x1b;
    assert_int_equal(bl_bval_decode(t, sizeof b, &d), BINDLOG_ECORRUPT); /* control byte */
    t[1] = 4, t[7] = 'b';
    assert_int_equal(bl_bval_decode(t, sizeof t, &d), 0); /* sid_len covers the extra byte */
    assert_int_equal(d.sid_len, 4);
    t[1] = 3, t[4] = 0x8a;
    assert_int_equal(bl_bval_decode(t, sizeof b, &d), BINDLOG_ECORRUPT); /* varint runs on */

    v.sid_len = BINDLOG_ID_MAX + 1;
    assert_int_equal(bl_bval_encode(&v, t, sizeof t), 0);
    unsigned char big[6 + 255] = {2, 255, 1, 1, 10, 0};
    memset(big + 6, 'a', 255);
    assert_int_equal(bl_bval_decode(big, sizeof big, &d), BINDLOG_ECORRUPT); /* sid over limit */
}

/* The gap back to the key's previous record is 0 ("none") or below the
 * LSN: a gap equal to the LSN would name record 0 and re-encode as "none",
 * so a decoder that took it would accept two encodings of one record
 * (found by record_fuzzer; fuzz/corpora/record/cov-563089f3ebfaaa6b2dec4755702c82ef1ba2fa17). */
static void record__gap_of_the_lsn_itself_is_damage(void **state)
{
    (void)state;
    bl_record r = {.version = BINDLOG_RECORD_VERSION, .lsn = 9, .prev_lsn = 3,
                   .time_ms = 1767225600000, .generation = 2, .type = BINDLOG_EVENT_ROUTE,
                   .key = "k", .sid = "", .other = "", .reason = ""};
    r.key_len = 1;
    size_t n;
    unsigned char *b = encode_record(&r, &n);
    /* version, type, lsn (1 byte), time (6), generation (1), then the gap */
    assert_int_equal(b[10], 6);
    bl_record d;
    for (unsigned gap = 8; gap <= 10; gap++) {
        b[10] = (unsigned char)gap;
        reseal(b, n);
        if (gap < 9) {
            assert_int_equal(bl_record_decode(b, n, &d), 0);
            assert_true(d.prev_lsn == 1);
        } else {
            assert_int_equal(bl_record_decode(b, n, &d), BINDLOG_ECORRUPT);
        }
    }
    free(b);
}

/* A ROUTE record: the key and the activity time, nothing else.  The
 * activity flag belongs to a BIND or NEW_SESSION only. */
static void record__route_is_small(void **state)
{
    (void)state;
    bl_record r = {.version = BINDLOG_RECORD_VERSION, .lsn = 9, .prev_lsn = 3,
                   .time_ms = 1767225600000, .generation = 2, .type = BINDLOG_EVENT_ROUTE,
                   .key = "agent:main:telegram:dm:12345", .sid = "", .other = "", .reason = ""};
    r.key_len = strlen(r.key);
    size_t n;
    unsigned char *b = encode_record(&r, &n);
    /* version, type, lsn 1, time 6, generation 1, gap 1, five lengths */
    assert_int_equal(n, 16 + r.key_len + 8);
    assert_int_equal(b[1], BINDLOG_EVENT_ROUTE);
    bl_record d;
    assert_int_equal(bl_record_decode(b, n, &d), 0);
    assert_int_equal(d.type, BINDLOG_EVENT_ROUTE);
    assert_true(d.time_ms == r.time_ms && d.prev_lsn == 3 && d.generation == 2);
    free(b);
    r.flags = BL_REC_ACTIVITY;
    unsigned char buf[128];
    assert_int_equal(bl_record_encode(&r, buf, sizeof buf), 0); /* not on a ROUTE */
    r.type = BINDLOG_EVENT_NEW_SESSION;
    r.sid = "s2";
    r.sid_len = 2;
    n = bl_record_encode(&r, buf, sizeof buf);
    assert_int_equal(n, 16 + r.key_len + 2 + 8);
    assert_int_equal(buf[1], BINDLOG_EVENT_NEW_SESSION | BL_REC_ACTIVITY << 4);
    assert_int_equal(bl_record_decode(buf, n, &d), 0);
    assert_int_equal(d.flags, BL_REC_ACTIVITY);
}

/* The last activity: a zigzag varint in version 2 (one byte when 0), 8
 * trailing bytes in version 1 present only when it is not 0, where an
 * explicit 0 is refused (one encoding per state). */
static void bval__last_activity(void **state)
{
    (void)state;
    bl_bval v = {.sid = "abc", .sid_len = 3, .generation = 1, .lsn = 1, .updated_ms = 5,
                 .last_activity_ms = 1767225600000};
    unsigned char b[BL_BVAL_FIXED + 3 + 8];
    bl_bval d;
    size_t n = bl_bval_encode(&v, b, sizeof b);
    assert_int_equal(n, bl_bval_size(&v));
    assert_int_equal(n, 2 + 1 + 1 + 1 + 6 + 3);
    assert_int_equal(bl_bval_decode(b, n, &d), 0);
    assert_true(d.last_activity_ms == v.last_activity_ms);
    assert_int_equal(bl_bval_encode_v1(&v, b, sizeof b), sizeof b);
    assert_int_equal(bl_bval_decode(b, sizeof b, &d), 0);
    assert_true(d.last_activity_ms == v.last_activity_ms);
    assert_int_equal(bl_bval_decode(b, sizeof b - 8, &d), 0); /* an older value */
    assert_true(d.last_activity_ms == 0);
    memset(b + BL_BVAL_FIXED + 3, 0, 8);
    assert_int_equal(bl_bval_decode(b, sizeof b, &d), BINDLOG_ECORRUPT);
    assert_int_equal(bl_bval_decode(b, sizeof b - 1, &d), BINDLOG_ECORRUPT);
    v.last_activity_ms = BINDLOG_TIME_MAX_MS + 1;
    assert_int_equal(bl_bval_encode(&v, b, sizeof b), 0);
    assert_int_equal(bl_bval_encode_v1(&v, b, sizeof b), 0);
}

/* Version 1 (format 3 and before, and the digest's canonical form) still
 * decodes, and bl_bval_encode_v1 writes it. */
static void bval__version1(void **state)
{
    (void)state;
    bl_bval v = {.sid = "s1", .sid_len = 2, .generation = 3, .lsn = 42, .updated_ms = 1000};
    static const unsigned char v1[] = {1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0,
                                       0xe8, 0x03, 0, 0, 0, 0, 0, 0, 's', '1'};
    unsigned char b[64];
    assert_int_equal(bl_bval_encode_v1(&v, b, sizeof b), sizeof v1);
    assert_memory_equal(b, v1, sizeof v1);
    bl_bval d;
    assert_int_equal(bl_bval_decode(v1, sizeof v1, &d), 0);
    assert_true(d.generation == 3 && d.lsn == 42 && d.updated_ms == 1000 && d.sid_len == 2);
    static const unsigned char v2[] = {2, 2, 3, 42, 0xd0, 0x0f, 0, 's', '1'};
    assert_int_equal(bl_bval_encode(&v, b, sizeof b), sizeof v2);
    assert_memory_equal(b, v2, sizeof v2);
}

/* ---- session values ---------------------------------------------------- */

static bl_sval sample_sval(void)
{
    bl_sval v = {.key = "agent:main:discord:chan:9", .parent = "sess-a", .reason = "moved",
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
    /* into the room of its longest form (no exact size computed first):
     * the same bytes, and the same length returned */
    size_t room = bl_sval_room(v);
    assert_true(room >= n);
    unsigned char *r = malloc(room);
    assert_non_null(r);
    assert_int_equal(bl_sval_encode(v, r, room), n);
    assert_memory_equal(r, b, n);
    free(r);
    free(b);
}

/* A plan whose session value breaks the key rule (a NUL in the key, which
 * bl_decide() never lets through) is refused whole: BINDLOG_ECORRUPT with a
 * message, not a value of zero bytes for the store to write. */
static void plan__an_unencodable_value_is_refused(void **state)
{
    (void)state;
    bl_plan p;
    bl_encoded enc;
    memset(&p, 0, sizeof p);
    memset(&enc, 0, sizeof enc);
    p.outcome = BINDLOG_APPLIED;
    p.after = (bl_bval){.sid = "s1", .sid_len = 2, .generation = 1, .lsn = 1, .updated_ms = 1000};
    p.nsess = 1;
    p.sess[0].id = "s1";
    p.sess[0].id_len = 2;
    p.sess[0].v.key = "k1";
    p.sess[0].v.key_len = 2;
    p.sess[0].v.parent = "";
    p.sess[0].v.reason = "";
    p.sess[0].v.origin = "";
    p.sess[0].v.created_lsn = 1;
    p.sess[0].v.created_ms = 1000;
    assert_int_equal(bl_plan_encode_state(&p, &enc), 0);
    assert_true(enc.bval_len > 0 && enc.sval_len[0] > 0);
    bl_sval d;
    assert_int_equal(bl_sval_decode(enc.buf + enc.sval_off[0], enc.sval_len[0], &d), 0);
    assert_memory_equal(d.key, "k1", 2);

    p.sess[0].v.key = "k\0";
    assert_int_equal(bl_plan_encode_state(&p, &enc), BINDLOG_ECORRUPT);
    assert_non_null(strstr(bl_err_get(), "session value does not encode"));
    p.sess[0].v.key = "k1";
    p.after.sid = "s\x01"; /* a control byte in the binding's id */
    assert_int_equal(bl_plan_encode_state(&p, &enc), BINDLOG_ECORRUPT);
    assert_non_null(strstr(bl_err_get(), "binding value does not encode"));
    free(enc.buf);
}

static void sval__round_trip(void **state)
{
    (void)state;
    bl_sval v = sample_sval();
    sval_round_trip_one(&v);

    bl_sval root = {.key = "k", .key_len = 1, .created_lsn = 1, .created_ms = -3};
    sval_round_trip_one(&root);
    assert_int_equal(bl_sval_size(&root), 2 + 8 + 1);

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

/* A session value's standard end reason is a code (1..5) in its flags byte
 * and no bytes; its bytes, or a code with bytes or above 5, are damage.
 * The canonical form of the digest (version 1) carries the text. */
/* Format 5's reference form (docs/format.md pins these bytes), the mark,
 * and what a reader checks when it resolves a reference. */
static void sval__reference_form(void **state)
{
    (void)state;
    unsigned char b[256];
    bl_sval v, d;
    size_t n;

    memset(&v, 0, sizeof v);
    v.ref = 1;
    v.created_lsn = 42;
    v.reason = "";
    n = bl_sval_encode_ref(&v, b, sizeof b);
    assert_int_equal(n, 6);
    assert_memory_equal(b, "\x03\x00\x2a\x00\x00\x00", 6);
    v.ended_lsn = 50;
    v.ended_ms = 2000;
    v.reason = "compression";
    v.reason_len = 11;
    n = bl_sval_encode_ref(&v, b, sizeof b);
    assert_int_equal(n, 7);
    assert_memory_equal(b, "\x03\x03\x2a\x08\xa0\x1f\x00", 7);
    /* decoded alone: its own fields, nothing of the record's */
    assert_int_equal(bl_sval_decode_any(b, n, &d), 0);
    assert_int_equal(d.ref, 1);
    assert_null(d.key);
    assert_int_equal(d.created_lsn, 42);
    assert_int_equal(d.ended_lsn, 50);
    assert_int_equal(d.ended_ms, 2000);
    assert_int_equal(d.reason_len, 11);
    /* where only whole values belong (etcd, streams): damage */
    assert_int_equal(bl_sval_decode(b, n, &d), BINDLOG_ECORRUPT);
    v.reason = "rx";
    v.reason_len = 2;
    n = bl_sval_encode_ref(&v, b, sizeof b);
    assert_int_equal(n, 9);
    assert_memory_equal(b, "\x03\x00\x2a\x08\xa0\x1f\x02\x72\x78", 9);
    /* the whole value, marked (a base image's form) */
    bl_sval w = {"k", 1, "s", 1, 42, 0, 1000, 0, "", 0, "{", 1, 1, 0, 0, {0}};
    n = bl_sval_encode_base(&w, b, sizeof b);
    assert_int_equal(n, 14);
    assert_memory_equal(b, "\x02\x80\x01\x01\x00\x01\x2a\x00\xd0\x0f\x00\x6b\x73\x7b", 14);
    assert_int_equal(bl_sval_decode(b, n, &d), 0);
    assert_int_equal(d.ref, 1);
    assert_int_equal(d.key_len, 1);
    /* marked, it is still whole: every byte rule holds (a key with a NUL
     * is damage; the fuzzer's find, fuzz/corpora/record/regress-*) */
    b[11] = 0;
    assert_int_equal(bl_sval_decode(b, n, &d), BINDLOG_ECORRUPT);
    assert_int_equal(bl_sval_decode_any(b, n, &d), BINDLOG_ECORRUPT);

    /* one encoding per value: a live session with an end time or reason,
     * reserved flag bits, the standard reason spelt out, a cut value */
    unsigned char bad[][12] = {
        {3, 0, 42, 0, 2, 0},          /* live with an end time */
        {3, 0, 42, 0, 0, 1, 'x'},     /* live with a reason */
        {3, 0x40, 42, 8, 2, 0},       /* bit 6 */
        {3, 0x80, 42, 8, 2, 0},       /* the mark belongs to whole values */
        {3, 0, 0, 0, 0, 0},           /* created at LSN 0 */
    };
    size_t badn[] = {6, 7, 6, 6, 6};
    for (size_t i = 0; i < sizeof badn / sizeof badn[0]; i++)
        assert_int_equal(bl_sval_decode_any(bad[i], badn[i], &d), BINDLOG_ECORRUPT);
    memcpy(b, "\x03\x03\x2a\x08\xa0\x1f\x00", 7);
    for (size_t cut = 0; cut < 7; cut++)
        assert_int_equal(bl_sval_decode_any(b, cut, &d), BINDLOG_ECORRUPT);
    assert_int_equal(bl_sval_decode_any(b, 8, &d), BINDLOG_ECORRUPT); /* a trailing byte */
    b[0] = 4;
    assert_int_equal(bl_sval_decode_any(b, 7, &d), BINDLOG_EVERSION);

    /* resolving: the record must be the session's creation */
    bl_record r;
    memset(&r, 0, sizeof r);
    r.lsn = 42;
    r.time_ms = 1000;
    r.type = BINDLOG_EVENT_SPLIT;
    r.flags = BL_REC_ORIGIN;
    r.key = "k";
    r.key_len = 1;
    r.sid = "c";
    r.sid_len = 1;
    r.other = "p";
    r.other_len = 1;
    r.origin = "{}";
    r.origin_len = 2;
    memcpy(b, "\x03\x03\x2a\x08\xa0\x1f\x00", 7);
    assert_int_equal(bl_sval_decode_any(b, 7, &d), 0);
    assert_int_equal(bl_sval_resolve(&d, "c", 1, &r), 0);
    assert_memory_equal(d.key, "k", 1);
    assert_memory_equal(d.parent, "p", 1);
    assert_int_equal(d.origin_len, 2);
    assert_int_equal(d.created_ms, 1000);
    /* a BIND creates a root; a record without an origin gives none */
    r.type = BINDLOG_EVENT_BIND;
    r.flags = 0;
    assert_int_equal(bl_sval_decode_any(b, 7, &d), 0);
    assert_int_equal(bl_sval_resolve(&d, "c", 1, &r), 0);
    assert_int_equal(d.parent_len, 0);
    assert_int_equal(d.origin_len, 0);
    /* another session's record, another LSN, a type that creates none, an
     * end before the creation */
    assert_int_equal(bl_sval_decode_any(b, 7, &d), 0);
    assert_int_equal(bl_sval_resolve(&d, "x", 1, &r), BINDLOG_ECORRUPT);
    r.lsn = 41;
    assert_int_equal(bl_sval_resolve(&d, "c", 1, &r), BINDLOG_ECORRUPT);
    r.lsn = 42;
    r.type = BINDLOG_EVENT_INVALIDATE;
    assert_int_equal(bl_sval_resolve(&d, "c", 1, &r), BINDLOG_ECORRUPT);
    r.type = BINDLOG_EVENT_NEW_SESSION;
    r.time_ms = 3000;
    assert_int_equal(bl_sval_resolve(&d, "c", 1, &r), BINDLOG_ECORRUPT);
}

static void sval__standard_reason_is_a_code(void **state)
{
    (void)state;
    static const char *const std[] = {NULL, "switch", "new_session", "compression",
                                      "invalidate", "unbind"};
    for (unsigned c = 1; c <= 5; c++) {
        bl_sval v = sample_sval();
        v.reason = std[c];
        v.reason_len = strlen(std[c]);
        unsigned char b[256], w[256];
        size_t n = bl_sval_encode(&v, b, sizeof b);
        assert_int_equal(n, bl_sval_size(&v));
        assert_int_equal(b[1], c);
        assert_int_equal(b[4], 0); /* reason_len */
        bl_sval d;
        assert_int_equal(bl_sval_decode(b, n, &d), 0);
        assert_svals_equal(&v, &d);
        size_t n1 = bl_sval_encode_v1(&d, w, sizeof w);
        assert_int_equal(n1, BL_SVAL_FIXED + v.key_len + v.parent_len + v.reason_len + 4);
        assert_memory_equal(w + BL_SVAL_FIXED + v.key_len + v.parent_len, std[c], v.reason_len);
        /* the code with bytes: damage */
        b[1] = 1;
        b[4] = 0;
        v.reason = "moved";
        v.reason_len = 5;
        n = bl_sval_encode(&v, b, sizeof b);
        assert_int_equal(b[1], 0);
        b[1] = (unsigned char)c;
        assert_int_equal(bl_sval_decode(b, n, &d), BINDLOG_ECORRUPT);
    }
    /* the bytes of a standard reason without its code: damage */
    bl_sval v = sample_sval();
    v.reason = "unbinx";
    v.reason_len = 6;
    unsigned char b[256];
    size_t n = bl_sval_encode(&v, b, sizeof b);
    bl_sval d;
    assert_int_equal(bl_sval_decode(b, n, &d), 0);
    memcpy(b + n - 4 - 6, "unbind", 6);
    assert_int_equal(bl_sval_decode(b, n, &d), BINDLOG_ECORRUPT);
    /* codes 6 and 7 and bits 3..6 are reserved; bit 7 is the base
     * image's mark of a session the live table keeps as a reference */
    v.reason = "";
    v.reason_len = 0;
    n = bl_sval_encode(&v, b, sizeof b);
    for (unsigned f = 6; f < 256; f++) {
        b[1] = (unsigned char)f;
        /* the sample ended at LSN 8: a child at its end is a valid link;
         * the other link bits announce varints the value does not have */
        if ((f & ~(BL_SVAL_F_REF | BL_SVAL_F_CHILD_END)) < 6) {
            assert_int_equal(bl_sval_decode(b, n, &d), 0); /* marked, code 0..5 */
            continue;
        }
        assert_int_equal(bl_sval_decode(b, n, &d), BINDLOG_ECORRUPT);
    }
    b[1] = BL_SVAL_F_REF;
    assert_int_equal(bl_sval_decode(b, n, &d), 0);
    assert_int_equal(d.ref, 1);
    b[1] = 0;
    assert_int_equal(bl_sval_decode(b, n, &d), 0);
    assert_int_equal(d.ref, 0);
}

/* Format 6's sibling chain in both forms: the bytes docs/format.md pins,
 * the round trip, and every way its links can be damage. */
static void sval__sibling_chain(void **state)
{
    (void)state;
    unsigned char b[64];
    bl_sval d;
    /* created at 42, ended at 50 by the split that created its youngest
     * child, its next older sibling created at 40 */
    bl_sval r = {.created_lsn = 42, .ended_lsn = 50, .ended_ms = 2000, .reason = "compression",
                 .reason_len = 11, .ref = 1, .child_lsn = 50, .sibling_lsn = 40};
    size_t n = bl_sval_encode_ref(&r, b, sizeof b);
    assert_int_equal(n, 8);
    assert_int_equal(n, bl_sval_ref_size(&r));
    assert_memory_equal(b, "\x03\x2b\x2a\x08\xa0\x1f\x00\x02", 8);
    assert_int_equal(bl_sval_decode_any(b, n, &d), 0);
    assert_int_equal(d.child_lsn, 50);
    assert_int_equal(d.sibling_lsn, 40);
    assert_int_equal(d.ended_lsn, 50);
    /* whole, live again (re-opened) with its youngest child from LSN 45 */
    bl_sval w = {"k", 1, "s", 1, 42, 0, 1000, 0, "", 0, "{", 1, 0, 45, 40, {0}};
    n = bl_sval_encode(&w, b, sizeof b);
    assert_int_equal(n, 16);
    assert_int_equal(n, bl_sval_size(&w));
    assert_memory_equal(b, "\x02\x30\x01\x01\x00\x01\x2a\x00\xd0\x0f\x00\x03\x02k" "s{", 16);
    assert_int_equal(bl_sval_decode(b, n, &d), 0);
    assert_int_equal(d.child_lsn, 45);
    assert_int_equal(d.sibling_lsn, 40);
    assert_int_equal(d.ended_lsn, 0);
    /* the digest's form leaves the chain out */
    bl_sval plain = w;
    plain.child_lsn = plain.sibling_lsn = 0;
    unsigned char v1a[64], v1b[64];
    size_t na = bl_sval_encode_v1(&w, v1a, sizeof v1a), nb = bl_sval_encode_v1(&plain, v1b, sizeof v1b);
    assert_int_equal(na, nb);
    assert_memory_equal(v1a, v1b, na);
    /* an encoder refuses links that cannot be: a child before its parent,
     * an older sibling after the session */
    bl_sval bad = w;
    bad.child_lsn = 42;
    assert_int_equal(bl_sval_encode(&bad, b, sizeof b), 0);
    bad = w;
    bad.sibling_lsn = 42;
    assert_int_equal(bl_sval_encode(&bad, b, sizeof b), 0);
    /* damaged links: one encoding per value, and every LSN in range */
    static const unsigned char dmg[][10] = {
        {3, 0x08, 42, 0, 0, 0},          /* a child at the end of a live session */
        {3, 0x18, 42, 8, 2, 0, 1},       /* at the end and after it */
        {3, 0x10, 42, 0, 0, 0, 0},       /* a child at the creation */
        {3, 0x10, 42, 8, 2, 0, 8},       /* F_CHILD for the child at the end */
        {3, 0x20, 42, 0, 0, 0, 0},       /* a sibling of the same LSN */
        {3, 0x20, 42, 0, 0, 0, 42},      /* a sibling at LSN 0 */
        {3, 0x10, 42, 0, 0, 0},          /* a link announced, not there */
        {3, 0x20, 42, 0, 0, 0, 0x80},    /* a cut varint */
    };
    static const size_t dmgn[] = {6, 7, 7, 7, 7, 7, 6, 7};
    for (size_t i = 0; i < sizeof dmgn / sizeof dmgn[0]; i++)
        assert_int_equal(bl_sval_decode_any(dmg[i], dmgn[i], &d), BINDLOG_ECORRUPT);
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
    /* version, flags, eight varints: created_ms 1000 and ended_ms 2000 take
     * two bytes each, the others one */
    size_t key_at = 2 + 6 + 4, parent_at = key_at + v.key_len, reason_at = parent_at + v.parent_len;
    assert_int_equal(bl_sval_size(&v), key_at + v.key_len + v.parent_len + v.reason_len + 4);
    expect_sval_patched(0, 4, BINDLOG_EVERSION);
    /* version 3 is the reference form: these bytes are not one */
    expect_sval_patched(0, 3, BINDLOG_ECORRUPT);
    expect_sval_patched(0, 0, BINDLOG_ECORRUPT);
    expect_sval_patched(1, 0x40, BINDLOG_ECORRUPT); /* reserved flag bit 6 */
    expect_sval_patched(1, 0x18, BINDLOG_ECORRUPT); /* a child at the end and after it */
    expect_sval_patched(1, 0x08, 0); /* its youngest child was created by its end (LSN 8) */
    expect_sval_patched(1, 1, BINDLOG_ECORRUPT);    /* a reason code, with reason bytes */
    expect_sval_patched(2, 0, BINDLOG_ECORRUPT); /* key_len changed */
    expect_sval_patched(3, 0x7f, BINDLOG_ECORRUPT);
    expect_sval_patched(5, 0x80, BINDLOG_ECORRUPT); /* origin_len runs on */
    expect_sval_patched(key_at, 0, BINDLOG_ECORRUPT);   /* NUL in key */
    expect_sval_patched(parent_at, '\r', BINDLOG_ECORRUPT);
    expect_sval_patched(reason_at, 0x7f, BINDLOG_ECORRUPT);
    expect_sval_patched(key_at, 0x01, 0); /* control bytes are fine in keys */
}

/* bl_sval_same_v1 agrees with comparing the two version-1 encodings, for
 * values that differ in any one field (lengths and bytes apart), that
 * point at equal bytes in other places, or that do not encode at all. */
static void sval__same_v1_is_the_encodings_compared(void **state)
{
    (void)state;
    static const char key2[] = "agent:main:x", id2[] = "s1";
    const bl_sval base = {"agent:main:x", 12, "s1", 2, 42, 50, 1000, 2000, "stop", 4,
                          "{\"a\":1}", 7, 0, 0, 0, {0}};
    bl_sval v[16];
    size_t n = 0;
    v[n++] = base;
    v[n] = base, v[n].key = key2, n++; /* equal bytes elsewhere */
    v[n] = base, v[n].parent = id2, n++;
    v[n] = base, v[n].key_len = 11, n++;
    v[n] = base, v[n].key = "agent:main:y", n++;
    v[n] = base, v[n].parent = "s2", n++;
    v[n] = base, v[n].parent = NULL, v[n].parent_len = 0, n++;
    v[n] = base, v[n].created_lsn = 43, n++;
    v[n] = base, v[n].ended_lsn = 51, n++;
    v[n] = base, v[n].created_ms = 1001, n++;
    v[n] = base, v[n].ended_ms = 2001, n++;
    v[n] = base, v[n].reason = "Stop", n++;
    v[n] = base, v[n].origin_len = 6, n++;
    v[n] = base, v[n].child_lsn = 45, v[n].sibling_lsn = 40, n++; /* not in version 1 */
    v[n] = base, v[n].key_len = 0, n++;                           /* does not encode */
    v[n] = base, v[n].created_ms = -1, n++;                       /* nor this */
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            unsigned char a[256], b[256];
            size_t na = bl_sval_encode_v1(&v[i], a, sizeof a);
            size_t nb = bl_sval_encode_v1(&v[j], b, sizeof b);
            int same = na != 0 && na == nb && memcmp(a, b, na) == 0;
            if (bl_sval_same_v1(&v[i], &v[j]) != same)
                fail_msg("values %zu and %zu: same_v1 %d, encodings %s", i, j,
                         bl_sval_same_v1(&v[i], &v[j]), same ? "equal" : "not equal");
        }
    /* the pairs above hold both answers */
    assert_true(bl_sval_same_v1(&v[0], &v[1]));
    assert_true(bl_sval_same_v1(&v[0], &v[13]));
    assert_false(bl_sval_same_v1(&v[0], &v[3]));
    assert_false(bl_sval_same_v1(&v[14], &v[14]));
}

/* Version 1 still decodes and bl_sval_encode_v1 writes it; the pinned
 * version-2 bytes of docs/format.md. */
static void sval__versions(void **state)
{
    (void)state;
    bl_sval s = {.key = "k", .key_len = 1, .parent = "s", .parent_len = 1, .reason = "rx",
                 .reason_len = 2, .origin = "{", .origin_len = 1, .created_lsn = 42,
                 .created_ms = 1000};
    static const unsigned char v2[] = {2, 0, 1, 1, 2, 1, 42, 0, 0xd0, 0x0f, 0,
                                       'k', 's', 'r', 'x', '{'};
    unsigned char b[128];
    assert_int_equal(bl_sval_encode(&s, b, sizeof b), sizeof v2);
    assert_memory_equal(b, v2, sizeof v2);
    size_t n = bl_sval_encode_v1(&s, b, sizeof b);
    assert_int_equal(n, 42 + 5);
    assert_int_equal(b[0], 1);
    bl_sval d;
    assert_int_equal(bl_sval_decode(b, n, &d), 0);
    assert_svals_equal(&s, &d);
    assert_int_equal(bl_sval_decode(v2, sizeof v2, &d), 0);
    assert_svals_equal(&s, &d);
}

/* ---- validation -------------------------------------------------------- */

/* The id rule, read eight or sixteen bytes at a time, against the byte rule: every
 * byte value at every position of ids of 1..48 bytes (past the 8- and
 * 16-byte blocks it is read in, and their overlapping tails), in a field of
 * bytes that are themselves borderline (0x20, 0x7E, 0x80, 0xFF), so that a
 * borrow from one byte into the next would show. */
static void valid__id_rule_every_byte_everywhere(void **state)
{
    (void)state;
    static const unsigned char fill[] = {0x20, 0x7e, 0x80, 0xff, 'a'};
    char id[48];
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
        cmocka_unit_test(record__uuid_ids_are_16_bytes),
        cmocka_unit_test(record__standard_reason_is_a_flag),
        cmocka_unit_test(record__version2_still_decodes),
        cmocka_unit_test(record__version1_still_decodes),
        cmocka_unit_test(record__varint_forms),
        cmocka_unit_test(record__every_truncation_rejected),
        cmocka_unit_test(record__single_bit_flips_rejected),
        cmocka_unit_test(record__trailing_bytes),
        cmocka_unit_test(record__newer_version),
        cmocka_unit_test(record__resealed_bad_fields),
        cmocka_unit_test(record__lsn_zero),
        cmocka_unit_test(record__limits),
        cmocka_unit_test(record__lsn_and_time_limits),
        cmocka_unit_test(bval__round_trip),
        cmocka_unit_test(bval__damage),
        cmocka_unit_test(bval__version1),
        cmocka_unit_test(bval__last_activity),
        cmocka_unit_test(record__route_is_small),
        cmocka_unit_test(record__gap_of_the_lsn_itself_is_damage),
        cmocka_unit_test(sval__round_trip),
        cmocka_unit_test(plan__an_unencodable_value_is_refused),
        cmocka_unit_test(sval__reference_form),
        cmocka_unit_test(sval__sibling_chain),
        cmocka_unit_test(sval__truncations),
        cmocka_unit_test(sval__bad_fields),
        cmocka_unit_test(sval__standard_reason_is_a_code),
        cmocka_unit_test(sval__versions),
        cmocka_unit_test(sval__same_v1_is_the_encodings_compared),
        cmocka_unit_test(valid__key_id_reason),
        cmocka_unit_test(valid__id_rule_every_byte_everywhere),
        cmocka_unit_test(endian__helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
