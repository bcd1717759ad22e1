/*
 * digest.c -- the state digest, one entry at a time (no storage here).
 *
 * The digest is XXH3-128 over a canonical encoding of the state: every
 * binding in key byte order as
 *     'B'  u16 key_len  key  u32 value_len  binding value
 * then every session in id byte order as
 *     'S'  u8 id_len  id  u32 value_len  session value
 * where the values are the canonical encodings of record.h: binding and
 * session values of version 1.  A store that keeps a later version (format
 * 4's compact values) is hashed through version 1, so the digest is the
 * state's, whatever format holds it: an upgrade keeps it, and stores of
 * every format and backend compare.  A value that does not decode is hashed
 * as it is (it then differs from any replay's).  The 16 output bytes are
 * XXH128's canonical form: high 64 bits then low 64 bits, big-endian.  Any
 * backend or model that encodes the same state gets the same digest.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/digest.h"
#include "core/error.h"
#include "core/record.h"

struct bl_digest {
    XXH3_state_t *st;   /* NULL: a gatherer, whose bytes go to out */
    unsigned char *out; /* a gatherer's bytes past buf, out_len of out_cap */
    size_t out_len, out_cap;
    size_t len;
    unsigned char buf[64 << 10];
    unsigned char canon[BL_SVAL_FIXED + BINDLOG_KEY_MAX + BINDLOG_ID_MAX + BINDLOG_REASON_MAX +
                        BINDLOG_ORIGIN_MAX];
};

/* v (vn bytes) as version 1, in d->canon; v itself when it is version 1
 * already or does not decode. */
static const void *canonical(bl_digest *d, int tag, const void *v, size_t *vn)
{
    const unsigned char *b = v;
    size_t n = 0;
    if (*vn == 0 || b[0] == 1)
        return v;
    if (tag == 'B') {
        bl_bval bv;
        if (bl_bval_decode(v, *vn, &bv) == 0)
            n = bl_bval_encode_v1(&bv, d->canon, sizeof d->canon);
    } else {
        bl_sval sv;
        if (bl_sval_decode(v, *vn, &sv) == 0)
            n = bl_sval_encode_v1(&sv, d->canon, sizeof d->canon);
    }
    if (n == 0)
        return v;
    *vn = n;
    return d->canon;
}

bl_digest *bl_digest_new(void)
{
    bl_digest *d = malloc(sizeof(*d));
    if (d == NULL)
        return NULL;
    if ((d->st = XXH3_createState()) == NULL) {
        free(d);
        return NULL;
    }
    XXH3_128bits_reset(d->st);
    d->out = NULL;
    d->out_len = d->out_cap = 0;
    d->len = 0;
    return d;
}

bl_digest *bl_digest_new_gather(void)
{
    bl_digest *d = malloc(sizeof(*d));
    if (d == NULL)
        return NULL;
    d->st = NULL;
    d->out = NULL;
    d->out_len = d->out_cap = 0;
    d->len = 0;
    return d;
}

/* Bytes that leave d->buf: hashed, or a gatherer's kept. */
static int emit(bl_digest *d, const void *p, size_t n)
{
    if (d->st != NULL) {
        XXH3_128bits_update(d->st, p, n);
        return 0;
    }
    if (n > d->out_cap - d->out_len) {
        size_t cap = d->out_cap ? d->out_cap : sizeof(d->buf);
        while (cap - d->out_len < n)
            cap *= 2;
        unsigned char *o = realloc(d->out, cap);
        if (o == NULL)
            return bl_err_set(BINDLOG_ENOMEM, "state digest: out of memory");
        d->out = o;
        d->out_cap = cap;
    }
    memcpy(d->out + d->out_len, p, n);
    d->out_len += n;
    return 0;
}

int bl_digest_take(bl_digest *d, bl_digest *from)
{
    if (d->st == NULL)
        return BINDLOG_EINVAL; /* gatherers hand on to a digest, not to each other */
    if (from->out_len != 0 || from->len != 0) {
        XXH3_128bits_update(d->st, d->buf, d->len);
        d->len = 0;
        XXH3_128bits_update(d->st, from->out, from->out_len);
        XXH3_128bits_update(d->st, from->buf, from->len);
    }
    from->out_len = 0;
    from->len = 0;
    return 0;
}

void bl_digest_free(bl_digest *d)
{
    if (d == NULL)
        return;
    if (d->st != NULL)
        XXH3_freeState(d->st);
    free(d->out);
    free(d);
}

/* The limits of an entry: lengths that did not come from our encoders
 * (a damaged page can report gigabytes) are refused before hashing. */
static int entry_ok(int tag, const void *k, size_t kn, size_t vn)
{
    char q[BL_ERR_QUOTE_MAX];
    int b = tag == 'B';
    size_t kmax = b ? BINDLOG_KEY_MAX : BINDLOG_ID_MAX, vmax = b ? BL_BVAL_MAX : BL_SVAL_MAX;

    if (kn == 0 || kn > kmax)
        return bl_err_set(BINDLOG_ECORRUPT,
                          "state digest: %s table: a key of %zu bytes (limit %zu)",
                          b ? "bindings" : "sessions", kn, kmax);
    if (vn > vmax)
        return bl_err_set(BINDLOG_ECORRUPT,
                          "state digest: %s table, %s %s: value of %zu bytes is over the "
                          "limit of %zu bytes",
                          b ? "bindings" : "sessions", b ? "key" : "session",
                          bl_err_bytes(q, sizeof(q), k, kn), vn, vmax);
    return 0;
}

/* Entries are gathered in d->buf and hashed in large pieces: the same bytes
 * as hashing each piece at once, at a fraction of the calls. */
int bl_digest_add(bl_digest *d, int tag, const void *k, size_t kn, const void *v, size_t vn)
{
    unsigned char hdr[1 + 2 + 4];
    size_t h = 0;
    int rc = entry_ok(tag, k, kn, vn);

    if (rc != 0)
        return rc;
    v = canonical(d, tag, v, &vn);
    hdr[h++] = (unsigned char)tag;
    if (tag == 'B') {
        bl_put16(hdr + h, (uint16_t)kn);
        h += 2;
    } else {
        hdr[h++] = (unsigned char)kn;
    }
    bl_put32(hdr + h, (uint32_t)vn);
    /* tag, key length, key, value length, value */
    if (d->len + h + kn + 4 + vn > sizeof(d->buf)) {
        if ((rc = emit(d, d->buf, d->len)) != 0)
            return rc;
        d->len = 0;
    }
    if (h + kn + 4 + vn > sizeof(d->buf)) {
        if ((rc = emit(d, hdr, h)) == 0 && (rc = emit(d, k, kn)) == 0 &&
            (rc = emit(d, hdr + h, 4)) == 0)
            rc = emit(d, v, vn);
        return rc;
    }
    unsigned char *o = d->buf + d->len;
    memcpy(o, hdr, h);
    memcpy(o + h, k, kn);
    memcpy(o + h + kn, hdr + h, 4);
    memcpy(o + h + kn + 4, v, vn);
    d->len += h + kn + 4 + vn;
    return 0;
}

int bl_digest_add_sval(bl_digest *d, const void *id, size_t id_len, const bl_sval *sv)
{
    size_t n = bl_sval_encode_v1(sv, d->canon, sizeof d->canon);
    if (n == 0)
        return BINDLOG_ECORRUPT; /* a field over its limit: not what a decoder gives */
    return bl_digest_add(d, 'S', id, id_len, d->canon, n);
}

void bl_digest_final(bl_digest *d, unsigned char out[BINDLOG_DIGEST_SIZE])
{
    XXH128_canonical_t c;
    if (d->st == NULL) { /* a gatherer has no digest of its own */
        memset(out, 0, BINDLOG_DIGEST_SIZE);
        return;
    }
    XXH3_128bits_update(d->st, d->buf, d->len);
    d->len = 0;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(d->st));
    memcpy(out, c.digest, BINDLOG_DIGEST_SIZE);
}

void bindlog_digest_hex(const unsigned char d[BINDLOG_DIGEST_SIZE],
                        char hex[2 * BINDLOG_DIGEST_SIZE + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < BINDLOG_DIGEST_SIZE; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[2 * BINDLOG_DIGEST_SIZE] = '\0';
}
