/*
 * machine_fuzzer.c -- the real store against the reference model.
 *
 * The input is a program: a sequence of API calls decoded byte by byte
 * (reading past the end yields zeros, so every input is a valid program).
 * Each call goes to a real store (durability NONE, on /dev/shm when it
 * exists) and to the independent model of fuzz/model.c; the return codes,
 * every result field, the head LSN and the state digest must agree after
 * every call, and at the end (and after each reopen) every binding, every
 * session with its origin, every log record and the persistent statistics
 * must agree too.  Any difference is printed and abort()ed.
 *
 * Calls: all five events with ids from a small pool (valid, 128 bytes,
 * high bytes, too long, empty, control bytes, fresh ones, the key's current
 * binding, another key's binding), keys up to and over 400 bytes, expect
 * NULL / "" / the current binding / another id, generations current / old /
 * newer / ANY / 0, origins NULL / empty / input bytes / 65536 / over the
 * limit / NULL with a length, reasons NULL / "" / 64 / 65 bytes / control
 * bytes; batches through bindlog_apply_batch, including events with fields
 * their type does not take, bad types, and batches that fail half way;
 * close and reopen (sometimes with a tiny map, so the map has to grow);
 * writes through a read-only handle; the wall clock moving forward and back;
 * bindlog_route with every reset mode, bad policies and fresh ids, and
 * bindlog_expire under prefixes (SPEC 2b), against the model's own reading
 * (last activity, ROUTE records, resets and expiry UNBINDs in the log and
 * the digest).
 *
 * One store directory per process (made on the first input, removed at
 * exit), wiped before every input so inputs stay independent and the
 * fuzzer's reproductions are exact.
 */
#define _GNU_SOURCE
#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bindlog.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAX_OPS 400
#define BIG_ORIGIN (BINDLOG_ORIGIN_MAX + 1)

/* ---- the run's context ------------------------------------------------- */

typedef struct rd {
    const uint8_t *p;
    size_t n, i;
} rd;

static char g_dir[4096];
static int64_t g_clock;
static unsigned char g_big[BIG_ORIGIN]; /* pattern for the large origins */
static unsigned g_fresh;                /* counter for fresh session ids */
static unsigned g_op;                   /* current op, for messages */
static int g_trace;                     /* BINDLOG_FUZZ_TRACE set: print every call */

static unsigned u8(rd *r) { return r->i < r->n ? r->p[r->i++] : 0; }

static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "machine_fuzzer: op %u: ", g_op);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return g_clock;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static void rm_store(void)
{
    if (g_dir[0])
        nftw(g_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    struct stat st;
    const char *base = getenv("BINDLOG_FUZZ_TMPDIR");
    if (base == NULL || base[0] == '\0')
        base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0
                   ? "/dev/shm"
                   : getenv("TMPDIR");
    if (base == NULL || base[0] == '\0')
        base = "/tmp";
    snprintf(g_dir, sizeof(g_dir), "%s/bindlog-machine-fuzz-XXXXXX", base);
    if (mkdtemp(g_dir) == NULL) {
        perror(g_dir);
        abort();
    }
    atexit(rm_store);
    g_trace = getenv("BINDLOG_FUZZ_TRACE") != NULL;
    for (size_t i = 0; i < sizeof(g_big); i++)
        g_big[i] = (unsigned char)(i * 131 + (i >> 8));
    return 0;
}

/* ---- choosing arguments -------------------------------------------------- */

/* Every chosen string is copied into a caller buffer of this size, so that
 * it does not point into the model while the model changes. */
#define ARG 512

static const char *fill(char *buf, int c, size_t n)
{
    memset(buf, c, n);
    buf[n] = '\0';
    return buf;
}

static const char *copy(char *buf, const char *s)
{
    snprintf(buf, ARG, "%s", s);
    return buf;
}

static const char *choose_key(rd *r, char *buf)
{
    static const char *const keys[] = {
        "agent:main:telegram:dm:12345",
        "agent:main:telegram:dm:2",
        "agent:main:discord:group:9",
        "a",
        "ab",
        "k\x01\x7f\xff\x80 !", /* keys may hold any byte but NUL */
    };
    unsigned c = u8(r) % 10;
    if (c < 6)
        return copy(buf, keys[c]);
    if (c == 6) {
        fill(buf, 'K', BINDLOG_KEY_MAX); /* longest key */
        buf[BINDLOG_KEY_MAX - 1] = (char)('0' + u8(r) % 3);
        return buf;
    }
    if (c == 7)
        return copy(buf, keys[0]);
    if (c == 8)
        return u8(r) % 2 ? fill(buf, 'K', BINDLOG_KEY_MAX + 1) : copy(buf, "");
    return copy(buf, keys[1]);
}

/* A session id; `key` (may be NULL) is the event's key. */
static const char *choose_id(rd *r, const fm_model *m, const char *key, char *buf)
{
    static const char *const ids[] = {"A", "B", "C", "D", "sess-\x80\xfe", "has space"};
    unsigned c = u8(r) % 16;
    const fm_binding *b;
    switch (c) {
    case 0: case 1: case 2: case 3: case 4: case 5:
        return copy(buf, ids[c]);
    case 6:
        return fill(buf, 'I', BINDLOG_ID_MAX);
    case 7:
        return fill(buf, 'I', BINDLOG_ID_MAX + 1); /* too long */
    case 8:
        return copy(buf, u8(r) % 2 ? "" : "bad\n"); /* empty; control byte */
    case 9:
        return copy(buf, "del\x7f");
    case 10: case 11:
        snprintf(buf, ARG, "f%u", g_fresh++);
        return buf;
    case 12: case 13:
        /* the key's current binding, so that matches happen */
        b = key ? fm_binding_get(m, key) : NULL;
        return copy(buf, b && b->sid_len ? b->sid : ids[0]);
    default:
        /* some key's binding, live or not */
        if (m->nb == 0)
            return copy(buf, ids[1]);
        b = &m->b[u8(r) % m->nb];
        return copy(buf, b->sid_len ? b->sid : ids[2]);
    }
}

/* BIND's expect: NULL, "", the current binding or another id. */
static const char *choose_expect(rd *r, const fm_model *m, const char *key, char *buf)
{
    unsigned c = u8(r) % 6;
    const fm_binding *b;
    switch (c) {
    case 0: case 1:
        return NULL;
    case 2:
        return copy(buf, "");
    case 3:
        b = fm_binding_get(m, key);
        return copy(buf, b ? b->sid : "");
    default:
        return choose_id(r, m, key, buf);
    }
}

static const char *choose_reason(rd *r, char *buf)
{
    switch (u8(r) % 10) {
    case 4: return copy(buf, "");
    case 5: return copy(buf, "idle-expiry");
    case 6: return fill(buf, 'r', BINDLOG_REASON_MAX);
    case 7: return fill(buf, 'r', BINDLOG_REASON_MAX + 1); /* too long */
    case 8: return copy(buf, "tab\there"); /* control byte */
    default: return NULL;
    }
}

typedef struct origin {
    const void *p;
    size_t n;
    unsigned char small[32];
} origin;

static void choose_origin(rd *r, origin *o)
{
    o->p = NULL;
    o->n = 0;
    switch (u8(r) % 10) {
    case 3:
        o->p = o->small; /* explicitly empty */
        break;
    case 4: case 5:
        o->n = u8(r) % sizeof(o->small);
        for (size_t i = 0; i < o->n; i++)
            o->small[i] = (unsigned char)u8(r);
        o->p = o->small;
        break;
    case 6:
        o->p = g_big;
        o->n = BINDLOG_ORIGIN_MAX;
        break;
    case 7:
        o->p = g_big + (u8(r) % 2); /* over the limit; or another 65536 */
        o->n = o->p == g_big ? BINDLOG_ORIGIN_MAX + 1 : BINDLOG_ORIGIN_MAX;
        break;
    case 8:
        o->n = 3; /* NULL with a length */
        break;
    default:
        break;
    }
}

static uint64_t choose_generation(rd *r, const fm_model *m, const char *key)
{
    const fm_binding *b = fm_binding_get(m, key);
    uint64_t g = b ? b->generation : 0;
    switch (u8(r) % 9) {
    case 2: return BINDLOG_ANY_GENERATION;
    case 3: return g - 1; /* an older run (g is 0 only for a key never bound: ENOTFOUND) */
    case 4: return g + 1;
    case 5: return 0;
    case 6: return BINDLOG_ANY_GENERATION - 1;
    case 7: return u8(r);
    default: return g;
    }
}

/* ---- one event --------------------------------------------------------- */

typedef struct ev_buf {
    bindlog_event ev;
    char key[ARG], sid[ARG], expect[ARG], reason[ARG];
    origin o;
} ev_buf;

/* Decode one event into e (which must not move until it has been used). */
static void choose_event(rd *r, const fm_model *m, int type, ev_buf *e)
{
    bindlog_event *ev = &e->ev;
    memset(ev, 0, sizeof(*ev));
    e->o.p = NULL; /* INVALIDATE and UNBIND take no origin */
    e->o.n = 0;
    ev->type = type;
    ev->key = choose_key(r, e->key);
    switch (type) {
    case BINDLOG_EVENT_BIND:
        ev->session_id = choose_id(r, m, ev->key, e->sid);
        ev->expect = choose_expect(r, m, ev->key, e->expect);
        ev->reason = choose_reason(r, e->reason);
        choose_origin(r, &e->o);
        break;
    case BINDLOG_EVENT_NEW_SESSION:
        ev->session_id = choose_id(r, m, ev->key, e->sid);
        ev->reason = choose_reason(r, e->reason);
        choose_origin(r, &e->o);
        break;
    case BINDLOG_EVENT_SPLIT:
        /* parent: usually the current binding, so the CAS can succeed */
        ev->expect = choose_id(r, m, ev->key, e->expect);
        ev->session_id = choose_id(r, m, ev->key, e->sid);
        ev->generation = choose_generation(r, m, ev->key);
        choose_origin(r, &e->o);
        break;
    default:
        ev->reason = choose_reason(r, e->reason);
        break;
    }
    ev->origin = e->o.p;
    ev->origin_len = e->o.n;
}

/* Call the public function for one event, as a gateway would. */
static int call_one(bindlog *h, const bindlog_event *ev, bindlog_result *out)
{
    switch (ev->type) {
    case BINDLOG_EVENT_BIND:
        return bindlog_bind(h, ev->key, ev->session_id, ev->expect, ev->reason, ev->origin,
                            ev->origin_len, out);
    case BINDLOG_EVENT_NEW_SESSION:
        return bindlog_new_session(h, ev->key, ev->session_id, ev->reason, ev->origin,
                                   ev->origin_len, out);
    case BINDLOG_EVENT_SPLIT:
        return bindlog_split(h, ev->key, ev->expect, ev->session_id, ev->generation, ev->origin,
                             ev->origin_len, out);
    case BINDLOG_EVENT_INVALIDATE:
        return bindlog_invalidate(h, ev->key, ev->reason, out);
    default:
        return bindlog_unbind(h, ev->key, ev->reason, out);
    }
}

static void same_result(const bindlog_result *a, const bindlog_result *b, const char *what)
{
    if (a->outcome != b->outcome || a->lsn != b->lsn || a->generation != b->generation ||
        strcmp(a->session_id, b->session_id) != 0)
        die("%s: result differs: store {%s lsn %llu gen %llu sid '%s'} model {%s lsn %llu gen "
            "%llu sid '%s'}",
            what, bindlog_code_name(a->outcome), (unsigned long long)a->lsn,
            (unsigned long long)a->generation, a->session_id, bindlog_code_name(b->outcome),
            (unsigned long long)b->lsn, (unsigned long long)b->generation, b->session_id);
}

static void same_rc(int got, int want, const char *what, const bindlog_event *ev)
{
    if (got != want)
        die("%s (%s key '%.40s'): store returned %s, model %s", what,
            bindlog_event_name(ev->type), ev->key ? ev->key : "(null)", bindlog_code_name(got),
            bindlog_code_name(want));
}

/* ---- comparisons of the whole state ------------------------------------- */

static void check_digest(bindlog *h, const fm_model *m)
{
    unsigned char d1[BINDLOG_DIGEST_SIZE], d2[BINDLOG_DIGEST_SIZE];
    uint64_t head;
    int rc = bindlog_digest(h, d1, &head);
    if (rc != 0)
        die("bindlog_digest: %s", bindlog_code_name(rc));
    if (head != m->head_lsn) {
        /* say what the store's other views show, to tell a passing
         * snapshot from a lost event: the head once more, and the stats */
        uint64_t again = 0;
        bindlog_stats st;
        memset(&st, 0, sizeof st);
        int rc2 = bindlog_digest(h, d1, &again);
        int rc3 = bindlog_stats_get(h, &st);
        die("head lsn: store %llu, model %llu (then: digest %s head %llu; stats %s head %llu "
            "checkpoint %llu log records %llu)",
            (unsigned long long)head, (unsigned long long)m->head_lsn, bindlog_code_name(rc2),
            (unsigned long long)again, bindlog_code_name(rc3), (unsigned long long)st.head_lsn,
            (unsigned long long)st.checkpoint_lsn, (unsigned long long)st.log_records);
    }
    fm_digest(m, d2);
    if (memcmp(d1, d2, sizeof(d1)) != 0) {
        char a[33], b[33];
        bindlog_digest_hex(d1, a);
        bindlog_digest_hex(d2, b);
        die("digest: store %s, model %s", a, b);
    }
}

static void check_get(bindlog *h, const fm_model *m, const char *key)
{
    bindlog_binding out;
    int rc = bindlog_get(h, key, &out);
    size_t n = strlen(key);
    if (n == 0 || n > BINDLOG_KEY_MAX) {
        if (rc != BINDLOG_EINVAL)
            die("get of a bad key: %s", bindlog_code_name(rc));
        return;
    }
    const fm_binding *b = fm_binding_get(m, key);
    int want = b && b->sid_len ? 0 : BINDLOG_ENOTFOUND;
    if (rc != want)
        die("get '%.40s': store %s, model %s", key, bindlog_code_name(rc),
            bindlog_code_name(want));
    if (out.generation != (b ? b->generation : 0) || strcmp(out.session_id, b ? b->sid : ""))
        die("get '%.40s': binding differs", key);
    if (rc == 0 && (out.lsn != b->lsn || out.updated_ms != b->updated_ms))
        die("get '%.40s': lsn/time differ", key);
    if (out.last_activity_ms != (b ? b->last_activity_ms : 0))
        die("get '%.40s': last activity: store %lld, model %lld", key,
            (long long)out.last_activity_ms, (long long)(b ? b->last_activity_ms : 0));
}

static void check_session_get(bindlog *h, const fm_model *m, const char *id)
{
    bindlog_session out;
    unsigned char buf[8];
    int rc = bindlog_session_get(h, id, &out, buf, sizeof(buf));
    size_t n = strlen(id);
    int valid = n > 0 && n <= BINDLOG_ID_MAX;
    for (size_t i = 0; valid && i < n; i++)
        valid = (unsigned char)id[i] >= 0x20 && (unsigned char)id[i] != 0x7f;
    const fm_session *s = valid ? fm_session_get(m, id) : NULL;
    int want = !valid ? BINDLOG_EINVAL : s ? 0 : BINDLOG_ENOTFOUND;
    if (rc != want)
        die("session_get '%.40s': store %s, model %s", id, bindlog_code_name(rc),
            bindlog_code_name(want));
    if (rc == 0 && (out.origin_len != s->origin_len ||
                    (s->origin_len && memcmp(buf, s->origin, s->origin_len < 8 ? s->origin_len : 8)) ||
                    out.ended_lsn != s->ended_lsn || strcmp(out.key, s->key) != 0))
        die("session_get '%.40s': differs", id);
}

static void check_all(bindlog *h, fm_model *m)
{
    bindlog_iter *it;
    int rc;
    size_t i;
    static unsigned char obuf[BINDLOG_ORIGIN_MAX];

    check_digest(h, m);
    fm_sort(m);

    if ((rc = bindlog_bindings_iter(h, &it)) != 0)
        die("bindings_iter: %s", bindlog_code_name(rc));
    bindlog_binding b;
    for (i = 0; (rc = bindlog_iter_next_binding(it, &b)) == 1; i++) {
        if (i >= m->nb)
            die("bindings: store has more than the model's %zu", m->nb);
        const fm_binding *mb = &m->b[i];
        if (strcmp(b.key, mb->key) || strcmp(b.session_id, mb->sid) ||
            b.generation != mb->generation || b.lsn != mb->lsn || b.updated_ms != mb->updated_ms ||
            b.last_activity_ms != mb->last_activity_ms)
            die("binding %zu ('%.40s') differs", i, mb->key);
    }
    if (rc != 0 || i != m->nb)
        die("bindings: %s after %zu of %zu", bindlog_code_name(rc), i, m->nb);
    bindlog_iter_close(it);

    if ((rc = bindlog_sessions_iter(h, &it)) != 0)
        die("sessions_iter: %s", bindlog_code_name(rc));
    bindlog_session s;
    for (i = 0; (rc = bindlog_iter_next_session(it, &s, obuf, sizeof(obuf))) == 1; i++) {
        if (i >= m->ns)
            die("sessions: store has more than the model's %zu", m->ns);
        const fm_session *ms = &m->s[i];
        if (strcmp(s.session_id, ms->id) || strcmp(s.key, ms->key) ||
            strcmp(s.parent_id, ms->parent) || s.created_lsn != ms->created_lsn ||
            s.ended_lsn != ms->ended_lsn || s.created_ms != ms->created_ms ||
            s.ended_ms != ms->ended_ms || strcmp(s.end_reason, ms->reason) ||
            s.origin_len != ms->origin_len ||
            (ms->origin_len && memcmp(obuf, ms->origin, ms->origin_len)))
            die("session %zu ('%.40s') differs", i, ms->id);
    }
    if (rc != 0 || i != m->ns)
        die("sessions: %s after %zu of %zu", bindlog_code_name(rc), i, m->ns);
    bindlog_iter_close(it);

    if ((rc = bindlog_log_iter(h, 0, UINT64_MAX, &it)) != 0)
        die("log_iter: %s", bindlog_code_name(rc));
    bindlog_record r;
    for (i = 0; (rc = bindlog_iter_next_record(it, &r)) == 1; i++) {
        if (i >= m->nlog)
            die("log: store has more than the model's %zu records", m->nlog);
        const fm_record *mr = &m->log[i];
        if (r.lsn != mr->lsn || r.type != mr->type || r.time_ms != mr->time_ms ||
            r.generation != mr->generation || strcmp(r.key, mr->key) ||
            r.key_len != strlen(mr->key) || strcmp(r.session_id, mr->sid) ||
            strcmp(r.other_id, mr->other) || strcmp(r.reason, mr->reason) ||
            r.origin_len != mr->origin_len || r.origin_present != mr->origin_present ||
            (mr->origin_len && memcmp(r.origin, mr->origin, mr->origin_len)))
            die("log record %llu differs (store: %s key '%.30s' sid '%s' other '%s' reason '%s' "
                "gen %llu origin %d/%zu; model: %s sid '%s' other '%s' reason '%s' gen %llu "
                "origin %d/%zu)",
                (unsigned long long)mr->lsn, bindlog_event_name(r.type), r.key, r.session_id,
                r.other_id, r.reason, (unsigned long long)r.generation, r.origin_present,
                r.origin_len, bindlog_event_name(mr->type), mr->sid, mr->other, mr->reason,
                (unsigned long long)mr->generation, mr->origin_present, mr->origin_len);
    }
    if (rc != 0 || i != m->nlog)
        die("log: %s after %zu of %zu", bindlog_code_name(rc), i, m->nlog);
    bindlog_iter_close(it);

    bindlog_stats st;
    if ((rc = bindlog_stats_get(h, &st)) != 0)
        die("stats: %s", bindlog_code_name(rc));
    uint64_t live_b = 0, live_s = 0;
    for (i = 0; i < m->nb; i++)
        live_b += m->b[i].sid_len != 0;
    for (i = 0; i < m->ns; i++)
        live_s += m->s[i].ended_lsn == 0;
    if (st.head_lsn != m->head_lsn || st.log_records != m->nlog || st.bindings != m->nb ||
        st.live_bindings != live_b || st.sessions != m->ns || st.live_sessions != live_s ||
        memcmp(st.applied, m->applied, sizeof(st.applied)) != 0)
        die("stats differ: head %llu/%llu records %llu/%zu bindings %llu/%zu live %llu/%llu "
            "sessions %llu/%zu live %llu/%llu",
            (unsigned long long)st.head_lsn, (unsigned long long)m->head_lsn,
            (unsigned long long)st.log_records, m->nlog, (unsigned long long)st.bindings, m->nb,
            (unsigned long long)st.live_bindings, (unsigned long long)live_b,
            (unsigned long long)st.sessions, m->ns, (unsigned long long)st.live_sessions,
            (unsigned long long)live_s);
}

/* ---- the program ------------------------------------------------------------ */

static bindlog *open_store(rd *r, int read_only)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *h;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.read_only = read_only;
    o.clock_ms = clock_fn;
    /* A tiny map makes the 64 KiB origins grow it. */
    o.map_size = u8(r) % 4 == 0 ? 64 * 1024 : 0;
    int rc = bindlog_open(&h, g_dir, &o);
    if (rc != 0)
        die("bindlog_open(%s): %s", g_dir, bindlog_code_name(rc));
    return h;
}

static void op_event(rd *r, bindlog *h, fm_model *m, int type)
{
    static ev_buf e; /* large: keep it off the stack */
    bindlog_result got, want;
    choose_event(r, m, type, &e);
    memset(&got, 0, sizeof(got));
    int rc = call_one(h, &e.ev, &got);
    int mrc = fm_apply(m, &e.ev, g_clock, &want);
    if (g_trace)
        fprintf(stderr, "op %u: %s key '%.30s' sid '%.30s' expect '%.30s' -> %s gen %llu lsn %llu\n",
                g_op, bindlog_event_name(type), e.ev.key, e.ev.session_id ? e.ev.session_id : "-",
                e.ev.expect ? e.ev.expect : "-", bindlog_code_name(rc),
                (unsigned long long)got.generation, (unsigned long long)got.lsn);
    same_rc(rc, mrc, "event", &e.ev);
    if (rc >= 0)
        same_result(&got, &want, bindlog_event_name(type));
    if (u8(r) % 4 == 0)
        check_get(h, m, e.ev.key);
}

/* A batch of 0..6 events, some of them misusing fields or types. */
static void op_batch(rd *r, bindlog *h, fm_model *m)
{
    static ev_buf e[6];
    bindlog_event ev[6];
    bindlog_result got[6], want[6];
    size_t n = u8(r) % 7, gi = 99, wi = 99;

    for (size_t i = 0; i < n; i++) {
        unsigned t = u8(r);
        int type = 1 + (int)(t % 5);
        choose_event(r, m, type, &e[i]);
        ev[i] = e[i].ev;
        switch (t >> 4) {
        case 1: /* a field the type does not take */
            if (type == BINDLOG_EVENT_NEW_SESSION || type >= BINDLOG_EVENT_INVALIDATE)
                ev[i].expect = "A";
            else if (type == BINDLOG_EVENT_SPLIT)
                ev[i].reason = "r";
            break;
        case 2:
            if (type >= BINDLOG_EVENT_INVALIDATE)
                ev[i].session_id = "A";
            break;
        case 3:
            if (type >= BINDLOG_EVENT_INVALIDATE) {
                ev[i].origin = g_big;
                ev[i].origin_len = 0;
            }
            break;
        case 4:
            ev[i].type = (t & 1) ? 0 : BINDLOG_EVENT_COUNT; /* unknown types */
            break;
        default:
            break;
        }
    }
    int rc = bindlog_apply_batch(h, ev, n, got, &gi);
    int mrc = fm_apply_batch(m, ev, n, g_clock, want, &wi);
    if (g_trace)
        fprintf(stderr, "op %u: batch of %zu -> %s (index %zu)\n", g_op, n, bindlog_code_name(rc),
                rc < 0 ? gi : 0);
    if (rc != mrc)
        die("batch of %zu: store returned %s (at %zu), model %s (at %zu)", n,
            bindlog_code_name(rc), gi, bindlog_code_name(mrc), wi);
    if (rc < 0 && gi != wi)
        die("batch of %zu: %s at event %zu in the store, %zu in the model", n,
            bindlog_code_name(rc), gi, wi);
    for (size_t i = 0; rc == 0 && i < n; i++)
        same_result(&got[i], &want[i], "batch event");
}

/* A write through a read-only handle: BINDLOG_EINVAL for bad arguments,
 * else BINDLOG_EREADONLY, and nothing written either way. */
static void op_read_only(rd *r, bindlog *h, fm_model *m)
{
    static ev_buf e;
    bindlog *ro = open_store(r, 1);
    (void)h;
    choose_event(r, m, 1 + (int)(u8(r) % 5), &e);
    int want = fm_check_event(&e.ev);
    if (want == 0)
        want = BINDLOG_EREADONLY;
    bindlog_result res;
    int rc = u8(r) % 2 ? call_one(ro, &e.ev, &res) : bindlog_apply_batch(ro, &e.ev, 1, &res, NULL);
    same_rc(rc, want, "read-only write", &e.ev);
    check_digest(ro, m);
    bindlog_close(ro);
}

/* bindlog_route with a policy of any mode (some invalid), idle times
 * around the clock's steps, daily boundaries behind the clock (or bad),
 * and a fresh id from the pool (new, taken, the key's own, invalid). */
static void op_route(rd *r, bindlog *h, fm_model *m)
{
    char kb[ARG], ib[ARG];
    const char *key = choose_key(r, kb);
    const char *fresh = choose_id(r, m, key, ib);
    unsigned c = u8(r), x = u8(r), y = u8(r);
    bindlog_policy p = {(int)(c % 6), (int64_t)(x % 16) * 2000 + (x & 0x10),
                        g_clock - (int64_t)(y % 16) * 1000};
    if ((c & 0xe0) == 0xe0)
        p.idle_ms = -(int64_t)(x % 3); /* 0 or negative */
    if (p.daily_boundary_ms < 0)
        p.daily_boundary_ms = 0;
    if ((y & 0x70) == 0x70)
        p.daily_boundary_ms = -1;
    if (c % 6 == 5)
        p.mode = 5 + (int)(x % 3); /* not a mode */
    const bindlog_policy *pp = (c & 0x31) == 0x31 ? NULL : &p;
    const char *fr = (y & 0x83) == 0x83 ? NULL : fresh;
    bindlog_route_result got, want;
    memset(&got, 0, sizeof got);
    int rc = bindlog_route(h, key, g_clock, pp, fr, NULL, 0, &got);
    int mrc = fm_route(m, key, g_clock, pp, fr, &want);
    if (g_trace)
        fprintf(stderr, "op %u: route key '%.30s' fresh '%.30s' mode %d idle %lld -> %s\n", g_op,
                key, fr ? fr : "-", pp ? pp->mode : -1, (long long)p.idle_ms,
                bindlog_code_name(rc));
    if (rc != mrc)
        die("route '%.40s': store %s (%s), model %s", key, bindlog_code_name(rc),
            bindlog_last_error(), bindlog_code_name(mrc));
    if (rc >= 0 && (got.outcome != want.outcome || got.reason != want.reason ||
                    got.lsn != want.lsn || got.generation != want.generation ||
                    got.last_activity_ms != want.last_activity_ms ||
                    strcmp(got.session_id, want.session_id) != 0 ||
                    strcmp(got.previous_id, want.previous_id) != 0))
        die("route '%.40s': result differs (store %d reason %d lsn %llu gen %llu act %lld "
            "sid '%s' prev '%s'; model %d reason %d lsn %llu gen %llu act %lld sid '%s' prev '%s')",
            key, got.outcome, got.reason, (unsigned long long)got.lsn,
            (unsigned long long)got.generation, (long long)got.last_activity_ms, got.session_id,
            got.previous_id, want.outcome, want.reason, (unsigned long long)want.lsn,
            (unsigned long long)want.generation, (long long)want.last_activity_ms,
            want.session_id, want.previous_id);
    if (u8(r) % 4 == 0)
        check_get(h, m, key);
}

/* bindlog_expire with a cut-off somewhere behind the clock (or bad), a
 * prefix cut from a key, sometimes a dry run. */
static void op_expire(rd *r, bindlog *h, fm_model *m)
{
    char kb[ARG];
    unsigned c = u8(r), x = u8(r);
    const char *key = choose_key(r, kb);
    size_t cut = x % 24;
    if (cut < strlen(kb))
        kb[cut] = '\0';
    const char *prefix = (c & 0x0c) == 0x0c ? NULL : key;
    int64_t cutoff = g_clock - (int64_t)(x >> 3) * 60000;
    if ((c & 0x70) == 0x70 || cutoff < 0)
        cutoff = 0;
    int dry = (c & 1) != 0;
    uint64_t got = 0, want = 0;
    int rc = bindlog_expire(h, cutoff, prefix, dry, &got);
    int mrc = fm_expire(m, g_clock, cutoff, prefix, dry, &want);
    if (g_trace)
        fprintf(stderr, "op %u: expire prefix '%.30s' cutoff %lld dry %d -> %s %llu\n", g_op,
                prefix ? prefix : "-", (long long)cutoff, dry, bindlog_code_name(rc),
                (unsigned long long)got);
    if (rc != mrc || (rc == 0 && got != want))
        die("expire: store %s %llu (%s), model %s %llu", bindlog_code_name(rc),
            (unsigned long long)got, bindlog_last_error(), bindlog_code_name(mrc),
            (unsigned long long)want);
}

static void op_reads(rd *r, bindlog *h, fm_model *m)
{
    char buf[ARG];
    check_get(h, m, choose_key(r, buf));
    check_session_get(h, m, choose_id(r, m, NULL, buf));
}

static void op_clock(rd *r)
{
    unsigned c = u8(r), v = u8(r);
    switch (c % 4) {
    case 0: g_clock += v; break;
    case 1: g_clock += (int64_t)v * 60000; break;
    case 2: g_clock -= (int64_t)v * 1000; break; /* the wall clock went back */
    default: g_clock += 1; break;
    }
    if (g_clock < 0)
        g_clock = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd r = {data, size, 0};
    fm_model m;
    bindlog *h;

    if (g_dir[0] == '\0')
        LLVMFuzzerInitialize(NULL, NULL);
    rm_store();
    g_clock = 1767225600000; /* 2026-01-01 */
    g_fresh = 0;
    fm_init(&m);
    h = open_store(&r, 0);

    for (g_op = 0; r.i < r.n && g_op < MAX_OPS; g_op++) {
        unsigned op = u8(&r) % 19;
        switch (op) {
        case 0: case 1: case 2:
            op_event(&r, h, &m, BINDLOG_EVENT_BIND);
            break;
        case 3: case 4:
            op_event(&r, h, &m, BINDLOG_EVENT_NEW_SESSION);
            break;
        case 5: case 6: case 7:
            op_event(&r, h, &m, BINDLOG_EVENT_SPLIT);
            break;
        case 8:
            op_event(&r, h, &m, BINDLOG_EVENT_INVALIDATE);
            break;
        case 9:
            op_event(&r, h, &m, BINDLOG_EVENT_UNBIND);
            break;
        case 10: case 11:
            op_batch(&r, h, &m);
            break;
        case 12:
            if (g_trace)
                fprintf(stderr, "op %u: reopen\n", g_op);
            bindlog_close(h);
            h = open_store(&r, 0);
            check_all(h, &m);
            break;
        case 13:
            op_clock(&r);
            break;
        case 14:
            op_read_only(&r, h, &m);
            break;
        case 16: case 17:
            op_route(&r, h, &m);
            break;
        case 18:
            op_expire(&r, h, &m);
            break;
        default:
            op_reads(&r, h, &m);
            break;
        }
        check_digest(h, &m);
    }
    check_all(h, &m);
    /* replay equality: the log re-derives the state, last activity included */
    bindlog_check_report rep;
    int crc = bindlog_check(h, &rep, NULL, NULL);
    if (crc != 0 || rep.problems != 0 ||
        memcmp(rep.state_digest, rep.replay_digest, BINDLOG_DIGEST_SIZE) != 0)
        die("check after the program: %s, %llu problems: %s", bindlog_code_name(crc),
            (unsigned long long)rep.problems, rep.message);
    bindlog_close(h);
    fm_free(&m);
    return 0;
}
