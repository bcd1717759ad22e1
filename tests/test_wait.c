/*
 * test_wait.c -- bindlog_wait(): returns at once when the head is already
 * past after_lsn, times out with the head unchanged, and wakes for commits
 * made by another thread and by another process.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bindlog.h"
#include "testutil.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bindlog *open_store(const char *dir)
{
    bindlog *s = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NORMAL;
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    return s;
}

static void wait__returns_at_once_or_times_out(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("wait");
    bindlog *s = open_store(dir);
    uint64_t head = 99;

    assert_int_equal(bindlog_wait(s, 0, 0, &head), 0);
    assert_int_equal(head, 0); /* empty store: nothing after 0 */
    assert_int_equal(bindlog_bind(s, "k", "A", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    int64_t t0 = now_ms();
    assert_int_equal(bindlog_wait(s, 0, -1, &head), 0); /* already past: no wait */
    assert_int_equal(head, 1);
    assert_true(now_ms() - t0 < 1000);

    t0 = now_ms();
    assert_int_equal(bindlog_wait(s, 1, 60, &head), 0); /* nothing new: times out */
    assert_int_equal(head, 1);
    assert_true(now_ms() - t0 >= 60);

    assert_int_equal(bindlog_wait(s, 1, -2, &head), BINDLOG_EINVAL);
    assert_int_equal(bindlog_wait(NULL, 1, 0, &head), BINDLOG_EINVAL);
    assert_int_equal(bindlog_wait(s, 1, 0, NULL), 0); /* head is optional */
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

typedef struct later {
    bindlog *s;
    int delay_ms;
} later;

static void *commit_later(void *p)
{
    later *l = p;
    usleep((useconds_t)l->delay_ms * 1000);
    bindlog_bind(l->s, "k2", "B", NULL, NULL, NULL, 0, NULL);
    return NULL;
}

static void wait__wakes_for_another_thread(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("wait");
    bindlog *s = open_store(dir);
    pthread_t t;
    later l = {s, 80};
    uint64_t head = 0;

    assert_int_equal(pthread_create(&t, NULL, commit_later, &l), 0);
    int64_t t0 = now_ms();
    assert_int_equal(bindlog_wait(s, 0, 10000, &head), 0);
    assert_int_equal(head, 1);
    assert_true(now_ms() - t0 < 5000); /* woken by the commit, not the timeout */
    pthread_join(t, NULL);
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

static void wait__wakes_for_another_process(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("wait");
    bindlog_close(open_store(dir)); /* create it; nothing open across fork */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        bindlog *c = NULL;
        usleep(100 * 1000);
        if (bindlog_open(&c, dir, NULL) != 0)
            _exit(2);
        int rc = bindlog_bind(c, "k3", "C", NULL, NULL, NULL, 0, NULL);
        bindlog_close(c);
        _exit(rc == BINDLOG_APPLIED ? 0 : 3);
    }
    bindlog *s = open_store(dir);
    uint64_t head = 0;
    int64_t t0 = now_ms();
    assert_int_equal(bindlog_wait(s, 0, 20000, &head), 0);
    assert_int_equal(head, 1);
    assert_true(now_ms() - t0 < 15000);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wait__returns_at_once_or_times_out),
        cmocka_unit_test(wait__wakes_for_another_thread),
        cmocka_unit_test(wait__wakes_for_another_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
