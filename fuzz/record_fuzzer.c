/*
 * record_fuzzer.c -- the byte decoders of src/core/record.c against arbitrary input.
 *
 * Must not crash, read out of bounds or trip UBSan on any input; and every
 * input a decoder accepts must re-encode to exactly the same bytes (abort()
 * otherwise), or, for an older record version, to the current version with
 * the same fields.  The formats have no slack -- exact lengths, reserved bits
 * zero, checksum over everything -- so decode is injective and "decode then
 * encode" must be the identity on accepted inputs.  A second decode of the
 * re-encoding must give the same fields.
 *
 * A random input almost never carries a valid XXH3-64 checksum, so the
 * record decoder alone would only ever exercise its checksum check.  Each
 * input is therefore also tried with its last 8 bytes replaced by the
 * correct checksum of the rest ("sealed"), which lets the fuzzer reach the
 * length and field rules behind it.  Binding and session values carry no
 * checksum and are decoded from the raw input.
 *
 * Accepted records are also turned back into events (bl_event_from_record,
 * bl_event_check) as replay does, which must not crash either.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/machine.h"
#include "core/record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "record_fuzzer: %s\n", what);
    abort();
}

static int same_bytes(const void *a, size_t an, const void *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

static void same_record(const bl_record *a, const bl_record *b)
{
    if (a->lsn != b->lsn || a->time_ms != b->time_ms || a->generation != b->generation ||
        a->type != b->type || a->flags != b->flags ||
        !same_bytes(a->key, a->key_len, b->key, b->key_len) ||
        !same_bytes(a->sid, a->sid_len, b->sid, b->sid_len) ||
        !same_bytes(a->other, a->other_len, b->other, b->other_len) ||
        !same_bytes(a->reason, a->reason_len, b->reason, b->reason_len) ||
        !same_bytes(a->origin, a->origin_len, b->origin, b->origin_len))
        fail("record fields differ after a round trip");
}

/* An accepted record must be re-encodable byte for byte. */
static void check_record(const uint8_t *data, size_t size)
{
    bl_record r, r2;
    int rc = bl_record_decode(data, size, &r);
    if (rc == 0) {
        /* an older version re-encodes in the current one: the same fields,
         * plus prev_lsn (0, read from a version-1 record) */
        int old = r.version != BINDLOG_RECORD_VERSION;
        size_t want = old ? bl_record_size(&r) : size;
        if (r.version > BINDLOG_RECORD_VERSION || (r.version == 1 && r.prev_lsn != 0))
            fail("record: a version the decoder should not accept");
        if (bl_record_size(&r) != want)
            fail("record: size of decoded record differs from input");
        uint8_t *buf = malloc(want);
        if (buf == NULL)
            return;
        if (bl_record_encode(&r, buf, want) != want)
            fail("record: decoded record does not re-encode");
        if (!old && memcmp(buf, data, size) != 0)
            fail("record: re-encoding differs from input");
        if (bl_record_decode(buf, want, &r2) != 0)
            fail("record: re-encoding does not decode");
        same_record(&r, &r2);
        if (r2.prev_lsn != r.prev_lsn || r2.version != BINDLOG_RECORD_VERSION ||
            !bl_record_same(&r, &r2))
            fail("record: prev_lsn or version lost in a round trip");
        size = want;
        /* one byte short must never encode */
        if (bl_record_encode(&r, buf, size - 1) != 0)
            fail("record: encoded into a buffer too small");
        free(buf);

        bl_event ev;
        if (bl_event_from_record(&r, &ev) != 0)
            fail("record: a decodable record has no event");
        (void)bl_event_check(&ev);
    } else if (rc != BINDLOG_ECORRUPT && rc != BINDLOG_EVERSION) {
        fail("record: decoder returned an undocumented code");
    }
}

static void check_bval(const uint8_t *data, size_t size)
{
    bl_bval v, v2;
    int rc = bl_bval_decode(data, size, &v);
    if (rc != 0) {
        if (rc != BINDLOG_ECORRUPT && rc != BINDLOG_EVERSION)
            fail("bval: decoder returned an undocumented code");
        return;
    }
    uint8_t *buf = malloc(size);
    if (buf == NULL)
        return;
    /* version 1 re-encodes through the canonical encoder, later ones
     * through the current one: byte for byte either way */
    if (data[0] == 1 ? bl_bval_encode_v1(&v, buf, size) != size
                     : bl_bval_size(&v) != size || bl_bval_encode(&v, buf, size) != size)
        fail("bval: decoded value does not re-encode to its size");
    if (memcmp(buf, data, size) != 0)
        fail("bval: re-encoding differs from input");
    if (bl_bval_decode(buf, size, &v2) != 0 || v2.generation != v.generation ||
        v2.lsn != v.lsn || v2.updated_ms != v.updated_ms ||
        !same_bytes(v.sid, v.sid_len, v2.sid, v2.sid_len))
        fail("bval: second decode differs");
    free(buf);
}

/* A reference (version 3): its own fields only, re-encoded byte for byte;
 * whole-value decoders refuse it. */
static void check_sval_ref(const uint8_t *data, size_t size)
{
    bl_sval v, w;
    int rc = bl_sval_decode_any(data, size, &v);
    if (rc != 0) {
        if (rc != BINDLOG_ECORRUPT && rc != BINDLOG_EVERSION)
            fail("sval ref: decoder returned an undocumented code");
        return;
    }
    if (!v.ref || v.key != NULL || bl_sval_decode(data, size, &w) != BINDLOG_ECORRUPT)
        fail("sval ref: a reference decoded as a whole value");
    uint8_t *buf = malloc(size);
    if (buf == NULL)
        return;
    if (bl_sval_ref_size(&v) != size || bl_sval_encode_ref(&v, buf, size) != size ||
        memcmp(buf, data, size) != 0)
        fail("sval ref: re-encoding differs from input");
    free(buf);
}

static void check_sval(const uint8_t *data, size_t size)
{
    bl_sval v, v2;
    if (size > 0 && data[0] == 3) {
        check_sval_ref(data, size);
        return;
    }
    int rc = bl_sval_decode(data, size, &v);
    if (rc != 0) {
        if (rc != BINDLOG_ECORRUPT && rc != BINDLOG_EVERSION)
            fail("sval: decoder returned an undocumented code");
        return;
    }
    uint8_t *buf = malloc(size);
    if (buf == NULL)
        return;
    /* version 1 re-encodes through the canonical encoder, version 2
     * through the whole one (its mark kept): byte for byte either way */
    if (data[0] == 1 ? bl_sval_encode_v1(&v, buf, size) != size
                     : bl_sval_size(&v) != size || bl_sval_encode_base(&v, buf, size) != size)
        fail("sval: decoded value does not re-encode to its size");
    if (memcmp(buf, data, size) != 0)
        fail("sval: re-encoding differs from input");
    if (bl_sval_decode(buf, size, &v2) != 0 || v2.created_lsn != v.created_lsn ||
        v2.ended_lsn != v.ended_lsn || v2.created_ms != v.created_ms ||
        v2.ended_ms != v.ended_ms || !same_bytes(v.key, v.key_len, v2.key, v2.key_len) ||
        !same_bytes(v.parent, v.parent_len, v2.parent, v2.parent_len) ||
        !same_bytes(v.reason, v.reason_len, v2.reason, v2.reason_len) ||
        !same_bytes(v.origin, v.origin_len, v2.origin, v2.origin_len) || v2.ref != v.ref ||
        v2.child_lsn != v.child_lsn || v2.sibling_lsn != v.sibling_lsn)
        fail("sval: second decode differs");
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_record(data, size);
    check_bval(data, size);
    check_sval(data, size);

    /* The same bytes with a correct checksum in their last 8 bytes. */
    if (size >= BL_RECORD_CHECKSUM + 1 && size <= BL_RECORD_MAX + 64) {
        uint8_t *sealed = malloc(size);
        if (sealed != NULL) {
            size_t body = size - BL_RECORD_CHECKSUM;
            memcpy(sealed, data, body);
            bl_put64(sealed + body, XXH3_64bits(sealed, body));
            check_record(sealed, size);
            free(sealed);
        }
    }
    return 0;
}
