/*
 * peer_json.c -- what many gateways do today: every binding in one JSON
 * file, rewritten on every change.
 *
 * The store keeps the bindings in memory, applies the same checks as bindlog
 * (generation and current session for a split, expect for a bind), and after
 * every applied event serialises all bindings
 *
 *   {
 *     "agent:main:telegram:dm:100000000": {"sessionId": "...", "generation": 7,
 *                                          "updatedAt": 1767225600000},
 *     ...
 *   }
 *
 * into sessions.json.tmp, fsyncs it, and renames it over sessions.json.  It
 * is deliberately generous to the JSON store: a hand-written C serialiser,
 * no sessions, no log, no directory fsync (which a power-safe rename needs).
 */
#include "bench.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct js_key {
    uint32_t cur; /* bound session */
    uint64_t gen;
    int64_t updated_ms;
} js_key;

struct js_store {
    char path[4096], tmp[4096];
    js_key *k;
    uint32_t nkeys;
    char *buf;
    size_t cap;
};

static char *put_u64(char *p, uint64_t v)
{
    char t[24];
    int n = 0;
    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = t[--n];
    return p;
}

static char *put_str(char *p, const char *s)
{
    size_t n = strlen(s); /* keys and ids hold no characters JSON must escape */
    *p++ = '"';
    memcpy(p, s, n);
    p += n;
    *p++ = '"';
    return p;
}

static int rewrite(js_store *j, const workload *w)
{
    char *p = j->buf;
    *p++ = '{';
    *p++ = '\n';
    for (uint32_t i = 0; i < j->nkeys; i++) {
        memcpy(p, "  ", 2), p += 2;
        p = put_str(p, w->keys[i]);
        memcpy(p, ": {\"sessionId\": ", 16), p += 16;
        p = put_str(p, wl_id(w, j->k[i].cur));
        memcpy(p, ", \"generation\": ", 16), p += 16;
        p = put_u64(p, j->k[i].gen);
        memcpy(p, ", \"updatedAt\": ", 15), p += 15;
        p = put_u64(p, (uint64_t)j->k[i].updated_ms);
        *p++ = '}';
        if (i + 1 < j->nkeys)
            *p++ = ',';
        *p++ = '\n';
    }
    *p++ = '}';
    *p++ = '\n';

    int fd = open(j->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    size_t len = (size_t)(p - j->buf), off = 0;
    while (off < len) {
        ssize_t n = write(fd, j->buf + off, len - off);
        if (n <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    if (fsync(fd) != 0) {
        close(fd);
        return -1;
    }
    close(fd);
    return rename(j->tmp, j->path);
}

js_store *js_open(const char *dir, const workload *w)
{
    js_store *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return NULL;
    snprintf(j->path, sizeof j->path, "%s/sessions.json", dir);
    snprintf(j->tmp, sizeof j->tmp, "%s/sessions.json.tmp", dir);
    j->nkeys = w->nkeys;
    j->k = calloc(w->nkeys, sizeof(js_key));
    /* the longest line: key, id, two 20-digit numbers and the punctuation */
    j->cap = 2 + (size_t)w->nkeys * (BINDLOG_KEY_MAX + WL_ID_SLOT + 110) + 4;
    j->buf = malloc(j->cap);
    if (j->k == NULL || j->buf == NULL) {
        js_close(j);
        return NULL;
    }
    int64_t t = wall_ms();
    for (uint32_t i = 0; i < w->nkeys; i++)
        j->k[i] = (js_key){w->setup[i].sid, 1, t};
    if (rewrite(j, w) != 0) {
        js_close(j);
        return NULL;
    }
    return j;
}

int js_apply(js_store *j, const workload *w, const wl_event *e)
{
    js_key *k = &j->k[e->key];
    switch (e->type) {
    case BINDLOG_EVENT_SPLIT:
        if (k->cur == e->sid)
            return BINDLOG_ALREADY;
        if (e->gen != BINDLOG_ANY_GENERATION && e->gen != k->gen)
            return BINDLOG_STALE;
        if (k->cur != e->other)
            return BINDLOG_MOVED;
        k->cur = e->sid;
        break;
    case BINDLOG_EVENT_BIND:
        if (k->cur == e->sid)
            return BINDLOG_ALREADY;
        if (k->cur != e->other)
            return BINDLOG_MOVED;
        k->cur = e->sid;
        k->gen++;
        break;
    case BINDLOG_EVENT_NEW_SESSION:
        if (k->cur == e->sid)
            return BINDLOG_ALREADY;
        k->cur = e->sid;
        k->gen++;
        break;
    case BINDLOG_EVENT_INVALIDATE:
        k->gen++;
        break;
    default:
        return BINDLOG_EINVAL;
    }
    k->updated_ms = wall_ms();
    return rewrite(j, w) == 0 ? BINDLOG_APPLIED : BINDLOG_EIO;
}

void js_close(js_store *j)
{
    if (j == NULL)
        return;
    free(j->k);
    free(j->buf);
    free(j);
}
