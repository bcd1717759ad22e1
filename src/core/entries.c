/*
 * entries.c -- bindlog_import_entries(): a gateway's routing table moved in.
 *
 * Each entry is a BIND(key, session_id, expect "", reason "import",
 * origin) carrying its own time.  Above the storage seam like api.c: the
 * entries are checked and ordered here, then handed to the backend's
 * commit_each, which queues them as independent requests of one group
 * commit.  That is what makes an import both fast and forgiving: the
 * entries of a chunk share one write transaction and one sync, yet the
 * state machine decides each alone, so an entry that cannot go in (a key
 * the contract refuses, a session another key holds) fails by itself.
 * A batch (bindlog_apply_batch) would not do: one refusal undoes it all.
 *
 * Times: entries go in ordered by their time, and each event carries it
 * (bl_event.time_ms); it is also the key's last activity (the gateways'
 * updatedAt / updated_at: bl_event.activity).  The write path still keeps times non-decreasing
 * along the log, so an entry older than the head is logged at the head's
 * time; its place among the entries is still its own time's.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/error.h"
#include "core/group.h"

/* Entries per commit_each call: one group commit each, so one sync each in
 * FULL mode, and a write transaction whose dirty pages stay far below
 * LMDB's limit whatever the entries hold. */
#define CHUNK 8192

/* A chunk's bytes are bounded too: all of it goes into one group commit,
 * whose frame must fit in half of the write-ahead log (bindlog.h,
 * log_size).  An eighth of the log leaves room for writers that join the
 * group.  An entry's share of the frame is estimated from above
 * (bl_event_bytes). */
static uint64_t chunk_budget(bindlog *s, uint64_t total)
{
    if (total <= ((uint64_t)64 << 10))
        return 0; /* far below any log (its minimum is 1 MiB): no need to ask */
    bindlog_stats st;
    memset(&st, 0, sizeof st);
    if (s->ops->stats(s, &st) != 0) {
        bl_err_clear();
        return 0; /* no figure: bound by count only */
    }
    return st.log_size / 8; /* 0 on a backend without a log */
}


/* codes[] of entries not decided yet (replaced before the call returns). */
#define PENDING INT_MIN

/* The reason logged with every imported BIND. */
static const char import_reason[] = "import";

typedef struct slot {
    int64_t time_ms;
    size_t index; /* in the caller's array */
} slot;

static int slot_cmp(const void *a, const void *b)
{
    const slot *x = a, *y = b;
    if (x->time_ms != y->time_ms)
        return x->time_ms < y->time_ms ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The BIND an entry stands for; BINDLOG_EINVAL when the contract refuses
 * it (bl_event_check: key, id, origin, time). */
static int entry_event(const bindlog_import_entry *in, int64_t now, bl_event *ev)
{
    memset(ev, 0, sizeof(*ev));
    ev->type = BINDLOG_EVENT_BIND;
    if (in->key == NULL || in->session_id == NULL)
        return BINDLOG_EINVAL;
    ev->key = in->key;
    ev->key_len = strnlen(in->key, BINDLOG_KEY_MAX + 1);
    ev->sid = in->session_id;
    ev->sid_len = strnlen(in->session_id, BINDLOG_ID_MAX + 1);
    ev->expect = "";
    ev->reason = import_reason;
    ev->reason_len = sizeof(import_reason) - 1;
    ev->origin = in->origin;
    ev->origin_len = in->origin_len;
    ev->time_ms = in->time_ms == 0 ? now : in->time_ms;
    ev->activity = 1; /* the entry's last update is the key's last activity */
    return bl_event_check(ev);
}

int bl_commit_each_chunked(bindlog *s, const bl_event *ev, const size_t *which, size_t nv,
                           bindlog_result *res, int *rcs, char *msgs, bindlog_result *out,
                           int *codes, char *out_msgs, size_t done, size_t total,
                           bindlog_progress_fn fn, void *ctx)
{
    uint64_t all = 0;
    for (size_t k = 0; k < nv; k++)
        all += bl_event_bytes(&ev[k]);
    uint64_t budget = chunk_budget(s, all);
    for (size_t pos = 0, m; pos < nv; pos += m) {
        uint64_t bytes = bl_event_bytes(&ev[pos]);
        for (m = 1; m < CHUNK && pos + m < nv; m++) {
            uint64_t more = bl_event_bytes(&ev[pos + m]);
            if (budget != 0 && bytes + more > budget)
                break; /* one event alone may exceed it: the log decides */
            bytes += more;
        }
        int rc = s->ops->commit_each(s, ev + pos, m, res, rcs, msgs);
        for (size_t j = 0; j < m; j++) {
            size_t i = which[pos + j];
            if (codes != NULL)
                codes[i] = rcs[j];
            if (msgs != NULL && out_msgs != NULL && rcs[j] < 0)
                memcpy(out_msgs + i * BL_EACH_MSG_MAX, msgs + j * BL_EACH_MSG_MAX,
                       BL_EACH_MSG_MAX);
            if (out != NULL && rcs[j] >= 0)
                out[i] = res[j];
            bl_count_call(s, (int)ev[pos + j].type, rcs[j]);
        }
        if (rc != 0)
            return rc; /* the rest was never tried: it fails with the same error */
        done += m;
        if (fn != NULL)
            fn(ctx, done, total);
    }
    return 0;
}

static int import_entries(bindlog *s, const bindlog_import_entry *in, size_t n,
                          bindlog_result *out, int *codes, bindlog_progress_fn fn, void *ctx)
{
    slot *order = NULL;
    bl_event *ev = NULL;
    size_t *which = NULL;
    bindlog_result *res = NULL;
    int *rcs = NULL;
    size_t nv = 0, done = 0;
    int64_t now;
    int rc = 0;

    if (s == NULL)
        return bl_err_set(BINDLOG_EINVAL, "handle is NULL");
    if ((rc = bl_fork_check(s)) != 0)
        return rc;
    if ((in == NULL && n != 0) || n > SIZE_MAX / sizeof(bl_event))
        return bl_err_set(BINDLOG_EINVAL, "entries is NULL or n is too large");
    for (size_t i = 0; codes != NULL && i < n; i++)
        codes[i] = PENDING;
    if (s->read_only) {
        rc = bl_err_set(BINDLOG_EREADONLY, "the handle was opened read-only");
        goto out;
    }
    if (n == 0)
        return 0;

    now = bl_now_ms(s);
    order = malloc(n * sizeof(*order));
    ev = malloc(n * sizeof(*ev));
    which = malloc(n * sizeof(*which));
    res = malloc((n < CHUNK ? n : CHUNK) * sizeof(*res));
    rcs = malloc((n < CHUNK ? n : CHUNK) * sizeof(*rcs));
    if (order == NULL || ev == NULL || which == NULL || res == NULL || rcs == NULL) {
        rc = BINDLOG_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        order[i].time_ms = in[i].time_ms == 0 ? now : in[i].time_ms;
        order[i].index = i;
    }
    qsort(order, n, sizeof(*order), slot_cmp);

    /* Entries the contract refuses are decided here and never queued. */
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k].index;
        int erc = entry_event(&in[i], now, &ev[nv]);
        if (erc != 0) {
            if (codes != NULL)
                codes[i] = erc;
            bl_count_call(s, BINDLOG_EVENT_BIND, erc);
            done++;
            continue;
        }
        which[nv++] = i;
    }
    if (fn != NULL && done > 0)
        fn(ctx, done, n);

    rc = bl_commit_each_chunked(s, ev, which, nv, res, rcs, NULL, out, codes, NULL, done, n, fn,
                                ctx);
out:
    for (size_t i = 0; rc != 0 && codes != NULL && i < n; i++)
        if (codes[i] == PENDING)
            codes[i] = rc;
    free(order);
    free(ev);
    free(which);
    free(res);
    free(rcs);
    return rc;
}

int bindlog_import_entries(bindlog *s, const bindlog_import_entry *entries, size_t n,
                           bindlog_result *out, int *codes, bindlog_progress_fn progress,
                           void *progress_ctx)
{
    bl_err_clear();
    int rc = import_entries(s, entries, n, out, codes, progress, progress_ctx);
    return bl_api_done(rc, "import_entries (%zu entries)", n);
}
