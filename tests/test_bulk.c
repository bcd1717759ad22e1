/*
 * test_bulk.c -- the bulk replay (src/maint/bulk.c) against the sequential one.
 *
 * Replay, check and import of a full stream first try the partitioned bulk
 * path and fall back to the record-by-record replay when it cannot decide
 * alone.  The contract: whichever path runs, every table of the result is
 * byte-identical (BINDLOG_BULK=0 forces the sequential path), and the bulk
 * path really runs on healthy stores (the process-wide tally says so).
 * BINDLOG_BULK_PARTITIONS forces the number of partitions, so that small
 * stores exercise the merge of many.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "bindlog.h"
#include "core/record.h"
#include "core/backend.h"
#include "maint/bulk.h"
#include "maint/maint.h"
#include "rawsval.h"
#include "testutil.h"
#include "workload.h"

#define NEVENTS 3000

static const char *const tables[] = {"meta",     "log",           "bindings",     "sessions",
                                     "children", "history",       "base_bindings", "base_sessions"};

typedef struct fx {
    char *tmp;
    char dir[1024];
    bindlog *s;
    int64_t mid_time; /* time of record NEVENTS / 2 */
} fx;

static void set_parts(int n)
{
    char v[16];
    if (n <= 0) {
        unsetenv("BINDLOG_BULK_PARTITIONS");
        return;
    }
    snprintf(v, sizeof v, "%d", n);
    setenv("BINDLOG_BULK_PARTITIONS", v, 1);
}

/* Partition of a key with n partitions, as bulk.c computes it. */
static unsigned part_of(const char *key, unsigned n)
{
    return (unsigned)((XXH3_64bits(key, strlen(key)) >> 32) % n);
}

/* Two keys that land in different partitions when there are 2. */
static void two_keys(char *a, char *b, size_t cap)
{
    snprintf(a, cap, "agent:main:move:a");
    for (int i = 0;; i++) {
        snprintf(b, cap, "agent:main:move:b%d", i);
        if (part_of(a, 2) != part_of(b, 2))
            return;
    }
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    wl_gen g;

    f->tmp = tu_mkdtemp("bulk");
    snprintf(f->dir, sizeof(f->dir), "%s/src", f->tmp);
    wl_now = 1000000;
    f->s = wl_open_store(f->dir);
    wl_gen_init(&g, 7);
    for (uint64_t n = 1; n <= NEVENTS; n++) {
        assert_int_equal(wl_gen_step(&g, f->s), n);
        if (n == NEVENTS / 2)
            f->mid_time = wl_now;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    bindlog_close(f->s);
    tu_rmtree(f->tmp);
    free(f->tmp);
    free(f);
    unsetenv("BINDLOG_BULK");
    set_parts(0);
    return 0;
}

static void assert_tables_equal(const char *a, const char *b, const char *const *names,
                                size_t nnames);

/* Every entry of every table of two closed stores is the same. */
static void assert_same_tables(const char *a, const char *b)
{
    assert_tables_equal(a, b, tables, sizeof(tables) / sizeof(tables[0]));
}

/* Every entry of the named tables of two closed stores is the same. */
static void assert_tables_equal(const char *a, const char *b, const char *const *names,
                                size_t nnames)
{
    MDB_env *env[2];
    MDB_txn *txn[2];
    const char *dirs[2] = {a, b};

    for (int i = 0; i < 2; i++) {
        assert_int_equal(mdb_env_create(&env[i]), 0);
        assert_int_equal(mdb_env_set_maxdbs(env[i], 16), 0);
        assert_int_equal(mdb_env_open(env[i], dirs[i], MDB_RDONLY | MDB_NOLOCK, 0600), 0);
        assert_int_equal(mdb_txn_begin(env[i], NULL, MDB_RDONLY, &txn[i]), 0);
    }
    for (size_t t = 0; t < nnames; t++) {
        MDB_dbi dbi[2];
        MDB_cursor *c[2];
        MDB_val k[2], v[2];
        int rc[2];
        uint64_t n = 0;
        for (int i = 0; i < 2; i++) {
            assert_int_equal(mdb_dbi_open(txn[i], names[t], 0, &dbi[i]), 0);
            assert_int_equal(mdb_cursor_open(txn[i], dbi[i], &c[i]), 0);
            rc[i] = mdb_cursor_get(c[i], &k[i], &v[i], MDB_FIRST);
        }
        while (rc[0] == 0 && rc[1] == 0) {
            /* meta "wal" names each store's own log (its salt): not state */
            int wal = strcmp(names[t], "meta") == 0 && k[0].mv_size == 3 &&
                      k[1].mv_size == 3 && memcmp(k[0].mv_data, "wal", 3) == 0 &&
                      memcmp(k[1].mv_data, "wal", 3) == 0;
            if (wal)
                v[1] = v[0];
            if (k[0].mv_size != k[1].mv_size || memcmp(k[0].mv_data, k[1].mv_data, k[0].mv_size) ||
                v[0].mv_size != v[1].mv_size || memcmp(v[0].mv_data, v[1].mv_data, v[0].mv_size))
                fail_msg("table %s differs at entry %llu", names[t], (unsigned long long)n);
            n++;
            for (int i = 0; i < 2; i++)
                rc[i] = mdb_cursor_get(c[i], &k[i], &v[i], MDB_NEXT);
        }
        if (rc[0] != MDB_NOTFOUND || rc[1] != MDB_NOTFOUND)
            fail_msg("table %s: one store has more entries (after %llu)", names[t],
                     (unsigned long long)n);
        for (int i = 0; i < 2; i++)
            mdb_cursor_close(c[i]);
    }
    for (int i = 0; i < 2; i++) {
        mdb_txn_abort(txn[i]);
        mdb_env_close(env[i]);
    }
}

/* Replay s into tmp/name with the bulk path on (parts partitions) or off. */
static void replay_to(fx *f, bindlog *s, const char *name, int bulk, int parts, uint64_t to_lsn,
                      int64_t to_time)
{
    char out[1200];
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    uint64_t last;
    snprintf(out, sizeof out, "%s/%s", f->tmp, name);
    tu_rmtree(out);
    if (bulk)
        unsetenv("BINDLOG_BULK");
    else
        setenv("BINDLOG_BULK", "0", 1);
    set_parts(parts);
    assert_int_equal(bindlog_replay(s, out, to_lsn, to_time, dg, &last, NULL, NULL), 0);
    unsetenv("BINDLOG_BULK");
    set_parts(0);
}

static void path_of(fx *f, char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", f->tmp, name);
}

static uint64_t import_both_ways(fx *f, int parts);

/* ---- tests --------------------------------------------------------------- */

static void bulk__replay_equals_sequential_for_any_partitioning(void **state)
{
    fx *f = *state;
    char seq[1200], out[1200];
    static const int parts[] = {1, 2, 3, 7, 64, 200};

    replay_to(f, f->s, "seq", 0, 0, UINT64_MAX, INT64_MAX);
    path_of(f, seq, sizeof seq, "seq");
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        uint64_t done0, fell0, done1, fell1;
        bl_bulk_tally(&done0, &fell0);
        replay_to(f, f->s, "bulk", 1, parts[i], UINT64_MAX, INT64_MAX);
        bl_bulk_tally(&done1, &fell1);
        assert_int_equal(done1, done0 + 1); /* the bulk path ran ... */
        assert_int_equal(fell1, fell0);     /* ... and did not fall back */
        path_of(f, out, sizeof out, "bulk");
        assert_same_tables(seq, out);
    }
}

/* A bulk replay into "bulk" and a bulk check, both at 3 partitions, with
 * BINDLOG_BULK_REF_MAX set to `limit` ("" leaves it unset): both must
 * take the bulk path without falling back.  The check's report in *rep. */
static void bulk_replay_and_check(fx *f, const char *limit, bindlog_check_report *rep)
{
    uint64_t done0, fell0, done1, fell1;
    if (limit[0] != '\0')
        setenv("BINDLOG_BULK_REF_MAX", limit, 1);
    bl_bulk_tally(&done0, &fell0);
    replay_to(f, f->s, "bulk", 1, 3, UINT64_MAX, INT64_MAX);
    set_parts(3);
    assert_int_equal(bindlog_check(f->s, rep, NULL, NULL), 0);
    set_parts(0);
    bl_bulk_tally(&done1, &fell1);
    unsetenv("BINDLOG_BULK_REF_MAX");
    assert_int_equal(done1, done0 + 2); /* replay and check took the bulk path */
    assert_int_equal(fell1, fell0);
}

/* Records fed by reference are decided in place up to a limit, then
 * spilled in order with the rest: every turn gives the same tables, and a
 * check that finds nothing. */
static void bulk__records_by_reference_or_spilled(void **state)
{
    fx *f = *state;
    char seq[1200], out[1200];
    static const char *const limits[] = {"0", "1", "100", "1499", "2999", "3000", "100000"};

    replay_to(f, f->s, "seq", 0, 0, UINT64_MAX, INT64_MAX);
    path_of(f, seq, sizeof seq, "seq");
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        bindlog_check_report rep;
        bulk_replay_and_check(f, limits[i], &rep);
        assert_int_equal(rep.problems, 0);
        assert_int_equal(rep.records, NEVENTS);
        path_of(f, out, sizeof out, "bulk");
        assert_same_tables(seq, out);
    }
}

static void bulk__replay_points_equal_sequential(void **state)
{
    fx *f = *state;
    char a[1200], b[1200];
    static const uint64_t lsns[] = {0, 1, 2, 999, NEVENTS - 1};

    for (size_t i = 0; i < sizeof(lsns) / sizeof(lsns[0]); i++) {
        replay_to(f, f->s, "seq", 0, 0, lsns[i], INT64_MAX);
        replay_to(f, f->s, "bulk", 1, 5, lsns[i], INT64_MAX);
        path_of(f, a, sizeof a, "seq");
        path_of(f, b, sizeof b, "bulk");
        assert_same_tables(a, b);
    }
    replay_to(f, f->s, "seq", 0, 0, UINT64_MAX, f->mid_time);
    replay_to(f, f->s, "bulk", 1, 5, UINT64_MAX, f->mid_time);
    assert_same_tables(a, b);
}

static void bulk__compacted_store(void **state)
{
    fx *f = *state;
    char a[1200], b[1200];
    uint64_t removed;
    bindlog_check_report rep;

    assert_int_equal(bindlog_compact(f->s, NEVENTS / 3, &removed, NULL, NULL), 0);
    replay_to(f, f->s, "seq", 0, 0, UINT64_MAX, INT64_MAX);
    replay_to(f, f->s, "bulk", 1, 4, UINT64_MAX, INT64_MAX);
    path_of(f, a, sizeof a, "seq");
    path_of(f, b, sizeof b, "bulk");
    assert_same_tables(a, b);
    set_parts(4);
    assert_int_equal(bindlog_check(f->s, &rep, NULL, NULL), 0);
    set_parts(0);
    assert_int_equal(rep.problems, 0);
    assert_memory_equal(rep.state_digest, rep.replay_digest, BINDLOG_DIGEST_SIZE);
    /* the image spilled, then the records held by reference, spilled after
     * it from some point on, or copied: the same tables */
    static const char *const limits[] = {"", "0", "100"};
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        if (limits[i][0] != '\0')
            setenv("BINDLOG_BULK_REF_MAX", limits[i], 1);
        replay_to(f, f->s, "bulk", 1, 4, UINT64_MAX, INT64_MAX);
        assert_same_tables(a, b);
        uint64_t fell = import_both_ways(f, 4);
        unsetenv("BINDLOG_BULK_REF_MAX");
        assert_int_equal(fell, 0);
    }
}

/* A BIND moves a session to a key of another partition: the bulk path
 * cannot decide it alone, falls back, and the result is still exact. */
static void bulk__session_moved_across_partitions_falls_back(void **state)
{
    fx *f = *state;
    char ka[64], kb[64], a[1200], b[1200];
    bindlog_result r;
    bindlog_check_report rep;
    uint64_t done0, fell0, done1, fell1;

    two_keys(ka, kb, sizeof ka);
    assert_int_equal(bindlog_bind(f->s, ka, "mv-1", NULL, NULL, "o", 1, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_new_session(f->s, ka, "mv-2", NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_bind(f->s, kb, "mv-1", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_split(f->s, kb, "mv-1", "mv-3", BINDLOG_ANY_GENERATION, NULL, 0, &r),
                     BINDLOG_APPLIED);

    replay_to(f, f->s, "seq", 0, 0, UINT64_MAX, INT64_MAX);
    bl_bulk_tally(&done0, &fell0);
    replay_to(f, f->s, "bulk", 1, 2, UINT64_MAX, INT64_MAX);
    bl_bulk_tally(&done1, &fell1);
    assert_int_equal(fell1, fell0 + 1);
    assert_int_equal(done1, done0);
    path_of(f, a, sizeof a, "seq");
    path_of(f, b, sizeof b, "bulk");
    assert_same_tables(a, b);

    set_parts(2);
    assert_int_equal(bindlog_check(f->s, &rep, NULL, NULL), 0);
    set_parts(0);
    assert_int_equal(rep.problems, 0);

    /* an import of it falls back too, to the record-by-record replay of
     * the tables the scan wrote, and gives the same store */
    assert_int_equal(import_both_ways(f, 2), 1);

    /* with one partition nothing crosses: the bulk path decides it all */
    bl_bulk_tally(&done0, &fell0);
    replay_to(f, f->s, "bulk1", 1, 1, UINT64_MAX, INT64_MAX);
    bl_bulk_tally(&done1, &fell1);
    assert_int_equal(done1, done0 + 1);
    path_of(f, b, sizeof b, "bulk1");
    assert_same_tables(a, b);
}

/* Export, then import into empty stores by both paths (with `parts`
 * partitions for the bulk one): same tables.  Returns how many bulk runs
 * fell back. */
static uint64_t import_both_ways(fx *f, int parts)
{
    char file[1200], a[1200], b[1200];
    int fd;
    uint64_t n, off, done0, fell0, done1, fell1, fell = 0;
    bindlog *t;

    path_of(f, file, sizeof file, "all.blx");
    tu_rmtree(file);
    fd = open(file, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(bindlog_export(f->s, 0, fd, &n, NULL, NULL), 0);
    close(fd);
    for (int bulk = 0; bulk < 2; bulk++) {
        path_of(f, bulk ? b : a, sizeof a, bulk ? "imp-bulk" : "imp-seq");
        tu_rmtree(bulk ? b : a);
        t = wl_open_store(bulk ? b : a);
        fd = open(file, O_RDONLY);
        if (!bulk)
            setenv("BINDLOG_BULK", "0", 1);
        set_parts(bulk ? parts : 0);
        bl_bulk_tally(&done0, &fell0);
        assert_int_equal(bindlog_import(t, fd, &n, &off, NULL, NULL), 0);
        bl_bulk_tally(&done1, &fell1);
        if (bulk) {
            fell = fell1 - fell0;
            assert_int_equal(done1 + fell1, done0 + fell0 + 1); /* one bulk run */
        } else {
            assert_int_equal(done1 + fell1, done0 + fell0);
        }
        unsetenv("BINDLOG_BULK");
        set_parts(0);
        close(fd);
        bindlog_close(t);
    }
    assert_same_tables(a, b);
    return fell;
}

static void bulk__import_equals_sequential(void **state)
{
    assert_int_equal(import_both_ways(*state, 3), 0);
    /* the records decided where they lie in the import's transaction, then
     * spilled from there at some point, or copied from the start */
    static const char *const limits[] = {"0", "1", "1700"};
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        setenv("BINDLOG_BULK_REF_MAX", limits[i], 1);
        uint64_t fell = import_both_ways(*state, 3);
        unsetenv("BINDLOG_BULK_REF_MAX");
        assert_int_equal(fell, 0);
    }
    /* and past a number of bytes staged, the records are copied: after
     * references held, or after references the copier had taken */
    static const char *const bytes[] = {"0", "50000", "400000"};
    for (size_t i = 0; i < sizeof(bytes) / sizeof(bytes[0]); i++) {
        for (int copier = 0; copier < 2; copier++) {
            setenv("BINDLOG_IMPORT_REF_BYTES", bytes[i], 1);
            if (copier)
                setenv("BINDLOG_BULK_REF_MAX", "1", 1);
            uint64_t fell = import_both_ways(*state, 3);
            unsetenv("BINDLOG_IMPORT_REF_BYTES");
            unsetenv("BINDLOG_BULK_REF_MAX");
            assert_int_equal(fell, 0);
        }
    }
}

/* A damaged record: the bulk scan or decide notices, the sequential path
 * names it, and the report is the one BINDLOG_BULK=0 gives. */
static void bulk__check_reports_like_sequential(void **state)
{
    fx *f = *state;
    bindlog_check_report seq, bulk;
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k, v;
    unsigned char kb[8], *copy;

    bindlog_close(f->s);
    f->s = NULL;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 16), 0);
    assert_int_equal(mdb_env_open(env, f->dir, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "log", 0, &dbi), 0);
    for (int i = 0; i < 8; i++)
        kb[i] = (unsigned char)((uint64_t)1234 >> (56 - 8 * i));
    k = (MDB_val){8, kb};
    assert_int_equal(mdb_get(txn, dbi, &k, &v), 0);
    copy = malloc(v.mv_size);
    memcpy(copy, v.mv_data, v.mv_size);
    copy[v.mv_size / 2] ^= 0x20; /* inside a string: the checksum fails */
    v.mv_data = copy;
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    free(copy);
    f->s = wl_open_store(f->dir);

    setenv("BINDLOG_BULK", "0", 1);
    assert_int_equal(bindlog_check(f->s, &seq, NULL, NULL), 0);
    unsetenv("BINDLOG_BULK");
    set_parts(3);
    assert_int_equal(bindlog_check(f->s, &bulk, NULL, NULL), 0);
    set_parts(0);
    assert_true(seq.problems > 0);
    assert_int_equal(seq.first_bad_lsn, 1234);
    assert_int_equal(bulk.problems, seq.problems);
    assert_int_equal(bulk.first_bad_lsn, seq.first_bad_lsn);
    assert_string_equal(bulk.message, seq.message);
    assert_int_equal(bulk.records, seq.records);
}

/* Without a usable $TMPDIR the bulk path cannot start: replay and import
 * go record by record (they need no temporary files) and give the same
 * stores; check, which needs a scratch store then, says so. */
static void bulk__unusable_tmpdir(void **state)
{
    fx *f = *state;
    char a[1200], b[1200], file[1200], *saved = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
    bindlog_check_report rep;
    uint64_t n, off;
    int fd;
    bindlog *t;

    replay_to(f, f->s, "seq", 0, 0, UINT64_MAX, INT64_MAX);
    path_of(f, file, sizeof file, "all.blx");
    fd = open(file, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(bindlog_export(f->s, 0, fd, &n, NULL, NULL), 0);
    close(fd);

    setenv("TMPDIR", "/nonexistent/bindlog-test", 1);
    replay_to(f, f->s, "notmp", 1, 3, UINT64_MAX, INT64_MAX);
    path_of(f, a, sizeof a, "seq");
    path_of(f, b, sizeof b, "notmp");
    assert_same_tables(a, b);

    path_of(f, b, sizeof b, "imp-notmp");
    t = wl_open_store(b);
    fd = open(file, O_RDONLY);
    assert_int_equal(bindlog_import(t, fd, &n, &off, NULL, NULL), 0);
    assert_int_equal(n, NEVENTS);
    close(fd);
    bindlog_close(t);

    assert_true(bindlog_check(f->s, &rep, NULL, NULL) < 0);
    if (saved != NULL)
        setenv("TMPDIR", saved, 1);
    else
        unsetenv("TMPDIR");
    free(saved);
}

/* A store large enough that its replay takes several append transactions
 * (8 MiB each, bulk_lmdb.c) and its input several partitions by size
 * (bulk.h): the result has the source's digest and checks clean (every
 * record re-derives, the indexes match). */
static void bulk__replay_of_many_transactions(void **state)
{
    fx *f = *state;
    char out[1200];
    unsigned char src[BINDLOG_DIGEST_SIZE], dg[BINDLOG_DIGEST_SIZE];
    uint64_t head, last = 0, done0, fell0, done1, fell1;
    bindlog_check_report rep;
    bindlog_stats st;
    bindlog *s, *r;
    wl_gen g;

#ifdef TU_TSAN
    print_message("skipped under ThreadSanitizer: its 180,000 events take minutes there\n");
    skip();
#endif
    path_of(f, out, sizeof out, "big-src");
    s = wl_open_store(out);
    wl_gen_init(&g, 11);
    for (int n = 0; n < 180000; n++)
        assert_true(wl_gen_step(&g, s) > 0);
    assert_int_equal(bindlog_digest(s, src, &head), 0);
    path_of(f, out, sizeof out, "big");
    bl_bulk_tally(&done0, &fell0);
    assert_int_equal(bindlog_replay(s, out, UINT64_MAX, INT64_MAX, dg, &last, NULL, NULL), 0);
    bindlog_close(s);
    bl_bulk_tally(&done1, &fell1);
    assert_int_equal(done1 + fell1, done0 + fell0 + 1); /* the bulk path was tried */
    assert_int_equal(last, head);
    assert_memory_equal(dg, src, BINDLOG_DIGEST_SIZE);
    assert_int_equal(bindlog_open(&r, out, NULL), 0);
    assert_int_equal(bindlog_stats_get(r, &st), 0);
    /* the appender counts about what the pages hold: over 16 MiB is over
     * two transactions */
    assert_true(st.file_size > ((uint64_t)16 << 20));
    assert_int_equal(bindlog_check(r, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 0);
    assert_int_equal(rep.records, head);
    assert_memory_equal(rep.state_digest, src, BINDLOG_DIGEST_SIZE);
    bindlog_close(r);
}

/* ---- the children table ------------------------------------------------- */

static const char *const children_table[] = {"children"};

static unsigned part_of_n(const void *key, size_t len, unsigned n)
{
    return (unsigned)((XXH3_64bits(key, len) >> 32) % n);
}

/* Walk the children table of a closed store in table order, checking each
 * key against the sessions table: be64(parent's created_lsn), then a child
 * whose parent was created at that LSN; keys strictly increasing.  Returns
 * the number of entries; *switches: how often two neighbours' children
 * belong to keys of different partitions (of nparts). */
static uint64_t children_walk(const char *dir, unsigned nparts, uint64_t *switches)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi kids, sess;
    MDB_cursor *c;
    MDB_val k, v, prev = {0, NULL};
    unsigned char last[BL_LCHILD_KEY_MAX];
    uint64_t n = 0;
    unsigned last_part = UINT32_MAX;

    *switches = 0;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 16), 0);
    assert_int_equal(mdb_env_open(env, dir, MDB_RDONLY | MDB_NOLOCK, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "children", 0, &kids), 0);
    assert_int_equal(mdb_dbi_open(txn, "sessions", 0, &sess), 0);
    MDB_dbi logdb, basedb;
    assert_int_equal(mdb_dbi_open(txn, "log", 0, &logdb), 0);
    assert_int_equal(mdb_dbi_open(txn, "base_sessions", 0, &basedb), 0);
    assert_int_equal(mdb_cursor_open(txn, kids, &c), 0);
    for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        const unsigned char *kb = k.mv_data;
        bl_sval child, parent;
        MDB_val id, val;
        assert_true(k.mv_size > 8 && k.mv_size <= BL_LCHILD_KEY_MAX);
        if (prev.mv_data != NULL) {
            size_t m = prev.mv_size < k.mv_size ? prev.mv_size : k.mv_size;
            int o = memcmp(last, kb, m);
            assert_true(o < 0 || (o == 0 && prev.mv_size < k.mv_size));
        }
        memcpy(last, kb, k.mv_size);
        prev = (MDB_val){k.mv_size, last};
        id = (MDB_val){k.mv_size - 8, (void *)(kb + 8)};
        assert_int_equal(mdb_get(txn, sess, &id, &val), 0);
        assert_int_equal(tu_raw_sval(txn, logdb, basedb, &id, &val, &child), 0);
        assert_true(child.parent_len > 0);
        unsigned part = part_of_n(child.key, child.key_len, nparts);
        id = (MDB_val){child.parent_len, (void *)child.parent};
        assert_int_equal(mdb_get(txn, sess, &id, &val), 0);
        assert_int_equal(tu_raw_sval(txn, logdb, basedb, &id, &val, &parent), 0);
        assert_int_equal(parent.created_lsn, bl_get64be(kb));
        if (n > 0 && part != last_part)
            (*switches)++;
        last_part = part;
        n++;
    }
    mdb_cursor_close(c);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return n;
}

#define KID_KEYS 8
#define KID_ROUNDS 24

/* Add parents on KID_KEYS keys (of several partitions), then KID_ROUNDS
 * rounds in which each key goes back to its parent and splits it again:
 * each parent gets KID_ROUNDS children, made at LSNs interleaved with the
 * other keys' children, with ids that sort against their creation order.
 * From `from` to `to` rounds (the test compacts in between). */
static void add_kids(bindlog *s, int from, int to)
{
    bindlog_result r;
    char key[64], parent[64], child[64];
    for (int round = from; round < to; round++) {
        for (int k = 0; k < KID_KEYS; k++) {
            snprintf(key, sizeof key, "agent:kids:%d", k);
            snprintf(parent, sizeof parent, "par-%d", k);
            if (round == 0)
                assert_int_equal(bindlog_bind(s, key, parent, NULL, NULL, "o", 1, &r),
                                 BINDLOG_APPLIED);
            else
                assert_int_equal(bindlog_bind(s, key, parent, NULL, NULL, NULL, 0, &r),
                                 BINDLOG_APPLIED);
            snprintf(child, sizeof child, "kid-%03d-%d", 999 - round, KID_KEYS - k);
            assert_int_equal(bindlog_split(s, key, parent, child, BINDLOG_ANY_GENERATION,
                                           NULL, 0, &r),
                             BINDLOG_APPLIED);
        }
    }
}

/* The children table a bulk replay, import and check produce with several
 * partitions is the one the store's compaction wrote record by record (in
 * format 6 it indexes the children whose records left the log): by the
 * parent's created LSN, then the child id, across partitions. */
static void bulk__children_in_table_order(void **state)
{
    fx *f = *state;
    static const int parts[] = {2, 3, 7};
    char out[1200];
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    uint64_t n, switches, done0, fell0, done1, fell1, head, removed;
    bindlog_check_report rep;

    add_kids(f->s, 0, KID_ROUNDS);
    assert_int_equal(bindlog_digest(f->s, dg, &head), 0);
    assert_int_equal(bindlog_compact(f->s, head + 1, &removed, NULL, NULL), 0);
    assert_int_equal(removed, head);
    bindlog_close(f->s);
    f->s = NULL;
    n = children_walk(f->dir, 3, &switches);
    /* the workload's children and ours, interleaved across partitions */
    assert_true(n >= KID_KEYS * KID_ROUNDS + 100);
    assert_true(switches > n / 4);
    f->s = wl_open_store(f->dir);
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        bl_bulk_tally(&done0, &fell0);
        replay_to(f, f->s, "bulk", 1, parts[i], UINT64_MAX, INT64_MAX);
        bl_bulk_tally(&done1, &fell1);
        assert_int_equal(done1, done0 + 1);
        assert_int_equal(fell1, fell0);
        assert_int_equal(import_both_ways(f, parts[i]), 0);
        set_parts(parts[i]);
        bl_bulk_tally(&done0, &fell0);
        assert_int_equal(bindlog_check(f->s, &rep, NULL, NULL), 0);
        bl_bulk_tally(&done1, &fell1);
        set_parts(0);
        assert_int_equal(rep.problems, 0);
        assert_int_equal(done1, done0 + 1);
        assert_int_equal(fell1, fell0);
        bindlog_close(f->s);
        f->s = NULL;
        path_of(f, out, sizeof out, "bulk");
        assert_tables_equal(f->dir, out, children_table, 1);
        assert_int_equal(children_walk(out, 3, &switches), n);
        path_of(f, out, sizeof out, "imp-bulk");
        assert_tables_equal(f->dir, out, children_table, 1);
        f->s = wl_open_store(f->dir);
    }

    /* the check compares them: a stored entry gone is named */
    bindlog_close(f->s);
    f->s = NULL;
    {
        MDB_env *env;
        MDB_txn *txn;
        MDB_dbi dbi;
        MDB_cursor *c;
        MDB_val k, v;
        assert_int_equal(mdb_env_create(&env), 0);
        assert_int_equal(mdb_env_set_maxdbs(env, 16), 0);
        assert_int_equal(mdb_env_open(env, f->dir, 0, 0600), 0);
        assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
        assert_int_equal(mdb_dbi_open(txn, "children", 0, &dbi), 0);
        assert_int_equal(mdb_cursor_open(txn, dbi, &c), 0);
        assert_int_equal(mdb_cursor_get(c, &k, &v, MDB_FIRST), 0);
        for (uint64_t i = 0; i < n / 2; i++)
            assert_int_equal(mdb_cursor_get(c, &k, &v, MDB_NEXT), 0);
        assert_int_equal(mdb_cursor_del(c, 0), 0);
        mdb_cursor_close(c);
        assert_int_equal(mdb_txn_commit(txn), 0);
        mdb_env_close(env);
    }
    f->s = wl_open_store(f->dir);
    set_parts(3);
    bl_bulk_tally(&done0, &fell0);
    assert_int_equal(bindlog_check(f->s, &rep, NULL, NULL), 0);
    bl_bulk_tally(&done1, &fell1);
    set_parts(0);
    assert_int_equal(done1, done0 + 1);
    assert_int_equal(fell1, fell0);
    assert_int_equal(rep.problems, 1);
    assert_non_null(strstr(rep.message, "missing from the store"));
}

/* After a compaction the image's children (parents and children in the
 * base image) and the log's (more children of the same parents) make one
 * table, as the store wrote it. */
static void bulk__children_of_a_compacted_image(void **state)
{
    fx *f = *state;
    char out[1200];
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    uint64_t removed, head, n, switches;
    bindlog_check_report rep;
    static const char *const limits[] = {"", "0", "50"};

    add_kids(f->s, 0, KID_ROUNDS / 2);
    assert_int_equal(bindlog_digest(f->s, dg, &head), 0);
    add_kids(f->s, KID_ROUNDS / 2, KID_ROUNDS);
    assert_int_equal(bindlog_compact(f->s, head + 1, &removed, NULL, NULL), 0);
    assert_true(removed > 0);
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        bulk_replay_and_check(f, limits[i], &rep);
        assert_int_equal(rep.problems, 0);
        bindlog_close(f->s);
        f->s = NULL;
        n = children_walk(f->dir, 3, &switches);
        assert_true(n >= KID_KEYS * KID_ROUNDS + 100);
        path_of(f, out, sizeof out, "bulk");
        assert_tables_equal(f->dir, out, children_table, 1);
        f->s = wl_open_store(f->dir);
    }
}


/* ---- the log copy's thread ------------------------------------------------ */

#define LC_RECORDS 50000

/* The value of record i: 1 to 300 bytes that name i. */
static size_t lc_value(uint64_t i, unsigned char *out)
{
    size_t n = 1 + (size_t)(i * 7919 % 300);
    for (size_t j = 0; j < n; j++)
        out[j] = (unsigned char)(i * 31 + j);
    return n;
}

/* The log table of the closed store in dir holds exactly records
 * first..first+n-1, each with lc_value's bytes. */
static void assert_log_copied(const char *dir, uint64_t first, uint64_t n)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *c;
    MDB_val k, v;
    unsigned char want[300];
    uint64_t i = 0;
    int rc;

    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 16), 0);
    assert_int_equal(mdb_env_open(env, dir, MDB_RDONLY | MDB_NOLOCK, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "log", 0, &dbi), 0);
    assert_int_equal(mdb_cursor_open(txn, dbi, &c), 0);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT), i++) {
        unsigned char kb[8];
        size_t wn = lc_value(first + i, want);
        for (int b = 0; b < 8; b++)
            kb[b] = (unsigned char)((first + i) >> (56 - 8 * b));
        assert_int_equal(k.mv_size, 8);
        assert_memory_equal(k.mv_data, kb, 8);
        assert_int_equal(v.mv_size, wn);
        assert_memory_equal(v.mv_data, want, wn);
    }
    assert_int_equal(rc, MDB_NOTFOUND);
    assert_int_equal(i, n);
    mdb_cursor_close(c);
    mdb_txn_abort(txn);
    mdb_env_close(env);
}

/* The copy thread starts before the first record and takes them as they
 * come, while the array it reads grows from a small estimate (moved under
 * its lock): every record lands once, in order, with its bytes; one
 * started after the adds does the same; adds out of sequence or after the
 * join are refused. */
static void bulk__log_copy_beside_its_adds(void **state)
{
    fx *f = *state;
    unsigned char *vals = malloc((size_t)LC_RECORDS * 300);
    size_t *lens = malloc(LC_RECORDS * sizeof(*lens));
    char dir[1200];

    setenv("BINDLOG_CHECKPOINT", "manual", 1); /* the copy is the only writer */
    for (uint64_t i = 0; i < LC_RECORDS; i++)
        lens[i] = lc_value(1000 + i, vals + i * 300);
    for (int early = 1; early >= 0; early--) {
        bindlog *t;
        bl_logcopy *lc;
        path_of(f, dir, sizeof dir, early ? "copy-early" : "copy-late");
        assert_int_equal(bindlog_open(&t, dir, NULL), 0);
        assert_non_null(lc = bl_logcopy_new(early ? 10 : LC_RECORDS));
        if (early)
            bl_logcopy_start(lc, t->e);
        for (uint64_t i = 0; i < LC_RECORDS; i++)
            assert_int_equal(bl_logcopy_add(lc, vals + i * 300, lens[i], 1000 + i), 0);
        assert_int_equal(bl_logcopy_add(lc, vals, lens[0], 1000 + LC_RECORDS + 1),
                         BINDLOG_EINVAL); /* a gap */
        if (!early)
            bl_logcopy_start(lc, t->e);
        assert_int_equal(bl_logcopy_join(lc), 0);
        assert_int_equal(bl_logcopy_join(lc), 0); /* again: the same result */
        assert_int_equal(bl_logcopy_add(lc, vals, lens[0], 1000 + LC_RECORDS), BINDLOG_EINVAL);
        bl_logcopy_free(lc);
        bindlog_close(t);
        assert_log_copied(dir, 1000, LC_RECORDS);
    }
    unsetenv("BINDLOG_CHECKPOINT");
    free(vals);
    free(lens);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(bulk__replay_equals_sequential_for_any_partitioning,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(bulk__replay_points_equal_sequential, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk__records_by_reference_or_spilled, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk__compacted_store, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk__session_moved_across_partitions_falls_back, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(bulk__import_equals_sequential, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk__check_reports_like_sequential, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk__unusable_tmpdir, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk__replay_of_many_transactions, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk__children_in_table_order, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk__children_of_a_compacted_image, setup, teardown),
        cmocka_unit_test_setup_teardown(bulk__log_copy_beside_its_adds, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
