/*
 * store.c -- NativeStore (open, close, synchronous reads) and NativeIter
 * (history and log iterators) of the bindlog Node-API addon (addon.h).
 *
 * Reads run on the JavaScript thread: they take microseconds (one LMDB
 * read transaction, no flush) and readers never block writers, so a thread
 * hop would cost more than the read.  A NativeIter holds a snapshot open
 * (an LMDB read transaction) until it reaches its end or is closed; the
 * store closes every iterator still open when it shuts down, so that
 * bindlog_close() never runs with one open.
 */
#include "addon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bn_iter {
    bindlog_iter *it;     /* NULL once ended or closed */
    bn_store *st;         /* holds one of st->refs */
    napi_ref owner;       /* the NativeStore object, held while `it` is open, so
                             that the collector cannot close the store under a
                             loop that still reads (Store.open(d).history(k)) */
    bn_iter *prev, *next; /* in st->iters while `it` is open */
    int store_closed;     /* the store shut down under it */
};

/* ---- lifetime ------------------------------------------------------------------- */

void bn_store_unref(bn_store *st)
{
    if (--st->refs > 0)
        return;
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->work_cv);
    pthread_cond_destroy(&st->wait_cv);
    free(st->threads);
    free(st->origin_buf);
    free(st);
}

static void iter_unlink(bn_iter *it)
{
    if (it->prev != NULL)
        it->prev->next = it->next;
    else if (it->st->iters == it)
        it->st->iters = it->next;
    if (it->next != NULL)
        it->next->prev = it->prev;
    it->prev = it->next = NULL;
}

static void iter_close(bn_iter *it)
{
    if (it->it == NULL)
        return;
    bindlog_iter_close(it->it);
    it->it = NULL;
    iter_unlink(it);
    if (it->owner != NULL) {
        napi_delete_reference(it->st->env, it->owner);
        it->owner = NULL;
    }
}

static void cleanup_hook(void *arg)
{
    bn_store *st = arg;
    st->cleanup_hooked = 0; /* Node removes a hook once it ran */
    bn_store_shutdown(st);
}

void bn_store_shutdown(bn_store *st)
{
    if (st->db == NULL)
        return;
    /* Writes already accepted finish (their promises settle later, on the
     * loop); waits are answered "closed". */
    bn_writer_stop(st);
    while (st->iters != NULL) {
        st->iters->store_closed = 1;
        iter_close(st->iters);
    }
    bindlog_close(st->db);
    st->db = NULL;
    if (st->cleanup_hooked) {
        napi_remove_env_cleanup_hook(st->env, cleanup_hook, st);
        st->cleanup_hooked = 0;
    }
}

/* The garbage collector took the JS object: no job was pending (the object
 * is held strongly while one is). */
static void store_finalize(napi_env env, void *data, void *hint)
{
    bn_store *st = data;
    (void)hint;
    bn_store_shutdown(st);
    if (st->self != NULL) {
        napi_delete_reference(env, st->self);
        st->self = NULL;
    }
    bn_store_unref(st);
}

/* What `this` wraps, with the call's arguments; NULL with a TypeError
 * thrown ("not called on <what>") when it wraps nothing. */
static void *unwrap_this(napi_env env, napi_callback_info info, size_t *argc, napi_value *argv,
                         const char *what)
{
    napi_value self;
    void *data = NULL;
    size_t none = 0;
    if (napi_get_cb_info(env, info, argc != NULL ? argc : &none, argv, &self, NULL) != napi_ok ||
        napi_unwrap(env, self, &data) != napi_ok || data == NULL) {
        bn_throw_type(env, "bindlog: not called on %s", what);
        return NULL;
    }
    return data;
}

bn_store *bn_store_this(napi_env env, napi_callback_info info, size_t *argc, napi_value *argv)
{
    return unwrap_this(env, info, argc, argv, "a Store");
}

/* For reads: the store, or NULL with a BindlogError thrown when closed. */
static bn_store *open_this(napi_env env, napi_callback_info info, size_t *argc, napi_value *argv,
                           const char *call)
{
    bn_store *st = bn_store_this(env, info, argc, argv);
    if (st != NULL && st->db == NULL) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s: the store is closed", call);
        bn_throw(env, BN_ECLOSED, msg);
        return NULL;
    }
    return st;
}

/* Finish argument parsing of a read: 0, or -1 with an error thrown. */
static int args_done(bn_args *a)
{
    if (a->status == BN_ARG_BAD)
        bn_throw(a->env, BINDLOG_EINVAL, a->bad);
    return a->status == BN_ARG_OK ? 0 : -1;
}

/* ---- open and close ------------------------------------------------------------- */

/* new NativeStore(dir, durability, readOnly, writerThreads) */
static napi_value store_ctor(napi_env env, napi_callback_info info)
{
    size_t argc = 4;
    napi_value argv[4], self;
    bn_args a;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *db = NULL;
    bn_store *st;
    int32_t durability = 0;
    uint32_t threads = 0;
    int rc;

    if (napi_get_cb_info(env, info, &argc, argv, &self, NULL) != napi_ok) {
        bn_throw_napi(env, "napi_get_cb_info");
        return NULL;
    }
    bn_args_init(&a, env, "open");
    const char *dir = bn_arg_str(&a, argv[0], "dir", 0);
    if (a.status == BN_ARG_OK && (napi_get_value_int32(env, argv[1], &durability) != napi_ok ||
                                  napi_get_value_uint32(env, argv[3], &threads) != napi_ok)) {
        bn_throw_type(env, "open: durability and writerThreads must be numbers");
        a.status = BN_ARG_THROWN;
    }
    o.read_only = bn_arg_bool(&a, argv[2], "readOnly");
    if (args_done(&a) != 0)
        goto fail;
    o.durability = durability;
    if ((rc = bindlog_open(&db, dir, &o)) != 0) {
        bn_throw(env, rc, bindlog_last_error());
        goto fail;
    }
    if ((st = calloc(1, sizeof(*st))) == NULL ||
        (st->origin_buf = malloc(BINDLOG_ORIGIN_MAX)) == NULL) {
        free(st);
        bindlog_close(db);
        bn_throw(env, BINDLOG_ENOMEM, "open: out of memory");
        goto fail;
    }
    bn_args_free(&a);
    st->db = db;
    st->env = env;
    st->max_threads = threads < 1 ? 1 : threads;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->work_cv, NULL);
    pthread_cond_init(&st->wait_cv, NULL);
    atomic_init(&st->stopping, 0);
    st->refs = 1; /* the JS object */
    if (napi_wrap(env, self, st, store_finalize, NULL, &st->self) != napi_ok) {
        bindlog_close(db);
        st->db = NULL;
        bn_store_unref(st);
        bn_throw_napi(env, "napi_wrap");
        return NULL;
    }
    if (bn_writer_init(env, st) != 0) {
        bn_store_shutdown(st); /* the finalizer frees it */
        return NULL;
    }
    if (napi_add_env_cleanup_hook(env, cleanup_hook, st) == napi_ok)
        st->cleanup_hooked = 1;
    return self;
fail:
    bn_args_free(&a);
    return NULL;
}

static napi_value store_close(napi_env env, napi_callback_info info)
{
    bn_store *st = bn_store_this(env, info, NULL, NULL);
    if (st != NULL)
        bn_store_shutdown(st);
    return NULL;
}

static napi_value store_closed(napi_env env, napi_callback_info info)
{
    napi_value v = NULL;
    bn_store *st = bn_store_this(env, info, NULL, NULL);
    if (st != NULL)
        napi_get_boolean(env, st->db == NULL, &v);
    return v;
}

/* ---- reads ------------------------------------------------------------------------ */

/*
 * get(key), session(id) and historyIter(key) take one string.  Each answers
 * with a function of this type, given the string as copied (s) and as
 * JavaScript passed it (arg); NULL when it threw.
 */
typedef napi_value answer_fn(napi_env env, napi_callback_info info, bn_store *st, napi_value arg,
                             const char *s);

/* `call` with its string argument `what` ("key"), answered by `answer`. */
static napi_value read_str(napi_env env, napi_callback_info info, const char *call,
                           const char *what, answer_fn *answer)
{
    size_t argc = 1;
    napi_value argv[1], out = NULL;
    bn_args a;
    bn_store *st = open_this(env, info, &argc, argv, call);
    if (st == NULL)
        return NULL;
    bn_args_init(&a, env, call);
    const char *s = bn_arg_str(&a, argv[0], what, 0);
    if (args_done(&a) == 0)
        out = answer(env, info, st, argv[0], s);
    bn_args_free(&a);
    return out;
}

/* A lookup that failed (rc < 0): null when there is nothing (ENOTFOUND),
 * else NULL with the error thrown. */
static napi_value not_found(napi_env env, int rc)
{
    napi_value v = NULL;
    if (rc == BINDLOG_ENOTFOUND)
        napi_get_null(env, &v);
    else
        bn_throw(env, rc, bindlog_last_error());
    return v;
}

static napi_value get_answer(napi_env env, napi_callback_info info, bn_store *st, napi_value key,
                             const char *s)
{
    bindlog_binding b;
    napi_value o;
    int rc = bindlog_get(st->db, s, &b);
    (void)info;
    if (rc < 0)
        return not_found(env, rc);
    if (napi_create_object(env, &o) != napi_ok || bn_set(env, o, "key", key) ||
        bn_set(env, o, "sessionId", bn_str(env, b.session_id)) ||
        bn_set(env, o, "generation", bn_u64(env, b.generation)) ||
        bn_set(env, o, "lsn", bn_u64(env, b.lsn)) ||
        bn_set(env, o, "updatedMs", bn_i64(env, b.updated_ms)) ||
        bn_set(env, o, "lastActivityMs", bn_i64(env, b.last_activity_ms))) {
        bn_throw_napi(env, "get");
        return NULL;
    }
    return o;
}

/* get(key) -> { key, sessionId, generation, lsn, updatedMs, lastActivityMs } | null */
static napi_value store_get(napi_env env, napi_callback_info info)
{
    return read_str(env, info, "get", "key", get_answer);
}

static napi_value session_answer(napi_env env, napi_callback_info info, bn_store *st,
                                 napi_value arg, const char *id)
{
    bindlog_session s;
    napi_value o;
    int rc = bindlog_session_get(st->db, id, &s, st->origin_buf, BINDLOG_ORIGIN_MAX);
    (void)info;
    (void)arg;
    if (rc < 0)
        return not_found(env, rc);
    size_t n = s.origin_len < BINDLOG_ORIGIN_MAX ? s.origin_len : BINDLOG_ORIGIN_MAX;
    if (napi_create_object(env, &o) != napi_ok || bn_set(env, o, "id", bn_str(env, s.session_id)) ||
        bn_set(env, o, "key", bn_str(env, s.key)) ||
        bn_set(env, o, "parentId", bn_str(env, s.parent_id)) ||
        bn_set(env, o, "createdLsn", bn_u64(env, s.created_lsn)) ||
        bn_set(env, o, "createdMs", bn_i64(env, s.created_ms)) ||
        bn_set(env, o, "endedLsn", bn_u64(env, s.ended_lsn)) ||
        bn_set(env, o, "endedMs", bn_i64(env, s.ended_ms)) ||
        bn_set(env, o, "endReason", bn_str(env, s.end_reason)) ||
        bn_set(env, o, "origin", bn_buffer(env, st->origin_buf, n))) {
        bn_throw_napi(env, "session");
        return NULL;
    }
    return o;
}

/* session(id) -> { id, key, parentId, createdLsn, createdMs, endedLsn,
 * endedMs, endReason, origin } | null */
static napi_value store_session(napi_env env, napi_callback_info info)
{
    return read_str(env, info, "session", "id", session_answer);
}

static const char *durability_name(int d)
{
    if (d == BINDLOG_DURABILITY_FULL)
        return "full";
    return d == BINDLOG_DURABILITY_NORMAL ? "normal" : "none";
}

static napi_value store_stats(napi_env env, napi_callback_info info)
{
    bindlog_stats s;
    napi_value o, applied;
    bn_store *st = open_this(env, info, NULL, NULL, "stats");
    if (st == NULL)
        return NULL;
    int rc = bindlog_stats_get(st->db, &s);
    if (rc < 0) {
        bn_throw(env, rc, bindlog_last_error());
        return NULL;
    }
    if (napi_create_object(env, &o) != napi_ok || napi_create_object(env, &applied) != napi_ok)
        goto fail;
    for (int t = 1; t < BINDLOG_EVENT_COUNT; t++)
        if (bn_set(env, applied, bn_event_js_name(t), bn_u64(env, s.applied[t])))
            goto fail;
    if (bn_set(env, o, "headLsn", bn_u64(env, s.head_lsn)) ||
        bn_set(env, o, "baseLsn", bn_u64(env, s.base_lsn)) ||
        bn_set(env, o, "logRecords", bn_u64(env, s.log_records)) ||
        bn_set(env, o, "bindings", bn_u64(env, s.bindings)) ||
        bn_set(env, o, "liveBindings", bn_u64(env, s.live_bindings)) ||
        bn_set(env, o, "sessions", bn_u64(env, s.sessions)) ||
        bn_set(env, o, "liveSessions", bn_u64(env, s.live_sessions)) ||
        bn_set(env, o, "applied", applied) || bn_set(env, o, "commits", bn_u64(env, s.commits)) ||
        bn_set(env, o, "groupedEvents", bn_u64(env, s.grouped_events)) ||
        bn_set(env, o, "mapSize", bn_u64(env, s.map_size)) ||
        bn_set(env, o, "mapUsed", bn_u64(env, s.map_used)) ||
        bn_set(env, o, "fileSize", bn_u64(env, s.file_size)) ||
        bn_set(env, o, "readersUsed", bn_u64(env, s.readers_used)) ||
        bn_set(env, o, "readersMax", bn_u64(env, s.readers_max)) ||
        bn_set(env, o, "durability", bn_str(env, durability_name(s.durability))) ||
        bn_set(env, o, "formatVersion", bn_u64(env, s.format_version)))
        goto fail;
    return o;
fail:
    bn_throw_napi(env, "stats");
    return NULL;
}

static napi_value store_digest(napi_env env, napi_callback_info info)
{
    unsigned char d[BINDLOG_DIGEST_SIZE];
    char hex[2 * BINDLOG_DIGEST_SIZE + 1];
    bn_store *st = open_this(env, info, NULL, NULL, "digest");
    if (st == NULL)
        return NULL;
    int rc = bindlog_digest(st->db, d, NULL);
    if (rc < 0) {
        bn_throw(env, rc, bindlog_last_error());
        return NULL;
    }
    bindlog_digest_hex(d, hex);
    return bn_str(env, hex);
}

/* head() -> the head LSN, read at once (bindlog_wait with timeout 0). */
static napi_value store_head(napi_env env, napi_callback_info info)
{
    uint64_t head = 0;
    bn_store *st = open_this(env, info, NULL, NULL, "head");
    if (st == NULL)
        return NULL;
    int rc = bindlog_wait(st->db, UINT64_MAX, 0, &head);
    if (rc < 0) {
        bn_throw(env, rc, bindlog_last_error());
        return NULL;
    }
    return bn_u64(env, head);
}

static napi_value store_path(napi_env env, napi_callback_info info)
{
    bn_store *st = open_this(env, info, NULL, NULL, "path");
    return st != NULL ? bn_str(env, bindlog_path(st->db)) : NULL;
}

/* ---- iterators ------------------------------------------------------------------------ */

static void iter_finalize(napi_env env, void *data, void *hint)
{
    bn_iter *it = data;
    (void)env;
    (void)hint;
    iter_close(it);
    bn_store_unref(it->st);
    free(it);
}

/* A new NativeIter over `bit`, which the call on `info` (a NativeStore
 * method) opened with rc; NULL with the error thrown when rc < 0 or the
 * iterator cannot be made (then `bit` is closed). */
static napi_value iter_new(napi_env env, napi_callback_info info, bn_store *st, int rc,
                           bindlog_iter *bit)
{
    bn_module *m = bn_module_get(env);
    napi_value self, ctor, obj;
    bn_iter *it;
    if (rc < 0) {
        bn_throw(env, rc, bindlog_last_error());
        return NULL;
    }
    it = calloc(1, sizeof(*it));
    if (it == NULL || m == NULL ||
        napi_get_cb_info(env, info, NULL, NULL, &self, NULL) != napi_ok ||
        napi_get_reference_value(env, m->iter_ctor, &ctor) != napi_ok ||
        napi_new_instance(env, ctor, 0, NULL, &obj) != napi_ok ||
        napi_wrap(env, obj, it, iter_finalize, NULL, NULL) != napi_ok) {
        free(it);
        bindlog_iter_close(bit);
        bn_throw_napi(env, "creating an iterator");
        return NULL;
    }
    it->it = bit;
    it->st = st;
    st->refs++;
    /* the NativeStore object: see bn_iter.owner */
    if (napi_create_reference(env, self, 1, &it->owner) != napi_ok)
        it->owner = NULL; /* only the lifetime guard is lost */
    it->next = st->iters;
    if (st->iters != NULL)
        st->iters->prev = it;
    st->iters = it;
    return obj;
}

static napi_value history_answer(napi_env env, napi_callback_info info, bn_store *st,
                                 napi_value arg, const char *key)
{
    bindlog_iter *bit = NULL;
    int rc = bindlog_history_iter(st->db, key, &bit);
    (void)arg;
    return iter_new(env, info, st, rc, bit);
}

/* historyIter(key) */
static napi_value store_history_iter(napi_env env, napi_callback_info info)
{
    return read_str(env, info, "history", "key", history_answer);
}

/* logIter(from, to) */
static napi_value store_log_iter(napi_env env, napi_callback_info info)
{
    size_t argc = 2;
    napi_value argv[2], out = NULL;
    bn_args a;
    bn_store *st = open_this(env, info, &argc, argv, "log");
    if (st == NULL)
        return NULL;
    bn_args_init(&a, env, "log");
    uint64_t from = bn_arg_u64(&a, argv[0], "from");
    uint64_t to = bn_arg_u64(&a, argv[1], "to");
    if (args_done(&a) == 0) {
        bindlog_iter *bit = NULL;
        int rc = bindlog_log_iter(st->db, from, to, &bit);
        out = iter_new(env, info, st, rc, bit);
    }
    bn_args_free(&a);
    return out;
}

static bn_iter *iter_this(napi_env env, napi_callback_info info)
{
    return unwrap_this(env, info, NULL, NULL, "an iterator");
}

/* next() -> a record, or null at the end (the snapshot is released then). */
static napi_value iter_next(napi_env env, napi_callback_info info)
{
    bindlog_record rec;
    napi_value out = NULL;
    bn_iter *it = iter_this(env, info);
    if (it == NULL)
        return NULL;
    if (it->store_closed) {
        bn_throw(env, BN_ECLOSED, "iterator: the store was closed");
        return NULL;
    }
    if (it->it == NULL) {
        napi_get_null(env, &out);
        return out;
    }
    int rc = bindlog_iter_next_record(it->it, &rec);
    if (rc == 1) {
        if ((out = bn_record_value(env, &rec)) == NULL)
            bn_throw_napi(env, "iterator");
        return out;
    }
    if (rc < 0) {
        bn_throw(env, rc, bindlog_last_error());
        iter_close(it);
        return NULL;
    }
    iter_close(it);
    napi_get_null(env, &out);
    return out;
}

static napi_value iter_close_js(napi_env env, napi_callback_info info)
{
    bn_iter *it = iter_this(env, info);
    if (it != NULL)
        iter_close(it);
    return NULL;
}

static napi_value iter_ctor(napi_env env, napi_callback_info info)
{
    napi_value self = NULL;
    napi_get_cb_info(env, info, NULL, NULL, &self, NULL);
    return self;
}

/* ---- class definitions ----------------------------------------------------------------- */

#define METHOD_DATA(name, fn, data)                                                                \
    {                                                                                              \
        name, NULL, fn, NULL, NULL, NULL, napi_default, data                                       \
    }
#define METHOD(name, fn) METHOD_DATA(name, fn, NULL)
/* A write or wait() (writer.c): the callback that makes its job, with the
 * method as its data; a *Sync twin is the same method with bn_job_sync. */
#define METHOD_JOB(name, m)  METHOD_DATA(name, bn_job_async, (void *)&m)
#define METHOD_SYNC(name, m) METHOD_DATA(name, bn_job_sync, (void *)&m)

int bn_store_define(napi_env env, napi_value exports, bn_module *m)
{
    napi_value store_cls, iter_cls;
    napi_property_descriptor store_props[] = {
        METHOD("close", store_close),
        METHOD("closed", store_closed),
        METHOD_JOB("bind", bn_write_bind),
        METHOD_JOB("newSession", bn_write_new_session),
        METHOD_JOB("split", bn_write_split),
        METHOD_JOB("invalidate", bn_write_invalidate),
        METHOD_JOB("unbind", bn_write_unbind),
        METHOD_JOB("applyBatch", bn_write_batch),
        METHOD_JOB("importEntries", bn_write_import),
        METHOD_JOB("route", bn_write_route),
        METHOD_JOB("expire", bn_write_expire),
        METHOD_SYNC("bindSync", bn_write_bind),
        METHOD_SYNC("newSessionSync", bn_write_new_session),
        METHOD_SYNC("splitSync", bn_write_split),
        METHOD_SYNC("invalidateSync", bn_write_invalidate),
        METHOD_SYNC("unbindSync", bn_write_unbind),
        METHOD_SYNC("applyBatchSync", bn_write_batch),
        METHOD_SYNC("importEntriesSync", bn_write_import),
        METHOD_SYNC("routeSync", bn_write_route),
        METHOD_SYNC("expireSync", bn_write_expire),
        METHOD_JOB("wait", bn_wait),
        METHOD("cancelWait", bn_wait_cancel),
        METHOD("get", store_get),
        METHOD("session", store_session),
        METHOD("stats", store_stats),
        METHOD("digest", store_digest),
        METHOD("head", store_head),
        METHOD("path", store_path),
        METHOD("historyIter", store_history_iter),
        METHOD("logIter", store_log_iter),
    };
    napi_property_descriptor iter_props[] = {
        METHOD("next", iter_next),
        METHOD("close", iter_close_js),
    };
    if (napi_define_class(env, "NativeStore", NAPI_AUTO_LENGTH, store_ctor, NULL,
                          sizeof store_props / sizeof store_props[0], store_props,
                          &store_cls) != napi_ok ||
        napi_define_class(env, "NativeIter", NAPI_AUTO_LENGTH, iter_ctor, NULL,
                          sizeof iter_props / sizeof iter_props[0], iter_props,
                          &iter_cls) != napi_ok ||
        napi_create_reference(env, iter_cls, 1, &m->iter_ctor) != napi_ok ||
        napi_set_named_property(env, exports, "NativeStore", store_cls) != napi_ok) {
        bn_throw_napi(env, "defining the classes");
        return -1;
    }
    return 0;
}
