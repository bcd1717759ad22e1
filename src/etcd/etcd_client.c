/*
 * etcd_client.c -- the etcd v3 JSON-gateway client (see etcd_client.h).
 *
 * Wire format, as etcd 3.4's grpc-gateway speaks it (proto3 JSON mapping):
 *  - POST http://HOST:PORT/v3/kv/{range,put,deleterange,txn,compaction} and
 *    /v3/maintenance/status, body and answer one JSON object each;
 *  - bytes fields (key, value, range_end) are base64, standard alphabet,
 *    padded;
 *  - int64/uint64 fields are JSON *strings* of decimal digits ("revision":
 *    "42"); we send numbers (the gateway accepts both) and accept only
 *    strings, parsed strictly;
 *  - fields with their zero value are left out ("more": false, "count": 0,
 *    an empty "kvs" are all absent), so absent means zero;
 *  - an error is {"error": "...", "message": "...", "code": N} with N a gRPC
 *    status code and an HTTP status derived from it (400, 429, 503, ...).
 */
#include "etcd/etcd_client.h"

#include <curl/curl.h>
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__GNUC__)
#define BL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define BL_PRINTF(a, b)
#endif

#define DEFAULT_CONNECT_MS 1000
#define DEFAULT_REQUEST_MS 5000
#define DEFAULT_ATTEMPT_MS 2000
#define BACKOFF_FIRST_MS 25
#define BACKOFF_MAX_MS 500
/* Longest answer we accept.  etcd's own gRPC limit on a response is far
 * lower by default; a bigger one is a misbehaving server, not data. */
#define MAX_RESPONSE (256u << 20)
#define HOSTPORT_MAX 262

/* gRPC status codes that etcd puts in "code". */
enum {
    GRPC_CANCELED = 1,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_DEADLINE_EXCEEDED = 4,
    GRPC_NOT_FOUND = 5,
    GRPC_PERMISSION_DENIED = 7,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_OUT_OF_RANGE = 11,
    GRPC_UNAVAILABLE = 14,
    GRPC_DATA_LOSS = 15,
    GRPC_UNAUTHENTICATED = 16
};

struct bl_etcd {
    char **eps;                 /* "host:port", neps of them */
    size_t neps;
    long connect_ms;
    long request_ms;
    long attempt_ms;
    unsigned max_ops;
    struct curl_slist *headers; /* shared read-only by every easy handle */
    pthread_mutex_t mu;         /* guards idle[], nidle, good */
    CURL **idle;                /* easy handles not in use */
    size_t nidle;
    size_t idle_cap;
    size_t good;                /* endpoint that answered last */
};

/* ---- errors --------------------------------------------------------------- */

static _Thread_local char last_error[1536];

const char *bl_etcd_last_error(void)
{
    return last_error;
}

static void set_error(const char *fmt, ...) BL_PRINTF(1, 2);
static void set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): va_start is right above */
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

/* Append to a bounded string buffer; a full buffer ends in "...". */
static void append(char *buf, size_t cap, const char *fmt, ...) BL_PRINTF(3, 4);
static void append(char *buf, size_t cap, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;
    int n;
    if (used + 1 >= cap)
        return;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): va_start is right above */
    n = vsnprintf(buf + used, cap - used, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= cap - used && cap >= 4)
        memcpy(buf + cap - 4, "...", 4);
}

/* ---- base64 ---------------------------------------------------------------- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t bl_etcd_b64_encoded_len(size_t len)
{
    return (len + 2) / 3 * 4;
}

size_t bl_etcd_b64_encode(const void *in, size_t len, char *out)
{
    const unsigned char *p = in;
    size_t i, o = 0;
    for (i = 0; i + 3 <= len; i += 3) {
        unsigned long v = (unsigned long)p[i] << 16 | (unsigned long)p[i + 1] << 8 | p[i + 2];
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = b64_alphabet[v >> 6 & 63];
        out[o++] = b64_alphabet[v & 63];
    }
    if (len - i == 1) {
        unsigned long v = (unsigned long)p[i] << 16;
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (len - i == 2) {
        unsigned long v = (unsigned long)p[i] << 16 | (unsigned long)p[i + 1] << 8;
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = b64_alphabet[v >> 6 & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
    return o;
}

static int b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

int bl_etcd_b64_decode(const char *in, size_t len, unsigned char *out, size_t *out_len)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t i, o = 0;
    if (len % 4 != 0)
        return BINDLOG_ECORRUPT;
    for (i = 0; i < len; i += 4) {
        int last = i + 4 == len;
        int a = b64_value(p[i]), b = b64_value(p[i + 1]);
        int c = b64_value(p[i + 2]), d = b64_value(p[i + 3]);
        if (a < 0 || b < 0)
            return BINDLOG_ECORRUPT;
        if (c < 0 || d < 0) {
            /* Padding: only in the last quantum, "xx==" or "xxx=", and the
             * bits it leaves unused must be zero (one encoding per input). */
            if (!last || p[i + 3] != '=')
                return BINDLOG_ECORRUPT;
            if (c < 0) {
                if (p[i + 2] != '=' || (b & 15) != 0)
                    return BINDLOG_ECORRUPT;
                out[o++] = (unsigned char)(a << 2 | b >> 4);
            } else {
                if ((c & 3) != 0)
                    return BINDLOG_ECORRUPT;
                out[o++] = (unsigned char)(a << 2 | b >> 4);
                out[o++] = (unsigned char)((b & 15) << 4 | c >> 2);
            }
            break;
        }
        out[o++] = (unsigned char)(a << 2 | b >> 4);
        out[o++] = (unsigned char)((b & 15) << 4 | c >> 2);
        out[o++] = (unsigned char)((c & 3) << 6 | d);
    }
    *out_len = o;
    return 0;
}

size_t bl_etcd_prefix_end(const void *prefix, size_t len, unsigned char *out)
{
    const unsigned char *p = prefix;
    size_t i = len;
    while (i > 0 && p[i - 1] == 0xff)
        i--;
    if (i == 0) {
        out[0] = 0;
        return 1;
    }
    memcpy(out, p, i);
    out[i - 1]++;
    return i;
}

/* ---- opening and closing ---------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_ALL);
}

/* Validate one endpoint, [http://]host:port, and copy "host:port" to out. */
static int parse_endpoint(const char *s, size_t len, char out[HOSTPORT_MAX + 1])
{
    size_t i, colon;
    unsigned long port = 0;
    while (len > 0 && (*s == ' ' || *s == '\t'))
        s++, len--;
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    if (len >= 7 && memcmp(s, "http://", 7) == 0)
        s += 7, len -= 7;
    if (len > 0 && s[len - 1] == '/')
        len--;
    if (len == 0 || len > HOSTPORT_MAX)
        return BINDLOG_EINVAL;
    colon = len;
    while (colon > 0 && s[colon - 1] != ':')
        colon--;
    if (colon < 2 || colon == len || len - colon > 5)
        return BINDLOG_EINVAL;
    for (i = colon; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return BINDLOG_EINVAL;
        port = port * 10 + (unsigned long)(s[i] - '0');
    }
    if (port == 0 || port > 65535)
        return BINDLOG_EINVAL;
    if (s[0] == '[') {
        if (s[colon - 2] != ']' || colon < 4)
            return BINDLOG_EINVAL;
        for (i = 1; i < colon - 2; i++)
            if (!strchr("0123456789abcdefABCDEF:.", s[i]))
                return BINDLOG_EINVAL;
    } else {
        for (i = 0; i < colon - 1; i++) {
            char ch = s[i];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_'))
                return BINDLOG_EINVAL;
        }
    }
    memcpy(out, s, len);
    out[len] = '\0';
    return 0;
}

int bl_etcd_open(const char *endpoints, const bl_etcd_options *o, bl_etcd **out)
{
    bl_etcd *c = NULL;
    const char *p;
    int rc = BINDLOG_ENOMEM;

    if (out == NULL)
        return BINDLOG_EINVAL;
    *out = NULL;
    last_error[0] = '\0';
    if (endpoints == NULL || *endpoints == '\0') {
        set_error("etcd: no endpoints given");
        return BINDLOG_EINVAL;
    }
    if (o != NULL && (o->version != BL_ETCD_OPTIONS_VERSION || o->connect_timeout_ms < 0 ||
                      o->request_timeout_ms < 0 || o->attempt_timeout_ms < 0)) {
        set_error("etcd: bad options");
        return BINDLOG_EINVAL;
    }
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        set_error("etcd: curl_global_init failed: %s", curl_easy_strerror(curl_init_rc));
        return BINDLOG_EIO;
    }

    c = calloc(1, sizeof *c);
    if (c == NULL)
        goto out;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        c = NULL;
        goto out;
    }
    c->connect_ms = o && o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_CONNECT_MS;
    c->request_ms = o && o->request_timeout_ms ? o->request_timeout_ms : DEFAULT_REQUEST_MS;
    c->attempt_ms = o && o->attempt_timeout_ms ? o->attempt_timeout_ms : DEFAULT_ATTEMPT_MS;
    c->max_ops = o && o->max_txn_ops ? o->max_txn_ops : BL_ETCD_DEFAULT_MAX_TXN_OPS;

    for (p = endpoints;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char hostport[HOSTPORT_MAX + 1];
        char **grown;
        if (len >= 8 && memcmp(p, "https://", 8) == 0) {
            set_error("etcd: endpoint \"%.*s\": https is not supported", (int)len, p);
            rc = BINDLOG_EINVAL;
            goto out;
        }
        if (parse_endpoint(p, len, hostport) != 0) {
            set_error("etcd: bad endpoint \"%.*s\" (want host:port)", (int)(len > 300 ? 300 : len),
                      p);
            rc = BINDLOG_EINVAL;
            goto out;
        }
        grown = realloc(c->eps, (c->neps + 1) * sizeof *grown);
        if (grown == NULL)
            goto out;
        c->eps = grown;
        c->eps[c->neps] = strdup(hostport);
        if (c->eps[c->neps] == NULL)
            goto out;
        c->neps++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }

    {
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
        if (h == NULL)
            goto out;
        c->headers = h;
        /* No "Expect: 100-continue" round trip before bodies over 1 KiB. */
        h = curl_slist_append(c->headers, "Expect:");
        if (h == NULL)
            goto out;
        c->headers = h;
    }
    *out = c;
    c = NULL;
    rc = 0;
out:
    if (rc == BINDLOG_ENOMEM)
        set_error("etcd: out of memory");
    bl_etcd_close(c);
    return rc;
}

void bl_etcd_close(bl_etcd *c)
{
    size_t i;
    if (c == NULL)
        return;
    for (i = 0; i < c->nidle; i++)
        curl_easy_cleanup(c->idle[i]);
    free(c->idle);
    for (i = 0; i < c->neps; i++)
        free(c->eps[i]);
    free(c->eps);
    curl_slist_free_all(c->headers);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

unsigned bl_etcd_max_txn_ops(const bl_etcd *c)
{
    return c->max_ops;
}

/* ---- HTTP ----------------------------------------------------------------- */

typedef struct body {
    char *p;
    size_t len;
    size_t cap;
    int too_big;
} body;

static size_t on_data(char *data, size_t size, size_t nmemb, void *ud)
{
    body *b = ud;
    size_t n = size * nmemb;
    if (n > MAX_RESPONSE - b->len) {
        b->too_big = 1;
        return 0;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        char *grown;
        while (cap < b->len + n + 1)
            cap *= 2;
        grown = realloc(b->p, cap);
        if (grown == NULL)
            return 0;
        b->p = grown;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return n;
}

/* An easy handle from the pool, or a new one set up for this client. */
static CURL *handle_get(bl_etcd *c)
{
    CURL *h = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->nidle > 0)
        h = c->idle[--c->nidle];
    pthread_mutex_unlock(&c->mu);
    if (h != NULL)
        return h;
    h = curl_easy_init();
    if (h == NULL)
        return NULL;
    /* Threads: no signals for timeouts.  Endpoints are contacted directly,
     * never through a proxy from the environment, and only over http. */
    if (curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_PROXY, "") != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http") != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, c->headers) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_POST, 1L) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1) != CURLE_OK) {
        curl_easy_cleanup(h);
        return NULL;
    }
    return h;
}

static void handle_put(bl_etcd *c, CURL *h)
{
    pthread_mutex_lock(&c->mu);
    if (c->nidle == c->idle_cap) {
        size_t cap = c->idle_cap ? c->idle_cap * 2 : 4;
        CURL **grown = realloc(c->idle, cap * sizeof *grown);
        if (grown == NULL) {
            pthread_mutex_unlock(&c->mu);
            curl_easy_cleanup(h);
            return;
        }
        c->idle = grown;
        c->idle_cap = cap;
    }
    c->idle[c->nidle++] = h;
    pthread_mutex_unlock(&c->mu);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* What one attempt on one endpoint came to. */
enum attempt_kind {
    ATTEMPT_OK,     /* a 2xx JSON object: *resp set */
    ATTEMPT_FINAL,  /* a definite answer (an etcd error, a bad response): stop */
    ATTEMPT_DOWN,   /* endpoint unreachable: try the next one */
    ATTEMPT_BUSY    /* endpoint alive but unable to serve now: next, then again */
};

/* Parse a complete JSON text strictly (no trailing bytes); NULL on error. */
static json_object *parse_json(const char *text, size_t len)
{
    json_tokener *tok;
    json_object *o;
    if (len > INT_MAX)
        return NULL;
    tok = json_tokener_new();
    if (tok == NULL)
        return NULL;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    o = json_tokener_parse_ex(tok, text, (int)len);
    if (o != NULL && (json_tokener_get_error(tok) != json_tokener_success ||
                      json_tokener_get_parse_end(tok) != len)) {
        json_object_put(o);
        o = NULL;
    }
    json_tokener_free(tok);
    return o;
}

/* Classify an etcd error object {"error", "message", "code"}.  Sets *rc and
 * writes the reason to why[]. */
static enum attempt_kind classify_error(json_object *err, long http, int *rc, char *why,
                                        size_t why_cap)
{
    json_object *code_o = NULL, *msg_o = NULL;
    const char *msg = "";
    int code;

    if (!json_object_object_get_ex(err, "code", &code_o) ||
        !json_object_is_type(code_o, json_type_int)) {
        snprintf(why, why_cap, "HTTP %ld", http);
        *rc = BINDLOG_EIO;
        return http >= 500 ? ATTEMPT_BUSY : ATTEMPT_DOWN;
    }
    code = json_object_get_int(code_o);
    if ((json_object_object_get_ex(err, "error", &msg_o) ||
         json_object_object_get_ex(err, "message", &msg_o)) &&
        json_object_is_type(msg_o, json_type_string))
        msg = json_object_get_string(msg_o);
    snprintf(why, why_cap, "%s (gRPC code %d, HTTP %ld)", msg, code, http);

    switch (code) {
    case GRPC_CANCELED:
    case GRPC_DEADLINE_EXCEEDED:
    case GRPC_UNAVAILABLE:
        *rc = BINDLOG_EIO;
        return ATTEMPT_BUSY;
    case GRPC_RESOURCE_EXHAUSTED:
        if (strstr(msg, "too many requests") != NULL) {
            *rc = BINDLOG_EIO;
            return ATTEMPT_BUSY;
        }
        *rc = BINDLOG_ENOSPC;
        return ATTEMPT_FINAL;
    case GRPC_OUT_OF_RANGE:
        *rc = strstr(msg, "compacted") != NULL ? BL_ETCD_ECOMPACTED : BINDLOG_EINVAL;
        return ATTEMPT_FINAL;
    case GRPC_INVALID_ARGUMENT:
        *rc = BINDLOG_EINVAL;
        return ATTEMPT_FINAL;
    case GRPC_NOT_FOUND:
        *rc = BINDLOG_ENOTFOUND;
        return ATTEMPT_FINAL;
    case GRPC_PERMISSION_DENIED:
    case GRPC_UNAUTHENTICATED:
        *rc = BINDLOG_EACCES;
        return ATTEMPT_FINAL;
    case GRPC_DATA_LOSS:
        *rc = BINDLOG_ECORRUPT;
        return ATTEMPT_FINAL;
    default:
        *rc = BINDLOG_EIO;
        return ATTEMPT_FINAL;
    }
}

/* One POST of `json` to endpoint `ep`, within `budget_ms`. */
static enum attempt_kind attempt(bl_etcd *c, CURL *h, const char *ep, const char *path,
                                 const char *json, size_t json_len, long budget_ms,
                                 json_object **resp, int *rc, int *sent, char *why,
                                 size_t why_cap)
{
    char url[HOSTPORT_MAX + 64];
    char curl_err[CURL_ERROR_SIZE];
    body b = { NULL, 0, 0, 0 };
    long http = 0, req_size = 0;
    curl_off_t connect_us = 0;
    CURLcode cc;
    enum attempt_kind kind;
    json_object *o = NULL;

    *resp = NULL;
    *sent = 0;
    snprintf(url, sizeof url, "http://%s%s", ep, path);
    curl_err[0] = '\0';
    if (curl_easy_setopt(h, CURLOPT_URL, url) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, json) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)json_len) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_err) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                         c->connect_ms < budget_ms ? c->connect_ms : budget_ms) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, budget_ms) != CURLE_OK) {
        snprintf(why, why_cap, "curl_easy_setopt failed");
        *rc = BINDLOG_EIO;
        return ATTEMPT_FINAL;
    }
    cc = curl_easy_perform(h);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http);
    curl_easy_getinfo(h, CURLINFO_REQUEST_SIZE, &req_size);
    curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connect_us);

    if (cc != CURLE_OK) {
        const char *msg = curl_err[0] ? curl_err : curl_easy_strerror(cc);
        snprintf(why, why_cap, "%s", msg);
        *rc = BINDLOG_EIO;
        if (b.too_big) {
            snprintf(why, why_cap, "response over %u bytes", MAX_RESPONSE);
            kind = ATTEMPT_FINAL;
        } else if (cc == CURLE_WRITE_ERROR) {
            *rc = BINDLOG_ENOMEM;
            kind = ATTEMPT_FINAL;
        } else if (cc == CURLE_OPERATION_TIMEDOUT && connect_us > 0) {
            /* Connected, then no (complete) answer in time. */
            *sent = req_size > 0;
            kind = ATTEMPT_BUSY;
        } else {
            /* Refused, unresolvable, connect timeout, reset, closed. */
            *sent = req_size > 0;
            kind = ATTEMPT_DOWN;
        }
        goto out;
    }

    o = b.p ? parse_json(b.p, b.len) : NULL;
    if (http >= 200 && http < 300) {
        if (o == NULL || !json_object_is_type(o, json_type_object)) {
            snprintf(why, why_cap, "malformed response (HTTP %ld, %zu bytes)", http, b.len);
            *rc = BINDLOG_EIO;
            kind = ATTEMPT_FINAL;
            goto out;
        }
        *resp = o;
        o = NULL;
        kind = ATTEMPT_OK;
        goto out;
    }
    if (o != NULL && json_object_is_type(o, json_type_object)) {
        kind = classify_error(o, http, rc, why, why_cap);
    } else {
        /* Not etcd's gateway speaking: a 5xx from something in between is
         * worth another try; anything else means the wrong service. */
        snprintf(why, why_cap, "HTTP %ld without an etcd error body", http);
        *rc = BINDLOG_EIO;
        kind = http >= 500 ? ATTEMPT_BUSY : ATTEMPT_DOWN;
    }
    if (kind != ATTEMPT_FINAL)
        *sent = 1;
out:
    json_object_put(o);
    free(b.p);
    return kind;
}

/*
 * POST `req` to `path` with failover (see the top of etcd_client.h).  On
 * success *resp is the answer (caller puts it).  *retried (may be NULL) is
 * set if the request was sent again after an attempt with unknown outcome;
 * *used (may be NULL) is the index of the endpoint that answered.
 */
static int call(bl_etcd *c, const char *path, json_object *req, json_object **resp, int *retried,
                size_t *used)
{
    const char *json;
    size_t json_len;
    CURL *h;
    long deadline = now_ms() + c->request_ms, backoff = BACKOFF_FIRST_MS;
    size_t start, i, pass = 0;
    int rc = BINDLOG_EIO, maybe_applied = 0;
    char tried[1024] = "", why[320] = "", last_why[600] = "";

    *resp = NULL;
    if (retried)
        *retried = 0;
    json = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    if (json == NULL) {
        set_error("etcd: out of memory");
        return BINDLOG_ENOMEM;
    }
    json_len = strlen(json);
    h = handle_get(c);
    if (h == NULL) {
        set_error("etcd: cannot make a curl handle");
        return BINDLOG_ENOMEM;
    }
    pthread_mutex_lock(&c->mu);
    start = c->good;
    pthread_mutex_unlock(&c->mu);

    for (;;) {
        int any_busy = 0;
        pass++;
        for (i = 0; i < c->neps; i++) {
            size_t e = (start + i) % c->neps;
            long left = deadline - now_ms();
            int sent = 0;
            enum attempt_kind k;
            if (left <= 0)
                goto timed_out;
            if (maybe_applied && retried)
                *retried = 1;
            k = attempt(c, h, c->eps[e], path, json, json_len,
                        left < c->attempt_ms ? left : c->attempt_ms, resp, &rc, &sent, why,
                        sizeof why);
            if (k == ATTEMPT_OK || k == ATTEMPT_FINAL) {
                pthread_mutex_lock(&c->mu);
                c->good = e;
                pthread_mutex_unlock(&c->mu);
                if (used)
                    *used = e;
                if (k == ATTEMPT_OK) {
                    rc = 0;
                    last_error[0] = '\0';
                } else {
                    set_error("etcd %s%s: %s", c->eps[e], path, why);
                }
                goto out;
            }
            maybe_applied |= sent;
            any_busy |= k == ATTEMPT_BUSY;
            if (pass == 1)
                append(tried, sizeof tried, "%s%s (%s)", i ? ", " : "", c->eps[e], why);
            snprintf(last_why, sizeof last_why, "%s: %s", c->eps[e], why);
        }
        /* Nobody home: fail now rather than wait for the deadline. */
        if (!any_busy)
            break;
        if (now_ms() + backoff >= deadline)
            goto timed_out;
        sleep_ms(backoff);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    rc = BINDLOG_EIO;
    set_error("etcd: no endpoint answered %s; tried %s", path, tried);
    goto out;
timed_out:
    rc = BINDLOG_EIO;
    set_error("etcd: no endpoint could serve %s within %ld ms (%zu round%s); tried %s; last: %s",
              path, c->request_ms, pass, pass == 1 ? "" : "s", tried[0] ? tried : "none",
              last_why[0] ? last_why : "no attempt");
out:
    handle_put(c, h);
    return rc;
}

/* ---- JSON helpers ------------------------------------------------------------ */

/* Add `name`: base64 of [p, p+len). */
static int add_bytes(json_object *o, const char *name, const void *p, size_t len)
{
    size_t n;
    char *enc;
    json_object *s;
    if (len > (size_t)INT_MAX / 4 * 3 - 3)
        return BINDLOG_EINVAL;
    n = bl_etcd_b64_encoded_len(len);
    enc = malloc(n + 1);
    if (enc == NULL)
        return BINDLOG_ENOMEM;
    bl_etcd_b64_encode(p, len, enc);
    s = json_object_new_string_len(enc, (int)n);
    free(enc);
    if (s == NULL)
        return BINDLOG_ENOMEM;
    if (json_object_object_add(o, name, s) != 0) {
        json_object_put(s);
        return BINDLOG_ENOMEM;
    }
    return 0;
}

static int add_obj(json_object *o, const char *name, json_object *v)
{
    if (v == NULL)
        return BINDLOG_ENOMEM;
    if (json_object_object_add(o, name, v) != 0) {
        json_object_put(v);
        return BINDLOG_ENOMEM;
    }
    return 0;
}

static int add_i64(json_object *o, const char *name, int64_t v)
{
    return add_obj(o, name, json_object_new_int64(v));
}

static int add_bool(json_object *o, const char *name, int v)
{
    return add_obj(o, name, json_object_new_boolean(v ? 1 : 0));
}

static int add_str(json_object *o, const char *name, const char *v)
{
    return add_obj(o, name, json_object_new_string(v));
}

/* A strictly decimal int64/uint64 carried as a JSON string.  Absent is 0. */
static int get_u64(json_object *o, const char *name, uint64_t *v)
{
    json_object *f;
    const char *s;
    int len, i;
    uint64_t x = 0;
    *v = 0;
    if (!json_object_object_get_ex(o, name, &f))
        return 0;
    if (!json_object_is_type(f, json_type_string))
        return BINDLOG_EIO;
    s = json_object_get_string(f);
    len = json_object_get_string_len(f);
    if (len == 0 || len > 20 || (len > 1 && s[0] == '0'))
        return BINDLOG_EIO;
    for (i = 0; i < len; i++) {
        unsigned d;
        if (s[i] < '0' || s[i] > '9')
            return BINDLOG_EIO;
        d = (unsigned)(s[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return BINDLOG_EIO;
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}

/* The same for a signed field; etcd's revisions, versions and counts are
 * never negative, so a '-' is refused too. */
static int get_i64(json_object *o, const char *name, int64_t *v)
{
    uint64_t u;
    int rc = get_u64(o, name, &u);
    *v = 0;
    if (rc != 0)
        return rc;
    if (u > INT64_MAX)
        return BINDLOG_EIO;
    *v = (int64_t)u;
    return 0;
}

/* A JSON boolean; absent is false. */
static int get_bool(json_object *o, const char *name, int *v)
{
    json_object *f;
    *v = 0;
    if (!json_object_object_get_ex(o, name, &f))
        return 0;
    if (!json_object_is_type(f, json_type_boolean))
        return BINDLOG_EIO;
    *v = json_object_get_boolean(f) ? 1 : 0;
    return 0;
}

/* The revision in {"header": {"revision": "N"}}; the header is required. */
static int get_header_revision(json_object *o, int64_t *rev)
{
    json_object *hd;
    if (!json_object_object_get_ex(o, "header", &hd) || !json_object_is_type(hd, json_type_object))
        return BINDLOG_EIO;
    return get_i64(hd, "revision", rev);
}

/* Decode the base64 string field `name` (absent: empty) into a fresh buffer
 * at dst (room for its decoded length) and set *len. */
static int get_b64(json_object *o, const char *name, unsigned char *dst, size_t *len)
{
    json_object *f;
    *len = 0;
    if (!json_object_object_get_ex(o, name, &f))
        return 0;
    if (!json_object_is_type(f, json_type_string))
        return BINDLOG_EIO;
    return bl_etcd_b64_decode(json_object_get_string(f), (size_t)json_object_get_string_len(f),
                              dst, len);
}

static size_t b64_field_max(json_object *o, const char *name)
{
    json_object *f;
    if (!json_object_object_get_ex(o, name, &f) || !json_object_is_type(f, json_type_string))
        return 0;
    return (size_t)json_object_get_string_len(f) / 4 * 3;
}

static int parse_kv(json_object *o, bl_etcd_kv *kv)
{
    size_t kmax, vmax;
    int rc;
    memset(kv, 0, sizeof *kv);
    if (!json_object_is_type(o, json_type_object))
        return BINDLOG_EIO;
    kmax = b64_field_max(o, "key");
    vmax = b64_field_max(o, "value");
    kv->key = malloc(kmax + vmax + 2);
    if (kv->key == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = get_b64(o, "key", kv->key, &kv->key_len)) != 0)
        return rc;
    kv->key[kv->key_len] = '\0';
    kv->value = kv->key + kv->key_len + 1;
    if ((rc = get_b64(o, "value", kv->value, &kv->value_len)) != 0)
        return rc;
    kv->value[kv->value_len] = '\0';
    if (kv->key_len == 0)
        return BINDLOG_EIO;
    if ((rc = get_i64(o, "create_revision", &kv->create_revision)) != 0 ||
        (rc = get_i64(o, "mod_revision", &kv->mod_revision)) != 0 ||
        (rc = get_i64(o, "version", &kv->version)) != 0)
        return rc;
    return 0;
}

void bl_etcd_kvs_free(bl_etcd_kvs *kvs)
{
    size_t i;
    if (kvs == NULL)
        return;
    for (i = 0; i < kvs->n; i++)
        free(kvs->kvs[i].key);
    free(kvs->kvs);
    memset(kvs, 0, sizeof *kvs);
}

/* A RangeResponse into out (zeroed first; partly filled on error). */
static int parse_range(json_object *o, bl_etcd_kvs *out)
{
    json_object *arr;
    size_t i, n;
    int rc;
    memset(out, 0, sizeof *out);
    if ((rc = get_header_revision(o, &out->revision)) != 0 ||
        (rc = get_bool(o, "more", &out->more)) != 0 || (rc = get_i64(o, "count", &out->count)) != 0)
        return rc;
    if (!json_object_object_get_ex(o, "kvs", &arr))
        return 0;
    if (!json_object_is_type(arr, json_type_array))
        return BINDLOG_EIO;
    n = json_object_array_length(arr);
    if (n == 0)
        return 0;
    out->kvs = calloc(n, sizeof *out->kvs);
    if (out->kvs == NULL)
        return BINDLOG_ENOMEM;
    for (i = 0; i < n; i++) {
        rc = parse_kv(json_object_array_get_idx(arr, i), &out->kvs[i]);
        out->n = i + 1; /* so that bl_etcd_kvs_free frees this one too */
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* A parse failure of an answer that came back 200: say what and where. */
static int bad_answer(int rc, const char *what)
{
    if (rc == BINDLOG_ENOMEM)
        set_error("etcd: out of memory reading %s", what);
    else if (rc == BINDLOG_ECORRUPT)
        set_error("etcd: %s: invalid base64 from the server", what);
    else
        set_error("etcd: %s: malformed answer from the server", what);
    return rc;
}

/* Fill a RangeRequest body. */
static int build_range(json_object *r, const void *key, size_t key_len, const void *range_end,
                       size_t range_end_len, int64_t revision, int64_t limit, int flags)
{
    int rc;
    if ((rc = add_bytes(r, "key", key, key_len)) != 0)
        return rc;
    if (range_end != NULL && (rc = add_bytes(r, "range_end", range_end, range_end_len)) != 0)
        return rc;
    if (limit > 0 && (rc = add_i64(r, "limit", limit)) != 0)
        return rc;
    if (revision > 0 && (rc = add_i64(r, "revision", revision)) != 0)
        return rc;
    if ((flags & BL_ETCD_SORT_DESCEND) &&
        ((rc = add_str(r, "sort_order", "DESCEND")) != 0 ||
         (rc = add_str(r, "sort_target", "KEY")) != 0))
        return rc;
    if ((flags & BL_ETCD_SERIALIZABLE) && (rc = add_bool(r, "serializable", 1)) != 0)
        return rc;
    if ((flags & BL_ETCD_KEYS_ONLY) && (rc = add_bool(r, "keys_only", 1)) != 0)
        return rc;
    if ((flags & BL_ETCD_COUNT_ONLY) && (rc = add_bool(r, "count_only", 1)) != 0)
        return rc;
    return 0;
}

#define RANGE_FLAGS \
    (BL_ETCD_KEYS_ONLY | BL_ETCD_COUNT_ONLY | BL_ETCD_SERIALIZABLE | BL_ETCD_SORT_DESCEND)

static int bad_arg(const char *what)
{
    set_error("etcd: invalid argument: %s", what);
    return BINDLOG_EINVAL;
}

/* ---- the calls ----------------------------------------------------------------- */

int bl_etcd_range(bl_etcd *c, const void *key, size_t key_len, const void *range_end,
                  size_t range_end_len, int64_t revision, int64_t limit, int flags,
                  bl_etcd_kvs *out)
{
    json_object *req = NULL, *resp = NULL;
    int rc;
    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (c == NULL || out == NULL || key == NULL || key_len == 0)
        return bad_arg("range: NULL client, result or key, or empty key");
    if ((range_end == NULL) != (range_end_len == 0) || revision < 0 || limit < 0 ||
        (flags & ~RANGE_FLAGS) != 0)
        return bad_arg("range: bad range_end, revision, limit or flags");
    req = json_object_new_object();
    if (req == NULL)
        return BINDLOG_ENOMEM;
    rc = build_range(req, key, key_len, range_end, range_end_len, revision, limit, flags);
    if (rc != 0)
        goto out;
    rc = call(c, "/v3/kv/range", req, &resp, NULL, NULL);
    if (rc != 0)
        goto out;
    rc = parse_range(resp, out);
    if (rc != 0) {
        bl_etcd_kvs_free(out);
        rc = bad_answer(rc, "range");
    }
out:
    json_object_put(req);
    json_object_put(resp);
    return rc;
}

int bl_etcd_put(bl_etcd *c, const void *key, size_t key_len, const void *value,
                size_t value_len, int64_t *revision)
{
    json_object *req = NULL, *resp = NULL;
    int64_t rev = 0;
    int rc;
    if (revision)
        *revision = 0;
    if (c == NULL || key == NULL || key_len == 0 || (value == NULL && value_len != 0))
        return bad_arg("put: NULL client or key, empty key, or NULL value");
    req = json_object_new_object();
    if (req == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = add_bytes(req, "key", key, key_len)) != 0 ||
        (rc = add_bytes(req, "value", value ? value : "", value_len)) != 0)
        goto out;
    if ((rc = call(c, "/v3/kv/put", req, &resp, NULL, NULL)) != 0)
        goto out;
    if ((rc = get_header_revision(resp, &rev)) != 0) {
        rc = bad_answer(rc, "put");
        goto out;
    }
    if (revision)
        *revision = rev;
out:
    json_object_put(req);
    json_object_put(resp);
    return rc;
}

int bl_etcd_delete_range(bl_etcd *c, const void *key, size_t key_len, const void *range_end,
                         size_t range_end_len, int64_t *deleted, int64_t *revision)
{
    json_object *req = NULL, *resp = NULL;
    int64_t rev = 0, del = 0;
    int rc;
    if (deleted)
        *deleted = 0;
    if (revision)
        *revision = 0;
    if (c == NULL || key == NULL || key_len == 0 || (range_end == NULL) != (range_end_len == 0))
        return bad_arg("delete_range: NULL client or key, empty key, or bad range_end");
    req = json_object_new_object();
    if (req == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = add_bytes(req, "key", key, key_len)) != 0 ||
        (range_end && (rc = add_bytes(req, "range_end", range_end, range_end_len)) != 0))
        goto out;
    if ((rc = call(c, "/v3/kv/deleterange", req, &resp, NULL, NULL)) != 0)
        goto out;
    if ((rc = get_header_revision(resp, &rev)) != 0 || (rc = get_i64(resp, "deleted", &del)) != 0) {
        rc = bad_answer(rc, "deleterange");
        goto out;
    }
    if (deleted)
        *deleted = del;
    if (revision)
        *revision = rev;
out:
    json_object_put(req);
    json_object_put(resp);
    return rc;
}

/* ---- Txn ----------------------------------------------------------------------- */

static int build_cmp(const bl_etcd_cmp *cm, json_object **out)
{
    static const char *const targets[] = { "VERSION", "CREATE", "MOD", "VALUE" };
    static const char *const results[] = { "EQUAL", "GREATER", "LESS", "NOT_EQUAL" };
    static const char *const fields[] = { "version", "create_revision", "mod_revision" };
    json_object *o;
    int rc;
    *out = NULL;
    if (cm->target < 0 || cm->target > BL_ETCD_CMP_VALUE || cm->result < 0 ||
        cm->result > BL_ETCD_NOT_EQUAL || cm->key == NULL || cm->key_len == 0 ||
        (cm->range_end == NULL) != (cm->range_end_len == 0) ||
        (cm->target == BL_ETCD_CMP_VALUE && cm->value == NULL && cm->value_len != 0))
        return bad_arg("txn: bad compare");
    o = json_object_new_object();
    if (o == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = add_str(o, "target", targets[cm->target])) != 0 ||
        (rc = add_str(o, "result", results[cm->result])) != 0 ||
        (rc = add_bytes(o, "key", cm->key, cm->key_len)) != 0 ||
        (cm->range_end && (rc = add_bytes(o, "range_end", cm->range_end, cm->range_end_len)) != 0))
        goto fail;
    if (cm->target == BL_ETCD_CMP_VALUE)
        rc = add_bytes(o, "value", cm->value ? cm->value : "", cm->value_len);
    else
        rc = add_i64(o, fields[cm->target], cm->number);
    if (rc != 0)
        goto fail;
    *out = o;
    return 0;
fail:
    json_object_put(o);
    return rc;
}

static int build_op(const bl_etcd_op *op, json_object **out)
{
    json_object *o = NULL, *r = NULL;
    const char *name;
    int rc;
    *out = NULL;
    if (op->key == NULL || op->key_len == 0 || (op->range_end == NULL) != (op->range_end_len == 0))
        return bad_arg("txn: op without key or with a bad range_end");
    r = json_object_new_object();
    if (r == NULL)
        return BINDLOG_ENOMEM;
    switch (op->type) {
    case BL_ETCD_OP_RANGE:
        name = "request_range";
        if (op->limit < 0 || (op->flags & ~(RANGE_FLAGS & ~BL_ETCD_SERIALIZABLE)) != 0) {
            rc = bad_arg("txn: bad range op limit or flags");
            goto fail;
        }
        rc = build_range(r, op->key, op->key_len, op->range_end, op->range_end_len, 0, op->limit,
                         op->flags);
        break;
    case BL_ETCD_OP_PUT:
        name = "request_put";
        if (op->value == NULL && op->value_len != 0) {
            rc = bad_arg("txn: put op with a NULL value");
            goto fail;
        }
        if ((rc = add_bytes(r, "key", op->key, op->key_len)) == 0)
            rc = add_bytes(r, "value", op->value ? op->value : "", op->value_len);
        break;
    case BL_ETCD_OP_DELETE:
        name = "request_delete_range";
        if ((rc = add_bytes(r, "key", op->key, op->key_len)) == 0 && op->range_end)
            rc = add_bytes(r, "range_end", op->range_end, op->range_end_len);
        break;
    default:
        rc = bad_arg("txn: unknown op type");
        goto fail;
    }
    if (rc != 0)
        goto fail;
    o = json_object_new_object();
    if (o == NULL) {
        rc = BINDLOG_ENOMEM;
        goto fail;
    }
    rc = add_obj(o, name, r);
    r = NULL;
    if (rc != 0)
        goto fail;
    *out = o;
    return 0;
fail:
    json_object_put(r);
    json_object_put(o);
    return rc;
}

static int build_ops(json_object *req, const char *name, const bl_etcd_op *ops, size_t n)
{
    json_object *arr;
    size_t i;
    int rc;
    if (n == 0)
        return 0;
    arr = json_object_new_array_ext((int)n);
    if (arr == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = add_obj(req, name, arr)) != 0)
        return rc;
    for (i = 0; i < n; i++) {
        json_object *o;
        if ((rc = build_op(&ops[i], &o)) != 0)
            return rc;
        if (json_object_array_add(arr, o) != 0) {
            json_object_put(o);
            return BINDLOG_ENOMEM;
        }
    }
    return 0;
}

void bl_etcd_txn_result_free(bl_etcd_txn_result *r)
{
    size_t i;
    if (r == NULL)
        return;
    for (i = 0; i < r->nresults; i++)
        bl_etcd_kvs_free(&r->results[i].kvs);
    free(r->results);
    memset(r, 0, sizeof *r);
}

/* The "responses" of a TxnResponse: one per op of the branch that ran, of
 * the matching kind. */
static int parse_txn_responses(json_object *resp, const bl_etcd_op *ops, size_t nops,
                               bl_etcd_txn_result *out)
{
    static const char *const names[] = { "response_range", "response_put",
                                         "response_delete_range" };
    json_object *arr = NULL;
    size_t i, n = 0;
    int rc;
    if (json_object_object_get_ex(resp, "responses", &arr)) {
        if (!json_object_is_type(arr, json_type_array))
            return BINDLOG_EIO;
        n = json_object_array_length(arr);
    }
    if (n != nops)
        return BINDLOG_EIO;
    if (n == 0)
        return 0;
    out->results = calloc(n, sizeof *out->results);
    if (out->results == NULL)
        return BINDLOG_ENOMEM;
    for (i = 0; i < n; i++) {
        json_object *item = json_object_array_get_idx(arr, i), *r;
        bl_etcd_op_result *res = &out->results[i];
        out->nresults = i + 1;
        res->type = ops[i].type;
        if (!json_object_is_type(item, json_type_object) ||
            json_object_object_length(item) != 1 ||
            !json_object_object_get_ex(item, names[ops[i].type], &r) ||
            !json_object_is_type(r, json_type_object))
            return BINDLOG_EIO;
        if (ops[i].type == BL_ETCD_OP_RANGE)
            rc = parse_range(r, &res->kvs);
        else if (ops[i].type == BL_ETCD_OP_DELETE)
            rc = get_i64(r, "deleted", &res->deleted);
        else
            rc = 0;
        if (rc != 0)
            return rc;
    }
    return 0;
}

int bl_etcd_txn(bl_etcd *c, const bl_etcd_cmp *cmps, size_t ncmp, const bl_etcd_op *success,
                size_t nsucc, const bl_etcd_op *failure, size_t nfail, bl_etcd_txn_result *out)
{
    json_object *req = NULL, *resp = NULL, *arr;
    size_t i;
    int rc;

    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (c == NULL || out == NULL || (ncmp && !cmps) || (nsucc && !success) || (nfail && !failure))
        return bad_arg("txn: NULL client, result or array");
    if (ncmp > c->max_ops || nsucc > c->max_ops || nfail > c->max_ops) {
        set_error("etcd: txn: %zu compares, %zu success and %zu failure ops; the limit is %u "
                  "of each (--max-txn-ops): split the Txn",
                  ncmp, nsucc, nfail, c->max_ops);
        return BINDLOG_EINVAL;
    }
    req = json_object_new_object();
    if (req == NULL)
        return BINDLOG_ENOMEM;
    if (ncmp > 0) {
        arr = json_object_new_array_ext((int)ncmp);
        if ((rc = add_obj(req, "compare", arr)) != 0)
            goto out;
        for (i = 0; i < ncmp; i++) {
            json_object *o;
            if ((rc = build_cmp(&cmps[i], &o)) != 0)
                goto out;
            if (json_object_array_add(arr, o) != 0) {
                json_object_put(o);
                rc = BINDLOG_ENOMEM;
                goto out;
            }
        }
    }
    if ((rc = build_ops(req, "success", success, nsucc)) != 0 ||
        (rc = build_ops(req, "failure", failure, nfail)) != 0)
        goto out;

    if ((rc = call(c, "/v3/kv/txn", req, &resp, &out->retried, NULL)) != 0)
        goto out;
    if ((rc = get_header_revision(resp, &out->revision)) != 0 ||
        (rc = get_bool(resp, "succeeded", &out->succeeded)) != 0 ||
        (rc = parse_txn_responses(resp, out->succeeded ? success : failure,
                                  out->succeeded ? nsucc : nfail, out)) != 0) {
        int retried = out->retried;
        bl_etcd_txn_result_free(out);
        out->retried = retried;
        rc = bad_answer(rc, "txn");
    }
out:
    if (rc == BINDLOG_ENOMEM && last_error[0] == '\0')
        set_error("etcd: out of memory");
    json_object_put(req);
    json_object_put(resp);
    return rc;
}

/* ---- maintenance ------------------------------------------------------------------- */

/* etcd 3.4 writes StatusResponse fields in camelCase ("dbSize"); the proto
 * names ("db_size") are accepted too in case a gateway uses them. */
static int get_u64_either(json_object *o, const char *camel, const char *snake, uint64_t *v)
{
    json_object *f;
    if (json_object_object_get_ex(o, camel, &f))
        return get_u64(o, camel, v);
    return get_u64(o, snake, v);
}

int bl_etcd_status(bl_etcd *c, bl_etcd_status_info *out)
{
    json_object *req = NULL, *resp = NULL, *hd, *ver;
    uint64_t db = 0, in_use = 0;
    int rc;
    size_t e = 0;

    if (out != NULL)
        memset(out, 0, sizeof *out);
    if (c == NULL || out == NULL)
        return bad_arg("status: NULL client or result");
    req = json_object_new_object();
    if (req == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = call(c, "/v3/maintenance/status", req, &resp, NULL, &e)) != 0)
        goto out;
    snprintf(out->endpoint, sizeof out->endpoint, "%s", c->eps[e]);
    if (!json_object_object_get_ex(resp, "header", &hd) ||
        !json_object_is_type(hd, json_type_object) ||
        (rc = get_u64(hd, "member_id", &out->member_id)) != 0 ||
        (rc = get_i64(hd, "revision", &out->revision)) != 0 ||
        (rc = get_u64(resp, "leader", &out->leader)) != 0 ||
        (rc = get_u64_either(resp, "dbSize", "db_size", &db)) != 0 ||
        (rc = get_u64_either(resp, "dbSizeInUse", "db_size_in_use", &in_use)) != 0 ||
        (rc = get_u64_either(resp, "raftTerm", "raft_term", &out->raft_term)) != 0 ||
        (rc = get_u64_either(resp, "raftIndex", "raft_index", &out->raft_index)) != 0 ||
        db > INT64_MAX || in_use > INT64_MAX) {
        rc = bad_answer(rc ? rc : BINDLOG_EIO, "status");
        goto out;
    }
    out->db_size = (int64_t)db;
    out->db_size_in_use = (int64_t)in_use;
    if (json_object_object_get_ex(resp, "version", &ver) &&
        json_object_is_type(ver, json_type_string))
        snprintf(out->version, sizeof out->version, "%s", json_object_get_string(ver));
out:
    json_object_put(req);
    json_object_put(resp);
    return rc;
}

int bl_etcd_compact(bl_etcd *c, int64_t revision, int physical)
{
    json_object *req = NULL, *resp = NULL;
    int64_t rev;
    int rc;
    if (c == NULL || revision <= 0)
        return bad_arg("compact: NULL client or revision <= 0");
    req = json_object_new_object();
    if (req == NULL)
        return BINDLOG_ENOMEM;
    if ((rc = add_i64(req, "revision", revision)) != 0 ||
        (physical && (rc = add_bool(req, "physical", 1)) != 0))
        goto out;
    if ((rc = call(c, "/v3/kv/compaction", req, &resp, NULL, NULL)) != 0)
        goto out;
    if ((rc = get_header_revision(resp, &rev)) != 0)
        rc = bad_answer(rc, "compaction");
out:
    json_object_put(req);
    json_object_put(resp);
    return rc;
}
