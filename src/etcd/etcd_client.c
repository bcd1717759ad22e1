/*
 * etcd_client.c -- the etcd v3 JSON-gateway client (see etcd_client.h):
 * the JSON of the KV and maintenance calls.  The transport (endpoints,
 * failover, TLS, auth) is etcd_http.c; the watch stream etcd_watch.c.
 *
 * Wire format, as etcd 3.4's grpc-gateway speaks it (proto3 JSON mapping):
 *  - POST http[s]://HOST:PORT/v3/kv/{range,put,deleterange,txn,compaction} and
 *    /v3/maintenance/status, body and answer one JSON object each;
 *  - bytes fields (key, value, range_end) are base64, standard alphabet,
 *    padded;
 *  - int64/uint64 fields are JSON *strings* of decimal digits ("revision":
 *    "42"); we send numbers (the gateway accepts both) and accept only
 *    strings, parsed strictly;
 *  - fields with their zero value are left out ("more": false, "count": 0,
 *    an empty "kvs" are all absent), so absent means zero;
 *  - an error is {"error": "...", "message": "...", "code": N} with N a gRPC
 *    status code and an HTTP status derived from it (400, 429, 503, ...).
 */
#include "etcd/etcd_wire.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- base64 ---------------------------------------------------------------- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t bl_etcd_b64_encoded_len(size_t len)
{
    return (len + 2) / 3 * 4;
}

size_t bl_etcd_b64_encode(const void *in, size_t len, char *out)
{
    const unsigned char *p = in;
    size_t i, o = 0;
    for (i = 0; i + 3 <= len; i += 3) {
        unsigned long v = (unsigned long)p[i] << 16 | (unsigned long)p[i + 1] << 8 | p[i + 2];
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = b64_alphabet[v >> 6 & 63];
        out[o++] = b64_alphabet[v & 63];
    }
    if (len - i == 1) {
        unsigned long v = (unsigned long)p[i] << 16;
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (len - i == 2) {
        unsigned long v = (unsigned long)p[i] << 16 | (unsigned long)p[i + 1] << 8;
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = b64_alphabet[v >> 6 & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
    return o;
}

static int b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

int bl_etcd_b64_decode(const char *in, size_t len, unsigned char *out, size_t *out_len)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t i, o = 0;
    if (len % 4 != 0)
        return BINDLOG_ECORRUPT;
    for (i = 0; i < len; i += 4) {
        int last = i + 4 == len;
        int a = b64_value(p[i]), b = b64_value(p[i + 1]);
        int c = b64_value(p[i + 2]), d = b64_value(p[i + 3]);
        if (a < 0 || b < 0)
            return BINDLOG_ECORRUPT;
        if (c < 0 || d < 0) {
            /* Padding: only in the last quantum, "xx==" or "xxx=", and the
             * bits it leaves unused must be zero (one encoding per input). */
            if (!last || p[i + 3] != '=')
                return BINDLOG_ECORRUPT;
            if (c < 0) {
                if (p[i + 2] != '=' || (b & 15) != 0)
                    return BINDLOG_ECORRUPT;
                out[o++] = (unsigned char)(a << 2 | b >> 4);
            } else {
                if ((c & 3) != 0)
                    return BINDLOG_ECORRUPT;
                out[o++] = (unsigned char)(a << 2 | b >> 4);
                out[o++] = (unsigned char)((b & 15) << 4 | c >> 2);
            }
            break;
        }
        out[o++] = (unsigned char)(a << 2 | b >> 4);
        out[o++] = (unsigned char)((b & 15) << 4 | c >> 2);
        out[o++] = (unsigned char)((c & 3) << 6 | d);
    }
    *out_len = o;
    return 0;
}

size_t bl_etcd_prefix_end(const void *prefix, size_t len, unsigned char *out)
{
    const unsigned char *p = prefix;
    size_t i = len;
    while (i > 0 && p[i - 1] == 0xff)
        i--;
    if (i == 0) {
        out[0] = 0;
        return 1;
    }
    memcpy(out, p, i);
    out[i - 1]++;
    return i;
}

/* ---- JSON helpers ------------------------------------------------------------ */

json_object *bl_ew_parse_json(const char *text, size_t len)
{
    json_tokener *tok;
    json_object *o;
    if (len > INT_MAX)
        return NULL;
    tok = json_tokener_new();
    if (tok == NULL)
        return NULL;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    o = json_tokener_parse_ex(tok, text, (int)len);
    if (o != NULL && (json_tokener_get_error(tok) != json_tokener_success ||
                      json_tokener_get_parse_end(tok) != len)) {
        json_object_put(o);
        o = NULL;
    }
    json_tokener_free(tok);
    return o;
}

/* Add `name`: base64 of [p, p+len). */
int bl_ew_add_bytes(json_object *o, const char *name, const void *p, size_t len)
{
    size_t n;
    char *enc;
    json_object *s;
    if (len > (size_t)INT_MAX / 4 * 3 - 3)
        return BINDLOG_EINVAL;
    n = bl_etcd_b64_encoded_len(len);
    enc = malloc(n + 1);
    if (enc == NULL)
        return BINDLOG_ENOMEM;
    bl_etcd_b64_encode(p, len, enc);
    s = json_object_new_string_len(enc, (int)n);
    free(enc);
    if (s == NULL)
        return BINDLOG_ENOMEM;
    if (json_object_object_add(o, name, s) != 0) {
        json_object_put(s);
        return BINDLOG_ENOMEM;
    }
    return 0;
}

int bl_ew_add_obj(json_object *o, const char *name, json_object *v)
{
    if (v == NULL)
        return BINDLOG_ENOMEM;
    if (json_object_object_add(o, name, v) != 0) {
        json_object_put(v);
        return BINDLOG_ENOMEM;
    }
    return 0;
}

int bl_ew_add_i64(json_object *o, const char *name, int64_t v)
{
    return bl_ew_add_obj(o, name, json_object_new_int64(v));
}

int bl_ew_add_bool(json_object *o, const char *name, int v)
{
    return bl_ew_add_obj(o, name, json_object_new_boolean(v ? 1 : 0));
}

int bl_ew_add_str(json_object *o, const char *name, const char *v)
{
    return bl_ew_add_obj(o, name, json_object_new_string(v));
}

/* A strictly decimal int64/uint64 carried as a JSON string.  Absent is 0. */
int bl_ew_get_u64(json_object *o, const char *name, uint64_t *v)
{
    json_object *f;
    const char *s;
    int len, i;
    uint64_t x = 0;
    *v = 0;
    if (!json_object_object_get_ex(o, name, &f))
        return 0;
    if (!json_object_is_type(f, json_type_string))
        return BINDLOG_EIO;
    s = json_object_get_string(f);
    len = json_object_get_string_len(f);
    if (len == 0 || len > 20 || (len > 1 && s[0] == '0'))
        return BINDLOG_EIO;
    for (i = 0; i < len; i++) {
        unsigned d;
        if (s[i] < '0' || s[i] > '9')
            return BINDLOG_EIO;
        d = (unsigned)(s[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return BINDLOG_EIO;
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}

/* The same for a signed field; etcd's revisions, versions and counts are
 * never negative, so a '-' is refused too. */
int bl_ew_get_i64(json_object *o, const char *name, int64_t *v)
{
    uint64_t u;
    int rc = bl_ew_get_u64(o, name, &u);
    *v = 0;
    if (rc != 0)
        return rc;
    if (u > INT64_MAX)
        return BINDLOG_EIO;
    *v = (int64_t)u;
    return 0;
}

/* A JSON boolean; absent is false. */
int bl_ew_get_bool(json_object *o, const char *name, int *v)
{
    json_object *f;
    *v = 0;
    if (!json_object_object_get_ex(o, name, &f))
        return 0;
    if (!json_object_is_type(f, json_type_boolean))
        return BINDLOG_EIO;
    *v = json_object_get_boolean(f) ? 1 : 0;
    return 0;
}

/* The revision in {"header": {"revision": "N"}}; the header is required. */
int bl_ew_get_header_revision(json_object *o, int64_t *rev)
{
    json_object *hd;
    if (!json_object_object_get_ex(o, "header", &hd) || !json_object_is_type(hd, json_type_object))
        return BINDLOG_EIO;
    return bl_ew_get_i64(hd, "revision", rev);
}

/* Decode the base64 string field `name` (absent: empty) into a fresh buffer
 * at dst (room for its decoded length) and set *len. */
static int get_b64(json_object *o, const char *name, unsigned char *dst, size_t *len)
{
    json_object *f;
    *len = 0;
    if (!json_object_object_get_ex(o, name, &f))
        return 0;
    if (!json_object_is_type(f, json_type_string))
        return BINDLOG_EIO;
    return bl_etcd_b64_decode(json_object_get_string(f), (size_t)json_object_get_string_len(f),
                              dst, len);
}

static size_t b64_field_max(json_object *o, const char *name)
{
    json_object *f;
    if (!json_object_object_get_ex(o, name, &f) || !json_object_is_type(f, json_type_string))
        return 0;
    return (size_t)json_object_get_string_len(f) / 4 * 3;
}

int bl_ew_parse_kv(json_object *o, bl_etcd_kv *kv)
{
    size_t kmax, vmax;
    int rc;
    memset(kv, 0, sizeof *kv);
    if (!json_object_is_type(o, json_type_object))
        return BINDLOG_EIO;
    kmax = b64_field_max(o, "key");
    vmax = b64_field_max(o, "value");
    kv->key = malloc(kmax + vmax + 2);
    if (kv->key == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = get_b64(o, "key", kv->key, &kv->key_len)) != 0)
        return rc;
    kv->key[kv->key_len] = '\0';
    kv->value = kv->key + kv->key_len + 1;
    if ((rc = get_b64(o, "value", kv->value, &kv->value_len)) != 0)
        return rc;
    kv->value[kv->value_len] = '\0';
    if (kv->key_len == 0)
        return BINDLOG_EIO;
    if ((rc = bl_ew_get_i64(o, "create_revision", &kv->create_revision)) != 0 ||
        (rc = bl_ew_get_i64(o, "mod_revision", &kv->mod_revision)) != 0 ||
        (rc = bl_ew_get_i64(o, "version", &kv->version)) != 0)
        return rc;
    return 0;
}

void bl_etcd_kvs_free(bl_etcd_kvs *kvs)
{
    size_t i;
    if (kvs == NULL)
        return;
    for (i = 0; i < kvs->n; i++)
        free(kvs->kvs[i].key);
    free(kvs->kvs);
    memset(kvs, 0, sizeof *kvs);
}

/* A RangeResponse into out (zeroed first; partly filled on error). */
static int parse_range(json_object *o, bl_etcd_kvs *out)
{
    json_object *arr;
    size_t i, n;
    int rc;
    memset(out, 0, sizeof *out);
    if ((rc = bl_ew_get_header_revision(o, &out->revision)) != 0 ||
        (rc = bl_ew_get_bool(o, "more", &out->more)) != 0 || (rc = bl_ew_get_i64(o, "count", &out->count)) != 0)
        return rc;
    if (!json_object_object_get_ex(o, "kvs", &arr))
        return 0;
    if (!json_object_is_type(arr, json_type_array))
        return BINDLOG_EIO;
    n = json_object_array_length(arr);
    if (n == 0)
        return 0;
    out->kvs = calloc(n, sizeof *out->kvs);
    if (out->kvs == NULL)
        return BINDLOG_ENOMEM;
    for (i = 0; i < n; i++) {
        rc = bl_ew_parse_kv(json_object_array_get_idx(arr, i), &out->kvs[i]);
        out->n = i + 1; /* so that bl_etcd_kvs_free frees this one too */
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* A parse failure of an answer that came back 200: say what and where. */
static int bad_answer(int rc, const char *what)
{
    if (rc == BINDLOG_ENOMEM)
        bl_ew_error("etcd: out of memory reading %s", what);
    else if (rc == BINDLOG_ECORRUPT)
        bl_ew_error("etcd: %s: invalid base64 from the server", what);
    else
        bl_ew_error("etcd: %s: malformed answer from the server", what);
    return rc;
}

/* Fill a RangeRequest body. */
static int build_range(json_object *r, const void *key, size_t key_len, const void *range_end,
                       size_t range_end_len, int64_t revision, int64_t limit, int flags)
{
    int rc;
    if ((rc = bl_ew_add_bytes(r, "key", key, key_len)) != 0)
        return rc;
    if (range_end != NULL && (rc = bl_ew_add_bytes(r, "range_end", range_end, range_end_len)) != 0)
        return rc;
    if (limit > 0 && (rc = bl_ew_add_i64(r, "limit", limit)) != 0)
        return rc;
    if (revision > 0 && (rc = bl_ew_add_i64(r, "revision", revision)) != 0)
        return rc;
    if ((flags & BL_ETCD_SORT_DESCEND) &&
        ((rc = bl_ew_add_str(r, "sort_order", "DESCEND")) != 0 ||
         (rc = bl_ew_add_str(r, "sort_target", "KEY")) != 0))
        return rc;
    if ((flags & BL_ETCD_SERIALIZABLE) && (rc = bl_ew_add_bool(r, "serializable", 1)) != 0)
        return rc;
    if ((flags & BL_ETCD_KEYS_ONLY) && (rc = bl_ew_add_bool(r, "keys_only", 1)) != 0)
        return rc;
    if ((flags & BL_ETCD_COUNT_ONLY) && (rc = bl_ew_add_bool(r, "count_only", 1)) != 0)
        return rc;
    return 0;
}

#define RANGE_FLAGS \
    (BL_ETCD_KEYS_ONLY | BL_ETCD_COUNT_ONLY | BL_ETCD_SERIALIZABLE | BL_ETCD_SORT_DESCEND)

static int bad_arg(const char *what)
{
    bl_ew_error("etcd: invalid argument: %s", what);
    return BINDLOG_EINVAL;
}

/* ---- the calls ----------------------------------------------------------------- */

int bl_etcd_range(bl_etcd *c, const void *key, size_t key_len, const void *range_end,
                  size_t range_end_len, int64_t revision, int64_t limit, int flags,
                  bl_etcd_kvs *out)
{
    json_object *req = NULL, *resp = NULL;
    int rc;
    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (c == NULL || out == NULL || key == NULL || key_len == 0)
        return bad_arg("range: NULL client, result or key, or empty key");
    if ((range_end == NULL) != (range_end_len == 0) || revision < 0 || limit < 0 ||
        (flags & ~RANGE_FLAGS) != 0)
        return bad_arg("range: bad range_end, revision, limit or flags");
    req = json_object_new_object();
    if (req == NULL)
        return BINDLOG_ENOMEM;
    rc = build_range(req, key, key_len, range_end, range_end_len, revision, limit, flags);
    if (rc != 0)
        goto out;
    rc = bl_ew_call(c, "/v3/kv/range", req, &resp, NULL, NULL);
    if (rc != 0)
        goto out;
    rc = parse_range(resp, out);
    if (rc != 0) {
        bl_etcd_kvs_free(out);
        rc = bad_answer(rc, "range");
    }
out:
    json_object_put(req);
    json_object_put(resp);
    return rc;
}

int bl_etcd_put(bl_etcd *c, const void *key, size_t key_len, const void *value,
                size_t value_len, int64_t *revision)
{
    json_object *req = NULL, *resp = NULL;
    int64_t rev = 0;
    int rc;
    if (revision)
        *revision = 0;
    if (c == NULL || key == NULL || key_len == 0 || (value == NULL && value_len != 0))
        return bad_arg("put: NULL client or key, empty key, or NULL value");
    req = json_object_new_object();
    if (req == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = bl_ew_add_bytes(req, "key", key, key_len)) != 0 ||
        (rc = bl_ew_add_bytes(req, "value", value ? value : "", value_len)) != 0)
        goto out;
    if ((rc = bl_ew_call(c, "/v3/kv/put", req, &resp, NULL, NULL)) != 0)
        goto out;
    if ((rc = bl_ew_get_header_revision(resp, &rev)) != 0) {
        rc = bad_answer(rc, "put");
        goto out;
    }
    if (revision)
        *revision = rev;
out:
    json_object_put(req);
    json_object_put(resp);
    return rc;
}

int bl_etcd_delete_range(bl_etcd *c, const void *key, size_t key_len, const void *range_end,
                         size_t range_end_len, int64_t *deleted, int64_t *revision)
{
    json_object *req = NULL, *resp = NULL;
    int64_t rev = 0, del = 0;
    int rc;
    if (deleted)
        *deleted = 0;
    if (revision)
        *revision = 0;
    if (c == NULL || key == NULL || key_len == 0 || (range_end == NULL) != (range_end_len == 0))
        return bad_arg("delete_range: NULL client or key, empty key, or bad range_end");
    req = json_object_new_object();
    if (req == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = bl_ew_add_bytes(req, "key", key, key_len)) != 0 ||
        (range_end && (rc = bl_ew_add_bytes(req, "range_end", range_end, range_end_len)) != 0))
        goto out;
    if ((rc = bl_ew_call(c, "/v3/kv/deleterange", req, &resp, NULL, NULL)) != 0)
        goto out;
    if ((rc = bl_ew_get_header_revision(resp, &rev)) != 0 || (rc = bl_ew_get_i64(resp, "deleted", &del)) != 0) {
        rc = bad_answer(rc, "deleterange");
        goto out;
    }
    if (deleted)
        *deleted = del;
    if (revision)
        *revision = rev;
out:
    json_object_put(req);
    json_object_put(resp);
    return rc;
}

/* ---- Txn ----------------------------------------------------------------------- */

static int build_cmp(const bl_etcd_cmp *cm, json_object **out)
{
    static const char *const targets[] = { "VERSION", "CREATE", "MOD", "VALUE" };
    static const char *const results[] = { "EQUAL", "GREATER", "LESS", "NOT_EQUAL" };
    static const char *const fields[] = { "version", "create_revision", "mod_revision" };
    json_object *o;
    int rc;
    *out = NULL;
    if (cm->target < 0 || cm->target > BL_ETCD_CMP_VALUE || cm->result < 0 ||
        cm->result > BL_ETCD_NOT_EQUAL || cm->key == NULL || cm->key_len == 0 ||
        (cm->range_end == NULL) != (cm->range_end_len == 0) ||
        (cm->target == BL_ETCD_CMP_VALUE && cm->value == NULL && cm->value_len != 0))
        return bad_arg("txn: bad compare");
    o = json_object_new_object();
    if (o == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = bl_ew_add_str(o, "target", targets[cm->target])) != 0 ||
        (rc = bl_ew_add_str(o, "result", results[cm->result])) != 0 ||
        (rc = bl_ew_add_bytes(o, "key", cm->key, cm->key_len)) != 0 ||
        (cm->range_end && (rc = bl_ew_add_bytes(o, "range_end", cm->range_end, cm->range_end_len)) != 0))
        goto fail;
    if (cm->target == BL_ETCD_CMP_VALUE)
        rc = bl_ew_add_bytes(o, "value", cm->value ? cm->value : "", cm->value_len);
    else
        rc = bl_ew_add_i64(o, fields[cm->target], cm->number);
    if (rc != 0)
        goto fail;
    *out = o;
    return 0;
fail:
    json_object_put(o);
    return rc;
}

static int build_op(const bl_etcd_op *op, json_object **out)
{
    json_object *o = NULL, *r = NULL;
    const char *name;
    int rc;
    *out = NULL;
    if (op->key == NULL || op->key_len == 0 || (op->range_end == NULL) != (op->range_end_len == 0))
        return bad_arg("txn: op without key or with a bad range_end");
    r = json_object_new_object();
    if (r == NULL)
        return BINDLOG_ENOMEM;
    switch (op->type) {
    case BL_ETCD_OP_RANGE:
        name = "request_range";
        if (op->limit < 0 || (op->flags & ~(RANGE_FLAGS & ~BL_ETCD_SERIALIZABLE)) != 0) {
            rc = bad_arg("txn: bad range op limit or flags");
            goto fail;
        }
        rc = build_range(r, op->key, op->key_len, op->range_end, op->range_end_len, 0, op->limit,
                         op->flags);
        break;
    case BL_ETCD_OP_PUT:
        name = "request_put";
        if (op->value == NULL && op->value_len != 0) {
            rc = bad_arg("txn: put op with a NULL value");
            goto fail;
        }
        if ((rc = bl_ew_add_bytes(r, "key", op->key, op->key_len)) == 0)
            rc = bl_ew_add_bytes(r, "value", op->value ? op->value : "", op->value_len);
        break;
    case BL_ETCD_OP_DELETE:
        name = "request_delete_range";
        if ((rc = bl_ew_add_bytes(r, "key", op->key, op->key_len)) == 0 && op->range_end)
            rc = bl_ew_add_bytes(r, "range_end", op->range_end, op->range_end_len);
        break;
    default:
        rc = bad_arg("txn: unknown op type");
        goto fail;
    }
    if (rc != 0)
        goto fail;
    o = json_object_new_object();
    if (o == NULL) {
        rc = BINDLOG_ENOMEM;
        goto fail;
    }
    rc = bl_ew_add_obj(o, name, r);
    r = NULL;
    if (rc != 0)
        goto fail;
    *out = o;
    return 0;
fail:
    json_object_put(r);
    json_object_put(o);
    return rc;
}

static int build_ops(json_object *req, const char *name, const bl_etcd_op *ops, size_t n)
{
    json_object *arr;
    size_t i;
    int rc;
    if (n == 0)
        return 0;
    arr = json_object_new_array_ext((int)n);
    if (arr == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = bl_ew_add_obj(req, name, arr)) != 0)
        return rc;
    for (i = 0; i < n; i++) {
        json_object *o;
        if ((rc = build_op(&ops[i], &o)) != 0)
            return rc;
        if (json_object_array_add(arr, o) != 0) {
            json_object_put(o);
            return BINDLOG_ENOMEM;
        }
    }
    return 0;
}

void bl_etcd_txn_result_free(bl_etcd_txn_result *r)
{
    size_t i;
    if (r == NULL)
        return;
    for (i = 0; i < r->nresults; i++)
        bl_etcd_kvs_free(&r->results[i].kvs);
    free(r->results);
    memset(r, 0, sizeof *r);
}

/* The "responses" of a TxnResponse: one per op of the branch that ran, of
 * the matching kind. */
static int parse_txn_responses(json_object *resp, const bl_etcd_op *ops, size_t nops,
                               bl_etcd_txn_result *out)
{
    static const char *const names[] = { "response_range", "response_put",
                                         "response_delete_range" };
    json_object *arr = NULL;
    size_t i, n = 0;
    int rc;
    if (json_object_object_get_ex(resp, "responses", &arr)) {
        if (!json_object_is_type(arr, json_type_array))
            return BINDLOG_EIO;
        n = json_object_array_length(arr);
    }
    if (n != nops)
        return BINDLOG_EIO;
    if (n == 0)
        return 0;
    out->results = calloc(n, sizeof *out->results);
    if (out->results == NULL)
        return BINDLOG_ENOMEM;
    for (i = 0; i < n; i++) {
        json_object *item = json_object_array_get_idx(arr, i), *r;
        bl_etcd_op_result *res = &out->results[i];
        out->nresults = i + 1;
        res->type = ops[i].type;
        if (!json_object_is_type(item, json_type_object) ||
            json_object_object_length(item) != 1 ||
            !json_object_object_get_ex(item, names[ops[i].type], &r) ||
            !json_object_is_type(r, json_type_object))
            return BINDLOG_EIO;
        if (ops[i].type == BL_ETCD_OP_RANGE)
            rc = parse_range(r, &res->kvs);
        else if (ops[i].type == BL_ETCD_OP_DELETE)
            rc = bl_ew_get_i64(r, "deleted", &res->deleted);
        else
            rc = 0;
        if (rc != 0)
            return rc;
    }
    return 0;
}

int bl_etcd_txn(bl_etcd *c, const bl_etcd_cmp *cmps, size_t ncmp, const bl_etcd_op *success,
                size_t nsucc, const bl_etcd_op *failure, size_t nfail, bl_etcd_txn_result *out)
{
    json_object *req = NULL, *resp = NULL, *arr;
    size_t i;
    int rc;

    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (c == NULL || out == NULL || (ncmp && !cmps) || (nsucc && !success) || (nfail && !failure))
        return bad_arg("txn: NULL client, result or array");
    if (ncmp > c->max_ops || nsucc > c->max_ops || nfail > c->max_ops) {
        bl_ew_error("etcd: txn: %zu compares, %zu success and %zu failure ops; the limit is %u "
                  "of each (--max-txn-ops): split the Txn",
                  ncmp, nsucc, nfail, c->max_ops);
        return BINDLOG_EINVAL;
    }
    req = json_object_new_object();
    if (req == NULL)
        return BINDLOG_ENOMEM;
    if (ncmp > 0) {
        arr = json_object_new_array_ext((int)ncmp);
        if ((rc = bl_ew_add_obj(req, "compare", arr)) != 0)
            goto out;
        for (i = 0; i < ncmp; i++) {
            json_object *o;
            if ((rc = build_cmp(&cmps[i], &o)) != 0)
                goto out;
            if (json_object_array_add(arr, o) != 0) {
                json_object_put(o);
                rc = BINDLOG_ENOMEM;
                goto out;
            }
        }
    }
    if ((rc = build_ops(req, "success", success, nsucc)) != 0 ||
        (rc = build_ops(req, "failure", failure, nfail)) != 0)
        goto out;

    if ((rc = bl_ew_call(c, "/v3/kv/txn", req, &resp, &out->retried, NULL)) != 0)
        goto out;
    if ((rc = bl_ew_get_header_revision(resp, &out->revision)) != 0 ||
        (rc = bl_ew_get_bool(resp, "succeeded", &out->succeeded)) != 0 ||
        (rc = parse_txn_responses(resp, out->succeeded ? success : failure,
                                  out->succeeded ? nsucc : nfail, out)) != 0) {
        int retried = out->retried;
        bl_etcd_txn_result_free(out);
        out->retried = retried;
        rc = bad_answer(rc, "txn");
    }
out:
    if (rc == BINDLOG_ENOMEM && bl_etcd_last_error()[0] == '\0')
        bl_ew_error("etcd: out of memory");
    json_object_put(req);
    json_object_put(resp);
    return rc;
}

/* ---- maintenance ------------------------------------------------------------------- */

/* etcd 3.4 writes StatusResponse fields in camelCase ("dbSize"); the proto
 * names ("db_size") are accepted too in case a gateway uses them. */
static int get_u64_either(json_object *o, const char *camel, const char *snake, uint64_t *v)
{
    json_object *f;
    if (json_object_object_get_ex(o, camel, &f))
        return bl_ew_get_u64(o, camel, v);
    return bl_ew_get_u64(o, snake, v);
}

int bl_etcd_status(bl_etcd *c, bl_etcd_status_info *out)
{
    json_object *req = NULL, *resp = NULL, *hd, *ver;
    uint64_t db = 0, in_use = 0;
    int rc;
    size_t e = 0;

    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (c == NULL || out == NULL)
        return bad_arg("status: NULL client or result");
    req = json_object_new_object();
    if (req == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = bl_ew_call(c, "/v3/maintenance/status", req, &resp, NULL, &e)) != 0)
        goto out;
    snprintf(out->endpoint, sizeof out->endpoint, "%s", c->eps[e]);
    if (!json_object_object_get_ex(resp, "header", &hd) ||
        !json_object_is_type(hd, json_type_object) ||
        (rc = bl_ew_get_u64(hd, "member_id", &out->member_id)) != 0 ||
        (rc = bl_ew_get_i64(hd, "revision", &out->revision)) != 0 ||
        (rc = bl_ew_get_u64(resp, "leader", &out->leader)) != 0 ||
        (rc = get_u64_either(resp, "dbSize", "db_size", &db)) != 0 ||
        (rc = get_u64_either(resp, "dbSizeInUse", "db_size_in_use", &in_use)) != 0 ||
        (rc = get_u64_either(resp, "raftTerm", "raft_term", &out->raft_term)) != 0 ||
        (rc = get_u64_either(resp, "raftIndex", "raft_index", &out->raft_index)) != 0 ||
        db > INT64_MAX || in_use > INT64_MAX) {
        rc = bad_answer(rc ? rc : BINDLOG_EIO, "status");
        goto out;
    }
    out->db_size = (int64_t)db;
    out->db_size_in_use = (int64_t)in_use;
    if (json_object_object_get_ex(resp, "version", &ver) &&
        json_object_is_type(ver, json_type_string))
        snprintf(out->version, sizeof out->version, "%s", json_object_get_string(ver));
out:
    json_object_put(req);
    json_object_put(resp);
    return rc;
}

int bl_etcd_compact(bl_etcd *c, int64_t revision, int physical)
{
    json_object *req = NULL, *resp = NULL;
    int64_t rev;
    int rc;
    if (c == NULL || revision <= 0)
        return bad_arg("compact: NULL client or revision <= 0");
    req = json_object_new_object();
    if (req == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = bl_ew_add_i64(req, "revision", revision)) != 0 ||
        (physical && (rc = bl_ew_add_bool(req, "physical", 1)) != 0))
        goto out;
    if ((rc = bl_ew_call(c, "/v3/kv/compaction", req, &resp, NULL, NULL)) != 0)
        goto out;
    if ((rc = bl_ew_get_header_revision(resp, &rev)) != 0)
        rc = bad_answer(rc, "compaction");
out:
    json_object_put(req);
    json_object_put(resp);
    return rc;
}
