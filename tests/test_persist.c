/*
 * test_persist.c -- what a store keeps across close and open.
 *
 * For each durability mode the whole observable state (bindings, sessions
 * with their origins, the log, statistics, digest) must read back identical
 * after a reopen, and the next event must continue the LSNs and generations.
 * Also: growth of the map from a tiny initial size, file and directory modes,
 * and refusal of a newer on-disk format.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "bindlog.h"
#include "testutil.h"

/* ---- fixture ------------------------------------------------------------- */

static int64_t g_now = 1000;

static int64_t test_clock(void *ctx)
{
    (void)ctx;
    return g_now;
}

typedef struct fx {
    char *tmp;
    char dir[1024];
} fx;

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    f->tmp = tu_mkdtemp("persist");
    snprintf(f->dir, sizeof f->dir, "%s/store", f->tmp);
    g_now = 1000;
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    tu_rmtree(f->tmp);
    free(f->tmp);
    free(f);
    return 0;
}

static bindlog *xopen(const char *dir, int durability, size_t map_size)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = durability;
    o.map_size = map_size;
    o.clock_ms = test_clock;
    bindlog *s = NULL;
    int rc = bindlog_open(&s, dir, &o);
    if (rc != 0)
        fail_msg("bindlog_open(%s): %d %s", dir, rc, bindlog_strerror(rc));
    return s;
}

/* ---- a byte buffer that a snapshot is serialised into ---------------------- */

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_u64(buf *b, uint64_t v)
{
    put(b, &v, sizeof v);
}

static void put_str(buf *b, const char *s, size_t n)
{
    put_u64(b, n);
    put(b, s, n);
}

#define PUT_CSTR(b, s) put_str((b), (s), strlen(s))

/*
 * Everything the public API shows of a store, serialised field by field:
 * persistent statistics, digest, every binding (iterator and bindlog_get),
 * every session with its origin (iterator and bindlog_session_get), every log
 * record with its origin.  Process-local statistics (events, commits) and
 * sizes are left out: they may differ after a reopen.
 */
static buf snapshot(bindlog *s)
{
    buf b = {0};
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    put_u64(&b, st.head_lsn);
    put_u64(&b, st.base_lsn);
    put_u64(&b, st.log_records);
    put_u64(&b, st.bindings);
    put_u64(&b, st.live_bindings);
    put_u64(&b, st.sessions);
    put_u64(&b, st.live_sessions);
    for (int t = 0; t < BINDLOG_EVENT_COUNT; t++)
        put_u64(&b, st.applied[t]);
    put_u64(&b, st.format_version);

    unsigned char d[BINDLOG_DIGEST_SIZE];
    uint64_t dh = 0;
    assert_int_equal(bindlog_digest(s, d, &dh), 0);
    assert_int_equal(dh, st.head_lsn);
    put(&b, d, sizeof d);

    bindlog_iter *it = NULL;
    int rc;
    bindlog_binding bb;
    assert_int_equal(bindlog_bindings_iter(s, &it), 0);
    while ((rc = bindlog_iter_next_binding(it, &bb)) == 1) {
        PUT_CSTR(&b, bb.key);
        PUT_CSTR(&b, bb.session_id);
        put_u64(&b, bb.generation);
        put_u64(&b, bb.lsn);
        put_u64(&b, (uint64_t)bb.updated_ms);
        bindlog_binding g;
        memset(&g, 0, sizeof g);
        int grc = bindlog_get(s, bb.key, &g);
        assert_int_equal(grc, bb.session_id[0] ? 0 : BINDLOG_ENOTFOUND);
        assert_int_equal(g.generation, bb.generation);
        assert_string_equal(g.session_id, bb.session_id);
    }
    assert_int_equal(rc, 0);
    bindlog_iter_close(it);

    unsigned char *ob = malloc(BINDLOG_ORIGIN_MAX);
    unsigned char *ob2 = malloc(BINDLOG_ORIGIN_MAX);
    assert_non_null(ob);
    assert_non_null(ob2);
    bindlog_session ss;
    assert_int_equal(bindlog_sessions_iter(s, &it), 0);
    while ((rc = bindlog_iter_next_session(it, &ss, ob, BINDLOG_ORIGIN_MAX)) == 1) {
        PUT_CSTR(&b, ss.session_id);
        PUT_CSTR(&b, ss.key);
        PUT_CSTR(&b, ss.parent_id);
        put_u64(&b, ss.created_lsn);
        put_u64(&b, ss.ended_lsn);
        put_u64(&b, (uint64_t)ss.created_ms);
        put_u64(&b, (uint64_t)ss.ended_ms);
        PUT_CSTR(&b, ss.end_reason);
        put_str(&b, (const char *)ob, ss.origin_len);
        bindlog_session s2;
        assert_int_equal(bindlog_session_get(s, ss.session_id, &s2, ob2, BINDLOG_ORIGIN_MAX), 0);
        assert_int_equal(s2.origin_len, ss.origin_len);
        assert_memory_equal(ob2, ob, ss.origin_len);
        assert_int_equal(s2.created_lsn, ss.created_lsn);
        assert_int_equal(s2.ended_lsn, ss.ended_lsn);
    }
    assert_int_equal(rc, 0);
    bindlog_iter_close(it);
    free(ob);
    free(ob2);

    bindlog_record rec;
    assert_int_equal(bindlog_log_iter(s, 0, UINT64_MAX, &it), 0);
    while ((rc = bindlog_iter_next_record(it, &rec)) == 1) {
        put_u64(&b, rec.lsn);
        put_u64(&b, (uint64_t)rec.type);
        put_u64(&b, (uint64_t)rec.time_ms);
        put_u64(&b, rec.generation);
        put_str(&b, rec.key, rec.key_len);
        PUT_CSTR(&b, rec.session_id);
        PUT_CSTR(&b, rec.other_id);
        PUT_CSTR(&b, rec.reason);
        put_u64(&b, (uint64_t)rec.origin_present);
        put_str(&b, (const char *)rec.origin, rec.origin_len);
    }
    assert_int_equal(rc, 0);
    bindlog_iter_close(it);
    return b;
}

static void assert_same_snapshot(const buf *a, const buf *b)
{
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->p, b->p, a->n);
}

/* ---- a deterministic workload ------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/*
 * `n` mixed events over `nkeys` keys, every type, with rejections and
 * errors mixed in.  Every call must return an outcome or one of the state
 * errors the spec allows.  Returns the number of APPLIED events.
 */
static uint64_t workload(bindlog *s, int n, int nkeys, unsigned seed)
{
    rng_state = 0x243F6A8885A308D3ull ^ seed;
    uint64_t applied = 0;
    char key[64], id[64], id2[64];
    unsigned char origin[300];
    static unsigned next_id = 0;
    for (int i = 0; i < n; i++) {
        g_now += (int64_t)(rnd() % 5) - 1; /* sometimes back by one */
        snprintf(key, sizeof key, "agent:main:telegram:dm:%d", (int)(rnd() % (unsigned)nkeys));
        bindlog_binding cur;
        int grc = bindlog_get(s, key, &cur);
        assert_true(grc == 0 || grc == BINDLOG_ENOTFOUND);
        size_t olen = (size_t)(rnd() % sizeof origin);
        for (size_t j = 0; j < olen; j++)
            origin[j] = (unsigned char)rnd();
        const void *o = (rnd() % 4 == 0) ? NULL : origin;
        if (o == NULL)
            olen = 0;
        snprintf(id, sizeof id, "s%u-%u", seed, next_id++);
        bindlog_result r;
        int rc;
        switch (rnd() % 6) {
        case 0:
            rc = bindlog_bind(s, key, id, NULL, (rnd() % 2) ? NULL : "resume", o, olen, &r);
            break;
        case 1:
            rc = bindlog_new_session(s, key, id, NULL, o, olen, &r);
            break;
        case 2:
        case 3:
            rc = bindlog_split(s, key, grc == 0 ? cur.session_id : "none", id,
                               (rnd() % 3) ? cur.generation : BINDLOG_ANY_GENERATION, o, olen, &r);
            break;
        case 4:
            rc = bindlog_invalidate(s, key, (rnd() % 2) ? NULL : "stop", &r);
            break;
        default:
            rc = bindlog_unbind(s, key, (rnd() % 2) ? NULL : "idle", &r);
            break;
        }
        assert_true(rc >= 0 || rc == BINDLOG_ENOTFOUND);
        if (rc == BINDLOG_APPLIED)
            applied++;
        /* now and then resume an old session (re-open) */
        if (i % 17 == 0 && next_id > 10) {
            snprintf(id2, sizeof id2, "s%u-%u", seed, (unsigned)(rnd() % (next_id - 1)));
            rc = bindlog_bind(s, key, id2, NULL, NULL, NULL, 0, &r);
            assert_true(rc >= 0 || rc == BINDLOG_ECONFLICT);
            if (rc == BINDLOG_APPLIED)
                applied++;
        }
    }
    return applied;
}

/* ---- reopen in each durability mode ----------------------------------------------- */

static void reopen_identical(fx *f, int durability)
{
    bindlog *s = xopen(f->dir, durability, 0);
    int n = durability == BINDLOG_DURABILITY_FULL ? 300 : 1500;
    uint64_t applied = workload(s, n, 40, (unsigned)durability);
    assert_true(applied > 0);
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.durability, durability);
    assert_int_equal(st.head_lsn, applied);
    buf before = snapshot(s);
    uint64_t head = st.head_lsn;
    bindlog_close(s);

    /* reopen in the same mode */
    s = xopen(f->dir, durability, 0);
    buf after = snapshot(s);
    assert_same_snapshot(&before, &after);
    free(after.p);
    bindlog_close(s);

    /* and in each other mode: the data is the same whatever the mode */
    for (int m = BINDLOG_DURABILITY_FULL; m <= BINDLOG_DURABILITY_NONE; m++) {
        s = xopen(f->dir, m, 0);
        after = snapshot(s);
        assert_same_snapshot(&before, &after);
        free(after.p);
        bindlog_close(s);
    }

    /* the next event continues the LSNs and the key's generation */
    s = xopen(f->dir, durability, 0);
    bindlog_iter *it = NULL;
    bindlog_binding bb;
    assert_int_equal(bindlog_bindings_iter(s, &it), 0);
    assert_int_equal(bindlog_iter_next_binding(it, &bb), 1);
    bindlog_iter_close(it);
    bindlog_result r;
    int64_t t_before = g_now;
    g_now = 0; /* the clock went far back: times still never decrease */
    assert_int_equal(bindlog_bind(s, bb.key, "after-reopen", NULL, NULL, "x", 1, &r),
                     BINDLOG_APPLIED);
    assert_int_equal(r.lsn, head + 1);
    assert_int_equal(r.generation, bb.generation + 1);
    bindlog_record rec;
    assert_int_equal(bindlog_log_iter(s, head, head + 1, &it), 0);
    assert_int_equal(bindlog_iter_next_record(it, &rec), 1);
    int64_t last_time = rec.time_ms;
    assert_int_equal(bindlog_iter_next_record(it, &rec), 1);
    assert_int_equal(rec.lsn, head + 1);
    assert_int_equal(rec.time_ms, last_time);
    bindlog_iter_close(it);
    g_now = t_before;
    buf more = snapshot(s);
    bindlog_close(s);
    s = xopen(f->dir, durability, 0);
    after = snapshot(s);
    assert_same_snapshot(&more, &after);
    bindlog_close(s);
    free(more.p);
    free(after.p);
    free(before.p);
}

static void persist__reopen_identical_full(void **state)
{
    reopen_identical(*state, BINDLOG_DURABILITY_FULL);
}

static void persist__reopen_identical_normal(void **state)
{
    reopen_identical(*state, BINDLOG_DURABILITY_NORMAL);
}

static void persist__reopen_identical_none(void **state)
{
    reopen_identical(*state, BINDLOG_DURABILITY_NONE);
}

/* ---- map growth ---------------------------------------------------------------- */

/*
 * 30,000 APPLIED events from a 64 KiB initial map: every one must commit
 * (the map grows by itself), and the store reads back identical after a
 * reopen, whether the reopen asks for the tiny size again or the default.
 */
static void persist__map_grows_from_tiny_map(void **state)
{
    fx *f = *state;
    enum { NKEYS = 500, NEVENTS = 30000 };
    bindlog *s = xopen(f->dir, BINDLOG_DURABILITY_NONE, 64 * 1024);
    static char cur[NKEYS][32];
    static uint64_t gen[NKEYS];
    static unsigned seen[NKEYS];
    unsigned char origin[200];
    memset(origin, 'o', sizeof origin);
    unsigned fresh = 0;
    char key[64], id[32];
    bindlog_result r;

    for (int i = 0; i < NEVENTS; i++) {
        int k = i % NKEYS;
        snprintf(key, sizeof key, "agent:main:growth:%03d", k);
        snprintf(id, sizeof id, "g%u", fresh++);
        origin[0] = (unsigned char)i;
        int rc;
        switch (seen[k]++ % 4) {
        case 0:
            rc = bindlog_new_session(s, key, id, NULL, origin, sizeof origin, &r);
            gen[k]++;
            break;
        case 1:
            rc = bindlog_split(s, key, cur[k], id, gen[k], NULL, 0, &r);
            break;
        case 2:
            rc = bindlog_invalidate(s, key, NULL, &r);
            gen[k]++;
            snprintf(id, sizeof id, "%s", cur[k]);
            break;
        default:
            rc = bindlog_bind(s, key, id, cur[k], NULL, origin, 100, &r);
            gen[k]++;
            break;
        }
        if (rc != BINDLOG_APPLIED)
            fail_msg("event %d on %s: %d (%s)", i, key, rc, bindlog_code_name(rc));
        assert_int_equal(r.lsn, (uint64_t)i + 1);
        assert_int_equal(r.generation, gen[k]);
        snprintf(cur[k], sizeof cur[k], "%s", id);
        assert_string_equal(r.session_id, cur[k]);
    }
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, NEVENTS);
    assert_int_equal(st.bindings, NKEYS);
    assert_int_equal(st.live_bindings, NKEYS);
    assert_int_equal(st.live_sessions, NKEYS);
    assert_true(st.map_size > 64 * 1024);
    assert_true(st.map_used <= st.map_size);
    buf before = snapshot(s);
    bindlog_close(s);

    s = xopen(f->dir, BINDLOG_DURABILITY_NONE, 64 * 1024);
    buf after = snapshot(s);
    assert_same_snapshot(&before, &after);
    free(after.p);
    for (int k = 0; k < NKEYS; k++) {
        bindlog_binding b;
        snprintf(key, sizeof key, "agent:main:growth:%03d", k);
        assert_int_equal(bindlog_get(s, key, &b), 0);
        assert_string_equal(b.session_id, cur[k]);
        assert_int_equal(b.generation, gen[k]);
    }
    /* it keeps growing after the reopen too */
    for (int i = 0; i < 2000; i++) {
        snprintf(key, sizeof key, "agent:main:growth:extra:%d", i);
        snprintf(id, sizeof id, "x%d", i);
        assert_int_equal(bindlog_bind(s, key, id, "", NULL, origin, sizeof origin, &r),
                         BINDLOG_APPLIED);
        assert_int_equal(r.lsn, (uint64_t)NEVENTS + 1 + (uint64_t)i);
    }
    bindlog_close(s);

    s = xopen(f->dir, BINDLOG_DURABILITY_NONE, 0);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, NEVENTS + 2000);
    assert_int_equal(st.log_records, NEVENTS + 2000);
    bindlog_close(s);
    free(before.p);
}

/* ---- file modes ------------------------------------------------------------------- */

static void persist__file_and_dir_modes(void **state)
{
    fx *f = *state;
    char dir[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/a/b/store", f->tmp);
    mode_t old = umask(022);
    bindlog *s = xopen(dir, BINDLOG_DURABILITY_NONE, 0);
    umask(old);
    assert_int_equal(bindlog_bind(s, "k", "A", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);

    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    if ((st.st_mode & 0777) != 0700)
        fail_msg("%s: mode %o, want 0700", dir, (unsigned)(st.st_mode & 0777));
    /* the parents were made too */
    snprintf(path, sizeof path, "%s/a/b", f->tmp);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));

    snprintf(path, sizeof path, "%s/data.mdb", dir);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    if ((st.st_mode & 0777) != 0600)
        fail_msg("%s: mode %o, want 0600", path, (unsigned)(st.st_mode & 0777));
    /* every regular file the store made is private */
    const char *others[] = {"lock.mdb", "bindlog.lock"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, others[i]);
        if (stat(path, &st) == 0 && (st.st_mode & 0777) != 0600)
            fail_msg("%s: mode %o, want 0600", path, (unsigned)(st.st_mode & 0777));
    }
    bindlog_close(s);
}

/* ---- a newer on-disk format ------------------------------------------------------- */

/* Set meta "format" (u32 little-endian) of the closed store in dir.  Returns
 * 0, or -1 when the store does not have that layout (then the test cannot
 * forge a newer format and says so). */
static int set_format(const char *dir, uint32_t version, uint32_t *was)
{
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    int rc = mdb_env_create(&env);
    assert_int_equal(rc, 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 16), 0);
    rc = mdb_env_open(env, dir, 0, 0600);
    if (rc != 0)
        fail_msg("mdb_env_open(%s): %s", dir, mdb_strerror(rc));
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    rc = mdb_dbi_open(txn, "meta", 0, &dbi);
    if (rc != 0) {
        print_message("no named database \"meta\": %s\n", mdb_strerror(rc));
        mdb_txn_abort(txn);
        mdb_env_close(env);
        return -1;
    }
    MDB_val k = {6, (void *)"format"}, v;
    rc = mdb_get(txn, dbi, &k, &v);
    if (rc != 0 || v.mv_size != 4) {
        print_message("meta \"format\" is not a u32: %s, %zu bytes\n",
                      rc ? mdb_strerror(rc) : "found", rc ? (size_t)0 : v.mv_size);
        mdb_txn_abort(txn);
        mdb_env_close(env);
        return -1;
    }
    const unsigned char *p = v.mv_data;
    if (was != NULL)
        *was = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    unsigned char nv[4] = {(unsigned char)version, (unsigned char)(version >> 8),
                           (unsigned char)(version >> 16), (unsigned char)(version >> 24)};
    v.mv_size = 4;
    v.mv_data = nv;
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    return 0;
}

static void persist__newer_format_eversion(void **state)
{
    fx *f = *state;
    bindlog *s = xopen(f->dir, BINDLOG_DURABILITY_NONE, 0);
    assert_int_equal(bindlog_bind(s, "k", "A", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    buf before = snapshot(s);
    bindlog_close(s);

    uint32_t was = 0;
    if (set_format(f->dir, 99, &was) != 0) {
        free(before.p);
        skip();
    }
    assert_int_equal(was, BINDLOG_FORMAT_VERSION);

    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    s = (bindlog *)(uintptr_t)1;
    assert_int_equal(bindlog_open(&s, f->dir, &o), BINDLOG_EVERSION);
    assert_null(s);
    o.read_only = 1;
    s = (bindlog *)(uintptr_t)1;
    assert_int_equal(bindlog_open(&s, f->dir, &o), BINDLOG_EVERSION);
    assert_null(s);

    /* the refusal was about the number: put it back and the store opens as it was */
    assert_int_equal(set_format(f->dir, was, NULL), 0);
    s = xopen(f->dir, BINDLOG_DURABILITY_NONE, 0);
    buf after = snapshot(s);
    assert_same_snapshot(&before, &after);
    bindlog_close(s);
    free(before.p);
    free(after.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(persist__reopen_identical_full, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(persist__reopen_identical_normal, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(persist__reopen_identical_none, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(persist__map_grows_from_tiny_map, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(persist__file_and_dir_modes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(persist__newer_format_eversion, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
