/*
 * record.h -- byte encodings of log records and state values.
 *
 * Pure functions, no I/O, no allocation: the LMDB store, replay, export and
 * the fuzzers all go through them.  Every byte is specified in
 * docs/format.md.  Decoders validate every length against the buffer, never
 * read past its end and return BINDLOG_ECORRUPT (or BINDLOG_EVERSION for a
 * newer version byte) for anything that does not parse; decoded pointers
 * point into the input buffer and live as long as it does.
 */
#ifndef BL_RECORD_H
#define BL_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "bindlog.h"

/* ---- little-endian helpers (shared by every encoder in src/) ----------- */
static inline void bl_put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static inline void bl_put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static inline void bl_put64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static inline uint16_t bl_get16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t bl_get32(const unsigned char *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = (v << 8) | p[i]; return v; }
static inline uint64_t bl_get64(const unsigned char *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = (v << 8) | p[i]; return v; }
/* Big-endian 64-bit, used only for LMDB keys so that byte order is LSN order. */
static inline void bl_put64be(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (56 - 8 * i)); }
static inline uint64_t bl_get64be(const unsigned char *p) { uint64_t v = 0; for (int i = 0; i < 8; i++) v = (v << 8) | p[i]; return v; }

/* ---- log records --------------------------------------------------------- */

/* flags of a record */
#define BL_REC_ORIGIN 0x01u /* the event carried an origin (possibly empty) */
/* A routed message's event (bindlog_route's CREATED or RESET, an import
 * carrying the gateway's last update): the key's last activity becomes the
 * record's time_ms.  A ROUTE record sets it by its type alone. */
#define BL_REC_ACTIVITY 0x02u
#define BL_REC_FLAGS_KNOWN (BL_REC_ORIGIN | BL_REC_ACTIVITY)
/* Version 3's type byte, bit 6: the reason is the standard one of the
 * record's type (record.c's frozen table), stored without its bytes.  An
 * encoding detail: the encoder sets it and the decoder takes it off again,
 * so a decoded record's flags never carry it and its reason is the text. */
#define BL_REC_STD_REASON 0x04u
/* Standard reasons: codes 1..5, one per event type BIND..UNBIND. */
#define BL_STD_REASONS 6

/* Fixed part of a record (version 2): version(1) type(1) flags(2) lsn(8)
 * time(8) gen(8) key_len(2) sid_len(1) other_len(1) reason_len(1)
 * origin_len(4) prev_lsn(8) = 45 bytes, then the five byte strings, then the
 * 8-byte checksum.  Version 1 (formats 1 and 2, older export streams) is the
 * same without prev_lsn: a 37-byte fixed part. */
#define BL_RECORD_FIXED_V1 37
#define BL_RECORD_FIXED 45
#define BL_RECORD_CHECKSUM 8
/* Version 3 (format 4) has no fixed part: a version byte, a type-and-flags
 * byte, then nine varints (docs/format.md).  Its largest head is 47 bytes
 * (an LSN near 2^63, a time in year 9999, a generation near 2^64), two more
 * than version 2's fixed part: the limit is the larger of the two. */
#define BL_RECORD_HEAD_MAX 47
#define BL_RECORD_MAX \
    (BL_RECORD_HEAD_MAX + BINDLOG_KEY_MAX + 2 * BINDLOG_ID_MAX + BINDLOG_REASON_MAX + \
     BINDLOG_ORIGIN_MAX + BL_RECORD_CHECKSUM)

/* The fixed part of a record of version 1 or 2 whose version byte is v
 * (the key starts right after it).  Version 3 has none: bl_record_peek(). */
static inline size_t bl_record_fixed(unsigned v) { return v >= 2 ? BL_RECORD_FIXED : BL_RECORD_FIXED_V1; }

/* ---- varints (records of version 3, state values of version 2) --------- */

/* LEB128: seven bits a byte, least significant first, the high bit set on
 * every byte but the last.  At most 10 bytes for a u64. */
#define BL_VARINT_MAX 10
static inline size_t bl_varint_size(uint64_t v)
{
#if defined(__GNUC__) || defined(__clang__)
    /* 7 bits a byte: the bits v needs, rounded up to sevens */
    return v < 0x80 ? 1 : (size_t)(64 - __builtin_clzll(v) + 6) / 7;
#else
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
#endif
}
static inline size_t bl_varint_put(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (unsigned char)v;
    return n;
}
/* Read one varint of at most `avail` bytes.  Returns the bytes it took, or
 * 0 if it is cut short, longer than 10 bytes, over 64 bits, or not in its
 * shortest form (a last byte of 0 after others): one value, one encoding. */
static inline size_t bl_varint_get(const unsigned char *p, size_t avail, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < avail && i < BL_VARINT_MAX; i++) {
        uint64_t b = p[i] & 0x7f;
        if (i == 9 && p[i] > 1)
            return 0; /* bits beyond 64 */
        v |= b << (7 * i);
        if (!(p[i] & 0x80)) {
            if (i > 0 && p[i] == 0)
                return 0; /* not the shortest form */
            *out = v;
            return i + 1;
        }
    }
    return 0;
}
/* Signed values (times) zigzag-mapped first: small magnitudes stay short. */
static inline uint64_t bl_zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (0 - ((uint64_t)v >> 63));
}
static inline int64_t bl_unzigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

/*
 * The head of a record read without verifying it: its version, LSN, time,
 * previous LSN of its key and where its key lies.  For scans that sort or
 * place records before decoding them (import, bulk replay, recover); the
 * record is still decoded (checksum first) before any of it is trusted.
 * Returns 0 when the head parses and the key lies inside [buf, buf+len-8),
 * else -1.
 */
typedef struct bl_record_head {
    unsigned version;
    uint64_t lsn, prev_lsn;
    int64_t time_ms;
    const unsigned char *key;
    size_t key_len;
} bl_record_head;
int bl_record_peek(const void *buf, size_t len, bl_record_head *out);

/* Fixed parts and largest encodings of the state values (docs/format.md).
 * A length from a store or a stream is compared with these before a single
 * byte past the fixed part is read: a damaged page can hand back any length,
 * and hashing or copying one that runs off the map is a crash, not an error. */
#define BL_BVAL_FIXED 26
/* Version 1 as format 3 left it: a binding with a last activity carries it
 * as 8 trailing bytes after the session id (absent = 0). */
#define BL_BVAL_ACTIVITY 8
/* version 2's largest head: version, sid_len, varints of a u64 generation,
 * an LSN and two zigzagged times (10 + 9 + 7 + 7) */
#define BL_BVAL_HEAD_MAX 35
#define BL_BVAL_MAX (BL_BVAL_HEAD_MAX + BINDLOG_ID_MAX)
#define BL_SVAL_FIXED 42
/* the two link varints of versions 2 and 3 (formats 6 and 7), 9 bytes each at most */
#define BL_SVAL_LINKS_MAX 18
#define BL_SVAL_MAX                                                                              \
    (BL_SVAL_FIXED + BL_SVAL_LINKS_MAX + BINDLOG_KEY_MAX + BINDLOG_ID_MAX + BINDLOG_REASON_MAX +   \
     BINDLOG_ORIGIN_MAX)

/*
 * A log record, decoded.  Strings are byte ranges (not NUL-terminated) that
 * point into the buffer they were decoded from, or into the caller's memory
 * when encoding.
 */
/* A UUID's canonical text, 8-4-4-4-12 lower-case hex digits, and its 16
 * bytes.  bl_uuid_pack: 1 and the bytes when p..p+n is that text exactly
 * (an upper-case one is not: its bytes would not give it back), else 0
 * (out is then undefined).  bl_uuid_text: the text of 16 bytes, not
 * NUL-terminated. */
#define BL_UUID_TEXT 36
#define BL_UUID_BYTES 16
int bl_uuid_pack(const char *p, size_t n, unsigned char out[BL_UUID_BYTES]);
void bl_uuid_text(const unsigned char in[BL_UUID_BYTES], char out[BL_UUID_TEXT]);

typedef struct bl_record {
    unsigned version;    /* decoded: the record's version; encode writes the current one */
    uint64_t lsn;
    /* The LSN of the previous record of the same key (0: this is the key's
     * first).  Version 2 on: it chains a key's history through the log.  A
     * version-1 record does not carry it (decoded as 0, and bl_record_same()
     * ignores it). */
    uint64_t prev_lsn;
    int64_t time_ms;
    uint64_t generation; /* the key's generation after the event */
    unsigned type;       /* BINDLOG_EVENT_* */
    unsigned flags;      /* BL_REC_* */
    const char *key;
    size_t key_len;
    const char *sid;     /* binding after the event (UNBIND: the ended session) */
    size_t sid_len;
    const char *other;   /* BIND/NEW_SESSION: previous binding; SPLIT: parent */
    size_t other_len;
    const char *reason;
    size_t reason_len;
    const void *origin;
    size_t origin_len;
    /* Version 4 keeps an id that is a UUID in its canonical lower-case
     * text as its 16 bytes (bl_uuid_pack).  Decoding writes such an id's
     * text here and points sid or other at it, so a decoded bl_record is
     * not only a view of its input: sid and other may live only as long as
     * this struct, and a copy of it points into the original's. */
    char id_text[2][BL_UUID_TEXT];
} bl_record;

/* Bytes bl_record_encode() will write for r. */
size_t bl_record_size(const bl_record *r);

/* Bytes enough for bl_record_encode(r), at least bl_record_size(r): its
 * size with every id as text, without looking for UUIDs (the write path
 * reserves this much and then encodes, reading each id once). */
size_t bl_record_room(const bl_record *r);

/*
 * Encode r into buf (cap bytes), checksum last.  Returns the number of bytes
 * written, or 0 if cap is too small or a field exceeds its limit (a
 * programming error upstream: the machine validates first).
 */
size_t bl_record_encode(const bl_record *r, void *buf, size_t cap);

/*
 * Decode exactly len bytes.  Returns 0, BINDLOG_ECORRUPT (bad length,
 * checksum, unknown type, reserved flag bits set, field over its limit,
 * trailing bytes, an LSN above BINDLOG_LSN_MAX, a time outside
 * BINDLOG_TIME_MIN_MS..BINDLOG_TIME_MAX_MS) or BINDLOG_EVERSION (version
 * byte newer than BINDLOG_RECORD_VERSION).  A len over BL_RECORD_MAX is
 * refused before any byte is read (with a last-error detail, error.h);
 * then the checksum is checked before anything else is trusted.
 */
int bl_record_decode(const void *buf, size_t len, bl_record *out);
/* bl_record_decode() for bytes whose integrity this process has checked
 * already: a record it encoded itself, or one inside a log frame whose
 * checksum it verified when the frame came in (the write path's view of
 * the log's tail).  Lengths, layout and version are still checked, so no
 * byte outside buf is read; the record's own checksum and the byte rules
 * of its fields (checked when it was encoded, and covered by the frame's
 * checksum since) are not. */
int bl_record_decode_verified(const void *buf, size_t len, bl_record *out);

/* 1 if two records have the same fields (so that both encode, in the same
 * version, to the same bytes), else 0.  prev_lsn counts only when both
 * records carry it (version 2 and later): a version-1 record read from an
 * old stream or etcd store still matches its re-derivation. */
int bl_record_same(const bl_record *a, const bl_record *b);

/* ---- state values (the materialised tables) ------------------------------ */

/* A binding value.  sid_len 0 = tombstone. */
typedef struct bl_bval {
    const char *sid;
    size_t sid_len;
    uint64_t generation;
    uint64_t lsn;
    int64_t updated_ms;
    /* The time of the key's last routed message (bindlog_route), 0 = none.
     * Moved only by routed messages' records, never backwards. */
    int64_t last_activity_ms;
} bl_bval;

/* A session value (the id is the table key, not part of the value). */
typedef struct bl_sval {
    const char *key;
    size_t key_len;
    const char *parent;
    size_t parent_len;
    uint64_t created_lsn, ended_lsn;
    int64_t created_ms, ended_ms;
    const char *reason; /* end reason */
    size_t reason_len;
    const void *origin;
    size_t origin_len;
    /* 1: the value refers to the record that created the session (version
     * 3, the sessions table of formats 5 to 7): the session's key, parent, origin and
     * creation time are that record's, not stored again.  bl_sval_decode()
     * of such a value leaves key, parent and origin NULL and created_ms 0
     * until bl_sval_resolve() fills them in from the record. */
    unsigned ref;
    /* The session's place among its parent's children (formats 6 and 7: the
     * sibling chain that replaces the children table for sessions whose
     * creating record the log holds).  child_lsn: the LSN of the record
     * that created this session's youngest child (0: none); sibling_lsn:
     * the one that created the next older child of the same parent (0:
     * none).  Both are set by the state machine and kept across ends and
     * re-opens; neither is part of the state digest (bl_sval_encode_v1). */
    uint64_t child_lsn, sibling_lsn;
    /* Where bl_sval_resolve() and bl_sval_take_creation() copy a parent
     * id that lived in a decoded record's id_text (version 4), so that the
     * value does not point into that record: parent may point here, and a
     * copy of the value then points into the original's. */
    char parent_text[BL_UUID_TEXT];
} bl_sval;

/* *dst = *src, with a parent held in src->parent_text held in
 * dst->parent_text: the copy does not depend on src living on.  Every
 * copy of a bl_sval that may outlive its source goes through here. */
static inline void bl_sval_copy(bl_sval *dst, const bl_sval *src)
{
    *dst = *src;
    if (src->parent == src->parent_text)
        dst->parent = dst->parent_text;
}

/* Encoded sizes and encoders; same contract as bl_record_encode().  The
 * decoders refuse a len over BL_BVAL_MAX / BL_SVAL_MAX before reading it. */
size_t bl_bval_size(const bl_bval *v);
size_t bl_bval_encode(const bl_bval *v, void *buf, size_t cap);
int bl_bval_decode(const void *buf, size_t len, bl_bval *out);

size_t bl_sval_size(const bl_sval *v);
/* Room that always holds v's whole encoding (version 2), each number at
 * its longest: cheaper than bl_sval_size(), for a buffer that is trimmed
 * to what bl_sval_encode() returns.  bl_sval_encode() into at least this
 * much does not compute the exact size first. */
static inline size_t bl_sval_room(const bl_sval *v)
{
    return 2 + 10 * (size_t)BL_VARINT_MAX + v->key_len + v->parent_len + v->reason_len +
           v->origin_len;
}
size_t bl_sval_encode(const bl_sval *v, void *buf, size_t cap);
/* Whole values only (versions 1 and 2, the latter with or without
 * BL_SVAL_F_REF: ref tells): a reference (version 3) is BINDLOG_ECORRUPT,
 * as it is anywhere but a sessions table of format 5 or 6. */
int bl_sval_decode(const void *buf, size_t len, bl_sval *out);
/* Any version: a reference comes back with ref 1, key NULL and only its
 * own fields (created_lsn, the end); bl_sval_read() resolves it. */
int bl_sval_decode_any(const void *buf, size_t len, bl_sval *out);
/* bl_sval_decode() without checking the fields' byte rules: only for values
 * this process encoded itself (the bulk replay's in-memory state, whole
 * values marked as below).  A reference comes back as bl_sval_decode_any()
 * gives it. */
int bl_sval_decode_trusted(const void *buf, size_t len, bl_sval *out);

/* Bit 7 of a whole value's flags (version 2): the session's value in the
 * live sessions table is a reference (v->ref).  Written in a base image
 * (whose values the references of compacted sessions resolve to, and from
 * which replay must learn each session's form) and in the bulk replay's
 * in-memory state; the live table writes the reference itself. */
#define BL_SVAL_F_REF 0x80u
/* Bits 3..5 of the flags of versions 2 and 3 (formats 6 and 7), the sibling
 * chain (bl_sval.child_lsn, sibling_lsn): F_CHILD_END, the youngest child
 * was created by the record that ended the session (child_lsn ==
 * ended_lsn, no bytes); F_CHILD, a varint child_lsn - created_lsn follows
 * the head's varints; F_SIBLING, then a varint created_lsn - sibling_lsn.
 * F_CHILD_END and F_CHILD together are damage, as is F_CHILD for a child
 * at the end (one encoding per value). */
#define BL_SVAL_F_CHILD_END 0x08u
#define BL_SVAL_F_CHILD 0x10u
#define BL_SVAL_F_SIBLING 0x20u
#define BL_SVAL_F_LINKS (BL_SVAL_F_CHILD_END | BL_SVAL_F_CHILD | BL_SVAL_F_SIBLING)
/* The whole value with the mark when v->ref: a base image's form. */
size_t bl_sval_encode_base(const bl_sval *v, void *buf, size_t cap);
/* What a live sessions table keeps: the reference form when v->ref, else
 * the whole value. */
size_t bl_sval_encode_store(const bl_sval *v, void *buf, size_t cap);

/*
 * The reference form (version 3, docs/format.md "Session values"): the
 * value of a session whose creating record the store's log still holds.
 * It keeps what changes after the creation (the end, its time and
 * reason) and the LSN of the creating record; the key, the parent, the
 * origin and the creation time are that record's.  bl_sval_can_ref() says
 * whether v is what the record at v->created_lsn yields (the machine sets
 * v->ref only for sessions it creates, whose fields come from their own
 * record); bl_sval_encode_ref() writes it (0 when v->ref is 0).
 */
/* version, flags, created_lsn, the gap to the end, the end time, the
 * reason's length (9 + 9 + 10 + 1), then the reason */
#define BL_SVAL_REF_MAX (2 + 29 + BL_SVAL_LINKS_MAX + BINDLOG_REASON_MAX)
size_t bl_sval_ref_size(const bl_sval *v);
size_t bl_sval_encode_ref(const bl_sval *v, void *buf, size_t cap);

/*
 * Fill in a decoded reference value (v->ref) from the record `rec` (decoded,
 * checksum verified) that its created_lsn names, for the session `id`:
 * the record must carry that LSN and be the event that created `id` (a
 * BIND, NEW_SESSION or SPLIT whose session is `id`), and the end must come
 * after it.  The key is the record's, the parent its `other` (none for a
 * BIND), the origin its origin (empty when it carried none), the creation
 * time its time.  Pointers go into rec's strings.  0, or BINDLOG_ECORRUPT
 * with a last-error detail naming the session and the LSN.  A value with
 * ref 0 is left as it is (0).
 */
int bl_sval_resolve(bl_sval *v, const char *id, size_t id_len, const bl_record *rec);

/* Give a reference `v` the creation of `from`, a whole value of the same
 * session (its key, parent, origin and creation time), when `from` was
 * created at v->created_lsn: 0, else -1 (nothing changed). */
int bl_sval_take_creation(bl_sval *v, const bl_sval *from);

/* Where a reader finds what a reference value names: what = BL_REF_RECORD,
 * the log's record at `lsn`; what = BL_REF_BASE, the base image's value of
 * session `id` (a session created before the base: its record was
 * compacted).  0 with *v, *n set (valid as long as the reader's
 * snapshot), BINDLOG_ENOTFOUND, or another error.  A record found in
 * memory whose integrity was checked on its way in (see
 * bl_record_decode_verified) may be returned with BL_REF_VERIFIED in place
 * of 0; a record read from the store's pages never is. */
enum { BL_REF_RECORD = 1, BL_REF_BASE = 2 };
#define BL_REF_VERIFIED 1
typedef int (*bl_ref_fn)(void *ctx, int what, uint64_t lsn, const char *id, size_t id_len,
                         const void **v, size_t *n);

/*
 * Decode a session value of a table that may hold the reference form and
 * resolve it: bl_sval_decode_any(), then, for a reference, the record at
 * its created_lsn through `get` (decoded, checksum first unless `get`
 * returned BL_REF_VERIFIED) and
 * bl_sval_resolve(); a record no longer in the log (compacted) is replaced
 * by the session's base image value, whole and marked (BL_SVAL_F_REF) with
 * the same creation.  `get` NULL: the table holds whole values only (a
 * base image, another backend), where a reference is damage.  0, or the
 * decoder's or get's error; a reference that resolves nowhere, or to
 * something that does not decode or is not its creation, is
 * BINDLOG_ECORRUPT naming the session and the LSN.
 */
int bl_sval_read(const void *buf, size_t len, const char *id, size_t id_len, bl_ref_fn get,
                 void *ctx, bl_sval *out);

/* The canonical encodings of the state digest and export streams: binding
 * and session values of version 1 (docs/format.md), whatever version the
 * store keeps.  Same contract as the encoders above. */
size_t bl_bval_encode_v1(const bl_bval *v, void *buf, size_t cap);
size_t bl_sval_encode_v1(const bl_sval *v, void *buf, size_t cap);
/* 1 when a and b both encode with bl_sval_encode_v1, to the same bytes;
 * else 0.  Neither is encoded. */
int bl_sval_same_v1(const bl_sval *a, const bl_sval *b);

/* ---- index keys (docs/format.md, "Tables") ------------------------------- */

/* history: key 0x00 be64 lsn.  out holds BINDLOG_KEY_MAX + 9 bytes. */
#define BL_HISTORY_KEY_MAX (BINDLOG_KEY_MAX + 1 + 8)
static inline size_t bl_history_key(unsigned char *out, const void *key, size_t key_len,
                                    uint64_t lsn)
{
    for (size_t i = 0; i < key_len; i++)
        out[i] = ((const unsigned char *)key)[i];
    out[key_len] = 0;
    bl_put64be(out + key_len + 1, lsn);
    return key_len + 9;
}

/* children index of the etcd backend: parent 0x00 child.  out holds
 * 2 * BINDLOG_ID_MAX + 1 bytes. */
#define BL_CHILD_KEY_MAX (2 * BINDLOG_ID_MAX + 1)
static inline size_t bl_child_key(unsigned char *out, const void *parent, size_t parent_len,
                                  const void *child, size_t child_len)
{
    for (size_t i = 0; i < parent_len; i++)
        out[i] = ((const unsigned char *)parent)[i];
    out[parent_len] = 0;
    for (size_t i = 0; i < child_len; i++)
        out[parent_len + 1 + i] = ((const unsigned char *)child)[i];
    return parent_len + 1 + child_len;
}

/* children table of an LMDB store (format 4): be64 of the parent's
 * created_lsn, then the child id.  An LSN creates at most one session, so
 * the 8 bytes name the parent as well as its id would, in 8 bytes instead
 * of up to 129; and a parent is usually recent, so the entries a
 * checkpoint inserts fall on the last pages of the table instead of all
 * over it.  out holds BL_LCHILD_KEY_MAX bytes. */
#define BL_LCHILD_KEY_MAX (8 + BINDLOG_ID_MAX)
static inline size_t bl_lchild_key(unsigned char *out, uint64_t parent_lsn, const void *child,
                                   size_t child_len)
{
    bl_put64be(out, parent_lsn);
    for (size_t i = 0; i < child_len; i++)
        out[8 + i] = ((const unsigned char *)child)[i];
    return 8 + child_len;
}

/* 1 if a session created at child_lsn is a child of a parent created at
 * parent_lsn to the children table and the sibling chain.  A parent always
 * precedes its child, so only a store whose parent row was lost
 * (bindlog_recover keeps the child's parent id, which its value still
 * names) can hold a child whose parent is missing or, re-created by a
 * later event under the same id, younger than the child, or a parent whose
 * creation recover could not tell (created_lsn 0, which no event has: the
 * children of every such parent would share one key prefix): that session
 * is no one's child to the table, and the tables built from an image
 * (which only see the parent's row) must agree with the ones the events
 * wrote. */
static inline int bl_child_indexed(uint64_t child_lsn, uint64_t parent_lsn)
{
    return parent_lsn != 0 && parent_lsn < child_lsn;
}

/* ---- validation of caller bytes ------------------------------------------ */

/* 1 if t is a time a record may carry (years 0-9999, BINDLOG_TIME_*_MS). */
static inline int bl_valid_time(int64_t t)
{
    return t >= BINDLOG_TIME_MIN_MS && t <= BINDLOG_TIME_MAX_MS;
}

/* 1 if [p, p+n) is a valid key / session id / reason, else 0. */
int bl_valid_key(const char *p, size_t n);
int bl_valid_id(const char *p, size_t n);
int bl_valid_reason(const char *p, size_t n);

#endif /* BL_RECORD_H */
