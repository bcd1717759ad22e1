/*
 * route.c -- bindlog_route() and bindlog_expire(): inbound routing with
 * reset policies, and the sweep of idle keys (SPEC section 2b).
 *
 * Above the storage seam like api.c and entries.c.  The decision itself is
 * the state machine's (machine.c, decide_route): a route is one event of
 * type BINDLOG_EVENT_ROUTE that goes through the backend's group commit
 * like every write, so it is decided under the writers' lock against the
 * newest state, and routes racing on one key are decided one after the
 * other.  The write path reports the answer through bl_event.route_out.
 *
 * Expiry reads the bindings on one snapshot, then hands an UNBIND with
 * reason "expired" and a cut-off (bl_event.idle_before_ms) for each idle
 * key to bl_commit_each_chunked: group commits of up to 8,192 events.  The
 * machine checks the cut-off again when it decides each UNBIND, so a key
 * routed between the snapshot and its UNBIND stays bound (MOVED, not
 * counted).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/error.h"

/* The reason every expiry UNBIND is logged with. */
static const char expired_reason[] = "expired";

static int route(bindlog *s, const char *key, int64_t now_ms, const bindlog_policy *policy,
                 const char *fresh, const void *origin, size_t origin_len,
                 bindlog_route_result *out)
{
    bindlog_route_result tmp;
    bindlog_result res;
    const char *why;
    bl_event ev;
    int rc;

    if (s == NULL)
        return bl_err_set(BINDLOG_EINVAL, "handle is NULL");
    if ((rc = bl_fork_check(s)) != 0)
        return rc;
    if (key == NULL)
        return bl_err_set(BINDLOG_EINVAL, "key is NULL");
    if ((why = bl_policy_problem(policy)) != NULL)
        return bl_err_set(BINDLOG_EINVAL, "%s", why);
    if (fresh == NULL)
        return bl_err_set(BINDLOG_EINVAL, "fresh session id is NULL");
    if (now_ms < 0)
        return bl_err_set(BINDLOG_EINVAL, "now_ms is negative");

    memset(&ev, 0, sizeof ev);
    ev.type = BINDLOG_EVENT_ROUTE;
    ev.key = key;
    ev.key_len = strnlen(key, BINDLOG_KEY_MAX + 1);
    ev.sid = fresh;
    ev.sid_len = strnlen(fresh, BINDLOG_ID_MAX + 1);
    ev.origin = origin;
    ev.origin_len = origin_len;
    ev.time_ms = now_ms; /* 0: the handle's clock */
    ev.policy = policy;
    ev.route_out = out != NULL ? out : &tmp;
    if ((why = bl_event_problem(&ev)) != NULL)
        return bl_err_set(BINDLOG_EINVAL, "%s", why);
    if (s->read_only)
        return bl_err_set(BINDLOG_EREADONLY, "the handle was opened read-only");
    rc = s->ops->commit(s, &ev, 1, &res, NULL);
    if (rc == 0)
        rc = ev.route_out->outcome; /* ROUTED (perhaps coalesced), CREATED or RESET */
    return rc;
}

int bindlog_route(bindlog *s, const char *key, int64_t now_ms, const bindlog_policy *policy,
                  const char *fresh_session_id, const void *origin, size_t origin_len,
                  bindlog_route_result *out)
{
    char q[BL_ERR_QUOTE_MAX];
    bl_err_clear();
    int rc = route(s, key, now_ms, policy, fresh_session_id, origin, origin_len, out);
    if (s != NULL)
        bl_count_call(s, BINDLOG_EVENT_ROUTE, rc >= 0 ? BINDLOG_APPLIED : rc);
    return BL_API_DONE(rc, "route %s",
                       key ? bl_err_bytes(q, sizeof q, key, strnlen(key, BINDLOG_KEY_MAX + 1))
                           : "(null)");
}

/* ---- expiry ----------------------------------------------------------- */

typedef struct victims {
    char (*keys)[BINDLOG_KEY_MAX + 1];
    size_t n, cap;
} victims;

static int victims_add(victims *v, const char *key)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 256;
        void *nk = realloc(v->keys, cap * sizeof(*v->keys));
        if (nk == NULL)
            return BINDLOG_ENOMEM;
        v->keys = nk;
        v->cap = cap;
    }
    memcpy(v->keys[v->n++], key, BINDLOG_KEY_MAX + 1);
    return 0;
}

/* The bound keys under prefix whose activity is before cutoff, from one
 * snapshot. */
static int find_idle(bindlog *s, int64_t cutoff, const char *prefix, size_t plen, victims *v)
{
    bindlog_iter *it = NULL;
    bindlog_binding b;
    int rc = bindlog_bindings_iter(s, &it);

    while (rc == 0 && (rc = bindlog_iter_next_binding(it, &b)) == 1) {
        rc = 0;
        if (b.session_id[0] == '\0' || strncmp(b.key, prefix, plen) != 0)
            continue;
        int64_t ref = b.last_activity_ms > b.updated_ms ? b.last_activity_ms : b.updated_ms;
        if (ref < cutoff)
            rc = victims_add(v, b.key);
    }
    bindlog_iter_close(it);
    return rc < 0 ? rc : 0;
}

static int expire(bindlog *s, int64_t cutoff, const char *prefix, int dry_run, uint64_t *count)
{
    victims v = {NULL, 0, 0};
    bl_event *ev = NULL;
    size_t *which = NULL;
    bindlog_result *res = NULL;
    int *rcs = NULL, *codes = NULL;
    size_t plen;
    int rc;

    *count = 0;
    if (s == NULL)
        return bl_err_set(BINDLOG_EINVAL, "handle is NULL");
    if ((rc = bl_fork_check(s)) != 0)
        return rc;
    if (prefix == NULL)
        prefix = "";
    if ((plen = strnlen(prefix, BINDLOG_KEY_MAX + 1)) > BINDLOG_KEY_MAX)
        return bl_err_set(BINDLOG_EINVAL, "prefix is longer than BINDLOG_KEY_MAX (400) bytes");
    if (cutoff <= 0)
        return bl_err_set(BINDLOG_EINVAL, "cut-off must be > 0 (ms since the epoch)");
    if (!dry_run && s->read_only)
        return bl_err_set(BINDLOG_EREADONLY, "the handle was opened read-only");
    if ((rc = find_idle(s, cutoff, prefix, plen, &v)) != 0 || dry_run || v.n == 0) {
        if (rc == 0)
            *count = v.n;
        goto out;
    }

    size_t scratch = v.n < 8192 ? v.n : 8192;
    ev = calloc(v.n, sizeof(*ev));
    which = malloc(v.n * sizeof(*which));
    codes = malloc(v.n * sizeof(*codes));
    res = malloc(scratch * sizeof(*res));
    rcs = malloc(scratch * sizeof(*rcs));
    if (ev == NULL || which == NULL || codes == NULL || res == NULL || rcs == NULL) {
        rc = BINDLOG_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < v.n; i++) {
        ev[i].type = BINDLOG_EVENT_UNBIND;
        ev[i].key = v.keys[i];
        ev[i].key_len = strlen(v.keys[i]);
        ev[i].reason = expired_reason;
        ev[i].reason_len = sizeof(expired_reason) - 1;
        ev[i].idle_before_ms = cutoff;
        which[i] = i;
        codes[i] = BINDLOG_MOVED; /* not tried (a failed chunk): not expired */
    }
    rc = bl_commit_each_chunked(s, ev, which, v.n, res, rcs, NULL, NULL, codes, NULL, 0, v.n,
                                NULL, NULL);
    for (size_t i = 0; i < v.n; i++)
        *count += codes[i] == BINDLOG_APPLIED;
out:
    free(v.keys);
    free(ev);
    free(which);
    free(codes);
    free(res);
    free(rcs);
    return rc;
}

int bindlog_expire(bindlog *s, int64_t cutoff_ms, const char *prefix, int dry_run,
                   uint64_t *count)
{
    uint64_t n;
    bl_err_clear();
    int rc = expire(s, cutoff_ms, prefix, dry_run, count != NULL ? count : &n);
    return bl_api_done(rc, "expire%s", dry_run ? " (dry run)" : "");
}
