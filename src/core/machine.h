/*
 * machine.h -- the pure state machine of bindlog (SPEC section 2).
 *
 * bl_decide() validates one event against a read-only view of the current
 * state and returns its outcome plus the mutations that applying it means.
 * It performs no I/O and knows nothing of LMDB: the LMDB write path, replay,
 * the fuzz model and any later backend all call it, so the event semantics
 * live in exactly one place.
 *
 * Memory: the plan's strings point either into the event or into memory the
 * view returned.  A storage backend whose writes may move what its reads
 * returned (LMDB does) must encode every value of the plan before its first
 * write, which is what bl_plan_encode() is for.
 */
#ifndef BL_MACHINE_H
#define BL_MACHINE_H

#include <stddef.h>
#include <stdint.h>

#include "core/record.h"

/* One event with explicit lengths.  A NULL pointer means "not given". */
typedef struct bl_event {
    unsigned type;           /* BINDLOG_EVENT_* */
    /* BIND, NEW_SESSION: 1 = a routed message's event (a route's CREATED
     * or RESET, an imported entry): the key's last activity becomes the
     * event's time and the record says so (BL_REC_ACTIVITY).  Here, beside
     * type, where the two fill one 8-byte slot. */
    int activity;
    const char *key;
    size_t key_len;
    const char *sid;         /* BIND target, NEW_SESSION id, SPLIT child */
    size_t sid_len;
    const char *expect;      /* BIND: expected binding (NULL: no check); SPLIT: parent */
    size_t expect_len;
    uint64_t generation;     /* SPLIT: run generation */
    const char *reason;      /* NULL: the type's default */
    size_t reason_len;
    const void *origin;      /* NULL: none given (origin_len must be 0) */
    size_t origin_len;
    /* The event's time, ms since the epoch, chosen by the caller (an import
     * carries an entry's own time); 0: the handle's clock.  The write path
     * still never lets a record's time go below the head's. */
    int64_t time_ms;
    /* ROUTE (bindlog_route): the reset policy; NULL = never reset (what
     * replay re-derives a ROUTE record with).  sid is the fresh session
     * id, NULL only in replay (a ROUTE record's key is always bound). */
    const bindlog_policy *policy;
    /* ROUTE: where the write path reports the route's answer
     * (bl_route_fill), or NULL. */
    bindlog_route_result *route_out;
    /* UNBIND: > 0 = expiry: only if the key's activity (bl_activity_ref)
     * is before this time, else MOVED (the key was used meanwhile). */
    int64_t idle_before_ms;
} bl_event;

/*
 * Read-only access to the current state.  Each callback returns 0 and fills
 * *out, BINDLOG_ENOTFOUND, or another negative error (e.g. BINDLOG_ECORRUPT)
 * which bl_decide() passes on unchanged.  What the callbacks return must stay
 * valid until bl_decide() and the encoding of its plan are done.
 */
typedef struct bl_view {
    void *ctx;
    int (*binding)(void *ctx, const char *key, size_t key_len, bl_bval *out);
    int (*session)(void *ctx, const char *id, size_t id_len, bl_sval *out);
} bl_view;

/* A session to write: its id and full new value. */
typedef struct bl_sput {
    const char *id;
    size_t id_len;
    bl_sval v;
} bl_sput;

#define BL_PLAN_MAX_SESSIONS 2

/*
 * What an event means.  For every outcome `after` is the key's binding after
 * the call (for a rejected event, the current one; generation 0 and sid ""
 * for a key never seen).  The remaining fields are set only for APPLIED.
 */
typedef struct bl_plan {
    int outcome;              /* BINDLOG_APPLIED, _ALREADY, _STALE, _MOVED */
    bl_bval after;            /* the key's binding after the event */
    /* APPLIED only: */
    unsigned nsess;           /* sessions to put, 0..2, in order */
    bl_sput sess[BL_PLAN_MAX_SESSIONS];
    const char *child_parent; /* children index entry (parent -> sess child), or NULL */
    size_t child_parent_len;
    uint64_t child_parent_lsn; /* the parent's created_lsn (LMDB's children key) */
    const char *child_id;
    size_t child_id_len;
    bl_record rec;            /* the log record (lsn and time as given) */
    int new_key;              /* 1: the key had no binding entry before */
    int d_live_bindings;      /* change in bound keys: -1, 0 or +1 */
    int d_sessions;           /* new sessions: 0 or 1 */
    int d_live_sessions;      /* change in live sessions: -1, 0 or +1 */
    /* When bl_decide() returns an error of its own (EINVAL, ENOTFOUND,
     * EEXIST, ECONFLICT, ECORRUPT): why, in words (static), and for
     * ECONFLICT the key that holds the session (view memory).  NULL when
     * the error came from the view. */
    const char *why;
    const char *why_key;
    size_t why_key_len;
    /* ROUTE, APPLIED (or ALREADY: a ROUTED coalesced with an activity
     * already at this time, nothing logged): the answer (BINDLOG_ROUTED,
     * _CREATED, _RESET), the
     * reset's reason (BINDLOG_RESET_IDLE, _DAILY or _NONE), the key's last
     * activity before the event, and for RESET the session that ended
     * (view memory). */
    int route_outcome;
    int route_reason;
    int64_t route_before;
    const char *route_prev;
    size_t route_prev_len;
} bl_plan;

/* The reason recorded when the caller gave none. */
const char *bl_default_reason(unsigned type);

/*
 * Check the event's arguments alone (types, lengths, forbidden bytes,
 * parent == child, NULL origin with a length...).  0 or BINDLOG_EINVAL.
 */
int bl_event_check(const bl_event *ev);

/* What is wrong with the event's arguments, in words (a static string), or
 * NULL when bl_event_check() accepts it. */
const char *bl_event_problem(const bl_event *ev);

/*
 * Put into buf (cap bytes) why bl_decide() refused with error rc, as the
 * detail of a last-error message: plan->why, with the conflicting key for
 * ECONFLICT.  Empty when the plan says nothing (the error came from the
 * view: the backend's storage).  Must run while the view memory the plan
 * points into is still valid.
 */
void bl_plan_explain(const bl_plan *plan, int rc, char *buf, size_t cap);

/*
 * Decide `ev` against `view`.  `lsn` and `time_ms` are what the event gets
 * if it applies.  Returns the outcome (>= 0; plan filled) or a negative error
 * (plan unspecified): BINDLOG_EINVAL, BINDLOG_ENOTFOUND, BINDLOG_EEXIST,
 * BINDLOG_ECONFLICT, or an error from the view.  An event that would apply
 * with an LSN above BINDLOG_LSN_MAX is BINDLOG_ENOSPC (the log's LSN space
 * is exhausted), with a time outside BINDLOG_TIME_*_MS BINDLOG_EINVAL (the
 * clock is wrong); plan->why says which.
 */
int bl_decide(const bl_view *view, const bl_event *ev, uint64_t lsn, int64_t time_ms,
              bl_plan *plan);

/*
 * The event a logged record stands for, so that replay can re-decide it: for
 * a consistent log, bl_decide() on the state before the record returns
 * APPLIED with a record equal to `rec`.  Pointers point into rec.  Returns 0
 * or BINDLOG_ECORRUPT (unknown type).
 */
int bl_event_from_record(const bl_record *rec, bl_event *ev);

/* The time a key counts as last active from, for reset policies and
 * expiry: the later of its last routed message and its last binding
 * change (a session bound by /new or /resume is fresh from then on). */
static inline int64_t bl_activity_ref(const bl_bval *b)
{
    return b->last_activity_ms > b->updated_ms ? b->last_activity_ms : b->updated_ms;
}

/* 1 if a key last active at `ref` is stale at `now` under `policy` (and
 * *reason the BINDLOG_RESET_* it is stale by: DAILY when both hold), else
 * 0.  Mode NONE, or a NULL policy, is never stale. */
int bl_policy_stale(const bindlog_policy *policy, int64_t ref, int64_t now, int *reason);

/* What is wrong with a policy, in words (static), or NULL. */
const char *bl_policy_problem(const bindlog_policy *policy);

/* Fill a route's result from its plan (route_outcome set).  Must run before the plan's
 * view memory moves (as the write path's result filling does). */
void bl_route_fill(const bl_plan *plan, bindlog_route_result *out);

enum { BL_SVAL_WHOLE = 0, BL_SVAL_REF = 1, BL_SVAL_BASE = 2 };

/* Encoded plan: every value ready to write, in one caller-owned buffer. */
typedef struct bl_encoded {
    /* Input: how to write the sessions the plan marks (bl_sval.ref):
     * BL_SVAL_WHOLE (0) every value whole (a base image, another backend),
     * BL_SVAL_REF in the reference form (a sessions table of format 5 or 6, whose
     * log keeps their records), BL_SVAL_BASE whole with the mark
     * (bl_sval_encode_base: a base image, the bulk replay's state). */
    int ref_ok;
    /* Input: 1 to write the sibling chain in the session values
     * (bl_sval.child_lsn, sibling_lsn: an LMDB store of format 6 or 7, whose
     * children table indexes only what the log no longer holds); 0 leaves
     * it out (the etcd backend keeps a children index of its own). */
    int links;
    unsigned char *buf;       /* owned by the caller of bl_plan_encode */
    size_t cap;
    size_t bval_off, bval_len;
    size_t sval_off[BL_PLAN_MAX_SESSIONS], sval_len[BL_PLAN_MAX_SESSIONS];
    size_t sid_off[BL_PLAN_MAX_SESSIONS];  /* copies of the session ids (table keys) */
    size_t child_off, child_len;           /* children index key: parent 0x00 child; len 0 = none */
    size_t rec_off, rec_len;
} bl_encoded;

/*
 * Encode the binding value, the session values, the record, and copies of
 * every table key that may point into view memory (session ids, the children
 * index key) of an APPLIED plan into enc->buf, growing it with realloc as
 * needed.  After this the plan's pointers are no longer needed.  0,
 * BINDLOG_ENOMEM, or BINDLOG_ECORRUPT (with a last-error message) when an
 * encoder refuses one of the values (a field over its limit or against its
 * byte rule), which a plan of bl_decide() never holds: nothing is to be
 * written then.  Free enc->buf with free() when done (it may be reused
 * across calls to save allocations).
 */
int bl_plan_encode(const bl_plan *plan, bl_encoded *enc);

/* bl_plan_encode() without the record (enc->rec_len = 0): for a replay that
 * compares plan->rec with the stored record field by field
 * (bl_record_same) instead of byte by byte. */
int bl_plan_encode_state(const bl_plan *plan, bl_encoded *enc);

#endif /* BL_MACHINE_H */
