/*
 * test_world.c -- the world lock (src/lmdb/shm.c): the lock on data.mdb
 * that every process holds while it has a store open, and that decides
 * which opener is alone and rebuilds bindlog.shm.  It must stay held for
 * as long as the handle is open, whatever else the process does with
 * data.mdb, or a second process rebuilds the shared file under the first:
 * two writer worlds, each with its own writers' lock and written end.
 *
 *  - a process that opens and closes data.mdb on its own (a check's, a
 *    backup's or the CLI's descriptor), opens a second handle, or runs a
 *    check, keeps the lock: a newcomer attaches instead of rebuilding;
 *  - processes that open, write and close at the same time never rebuild
 *    the file under one another, and every acknowledged bind survives.
 *
 * The content's builder is recorded in the file (init_pid): a process that
 * finds its own pid there after attaching to a live store rebuilt it.
 *
 * Racing opens: 4 processes x 25 in CI; BINDLOG_WORLD_ROUNDS=N for more.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindlog.h"
#include "core/backend.h"
#include "lmdb/store.h"
#include "lmdb/walenv.h"
#include "platform/platform.h"
#include "testutil.h"

/* ThreadSanitizer kills a child of a threaded parent that starts a thread,
 * and its runtime is not fork-safe: a child forked while the parent's
 * checkpointer runs can wait forever on the runtime's own lock (seen here,
 * and in test_fork.c under ASan).  These cases fork from a process whose
 * store is open, so under TSan and ASan they are skipped (TU_FORK_SANITIZED,
 * testutil.h; an ASan child hung in SizeClassAllocator64's mutex here); the
 * plain and the portable builds run them. */
#ifdef TU_FORK_SANITIZED
#define FORK_UNSAFE 1
#endif

static void skip_if_fork_unsafe(void)
{
#ifdef FORK_UNSAFE
    skip();
#endif
}

static bindlog *xopen(const char *dir, int timeout_ms)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = BINDLOG_DURABILITY_NORMAL;
    o.lock_timeout_ms = timeout_ms;
    if (bindlog_open(&s, dir, &o) != 0) {
        fprintf(stderr, "open %s: %s\n", dir, bindlog_last_error());
        return NULL;
    }
    return s;
}

/* The builder of the shared file this handle maps. */
static int32_t builder(bindlog *s) { return atomic_load(&s->e->wal->shm.m->init_pid); }

static void bind_one(bindlog *s, const char *key, const char *sid)
{
    int rc = bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL);
    if (rc != BINDLOG_APPLIED)
        fail_msg("bind %s: %s (%s)", key, bindlog_strerror(rc), bindlog_last_error());
}

static int exit_code(pid_t pid)
{
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- what a process does with data.mdb while it has the store open --------- */

enum { BY_OWN_DESCRIPTOR, BY_SECOND_HANDLE, BY_CHECK, WAYS };
static const char *const way_name[] = {"its own descriptor of data.mdb opened and closed",
                                       "a second handle opened and closed",
                                       "a check run"};

static void touch_data_file(const char *dir, bindlog *s, int way)
{
    char path[4096];
    if (way == BY_OWN_DESCRIPTOR) {
        snprintf(path, sizeof path, "%s/data.mdb", dir);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        char b[16];
        assert_int_equal(pread(fd, b, sizeof b, 0), (ssize_t)sizeof b);
        assert_int_equal(close(fd), 0);
    } else if (way == BY_SECOND_HANDLE) {
        bindlog *s2 = xopen(dir, 0);
        assert_non_null(s2);
        bind_one(s2, "second", "second-s");
        bindlog_close(s2);
    } else {
        bindlog_check_report rep;
        assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
        assert_int_equal(rep.problems, 0);
    }
}

/* A newcomer process opens the store while this one has it open and has
 * touched data.mdb: it must attach (the builder is this process), write,
 * and leave the file as it was.  Exit 0; 1 when it rebuilt the file. */
static void newcomer(const char *dir, pid_t parent)
{
    bindlog *s = xopen(dir, 2000);
    if (s == NULL)
        _exit(2);
    int32_t b = builder(s);
    if (b != (int32_t)parent) {
        fprintf(stderr, "the newcomer %d found the file built by %d, not by %d: it rebuilt it\n",
                (int)getpid(), (int)b, (int)parent);
        _exit(1);
    }
    if (bindlog_bind(s, "newcomer", "newcomer-s", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED) {
        fprintf(stderr, "newcomer: bind: %s\n", bindlog_last_error());
        _exit(3);
    }
    bindlog_close(s);
    _exit(0);
}

static void world__touching_data_mdb_keeps_the_world_lock(void **state)
{
    (void)state;
    skip_if_fork_unsafe();
    for (int way = 0; way < WAYS; way++) {
        char *dir = tu_mkdtemp("world");
        bindlog *s = xopen(dir, 0);
        assert_non_null(s);
        assert_int_equal(builder(s), (int32_t)getpid());
        bind_one(s, "first", "first-s");
        touch_data_file(dir, s, way);

        fflush(NULL); /* before the fork */
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            newcomer(dir, getppid());
        int code = exit_code(pid);
        if (code != 0)
            fail_msg("%s: the newcomer exited with %d (1: it believed it was alone and rebuilt "
                     "bindlog.shm under a live writer)",
                     way_name[way], code);
        /* this process's world is the newcomer's: same builder, its bind seen */
        assert_int_equal(builder(s), (int32_t)getpid());
        bindlog_binding b;
        assert_int_equal(bindlog_get(s, "newcomer", &b), 0);
        assert_string_equal(b.session_id, "newcomer-s");
        bind_one(s, "last", "last-s");
        bindlog_stats st;
        assert_int_equal(bindlog_stats_get(s, &st), 0);
        assert_int_equal(st.head_lsn, way == BY_SECOND_HANDLE ? 4 : 3);
        bindlog_close(s);
        printf("%s: the newcomer attached\n", way_name[way]);
        tu_rmtree(dir);
        free(dir);
    }
}

/* ---- racing opens ------------------------------------------------------------ */

/* Open, bind, close, `rounds` times.  While open, the file's builder must
 * not change (nobody rebuilds under an attached process).  Writes the
 * number of acknowledged binds on `out`.  Exit 0, or 1 on a rebuild under
 * it, 2 and more on other failures. */
static void racer(const char *dir, int id, int rounds, int out)
{
    int done = 0;
    for (int r = 0; r < rounds; r++) {
        bindlog *s = xopen(dir, 20000);
        if (s == NULL)
            _exit(2);
        int32_t b0 = builder(s);
        char key[32], sid[32];
        snprintf(key, sizeof key, "r%d-%d", id, r);
        snprintf(sid, sizeof sid, "r%d-s%d", id, r);
        int rc = bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL);
        if (rc != BINDLOG_APPLIED) {
            fprintf(stderr, "racer %d: bind: %s (%s)\n", id, bindlog_strerror(rc),
                    bindlog_last_error());
            _exit(3);
        }
        done++;
        if (write(out, &done, sizeof done) != (ssize_t)sizeof done)
            _exit(4);
        if (builder(s) != b0) {
            fprintf(stderr, "racer %d: bindlog.shm was rebuilt by %d while %d had it open\n", id,
                    (int)builder(s), (int)getpid());
            _exit(1);
        }
        bindlog_close(s);
    }
    _exit(0);
}

static void world__racing_opens_never_rebuild_under_an_attached_process(void **state)
{
    (void)state;
    skip_if_fork_unsafe();
    enum { RACERS = 4 };
    const char *env = getenv("BINDLOG_WORLD_ROUNDS");
    int rounds = env != NULL && atoi(env) > 0 ? atoi(env) : 25;
    char *dir = tu_mkdtemp("worldrace");
    pid_t pid[RACERS];
    int pipes[RACERS][2];

    bindlog_close(xopen(dir, 0)); /* made, and nobody attached */
    fflush(NULL);
    for (int i = 0; i < RACERS; i++) {
        assert_int_equal(pipe(pipes[i]), 0);
        pid[i] = fork();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0) {
            close(pipes[i][0]);
            racer(dir, i, rounds, pipes[i][1]);
        }
        close(pipes[i][1]);
    }
    int failed = 0, acked[RACERS];
    for (int i = 0; i < RACERS; i++) {
        int code = exit_code(pid[i]), n;
        acked[i] = 0;
        while (read(pipes[i][0], &n, sizeof n) == (ssize_t)sizeof n)
            acked[i] = n;
        close(pipes[i][0]);
        if (code != 0) {
            fprintf(stderr, "racer %d exited with %d after %d binds\n", i, code, acked[i]);
            failed++;
        }
    }
    bindlog *s = xopen(dir, 0);
    assert_non_null(s);
    for (int i = 0; i < RACERS; i++)
        for (int r = 0; r < acked[i]; r++) {
            char key[32], sid[32];
            bindlog_binding b;
            snprintf(key, sizeof key, "r%d-%d", i, r);
            snprintf(sid, sizeof sid, "r%d-s%d", i, r);
            if (bindlog_get(s, key, &b) != 0 || strcmp(b.session_id, sid) != 0)
                fail_msg("the acknowledged bind %s is lost", key);
        }
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    if (rep.problems)
        fail_msg("check: %s", rep.message);
    bindlog_close(s);
    printf("%d processes x %d opens, binds and closes: %d failed, every acknowledged bind "
           "there, check clean\n",
           RACERS, rounds, failed);
    assert_int_equal(failed, 0);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(world__touching_data_mdb_keeps_the_world_lock),
        cmocka_unit_test(world__racing_opens_never_rebuild_under_an_attached_process),
    };
    printf("platform layer: %s\n", bl_plat_name());
    fflush(stdout);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
