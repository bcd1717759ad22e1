/*
 * test_open.c -- what bindlog_open accepts as a store location.
 *
 * A plain path is an LMDB directory and "etcd://" the etcd backend; any other
 * "scheme://" is a typo or a backend this build does not have, and must be
 * refused rather than taken for a relative directory called "scheme:".
 *
 * Open's file checks (issue 16): a store file that is a symbolic link (or
 * anything but a regular file) is refused, so nothing is written where it
 * points; a regular file given as the store is "a file, not a store
 * directory"; an open of a directory that is not a store leaves no file
 * behind; lock.mdb is allocated at exactly the size LMDB gives it.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bindlog.h"
#include "testutil.h"

static void open__unknown_scheme_is_refused(void **state)
{
    (void)state;
    char *tmp = tu_mkdtemp("open");
    char *cwd = getcwd(NULL, 0);
    const char *bad[] = {"etdc://127.0.0.1:2379/p", "redis://localhost/x", "s3://bucket/key",
                         "file://store"};
    struct stat st;

    /* relative to a fresh directory, so a wrongly created store shows */
    assert_int_equal(chdir(tmp), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        bindlog *s = (bindlog *)&st; /* must be reset to NULL */
        assert_int_equal(bindlog_open(&s, bad[i], NULL), BINDLOG_EINVAL);
        assert_null(s);
    }
    assert_int_equal(stat("etdc:", &st), -1);
    assert_int_equal(stat("file:", &st), -1);

    /* a path with "://" further on, or a colon alone, is still a directory */
    bindlog *s = NULL;
    assert_int_equal(bindlog_open(&s, "a:b", NULL), 0);
    assert_int_equal(bindlog_bind(s, "k", "s1", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    bindlog_close(s);
    assert_int_equal(stat("a:b/data.mdb", &st), 0);

    assert_int_equal(chdir(cwd), 0);
    free(cwd);
    tu_rmtree(tmp);
    free(tmp);
}

/* ---- open's file checks -------------------------------------------------- */

static void path_of(char *out, size_t cap, const char *dir, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

/* The names in dir, sorted, joined by spaces ("" when empty). */
static void listing(const char *dir, char *out, size_t cap)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    out[0] = '\0';
    assert_true(n >= 0);
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i]->d_name, ".") != 0 && strcmp(names[i]->d_name, "..") != 0) {
            if (out[0])
                strncat(out, " ", cap - strlen(out) - 1);
            strncat(out, names[i]->d_name, cap - strlen(out) - 1);
        }
        free(names[i]);
    }
    free(names);
}

static void assert_listing(const char *dir, const char *want)
{
    char got[512];
    listing(dir, got, sizeof(got));
    if (strcmp(got, want) != 0)
        fail_msg("%s holds \"%s\", expected \"%s\"", dir, got, want);
}

static int try_open(const char *dir, int read_only)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.read_only = read_only;
    o.durability = BINDLOG_DURABILITY_NONE;
    int rc = bindlog_open(&s, dir, &o);
    if (rc == 0)
        bindlog_close(s);
    else
        assert_null(s);
    return rc;
}

static void assert_message(const char *what)
{
    if (strstr(bindlog_last_error(), what) == NULL)
        fail_msg("last error \"%s\" does not say \"%s\"", bindlog_last_error(), what);
}

static void make_store(const char *dir)
{
    bindlog *s = NULL;
    assert_int_equal(bindlog_open(&s, dir, NULL), 0);
    assert_int_equal(bindlog_bind(s, "k", "s1", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    bindlog_close(s);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void assert_text(const char *path, const char *text)
{
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    assert_string_equal(buf, text);
}

/* Issue 16, item 8: a symlinked lock.mdb was followed even by stat, which
 * wrote LMDB's reader table into the link's target; a symlinked data.mdb
 * by writers.  Each store file as a link (to a victim, or to the real file
 * moved aside), a fifo or a directory is refused by readers and writers,
 * naming the file. */
static void open__store_file_symlinks_are_refused(void **state)
{
    (void)state;
    static const char *const files[] = {"data.mdb", "lock.mdb", "bindlog.lock", "bindlog.shm",
                                        "bindlog.wal"};
    char *tmp = tu_mkdtemp("open-link");
    char dir[1024], victim[1100], p[1100], aside[1100];

    snprintf(dir, sizeof(dir), "%s/store", tmp);
    path_of(victim, sizeof(victim), tmp, "victim");
    make_store(dir);
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        path_of(p, sizeof(p), dir, files[i]);
        path_of(aside, sizeof(aside), tmp, "aside");
        write_text(victim, "victim\n");
        assert_int_equal(rename(p, aside), 0);
        for (int to_real = 0; to_real < 2; to_real++) {
            assert_int_equal(symlink(to_real ? aside : victim, p), 0);
            for (int ro = 1; ro >= 0; ro--) {
                assert_int_equal(try_open(dir, ro), BINDLOG_ENOTSTORE);
                assert_message(files[i]);
                assert_message("is a symbolic link");
            }
            assert_int_equal(unlink(p), 0);
        }
        assert_text(victim, "victim\n");
        assert_int_equal(rename(aside, p), 0);
    }
    /* anything else that is not a regular file: refused by name, and an
     * open never blocks on a fifo */
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char want[128];
        path_of(p, sizeof(p), dir, files[i]);
        path_of(aside, sizeof(aside), tmp, "aside");
        assert_int_equal(rename(p, aside), 0);
        for (int kind = 0; kind < 2; kind++) {
            assert_int_equal(kind ? mkdir(p, 0700) : mkfifo(p, 0600), 0);
            snprintf(want, sizeof(want), "%s is not a regular file (a %s)", files[i],
                     kind ? "directory" : "fifo");
            for (int ro = 1; ro >= 0; ro--) {
                assert_int_equal(try_open(dir, ro), BINDLOG_ENOTSTORE);
                assert_message(want);
            }
            assert_int_equal(kind ? rmdir(p) : unlink(p), 0);
        }
        assert_int_equal(rename(aside, p), 0);
    }
    assert_int_equal(try_open(dir, 0), 0); /* the real files again: fine */

    /* a planted link in an empty directory stops the creation of a store */
    snprintf(dir, sizeof(dir), "%s/new", tmp);
    assert_int_equal(mkdir(dir, 0700), 0);
    path_of(p, sizeof(p), dir, "lock.mdb");
    assert_int_equal(symlink(victim, p), 0);
    assert_int_equal(try_open(dir, 0), BINDLOG_ENOTSTORE);
    assert_listing(dir, "lock.mdb");
    assert_text(victim, "victim\n");
    tu_rmtree(tmp);
    free(tmp);
}

static void open__regular_file_is_not_a_store(void **state)
{
    (void)state;
    char *tmp = tu_mkdtemp("open-file");
    char p[1100];
    path_of(p, sizeof(p), tmp, "file");
    write_text(p, "not a store\n");
    for (int ro = 0; ro < 2; ro++) {
        assert_int_equal(try_open(p, ro), BINDLOG_ENOTSTORE);
        assert_message("is a file, not a store directory");
    }
    assert_text(p, "not a store\n");
    assert_listing(tmp, "file");
    tu_rmtree(tmp);
    free(tmp);
}

/* Issue 16, item 8: stat on a directory with a garbage data.mdb failed
 * ENOTSTORE but left an 8 KB lock.mdb.  An open that finds no store leaves
 * no file, reader or writer; a read-only open never writes data.mdb. */
static void open__not_a_store_leaves_nothing(void **state)
{
    (void)state;
    char *tmp = tu_mkdtemp("open-nothing");
    char dir[1024], p[1100];

    /* garbage data.mdb */
    snprintf(dir, sizeof(dir), "%s/garbage", tmp);
    assert_int_equal(mkdir(dir, 0700), 0);
    path_of(p, sizeof(p), dir, "data.mdb");
    write_text(p, "this is not an LMDB file, but it is long enough to be read as one\n");
    for (int ro = 1; ro >= 0; ro--) {
        assert_int_equal(try_open(dir, ro), BINDLOG_ENOTSTORE);
        assert_message("data.mdb is not an LMDB file");
        assert_listing(dir, "data.mdb");
    }
    write_text(p, "short");
    assert_int_equal(try_open(dir, 1), BINDLOG_ENOTSTORE);
    assert_listing(dir, "data.mdb");

    /* an empty data.mdb: no store yet for a reader, which must not write it */
    write_text(p, "");
    assert_int_equal(try_open(dir, 1), BINDLOG_ENOTFOUND);
    assert_listing(dir, "data.mdb");
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, 0);

    /* an LMDB file that is someone else's */
    snprintf(dir, sizeof(dir), "%s/foreign", tmp);
    assert_int_equal(mkdir(dir, 0700), 0);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {3, "key"}, v = {5, "value"};
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 2), 0);
    assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "theirs", MDB_CREATE, &dbi), 0);
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    path_of(p, sizeof(p), dir, "lock.mdb");
    assert_int_equal(unlink(p), 0);
    for (int ro = 1; ro >= 0; ro--) {
        assert_int_equal(try_open(dir, ro), BINDLOG_ENOTSTORE);
        assert_listing(dir, "data.mdb");
    }

    /* no data.mdb at all, and a directory that does not exist */
    snprintf(dir, sizeof(dir), "%s/empty", tmp);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(try_open(dir, 1), BINDLOG_ENOTFOUND);
    assert_listing(dir, "");
    snprintf(dir, sizeof(dir), "%s/missing/deeper", tmp);
    assert_int_equal(try_open(dir, 1), BINDLOG_ENOTFOUND);
    assert_listing(tmp, "empty foreign garbage");

    /* a real store whose lock.mdb is gone: a reader needs LMDB's reader
     * table, so it makes one (docs/design.md) and reads */
    snprintf(dir, sizeof(dir), "%s/store", tmp);
    make_store(dir);
    path_of(p, sizeof(p), dir, "lock.mdb");
    assert_int_equal(unlink(p), 0);
    assert_int_equal(try_open(dir, 1), 0);
    assert_listing(dir, "bindlog.lock bindlog.shm bindlog.wal data.mdb lock.mdb");
    tu_rmtree(tmp);
    free(tmp);
}

/* The whole of a file, or NULL (and *n = 0) when there is none. */
static unsigned char *slurp(const char *path, size_t *n)
{
    struct stat st;
    unsigned char *buf;
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (f == NULL)
        return NULL;
    assert_int_equal(fstat(fileno(f), &st), 0);
    buf = malloc((size_t)st.st_size + 1);
    assert_non_null(buf);
    *n = fread(buf, 1, (size_t)st.st_size, f);
    assert_int_equal(*n, (size_t)st.st_size);
    fclose(f);
    return buf;
}

/* A store whose data.mdb was lost (deleted, emptied, replaced by another
 * LMDB file) still has its log.  A writable open used to take the
 * directory for one where a creation never finished, truncate bindlog.wal
 * and start a new, empty store: every event gone, and nothing said.  Frames
 * are only ever written into a store that exists, so a log that holds any
 * is refused (BINDLOG_ECORRUPT, naming its LSNs) by readers and writers,
 * and the log is left byte for byte as it was.  A log with no frame (a
 * creation that crashed before the store's first commit) is made again. */
static void open__a_log_without_its_store_is_refused(void **state)
{
    (void)state;
    char *tmp = tu_mkdtemp("open-orphan");
    char dir[1024], p[1100], w[1100];
    static const char *const how[] = {"deleted", "emptied", "foreign"};

    for (size_t i = 0; i < sizeof(how) / sizeof(how[0]); i++) {
        bindlog *s = NULL;
        size_t n0, n1;
        snprintf(dir, sizeof(dir), "%s/%s", tmp, how[i]);
        assert_int_equal(bindlog_open(&s, dir, NULL), 0);
        assert_int_equal(bindlog_bind(s, "k", "s1", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
        assert_int_equal(bindlog_bind(s, "k", "s2", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
        assert_int_equal(bindlog_bind(s, "j", "s3", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
        bindlog_close(s);
        path_of(p, sizeof(p), dir, "data.mdb");
        path_of(w, sizeof(w), dir, "bindlog.wal");
        unsigned char *log0 = slurp(w, &n0);
        assert_non_null(log0);

        assert_int_equal(unlink(p), 0);
        path_of(p, sizeof(p), dir, "lock.mdb");
        assert_int_equal(unlink(p), 0);
        path_of(p, sizeof(p), dir, "data.mdb");
        if (strcmp(how[i], "emptied") == 0) {
            write_text(p, "");
        } else if (strcmp(how[i], "foreign") == 0) {
            MDB_env *env;
            assert_int_equal(mdb_env_create(&env), 0);
            assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
            mdb_env_close(env);
            path_of(p, sizeof(p), dir, "lock.mdb");
            assert_int_equal(unlink(p), 0);
        }
        char before[512], after[512];
        listing(dir, before, sizeof(before));
        for (int ro = 1; ro >= 0; ro--) {
            assert_int_equal(try_open(dir, ro), BINDLOG_ECORRUPT);
            assert_message(strcmp(how[i], "deleted") == 0   ? "there is no data.mdb"
                           : strcmp(how[i], "emptied") == 0 ? "data.mdb is empty"
                                                            : "data.mdb holds no store");
            assert_message("bindlog.wal holds 3 frames of a log (LSNs 1-3)");
            assert_message("restore data.mdb from a backup");
            listing(dir, after, sizeof(after));
            if (strcmp(before, after) != 0)
                fail_msg("%s open of a store whose data.mdb was %s: \"%s\" became \"%s\"",
                         ro ? "a read-only" : "a writable", how[i], before, after);
            unsigned char *log1 = slurp(w, &n1);
            assert_int_equal(n1, n0);
            assert_memory_equal(log1, log0, n0);
            free(log1);
        }
        if (strcmp(how[i], "emptied") == 0) {
            struct stat st;
            assert_int_equal(stat(p, &st), 0);
            assert_int_equal(st.st_size, 0); /* LMDB never wrote into it */
        }
        free(log0);
    }

    /* a log without a frame: what a creation that crashed after making the
     * log and before its first commit leaves; a writer makes the store */
    snprintf(dir, sizeof(dir), "%s/unfinished", tmp);
    assert_int_equal(try_open(dir, 0), 0);
    path_of(p, sizeof(p), dir, "data.mdb");
    assert_int_equal(unlink(p), 0);
    assert_int_equal(try_open(dir, 1), BINDLOG_ENOTFOUND);
    make_store(dir);
    assert_int_equal(try_open(dir, 1), 0);
    tu_rmtree(tmp);
    free(tmp);
}

/* lock.mdb is allocated before LMDB maps it, at exactly LMDB's size for
 * the reader slots asked for and the store's own one: LMDB keeps it (its
 * slot count is that one, so the size was not larger) and no block of it
 * is a hole (so it was not smaller: LMDB would have extended it with
 * ftruncate). */
static void open__lock_file_is_allocated_at_lmdb_size(void **state)
{
    (void)state;
    char *tmp = tu_mkdtemp("open-lock");
    static const unsigned readers[] = {0, 1, 7, 126, 500};
    for (size_t i = 0; i < sizeof(readers) / sizeof(readers[0]); i++) {
        char dir[1024], p[1100];
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        bindlog *s = NULL;
        bindlog_stats st;
        struct stat fs;
        snprintf(dir, sizeof(dir), "%s/r%u", tmp, readers[i]);
        o.max_readers = readers[i];
        o.durability = BINDLOG_DURABILITY_NONE;
        assert_int_equal(bindlog_open(&s, dir, &o), 0);
        assert_int_equal(bindlog_stats_get(s, &st), 0);
        assert_int_equal(st.readers_max, (readers[i] ? readers[i] : 126) + 1);
        path_of(p, sizeof(p), dir, "lock.mdb");
        assert_int_equal(stat(p, &fs), 0);
        if ((uint64_t)fs.st_blocks * 512 < (uint64_t)fs.st_size)
            fail_msg("lock.mdb for %u readers: %lld bytes, only %lld allocated", readers[i],
                     (long long)fs.st_size, (long long)fs.st_blocks * 512);
        bindlog_close(s);
        /* reopened with another slot count: never shrunk, all allocated */
        o.max_readers = 3;
        assert_int_equal(bindlog_open(&s, dir, &o), 0);
        bindlog_close(s);
        struct stat fs2;
        assert_int_equal(stat(p, &fs2), 0);
        assert_true(fs2.st_size >= fs.st_size);
        assert_true((uint64_t)fs2.st_blocks * 512 >= (uint64_t)fs2.st_size);
    }
    tu_rmtree(tmp);
    free(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(open__unknown_scheme_is_refused),
        cmocka_unit_test(open__store_file_symlinks_are_refused),
        cmocka_unit_test(open__regular_file_is_not_a_store),
        cmocka_unit_test(open__not_a_store_leaves_nothing),
        cmocka_unit_test(open__a_log_without_its_store_is_refused),
        cmocka_unit_test(open__lock_file_is_allocated_at_lmdb_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
