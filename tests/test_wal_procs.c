/*
 * test_wal_procs.c -- the write-ahead log across processes: every
 * acknowledged event is readable at once from another process (before any
 * checkpoint), the split's compare-and-swap holds across processes,
 * statistics are the store's, bindlog_wait() wakes another process, a
 * writer that died holding the writers' lock does not stop the others, and
 * a read-only process without the shared memory reads the log itself.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"
#include "lmdb/walenv.h"
#include "testutil.h"

#define SMALL_LOG ((uint64_t)64 << 10)

static bindlog *xopen(const char *dir, int durability, int ro)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = durability;
    o.read_only = ro;
    o.log_size = SMALL_LOG;
    int rc = bindlog_open(&s, dir, &o);
    if (rc != 0) {
        fprintf(stderr, "open %s: %s\n", dir, bindlog_last_error());
        return NULL;
    }
    return s;
}

static void wait_child(pid_t pid)
{
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child failed: status 0x%x", status);
}

static void assert_clean(bindlog *s)
{
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    if (rep.problems)
        fail_msg("check: %s", rep.message);
}

/* A child binds "x-k<i>" to "x-s<i>" and says i on the pipe after each
 * APPLIED; the parent, which has the store open all along, must read the
 * binding at once.  Then the other way round.  The log is small, so the
 * background checkpoints run and the ring wraps meanwhile. */
static void wal_procs__another_process_reads_every_acknowledged_event(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walread");
    bindlog *s;
    int up[2], down[2];
    const int n = 300;
    /* (a process must not fork with a store open and use it in the child:
     * LMDB's rule; every test here forks first) */
    bindlog_close(xopen(dir, BINDLOG_DURABILITY_FULL, 0));
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        bindlog *c = xopen(dir, BINDLOG_DURABILITY_NORMAL, 0);
        if (c == NULL)
            _exit(2);
        char key[32], sid[32];
        for (int i = 0; i < n; i++) {
            snprintf(key, sizeof key, "c-k%d", i);
            snprintf(sid, sizeof sid, "c-s%d", i);
            if (bindlog_bind(c, key, sid, NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
                _exit(3);
            if (write(up[1], &i, sizeof i) != (ssize_t)sizeof i)
                _exit(4);
        }
        /* now the parent writes and says so: read each at once */
        for (int i = 0; i < n; i++) {
            int j;
            bindlog_binding b;
            if (read(down[0], &j, sizeof j) != (ssize_t)sizeof j || j != i)
                _exit(5);
            snprintf(key, sizeof key, "p-k%d", i);
            snprintf(sid, sizeof sid, "p-s%d", i);
            if (bindlog_get(c, key, &b) != 0 || strcmp(b.session_id, sid) != 0)
                _exit(6);
        }
        bindlog_close(c);
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    s = xopen(dir, BINDLOG_DURABILITY_FULL, 0);
    assert_non_null(s);
    char key[32], sid[32];
    for (int i = 0; i < n; i++) {
        int j;
        bindlog_binding b;
        assert_int_equal(read(up[0], &j, sizeof j), (ssize_t)sizeof j);
        assert_int_equal(j, i);
        snprintf(key, sizeof key, "c-k%d", i);
        snprintf(sid, sizeof sid, "c-s%d", i);
        assert_int_equal(bindlog_get(s, key, &b), 0);
        assert_string_equal(b.session_id, sid);
    }
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "p-k%d", i);
        snprintf(sid, sizeof sid, "p-s%d", i);
        assert_int_equal(bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
        assert_int_equal(write(down[1], &i, sizeof i), (ssize_t)sizeof i);
    }
    wait_child(pid);
    close(up[0]);
    close(down[1]);
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 2 * n);
    assert_clean(s);
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

/* Two processes split the same key from the same parent at the same
 * generation, many times over: exactly one wins each time. */
static void wal_procs__the_split_cas_holds_across_processes(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walcas");
    const int rounds = 150;
    bindlog *s = xopen(dir, BINDLOG_DURABILITY_NONE, 0);
    assert_non_null(s);
    char key[32], sid[32];
    for (int r = 0; r < rounds; r++) {
        snprintf(key, sizeof key, "k%d", r);
        snprintf(sid, sizeof sid, "root%d", r);
        assert_int_equal(bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    }
    bindlog_close(s);
    int res[2][2], go[2][2];
    pid_t pid[2];
    for (int p = 0; p < 2; p++) {
        assert_int_equal(pipe(res[p]), 0);
        assert_int_equal(pipe(go[p]), 0);
        pid[p] = fork();
        assert_true(pid[p] >= 0);
        if (pid[p] == 0) {
            close(res[p][0]);
            close(go[p][1]);
            bindlog *c = xopen(dir, BINDLOG_DURABILITY_NORMAL, 0);
            if (c == NULL)
                _exit(2);
            char k[32], parent[32], child[32], start;
            for (int r = 0; r < rounds; r++) {
                snprintf(k, sizeof k, "k%d", r);
                snprintf(parent, sizeof parent, "root%d", r);
                snprintf(child, sizeof child, "c%d-%d", p, r);
                if (read(go[p][0], &start, 1) != 1) /* both race each round */
                    _exit(4);
                int o = bindlog_split(c, k, parent, child, 1, NULL, 0, NULL);
                if (write(res[p][1], &o, sizeof o) != (ssize_t)sizeof o)
                    _exit(3);
            }
            bindlog_close(c);
            _exit(0);
        }
        close(res[p][1]);
        close(go[p][0]);
    }
    int wins = 0;
    for (int r = 0; r < rounds; r++) {
        int o[2];
        char start = 1;
        for (int p = 0; p < 2; p++)
            assert_int_equal(write(go[p][1], &start, 1), 1);
        for (int p = 0; p < 2; p++)
            assert_int_equal(read(res[p][0], &o[p], sizeof o[p]), (ssize_t)sizeof o[p]);
        int applied = (o[0] == BINDLOG_APPLIED) + (o[1] == BINDLOG_APPLIED);
        int moved = (o[0] == BINDLOG_MOVED) + (o[1] == BINDLOG_MOVED);
        if (applied != 1 || moved != 1)
            fail_msg("round %d: outcomes %d and %d", r, o[0], o[1]);
        wins += o[0] == BINDLOG_APPLIED;
    }
    for (int p = 0; p < 2; p++) {
        wait_child(pid[p]);
        close(res[p][0]);
        close(go[p][1]);
    }
    print_message("    process 0 won %d of %d races, process 1 %d\n", wins, rounds, rounds - wins);
    s = xopen(dir, BINDLOG_DURABILITY_NONE, 1);
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 2 * rounds);
    assert_clean(s);
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

/* Statistics are the store's: after two processes wrote, every handle in
 * every process (a read-only one too) reports the same commit counts. */
static void wal_procs__statistics_are_the_stores(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walstats");
    bindlog_close(xopen(dir, BINDLOG_DURABILITY_NONE, 0));
    pid_t pid[2];
    for (int p = 0; p < 2; p++) {
        pid[p] = fork();
        assert_true(pid[p] >= 0);
        if (pid[p] == 0) {
            bindlog *c = xopen(dir, BINDLOG_DURABILITY_NORMAL, 0);
            if (c == NULL)
                _exit(2);
            char key[32], sid[32];
            for (int i = 0; i < 200; i++) {
                snprintf(key, sizeof key, "p%d-k%d", p, i % 7);
                snprintf(sid, sizeof sid, "p%d-s%d", p, i);
                if (bindlog_new_session(c, key, sid, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
                    _exit(3);
                bindlog_invalidate(c, "never-bound", NULL, NULL); /* refused: not counted */
            }
            _exit(0); /* no close: some of it stays in the log */
        }
    }
    for (int p = 0; p < 2; p++)
        wait_child(pid[p]);
    bindlog_stats a, b;
    bindlog *ro = xopen(dir, BINDLOG_DURABILITY_NONE, 1);
    assert_int_equal(bindlog_stats_get(ro, &a), 0);
    assert_int_equal(a.head_lsn, 400);
    assert_int_equal(a.applied[BINDLOG_EVENT_NEW_SESSION], 400);
    assert_int_equal(a.grouped_events, 400);
    assert_true(a.commits >= 1 && a.commits <= 400);
    bindlog_close(ro);
    bindlog *w = xopen(dir, BINDLOG_DURABILITY_NONE, 0);
    assert_int_equal(bindlog_checkpoint(w, NULL), 0);
    assert_int_equal(bindlog_stats_get(w, &b), 0);
    assert_int_equal(b.commits, a.commits);
    assert_int_equal(b.grouped_events, a.grouped_events);
    assert_memory_equal(b.applied, a.applied, sizeof a.applied);
    assert_int_equal(b.checkpoint_lsn, 400);
    bindlog_close(w);
    tu_rmtree(dir);
    free(dir);
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* A waiter in one process, a writer in another: each commit wakes the
 * waiter.  The latency (commit returned -> waiter returned, both on
 * CLOCK_MONOTONIC) is printed; the test only requires that every wake-up
 * comes, well before the timeout.  docs/performance.md has the figures. */
static void wal_procs__wait_wakes_another_process(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walwait");
    const int n = 100;
    bindlog *s;
    int ready[2], times[2];
    bindlog_close(xopen(dir, BINDLOG_DURABILITY_NORMAL, 0));
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(times), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(times[1]);
        bindlog *c = xopen(dir, BINDLOG_DURABILITY_NORMAL, 0);
        if (c == NULL)
            _exit(2);
        uint64_t head = 0;
        int64_t lat[100];
        for (int i = 0; i < n; i++) {
            char go = 1;
            if (write(ready[1], &go, 1) != 1)
                _exit(3);
            uint64_t seen;
            if (bindlog_wait(c, head, 5000, &seen) != 0 || seen <= head)
                _exit(4);
            int64_t woke = now_us(), sent;
            /* (the sender's clock is read before its commit: the figure is
             * an upper bound of the wake-up's own latency) */
            if (read(times[0], &sent, sizeof sent) != (ssize_t)sizeof sent)
                _exit(5);
            lat[i] = woke - sent;
            head = seen;
        }
        qsort(lat, (size_t)n, sizeof lat[0], cmp_i64);
        fprintf(stderr, "    cross-process wake-up: p50 %lld us, p99 %lld us, max %lld us\n",
                (long long)lat[n / 2], (long long)lat[n * 99 / 100], (long long)lat[n - 1]);
        bindlog_close(c);
        _exit(0);
    }
    close(ready[1]);
    close(times[0]);
    s = xopen(dir, BINDLOG_DURABILITY_NORMAL, 0);
    char key[32];
    for (int i = 0; i < n; i++) {
        char go;
        assert_int_equal(read(ready[0], &go, 1), 1);
        struct timespec ts = {0, 2000000}; /* let it fall asleep */
        nanosleep(&ts, NULL);
        snprintf(key, sizeof key, "w%d", i);
        int64_t t = now_us(); /* the latency includes the commit itself */
        assert_int_equal(bindlog_bind(s, key, key, NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
        assert_int_equal(write(times[1], &t, sizeof t), (ssize_t)sizeof t);
    }
    wait_child(pid);
    close(ready[0]);
    close(times[1]);
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

/* A process that dies holding the writers' lock (here: it takes it and
 * exits) does not stop the others: the next locker repairs the shared
 * state from the log and goes on. */
static void wal_procs__a_writer_dead_with_the_lock_does_not_block(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walrobust");
    int hold[2], ready[2];
    char c1;
    bindlog_close(xopen(dir, BINDLOG_DURABILITY_NONE, 0));
    assert_int_equal(pipe(hold), 0);
    assert_int_equal(pipe(ready), 0);
    /* a process that keeps the store (and its shared memory) alive */
    pid_t holder = fork();
    assert_true(holder >= 0);
    if (holder == 0) {
        close(hold[1]);
        close(ready[0]);
        bindlog *h = xopen(dir, BINDLOG_DURABILITY_NONE, 1);
        char x = 1;
        if (h == NULL || write(ready[1], &x, 1) != 1)
            _exit(2);
        (void)!read(hold[0], &x, 1); /* until the parent is done */
        bindlog_close(h);
        _exit(0);
    }
    close(hold[0]);
    close(ready[1]);
    assert_int_equal(read(ready[0], &c1, 1), 1);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        bindlog *c = xopen(dir, BINDLOG_DURABILITY_NONE, 0);
        if (c == NULL || bindlog_bind(c, "b", "b1", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
            _exit(2);
        if (bl_wal_lock(c->e) != 0)
            _exit(3);
        _exit(0); /* dies holding it */
    }
    wait_child(pid);
    bindlog *s = xopen(dir, BINDLOG_DURABILITY_NONE, 0);
    bindlog_binding b;
    assert_int_equal(bindlog_bind(s, "c", "c1", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    assert_int_equal(bindlog_get(s, "b", &b), 0);
    assert_int_equal(bindlog_get(s, "c", &b), 0);
    assert_int_equal(b.lsn, 2);
    assert_clean(s);
    bindlog_close(s);
    close(hold[1]);
    close(ready[0]);
    wait_child(holder);
    tu_rmtree(dir);
    free(dir);
}

/* A read-only handle that cannot open the shared memory (here it is gone
 * and the handle may not create it) reads the log itself, and creates
 * nothing. */
static void wal_procs__read_only_without_shared_memory_reads_the_log(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walprivate");
    char shm[4200];
    bindlog_close(xopen(dir, BINDLOG_DURABILITY_NONE, 0));
    pid_t pid = fork();
    if (pid == 0) {
        setenv("BINDLOG_CHECKPOINT", "manual", 1);
        bindlog *c = xopen(dir, BINDLOG_DURABILITY_NORMAL, 0);
        if (c == NULL)
            _exit(2);
        for (int i = 0; i < 50; i++)
            if (bindlog_invalidate(c, "nothing", NULL, NULL) != BINDLOG_ENOTFOUND ||
                bindlog_bind(c, "k", i % 2 ? "odd" : "even", NULL, NULL, NULL, 0, NULL) !=
                    BINDLOG_APPLIED)
                _exit(3);
        _exit(0);
    }
    wait_child(pid);
    snprintf(shm, sizeof shm, "%s/%s", dir, BL_SHM_FILE);
    assert_int_equal(unlink(shm), 0);
    /* the writer of later: forked now, before this process opens the store */
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid = fork();
    if (pid == 0) {
        char x;
        close(go[1]);
        if (read(go[0], &x, 1) != 1)
            _exit(4);
        bindlog *c = xopen(dir, BINDLOG_DURABILITY_NORMAL, 0);
        int rc = c ? bindlog_bind(c, "k", "third", NULL, NULL, NULL, 0, NULL) : -99;
        if (rc != BINDLOG_APPLIED) {
            fprintf(stderr, "bind: %d %s\n", rc, bindlog_last_error());
            _exit(2);
        }
        _exit(0);
    }
    close(go[0]);
    bindlog *ro = xopen(dir, BINDLOG_DURABILITY_NONE, 1);
    assert_non_null(ro);
    bindlog_binding b;
    bindlog_stats st;
    assert_int_equal(bindlog_get(ro, "k", &b), 0);
    assert_string_equal(b.session_id, "odd");
    assert_int_equal(bindlog_stats_get(ro, &st), 0);
    assert_int_equal(st.head_lsn, 50);
    assert_int_equal(st.checkpoint_lsn, 0);
    struct stat sb;
    assert_int_equal(stat(shm, &sb), -1); /* nothing created */
    assert_clean(ro);

    /* a writer comes (and makes the shared memory): the private reader
     * still sees what it writes, by reading the log */
    char x = 1;
    assert_int_equal(write(go[1], &x, 1), 1);
    close(go[1]);
    wait_child(pid);
    assert_int_equal(bindlog_get(ro, "k", &b), 0);
    assert_string_equal(b.session_id, "third");
    uint64_t head = 0;
    assert_int_equal(bindlog_wait(ro, 50, 0, &head), 0);
    assert_int_equal(head, 51);
    bindlog_close(ro);
    tu_rmtree(dir);
    free(dir);
}

/* Three processes write through a small log at once: it wraps many times,
 * every process checkpoints; the result is dense and checks clean. */
static void wal_procs__three_writers_through_a_small_ring(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("walring");
    const int per = 600;
    bindlog_close(xopen(dir, BINDLOG_DURABILITY_NONE, 0));
    pid_t pid[3];
    for (int p = 0; p < 3; p++) {
        pid[p] = fork();
        assert_true(pid[p] >= 0);
        if (pid[p] == 0) {
            bindlog *c = xopen(dir, p == 0 ? BINDLOG_DURABILITY_FULL : BINDLOG_DURABILITY_NORMAL,
                               0);
            if (c == NULL)
                _exit(2);
            char key[32], sid[32];
            static char origin[300];
            memset(origin, 'a' + p, sizeof origin);
            for (int i = 0; i < per; i++) {
                snprintf(key, sizeof key, "r%d-k%d", p, i % 13);
                snprintf(sid, sizeof sid, "r%d-s%d", p, i);
                if (bindlog_bind(c, key, sid, NULL, NULL, origin, sizeof origin, NULL) !=
                    BINDLOG_APPLIED)
                    _exit(3);
            }
            bindlog_close(c);
            _exit(0);
        }
    }
    for (int p = 0; p < 3; p++)
        wait_child(pid[p]);
    bindlog *s = xopen(dir, BINDLOG_DURABILITY_NONE, 1);
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 3 * per);
    assert_int_equal(st.log_records, 3 * per);
    assert_int_equal(st.checkpoint_lsn, 3 * per); /* each close folds what it can */
    assert_clean(s);
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wal_procs__another_process_reads_every_acknowledged_event),
        cmocka_unit_test(wal_procs__the_split_cas_holds_across_processes),
        cmocka_unit_test(wal_procs__statistics_are_the_stores),
        cmocka_unit_test(wal_procs__wait_wakes_another_process),
        cmocka_unit_test(wal_procs__a_writer_dead_with_the_lock_does_not_block),
        cmocka_unit_test(wal_procs__read_only_without_shared_memory_reads_the_log),
        cmocka_unit_test(wal_procs__three_writers_through_a_small_ring),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
