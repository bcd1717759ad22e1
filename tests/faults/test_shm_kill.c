/*
 * test_shm_kill.c -- a process SIGKILLed at every store to bindlog.shm
 * (the failpoints "shm.<field>.before/.mid/.after" of src/lmdb/shm.c and
 * walenv.c) never hangs nor corrupts the processes that share the store.
 *
 * Each round: a survivor process opens the store and keeps writing (FULL),
 * reading and waiting on it, acknowledging each APPLIED bind on a pipe; a
 * victim process opens the same store and writes, checkpoints and waits
 * with BINDLOG_FAILPOINT=<point>:kill:<n> until it dies there.  Then:
 *   - the survivor acknowledges a new write within a second of the death
 *     (else the round counts as a hang);
 *   - after the survivor closed, every acknowledged bind of both is
 *     readable and bindlog_check finds nothing.
 * The shm.durable.* points are hit by flushes: there the victim runs in
 * FULL.  The shm.init.* points are hit only by a process that rebuilds the file:
 * there the victim opens first and dies while building it, and the
 * survivor must open and write within a second.
 *
 * Rounds per point: 2 (the n-th hit varies with the round), or
 * BINDLOG_SHM_KILL_ROUNDS for a longer run by hand.  The totals (steps x
 * rounds, hangs, lost) go to stdout.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"
#include "core/failpoint.h"
#include "testutil.h"

static const char *const points[] = {
    "shm.end.before",     "shm.end.mid",       "shm.end.after",      "shm.ckpt.before",
    "shm.ckpt.mid",       "shm.ckpt.after",    "shm.vis.before",     "shm.vis.after",
    "shm.word.before",    "shm.word.after",    "shm.wake.before",    "shm.wake.after",
    "shm.owner.before",   "shm.owner.after",   "shm.waiters.before", "shm.waiters.after",
    "shm.durable.before", "shm.durable.after", "shm.init.before",    "shm.init.mid",
    "shm.init.after",
};
#define NPOINTS (sizeof points / sizeof points[0])

static unsigned long rounds_run, hangs, lost, not_reached;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bindlog *xopen(const char *dir, int durability)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = durability;
    o.log_size = (uint64_t)64 << 10; /* the ring wraps, checkpoints run often */
    o.lock_timeout_ms = 5000;
    if (bindlog_open(&s, dir, &o) != 0) {
        fprintf(stderr, "open %s: %s\n", dir, bindlog_last_error());
        return NULL;
    }
    return s;
}

/* Bind "<tag>-<i>" for i = 0.. until stop_fd is readable (or n binds),
 * acknowledging each APPLIED i on ack_fd.  The victim also checkpoints
 * and waits.  Exits 0, or 2.. on an error (reported on stderr). */
static void writer(const char *dir, char tag, int durability, int ack_fd, int stop_fd, int victim)
{
    bindlog *s = xopen(dir, durability);
    if (s == NULL)
        _exit(2);
    for (unsigned i = 0; i < (victim ? 3000u : 1000000u); i++) {
        char key[32], sid[32];
        snprintf(key, sizeof key, "%c-%u", tag, i);
        snprintf(sid, sizeof sid, "%c-s%u", tag, i);
        int rc = bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL);
        if (rc != BINDLOG_APPLIED) {
            fprintf(stderr, "%c: bind %u: %s (%s)\n", tag, i, bindlog_strerror(rc),
                    bindlog_last_error());
            _exit(3);
        }
        if (write(ack_fd, &i, sizeof i) != (ssize_t)sizeof i)
            _exit(4);
        bindlog_binding b;
        if (bindlog_get(s, key, &b) != 0 || strcmp(b.session_id, sid) != 0) {
            fprintf(stderr, "%c: get %u failed\n", tag, i);
            _exit(5);
        }
        uint64_t head = 0;
        if (bindlog_wait(s, b.lsn, 1, &head) != 0)
            _exit(6);
        if (victim && i % 7 == 6) {
            uint64_t ck;
            if (bindlog_checkpoint(s, &ck) != 0) {
                fprintf(stderr, "%c: checkpoint: %s\n", tag, bindlog_last_error());
                _exit(7);
            }
        }
        struct pollfd p = {stop_fd, POLLIN, 0};
        if (stop_fd >= 0 && poll(&p, 1, 0) == 1)
            break;
    }
    bindlog_close(s);
    _exit(0);
}

/* Acknowledgements so far on fd (non-blocking): the highest i + 1. */
static unsigned drain(int fd, unsigned have)
{
    unsigned i;
    while (read(fd, &i, sizeof i) == (ssize_t)sizeof i)
        if (i + 1 > have)
            have = i + 1;
    return have;
}

static pid_t spawn(const char *dir, char tag, int durability, int ack[2], int stop[2],
                   const char *fp, int victim)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ack[0]);
        if (stop != NULL)
            close(stop[1]);
        if (fp != NULL)
            setenv("BINDLOG_FAILPOINT", fp, 1);
        else
            unsetenv("BINDLOG_FAILPOINT");
        bl_failpoint_reset();
        writer(dir, tag, durability, ack[1], stop != NULL ? stop[0] : -1, victim);
    }
    close(ack[1]);
    fcntl(ack[0], F_SETFL, O_NONBLOCK);
    return pid;
}

/* Wait until fd has acknowledged more than `have`, at most ms.  The new
 * count, or `have` on a timeout. */
static unsigned wait_more(int fd, unsigned have, int ms)
{
    int64_t end = now_ms() + ms;
    unsigned n = have;
    while ((n = drain(fd, n)) == have && now_ms() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, 20);
    }
    return n;
}

static void verify(const char *dir, char tag, unsigned n)
{
    bindlog *s = xopen(dir, BINDLOG_DURABILITY_FULL);
    assert_non_null(s);
    for (unsigned i = 0; i < n; i++) {
        char key[32], sid[32];
        bindlog_binding b;
        snprintf(key, sizeof key, "%c-%u", tag, i);
        snprintf(sid, sizeof sid, "%c-s%u", tag, i);
        if (bindlog_get(s, key, &b) != 0 || strcmp(b.session_id, sid) != 0)
            lost++;
    }
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    if (rep.problems)
        fail_msg("check: %s", rep.message);
    bindlog_close(s);
}

static void one_round(const char *point, unsigned round)
{
    char *dir = tu_mkdtemp("shmkill");
    char fp[96];
    int init = strncmp(point, "shm.init.", 9) == 0;
    unsigned hit = init ? 1 : 1 + (round * 5) % 23;
    int vdur = (int)((round + 2) % 3); /* NONE, FULL, NORMAL in turn */
    if (strncmp(point, "shm.word.", 9) == 0)
        vdur = BINDLOG_DURABILITY_NONE; /* its checkpoints set ckpt_unsynced */
    if (strncmp(point, "shm.durable.", 12) == 0)
        vdur = BINDLOG_DURABILITY_FULL; /* its flushes raise the durable point */
    int sack[2], vack[2], stop[2], status;
    pid_t sv = -1, vc;
    unsigned s_have = 0, v_have = 0;

    snprintf(fp, sizeof fp, "%s:kill:%u", point, hit);
    bindlog_close(xopen(dir, BINDLOG_DURABILITY_FULL)); /* made before any fork */
    assert_int_equal(pipe(sack), 0);
    assert_int_equal(pipe(vack), 0);
    assert_int_equal(pipe(stop), 0);
    if (!init) {
        sv = spawn(dir, 's', BINDLOG_DURABILITY_FULL, sack, stop, NULL, 0);
        s_have = wait_more(sack[0], 0, 10000);
        assert_true(s_have > 0);
    }
    vc = spawn(dir, 'v', vdur, vack, NULL, fp, 1);
    assert_int_equal(waitpid(vc, &status, 0), vc);
    v_have = drain(vack[0], 0);
    rounds_run++;
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        not_reached++; /* the victim ran out of work before the n-th hit */
        fprintf(stderr, "%s: the victim was not killed (status 0x%x)\n", fp, status);
    }
    if (init) {
        sv = spawn(dir, 's', BINDLOG_DURABILITY_FULL, sack, stop, NULL, 0);
        s_have = 0;
    }
    s_have = drain(sack[0], s_have);
    unsigned later = wait_more(sack[0], s_have, 1000);
    if (later == s_have) {
        hangs++;
        fprintf(stderr, "%s: the survivor made no progress within a second\n", fp);
    }
    close(stop[1]);
    int sst;
    assert_int_equal(waitpid(sv, &sst, 0), sv);
    if (!WIFEXITED(sst) || WEXITSTATUS(sst) != 0)
        fail_msg("%s: the survivor failed (status 0x%x)", fp, sst);
    s_have = drain(sack[0], later);
    close(sack[0]);
    close(vack[0]);
    close(stop[0]);
    verify(dir, 's', s_have);
    verify(dir, 'v', v_have);
    tu_rmtree(dir);
    free(dir);
}

static void shm_kill__every_store_to_the_shared_memory(void **state)
{
    (void)state;
    const char *r = getenv("BINDLOG_SHM_KILL_ROUNDS");
    unsigned rounds = r != NULL && atoi(r) > 0 ? (unsigned)atoi(r) : 2;
    int64_t t0 = now_ms();
    for (size_t p = 0; p < NPOINTS; p++)
        for (unsigned k = 0; k < rounds; k++)
            one_round(points[p], k);
    printf("shm kill: %zu steps x %u rounds = %lu kills, %lu not reached, hangs %lu, lost %lu "
           "(%.1f s)\n",
           NPOINTS, rounds, rounds_run, not_reached, hangs, lost, (double)(now_ms() - t0) / 1000.0);
    assert_int_equal(hangs, 0);
    assert_int_equal(lost, 0);
    assert_int_equal(not_reached, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shm_kill__every_store_to_the_shared_memory),
    };
    unsetenv("BINDLOG_CHECKPOINT"); /* the background checkpointers run */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
