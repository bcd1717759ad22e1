/*
 * gateway_sim.c -- a chat gateway's workload against an embedded bindlog store.
 *
 * A gateway bridges chats (Telegram, Discord, Slack) to an LLM agent.  Each
 * chat has a session key ("agent:main:telegram:dm:<id>") routed to its
 * current session id.  This program plays a deterministic day in the life of
 * such a gateway, using only the public API in <bindlog.h>:
 *
 *   - first contact binds a fresh session (BIND with expect = "");
 *   - every turn a run reads the binding and remembers (session, generation);
 *   - runs compress their context and continue in a child session (SPLIT),
 *     and the gateway sometimes retries a split it already made (ALREADY);
 *   - users type /new (NEW_SESSION), /stop (INVALIDATE) and /resume (BIND back
 *     to an older session, guarded by expect = current); idle chats expire
 *     (UNBIND), and the sweeper sometimes fires twice (ALREADY);
 *   - and the races that bindlog exists for:
 *       late split   a run started, then /stop + /new; its split is STALE;
 *       twin runs    two runs of one generation both split; the second MOVED;
 *       ANY split    a run that skips the generation check splits after a
 *                    /resume moved the key; MOVED all the same.
 *
 * The program keeps its own model of every chat and predicts the outcome,
 * LSN, generation and binding of every call.  Any difference is a bug in the
 * library: it prints what differed and exits 1.  Rejected splits are checked
 * to leave no trace (no child session).  At the end it compares every binding
 * and the store's statistics with the model, then prints the outcome table,
 * the throughput, a few bindings, one session's lineage and the state digest.
 * Event times come from a simulated clock, so the same seed always gives the
 * same digest.
 *
 * Usage: gateway_sim [STORE_DIR] [--chats N] [--turns N]
 *                    [--durability full|normal|none] [--seed S]
 * STORE_DIR (default ./demo-store) must not hold a non-empty store: the
 * predicted LSNs start at 1.  Exit status: 0 success, 1 unexpected result or
 * store error, 2 usage error.
 */
#include <bindlog.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------ */
/* Deterministic PRNG (splitmix64): the same seed replays the same day.      */

typedef struct rng {
    uint64_t state;
} rng;

static uint64_t rng_next(rng *r)
{
    uint64_t z = (r->state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

/* Uniform-enough integer in [0, n); n > 0.  The modulo bias is irrelevant
 * for a simulation. */
static uint32_t rng_below(rng *r, uint32_t n)
{
    return (uint32_t)(rng_next(r) % n);
}

/* ------------------------------------------------------------------------ */
/* What the gateway does, as rows of the outcome table.                      */

enum act {
    ACT_FIRST_CONTACT, /* bind a fresh session, expect "" */
    ACT_SPLIT,         /* a run compresses: split to a child */
    ACT_SPLIT_RETRY,   /* the gateway retries a split that went in: ALREADY */
    ACT_NEW,           /* /new */
    ACT_NEW_RETRY,     /* a double-sent /new: ALREADY */
    ACT_STOP,          /* /stop */
    ACT_RESUME,        /* /resume to an older session, expect = current */
    ACT_EXPIRE,        /* idle expiry */
    ACT_EXPIRE_AGAIN,  /* the idle sweeper fires twice: ALREADY */
    ACT_LATE_SPLIT,    /* split from a run older than /stop + /new: STALE */
    ACT_TWIN_SPLIT,    /* second run of the same generation splits: MOVED */
    ACT_ANY_SPLIT,     /* ANY-generation split after /resume: MOVED */
    ACT_COUNT
};

static const struct {
    const char *label; /* table row */
    int type;          /* the library event behind it */
} ACTS[ACT_COUNT] = {
    [ACT_FIRST_CONTACT] = {"first contact", BINDLOG_EVENT_BIND},
    [ACT_SPLIT] = {"compression split", BINDLOG_EVENT_SPLIT},
    [ACT_SPLIT_RETRY] = {"retried split", BINDLOG_EVENT_SPLIT},
    [ACT_NEW] = {"/new", BINDLOG_EVENT_NEW_SESSION},
    [ACT_NEW_RETRY] = {"retried /new", BINDLOG_EVENT_NEW_SESSION},
    [ACT_STOP] = {"/stop", BINDLOG_EVENT_INVALIDATE},
    [ACT_RESUME] = {"/resume", BINDLOG_EVENT_BIND},
    [ACT_EXPIRE] = {"idle expiry", BINDLOG_EVENT_UNBIND},
    [ACT_EXPIRE_AGAIN] = {"expiry fired twice", BINDLOG_EVENT_UNBIND},
    [ACT_LATE_SPLIT] = {"late split after /new", BINDLOG_EVENT_SPLIT},
    [ACT_TWIN_SPLIT] = {"twin-run split", BINDLOG_EVENT_SPLIT},
    [ACT_ANY_SPLIT] = {"ANY split after /resume", BINDLOG_EVENT_SPLIT},
};

/* ------------------------------------------------------------------------ */
/* The gateway's own model of one chat.                                      */

#define HISTORY_MAX 6 /* older sessions offered by /resume */

typedef struct chat {
    char key[96];                                  /* session key */
    const char *peer;                              /* "telegram", "discord", "slack" */
    const char *abbr;                              /* session id prefix: "tg", "dc", "sl" */
    long long chat_id;                             /* the platform's chat id */
    int seen;                                      /* ever bound (the key exists) */
    int bound;                                     /* routes to `current` (else tombstone) */
    char current[BINDLOG_ID_MAX + 1];              /* expected binding */
    uint64_t generation;                           /* expected generation */
    unsigned next_sid;                             /* session id counter */
    unsigned msgs;                                 /* message counter (origins) */
    unsigned splits;                               /* applied splits, to pick a lineage */
    char history[HISTORY_MAX][BINDLOG_ID_MAX + 1]; /* ended sessions, oldest first */
    unsigned nhistory;
} chat;

/* A run: what a turn remembers when it starts. */
typedef struct run {
    char session_id[BINDLOG_ID_MAX + 1];
    uint64_t generation;
} run;

/* The whole simulation; no global mutable state. */
typedef struct sim {
    bindlog *store;
    rng rng;
    chat *chats;
    size_t nchats;
    uint64_t lsn;                                     /* expected head LSN */
    uint64_t sessions;                                /* sessions the store should hold */
    uint64_t reads;                                   /* bindlog_get calls */
    uint64_t counts[ACT_COUNT][BINDLOG_STAT_COLUMNS]; /* outcome table */
    uint64_t applied[BINDLOG_EVENT_COUNT];            /* APPLIED by event type */
    int64_t now_ms;                                   /* the simulated clock */
} sim;

/* 2026-01-01T00:00:00Z: where the simulated day starts. */
#define SIM_EPOCH_MS 1767225600000LL

/*
 * The store's clock (bindlog_options.clock_ms).  Event times come from the
 * simulated clock, not the wall clock, so the state -- and so its digest --
 * depends only on the seed and the arguments: two runs with the same seed
 * print the same digest.
 */
static int64_t sim_clock(void *ctx)
{
    return ((const sim *)ctx)->now_ms;
}

/* Report an unexpected result; always returns -1 so callers can propagate. */
static int fail(const char *fmt, ...)
{
    va_list ap;
    fputs("gateway_sim: UNEXPECTED: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return -1;
}

/* Give chat i a deterministic key: 70% Telegram DMs, 20% Discord channels,
 * 10% Slack channels, each with a distinct platform id. */
static void chat_init(chat *c, size_t i)
{
    memset(c, 0, sizeof *c);
    unsigned kind = (unsigned)(i % 10);
    if (kind < 7) {
        c->peer = "telegram";
        c->abbr = "tg";
        c->chat_id = 100000000LL + (long long)i * 7919;
        snprintf(c->key, sizeof c->key, "agent:main:telegram:dm:%lld", c->chat_id);
    } else if (kind < 9) {
        c->peer = "discord";
        c->abbr = "dc";
        c->chat_id = 900000000000LL + (long long)i * 104729;
        snprintf(c->key, sizeof c->key, "agent:main:discord:channel:%lld", c->chat_id);
    } else {
        c->peer = "slack";
        c->abbr = "sl";
        c->chat_id = 5000000LL + (long long)i * 31;
        snprintf(c->key, sizeof c->key, "agent:main:slack:channel:C%lld", c->chat_id);
    }
}

/* A fresh, globally unique session id for chat c: "<abbr>-<chat>-<n>". */
static void chat_new_sid(chat *c, char out[BINDLOG_ID_MAX + 1])
{
    snprintf(out, BINDLOG_ID_MAX + 1, "%s-%lld-%u", c->abbr, c->chat_id, ++c->next_sid);
}

/* The gateway's origin metadata for the message that caused an event. */
static size_t chat_origin(chat *c, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "{\"peer\":\"%s\",\"chat\":%lld,\"msg\":%u}", c->peer, c->chat_id,
                     ++c->msgs);
    return n < 0 ? 0 : (size_t)n;
}

/* Remember an ended session for /resume, dropping the oldest when full. */
static void chat_push_history(chat *c, const char *id)
{
    if (c->nhistory == HISTORY_MAX) {
        memmove(c->history[0], c->history[1], sizeof c->history[0] * (HISTORY_MAX - 1));
        c->nhistory--;
    }
    snprintf(c->history[c->nhistory++], BINDLOG_ID_MAX + 1, "%s", id);
}

/* ------------------------------------------------------------------------ */
/* Checking results against the model.                                       */

/*
 * Count the call in the outcome table and compare it with the model, which
 * the caller has already moved to the state expected *after* the call: the
 * outcome, the LSN (the next one for APPLIED, 0 otherwise), the key's
 * generation and its binding.
 */
static int check(sim *sm, enum act a, const chat *c, int rc, const bindlog_result *res, int want)
{
    int col = (rc >= 0 && rc < BINDLOG_OUTCOME_COUNT) ? rc : BINDLOG_STAT_ERROR;
    sm->counts[a][col]++;
    if (rc != want)
        return fail("%s on %s: got %s (%s), expected %s", ACTS[a].label, c->key,
                    bindlog_code_name(rc), bindlog_strerror(rc), bindlog_code_name(want));
    if (rc == BINDLOG_APPLIED) {
        sm->lsn++;
        sm->applied[ACTS[a].type]++;
    }
    uint64_t want_lsn = rc == BINDLOG_APPLIED ? sm->lsn : 0;
    const char *want_sid = c->bound ? c->current : "";
    if (res->lsn != want_lsn)
        return fail("%s on %s: lsn %" PRIu64 ", expected %" PRIu64, ACTS[a].label, c->key, res->lsn,
                    want_lsn);
    if (res->generation != c->generation)
        return fail("%s on %s: generation %" PRIu64 ", expected %" PRIu64, ACTS[a].label, c->key,
                    res->generation, c->generation);
    if (strcmp(res->session_id, want_sid) != 0)
        return fail("%s on %s: bound to \"%s\", expected \"%s\"", ACTS[a].label, c->key,
                    res->session_id, want_sid);
    return 0;
}

/* A rejected split must leave no trace: its child session must not exist. */
static int check_absent(sim *sm, enum act a, const char *id)
{
    bindlog_session s;
    int rc = bindlog_session_get(sm->store, id, &s, NULL, 0);
    if (rc != BINDLOG_ENOTFOUND)
        return fail("%s: rejected child %s exists afterwards (%s)", ACTS[a].label, id,
                    bindlog_code_name(rc));
    return 0;
}

/* A run starts: read the binding and generation it will work with. */
static int start_run(sim *sm, const chat *c, run *r)
{
    bindlog_binding b;
    int rc = bindlog_get(sm->store, c->key, &b);
    sm->reads++;
    int want = c->bound ? 0 : BINDLOG_ENOTFOUND;
    if (rc != want)
        return fail("get %s: %s, expected %s", c->key, bindlog_code_name(rc),
                    bindlog_code_name(want));
    if (b.generation != c->generation || strcmp(b.session_id, c->bound ? c->current : "") != 0)
        return fail("get %s: (%s, generation %" PRIu64 "), expected (%s, %" PRIu64 ")", c->key,
                    b.session_id, b.generation, c->bound ? c->current : "", c->generation);
    snprintf(r->session_id, sizeof r->session_id, "%s", b.session_id);
    r->generation = b.generation;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Gateway actions.  Each updates the model, calls the library, checks.      */

/* First contact (or a message after idle expiry): a fresh root session. */
static int act_first_contact(sim *sm, chat *c)
{
    char sid[BINDLOG_ID_MAX + 1], origin[128];
    bindlog_result res;
    chat_new_sid(c, sid);
    size_t olen = chat_origin(c, origin, sizeof origin);
    int rc = bindlog_bind(sm->store, c->key, sid, "", "first_contact", origin, olen, &res);
    c->seen = c->bound = 1;
    snprintf(c->current, sizeof c->current, "%s", sid);
    c->generation++;
    sm->sessions++;
    return check(sm, ACT_FIRST_CONTACT, c, rc, &res, BINDLOG_APPLIED);
}

/* The run compresses its context and continues in a child session.  When
 * `may_retry`, the gateway now and then retries the split (its reply was
 * lost); sometimes a /stop lands in between, and the retry's result
 * generation tells the run that it is no longer current. */
static int act_split(sim *sm, chat *c, const run *r, int may_retry)
{
    char child[BINDLOG_ID_MAX + 1], origin[128];
    bindlog_result res;
    chat_new_sid(c, child);
    size_t olen = chat_origin(c, origin, sizeof origin);
    int rc =
        bindlog_split(sm->store, c->key, r->session_id, child, r->generation, origin, olen, &res);
    snprintf(c->current, sizeof c->current, "%s", child);
    c->splits++;
    sm->sessions++;
    if (check(sm, ACT_SPLIT, c, rc, &res, BINDLOG_APPLIED) != 0)
        return -1;

    uint32_t roll = rng_below(&sm->rng, 100);
    if (!may_retry || roll >= 15)
        return 0;
    if (roll < 5) { /* a /stop arrives before the retry */
        rc = bindlog_invalidate(sm->store, c->key, "stop", &res);
        c->generation++;
        if (check(sm, ACT_STOP, c, rc, &res, BINDLOG_APPLIED) != 0)
            return -1;
    }
    rc = bindlog_split(sm->store, c->key, r->session_id, child, r->generation, origin, olen, &res);
    if (check(sm, ACT_SPLIT_RETRY, c, rc, &res, BINDLOG_ALREADY) != 0)
        return -1;
    if (roll < 5 && res.generation == r->generation)
        return fail("retried split on %s after /stop: generation did not move", c->key);
    return 0;
}

/* /new: a fresh session whose parent is the current one.  A double-sent
 * /new is recognised as ALREADY. */
static int act_new(sim *sm, chat *c)
{
    char sid[BINDLOG_ID_MAX + 1], origin[128];
    bindlog_result res;
    chat_new_sid(c, sid);
    size_t olen = chat_origin(c, origin, sizeof origin);
    int rc = bindlog_new_session(sm->store, c->key, sid, NULL, origin, olen, &res);
    chat_push_history(c, c->current);
    snprintf(c->current, sizeof c->current, "%s", sid);
    c->generation++;
    sm->sessions++;
    if (check(sm, ACT_NEW, c, rc, &res, BINDLOG_APPLIED) != 0)
        return -1;
    if (rng_below(&sm->rng, 100) < 10) {
        rc = bindlog_new_session(sm->store, c->key, sid, NULL, origin, olen, &res);
        return check(sm, ACT_NEW_RETRY, c, rc, &res, BINDLOG_ALREADY);
    }
    return 0;
}

/* /stop: the running turn is invalidated; the binding stays. */
static int act_stop(sim *sm, chat *c)
{
    bindlog_result res;
    int rc = bindlog_invalidate(sm->store, c->key, "stop", &res);
    c->generation++;
    return check(sm, ACT_STOP, c, rc, &res, BINDLOG_APPLIED);
}

/* /resume: bind back to an older session, only if nobody moved the key since
 * the user saw the list (expect = current).  Needs a non-empty history. */
static int act_resume(sim *sm, chat *c)
{
    bindlog_result res;
    char target[BINDLOG_ID_MAX + 1];
    unsigned pick = rng_below(&sm->rng, c->nhistory);
    snprintf(target, sizeof target, "%s", c->history[pick]);
    int rc = bindlog_bind(sm->store, c->key, target, c->current, "resume", NULL, 0, &res);
    /* The resumed session leaves the history; the one it replaces enters it. */
    memmove(c->history[pick], c->history[pick + 1],
            sizeof c->history[0] * (c->nhistory - pick - 1));
    c->nhistory--;
    chat_push_history(c, c->current);
    snprintf(c->current, sizeof c->current, "%s", target);
    c->generation++;
    return check(sm, ACT_RESUME, c, rc, &res, BINDLOG_APPLIED);
}

/* Idle expiry: the key becomes a tombstone; the next message is a first
 * contact again.  The sweeper sometimes fires twice. */
static int act_expire(sim *sm, chat *c)
{
    bindlog_result res;
    int rc = bindlog_unbind(sm->store, c->key, "idle", &res);
    chat_push_history(c, c->current);
    c->bound = 0;
    c->current[0] = '\0';
    c->generation++;
    if (check(sm, ACT_EXPIRE, c, rc, &res, BINDLOG_APPLIED) != 0)
        return -1;
    if (rng_below(&sm->rng, 100) < 20) {
        rc = bindlog_unbind(sm->store, c->key, "idle", &res);
        return check(sm, ACT_EXPIRE_AGAIN, c, rc, &res, BINDLOG_ALREADY);
    }
    return 0;
}

/* Race: a run starts, the user sends /stop then /new while it is still
 * compressing; the run's late split carries the old generation: STALE. */
static int race_late_split(sim *sm, chat *c, const run *r)
{
    char child[BINDLOG_ID_MAX + 1];
    bindlog_result res;
    if (act_stop(sm, c) != 0 || act_new(sm, c) != 0)
        return -1;
    chat_new_sid(c, child);
    int rc = bindlog_split(sm->store, c->key, r->session_id, child, r->generation, NULL, 0, &res);
    if (check(sm, ACT_LATE_SPLIT, c, rc, &res, BINDLOG_STALE) != 0)
        return -1;
    return check_absent(sm, ACT_LATE_SPLIT, child);
}

/* Race: two runs of the same generation both start on A.  The first splits
 * A->C; the second's split A->D fails the identity check: MOVED. */
static int race_twin_split(sim *sm, chat *c, const run *r)
{
    char child[BINDLOG_ID_MAX + 1];
    bindlog_result res;
    if (act_split(sm, c, r, 0) != 0) /* no retry: a /stop would make it STALE */
        return -1;
    chat_new_sid(c, child);
    int rc = bindlog_split(sm->store, c->key, r->session_id, child, r->generation, NULL, 0, &res);
    if (check(sm, ACT_TWIN_SPLIT, c, rc, &res, BINDLOG_MOVED) != 0)
        return -1;
    return check_absent(sm, ACT_TWIN_SPLIT, child);
}

/* Race: a run the gateway did not number (BINDLOG_ANY_GENERATION) started on
 * A; /resume moves the key to B; the run's split A->C is still MOVED. */
static int race_any_split(sim *sm, chat *c, const run *r)
{
    char child[BINDLOG_ID_MAX + 1];
    bindlog_result res;
    if (act_resume(sm, c) != 0)
        return -1;
    chat_new_sid(c, child);
    int rc = bindlog_split(sm->store, c->key, r->session_id, child, BINDLOG_ANY_GENERATION, NULL, 0,
                           &res);
    if (check(sm, ACT_ANY_SPLIT, c, rc, &res, BINDLOG_MOVED) != 0)
        return -1;
    return check_absent(sm, ACT_ANY_SPLIT, child);
}

/*
 * One turn: a message arrives on a chat (half of them on the 10% busiest
 * chats).  An unbound chat gets a first contact; a bound one starts a run and
 * then, with the per-mille odds below, something happens to it.
 */
static int turn(sim *sm)
{
    size_t hot = sm->nchats / 10 ? sm->nchats / 10 : 1;
    size_t i = rng_below(&sm->rng, 2) ? rng_below(&sm->rng, (uint32_t)hot)
                                      : rng_below(&sm->rng, (uint32_t)sm->nchats);
    chat *c = &sm->chats[i];
    run r;

    sm->now_ms += 1 + rng_below(&sm->rng, 4000); /* messages arrive every few seconds */

    if (start_run(sm, c, &r) != 0)
        return -1;
    if (!c->bound)
        return act_first_contact(sm, c);

    uint32_t roll = rng_below(&sm->rng, 1000);
    if (roll < 100)
        return act_split(sm, c, &r, 1);
    if (roll < 130)
        return act_new(sm, c);
    if (roll < 150)
        return act_stop(sm, c);
    if (roll < 170)
        return c->nhistory ? act_resume(sm, c) : 0;
    if (roll < 180)
        return act_expire(sm, c);
    if (roll < 190)
        return race_late_split(sm, c, &r);
    if (roll < 200)
        return race_twin_split(sm, c, &r);
    if (roll < 210)
        return c->nhistory ? race_any_split(sm, c, &r) : 0;
    return 0; /* an ordinary turn: the run answers, the binding stays */
}

/* ------------------------------------------------------------------------ */
/* Final verification and report.                                           */

/* Every key's binding and the store's statistics must match the model. */
static int verify_final(sim *sm, const bindlog_stats *st)
{
    uint64_t seen = 0, bound = 0;
    for (size_t i = 0; i < sm->nchats; i++) {
        run r;
        if (start_run(sm, &sm->chats[i], &r) != 0)
            return -1;
        seen += (uint64_t)sm->chats[i].seen;
        bound += (uint64_t)sm->chats[i].bound;
    }
    struct {
        const char *what;
        uint64_t got, want;
    } figures[] = {
        {"head LSN", st->head_lsn, sm->lsn},         {"bindings", st->bindings, seen},
        {"live bindings", st->live_bindings, bound}, {"sessions", st->sessions, sm->sessions},
        {"live sessions", st->live_sessions, bound},
    };
    for (size_t k = 0; k < sizeof figures / sizeof figures[0]; k++)
        if (figures[k].got != figures[k].want)
            return fail("stats: %s %" PRIu64 ", expected %" PRIu64, figures[k].what, figures[k].got,
                        figures[k].want);

    /* Per event type: APPLIED over the store's life (a fresh store) and this
     * process's calls by outcome. */
    for (int t = 1; t < BINDLOG_EVENT_COUNT; t++) {
        if (st->applied[t] != sm->applied[t])
            return fail("stats: applied %s %" PRIu64 ", expected %" PRIu64, bindlog_event_name(t),
                        st->applied[t], sm->applied[t]);
        for (int col = 0; col < BINDLOG_STAT_COLUMNS; col++) {
            uint64_t want = 0;
            for (int a = 0; a < ACT_COUNT; a++)
                if (ACTS[a].type == t)
                    want += sm->counts[a][col];
            if (st->events[t][col] != want)
                return fail("stats: %s calls with %s: %" PRIu64 ", expected %" PRIu64,
                            bindlog_event_name(t),
                            col == BINDLOG_STAT_ERROR ? "errors" : bindlog_code_name(col),
                            st->events[t][col], want);
        }
    }
    return 0;
}

static void print_table(const sim *sm, double secs, uint64_t turns)
{
    static const char *cols[BINDLOG_STAT_COLUMNS] = {"APPLIED", "ALREADY", "STALE", "MOVED",
                                                     "errors"};
    uint64_t total[BINDLOG_STAT_COLUMNS] = {0}, calls = 0;

    printf("%-24s %-12s", "gateway event", "call");
    for (int col = 0; col < BINDLOG_STAT_COLUMNS; col++)
        printf(" %8s", cols[col]);
    printf("\n");
    for (int a = 0; a < ACT_COUNT; a++) {
        printf("%-24s %-12s", ACTS[a].label, bindlog_event_name(ACTS[a].type));
        for (int col = 0; col < BINDLOG_STAT_COLUMNS; col++) {
            printf(" %8" PRIu64, sm->counts[a][col]);
            total[col] += sm->counts[a][col];
            calls += sm->counts[a][col];
        }
        printf("\n");
    }
    printf("%-24s %-12s", "total", "");
    for (int col = 0; col < BINDLOG_STAT_COLUMNS; col++)
        printf(" %8" PRIu64, total[col]);
    printf("\n\n");

    if (secs <= 0)
        secs = 1e-9;
    printf("%" PRIu64 " turns, %" PRIu64 " events and %" PRIu64 " reads in %.3f s: "
           "%.0f events/s, %.0f calls/s\n\n",
           turns, calls, sm->reads, secs, (double)calls / secs, (double)(calls + sm->reads) / secs);
}

static void print_bindings(const sim *sm, size_t n)
{
    printf("bindings (bindlog_get):\n");
    for (size_t i = 0; i < sm->nchats && n > 0; i++) {
        bindlog_binding b;
        int rc = bindlog_get(sm->store, sm->chats[i].key, &b);
        if (rc != 0 && (rc != BINDLOG_ENOTFOUND || b.generation == 0))
            continue; /* never seen (or unreadable: verify_final reported it) */
        printf("  %-40s -> %-24s generation %" PRIu64 ", lsn %" PRIu64 "\n", sm->chats[i].key,
               rc == 0 ? b.session_id : "(unbound)", b.generation, b.lsn);
        n--;
    }
    printf("\n");
}

/* One line of the lineage tree. */
static void print_session_line(const bindlog_session *s, const char *current, int depth)
{
    printf("  %*s%s", 2 * depth, "", s->session_id);
    if (s->ended_lsn == 0)
        printf("  live, created at lsn %" PRIu64, s->created_lsn);
    else
        printf("  lsn %" PRIu64 "..%" PRIu64 ", ended: %s", s->created_lsn, s->ended_lsn,
               s->end_reason);
    printf("%s\n", strcmp(s->session_id, current) == 0 ? "   <== current" : "");
}

/*
 * Print the subtree under session `s`.  The children are collected and their
 * iterator closed before recursing, so only one iterator (one read snapshot)
 * is open at a time.  `budget` bounds the number of lines.
 */
static int print_tree(sim *sm, const bindlog_session *s, const char *current, int depth,
                      unsigned *budget)
{
    if (*budget == 0)
        return 0;
    if (--*budget == 0) {
        printf("  %*s...\n", 2 * depth, "");
        return 0;
    }
    print_session_line(s, current, depth);

    bindlog_iter *it = NULL;
    bindlog_session *kids = NULL;
    size_t n = 0, cap = 0;
    int rc = bindlog_children_iter(sm->store, s->session_id, &it);
    while (rc == 0) {
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 8;
            bindlog_session *p = realloc(kids, ncap * sizeof *p);
            if (p == NULL) {
                rc = BINDLOG_ENOMEM;
                break;
            }
            kids = p;
            cap = ncap;
        }
        int more = bindlog_iter_next_session(it, &kids[n], NULL, 0);
        if (more <= 0) {
            rc = more;
            break;
        }
        n++;
    }
    bindlog_iter_close(it);
    for (size_t k = 0; rc == 0 && k < n; k++)
        rc = print_tree(sm, &kids[k], current, depth + 1, budget);
    free(kids);
    if (rc < 0)
        return fail("children of %s: %s", s->session_id, bindlog_strerror(rc));
    return 0;
}

/* The lineage of the current session of the chat that split the most: its
 * ancestors up to the root, then the whole tree under that root. */
static int print_lineage(sim *sm)
{
    const chat *best = NULL;
    for (size_t i = 0; i < sm->nchats; i++)
        if (sm->chats[i].bound && (best == NULL || sm->chats[i].splits > best->splits))
            best = &sm->chats[i];
    if (best == NULL)
        return 0;

    char origin[256];
    bindlog_session cur, root;
    int rc = bindlog_session_get(sm->store, best->current, &cur, origin, sizeof origin - 1);
    if (rc != 0)
        return fail("session %s: %s", best->current, bindlog_strerror(rc));
    origin[cur.origin_len < sizeof origin - 1 ? cur.origin_len : sizeof origin - 1] = '\0';
    printf("lineage of %s (key %s, origin %s):\n  ancestors: %s", cur.session_id, cur.key,
           cur.origin_len ? origin : "none", cur.session_id);

    root = cur;
    bindlog_iter *it = NULL;
    rc = bindlog_ancestors_iter(sm->store, cur.session_id, &it);
    while (rc == 0) {
        bindlog_session anc;
        int more = bindlog_iter_next_session(it, &anc, NULL, 0);
        if (more <= 0) {
            rc = more;
            break;
        }
        printf(" <- %s", anc.session_id);
        root = anc;
    }
    bindlog_iter_close(it);
    if (rc < 0)
        return fail("ancestors of %s: %s", cur.session_id, bindlog_strerror(rc));
    printf(" (root)\n  tree:\n");

    unsigned budget = 40;
    if (print_tree(sm, &root, cur.session_id, 1, &budget) != 0)
        return -1;
    printf("\n");
    return 0;
}

static void print_stats(const bindlog_stats *st)
{
    printf("store statistics (bindlog_stats_get):\n");
    printf("  head LSN %" PRIu64 ", log records %" PRIu64 ", base LSN %" PRIu64 "\n", st->head_lsn,
           st->log_records, st->base_lsn);
    printf("  bindings %" PRIu64 " (%" PRIu64 " live), sessions %" PRIu64 " (%" PRIu64 " live)\n",
           st->bindings, st->live_bindings, st->sessions, st->live_sessions);
    printf("  applied:");
    for (int t = 1; t < BINDLOG_EVENT_COUNT; t++)
        printf(" %s %" PRIu64, bindlog_event_name(t), st->applied[t]);
    printf("\n  commits %" PRIu64 " carrying %" PRIu64 " events\n", st->commits,
           st->grouped_events);
    /* data.mdb holds the state up to the last checkpoint; the events after
     * it are in the write-ahead log until the background checkpoint folds
     * them in (or close does) */
    printf("  data file %" PRIu64 " KiB (map %" PRIu64 " KiB used of %" PRIu64
           " KiB), checkpointed up to LSN %" PRIu64 "\n",
           st->file_size / 1024, st->map_used / 1024, st->map_size / 1024, st->checkpoint_lsn);
    printf("  log %" PRIu64 " KiB in use of %" PRIu64 " KiB (the events after the checkpoint), "
           "readers %u/%u\n",
           st->log_used / 1024, st->log_size / 1024, st->readers_used, st->readers_max);
}

/* ------------------------------------------------------------------------ */
/* Command line.                                                             */

typedef struct config {
    const char *dir;
    unsigned long chats, turns;
    int durability;
    uint64_t seed;
} config;

static void usage(FILE *f)
{
    fprintf(f, "usage: gateway_sim [STORE_DIR] [--chats N] [--turns N]\n"
               "                   [--durability full|normal|none] [--seed S]\n"
               "Simulates a chat gateway against a fresh bindlog store (default ./demo-store)\n"
               "and checks every outcome against its own model.\n");
}

/* Parse an unsigned decimal in [lo, hi]; 0 on success. */
static int parse_ulong(const char *s, unsigned long lo, unsigned long hi, unsigned long *out)
{
    char *end;
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || v < lo || v > hi)
        return -1;
    *out = (unsigned long)v;
    return 0;
}

static int parse_args(int argc, char **argv, config *cfg)
{
    cfg->dir = "./demo-store";
    cfg->chats = 1000;
    cfg->turns = 20000;
    cfg->durability = BINDLOG_DURABILITY_FULL;
    cfg->seed = 1;
    int have_dir = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned long n;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--chats") == 0 && parse_ulong(v, 1, 1000000, &n) == 0) {
            cfg->chats = n;
            i++;
        } else if (strcmp(a, "--turns") == 0 && parse_ulong(v, 0, 100000000, &n) == 0) {
            cfg->turns = n;
            i++;
        } else if (strcmp(a, "--seed") == 0 && parse_ulong(v, 0, ~0UL, &n) == 0) {
            cfg->seed = n;
            i++;
        } else if (strcmp(a, "--durability") == 0 && v != NULL) {
            if (strcmp(v, "full") == 0)
                cfg->durability = BINDLOG_DURABILITY_FULL;
            else if (strcmp(v, "normal") == 0)
                cfg->durability = BINDLOG_DURABILITY_NORMAL;
            else if (strcmp(v, "none") == 0)
                cfg->durability = BINDLOG_DURABILITY_NONE;
            else
                return -1;
            i++;
        } else if (a[0] != '-' && !have_dir) {
            cfg->dir = a;
            have_dir = 1;
        } else {
            return -1;
        }
    }
    return 0;
}

static double now_seconds(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    static const char *dnames[] = {"full", "normal", "none"};
    config cfg;
    if (parse_args(argc, argv, &cfg) != 0) {
        usage(stderr);
        return 2;
    }

    sim sm;
    memset(&sm, 0, sizeof sm);
    sm.rng.state = cfg.seed;
    sm.now_ms = SIM_EPOCH_MS;
    sm.nchats = cfg.chats;
    sm.chats = calloc(cfg.chats, sizeof *sm.chats);
    if (sm.chats == NULL) {
        fprintf(stderr, "gateway_sim: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < sm.nchats; i++)
        chat_init(&sm.chats[i], i);

    int status = 1;
    bindlog_options opts = BINDLOG_OPTIONS_INIT;
    opts.durability = cfg.durability;
    opts.clock_ms = sim_clock;
    opts.clock_ctx = &sm;
    int rc = bindlog_open(&sm.store, cfg.dir, &opts);
    if (rc != 0) {
        fprintf(stderr, "gateway_sim: cannot open %s: %s\n", cfg.dir, bindlog_strerror(rc));
        goto out;
    }

    bindlog_stats st;
    if ((rc = bindlog_stats_get(sm.store, &st)) != 0) {
        fprintf(stderr, "gateway_sim: stats: %s\n", bindlog_strerror(rc));
        goto out;
    }
    if (st.head_lsn != 0) {
        fprintf(stderr,
                "gateway_sim: %s already holds %" PRIu64 " events; the simulation "
                "predicts LSNs from 1 and needs a fresh store (remove the directory)\n",
                cfg.dir, st.head_lsn);
        goto out;
    }

    printf("bindlog %s gateway simulation: store %s, %lu chats, %lu turns, durability %s, "
           "seed %" PRIu64 "\n\n",
           bindlog_version(), cfg.dir, cfg.chats, cfg.turns, dnames[cfg.durability], cfg.seed);

    double t0 = now_seconds();
    for (unsigned long t = 0; t < cfg.turns; t++)
        if (turn(&sm) != 0)
            goto out;
    double secs = now_seconds() - t0;

    print_table(&sm, secs, cfg.turns);

    if ((rc = bindlog_stats_get(sm.store, &st)) != 0) {
        fprintf(stderr, "gateway_sim: stats: %s\n", bindlog_strerror(rc));
        goto out;
    }
    if (verify_final(&sm, &st) != 0)
        goto out;

    print_bindings(&sm, 5);
    if (print_lineage(&sm) != 0)
        goto out;
    print_stats(&st);

    unsigned char digest[BINDLOG_DIGEST_SIZE];
    char hex[2 * BINDLOG_DIGEST_SIZE + 1];
    uint64_t at;
    if ((rc = bindlog_digest(sm.store, digest, &at)) != 0) {
        fprintf(stderr, "gateway_sim: digest: %s\n", bindlog_strerror(rc));
        goto out;
    }
    bindlog_digest_hex(digest, hex);
    printf("  state digest %s at LSN %" PRIu64 "\n\n", hex, at);

    printf("OK: every outcome, LSN, generation and binding matched the model\n");
    status = 0;
out:
    bindlog_close(sm.store);
    free(sm.chats);
    return status;
}
