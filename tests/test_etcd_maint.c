/*
 * test_etcd_maint.c -- check, replay, compaction, export and import of a
 * store on etcd (src/etcd/etcd_maint.c), against a real 1-member etcd cluster.
 *
 * The cluster is started here with tests/etcd/cluster.sh (etcd's default
 * --max-txn-ops of 128, so that imports and compactions really span several
 * Txns) and stopped in the group teardown; the script's watchdog stops it
 * if this process dies.  Without etcd the tests skip, unless
 * BINDLOG_REQUIRE_ETCD=1, where they fail.
 *
 * The operations are called through the backend's functions (bl_etcd_*),
 * so that these tests do not depend on how the backend table wires them;
 * the public calls reach the same functions once it does.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd/etcd_store.h"
#include "core/record.h"
#include "testutil.h"
#include "workload.h"

/* ---- harness ---------------------------------------------------------------- */

static struct {
    int up;
    char *dir;
    char endpoints[512];
    unsigned n; /* locations handed out */
} cl;

static const char *script_path(void)
{
    static char path[4096];
    const char *src = getenv("BINDLOG_TEST_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/etcd/cluster.sh",
             src != NULL && *src != '\0' ? src : BINDLOG_TEST_SOURCE_DIR);
    return path;
}

static int run_script(char *out, size_t cap, const char *fmt, ...)
{
    char args[1024], cmd[6000], line[1024] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "BL_CLUSTER_OWNER_PID=%ld bash '%s' %s", (long)getpid(),
             script_path(), args);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    if (fgets(line, sizeof line, p) == NULL)
        line[0] = '\0';
    while (fgetc(p) != EOF) {
    }
    int status = pclose(p);
    line[strcspn(line, "\n")] = '\0';
    if (out != NULL)
        snprintf(out, cap, "%s", line);
    return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int group_setup(void **state)
{
    (void)state;
    if (run_script(NULL, 0, "check") != 0) {
        fprintf(stderr, "test_etcd_maint: etcd not found; %s\n",
                getenv("BINDLOG_REQUIRE_ETCD") ? "BINDLOG_REQUIRE_ETCD set: failing" : "skipping");
        return 0;
    }
    cl.dir = tu_mkdtemp("etcd-maint");
    if (run_script(cl.endpoints, sizeof cl.endpoints, "start 1 '%s/cluster'", cl.dir) != 0 ||
        cl.endpoints[0] == '\0') {
        fprintf(stderr, "test_etcd_maint: could not start etcd in %s\n", cl.dir);
        return -1;
    }
    cl.up = 1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (cl.dir != NULL) {
        if (cl.up)
            run_script(NULL, 0, "stop '%s/cluster'", cl.dir);
        tu_rmtree(cl.dir);
        free(cl.dir);
    }
    return 0;
}

static void need_etcd(void)
{
    if (!cl.up) {
        const char *req = getenv("BINDLOG_REQUIRE_ETCD");
        if (req != NULL && strcmp(req, "1") == 0)
            fail_msg("etcd is not installed but BINDLOG_REQUIRE_ETCD=1");
        skip();
    }
}

/* A fresh etcd location (a prefix nobody uses); free it. */
static char *etcd_loc(const char *tag)
{
    char *loc = malloc(1024);
    assert_non_null(loc);
    snprintf(loc, 1024, "etcd://%s/maint-%s-%ld-%u", cl.endpoints, tag, (long)getpid(), cl.n++);
    return loc;
}

static bindlog *open_loc(const char *loc)
{
    return wl_open_store(loc);
}

/* Apply n workload events. */
static void run_events(bindlog *s, wl_gen *g, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        wl_gen_step(g, s);
}

static void digest_of(bindlog *s, unsigned char d[BINDLOG_DIGEST_SIZE], uint64_t *head)
{
    assert_int_equal(bindlog_digest(s, d, head), 0);
}

/* An anonymous temporary file. */
static int tmpfile_fd(void)
{
    char path[4096];
    const char *t = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/etcd-maint-XXXXXX", t && *t ? t : "/tmp");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    return fd;
}

static int is_etcd(bindlog *s)
{
    return strncmp(s->path, "etcd://", 7) == 0;
}

/* Export through whichever backend the handle has; rewinds the file. */
static int export_to(bindlog *s, uint64_t from, int fd, uint64_t *records)
{
    int rc = is_etcd(s) ? bl_etcd_export(s, from, fd, records, NULL, NULL)
                        : bindlog_export(s, from, fd, records, NULL, NULL);
    lseek(fd, 0, SEEK_SET);
    return rc;
}

static int import_from(bindlog *s, int fd, uint64_t *records, uint64_t *off)
{
    lseek(fd, 0, SEEK_SET);
    int rc = is_etcd(s) ? bl_etcd_import(s, fd, records, off, NULL, NULL)
                        : bindlog_import(s, fd, records, off, NULL, NULL);
    if (rc == BINDLOG_EIO)
        fprintf(stderr, "import: %s\n", bl_etcd_last_error());
    else if (rc != 0)
        fprintf(stderr, "import: %s\n", bindlog_last_error());
    return rc;
}

static void check_clean(bindlog *s)
{
    bindlog_check_report r;
    int rc = is_etcd(s) ? bl_etcd_check(s, &r, NULL, NULL) : bindlog_check(s, &r, NULL, NULL);
    assert_int_equal(rc, 0);
    if (r.problems != 0)
        fail_msg("check found %llu problems: %s", (unsigned long long)r.problems, r.message);
    assert_memory_equal(r.state_digest, r.replay_digest, BINDLOG_DIGEST_SIZE);
}

/* The whole content of a file. */
static unsigned char *slurp(int fd, size_t *len)
{
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    unsigned char *p = malloc((size_t)st.st_size + 1);
    assert_non_null(p);
    assert_int_equal(pread(fd, p, (size_t)st.st_size, 0), st.st_size);
    *len = (size_t)st.st_size;
    return p;
}

/* ---- tests ---------------------------------------------------------------------- */

/* LMDB -> etcd -> LMDB keeps the digest, and both backends write the same
 * stream byte for byte; the source has a base image (compacted) so the
 * image path is exercised, and it is large enough to need many Txns. */
static void etcd_maint__round_trip_keeps_digest(void **state)
{
    (void)state;
    need_etcd();
    char *d1 = tu_mkdtemp("lmdb-src"), *d2 = tu_mkdtemp("lmdb-dst"), *loc = etcd_loc("rt");
    unsigned char da[BINDLOG_DIGEST_SIZE], de[BINDLOG_DIGEST_SIZE], db[BINDLOG_DIGEST_SIZE];
    uint64_t ha, he, hb, recs = 0, off = 0;
    wl_gen g;

    wl_now = 1700000000000;
    wl_gen_init(&g, 7);
    bindlog *a = open_loc(d1);
    run_events(a, &g, 400);
    assert_int_equal(bindlog_compact(a, 150, NULL, NULL, NULL), 0);
    digest_of(a, da, &ha);

    int f1 = tmpfile_fd(), f2 = tmpfile_fd();
    assert_int_equal(export_to(a, 1, f1, &recs), 0);
    assert_int_equal(recs, 400 - 149);

    bindlog *e = open_loc(loc);
    assert_int_equal(import_from(e, f1, &recs, &off), 0);
    assert_int_equal(recs, 400 - 149);
    digest_of(e, de, &he);
    assert_memory_equal(da, de, BINDLOG_DIGEST_SIZE);
    assert_int_equal(ha, he);
    check_clean(e);

    /* the same stream, byte for byte, from either backend */
    assert_int_equal(export_to(e, 1, f2, &recs), 0);
    size_t n1, n2;
    unsigned char *s1 = slurp(f1, &n1), *s2 = slurp(f2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(s1, s2, n1);
    free(s1);
    free(s2);

    /* and back into LMDB; writes go on there afterwards */
    bindlog *b = open_loc(d2);
    assert_int_equal(import_from(b, f2, &recs, &off), 0);
    digest_of(b, db, &hb);
    assert_memory_equal(da, db, BINDLOG_DIGEST_SIZE);
    assert_int_equal(hb, ha);
    check_clean(b);

    /* the etcd store takes writes after the import */
    run_events(e, &g, 5);
    check_clean(e);

    close(f1);
    close(f2);
    bindlog_close(a);
    bindlog_close(b);
    bindlog_close(e);
    tu_store_remove(loc);
    tu_rmtree(d1);
    tu_rmtree(d2);
    free(loc);
    free(d1);
    free(d2);
}

/* Incremental streams: a small one applies in one Txn; one too large for a
 * Txn is refused with nothing written; a gap and an overlap are refused. */
static void etcd_maint__incremental_import(void **state)
{
    (void)state;
    need_etcd();
    char *d1 = tu_mkdtemp("lmdb-inc"), *loc = etcd_loc("inc");
    unsigned char da[BINDLOG_DIGEST_SIZE], de[BINDLOG_DIGEST_SIZE], d0[BINDLOG_DIGEST_SIZE];
    uint64_t ha, he, h0, recs, off;
    wl_gen g;

    wl_now = 1700000000000;
    wl_gen_init(&g, 11);
    bindlog *a = open_loc(d1);
    run_events(a, &g, 60);
    int f = tmpfile_fd();
    assert_int_equal(export_to(a, 1, f, &recs), 0);
    bindlog *e = open_loc(loc);
    assert_int_equal(import_from(e, f, &recs, &off), 0);
    close(f);

    /* 5 more events: one Txn */
    run_events(a, &g, 5);
    f = tmpfile_fd();
    assert_int_equal(export_to(a, 61, f, &recs), 0);
    assert_int_equal(recs, 5);
    assert_int_equal(import_from(e, f, &recs, &off), 0);
    assert_int_equal(recs, 5);
    digest_of(a, da, &ha);
    digest_of(e, de, &he);
    assert_memory_equal(da, de, BINDLOG_DIGEST_SIZE);
    assert_int_equal(he, 65);
    check_clean(e);

    /* the same stream again: overlap */
    assert_int_equal(import_from(e, f, &recs, &off), BINDLOG_EEXIST);
    assert_int_equal(off, 16);
    close(f);

    /* a gap: records 70.. while the store ends at 65 */
    run_events(a, &g, 10);
    f = tmpfile_fd();
    assert_int_equal(export_to(a, 70, f, &recs), 0);
    assert_int_equal(import_from(e, f, &recs, &off), BINDLOG_ENOTFOUND);
    assert_int_equal(off, 16);
    close(f);

    /* 200 events do not fit one Txn of 128 operations: refused, unchanged */
    long keys0 = tu_etcd_count(loc);
    digest_of(e, d0, &h0);
    run_events(a, &g, 190);
    f = tmpfile_fd();
    assert_int_equal(export_to(a, 66, f, &recs), 0);
    assert_int_equal(import_from(e, f, &recs, &off), BINDLOG_ENOSPC);
    digest_of(e, de, &he);
    assert_memory_equal(d0, de, BINDLOG_DIGEST_SIZE);
    assert_int_equal(he, h0);
    assert_int_equal(tu_etcd_count(loc), keys0);
    close(f);

    bindlog_close(a);
    bindlog_close(e);
    tu_store_remove(loc);
    tu_rmtree(d1);
    free(loc);
    free(d1);
}

/* Refused streams leave the target as it was: a full stream into a store
 * that is not empty, a damaged stream into an empty one. */
static void etcd_maint__import_refusals_change_nothing(void **state)
{
    (void)state;
    need_etcd();
    char *loc = etcd_loc("ref"), *loc2 = etcd_loc("ref2");
    unsigned char d0[BINDLOG_DIGEST_SIZE], d1[BINDLOG_DIGEST_SIZE];
    uint64_t h0, h1, recs, off;
    wl_gen g;

    wl_now = 1700000000000;
    wl_gen_init(&g, 3);
    bindlog *e = open_loc(loc);
    run_events(e, &g, 80);
    digest_of(e, d0, &h0);
    long keys0 = tu_etcd_count(loc);

    int f = tmpfile_fd();
    assert_int_equal(export_to(e, 1, f, &recs), 0);
    /* full stream into a store that is not empty */
    assert_int_equal(import_from(e, f, &recs, &off), BINDLOG_EEXIST);
    assert_int_equal(off, 0);
    digest_of(e, d1, &h1);
    assert_memory_equal(d0, d1, BINDLOG_DIGEST_SIZE);
    assert_int_equal(tu_etcd_count(loc), keys0);

    /* a damaged stream (one byte of a record flipped) into an empty store */
    size_t n;
    unsigned char *s = slurp(f, &n);
    s[n / 2] ^= 0x20;
    int g2 = tmpfile_fd();
    assert_int_equal(write(g2, s, n), (ssize_t)n);
    free(s);
    bindlog *e2 = open_loc(loc2);
    long empty = tu_etcd_count(loc2);
    assert_int_equal(import_from(e2, g2, &recs, &off), BINDLOG_ECORRUPT);
    assert_true(off > 0 && off < n);
    assert_int_equal(tu_etcd_count(loc2), empty);
    digest_of(e2, d1, &h1);
    assert_int_equal(h1, 0);

    /* the intact stream then imports */
    assert_int_equal(import_from(e2, f, &recs, &off), 0);
    digest_of(e2, d1, &h1);
    assert_memory_equal(d0, d1, BINDLOG_DIGEST_SIZE);
    check_clean(e2);

    close(f);
    close(g2);
    bindlog_close(e);
    bindlog_close(e2);
    tu_store_remove(loc);
    tu_store_remove(loc2);
    free(loc);
    free(loc2);
}

/* Compaction on etcd: the digest stays, the records below the cut go,
 * check passes, and replay and export agree with an LMDB copy. */
static void etcd_maint__compact_then_check(void **state)
{
    (void)state;
    need_etcd();
    char *loc = etcd_loc("cmp"), *d1 = tu_mkdtemp("cmp-lmdb"), *r1 = tu_mkdtemp("cmp-r1"),
         *r2 = tu_mkdtemp("cmp-r2");
    unsigned char d0[BINDLOG_DIGEST_SIZE], dd[BINDLOG_DIGEST_SIZE], rd1[BINDLOG_DIGEST_SIZE],
        rd2[BINDLOG_DIGEST_SIZE];
    uint64_t h0, h1, removed = 0, recs, off, last1 = 0, last2 = 0;
    wl_gen g;

    wl_now = 1700000000000;
    wl_gen_init(&g, 5);
    bindlog *e = open_loc(loc);
    run_events(e, &g, 300);
    digest_of(e, d0, &h0);
    assert_int_equal(h0, 300);

    assert_int_equal(bl_etcd_compact_log(e, 201, &removed, NULL, NULL), 0);
    assert_int_equal(removed, 200);
    digest_of(e, dd, &h1);
    assert_memory_equal(d0, dd, BINDLOG_DIGEST_SIZE);
    check_clean(e);
    /* again, to the head: folds the rest; and nothing more after that */
    assert_int_equal(bl_etcd_compact_log(e, UINT64_MAX, &removed, NULL, NULL), 0);
    assert_int_equal(removed, 100);
    assert_int_equal(bl_etcd_compact_log(e, UINT64_MAX, &removed, NULL, NULL), 0);
    assert_int_equal(removed, 0);
    check_clean(e);

    /* writers go on; replay to an LSN after the base agrees with LMDB's */
    run_events(e, &g, 30);
    check_clean(e);
    int f = tmpfile_fd();
    assert_int_equal(export_to(e, 1, f, &recs), 0);
    assert_int_equal(recs, 30);
    bindlog *a = open_loc(d1);
    assert_int_equal(import_from(a, f, &recs, &off), 0);
    digest_of(e, d0, &h0);
    digest_of(a, dd, &h1);
    assert_memory_equal(d0, dd, BINDLOG_DIGEST_SIZE);
    tu_rmtree(r1);
    tu_rmtree(r2);
    assert_int_equal(bl_etcd_replay(e, r1, 320, INT64_MAX, rd1, &last1, NULL, NULL), 0);
    assert_int_equal(bindlog_replay(a, r2, 320, INT64_MAX, rd2, &last2, NULL, NULL), 0);
    assert_int_equal(last1, 320);
    assert_int_equal(last2, 320);
    assert_memory_equal(rd1, rd2, BINDLOG_DIGEST_SIZE);
    /* before the base image: that past is gone */
    tu_rmtree(r1);
    assert_int_equal(bl_etcd_replay(e, r1, 100, INT64_MAX, rd1, &last1, NULL, NULL),
                     BINDLOG_ENOTFOUND);

    close(f);
    bindlog_close(a);
    bindlog_close(e);
    tu_store_remove(loc);
    tu_rmtree(d1);
    tu_rmtree(r1);
    tu_rmtree(r2);
    free(loc);
    free(d1);
    free(r1);
    free(r2);
}

/* Records and state altered behind the store's back (put with the client)
 * are found, and named. */
static void etcd_maint__check_catches_tampering(void **state)
{
    (void)state;
    need_etcd();
    char *loc = etcd_loc("tamper");
    bindlog_check_report r;
    wl_gen g;

    wl_now = 1700000000000;
    wl_gen_init(&g, 9);
    bindlog *e = open_loc(loc);
    run_events(e, &g, 50);
    check_clean(e);

    /* a binding changed: re-encoded validly, pointing elsewhere */
    bindlog_iter *it = NULL;
    bindlog_binding bnd;
    assert_int_equal(bindlog_bindings_iter(e, &it), 0);
    assert_int_equal(bindlog_iter_next_binding(it, &bnd), 1);
    bindlog_iter_close(it);
    bl_bval v = {.sid = "forged-session", .sid_len = 14, .generation = bnd.generation,
                 .lsn = bnd.lsn, .updated_ms = bnd.updated_ms};
    unsigned char buf[600], name[600];
    size_t vl = bl_bval_encode(&v, buf, sizeof buf);
    assert_true(vl > 0);
    size_t kl = strlen(bnd.key);
    memcpy(name, "b/", 2);
    memcpy(name + 2, bnd.key, kl);
    name[2 + kl] = '\0';
    assert_int_equal(tu_etcd_put(loc, (const char *)name, buf, vl), 0);
    assert_int_equal(bl_etcd_check(e, &r, NULL, NULL), 0);
    assert_true(r.problems > 0);
    assert_string_equal(r.first_bad_key, bnd.key);
    assert_memory_not_equal(r.state_digest, r.replay_digest, BINDLOG_DIGEST_SIZE);

    /* a log record with a flipped byte: its checksum names it */
    bindlog_close(e);
    char *loc2 = etcd_loc("tamper2");
    e = open_loc(loc2);
    wl_gen_init(&g, 10);
    run_events(e, &g, 40);
    check_clean(e);
    bl_etcd_kvs kvs = {0};
    bl_estore *st = bl_es_of(e);
    assert_int_equal(bl_es_get(st, BL_ES_LOG, "00000000000000000017", 20, 0, &kvs), 0);
    unsigned char *rec = malloc(kvs.kvs[0].value_len);
    memcpy(rec, kvs.kvs[0].value, kvs.kvs[0].value_len);
    size_t rec17_len = kvs.kvs[0].value_len;
    unsigned char *rec17 = malloc(rec17_len);
    memcpy(rec17, rec, rec17_len); /* the intact record, put back below */
    rec[kvs.kvs[0].value_len / 2] ^= 1;
    assert_int_equal(tu_etcd_put(loc2, "l/00000000000000000017", rec, kvs.kvs[0].value_len), 0);
    bl_etcd_kvs_free(&kvs);
    free(rec);
    assert_int_equal(bl_etcd_check(e, &r, NULL, NULL), 0);
    assert_true(r.problems > 0);
    assert_int_equal(r.first_bad_lsn, 17);
    /* export refuses to ship it */
    int f = tmpfile_fd();
    uint64_t recs;
    assert_int_equal(export_to(e, 1, f, &recs), BINDLOG_ECORRUPT);
    close(f);

    /* a children entry gone: etcd indexes every child, and the LMDB
     * layout the mirror is checked in links the ones after the base image
     * through the sessions; the mirror still counts etcd's entries */
    bindlog_iter *si;
    bindlog_session se;
    int found = 0;
    assert_int_equal(bindlog_sessions_iter(e, &si), 0);
    while (!found && bindlog_iter_next_session(si, &se, NULL, 0) == 1)
        found = se.parent_id[0] != '\0';
    bindlog_iter_close(si);
    assert_true(found);
    char ck[300];
    size_t pl = strlen(se.parent_id), kl2 = strlen(se.session_id);
    memcpy(ck, "c/", 2);
    memcpy(ck + 2, se.parent_id, pl);
    ck[2 + pl] = '\0';
    memcpy(ck + 3 + pl, se.session_id, kl2);
    assert_int_equal(tu_etcd_del(loc2, ck, 3 + pl + kl2), 0);
    assert_int_equal(bl_etcd_check(e, &r, NULL, NULL), 0);
    assert_true(r.problems >= 2);
    assert_non_null(strstr(r.message, "etcd children index holds"));
    assert_int_equal(tu_etcd_put(loc2, "l/00000000000000000017", rec17, rec17_len), 0);

    /* a log key that is not an LSN */
    assert_int_equal(tu_etcd_put(loc2, "l/12x", "junk", 4), 0);
    assert_int_equal(bl_etcd_check(e, &r, NULL, NULL), 0);
    assert_true(r.problems >= 2);
    assert_non_null(strstr(r.message, "l/12x") ? r.message : strstr(r.message, "12x"));

    bindlog_close(e);
    free(rec17);
    tu_store_remove(loc);
    tu_store_remove(loc2);
    free(loc);
    free(loc2);
}

int main(void)
{
    /* these tests call the backend's functions on handles bindlog_open
     * made: both must be the copy linked in, not the module's */
    bl_module_builtin("etcd", &bl_etcd_ops);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(etcd_maint__round_trip_keeps_digest),
        cmocka_unit_test(etcd_maint__incremental_import),
        cmocka_unit_test(etcd_maint__import_refusals_change_nothing),
        cmocka_unit_test(etcd_maint__compact_then_check),
        cmocka_unit_test(etcd_maint__check_catches_tampering),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
