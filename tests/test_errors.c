/*
 * test_errors.c -- bindlog_last_error(): every failing call leaves a
 * message naming the call, its subject and the reason; a success clears
 * it; each thread sees its own; a refusal decided by another thread's
 * group-commit leader still reaches the caller's thread.
 */
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "bindlog.h"
#include "testutil.h"

typedef struct fx {
    char *dir;
    bindlog *s;
} fx;

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    f->dir = tu_mkdtemp("errors");
    assert_int_equal(bindlog_open(&f->s, f->dir, &o), 0);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    bindlog_close(f->s);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static void expect_msg(const char *want)
{
    const char *got = bindlog_last_error();
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        fail_msg("last error \"%s\", expected \"%s\"", got, want);
}

static void errors__state_refusals_name_key_and_reason(void **state)
{
    fx *f = *state;
    bindlog_result r;

    assert_int_equal(bindlog_split(f->s, "agent:main:x", "A", "C", 1, NULL, 0, &r),
                     BINDLOG_ENOTFOUND);
    expect_msg("split agent:main:x: key is not bound");

    assert_int_equal(bindlog_invalidate(f->s, "agent:main:x", NULL, &r), BINDLOG_ENOTFOUND);
    expect_msg("invalidate agent:main:x: key is not bound");

    assert_int_equal(bindlog_unbind(f->s, "agent:main:x", NULL, &r), BINDLOG_ENOTFOUND);
    expect_msg("unbind agent:main:x: key was never bound");

    assert_int_equal(bindlog_bind(f->s, "k1", "S", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    expect_msg("");
    /* the conflict names the key that holds the session */
    assert_int_equal(bindlog_bind(f->s, "k2", "S", NULL, NULL, NULL, 0, &r),
                     BINDLOG_ECONFLICT);
    expect_msg("bind k2: session is the live binding of key k1");

    assert_int_equal(bindlog_new_session(f->s, "k2", "S", NULL, NULL, 0, &r), BINDLOG_EEXIST);
    expect_msg("new_session k2: session id already exists (a new session needs a fresh id)");

    assert_int_equal(bindlog_get(f->s, "nobody", &(bindlog_binding){0}), BINDLOG_ENOTFOUND);
    expect_msg("get nobody: key is not bound");
    bindlog_session se;
    assert_int_equal(bindlog_session_get(f->s, "zz", &se, NULL, 0), BINDLOG_ENOTFOUND);
    expect_msg("session_get zz: no such session");
}

static void errors__success_and_outcomes_clear(void **state)
{
    fx *f = *state;
    bindlog_result r;

    assert_int_equal(bindlog_split(f->s, "k", "A", "C", 1, NULL, 0, &r), BINDLOG_ENOTFOUND);
    assert_true(bindlog_last_error()[0] != '\0');
    assert_int_equal(bindlog_bind(f->s, "k", "A", "", NULL, NULL, 0, &r), BINDLOG_APPLIED);
    expect_msg("");
    assert_int_equal(bindlog_split(f->s, "k", "A", "C", 1, NULL, 0, &r), BINDLOG_APPLIED);
    expect_msg("");
    /* STALE and MOVED are outcomes, not errors: no message */
    assert_int_equal(bindlog_split(f->s, "k", "A", "D", 99, NULL, 0, &r), BINDLOG_STALE);
    expect_msg("");
    assert_int_equal(bindlog_split(f->s, "k", "B", "D", BINDLOG_ANY_GENERATION, NULL, 0, &r),
                     BINDLOG_MOVED);
    expect_msg("");
}

static void errors__arguments_are_named(void **state)
{
    fx *f = *state;
    bindlog_result r;
    bindlog *ro = NULL;

    assert_int_equal(bindlog_split(f->s, "k", "A", "A", 1, NULL, 0, &r), BINDLOG_EINVAL);
    expect_msg("split k: parent and child are the same session");
    assert_int_equal(bindlog_bind(f->s, "k", "bad\x01id", NULL, NULL, NULL, 0, &r),
                     BINDLOG_EINVAL);
    expect_msg("bind k: session id holds a control byte");
    assert_int_equal(bindlog_bind(f->s, "", "S", NULL, NULL, NULL, 0, &r), BINDLOG_EINVAL);
    expect_msg("bind \"\": key is empty");
    /* control bytes of a key are escaped in the message */
    assert_int_equal(bindlog_new_session(f->s, "k\x1b[31m", "S", "bad\nreason", NULL, 0, &r),
                     BINDLOG_EINVAL);
    expect_msg("new_session k\\x1b[31m: reason holds a control byte");
    assert_int_equal(bindlog_invalidate(NULL, "k", NULL, &r), BINDLOG_EINVAL);
    expect_msg("invalidate k: handle is NULL");

    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.read_only = 1;
    assert_int_equal(bindlog_open(&ro, f->dir, &o), 0);
    expect_msg("");
    assert_int_equal(bindlog_unbind(ro, "k", NULL, &r), BINDLOG_EREADONLY);
    expect_msg("unbind k: the handle was opened read-only");
    bindlog_close(ro);

    o.read_only = 0;
    o.durability = 7;
    assert_int_equal(bindlog_open(&ro, f->dir, &o), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "unknown durability mode 7"));
    o.durability = BINDLOG_DURABILITY_FULL;
    o.max_readers = BINDLOG_READERS_MAX + 1;
    assert_int_equal(bindlog_open(&ro, f->dir, &o), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "max_readers 65537 is over 65536"));
    o.max_readers = 0xFFFFFFFFu; /* no 256 GiB reader table: refused before any file */
    assert_int_equal(bindlog_open(&ro, f->dir, &o), BINDLOG_EINVAL);
    assert_int_equal(bindlog_open(&ro, "nope://x", NULL), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "open nope://x: unknown scheme"));
}

/* The calls without an event: a NULL handle or out, a bad session id, a
 * write asked of a read-only handle, each named by the call. */
static void errors__reads_and_maintenance_name_their_arguments(void **state)
{
    fx *f = *state;
    bindlog_iter *it = (bindlog_iter *)f; /* must be reset to NULL */
    unsigned char d[BINDLOG_DIGEST_SIZE];
    bindlog *ro = NULL;
    char long_id[BINDLOG_ID_MAX + 2];

    assert_int_equal(bindlog_bindings_iter(f->s, NULL), BINDLOG_EINVAL);
    expect_msg("bindings_iter: out is NULL");
    assert_int_equal(bindlog_log_iter(NULL, 1, 2, &it), BINDLOG_EINVAL);
    assert_null(it);
    expect_msg("log_iter: handle is NULL");
    it = (bindlog_iter *)f;
    assert_int_equal(bindlog_children_iter(f->s, "bad\x01id", &it), BINDLOG_EINVAL);
    assert_null(it);
    expect_msg("children_iter bad\\x01id: session id holds a control byte");
    memset(long_id, 'a', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    assert_int_equal(bindlog_ancestors_iter(f->s, long_id, &it), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "ancestors_iter aaaa"));
    assert_non_null(
        strstr(bindlog_last_error(), ": session id is longer than BINDLOG_ID_MAX (128) bytes"));
    assert_int_equal(bindlog_ancestors_iter(f->s, NULL, &it), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), ": session id is NULL"));
    assert_int_equal(bindlog_history_iter(f->s, "", &it), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), ": key is empty"));

    bindlog_binding b;
    bindlog_session ss;
    assert_int_equal(bindlog_get(f->s, "", &b), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), ": key is empty"));
    assert_int_equal(bindlog_session_get(f->s, "a\tb", &ss, NULL, 0), BINDLOG_EINVAL);
    expect_msg("session_get a\\x09b: session id holds a control byte");

    assert_int_equal(bindlog_digest(NULL, d, NULL), BINDLOG_EINVAL);
    expect_msg("digest: handle or out is NULL");
    assert_int_equal(bindlog_digest(f->s, NULL, NULL), BINDLOG_EINVAL);
    expect_msg("digest: handle or out is NULL");
    assert_int_equal(bindlog_import(NULL, 0, NULL, NULL, NULL, NULL), BINDLOG_EINVAL);
    expect_msg("import: handle is NULL");
    assert_int_equal(bindlog_checkpoint(NULL, NULL), BINDLOG_EINVAL);
    expect_msg("checkpoint: handle is NULL");

    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.read_only = 1;
    assert_int_equal(bindlog_open(&ro, f->dir, &o), 0);
    assert_int_equal(bindlog_checkpoint(ro, NULL), BINDLOG_EREADONLY);
    expect_msg("checkpoint: a read-only handle does not write the store");
    bindlog_close(ro);
    assert_int_equal(bindlog_checkpoint(f->s, NULL), 0);
    expect_msg("");
}

static void errors__batch_names_the_failing_event(void **state)
{
    fx *f = *state;
    bindlog_result r[3];
    size_t at = 99;
    bindlog_event ev[3] = {
        {BINDLOG_EVENT_BIND, "a", "S1", NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_BIND, "b", "S2", NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_SPLIT, "c", "C", "P", 1, NULL, NULL, 0},
    };
    assert_int_equal(bindlog_apply_batch(f->s, ev, 3, r, &at), BINDLOG_ENOTFOUND);
    assert_int_equal(at, 2);
    expect_msg("apply_batch event 2 (split c): key is not bound");
}

/* An event given a field its type does not take (an expected session for
 * new_session, a reason for a split, a session or an expected one for
 * invalidate and unbind) is refused whole and says so; nothing is written. */
static void errors__fields_a_type_does_not_take(void **state)
{
    fx *f = *state;
    bindlog_result r;
    assert_int_equal(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    const bindlog_event bad[] = {
        {BINDLOG_EVENT_NEW_SESSION, "k", "B", "A", 0, NULL, NULL, 0},
        {BINDLOG_EVENT_SPLIT, "k", "C", "A", 1, "compression", NULL, 0},
        {BINDLOG_EVENT_INVALIDATE, "k", "A", NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_INVALIDATE, "k", NULL, "A", 0, NULL, NULL, 0},
        {BINDLOG_EVENT_UNBIND, "k", "A", NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_UNBIND, "k", NULL, "A", 0, NULL, NULL, 0},
    };
    static const char *const names[] = {"new_session", "split",  "invalidate",
                                        "invalidate",  "unbind", "unbind"};
    static const char *const fields[] = {
        "expected session (expect)", "reason",     "session id",
        "expected session (expect)", "session id", "expected session (expect)"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const bindlog_event ev[2] = {{BINDLOG_EVENT_BIND, "other", "O", NULL, 0, NULL, NULL, 0},
                                     bad[i]};
        char want[160];
        size_t at = 99;
        assert_int_equal(bindlog_apply_batch(f->s, ev, 2, NULL, &at), BINDLOG_EINVAL);
        assert_int_equal(at, 1);
        snprintf(want, sizeof want,
                 "apply_batch event 1 (%s k): this event type takes no %s (leave it NULL)",
                 names[i], fields[i]);
        expect_msg(want);
    }
    /* an origin, the one field the state machine itself refuses */
    static const unsigned char org[] = "o";
    const bindlog_event with_origin[2] = {
        {BINDLOG_EVENT_INVALIDATE, "k", NULL, NULL, 0, NULL, org, 1},
        {BINDLOG_EVENT_UNBIND, "k", NULL, NULL, 0, NULL, org, 1},
    };
    assert_int_equal(bindlog_apply_batch(f->s, &with_origin[0], 1, NULL, NULL), BINDLOG_EINVAL);
    expect_msg("apply_batch event 0 (invalidate k): invalidate and unbind take no origin");
    assert_int_equal(bindlog_apply_batch(f->s, &with_origin[1], 1, NULL, NULL), BINDLOG_EINVAL);
    expect_msg("apply_batch event 0 (unbind k): invalidate and unbind take no origin");
    /* a bind's expected session is an id, held to an id's rules */
    assert_int_equal(bindlog_bind(f->s, "k", "B", "A\x7f", NULL, NULL, 0, &r), BINDLOG_EINVAL);
    expect_msg("bind k: expected session id is too long or holds a control byte");

    /* the first event of each batch was not written either */
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(f->s, &st), 0);
    assert_int_equal(st.head_lsn, 1);
    assert_int_equal(st.bindings, 1);
}

/* Open names what it found: the missing directory, the stranger in it,
 * the file that is not LMDB, the format that is too new. */
static void errors__open_names_what_it_found(void **state)
{
    fx *f = *state;
    bindlog *h = NULL;
    bindlog_options ro = BINDLOG_OPTIONS_INIT;
    char path[4096];
    ro.read_only = 1;

    snprintf(path, sizeof path, "%s/missing", f->dir);
    assert_int_equal(bindlog_open(&h, path, &ro), BINDLOG_ENOTFOUND);
    assert_non_null(strstr(bindlog_last_error(), "/missing: no such directory, and a "
                                                 "read-only open never creates one"));

    snprintf(path, sizeof path, "%s/foreign", f->dir);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(bindlog_open(&h, path, &ro), BINDLOG_ENOTFOUND);
    assert_non_null(strstr(bindlog_last_error(), "no store here (no data.mdb)"));
    snprintf(path, sizeof path, "%s/foreign/notes.txt", f->dir);
    FILE *fp = fopen(path, "w");
    fputs("mine\n", fp);
    fclose(fp);
    snprintf(path, sizeof path, "%s/foreign", f->dir);
    assert_int_equal(bindlog_open(&h, path, NULL), BINDLOG_ENOTSTORE);
    assert_non_null(strstr(bindlog_last_error(), "has no data.mdb but holds notes.txt"));

    snprintf(path, sizeof path, "%s/notlmdb", f->dir);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/notlmdb/data.mdb", f->dir);
    fp = fopen(path, "w");
    for (int i = 0; i < 4096; i++)
        fputs("hello ", fp);
    fclose(fp);
    snprintf(path, sizeof path, "%s/notlmdb", f->dir);
    assert_int_equal(bindlog_open(&h, path, &ro), BINDLOG_ENOTSTORE);
    assert_non_null(strstr(bindlog_last_error(), "data.mdb is not an LMDB file"));

    /* a store stamped with a newer format, written behind the library's back */
    bindlog_close(f->s);
    f->s = NULL;
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta;
    unsigned char fmt[4] = {99, 0, 0, 0};
    MDB_val k = {6, "format"}, v = {4, fmt};
    assert_int_equal(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 16);
    assert_int_equal(mdb_env_open(env, f->dir, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "meta", 0, &meta), 0);
    assert_int_equal(mdb_put(txn, meta, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    assert_int_equal(bindlog_open(&h, f->dir, &ro), BINDLOG_EVERSION);
    assert_non_null(strstr(bindlog_last_error(), "the store is format 99; this library (" 
                                                 BINDLOG_VERSION_STRING ") reads format 7"));
}

/* Maintenance names its target: replay's directory, import's byte
 * offset and what was wrong there, export's range, vacuum's holder. */
static void errors__maintenance_names_its_target(void **state)
{
    fx *f = *state;
    bindlog_result r;
    char path[4096];
    uint64_t off = 0;
    int fds[2];

    assert_int_equal(bindlog_bind(f->s, "k", "S", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    snprintf(path, sizeof path, "%s/rp", f->dir);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/rp/x", f->dir);
    fclose(fopen(path, "w"));
    snprintf(path, sizeof path, "%s/rp", f->dir);
    assert_int_equal(bindlog_replay(f->s, path, UINT64_MAX, INT64_MAX, NULL, NULL, NULL, NULL),
                     BINDLOG_EEXIST);
    assert_non_null(strstr(bindlog_last_error(), "/rp: the directory is not empty: replay "
                                                 "needs a new or empty one"));

    /* ten bytes of garbage: refused at a byte offset, saying why */
    assert_int_equal(pipe(fds), 0);
    assert_int_equal(write(fds[1], "not-a-strm", 10), 10);
    close(fds[1]);
    int rc = bindlog_import(f->s, fds[0], NULL, &off, NULL, NULL);
    close(fds[0]);
    assert_true(rc < 0);
    char want[64];
    snprintf(want, sizeof want, "import: stream refused at byte %llu: ",
             (unsigned long long)off);
    if (strncmp(bindlog_last_error(), want, strlen(want)) != 0)
        fail_msg("last error \"%s\", expected it to start \"%s\"", bindlog_last_error(), want);

    assert_int_equal(pipe(fds), 0);
    assert_int_equal(bindlog_export(f->s, 9, fds[1], NULL, NULL, NULL), BINDLOG_ENOTFOUND);
    close(fds[0]);
    close(fds[1]);
    assert_non_null(strstr(bindlog_last_error(), "export from LSN 9 to fd "));
    assert_non_null(strstr(bindlog_last_error(), ": no records from LSN 9 on"));

    /* this test's own writable handle holds the store: vacuum says who */
    assert_int_equal(bindlog_vacuum(f->dir, NULL, NULL), BINDLOG_EBUSY);
    assert_non_null(strstr(bindlog_last_error(), "a writer has the store open"));

    /* upgrade names the directory; a current store is no error */
    bindlog_upgrade_report ur;
    assert_int_equal(bindlog_upgrade(f->dir, NULL, &ur, NULL, NULL), 0);
    assert_string_equal(bindlog_last_error(), "");
    snprintf(path, sizeof path, "%s/nope", f->dir);
    assert_int_equal(bindlog_upgrade(path, NULL, &ur, NULL, NULL), BINDLOG_ENOTFOUND);
    char uwant[4200];
    snprintf(uwant, sizeof uwant, "upgrade %s: no such directory", path);
    assert_string_equal(bindlog_last_error(), uwant);
}

/* Many threads refuse at once, so that most refusals are decided by
 * another thread leading the group: each caller still gets its own. */
typedef struct worker {
    bindlog *s;
    int id;
    int bad;
} worker;

static void *worker_main(void *p)
{
    worker *w = p;
    char key[32], want[96];
    bindlog_result r;
    snprintf(key, sizeof key, "t%d", w->id);
    snprintf(want, sizeof want, "split %s: key is not bound", key);
    for (int i = 0; i < 300; i++) {
        int rc = bindlog_split(w->s, key, "P", "C", 1, NULL, 0, &r);
        if (rc != BINDLOG_ENOTFOUND || strcmp(bindlog_last_error(), want) != 0)
            w->bad++;
    }
    return NULL;
}

static void errors__per_thread_through_group_commit(void **state)
{
    fx *f = *state;
    pthread_t t[8];
    worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (worker){f->s, i, 0};
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].bad, 0);
    }
    /* this thread made no failing call since its last success */
    expect_msg("");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(errors__state_refusals_name_key_and_reason, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(errors__success_and_outcomes_clear, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(errors__arguments_are_named, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(errors__reads_and_maintenance_name_their_arguments,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(errors__fields_a_type_does_not_take, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(errors__batch_names_the_failing_event, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(errors__per_thread_through_group_commit, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(errors__open_names_what_it_found, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(errors__maintenance_names_its_target, fx_setup,
                                        fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
