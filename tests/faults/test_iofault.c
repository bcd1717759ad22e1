/*
 * test_iofault.c -- EIO and ENOSPC on write and on fsync, injected by the
 * LD_PRELOAD shim (shim.h) under the write-ahead log and LMDB.  The test
 * re-execs itself with the shim preloaded and arms it around single calls.
 * The background checkpointer is off (BINDLOG_CHECKPOINT=manual), so that
 * every tracked operation belongs to the call under test; checkpoints run
 * when the test calls bindlog_checkpoint(), or in the writer when the log
 * is full.
 *
 * What it pins down (docs/reliability.md, "I/O faults"):
 *   - a commit does exactly one write (its frame) and, in FULL, exactly one
 *     flush of the log; in NORMAL and NONE none;
 *   - the frame's write failing (EIO or ENOSPC, a short write included)
 *     fails the call with that code and nothing else: the frame is
 *     withdrawn (overwritten, flushed) so that recovery never finds it,
 *     the handle keeps
 *     working, and after reopening the event is not there; if even that
 *     overwrite fails after an EIO, durability is unknown: BINDLOG_EPANIC
 *     (after ENOSPC the frame cannot be whole: still ENOSPC);
 *   - the flush failing (EIO, or ENOSPC from a thin-provisioned disk)
 *     returns BINDLOG_EPANIC, sticky on every handle of the store in this
 *     process until all are closed; reopened, the store holds every event
 *     acknowledged before, and checks;
 *   - a checkpoint that cannot write data.mdb (ENOSPC, EIO before LMDB's
 *     meta page) returns that code and changes nothing; writers go on in
 *     the log, and once space returns the checkpoint goes through;
 *   - a full log whose checkpoint cannot run is BINDLOG_ENOSPC for the
 *     writer, never a panic, and writing resumes once space returns.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bindlog.h"
#include "faultutil.h"
#include "lmdb/walenv.h"
#include "shim.h"
#include "testutil.h"

static shim_track_fn shim_track;
static shim_fail_fn shim_fail;
static shim_ops_fn shim_ops;
static shim_unsynced_fn shim_unsynced;

static int need_shim(void **state)
{
    (void)state;
    shim_track = (shim_track_fn)fu_shim_sym("bl_shim_track");
    shim_fail = (shim_fail_fn)fu_shim_sym("bl_shim_fail");
    shim_ops = (shim_ops_fn)fu_shim_sym("bl_shim_ops");
    shim_unsynced = (shim_unsynced_fn)fu_shim_sym("bl_shim_unsynced");
    if (shim_track == NULL || shim_fail == NULL || shim_ops == NULL || shim_unsynced == NULL) {
        print_message("the shim is not preloaded: skipped\n");
        skip();
    }
    return 0;
}

typedef struct store {
    char *dir;
    bindlog *s;
    fu_ack acks[4096];
    size_t n;
} store;

static const char *mode_name(int d)
{
    return d == BINDLOG_DURABILITY_FULL ? "full" : d == BINDLOG_DURABILITY_NORMAL ? "normal"
                                                                                  : "none";
}

/* A tracked store with a few acknowledged events. */
static void store_open(store *st, int durability, uint64_t log_size)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_result r;
    char key[32], sid[40];

    memset(st, 0, sizeof(*st));
    st->dir = tu_mkdtemp("iofault");
    shim_track(st->dir);
    o.durability = durability;
    o.log_size = log_size;
    assert_int_equal(bindlog_open(&st->s, st->dir, &o), 0);
    for (unsigned k = 0; k < 4; k++) {
        fu_key(key, k);
        snprintf(sid, sizeof(sid), "s%u-1", k);
        assert_int_equal(bindlog_bind(st->s, key, sid, NULL, NULL, "o", 1, &r), BINDLOG_APPLIED);
        st->acks[st->n] = (fu_ack){k, BINDLOG_EVENT_BIND, r.lsn, r.generation, {0}};
        snprintf(st->acks[st->n].session_id, sizeof(st->acks[0].session_id), "%s", sid);
        st->n++;
    }
}

/* One more event on key 0; acked if APPLIED.  Returns the call's rc. */
static int store_event(store *st, bindlog *s)
{
    static unsigned ctr = 100;
    static char origin[200];
    char sid[40];
    bindlog_result r;
    snprintf(sid, sizeof(sid), "s0-%u", ++ctr);
    memset(origin, 'x', sizeof origin);
    int rc = bindlog_new_session(s, "fault:0", sid, NULL, origin, sizeof origin, &r);
    if (rc == BINDLOG_APPLIED && st->n < sizeof(st->acks) / sizeof(st->acks[0])) {
        st->acks[st->n] = (fu_ack){0, BINDLOG_EVENT_NEW_SESSION, r.lsn, r.generation, {0}};
        snprintf(st->acks[st->n].session_id, sizeof(st->acks[0].session_id), "%s", sid);
        st->n++;
    }
    return rc;
}

/* Close, reopen without faults and verify; returns the head LSN. */
static uint64_t store_close_verify(store *st, int durability)
{
    char scratch[4096];
    fu_verdict v;

    shim_fail(SHIM_WRITE, 0, 0, 0);
    shim_fail(SHIM_SYNC, 0, 0, 0);
    bindlog_close(st->s);
    shim_track(NULL);
    snprintf(scratch, sizeof(scratch), "%s-replica", st->dir);
    if (fu_verify(st->dir, scratch, st->acks, st->n, durability, &v))
        fail_msg("after reopen: open %d lost %llu mismatched %llu: %s", v.open_rc,
                 (unsigned long long)v.lost, (unsigned long long)v.mismatched, v.msg);
    tu_rmtree(st->dir);
    free(st->dir);
    return v.head_lsn;
}

/* A commit's tracked operations: one write; one flush in FULL only. */
static void iofault__one_write_and_one_flush_per_commit(void **state)
{
    (void)state;
    const int modes[] = {BINDLOG_DURABILITY_FULL, BINDLOG_DURABILITY_NORMAL,
                         BINDLOG_DURABILITY_NONE};
    for (size_t m = 0; m < 3; m++) {
        store st;
        store_open(&st, modes[m], 0);
        long w0 = shim_ops(SHIM_WRITE), s0 = shim_ops(SHIM_SYNC);
        for (int i = 0; i < 20; i++)
            assert_int_equal(store_event(&st, st.s), BINDLOG_APPLIED);
        long writes = shim_ops(SHIM_WRITE) - w0, syncs = shim_ops(SHIM_SYNC) - s0;
        print_message("  %s: 20 commits -> %ld writes, %ld flushes\n", mode_name(modes[m]),
                      writes, syncs);
        assert_int_equal(writes, 20);
        assert_int_equal(syncs, modes[m] == BINDLOG_DURABILITY_FULL ? 20 : 0);
        store_close_verify(&st, modes[m]);
    }
}

/* The frame's write fails (count = 1: the overwrite of its header then
 * succeeds): that code, nothing applied, the handle goes on. */
static void write_fails_cleanly(int durability, int err)
{
    store st;
    bindlog *s2;
    unsigned char d0[BINDLOG_DIGEST_SIZE], d1[BINDLOG_DIGEST_SIZE];
    uint64_t h0, h1;

    store_open(&st, durability, 0);
    assert_int_equal(bindlog_open(&s2, st.dir, NULL), 0);
    assert_int_equal(bindlog_digest(st.s, d0, &h0), 0);
    shim_fail(SHIM_WRITE, 1, err, 1);
    int rc = store_event(&st, st.s);
    shim_fail(SHIM_WRITE, 0, 0, 0);
    assert_int_equal(rc, err == ENOSPC ? BINDLOG_ENOSPC : BINDLOG_EIO);
    assert_int_equal(bindlog_digest(s2, d1, &h1), 0);
    assert_int_equal(h1, h0);
    assert_memory_equal(d0, d1, sizeof d0);
    /* not sticky: both handles write on, the next event takes the LSN */
    assert_int_equal(store_event(&st, s2), BINDLOG_APPLIED);
    assert_int_equal(st.acks[st.n - 1].lsn, h0 + 1);
    assert_int_equal(store_event(&st, st.s), BINDLOG_APPLIED);
    bindlog_close(s2);
    uint64_t head = store_close_verify(&st, durability);
    assert_int_equal(head, h0 + 2);
    print_message("  %s: %s on the frame's write -> %s, handle usable, event absent\n",
                  mode_name(durability), err == ENOSPC ? "ENOSPC" : "EIO",
                  bindlog_code_name(rc));
}

static void iofault__a_failed_log_write_fails_only_its_group(void **state)
{
    (void)state;
    write_fails_cleanly(BINDLOG_DURABILITY_FULL, EIO);
    write_fails_cleanly(BINDLOG_DURABILITY_FULL, ENOSPC);
    write_fails_cleanly(BINDLOG_DURABILITY_NORMAL, EIO);
    write_fails_cleanly(BINDLOG_DURABILITY_NORMAL, ENOSPC);
    write_fails_cleanly(BINDLOG_DURABILITY_NONE, ENOSPC);
}

/* The frame's write fails and so does the overwrite meant to erase it:
 * what the disk holds is unknown, the handle panics. */
static void iofault__a_failed_write_that_cannot_be_undone_panics(void **state)
{
    (void)state;
    store st;
    store_open(&st, BINDLOG_DURABILITY_FULL, 0);
    shim_fail(SHIM_WRITE, 1, EIO, 2);
    int rc = store_event(&st, st.s);
    shim_fail(SHIM_WRITE, 0, 0, 0);
    assert_int_equal(rc, BINDLOG_EPANIC);
    assert_int_equal(store_event(&st, st.s), BINDLOG_EPANIC); /* sticky */
    store_close_verify(&st, BINDLOG_DURABILITY_FULL);
}

/* The log's flush fails: durability unknown, sticky panic. */
static void flush_fails(int err)
{
    store st;
    bindlog *s2;
    store_open(&st, BINDLOG_DURABILITY_FULL, 0);
    assert_int_equal(bindlog_open(&s2, st.dir, NULL), 0);
    size_t acked = st.n;
    shim_fail(SHIM_SYNC, 1, err, 1);
    int rc = store_event(&st, st.s);
    char first[640], cause[160];
    snprintf(first, sizeof first, "%s", bindlog_last_error());
    shim_fail(SHIM_SYNC, 0, 0, 0);
    assert_int_equal(rc, BINDLOG_EPANIC);
    /* the failure named, first to the call that met it ... */
    snprintf(cause, sizeof cause, "bindlog.wal: fdatasync failed: %s", strerror(err));
    if (strstr(first, cause) == NULL || strstr(first, "close every handle") == NULL)
        fail_msg("the panic said: %s", first);
    assert_int_equal(store_event(&st, st.s), BINDLOG_EPANIC);
    assert_int_equal(store_event(&st, s2), BINDLOG_EPANIC);
    assert_int_equal(bindlog_unbind(s2, "fault:1", NULL, NULL), BINDLOG_EPANIC);
    /* ... and then to every later one, of every handle */
    if (strstr(bindlog_last_error(), "an earlier fatal I/O error") == NULL ||
        strstr(bindlog_last_error(), cause) == NULL)
        fail_msg("after the panic: %s", bindlog_last_error());
    bindlog_close(s2);
    uint64_t head = store_close_verify(&st, BINDLOG_DURABILITY_FULL);
    print_message("  full: %s on the log's flush -> EPANIC (sticky); reopened: head %llu, "
                  "acked %zu, the failed event %s\n",
                  err == ENOSPC ? "ENOSPC" : "EIO", (unsigned long long)head, acked,
                  head > acked ? "is there" : "is not there");
}

static void iofault__a_failed_flush_panics_sticky(void **state)
{
    (void)state;
    flush_fails(EIO);
    flush_fails(ENOSPC);
}

/* A checkpoint that cannot write data.mdb changes nothing; the log keeps
 * every event, writers go on, and it goes through once space returns. */
static void iofault__a_checkpoint_without_space_is_retried(void **state)
{
    (void)state;
    const int modes[] = {BINDLOG_DURABILITY_FULL, BINDLOG_DURABILITY_NORMAL};
    for (size_t m = 0; m < 2; m++) {
        store st;
        bindlog_stats s0, s1;
        uint64_t lsn = 99;
        store_open(&st, modes[m], 0);
        for (int i = 0; i < 50; i++)
            assert_int_equal(store_event(&st, st.s), BINDLOG_APPLIED);
        assert_int_equal(bindlog_stats_get(st.s, &s0), 0);
        assert_int_equal(s0.checkpoint_lsn, 0);
        shim_fail(SHIM_WRITE, 1, ENOSPC, -1); /* the disk is full */
        int rc = bindlog_checkpoint(st.s, &lsn);
        if (rc != BINDLOG_ENOSPC) {
            shim_fail(SHIM_WRITE, 0, 0, 0);
            fail_msg("checkpoint on a full disk: %s (%s)", bindlog_code_name(rc),
                     bindlog_last_error());
        }
        assert_int_equal(bindlog_stats_get(st.s, &s1), 0);
        assert_int_equal(s1.checkpoint_lsn, 0);
        assert_int_equal(s1.head_lsn, s0.head_lsn);
        /* the shim fails the log's writes too (a real disk would not: the
         * log's blocks are reserved): ENOSPC, never a panic */
        assert_int_equal(store_event(&st, st.s), BINDLOG_ENOSPC);
        shim_fail(SHIM_WRITE, 0, 0, 0); /* space returns */
        assert_int_equal(store_event(&st, st.s), BINDLOG_APPLIED);
        assert_int_equal(bindlog_checkpoint(st.s, &lsn), 0);
        assert_int_equal(lsn, s0.head_lsn + 1);
        print_message("  %s: checkpoint on a full disk -> %s, retried after: checkpoint at "
                      "LSN %llu\n",
                      mode_name(modes[m]), bindlog_code_name(rc), (unsigned long long)lsn);
        store_close_verify(&st, modes[m]);
    }
}

/* A full log (64 KiB here) whose checkpoint cannot write: the writer gets
 * ENOSPC, the store stays usable, and everything resumes with space.  The
 * log is filled first with the disk working; then every write fails, as
 * data.mdb's would on a full disk (the log's own would not: its blocks are
 * reserved; a full filesystem is tests/test_wal_fullfs.c). */
static void iofault__a_full_log_on_a_full_disk_is_enospc(void **state)
{
    (void)state;
    store st;
    const uint64_t cap = 64 << 10;
    int n = 0;
    store_open(&st, BINDLOG_DURABILITY_FULL, cap);
    /* every frame here has the same size (measured on the first): stop
     * when the next one no longer fits */
    uint64_t frame = 0;
    while (frame == 0 || bl_wal_used(st.s->e) + frame <= cap) {
        uint64_t used = bl_wal_used(st.s->e);
        assert_int_equal(store_event(&st, st.s), BINDLOG_APPLIED);
        if (frame == 0)
            frame = bl_wal_used(st.s->e) - used;
        n++;
    }
    shim_fail(SHIM_WRITE, 1, ENOSPC, -1);
    int rc1 = store_event(&st, st.s);
    char why[640];
    snprintf(why, sizeof why, "%s", bindlog_last_error());
    int rc2 = store_event(&st, st.s);
    bindlog_binding b;
    int rget = bindlog_get(st.s, "fault:1", &b); /* reads go on */
    shim_fail(SHIM_WRITE, 0, 0, 0); /* space returns */
    int rc3 = store_event(&st, st.s);
    print_message("  full: %d events filled the 64 KiB log; disk full: %s, %s (%s); read %s; "
                  "space back: %s\n",
                  n, bindlog_code_name(rc1), bindlog_code_name(rc2), why,
                  bindlog_code_name(rget), bindlog_code_name(rc3));
    assert_int_equal(rc1, BINDLOG_ENOSPC);
    assert_int_equal(rc2, BINDLOG_ENOSPC);
    assert_non_null(strstr(why, "log is full"));
    assert_int_equal(rget, 0);
    assert_int_equal(rc3, BINDLOG_APPLIED);
    store_close_verify(&st, BINDLOG_DURABILITY_FULL);
}

/* ---- maintenance on a failing disk ------------------------------------------- */

/* A closed store of a few hundred events (keys bound, split, compacted
 * history included), its digest in d. */
static char *maint_store(unsigned char d[BINDLOG_DIGEST_SIZE])
{
    char *dir = tu_mkdtemp("iofault-maint");
    bindlog *s;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    char key[32], sid[40];
    o.durability = BINDLOG_DURABILITY_NONE;
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    for (unsigned i = 0; i < 400; i++) {
        fu_key(key, i % 40);
        snprintf(sid, sizeof sid, "m%u", i);
        assert_int_equal(bindlog_new_session(s, key, sid, NULL, "origin", 6, NULL),
                         BINDLOG_APPLIED);
    }
    assert_int_equal(bindlog_checkpoint(s, NULL), 0);
    assert_int_equal(bindlog_digest(s, d, NULL), 0);
    bindlog_close(s);
    return dir;
}

/* The store in dir has digest d and checks clean. */
static void same_store(const char *dir, const unsigned char d[BINDLOG_DIGEST_SIZE])
{
    bindlog *s;
    bindlog_check_report chk;
    unsigned char now[BINDLOG_DIGEST_SIZE];
    if (bindlog_open(&s, dir, NULL) != 0)
        fail_msg("reopen %s: %s", dir, bindlog_last_error());
    assert_int_equal(bindlog_digest(s, now, NULL), 0);
    assert_memory_equal(now, d, BINDLOG_DIGEST_SIZE);
    assert_int_equal(bindlog_check(s, &chk, NULL, NULL), 0);
    if (chk.problems != 0)
        fail_msg("check: %s", chk.message);
    bindlog_close(s);
}

enum { OP_VACUUM, OP_COMPACT, OP_REPLAY, OP_RECOVER };

/* One maintenance call on a copy of `base`, its n-th write (sync,
 * directory operation) failing with err.  Returns the call's code; *ran: the tracked operations
 * it did. */
static int maint_once(int op, const char *base, char *copy, size_t cap, int what, long n, int err,
                      long *ran, char why[640])
{
    char cmd[3 * 4200 + 64];
    snprintf(copy, cap, "%s-%d-%ld", base, what, n);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -a '%s' '%s'", copy, base, copy);
    assert_int_equal(system(cmd), 0);
    bindlog *s = NULL;
    bindlog_options ro = BINDLOG_OPTIONS_INIT;
    char out[4300];
    int rc;
    /* replay reads the copy (read-only: it writes nothing there) and
     * writes COPY-out, which the tracked name covers too */
    snprintf(out, sizeof out, "%s-out", copy);
    ro.read_only = op == OP_REPLAY;
    shim_track(copy);
    if (op == OP_COMPACT || op == OP_REPLAY)
        assert_int_equal(bindlog_open(&s, copy, &ro), 0);
    bindlog_recover_report rep;
    long before = shim_ops(what);
    shim_fail(what, n, err, 1);
    if (op == OP_VACUUM)
        rc = bindlog_vacuum(copy, NULL, NULL);
    else if (op == OP_COMPACT)
        rc = bindlog_compact(s, 200, NULL, NULL, NULL);
    else if (op == OP_REPLAY)
        rc = bindlog_replay(s, out, UINT64_MAX, INT64_MAX, NULL, NULL, NULL, NULL);
    else
        rc = bindlog_recover(copy, out, &rep, NULL, NULL);
    *ran = shim_ops(what) - before;
    shim_fail(what, 0, 0, 0);
    snprintf(why, 640, "%s", bindlog_last_error());
    if (op == OP_RECOVER)
        bindlog_recover_report_free(&rep);
    bindlog_close(s);
    shim_track(NULL);
    return rc;
}

/* Vacuum, compaction, replay and recover with each write (ENOSPC), each
 * sync (EIO) and each directory operation (EIO: a rename, link, unlink or
 * mkdir, or a directory's flush) of the store's files failing in turn:
 * every failure is ENOSPC or EIO with a message, and the store reopens
 * with the digest it had and checks clean; the operation then succeeds. */
static void iofault__maintenance_on_a_failing_disk(void **state)
{
    (void)state;
    static const char *const names[] = {"vacuum", "compact", "replay", "recover"};
    unsigned char d[BINDLOG_DIGEST_SIZE];
    char *base = maint_store(d);
    for (int op = OP_VACUUM; op <= OP_RECOVER; op++)
        for (int what = SHIM_WRITE; what <= SHIM_DIR; what++) {
            int err = what == SHIM_WRITE ? ENOSPC : EIO, failed = 0, through = 0;
            char copy[4200], first[640] = "", why[640];
            long n, ran;
            for (n = 1;; n++) {
                int rc = maint_once(op, base, copy, sizeof copy, what, n, err, &ran, why);
                char out[4300];
                snprintf(out, sizeof out, "%s-out", copy);
                if (ran < n) { /* the sweep is over: nothing failed */
                    assert_int_equal(rc, 0);
                    same_store(copy, d);
                    if (op >= OP_REPLAY) {
                        same_store(out, d);
                        tu_rmtree(out);
                    }
                    tu_rmtree(copy);
                    break;
                }
                if (rc == 0) {
                    through++; /* a retried operation */
                } else {
                    /* a compaction whose commit failed after writing: its
                     * handle is done for (EPANIC), the store is not */
                    if (rc != BINDLOG_EIO && rc != BINDLOG_ENOSPC &&
                        !(op == OP_COMPACT && rc == BINDLOG_EPANIC))
                        fail_msg("%s, %s %ld failing: %s (%s)", names[op], fu_shim_op_name(what), n,
                                 bindlog_code_name(rc), why);
                    assert_true(why[0] != '\0');
                    if (getenv("BINDLOG_TEST_VERBOSE") != NULL)
                        print_message("    %s %ld: %s\n", fu_shim_op_name(what), n, why);
                    if (first[0] == '\0')
                        snprintf(first, sizeof first, "%s", why);
                    failed++;
                }
                same_store(copy, d);
                if (op == OP_REPLAY && rc != 0) {
                    /* nothing is left at out_dir: the call can run again */
                    struct stat st;
                    if (stat(out, &st) == 0)
                        fail_msg("replay, %s %ld failing: %s is left", fu_shim_op_name(what), n,
                                 out);
                } else if (op == OP_REPLAY || (op == OP_RECOVER && rc == 0)) {
                    same_store(out, d);
                    tu_rmtree(out);
                } else if (op == OP_RECOVER) {
                    tu_rmtree(out); /* a partial store, as the header says */
                }
                tu_rmtree(copy);
            }
            print_message("  %s, each of %ld %ss failing with %s: %d failed, %d went through; "
                          "the store kept its digest every time; the first said: %s\n",
                          names[op], n - 1, fu_shim_op_name(what), strerror(err), failed, through,
                          first);
            /* compaction works inside data.mdb: it renames nothing */
            assert_true(n > 1 || (what == SHIM_DIR && op == OP_COMPACT));
        }
    tu_rmtree(base);
    free(base);
}

/* ---- what a call says is done is on the disk ----------------------------------- */

/* Nothing a power loss could take from the store `dir` made by `what`:
 * every write to its data.mdb and bindlog.wal flushed, and every name the
 * call made (those files; the directories; `made`, NULL-terminated, the
 * directories it had to create) flushed with its directory.  The shared
 * memory and the lock files are made again at every open: nothing of
 * theirs has to last. */
static void nothing_to_lose(const char *what, const char *const *made)
{
    static const char *const files[] = {"data.mdb", BL_WAL_FILE};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        long n = shim_unsynced(files[i]);
        if (n < 0)
            fail_msg("%s: the shim saw no %s", what, files[i]);
        if (n != 0)
            fail_msg("%s: %ld write(s) to %s, or its name, not yet on the disk", what, n, files[i]);
    }
    for (size_t i = 0; made != NULL && made[i] != NULL; i++) {
        long n = shim_unsynced(made[i]);
        if (n < 0)
            fail_msg("%s: the shim saw no directory %s made", what, made[i]);
        if (n != 0)
            fail_msg("%s: the directory %s it made is not yet on the disk", what, made[i]);
    }
}

/* A new store's open in directories it makes, each of its directory
 * operations (the mkdirs, the flushes of the directories that hold what
 * it made) failing in turn: an error naming the step, and nothing left;
 * or, for those it may do without, a store. */
static void iofault__a_new_store_on_a_failing_directory(void **state)
{
    (void)state;
    char *root = tu_mkdtemp("iofault-newdir"), dir[4300], nest[4200];
    struct stat st;
    long n;
    int failed = 0;
    snprintf(nest, sizeof nest, "%s/nest", root);
    snprintf(dir, sizeof dir, "%s/store", nest);
    for (n = 1;; n++) {
        bindlog *s = NULL;
        shim_track(root);
        long before = shim_ops(SHIM_DIR);
        shim_fail(SHIM_DIR, n, EIO, 1);
        int rc = bindlog_open(&s, dir, NULL);
        long ran = shim_ops(SHIM_DIR) - before;
        shim_fail(SHIM_DIR, 0, 0, 0);
        shim_track(NULL);
        if (rc != 0) {
            assert_int_equal(rc, BINDLOG_EIO);
            if (getenv("BINDLOG_TEST_VERBOSE") != NULL)
                print_message("    directory operation %ld: %s\n", n, bindlog_last_error());
            if (stat(nest, &st) == 0)
                fail_msg("directory operation %ld failing: %s is left (%s)", n, nest,
                         bindlog_last_error());
            failed++;
            continue;
        }
        bindlog_close(s);
        tu_rmtree(nest);
        if (ran < n)
            break;
    }
    print_message("  a new store in new directories, each of %ld directory operations failing: "
                  "%d failed and left nothing\n",
                  n - 1, failed);
    assert_true(failed >= 3); /* two mkdirs and a flush at least */
    tu_rmtree(root);
    free(root);
}

/* A new store (in directories its open makes), an event in FULL, replay
 * and recover into new directories, vacuum, an import into a new store:
 * once each call returns 0, a power loss takes nothing it did. */
static void iofault__a_call_that_returned_left_nothing_to_lose(void **state)
{
    (void)state;
    char *root = tu_mkdtemp("iofault-durable"), dir[4200], out[4200];
    static const char *const made_store[] = {"nest", "store", NULL};
    static const char *const made_out[] = {"out", NULL};
    unsigned char d[BINDLOG_DIGEST_SIZE];
    bindlog *s, *t;
    bindlog_result r;

    shim_track(root);
    snprintf(dir, sizeof dir, "%s/nest/store", root);
    assert_int_equal(bindlog_open(&s, dir, NULL), 0);
    assert_int_equal(bindlog_bind(s, "k", "s1", NULL, NULL, "o", 1, &r), BINDLOG_APPLIED);
    nothing_to_lose("a new store's first event", made_store);
    assert_int_equal(bindlog_digest(s, d, NULL), 0);

    snprintf(out, sizeof out, "%s/replayed/out", root);
    assert_int_equal(bindlog_replay(s, out, UINT64_MAX, INT64_MAX, NULL, NULL, NULL, NULL), 0);
    nothing_to_lose("replay", made_out);
    bindlog_close(s);
    same_store(out, d);
    tu_rmtree(out);

    bindlog_recover_report rep;
    snprintf(out, sizeof out, "%s/recovered/out", root);
    assert_int_equal(bindlog_recover(dir, out, &rep, NULL, NULL), 0);
    bindlog_recover_report_free(&rep);
    nothing_to_lose("recover", made_out);
    same_store(out, d);
    tu_rmtree(out);

    assert_int_equal(bindlog_vacuum(dir, NULL, NULL), 0);
    nothing_to_lose("vacuum", NULL);

    char stream[4200];
    snprintf(stream, sizeof stream, "%s/stream", root);
    int fd = open(stream, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(bindlog_open(&s, dir, NULL), 0);
    assert_int_equal(bindlog_export(s, 0, fd, NULL, NULL, NULL), 0);
    bindlog_close(s);
    snprintf(out, sizeof out, "%s/imported/out", root);
    assert_int_equal(bindlog_open(&t, out, NULL), 0);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    assert_int_equal(bindlog_import(t, fd, NULL, NULL, NULL, NULL), 0);
    nothing_to_lose("import into a new store", made_out);
    bindlog_close(t);
    close(fd);
    same_store(out, d);
    shim_track(NULL);
    tu_rmtree(root);
    free(root);
}

int main(int argc, char **argv)
{
    (void)argc;
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    fu_preload_self(argv, BINDLOG_SHIM_PATH);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(iofault__one_write_and_one_flush_per_commit, need_shim),
        cmocka_unit_test_setup(iofault__a_failed_log_write_fails_only_its_group, need_shim),
        cmocka_unit_test_setup(iofault__a_failed_write_that_cannot_be_undone_panics, need_shim),
        cmocka_unit_test_setup(iofault__a_failed_flush_panics_sticky, need_shim),
        cmocka_unit_test_setup(iofault__a_checkpoint_without_space_is_retried, need_shim),
        cmocka_unit_test_setup(iofault__a_full_log_on_a_full_disk_is_enospc, need_shim),
        cmocka_unit_test_setup(iofault__maintenance_on_a_failing_disk, need_shim),
        cmocka_unit_test_setup(iofault__a_new_store_on_a_failing_directory, need_shim),
        cmocka_unit_test_setup(iofault__a_call_that_returned_left_nothing_to_lose, need_shim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
