/*
 * test_crash_kill.c -- kill -9 a gateway in the middle of its work, then
 * check that nothing it was told is lost and nothing is half done.
 *
 * Each round forks a child that opens one store in FULL durability and runs
 * a gateway workload on 4 threads (binds, /new, splits with the run's
 * generation, /stop, idle unbinds and small batches, on 12 shared keys, so
 * the threads race and group commit batches them).  After a call returns
 * APPLIED the thread writes an acknowledgement (type, key, session, LSN,
 * generation) to a pipe -- only then, so every ack names an event the
 * library had promised to keep.  The parent SIGKILLs the child after a
 * random 5..80 ms, counted from the fork in odd rounds (sometimes during
 * bindlog_open, even while the store is being created) and from the first
 * acknowledgement in even rounds, reopens the store and checks:
 *
 *  1. the log is dense: LSNs 1..head, each record stored under its own LSN,
 *     record times never decrease, and head_lsn == number of records;
 *  2. every acknowledged event is in the log at its LSN with identical
 *     content (type, key, generation; the session for all but UNBIND, whose
 *     ack carries the binding after it, "", and whose record names the
 *     session it ended);
 *  3. nothing is half applied: for each ack the key's binding has a
 *     generation >= the acked one and an lsn >= the acked LSN, and when its
 *     lsn is the acked LSN it holds exactly the acked session and
 *     generation; the session an ack bound exists;
 *  4. history only moves forward: the log up to the previous round's head
 *     is byte for byte what it was (a hash of every record), and no key's
 *     generation went down;
 *  5. the state is what its log says: a mirror store (durability NONE)
 *     replays the new records through the public API -- each record's event
 *     re-applied with bindlog_bind/new_session/split/invalidate/unbind at the
 *     record's own time, which must return APPLIED with the same LSN and
 *     generation -- and the mirror's digest must equal the store's.  The
 *     mirror grows by one round's records per round, so the check stays
 *     linear over thousands of rounds.  Independently of that,
 *     bindlog_check() must find 0 problems (checksums, density, its own
 *     replay digest == state digest, indexes, counters).
 *
 * The default run does 200 kills (ctest, about a minute; 40 under a
 * sanitizer).  BINDLOG_KILL_ROUNDS=N or the argument --long (2000 rounds)
 * runs more; BINDLOG_KILL_SEED=S repeats a
 * run's random choices (the seed is printed first).  One line per round.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "bindlog.h"
#include "testutil.h"

#define THREADS 4
#define NKEYS 12
#ifdef TU_SANITIZED
#define DEFAULT_ROUNDS 40 /* ASan: ~0.75 s a round, TSan: ~2.5 s */
#else
#define DEFAULT_ROUNDS 200
#endif
#define LONG_ROUNDS 2000
#define MIN_DELAY_MS 5
#define MAX_DELAY_MS 80
#define FIRST_ACK_WAIT_MS 10000 /* even rounds: the most to wait for a first ack */

/* ---- the acknowledgement the child writes --------------------------------- */

/* Small enough (< PIPE_BUF) that each write() is atomic: threads never
 * interleave, and a kill never leaves half an ack in the pipe. */
typedef struct ack {
    int32_t type;  /* BINDLOG_EVENT_*, or -1: the child hit an error (code in lsn) */
    int32_t thread;
    uint64_t lsn, generation;
    char key[64];
    char sid[BINDLOG_ID_MAX + 1];
} ack;

static unsigned g_rounds = DEFAULT_ROUNDS;
static uint64_t g_seed;

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void key_name(char *out, size_t cap, unsigned i)
{
    snprintf(out, cap, "agent:main:telegram:dm:%u", 1000 + i);
}

/* ---- the child: a gateway ------------------------------------------------- */

typedef struct worker {
    bindlog *s;
    int fd;
    unsigned round, id;
    uint64_t rng;
    unsigned fresh;
} worker;

static void send_ack(worker *w, int type, const char *key, const bindlog_result *r)
{
    ack a;
    memset(&a, 0, sizeof(a));
    a.type = type;
    a.thread = (int32_t)w->id;
    a.lsn = r->lsn;
    a.generation = r->generation;
    snprintf(a.key, sizeof(a.key), "%s", key);
    snprintf(a.sid, sizeof(a.sid), "%s", r->session_id);
    if (write(w->fd, &a, sizeof(a)) != (ssize_t)sizeof(a))
        _exit(4);
}

/* An unexpected error: tell the parent and stop. */
static void child_fail(worker *w, const char *what, int rc)
{
    ack a;
    memset(&a, 0, sizeof(a));
    a.type = -1;
    a.lsn = (uint64_t)(int64_t)rc;
    snprintf(a.key, sizeof(a.key), "%s", what);
    if (write(w->fd, &a, sizeof(a)) < 0)
        _exit(5);
    _exit(3);
}

/* Refusals a racing gateway meets in normal work. */
static void check_rc(worker *w, const char *what, int rc)
{
    if (rc >= 0 || rc == BINDLOG_ENOTFOUND || rc == BINDLOG_ECONFLICT || rc == BINDLOG_EEXIST)
        return;
    child_fail(w, what, rc);
}

static void fresh_id(worker *w, char *out, size_t cap)
{
    snprintf(out, cap, "r%u-t%u-%u", w->round, w->id, w->fresh++);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    char key[64], sid[64], sid2[64];
    unsigned char origin[24];
    bindlog_result r, rb[3];
    bindlog_binding b;
    int rc;

    for (;;) {
        key_name(key, sizeof(key), (unsigned)(rnd(&w->rng) % NKEYS));
        unsigned op = (unsigned)(rnd(&w->rng) % 100);
        size_t olen = (size_t)(rnd(&w->rng) % sizeof(origin));
        memset(origin, (int)(w->fresh & 0xff), olen);
        if (op < 30) {
            /* a run splits its session: the (sid, generation) it started with */
            rc = bindlog_get(w->s, key, &b);
            check_rc(w, "get", rc);
            if (rc != 0)
                continue;
            fresh_id(w, sid, sizeof(sid));
            rc = bindlog_split(w->s, key, b.session_id, sid,
                               op < 25 ? b.generation : BINDLOG_ANY_GENERATION,
                               op % 2 ? origin : NULL, op % 2 ? olen : 0, &r);
            check_rc(w, "split", rc);
            if (rc == BINDLOG_APPLIED)
                send_ack(w, BINDLOG_EVENT_SPLIT, key, &r);
        } else if (op < 50) {
            fresh_id(w, sid, sizeof(sid));
            rc = bindlog_new_session(w->s, key, sid, NULL, origin, olen, &r);
            check_rc(w, "new_session", rc);
            if (rc == BINDLOG_APPLIED)
                send_ack(w, BINDLOG_EVENT_NEW_SESSION, key, &r);
        } else if (op < 65) {
            /* first contact or /resume of an older session of this thread */
            if (op < 58 || w->fresh < 2)
                fresh_id(w, sid, sizeof(sid));
            else
                snprintf(sid, sizeof(sid), "r%u-t%u-%u", w->round, w->id,
                         (unsigned)(rnd(&w->rng) % w->fresh));
            rc = bindlog_bind(w->s, key, sid, op % 3 == 0 ? "" : NULL, NULL, origin, olen, &r);
            check_rc(w, "bind", rc);
            if (rc == BINDLOG_APPLIED)
                send_ack(w, BINDLOG_EVENT_BIND, key, &r);
        } else if (op < 75) {
            rc = bindlog_invalidate(w->s, key, "stop", &r);
            check_rc(w, "invalidate", rc);
            if (rc == BINDLOG_APPLIED)
                send_ack(w, BINDLOG_EVENT_INVALIDATE, key, &r);
        } else if (op < 85) {
            rc = bindlog_unbind(w->s, key, NULL, &r);
            check_rc(w, "unbind", rc);
            if (rc == BINDLOG_APPLIED)
                send_ack(w, BINDLOG_EVENT_UNBIND, key, &r);
        } else {
            /* /new then an immediate split, atomically */
            fresh_id(w, sid, sizeof(sid));
            fresh_id(w, sid2, sizeof(sid2));
            bindlog_event ev[2] = {
                {BINDLOG_EVENT_NEW_SESSION, key, sid, NULL, 0, "new", origin, olen},
                {BINDLOG_EVENT_SPLIT, key, sid2, sid, BINDLOG_ANY_GENERATION, NULL, NULL, 0},
            };
            rc = bindlog_apply_batch(w->s, ev, 2, rb, NULL);
            check_rc(w, "batch", rc);
            for (int i = 0; rc == 0 && i < 2; i++)
                if (rb[i].outcome == BINDLOG_APPLIED)
                    send_ack(w, ev[i].type, key, &rb[i]);
        }
    }
    return NULL;
}

static void child_main(const char *dir, int fd, unsigned round)
{
    worker w[THREADS];
    pthread_t t[THREADS];
    bindlog *s;
    bindlog_options o = BINDLOG_OPTIONS_INIT; /* FULL durability */

    memset(w, 0, sizeof(w));
    w[0].fd = fd;
    int rc = bindlog_open(&s, dir, &o);
    if (rc != 0)
        child_fail(&w[0], "open", rc);
    for (unsigned i = 0; i < THREADS; i++) {
        w[i].s = s;
        w[i].fd = fd;
        w[i].round = round;
        w[i].id = i;
        w[i].rng = (g_seed ^ ((uint64_t)round << 20) ^ i) * 0x9e3779b97f4a7c15u | 1;
        if (pthread_create(&t[i], NULL, worker_main, &w[i]) != 0)
            _exit(6);
    }
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    _exit(0); /* not reached: the workers run until killed */
}

/* ---- the parent ----------------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct acks {
    ack *a;
    size_t n, cap;
    unsigned char part[sizeof(ack)]; /* an ack split across two reads */
    size_t part_len;
} acks;

/* Read what is in the pipe; returns 0 at EOF, 1 otherwise. */
static int read_acks(int fd, acks *as)
{
    unsigned char buf[64 * sizeof(ack)];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0)
        return errno == EINTR || errno == EAGAIN ? 1 : 0;
    if (n == 0)
        return 0;
    for (ssize_t i = 0; i < n; i++) {
        as->part[as->part_len++] = buf[i];
        if (as->part_len == sizeof(ack)) {
            if (as->n == as->cap) {
                as->cap = as->cap ? 2 * as->cap : 256;
                as->a = realloc(as->a, as->cap * sizeof(ack));
                assert_non_null(as->a);
            }
            memcpy(&as->a[as->n++], as->part, sizeof(ack));
            as->part_len = 0;
        }
    }
    return 1;
}

/* One log record as the parent remembers it for this round's checks. */
typedef struct rec_info {
    int type;
    uint64_t generation;
    char key[BINDLOG_KEY_MAX + 1];
    char sid[BINDLOG_ID_MAX + 1];
} rec_info;

typedef struct world {
    char *tmp;
    char dir[1024], mirror_dir[1024];
    uint64_t head;          /* head after the previous round */
    uint64_t *hash;         /* hash[lsn]: XXH3-64 of record lsn, 1..head */
    size_t hash_cap;
    uint64_t gen[NKEYS];    /* generations after the previous round */
    int64_t replay_time;    /* the mirror's clock */
    uint64_t total_acks, total_records;
    int have_store;         /* a round got as far as creating the store */
} world;

static int64_t mirror_clock(void *ctx) { return ((world *)ctx)->replay_time; }

static uint64_t record_hash(const bindlog_record *r)
{
    XXH3_state_t *st = XXH3_createState();
    assert_non_null(st);
    XXH3_64bits_reset(st);
    int64_t nums[5] = {(int64_t)r->lsn, r->type, r->time_ms, (int64_t)r->generation,
                       r->origin_present};
    XXH3_64bits_update(st, nums, sizeof(nums));
    XXH3_64bits_update(st, r->key, r->key_len + 1);
    XXH3_64bits_update(st, r->session_id, strlen(r->session_id) + 1);
    XXH3_64bits_update(st, r->other_id, strlen(r->other_id) + 1);
    XXH3_64bits_update(st, r->reason, strlen(r->reason) + 1);
    if (r->origin_len)
        XXH3_64bits_update(st, r->origin, r->origin_len);
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

/* Re-apply a record's event to the mirror through the public API. */
static void replay_record(world *wd, bindlog *m, const bindlog_record *r)
{
    bindlog_result res;
    const void *origin = r->origin_present ? (r->origin ? r->origin : "") : NULL;
    int rc;

    wd->replay_time = r->time_ms;
    switch (r->type) {
    case BINDLOG_EVENT_BIND:
        rc = bindlog_bind(m, r->key, r->session_id, r->other_id, r->reason, origin, r->origin_len,
                          &res);
        break;
    case BINDLOG_EVENT_NEW_SESSION:
        rc = bindlog_new_session(m, r->key, r->session_id, r->reason, origin, r->origin_len,
                                 &res);
        break;
    case BINDLOG_EVENT_SPLIT:
        rc = bindlog_split(m, r->key, r->other_id, r->session_id, r->generation, origin,
                           r->origin_len, &res);
        break;
    case BINDLOG_EVENT_INVALIDATE:
        rc = bindlog_invalidate(m, r->key, r->reason, &res);
        break;
    case BINDLOG_EVENT_UNBIND:
        rc = bindlog_unbind(m, r->key, r->reason, &res);
        break;
    default:
        fail_msg("record %llu has unknown type %d", (unsigned long long)r->lsn, r->type);
        return;
    }
    if (rc != BINDLOG_APPLIED || res.lsn != r->lsn || res.generation != r->generation)
        fail_msg("replaying record %llu (%s of '%s'): %s lsn %llu gen %llu, log says gen %llu",
                 (unsigned long long)r->lsn, bindlog_event_name(r->type), r->key,
                 bindlog_code_name(rc), (unsigned long long)res.lsn,
                 (unsigned long long)res.generation, (unsigned long long)r->generation);
}

/*
 * The checks after a kill.  Returns the number of records new in this round.
 */
static uint64_t verify(world *wd, const acks *as, unsigned round)
{
    bindlog *s, *m;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_stats st;
    bindlog_iter *it;
    bindlog_record r;
    int rc;

    rc = bindlog_open(&s, wd->dir, &o);
    if (rc != 0)
        fail_msg("round %u: reopening after the kill: %s", round, bindlog_strerror(rc));
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    uint64_t head = st.head_lsn;

    /* 1 and 4: dense log, old records unchanged; remember the new ones */
    if (head < wd->head)
        fail_msg("round %u: head went back from %llu to %llu", round,
                 (unsigned long long)wd->head, (unsigned long long)head);
    if (st.log_records != head)
        fail_msg("round %u: %llu records for head %llu", round,
                 (unsigned long long)st.log_records, (unsigned long long)head);
    if (head + 1 > wd->hash_cap) {
        wd->hash_cap = 2 * (head + 1);
        wd->hash = realloc(wd->hash, wd->hash_cap * sizeof(uint64_t));
        assert_non_null(wd->hash);
    }
    rec_info *fresh = calloc(head - wd->head + 1, sizeof(rec_info));
    assert_non_null(fresh);

    o.durability = BINDLOG_DURABILITY_NONE;
    o.clock_ms = mirror_clock;
    o.clock_ctx = wd;
    rc = bindlog_open(&m, wd->mirror_dir, &o);
    assert_int_equal(rc, 0);

    assert_int_equal(bindlog_log_iter(s, 1, UINT64_MAX, &it), 0);
    uint64_t expect = 1;
    int64_t last_time = INT64_MIN;
    while ((rc = bindlog_iter_next_record(it, &r)) == 1) {
        if (r.lsn != expect)
            fail_msg("round %u: log has LSN %llu where %llu belongs", round,
                     (unsigned long long)r.lsn, (unsigned long long)expect);
        if (r.time_ms < last_time)
            fail_msg("round %u: record %llu goes back in time", round, (unsigned long long)r.lsn);
        last_time = r.time_ms;
        uint64_t h = record_hash(&r);
        if (r.lsn <= wd->head) {
            if (wd->hash[r.lsn] != h)
                fail_msg("round %u: record %llu changed since the previous round", round,
                         (unsigned long long)r.lsn);
        } else {
            wd->hash[r.lsn] = h;
            rec_info *ri = &fresh[r.lsn - wd->head];
            ri->type = r.type;
            ri->generation = r.generation;
            snprintf(ri->key, sizeof(ri->key), "%s", r.key);
            snprintf(ri->sid, sizeof(ri->sid), "%s", r.session_id);
            replay_record(wd, m, &r); /* 5, record by record */
        }
        expect++;
    }
    bindlog_iter_close(it);
    if (rc != 0)
        fail_msg("round %u: reading the log: %s", round, bindlog_strerror(rc));
    if (expect != head + 1)
        fail_msg("round %u: log ends at %llu, head is %llu", round,
                 (unsigned long long)(expect - 1), (unsigned long long)head);

    /* 2 and 3: every ack is in the log and in the state */
    for (size_t i = 0; i < as->n; i++) {
        const ack *a = &as->a[i];
        if (a->lsn <= wd->head || a->lsn > head)
            fail_msg("round %u: acknowledged %s of %s at LSN %llu is lost (log %llu..%llu)",
                     round, bindlog_event_name(a->type), a->key, (unsigned long long)a->lsn,
                     (unsigned long long)wd->head + 1, (unsigned long long)head);
        const rec_info *ri = &fresh[a->lsn - wd->head];
        int sid_ok = a->type == BINDLOG_EVENT_UNBIND ? a->sid[0] == '\0' && ri->sid[0] != '\0'
                                                     : strcmp(ri->sid, a->sid) == 0;
        if (ri->type != a->type || strcmp(ri->key, a->key) != 0 ||
            ri->generation != a->generation || !sid_ok)
            fail_msg("round %u: LSN %llu holds %s '%s' -> '%s' gen %llu, acknowledged %s '%s' -> "
                     "'%s' gen %llu",
                     round, (unsigned long long)a->lsn, bindlog_event_name(ri->type), ri->key,
                     ri->sid, (unsigned long long)ri->generation, bindlog_event_name(a->type),
                     a->key, a->sid, (unsigned long long)a->generation);
        bindlog_binding b;
        rc = bindlog_get(s, a->key, &b);
        if (rc != 0 && rc != BINDLOG_ENOTFOUND)
            fail_msg("round %u: get %s: %s", round, a->key, bindlog_strerror(rc));
        if (b.generation < a->generation || b.lsn < a->lsn ||
            (b.lsn == a->lsn && (b.generation != a->generation || strcmp(b.session_id, a->sid))))
            fail_msg("round %u: %s is at '%s' gen %llu lsn %llu, behind its ack (lsn %llu gen "
                     "%llu '%s')",
                     round, a->key, b.session_id, (unsigned long long)b.generation,
                     (unsigned long long)b.lsn, (unsigned long long)a->lsn,
                     (unsigned long long)a->generation, a->sid);
        if (a->sid[0] != '\0') {
            bindlog_session ss;
            rc = bindlog_session_get(s, a->sid, &ss, NULL, 0);
            if (rc != 0 || ss.created_lsn > a->lsn)
                fail_msg("round %u: session %s of LSN %llu: %s", round, a->sid,
                         (unsigned long long)a->lsn, bindlog_strerror(rc));
        }
    }

    /* 4: generations never go down */
    for (unsigned k = 0; k < NKEYS; k++) {
        char key[64];
        bindlog_binding b;
        key_name(key, sizeof(key), k);
        rc = bindlog_get(s, key, &b);
        if (rc != 0 && rc != BINDLOG_ENOTFOUND)
            fail_msg("round %u: get %s: %s", round, key, bindlog_strerror(rc));
        if (b.generation < wd->gen[k])
            fail_msg("round %u: %s went back from generation %llu to %llu", round, key,
                     (unsigned long long)wd->gen[k], (unsigned long long)b.generation);
        wd->gen[k] = b.generation;
    }

    /* 5: the state is the replay of its log */
    unsigned char d1[BINDLOG_DIGEST_SIZE], d2[BINDLOG_DIGEST_SIZE];
    uint64_t h1, h2;
    assert_int_equal(bindlog_digest(s, d1, &h1), 0);
    assert_int_equal(bindlog_digest(m, d2, &h2), 0);
    if (h1 != head || h2 != head || memcmp(d1, d2, sizeof(d1)) != 0) {
        char x1[33], x2[33];
        bindlog_digest_hex(d1, x1);
        bindlog_digest_hex(d2, x2);
        fail_msg("round %u: digest %s (head %llu), replay of its log %s (head %llu)", round, x1,
                 (unsigned long long)h1, x2, (unsigned long long)h2);
    }
    bindlog_check_report rep;
    rc = bindlog_check(s, &rep, NULL, NULL);
    if (rc != 0 || rep.problems != 0)
        fail_msg("round %u: bindlog_check: %s, %llu problems: %s", round, bindlog_strerror(rc),
                 (unsigned long long)rep.problems, rep.message);
    if (rep.head_lsn != head || rep.records != head)
        fail_msg("round %u: bindlog_check saw head %llu and %llu records, expected %llu", round,
                 (unsigned long long)rep.head_lsn, (unsigned long long)rep.records,
                 (unsigned long long)head);

    bindlog_close(m);
    bindlog_close(s);
    free(fresh);
    uint64_t added = head - wd->head;
    wd->head = head;
    return added;
}

/* One round: fork the gateway, kill it, check. */
static void run_round(world *wd, unsigned round, uint64_t *rng)
{
    int fds[2];
    acks as = {0};

    assert_int_equal(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        child_main(wd->dir, fds[1], round);
    }
    close(fds[1]);

    /* Odd rounds count the delay from the fork, so some kills land in
     * bindlog_open; even rounds count it from the first acknowledgement, so
     * half the kills hit a running workload however long the open and the
     * first write take (the first write of a process checks the whole
     * data.mdb, which grows with the store). */
    int delay = MIN_DELAY_MS + (int)(rnd(rng) % (MAX_DELAY_MS - MIN_DELAY_MS + 1));
    int from_ack = round % 2 == 0;
    int64_t deadline = now_ms() + (from_ack ? FIRST_ACK_WAIT_MS : delay);
    int alive = 1;
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            break;
        struct pollfd p = {fds[0], POLLIN, 0};
        if (poll(&p, 1, (int)left) > 0 && !(alive = read_acks(fds[0], &as)))
            break; /* EOF: the child died by itself */
        if (from_ack && as.n > 0) {
            from_ack = 0;
            deadline = now_ms() + delay;
        }
    }
    kill(pid, SIGKILL);
    while (alive && read_acks(fds[0], &as))
        ;
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    for (size_t i = 0; i < as.n; i++)
        if (as.a[i].type < 0)
            fail_msg("round %u: the gateway failed in %s: %s", round, as.a[i].key,
                     bindlog_strerror((int)(int64_t)as.a[i].lsn));
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
        fail_msg("round %u: the gateway ended by itself (status 0x%x)", round, status);

    uint64_t added = verify(wd, &as, round);
    wd->total_acks += as.n;
    wd->total_records += added;
    printf("round %4u: kill at %2d ms after the %s, %3zu acked, %3llu new records, head %llu: "
           "ok\n",
           round, delay, round % 2 == 0 ? "first ack" : "fork", as.n, (unsigned long long)added,
           (unsigned long long)wd->head);
    free(as.a);
}

static void crash_kill__acknowledged_events_survive_sigkill(void **state)
{
    (void)state;
    world wd;
    memset(&wd, 0, sizeof(wd));
    wd.tmp = tu_mkdtemp("crash-kill");
    snprintf(wd.dir, sizeof(wd.dir), "%s/store", wd.tmp);
    snprintf(wd.mirror_dir, sizeof(wd.mirror_dir), "%s/mirror", wd.tmp);
    uint64_t rng = g_seed | 1;
    int64_t t0 = now_ms();

    printf("kill -9 harness: %u rounds, seed %llu, store %s\n", g_rounds,
           (unsigned long long)g_seed, wd.dir);
    for (unsigned round = 1; round <= g_rounds; round++)
        run_round(&wd, round, &rng);
    printf("%u kills, %llu acknowledged events, %llu records, all present and consistent "
           "(%.1f s)\n",
           g_rounds, (unsigned long long)wd.total_acks, (unsigned long long)wd.total_records,
           (double)(now_ms() - t0) / 1000.0);
    assert_true(wd.total_acks > 0); /* the workload did make progress */

    tu_rmtree(wd.tmp);
    free(wd.tmp);
    free(wd.hash);
}

int main(int argc, char **argv)
{
    const char *env = getenv("BINDLOG_KILL_ROUNDS");
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--long") == 0)
            g_rounds = LONG_ROUNDS;
    if (env != NULL && env[0] != '\0')
        g_rounds = (unsigned)strtoul(env, NULL, 10);
    env = getenv("BINDLOG_KILL_SEED");
    g_seed = env != NULL && env[0] != '\0' ? strtoull(env, NULL, 10)
                                           : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    setvbuf(stdout, NULL, _IOLBF, 0);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crash_kill__acknowledged_events_survive_sigkill),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
