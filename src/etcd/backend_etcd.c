/*
 * backend_etcd.c -- the etcd backend: open, the write path, reads,
 * iterators, statistics and digest (docs/scale-out.md).
 *
 * Location: "etcd://HOST:PORT[,HOST:PORT...]/PREFIX"; the key layout under
 * PREFIX is described in etcd_store.h.
 *
 * The write path.  Mutating calls queue on the store's group-commit queue
 * (group.c).  The leader reads meta and every key the group's events name
 * (their bindings, the sessions they name) in one read-only Txn, whose
 * revision R is the group's, then the sessions those bindings are bound to
 * in a second one (read_chunk; etcd_wset.c's prefetch): two round trips
 * whatever the group's size.  It then decides each event of the group in
 * order with bl_decide() over a write set: the prefetched values (any key
 * not prefetched is read singly at R) through an overlay of the group's
 * own pending puts, so each event sees the ones before it; a batch that
 * fails half-way is rolled back to its savepoint.  The Txn then compares
 * meta "head" and every key whose value a decision used against the
 * mod_revision read, and puts everything plus the new head and counters.
 * The second read Txn holds only if meta "head" is unchanged since R, so
 * all values are R's (BL_ES_MOVED: read again).  A group with nothing
 * APPLIED sends no Txn: STALE, MOVED and ALREADY were decided on the
 * linearizable reads of R.  A group whose Txn would exceed etcd's
 * --max-txn-ops or our request size bound is cut into several Txns between
 * requests (never inside one: a request too big for one Txn alone is
 * BINDLOG_EINVAL).  When the compares fail (another process committed
 * since R), the group is re-read and re-decided from scratch, at most
 * RACE_RETRIES times with jittered backoff, then BINDLOG_EBUSY.
 *
 * Unknown outcomes.  A Txn that reached etcd but whose answer was lost
 * (the client's `retried` flag with failed compares, BINDLOG_EIO, and
 * BINDLOG_ENOSPC which etcd answers to the write that crosses its quota
 * *after* applying it) may or may not have applied.  resolve() re-reads
 * the head and the log records the Txn would have written: if they are
 * byte for byte ours, it applied.  If not, a "fence" Txn re-puts meta
 * "head" unchanged under the same compare, which makes it impossible for
 * our lost Txn to apply later; then the group is simply re-decided.  When
 * etcd cannot be read for RESOLVE_MS, the outcome is truly unknown: the
 * store's handles turn sticky-failed (BINDLOG_EPANIC; reopen), since
 * reporting either APPLIED or an error could be a lie.
 *
 * While a fenced import runs (meta "import" exists, etcd_maint.c), every
 * write is refused with BINDLOG_EBUSY.
 */
#define _GNU_SOURCE
#include "etcd/etcd_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RACE_RETRIES 16
#define RESOLVE_MS 5000
/* Raw key + value bytes one Txn may carry: base64 inflates them by 4/3 and
 * etcd refuses requests over --max-request-bytes (default 1.5 MiB). */
#define TXN_MAX_BYTES (900u * 1024u)

/* ---- the registry of open stores -------------------------------------------- */

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static bl_estore *registry;

static void store_free(bl_estore *st)
{
    if (st == NULL)
        return;
    bl_etcd_close(st->c);
    bl_group_destroy(&st->g);
    free(st->location);
    free(st->endpoints);
    free(st->prefix);
    free(st);
}

/* Split "etcd://EPS/PREFIX".  BINDLOG_EINVAL if malformed. */
static int parse_location(const char *loc, char **eps, unsigned char **prefix, size_t *plen)
{
    const char *p = loc + strlen("etcd://");
    const char *slash = strchr(p, '/');
    *eps = NULL;
    *prefix = NULL;
    if (slash == NULL || slash == p || slash[1] == '\0')
        return BINDLOG_EINVAL; /* no endpoints, or no PREFIX */
    *eps = strndup(p, (size_t)(slash - p));
    *plen = strlen(slash + 1) + 1;
    *prefix = malloc(*plen);
    if (*eps == NULL || *prefix == NULL) {
        free(*eps);
        free(*prefix);
        return BINDLOG_ENOMEM;
    }
    memcpy(*prefix, slash + 1, *plen - 1);
    (*prefix)[*plen - 1] = '/';
    return 0;
}

/*
 * Make the store: an atomic Txn that holds only if nothing at all is under
 * PREFIX/ and no enclosing prefix holds a store (whose tables would then
 * contain ours), and puts the meta records.
 */
static int create_store(bl_estore *st)
{
    bl_ebuf b = {0}, e = {0}, keys[5] = {{0}}, anc[16] = {{0}};
    bl_etcd_cmp cmps[1 + 16];
    bl_etcd_op ops[4];
    bl_etcd_txn_result res = {0};
    unsigned char fmt[4], head[16] = {0}, counts[BL_ES_COUNTS_BYTES] = {0};
    size_t nc = 0, na = 0;
    int rc;

    bl_put32(fmt, BINDLOG_FORMAT_VERSION);
    if ((rc = bl_ebuf_append(&b, st->prefix, st->prefix_len)) != 0 ||
        (rc = bl_ebuf_reserve(&e, b.len + 2)) != 0)
        goto out;
    e.len = bl_etcd_prefix_end(b.p, b.len, e.p);
    cmps[nc++] = (bl_etcd_cmp){.target = BL_ETCD_CMP_VERSION, .result = BL_ETCD_EQUAL,
                               .key = b.p, .key_len = b.len, .range_end = e.p,
                               .range_end_len = e.len, .number = 0};
    /* enclosing prefixes "a" and "a/b" of "a/b/c/": their magic must not exist */
    for (size_t i = 0; i + 1 < st->prefix_len && na < 16; i++) {
        if (st->prefix[i] != '/' || i == 0)
            continue;
        if ((rc = bl_ebuf_append(&anc[na], st->prefix, i + 1)) != 0 ||
            (rc = bl_ebuf_append(&anc[na], "m/magic", 7)) != 0)
            goto out;
        cmps[nc++] = (bl_etcd_cmp){.target = BL_ETCD_CMP_CREATE, .result = BL_ETCD_EQUAL,
                                   .key = anc[na].p, .key_len = anc[na].len, .number = 0};
        na++;
    }
    if ((rc = bl_es_key(st, BL_ES_META, "magic", 5, &keys[0])) != 0 ||
        (rc = bl_es_key(st, BL_ES_META, "format", 6, &keys[1])) != 0 ||
        (rc = bl_es_key(st, BL_ES_META, "head", 4, &keys[2])) != 0 ||
        (rc = bl_es_key(st, BL_ES_META, "counts", 6, &keys[3])) != 0)
        goto out;
    ops[0] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = keys[0].p, .key_len = keys[0].len,
                          .value = BL_ES_MAGIC, .value_len = strlen(BL_ES_MAGIC)};
    ops[1] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = keys[1].p, .key_len = keys[1].len,
                          .value = fmt, .value_len = 4};
    ops[2] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = keys[2].p, .key_len = keys[2].len,
                          .value = head, .value_len = 16};
    ops[3] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = keys[3].p, .key_len = keys[3].len,
                          .value = counts, .value_len = sizeof counts};
    rc = bl_etcd_txn(st->c, cmps, nc, ops, 4, NULL, 0, &res);
    /* a failed compare (someone else made it, or something else is there)
     * and a retried Txn are sorted out by the caller's re-read */
out:
    bl_etcd_txn_result_free(&res);
    bl_ebuf_free(&b);
    bl_ebuf_free(&e);
    for (size_t i = 0; i < 5; i++)
        bl_ebuf_free(&keys[i]);
    for (size_t i = 0; i < 16; i++)
        bl_ebuf_free(&anc[i]);
    return rc;
}

/* 1 if anything at all is stored under PREFIX/, 0 if not, or an error. */
static int prefix_used(bl_estore *st)
{
    bl_ebuf e = {0};
    bl_etcd_kvs kvs = {0};
    int rc = bl_ebuf_reserve(&e, st->prefix_len + 2);
    if (rc == 0) {
        e.len = bl_etcd_prefix_end(st->prefix, st->prefix_len, e.p);
        rc = bl_etcd_range(st->c, st->prefix, st->prefix_len, e.p, e.len, 0, 1,
                           BL_ETCD_KEYS_ONLY, &kvs);
        if (rc == 0)
            rc = kvs.n > 0;
    }
    bl_etcd_kvs_free(&kvs);
    bl_ebuf_free(&e);
    return rc;
}

/* Check (and unless read-only, create) the store. */
static int attach(bl_estore *st, int read_only)
{
    bl_es_meta m;
    for (int attempt = 0; attempt < 3; attempt++) {
        int rc = bl_es_meta_read(st, 0, &m);
        if (rc != BINDLOG_ENOTSTORE)
            return rc;
        /* no magic: an empty prefix is a store to make; anything else is
         * not ours */
        if ((rc = prefix_used(st)) < 0)
            return rc;
        if (rc == 1) {
            /* a creator in another process may be half-way: look again */
            if ((rc = bl_es_meta_read(st, 0, &m)) != BINDLOG_ENOTSTORE)
                return rc;
            return BINDLOG_ENOTSTORE;
        }
        if (read_only)
            return BINDLOG_ENOTFOUND;
        if ((rc = create_store(st)) != 0)
            return rc;
    }
    return BINDLOG_ENOTSTORE;
}

/* The --max-txn-ops of the servers: BINDLOG_ETCD_MAX_TXN_OPS, else etcd's
 * default (there is no API to ask etcd). */
static unsigned max_txn_ops(void)
{
    const char *v = getenv("BINDLOG_ETCD_MAX_TXN_OPS");
    if (v != NULL && *v != '\0') {
        char *end;
        unsigned long n = strtoul(v, &end, 10);
        if (*end == '\0' && n >= 16 && n <= 1000000)
            return (unsigned)n;
    }
    return BL_ETCD_DEFAULT_MAX_TXN_OPS;
}

static int etcd_open(bindlog *h, const bindlog_options *o)
{
    bl_estore *st;
    bl_etcd_options eo = BL_ETCD_OPTIONS_INIT;
    int rc;

    (void)o; /* durability: an acknowledged Txn is fsynced on a quorum already */
    pthread_mutex_lock(&registry_mu);
    for (st = registry; st != NULL; st = st->next)
        if (strcmp(st->location, h->path) == 0)
            break;
    if (st != NULL) {
        st->refs++;
        pthread_mutex_unlock(&registry_mu);
        h->be = st;
        return 0;
    }
    pthread_mutex_unlock(&registry_mu);

    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return BINDLOG_ENOMEM;
    bl_group_init(&st->g);
    st->refs = 1;
    if ((st->location = strdup(h->path)) == NULL) {
        rc = BINDLOG_ENOMEM;
        goto fail;
    }
    if ((rc = parse_location(h->path, &st->endpoints, &st->prefix, &st->prefix_len)) != 0)
        goto fail;
    if (memchr(st->prefix, '\0', st->prefix_len) != NULL) {
        rc = BINDLOG_EINVAL;
        goto fail;
    }
    st->max_txn_ops = eo.max_txn_ops = max_txn_ops();
    if ((rc = bl_etcd_open(st->endpoints, &eo, &st->c)) != 0)
        goto fail;
    if ((rc = attach(st, h->read_only)) != 0) {
        rc = bl_es_error(rc, BINDLOG_EIO);
        goto fail;
    }

    /* another thread may have opened the same store meanwhile: share its */
    pthread_mutex_lock(&registry_mu);
    bl_estore *other;
    for (other = registry; other != NULL; other = other->next)
        if (strcmp(other->location, h->path) == 0)
            break;
    if (other != NULL) {
        other->refs++;
        pthread_mutex_unlock(&registry_mu);
        store_free(st);
        h->be = other;
        return 0;
    }
    st->next = registry;
    registry = st;
    pthread_mutex_unlock(&registry_mu);
    h->be = st;
    return 0;
fail:
    store_free(st);
    return rc;
}

static void etcd_close(bindlog *h)
{
    bl_estore *st = bl_es_of(h);
    pthread_mutex_lock(&registry_mu);
    if (--st->refs > 0) {
        pthread_mutex_unlock(&registry_mu);
        h->be = NULL;
        return;
    }
    for (bl_estore **p = &registry; *p != NULL; p = &(*p)->next)
        if (*p == st) {
            *p = st->next;
            break;
        }
    pthread_mutex_unlock(&registry_mu);
    store_free(st);
    h->be = NULL;
}

/* ---- the write path ------------------------------------------------------------ */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Jittered exponential backoff after a lost race: 1..2^attempt ms, <= 64. */
static void backoff(int attempt)
{
    static _Thread_local unsigned seed;
    if (seed == 0)
        seed = (unsigned)mono_ms() ^ (unsigned)(uintptr_t)&seed;
    long cap = 1L << (attempt < 6 ? attempt : 6);
    sleep_ms(1 + (long)(rand_r(&seed) % (unsigned)cap));
}

static void fill_result(bindlog_result *r, const bl_plan *p)
{
    r->outcome = p->outcome;
    r->lsn = p->outcome == BINDLOG_APPLIED ? p->rec.lsn : 0;
    r->generation = p->after.generation;
    memcpy(r->session_id, p->after.sid, p->after.sid_len);
    r->session_id[p->after.sid_len] = '\0';
}

static void counts_apply(bl_es_counts *c, const bl_plan *p)
{
    c->applied[p->rec.type]++;
    c->live_bindings += (uint64_t)(int64_t)p->d_live_bindings;
    c->live_sessions += (uint64_t)(int64_t)p->d_live_sessions;
}

/* What one attempt at a chunk of the group has decided so far. */
typedef struct chunk {
    bl_estore *st;
    bl_es_wset *ws;
    bl_encoded enc;
    bl_es_meta m;          /* meta at the chunk's read revision */
    uint64_t lsn;          /* head after the events decided so far */
    int64_t time_ms;
    bl_es_counts counts;
    bl_ebuf first_rec, last_rec; /* the chunk's first and last records */
    uint64_t first_lsn;
    int fatal;             /* a storage error: the whole chunk fails */
} chunk;

/* Decide one event into the write set.  Returns its outcome or error. */
static int apply_one(chunk *c, bindlog *h, const bl_event *ev, bindlog_result *res, char *why)
{
    bl_view view;
    bl_plan plan;
    int64_t t_ms = ev->time_ms != 0 ? ev->time_ms : bl_now_ms(h); /* 0: the clock */
    int rc;

    if (t_ms < c->time_ms)
        t_ms = c->time_ms; /* never backwards along the log */
    bl_es_wset_view(c->ws, &view);
    rc = bl_decide(&view, ev, c->lsn + 1, t_ms, &plan);
    if (bl_es_wset_error(c->ws) != 0) {
        c->fatal = bl_es_wset_error(c->ws);
        return c->fatal;
    }
    if (rc < 0) {
        bl_plan_explain(&plan, rc, why, BL_GREQ_MSG_MAX);
        return rc;
    }
    fill_result(res, &plan);
    if (rc != BINDLOG_APPLIED)
        return rc;
    if ((rc = bl_plan_encode(&plan, &c->enc)) != 0 ||
        (rc = bl_es_wset_apply(c->ws, &plan, &c->enc)) != 0) {
        c->fatal = rc;
        return rc;
    }
    bl_ebuf *keep = c->first_lsn == 0 ? &c->first_rec : &c->last_rec;
    if (c->first_lsn == 0)
        c->first_lsn = plan.rec.lsn;
    keep->len = 0;
    if ((rc = bl_ebuf_append(keep, c->enc.buf + c->enc.rec_off, c->enc.rec_len)) != 0) {
        c->fatal = rc;
        return rc;
    }
    c->lsn++;
    c->time_ms = t_ms;
    counts_apply(&c->counts, &plan);
    return BINDLOG_APPLIED;
}

/* Decide a request (all of a batch or nothing).  Returns 1 if it queued
 * writes. */
static int apply_req(chunk *c, bl_greq *r)
{
    size_t sp = bl_es_wset_savepoint(c->ws);
    uint64_t lsn0 = c->lsn, first0 = c->first_lsn;
    int64_t t0 = c->time_ms;
    bl_es_counts c0 = c->counts;
    int wrote = 0;

    r->rc = 0;
    r->err_index = 0;
    for (size_t i = 0; i < r->n; i++) {
        int rc = apply_one(c, r->h, &r->ev[i], &r->out[i], r->msg);
        r->outcomes[i] = rc;
        if (rc < 0) {
            r->rc = rc;
            r->err_index = i;
            break;
        }
        wrote |= rc == BINDLOG_APPLIED;
    }
    if (r->rc != 0 && wrote) {
        bl_es_wset_rollback(c->ws, sp);
        c->lsn = lsn0;
        c->time_ms = t0;
        c->counts = c0;
        c->first_lsn = first0;
        wrote = 0;
    }
    return wrote;
}

/* Name every key the events of the requests from `first` on read directly:
 * the binding of the event's key, and the sessions it names (BIND's
 * target and expected session, NEW_SESSION's id, SPLIT's child and
 * parent).  The sessions bound to those keys follow in the prefetch's
 * second round.  At most one read Txn's worth: a chunk cannot hold more
 * applied events than that anyway (each puts >= 3 keys), and the events
 * beyond read their keys singly. */
static int want_keys(chunk *c, bl_greq *first)
{
    size_t cap = c->st->max_txn_ops - 2 - 3; /* meta and head ranges; one event's keys */
    int rc = 0;
    for (bl_greq *r = first; r != NULL && rc == 0; r = r->next)
        for (size_t i = 0; i < r->n && rc == 0; i++) {
            const bl_event *ev = &r->ev[i];
            if (bl_es_wset_nwant(c->ws) > cap)
                return 0;
            if (bl_event_check(ev) != 0)
                continue; /* bl_decide refuses it without reading */
            rc = bl_es_wset_want(c->ws, BL_ES_BINDINGS, ev->key, ev->key_len);
            if (rc == 0 && ev->sid != NULL && ev->sid_len != 0 &&
                (ev->type == BINDLOG_EVENT_BIND || ev->type == BINDLOG_EVENT_NEW_SESSION ||
                 ev->type == BINDLOG_EVENT_SPLIT))
                rc = bl_es_wset_want(c->ws, BL_ES_SESSIONS, ev->sid, ev->sid_len);
            if (rc == 0 && ev->expect != NULL && ev->expect_len != 0 &&
                (ev->type == BINDLOG_EVENT_BIND || ev->type == BINDLOG_EVENT_SPLIT))
                rc = bl_es_wset_want(c->ws, BL_ES_SESSIONS, ev->expect, ev->expect_len);
        }
    return rc;
}

/*
 * The reads of one attempt: meta and the prefetch of the group's keys in
 * one read Txn (its revision is the chunk's revision R), then the sessions
 * those bindings are bound to (etcd_store.h, bl_es_wset_prefetch).  Two
 * round trips for a group of any size up to --max-txn-ops keys.
 */
static int read_chunk(chunk *c, bl_greq *first)
{
    bl_ebuf b = {0}, e = {0};
    bl_etcd_kvs meta = {0};
    bl_etcd_op op;
    int64_t rev = 0;
    int rc;

    bl_es_wset_reset(c->ws, 0);
    if ((rc = bl_es_table_range(c->st, BL_ES_META, NULL, 0, &b, &e)) != 0 ||
        (rc = want_keys(c, first)) != 0)
        goto out;
    op = (bl_etcd_op){.type = BL_ETCD_OP_RANGE, .key = b.p, .key_len = b.len,
                      .range_end = e.p, .range_end_len = e.len};
    if ((rc = bl_es_wset_prefetch(c->ws, &op, 1, &meta, &rev)) != 0)
        goto out;
    rc = bl_es_meta_parse(c->st, &meta, rev, &c->m);
out:
    bl_etcd_kvs_free(&meta);
    bl_ebuf_free(&b);
    bl_ebuf_free(&e);
    return rc;
}

/* 1 if the write set no longer fits one Txn. */
static int too_big(const chunk *c)
{
    return bl_es_wset_nputs(c->ws) + 2 > c->st->max_txn_ops ||
           bl_es_wset_ncmps(c->ws) + 1 > c->st->max_txn_ops ||
           bl_es_wset_bytes(c->ws) > TXN_MAX_BYTES;
}

static void fail_range(bl_greq *from, const bl_greq *to, int rc)
{
    for (bl_greq *r = from; r != to; r = r->next) {
        r->rc = rc;
        r->err_index = 0;
        for (size_t i = 0; i < r->n; i++)
            r->outcomes[i] = rc;
    }
}

/*
 * Did our Txn, whose outcome is unknown, apply?  Returns 1 (yes), 0 (no,
 * and it never will: fenced), or an error when etcd could not tell within
 * RESOLVE_MS (then nobody can know).
 */
static int resolve(chunk *c)
{
    long deadline = mono_ms() + RESOLVE_MS;
    int rc = BINDLOG_EIO;

    while (mono_ms() < deadline) {
        bl_es_meta m;
        bl_etcd_kvs kvs = {0};
        if ((rc = bl_es_meta_read(c->st, 0, &m)) != 0) {
            if (rc == BINDLOG_EIO || rc == BINDLOG_ENOSPC) {
                sleep_ms(100);
                continue;
            }
            return rc;
        }
        if (m.head_lsn >= c->lsn) {
            /* our LSNs are taken: by us? */
            int ours = 1;
            for (int k = 0; k < 2 && ours && rc == 0; k++) {
                uint64_t lsn = k == 0 ? c->first_lsn : c->lsn;
                const bl_ebuf *want = k == 0 ? &c->first_rec : &c->last_rec;
                if (k == 1 && c->lsn == c->first_lsn)
                    break;
                char d[BL_ES_LSN_DIGITS];
                bl_es_lsn_format(lsn, d);
                rc = bl_es_get(c->st, BL_ES_LOG, d, sizeof d, m.revision, &kvs);
                if (rc == BINDLOG_ENOTFOUND) {
                    rc = 0; /* compacted since: the base moved past it */
                    ours = m.base_lsn >= lsn ? -1 : 0;
                } else if (rc == 0) {
                    ours = kvs.kvs[0].value_len == want->len &&
                           memcmp(kvs.kvs[0].value, want->p, want->len) == 0;
                }
                bl_etcd_kvs_free(&kvs);
            }
            if (rc == BINDLOG_EIO) {
                sleep_ms(100);
                continue;
            }
            if (rc != 0)
                return bl_es_error(rc, BINDLOG_EIO);
            if (ours < 0)
                return BINDLOG_EPANIC; /* compacted before we could look */
            if (ours)
                return 1;
            return 0; /* someone else's records: head moved past our compare */
        }
        if (m.head_mod != c->m.head_mod)
            return 0; /* head changed but not to ours: our compare can never hold */
        /* nothing happened yet: fence our Txn off by touching head */
        bl_ebuf hk = {0};
        unsigned char hv[16];
        bl_etcd_cmp cmp;
        bl_etcd_op op;
        bl_etcd_txn_result res = {0};
        bl_put64(hv, m.head_lsn);
        bl_put64(hv + 8, (uint64_t)m.head_time_ms);
        if ((rc = bl_es_key(c->st, BL_ES_META, "head", 4, &hk)) != 0)
            return rc;
        cmp = (bl_etcd_cmp){.target = BL_ETCD_CMP_MOD, .result = BL_ETCD_EQUAL, .key = hk.p,
                            .key_len = hk.len, .number = m.head_mod};
        op = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = hk.p, .key_len = hk.len, .value = hv,
                          .value_len = 16};
        rc = bl_etcd_txn(c->st->c, &cmp, 1, &op, 1, NULL, 0, &res);
        int ok = rc == 0 && res.succeeded;
        bl_etcd_txn_result_free(&res);
        bl_ebuf_free(&hk);
        if (ok)
            return 0; /* head moved under our compare: our Txn can never apply */
        if (rc != 0 && rc != BINDLOG_EIO && rc != BINDLOG_ENOSPC)
            return rc;
        if (rc != 0)
            sleep_ms(100);
        /* else: the compare failed: our Txn (or someone's) just landed: look again */
    }
    return rc < 0 ? rc : BINDLOG_EIO;
}

/*
 * Commit the requests from `first` on, as many as fit one Txn.  Returns the
 * first request not handled (NULL: all done).  Sets rc and outcomes of
 * every request it handled.
 */
static bl_greq *run_chunk(chunk *c, bl_greq *first)
{
    bl_estore *st = c->st;
    bl_greq *end = NULL;
    int rc = 0;

    for (int attempt = 0; attempt <= RACE_RETRIES; attempt++) {
        if (attempt > 0)
            backoff(attempt);
        if ((rc = read_chunk(c, first)) == BL_ES_MOVED)
            continue; /* the store changed between the read Txns: read again */
        if (rc != 0) {
            rc = bl_es_error(rc, BINDLOG_EIO);
            fail_range(first, NULL, rc);
            return NULL;
        }
        if (c->m.import_mod != 0) {
            /* a fenced import is writing the store (etcd_maint.c): its
             * fence moved meta "head", so nothing read before it commits */
            fail_range(first, NULL, BINDLOG_EBUSY);
            return NULL;
        }
        c->lsn = c->m.head_lsn;
        c->time_ms = c->m.head_time_ms;
        c->counts = c->m.counts;
        c->first_lsn = 0;
        c->fatal = 0;
        end = NULL;
        for (bl_greq *r = first; r != NULL; r = r->next) {
            size_t sp = bl_es_wset_savepoint(c->ws);
            uint64_t lsn0 = c->lsn, first0 = c->first_lsn;
            int64_t t0 = c->time_ms;
            bl_es_counts c0 = c->counts;
            int wrote = apply_req(c, r);
            if (c->fatal)
                break;
            if (wrote && too_big(c)) {
                bl_es_wset_rollback(c->ws, sp);
                c->lsn = lsn0;
                c->time_ms = t0;
                c->counts = c0;
                c->first_lsn = first0;
                if (r == first) {
                    /* alone too big for one Txn: never split a request */
                    fail_range(r, r->next, BINDLOG_EINVAL);
                    r->err_index = 0;
                    continue;
                }
                end = r;
                break;
            }
        }
        if (c->fatal) {
            rc = bl_es_error(c->fatal, BINDLOG_EIO);
            if (c->fatal == BL_ETCD_ECOMPACTED)
                continue; /* R was compacted under us: read again */
            fail_range(first, NULL, rc);
            return NULL;
        }
        if (bl_es_wset_nputs(c->ws) == 0)
            return end; /* nothing APPLIED: no Txn */

        /* the Txn: the write set, the new head and counters */
        bl_ebuf hk = {0}, ck = {0};
        unsigned char hv[16], cv[BL_ES_COUNTS_BYTES];
        bl_etcd_op extra[2];
        int succeeded = 0, retried = 0;
        bl_put64(hv, c->lsn);
        bl_put64(hv + 8, (uint64_t)c->time_ms);
        bl_es_counts_encode(cv, &c->counts);
        if ((rc = bl_es_key(st, BL_ES_META, "head", 4, &hk)) == 0 &&
            (rc = bl_es_key(st, BL_ES_META, "counts", 6, &ck)) == 0) {
            extra[0] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = hk.p, .key_len = hk.len,
                                    .value = hv, .value_len = 16};
            extra[1] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = ck.p, .key_len = ck.len,
                                    .value = cv, .value_len = sizeof cv};
            rc = bl_es_wset_commit(c->ws, c->m.head_mod, extra, 2, &succeeded, &retried, NULL);
        }
        bl_ebuf_free(&hk);
        bl_ebuf_free(&ck);
        if (rc == 0 && succeeded) {
            bl_group_committed(&st->g);
            return end;
        }
        if (rc == 0 && !retried)
            continue; /* lost a race: re-read, re-decide */
        if (rc == 0 || rc == BINDLOG_EIO || rc == BINDLOG_ENOSPC) {
            /* unknown outcome */
            int r2 = resolve(c);
            if (r2 == 1) {
                bl_group_committed(&st->g);
                return end;
            }
            if (r2 == 0) {
                if (rc == 0)
                    continue; /* it was a lost race after all */
                fail_range(first, end, rc); /* definitely not applied */
                return end;
            }
            /* truly unknown: nobody can say whether these events happened */
            fail_range(first, NULL, bl_group_panic(&st->g));
            return NULL;
        }
        /* a definite refusal (too large, access, memory): nothing applied */
        fail_range(first, NULL, bl_es_error(rc, BINDLOG_EIO));
        return NULL;
    }
    fail_range(first, end, BINDLOG_EBUSY);
    return end;
}

static int run_group(void *ctx, bl_greq *group)
{
    chunk c = {0};
    c.st = ctx;
    if (bl_es_wset_new(c.st, 0, &c.ws) != 0) {
        bl_group_fail(group, BINDLOG_ENOMEM);
        return 0;
    }
    for (bl_greq *r = group; r != NULL;)
        r = run_chunk(&c, r);
    bl_es_wset_free(c.ws);
    free(c.enc.buf);
    bl_ebuf_free(&c.first_rec);
    bl_ebuf_free(&c.last_rec);
    return 0;
}

static int etcd_commit(bindlog *h, const bl_event *ev, size_t n, bindlog_result *out,
                       size_t *err_index)
{
    bl_estore *st = bl_es_of(h);
    return bl_group_submit(&st->g, h, ev, n, out, err_index, run_group, NULL, st);
}

static int etcd_commit_each(bindlog *h, const bl_event *ev, size_t n, bindlog_result *out,
                            int *codes)
{
    bl_estore *st = bl_es_of(h);
    return bl_group_submit_each(&st->g, h, ev, n, out, codes, run_group, NULL, st);
}

/* ---- point reads ------------------------------------------------------------------ */

static void copy_str(char *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
    dst[n] = '\0';
}

static int etcd_get(bindlog *h, const char *key, size_t n, bindlog_binding *out)
{
    bl_etcd_kvs kvs;
    bl_bval b;
    int rc;

    memset(out, 0, sizeof(*out));
    copy_str(out->key, key, n);
    rc = bl_es_get(bl_es_of(h), BL_ES_BINDINGS, key, n, 0, &kvs);
    if (rc == 0 && (rc = bl_bval_decode(kvs.kvs[0].value, kvs.kvs[0].value_len, &b)) == 0) {
        copy_str(out->session_id, b.sid, b.sid_len);
        out->generation = b.generation;
        out->lsn = b.lsn;
        out->updated_ms = b.updated_ms;
        if (b.sid_len == 0)
            rc = BINDLOG_ENOTFOUND;
    }
    bl_etcd_kvs_free(&kvs);
    return bl_es_error(rc, BINDLOG_EIO);
}

static int etcd_session_get(bindlog *h, const char *id, size_t n, bindlog_session *out,
                            void *buf, size_t cap)
{
    bl_etcd_kvs kvs;
    bl_sval sv;
    int rc = bl_es_get(bl_es_of(h), BL_ES_SESSIONS, id, n, 0, &kvs);
    if (rc == 0 && (rc = bl_sval_decode(kvs.kvs[0].value, kvs.kvs[0].value_len, &sv)) == 0)
        bl_session_fill(out, id, n, &sv, buf, cap);
    bl_etcd_kvs_free(&kvs);
    return bl_es_error(rc, BINDLOG_EIO);
}

/* ---- iterators ------------------------------------------------------------------ */

/*
 * An iterator reads at the revision of a linearizable meta read made when
 * it opened.  If etcd compacts that revision while the iterator lives, its
 * next page fails with BINDLOG_EBUSY: open a new one.
 */
typedef struct etcd_iter {
    bindlog_iter base;
    bl_estore *st;
    int64_t rev;
    bl_es_pager pg;
    int have_pg;
    int empty;                        /* a log range from > to: nothing */
    char next_id[BINDLOG_ID_MAX + 1]; /* ancestors: the next session */
    size_t next_len;
    uint64_t steps, max_steps;
    bl_rec_buf rb;   /* records handed to the caller */
    bl_etcd_kvs one; /* the last single-key read handed out */
} etcd_iter;

static void iter_close(bindlog_iter *base)
{
    etcd_iter *it = (etcd_iter *)base;
    if (it->have_pg)
        bl_es_pager_close(&it->pg);
    bl_etcd_kvs_free(&it->one);
    bl_rec_buf_free(&it->rb);
    free(it);
}

static int page_err(int rc) { return rc < 0 ? bl_es_error(rc, BINDLOG_EBUSY) : rc; }

static int next_record(bindlog_iter *base, bindlog_record *rec)
{
    etcd_iter *it = (etcd_iter *)base;
    const bl_etcd_kv *kv;
    int rc;
    if (it->empty)
        return 0;
    for (;;) {
        if ((rc = bl_es_pager_next(&it->pg, &kv)) <= 0)
            return page_err(rc);
        size_t n;
        const unsigned char *name;
        uint64_t lsn;
        if (it->base.kind == BL_IT_LOG) {
            name = bl_es_key_name(it->st, BL_ES_LOG, kv, &n);
            if (name == NULL || bl_es_lsn_parse(name, n, &lsn) != 0)
                return BINDLOG_ECORRUPT;
            return bl_rec_emit(&it->rb, kv->value, kv->value_len, lsn, rec);
        }
        /* history: name = key 0x00 lsn */
        name = bl_es_key_name(it->st, BL_ES_HISTORY, kv, &n);
        if (name == NULL || n < BL_ES_LSN_DIGITS + 1 ||
            bl_es_lsn_parse(name + n - BL_ES_LSN_DIGITS, BL_ES_LSN_DIGITS, &lsn) != 0)
            return BINDLOG_ECORRUPT;
        char d[BL_ES_LSN_DIGITS];
        bl_es_lsn_format(lsn, d);
        bl_etcd_kvs_free(&it->one); /* the previous item's */
        rc = bl_es_get(it->st, BL_ES_LOG, d, sizeof d, it->rev, &it->one);
        if (rc == BINDLOG_ENOTFOUND)
            continue; /* compacted away */
        if (rc != 0)
            return page_err(rc);
        return bl_rec_emit(&it->rb, it->one.kvs[0].value, it->one.kvs[0].value_len, lsn, rec);
    }
}

static int next_binding(bindlog_iter *base, bindlog_binding *out)
{
    etcd_iter *it = (etcd_iter *)base;
    const bl_etcd_kv *kv;
    bl_bval b;
    size_t n;
    int rc = bl_es_pager_next(&it->pg, &kv);
    if (rc <= 0)
        return page_err(rc);
    const unsigned char *name = bl_es_key_name(it->st, BL_ES_BINDINGS, kv, &n);
    if (name == NULL || !bl_valid_key((const char *)name, n))
        return BINDLOG_ECORRUPT;
    if ((rc = bl_bval_decode(kv->value, kv->value_len, &b)) != 0)
        return rc;
    memset(out, 0, sizeof(*out));
    copy_str(out->key, name, n);
    copy_str(out->session_id, b.sid, b.sid_len);
    out->generation = b.generation;
    out->lsn = b.lsn;
    out->updated_ms = b.updated_ms;
    return 1;
}

/* Read session `id` at the iterator's revision and fill `out`. */
static int emit_session(etcd_iter *it, const void *id, size_t n, bindlog_session *out,
                        void *buf, size_t cap, bl_sval *sv)
{
    bl_etcd_kvs_free(&it->one); /* the previous item's */
    int rc = bl_es_get(it->st, BL_ES_SESSIONS, id, n, it->rev, &it->one);
    if (rc == BINDLOG_ENOTFOUND)
        return BINDLOG_ECORRUPT; /* an index names a session that is not there */
    if (rc != 0)
        return page_err(rc);
    if ((rc = bl_sval_decode(it->one.kvs[0].value, it->one.kvs[0].value_len, sv)) != 0)
        return rc;
    bl_session_fill(out, id, n, sv, buf, cap);
    return 1;
}

static int next_session(bindlog_iter *base, bindlog_session *out, void *buf, size_t cap)
{
    etcd_iter *it = (etcd_iter *)base;
    const bl_etcd_kv *kv;
    const unsigned char *name;
    bl_sval sv;
    size_t n;
    int rc;

    switch (it->base.kind) {
    case BL_IT_SESSIONS:
        if ((rc = bl_es_pager_next(&it->pg, &kv)) <= 0)
            return page_err(rc);
        name = bl_es_key_name(it->st, BL_ES_SESSIONS, kv, &n);
        if (name == NULL || !bl_valid_id((const char *)name, n))
            return BINDLOG_ECORRUPT;
        if ((rc = bl_sval_decode(kv->value, kv->value_len, &sv)) != 0)
            return rc;
        bl_session_fill(out, (const char *)name, n, &sv, buf, cap);
        return 1;
    case BL_IT_CHILDREN: {
        if ((rc = bl_es_pager_next(&it->pg, &kv)) <= 0)
            return page_err(rc);
        name = bl_es_key_name(it->st, BL_ES_CHILDREN, kv, &n);
        const unsigned char *z = name ? memchr(name, 0, n) : NULL;
        if (z == NULL || z + 1 == name + n)
            return BINDLOG_ECORRUPT;
        char child[BINDLOG_ID_MAX + 1];
        size_t cn = (size_t)(name + n - z - 1);
        if (cn > BINDLOG_ID_MAX)
            return BINDLOG_ECORRUPT;
        memcpy(child, z + 1, cn);
        return emit_session(it, child, cn, out, buf, cap, &sv);
    }
    default: /* BL_IT_ANCESTORS */
        if (it->next_len == 0)
            return 0;
        if (++it->steps > it->max_steps)
            return BINDLOG_ECORRUPT; /* a parent cycle */
        rc = emit_session(it, it->next_id, it->next_len, out, buf, cap, &sv);
        if (rc > 0) {
            copy_str(it->next_id, sv.parent, sv.parent_len);
            it->next_len = sv.parent_len;
        }
        return rc;
    }
}

static const bl_iter_ops etcd_iter_ops = {next_record, next_binding, next_session, iter_close};

/* Count the keys of `table` at `rev`. */
static int count_table(bl_estore *st, int table, int64_t rev, uint64_t *n)
{
    bl_ebuf b = {0}, e = {0};
    bl_etcd_kvs kvs = {0};
    int rc = bl_es_table_range(st, table, NULL, 0, &b, &e);
    if (rc == 0)
        rc = bl_etcd_range(st->c, b.p, b.len, e.p, e.len, rev, 0, BL_ETCD_COUNT_ONLY, &kvs);
    if (rc == 0)
        *n = (uint64_t)kvs.count;
    bl_etcd_kvs_free(&kvs);
    bl_ebuf_free(&b);
    bl_ebuf_free(&e);
    return rc;
}

static int etcd_iter_open(bindlog *h, int kind, const char *arg, size_t arg_len, uint64_t from,
                          uint64_t to, bindlog_iter **out)
{
    bl_estore *st = bl_es_of(h);
    bl_es_meta m;
    bl_ebuf b = {0}, e = {0};
    etcd_iter *it;
    int rc;

    *out = NULL;
    if ((rc = bl_es_meta_read(st, 0, &m)) != 0)
        return bl_es_error(rc, BINDLOG_EIO);
    it = calloc(1, sizeof(*it));
    if (it == NULL)
        return BINDLOG_ENOMEM;
    it->base.ops = &etcd_iter_ops;
    it->base.h = h;
    it->base.kind = kind;
    it->st = st;
    it->rev = m.revision;

    switch (kind) {
    case BL_IT_LOG: {
        char d[BL_ES_LSN_DIGITS];
        if (from > to) {
            it->empty = 1; /* an empty range */
            break;
        }
        if ((rc = bl_es_table_range(st, BL_ES_LOG, NULL, 0, &b, &e)) != 0)
            break;
        bl_es_lsn_format(from, d);
        if ((rc = bl_es_key(st, BL_ES_LOG, d, sizeof d, &b)) != 0)
            break;
        if (to < UINT64_MAX) {
            bl_es_lsn_format(to + 1, d);
            rc = bl_es_key(st, BL_ES_LOG, d, sizeof d, &e);
        }
        break;
    }
    case BL_IT_HISTORY:
    case BL_IT_CHILDREN: {
        char nm[BINDLOG_KEY_MAX + 2];
        memcpy(nm, arg, arg_len);
        nm[arg_len] = '\0';
        rc = bl_es_table_range(st, kind == BL_IT_HISTORY ? BL_ES_HISTORY : BL_ES_CHILDREN, nm,
                               arg_len + 1, &b, &e);
        break;
    }
    case BL_IT_BINDINGS:
        rc = bl_es_table_range(st, BL_ES_BINDINGS, NULL, 0, &b, &e);
        break;
    case BL_IT_SESSIONS:
        rc = bl_es_table_range(st, BL_ES_SESSIONS, NULL, 0, &b, &e);
        break;
    default: { /* BL_IT_ANCESTORS */
        bl_sval sv;
        bl_etcd_kvs_free(&it->one); /* the previous item's */
        rc = bl_es_get(st, BL_ES_SESSIONS, arg, arg_len, it->rev, &it->one);
        if (rc == 0)
            rc = bl_sval_decode(it->one.kvs[0].value, it->one.kvs[0].value_len, &sv);
        if (rc == 0) {
            copy_str(it->next_id, sv.parent, sv.parent_len);
            it->next_len = sv.parent_len;
            rc = count_table(st, BL_ES_SESSIONS, it->rev, &it->max_steps);
        }
        break;
    }
    }
    if (rc == 0 && kind != BL_IT_ANCESTORS && !it->empty) {
        rc = bl_es_pager_open(&it->pg, st, b.p, b.len, e.p, e.len, it->rev, 0);
        it->have_pg = rc == 0;
    }
    bl_ebuf_free(&b);
    bl_ebuf_free(&e);
    if (rc != 0) {
        iter_close(&it->base);
        return bl_es_error(rc, BINDLOG_EIO);
    }
    *out = &it->base;
    return 0;
}

/* ---- statistics, digest, lsn_at_time ---------------------------------------------- */

static int etcd_stats(bindlog *h, bindlog_stats *out)
{
    bl_estore *st = bl_es_of(h);
    bl_es_meta m;
    bl_etcd_status_info info;
    int rc;

    memset(out, 0, sizeof(*out));
    if ((rc = bl_es_meta_read(st, 0, &m)) != 0)
        return bl_es_error(rc, BINDLOG_EIO);
    if ((rc = count_table(st, BL_ES_LOG, m.revision, &out->log_records)) != 0 ||
        (rc = count_table(st, BL_ES_BINDINGS, m.revision, &out->bindings)) != 0 ||
        (rc = count_table(st, BL_ES_SESSIONS, m.revision, &out->sessions)) != 0)
        return bl_es_error(rc, BINDLOG_EIO);
    out->head_lsn = m.head_lsn;
    out->base_lsn = m.base_lsn;
    out->live_bindings = m.counts.live_bindings;
    out->live_sessions = m.counts.live_sessions;
    memcpy(out->applied, m.counts.applied, sizeof(out->applied));
    out->format_version = m.format;
    if (bl_etcd_status(st->c, &info) == 0 && info.db_size > 0)
        out->file_size = (uint64_t)info.db_size;
    bl_group_stats(&st->g, out);
    out->durability = h->durability;
    return 0;
}

static int etcd_digest(bindlog *h, unsigned char out[BINDLOG_DIGEST_SIZE], uint64_t *head_lsn)
{
    bl_estore *st = bl_es_of(h);
    bl_es_meta m;
    int rc = bl_es_meta_read(st, 0, &m);
    if (rc == 0)
        rc = bl_es_digest_tables(st, BL_ES_BINDINGS, BL_ES_SESSIONS, m.revision, out);
    if (rc == 0 && head_lsn != NULL)
        *head_lsn = m.head_lsn;
    return bl_es_error(rc, BINDLOG_EBUSY);
}

/* The head LSN, from a linearizable read of meta. */
static int etcd_read_head(bindlog *h, uint64_t *head)
{
    bl_es_meta m;
    int rc = bl_es_meta_read(bl_es_of(h), 0, &m);
    if (rc != 0)
        return bl_es_error(rc, BINDLOG_EIO);
    *head = m.head_lsn;
    return 0;
}

/* Polls meta every 20 ms (one small range read each). */
static int etcd_wait(bindlog *h, uint64_t after_lsn, int timeout_ms, uint64_t *head)
{
    return bl_wait_poll(h, after_lsn, timeout_ms, head, etcd_read_head, 20);
}

static int etcd_lsn_at_time(bindlog *h, int64_t time_ms, uint64_t *lsn)
{
    bl_estore *st = bl_es_of(h);
    bl_es_meta m;
    bl_etcd_kvs kvs = {0};
    uint64_t lo, hi;
    int rc = bl_es_meta_read(st, 0, &m);
    if (rc != 0)
        return bl_es_error(rc, BINDLOG_EIO);
    /* times never decrease along the log: a partition point of
     * [base + 1, head + 1] */
    lo = m.base_lsn + 1;
    hi = m.head_lsn + 1;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        char d[BL_ES_LSN_DIGITS];
        bl_record rec;
        bl_es_lsn_format(mid, d);
        rc = bl_es_get(st, BL_ES_LOG, d, sizeof d, m.revision, &kvs);
        if (rc == BINDLOG_ENOTFOUND)
            rc = BINDLOG_ECORRUPT; /* a hole in the retained log */
        if (rc == 0)
            rc = bl_record_decode(kvs.kvs[0].value, kvs.kvs[0].value_len, &rec);
        if (rc == 0 && rec.lsn != mid)
            rc = BINDLOG_ECORRUPT;
        if (rc != 0)
            break;
        if (rec.time_ms >= time_ms)
            hi = mid;
        else
            lo = mid + 1;
        bl_etcd_kvs_free(&kvs);
    }
    bl_etcd_kvs_free(&kvs);
    if (rc != 0)
        return bl_es_error(rc, BINDLOG_EBUSY);
    *lsn = lo;
    return 0;
}

const bl_backend_ops bl_etcd_ops = {
    .name = "etcd",
    .scheme = "etcd://",
    .open = etcd_open,
    .close = etcd_close,
    .commit = etcd_commit,
    .commit_each = etcd_commit_each,
    .get = etcd_get,
    .session_get = etcd_session_get,
    .iter = etcd_iter_open,
    .stats = etcd_stats,
    .digest = etcd_digest,
    /* maintenance: etcd_maint.c */
    .check = bl_etcd_check,
    .replay = bl_etcd_replay,
    .lsn_at_time = etcd_lsn_at_time,
    .wait = etcd_wait,
    .compact = bl_etcd_compact_log,
    .export_stream = bl_etcd_export,
    .import_stream = bl_etcd_import,
};
