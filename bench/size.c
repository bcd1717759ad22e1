/*
 * size.c -- bindlog-size: what a realistic bulk load leaves on disk.
 *
 *   bindlog-size DIR [--keys N] [--events N] [--seed N] [--log-size MIB]
 *
 * Loads a new store DIR (which must not exist) through bindlog_apply_batch,
 * 1,000 events a call, durability NONE: `--events` events (default 300,000)
 * over `--keys` keys (default 10,000), each picking a key at random and
 * doing, with these probabilities (a key's first event is its first
 * contact, a BIND, as is any event on a key left unbound):
 *
 *   70%  SPLIT       the current session -> a fresh child (compression)
 *   15%  NEW_SESSION a fresh session (/new)
 *    8%  BIND        a fresh session
 *    7%  INVALIDATE  (/stop)
 *
 * Session ids are UUID-like (36 bytes), keys a gateway's
 * ("agent:main:telegram:dm:<n>"), every event carries a ~60-byte JSON
 * origin.  After a close it prints data.mdb's size as `ls -l` shows it, per
 * event, and each table's pages per event (branch, leaf and overflow pages
 * as mdb_stat counts them, and the free pages).  Then it loads the same
 * number of events again into the same store (a warm store: pages freed by
 * the first load are reused) and prints the same, over all events and for
 * the second load alone.  The same seed gives the same stream.  After each
 * report, a line per table: its entries, their average key and value, and
 * how full its leaves are.  `--log-size` makes the store with a log of MIB
 * MiB (bindlog_options.log_size; default the library's, 8): a checkpoint
 * starts when half of it is used, so a larger log folds more events into
 * each one.  Each load's line gives its time and rate, the close (which
 * checkpoints the rest) included.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bindlog.h"
#include "mdb_tables.h"

#define BATCH 1000

static uint64_t g_log_size; /* --log-size, bytes; 0: the library's default */

typedef struct key_state {
    uint64_t cur; /* the bound session's number, 0 = unbound */
} key_state;

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

/* Room for the strings of one batch. */
typedef struct slot {
    char key[48], sid[40], expect[40], origin[96];
} slot;

static void uuid_of(char *out, uint64_t n)
{
    uint64_t h = n * 0x9E3779B97F4A7C15u, l = ~n * 0xC2B2AE3D27D4EB4Fu;
    snprintf(out, 40, "%08x-%04x-4%03x-a%03x-%012llx", (unsigned)(h >> 32),
             (unsigned)(h >> 16) & 0xffff, (unsigned)h & 0xfff, (unsigned)(l >> 52) & 0xfff,
             (unsigned long long)(l & 0xffffffffffffull));
}

typedef struct load {
    key_state *k;
    uint32_t nkeys;
    uint64_t seed, next_sid, msg;
} load;

/* One event on a random key into ev (strings in sl). */
static void make_event(load *w, bindlog_event *ev, slot *sl)
{
    uint32_t key = (uint32_t)(rng(&w->seed) % w->nkeys);
    key_state *k = &w->k[key];
    unsigned roll = (unsigned)(rng(&w->seed) % 100);
    memset(ev, 0, sizeof *ev);
    snprintf(sl->key, sizeof sl->key, "agent:main:telegram:dm:%u", 100000000u + key);
    ev->key = sl->key;
    int len = snprintf(sl->origin, sizeof sl->origin,
                       "{\"ch\":\"telegram\",\"chat\":%u,\"msg\":%llu,\"from\":\"gw-1\"}",
                       100000000u + key, (unsigned long long)++w->msg);
    ev->origin = sl->origin;
    ev->origin_len = (size_t)len;
    if (k->cur == 0) {
        /* first contact, or the key was stopped */
        k->cur = ++w->next_sid;
        uuid_of(sl->sid, k->cur);
        ev->type = BINDLOG_EVENT_BIND;
        ev->session_id = sl->sid;
        return;
    }
    if (roll < 70) {
        uuid_of(sl->expect, k->cur);
        k->cur = ++w->next_sid;
        uuid_of(sl->sid, k->cur);
        ev->type = BINDLOG_EVENT_SPLIT;
        ev->session_id = sl->sid;
        ev->expect = sl->expect;
        ev->generation = BINDLOG_ANY_GENERATION;
    } else if (roll < 85) {
        k->cur = ++w->next_sid;
        uuid_of(sl->sid, k->cur);
        ev->type = BINDLOG_EVENT_NEW_SESSION;
        ev->session_id = sl->sid;
    } else if (roll < 93) {
        k->cur = ++w->next_sid;
        uuid_of(sl->sid, k->cur);
        ev->type = BINDLOG_EVENT_BIND;
        ev->session_id = sl->sid;
    } else {
        k->cur = 0;
        ev->type = BINDLOG_EVENT_INVALIDATE;
        ev->origin = NULL;
        ev->origin_len = 0;
    }
}

static int run_load(const char *dir, load *w, uint64_t n)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s;
    static bindlog_event ev[BATCH];
    static bindlog_result res[BATCH];
    static slot sl[BATCH];
    o.durability = BINDLOG_DURABILITY_NONE;
    o.log_size = g_log_size;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (bindlog_open(&s, dir, &o) != 0) {
        fprintf(stderr, "bindlog-size: open %s: %s\n", dir, bindlog_last_error());
        return 1;
    }
    for (uint64_t done = 0; done < n;) {
        size_t m = n - done < BATCH ? (size_t)(n - done) : BATCH;
        for (size_t i = 0; i < m; i++)
            make_event(w, &ev[i], &sl[i]);
        size_t bad = 0;
        if (bindlog_apply_batch(s, ev, m, res, &bad) != 0) {
            fprintf(stderr, "bindlog-size: batch: event %zu: %s\n", bad, bindlog_last_error());
            bindlog_close(s);
            return 1;
        }
        for (size_t i = 0; i < m; i++)
            if (res[i].outcome != BINDLOG_APPLIED) {
                fprintf(stderr, "bindlog-size: an event was not applied (%d)\n", res[i].outcome);
                bindlog_close(s);
                return 1;
            }
        done += m;
    }
    bindlog_close(s);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("load   %" PRIu64 " events in %.2f s, %.0f events/s (open to close)\n", n, secs,
           (double)n / secs);
    return 0;
}

enum { T_LOG, T_SESSIONS, T_BINDINGS, T_CHILDREN, T_BASE, T_OTHER, T_FREE, T_N };
static const char *const t_name[T_N] = {"log",  "sessions", "bindings", "children",
                                        "base", "other",    "free"};

/* Each table's pages, and the free pages, read with LMDB while no handle
 * has the store open. */
static int tables(const char *dir, uint64_t b[T_N])
{
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    MDB_dbi main_dbi;
    MDB_stat st;
    int rc = 1;
    memset(b, 0, T_N * sizeof *b);
    if (mdb_env_create(&env) != 0)
        return 1;
    mdb_env_set_maxdbs(env, 32);
    if (mdb_env_open(env, dir, MDB_RDONLY, 0600) != 0 ||
        mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) != 0)
        goto out;
    mdb_env_stat(env, &st);
    uint64_t psize = st.ms_psize;
    b[T_FREE] = bench_free_bytes(txn, psize);
    if (mdb_dbi_open(txn, NULL, 0, &main_dbi) != 0 || mdb_cursor_open(txn, main_dbi, &cur) != 0)
        goto out;
    char name[64];
    MDB_dbi dbi;
    while (bench_next_table(txn, cur, name, sizeof name, &dbi, &st) == 0) {
        uint64_t bytes =
            ((uint64_t)st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages) * psize;
        int t = T_OTHER;
        for (int i = 0; i < T_BASE; i++)
            if (strcmp(name, t_name[i]) == 0)
                t = i;
        if (strncmp(name, "base_", 5) == 0)
            t = T_BASE;
        b[t] += bytes;
    }
    rc = 0;
out:
    if (cur != NULL)
        mdb_cursor_close(cur);
    if (txn != NULL)
        mdb_txn_abort(txn);
    mdb_env_close(env);
    return rc;
}

/*
 * What each table's entries hold, read with LMDB while no handle has the
 * store open: entries, the average key and value, and how full the leaves
 * are.  A leaf node costs its key and value plus LMDB's 8-byte node header
 * and a 2-byte slot in the page's index; a page has a 16-byte header.  So
 * "node" is key + value + 10, and "fill" is the nodes' bytes over the leaf
 * pages' bytes: what splitting leaves at random keys leaves unused.
 */
static void detail(const char *dir, uint64_t events)
{
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL, *tc = NULL;
    MDB_dbi main_dbi;
    MDB_val tk, tv;
    MDB_stat st;
    if (mdb_env_create(&env) != 0)
        return;
    mdb_env_set_maxdbs(env, 32);
    if (mdb_env_open(env, dir, MDB_RDONLY, 0600) != 0 ||
        mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) != 0 ||
        mdb_dbi_open(txn, NULL, 0, &main_dbi) != 0 ||
        mdb_cursor_open(txn, main_dbi, &cur) != 0)
        goto out;
    char name[64];
    MDB_dbi dbi;
    while (bench_next_table(txn, cur, name, sizeof name, &dbi, &st) == 0) {
        if (st.ms_entries == 0 || mdb_cursor_open(txn, dbi, &tc) != 0)
            continue;
        uint64_t kb = 0, vb = 0, n = 0;
        while (mdb_cursor_get(tc, &tk, &tv, MDB_NEXT) == 0) {
            kb += tk.mv_size;
            vb += tv.mv_size;
            n++;
        }
        mdb_cursor_close(tc);
        tc = NULL;
        double leaf = (double)st.ms_leaf_pages * st.ms_psize;
        printf("       %-13s %8" PRIu64 " entries (%.2f/event): key %.1f + value %.1f B, node "
               "%.1f B; %" PRIu64 " leaf + %" PRIu64 " branch + %" PRIu64
               " overflow pages, leaf fill %.0f%%\n",
               name, n, (double)n / (double)events, (double)kb / (double)n,
               (double)vb / (double)n, (double)(kb + vb + 10 * n) / (double)n,
               (uint64_t)st.ms_leaf_pages, (uint64_t)st.ms_branch_pages,
               (uint64_t)st.ms_overflow_pages,
               leaf > 0 ? 100.0 * (double)(kb + vb + 10 * n) / leaf : 0.0);
    }
out:
    if (cur != NULL)
        mdb_cursor_close(cur);
    if (txn != NULL)
        mdb_txn_abort(txn);
    mdb_env_close(env);
}

static void report(const char *what, const char *dir, uint64_t events, uint64_t base_size,
                   const uint64_t base_t[T_N], uint64_t delta_events)
{
    char path[4200];
    struct stat st;
    uint64_t t[T_N];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    if (stat(path, &st) != 0 || tables(dir, t) != 0) {
        fprintf(stderr, "bindlog-size: cannot read %s\n", path);
        exit(1);
    }
    printf("%-6s data.mdb %12lld bytes (ls -l), %8" PRIu64 " events: %6.1f B/event;", what,
           (long long)st.st_size, events, (double)st.st_size / (double)events);
    for (int i = 0; i < T_N; i++)
        if (t[i] != 0 || i < T_OTHER)
            printf(" %s %.1f", t_name[i], (double)t[i] / (double)events);
    printf("\n");
    if (delta_events != 0) {
        printf("       the second load alone: %+.1f B/event of data.mdb;",
               ((double)st.st_size - (double)base_size) / (double)delta_events);
        for (int i = 0; i < T_N; i++)
            if (t[i] != 0 || base_t[i] != 0 || i < T_OTHER)
                printf(" %s %+.1f", t_name[i],
                       ((double)t[i] - (double)base_t[i]) / (double)delta_events);
        printf("\n");
    }
    detail(dir, events);
}

int main(int argc, char **argv)
{
    uint64_t events = 300000, seed = 25;
    uint32_t nkeys = 10000;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--keys") == 0 && i + 1 < argc)
            nkeys = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--events") == 0 && i + 1 < argc)
            events = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--log-size") == 0 && i + 1 < argc)
            g_log_size = strtoull(argv[++i], NULL, 10) << 20;
        else if (argv[i][0] != '-' && dir == NULL)
            dir = argv[i];
        else {
            fprintf(stderr, "usage: bindlog-size DIR [--keys N] [--events N] [--seed N] [--log-size MIB]\n");
            return 2;
        }
    }
    struct stat st;
    if (dir == NULL || nkeys == 0 || events == 0) {
        fprintf(stderr, "usage: bindlog-size DIR [--keys N] [--events N] [--seed N] [--log-size MIB]\n");
        return 2;
    }
    if (stat(dir, &st) == 0) {
        fprintf(stderr, "bindlog-size: %s exists: give a new directory\n", dir);
        return 2;
    }
    load w = {calloc(nkeys, sizeof(key_state)), nkeys, seed, 0, 0};
    if (w.k == NULL)
        return 1;
    printf("bindlog-size: %u keys, %" PRIu64 " events a load, apply_batch x%d, NONE; format %d\n",
           nkeys, events, BATCH, BINDLOG_FORMAT_VERSION);
    if (run_load(dir, &w, events) != 0)
        return 1;
    uint64_t t1[T_N];
    char path[4200];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    if (stat(path, &st) != 0 || tables(dir, t1) != 0)
        return 1;
    report("fresh", dir, events, 0, NULL, 0);
    if (run_load(dir, &w, events) != 0)
        return 1;
    report("warm", dir, 2 * events, (uint64_t)st.st_size, t1, events);
    free(w.k);
    return 0;
}
