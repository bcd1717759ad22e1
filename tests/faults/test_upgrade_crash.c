/*
 * test_upgrade_crash.c -- bindlog_upgrade() killed at every step, and at
 * random moments: the store always opens, as the old one or the new one,
 * and a second run finishes the job.  Linked with bindlog_faults.
 *
 * The steps (src/maint/upgrade.c): upgrade.built (the new store built,
 * checked and synced in DIR/.bindlog-upgrade), upgrade.backup (the old
 * data.mdb linked as format1-backup/data.mdb), upgrade.wal (the new log
 * renamed into DIR), upgrade.switch (the new data.mdb renamed over the
 * old: the commit point), upgrade.clean (the staging directory removed).
 *
 * After a kill before the switch, the store is the format-1 store, byte
 * for byte (opening says BINDLOG_EVERSION); after it, the format-2 store
 * with the old state digest, clean.  Either way, running the upgrade
 * again ends with the format-2 store, the state format-1 code recorded
 * (tests/data/format1/expected.txt) and the old data.mdb as its backup.
 * eio at a step before the switch: the call fails and leaves nothing.
 *
 * A store of format 3 to 6 (tests/data/format3 to format6) is first
 * drained: opened as a writer and closed, which checkpoints its log into
 * data.mdb, so its bytes change but not its state; killed at each step, it
 * opens as the old store (BINDLOG_EVERSION) or the new one, and a second
 * run finishes.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"
#include "core/failpoint.h"
#include "faultutil.h"
#include "shim.h"
#include "testutil.h"

#define TARBALL_DIR BINDLOG_TEST_DATA_DIR "/format%d/stores.tar.gz"
#define EXPECTED_DIR BINDLOG_TEST_DATA_DIR "/format%d/expected.txt"

static void set_failpoint(const char *spec)
{
    if (spec != NULL)
        setenv("BINDLOG_FAILPOINT", spec, 1);
    else
        unsetenv("BINDLOG_FAILPOINT");
    bl_failpoint_reset();
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(n > 0 ? (size_t)n : 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

typedef struct fx {
    char *tmp;
    char dir[1024];
    const char *which;
    int fmt; /* the golden store's format */
    unsigned char *orig;
    size_t orig_len;
    char digest[33];
} fx;

static fx *extract_fmt(int fmt, const char *which)
{
    fx *f = calloc(1, sizeof *f);
    char cmd[4096], path[1100], name[64], field[64], value[33], tarball[1024], expected[1024];
    assert_non_null(f);
    f->which = which;
    f->fmt = fmt;
    f->tmp = tu_mkdtemp("upcrash");
    snprintf(tarball, sizeof tarball, TARBALL_DIR, fmt);
    snprintf(expected, sizeof expected, EXPECTED_DIR, fmt);
    snprintf(cmd, sizeof cmd, "tar -C '%s' -xzf '%s' '%s'", f->tmp, tarball, which);
    assert_int_equal(system(cmd), 0);
    snprintf(f->dir, sizeof f->dir, "%s/%s", f->tmp, which);
    snprintf(path, sizeof path, "%s/data.mdb", f->dir);
    f->orig = slurp(path, &f->orig_len);
    assert_non_null(f->orig);
    FILE *e = fopen(expected, "r");
    assert_non_null(e);
    while (fscanf(e, "%63s %63s %32s", name, field, value) == 3)
        if (strcmp(name, which) == 0 && strcmp(field, "digest") == 0)
            memcpy(f->digest, value, sizeof f->digest);
    fclose(e);
    assert_int_equal(strlen(f->digest), 32);
    return f;
}

static fx *extract(const char *which) { return extract_fmt(1, which); }

static void fx_free(fx *f)
{
    tu_rmtree(f->tmp);
    free(f->tmp);
    free(f->orig);
    free(f);
}

static int exists(const char *dir, const char *name)
{
    char p[1200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

static void same_file(const char *path, const fx *f)
{
    size_t n;
    unsigned char *b = slurp(path, &n);
    assert_non_null(b);
    assert_int_equal(n, f->orig_len);
    assert_memory_equal(b, f->orig, n);
    free(b);
}

/* The format-2 store with format-1 code's state, clean. */
static void is_new_store(const fx *f)
{
    bindlog *s;
    bindlog_check_report chk;
    unsigned char d[BINDLOG_DIGEST_SIZE];
    char hex[33];
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.read_only = 1;
    assert_int_equal(bindlog_open(&s, f->dir, &o), 0);
    assert_int_equal(bindlog_digest(s, d, NULL), 0);
    bindlog_digest_hex(d, hex);
    assert_string_equal(hex, f->digest);
    assert_int_equal(bindlog_check(s, &chk, NULL, NULL), 0);
    assert_int_equal(chk.problems, 0);
    bindlog_close(s);
}

/* What a crash or a failure left: 1 the format-1 store as it was, 2 the
 * new store.  Never anything else. */
static int which_store(const fx *f)
{
    bindlog *s;
    char path[1100];
    int rc = bindlog_open(&s, f->dir, NULL);
    if (rc == BINDLOG_EVERSION) {
        /* format 1 as it was, byte for byte; a format-3 store may have been
         * drained (its log checkpointed into data.mdb) */
        snprintf(path, sizeof path, "%s/data.mdb", f->dir);
        if (f->fmt == 1) {
            same_file(path, f);
        } else {
            char says[32];
            snprintf(says, sizeof says, "format %d", f->fmt);
            assert_non_null(strstr(bindlog_last_error(), says));
        }
        return 1;
    }
    assert_int_equal(rc, 0);
    bindlog_close(s);
    is_new_store(f);
    return 2;
}

/* Run the upgrade again, without failpoints: it must end the job. */
static void finish(const fx *f, int had)
{
    bindlog_upgrade_report r;
    char path[1100];
    set_failpoint(NULL);
    int rc = bindlog_upgrade(f->dir, NULL, &r, NULL, NULL);
    if (rc != 0)
        fail_msg("the second upgrade of %s (format %d): %s", f->which, f->fmt,
                 bindlog_last_error());
    assert_int_equal(r.upgraded, had == 1);
    is_new_store(f);
    snprintf(path, sizeof path, "%s/format%d-backup/data.mdb", f->dir, f->fmt);
    if (f->fmt == 1)
        same_file(path, f);
    else
        assert_true(exists(f->dir, path + strlen(f->dir) + 1));
    assert_false(exists(f->dir, ".bindlog-upgrade"));
}

/* A child runs the upgrade with `spec` armed; returns how it ended. */
static int child_upgrade(const fx *f, const char *spec)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        bindlog_upgrade_report r;
        set_failpoint(spec);
        _exit(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL) == 0 ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void upgrade_crash__kill_at_each_step(void **state)
{
    (void)state;
    static const struct {
        const char *point;
        int leaves;
    } steps[] = {{"upgrade.built", 1},
                 {"upgrade.backup", 1},
                 {"upgrade.wal", 1},
                 {"upgrade.switch", 2},
                 {"upgrade.clean", 2}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        for (int c = 0; c < 2; c++) {
            fx *f = extract(c ? "compacted" : "plain");
            char spec[64];
            snprintf(spec, sizeof spec, "%s:kill", steps[i].point);
            int status = child_upgrade(f, spec);
            /* died at the point, or the case proves nothing */
            assert_true(WIFSIGNALED(status));
            assert_int_equal(WTERMSIG(status), SIGKILL);
            int had = which_store(f);
            if (had != steps[i].leaves)
                fail_msg("killed at %s: the store is format %d", steps[i].point, had);
            finish(f, had);
            fx_free(f);
        }
    }
}

/* The same on stores of formats 3 to 6: one closed cleanly, one whose
 * last records were only in bindlog.wal. */
static void kill_at_each_step(int fmt)
{
    static const struct {
        const char *point;
        int leaves;
    } steps[] = {{"upgrade.built", 1},
                 {"upgrade.backup", 1},
                 {"upgrade.wal", 1},
                 {"upgrade.switch", 2},
                 {"upgrade.clean", 2}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        for (int c = 0; c < 2; c++) {
            fx *f = extract_fmt(fmt, c ? "crashed" : "plain");
            char spec[64];
            snprintf(spec, sizeof spec, "%s:kill", steps[i].point);
            int status = child_upgrade(f, spec);
            assert_true(WIFSIGNALED(status));
            assert_int_equal(WTERMSIG(status), SIGKILL);
            int had = which_store(f);
            if (had != steps[i].leaves)
                fail_msg("format %d killed at %s: the store is %s", fmt, steps[i].point,
                         had == 1 ? "the old one" : "the new one");
            finish(f, had);
            fx_free(f);
        }
    }
    /* eio after the new log went in: the old log is put back */
    fx *f = extract_fmt(fmt, "crashed");
    bindlog_upgrade_report r;
    char backup[32];
    snprintf(backup, sizeof backup, "format%d-backup", fmt);
    set_failpoint("upgrade.wal:eio");
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), BINDLOG_EIO);
    assert_int_equal(which_store(f), 1);
    assert_false(exists(f->dir, backup));
    finish(f, 1);
    fx_free(f);
}

static void upgrade_crash__format3_kill_at_each_step(void **state)
{
    (void)state;
    kill_at_each_step(3);
}

/* Format 4: whole session values read, references written. */
static void upgrade_crash__format4_kill_at_each_step(void **state)
{
    (void)state;
    kill_at_each_step(4);
}

/* Format 5: references read (the digest by the library), the sibling
 * chain written. */
static void upgrade_crash__format5_kill_at_each_step(void **state)
{
    (void)state;
    kill_at_each_step(5);
}

/* Format 6: the sibling chain read, every record re-derived in version 4
 * (UUIDs in 16 bytes). */
static void upgrade_crash__format6_kill_at_each_step(void **state)
{
    (void)state;
    kill_at_each_step(6);
}

/* The drain's checkpoint waits for the whole-store page walk however long
 * it takes.  A close alone gives the walk 100 ms and leaves the log
 * unfolded after that, which the upgrade took for a writer that came in
 * (BINDLOG_EBUSY, every time, on a store of a few hundred MB).  The
 * close.walk failpoint makes a close behave so (shown first on a store of
 * the current format); the stores of formats 5 and 6 whose last records
 * are in bindlog.wal only upgrade all the same. */
static void upgrade_crash__a_close_that_leaves_the_log_still_drains(void **state)
{
    (void)state;
    char *tmp = tu_mkdtemp("upwalk");
    char dir[1100];
    bindlog *s;
    bindlog_stats st;
    snprintf(dir, sizeof dir, "%s/s", tmp);
    /* no background checkpointer, which could fold the event first */
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    assert_int_equal(bindlog_open(&s, dir, NULL), 0);
    assert_int_equal(bindlog_bind(s, "k", "a", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    set_failpoint("close.walk:eio");
    bindlog_close(s);
    unsetenv("BINDLOG_CHECKPOINT");
    assert_int_equal(bl_failpoint_hits("close.walk"), 1);
    set_failpoint(NULL);
    bindlog_options ro = BINDLOG_OPTIONS_INIT;
    ro.read_only = 1;
    assert_int_equal(bindlog_open(&s, dir, &ro), 0);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 1);
    assert_int_equal(st.checkpoint_lsn, 0); /* the log was left to the next writer */
    bindlog_close(s);
    tu_rmtree(tmp);
    free(tmp);

    for (int fmt = 5; fmt <= 6; fmt++) {
        fx *f = extract_fmt(fmt, "crashed");
        bindlog_upgrade_report r;
        set_failpoint("close.walk:eio");
        int rc = bindlog_upgrade(f->dir, NULL, &r, NULL, NULL);
        set_failpoint(NULL);
        if (rc != 0)
            fail_msg("format %d: %s", fmt, bindlog_last_error());
        assert_int_equal(r.upgraded, 1);
        assert_int_equal(r.from_format, fmt);
        is_new_store(f);
        fx_free(f);
    }
}

static void upgrade_crash__eio_before_the_switch_leaves_nothing(void **state)
{
    (void)state;
    static const char *const points[] = {"upgrade.built", "upgrade.backup", "upgrade.wal"};
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++) {
        fx *f = extract("plain");
        bindlog_upgrade_report r;
        char spec[64];
        snprintf(spec, sizeof spec, "%s:eio", points[i]);
        set_failpoint(spec);
        assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), BINDLOG_EIO);
        assert_non_null(strstr(bindlog_last_error(), points[i]));
        assert_int_equal(r.upgraded, 0);
        assert_int_equal(which_store(f), 1);
        assert_false(exists(f->dir, "bindlog.wal"));
        assert_false(exists(f->dir, ".bindlog-upgrade"));
        assert_false(exists(f->dir, "format1-backup"));
        finish(f, 1);
        fx_free(f);
    }
}

/* kill -9 from outside, at moments spread over the upgrade's run (about
 * 15 ms on a quiet machine).  BINDLOG_UPGRADE_KILLS=N runs N (default 16;
 * docs/reliability.md has a long run's figures). */
static void upgrade_crash__kill_anywhere(void **state)
{
    (void)state;
    int seen[3] = {0, 0, 0};
    const char *env = getenv("BINDLOG_UPGRADE_KILLS");
    int n = env != NULL && atoi(env) > 0 ? atoi(env) : 16;
    srand(7);
    for (int i = 0; i < n; i++) {
        fx *f = extract(i % 2 ? "compacted" : "plain");
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            bindlog_upgrade_report r;
            set_failpoint(NULL);
            _exit(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL) == 0 ? 0 : 1);
        }
        /* 0 .. 22 ms in steps, plus up to 1 ms at random */
        struct timespec ts = {0, (long)(i % 16) * 1500000L + rand() % 1000000};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (WIFEXITED(status))
            assert_int_equal(WEXITSTATUS(status), 0);
        int had = which_store(f);
        seen[had]++;
        finish(f, had);
        fx_free(f);
    }
    print_message("kill -9 anywhere: %d left the old store, %d the new one\n", seen[1], seen[2]);
}

/* A file system without hard links (failpoint upgrade.nolink): the backup
 * is a copy of the old data.mdb, byte for byte. */
static void upgrade_crash__backup_by_copy(void **state)
{
    (void)state;
    fx *f = extract("compacted");
    bindlog_upgrade_report r;
    char path[1100];
    struct stat a, b;
    set_failpoint("upgrade.nolink:eio");
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), 0);
    set_failpoint(NULL);
    assert_int_equal(r.upgraded, 1);
    is_new_store(f);
    snprintf(path, sizeof path, "%s/format1-backup/data.mdb", f->dir);
    same_file(path, f);
    assert_int_equal(stat(path, &a), 0);
    snprintf(path, sizeof path, "%s/data.mdb", f->dir);
    assert_int_equal(stat(path, &b), 0);
    assert_int_equal(a.st_nlink, 1); /* a copy, not a link */
    assert_true(a.st_ino != b.st_ino);
    assert_false(exists(f->dir, "format1-backup/data.mdb.tmp"));
    fx_free(f);
}

/* ---- a failing disk: every write, every sync ------------------------------------ */

/* The upgrade with the n-th write (sync, directory operation) of the
 * store's files failing with err, and count-1 after it (-1: all), for
 * n = 1, 2, ... until the upgrade does fewer than n: each
 * failure is an error naming it, leaves the old store or the new one
 * (which_store), and a second run finishes.  An upgrade that returns 0
 * although an operation failed would be silent damage: never. */
static void fail_each(int fmt, const char *which, int what, int err, long count)
{
    shim_track_fn track = (shim_track_fn)fu_shim_sym("bl_shim_track");
    shim_fail_fn arm = (shim_fail_fn)fu_shim_sym("bl_shim_fail");
    shim_ops_fn ops = (shim_ops_fn)fu_shim_sym("bl_shim_ops");
    shim_unsynced_fn unsynced = (shim_unsynced_fn)fu_shim_sym("bl_shim_unsynced");
    if (track == NULL || arm == NULL || ops == NULL || unsynced == NULL) {
        print_message("the shim is not preloaded: skipped\n");
        skip();
    }
    int left[3] = {0, 0, 0}, staging_left = 0;
    char first[600] = "";
    long n;
    for (n = 1;; n++) {
        fx *f = extract_fmt(fmt, which);
        bindlog_upgrade_report r;
        set_failpoint(NULL);
        track(f->dir);
        long before = ops(what);
        arm(what, n, err, count);
        int rc = bindlog_upgrade(f->dir, NULL, &r, NULL, NULL);
        long done = ops(what) - before;
        if (done >= n)
            track(NULL);
        arm(what, 0, 0, 0);
        if (done < n) { /* ran out of operations: the sweep is over */
            assert_int_equal(rc, 0);
            /* and what it did lasts: every write and every name it made
             * (the new files, the backup's) flushed */
            char backup[32];
            snprintf(backup, sizeof backup, "format%d-backup", fmt);
            const char *const names[] = {"data.mdb", "bindlog.wal", backup};
            for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
                if (unsynced(names[i]) != 0)
                    fail_msg("format %d %s: %s (%ld) is not all on the disk after the upgrade", fmt,
                             which, names[i], unsynced(names[i]));
            track(NULL);
            assert_int_equal(r.staging_left, 0);
            assert_false(exists(f->dir, ".bindlog-upgrade"));
            is_new_store(f);
            fx_free(f);
            break;
        }
        if (rc == 0) {
            /* the failed operation was retried (a checkpoint is), or was
             * tidying after the switch (whatever it left, the next
             * upgrade removes): the new store, whole */
            if (getenv("BINDLOG_TEST_VERBOSE") != NULL)
                print_message("    %s %ld: went through%s\n", fu_shim_op_name(what), n,
                              r.staging_left ? ", the staging directory left" : "");
            /* the report says whether it left the staging directory */
            assert_int_equal(r.staging_left, exists(f->dir, ".bindlog-upgrade"));
            staging_left += r.staging_left;
            is_new_store(f);
            finish(f, 2);
            left[0]++;
            fx_free(f);
            continue;
        }
        if (rc != BINDLOG_EIO && rc != BINDLOG_ENOSPC)
            fail_msg("format %d %s, %s %ld failed: %s (%s)", fmt, which, fu_shim_op_name(what), n,
                     bindlog_code_name(rc), bindlog_last_error());
        assert_true(bindlog_last_error()[0] != '\0');
        if (getenv("BINDLOG_TEST_VERBOSE") != NULL)
            print_message("    %s %ld: %s\n", fu_shim_op_name(what), n, bindlog_last_error());
        if (first[0] == '\0')
            snprintf(first, sizeof first, "%s", bindlog_last_error());
        int had = which_store(f);
        left[had]++;
        finish(f, had);
        fx_free(f);
    }
    print_message("  format %d %s, each of %ld %ss failing with %s%s: %d left the old store, "
                  "%d the new one, %d went through (retried, or tidying after the switch: %d "
                  "reported the staging directory left); the first said: %s\n",
                  fmt, which, n - 1, fu_shim_op_name(what), strerror(err),
                  count < 0 ? ", and every one after it" : "", left[1], left[2], left[0],
                  staging_left, first);
    assert_true(n > 2); /* the sweep failed something */
    if (what == SHIM_DIR)
        assert_true(staging_left > 0); /* the removals after the switch were failed too */
}

static void upgrade_crash__a_failing_disk_at_every_write_and_sync(void **state)
{
    (void)state;
    fail_each(1, "plain", SHIM_WRITE, ENOSPC, 1);
    fail_each(1, "plain", SHIM_SYNC, EIO, 1);
    fail_each(6, "crashed", SHIM_WRITE, ENOSPC, 1);
    fail_each(6, "crashed", SHIM_SYNC, EIO, 1);
    /* a disk that stays failing: the undo of each failure fails too, and
     * the next upgrade (the disk well again) still finishes the job */
    fail_each(1, "plain", SHIM_WRITE, EIO, -1);
    fail_each(6, "crashed", SHIM_SYNC, EIO, -1);
}

/* Every rename, link, unlink and mkdir under the store, and every flush of
 * its directories, failing in turn: the steps around the commit point (the
 * new log's rename and its directory flush, the switch, the flush after
 * it), the backup's link, the staging directory's making and removal, and
 * the undo of each failure. */
static void upgrade_crash__a_failing_directory_at_every_operation(void **state)
{
    (void)state;
    fail_each(1, "plain", SHIM_DIR, EIO, 1);
    fail_each(6, "crashed", SHIM_DIR, EIO, 1);
    fail_each(1, "plain", SHIM_DIR, EIO, -1);
    fail_each(6, "crashed", SHIM_DIR, EIO, -1);
}

int main(int argc, char **argv)
{
    (void)argc;
    fu_preload_self(argv, BINDLOG_SHIM_PATH);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(upgrade_crash__kill_at_each_step),
        cmocka_unit_test(upgrade_crash__format3_kill_at_each_step),
        cmocka_unit_test(upgrade_crash__format4_kill_at_each_step),
        cmocka_unit_test(upgrade_crash__format5_kill_at_each_step),
        cmocka_unit_test(upgrade_crash__format6_kill_at_each_step),
        cmocka_unit_test(upgrade_crash__a_close_that_leaves_the_log_still_drains),
        cmocka_unit_test(upgrade_crash__eio_before_the_switch_leaves_nothing),
        cmocka_unit_test(upgrade_crash__kill_anywhere),
        cmocka_unit_test(upgrade_crash__backup_by_copy),
        cmocka_unit_test(upgrade_crash__a_failing_disk_at_every_write_and_sync),
        cmocka_unit_test(upgrade_crash__a_failing_directory_at_every_operation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
