/*
 * test_wal_fullfs.c -- the write path on a real full filesystem: a small
 * tmpfs mounted for the test, filled up.
 *
 *   - creating a store whose log does not fit is BINDLOG_ENOSPC, and leaves
 *     nothing that stops a later open once there is room;
 *   - with the disk full, writes go on into the log (its blocks were
 *     reserved at creation) until it is full and its checkpoint cannot grow
 *     data.mdb: then BINDLOG_ENOSPC, never BINDLOG_EPANIC; reads go on;
 *   - once space returns, the same handle writes again and checkpoints, and
 *     after a reopen every acknowledged event is there.
 *
 * Mounting needs root: without it (or when mount fails) the test says why
 * and skips, unless BINDLOG_REQUIRE_TMPFS=1 (CI), where that is a failure.
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
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bindlog.h"
#include "testutil.h"

typedef struct fs {
    char *mnt;
    int mounted;
} fs;

static int required(void)
{
    const char *v = getenv("BINDLOG_REQUIRE_TMPFS");
    return v != NULL && strcmp(v, "1") == 0;
}

/* Mount a tmpfs of `size` bytes for the test, or skip (fail if required). */
static int mount_tmpfs(void **state, size_t size)
{
    fs *f = calloc(1, sizeof(*f));
    char opts[64];
    assert_non_null(f);
    f->mnt = tu_mkdtemp("fullfs");
    *state = f;
    if (geteuid() != 0) {
        print_message("not root: cannot mount a tmpfs: skipped%s\n",
                      required() ? " (BINDLOG_REQUIRE_TMPFS=1: a failure)" : "");
        if (required())
            fail_msg("BINDLOG_REQUIRE_TMPFS=1 but not root");
        skip();
    }
    snprintf(opts, sizeof opts, "size=%zu,mode=0700", size);
    if (mount("tmpfs", f->mnt, "tmpfs", 0, opts) != 0) {
        int err = errno;
        print_message("mount -t tmpfs failed (%s): skipped\n", strerror(err));
        if (required())
            fail_msg("BINDLOG_REQUIRE_TMPFS=1 but mount failed: %s", strerror(err));
        skip();
    }
    f->mounted = 1;
    return 0;
}

static int setup_small(void **state) { return mount_tmpfs(state, (size_t)3 << 20); }

static int teardown(void **state)
{
    fs *f = *state;
    if (f == NULL)
        return 0;
    if (f->mounted && umount2(f->mnt, MNT_DETACH) != 0)
        print_message("umount %s: %s\n", f->mnt, strerror(errno));
    tu_rmtree(f->mnt);
    free(f->mnt);
    free(f);
    return 0;
}

/* Fill the filesystem with a file; returns its path (malloc'ed). */
static char *fill(const char *mnt)
{
    char *path = malloc(strlen(mnt) + 16);
    static char block[65536];
    assert_non_null(path);
    sprintf(path, "%s/filler", mnt);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    for (;;) {
        ssize_t w = write(fd, block, sizeof block);
        if (w < (ssize_t)sizeof block) {
            /* the last partial block, then nothing */
            while (write(fd, block, 512) > 0)
                ;
            break;
        }
    }
    close(fd);
    return path;
}

static bindlog *xopen(const char *dir, uint64_t log_size, int *rc)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.log_size = log_size;
    *rc = bindlog_open(&s, dir, &o);
    return s;
}

typedef struct ack {
    uint64_t lsn;
    char sid[40];
} ack;

static void fullfs__a_store_that_does_not_fit_is_enospc(void **state)
{
    fs *f = *state;
    char dir[4200];
    int rc;
    snprintf(dir, sizeof dir, "%s/big", f->mnt);
    /* an 8 MiB log on a 3 MiB filesystem */
    bindlog *s = xopen(dir, (uint64_t)8 << 20, &rc);
    assert_null(s);
    assert_int_equal(rc, BINDLOG_ENOSPC);
    print_message("  creating a store with an 8 MiB log on 3 MiB: %s (%s)\n",
                  bindlog_code_name(rc), bindlog_last_error());
    /* nothing left that stops a store that fits */
    s = xopen(dir, (uint64_t)256 << 10, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(bindlog_bind(s, "k", "s", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    bindlog_close(s);
}

static void fullfs__a_full_disk_is_enospc_and_the_handle_comes_back(void **state)
{
    fs *f = *state;
    char dir[4200];
    static char origin[600];
    static ack acks[100000];
    size_t n = 0;
    int rc;

    memset(origin, 'o', sizeof origin);
    snprintf(dir, sizeof dir, "%s/store", f->mnt);
    bindlog *s = xopen(dir, (uint64_t)256 << 10, &rc);
    assert_int_equal(rc, 0);
    char *filler = fill(f->mnt);

    /* write until the disk says no */
    int last = 0;
    for (int i = 0; i < 100000; i++) {
        char key[32], sid[40];
        bindlog_result r;
        snprintf(key, sizeof key, "k%d", i % 97);
        snprintf(sid, sizeof sid, "s%d", i);
        last = bindlog_bind(s, key, sid, NULL, NULL, origin, sizeof origin, &r);
        if (last != BINDLOG_APPLIED)
            break;
        acks[n].lsn = r.lsn;
        snprintf(acks[n].sid, sizeof acks[n].sid, "%s", sid);
        n++;
    }
    char why[640];
    snprintf(why, sizeof why, "%s", bindlog_last_error());
    print_message("  disk full: %zu events acknowledged, then %s (%s)\n", n,
                  bindlog_code_name(last), why);
    assert_int_equal(last, BINDLOG_ENOSPC);
    assert_true(n > 0);
    /* again: never a panic (a retried checkpoint may squeeze through: a
     * failed LMDB commit leaves data.mdb as long as the pages it wrote);
     * reads go on */
    uint64_t head = acks[n - 1].lsn, lsn;
    bindlog_result r;
    for (int i = 0; i < 5; i++) {
        rc = bindlog_invalidate(s, "k1", NULL, &r);
        assert_true(rc == BINDLOG_ENOSPC || rc == BINDLOG_APPLIED);
        head += rc == BINDLOG_APPLIED;
        rc = bindlog_checkpoint(s, &lsn);
        assert_true(rc == BINDLOG_ENOSPC || rc == 0);
    }
    bindlog_binding b;
    assert_int_equal(bindlog_get(s, "k1", &b), 0);

    /* space returns: the same handle writes and folds again */
    assert_int_equal(unlink(filler), 0);
    free(filler);
    assert_int_equal(bindlog_invalidate(s, "k1", NULL, &r), BINDLOG_APPLIED);
    assert_int_equal(r.lsn, head + 1);
    assert_int_equal(bindlog_checkpoint(s, &lsn), 0);
    assert_int_equal(lsn, head + 1);
    bindlog_close(s);

    /* reopened: every acknowledged event is there */
    s = xopen(dir, 0, &rc);
    assert_int_equal(rc, 0);
    bindlog_iter *it;
    bindlog_record rec;
    size_t i = 0;
    assert_int_equal(bindlog_log_iter(s, 1, UINT64_MAX, &it), 0);
    while (i < n && bindlog_iter_next_record(it, &rec) == 1) {
        assert_int_equal(rec.lsn, acks[i].lsn);
        assert_string_equal(rec.session_id, acks[i].sid);
        i++;
    }
    bindlog_iter_close(it);
    assert_int_equal(i, n);
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 0);
    bindlog_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(fullfs__a_store_that_does_not_fit_is_enospc, setup_small,
                                        teardown),
        cmocka_unit_test_setup_teardown(fullfs__a_full_disk_is_enospc_and_the_handle_comes_back,
                                        setup_small, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
