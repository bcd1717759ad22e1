/*
 * addon.h -- the Node-API addon of the npm package `bindlog`, in C11.
 *
 * The addon is a thin layer over the public C API (include/bindlog.h); the
 * library's own sources are compiled into it (binding.gyp).  JavaScript
 * sees two classes, both created only from index.js:
 *
 *   NativeStore   one open bindlog handle.  Writes return promises and run
 *                 on the store's own writer threads (writer.c), so that the
 *                 event loop never waits for a flush and concurrent writes
 *                 share the library's group commits; their *Sync twins run
 *                 on the JavaScript thread and block it, as better-sqlite3
 *                 does; reads (get, session, iterators, stats, digest) are
 *                 synchronous (store.c).
 *   NativeIter    a history or log iterator over one snapshot (store.c).
 *
 * Threads.  Every napi_* call, every read and every *Sync write happens on
 * the JavaScript thread.  Writer threads call only the bindlog write functions and
 * bindlog_last_error(); the waiter thread only bindlog_wait().  They hand
 * finished jobs back through one napi_threadsafe_function per store, whose
 * callback settles the job's promise on the JavaScript thread.
 *
 * Lifetime of a store (struct bn_store), counted in `refs`: the JavaScript
 * object holds one, the threadsafe function one, every live NativeIter one;
 * the struct is freed when the last goes.  The bindlog handle itself is
 * closed earlier, by bn_store_shutdown(): from close(), from the garbage
 * collector's finalizer, or from the environment's cleanup hook at exit.
 * While any job is pending the JavaScript object is held strongly (so it
 * cannot be collected with promises outstanding) and the threadsafe
 * function is ref'd (so the process waits for them); with none pending,
 * nothing of a store keeps the event loop alive.
 */
#ifndef BN_ADDON_H
#define BN_ADDON_H

#define NAPI_VERSION 8
#include <node_api.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "bindlog.h"

typedef struct bn_job bn_job;
typedef struct bn_iter bn_iter;

/* Per-environment data (napi_set_instance_data). */
typedef struct bn_module {
    napi_ref error_ctor; /* BindlogError, given by index.js through init() */
    napi_ref closed_ctor; /* StoreClosedError (BN_ECLOSED), given with it */
    napi_ref is_current; /* isCurrent, every Result's non-enumerable method, given with it */
    napi_ref iter_ctor;  /* NativeIter */
} bn_module;

/* One open store.  Fields marked (js) are touched only on the JavaScript
 * thread; (mu) only with `mu` held. */
typedef struct bn_store {
    bindlog *db;                   /* (js) NULL once shut down */
    napi_env env;                  /* (js) */
    napi_ref self;                 /* (js) the JS object: weak, strong while jobs pend */
    napi_threadsafe_function tsfn; /* finished jobs back to the JS thread */
    int tsfn_released;             /* (js) released at shutdown */
    int cleanup_hooked;            /* (js) the env cleanup hook is registered */
    uint32_t pending;              /* (js) jobs submitted and not yet settled */
    unsigned refs;                 /* (js) see the file comment */
    bn_iter *iters;                /* (js) open iterators, closed at shutdown */
    unsigned char *origin_buf;     /* (js) BINDLOG_ORIGIN_MAX bytes for reads */

    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* writers: a job was queued, or stopping */
    pthread_cond_t wait_cv; /* the waiter: a wait was queued or cancelled */
    bn_job *head, *tail;    /* (mu) write jobs, oldest first */
    unsigned nqueued;       /* (mu) jobs on that queue */
    bn_job *waits;          /* (mu) wait jobs not yet finished */
    pthread_t *threads;     /* (mu) writer threads started */
    unsigned nthreads;      /* (mu) */
    unsigned max_threads;   /* writer threads at most (option writerThreads) */
    unsigned idle;          /* (mu) writer threads waiting for a job */
    pthread_t waiter;       /* the thread that runs bindlog_wait */
    int has_waiter;         /* (mu) */
    atomic_int stopping;    /* shutdown has begun: finish queued work, then exit */
} bn_store;

/* ---- addon.c: values, errors, argument parsing ---------------------------- */

/* Make a BindlogError (code name, errno, message); `index` >= 0 adds the
 * failing event's index of a batch.  NULL if even that failed. */
/* The addon's own code for a call on a closed store: thrown as a
 * StoreClosedError, code 'BINDLOG_ECLOSED' (Python: bindlog.StoreClosed).
 * Not a library code: the library never sees a closed handle. */
#define BN_ECLOSED (-1000)

napi_value bn_error_value(napi_env env, int rc, const char *message, long index);
/* Throw a BindlogError for rc with `message` ("" = bindlog_strerror(rc)). */
void bn_throw(napi_env env, int rc, const char *message);
/* Throw `err` from bn_error_value; NULL (it could not be made): an Error
 * saying so. */
void bn_throw_error(napi_env env, napi_value err);
/* Throw a TypeError (or RangeError) with a formatted message. */
void bn_throw_type(napi_env env, const char *fmt, ...);
/* Throw an Error naming a napi call that failed, unless one is pending. */
void bn_throw_napi(napi_env env, const char *what);

/* u64 as a number, or a bigint past Number.MAX_SAFE_INTEGER. */
napi_value bn_u64(napi_env env, uint64_t v);
napi_value bn_i64(napi_env env, int64_t v);
napi_value bn_str(napi_env env, const char *s);
napi_value bn_buffer(napi_env env, const void *p, size_t n);
int bn_set(napi_env env, napi_value obj, const char *name, napi_value v);

/* Outcome and event type names as JavaScript sees them. */
const char *bn_outcome_name(int outcome);
const char *bn_event_js_name(int type);

napi_value bn_result_value(napi_env env, const bindlog_result *r);
napi_value bn_record_value(napi_env env, const bindlog_record *r);
/* route()'s result: outcome 'routed' | 'created' | 'reset', reason 'idle' |
 * 'daily' | null, sessionId, previousId, generation, lsn, lastActivityMs. */
napi_value bn_route_result_value(napi_env env, int outcome, const bindlog_route_result *r);

/*
 * Argument parsing for one call.  Strings and byte arrays are copied into
 * memory the parser owns (so a job can outlive the JavaScript values).  The
 * first problem wins: a wrong JavaScript type throws a TypeError at once
 * (status BN_ARG_THROWN); a value JavaScript can hold but C cannot take (a
 * NUL inside a string) is status BN_ARG_BAD with `bad` saying why, for the
 * caller to reject or throw as a BindlogError (BINDLOG_EINVAL).
 */
enum { BN_ARG_OK = 0, BN_ARG_THROWN, BN_ARG_BAD };

typedef struct bn_args {
    napi_env env;
    const char *call; /* "split", ... for messages */
    int status;
    char bad[200];
    long bad_index; /* applyBatch: the event that was BN_ARG_BAD, else -1 */
    void **allocs;  /* everything copied, freed by bn_args_free */
    size_t nallocs, cap;
} bn_args;

void bn_args_init(bn_args *a, napi_env env, const char *call);
void bn_args_free(bn_args *a);
/* Move the parser's allocations to the caller (the job frees them). */
void bn_args_release(bn_args *a, void ***allocs, size_t *nallocs);
void *bn_args_alloc(bn_args *a, size_t n);
/* A string; optional: undefined and null give NULL. */
char *bn_arg_str(bn_args *a, napi_value v, const char *what, int optional);
/* Bytes from a Uint8Array (Buffer); undefined/null give *present = 0. */
void bn_arg_bytes(bn_args *a, napi_value v, const char *what, const void **p, size_t *n,
                  int *present);
/* A bigint or a non-negative safe integer. */
uint64_t bn_arg_u64(bn_args *a, napi_value v, const char *what);
int bn_arg_bool(bn_args *a, napi_value v, const char *what);

bn_module *bn_module_get(napi_env env);

/* ---- store.c -------------------------------------------------------------- */

/* Define NativeStore and NativeIter on `exports`. */
int bn_store_define(napi_env env, napi_value exports, bn_module *m);
/* The store behind `this` of a NativeStore method (open or closed: the
 * caller checks st->db), with the call's arguments; NULL with a TypeError
 * thrown when `this` is not a NativeStore. */
bn_store *bn_store_this(napi_env env, napi_callback_info info, size_t *argc, napi_value *argv);
/* Close the handle: stop the threads once queued writes are done, close
 * the iterators, bindlog_close.  Idempotent; JS thread only. */
void bn_store_shutdown(bn_store *st);
void bn_store_unref(bn_store *st);

/* ---- writer.c ------------------------------------------------------------- */

/* Create the store's threadsafe function (unref'd); 0 or -1 (thrown). */
int bn_writer_init(napi_env env, bn_store *st);
/* Stop and join the writer and waiter threads after they finish the queued
 * writes and answer the waits; then release the threadsafe function. */
void bn_writer_stop(bn_store *st);

/*
 * The NativeStore methods that become jobs: every write, also as its *Sync
 * twin, and wait().  Each is a bn_job_method (its name in messages, the job
 * it makes, how it reads its arguments); store.c defines a method with one
 * of the two callbacks below and the bn_job_method as its data, so that a
 * write and its twin share parsing, messages and results.
 */
typedef struct bn_job_method bn_job_method;
extern const bn_job_method bn_write_bind, bn_write_new_session, bn_write_split,
    bn_write_invalidate, bn_write_unbind, bn_write_batch, bn_write_import, bn_write_route,
    bn_write_expire, bn_wait;
/* Queue the job on the store's threads; returns its promise. */
napi_value bn_job_async(napi_env env, napi_callback_info info);
/* A *Sync twin: make the job on the JavaScript thread and return its
 * value, or throw its error. */
napi_value bn_job_sync(napi_env env, napi_callback_info info);
napi_value bn_wait_cancel(napi_env env, napi_callback_info info);

#endif /* BN_ADDON_H */
