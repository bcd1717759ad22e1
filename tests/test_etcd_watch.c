/*
 * test_etcd_watch.c -- bindlog_wait() on etcd is a watch on meta "head"
 * (src/etcd/backend_etcd.c, etcd_wait; the client's bl_etcd_watch), and
 * falls back to polling when no watch can be kept.
 *
 * Runs on the ctest fixture "etcd" (the endpoints file of the *_etcd
 * variants).  What the cases show:
 *   - a wait wakes for a commit of another process, and every waiter of a
 *     store wakes for one commit;
 *   - a wait does not poll: over an idle second etcd sees about one range
 *     and one watch from it (its /metrics count them), where the 20 ms
 *     poll made about fifty ranges;
 *   - the client's watch: events in order, stop on demand, the time limit,
 *     a compacted start revision;
 *   - through a proxy that cuts every /v3/watch stream (as an HTTP proxy
 *     without streaming would), waits still wake: by polling.
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"
#include "etcd/etcd_client.h"
#include "testutil.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static bindlog *open_at(const char *loc)
{
    bindlog *s = NULL;
    int rc = bindlog_open(&s, loc, NULL);
    if (rc != 0)
        fail_msg("open %s: %s", loc, bindlog_last_error());
    return s;
}

/* ---- waits wake ---------------------------------------------------------------- */

static void etcd_watch__returns_at_once_or_times_out(void **state)
{
    (void)state;
    char *loc = tu_store_location("watch");
    bindlog *s = open_at(loc);
    uint64_t head = 99;
    assert_int_equal(bindlog_wait(s, 0, 0, &head), 0);
    assert_int_equal(head, 0);
    assert_int_equal(bindlog_bind(s, "k", "A", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    assert_int_equal(bindlog_wait(s, 0, -1, &head), 0); /* already past */
    assert_int_equal(head, 1);
    int64_t t0 = now_ms();
    assert_int_equal(bindlog_wait(s, 1, 300, &head), 0); /* nothing new */
    assert_int_equal(head, 1);
    assert_true(now_ms() - t0 >= 300);
    bindlog_close(s);
    tu_store_remove(loc);
    free(loc);
}

static void etcd_watch__wakes_for_another_process(void **state)
{
    (void)state;
    char *loc = tu_store_location("watch");
    bindlog_close(open_at(loc)); /* create it; nothing open across fork */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        bindlog *c = NULL;
        sleep_ms(300);
        if (bindlog_open(&c, loc, NULL) != 0)
            _exit(2);
        int rc = bindlog_bind(c, "k", "C", NULL, NULL, NULL, 0, NULL);
        bindlog_close(c);
        _exit(rc == BINDLOG_APPLIED ? 0 : 3);
    }
    bindlog *s = open_at(loc);
    uint64_t head = 0;
    int64_t t0 = now_ms();
    assert_int_equal(bindlog_wait(s, 0, 20000, &head), 0);
    assert_int_equal(head, 1);
    assert_true(now_ms() - t0 < 15000); /* woken by the commit, not the timeout */
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    bindlog_close(s);
    tu_store_remove(loc);
    free(loc);
}

typedef struct waiter {
    bindlog *s;
    uint64_t after, head;
    int rc;
} waiter;

static void *wait_thread(void *arg)
{
    waiter *w = arg;
    w->rc = bindlog_wait(w->s, w->after, 20000, &w->head);
    return NULL;
}

static void etcd_watch__one_commit_wakes_every_waiter(void **state)
{
    (void)state;
    char *loc = tu_store_location("watch");
    bindlog *s = open_at(loc);
    assert_int_equal(bindlog_bind(s, "k", "A", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    pthread_t t[8];
    waiter w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (waiter){s, 1, 0, -1000};
        assert_int_equal(pthread_create(&t[i], NULL, wait_thread, &w[i]), 0);
    }
    sleep_ms(300);
    int64_t t0 = now_ms();
    assert_int_equal(bindlog_bind(s, "k", "B", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].rc, 0);
        assert_int_equal(w[i].head, 2);
    }
    printf("# 8 waiters woken %lld ms after the commit returned\n",
           (long long)(now_ms() - t0));
    bindlog_close(s);
    tu_store_remove(loc);
    free(loc);
}

/* ---- no polling --------------------------------------------------------------- */

/* etcd's count of gRPC calls started for `method` ("Range", "Watch"),
 * from /metrics on the first endpoint; -1 if it cannot be read. */
static long started(const char *method)
{
    char cmd[512], line[1024];
    char ep[256];
    snprintf(ep, sizeof ep, "%s", tu_etcd_endpoints());
    ep[strcspn(ep, ",")] = '\0';
    snprintf(cmd, sizeof cmd, "curl -s --max-time 5 http://%s/metrics", ep);
    FILE *p = popen(cmd, "r");
    long n = -1;
    if (p == NULL)
        return -1;
    char want[128];
    snprintf(want, sizeof want, "grpc_server_started_total{grpc_method=\"%s\",", method);
    while (fgets(line, sizeof line, p) != NULL)
        if (strncmp(line, want, strlen(want)) == 0 && strstr(line, "etcdserverpb") != NULL)
            n = strtol(strrchr(line, ' ') + 1, NULL, 10);
    pclose(p);
    return n;
}

static void etcd_watch__an_idle_wait_does_not_poll(void **state)
{
    (void)state;
    if (started("Range") < 0) {
        printf("# no curl or no /metrics: skipped\n");
        skip();
    }
    char *loc = tu_store_location("watch");
    bindlog *s = open_at(loc);
    uint64_t head;
    /* other tests may share the cluster: take the least of three tries */
    long best_range = 1000000, best_watch = 0;
    for (int k = 0; k < 3 && best_range > 4; k++) {
        long r0 = started("Range"), w0 = started("Watch");
        assert_int_equal(bindlog_wait(s, 0, 1000, &head), 0);
        long r1 = started("Range"), w1 = started("Watch");
        if (r1 - r0 < best_range) {
            best_range = r1 - r0;
            best_watch = w1 - w0;
        }
    }
    printf("# an idle 1 s wait: %ld ranges, %ld watches seen by etcd (polling every "
           "20 ms made about 50 ranges)\n",
           best_range, best_watch);
    assert_true(best_range <= 4);
    assert_true(best_watch >= 1);
    bindlog_close(s);
    tu_store_remove(loc);
    free(loc);
}

/* ---- the client's watch ------------------------------------------------------------ */

typedef struct seen {
    int n, stop_at;
    char values[8][16];
} seen;

static int on_kv(void *ctx, const bl_etcd_kv *kv)
{
    seen *s = ctx;
    if (s->n < 8)
        snprintf(s->values[s->n], sizeof s->values[0], "%.*s", (int)kv->value_len,
                 (const char *)kv->value);
    return ++s->n >= s->stop_at;
}

static void etcd_watch__client_watch(void **state)
{
    (void)state;
    bl_etcd *c = NULL;
    assert_int_equal(bl_etcd_open(tu_etcd_endpoints(), NULL, &c), 0);
    char key[128];
    snprintf(key, sizeof key, "bindlog-test/watch-client-%ld", (long)getpid());
    int64_t r1 = 0, r2 = 0, r3 = 0;
    assert_int_equal(bl_etcd_put(c, key, strlen(key), "one", 3, &r1), 0);
    assert_int_equal(bl_etcd_put(c, key, strlen(key), "two", 3, &r2), 0);
    assert_int_equal(bl_etcd_put(c, key, strlen(key), "three", 5, &r3), 0);

    /* history from r1, in order, stopped after two */
    seen s = {0, 2, {{0}}};
    assert_int_equal(bl_etcd_watch(c, key, strlen(key), r1, 5000, on_kv, &s), 1);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.values[0], "one");
    assert_string_equal(s.values[1], "two");

    /* nothing after r3: the time runs out, 0 */
    seen none = {0, 1, {{0}}};
    int64_t t0 = now_ms();
    assert_int_equal(bl_etcd_watch(c, key, strlen(key), r3 + 1, 300, on_kv, &none), 0);
    assert_int_equal(none.n, 0);
    assert_true(now_ms() - t0 >= 250);

    /* a compacted start revision */
    assert_int_equal(bl_etcd_compact(c, r3, 0), 0);
    seen old = {0, 1, {{0}}};
    assert_int_equal(bl_etcd_watch(c, key, strlen(key), r1, 5000, on_kv, &old),
                     BL_ETCD_ECOMPACTED);
    assert_non_null(strstr(bl_etcd_last_error(), "compacted"));

    assert_int_equal(bl_etcd_watch(c, key, 0, 1, 100, on_kv, &old), BINDLOG_EINVAL);
    assert_int_equal(bl_etcd_watch(c, key, strlen(key), 1, 0, on_kv, &old), BINDLOG_EINVAL);
    bl_etcd_delete_range(c, key, strlen(key), NULL, 0, NULL, NULL);
    bl_etcd_close(c);
}

/* ---- the fallback: a proxy that cuts watch streams ----------------------------------- */

typedef struct proxy {
    int listen_fd;
    int port;
    struct sockaddr_in target;
    atomic_int cut; /* watch requests cut */
    atomic_int stop;
    pthread_t thread;
} proxy;

typedef struct conn {
    proxy *p;
    int fd;
} conn;

/* Copy bytes both ways; a client request for /v3/watch closes both
 * sides, as a proxy that cannot stream would fail it. */
static void *pipe_conn(void *arg)
{
    conn *cn = arg;
    proxy *p = cn->p;
    int up = socket(AF_INET, SOCK_STREAM, 0);
    if (up >= 0 && connect(up, (struct sockaddr *)&p->target, sizeof p->target) == 0) {
        struct pollfd fds[2] = {{cn->fd, POLLIN, 0}, {up, POLLIN, 0}};
        char buf[65536];
        while (!atomic_load(&p->stop) && poll(fds, 2, 200) >= 0) {
            int done = 0;
            for (int i = 0; i < 2 && !done; i++) {
                if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                ssize_t n = read(fds[i].fd, buf, sizeof buf);
                if (n <= 0) {
                    done = 1;
                    break;
                }
                if (i == 0 && memmem(buf, (size_t)n, "POST /v3/watch ", 15) != NULL) {
                    atomic_fetch_add(&p->cut, 1);
                    done = 1;
                    break;
                }
                if (write(fds[1 - i].fd, buf, (size_t)n) != n)
                    done = 1;
            }
            if (done)
                break;
        }
    }
    if (up >= 0)
        close(up);
    close(cn->fd);
    free(cn);
    return NULL;
}

static void *accept_loop(void *arg)
{
    proxy *p = arg;
    while (!atomic_load(&p->stop)) {
        struct pollfd pf = {p->listen_fd, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        int fd = accept(p->listen_fd, NULL, NULL);
        if (fd < 0)
            continue;
        conn *cn = malloc(sizeof *cn);
        pthread_t t;
        cn->p = p;
        cn->fd = fd;
        if (pthread_create(&t, NULL, pipe_conn, cn) == 0)
            pthread_detach(t);
        else {
            close(fd);
            free(cn);
        }
    }
    return NULL;
}

static void proxy_start(proxy *p, const char *target_ep)
{
    memset(p, 0, sizeof *p);
    char host[64];
    const char *colon = strrchr(target_ep, ':');
    snprintf(host, sizeof host, "%.*s", (int)(colon - target_ep), target_ep);
    p->target.sin_family = AF_INET;
    p->target.sin_port = htons((uint16_t)atoi(colon + 1));
    assert_int_equal(inet_pton(AF_INET, host, &p->target.sin_addr), 1);
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(p->listen_fd >= 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(p->listen_fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(p->listen_fd, 64), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(p->listen_fd, (struct sockaddr *)&a, &len), 0);
    p->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&p->thread, NULL, accept_loop, p), 0);
}

static void proxy_stop(proxy *p)
{
    atomic_store(&p->stop, 1);
    pthread_join(p->thread, NULL);
    close(p->listen_fd);
    sleep_ms(300); /* the connection threads see stop and end */
}

static void etcd_watch__falls_back_to_polling_without_streams(void **state)
{
    (void)state;
    char ep[256];
    snprintf(ep, sizeof ep, "%s", tu_etcd_endpoints());
    ep[strcspn(ep, ",")] = '\0';
    proxy px;
    proxy_start(&px, ep);

    char *direct = tu_store_location("watch");
    char proxied[1024];
    const char *prefix = strchr(strstr(direct, "://") + 3, '/');
    snprintf(proxied, sizeof proxied, "etcd://127.0.0.1:%d%s", px.port, prefix);
    bindlog *s = open_at(proxied), *w = open_at(direct);
    waiter wt = {s, 0, 0, -1000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_thread, &wt), 0);
    sleep_ms(400);
    assert_int_equal(bindlog_bind(w, "k", "A", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    int64_t t0 = now_ms();
    pthread_join(t, NULL);
    assert_int_equal(wt.rc, 0);
    assert_int_equal(wt.head, 1);
    assert_true(now_ms() - t0 < 10000);
    assert_true(atomic_load(&px.cut) >= 1); /* a watch was tried, and cut */
    printf("# through a proxy that cut %d watch stream(s): woken %lld ms after the commit\n",
           atomic_load(&px.cut), (long long)(now_ms() - t0));
    bindlog_close(s);
    bindlog_close(w);
    proxy_stop(&px);
    tu_store_remove(direct);
    free(direct);
}

int main(void)
{
    if (tu_backend_skip())
        return 0;
    if (!tu_backend_is_etcd()) {
        printf("[  SKIPPED ] test_etcd_watch runs on etcd only (BINDLOG_TEST_BACKEND=etcd)\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(etcd_watch__returns_at_once_or_times_out),
        cmocka_unit_test(etcd_watch__wakes_for_another_process),
        cmocka_unit_test(etcd_watch__one_commit_wakes_every_waiter),
        cmocka_unit_test(etcd_watch__an_idle_wait_does_not_poll),
        cmocka_unit_test(etcd_watch__client_watch),
        cmocka_unit_test(etcd_watch__falls_back_to_polling_without_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
