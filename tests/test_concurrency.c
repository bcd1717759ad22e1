/*
 * test_concurrency.c -- group commit, racing splits, reads during growth,
 * several writer processes.
 *
 * These tests assert correctness only (every acknowledged event is in the
 * log exactly once, LSNs are dense, a compare-and-swap has one winner);
 * how well events group is printed, never asserted, because timing on a
 * shared machine proves nothing.  The suite also runs under ThreadSanitizer
 * (make tsan).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindlog.h"
#include "testutil.h"

typedef struct fx {
    char *dir;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    f->dir = tu_mkdtemp("conc");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static bindlog *open_store(const char *dir, int durability, size_t map_size)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = durability;
    o.map_size = map_size;
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    return s;
}

/* Every LSN 1..head appears exactly once, in order. */
static void assert_dense_log(bindlog *s, uint64_t head)
{
    bindlog_iter *it;
    bindlog_record rec;
    uint64_t want = 1;
    int rc;
    assert_int_equal(bindlog_log_iter(s, 0, UINT64_MAX, &it), 0);
    while ((rc = bindlog_iter_next_record(it, &rec)) == 1)
        assert_int_equal(rec.lsn, want++);
    assert_int_equal(rc, 0);
    assert_int_equal(want - 1, head);
    bindlog_iter_close(it);
}

/* ---- many threads, one store: group commit --------------------------- */

#define WRITERS 16
#define PER_WRITER 60

typedef struct writer_arg {
    bindlog *s;
    int id;
    uint64_t lsns[PER_WRITER * 2];
    int n;
    int errors;
} writer_arg;

static void *writer(void *p)
{
    writer_arg *a = p;
    char key[64], sid[64], child[64];
    bindlog_result r;
    for (int i = 0; i < PER_WRITER; i++) {
        snprintf(key, sizeof key, "agent:main:telegram:dm:%d:%d", a->id, i);
        snprintf(sid, sizeof sid, "s-%d-%d", a->id, i);
        snprintf(child, sizeof child, "c-%d-%d", a->id, i);
        if (bindlog_bind(a->s, key, sid, "", NULL, "{}", 2, &r) != BINDLOG_APPLIED)
            a->errors++;
        else
            a->lsns[a->n++] = r.lsn;
        if (bindlog_split(a->s, key, sid, child, r.generation, NULL, 0, &r) != BINDLOG_APPLIED)
            a->errors++;
        else
            a->lsns[a->n++] = r.lsn;
    }
    return NULL;
}

static void concurrency__threads_share_commits(void **state)
{
    fx *f = *state;
    bindlog *s = open_store(f->dir, BINDLOG_DURABILITY_FULL, 0);
    pthread_t t[WRITERS];
    writer_arg a[WRITERS];
    bindlog_stats st;

    for (int i = 0; i < WRITERS; i++) {
        memset(&a[i], 0, sizeof(a[i]));
        a[i].s = s;
        a[i].id = i;
        assert_int_equal(pthread_create(&t[i], NULL, writer, &a[i]), 0);
    }
    for (int i = 0; i < WRITERS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);

    /* each acknowledged LSN belongs to exactly one caller */
    uint64_t total = WRITERS * PER_WRITER * 2;
    unsigned char *seen = calloc(total + 1, 1);
    for (int i = 0; i < WRITERS; i++) {
        assert_int_equal(a[i].errors, 0);
        for (int j = 0; j < a[i].n; j++) {
            assert_true(a[i].lsns[j] >= 1 && a[i].lsns[j] <= total);
            assert_int_equal(seen[a[i].lsns[j]], 0);
            seen[a[i].lsns[j]] = 1;
        }
    }
    free(seen);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, total);
    assert_int_equal(st.applied[BINDLOG_EVENT_SPLIT], total / 2);
    assert_dense_log(s, total);
    print_message("    %llu events in %llu commits (%.1f events per sync)\n",
                  (unsigned long long)st.grouped_events, (unsigned long long)st.commits,
                  st.commits ? (double)st.grouped_events / (double)st.commits : 0.0);
    bindlog_close(s);
}

/* ---- racing splits: the compare-and-swap has one winner ---------------- */

#define RACERS 8

typedef struct race {
    bindlog *s;
    pthread_barrier_t *bar;
    int id, round;
    uint64_t gen;
    int outcome;
} race;

static void *racer(void *p)
{
    race *r = p;
    char child[64];
    snprintf(child, sizeof child, "child-%d-%d", r->round, r->id);
    pthread_barrier_wait(r->bar);
    /* all start from the same (parent, generation), as runs of one turn do */
    char parent[64];
    snprintf(parent, sizeof parent, "parent-%d", r->round);
    r->outcome = bindlog_split(r->s, "chat", parent, child, r->gen, NULL, 0, NULL);
    return NULL;
}

static void concurrency__split_race_has_one_winner(void **state)
{
    fx *f = *state;
    bindlog *s = open_store(f->dir, BINDLOG_DURABILITY_NONE, 0);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, RACERS);

    for (int round = 0; round < 40; round++) {
        char parent[64];
        bindlog_result r;
        snprintf(parent, sizeof parent, "parent-%d", round);
        /* a fresh parent at a known generation */
        assert_true(bindlog_new_session(s, "chat", parent, NULL, NULL, 0, &r) ==
                    BINDLOG_APPLIED);
        pthread_t t[RACERS];
        race rc[RACERS];
        for (int i = 0; i < RACERS; i++) {
            rc[i] = (race){s, &bar, i, round, r.generation, -100};
            pthread_create(&t[i], NULL, racer, &rc[i]);
        }
        int applied = 0, moved = 0, winner = -1;
        for (int i = 0; i < RACERS; i++) {
            pthread_join(t[i], NULL);
            if (rc[i].outcome == BINDLOG_APPLIED) {
                applied++;
                winner = i;
            } else if (rc[i].outcome == BINDLOG_MOVED) {
                moved++;
            }
        }
        assert_int_equal(applied, 1);
        assert_int_equal(moved, RACERS - 1);
        /* the key follows the winner; the losers left no session */
        bindlog_binding b;
        char want[64];
        assert_int_equal(bindlog_get(s, "chat", &b), 0);
        snprintf(want, sizeof want, "child-%d-%d", round, winner);
        assert_string_equal(b.session_id, want);
        for (int i = 0; i < RACERS; i++) {
            bindlog_session ss;
            snprintf(want, sizeof want, "child-%d-%d", round, i);
            assert_int_equal(bindlog_session_get(s, want, &ss, NULL, 0),
                             i == winner ? 0 : BINDLOG_ENOTFOUND);
        }
    }
    pthread_barrier_destroy(&bar);
    bindlog_close(s);
}

/* ---- readers while the map grows under them ----------------------------- */

/* Stop the reader threads t[0..n) and wait for them.  Called before a
 * test's first verdict: a failed assertion leaves the test's frame, which
 * holds what the readers read (`stop`, their arguments). */
static void stop_readers(atomic_int *stop, pthread_t *t, int n)
{
    atomic_store(stop, 1);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

typedef struct reader_arg {
    bindlog *s;
    atomic_int *stop;
    long reads, errors;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *a = p;
    uint64_t last_head = 0;
    while (!atomic_load(a->stop)) {
        bindlog_binding b;
        bindlog_stats st;
        int rc = bindlog_get(a->s, "k-0", &b);
        if (rc != 0 && rc != BINDLOG_ENOTFOUND)
            a->errors++;
        if (bindlog_stats_get(a->s, &st) != 0 || st.head_lsn < last_head)
            a->errors++;
        last_head = st.head_lsn;
        /* a short iterator walk across remaps */
        bindlog_iter *it;
        bindlog_record rec;
        if (bindlog_log_iter(a->s, 1, 50, &it) == 0) {
            uint64_t want = 1;
            while ((rc = bindlog_iter_next_record(it, &rec)) == 1)
                if (rec.lsn != want++)
                    a->errors++;
            if (rc < 0)
                a->errors++;
            bindlog_iter_close(it);
        } else {
            a->errors++;
        }
        a->reads++;
    }
    return NULL;
}

static void concurrency__reads_survive_map_growth(void **state)
{
    fx *f = *state;
    /* a small log, so that checkpoints (which grow data.mdb and so the
     * map) run while the readers read: with the default log, the 6,000
     * events' frames (their sessions referring to their records, format
     * 5) may all stay in the log, and the map never grows */
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.map_size = 64 << 10;
    o.log_size = 256 << 10;
    assert_int_equal(bindlog_open(&s, f->dir, &o), 0);
    atomic_int stop = 0;
    pthread_t t[2];
    reader_arg ra[2] = {{s, &stop, 0, 0}, {s, &stop, 0, 0}};
    bindlog_stats st0, st;

    assert_int_equal(bindlog_stats_get(s, &st0), 0);
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, reader, &ra[i]);
    char key[32], sid[32], origin[200];
    memset(origin, 'o', sizeof origin);
    int rc = BINDLOG_APPLIED, at = 0;
    char why[300] = "";
    for (; at < 6000 && rc == BINDLOG_APPLIED; at++) {
        snprintf(key, sizeof key, "k-%d", at % 500);
        snprintf(sid, sizeof sid, "s-%d", at);
        rc = bindlog_new_session(s, key, sid, NULL, origin, sizeof origin, NULL);
        if (rc != BINDLOG_APPLIED)
            snprintf(why, sizeof why, "%s", bindlog_last_error());
    }
    stop_readers(&stop, t, 2); /* before any verdict: they read this frame */
    if (rc != BINDLOG_APPLIED)
        fail_msg("new_session %d: %s (%s)", at - 1, bindlog_code_name(rc), why);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ra[i].errors, 0);
        assert_true(ra[i].reads > 0);
    }
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_true(st.map_size > st0.map_size); /* it did grow */
    assert_dense_log(s, 6000);
    bindlog_close(s);
}

/* ---- reads never go back across checkpoints ------------------------------- */

/* LMDB labels a read transaction with the last commit's id T, then copies
 * the roots of meta page T & 1; when a checkpoint and its settling commit
 * land in between, the transaction holds T + 2's roots under T's id.  A
 * cache of roots by id then served one snapshot's tables to another: a
 * key's generation or the head went back (the machine fuzzer saw a head
 * of 0 after LSN 1, once in a few thousand runs).  Here a writer
 * checkpoints after every event, so that commits come in pairs, while
 * readers check that nothing they see ever goes back. */
#define MONO_READERS 6

typedef struct mono_arg {
    bindlog *s;
    atomic_int *stop;
    long reads, back, errors;
} mono_arg;

static void *mono_reader(void *p)
{
    mono_arg *a = p;
    uint64_t last_gen = 0, last_head = 0;
    while (!atomic_load(a->stop)) {
        bindlog_binding b;
        unsigned char dg[BINDLOG_DIGEST_SIZE];
        uint64_t head;
        int rc = bindlog_get(a->s, "k", &b);
        if (rc == 0) {
            a->back += b.generation < last_gen;
            last_gen = b.generation;
        } else if (rc != BINDLOG_ENOTFOUND) {
            a->errors++;
        }
        if (bindlog_digest(a->s, dg, &head) != 0)
            a->errors++;
        a->back += head < last_head;
        last_head = head;
        a->reads++;
    }
    return NULL;
}

static void concurrency__reads_never_go_back_across_checkpoints(void **state)
{
    fx *f = *state;
    bindlog *s = open_store(f->dir, BINDLOG_DURABILITY_NONE, 0);
    atomic_int stop = 0;
    pthread_t t[MONO_READERS];
    mono_arg ma[MONO_READERS];
    char sid[32];

    for (int i = 0; i < MONO_READERS; i++) {
        ma[i] = (mono_arg){s, &stop, 0, 0, 0};
        pthread_create(&t[i], NULL, mono_reader, &ma[i]);
    }
    int rc = BINDLOG_APPLIED, at = 0;
    char why[300] = "";
    for (; at < 4000 && rc == BINDLOG_APPLIED; at++) {
        snprintf(sid, sizeof sid, "s-%d", at);
        rc = bindlog_new_session(s, "k", sid, NULL, NULL, 0, NULL);
        if (rc == BINDLOG_APPLIED && (rc = bindlog_checkpoint(s, NULL)) == 0)
            rc = BINDLOG_APPLIED;
        if (rc != BINDLOG_APPLIED)
            snprintf(why, sizeof why, "%s", bindlog_last_error());
    }
    stop_readers(&stop, t, MONO_READERS); /* before any verdict: they read this frame */
    if (rc != BINDLOG_APPLIED)
        fail_msg("event %d: %s (%s)", at - 1, bindlog_code_name(rc), why);
    for (int i = 0; i < MONO_READERS; i++) {
        print_message("    reader %d: %ld reads, %ld went back\n", i, ma[i].reads, ma[i].back);
        assert_int_equal(ma[i].errors, 0);
        assert_int_equal(ma[i].back, 0);
        assert_true(ma[i].reads > 0);
    }
    bindlog_close(s);
}

/* ---- several processes write one store ------------------------------------ */

#define PROCS 3
#define PER_PROC 150

static void concurrency__processes_share_one_store(void **state)
{
    fx *f = *state;
    pid_t pid[PROCS + 1];

    /* create the store first so the children race only on writes */
    bindlog_close(open_store(f->dir, BINDLOG_DURABILITY_NORMAL, 0));
    for (int p = 0; p < PROCS; p++) {
        pid[p] = fork();
        assert_true(pid[p] >= 0);
        if (pid[p] == 0) {
            bindlog *s = NULL;
            bindlog_options o = BINDLOG_OPTIONS_INIT;
            o.durability = BINDLOG_DURABILITY_NORMAL;
            if (bindlog_open(&s, f->dir, &o) != 0)
                _exit(10);
            char key[32], sid[32];
            for (int i = 0; i < PER_PROC; i++) {
                snprintf(key, sizeof key, "p%d-k%d", p, i % 10);
                snprintf(sid, sizeof sid, "p%d-s%d", p, i);
                if (bindlog_new_session(s, key, sid, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
                    _exit(11);
            }
            bindlog_close(s);
            _exit(0);
        }
    }
    /* and a read-only process that watches the head only go up */
    pid[PROCS] = fork();
    if (pid[PROCS] == 0) {
        bindlog *s = NULL;
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        o.read_only = 1;
        if (bindlog_open(&s, f->dir, &o) != 0)
            _exit(20);
        uint64_t last = 0;
        for (int i = 0; i < 2000; i++) {
            bindlog_stats st;
            if (bindlog_stats_get(s, &st) != 0 || st.head_lsn < last)
                _exit(21);
            last = st.head_lsn;
            if (last == PROCS * PER_PROC)
                break;
        }
        bindlog_close(s);
        _exit(0);
    }
    for (int p = 0; p <= PROCS; p++) {
        int status;
        assert_int_equal(waitpid(pid[p], &status, 0), pid[p]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    bindlog *s = open_store(f->dir, BINDLOG_DURABILITY_NORMAL, 0);
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, PROCS * PER_PROC);
    assert_int_equal(st.sessions, PROCS * PER_PROC);
    assert_int_equal(st.live_bindings, PROCS * 10);
    assert_dense_log(s, PROCS * PER_PROC);
    bindlog_close(s);
}

/* ---- batches and singles interleaved -------------------------------------- */

typedef struct batch_arg {
    bindlog *s;
    int id;
    int bad;
} batch_arg;

static void *batcher(void *p)
{
    batch_arg *a = p;
    char keys[4][32], ids[4][32];
    for (int round = 0; round < 50; round++) {
        bindlog_event ev[4];
        bindlog_result res[4];
        size_t at = 99;
        for (int i = 0; i < 4; i++) {
            snprintf(keys[i], sizeof keys[i], "b%d-%d", a->id, i);
            snprintf(ids[i], sizeof ids[i], "b%d-r%d-%d", a->id, round, i);
            ev[i] = (bindlog_event){BINDLOG_EVENT_NEW_SESSION, keys[i], ids[i], NULL, 0, NULL,
                                    NULL, 0};
        }
        /* every other round the last event reuses an id: the batch must vanish */
        int fail = round % 2;
        if (fail)
            ev[3].session_id = ids[0];
        int rc = bindlog_apply_batch(a->s, ev, 4, res, &at);
        if (fail ? (rc != BINDLOG_EEXIST || at != 3) : rc != 0)
            a->bad++;
        for (int i = 0; i < 3; i++) {
            bindlog_session ss;
            int got = bindlog_session_get(a->s, ids[i], &ss, NULL, 0);
            if (got != (fail ? BINDLOG_ENOTFOUND : 0))
                a->bad++;
        }
    }
    return NULL;
}

static void concurrency__batches_are_atomic_among_singles(void **state)
{
    fx *f = *state;
    bindlog *s = open_store(f->dir, BINDLOG_DURABILITY_NONE, 0);
    pthread_t t[4];
    batch_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (batch_arg){s, i, 0};
        pthread_create(&t[i], NULL, batcher, &a[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].bad, 0);
    }
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 4 * 25 * 4);
    assert_dense_log(s, st.head_lsn);
    bindlog_close(s);
}

/* Writers whose events together would make a frame larger than half the
 * log: the leader takes only what fits a quarter of it (group.c's budget)
 * and leaves the rest for the next group, so every write goes in.  Before,
 * a group of them failed whole with ENOSPC ("the group's frame is ...
 * bytes, more than half of the ...-byte log"). */
typedef struct big_arg {
    bindlog *s;
    int id, bad;
} big_arg;

static char big_origin[40000]; /* filled before the writers start */

static void *big_writer(void *p)
{
    big_arg *a = p;
    for (int round = 0; round < 20; round++) {
        char key[64], sid[64];
        bindlog_result r;
        snprintf(key, sizeof key, "big:%d:%d", a->id, round);
        snprintf(sid, sizeof sid, "B%d-%d", a->id, round);
        if (bindlog_bind(a->s, key, sid, "", NULL, big_origin, sizeof big_origin, &r) !=
            BINDLOG_APPLIED)
            a->bad++;
    }
    return NULL;
}

static void concurrency__groups_are_cut_to_fit_the_log(void **state)
{
    fx *f = *state;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = BINDLOG_DURABILITY_FULL; /* writers gather during each flush */
    o.log_size = 1 << 20; /* half: 512 KiB, about 6 of these writes */
    assert_int_equal(bindlog_open(&s, f->dir, &o), 0);
    memset(big_origin, 'o', sizeof big_origin);
    pthread_t t[16];
    big_arg a[16];
    for (int i = 0; i < 16; i++) {
        a[i] = (big_arg){s, i, 0};
        pthread_create(&t[i], NULL, big_writer, &a[i]);
    }
    for (int i = 0; i < 16; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].bad, 0);
    }
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 16 * 20);
    assert_dense_log(s, st.head_lsn);
    bindlog_close(s);
}

/* Many more writers than CPUs, FULL, on one handle: single calls and
 * bindlog_apply_each calls (one request per event, so one thread waits
 * for many requests) mixed, with big origins in a small log so that the
 * leader's budget cuts groups inside a thread's requests.  Every thread
 * must hear exactly its own outcomes (the LSN and session id each result
 * names are checked against the log), none may be left asleep, and the
 * log must hold each acknowledged event once. */
#define CROWD 64
#define CROWD_ROUNDS 6
#define CROWD_EACH 5

typedef struct crowd_arg {
    bindlog *s;
    int id, bad;
    uint64_t lsns[CROWD_ROUNDS * (1 + CROWD_EACH)];
    char sids[CROWD_ROUNDS * (1 + CROWD_EACH)][32];
    int n;
} crowd_arg;

static char crowd_origin[6000]; /* filled before the writers start */

static void crowd_note(crowd_arg *a, const bindlog_result *r, const char *sid)
{
    if (r->outcome != BINDLOG_APPLIED || strcmp(r->session_id, sid) != 0) {
        a->bad++;
        return;
    }
    size_t len = strlen(sid);
    if (len >= sizeof a->sids[a->n]) {
        a->bad++;
        return;
    }
    a->lsns[a->n] = r->lsn;
    memcpy(a->sids[a->n], sid, len + 1);
    a->n++;
}

static void *crowd_writer(void *p)
{
    crowd_arg *a = p;
    for (int round = 0; round < CROWD_ROUNDS; round++) {
        char key[64], sid[32];
        bindlog_result r;
        snprintf(key, sizeof key, "crowd:%d:%d", a->id, round);
        snprintf(sid, sizeof sid, "S%d-%d", a->id, round);
        if (bindlog_bind(a->s, key, sid, "", NULL, crowd_origin,
                         (size_t)(a->id % 3) * 3000, &r) != BINDLOG_APPLIED)
            a->bad++;
        else
            crowd_note(a, &r, sid);

        bindlog_event ev[CROWD_EACH];
        bindlog_result out[CROWD_EACH];
        char keys[CROWD_EACH][64], sids[CROWD_EACH][32];
        int codes[CROWD_EACH];
        for (int i = 0; i < CROWD_EACH; i++) {
            snprintf(keys[i], sizeof keys[i], "crowd:%d:%d:%d", a->id, round, i);
            snprintf(sids[i], sizeof sids[i], "E%d-%d-%d", a->id, round, i);
            ev[i] = (bindlog_event){.type = BINDLOG_EVENT_BIND, .key = keys[i],
                                    .session_id = sids[i], .expect = "",
                                    .origin = crowd_origin, .origin_len = sizeof crowd_origin};
        }
        if (bindlog_apply_each(a->s, ev, CROWD_EACH, out, codes, NULL) != 0) {
            a->bad++;
            continue;
        }
        for (int i = 0; i < CROWD_EACH; i++) {
            if (codes[i] != BINDLOG_APPLIED)
                a->bad++;
            else
                crowd_note(a, &out[i], sids[i]);
        }
    }
    return NULL;
}

static void concurrency__a_crowd_hears_its_own_outcomes(void **state)
{
    fx *f = *state;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = BINDLOG_DURABILITY_FULL;
    o.log_size = 1 << 20; /* budget 256 KiB: about 40 of the apply_each events */
    assert_int_equal(bindlog_open(&s, f->dir, &o), 0);
    memset(crowd_origin, 'c', sizeof crowd_origin);
    pthread_t t[CROWD];
    crowd_arg *a = calloc(CROWD, sizeof(*a));
    assert_non_null(a);
    for (int i = 0; i < CROWD; i++) {
        a[i].s = s;
        a[i].id = i;
        assert_int_equal(pthread_create(&t[i], NULL, crowd_writer, &a[i]), 0);
    }
    for (int i = 0; i < CROWD; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);

    uint64_t total = (uint64_t)CROWD * CROWD_ROUNDS * (1 + CROWD_EACH);
    char (*owner)[32] = calloc(total + 1, 32);
    assert_non_null(owner);
    for (int i = 0; i < CROWD; i++) {
        assert_int_equal(a[i].bad, 0);
        assert_int_equal(a[i].n, CROWD_ROUNDS * (1 + CROWD_EACH));
        for (int j = 0; j < a[i].n; j++) {
            uint64_t lsn = a[i].lsns[j];
            assert_true(lsn >= 1 && lsn <= total);
            assert_int_equal(owner[lsn][0], '\0'); /* nobody else heard this LSN */
            memcpy(owner[lsn], a[i].sids[j], 32);
        }
    }
    /* the record at each LSN is the event its caller was told it is */
    bindlog_iter *it;
    bindlog_record rec;
    uint64_t want = 1;
    int rc;
    assert_int_equal(bindlog_log_iter(s, 0, UINT64_MAX, &it), 0);
    while ((rc = bindlog_iter_next_record(it, &rec)) == 1) {
        assert_int_equal(rec.lsn, want);
        assert_string_equal(rec.session_id, owner[want]);
        want++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(want - 1, total);
    bindlog_iter_close(it);
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, total);
    print_message("    %llu events in %llu commits (%.1f events per sync)\n",
                  (unsigned long long)st.grouped_events, (unsigned long long)st.commits,
                  st.commits ? (double)st.grouped_events / (double)st.commits : 0.0);
    free(owner);
    free(a);
    bindlog_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(concurrency__threads_share_commits, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrency__split_race_has_one_winner, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrency__reads_survive_map_growth, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrency__reads_never_go_back_across_checkpoints, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(concurrency__processes_share_one_store, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrency__batches_are_atomic_among_singles, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(concurrency__a_crowd_hears_its_own_outcomes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(concurrency__groups_are_cut_to_fit_the_log, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
