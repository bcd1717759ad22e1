/*
 * record.c -- byte encodings of log records and state values.
 *
 * docs/format.md is the normative description; this is a summary.  Every
 * integer is little-endian.
 *
 * Log record (version 4, format 7): no fixed part but its first two bytes,
 * varints for every number and length, the strings, then the checksum:
 *
 *    0 version u8 (4)   1 type (1..6) | flags << 4 (ORIGIN 0x10, ACTIVITY 0x20,
 *                         STD_REASON 0x40: the type's standard reason, no bytes)
 *    2 varints: lsn, zigzag(time_ms), generation, lsn - prev_lsn (0: none),
 *      key_len, sid_code, other_code, reason_len, origin_len
 *    then key | sid | other | reason | origin
 *   len-8  XXH3-64 (seed 0) of bytes [0, len-8), u64
 *
 * An id's code is 2 x its length when its text follows, 1 when it is a
 * UUID in canonical lower-case text and its 16 bytes follow (always so
 * for such an id: one encoding per record).  Version 3 (formats 4 to 6,
 * still read) has sid_len and other_len there and the ids as text.
 *
 * Log record (version 2, format 3), 45 fixed bytes, the strings, then the
 * checksum (still read):
 *
 *    0 version u8   1 type u8        2 flags u16       4 lsn u64
 *   12 time_ms i64 20 generation u64 28 key_len u16   30 sid_len u8
 *   31 other_len u8 32 reason_len u8 33 origin_len u32 37 prev_lsn u64
 *   45 key | sid | other | reason | origin
 *   len-8  XXH3-64 (seed 0) of bytes [0, len-8), u64
 *
 * Version 1 (still read: export streams and etcd stores written before it)
 * has no prev_lsn and its strings start at 37.
 *
 * Binding value (version 2): version u8, sid_len u8, varints generation,
 * lsn, zigzag(updated_ms), zigzag(last_activity_ms), then the session id.
 *
 * Session value (version 2): version u8, flags u8 (bits 0..2: 0 or the code
 * 1..5 of a standard end reason, which then has no bytes), varints key_len,
 * parent_len, reason_len, origin_len, created_lsn, ended_lsn,
 * zigzag(created_ms), zigzag(ended_ms), then key | parent | reason | origin.
 *
 * Binding value (version 1, the digest's canonical form), 26 fixed bytes
 * then the session id:
 *    0 version u8  1 sid_len u8  2 generation u64  10 lsn u64
 *   18 updated_ms i64  26 sid
 *
 * Session value (version 1, canonical), 42 fixed bytes then the strings:
 *    0 version u8  1 flags u8 (0)  2 key_len u16  4 parent_len u8
 *    5 reason_len u8  6 origin_len u32  10 created_lsn u64
 *   18 ended_lsn u64  26 created_ms i64  34 ended_ms i64
 *   42 key | parent | reason | origin
 *
 * Records carry their own checksum because they travel alone (iteration,
 * replay, export streams); state values do not, because the state digest
 * covers all of them at once and a per-value checksum would only cost space.
 *
 * The only assumptions a decoder makes about a record of any version are that
 * byte 0 is the version and the last 8 bytes are the checksum of the rest.
 * It verifies that checksum before it looks at any other field, so damage is
 * always BINDLOG_ECORRUPT and a version byte is believed (BINDLOG_EVERSION)
 * only once the bytes around it are known to be intact.
 *
 * Encoders refuse (return 0) anything their decoder would refuse, so every
 * byte string this file produces decodes again: a bug upstream shows up at
 * write time, not when the log is replayed years later.
 */
#include "core/record.h"

#include <inttypes.h>
#include <string.h>

#include "core/error.h"
#define XXH_INLINE_ALL /* every record is checksummed: no library calls */
#include <xxhash.h>

#define BL_BVAL_VERSION 2
#define BL_SVAL_VERSION 3
/* Smallest input whose checksum and version can be examined at all. */
#define BL_RECORD_MIN (1 + BL_RECORD_CHECKSUM)

/* ---- UUIDs ------------------------------------------------------------- */

/* Lower-case hex digits' values plus one; 0 for every other byte (so that
 * a whole UUID is checked with one test at the end, not two a digit). */
static const unsigned char hexval1[256] = {
    ['0'] = 1, ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
    ['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
};

int bl_uuid_pack(const char *p, size_t n, unsigned char out[BL_UUID_BYTES])
{
    /* the digit pairs of the 16 bytes, by offset in the text */
    static const unsigned char at[BL_UUID_BYTES] = {0,  2,  4,  6,  9,  11, 14, 16,
                                                    19, 21, 24, 26, 28, 30, 32, 34};
    const unsigned char *u = (const unsigned char *)p;
    if (n != BL_UUID_TEXT || u[8] != '-' || u[13] != '-' || u[18] != '-' || u[23] != '-')
        return 0; /* most ids that are not UUIDs stop here */
    unsigned ok = 1;
    for (size_t i = 0; i < BL_UUID_BYTES; i++) {
        unsigned hi = hexval1[u[at[i]]], lo = hexval1[u[at[i] + 1]];
        ok &= (hi != 0) & (lo != 0);
        out[i] = (unsigned char)((hi - 1) << 4 | (lo - 1));
    }
    return (int)ok; /* out is undefined when 0 */
}

void bl_uuid_text(const unsigned char in[BL_UUID_BYTES], char out[BL_UUID_TEXT])
{
    /* every byte's two hex digits: a record decode writes two UUIDs */
    static const char pairs[513] =
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
        "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
        "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
        "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
        "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
        "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
        "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";
    static const unsigned char at[BL_UUID_BYTES] = {0,  2,  4,  6,  9,  11, 14, 16,
                                                    19, 21, 24, 26, 28, 30, 32, 34};
    for (size_t i = 0; i < BL_UUID_BYTES; i++)
        memcpy(out + at[i], pairs + 2 * in[i], 2);
    out[8] = out[13] = out[18] = out[23] = '-';
}

/* ---- validation -------------------------------------------------------- */

static int is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

int bl_valid_key(const char *p, size_t n)
{
    if (p == NULL || n == 0 || n > BINDLOG_KEY_MAX)
        return 0;
    return memchr(p, '\0', n) == NULL;
}

/* Ids and reasons share the "no control bytes" rule; they differ in limits.
 * Every id is checked several times an event (the event, the encodings,
 * the decoded state values), so eight bytes at a time: a word has a byte
 * below 0x20 iff (x - 0x20..) & ~x & 0x80.. is non-zero, and a byte 0x7F
 * iff x ^ 0x7F.. has a zero byte (both exact as existence tests; Anderson's
 * "Bit Twiddling Hacks", hasless and haszero). */
static int word_has_control(const char *p)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t x, y;
    memcpy(&x, p, 8);
    y = x ^ (0x7F * ones);
    return ((((x - 0x20 * ones) & ~x) | ((y - ones) & ~y)) & highs) != 0;
}

#if defined(__GNUC__) || defined(__clang__)
/* Sixteen bytes at once where the compiler has vector types (SSE2, NEON):
 * the same two tests as word_has_control, byte by byte. */
typedef unsigned char bl_u8x16 __attribute__((vector_size(16)));
typedef signed char bl_i8x16 __attribute__((vector_size(16))); /* a comparison's result */

static int block_has_control(const char *p)
{
    bl_u8x16 x;
    uint64_t w[2];
    memcpy(&x, p, 16);
    bl_i8x16 bad = (x < 0x20) | (x == 0x7f);
    memcpy(w, &bad, 16);
    return (w[0] | w[1]) != 0;
}
#define BLOCK 16
#else
#define block_has_control word_has_control
#define BLOCK             8
#endif

static int no_controls(const char *p, size_t n)
{
    if (n >= BLOCK) {
        /* whole blocks, then the last BLOCK bytes (overlapping the last one) */
        for (size_t i = 0; i + BLOCK <= n; i += BLOCK)
            if (block_has_control(p + i))
                return 0;
        return n % BLOCK == 0 || !block_has_control(p + n - BLOCK);
    }
#if BLOCK > 8
    if (n >= 8) /* the first eight bytes and the last eight (they overlap) */
        return !word_has_control(p) && !word_has_control(p + n - 8);
#endif
    for (size_t i = 0; i < n; i++)
        if (is_control((unsigned char)p[i]))
            return 0;
    return 1;
}

int bl_valid_id(const char *p, size_t n)
{
    if (p == NULL || n == 0 || n > BINDLOG_ID_MAX)
        return 0;
    return no_controls(p, n);
}

int bl_valid_reason(const char *p, size_t n)
{
    if (n == 0)
        return 1;
    if (p == NULL || n > BINDLOG_REASON_MAX)
        return 0;
    return no_controls(p, n);
}

/* An optional id: empty is fine, otherwise it must be a valid id. */
static int valid_opt_id(const char *p, size_t n) { return n == 0 || bl_valid_id(p, n); }

/* An origin is opaque; only its length and presence of bytes matter. */
static int valid_origin(const void *p, size_t n) { return n <= BINDLOG_ORIGIN_MAX && (n == 0 || p != NULL); }

/* ---- small buffer helpers --------------------------------------------- */

/* Append n bytes at *pos; src may be NULL when n is 0 (memcpy may not). */
static void put_bytes(unsigned char *b, size_t *pos, const void *src, size_t n)
{
    if (n > 0)
        memcpy(b + *pos, src, n);
    *pos += n;
}

/* The next n bytes of the input as a string; the caller checked the length. */
static const char *take(const unsigned char *b, size_t *pos, size_t n)
{
    const char *p = (const char *)(b + *pos);
    *pos += n;
    return p;
}

/* Version byte check shared by every decoder. */
static int check_version(unsigned v, unsigned mine)
{
    if (v == 0)
        return BINDLOG_ECORRUPT; /* no version 0 was ever written */
    return v > mine ? BINDLOG_EVERSION : 0;
}

/* ---- standard reasons -------------------------------------------------- */

/*
 * The reasons the library applies when an event gives none, frozen here as
 * part of the format (the state machine's defaults may change; these bytes
 * may not): a record or a session value whose reason is one of them stores
 * a code instead of the bytes.  Indexed by event type; ROUTE has none.
 */
static const char *const std_reason[BL_STD_REASONS] = {
    NULL, "switch", "new_session", "compression", "invalidate", "unbind",
};
#define STD_LEN(s) (sizeof(s) - 1)
static const size_t std_reason_len[BL_STD_REASONS] = {
    0,
    STD_LEN("switch"),
    STD_LEN("new_session"),
    STD_LEN("compression"),
    STD_LEN("invalidate"),
    STD_LEN("unbind"),
};

/* The code of a reason (1..5), or 0 when it is not a standard one.  Every
 * session value's encoding asks, so the lengths come from a table. */
static unsigned reason_code(const char *r, size_t n)
{
    for (unsigned c = 1; c < BL_STD_REASONS; c++)
        if (n == std_reason_len[c] && memcmp(r, std_reason[c], n) == 0)
            return c;
    return 0;
}

/* Point *r at standard reason c (1..5). */
static void std_reason_of(unsigned c, const char **r, size_t *n)
{
    *r = std_reason[c];
    *n = std_reason_len[c];
}

/* ---- log records ------------------------------------------------------- */

/* Is the record's reason the standard one of its own type (stored as the
 * type byte's bit 6, BL_REC_STD_REASON, with no reason bytes)? */
static int std_own_reason(const bl_record *r)
{
    return r->type < BL_STD_REASONS && r->reason_len != 0 &&
           reason_code(r->reason, r->reason_len) == (unsigned)r->type;
}

/* The reason's bytes in the encoding: none when it is its type's standard one. */
static size_t reason_bytes(const bl_record *r) { return std_own_reason(r) ? 0 : r->reason_len; }

/* lsn - prev_lsn, or 0 for a key's first record */
static uint64_t prev_gap(const bl_record *r) { return r->prev_lsn ? r->lsn - r->prev_lsn : 0; }

/* An id's code in the head (2 x its length, or 1 for a UUID's 16 bytes)
 * and the bytes that follow for it; *packed gets those 16 bytes. */
static uint64_t id_code(const char *p, size_t n, unsigned char *packed, size_t *bytes)
{
    if (n != 0 && bl_uuid_pack(p, n, packed)) {
        *bytes = BL_UUID_BYTES;
        return 1;
    }
    *bytes = n;
    return 2 * (uint64_t)n;
}

/* How r encodes: its ids' codes and stored bytes (a UUID's 16 into su and
 * ou), and the record's whole size. */
typedef struct rec_ids {
    uint64_t sc, oc;
    size_t sb, ob;
    unsigned char su[BL_UUID_BYTES], ou[BL_UUID_BYTES];
} rec_ids;

static size_t record_layout(const bl_record *r, rec_ids *x)
{
    x->sc = id_code(r->sid, r->sid_len, x->su, &x->sb);
    x->oc = id_code(r->other, r->other_len, x->ou, &x->ob);
    return 2 + bl_varint_size(r->lsn) + bl_varint_size(bl_zigzag(r->time_ms)) +
           bl_varint_size(r->generation) + bl_varint_size(prev_gap(r)) +
           bl_varint_size(r->key_len) + bl_varint_size(x->sc) + bl_varint_size(x->oc) +
           bl_varint_size(reason_bytes(r)) + bl_varint_size(r->origin_len) + r->key_len +
           x->sb + x->ob + reason_bytes(r) + r->origin_len + BL_RECORD_CHECKSUM;
}

size_t bl_record_size(const bl_record *r)
{
    rec_ids x;
    return record_layout(r, &x);
}

size_t bl_record_room(const bl_record *r)
{
    return 2 + bl_varint_size(r->lsn) + bl_varint_size(bl_zigzag(r->time_ms)) +
           bl_varint_size(r->generation) + bl_varint_size(prev_gap(r)) +
           bl_varint_size(r->key_len) + bl_varint_size(2 * (uint64_t)r->sid_len) +
           bl_varint_size(2 * (uint64_t)r->other_len) + bl_varint_size(reason_bytes(r)) +
           bl_varint_size(r->origin_len) + r->key_len + r->sid_len + r->other_len +
           reason_bytes(r) + r->origin_len + BL_RECORD_CHECKSUM;
}

/*
 * Field rules shared by the encoder and the decoder, so that the two can
 * never disagree on what a valid record is.
 */
static int record_fields_ok(const bl_record *r)
{
    if (r->lsn == 0 || r->lsn > BINDLOG_LSN_MAX || r->prev_lsn >= r->lsn ||
        !bl_valid_time(r->time_ms) ||
        r->type < BINDLOG_EVENT_BIND || r->type >= BINDLOG_EVENT_COUNT)
        return 0;
    if ((r->flags & ~(unsigned)BL_REC_FLAGS_KNOWN) != 0)
        return 0;
    /* Only a routed message's BIND or NEW_SESSION sets activity by flag (a
     * ROUTE record does by its type). */
    if ((r->flags & BL_REC_ACTIVITY) != 0 && r->type != BINDLOG_EVENT_BIND &&
        r->type != BINDLOG_EVENT_NEW_SESSION)
        return 0;
    /* Origin bytes without the flag would be invisible to readers. */
    if (!(r->flags & BL_REC_ORIGIN) && r->origin_len != 0)
        return 0;
    return bl_valid_key(r->key, r->key_len) && valid_opt_id(r->sid, r->sid_len) &&
           valid_opt_id(r->other, r->other_len) && bl_valid_reason(r->reason, r->reason_len) &&
           valid_origin(r->origin, r->origin_len);
}

size_t bl_record_encode(const bl_record *r, void *buf, size_t cap)
{
    if (!record_fields_ok(r))
        return 0;
    rec_ids x;
    size_t n = record_layout(r, &x);
    if (buf == NULL || cap < n)
        return 0;
    unsigned char *b = buf;
    b[0] = BINDLOG_RECORD_VERSION;
    int std = std_own_reason(r);
    b[1] = (unsigned char)(r->type | r->flags << 4 | (std ? BL_REC_STD_REASON << 4 : 0));
    size_t pos = 2;
    pos += bl_varint_put(b + pos, r->lsn);
    pos += bl_varint_put(b + pos, bl_zigzag(r->time_ms));
    pos += bl_varint_put(b + pos, r->generation);
    pos += bl_varint_put(b + pos, prev_gap(r));
    pos += bl_varint_put(b + pos, r->key_len);
    pos += bl_varint_put(b + pos, x.sc);
    pos += bl_varint_put(b + pos, x.oc);
    pos += bl_varint_put(b + pos, std ? 0 : r->reason_len);
    pos += bl_varint_put(b + pos, r->origin_len);
    put_bytes(b, &pos, r->key, r->key_len);
    put_bytes(b, &pos, x.sc == 1 ? (const void *)x.su : r->sid, x.sb);
    put_bytes(b, &pos, x.oc == 1 ? (const void *)x.ou : r->other, x.ob);
    put_bytes(b, &pos, r->reason, std ? 0 : r->reason_len);
    put_bytes(b, &pos, r->origin, r->origin_len);
    bl_put64(b + pos, XXH3_64bits(b, pos));
    return n;
}

static int same_bytes(const void *a, size_t an, const void *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

int bl_record_same(const bl_record *a, const bl_record *b)
{
    if (a->version >= 2 && b->version >= 2 && a->prev_lsn != b->prev_lsn)
        return 0;
    return a->lsn == b->lsn && a->time_ms == b->time_ms && a->generation == b->generation &&
           a->type == b->type && a->flags == b->flags &&
           same_bytes(a->key, a->key_len, b->key, b->key_len) &&
           same_bytes(a->sid, a->sid_len, b->sid, b->sid_len) &&
           same_bytes(a->other, a->other_len, b->other, b->other_len) &&
           same_bytes(a->reason, a->reason_len, b->reason, b->reason_len) &&
           same_bytes(a->origin, a->origin_len, b->origin, b->origin_len);
}

/* 1 if the last 8 bytes are the checksum of everything before them. */
static int checksum_ok(const unsigned char *b, size_t len)
{
    size_t body = len - BL_RECORD_CHECKSUM;
    return XXH3_64bits(b, body) == bl_get64(b + body);
}

/* A version-4 id code: the bytes stored for it and whether they are a
 * UUID's 16.  0, or -1 for a code no encoder writes. */
static int id_bytes(uint64_t code, size_t *len, int *uuid)
{
    *uuid = code == 1;
    if (code == 1) {
        *len = BL_UUID_BYTES;
        return 0;
    }
    if ((code & 1) != 0 || code / 2 > BINDLOG_ID_MAX)
        return -1;
    *len = (size_t)(code / 2);
    return 0;
}

/* The head of versions 3 and 4: the type-and-flags byte and nine varints,
 * read within [b+2, b+end).  Returns the offset of the key, or 0.  For
 * version 4, sid_len and other_len are the bytes stored, and uuid[i] says
 * whether they are a UUID's 16. */
static size_t parse_head_v3(const unsigned char *b, size_t end, bl_record *r, int uuid[2])
{
    uint64_t v[9];
    size_t pos = 2;
    if (end < 2)
        return 0;
    for (int i = 0; i < 9; i++) {
        size_t n = bl_varint_get(b + pos, end - pos, &v[i]);
        if (n == 0)
            return 0;
        pos += n;
    }
    r->type = b[1] & 0x0f;
    r->flags = b[1] >> 4;
    r->lsn = v[0];
    r->time_ms = bl_unzigzag(v[1]);
    r->generation = v[2];
    /* a gap of 0 is "none"; a gap of the LSN itself (a previous record 0)
     * or above it (it would wrap) is damage: prev_lsn = lsn, which
     * record_fields_ok refuses (prev_lsn >= lsn) */
    r->prev_lsn = v[3] == 0 ? 0 : v[3] < v[0] ? v[0] - v[3] : v[0];
    if (v[4] > BINDLOG_KEY_MAX || v[7] > BINDLOG_REASON_MAX || v[8] > BINDLOG_ORIGIN_MAX)
        return 0;
    r->key_len = (size_t)v[4];
    if (b[0] >= 4) {
        if (id_bytes(v[5], &r->sid_len, &uuid[0]) != 0 ||
            id_bytes(v[6], &r->other_len, &uuid[1]) != 0)
            return 0;
    } else {
        if (v[5] > BINDLOG_ID_MAX || v[6] > BINDLOG_ID_MAX)
            return 0;
        r->sid_len = (size_t)v[5];
        r->other_len = (size_t)v[6];
        uuid[0] = uuid[1] = 0;
    }
    r->reason_len = (size_t)v[7];
    r->origin_len = (size_t)v[8];
    return pos;
}

/* Version 4's ids: a UUID's 16 bytes become its text in r->id_text; an id
 * stored as text must not be one a UUID's bytes would have stood for. */
static int parse_ids(bl_record *r, const int uuid[2])
{
    const char **p[2] = {&r->sid, &r->other};
    size_t *n[2] = {&r->sid_len, &r->other_len};
    unsigned char u[BL_UUID_BYTES];
    for (int i = 0; i < 2; i++) {
        if (uuid[i]) {
            bl_uuid_text((const unsigned char *)*p[i], r->id_text[i]);
            *p[i] = r->id_text[i];
            *n[i] = BL_UUID_TEXT;
        } else if (bl_uuid_pack(*p[i], *n[i], u)) {
            return -1;
        }
    }
    return 0;
}

/*
 * Read the head and point the strings into b.  The lengths are summed in
 * 64 bits (origin_len alone may be 4 GiB in versions 1 and 2) and must add
 * up to exactly len: anything short or trailing is damage, not slack.
 */
static int record_parse(const unsigned char *b, size_t len, bl_record *r)
{
    size_t fixed;
    int uuid[2] = {0, 0};
    r->version = b[0];
    if (b[0] >= 3) {
        if ((fixed = parse_head_v3(b, len - BL_RECORD_CHECKSUM, r, uuid)) == 0)
            return BINDLOG_ECORRUPT;
    } else {
        fixed = bl_record_fixed(b[0]);
        if (len < fixed + BL_RECORD_CHECKSUM)
            return BINDLOG_ECORRUPT;
        r->prev_lsn = b[0] >= 2 ? bl_get64(b + 37) : 0;
        r->type = b[1];
        r->flags = bl_get16(b + 2);
        r->lsn = bl_get64(b + 4);
        r->time_ms = (int64_t)bl_get64(b + 12);
        r->generation = bl_get64(b + 20);
        r->key_len = bl_get16(b + 28);
        r->sid_len = b[30];
        r->other_len = b[31];
        r->reason_len = b[32];
        r->origin_len = bl_get32(b + 33);
    }
    uint64_t total = (uint64_t)fixed + r->key_len + r->sid_len + r->other_len + r->reason_len +
                     (uint64_t)r->origin_len + BL_RECORD_CHECKSUM;
    if (total != len)
        return BINDLOG_ECORRUPT;
    size_t pos = fixed;
    r->key = take(b, &pos, r->key_len);
    r->sid = take(b, &pos, r->sid_len);
    r->other = take(b, &pos, r->other_len);
    r->reason = take(b, &pos, r->reason_len);
    r->origin = take(b, &pos, r->origin_len);
    if (r->version >= 4 && (parse_ids(r, uuid) != 0))
        return BINDLOG_ECORRUPT;
    if (r->version >= 3) {
        /* one encoding per record: the standard reason of its type only
         * as the flag, the flag only with no reason bytes and a type that
         * has one */
        if (r->flags & BL_REC_STD_REASON) {
            if (r->reason_len != 0 || r->type < BINDLOG_EVENT_BIND || r->type >= BL_STD_REASONS)
                return BINDLOG_ECORRUPT;
            r->flags &= ~BL_REC_STD_REASON;
            std_reason_of(r->type, &r->reason, &r->reason_len);
        } else if (std_own_reason(r)) {
            return BINDLOG_ECORRUPT;
        }
    }
    return 0;
}

int bl_record_peek(const void *buf, size_t len, bl_record_head *out)
{
    const unsigned char *b = buf;
    bl_record r;
    size_t at;
    if (b == NULL || len < BL_RECORD_MIN || len > BL_RECORD_MAX || b[0] == 0 ||
        b[0] > BINDLOG_RECORD_VERSION)
        return -1;
    if (b[0] >= 3) {
        int uuid[2];
        if ((at = parse_head_v3(b, len - BL_RECORD_CHECKSUM, &r, uuid)) == 0)
            return -1;
    } else {
        at = bl_record_fixed(b[0]);
        if (len < at + BL_RECORD_CHECKSUM)
            return -1;
        r.lsn = bl_get64(b + 4);
        r.time_ms = (int64_t)bl_get64(b + 12);
        r.prev_lsn = b[0] >= 2 ? bl_get64(b + 37) : 0;
        r.key_len = bl_get16(b + 28);
    }
    if (at + r.key_len + BL_RECORD_CHECKSUM > len)
        return -1;
    out->version = b[0];
    out->lsn = r.lsn;
    out->prev_lsn = r.prev_lsn;
    out->time_ms = r.time_ms;
    out->key = b + at;
    out->key_len = r.key_len;
    return 0;
}

/* A length over the encoding's maximum is damage that must not be read:
 * the bytes behind it may not exist (a flipped length in an LMDB node runs
 * off the map).  Says so in the last-error detail. */
static int over_limit(const char *what, size_t len, size_t max)
{
    return bl_err_set(BINDLOG_ECORRUPT, "%s of %zu bytes is over the limit of %zu bytes", what,
                      len, max);
}

static int record_decode(const void *buf, size_t len, bl_record *out, int verified)
{
    const unsigned char *b = buf;
    if (len > BL_RECORD_MAX)
        return over_limit("log record", len, BL_RECORD_MAX);
    if (b == NULL || len < BL_RECORD_MIN || (!verified && !checksum_ok(b, len)))
        return BINDLOG_ECORRUPT;
    int rc = check_version(b[0], BINDLOG_RECORD_VERSION);
    if (rc != 0)
        return rc;
    bl_record r;
    rc = record_parse(b, len, &r);
    if (rc != 0)
        return rc;
    if (!verified && !record_fields_ok(&r))
        return BINDLOG_ECORRUPT;
    *out = r;
    /* ids held as UUIDs point at the copy's text, not at r's */
    if (r.sid == r.id_text[0])
        out->sid = out->id_text[0];
    if (r.other == r.id_text[1])
        out->other = out->id_text[1];
    return 0;
}

int bl_record_decode(const void *buf, size_t len, bl_record *out)
{
    return record_decode(buf, len, out, 0);
}

int bl_record_decode_verified(const void *buf, size_t len, bl_record *out)
{
    return record_decode(buf, len, out, 1);
}

/* ---- binding values ---------------------------------------------------- */

/* The LSN and time of a state value come from a record, so they obey the
 * record's limits; an LSN of 0 means "none" (a session not ended). */
static int valid_lsn(uint64_t lsn) { return lsn <= BINDLOG_LSN_MAX; }

static int bval_fields_ok(const bl_bval *v)
{
    return valid_opt_id(v->sid, v->sid_len) && valid_lsn(v->lsn) && bl_valid_time(v->updated_ms) &&
           bl_valid_time(v->last_activity_ms);
}

size_t bl_bval_size(const bl_bval *v)
{
    return 2 + bl_varint_size(v->generation) + bl_varint_size(v->lsn) +
           bl_varint_size(bl_zigzag(v->updated_ms)) +
           bl_varint_size(bl_zigzag(v->last_activity_ms)) + v->sid_len;
}

size_t bl_bval_encode(const bl_bval *v, void *buf, size_t cap)
{
    if (!bval_fields_ok(v))
        return 0;
    size_t n = bl_bval_size(v);
    if (buf == NULL || cap < n)
        return 0;
    unsigned char *b = buf;
    b[0] = BL_BVAL_VERSION;
    b[1] = (unsigned char)v->sid_len;
    size_t pos = 2;
    pos += bl_varint_put(b + pos, v->generation);
    pos += bl_varint_put(b + pos, v->lsn);
    pos += bl_varint_put(b + pos, bl_zigzag(v->updated_ms));
    pos += bl_varint_put(b + pos, bl_zigzag(v->last_activity_ms));
    put_bytes(b, &pos, v->sid, v->sid_len);
    return n;
}

size_t bl_bval_encode_v1(const bl_bval *v, void *buf, size_t cap)
{
    if (!bval_fields_ok(v))
        return 0;
    size_t n = BL_BVAL_FIXED + v->sid_len + (v->last_activity_ms != 0 ? BL_BVAL_ACTIVITY : 0);
    if (buf == NULL || cap < n)
        return 0;
    unsigned char *b = buf;
    b[0] = 1;
    b[1] = (unsigned char)v->sid_len;
    bl_put64(b + 2, v->generation);
    bl_put64(b + 10, v->lsn);
    bl_put64(b + 18, (uint64_t)v->updated_ms);
    size_t pos = BL_BVAL_FIXED;
    put_bytes(b, &pos, v->sid, v->sid_len);
    if (v->last_activity_ms != 0)
        bl_put64(b + pos, (uint64_t)v->last_activity_ms); /* format 3's trailing activity */
    return n;
}

/* n varints from b[*pos] within len into out; 0 or BINDLOG_ECORRUPT */
static int get_varints(const unsigned char *b, size_t len, size_t *pos, uint64_t *out, int n)
{
    for (int i = 0; i < n; i++) {
        size_t k = *pos <= len ? bl_varint_get(b + *pos, len - *pos, &out[i]) : 0;
        if (k == 0)
            return BINDLOG_ECORRUPT;
        *pos += k;
    }
    return 0;
}

int bl_bval_decode(const void *buf, size_t len, bl_bval *out)
{
    const unsigned char *b = buf;
    if (len > BL_BVAL_MAX)
        return over_limit("binding value", len, BL_BVAL_MAX);
    if (b == NULL || len < 2)
        return BINDLOG_ECORRUPT;
    int rc = check_version(b[0], BL_BVAL_VERSION);
    if (rc != 0)
        return rc;
    bl_bval v;
    size_t pos;
    v.sid_len = b[1];
    v.last_activity_ms = 0;
    if (b[0] == 1) {
        if (len < BL_BVAL_FIXED)
            return BINDLOG_ECORRUPT;
        v.generation = bl_get64(b + 2);
        v.lsn = bl_get64(b + 10);
        v.updated_ms = (int64_t)bl_get64(b + 18);
        pos = BL_BVAL_FIXED;
        /* format 3's last activity: 8 trailing bytes when not 0 */
        if (pos + v.sid_len + BL_BVAL_ACTIVITY == len) {
            v.last_activity_ms = (int64_t)bl_get64(b + pos + v.sid_len);
            if (v.last_activity_ms == 0)
                return BINDLOG_ECORRUPT; /* 0 is written as absent: one encoding per state */
            len -= BL_BVAL_ACTIVITY;
        }
    } else {
        uint64_t f[4];
        pos = 2;
        if (get_varints(b, len, &pos, f, 4) != 0)
            return BINDLOG_ECORRUPT;
        v.generation = f[0];
        v.lsn = f[1];
        v.updated_ms = bl_unzigzag(f[2]);
        v.last_activity_ms = bl_unzigzag(f[3]);
    }
    if (pos + v.sid_len != len)
        return BINDLOG_ECORRUPT;
    v.sid = (const char *)(b + pos);
    if (!bval_fields_ok(&v))
        return BINDLOG_ECORRUPT;
    *out = v;
    return 0;
}

/* ---- session values ---------------------------------------------------- */

/* A session value's reason bytes: none when it is a standard reason (its
 * code is in the flags byte). */
static size_t sval_reason_bytes(const bl_sval *v)
{
    return reason_code(v->reason, v->reason_len) ? 0 : v->reason_len;
}

/* ---- the sibling chain (formats 6 and 7), in versions 2 and 3 ---- */

/* The link bits of v's flags byte. */
static unsigned link_flags(const bl_sval *v)
{
    unsigned f = 0;
    if (v->child_lsn != 0)
        f |= v->child_lsn == v->ended_lsn ? BL_SVAL_F_CHILD_END : BL_SVAL_F_CHILD;
    if (v->sibling_lsn != 0)
        f |= BL_SVAL_F_SIBLING;
    return f;
}

static size_t links_size(const bl_sval *v)
{
    unsigned f = link_flags(v);
    return (f & BL_SVAL_F_CHILD ? bl_varint_size(v->child_lsn - v->created_lsn) : 0) +
           (f & BL_SVAL_F_SIBLING ? bl_varint_size(v->created_lsn - v->sibling_lsn) : 0);
}

/* A child is created after its parent, and an older sibling before the
 * session; an LSN past BINDLOG_LSN_MAX is none. */
static int links_ok(const bl_sval *v)
{
    return (v->child_lsn == 0 || (v->child_lsn > v->created_lsn && valid_lsn(v->child_lsn))) &&
           (v->sibling_lsn == 0 || v->sibling_lsn < v->created_lsn);
}

static void put_links(unsigned char *b, size_t *pos, const bl_sval *v)
{
    unsigned f = link_flags(v);
    if (f & BL_SVAL_F_CHILD)
        *pos += bl_varint_put(b + *pos, v->child_lsn - v->created_lsn);
    if (f & BL_SVAL_F_SIBLING)
        *pos += bl_varint_put(b + *pos, v->created_lsn - v->sibling_lsn);
}

/* Read the links that `flags` announce at b[*pos..len) into v, whose
 * created_lsn and ended_lsn are set: 0, or -1 for damage. */
static int get_links(const unsigned char *b, size_t len, size_t *pos, unsigned flags, bl_sval *v)
{
    uint64_t g;
    v->child_lsn = v->sibling_lsn = 0;
    if ((flags & BL_SVAL_F_CHILD_END) && (flags & BL_SVAL_F_CHILD))
        return -1;
    if (flags & BL_SVAL_F_CHILD_END) {
        if (v->ended_lsn == 0)
            return -1;
        v->child_lsn = v->ended_lsn;
    }
    if (flags & BL_SVAL_F_CHILD) {
        if (get_varints(b, len, pos, &g, 1) != 0 || g == 0 || g > BINDLOG_LSN_MAX - v->created_lsn)
            return -1;
        v->child_lsn = v->created_lsn + g;
        if (v->child_lsn == v->ended_lsn)
            return -1; /* that is F_CHILD_END's */
    }
    if (flags & BL_SVAL_F_SIBLING) {
        if (get_varints(b, len, pos, &g, 1) != 0 || g == 0 || g >= v->created_lsn)
            return -1;
        v->sibling_lsn = v->created_lsn - g;
    }
    return 0;
}

size_t bl_sval_size(const bl_sval *v)
{
    size_t rn = sval_reason_bytes(v);
    return 2 + links_size(v) + bl_varint_size(v->key_len) + bl_varint_size(v->parent_len) +
           bl_varint_size(rn) + bl_varint_size(v->origin_len) +
           bl_varint_size(v->created_lsn) + bl_varint_size(v->ended_lsn) +
           bl_varint_size(bl_zigzag(v->created_ms)) + bl_varint_size(bl_zigzag(v->ended_ms)) +
           v->key_len + v->parent_len + rn + v->origin_len;
}

static int sval_fields_ok(const bl_sval *v)
{
    return bl_valid_key(v->key, v->key_len) && valid_opt_id(v->parent, v->parent_len) &&
           bl_valid_reason(v->reason, v->reason_len) && valid_origin(v->origin, v->origin_len) &&
           valid_lsn(v->created_lsn) && valid_lsn(v->ended_lsn) &&
           bl_valid_time(v->created_ms) && bl_valid_time(v->ended_ms) && links_ok(v);
}

static void sval_strings(unsigned char *b, size_t pos, const bl_sval *v, size_t reason_len)
{
    put_bytes(b, &pos, v->key, v->key_len);
    put_bytes(b, &pos, v->parent, v->parent_len);
    put_bytes(b, &pos, v->reason, reason_len);
    put_bytes(b, &pos, v->origin, v->origin_len);
}

size_t bl_sval_encode(const bl_sval *v, void *buf, size_t cap)
{
    if (!sval_fields_ok(v) || buf == NULL || (cap < bl_sval_room(v) && cap < bl_sval_size(v)))
        return 0;
    unsigned char *b = buf;
    b[0] = 2; /* whole; version 3 is the reference form */
    unsigned code = reason_code(v->reason, v->reason_len);
    size_t rn = code ? 0 : v->reason_len;
    /* flags: bits 0..2 the standard reason's code, 3..5 the links */
    b[1] = (unsigned char)(code | link_flags(v));
    size_t pos = 2;
    pos += bl_varint_put(b + pos, v->key_len);
    pos += bl_varint_put(b + pos, v->parent_len);
    pos += bl_varint_put(b + pos, rn);
    pos += bl_varint_put(b + pos, v->origin_len);
    pos += bl_varint_put(b + pos, v->created_lsn);
    pos += bl_varint_put(b + pos, v->ended_lsn);
    pos += bl_varint_put(b + pos, bl_zigzag(v->created_ms));
    pos += bl_varint_put(b + pos, bl_zigzag(v->ended_ms));
    put_links(b, &pos, v);
    sval_strings(b, pos, v, rn);
    return pos + v->key_len + v->parent_len + rn + v->origin_len;
}

size_t bl_sval_encode_v1(const bl_sval *v, void *buf, size_t cap)
{
    if (!sval_fields_ok(v))
        return 0;
    size_t n = BL_SVAL_FIXED + v->key_len + v->parent_len + v->reason_len + v->origin_len;
    if (buf == NULL || cap < n)
        return 0;
    unsigned char *b = buf;
    b[0] = 1;
    b[1] = 0;
    bl_put16(b + 2, (uint16_t)v->key_len);
    b[4] = (unsigned char)v->parent_len;
    b[5] = (unsigned char)v->reason_len;
    bl_put32(b + 6, (uint32_t)v->origin_len);
    bl_put64(b + 10, v->created_lsn);
    bl_put64(b + 18, v->ended_lsn);
    bl_put64(b + 26, (uint64_t)v->created_ms);
    bl_put64(b + 34, (uint64_t)v->ended_ms);
    sval_strings(b, BL_SVAL_FIXED, v, v->reason_len);
    return n;
}

int bl_sval_same_v1(const bl_sval *a, const bl_sval *b)
{
    /* the fields bl_sval_encode_v1 writes, lengths then bytes, in its order */
    return sval_fields_ok(a) && sval_fields_ok(b) && a->created_lsn == b->created_lsn &&
           a->ended_lsn == b->ended_lsn && a->created_ms == b->created_ms &&
           a->ended_ms == b->ended_ms && same_bytes(a->key, a->key_len, b->key, b->key_len) &&
           same_bytes(a->parent, a->parent_len, b->parent, b->parent_len) &&
           same_bytes(a->reason, a->reason_len, b->reason, b->reason_len) &&
           same_bytes(a->origin, a->origin_len, b->origin, b->origin_len);
}

/* Version 3, the reference form: version, flags (the end reason's code),
 * then created_lsn, the gap to ended_lsn (0: live), the zigzagged end time
 * and the reason's length, then the reason. */
size_t bl_sval_ref_size(const bl_sval *v)
{
    size_t rn = sval_reason_bytes(v);
    uint64_t gap = v->ended_lsn ? v->ended_lsn - v->created_lsn : 0;
    return 2 + bl_varint_size(v->created_lsn) + bl_varint_size(gap) +
           bl_varint_size(bl_zigzag(v->ended_ms)) + bl_varint_size(rn) + links_size(v) + rn;
}

/* What a reference value must satisfy on its own (the rest is the
 * record's, checked by bl_sval_resolve). */
static int sval_ref_fields_ok(const bl_sval *v)
{
    return bl_valid_reason(v->reason, v->reason_len) && valid_lsn(v->created_lsn) &&
           v->created_lsn != 0 && valid_lsn(v->ended_lsn) &&
           (v->ended_lsn == 0 || v->ended_lsn > v->created_lsn) && bl_valid_time(v->ended_ms) &&
           (v->ended_lsn != 0 || (v->ended_ms == 0 && v->reason_len == 0)) && links_ok(v);
}

size_t bl_sval_encode_ref(const bl_sval *v, void *buf, size_t cap)
{
    if (!v->ref || !sval_ref_fields_ok(v))
        return 0;
    size_t n = bl_sval_ref_size(v);
    if (buf == NULL || cap < n)
        return 0;
    unsigned char *b = buf;
    unsigned code = reason_code(v->reason, v->reason_len);
    size_t rn = code ? 0 : v->reason_len;
    size_t pos = 2;
    b[0] = 3;
    b[1] = (unsigned char)(code | link_flags(v));
    pos += bl_varint_put(b + pos, v->created_lsn);
    pos += bl_varint_put(b + pos, v->ended_lsn ? v->ended_lsn - v->created_lsn : 0);
    pos += bl_varint_put(b + pos, bl_zigzag(v->ended_ms));
    pos += bl_varint_put(b + pos, rn);
    put_links(b, &pos, v);
    put_bytes(b, &pos, v->reason, rn);
    return n;
}

/* A session value's end reason from its flags' code (versions 2 and 3):
 * one encoding per value, a standard reason only by its code.  0, or -1
 * for damage. */
static int sval_reason(unsigned code, bl_sval *v)
{
    if (code != 0) {
        if (v->reason_len != 0)
            return -1;
        std_reason_of(code, &v->reason, &v->reason_len);
        return 0;
    }
    return reason_code(v->reason, v->reason_len) != 0 ? -1 : 0;
}

static int sval_parse_ref(const unsigned char *b, size_t len, unsigned code, unsigned links,
                          bl_sval *out)
{
    size_t pos = 2;
    uint64_t f[4];
    bl_sval v;

    if (get_varints(b, len, &pos, f, 4) != 0 || f[3] > BINDLOG_REASON_MAX ||
        f[0] > BINDLOG_LSN_MAX || f[1] > BINDLOG_LSN_MAX - f[0])
        return BINDLOG_ECORRUPT;
    memset(&v, 0, sizeof v);
    v.ref = 1;
    v.created_lsn = f[0];
    v.ended_lsn = f[1] ? f[0] + f[1] : 0;
    if (get_links(b, len, &pos, links, &v) != 0 || (uint64_t)pos + f[3] != len)
        return BINDLOG_ECORRUPT;
    v.ended_ms = bl_unzigzag(f[2]);
    v.reason_len = (size_t)f[3];
    v.reason = take(b, &pos, v.reason_len);
    if (sval_reason(code, &v) != 0)
        return BINDLOG_ECORRUPT;
    *out = v;
    return 0;
}

int bl_sval_resolve(bl_sval *v, const char *id, size_t id_len, const bl_record *rec)
{
    char q[BL_ERR_QUOTE_MAX];

    if (!v->ref)
        return 0;
    if (rec->lsn != v->created_lsn)
        return bl_err_set(BINDLOG_ECORRUPT,
                          "session '%s' refers to the record at LSN %" PRIu64
                          ", and was handed the one at LSN %" PRIu64,
                          bl_err_bytes(q, sizeof q, id, id_len), v->created_lsn, rec->lsn);
    if ((rec->type != BINDLOG_EVENT_BIND && rec->type != BINDLOG_EVENT_NEW_SESSION &&
         rec->type != BINDLOG_EVENT_SPLIT) ||
        rec->sid_len != id_len || memcmp(rec->sid, id, id_len) != 0)
        return bl_err_set(BINDLOG_ECORRUPT,
                          "session '%s' refers to the record at LSN %" PRIu64
                          " as its creation, which does not create it",
                          bl_err_bytes(q, sizeof q, id, id_len), v->created_lsn);
    if (v->ended_lsn != 0 && v->ended_ms < rec->time_ms)
        return bl_err_set(BINDLOG_ECORRUPT,
                          "session '%s' ends at a time before its creation (LSN %" PRIu64 ")",
                          bl_err_bytes(q, sizeof q, id, id_len), v->created_lsn);
    v->key = rec->key;
    v->key_len = rec->key_len;
    if (rec->type == BINDLOG_EVENT_BIND) {
        v->parent = "";
        v->parent_len = 0;
    } else if (rec->other == rec->id_text[1]) {
        /* a UUID the decoder wrote into the record: the value keeps its own copy */
        memcpy(v->parent_text, rec->other, BL_UUID_TEXT);
        v->parent = v->parent_text;
        v->parent_len = BL_UUID_TEXT;
    } else {
        v->parent = rec->other;
        v->parent_len = rec->other_len;
    }
    if (rec->flags & BL_REC_ORIGIN) {
        v->origin = rec->origin;
        v->origin_len = rec->origin_len;
    } else {
        v->origin = "";
        v->origin_len = 0;
    }
    v->created_ms = rec->time_ms;
    return 0;
}

int bl_sval_take_creation(bl_sval *v, const bl_sval *from)
{
    if (from->key == NULL || from->created_lsn != v->created_lsn)
        return -1;
    v->key = from->key;
    v->key_len = from->key_len;
    if (from->parent == from->parent_text) {
        memcpy(v->parent_text, from->parent_text, BL_UUID_TEXT);
        v->parent = v->parent_text;
    } else {
        v->parent = from->parent;
    }
    v->parent_len = from->parent_len;
    v->origin = from->origin;
    v->origin_len = from->origin_len;
    v->created_ms = from->created_ms;
    return 0;
}

int bl_sval_read(const void *buf, size_t len, const char *id, size_t id_len, bl_ref_fn get,
                 void *ctx, bl_sval *out)
{
    char q[BL_ERR_QUOTE_MAX];
    const void *rv = NULL;
    size_t rn = 0;
    bl_record rec;
    bl_sval base;
    int rc = bl_sval_decode_any(buf, len, out);

    if (rc != 0 || out->key != NULL)
        return rc; /* whole (a marked one included): nothing to resolve */
    if (get == NULL)
        return bl_err_set(BINDLOG_ECORRUPT,
                          "session '%s' has a value that refers to the log where only whole "
                          "values belong",
                          bl_err_bytes(q, sizeof q, id, id_len));
    rc = get(ctx, BL_REF_RECORD, out->created_lsn, id, id_len, &rv, &rn);
    if (rc == 0 || rc == BL_REF_VERIFIED) {
        rc = rc == BL_REF_VERIFIED ? bl_record_decode_verified(rv, rn, &rec)
                                   : bl_record_decode(rv, rn, &rec);
        if (rc == BINDLOG_ECORRUPT || rc == BINDLOG_EVERSION)
            return bl_err_set(BINDLOG_ECORRUPT,
                              "session '%s' refers to the record at LSN %" PRIu64
                              ", which is damaged",
                              bl_err_bytes(q, sizeof q, id, id_len), out->created_lsn);
        return rc != 0 ? rc : bl_sval_resolve(out, id, id_len, &rec);
    }
    if (rc != BINDLOG_ENOTFOUND)
        return rc;
    /* compacted: the base image holds the session whole, with the mark */
    rc = get(ctx, BL_REF_BASE, out->created_lsn, id, id_len, &rv, &rn);
    if (rc == 0 && bl_sval_decode(rv, rn, &base) == 0 && base.ref &&
        bl_sval_take_creation(out, &base) == 0)
        return 0;
    if (rc != 0 && rc != BINDLOG_ENOTFOUND)
        return rc;
    return bl_err_set(BINDLOG_ECORRUPT,
                      "session '%s' refers to the record at LSN %" PRIu64
                      ", which neither the log nor the base image holds",
                      bl_err_bytes(q, sizeof q, id, id_len), out->created_lsn);
}

size_t bl_sval_encode_base(const bl_sval *v, void *buf, size_t cap)
{
    size_t n = bl_sval_encode(v, buf, cap);
    if (n != 0 && v->ref)
        ((unsigned char *)buf)[1] |= BL_SVAL_F_REF;
    return n;
}

size_t bl_sval_encode_store(const bl_sval *v, void *buf, size_t cap)
{
    return v->ref ? bl_sval_encode_ref(v, buf, cap) : bl_sval_encode(v, buf, cap);
}

/* Lengths and layout only; the byte rules of the fields are left out. */
static int sval_parse(const void *buf, size_t len, bl_sval *out)
{
    const unsigned char *b = buf;
    if (len > BL_SVAL_MAX)
        return over_limit("session value", len, BL_SVAL_MAX);
    if (b == NULL || len < 2)
        return BINDLOG_ECORRUPT;
    int rc = check_version(b[0], BL_SVAL_VERSION);
    if (rc != 0)
        return rc;
    /* versions 2 and 3: bits 0..2 a standard reason's code (1..5), 3..5
     * the links, 7 (version 2) the mark, the rest reserved; version 1: no
     * flags */
    unsigned code = b[1];
    unsigned flag_ref = b[0] == 2 && (code & BL_SVAL_F_REF);
    unsigned links = b[0] == 1 ? 0 : code & BL_SVAL_F_LINKS;
    code &= ~(BL_SVAL_F_REF | BL_SVAL_F_LINKS);
    if (b[0] == 1 ? b[1] != 0 : code >= BL_STD_REASONS)
        return BINDLOG_ECORRUPT;
    if (b[0] == 3 && (b[1] & BL_SVAL_F_REF))
        return BINDLOG_ECORRUPT;
    if (b[0] == 3)
        return sval_parse_ref(b, len, code, links, out);
    bl_sval v;
    size_t pos;
    uint64_t f[8];
    v.ref = flag_ref;
    v.child_lsn = v.sibling_lsn = 0;
    if (b[0] == 1) {
        if (len < BL_SVAL_FIXED)
            return BINDLOG_ECORRUPT;
        f[0] = bl_get16(b + 2);
        f[1] = b[4];
        f[2] = b[5];
        f[3] = bl_get32(b + 6);
        f[4] = bl_get64(b + 10);
        f[5] = bl_get64(b + 18);
        f[6] = bl_zigzag((int64_t)bl_get64(b + 26));
        f[7] = bl_zigzag((int64_t)bl_get64(b + 34));
        pos = BL_SVAL_FIXED;
    } else {
        pos = 2;
        if (get_varints(b, len, &pos, f, 8) != 0 || f[0] > BINDLOG_KEY_MAX ||
            f[1] > BINDLOG_ID_MAX || f[2] > BINDLOG_REASON_MAX || f[3] > BINDLOG_ORIGIN_MAX)
            return BINDLOG_ECORRUPT;
        v.created_lsn = f[4];
        v.ended_lsn = f[5];
        if (get_links(b, len, &pos, links, &v) != 0)
            return BINDLOG_ECORRUPT;
    }
    v.key_len = (size_t)f[0];
    v.parent_len = (size_t)f[1];
    v.reason_len = (size_t)f[2];
    v.origin_len = (size_t)f[3];
    uint64_t total = (uint64_t)pos + v.key_len + v.parent_len + v.reason_len + f[3];
    if (total != len)
        return BINDLOG_ECORRUPT;
    v.created_lsn = f[4];
    v.ended_lsn = f[5];
    v.created_ms = bl_unzigzag(f[6]);
    v.ended_ms = bl_unzigzag(f[7]);
    v.key = take(b, &pos, v.key_len);
    v.parent = take(b, &pos, v.parent_len);
    v.reason = take(b, &pos, v.reason_len);
    v.origin = take(b, &pos, v.origin_len);
    if (b[0] >= 2 && sval_reason(code, &v) != 0)
        return BINDLOG_ECORRUPT;
    *out = v;
    return 0;
}

int bl_sval_decode_any(const void *buf, size_t len, bl_sval *out)
{
    bl_sval v;
    int rc = sval_parse(buf, len, &v);
    if (rc != 0)
        return rc;
    /* a reference (version 3) has only its own fields; a whole value,
     * marked or not, all of them */
    if (v.key == NULL ? !sval_ref_fields_ok(&v) : !sval_fields_ok(&v))
        return BINDLOG_ECORRUPT;
    *out = v;
    return 0;
}

int bl_sval_decode(const void *buf, size_t len, bl_sval *out)
{
    bl_sval v;
    int rc = bl_sval_decode_any(buf, len, &v);
    if (rc == 0 && v.key == NULL)
        return BINDLOG_ECORRUPT; /* a reference outside a store's sessions table */
    if (rc == 0)
        *out = v;
    return rc;
}

int bl_sval_decode_trusted(const void *buf, size_t len, bl_sval *out)
{
    return sval_parse(buf, len, out);
}
