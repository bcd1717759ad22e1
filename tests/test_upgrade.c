/*
 * test_upgrade.c -- bindlog_upgrade(): format-1 stores converted to format 2.
 *
 * The stores are tests/data/format1/stores.tar.gz, written by the library
 * at commit ac406c8 (make_format1.sh there); expected.txt holds the head
 * LSN and state digest that code printed for each.  An upgrade must give
 * exactly that state (digest, head, base image, counters), check clean,
 * keep the old data.mdb as format1-backup/data.mdb, and take new writes.
 * Whatever goes wrong (bad paths, a damaged or foreign file, a store in
 * use, a backup in the way) the call refuses with a clear error and leaves
 * every byte of the store as it was.  Crashes at each step:
 * tests/faults/test_upgrade_crash.c.  tests/data/format2, format3 and
 * format4 hold stores of those formats; tests/data/format5 stores of the
 * current one, which the upgrade leaves alone today and the next format
 * will upgrade.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lmdb.h>

#include "bindlog.h"
#include "core/record.h"
#include "testutil.h"

#define TARBALL BINDLOG_TEST_DATA_DIR "/format1/stores.tar.gz"
#define EXPECTED BINDLOG_TEST_DATA_DIR "/format1/expected.txt"

typedef struct fx {
    char *tmp;
    char dir[1024];
    unsigned char *orig; /* data.mdb as extracted */
    size_t orig_len;
} fx;

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

#define TARBALL2 BINDLOG_TEST_DATA_DIR "/format2/stores.tar.gz"
#define EXPECTED2 BINDLOG_TEST_DATA_DIR "/format2/expected.txt"
#define TARBALL3 BINDLOG_TEST_DATA_DIR "/format3/stores.tar.gz"
#define EXPECTED3 BINDLOG_TEST_DATA_DIR "/format3/expected.txt"
#define TARBALL3R BINDLOG_TEST_DATA_DIR "/format3/routes.tar.gz"
#define EXPECTED3R BINDLOG_TEST_DATA_DIR "/format3/expected_routes.txt"
#define TARBALL4 BINDLOG_TEST_DATA_DIR "/format4/stores.tar.gz"
#define EXPECTED4 BINDLOG_TEST_DATA_DIR "/format4/expected.txt"
#define TARBALL5 BINDLOG_TEST_DATA_DIR "/format5/stores.tar.gz"
#define EXPECTED5 BINDLOG_TEST_DATA_DIR "/format5/expected.txt"
#define TARBALL6 BINDLOG_TEST_DATA_DIR "/format6/stores.tar.gz"
#define EXPECTED6 BINDLOG_TEST_DATA_DIR "/format6/expected.txt"

/* Extract store `which` of a tarball into a new temp dir. */
static fx *extract_from(const char *tarball, const char *which)
{
    fx *f = calloc(1, sizeof *f);
    char cmd[4096], path[1100];
    assert_non_null(f);
    f->tmp = tu_mkdtemp("upgrade");
    snprintf(cmd, sizeof cmd, "tar -C '%s' -xzf '%s' '%s'", f->tmp, tarball, which);
    assert_int_equal(system(cmd), 0);
    snprintf(f->dir, sizeof f->dir, "%s/%s", f->tmp, which);
    snprintf(path, sizeof path, "%s/data.mdb", f->dir);
    f->orig = slurp(path, &f->orig_len);
    assert_non_null(f->orig);
    return f;
}

/* Extract format-1 store `which` ("plain", "compacted") into a new temp dir. */
static fx *extract(const char *which) { return extract_from(TARBALL, which); }

static void fx_free(fx *f)
{
    tu_rmtree(f->tmp);
    free(f->tmp);
    free(f->orig);
    free(f);
}

/* An expected.txt: "<store> head N" and "<store> digest HEX". */
static void expected_in(const char *file, const char *which, uint64_t *head, char hex[33])
{
    FILE *e = fopen(file, "r");
    char line[512], name[64], field[64], value[41];
    int found = 0;
    assert_non_null(e);
    /* line by line: other lines may hold more fields (expected_routes.txt) */
    while (fgets(line, sizeof line, e) != NULL) {
        if (sscanf(line, "%63s %63s %40s", name, field, value) != 3)
            continue;
        if (strcmp(name, which) != 0)
            continue;
        if (strcmp(field, "head") == 0)
            *head = strtoull(value, NULL, 10), found |= 1;
        if (strcmp(field, "digest") == 0)
            memcpy(hex, value, 33), found |= 2;
    }
    fclose(e);
    assert_int_equal(found, 3);
}

/* What format-1 code said of its store `which`. */
static void expected(const char *which, uint64_t *head, char hex[33])
{
    expected_in(EXPECTED, which, head, hex);
}

static int exists(const char *dir, const char *name)
{
    char p[1200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

/* Nothing of the store changed: data.mdb's bytes, and no file of an upgrade. */
static void unchanged(const fx *f)
{
    char path[1100];
    size_t n;
    snprintf(path, sizeof path, "%s/data.mdb", f->dir);
    unsigned char *now = slurp(path, &n);
    assert_non_null(now);
    assert_int_equal(n, f->orig_len);
    assert_memory_equal(now, f->orig, n);
    free(now);
    assert_false(exists(f->dir, "bindlog.wal"));
    assert_false(exists(f->dir, "bindlog.shm"));
    assert_false(exists(f->dir, ".bindlog-upgrade"));
    assert_false(exists(f->dir, "format1-backup/data.mdb"));
}

/* The upgraded store: the format-1 code's state, clean, writable. */
static void verify_upgraded(const fx *f, const char *which, const bindlog_upgrade_report *r,
                            uint64_t base)
{
    uint64_t head = 0;
    char hex[33], got[33], path[1100];
    bindlog *s;
    bindlog_check_report chk;
    bindlog_stats st;
    unsigned char d[BINDLOG_DIGEST_SIZE];

    expected(which, &head, hex);
    assert_int_equal(r->from_format, 1);
    assert_int_equal(r->upgraded, 1);
    assert_int_equal(r->head_lsn, head);
    assert_int_equal(r->base_lsn, base);
    assert_int_equal(r->records, head - base);
    bindlog_digest_hex(r->digest, got);
    assert_string_equal(got, hex);

    assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
    assert_int_equal(bindlog_digest(s, d, NULL), 0);
    bindlog_digest_hex(d, got);
    assert_string_equal(got, hex);
    assert_int_equal(bindlog_check(s, &chk, NULL, NULL), 0);
    assert_int_equal(chk.problems, 0);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.format_version, BINDLOG_FORMAT_VERSION);
    assert_int_equal(st.head_lsn, head);
    assert_int_equal(st.base_lsn, base);
    assert_int_equal(st.bindings, r->bindings);
    assert_int_equal(st.sessions, r->sessions);
    /* a new event continues the log */
    bindlog_result res;
    assert_int_equal(bindlog_bind(s, "after:upgrade", "s-after", NULL, NULL, NULL, 0, &res), 0);
    assert_int_equal(res.lsn, head + 1);
    bindlog_close(s);

    /* the old file, byte for byte, is the backup; nothing staged is left */
    size_t n;
    snprintf(path, sizeof path, "%s/format1-backup/data.mdb", f->dir);
    unsigned char *b = slurp(path, &n);
    assert_non_null(b);
    assert_int_equal(n, f->orig_len);
    assert_memory_equal(b, f->orig, n);
    free(b);
    assert_false(exists(f->dir, ".bindlog-upgrade"));
}

static void upgrade__plain_store(void **state)
{
    (void)state;
    fx *f = extract("plain");
    bindlog_upgrade_report r;
    bindlog *s;
    /* before: the library refuses it and names the command */
    assert_int_equal(bindlog_open(&s, f->dir, NULL), BINDLOG_EVERSION);
    assert_non_null(strstr(bindlog_last_error(), "bindlog upgrade DIR"));
    unchanged(f);
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), 0);
    assert_string_equal(bindlog_last_error(), "");
    verify_upgraded(f, "plain", &r, 0);
    fx_free(f);
}

static void upgrade__compacted_store(void **state)
{
    (void)state;
    fx *f = extract("compacted");
    bindlog_upgrade_report r;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.log_size = 1 << 20; /* options reach the new store */
    assert_int_equal(bindlog_upgrade(f->dir, &o, &r, NULL, NULL), 0);
    verify_upgraded(f, "compacted", &r, 199);
    char path[1100];
    struct stat st;
    snprintf(path, sizeof path, "%s/bindlog.wal", f->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 4096 + (1 << 20));
    fx_free(f);
}

static void upgrade__current_store_is_left_alone(void **state)
{
    (void)state;
    fx *f = extract("plain");
    bindlog_upgrade_report r;
    struct stat a, b;
    char path[1100];
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), 0);
    snprintf(path, sizeof path, "%s/data.mdb", f->dir);
    assert_int_equal(stat(path, &a), 0);
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), 0);
    assert_int_equal(r.upgraded, 0);
    assert_int_equal(r.from_format, BINDLOG_FORMAT_VERSION);
    assert_int_equal(stat(path, &b), 0);
    assert_int_equal(a.st_ino, b.st_ino);
    assert_int_equal(a.st_mtime, b.st_mtime);
    assert_int_equal(a.st_size, b.st_size);

    /* a store made by this library: the same */
    char *tmp = tu_mkdtemp("upgrade-new");
    bindlog *s;
    assert_int_equal(bindlog_open(&s, tmp, NULL), 0);
    bindlog_close(s);
    assert_int_equal(bindlog_upgrade(tmp, NULL, &r, NULL, NULL), 0);
    assert_int_equal(r.upgraded, 0);
    assert_false(exists(tmp, "format1-backup"));
    tu_rmtree(tmp);
    free(tmp);
    fx_free(f);
}

static void upgrade__bad_arguments_and_paths(void **state)
{
    (void)state;
    bindlog_upgrade_report r;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    char *tmp = tu_mkdtemp("upgrade-bad"), path[1000], link[1100], cmd_copy[2400];

    assert_int_equal(bindlog_upgrade(NULL, NULL, &r, NULL, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_upgrade("", NULL, &r, NULL, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_upgrade(tmp, NULL, NULL, NULL, NULL), BINDLOG_EINVAL);
    o.read_only = 1;
    assert_int_equal(bindlog_upgrade(tmp, &o, &r, NULL, NULL), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "read_only"));
    o = (bindlog_options)BINDLOG_OPTIONS_INIT;
    o.version = 99;
    assert_int_equal(bindlog_upgrade(tmp, &o, &r, NULL, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_upgrade("etcd://127.0.0.1:2379/x", NULL, &r, NULL, NULL),
                     BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "etcd"));

    /* a missing directory, a file, an empty directory: nothing is made */
    snprintf(path, sizeof path, "%s/missing", tmp);
    assert_int_equal(bindlog_upgrade(path, NULL, &r, NULL, NULL), BINDLOG_ENOTFOUND);
    assert_non_null(strstr(bindlog_last_error(), "no such directory"));
    assert_false(exists(tmp, "missing"));
    snprintf(path, sizeof path, "%s/file", tmp);
    FILE *fp = fopen(path, "w");
    fputs("not a store\n", fp);
    fclose(fp);
    assert_int_equal(bindlog_upgrade(path, NULL, &r, NULL, NULL), BINDLOG_ENOTSTORE);
    assert_non_null(strstr(bindlog_last_error(), "not a directory"));
    snprintf(path, sizeof path, "%s/empty", tmp);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(bindlog_upgrade(path, NULL, &r, NULL, NULL), BINDLOG_ENOTFOUND);
    assert_non_null(strstr(bindlog_last_error(), "no data.mdb"));
    assert_false(exists(path, "bindlog.lock"));

    /* data.mdb a symbolic link: never followed */
    fx *f = extract("plain");
    snprintf(path, sizeof path, "%s/linked", tmp);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(link, sizeof link, "%s/data.mdb", path);
    char target[1100];
    snprintf(target, sizeof target, "%s/data.mdb", f->dir);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(bindlog_upgrade(path, NULL, &r, NULL, NULL), BINDLOG_ENOTSTORE);
    assert_non_null(strstr(bindlog_last_error(), "symbolic link"));
    unchanged(f);

    /* not LMDB's, and LMDB's but not bindlog's */
    snprintf(path, sizeof path, "%s/foreign", tmp);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(link, sizeof link, "%s/data.mdb", path);
    fp = fopen(link, "w");
    for (int i = 0; i < 3000; i++)
        fputs("garbage ", fp);
    fclose(fp);
    assert_int_equal(bindlog_upgrade(path, NULL, &r, NULL, NULL), BINDLOG_ENOTSTORE);
    assert_non_null(strstr(bindlog_last_error(), "not an LMDB file"));
    assert_false(exists(path, "bindlog.wal"));

    /* lock.mdb or bindlog.lock a link: refused, the target untouched */
    {
        char *outside = tu_mkdtemp("upgrade-outside"), target2[1100], lk[1100];
        snprintf(target2, sizeof target2, "%s/victim", outside);
        fp = fopen(target2, "w");
        fputs("keep me", fp);
        fclose(fp);
        const char *names[] = {"lock.mdb", "bindlog.lock"};
        for (int i = 0; i < 2; i++) {
            snprintf(lk, sizeof lk, "%s/%s", f->dir, names[i]);
            unlink(lk); /* bindlog.lock: made by the refused attempt before */
            assert_int_equal(symlink(target2, lk), 0);
            assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), BINDLOG_ENOTSTORE);
            assert_non_null(strstr(bindlog_last_error(), "symbolic link"));
            assert_int_equal(unlink(lk), 0);
            unchanged(f);
        }
        size_t vn;
        unsigned char *v = slurp(target2, &vn);
        assert_int_equal(vn, 7);
        assert_memory_equal(v, "keep me", 7);
        free(v);
        /* a stale bindlog.wal that is a link: the link goes, never its target */
        snprintf(lk, sizeof lk, "%s/bindlog.wal", f->dir);
        assert_int_equal(symlink(target2, lk), 0);
        bindlog_upgrade_report r2;
        char lk2[1100];
        snprintf(lk2, sizeof lk2, "%s/copy", tmp);
        snprintf(cmd_copy, sizeof cmd_copy, "cp -a '%s' '%s'", f->dir, lk2);
        assert_int_equal(system(cmd_copy), 0);
        assert_int_equal(bindlog_upgrade(lk2, NULL, &r2, NULL, NULL), 0);
        assert_int_equal(r2.upgraded, 1);
        v = slurp(target2, &vn);
        assert_int_equal(vn, 7);
        assert_memory_equal(v, "keep me", 7);
        free(v);
        assert_int_equal(unlink(lk), 0);
        tu_rmtree(outside);
        free(outside);
    }

    /* the directory reached through a link is fine */
    snprintf(link, sizeof link, "%s/via-link", tmp);
    assert_int_equal(symlink(f->dir, link), 0);
    assert_int_equal(bindlog_upgrade(link, NULL, &r, NULL, NULL), 0);
    assert_int_equal(r.upgraded, 1);
    fx_free(f);
    tu_rmtree(tmp);
    free(tmp);
}

/* Bytes flipped in every page that looks like a leaf of the log (8-byte
 * keys), free ones included: the live log is damaged wherever it is. */
static void damage_log_leaves(const char *dir)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    size_t n;
    unsigned char *b = slurp(path, &n);
    int hit = 0;
    for (size_t pg = 2; (pg + 1) * 4096 <= n; pg++) {
        unsigned char *p = b + pg * 4096;
        uint64_t pgno = 0;
        for (int i = 7; i >= 0; i--)
            pgno = (pgno << 8) | p[i];
        unsigned flags = p[10] | (p[11] << 8), lower = p[12] | (p[13] << 8);
        if (pgno != pg || flags != 2 || lower < 18)
            continue;
        unsigned off = p[16] | (p[17] << 8);
        if (off + 8 > 4096 || (p[off + 6] | (p[off + 7] << 8)) != 8)
            continue;
        p[off + 8 + 8 + 20] ^= 0x55; /* inside the first record */
        hit++;
    }
    assert_true(hit > 0);
    FILE *f = fopen(path, "wb");
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
}

static void upgrade__damaged_store_is_refused(void **state)
{
    (void)state;
    bindlog_upgrade_report r;
    char path[1100];

    /* a damaged record */
    fx *f = extract("plain");
    damage_log_leaves(f->dir);
    free(f->orig);
    snprintf(path, sizeof path, "%s/data.mdb", f->dir);
    f->orig = slurp(path, &f->orig_len);
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), BINDLOG_ECORRUPT);
    assert_non_null(strstr(bindlog_last_error(), "bindlog recover"));
    unchanged(f);
    fx_free(f);

    /* a cut file */
    f = extract("compacted");
    snprintf(path, sizeof path, "%s/data.mdb", f->dir);
    assert_int_equal(truncate(path, (off_t)(f->orig_len / 2)), 0);
    free(f->orig);
    f->orig = slurp(path, &f->orig_len);
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), BINDLOG_ECORRUPT);
    assert_non_null(strstr(bindlog_last_error(), "data.mdb"));
    unchanged(f);
    fx_free(f);
}

/* Another process with the store open refuses the upgrade. */
static void upgrade__store_in_use_is_refused(void **state)
{
    (void)state;
    fx *f = extract("plain");
    bindlog_upgrade_report r;
    char path[1100];
    int p[2];

    /* a reader: LMDB's shared lock on lock.mdb, held by another process */
    snprintf(path, sizeof path, "%s/lock.mdb", f->dir);
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(path, O_RDWR | O_CREAT, 0600);
        struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        if (fd < 0 || fcntl(fd, F_SETLK, &fl) != 0)
            _exit(1);
        if (write(p[1], "x", 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char c;
    assert_int_equal(read(p[0], &c, 1), 1);
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), BINDLOG_EBUSY);
    assert_non_null(strstr(bindlog_last_error(), "lock.mdb"));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(p[0]);
    close(p[1]);
    unchanged(f);

    /* a writer: bindlog.lock held shared */
    snprintf(path, sizeof path, "%s/bindlog.lock", f->dir);
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_SH), 0);
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), BINDLOG_EBUSY);
    assert_non_null(strstr(bindlog_last_error(), "bindlog.lock"));
    close(fd);
    unchanged(f);

    /* nobody now */
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), 0);
    verify_upgraded(f, "plain", &r, 0);
    fx_free(f);
}

/* What an interrupted upgrade leaves is tidied; a foreign backup stops it. */
static void upgrade__leftovers_and_backups(void **state)
{
    (void)state;
    fx *f = extract("plain");
    bindlog_upgrade_report r;
    char a[1100], b[1100];

    /* leftovers: a staging directory, a log and a shm, the backup's link */
    snprintf(a, sizeof a, "%s/.bindlog-upgrade", f->dir);
    assert_int_equal(mkdir(a, 0700), 0);
    snprintf(a, sizeof a, "%s/.bindlog-upgrade/data.mdb", f->dir);
    FILE *fp = fopen(a, "w");
    fputs("half-built", fp);
    fclose(fp);
    snprintf(a, sizeof a, "%s/bindlog.wal", f->dir);
    fp = fopen(a, "w");
    fputs("stale", fp);
    fclose(fp);
    snprintf(a, sizeof a, "%s/format1-backup", f->dir);
    assert_int_equal(mkdir(a, 0700), 0);
    snprintf(a, sizeof a, "%s/data.mdb", f->dir);
    snprintf(b, sizeof b, "%s/format1-backup/data.mdb", f->dir);
    assert_int_equal(link(a, b), 0);
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), 0);
    verify_upgraded(f, "plain", &r, 0);
    fx_free(f);

    /* a backup of something else is never overwritten */
    f = extract("plain");
    snprintf(a, sizeof a, "%s/format1-backup", f->dir);
    assert_int_equal(mkdir(a, 0700), 0);
    snprintf(b, sizeof b, "%s/format1-backup/data.mdb", f->dir);
    fp = fopen(b, "w");
    fputs("another store's backup", fp);
    fclose(fp);
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), BINDLOG_EEXIST);
    assert_non_null(strstr(bindlog_last_error(), "format1-backup"));
    size_t n;
    unsigned char *kept = slurp(b, &n);
    assert_int_equal(n, strlen("another store's backup"));
    free(kept);
    unlink(b);
    rmdir(a);
    unchanged(f);

    /* a backup directory that is a link: refused, never followed */
    char *elsewhere = tu_mkdtemp("upgrade-elsewhere");
    assert_int_equal(symlink(elsewhere, a), 0);
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), BINDLOG_EEXIST);
    assert_false(exists(elsewhere, "data.mdb"));
    unlink(a);
    unchanged(f);
    tu_rmtree(elsewhere);
    free(elsewhere);
    fx_free(f);
}

/* The rollback docs/tools.md gives: the backup back in place is the
 * format-1 store again, which upgrades again to the same state. */
static void upgrade__rollback_as_documented(void **state)
{
    (void)state;
    fx *f = extract("compacted");
    bindlog_upgrade_report r;
    char a[1100], b[1100];
    bindlog *s;

    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), 0);
    snprintf(a, sizeof a, "%s/format1-backup/data.mdb", f->dir);
    snprintf(b, sizeof b, "%s/data.mdb", f->dir);
    assert_int_equal(rename(a, b), 0);
    const char *drop[] = {"bindlog.wal", "bindlog.shm", "lock.mdb"};
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/%s", f->dir, drop[i]);
        unlink(a);
    }
    snprintf(a, sizeof a, "%s/format1-backup", f->dir);
    assert_int_equal(rmdir(a), 0);
    assert_int_equal(bindlog_open(&s, f->dir, NULL), BINDLOG_EVERSION);
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), 0);
    verify_upgraded(f, "compacted", &r, 199);
    fx_free(f);
}

/* A damaged store of the current format: refused, and its log (which may
 * hold records data.mdb has not got) is never touched. */
static void upgrade__damaged_current_store_keeps_its_log(void **state)
{
    (void)state;
    char *tmp = tu_mkdtemp("upgrade-cur"), path[1100];
    bindlog_upgrade_report r;
    bindlog *s;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("BINDLOG_CHECKPOINT", "manual", 1);
        if (bindlog_open(&s, tmp, NULL) != 0)
            _exit(2);
        for (int i = 0; i < 50; i++) {
            char key[32], sid[32];
            snprintf(key, sizeof key, "k%d", i % 7);
            snprintf(sid, sizeof sid, "s%d", i);
            if (bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
                _exit(3);
        }
        _exit(0); /* the records stay in the log only */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    size_t wn, wn2;
    snprintf(path, sizeof path, "%s/bindlog.wal", tmp);
    unsigned char *wal = slurp(path, &wn);
    assert_non_null(wal);
    snprintf(path, sizeof path, "%s/data.mdb", tmp);
    assert_int_equal(truncate(path, 4096), 0); /* the meta pages' second one gone */
    assert_int_equal(bindlog_upgrade(tmp, NULL, &r, NULL, NULL), BINDLOG_ECORRUPT);
    assert_int_equal(r.upgraded, 0);
    /* the message names the damage (it once printed an uninitialised buffer) */
    if (strstr(bindlog_last_error(), "meta page 1 is cut short by the end of the file") == NULL)
        fail_msg("upgrade's message: %s", bindlog_last_error());
    snprintf(path, sizeof path, "%s/bindlog.wal", tmp);
    unsigned char *wal2 = slurp(path, &wn2);
    assert_non_null(wal2);
    assert_int_equal(wn, wn2);
    assert_memory_equal(wal, wal2, wn);
    assert_false(exists(tmp, "format1-backup"));
    free(wal);
    free(wal2);
    tu_rmtree(tmp);
    free(tmp);
}

/* Random bytes of the format-1 file damaged, many times: never a crash;
 * either a clear refusal that changes nothing, or (the damage hit a page
 * no tree reaches, or an index the upgrade does not read) the right state,
 * clean.  A run on a copy each time; BINDLOG_UPGRADE_DAMAGE=N runs N
 * (docs/reliability.md has a long run's figures). */
static void upgrade__random_damage_never_crashes(void **state)
{
    (void)state;
    uint64_t head;
    char hex[33], got[33], path[1100];
    int refused = 0, upgraded = 0;
    const char *env = getenv("BINDLOG_UPGRADE_DAMAGE"); /* more runs, by hand */
    int n = env != NULL && atoi(env) > 0 ? atoi(env) : 60;
    expected("plain", &head, hex);
    srand(11);
    for (int i = 0; i < n; i++) {
        fx *f = extract("plain");
        snprintf(path, sizeof path, "%s/data.mdb", f->dir);
        int flips = 1 + rand() % 4;
        for (int j = 0; j < flips; j++) {
            size_t at = (size_t)rand() % f->orig_len;
            f->orig[at] ^= (unsigned char)(1 + rand() % 255);
        }
        FILE *w = fopen(path, "wb");
        assert_int_equal(fwrite(f->orig, 1, f->orig_len, w), f->orig_len);
        fclose(w);
        bindlog_upgrade_report r;
        int rc = bindlog_upgrade(f->dir, NULL, &r, NULL, NULL);
        if (rc == 0) {
            bindlog *s;
            bindlog_check_report chk;
            unsigned char d[BINDLOG_DIGEST_SIZE];
            assert_int_equal(r.upgraded, 1);
            bindlog_digest_hex(r.digest, got);
            assert_string_equal(got, hex);
            assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
            assert_int_equal(bindlog_digest(s, d, NULL), 0);
            bindlog_digest_hex(d, got);
            assert_string_equal(got, hex);
            assert_int_equal(bindlog_check(s, &chk, NULL, NULL), 0);
            assert_int_equal(chk.problems, 0);
            bindlog_close(s);
            upgraded++;
        } else {
            if (rc != BINDLOG_ECORRUPT && rc != BINDLOG_ENOTSTORE && rc != BINDLOG_EVERSION)
                fail_msg("damage %d: %s: %s", i, bindlog_code_name(rc), bindlog_last_error());
            assert_true(strlen(bindlog_last_error()) > 20);
            unchanged(f);
            refused++;
        }
        fx_free(f);
    }
    print_message("random damage: %d refused, %d upgraded to the right state\n", refused,
                  upgraded);
}

/* Stamp data.mdb's meta "format" (and drop "magic" when magic is 0),
 * behind the library's back. */
static void stamp(const char *dir, uint32_t format, int magic)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta;
    unsigned char fmt[4] = {(unsigned char)format, (unsigned char)(format >> 8),
                            (unsigned char)(format >> 16), (unsigned char)(format >> 24)};
    MDB_val k = {6, "format"}, v = {4, fmt}, mk = {5, "magic"};
    assert_int_equal(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 16);
    assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "meta", 0, &meta), 0);
    assert_int_equal(mdb_put(txn, meta, &k, &v, 0), 0);
    if (!magic)
        assert_int_equal(mdb_del(txn, meta, &mk, NULL), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

/* Format 2 (the write-ahead log, a history table): written by fd0b2c4,
 * one store closed cleanly, one compacted, one whose process died with its
 * last records in bindlog.wal only.  Each upgrades to the digest format-2
 * code printed, and every key's history is then the chain of its records,
 * as many as the log holds for it. */
/* The golden stores of format fmt (2 or 3): plain, compacted, crashed
 * with records in bindlog.wal only.  Each upgrades with the digest and head
 * the old code recorded, checks clean, keeps every key's chain, and takes
 * the next event. */
static void upgrade_golden(int fmt, const char *tarball, const char *expected)
{
    static const char *const which[] = {"plain", "compacted", "crashed"};
    char says[16], backup[64];
    snprintf(says, sizeof says, "format %d", fmt);
    snprintf(backup, sizeof backup, "format%d-backup/data.mdb", fmt);
    for (size_t i = 0; i < 3; i++) {
        fx *f = extract_from(tarball, which[i]);
        bindlog_upgrade_report r;
        bindlog *s;
        uint64_t head = 0;
        char hex[33], got[33];
        unsigned char d[BINDLOG_DIGEST_SIZE];

        expected_in(expected, which[i], &head, hex);
        assert_int_equal(bindlog_open(&s, f->dir, NULL), BINDLOG_EVERSION);
        assert_non_null(strstr(bindlog_last_error(), says));
        assert_non_null(strstr(bindlog_last_error(), "bindlog upgrade DIR"));
        assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), 0);
        assert_int_equal(r.from_format, fmt);
        assert_int_equal(r.upgraded, 1);
        assert_int_equal(r.head_lsn, head);
        bindlog_digest_hex(r.digest, got);
        assert_string_equal(got, hex);
        assert_true(exists(f->dir, backup));
        assert_false(exists(f->dir, ".bindlog-upgrade"));

        assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
        assert_int_equal(bindlog_digest(s, d, NULL), 0);
        bindlog_digest_hex(d, got);
        assert_string_equal(got, hex);
        bindlog_check_report chk;
        assert_int_equal(bindlog_check(s, &chk, NULL, NULL), 0);
        assert_int_equal(chk.problems, 0);
        /* each key's chain holds exactly its records of the log, in order */
        bindlog_iter *it, *hi;
        bindlog_record rec, hr;
        uint64_t n = 0;
        assert_int_equal(bindlog_log_iter(s, 0, UINT64_MAX, &it), 0);
        while (bindlog_iter_next_record(it, &rec) == 1) {
            n++;
            /* a sample of keys is enough; a ROUTE record moves no binding,
             * so it is on no key's chain (bindlog_history_iter) */
            if (rec.lsn % 37 != 0 || rec.type == BINDLOG_EVENT_ROUTE)
                continue;
            uint64_t prev = 0;
            int at = 0;
            assert_int_equal(bindlog_history_iter(s, rec.key, &hi), 0);
            while (bindlog_iter_next_record(hi, &hr) == 1) {
                assert_string_equal(hr.key, rec.key);
                assert_true(hr.lsn > prev);
                prev = hr.lsn;
                at += hr.lsn == rec.lsn;
            }
            bindlog_iter_close(hi);
            if (at != 1)
                fail_msg("%s: LSN %llu (%s, key %s) is %d times in its key's history (last %llu)",
                         which[i], (unsigned long long)rec.lsn, bindlog_event_name(rec.type),
                         rec.key, at, (unsigned long long)prev);
        }
        bindlog_iter_close(it);
        assert_int_equal(n, head - r.base_lsn);
        bindlog_result res;
        assert_int_equal(bindlog_bind(s, "after:upgrade", "s-after2", NULL, NULL, NULL, 0, &res),
                         0);
        assert_int_equal(res.lsn, head + 1);
        bindlog_close(s);
        fx_free(f);
    }
}

static void upgrade__format2_stores(void **state)
{
    (void)state;
    upgrade_golden(2, TARBALL2, EXPECTED2);
}

static void upgrade__format3_stores(void **state)
{
    (void)state;
    upgrade_golden(3, TARBALL3, EXPECTED3);
}

/* Format 3 with routing (e1621d2): last activities in 8 trailing bytes of
 * the binding values, ROUTE records.  The upgrade keeps the digest, so
 * every key's last activity, which the new store reports as format-3 code
 * did; the upgraded store routes on. */
static void upgrade__format3_routed_stores(void **state)
{
    (void)state;
    static const char *const which[] = {"routed", "routed-crashed"};
    for (size_t i = 0; i < 2; i++) {
        fx *f = extract_from(TARBALL3R, which[i]);
        bindlog_upgrade_report r;
        bindlog *s;
        uint64_t head = 0;
        char hex[33], got[33], line[512], name[64], field[64], key[256];
        unsigned char d[BINDLOG_DIGEST_SIZE];
        long long ms;
        int activities = 0;

        expected_in(EXPECTED3R, which[i], &head, hex);
        assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), 0);
        assert_int_equal(r.from_format, 3);
        assert_int_equal(r.head_lsn, head);
        bindlog_digest_hex(r.digest, got);
        assert_string_equal(got, hex);
        assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
        assert_int_equal(bindlog_digest(s, d, NULL), 0);
        bindlog_digest_hex(d, got);
        assert_string_equal(got, hex);
        bindlog_check_report chk;
        assert_int_equal(bindlog_check(s, &chk, NULL, NULL), 0);
        assert_int_equal(chk.problems, 0);
        FILE *e = fopen(EXPECTED3R, "r");
        assert_non_null(e);
        while (fgets(line, sizeof line, e) != NULL)
            if (sscanf(line, "%63s %63s %255s %lld", name, field, key, &ms) == 4 &&
                strcmp(name, which[i]) == 0 && strcmp(field, "activity") == 0) {
                bindlog_binding b;
                assert_int_equal(bindlog_get(s, key, &b), 0);
                assert_true(b.last_activity_ms == (int64_t)ms);
                activities++;
            }
        fclose(e);
        assert_true(activities > 0);
        bindlog_policy idle = {BINDLOG_RESET_IDLE, 3600 * 1000, 0};
        bindlog_route_result rr;
        assert_int_equal(bindlog_route(s, "agent:main:telegram:dm:new", 1767225600000 + 86400000,
                                       &idle, "after-upgrade", NULL, 0, &rr),
                         BINDLOG_CREATED);
        assert_int_equal(rr.outcome, BINDLOG_CREATED);
        assert_int_equal(rr.lsn, head + 1);
        bindlog_close(s);
        fx_free(f);
    }
}

/* The number on the line "<which> <field> [<arg>] N" of an expected.txt. */
static uint64_t expected_num(const char *file, const char *which, const char *field,
                             const char *arg)
{
    FILE *e = fopen(file, "r");
    char line[512], name[64], fld[64], a[160];
    unsigned long long v;
    assert_non_null(e);
    while (fgets(line, sizeof line, e) != NULL) {
        int ok = arg == NULL ? sscanf(line, "%63s %63s %llu", name, fld, &v) == 3
                             : sscanf(line, "%63s %63s %159s %llu", name, fld, a, &v) == 4 &&
                                   strcmp(a, arg) == 0;
        if (ok && strcmp(name, which) == 0 && strcmp(fld, field) == 0) {
            fclose(e);
            return v;
        }
    }
    fclose(e);
    fail_msg("%s: no line \"%s %s%s%s N\"", file, which, field, arg != NULL ? " " : "",
             arg != NULL ? arg : "");
    return 0;
}

/* Call fn(ctx, value) for each value of table `table` of a store's
 * data.mdb, read with LMDB itself; returns 0 when the store has no such
 * table, else 1. */
static int each_value(const char *dir, const char *table, void (*fn)(void *, const MDB_val *),
                      void *ctx)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *c;
    MDB_val k, v;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 16), 0);
    assert_int_equal(mdb_env_open(env, dir, MDB_RDONLY | MDB_NOLOCK, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    int rc = mdb_dbi_open(txn, table, 0, &dbi);
    if (rc == 0) {
        assert_int_equal(mdb_cursor_open(txn, dbi, &c), 0);
        for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
            fn(ctx, &v);
        mdb_cursor_close(c);
        rc = 1;
    } else {
        assert_int_equal(rc, MDB_NOTFOUND);
        rc = 0;
    }
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return rc;
}

/* What values_in counts. */
typedef struct value_filter {
    int version, marked;
    size_t n;
} value_filter;

static void count_value(void *ctx, const MDB_val *val)
{
    value_filter *f = ctx;
    const unsigned char *p = val->mv_data;
    if (f->version < 0) /* every entry */
        f->n++;
    else if (f->marked == 2) /* the sibling chain's bits, formats 6 and 7 */
        f->n += val->mv_size >= 2 && p[0] == f->version && (p[1] & 0x38) != 0;
    else
        f->n += val->mv_size >= 2 && p[0] == f->version &&
                (f->marked < 0 || ((p[1] & 0x80) != 0) == (f->marked != 0));
}

/* Values of table `table` (sessions, base_sessions, children, log) of a
 * store's data.mdb whose version byte is `version` (sessions: 3 a
 * reference, 2 whole; the log: the record version; -1 every entry) and,
 * when marked is 0 or 1, whose mark (BL_SVAL_F_REF, 0x80 of the flags
 * byte) is set (1) or clear (0), when 2 that carry the sibling chain
 * (bits 3..5: formats 6 and 7).  A store without the table has none. */
static size_t values_in(const char *dir, const char *table, int version, int marked)
{
    value_filter f = {version, marked, 0};
    each_value(dir, table, count_value, &f);
    return f.n;
}

/* Sessions of a store's data.mdb kept as references (version-3 values). */
static size_t references_in(const char *dir) { return values_in(dir, "sessions", 3, -1); }

/* The ROUTE records a store's log holds. */
static uint64_t retained_routes(bindlog *s)
{
    uint64_t routes = 0;
    bindlog_iter *li;
    bindlog_record rec;
    assert_int_equal(bindlog_log_iter(s, 0, UINT64_MAX, &li), 0);
    while (bindlog_iter_next_record(li, &rec) == 1)
        routes += rec.type == BINDLOG_EVENT_ROUTE;
    bindlog_iter_close(li);
    return routes;
}

/* An upgraded golden store s holds what the format that wrote it recorded
 * (EXPECTED's lines for `which`): head, base, counts and applied
 * counters.  A compacted store's ROUTE count is its retained ROUTE
 * records' (an export stream's image carries no ROUTE count:
 * docs/format.md). */
static void golden_counts(bindlog *s, const char *expected, const char *which, uint64_t head,
                          uint64_t base)
{
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.format_version, BINDLOG_FORMAT_VERSION);
    assert_int_equal(st.head_lsn, head);
    assert_int_equal(st.base_lsn, base);
    assert_int_equal(st.log_records, head - base);
    assert_int_equal(st.bindings, expected_num(expected, which, "bindings", NULL));
    assert_int_equal(st.live_bindings, expected_num(expected, which, "live_bindings", NULL));
    assert_int_equal(st.sessions, expected_num(expected, which, "sessions", NULL));
    assert_int_equal(st.live_sessions, expected_num(expected, which, "live_sessions", NULL));
    uint64_t routes = retained_routes(s);
    for (int t = 1; t < BINDLOG_EVENT_COUNT; t++)
        assert_int_equal(st.applied[t],
                         t == BINDLOG_EVENT_ROUTE && base > 0
                             ? routes
                             : expected_num(expected, which, "applied", bindlog_event_name(t)));
}

/* The golden store's two hubs (one of them an upper-case UUID) list as
 * many children as EXPECTED says, each naming its hub as parent. */
static void golden_hubs(bindlog *s, const char *expected, const char *which)
{
    char line[512], name[64], fld[64], sid[160];
    unsigned long long n;
    int hubs = 0;
    FILE *e = fopen(expected, "r");
    assert_non_null(e);
    while (fgets(line, sizeof line, e) != NULL) {
        if (sscanf(line, "%63s %63s %159s %llu", name, fld, sid, &n) != 4 ||
            strcmp(name, which) != 0 || strcmp(fld, "children") != 0)
            continue;
        bindlog_iter *it;
        bindlog_session ss;
        unsigned long long kids = 0;
        int rc;
        assert_int_equal(bindlog_children_iter(s, sid, &it), 0);
        while ((rc = bindlog_iter_next_session(it, &ss, NULL, 0)) == 1) {
            assert_string_equal(ss.parent_id, sid);
            kids++;
        }
        bindlog_iter_close(it);
        assert_int_equal(rc, 0);
        assert_true(n >= 3);
        assert_int_equal(kids, n);
        hubs++;
    }
    fclose(e);
    assert_int_equal(hubs, 2);
}

/* The upgraded store takes new events where its log ends (at head): a
 * bind, a /new, a split and a route on keys under `prefix`, then checks
 * clean. */
static void golden_takes_events(bindlog *s, const char *prefix, uint64_t head)
{
    char key[128], rkey[160];
    bindlog_result res;
    bindlog_route_result rr;
    bindlog_check_report chk;
    bindlog_policy idle = {BINDLOG_RESET_IDLE, 6 * 3600 * 1000, 0};
    snprintf(key, sizeof key, "%s", prefix);
    snprintf(rkey, sizeof rkey, "%s:route", prefix);
    assert_int_equal(bindlog_bind(s, key, "0b6f7f0e-4a0b-4c7e-9d41-8a8e2a7c1f00", NULL, NULL,
                                  NULL, 0, &res),
                     BINDLOG_APPLIED);
    assert_int_equal(res.lsn, head + 1);
    assert_int_equal(bindlog_new_session(s, key, "5d0c1b9e-7f3a-4e21-b6c8-2f9d4e8a0b13", NULL,
                                         "{}", 2, &res),
                     BINDLOG_APPLIED);
    assert_int_equal(res.lsn, head + 2);
    assert_int_equal(bindlog_split(s, key, "5d0c1b9e-7f3a-4e21-b6c8-2f9d4e8a0b13",
                                   "s-after-split", res.generation, NULL, 0, &res),
                     BINDLOG_APPLIED);
    assert_int_equal(res.lsn, head + 3);
    assert_int_equal(bindlog_route(s, rkey, 1767225600000 + 7 * 86400000LL, &idle,
                                   "s-after-route", NULL, 0, &rr),
                     BINDLOG_CREATED);
    assert_int_equal(rr.lsn, head + 4);
    assert_int_equal(bindlog_check(s, &chk, NULL, NULL), 0);
    assert_int_equal(chk.problems, 0);
    assert_int_equal(chk.head_lsn, head + 4);
}

/* Format 4 (tests/data/format4, written by b5f9e13: make_format4.sh,
 * gen_format4.c), one store closed cleanly, one compacted, one whose
 * process died with its last records in bindlog.wal only (and a log ring
 * that wrapped many times).  They upgrade like the older formats
 * (upgrade_golden: the same head and digest, a clean check, every key's
 * chain), and the new store holds what format-4 code recorded (counts,
 * applied counters, children), keeps its sessions as references to their
 * records, and takes new events. */
static void upgrade__format4_stores(void **state)
{
    (void)state;
    static const char *const which[] = {"plain", "compacted", "crashed"};
    const char *cli = getenv("BINDLOG_CLI");
    upgrade_golden(4, TARBALL4, EXPECTED4);
    if (cli == NULL)
        print_message("BINDLOG_CLI not set (no tools in this build): the CLI's part skipped\n");
    for (size_t i = 0; i < 3; i++) {
        fx *f = extract_from(TARBALL4, which[i]);
        bindlog_upgrade_report r;
        bindlog *s;
        uint64_t head = 0;
        char hex[33], got[33];
        unsigned char d[BINDLOG_DIGEST_SIZE];

        expected_in(EXPECTED4, which[i], &head, hex);
        uint64_t base = expected_num(EXPECTED4, which[i], "base", NULL);
        assert_int_equal(references_in(f->dir), 0); /* format 4: every value whole */
        if (cli != NULL) {
            char cmd[2400], out[1024] = "";
            snprintf(cmd, sizeof cmd, "'%s' upgrade '%s' 2>&1", cli, f->dir);
            FILE *p = popen(cmd, "r");
            assert_non_null(p);
            size_t got_n = fread(out, 1, sizeof out - 1, p);
            out[got_n] = '\0';
            assert_int_equal(pclose(p), 0);
            if (strstr(out, "format 4") == NULL && strstr(out, "format:   4") == NULL)
                fail_msg("bindlog upgrade %s said:\n%s", which[i], out);
        } else {
            assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), 0);
            assert_int_equal(r.from_format, 4);
        }
        assert_true(references_in(f->dir) > 0);

        assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
        assert_int_equal(bindlog_digest(s, d, NULL), 0);
        bindlog_digest_hex(d, got);
        assert_string_equal(got, hex);
        golden_counts(s, EXPECTED4, which[i], head, base);
        golden_hubs(s, EXPECTED4, which[i]);

        golden_takes_events(s, "after:golden4", head);
        bindlog_close(s);
        fx_free(f);
    }
}


/* Run `bindlog ARGS` (BINDLOG_CLI), its stdout and stderr into out (cap
 * bytes with the NUL); returns its exit status, -1 if it did not exit. */
static int cli_says(const char *cli, const char *args, char *out, size_t cap)
{
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", cli, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* What log_bytes adds up. */
typedef struct log_sum {
    uint64_t bytes, uuids;
} log_sum;

static void add_record(void *ctx, const MDB_val *v)
{
    log_sum *x = ctx;
    bl_record r;
    unsigned char u[BL_UUID_BYTES];
    assert_int_equal(bl_record_decode(v->mv_data, v->mv_size, &r), 0);
    x->uuids += (uint64_t)bl_uuid_pack(r.sid, r.sid_len, u) + bl_uuid_pack(r.other, r.other_len, u);
    x->bytes += v->mv_size;
}

/* Bytes of all values of data.mdb's log table (the records), and in
 * *uuids how many of their ids are lower-case UUIDs (each record decoded). */
static uint64_t log_bytes(const char *dir, uint64_t *uuids)
{
    log_sum x = {0, 0};
    assert_int_equal(each_value(dir, "log", add_record, &x), 1);
    *uuids = x.uuids;
    return x.bytes;
}

/*
 * The golden stores of format `fmt` (5 or 6: tests/data/format5, written
 * by a187d59, and format6, by dc61641; make_format<N>.sh, gen_format<N>.c:
 * the events of format4's stores), one store closed cleanly, one
 * compacted, one whose process died with its last records in bindlog.wal
 * only.  As shipped they keep their sessions in each of their format's
 * forms (references to their records, whole values, and in the compacted
 * store references whose fields the base image holds), format 6 with the
 * sibling chain, both with log records of version 3; they are refused
 * until upgraded.  `bindlog upgrade` then gives each what format-<fmt> code
 * recorded (head, digest, counts, applied counters, children), every
 * record in version 4 (the log smaller wherever an id is a lower-case
 * UUID), the sibling chain, `bindlog check` clean; a second upgrade leaves
 * it alone, and it takes new events.
 */
static void upgrade_golden_current(int fmt, const char *tarball, const char *expected,
                                   const char *refusal)
{
    static const char *const which[] = {"plain", "compacted", "crashed"};
    const char *cli = getenv("BINDLOG_CLI");
    upgrade_golden(fmt, tarball, expected);
    if (cli == NULL)
        print_message("BINDLOG_CLI not set (no tools in this build): the CLI's part skipped\n");
    for (size_t i = 0; i < 3; i++) {
        fx *f = extract_from(tarball, which[i]);
        bindlog_upgrade_report r;
        bindlog_check_report chk;
        bindlog *s;
        uint64_t head = 0, dhead = 0;
        char hex[33], got[33], path[1100], want[64], tag[32];
        char args[1200], out[2048];
        unsigned char d[BINDLOG_DIGEST_SIZE];

        expected_in(expected, which[i], &head, hex);
        uint64_t base = expected_num(expected, which[i], "base", NULL);
        /* the format's forms, in data.mdb as shipped: most sessions refer
         * to the record that created them, those re-opened elsewhere are
         * whole; a compacted store's base image holds the sessions of the
         * records it removed whole, marked where the live table keeps a
         * reference (which then reads its fields from there) */
        assert_true(values_in(f->dir, "sessions", 3, -1) > 0);
        assert_true(values_in(f->dir, "sessions", 2, -1) > 0);
        if (base > 0) {
            assert_true(values_in(f->dir, "base_sessions", 2, 1) > 0);
            assert_true(values_in(f->dir, "base_sessions", 2, 0) > 0);
        } else {
            assert_int_equal(values_in(f->dir, "base_sessions", 2, -1), 0);
        }
        if (fmt == 5) {
            assert_int_equal(values_in(f->dir, "sessions", 3, 2), 0); /* no chain */
            if (base == 0) /* format 5 indexes every child */
                assert_true(values_in(f->dir, "children", -1, -1) > 0);
        } else {
            assert_true(values_in(f->dir, "sessions", 3, 2) > 0);
            if (base == 0) /* format 6 links them */
                assert_int_equal(values_in(f->dir, "children", -1, -1), 0);
        }
        assert_int_equal(values_in(f->dir, "log", 3, -1), values_in(f->dir, "log", -1, -1));
        uint64_t old_uuids, new_uuids, old_log = log_bytes(f->dir, &old_uuids);
        assert_int_equal(bindlog_open(&s, f->dir, NULL), BINDLOG_EVERSION);
        assert_non_null(strstr(bindlog_last_error(), refusal));
        /* `bindlog upgrade`, as an operator runs it */
        /* the report's sizes are the old store's, as the library read them */
        unsigned long long nb = expected_num(expected, which[i], "bindings", NULL);
        unsigned long long ns = expected_num(expected, which[i], "sessions", NULL);
        if (cli != NULL) {
            char state_line[96];
            snprintf(args, sizeof args, "upgrade '%s'", f->dir);
            snprintf(want, sizeof want, "format:   %d -> %d", fmt, BINDLOG_FORMAT_VERSION);
            snprintf(state_line, sizeof state_line, "state:    %llu bindings, %llu sessions\n",
                     nb, ns);
            int code = cli_says(cli, args, out, sizeof out);
            if (code != 0 || strstr(out, want) == NULL || strstr(out, state_line) == NULL)
                fail_msg("bindlog upgrade %s (exit %d) said:\n%s", which[i], code, out);
        } else {
            assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), 0);
            assert_int_equal(r.from_format, fmt);
            assert_int_equal(r.bindings, nb);
            assert_int_equal(r.sessions, ns);
        }
        /* format 7: every record re-derived in version 4, shorter by 20
         * bytes for each lower-case UUID it names (its 16 bytes, not 36),
         * and otherwise the same size (the ids here are under 64 bytes,
         * whose code takes a byte as their length did) */
        assert_true(values_in(f->dir, "log", 4, -1) > 0);
        assert_int_equal(values_in(f->dir, "log", 4, -1), values_in(f->dir, "log", -1, -1));
        uint64_t new_log = log_bytes(f->dir, &new_uuids);
        print_message("%s: log records %llu -> %llu bytes, %llu lower-case UUIDs\n", which[i],
                      (unsigned long long)old_log, (unsigned long long)new_log,
                      (unsigned long long)old_uuids);
        assert_true(old_uuids > 100);
        if (expected_num(expected, which[i], "checkpoint", NULL) == head) {
            assert_int_equal(new_uuids, old_uuids);
            assert_int_equal(new_log, old_log - 20 * old_uuids);
        } else { /* crashed: its last records were in bindlog.wal only */
            assert_true(new_uuids > old_uuids);
        }
        /* the children of the log's records are linked through the session
         * values, the children table holds the base image's */
        assert_true(values_in(f->dir, "sessions", 3, 2) > 0);
        if (base == 0)
            assert_int_equal(values_in(f->dir, "children", -1, -1), 0);
        else
            assert_true(values_in(f->dir, "children", -1, -1) > 0);
        if (cli != NULL) {
            char sd[64], rd[64];
            snprintf(args, sizeof args, "-d '%s' check", f->dir);
            snprintf(sd, sizeof sd, "state_digest:   %s\n", hex);
            snprintf(rd, sizeof rd, "replay_digest:  %s\n", hex);
            int code = cli_says(cli, args, out, sizeof out);
            if (code != 0 || strstr(out, sd) == NULL || strstr(out, rd) == NULL ||
                strstr(out, "result:         ok\n") == NULL)
                fail_msg("bindlog check %s (exit %d) said:\n%s", which[i], code, out);
        }

        /* opened as any gateway would */
        assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
        assert_int_equal(bindlog_digest(s, d, &dhead), 0);
        bindlog_digest_hex(d, got);
        assert_string_equal(got, hex);
        assert_int_equal(dhead, head);
        assert_int_equal(bindlog_check(s, &chk, NULL, NULL), 0);
        if (chk.problems != 0)
            fail_msg("%s: %s", which[i], chk.message);
        assert_int_equal(chk.head_lsn, head);
        assert_int_equal(chk.records, head - base);
        /* each hub child's parent is read through its reference (from
         * its record, or in the compacted store from the base image) */
        golden_counts(s, expected, which[i], head, base);
        golden_hubs(s, expected, which[i]);
        bindlog_close(s);

        /* bindlog upgrade: already current, nothing touched */
        struct stat a, b;
        size_t before_len, after_len;
        snprintf(path, sizeof path, "%s/data.mdb", f->dir);
        assert_int_equal(stat(path, &a), 0);
        unsigned char *before = slurp(path, &before_len);
        assert_non_null(before);
        assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), 0);
        assert_string_equal(bindlog_last_error(), "");
        assert_int_equal(r.upgraded, 0);
        assert_int_equal(r.from_format, BINDLOG_FORMAT_VERSION);
        if (cli != NULL) {
            snprintf(args, sizeof args, "upgrade '%s'", f->dir);
            snprintf(want, sizeof want, "format:   %d, already current: nothing to do",
                     BINDLOG_FORMAT_VERSION);
            int code = cli_says(cli, args, out, sizeof out);
            if (code != 0 || strstr(out, want) == NULL)
                fail_msg("bindlog upgrade %s (exit %d) said:\n%s", which[i], code, out);
        }
        assert_int_equal(stat(path, &b), 0);
        assert_int_equal(a.st_ino, b.st_ino);
        assert_int_equal(a.st_size, b.st_size);
        unsigned char *after = slurp(path, &after_len);
        assert_non_null(after);
        assert_int_equal(after_len, before_len);
        assert_memory_equal(after, before, before_len);
        free(before);
        free(after);
        snprintf(tag, sizeof tag, "format%d-backup", fmt);
        assert_true(exists(f->dir, tag)); /* the upgrade's */
        assert_false(exists(f->dir, ".bindlog-upgrade"));

        /* and it takes new events where its log ends */
        snprintf(tag, sizeof tag, "after:golden%d", fmt);
        assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
        golden_takes_events(s, tag, head);
        bindlog_close(s);
        fx_free(f);
    }
}

static void upgrade__format5_stores(void **state)
{
    (void)state;
    upgrade_golden_current(5, TARBALL5, EXPECTED5, "before session values linked their children");
}

static void upgrade__format6_stores(void **state)
{
    (void)state;
    upgrade_golden_current(6, TARBALL6, EXPECTED6, "before records kept UUIDs in 16 bytes");
}

/* A newer format, a format that never was, someone else's LMDB file:
 * refused, named, nothing changed. */
static void upgrade__other_formats_are_refused(void **state)
{
    (void)state;
    static const struct {
        uint32_t format;
        int magic, rc;
        const char *says;
    } cases[] = {
        {8, 1, BINDLOG_EVERSION, "format 8, newer than this library's 7"},
        {0, 1, BINDLOG_ECORRUPT, "no valid format record"},
        {1, 0, BINDLOG_ENOTSTORE, "no bindlog magic"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fx *f = extract("plain");
        char path[1100];
        bindlog_upgrade_report r;
        stamp(f->dir, cases[i].format, cases[i].magic);
        snprintf(path, sizeof path, "%s/lock.mdb", f->dir);
        unlink(path); /* what stamp() made */
        free(f->orig);
        snprintf(path, sizeof path, "%s/data.mdb", f->dir);
        f->orig = slurp(path, &f->orig_len);
        assert_int_equal(bindlog_upgrade(f->dir, NULL, &r, NULL, NULL), cases[i].rc);
        if (strstr(bindlog_last_error(), cases[i].says) == NULL)
            fail_msg("case %zu: \"%s\"", i, bindlog_last_error());
        unchanged(f);
        fx_free(f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(upgrade__plain_store),
        cmocka_unit_test(upgrade__compacted_store),
        cmocka_unit_test(upgrade__current_store_is_left_alone),
        cmocka_unit_test(upgrade__bad_arguments_and_paths),
        cmocka_unit_test(upgrade__damaged_store_is_refused),
        cmocka_unit_test(upgrade__store_in_use_is_refused),
        cmocka_unit_test(upgrade__leftovers_and_backups),
        cmocka_unit_test(upgrade__rollback_as_documented),
        cmocka_unit_test(upgrade__damaged_current_store_keeps_its_log),
        cmocka_unit_test(upgrade__random_damage_never_crashes),
        cmocka_unit_test(upgrade__other_formats_are_refused),
        cmocka_unit_test(upgrade__format2_stores),
        cmocka_unit_test(upgrade__format3_stores),
        cmocka_unit_test(upgrade__format3_routed_stores),
        cmocka_unit_test(upgrade__format4_stores),
        cmocka_unit_test(upgrade__format5_stores),
        cmocka_unit_test(upgrade__format6_stores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
