/*
 * test_etcd_replies.c -- the etcd client (src/etcd) against a gateway that
 * answers wrong: a scripted HTTP server on 127.0.0.1 stands where etcd's
 * JSON gateway would, and says what a broken proxy, the wrong service or a
 * hostile peer might.  No etcd is needed.
 *
 * Every answer must end in a clear error naming the problem (never a
 * crash, a hang or a result made up from a bad field):
 *   - 2xx bodies that are not JSON, lack the header, carry numbers where
 *     etcd sends decimal strings, bad base64, the wrong Txn responses;
 *   - etcd's error bodies, each gRPC code to its bindlog code;
 *   - what is not etcd (a 404 page, a 502 without a body, a closed
 *     connection, a 256 MiB answer): retried or failed over as the client's
 *     header says, within the request's time;
 *   - auth: an answer without a token, auth not enabled, a token refused
 *     again right after renewal;
 *   - watch streams: error and cancel messages, malformed events, a line
 *     that is not JSON, a line over 64 MiB, a stream that ends; and a good
 *     stream trickled one byte a write;
 *   - bindlog_open on etcd:// through it: a bad answer, keys outside the
 *     prefix, damaged meta, a newer format, each refused with its public
 *     code, and no store made.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"
#include "etcd/etcd_client.h"
#include "testutil.h"

/* ---- the scripted gateway ------------------------------------------------------ */

/* What the gateway answers to a POST of one path. */
typedef struct reply {
    const char *path; /* "/v3/kv/range", ...; the first match wins */
    int status;       /* HTTP status; 0: close the connection without a word */
    const char *body; /* sent as is (NULL: none) */
    size_t big;       /* > 0: after body, this many bytes of 'x' */
    int stream;       /* no Content-Length: the body, then close (as a watch) */
    int trickle;      /* write the body one byte at a time */
} reply;

#define MAX_REPLIES 4

typedef struct gateway {
    int listen_fd, port;
    pthread_t thread;
    atomic_int stop;
    pthread_mutex_t mu;
    reply replies[MAX_REPLIES];
    int nreplies;
    int hits[MAX_REPLIES]; /* requests answered by each reply */
    int unmatched;         /* requests no reply matched (answered 404) */
    char endpoint[64];     /* "127.0.0.1:port" */
} gateway;

static int send_all(int fd, const char *p, size_t n, int trickle)
{
    while (n > 0) {
        ssize_t w = send(fd, p, trickle ? 1 : n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Read one request: its path, and the body (by Content-Length) drained. */
static int read_request(int fd, char *path, size_t cap)
{
    char buf[16384];
    size_t len = 0;
    char *end = NULL;
    while (end == NULL) {
        if (len + 1 >= sizeof buf)
            return -1;
        ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (n <= 0)
            return -1;
        len += (size_t)n;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    if (sscanf(buf, "POST %1023s HTTP/1.1", path) != 1 || strlen(path) >= cap)
        return -1;
    size_t want = 0, have = len - (size_t)(end + 4 - buf);
    const char *cl = strcasestr(buf, "\r\nContent-Length:");
    if (cl != NULL)
        want = strtoul(cl + 17, NULL, 10);
    while (have < want) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0)
            return -1;
        have += (size_t)n;
    }
    return 0;
}

static void answer(gateway *g, int fd)
{
    char path[1024], head[256];
    if (read_request(fd, path, sizeof path) != 0)
        return;
    reply r = {NULL, 404, "<html>no such page</html>", 0, 0, 0};
    pthread_mutex_lock(&g->mu);
    int i;
    for (i = 0; i < g->nreplies && strcmp(g->replies[i].path, path) != 0; i++)
        ;
    if (i < g->nreplies) {
        r = g->replies[i];
        g->hits[i]++;
    } else {
        g->unmatched++;
    }
    pthread_mutex_unlock(&g->mu);
    if (r.status == 0)
        return; /* the caller closes: an empty reply */
    size_t body_len = r.body ? strlen(r.body) : 0;
    if (r.stream)
        snprintf(head, sizeof head,
                 "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
                 r.status);
    else
        snprintf(head, sizeof head,
                 "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n",
                 r.status, body_len + r.big);
    if (send_all(fd, head, strlen(head), 0) != 0 ||
        (body_len && send_all(fd, r.body, body_len, r.trickle) != 0))
        return;
    static char xs[1 << 16];
    memset(xs, 'x', sizeof xs);
    for (size_t sent = 0; sent < r.big;) {
        size_t n = r.big - sent < sizeof xs ? r.big - sent : sizeof xs;
        if (send_all(fd, xs, n, 0) != 0)
            return; /* the client stopped reading: as it should */
        sent += n;
    }
}

static void *serve(void *arg)
{
    gateway *g = arg;
    while (!atomic_load(&g->stop)) {
        struct pollfd pf = {g->listen_fd, POLLIN, 0};
        if (poll(&pf, 1, 50) <= 0)
            continue;
        int fd = accept(g->listen_fd, NULL, NULL);
        if (fd < 0)
            continue;
        answer(g, fd);
        shutdown(fd, SHUT_WR);
        close(fd);
    }
    return NULL;
}

static gateway *gateway_start(void)
{
    gateway *g = calloc(1, sizeof *g);
    assert_non_null(g);
    pthread_mutex_init(&g->mu, NULL);
    g->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(g->listen_fd >= 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(g->listen_fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(g->listen_fd, 16), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(g->listen_fd, (struct sockaddr *)&a, &len), 0);
    g->port = ntohs(a.sin_port);
    snprintf(g->endpoint, sizeof g->endpoint, "127.0.0.1:%d", g->port);
    assert_int_equal(pthread_create(&g->thread, NULL, serve, g), 0);
    return g;
}

static void gateway_stop(gateway *g)
{
    atomic_store(&g->stop, 1);
    pthread_join(g->thread, NULL);
    close(g->listen_fd);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* Answer `path` with r from now on (the others as set before). */
static void script(gateway *g, reply r)
{
    pthread_mutex_lock(&g->mu);
    int i;
    for (i = 0; i < g->nreplies && strcmp(g->replies[i].path, r.path) != 0; i++)
        ;
    assert_true(i < MAX_REPLIES);
    g->replies[i] = r;
    g->hits[i] = 0;
    if (i == g->nreplies)
        g->nreplies++;
    g->unmatched = 0;
    pthread_mutex_unlock(&g->mu);
}

static int hits(gateway *g, const char *path)
{
    int n = 0;
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->nreplies; i++)
        if (strcmp(g->replies[i].path, path) == 0)
            n = g->hits[i];
    pthread_mutex_unlock(&g->mu);
    return n;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bl_etcd *client_timed(const char *eps, const char *user, const char *password,
                             long request_ms, long attempt_ms)
{
    bl_etcd_options o = BL_ETCD_OPTIONS_INIT;
    bl_etcd *c = NULL;
    o.connect_timeout_ms = 300;
    o.request_timeout_ms = request_ms;
    o.attempt_timeout_ms = attempt_ms;
    o.user = user;
    o.password = password;
    assert_int_equal(bl_etcd_open(eps, &o, &c), 0);
    return c;
}

/* A client of endpoints `eps` with short times: a retried call gives up
 * within a second. */
static bl_etcd *client(const char *eps, const char *user, const char *password)
{
    return client_timed(eps, user, password, 800, 400);
}

#define assert_error_has(want)                                                                     \
    do {                                                                                           \
        if (strstr(bl_etcd_last_error(), (want)) == NULL)                                          \
            fail_msg("error \"%s\" does not say \"%s\"", bl_etcd_last_error(), (want));            \
    } while (0)

static int range_rc(bl_etcd *c)
{
    bl_etcd_kvs kvs = {0};
    int rc = bl_etcd_range(c, "k", 1, NULL, 0, 0, 0, 0, &kvs);
    bl_etcd_kvs_free(&kvs);
    return rc;
}

/* ---- answers of 200 that are not what etcd sends --------------------------------- */

#define HDR "\"header\":{\"revision\":\"7\"}"

static void etcd_replies__malformed_answers_are_refused_by_name(void **state)
{
    (void)state;
    gateway *g = gateway_start();
    bl_etcd *c = client(g->endpoint, NULL, NULL);
    static const struct {
        const char *body, *says;
        int rc;
    } ranges[] = {
        {"not json at all", "malformed response (HTTP 200", BINDLOG_EIO},
        {"[1,2,3]", "malformed response (HTTP 200", BINDLOG_EIO},
        {"{\"kvs\":[]}", "range: malformed answer from the server", BINDLOG_EIO},
        {"{\"header\":7}", "range: malformed answer", BINDLOG_EIO},
        {"{\"header\":{\"revision\":7}}", "range: malformed answer", BINDLOG_EIO},
        {"{\"header\":{\"revision\":\"-7\"}}", "range: malformed answer", BINDLOG_EIO},
        {"{\"header\":{\"revision\":\"007\"}}", "range: malformed answer", BINDLOG_EIO},
        {"{\"header\":{\"revision\":\"9223372036854775808\"}}", "range: malformed answer",
         BINDLOG_EIO},
        {"{\"header\":{\"revision\":\"123456789012345678901\"}}", "range: malformed answer",
         BINDLOG_EIO},
        {"{" HDR ",\"more\":\"yes\"}", "range: malformed answer", BINDLOG_EIO},
        {"{" HDR ",\"kvs\":{}}", "range: malformed answer", BINDLOG_EIO},
        {"{" HDR ",\"kvs\":[7]}", "range: malformed answer", BINDLOG_EIO},
        {"{" HDR ",\"kvs\":[{\"value\":\"dg==\"}]}", "range: malformed answer", BINDLOG_EIO},
        {"{" HDR ",\"kvs\":[{\"key\":\"a!==\"}]}", "range: invalid base64 from the server",
         BINDLOG_ECORRUPT},
        {"{" HDR ",\"kvs\":[{\"key\":\"aw=\"}]}", "range: invalid base64", BINDLOG_ECORRUPT},
        {"{" HDR ",\"kvs\":[{\"key\":\"aw==\",\"value\":5}]}", "range: malformed answer",
         BINDLOG_EIO},
        {"{" HDR ",\"kvs\":[{\"key\":\"aw==\",\"version\":\"x\"}]}", "range: malformed answer",
         BINDLOG_EIO},
        /* the first kv good, the second bad: nothing is returned */
        {"{" HDR ",\"kvs\":[{\"key\":\"aw==\",\"value\":\"dg==\"},{\"key\":\"*\"}]}",
         "range: invalid base64", BINDLOG_ECORRUPT},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        script(g, (reply){"/v3/kv/range", 200, ranges[i].body, 0, 0, 0});
        bl_etcd_kvs kvs = {0};
        int rc = bl_etcd_range(c, "k", 1, NULL, 0, 0, 0, 0, &kvs);
        if (rc != ranges[i].rc)
            fail_msg("range answer %zu (%s): %d (%s)", i, ranges[i].body, rc, bl_etcd_last_error());
        assert_error_has(ranges[i].says);
        assert_int_equal(kvs.n, 0);
        assert_null(kvs.kvs);
        assert_int_equal(hits(g, "/v3/kv/range"), 1); /* a definite answer: not retried */
    }
    /* and a good one parses, so the refusals above are the fields' doing */
    script(g, (reply){"/v3/kv/range", 200,
                      "{" HDR ",\"count\":\"1\",\"kvs\":[{\"key\":\"aw==\",\"value\":\"dg==\","
                      "\"create_revision\":\"3\",\"mod_revision\":\"7\",\"version\":\"2\"}]}",
                      0, 0, 0});
    bl_etcd_kvs kvs = {0};
    assert_int_equal(bl_etcd_range(c, "k", 1, NULL, 0, 0, 0, 0, &kvs), 0);
    assert_int_equal(kvs.revision, 7);
    assert_int_equal(kvs.n, 1);
    assert_memory_equal(kvs.kvs[0].key, "k", 2);
    assert_memory_equal(kvs.kvs[0].value, "v", 2);
    assert_int_equal(kvs.kvs[0].mod_revision, 7);
    assert_int_equal(kvs.kvs[0].version, 2);
    bl_etcd_kvs_free(&kvs);

    /* put and compaction need the header's revision */
    int64_t rev = -1;
    script(g, (reply){"/v3/kv/put", 200, "{}", 0, 0, 0});
    assert_int_equal(bl_etcd_put(c, "k", 1, "v", 1, &rev), BINDLOG_EIO);
    assert_error_has("put: malformed answer from the server");
    assert_int_equal(rev, 0);
    script(g, (reply){"/v3/kv/compaction", 200, "{\"header\":{}}", 0, 0, 0});
    assert_int_equal(bl_etcd_compact(c, 5, 0), 0); /* absent revision: 0, as etcd omits it */
    script(g, (reply){"/v3/kv/compaction", 200, "{\"header\":{\"revision\":\"x\"}}", 0, 0, 0});
    assert_int_equal(bl_etcd_compact(c, 5, 0), BINDLOG_EIO);
    assert_error_has("compaction: malformed answer");

    /* status: every number a decimal string */
    bl_etcd_status_info st;
    script(g,
           (reply){"/v3/maintenance/status", 200,
                   "{\"header\":{\"member_id\":\"1\",\"revision\":\"7\"},\"dbSize\":1}", 0, 0, 0});
    assert_int_equal(bl_etcd_status(c, &st), BINDLOG_EIO);
    assert_error_has("status: malformed answer");
    script(g, (reply){"/v3/maintenance/status", 200,
                      "{\"header\":{\"member_id\":\"1\",\"revision\":\"7\"},"
                      "\"dbSize\":\"9223372036854775808\"}",
                      0, 0, 0});
    assert_int_equal(bl_etcd_status(c, &st), BINDLOG_EIO);
    assert_error_has("status: malformed answer");
    script(g, (reply){"/v3/maintenance/status", 200, "{\"version\":\"3.5.0\"}", 0, 0, 0});
    assert_int_equal(bl_etcd_status(c, &st), BINDLOG_EIO);
    script(g, (reply){"/v3/maintenance/status", 200,
                      "{\"header\":{\"member_id\":\"12\",\"revision\":\"7\"},\"version\":\"3.5.9\","
                      "\"db_size\":\"4096\",\"dbSizeInUse\":\"2048\",\"leader\":\"12\","
                      "\"raftTerm\":\"2\",\"raftIndex\":\"40\"}",
                      0, 0, 0});
    assert_int_equal(bl_etcd_status(c, &st), 0);
    assert_int_equal(st.db_size, 4096);
    assert_int_equal(st.db_size_in_use, 2048);
    assert_int_equal(st.raft_index, 40);
    assert_string_equal(st.version, "3.5.9");

    bl_etcd_close(c);
    gateway_stop(g);
}

static void etcd_replies__a_txn_answer_must_match_its_ops(void **state)
{
    (void)state;
    gateway *g = gateway_start();
    bl_etcd *c = client(g->endpoint, NULL, NULL);
    bl_etcd_op ops[2] = {{BL_ETCD_OP_RANGE, 0, "k", 1, NULL, 0, NULL, 0, 0},
                         {BL_ETCD_OP_DELETE, 0, "k", 1, NULL, 0, NULL, 0, 0}};
    bl_etcd_txn_result r;
    static const char *const bad[] = {
        "{" HDR ",\"succeeded\":\"true\"}",
        "{" HDR ",\"succeeded\":true}", /* two ops, no responses */
        "{" HDR ",\"succeeded\":true,\"responses\":{}}",
        "{" HDR ",\"succeeded\":true,\"responses\":[{\"response_range\":{" HDR "}}]}",
        "{" HDR ",\"succeeded\":true,\"responses\":[{\"response_put\":{}},"
        "{\"response_delete_range\":{}}]}",
        "{" HDR ",\"succeeded\":true,\"responses\":[{\"response_range\":{" HDR "},"
        "\"response_put\":{}},{\"response_delete_range\":{}}]}",
        "{" HDR ",\"succeeded\":true,\"responses\":[{\"response_range\":{" HDR "}},"
        "{\"response_delete_range\":{\"deleted\":1}}]}",
        "{" HDR ",\"succeeded\":true,\"responses\":[{\"response_range\":{" HDR "}},"
        "{\"response_delete_range\":7}]}",
        "{" HDR ",\"succeeded\":true,\"responses\":[{\"response_range\":{" HDR
        ",\"kvs\":[{\"key\":\"\"}]}},{\"response_delete_range\":{}}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        script(g, (reply){"/v3/kv/txn", 200, bad[i], 0, 0, 0});
        int rc = bl_etcd_txn(c, NULL, 0, ops, 2, NULL, 0, &r);
        if (rc != BINDLOG_EIO)
            fail_msg("txn answer %zu (%s): %d (%s)", i, bad[i], rc, bl_etcd_last_error());
        assert_error_has("txn: malformed answer from the server");
        assert_int_equal(r.nresults, 0);
        assert_null(r.results);
    }
    script(g, (reply){"/v3/kv/txn", 200,
                      "{" HDR ",\"succeeded\":true,\"responses\":[{\"response_range\":{" HDR
                      ",\"kvs\":[{\"key\":\"aw==\",\"value\":\"dg==\"}]}},"
                      "{\"response_delete_range\":{\"deleted\":\"1\"}}]}",
                      0, 0, 0});
    assert_int_equal(bl_etcd_txn(c, NULL, 0, ops, 2, NULL, 0, &r), 0);
    assert_int_equal(r.succeeded, 1);
    assert_int_equal(r.nresults, 2);
    assert_int_equal(r.results[0].kvs.n, 1);
    assert_int_equal(r.results[1].deleted, 1);
    bl_etcd_txn_result_free(&r);
    /* the failure branch ran: its op count (none) is what must match */
    script(g, (reply){"/v3/kv/txn", 200, "{" HDR "}", 0, 0, 0});
    assert_int_equal(bl_etcd_txn(c, NULL, 0, ops, 2, NULL, 0, &r), 0);
    assert_int_equal(r.succeeded, 0);
    assert_int_equal(r.nresults, 0);
    bl_etcd_txn_result_free(&r);
    bl_etcd_close(c);
    gateway_stop(g);
}

/* ---- etcd's error bodies --------------------------------------------------------- */

static void etcd_replies__errors_map_to_codes(void **state)
{
    (void)state;
    gateway *g = gateway_start();
    bl_etcd *c = client(g->endpoint, NULL, NULL);
    static const struct {
        int http;
        const char *body, *says;
        int rc;
    } errs[] = {
        {400, "{\"code\":3,\"error\":\"etcdserver: key is not provided\"}",
         "etcdserver: key is not provided (gRPC code 3, HTTP 400)", BINDLOG_EINVAL},
        {400,
         "{\"code\":11,\"message\":\"etcdserver: mvcc: required revision has been compacted\"}",
         "has been compacted (gRPC code 11", BL_ETCD_ECOMPACTED},
        {400,
         "{\"code\":11,\"error\":\"etcdserver: mvcc: required revision is a future revision\"}",
         "future revision", BINDLOG_EINVAL},
        {400, "{\"code\":8,\"error\":\"etcdserver: mvcc: database space exceeded\"}",
         "database space exceeded", BINDLOG_ENOSPC},
        {403, "{\"code\":7,\"error\":\"etcdserver: permission denied\"}",
         "has no permission for this request", BINDLOG_EACCES},
        {401, "{\"code\":3,\"error\":\"etcdserver: user name is empty\"}",
         "etcd has authentication on and no user was given", BINDLOG_EACCES},
        {401, "{\"code\":16,\"error\":\"etcdserver: invalid auth token\"}", "invalid auth token",
         BINDLOG_EACCES},
        {404, "{\"code\":5,\"error\":\"etcdserver: requested lease not found\"}", "lease not found",
         BINDLOG_ENOTFOUND},
        {500, "{\"code\":15,\"error\":\"etcdserver: corrupt cluster\"}", "corrupt cluster",
         BINDLOG_ECORRUPT},
        {500, "{\"code\":9,\"error\":\"etcdserver: something else\"}",
         "something else (gRPC code 9, HTTP 500)", BINDLOG_EIO},
        {400, "CommonName of client sending a request against gateway will be ignored",
         "has a CommonName; use one without CN", BINDLOG_EIO},
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        script(g, (reply){"/v3/kv/range", errs[i].http, errs[i].body, 0, 0, 0});
        int rc = range_rc(c);
        if (rc != errs[i].rc)
            fail_msg("error %zu (%s): %d (%s)", i, errs[i].body, rc, bl_etcd_last_error());
        assert_error_has(errs[i].says);
        assert_error_has(g->endpoint);                /* which endpoint said it */
        assert_int_equal(hits(g, "/v3/kv/range"), 1); /* definite: not retried */
    }
    bl_etcd_close(c);
    gateway_stop(g);
}

/* ---- what is not etcd: retried, failed over, or refused --------------------------- */

static void etcd_replies__what_is_not_etcd_fails_over_or_gives_up(void **state)
{
    (void)state;
    gateway *g = gateway_start(), *good = gateway_start();
    /* times long enough that "at once" and "when the time is up" differ
     * under valgrind too: a call there can take a second */
    bl_etcd *c = client_timed(g->endpoint, NULL, NULL, 2500, 1200);

    /* the wrong service (a 404 page): the next endpoint; with none, at once */
    int64_t t0 = now_ms();
    assert_int_equal(range_rc(c), BINDLOG_EIO);
    assert_error_has("no endpoint answered /v3/kv/range");
    assert_error_has("HTTP 404 without an etcd error body");
    assert_true(now_ms() - t0 < 1200);
    /* a JSON object that is not etcd's error: the wrong service too */
    script(g, (reply){"/v3/kv/range", 404, "{\"message\":\"not here\"}", 0, 0, 0});
    assert_int_equal(range_rc(c), BINDLOG_EIO);
    assert_error_has("no endpoint answered");
    assert_int_equal(hits(g, "/v3/kv/range"), 1);

    /* a connection closed without a word */
    script(g, (reply){"/v3/kv/range", 0, NULL, 0, 0, 0});
    assert_int_equal(range_rc(c), BINDLOG_EIO);
    assert_error_has("a TLS server? (use etcds://)");

    /* busy (a 502 without a body, etcd's "unavailable"): tried again until
     * the request's time is up, then the rounds are counted */
    static const char *const busy[] = {NULL,
                                       "{\"code\":14,\"error\":\"etcdserver: leader changed\"}",
                                       "{\"code\":8,\"error\":\"etcdserver: too many requests\"}"};
    for (size_t i = 0; i < sizeof busy / sizeof busy[0]; i++) {
        script(g, (reply){"/v3/kv/range", i ? 503 : 502, busy[i], 0, 0, 0});
        t0 = now_ms();
        assert_int_equal(range_rc(c), BINDLOG_EIO);
        int64_t took = now_ms() - t0;
        assert_error_has("no endpoint could serve /v3/kv/range within 2500 ms");
        assert_true(hits(g, "/v3/kv/range") >= 3);
        /* 2.5 s, less the last backoff it would not start (500 ms at most),
         * and at most one attempt's 1.2 s over */
        assert_true(took >= 1900 && took < 10000);
    }
    bl_etcd_close(c);

    /* a busy endpoint before a good one: the good one answers */
    char eps[160];
    snprintf(eps, sizeof eps, "%s,%s", g->endpoint, good->endpoint);
    script(good, (reply){"/v3/kv/put", 200, "{\"header\":{\"revision\":\"9\"}}", 0, 0, 0});
    script(g, (reply){"/v3/kv/put", 503, "{\"code\":14,\"error\":\"etcdserver: no leader\"}", 0, 0,
                      0});
    c = client(eps, NULL, NULL);
    int64_t rev = 0;
    assert_int_equal(bl_etcd_put(c, "k", 1, "v", 1, &rev), 0);
    assert_int_equal(rev, 9);
    assert_int_equal(hits(g, "/v3/kv/put"), 1);
    assert_int_equal(hits(good, "/v3/kv/put"), 1);
    bl_etcd_close(c);

    /* an answer without end: cut at 256 MiB (the time to send that much,
     * under a sanitizer on a loaded machine, is the attempt's) */
    c = client_timed(g->endpoint, NULL, NULL, 120000, 120000);
    script(g, (reply){"/v3/kv/range", 200, "{\"header\":", (256u << 20) + 1, 0, 0});
    assert_int_equal(range_rc(c), BINDLOG_EIO);
    assert_error_has("response over 268435456 bytes");
    bl_etcd_close(c);
    gateway_stop(good);
    gateway_stop(g);
}

/* ---- auth answers ------------------------------------------------------------------ */

static void etcd_replies__auth_answers(void **state)
{
    (void)state;
    gateway *g = gateway_start();
    bl_etcd *c = client(g->endpoint, "root", "secret");
    script(g, (reply){"/v3/kv/put", 200, "{\"header\":{\"revision\":\"3\"}}", 0, 0, 0});

    /* an answer without a token */
    script(g, (reply){"/v3/auth/authenticate", 200, "{" HDR "}", 0, 0, 0});
    assert_int_equal(bl_etcd_put(c, "k", 1, "v", 1, NULL), BINDLOG_EIO);
    assert_error_has("/v3/auth/authenticate: the answer holds no token");
    assert_int_equal(hits(g, "/v3/kv/put"), 0);
    script(g, (reply){"/v3/auth/authenticate", 200, "{\"token\":\"\"}", 0, 0, 0});
    assert_int_equal(bl_etcd_put(c, "k", 1, "v", 1, NULL), BINDLOG_EIO);
    assert_error_has("holds no token");

    /* a refusal of the user */
    script(g, (reply){"/v3/auth/authenticate", 400,
                      "{\"code\":3,\"error\":\"etcdserver: authentication failed, invalid user "
                      "ID or password\"}",
                      0, 0, 0});
    assert_int_equal(bl_etcd_put(c, "k", 1, "v", 1, NULL), BINDLOG_EACCES);
    assert_error_has("user \"root\" refused: wrong user name or password");

    /* a token refused right after it was issued: not an expiry */
    script(g, (reply){"/v3/auth/authenticate", 200, "{" HDR ",\"token\":\"t1\"}", 0, 0, 0});
    script(g, (reply){"/v3/kv/put", 401,
                      "{\"code\":16,\"error\":\"etcdserver: invalid auth token\"}", 0, 0, 0});
    assert_int_equal(bl_etcd_put(c, "k", 1, "v", 1, NULL), BINDLOG_EACCES);
    assert_error_has("(refused right after renewal)");
    assert_int_equal(hits(g, "/v3/auth/authenticate"), 2); /* the first, and one renewal */
    assert_int_equal(hits(g, "/v3/kv/put"), 2);
    bl_etcd_close(c);

    /* auth not enabled on the server: the client goes on without a token */
    c = client(g->endpoint, "root", "secret");
    script(g, (reply){"/v3/auth/authenticate", 400,
                      "{\"code\":9,\"error\":\"etcdserver: authentication is not enabled\"}", 0, 0,
                      0});
    script(g, (reply){"/v3/kv/put", 200, "{\"header\":{\"revision\":\"3\"}}", 0, 0, 0});
    int64_t rev = 0;
    assert_int_equal(bl_etcd_put(c, "k", 1, "v", 1, &rev), 0);
    assert_int_equal(rev, 3);
    assert_int_equal(bl_etcd_put(c, "k", 1, "v", 1, &rev), 0);
    assert_int_equal(hits(g, "/v3/auth/authenticate"), 1); /* asked once */
    bl_etcd_close(c);
    gateway_stop(g);
}

/* ---- watch streams ------------------------------------------------------------------ */

typedef struct seen {
    int n;
    char last[16];
} seen;

static int on_kv(void *ctx, const bl_etcd_kv *kv)
{
    seen *s = ctx;
    snprintf(s->last, sizeof s->last, "%.*s", (int)kv->value_len, (const char *)kv->value);
    return ++s->n >= 2;
}

static int watch_rc(bl_etcd *c, seen *s, long timeout_ms)
{
    memset(s, 0, sizeof *s);
    return bl_etcd_watch(c, "k", 1, 1, timeout_ms, on_kv, s);
}

#define CREATED "{\"result\":{" HDR ",\"created\":true}}\n"
#define EVENT(v)                                                                                   \
    "{\"result\":{" HDR ",\"events\":[{\"kv\":{\"key\":\"aw==\",\"value\":\"" v "\"}}]}}\n"

static void etcd_replies__watch_streams(void **state)
{
    (void)state;
    gateway *g = gateway_start();
    bl_etcd *c = client(g->endpoint, NULL, NULL);
    seen s;
    static const struct {
        int http;
        const char *body, *says;
        int rc;
    } streams[] = {
        {200, "{\"error\":{\"grpc_code\":7,\"message\":\"permission denied\"}}\n",
         "/v3/watch: permission denied", BINDLOG_EACCES},
        {200, "{\"error\":{\"message\":\"etcdserver: no leader\"}}\n", "no leader", BINDLOG_EIO},
        {200, "{\"error\":7}\n", "the gateway ended the watch", BINDLOG_EIO},
        {200, CREATED "{\"header\":{}}\n", "a watch message without a result", BINDLOG_EIO},
        {200, "{\"result\":{\"created\":\"yes\"}}\n", "a malformed watch message", BINDLOG_EIO},
        {200, "{\"result\":{\"compact_revision\":5}}\n", "a malformed watch message", BINDLOG_EIO},
        {200, "{\"result\":{\"canceled\":true,\"compact_revision\":\"5\"}}\n",
         "etcd canceled the watch: the revision was compacted", BL_ETCD_ECOMPACTED},
        {200,
         "{\"result\":{\"canceled\":true,\"cancel_reason\":\"mvcc: required revision has "
         "been compacted\"}}\n",
         "has been compacted", BL_ETCD_ECOMPACTED},
        {200, "{\"result\":{\"canceled\":true}}\n", "etcd canceled the watch: no reason",
         BINDLOG_EIO},
        {200,
         "{\"result\":{\"canceled\":true,\"cancel_reason\":\"etcdserver: invalid auth "
         "token\"}}\n",
         "invalid auth token", BINDLOG_EACCES},
        {200, CREATED "{\"result\":{\"events\":{}}}\n", "a malformed watch event list",
         BINDLOG_EIO},
        {200, CREATED "{\"result\":{\"events\":[{\"type\":\"PUT\"}]}}\n",
         "a watch event without a kv", BINDLOG_EIO},
        {200, CREATED "{\"result\":{\"events\":[7]}}\n", "a watch event without a kv", BINDLOG_EIO},
        {200, CREATED "{\"result\":{\"events\":[{\"kv\":{\"key\":\"a!==\"}}]}}\n",
         "a malformed key or value in a watch event", BINDLOG_ECORRUPT},
        {200, CREATED "{\"result\":{\"events\":[{\"kv\":{\"key\":\"aw==\",\"version\":1}}]}}\n",
         "a malformed key or value in a watch event", BINDLOG_EIO},
        {200, CREATED "<html>proxy error</html>\n", "a watch message that is not JSON",
         BINDLOG_EIO},
        {200, CREATED "[1]\n", "a watch message that is not JSON", BINDLOG_EIO},
        {200, CREATED EVENT("dg=="), "the stream ended (HTTP 200)", BINDLOG_EIO},
        {200, "", "the stream ended (HTTP 200)", BINDLOG_EIO},
        {503, "{\"code\":14,\"error\":\"etcdserver: no leader\"}", "the stream ended (HTTP 503)",
         BINDLOG_EIO},
    };
    for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++) {
        script(g, (reply){"/v3/watch", streams[i].http, streams[i].body, 0, 1, 0});
        int rc = watch_rc(c, &s, 5000);
        if (rc != streams[i].rc)
            fail_msg("stream %zu (%s): %d (%s)", i, streams[i].body, rc, bl_etcd_last_error());
        assert_error_has(streams[i].says);
        assert_true(s.n <= 1); /* an event before the bad line is all it saw */
    }

    /* a line over 64 MiB: refused once it passes the limit (the time to
     * send that much under a sanitizer on a loaded machine is the watch's) */
    script(g, (reply){"/v3/watch", 200, CREATED "{\"result\":", (64u << 20) + 16, 1, 0});
    assert_int_equal(watch_rc(c, &s, 120000), BINDLOG_ENOMEM);
    assert_error_has("a watch message over 67108864 bytes");

    /* a good stream one byte a write, blank lines between: both events */
    script(g, (reply){"/v3/watch", 200, CREATED "\n\n" EVENT("MQ==") "\n" EVENT("Mg=="), 0, 1, 1});
    assert_int_equal(watch_rc(c, &s, 5000), 1);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.last, "2");
    bl_etcd_close(c);
    gateway_stop(g);
}

/* ---- a store opened through such a gateway ---------------------------------------- */

/* kvs of store "p" (base64): p/m/head = 16 zero bytes, p/m/magic = "bindlog-store" */
#define HEAD_KV                                                                                    \
    "{\"key\":\"cC9tL2hlYWQ=\",\"value\":\"AAAAAAAAAAAAAAAAAAAAAA==\",\"mod_revision\":\"3\"}"
#define MAGIC_KV "{\"key\":\"cC9tL21hZ2lj\",\"value\":\"YmluZGxvZy1zdG9yZQ==\"}"

/* bindlog_open on etcd:// refuses what the gateway says with the public
 * codes and the client's words: nothing is opened on a bad answer. */
static void etcd_replies__open_refuses_a_store_it_cannot_read(void **state)
{
    (void)state;
    gateway *g = gateway_start();
    char loc[128];
    snprintf(loc, sizeof loc, "etcd://%s/p", g->endpoint);
    static const struct {
        const char *range, *says;
        int rc;
    } opens[] = {
        {"not json", "malformed response (HTTP 200", BINDLOG_EIO},
        {"{" HDR ",\"kvs\":[{\"key\":\"%%%%\"}]}", "invalid base64 from the server",
         BINDLOG_ECORRUPT},
        /* keys the range did not ask for: not a store, and nothing made */
        {"{" HDR ",\"kvs\":[{\"key\":\"enp6\",\"value\":\"YWJj\"}]}",
         "the prefix holds keys that are not a bindlog store", BINDLOG_ENOTSTORE},
        {"{" HDR ",\"kvs\":[" MAGIC_KV ",{\"key\":\"cC9tL2Zvcm1hdA==\",\"value\":\"YWJj\"}]}",
         "the store's meta records are damaged", BINDLOG_ECORRUPT},
        {"{" HDR ",\"kvs\":[" MAGIC_KV
         ",{\"key\":\"cC9tL2Zvcm1hdA==\",\"value\":\"AAAD5w==\"}," HEAD_KV "]}",
         "the store's format is newer than this library's", BINDLOG_EVERSION},
    };
    for (size_t i = 0; i < sizeof opens / sizeof opens[0]; i++) {
        script(g, (reply){"/v3/kv/range", 200, opens[i].range, 0, 0, 0});
        bindlog *s = NULL;
        int rc = bindlog_open(&s, loc, NULL);
        if (rc != opens[i].rc)
            fail_msg("open %zu (%s): %d (%s)", i, opens[i].range, rc, bindlog_last_error());
        assert_null(s);
        if (strstr(bindlog_last_error(), opens[i].says) == NULL)
            fail_msg("open %zu: \"%s\" does not say \"%s\"", i, bindlog_last_error(),
                     opens[i].says);
        pthread_mutex_lock(&g->mu);
        int others = g->unmatched;
        pthread_mutex_unlock(&g->mu);
        assert_int_equal(others, 0); /* nothing but reads: no Txn made a store */
    }
    gateway_stop(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(etcd_replies__malformed_answers_are_refused_by_name),
        cmocka_unit_test(etcd_replies__a_txn_answer_must_match_its_ops),
        cmocka_unit_test(etcd_replies__errors_map_to_codes),
        cmocka_unit_test(etcd_replies__what_is_not_etcd_fails_over_or_gives_up),
        cmocka_unit_test(etcd_replies__auth_answers),
        cmocka_unit_test(etcd_replies__watch_streams),
        cmocka_unit_test(etcd_replies__open_refuses_a_store_it_cannot_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
