/*
 * machine.c -- the pure state machine of bindlog (SPEC section 2).
 *
 * One function decides every event: bl_decide() reads what it needs through
 * a bl_view, applies the checks in the order the specification gives them,
 * and describes the outcome and the mutations in a bl_plan.  It never writes:
 * the caller applies the plan (LMDB write path, replay, the fuzz model).  A
 * rejected event (ALREADY, STALE, MOVED or an error) therefore cannot leave a
 * trace, by construction.
 *
 * Invariants kept here and checked by replay:
 *  - a key's generation never decreases; BIND, NEW_SESSION, UNBIND and
 *    INVALIDATE add one, SPLIT keeps it;
 *  - a session is live (ended_lsn == 0) exactly when the key named in its
 *    `key` field is bound to it, so live sessions == bound keys;
 *  - every record is re-derivable: bl_decide() on the state before it, fed
 *    bl_event_from_record(), yields the same record byte for byte.
 */
#include "core/machine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static const char *const default_reasons[BINDLOG_EVENT_COUNT] = {
    [BINDLOG_EVENT_BIND] = "switch",
    [BINDLOG_EVENT_NEW_SESSION] = "new_session",
    [BINDLOG_EVENT_SPLIT] = "compression",
    [BINDLOG_EVENT_INVALIDATE] = "invalidate",
    [BINDLOG_EVENT_UNBIND] = "unbind",
    [BINDLOG_EVENT_ROUTE] = "",
};

/* The reasons a route's NEW_SESSION is logged with, by BINDLOG_RESET_*:
 * CREATED (an unbound key) as /new would be; a RESET by what made the old
 * session stale. */
static const char reason_created[] = "new_session";
static const char reason_idle[] = "idle";
static const char reason_daily[] = "daily";

const char *bl_policy_problem(const bindlog_policy *policy)
{
    if (policy == NULL)
        return "policy is NULL";
    switch (policy->mode) {
    case BINDLOG_RESET_NONE:
        return NULL;
    case BINDLOG_RESET_IDLE:
    case BINDLOG_RESET_DAILY:
    case BINDLOG_RESET_BOTH:
    case BINDLOG_RESET_DAILY_AND_IDLE:
        break;
    default:
        return "policy mode is not one of BINDLOG_RESET_NONE..BINDLOG_RESET_DAILY_AND_IDLE";
    }
    if (policy->mode != BINDLOG_RESET_DAILY && policy->idle_ms <= 0)
        return "policy idle_ms must be > 0 for an idle mode";
    if (policy->mode != BINDLOG_RESET_IDLE && policy->daily_boundary_ms < 0)
        return "policy daily_boundary_ms is negative";
    return NULL;
}

int bl_policy_stale(const bindlog_policy *policy, int64_t ref, int64_t now, int *reason)
{
    *reason = BINDLOG_RESET_NONE;
    if (policy == NULL || policy->mode == BINDLOG_RESET_NONE)
        return 0;
    /* now - ref > idle_ms, written so that it cannot overflow */
    int idle = policy->mode != BINDLOG_RESET_DAILY && now > ref &&
               (uint64_t)now - (uint64_t)ref > (uint64_t)policy->idle_ms;
    int daily = policy->mode != BINDLOG_RESET_IDLE && ref < policy->daily_boundary_ms;
    int stale;
    switch (policy->mode) {
    case BINDLOG_RESET_IDLE:
        stale = idle;
        break;
    case BINDLOG_RESET_DAILY:
        stale = daily;
        break;
    case BINDLOG_RESET_BOTH:
        stale = idle || daily;
        break;
    default: /* DAILY_AND_IDLE */
        stale = idle && daily;
        break;
    }
    if (stale)
        *reason = daily ? BINDLOG_RESET_DAILY : BINDLOG_RESET_IDLE;
    return stale;
}

const char *bl_default_reason(unsigned type)
{
    if (type == 0 || type >= BINDLOG_EVENT_COUNT)
        return "";
    return default_reasons[type];
}

static int same(const char *a, size_t an, const char *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

/* The id rule's refusal, in words: an id that is empty, too long or holds a
 * control byte. */
static const char *id_problem(const char *what_empty, const char *what_bad, const char *id,
                              size_t n)
{
    if (n == 0)
        return what_empty;
    return bl_valid_id(id, n) ? NULL : what_bad;
}

const char *bl_event_problem(const bl_event *ev)
{
    const char *why;

    if (ev == NULL || ev->type == 0 || ev->type >= BINDLOG_EVENT_COUNT)
        return "unknown event type";
    if (ev->key == NULL)
        return "key is NULL";
    if (ev->key_len == 0)
        return "key is empty";
    if (ev->key_len > BINDLOG_KEY_MAX)
        return "key is longer than BINDLOG_KEY_MAX (400) bytes";
    if (!bl_valid_key(ev->key, ev->key_len))
        return "key holds a NUL byte";
    if (ev->reason != NULL && !bl_valid_reason(ev->reason, ev->reason_len))
        return ev->reason_len > BINDLOG_REASON_MAX
                   ? "reason is longer than BINDLOG_REASON_MAX (64) bytes"
                   : "reason holds a control byte";
    if (ev->origin == NULL && ev->origin_len != 0)
        return "origin is NULL but origin_len is not 0";
    if (ev->origin != NULL && ev->origin_len > BINDLOG_ORIGIN_MAX)
        return "origin is longer than BINDLOG_ORIGIN_MAX (65536) bytes";
    if (ev->time_ms < 0)
        return "event time is before 1970 (negative)";

    if (ev->type == BINDLOG_EVENT_ROUTE) {
        if (ev->policy != NULL && (why = bl_policy_problem(ev->policy)) != NULL)
            return why;
        if (ev->sid == NULL)
            return NULL; /* replay: the key is bound, no fresh id needed */
        return ev->sid_len > BINDLOG_ID_MAX
                   ? "fresh session id is longer than BINDLOG_ID_MAX (128) bytes"
                   : id_problem("fresh session id is empty",
                                "fresh session id holds a control byte", ev->sid, ev->sid_len);
    }
    if (ev->idle_before_ms < 0)
        return "expiry cut-off is negative";

    switch (ev->type) {
    case BINDLOG_EVENT_BIND:
    case BINDLOG_EVENT_NEW_SESSION:
    case BINDLOG_EVENT_SPLIT:
        if (ev->sid == NULL)
            return ev->type == BINDLOG_EVENT_SPLIT ? "child session id is NULL"
                                                   : "session id is NULL";
        why = ev->sid_len > BINDLOG_ID_MAX
                  ? "session id is longer than BINDLOG_ID_MAX (128) bytes"
                  : id_problem("session id is empty", "session id holds a control byte",
                               ev->sid, ev->sid_len);
        if (why != NULL)
            return why;
        break;
    default: /* INVALIDATE and UNBIND take no id and no origin */
        if (ev->origin != NULL)
            return "invalidate and unbind take no origin";
        break;
    }
    if (ev->type == BINDLOG_EVENT_BIND && ev->expect != NULL && ev->expect_len != 0) {
        /* expect "" (only if unbound) is valid; anything else must be an id */
        if (ev->expect_len > BINDLOG_ID_MAX || !bl_valid_id(ev->expect, ev->expect_len))
            return "expected session id is too long or holds a control byte";
    }
    if (ev->type == BINDLOG_EVENT_SPLIT) {
        if (ev->expect == NULL)
            return "parent session id is NULL";
        why = ev->expect_len > BINDLOG_ID_MAX
                  ? "parent session id is longer than BINDLOG_ID_MAX (128) bytes"
                  : id_problem("parent session id is empty",
                               "parent session id holds a control byte", ev->expect,
                               ev->expect_len);
        if (why != NULL)
            return why;
        if (same(ev->sid, ev->sid_len, ev->expect, ev->expect_len))
            return "parent and child are the same session";
    }
    return NULL;
}

int bl_event_check(const bl_event *ev) { return bl_event_problem(ev) ? BINDLOG_EINVAL : 0; }

/* Fill the parts of a plan common to every APPLIED event. */
static void plan_record(bl_plan *p, const bl_event *ev, uint64_t lsn, int64_t t,
                        const char *reason, size_t reason_len)
{
    bl_record *r = &p->rec;
    memset(r, 0, sizeof(*r));
    r->version = BINDLOG_RECORD_VERSION;
    r->lsn = lsn;
    r->prev_lsn = p->after.lsn; /* the key's last record: its history chain */
    r->time_ms = t;
    r->generation = p->after.generation;
    r->type = ev->type;
    r->key = ev->key;
    r->key_len = ev->key_len;
    r->reason = reason;
    r->reason_len = reason_len;
    p->after.lsn = lsn;
    p->after.updated_ms = t;
    p->outcome = BINDLOG_APPLIED;
}

/* A session put that ends `old` (id, value) at (lsn, t) with reason. */
static void end_session(bl_sput *put, const char *id, size_t id_len, const bl_sval *old,
                        uint64_t lsn, int64_t t, const char *reason, size_t reason_len)
{
    put->id = id;
    put->id_len = id_len;
    bl_sval_copy(&put->v, old);
    put->v.ended_lsn = lsn;
    put->v.ended_ms = t;
    put->v.reason = reason;
    put->v.reason_len = reason_len;
}

/* A brand-new live session. */
static void new_session(bl_sput *put, const char *id, size_t id_len, const bl_event *ev,
                        const char *parent, size_t parent_len, const void *origin,
                        size_t origin_len, uint64_t lsn, int64_t t)
{
    memset(put, 0, sizeof(*put));
    put->id = id;
    put->id_len = id_len;
    put->v.key = ev->key;
    put->v.key_len = ev->key_len;
    put->v.parent = parent;
    put->v.parent_len = parent_len;
    put->v.created_lsn = lsn;
    put->v.created_ms = t;
    put->v.reason = "";
    put->v.origin = origin;
    put->v.origin_len = origin_len;
    /* Everything but its end is its own record's (bl_sval_resolve): the
     * key, the parent (the previous binding, none for a BIND), the origin
     * the record carries and its time. */
    put->v.ref = 1;
}

/* The sibling chain (bl_sval.child_lsn, sibling_lsn): the child created
 * at lsn becomes its parent's youngest, and the parent's youngest until
 * now the child's next older sibling.  The parent's put is its end, made
 * from its value as it was. */
static void link_child(bl_sput *child, bl_sput *parent, uint64_t lsn)
{
    /* a parent created after its child is nobody's parent to the chain, as
     * to the children table (bl_child_indexed): only a store rebuilt by
     * bindlog_recover, whose session re-created a lost parent's id, has one */
    if (!bl_child_indexed(lsn, parent->v.created_lsn))
        return;
    child->v.sibling_lsn = parent->v.child_lsn;
    parent->v.child_lsn = lsn;
}

/* Look up the session bound to the key (cur), which must exist and be live. */
static int bound_session(const bl_view *view, const bl_bval *cur, bl_sval *out)
{
    int rc = view->session(view->ctx, cur->sid, cur->sid_len, out);
    /* A binding to a missing session means the state is damaged. */
    return rc == BINDLOG_ENOTFOUND ? BINDLOG_ECORRUPT : rc;
}

/* The record of an event that moved the key to ev->sid from the binding cur
 * (BIND, NEW_SESSION): the new and the previous session, and the origin
 * exactly as given (absent stays absent: a BIND without one keeps the
 * re-opened session's origin, and replay must do the same). */
static int record_move(bl_plan *p, const bl_event *ev, const bl_bval *cur)
{
    if (ev->activity) {
        p->rec.flags |= BL_REC_ACTIVITY;
        if (p->rec.time_ms > p->after.last_activity_ms)
            p->after.last_activity_ms = p->rec.time_ms;
    }
    p->rec.sid = ev->sid;
    p->rec.sid_len = ev->sid_len;
    p->rec.other = cur->sid;
    p->rec.other_len = cur->sid_len;
    if (ev->origin != NULL) {
        p->rec.flags |= BL_REC_ORIGIN;
        p->rec.origin = ev->origin;
        p->rec.origin_len = ev->origin_len;
    }
    return BINDLOG_APPLIED;
}

static int decide_bind(const bl_view *view, const bl_event *ev, const bl_bval *cur,
                       int known, uint64_t lsn, int64_t t, bl_plan *p)
{
    bl_sval target, prev;
    int rc, exists;

    if (same(cur->sid, cur->sid_len, ev->sid, ev->sid_len))
        return p->outcome = BINDLOG_ALREADY;
    if (ev->expect != NULL && !same(cur->sid, cur->sid_len, ev->expect, ev->expect_len))
        return p->outcome = BINDLOG_MOVED;

    rc = view->session(view->ctx, ev->sid, ev->sid_len, &target);
    if (rc < 0 && rc != BINDLOG_ENOTFOUND)
        return rc;
    exists = rc == 0;
    /* live and not ours (ours would have been ALREADY): another key's binding */
    if (exists && target.ended_lsn == 0) {
        p->why = "session is the live binding of key";
        p->why_key = target.key;
        p->why_key_len = target.key_len;
        return BINDLOG_ECONFLICT;
    }

    const char *reason = ev->reason ? ev->reason : default_reasons[BINDLOG_EVENT_BIND];
    size_t reason_len = ev->reason ? ev->reason_len : strlen(reason);

    p->after.generation = cur->generation + 1;
    p->after.sid = ev->sid;
    p->after.sid_len = ev->sid_len;
    plan_record(p, ev, lsn, t, reason, reason_len);

    bl_sput *put = &p->sess[p->nsess++];
    if (!exists) {
        new_session(put, ev->sid, ev->sid_len, ev, "", 0, ev->origin ? ev->origin : "",
                    ev->origin_len, lsn, t);
        p->d_sessions = 1;
    } else {
        /* re-open: keep parent and creation, move to this key */
        put->id = ev->sid;
        put->id_len = ev->sid_len;
        bl_sval_copy(&put->v, &target);
        put->v.key = ev->key;
        put->v.key_len = ev->key_len;
        put->v.ended_lsn = 0;
        put->v.ended_ms = 0;
        put->v.reason = "";
        put->v.reason_len = 0;
        /* Still what its creating record says only if it stays on that
         * record's key with that origin; otherwise the value holds every
         * field again (and keeps doing so: the rule is the same on every
         * path that writes the state, so the form is a function of the
         * log) */
        put->v.ref = target.ref && same(target.key, target.key_len, ev->key, ev->key_len) &&
                     (ev->origin == NULL ||
                      (ev->origin_len == target.origin_len &&
                       (ev->origin_len == 0 ||
                        memcmp(ev->origin, target.origin, ev->origin_len) == 0)));
        if (ev->origin != NULL) {
            put->v.origin = ev->origin;
            put->v.origin_len = ev->origin_len;
        }
    }
    p->d_live_sessions = 1;

    if (cur->sid_len != 0) {
        rc = bound_session(view, cur, &prev);
        if (rc < 0)
            return rc;
        end_session(&p->sess[p->nsess++], cur->sid, cur->sid_len, &prev, lsn, t, reason,
                    reason_len);
        p->d_live_sessions -= 1;
    } else {
        p->d_live_bindings = 1;
    }
    p->new_key = !known;
    return record_move(p, ev, cur);
}

static int decide_new(const bl_view *view, const bl_event *ev, const bl_bval *cur, int known,
                      uint64_t lsn, int64_t t, bl_plan *p)
{
    bl_sval existing, prev;
    int rc;

    if (same(cur->sid, cur->sid_len, ev->sid, ev->sid_len))
        return p->outcome = BINDLOG_ALREADY;
    rc = view->session(view->ctx, ev->sid, ev->sid_len, &existing);
    if (rc == 0) {
        p->why = "session id already exists (a new session needs a fresh id)";
        return BINDLOG_EEXIST;
    }
    if (rc != BINDLOG_ENOTFOUND)
        return rc;

    const char *reason = ev->reason ? ev->reason : default_reasons[BINDLOG_EVENT_NEW_SESSION];
    size_t reason_len = ev->reason ? ev->reason_len : strlen(reason);

    p->after.generation = cur->generation + 1;
    p->after.sid = ev->sid;
    p->after.sid_len = ev->sid_len;
    plan_record(p, ev, lsn, t, reason, reason_len);

    new_session(&p->sess[p->nsess++], ev->sid, ev->sid_len, ev, cur->sid, cur->sid_len,
                ev->origin ? ev->origin : "", ev->origin_len, lsn, t);
    p->d_sessions = 1;
    p->d_live_sessions = 1;
    if (cur->sid_len != 0) {
        rc = bound_session(view, cur, &prev);
        if (rc < 0)
            return rc;
        end_session(&p->sess[p->nsess++], cur->sid, cur->sid_len, &prev, lsn, t, reason,
                    reason_len);
        link_child(&p->sess[0], &p->sess[1], lsn);
        p->d_live_sessions -= 1;
        p->child_parent = cur->sid;
        p->child_parent_len = cur->sid_len;
        p->child_parent_lsn = prev.created_lsn;
        p->child_id = ev->sid;
        p->child_id_len = ev->sid_len;
    } else {
        p->d_live_bindings = 1;
    }
    p->new_key = !known;
    return record_move(p, ev, cur);
}

static int decide_split(const bl_view *view, const bl_event *ev, const bl_bval *cur,
                        uint64_t lsn, int64_t t, bl_plan *p)
{
    bl_sval child, parent;
    int rc;

    if (cur->sid_len == 0) {
        p->why = "key is not bound";
        return BINDLOG_ENOTFOUND;
    }
    if (same(cur->sid, cur->sid_len, ev->sid, ev->sid_len))
        return p->outcome = BINDLOG_ALREADY;
    if (ev->generation != BINDLOG_ANY_GENERATION && ev->generation != cur->generation)
        return p->outcome = BINDLOG_STALE;
    if (!same(cur->sid, cur->sid_len, ev->expect, ev->expect_len))
        return p->outcome = BINDLOG_MOVED;
    rc = view->session(view->ctx, ev->sid, ev->sid_len, &child);
    if (rc == 0) {
        p->why = "child session id already exists";
        return BINDLOG_EEXIST;
    }
    if (rc != BINDLOG_ENOTFOUND)
        return rc;
    rc = bound_session(view, cur, &parent);
    if (rc < 0)
        return rc;

    const char *reason = default_reasons[BINDLOG_EVENT_SPLIT];
    const void *origin = ev->origin ? ev->origin : parent.origin;
    size_t origin_len = ev->origin ? ev->origin_len : parent.origin_len;

    p->after.generation = cur->generation;
    p->after.sid = ev->sid;
    p->after.sid_len = ev->sid_len;
    plan_record(p, ev, lsn, t, reason, strlen(reason));

    new_session(&p->sess[p->nsess++], ev->sid, ev->sid_len, ev, cur->sid, cur->sid_len,
                origin ? origin : "", origin_len, lsn, t);
    end_session(&p->sess[p->nsess++], cur->sid, cur->sid_len, &parent, lsn, t, reason,
                strlen(reason));
    link_child(&p->sess[0], &p->sess[1], lsn);
    p->d_sessions = 1;
    p->child_parent = cur->sid;
    p->child_parent_len = cur->sid_len;
    p->child_parent_lsn = parent.created_lsn;
    p->child_id = ev->sid;
    p->child_id_len = ev->sid_len;

    /* The record always carries the child's effective origin, so replay
     * need not look at the parent. */
    p->rec.sid = ev->sid;
    p->rec.sid_len = ev->sid_len;
    p->rec.other = cur->sid;
    p->rec.other_len = cur->sid_len;
    p->rec.flags = BL_REC_ORIGIN;
    p->rec.origin = origin;
    p->rec.origin_len = origin_len;
    return BINDLOG_APPLIED;
}

static int decide_invalidate(const bl_event *ev, const bl_bval *cur, uint64_t lsn, int64_t t,
                             bl_plan *p)
{
    if (cur->sid_len == 0) {
        p->why = "key is not bound";
        return BINDLOG_ENOTFOUND;
    }
    const char *reason = ev->reason ? ev->reason : default_reasons[BINDLOG_EVENT_INVALIDATE];
    size_t reason_len = ev->reason ? ev->reason_len : strlen(reason);

    p->after.generation = cur->generation + 1;
    plan_record(p, ev, lsn, t, reason, reason_len);
    p->rec.sid = cur->sid;
    p->rec.sid_len = cur->sid_len;
    p->rec.other = "";
    return BINDLOG_APPLIED;
}

static int decide_unbind(const bl_view *view, const bl_event *ev, const bl_bval *cur,
                         int known, uint64_t lsn, int64_t t, bl_plan *p)
{
    bl_sval prev;
    int rc;

    if (!known) {
        p->why = "key was never bound";
        return BINDLOG_ENOTFOUND;
    }
    if (cur->sid_len == 0)
        return p->outcome = BINDLOG_ALREADY;
    if (ev->idle_before_ms > 0 && bl_activity_ref(cur) >= ev->idle_before_ms)
        return p->outcome = BINDLOG_MOVED; /* expiry: the key was used since the sweep saw it */
    rc = bound_session(view, cur, &prev);
    if (rc < 0)
        return rc;

    const char *reason = ev->reason ? ev->reason : default_reasons[BINDLOG_EVENT_UNBIND];
    size_t reason_len = ev->reason ? ev->reason_len : strlen(reason);

    p->after.generation = cur->generation + 1;
    p->after.sid = "";
    p->after.sid_len = 0;
    plan_record(p, ev, lsn, t, reason, reason_len);
    end_session(&p->sess[p->nsess++], cur->sid, cur->sid_len, &prev, lsn, t, reason, reason_len);
    p->d_live_bindings = -1;
    p->d_live_sessions = -1;

    p->rec.sid = cur->sid;
    p->rec.sid_len = cur->sid_len;
    p->rec.other = "";
    return BINDLOG_APPLIED;
}

/*
 * ROUTE: one inbound message.  The decision reads the key's activity as it
 * was before this message (cur), so recording the message can never make a
 * stale session look fresh; and since the write path decides the events of
 * a group one after the other against the state so far, of several routes
 * racing at a boundary the first RESETs and the rest find the new session
 * fresh.  CREATED and RESET are NEW_SESSION events (records of that type,
 * with BL_REC_ACTIVITY); ROUTED writes a ROUTE record that moves nothing
 * but the last activity.
 */
static int decide_route(const bl_view *view, const bl_event *ev, const bl_bval *cur, int known,
                        uint64_t lsn, int64_t t, bl_plan *p)
{
    int reason = BINDLOG_RESET_NONE, rc;

    p->route_before = cur->last_activity_ms;
    if (cur->sid_len != 0 &&
        ((ev->sid != NULL && same(cur->sid, cur->sid_len, ev->sid, ev->sid_len)) ||
         !bl_policy_stale(ev->policy, bl_activity_ref(cur), t, &reason))) {
        p->route_outcome = BINDLOG_ROUTED;
        /* Coalescing: the activity already stands at this time (another
         * message of the key in the same millisecond, often the same group
         * commit; or a clock gone back to the log's time): nothing changes,
         * so nothing is logged.  Replay never sees such a message. */
        if (ev->sid != NULL && t <= cur->last_activity_ms)
            return p->outcome = BINDLOG_ALREADY;
        bl_record *r = &p->rec;
        memset(r, 0, sizeof(*r));
        r->version = BINDLOG_RECORD_VERSION;
        r->lsn = lsn;
        r->prev_lsn = cur->lsn; /* not a link of the key's history: lsn stays */
        r->time_ms = t;
        r->generation = cur->generation;
        r->type = BINDLOG_EVENT_ROUTE;
        r->key = ev->key;
        r->key_len = ev->key_len;
        r->sid = r->other = r->reason = "";
        if (t > p->after.last_activity_ms)
            p->after.last_activity_ms = t;
        return p->outcome = BINDLOG_APPLIED;
    }
    if (ev->sid == NULL) {
        p->why = cur->sid_len == 0 ? "key is not bound (a ROUTE record needs a binding)"
                                   : "a ROUTE record would reset the key";
        return BINDLOG_ECORRUPT;
    }

    bl_event nev = *ev;
    nev.type = BINDLOG_EVENT_NEW_SESSION;
    nev.policy = NULL;
    nev.activity = 1;
    nev.reason = cur->sid_len == 0              ? reason_created
                 : reason == BINDLOG_RESET_DAILY ? reason_daily
                                                 : reason_idle;
    nev.reason_len = strlen(nev.reason);
    rc = decide_new(view, &nev, cur, known, lsn, t, p);
    if (rc != BINDLOG_APPLIED)
        return rc; /* EEXIST: the fresh id is taken */
    p->route_outcome = cur->sid_len == 0 ? BINDLOG_CREATED : BINDLOG_RESET;
    p->route_reason = reason;
    p->route_prev = cur->sid;
    p->route_prev_len = cur->sid_len;
    return BINDLOG_APPLIED;
}

void bl_route_fill(const bl_plan *p, bindlog_route_result *out)
{
    memset(out, 0, sizeof(*out));
    out->outcome = p->route_outcome;
    out->reason = p->route_reason;
    out->lsn = p->outcome == BINDLOG_APPLIED ? p->rec.lsn : 0;
    out->generation = p->after.generation;
    out->last_activity_ms = p->route_before;
    memcpy(out->session_id, p->after.sid, p->after.sid_len);
    if (p->route_outcome == BINDLOG_RESET)
        memcpy(out->previous_id, p->route_prev, p->route_prev_len);
}

/*
 * An event that would be logged needs an LSN and a time a record may carry
 * (BINDLOG_LSN_MAX, BINDLOG_TIME_*_MS).  Past the last LSN nothing can be
 * logged any more: BINDLOG_ENOSPC, a full log rather than a damaged one.  A
 * time past year 9999 comes from a clock gone wrong; logging it would stamp
 * every later event with it, since times never decrease, so the event is
 * refused.  (A clock reading before year 0 is one that went back: the write
 * paths give the event the previous record's time instead, never earlier.)
 * Only APPLIED outcomes are checked: ALREADY, STALE and MOVED log nothing.
 */
static int check_numbers(uint64_t lsn, int64_t time_ms, bl_plan *p)
{
    if (lsn == 0 || lsn > BINDLOG_LSN_MAX) {
        p->why = "the log's LSN space is exhausted (the last LSN, 2^63 - 1, is taken): "
                 "nothing more can be logged in this store";
        return BINDLOG_ENOSPC;
    }
    if (!bl_valid_time(time_ms)) {
        p->why = "the clock reads a time outside years 0-9999: the event is not logged";
        return BINDLOG_EINVAL;
    }
    if (p->rec.prev_lsn >= lsn) {
        p->why = "the key's binding names an LSN at or after the next one (damaged state)";
        return BINDLOG_ECORRUPT;
    }
    return BINDLOG_APPLIED;
}

int bl_decide(const bl_view *view, const bl_event *ev, uint64_t lsn, int64_t time_ms,
              bl_plan *p)
{
    bl_bval cur;
    int rc, known;

    memset(p, 0, sizeof(*p));
    if ((p->why = bl_event_problem(ev)) != NULL)
        return BINDLOG_EINVAL;

    rc = view->binding(view->ctx, ev->key, ev->key_len, &cur);
    if (rc < 0 && rc != BINDLOG_ENOTFOUND)
        return rc;
    known = rc == 0;
    if (!known)
        memset(&cur, 0, sizeof(cur));
    if (cur.sid == NULL)
        cur.sid = "";
    /* A generation at the ceiling could never be bumped or told apart from
     * BINDLOG_ANY_GENERATION: refuse to go there rather than wrap. */
    if (cur.generation >= BINDLOG_ANY_GENERATION - 1) {
        p->why = "the key's stored generation is at the top of its range (damaged state)";
        return BINDLOG_ECORRUPT;
    }
    p->after = cur;

    switch (ev->type) {
    case BINDLOG_EVENT_BIND:
        rc = decide_bind(view, ev, &cur, known, lsn, time_ms, p);
        break;
    case BINDLOG_EVENT_NEW_SESSION:
        rc = decide_new(view, ev, &cur, known, lsn, time_ms, p);
        break;
    case BINDLOG_EVENT_SPLIT:
        rc = decide_split(view, ev, &cur, lsn, time_ms, p);
        break;
    case BINDLOG_EVENT_INVALIDATE:
        rc = decide_invalidate(ev, &cur, lsn, time_ms, p);
        break;
    case BINDLOG_EVENT_ROUTE:
        rc = decide_route(view, ev, &cur, known, lsn, time_ms, p);
        break;
    default:
        rc = decide_unbind(view, ev, &cur, known, lsn, time_ms, p);
        break;
    }
    return rc == BINDLOG_APPLIED ? check_numbers(lsn, time_ms, p) : rc;
}

int bl_event_from_record(const bl_record *rec, bl_event *ev)
{
    memset(ev, 0, sizeof(*ev));
    if (rec->type == 0 || rec->type >= BINDLOG_EVENT_COUNT)
        return BINDLOG_ECORRUPT;
    ev->type = rec->type;
    ev->key = rec->key;
    ev->key_len = rec->key_len;
    ev->reason = rec->reason ? rec->reason : "";
    ev->reason_len = rec->reason_len;
    if (rec->flags & BL_REC_ORIGIN) {
        ev->origin = rec->origin_len ? rec->origin : "";
        ev->origin_len = rec->origin_len;
    }
    ev->activity = (rec->flags & BL_REC_ACTIVITY) != 0;
    switch (rec->type) {
    case BINDLOG_EVENT_BIND:
        /* the previous binding must still be what the record says */
        ev->sid = rec->sid;
        ev->sid_len = rec->sid_len;
        ev->expect = rec->other ? rec->other : "";
        ev->expect_len = rec->other_len;
        break;
    case BINDLOG_EVENT_NEW_SESSION:
        ev->sid = rec->sid;
        ev->sid_len = rec->sid_len;
        break;
    case BINDLOG_EVENT_SPLIT:
        ev->sid = rec->sid;
        ev->sid_len = rec->sid_len;
        ev->expect = rec->other;
        ev->expect_len = rec->other_len;
        ev->generation = rec->generation;
        ev->reason = NULL; /* a split's reason is fixed */
        ev->reason_len = 0;
        break;
    case BINDLOG_EVENT_ROUTE:
        /* an activity on a bound key, never a reset (policy NULL, no fresh id) */
        ev->reason = NULL;
        ev->reason_len = 0;
        break;
    default:
        break;
    }
    return 0;
}

/* Append `n` bytes of room to enc->buf; returns the offset or SIZE_MAX. */
static size_t enc_reserve(bl_encoded *enc, size_t *used, size_t n)
{
    if (*used + n > enc->cap) {
        size_t cap = enc->cap ? enc->cap : 1024;
        while (cap < *used + n)
            cap *= 2;
        unsigned char *nb = realloc(enc->buf, cap);
        if (nb == NULL)
            return SIZE_MAX;
        enc->buf = nb;
        enc->cap = cap;
    }
    size_t off = *used;
    *used += n;
    return off;
}

/* An encoder refused a value of the plan (a field over its limit or
 * against its byte rule): nothing of it may be written.  bl_decide() builds
 * plans from checked events and decoded state, so this is damage the
 * decoders let through, or a bug; never an empty value in a table. */
static int unencodable(const char *what)
{
    return bl_err_set(BINDLOG_ECORRUPT,
                      "an event's new %s does not encode (a field breaks its rule)", what);
}

static int plan_encode(const bl_plan *p, bl_encoded *enc, int with_record)
{
    size_t used = 0, n;

    n = bl_bval_size(&p->after);
    if ((enc->bval_off = enc_reserve(enc, &used, n)) == SIZE_MAX)
        return BINDLOG_ENOMEM;
    enc->bval_len = bl_bval_encode(&p->after, enc->buf + enc->bval_off, n);
    if (enc->bval_len == 0)
        return unencodable("binding value");

    for (unsigned i = 0; i < p->nsess; i++) {
        bl_sval unlinked;
        const bl_sval *sv = &p->sess[i].v;
        if (!enc->links) {
            bl_sval_copy(&unlinked, sv);
            unlinked.child_lsn = unlinked.sibling_lsn = 0;
            sv = &unlinked;
        }
        int ref = enc->ref_ok == BL_SVAL_REF && sv->ref;
        /* a whole value gets the room of its longest form, trimmed after */
        n = ref ? bl_sval_ref_size(sv) : bl_sval_room(sv);
        if ((enc->sval_off[i] = enc_reserve(enc, &used, n)) == SIZE_MAX)
            return BINDLOG_ENOMEM;
        unsigned char *o = enc->buf + enc->sval_off[i];
        enc->sval_len[i] = ref ? bl_sval_encode_ref(sv, o, n)
                           : enc->ref_ok == BL_SVAL_BASE ? bl_sval_encode_base(sv, o, n)
                                                        : bl_sval_encode(sv, o, n);
        if (enc->sval_len[i] == 0)
            return unencodable("session value");
        used = enc->sval_off[i] + enc->sval_len[i];
        if ((enc->sid_off[i] = enc_reserve(enc, &used, p->sess[i].id_len)) == SIZE_MAX)
            return BINDLOG_ENOMEM;
        memcpy(enc->buf + enc->sid_off[i], p->sess[i].id, p->sess[i].id_len);
    }

    enc->child_len = 0;
    if (p->child_parent != NULL) {
        n = p->child_parent_len + 1 + p->child_id_len;
        if ((enc->child_off = enc_reserve(enc, &used, n)) == SIZE_MAX)
            return BINDLOG_ENOMEM;
        memcpy(enc->buf + enc->child_off, p->child_parent, p->child_parent_len);
        enc->buf[enc->child_off + p->child_parent_len] = 0;
        memcpy(enc->buf + enc->child_off + p->child_parent_len + 1, p->child_id, p->child_id_len);
        enc->child_len = n;
    }

    enc->rec_off = enc->rec_len = 0;
    if (!with_record)
        return 0;
    n = bl_record_room(&p->rec); /* the record is the buffer's last item */
    if ((enc->rec_off = enc_reserve(enc, &used, n)) == SIZE_MAX)
        return BINDLOG_ENOMEM;
    enc->rec_len = bl_record_encode(&p->rec, enc->buf + enc->rec_off, n);
    return enc->rec_len == 0 ? unencodable("record") : 0;
}

int bl_plan_encode(const bl_plan *p, bl_encoded *enc)
{
    return plan_encode(p, enc, 1);
}

int bl_plan_encode_state(const bl_plan *p, bl_encoded *enc)
{
    return plan_encode(p, enc, 0);
}

void bl_plan_explain(const bl_plan *p, int rc, char *buf, size_t cap)
{
    char key[BL_ERR_QUOTE_MAX];

    if (cap == 0)
        return;
    buf[0] = '\0';
    if (p->why == NULL)
        return;
    if (rc == BINDLOG_ECONFLICT && p->why_key != NULL)
        snprintf(buf, cap, "%s %s", p->why,
                 bl_err_bytes(key, sizeof key, p->why_key, p->why_key_len));
    else
        snprintf(buf, cap, "%s", p->why);
}
