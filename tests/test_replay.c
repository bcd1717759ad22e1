/*
 * test_replay.c -- bindlog_replay() and bindlog_lsn_at_time().
 *
 * The model: a store fed a deterministic workload one event at a time, with
 * the state digest taken after every applied event, so digests[n] is the
 * state the log's first n records describe.  Replay to LSN n (or to the
 * time of record n) must reproduce exactly that digest, and a store that
 * is replayed to the head must be indistinguishable from the original.
 * Forged records (valid checksum, wrong meaning) and moved records must be
 * refused with BINDLOG_ECORRUPT.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "bindlog.h"
#include "core/record.h"
#include "testutil.h"
#include "workload.h"

/* Records in the fixture's store; the digest after each is kept. */
#define NEVENTS 400

typedef struct fx {
    char *tmp;
    char dir[1024];
    bindlog *s;
    unsigned char digests[NEVENTS + 1][BINDLOG_DIGEST_SIZE]; /* state after n records */
    int64_t times[NEVENTS + 1];                              /* time of record n */
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    wl_gen g;

    f->tmp = tu_mkdtemp("replay");
    snprintf(f->dir, sizeof(f->dir), "%s/src", f->tmp);
    wl_now = 1000000;
    f->s = wl_open_store(f->dir);
    wl_gen_init(&g, 42);
    assert_int_equal(bindlog_digest(f->s, f->digests[0], NULL), 0);
    for (uint64_t n = 1; n <= NEVENTS; n++) {
        assert_int_equal(wl_gen_step(&g, f->s), n);
        f->times[n] = wl_now;
        assert_int_equal(bindlog_digest(f->s, f->digests[n], NULL), 0);
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
    return 0;
}

static void out_dir(fx *f, char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", f->tmp, name);
}

/* ---- tests --------------------------------------------------------------- */

static void replay__to_lsns_matches_model(void **state)
{
    fx *f = *state;
    static const uint64_t points[] = {0, 1, 2, 57, 200, 399, NEVENTS};
    char dir[1100];

    for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
        unsigned char d[BINDLOG_DIGEST_SIZE];
        uint64_t last = 12345;
        char name[32];
        snprintf(name, sizeof(name), "at-%llu", (unsigned long long)points[i]);
        out_dir(f, dir, sizeof(dir), name);
        assert_int_equal(bindlog_replay(f->s, dir, points[i], INT64_MAX, d, &last, NULL, NULL), 0);
        assert_int_equal(last, points[i]);
        assert_memory_equal(d, f->digests[points[i]], BINDLOG_DIGEST_SIZE);

        /* the replayed store is a store of its own: same digest, head, log */
        bindlog *r = wl_open_store(dir);
        unsigned char d2[BINDLOG_DIGEST_SIZE];
        uint64_t head;
        bindlog_stats st;
        assert_int_equal(bindlog_digest(r, d2, &head), 0);
        assert_memory_equal(d2, f->digests[points[i]], BINDLOG_DIGEST_SIZE);
        assert_int_equal(head, points[i]);
        assert_int_equal(bindlog_stats_get(r, &st), 0);
        assert_int_equal(st.log_records, points[i]);
        bindlog_close(r);
    }
}

static void replay__to_head_is_indistinguishable(void **state)
{
    fx *f = *state;
    char dir[1100];
    bindlog_stats a, b;
    bindlog_check_report rep;

    out_dir(f, dir, sizeof(dir), "head");
    assert_int_equal(bindlog_replay(f->s, dir, UINT64_MAX, INT64_MAX, NULL, NULL, NULL, NULL), 0);
    bindlog *r = wl_open_store(dir);
    assert_int_equal(bindlog_stats_get(f->s, &a), 0);
    assert_int_equal(bindlog_stats_get(r, &b), 0);
    assert_int_equal(a.head_lsn, b.head_lsn);
    assert_int_equal(a.log_records, b.log_records);
    assert_int_equal(a.live_bindings, b.live_bindings);
    assert_int_equal(a.live_sessions, b.live_sessions);
    assert_memory_equal(a.applied, b.applied, sizeof(a.applied));
    /* every index rebuilt: check passes on the replayed store */
    assert_int_equal(bindlog_check(r, &rep, NULL, NULL), 0);
    if (rep.problems != 0)
        fail_msg("check of the replayed store: %s", rep.message);
    /* and it keeps working: the next event gets the next LSN, a later time */
    bindlog_result res;
    wl_now = 0; /* clock far in the past: times still never go back */
    assert_int_equal(bindlog_new_session(r, "agent:main:chat:0", "fresh", NULL, NULL, 0, &res),
                     BINDLOG_APPLIED);
    assert_int_equal(res.lsn, NEVENTS + 1);
    bindlog_iter *it;
    bindlog_record rec;
    assert_int_equal(bindlog_log_iter(r, NEVENTS + 1, NEVENTS + 1, &it), 0);
    assert_int_equal(bindlog_iter_next_record(it, &rec), 1);
    assert_true(rec.time_ms >= f->times[NEVENTS]);
    bindlog_iter_close(it);
    bindlog_close(r);
}

static void replay__to_time(void **state)
{
    fx *f = *state;
    char dir[1100];
    unsigned char d[BINDLOG_DIGEST_SIZE];
    uint64_t last;

    out_dir(f, dir, sizeof(dir), "t150");
    assert_int_equal(bindlog_replay(f->s, dir, UINT64_MAX, f->times[150], d, &last, NULL, NULL),
                     0);
    assert_int_equal(last, 150);
    assert_memory_equal(d, f->digests[150], BINDLOG_DIGEST_SIZE);

    out_dir(f, dir, sizeof(dir), "t149");
    assert_int_equal(
        bindlog_replay(f->s, dir, UINT64_MAX, f->times[150] - 1, d, &last, NULL, NULL), 0);
    assert_int_equal(last, 149);
    assert_memory_equal(d, f->digests[149], BINDLOG_DIGEST_SIZE);

    /* both limits: the stricter wins */
    out_dir(f, dir, sizeof(dir), "both");
    assert_int_equal(bindlog_replay(f->s, dir, 100, f->times[150], d, &last, NULL, NULL), 0);
    assert_int_equal(last, 100);
    assert_memory_equal(d, f->digests[100], BINDLOG_DIGEST_SIZE);
}

static void replay__lsn_at_time(void **state)
{
    fx *f = *state;
    uint64_t lsn;

    assert_int_equal(bindlog_lsn_at_time(f->s, INT64_MIN, &lsn), 0);
    assert_int_equal(lsn, 1);
    assert_int_equal(bindlog_lsn_at_time(f->s, f->times[1], &lsn), 0);
    assert_int_equal(lsn, 1);
    assert_int_equal(bindlog_lsn_at_time(f->s, f->times[77], &lsn), 0);
    assert_int_equal(lsn, 77);
    assert_int_equal(bindlog_lsn_at_time(f->s, f->times[77] + 1, &lsn), 0);
    assert_int_equal(lsn, 78);
    assert_int_equal(bindlog_lsn_at_time(f->s, f->times[NEVENTS] + 1, &lsn), 0);
    assert_int_equal(lsn, NEVENTS + 1);
    assert_int_equal(bindlog_lsn_at_time(f->s, 0, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_lsn_at_time(NULL, 0, &lsn), BINDLOG_EINVAL);
}

static void replay__refuses_bad_arguments(void **state)
{
    fx *f = *state;
    char dir[1100];
    FILE *fp;

    out_dir(f, dir, sizeof(dir), "x");
    assert_int_equal(bindlog_replay(NULL, dir, 1, 1, NULL, NULL, NULL, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_replay(f->s, NULL, 1, 1, NULL, NULL, NULL, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_replay(f->s, "", 1, 1, NULL, NULL, NULL, NULL), BINDLOG_EINVAL);
    /* never into an existing store or somebody's files */
    assert_int_equal(bindlog_replay(f->s, f->dir, UINT64_MAX, INT64_MAX, NULL, NULL, NULL, NULL),
                     BINDLOG_EEXIST);
    out_dir(f, dir, sizeof(dir), "notes.txt");
    fp = fopen(dir, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(bindlog_replay(f->s, dir, UINT64_MAX, INT64_MAX, NULL, NULL, NULL, NULL),
                     BINDLOG_EEXIST);
    /* an empty directory is fine */
    out_dir(f, dir, sizeof(dir), "empty");
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(bindlog_replay(f->s, dir, 3, INT64_MAX, NULL, NULL, NULL, NULL), 0);
}

/* ---- damaged logs ----------------------------------------------------------- */

/* Rewrite record `lsn` of the closed store at dir through raw LMDB with
 * `edit`, which may change bytes and recompute the checksum. */
static void edit_record(const char *dir, uint64_t lsn, size_t (*edit)(unsigned char *, size_t))
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    unsigned char kb[8], buf[BL_RECORD_MAX];
    MDB_val k = {8, kb}, v;

    bl_put64be(kb, lsn);
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 16), 0);
    assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "log", 0, &dbi), 0);
    assert_int_equal(mdb_get(txn, dbi, &k, &v), 0);
    memcpy(buf, v.mv_data, v.mv_size);
    size_t n = edit(buf, v.mv_size);
    v = (MDB_val){n, buf};
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

/* The record re-encoded with one field forged: its checksum is right. */
static size_t forge(unsigned char *b, size_t n, int what)
{
    unsigned char copy[BL_RECORD_MAX];
    bl_record r;
    memcpy(copy, b, n);
    assert_int_equal(bl_record_decode(copy, n, &r), 0);
    if (what == 0)
        r.generation++;
    else
        r.time_ms = 0;
    size_t m = bl_record_encode(&r, b, BL_RECORD_MAX);
    assert_true(m > 0);
    return m;
}

static size_t bump_generation(unsigned char *b, size_t n) { return forge(b, n, 0); }

static size_t time_zero(unsigned char *b, size_t n) { return forge(b, n, 1); }

static size_t flip_key_byte(unsigned char *b, size_t n)
{
    bl_record_head h;
    assert_int_equal(bl_record_peek(b, n, &h), 0);
    b[h.key - b] ^= 0x01; /* first byte of the key; checksum now wrong */
    return n;
}

/* A record with a valid checksum but a meaning the state does not give
 * (a forged generation, a time going back) or damaged bytes is refused. */
static void replay__refuses_forged_and_damaged_records(void **state)
{
    fx *f = *state;
    size_t (*edits[])(unsigned char *, size_t) = {bump_generation, time_zero, flip_key_byte};
    char dir[1100];

    bindlog_close(f->s);
    f->s = NULL;
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        char name[32];
        uint64_t lsn = 100 + i;
        /* a pristine copy each time: replay the original to the head first */
        snprintf(name, sizeof(name), "copy%zu", i);
        out_dir(f, dir, sizeof(dir), name);
        f->s = wl_open_store(f->dir);
        assert_int_equal(bindlog_replay(f->s, dir, UINT64_MAX, INT64_MAX, NULL, NULL, NULL, NULL),
                         0);
        bindlog_close(f->s);
        f->s = NULL;
        edit_record(dir, lsn, edits[i]);

        bindlog *c = wl_open_store(dir);
        char out[1100];
        snprintf(name, sizeof(name), "replay%zu", i);
        out_dir(f, out, sizeof(out), name);
        assert_int_equal(bindlog_replay(c, out, UINT64_MAX, INT64_MAX, NULL, NULL, NULL, NULL),
                         BINDLOG_ECORRUPT);
        /* up to the record before it, the log is fine */
        snprintf(name, sizeof(name), "before%zu", i);
        out_dir(f, out, sizeof(out), name);
        unsigned char d[BINDLOG_DIGEST_SIZE];
        assert_int_equal(bindlog_replay(c, out, lsn - 1, INT64_MAX, d, NULL, NULL, NULL), 0);
        assert_memory_equal(d, f->digests[lsn - 1], BINDLOG_DIGEST_SIZE);
        /* check names the record */
        bindlog_check_report rep;
        assert_int_equal(bindlog_check(c, &rep, NULL, NULL), 0);
        assert_true(rep.problems >= 1);
        assert_int_equal(rep.first_bad_lsn, lsn);
        bindlog_close(c);
    }
    f->s = wl_open_store(f->dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(replay__to_lsns_matches_model, setup, teardown),
        cmocka_unit_test_setup_teardown(replay__to_head_is_indistinguishable, setup, teardown),
        cmocka_unit_test_setup_teardown(replay__to_time, setup, teardown),
        cmocka_unit_test_setup_teardown(replay__lsn_at_time, setup, teardown),
        cmocka_unit_test_setup_teardown(replay__refuses_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(replay__refuses_forged_and_damaged_records, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
