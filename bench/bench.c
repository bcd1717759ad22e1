/*
 * bench.c -- bindlog-bench: bindlog against the fsync limit, raw LMDB,
 * SQLite in WAL mode and a JSON rewrite store, side by side in one run.
 *
 * Usage: bindlog-bench [--quick] [--json] [--dir DIR] [--keep] [--events N]
 *                      [--seconds S] [--seed N]
 *
 *   --quick     a smoke run (<= 15 s): short budgets, a 100,000-event store
 *   --json      print one JSON object with every figure instead of the tables
 *   --dir DIR   work in DIR (created if missing; the bench's subdirectories
 *               are removed at the end); default: a fresh directory under
 *               $TMPDIR (or /tmp), removed at the end
 *   --keep      keep the stores (for inspection with the bindlog tool)
 *   --events N  events in the stream and in the bulk-loaded store (default
 *               1,000,000; --quick 30,000).  Check, replay, export and
 *               import run on a store of at most 100,000 events.
 *   --seconds S time budget of each timed measurement (default 1.5; --quick 0.3)
 *   --seed N    workload seed (default 42)
 *   --only G,.. run only these groups (for profiling): fsync lmdb full1
 *               fresh1 sqlite1 full16 sqlite16 full64 sqlite64 fresh16 fresh64
 *               normal1 sqlnormal1 none1 off1 batchfull json bulk wake etcd,
 *               route (bindlog_route x1/x16 at FULL against pure splits and
 *               SQLite's read-decide-update, on streams of their own), and
 *               maint (the check/replay/export/import rows alone, on their
 *               own store: bulk runs them too)
 *   --etcd      also measure the etcd backend (docs/scale-out.md): a raw etcd
 *               client doing the same Txns (the ceiling), bindlog on etcd://
 *               with 1 and with 16 writers, on a 1-member and a 3-member
 *               loopback cluster started with tests/etcd/cluster.sh and
 *               stopped at the end
 *   --etcd-endpoints E  measure on the running cluster E (host:port,...)
 *               instead, under a fresh prefix removed at the end
 *
 * Every contender replays the same deterministic stream (workload.c) from
 * the same starting state (10,000 bound keys), in its own subdirectory of
 * the one working directory, so all figures share a disk and a moment.
 * Multi-writer runs give thread t the events of the keys with
 * key % threads == t, in stream order, so every outcome stays predictable;
 * any outcome that differs from the model's counts as a mismatch and makes
 * the exit status 1.  Exit status: 0 every measurement ran and agreed with
 * the model, 1 a store error or mismatch, 2 usage.  Speed never affects it.
 *
 * The maintenance functions (check, replay, compact, vacuum, export, import)
 * are referenced weakly: a library without them still links and runs, and
 * their figures print as "n/a (not built)".
 */
#define _GNU_SOURCE /* syscall, sched_getcpu, pthread_*affinity_np */
#include "bench.h"
#include "mdb_tables.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#endif

#pragma weak bindlog_check
#pragma weak bindlog_replay
#pragma weak bindlog_compact
#pragma weak bindlog_vacuum
#pragma weak bindlog_export
#pragma weak bindlog_import

/* A weakly referenced function is present when its address is not NULL. */
#define HAVE(fn) ((void (*)(void))(fn) != NULL)

#define NKEYS 10000u
#define BATCH 1000u
#define NA_NOT_BUILT "n/a (not built)"
#define MAINT_EVENTS 100000u /* events of the store the maintenance rates use */
#define MAINT_RUNS 3          /* runs of each maintenance rate: the median is reported */

/* ---- configuration and figures ------------------------------------------ */

typedef struct cfg {
    int quick, json, keep, own_root;
    const char *only;  /* comma-separated measurement groups, NULL = all */
    int etcd;          /* --etcd */
    const char *etcd_endpoints; /* --etcd-endpoints, NULL = own clusters */
    char root[3000];
    size_t events;
    double secs;
    uint64_t seed;
} cfg;

enum {
    M_FSYNC,
    M_THREAD_WAKE,
    M_LMDB,
    M_BL1,
    M_BLFRESH1,
    M_SQ1,
    M_BL16,
    M_SQ16,
    M_BL64,
    M_SQ64,
    M_BLFRESH16,
    M_BLFRESH64,
    M_BLNORMAL1,
    M_SQNORMAL1,
    M_BLNONE1,
    M_SQOFF1,
    M_BATCH_NONE,
    M_BATCH_FULL,
    M_JSON1K,
    M_JSON10K,
    M_GET1,
    M_GET2,
    M_OPEN,
    M_OPEN_FULL_LOG,
    M_FIRST_WRITE,
    M_WAKE,
    M_CHECK,
    M_REPLAY,
    M_EXPORT,
    M_IMPORT,
    /* ---- routing: inbound messages (all fresh) vs compression splits */
    M_ROUTE1,
    M_ROUTE16,
    M_SPLIT1,
    M_SPLIT16,
    M_SQROUTE1,
    M_SQROUTE16,
    /* ---- etcd (--etcd): per cluster, raw client, bindlog x1, bindlog x16 */
    M_EX_1,
    M_EB1_1,
    M_EB16_1,
    M_EX_3,
    M_EB1_3,
    M_EB16_3,
    M_COUNT
};

/* One row of the table. */
typedef struct meas {
    const char *id;    /* JSON name */
    const char *label; /* table row */
    const char *unit;  /* what the rate counts */
    int ran;
    const char *na;    /* why it did not run */
    double rate;       /* per second */
    double p50_us, p99_us; /* latency per event (per batch for batches); <0 none */
    double secs;
    uint64_t events, errors, mismatches;
    double per_commit; /* events per commit (bindlog), 0 unknown */
    double cpu_secs;   /* CPU time of the measuring threads (user + system) */
    /* The whole process over a writers' window (getrusage): CPU time of
     * every thread (the checkpointer's too) and context switches
     * (voluntary and not), per event; <0 not measured. */
    double proc_cpu_us, csw; /* 0: not measured */
    double proc_sys_us;      /* of proc_cpu_us, the kernel's (system time) */
    double early_rate; /* writers: the rate over the window's first 0.5 s */
    char note[112];
} meas;

static meas M[M_COUNT] = {
    [M_FSYNC] = {.id = "fsync_limit", .label = "fdatasync of 128-byte overwrites", .unit = "syncs"},
    [M_THREAD_WAKE] = {.id = "thread_wake", .label = "thread sleep + wake, futex ping-pong",
                       .unit = "pairs"},
    [M_LMDB] = {.id = "lmdb_raw_1", .label = "raw LMDB, 1 put/txn, default sync", .unit = "txns"},
    [M_BL1] = {.id = "bindlog_full_1", .label = "bindlog FULL, 1 writer", .unit = "events"},
    [M_BLFRESH1] = {.id = "bindlog_full_1_fresh", .label = "bindlog FULL x1, fresh store, 5k events",
                    .unit = "events"},
    [M_SQ1] = {.id = "sqlite_full_1", .label = "SQLite WAL FULL, 1 writer", .unit = "events"},
    [M_BL16] = {.id = "bindlog_full_16", .label = "bindlog FULL, 16 writers", .unit = "events"},
    [M_SQ16] = {.id = "sqlite_full_16", .label = "SQLite WAL FULL, 16 writers", .unit = "events"},
    [M_BL64] = {.id = "bindlog_full_64", .label = "bindlog FULL, 64 writers", .unit = "events"},
    [M_SQ64] = {.id = "sqlite_full_64", .label = "SQLite WAL FULL, 64 writers", .unit = "events"},
    [M_BLFRESH16] = {.id = "bindlog_full_16_fresh", .label = "bindlog FULL, 16 writers, fresh store",
                     .unit = "events"},
    [M_BLFRESH64] = {.id = "bindlog_full_64_fresh", .label = "bindlog FULL, 64 writers, fresh store",
                     .unit = "events"},
    [M_BLNORMAL1] = {.id = "bindlog_normal_1", .label = "bindlog NORMAL, 1 writer", .unit = "events"},
    [M_SQNORMAL1] = {.id = "sqlite_normal_1", .label = "SQLite WAL NORMAL, 1 writer", .unit = "events"},
    [M_BLNONE1] = {.id = "bindlog_none_1", .label = "bindlog NONE, 1 writer", .unit = "events"},
    [M_SQOFF1] = {.id = "sqlite_off_1", .label = "SQLite WAL OFF, 1 writer", .unit = "events"},
    [M_BATCH_NONE] = {.id = "bindlog_batch_none", .label = "apply_batch x1000, NONE (bulk load)", .unit = "events"},
    [M_BATCH_FULL] = {.id = "bindlog_batch_full", .label = "apply_batch x1000, FULL", .unit = "events"},
    [M_JSON1K] = {.id = "json_rewrite_1k", .label = "JSON rewrite, 1,000 keys", .unit = "events"},
    [M_JSON10K] = {.id = "json_rewrite_10k", .label = "JSON rewrite, 10,000 keys", .unit = "events"},
    [M_GET1] = {.id = "get_1_thread", .label = "bindlog_get, 1 thread (per thread)", .unit = "gets"},
    [M_GET2] = {.id = "get_2_threads", .label = "bindlog_get, 2 threads (per thread)", .unit = "gets"},
    [M_OPEN] = {.id = "open", .label = "bindlog_open of the bulk store", .unit = "opens"},
    [M_OPEN_FULL_LOG] = {.id = "open_full_log", .label = "bindlog_open, log full (recovery)", .unit = "opens"},
    [M_FIRST_WRITE] = {.id = "first_write", .label = "first write after open, bulk, cold",
                       .unit = "writes"},
    [M_WAKE] = {.id = "wake", .label = "bindlog_wait wake-up, other process", .unit = "wakes"},
    [M_CHECK] = {.id = "check", .label = "bindlog_check", .unit = "records"},
    [M_REPLAY] = {.id = "replay", .label = "bindlog_replay", .unit = "records"},
    [M_EXPORT] = {.id = "export", .label = "bindlog_export", .unit = "records"},
    [M_IMPORT] = {.id = "import", .label = "bindlog_import (full stream)", .unit = "records"},
    [M_ROUTE1] = {.id = "route_full_1", .label = "bindlog_route FULL, 1 writer", .unit = "events"},
    [M_ROUTE16] = {.id = "route_full_16", .label = "bindlog_route FULL, 16 writers", .unit = "events"},
    [M_SPLIT1] = {.id = "split_full_1", .label = "bindlog_split FULL, 1 writer", .unit = "events"},
    [M_SPLIT16] = {.id = "split_full_16", .label = "bindlog_split FULL, 16 writers", .unit = "events"},
    [M_SQROUTE1] = {.id = "sqlite_route_full_1", .label = "SQLite route txn FULL, 1 writer",
                    .unit = "events"},
    [M_SQROUTE16] = {.id = "sqlite_route_full_16", .label = "SQLite route txn FULL, 16 writers",
                     .unit = "events"},
    [M_EX_1] = {.id = "etcd1_raw_1", .label = "etcd 1-member: raw client, 1 writer", .unit = "events"},
    [M_EB1_1] = {.id = "etcd1_bindlog_1", .label = "etcd 1-member: bindlog, 1 writer", .unit = "events"},
    [M_EB16_1] = {.id = "etcd1_bindlog_16", .label = "etcd 1-member: bindlog, 16 writers", .unit = "events"},
    [M_EX_3] = {.id = "etcd3_raw_1", .label = "etcd 3-member: raw client, 1 writer", .unit = "events"},
    [M_EB1_3] = {.id = "etcd3_bindlog_1", .label = "etcd 3-member: bindlog, 1 writer", .unit = "events"},
    [M_EB16_3] = {.id = "etcd3_bindlog_16", .label = "etcd 3-member: bindlog, 16 writers", .unit = "events"},
};

/* Sizes of the bulk store. */
static struct {
    uint64_t events, live_bindings, file_before;  /* the bulk store */
    uint64_t m_events, m_live, m_file;            /* the maintenance store, as built */
    uint64_t file_vacuum, file_compact;           /* ... after vacuum, compact + vacuum */
    int vacuum_ran, compact_ran;
    const char *vacuum_na, *compact_na;
    double open_first_ms, open_median_ms, open_max_ms;
    double open_full_median_ms;
    double first_write_median_ms, second_write_median_ms;
    uint64_t open_full_records;
    /* the bulk store's data.mdb right after its build (closed: the log
     * folded), per table: pages x page size (TS_*), as mdb_stat -a counts */
    int tables_ran;
    uint64_t tables_events;
    uint64_t table_bytes[8];
} S;

/* The tables of data.mdb the bytes-per-event breakdown names, then the
 * free pages and the pages LMDB has in use in all (S.table_bytes). */
enum { TS_LOG, TS_SESSIONS, TS_BINDINGS, TS_HISTORY, TS_CHILDREN, TS_OTHER, TS_FREE, TS_USED };
static const char *const ts_name[] = {"log", "sessions", "bindings", "history", "children",
                                      "other", "free", "used"};

static int g_failed; /* a store error or an outcome mismatch happened */
uint64_t bench_deadline_ns;

/* --only: is group `g` selected?  Groups: fsync lmdb full1 fresh1 sqlite1 full16
 * sqlite16 full64 sqlite64 fresh16 fresh64 normal1 sqlnormal1 none1 off1 batchfull
 * json bulk wake; and maint: the maintenance rows alone (bulk runs them too). */
static int want(const cfg *c, const char *g)
{
    if (c->only == NULL)
        return 1;
    size_t n = strlen(g);
    for (const char *p = c->only; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, g, n) == 0)
            return 1;
        p += len + (e != NULL);
    }
    return 0;
}

static void progress(const cfg *c, const char *what)
{
    if (!c->json || isatty(2))
        fprintf(stderr, "bindlog-bench: %s...\n", what);
}

static void sub(char *out, size_t cap, const cfg *c, const char *name)
{
    snprintf(out, cap, "%s/%s", c->root, name);
}

/* CPU time of the calling thread, seconds (user + system). */
static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The process's CPU seconds (every thread, user + system), the system
 * time's share of them, and context switches (voluntary and involuntary)
 * so far. */
static void proc_usage(double *cpu, double *sys, double *csw)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    *cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + *sys;
    *csw = (double)ru.ru_nvcsw + (double)ru.ru_nivcsw;
}

/* Rate per CPU-second: on a shared machine, the figure other processes'
 * load does not move (much). */
static double per_cpu(const meas *m)
{
    return m->cpu_secs > 0 ? (double)m->events / m->cpu_secs : 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* p50/p99 of n latencies in ns (sorted in place), in microseconds. */
static void percentiles(uint64_t *lat, size_t n, double *p50, double *p99)
{
    if (n == 0) {
        *p50 = *p99 = -1;
        return;
    }
    qsort(lat, n, sizeof(*lat), cmp_u64);
    size_t i99 = (size_t)((double)n * 0.99);
    if (i99 >= n)
        i99 = n - 1;
    *p50 = (double)lat[n / 2] / 1000.0;
    *p99 = (double)lat[i99] / 1000.0;
}

/* ---- the multi-threaded writer runner ---------------------------------- */

typedef struct runner {
    const contender *c;
    void *shared;
    const workload *w;
    int nthreads;
    int first_contacts; /* each thread applies its keys' setup events first */
    pthread_barrier_t ready, go;
    uint64_t t0, deadline;
} runner;

typedef struct worker {
    runner *r;
    int tid;
    pthread_t th;
    void *ctx;
    uint32_t *idx; /* this thread's events, in stream order */
    size_t nidx;
    size_t nfirst; /* first_contacts: idx[0, nfirst) index w->setup */
    uint64_t *lat;
    uint64_t done, errors, mism, t_end;
    double cpu;
    int first_err;
} worker;

static void *worker_main(void *arg)
{
    worker *k = arg;
    runner *r = k->r;
    k->ctx = r->c->open(r->shared, k->tid);
    pthread_barrier_wait(&r->ready);
    pthread_barrier_wait(&r->go);
    double cpu0 = thread_cpu();
    if (k->ctx != NULL) {
        uint64_t deadline = r->deadline, t = now_ns();
        for (size_t i = 0; i < k->nidx && t < deadline; i++) {
            const wl_event *e = i < k->nfirst ? &r->w->setup[k->idx[i]] : &r->w->ev[k->idx[i]];
            int rc = r->c->apply(k->ctx, r->w, e);
            uint64_t t2 = now_ns();
            if (rc == BENCH_CANCELLED)
                break; /* waited for a lock past the deadline: not counted */
            k->lat[k->done++] = t2 - t;
            t = t2;
            if (rc < 0) {
                if (k->errors++ == 0)
                    k->first_err = rc;
            } else if (rc != e->outcome) {
                k->mism++;
            }
        }
        r->c->close(k->ctx);
    } else {
        k->errors = 1;
        k->first_err = BINDLOG_EIO;
    }
    k->t_end = now_ns();
    k->cpu = thread_cpu() - cpu0;
    return NULL;
}

/* Run `nthreads` writers for `budget` seconds; fill m (events, rate, latency).
 * first_contacts: the store is empty, and each thread first applies the
 * setup's first contacts of its keys, then their stream events (a key's
 * events stay in order, so the outcomes stay predictable). */
static void run_writers_from(meas *m, const contender *c, void *shared, const workload *w,
                             int nthreads, double budget, int first_contacts)
{
    runner r = {.c = c, .shared = shared, .w = w, .nthreads = nthreads,
                .first_contacts = first_contacts};
    worker *k = calloc((size_t)nthreads, sizeof(*k));
    size_t *count = calloc((size_t)nthreads, sizeof(size_t));
    if (k == NULL || count == NULL) {
        fprintf(stderr, "bindlog-bench: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < w->n; i++)
        count[w->ev[i].key % (uint32_t)nthreads]++;
    if (first_contacts)
        for (uint32_t i = 0; i < w->nkeys; i++)
            count[w->setup[i].key % (uint32_t)nthreads]++;
    for (int t = 0; t < nthreads; t++) {
        k[t].r = &r;
        k[t].tid = t;
        k[t].idx = malloc((count[t] ? count[t] : 1) * sizeof(uint32_t));
        k[t].lat = malloc((count[t] ? count[t] : 1) * sizeof(uint64_t));
        if (k[t].idx == NULL || k[t].lat == NULL) {
            fprintf(stderr, "bindlog-bench: out of memory\n");
            exit(1);
        }
    }
    if (first_contacts) {
        for (uint32_t i = 0; i < w->nkeys; i++) {
            worker *x = &k[w->setup[i].key % (uint32_t)nthreads];
            x->idx[x->nidx++] = i;
        }
        for (int t = 0; t < nthreads; t++)
            k[t].nfirst = k[t].nidx;
    }
    for (size_t i = 0; i < w->n; i++) {
        worker *x = &k[w->ev[i].key % (uint32_t)nthreads];
        x->idx[x->nidx++] = (uint32_t)i;
    }
    pthread_barrier_init(&r.ready, NULL, (unsigned)nthreads + 1);
    pthread_barrier_init(&r.go, NULL, (unsigned)nthreads + 1);
    for (int t = 0; t < nthreads; t++)
        pthread_create(&k[t].th, NULL, worker_main, &k[t]);
    pthread_barrier_wait(&r.ready); /* every connection is open */
    r.t0 = now_ns();
    r.deadline = r.t0 + (uint64_t)(budget * 1e9);
    bench_deadline_ns = r.deadline;
    double cpu0, sys0, csw0, cpu1, sys1, csw1;
    proc_usage(&cpu0, &sys0, &csw0);
    pthread_barrier_wait(&r.go);

    uint64_t t_end = r.t0, total = 0;
    for (int t = 0; t < nthreads; t++) {
        pthread_join(k[t].th, NULL);
        if (k[t].t_end > t_end)
            t_end = k[t].t_end;
        total += k[t].done;
    }
    proc_usage(&cpu1, &sys1, &csw1);
    bench_deadline_ns = 0;
    /* events done in the window's first half second (a thread's latencies
     * add up to its time since the start): a fresh store's first lap */
    uint64_t early = 0;
    for (int t = 0; t < nthreads; t++) {
        uint64_t at = 0;
        for (uint64_t i = 0; i < k[t].done && (at += k[t].lat[i]) <= 500000000u; i++)
            early++;
    }
    m->early_rate = budget >= 1.0 ? (double)early / 0.5 : 0; /* a short window: none */
    uint64_t *all = malloc((total ? total : 1) * sizeof(uint64_t));
    size_t n = 0;
    int first_err = 0;
    m->events = m->errors = m->mismatches = 0;
    for (int t = 0; t < nthreads; t++) {
        memcpy(all + n, k[t].lat, k[t].done * sizeof(uint64_t));
        n += k[t].done;
        m->errors += k[t].errors;
        m->mismatches += k[t].mism;
        m->cpu_secs += k[t].cpu;
        if (first_err == 0)
            first_err = k[t].first_err;
        free(k[t].idx);
        free(k[t].lat);
    }
    m->events = total;
    if (total > 0) {
        m->proc_cpu_us = (cpu1 - cpu0) * 1e6 / (double)total;
        m->proc_sys_us = (sys1 - sys0) * 1e6 / (double)total;
        m->csw = (csw1 - csw0) / (double)total;
    }
    m->secs = (double)(t_end - r.t0) / 1e9;
    m->rate = m->secs > 0 ? (double)total / m->secs : 0;
    percentiles(all, n, &m->p50_us, &m->p99_us);
    m->ran = 1;
    if (m->errors || m->mismatches) {
        g_failed = 1;
        snprintf(m->note, sizeof m->note, "%" PRIu64 " errors (first %s), %" PRIu64 " mismatches",
                 m->errors, bindlog_code_name(first_err), m->mismatches);
    }
    pthread_barrier_destroy(&r.ready);
    pthread_barrier_destroy(&r.go);
    free(all);
    free(k);
    free(count);
}

static void run_writers(meas *m, const contender *c, void *shared, const workload *w,
                        int nthreads, double budget)
{
    run_writers_from(m, c, shared, w, nthreads, budget, 0);
}

/* ---- contenders: bindlog and JSON as `contender`s --------------------- */

static void *bl_open_thread(void *shared, int tid)
{
    (void)tid;
    return shared; /* one handle for every thread, as a gateway would */
}

static int bl_apply(void *tctx, const workload *w, const wl_event *e)
{
    return wl_apply_bindlog(tctx, w, e);
}

static void bl_close_thread(void *tctx) { (void)tctx; }

static const contender bl_contender = {"bindlog", bl_open_thread, bl_apply, bl_close_thread};

static void *js_open_thread(void *shared, int tid)
{
    (void)tid;
    return shared;
}

static int js_apply_c(void *tctx, const workload *w, const wl_event *e)
{
    return js_apply(tctx, w, e);
}

static const contender js_contender = {"json", js_open_thread, js_apply_c, bl_close_thread};

/* Apply events [0, n) of `ev` in batches; 0 or the first error. */
static int apply_batches(bindlog *h, const workload *w, const wl_event *ev, size_t n,
                         uint64_t *mism)
{
    bindlog_event be[BATCH];
    bindlog_result res[BATCH];
    for (size_t i = 0; i < n; i += BATCH) {
        size_t cnt = n - i < BATCH ? n - i : BATCH, bad;
        for (size_t j = 0; j < cnt; j++)
            wl_to_bindlog(w, &ev[i + j], &be[j]);
        int rc = bindlog_apply_batch(h, be, cnt, res, &bad);
        if (rc < 0)
            return rc;
        for (size_t j = 0; j < cnt; j++)
            if (res[j].outcome != ev[i + j].outcome)
                ++*mism;
    }
    return 0;
}

/* A fresh bindlog store at dir holding the setup (every key bound once),
 * opened with `durability`.  NULL on failure (reported). */
static bindlog *bl_fresh(const char *dir, const workload *w, int durability)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *h = NULL;
    uint64_t mism = 0;
    int rc;

    rm_tree(dir);
    o.durability = BINDLOG_DURABILITY_NONE;
    if ((rc = bindlog_open(&h, dir, &o)) != 0 ||
        (rc = apply_batches(h, w, w->setup, w->nkeys, &mism)) != 0 || mism) {
        fprintf(stderr, "bindlog-bench: setting up %s: %s\n", dir,
                rc ? bindlog_strerror(rc) : "unexpected outcomes");
        bindlog_close(h);
        g_failed = 1;
        return NULL;
    }
    bindlog_close(h);
    o.durability = durability;
    if ((rc = bindlog_open(&h, dir, &o)) != 0) {
        fprintf(stderr, "bindlog-bench: opening %s: %s\n", dir, bindlog_strerror(rc));
        g_failed = 1;
        return NULL;
    }
    return h;
}

/* Events per commit (per flush, in FULL) over what the measurement did:
 * the store's commit counts are store-wide and include the setup. */
static void note_group(meas *m, bindlog *h, const bindlog_stats *before)
{
    bindlog_stats st;
    if (bindlog_stats_get(h, &st) == 0 && st.commits > before->commits) {
        m->per_commit = (double)(st.grouped_events - before->grouped_events) /
                        (double)(st.commits - before->commits);
        if (m->note[0] == '\0')
            snprintf(m->note, sizeof m->note, "%.1f events/commit", m->per_commit);
    }
}

static void measure_bindlog(const cfg *c, meas *m, const workload *w, int durability,
                            int threads, double budget, const char *name)
{
    char dir[4096];
    sub(dir, sizeof dir, c, name);
    bindlog *h = bl_fresh(dir, w, durability);
    if (h == NULL) {
        m->na = "setup failed";
        return;
    }
    bindlog_stats before;
    memset(&before, 0, sizeof before);
    bindlog_stats_get(h, &before);
    run_writers(m, &bl_contender, h, w, threads, budget);
    note_group(m, h, &before);
    size_t len = strlen(m->note);
    if (threads > 1 && !m->errors && m->early_rate > 0 && len + 40 < sizeof m->note)
        snprintf(m->note + len, sizeof m->note - len, "%sfirst 0.5 s %.1fk/s", len ? "; " : "",
                 m->early_rate / 1e3);
    if (durability == BINDLOG_DURABILITY_NONE && m->note[0] != '\0' && !m->errors)
        snprintf(m->note + strlen(m->note), sizeof m->note - strlen(m->note), "; %.1fk/CPU-s",
                 per_cpu(m) / 1e3);
    bindlog_close(h);
    if (!c->keep)
        rm_tree(dir);
}

/* `threads` FULL writers on a store made by the measurement, from its
 * first event: each thread binds its keys for the first time (the setup's
 * first contacts, one call each) and goes on with their stream events, so
 * the window holds the log's first lap, while its ring is still being
 * zero-filled, and the store's first checkpoints, which grow data.mdb.
 * measure_bindlog's store was bulk-loaded, closed and opened again before
 * its writers start. */
static void measure_bindlog_fresh(const cfg *c, meas *m, const workload *w, int threads,
                                  double budget, const char *name)
{
    char dir[4096];
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *h = NULL;
    int rc;

    sub(dir, sizeof dir, c, name);
    rm_tree(dir);
    o.durability = BINDLOG_DURABILITY_FULL;
    if ((rc = bindlog_open(&h, dir, &o)) != 0) {
        fprintf(stderr, "bindlog-bench: creating %s: %s\n", dir, bindlog_strerror(rc));
        m->na = "setup failed";
        g_failed = 1;
        return;
    }
    bindlog_stats before;
    memset(&before, 0, sizeof before);
    bindlog_stats_get(h, &before);
    run_writers_from(m, &bl_contender, h, w, threads, budget, 1);
    note_group(m, h, &before);
    size_t len = strlen(m->note);
    if (!m->errors && m->early_rate > 0 && len + 40 < sizeof m->note)
        snprintf(m->note + len, sizeof m->note - len, "%sfirst 0.5 s %.1fk/s", len ? "; " : "",
                 m->early_rate / 1e3);
    bindlog_close(h);
    if (!c->keep)
        rm_tree(dir);
}

/* One row from two measurements of the same thing (alternated with
 * another row's): summed events and time, the slower half's latencies. */
static void combine_halves(meas *out, const meas *a, const meas *b)
{
    *out = *a;
    if (!a->ran || !b->ran) {
        if (!a->ran)
            *out = *b;
        return;
    }
    out->events = a->events + b->events;
    out->errors = a->errors + b->errors;
    out->mismatches = a->mismatches + b->mismatches;
    out->secs = a->secs + b->secs;
    out->cpu_secs = a->cpu_secs + b->cpu_secs;
    out->rate = out->secs > 0 ? (double)out->events / out->secs : 0;
    out->p50_us = a->p50_us > b->p50_us ? a->p50_us : b->p50_us;
    out->p99_us = a->p99_us > b->p99_us ? a->p99_us : b->p99_us;
    snprintf(out->note, sizeof out->note, "%.1f events/commit; 2 alternated halves",
             (a->per_commit + b->per_commit) / 2);
}

/* A store made by this open, FULL, one writer: its first FRESH_EVENTS
 * events (the setup's first contacts, one call each), timed from the
 * first.  The steady rows run on a store whose log has gone round; this
 * one measures the log's first lap, whose ring is still being zero-filled
 * (docs/design.md, "The files"). */
#define FRESH_EVENTS 5000u
static void measure_fresh(const cfg *c, meas *m, const workload *w, const char *name)
{
    char dir[4096];
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *h = NULL;
    int rc;

    sub(dir, sizeof dir, c, name);
    rm_tree(dir);
    o.durability = BINDLOG_DURABILITY_FULL;
    if ((rc = bindlog_open(&h, dir, &o)) != 0) {
        fprintf(stderr, "bindlog-bench: creating %s: %s\n", dir, bindlog_strerror(rc));
        m->na = "setup failed";
        g_failed = 1;
        return;
    }
    size_t n = w->nkeys < FRESH_EVENTS ? w->nkeys : FRESH_EVENTS, done = 0;
    uint64_t *lat = malloc(n * sizeof(uint64_t));
    double cpu0 = thread_cpu();
    uint64_t t0 = now_ns(), t = t0;
    for (; done < n; done++) {
        rc = wl_apply_bindlog(h, w, &w->setup[done]);
        uint64_t t2 = now_ns();
        lat[done] = t2 - t;
        t = t2;
        if (rc < 0) {
            m->errors++;
            g_failed = 1;
            snprintf(m->note, sizeof m->note, "error: %s", bindlog_code_name(rc));
            break;
        }
        if (rc != w->setup[done].outcome)
            m->mismatches++;
    }
    m->cpu_secs = thread_cpu() - cpu0;
    m->events = done;
    m->secs = (double)(t - t0) / 1e9;
    m->rate = m->secs > 0 ? (double)done / m->secs : 0;
    percentiles(lat, done, &m->p50_us, &m->p99_us);
    m->ran = 1;
    if (m->mismatches) {
        g_failed = 1;
        snprintf(m->note, sizeof m->note, "%" PRIu64 " mismatches", m->mismatches);
    } else if (!m->errors) {
        snprintf(m->note, sizeof m->note, "a new store's first events, 1 call each");
    }
    free(lat);
    bindlog_close(h);
    if (!c->keep)
        rm_tree(dir);
}

static void measure_sqlite(const cfg *c, meas *m, const workload *w, const char *sync,
                           int threads, double budget, const char *name)
{
    char dir[4096];
    sq_shared sh;
    sub(dir, sizeof dir, c, name);
    rm_tree(dir);
    mkdir(dir, 0700);
    if (snprintf(sh.path, sizeof sh.path, "%s/bindings.db", dir) >= (int)sizeof sh.path) {
        m->na = "path too long";
        return;
    }
    sh.sync = sync;
    sh.busy_timeout_ms = 60000;
    if (sq_setup(sh.path, w) != 0) {
        m->na = "setup failed";
        g_failed = 1;
        return;
    }
    run_writers(m, &sq_contender, &sh, w, threads, budget);
    if (strcmp(sync, "OFF") == 0 && !m->errors && !m->mismatches)
        snprintf(m->note, sizeof m->note, "%.1fk/CPU-s", per_cpu(m) / 1e3);
    if (!c->keep)
        rm_tree(dir);
}

static void measure_json(const cfg *c, meas *m, const workload *w, double budget,
                         const char *name)
{
    char dir[4096];
    sub(dir, sizeof dir, c, name);
    rm_tree(dir);
    mkdir(dir, 0700);
    js_store *j = js_open(dir, w);
    if (j == NULL) {
        m->na = "setup failed";
        g_failed = 1;
        return;
    }
    run_writers(m, &js_contender, j, w, 1, budget);
    js_close(j);
    if (!c->keep)
        rm_tree(dir);
}

/* ---- 1. the fsync limit ------------------------------------------------ */

/* The cost of one small durable write the way the write-ahead log does it:
 * a 128-byte overwrite inside a file whose blocks were written (zeros)
 * and synced beforehand, then fdatasync.  (An append would also change
 * the file's size, which fdatasync then journals: issue 11 measured ~1.7x
 * slower here; a write into fallocated but unwritten blocks converts an
 * extent, slower still.) */
static void measure_fsync(const cfg *c, double budget)
{
    meas *m = &M[M_FSYNC];
    char path[4096];
    unsigned char rec[128];
    static unsigned char zero[1 << 16];
    const size_t span = (size_t)16 << 20;
    sub(path, sizeof path, c, "fsync.dat");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        m->na = "cannot create a file";
        g_failed = 1;
        return;
    }
    for (size_t off = 0; off < span; off += sizeof zero)
        if (pwrite(fd, zero, sizeof zero, (off_t)off) != (ssize_t)sizeof zero) {
            m->na = "cannot preallocate";
            g_failed = 1;
            close(fd);
            unlink(path);
            return;
        }
    fsync(fd);
    memset(rec, 'x', sizeof rec);
    size_t cap = 1 << 20, n = 0;
    uint64_t *lat = malloc(cap * sizeof(uint64_t));
    uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)(budget * 1e9), t = t0;
    while (t < deadline && n < cap) {
        off_t off = (off_t)((n * sizeof rec) % span);
        if (pwrite(fd, rec, sizeof rec, off) != (ssize_t)sizeof rec || fdatasync(fd) != 0) {
            m->errors++;
            break;
        }
        uint64_t t2 = now_ns();
        lat[n++] = t2 - t;
        t = t2;
    }
    close(fd);
    unlink(path);
    m->events = n;
    m->secs = (double)(t - t0) / 1e9;
    m->rate = (double)n / m->secs;
    percentiles(lat, n, &m->p50_us, &m->p99_us);
    m->ran = 1;
    free(lat);
}

/* The machine's price of a sleep and a wake-up, the other reference of the
 * writer rows besides the flush: with many writers each event costs about
 * one of each (the "cs per event" of those rows).  Two threads hand a turn
 * back and forth through a futex, first free to run on any CPU (as the
 * writers do), then both pinned to one CPU; the rate is round trips a
 * second, the note the process's CPU per sleep + wake in both cases.  On a
 * virtual machine a wake-up of an idle vCPU can cost several times the
 * same-CPU switch. */
/* CPU seconds of the whole process: every thread's (the maintenance calls run
 * threads of their own: docs/design.md, "Bulk replay"). */
static double process_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#ifdef __linux__
static _Atomic int g_turn;
static _Atomic int g_turn_stop;

static void turn_wait(int mine)
{
    int v;
    while ((v = atomic_load(&g_turn)) != mine && !atomic_load(&g_turn_stop))
        syscall(SYS_futex, &g_turn, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void turn_give(int to)
{
    atomic_store(&g_turn, to);
    syscall(SYS_futex, &g_turn, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *turn_partner(void *arg)
{
    (void)arg;
    for (;;) {
        turn_wait(1);
        if (atomic_load(&g_turn_stop))
            return NULL;
        turn_give(0);
    }
}

/* Round trips for `secs`; *cpu_us: process CPU per sleep + wake. */
static uint64_t ping_pong(double secs, int pin, double *cpu_us, double *wall)
{
    pthread_t t;
    cpu_set_t one, saved;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
    pthread_getaffinity_np(pthread_self(), sizeof saved, &saved);
    atomic_store(&g_turn, 0);
    atomic_store(&g_turn_stop, 0);
    if (pin)
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    if (pthread_create(&t, NULL, turn_partner, NULL) != 0) {
        pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
        return 0;
    }
    if (pin)
        pthread_setaffinity_np(t, sizeof one, &one);
    uint64_t n = 0, t0 = now_ns(), end = t0 + (uint64_t)(secs * 1e9);
    double cpu0 = process_cpu();
    do {
        for (int i = 0; i < 256; i++, n++) {
            turn_give(1);
            turn_wait(0);
        }
    } while (now_ns() < end);
    double cpu = process_cpu() - cpu0;
    *wall = (double)(now_ns() - t0) / 1e9;
    atomic_store(&g_turn_stop, 1);
    turn_give(1);
    pthread_join(t, NULL);
    pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
    *cpu_us = cpu / (double)(2 * n) * 1e6;
    return n;
}

static void measure_thread_wake(double budget)
{
    meas *m = &M[M_THREAD_WAKE];
    double any_cpu, one_cpu, wall, wall1;
    double half = budget / 2 < 0.3 ? budget / 2 : 0.3;
    uint64_t n = ping_pong(half, 0, &any_cpu, &wall);
    uint64_t n1 = ping_pong(half, 1, &one_cpu, &wall1);
    if (n == 0 || n1 == 0) {
        m->na = "cannot start a thread";
        return;
    }
    m->events = n;
    m->secs = wall;
    m->rate = (double)n / wall;
    m->p50_us = m->p99_us = -1;
    m->ran = 1;
    snprintf(m->note, sizeof m->note,
             "%.2f us CPU per sleep + wake; pinned to one CPU %.2f us (%.0fk pairs/s)", any_cpu,
             one_cpu, (double)n1 / wall1 / 1e3);
}
#else
static void measure_thread_wake(double budget)
{
    (void)budget;
    M[M_THREAD_WAKE].na = "n/a (futex: Linux only)";
}
#endif

/* ---- 2. raw LMDB: the ceiling of any LMDB design -------------------------- */

static void measure_lmdb(const cfg *c, double budget)
{
    meas *m = &M[M_LMDB];
    char dir[4096];
    MDB_env *env = NULL;
    MDB_txn *txn;
    MDB_dbi dbi;
    unsigned char val[128], key[8];
    int rc;

    sub(dir, sizeof dir, c, "lmdb-raw");
    rm_tree(dir);
    mkdir(dir, 0700);
    memset(val, 'v', sizeof val);
    if ((rc = mdb_env_create(&env)) != 0 || (rc = mdb_env_set_mapsize(env, (size_t)1 << 30)) ||
        (rc = mdb_env_open(env, dir, 0, 0600)) != 0 ||
        (rc = mdb_txn_begin(env, NULL, 0, &txn)) != 0 ||
        (rc = mdb_dbi_open(txn, NULL, 0, &dbi)) != 0 || (rc = mdb_txn_commit(txn)) != 0) {
        fprintf(stderr, "bindlog-bench: lmdb: %s\n", mdb_strerror(rc));
        m->na = "lmdb failed";
        g_failed = 1;
        mdb_env_close(env);
        return;
    }
    size_t cap = 1 << 20, n = 0;
    uint64_t *lat = malloc(cap * sizeof(uint64_t));
    uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)(budget * 1e9), t = t0;
    while (t < deadline && n < cap) {
        uint64_t i = n + 1;
        for (int b = 0; b < 8; b++)
            key[b] = (unsigned char)(i >> (56 - 8 * b));
        MDB_val k = {sizeof key, key}, v = {sizeof val, val};
        if ((rc = mdb_txn_begin(env, NULL, 0, &txn)) != 0 ||
            (rc = mdb_put(txn, dbi, &k, &v, 0)) != 0 || (rc = mdb_txn_commit(txn)) != 0) {
            m->errors++;
            g_failed = 1;
            break;
        }
        uint64_t t2 = now_ns();
        lat[n++] = t2 - t;
        t = t2;
    }
    mdb_env_close(env);
    if (!c->keep)
        rm_tree(dir);
    m->events = n;
    m->secs = (double)(t - t0) / 1e9;
    m->rate = (double)n / m->secs;
    percentiles(lat, n, &m->p50_us, &m->p99_us);
    m->ran = 1;
    free(lat);
}

/* ---- 6. batches ------------------------------------------------------------ */

/* Apply the stream in batches of 1000 for `budget` seconds (or all of it
 * when budget <= 0); per-batch latency. */
static void run_batches(meas *m, bindlog *h, const workload *w, size_t limit, double budget)
{
    bindlog_event be[BATCH];
    bindlog_result res[BATCH];
    size_t nb = (limit + BATCH - 1) / BATCH, done = 0, b = 0;
    uint64_t *lat = malloc((nb ? nb : 1) * sizeof(uint64_t));
    uint64_t t0 = now_ns(), t = t0;
    uint64_t deadline = budget > 0 ? t0 + (uint64_t)(budget * 1e9) : UINT64_MAX;
    int first_err = 0;
    double cpu0 = thread_cpu();

    while (done < limit && t < deadline) {
        size_t cnt = limit - done < BATCH ? limit - done : BATCH, bad;
        for (size_t j = 0; j < cnt; j++)
            wl_to_bindlog(w, &w->ev[done + j], &be[j]);
        int rc = bindlog_apply_batch(h, be, cnt, res, &bad);
        uint64_t t2 = now_ns();
        lat[b++] = t2 - t;
        t = t2;
        if (rc < 0) {
            m->errors++;
            first_err = rc;
            break;
        }
        for (size_t j = 0; j < cnt; j++)
            if (res[j].outcome != w->ev[done + j].outcome)
                m->mismatches++;
        done += cnt;
    }
    m->cpu_secs = thread_cpu() - cpu0;
    m->events = done;
    m->secs = (double)(t - t0) / 1e9;
    m->rate = m->secs > 0 ? (double)done / m->secs : 0;
    percentiles(lat, b, &m->p50_us, &m->p99_us);
    m->ran = 1;
    if (m->errors || m->mismatches) {
        g_failed = 1;
        snprintf(m->note, sizeof m->note, "%" PRIu64 " errors (%s), %" PRIu64 " mismatches",
                 m->errors, bindlog_code_name(first_err), m->mismatches);
    } else {
        snprintf(m->note, sizeof m->note, "latency per %u-event batch; %.0fk/CPU-s", BATCH,
                 per_cpu(m) / 1e3);
    }
    free(lat);
}

/* ---- 8. reads ---------------------------------------------------------- */

typedef struct getter {
    bindlog *h;
    const workload *w;
    pthread_barrier_t *go;
    uint64_t seed, n, errors, t0, t1;
    double budget, cpu;
    pthread_t th;
} getter;

static void *getter_main(void *arg)
{
    getter *g = arg;
    bindlog_binding b;
    uint64_t s = g->seed;
    pthread_barrier_wait(g->go);
    double cpu0 = thread_cpu();
    g->t0 = now_ns();
    uint64_t deadline = g->t0 + (uint64_t)(g->budget * 1e9);
    for (;;) {
        for (int i = 0; i < 256; i++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            uint32_t k = (uint32_t)((s >> 33) % g->w->nkeys);
            if (bindlog_get(g->h, g->w->keys[k], &b) != 0)
                g->errors++;
        }
        g->n += 256;
        if ((g->t1 = now_ns()) >= deadline)
            break;
    }
    g->cpu = thread_cpu() - cpu0;
    return NULL;
}

static void measure_get(meas *m, bindlog *h, const workload *w, int threads, double budget)
{
    getter g[8];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)threads);
    for (int t = 0; t < threads; t++) {
        g[t] = (getter){.h = h, .w = w, .go = &go, .seed = 1234567u + (uint64_t)t * 7919u,
                        .budget = budget};
        pthread_create(&g[t].th, NULL, getter_main, &g[t]);
    }
    double sum = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(g[t].th, NULL);
        m->events += g[t].n;
        m->errors += g[t].errors;
        m->cpu_secs += g[t].cpu;
        double secs = (double)(g[t].t1 - g[t].t0) / 1e9;
        if (secs > m->secs)
            m->secs = secs;
        sum += (double)g[t].n / secs;
    }
    pthread_barrier_destroy(&go);
    m->rate = sum / threads; /* per thread */
    m->p50_us = m->p99_us = -1;
    m->ran = 1;
    snprintf(m->note, sizeof m->note, "%.2fM gets/s in all; %.2fM/CPU-s", sum / 1e6,
             per_cpu(m) / 1e6);
    if (m->errors) {
        g_failed = 1;
        snprintf(m->note, sizeof m->note, "%" PRIu64 " errors", m->errors);
    }
}

/* ---- 8. the bulk store: build, open, maintenance, sizes -------------------- */

static void progress_nop(void *ctx, uint64_t done, uint64_t total)
{
    (void)ctx;
    (void)done;
    (void)total;
}

static void rate_of(meas *m, uint64_t records, uint64_t t0, double cpu0, int rc)
{
    m->secs = (double)(now_ns() - t0) / 1e9;
    m->cpu_secs = process_cpu() - cpu0;
    m->events = records;
    m->rate = m->secs > 0 ? (double)records / m->secs : 0;
    m->p50_us = m->p99_us = -1;
    m->ran = 1;
    if (rc != 0) {
        m->errors = 1;
        g_failed = 1;
        snprintf(m->note, sizeof m->note, "failed: %s", bindlog_code_name(rc));
    } else {
        snprintf(m->note, sizeof m->note, "cpu %.3f s (all threads)", m->cpu_secs);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* m := the run of `runs` (MAINT_RUNS of them, filled by rate_of) with the
 * median rate, its note naming every run's rate; a failed run is the
 * result (the bench fails). */
_Static_assert(MAINT_RUNS == 3, "median_of's note names three runs");
static void median_of(meas *m, meas *runs)
{
    double r[MAINT_RUNS];
    int pick = -1;
    for (int i = 0; i < MAINT_RUNS; i++) {
        if (runs[i].errors && pick < 0)
            pick = i;
        r[i] = runs[i].rate;
    }
    qsort(r, MAINT_RUNS, sizeof r[0], cmp_double);
    for (int i = 0; pick < 0 && i < MAINT_RUNS; i++)
        if (runs[i].rate == r[MAINT_RUNS / 2])
            pick = i;
    meas *p = &runs[pick];
    m->secs = p->secs;
    m->cpu_secs = p->cpu_secs;
    m->events = p->events;
    m->rate = p->rate;
    m->p50_us = m->p99_us = -1;
    m->ran = 1;
    m->errors = p->errors;
    if (p->errors) {
        snprintf(m->note, sizeof m->note, "%s", p->note);
        return;
    }
    snprintf(m->note, sizeof m->note, "median of %.2fM %.2fM %.2fM/s; cpu %.3f s (all threads)",
             r[0] / 1e6, r[1] / 1e6, r[2] / 1e6, m->cpu_secs);
}

/* Check, replay, export and import rates, then the store's size after vacuum
 * and after compact + vacuum, on the store at `dir`, or, when the stream is
 * longer than MAINT_EVENTS or `dir` is NULL (--only maint), on a store of
 * its first MAINT_EVENTS events (a vacuum of the 1M-event store alone takes
 * minutes on a busy disk). */
static void maintenance(const cfg *c, const workload *w, const char *dir)
{
    char tmp[4096], own[4096] = "";
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *h;
    int rc;

    if (!HAVE(bindlog_check) && !HAVE(bindlog_replay) && !HAVE(bindlog_export) &&
        !HAVE(bindlog_vacuum)) {
        M[M_CHECK].na = M[M_REPLAY].na = M[M_EXPORT].na = M[M_IMPORT].na = NA_NOT_BUILT;
        S.vacuum_na = S.compact_na = NA_NOT_BUILT;
        return;
    }
    if (dir == NULL || w->n > MAINT_EVENTS) {
        size_t n = w->n > MAINT_EVENTS ? MAINT_EVENTS : w->n;
        progress(c, "building the maintenance store");
        sub(own, sizeof own, c, "maint");
        h = bl_fresh(own, w, BINDLOG_DURABILITY_NONE);
        uint64_t mism = 0;
        if (h == NULL || apply_batches(h, w, w->ev, n, &mism) != 0 || mism) {
            bindlog_close(h);
            g_failed = 1;
            M[M_CHECK].na = M[M_REPLAY].na = M[M_EXPORT].na = M[M_IMPORT].na = "setup failed";
            return;
        }
        bindlog_close(h);
        dir = own;
    }
    if ((rc = bindlog_open(&h, dir, &o)) != 0) {
        g_failed = 1;
        return;
    }
    /* each rate is the median of MAINT_RUNS runs: one run of 100k records
     * lasts a tenth of a second, which a page fault storm or another
     * process's burst can double */
    meas runs[MAINT_RUNS];
    if (HAVE(bindlog_check)) {
        progress(c, "bindlog_check");
        memset(runs, 0, sizeof runs);
        for (int i = 0; i < MAINT_RUNS; i++) {
            bindlog_check_report rep;
            uint64_t t0 = now_ns();
            double cpu0 = process_cpu();
            rc = bindlog_check(h, &rep, progress_nop, NULL);
            rate_of(&runs[i], rc == 0 ? rep.records : 0, t0, cpu0, rc);
            if (rc == 0 && rep.problems) {
                g_failed = runs[i].errors = 1;
                snprintf(runs[i].note, sizeof runs[i].note, "%" PRIu64 " problems: %.80s",
                         rep.problems, rep.message);
            }
        }
        median_of(&M[M_CHECK], runs);
    } else {
        M[M_CHECK].na = NA_NOT_BUILT;
    }
    if (HAVE(bindlog_replay)) {
        progress(c, "bindlog_replay");
        memset(runs, 0, sizeof runs);
        for (int i = 0; i < MAINT_RUNS; i++) {
            unsigned char dg[BINDLOG_DIGEST_SIZE];
            uint64_t last = 0, t0;
            sub(tmp, sizeof tmp, c, "replay");
            rm_tree(tmp);
            t0 = now_ns();
            double cpu0 = process_cpu();
            rc = bindlog_replay(h, tmp, UINT64_MAX, INT64_MAX, dg, &last, progress_nop, NULL);
            rate_of(&runs[i], last, t0, cpu0, rc);
            if (!c->keep || i + 1 < MAINT_RUNS)
                rm_tree(tmp);
        }
        median_of(&M[M_REPLAY], runs);
    } else {
        M[M_REPLAY].na = NA_NOT_BUILT;
    }
    if (HAVE(bindlog_export)) {
        progress(c, "bindlog_export");
        int fd = -1;
        sub(tmp, sizeof tmp, c, "export.blx");
        memset(runs, 0, sizeof runs);
        for (int i = 0; i < MAINT_RUNS; i++) {
            uint64_t recs = 0, t0 = now_ns();
            double cpu0 = process_cpu();
            fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0600);
            rc = fd < 0 ? BINDLOG_EIO : bindlog_export(h, 1, fd, &recs, progress_nop, NULL);
            if (fd >= 0 && rc == 0)
                fsync(fd);
            rate_of(&runs[i], recs, t0, cpu0, rc);
            if (rc != 0 || i + 1 == MAINT_RUNS)
                break; /* the last stream stays open for import */
            close(fd);
        }
        median_of(&M[M_EXPORT], runs);
        if (rc == 0)
            snprintf(M[M_EXPORT].note, sizeof M[M_EXPORT].note,
                     "stream %.1f MB; median of %d; cpu %.3f s", (double)file_size(tmp) / 1e6,
                     MAINT_RUNS, M[M_EXPORT].cpu_secs);
        if (fd >= 0 && rc == 0 && HAVE(bindlog_import)) {
            progress(c, "bindlog_import");
            memset(runs, 0, sizeof runs);
            for (int i = 0; i < MAINT_RUNS; i++) {
                char idir[4096];
                bindlog *h2 = NULL;
                uint64_t off = 0, recs = 0, t0;
                sub(idir, sizeof idir, c, "import");
                rm_tree(idir);
                lseek(fd, 0, SEEK_SET);
                t0 = now_ns();
                double cpu0 = process_cpu();
                rc = bindlog_open(&h2, idir, &o);
                if (rc == 0)
                    rc = bindlog_import(h2, fd, &recs, &off, progress_nop, NULL);
                bindlog_close(h2);
                rate_of(&runs[i], recs, t0, cpu0, rc);
                if (!c->keep || i + 1 < MAINT_RUNS)
                    rm_tree(idir);
            }
            median_of(&M[M_IMPORT], runs);
        } else if (!HAVE(bindlog_import)) {
            M[M_IMPORT].na = NA_NOT_BUILT;
        } else {
            M[M_IMPORT].na = "no stream (export failed)";
        }
        if (fd >= 0)
            close(fd);
        if (!c->keep)
            unlink(tmp);
    } else {
        M[M_EXPORT].na = NA_NOT_BUILT;
        M[M_IMPORT].na = HAVE(bindlog_import) ? "no stream (export not built)" : NA_NOT_BUILT;
    }
    bindlog_stats st;
    if (bindlog_stats_get(h, &st) == 0) {
        S.m_events = st.head_lsn;
        S.m_live = st.live_bindings;
        S.m_file = st.file_size;
    }
    bindlog_close(h);

    /* bytes per live binding: as built, after vacuum, after compact + vacuum */
    if (HAVE(bindlog_vacuum)) {
        progress(c, "bindlog_vacuum");
        uint64_t before = 0, after = 0;
        rc = bindlog_vacuum(dir, &before, &after);
        if (rc == 0) {
            S.vacuum_ran = 1;
            S.file_vacuum = after;
        } else {
            S.vacuum_na = bindlog_code_name(rc);
            g_failed = 1;
        }
        if (HAVE(bindlog_compact) && rc == 0) {
            progress(c, "bindlog_compact + vacuum");
            uint64_t removed = 0;
            if ((rc = bindlog_open(&h, dir, &o)) == 0) {
                rc = bindlog_compact(h, S.m_events + 1, &removed, progress_nop, NULL);
                bindlog_close(h);
            }
            if (rc == 0)
                rc = bindlog_vacuum(dir, &before, &after);
            if (rc == 0) {
                S.compact_ran = 1;
                S.file_compact = after;
            } else {
                S.compact_na = bindlog_code_name(rc);
                g_failed = 1;
            }
        } else if (!HAVE(bindlog_compact)) {
            S.compact_na = NA_NOT_BUILT;
        }
    } else {
        S.vacuum_na = S.compact_na = NA_NOT_BUILT;
    }
    if (own[0] != '\0' && !c->keep)
        rm_tree(own);

}

/* Open with a full log: a child process fills the write-ahead log of the
 * bulk store (the background checkpointer off) and exits without closing,
 * as a crashed gateway would; then read-only opens, each of which recovers
 * the whole log into its index (a read-only handle never checkpoints, so
 * the log stays full for every one). */
static void open_full_log(const cfg *c, const char *dir)
{
    meas *m = &M[M_OPEN_FULL_LOG];
    progress(c, "open time with a full log");
    pid_t pid = fork();
    if (pid < 0) {
        m->na = "fork failed";
        return;
    }
    if (pid == 0) {
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        bindlog *h = NULL;
        bindlog_stats st;
        char key[64], sid[64];
        setenv("BINDLOG_CHECKPOINT", "manual", 1);
        o.durability = BINDLOG_DURABILITY_NONE;
        if (bindlog_open(&h, dir, &o) != 0)
            _exit(2);
        for (uint64_t i = 0;; i++) {
            /* stop while the next 16 events surely fit (no checkpoint):
             * each takes well under 2 KiB of log */
            if (i % 16 == 0) {
                if (bindlog_stats_get(h, &st) != 0)
                    _exit(3);
                if (st.log_size - 4096 - st.log_used < 16 * 2048 + 8192)
                    _exit(0);
            }
            snprintf(key, sizeof key, "full-log-k%" PRIu64, i % 5000);
            snprintf(sid, sizeof sid, "full-log-s%" PRIu64, i);
            if (bindlog_bind(h, key, sid, NULL, NULL, "{\"origin\":\"bench\"}", 19, NULL) !=
                BINDLOG_APPLIED)
                _exit(4);
        }
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        m->na = "filling the log failed";
        g_failed = 1;
        return;
    }
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.read_only = 1;
    double ms[16];
    int nopen = c->quick ? 5 : 11;
    bindlog_stats st;
    for (int i = 0; i < nopen; i++) {
        bindlog *h = NULL;
        uint64_t t0 = now_ns();
        int rc = bindlog_open(&h, dir, &o);
        ms[i] = (double)(now_ns() - t0) / 1e6;
        if (rc != 0 || bindlog_stats_get(h, &st) != 0) {
            m->errors++;
            g_failed = 1;
            snprintf(m->note, sizeof m->note, "open failed: %s", bindlog_code_name(rc));
            bindlog_close(h);
            return;
        }
        S.open_full_records = st.head_lsn - st.checkpoint_lsn;
        bindlog_close(h);
    }
    qsort(ms, (size_t)nopen, sizeof ms[0], cmp_double);
    S.open_full_median_ms = ms[nopen / 2];
    m->ran = 1;
    m->events = (uint64_t)nopen;
    m->rate = 1000.0 / S.open_full_median_ms;
    m->p50_us = S.open_full_median_ms * 1000.0;
    m->p99_us = ms[nopen - 1] * 1000.0;
    snprintf(m->note, sizeof m->note, "%" PRIu64 " records (%.1f MiB) in the log; median %.2f ms",
             S.open_full_records, (double)st.log_used / (1 << 20), S.open_full_median_ms);
    /* a writer's open and close fold it, for what follows */
    bindlog *h = NULL;
    o.read_only = 0;
    o.durability = BINDLOG_DURABILITY_NONE;
    if (bindlog_open(&h, dir, &o) == 0)
        bindlog_close(h);
}

/* ---- the cross-process wake-up of bindlog_wait ---------------------------- */

/* A child waits on the store with bindlog_wait; the parent commits one
 * event (NORMAL) every 2 ms and sends the time it started the commit on a
 * pipe; the child takes the time it returned.  The latency is therefore
 * the commit plus the wake-up (an upper bound of the wake-up). */
static void measure_wake(const cfg *c)
{
    meas *m = &M[M_WAKE];
    char dir[4096];
    int times[2], ready[2];
    const int n = c->quick ? 100 : 400;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *h = NULL;

    progress(c, "bindlog_wait across processes");
    sub(dir, sizeof dir, c, "wake");
    rm_tree(dir);
    o.durability = BINDLOG_DURABILITY_NORMAL;
    if (bindlog_open(&h, dir, &o) != 0) {
        m->na = "setup failed";
        g_failed = 1;
        return;
    }
    bindlog_close(h);
    if (pipe(times) != 0 || pipe(ready) != 0) {
        m->na = "pipe failed";
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(times[1]);
        close(ready[0]);
        bindlog *ch = NULL;
        if (bindlog_open(&ch, dir, &o) != 0)
            _exit(2);
        uint64_t head = 0, seen;
        uint64_t *lat = malloc((size_t)n * sizeof *lat);
        for (int i = 0; i < n; i++) {
            char go = 1;
            if (write(ready[1], &go, 1) != 1)
                _exit(3);
            if (bindlog_wait(ch, head, 5000, &seen) != 0 || seen <= head)
                _exit(4);
            uint64_t woke = now_ns(), sent;
            if (read(times[0], &sent, sizeof sent) != (ssize_t)sizeof sent)
                _exit(5);
            lat[i] = woke > sent ? woke - sent : 0;
            head = seen;
        }
        if (write(ready[1], lat, (size_t)n * sizeof *lat) != (ssize_t)((size_t)n * sizeof *lat))
            _exit(6);
        bindlog_close(ch);
        _exit(0);
    }
    close(times[0]);
    close(ready[1]);
    if (bindlog_open(&h, dir, &o) != 0) {
        m->na = "open failed";
        g_failed = 1;
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return;
    }
    char key[32];
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        char go;
        if (read(ready[0], &go, 1) != 1)
            break;
        struct timespec ts = {0, 2000000}; /* the waiter is asleep by now */
        nanosleep(&ts, NULL);
        snprintf(key, sizeof key, "w%d", i);
        uint64_t t = now_ns();
        if (bindlog_bind(h, key, key, NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED ||
            write(times[1], &t, sizeof t) != (ssize_t)sizeof t) {
            m->errors++;
            break;
        }
    }
    uint64_t *lat = calloc((size_t)n, sizeof *lat);
    size_t got = 0;
    while (lat != NULL && got < (size_t)n * sizeof *lat) {
        ssize_t r = read(ready[0], (char *)lat + got, (size_t)n * sizeof *lat - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    int status;
    waitpid(pid, &status, 0);
    bindlog_close(h);
    close(times[1]);
    close(ready[0]);
    if (lat == NULL || got != (size_t)n * sizeof *lat || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        m->na = "the waiter failed";
        g_failed = 1;
        free(lat);
        return;
    }
    m->events = (uint64_t)n;
    m->secs = (double)(now_ns() - t0) / 1e9;
    m->rate = (double)n / m->secs;
    percentiles(lat, (size_t)n, &m->p50_us, &m->p99_us);
    snprintf(m->note, sizeof m->note, "commit + wake-up; p50 %.0f us, p99 %.0f us", m->p50_us,
             m->p99_us);
    m->ran = 1;
    free(lat);
    if (!c->keep)
        rm_tree(dir);
}

/* Where the bulk store's bytes are: each table's pages (branch, leaf,
 * overflow) and the free pages, read with LMDB directly while no handle
 * has the store open (LMDB allows one environment per file in a process).
 * The bench knows the store's table names here only for this breakdown
 * (docs/format.md, "LMDB tables"); a table it does not know counts as
 * "other".  Silent on failure: the breakdown is context, not a figure. */
static void table_sizes(const char *dir, uint64_t events)
{
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    MDB_dbi main_dbi;
    MDB_envinfo info;
    MDB_stat st;
    uint64_t b[8] = {0};

    if (mdb_env_create(&env) != 0)
        return;
    mdb_env_set_maxdbs(env, 32);
    if (mdb_env_open(env, dir, MDB_RDONLY, 0600) != 0 ||
        mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) != 0)
        goto out;
    mdb_env_stat(env, &st);
    mdb_env_info(env, &info);
    uint64_t psize = st.ms_psize;
    b[TS_USED] = ((uint64_t)info.me_last_pgno + 1) * psize;
    /* the free list: each value is a page list, its first word the count */
    b[TS_FREE] = bench_free_bytes(txn, psize);
    /* the named tables: the main database's keys */
    if (mdb_dbi_open(txn, NULL, 0, &main_dbi) != 0 || mdb_cursor_open(txn, main_dbi, &cur) != 0)
        goto out;
    char name[64];
    MDB_dbi dbi;
    while (bench_next_table(txn, cur, name, sizeof name, &dbi, &st) == 0) {
        uint64_t bytes =
            ((uint64_t)st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages) * psize;
        int t = TS_OTHER;
        for (int i = 0; i < TS_OTHER; i++)
            if (strcmp(name, ts_name[i]) == 0)
                t = i;
        b[t] += bytes;
    }
    memcpy(S.table_bytes, b, sizeof b);
    S.tables_events = events;
    S.tables_ran = 1;
out:
    if (cur != NULL)
        mdb_cursor_close(cur);
    if (txn != NULL)
        mdb_txn_abort(txn);
    mdb_env_close(env);
}

/* Flush DIR/data.mdb and drop it from the page cache (no root needed). */
static int evict_data(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int rc = fdatasync(fd) != 0 ? errno : posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return rc;
}

static void sort_small(double *v, int n)
{
    for (int a = 1; a < n; a++) /* insertion sort, a handful of values */
        for (int b = a; b > 0 && v[b - 1] > v[b]; b--) {
            double x = v[b];
            v[b] = v[b - 1];
            v[b - 1] = x;
        }
}

/* What a restarted writer pays for its first write on the bulk store: a
 * new environment (no other handle open), a FULL bind right after open,
 * then a second (the steady cost); median of a few.  Two cases: warm
 * (data.mdb in the page cache, as the load left it) and cold (data.mdb
 * dropped from the page cache before each open, as after a restart on a
 * busy host: the open's whole-store walk then reads the disk while the
 * write flushes the log).  The row is the cold case, the note gives both.
 * The walk is off the write path (docs/design.md, "Damaged files");
 * bindlog-first-write measures the same with more detail. */
static void first_write(const cfg *c, const char *dir)
{
    meas *m = &M[M_FIRST_WRITE];
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *h;
    bindlog_result res;
    double first[2][8], second[2][8];
    int n = c->quick ? 3 : 5, rc = 0, i = 0, cold = 0;
    char key[64], sid[64];

    progress(c, "the first write after open, warm and cold");
    o.durability = BINDLOG_DURABILITY_FULL;
    for (cold = 0; rc == 0 && cold < 2; cold++) {
        for (i = 0; i < n; i++) {
            if (cold && (rc = evict_data(dir)) != 0) {
                snprintf(m->note, sizeof m->note, "failed: data.mdb out of the page cache: %s",
                         strerror(rc));
                break;
            }
            if ((rc = bindlog_open(&h, dir, &o)) != 0)
                break;
            double *slot[2] = {&first[cold][i], &second[cold][i]};
            for (int j = 0; j < 2 && rc >= 0; j++) {
                snprintf(key, sizeof key, "bench:first-write:%d:%d:%d", cold, i, j);
                snprintf(sid, sizeof sid, "bench-fw-%d-%d-%d", cold, i, j);
                uint64_t t0 = now_ns();
                rc = bindlog_bind(h, key, sid, NULL, NULL, NULL, 0, &res);
                *slot[j] = (double)(now_ns() - t0) / 1e6;
            }
            bindlog_close(h);
            if (rc != BINDLOG_APPLIED)
                break;
            rc = 0;
        }
    }
    if (rc != 0) {
        m->errors++;
        g_failed = 1;
        if (m->note[0] == 0)
            snprintf(m->note, sizeof m->note, "failed: %s", bindlog_code_name(rc));
        return;
    }
    for (cold = 0; cold < 2; cold++) {
        sort_small(first[cold], n);
        sort_small(second[cold], n);
    }
    S.first_write_median_ms = first[1][n / 2];
    S.second_write_median_ms = second[1][n / 2];
    m->ran = 1;
    m->events = (uint64_t)n;
    m->secs = 0;
    m->rate = 1000.0 / S.first_write_median_ms;
    m->p50_us = S.first_write_median_ms * 1000.0;
    m->p99_us = first[1][n - 1] * 1000.0;
    snprintf(m->note, sizeof m->note,
             "%" PRIu64 " events; FULL; p50 uncached 1st %.2f, 2nd %.2f ms; cached 1st %.2f, "
             "2nd %.2f ms",
             S.events, S.first_write_median_ms, S.second_write_median_ms, first[0][n / 2],
             second[0][n / 2]);
}

static void bulk_store(const cfg *c, const workload *w)
{
    char dir[4096];
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_stats st;
    bindlog *h;
    int rc;

    /* build it: the setup, then the whole stream in batches (NONE) */
    progress(c, "apply_batch x1000, NONE: bulk-loading the store");
    sub(dir, sizeof dir, c, "bulk");
    h = bl_fresh(dir, w, BINDLOG_DURABILITY_NONE);
    if (h == NULL) {
        M[M_BATCH_NONE].na = M[M_GET1].na = M[M_GET2].na = M[M_OPEN].na = "setup failed";
        return;
    }
    bindlog_stats before;
    memset(&before, 0, sizeof before);
    bindlog_stats_get(h, &before);
    /* the caller's CPU (the row's per-CPU-second figure) and the whole
     * process's, which adds the background checkpointer's: on two cores
     * the wall rate is bounded by the busier of the two threads */
    double pcpu0 = process_cpu();
    run_batches(&M[M_BATCH_NONE], h, w, w->n, 0);
    double pcpu = process_cpu() - pcpu0;
    note_group(&M[M_BATCH_NONE], h, &before);
    snprintf(M[M_BATCH_NONE].note, sizeof M[M_BATCH_NONE].note,
             "latency per %u-event batch; caller %.0fk/CPU-s, process %.0fk/CPU-s", BATCH,
             per_cpu(&M[M_BATCH_NONE]) / 1e3,
             pcpu > 0 ? (double)M[M_BATCH_NONE].events / pcpu / 1e3 : 0.0);

    progress(c, "bindlog_get, 1 and 2 threads");
    measure_get(&M[M_GET1], h, w, 1, c->secs * 0.75);
    measure_get(&M[M_GET2], h, w, 2, c->secs * 0.75);

    if (bindlog_stats_get(h, &st) == 0) {
        S.events = st.head_lsn;
        S.live_bindings = st.live_bindings;
        S.file_before = st.file_size;
    }
    bindlog_close(h);
    table_sizes(dir, S.events);

    /* open time: the first open after the build, then the median of more */
    progress(c, "open time");
    double ms[16];
    int nopen = c->quick ? 5 : 11;
    for (int i = 0; i < nopen; i++) {
        uint64_t t0 = now_ns();
        rc = bindlog_open(&h, dir, &o);
        ms[i] = (double)(now_ns() - t0) / 1e6;
        if (rc != 0) {
            M[M_OPEN].errors++;
            g_failed = 1;
            snprintf(M[M_OPEN].note, sizeof M[M_OPEN].note, "open failed: %s",
                     bindlog_code_name(rc));
            break;
        }
        bindlog_close(h);
    }
    if (M[M_OPEN].errors == 0) {
        S.open_first_ms = ms[0];
        S.open_max_ms = 0;
        for (int i = 0; i < nopen; i++)
            S.open_max_ms = ms[i] > S.open_max_ms ? ms[i] : S.open_max_ms;
        double sorted[16];
        memcpy(sorted, ms, sizeof(double) * (size_t)nopen);
        for (int i = 1; i < nopen; i++) /* insertion sort, 11 values */
            for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
                double x = sorted[j];
                sorted[j] = sorted[j - 1];
                sorted[j - 1] = x;
            }
        S.open_median_ms = sorted[nopen / 2];
        M[M_OPEN].ran = 1;
        M[M_OPEN].events = (uint64_t)nopen;
        M[M_OPEN].rate = 1000.0 / S.open_median_ms;
        M[M_OPEN].p50_us = S.open_median_ms * 1000.0;
        M[M_OPEN].p99_us = S.open_max_ms * 1000.0;
        snprintf(M[M_OPEN].note, sizeof M[M_OPEN].note,
                 "%" PRIu64 " events; first open %.2f ms, median %.2f ms", S.events,
                 S.open_first_ms, S.open_median_ms);
    }

    first_write(c, dir);
    open_full_log(c, dir);

    /* maintenance rates and sizes, where the library has them, on a store
     * of at most MAINT_EVENTS events (this one, or a smaller one) */
    maintenance(c, w, dir);
    if (!c->keep)
        rm_tree(dir);
}

/* ---- BEGIN etcd (--etcd; peer_etcd.c) ----------------------------------------
 *
 * On each cluster (own 1-member and 3-member loopback clusters, or the one
 * given with --etcd-endpoints): the raw client (the ceiling), then bindlog
 * on etcd:// with 1 writer and with 16, each under its own fresh prefix
 * holding the setup of a smaller workload (ETCD_NKEYS keys: the same mix,
 * fewer keys to bind before timing).  Until the library has an etcd backend
 * (bindlog_open("etcd://...") fails), the bindlog rows say why and print
 * n/a; they light up by themselves once it opens. */

#define ETCD_NKEYS 2000u
#define ETCD_NKEYS_QUICK 500u

static char etcd_where[2][1100]; /* "127.0.0.1:P,..." per cluster, for the table */
static workload *etcd_w;         /* the etcd rows' workload, for the table */

/* Bind the setup's keys through bindlog on etcd with 16 writers (as events
 * of the stream, outcomes checked).  0 or -1 with m->na set. */
static int etcd_setup(meas *m, bindlog *h, const workload *w)
{
    static char why[96];
    meas tmp = {.id = "setup"};
    workload ws = *w;
    ws.ev = w->setup;
    ws.n = w->nkeys;
    run_writers(&tmp, &bl_contender, h, &ws, 16, 600.0);
    if (tmp.errors || tmp.mismatches || tmp.events != w->nkeys) {
        snprintf(why, sizeof why, "setup failed: %.70s", tmp.note[0] ? tmp.note : "incomplete");
        m->na = why;
        return -1;
    }
    return 0;
}

/* Add "etcd CPU x ms/event" to m's note: the members' CPU time over the
 * run (the measure that bounds these rows on a shared machine). */
static void note_etcd_cpu(meas *m, double cpu0, double cpu1)
{
    size_t n = strlen(m->note);
    if (cpu0 < 0 || cpu1 < cpu0 || m->events == 0 || n + 40 >= sizeof m->note)
        return;
    snprintf(m->note + n, sizeof m->note - n, "%setcd CPU %.2f ms/event", n ? "; " : "",
             (cpu1 - cpu0) * 1e3 / (double)m->events);
}

/* bindlog on etcd://endpoints/prefix with `threads` writers. */
static void etcd_bindlog(meas *m, const etcd_cluster *cl, const char *prefix, const workload *w,
                         int threads, double budget)
{
    const char *endpoints = cl->endpoints;
    static char why[2][96];
    char loc[1400];
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *h = NULL;
    struct stat st;
    char slash[200];
    int stray = lstat("etcd:", &st) == 0;
    snprintf(loc, sizeof loc, "etcd://%s/%s", endpoints, prefix);
    snprintf(slash, sizeof slash, "/%s", prefix);
    int rc = bindlog_open(&h, loc, &o);
    if (rc != 0) {
        /* no etcd backend in this library yet, or it could not open */
        char *y = why[threads > 1];
        snprintf(y, sizeof why[0], "n/a (bindlog_open(etcd://): %s)", bindlog_code_name(rc));
        m->na = y;
        return;
    }
    if (!stray && lstat("etcd:", &st) == 0) {
        /* a library without the etcd backend took the location for a
         * directory path ("etcd:/host:port/prefix"): remove it */
        bindlog_close(h);
        rm_tree("etcd:");
        m->na = "n/a (no etcd backend: etcd:// opened as a directory)";
        return;
    }
    if (etcd_setup(m, h, w) == 0) {
        /* proof that the store is in etcd: keys under the prefix */
        if (etcd_count_prefix(endpoints, prefix) + etcd_count_prefix(endpoints, slash) <= 0) {
            m->na = "n/a (no keys under the prefix in etcd: not the etcd backend)";
        } else {
            /* events per commit of the measured run alone, not the setup */
            bindlog_stats s0, s1;
            int have = bindlog_stats_get(h, &s0) == 0;
            double cpu0 = etcd_cluster_cpu(cl);
            run_writers(m, &bl_contender, h, w, threads, budget);
            double cpu1 = etcd_cluster_cpu(cl);
            if (have && bindlog_stats_get(h, &s1) == 0 && s1.commits > s0.commits) {
                m->per_commit = (double)(s1.grouped_events - s0.grouped_events) /
                                (double)(s1.commits - s0.commits);
                if (m->note[0] == '\0')
                    snprintf(m->note, sizeof m->note, "%.1f events/commit", m->per_commit);
            }
            note_etcd_cpu(m, cpu0, cpu1);
        }
    } else {
        g_failed = 1;
    }
    bindlog_close(h);
}

static void measure_etcd(const cfg *c, const workload *w)
{
    int given = c->etcd_endpoints != NULL;
    double budget = c->quick ? 1.0 : (c->secs * 2 > 3.0 ? c->secs * 2 : 3.0);
    int have = given || etcd_available();
    static char glabel[3][64];

    for (int slot = 0; slot < 2; slot++) {
        meas *raw = &M[M_EX_1 + 3 * slot], *one = raw + 1, *many = raw + 2;
        int members = slot ? 3 : 1;
        etcd_cluster cl = {.members = members};
        char prefix[160], d[4096];

        if (given && slot == 1) {
            raw->na = one->na = many->na = "n/a (--etcd-endpoints: one cluster)";
            continue;
        }
        if (given) {
            const char *lbl[3] = {"raw client, 1 writer", "bindlog, 1 writer",
                                  "bindlog, 16 writers"};
            for (int i = 0; i < 3; i++) {
                snprintf(glabel[i], sizeof glabel[i], "etcd given: %s", lbl[i]);
                raw[i].label = glabel[i];
            }
            snprintf(cl.endpoints, sizeof cl.endpoints, "%s", c->etcd_endpoints);
        } else if (!have) {
            raw->na = one->na = many->na = "n/a (etcd not installed)";
            g_failed = 1;
            continue;
        } else {
            progress(c, slot ? "etcd: starting a 3-member cluster" : "etcd: starting a 1-member cluster");
            sub(d, sizeof d, c, slot ? "etcd-3" : "etcd-1");
            if (etcd_cluster_start(&cl, members, d) != 0) {
                fprintf(stderr, "bindlog-bench: could not start a %d-member etcd cluster\n",
                        members);
                raw->na = one->na = many->na = "n/a (the cluster did not start)";
                g_failed = 1;
                continue;
            }
        }
        snprintf(etcd_where[slot], sizeof etcd_where[slot], "%s", cl.endpoints);

        /* (i) the raw client: the ceiling */
        progress(c, slot ? "etcd 3-member: raw client" : "etcd 1-member: raw client");
        snprintf(prefix, sizeof prefix, "bindlog-bench-%ld-%lld-raw", (long)getpid(),
                 (long long)wall_ms());
        ex_shared *x = ex_open(cl.endpoints, prefix, w);
        if (x != NULL) {
            double cpu0 = etcd_cluster_cpu(&cl);
            run_writers(raw, &ex_contender, x, w, 1, budget);
            note_etcd_cpu(raw, cpu0, etcd_cluster_cpu(&cl));
            ex_close(x);
        } else {
            raw->na = "setup failed";
            g_failed = 1;
        }
        if (given)
            etcd_wipe_prefix(cl.endpoints, prefix);

        /* (ii) and (iii): bindlog on etcd://, 1 and 16 writers */
        for (int k = 0; k < 2; k++) {
            meas *m = k ? many : one;
            progress(c, k ? (slot ? "etcd 3-member: bindlog, 16 writers"
                                  : "etcd 1-member: bindlog, 16 writers")
                          : (slot ? "etcd 3-member: bindlog, 1 writer"
                                  : "etcd 1-member: bindlog, 1 writer"));
            snprintf(prefix, sizeof prefix, "bindlog-bench-%ld-%lld-bl%d", (long)getpid(),
                     (long long)wall_ms(), k ? 16 : 1);
            etcd_bindlog(m, &cl, prefix, w, k ? 16 : 1, budget);
            if (given) { /* however the backend maps the prefix to keys */
                char slash[200];
                snprintf(slash, sizeof slash, "/%s", prefix);
                etcd_wipe_prefix(cl.endpoints, prefix);
                etcd_wipe_prefix(cl.endpoints, slash);
            }
        }
        etcd_cluster_stop(&cl, c->keep);
    }
}

/* ---- END etcd ---------------------------------------------------------------- */

/* ---- output ---------------------------------------------------------------- */

typedef struct ratio {
    const char *id, *label;
    int num, den;      /* measurements, or -1 for an absolute target */
    double target;     /* >= target is met (or <= for open) */
    int at_most;
    double value;
    int have;
    int cpu;           /* compare rates per CPU-second */
} ratio;

static ratio R[] = {
    /* issue 11: the write-ahead log */
    {"full1_over_sqlite1", "FULL x1 / SQLite FULL x1", M_BL1, M_SQ1, 1.1, 0, 0, 0, 0},
    {"full1_over_fsync", "FULL x1 / fdatasync limit", M_BL1, M_FSYNC, 0.7, 0, 0, 0, 0},
    /* issue 22: a new store from its first event, a restarted writer's first write */
    {"fresh1_over_fsync", "FULL x1 fresh store / fdatasync", M_BLFRESH1, M_FSYNC, 0.8, 0, 0, 0,
     0},
    {"first_write_ms", "first write ms, bulk, cold (median)", M_FIRST_WRITE, -1, 2, 1, 0, 0, 0},
    {"full16_over_sqlite16", "FULL x16 / SQLite FULL x16", M_BL16, M_SQ16, 8, 0, 0, 0, 0},
    {"full64_over_sqlite64", "FULL x64 / SQLite FULL x64", M_BL64, M_SQ64, 20, 0, 0, 0, 0},
    {"fresh16_over_sqlite16", "FULL x16 fresh store / SQLite x16", M_BLFRESH16, M_SQ16, 8, 0, 0,
     0, 0},
    {"fresh64_over_sqlite64", "FULL x64 fresh store / SQLite x64", M_BLFRESH64, M_SQ64, 20, 0, 0,
     0, 0},
    {"normal1_over_sqlitenormal1", "NORMAL x1 / SQLite NORMAL x1", M_BLNORMAL1, M_SQNORMAL1,
     1.5, 0, 0, 0, 0},
    {"none1_over_sqliteoff1", "NONE x1 / SQLite OFF x1", M_BLNONE1, M_SQOFF1, 3, 0, 0, 0, 0},
    {"open_full_log_ms", "open ms, full log (median)", M_OPEN_FULL_LOG, -1, 100, 1, 0, 0, 0},
    {"wake_p99_us", "wait wake-up p99 us, other process", M_WAKE, -1, 50000, 1, 0, 0, 0},
    {"full1_over_lmdb", "FULL x1 / raw LMDB", M_BL1, M_LMDB, 0.9, 0, 0, 0, 0},
    {"batch_events_per_s", "apply_batch events/s", M_BATCH_NONE, -1, 250e3, 0, 0, 0, 0},
    {"get_per_thread_1", "get/s, 1 thread", M_GET1, -1, 2e6, 0, 0, 0, 0},
    {"get_per_thread_2", "get/s per thread, 2 threads", M_GET2, -1, 2e6, 0, 0, 0, 0},
    {"full1_over_json10k", "FULL x1 / JSON 10k", M_BL1, M_JSON10K, 4, 0, 0, 0, 0},
    {"full16_over_json10k", "FULL x16 / JSON 10k", M_BL16, M_JSON10K, 100, 0, 0, 0, 0},
    {"open_ms", "open ms (median)", M_OPEN, -1, 10, 1, 0, 0, 0},
    /* issue 11 item 6: data.mdb's size over the events, as built */
    {"bytes_per_event_bulk", "bytes per event, bulk store", M_BATCH_NONE, -2, 300, 1, 0, 0, 0},
    /* issue 3; on the maintenance store (100k events: scripts/maint-speed.sh
     * measures a 5M-event one, docs/tools.md) */
    {"check_records_per_s", "check records/s", M_CHECK, -1, 1e6, 0, 0, 0, 0},
    {"replay_records_per_s", "replay records/s", M_REPLAY, -1, 1e6, 0, 0, 0, 0},
    {"export_records_per_s", "export records/s", M_EXPORT, -1, 1e6, 0, 0, 0, 0},
    {"import_records_per_s", "import records/s", M_IMPORT, -1, 1e6, 0, 0, 0, 0},
    /* issue 24: a routed message costs no more than a split */
    {"route1_over_split1", "route x1 / split x1, FULL", M_ROUTE1, M_SPLIT1, 1.0, 0, 0, 0, 0},
    {"route16_over_split16", "route x16 / split x16, FULL", M_ROUTE16, M_SPLIT16, 1.0, 0, 0, 0,
     0},
    {"route1_over_sqlite1", "route x1 / SQLite route x1", M_ROUTE1, M_SQROUTE1, 1.1, 0, 0, 0, 0},
    {"route16_over_sqlite16", "route x16 / SQLite route x16", M_ROUTE16, M_SQROUTE16, 8, 0, 0, 0,
     0},
    /* the same per CPU-second of the callers: what the disk's noise at x1 hides */
    {"route1_over_split1_cpu", "route x1 / split x1, per CPU-s", M_ROUTE1, M_SPLIT1, 0, 0, 0, 0,
     1},
    {"route16_over_split16_cpu", "route x16 / split x16, per CPU-s", M_ROUTE16, M_SPLIT16, 0, 0,
     0, 0, 1},
    /* context, no target */
    {"full1_over_json1k", "FULL x1 / JSON 1k", M_BL1, M_JSON1K, 0, 0, 0, 0, 0},
    {"normal1_over_full1", "NORMAL x1 / FULL x1", M_BLNORMAL1, M_BL1, 0, 0, 0, 0, 0},
    {"full16_over_full1", "FULL x16 / FULL x1", M_BL16, M_BL1, 0, 0, 0, 0, 0},
    {"full64_over_full1", "FULL x64 / FULL x1", M_BL64, M_BL1, 0, 0, 0, 0, 0},
    {"sqlite16_over_sqlite1", "SQLite x16 / SQLite x1", M_SQ16, M_SQ1, 0, 0, 0, 0, 0},
    {"none1_over_sqliteoff1_cpu", "NONE / SQLite OFF, per CPU-s", M_BLNONE1, M_SQOFF1, 0, 0, 0, 0,
     1},
    {"batch_per_cpu_second", "apply_batch events/CPU-s", M_BATCH_NONE, -1, 0, 0, 0, 0, 1},
    {"get_per_cpu_second_1", "get/CPU-s, 1 thread", M_GET1, -1, 0, 0, 0, 0, 1},
    {"get_per_cpu_second_2", "get/CPU-s, 2 threads", M_GET2, -1, 0, 0, 0, 0, 1},
    /* etcd (--etcd) */
    {"etcd1_bindlog1_over_raw", "etcd 1m: bindlog x1 / raw", M_EB1_1, M_EX_1, 0.8, 0, 0, 0, 0},
    {"etcd1_bindlog16_over_1", "etcd 1m: bindlog x16 / x1", M_EB16_1, M_EB1_1, 5, 0, 0, 0, 0},
    {"etcd3_bindlog1_over_raw", "etcd 3m: bindlog x1 / raw", M_EB1_3, M_EX_3, 0.8, 0, 0, 0, 0},
    {"etcd3_bindlog16_over_1", "etcd 3m: bindlog x16 / x1", M_EB16_3, M_EB1_3, 5, 0, 0, 0, 0},
};
#define NRATIOS (sizeof R / sizeof R[0])

static void compute_ratios(void)
{
    for (size_t i = 0; i < NRATIOS; i++) {
        ratio *r = &R[i];
        if (!M[r->num].ran || M[r->num].errors)
            continue;
        if (r->num == M_OPEN) {
            r->value = S.open_median_ms;
        } else if (r->num == M_OPEN_FULL_LOG) {
            r->value = S.open_full_median_ms;
        } else if (r->num == M_FIRST_WRITE) {
            r->value = S.first_write_median_ms;
        } else if (r->num == M_WAKE) {
            r->value = M[M_WAKE].p99_us;
        } else if (r->den == -2) {
            if (S.events == 0 || S.file_before == 0)
                continue;
            r->value = (double)S.file_before / (double)S.events;
        } else if (r->den < 0) {
            r->value = r->cpu ? per_cpu(&M[r->num]) : M[r->num].rate;
        } else {
            if (!M[r->den].ran || M[r->den].rate <= 0)
                continue;
            if (r->cpu && (per_cpu(&M[r->den]) <= 0 || per_cpu(&M[r->num]) <= 0))
                continue;
            r->value = r->cpu ? per_cpu(&M[r->num]) / per_cpu(&M[r->den])
                              : M[r->num].rate / M[r->den].rate;
        }
        r->have = 1;
    }
}

static const char *verdict(const ratio *r)
{
    if (r->target == 0)
        return "";
    if (!r->have)
        return "n/a";
    return (r->at_most ? r->value <= r->target : r->value >= r->target) ? "met" : "MISSED";
}

static void fmt_rate(char *out, size_t cap, double v)
{
    if (v >= 1e6)
        snprintf(out, cap, "%.2fM", v / 1e6);
    else if (v >= 1e4)
        snprintf(out, cap, "%.1fk", v / 1e3);
    else
        snprintf(out, cap, "%.1f", v);
}

static void fmt_lat(char *out, size_t cap, double us)
{
    if (us < 0)
        snprintf(out, cap, "-");
    else if (us >= 10000)
        snprintf(out, cap, "%.1f ms", us / 1000);
    else
        snprintf(out, cap, "%.1f us", us);
}

static void fmt_bytes_per(char *out, size_t cap, int ran, uint64_t bytes, uint64_t live,
                          const char *na)
{
    if (!ran)
        snprintf(out, cap, "%s", na ? na : "n/a");
    else if (live == 0)
        snprintf(out, cap, "n/a (no live bindings)");
    else
        snprintf(out, cap, "%.0f B (file %.1f MB)", (double)bytes / (double)live,
                 (double)bytes / 1e6);
}

static void print_table(const cfg *c, const workload *w, double total_secs)
{
    char a[32], b[32], d[32];
    printf("bindlog-bench %s: %u keys, %zu-event stream (seed %" PRIu64 "), %s run, %.0f s\n",
           bindlog_version(), w->nkeys, w->n, c->seed, c->quick ? "quick" : "default", total_secs);
    printf("stream mix: ");
    for (int k = 1; k < WL_K_COUNT; k++)
        printf("%s %.1f%%%s", wl_kind_name(k), 100.0 * (double)w->kinds[k] / (double)w->n,
               k + 1 < WL_K_COUNT ? ", " : "\n");
    printf("dir: %s\n\n", c->root);
    printf("%-3s %-40s %10s %10s %10s  %s\n", "#", "measurement", "per second", "p50", "p99",
           "notes");
    static const int item[M_COUNT] = {1, 1, 2, 3, 3, 4, 5, 5, 5, 5, 5, 5, 3, 3, 6, 6, 6, 6, 7, 7,
                                         8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 10, 10, 10, 10, 10,
                                         10, 9, 9, 9, 9, 9, 9};
    for (int i = 0; i < M_COUNT; i++) {
        const meas *m = &M[i];
        if (i >= M_EX_1 && !c->etcd)
            continue; /* etcd rows only with --etcd */
        if (!m->ran) {
            printf("%-3d %-40s %10s %10s %10s  %s\n", item[i], m->label, "-", "-", "-",
                   m->na ? m->na : "n/a");
            continue;
        }
        fmt_rate(a, sizeof a, m->rate);
        fmt_lat(b, sizeof b, m->p50_us);
        fmt_lat(d, sizeof d, m->p99_us);
        char u[96] = "";
        if (m->proc_cpu_us > 0)
            snprintf(u, sizeof u, "; %.1f us CPU (%.1f in the kernel), %.2f cs per event",
                     m->proc_cpu_us, m->proc_sys_us, m->csw);
        printf("%-3d %-40s %10s %10s %10s  %s%s%" PRIu64 " %s in %.1f s%s\n", item[i], m->label,
               a, b, d, m->note, m->note[0] ? "; " : "", m->events, m->unit, m->secs, u);
    }
    char s1[96], s2[96], s3[96], s4[96];
    fmt_bytes_per(s1, sizeof s1, S.events > 0, S.file_before, S.live_bindings, "n/a");
    fmt_bytes_per(s2, sizeof s2, S.m_events > 0, S.m_file, S.m_live, "n/a");
    fmt_bytes_per(s3, sizeof s3, S.vacuum_ran, S.file_vacuum, S.m_live, S.vacuum_na);
    fmt_bytes_per(s4, sizeof s4, S.compact_ran, S.file_compact, S.m_live, S.compact_na);
    printf("\nbytes per live binding (data file / live bindings)\n");
    printf("  bulk store, %7" PRIu64 " events, as built:    %s\n", S.events, s1);
    printf("  maint store, %6" PRIu64 " events, as built:   %s\n", S.m_events, s2);
    printf("  maint store after vacuum:                %s\n", s3);
    printf("  maint store after compact + vacuum:      %s\n", s4);
    if (S.tables_ran && S.tables_events > 0) {
        double ev = (double)S.tables_events;
        printf("bytes per event, bulk store after close (data.mdb's pages / %" PRIu64
               " events):\n ",
               S.tables_events);
        for (int i = 0; i <= TS_USED; i++)
            printf(" %s %.0f", ts_name[i], (double)S.table_bytes[i] / ev);
        printf("\n");
    }
    if (c->etcd)
        printf("\netcd rows (9): %u keys bound before timing, %zu-event stream of the same mix; "
               "clusters: %s%s%s\n", etcd_w ? etcd_w->nkeys : 0, etcd_w ? etcd_w->n : 0,
               etcd_where[0][0] ? etcd_where[0] : "-", c->etcd_endpoints ? "" : "; ",
               c->etcd_endpoints ? "" : (etcd_where[1][0] ? etcd_where[1] : "-"));

    printf("\n%-34s %10s %10s  %s\n", "ratio", "value", "target", "verdict");
    for (size_t i = 0; i < NRATIOS; i++) {
        const ratio *r = &R[i];
        char v[32], t[32];
        if (r->num >= M_EX_1 && !c->etcd)
            continue;
        if (!r->have)
            snprintf(v, sizeof v, "n/a");
        else if (r->num == M_OPEN || r->num == M_OPEN_FULL_LOG || r->num == M_FIRST_WRITE)
            snprintf(v, sizeof v, "%.2f ms", r->value);
        else if (r->num == M_WAKE)
            snprintf(v, sizeof v, "%.0f us", r->value);
        else if (r->den == -2)
            snprintf(v, sizeof v, "%.0f B", r->value);
        else if (r->den < 0)
            fmt_rate(v, sizeof v, r->value);
        else
            snprintf(v, sizeof v, "%.2fx", r->value);
        if (r->target == 0)
            snprintf(t, sizeof t, "-");
        else if (r->num == M_OPEN || r->num == M_OPEN_FULL_LOG || r->num == M_FIRST_WRITE)
            snprintf(t, sizeof t, "<= %g ms", r->target);
        else if (r->num == M_WAKE)
            snprintf(t, sizeof t, "<= %g ms", r->target / 1000);
        else if (r->den == -2)
            snprintf(t, sizeof t, "<= %g B", r->target);
        else if (r->den < 0)
            snprintf(t, sizeof t, ">= %gM/s", r->target / 1e6);
        else
            snprintf(t, sizeof t, ">= %gx", r->target);
        printf("%-34s %10s %10s  %s\n", r->label, v, t, verdict(r));
    }
    if (c->quick)
        printf("\n(--quick: short budgets and a small bulk store; figures are a smoke test)\n");
}

static void json_num(const char *name, double v, int ok, int last)
{
    if (ok && isfinite(v))
        printf("\"%s\":%.6g%s", name, v, last ? "" : ",");
    else
        printf("\"%s\":null%s", name, last ? "" : ",");
}

static void json_str(const char *name, const char *s, int last)
{
    printf("\"%s\":\"", name);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    printf("\"%s", last ? "" : ",");
}

static void print_json(const cfg *c, const workload *w, double total_secs)
{
    printf("{");
    json_str("version", bindlog_version(), 0);
    json_str("mode", c->quick ? "quick" : "default", 0);
    json_str("dir", c->root, 0);
    json_num("keys", w->nkeys, 1, 0);
    json_num("stream_events", (double)w->n, 1, 0);
    json_num("seed", (double)c->seed, 1, 0);
    json_num("seconds_per_measurement", c->secs, 1, 0);
    json_num("total_seconds", total_secs, 1, 0);
    printf("\"mix\":{");
    for (int k = 1; k < WL_K_COUNT; k++)
        json_num(wl_kind_name(k), (double)w->kinds[k] / (double)w->n, 1, k + 1 == WL_K_COUNT);
    printf("},\"measurements\":{");
    for (int i = 0; i < M_COUNT; i++) {
        const meas *m = &M[i];
        printf("\"%s\":{", m->id);
        json_str("label", m->label, 0);
        json_num("ran", m->ran, 1, 0);
        if (!m->ran) {
            json_str("na", m->na ? m->na : "n/a", 1);
        } else {
            json_str("unit", m->unit, 0);
            json_num("per_second", m->rate, 1, 0);
            json_num("p50_us", m->p50_us, m->p50_us >= 0, 0);
            json_num("p99_us", m->p99_us, m->p99_us >= 0, 0);
            json_num("count", (double)m->events, 1, 0);
            json_num("seconds", m->secs, 1, 0);
            json_num("errors", (double)m->errors, 1, 0);
            json_num("mismatches", (double)m->mismatches, 1, 0);
            json_num("events_per_commit", m->per_commit, m->per_commit > 0, 0);
            json_num("cpu_seconds", m->cpu_secs, m->cpu_secs > 0, 0);
            json_num("per_cpu_second", per_cpu(m), m->cpu_secs > 0, 0);
            json_num("process_cpu_us_per_event", m->proc_cpu_us, m->proc_cpu_us > 0, 0);
            json_num("process_sys_us_per_event", m->proc_sys_us, m->proc_cpu_us > 0, 0);
            json_num("context_switches_per_event", m->csw, m->proc_cpu_us > 0, 0);
            json_num("first_half_second_per_second", m->early_rate, m->early_rate > 0, 0);
            json_str("note", m->note, 1);
        }
        printf("}%s", i + 1 < M_COUNT ? "," : "");
    }
    printf("},\"bulk_store\":{");
    json_num("events", (double)S.events, 1, 0);
    json_num("live_bindings", (double)S.live_bindings, 1, 0);
    json_num("open_first_ms", S.open_first_ms, M[M_OPEN].ran, 0);
    json_num("open_median_ms", S.open_median_ms, M[M_OPEN].ran, 0);
    json_num("open_max_ms", S.open_max_ms, M[M_OPEN].ran, 0);
    json_num("first_write_median_ms", S.first_write_median_ms, M[M_FIRST_WRITE].ran, 0);
    json_num("second_write_median_ms", S.second_write_median_ms, M[M_FIRST_WRITE].ran, 0);
    json_num("file_bytes", (double)S.file_before, 1, 0);
    double lb = (double)S.live_bindings, ml = (double)S.m_live;
    json_num("bytes_per_live_binding", (double)S.file_before / lb, lb > 0, 0);
    json_num("bytes_per_event", (double)S.file_before / (double)S.events, S.events > 0, 0);
    for (int i = 0; i <= TS_USED; i++) {
        char name[48];
        snprintf(name, sizeof name, "closed_%s_bytes_per_event", ts_name[i]);
        json_num(name, (double)S.table_bytes[i] / (double)S.tables_events,
                 S.tables_ran && S.tables_events > 0, 0);
    }
    json_num("maint_events", (double)S.m_events, 1, 0);
    json_num("maint_live_bindings", ml, 1, 0);
    json_num("maint_file_bytes", (double)S.m_file, S.m_events > 0, 0);
    json_num("maint_file_bytes_after_vacuum", (double)S.file_vacuum, S.vacuum_ran, 0);
    json_num("maint_file_bytes_after_compact_vacuum", (double)S.file_compact, S.compact_ran, 0);
    json_num("maint_bytes_per_live_binding", (double)S.m_file / ml, ml > 0, 0);
    json_num("maint_bytes_per_live_binding_after_vacuum", (double)S.file_vacuum / ml,
             ml > 0 && S.vacuum_ran, 0);
    json_num("maint_bytes_per_live_binding_after_compact_vacuum", (double)S.file_compact / ml,
             ml > 0 && S.compact_ran, 0);
    json_str("vacuum", S.vacuum_ran ? "ran" : (S.vacuum_na ? S.vacuum_na : "n/a"), 0);
    json_str("compact", S.compact_ran ? "ran" : (S.compact_na ? S.compact_na : "n/a"), 1);
    printf("},\"ratios\":{");
    for (size_t i = 0; i < NRATIOS; i++) {
        const ratio *r = &R[i];
        printf("\"%s\":{", r->id);
        json_num("value", r->value, r->have, 0);
        json_num("target", r->target, r->target != 0, 0);
        json_str("comparison", r->at_most ? "<=" : ">=", 0);
        json_str("verdict", r->target == 0 ? "info" : verdict(r), 1);
        printf("}%s", i + 1 < NRATIOS ? "," : "");
    }
    printf("},");
    json_num("failed", g_failed, 1, 1);
    printf("}\n");
}

/* ---- main ------------------------------------------------------------------ */

static int usage(void)
{
    fprintf(stderr, "usage: bindlog-bench [--quick] [--json] [--dir DIR] [--keep] "
                    "[--events N] [--seconds S] [--seed N] [--only G,...] "
                    "[--etcd] [--etcd-endpoints E]\n");
    return 2;
}

int main(int argc, char **argv)
{
    cfg c = {.seed = 42};
    const char *dir = NULL;
    double secs = 0;
    long long events = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--quick"))
            c.quick = 1;
        else if (!strcmp(a, "--json"))
            c.json = 1;
        else if (!strcmp(a, "--keep"))
            c.keep = 1;
        else if (!strcmp(a, "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(a, "--events") && i + 1 < argc)
            events = atoll(argv[++i]);
        else if (!strcmp(a, "--seconds") && i + 1 < argc)
            secs = atof(argv[++i]);
        else if (!strcmp(a, "--only") && i + 1 < argc)
            c.only = argv[++i];
        else if (!strcmp(a, "--etcd"))
            c.etcd = 1;
        else if (!strcmp(a, "--etcd-endpoints") && i + 1 < argc)
            c.etcd = 1, c.etcd_endpoints = argv[++i];
        else if (!strcmp(a, "--seed") && i + 1 < argc)
            c.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return usage() == 2 ? 0 : 2;
        else
            return usage();
    }
    c.events = events > 0 ? (size_t)events : (c.quick ? 30000 : 1000000);
    c.secs = secs > 0 ? secs : (c.quick ? 0.3 : 1.5);
    if (events < 0 || c.events < 2 * BATCH)
        return usage();

    if (dir != NULL) {
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "bindlog-bench: %s: %s\n", dir, strerror(errno));
            return 1;
        }
        snprintf(c.root, sizeof c.root, "%s", dir);
    } else {
        const char *t = getenv("TMPDIR");
        snprintf(c.root, sizeof c.root, "%s/bindlog-bench-XXXXXX", t && *t ? t : "/tmp");
        if (mkdtemp(c.root) == NULL) {
            fprintf(stderr, "bindlog-bench: mkdtemp %s: %s\n", c.root, strerror(errno));
            return 1;
        }
        c.own_root = 1;
    }

    uint64_t t_start = now_ns();
    workload w, w1k;
    progress(&c, "generating the workload");
    if (wl_generate(&w, NKEYS, c.events, c.seed) != 0 ||
        wl_generate(&w1k, 1000, c.quick ? 20000 : 50000, c.seed + 1) != 0) {
        fprintf(stderr, "bindlog-bench: out of memory\n");
        return 1;
    }
    double t = c.secs;

    if (want(&c, "fsync")) {
        progress(&c, "1. fdatasync limit");
        measure_fsync(&c, t);
        progress(&c, "1. thread sleep + wake");
        measure_thread_wake(t);
    }
    if (want(&c, "lmdb")) {
        progress(&c, "2. raw LMDB");
        measure_lmdb(&c, t);
    }
    if (want(&c, "full1")) {
        progress(&c, "3. bindlog FULL, 1 writer");
        measure_bindlog(&c, &M[M_BL1], &w, BINDLOG_DURABILITY_FULL, 1, t, "bl-full-1");
    }
    if (want(&c, "fresh1")) {
        progress(&c, "3. bindlog FULL, 1 writer, a fresh store's first events");
        measure_fresh(&c, &M[M_BLFRESH1], &w, "bl-full-1-fresh");
    }
    if (want(&c, "sqlite1")) {
        progress(&c, "4. SQLite FULL, 1 writer");
        measure_sqlite(&c, &M[M_SQ1], &w, "FULL", 1, t, "sq-full-1");
    }
    if (want(&c, "full16")) {
        progress(&c, "5. bindlog FULL, 16 writers");
        measure_bindlog(&c, &M[M_BL16], &w, BINDLOG_DURABILITY_FULL, 16, t, "bl-full-16");
    }
    if (want(&c, "sqlite16")) {
        progress(&c, "5. SQLite FULL, 16 writers");
        measure_sqlite(&c, &M[M_SQ16], &w, "FULL", 16, t, "sq-full-16");
    }
    if (want(&c, "full64")) {
        progress(&c, "5. bindlog FULL, 64 writers");
        measure_bindlog(&c, &M[M_BL64], &w, BINDLOG_DURABILITY_FULL, 64, t, "bl-full-64");
    }
    if (want(&c, "fresh16")) {
        progress(&c, "5. bindlog FULL, 16 writers, a fresh store");
        measure_bindlog_fresh(&c, &M[M_BLFRESH16], &w, 16, t, "bl-full-16-fresh");
    }
    if (want(&c, "fresh64")) {
        progress(&c, "5. bindlog FULL, 64 writers, a fresh store");
        measure_bindlog_fresh(&c, &M[M_BLFRESH64], &w, 64, t, "bl-full-64-fresh");
    }
    if (want(&c, "sqlite64")) {
        progress(&c, "5. SQLite FULL, 64 writers");
        measure_sqlite(&c, &M[M_SQ64], &w, "FULL", 64, t, "sq-full-64");
    }
    if (want(&c, "normal1")) {
        progress(&c, "bindlog NORMAL, 1 writer");
        measure_bindlog(&c, &M[M_BLNORMAL1], &w, BINDLOG_DURABILITY_NORMAL, 1, t, "bl-normal-1");
    }
    if (want(&c, "sqlnormal1")) {
        progress(&c, "SQLite NORMAL, 1 writer");
        measure_sqlite(&c, &M[M_SQNORMAL1], &w, "NORMAL", 1, t, "sq-normal-1");
    }
    if (want(&c, "none1")) {
        progress(&c, "6. bindlog NONE, 1 writer");
        measure_bindlog(&c, &M[M_BLNONE1], &w, BINDLOG_DURABILITY_NONE, 1, t, "bl-none-1");
    }
    if (want(&c, "off1")) {
        progress(&c, "6. SQLite OFF, 1 writer");
        measure_sqlite(&c, &M[M_SQOFF1], &w, "OFF", 1, t, "sq-off-1");
    }
    if (want(&c, "batchfull")) {
        progress(&c, "6. apply_batch x1000, FULL");
        char d[4096];
        sub(d, sizeof d, &c, "bl-batch-full");
        bindlog *h = bl_fresh(d, &w, BINDLOG_DURABILITY_FULL);
        if (h != NULL) {
            run_batches(&M[M_BATCH_FULL], h, &w, w.n, t * 0.5);
            bindlog_close(h);
        } else {
            M[M_BATCH_FULL].na = "setup failed";
        }
        if (!c.keep)
            rm_tree(d);
    }
    if (want(&c, "json")) {
        progress(&c, "7. JSON rewrite, 1,000 keys");
        measure_json(&c, &M[M_JSON1K], &w1k, t, "json-1k");
        progress(&c, "7. JSON rewrite, 10,000 keys");
        measure_json(&c, &M[M_JSON10K], &w, t, "json-10k");
    }
    if (want(&c, "route")) {
        /* streams of their own over the same keys and setup; enough events
         * for the budget at any plausible rate */
        workload wr, wsp;
        size_t rn = c.events < 400000 ? c.events : 400000;
        if (wl_derive_route(&w, rn, c.seed, &wr) != 0 ||
            wl_derive_splits(&w, rn, c.seed, &wsp) != 0) {
            fprintf(stderr, "bindlog-bench: out of memory\n");
            return 1;
        }
        /* route and split alternate in halves, route-split-split-route, so
         * that a disk whose speed drifts during the run (a shared machine)
         * weighs on both alike */
        static const int threads[2] = {1, 16};
        static const int mr[2] = {M_ROUTE1, M_ROUTE16}, ms[2] = {M_SPLIT1, M_SPLIT16};
        for (int i = 0; i < 2; i++) {
            meas h[4];
            char what[96];
            snprintf(what, sizeof what, "route: bindlog_route and bindlog_split FULL, %d writer%s",
                     threads[i], threads[i] > 1 ? "s" : "");
            progress(&c, what);
            for (int j = 0; j < 4; j++) {
                int route = j == 0 || j == 3;
                h[j] = route ? M[mr[i]] : M[ms[i]];
                measure_bindlog(&c, &h[j], route ? &wr : &wsp, BINDLOG_DURABILITY_FULL,
                                threads[i], t / 2, route ? "bl-route" : "bl-split");
            }
            combine_halves(&M[mr[i]], &h[0], &h[3]);
            combine_halves(&M[ms[i]], &h[1], &h[2]);
        }
        progress(&c, "route: SQLite route transaction FULL, 1 writer");
        measure_sqlite(&c, &M[M_SQROUTE1], &wr, "FULL", 1, t, "sq-route-1");
        progress(&c, "route: SQLite route transaction FULL, 16 writers");
        measure_sqlite(&c, &M[M_SQROUTE16], &wr, "FULL", 16, t, "sq-route-16");
        wl_free_derived(&wr);
        wl_free_derived(&wsp);
    }
    if (want(&c, "bulk"))
        bulk_store(&c, &w);
    else if (c.only != NULL && want(&c, "maint"))
        maintenance(&c, &w, NULL); /* the maintenance rows alone, on their own store */
    if (want(&c, "wake"))
        measure_wake(&c);
    if (c.etcd && want(&c, "etcd")) {
        static workload we; /* printed with the table */
        progress(&c, "etcd: generating its workload");
        if (wl_generate(&we, c.quick ? ETCD_NKEYS_QUICK : ETCD_NKEYS,
                        c.quick ? 20000 : 100000, c.seed + 2) != 0) {
            fprintf(stderr, "bindlog-bench: out of memory\n");
            return 1;
        }
        measure_etcd(&c, &we);
        etcd_w = &we;
    }

    double total = (double)(now_ns() - t_start) / 1e9;
    compute_ratios();
    if (c.json)
        print_json(&c, &w, total);
    else
        print_table(&c, &w, total);
    fflush(stdout);

    wl_free(&w);
    wl_free(&w1k);
    if (etcd_w != NULL)
        wl_free(etcd_w);
    if (c.own_root && !c.keep)
        rm_tree(c.root);
    return g_failed ? 1 : 0;
}
