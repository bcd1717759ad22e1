/*
 * test_check.c -- bindlog_check() finds damage and names it.
 *
 * Each test damages a copy of a good store behind the library's back (raw
 * LMDB on the closed store) the way a disk, an operator or a bug could:
 * a flipped byte inside a log record, a binding changed without a record,
 * a deleted record, index entries missing or extra, wrong counters.
 * Check must report it with the right LSN or key, count it, and never
 * change the store.
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

#include "bindlog.h"
#include "core/record.h"
#include "rawsval.h"
#include "testutil.h"
#include "workload.h"

typedef struct fx {
    char *tmp;
    char dir[1024];
    bindlog *s;
    wl_gen g;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    f->tmp = tu_mkdtemp("check");
    snprintf(f->dir, sizeof(f->dir), "%s/store", f->tmp);
    wl_now = 1000000;
    f->s = wl_open_store(f->dir);
    wl_gen_init(&f->g, 3);
    for (int i = 0; i < 300; i++)
        wl_gen_step(&f->g, f->s);
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

/* ---- raw LMDB access to a closed store ------------------------------------------ */

typedef struct raw {
    MDB_env *env;
    MDB_txn *txn;
} raw;

static void raw_open(fx *f, raw *r)
{
    bindlog_close(f->s);
    f->s = NULL;
    assert_int_equal(mdb_env_create(&r->env), 0);
    assert_int_equal(mdb_env_set_maxdbs(r->env, 16), 0);
    assert_int_equal(mdb_env_open(r->env, f->dir, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(r->env, NULL, 0, &r->txn), 0);
}

static MDB_dbi raw_dbi(raw *r, const char *name)
{
    MDB_dbi dbi;
    assert_int_equal(mdb_dbi_open(r->txn, name, 0, &dbi), 0);
    return dbi;
}

static void raw_close(fx *f, raw *r)
{
    assert_int_equal(mdb_txn_commit(r->txn), 0);
    mdb_env_close(r->env);
    f->s = wl_open_store(f->dir);
}

/* What bindlog_digest() said before the last run_check(). */
static int g_digest_rc;

static bindlog_check_report run_check(fx *f)
{
    bindlog_check_report rep;
    unsigned char d0[BINDLOG_DIGEST_SIZE], d1[BINDLOG_DIGEST_SIZE];
    bindlog_stats a, b;
    /* A session the live table keeps as a reference (format 5) reads its
     * key, parent and origin from the record that created it: when that
     * record is damaged, the state has no digest either (ECORRUPT naming
     * the session), and check reports the damage without one. */
    int drc = g_digest_rc = bindlog_digest(f->s, d0, NULL);
    if (drc != 0)
        assert_int_equal(drc, BINDLOG_ECORRUPT);
    assert_int_equal(bindlog_stats_get(f->s, &a), 0);
    assert_int_equal(bindlog_check(f->s, &rep, NULL, NULL), 0);
    /* check only reads */
    assert_int_equal(bindlog_digest(f->s, d1, NULL), drc);
    assert_int_equal(bindlog_stats_get(f->s, &b), 0);
    assert_int_equal(a.head_lsn, b.head_lsn);
    assert_int_equal(a.log_records, b.log_records);
    if (drc == 0) {
        assert_memory_equal(d0, d1, BINDLOG_DIGEST_SIZE);
        assert_memory_equal(d0, rep.state_digest, BINDLOG_DIGEST_SIZE);
    } else {
        assert_true(rep.problems > 0);
    }
    return rep;
}

/* ---- tests --------------------------------------------------------------------- */

static uint64_t g_calls, g_last;

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)ctx;
    assert_true(done <= total);
    g_calls++;
    g_last = done;
}

static void check__clean_store(void **state)
{
    fx *f = *state;
    bindlog_check_report rep;
    g_calls = 0;
    assert_int_equal(bindlog_check(f->s, &rep, on_progress, NULL), 0);
    assert_int_equal(rep.problems, 0);
    assert_int_equal(rep.records, 300);
    assert_int_equal(rep.head_lsn, 300);
    assert_int_equal(rep.first_bad_lsn, 0);
    assert_string_equal(rep.first_bad_key, "");
    assert_string_equal(rep.message, "");
    assert_memory_equal(rep.state_digest, rep.replay_digest, BINDLOG_DIGEST_SIZE);
    assert_true(g_calls >= 1);
    assert_int_equal(g_last, 300);
    assert_int_equal(bindlog_check(NULL, &rep, NULL, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_check(f->s, NULL, NULL, NULL), BINDLOG_EINVAL);
    /* an empty store is consistent too */
    char dir[1100];
    snprintf(dir, sizeof(dir), "%s/empty", f->tmp);
    bindlog *e = wl_open_store(dir);
    assert_int_equal(bindlog_check(e, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 0);
    bindlog_close(e);
}

static void check__flipped_byte_in_record_names_lsn(void **state)
{
    fx *f = *state;
    raw r;
    unsigned char kb[8], buf[BL_RECORD_MAX];
    MDB_val k = {8, kb}, v;

    raw_open(f, &r);
    MDB_dbi log = raw_dbi(&r, "log");
    bl_put64be(kb, 137);
    assert_int_equal(mdb_get(r.txn, log, &k, &v), 0);
    memcpy(buf, v.mv_data, v.mv_size);
    buf[v.mv_size / 2] ^= 0x20;
    v.mv_data = buf;
    assert_int_equal(mdb_put(r.txn, log, &k, &v, 0), 0);
    raw_close(f, &r);

    bindlog_check_report rep = run_check(f);
    /* the record, and, when the session it created is kept as a
     * reference to it, the state's digest */
    assert_int_equal(rep.problems, g_digest_rc == 0 ? 1 : 2);
    assert_int_equal(rep.first_bad_lsn, 137);
    assert_non_null(strstr(rep.message, "137"));
    assert_non_null(strstr(rep.message, "checksum"));
    /* the records after it were still verified */
    assert_int_equal(rep.records, 299);
}

static void check__binding_changed_names_key(void **state)
{
    fx *f = *state;
    raw r;
    bindlog_binding b;
    const char *key = "agent:main:chat:5";
    unsigned char buf[64];

    /* a binding moved to another generation without a record */
    assert_int_equal(bindlog_get(f->s, key, &b) >= BINDLOG_ENOTFOUND, 1);
    raw_open(f, &r);
    MDB_dbi bindings = raw_dbi(&r, "bindings");
    MDB_val k = {strlen(key), (void *)key}, v;
    assert_int_equal(mdb_get(r.txn, bindings, &k, &v), 0);
    bl_bval bv;
    assert_int_equal(bl_bval_decode(v.mv_data, v.mv_size, &bv), 0);
    char sid[BINDLOG_ID_MAX];
    memcpy(sid, bv.sid, bv.sid_len);
    bv.sid = sid;
    bv.generation += 7;
    size_t n = bl_bval_encode(&bv, buf, sizeof(buf));
    assert_true(n > 0);
    v = (MDB_val){n, buf};
    assert_int_equal(mdb_put(r.txn, bindings, &k, &v, 0), 0);
    raw_close(f, &r);

    bindlog_check_report rep = run_check(f);
    assert_int_equal(rep.problems, 1);
    assert_string_equal(rep.first_bad_key, key);
    assert_int_equal(rep.first_bad_lsn, 0);
    assert_non_null(strstr(rep.message, key));
    assert_memory_not_equal(rep.state_digest, rep.replay_digest, BINDLOG_DIGEST_SIZE);
}

static void check__deleted_record_names_lsn(void **state)
{
    fx *f = *state;
    raw r;
    unsigned char kb[8];
    MDB_val k = {8, kb};

    raw_open(f, &r);
    bl_put64be(kb, 42);
    assert_int_equal(mdb_del(r.txn, raw_dbi(&r, "log"), &k, NULL), 0);
    raw_close(f, &r);

    bindlog_check_report rep = run_check(f);
    assert_true(rep.problems >= 1);
    assert_int_equal(rep.first_bad_lsn, 42);
    assert_non_null(strstr(rep.message, "42"));
    assert_non_null(strstr(rep.message, "missing"));
}

static void check__deleted_last_record_names_lsn(void **state)
{
    fx *f = *state;
    raw r;
    unsigned char kb[8];
    MDB_val k = {8, kb};

    raw_open(f, &r);
    bl_put64be(kb, 300);
    assert_int_equal(mdb_del(r.txn, raw_dbi(&r, "log"), &k, NULL), 0);
    raw_close(f, &r);
    bindlog_check_report rep = run_check(f);
    assert_true(rep.problems >= 1);
    assert_int_equal(rep.first_bad_lsn, 300);
}

static void check__index_damage_names_key(void **state)
{
    fx *f = *state;
    raw r;
    MDB_val k, v;
    MDB_cursor *c;

    /* format 3 keeps no history table (each record chains its key's
     * history): an entry there is damage, named by its key and LSN */
    (void)c;
    raw_open(f, &r);
    unsigned char hk[16] = "k1";
    bl_put64be(hk + 3, 7);
    k = (MDB_val){11, hk};
    v = (MDB_val){0, ""};
    assert_int_equal(mdb_put(r.txn, raw_dbi(&r, "history"), &k, &v, 0), 0);
    raw_close(f, &r);
    bindlog_check_report rep = run_check(f);
    assert_int_equal(rep.problems, 1);
    assert_string_equal(rep.first_bad_key, "k1");
    assert_non_null(strstr(rep.message, "history"));
    assert_int_equal(rep.first_bad_lsn, 7);

    raw_open(f, &r);
    /* a children entry no session explains: be64 of its parent's created
     * LSN (0 sorts before every real one), then the child id */
    unsigned char cb[13] = {0};
    memcpy(cb + 8, "ghost", 5);
    MDB_val ck = {sizeof cb, cb}, cv = {0, ""};
    assert_int_equal(mdb_put(r.txn, raw_dbi(&r, "children"), &ck, &cv, 0), 0);
    raw_close(f, &r);
    rep = run_check(f);
    assert_int_equal(rep.problems, 2);
    assert_string_equal(rep.first_bad_key, "ghost");
    assert_non_null(strstr(rep.message, "created at LSN 0 -> 'ghost'"));
}

/* A session value read raw, a reference resolved through the raw log. */
static int raw_sval(raw *r, const MDB_val *k, const MDB_val *v, bl_sval *out)
{
    return tu_raw_sval(r->txn, raw_dbi(r, "log"), raw_dbi(r, "base_sessions"), k, v, out);
}

/* The children table (format 6) indexes the children whose creating record
 * the log no longer holds, keyed by the parent's created_lsn: after a
 * compaction to LSN 150 every session with a parent created up to there
 * has exactly that entry, the younger ones none (their parent's sibling
 * chain links them through their records), the children iterator returns
 * every session that names the parent, and it refuses an entry whose
 * session names another parent. */
static void check__children_keyed_by_parent_lsn(void **state)
{
    fx *f = *state;
    raw r;
    MDB_cursor *c;
    MDB_val k, v;
    uint64_t removed;
    size_t with_parent = 0, indexed = 0, entries = 0;
    char stranger[BINDLOG_ID_MAX + 1] = "", victim[BINDLOG_ID_MAX + 1] = "";
    uint64_t victim_lsn = 0;

    assert_int_equal(bindlog_compact(f->s, 151, &removed, NULL, NULL), 0);
    assert_int_equal(removed, 150);
    raw_open(f, &r);
    MDB_dbi sess = raw_dbi(&r, "sessions"), kids = raw_dbi(&r, "children");
    assert_int_equal(mdb_cursor_open(r.txn, sess, &c), 0);
    while (mdb_cursor_get(c, &k, &v, entries++ ? MDB_NEXT : MDB_FIRST) == 0) {
        bl_sval sv, pv;
        assert_int_equal(raw_sval(&r, &k, &v, &sv), 0);
        if (sv.parent_len == 0) {
            if (stranger[0] == '\0')
                memcpy(stranger, k.mv_data, k.mv_size); /* a root: nobody's child */
            continue;
        }
        with_parent++;
        MDB_val pk = {sv.parent_len, (void *)sv.parent}, pvv;
        assert_int_equal(mdb_get(r.txn, sess, &pk, &pvv), 0);
        assert_int_equal(raw_sval(&r, &pk, &pvv, &pv), 0);
        unsigned char key[BL_LCHILD_KEY_MAX];
        MDB_val ck = {bl_lchild_key(key, pv.created_lsn, k.mv_data, k.mv_size), key}, cv;
        if (sv.created_lsn > 150) {
            assert_int_equal(mdb_get(r.txn, kids, &ck, &cv), MDB_NOTFOUND);
            continue;
        }
        indexed++;
        assert_int_equal(mdb_get(r.txn, kids, &ck, &cv), 0);
        assert_int_equal(cv.mv_size, 0);
        if (victim[0] == '\0') {
            memcpy(victim, sv.parent, sv.parent_len);
            victim_lsn = pv.created_lsn;
        }
    }
    mdb_cursor_close(c);
    MDB_stat st;
    assert_int_equal(mdb_stat(r.txn, kids, &st), 0);
    assert_true(indexed > 10 && with_parent > indexed);
    assert_int_equal(st.ms_entries, indexed);
    assert_true(stranger[0] != '\0' && victim[0] != '\0');
    raw_close(f, &r);

    /* every child of every parent, through the chain and the table alike */
    bindlog_iter *all;
    bindlog_session se;
    int rc;
    size_t counted = 0;
    assert_int_equal(bindlog_sessions_iter(f->s, &all), 0);
    while ((rc = bindlog_iter_next_session(all, &se, NULL, 0)) == 1) {
        bindlog_iter *it;
        bindlog_session ch;
        assert_int_equal(bindlog_children_iter(f->s, se.session_id, &it), 0);
        while ((rc = bindlog_iter_next_session(it, &ch, NULL, 0)) == 1) {
            assert_string_equal(ch.parent_id, se.session_id);
            counted++;
        }
        assert_int_equal(rc, 0);
        bindlog_iter_close(it);
    }
    assert_int_equal(rc, 0);
    bindlog_iter_close(all);
    assert_int_equal(counted, with_parent);
    raw_open(f, &r);
    kids = raw_dbi(&r, "children");

    /* a root session filed as a child of `victim` */
    unsigned char key[BL_LCHILD_KEY_MAX];
    MDB_val ck = {bl_lchild_key(key, victim_lsn, stranger, strlen(stranger)), key}, cv = {0, ""};
    assert_int_equal(mdb_put(r.txn, kids, &ck, &cv, 0), 0);
    raw_close(f, &r);

    bindlog_iter *it;
    assert_int_equal(bindlog_children_iter(f->s, victim, &it), 0);
    while ((rc = bindlog_iter_next_session(it, &se, NULL, 0)) == 1)
        ;
    bindlog_iter_close(it);
    assert_int_equal(rc, BINDLOG_ECORRUPT);
    assert_non_null(strstr(bindlog_last_error(), "whose parent it is not"));
    bindlog_check_report rep = run_check(f);
    assert_int_equal(rep.problems, 1);
    assert_string_equal(rep.first_bad_key, stranger);
    assert_non_null(strstr(rep.message, "is in the store but the log does not produce it"));
}

static void check__wrong_counters(void **state)
{
    fx *f = *state;
    raw r;
    MDB_val k = {6, "counts"}, v;
    unsigned char buf[64];

    raw_open(f, &r);
    MDB_dbi meta = raw_dbi(&r, "meta");
    assert_int_equal(mdb_get(r.txn, meta, &k, &v), 0);
    assert_int_equal(v.mv_size, 64);
    memcpy(buf, v.mv_data, 64);
    bl_put64(buf + 8 * BINDLOG_EVENT_SPLIT, bl_get64(buf + 8 * BINDLOG_EVENT_SPLIT) + 1);
    v.mv_data = buf;
    assert_int_equal(mdb_put(r.txn, meta, &k, &v, 0), 0);
    raw_close(f, &r);
    bindlog_check_report rep = run_check(f);
    assert_int_equal(rep.problems, 1);
    assert_non_null(strstr(rep.message, "split"));
    assert_memory_equal(rep.state_digest, rep.replay_digest, BINDLOG_DIGEST_SIZE);
}

static void check__damaged_base_image_names_key(void **state)
{
    fx *f = *state;
    raw r;
    uint64_t removed;
    MDB_val k, v;
    MDB_cursor *c;
    unsigned char buf[64];

    assert_int_equal(bindlog_compact(f->s, 200, &removed, NULL, NULL), 0);
    bindlog_check_report rep = run_check(f);
    assert_int_equal(rep.problems, 0);
    raw_open(f, &r);
    MDB_dbi bb = raw_dbi(&r, "base_bindings");
    assert_int_equal(mdb_cursor_open(r.txn, bb, &c), 0);
    assert_int_equal(mdb_cursor_get(c, &k, &v, MDB_FIRST), 0);
    char key[BINDLOG_KEY_MAX + 1];
    memcpy(key, k.mv_data, k.mv_size);
    key[k.mv_size] = 0;
    memcpy(buf, v.mv_data, v.mv_size);
    buf[0] = 0; /* version 0: damage */
    MDB_val nv = {v.mv_size, buf};
    mdb_cursor_close(c);
    MDB_val kk = {strlen(key), key};
    assert_int_equal(mdb_put(r.txn, bb, &kk, &nv, 0), 0);
    raw_close(f, &r);
    rep = run_check(f);
    assert_int_equal(rep.problems, 1);
    assert_string_equal(rep.first_bad_key, key);
    assert_non_null(strstr(rep.message, "base image"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(check__clean_store, setup, teardown),
        cmocka_unit_test_setup_teardown(check__flipped_byte_in_record_names_lsn, setup, teardown),
        cmocka_unit_test_setup_teardown(check__binding_changed_names_key, setup, teardown),
        cmocka_unit_test_setup_teardown(check__deleted_record_names_lsn, setup, teardown),
        cmocka_unit_test_setup_teardown(check__deleted_last_record_names_lsn, setup, teardown),
        cmocka_unit_test_setup_teardown(check__index_damage_names_key, setup, teardown),
        cmocka_unit_test_setup_teardown(check__children_keyed_by_parent_lsn, setup, teardown),
        cmocka_unit_test_setup_teardown(check__wrong_counters, setup, teardown),
        cmocka_unit_test_setup_teardown(check__damaged_base_image_names_key, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
