/*
 * test_group_concurrency.c -- the group commit's queue (src/core/group.c)
 * driven directly, with a `run` that numbers every event and a `finish`
 * that sleeps like a flush.
 *
 * What is asserted is the protocol, not timing: every request completes
 * exactly once with its own numbers, a thread's requests finish in order,
 * no group runs while another runs or is finished (holding), and the
 * paths under test were taken (a queueing writer took a rejoin over; a
 * lone writer never waited in one).  test_concurrency.c does the same
 * through a real store.  Runs under ThreadSanitizer (label concurrency).
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
#include <time.h>

#include "bindlog.h"
#include "core/group.h"

typedef struct backend {
    bl_group g;
    uint64_t seq;             /* the last number given (only `run` touches it) */
    atomic_int active;        /* runs and finishes in progress: never above 1 */
    atomic_int overlaps;      /* times it was */
    unsigned finish_us;       /* how long a finish sleeps */
} backend;

static void sleep_us(unsigned us)
{
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

static void enter(backend *b)
{
    if (atomic_fetch_add(&b->active, 1) != 0)
        atomic_fetch_add(&b->overlaps, 1);
}

static void leave(backend *b) { atomic_fetch_sub(&b->active, 1); }

/* Number every event of the group, in queue order. */
static int run(void *ctx, bl_greq *group)
{
    backend *b = ctx;
    enter(b);
    for (bl_greq *r = group; r != NULL; r = r->next) {
        r->rc = 0;
        for (size_t i = 0; i < r->n; i++) {
            r->outcomes[i] = BINDLOG_APPLIED;
            if (r->out != NULL)
                r->out[i].lsn = ++b->seq;
        }
    }
    leave(b);
    return 1; /* a flush to come */
}

static int finish(void *ctx, bl_greq *group)
{
    backend *b = ctx;
    (void)group;
    enter(b);
    sleep_us(b->finish_us);
    leave(b);
    return 0;
}

static backend *backend_new(unsigned finish_us, uint64_t budget)
{
    backend *b = calloc(1, sizeof(*b));
    assert_non_null(b);
    bl_group_init(&b->g);
    bl_group_hold(&b->g, 1);
    bl_group_budget(&b->g, budget);
    b->finish_us = finish_us;
    return b;
}

static void backend_free(backend *b)
{
    bl_group_destroy(&b->g);
    free(b);
}

#define KEY "agent:main:telegram:dm:1"

typedef struct writer {
    backend *b;
    unsigned id, calls, per_call, pause_every;
    uint64_t *lsns;           /* calls * per_call numbers, in call order */
    int failures;
} writer;

static void *writer_main(void *arg)
{
    writer *w = arg;
    bl_event ev[8];
    bindlog_result out[8];
    int codes[8];
    unsigned seed = w->id * 2654435761u + 1;

    memset(ev, 0, sizeof ev);
    for (unsigned k = 0; k < 8; k++) {
        ev[k].type = BINDLOG_EVENT_INVALIDATE;
        ev[k].key = KEY;
        ev[k].key_len = strlen(KEY);
    }
    for (unsigned c = 0; c < w->calls; c++) {
        memset(out, 0, sizeof out);
        int rc;
        if (w->per_call == 1)
            rc = bl_group_submit(&w->b->g, NULL, ev, 1, out, NULL, run, finish, w->b);
        else
            rc = bl_group_submit_each(&w->b->g, NULL, ev, w->per_call, out, codes, NULL, run,
                                      finish, w->b);
        if (rc != 0)
            w->failures++;
        for (unsigned k = 0; k < w->per_call; k++)
            w->lsns[c * w->per_call + k] = out[k].lsn;
        /* some writers come back late: rejoins end at their deadline */
        if (w->pause_every != 0 && (seed = seed * 1103515245u + 12345u) % w->pause_every == 0)
            sleep_us(50 + (seed >> 16) % 400);
    }
    return NULL;
}

/* Run n writers; check every number was given once, each thread's in
 * increasing order, and nothing overlapped. */
static void run_writers(backend *b, unsigned n, unsigned calls, unsigned per_call,
                        unsigned pause_every)
{
    writer *w = calloc(n, sizeof(*w));
    pthread_t *t = calloc(n, sizeof(*t));
    uint64_t total = (uint64_t)n * calls * per_call;
    unsigned char *seen = calloc(total + 1, 1);
    assert_non_null(w);
    assert_non_null(t);
    assert_non_null(seen);

    for (unsigned i = 0; i < n; i++) {
        w[i] = (writer){.b = b, .id = i, .calls = calls, .per_call = per_call,
                        .pause_every = pause_every};
        w[i].lsns = calloc((size_t)calls * per_call, sizeof(uint64_t));
        assert_non_null(w[i].lsns);
        assert_int_equal(pthread_create(&t[i], NULL, writer_main, &w[i]), 0);
    }
    for (unsigned i = 0; i < n; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);

    assert_int_equal(b->seq, total);
    assert_int_equal(atomic_load(&b->overlaps), 0);
    for (unsigned i = 0; i < n; i++) {
        assert_int_equal(w[i].failures, 0);
        uint64_t prev = 0;
        for (size_t k = 0; k < (size_t)calls * per_call; k++) {
            uint64_t l = w[i].lsns[k];
            assert_true(l >= 1 && l <= total);
            assert_int_equal(seen[l], 0); /* given once */
            seen[l] = 1;
            assert_true(l > prev); /* a thread's events, in its order */
            prev = l;
        }
        free(w[i].lsns);
    }
    free(seen);
    free(t);
    free(w);
}

/* Many writers, some of them late: rejoins end at their deadline, and a
 * writer that queues then takes the group over from the sleeping leader. */
static void group__rejoins_taken_over_lose_nothing(void **state)
{
    (void)state;
    backend *b = backend_new(80, 0);
    run_writers(b, 24, 1500, 1, 40);
    print_message("  rejoins %llu, taken over by a queueing writer %llu\n",
                  (unsigned long long)b->g.rejoin_seq, (unsigned long long)b->g.taken_seq);
    assert_true(b->g.rejoin_seq > 0);
    assert_true(b->g.taken_seq > 0);
    assert_int_equal(b->g.leader, 0);
    assert_int_equal(b->g.rejoining, 0);
    assert_null(b->g.head);
    backend_free(b);
}

/* Several events a call, one request each, and a budget that cuts groups
 * inside a call's requests: the leftovers wait for the next group, and
 * takeovers still lose nothing and keep each call's order. */
static void group__budget_cuts_and_takeovers(void **state)
{
    (void)state;
    bl_event ev = {.type = BINDLOG_EVENT_INVALIDATE, .key = KEY, .key_len = strlen(KEY)};
    backend *b = backend_new(60, 7 * bl_event_bytes(&ev)); /* about 7 events a group */
    run_writers(b, 12, 400, 5, 30);
    assert_true(b->g.taken_seq > 0);
    assert_null(b->g.head);
    backend_free(b);
}

/* A lone writer comes back to an empty queue: it leads at once, never
 * waiting in a rejoin for writers that do not exist. */
static void group__a_lone_writer_never_waits(void **state)
{
    (void)state;
    backend *b = backend_new(20, 0);
    run_writers(b, 1, 2000, 1, 0);
    assert_int_equal(b->g.rejoin_seq, 0);
    backend_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(group__rejoins_taken_over_lose_nothing),
        cmocka_unit_test(group__budget_cuts_and_takeovers),
        cmocka_unit_test(group__a_lone_writer_never_waits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
