/*
 * test_digest.c -- the state digest of a store of many sessions, which
 * bindlog_digest() and export hash on two threads (src/lmdb/stats.c).
 *
 * The contract: the digest is the same bytes whatever the split, so it
 * equals the digest a replay computes from the log on its own path, with
 * the sessions' records in the log's tail, in LMDB, or folded into the
 * base image; and a damaged record is reported as the one-thread hash
 * reported it: the first damaged session in id order, named, whichever
 * thread met it.  The process-wide tally shows the helper thread ran.
 */
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
#include <sys/stat.h>
#include <unistd.h>

#include "bindlog.h"
#include "lmdb/store.h"
#include "testutil.h"
#include "workload.h"

/* Events enough for over 8,192 sessions (two runs of the hash and a part
 * run): the workload creates a session on about 70% of its events. */
#define NEVENTS 13000

typedef struct fx {
    char *tmp;
    char dir[1024];
    size_t n; /* sessions, in id order: */
    char (*ids)[BINDLOG_ID_MAX + 1];
    uint64_t *lsns; /* the records that created them */
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    f->tmp = tu_mkdtemp("digest");
    snprintf(f->dir, sizeof f->dir, "%s/s", f->tmp);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    unsetenv("BINDLOG_CHECKPOINT");
    tu_rmtree(f->tmp);
    free(f->tmp);
    free(f->ids);
    free(f->lsns);
    free(f);
    return 0;
}

static void replay_digest(fx *f, bindlog *s, const char *name,
                          unsigned char out[BINDLOG_DIGEST_SIZE])
{
    char dir[1100];
    uint64_t last = 0;
    snprintf(dir, sizeof dir, "%s/%s", f->tmp, name);
    assert_int_equal(bindlog_replay(s, dir, UINT64_MAX, INT64_MAX, out, &last, NULL, NULL), 0);
    tu_rmtree(dir);
}

/* The digest, with the helper thread seen to hash part of it. */
static void digest_on_two_threads(bindlog *s, unsigned char out[BINDLOG_DIGEST_SIZE])
{
    uint64_t before, after;
    bl_digest_split_tally(&before);
    assert_int_equal(bindlog_digest(s, out, NULL), 0);
    bl_digest_split_tally(&after);
    assert_true(after - before >= NEVENTS / 4);
}

/* The store, its events still in the log's tail (no checkpoint has run),
 * and its sessions in id order. */
static bindlog *make_store(fx *f)
{
    bindlog_iter *it;
    bindlog_session ss;
    wl_gen g;
    int rc;

    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    bindlog *s = wl_open_store(f->dir);
    wl_gen_init(&g, 7);
    for (int i = 0; i < NEVENTS; i++)
        assert_true(wl_gen_step(&g, s) > 0);
    f->ids = calloc(NEVENTS, sizeof(*f->ids));
    f->lsns = calloc(NEVENTS, sizeof(*f->lsns));
    assert_int_equal(bindlog_sessions_iter(s, &it), 0);
    while ((rc = bindlog_iter_next_session(it, &ss, NULL, 0)) == 1) {
        assert_true(f->n < NEVENTS);
        strcpy(f->ids[f->n], ss.session_id);
        f->lsns[f->n++] = ss.created_lsn;
    }
    assert_int_equal(rc, 0);
    bindlog_iter_close(it);
    assert_true(f->n > 2 * 4096);
    return s;
}

/* The first session in [from, to) of the id order that the closed store
 * keeps as a reference to its creating record (value version 3), whose
 * digest therefore reads that record. */
static size_t first_reference(fx *f, size_t from, size_t to)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *c;
    MDB_val k, v;
    size_t i = 0, found = SIZE_MAX;
    int rc;

    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 16), 0);
    assert_int_equal(mdb_env_open(env, f->dir, MDB_RDONLY | MDB_NOLOCK, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "sessions", 0, &dbi), 0);
    assert_int_equal(mdb_cursor_open(txn, dbi, &c), 0);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && found == SIZE_MAX;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT), i++) {
        assert_true(i < f->n);
        assert_int_equal(k.mv_size, strlen(f->ids[i]));
        assert_memory_equal(k.mv_data, f->ids[i], k.mv_size);
        if (i >= from && i < to && v.mv_size > 0 && ((const unsigned char *)v.mv_data)[0] == 3)
            found = i;
    }
    mdb_cursor_close(c);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    if (found == SIZE_MAX)
        fail_msg("no session kept as a reference among numbers %zu..%zu", from, to);
    return found;
}

/* The digest in the tail, in LMDB and in the base image: one digest, the
 * replay's. */
static void digest__two_threads_hash_what_replay_derives(void **state)
{
    fx *f = *state;
    unsigned char d[BINDLOG_DIGEST_SIZE], r[BINDLOG_DIGEST_SIZE];
    uint64_t lsn = 0, removed = 0;
    bindlog_stats st;
    bindlog *s = make_store(f);

    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_true(st.checkpoint_lsn < st.head_lsn); /* the records are in the tail */
    digest_on_two_threads(s, d);
    replay_digest(f, s, "r1", r);
    assert_memory_equal(d, r, sizeof d);

    assert_int_equal(bindlog_checkpoint(s, &lsn), 0);
    assert_int_equal(lsn, st.head_lsn);
    digest_on_two_threads(s, r);
    assert_memory_equal(d, r, sizeof d);

    /* folded: the sessions' records leave the log for the base image */
    assert_int_equal(bindlog_compact(s, UINT64_MAX, &removed, NULL, NULL), 0);
    assert_true(removed > NEVENTS / 2);
    digest_on_two_threads(s, r);
    assert_memory_equal(d, r, sizeof d);
    bindlog_close(s);
}

/* Flip the last byte of every copy of the log record at `lsn` in data.mdb
 * (LMDB leaves old copies in free pages): a leaf node of the log is
 * u16 size, u16 size high, u16 flags 0, u16 key size 8, the LSN
 * big-endian, then the record.  Returns the copies changed. */
static int damage_record(const char *dir, uint64_t lsn)
{
    char path[1100];
    struct stat st;
    unsigned char pat[12] = {0, 0, 8, 0};
    int fd, hits = 0;

    snprintf(path, sizeof path, "%s/data.mdb", dir);
    assert_true((fd = open(path, O_RDWR)) >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    unsigned char *b = malloc((size_t)st.st_size);
    assert_int_equal(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
    for (int i = 0; i < 8; i++)
        pat[4 + i] = (unsigned char)(lsn >> (56 - 8 * i));
    for (size_t at = 4; at + sizeof pat <= (size_t)st.st_size; at++) {
        if (memcmp(b + at, pat, sizeof pat) != 0)
            continue;
        size_t size = (size_t)b[at - 4] | (size_t)b[at - 3] << 8;
        if (b[at - 2] != 0 || b[at - 1] != 0 || size == 0 ||
            at + sizeof pat + size > (size_t)st.st_size)
            continue;
        size_t last = at + sizeof pat + size - 1;
        b[last] ^= 0x5a;
        assert_int_equal(pwrite(fd, b + last, 1, (off_t)last), 1);
        hits++;
    }
    free(b);
    close(fd);
    return hits;
}

static void expect_damage_named(fx *f, size_t which)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    unsigned char d[BINDLOG_DIGEST_SIZE];
    char want[300];
    bindlog *s;

    o.read_only = 1;
    assert_int_equal(bindlog_open(&s, f->dir, &o), 0);
    assert_int_equal(bindlog_digest(s, d, NULL), BINDLOG_ECORRUPT);
    snprintf(want, sizeof want, "session '%s' refers to the record at LSN %llu, which is damaged",
             f->ids[which], (unsigned long long)f->lsns[which]);
    if (strstr(bindlog_last_error(), want) == NULL)
        fail_msg("expected \"%s\" in \"%s\"", want, bindlog_last_error());
    bindlog_close(s);
}

/* make_store's store, checkpointed (its records in data.mdb) and closed. */
static void make_closed_store(fx *f)
{
    uint64_t lsn;
    bindlog *s = make_store(f);
    assert_int_equal(bindlog_checkpoint(s, &lsn), 0);
    bindlog_close(s);
}

/* A damaged record met by either thread: the first damaged session in id
 * order is the one named.  The hash goes in runs of 4,096 sessions, the
 * first half of each on the calling thread, the second on the helper. */
static void digest__damage_named_in_id_order_by_either_thread(void **state)
{
    fx *f = *state;

    make_closed_store(f);
    size_t helper = first_reference(f, 3000, 4096), caller = first_reference(f, 100, 2048);
    assert_true(damage_record(f->dir, f->lsns[helper]) >= 1);
    expect_damage_named(f, helper);
    /* with one in the calling thread's half of the same run damaged too,
     * that one, first in id order, is named */
    assert_true(damage_record(f->dir, f->lsns[caller]) >= 1);
    expect_damage_named(f, caller);
}

/* In the last run, shorter than the others, on the helper. */
static void digest__damage_in_the_last_run(void **state)
{
    fx *f = *state;

    make_closed_store(f);
    size_t last_run = f->n / 4096 * 4096, which;
    which = first_reference(f, last_run + (f->n - last_run) / 2 + 1, f->n);
    assert_true(damage_record(f->dir, f->lsns[which]) >= 1);
    expect_damage_named(f, which);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(digest__two_threads_hash_what_replay_derives, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(digest__damage_named_in_id_order_by_either_thread, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(digest__damage_in_the_last_run, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
