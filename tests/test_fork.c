/*
 * test_fork.c -- a handle belongs to the process that opened it.
 *
 * In a child forked with a store open, every call on the parent's handle
 * or iterator is BINDLOG_EFORK with a message naming both processes, and
 * touches nothing of the parent's: closing them there leaves the parent's
 * LMDB reader slots, locks and files alone, and the parent goes on writing
 * durably.  The child may open the same store itself (an environment of
 * its own, not the parent's from the registry) and write; the parent sees
 * it.  A fork while another thread of the parent writes leaves the child
 * nothing held (the registry's lock among them).
 *
 * The children report by exit status: cmocka's checks longjmp, which a
 * child must not do into the parent's copy of the runner.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindlog.h"
#include "core/backend.h"
#include "lmdb/store.h"
#include "lmdb/walenv.h"
#include "testutil.h"

static bindlog *xopen(const char *dir)
{
    bindlog *s = NULL;
    int rc = bindlog_open(&s, dir, NULL); /* FULL */
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

/* The sanitizers' allocators are not fork-safe (TU_FORK_SANITIZED,
 * testutil.h: a child stuck in SizeClassAllocator64's mutex, its stack
 * through commit.c's arena_alloc): the test of a fork during writes runs
 * without sanitizers only.  And ThreadSanitizer kills a child of a
 * threaded parent that starts a thread: there the children open their
 * stores without the background checkpointer (BINDLOG_CHECKPOINT=manual). */

/* Under sanitizers (TU_FORK_SANITIZED), the parent's background thread
 * (its page walk, its checkpoints, the zero-fill of a new log, each of
 * which allocates) is stopped and joined before a fork, a parent's handle
 * open across it or not: a child forked while that thread is inside the
 * sanitizer's malloc waits forever on the runtime's lock (seen under ASan
 * in CI: the child's own open ran into its 30 s alarm).  The parent's next
 * commit starts the thread again. */
static void quiet_for_fork(bindlog *s)
{
#ifdef TU_FORK_SANITIZED
    bl_ckpt_stop(s->e);
#else
    (void)s;
#endif
}

/* ---- in the child: checks that count instead of longjmp ------------------- */

static int child_failures;
static long parent_pid;

/* rc must be BINDLOG_EFORK, and the message "<call...>: the handle was
 * opened by process P and this is process C, forked from it: ..." */
static void expect_efork(const char *call, int rc)
{
    char want[160];
    const char *msg = bindlog_last_error();
    snprintf(want, sizeof want, "the handle was opened by process %ld and this is process %ld, "
                                "forked from it",
             parent_pid, (long)getpid());
    if (rc != BINDLOG_EFORK || strncmp(msg, call, strlen(call)) != 0 || strstr(msg, want) == NULL ||
        strstr(msg, "Open the store in this process") == NULL) {
        fprintf(stderr, "child: %s returned %d (%s), message \"%s\"\n", call, rc,
                bindlog_code_name(rc), msg);
        child_failures++;
    }
}

/* The LMDB read snapshots of this process (pid) that are live in the
 * store's reader table: mdb_reader_list prints "pid thread txnid" lines,
 * txnid "-" for a free slot. */
typedef struct readers {
    long pid;
    int live;
} readers;

static int count_reader(const char *line, void *ctx)
{
    readers *r = ctx;
    long pid;
    char txn[32];
    if (sscanf(line, " %ld %*s %31s", &pid, txn) == 2 && pid == r->pid && strcmp(txn, "-") != 0)
        r->live++;
    return 0;
}

static int live_readers(bindlog *s, long pid)
{
    readers r = {pid, 0};
    mdb_reader_list(s->e->env, count_reader, &r);
    return r.live;
}

static void write_n(bindlog *s, const char *prefix, int n)
{
    char key[64], sid[64];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "agent:main:%s:%d", prefix, i);
        snprintf(sid, sizeof sid, "%s-s%d", prefix, i);
        assert_int_equal(bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    }
}

static uint64_t head_of(bindlog *s)
{
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    return st.head_lsn;
}

/* ---- the tests -------------------------------------------------------------- */

static void fork__every_call_on_a_parent_handle_in_the_child_is_efork(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("fork");
    bindlog *s = xopen(dir);
    assert_non_null(s);
    write_n(s, "before", 5);
    bindlog_iter *it = NULL;
    assert_int_equal(bindlog_log_iter(s, 1, UINT64_MAX, &it), 0); /* a snapshot held across the fork */
    bindlog_record rec;
    assert_int_equal(bindlog_iter_next_record(it, &rec), 1);
    int readers_before = live_readers(s, (long)getpid());
    assert_true(readers_before >= 1);
    char stream[4096];
    snprintf(stream, sizeof stream, "%s/export.stream", dir);

    parent_pid = (long)getpid();
    quiet_for_fork(s);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(30); /* a deadlock fails the test instead of hanging it */
        bindlog_result res;
        bindlog_binding b;
        bindlog_session sess;
        bindlog_stats st;
        bindlog_check_report rep;
        unsigned char digest[BINDLOG_DIGEST_SIZE];
        uint64_t u = 0, u2 = 0;
        bindlog_iter *it2 = NULL;
        bindlog_event ev = {BINDLOG_EVENT_BIND, "agent:main:c", "c-1", NULL, 0, NULL, NULL, 0};
        bindlog_import_entry ent = {"agent:main:e", "e-1", 0, NULL, 0};
        int code = 0, fd = open(stream, O_WRONLY | O_CREAT | O_TRUNC, 0600);

        expect_efork("bind agent:main:c", bindlog_bind(s, "agent:main:c", "c-1", NULL, NULL, NULL,
                                                       0, &res));
        expect_efork("new_session agent:main:before:0",
                     bindlog_new_session(s, "agent:main:before:0", "c-2", NULL, NULL, 0, &res));
        expect_efork("split agent:main:before:1",
                     bindlog_split(s, "agent:main:before:1", "before-s1", "c-3",
                                   BINDLOG_ANY_GENERATION, NULL, 0, &res));
        expect_efork("invalidate agent:main:before:2",
                     bindlog_invalidate(s, "agent:main:before:2", NULL, &res));
        expect_efork("unbind agent:main:before:3", bindlog_unbind(s, "agent:main:before:3", NULL,
                                                                  &res));
        expect_efork("apply_batch", bindlog_apply_batch(s, &ev, 1, &res, NULL));
        /* even a bad argument: the handle is refused first */
        expect_efork("bind", bindlog_bind(s, "", "x", NULL, NULL, NULL, 0, &res));
        expect_efork("get agent:main:before:0", bindlog_get(s, "agent:main:before:0", &b));
        expect_efork("session_get before-s0", bindlog_session_get(s, "before-s0", &sess, NULL, 0));
        expect_efork("log_iter", bindlog_log_iter(s, 1, UINT64_MAX, &it2));
        expect_efork("history_iter", bindlog_history_iter(s, "agent:main:before:0", &it2));
        expect_efork("bindings_iter", bindlog_bindings_iter(s, &it2));
        expect_efork("sessions_iter", bindlog_sessions_iter(s, &it2));
        expect_efork("children_iter", bindlog_children_iter(s, "before-s0", &it2));
        expect_efork("ancestors_iter", bindlog_ancestors_iter(s, "before-s0", &it2));
        if (it2 != NULL) {
            fprintf(stderr, "child: an iterator was opened\n");
            child_failures++;
        }
        expect_efork("iter_next_record", bindlog_iter_next_record(it, &rec));
        expect_efork("stats_get", bindlog_stats_get(s, &st));
        expect_efork("digest", bindlog_digest(s, digest, &u));
        expect_efork("check", bindlog_check(s, &rep, NULL, NULL));
        expect_efork("wait", bindlog_wait(s, 0, 0, &u));
        expect_efork("checkpoint", bindlog_checkpoint(s, &u));
        expect_efork("lsn_at_time", bindlog_lsn_at_time(s, 0, &u));
        expect_efork("compact", bindlog_compact(s, 2, &u, NULL, NULL));
        expect_efork("export", bindlog_export(s, 1, fd, &u, NULL, NULL));
        expect_efork("import", bindlog_import(s, fd, &u, &u2, NULL, NULL));
        expect_efork("import_entries", bindlog_import_entries(s, &ent, 1, &res, &code, NULL,
                                                              NULL));
        /* the replay's directory is not even made */
        char out[4200];
        snprintf(out, sizeof out, "%s/replayed", dir);
        expect_efork("replay into", bindlog_replay(s, out, 0, 0, digest, &u, NULL, NULL));
        if (access(out, F_OK) == 0) {
            fprintf(stderr, "child: replay made %s\n", out);
            child_failures++;
        }
        if (strcmp(bindlog_path(s), dir) != 0)
            child_failures++;
        /* closing here frees the child's memory and nothing of the parent's */
        bindlog_iter_close(it);
        bindlog_close(s);
        close(fd);
        _exit(child_failures == 0 ? 0 : 1);
    }
    wait_child(pid);

    /* the parent: its snapshot is still registered in LMDB's reader table
     * (an abort or an env close in the child would have freed the slot),
     * its iterator reads on, and it writes durably */
    assert_int_equal(live_readers(s, (long)getpid()), readers_before);
    int n = 1;
    while (bindlog_iter_next_record(it, &rec) == 1)
        n++;
    assert_int_equal(n, 5);
    bindlog_iter_close(it);
    write_n(s, "after", 20);
    assert_int_equal(bindlog_checkpoint(s, NULL), 0);
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 0);
    bindlog_close(s);
    s = xopen(dir);
    assert_non_null(s);
    assert_int_equal(head_of(s), 25);
    bindlog_binding b;
    assert_int_equal(bindlog_get(s, "agent:main:c", &b), BINDLOG_ENOTFOUND);
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

static void fork__the_child_opens_the_store_itself_and_the_parent_sees_it(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("forkopen");
    bindlog *s = xopen(dir);
    assert_non_null(s);
    write_n(s, "parent", 3);

    parent_pid = (long)getpid();
    quiet_for_fork(s);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(30);
#ifdef TU_FORK_SANITIZED
        setenv("BINDLOG_CHECKPOINT", "manual", 1);
#endif
        bindlog *mine = NULL;
        bindlog_result res;
        /* a fresh environment, though the parent's for this directory is
         * still in the child's memory (and its handle not even closed) */
        if (bindlog_open(&mine, dir, NULL) != 0) {
            fprintf(stderr, "child: open: %s\n", bindlog_last_error());
            _exit(1);
        }
        if (mine->e == s->e) {
            fprintf(stderr, "child: got the parent's environment\n");
            _exit(1);
        }
        int rc = bindlog_bind(mine, "agent:main:child", "child-s1", "", NULL, NULL, 0, &res);
        if (rc != BINDLOG_APPLIED || res.lsn != 4) {
            fprintf(stderr, "child: bind %d lsn %llu: %s\n", rc, (unsigned long long)res.lsn,
                    bindlog_last_error());
            _exit(1);
        }
        rc = bindlog_split(mine, "agent:main:parent:0", "parent-s0", "child-s2",
                           BINDLOG_ANY_GENERATION, NULL, 0, &res);
        if (rc != BINDLOG_APPLIED) {
            fprintf(stderr, "child: split %d: %s\n", rc, bindlog_last_error());
            _exit(1);
        }
        bindlog_binding bb;
        expect_efork("get agent:main:child", bindlog_get(s, "agent:main:child", &bb));
        bindlog_close(mine);
        bindlog_close(s);
        _exit(child_failures == 0 ? 0 : 1);
    }
    wait_child(pid);

    /* the parent's handle sees the child's events, and goes on from them */
    bindlog_binding b;
    assert_int_equal(bindlog_get(s, "agent:main:child", &b), 0);
    assert_string_equal(b.session_id, "child-s1");
    assert_int_equal(bindlog_get(s, "agent:main:parent:0", &b), 0);
    assert_string_equal(b.session_id, "child-s2");
    bindlog_result res;
    assert_int_equal(bindlog_split(s, "agent:main:child", "child-s1", "parent-s9",
                                   BINDLOG_ANY_GENERATION, NULL, 0, &res),
                     BINDLOG_APPLIED);
    assert_int_equal(res.lsn, 6);
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 0);
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

/* A writer thread of the parent, busy while the main thread forks. */
typedef struct busy {
    bindlog *s;
    atomic_int stop;
    int written;
} busy;

static void *busy_writer(void *arg)
{
    busy *b = arg;
    char key[64], sid[64];
    while (!atomic_load(&b->stop)) {
        snprintf(key, sizeof key, "agent:main:busy:%d", b->written % 7);
        snprintf(sid, sizeof sid, "busy-%d", b->written);
        if (bindlog_bind(b->s, key, sid, NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
            break;
        b->written++;
    }
    return NULL;
}

static void fork__a_fork_while_another_thread_writes_leaves_the_child_nothing_held(void **state)
{
    (void)state;
#ifdef TU_FORK_SANITIZED
    skip();
#endif
    enum { FORKS = 6 };
    char *dir = tu_mkdtemp("forkbusy");
    busy b = {xopen(dir), 0, 0};
    assert_non_null(b.s);
    /* a second store, opened and closed by the children too: the registry
     * is walked with other environments in it */
    char *other = tu_mkdtemp("forkother");
    bindlog *o = xopen(other);
    assert_non_null(o);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, busy_writer, &b), 0);

    for (int i = 0; i < FORKS; i++) {
        usleep(2000 + 1500 * i); /* land at different points of the writer's cycle */
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            alarm(30);
            bindlog *mine = NULL;
            char key[64], sid[64];
            snprintf(key, sizeof key, "agent:main:forked:%d", i);
            snprintf(sid, sizeof sid, "forked-%d", i);
            if (bindlog_open(&mine, dir, NULL) != 0 ||
                bindlog_bind(mine, key, sid, "", NULL, NULL, 0, NULL) != BINDLOG_APPLIED) {
                fprintf(stderr, "child %d: %s\n", i, bindlog_last_error());
                _exit(1);
            }
            bindlog_close(mine);
            if (bindlog_open(&mine, other, NULL) != 0) {
                fprintf(stderr, "child %d: %s\n", i, bindlog_last_error());
                _exit(1);
            }
            bindlog_close(mine);
            _exit(0);
        }
        wait_child(pid);
    }
    atomic_store(&b.stop, 1);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(b.written > 0);

    bindlog_binding bb;
    char key[64], sid[64];
    for (int i = 0; i < FORKS; i++) {
        snprintf(key, sizeof key, "agent:main:forked:%d", i);
        snprintf(sid, sizeof sid, "forked-%d", i);
        assert_int_equal(bindlog_get(b.s, key, &bb), 0);
        assert_string_equal(bb.session_id, sid);
    }
    assert_int_equal(head_of(b.s), (uint64_t)b.written + FORKS);
    bindlog_close(o);
    bindlog_close(b.s);
    tu_rmtree(other);
    free(other);
    tu_rmtree(dir);
    free(dir);
}

static void fork__the_code_has_a_name_and_a_text(void **state)
{
    (void)state;
    assert_int_equal(BINDLOG_EFORK, -16);
    assert_int_equal(BINDLOG_ERROR_MIN, BINDLOG_EFORK);
    assert_string_equal(bindlog_code_name(BINDLOG_EFORK), "BINDLOG_EFORK");
    assert_non_null(strstr(bindlog_strerror(BINDLOG_EFORK), "fork"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fork__every_call_on_a_parent_handle_in_the_child_is_efork),
        cmocka_unit_test(fork__the_child_opens_the_store_itself_and_the_parent_sees_it),
        cmocka_unit_test(fork__a_fork_while_another_thread_writes_leaves_the_child_nothing_held),
        cmocka_unit_test(fork__the_code_has_a_name_and_a_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
