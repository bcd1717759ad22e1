/*
 * backend_etcd.c -- the etcd backend: the write path, and the table of
 * operations (docs/scale-out.md).  Opening is etcd_open.c, the reads
 * etcd_read.c, maintenance etcd_maint.c.
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
#include "core/failpoint.h"
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
    if (ev->route_out != NULL && plan.route_outcome != 0)
        bl_route_fill(&plan, ev->route_out); /* ROUTED may also be coalesced (ALREADY) */
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

/* Every request of [from, to) fails with rc; the detail is the leader's
 * last-error message when one was set (bl_es_error sets the client's). */
static void fail_range(bl_greq *from, const bl_greq *to, int rc)
{
    const char *detail = bl_err_isset() ? bl_err_get() : "";
    for (bl_greq *r = from; r != to; r = r->next) {
        snprintf(r->msg, sizeof r->msg, "%s", detail);
        r->rc = rc;
        r->err_index = 0;
        for (size_t i = 0; i < r->n; i++)
            r->outcomes[i] = rc;
    }
    bl_err_clear(); /* the next failure of this group says its own */
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
    int rc;

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
            bl_err_set(BINDLOG_EBUSY, "a fenced import is writing this store (meta \"import\" "
                                      "exists): writes wait until it ends");
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
                    bl_err_set(BINDLOG_EINVAL, "the batch alone needs more than one etcd Txn "
                                               "holds (--max-txn-ops %u, about 900 KiB)",
                               st->max_txn_ops);
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
        size_t cvn = bl_es_counts_encode(cv, &c->counts);
        /* failpoint etcd.commit.unsent (eio): the Txn is lost before etcd
         * sees it, an outcome the client cannot tell from a lost reply */
        if ((rc = BL_FAILPOINT("etcd.commit.unsent")) == 0 &&
            (rc = bl_es_key(st, BL_ES_META, "head", 4, &hk)) == 0 &&
            (rc = bl_es_key(st, BL_ES_META, "counts", 6, &ck)) == 0) {
            extra[0] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = hk.p, .key_len = hk.len,
                                    .value = hv, .value_len = 16};
            extra[1] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = ck.p, .key_len = ck.len,
                                    .value = cv, .value_len = cvn};
            rc = bl_es_wset_commit(c->ws, c->m.head_mod, extra, 2, &succeeded, &retried, NULL);
            /* failpoint etcd.commit.reply_lost (eio): the Txn applied and
             * its reply is lost */
            /* cppcheck-suppress knownConditionTrueFalse ; BL_FAILPOINT() is 0 without failpoints */
            if (rc == 0 && succeeded && BL_FAILPOINT("etcd.commit.reply_lost") != 0) {
                rc = BINDLOG_EIO;
                succeeded = 0;
            }
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
            fail_range(first, NULL,
                       bl_group_panic(&st->g,
                                      "an etcd Txn's outcome could not be learnt within "
                                      "%d ms (%s)",
                                      RESOLVE_MS, bl_etcd_last_error()));
            return NULL;
        }
        /* a definite refusal (too large, access, memory): nothing applied */
        fail_range(first, NULL, bl_es_error(rc, BINDLOG_EIO));
        return NULL;
    }
    bl_err_set(BINDLOG_EBUSY, "other writers committed first %d times in a row",
               RACE_RETRIES + 1);
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
                            int *codes, char *msgs)
{
    bl_estore *st = bl_es_of(h);
    return bl_group_submit_each(&st->g, h, ev, n, out, codes, msgs, run_group, NULL, st);
}

const bl_backend_ops bl_etcd_ops = {
    .name = "etcd",
    .scheme = "etcd://",
    .open = bl_es_open,
    .close = bl_es_close,
    .commit = etcd_commit,
    .commit_each = etcd_commit_each,
    .get = bl_es_op_get,
    .session_get = bl_es_op_session_get,
    .iter = bl_es_op_iter,
    .stats = bl_es_op_stats,
    .digest = bl_es_op_digest,
    /* maintenance: etcd_maint.c */
    .check = bl_etcd_check,
    .replay = bl_etcd_replay,
    .lsn_at_time = bl_es_op_lsn_at_time,
    .wait = bl_es_op_wait,
    .compact = bl_etcd_compact_log,
    .export_stream = bl_etcd_export,
    .import_stream = bl_etcd_import,
};
