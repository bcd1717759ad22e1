/*
 * test_compact.c -- online compaction and vacuum.
 *
 * Compaction must not change what the store means: after any cut, check
 * passes, the digest is unchanged, replay of base image + remaining log
 * equals the state, and writers (threads of this process) keep going
 * while it runs.  A record that does not re-derive stops it before it is
 * folded into the image.  Vacuum must refuse while the store is open
 * anywhere (another process's writer: fork), shrink the file after a
 * compaction, and survive being killed at any point.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <lmdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "bindlog.h"
#include "core/record.h"
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
    f->tmp = tu_mkdtemp("compact");
    snprintf(f->dir, sizeof(f->dir), "%s/store", f->tmp);
    wl_now = 1000000;
    f->s = wl_open_store(f->dir);
    wl_gen_init(&f->g, 7);
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

static void run(fx *f, int n)
{
    for (int i = 0; i < n; i++)
        wl_gen_step(&f->g, f->s);
}

static void assert_clean(bindlog *s)
{
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    if (rep.problems != 0)
        fail_msg("check: %llu problems, first: %s", (unsigned long long)rep.problems,
                 rep.message);
    assert_memory_equal(rep.state_digest, rep.replay_digest, BINDLOG_DIGEST_SIZE);
}

/* replay of base image + remaining log must equal the live digest */
static void assert_replays(fx *f, const char *name)
{
    char dir[1100];
    unsigned char live[BINDLOG_DIGEST_SIZE], rep[BINDLOG_DIGEST_SIZE];
    uint64_t head, last;
    snprintf(dir, sizeof(dir), "%s/%s", f->tmp, name);
    assert_int_equal(bindlog_digest(f->s, live, &head), 0);
    assert_int_equal(bindlog_replay(f->s, dir, UINT64_MAX, INT64_MAX, rep, &last, NULL, NULL), 0);
    assert_int_equal(last, head);
    assert_memory_equal(live, rep, BINDLOG_DIGEST_SIZE);
    bindlog *r = wl_open_store(dir);
    assert_clean(r);
    bindlog_close(r);
}

static uint64_t g_progress_calls, g_progress_done;

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)ctx;
    assert_true(done <= total);
    assert_true(done >= g_progress_done);
    g_progress_calls++;
    g_progress_done = done;
}

static void compact__keeps_meaning(void **state)
{
    fx *f = *state;
    unsigned char d0[BINDLOG_DIGEST_SIZE], d1[BINDLOG_DIGEST_SIZE];
    uint64_t removed;
    bindlog_stats st;
    char dir[1100];

    run(f, 400);
    assert_int_equal(bindlog_digest(f->s, d0, NULL), 0);
    g_progress_calls = g_progress_done = 0;
    assert_int_equal(bindlog_compact(f->s, 200, &removed, on_progress, NULL), 0);
    assert_int_equal(removed, 199);
    assert_true(g_progress_calls >= 1);
    assert_int_equal(g_progress_done, 199);
    assert_int_equal(bindlog_stats_get(f->s, &st), 0);
    assert_int_equal(st.base_lsn, 199);
    assert_int_equal(st.log_records, 201);
    assert_int_equal(st.head_lsn, 400);
    assert_int_equal(bindlog_digest(f->s, d1, NULL), 0);
    assert_memory_equal(d0, d1, BINDLOG_DIGEST_SIZE);
    assert_clean(f->s);
    assert_replays(f, "r1");

    /* the compacted past is gone for replay, the rest is still there */
    snprintf(dir, sizeof(dir), "%s/before-base", f->tmp);
    assert_int_equal(bindlog_replay(f->s, dir, 150, INT64_MAX, NULL, NULL, NULL, NULL),
                     BINDLOG_ENOTFOUND);
    snprintf(dir, sizeof(dir), "%s/at-base", f->tmp);
    uint64_t last;
    assert_int_equal(bindlog_replay(f->s, dir, 199, INT64_MAX, NULL, &last, NULL, NULL), 0);
    assert_int_equal(last, 199);
    uint64_t lsn;
    assert_int_equal(bindlog_lsn_at_time(f->s, 0, &lsn), 0);
    assert_int_equal(lsn, 200);

    /* the log iterators see only retained records; history entries went too */
    bindlog_iter *it;
    bindlog_record rec;
    assert_int_equal(bindlog_log_iter(f->s, 0, UINT64_MAX, &it), 0);
    assert_int_equal(bindlog_iter_next_record(it, &rec), 1);
    assert_int_equal(rec.lsn, 200);
    bindlog_iter_close(it);

    /* compacting less than what is compacted is a no-op */
    assert_int_equal(bindlog_compact(f->s, 100, &removed, NULL, NULL), 0);
    assert_int_equal(removed, 0);

    /* keep nothing (clamped to head + 1), then keep writing */
    assert_int_equal(bindlog_compact(f->s, UINT64_MAX, &removed, NULL, NULL), 0);
    assert_int_equal(removed, 201);
    assert_int_equal(bindlog_stats_get(f->s, &st), 0);
    assert_int_equal(st.base_lsn, 400);
    assert_int_equal(st.log_records, 0);
    assert_clean(f->s);
    assert_replays(f, "r2");
    run(f, 100);
    assert_clean(f->s);
    assert_replays(f, "r3");
    assert_int_equal(bindlog_stats_get(f->s, &st), 0);
    assert_int_equal(st.head_lsn, 500);
    /* the applied counters still cover the compacted records */
    uint64_t applied = 0;
    for (int i = 1; i < BINDLOG_EVENT_COUNT; i++)
        applied += st.applied[i];
    assert_int_equal(applied, 500);
}

/* The children of "sess-p", newest first, into out (ids joined by ','). */
static int children_of(bindlog *s, char *out, size_t cap)
{
    bindlog_iter *it;
    bindlog_session se;
    int rc = bindlog_children_iter(s, "sess-p", &it);
    size_t n = 0;
    out[0] = '\0';
    if (rc != 0)
        return rc;
    while ((rc = bindlog_iter_next_session(it, &se, NULL, 0)) == 1) {
        assert_string_equal(se.parent_id, "sess-p");
        n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? "," : "", se.session_id);
    }
    bindlog_iter_close(it);
    return rc;
}

/* Format 6 finds a session's children through the sibling chain of the
 * session values while the log holds their records, and through the
 * children table once compaction folded them: a parent re-opened and split
 * three times lists all three children, newest first along the chain, then
 * the compacted ones, before, across and after compaction, and the store
 * checks clean each time. */
static void compact__children_across_the_chain_and_the_table(void **state)
{
    fx *f = *state;
    bindlog_result r;
    uint64_t removed, lsn[3];
    char got[256];
    static const char *kids[] = {"kid-b", "kid-c", "kid-a"}; /* ids against creation order */

    run(f, 40);
    assert_int_equal(bindlog_bind(f->s, "agent:kids", "sess-p", NULL, NULL, "{}", 2, &r),
                     BINDLOG_APPLIED);
    for (int i = 0; i < 3; i++) {
        if (i > 0) /* /resume: the key back to its parent, which re-opens */
            assert_int_equal(bindlog_bind(f->s, "agent:kids", "sess-p", NULL, NULL, NULL, 0, &r),
                             BINDLOG_APPLIED);
        assert_int_equal(bindlog_split(f->s, "agent:kids", "sess-p", kids[i],
                                       BINDLOG_ANY_GENERATION, NULL, 0, &r),
                         BINDLOG_APPLIED);
        lsn[i] = r.lsn;
        run(f, 10);
    }
    assert_int_equal(children_of(f->s, got, sizeof got), 0);
    assert_string_equal(got, "kid-a,kid-c,kid-b");
    assert_clean(f->s);

    /* the oldest child's record folded: the chain, then the table */
    assert_int_equal(bindlog_compact(f->s, lsn[0] + 1, &removed, NULL, NULL), 0);
    assert_int_equal(children_of(f->s, got, sizeof got), 0);
    assert_string_equal(got, "kid-a,kid-c,kid-b");
    assert_clean(f->s);
    assert_replays(f, "r1");

    /* two of three folded */
    assert_int_equal(bindlog_compact(f->s, lsn[1] + 1, &removed, NULL, NULL), 0);
    assert_int_equal(children_of(f->s, got, sizeof got), 0);
    assert_string_equal(got, "kid-a,kid-b,kid-c"); /* the chain, then the table in id order */
    assert_clean(f->s);

    /* all folded: the table alone, in id order */
    assert_int_equal(bindlog_compact(f->s, lsn[2] + 5, &removed, NULL, NULL), 0);
    assert_int_equal(children_of(f->s, got, sizeof got), 0);
    assert_string_equal(got, "kid-a,kid-b,kid-c");
    assert_clean(f->s);
    assert_replays(f, "r2");
}

/* A link of the sibling chain forged to a record that created no child of
 * the session: the children iterator refuses it, naming the session and
 * the LSN, and check finds the value the log does not produce. */
static void compact__forged_sibling_link_is_refused(void **state)
{
    fx *f = *state;
    bindlog_result r;
    char got[256];
    uint64_t other;

    run(f, 30);
    assert_int_equal(bindlog_bind(f->s, "agent:kids", "sess-p", NULL, NULL, "{}", 2, &r),
                     BINDLOG_APPLIED);
    assert_int_equal(bindlog_split(f->s, "agent:kids", "sess-p", "kid-a", BINDLOG_ANY_GENERATION,
                                   NULL, 0, &r),
                     BINDLOG_APPLIED);
    run(f, 5);
    other = r.lsn + 1; /* it creates no child of sess-p */
    bindlog_close(f->s); /* the last handle: everything checkpointed into data.mdb */
    f->s = NULL;

    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi sess;
    MDB_val k = {6, "sess-p"}, v;
    unsigned char buf[64];
    bl_sval sv;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 16), 0);
    assert_int_equal(mdb_env_open(env, f->dir, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "sessions", 0, &sess), 0);
    assert_int_equal(mdb_get(txn, sess, &k, &v), 0);
    assert_int_equal(bl_sval_decode_any(v.mv_data, v.mv_size, &sv), 0);
    assert_int_equal(sv.child_lsn, sv.ended_lsn); /* the split's own record */
    sv.child_lsn = other; /* a workload record after the split, of another key */
    size_t n = sv.ref ? bl_sval_encode_ref(&sv, buf, sizeof buf) : bl_sval_encode(&sv, buf, sizeof buf);
    assert_true(n > 0);
    v = (MDB_val){n, buf};
    assert_int_equal(mdb_put(txn, sess, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);

    f->s = wl_open_store(f->dir);
    assert_int_equal(children_of(f->s, got, sizeof got), BINDLOG_ECORRUPT);
    assert_non_null(strstr(bindlog_last_error(), "sess-p"));
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(f->s, &rep, NULL, NULL), 0);
    assert_true(rep.problems > 0);
    assert_non_null(strstr(rep.message, "sess-p"));
}

static void compact__many_chunks(void **state)
{
    fx *f = *state;
    uint64_t removed;
    unsigned char d0[BINDLOG_DIGEST_SIZE], d1[BINDLOG_DIGEST_SIZE];

    /* more than one bounded transaction's worth */
    for (int b = 0; b < 12; b++)
        run(f, 1000);
    assert_int_equal(bindlog_digest(f->s, d0, NULL), 0);
    assert_int_equal(bindlog_compact(f->s, 11001, &removed, NULL, NULL), 0);
    assert_int_equal(removed, 11000);
    assert_int_equal(bindlog_digest(f->s, d1, NULL), 0);
    assert_memory_equal(d0, d1, BINDLOG_DIGEST_SIZE);
    assert_clean(f->s);
    assert_replays(f, "r");
}

/* A compaction whose chunk does not fit the map: the store was reopened
 * with a map of exactly its file, so the base image's first pages run it
 * full; the chunk is redone after the map grows, and nothing changes
 * meaning. */
static void compact__grows_a_full_map_and_redoes_the_chunk(void **state)
{
    fx *f = *state;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_stats st0, st1;
    uint64_t removed;
    unsigned char d0[BINDLOG_DIGEST_SIZE], d1[BINDLOG_DIGEST_SIZE];

    for (int b = 0; b < 3; b++)
        run(f, 1000);
    bindlog_close(f->s);
    o.durability = BINDLOG_DURABILITY_NONE;
    o.map_size = 1; /* LMDB takes the file's own size */
    f->s = NULL;
    assert_int_equal(bindlog_open(&f->s, f->dir, &o), 0);
    assert_int_equal(bindlog_stats_get(f->s, &st0), 0);
    assert_int_equal(bindlog_digest(f->s, d0, NULL), 0);
    assert_int_equal(bindlog_compact(f->s, 2901, &removed, NULL, NULL), 0);
    assert_int_equal(removed, 2900);
    assert_int_equal(bindlog_stats_get(f->s, &st1), 0);
    if (st1.map_size <= st0.map_size)
        fail_msg("the map did not have to grow (%llu, then %llu bytes): the case tests nothing",
                 (unsigned long long)st0.map_size, (unsigned long long)st1.map_size);
    assert_int_equal(bindlog_digest(f->s, d1, NULL), 0);
    assert_memory_equal(d0, d1, BINDLOG_DIGEST_SIZE);
    assert_clean(f->s);
    assert_replays(f, "r");
}

typedef struct writer_arg {
    fx *f;
    wl_gen g;
    atomic_int stop;
    atomic_int events;
} writer_arg;

static void *writer(void *p)
{
    writer_arg *w = p;
    while (!atomic_load(&w->stop)) {
        wl_gen_step(&w->g, w->f->s);
        atomic_fetch_add(&w->events, 1);
    }
    return NULL;
}

/* Wait (at most 30 s) until the writer has applied more than `seen`
 * events: on a loaded machine the compactions could otherwise all run
 * before the writer's thread is first scheduled, and the case would test
 * nothing concurrent (w.events stayed 0 once, under a full ctest -j2). */
static void await_writer(writer_arg *w, int seen)
{
    for (int i = 0; i < 30000 && atomic_load(&w->events) <= seen; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    assert_true(atomic_load(&w->events) > seen);
}

static void compact__with_concurrent_writer(void **state)
{
    fx *f = *state;
    writer_arg w = {.f = f};
    pthread_t th;
    uint64_t removed, total = 0;
    bindlog_stats st;

    /* the writer owns the workload generator from now on */
    w.g = f->g;
    run(f, 0);
    for (int i = 0; i < 3000; i++)
        wl_gen_step(&w.g, f->s);
    assert_int_equal(pthread_create(&th, NULL, writer, &w), 0);
    for (int round = 0; round < 6; round++) {
        await_writer(&w, atomic_load(&w.events)); /* writes between every two compactions */
        assert_int_equal(bindlog_stats_get(f->s, &st), 0);
        assert_int_equal(bindlog_compact(f->s, st.head_lsn, &removed, NULL, NULL), 0);
        total += removed;
        assert_clean(f->s); /* a live store checks clean while being written */
    }
    atomic_store(&w.stop, 1);
    pthread_join(th, NULL);
    assert_true(atomic_load(&w.events) > 0);
    assert_true(total > 0);
    assert_int_equal(bindlog_stats_get(f->s, &st), 0);
    assert_int_equal(st.head_lsn, 3000 + (uint64_t)atomic_load(&w.events));
    assert_clean(f->s);
    assert_replays(f, "r");
}

static void compact__refuses_bad_calls(void **state)
{
    fx *f = *state;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *ro;
    uint64_t removed = 99;

    run(f, 10);
    assert_int_equal(bindlog_compact(NULL, 5, &removed, NULL, NULL), BINDLOG_EINVAL);
    o.read_only = 1;
    assert_int_equal(bindlog_open(&ro, f->dir, &o), 0);
    assert_int_equal(bindlog_compact(ro, 5, &removed, NULL, NULL), BINDLOG_EREADONLY);
    assert_int_equal(removed, 0);
    bindlog_close(ro);
    assert_int_equal(bindlog_compact(f->s, 0, &removed, NULL, NULL), 0);
    assert_int_equal(removed, 0);
}

/* A forged record (valid checksum, impossible generation) is never folded
 * into the image: compaction stops before its chunk, the log stays whole. */
static void compact__stops_at_forged_record(void **state)
{
    fx *f = *state;
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    unsigned char kb[8], buf[BL_RECORD_MAX];
    MDB_val k = {8, kb}, v;
    uint64_t removed;
    bindlog_stats st;

    run(f, 100);
    bindlog_close(f->s);
    bl_put64be(kb, 50);
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 16), 0);
    assert_int_equal(mdb_env_open(env, f->dir, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "log", 0, &dbi), 0);
    assert_int_equal(mdb_get(txn, dbi, &k, &v), 0);
    size_t n = v.mv_size;
    memcpy(buf, v.mv_data, n);
    bl_put64(buf + 20, bl_get64(buf + 20) + 5);
    bl_put64(buf + n - 8, XXH3_64bits(buf, n - 8));
    v = (MDB_val){n, buf};
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);

    f->s = wl_open_store(f->dir);
    assert_int_equal(bindlog_compact(f->s, 80, &removed, NULL, NULL), BINDLOG_ECORRUPT);
    assert_int_equal(removed, 0);
    assert_int_equal(bindlog_stats_get(f->s, &st), 0);
    assert_int_equal(st.base_lsn, 0);
    assert_int_equal(st.log_records, 100);
    /* records before it can still be compacted */
    assert_int_equal(bindlog_compact(f->s, 50, &removed, NULL, NULL), 0);
    assert_int_equal(removed, 49);
}

/* ---- vacuum ---------------------------------------------------------------------- */

/* A log much larger than the state it leaves: keys flip between two
 * sessions, each BIND replacing the session's 2 kB origin. */
static void fill_big(fx *f, int n)
{
    static char origin[2000];
    bindlog_result res;
    for (int i = 0; i < n; i++) {
        char key[32], sid[32];
        snprintf(key, sizeof(key), "big:%d", i % 50);
        snprintf(sid, sizeof(sid), "big-%d-%d", i % 50, (i / 50) % 2);
        memset(origin, 'a' + i % 26, sizeof(origin));
        assert_int_equal(bindlog_bind(f->s, key, sid, NULL, NULL, origin, sizeof(origin), &res),
                         BINDLOG_APPLIED);
    }
}

static void vacuum__refused_while_open_here(void **state)
{
    fx *f = *state;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *ro;

    run(f, 10);
    assert_int_equal(bindlog_vacuum(f->dir, NULL, NULL), BINDLOG_EBUSY); /* a writer */
    bindlog_close(f->s);
    o.read_only = 1;
    assert_int_equal(bindlog_open(&ro, f->dir, &o), 0);
    assert_int_equal(bindlog_vacuum(f->dir, NULL, NULL), BINDLOG_EBUSY); /* a reader */
    bindlog_close(ro);
    uint64_t before, after;
    assert_int_equal(bindlog_vacuum(f->dir, &before, &after), 0);
    assert_true(before > 0 && after > 0);
    assert_int_equal(bindlog_vacuum(NULL, NULL, NULL), BINDLOG_EINVAL);
    char missing[1100];
    snprintf(missing, sizeof(missing), "%s/nothing-here", f->tmp);
    assert_int_equal(bindlog_vacuum(missing, NULL, NULL), BINDLOG_ENOTFOUND);
    f->s = wl_open_store(f->dir);
    assert_clean(f->s);
}

/* Another process has the store open, writing or (read_only) only
 * reading: vacuum refuses, and goes ahead once it has closed. */
static void refused_while_open_in_other_process(fx *f, int read_only)
{
    int up[2], down[2];
    char c;

    run(f, 10);
    bindlog_close(f->s);
    f->s = NULL;
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        bindlog_binding b;
        bindlog *s = NULL;
        int ok;
        if (read_only) {
            bindlog_options o = BINDLOG_OPTIONS_INIT;
            o.read_only = 1;
            ok = bindlog_open(&s, f->dir, &o) == 0 && bindlog_get(s, "x", &b) == BINDLOG_ENOTFOUND;
        } else {
            bindlog_result res;
            s = wl_open_store(f->dir);
            ok = bindlog_invalidate(s, "agent:main:chat:0", NULL, &res) >= 0 ||
                 bindlog_unbind(s, "x", NULL, &res) == BINDLOG_ENOTFOUND;
        }
        c = ok ? 'y' : 'n';
        if (write(up[1], &c, 1) != 1 || read(down[0], &c, 1) != 1)
            _exit(2);
        bindlog_close(s);
        _exit(0);
    }
    assert_int_equal(read(up[0], &c, 1), 1);
    assert_int_equal(c, 'y');
    assert_int_equal(bindlog_vacuum(f->dir, NULL, NULL), BINDLOG_EBUSY);
    if (read_only && strstr(bindlog_last_error(), "another process has the store open") == NULL)
        fail_msg("the refusal does not name the other process: %s", bindlog_last_error());
    c = 'x';
    assert_int_equal(write(down[1], &c, 1), 1);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(up[0]);
    close(up[1]);
    close(down[0]);
    close(down[1]);
    assert_int_equal(bindlog_vacuum(f->dir, NULL, NULL), 0);
    f->s = wl_open_store(f->dir);
    assert_clean(f->s);
}

static void vacuum__refused_while_writer_in_other_process(void **state)
{
    refused_while_open_in_other_process(*state, 0);
}

static void vacuum__refused_while_reader_in_other_process(void **state)
{
    refused_while_open_in_other_process(*state, 1);
}

static void vacuum__shrinks_after_compaction(void **state)
{
    fx *f = *state;
    unsigned char d0[BINDLOG_DIGEST_SIZE], d1[BINDLOG_DIGEST_SIZE];
    uint64_t before, after, removed;

    fill_big(f, 3000); /* ~6 MB of origins in the log */
    run(f, 200);
    assert_int_equal(bindlog_digest(f->s, d0, NULL), 0);
    assert_int_equal(bindlog_compact(f->s, UINT64_MAX, &removed, NULL, NULL), 0);
    assert_int_equal(removed, 3200);
    bindlog_close(f->s);
    f->s = NULL;
    assert_int_equal(bindlog_vacuum(f->dir, &before, &after), 0);
    assert_true(after < before / 2);
    struct stat st;
    char path[1100];
    snprintf(path, sizeof(path), "%s/data.mdb", f->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((uint64_t)st.st_size, after);
    snprintf(path, sizeof(path), "%s/data.mdb.vacuum", f->dir);
    assert_int_not_equal(stat(path, &st), 0);
    f->s = wl_open_store(f->dir);
    assert_int_equal(bindlog_digest(f->s, d1, NULL), 0);
    assert_memory_equal(d0, d1, BINDLOG_DIGEST_SIZE);
    assert_clean(f->s);
    /* and the store keeps working after the swap */
    run(f, 50);
    assert_clean(f->s);
}

/* Kill a vacuum at random points: the store always opens, checks clean
 * and keeps its digest (old file or new file, never neither). */
static void vacuum__killed_at_random_points(void **state)
{
    fx *f = *state;
    unsigned char d0[BINDLOG_DIGEST_SIZE], d1[BINDLOG_DIGEST_SIZE];
    uint64_t removed;
    unsigned seed = 12345;

    fill_big(f, 1500);
    assert_int_equal(bindlog_compact(f->s, 1000, &removed, NULL, NULL), 0);
    assert_int_equal(bindlog_digest(f->s, d0, NULL), 0);
    bindlog_close(f->s);
    f->s = NULL;
    for (int round = 0; round < 25; round++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            _exit(bindlog_vacuum(f->dir, NULL, NULL) == 0 ? 0 : 1);
        seed = seed * 1103515245u + 12345u;
        struct timespec ts = {0, (long)((seed >> 8) % 4000) * 1000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        f->s = wl_open_store(f->dir);
        assert_int_equal(bindlog_digest(f->s, d1, NULL), 0);
        assert_memory_equal(d0, d1, BINDLOG_DIGEST_SIZE);
        assert_clean(f->s);
        bindlog_close(f->s);
        f->s = NULL;
    }
    assert_int_equal(bindlog_vacuum(f->dir, NULL, NULL), 0);
    f->s = wl_open_store(f->dir);
    assert_clean(f->s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(compact__keeps_meaning, setup, teardown),
        cmocka_unit_test_setup_teardown(compact__many_chunks, setup, teardown),
        cmocka_unit_test_setup_teardown(compact__grows_a_full_map_and_redoes_the_chunk, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(compact__children_across_the_chain_and_the_table, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(compact__forged_sibling_link_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(compact__with_concurrent_writer, setup, teardown),
        cmocka_unit_test_setup_teardown(compact__refuses_bad_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(compact__stops_at_forged_record, setup, teardown),
        cmocka_unit_test_setup_teardown(vacuum__refused_while_open_here, setup, teardown),
        cmocka_unit_test_setup_teardown(vacuum__refused_while_writer_in_other_process, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(vacuum__refused_while_reader_in_other_process, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(vacuum__shrinks_after_compaction, setup, teardown),
        cmocka_unit_test_setup_teardown(vacuum__killed_at_random_points, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
