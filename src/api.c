/*
 * api.c -- the public entry points: argument checks, handles, reads.
 *
 * Every mutating call turns its NUL-terminated arguments into a bl_event
 * (lengths measured with a bound, so a missing terminator in a huge buffer
 * is not scanned to the end), checks it, checks the handle is writable, and
 * hands it to the write path.  The order of refusals is the contract's:
 * arguments (BINDLOG_EINVAL), then read-only (BINDLOG_EREADONLY), then state.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "store.h"

const char *bindlog_version(void) { return BINDLOG_VERSION_STRING; }

static const struct {
    int code;
    const char *name, *text;
} codes[] = {
    {BINDLOG_APPLIED, "BINDLOG_APPLIED", "applied: the state changed"},
    {BINDLOG_ALREADY, "BINDLOG_ALREADY", "already: the state was already as requested"},
    {BINDLOG_STALE, "BINDLOG_STALE", "stale: the run's generation is not the key's current one"},
    {BINDLOG_MOVED, "BINDLOG_MOVED", "moved: the key is not bound to the expected session"},
    {BINDLOG_ENOTFOUND, "BINDLOG_ENOTFOUND", "not found"},
    {BINDLOG_EINVAL, "BINDLOG_EINVAL", "invalid argument"},
    {BINDLOG_EEXIST, "BINDLOG_EEXIST", "the session id already exists"},
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

const char *bindlog_event_name(int type)
{
    static const char *const names[BINDLOG_EVENT_COUNT] = {
        "unknown", "bind", "new_session", "split", "invalidate", "unbind",
    };
    return type > 0 && type < BINDLOG_EVENT_COUNT ? names[type] : "unknown";
}

/* ---- handles ----------------------------------------------------------- */

int bindlog_open(bindlog **out, const char *dir, const bindlog_options *opts)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *h;
    int rc;

    if (out == NULL)
        return BINDLOG_EINVAL;
    *out = NULL;
    if (dir == NULL || dir[0] == '\0')
        return BINDLOG_EINVAL;
    if (opts != NULL) {
        if (opts->version == 0 || opts->version > BINDLOG_OPTIONS_VERSION)
            return BINDLOG_EINVAL;
        o = *opts;
    }
    if (o.durability < BINDLOG_DURABILITY_FULL || o.durability > BINDLOG_DURABILITY_NONE)
        return BINDLOG_EINVAL;

    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return BINDLOG_ENOMEM;
    h->path = strdup(dir);
    if (h->path == NULL) {
        free(h);
        return BINDLOG_ENOMEM;
    }
    h->read_only = o.read_only != 0;
    h->durability = o.durability;
    h->clock_ms = o.clock_ms;
    h->clock_ctx = o.clock_ctx;
    rc = bl_env_acquire(dir, &o, &h->e);
    if (rc != 0) {
        free(h->path);
        free(h);
        return rc;
    }
    *out = h;
    return 0;
}

void bindlog_close(bindlog *s)
{
    if (s == NULL)
        return;
    if (!s->read_only)
        bl_env_release_writer(s->e);
    bl_env_release(s->e);
    free(s->path);
    free(s);
}

const char *bindlog_path(const bindlog *s) { return s ? s->path : NULL; }

/* ---- events ----------------------------------------------------------- */

/* strlen, but gives up past `max` (returns max + 1): too long anyway. */
static size_t bounded_len(const char *s, size_t max) { return strnlen(s, max + 1); }

/* Turn a public event into a bl_event; BINDLOG_EINVAL on bad arguments. */
static int to_event(const bindlog_event *in, bl_event *ev)
{
    memset(ev, 0, sizeof(*ev));
    if (in->type <= 0 || in->type >= BINDLOG_EVENT_COUNT)
        return BINDLOG_EINVAL;
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
        if (in->expect != NULL)
            return BINDLOG_EINVAL;
        break;
    case BINDLOG_EVENT_SPLIT:
        if (in->reason != NULL)
            return BINDLOG_EINVAL;
        break;
    case BINDLOG_EVENT_INVALIDATE:
    case BINDLOG_EVENT_UNBIND:
        if (in->session_id != NULL || in->expect != NULL)
            return BINDLOG_EINVAL;
        break;
    default:
        break;
    }
    return bl_event_check(ev);
}

/* Check the handle for a write. */
static int writable(bindlog *s)
{
    if (s->read_only)
        return BINDLOG_EREADONLY;
    return 0;
}

static int submit_one(bindlog *s, const bindlog_event *in, bindlog_result *out)
{
    bl_event ev;
    bindlog_result tmp;
    int rc;

    if (s == NULL)
        return BINDLOG_EINVAL;
    rc = to_event(in, &ev);
    if (rc == 0)
        rc = writable(s);
    if (rc != 0) {
        bl_stats_count(s->e, (unsigned)(in->type > 0 ? in->type : 0), rc);
        return rc;
    }
    rc = bl_commit(s, &ev, 1, out ? out : &tmp, NULL);
    if (rc < 0)
        return rc;
    return out ? out->outcome : tmp.outcome;
}

int bindlog_bind(bindlog *s, const char *key, const char *session_id, const char *expect,
                 const char *reason, const void *origin, size_t origin_len, bindlog_result *out)
{
    bindlog_event ev = {BINDLOG_EVENT_BIND, key, session_id, expect, 0, reason, origin,
                        origin_len};
    return submit_one(s, &ev, out);
}

int bindlog_new_session(bindlog *s, const char *key, const char *session_id, const char *reason,
                        const void *origin, size_t origin_len, bindlog_result *out)
{
    bindlog_event ev = {BINDLOG_EVENT_NEW_SESSION, key, session_id, NULL, 0, reason, origin,
                        origin_len};
    return submit_one(s, &ev, out);
}

int bindlog_split(bindlog *s, const char *key, const char *parent_id, const char *child_id,
                  uint64_t run_generation, const void *origin, size_t origin_len,
                  bindlog_result *out)
{
    bindlog_event ev = {BINDLOG_EVENT_SPLIT, key, child_id, parent_id, run_generation, NULL,
                        origin, origin_len};
    return submit_one(s, &ev, out);
}

int bindlog_invalidate(bindlog *s, const char *key, const char *reason, bindlog_result *out)
{
    bindlog_event ev = {BINDLOG_EVENT_INVALIDATE, key, NULL, NULL, 0, reason, NULL, 0};
    return submit_one(s, &ev, out);
}

int bindlog_unbind(bindlog *s, const char *key, const char *reason, bindlog_result *out)
{
    bindlog_event ev = {BINDLOG_EVENT_UNBIND, key, NULL, NULL, 0, reason, NULL, 0};
    return submit_one(s, &ev, out);
}

int bindlog_apply_batch(bindlog *s, const bindlog_event *in, size_t n, bindlog_result *out,
                        size_t *err_index)
{
    bl_event stack[16], *ev = stack;
    int rc = 0;

    if (err_index != NULL)
        *err_index = 0;
    if (s == NULL || (in == NULL && n != 0) || n > SIZE_MAX / sizeof(bl_event))
        return BINDLOG_EINVAL;
    if (n == 0)
        return 0;
    if (n > sizeof(stack) / sizeof(stack[0]) && (ev = malloc(n * sizeof(*ev))) == NULL)
        return BINDLOG_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if ((rc = to_event(&in[i], &ev[i])) != 0) {
            if (err_index != NULL)
                *err_index = i;
            bl_stats_count(s->e, (unsigned)(in[i].type > 0 ? in[i].type : 0), rc);
            goto out;
        }
    }
    if ((rc = writable(s)) != 0) {
        bl_stats_count(s->e, (unsigned)in[0].type, rc);
        goto out;
    }
    rc = bl_commit(s, ev, n, out, err_index);
out:
    if (ev != stack)
        free(ev);
    return rc;
}

/* ---- reads ------------------------------------------------------------ */

static void copy_str(char *dst, const char *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
    dst[n] = '\0';
}

int bindlog_get(bindlog *s, const char *key, bindlog_binding *out)
{
    MDB_txn *txn;
    MDB_val k, v;
    bl_bval b;
    size_t n;
    int rc;

    if (s == NULL || key == NULL || out == NULL)
        return BINDLOG_EINVAL;
    n = bounded_len(key, BINDLOG_KEY_MAX);
    if (!bl_valid_key(key, n))
        return BINDLOG_EINVAL;
    /* every field is set below; no need to clear the 560-byte struct */
    out->session_id[0] = '\0';
    out->generation = out->lsn = 0;
    out->updated_ms = 0;
    copy_str(out->key, key, n);
    if ((rc = bl_read_begin(s->e, &txn)) != 0)
        return rc;
    k = (MDB_val){n, (void *)key};
    rc = bl_mdb_error(mdb_get(txn, s->e->dbi[BL_DB_BINDINGS], &k, &v));
    if (rc == 0 && (rc = bl_bval_decode(v.mv_data, v.mv_size, &b)) == 0) {
        copy_str(out->session_id, b.sid, b.sid_len);
        out->generation = b.generation;
        out->lsn = b.lsn;
        out->updated_ms = b.updated_ms;
        if (b.sid_len == 0)
            rc = BINDLOG_ENOTFOUND; /* a tombstone routes nowhere */
    }
    bl_read_end(s->e, txn);
    return rc;
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
    MDB_txn *txn;
    MDB_val k, v;
    bl_sval sv;
    size_t n;
    int rc;

    if (s == NULL || session_id == NULL || out == NULL || (origin_buf == NULL && origin_cap))
        return BINDLOG_EINVAL;
    n = bounded_len(session_id, BINDLOG_ID_MAX);
    if (!bl_valid_id(session_id, n))
        return BINDLOG_EINVAL;
    if ((rc = bl_read_begin(s->e, &txn)) != 0)
        return rc;
    k = (MDB_val){n, (void *)session_id};
    rc = bl_mdb_error(mdb_get(txn, s->e->dbi[BL_DB_SESSIONS], &k, &v));
    if (rc == 0 && (rc = bl_sval_decode(v.mv_data, v.mv_size, &sv)) == 0)
        bl_session_fill(out, session_id, n, &sv, origin_buf, origin_cap);
    bl_read_end(s->e, txn);
    return rc;
}
