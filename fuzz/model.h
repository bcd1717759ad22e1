/*
 * model.h -- a small, independent reference model of SPEC section 2.
 *
 * machine_fuzzer applies every call both to a real store and to this model
 * and aborts when they disagree.  The model is written from the
 * specification (SPEC.md section 2 and the comments of include/bindlog.h),
 * not from src/core/machine.c, and shares no decision code with the library: it
 * keeps the state in plain arrays, decides each event with its own reading
 * of the rules, and computes the state digest itself.  The only library code
 * it uses are the value encoders of src/core/record.h, because the digest is
 * defined over those exact bytes (docs/format.md, src/core/digest.c).
 *
 * Everything is in memory and O(n) per lookup: the fuzzer's states hold a
 * few dozen keys and sessions.  Not thread-safe.
 */
#ifndef BINDLOG_FUZZ_MODEL_H
#define BINDLOG_FUZZ_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "bindlog.h"

typedef struct fm_binding {
    char key[BINDLOG_KEY_MAX + 1];
    size_t key_len;
    char sid[BINDLOG_ID_MAX + 1]; /* "" = tombstone */
    size_t sid_len;
    uint64_t generation, lsn;
    int64_t updated_ms;
    int64_t last_activity_ms; /* last routed message, 0 = none (fm_route) */
} fm_binding;

typedef struct fm_session {
    char id[BINDLOG_ID_MAX + 1];
    size_t id_len;
    char key[BINDLOG_KEY_MAX + 1];
    size_t key_len;
    char parent[BINDLOG_ID_MAX + 1];
    size_t parent_len;
    uint64_t created_lsn, ended_lsn;
    int64_t created_ms, ended_ms;
    char reason[BINDLOG_REASON_MAX + 1];
    size_t reason_len;
    unsigned char *origin; /* malloc'd, NULL when origin_len is 0 */
    size_t origin_len;
} fm_session;

typedef struct fm_record {
    uint64_t lsn;
    int type;
    int64_t time_ms;
    uint64_t generation;
    char key[BINDLOG_KEY_MAX + 1];
    char sid[BINDLOG_ID_MAX + 1];
    char other[BINDLOG_ID_MAX + 1];
    char reason[BINDLOG_REASON_MAX + 1];
    unsigned char *origin; /* malloc'd, NULL when origin_len is 0 */
    size_t origin_len;
    int origin_present;
} fm_record;

typedef struct fm_model {
    fm_binding *b;
    size_t nb, capb;
    fm_session *s;
    size_t ns, caps;
    fm_record *log;
    size_t nlog, caplog;
    uint64_t head_lsn;
    int64_t head_time; /* time of the last record; times never go back */
    uint64_t applied[BINDLOG_EVENT_COUNT];
} fm_model;

void fm_init(fm_model *m);
void fm_free(fm_model *m);

/*
 * Apply one event as the matching bindlog_* call would, at wall-clock time
 * `now` (the store uses max(now, time of the last record)).  Returns the
 * outcome or error code the library must return; for an outcome *out is
 * filled (out may be NULL).  Argument checks come first (BINDLOG_EINVAL);
 * a read-only handle is the caller's business (BINDLOG_EREADONLY comes
 * between the argument checks and the state checks: see fm_check_event).
 */
int fm_apply(fm_model *m, const bindlog_event *ev, int64_t now, bindlog_result *out);

/* Argument checks of one event alone: 0 or BINDLOG_EINVAL. */
int fm_check_event(const bindlog_event *ev);

/*
 * bindlog_apply_batch: every event's arguments are checked first (the first
 * bad one is the error, *err_index its position); then the events apply in
 * order, and on an error nothing of the batch stays (the model is left as it
 * was).  0 or the error.
 */
int fm_apply_batch(fm_model *m, const bindlog_event *ev, size_t n, int64_t now,
                   bindlog_result *out, size_t *err_index);

/*
 * bindlog_route(key, now, policy, fresh, no origin) as SPEC 2b reads: the
 * key's activity before this message (the later of its last routed message
 * and its last binding change) judged by the policy at the event's time;
 * bound and fresh (or bound to fresh, or mode none): ROUTED, a ROUTE record
 * and the activity set; unbound: CREATED, stale: RESET, both a NEW_SESSION
 * (reason "new_session", or "idle"/"daily") that sets the activity.
 * Returns the outcome or the error; *out filled for an outcome.
 */
int fm_route(fm_model *m, const char *key, int64_t now, const bindlog_policy *policy,
             const char *fresh, bindlog_route_result *out);

/*
 * bindlog_expire(cutoff, prefix): every bound key under prefix whose
 * activity is before cutoff is UNBOUND with reason "expired", in key order
 * (the library's iteration order), at time now.  Returns 0 or EINVAL;
 * *count gets how many (or would, with dry_run).  Sorts the model.
 */
int fm_expire(fm_model *m, int64_t now, int64_t cutoff, const char *prefix, int dry_run,
              uint64_t *count);

/* Lookups.  NULL when absent.  key/id are NUL-terminated. */
const fm_binding *fm_binding_get(const fm_model *m, const char *key);
const fm_session *fm_session_get(const fm_model *m, const char *id);

/* The state digest (SPEC 5, src/core/digest.c) of the model's state. */
void fm_digest(const fm_model *m, unsigned char out[BINDLOG_DIGEST_SIZE]);

/* Sort bindings and sessions into LMDB key order (memcmp, shorter first),
 * the order of the library's iterators. */
void fm_sort(fm_model *m);

#endif /* BINDLOG_FUZZ_MODEL_H */
