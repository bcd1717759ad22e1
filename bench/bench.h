/*
 * bench.h -- shared pieces of bindlog-bench: the workload, the contenders'
 * interface and small helpers.
 *
 * The benchmark compares bindlog with what a gateway would otherwise use
 * (SQLite in WAL mode, a JSON file rewritten on every event) on one
 * deterministic stream of gateway events, in one run, in one directory.
 * See docs/performance.md.
 */
#ifndef BENCH_H
#define BENCH_H

#include <stddef.h>
#include <stdint.h>

#include <bindlog.h>

/* ---- the workload --------------------------------------------------------- */

#define WL_NO_SESSION UINT32_MAX /* "no session": an empty string */
#define WL_ID_SLOT 40            /* bytes per session id in the arena */

/*
 * One event of the stream.  Strings are indexes: keys into wl->keys, session
 * ids into the id arena.  `outcome` is what the model predicts (APPLIED, STALE
 * or MOVED); every contender must return exactly that.
 */
typedef struct wl_event {
    uint8_t type;      /* BINDLOG_EVENT_* */
    uint8_t outcome;   /* predicted BINDLOG_APPLIED / _STALE / _MOVED */
    uint8_t kind;      /* WL_K_* (table rows, statistics) */
    uint8_t origin;    /* 1: the key's origin blob is given */
    uint32_t key;      /* key index */
    uint32_t sid;      /* BIND target, NEW_SESSION id, SPLIT child */
    uint32_t other;    /* BIND expect, SPLIT parent, or WL_NO_SESSION */
    uint64_t gen;      /* SPLIT run generation */
    const char *reason; /* NULL = the default */
} wl_event;

enum {
    WL_K_FIRST,      /* first contact: BIND expect "" (setup) */
    WL_K_SPLIT,      /* a published compression split */
    WL_K_LATE_STALE, /* a split from a run older than /stop or /new: STALE */
    WL_K_LATE_MOVED, /* a twin run's or ANY-generation split after a move: MOVED */
    WL_K_RESUME,     /* /resume: BIND back to an older session, expect = current */
    WL_K_REBIND,     /* BIND to a fresh session, expect = current */
    WL_K_NEW,        /* /new */
    WL_K_STOP,       /* /stop: INVALIDATE */
    WL_K_COUNT
};

typedef struct workload {
    uint32_t nkeys;
    char **keys;        /* key strings */
    size_t *key_len;
    char **origins;     /* per key: a small JSON blob (the gateway's peer data) */
    size_t *origin_len;
    char *ids;          /* session id arena, WL_ID_SLOT bytes per id */
    uint32_t nids;
    wl_event *setup;    /* nkeys first-contact binds (applied before timing) */
    wl_event *ev;       /* the measured stream */
    size_t n;
    uint64_t kinds[WL_K_COUNT];
} workload;

/* A deterministic stream of `n` events over `nkeys` keys from `seed`. */
int wl_generate(workload *w, uint32_t nkeys, size_t n, uint64_t seed);
void wl_free(workload *w);
const char *wl_kind_name(int kind);

static inline const char *wl_id(const workload *w, uint32_t i)
{
    return i == WL_NO_SESSION ? "" : w->ids + (size_t)i * WL_ID_SLOT;
}

/*
 * Streams for the routing rows, over `base`'s keys and setup (shared, not
 * owned: free with wl_free_derived, and free base after):
 *  - wl_derive_route: n inbound messages, keys round-robin, each a ROUTE
 *    (bindlog_route, idle policy WL_ROUTE_IDLE_MS, a new fresh id each)
 *    predicted BINDLOG_ROUTED: the keys were bound by the setup moments
 *    before, so every session is fresh (the hot path);
 *  - wl_derive_splits: n compression splits, keys round-robin, each key's
 *    chain from its setup session on (parent = the key's previous child,
 *    run generation ANY, the parent's origin copied), predicted APPLIED.
 */
#define WL_ROUTE_IDLE_MS (24 * 3600 * 1000LL)
int wl_derive_route(const workload *base, size_t n, uint64_t seed, workload *out);
int wl_derive_splits(const workload *base, size_t n, uint64_t seed, workload *out);
void wl_free_derived(workload *d);

/* The public bindlog_event for a stream event. */
void wl_to_bindlog(const workload *w, const wl_event *e, bindlog_event *out);

/* Apply one stream event through the single-event calls of the public API. */
int wl_apply_bindlog(bindlog *s, const workload *w, const wl_event *e);

/* ---- contenders ----------------------------------------------------------- */

/* The current measurement's deadline (CLOCK_MONOTONIC ns, 0 = none).  Set by
 * the runner before its threads start; a contender may stop waiting for a
 * lock once it has passed and return BENCH_CANCELLED (not counted). */
extern uint64_t bench_deadline_ns;
#define BENCH_CANCELLED (-1000)

/*
 * A contender applies stream events, one at a time, from one or more threads.
 * `open` makes one thread's context (a connection, a handle...), `apply`
 * returns the event's outcome or a negative error, `close` ends the context.
 */
typedef struct contender {
    const char *name;
    void *(*open)(void *shared, int tid);
    int (*apply)(void *tctx, const workload *w, const wl_event *e);
    void (*close)(void *tctx);
} contender;

/* SQLite, WAL mode (peer_sqlite.c).  `sync` is "FULL", "NORMAL" or "OFF". */
typedef struct sq_shared {
    char path[4096];
    const char *sync;
    int busy_timeout_ms;
} sq_shared;
extern const contender sq_contender;
/* Create the database and apply the setup events in one transaction. */
int sq_setup(const char *path, const workload *w);

/* The JSON rewrite store (peer_json.c): every binding in one file, rewritten
 * (temp file, fsync, rename) on every applied event.  Single writer. */
typedef struct js_store js_store;
js_store *js_open(const char *dir, const workload *w);
int js_apply(js_store *j, const workload *w, const wl_event *e);
void js_close(js_store *j);

/* ---- BEGIN etcd (peer_etcd.c; bindlog-bench --etcd) ------------------------ */

/* A loopback cluster started with tests/etcd/cluster.sh, or one given with
 * --etcd-endpoints (own = 0: never stopped). */
typedef struct etcd_cluster {
    char dir[4096];
    char endpoints[1024];
    int members;
    int own;
} etcd_cluster;

/* 1 if cluster.sh finds etcd and etcdctl. */
int etcd_available(void);
/* Start a `members`-member cluster with its data in `dir`.  0 or -1. */
int etcd_cluster_start(etcd_cluster *cl, int members, const char *dir);
/* CPU seconds (user + system) the members of an own cluster have used so
 * far, from /proc; -1 when unknown (a cluster given with --etcd-endpoints). */
double etcd_cluster_cpu(const etcd_cluster *cl);
/* Stop an own cluster (and remove its directory unless keep). */
void etcd_cluster_stop(etcd_cluster *cl, int keep);
/* Delete every key under `prefix`.  0 or a negative code. */
int etcd_wipe_prefix(const char *endpoints, const char *prefix);
/* Number of keys under `prefix`, or -1. */
int64_t etcd_count_prefix(const char *endpoints, const char *prefix);

/* The raw etcd client (the ceiling): ex_open connects and writes the
 * workload's setup under prefix + "/"; ex_contender applies events with one
 * read Txn and one conditional write Txn each.  One writer. */
typedef struct ex_shared ex_shared;
ex_shared *ex_open(const char *endpoints, const char *prefix, const workload *w);
void ex_close(ex_shared *x);
extern const contender ex_contender;

/* ---- END etcd --------------------------------------------------------------- */

/* ---- helpers -------------------------------------------------------------- */

uint64_t now_ns(void);
int64_t wall_ms(void);
/* rm -rf for the bench's own directories (files and subdirectories). */
int rm_tree(const char *path);
/* Size of a file in bytes, or 0. */
uint64_t file_size(const char *path);
/* Sum of the regular files' sizes in a directory. */
uint64_t dir_size(const char *path);

#endif /* BENCH_H */
