/*
 * model.c -- the reference model of SPEC section 2 (see model.h).
 *
 * Written from the specification's text, rule by rule, in the order the
 * specification lists them; comments quote the rule each check implements.
 * Where the specification leaves a choice open the model follows the
 * documented choice of include/bindlog.h and says so:
 *  - a batch event's pointer fields that its type does not take (per the
 *    field comments of bindlog_event: expect for NEW_SESSION, reason for
 *    SPLIT, session_id/expect/origin for INVALIDATE and UNBIND) must be
 *    NULL, else BINDLOG_EINVAL;
 *  - a log record's session_id is the key's binding after the event (SPLIT:
 *    the child, UNBIND: the session it ended), other_id the previous binding
 *    (BIND, NEW_SESSION) or the parent (SPLIT), reason the effective reason
 *    (SPLIT: "compression"), and a SPLIT record always carries the child's
 *    effective origin (bindlog_record comments).
 */
#include "model.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/record.h"

#define ALLOC_OR_DIE(p)  \
    do {                 \
        if ((p) == NULL) \
            abort();     \
    } while (0)

void fm_init(fm_model *m) { memset(m, 0, sizeof(*m)); }

void fm_free(fm_model *m)
{
    for (size_t i = 0; i < m->ns; i++)
        free(m->s[i].origin);
    for (size_t i = 0; i < m->nlog; i++)
        free(m->log[i].origin);
    free(m->b);
    free(m->s);
    free(m->log);
    memset(m, 0, sizeof(*m));
}

static unsigned char *dup_bytes(const void *p, size_t n)
{
    if (n == 0)
        return NULL;
    unsigned char *d = malloc(n);
    ALLOC_OR_DIE(d);
    memcpy(d, p, n);
    return d;
}

/* Deep copy, for the all-or-nothing batch. */
static void fm_clone(fm_model *dst, const fm_model *src)
{
    *dst = *src;
    dst->b = malloc((src->capb ? src->capb : 1) * sizeof(fm_binding));
    dst->s = malloc((src->caps ? src->caps : 1) * sizeof(fm_session));
    dst->log = malloc((src->caplog ? src->caplog : 1) * sizeof(fm_record));
    ALLOC_OR_DIE(dst->b);
    ALLOC_OR_DIE(dst->s);
    ALLOC_OR_DIE(dst->log);
    if (src->nb)
        memcpy(dst->b, src->b, src->nb * sizeof(fm_binding));
    for (size_t i = 0; i < src->ns; i++) {
        dst->s[i] = src->s[i];
        dst->s[i].origin = dup_bytes(src->s[i].origin, src->s[i].origin_len);
    }
    for (size_t i = 0; i < src->nlog; i++) {
        dst->log[i] = src->log[i];
        dst->log[i].origin = dup_bytes(src->log[i].origin, src->log[i].origin_len);
    }
}

/* ---- argument rules (SPEC 1 and 2, bindlog.h) -------------------------- */

/* "Keys are any bytes but NUL", 1..400 bytes. */
static int ok_key(const char *k) { return k != NULL && k[0] != '\0' && strlen(k) <= BINDLOG_KEY_MAX; }

/* "session ids and reasons must not contain control bytes (0x00-0x1F, 0x7F)" */
static int no_ctl(const char *p)
{
    for (; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
            return 0;
    return 1;
}

/* session id: 1..128 bytes, no control bytes. */
static int ok_id(const char *s) { return s != NULL && s[0] != '\0' && strlen(s) <= BINDLOG_ID_MAX && no_ctl(s); }

/* reason: NULL (the default) or 0..64 bytes without control bytes. */
static int ok_reason(const char *r) { return r == NULL || (strlen(r) <= BINDLOG_REASON_MAX && no_ctl(r)); }

/* origin: NULL with length 0 (none given), or 0..65536 bytes. */
static int ok_origin(const void *o, size_t n) { return o == NULL ? n == 0 : n <= BINDLOG_ORIGIN_MAX; }

int fm_check_event(const bindlog_event *ev)
{
    if (ev->type < BINDLOG_EVENT_BIND || ev->type > BINDLOG_EVENT_UNBIND)
        return BINDLOG_EINVAL;
    if (!ok_key(ev->key) || !ok_reason(ev->reason) || !ok_origin(ev->origin, ev->origin_len))
        return BINDLOG_EINVAL;
    switch (ev->type) {
    case BINDLOG_EVENT_BIND:
        /* expect: NULL = no check, "" = only if unbound, else an id */
        if (!ok_id(ev->session_id) || (ev->expect && ev->expect[0] && !ok_id(ev->expect)))
            return BINDLOG_EINVAL;
        return 0;
    case BINDLOG_EVENT_NEW_SESSION:
        return ok_id(ev->session_id) && ev->expect == NULL ? 0 : BINDLOG_EINVAL;
    case BINDLOG_EVENT_SPLIT:
        /* "parent_id == child_id is BINDLOG_EINVAL" */
        if (!ok_id(ev->session_id) || !ok_id(ev->expect) || ev->reason != NULL)
            return BINDLOG_EINVAL;
        return strcmp(ev->session_id, ev->expect) == 0 ? BINDLOG_EINVAL : 0;
    default: /* INVALIDATE, UNBIND: key and reason only */
        if (ev->session_id != NULL || ev->expect != NULL || ev->origin != NULL)
            return BINDLOG_EINVAL;
        return 0;
    }
}

/* ---- state ---------------------------------------------------------------- */

static fm_binding *binding(fm_model *m, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i < m->nb; i++)
        if (m->b[i].key_len == n && memcmp(m->b[i].key, key, n) == 0)
            return &m->b[i];
    return NULL;
}

static fm_session *session(fm_model *m, const char *id)
{
    size_t n = strlen(id);
    for (size_t i = 0; i < m->ns; i++)
        if (m->s[i].id_len == n && memcmp(m->s[i].id, id, n) == 0)
            return &m->s[i];
    return NULL;
}

const fm_binding *fm_binding_get(const fm_model *m, const char *key)
{
    return binding((fm_model *)m, key);
}

const fm_session *fm_session_get(const fm_model *m, const char *id)
{
    return session((fm_model *)m, id);
}

static void set_str(char *dst, size_t *len, const char *src)
{
    size_t n = strlen(src);
    memcpy(dst, src, n + 1);
    if (len)
        *len = n;
}

static fm_binding *binding_add(fm_model *m, const char *key)
{
    if (m->nb == m->capb) {
        m->capb = m->capb ? 2 * m->capb : 16;
        m->b = realloc(m->b, m->capb * sizeof(*m->b));
        ALLOC_OR_DIE(m->b);
    }
    fm_binding *b = &m->b[m->nb++];
    memset(b, 0, sizeof(*b));
    set_str(b->key, &b->key_len, key);
    return b;
}

/* A new session: live, root unless parent is given. */
static fm_session *session_add(fm_model *m, const char *id, const char *key, const char *parent,
                               const void *origin, size_t origin_len, uint64_t lsn, int64_t t)
{
    if (m->ns == m->caps) {
        m->caps = m->caps ? 2 * m->caps : 16;
        m->s = realloc(m->s, m->caps * sizeof(*m->s));
        ALLOC_OR_DIE(m->s);
    }
    fm_session *s = &m->s[m->ns++];
    memset(s, 0, sizeof(*s));
    set_str(s->id, &s->id_len, id);
    set_str(s->key, &s->key_len, key);
    set_str(s->parent, &s->parent_len, parent);
    s->created_lsn = lsn;
    s->created_ms = t;
    s->origin = dup_bytes(origin, origin_len);
    s->origin_len = origin_len;
    return s;
}

static void session_end(fm_session *s, const char *reason, uint64_t lsn, int64_t t)
{
    s->ended_lsn = lsn;
    s->ended_ms = t;
    set_str(s->reason, &s->reason_len, reason);
}

static fm_record *log_add(fm_model *m, int type, const char *key, uint64_t gen, const char *sid,
                          const char *other, const char *reason, int64_t t)
{
    if (m->nlog == m->caplog) {
        m->caplog = m->caplog ? 2 * m->caplog : 64;
        m->log = realloc(m->log, m->caplog * sizeof(*m->log));
        ALLOC_OR_DIE(m->log);
    }
    fm_record *r = &m->log[m->nlog++];
    memset(r, 0, sizeof(*r));
    r->lsn = ++m->head_lsn;
    r->type = type;
    r->time_ms = t;
    r->generation = gen;
    set_str(r->key, NULL, key);
    set_str(r->sid, NULL, sid);
    set_str(r->other, NULL, other);
    set_str(r->reason, NULL, reason);
    m->head_time = t;
    m->applied[type]++;
    return r;
}

static void result(bindlog_result *out, int outcome, uint64_t lsn, const fm_binding *b)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof(*out));
    out->outcome = outcome;
    out->lsn = lsn;
    out->generation = b ? b->generation : 0;
    if (b)
        memcpy(out->session_id, b->sid, b->sid_len + 1);
}

/* Decide and apply one event whose arguments are valid. */
static int apply_valid(fm_model *m, const bindlog_event *ev, int64_t now, bindlog_result *out)
{
    /* "A record's time_ms never decreases along the log (the wall clock, or
     * the previous record's time if the clock went back)." */
    int64_t t = now < m->head_time ? m->head_time : now;
    uint64_t lsn = m->head_lsn + 1;
    fm_binding *b = binding(m, ev->key);
    const char *cur = b ? b->sid : ""; /* "The current binding of an unbound key is """ */
    const char *reason;
    char prev[BINDLOG_ID_MAX + 1];
    fm_session *s;

    switch (ev->type) {
    case BINDLOG_EVENT_BIND:
        reason = ev->reason ? ev->reason : "switch";
        /* 1. key already bound to session_id -> ALREADY */
        if (strcmp(cur, ev->session_id) == 0) {
            result(out, BINDLOG_ALREADY, 0, b);
            return BINDLOG_ALREADY;
        }
        /* 2. expect not NULL and != the current binding -> MOVED */
        if (ev->expect != NULL && strcmp(ev->expect, cur) != 0) {
            result(out, BINDLOG_MOVED, 0, b);
            return BINDLOG_MOVED;
        }
        /* 3. session_id is the live binding of another key -> ECONFLICT */
        for (size_t i = 0; i < m->nb; i++)
            if (&m->b[i] != b && strcmp(m->b[i].sid, ev->session_id) == 0)
                return BINDLOG_ECONFLICT;
        /* 4. create as a root with origin, or re-open */
        s = session(m, ev->session_id);
        if (s == NULL) {
            session_add(m, ev->session_id, ev->key, "", ev->origin, ev->origin_len, lsn, t);
        } else {
            s->ended_lsn = 0;
            s->ended_ms = 0;
            s->reason[0] = '\0';
            s->reason_len = 0;
            set_str(s->key, &s->key_len, ev->key);
            if (ev->origin != NULL) {
                free(s->origin);
                s->origin = dup_bytes(ev->origin, ev->origin_len);
                s->origin_len = ev->origin_len;
            }
        }
        /* end the previously bound session, if any, with reason */
        if (cur[0] != '\0')
            session_end(session(m, cur), reason, lsn, t);
        if (b == NULL)
            b = binding_add(m, ev->key);
        set_str(prev, NULL, b->sid);
        set_str(b->sid, &b->sid_len, ev->session_id);
        b->generation++;
        break;

    case BINDLOG_EVENT_NEW_SESSION:
        reason = ev->reason ? ev->reason : "new_session";
        if (strcmp(cur, ev->session_id) == 0) {
            result(out, BINDLOG_ALREADY, 0, b);
            return BINDLOG_ALREADY;
        }
        if (session(m, ev->session_id) != NULL)
            return BINDLOG_EEXIST;
        /* parent = the current binding ("" when unbound, so a root) */
        session_add(m, ev->session_id, ev->key, cur, ev->origin, ev->origin_len, lsn, t);
        if (cur[0] != '\0')
            session_end(session(m, cur), reason, lsn, t);
        if (b == NULL)
            b = binding_add(m, ev->key);
        set_str(prev, NULL, b->sid);
        set_str(b->sid, &b->sid_len, ev->session_id);
        b->generation++;
        break;

    case BINDLOG_EVENT_SPLIT: {
        reason = "compression";
        /* 1. never bound or tombstone -> ENOTFOUND */
        if (cur[0] == '\0')
            return BINDLOG_ENOTFOUND;
        /* 2. already bound to child -> ALREADY */
        if (strcmp(cur, ev->session_id) == 0) {
            result(out, BINDLOG_ALREADY, 0, b);
            return BINDLOG_ALREADY;
        }
        /* 3. generation check unless ANY */
        if (ev->generation != BINDLOG_ANY_GENERATION && ev->generation != b->generation) {
            result(out, BINDLOG_STALE, 0, b);
            return BINDLOG_STALE;
        }
        /* 4. bound to anything but parent -> MOVED */
        if (strcmp(cur, ev->expect) != 0) {
            result(out, BINDLOG_MOVED, 0, b);
            return BINDLOG_MOVED;
        }
        /* 5. child exists -> EEXIST */
        if (session(m, ev->session_id) != NULL)
            return BINDLOG_EEXIST;
        /* 6. origin: given, or a copy of the parent's */
        fm_session *parent = session(m, cur);
        const void *origin = ev->origin ? ev->origin : parent->origin;
        size_t origin_len = ev->origin ? ev->origin_len : parent->origin_len;
        unsigned char *copy = dup_bytes(origin, origin_len); /* parent may move */
        session_end(parent, reason, lsn, t);
        session_add(m, ev->session_id, ev->key, cur, copy, origin_len, lsn, t);
        set_str(prev, NULL, b->sid);
        set_str(b->sid, &b->sid_len, ev->session_id);
        fm_record *r = log_add(m, ev->type, ev->key, b->generation, b->sid, prev, reason, t);
        r->origin = copy;
        r->origin_len = origin_len;
        r->origin_present = 1;
        b->lsn = lsn;
        b->updated_ms = t;
        result(out, BINDLOG_APPLIED, lsn, b);
        return BINDLOG_APPLIED;
    }

    case BINDLOG_EVENT_INVALIDATE:
        reason = ev->reason ? ev->reason : "invalidate";
        if (cur[0] == '\0')
            return BINDLOG_ENOTFOUND;
        b->generation++;
        b->lsn = lsn;
        b->updated_ms = t;
        log_add(m, ev->type, ev->key, b->generation, b->sid, "", reason, t);
        result(out, BINDLOG_APPLIED, lsn, b);
        return BINDLOG_APPLIED;

    default: /* UNBIND */
        reason = ev->reason ? ev->reason : "unbind";
        if (b == NULL)
            return BINDLOG_ENOTFOUND;
        if (cur[0] == '\0') {
            result(out, BINDLOG_ALREADY, 0, b);
            return BINDLOG_ALREADY;
        }
        set_str(prev, NULL, b->sid);
        session_end(session(m, prev), reason, lsn, t);
        b->sid[0] = '\0';
        b->sid_len = 0;
        b->generation++;
        b->lsn = lsn;
        b->updated_ms = t;
        log_add(m, ev->type, ev->key, b->generation, prev, "", reason, t);
        result(out, BINDLOG_APPLIED, lsn, b);
        return BINDLOG_APPLIED;
    }

    /* BIND and NEW_SESSION: the binding moved to ev->session_id */
    b->lsn = lsn;
    b->updated_ms = t;
    fm_record *r = log_add(m, ev->type, ev->key, b->generation, b->sid, prev, reason, t);
    if (ev->origin != NULL) {
        r->origin = dup_bytes(ev->origin, ev->origin_len);
        r->origin_len = ev->origin_len;
        r->origin_present = 1;
    }
    result(out, BINDLOG_APPLIED, lsn, b);
    return BINDLOG_APPLIED;
}

/* The activity a reset policy judges: the later of the last routed
 * message and the last change of the binding. */
static int64_t activity(const fm_binding *b)
{
    return b->last_activity_ms > b->updated_ms ? b->last_activity_ms : b->updated_ms;
}

int fm_route(fm_model *m, const char *key, int64_t now, const bindlog_policy *p,
             const char *fresh, bindlog_route_result *out)
{
    if (p == NULL || p->mode < BINDLOG_RESET_NONE || p->mode > BINDLOG_RESET_DAILY_AND_IDLE)
        return BINDLOG_EINVAL;
    int uses_idle = p->mode == BINDLOG_RESET_IDLE || p->mode == BINDLOG_RESET_BOTH ||
                    p->mode == BINDLOG_RESET_DAILY_AND_IDLE;
    int uses_daily = p->mode == BINDLOG_RESET_DAILY || p->mode == BINDLOG_RESET_BOTH ||
                     p->mode == BINDLOG_RESET_DAILY_AND_IDLE;
    if ((uses_idle && p->idle_ms <= 0) || (uses_daily && p->daily_boundary_ms < 0) ||
        fresh == NULL || now < 0)
        return BINDLOG_EINVAL;
    /* the key and the fresh id follow the rules of a NEW_SESSION */
    bindlog_event ne = {BINDLOG_EVENT_NEW_SESSION, key, fresh, NULL, 0, NULL, NULL, 0};
    if (fm_check_event(&ne) != 0)
        return BINDLOG_EINVAL;

    int64_t t = now < m->head_time ? m->head_time : now;
    fm_binding *b = binding(m, key);
    int64_t before = b ? b->last_activity_ms : 0;
    int bound = b != NULL && b->sid[0] != '\0';
    int idle = 0, daily = 0, stale = 0;
    if (bound) {
        int64_t a = activity(b);
        idle = t - a > p->idle_ms;
        daily = a < p->daily_boundary_ms;
        switch (p->mode) {
        case BINDLOG_RESET_IDLE: stale = idle; break;
        case BINDLOG_RESET_DAILY: stale = daily; break;
        case BINDLOG_RESET_BOTH: stale = idle || daily; break;
        case BINDLOG_RESET_DAILY_AND_IDLE: stale = idle && daily; break;
        default: stale = 0; break;
        }
    }
    if (out != NULL)
        memset(out, 0, sizeof(*out));
    if (bound && (strcmp(b->sid, fresh) == 0 || !stale)) {
        /* "coalesced": the activity already stands at this time, nothing logged */
        int logged = t > b->last_activity_ms;
        if (logged)
            log_add(m, BINDLOG_EVENT_ROUTE, key, b->generation, "", "", "", t);
        if (t > b->last_activity_ms)
            b->last_activity_ms = t;
        if (out != NULL) {
            out->outcome = BINDLOG_ROUTED;
            out->lsn = logged ? m->head_lsn : 0;
            out->generation = b->generation;
            out->last_activity_ms = before;
            memcpy(out->session_id, b->sid, b->sid_len + 1);
        }
        return BINDLOG_ROUTED;
    }
    int why = !bound ? BINDLOG_RESET_NONE : daily && (p->mode != BINDLOG_RESET_IDLE)
                                                ? BINDLOG_RESET_DAILY
                                                : BINDLOG_RESET_IDLE;
    char prev[BINDLOG_ID_MAX + 1] = "";
    if (bound)
        memcpy(prev, b->sid, b->sid_len + 1);
    ne.reason = !bound ? "new_session" : why == BINDLOG_RESET_DAILY ? "daily" : "idle";
    bindlog_result res;
    int rc = apply_valid(m, &ne, now, &res);
    if (rc != BINDLOG_APPLIED)
        return rc; /* EEXIST: the fresh id is taken */
    b = binding(m, key); /* apply_valid may have moved the array */
    if (t > b->last_activity_ms)
        b->last_activity_ms = t;
    if (out != NULL) {
        out->outcome = bound ? BINDLOG_RESET : BINDLOG_CREATED;
        out->reason = why;
        out->lsn = res.lsn;
        out->generation = res.generation;
        out->last_activity_ms = before;
        memcpy(out->session_id, res.session_id, sizeof(out->session_id));
        memcpy(out->previous_id, prev, sizeof(prev));
    }
    return bound ? BINDLOG_RESET : BINDLOG_CREATED;
}

int fm_expire(fm_model *m, int64_t now, int64_t cutoff, const char *prefix, int dry_run,
              uint64_t *count)
{
    size_t plen = prefix ? strlen(prefix) : 0;
    *count = 0;
    if (cutoff <= 0 || plen > BINDLOG_KEY_MAX)
        return BINDLOG_EINVAL;
    fm_sort(m);
    size_t n = m->nb;
    char (*keys)[BINDLOG_KEY_MAX + 1] = malloc((n ? n : 1) * sizeof(*keys));
    ALLOC_OR_DIE(keys);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (m->b[i].sid[0] != '\0' && strncmp(m->b[i].key, prefix ? prefix : "", plen) == 0 &&
            activity(&m->b[i]) < cutoff)
            memcpy(keys[k++], m->b[i].key, m->b[i].key_len + 1);
    for (size_t i = 0; !dry_run && i < k; i++) {
        bindlog_event ue = {BINDLOG_EVENT_UNBIND, keys[i], NULL, NULL, 0, "expired", NULL, 0};
        if (apply_valid(m, &ue, now, NULL) != BINDLOG_APPLIED)
            abort(); /* bound a moment ago: the model contradicts itself */
    }
    *count = k;
    free(keys);
    return 0;
}

int fm_apply(fm_model *m, const bindlog_event *ev, int64_t now, bindlog_result *out)
{
    int rc = fm_check_event(ev);
    if (rc != 0)
        return rc;
    return apply_valid(m, ev, now, out);
}

int fm_apply_batch(fm_model *m, const bindlog_event *ev, size_t n, int64_t now,
                   bindlog_result *out, size_t *err_index)
{
    fm_model work;
    int rc;

    for (size_t i = 0; i < n; i++) {
        if ((rc = fm_check_event(&ev[i])) != 0) {
            *err_index = i;
            return rc;
        }
    }
    fm_clone(&work, m);
    for (size_t i = 0; i < n; i++) {
        rc = apply_valid(&work, &ev[i], now, out ? &out[i] : NULL);
        if (rc < 0) {
            *err_index = i;
            fm_free(&work);
            return rc;
        }
    }
    fm_free(m);
    *m = work;
    return 0;
}

/* ---- digest ---------------------------------------------------------------- */

/* LMDB's default key order: memcmp over the common length, shorter first. */
static int key_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    if (c != 0)
        return c;
    return an < bn ? -1 : an > bn;
}

static int cmp_binding(const void *x, const void *y)
{
    const fm_binding *a = x, *b = y;
    return key_cmp(a->key, a->key_len, b->key, b->key_len);
}

static int cmp_session(const void *x, const void *y)
{
    const fm_session *a = x, *b = y;
    return key_cmp(a->id, a->id_len, b->id, b->id_len);
}

void fm_sort(fm_model *m)
{
    if (m->nb > 1)
        qsort(m->b, m->nb, sizeof(*m->b), cmp_binding);
    if (m->ns > 1)
        qsort(m->s, m->ns, sizeof(*m->s), cmp_session);
}

/* Hash one table entry: tag, key length (u16 for bindings, u8 for
 * sessions), key, u32 value length, value. */
static void hash_entry(XXH3_state_t *st, int tag, const char *k, size_t kn, const void *v,
                       size_t vn)
{
    unsigned char hdr[4];
    hdr[0] = (unsigned char)tag;
    if (tag == 'B') {
        bl_put16(hdr + 1, (uint16_t)kn);
        XXH3_128bits_update(st, hdr, 3);
    } else {
        hdr[1] = (unsigned char)kn;
        XXH3_128bits_update(st, hdr, 2);
    }
    XXH3_128bits_update(st, k, kn);
    bl_put32(hdr, (uint32_t)vn);
    XXH3_128bits_update(st, hdr, 4);
    XXH3_128bits_update(st, v, vn);
}

void fm_digest(const fm_model *cm, unsigned char out[BINDLOG_DIGEST_SIZE])
{
    fm_model *m = (fm_model *)cm; /* sorting does not change the state */
    XXH3_state_t *st = XXH3_createState();
    unsigned char *buf = malloc(BL_RECORD_MAX);
    ALLOC_OR_DIE(st);
    ALLOC_OR_DIE(buf);
    fm_sort(m);
    XXH3_128bits_reset(st);
    for (size_t i = 0; i < m->nb; i++) {
        const fm_binding *b = &m->b[i];
        bl_bval v = {b->sid, b->sid_len, b->generation, b->lsn, b->updated_ms,
                     b->last_activity_ms};
        size_t n = bl_bval_encode_v1(&v, buf, BL_RECORD_MAX);
        if (n == 0)
            abort();
        hash_entry(st, 'B', b->key, b->key_len, buf, n);
    }
    for (size_t i = 0; i < m->ns; i++) {
        const fm_session *s = &m->s[i];
        bl_sval v = {s->key,        s->key_len,     s->parent,     s->parent_len,
                     s->created_lsn, s->ended_lsn,  s->created_ms, s->ended_ms,
                     s->reason,     s->reason_len,  s->origin ? (const void *)s->origin : "",
                     s->origin_len, 0, 0, 0, {0}};
        size_t n = bl_sval_encode_v1(&v, buf, BL_RECORD_MAX);
        if (n == 0)
            abort();
        hash_entry(st, 'S', s->id, s->id_len, buf, n);
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
    memcpy(out, c.digest, BINDLOG_DIGEST_SIZE);
    XXH3_freeState(st);
    free(buf);
}
