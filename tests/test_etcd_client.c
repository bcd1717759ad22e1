/*
 * test_etcd_client.c -- the etcd v3 client (src/etcd/etcd_client.c) against a
 * real etcd.
 *
 * Four groups:
 *  - offline: base64, the prefix helper, endpoint parsing, and "every
 *    endpoint is down" (closed ports and a listener that never answers);
 *  - single: a 1-member cluster: byte-exact round trips, paging, old
 *    revisions, every compare, racing Txns, the Txn size limit, compaction,
 *    a hung endpoint before the real one, status;
 *  - quota: a 1-member cluster with a 1 MiB space quota: "database space
 *    exceeded" is BINDLOG_ENOSPC;
 *  - three: a 3-member cluster: members SIGKILLed under a running writer
 *    (one follower, then the leader), then every member down and back.
 * Each cluster group starts its own cluster with tests/etcd/cluster.sh in a
 * tu_mkdtemp() directory and stops it in the group teardown, which cmocka
 * runs also when a test fails; the script's watchdog stops it if this
 * process dies.
 *
 * Without etcd installed the cluster tests are skipped, unless
 * BINDLOG_REQUIRE_ETCD=1 (CI), where they fail.  The script is found at
 * $BINDLOG_TEST_SOURCE_DIR/tests/etcd/cluster.sh, else through the
 * BINDLOG_TEST_SOURCE_DIR macro, else next to this file (__FILE__).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "etcd/etcd_client.h"
#include "testutil.h"

/* ---- harness ---------------------------------------------------------------- */

typedef struct cluster {
    const char *env;   /* extra environment for cluster.sh start */
    int members;
    int up;            /* 1: running; 0: etcd not installed (tests skip) */
    char *dir;         /* the cluster's temporary directory */
    char endpoints[512];
} cluster;

static cluster single_cluster = { "", 1, 0, NULL, "" };
static cluster three_cluster = { "", 3, 0, NULL, "" };
/* etcd's space quota at 1 MiB: "database space exceeded" after a few puts. */
static cluster quota_cluster = { "BL_ETCD_QUOTA_BYTES=1048576", 1, 0, NULL, "" };

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static const char *script_path(void)
{
    static char path[4096];
    const char *src = getenv("BINDLOG_TEST_SOURCE_DIR");
    if (src != NULL && *src != '\0') {
        snprintf(path, sizeof path, "%s/tests/etcd/cluster.sh", src);
        return path;
    }
#ifdef BINDLOG_TEST_SOURCE_DIR
    snprintf(path, sizeof path, "%s/tests/etcd/cluster.sh", BINDLOG_TEST_SOURCE_DIR);
#else
    {
        const char *file = __FILE__, *slash = strrchr(file, '/');
        if (slash == NULL)
            snprintf(path, sizeof path, "etcd/cluster.sh");
        else
            snprintf(path, sizeof path, "%.*s/etcd/cluster.sh", (int)(slash - file), file);
    }
#endif
    return path;
}

/* Run "ENV cluster.sh ARGS"; its first stdout line goes to out (may be
 * NULL).  Returns the exit status (-1 if it could not run). */
static int run_script_env(const char *env, char *out, size_t out_cap, const char *fmt, ...)
{
    char args[1024], cmd[6000], line[1024] = "";
    va_list ap;
    FILE *p;
    int status;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    if (strchr(script_path(), '\'') != NULL)
        return -1;
    snprintf(cmd, sizeof cmd, "%s BL_CLUSTER_OWNER_PID=%ld bash '%s' %s", env, (long)getpid(),
             script_path(), args);
    p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    if (fgets(line, sizeof line, p) == NULL)
        line[0] = '\0';
    while (fgetc(p) != EOF) {
    }
    status = pclose(p);
    line[strcspn(line, "\n")] = '\0';
    if (out != NULL)
        snprintf(out, out_cap, "%s", line);
    if (status == -1 || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

#define run_script(...) run_script_env("", __VA_ARGS__)

static int group_setup(void **state, cluster *cl)
{
    *state = cl;
    if (run_script(NULL, 0, "check") != 0) {
        const char *req = getenv("BINDLOG_REQUIRE_ETCD");
        fprintf(stderr, "test_etcd_client: etcd/etcdctl not found (script %s)%s\n", script_path(),
                req && strcmp(req, "1") == 0 ? "; BINDLOG_REQUIRE_ETCD=1: failing" : "; skipping");
        cl->up = 0;
        return 0;
    }
    cl->dir = tu_mkdtemp("etcd");
    if (run_script_env(cl->env, cl->endpoints, sizeof cl->endpoints, "start %d '%s/cluster'",
                       cl->members, cl->dir) != 0 ||
        cl->endpoints[0] == '\0') {
        fprintf(stderr, "test_etcd_client: could not start a %d-member etcd cluster in %s\n",
                cl->members, cl->dir);
        return -1;
    }
    cl->up = 1;
    fprintf(stderr, "test_etcd_client: %d-member cluster at %s\n", cl->members, cl->endpoints);
    return 0;
}

static int group_teardown(void **state)
{
    cluster *cl = *state;
    if (cl->dir != NULL) {
        if (cl->up)
            run_script(NULL, 0, "stop '%s/cluster'", cl->dir);
        tu_rmtree(cl->dir);
        free(cl->dir);
        cl->dir = NULL;
    }
    cl->up = 0;
    return 0;
}

static int setup_single(void **state)
{
    return group_setup(state, &single_cluster);
}

static int setup_three(void **state)
{
    return group_setup(state, &three_cluster);
}

static int setup_quota(void **state)
{
    return group_setup(state, &quota_cluster);
}

/* The cluster of this group, or skip / fail when etcd is not installed. */
static cluster *need_cluster(void **state)
{
    cluster *cl = *state;
    if (!cl->up) {
        const char *req = getenv("BINDLOG_REQUIRE_ETCD");
        if (req != NULL && strcmp(req, "1") == 0)
            fail_msg("etcd is not installed but BINDLOG_REQUIRE_ETCD=1 (install etcd-server "
                     "and etcd-client)");
        skip();
    }
    return cl;
}

static bl_etcd *open_client(const char *endpoints, long request_ms)
{
    bl_etcd_options o = BL_ETCD_OPTIONS_INIT;
    bl_etcd *c = NULL;
    o.request_timeout_ms = request_ms;
    o.connect_timeout_ms = 500;
    if (bl_etcd_open(endpoints, &o, &c) != 0)
        fail_msg("bl_etcd_open(%s): %s", endpoints, bl_etcd_last_error());
    return c;
}

#define CHECK(call)                                                                   \
    do {                                                                              \
        int check_rc_ = (call);                                                       \
        if (check_rc_ != 0)                                                           \
            fail_msg("%s = %d: %s", #call, check_rc_, bl_etcd_last_error());          \
    } while (0)

static int64_t put(bl_etcd *c, const void *k, size_t kl, const void *v, size_t vl)
{
    int64_t rev = 0;
    CHECK(bl_etcd_put(c, k, kl, v, vl, &rev));
    assert_true(rev > 0);
    return rev;
}

static int64_t puts_(bl_etcd *c, const char *k, const char *v)
{
    return put(c, k, strlen(k), v, strlen(v));
}

static void assert_bytes(const unsigned char *got, size_t got_len, const void *want,
                         size_t want_len)
{
    assert_int_equal(got_len, want_len);
    assert_memory_equal(got, want, want_len);
    assert_int_equal(got[got_len], 0); /* the documented trailing NUL */
}

/* ---- offline ------------------------------------------------------------------ */

static void b64_roundtrip(const void *in, size_t len, const char *want)
{
    char enc[64];
    unsigned char dec[64];
    size_t n, dn = 99;
    n = bl_etcd_b64_encode(in, len, enc);
    assert_int_equal(n, bl_etcd_b64_encoded_len(len));
    assert_string_equal(enc, want);
    assert_int_equal(bl_etcd_b64_decode(enc, n, dec, &dn), 0);
    assert_int_equal(dn, len);
    assert_memory_equal(dec, in, len);
}

static void etcd__base64_is_strict(void **state)
{
    static const char *const bad[] = {
        "A", "AB", "ABC", "A===", "====", "AB=C", "AB==AAAA", "AB\nC", "AB C", "AB-_",
        "AB=A", "QR==", /* unused bits set (canonical is QQ==) */
        "QUJ=",         /* unused bits set (canonical is QUI=) */
    };
    unsigned char dec[64];
    size_t i, dn;
    (void)state;
    b64_roundtrip("", 0, "");
    b64_roundtrip("f", 1, "Zg==");
    b64_roundtrip("fo", 2, "Zm8=");
    b64_roundtrip("foo", 3, "Zm9v");
    b64_roundtrip("foob", 4, "Zm9vYg==");
    b64_roundtrip("\0\xff\0", 3, "AP8A");
    b64_roundtrip("\xfb\xff\xbf", 3, "+/+/");
    for (i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (bl_etcd_b64_decode(bad[i], strlen(bad[i]), dec, &dn) != BINDLOG_ECORRUPT)
            fail_msg("base64 \"%s\" was accepted", bad[i]);
    }
    /* An embedded NUL is not an alphabet character. */
    assert_int_equal(bl_etcd_b64_decode("AB\0D", 4, dec, &dn), BINDLOG_ECORRUPT);
}

static void etcd__prefix_end(void **state)
{
    unsigned char out[8];
    (void)state;
    assert_int_equal(bl_etcd_prefix_end("abc", 3, out), 3);
    assert_memory_equal(out, "abd", 3);
    assert_int_equal(bl_etcd_prefix_end("a\xff", 2, out), 1);
    assert_memory_equal(out, "b", 1);
    assert_int_equal(bl_etcd_prefix_end("a\xfe\xff\xff", 4, out), 2);
    assert_memory_equal(out, "a\xff", 2);
    assert_int_equal(bl_etcd_prefix_end("\xff\xff", 2, out), 1);
    assert_int_equal(out[0], 0);
    assert_int_equal(bl_etcd_prefix_end("", 0, out), 1);
    assert_int_equal(out[0], 0);
}

static void etcd__open_refuses_bad_endpoints(void **state)
{
    static const char *const bad[] = {
        "", "localhost", "localhost:", ":2379", "h:0", "h:65536", "h:123456", "h:2x",
        "https://h:2379", "ftp://h:1", "a:1,,b:2", "a:1,", "h/x:1", "user@h:1", "[::1:1",
    };
    static const char *const good[] = {
        "127.0.0.1:2379", "http://127.0.0.1:2379", "a:1, b:2", "[::1]:2379", "h-1.example:65535",
    };
    bl_etcd *c = (bl_etcd *)1;
    bl_etcd_options o = BL_ETCD_OPTIONS_INIT;
    size_t i;
    (void)state;
    for (i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (bl_etcd_open(bad[i], NULL, &c) != BINDLOG_EINVAL)
            fail_msg("endpoints \"%s\" accepted", bad[i]);
        assert_null(c);
        assert_true(bl_etcd_last_error()[0] != '\0');
    }
    for (i = 0; i < sizeof good / sizeof *good; i++) {
        CHECK(bl_etcd_open(good[i], NULL, &c));
        assert_int_equal(bl_etcd_max_txn_ops(c), BL_ETCD_DEFAULT_MAX_TXN_OPS);
        bl_etcd_close(c);
    }
    assert_int_equal(bl_etcd_open(NULL, NULL, &c), BINDLOG_EINVAL);
    o.version = 99;
    assert_int_equal(bl_etcd_open("h:1", &o, &c), BINDLOG_EINVAL);
    bl_etcd_close(NULL);
}

/* A loopback port that refuses connections (bound, then closed). */
static int closed_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;
    assert_true(fd >= 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* A loopback listener that accepts connections (in the kernel's backlog)
 * and never answers: a hung server. */
static int silent_listener(int *port)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static void etcd__all_endpoints_down_fails_fast(void **state)
{
    char eps[128], ep1[32], ep2[32], ep3[32];
    bl_etcd *c;
    bl_etcd_kvs kvs = { 0 };
    int64_t rev = -1;
    long t0, dt;
    int lfd, lport;
    const long timeout = 800;
    (void)state;

    /* Nothing listening: refused at once, no waiting for the timeout (a
     * long one here; valgrind makes even a refused connect slow). */
    snprintf(ep1, sizeof ep1, "127.0.0.1:%d", closed_port());
    snprintf(ep2, sizeof ep2, "127.0.0.1:%d", closed_port());
    snprintf(eps, sizeof eps, "%s,%s", ep1, ep2);
    c = open_client(eps, 5000);
    t0 = now_ms();
    assert_int_equal(bl_etcd_range(c, "k", 1, NULL, 0, 0, 0, 0, &kvs), BINDLOG_EIO);
    dt = now_ms() - t0;
    fprintf(stderr, "  refused: %ld ms: %s\n", dt, bl_etcd_last_error());
    assert_true(dt < 2500);
    assert_int_equal(kvs.n, 0);
    assert_non_null(strstr(bl_etcd_last_error(), ep1));
    assert_non_null(strstr(bl_etcd_last_error(), ep2));
    assert_int_equal(bl_etcd_put(c, "k", 1, "v", 1, &rev), BINDLOG_EIO);
    assert_int_equal(rev, 0);
    bl_etcd_close(c);

    /* One endpoint hangs: the call gives up within the request timeout. */
    lfd = silent_listener(&lport);
    snprintf(ep1, sizeof ep1, "127.0.0.1:%d", closed_port());
    snprintf(ep2, sizeof ep2, "127.0.0.1:%d", closed_port());
    snprintf(ep3, sizeof ep3, "127.0.0.1:%d", lport);
    snprintf(eps, sizeof eps, "%s,%s,%s", ep1, ep2, ep3);
    c = open_client(eps, timeout);
    t0 = now_ms();
    assert_int_equal(bl_etcd_range(c, "k", 1, NULL, 0, 0, 0, 0, &kvs), BINDLOG_EIO);
    dt = now_ms() - t0;
    fprintf(stderr, "  hung: %ld ms: %s\n", dt, bl_etcd_last_error());
    assert_true(dt >= timeout - 50);
    assert_true(dt < timeout + 1500); /* bounded, with room for a loaded machine */
    assert_non_null(strstr(bl_etcd_last_error(), ep1));
    assert_non_null(strstr(bl_etcd_last_error(), ep2));
    assert_non_null(strstr(bl_etcd_last_error(), ep3));
    bl_etcd_close(c);
    close(lfd);
}

/* ---- single member ------------------------------------------------------------- */

static void etcd__binary_round_trip(void **state)
{
    cluster *cl = need_cluster(state);
    bl_etcd *c = open_client(cl->endpoints, 5000);
    static const unsigned char k1[] = { 'b', 'i', 'n', '/', 0, 0xff, 0, 'x', 0xff };
    static const unsigned char v1[] = { 0, 0xff, 0xfe, 0, 0, '=', '"', '\\', 0x80 };
    static const unsigned char k2[] = { 'b', 'i', 'n', '/', 0xff, 0xff };
    unsigned char *big = malloc(100000);
    bl_etcd_kvs kvs = { 0 };
    int64_t r1, r2, r3;
    size_t i;

    for (i = 0; i < 100000; i++)
        big[i] = (unsigned char)(i * 7919 >> 3);
    r1 = put(c, k1, sizeof k1, v1, sizeof v1);
    r2 = put(c, k2, sizeof k2, "", 0);

    CHECK(bl_etcd_range(c, k1, sizeof k1, NULL, 0, 0, 0, 0, &kvs));
    assert_int_equal(kvs.n, 1);
    assert_int_equal(kvs.count, 1);
    assert_false(kvs.more);
    assert_true(kvs.revision >= r2);
    assert_bytes(kvs.kvs[0].key, kvs.kvs[0].key_len, k1, sizeof k1);
    assert_bytes(kvs.kvs[0].value, kvs.kvs[0].value_len, v1, sizeof v1);
    assert_int_equal(kvs.kvs[0].create_revision, r1);
    assert_int_equal(kvs.kvs[0].mod_revision, r1);
    assert_int_equal(kvs.kvs[0].version, 1);
    bl_etcd_kvs_free(&kvs);
    assert_null(kvs.kvs);

    /* An empty value is a value, not an absent key. */
    CHECK(bl_etcd_range(c, k2, sizeof k2, NULL, 0, 0, 0, 0, &kvs));
    assert_int_equal(kvs.n, 1);
    assert_bytes(kvs.kvs[0].value, kvs.kvs[0].value_len, "", 0);
    bl_etcd_kvs_free(&kvs);

    /* Overwrite with 100 kB of every byte value: version 2, same creation. */
    r3 = put(c, k1, sizeof k1, big, 100000);
    CHECK(bl_etcd_range(c, k1, sizeof k1, NULL, 0, 0, 0, 0, &kvs));
    assert_int_equal(kvs.n, 1);
    assert_bytes(kvs.kvs[0].value, kvs.kvs[0].value_len, big, 100000);
    assert_int_equal(kvs.kvs[0].create_revision, r1);
    assert_int_equal(kvs.kvs[0].mod_revision, r3);
    assert_int_equal(kvs.kvs[0].version, 2);
    bl_etcd_kvs_free(&kvs);

    /* A key that is a strict prefix of another is its own key. */
    CHECK(bl_etcd_range(c, "bin/", 4, NULL, 0, 0, 0, 0, &kvs));
    assert_int_equal(kvs.n, 0);
    assert_int_equal(kvs.count, 0);
    bl_etcd_kvs_free(&kvs);

    /* Bad arguments never reach the server. */
    assert_int_equal(bl_etcd_range(c, "", 0, NULL, 0, 0, 0, 0, &kvs), BINDLOG_EINVAL);
    assert_int_equal(bl_etcd_range(c, "k", 1, NULL, 0, -1, 0, 0, &kvs), BINDLOG_EINVAL);
    assert_int_equal(bl_etcd_range(c, "k", 1, NULL, 0, 0, 0, 0x100, &kvs), BINDLOG_EINVAL);
    assert_int_equal(bl_etcd_put(c, "", 0, "v", 1, NULL), BINDLOG_EINVAL);
    free(big);
    bl_etcd_close(c);
}

static void etcd__prefix_ranges_page(void **state)
{
    cluster *cl = need_cluster(state);
    bl_etcd *c = open_client(cl->endpoints, 5000);
    /* The prefix ends in 0xff, so its range_end is "pg0" (not "pg/\x100"). */
    static const unsigned char prefix[] = { 'p', 'g', '/', 0xff };
    unsigned char end[8], key[16], from[16];
    size_t end_len = bl_etcd_prefix_end(prefix, sizeof prefix, end), from_len, seen = 0;
    bl_etcd_kvs kvs = { 0 };
    int i, pages = 0;
    int64_t rev;

    assert_int_equal(end_len, 3);
    for (i = 0; i < 25; i++) {
        char v[12]; /* any int */
        memcpy(key, prefix, sizeof prefix);
        key[4] = (unsigned char)(i * 10); /* 0x00, 0x0a, ... 0xf0 */
        snprintf(v, sizeof v, "%d", i);
        put(c, key, 5, v, strlen(v));
    }
    /* Neighbours just outside the prefix, on both sides. */
    put(c, "pg/\xfe", 4, "out", 3);
    rev = put(c, "pg0", 3, "out", 3);

    memcpy(from, prefix, sizeof prefix);
    from_len = sizeof prefix;
    for (;;) {
        size_t j;
        CHECK(bl_etcd_range(c, from, from_len, end, end_len, rev, 10, 0, &kvs));
        assert_int_equal(kvs.count, 25 - (int64_t)seen);
        for (j = 0; j < kvs.n; j++, seen++) {
            char v[8];
            assert_int_equal(kvs.kvs[j].key_len, 5);
            assert_memory_equal(kvs.kvs[j].key, prefix, sizeof prefix);
            assert_int_equal(kvs.kvs[j].key[4], (unsigned char)(seen * 10));
            snprintf(v, sizeof v, "%zu", seen);
            assert_bytes(kvs.kvs[j].value, kvs.kvs[j].value_len, v, strlen(v));
        }
        pages++;
        if (!kvs.more) {
            bl_etcd_kvs_free(&kvs);
            break;
        }
        assert_int_equal(kvs.n, 10);
        /* Next page: just after the last key (append a NUL byte). */
        memcpy(from, kvs.kvs[kvs.n - 1].key, 5);
        from[5] = 0;
        from_len = 6;
        bl_etcd_kvs_free(&kvs);
    }
    assert_int_equal(seen, 25);
    assert_int_equal(pages, 3);

    /* Descending, limit 1: the last key of the prefix. */
    CHECK(bl_etcd_range(c, prefix, sizeof prefix, end, end_len, 0, 1, BL_ETCD_SORT_DESCEND, &kvs));
    assert_int_equal(kvs.n, 1);
    assert_true(kvs.more);
    assert_int_equal(kvs.kvs[0].key[4], 240);
    bl_etcd_kvs_free(&kvs);

    /* Keys only, count only, serializable. */
    CHECK(bl_etcd_range(c, prefix, sizeof prefix, end, end_len, 0, 0, BL_ETCD_KEYS_ONLY, &kvs));
    assert_int_equal(kvs.n, 25);
    assert_int_equal(kvs.kvs[3].value_len, 0);
    assert_true(kvs.kvs[3].mod_revision > 0);
    bl_etcd_kvs_free(&kvs);
    CHECK(bl_etcd_range(c, prefix, sizeof prefix, end, end_len, 0, 0, BL_ETCD_COUNT_ONLY, &kvs));
    assert_int_equal(kvs.n, 0);
    assert_int_equal(kvs.count, 25);
    bl_etcd_kvs_free(&kvs);
    CHECK(bl_etcd_range(c, prefix, sizeof prefix, end, end_len, 0, 0, BL_ETCD_SERIALIZABLE, &kvs));
    assert_int_equal(kvs.n, 25);
    bl_etcd_kvs_free(&kvs);

    /* Delete the prefix: exactly its 25 keys go. */
    {
        int64_t deleted = 0, drev = 0;
        CHECK(bl_etcd_delete_range(c, prefix, sizeof prefix, end, end_len, &deleted, &drev));
        assert_int_equal(deleted, 25);
        assert_true(drev > rev);
        CHECK(bl_etcd_range(c, "pg/", 3, "pg1", 3, 0, 0, 0, &kvs));
        assert_int_equal(kvs.n, 2);
        assert_bytes(kvs.kvs[0].key, kvs.kvs[0].key_len, "pg/\xfe", 4);
        assert_bytes(kvs.kvs[1].key, kvs.kvs[1].key_len, "pg0", 3);
        bl_etcd_kvs_free(&kvs);
        CHECK(bl_etcd_delete_range(c, prefix, sizeof prefix, end, end_len, &deleted, NULL));
        assert_int_equal(deleted, 0);
    }
    bl_etcd_close(c);
}

static void etcd__range_at_old_revision(void **state)
{
    cluster *cl = need_cluster(state);
    bl_etcd *c = open_client(cl->endpoints, 5000);
    bl_etcd_kvs kvs = { 0 };
    int64_t r1, r2, r3, deleted;

    r1 = puts_(c, "old/k", "one");
    r2 = puts_(c, "old/k", "two");
    CHECK(bl_etcd_delete_range(c, "old/k", 5, NULL, 0, &deleted, &r3));
    assert_int_equal(deleted, 1);
    assert_true(r1 < r2 && r2 < r3);

    CHECK(bl_etcd_range(c, "old/k", 5, NULL, 0, r1, 0, 0, &kvs));
    assert_int_equal(kvs.n, 1);
    assert_bytes(kvs.kvs[0].value, kvs.kvs[0].value_len, "one", 3);
    assert_int_equal(kvs.kvs[0].version, 1);
    bl_etcd_kvs_free(&kvs);
    CHECK(bl_etcd_range(c, "old/k", 5, NULL, 0, r2, 0, 0, &kvs));
    assert_int_equal(kvs.n, 1);
    assert_bytes(kvs.kvs[0].value, kvs.kvs[0].value_len, "two", 3);
    assert_int_equal(kvs.kvs[0].create_revision, r1);
    bl_etcd_kvs_free(&kvs);
    CHECK(bl_etcd_range(c, "old/k", 5, NULL, 0, r1 - 1, 0, 0, &kvs));
    assert_int_equal(kvs.n, 0);
    bl_etcd_kvs_free(&kvs);
    CHECK(bl_etcd_range(c, "old/k", 5, NULL, 0, 0, 0, 0, &kvs));
    assert_int_equal(kvs.n, 0);
    assert_true(kvs.revision >= r3);
    bl_etcd_kvs_free(&kvs);

    /* The future is refused, with etcd's words kept. */
    assert_int_equal(bl_etcd_range(c, "old/k", 5, NULL, 0, r3 + 1000000, 0, 0, &kvs),
                     BINDLOG_EINVAL);
    assert_non_null(strstr(bl_etcd_last_error(), "future revision"));
    bl_etcd_close(c);
}

/* One compare on key "cmp/k" alone, expecting `want`. */
static void expect_cmp(bl_etcd *c, bl_etcd_cmp cm, int want)
{
    bl_etcd_txn_result r = { 0 };
    bl_etcd_op ok = { BL_ETCD_OP_PUT, 0, "cmp/ok", 6, NULL, 0, "x", 1, 0 };
    bl_etcd_op no = { BL_ETCD_OP_RANGE, 0, "cmp/k", 5, NULL, 0, NULL, 0, 0 };
    CHECK(bl_etcd_txn(c, &cm, 1, &ok, 1, &no, 1, &r));
    if (r.succeeded != want)
        fail_msg("compare target %d result %d number %lld: succeeded %d, want %d", cm.target,
                 cm.result, (long long)cm.number, r.succeeded, want);
    assert_int_equal(r.nresults, 1);
    assert_int_equal(r.results[0].type, want ? BL_ETCD_OP_PUT : BL_ETCD_OP_RANGE);
    if (!want) {
        assert_int_equal(r.results[0].kvs.n, 1);
        assert_bytes(r.results[0].kvs.kvs[0].value, r.results[0].kvs.kvs[0].value_len, "b\0v",
                     3);
    }
    assert_false(r.retried);
    bl_etcd_txn_result_free(&r);
}

static void etcd__txn_compares(void **state)
{
    cluster *cl = need_cluster(state);
    bl_etcd *c = open_client(cl->endpoints, 5000);
    bl_etcd_txn_result r = { 0 };
    bl_etcd_kvs kvs = { 0 };
    int64_t create, mod;
    int t;

    /* Version 3 at create revision `create`, mod revision `mod`, value
     * "b\0v". */
    create = put(c, "cmp/k", 5, "a", 1);
    put(c, "cmp/k", 5, "b", 1);
    mod = put(c, "cmp/k", 5, "b\0v", 3);

    for (t = BL_ETCD_CMP_VERSION; t <= BL_ETCD_CMP_MOD; t++) {
        int64_t v = t == BL_ETCD_CMP_VERSION ? 3 : t == BL_ETCD_CMP_CREATE ? create : mod;
        bl_etcd_cmp cm = { t, BL_ETCD_EQUAL, "cmp/k", 5, NULL, 0, v, NULL, 0 };
        expect_cmp(c, cm, 1);
        cm.number = v + 1;
        expect_cmp(c, cm, 0);
        cm.result = BL_ETCD_NOT_EQUAL;
        expect_cmp(c, cm, 1);
        cm.number = v;
        expect_cmp(c, cm, 0);
        cm.result = BL_ETCD_GREATER;
        cm.number = v - 1;
        expect_cmp(c, cm, 1);
        cm.number = v;
        expect_cmp(c, cm, 0);
        cm.result = BL_ETCD_LESS;
        cm.number = v + 1;
        expect_cmp(c, cm, 1);
        cm.number = v;
        expect_cmp(c, cm, 0);
    }
    {
        bl_etcd_cmp cm = { BL_ETCD_CMP_VALUE, BL_ETCD_EQUAL, "cmp/k", 5, NULL, 0, 0, "b\0v", 3 };
        expect_cmp(c, cm, 1);
        cm.value = "b\0w";
        expect_cmp(c, cm, 0);
        cm.value_len = 1; /* "b" is a prefix of the value, not the value */
        expect_cmp(c, cm, 0);
        cm.result = BL_ETCD_NOT_EQUAL;
        expect_cmp(c, cm, 1);
        cm.result = BL_ETCD_GREATER;
        cm.value = "b";
        expect_cmp(c, cm, 1);
        cm.result = BL_ETCD_LESS;
        expect_cmp(c, cm, 0);
        cm.value = "c";
        expect_cmp(c, cm, 1);
    }
    /* An absent key has version, create and mod revision 0. */
    {
        bl_etcd_cmp cm = { BL_ETCD_CMP_VERSION, BL_ETCD_EQUAL, "cmp/none", 8, NULL, 0, 0, NULL, 0 };
        bl_etcd_cmp all[3];
        bl_etcd_op ops[2] = {
            { BL_ETCD_OP_PUT, 0, "cmp/none", 8, NULL, 0, "new", 3, 0 },
            { BL_ETCD_OP_DELETE, 0, "cmp/ok", 6, NULL, 0, NULL, 0, 0 },
        };
        all[0] = cm;
        all[1] = cm;
        all[1].target = BL_ETCD_CMP_CREATE;
        all[2] = cm;
        all[2].target = BL_ETCD_CMP_MOD;
        CHECK(bl_etcd_txn(c, all, 3, ops, 2, NULL, 0, &r));
        assert_true(r.succeeded);
        assert_int_equal(r.nresults, 2);
        assert_int_equal(r.results[1].type, BL_ETCD_OP_DELETE);
        assert_int_equal(r.results[1].deleted, 1);
        mod = r.revision;
        bl_etcd_txn_result_free(&r);
        /* Both writes happened at the Txn's revision. */
        CHECK(bl_etcd_range(c, "cmp/none", 8, NULL, 0, 0, 0, 0, &kvs));
        assert_int_equal(kvs.n, 1);
        assert_int_equal(kvs.kvs[0].mod_revision, mod);
        bl_etcd_kvs_free(&kvs);
        /* Second time the compares fail and no failure op is run. */
        CHECK(bl_etcd_txn(c, all, 3, ops, 2, NULL, 0, &r));
        assert_false(r.succeeded);
        assert_int_equal(r.nresults, 0);
        assert_int_equal(r.revision, mod);
        bl_etcd_txn_result_free(&r);
    }
    /* A compare over a range: every key in it. */
    {
        bl_etcd_cmp cm = { BL_ETCD_CMP_MOD, BL_ETCD_LESS, "cmp/", 4, "cmp0", 4, mod + 1, NULL, 0 };
        CHECK(bl_etcd_txn(c, &cm, 1, NULL, 0, NULL, 0, &r));
        assert_true(r.succeeded);
        bl_etcd_txn_result_free(&r);
        cm.number = mod;
        CHECK(bl_etcd_txn(c, &cm, 1, NULL, 0, NULL, 0, &r));
        assert_false(r.succeeded);
        bl_etcd_txn_result_free(&r);
    }
    /* Bad compares and ops are refused before they are sent. */
    {
        bl_etcd_cmp cm = { 9, BL_ETCD_EQUAL, "cmp/k", 5, NULL, 0, 0, NULL, 0 };
        bl_etcd_op op = { 7, 0, "cmp/k", 5, NULL, 0, NULL, 0, 0 };
        bl_etcd_op nokey = { BL_ETCD_OP_PUT, 0, "", 0, NULL, 0, "v", 1, 0 };
        assert_int_equal(bl_etcd_txn(c, &cm, 1, NULL, 0, NULL, 0, &r), BINDLOG_EINVAL);
        assert_int_equal(bl_etcd_txn(c, NULL, 0, &op, 1, NULL, 0, &r), BINDLOG_EINVAL);
        assert_int_equal(bl_etcd_txn(c, NULL, 0, NULL, 0, &nokey, 1, &r), BINDLOG_EINVAL);
        assert_int_equal(bl_etcd_txn(c, NULL, 1, NULL, 0, NULL, 0, &r), BINDLOG_EINVAL);
    }
    bl_etcd_close(c);
}

/* Two threads race compare-and-swaps on one key, round after round. */
#define RACE_ROUNDS 40

typedef struct racer {
    bl_etcd *c;
    pthread_barrier_t *bar;
    int id;
    int won[RACE_ROUNDS];
    int err;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    int i;
    for (i = 0; i < RACE_ROUNDS; i++) {
        bl_etcd_kvs kvs = { 0 };
        bl_etcd_txn_result res = { 0 };
        bl_etcd_cmp cm = { BL_ETCD_CMP_MOD, BL_ETCD_EQUAL, "race/k", 6, NULL, 0, 0, NULL, 0 };
        char v[16];
        bl_etcd_op op = { BL_ETCD_OP_PUT, 0, "race/k", 6, NULL, 0, v, 0, 0 };
        pthread_barrier_wait(r->bar);
        /* Both read the same state, then both try to change it. */
        if (bl_etcd_range(r->c, "race/k", 6, NULL, 0, 0, 0, 0, &kvs) != 0 || kvs.n != 1)
            r->err++;
        else
            cm.number = kvs.kvs[0].mod_revision;
        bl_etcd_kvs_free(&kvs);
        pthread_barrier_wait(r->bar);
        snprintf(v, sizeof v, "%d/%d", i, r->id);
        op.value_len = strlen(v);
        if (bl_etcd_txn(r->c, &cm, 1, &op, 1, NULL, 0, &res) != 0)
            r->err++;
        r->won[i] = res.succeeded;
        bl_etcd_txn_result_free(&res);
        pthread_barrier_wait(r->bar);
    }
    return NULL;
}

static void etcd__racing_txns_one_winner(void **state)
{
    cluster *cl = need_cluster(state);
    bl_etcd *c = open_client(cl->endpoints, 5000);
    pthread_barrier_t bar;
    pthread_t th[2];
    racer r[2];
    int i, wins[2] = { 0, 0 };

    puts_(c, "race/k", "start");
    pthread_barrier_init(&bar, NULL, 2);
    for (i = 0; i < 2; i++) {
        memset(&r[i], 0, sizeof r[i]);
        r[i].c = c; /* one shared client: it must be thread-safe */
        r[i].bar = &bar;
        r[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, race, &r[i]), 0);
    }
    for (i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    assert_int_equal(r[0].err, 0);
    assert_int_equal(r[1].err, 0);
    for (i = 0; i < RACE_ROUNDS; i++) {
        if (r[0].won[i] + r[1].won[i] != 1)
            fail_msg("round %d: %d winners", i, r[0].won[i] + r[1].won[i]);
        wins[r[1].won[i]]++;
    }
    fprintf(stderr, "  wins: thread 0 %d, thread 1 %d\n", wins[0], wins[1]);
    {
        bl_etcd_kvs kvs = { 0 };
        CHECK(bl_etcd_range(c, "race/k", 6, NULL, 0, 0, 0, 0, &kvs));
        assert_int_equal(kvs.kvs[0].version, 1 + RACE_ROUNDS);
        bl_etcd_kvs_free(&kvs);
    }
    bl_etcd_close(c);
}

static void etcd__txn_op_limit(void **state)
{
    cluster *cl = need_cluster(state);
    bl_etcd *c = open_client(cl->endpoints, 5000);
    bl_etcd_options o = BL_ETCD_OPTIONS_INIT;
    bl_etcd *wide = NULL;
    bl_etcd_op ops[130];
    bl_etcd_cmp cmps[130];
    bl_etcd_txn_result r = { 0 };
    bl_etcd_kvs kvs = { 0 };
    char keys[130][16];
    size_t i;

    for (i = 0; i < 130; i++) {
        snprintf(keys[i], sizeof keys[i], "ops/%03zu", i);
        ops[i] = (bl_etcd_op){ BL_ETCD_OP_PUT, 0, keys[i], strlen(keys[i]), NULL, 0, "v", 1, 0 };
        cmps[i] = (bl_etcd_cmp){ BL_ETCD_CMP_VERSION, BL_ETCD_EQUAL, keys[i], strlen(keys[i]),
                                 NULL, 0, 0, NULL, 0 };
    }
    assert_int_equal(bl_etcd_max_txn_ops(c), 128);
    /* Over the limit in any one list: refused here, nothing written. */
    assert_int_equal(bl_etcd_txn(c, NULL, 0, ops, 129, NULL, 0, &r), BINDLOG_EINVAL);
    assert_non_null(strstr(bl_etcd_last_error(), "128"));
    assert_int_equal(bl_etcd_txn(c, cmps, 129, ops, 1, NULL, 0, &r), BINDLOG_EINVAL);
    assert_int_equal(bl_etcd_txn(c, NULL, 0, ops, 1, ops, 129, &r), BINDLOG_EINVAL);
    CHECK(bl_etcd_range(c, "ops/", 4, "ops0", 4, 0, 0, BL_ETCD_COUNT_ONLY, &kvs));
    assert_int_equal(kvs.count, 0);
    bl_etcd_kvs_free(&kvs);

    /* At the limit: fine, atomically. */
    CHECK(bl_etcd_txn(c, cmps, 128, ops, 128, NULL, 0, &r));
    assert_true(r.succeeded);
    assert_int_equal(r.nresults, 128);
    bl_etcd_txn_result_free(&r);
    CHECK(bl_etcd_range(c, "ops/", 4, "ops0", 4, 0, 0, BL_ETCD_COUNT_ONLY, &kvs));
    assert_int_equal(kvs.count, 128);
    bl_etcd_kvs_free(&kvs);

    /* A client told a higher limit than the server's: etcd refuses it, and
     * that is BINDLOG_EINVAL too. */
    o.max_txn_ops = 1000;
    CHECK(bl_etcd_open(cl->endpoints, &o, &wide));
    assert_int_equal(bl_etcd_txn(wide, NULL, 0, ops, 130, NULL, 0, &r), BINDLOG_EINVAL);
    assert_non_null(strstr(bl_etcd_last_error(), "too many operations"));
    bl_etcd_close(wide);

    /* Two writes to one key in one branch: refused by etcd. */
    ops[1] = ops[0];
    assert_int_equal(bl_etcd_txn(c, NULL, 0, ops, 2, NULL, 0, &r), BINDLOG_EINVAL);
    assert_non_null(strstr(bl_etcd_last_error(), "duplicate key"));
    bl_etcd_close(c);
}

static void etcd__compaction(void **state)
{
    cluster *cl = need_cluster(state);
    bl_etcd *c = open_client(cl->endpoints, 5000);
    bl_etcd_kvs kvs = { 0 };
    int64_t r1, r2, r3;

    r1 = puts_(c, "cpt/k", "1");
    r2 = puts_(c, "cpt/k", "2");
    r3 = puts_(c, "cpt/k", "3");
    CHECK(bl_etcd_compact(c, r2, 1));

    assert_int_equal(bl_etcd_range(c, "cpt/k", 5, NULL, 0, r1, 0, 0, &kvs),
                     BL_ETCD_ECOMPACTED);
    assert_non_null(strstr(bl_etcd_last_error(), "compacted"));
    assert_int_equal(kvs.n, 0);
    /* The compaction revision itself and later ones still read. */
    CHECK(bl_etcd_range(c, "cpt/k", 5, NULL, 0, r2, 0, 0, &kvs));
    assert_int_equal(kvs.n, 1);
    assert_bytes(kvs.kvs[0].value, kvs.kvs[0].value_len, "2", 1);
    bl_etcd_kvs_free(&kvs);
    CHECK(bl_etcd_range(c, "cpt/k", 5, NULL, 0, r3, 0, 0, &kvs));
    assert_bytes(kvs.kvs[0].value, kvs.kvs[0].value_len, "3", 1);
    bl_etcd_kvs_free(&kvs);

    /* Again at or below the compaction point: compacted; the future: EINVAL. */
    assert_int_equal(bl_etcd_compact(c, r2, 0), BL_ETCD_ECOMPACTED);
    assert_int_equal(bl_etcd_compact(c, r1, 0), BL_ETCD_ECOMPACTED);
    assert_int_equal(bl_etcd_compact(c, r3 + 1000000, 0), BINDLOG_EINVAL);
    assert_int_equal(bl_etcd_compact(c, 0, 0), BINDLOG_EINVAL);
    /* A serializable read (answered locally) is refused the same way. */
    assert_int_equal(bl_etcd_range(c, "cpt/", 4, "cpt0", 4, r1, 0, BL_ETCD_SERIALIZABLE, &kvs),
                     BL_ETCD_ECOMPACTED);
    bl_etcd_close(c);
}

/* A member that takes the request and never answers costs one attempt
 * timeout; the request then goes to the next endpoint and the result says it
 * was sent twice. */
static void etcd__hung_member_fails_over(void **state)
{
    cluster *cl = need_cluster(state);
    bl_etcd_options o = BL_ETCD_OPTIONS_INIT;
    bl_etcd *c = NULL;
    bl_etcd_txn_result r = { 0 };
    bl_etcd_kvs kvs = { 0 };
    bl_etcd_op op = { BL_ETCD_OP_PUT, 0, "hung/k", 6, NULL, 0, "v", 1, 0 };
    char eps[600];
    int lfd, lport;
    long t0, dt;

    lfd = silent_listener(&lport);
    snprintf(eps, sizeof eps, "127.0.0.1:%d,%s", lport, cl->endpoints);
    /* 2 s per attempt: on a loaded machine (a parallel ctest beside other
     * builds) a live member can take longer than a few hundred ms to
     * answer, and its put would then be sent again (version 3 below, not
     * 2), or the second call below would look like it waited for the hung
     * member */
    o.attempt_timeout_ms = 2000;
    o.request_timeout_ms = 10000;
    CHECK(bl_etcd_open(eps, &o, &c));
    t0 = now_ms();
    CHECK(bl_etcd_txn(c, NULL, 0, &op, 1, NULL, 0, &r));
    dt = now_ms() - t0;
    fprintf(stderr, "  hung first endpoint: txn in %ld ms, retried %d\n", dt, r.retried);
    assert_true(r.succeeded);
    assert_true(r.retried);
    assert_true(dt >= 1950 && dt < 8000);
    bl_etcd_txn_result_free(&r);
    /* The client stays on the endpoint that answered. */
    t0 = now_ms();
    CHECK(bl_etcd_txn(c, NULL, 0, &op, 1, NULL, 0, &r));
    assert_false(r.retried);
    assert_true(now_ms() - t0 < 1950); /* not through the hung member's attempt timeout */
    bl_etcd_txn_result_free(&r);
    CHECK(bl_etcd_range(c, "hung/k", 6, NULL, 0, 0, 0, 0, &kvs));
    assert_int_equal(kvs.n, 1);
    assert_int_equal(kvs.kvs[0].version, 2);
    bl_etcd_kvs_free(&kvs);
    bl_etcd_close(c);
    close(lfd);
}

static void etcd__status(void **state)
{
    cluster *cl = need_cluster(state);
    bl_etcd *c = open_client(cl->endpoints, 5000);
    bl_etcd_status_info st;
    int64_t rev = puts_(c, "st/k", "v");

    CHECK(bl_etcd_status(c, &st));
    assert_string_equal(st.endpoint, cl->endpoints);
    assert_true(strncmp(st.version, "3.", 2) == 0);
    assert_true(st.member_id != 0);
    assert_true(st.leader == st.member_id); /* one member: it leads */
    assert_true(st.revision >= rev);
    assert_true(st.db_size > 0);
    assert_true(st.db_size_in_use > 0 && st.db_size_in_use <= st.db_size);
    assert_true(st.raft_term > 0);
    assert_true(st.raft_index > 0);
    bl_etcd_close(c);
}

/* ---- space quota ----------------------------------------------------------------- */

static void etcd__quota_exhausted_is_enospc(void **state)
{
    cluster *cl = need_cluster(state);
    bl_etcd *c = open_client(cl->endpoints, 5000);
    size_t len = 150000;
    unsigned char *big = calloc(1, len);
    bl_etcd_kvs kvs = { 0 };
    bl_etcd_txn_result r = { 0 };
    bl_etcd_op op = { BL_ETCD_OP_PUT, 0, "q/txn", 5, NULL, 0, "v", 1, 0 };
    int i, rc = 0, written = 0;

    for (i = 0; i < 40; i++) {
        char k[16];
        snprintf(k, sizeof k, "q/%02d", i);
        rc = bl_etcd_put(c, k, strlen(k), big, len, NULL);
        if (rc != 0)
            break;
        written++;
    }
    fprintf(stderr, "  %d puts of %zu bytes, then %d: %s\n", written, len, rc,
            bl_etcd_last_error());
    assert_int_equal(rc, BINDLOG_ENOSPC);
    assert_true(written > 0);
    assert_non_null(strstr(bl_etcd_last_error(), "database space exceeded"));
    assert_int_equal(bl_etcd_txn(c, NULL, 0, &op, 1, NULL, 0, &r), BINDLOG_ENOSPC);
    /* Reads still work.  The put that crossed the quota was applied even
     * though it reported ENOSPC (etcd applies it, then raises the alarm);
     * every later one was refused. */
    CHECK(bl_etcd_range(c, "q/", 2, "q0", 2, 0, 0, BL_ETCD_COUNT_ONLY, &kvs));
    assert_true(kvs.count == written || kvs.count == written + 1);
    bl_etcd_kvs_free(&kvs);
    free(big);
    bl_etcd_close(c);
}

/* ---- three members ------------------------------------------------------------- */

typedef struct writer {
    bl_etcd *c;
    int stop;          /* set by the main thread; under mu */
    pthread_mutex_t mu;
    int acked;         /* puts that returned 0 */
    int failed;        /* puts that returned an error */
    char first_error[512];
} writer;

static int writer_stopped(writer *w)
{
    int s;
    pthread_mutex_lock(&w->mu);
    s = w->stop;
    pthread_mutex_unlock(&w->mu);
    return s;
}

static void *write_loop(void *arg)
{
    writer *w = arg;
    int i;
    for (i = 0; !writer_stopped(w); i++) {
        char k[32];
        int rc;
        snprintf(k, sizeof k, "fo/%06d", i);
        rc = bl_etcd_put(w->c, k, strlen(k), k, strlen(k), NULL);
        pthread_mutex_lock(&w->mu);
        if (rc == 0) {
            w->acked = i + 1;
        } else {
            if (w->failed++ == 0)
                snprintf(w->first_error, sizeof w->first_error, "put %s: %d: %s", k, rc,
                         bl_etcd_last_error());
            pthread_mutex_unlock(&w->mu);
            break;
        }
        pthread_mutex_unlock(&w->mu);
    }
    return NULL;
}

static int acked(writer *w)
{
    int n;
    pthread_mutex_lock(&w->mu);
    n = w->acked;
    pthread_mutex_unlock(&w->mu);
    return n;
}

/* Wait until the writer has `more` acknowledged puts beyond now (or fails). */
static void wait_progress(writer *w, int more, long max_ms)
{
    int target = acked(w) + more;
    long t0 = now_ms();
    while (acked(w) < target) {
        pthread_mutex_lock(&w->mu);
        if (w->failed) {
            pthread_mutex_unlock(&w->mu);
            fail_msg("writer failed: %s", w->first_error);
        }
        pthread_mutex_unlock(&w->mu);
        if (now_ms() - t0 > max_ms)
            fail_msg("writer made no progress for %ld ms (%d acked)", max_ms, acked(w));
        sleep_ms(10);
    }
}

static int leader_of(cluster *cl)
{
    char out[32];
    long t0 = now_ms();
    for (;;) {
        if (run_script(out, sizeof out, "leader '%s/cluster'", cl->dir) == 0)
            return atoi(out);
        if (now_ms() - t0 > 10000)
            fail_msg("no leader after 10 s");
        sleep_ms(100);
    }
}

static void etcd__failover_on_sigkill(void **state)
{
    cluster *cl = need_cluster(state);
    writer w;
    pthread_t th;
    bl_etcd_kvs kvs = { 0 };
    bl_etcd_status_info st;
    int leader, n, i;
    long t0;

    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.mu, NULL);
    /* The budget covers an election (election timeout 1 s). */
    w.c = open_client(cl->endpoints, 8000);
    assert_int_equal(pthread_create(&th, NULL, write_loop, &w), 0);
    wait_progress(&w, 20, 5000);

    /* Member 0 is first in the list and so the client's current endpoint. */
    assert_int_equal(run_script(NULL, 0, "kill-member '%s/cluster' 0", cl->dir), 0);
    t0 = now_ms();
    wait_progress(&w, 20, 8000);
    fprintf(stderr, "  member 0 killed: 20 more puts in %ld ms\n", now_ms() - t0);
    CHECK(bl_etcd_status(w.c, &st));
    assert_true(strstr(cl->endpoints, st.endpoint) != NULL);
    assert_true(strstr(cl->endpoints, st.endpoint) != cl->endpoints); /* not member 0 */
    assert_int_equal(run_script(NULL, 0, "restart-member '%s/cluster' 0", cl->dir), 0);
    /* Killing the leader before member 0 has rejoined would cost the quorum. */
    assert_int_equal(run_script(NULL, 0, "wait-healthy '%s/cluster'", cl->dir), 0);
    wait_progress(&w, 20, 8000);

    /* Now the leader. */
    leader = leader_of(cl);
    assert_int_equal(run_script(NULL, 0, "kill-member '%s/cluster' %d", cl->dir, leader), 0);
    t0 = now_ms();
    wait_progress(&w, 20, 8000);
    fprintf(stderr, "  leader (member %d) killed: 20 more puts in %ld ms, new leader %d\n", leader,
            now_ms() - t0, leader_of(cl));

    pthread_mutex_lock(&w.mu);
    w.stop = 1;
    pthread_mutex_unlock(&w.mu);
    pthread_join(th, NULL);
    assert_int_equal(w.failed, 0);
    assert_int_equal(run_script(NULL, 0, "restart-member '%s/cluster' %d", cl->dir, leader), 0);
    assert_int_equal(run_script(NULL, 0, "wait-healthy '%s/cluster'", cl->dir), 0);

    /* Every acknowledged put is there, once. */
    n = w.acked;
    CHECK(bl_etcd_range(w.c, "fo/", 3, "fo0", 3, 0, 0, BL_ETCD_KEYS_ONLY, &kvs));
    assert_true(kvs.n >= (size_t)n);
    for (i = 0; i < n; i++) {
        char k[32];
        snprintf(k, sizeof k, "fo/%06d", i);
        assert_bytes(kvs.kvs[i].key, kvs.kvs[i].key_len, k, strlen(k));
    }
    fprintf(stderr, "  %d puts acknowledged, all present\n", n);
    bl_etcd_kvs_free(&kvs);
    bl_etcd_close(w.c);
    pthread_mutex_destroy(&w.mu);
}

static void etcd__cluster_down_then_back(void **state)
{
    cluster *cl = need_cluster(state);
    bl_etcd *c = open_client(cl->endpoints, 1000);
    bl_etcd_kvs kvs = { 0 };
    char ep[64];
    const char *p;
    long t0, dt;
    int i, rc;

    puts_(c, "down/k", "before");
    for (i = 0; i < 3; i++)
        assert_int_equal(run_script(NULL, 0, "kill-member '%s/cluster' %d", cl->dir, i), 0);
    t0 = now_ms();
    assert_int_equal(bl_etcd_put(c, "down/k", 6, "during", 6, NULL), BINDLOG_EIO);
    dt = now_ms() - t0;
    fprintf(stderr, "  all down: %ld ms: %s\n", dt, bl_etcd_last_error());
    assert_true(dt < 2 * 1000);
    /* The message names every endpoint. */
    for (p = cl->endpoints; *p;) {
        size_t len = strcspn(p, ",");
        snprintf(ep, sizeof ep, "%.*s", (int)len, p);
        assert_non_null(strstr(bl_etcd_last_error(), ep));
        p += len + (p[len] == ',');
    }
    assert_int_equal(bl_etcd_range(c, "down/k", 6, NULL, 0, 0, 0, 0, &kvs), BINDLOG_EIO);

    /* Back: service resumes on the same client. */
    for (i = 0; i < 3; i++)
        assert_int_equal(run_script(NULL, 0, "restart-member '%s/cluster' %d", cl->dir, i), 0);
    t0 = now_ms();
    while ((rc = bl_etcd_range(c, "down/k", 6, NULL, 0, 0, 0, 0, &kvs)) != 0) {
        if (now_ms() - t0 > 15000)
            fail_msg("no service 15 s after restart: %s", bl_etcd_last_error());
        sleep_ms(100);
    }
    fprintf(stderr, "  back after %ld ms\n", now_ms() - t0);
    assert_int_equal(kvs.n, 1);
    assert_bytes(kvs.kvs[0].value, kvs.kvs[0].value_len, "before", 6);
    bl_etcd_kvs_free(&kvs);
    puts_(c, "down/k", "after");
    bl_etcd_close(c);
}

int main(void)
{
    const struct CMUnitTest offline[] = {
        cmocka_unit_test(etcd__base64_is_strict),
        cmocka_unit_test(etcd__prefix_end),
        cmocka_unit_test(etcd__open_refuses_bad_endpoints),
        cmocka_unit_test(etcd__all_endpoints_down_fails_fast),
    };
    const struct CMUnitTest single[] = {
        cmocka_unit_test(etcd__binary_round_trip),
        cmocka_unit_test(etcd__prefix_ranges_page),
        cmocka_unit_test(etcd__range_at_old_revision),
        cmocka_unit_test(etcd__txn_compares),
        cmocka_unit_test(etcd__racing_txns_one_winner),
        cmocka_unit_test(etcd__txn_op_limit),
        cmocka_unit_test(etcd__compaction),
        cmocka_unit_test(etcd__hung_member_fails_over),
        cmocka_unit_test(etcd__status),
    };
    const struct CMUnitTest three[] = {
        cmocka_unit_test(etcd__failover_on_sigkill),
        cmocka_unit_test(etcd__cluster_down_then_back),
    };
    const struct CMUnitTest quota[] = {
        cmocka_unit_test(etcd__quota_exhausted_is_enospc),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("etcd_offline", offline, NULL, NULL);
    failed += cmocka_run_group_tests_name("etcd_single", single, setup_single, group_teardown);
    failed += cmocka_run_group_tests_name("etcd_quota", quota, setup_quota, group_teardown);
    failed += cmocka_run_group_tests_name("etcd_three", three, setup_three, group_teardown);
    return failed != 0;
}
