/*
 * test_fullfs.c -- a full disk, on a real file system: a small tmpfs.
 *
 * The fault shim (tests/faults) makes write() fail on demand; this test
 * lets the kernel do it, on a 4 MiB tmpfs mounted in a private mount
 * namespace (so the mount goes away with the process, whatever happens),
 * filled up with a filler file.  It checks what issue 16 found crashing or
 * left half-made on a full disk:
 *
 *   - creating a store: BINDLOG_ENOSPC (never SIGBUS, never a half-made
 *     store that breaks the next open), at every amount of room left;
 *   - opening a store whose lock.mdb is missing: BINDLOG_ENOSPC, nothing
 *     created, the store intact once space returns;
 *   - importing into a new directory (the CLI): refused, nothing left;
 *   - every event acknowledged before the disk filled is there once space
 *     returns.
 *
 * The write path's own behaviour on a full disk (ENOSPC rather than
 * EPANIC, the handle usable again) belongs to the write-ahead log that is
 * replacing it: fs_store_nearly_full() gives such cases a store on a
 * nearly full tmpfs.
 *
 * Mounting needs root (CAP_SYS_ADMIN).  Without it, or when the mount
 * fails, the test says why and skips; with BINDLOG_REQUIRE_TMPFS=1 (CI sets
 * it) a skip is a failure.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindlog.h"
#include "testutil.h"

#define FS_SIZE "16m" /* room for the CLI's store with its default 8 MiB log */

typedef struct fs {
    char *base;      /* a test temporary directory (on the real disk) */
    char mnt[1024];  /* the tmpfs */
    char filler[1100];
    int mounted;
    int64_t now;
} fs;

static char skip_reason[256];

/* ---- the harness ---------------------------------------------------------- */

/* Once per process, before any thread exists: a private mount namespace
 * (unshare(CLONE_NEWNS) requires a single-threaded caller), so that no
 * mount outlives the test.  0, or -1 with skip_reason set. */
static int fs_namespace(void)
{
    if (geteuid() != 0) {
        snprintf(skip_reason, sizeof(skip_reason), "not running as root: cannot mount a tmpfs");
        return -1;
    }
    if (unshare(CLONE_NEWNS) != 0) {
        snprintf(skip_reason, sizeof(skip_reason), "unshare(CLONE_NEWNS): %s", strerror(errno));
        return -1;
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        snprintf(skip_reason, sizeof(skip_reason), "making / private: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static int64_t fs_clock(void *ctx)
{
    int64_t *t = ctx;
    return *t += 7;
}

static int setup(void **state)
{
    fs *f = calloc(1, sizeof(*f));
    f->base = tu_mkdtemp("fullfs");
    snprintf(f->mnt, sizeof(f->mnt), "%s/mnt", f->base);
    snprintf(f->filler, sizeof(f->filler), "%s/filler", f->mnt);
    assert_int_equal(mkdir(f->mnt, 0700), 0);
    if (mount("tmpfs", f->mnt, "tmpfs", MS_NOSUID | MS_NODEV, "size=" FS_SIZE ",mode=0700") != 0)
        fail_msg("mount tmpfs on %s: %s", f->mnt, strerror(errno));
    f->mounted = 1;
    f->now = 1767225600000;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fs *f = *state;
    if (f->mounted && umount2(f->mnt, MNT_DETACH) != 0)
        fprintf(stderr, "umount %s: %s\n", f->mnt, strerror(errno));
    tu_rmtree(f->base);
    free(f->base);
    free(f);
    return 0;
}

static uint64_t fs_free_bytes(const fs *f)
{
    struct statvfs v;
    assert_int_equal(statvfs(f->mnt, &v), 0);
    return (uint64_t)v.f_bavail * v.f_frsize;
}

/* Fill the tmpfs until `leave` bytes are free (page-rounded by tmpfs). */
static void fs_fill(fs *f, uint64_t leave)
{
    static const char zeros[65536];
    int fd = open(f->filler, O_WRONLY | O_CREAT | O_APPEND, 0600);
    assert_true(fd >= 0);
    for (;;) {
        ssize_t n = write(fd, zeros, sizeof(zeros));
        if (n > 0)
            continue;
        if (n < 0 && errno != ENOSPC)
            fail_msg("filling %s: %s", f->mnt, strerror(errno));
        break;
    }
    for (;;) { /* the last pages, smaller than a write */
        ssize_t n = write(fd, zeros, 1);
        if (n <= 0)
            break;
    }
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    if (leave > 0)
        assert_int_equal(ftruncate(fd, st.st_size > (off_t)leave ? st.st_size - (off_t)leave : 0),
                         0);
    close(fd);
    uint64_t got = fs_free_bytes(f);
    if (got < leave || got > leave + 4096)
        fail_msg("tmpfs has %llu bytes free, wanted %llu", (unsigned long long)got,
                 (unsigned long long)leave);
}

/* Give the space back. */
static void fs_unfill(fs *f)
{
    if (unlink(f->filler) != 0 && errno != ENOENT)
        fail_msg("unlink %s: %s", f->filler, strerror(errno));
}

static bindlog *fs_open(fs *f, const char *dir, int read_only, int *rc)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.read_only = read_only;
    o.log_size = 64 * 1024; /* the smallest log: creation fits in a few pages */
    o.clock_ms = fs_clock;
    o.clock_ctx = &f->now;
    *rc = bindlog_open(&s, dir, &o);
    return s;
}

static void bind_n(bindlog *s, int from, int n)
{
    for (int i = from; i < from + n; i++) {
        char key[64], sid[64];
        snprintf(key, sizeof(key), "agent:main:telegram:dm:%d", i);
        snprintf(sid, sizeof(sid), "sess-%d", i);
        assert_int_equal(bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    }
}

/*
 * The helper for write-path cases: a store at <mnt>/<name> with `events`
 * events, on a tmpfs then filled to `headroom` free bytes.  Returns the
 * open handle (FULL durability).
 */
static bindlog *fs_store_nearly_full(fs *f, const char *name, int events, uint64_t headroom)
{
    char dir[1100];
    int rc;
    snprintf(dir, sizeof(dir), "%s/%s", f->mnt, name);
    bindlog *s = fs_open(f, dir, 0, &rc);
    if (rc != 0)
        fail_msg("open %s: %s", dir, bindlog_last_error());
    bind_n(s, 0, events);
    fs_fill(f, headroom);
    return s;
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* The names in dir but the filler, sorted, joined by spaces. */
static void listing(const char *dir, char *out, size_t cap)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    out[0] = '\0';
    assert_true(n >= 0);
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (strcmp(nm, ".") != 0 && strcmp(nm, "..") != 0 && strcmp(nm, "filler") != 0) {
            if (out[0])
                strncat(out, " ", cap - strlen(out) - 1);
            strncat(out, nm, cap - strlen(out) - 1);
        }
        free(names[i]);
    }
    free(names);
}

/* ---- cases ---------------------------------------------------------------- */

/* Creating a store on a full disk died of SIGBUS in mdb_env_open (lock.mdb
 * mapped but never allocated).  At every amount of room, from none to
 * enough: ENOSPC with nothing left behind, or a working store. */
static void fullfs__create_store_enospc(void **state)
{
    fs *f = *state;
    char dir[1100], left[512];
    int enospc = 0, made = 0;

    snprintf(dir, sizeof(dir), "%s/new/store", f->mnt);
    for (uint64_t room = 0; room <= 128 * 1024; room += 4096) {
        int rc;
        fs_fill(f, room);
        bindlog *s = fs_open(f, dir, 0, &rc);
        if (rc == 0) {
            /* it fitted: a store that works */
            made++;
            bindlog_close(s);
        } else {
            if (rc != BINDLOG_ENOSPC)
                fail_msg("%llu bytes free: open gave %s (%s)", (unsigned long long)room,
                         bindlog_code_name(rc), bindlog_last_error());
            enospc++;
            listing(f->mnt, left, sizeof(left));
            if (left[0] != '\0')
                fail_msg("%llu bytes free: the failed open left \"%s\"",
                         (unsigned long long)room, left);
        }
        fs_unfill(f);
        /* whatever happened, a later open makes or opens a store that works */
        s = fs_open(f, dir, 0, &rc);
        if (rc != 0)
            fail_msg("after %llu bytes free: reopen gave %s", (unsigned long long)room,
                     bindlog_last_error());
        bind_n(s, 0, 1);
        bindlog_close(s);
        char rm[1200];
        snprintf(rm, sizeof(rm), "%s/new", f->mnt);
        tu_rmtree(rm);
    }
    print_message("create a store at 0..128 KB free: %d ENOSPC, %d made\n", enospc, made);
    assert_true(enospc > 0); /* the sweep did reach a full disk */
    assert_true(made > 0);   /* ... and enough room */
}

/* `stat` with lock.mdb missing on a full disk: SIGBUS.  Now ENOSPC for
 * readers and writers, nothing created, and the store intact later. */
static void fullfs__open_with_lock_missing_enospc(void **state)
{
    fs *f = *state;
    char dir[1100], lock[1200], left[512];
    unsigned char d1[BINDLOG_DIGEST_SIZE], d2[BINDLOG_DIGEST_SIZE];
    int rc;

    snprintf(dir, sizeof(dir), "%s/store", f->mnt);
    snprintf(lock, sizeof(lock), "%s/lock.mdb", dir);
    bindlog *s = fs_open(f, dir, 0, &rc);
    assert_int_equal(rc, 0);
    bind_n(s, 0, 50);
    assert_int_equal(bindlog_digest(s, d1, NULL), 0);
    bindlog_close(s);
    assert_int_equal(unlink(lock), 0);

    fs_fill(f, 0);
    for (int ro = 1; ro >= 0; ro--) {
        s = fs_open(f, dir, ro, &rc);
        assert_null(s);
        if (rc != BINDLOG_ENOSPC)
            fail_msg("read_only=%d: %s", ro, bindlog_last_error());
        if (strstr(bindlog_last_error(), "lock.mdb") == NULL)
            fail_msg("the message does not name lock.mdb: %s", bindlog_last_error());
        assert_false(exists(lock));
        listing(dir, left, sizeof(left));
        assert_string_equal(left, "bindlog.lock bindlog.shm bindlog.wal data.mdb");
    }
    fs_unfill(f);
    s = fs_open(f, dir, 1, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(bindlog_digest(s, d2, NULL), 0);
    assert_memory_equal(d1, d2, sizeof(d1));
    bindlog_close(s);
}

/* Every event acknowledged before the disk filled is there once space
 * returns; the store checks clean. */
static void fullfs__acknowledged_events_survive(void **state)
{
    fs *f = *state;
    char dir[1100];
    int rc, acked = 0, err = 0;

    bindlog *s = fs_store_nearly_full(f, "store", 20, 256 * 1024);
    for (int i = 20; i < 100000; i++) {
        char key[64], sid[64];
        snprintf(key, sizeof(key), "agent:main:telegram:dm:%d", i);
        snprintf(sid, sizeof(sid), "sess-%d-with-a-longer-id-to-fill-pages", i);
        rc = bindlog_bind(s, key, sid, NULL, NULL, "origin bytes", 12, NULL);
        if (rc != BINDLOG_APPLIED) {
            err = rc;
            break;
        }
        acked = i + 1;
    }
    /* today's write path says ENOSPC or, on a short write, EPANIC; either
     * way the disk did fill */
    assert_true(err == BINDLOG_ENOSPC || err == BINDLOG_EPANIC || err == BINDLOG_EIO);
    bindlog_close(s);
    fs_unfill(f);

    snprintf(dir, sizeof(dir), "%s/store", f->mnt);
    s = fs_open(f, dir, 1, &rc);
    assert_int_equal(rc, 0);
    for (int i = 0; i < acked; i++) {
        char key[64];
        bindlog_binding b;
        snprintf(key, sizeof(key), "agent:main:telegram:dm:%d", i);
        if (bindlog_get(s, key, &b) != 0)
            fail_msg("event %d of %d acknowledged before the disk filled is gone", i, acked);
    }
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_true(st.head_lsn >= (uint64_t)acked);
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 0);
    bindlog_close(s);
    print_message("%d events acknowledged before the disk filled (then %s), all there\n", acked,
                  bindlog_code_name(err));
}

/* Run the CLI; its stderr into err (cap bytes).  The exit status. */
static int run_cli(char *err, size_t cap, const char *const argv[])
{
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pipefd[1]);
    size_t n = 0;
    ssize_t r;
    while ((r = read(pipefd[0], err + n, cap - 1 - n)) > 0 && n + 1 < cap)
        n += (size_t)r;
    err[n] = '\0';
    close(pipefd[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status))
        fail_msg("%s died of signal %d: %s", argv[0], WTERMSIG(status), err);
    return WEXITSTATUS(status);
}

/* Importing into a new directory on a full disk died of SIGBUS; a refused
 * import must leave nothing.  At every amount of room: refused (exit 3,
 * ENOSPC) with nothing left in the file system, or a store that checks. */
static void fullfs__import_into_new_directory(void **state)
{
    fs *f = *state;
    const char *cli = getenv("BINDLOG_CLI");
    char src[1100], stream[1100], dir[1100], err[4096], left[512];
    int rc, refused = 0, imported = 0;

    if (cli == NULL || cli[0] == '\0') {
        print_message("BINDLOG_CLI not set (no tools in this build): case skipped\n");
        skip();
    }
    /* the stream comes from a store on the real disk */
    snprintf(src, sizeof(src), "%s/src", f->base);
    snprintf(stream, sizeof(stream), "%s/stream.bls", f->base);
    bindlog *s = fs_open(f, src, 0, &rc);
    assert_int_equal(rc, 0);
    bind_n(s, 0, 400);
    int fd = open(stream, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_int_equal(bindlog_export(s, 0, fd, NULL, NULL, NULL), 0);
    close(fd);
    bindlog_close(s);

    snprintf(dir, sizeof(dir), "%s/restored", f->mnt);
    /* the CLI creates the store with the default log (8 MiB, reserved) */
    for (uint64_t room = 0; room <= 10 << 20;
         room += room < 64 * 1024 ? 8192 : room < (1 << 20) ? 131072 : 1 << 20) {
        fs_fill(f, room);
        const char *argv[] = {cli, "-d", dir, "import", "-i", stream, NULL};
        rc = run_cli(err, sizeof(err), argv);
        if (rc == 0) {
            imported++;
        } else {
            refused++;
            if (rc != 3 || strstr(err, "ENOSPC") == NULL)
                fail_msg("%llu bytes free: exit %d: %s", (unsigned long long)room, rc, err);
            listing(f->mnt, left, sizeof(left));
            if (left[0] != '\0')
                fail_msg("%llu bytes free: the refused import left \"%s\"",
                         (unsigned long long)room, left);
        }
        fs_unfill(f);
        if (rc == 0) {
            bindlog_check_report rep;
            s = fs_open(f, dir, 1, &rc);
            assert_int_equal(rc, 0);
            assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
            assert_int_equal(rep.problems, 0);
            bindlog_close(s);
            tu_rmtree(dir);
        }
    }
    print_message("import into a new directory: %d refused with ENOSPC, %d imported\n", refused,
                  imported);
    assert_true(refused > 0);
    assert_true(imported > 0);
}

/* A replay into a new directory on a full disk: at every amount of room,
 * BINDLOG_ENOSPC with nothing left behind (so that the same call succeeds
 * once there is room), or a store with the source's digest.  The log is
 * copied into the new store on a thread of its own (docs/design.md, "Bulk
 * replay"): its failure must come back as the call's, with its message. */
static void fullfs__replay_into_a_full_disk(void **state)
{
    fs *f = *state;
    char src[1100], dir[1100], left[512];
    unsigned char want[BINDLOG_DIGEST_SIZE], got[BINDLOG_DIGEST_SIZE];
    int rc, refused = 0, replayed = 0;

    /* the source on the real disk, its log big enough to fill the room */
    snprintf(src, sizeof(src), "%s/src", f->base);
    bindlog *s = fs_open(f, src, 0, &rc);
    assert_int_equal(rc, 0);
    bind_n(s, 0, 3000);
    assert_int_equal(bindlog_digest(s, want, NULL), 0);

    snprintf(dir, sizeof(dir), "%s/replayed", f->mnt);
    for (uint64_t room = 0; room <= 12 << 20;
         room += room < 64 * 1024 ? 16384 : room < (1 << 20) ? 262144 : 1 << 20) {
        fs_fill(f, room);
        uint64_t last = 0;
        rc = bindlog_replay(s, dir, UINT64_MAX, INT64_MAX, got, &last, NULL, NULL);
        if (rc == 0) {
            replayed++;
            assert_int_equal(last, 3000);
            assert_memory_equal(got, want, sizeof(want));
        } else {
            refused++;
            if (rc != BINDLOG_ENOSPC)
                fail_msg("%llu bytes free: %s", (unsigned long long)room, bindlog_last_error());
            listing(f->mnt, left, sizeof(left));
            if (left[0] != '\0' && strcmp(left, "replayed") != 0)
                fail_msg("%llu bytes free: the refused replay left \"%s\"",
                         (unsigned long long)room, left);
            if (exists(dir)) {
                listing(dir, left, sizeof(left));
                if (left[0] != '\0')
                    fail_msg("%llu bytes free: the refused replay left \"%s\" in its target",
                             (unsigned long long)room, left);
            }
        }
        fs_unfill(f);
        if (rc == 0) {
            bindlog_check_report rep;
            bindlog *r = fs_open(f, dir, 1, &rc);
            assert_int_equal(rc, 0);
            assert_int_equal(bindlog_check(r, &rep, NULL, NULL), 0);
            assert_int_equal(rep.problems, 0);
            bindlog_close(r);
        }
        tu_rmtree(dir);
    }
    bindlog_close(s);
    print_message("replay into a new directory: %d refused with ENOSPC, %d replayed\n", refused,
                  replayed);
    assert_true(refused > 0);
    assert_true(replayed > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(fullfs__create_store_enospc, setup, teardown),
        cmocka_unit_test_setup_teardown(fullfs__open_with_lock_missing_enospc, setup, teardown),
        cmocka_unit_test_setup_teardown(fullfs__acknowledged_events_survive, setup, teardown),
        cmocka_unit_test_setup_teardown(fullfs__import_into_new_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(fullfs__replay_into_a_full_disk, setup, teardown),
    };
    const char *req = getenv("BINDLOG_REQUIRE_TMPFS");
    if (fs_namespace() != 0) {
        if (req != NULL && strcmp(req, "1") == 0) {
            fprintf(stderr, "test_fullfs: %s, and BINDLOG_REQUIRE_TMPFS=1: failing\n",
                    skip_reason);
            return 1;
        }
        printf("test_fullfs: SKIPPED: %s\n", skip_reason);
        return 0;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
