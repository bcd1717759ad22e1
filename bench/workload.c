/*
 * workload.c -- the deterministic gateway event stream every contender
 * replays, and the bench's small helpers.
 *
 * The stream models a gateway that already serves `nkeys` chats: a setup
 * phase binds every key once (first contact, applied before any timing), then
 * each event picks a key uniformly and does, with these probabilities:
 *
 *   45%  a published compression split  SPLIT(cur -> fresh child, run gen = current)  APPLIED
 *   10%  a late split                   STALE (run generation older than /stop, /new)
 *                                       or MOVED (twin run of the same generation, or an
 *                                       ANY-generation split after the key moved)
 *   25%  bind / resume                  BIND back to the previous session (expect = current)
 *                                       or to a fresh one when there is none            APPLIED
 *   15%  /new                           NEW_SESSION(fresh)                                APPLIED
 *    5%  /stop                          INVALIDATE                                       APPLIED
 *
 * A per-key model predicts every outcome, so a contender that implements the
 * semantics differently is caught (the bench counts mismatches).  Session ids
 * look like UUIDs, keys like a gateway's ("agent:main:telegram:dm:<id>"),
 * origins are ~70 bytes of JSON; the same seed gives the same stream.
 */
#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* splitmix64: small, fast, good enough for a workload. */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

typedef struct kstate {
    uint32_t cur;         /* bound session */
    uint32_t prev;        /* the session before the last /new or bind (resume target) */
    uint32_t last_parent; /* cur's parent if cur came from a split since then */
    uint64_t gen;
} kstate;

static const char *const kind_names[WL_K_COUNT] = {
    "first contact", "split", "late split (stale)", "late split (moved)",
    "resume", "bind fresh", "new session", "invalidate",
};

const char *wl_kind_name(int kind)
{
    return kind >= 0 && kind < WL_K_COUNT ? kind_names[kind] : "?";
}

static uint32_t new_id(workload *w, uint64_t seed)
{
    uint32_t i = w->nids++;
    uint64_t s = seed ^ ((uint64_t)i * 0xD1B54A32D192ED03u);
    uint64_t h = mix(&s);
    snprintf(w->ids + (size_t)i * WL_ID_SLOT, WL_ID_SLOT, "%08x-%04x-4%03x-a%03x-%012llx",
             (unsigned)(h >> 32), (unsigned)(h >> 16) & 0xffffu, (unsigned)h & 0xfffu,
             (unsigned)(h >> 52), (unsigned long long)i);
    return i;
}

/* The state machine's split checks, in the contract's order. */
static int predict_split(const kstate *k, uint32_t parent, uint32_t child, uint64_t gen)
{
    if (k->cur == child)
        return BINDLOG_ALREADY;
    if (gen != BINDLOG_ANY_GENERATION && gen != k->gen)
        return BINDLOG_STALE;
    if (k->cur != parent)
        return BINDLOG_MOVED;
    return BINDLOG_APPLIED;
}

int wl_generate(workload *w, uint32_t nkeys, size_t n, uint64_t seed)
{
    uint64_t rng = seed;
    kstate *st = NULL;

    memset(w, 0, sizeof(*w));
    w->nkeys = nkeys;
    w->n = n;
    w->keys = calloc(nkeys, sizeof(char *));
    w->key_len = calloc(nkeys, sizeof(size_t));
    w->origins = calloc(nkeys, sizeof(char *));
    w->origin_len = calloc(nkeys, sizeof(size_t));
    w->ids = malloc(((size_t)nkeys + n) * WL_ID_SLOT);
    w->setup = calloc(nkeys, sizeof(wl_event));
    w->ev = calloc(n ? n : 1, sizeof(wl_event));
    st = calloc(nkeys, sizeof(kstate));
    if (!w->keys || !w->key_len || !w->origins || !w->origin_len || !w->ids || !w->setup ||
        !w->ev || !st) {
        free(st);
        wl_free(w);
        return -1;
    }

    for (uint32_t k = 0; k < nkeys; k++) {
        char key[96], org[160];
        const char *peer;
        unsigned kind = k % 10;
        long long chat;
        if (kind < 7) {
            peer = "telegram";
            chat = 100000000LL + (long long)k * 7919;
            snprintf(key, sizeof key, "agent:main:telegram:dm:%lld", chat);
        } else if (kind < 9) {
            peer = "discord";
            chat = 900000000000LL + (long long)k * 104729;
            snprintf(key, sizeof key, "agent:main:discord:channel:%lld", chat);
        } else {
            peer = "slack";
            chat = 5000000LL + (long long)k * 31;
            snprintf(key, sizeof key, "agent:main:slack:channel:C%lld", chat);
        }
        snprintf(org, sizeof org, "{\"peer\":\"%s\",\"chat_id\":%lld,\"user\":\"u%u\",\"lang\":\"en\"}",
                 peer, chat, k * 13u + 7u);
        w->keys[k] = strdup(key);
        w->key_len[k] = strlen(key);
        w->origins[k] = strdup(org);
        w->origin_len[k] = strlen(org);
        if (!w->keys[k] || !w->origins[k]) {
            free(st);
            wl_free(w);
            return -1;
        }
        /* setup: first contact binds a fresh session, expect "" */
        wl_event *e = &w->setup[k];
        e->type = BINDLOG_EVENT_BIND;
        e->kind = WL_K_FIRST;
        e->outcome = BINDLOG_APPLIED;
        e->origin = 1;
        e->key = k;
        e->sid = new_id(w, seed);
        e->other = WL_NO_SESSION;
        st[k] = (kstate){e->sid, WL_NO_SESSION, WL_NO_SESSION, 1};
    }

    for (size_t i = 0; i < n; i++) {
        wl_event *e = &w->ev[i];
        uint32_t k = (uint32_t)(mix(&rng) % nkeys);
        unsigned r = (unsigned)(mix(&rng) % 100);
        kstate *ks = &st[k];
        e->key = k;
        e->other = WL_NO_SESSION;
        e->outcome = BINDLOG_APPLIED;
        if (r < 45) {
            e->type = BINDLOG_EVENT_SPLIT;
            e->kind = WL_K_SPLIT;
            e->sid = new_id(w, seed);
            e->other = ks->cur;
            e->gen = ks->gen;
            ks->last_parent = ks->cur;
            ks->cur = e->sid;
        } else if (r < 55) {
            e->type = BINDLOG_EVENT_SPLIT;
            e->sid = new_id(w, seed); /* never bound: the split is refused */
            unsigned v = (unsigned)(mix(&rng) % 3);
            if (v == 1 && ks->last_parent != WL_NO_SESSION) {
                /* twin run: same generation, started on the parent */
                e->other = ks->last_parent;
                e->gen = ks->gen;
            } else if (v == 2 && ks->prev != WL_NO_SESSION) {
                /* a run that skips the generation check, after a move */
                e->other = ks->prev;
                e->gen = BINDLOG_ANY_GENERATION;
            } else {
                /* a run older than the last /stop or /new */
                e->other = ks->prev != WL_NO_SESSION ? ks->prev : ks->cur;
                e->gen = ks->gen - 1;
            }
            e->outcome = (uint8_t)predict_split(ks, e->other, e->sid, e->gen);
            if (e->outcome == BINDLOG_APPLIED) { /* cannot happen; keep the mix honest */
                e->gen = ks->gen - 1;
                e->outcome = BINDLOG_STALE;
            }
            e->kind = e->outcome == BINDLOG_STALE ? WL_K_LATE_STALE : WL_K_LATE_MOVED;
        } else if (r < 80) {
            e->type = BINDLOG_EVENT_BIND;
            e->other = ks->cur; /* expect = current */
            if (ks->prev != WL_NO_SESSION) {
                e->kind = WL_K_RESUME;
                e->sid = ks->prev;
                e->reason = "resume";
            } else {
                e->kind = WL_K_REBIND;
                e->sid = new_id(w, seed);
                e->origin = 1;
            }
            ks->prev = ks->cur;
            ks->cur = e->sid;
            ks->last_parent = WL_NO_SESSION;
            ks->gen++;
        } else if (r < 95) {
            e->type = BINDLOG_EVENT_NEW_SESSION;
            e->kind = WL_K_NEW;
            e->sid = new_id(w, seed);
            e->origin = 1;
            ks->prev = ks->cur;
            ks->cur = e->sid;
            ks->last_parent = WL_NO_SESSION;
            ks->gen++;
        } else {
            e->type = BINDLOG_EVENT_INVALIDATE;
            e->kind = WL_K_STOP;
            e->sid = WL_NO_SESSION;
            e->reason = "stop";
            ks->gen++;
        }
        w->kinds[e->kind]++;
    }
    free(st);
    return 0;
}

/* A derived stream: base's keys, origins and setup, its own ids (base's
 * first, then one new id per event) and events. */
static int derive(const workload *base, size_t n, workload *out)
{
    *out = *base;
    out->n = n;
    out->ids = malloc(((size_t)base->nids + n) * WL_ID_SLOT);
    out->ev = calloc(n ? n : 1, sizeof(wl_event));
    memset(out->kinds, 0, sizeof(out->kinds));
    if (out->ids == NULL || out->ev == NULL) {
        free(out->ids);
        free(out->ev);
        memset(out, 0, sizeof(*out));
        return -1;
    }
    memcpy(out->ids, base->ids, (size_t)base->nids * WL_ID_SLOT);
    return 0;
}

int wl_derive_route(const workload *base, size_t n, uint64_t seed, workload *out)
{
    if (derive(base, n, out) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        wl_event *e = &out->ev[i];
        e->type = BINDLOG_EVENT_ROUTE;
        e->outcome = BINDLOG_ROUTED;
        e->kind = WL_K_FIRST;
        e->key = (uint32_t)(i % base->nkeys);
        e->sid = new_id(out, seed ^ 0x52u);
        e->other = WL_NO_SESSION;
        e->gen = 0;
    }
    return 0;
}

int wl_derive_splits(const workload *base, size_t n, uint64_t seed, workload *out)
{
    if (derive(base, n, out) != 0)
        return -1;
    uint32_t *cur = malloc((size_t)base->nkeys * sizeof(uint32_t));
    if (cur == NULL) {
        wl_free_derived(out);
        return -1;
    }
    for (uint32_t k = 0; k < base->nkeys; k++)
        cur[k] = base->setup[k].sid;
    for (size_t i = 0; i < n; i++) {
        wl_event *e = &out->ev[i];
        uint32_t k = (uint32_t)(i % base->nkeys);
        e->type = BINDLOG_EVENT_SPLIT;
        e->outcome = BINDLOG_APPLIED;
        e->kind = WL_K_SPLIT;
        e->key = k;
        e->other = cur[k];
        e->sid = cur[k] = new_id(out, seed ^ 0x53u);
        e->gen = BINDLOG_ANY_GENERATION;
    }
    free(cur);
    return 0;
}

void wl_free_derived(workload *d)
{
    free(d->ids);
    free(d->ev);
    memset(d, 0, sizeof(*d));
}

void wl_free(workload *w)
{
    if (w->keys)
        for (uint32_t k = 0; k < w->nkeys; k++)
            free(w->keys[k]);
    if (w->origins)
        for (uint32_t k = 0; k < w->nkeys; k++)
            free(w->origins[k]);
    free(w->keys);
    free(w->key_len);
    free(w->origins);
    free(w->origin_len);
    free(w->ids);
    free(w->setup);
    free(w->ev);
    memset(w, 0, sizeof(*w));
}

void wl_to_bindlog(const workload *w, const wl_event *e, bindlog_event *out)
{
    memset(out, 0, sizeof(*out));
    out->type = e->type;
    out->key = w->keys[e->key];
    out->reason = e->reason;
    if (e->origin) {
        out->origin = w->origins[e->key];
        out->origin_len = w->origin_len[e->key];
    }
    switch (e->type) {
    case BINDLOG_EVENT_BIND:
        out->session_id = wl_id(w, e->sid);
        out->expect = wl_id(w, e->other);
        break;
    case BINDLOG_EVENT_NEW_SESSION:
        out->session_id = wl_id(w, e->sid);
        break;
    case BINDLOG_EVENT_SPLIT:
        out->session_id = wl_id(w, e->sid);
        out->expect = wl_id(w, e->other);
        out->generation = e->gen;
        out->reason = NULL;
        break;
    default:
        break;
    }
}

int wl_apply_bindlog(bindlog *s, const workload *w, const wl_event *e)
{
    const char *key = w->keys[e->key];
    const void *org = e->origin ? w->origins[e->key] : NULL;
    size_t olen = e->origin ? w->origin_len[e->key] : 0;

    switch (e->type) {
    case BINDLOG_EVENT_BIND:
        return bindlog_bind(s, key, wl_id(w, e->sid), wl_id(w, e->other), e->reason, org, olen,
                            NULL);
    case BINDLOG_EVENT_NEW_SESSION:
        return bindlog_new_session(s, key, wl_id(w, e->sid), e->reason, org, olen, NULL);
    case BINDLOG_EVENT_SPLIT:
        return bindlog_split(s, key, wl_id(w, e->other), wl_id(w, e->sid), e->gen, org, olen,
                             NULL);
    case BINDLOG_EVENT_INVALIDATE:
        return bindlog_invalidate(s, key, e->reason, NULL);
    case BINDLOG_EVENT_UNBIND:
        return bindlog_unbind(s, key, e->reason, NULL);
    case BINDLOG_EVENT_ROUTE: {
        /* an inbound message: the clock's now, an idle policy, a new id */
        bindlog_policy p = {BINDLOG_RESET_IDLE, WL_ROUTE_IDLE_MS, 0};
        return bindlog_route(s, key, 0, &p, wl_id(w, e->sid), org, olen, NULL);
    }
    default:
        return BINDLOG_EINVAL;
    }
}

/* ---- helpers -------------------------------------------------------------- */

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int rm_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlink(path);
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char sub[4096];
        if (snprintf(sub, sizeof sub, "%s/%s", path, de->d_name) >= (int)sizeof sub) {
            rc = -1;
            continue;
        }
        if (rm_tree(sub) != 0)
            rc = -1;
    }
    closedir(d);
    if (rmdir(path) != 0)
        rc = -1;
    return rc;
}

uint64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

uint64_t dir_size(const char *path)
{
    DIR *d = opendir(path);
    uint64_t total = 0;
    if (d == NULL)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char sub[4096];
        struct stat st;
        if (snprintf(sub, sizeof sub, "%s/%s", path, de->d_name) >= (int)sizeof sub)
            continue;
        if (stat(sub, &st) == 0 && S_ISREG(st.st_mode))
            total += (uint64_t)st.st_size;
    }
    closedir(d);
    return total;
}
