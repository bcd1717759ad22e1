/*
 * test_errors.c -- bindlog_last_error(): every failing call leaves a
 * message naming the call, its subject and the reason; a success clears
 * it; each thread sees its own; a refusal decided by another thread's
 * group-commit leader still reaches the caller's thread.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bindlog.h"
#include "testutil.h"

typedef struct fx {
    char *dir;
    bindlog *s;
} fx;

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    f->dir = tu_mkdtemp("errors");
    assert_int_equal(bindlog_open(&f->s, f->dir, &o), 0);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    bindlog_close(f->s);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static void expect_msg(const char *want)
{
    const char *got = bindlog_last_error();
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        fail_msg("last error \"%s\", expected \"%s\"", got, want);
}

static void errors__state_refusals_name_key_and_reason(void **state)
{
    fx *f = *state;
    bindlog_result r;

    assert_int_equal(bindlog_split(f->s, "agent:main:x", "A", "C", 1, NULL, 0, &r),
                     BINDLOG_ENOTFOUND);
    expect_msg("split agent:main:x: key is not bound");

    assert_int_equal(bindlog_invalidate(f->s, "agent:main:x", NULL, &r), BINDLOG_ENOTFOUND);
    expect_msg("invalidate agent:main:x: key is not bound");

    assert_int_equal(bindlog_unbind(f->s, "agent:main:x", NULL, &r), BINDLOG_ENOTFOUND);
    expect_msg("unbind agent:main:x: key was never bound");

    assert_int_equal(bindlog_bind(f->s, "k1", "S", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    expect_msg("");
    /* the conflict names the key that holds the session */
    assert_int_equal(bindlog_bind(f->s, "k2", "S", NULL, NULL, NULL, 0, &r),
                     BINDLOG_ECONFLICT);
    expect_msg("bind k2: session is the live binding of key k1");

    assert_int_equal(bindlog_new_session(f->s, "k2", "S", NULL, NULL, 0, &r), BINDLOG_EEXIST);
    expect_msg("new_session k2: session id already exists (a new session needs a fresh id)");

    assert_int_equal(bindlog_get(f->s, "nobody", &(bindlog_binding){0}), BINDLOG_ENOTFOUND);
    expect_msg("get nobody: key is not bound");
    bindlog_session se;
    assert_int_equal(bindlog_session_get(f->s, "zz", &se, NULL, 0), BINDLOG_ENOTFOUND);
    expect_msg("session_get zz: no such session");
}

static void errors__success_and_outcomes_clear(void **state)
{
    fx *f = *state;
    bindlog_result r;

    assert_int_equal(bindlog_split(f->s, "k", "A", "C", 1, NULL, 0, &r), BINDLOG_ENOTFOUND);
    assert_true(bindlog_last_error()[0] != '\0');
    assert_int_equal(bindlog_bind(f->s, "k", "A", "", NULL, NULL, 0, &r), BINDLOG_APPLIED);
    expect_msg("");
    assert_int_equal(bindlog_split(f->s, "k", "A", "C", 1, NULL, 0, &r), BINDLOG_APPLIED);
    expect_msg("");
    /* STALE and MOVED are outcomes, not errors: no message */
    assert_int_equal(bindlog_split(f->s, "k", "A", "D", 99, NULL, 0, &r), BINDLOG_STALE);
    expect_msg("");
    assert_int_equal(bindlog_split(f->s, "k", "B", "D", BINDLOG_ANY_GENERATION, NULL, 0, &r),
                     BINDLOG_MOVED);
    expect_msg("");
}

static void errors__arguments_are_named(void **state)
{
    fx *f = *state;
    bindlog_result r;
    bindlog *ro = NULL;

    assert_int_equal(bindlog_split(f->s, "k", "A", "A", 1, NULL, 0, &r), BINDLOG_EINVAL);
    expect_msg("split k: parent and child are the same session");
    assert_int_equal(bindlog_bind(f->s, "k", "bad\x01id", NULL, NULL, NULL, 0, &r),
                     BINDLOG_EINVAL);
    expect_msg("bind k: session id holds a control byte");
    assert_int_equal(bindlog_bind(f->s, "", "S", NULL, NULL, NULL, 0, &r), BINDLOG_EINVAL);
    expect_msg("bind : key is empty");
    /* control bytes of a key are escaped in the message */
    assert_int_equal(bindlog_new_session(f->s, "k\x1b[31m", "S", "bad\nreason", NULL, 0, &r),
                     BINDLOG_EINVAL);
    expect_msg("new_session k\\x1b[31m: reason holds a control byte");
    assert_int_equal(bindlog_invalidate(NULL, "k", NULL, &r), BINDLOG_EINVAL);
    expect_msg("invalidate k: handle is NULL");

    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.read_only = 1;
    assert_int_equal(bindlog_open(&ro, f->dir, &o), 0);
    expect_msg("");
    assert_int_equal(bindlog_unbind(ro, "k", NULL, &r), BINDLOG_EREADONLY);
    expect_msg("unbind k: the handle was opened read-only");
    bindlog_close(ro);

    o.read_only = 0;
    o.durability = 7;
    assert_int_equal(bindlog_open(&ro, f->dir, &o), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "unknown durability mode 7"));
    assert_int_equal(bindlog_open(&ro, "nope://x", NULL), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "open nope://x: unknown scheme"));
}

static void errors__batch_names_the_failing_event(void **state)
{
    fx *f = *state;
    bindlog_result r[3];
    size_t at = 99;
    bindlog_event ev[3] = {
        {BINDLOG_EVENT_BIND, "a", "S1", NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_BIND, "b", "S2", NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_SPLIT, "c", "C", "P", 1, NULL, NULL, 0},
    };
    assert_int_equal(bindlog_apply_batch(f->s, ev, 3, r, &at), BINDLOG_ENOTFOUND);
    assert_int_equal(at, 2);
    expect_msg("apply_batch event 2 (split c): key is not bound");
}

/* Many threads refuse at once, so that most refusals are decided by
 * another thread leading the group: each caller still gets its own. */
typedef struct worker {
    bindlog *s;
    int id;
    int bad;
} worker;

static void *worker_main(void *p)
{
    worker *w = p;
    char key[32], want[96];
    bindlog_result r;
    snprintf(key, sizeof key, "t%d", w->id);
    snprintf(want, sizeof want, "split %s: key is not bound", key);
    for (int i = 0; i < 300; i++) {
        int rc = bindlog_split(w->s, key, "P", "C", 1, NULL, 0, &r);
        if (rc != BINDLOG_ENOTFOUND || strcmp(bindlog_last_error(), want) != 0)
            w->bad++;
    }
    return NULL;
}

static void errors__per_thread_through_group_commit(void **state)
{
    fx *f = *state;
    pthread_t t[8];
    worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (worker){f->s, i, 0};
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].bad, 0);
    }
    /* this thread made no failing call since its last success */
    expect_msg("");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(errors__state_refusals_name_key_and_reason, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(errors__success_and_outcomes_clear, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(errors__arguments_are_named, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(errors__batch_names_the_failing_event, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(errors__per_thread_through_group_commit, fx_setup,
                                        fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
