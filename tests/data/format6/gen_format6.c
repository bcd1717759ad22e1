/*
 * gen_format6.c -- writes the format-6 golden stores of tests/data/format6/.
 *
 * Built against the library at the commit make_format6.sh names (a main
 * with on-disk format 6), never against a later one: the point is bytes that
 * format-6 code wrote, so that the format after it can test `bindlog
 * upgrade` from them.  Public API only.  Deterministic: a fixed clock, a
 * fixed pseudo-random sequence, and no background checkpoint
 * (BINDLOG_CHECKPOINT=manual, set here: which records reach data.mdb and
 * which stay in bindlog.wal then depends on the calls alone), so a rerun
 * writes the same events, digest and counters, and leaves the same records
 * in bindlog.wal only (the log's salt is random: the files' bytes differ).
 *
 *   gen_format6 DIR compact_keep_from [crash]
 *
 * About 500 events over 40 keys: session ids that are canonical lower-case
 * UUIDs for most sessions, plain ids ("s-00042") for some and one
 * upper-case UUID; binds, among them re-binds of ENDED sessions that
 * re-open them on another key (with a new origin, an empty one or none),
 * ALREADY retries and MOVED expectations; new sessions; splits (some with
 * a stale run generation or the wrong parent, which log nothing; some
 * without an origin, so the child copies its parent's); invalidates;
 * unbinds; bindlog_route with an idle reset policy (CREATED, ROUTED and
 * RESET); a few imported entries (BINDs that set the key's last activity);
 * one expiry.  Origins are ~60 bytes of JSON on most events, empty on
 * some, absent on others; reasons are the defaults except on a few (custom
 * ones, "", and standard reasons written explicitly or on another type).
 * Two "hub" sessions, one of them the upper-case UUID, are resumed and
 * split or renewed again and again, so each gets several children.  The
 * workload is gen_format4.c's, call for call: the stores hold the state
 * (and digest) of tests/data/format4's, in format 6's encodings.
 *
 * Format 6 keeps most sessions as references to the record that created
 * them (docs/format.md, "Which form") and links each parent's children
 * whose records the log holds through the session values (the sibling
 * chain), the others in the children table; its log records are of
 * version 3, every id as text.  The workload gives every form: the
 * sessions its events create are references, those re-opened on another
 * key or with a new origin are whole, and in the compacted store the
 * sessions created before the base are references whose fields the base
 * image holds (whole and marked), beside unmarked whole ones.
 *
 * The store's write-ahead log is the smallest one (64 KiB): its ring wraps
 * three or four times over (format 6's frames are smaller than format
 * 4's), every writer checkpoints it when it is full, and the files stay
 * small.  A checkpoint also runs after step 380.  If compact_keep_from > 0,
 * the log is then compacted before that LSN (a base image) and 100 more
 * steps follow.  Prints, one per line: "head N", "digest HEX", "base N",
 * "checkpoint N" (the last LSN data.mdb holds as the program leaves it:
 * the head after a close), "bindings N", "live_bindings N", "sessions N",
 * "live_sessions N", "applied TYPE N" for each event type (the store's
 * persistent counters, which the digest does not cover) and "children SID
 * N" for the two hubs.  With "crash" it exits without closing the store
 * instead: the records after the last checkpoint stay in bindlog.wal only.
 */
#define _POSIX_C_SOURCE 200809L
#include <bindlog.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NKEYS 40
#define MAXIDS 4096
#define HOUR (3600 * 1000)

static int64_t now_ms = 1767225600000; /* 2026-01-01T00:00:00Z */

static int64_t fixed_clock(void *ctx)
{
    (void)ctx;
    return now_ms;
}

static uint64_t rng = 0xd1b54a32d192ed03ull;
static uint64_t next64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static unsigned next(unsigned n) { return (unsigned)(next64() % n); }

static void die(const char *what, int rc)
{
    fprintf(stderr, "gen_format6: %s: %s (%s)\n", what, bindlog_strerror(rc),
            bindlog_last_error());
    exit(1);
}

static char keys[NKEYS][64];
static char ids[MAXIDS][BINDLOG_ID_MAX + 1]; /* every id handed out, in order */
static unsigned nids, seq;
static unsigned outcomes[8]; /* what happened, for the report on stderr */

static void make_keys(void)
{
    static const char *const kinds[] = {"agent:main:telegram:dm:%u", "agent:main:discord:channel:%u",
                                        "agent:main:slack:thread:C0%u", "agent:ops:whatsapp:group:%u"};
    for (unsigned i = 0; i < NKEYS; i++)
        snprintf(keys[i], sizeof keys[i], kinds[i % 4], 1000003u + i * 7919u);
}

/* A random (version 4) UUID, canonical: 8-4-4-4-12 hex digits. */
static void uuid(char *out, size_t cap, int upper)
{
    uint64_t a = next64(), b = next64();
    snprintf(out, cap, upper ? "%08X-%04X-%04X-%04X-%012llX" : "%08x-%04x-%04x-%04x-%012llx",
             (unsigned)(a >> 32), (unsigned)((a >> 16) & 0xffff),
             (unsigned)((a & 0x0fff) | 0x4000), (unsigned)(((b >> 48) & 0x3fff) | 0x8000),
             (unsigned long long)(b & 0xffffffffffffull));
}

/* A new session id: mostly a lower-case UUID, now and then a plain id. */
static const char *fresh_id(void)
{
    char *p = ids[nids];
    if (nids + 1 >= MAXIDS)
        die("ids", BINDLOG_ENOMEM);
    nids++;
    seq++;
    if (next(8) == 0)
        snprintf(p, BINDLOG_ID_MAX + 1, "s-%05u", seq);
    else
        uuid(p, BINDLOG_ID_MAX + 1, 0);
    return p;
}

/* An origin: ~60 bytes of JSON (most), empty (some) or none (NULL). */
static char obuf[256];
static const void *origin(size_t *len, int i)
{
    unsigned r = next(10);
    if (r == 0) {
        *len = 0;
        return NULL;
    }
    if (r == 1) {
        *len = 0;
        return "";
    }
    static const char *const peers[] = {"telegram", "discord", "slack", "whatsapp"};
    /* one draw per statement: the order of a call's arguments is unspecified */
    const char *peer = peers[next(4)];
    unsigned chat = 1000000u + next(9000000);
    unsigned user = next(100000);
    int n = snprintf(obuf, sizeof obuf, "{\"peer\":\"%s\",\"chat\":%u,\"msg\":%d,\"user\":\"u%05u\"}",
                     peer, chat, i, user);
    *len = (size_t)n;
    return obuf;
}

/* A reason: the default (NULL) mostly; now and then a custom one, "", or
 * a standard reason given explicitly (its own type's or another's). */
static const char *reason(void)
{
    static const char *const some[] = {"user-reset", "gdpr:erase", "moved to web", "idle 30m",
                                       "",           "switch",     "unbind",       "new_session"};
    return next(12) == 0 ? some[next(8)] : NULL;
}

static int bound_to(bindlog *s, const char *key, bindlog_binding *b)
{
    int rc = bindlog_get(s, key, b);
    if (rc != 0 && rc != BINDLOG_ENOTFOUND)
        die(key, rc);
    return rc == 0;
}

/* The key index a session was last bound to, or -1. */
static int key_of(const char *key)
{
    for (int k = 0; k < NKEYS; k++)
        if (strcmp(keys[k], key) == 0)
            return k;
    return -1;
}

/* An ENDED session, picked at random among the ids handed out, or NULL. */
static const char *ended_session(bindlog *s, bindlog_session *ss)
{
    for (int tries = 0; tries < 20 && nids > 0; tries++) {
        const char *id = ids[next(nids)];
        int rc = bindlog_session_get(s, id, ss, NULL, 0);
        if (rc == BINDLOG_ENOTFOUND)
            continue; /* a fresh id a route did not use */
        if (rc != 0)
            die(id, rc);
        if (ss->ended_lsn != 0)
            return id;
    }
    return NULL;
}

static char hub[2][BINDLOG_ID_MAX + 1];

/* A hub step: a hub that is live gets a child (split or new session); one
 * that ended is resumed on another key. */
static void hub_step(bindlog *s, int h, int i)
{
    bindlog_session ss;
    bindlog_binding b;
    bindlog_result r;
    size_t olen;
    const void *o;
    int rc;
    if ((rc = bindlog_session_get(s, hub[h], &ss, NULL, 0)) != 0)
        die(hub[h], rc);
    if (ss.ended_lsn == 0) {
        if (!bound_to(s, ss.key, &b) || strcmp(b.session_id, hub[h]) != 0)
            die("hub binding", BINDLOG_ECORRUPT);
        if (next(2)) {
            o = next(3) == 0 ? NULL : origin(&olen, i); /* NULL: the child copies the hub's */
            if (o == NULL)
                olen = 0;
            const char *child = fresh_id();
            uint64_t gen = next(2) ? b.generation : BINDLOG_ANY_GENERATION;
            rc = bindlog_split(s, ss.key, hub[h], child, gen, o, olen, &r);
        } else {
            o = origin(&olen, i);
            const char *id = fresh_id(), *why = reason();
            rc = bindlog_new_session(s, ss.key, id, why, o, olen, &r);
        }
    } else {
        int k = key_of(ss.key);
        int to = (k + 1 + (int)next(NKEYS - 1)) % NKEYS; /* another key */
        o = origin(&olen, i);                            /* new origin, empty, or kept */
        rc = bindlog_bind(s, keys[to], hub[h], NULL, reason(), o, olen, &r);
    }
    if (rc < 0)
        die("hub", rc);
    outcomes[rc]++;
}

static void step(bindlog *s, int i)
{
    static const bindlog_policy idle = {BINDLOG_RESET_IDLE, 6 * HOUR, 0};
    bindlog_binding b;
    bindlog_result r;
    bindlog_route_result rr;
    bindlog_session ss;
    size_t olen;
    const void *o;
    int rc;

    /* seconds apart mostly; now and then a long silence (idle resets) */
    now_ms += next(100) == 0 ? 8 * HOUR : 1000 + next(20000);
    if (i % 25 == 12) {
        hub_step(s, (i / 25) % 2, i);
        return;
    }
    if (i == 180) {
        uint64_t n = 0; /* the group chats idle for ten minutes expire */
        if ((rc = bindlog_expire(s, now_ms - HOUR / 6, "agent:ops:", 0, &n)) != 0)
            die("expire", rc);
        fprintf(stderr, "gen_format6: %llu expired\n", (unsigned long long)n);
        return;
    }
    /* a few hot keys take half of the traffic */
    const char *key = keys[next(2) ? next(8) : next(NKEYS)];
    int bound = bound_to(s, key, &b);
    unsigned what = next(20);
    if (!bound && what >= 8 && what <= 14)
        what = next(2) ? 0 : 5; /* nothing to split, stop or unbind: route or bind */
    switch (what) {
    case 0: case 1: case 2: case 3: case 4:
        o = origin(&olen, i);
        rc = bindlog_route(s, key, now_ms, &idle, fresh_id(), o, olen, &rr);
        break;
    case 5: case 6: {
        /* bind a new session; now and then with an expectation that fails */
        const char *expect = next(6) == 0 ? (bound ? "" : "nobody") : NULL;
        o = origin(&olen, i);
        const char *id = fresh_id(), *why = reason();
        rc = bindlog_bind(s, key, id, expect, why, o, olen, &r);
        break;
    }
    case 7: {
        /* resume an ended session: re-opened here, wherever it was */
        const char *id = ended_session(s, &ss);
        o = origin(&olen, i);
        if (id == NULL)
            id = fresh_id();
        const char *why = reason();
        rc = bindlog_bind(s, key, id, NULL, why, o, olen, &r);
        break;
    }
    case 8: case 9: {
        o = origin(&olen, i);
        const char *id = fresh_id(), *why = reason();
        rc = bindlog_new_session(s, key, id, why, o, olen, &r);
        break;
    }
    case 10: case 11: case 12: {
        /* a split: stale run generations and wrong parents log nothing */
        uint64_t gen = b.generation;
        const char *parent = b.session_id;
        unsigned odd = next(8);
        if (odd == 0 && gen > 1)
            gen--; /* STALE */
        else if (odd == 1 && nids > 0)
            parent = ids[next(nids)]; /* MOVED, unless it is the binding */
        o = next(4) == 0 ? NULL : origin(&olen, i); /* NULL: the child copies the parent's */
        if (o == NULL)
            olen = 0;
        rc = bindlog_split(s, key, parent, fresh_id(), gen, o, olen, &r);
        break;
    }
    case 13:
        rc = bindlog_invalidate(s, key, reason(), &r);
        break;
    case 14:
        rc = bindlog_unbind(s, key, reason(), &r);
        break;
    case 15:
        /* a retried bind: ALREADY, or (unbound) a bind */
        rc = bindlog_bind(s, key, bound ? b.session_id : fresh_id(), NULL, NULL, NULL, 0, &r);
        break;
    default:
        o = origin(&olen, i);
        rc = bindlog_route(s, key, now_ms, &idle, fresh_id(), o, olen, &rr);
        break;
    }
    if (rc < 0)
        die(key, rc);
    outcomes[rc]++;
}

/* Two hubs and a few imported entries before the random steps. */
static void prologue(bindlog *s)
{
    bindlog_result r;
    size_t olen;
    const void *o;
    int rc;
    uuid(hub[0], sizeof hub[0], 0);
    uuid(hub[1], sizeof hub[1], 1); /* the one upper-case UUID */
    memcpy(ids[nids++], hub[0], sizeof hub[0]);
    memcpy(ids[nids++], hub[1], sizeof hub[1]);
    for (int h = 0; h < 2; h++) {
        now_ms += 1000;
        o = origin(&olen, -1 - h);
        if ((rc = bindlog_bind(s, keys[h], hub[h], "", NULL, o, olen, &r)) != 0)
            die("hub bind", rc);
    }
    /* a gateway's table moved in: BINDs that set the keys' last activity;
     * one older than the log (logged at the log's time), one ALREADY (the
     * same entry again), one MOVED (the key taken meanwhile) */
    static const char js[] = "{\"imported\":\"sessions.json\",\"updatedAt\":1767225000000}";
    char sid[4][BINDLOG_ID_MAX + 1];
    for (int e = 0; e < 3; e++)
        strcpy(sid[e], fresh_id());
    strcpy(sid[3], fresh_id());
    bindlog_import_entry en[5] = {
        {keys[2], sid[0], now_ms - 60000, js, sizeof js - 1},
        {keys[3], sid[1], 0, NULL, 0},
        {keys[4], sid[2], now_ms - 5000, "", 0},
        {keys[4], sid[2], now_ms - 4000, NULL, 0},
        {keys[4], sid[3], now_ms - 3000, js, sizeof js - 1},
    };
    int codes[5];
    now_ms += 1000;
    if ((rc = bindlog_import_entries(s, en, 5, NULL, codes, NULL, NULL)) != 0)
        die("import", rc);
    for (int e = 0; e < 5; e++)
        if (codes[e] < 0)
            die("import entry", codes[e]);
}

static void events(bindlog *s, int from, int to)
{
    for (int i = from; i < to; i++) {
        step(s, i);
        if (i == 380) {
            uint64_t ck = 0;
            int rc = bindlog_checkpoint(s, &ck);
            if (rc != 0)
                die("checkpoint", rc);
        }
    }
}

static uint64_t children(bindlog *s, const char *sid)
{
    bindlog_iter *it;
    bindlog_session ss;
    uint64_t n = 0;
    int rc;
    if ((rc = bindlog_children_iter(s, sid, &it)) != 0)
        die("children", rc);
    while ((rc = bindlog_iter_next_session(it, &ss, NULL, 0)) == 1)
        n++;
    bindlog_iter_close(it);
    if (rc < 0)
        die("children", rc);
    return n;
}

int main(int argc, char **argv)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s;
    int rc;

    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "crash") == 0)) {
        fprintf(stderr, "usage: gen_format6 DIR compact_keep_from [crash]\n");
        return 2;
    }
    unsigned long long keep = strtoull(argv[2], NULL, 10);
    /* no background checkpoint: data.mdb holds what the explicit
     * checkpoint (and, without "crash", the close) put there, whatever the
     * machine's speed */
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    o.clock_ms = fixed_clock;
    o.log_size = 64 << 10; /* the smallest: its ring wraps many times, and the files stay small */
    make_keys();
    if ((rc = bindlog_open(&s, argv[1], &o)) != 0)
        die("open", rc);
    prologue(s);
    events(s, 0, 540);
    if (keep > 0) {
        uint64_t removed = 0;
        if ((rc = bindlog_compact(s, keep, &removed, NULL, NULL)) != 0)
            die("compact", rc);
        events(s, 540, 640);
    }
    unsigned char d[BINDLOG_DIGEST_SIZE];
    char hex[2 * BINDLOG_DIGEST_SIZE + 1];
    uint64_t head = 0;
    if ((rc = bindlog_digest(s, d, &head)) != 0)
        die("digest", rc);
    bindlog_digest_hex(d, hex);
    bindlog_check_report chk;
    if ((rc = bindlog_check(s, &chk, NULL, NULL)) != 0 || chk.problems != 0)
        die("check", rc ? rc : BINDLOG_ECORRUPT);
    bindlog_stats st;
    if ((rc = bindlog_stats_get(s, &st)) != 0)
        die("stats", rc);
    if (st.format_version != 6)
        die("not a format-6 library", BINDLOG_EVERSION);
    uint64_t kids[2], ck = st.checkpoint_lsn;
    for (int h = 0; h < 2; h++)
        kids[h] = children(s, hub[h]);
    if (argc == 3) {
        /* closed: the last handle's checkpoint folds the rest into data.mdb */
        bindlog_close(s);
        o.read_only = 1;
        if ((rc = bindlog_open(&s, argv[1], &o)) != 0 || (rc = bindlog_stats_get(s, &st)) != 0)
            die("reopen", rc);
        ck = st.checkpoint_lsn;
        bindlog_close(s);
    }
    printf("head %llu\ndigest %s\n", (unsigned long long)head, hex);
    printf("base %llu\ncheckpoint %llu\n", (unsigned long long)st.base_lsn,
           (unsigned long long)ck);
    printf("bindings %llu\nlive_bindings %llu\n", (unsigned long long)st.bindings,
           (unsigned long long)st.live_bindings);
    printf("sessions %llu\nlive_sessions %llu\n", (unsigned long long)st.sessions,
           (unsigned long long)st.live_sessions);
    for (int t = 1; t < BINDLOG_EVENT_COUNT; t++)
        printf("applied %s %llu\n", bindlog_event_name(t), (unsigned long long)st.applied[t]);
    for (int h = 0; h < 2; h++)
        printf("children %s %llu\n", hub[h], (unsigned long long)kids[h]);
    fprintf(stderr,
            "gen_format6: applied %u, already %u, stale %u, moved %u, routed %u, created %u, "
            "reset %u\n",
            outcomes[0], outcomes[1], outcomes[2], outcomes[3], outcomes[4], outcomes[5],
            outcomes[6]);
    if (argc == 4) {
        fflush(stdout);
        _exit(0); /* no close: no final checkpoint */
    }
    return 0;
}
