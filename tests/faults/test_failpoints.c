/*
 * test_failpoints.c -- kill, abort and fail the write path at every named
 * failpoint (src/core/failpoint.h), linked with bindlog_faults.
 *
 * Kill: a child runs the 4-thread FULL-mode workload (faultutil.h), which
 * acknowledges every APPLIED event on a pipe after the call returned, with
 * BINDLOG_FAILPOINT=<point>:kill:<n>.  The parent requires that the child
 * died of SIGKILL at the failpoint (else the case proved nothing), reopens
 * the store and verifies it: every acknowledged event is in the log with the
 * same content, no generation went back, the log is dense and re-derives the
 * state digest, bindlog_check (when linked in) finds nothing.
 *
 * The points of the write path (src/lmdb/commit.c): commit.begin (the
 * writers' lock taken, before deciding), commit.group (between two
 * requests of a group), commit.append (after each event went into the
 * frame), commit.before (the frame built, before room is made), wal.recycle
 * (before a WRAP frame: the ring starts a lap), wal.append (before the
 * frame's write), commit.after (written and recorded, not yet visible),
 * wal.flush (before the FULL flush).  Of the checkpoint (ckpt.c):
 * ckpt.begin (LMDB's transaction written, before its commit) and
 * ckpt.after (committed, not yet published in the shared memory).  The
 * kill runs use a 64 KiB log so that the ring wraps and the background
 * checkpointer runs many times in each.
 *
 * walk.step (ckpt.c): a step of the whole-store page walk that a writable
 * open runs in the background; the close-during-the-walk case slows it
 * down (sleep) and stops it short (eio), and the damaged-store case slows
 * it so that a write surely comes before its verdict.  close.walk
 * (walenv.c): a last close finds the walk still under way and leaves the
 * log to the next writer (test_upgrade_crash.c uses it).
 *
 * Eio: in process, with the background checkpointer off.  The contract:
 *   - eio before the frame is written (commit.begin, commit.append,
 *     commit.group, commit.before, wal.recycle, wal.append): the call
 *     returns BINDLOG_EIO, nothing of the group is in the store, and the
 *     handle keeps working (a frame whose write failed is erased, so that
 *     no recovery finds it);
 *   - eio at commit.after (a write that reported failure after it was all
 *     done) or wal.flush (the log's flush failed): the call returns
 *     BINDLOG_EPANIC and every later write on every handle of the store in
 *     this process does too, until all are closed; after reopening, the
 *     store checks, and the event that got EPANIC may be there (here it
 *     is): EPANIC means "unknown", never "not applied";
 *   - eio at ckpt.begin or ckpt.after: the checkpoint fails (before or
 *     after LMDB's commit), nothing is lost, writers go on, and the next
 *     checkpoint completes it.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindlog.h"
#include "core/failpoint.h"
#include "core/backend.h"
#include "core/record.h"
#include "lmdb/pagecheck.h"
#include "lmdb/walenv.h"
#include "faultutil.h"
#include "testutil.h"

static int long_mode(void) { return getenv("BINDLOG_FAULT_LONG") != NULL; }

static void set_failpoint(const char *spec)
{
    if (spec != NULL)
        setenv("BINDLOG_FAILPOINT", spec, 1);
    else
        unsetenv("BINDLOG_FAILPOINT");
    bl_failpoint_reset();
}

/* One kill run: returns the number of acked events verified. */
static size_t kill_run(const char *spec, int expect_sig, const fu_workload *w)
{
    char *dir = tu_mkdtemp("fpkill");
    char scratch[4096];
    int p[2];
    fu_ack *acks;
    fu_verdict v;
    int status;

    snprintf(scratch, sizeof(scratch), "%s-replica", dir);
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        fu_child_signals();
        close(p[0]);
        unsetenv("BINDLOG_CHECKPOINT"); /* the background checkpointer runs here */
        set_failpoint(spec);
        int rc = fu_run_workload(dir, w, p[1]);
        fprintf(stderr, "failpoint %s never fired (workload rc %d)\n", spec, rc);
        _exit(3);
    }
    close(p[1]);
    size_t n = fu_read_acks(p[0], &acks);
    close(p[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != expect_sig)
        fail_msg("%s: the child was not killed by signal %d at the failpoint (status 0x%x)",
                 spec, expect_sig, status);

    int bad = fu_verify(dir, scratch, acks, n, BINDLOG_DURABILITY_FULL, &v);
    print_message("  %-44s acked %4zu head %4llu lost %llu mismatched %llu gen_back %llu "
                  "problems %llu check %s\n",
                  spec, n, (unsigned long long)v.head_lsn, (unsigned long long)v.lost,
                  (unsigned long long)v.mismatched, (unsigned long long)v.gen_back,
                  (unsigned long long)v.problems,
                  v.check_rc == 1 ? "n/a" : (v.check_rc == 0 ? "ran" : "error"));
    if (bad)
        fail_msg("%s: open %d lost %llu mismatched %llu gen_back %llu: %s", spec, v.open_rc,
                 (unsigned long long)v.lost, (unsigned long long)v.mismatched,
                 (unsigned long long)v.gen_back, v.msg);
    free(acks);
    tu_rmtree(dir);
    free(dir);
    return n;
}

static void failpoints__kill_at_every_point(void **state)
{
    (void)state;
    static const char *const points[] = {"commit.begin", "commit.append", "commit.before",
                                         "wal.append", "commit.after", "wal.flush",
                                         "wal.recycle", "ckpt.begin", "ckpt.after"};
    const int nths_short[] = {1, 4, 23}, nths_long[] = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89};
    const int *nths = long_mode() ? nths_long : nths_short;
    size_t nn = long_mode() ? 10 : 3;
    fu_workload w = FU_WORKLOAD_INIT;
    char spec[128];

    w.log_size = 64 << 10;
    w.events_per_thread = 400; /* about 4 laps of the ring */
    for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++)
        for (size_t j = 0; j < nn; j++) {
            /* the ring wraps and checkpoints run a few times per run only:
             * hits 1..3, each with other seeds in the long mode */
            int rare = strncmp(points[i], "ckpt.", 5) == 0 || strcmp(points[i], "wal.recycle") == 0;
            w.seed = (unsigned)(i * 100 + j + 1);
            snprintf(spec, sizeof(spec), "%s:kill:%d", points[i],
                     rare ? (int)(j % 3) + 1 : nths[j]);
            kill_run(spec, SIGKILL, &w);
        }
}

/* commit.group fires only between two requests of one group: make the
 * leader linger before each commit so that the other threads pile up. */
static void failpoints__kill_inside_group_commit(void **state)
{
    (void)state;
    fu_workload w = FU_WORKLOAD_INIT;
    char spec[128];
    const int nths[] = {1, 3, 9};

    w.log_size = 64 << 10;
    for (size_t j = 0; j < sizeof(nths) / sizeof(nths[0]); j++) {
        w.seed = (unsigned)(j + 50);
        snprintf(spec, sizeof(spec), "commit.before:sleep=2,commit.group:kill:%d", nths[j]);
        kill_run(spec, SIGKILL, &w);
    }
}

static void failpoints__abort_is_a_crash_too(void **state)
{
    (void)state;
    fu_workload w = FU_WORKLOAD_INIT;
    w.log_size = 64 << 10;
    kill_run("commit.before:abort:7", SIGABRT, &w);
    kill_run("commit.after:abort:7", SIGABRT, &w);
    kill_run("ckpt.begin:abort:2", SIGABRT, &w);
}

/* ---- eio --------------------------------------------------------------------- */

typedef struct snap {
    uint64_t head;
    unsigned char digest[BINDLOG_DIGEST_SIZE];
} snap;

static void take(bindlog *s, snap *sn)
{
    assert_int_equal(bindlog_digest(s, sn->digest, &sn->head), 0);
}

/* Open a store with a few events in it; *acks gets them. */
static bindlog *prepared(const char *dir, fu_ack *acks, size_t *n)
{
    bindlog *s;
    bindlog_result r;
    char key[32], sid[40];

    assert_int_equal(bindlog_open(&s, dir, NULL), 0);
    *n = 0;
    for (unsigned k = 0; k < 3; k++) {
        fu_key(key, k);
        snprintf(sid, sizeof(sid), "s%u-1", k);
        assert_int_equal(bindlog_bind(s, key, sid, NULL, NULL, "o", 1, &r), BINDLOG_APPLIED);
        acks[*n] = (fu_ack){k, BINDLOG_EVENT_BIND, r.lsn, r.generation, {0}};
        snprintf(acks[*n].session_id, sizeof(acks[*n].session_id), "%s", sid);
        (*n)++;
    }
    return s;
}

static void verify_dir(const char *dir, const fu_ack *acks, size_t n)
{
    char scratch[4096];
    fu_verdict v;
    snprintf(scratch, sizeof(scratch), "%s-replica", dir);
    if (fu_verify(dir, scratch, acks, n, BINDLOG_DURABILITY_FULL, &v))
        fail_msg("verify: open %d lost %llu: %s", v.open_rc, (unsigned long long)v.lost, v.msg);
}

static void failpoints__eio_before_commit_fails_cleanly(void **state)
{
    (void)state;
    static const char *const points[] = {"commit.begin:eio", "commit.append:eio",
                                         "commit.before:eio", "wal.append:eio"};

    for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
        char *dir = tu_mkdtemp("fpeio");
        fu_ack acks[8];
        size_t n;
        snap before, after;
        bindlog_result r;
        bindlog_binding b;
        bindlog *s = prepared(dir, acks, &n);

        take(s, &before);
        set_failpoint(points[i]);
        assert_int_equal(bindlog_split(s, "fault:0", "s0-1", "s0-2", BINDLOG_ANY_GENERATION,
                                       NULL, 0, &r),
                         BINDLOG_EIO);
        set_failpoint(NULL);
        take(s, &after);
        assert_int_equal(after.head, before.head);
        assert_memory_equal(after.digest, before.digest, BINDLOG_DIGEST_SIZE);
        assert_int_equal(bindlog_get(s, "fault:0", &b), 0);
        assert_string_equal(b.session_id, "s0-1");

        /* the handle is still good: the same event now goes in */
        assert_int_equal(bindlog_split(s, "fault:0", "s0-1", "s0-2", BINDLOG_ANY_GENERATION,
                                       NULL, 0, &r),
                         BINDLOG_APPLIED);
        assert_int_equal(r.lsn, before.head + 1);
        bindlog_close(s);
        verify_dir(dir, acks, n);
        tu_rmtree(dir);
        free(dir);
    }
}

static void failpoints__eio_in_a_batch_writes_nothing(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("fpbatch");
    fu_ack acks[8];
    size_t n, err_index = 99;
    snap before, after;
    bindlog_result r[3];
    bindlog *s = prepared(dir, acks, &n);
    bindlog_event ev[3] = {
        {BINDLOG_EVENT_INVALIDATE, "fault:1", NULL, NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_SPLIT, "fault:1", "s1-2", "s1-1", BINDLOG_ANY_GENERATION, NULL, NULL, 0},
        {BINDLOG_EVENT_NEW_SESSION, "fault:2", "s2-2", NULL, 0, NULL, NULL, 0},
    };

    take(s, &before);
    set_failpoint("commit.append:eio:2"); /* after the batch's second record */
    assert_int_equal(bindlog_apply_batch(s, ev, 3, r, &err_index), BINDLOG_EIO);
    set_failpoint(NULL);
    take(s, &after);
    assert_int_equal(after.head, before.head);
    assert_memory_equal(after.digest, before.digest, BINDLOG_DIGEST_SIZE);
    assert_int_equal(bindlog_apply_batch(s, ev, 3, r, &err_index), 0);
    assert_int_equal(r[2].lsn, before.head + 3);
    bindlog_close(s);
    verify_dir(dir, acks, n);
    tu_rmtree(dir);
    free(dir);
}

static void eio_panics_sticky(const char *spec)
{
    char *dir = tu_mkdtemp("fppanic");
    fu_ack acks[8];
    size_t n;
    snap before;
    bindlog_result r;
    bindlog_binding b;
    bindlog *s = prepared(dir, acks, &n), *s2;

    take(s, &before);
    assert_int_equal(bindlog_open(&s2, dir, NULL), 0); /* shares the environment */
    set_failpoint(spec);
    assert_int_equal(bindlog_new_session(s, "fault:0", "s0-9", NULL, NULL, 0, &r),
                     BINDLOG_EPANIC);
    set_failpoint(NULL);
    /* sticky, on both handles, for every kind of write */
    assert_int_equal(bindlog_invalidate(s, "fault:1", NULL, &r), BINDLOG_EPANIC);
    assert_int_equal(bindlog_unbind(s2, "fault:2", NULL, &r), BINDLOG_EPANIC);
    assert_int_equal(bindlog_apply_batch(s2,
                                         &(bindlog_event){BINDLOG_EVENT_INVALIDATE, "fault:1",
                                                          NULL, NULL, 0, NULL, NULL, 0},
                                         1, &r, NULL),
                     BINDLOG_EPANIC);
    /* a handle opened after the panic, while the others are still open,
     * shares the panicked environment */
    bindlog *s3;
    assert_int_equal(bindlog_open(&s3, dir, NULL), 0);
    assert_int_equal(bindlog_invalidate(s3, "fault:1", NULL, &r), BINDLOG_EPANIC);
    /* reads are not refused (observed behaviour, see docs/reliability.md) */
    print_message("  read after EPANIC: bindlog_get -> %d\n", bindlog_get(s3, "fault:1", &b));
    bindlog_close(s3);
    bindlog_close(s2);
    bindlog_close(s);

    /* reopened: consistent, acked events there; the EPANIC'd event is
     * there as well, because LMDB had committed it */
    assert_int_equal(bindlog_open(&s, dir, NULL), 0);
    assert_int_equal(bindlog_get(s, "fault:0", &b), 0);
    assert_string_equal(b.session_id, "s0-9");
    assert_int_equal(bindlog_invalidate(s, "fault:1", NULL, &r), BINDLOG_APPLIED);
    assert_int_equal(r.lsn, before.head + 2);
    bindlog_close(s);
    verify_dir(dir, acks, n);
    tu_rmtree(dir);
    free(dir);
}

static void failpoints__eio_after_the_write_panics_sticky(void **state)
{
    (void)state;
    eio_panics_sticky("commit.after:eio");
    eio_panics_sticky("wal.flush:eio");
}

/* A checkpoint that fails before or after LMDB's commit loses nothing and
 * leaves nothing half done: the next one completes it. */
static void failpoints__eio_in_a_checkpoint_is_retried(void **state)
{
    (void)state;
    static const char *const points[] = {"ckpt.begin:eio", "ckpt.after:eio"};
    for (size_t i = 0; i < 2; i++) {
        char *dir = tu_mkdtemp("fpckpt");
        fu_ack acks[8];
        size_t n;
        snap before, after;
        bindlog_stats st;
        uint64_t lsn = 0;
        bindlog *s = prepared(dir, acks, &n);

        take(s, &before);
        set_failpoint(points[i]);
        assert_int_equal(bindlog_checkpoint(s, &lsn), BINDLOG_EIO);
        set_failpoint(NULL);
        take(s, &after);
        assert_int_equal(after.head, before.head);
        assert_memory_equal(after.digest, before.digest, BINDLOG_DIGEST_SIZE);
        /* writers go on */
        assert_int_equal(bindlog_invalidate(s, "fault:1", NULL, NULL), BINDLOG_APPLIED);
        assert_int_equal(bindlog_checkpoint(s, &lsn), 0);
        assert_int_equal(lsn, before.head + 1);
        assert_int_equal(bindlog_stats_get(s, &st), 0);
        assert_int_equal(st.checkpoint_lsn, before.head + 1);
        print_message("  %s: the checkpoint fails, the next one folds LSNs up to %llu\n",
                      points[i], (unsigned long long)lsn);
        bindlog_close(s);
        verify_dir(dir, acks, n);
        tu_rmtree(dir);
        free(dir);
    }
}

/* bl_pc_search's page callback: keep the last page of the path (the leaf). */
static int last_page(void *ctx, uint64_t pgno, unsigned want, char *why, size_t cap)
{
    (void)want;
    (void)why;
    (void)cap;
    *(uint64_t *)ctx = pgno;
    return 0;
}

/* A store of `n` bound keys at dir, closed, written without failpoints. */
static void walk_store_with(const char *dir, unsigned n, unsigned max_readers)
{
    bindlog *s = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_event ev[100];
    char keys[100][48], sids[100][48];

    o.durability = BINDLOG_DURABILITY_NONE;
    o.max_readers = max_readers;
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    for (unsigned b = 0; b < n; b += 100) {
        for (unsigned i = 0; i < 100; i++) {
            snprintf(keys[i], sizeof keys[i], "agent:main:walk:%06u", b + i);
            snprintf(sids[i], sizeof sids[i], "walk-%06u", b + i);
            memset(&ev[i], 0, sizeof ev[i]);
            ev[i].type = BINDLOG_EVENT_BIND;
            ev[i].key = keys[i];
            ev[i].session_id = sids[i];
        }
        assert_int_equal(bindlog_apply_batch(s, ev, 100, NULL, NULL), 0);
    }
    bindlog_close(s);
}

static void walk_store_of(const char *dir, unsigned n)
{
    walk_store_with(dir, n, 0);
}

/* Open dir with every walk step taking step_ms; return once the walk is
 * inside its first step. */
static bindlog *open_inside_the_walk(const char *dir, const bindlog_options *o, int step_ms)
{
    char spec[64];
    bindlog *s = NULL;
    snprintf(spec, sizeof spec, "walk.step:sleep=%d", step_ms);
    set_failpoint(spec);
    assert_int_equal(bindlog_open(&s, dir, o), 0);
    while (bl_failpoint_hits("walk.step") == 0)
        usleep(1000);
    return s;
}

/*
 * The whole-store walk a writable open starts in the background
 * (docs/design.md, "Damaged files"): walk.step is hit every thousand or so
 * entries of it.  sleep: each step takes 300 ms, so a close right after the
 * first step is inside the walk, and must stop it there instead of waiting
 * for the other steps (a 1 GB store's walk takes seconds).  eio: the walk
 * stops short, so the first write (if it comes after) or the checkpoint
 * of close walks the store itself and goes ahead.
 * Either way the store then opens, writes and checks as before.
 */
static void failpoints__close_stops_the_walk(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("fpwalk");
    bindlog *s = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_result r;
    bindlog_check_report rep;

    unsetenv("BINDLOG_CHECKPOINT"); /* the walk runs on the checkpointer's thread */
    walk_store_of(dir, 3000);       /* ~12k entries: ~11 steps, 3.3 s of sleeps */
    o.durability = BINDLOG_DURABILITY_NONE;

    s = open_inside_the_walk(dir, &o, 300);
    /* until the walk is over, the page check's map of the file is advised
     * for random reads (after it: tests/test_wal_pagewalk.c) */
    char mdb[4200];
    snprintf(mdb, sizeof mdb, "%s/data.mdb", dir);
    assert_int_not_equal(tu_random_maps_of(mdb), 0); /* -1: this system cannot tell */
    bindlog_close(s); /* inside the first step's sleep */
    unsigned long steps = bl_failpoint_hits("walk.step");
    print_message("  close during the walk: %lu of ~11 steps taken\n", steps);
    assert_true(steps <= 2);

    set_failpoint("walk.step:eio");
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    assert_int_equal(bindlog_bind(s, "agent:main:walk:x", "x", NULL, NULL, NULL, 0, &r),
                     BINDLOG_APPLIED);
    bindlog_close(s); /* its checkpoint needs the verdict: the walk's, or its own */
    assert_int_equal(bl_failpoint_hits("walk.step"), 1);

    set_failpoint(NULL);
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    assert_int_equal(bindlog_bind(s, "agent:main:walk:y", "y", NULL, NULL, NULL, 0, &r),
                     BINDLOG_APPLIED);
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 0);
    bindlog_close(s);
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    tu_rmtree(dir);
    free(dir);
}

/*
 * Close gives the walk a moment (100 ms) to finish, so that it can fold
 * the log, but not when the walk's own pace says it cannot finish in
 * time: a CLI write on a store of a million events lost those 100 ms on
 * every call.  Each walk step sleeps 40 ms here, so after two steps of
 * ~16 the walk has over half a second to go: a 100 ms wait is refused at
 * once, a 60 s one waits for the verdict.
 */
static void failpoints__a_walk_too_slow_for_the_wait_is_not_waited_for(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("fppace");
    bindlog *s = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;

    unsetenv("BINDLOG_CHECKPOINT");
    walk_store_of(dir, 6000); /* ~16 steps */
    o.durability = BINDLOG_DURABILITY_NONE;
    s = open_inside_the_walk(dir, &o, 40);
    while (bl_failpoint_hits("walk.step") < 3)
        usleep(1000); /* two steps have told how far the walk is */
    assert_int_equal(bl_ckpt_walk_settle_for(s->e, 100), BL_WALK_TOO_LONG);
    unsigned long at = bl_failpoint_hits("walk.step");
    assert_int_equal(bl_ckpt_walk_settle_for(s->e, 60000), 1);
    unsigned long end = bl_failpoint_hits("walk.step");
    print_message("  refused after %lu walk steps of %lu\n", at, end);
    assert_true(end >= at + 4); /* it had at least 160 ms to go */
    set_failpoint(NULL);
    bindlog_close(s);
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    tu_rmtree(dir);
    free(dir);
}

/*
 * The walk holds a snapshot, and so a reader slot, for as long as it lasts.
 * A store made with max_readers 1 has that one slot for the caller's
 * thread and one more for its own: the caller reads and writes while the
 * walk sleeps inside its first step (before the extra slot, each read and
 * write was BINDLOG_EBUSY "reader table full" until the walk ended).
 */
static void failpoints__the_walk_takes_no_reader_slot_of_the_callers(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("fpslot");
    bindlog *s = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_result r;
    bindlog_binding b;
    bindlog_stats st;

    unsetenv("BINDLOG_CHECKPOINT"); /* the walk runs on the checkpointer's thread */
    o.durability = BINDLOG_DURABILITY_NONE;
    o.max_readers = 1;
    walk_store_with(dir, 3000, 1); /* the reader table: 1 + 1 */

    /* a step long enough that a loaded sanitizer build is still inside it */
    s = open_inside_the_walk(dir, &o, 1500);
    assert_int_equal(bindlog_stats_get(s, &st), 0); /* inside the first step */
    assert_int_equal(st.readers_max, 2);
    assert_int_equal(bindlog_get(s, "agent:main:walk:000042", &b), 0);
    assert_string_equal(b.session_id, "walk-000042");
    assert_int_equal(bindlog_bind(s, "agent:main:walk:z", "z", NULL, NULL, NULL, 0, &r),
                     BINDLOG_APPLIED);
    assert_int_equal(bl_failpoint_hits("walk.step"), 1); /* still inside it */
    bindlog_close(s);

    set_failpoint(NULL);
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    tu_rmtree(dir);
    free(dir);
}

/* Send every node offset of the bindings leaf holding `key` past the end of
 * its page (as tests/test_wal_pagewalk.c does); returns the page number. */
static uint64_t damage_leaf_of(const char *dir, const char *key)
{
    char path[1100], why[240];
    struct stat st;
    bl_pc_meta m[2];
    int ok[2];
    const unsigned char *v;
    size_t vn;
    bl_pc_db db;
    uint64_t leaf = 0;

    snprintf(path, sizeof path, "%s/data.mdb", dir);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    unsigned char *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(map != MAP_FAILED);
    for (unsigned i = 0; i < 2; i++)
        ok[i] = bl_pc_meta_read(map + i * 4096, 4096, i, &m[i], why, sizeof why);
    int cur = bl_pc_meta_pick(m, ok, why, sizeof why);
    assert_true(cur >= 0);
    bl_pc_file f = {map, (uint64_t)st.st_size / m[cur].psize, m[cur].psize, m[cur].last_pg};
    const char *name = bl_pc_tree_name(BL_DB_BINDINGS);
    assert_int_equal(bl_pc_search(&f, &m[cur].dbs[1], BL_PC_MAIN, name, strlen(name), 0, NULL,
                                  NULL, &v, &vn, NULL),
                     0);
    bl_pc_db_decode(v, &db);
    assert_int_equal(bl_pc_search(&f, &db, BL_DB_BINDINGS, key, strlen(key), 0, last_page,
                                  &leaf, &v, &vn, NULL),
                     0);
    unsigned n = (bl_get16(map + leaf * f.psize + 12) - 16) / 2;
    for (unsigned j = 0; j < n; j++) {
        unsigned char b[2] = {0xfe, 0xff};
        assert_int_equal(pwrite(fd, b, 2, (off_t)(leaf * f.psize + 16 + 2 * j)), 2);
    }
    munmap(map, (size_t)st.st_size);
    close(fd);
    return leaf;
}

/* The bytes of dir/data.mdb (malloc'd), *n their count. */
static unsigned char *read_mdb(const char *dir, size_t *n)
{
    char path[1100];
    struct stat st;
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    unsigned char *p = malloc((size_t)st.st_size);
    assert_non_null(p);
    assert_int_equal(pread(fd, p, (size_t)st.st_size, 0), st.st_size);
    close(fd);
    *n = (size_t)st.st_size;
    return p;
}

/*
 * A process's first write does not wait for the whole-store walk
 * (docs/design.md, "Damaged files"): with each walk step slowed to 200 ms,
 * a FULL write right after open is acknowledged from the log at once
 * while the walk goes on.  The walk then finds a damaged leaf far from
 * that key: the checkpoint, the only writer of data.mdb, refuses with the
 * damage named, writes after the verdict are refused, close folds
 * nothing, and data.mdb is byte for byte what it was.  The acknowledged
 * event is not lost: a reopened handle reads it from the log.
 */
static void failpoints__a_write_before_the_walks_verdict_reaches_the_log_only(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("fpwalkbad");
    bindlog *s = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_result r;
    bindlog_binding b;
    char want[64];
    size_t n0, n1;

    unsetenv("BINDLOG_CHECKPOINT"); /* the walk runs on the checkpointer's thread */
    walk_store_of(dir, 3000);
    uint64_t leaf = damage_leaf_of(dir, "agent:main:walk:001234");
    snprintf(want, sizeof want, "page %llu of table bindings", (unsigned long long)leaf);
    unsigned char *mdb0 = read_mdb(dir, &n0);

    set_failpoint("walk.step:sleep=200");
    o.durability = BINDLOG_DURABILITY_FULL;
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    assert_int_equal(bindlog_bind(s, "agent:main:walk:early", "e1", NULL, NULL, NULL, 0, &r),
                     BINDLOG_APPLIED);
    unsigned long steps = bl_failpoint_hits("walk.step");
    print_message("  write before the verdict: after %lu of ~11 walk steps\n", steps);
    assert_true(steps <= 2); /* the walk had barely begun */
    /* inside the walk, commits are counted for it (commit.c, commit_in),
     * and each leaves the count as it found it, a refused one too */
    assert_int_equal(bl_pc_reading_ahead(s->e), 1);
    assert_int_equal(bindlog_bind(s, "agent:main:walk:early", "e2", "nope", NULL, NULL, 0, &r),
                     BINDLOG_MOVED);
    assert_int_equal(atomic_load(&s->e->wal->committing), 0);
    assert_int_equal(bindlog_get(s, "agent:main:walk:early", &b), 0);
    assert_string_equal(b.session_id, "e1");
    /* the checkpoint waits for the verdict and refuses the damaged file */
    assert_int_equal(bindlog_checkpoint(s, NULL), BINDLOG_ECORRUPT);
    if (strstr(bindlog_last_error(), want) == NULL)
        fail_msg("'%s' does not name '%s'", bindlog_last_error(), want);
    assert_int_equal(bindlog_bind(s, "agent:main:walk:late", "l1", NULL, NULL, NULL, 0, &r),
                     BINDLOG_ECORRUPT);
    if (strstr(bindlog_last_error(), want) == NULL)
        fail_msg("'%s' does not name '%s'", bindlog_last_error(), want);
    bindlog_close(s);
    set_failpoint(NULL);

    unsigned char *mdb1 = read_mdb(dir, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(mdb0, mdb1, n0); /* nothing was written into it */
    free(mdb0);
    free(mdb1);
    o.read_only = 1;
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    assert_int_equal(bindlog_get(s, "agent:main:walk:early", &b), 0);
    assert_string_equal(b.session_id, "e1");
    assert_int_equal(bindlog_get(s, "agent:main:walk:late", &b), BINDLOG_ENOTFOUND);
    bindlog_close(s);
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    tu_rmtree(dir);
    free(dir);
}

/*
 * Close folds the log only with the whole-store walk's verdict.  With each
 * walk step slowed to 300 ms (a walk of ~3 s: a large store), a process
 * that writes once and closes does not wait for the walk: close stops it
 * after a short wait, flushes the log and leaves the frame there.  Nothing
 * is lost: the next open reads the event from the log, and the next
 * writer, whose walk ends, folds it at its close.
 */
static void failpoints__close_leaves_the_log_to_the_next_writer_when_the_walk_is_slow(
    void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("fpwalkslow");
    bindlog *s = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_result r;
    bindlog_binding b;
    bindlog_stats st;

    unsetenv("BINDLOG_CHECKPOINT");
    walk_store_of(dir, 3000); /* ~11 walk steps */
    set_failpoint("walk.step:sleep=300");
    o.durability = BINDLOG_DURABILITY_FULL;
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    assert_int_equal(bindlog_bind(s, "agent:main:walk:cli", "c1", NULL, NULL, NULL, 0, &r),
                     BINDLOG_APPLIED);
    bindlog_close(s);
    unsigned long steps = bl_failpoint_hits("walk.step");
    print_message("  close after one write: the walk stopped after %lu of ~11 steps\n", steps);
    assert_true(steps <= 2);
    set_failpoint(NULL);

    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 3001);
    assert_int_equal(st.checkpoint_lsn, 3000); /* the frame waits in the log */
    assert_int_equal(bindlog_get(s, "agent:main:walk:cli", &b), 0);
    assert_string_equal(b.session_id, "c1");
    assert_int_equal(bindlog_bind(s, "agent:main:walk:next", "n1", NULL, NULL, NULL, 0, &r),
                     BINDLOG_APPLIED);
    bindlog_close(s); /* a walk of a few milliseconds: its verdict is in, close folds */
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 3002);
    assert_int_equal(st.checkpoint_lsn, 3002);
    bindlog_close(s);
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    tu_rmtree(dir);
    free(dir);
}

static void failpoints__spec_parsing(void **state)
{
    (void)state;
    set_failpoint("x.y:eio:3,bogus:explode,z:sleep=1");
    assert_int_equal(BL_FAILPOINT("x.y"), 0);
    assert_int_equal(BL_FAILPOINT("x.y"), 0);
    assert_int_equal(BL_FAILPOINT("x.y"), BINDLOG_EIO);
    assert_int_equal(BL_FAILPOINT("x.y"), 0); /* one-shot */
    assert_int_equal(bl_failpoint_hits("x.y"), 4);
    assert_int_equal(BL_FAILPOINT("bogus"), 0);
    assert_int_equal(bl_failpoint_hits("bogus"), 0); /* malformed: ignored */
    assert_int_equal(BL_FAILPOINT("z"), 0);
    assert_int_equal(BL_FAILPOINT("z"), 0);
    assert_int_equal(bl_failpoint_hits("z"), 2);
    set_failpoint(NULL);
    assert_int_equal(BL_FAILPOINT("x.y"), 0);
}

int main(void)
{
    setenv("BINDLOG_CHECKPOINT", "manual", 1); /* the in-process cases; kill runs unset it */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(failpoints__spec_parsing),
        cmocka_unit_test(failpoints__eio_before_commit_fails_cleanly),
        cmocka_unit_test(failpoints__eio_in_a_batch_writes_nothing),
        cmocka_unit_test(failpoints__eio_after_the_write_panics_sticky),
        cmocka_unit_test(failpoints__eio_in_a_checkpoint_is_retried),
        cmocka_unit_test(failpoints__close_stops_the_walk),
        cmocka_unit_test(failpoints__a_walk_too_slow_for_the_wait_is_not_waited_for),
        cmocka_unit_test(failpoints__the_walk_takes_no_reader_slot_of_the_callers),
        cmocka_unit_test(failpoints__a_write_before_the_walks_verdict_reaches_the_log_only),
        cmocka_unit_test(failpoints__close_leaves_the_log_to_the_next_writer_when_the_walk_is_slow),
        cmocka_unit_test(failpoints__kill_at_every_point),
        cmocka_unit_test(failpoints__kill_inside_group_commit),
        cmocka_unit_test(failpoints__abort_is_a_crash_too),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
