/*
 * test_seed.c -- the seed scenarios of SPEC section 2, which every build must
 * pass.  They come from a gateway's regression suite: each one is a race
 * between a run that remembered (session_id, generation) when it started and
 * the commands (/stop, /new, /resume) or the other runs that moved the key
 * while it worked.
 *
 * Every test checks the whole trace an event leaves or must not leave: the
 * binding, the number of log records (stats head_lsn and the log iterator),
 * the sessions created or ended, their origin bytes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bindlog.h"
#include "testutil.h"

/* ---- fixture ------------------------------------------------------------- */

static int64_t g_now = 1000;

static int64_t test_clock(void *ctx)
{
    (void)ctx;
    return g_now;
}

typedef struct fx {
    char *tmp;
    char dir[1024];
    bindlog *s;
} fx;

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    f->tmp = tu_store_location("seed");
    if (f->tmp == NULL) {
        free(f);
        return -1;
    }
    if (tu_is_etcd_location(f->tmp))
        snprintf(f->dir, sizeof f->dir, "%s", f->tmp);
    else
        snprintf(f->dir, sizeof f->dir, "%s/store", f->tmp);
    g_now = 1000;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.clock_ms = test_clock;
    int rc = bindlog_open(&f->s, f->dir, &o);
    if (rc != 0) {
        print_error("bindlog_open(%s): %s\n", f->dir, bindlog_strerror(rc));
        tu_store_remove(f->tmp);
        free(f->tmp);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    bindlog_close(f->s);
    tu_store_remove(f->tmp);
    free(f->tmp);
    free(f);
    return 0;
}

/* ---- helpers --------------------------------------------------------------- */

#define ASSERT_RES(rc_, res_, oc_, lsn_, gen_, sid_)                                               \
    do {                                                                                           \
        int rc__ = (rc_);                                                                          \
        assert_int_equal(rc__, (oc_));                                                             \
        assert_int_equal((res_).outcome, (oc_));                                                   \
        assert_int_equal((res_).lsn, (uint64_t)(lsn_));                                            \
        assert_int_equal((res_).generation, (uint64_t)(gen_));                                     \
        assert_string_equal((res_).session_id, (sid_));                                            \
    } while (0)

static uint64_t head_lsn(bindlog *s)
{
    bindlog_stats st;
    memset(&st, 0, sizeof st);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    return st.head_lsn;
}

/* Number of records the log iterator yields for [from, to]. */
static uint64_t count_records(bindlog *s, uint64_t from, uint64_t to)
{
    bindlog_iter *it = NULL;
    bindlog_record rec;
    uint64_t n = 0;
    int rc;
    assert_int_equal(bindlog_log_iter(s, from, to, &it), 0);
    while ((rc = bindlog_iter_next_record(it, &rec)) == 1)
        n++;
    assert_int_equal(rc, 0);
    bindlog_iter_close(it);
    return n;
}

static void assert_binding(bindlog *s, const char *key, const char *sid, uint64_t gen)
{
    bindlog_binding b;
    memset(&b, 0, sizeof b);
    int rc = bindlog_get(s, key, &b);
    if (sid[0] == '\0') {
        assert_int_equal(rc, BINDLOG_ENOTFOUND);
    } else {
        assert_int_equal(rc, 0);
    }
    assert_string_equal(b.session_id, sid);
    assert_int_equal(b.generation, gen);
    assert_string_equal(b.key, key);
}

static void assert_no_session(bindlog *s, const char *id)
{
    bindlog_session ss;
    assert_int_equal(bindlog_session_get(s, id, &ss, NULL, 0), BINDLOG_ENOTFOUND);
}

/* ---- scenario 1 ------------------------------------------------------------ */

/*
 * A run that starts on A at generation g and splits A->C is published even
 * if the turn then fails: binding C, one record, C's origin stored, parent A
 * ended with "compression"; a retried SPLIT(A->C) is ALREADY and writes
 * nothing.
 */
static void seed__split_published_even_if_turn_fails(void **state)
{
    fx *f = *state;
    const char *key = "agent:main:telegram:dm:12345";
    const char origin_a[] = "{\"peer\":\"telegram:12345\"}";
    const char origin_c[] = "{\"peer\":\"telegram:12345\",\"split\":1}";
    bindlog_result r;

    ASSERT_RES(bindlog_bind(f->s, key, "A", NULL, NULL, origin_a, sizeof origin_a - 1, &r), r,
               BINDLOG_APPLIED, 1, 1, "A");

    /* the run starts: it remembers (A, g) */
    const uint64_t g = r.generation;
    uint64_t before = head_lsn(f->s);
    assert_int_equal(before, 1);

    g_now = 2000;
    ASSERT_RES(bindlog_split(f->s, key, "A", "C", g, origin_c, sizeof origin_c - 1, &r), r,
               BINDLOG_APPLIED, 2, g, "C");
    /* ... and then the turn fails: nothing else happens. */

    assert_binding(f->s, key, "C", g);
    assert_int_equal(head_lsn(f->s), before + 1);
    assert_int_equal(count_records(f->s, 0, UINT64_MAX), 2);

    /* the one record */
    bindlog_iter *it = NULL;
    bindlog_record rec;
    assert_int_equal(bindlog_log_iter(f->s, before + 1, UINT64_MAX, &it), 0);
    assert_int_equal(bindlog_iter_next_record(it, &rec), 1);
    assert_int_equal(rec.lsn, 2);
    assert_int_equal(rec.type, BINDLOG_EVENT_SPLIT);
    assert_string_equal(rec.key, key);
    assert_int_equal(rec.key_len, strlen(key));
    assert_string_equal(rec.session_id, "C");
    assert_string_equal(rec.other_id, "A");
    assert_int_equal(rec.generation, g);
    assert_int_equal(rec.time_ms, 2000);
    assert_int_equal(rec.origin_present, 1);
    assert_int_equal(rec.origin_len, sizeof origin_c - 1);
    assert_memory_equal(rec.origin, origin_c, sizeof origin_c - 1);
    assert_int_equal(bindlog_iter_next_record(it, &rec), 0);
    bindlog_iter_close(it);

    /* C exists with its origin, A ended by the compression */
    bindlog_session ss;
    char buf[256];
    memset(buf, 0, sizeof buf);
    assert_int_equal(bindlog_session_get(f->s, "C", &ss, buf, sizeof buf), 0);
    assert_string_equal(ss.session_id, "C");
    assert_string_equal(ss.key, key);
    assert_string_equal(ss.parent_id, "A");
    assert_int_equal(ss.created_lsn, 2);
    assert_int_equal(ss.created_ms, 2000);
    assert_int_equal(ss.ended_lsn, 0);
    assert_int_equal(ss.ended_ms, 0);
    assert_string_equal(ss.end_reason, "");
    assert_int_equal(ss.origin_len, sizeof origin_c - 1);
    assert_memory_equal(buf, origin_c, sizeof origin_c - 1);

    memset(buf, 0, sizeof buf);
    assert_int_equal(bindlog_session_get(f->s, "A", &ss, buf, sizeof buf), 0);
    assert_string_equal(ss.parent_id, "");
    assert_int_equal(ss.created_lsn, 1);
    assert_int_equal(ss.ended_lsn, 2);
    assert_int_equal(ss.ended_ms, 2000);
    assert_string_equal(ss.end_reason, "compression");
    assert_int_equal(ss.origin_len, sizeof origin_a - 1);
    assert_memory_equal(buf, origin_a, sizeof origin_a - 1);

    /* the gateway retries the split: recognised, nothing written */
    uint64_t head = head_lsn(f->s);
    g_now = 3000;
    ASSERT_RES(bindlog_split(f->s, key, "A", "C", g, origin_c, sizeof origin_c - 1, &r), r,
               BINDLOG_ALREADY, 0, g, "C");
    assert_int_equal(head_lsn(f->s), head);
    assert_int_equal(count_records(f->s, 0, UINT64_MAX), 2);
    /* the retry did not touch C (no new time, no new origin) */
    assert_int_equal(bindlog_session_get(f->s, "C", &ss, NULL, 0), 0);
    assert_int_equal(ss.created_lsn, 2);
    assert_int_equal(ss.created_ms, 2000);
    assert_int_equal(ss.origin_len, sizeof origin_c - 1);
    /* the same retry with ANY generation is ALREADY too */
    ASSERT_RES(bindlog_split(f->s, key, "A", "C", BINDLOG_ANY_GENERATION, NULL, 0, &r), r,
               BINDLOG_ALREADY, 0, g, "C");
    assert_int_equal(head_lsn(f->s), head);

    bindlog_binding b;
    assert_int_equal(bindlog_get(f->s, key, &b), 0);
    assert_int_equal(b.lsn, 2);
    assert_int_equal(b.updated_ms, 2000);
}

/* ---- scenario 2 ------------------------------------------------------------ */

/*
 * /stop + /new while the run is still compressing: the generation moved, so
 * the late SPLIT(A->C, g) is STALE and leaves no trace (no record, no session
 * C); the key stays on the new session.
 */
static void seed__stop_new_makes_late_split_stale(void **state)
{
    fx *f = *state;
    const char *key = "agent:main:discord:channel:42";
    bindlog_result r;

    ASSERT_RES(bindlog_bind(f->s, key, "A", NULL, NULL, "o", 1, &r), r, BINDLOG_APPLIED, 1, 1, "A");
    const uint64_t g = r.generation; /* the run starts on (A, g) */

    /* /stop */
    ASSERT_RES(bindlog_invalidate(f->s, key, "user /stop", &r), r, BINDLOG_APPLIED, 2, g + 1, "A");
    /* /new */
    ASSERT_RES(bindlog_new_session(f->s, key, "B", NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 3, g + 2,
               "B");

    uint64_t head = head_lsn(f->s);
    assert_int_equal(head, 3);

    /* the run finishes compressing and tries to publish its split */
    ASSERT_RES(bindlog_split(f->s, key, "A", "C", g, "late", 4, &r), r, BINDLOG_STALE, 0, g + 2,
               "B");

    /* no trace */
    assert_int_equal(head_lsn(f->s), head);
    assert_int_equal(count_records(f->s, 0, UINT64_MAX), 3);
    assert_no_session(f->s, "C");
    assert_binding(f->s, key, "B", g + 2);

    bindlog_session ss;
    assert_int_equal(bindlog_session_get(f->s, "B", &ss, NULL, 0), 0);
    assert_string_equal(ss.parent_id, "A");
    assert_int_equal(ss.ended_lsn, 0);
    assert_int_equal(bindlog_session_get(f->s, "A", &ss, NULL, 0), 0);
    assert_int_equal(ss.ended_lsn, 3);
    assert_string_equal(ss.end_reason, "new_session");

    /* the children of A are only B: the stale split left no index entry */
    bindlog_iter *it = NULL;
    assert_int_equal(bindlog_children_iter(f->s, "A", &it), 0);
    assert_int_equal(bindlog_iter_next_session(it, &ss, NULL, 0), 1);
    assert_string_equal(ss.session_id, "B");
    assert_int_equal(bindlog_iter_next_session(it, &ss, NULL, 0), 0);
    bindlog_iter_close(it);

    /* a retry of the stale split is still STALE, still without a trace */
    ASSERT_RES(bindlog_split(f->s, key, "A", "C", g, NULL, 0, &r), r, BINDLOG_STALE, 0, g + 2, "B");
    assert_int_equal(head_lsn(f->s), head);
    assert_no_session(f->s, "C");
}

/* ---- scenario 3 ------------------------------------------------------------ */

/*
 * The identity guard: two runs of the same generation both start on A; the
 * first splits A->C; the second's SPLIT(A->D, g) is MOVED and leaves no trace.
 */
static void seed__identity_guard_moved(void **state)
{
    fx *f = *state;
    const char *key = "agent:main:slack:thread:T1";
    bindlog_result r;

    ASSERT_RES(bindlog_bind(f->s, key, "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    const uint64_t g = r.generation; /* both runs start on (A, g) */

    ASSERT_RES(bindlog_split(f->s, key, "A", "C", g, "c", 1, &r), r, BINDLOG_APPLIED, 2, g, "C");
    uint64_t head = head_lsn(f->s);

    ASSERT_RES(bindlog_split(f->s, key, "A", "D", g, "d", 1, &r), r, BINDLOG_MOVED, 0, g, "C");
    assert_int_equal(head_lsn(f->s), head);
    assert_int_equal(count_records(f->s, 0, UINT64_MAX), 2);
    assert_no_session(f->s, "D");
    assert_binding(f->s, key, "C", g);

    bindlog_session ss;
    assert_int_equal(bindlog_session_get(f->s, "C", &ss, NULL, 0), 0);
    assert_int_equal(ss.ended_lsn, 0);
    assert_string_equal(ss.parent_id, "A");
    assert_int_equal(bindlog_session_get(f->s, "A", &ss, NULL, 0), 0);
    assert_int_equal(ss.ended_lsn, 2);
    assert_string_equal(ss.end_reason, "compression");
}

/*
 * A caller that skips the generation check (BINDLOG_ANY_GENERATION) is still
 * stopped by the identity guard: after a /resume moved the key to B,
 * SPLIT(A->C, ANY) is MOVED.
 */
static void seed__any_generation_still_moved(void **state)
{
    fx *f = *state;
    const char *key = "agent:main:telegram:group:-100";
    bindlog_result r;

    /* B is an older session of the key; A the current one */
    ASSERT_RES(bindlog_bind(f->s, key, "B", NULL, NULL, "b", 1, &r), r, BINDLOG_APPLIED, 1, 1, "B");
    ASSERT_RES(bindlog_new_session(f->s, key, "A", NULL, "a", 1, &r), r, BINDLOG_APPLIED, 2, 2,
               "A");
    /* a run the gateway did not number starts on A */
    /* /resume B */
    ASSERT_RES(bindlog_bind(f->s, key, "B", NULL, "resume", NULL, 0, &r), r, BINDLOG_APPLIED, 3, 3,
               "B");
    uint64_t head = head_lsn(f->s);

    ASSERT_RES(bindlog_split(f->s, key, "A", "C", BINDLOG_ANY_GENERATION, "c", 1, &r), r,
               BINDLOG_MOVED, 0, 3, "B");
    assert_int_equal(head_lsn(f->s), head);
    assert_int_equal(count_records(f->s, 0, UINT64_MAX), 3);
    assert_no_session(f->s, "C");
    assert_binding(f->s, key, "B", 3);

    bindlog_session ss;
    assert_int_equal(bindlog_session_get(f->s, "A", &ss, NULL, 0), 0);
    assert_int_equal(ss.ended_lsn, 3);
    assert_string_equal(ss.end_reason, "resume");
    assert_int_equal(bindlog_session_get(f->s, "B", &ss, NULL, 0), 0);
    assert_int_equal(ss.ended_lsn, 0);

    /* With ANY generation a split from the right parent does apply. */
    ASSERT_RES(bindlog_split(f->s, key, "B", "C", BINDLOG_ANY_GENERATION, "c", 1, &r), r,
               BINDLOG_APPLIED, 4, 3, "C");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(seed__split_published_even_if_turn_fails, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(seed__stop_new_makes_late_split_stale, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(seed__identity_guard_moved, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(seed__any_generation_still_moved, fx_setup, fx_teardown),
    };
    if (tu_backend_skip())
        return 0;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
