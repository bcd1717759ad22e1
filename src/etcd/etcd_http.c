/*
 * etcd_http.c -- the etcd client's transport: endpoints, TLS, the HTTP call
 * with failover, and auth tokens (etcd_client.h, etcd_wire.h).
 *
 * A call POSTs one JSON body to one endpoint at a time (attempt()), moving
 * on as etcd_client.h describes.  TLS is libcurl's (OpenSSL): peer and host
 * name verification are always on; a failure is named in words (unknown
 * CA, host name mismatch, a refused client certificate) with the endpoint.
 *
 * Auth.  With a user, the first call authenticates (/v3/auth/authenticate:
 * a bcrypt check on the server, tens of milliseconds, so it happens once per
 * client and not per call) and every request carries the token in an
 * "Authorization" header.  etcd refuses a token that expired (simple
 * tokens live --auth-token-ttl seconds, 300 by default) or that predates a
 * change of users or roles ("invalid auth token", "revision of auth store
 * is old"), before doing anything with the request; the call then renews
 * the token once and sends the request again.  Threads that hit the same
 * expiry wait for one renewal (auth_mu and token_gen) rather than each
 * authenticating.
 *
 * The password lives in the client only, to renew the token: it goes into
 * the authenticate request's body and nowhere else, is never part of a
 * message, and is wiped from the client and from the request's buffers.
 */
#define _GNU_SOURCE
#include "etcd/etcd_wire.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CONNECT_MS 1000
#define DEFAULT_REQUEST_MS 5000
#define DEFAULT_ATTEMPT_MS 2000
#define BACKOFF_FIRST_MS 25
#define BACKOFF_MAX_MS 500
/* Longest answer we accept.  etcd's own gRPC limit on a response is far
 * lower by default; a bigger one is a misbehaving server, not data. */
#define MAX_RESPONSE (256u << 20)

/* gRPC status codes that etcd puts in "code". */
enum {
    GRPC_CANCELED = 1,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_DEADLINE_EXCEEDED = 4,
    GRPC_NOT_FOUND = 5,
    GRPC_PERMISSION_DENIED = 7,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_FAILED_PRECONDITION = 9,
    GRPC_OUT_OF_RANGE = 11,
    GRPC_UNAVAILABLE = 14,
    GRPC_DATA_LOSS = 15,
    GRPC_UNAUTHENTICATED = 16
};

/* ---- errors --------------------------------------------------------------- */

static _Thread_local char last_error[1536];

const char *bl_etcd_last_error(void) { return last_error; }

void bl_ew_error_clear(void) { last_error[0] = '\0'; }

void bl_ew_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): va_start is right above */
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

/* Append to a bounded string buffer; a full buffer ends in "...". */
static void append(char *buf, size_t cap, const char *fmt, ...) BL_EW_PRINTF(3, 4);
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

/* ---- opening and closing ---------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_ALL); }

/* Validate one endpoint, [scheme://]host:port, and copy "host:port" to out.
 * The scheme, if written, must be the client's. */
static int parse_endpoint(const char *s, size_t len, int tls, char out[BL_EW_HOSTPORT_MAX + 1])
{
    size_t i, colon;
    unsigned long port = 0;
    while (len > 0 && (*s == ' ' || *s == '\t'))
        s++, len--;
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    if (!tls && len >= 7 && memcmp(s, "http://", 7) == 0)
        s += 7, len -= 7;
    else if (tls && len >= 8 && memcmp(s, "https://", 8) == 0)
        s += 8, len -= 8;
    if (len > 0 && s[len - 1] == '/')
        len--;
    if (len == 0 || len > BL_EW_HOSTPORT_MAX)
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

/* Copy an optional string option into *dst. */
static int copy_opt(char **dst, const char *src)
{
    if (src == NULL || src[0] == '\0')
        return 0;
    *dst = strdup(src);
    return *dst != NULL ? 0 : BINDLOG_ENOMEM;
}

/* A TLS file option must name a readable file: say which one is not. */
static int readable(const char *what, const char *path)
{
    if (path == NULL || access(path, R_OK) == 0)
        return 0;
    bl_ew_error("etcd: cannot read the %s %s: %s", what, path, strerror(errno));
    return BINDLOG_EINVAL;
}

/* Check and copy the TLS and auth options. */
static int set_security(bl_etcd *c, const bl_etcd_options *o)
{
    int rc;
    if (o == NULL)
        return 0;
    c->tls = o->tls != 0;
    if (!c->tls && (o->cacert || o->cert || o->key)) {
        bl_ew_error("etcd: a CA file, client certificate or key needs TLS (etcds://)");
        return BINDLOG_EINVAL;
    }
    if ((o->cert == NULL) != (o->key == NULL)) {
        bl_ew_error("etcd: a client certificate needs its key, and a key its certificate");
        return BINDLOG_EINVAL;
    }
    if ((o->user == NULL || o->user[0] == '\0') != (o->password == NULL)) {
        bl_ew_error("etcd: a user needs a password, and a password a user");
        return BINDLOG_EINVAL;
    }
    if ((rc = readable("CA file", o->cacert)) != 0 ||
        (rc = readable("client certificate", o->cert)) != 0 ||
        (rc = readable("client key", o->key)) != 0)
        return rc;
    if ((rc = copy_opt(&c->cacert, o->cacert)) != 0 || (rc = copy_opt(&c->cert, o->cert)) != 0 ||
        (rc = copy_opt(&c->key, o->key)) != 0 || (rc = copy_opt(&c->user, o->user)) != 0)
        return rc;
    if (o->password != NULL && (c->password = strdup(o->password)) == NULL)
        return BINDLOG_ENOMEM;
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
    bl_ew_error_clear();
    if (endpoints == NULL || *endpoints == '\0') {
        bl_ew_error("etcd: no endpoints given");
        return BINDLOG_EINVAL;
    }
    if (o != NULL && (o->version != BL_ETCD_OPTIONS_VERSION || o->connect_timeout_ms < 0 ||
                      o->request_timeout_ms < 0 || o->attempt_timeout_ms < 0)) {
        bl_ew_error("etcd: bad options");
        return BINDLOG_EINVAL;
    }
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        bl_ew_error("etcd: curl_global_init failed: %s", curl_easy_strerror(curl_init_rc));
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
    if (pthread_mutex_init(&c->auth_mu, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        c = NULL;
        goto out;
    }
    c->connect_ms = o && o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_CONNECT_MS;
    c->request_ms = o && o->request_timeout_ms ? o->request_timeout_ms : DEFAULT_REQUEST_MS;
    c->attempt_ms = o && o->attempt_timeout_ms ? o->attempt_timeout_ms : DEFAULT_ATTEMPT_MS;
    c->max_ops = o && o->max_txn_ops ? o->max_txn_ops : BL_ETCD_DEFAULT_MAX_TXN_OPS;
    if ((rc = set_security(c, o)) != 0)
        goto out;
    rc = BINDLOG_ENOMEM;

    for (p = endpoints;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char hostport[BL_EW_HOSTPORT_MAX + 1];
        char **grown;
        if (memchr(p, '@', len) != NULL) {
            /* never echo it: what precedes '@' may be a password */
            bl_ew_error("etcd: an endpoint holds '@': credentials never go in a location; "
                        "give the user and password as options");
            rc = BINDLOG_EINVAL;
            goto out;
        }
        if (parse_endpoint(p, len, c->tls, hostport) != 0) {
            bl_ew_error("etcd: bad endpoint \"%.*s\" (want host:port)",
                        (int)(len > 300 ? 300 : len), p);
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
        bl_ew_error("etcd: out of memory");
    bl_etcd_close(c);
    return rc;
}

/* free() a secret after overwriting it. */
static void free_secret(char *s)
{
    if (s != NULL) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
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
    free(c->cacert);
    free(c->cert);
    free(c->key);
    free(c->user);
    free_secret(c->password);
    free_secret(c->token);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->auth_mu);
    free(c);
}

unsigned bl_etcd_max_txn_ops(const bl_etcd *c) { return c->max_ops; }

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

CURL *bl_ew_handle_get(bl_etcd *c)
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
     * never through a proxy from the environment, and only with the
     * client's protocol.  TLS: the peer's certificate and host name are
     * always verified (libcurl's defaults, stated). */
    if (curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_PROXY, "") != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, c->tls ? "https" : "http") != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_POST, 1L) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1) != CURLE_OK ||
        (c->tls && (curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L) != CURLE_OK ||
                    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L) != CURLE_OK)) ||
        (c->cacert && curl_easy_setopt(h, CURLOPT_CAINFO, c->cacert) != CURLE_OK) ||
        (c->cert && (curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert) != CURLE_OK ||
                     curl_easy_setopt(h, CURLOPT_SSLKEY, c->key) != CURLE_OK))) {
        curl_easy_cleanup(h);
        return NULL;
    }
    return h;
}

void bl_ew_handle_put(bl_etcd *c, CURL *h)
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

struct curl_slist *bl_ew_headers(bl_etcd *c, uint64_t *gen)
{
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    struct curl_slist *t = h ? curl_slist_append(h, "Expect:") : NULL;
    if (t == NULL) {
        curl_slist_free_all(h);
        return NULL;
    }
    h = t;
    pthread_mutex_lock(&c->mu);
    *gen = c->token_gen;
    if (c->token != NULL) {
        size_t n = strlen("Authorization: ") + strlen(c->token) + 1;
        char *line = malloc(n);
        if (line != NULL) {
            snprintf(line, n, "Authorization: %s", c->token);
            t = curl_slist_append(h, line);
            explicit_bzero(line, n);
            free(line);
        }
        if (line == NULL || t == NULL) {
            pthread_mutex_unlock(&c->mu);
            curl_slist_free_all(h);
            return NULL;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return h;
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
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

int bl_ew_classify(const bl_etcd *c, json_object *err, long http, int *rc, char *why,
                   size_t cap)
{
    json_object *code_o = NULL, *msg_o = NULL;
    const char *msg = "";
    int code;

    if (!json_object_object_get_ex(err, "code", &code_o) ||
        !json_object_is_type(code_o, json_type_int)) {
        snprintf(why, cap, "HTTP %ld", http);
        *rc = BINDLOG_EIO;
        return 1;
    }
    code = json_object_get_int(code_o);
    if ((json_object_object_get_ex(err, "error", &msg_o) ||
         json_object_object_get_ex(err, "message", &msg_o)) &&
        json_object_is_type(msg_o, json_type_string))
        msg = json_object_get_string(msg_o);
    snprintf(why, cap, "%s (gRPC code %d, HTTP %ld)", msg, code, http);

    /* auth: a token to renew, credentials etcd wants, or a refusal */
    if (strstr(msg, "invalid auth token") != NULL ||
        strstr(msg, "revision of auth store is old") != NULL) {
        *rc = c->user != NULL ? BL_EW_ETOKEN : BINDLOG_EACCES;
        return 0;
    }
    if (strstr(msg, "user name is empty") != NULL) {
        snprintf(why, cap, "etcd has authentication on and no user was given: give a user and "
                           "password (%s)", msg);
        *rc = BINDLOG_EACCES;
        return 0;
    }
    if (strstr(msg, "authentication failed") != NULL) {
        snprintf(why, cap, "user \"%.64s\" refused: wrong user name or password (%s)",
                 c->user ? c->user : "", msg);
        *rc = BINDLOG_EACCES;
        return 0;
    }
    if (code == GRPC_PERMISSION_DENIED) {
        snprintf(why, cap, "user \"%.64s\" has no permission for this request (%s)",
                 c->user ? c->user : "", msg);
        *rc = BINDLOG_EACCES;
        return 0;
    }
    switch (code) {
    case GRPC_CANCELED:
    case GRPC_DEADLINE_EXCEEDED:
    case GRPC_UNAVAILABLE:
        *rc = BINDLOG_EIO;
        return 1;
    case GRPC_RESOURCE_EXHAUSTED:
        if (strstr(msg, "too many requests") != NULL) {
            *rc = BINDLOG_EIO;
            return 1;
        }
        *rc = BINDLOG_ENOSPC;
        return 0;
    case GRPC_OUT_OF_RANGE:
        *rc = strstr(msg, "compacted") != NULL ? BL_ETCD_ECOMPACTED : BINDLOG_EINVAL;
        return 0;
    case GRPC_INVALID_ARGUMENT:
        *rc = BINDLOG_EINVAL;
        return 0;
    case GRPC_NOT_FOUND:
        *rc = BINDLOG_ENOTFOUND;
        return 0;
    case GRPC_UNAUTHENTICATED:
        *rc = BINDLOG_EACCES;
        return 0;
    case GRPC_DATA_LOSS:
        *rc = BINDLOG_ECORRUPT;
        return 0;
    default:
        *rc = BINDLOG_EIO;
        return 0;
    }
}

void bl_ew_curl_reason(const bl_etcd *c, CURLcode cc, const char *curl_msg, char *why,
                       size_t cap)
{
    const char *msg = curl_msg[0] ? curl_msg : curl_easy_strerror(cc);
    switch (cc) {
    case CURLE_PEER_FAILED_VERIFICATION:
        if (strstr(msg, "subject name") != NULL || strstr(msg, "does not match") != NULL)
            snprintf(why, cap, "TLS: the server's certificate is not for this host name "
                               "(%s)", msg);
        else
            snprintf(why, cap, "TLS: the server's certificate is not signed by a trusted CA "
                               "(%s; CA file: %s)", msg, c->cacert ? c->cacert : "the system's");
        return;
    case CURLE_SSL_CACERT_BADFILE:
        snprintf(why, cap, "TLS: cannot use the CA file %s (%s)",
                 c->cacert ? c->cacert : "of the system", msg);
        return;
    case CURLE_SSL_CERTPROBLEM:
        snprintf(why, cap, "TLS: cannot use the client certificate %s or its key (%s)",
                 c->cert ? c->cert : "", msg);
        return;
    case CURLE_GOT_NOTHING:
        if (!c->tls) {
            snprintf(why, cap, "%s: a TLS server? (use etcds://)", msg);
            return;
        }
        break;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
        if (c->tls) {
            snprintf(why, cap, "TLS: the server ended the session (%s): it refuses %s", msg,
                     c->cert ? "our client certificate (not signed by a CA it trusts, or "
                               "expired)"
                             : "clients without a certificate");
            return;
        }
        break;
    default:
        break;
    }
    snprintf(why, cap, "%s", msg);
}

/* One POST of `json` to endpoint `ep`, within `budget_ms`. */
static enum attempt_kind attempt(bl_etcd *c, CURL *h, struct curl_slist *hdrs, const char *ep,
                                 const char *path, const char *json, size_t json_len,
                                 long budget_ms, json_object **resp, int *rc, int *sent,
                                 char *why, size_t why_cap)
{
    char url[BL_EW_HOSTPORT_MAX + 64];
    char curl_err[CURL_ERROR_SIZE];
    body b = {NULL, 0, 0, 0};
    long http = 0, req_size = 0;
    curl_off_t connect_us = 0;
    CURLcode cc;
    enum attempt_kind kind;
    json_object *o = NULL;

    *resp = NULL;
    *sent = 0;
    snprintf(url, sizeof url, "%s://%s%s", c->tls ? "https" : "http", ep, path);
    curl_err[0] = '\0';
    if (curl_easy_setopt(h, CURLOPT_URL, url) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, json) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)json_len) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data) != CURLE_OK ||
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
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http);
    curl_easy_getinfo(h, CURLINFO_REQUEST_SIZE, &req_size);
    curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connect_us);

    if (cc != CURLE_OK) {
        bl_ew_curl_reason(c, cc, curl_err, why, why_cap);
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
            /* Refused, unresolvable, connect timeout, reset, closed, TLS. */
            *sent = req_size > 0;
            kind = ATTEMPT_DOWN;
        }
        goto out;
    }

    o = b.p ? bl_ew_parse_json(b.p, b.len) : NULL;
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
        if (!bl_ew_classify(c, o, http, rc, why, why_cap))
            kind = ATTEMPT_FINAL;
        else if (!json_object_object_get_ex(o, "code", NULL) && http < 500)
            kind = ATTEMPT_DOWN; /* not etcd's error: the wrong service */
        else
            kind = ATTEMPT_BUSY;
    } else if (http == 400 && b.p != NULL && strstr(b.p, "CommonName") != NULL) {
        /* etcd >= 3.4.10 with --client-cert-auth: its HTTP gateway refuses
         * a client certificate that carries a CommonName */
        size_t n = strcspn(b.p, "\r\n");
        snprintf(why, why_cap, "TLS: the server refuses our client certificate on its HTTP "
                               "gateway because it has a CommonName; use one without CN "
                               "(%.*s)",
                 (int)(n > 120 ? 120 : n), b.p);
        *rc = BINDLOG_EIO;
        kind = ATTEMPT_FINAL;
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
 * The request with failover (the top of etcd_client.h), with the headers
 * of one token.  BL_EW_ETOKEN when etcd refused that token.
 */
static int call_once(bl_etcd *c, const char *path, const char *json, size_t json_len,
                     struct curl_slist *hdrs, json_object **resp, int *retried, size_t *used)
{
    CURL *h;
    long deadline = now_ms() + c->request_ms, backoff = BACKOFF_FIRST_MS;
    size_t start, i, pass = 0;
    int rc = BINDLOG_EIO, maybe_applied = 0;
    char tried[1024] = "", why[400] = "", last_why[600] = "";

    *resp = NULL;
    h = bl_ew_handle_get(c);
    if (h == NULL) {
        bl_ew_error("etcd: cannot make a curl handle");
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
            k = attempt(c, h, hdrs, c->eps[e], path, json, json_len,
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
                    bl_ew_error_clear();
                } else {
                    bl_ew_error("etcd %s%s: %s", c->eps[e], path, why);
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
    bl_ew_error("etcd: no endpoint answered %s; tried %s", path, tried);
    goto out;
timed_out:
    rc = BINDLOG_EIO;
    bl_ew_error("etcd: no endpoint could serve %s within %ld ms (%zu round%s); tried %s; last: %s",
                path, c->request_ms, pass, pass == 1 ? "" : "s", tried[0] ? tried : "none",
                last_why[0] ? last_why : "no attempt");
out:
    bl_ew_handle_put(c, h);
    return rc;
}

/* ---- auth ------------------------------------------------------------------------ */

/* Overwrite what a request holds of the password: the serialised text
 * json-c keeps, and the string value itself. */
static void wipe_json(json_object *secret, const char *text)
{
    if (text != NULL)
        explicit_bzero((char *)text, strlen(text));
    if (secret != NULL)
        explicit_bzero((char *)json_object_get_string(secret),
                       (size_t)json_object_get_string_len(secret));
}

int bl_ew_authenticate(bl_etcd *c, int renew, uint64_t seen)
{
    json_object *req = NULL, *resp = NULL, *pw = NULL, *tok;
    const char *text = NULL;
    struct curl_slist *hdrs = NULL;
    int rc = 0;

    if (c->user == NULL)
        return 0;
    pthread_mutex_lock(&c->auth_mu);
    pthread_mutex_lock(&c->mu);
    int done = c->auth_off || (renew ? c->token_gen != seen : c->token != NULL);
    pthread_mutex_unlock(&c->mu);
    if (done) /* another thread did it meanwhile */
        goto out;

    rc = BINDLOG_ENOMEM;
    if ((req = json_object_new_object()) == NULL ||
        bl_ew_add_str(req, "name", c->user) != 0 ||
        (pw = json_object_new_string(c->password)) == NULL)
        goto out;
    if (json_object_object_add(req, "password", json_object_get(pw)) != 0) {
        json_object_put(pw);
        goto out;
    }
    text = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    if (text == NULL || hdrs == NULL)
        goto out;
    rc = call_once(c, "/v3/auth/authenticate", text, strlen(text), hdrs, &resp, NULL, NULL);
    if (rc != 0) {
        if (strstr(bl_etcd_last_error(), "authentication is not enabled") != NULL) {
            /* etcd's own client goes on without a token then */
            pthread_mutex_lock(&c->mu);
            c->auth_off = 1;
            pthread_mutex_unlock(&c->mu);
            bl_ew_error_clear();
            rc = 0;
        }
        goto out;
    }
    if (!json_object_object_get_ex(resp, "token", &tok) ||
        !json_object_is_type(tok, json_type_string) || json_object_get_string_len(tok) == 0) {
        bl_ew_error("etcd: /v3/auth/authenticate: the answer holds no token");
        rc = BINDLOG_EIO;
        goto out;
    }
    char *fresh = strdup(json_object_get_string(tok));
    if (fresh == NULL)
        goto out;
    pthread_mutex_lock(&c->mu);
    free_secret(c->token);
    c->token = fresh;
    c->token_gen++;
    pthread_mutex_unlock(&c->mu);
out:
    wipe_json(pw, text);
    json_object_put(pw);
    json_object_put(req);
    if (resp != NULL && json_object_object_get_ex(resp, "token", &tok))
        explicit_bzero((char *)json_object_get_string(tok),
                       (size_t)json_object_get_string_len(tok));
    json_object_put(resp);
    curl_slist_free_all(hdrs);
    pthread_mutex_unlock(&c->auth_mu);
    if (rc == BINDLOG_ENOMEM && bl_etcd_last_error()[0] == '\0')
        bl_ew_error("etcd: out of memory");
    return rc;
}

int bl_ew_call(bl_etcd *c, const char *path, json_object *req, json_object **resp, int *retried,
               size_t *used)
{
    const char *json;
    size_t json_len;
    int rc;

    *resp = NULL;
    if (retried)
        *retried = 0;
    bl_ew_error_clear();
    json = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    if (json == NULL) {
        bl_ew_error("etcd: out of memory");
        return BINDLOG_ENOMEM;
    }
    json_len = strlen(json);
    if ((rc = bl_ew_authenticate(c, 0, 0)) != 0)
        return rc;
    for (int renewed = 0;; renewed++) {
        uint64_t gen = 0;
        struct curl_slist *hdrs = bl_ew_headers(c, &gen);
        if (hdrs == NULL) {
            bl_ew_error("etcd: out of memory");
            return BINDLOG_ENOMEM;
        }
        rc = call_once(c, path, json, json_len, hdrs, resp, retried, used);
        curl_slist_free_all(hdrs);
        if (rc != BL_EW_ETOKEN)
            return rc;
        if (renewed) {
            /* a fresh token refused at once: not an expiry */
            char why[sizeof last_error]; /* the message, before it is rewritten */
            memcpy(why, last_error, sizeof why);
            bl_ew_error("%s (refused right after renewal)", why);
            return BINDLOG_EACCES;
        }
        /* refused before etcd did anything with the request: renew, resend */
        if ((rc = bl_ew_authenticate(c, 1, gen)) != 0)
            return rc;
    }
}
