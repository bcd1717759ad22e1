/*
 * test_random.c -- a randomized run of the library against an independent
 * model of SPEC section 2.
 *
 * The model below is written from the specification alone (plain arrays and
 * a chained hash table; it does not use src/core/machine.c).  Every event goes to
 * both; every outcome, error code and result field must agree.  Every ~5,000
 * events, and at the end, the whole state is compared: every key through
 * bindlog_get and the bindings iterator, every session with all its fields
 * and its origin through bindlog_session_get and the sessions iterator, the
 * statistics, and the state digest, which the model computes itself.  The
 * store is closed and reopened every ~20,000 events.  At the end the whole
 * log is compared record by record.
 *
 * Seed: fixed, printed; override with BINDLOG_TEST_SEED (decimal or 0x...).
 * Length: BINDLOG_TEST_EVENTS (default 100000).
 * Backend: LMDB, or etcd with BINDLOG_TEST_BACKEND=etcd (testutil.h).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bindlog.h"
#include "core/record.h"
#include "testutil.h"

#define NKEYS          300
#define DEFAULT_EVENTS 100000
#define VERIFY_EVERY   5000
#define REOPEN_EVERY   20000
#define HASH_BUCKETS   (1u << 17)

/* ---- random numbers ---------------------------------------------------------- */

static uint64_t rng;

static uint64_t rnd(void) /* xorshift64* */
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}

static unsigned below(unsigned n)
{
    return (unsigned)(rnd() % n);
}

/* ---- the test clock -------------------------------------------------------------- */

static int64_t g_now;

static int64_t test_clock(void *ctx)
{
    (void)ctx;
    return g_now;
}

/* ---- fixed inputs: keys and origins -------------------------------------------- */

static char keys[NKEYS][BINDLOG_KEY_MAX + 1];

#define NORIGINS 9
static unsigned char *origins[NORIGINS];
static size_t origin_lens[NORIGINS];
static unsigned char *origin_too_big; /* BINDLOG_ORIGIN_MAX + 1 bytes */

static void make_inputs(void)
{
    for (int k = 0; k < NKEYS; k++) {
        switch (k % 10) {
        case 0: /* control bytes are fine in keys */
            snprintf(keys[k], sizeof keys[k], "\x01key\n%d", k);
            break;
        case 1: /* high bytes */
            snprintf(keys[k], sizeof keys[k], "agent:caf\xc3\xa9:%d", k);
            break;
        case 2: /* prefixes of one another */
            snprintf(keys[k], sizeof keys[k], "p%d", k);
            break;
        default:
            snprintf(keys[k], sizeof keys[k], "agent:main:telegram:dm:%d", k * 7919);
            break;
        }
    }
    /* the longest key */
    memset(keys[NKEYS - 1], 'L', BINDLOG_KEY_MAX);
    keys[NKEYS - 1][BINDLOG_KEY_MAX] = '\0';

    static const size_t lens[NORIGINS] = {0, 15, 5, 10, 50, 200, 1000, 60000, 65536};
    uint64_t x = 0xC0FFEE;
    for (int i = 0; i < NORIGINS; i++) {
        origin_lens[i] = lens[i];
        origins[i] = malloc(lens[i] + 1);
        assert_non_null(origins[i]);
        for (size_t j = 0; j < lens[i]; j++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            origins[i][j] = (unsigned char)(x >> 33);
        }
    }
    memcpy(origins[1], "{\"peer\":\"tg:1\"}", 15);
    memcpy(origins[2], "a\0b\0c", 5);
    origin_too_big = calloc(1, BINDLOG_ORIGIN_MAX + 1);
    assert_non_null(origin_too_big);
}

static void free_inputs(void)
{
    for (int i = 0; i < NORIGINS; i++)
        free(origins[i]);
    free(origin_too_big);
}

/* ---- the model ------------------------------------------------------------------- */

typedef struct mbind {
    int present; /* the key has a binding entry (bound or tombstone) */
    char sid[BINDLOG_ID_MAX + 1];
    uint64_t gen, lsn;
    int64_t upd;
} mbind;

typedef struct msess {
    char id[BINDLOG_ID_MAX + 1];
    int key; /* index into keys[] */
    char parent[BINDLOG_ID_MAX + 1];
    uint64_t clsn, elsn;
    int64_t cms, ems;
    char reason[BINDLOG_REASON_MAX + 1];
    int origin; /* index into origins[] */
    int next;   /* hash chain */
} msess;

typedef struct mrec {
    int type;
    int key;
    uint64_t gen;
    int64_t t;
    char sid[BINDLOG_ID_MAX + 1];
    char other[BINDLOG_ID_MAX + 1];
    char reason[BINDLOG_REASON_MAX + 1];
    int origin; /* -1: the event carried none */
} mrec;

typedef struct model {
    mbind b[NKEYS];
    msess *s;
    size_t ns, scap;
    int *buckets;
    mrec *r; /* r[i] is LSN i + 1 */
    size_t nr, rcap;
    int64_t now, last_t;
    uint64_t applied[BINDLOG_EVENT_COUNT];
    unsigned next_id;

    /* batch journal */
    int in_batch;
    mbind saved_b[NKEYS];
    size_t saved_ns, saved_nr;
    int64_t saved_t;
    uint64_t saved_applied[BINDLOG_EVENT_COUNT];
    struct jent {
        size_t idx;
        msess old;
    } * j;
    size_t nj, jcap;
} model;

typedef struct mres {
    uint64_t lsn, gen;
    char sid[BINDLOG_ID_MAX + 1];
} mres;

static uint32_t hash_id(const char *id)
{
    uint32_t h = 2166136261u;
    for (; *id; id++)
        h = (h ^ (unsigned char)*id) * 16777619u;
    return h & (HASH_BUCKETS - 1);
}

static int m_find(const model *m, const char *id)
{
    for (int i = m->buckets[hash_id(id)]; i >= 0; i = m->s[i].next)
        if (strcmp(m->s[i].id, id) == 0)
            return i;
    return -1;
}

static int m_create(model *m, const char *id, int key, const char *parent, uint64_t lsn, int64_t t,
                    int origin)
{
    if (m->ns == m->scap) {
        m->scap = m->scap ? 2 * m->scap : 4096;
        m->s = realloc(m->s, m->scap * sizeof *m->s);
        assert_non_null(m->s);
    }
    msess *s = &m->s[m->ns];
    memset(s, 0, sizeof *s);
    strcpy(s->id, id);
    s->key = key;
    strcpy(s->parent, parent);
    s->clsn = lsn;
    s->cms = t;
    s->origin = origin;
    uint32_t h = hash_id(id);
    s->next = m->buckets[h];
    m->buckets[h] = (int)m->ns;
    return (int)m->ns++;
}

/* A session about to change: journal its old value inside a batch. */
static msess *m_touch(model *m, int idx)
{
    if (m->in_batch && (size_t)idx < m->saved_ns) {
        if (m->nj == m->jcap) {
            m->jcap = m->jcap ? 2 * m->jcap : 64;
            m->j = realloc(m->j, m->jcap * sizeof *m->j);
            assert_non_null(m->j);
        }
        m->j[m->nj].idx = (size_t)idx;
        m->j[m->nj].old = m->s[idx];
        m->nj++;
    }
    return &m->s[idx];
}

static void m_batch_begin(model *m)
{
    m->in_batch = 1;
    memcpy(m->saved_b, m->b, sizeof m->b);
    m->saved_ns = m->ns;
    m->saved_nr = m->nr;
    m->saved_t = m->last_t;
    memcpy(m->saved_applied, m->applied, sizeof m->applied);
    m->nj = 0;
}

static void m_batch_commit(model *m)
{
    m->in_batch = 0;
    m->nj = 0;
}

static void m_batch_rollback(model *m)
{
    while (m->nj > 0) {
        m->nj--;
        m->s[m->j[m->nj].idx] = m->j[m->nj].old;
    }
    while (m->ns > m->saved_ns) {
        m->ns--;
        uint32_t h = hash_id(m->s[m->ns].id);
        assert_int_equal(m->buckets[h], (int)m->ns);
        m->buckets[h] = m->s[m->ns].next;
    }
    memcpy(m->b, m->saved_b, sizeof m->b);
    m->nr = m->saved_nr;
    m->last_t = m->saved_t;
    memcpy(m->applied, m->saved_applied, sizeof m->applied);
    m->in_batch = 0;
}

/* The next LSN and its time: the clock, or the previous record's time if the
 * clock went back. */
static uint64_t m_next(model *m, int64_t *t)
{
    if (m->now > m->last_t)
        m->last_t = m->now;
    *t = m->last_t;
    return m->nr + 1;
}

static mrec *m_log(model *m, int type, int key, uint64_t gen, int64_t t, const char *sid,
                   const char *other, const char *reason, int origin)
{
    if (m->nr == m->rcap) {
        m->rcap = m->rcap ? 2 * m->rcap : 4096;
        m->r = realloc(m->r, m->rcap * sizeof *m->r);
        assert_non_null(m->r);
    }
    mrec *r = &m->r[m->nr++];
    r->type = type;
    r->key = key;
    r->gen = gen;
    r->t = t;
    strcpy(r->sid, sid);
    strcpy(r->other, other);
    strcpy(r->reason, reason);
    r->origin = origin;
    m->applied[type]++;
    return r;
}

static void m_end(model *m, const char *id, uint64_t lsn, int64_t t, const char *reason)
{
    int i = m_find(m, id);
    assert_true(i >= 0);
    msess *s = m_touch(m, i);
    assert_int_equal(s->elsn, 0);
    s->elsn = lsn;
    s->ems = t;
    strcpy(s->reason, reason);
}

static void m_set_binding(model *m, int k, const char *sid, uint64_t gen, uint64_t lsn, int64_t t)
{
    mbind *b = &m->b[k];
    b->present = 1;
    strcpy(b->sid, sid);
    b->gen = gen;
    b->lsn = lsn;
    b->upd = t;
}

/* One generated event: the bindlog_event plus what the model needs. */
typedef struct gev {
    bindlog_event ev;
    int k;    /* key index, -1 if the key is invalid */
    int oidx; /* origin index, -1 for NULL */
    int bad;  /* the event's arguments are invalid: EINVAL */
    char sid[BINDLOG_ID_MAX + 8];
    char expect[BINDLOG_ID_MAX + 8];
    char reason[BINDLOG_REASON_MAX + 8];
    char badkey[BINDLOG_KEY_MAX + 8];
} gev;

/*
 * The event per SPEC section 2.  Returns the outcome or error; on an outcome
 * fills *res.  An error leaves the model untouched.
 */
static int m_apply(model *m, const gev *g, mres *res)
{
    if (g->bad)
        return BINDLOG_EINVAL;
    const bindlog_event *ev = &g->ev;
    const int k = g->k;
    mbind *b = &m->b[k];
    char cur[BINDLOG_ID_MAX + 1];
    strcpy(cur, b->present ? b->sid : "");
    res->lsn = 0;
    res->gen = b->gen;
    strcpy(res->sid, cur);
    uint64_t lsn = 0;
    int64_t t;
    const char *sid = ev->session_id;

    switch (ev->type) {
    case BINDLOG_EVENT_BIND: {
        if (strcmp(cur, sid) == 0)
            return BINDLOG_ALREADY;
        if (ev->expect != NULL && strcmp(ev->expect, cur) != 0)
            return BINDLOG_MOVED;
        int si = m_find(m, sid);
        if (si >= 0 && m->s[si].elsn == 0) {
            /* a live session is always its key's binding */
            int k2 = m->s[si].key;
            assert_true(k2 != k);
            assert_string_equal(m->b[k2].sid, sid);
            return BINDLOG_ECONFLICT;
        }
        const char *reason = ev->reason ? ev->reason : "switch";
        lsn = m_next(m, &t);
        if (si < 0) {
            m_create(m, sid, k, "", lsn, t, g->oidx < 0 ? 0 : g->oidx);
        } else {
            msess *s = m_touch(m, si);
            s->elsn = 0;
            s->ems = 0;
            s->reason[0] = '\0';
            s->key = k;
            if (g->oidx >= 0)
                s->origin = g->oidx;
        }
        if (cur[0])
            m_end(m, cur, lsn, t, reason);
        m_set_binding(m, k, sid, b->gen + 1, lsn, t);
        m_log(m, ev->type, k, b->gen, t, sid, cur, reason, g->oidx);
        break;
    }
    case BINDLOG_EVENT_NEW_SESSION: {
        if (strcmp(cur, sid) == 0)
            return BINDLOG_ALREADY;
        if (m_find(m, sid) >= 0)
            return BINDLOG_EEXIST;
        const char *reason = ev->reason ? ev->reason : "new_session";
        lsn = m_next(m, &t);
        m_create(m, sid, k, cur, lsn, t, g->oidx < 0 ? 0 : g->oidx);
        if (cur[0])
            m_end(m, cur, lsn, t, reason);
        m_set_binding(m, k, sid, b->gen + 1, lsn, t);
        m_log(m, ev->type, k, b->gen, t, sid, cur, reason, g->oidx);
        break;
    }
    case BINDLOG_EVENT_SPLIT: {
        const char *parent = ev->expect;
        if (cur[0] == '\0')
            return BINDLOG_ENOTFOUND;
        if (strcmp(cur, sid) == 0)
            return BINDLOG_ALREADY;
        if (ev->generation != BINDLOG_ANY_GENERATION && ev->generation != b->gen)
            return BINDLOG_STALE;
        if (strcmp(cur, parent) != 0)
            return BINDLOG_MOVED;
        if (m_find(m, sid) >= 0)
            return BINDLOG_EEXIST;
        int pi = m_find(m, parent);
        assert_true(pi >= 0);
        int origin = g->oidx >= 0 ? g->oidx : m->s[pi].origin;
        lsn = m_next(m, &t);
        m_create(m, sid, k, parent, lsn, t, origin);
        m_end(m, parent, lsn, t, "compression");
        m_set_binding(m, k, sid, b->gen, lsn, t);
        /* a split record always carries the child's effective origin */
        m_log(m, ev->type, k, b->gen, t, sid, parent, "compression", origin);
        break;
    }
    case BINDLOG_EVENT_INVALIDATE: {
        if (cur[0] == '\0')
            return BINDLOG_ENOTFOUND;
        const char *reason = ev->reason ? ev->reason : "invalidate";
        lsn = m_next(m, &t);
        m_set_binding(m, k, cur, b->gen + 1, lsn, t);
        m_log(m, ev->type, k, b->gen, t, cur, "", reason, -1);
        break;
    }
    case BINDLOG_EVENT_UNBIND: {
        if (!b->present)
            return BINDLOG_ENOTFOUND;
        if (cur[0] == '\0')
            return BINDLOG_ALREADY;
        const char *reason = ev->reason ? ev->reason : "unbind";
        lsn = m_next(m, &t);
        m_end(m, cur, lsn, t, reason);
        m_set_binding(m, k, "", b->gen + 1, lsn, t);
        m_log(m, ev->type, k, b->gen, t, cur, "", reason, -1);
        break;
    }
    default:
        fail_msg("model: bad type %d", ev->type);
    }
    res->lsn = lsn;
    res->gen = b->gen;
    strcpy(res->sid, b->sid);
    return BINDLOG_APPLIED;
}

/* ---- event generation --------------------------------------------------------------- */

static void fresh_id(model *m, char *out)
{
    unsigned c = m->next_id++;
    switch (c % 50) {
    case 0: /* the longest id */
        snprintf(out, BINDLOG_ID_MAX + 1, "L%0127u", c);
        break;
    case 1:
        snprintf(out, BINDLOG_ID_MAX + 1, "\xc3\xa9t\xc3\xa9-%u", c);
        break;
    case 2:
        snprintf(out, BINDLOG_ID_MAX + 1, "sess %u~", c);
        break;
    default:
        snprintf(out, BINDLOG_ID_MAX + 1, "s%u", c);
        break;
    }
}

static void existing_id(model *m, char *out)
{
    if (m->ns == 0)
        fresh_id(m, out);
    else
        strcpy(out, m->s[rnd() % m->ns].id);
}

/* The live binding of some key (ECONFLICT / EEXIST bait), or an existing id. */
static void live_id(model *m, char *out)
{
    for (int tries = 0; tries < 8; tries++) {
        const mbind *b = &m->b[below(NKEYS)];
        if (b->present && b->sid[0]) {
            strcpy(out, b->sid);
            return;
        }
    }
    existing_id(m, out);
}

static int pick_key(void)
{
    /* a hot set of 30 keys sees half the traffic */
    return below(2) ? (int)below(30) : (int)below(NKEYS);
}

static void pick_origin(gev *g)
{
    unsigned r = below(1000);
    if (r < 300) {
        g->oidx = -1;
        g->ev.origin = NULL;
        g->ev.origin_len = 0;
        return;
    }
    if (r < 400)
        g->oidx = 0;
    else if (r < 998)
        g->oidx = 1 + (int)below(6);
    else
        g->oidx = 7 + (int)below(2);
    g->ev.origin = g->oidx == 0 ? (const void *)"" : (const void *)origins[g->oidx];
    g->ev.origin_len = origin_lens[g->oidx];
}

static void pick_reason(gev *g)
{
    static const char *const reasons[] = {
        "",
        "idle",
        "user /stop",
        "resume",
        "ra\xc3\xafson",
        "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr", /* 64 */
    };
    if (below(10) < 4) {
        g->ev.reason = NULL;
        return;
    }
    strcpy(g->reason, reasons[below(sizeof reasons / sizeof reasons[0])]);
    g->ev.reason = g->reason;
}

/* A current-ish generation for a split. */
static uint64_t pick_generation(const mbind *b)
{
    unsigned r = below(100);
    if (r < 50)
        return b->gen;
    if (r < 70)
        return BINDLOG_ANY_GENERATION;
    if (r < 85)
        return b->gen ? b->gen - 1 : 0;
    if (r < 90)
        return 0;
    return b->gen + 1;
}

/* An event with bad arguments.  `in_batch`: a bad event type is possible. */
static void gen_bad(model *m, gev *g, int in_batch)
{
    unsigned v = below(in_batch ? 10 : 9);
    g->bad = 1;
    g->k = pick_key();
    g->ev.key = keys[g->k];
    g->ev.type = BINDLOG_EVENT_BIND;
    fresh_id(m, g->sid);
    g->ev.session_id = g->sid;
    switch (v) {
    case 0:
        g->ev.key = "";
        g->ev.type = 1 + (int)below(5);
        if (g->ev.type == BINDLOG_EVENT_SPLIT) {
            strcpy(g->expect, "p");
            g->ev.expect = g->expect;
        }
        break;
    case 1:
        memset(g->badkey, 'k', BINDLOG_KEY_MAX + 1);
        g->badkey[BINDLOG_KEY_MAX + 1] = '\0';
        g->ev.key = g->badkey;
        g->ev.type = BINDLOG_EVENT_INVALIDATE;
        break;
    case 2:
        snprintf(g->sid, sizeof g->sid, "bad\nid%u", m->next_id++);
        g->ev.type = below(2) ? BINDLOG_EVENT_BIND : BINDLOG_EVENT_NEW_SESSION;
        break;
    case 3:
        memset(g->reason, 'r', BINDLOG_REASON_MAX + 1);
        g->reason[BINDLOG_REASON_MAX + 1] = '\0';
        g->ev.reason = g->reason;
        g->ev.type = below(2) ? BINDLOG_EVENT_INVALIDATE : BINDLOG_EVENT_UNBIND;
        break;
    case 4:
        g->ev.type = BINDLOG_EVENT_NEW_SESSION;
        g->ev.origin = NULL;
        g->ev.origin_len = 3;
        break;
    case 5:
        g->ev.type = BINDLOG_EVENT_SPLIT;
        strcpy(g->expect, g->sid);
        g->ev.expect = g->expect;
        g->ev.generation = BINDLOG_ANY_GENERATION;
        break;
    case 6:
        g->ev.origin = origin_too_big;
        g->ev.origin_len = BINDLOG_ORIGIN_MAX + 1;
        break;
    case 7:
        g->ev.type = BINDLOG_EVENT_SPLIT;
        memset(g->sid, 'i', BINDLOG_ID_MAX + 1);
        g->sid[BINDLOG_ID_MAX + 1] = '\0';
        strcpy(g->expect, "p");
        g->ev.expect = g->expect;
        break;
    case 8:
        strcpy(g->reason, "del\x7f");
        g->ev.reason = g->reason;
        g->ev.type = BINDLOG_EVENT_UNBIND;
        break;
    default: {
        static const int bad_types[] = {0, BINDLOG_EVENT_COUNT, 99, -3};
        g->ev.type = bad_types[below(4)];
        break;
    }
    }
}

static void gen_event(model *m, gev *g, int in_batch)
{
    memset(&g->ev, 0, sizeof g->ev);
    g->bad = 0;
    g->oidx = -1;
    if (below(1000) < (in_batch ? 40u : 15u)) {
        gen_bad(m, g, in_batch);
        return;
    }
    g->k = pick_key();
    g->ev.key = keys[g->k];
    const mbind *b = &m->b[g->k];
    const char *cur = b->present ? b->sid : "";
    unsigned t = below(100), r;

    if (t < 25) {
        g->ev.type = BINDLOG_EVENT_BIND;
        r = below(100);
        if (r < 35)
            existing_id(m, g->sid);
        else if (r < 45)
            live_id(m, g->sid);
        else if (r < 60 && cur[0])
            strcpy(g->sid, cur);
        else
            fresh_id(m, g->sid);
        g->ev.session_id = g->sid;
        r = below(100);
        if (r < 45) {
            g->ev.expect = NULL;
        } else {
            if (r < 55)
                g->expect[0] = '\0';
            else if (r < 90)
                strcpy(g->expect, cur);
            else
                existing_id(m, g->expect);
            g->ev.expect = g->expect;
        }
        pick_reason(g);
        pick_origin(g);
    } else if (t < 45) {
        g->ev.type = BINDLOG_EVENT_NEW_SESSION;
        r = below(100);
        if (r < 70)
            fresh_id(m, g->sid);
        else if (r < 85)
            existing_id(m, g->sid);
        else if (r < 90)
            live_id(m, g->sid);
        else if (cur[0])
            strcpy(g->sid, cur);
        else
            fresh_id(m, g->sid);
        g->ev.session_id = g->sid;
        pick_reason(g);
        pick_origin(g);
    } else if (t < 75) {
        g->ev.type = BINDLOG_EVENT_SPLIT;
        r = below(100);
        if (r < 80 && cur[0])
            strcpy(g->expect, cur);
        else
            existing_id(m, g->expect);
        r = below(100);
        if (r < 75)
            fresh_id(m, g->sid);
        else if (r < 85 && cur[0])
            strcpy(g->sid, cur);
        else if (r < 95)
            existing_id(m, g->sid);
        else
            live_id(m, g->sid);
        if (strcmp(g->sid, g->expect) == 0)
            fresh_id(m, g->sid);
        g->ev.session_id = g->sid;
        g->ev.expect = g->expect;
        g->ev.generation = pick_generation(b);
        pick_origin(g);
    } else if (t < 88) {
        g->ev.type = BINDLOG_EVENT_INVALIDATE;
        pick_reason(g);
    } else {
        g->ev.type = BINDLOG_EVENT_UNBIND;
        pick_reason(g);
    }
}

/* ---- calling the library ---------------------------------------------------------- */

static int lib_call(bindlog *s, const bindlog_event *ev, bindlog_result *r)
{
    switch (ev->type) {
    case BINDLOG_EVENT_BIND:
        return bindlog_bind(s, ev->key, ev->session_id, ev->expect, ev->reason, ev->origin,
                            ev->origin_len, r);
    case BINDLOG_EVENT_NEW_SESSION:
        return bindlog_new_session(s, ev->key, ev->session_id, ev->reason, ev->origin,
                                   ev->origin_len, r);
    case BINDLOG_EVENT_SPLIT:
        return bindlog_split(s, ev->key, ev->expect, ev->session_id, ev->generation, ev->origin,
                             ev->origin_len, r);
    case BINDLOG_EVENT_INVALIDATE:
        return bindlog_invalidate(s, ev->key, ev->reason, r);
    case BINDLOG_EVENT_UNBIND:
        return bindlog_unbind(s, ev->key, ev->reason, r);
    default:
        fail_msg("lib_call: type %d", ev->type);
    }
    return 0;
}

static void describe(const gev *g, char *out, size_t cap)
{
    const bindlog_event *e = &g->ev;
    snprintf(out, cap,
             "%s key#%d sid=\"%s\" expect=%s%s%s gen=%" PRIu64 " reason=%s%s%s origin=%d%s",
             bindlog_event_name(e->type), g->k, e->session_id ? e->session_id : "(null)",
             e->expect ? "\"" : "", e->expect ? e->expect : "(null)", e->expect ? "\"" : "",
             e->generation, e->reason ? "\"" : "", e->reason ? e->reason : "(null)",
             e->reason ? "\"" : "", g->oidx, g->bad ? " BAD" : "");
}

static void check_result(long n, const gev *g, int mrc, const mres *mr, int rc,
                         const bindlog_result *r)
{
    char d[512];
    if (rc != mrc) {
        describe(g, d, sizeof d);
        fail_msg("event %ld (%s): library %d %s, model %d %s", n, d, rc, bindlog_code_name(rc), mrc,
                 bindlog_code_name(mrc));
    }
    if (rc < 0)
        return;
    if (r->outcome != rc || r->lsn != mr->lsn || r->generation != mr->gen ||
        strcmp(r->session_id, mr->sid) != 0) {
        describe(g, d, sizeof d);
        fail_msg("event %ld (%s) %s: result outcome %d lsn %" PRIu64 " gen %" PRIu64
                 " sid \"%s\", model lsn %" PRIu64 " gen %" PRIu64 " sid \"%s\"",
                 n, d, bindlog_code_name(rc), r->outcome, r->lsn, r->generation, r->session_id,
                 mr->lsn, mr->gen, mr->sid);
    }
}

/* ---- whole-state comparison --------------------------------------------------------- */

static const model *sort_model;

static int cmp_key_idx(const void *a, const void *b)
{
    return strcmp(keys[*(const int *)a], keys[*(const int *)b]);
}

static int cmp_sess_idx(const void *a, const void *b)
{
    return strcmp(sort_model->s[*(const int *)a].id, sort_model->s[*(const int *)b].id);
}

static void digest_put(XXH3_state_t *st, const void *p, size_t n)
{
    assert_int_equal(XXH3_128bits_update(st, p, n), XXH_OK);
}

/* The digest as the brief defines it (docs/format.md, "state digest"). */
static void model_digest(const model *m, const int *kord, size_t nk, const int *sord,
                         unsigned char out[BINDLOG_DIGEST_SIZE])
{
    static unsigned char enc[BINDLOG_ORIGIN_MAX + 4096];
    unsigned char hdr[8];
    XXH3_state_t *st = XXH3_createState();
    assert_non_null(st);
    assert_int_equal(XXH3_128bits_reset(st), XXH_OK);
    for (size_t i = 0; i < nk; i++) {
        const char *key = keys[kord[i]];
        const mbind *b = &m->b[kord[i]];
        size_t klen = strlen(key);
        hdr[0] = 'B';
        bl_put16(hdr + 1, (uint16_t)klen);
        digest_put(st, hdr, 3);
        digest_put(st, key, klen);
        bl_bval v = {b->sid, strlen(b->sid), b->gen, b->lsn, b->upd, 0};
        size_t n = bl_bval_encode_v1(&v, enc, sizeof enc);
        assert_true(n > 0);
        bl_put32(hdr, (uint32_t)n);
        digest_put(st, hdr, 4);
        digest_put(st, enc, n);
    }
    for (size_t i = 0; i < m->ns; i++) {
        const msess *s = &m->s[sord[i]];
        size_t idlen = strlen(s->id);
        hdr[0] = 'S';
        hdr[1] = (unsigned char)idlen;
        digest_put(st, hdr, 2);
        digest_put(st, s->id, idlen);
        bl_sval v;
        memset(&v, 0, sizeof v);
        v.key = keys[s->key];
        v.key_len = strlen(keys[s->key]);
        v.parent = s->parent;
        v.parent_len = strlen(s->parent);
        v.created_lsn = s->clsn;
        v.ended_lsn = s->elsn;
        v.created_ms = s->cms;
        v.ended_ms = s->ems;
        v.reason = s->reason;
        v.reason_len = strlen(s->reason);
        v.origin = origins[s->origin];
        v.origin_len = origin_lens[s->origin];
        size_t n = bl_sval_encode_v1(&v, enc, sizeof enc);
        assert_true(n > 0);
        bl_put32(hdr, (uint32_t)n);
        digest_put(st, hdr, 4);
        digest_put(st, enc, n);
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    for (int i = 0; i < 8; i++) {
        out[i] = (unsigned char)(h.high64 >> (56 - 8 * i));
        out[8 + i] = (unsigned char)(h.low64 >> (56 - 8 * i));
    }
}

static void check_session(const msess *ms, const bindlog_session *ss, const unsigned char *ob,
                          const char *via)
{
    const char *id = ms->id;
    if (strcmp(ss->session_id, id) != 0)
        fail_msg("%s: session id \"%s\", model \"%s\"", via, ss->session_id, id);
    if (strcmp(ss->key, keys[ms->key]) != 0)
        fail_msg("%s %s: key #%d expected", via, id, ms->key);
    if (strcmp(ss->parent_id, ms->parent) != 0)
        fail_msg("%s %s: parent \"%s\", model \"%s\"", via, id, ss->parent_id, ms->parent);
    if (ss->created_lsn != ms->clsn || ss->ended_lsn != ms->elsn)
        fail_msg("%s %s: created/ended lsn %" PRIu64 "/%" PRIu64 ", model %" PRIu64 "/%" PRIu64,
                 via, id, ss->created_lsn, ss->ended_lsn, ms->clsn, ms->elsn);
    if (ss->created_ms != ms->cms || ss->ended_ms != ms->ems)
        fail_msg("%s %s: created/ended ms %" PRId64 "/%" PRId64 ", model %" PRId64 "/%" PRId64, via,
                 id, ss->created_ms, ss->ended_ms, ms->cms, ms->ems);
    if (strcmp(ss->end_reason, ms->reason) != 0)
        fail_msg("%s %s: end reason \"%s\", model \"%s\"", via, id, ss->end_reason, ms->reason);
    if (ss->origin_len != origin_lens[ms->origin] ||
        (ss->origin_len > 0 && memcmp(ob, origins[ms->origin], ss->origin_len) != 0))
        fail_msg("%s %s: origin of %zu bytes differs from model origin #%d (%zu bytes)", via, id,
                 ss->origin_len, ms->origin, origin_lens[ms->origin]);
}

static void verify_all(const model *m, bindlog *s, long n_events)
{
    static unsigned char ob[BINDLOG_ORIGIN_MAX + 16];
    int kord[NKEYS];
    size_t nk = 0;
    uint64_t live_b = 0, live_s = 0;

    /* statistics */
    for (int k = 0; k < NKEYS; k++) {
        if (m->b[k].present)
            kord[nk++] = k;
        if (m->b[k].present && m->b[k].sid[0])
            live_b++;
    }
    for (size_t i = 0; i < m->ns; i++)
        if (m->s[i].elsn == 0)
            live_s++;
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    if (st.head_lsn != m->nr || st.log_records != m->nr || st.bindings != nk ||
        st.live_bindings != live_b || st.sessions != m->ns || st.live_sessions != live_s)
        fail_msg("after %ld events: stats head %" PRIu64 " records %" PRIu64 " bindings %" PRIu64
                 " live %" PRIu64 " sessions %" PRIu64 " live %" PRIu64
                 "; model %zu %zu %zu %" PRIu64 " %zu %" PRIu64,
                 n_events, st.head_lsn, st.log_records, st.bindings, st.live_bindings, st.sessions,
                 st.live_sessions, m->nr, m->nr, nk, live_b, m->ns, live_s);
    for (int t = 1; t < BINDLOG_EVENT_COUNT; t++)
        if (st.applied[t] != m->applied[t])
            fail_msg("applied[%s] %" PRIu64 ", model %" PRIu64, bindlog_event_name(t),
                     st.applied[t], m->applied[t]);

    /* every key through bindlog_get */
    for (int k = 0; k < NKEYS; k++) {
        const mbind *mb = &m->b[k];
        bindlog_binding b;
        memset(&b, 0x5a, sizeof b);
        int rc = bindlog_get(s, keys[k], &b);
        int bound = mb->present && mb->sid[0];
        if (rc != (bound ? 0 : BINDLOG_ENOTFOUND))
            fail_msg("get key#%d: %d, model %s", k, rc, bound ? "bound" : "unbound");
        if (strcmp(b.session_id, mb->present ? mb->sid : "") != 0 || b.generation != mb->gen ||
            strcmp(b.key, keys[k]) != 0)
            fail_msg("get key#%d: sid \"%s\" gen %" PRIu64 ", model \"%s\" gen %" PRIu64, k,
                     b.session_id, b.generation, mb->sid, mb->gen);
        if (bound && (b.lsn != mb->lsn || b.updated_ms != mb->upd))
            fail_msg("get key#%d: lsn %" PRIu64 " updated %" PRId64 ", model %" PRIu64 " %" PRId64,
                     k, b.lsn, b.updated_ms, mb->lsn, mb->upd);
    }

    /* the bindings iterator: tombstones included, key byte order */
    qsort(kord, nk, sizeof kord[0], cmp_key_idx);
    bindlog_iter *it = NULL;
    bindlog_binding b;
    size_t i = 0;
    int rc;
    assert_int_equal(bindlog_bindings_iter(s, &it), 0);
    while ((rc = bindlog_iter_next_binding(it, &b)) == 1) {
        if (i >= nk)
            fail_msg("bindings iterator: more than the model's %zu", nk);
        const mbind *mb = &m->b[kord[i]];
        if (strcmp(b.key, keys[kord[i]]) != 0 || strcmp(b.session_id, mb->sid) != 0 ||
            b.generation != mb->gen || b.lsn != mb->lsn || b.updated_ms != mb->upd)
            fail_msg("bindings iterator #%zu: sid \"%s\" gen %" PRIu64 " lsn %" PRIu64
                     "; model key#%d sid \"%s\" gen %" PRIu64 " lsn %" PRIu64,
                     i, b.session_id, b.generation, b.lsn, kord[i], mb->sid, mb->gen, mb->lsn);
        i++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(i, nk);
    bindlog_iter_close(it);

    /* every session through bindlog_session_get */
    for (size_t j = 0; j < m->ns; j++) {
        bindlog_session ss;
        rc = bindlog_session_get(s, m->s[j].id, &ss, ob, sizeof ob);
        if (rc != 0)
            fail_msg("session_get \"%s\": %d", m->s[j].id, rc);
        check_session(&m->s[j], &ss, ob, "session_get");
    }

    /* the sessions iterator in id byte order */
    int *sord = malloc((m->ns + 1) * sizeof *sord);
    assert_non_null(sord);
    for (size_t j = 0; j < m->ns; j++)
        sord[j] = (int)j;
    sort_model = m;
    qsort(sord, m->ns, sizeof *sord, cmp_sess_idx);
    i = 0;
    assert_int_equal(bindlog_sessions_iter(s, &it), 0);
    bindlog_session ss;
    while ((rc = bindlog_iter_next_session(it, &ss, ob, sizeof ob)) == 1) {
        if (i >= m->ns)
            fail_msg("sessions iterator: more than the model's %zu", m->ns);
        check_session(&m->s[sord[i]], &ss, ob, "sessions iterator");
        i++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(i, m->ns);
    bindlog_iter_close(it);

    /* the digest */
    unsigned char want[BINDLOG_DIGEST_SIZE], got[BINDLOG_DIGEST_SIZE];
    uint64_t dh = 0;
    model_digest(m, kord, nk, sord, want);
    assert_int_equal(bindlog_digest(s, got, &dh), 0);
    assert_int_equal(dh, m->nr);
    if (memcmp(want, got, sizeof want) != 0) {
        char hw[33], hg[33];
        bindlog_digest_hex(want, hw);
        bindlog_digest_hex(got, hg);
        fail_msg("after %ld events: digest %s, model %s", n_events, hg, hw);
    }
    free(sord);
}

/* The whole log, record by record. */
static void verify_log(const model *m, bindlog *s)
{
    bindlog_iter *it = NULL;
    bindlog_record rec;
    size_t i = 0;
    int rc;
    assert_int_equal(bindlog_log_iter(s, 0, UINT64_MAX, &it), 0);
    while ((rc = bindlog_iter_next_record(it, &rec)) == 1) {
        if (i >= m->nr)
            fail_msg("log: more records than the model's %zu", m->nr);
        const mrec *r = &m->r[i];
        const char *key = keys[r->key];
        if (rec.lsn != i + 1 || rec.type != r->type || rec.time_ms != r->t ||
            rec.generation != r->gen || rec.key_len != strlen(key) ||
            memcmp(rec.key, key, rec.key_len) != 0 || strcmp(rec.session_id, r->sid) != 0 ||
            strcmp(rec.other_id, r->other) != 0)
            fail_msg("record %zu: lsn %" PRIu64 " %s time %" PRId64 " gen %" PRIu64
                     " sid \"%s\" other \"%s\"; model %s time %" PRId64 " gen %" PRIu64
                     " key#%d sid \"%s\" other \"%s\"",
                     i + 1, rec.lsn, bindlog_event_name(rec.type), rec.time_ms, rec.generation,
                     rec.session_id, rec.other_id, bindlog_event_name(r->type), r->t, r->gen,
                     r->key, r->sid, r->other);
        if (strcmp(rec.reason, r->reason) != 0)
            fail_msg("record %zu (%s): reason \"%s\", model (effective) \"%s\"", i + 1,
                     bindlog_event_name(r->type), rec.reason, r->reason);
        if (rec.origin_present != (r->origin >= 0))
            fail_msg("record %zu: origin_present %d, model %d", i + 1, rec.origin_present,
                     r->origin >= 0);
        if (r->origin >= 0 &&
            (rec.origin_len != origin_lens[r->origin] ||
             (rec.origin_len > 0 && memcmp(rec.origin, origins[r->origin], rec.origin_len))))
            fail_msg("record %zu: origin differs", i + 1);
        i++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(i, m->nr);
    bindlog_iter_close(it);
}

/* ---- the test ------------------------------------------------------------------------- */

static bindlog *xopen(const char *dir)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.clock_ms = test_clock;
    bindlog *s = NULL;
    int rc = bindlog_open(&s, dir, &o);
    if (rc != 0)
        fail_msg("bindlog_open(%s): %d %s", dir, rc, bindlog_strerror(rc));
    return s;
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        return dflt;
    char *end = NULL;
    uint64_t x = strtoull(v, &end, 0);
    if (end == v || *end != '\0')
        fail_msg("%s=%s is not a number", name, v);
    return x;
}

static void random__model_agrees(void **state)
{
    (void)state;
    const uint64_t seed = env_u64("BINDLOG_TEST_SEED", 0xB1AD10C5EEDull);
    const long nevents = (long)env_u64("BINDLOG_TEST_EVENTS", DEFAULT_EVENTS);
    print_message("random__model_agrees: seed 0x%" PRIx64 " (BINDLOG_TEST_SEED), %ld events\n",
                  seed, nevents);
    rng = seed ? seed : 1;

    char *tmp = tu_store_location("random");
    char dir[1024];
    if (tu_is_etcd_location(tmp))
        snprintf(dir, sizeof dir, "%s", tmp);
    else
        snprintf(dir, sizeof dir, "%s/store", tmp);
    make_inputs();

    model *m = calloc(1, sizeof *m);
    assert_non_null(m);
    m->buckets = malloc(HASH_BUCKETS * sizeof *m->buckets);
    assert_non_null(m->buckets);
    memset(m->buckets, 0xff, HASH_BUCKETS * sizeof *m->buckets); /* all -1 */
    m->now = 1700000000000;
    m->last_t = 0;

    bindlog *s = xopen(dir);
    static gev gs[8];
    bindlog_event evs[8];
    bindlog_result outs[8];
    mres mrs[8];
    int mrcs[8];
    long done = 0, next_verify = VERIFY_EVERY, next_reopen = REOPEN_EVERY;
    long counts[BINDLOG_EVENT_COUNT][BINDLOG_STAT_COLUMNS];
    long batches = 0, failed_batches = 0;
    memset(counts, 0, sizeof counts);

    while (done < nevents) {
        /* the clock: mostly forward, sometimes back */
        if (below(100) == 0)
            m->now -= (int64_t)below(5000);
        else
            m->now += (int64_t)below(3);
        g_now = m->now;

        if (below(100) < 5) {
            /* a batch of 1..6 events, ending at the first error if any */
            size_t n = 1 + below(6), used = 0;
            int err = 0;
            m_batch_begin(m);
            for (size_t j = 0; j < n; j++) {
                gen_event(m, &gs[j], 1);
                evs[j] = gs[j].ev;
                mrcs[j] = m_apply(m, &gs[j], &mrs[j]);
                used = j + 1;
                if (mrcs[j] < 0) {
                    err = 1;
                    break;
                }
            }
            size_t ei = 9999;
            memset(outs, 0, sizeof outs);
            int rc = bindlog_apply_batch(s, evs, used, outs, &ei);
            batches++;
            if (err) {
                failed_batches++;
                if (rc != mrcs[used - 1] || ei != used - 1) {
                    char d[512];
                    describe(&gs[used - 1], d, sizeof d);
                    fail_msg("batch at event %ld: library %d %s err_index %zu; model %d %s at "
                             "%zu (%s)",
                             done, rc, bindlog_code_name(rc), ei, mrcs[used - 1],
                             bindlog_code_name(mrcs[used - 1]), used - 1, d);
                }
                m_batch_rollback(m);
            } else {
                if (rc != 0)
                    fail_msg("batch at event %ld: library %d %s err_index %zu; model: no error",
                             done, rc, bindlog_code_name(rc), ei);
                for (size_t j = 0; j < used; j++)
                    check_result(done + (long)j, &gs[j], mrcs[j], &mrs[j], outs[j].outcome,
                                 &outs[j]);
                m_batch_commit(m);
            }
            done += (long)used;
        } else {
            gen_event(m, &gs[0], 0);
            mres mr;
            int mrc = m_apply(m, &gs[0], &mr);
            bindlog_result r;
            memset(&r, 0, sizeof r);
            int rc = lib_call(s, &gs[0].ev, &r);
            check_result(done, &gs[0], mrc, &mr, rc, &r);
            if (gs[0].ev.type > 0 && gs[0].ev.type < BINDLOG_EVENT_COUNT)
                counts[gs[0].ev.type][rc >= 0 ? rc : BINDLOG_STAT_ERROR]++;
            done++;
        }

        if (done >= next_reopen) {
            next_reopen += REOPEN_EVERY;
            bindlog_close(s);
            s = xopen(dir);
            verify_all(m, s, done);
        }
        if (done >= next_verify) {
            next_verify += VERIFY_EVERY;
            verify_all(m, s, done);
        }
    }
    verify_all(m, s, done);
    verify_log(m, s);
    bindlog_close(s);
    s = xopen(dir);
    verify_all(m, s, done);
    verify_log(m, s);
    bindlog_close(s);

    /* how much of the space the run covered */
    print_message("random__model_agrees: %ld events, %zu records, %zu sessions, %ld batches "
                  "(%ld failed)\n",
                  done, m->nr, m->ns, batches, failed_batches);
    for (int t = 1; t < BINDLOG_EVENT_COUNT; t++)
        print_message("  %-12s applied %6ld already %6ld stale %6ld moved %6ld error %6ld\n",
                      bindlog_event_name(t), counts[t][0], counts[t][1], counts[t][2], counts[t][3],
                      counts[t][4]);

    free(m->buckets);
    free(m->s);
    free(m->r);
    free(m->j);
    free(m);
    free_inputs();
    tu_store_remove(tmp);
    free(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random__model_agrees),
    };
    if (tu_backend_skip())
        return 0;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
