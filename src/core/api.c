/*
 * api.c -- the public entry points: the only layer above the storage seam.
 *
 * Every call checks its arguments here, the same way for every backend,
 * then goes through the handle's table of operations (backend.h).  A
 * mutating call turns its NUL-terminated arguments into a bl_event (lengths
 * measured with a bound, so a missing terminator in a huge buffer is not
 * scanned to the end), checks it, checks the handle is writable, and hands
 * it to the backend's write path.  The order of refusals is the contract's:
 * arguments (BINDLOG_EINVAL), then read-only (BINDLOG_EREADONLY), then state.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/error.h"
#include "core/module.h"
#include "platform/platform.h"

const char *bindlog_version(void) { return BINDLOG_VERSION_STRING; }

static const struct {
    int code;
    const char *name, *text;
} codes[] = {
    {BINDLOG_APPLIED, "BINDLOG_APPLIED", "applied: the state changed"},
    {BINDLOG_ALREADY, "BINDLOG_ALREADY", "already: the state was already as requested"},
    {BINDLOG_STALE, "BINDLOG_STALE", "stale: the run's generation is not the key's current one"},
    {BINDLOG_MOVED, "BINDLOG_MOVED", "moved: the key is not bound to the expected session"},
    {BINDLOG_ROUTED, "BINDLOG_ROUTED", "routed: the key's session is fresh; activity recorded"},
    {BINDLOG_CREATED, "BINDLOG_CREATED", "created: the unbound key was bound to the fresh session"},
    {BINDLOG_RESET, "BINDLOG_RESET",
     "reset: the key's session was stale by policy; the fresh session replaced it"},
    {BINDLOG_ENOTFOUND, "BINDLOG_ENOTFOUND", "not found"},
    {BINDLOG_EINVAL, "BINDLOG_EINVAL", "invalid argument"},
    {BINDLOG_EEXIST, "BINDLOG_EEXIST",
     "already exists (a session id, or data where an empty store was required)"},
    {BINDLOG_ECONFLICT, "BINDLOG_ECONFLICT", "the session is the live binding of another key"},
    {BINDLOG_ECORRUPT, "BINDLOG_ECORRUPT", "damaged data (checksum, length or encoding)"},
    {BINDLOG_EVERSION, "BINDLOG_EVERSION", "written by a newer, unsupported format version"},
    {BINDLOG_EIO, "BINDLOG_EIO", "input/output error"},
    {BINDLOG_ENOSPC, "BINDLOG_ENOSPC", "no space left on the device"},
    {BINDLOG_ENOMEM, "BINDLOG_ENOMEM", "out of memory"},
    {BINDLOG_EBUSY, "BINDLOG_EBUSY", "resource busy (reader table full or store locked)"},
    {BINDLOG_EREADONLY, "BINDLOG_EREADONLY", "the handle is read-only"},
    {BINDLOG_ENOTSTORE, "BINDLOG_ENOTSTORE", "the directory does not hold a bindlog store"},
    {BINDLOG_EACCES, "BINDLOG_EACCES", "permission denied"},
    {BINDLOG_EPANIC, "BINDLOG_EPANIC",
     "a fatal I/O error made the handle unusable: close every handle and reopen"},
    {BINDLOG_ENOTSUP, "BINDLOG_ENOTSUP", "not supported by this build"},
    {BINDLOG_EFORK, "BINDLOG_EFORK",
     "the handle belongs to another process (opened before a fork): open the store in this "
     "process"},
};

const char *bindlog_strerror(int rc)
{
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (codes[i].code == rc)
            return codes[i].text;
    return "unknown error";
}

const char *bindlog_code_name(int rc)
{
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (codes[i].code == rc)
            return codes[i].name;
    return "BINDLOG_UNKNOWN";
}

const char *bindlog_last_error(void) { return bl_err_get(); }

/* A caller string inside a message: escaped, bounded.  Used as
 * Q(buf, s) with a char buf[BL_ERR_QUOTE_MAX]. */
static const char *quote(char *buf, const char *s, size_t max)
{
    if (s == NULL)
        return "(null)";
    if (s[0] == '\0')
        return "\"\""; /* "get : ..." would read as a typo */
    return bl_err_bytes(buf, BL_ERR_QUOTE_MAX, s, strnlen(s, max + 1));
}
#define QKEY(buf, k) quote(buf, k, BINDLOG_KEY_MAX)
#define QID(buf, k) quote(buf, k, BINDLOG_ID_MAX)
#define QPATH(buf, k) quote(buf, k, 4096)

const char *bindlog_event_name(int type)
{
    static const char *const names[BINDLOG_EVENT_COUNT] = {
        "unknown", "bind", "new_session", "split", "invalidate", "unbind", "route",
    };
    return type > 0 && type < BINDLOG_EVENT_COUNT ? names[type] : "unknown";
}

/* ---- backends and handles ----------------------------------------------- */

/* A plain path is LMDB's; etcd:// and etcds:// are served by the etcd
 * module, loaded on first use (core/module.h): libbindlog itself links
 * neither libcurl nor json-c.  Without the module such an open is
 * BINDLOG_ENOTSUP with a message saying what to install. */

/* 1 if the location starts like a URL ("word://"), which no directory
 * path is meant to: a typo in a scheme must not create a directory. */
static int looks_like_url(const char *location)
{
    const char *p = location;
    while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
           *p == '+' || *p == '-' || *p == '.')
        p++;
    return p != location && strncmp(p, "://", 3) == 0;
}

/* The backend of `location`: 0 with *ops, BINDLOG_ENOTSUP (its module
 * cannot be loaded) or BINDLOG_EINVAL (an unknown scheme), each with its
 * last-error detail. */
static int backend_for(const char *location, const bl_backend_ops **ops)
{
    int rc = bl_module_backend(location, ops);
    if (rc == 1)
        return 0;
    if (rc < 0)
        return rc;
    if (looks_like_url(location))
        return bl_err_set(BINDLOG_EINVAL, "unknown scheme (a store is a directory path, "
                                          "etcd://HOST:PORT/PREFIX or etcds://HOST:PORT/PREFIX)");
    *ops = &bl_lmdb_ops;
    return 0;
}

/* ---- processes: fork ------------------------------------------------------ */

/* Bumped in every child process by the handler below: a handle whose
 * fork_gen differs was opened by an ancestor (backend.h, bl_fork_check). */
_Atomic unsigned bl_fork_gen;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
    atomic_fetch_add_explicit(&bl_fork_gen, 1, memory_order_relaxed);
}

static void fork_register(void) { (void)pthread_atfork(NULL, NULL, fork_child); }

int bl_fork_refuse(const bindlog *s)
{
    return bl_err_set(BINDLOG_EFORK,
                      "the handle was opened by process %ld and this is process %ld, forked "
                      "from it: the handle's environment, locks and shared memory are the "
                      "opener's.  Open the store in this process, after the fork (or close it "
                      "before forking)",
                      s->pid, (long)getpid());
}

int bl_wait_poll(bindlog *h, uint64_t after_lsn, int timeout_ms, uint64_t *head,
                 int (*read_head)(bindlog *h, uint64_t *head), int period_ms)
{
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : bl_mono_ms() + timeout_ms;
    for (;;) {
        int rc = read_head(h, head);
        if (rc != 0 || *head > after_lsn)
            return rc;
        int64_t left = deadline - bl_mono_ms();
        if (left <= 0)
            return 0;
        int64_t nap = left < period_ms ? left : period_ms;
        struct timespec ts = {(time_t)(nap / 1000), (long)(nap % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) /* EINTR: sleep the rest */
            ;
    }
}

int64_t bl_now_ms(const bindlog *h)
{
    if (h->clock_ms != NULL)
        return h->clock_ms(h->clock_ctx);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The size of the options struct of each version (fields are only added
 * at the end). */
static size_t options_size(unsigned version)
{
    return version >= 4   ? sizeof(bindlog_options)
           : version == 3 ? offsetof(bindlog_options, lock_timeout_ms)
           : version == 2 ? offsetof(bindlog_options, log_size)
                          : offsetof(bindlog_options, etcd_cacert);
}

static int open_store(bindlog **out, const char *dir, const bindlog_options *opts)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *h;
    int rc;

    if (out == NULL)
        return bl_err_set(BINDLOG_EINVAL, "out is NULL");
    *out = NULL;
    if (dir == NULL || dir[0] == '\0')
        return bl_err_set(BINDLOG_EINVAL, "the store location is NULL or empty");
    if (opts != NULL) {
        if (opts->version == 0 || opts->version > BINDLOG_OPTIONS_VERSION)
            return bl_err_set(BINDLOG_EINVAL,
                              "options version %u is not 1..%u (use BINDLOG_OPTIONS_INIT)",
                              opts->version, (unsigned)BINDLOG_OPTIONS_VERSION);
        /* only the fields the caller's version has: an older caller's
         * struct ends sooner */
        memcpy(&o, opts, options_size(opts->version));
    }
    if (o.durability < BINDLOG_DURABILITY_FULL || o.durability > BINDLOG_DURABILITY_NONE)
        return bl_err_set(BINDLOG_EINVAL, "unknown durability mode %d", o.durability);
    if (o.max_readers > BINDLOG_READERS_MAX)
        return bl_err_set(BINDLOG_EINVAL, "max_readers %u is over %u", o.max_readers,
                          (unsigned)BINDLOG_READERS_MAX);

    /* fork detection: the handler is registered before the first handle
     * exists, so that every fork after it is seen */
    if (pthread_once(&fork_once, fork_register) != 0)
        return bl_err_set(BINDLOG_ENOMEM, "cannot register the fork handler");
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return BINDLOG_ENOMEM;
    h->fork_gen = atomic_load_explicit(&bl_fork_gen, memory_order_relaxed);
    h->pid = (long)getpid();
    h->path = strdup(dir);
    if (h->path == NULL) {
        free(h);
        return BINDLOG_ENOMEM;
    }
    if ((rc = backend_for(dir, &h->ops)) != 0) {
        free(h->path);
        free(h);
        return rc;
    }
    h->read_only = o.read_only != 0;
    h->durability = o.durability;
    h->clock_ms = o.clock_ms;
    h->clock_ctx = o.clock_ctx;
    rc = h->ops->open(h, &o);
    if (rc != 0) {
        free(h->path);
        free(h);
        return rc;
    }
    *out = h;
    return 0;
}

/* A location for a message.  In a URL whose authority holds '@'
 * ("etcds://user:password@host:port/P", refused by the backend), what
 * precedes the last '@' may be a password: it becomes "***". */
static const char *qlocation(char *buf, const char *loc)
{
    if (loc == NULL || !looks_like_url(loc))
        return QPATH(buf, loc);
    const char *auth = strstr(loc, "://") + 3;
    size_t alen = strcspn(auth, "/");
    const char *at = NULL;
    for (const char *p = auth; p < auth + alen; p++)
        if (*p == '@')
            at = p;
    if (at == NULL)
        return QPATH(buf, loc);
    char tmp[BL_ERR_QUOTE_MAX];
    snprintf(tmp, sizeof tmp, "%.*s***%s", (int)(auth - loc), loc, at);
    return QPATH(buf, tmp);
}

int bindlog_open(bindlog **out, const char *dir, const bindlog_options *opts)
{
    char q[BL_ERR_QUOTE_MAX];
    bl_err_clear();
    int rc = open_store(out, dir, opts);
    return BL_API_DONE(rc, "open %s", qlocation(q, dir));
}

void bindlog_close(bindlog *s)
{
    if (s == NULL)
        return;
    /* In a forked child the backend's state is the parent's (and LMDB's
     * environment must not be closed there): only the handle's own memory
     * goes.  The last error is left as it was. */
    if (atomic_load_explicit(&bl_fork_gen, memory_order_relaxed) == s->fork_gen)
        s->ops->close(s);
    free(s->path);
    free(s);
}

const char *bindlog_path(const bindlog *s) { return s ? s->path : NULL; }

/* ---- events ----------------------------------------------------------- */

/* strlen, but gives up past `max` (returns max + 1): too long anyway. */
static size_t bounded_len(const char *s, size_t max) { return strnlen(s, max + 1); }

/* Turn a public event into a bl_event; BINDLOG_EINVAL on bad arguments,
 * with *field naming a field its type does not take, if that was why. */
static int to_event(const bindlog_event *in, bl_event *ev, const char **field)
{
    memset(ev, 0, sizeof(*ev));
    if (in->type <= 0 || in->type >= BINDLOG_EVENT_COUNT || in->type == BINDLOG_EVENT_ROUTE)
        return BINDLOG_EINVAL; /* a route is bindlog_route's alone: it needs a policy */
    ev->type = (unsigned)in->type;
    if (in->key == NULL)
        return BINDLOG_EINVAL;
    ev->key = in->key;
    ev->key_len = bounded_len(in->key, BINDLOG_KEY_MAX);
    if (in->session_id != NULL) {
        ev->sid = in->session_id;
        ev->sid_len = bounded_len(in->session_id, BINDLOG_ID_MAX);
    }
    if (in->expect != NULL) {
        ev->expect = in->expect;
        ev->expect_len = bounded_len(in->expect, BINDLOG_ID_MAX);
    }
    ev->generation = in->generation;
    if (in->reason != NULL) {
        ev->reason = in->reason;
        ev->reason_len = bounded_len(in->reason, BINDLOG_REASON_MAX);
    }
    ev->origin = in->origin;
    ev->origin_len = in->origin_len;
    /* fields a type does not take must not be given */
    switch (in->type) {
    case BINDLOG_EVENT_NEW_SESSION:
        *field = in->expect != NULL ? "expected session (expect)" : NULL;
        break;
    case BINDLOG_EVENT_SPLIT:
        *field = in->reason != NULL ? "reason" : NULL;
        break;
    case BINDLOG_EVENT_INVALIDATE:
    case BINDLOG_EVENT_UNBIND:
        *field = in->session_id != NULL ? "session id"
                 : in->expect != NULL   ? "expected session (expect)"
                                        : NULL;
        break;
    default:
        break;
    }
    return *field != NULL ? BINDLOG_EINVAL : bl_event_check(ev);
}

/* to_event(), with the refusal's words as the last-error detail. */
static int event_arg(const bindlog_event *in, bl_event *ev)
{
    const char *field = NULL;
    int rc = to_event(in, ev, &field);
    if (rc == 0)
        return 0;
    if (field != NULL)
        return bl_err_set(rc, "this event type takes no %s (leave it NULL)", field);
    const char *why = bl_event_problem(ev);
    if (in->type == BINDLOG_EVENT_ROUTE)
        why = "a route event is written by bindlog_route() only";
    return bl_err_set(rc, "%s", why ? why : "unknown event type");
}

void bl_count_call(bindlog *s, int type, int rc)
{
    unsigned t = type > 0 && type < BINDLOG_EVENT_COUNT ? (unsigned)type : 0;
    unsigned col = rc < 0 || rc >= BINDLOG_OUTCOME_COUNT ? BINDLOG_STAT_ERROR : (unsigned)rc;
    atomic_fetch_add_explicit(&s->calls[t][col], 1, memory_order_relaxed);
}

static int submit_one(bindlog *s, const bindlog_event *in, bindlog_result *out)
{
    bl_event ev;
    bindlog_result tmp;
    int rc;

    if (s == NULL)
        return bl_err_set(BINDLOG_EINVAL, "handle is NULL");
    if ((rc = bl_fork_check(s)) != 0)
        return rc;
    rc = event_arg(in, &ev);
    if (rc == 0 && s->read_only)
        rc = bl_err_set(BINDLOG_EREADONLY, "the handle was opened read-only");
    if (rc == 0) {
        if (out == NULL)
            out = &tmp;
        rc = s->ops->commit(s, &ev, 1, out, NULL);
        if (rc == 0)
            rc = out->outcome;
    }
    bl_count_call(s, in->type, rc);
    return rc;
}

/* One event call, with its last-error context: "<type> <key>". */
static int submit_call(bindlog *s, const bindlog_event *in, bindlog_result *out)
{
    char q[BL_ERR_QUOTE_MAX];
    bl_err_clear();
    int rc = submit_one(s, in, out);
    if (rc >= 0) { /* the key is quoted for an error only */
        bl_err_clear();
        return rc;
    }
    return BL_API_DONE(rc, "%s %s", bindlog_event_name(in->type), QKEY(q, in->key));
}

int bindlog_bind(bindlog *s, const char *key, const char *session_id, const char *expect,
                 const char *reason, const void *origin, size_t origin_len, bindlog_result *out)
{
    bindlog_event ev = {BINDLOG_EVENT_BIND, key, session_id, expect, 0, reason, origin,
                        origin_len};
    return submit_call(s, &ev, out);
}

int bindlog_new_session(bindlog *s, const char *key, const char *session_id, const char *reason,
                        const void *origin, size_t origin_len, bindlog_result *out)
{
    bindlog_event ev = {BINDLOG_EVENT_NEW_SESSION, key, session_id, NULL, 0, reason, origin,
                        origin_len};
    return submit_call(s, &ev, out);
}

int bindlog_split(bindlog *s, const char *key, const char *parent_id, const char *child_id,
                  uint64_t run_generation, const void *origin, size_t origin_len,
                  bindlog_result *out)
{
    bindlog_event ev = {BINDLOG_EVENT_SPLIT, key, child_id, parent_id, run_generation, NULL,
                        origin, origin_len};
    return submit_call(s, &ev, out);
}

int bindlog_invalidate(bindlog *s, const char *key, const char *reason, bindlog_result *out)
{
    bindlog_event ev = {BINDLOG_EVENT_INVALIDATE, key, NULL, NULL, 0, reason, NULL, 0};
    return submit_call(s, &ev, out);
}

int bindlog_unbind(bindlog *s, const char *key, const char *reason, bindlog_result *out)
{
    bindlog_event ev = {BINDLOG_EVENT_UNBIND, key, NULL, NULL, 0, reason, NULL, 0};
    return submit_call(s, &ev, out);
}

static int apply_batch(bindlog *s, const bindlog_event *in, size_t n, bindlog_result *out,
                       size_t *err_index)
{
    bl_event stack[16], *ev = stack;
    bindlog_result *res = out;
    int rc = 0;

    if (err_index != NULL)
        *err_index = 0;
    if (s == NULL)
        return bl_err_set(BINDLOG_EINVAL, "handle is NULL");
    if ((rc = bl_fork_check(s)) != 0)
        return rc;
    if ((in == NULL && n != 0) || n > SIZE_MAX / sizeof(bindlog_result))
        return bl_err_set(BINDLOG_EINVAL, "events is NULL or n is too large");
    if (n == 0)
        return 0;
    if (n > sizeof(stack) / sizeof(stack[0]) && (ev = malloc(n * sizeof(*ev))) == NULL)
        return BINDLOG_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if ((rc = event_arg(&in[i], &ev[i])) != 0) {
            if (err_index != NULL)
                *err_index = i;
            bl_count_call(s, in[i].type, rc);
            goto out;
        }
    }
    if (s->read_only) {
        rc = bl_err_set(BINDLOG_EREADONLY, "the handle was opened read-only");
        bl_count_call(s, in[0].type, rc);
        goto out;
    }
    /* backends always get somewhere to put results */
    if (res == NULL && (res = malloc(n * sizeof(*res))) == NULL) {
        rc = BINDLOG_ENOMEM;
        goto out;
    }
    rc = s->ops->commit(s, ev, n, res, err_index);
    /* A batch that failed wrote nothing: one error, for the event at fault. */
    if (rc < 0)
        bl_count_call(s, in[err_index != NULL && *err_index < n ? *err_index : 0].type, rc);
    for (size_t i = 0; rc == 0 && i < n; i++)
        bl_count_call(s, in[i].type, res[i].outcome);
out:
    if (ev != stack)
        free(ev);
    if (res != out)
        free(res);
    return rc;
}

/* "<event> <key>: <detail>", as the single call's last error would read. */
static void each_message(char *dst, const bindlog_event *in, int rc, const char *detail)
{
    char q[BL_ERR_QUOTE_MAX];
    int n = snprintf(dst, BINDLOG_EACH_MESSAGE_MAX, "%s %s: %s", bindlog_event_name(in->type),
                     in->key != NULL ? QKEY(q, in->key) : "(NULL key)",
                     detail[0] != '\0' ? detail : bindlog_strerror(rc));
    if (n >= BINDLOG_EACH_MESSAGE_MAX)
        memcpy(dst + BINDLOG_EACH_MESSAGE_MAX - 4, "...", 4);
}

/* Independent events: each checked, decided and applied alone, all in as
 * few group commits as the log allows (entries.c's chunks). */
static int apply_each(bindlog *s, const bindlog_event *in, size_t n, bindlog_result *out,
                      int *rcodes, char (*messages)[BINDLOG_EACH_MESSAGE_MAX])
{
    bl_event *ev = NULL;
    size_t *which = NULL, nv = 0;
    bindlog_result *res = NULL;
    int *rcs = NULL;
    char *msgs = NULL, *details = NULL;
    int rc = 0;

    if (s == NULL)
        return bl_err_set(BINDLOG_EINVAL, "handle is NULL");
    if ((rc = bl_fork_check(s)) != 0)
        return rc;
    if ((in == NULL && n != 0) || n > SIZE_MAX / BINDLOG_EACH_MESSAGE_MAX)
        return bl_err_set(BINDLOG_EINVAL, "events is NULL or n is too large");
    if (rcodes == NULL && n != 0)
        return bl_err_set(BINDLOG_EINVAL, "codes is NULL: each event's outcome goes there");
    if (n == 0)
        return 0;
    for (size_t i = 0; messages != NULL && i < n; i++)
        messages[i][0] = '\0';
    if (s->read_only) {
        rc = bl_err_set(BINDLOG_EREADONLY, "the handle was opened read-only");
        for (size_t i = 0; i < n; i++) {
            rcodes[i] = rc;
            bl_count_call(s, in[i].type, rc);
            if (messages != NULL)
                each_message(messages[i], &in[i], rc, "the handle was opened read-only");
        }
        return rc;
    }
    size_t scratch = n < 8192 ? n : 8192;
    ev = malloc(n * sizeof(*ev));
    which = malloc(n * sizeof(*which));
    res = malloc(scratch * sizeof(*res));
    rcs = malloc(scratch * sizeof(*rcs));
    if (messages != NULL) {
        msgs = malloc(scratch * BL_EACH_MSG_MAX);
        details = calloc(n, BL_EACH_MSG_MAX);
    }
    if (ev == NULL || which == NULL || res == NULL || rcs == NULL ||
        (messages != NULL && (msgs == NULL || details == NULL))) {
        rc = BINDLOG_ENOMEM;
        for (size_t i = 0; i < n; i++)
            rcodes[i] = rc;
        goto out;
    }
    /* an event the contract refuses is decided here, alone */
    for (size_t i = 0; i < n; i++) {
        int erc = event_arg(&in[i], &ev[nv]);
        rcodes[i] = erc != 0 ? erc : INT_MIN; /* set by the chunk that takes it */
        if (erc != 0) {
            if (details != NULL)
                snprintf(details + i * BL_EACH_MSG_MAX, BL_EACH_MSG_MAX, "%s", bl_err_get());
            bl_count_call(s, in[i].type, erc);
            continue;
        }
        which[nv++] = i;
    }
    bl_err_clear(); /* a refused event's words are not the call's */
    rc = bl_commit_each_chunked(s, ev, which, nv, res, rcs, msgs, out, rcodes, details, 0, nv,
                                NULL, NULL);
    if (rc != 0) {
        /* the events after the failed chunk were not tried */
        for (size_t k = 0; k < nv; k++)
            if (rcodes[which[k]] == INT_MIN)
                rcodes[which[k]] = rc;
    }
    for (size_t i = 0; messages != NULL && i < n; i++)
        if (rcodes[i] < 0)
            each_message(messages[i], &in[i], rcodes[i], details + i * BL_EACH_MSG_MAX);
out:
    free(ev);
    free(which);
    free(res);
    free(rcs);
    free(msgs);
    free(details);
    return rc;
}

int bindlog_apply_each(bindlog *s, const bindlog_event *in, size_t n, bindlog_result *out,
                       int *rcodes, char (*messages)[BINDLOG_EACH_MESSAGE_MAX])
{
    bl_err_clear();
    int rc = apply_each(s, in, n, out, rcodes, messages);
    return bl_api_done(rc, "apply_each (%zu events)", n);
}

int bindlog_apply_batch(bindlog *s, const bindlog_event *in, size_t n, bindlog_result *out,
                        size_t *err_index)
{
    char q[BL_ERR_QUOTE_MAX];
    size_t at = 0;
    bl_err_clear();
    int rc = apply_batch(s, in, n, out, &at);
    if (err_index != NULL)
        *err_index = at;
    if (rc < 0 && rc != BINDLOG_EFORK && in != NULL && at < n && s != NULL)
        return bl_api_done(rc, "apply_batch event %zu (%s %s)", at,
                           bindlog_event_name(in[at].type), QKEY(q, in[at].key));
    return bl_api_done(rc, "apply_batch");
}

/* ---- reads ------------------------------------------------------------ */

static void copy_str(char *dst, const char *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Measure and check a key / an id argument: 0, or BINDLOG_EINVAL with the
 * problem in words, as the events' own checks word it (machine.c). */
static int key_arg(const char *key, size_t *n)
{
    *n = 0;
    if (key == NULL)
        return bl_err_set(BINDLOG_EINVAL, "key is NULL");
    *n = bounded_len(key, BINDLOG_KEY_MAX);
    if (*n == 0)
        return bl_err_set(BINDLOG_EINVAL, "key is empty");
    if (*n > BINDLOG_KEY_MAX)
        return bl_err_set(BINDLOG_EINVAL, "key is longer than BINDLOG_KEY_MAX (400) bytes");
    return bl_valid_key(key, *n) ? 0 : bl_err_set(BINDLOG_EINVAL, "key is not valid");
}

static int id_arg(const char *id, size_t *n)
{
    *n = 0;
    if (id == NULL)
        return bl_err_set(BINDLOG_EINVAL, "session id is NULL");
    *n = bounded_len(id, BINDLOG_ID_MAX);
    if (*n == 0)
        return bl_err_set(BINDLOG_EINVAL, "session id is empty");
    if (*n > BINDLOG_ID_MAX)
        return bl_err_set(BINDLOG_EINVAL, "session id is longer than BINDLOG_ID_MAX (128) bytes");
    return bl_valid_id(id, *n) ? 0 : bl_err_set(BINDLOG_EINVAL, "session id holds a control byte");
}

int bindlog_get(bindlog *s, const char *key, bindlog_binding *out)
{
    char q[BL_ERR_QUOTE_MAX];
    size_t n;
    int rc;
    bl_err_clear();
    if (s == NULL || out == NULL)
        rc = bl_err_set(BINDLOG_EINVAL, "handle or out is NULL");
    else if ((rc = bl_fork_check(s)) == 0 && (rc = key_arg(key, &n)) == 0 &&
             (rc = s->ops->get(s, key, n, out)) == BINDLOG_ENOTFOUND)
        rc = bl_err_set(rc, "key is not bound");
    return BL_API_DONE(rc, "get %s", QKEY(q, key));
}

void bl_session_fill(bindlog_session *out, const char *id, size_t id_len, const bl_sval *v,
                     void *origin_buf, size_t origin_cap)
{
    memset(out, 0, sizeof(*out));
    copy_str(out->session_id, id, id_len);
    copy_str(out->key, v->key, v->key_len);
    copy_str(out->parent_id, v->parent, v->parent_len);
    out->created_lsn = v->created_lsn;
    out->ended_lsn = v->ended_lsn;
    out->created_ms = v->created_ms;
    out->ended_ms = v->ended_ms;
    copy_str(out->end_reason, v->reason, v->reason_len);
    out->origin_len = v->origin_len;
    if (origin_buf != NULL && origin_cap != 0 && v->origin_len != 0)
        memcpy(origin_buf, v->origin, v->origin_len < origin_cap ? v->origin_len : origin_cap);
}

int bindlog_session_get(bindlog *s, const char *session_id, bindlog_session *out,
                        void *origin_buf, size_t origin_cap)
{
    char q[BL_ERR_QUOTE_MAX];
    size_t n;
    int rc;
    bl_err_clear();
    if (s == NULL || out == NULL || (origin_buf == NULL && origin_cap))
        rc = bl_err_set(BINDLOG_EINVAL, "handle or out is NULL, or origin_cap without a buffer");
    else if ((rc = bl_fork_check(s)) == 0 && (rc = id_arg(session_id, &n)) == 0 &&
             (rc = s->ops->session_get(s, session_id, n, out, origin_buf, origin_cap)) ==
                 BINDLOG_ENOTFOUND)
        rc = bl_err_set(rc, "no such session");
    return BL_API_DONE(rc, "session_get %s", QID(q, session_id));
}

/* ---- iterators ------------------------------------------------------------- */

int bl_rec_emit(bl_rec_buf *b, const void *bytes, size_t len, uint64_t lsn,
                bindlog_record *rec)
{
    bl_record r;
    int rc = bl_record_decode(bytes, len, &r);
    if (rc != 0)
        return rc;
    if (r.lsn != lsn)
        return BINDLOG_ECORRUPT; /* a record stored under another LSN's key */
    if (r.origin_len > b->origin_cap) {
        unsigned char *p = realloc(b->origin, r.origin_len);
        if (p == NULL)
            return BINDLOG_ENOMEM;
        b->origin = p;
        b->origin_cap = r.origin_len;
    }
    copy_str(b->key, r.key, r.key_len);
    copy_str(b->sid, r.sid, r.sid_len);
    copy_str(b->other, r.other, r.other_len);
    copy_str(b->reason, r.reason, r.reason_len);
    if (r.origin_len)
        memcpy(b->origin, r.origin, r.origin_len);
    rec->lsn = r.lsn;
    rec->type = (int)r.type;
    rec->time_ms = r.time_ms;
    rec->generation = r.generation;
    rec->key = b->key;
    rec->key_len = r.key_len;
    rec->session_id = b->sid;
    rec->other_id = b->other;
    rec->reason = b->reason;
    rec->origin = r.origin_len ? b->origin : NULL;
    rec->origin_len = r.origin_len;
    rec->origin_present = (r.flags & BL_REC_ORIGIN) != 0;
    return 1;
}

void bl_rec_buf_free(bl_rec_buf *b)
{
    free(b->origin);
    b->origin = NULL;
    b->origin_cap = 0;
}

static int open_iter(bindlog *s, int kind, const char *arg, size_t arg_len, uint64_t from,
                     uint64_t to, bindlog_iter **out)
{
    static const char *const names[] = {
        [BL_IT_LOG] = "log_iter",           [BL_IT_HISTORY] = "history_iter",
        [BL_IT_BINDINGS] = "bindings_iter", [BL_IT_SESSIONS] = "sessions_iter",
        [BL_IT_CHILDREN] = "children_iter", [BL_IT_ANCESTORS] = "ancestors_iter",
    };
    char q[BL_ERR_QUOTE_MAX];
    int rc;
    if (out == NULL)
        rc = bl_err_set(BINDLOG_EINVAL, "out is NULL");
    else if ((*out = NULL, s == NULL))
        rc = bl_err_set(BINDLOG_EINVAL, "handle is NULL");
    else if ((rc = bl_fork_check(s)) == 0)
        rc = s->ops->iter(s, kind, arg, arg_len, from, to, out);
    if (arg == NULL)
        return bl_api_done(rc, "%s", names[kind]);
    return BL_API_DONE(rc, "%s %s", names[kind], bl_err_bytes(q, sizeof q, arg, arg_len));
}

/* An iterator's key or id argument refused before it opens (key_arg /
 * id_arg said why). */
static int iter_arg_refused(const char *call, const char *arg, size_t max)
{
    char q[BL_ERR_QUOTE_MAX];
    return bl_api_done(BINDLOG_EINVAL, "%s %s", call, quote(q, arg, max));
}

int bindlog_log_iter(bindlog *s, uint64_t from_lsn, uint64_t to_lsn, bindlog_iter **out)
{
    bl_err_clear();
    return open_iter(s, BL_IT_LOG, NULL, 0, from_lsn, to_lsn, out);
}

int bindlog_history_iter(bindlog *s, const char *key, bindlog_iter **out)
{
    size_t n;
    bl_err_clear();
    if (out != NULL)
        *out = NULL;
    if (s != NULL && out != NULL && bl_fork_check(s) != 0)
        return bl_api_done(BINDLOG_EFORK, "history_iter");
    if (key_arg(key, &n) != 0)
        return iter_arg_refused("history_iter", key, BINDLOG_KEY_MAX);
    return open_iter(s, BL_IT_HISTORY, key, n, 0, UINT64_MAX, out);
}

int bindlog_bindings_iter(bindlog *s, bindlog_iter **out)
{
    bl_err_clear();
    return open_iter(s, BL_IT_BINDINGS, NULL, 0, 0, 0, out);
}

int bindlog_sessions_iter(bindlog *s, bindlog_iter **out)
{
    bl_err_clear();
    return open_iter(s, BL_IT_SESSIONS, NULL, 0, 0, 0, out);
}

int bindlog_children_iter(bindlog *s, const char *session_id, bindlog_iter **out)
{
    size_t n;
    bl_err_clear();
    if (out != NULL)
        *out = NULL;
    if (s != NULL && out != NULL && bl_fork_check(s) != 0)
        return bl_api_done(BINDLOG_EFORK, "children_iter");
    if (id_arg(session_id, &n) != 0)
        return iter_arg_refused("children_iter", session_id, BINDLOG_ID_MAX);
    return open_iter(s, BL_IT_CHILDREN, session_id, n, 0, 0, out);
}

int bindlog_ancestors_iter(bindlog *s, const char *session_id, bindlog_iter **out)
{
    size_t n;
    bl_err_clear();
    if (out != NULL)
        *out = NULL;
    if (s != NULL && out != NULL && bl_fork_check(s) != 0)
        return bl_api_done(BINDLOG_EFORK, "ancestors_iter");
    if (id_arg(session_id, &n) != 0)
        return iter_arg_refused("ancestors_iter", session_id, BINDLOG_ID_MAX);
    return open_iter(s, BL_IT_ANCESTORS, session_id, n, 0, 0, out);
}

int bindlog_iter_next_record(bindlog_iter *it, bindlog_record *rec)
{
    bl_err_clear();
    if (it == NULL || rec == NULL || (it->kind != BL_IT_LOG && it->kind != BL_IT_HISTORY))
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "not a log or history iterator"),
                           "iter_next_record");
    int rc = bl_fork_check(it->h);
    return bl_api_done(rc != 0 ? rc : it->ops->next_record(it, rec), "iter_next_record");
}

int bindlog_iter_next_binding(bindlog_iter *it, bindlog_binding *out)
{
    bl_err_clear();
    if (it == NULL || out == NULL || it->kind != BL_IT_BINDINGS)
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "not a bindings iterator"),
                           "iter_next_binding");
    int rc = bl_fork_check(it->h);
    return bl_api_done(rc != 0 ? rc : it->ops->next_binding(it, out), "iter_next_binding");
}

int bindlog_iter_next_session(bindlog_iter *it, bindlog_session *out, void *buf, size_t cap)
{
    bl_err_clear();
    if (it == NULL || out == NULL || (buf == NULL && cap != 0) ||
        (it->kind != BL_IT_SESSIONS && it->kind != BL_IT_CHILDREN &&
         it->kind != BL_IT_ANCESTORS))
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "not a sessions, children or ancestors "
                                                      "iterator, or cap without a buffer"),
                           "iter_next_session");
    int rc = bl_fork_check(it->h);
    return bl_api_done(rc != 0 ? rc : it->ops->next_session(it, out, buf, cap),
                       "iter_next_session");
}

void bindlog_iter_close(bindlog_iter *it)
{
    /* In a forked child the iterator's snapshot (an LMDB reader slot, the
     * tail's pins) is the parent's: it is left alone, memory included. */
    if (it != NULL && atomic_load_explicit(&bl_fork_gen, memory_order_relaxed) == it->h->fork_gen)
        it->ops->close(it);
}

/* ---- statistics, digest, maintenance ------------------------------------ */

int bindlog_stats_get(bindlog *s, bindlog_stats *out)
{
    bl_err_clear();
    if (s == NULL || out == NULL)
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "handle or out is NULL"), "stats_get");
    int rc = bl_fork_check(s);
    if (rc == 0)
        rc = s->ops->stats(s, out);
    if (rc == 0)
        for (int t = 0; t < BINDLOG_EVENT_COUNT; t++)
            for (int c = 0; c < BINDLOG_STAT_COLUMNS; c++)
                out->events[t][c] = atomic_load_explicit(&s->calls[t][c], memory_order_relaxed);
    return bl_api_done(rc, "stats_get");
}

int bindlog_digest(bindlog *s, unsigned char out[BINDLOG_DIGEST_SIZE], uint64_t *head_lsn)
{
    bl_err_clear();
    if (s == NULL || out == NULL)
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "handle or out is NULL"), "digest");
    int rc = bl_fork_check(s);
    return bl_api_done(rc != 0 ? rc : s->ops->digest(s, out, head_lsn), "digest");
}

/* The maintenance operations check their other arguments (paths, ranges,
 * descriptors) themselves: what is valid there depends on the backend. */

int bindlog_check(bindlog *s, bindlog_check_report *out, bindlog_progress_fn progress,
                  void *progress_ctx)
{
    bl_err_clear();
    if (s == NULL || out == NULL)
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "handle or out is NULL"), "check");
    int rc = bl_fork_check(s);
    return bl_api_done(rc != 0 ? rc : s->ops->check(s, out, progress, progress_ctx), "check");
}

int bindlog_replay(bindlog *s, const char *out_dir, uint64_t to_lsn, int64_t to_time_ms,
                   unsigned char digest[BINDLOG_DIGEST_SIZE], uint64_t *last_lsn,
                   bindlog_progress_fn progress, void *progress_ctx)
{
    char q[BL_ERR_QUOTE_MAX];
    bl_err_clear();
    if (s == NULL)
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "handle is NULL"), "replay");
    if (bl_fork_check(s) != 0)
        return bl_api_done(BINDLOG_EFORK, "replay into %s", QPATH(q, out_dir));
    int rc = s->ops->replay(s, out_dir, to_lsn, to_time_ms, digest, last_lsn, progress,
                            progress_ctx);
    if (rc == BINDLOG_EEXIST && !bl_err_isset())
        bl_err_set(rc, "the directory is not empty: replay needs a new or empty one");
    return BL_API_DONE(rc, "replay into %s", QPATH(q, out_dir));
}

int bindlog_wait(bindlog *s, uint64_t after_lsn, int timeout_ms, uint64_t *head)
{
    uint64_t seen = 0;
    int rc;
    bl_err_clear();
    if (s == NULL)
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "handle is NULL"), "wait");
    if (bl_fork_check(s) != 0)
        return bl_api_done(BINDLOG_EFORK, "wait");
    if (timeout_ms < -1)
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "timeout_ms %d is below -1", timeout_ms),
                           "wait");
    rc = s->ops->wait(s, after_lsn, timeout_ms, &seen);
    if (rc == 0 && head != NULL)
        *head = seen;
    return bl_api_done(rc, "wait after LSN %llu", (unsigned long long)after_lsn);
}

int bindlog_checkpoint(bindlog *s, uint64_t *checkpoint_lsn)
{
    uint64_t lsn = 0;
    int rc;
    bl_err_clear();
    if (s == NULL)
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "handle is NULL"), "checkpoint");
    if (bl_fork_check(s) != 0)
        rc = BINDLOG_EFORK;
    else if (s->read_only)
        rc = bl_err_set(BINDLOG_EREADONLY, "a read-only handle does not write the store");
    else if (s->ops->checkpoint == NULL)
        rc = bl_err_set(BINDLOG_ENOTSUP, "the %s backend has no write-ahead log", s->ops->name);
    else
        rc = s->ops->checkpoint(s, &lsn);
    if (rc == 0 && checkpoint_lsn != NULL)
        *checkpoint_lsn = lsn;
    return bl_api_done(rc, "checkpoint");
}

int bindlog_lsn_at_time(bindlog *s, int64_t time_ms, uint64_t *lsn)
{
    bl_err_clear();
    if (s == NULL || lsn == NULL)
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "handle or lsn is NULL"), "lsn_at_time");
    int rc = bl_fork_check(s);
    return bl_api_done(rc != 0 ? rc : s->ops->lsn_at_time(s, time_ms, lsn), "lsn_at_time");
}

int bindlog_compact(bindlog *s, uint64_t keep_from_lsn, uint64_t *removed,
                    bindlog_progress_fn progress, void *progress_ctx)
{
    bl_err_clear();
    if (s == NULL)
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "handle is NULL"), "compact");
    int rc = bl_fork_check(s);
    return bl_api_done(rc != 0 ? rc : s->ops->compact(s, keep_from_lsn, removed, progress,
                                                      progress_ctx),
                       "compact to LSN %llu", (unsigned long long)keep_from_lsn);
}

int bindlog_export(bindlog *s, uint64_t from_lsn, int fd, uint64_t *records,
                   bindlog_progress_fn progress, void *progress_ctx)
{
    bl_err_clear();
    if (s == NULL)
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "handle is NULL"), "export");
    if (bl_fork_check(s) != 0)
        return bl_api_done(BINDLOG_EFORK, "export");
    int rc = s->ops->export_stream(s, from_lsn, fd, records, progress, progress_ctx);
    if (rc == BINDLOG_ENOTFOUND && !bl_err_isset())
        bl_err_set(rc, "no records from LSN %llu on (compacted, or beyond the head + 1)",
                   (unsigned long long)from_lsn);
    return bl_api_done(rc, "export from LSN %llu to fd %d", (unsigned long long)from_lsn, fd);
}

int bindlog_import(bindlog *s, int fd, uint64_t *records, uint64_t *err_offset,
                   bindlog_progress_fn progress, void *progress_ctx)
{
    bl_err_clear();
    if (s == NULL)
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "handle is NULL"), "import");
    if (bl_fork_check(s) != 0)
        return bl_api_done(BINDLOG_EFORK, "import");
    uint64_t off = 0;
    int rc = s->ops->import_stream(s, fd, records, &off, progress, progress_ctx);
    if (err_offset != NULL)
        *err_offset = off;
    if (rc < 0) {
        /* Where the stream went wrong, and what was wrong there. */
        char detail[BL_ERRMSG_MAX];
        const char *why;
        if (bl_err_isset()) {
            snprintf(detail, sizeof detail, "%s", bl_err_get());
            why = detail;
        } else if (rc == BINDLOG_EEXIST)
            why = "the store already holds records (a full stream needs an empty store, an "
                  "incremental one must start at head + 1)";
        else if (rc == BINDLOG_ENOTFOUND)
            why = "the stream starts after head + 1 (it would leave a gap)";
        else
            why = bindlog_strerror(rc);
        /* the stream's fault, or the store's (a disk that fails or fills) */
        int io = rc == BINDLOG_EIO || rc == BINDLOG_ENOSPC || rc == BINDLOG_ENOMEM ||
                 rc == BINDLOG_EPANIC || rc == BINDLOG_EBUSY;
        if (io && off == 0)
            bl_err_set(rc, "%s", why);
        else
            bl_err_set(rc, "%s at byte %llu: %s", io ? "stopped" : "stream refused",
                       (unsigned long long)off, why);
    }
    return bl_api_done(rc, "import");
}

int bindlog_fsync(int fd)
{
    bl_err_clear();
    if (fd < 0)
        return bl_api_done(bl_err_set(BINDLOG_EINVAL, "a negative file descriptor"), "fsync %d",
                           fd);
    int err = bl_plat_flush_file(fd);
    if (err == 0)
        return bl_api_done(0, "fsync %d", fd);
    return bl_api_done(bl_err_set(err == EBADF || err == EINVAL || err == EROFS ? BINDLOG_EINVAL
                                                                                : BINDLOG_EIO,
                                  "%s", strerror(err)),
                       "fsync %d", fd);
}
