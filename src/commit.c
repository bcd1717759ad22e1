/*
 * commit.c -- the write path: group commit and durability.
 *
 * Every mutating call becomes a request on the environment's queue.  If no
 * thread is committing, the caller becomes the leader at once (a lone caller
 * never waits on a timer); otherwise it sleeps while the current leader
 * finishes, and one of the waiters leads the next group with everything that
 * queued up meanwhile.  The leader opens one LMDB write transaction, decides
 * each event with the state machine against the transaction's own view (so
 * each sees the ones before it), writes the APPLIED ones, commits once and
 * hands every caller its own outcome.  One sync then covers the whole group.
 *
 * Rejections cannot leave traces: bl_decide() writes nothing, so a refused
 * single event needs no undo.  A batch (several events, all or nothing) runs
 * in a nested transaction that is aborted if any of its events fails.
 *
 * Storage failures fail the whole group.  A full map is grown and the group
 * retried from scratch.  A failed commit other than "no space" may have
 * half-reached the disk, so the environment turns sticky-failed
 * (BINDLOG_EPANIC) until every handle is closed: retrying a failed fsync is
 * how data gets lost.
 */
#define _GNU_SOURCE
#include "store.h"

#include "failpoint.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct bl_req {
    bl_req *next;
    bindlog *h;
    const bl_event *ev;
    size_t n;
    bindlog_result *out;  /* n results or NULL */
    int *outcomes;        /* per event, for the statistics */
    size_t err_index;
    int rc;
    int done;
};

static void fill_result(bindlog_result *r, const bl_plan *p)
{
    r->outcome = p->outcome;
    r->lsn = p->outcome == BINDLOG_APPLIED ? p->rec.lsn : 0;
    r->generation = p->after.generation;
    memcpy(r->session_id, p->after.sid, p->after.sid_len);
    r->session_id[p->after.sid_len] = '\0';
}

/*
 * Decide and apply one event.  Returns the outcome or a per-event error
 * (nothing written); a storage failure is also stored in *fatal.
 */
static int apply_one(bl_env *e, bl_tables *t, bindlog *h, const bl_event *ev, bl_head *head,
                     bl_counts *counts, bindlog_result *res, int *fatal, int *map_full)
{
    bl_view view;
    bl_plan plan;
    int64_t t_ms = bl_now_ms(h);
    int rc;

    if (t_ms < head->time_ms)
        t_ms = head->time_ms; /* the wall clock went back: keep the log monotonic */
    bl_view_init(&view, t);
    rc = bl_decide(&view, ev, head->lsn + 1, t_ms, &plan);
    if (rc < 0)
        return rc;
    if (res != NULL)
        fill_result(res, &plan); /* before any write moves what plan points at */
    if (rc != BINDLOG_APPLIED)
        return rc;
    if ((rc = bl_plan_encode(&plan, &e->enc)) != 0 ||
        (rc = bl_tables_apply(t, &plan, &e->enc, map_full)) != 0 ||
        (rc = BL_FAILPOINT("commit.append")) != 0) {
        *fatal = rc;
        return rc;
    }
    head->lsn++;
    head->time_ms = t_ms;
    bl_counts_apply(counts, &plan);
    return BINDLOG_APPLIED;
}

/*
 * Apply a request's events; returns 1 if it wrote anything.  A batch that is
 * alone in its group writes straight into the group's transaction: if one of
 * its events fails, returning 0 makes the leader abort the whole
 * transaction, which is the batch and nothing else.  That saves the nested
 * transaction, whose dirty-page bookkeeping is a tenth of a large batch's
 * cost.
 */
static int apply_req(bl_env *e, MDB_txn *txn, bl_req *r, int alone, bl_head *head,
                     bl_counts *counts, int *fatal, int *map_full)
{
    bl_tables t;
    int rc;

    if (r->n == 1) {
        bl_tables_live(e, txn, &t);
        rc = apply_one(e, &t, r->h, r->ev, head, counts, r->out, fatal, map_full);
        r->outcomes[0] = rc;
        r->rc = rc < 0 ? rc : 0;
        r->err_index = 0;
        return rc == BINDLOG_APPLIED;
    }

    /* a batch: all or nothing, in a nested transaction unless alone */
    MDB_txn *sub = txn;
    bl_head h0 = *head;
    bl_counts c0 = *counts;
    int wrote = 0;
    rc = alone ? 0 : mdb_txn_begin(e->env, txn, 0, &sub);
    if (rc != 0) {
        *map_full = rc == MDB_MAP_FULL;
        *fatal = r->rc = bl_mdb_error(rc);
        return 0;
    }
    bl_tables_live(e, sub, &t);
    r->rc = 0;
    for (size_t i = 0; i < r->n; i++) {
        rc = apply_one(e, &t, r->h, &r->ev[i], head, counts, r->out ? &r->out[i] : NULL, fatal,
                       map_full);
        r->outcomes[i] = rc;
        if (rc < 0) {
            r->rc = rc;
            r->err_index = i;
            break;
        }
        wrote |= rc == BINDLOG_APPLIED;
    }
    if (alone) {
        if (r->rc != 0)
            wrote = 0; /* the leader aborts the group's transaction */
    } else if (r->rc == 0 && wrote) {
        rc = mdb_txn_commit(sub);
        if (rc != 0) {
            *map_full = rc == MDB_MAP_FULL;
            *fatal = r->rc = bl_mdb_error(rc);
            wrote = 0;
        }
    } else {
        mdb_txn_abort(sub);
        wrote = 0;
    }
    if (!wrote) {
        *head = h0;
        *counts = c0;
    }
    return wrote;
}

/* Every request of the group fails with rc. */
static void fail_group(bl_req *group, int rc)
{
    for (bl_req *r = group; r != NULL; r = r->next) {
        r->rc = rc;
        r->err_index = 0;
        for (size_t i = 0; i < r->n; i++)
            r->outcomes[i] = rc;
    }
}

/*
 * Set the environment's sync flags for the group's strongest durability.
 * FULL and NORMAL both commit with MDB_NOMETASYNC: LMDB syncs the data pages,
 * then writes the meta page without syncing it.  For FULL the leader syncs
 * the meta page itself afterwards (see bl_commit), after handing leadership
 * to the next group, so the next group's transaction is built while this
 * one's second sync runs.  The order on disk is LMDB's own NOMETASYNC order,
 * which never corrupts; callers hear APPLIED only once the sync returned.
 */
static void set_durability(bl_env *e, int mode)
{
    if (mode == e->sync_mode)
        return;
    if (mode == BINDLOG_DURABILITY_NONE) {
        mdb_env_set_flags(e->env, MDB_NOMETASYNC, 0);
        mdb_env_set_flags(e->env, MDB_NOSYNC, 1);
    } else {
        mdb_env_set_flags(e->env, MDB_NOSYNC, 0);
        mdb_env_set_flags(e->env, MDB_NOMETASYNC, 1);
    }
    e->sync_mode = mode;
}

/* Mark the environment unusable until every handle is closed. */
static int panic(bl_env *e)
{
    atomic_store(&e->panic, 1);
    return BINDLOG_EPANIC;
}

/*
 * mdb_txn_commit failed with rc (an LMDB or errno code).  LMDB marks its
 * environment fatally failed when the failure came after it began writing
 * meta pages (a failed meta write or sync, even with ENOSPC), and then
 * nothing can be trusted until reopen.  Otherwise nothing reached the meta
 * page and the store is intact: running out of space or memory is reported
 * as such.  Any other I/O error panics: the disk may hold part of the
 * commit, and the kernel may have dropped pages it could not write, so a
 * retry could report success for data that is gone.
 */
static int commit_failed(bl_env *e, int rc)
{
    MDB_txn *probe;
    int p = mdb_txn_begin(e->env, NULL, MDB_RDONLY, &probe);
    if (p == 0)
        mdb_txn_abort(probe);
    if (p == MDB_PANIC)
        return panic(e);
    switch (rc) {
    case ENOSPC:
    case EDQUOT:
    case MDB_MAP_FULL:
        return BINDLOG_ENOSPC;
    case ENOMEM:
        return BINDLOG_ENOMEM;
    default:
        return panic(e);
    }
}

/*
 * Commit one group.  On return every request has rc set.  Runs without
 * e->mu: only the leader touches the write transaction and e->enc.  Returns
 * 1 when the group committed in FULL mode and its meta page still needs the
 * sync that makes it durable.
 */
static int run_group(bl_env *e, bl_req *group)
{
    MDB_txn *txn = NULL;
    bl_head head;
    bl_counts counts;
    int rc, fatal, map_full, wrote, durability;

    for (int attempt = 0;; attempt++) {
        fatal = map_full = wrote = 0;
        durability = BINDLOG_DURABILITY_NONE;
        bl_map_rdlock(e);
        rc = mdb_txn_begin(e->env, NULL, 0, &txn);
        if (rc == MDB_MAP_RESIZED) {
            bl_map_unlock(e);
            if ((rc = bl_env_resize(e, 1)) != 0)
                goto fail;
            continue;
        }
        if (rc != 0) {
            bl_map_unlock(e);
            rc = bl_mdb_error(rc);
            goto fail;
        }
        if ((rc = bl_meta_get_head(e, txn, &head)) != 0 ||
            (rc = bl_meta_get_counts(e, txn, &counts)) != 0) {
            mdb_txn_abort(txn);
            bl_map_unlock(e);
            goto fail;
        }
        if ((rc = BL_FAILPOINT("commit.begin")) != 0) {
            mdb_txn_abort(txn); /* nothing written yet */
            bl_map_unlock(e);
            goto fail;
        }
        for (bl_req *r = group; r != NULL && !fatal; r = r->next) {
            if (r != group && (fatal = BL_FAILPOINT("commit.group")) != 0)
                break; /* between two requests of one group */
            if (apply_req(e, txn, r, group->next == NULL, &head, &counts, &fatal,
                          &map_full)) {
                wrote = 1;
                if (r->h->durability < durability)
                    durability = r->h->durability;
            }
        }
        if (!fatal && wrote) {
            rc = bl_meta_put_head(e, txn, &head);
            if (rc == 0)
                rc = bl_meta_put_counts(e, txn, &counts);
            if (rc != 0) {
                map_full = rc == MDB_MAP_FULL;
                fatal = bl_mdb_error(rc);
            }
        }
        if (fatal || !wrote) {
            mdb_txn_abort(txn);
            bl_map_unlock(e);
            if (!fatal)
                return 0; /* every event was refused: nothing to commit */
            if (map_full && attempt < 64) {
                if ((rc = bl_env_resize(e, 0)) != 0)
                    goto fail;
                continue;
            }
            rc = fatal; /* a storage error that is not a full map */
            goto fail;
        }
        if ((rc = BL_FAILPOINT("commit.before")) != 0) {
            mdb_txn_abort(txn); /* written in the transaction, not committed */
            bl_map_unlock(e);
            goto fail;
        }
        set_durability(e, durability);
        rc = mdb_txn_commit(txn);
        bl_map_unlock(e);
        if (rc == 0 && BL_FAILPOINT("commit.after") != 0) {
            /* eio here stands for a commit that failed after writing it all */
            rc = panic(e);
            goto fail;
        }
        if (rc == 0) {
            pthread_mutex_lock(&e->mu);
            e->commits++;
            pthread_mutex_unlock(&e->mu);
            return durability == BINDLOG_DURABILITY_FULL;
        }
        if (rc == MDB_MAP_FULL && attempt < 64) {
            if ((rc = bl_env_resize(e, 0)) != 0)
                goto fail;
            continue;
        }
        rc = commit_failed(e, rc);
        goto fail;
    }
fail:
    fail_group(group, rc);
    return 0;
}

void bl_stats_count(bl_env *e, unsigned type, int rc)
{
    if (type == 0 || type >= BINDLOG_EVENT_COUNT)
        type = 0; /* an unknown type is counted in the unused row 0 */
    int col = rc < 0 ? BINDLOG_STAT_ERROR : rc;
    pthread_mutex_lock(&e->mu);
    e->events[type][col]++;
    pthread_mutex_unlock(&e->mu);
}

int bl_commit(bindlog *h, const bl_event *ev, size_t n, bindlog_result *out, size_t *err_index)
{
    bl_env *e = h->e;
    int one_outcome;
    bl_req req = {0};

    req.h = h;
    req.ev = ev;
    req.n = n;
    req.out = out;
    req.outcomes = n == 1 ? &one_outcome : malloc(n * sizeof(int));
    if (req.outcomes == NULL)
        return BINDLOG_ENOMEM;

    pthread_mutex_lock(&e->mu);
    if (atomic_load(&e->panic)) {
        pthread_mutex_unlock(&e->mu);
        if (n != 1)
            free(req.outcomes);
        return BINDLOG_EPANIC;
    }
    if (e->queue_tail)
        e->queue_tail->next = &req;
    else
        e->queue_head = &req;
    e->queue_tail = &req;

    while (!req.done) {
        if (!e->leader && e->queue_head != NULL) {
            /* lead: take everything queued, ourselves included */
            bl_req *group = e->queue_head;
            e->queue_head = e->queue_tail = NULL;
            e->leader = 1;
            pthread_mutex_unlock(&e->mu);

            size_t events = 0;
            for (bl_req *r = group; r != NULL; r = r->next)
                events += r->n;
            if (run_group(e, group)) {
                /* Committed; the meta page still needs its sync.  Hand
                 * leadership over first so the next group builds its
                 * transaction meanwhile; this group's callers wait. */
                pthread_mutex_lock(&e->mu);
                e->leader = 0;
                pthread_cond_broadcast(&e->cv);
                pthread_mutex_unlock(&e->mu);
                int rc = mdb_env_sync(e->env, 1);
                if (rc == 0 && BL_FAILPOINT("commit.synced") != 0)
                    rc = EIO;
                if (rc != 0)
                    fail_group(group, panic(e)); /* durability unknown: never retry */
                pthread_mutex_lock(&e->mu);
            } else {
                pthread_mutex_lock(&e->mu);
                e->leader = 0;
            }
            e->grouped_events += events;
            for (bl_req *r = group, *next; r != NULL; r = next) {
                next = r->next;
                for (size_t i = 0; i < r->n; i++) {
                    int o = r->outcomes[i];
                    unsigned type = r->ev[i].type < BINDLOG_EVENT_COUNT ? r->ev[i].type : 0;
                    e->events[type][o < 0 ? BINDLOG_STAT_ERROR : o]++;
                    if (r->rc < 0 && i == r->err_index)
                        break; /* events after a batch's failure never ran */
                }
                r->done = 1;
            }
            pthread_cond_broadcast(&e->cv);
        } else {
            pthread_cond_wait(&e->cv, &e->mu);
        }
    }
    pthread_mutex_unlock(&e->mu);

    if (err_index != NULL)
        *err_index = req.err_index;
    if (n != 1)
        free(req.outcomes);
    return req.rc;
}
