/*
 * etcd_watch.c -- watching one key through the JSON gateway's streaming
 * /v3/watch (etcd_client.h, bl_etcd_watch).
 *
 * Wire format, as etcd 3.4's gateway speaks it: the request is one JSON
 * object {"create_request": {"key": B64, "start_revision": N}}; the answer
 * is a stream of JSON objects, each on its own line, each either
 *   {"result": {"header": ..., "created": true}}            the watch is set
 *   {"result": {"header": ..., "events": [{"kv": ...}, ...]}}  changes
 *   {"result": {..., "canceled": true, "cancel_reason": "...",
 *               "compact_revision": "N"}}                      etcd gave up
 *   {"error": {...}}                                           the gateway did
 * An event's "type" is absent for a PUT (proto3 leaves the zero value out)
 * and "DELETE" for a deletion.  The stream stays open until the client
 * closes it: we do, once the caller's function has seen what it waited
 * for, or when the time is up.
 *
 * A watch refused for its token ("invalid auth token") is set up again
 * once with a renewed token, as a unary call is.
 */
#define _GNU_SOURCE
#include "etcd/etcd_wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* What one stream has come to, filled by the write callback. */
typedef struct stream {
    bl_etcd *c;
    char *buf;                 /* bytes of the current, incomplete line */
    size_t len, cap;
    int created;               /* etcd confirmed the watch */
    int stopped;               /* the caller's function said enough */
    int rc;                    /* an error the stream reported (0: none) */
    char why[400];
    int (*fn)(void *ctx, const bl_etcd_kv *kv);
    void *ctx;
} stream;

/* The longest line we keep: one watch response with its events. */
#define LINE_MAX_BYTES (64u << 20)

/* A canceled watch: why, as a code. */
static int cancel_code(const stream *s, const char *reason, int compacted)
{
    if (compacted || strstr(reason, "compacted") != NULL)
        return BL_ETCD_ECOMPACTED;
    if (strstr(reason, "invalid auth token") != NULL ||
        strstr(reason, "revision of auth store is old") != NULL)
        return s->c->user != NULL ? BL_EW_ETOKEN : BINDLOG_EACCES;
    if (strstr(reason, "permission denied") != NULL || strstr(reason, "user name is empty") != NULL)
        return BINDLOG_EACCES;
    return BINDLOG_EIO;
}

/* Handle one message of the stream.  Returns 0 to go on, 1 to stop. */
static int on_message(stream *s, json_object *o)
{
    json_object *res, *f;
    if (json_object_object_get_ex(o, "error", &f)) {
        json_object *m = NULL;
        const char *msg = "the gateway ended the watch";
        if (json_object_is_type(f, json_type_object) &&
            json_object_object_get_ex(f, "message", &m) && json_object_is_type(m, json_type_string))
            msg = json_object_get_string(m);
        snprintf(s->why, sizeof s->why, "%s", msg);
        s->rc = cancel_code(s, msg, 0);
        return 1;
    }
    if (!json_object_object_get_ex(o, "result", &res) || !json_object_is_type(res, json_type_object)) {
        snprintf(s->why, sizeof s->why, "a watch message without a result");
        s->rc = BINDLOG_EIO;
        return 1;
    }
    int canceled = 0, created = 0;
    int64_t compact = 0;
    if (bl_ew_get_bool(res, "canceled", &canceled) != 0 ||
        bl_ew_get_bool(res, "created", &created) != 0 ||
        bl_ew_get_i64(res, "compact_revision", &compact) != 0) {
        snprintf(s->why, sizeof s->why, "a malformed watch message");
        s->rc = BINDLOG_EIO;
        return 1;
    }
    if (canceled) {
        const char *reason = "";
        if (json_object_object_get_ex(res, "cancel_reason", &f) &&
            json_object_is_type(f, json_type_string))
            reason = json_object_get_string(f);
        snprintf(s->why, sizeof s->why, "etcd canceled the watch: %s",
                 reason[0] ? reason : compact ? "the revision was compacted" : "no reason");
        s->rc = cancel_code(s, reason, compact != 0);
        return 1;
    }
    s->created |= created;
    if (!json_object_object_get_ex(res, "events", &f))
        return 0;
    if (!json_object_is_type(f, json_type_array)) {
        snprintf(s->why, sizeof s->why, "a malformed watch event list");
        s->rc = BINDLOG_EIO;
        return 1;
    }
    for (size_t i = 0; i < json_object_array_length(f); i++) {
        json_object *ev = json_object_array_get_idx(f, i), *kvo;
        bl_etcd_kv kv;
        if (!json_object_is_type(ev, json_type_object) ||
            !json_object_object_get_ex(ev, "kv", &kvo)) {
            snprintf(s->why, sizeof s->why, "a watch event without a kv");
            s->rc = BINDLOG_EIO;
            return 1;
        }
        int rc = bl_ew_parse_kv(kvo, &kv);
        if (rc == 0 && s->fn(s->ctx, &kv) != 0)
            s->stopped = 1;
        free(kv.key);
        if (rc != 0) {
            snprintf(s->why, sizeof s->why, "a malformed key or value in a watch event");
            s->rc = rc;
            return 1;
        }
        if (s->stopped)
            return 1;
    }
    return 0;
}

/* curl's write callback: split the stream into lines, one message each.
 * Returning less than given makes curl stop (CURLE_WRITE_ERROR). */
/* cppcheck-suppress constParameter ; the type of curl's write callback */
static size_t on_stream(char *data, size_t size, size_t nmemb, void *ud)
{
    stream *s = ud;
    size_t n = size * nmemb;
    for (size_t i = 0; i < n; i++) {
        if (data[i] != '\n') {
            if (s->len + 1 >= s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 4096;
                char *grown = cap <= LINE_MAX_BYTES ? realloc(s->buf, cap) : NULL;
                if (grown == NULL) {
                    snprintf(s->why, sizeof s->why, "a watch message over %u bytes, or no memory",
                             LINE_MAX_BYTES);
                    s->rc = BINDLOG_ENOMEM;
                    return 0;
                }
                s->buf = grown;
                s->cap = cap;
            }
            s->buf[s->len++] = data[i];
            continue;
        }
        if (s->len == 0)
            continue;
        json_object *o = bl_ew_parse_json(s->buf, s->len);
        s->len = 0;
        if (o == NULL || !json_object_is_type(o, json_type_object)) {
            json_object_put(o);
            snprintf(s->why, sizeof s->why, "a watch message that is not JSON");
            s->rc = BINDLOG_EIO;
            return 0;
        }
        int stop = on_message(s, o);
        json_object_put(o);
        if (stop)
            return 0;
    }
    return n;
}

/* One stream on endpoint `ep`: 1 (stopped by fn), 0 (time is up, the watch
 * was set), or an error (BL_EW_ETOKEN to renew). */
static int watch_once(bl_etcd *c, const char *ep, const char *body, long timeout_ms,
                      int (*fn)(void *ctx, const bl_etcd_kv *kv), void *ctx)
{
    char url[BL_EW_HOSTPORT_MAX + 32], curl_err[CURL_ERROR_SIZE] = "";
    stream s;
    uint64_t gen;
    long http = 0;
    int rc;

    memset(&s, 0, sizeof s);
    s.c = c;
    s.fn = fn;
    s.ctx = ctx;
    struct curl_slist *hdrs = bl_ew_headers(c, &gen);
    CURL *h = hdrs != NULL ? bl_ew_handle_get(c) : NULL;
    if (h == NULL) {
        curl_slist_free_all(hdrs);
        bl_ew_error("etcd: out of memory");
        return BINDLOG_ENOMEM;
    }
    snprintf(url, sizeof url, "%s://%s/v3/watch", c->tls ? "https" : "http", ep);
    CURLcode cc = CURLE_FAILED_INIT;
    if (curl_easy_setopt(h, CURLOPT_URL, url) == CURLE_OK &&
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs) == CURLE_OK &&
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body) == CURLE_OK &&
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body)) == CURLE_OK &&
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_stream) == CURLE_OK &&
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &s) == CURLE_OK &&
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_err) == CURLE_OK &&
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                         c->connect_ms < timeout_ms ? c->connect_ms : timeout_ms) == CURLE_OK &&
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms) == CURLE_OK)
        cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);

    if (s.stopped) {
        rc = 1;
    } else if (s.rc != 0) {
        rc = s.rc;
        bl_ew_error("etcd %s/v3/watch: %s", ep, s.why);
    } else if (cc == CURLE_OPERATION_TIMEDOUT && s.created) {
        rc = 0; /* the time is up; the watch was there all along */
    } else {
        char why[400];
        if (cc == CURLE_OK)
            snprintf(why, sizeof why, "the stream ended (HTTP %ld)", http);
        else
            bl_ew_curl_reason(c, cc, curl_err, why, sizeof why);
        bl_ew_error("etcd %s/v3/watch: %s", ep, why);
        rc = BINDLOG_EIO;
    }
    /* a stream we cut has no reusable connection: do not pool the handle */
    if (rc == 1 || rc == 0)
        curl_easy_cleanup(h);
    else
        bl_ew_handle_put(c, h);
    curl_slist_free_all(hdrs);
    free(s.buf);
    if (rc == BL_EW_ETOKEN) {
        int arc = bl_ew_authenticate(c, 1, gen);
        if (arc != 0)
            return arc;
    }
    return rc;
}

int bl_etcd_watch(bl_etcd *c, const void *key, size_t key_len, int64_t start_revision,
                  long timeout_ms, int (*fn)(void *ctx, const bl_etcd_kv *kv), void *ctx)
{
    json_object *req = NULL, *cr = NULL;
    const char *body;
    int rc;

    bl_ew_error_clear();
    if (c == NULL || key == NULL || key_len == 0 || start_revision < 0 || timeout_ms <= 0 ||
        fn == NULL) {
        bl_ew_error("etcd: invalid argument: watch");
        return BINDLOG_EINVAL;
    }
    if ((rc = bl_ew_authenticate(c, 0, 0)) != 0)
        return rc;
    rc = BINDLOG_ENOMEM;
    if ((req = json_object_new_object()) == NULL || (cr = json_object_new_object()) == NULL ||
        bl_ew_add_bytes(cr, "key", key, key_len) != 0 ||
        (start_revision > 0 && bl_ew_add_i64(cr, "start_revision", start_revision) != 0))
        goto out;
    if (bl_ew_add_obj(req, "create_request", cr) != 0) {
        cr = NULL; /* freed by bl_ew_add_obj */
        goto out;
    }
    cr = NULL;
    if ((body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN)) == NULL)
        goto out;

    /* the endpoint that answered last, then the others, within the time
     * given; a token refused once is renewed and that endpoint tried again */
    pthread_mutex_lock(&c->mu);
    size_t start = c->good;
    pthread_mutex_unlock(&c->mu);
    char tried[1024] = "";
    long deadline = mono_ms() + timeout_ms;
    size_t i = 0;
    int renewed = 0;
    while (i < c->neps) {
        const char *ep = c->eps[(start + i) % c->neps];
        long left = deadline - mono_ms();
        if (left <= 0)
            break;
        rc = watch_once(c, ep, body, left, fn, ctx);
        if (rc == BL_EW_ETOKEN && !renewed) {
            renewed = 1;
            continue;
        }
        if (rc != BINDLOG_EIO)
            break;
        size_t used = strlen(tried);
        snprintf(tried + used, sizeof tried - used, "%s%s", used ? "; " : "",
                 bl_etcd_last_error());
        i++;
    }
    if (rc == BL_EW_ETOKEN)
        rc = BINDLOG_EACCES;
    if (rc == BINDLOG_EIO && c->neps > 1)
        bl_ew_error("etcd: no endpoint kept a watch: %s", tried);
out:
    json_object_put(cr);
    json_object_put(req);
    if (rc == BINDLOG_ENOMEM && bl_etcd_last_error()[0] == '\0')
        bl_ew_error("etcd: out of memory");
    return rc;
}
