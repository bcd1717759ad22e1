/*
 * writer.c -- writes and waits off the JavaScript thread (addon.h).
 *
 * Every write call copies its arguments into a job and returns a promise at
 * once.  The job goes on its store's queue, where one of the store's writer
 * threads takes it and makes the blocking bindlog call.  Several writer
 * threads (up to the option writerThreads, 16 by default, started as the
 * queue needs them) call the library at once, so concurrent promises land in
 * one of the library's group commits: one transaction and one flush for all
 * of them.  The threads are the store's own, not libuv's pool: a write in
 * FULL durability waits for a flush, and four of those would otherwise hold
 * up every fs.readFile and dns.lookup of the process.
 *
 * Waits (follow()) go to one waiter thread per store, which sleeps in
 * bindlog_wait() for the lowest LSN any follower waits past, in slices of
 * WAIT_SLICE_MS so that a cancelled wait (a `break` out of `for await`) and
 * close() are answered within one slice.
 *
 * A finished job goes back through the store's threadsafe function; its
 * callback, on the JavaScript thread, settles the promise: a result object,
 * or a BindlogError whose message is bindlog_last_error() as read in the
 * writer thread right after the call (the message is thread-local).
 */
#include "addon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_SLICE_MS 25

enum { JOB_EVENT, JOB_BATCH, JOB_IMPORT, JOB_WAIT, JOB_ROUTE, JOB_EXPIRE };

struct bn_job {
    bn_job *next;
    bn_store *st;
    int kind;
    napi_deferred deferred;
    void **allocs; /* the copied arguments */
    size_t nallocs;
    /* JOB_EVENT: ev[0], one result; JOB_BATCH: n events and results */
    bindlog_event *ev;
    size_t n;
    bindlog_result *results;
    bindlog_event one_ev;
    bindlog_result one;
    /* JOB_ROUTE: one_ev holds the key, the fresh session id (session_id)
     * and the origin */
    int64_t now_ms;
    bindlog_policy policy;
    bindlog_route_result route;
    /* JOB_EXPIRE */
    int64_t cutoff_ms;
    const char *prefix;
    int dry_run;
    uint64_t count;
    /* JOB_IMPORT: n entries, with results and per-entry codes */
    bindlog_import_entry *entries;
    int *codes;
    /* outcome */
    int rc;           /* outcome or error (JOB_WAIT: 0 or error) */
    size_t err_index; /* JOB_BATCH: the failing event */
    char *msg;        /* bindlog_last_error() of a failed call */
    /* JOB_WAIT */
    uint32_t id;
    uint64_t after, head;
    int ended; /* answered because cancelled or closing */
    atomic_int cancel;
};

static void job_free(bn_job *job)
{
    for (size_t i = 0; i < job->nallocs; i++)
        free(job->allocs[i]);
    free(job->allocs);
    free(job->msg);
    free(job);
}

static void job_error(bn_job *job, int rc)
{
    const char *m = bindlog_last_error();
    job->rc = rc;
    job->msg = strdup(m != NULL ? m : "");
}

/* ---- completion (JavaScript thread) --------------------------------------------- */

static void settled(napi_env env, bn_store *st)
{
    if (--st->pending > 0)
        return;
    if (!st->tsfn_released)
        napi_unref_threadsafe_function(env, st->tsfn);
    if (st->self != NULL)
        napi_reference_unref(env, st->self, NULL);
}

static napi_value job_value(napi_env env, bn_job *job)
{
    napi_value v = NULL;
    if (job->kind == JOB_EVENT)
        return bn_result_value(env, &job->one);
    if (job->kind == JOB_ROUTE)
        return bn_route_result_value(env, job->rc, &job->route);
    if (job->kind == JOB_EXPIRE)
        return bn_u64(env, job->count);
    if (job->kind == JOB_WAIT) {
        if (job->ended)
            napi_create_int32(env, -1, &v);
        else
            v = bn_u64(env, job->head);
        return v;
    }
    if (napi_create_array_with_length(env, job->n, &v) != napi_ok)
        return NULL;
    for (size_t i = 0; i < job->n; i++) {
        napi_value r;
        if (job->kind == JOB_IMPORT && job->codes[i] < 0) {
            /* a refused entry: its error, made here (the library gives a
             * code per entry and no message) */
            char msg[BINDLOG_KEY_MAX + 96];
            snprintf(msg, sizeof msg, "importEntries %.*s: %s", BINDLOG_KEY_MAX,
                     job->entries[i].key, bindlog_strerror(job->codes[i]));
            r = bn_error_value(env, job->codes[i], msg, (long)i);
        } else {
            r = bn_result_value(env, &job->results[i]);
        }
        if (r == NULL || napi_set_element(env, v, (uint32_t)i, r) != napi_ok)
            return NULL;
    }
    return v;
}

/* A finished job's outcome for JavaScript: 0 with its value in *out, or -1
 * with the error to reject or throw (a BindlogError; NULL when even that
 * could not be made). */
static int job_outcome(napi_env env, bn_job *job, napi_value *out)
{
    if (job->rc < 0) {
        long index = job->kind == JOB_BATCH ? (long)job->err_index : -1;
        *out = bn_error_value(env, job->rc, job->msg, index);
        return -1;
    }
    if ((*out = job_value(env, job)) != NULL)
        return 0;
    *out = bn_error_value(env, BINDLOG_ENOMEM, "making the result", -1);
    return -1;
}

static void call_js(napi_env env, napi_value js_cb, void *context, void *data)
{
    bn_job *job = data;
    napi_value v;
    (void)js_cb;
    (void)context;
    if (env == NULL) { /* the environment is going away: nobody to tell */
        job_free(job);
        return;
    }
    if (job_outcome(env, job, &v) == 0)
        napi_resolve_deferred(env, job->deferred, v);
    else if (v != NULL)
        napi_reject_deferred(env, job->deferred, v);
    settled(env, job->st);
    job_free(job);
}

/* From a worker thread: hand the job back, or drop it when the environment
 * is being torn down (its threadsafe function no longer takes calls). */
static void deliver(bn_store *st, bn_job *job)
{
    if (napi_call_threadsafe_function(st->tsfn, job, napi_tsfn_nonblocking) != napi_ok)
        job_free(job);
}

static void tsfn_finalize(napi_env env, void *data, void *hint)
{
    (void)env;
    (void)hint;
    bn_store_unref(data);
}

int bn_writer_init(napi_env env, bn_store *st)
{
    napi_value name;
    if (napi_create_string_utf8(env, "bindlog writer", NAPI_AUTO_LENGTH, &name) != napi_ok ||
        napi_create_threadsafe_function(env, NULL, NULL, name, 0, 1, st, tsfn_finalize, NULL,
                                        call_js, &st->tsfn) != napi_ok) {
        st->tsfn = NULL;
        st->tsfn_released = 1;
        bn_throw_napi(env, "napi_create_threadsafe_function");
        return -1;
    }
    st->refs++; /* until tsfn_finalize */
    /* Nothing pending: the store must not keep the process alive. */
    napi_unref_threadsafe_function(env, st->tsfn);
    return 0;
}

/* ---- the threads ---------------------------------------------------------------------- */

/* One event's write (JOB_EVENT). */
static int run_event(bindlog *db, const bindlog_event *e, bindlog_result *r)
{
    switch (e->type) {
    case BINDLOG_EVENT_BIND:
        return bindlog_bind(db, e->key, e->session_id, e->expect, e->reason, e->origin,
                            e->origin_len, r);
    case BINDLOG_EVENT_NEW_SESSION:
        return bindlog_new_session(db, e->key, e->session_id, e->reason, e->origin, e->origin_len,
                                   r);
    case BINDLOG_EVENT_SPLIT:
        return bindlog_split(db, e->key, e->expect, e->session_id, e->generation, e->origin,
                             e->origin_len, r);
    case BINDLOG_EVENT_INVALIDATE:
        return bindlog_invalidate(db, e->key, e->reason, r);
    default:
        return bindlog_unbind(db, e->key, e->reason, r);
    }
}

/* Make the job's bindlog call: job->rc its outcome, or the error with its
 * message (read here: bindlog_last_error() is per thread). */
static void run_write(bn_store *st, bn_job *job)
{
    const bindlog_event *e = &job->one_ev;
    int rc;
    switch (job->kind) {
    case JOB_ROUTE:
        rc = bindlog_route(st->db, e->key, job->now_ms, &job->policy, e->session_id, e->origin,
                           e->origin_len, &job->route);
        break;
    case JOB_EXPIRE:
        rc = bindlog_expire(st->db, job->cutoff_ms, job->prefix, job->dry_run, &job->count);
        break;
    case JOB_IMPORT:
        rc = bindlog_import_entries(st->db, job->entries, job->n, job->results, job->codes, NULL,
                                    NULL);
        break;
    case JOB_BATCH:
        rc = bindlog_apply_batch(st->db, job->ev, job->n, job->results, &job->err_index);
        break;
    default:
        rc = run_event(st->db, e, &job->one);
        break;
    }
    if (rc < 0)
        job_error(job, rc);
    else
        job->rc = rc;
}

static void *writer_main(void *arg)
{
    bn_store *st = arg;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        bn_job *job = st->head;
        if (job != NULL) {
            st->head = job->next;
            if (st->head == NULL)
                st->tail = NULL;
            st->nqueued--;
            pthread_mutex_unlock(&st->mu);
            run_write(st, job);
            deliver(st, job);
            pthread_mutex_lock(&st->mu);
            continue;
        }
        if (atomic_load(&st->stopping))
            break; /* queue drained: every accepted write was made */
        st->idle++;
        pthread_cond_wait(&st->work_cv, &st->mu);
        st->idle--;
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

/* Answer every wait that is cancelled, or all of them when stopping, or
 * those the head passed (rc 0), or all with an error (rc < 0).  mu held. */
static void answer_waits(bn_store *st, int rc, uint64_t head, int check_head)
{
    int stopping = atomic_load(&st->stopping);
    bn_job **pp = &st->waits;
    while (*pp != NULL) {
        bn_job *job = *pp;
        int done = 0;
        if (stopping || atomic_load(&job->cancel)) {
            job->ended = 1;
            done = 1;
        } else if (check_head && rc < 0) {
            job->rc = rc;
            job->msg = strdup(bindlog_last_error());
            done = 1;
        } else if (check_head && head > job->after) {
            job->head = head;
            done = 1;
        }
        if (done) {
            *pp = job->next;
            deliver(st, job);
        } else {
            pp = &job->next;
        }
    }
}

static void *waiter_main(void *arg)
{
    bn_store *st = arg;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        answer_waits(st, 0, 0, 0);
        if (atomic_load(&st->stopping))
            break;
        if (st->waits == NULL) {
            pthread_cond_wait(&st->wait_cv, &st->mu);
            continue;
        }
        uint64_t after = UINT64_MAX, head = 0;
        for (bn_job *j = st->waits; j != NULL; j = j->next)
            if (j->after < after)
                after = j->after;
        pthread_mutex_unlock(&st->mu);
        int rc = bindlog_wait(st->db, after, WAIT_SLICE_MS, &head);
        pthread_mutex_lock(&st->mu);
        answer_waits(st, rc, head, 1);
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

void bn_writer_stop(bn_store *st)
{
    pthread_mutex_lock(&st->mu);
    atomic_store(&st->stopping, 1);
    pthread_cond_broadcast(&st->work_cv);
    pthread_cond_broadcast(&st->wait_cv);
    unsigned n = st->nthreads;
    int has_waiter = st->has_waiter;
    pthread_mutex_unlock(&st->mu);
    /* No new thread starts now (submit refuses a closed store), so the
     * array is stable. */
    for (unsigned i = 0; i < n; i++)
        pthread_join(st->threads[i], NULL);
    if (has_waiter)
        pthread_join(st->waiter, NULL);
    if (!st->tsfn_released) {
        /* The queued completions are still delivered; then the function
         * is finalized (tsfn_finalize) and no longer holds the loop. */
        napi_release_threadsafe_function(st->tsfn, napi_tsfn_release);
        st->tsfn_released = 1;
    }
}

/* ---- submission (JavaScript thread) --------------------------------------------------- */

static napi_value rejected(napi_env env, int rc, const char *msg, long index)
{
    napi_deferred d;
    napi_value promise, err;
    if (napi_create_promise(env, &d, &promise) != napi_ok ||
        (err = bn_error_value(env, rc, msg, index)) == NULL ||
        napi_reject_deferred(env, d, err) != napi_ok) {
        bn_throw_napi(env, "napi_create_promise");
        return NULL;
    }
    return promise;
}

/* Start a thread for the queue when no idle one can take the new job.
 * mu held.  0, or -1 when none could start and none exists. */
static int maybe_spawn(bn_store *st, int wait)
{
    if (wait) {
        if (st->has_waiter)
            return 0;
        if (pthread_create(&st->waiter, NULL, waiter_main, st) != 0)
            return -1;
        st->has_waiter = 1;
        return 0;
    }
    if (st->nqueued <= st->idle || st->nthreads >= st->max_threads)
        return 0;
    if (st->threads == NULL && (st->threads = calloc(st->max_threads, sizeof(pthread_t))) == NULL)
        return st->nthreads > 0 ? 0 : -1;
    if (pthread_create(&st->threads[st->nthreads], NULL, writer_main, st) != 0)
        return st->nthreads > 0 ? 0 : -1;
    st->nthreads++;
    return 0;
}

/* Queue a job and return its promise; the job is freed on every path. */
static napi_value submit(napi_env env, bn_store *st, bn_job *job)
{
    napi_value promise;
    int wait = job->kind == JOB_WAIT;
    job->st = st;
    if (napi_create_promise(env, &job->deferred, &promise) != napi_ok) {
        job_free(job);
        bn_throw_napi(env, "napi_create_promise");
        return NULL;
    }
    pthread_mutex_lock(&st->mu);
    if (wait) {
        job->next = st->waits;
        st->waits = job;
    } else {
        if (st->tail != NULL)
            st->tail->next = job;
        else
            st->head = job;
        st->tail = job;
        st->nqueued++;
    }
    if (maybe_spawn(st, wait) != 0) {
        /* no thread to run it: take it back and refuse it */
        if (wait) {
            st->waits = job->next;
        } else {
            bn_job *prev = NULL; /* the job is the tail */
            for (bn_job *j = st->head; j != job; j = j->next)
                prev = j;
            if (prev != NULL)
                prev->next = NULL;
            else
                st->head = NULL;
            st->tail = prev;
            st->nqueued--;
        }
        pthread_mutex_unlock(&st->mu);
        napi_value err = bn_error_value(env, BINDLOG_ENOMEM, "could not start a writer thread", -1);
        if (err != NULL)
            napi_reject_deferred(env, job->deferred, err);
        job_free(job);
        return promise;
    }
    pthread_mutex_unlock(&st->mu);
    /* after the unlock, so that the woken thread does not block on mu */
    pthread_cond_signal(wait ? &st->wait_cv : &st->work_cv);

    if (st->pending++ == 0) {
        napi_ref_threadsafe_function(env, st->tsfn);
        napi_reference_ref(env, st->self, NULL);
    }
    return promise;
}

/* A synchronous write (the *Sync methods): the job runs here, on the
 * JavaScript thread, and its value is returned or its error thrown.  The
 * library is thread-safe, so it may run while writer threads make other
 * writes of the same store; they share group commits as usual. */
static napi_value run_sync(napi_env env, bn_store *st, bn_job *job)
{
    napi_value v;
    run_write(st, job);
    if (job_outcome(env, job, &v) != 0) {
        bn_throw_error(env, v);
        v = NULL;
    }
    job_free(job);
    return v;
}

/* A refused call: a rejected promise, or for a *Sync call the error thrown. */
static napi_value refuse(napi_env env, int sync, int rc, const char *msg, long index)
{
    if (!sync)
        return rejected(env, rc, msg, index);
    bn_throw_error(env, bn_error_value(env, rc, msg, index));
    return NULL;
}

/* The end of a call's parsing: a TypeError already thrown, a refusal for
 * a closed store or a bad value, or the job queued (a *Sync call: the job
 * made at once).  `job` (NULL: out of memory) is freed on every path. */
static napi_value finish(napi_env env, bn_store *st, bn_args *a, bn_job *job, int sync)
{
    napi_value out;
    if (a->status == BN_ARG_THROWN) {
        out = NULL;
    } else if (st->db == NULL) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s: the store is closed", a->call);
        out = refuse(env, sync, BN_ECLOSED, msg, -1);
    } else if (a->status == BN_ARG_BAD) {
        out = refuse(env, sync, BINDLOG_EINVAL, a->bad, a->bad_index);
    } else if (job == NULL) {
        out = refuse(env, sync, BINDLOG_ENOMEM, "out of memory", -1);
    } else {
        bn_args_release(a, &job->allocs, &job->nallocs);
        if (sync) {
            job->st = st;
            return run_sync(env, st, job);
        }
        return submit(env, st, job);
    }
    free(job);
    bn_args_free(a);
    return out;
}

/* ---- the methods (JavaScript thread) ------------------------------------------------ */

/* The most arguments a method takes (route).  A method reads argv[0] to
 * argv[MAX_ARGS - 1]; Node-API gives undefined for those not passed. */
#define MAX_ARGS 7

/*
 * A method that becomes a job: every write and wait().  What differs from
 * one to another is here; job_call() does the rest the same way for all.
 */
struct bn_job_method {
    const char *name; /* in messages: "split: ...", or "splitSync: ..." for the twin */
    int kind;         /* the job it makes */
    int type;         /* JOB_EVENT: the event's type */
    /* Copy the arguments into the job (which may be a stand-in when the
     * job could not be allocated); a problem is left in a->status. */
    void (*read)(bn_args *a, const napi_value *argv, bn_job *job);
};

/* A write or wait() called from JavaScript, its bn_job_method the
 * callback's data: the store behind `this`, a job of the method's kind,
 * its arguments read into it, then finish() (`sync`: a *Sync twin). */
static napi_value job_call(napi_env env, napi_callback_info info, int sync)
{
    size_t argc = MAX_ARGS;
    napi_value argv[MAX_ARGS];
    void *data = NULL;
    char call[48];
    bn_args a;
    bn_job stand_in;
    bn_store *st = bn_store_this(env, info, &argc, argv);
    if (st == NULL)
        return NULL;
    if (napi_get_cb_info(env, info, NULL, NULL, NULL, &data) != napi_ok || data == NULL) {
        bn_throw_napi(env, "napi_get_cb_info");
        return NULL;
    }
    const bn_job_method *m = data;
    bn_job *job = calloc(1, sizeof(*job));
    if (job != NULL) {
        job->kind = m->kind;
        job->one_ev.type = m->type;
        atomic_init(&job->cancel, 0);
    }
    /* Without a job the arguments are still read, into the stand-in, so
     * that a wrong one is reported before the lack of memory. */
    memset(&stand_in, 0, sizeof stand_in);
    snprintf(call, sizeof call, "%s%s", m->name, sync ? "Sync" : "");
    bn_args_init(&a, env, call);
    m->read(&a, argv, job != NULL ? job : &stand_in);
    return finish(env, st, &a, job, sync);
}

napi_value bn_job_async(napi_env env, napi_callback_info info)
{
    return job_call(env, info, 0);
}

napi_value bn_job_sync(napi_env env, napi_callback_info info)
{
    return job_call(env, info, 1);
}

/* An optional origin (a Buffer or Uint8Array) for the event. */
static void arg_origin(bn_args *a, napi_value v, bindlog_event *e)
{
    int present;
    bn_arg_bytes(a, v, "origin", &e->origin, &e->origin_len, &present);
}

/* bind(key, sessionId, expect?, reason?, origin?) */
static void read_bind(bn_args *a, const napi_value *argv, bn_job *job)
{
    bindlog_event *e = &job->one_ev;
    e->key = bn_arg_str(a, argv[0], "key", 0);
    e->session_id = bn_arg_str(a, argv[1], "sessionId", 0);
    e->expect = bn_arg_str(a, argv[2], "expect", 1);
    e->reason = bn_arg_str(a, argv[3], "reason", 1);
    arg_origin(a, argv[4], e);
}

/* newSession(key, sessionId, reason?, origin?) */
static void read_new_session(bn_args *a, const napi_value *argv, bn_job *job)
{
    bindlog_event *e = &job->one_ev;
    e->key = bn_arg_str(a, argv[0], "key", 0);
    e->session_id = bn_arg_str(a, argv[1], "sessionId", 0);
    e->reason = bn_arg_str(a, argv[2], "reason", 1);
    arg_origin(a, argv[3], e);
}

/* split(key, parentId, childId, runGeneration, origin?) */
static void read_split(bn_args *a, const napi_value *argv, bn_job *job)
{
    bindlog_event *e = &job->one_ev;
    e->key = bn_arg_str(a, argv[0], "key", 0);
    e->expect = bn_arg_str(a, argv[1], "parentId", 0);
    e->session_id = bn_arg_str(a, argv[2], "childId", 0);
    e->generation = bn_arg_u64(a, argv[3], "runGeneration");
    arg_origin(a, argv[4], e);
}

/* invalidate(key, reason?) and unbind(key, reason?) */
static void read_key_reason(bn_args *a, const napi_value *argv, bn_job *job)
{
    job->one_ev.key = bn_arg_str(a, argv[0], "key", 0);
    job->one_ev.reason = bn_arg_str(a, argv[1], "reason", 1);
}

/* A time or duration index.js has checked (a non-negative safe integer). */
static int64_t arg_ms(bn_args *a, napi_value v, const char *what)
{
    return (int64_t)bn_arg_u64(a, v, what);
}

/* route(key, nowMs, mode, idleMs, dailyBoundaryMs, freshSessionId, origin?):
 * index.js has turned the options into these (route.js, routeArgs). */
static void read_route(bn_args *a, const napi_value *argv, bn_job *job)
{
    job->one_ev.key = bn_arg_str(a, argv[0], "key", 0);
    job->now_ms = arg_ms(a, argv[1], "now");
    job->policy.mode = (int)bn_arg_u64(a, argv[2], "mode");
    job->policy.idle_ms = arg_ms(a, argv[3], "idleMs");
    job->policy.daily_boundary_ms = arg_ms(a, argv[4], "dailyBoundaryMs");
    job->one_ev.session_id = bn_arg_str(a, argv[5], "freshSessionId", 0);
    arg_origin(a, argv[6], &job->one_ev);
}

/* expire(cutoffMs, prefix?, dryRun): index.js computed the cut-off
 * (route.js, expireArgs); resolves the count. */
static void read_expire(bn_args *a, const napi_value *argv, bn_job *job)
{
    job->cutoff_ms = arg_ms(a, argv[0], "cutoffMs");
    job->prefix = bn_arg_str(a, argv[1], "prefix", 1);
    job->dry_run = bn_arg_bool(a, argv[2], "dryRun");
}

/*
 * applyBatch's events and importEntries' entries: arrays that index.js made
 * of the caller's objects, each item an array of fields in a fixed order.
 * The messages about the list and its items name the promise-returning call
 * also for the *Sync twin (index.js checks the same first, naming either);
 * those about a field name the call as usual.
 */
#define MAX_FIELDS 7

typedef struct list_shape {
    const char *call;               /* "applyBatch" */
    const char *list;               /* "events" */
    const char *item;               /* "event" */
    int nfields;                    /* fields an item has */
    const char *fields[MAX_FIELDS]; /* their names */
} list_shape;

/* A field's name in messages: "events[3].key". */
typedef char field_name[48];

static const list_shape batch_shape = {
    .call = "applyBatch",
    .list = "events",
    .item = "event",
    .nfields = 7,
    .fields = {"type", "key", "sessionId", "expect", "runGeneration", "reason", "origin"},
};
static const list_shape import_shape = {
    .call = "importEntries",
    .list = "entries",
    .item = "entry",
    .nfields = 4,
    .fields = {"key", "sessionId", "timeMs", "origin"},
};

/* The list's length: 0, or -1 with a TypeError thrown when it is no array. */
static int list_length(bn_args *a, napi_value list, const list_shape *l, uint32_t *n)
{
    bool is_array = false;
    if (napi_is_array(a->env, list, &is_array) != napi_ok || !is_array ||
        napi_get_array_length(a->env, list, n) != napi_ok) {
        bn_throw_type(a->env, "%s: %s must be an array", l->call, l->list);
        a->status = BN_ARG_THROWN;
        return -1;
    }
    return 0;
}

/* Item i's fields into f (NULL where one could not be read) with their
 * names; 0, or -1 with a TypeError thrown when the item is no array. */
static int list_item(bn_args *a, napi_value list, uint32_t i, const list_shape *l, napi_value *f,
                     field_name *what)
{
    napi_value item;
    bool is_array = false;
    if (napi_get_element(a->env, list, i, &item) != napi_ok ||
        napi_is_array(a->env, item, &is_array) != napi_ok || !is_array) {
        bn_throw_type(a->env, "%s: %s[%u] is not a normalised %s", l->call, l->list, i, l->item);
        a->status = BN_ARG_THROWN;
        return -1;
    }
    for (int k = 0; k < l->nfields; k++) {
        snprintf(what[k], sizeof what[k], "%s[%u].%s", l->list, i, l->fields[k]);
        if (napi_get_element(a->env, item, (uint32_t)k, &f[k]) != napi_ok)
            f[k] = NULL;
    }
    return 0;
}

/* applyBatch(events): each event is [type, key, sessionId, expect,
 * runGeneration, reason, origin]. */
static void read_batch(bn_args *a, const napi_value *argv, bn_job *job)
{
    uint32_t n = 0;
    if (list_length(a, argv[0], &batch_shape, &n) != 0)
        return;
    job->n = n;
    job->ev = bn_args_alloc(a, n * sizeof(bindlog_event));
    job->results = bn_args_alloc(a, n * sizeof(bindlog_result));
    for (uint32_t i = 0; a->status == BN_ARG_OK && i < n; i++) {
        napi_value f[MAX_FIELDS];
        field_name what[MAX_FIELDS];
        int32_t type = 0;
        int present;
        bindlog_event *e = &job->ev[i];
        memset(e, 0, sizeof(*e));
        if (list_item(a, argv[0], i, &batch_shape, f, what) != 0)
            break;
        if (f[0] == NULL || napi_get_value_int32(a->env, f[0], &type) != napi_ok ||
            type < BINDLOG_EVENT_BIND || type > BINDLOG_EVENT_UNBIND) {
            bn_throw_type(a->env, "applyBatch: %s is not an event type", what[0]);
            a->status = BN_ARG_THROWN;
            break;
        }
        e->type = type;
        e->key = bn_arg_str(a, f[1], what[1], 0);
        e->session_id = bn_arg_str(a, f[2], what[2], 1);
        e->expect = bn_arg_str(a, f[3], what[3], 1);
        e->generation = bn_arg_u64(a, f[4], what[4]);
        e->reason = bn_arg_str(a, f[5], what[5], 1);
        bn_arg_bytes(a, f[6], what[6], &e->origin, &e->origin_len, &present);
        if (a->status == BN_ARG_BAD)
            a->bad_index = (long)i;
    }
}

/* importEntries(entries): each entry is [key, sessionId, timeMs, origin]. */
static void read_import(bn_args *a, const napi_value *argv, bn_job *job)
{
    uint32_t n = 0;
    if (list_length(a, argv[0], &import_shape, &n) != 0)
        return;
    job->n = n;
    job->entries = bn_args_alloc(a, n * sizeof(bindlog_import_entry));
    job->results = bn_args_alloc(a, n * sizeof(bindlog_result));
    job->codes = bn_args_alloc(a, n * sizeof(int));
    for (uint32_t i = 0; a->status == BN_ARG_OK && i < n; i++) {
        napi_value f[MAX_FIELDS];
        field_name what[MAX_FIELDS];
        int present;
        bindlog_import_entry *e = &job->entries[i];
        memset(e, 0, sizeof(*e));
        if (list_item(a, argv[0], i, &import_shape, f, what) != 0)
            break;
        e->key = bn_arg_str(a, f[0], what[0], 0);
        e->session_id = bn_arg_str(a, f[1], what[1], 0);
        if (a->status == BN_ARG_OK &&
            (f[2] == NULL || napi_get_value_int64(a->env, f[2], &e->time_ms) != napi_ok)) {
            bn_throw_type(a->env, "importEntries: %s must be a number", what[2]);
            a->status = BN_ARG_THROWN;
        }
        bn_arg_bytes(a, f[3], what[3], &e->origin, &e->origin_len, &present);
        if (a->status == BN_ARG_BAD)
            a->bad_index = (long)i;
    }
}

/* wait(afterLsn, id) -> a promise of the head LSN once it passes afterLsn,
 * or -1 when the wait was cancelled or the store closed.  Its messages say
 * "follow", the method of index.js that calls it. */
static void read_wait(bn_args *a, const napi_value *argv, bn_job *job)
{
    job->after = bn_arg_u64(a, argv[0], "afterLsn");
    if (a->status == BN_ARG_OK && napi_get_value_uint32(a->env, argv[1], &job->id) != napi_ok) {
        bn_throw_type(a->env, "follow: the wait id must be a number");
        a->status = BN_ARG_THROWN;
    }
}

const bn_job_method bn_write_bind = {"bind", JOB_EVENT, BINDLOG_EVENT_BIND, read_bind};
const bn_job_method bn_write_new_session = {"newSession", JOB_EVENT, BINDLOG_EVENT_NEW_SESSION,
                                            read_new_session};
const bn_job_method bn_write_split = {"split", JOB_EVENT, BINDLOG_EVENT_SPLIT, read_split};
const bn_job_method bn_write_invalidate = {"invalidate", JOB_EVENT, BINDLOG_EVENT_INVALIDATE,
                                           read_key_reason};
const bn_job_method bn_write_unbind = {"unbind", JOB_EVENT, BINDLOG_EVENT_UNBIND, read_key_reason};
const bn_job_method bn_write_route = {"route", JOB_ROUTE, 0, read_route};
const bn_job_method bn_write_expire = {"expire", JOB_EXPIRE, 0, read_expire};
const bn_job_method bn_write_batch = {"applyBatch", JOB_BATCH, 0, read_batch};
const bn_job_method bn_write_import = {"importEntries", JOB_IMPORT, 0, read_import};
const bn_job_method bn_wait = {"follow", JOB_WAIT, 0, read_wait};

/* cancelWait(id): the wait resolves -1 within one slice. */
napi_value bn_wait_cancel(napi_env env, napi_callback_info info)
{
    size_t argc = 1;
    napi_value argv[1];
    uint32_t id = 0;
    bn_store *st = bn_store_this(env, info, &argc, argv);
    if (st == NULL)
        return NULL;
    if (napi_get_value_uint32(env, argv[0], &id) != napi_ok) {
        bn_throw_type(env, "cancelWait: id must be a number");
        return NULL;
    }
    pthread_mutex_lock(&st->mu);
    for (bn_job *j = st->waits; j != NULL; j = j->next)
        if (j->id == id)
            atomic_store(&j->cancel, 1);
    pthread_cond_signal(&st->wait_cv);
    pthread_mutex_unlock(&st->mu);
    return NULL;
}
