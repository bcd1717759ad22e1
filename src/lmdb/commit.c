/*
 * commit.c -- the LMDB write path: one group, one transaction, durability.
 *
 * Every mutating call becomes a request on the environment's group-commit
 * queue (group.c).  The leader opens one LMDB write transaction, decides
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
#include "lmdb/store.h"

#include "core/failpoint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
                     bl_counts *counts, bindlog_result *res, char *why, int *fatal,
                     int *map_full)
{
    bl_view view;
    bl_plan plan;
    int64_t t_ms = ev->time_ms != 0 ? ev->time_ms : bl_now_ms(h); /* 0: the clock */
    int rc;

    if (t_ms < head->time_ms)
        t_ms = head->time_ms; /* the wall clock went back: keep the log monotonic */
    bl_view_init(&view, t);
    rc = bl_decide(&view, ev, head->lsn + 1, t_ms, &plan);
    if (rc < 0) {
        bl_plan_explain(&plan, rc, why, BL_GREQ_MSG_MAX);
        return rc;
    }
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
static int apply_req(bl_env *e, MDB_txn *txn, bl_greq *r, int alone, bl_head *head,
                     bl_counts *counts, int *fatal, int *map_full)
{
    bl_tables t;
    int rc;

    if (r->n == 1) {
        bl_tables_live(e, txn, &t);
        rc = apply_one(e, &t, r->h, r->ev, head, counts, r->out, r->msg, fatal, map_full);
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
        rc = apply_one(e, &t, r->h, &r->ev[i], head, counts, r->out ? &r->out[i] : NULL, r->msg,
                       fatal, map_full);
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

/*
 * Set the environment's sync flags for the group's strongest durability.
 * FULL and NORMAL both commit with MDB_NOMETASYNC: LMDB syncs the data pages,
 * then writes the meta page without syncing it.  For FULL the leader syncs
 * the meta page itself afterwards (finish_group), after handing leadership
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
        return bl_group_panic(&e->g);
    switch (rc) {
    case ENOSPC:
    case EDQUOT:
    case MDB_MAP_FULL:
        return BINDLOG_ENOSPC;
    case ENOMEM:
        return BINDLOG_ENOMEM;
    default:
        return bl_group_panic(&e->g);
    }
}

/*
 * Commit one group.  On return every request has rc set.  Runs without
 * the queue lock: only the leader touches the write transaction and e->enc.  Returns
 * 1 when the group committed in FULL mode and its meta page still needs the
 * sync that makes it durable.
 */
static int run_group(void *ctx, bl_greq *group)
{
    bl_env *e = ctx;
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
        for (bl_greq *r = group; r != NULL && !fatal; r = r->next) {
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
            rc = bl_group_panic(&e->g);
            goto fail;
        }
        if (rc == 0) {
            bl_group_committed(&e->g);
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
    bl_group_fail(group, rc);
    return 0;
}

/* FULL: the meta page's sync, after leadership went to the next group.  A
 * failure leaves durability unknown: never retry, panic. */
static int finish_group(void *ctx, bl_greq *group)
{
    bl_env *e = ctx;
    (void)group;
    int rc = mdb_env_sync(e->env, 1);
    if (rc == 0 && BL_FAILPOINT("commit.synced") != 0)
        rc = EIO;
    return rc == 0 ? 0 : bl_group_panic(&e->g);
}

int bl_commit(bindlog *h, const bl_event *ev, size_t n, bindlog_result *out, size_t *err_index)
{
    return bl_group_submit(&h->e->g, h, ev, n, out, err_index, run_group, finish_group, h->e);
}

int bl_commit_each(bindlog *h, const bl_event *ev, size_t n, bindlog_result *out, int *codes)
{
    return bl_group_submit_each(&h->e->g, h, ev, n, out, codes, run_group, finish_group, h->e);
}
