/*
 * addon.c -- module entry, JavaScript values, errors and argument parsing
 * of the bindlog Node-API addon (addon.h).
 *
 * Conventions every native method follows:
 *   - a wrong JavaScript type throws a TypeError (RangeError for a number
 *     that is not a valid LSN or generation) before anything else happens;
 *   - a bindlog error becomes a BindlogError (the class index.js defines and
 *     hands in through init()) with `code` the C name ("BINDLOG_EINVAL"),
 *     `errno` the negative C value and `message` bindlog_last_error() as
 *     read in the thread that made the call;
 *   - LSNs and generations are numbers (a bigint only past 2^53 - 1, which
 *     no store reaches: that many events).
 */
#include "addon.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ----------------------------------------------------------------- */

void bn_throw_napi(napi_env env, const char *what)
{
    bool pending = false;
    if (napi_is_exception_pending(env, &pending) == napi_ok && pending)
        return;
    const napi_extended_error_info *info = NULL;
    char msg[256];
    napi_get_last_error_info(env, &info);
    snprintf(msg, sizeof msg, "bindlog addon: %s failed: %s", what,
             info != NULL && info->error_message != NULL ? info->error_message : "napi error");
    napi_throw_error(env, NULL, msg);
}

napi_value bn_error_value(napi_env env, int rc, const char *message, long index)
{
    bn_module *m = bn_module_get(env);
    napi_value ctor = NULL, err = NULL, argv[3];
    int closed = rc == BN_ECLOSED;
    napi_ref ref = m == NULL ? NULL : closed ? m->closed_ctor : m->error_ctor;
    if (message == NULL || message[0] == '\0')
        message = closed ? "the store is closed" : bindlog_strerror(rc);
    if (napi_create_string_utf8(env, message, NAPI_AUTO_LENGTH, &argv[0]) != napi_ok ||
        napi_create_string_utf8(env, closed ? "BINDLOG_ECLOSED" : bindlog_code_name(rc),
                                NAPI_AUTO_LENGTH, &argv[1]) != napi_ok ||
        napi_create_int32(env, rc, &argv[2]) != napi_ok)
        return NULL;
    if (ref != NULL && napi_get_reference_value(env, ref, &ctor) == napi_ok && ctor != NULL) {
        if (napi_new_instance(env, ctor, 3, argv, &err) != napi_ok)
            return NULL;
    } else {
        /* init() not called yet: a plain Error with the same fields */
        if (napi_create_error(env, argv[1], argv[0], &err) != napi_ok)
            return NULL;
        bn_set(env, err, "errno", argv[2]);
    }
    if (index >= 0) {
        napi_value v;
        if (napi_create_int64(env, index, &v) == napi_ok)
            bn_set(env, err, "index", v);
    }
    return err;
}

void bn_throw_error(napi_env env, napi_value err)
{
    if (err != NULL)
        napi_throw(env, err);
    else
        bn_throw_napi(env, "creating a BindlogError");
}

void bn_throw(napi_env env, int rc, const char *message)
{
    bn_throw_error(env, bn_error_value(env, rc, message, -1));
}

static void throw_fmt(napi_env env, int range, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (range)
        napi_throw_range_error(env, NULL, msg);
    else
        napi_throw_type_error(env, NULL, msg);
}

void bn_throw_type(napi_env env, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    throw_fmt(env, 0, fmt, ap);
    va_end(ap);
}

static void bn_throw_range(napi_env env, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    throw_fmt(env, 1, fmt, ap);
    va_end(ap);
}

/* ---- values ------------------------------------------------------------------ */

#define MAX_SAFE ((uint64_t)9007199254740991ULL) /* Number.MAX_SAFE_INTEGER */

napi_value bn_u64(napi_env env, uint64_t v)
{
    napi_value out = NULL;
    if (v <= MAX_SAFE)
        napi_create_double(env, (double)v, &out);
    else
        napi_create_bigint_uint64(env, v, &out);
    return out;
}

napi_value bn_i64(napi_env env, int64_t v)
{
    napi_value out = NULL;
    napi_create_double(env, (double)v, &out); /* times in ms: well inside 2^53 */
    return out;
}

napi_value bn_str(napi_env env, const char *s)
{
    napi_value out = NULL;
    napi_create_string_utf8(env, s != NULL ? s : "", NAPI_AUTO_LENGTH, &out);
    return out;
}

napi_value bn_buffer(napi_env env, const void *p, size_t n)
{
    napi_value out = NULL;
    void *data;
    napi_create_buffer_copy(env, n, n ? p : "", &data, &out);
    return out;
}

int bn_set(napi_env env, napi_value obj, const char *name, napi_value v)
{
    if (v == NULL)
        return -1;
    return napi_set_named_property(env, obj, name, v) == napi_ok ? 0 : -1;
}

const char *bn_outcome_name(int outcome)
{
    switch (outcome) {
    case BINDLOG_APPLIED:
        return "applied";
    case BINDLOG_ALREADY:
        return "already";
    case BINDLOG_STALE:
        return "stale";
    case BINDLOG_MOVED:
        return "moved";
    default:
        return "unknown";
    }
}

const char *bn_event_js_name(int type)
{
    switch (type) {
    case BINDLOG_EVENT_BIND:
        return "bind";
    case BINDLOG_EVENT_NEW_SESSION:
        return "newSession";
    case BINDLOG_EVENT_SPLIT:
        return "split";
    case BINDLOG_EVENT_INVALIDATE:
        return "invalidate";
    case BINDLOG_EVENT_UNBIND:
        return "unbind";
    case BINDLOG_EVENT_ROUTE:
        return "route";
    default:
        return "unknown";
    }
}

/* A write's Result: a plain object (outcome, lsn, generation, sessionId)
 * with isCurrent (index.js) as a non-enumerable method, so that results
 * still compare deep-equal to plain objects. */
napi_value bn_result_value(napi_env env, const bindlog_result *r)
{
    bn_module *m = bn_module_get(env);
    napi_value o, fn = NULL;
    if (napi_create_object(env, &o) != napi_ok)
        return NULL;
    if (bn_set(env, o, "outcome", bn_str(env, bn_outcome_name(r->outcome))) ||
        bn_set(env, o, "lsn", bn_u64(env, r->lsn)) ||
        bn_set(env, o, "generation", bn_u64(env, r->generation)) ||
        bn_set(env, o, "sessionId", bn_str(env, r->session_id)))
        return NULL;
    if (m != NULL && m->is_current != NULL &&
        napi_get_reference_value(env, m->is_current, &fn) == napi_ok && fn != NULL) {
        napi_property_descriptor d = {"isCurrent", NULL, NULL, NULL, NULL, fn, napi_default, NULL};
        if (napi_define_properties(env, o, 1, &d) != napi_ok)
            return NULL;
    }
    return o;
}

napi_value bn_route_result_value(napi_env env, int outcome, const bindlog_route_result *r)
{
    napi_value o, reason;
    const char *name = outcome == BINDLOG_ROUTED    ? "routed"
                       : outcome == BINDLOG_CREATED ? "created"
                       : outcome == BINDLOG_RESET   ? "reset"
                                                    : "unknown";
    if (napi_create_object(env, &o) != napi_ok)
        return NULL;
    if (r->reason == BINDLOG_RESET_IDLE || r->reason == BINDLOG_RESET_DAILY)
        reason = bn_str(env, r->reason == BINDLOG_RESET_IDLE ? "idle" : "daily");
    else if (napi_get_null(env, &reason) != napi_ok)
        return NULL;
    if (bn_set(env, o, "outcome", bn_str(env, name)) || bn_set(env, o, "reason", reason) ||
        bn_set(env, o, "sessionId", bn_str(env, r->session_id)) ||
        bn_set(env, o, "previousId", bn_str(env, r->previous_id)) ||
        bn_set(env, o, "generation", bn_u64(env, r->generation)) ||
        bn_set(env, o, "lsn", bn_u64(env, r->lsn)) ||
        bn_set(env, o, "lastActivityMs", bn_i64(env, r->last_activity_ms)))
        return NULL;
    return o;
}

napi_value bn_record_value(napi_env env, const bindlog_record *r)
{
    napi_value o, key, origin;
    if (napi_create_object(env, &o) != napi_ok ||
        napi_create_string_utf8(env, r->key, r->key_len, &key) != napi_ok)
        return NULL;
    if (r->origin_present)
        origin = bn_buffer(env, r->origin, r->origin_len);
    else if (napi_get_null(env, &origin) != napi_ok)
        return NULL;
    if (bn_set(env, o, "lsn", bn_u64(env, r->lsn)) ||
        bn_set(env, o, "type", bn_str(env, bn_event_js_name(r->type))) ||
        bn_set(env, o, "timeMs", bn_i64(env, r->time_ms)) ||
        bn_set(env, o, "generation", bn_u64(env, r->generation)) || bn_set(env, o, "key", key) ||
        bn_set(env, o, "sessionId", bn_str(env, r->session_id)) ||
        bn_set(env, o, "otherId", bn_str(env, r->other_id)) ||
        bn_set(env, o, "reason", bn_str(env, r->reason)) || bn_set(env, o, "origin", origin))
        return NULL;
    return o;
}

/* ---- argument parsing ----------------------------------------------------------- */

static const char *type_name(napi_valuetype t)
{
    switch (t) {
    case napi_undefined:
        return "undefined";
    case napi_null:
        return "null";
    case napi_boolean:
        return "a boolean";
    case napi_number:
        return "a number";
    case napi_string:
        return "a string";
    case napi_symbol:
        return "a symbol";
    case napi_object:
        return "an object";
    case napi_function:
        return "a function";
    case napi_external:
        return "an external";
    case napi_bigint:
        return "a bigint";
    default:
        return "an unknown type";
    }
}

void bn_args_init(bn_args *a, napi_env env, const char *call)
{
    memset(a, 0, sizeof(*a));
    a->env = env;
    a->call = call;
    a->bad_index = -1;
}

void bn_args_free(bn_args *a)
{
    for (size_t i = 0; i < a->nallocs; i++)
        free(a->allocs[i]);
    free(a->allocs);
    a->allocs = NULL;
    a->nallocs = a->cap = 0;
}

void bn_args_release(bn_args *a, void ***allocs, size_t *nallocs)
{
    *allocs = a->allocs;
    *nallocs = a->nallocs;
    a->allocs = NULL;
    a->nallocs = a->cap = 0;
}

void *bn_args_alloc(bn_args *a, size_t n)
{
    void *p;
    if (a->nallocs == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 8;
        void **grown = realloc(a->allocs, cap * sizeof(*grown));
        if (grown == NULL)
            goto oom;
        a->allocs = grown;
        a->cap = cap;
    }
    if ((p = malloc(n ? n : 1)) == NULL)
        goto oom;
    a->allocs[a->nallocs++] = p;
    return p;
oom:
    if (a->status == BN_ARG_OK) {
        bn_throw(a->env, BINDLOG_ENOMEM, "out of memory copying arguments");
        a->status = BN_ARG_THROWN;
    }
    return NULL;
}

static int arg_type(bn_args *a, napi_value v, napi_valuetype *t)
{
    if (v == NULL) {
        *t = napi_undefined; /* a missing argument */
        return 0;
    }
    if (napi_typeof(a->env, v, t) != napi_ok) {
        bn_throw_napi(a->env, "napi_typeof");
        a->status = BN_ARG_THROWN;
        return -1;
    }
    return 0;
}

char *bn_arg_str(bn_args *a, napi_value v, const char *what, int optional)
{
    napi_valuetype t;
    size_t len = 0;
    char *s;
    if (a->status != BN_ARG_OK || arg_type(a, v, &t) != 0)
        return NULL;
    if (optional && (t == napi_undefined || t == napi_null))
        return NULL;
    if (t != napi_string) {
        bn_throw_type(a->env, "%s: %s must be a string%s, not %s", a->call, what,
                      optional ? " (or undefined)" : "", type_name(t));
        a->status = BN_ARG_THROWN;
        return NULL;
    }
    if (napi_get_value_string_utf8(a->env, v, NULL, 0, &len) != napi_ok ||
        (s = bn_args_alloc(a, len + 1)) == NULL ||
        napi_get_value_string_utf8(a->env, v, s, len + 1, &len) != napi_ok) {
        if (a->status == BN_ARG_OK) {
            bn_throw_napi(a->env, "napi_get_value_string_utf8");
            a->status = BN_ARG_THROWN;
        }
        return NULL;
    }
    if (strlen(s) != len) {
        /* C strings end at the first NUL: the library would see another key */
        snprintf(a->bad, sizeof a->bad, "%s: %s contains a NUL character", a->call, what);
        a->status = BN_ARG_BAD;
        return NULL;
    }
    return s;
}

void bn_arg_bytes(bn_args *a, napi_value v, const char *what, const void **p, size_t *n,
                  int *present)
{
    napi_valuetype t;
    bool is_ta = false;
    *p = NULL;
    *n = 0;
    *present = 0;
    if (a->status != BN_ARG_OK || arg_type(a, v, &t) != 0)
        return;
    if (t == napi_undefined || t == napi_null)
        return;
    if (t == napi_object && napi_is_typedarray(a->env, v, &is_ta) == napi_ok && is_ta) {
        napi_typedarray_type tt;
        size_t len;
        void *data;
        if (napi_get_typedarray_info(a->env, v, &tt, &len, &data, NULL, NULL) == napi_ok &&
            tt == napi_uint8_array) {
            void *copy = bn_args_alloc(a, len);
            if (copy == NULL)
                return;
            if (len)
                memcpy(copy, data, len);
            *p = copy;
            *n = len;
            *present = 1;
            return;
        }
    }
    bn_throw_type(a->env, "%s: %s must be a Buffer or Uint8Array, not %s", a->call, what,
                  type_name(t));
    a->status = BN_ARG_THROWN;
}

uint64_t bn_arg_u64(bn_args *a, napi_value v, const char *what)
{
    napi_valuetype t;
    if (a->status != BN_ARG_OK || arg_type(a, v, &t) != 0)
        return 0;
    if (t == napi_bigint) {
        uint64_t u = 0;
        bool lossless = false;
        if (napi_get_value_bigint_uint64(a->env, v, &u, &lossless) == napi_ok && lossless)
            return u;
        bn_throw_range(a->env, "%s: %s must be between 0 and 2^64 - 1", a->call, what);
        a->status = BN_ARG_THROWN;
        return 0;
    }
    if (t == napi_number) {
        double d = -1;
        napi_get_value_double(a->env, v, &d);
        if (d >= 0 && d <= (double)MAX_SAFE && floor(d) == d)
            return (uint64_t)d;
        bn_throw_range(a->env, "%s: %s must be a non-negative safe integer or a bigint", a->call,
                       what);
        a->status = BN_ARG_THROWN;
        return 0;
    }
    bn_throw_type(a->env, "%s: %s must be a number or a bigint, not %s", a->call, what,
                  type_name(t));
    a->status = BN_ARG_THROWN;
    return 0;
}

int bn_arg_bool(bn_args *a, napi_value v, const char *what)
{
    napi_valuetype t;
    bool b = false;
    if (a->status != BN_ARG_OK || arg_type(a, v, &t) != 0)
        return 0;
    if (t == napi_undefined)
        return 0;
    if (t != napi_boolean || napi_get_value_bool(a->env, v, &b) != napi_ok) {
        bn_throw_type(a->env, "%s: %s must be a boolean, not %s", a->call, what, type_name(t));
        a->status = BN_ARG_THROWN;
        return 0;
    }
    return b;
}

/* ---- module ---------------------------------------------------------------------- */

bn_module *bn_module_get(napi_env env)
{
    void *data = NULL;
    if (napi_get_instance_data(env, &data) != napi_ok)
        return NULL;
    return data;
}

static void module_free(napi_env env, void *data, void *hint)
{
    bn_module *m = data;
    (void)hint;
    napi_ref *refs[] = {&m->error_ctor, &m->closed_ctor, &m->is_current, &m->iter_ctor};
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++)
        if (*refs[i] != NULL)
            napi_delete_reference(env, *refs[i]);
    free(m);
}

/* init(BindlogError): the class every error is made from. */
static napi_value js_init(napi_env env, napi_callback_info info)
{
    size_t argc = 3;
    napi_value argv[3];
    napi_valuetype t, t2, t3;
    bn_module *m = bn_module_get(env);
    if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || m == NULL) {
        bn_throw_napi(env, "init");
        return NULL;
    }
    if (argc < 2 || napi_typeof(env, argv[0], &t) != napi_ok || t != napi_function ||
        napi_typeof(env, argv[1], &t2) != napi_ok || t2 != napi_function || argc < 3 ||
        napi_typeof(env, argv[2], &t3) != napi_ok || t3 != napi_function) {
        bn_throw_type(env, "init: the BindlogError and StoreClosedError classes and isCurrent are required");
        return NULL;
    }
    if (m->error_ctor != NULL)
        napi_delete_reference(env, m->error_ctor);
    if (m->closed_ctor != NULL)
        napi_delete_reference(env, m->closed_ctor);
    if (m->is_current != NULL)
        napi_delete_reference(env, m->is_current);
    m->error_ctor = m->closed_ctor = m->is_current = NULL;
    if (napi_create_reference(env, argv[0], 1, &m->error_ctor) != napi_ok ||
        napi_create_reference(env, argv[1], 1, &m->closed_ctor) != napi_ok ||
        napi_create_reference(env, argv[2], 1, &m->is_current) != napi_ok)
        bn_throw_napi(env, "napi_create_reference");
    return NULL;
}

static napi_value js_version(napi_env env, napi_callback_info info)
{
    (void)info;
    return bn_str(env, bindlog_version());
}

/* strerror(rc) -> [name, text]: for BindlogErrors made in JavaScript. */
static napi_value js_describe(napi_env env, napi_callback_info info)
{
    size_t argc = 1;
    napi_value argv[1], out;
    int32_t rc = 0;
    if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
        napi_get_value_int32(env, argv[0], &rc) != napi_ok) {
        bn_throw_type(env, "describe: rc must be a number");
        return NULL;
    }
    if (napi_create_array_with_length(env, 2, &out) != napi_ok ||
        napi_set_element(env, out, 0, bn_str(env, bindlog_code_name(rc))) != napi_ok ||
        napi_set_element(env, out, 1, bn_str(env, bindlog_strerror(rc))) != napi_ok)
        return NULL;
    return out;
}

NAPI_MODULE_INIT()
{
    bn_module *m = calloc(1, sizeof(*m));
    napi_property_descriptor fns[] = {
        {"init", NULL, js_init, NULL, NULL, NULL, napi_default, NULL},
        {"version", NULL, js_version, NULL, NULL, NULL, napi_default, NULL},
        {"describe", NULL, js_describe, NULL, NULL, NULL, napi_default, NULL},
    };
    if (m == NULL) {
        napi_throw_error(env, NULL, "bindlog addon: out of memory");
        return NULL;
    }
    if (napi_set_instance_data(env, m, module_free, NULL) != napi_ok) {
        free(m);
        bn_throw_napi(env, "napi_set_instance_data");
        return NULL;
    }
    if (napi_define_properties(env, exports, sizeof fns / sizeof fns[0], fns) != napi_ok) {
        bn_throw_napi(env, "napi_define_properties");
        return NULL;
    }
    if (bn_store_define(env, exports, m) != 0)
        return NULL;
    return exports;
}
