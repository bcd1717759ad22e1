/*
 * test_route.c -- bindlog_route() and bindlog_expire() (SPEC section 2b).
 *
 * One scenario per bug class gateways keep meeting when freshness is
 * decided apart from the binding: activity recorded before freshness is
 * judged, the message that triggers a reset lost, recovery re-arming the
 * clock, automatic resets invisible to hooks, the boundaries (racing
 * messages, daily-and-idle, a clock going back, mode none), and the sweep
 * of finished cron-run keys.  Each test has its own store: a temporary
 * directory, or, with BINDLOG_TEST_BACKEND=etcd or etcds (ctest's
 * test_route_etcd, and test_route_etcds over TLS with etcd's auth), a
 * fresh etcd prefix (tests/testutil.h).  Replay, the export/import and
 * recover of the reopen test write local directories on both backends.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "bindlog.h"
#include "testutil.h"

#define T0 INT64_C(1767225600000) /* 2026-01-01T00:00:00Z */
#define MIN INT64_C(60000)
#define HOUR (60 * MIN)

typedef struct fx {
    char *dir; /* the store's location: a directory, or etcd://... */
    bindlog *s;
} fx;

static int64_t fixed_clock(void *ctx) { return *(int64_t *)ctx; }
static int64_t g_clock = T0;

static bindlog *open_store(const char *dir, int durability)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = durability;
    o.clock_ms = fixed_clock;
    o.clock_ctx = &g_clock;
    int rc = bindlog_open(&s, dir, &o);
    if (rc != 0)
        fail_msg("open %s: %s (%s)", dir, bindlog_strerror(rc), bindlog_last_error());
    return s;
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    f->dir = tu_store_location("route");
    assert_int_equal(tu_is_etcd_location(f->dir), tu_backend_is_etcd());
    f->s = open_store(f->dir, BINDLOG_DURABILITY_NONE);
    g_clock = T0;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    bindlog_close(f->s);
    tu_store_remove(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static const bindlog_policy IDLE30 = {BINDLOG_RESET_IDLE, 30 * MIN, 0};

/* route, asserting it did not fail */
static int route_ok(bindlog *s, const char *key, int64_t now, const bindlog_policy *p,
                    const char *fresh, bindlog_route_result *r)
{
    int rc = bindlog_route(s, key, now, p, fresh, NULL, 0, r);
    if (rc < 0)
        fail_msg("route %s at %lld: %s (%s)", key, (long long)now, bindlog_code_name(rc),
                 bindlog_last_error());
    return rc;
}

static void check_clean(bindlog *s)
{
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    if (rep.problems != 0)
        fail_msg("check: %s", rep.message);
}

static bindlog_binding get(bindlog *s, const char *key)
{
    bindlog_binding b;
    int rc = bindlog_get(s, key, &b);
    assert_true(rc == 0 || rc == BINDLOG_ENOTFOUND);
    return b;
}

/* An unbound key is CREATED, a fresh one ROUTED: same session, same
 * generation, activity recorded, nothing else moved. */
static void route__created_then_routed(void **state)
{
    fx *f = *state;
    bindlog_route_result r;

    assert_int_equal(route_ok(f->s, "k", T0, &IDLE30, "s1", &r), BINDLOG_CREATED);
    assert_string_equal(r.session_id, "s1");
    assert_int_equal(r.generation, 1);
    assert_int_equal(r.last_activity_ms, 0);
    assert_int_equal(r.lsn, 1);
    bindlog_binding b = get(f->s, "k");
    assert_int_equal(b.last_activity_ms, T0);

    assert_int_equal(route_ok(f->s, "k", T0 + 10 * MIN, &IDLE30, "s2", &r), BINDLOG_ROUTED);
    assert_string_equal(r.session_id, "s1");
    assert_string_equal(r.previous_id, "");
    assert_int_equal(r.generation, 1);
    assert_int_equal(r.last_activity_ms, T0);
    assert_int_equal(r.lsn, 2);
    b = get(f->s, "k");
    assert_string_equal(b.session_id, "s1");
    assert_int_equal(b.last_activity_ms, T0 + 10 * MIN);
    assert_int_equal(b.lsn, 1);          /* the binding did not change */
    assert_int_equal(b.updated_ms, T0);
    /* a second message in the same millisecond is coalesced: no record */
    assert_int_equal(route_ok(f->s, "k", T0 + 10 * MIN, &IDLE30, "s2", &r), BINDLOG_ROUTED);
    assert_int_equal(r.lsn, 0);
    assert_int_equal(r.last_activity_ms, T0 + 10 * MIN);
    assert_string_equal(r.session_id, "s1");
    /* the unused fresh id was not created */
    bindlog_session ss;
    assert_int_equal(bindlog_session_get(f->s, "s2", &ss, NULL, 0), BINDLOG_ENOTFOUND);

    /* the ROUTE record is its own type, small, in the log */
    bindlog_iter *it;
    bindlog_record rec;
    assert_int_equal(bindlog_log_iter(f->s, 2, 2, &it), 0);
    assert_int_equal(bindlog_iter_next_record(it, &rec), 1);
    assert_int_equal(rec.type, BINDLOG_EVENT_ROUTE);
    assert_string_equal(rec.key, "k");
    assert_int_equal(rec.time_ms, T0 + 10 * MIN);
    assert_int_equal(rec.generation, 1);
    bindlog_iter_close(it);
    assert_string_equal(bindlog_event_name(BINDLOG_EVENT_ROUTE), "route");

    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(f->s, &st), 0);
    assert_int_equal(st.applied[BINDLOG_EVENT_ROUTE], 1);
    assert_int_equal(st.applied[BINDLOG_EVENT_NEW_SESSION], 1);
    check_clean(f->s);
}

/* OpenClaw #11520/#51991: activity must be judged before it is recorded.
 * The idle message is judged on the activity before it, so it RESETs; and
 * the message that triggered the reset goes to the new session
 * (#129688/#78059). */
static void route__activity_then_decide_and_trigger_routed(void **state)
{
    fx *f = *state;
    bindlog_route_result r;

    route_ok(f->s, "k", T0, &IDLE30, "s1", &r);
    /* exactly idle_ms later is still fresh (now - activity > idle_ms resets) */
    assert_int_equal(route_ok(f->s, "k", T0 + 30 * MIN, &IDLE30, "x", &r), BINDLOG_ROUTED);
    int64_t last = T0 + 30 * MIN;
    assert_int_equal(route_ok(f->s, "k", last + 30 * MIN + 1, &IDLE30, "s2", &r), BINDLOG_RESET);
    assert_int_equal(r.reason, BINDLOG_RESET_IDLE);
    assert_int_equal(r.last_activity_ms, last);
    assert_string_equal(r.session_id, "s2");   /* this message goes to the new session */
    assert_string_equal(r.previous_id, "s1");
    assert_int_equal(r.generation, 2);

    bindlog_binding b = get(f->s, "k");
    assert_string_equal(b.session_id, "s2");
    assert_int_equal(b.last_activity_ms, last + 30 * MIN + 1);
    bindlog_session ss;
    assert_int_equal(bindlog_session_get(f->s, "s1", &ss, NULL, 0), 0);
    assert_true(ss.ended_lsn != 0);
    assert_string_equal(ss.end_reason, "idle");
    assert_int_equal(bindlog_session_get(f->s, "s2", &ss, NULL, 0), 0);
    assert_string_equal(ss.parent_id, "s1");

    /* the next message is ROUTED to s2 */
    assert_int_equal(route_ok(f->s, "k", last + 31 * MIN, &IDLE30, "s3", &r), BINDLOG_ROUTED);
    assert_string_equal(r.session_id, "s2");
    check_clean(f->s);
}

/* OpenClaw #37955: automatic resets are NEW_SESSION records with reason
 * "idle" or "daily" in the change feed, like /new. */
static void route__reset_in_change_feed(void **state)
{
    fx *f = *state;
    bindlog_route_result r;
    /* the latest boundary at or before now: yesterday's 04:00, then today's */
    bindlog_policy daily = {BINDLOG_RESET_DAILY, 0, T0 - 20 * HOUR};

    route_ok(f->s, "k", T0, &daily, "s1", &r);
    assert_int_equal(route_ok(f->s, "k", T0 + HOUR, &daily, "x", &r), BINDLOG_ROUTED);
    daily.daily_boundary_ms = T0 + 4 * HOUR;
    assert_int_equal(route_ok(f->s, "k", T0 + 5 * HOUR, &daily, "s2", &r), BINDLOG_RESET);
    assert_int_equal(r.reason, BINDLOG_RESET_DAILY);

    bindlog_iter *it;
    bindlog_record rec;
    int types[8] = {0}, n = 0, rc;
    assert_int_equal(bindlog_log_iter(f->s, 0, UINT64_MAX, &it), 0);
    while ((rc = bindlog_iter_next_record(it, &rec)) == 1 && n < 8) {
        types[n++] = rec.type;
        if (rec.lsn == 3) {
            assert_string_equal(rec.reason, "daily");
            assert_string_equal(rec.session_id, "s2");
            assert_string_equal(rec.other_id, "s1");
        }
    }
    assert_int_equal(rc, 0);
    bindlog_iter_close(it);
    assert_int_equal(n, 3);
    assert_int_equal(types[0], BINDLOG_EVENT_NEW_SESSION);
    assert_int_equal(types[1], BINDLOG_EVENT_ROUTE);
    assert_int_equal(types[2], BINDLOG_EVENT_NEW_SESSION);
}

/* hermes-agent #66255 / PR #78618: reopening (and recovering) must not
 * re-arm the clock.  The true last activity survives close, kill -9
 * without close, replay, export/import and recover, and a message after
 * the idle time still RESETs.  On etcd the import goes into another etcd
 * prefix, and recover (which reads a store directory's data.mdb and
 * bindlog.wal: etcd keeps no such files) rebuilds the replay of the etcd
 * store, the local copy an operator would recover. */
static void route__reopen_and_recover_keep_activity(void **state)
{
    fx *f = *state;
    bindlog_route_result r;
    unsigned char d1[BINDLOG_DIGEST_SIZE], d2[BINDLOG_DIGEST_SIZE];

    route_ok(f->s, "k", T0, &IDLE30, "s1", &r);
    route_ok(f->s, "k", T0 + 20 * MIN, &IDLE30, "x1", &r);
    bindlog_close(f->s);

    /* a child routes in FULL durability and dies without closing */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        bindlog *c = open_store(f->dir, BINDLOG_DURABILITY_FULL);
        bindlog_route_result cr;
        if (bindlog_route(c, "k", T0 + 25 * MIN, &IDLE30, "x2", NULL, 0, &cr) != BINDLOG_ROUTED)
            _exit(3);
        kill(getpid(), SIGKILL);
        _exit(4);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

    g_clock = T0 + 10 * HOUR; /* opening later must not touch activity */
    f->s = open_store(f->dir, BINDLOG_DURABILITY_NONE);
    bindlog_binding b = get(f->s, "k");
    assert_int_equal(b.last_activity_ms, T0 + 25 * MIN);
    check_clean(f->s);
    assert_int_equal(bindlog_digest(f->s, d1, NULL), 0);

    /* replay into a new store: same digest, same activity */
    char *rdir = tu_mkdtemp("route-replay");
    char rstore[4096];
    snprintf(rstore, sizeof rstore, "%s/r", rdir);
    assert_int_equal(bindlog_replay(f->s, rstore, UINT64_MAX, INT64_MAX, d2, NULL, NULL, NULL),
                     0);
    assert_memory_equal(d1, d2, BINDLOG_DIGEST_SIZE);

    /* export / import */
    char path[4096];
    snprintf(path, sizeof path, "%s/stream", rdir);
    FILE *fp = fopen(path, "w+b");
    assert_non_null(fp);
    assert_int_equal(bindlog_export(f->s, 0, fileno(fp), NULL, NULL, NULL), 0);
    fflush(fp);
    rewind(fp);
    char *imploc = NULL;
    if (tu_is_etcd_location(f->dir))
        imploc = tu_store_location("route-imp");
    else
        snprintf(rstore, sizeof rstore, "%s/imp", rdir);
    bindlog *imp = open_store(imploc ? imploc : rstore, BINDLOG_DURABILITY_NONE);
    assert_int_equal(bindlog_import(imp, fileno(fp), NULL, NULL, NULL, NULL), 0);
    fclose(fp);
    assert_int_equal(bindlog_digest(imp, d2, NULL), 0);
    assert_memory_equal(d1, d2, BINDLOG_DIGEST_SIZE);
    assert_int_equal(get(imp, "k").last_activity_ms, T0 + 25 * MIN);
    bindlog_close(imp);
    tu_store_remove(imploc);
    free(imploc);

    /* recover (the store is intact: it is rebuilt from its log) */
    bindlog_close(f->s);
    bindlog_recover_report rep;
    memset(&rep, 0, sizeof rep);
    char recsrc[4096];
    if (tu_is_etcd_location(f->dir))
        snprintf(recsrc, sizeof recsrc, "%s/r", rdir);
    else
        snprintf(recsrc, sizeof recsrc, "%s", f->dir);
    snprintf(rstore, sizeof rstore, "%s/rec", rdir);
    assert_int_equal(bindlog_recover(recsrc, rstore, &rep, NULL, NULL), 0);
    bindlog_recover_report_free(&rep);
    bindlog *rec = open_store(rstore, BINDLOG_DURABILITY_NONE);
    assert_int_equal(get(rec, "k").last_activity_ms, T0 + 25 * MIN);
    assert_int_equal(bindlog_digest(rec, d2, NULL), 0);
    assert_memory_equal(d1, d2, BINDLOG_DIGEST_SIZE);
    bindlog_close(rec);
    tu_rmtree(rdir);
    free(rdir);

    /* the stale session is judged on its true activity */
    f->s = open_store(f->dir, BINDLOG_DURABILITY_NONE);
    assert_int_equal(route_ok(f->s, "k", T0 + 10 * HOUR, &IDLE30, "s2", &r), BINDLOG_RESET);
    assert_int_equal(r.last_activity_ms, T0 + 25 * MIN);
}

/* The verdict of n messages racing at the idle boundary of
 * "agent:main:telegram:dm:1" (bound to "old" at T0), message i with fresh
 * id "fresh-<i>", outcome rcs[i] and result got[i]: exactly one RESET, and
 * every message in the winner's session at generation 2; every message
 * carried the same time, so after the RESET the activity stood at it and
 * the others were coalesced (nothing logged: the head is the RESET's). */
static void assert_one_reset(bindlog *s, int n, const int *rcs, const bindlog_route_result *got)
{
    int resets = 0, winner = -1;
    for (int i = 0; i < n; i++) {
        if (rcs[i] != BINDLOG_RESET && rcs[i] != BINDLOG_ROUTED)
            fail_msg("message %d: %s", i, bindlog_code_name(rcs[i]));
        if (rcs[i] == BINDLOG_RESET) {
            resets++;
            winner = i;
        }
    }
    assert_int_equal(resets, 1);
    char want[32];
    snprintf(want, sizeof want, "fresh-%d", winner);
    for (int i = 0; i < n; i++) {
        assert_string_equal(got[i].session_id, want);
        assert_int_equal(got[i].generation, 2);
        assert_true(rcs[i] == BINDLOG_RESET ? got[i].lsn == 2 : got[i].lsn == 0);
    }
    bindlog_binding b = get(s, "agent:main:telegram:dm:1");
    assert_string_equal(b.session_id, want);
    assert_int_equal(b.generation, 2);
    uint64_t head = 0;
    unsigned char d[BINDLOG_DIGEST_SIZE];
    assert_int_equal(bindlog_digest(s, d, &head), 0);
    assert_int_equal(head, 2);
    check_clean(s);
}

/* Concurrent messages at the boundary: exactly one RESET, and all of them
 * land in the new session. */
typedef struct racer {
    bindlog *s;
    int i;
    pthread_barrier_t *bar;
    int rc;
    bindlog_route_result r;
} racer;

static void *race(void *arg)
{
    racer *x = arg;
    char fresh[32];
    snprintf(fresh, sizeof fresh, "fresh-%d", x->i);
    pthread_barrier_wait(x->bar);
    x->rc = bindlog_route(x->s, "agent:main:telegram:dm:1", T0 + HOUR, &IDLE30, fresh, NULL, 0,
                          &x->r);
    return NULL;
}

static void race_n(fx *f, int n)
{
    bindlog_route_result r;
    pthread_t th[16];
    racer rs[16];
    pthread_barrier_t bar;

    bindlog_close(f->s);
    f->s = open_store(f->dir, BINDLOG_DURABILITY_FULL); /* group commits flush */
    route_ok(f->s, "agent:main:telegram:dm:1", T0, &IDLE30, "old", &r);
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        rs[i] = (racer){f->s, i, &bar, 0, {0}};
        assert_int_equal(pthread_create(&th[i], NULL, race, &rs[i]), 0);
    }
    int rcs[16];
    bindlog_route_result got[16];
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        rcs[i] = rs[i].rc;
        got[i] = rs[i].r;
    }
    pthread_barrier_destroy(&bar);
    assert_one_reset(f->s, n, rcs, got);
}

static void route__two_concurrent_one_reset(void **state) { race_n(*state, 2); }
static void route__sixteen_concurrent_one_reset(void **state) { race_n(*state, 16); }

/* The same race between processes, each with its own handle: on etcd a
 * fleet of gateways routing one chat (their Txns' compares decide), on
 * LMDB several processes on one store (its writer lock decides). */
static void route__processes_racing_one_reset(void **state)
{
    fx *f = *state;
    enum { N = 8 };
    bindlog_route_result r, got[N];
    int ready[2], go[2], out[2];
    pid_t pids[N];

    route_ok(f->s, "agent:main:telegram:dm:1", T0, &IDLE30, "old", &r);
    bindlog_close(f->s);
    f->s = NULL;
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(out), 0);
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            struct {
                int i, rc;
                bindlog_route_result r;
            } msg;
            char fresh[32], c;
            bindlog_options o = BINDLOG_OPTIONS_INIT;
            bindlog *s = NULL;
            close(go[1]);
            o.durability = BINDLOG_DURABILITY_FULL;
            o.clock_ms = fixed_clock;
            o.clock_ctx = &g_clock;
            if (bindlog_open(&s, f->dir, &o) != 0)
                _exit(2);
            snprintf(fresh, sizeof fresh, "fresh-%d", i);
            if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 0)
                _exit(3); /* the parent closes go: everyone starts at once */
            memset(&msg, 0, sizeof msg);
            msg.i = i;
            msg.rc = bindlog_route(s, "agent:main:telegram:dm:1", T0 + HOUR, &IDLE30, fresh,
                                   NULL, 0, &msg.r);
            bindlog_close(s);
            _exit(write(out[1], &msg, sizeof msg) == (ssize_t)sizeof msg ? 0 : 4);
        }
    }
    close(ready[1]);
    close(go[0]);
    close(out[1]);
    for (int i = 0; i < N; i++) {
        char c;
        assert_int_equal(read(ready[0], &c, 1), 1);
    }
    close(go[1]);
    int rcs[N];
    for (int k = 0; k < N; k++) {
        struct {
            int i, rc;
            bindlog_route_result r;
        } msg;
        assert_int_equal(read(out[0], &msg, sizeof msg), (ssize_t)sizeof msg);
        assert_true(msg.i >= 0 && msg.i < N);
        rcs[msg.i] = msg.rc;
        got[msg.i] = msg.r;
    }
    for (int i = 0; i < N; i++) {
        int st = 0;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    close(ready[0]);
    close(out[0]);
    f->s = open_store(f->dir, BINDLOG_DURABILITY_NONE);
    assert_one_reset(f->s, N, rcs, got);
}

/* A run that started before an automatic reset is STALE on its split. */
static void route__run_before_reset_is_stale(void **state)
{
    fx *f = *state;
    bindlog_route_result r;
    bindlog_result res;

    route_ok(f->s, "k", T0, &IDLE30, "A", &r);
    uint64_t run_gen = r.generation;
    assert_int_equal(route_ok(f->s, "k", T0 + HOUR, &IDLE30, "B", &r), BINDLOG_RESET);
    assert_int_equal(bindlog_split(f->s, "k", "A", "C", run_gen, NULL, 0, &res), BINDLOG_STALE);
    bindlog_session ss;
    assert_int_equal(bindlog_session_get(f->s, "C", &ss, NULL, 0), BINDLOG_ENOTFOUND);
    /* a run on the new session splits, and the split keeps the route fresh */
    assert_int_equal(bindlog_split(f->s, "k", "B", "C", r.generation, NULL, 0, &res),
                     BINDLOG_APPLIED);
    assert_int_equal(route_ok(f->s, "k", T0 + HOUR + MIN, &IDLE30, "D", &r), BINDLOG_ROUTED);
    assert_string_equal(r.session_id, "C");
    assert_int_equal(get(f->s, "k").last_activity_ms, T0 + HOUR + MIN);
}

/* PR #92218: daily-and-idle resets only when both hold; BOTH when either
 * does; a session bound after the boundary (/new) is fresh (#49170). */
static void route__daily_and_idle(void **state)
{
    fx *f = *state;
    bindlog_route_result r;
    int64_t boundary = T0 + 4 * HOUR;
    bindlog_policy dai = {BINDLOG_RESET_DAILY_AND_IDLE, 2 * HOUR, boundary};
    bindlog_policy both = {BINDLOG_RESET_BOTH, 2 * HOUR, boundary};

    bindlog_policy early = {BINDLOG_RESET_DAILY_AND_IDLE, 2 * HOUR, T0};
    bindlog_policy daily = {BINDLOG_RESET_DAILY, 0, T0};
    /* times go forward along the log: first contacts, then the checks */
    route_ok(f->s, "d", T0 + MIN, &early, "d1", &r);
    route_ok(f->s, "c", T0 + HOUR, &dai, "c1", &r);
    route_ok(f->s, "e", T0 + HOUR, &daily, "e1", &r);
    route_ok(f->s, "a", T0 + 3 * HOUR + 30 * MIN, &dai, "a1", &r);
    route_ok(f->s, "b", T0 + 3 * HOUR + 30 * MIN, &both, "b1", &r);
    /* idle but not past a boundary: no reset under daily-and-idle */
    assert_int_equal(route_ok(f->s, "d", T0 + 3 * HOUR + 31 * MIN, &early, "d2", &r),
                     BINDLOG_ROUTED);
    /* active at 03:30, message at 04:30: past the boundary but not idle */
    assert_int_equal(route_ok(f->s, "a", T0 + 4 * HOUR + 30 * MIN, &dai, "a2", &r),
                     BINDLOG_ROUTED);
    /* same with BOTH: daily alone resets */
    assert_int_equal(route_ok(f->s, "b", T0 + 4 * HOUR + 30 * MIN, &both, "b2", &r),
                     BINDLOG_RESET);
    assert_int_equal(r.reason, BINDLOG_RESET_DAILY);
    /* active at 01:00, message at 04:30: past the boundary and idle */
    assert_int_equal(route_ok(f->s, "c", T0 + 4 * HOUR + 30 * MIN, &dai, "c2", &r),
                     BINDLOG_RESET);
    assert_int_equal(r.reason, BINDLOG_RESET_DAILY);
    /* a session the gateway bound after the boundary (/new) is fresh */
    bindlog_result res;
    daily.daily_boundary_ms = boundary;
    g_clock = T0 + 4 * HOUR + 31 * MIN;
    assert_int_equal(bindlog_new_session(f->s, "e", "e2", NULL, NULL, 0, &res), BINDLOG_APPLIED);
    assert_int_equal(route_ok(f->s, "e", T0 + 4 * HOUR + 32 * MIN, &daily, "e3", &r),
                     BINDLOG_ROUTED);
    assert_string_equal(r.session_id, "e2");
    check_clean(f->s);
}

/* A clock that goes back never moves activity backwards, and is judged
 * at the log's time. */
static void route__clock_going_back(void **state)
{
    fx *f = *state;
    bindlog_route_result r;

    route_ok(f->s, "k", T0 + HOUR, &IDLE30, "s1", &r);
    assert_int_equal(route_ok(f->s, "k", T0, &IDLE30, "s2", &r), BINDLOG_ROUTED);
    assert_string_equal(r.session_id, "s1");
    bindlog_binding b = get(f->s, "k");
    assert_int_equal(b.last_activity_ms, T0 + HOUR);
    /* a message an idle time after the clock's reading but not after the
     * real last activity: still fresh */
    assert_int_equal(route_ok(f->s, "k", T0 + 45 * MIN, &IDLE30, "s3", &r), BINDLOG_ROUTED);
    assert_int_equal(get(f->s, "k").last_activity_ms, T0 + HOUR);
    check_clean(f->s);
}

/* hermes-agent #61052: mode none never resets, whatever the times. */
static void route__mode_none_never_resets(void **state)
{
    fx *f = *state;
    bindlog_route_result r;
    bindlog_policy none = {BINDLOG_RESET_NONE, 1, T0 + 1000 * HOUR};

    assert_int_equal(route_ok(f->s, "k", T0, &none, "s1", &r), BINDLOG_CREATED);
    for (int i = 1; i <= 5; i++) {
        assert_int_equal(route_ok(f->s, "k", T0 + i * 24 * HOUR, &none, "sx", &r),
                         BINDLOG_ROUTED);
        assert_string_equal(r.session_id, "s1");
    }
    assert_int_equal(get(f->s, "k").generation, 1);
}

/* Bad arguments: clear errors, nothing written. */
static void route__bad_arguments(void **state)
{
    fx *f = *state;
    bindlog_route_result r;
    bindlog_policy bad_mode = {9, 1, 0}, neg_idle = {BINDLOG_RESET_IDLE, -5, 0},
                   zero_idle = {BINDLOG_RESET_BOTH, 0, 0},
                   neg_daily = {BINDLOG_RESET_DAILY, 0, -1};

    assert_int_equal(bindlog_route(f->s, "k", T0, NULL, "s", NULL, 0, &r), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "policy is NULL"));
    assert_int_equal(bindlog_route(f->s, "k", T0, &bad_mode, "s", NULL, 0, &r), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "mode"));
    assert_int_equal(bindlog_route(f->s, "k", T0, &neg_idle, "s", NULL, 0, &r), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "idle_ms"));
    assert_int_equal(bindlog_route(f->s, "k", T0, &zero_idle, "s", NULL, 0, &r), BINDLOG_EINVAL);
    assert_int_equal(bindlog_route(f->s, "k", T0, &neg_daily, "s", NULL, 0, &r), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "daily_boundary_ms"));
    assert_int_equal(bindlog_route(f->s, "k", T0, &IDLE30, NULL, NULL, 0, &r), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "fresh session id"));
    assert_int_equal(bindlog_route(f->s, "k", T0, &IDLE30, "bad\nid", NULL, 0, &r),
                     BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "control byte"));
    assert_int_equal(bindlog_route(f->s, "k", T0, &IDLE30, "", NULL, 0, &r), BINDLOG_EINVAL);
    assert_int_equal(bindlog_route(f->s, NULL, T0, &IDLE30, "s", NULL, 0, &r), BINDLOG_EINVAL);
    assert_int_equal(bindlog_route(f->s, "", T0, &IDLE30, "s", NULL, 0, &r), BINDLOG_EINVAL);
    assert_int_equal(bindlog_route(f->s, "k", -1, &IDLE30, "s", NULL, 0, &r), BINDLOG_EINVAL);
    assert_int_equal(bindlog_route(NULL, "k", T0, &IDLE30, "s", NULL, 0, &r), BINDLOG_EINVAL);
    assert_int_equal(bindlog_route(f->s, "k", T0, &IDLE30, "s", NULL, 3, &r), BINDLOG_EINVAL);
    /* a fresh id that already exists, when it is needed */
    bindlog_result res;
    assert_int_equal(bindlog_bind(f->s, "other", "taken", NULL, NULL, NULL, 0, &res),
                     BINDLOG_APPLIED);
    assert_int_equal(bindlog_route(f->s, "k", T0, &IDLE30, "taken", NULL, 0, &r),
                     BINDLOG_EEXIST);
    assert_non_null(strstr(bindlog_last_error(), "route k"));
    uint64_t head = 0;
    unsigned char d[BINDLOG_DIGEST_SIZE];
    assert_int_equal(bindlog_digest(f->s, d, &head), 0);
    assert_int_equal(head, 1); /* only the bind */
    /* a batch cannot carry a route */
    bindlog_event ev = {BINDLOG_EVENT_ROUTE, "k", "s", NULL, 0, NULL, NULL, 0};
    size_t at;
    assert_int_equal(bindlog_apply_batch(f->s, &ev, 1, &res, &at), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "bindlog_route"));
    /* and a read-only handle refuses */
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.read_only = 1;
    bindlog *ro = NULL;
    assert_int_equal(bindlog_open(&ro, f->dir, &o), 0);
    assert_int_equal(bindlog_route(ro, "k", T0, &IDLE30, "s", NULL, 0, &r), BINDLOG_EREADONLY);
    bindlog_close(ro);
}

/* Expiry: cron-run keys pile up; expire unbinds the idle ones under a
 * prefix, with a dry run first. */
static void route__expire_prefix_and_dry_run(void **state)
{
    fx *f = *state;
    bindlog_route_result r;
    bindlog_result res;
    char key[128], sid[64];

    /* a chat key, idle as long as the oldest runs */
    route_ok(f->s, "agent:main:telegram:dm:7", T0, &IDLE30, "chat", &r);
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof key, "agent:main:cron:nightly:run:%d", i);
        snprintf(sid, sizeof sid, "run-%d", i);
        g_clock = T0 + i * MIN;
        assert_int_equal(bindlog_new_session(f->s, key, sid, NULL, NULL, 0, &res),
                         BINDLOG_APPLIED);
    }
    /* a cron key routed recently */
    bindlog_policy none = {BINDLOG_RESET_NONE, 0, 0};
    assert_int_equal(route_ok(f->s, "agent:main:cron:nightly:run:3", T0 + 2 * HOUR, &none, "x", &r),
                     BINDLOG_ROUTED);

    uint64_t n = 99, head0 = 0, head1 = 0;
    unsigned char d[BINDLOG_DIGEST_SIZE];
    int64_t cutoff = T0 + 20 * MIN; /* runs 0..19 are older, except 3 */
    assert_int_equal(bindlog_digest(f->s, d, &head0), 0);
    assert_int_equal(bindlog_expire(f->s, cutoff, "agent:main:cron:", 1, &n), 0);
    assert_int_equal(n, 19);
    assert_int_equal(bindlog_digest(f->s, d, &head1), 0);
    assert_int_equal(head0, head1); /* a dry run writes nothing */

    assert_int_equal(bindlog_expire(f->s, cutoff, "agent:main:cron:", 0, &n), 0);
    assert_int_equal(n, 19);
    bindlog_binding gone;
    assert_int_equal(bindlog_get(f->s, "agent:main:cron:nightly:run:0", &gone), BINDLOG_ENOTFOUND);
    assert_string_equal(get(f->s, "agent:main:cron:nightly:run:3").session_id, "run-3");
    assert_string_equal(get(f->s, "agent:main:cron:nightly:run:20").session_id, "run-20");
    assert_string_equal(get(f->s, "agent:main:telegram:dm:7").session_id, "chat");
    bindlog_session ss;
    assert_int_equal(bindlog_session_get(f->s, "run-0", &ss, NULL, 0), 0);
    assert_string_equal(ss.end_reason, "expired");
    /* again: nothing left to expire */
    assert_int_equal(bindlog_expire(f->s, cutoff, "agent:main:cron:", 0, &n), 0);
    assert_int_equal(n, 0);
    /* no prefix: the chat key goes too */
    assert_int_equal(bindlog_expire(f->s, cutoff, NULL, 1, &n), 0);
    assert_int_equal(n, 1);
    /* an expired key routes CREATED, with a fresh id */
    assert_int_equal(route_ok(f->s, "agent:main:cron:nightly:run:0", T0 + 3 * HOUR, &IDLE30,
                              "again", &r),
                     BINDLOG_CREATED);
    assert_int_equal(bindlog_expire(f->s, 0, NULL, 1, &n), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "cut-off must be > 0"));
    /* the other refusals, each named; count may be NULL */
    assert_int_equal(bindlog_expire(NULL, cutoff, NULL, 1, &n), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "handle is NULL"));
    char prefix[BINDLOG_KEY_MAX + 2];
    memset(prefix, 'p', sizeof prefix - 1);
    prefix[sizeof prefix - 1] = '\0';
    assert_int_equal(bindlog_expire(f->s, cutoff, prefix, 1, &n), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "prefix is longer than BINDLOG_KEY_MAX (400)"));
    prefix[BINDLOG_KEY_MAX] = '\0'; /* 400 bytes: a prefix no key of this store has */
    assert_int_equal(bindlog_expire(f->s, T0 + 30 * HOUR, prefix, 0, NULL), 0);
    check_clean(f->s);
}

/* import-json's updatedAt: an imported entry's time is its last activity. */
static void route__import_sets_activity(void **state)
{
    fx *f = *state;
    bindlog_route_result r;
    bindlog_import_entry e[2] = {{"k1", "s1", T0 - 2 * HOUR, NULL, 0},
                                 {"k2", "s2", T0 - 10 * MIN, NULL, 0}};
    int codes[2];
    assert_int_equal(bindlog_import_entries(f->s, e, 2, NULL, codes, NULL, NULL), 0);
    assert_int_equal(get(f->s, "k1").last_activity_ms, T0 - 2 * HOUR);
    assert_int_equal(route_ok(f->s, "k1", T0, &IDLE30, "n1", &r), BINDLOG_RESET);
    assert_int_equal(route_ok(f->s, "k2", T0, &IDLE30, "n2", &r), BINDLOG_ROUTED);
    assert_string_equal(r.session_id, "s2");
    check_clean(f->s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(route__created_then_routed, setup, teardown),
        cmocka_unit_test_setup_teardown(route__activity_then_decide_and_trigger_routed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(route__reset_in_change_feed, setup, teardown),
        cmocka_unit_test_setup_teardown(route__reopen_and_recover_keep_activity, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(route__two_concurrent_one_reset, setup, teardown),
        cmocka_unit_test_setup_teardown(route__sixteen_concurrent_one_reset, setup, teardown),
        cmocka_unit_test_setup_teardown(route__processes_racing_one_reset, setup, teardown),
        cmocka_unit_test_setup_teardown(route__run_before_reset_is_stale, setup, teardown),
        cmocka_unit_test_setup_teardown(route__daily_and_idle, setup, teardown),
        cmocka_unit_test_setup_teardown(route__clock_going_back, setup, teardown),
        cmocka_unit_test_setup_teardown(route__mode_none_never_resets, setup, teardown),
        cmocka_unit_test_setup_teardown(route__bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(route__expire_prefix_and_dry_run, setup, teardown),
        cmocka_unit_test_setup_teardown(route__import_sets_activity, setup, teardown),
    };
    if (tu_backend_skip())
        return 0;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
