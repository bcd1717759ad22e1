/*
 * etcd_wire.h -- the etcd client's internals, shared by its files only
 * (etcd_http.c: endpoints, TLS, the HTTP call with failover and auth;
 * etcd_client.c: the JSON of the KV and maintenance calls; etcd_watch.c:
 * the watch stream).  Nothing outside the client includes this.
 */
#ifndef BL_ETCD_WIRE_H
#define BL_ETCD_WIRE_H

#include <curl/curl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdint.h>

#include "etcd/etcd_client.h"

#if defined(__GNUC__)
#define BL_EW_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define BL_EW_PRINTF(a, b)
#endif

#define BL_EW_HOSTPORT_MAX 262

struct bl_etcd {
    char **eps;                 /* "host:port", neps of them */
    size_t neps;
    int tls;                    /* https (etcds://) */
    long connect_ms;
    long request_ms;
    long attempt_ms;
    unsigned max_ops;
    char *cacert, *cert, *key;  /* TLS files (copies), NULL when not given */
    char *user;                 /* etcd user, NULL: no auth */
    char *password;             /* its password: never printed, wiped at close */
    struct curl_slist *headers; /* Content-Type, no Expect: shared, read-only */
    pthread_mutex_t mu;         /* guards idle[], nidle, good, token, token_gen */
    CURL **idle;                /* easy handles not in use */
    size_t nidle;
    size_t idle_cap;
    size_t good;                /* endpoint that answered last */
    /* Auth.  Every call sends the current token ("Authorization: TOKEN");
     * one that etcd calls invalid (expired, or from before an auth change)
     * is renewed once by whichever thread sees it first (auth_mu), and the
     * call sent again. */
    pthread_mutex_t auth_mu;
    char *token;                /* NULL: none yet, or auth is off */
    uint64_t token_gen;         /* bumped at each renewal */
    int auth_off;               /* etcd answered that auth is not enabled */
};

/* The answer to a call whose token etcd refused: renew and send again.
 * Internal to the client; never returned by a bl_etcd_* function. */
#define BL_EW_ETOKEN (-103)

/* Replace the calling thread's last error (bl_etcd_last_error). */
void bl_ew_error(const char *fmt, ...) BL_EW_PRINTF(1, 2);
/* Forget it (every public call starts so). */
void bl_ew_error_clear(void);

/*
 * POST `req` to `path` with failover and auth (etcd_client.h: endpoints and
 * failover; etcd_http.c: auth).  On success *resp is the answer (the
 * caller puts it).  *retried (may be NULL) is set if the request was sent
 * again after an attempt with an unknown outcome; *used (may be NULL) is
 * the index of the endpoint that answered.
 */
int bl_ew_call(bl_etcd *c, const char *path, json_object *req, json_object **resp,
               int *retried, size_t *used);

/* A curl easy handle from the client's pool, set up for its endpoints
 * (protocol, TLS files, no proxy, no signals), or NULL; give it back with
 * bl_ew_handle_put().  For the watch, which streams. */
CURL *bl_ew_handle_get(bl_etcd *c);
void bl_ew_handle_put(bl_etcd *c, CURL *h);

/* The request headers with the current token in a new list (free with
 * curl_slist_free_all), and the token's generation; NULL on no memory. */
struct curl_slist *bl_ew_headers(bl_etcd *c, uint64_t *gen);
/* Get a token if auth is on and there is none, or renew the one of
 * generation `seen` (a call was refused with it).  0, BINDLOG_EACCES (bad
 * credentials), BINDLOG_EIO... with the last error set. */
int bl_ew_authenticate(bl_etcd *c, int renew, uint64_t seen);

/* What a curl failure on an endpoint means, in words, into why[cap]
 * (TLS failures are named: unknown CA, hostname mismatch, a refused client
 * certificate). */
void bl_ew_curl_reason(const bl_etcd *c, CURLcode cc, const char *curl_msg, char *why,
                       size_t cap);

/* Classify an etcd error object {"error", "message", "code"}: sets *rc
 * (BL_EW_ETOKEN for a token to renew) and the reason in why[cap]; returns 1
 * when another endpoint (or a later try) might serve the request. */
int bl_ew_classify(const bl_etcd *c, json_object *err, long http, int *rc, char *why,
                   size_t cap);

/* ---- JSON (etcd_client.c) ---------------------------------------------------- */

json_object *bl_ew_parse_json(const char *text, size_t len);
int bl_ew_add_bytes(json_object *o, const char *name, const void *p, size_t len);
int bl_ew_add_obj(json_object *o, const char *name, json_object *v);
int bl_ew_add_i64(json_object *o, const char *name, int64_t v);
int bl_ew_add_bool(json_object *o, const char *name, int v);
int bl_ew_add_str(json_object *o, const char *name, const char *v);
int bl_ew_get_i64(json_object *o, const char *name, int64_t *v);
int bl_ew_get_u64(json_object *o, const char *name, uint64_t *v);
int bl_ew_get_bool(json_object *o, const char *name, int *v);
int bl_ew_get_header_revision(json_object *o, int64_t *rev);
int bl_ew_parse_kv(json_object *o, bl_etcd_kv *kv);

#endif /* BL_ETCD_WIRE_H */
