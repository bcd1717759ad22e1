/*
 * test_etcd_backend.c -- the etcd backend against real etcd clusters.
 *
 * Groups:
 *  - single: a 1-member cluster with etcd's default --max-txn-ops (128), so
 *    group commit has to cut groups into several Txns:
 *      * two gateway processes (fork), three threads each, racing splits on
 *        the same keys: for every (key, parent, generation) at most one
 *        split is APPLIED, the others STALE/MOVED; afterwards the log,
 *        re-applied into a fresh LMDB store, gives the same digest, and
 *        bindlog_check() passes;
 *      * 16 threads through one handle: groups larger than one Txn; a batch
 *        too big for one Txn is BINDLOG_EINVAL and writes nothing;
 *      * what is not a store (foreign keys, forged magic, a newer format, a
 *        store nested in another's prefix) is refused; bad locations too;
 *      * while an import's marker (meta "import") exists, writes are
 *        BINDLOG_EBUSY;
 *      * unreachable endpoints: BINDLOG_EIO, fast.
 *  - three: a 3-member cluster: kill -9 a follower, then the leader, while
 *    8 writer threads run; writes go on after the election; every
 *    acknowledged event is in the log and nothing else is, and check
 *    passes; then every
 *    member down: calls fail fast with BINDLOG_EIO and write nothing;
 *    service resumes when the members return.
 * Clusters are started with tests/etcd/cluster.sh in temporary directories
 * (its watchdog stops them if this process dies).  Without etcd the tests
 * skip, unless BINDLOG_REQUIRE_ETCD=1.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"
#include "testutil.h"

/* ---- harness ------------------------------------------------------------------ */

typedef struct cluster {
    int members;
    int up;
    char *dir;
    char endpoints[512];
} cluster;

static cluster single_cluster = {1, 0, NULL, ""};
static cluster three_cluster = {3, 0, NULL, ""};

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *script_path(void)
{
    static char path[4096];
    const char *src = getenv("BINDLOG_TEST_SOURCE_DIR");
    if (src != NULL && *src != '\0')
        snprintf(path, sizeof path, "%s/tests/etcd/cluster.sh", src);
    else
        snprintf(path, sizeof path, "%s/tests/etcd/cluster.sh", BINDLOG_TEST_SOURCE_DIR);
    return path;
}

/* Run "cluster.sh ARGS"; the first stdout line goes to out (may be NULL).
 * Returns the exit status (-1 if it could not run). */
static int run_script(char *out, size_t cap, const char *fmt, ...)
{
    char args[1024], cmd[6000], line[1024] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "BL_CLUSTER_OWNER_PID=%ld bash '%s' %s", (long)getpid(),
             script_path(), args);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    if (fgets(line, sizeof line, p) == NULL)
        line[0] = '\0';
    while (fgetc(p) != EOF) {
    }
    int status = pclose(p);
    line[strcspn(line, "\n")] = '\0';
    if (out != NULL)
        snprintf(out, cap, "%s", line);
    return status == -1 || !WIFEXITED(status) ? -1 : WEXITSTATUS(status);
}

static int group_setup(void **state, cluster *cl)
{
    *state = cl;
    if (run_script(NULL, 0, "check") != 0) {
        fprintf(stderr, "test_etcd_backend: etcd not found: %s\n",
                getenv("BINDLOG_REQUIRE_ETCD") ? "failing" : "skipping");
        return 0;
    }
    cl->dir = tu_mkdtemp("etcdbe");
    if (run_script(cl->endpoints, sizeof cl->endpoints, "start %d '%s/cluster'", cl->members,
                   cl->dir) != 0 ||
        cl->endpoints[0] == '\0') {
        fprintf(stderr, "test_etcd_backend: could not start a %d-member cluster\n",
                cl->members);
        return -1;
    }
    cl->up = 1;
    fprintf(stderr, "test_etcd_backend: %d-member cluster at %s\n", cl->members,
            cl->endpoints);
    return 0;
}

static int group_teardown(void **state)
{
    cluster *cl = *state;
    if (cl->dir != NULL) {
        if (cl->up)
            run_script(NULL, 0, "stop '%s/cluster'", cl->dir);
        tu_rmtree(cl->dir);
        free(cl->dir);
        cl->dir = NULL;
    }
    cl->up = 0;
    return 0;
}

static int setup_single(void **state) { return group_setup(state, &single_cluster); }
static int setup_three(void **state) { return group_setup(state, &three_cluster); }

static cluster *need_cluster(void **state)
{
    cluster *cl = *state;
    if (!cl->up) {
        const char *req = getenv("BINDLOG_REQUIRE_ETCD");
        if (req != NULL && strcmp(req, "1") == 0)
            fail_msg("etcd is not installed but BINDLOG_REQUIRE_ETCD=1");
        skip();
    }
    return cl;
}

/* A fresh store location on the cluster. */
static char *location(const cluster *cl, const char *tag)
{
    char *loc = malloc(1024);
    assert_non_null(loc);
    snprintf(loc, 1024, "etcd://%s/bindlog-be/%s-%ld-%ld", cl->endpoints, tag, (long)getpid(),
             now_ms());
    return loc;
}

static bindlog *xopen(const char *loc)
{
    bindlog *s = NULL;
    int rc = bindlog_open(&s, loc, NULL);
    if (rc != 0)
        fail_msg("bindlog_open(%s): %s", loc, bindlog_code_name(rc));
    return s;
}

/* ---- replay the etcd log into a fresh LMDB store ------------------------------------ */

static int64_t replay_clock_ms;
static int64_t replay_clock(void *ctx)
{
    (void)ctx;
    return replay_clock_ms;
}

/*
 * Re-apply every record of `s` through the public API into a new LMDB
 * store: each must be APPLIED with the same LSN and generation, and the
 * two digests must agree; then bindlog_check() must find nothing.  Returns
 * the number of records.
 */
static uint64_t replay_matches(bindlog *s)
{
    char *tmp = tu_mkdtemp("replay");
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/store", tmp);
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.clock_ms = replay_clock;
    bindlog *l = NULL;
    assert_int_equal(bindlog_open(&l, dir, &o), 0);

    unsigned char d1[BINDLOG_DIGEST_SIZE], d2[BINDLOG_DIGEST_SIZE];
    uint64_t head = 0, n = 0;
    assert_int_equal(bindlog_digest(s, d1, &head), 0);
    bindlog_iter *it;
    bindlog_record rec;
    int rc;
    assert_int_equal(bindlog_log_iter(s, 0, head, &it), 0);
    while ((rc = bindlog_iter_next_record(it, &rec)) == 1) {
        bindlog_event ev = {rec.type, rec.key, NULL, NULL, 0, NULL, NULL, 0};
        bindlog_result r;
        const void *origin = rec.origin_present ? (rec.origin ? rec.origin : "") : NULL;
        switch (rec.type) {
        case BINDLOG_EVENT_BIND:
        case BINDLOG_EVENT_NEW_SESSION:
            ev.session_id = rec.session_id;
            ev.reason = rec.reason;
            ev.origin = origin;
            ev.origin_len = rec.origin_len;
            break;
        case BINDLOG_EVENT_SPLIT:
            ev.session_id = rec.session_id;
            ev.expect = rec.other_id;
            ev.generation = BINDLOG_ANY_GENERATION;
            ev.origin = origin;
            ev.origin_len = rec.origin_len;
            break;
        default:
            ev.reason = rec.reason;
            break;
        }
        replay_clock_ms = rec.time_ms;
        size_t ei;
        assert_int_equal(bindlog_apply_batch(l, &ev, 1, &r, &ei), 0);
        if (r.outcome != BINDLOG_APPLIED || r.lsn != rec.lsn || r.generation != rec.generation)
            fail_msg("replay of lsn %llu: outcome %d lsn %llu gen %llu (record gen %llu)",
                     (unsigned long long)rec.lsn, r.outcome, (unsigned long long)r.lsn,
                     (unsigned long long)r.generation, (unsigned long long)rec.generation);
        n++;
    }
    assert_int_equal(rc, 0);
    bindlog_iter_close(it);
    assert_int_equal(n, head);
    assert_int_equal(bindlog_digest(l, d2, NULL), 0);
    assert_memory_equal(d1, d2, BINDLOG_DIGEST_SIZE);
    bindlog_close(l);
    tu_rmtree(tmp);
    free(tmp);

    /* and the library's own check agrees */
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    if (rep.problems != 0)
        fail_msg("check: %llu problems: %s", (unsigned long long)rep.problems, rep.message);
    assert_int_equal(rep.head_lsn, head);
    return n;
}

/* ---- two processes racing -------------------------------------------------------- */

#define RACE_KEYS 4
#define RACE_ROUNDS 40
#define RACE_THREADS 3

typedef struct racer {
    const char *loc;
    int proc, thread;
    FILE *out;
    pthread_mutex_t *mu;
} racer;

static void *race_thread(void *arg)
{
    racer *r = arg;
    bindlog *s = NULL;
    unsigned seed = (unsigned)(r->proc * 7919 + r->thread * 104729 + 1);
    if (bindlog_open(&s, r->loc, NULL) != 0)
        return (void *)1;
    for (int round = 0; round < RACE_ROUNDS; round++) {
        char key[16], child[64];
        bindlog_binding b;
        bindlog_result res;
        snprintf(key, sizeof key, "k%d", rand_r(&seed) % RACE_KEYS);
        if (bindlog_get(s, key, &b) != 0)
            return (void *)2;
        int rc;
        if (rand_r(&seed) % 10 == 0) {
            rc = bindlog_invalidate(s, key, NULL, &res);
            pthread_mutex_lock(r->mu);
            fprintf(r->out, "I %s %d %llu\n", key, rc, (unsigned long long)res.lsn);
            pthread_mutex_unlock(r->mu);
            continue;
        }
        snprintf(child, sizeof child, "%s-p%d-t%d-r%d", key, r->proc, r->thread, round);
        rc = bindlog_split(s, key, b.session_id, child, b.generation, NULL, 0, &res);
        pthread_mutex_lock(r->mu);
        fprintf(r->out, "S %s %s %llu %s %d %llu\n", key, b.session_id,
                (unsigned long long)b.generation, child, rc, (unsigned long long)res.lsn);
        pthread_mutex_unlock(r->mu);
    }
    bindlog_close(s);
    return NULL;
}

static void race_process(const char *loc, int proc, const char *path)
{
    FILE *out = fopen(path, "w");
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_t th[RACE_THREADS];
    racer rs[RACE_THREADS];
    int bad = out == NULL;
    for (int t = 0; t < RACE_THREADS && !bad; t++) {
        rs[t] = (racer){loc, proc, t, out, &mu};
        pthread_create(&th[t], NULL, race_thread, &rs[t]);
    }
    for (int t = 0; t < RACE_THREADS && out != NULL; t++) {
        void *rv;
        pthread_join(th[t], &rv);
        bad |= rv != NULL;
    }
    if (out != NULL)
        fclose(out);
    _exit(bad ? 3 : 0);
}

typedef struct claim {
    char key[16], parent[64];
    unsigned long long gen;
    int applied, other;
} claim;

static void be__two_processes_race_one_split_each(void **state)
{
    cluster *cl = need_cluster(state);
    char *loc = location(cl, "race");
    char *tmp = tu_mkdtemp("race");
    char paths[2][1200];
    bindlog_result r;

    bindlog *s = xopen(loc);
    for (int k = 0; k < RACE_KEYS; k++) {
        char key[16], sid[32];
        snprintf(key, sizeof key, "k%d", k);
        snprintf(sid, sizeof sid, "k%d-root", k);
        assert_int_equal(bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    }
    bindlog_close(s); /* no handle (no curl connection) crosses the fork */

    pid_t pids[2];
    for (int p = 0; p < 2; p++) {
        snprintf(paths[p], sizeof paths[p], "%s/racer%d.txt", tmp, p);
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0)
            race_process(loc, p, paths[p]);
    }
    for (int p = 0; p < 2; p++) {
        int st;
        assert_int_equal(waitpid(pids[p], &st, 0), pids[p]);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("racer %d failed (status %d)", p, st);
    }

    /* every (key, parent, generation): at most one APPLIED split */
    static claim claims[2 * RACE_THREADS * RACE_ROUNDS];
    size_t nclaims = 0;
    uint64_t applied = RACE_KEYS, splits_applied = 0, rejected = 0;
    for (int p = 0; p < 2; p++) {
        FILE *in = fopen(paths[p], "r");
        assert_non_null(in);
        char line[512], kind[4], key[16], parent[64], child[96];
        while (fgets(line, sizeof line, in) != NULL) {
            unsigned long long gen, lsn;
            int rc;
            if (sscanf(line, "%3s", kind) != 1)
                fail_msg("bad line %s", line);
            if (kind[0] == 'I') {
                assert_int_equal(sscanf(line, "I %15s %d %llu", key, &rc, &lsn), 3);
                assert_int_equal(rc, BINDLOG_APPLIED);
                applied++;
                continue;
            }
            assert_int_equal(
                sscanf(line, "S %15s %63s %llu %95s %d %llu", key, parent, &gen, child, &rc, &lsn),
                6);
            if (rc != BINDLOG_APPLIED && rc != BINDLOG_STALE && rc != BINDLOG_MOVED)
                fail_msg("split %s %s->%s: %s", key, parent, child, bindlog_code_name(rc));
            size_t i;
            for (i = 0; i < nclaims; i++)
                if (strcmp(claims[i].key, key) == 0 && strcmp(claims[i].parent, parent) == 0 &&
                    claims[i].gen == gen)
                    break;
            if (i == nclaims) {
                snprintf(claims[i].key, sizeof claims[i].key, "%s", key);
                snprintf(claims[i].parent, sizeof claims[i].parent, "%s", parent);
                claims[i].gen = gen;
                nclaims++;
            }
            if (rc == BINDLOG_APPLIED) {
                claims[i].applied++;
                applied++;
                splits_applied++;
            } else {
                claims[i].other++;
                rejected++;
            }
        }
        fclose(in);
    }
    size_t contested = 0;
    for (size_t i = 0; i < nclaims; i++) {
        if (claims[i].applied > 1)
            fail_msg("%s: parent %s generation %llu split %d times", claims[i].key,
                     claims[i].parent, claims[i].gen, claims[i].applied);
        contested += claims[i].applied + claims[i].other > 1;
    }
    print_message("race: %llu splits applied, %llu rejected, %zu of %zu (key, parent, "
                  "generation) contested\n",
                  (unsigned long long)splits_applied, (unsigned long long)rejected, contested,
                  nclaims);

    s = xopen(loc);
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, applied); /* every APPLIED is one record, nothing else */
    assert_int_equal(replay_matches(s), applied);
    bindlog_close(s);
    tu_store_remove(loc);
    tu_rmtree(tmp);
    free(tmp);
    free(loc);
}

/* ---- group commit over several Txns ------------------------------------------------- */

typedef struct gc_arg {
    bindlog *s;
    int t;
    int bad;
} gc_arg;

#define GC_THREADS 16
#define GC_EVENTS 40

static void *gc_thread(void *p)
{
    gc_arg *a = p;
    for (int i = 0; i < GC_EVENTS; i++) {
        char key[32], sid[32];
        bindlog_result r;
        snprintf(key, sizeof key, "g%d-%d", a->t, i % 5);
        snprintf(sid, sizeof sid, "g%d-%d", a->t, i);
        int rc = bindlog_bind(a->s, key, sid, NULL, NULL, NULL, 0, &r);
        if (rc != BINDLOG_APPLIED)
            a->bad++;
    }
    return NULL;
}

static void be__group_commit_cut_into_txns(void **state)
{
    cluster *cl = need_cluster(state);
    char *loc = location(cl, "group");
    bindlog *s = xopen(loc);
    pthread_t th[GC_THREADS];
    gc_arg args[GC_THREADS];
    for (int t = 0; t < GC_THREADS; t++) {
        args[t] = (gc_arg){s, t, 0};
        pthread_create(&th[t], NULL, gc_thread, &args[t]);
    }
    for (int t = 0; t < GC_THREADS; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(args[t].bad, 0);
    }
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, GC_THREADS * GC_EVENTS);
    assert_int_equal(st.grouped_events, GC_THREADS * GC_EVENTS);
    print_message("group commit: %d events in %llu Txns\n", GC_THREADS * GC_EVENTS,
                  (unsigned long long)st.commits);
    assert_true(st.commits <= st.grouped_events);

    /* a batch whose puts exceed etcd's 128 ops per Txn is refused whole
     * (40 binds of new keys: 4 puts each) */
    bindlog_event ev[40];
    char keys[40][16], sids[40][16];
    for (int i = 0; i < 40; i++) {
        snprintf(keys[i], sizeof keys[i], "big%d", i);
        snprintf(sids[i], sizeof sids[i], "bigs%d", i);
        ev[i] = (bindlog_event){BINDLOG_EVENT_BIND, keys[i], sids[i], NULL, 0, NULL, NULL, 0};
    }
    bindlog_result res[40];
    size_t ei = 99;
    assert_int_equal(bindlog_apply_batch(s, ev, 40, res, &ei), BINDLOG_EINVAL);
    assert_int_equal(ei, 0);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, GC_THREADS * GC_EVENTS);
    /* 20 fit */
    assert_int_equal(bindlog_apply_batch(s, ev, 20, res, &ei), 0);
    for (int i = 0; i < 20; i++)
        assert_int_equal(res[i].lsn, GC_THREADS * GC_EVENTS + 1 + i);
    replay_matches(s);
    bindlog_close(s);
    tu_store_remove(loc);
    free(loc);
}

/* The Txn limit is bindlog_options.etcd_max_txn_ops (issue 15), not only
 * BINDLOG_ETCD_MAX_TXN_OPS: below the servers' it cuts batches sooner; above
 * it, etcd refuses what the client let through. */
static bindlog *open_ops(const char *loc, unsigned ops)
{
    bindlog *s = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.etcd_max_txn_ops = ops;
    int rc = bindlog_open(&s, loc, &o);
    if (rc != 0)
        fail_msg("bindlog_open(%s): %s", loc, bindlog_last_error());
    return s;
}

static void be__max_txn_ops_is_an_option(void **state)
{
    cluster *cl = need_cluster(state);
    char *loc = location(cl, "ops");
    bindlog_event ev[40];
    bindlog_result res[40];
    char keys[40][16], sids[40][16];
    size_t ei = 99;
    for (int i = 0; i < 40; i++) {
        snprintf(keys[i], sizeof keys[i], "ops%d", i);
        snprintf(sids[i], sizeof sids[i], "opss%d", i);
        ev[i] = (bindlog_event){BINDLOG_EVENT_BIND, keys[i], sids[i], NULL, 0, NULL, NULL, 0};
    }
    /* 16 ops: 4 binds of new keys (4 puts each, + head and counts) are too
     * many, 3 fit */
    bindlog *s = open_ops(loc, 16);
    assert_int_equal(bindlog_apply_batch(s, ev, 4, res, &ei), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "--max-txn-ops 16"));
    assert_int_equal(bindlog_apply_batch(s, ev, 3, res, &ei), 0);
    bindlog_close(s);
    /* 1000, above the cluster's 128: 40 binds pass the client and etcd
     * refuses them, so nothing is written */
    s = open_ops(loc, 1000);
    assert_int_equal(bindlog_apply_batch(s, ev + 3, 37, res, &ei), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "too many operations"));
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 3);
    bindlog_close(s);
    tu_store_remove(loc);
    free(loc);
}

/* ---- what is not a store ------------------------------------------------------------ */

static void be__not_a_store_refused(void **state)
{
    cluster *cl = need_cluster(state);
    char *loc = location(cl, "forged");
    char buf[1200];
    bindlog *s = NULL;
    unsigned char fmt[4] = {2, 0, 0, 0};

    /* a store, then a newer format */
    s = xopen(loc);
    bindlog_close(s);
    assert_int_equal(tu_etcd_put(loc, "m/format", fmt, 4), 0);
    assert_int_equal(bindlog_open(&s, loc, NULL), BINDLOG_EVERSION);
    assert_null(s);
    /* a wrong magic */
    fmt[0] = 1;
    assert_int_equal(tu_etcd_put(loc, "m/format", fmt, 4), 0);
    assert_int_equal(tu_etcd_put(loc, "m/magic", "something-else", 14), 0);
    assert_int_equal(bindlog_open(&s, loc, NULL), BINDLOG_ENOTSTORE);
    tu_store_remove(loc);

    /* a store inside another store's prefix would live in its tables */
    bindlog *outer = xopen(loc), *inner = NULL;
    snprintf(buf, sizeof buf, "%s/b", loc);
    assert_int_equal(bindlog_open(&inner, buf, NULL), BINDLOG_ENOTSTORE);
    assert_null(inner);
    assert_int_equal(tu_etcd_count(loc), 4); /* magic, format, head, counts: untouched */
    bindlog_close(outer);
    /* ... and one around another store holds that store's keys */
    snprintf(buf, sizeof buf, "%.*s", (int)(strrchr(loc, '/') - loc), loc);
    assert_int_equal(bindlog_open(&s, buf, NULL), BINDLOG_ENOTSTORE);
    assert_null(s);
    tu_store_remove(loc);

    /* bad locations */
    snprintf(buf, sizeof buf, "etcd://%s", cl->endpoints);
    assert_int_equal(bindlog_open(&s, buf, NULL), BINDLOG_EINVAL);
    snprintf(buf, sizeof buf, "etcd://%s/", cl->endpoints);
    assert_int_equal(bindlog_open(&s, buf, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_open(&s, "etcd:///prefix", NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_open(&s, "etcd://https://127.0.0.1:1/p", NULL), BINDLOG_EINVAL);
    free(loc);
}

/* While a fenced import runs (meta "import" exists) writes are refused,
 * reads go on. */
static void be__writes_wait_for_import_marker(void **state)
{
    cluster *cl = need_cluster(state);
    char *loc = location(cl, "marker");
    bindlog *s = xopen(loc);
    bindlog_result r;
    bindlog_binding b;
    assert_int_equal(bindlog_bind(s, "k", "A", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(tu_etcd_put(loc, "m/import", "token", 5), 0);
    assert_int_equal(bindlog_bind(s, "k", "B", NULL, NULL, NULL, 0, &r), BINDLOG_EBUSY);
    assert_int_equal(bindlog_get(s, "k", &b), 0);
    assert_string_equal(b.session_id, "A");
    bindlog_close(s);
    tu_store_remove(loc);
    free(loc);
}

static void be__unreachable_endpoints_eio(void **state)
{
    (void)state;
    bindlog *s = NULL;
    long t0 = now_ms();
    /* ports nobody listens on (cluster.sh picks from 23790..23899) */
    assert_int_equal(bindlog_open(&s, "etcd://127.0.0.1:1,127.0.0.1:9/p", NULL), BINDLOG_EIO);
    assert_null(s);
    assert_true(now_ms() - t0 < 2000);
}

/* ---- a 3-member cluster under failures ------------------------------------------------- */

#define W_THREADS 8
#define W_MAX 20000

typedef struct wr {
    bindlog *s;
    int t;
    atomic_int *stop;
    uint64_t lsns[W_MAX];
    long acked_at[W_MAX];
    int n, errors, panics;
} wr;

static void *writer(void *p)
{
    wr *w = p;
    for (int i = 0; i < W_MAX && !atomic_load(w->stop); i++) {
        char key[32], sid[32];
        bindlog_result r;
        snprintf(key, sizeof key, "w%d-%d", w->t, i);
        snprintf(sid, sizeof sid, "w%d-%d-s", w->t, i);
        int rc = bindlog_bind(w->s, key, sid, NULL, NULL, NULL, 0, &r);
        if (rc == BINDLOG_APPLIED) {
            w->lsns[w->n] = r.lsn;
            w->acked_at[w->n] = now_ms();
            w->n++;
        } else if (rc == BINDLOG_EPANIC) {
            w->panics++;
            break;
        } else {
            w->errors++;
            sleep_ms(20);
        }
    }
    return NULL;
}

static long acked_after(wr *ws, long t)
{
    long n = 0;
    for (int i = 0; i < W_THREADS; i++)
        for (int j = 0; j < ws[i].n; j++)
            n += ws[i].acked_at[j] > t;
    return n;
}

static int leader(const cluster *cl)
{
    char out[64];
    if (run_script(out, sizeof out, "leader '%s/cluster'", cl->dir) != 0)
        return -1;
    return atoi(out);
}

static void be__three_members_kill_follower_then_leader(void **state)
{
    cluster *cl = need_cluster(state);
    char *loc = location(cl, "three");
    bindlog *s = xopen(loc);
    static wr ws[W_THREADS];
    pthread_t th[W_THREADS];
    atomic_int stop;
    atomic_init(&stop, 0);
    for (int t = 0; t < W_THREADS; t++) {
        memset(&ws[t], 0, sizeof ws[t]);
        ws[t].s = s;
        ws[t].t = t;
        ws[t].stop = &stop;
        pthread_create(&th[t], NULL, writer, &ws[t]);
    }
    sleep_ms(1500);
    int l = leader(cl);
    assert_true(l >= 0);
    int f = (l + 1) % 3;
    assert_int_equal(run_script(NULL, 0, "kill-member '%s/cluster' %d", cl->dir, f), 0);
    long t_follower = now_ms();
    sleep_ms(1500);
    assert_int_equal(run_script(NULL, 0, "restart-member '%s/cluster' %d", cl->dir, f), 0);
    assert_int_equal(run_script(NULL, 0, "wait-healthy '%s/cluster' 30", cl->dir), 0);
    l = leader(cl);
    assert_true(l >= 0);
    assert_int_equal(run_script(NULL, 0, "kill-member '%s/cluster' %d", cl->dir, l), 0);
    long t_leader = now_ms();
    sleep_ms(4000);
    atomic_store(&stop, 1);
    long total = 0, errors = 0, panics = 0;
    for (int t = 0; t < W_THREADS; t++) {
        pthread_join(th[t], NULL);
        total += ws[t].n;
        errors += ws[t].errors;
        panics += ws[t].panics;
    }
    long after_f = acked_after(ws, t_follower), after_l = acked_after(ws, t_leader);
    print_message("three: %ld acknowledged (%ld after the follower died, %ld after the leader "
                  "died), %ld errors, %ld panics\n",
                  total, after_f, after_l, errors, panics);
    assert_int_equal(panics, 0);
    assert_true(after_l > 0); /* writes went on after the election */
    assert_int_equal(run_script(NULL, 0, "restart-member '%s/cluster' %d", cl->dir, l), 0);
    assert_int_equal(run_script(NULL, 0, "wait-healthy '%s/cluster' 30", cl->dir), 0);

    /* every acknowledged event is there, and nothing else: errors were
     * honest (an event reported failed did not happen) */
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, (uint64_t)total);
    for (int t = 0; t < W_THREADS; t++)
        for (int j = 0; j < ws[t].n; j++) {
            char key[32], sid[32];
            bindlog_binding b;
            snprintf(key, sizeof key, "w%d-%d", t, j);
            snprintf(sid, sizeof sid, "w%d-%d-s", t, j);
            (void)sid;
            bindlog_iter *it;
            bindlog_record rec;
            assert_int_equal(bindlog_log_iter(s, ws[t].lsns[j], ws[t].lsns[j], &it), 0);
            assert_int_equal(bindlog_iter_next_record(it, &rec), 1);
            assert_int_equal(strncmp(rec.key, "w", 1), 0);
            assert_int_equal(rec.type, BINDLOG_EVENT_BIND);
            assert_int_equal(bindlog_get(s, rec.key, &b), 0);
            assert_string_equal(b.session_id, rec.session_id);
            bindlog_iter_close(it);
        }
    replay_matches(s);

    /* every member down: fast, clear errors, nothing written */
    unsigned char d1[BINDLOG_DIGEST_SIZE], d2[BINDLOG_DIGEST_SIZE];
    uint64_t head1, head2;
    assert_int_equal(bindlog_digest(s, d1, &head1), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(run_script(NULL, 0, "kill-member '%s/cluster' %d", cl->dir, i), 0);
    bindlog_result r;
    bindlog_binding b;
    long t0 = now_ms();
    assert_int_equal(bindlog_bind(s, "down", "down-s", NULL, NULL, NULL, 0, &r), BINDLOG_EIO);
    assert_int_equal(bindlog_get(s, "w0-0", &b), BINDLOG_EIO);
    assert_int_equal(bindlog_digest(s, d2, NULL), BINDLOG_EIO);
    long took = now_ms() - t0;
    print_message("three: with every member down, a bind, a get and a digest failed in %ld ms\n",
                  took);
    assert_true(took < 3000);
    bindlog *s2 = NULL;
    assert_int_equal(bindlog_open(&s2, loc, NULL) == BINDLOG_EIO || s2 != NULL, 1);
    bindlog_close(s2);

    for (int i = 0; i < 3; i++)
        assert_int_equal(run_script(NULL, 0, "restart-member '%s/cluster' %d", cl->dir, i), 0);
    assert_int_equal(run_script(NULL, 0, "wait-healthy '%s/cluster' 30", cl->dir), 0);
    assert_int_equal(bindlog_digest(s, d2, &head2), 0);
    assert_int_equal(head2, head1);
    assert_memory_equal(d1, d2, BINDLOG_DIGEST_SIZE);
    assert_int_equal(bindlog_bind(s, "down", "down-s", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(r.lsn, head1 + 1);
    bindlog_close(s);
    tu_store_remove(loc);
    free(loc);
}

int main(void)
{
    const struct CMUnitTest single[] = {
        cmocka_unit_test(be__two_processes_race_one_split_each),
        cmocka_unit_test(be__group_commit_cut_into_txns),
        cmocka_unit_test(be__max_txn_ops_is_an_option),
        cmocka_unit_test(be__not_a_store_refused),
        cmocka_unit_test(be__writes_wait_for_import_marker),
    };
    const struct CMUnitTest offline[] = {
        cmocka_unit_test(be__unreachable_endpoints_eio),
    };
    const struct CMUnitTest three[] = {
        cmocka_unit_test(be__three_members_kill_follower_then_leader),
    };
    /* this program's clusters keep etcd's default --max-txn-ops */
    unsetenv("BINDLOG_ETCD_MAX_TXN_OPS");
    int failed = 0;
    failed += cmocka_run_group_tests_name("etcd_backend_offline", offline, NULL, NULL);
    failed += cmocka_run_group_tests_name("etcd_backend_single", single, setup_single,
                                          group_teardown);
    failed += cmocka_run_group_tests_name("etcd_backend_three", three, setup_three,
                                          group_teardown);
    return failed;
}
