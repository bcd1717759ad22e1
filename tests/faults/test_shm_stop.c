/*
 * test_shm_stop.c -- a process stopped (SIGSTOP) while it holds something
 * the other processes of the store wait for makes them fail with
 * BINDLOG_EBUSY after bindlog_options.lock_timeout_ms, naming its pid and
 * what it holds, and they go on normally once it is continued:
 *   - a writer stopped holding the writers' lock;
 *   - a checkpointer stopped inside its checkpoint (failpoint ckpt.begin,
 *     the checkpointers' lock held) while a writer fills the log;
 *   - a first opener stopped while it rebuilds bindlog.shm (failpoint
 *     shm.init.mid): writable and read-only opens.
 * And bindlog.shm removed while its first opener rebuilds it: the opener's
 * first commit fails with EIO, a newcomer refuses with EBUSY.
 * Linked with bindlog_faults (the failpoints' sleep action).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"
#include "core/backend.h"
#include "core/failpoint.h"
#include "lmdb/walenv.h"
#include "testutil.h"

#define BOUND_MS 300

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bindlog *xopen(const char *dir, int durability, int ro, int *rc_out)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = durability;
    o.read_only = ro;
    o.log_size = (uint64_t)64 << 10;
    o.lock_timeout_ms = BOUND_MS;
    int rc = bindlog_open(&s, dir, &o);
    if (rc_out != NULL)
        *rc_out = rc;
    else if (rc != 0)
        fprintf(stderr, "open %s: %s\n", dir, bindlog_last_error());
    return s;
}

static void arm(const char *spec)
{
    if (spec != NULL)
        setenv("BINDLOG_FAILPOINT", spec, 1);
    else
        unsetenv("BINDLOG_FAILPOINT");
    bl_failpoint_reset();
}

static void say(int fd)
{
    (void)!write(fd, "x", 1);
}
static void hear(int fd)
{
    char c;
    if (read(fd, &c, 1) != 1)
        _exit(20);
}

static void wait_ok(pid_t pid, const char *what)
{
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s failed: status 0x%x", what, status);
}

/* The call failed with EBUSY within the bound (and not much later), and
 * the message names pid and what. */
static int busy_as_expected(int rc, int64_t ms, pid_t pid, const char *what)
{
    char p[32];
    snprintf(p, sizeof p, "process %d ", (int)pid);
    if (rc != BINDLOG_EBUSY || ms < BOUND_MS - 50 || ms > BOUND_MS + 1500 ||
        strstr(bindlog_last_error(), p) == NULL || strstr(bindlog_last_error(), what) == NULL) {
        fprintf(stderr, "expected EBUSY naming %s%s after %d ms; got %d after %lld ms: %s\n", p,
                what, BOUND_MS, rc, (long long)ms, bindlog_last_error());
        return 0;
    }
    printf("EBUSY after %lld ms: %s\n", (long long)ms, bindlog_last_error());
    fflush(stdout);
    return 1;
}

static void assert_clean(const char *dir)
{
    bindlog *s = xopen(dir, BINDLOG_DURABILITY_FULL, 0, NULL);
    bindlog_check_report rep;
    assert_non_null(s);
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    if (rep.problems)
        fail_msg("check: %s", rep.message);
    bindlog_close(s);
}

/* ---- a writer stopped holding the writers' lock ------------------------------ */

static void shm_stop__a_stopped_writer_holding_the_writers_lock(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("stopw");
    int up[2], hgo[2], wgo[2];
    bindlog_close(xopen(dir, BINDLOG_DURABILITY_FULL, 0, NULL));
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(hgo), 0);
    assert_int_equal(pipe(wgo), 0);
    pid_t h = fork();
    assert_true(h >= 0);
    if (h == 0) {
        arm(NULL);
        bindlog *s = xopen(dir, BINDLOG_DURABILITY_FULL, 0, NULL);
        if (s == NULL || bl_wal_lock(s->e) != 0)
            _exit(2);
        say(up[1]);
        hear(hgo[0]);
        bl_wal_unlock(s->e);
        hear(hgo[0]);
        bindlog_close(s);
        _exit(0);
    }
    char c;
    assert_int_equal(read(up[0], &c, 1), 1);
    assert_int_equal(kill(h, SIGSTOP), 0);
    pid_t w = fork();
    assert_true(w >= 0);
    if (w == 0) {
        arm(NULL);
        bindlog *s = xopen(dir, BINDLOG_DURABILITY_FULL, 0, NULL);
        if (s == NULL)
            _exit(2);
        int64_t t0 = now_ms();
        int rc = bindlog_bind(s, "k", "s1", NULL, NULL, NULL, 0, NULL);
        if (!busy_as_expected(rc, now_ms() - t0, h, "writers' lock"))
            _exit(3);
        say(up[1]);
        hear(wgo[0]);
        t0 = now_ms();
        rc = bindlog_bind(s, "k", "s1", NULL, NULL, NULL, 0, NULL);
        if (rc != BINDLOG_APPLIED || now_ms() - t0 > 1000) {
            fprintf(stderr, "after SIGCONT: %d (%s)\n", rc, bindlog_last_error());
            _exit(4);
        }
        bindlog_close(s);
        _exit(0);
    }
    assert_int_equal(read(up[0], &c, 1), 1);
    assert_int_equal(kill(h, SIGCONT), 0);
    say(hgo[1]); /* the holder lets go */
    say(wgo[1]);
    wait_ok(w, "the waiting writer");
    say(hgo[1]);
    wait_ok(h, "the holder");
    assert_clean(dir);
    tu_rmtree(dir);
    free(dir);
}

/* ---- a checkpointer stopped inside its checkpoint ------------------------------ */

static void shm_stop__a_stopped_checkpointer_while_the_log_fills(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("stopc");
    int up[2], cgo[2], wgo[2];
    bindlog_close(xopen(dir, BINDLOG_DURABILITY_FULL, 0, NULL));
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(cgo), 0);
    assert_int_equal(pipe(wgo), 0);
    pid_t c = fork();
    assert_true(c >= 0);
    if (c == 0) {
        setenv("BINDLOG_CHECKPOINT", "manual", 1);
        arm("ckpt.begin:sleep=1500");
        bindlog *s = xopen(dir, BINDLOG_DURABILITY_FULL, 0, NULL);
        uint64_t ck;
        if (s == NULL || bindlog_bind(s, "c", "c1", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
            _exit(2);
        say(up[1]);
        if (bindlog_checkpoint(s, &ck) != 0) /* sleeps inside, then is stopped */
            _exit(3);
        hear(cgo[0]);
        _exit(0); /* without the closing checkpoint (it would sleep again) */
    }
    char x;
    assert_int_equal(read(up[0], &x, 1), 1);
    struct timespec ts = {0, 200000000};
    nanosleep(&ts, NULL); /* inside its checkpoint, the checkpointers' lock held */
    assert_int_equal(kill(c, SIGSTOP), 0);
    pid_t w = fork();
    assert_true(w >= 0);
    if (w == 0) {
        arm(NULL);
        bindlog *s = xopen(dir, BINDLOG_DURABILITY_NONE, 0, NULL);
        if (s == NULL)
            _exit(2);
        int rc = 0;
        unsigned i;
        int64_t t0 = 0;
        for (i = 0; i < 100000; i++) { /* fill the 64 KiB log */
            char key[32], sid[32];
            snprintf(key, sizeof key, "w-%u", i);
            snprintf(sid, sizeof sid, "w-s%u", i);
            t0 = now_ms();
            if ((rc = bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL)) != BINDLOG_APPLIED)
                break;
        }
        if (!busy_as_expected(rc, now_ms() - t0, c, "checkpointers' lock"))
            _exit(3);
        say(up[1]);
        hear(wgo[0]);
        /* once the checkpointer is continued, its checkpoint ends and the
         * log has room again */
        int64_t t1 = now_ms();
        for (;;) {
            char key[32], sid[32];
            snprintf(key, sizeof key, "w-%u", i);
            snprintf(sid, sizeof sid, "w-s%u", i);
            rc = bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL);
            if (rc == BINDLOG_APPLIED)
                break;
            if (rc != BINDLOG_EBUSY || now_ms() - t1 > 5000) {
                fprintf(stderr, "after SIGCONT: %d (%s)\n", rc, bindlog_last_error());
                _exit(4);
            }
        }
        for (unsigned k = 0; k < 2000; k++, i++) { /* and goes on round the ring */
            char key[32], sid[32];
            snprintf(key, sizeof key, "w-%u", i + 1);
            snprintf(sid, sizeof sid, "w-s%u", i + 1);
            if (bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
                _exit(5);
        }
        bindlog_close(s);
        _exit(0);
    }
    assert_int_equal(read(up[0], &x, 1), 1);
    assert_int_equal(kill(c, SIGCONT), 0);
    say(wgo[1]);
    wait_ok(w, "the writer");
    say(cgo[1]);
    wait_ok(c, "the checkpointer");
    assert_clean(dir);
    tu_rmtree(dir);
    free(dir);
}

/* ---- a first opener stopped while rebuilding bindlog.shm --------------------- */

static void shm_stop__a_stopped_first_opener_rebuilding_the_shm(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("stopr");
    char path[4200];
    int rgo[2];
    bindlog_close(xopen(dir, BINDLOG_DURABILITY_FULL, 0, NULL));
    snprintf(path, sizeof path, "%s/%s", dir, BL_SHM_FILE);
    assert_int_equal(pipe(rgo), 0);
    pid_t r = fork();
    assert_true(r >= 0);
    if (r == 0) {
        arm("shm.init.mid:sleep=1000");
        bindlog *s = xopen(dir, BINDLOG_DURABILITY_FULL, 0, NULL);
        if (s == NULL || bindlog_bind(s, "r", "r1", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
            _exit(2);
        hear(rgo[0]);
        bindlog_close(s);
        _exit(0);
    }
    /* wait until it is inside the rebuild (its pid is in the file) */
    int64_t t0 = now_ms();
    for (;;) {
        int32_t pid = 0;
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            if (pread(fd, &pid, sizeof pid, offsetof(bl_shm, init_pid)) != (ssize_t)sizeof pid)
                pid = 0;
            close(fd);
        }
        if (pid == r)
            break;
        assert_true(now_ms() - t0 < 5000);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(kill(r, SIGSTOP), 0);
    for (int ro = 0; ro < 2; ro++) {
        pid_t n = fork();
        assert_true(n >= 0);
        if (n == 0) {
            arm(NULL);
            int rc;
            int64_t t1 = now_ms();
            bindlog *s = xopen(dir, BINDLOG_DURABILITY_FULL, ro, &rc);
            if (s != NULL || !busy_as_expected(rc, now_ms() - t1, r, "rebuilding"))
                _exit(3);
            _exit(0);
        }
        wait_ok(n, ro ? "the read-only newcomer" : "the newcomer");
    }
    assert_int_equal(kill(r, SIGCONT), 0);
    pid_t n = fork();
    assert_true(n >= 0);
    if (n == 0) {
        arm(NULL);
        bindlog *s = NULL;
        int64_t t1 = now_ms();
        int rc = BINDLOG_EBUSY;
        while (s == NULL && rc == BINDLOG_EBUSY && now_ms() - t1 < 5000)
            s = xopen(dir, BINDLOG_DURABILITY_FULL, 0, &rc);
        bindlog_binding b;
        if (s == NULL || bindlog_bind(s, "n", "n1", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
            _exit(4);
        /* the rebuilder's write, once it went on, is there too */
        for (int64_t t2 = now_ms(); bindlog_get(s, "r", &b) != 0;) {
            if (now_ms() - t2 > 5000)
                _exit(5);
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
        bindlog_close(s);
        _exit(0);
    }
    wait_ok(n, "the newcomer after SIGCONT");
    say(rgo[1]);
    wait_ok(r, "the rebuilder");
    assert_clean(dir);
    tu_rmtree(dir);
    free(dir);
}

/* ---- bindlog.shm removed while its first opener rebuilds it ------------------ */

/* The rebuilder finishes its open on the removed file and its first
 * commit fails with EIO naming bindlog.shm; a newcomer meanwhile refuses
 * (EBUSY) rather than build a second file; once the rebuilder closed, the
 * store opens and checks. */
static void shm_stop__shm_removed_during_its_rebuild(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("stopgone");
    char path[4200];
    int rgo[2], up[2];
    bindlog_close(xopen(dir, BINDLOG_DURABILITY_FULL, 0, NULL));
    snprintf(path, sizeof path, "%s/%s", dir, BL_SHM_FILE);
    assert_int_equal(pipe(rgo), 0);
    assert_int_equal(pipe(up), 0);
    pid_t r = fork();
    assert_true(r >= 0);
    if (r == 0) {
        arm("shm.init.mid:sleep=500");
        bindlog *s = xopen(dir, BINDLOG_DURABILITY_FULL, 0, NULL);
        bindlog_binding b;
        if (s == NULL)
            _exit(2);
        say(up[1]); /* open, on a file that was removed meanwhile */
        hear(rgo[0]);
        int rc = bindlog_bind(s, "r", "r1", NULL, NULL, NULL, 0, NULL);
        if (rc != BINDLOG_EIO || strstr(bindlog_last_error(), BL_SHM_FILE) == NULL) {
            fprintf(stderr, "rebuilder's commit: %d (%s)\n", rc, bindlog_last_error());
            _exit(3);
        }
        if (bindlog_get(s, "r", &b) != BINDLOG_ENOTFOUND)
            _exit(4); /* reads go on; nothing was written */
        hear(rgo[0]);
        bindlog_close(s);
        _exit(0);
    }
    int64_t t0 = now_ms();
    for (;;) { /* inside the rebuild */
        int32_t pid = 0;
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            if (pread(fd, &pid, sizeof pid, offsetof(bl_shm, init_pid)) != (ssize_t)sizeof pid)
                pid = 0;
            close(fd);
        }
        if (pid == r)
            break;
        assert_true(now_ms() - t0 < 5000);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(unlink(path), 0);
    char c;
    assert_int_equal(read(up[0], &c, 1), 1); /* its open is done */
    pid_t n = fork();
    assert_true(n >= 0);
    if (n == 0) {
        arm(NULL);
        int rc;
        bindlog *s = xopen(dir, BINDLOG_DURABILITY_FULL, 0, &rc);
        if (s != NULL || rc != BINDLOG_EBUSY || strstr(bindlog_last_error(), "missing") == NULL) {
            fprintf(stderr, "newcomer: %d (%s)\n", rc, bindlog_last_error());
            _exit(3);
        }
        _exit(0);
    }
    wait_ok(n, "the newcomer");
    say(rgo[1]);
    say(rgo[1]);
    wait_ok(r, "the rebuilder");
    assert_clean(dir);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shm_stop__a_stopped_writer_holding_the_writers_lock),
        cmocka_unit_test(shm_stop__a_stopped_checkpointer_while_the_log_fills),
        cmocka_unit_test(shm_stop__a_stopped_first_opener_rebuilding_the_shm),
        cmocka_unit_test(shm_stop__shm_removed_during_its_rebuild),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
