/*
 * test_etcd_tls.c -- etcds:// against a real etcd with TLS, client
 * certificates and auth on (issue 15; docs/scale-out.md).
 *
 * The cluster is the ctest fixture "etcds" (tests/etcd/cluster.sh with
 * BL_ETCD_TLS=1 BL_ETCD_AUTH=1): certificates made by openssl at start, a
 * member for 127.0.0.1 that requires client certificates, users root and
 * gw (gw may read and write bindlog-test/ only), tokens that live 2 s.
 * $BINDLOG_TEST_ETCDS_DIR is its directory.  Every open goes through the
 * etcd module, as an application's does.
 *
 * The matrix: each failure gives its code and a message naming the
 * endpoint and the reason -- unknown CA (a file, and the system's store),
 * host name mismatch, a client certificate the server refuses (untrusted,
 * none, one with a CommonName), plain http to a TLS port (BINDLOG_EIO);
 * a wrong password, an unknown user, no credentials, a user without
 * permission on the prefix (BINDLOG_EACCES); bad settings (BINDLOG_EINVAL).
 * The confined user can neither read nor write outside its prefix; an
 * expired token is renewed unseen; and no message ever holds a password.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"
#include "etcd/etcd_client.h"
#include "testutil.h"

/* A password nobody has: it must not show up anywhere either. */
#define WRONG_PASSWORD "not-the-password-7f3a9c"

static struct {
    char dir[2048];
    char eps[300];      /* "127.0.0.1:PORT" */
    char port[16];
    char root_pw[128];
    char gw_pw[128];
    unsigned n;         /* prefixes made */
} fx;

/* Every message a failure left, for the password check at the end. */
static char msgs[96][700];
static size_t nmsgs;

static void keep_message(const char *m)
{
    if (nmsgs < sizeof msgs / sizeof msgs[0])
        snprintf(msgs[nmsgs++], sizeof msgs[0], "%s", m);
}

static const char *tls_file(const char *name)
{
    static char paths[8][2200];
    static unsigned next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/tls/%s", fx.dir, name);
    return p;
}

static void read_line(const char *path, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    out[0] = '\0';
    if (f == NULL)
        return;
    if (fgets(out, (int)cap, f) == NULL)
        out[0] = '\0';
    out[strcspn(out, "\r\n")] = '\0';
    fclose(f);
}

/* A fresh location "etcds://EPS/TOP/tls-PID-N" (TOP: bindlog-test, inside
 * gw's prefix, or bindlog-other, outside it). */
static char *location(const char *scheme, const char *eps, const char *top)
{
    char *loc = malloc(1024);
    assert_non_null(loc);
    snprintf(loc, 1024, "%s://%s/%s/tls-%ld-%u", scheme, eps, top, (long)getpid(), ++fx.n);
    return loc;
}

typedef struct creds {
    const char *cacert, *cert, *key, *user, *password;
} creds;

/* gw with the right files: the normal case. */
static creds gw(void)
{
    creds c = {tls_file("ca.pem"), tls_file("client.pem"), tls_file("client.key"), "gw",
               fx.gw_pw};
    return c;
}

static creds root(void)
{
    creds c = gw();
    c.user = "root";
    c.password = fx.root_pw;
    return c;
}

static int open_as(bindlog **s, const char *loc, creds c)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.etcd_cacert = c.cacert;
    o.etcd_cert = c.cert;
    o.etcd_key = c.key;
    o.etcd_user = c.user;
    o.etcd_password = c.password;
    int rc = bindlog_open(s, loc, &o);
    if (rc != 0)
        keep_message(bindlog_last_error());
    return rc;
}

/* Open must fail with rc, and the message must hold every string given. */
static void expect_refused(const char *loc, creds c, int rc, ...)
{
    bindlog *s = NULL;
    int got = open_as(&s, loc, c);
    const char *m = bindlog_last_error();
    if (got != rc)
        fail_msg("open %s: %s, expected %s; %s", loc, bindlog_code_name(got),
                 bindlog_code_name(rc), m);
    assert_null(s);
    va_list ap;
    va_start(ap, rc);
    for (const char *want; (want = va_arg(ap, const char *)) != NULL;)
        if (strstr(m, want) == NULL)
            fail_msg("\"%s\" does not mention \"%s\"", m, want);
    va_end(ap);
}

/* A raw client of the confined user or of root (testutil's client). */
static bl_etcd *raw(creds c)
{
    bl_etcd_options o = BL_ETCD_OPTIONS_INIT;
    bl_etcd *e = NULL;
    o.tls = 1;
    o.cacert = c.cacert;
    o.cert = c.cert;
    o.key = c.key;
    o.user = c.user;
    o.password = c.password;
    assert_int_equal(bl_etcd_open(fx.eps, &o, &e), 0);
    return e;
}

/* Delete everything this run made, as root. */
static void cleanup(void)
{
    bl_etcd *e = raw(root());
    for (int k = 0; k < 2; k++) {
        char p[128];
        unsigned char end[130];
        snprintf(p, sizeof p, "%s/tls-%ld-", k ? "bindlog-other" : "bindlog-test",
                 (long)getpid());
        size_t n = bl_etcd_prefix_end(p, strlen(p), end);
        bl_etcd_delete_range(e, p, strlen(p), end, n, NULL, NULL);
    }
    bl_etcd_close(e);
}

/* ---- what works ------------------------------------------------------------------ */

static void etcd_tls__gateway_works_with_least_privilege(void **state)
{
    (void)state;
    char *loc = location("etcds", fx.eps, "bindlog-test");
    bindlog *s;
    bindlog_result r;
    bindlog_binding b;
    bindlog_stats st;
    assert_int_equal(open_as(&s, loc, gw()), 0);
    assert_int_equal(bindlog_bind(s, "chat:1", "s1", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_split(s, "chat:1", "s1", "s2", r.generation, NULL, 0, NULL),
                     BINDLOG_APPLIED);
    assert_int_equal(bindlog_get(s, "chat:1", &b), 0);
    assert_string_equal(b.session_id, "s2");
    /* statistics read etcd's status; compaction folds the log and compacts
     * etcd's history: the gateway's role needs nothing more for them */
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, 2);
    assert_true(st.file_size > 0);
    uint64_t removed = 0;
    assert_int_equal(bindlog_compact(s, 2, &removed, NULL, NULL), 0);
    assert_int_equal(removed, 1);
    assert_null(strstr(bindlog_path(s), fx.gw_pw));
    bindlog_close(s);
    free(loc);
}

/* The ETCDCTL_* environment stands in for options left NULL, with
 * etcdctl's "user:password" form. */
static void etcd_tls__etcdctl_environment(void **state)
{
    (void)state;
    char *loc = location("etcds", fx.eps, "bindlog-test"), up[256];
    bindlog *s;
    setenv("ETCDCTL_CACERT", tls_file("ca.pem"), 1);
    setenv("ETCDCTL_CERT", tls_file("client.pem"), 1);
    setenv("ETCDCTL_KEY", tls_file("client.key"), 1);
    snprintf(up, sizeof up, "gw:%s", fx.gw_pw);
    setenv("ETCDCTL_USER", up, 1);
    int rc = bindlog_open(&s, loc, NULL);
    if (rc != 0)
        fail_msg("%s", bindlog_last_error());
    assert_int_equal(bindlog_bind(s, "k", "s1", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    bindlog_close(s);
    /* ETCDCTL_PASSWORD; options override the environment */
    setenv("ETCDCTL_USER", "gw", 1);
    setenv("ETCDCTL_PASSWORD", fx.gw_pw, 1);
    assert_int_equal(bindlog_open(&s, loc, NULL), 0);
    bindlog_close(s);
    creds c = gw();
    c.password = WRONG_PASSWORD;
    expect_refused(loc, c, BINDLOG_EACCES, "wrong user name or password", NULL);
    /* a caller of the version 1 options (without the etcd fields) gets
     * the environment: the bytes past its struct are never read */
    struct {
        bindlog_options o;
        char poison[8];
    } v1;
    memset(&v1, 0xA5, sizeof v1);
    v1.o.version = 1;
    v1.o.durability = BINDLOG_DURABILITY_FULL;
    v1.o.read_only = 0;
    v1.o.map_size = 0;
    v1.o.max_readers = 0;
    v1.o.clock_ms = NULL;
    v1.o.clock_ctx = NULL;
    rc = bindlog_open(&s, loc, &v1.o);
    if (rc != 0)
        fail_msg("version 1 options: %s", bindlog_last_error());
    bindlog_close(s);
    unsetenv("ETCDCTL_CACERT");
    unsetenv("ETCDCTL_CERT");
    unsetenv("ETCDCTL_KEY");
    unsetenv("ETCDCTL_USER");
    unsetenv("ETCDCTL_PASSWORD");
    free(loc);
}

/* ---- transport failures: BINDLOG_EIO, with the endpoint and the reason ---------- */

static void etcd_tls__untrusted_server_is_eio(void **state)
{
    (void)state;
    char *loc = location("etcds", fx.eps, "bindlog-test");
    creds c = gw();
    c.cacert = tls_file("untrusted-ca.pem");
    expect_refused(loc, c, BINDLOG_EIO, fx.eps, "not signed by a trusted CA",
                   "untrusted-ca.pem", NULL);
    c.cacert = NULL; /* the system's store does not know the test CA either */
    expect_refused(loc, c, BINDLOG_EIO, fx.eps, "not signed by a trusted CA", NULL);
    free(loc);
}

static void etcd_tls__host_name_mismatch_is_eio(void **state)
{
    (void)state;
    char eps[64];
    snprintf(eps, sizeof eps, "localhost:%s", fx.port);
    char *loc = location("etcds", eps, "bindlog-test");
    expect_refused(loc, gw(), BINDLOG_EIO, eps, "not for this host name", NULL);
    free(loc);
}

static void etcd_tls__refused_client_certificates_are_eio(void **state)
{
    (void)state;
    char *loc = location("etcds", fx.eps, "bindlog-test");
    creds c = gw();
    c.cert = tls_file("untrusted.pem"); /* signed by a CA the server does not trust */
    c.key = tls_file("untrusted.key");
    expect_refused(loc, c, BINDLOG_EIO, fx.eps, "refuses our client certificate", NULL);
    c.cert = c.key = NULL; /* none at all */
    expect_refused(loc, c, BINDLOG_EIO, fx.eps, "refuses clients without a certificate", NULL);
    c.cert = tls_file("client-cn.pem"); /* trusted, but with a CommonName */
    c.key = tls_file("client-cn.key");
    expect_refused(loc, c, BINDLOG_EIO, fx.eps, "CommonName", NULL);
    free(loc);
}

static void etcd_tls__plain_http_to_tls_is_eio(void **state)
{
    (void)state;
    char *loc = location("etcd", fx.eps, "bindlog-test");
    creds none = {NULL, NULL, NULL, NULL, NULL};
    expect_refused(loc, none, BINDLOG_EIO, fx.eps, "etcds://", NULL);
    free(loc);
}

/* ---- auth failures: BINDLOG_EACCES ------------------------------------------------ */

static void etcd_tls__bad_credentials_are_eacces(void **state)
{
    (void)state;
    char *loc = location("etcds", fx.eps, "bindlog-test");
    creds c = gw();
    c.password = WRONG_PASSWORD;
    expect_refused(loc, c, BINDLOG_EACCES, fx.eps, "\"gw\"", "wrong user name or password",
                   NULL);
    c.user = "nobody";
    expect_refused(loc, c, BINDLOG_EACCES, fx.eps, "\"nobody\"", NULL);
    c.user = c.password = NULL;
    expect_refused(loc, c, BINDLOG_EACCES, fx.eps, "no user was given", NULL);
    free(loc);
}

/* gw's role covers bindlog-test/ only.  A store root made outside it can
 * be neither opened nor read nor written by gw; bindlog-test2/ is outside
 * too (a role's prefix is a byte prefix, slash included). */
static void etcd_tls__confined_user_stays_in_its_prefix(void **state)
{
    (void)state;
    char *other = location("etcds", fx.eps, "bindlog-other");
    bindlog *s, *g;
    bindlog_binding b;
    assert_int_equal(open_as(&s, other, root()), 0);
    assert_int_equal(bindlog_bind(s, "k", "root-s", NULL, NULL, NULL, 0, NULL),
                     BINDLOG_APPLIED);
    /* same location, another user: not the root handle's client */
    expect_refused(other, gw(), BINDLOG_EACCES, fx.eps, "\"gw\"", "no permission", NULL);

    bl_etcd *e = raw(gw());
    char key[256];
    bl_etcd_kvs kvs = {0};
    snprintf(key, sizeof key, "%s/b/k", strstr(other, "bindlog-other"));
    assert_int_equal(bl_etcd_range(e, key, strlen(key), NULL, 0, 0, 0, 0, &kvs), BINDLOG_EACCES);
    assert_non_null(strstr(bl_etcd_last_error(), "permission denied"));
    assert_int_equal(bl_etcd_put(e, key, strlen(key), "x", 1, NULL), BINDLOG_EACCES);
    assert_int_equal(bl_etcd_delete_range(e, key, strlen(key), NULL, 0, NULL, NULL),
                     BINDLOG_EACCES);
    const char *beside = "bindlog-test2/x";
    assert_int_equal(bl_etcd_put(e, beside, strlen(beside), "x", 1, NULL), BINDLOG_EACCES);
    assert_int_equal(bl_etcd_range(e, beside, strlen(beside), NULL, 0, 0, 0, 0, &kvs),
                     BINDLOG_EACCES);
    /* a Txn that only compares outside is refused as a whole */
    bl_etcd_cmp cmp = {.target = BL_ETCD_CMP_CREATE, .result = BL_ETCD_EQUAL, .key = key,
                       .key_len = strlen(key), .number = 0};
    const char *inside = "bindlog-test/tls-txn-probe";
    bl_etcd_op op = {.type = BL_ETCD_OP_PUT, .key = inside, .key_len = strlen(inside),
                     .value = "x", .value_len = 1};
    bl_etcd_txn_result res = {0};
    assert_int_equal(bl_etcd_txn(e, &cmp, 1, &op, 1, NULL, 0, &res), BINDLOG_EACCES);
    bl_etcd_txn_result_free(&res);
    /* inside, gw may */
    assert_int_equal(bl_etcd_put(e, inside, strlen(inside), "x", 1, NULL), 0);
    assert_int_equal(bl_etcd_delete_range(e, inside, strlen(inside), NULL, 0, NULL, NULL), 0);
    bl_etcd_close(e);

    /* nothing of root's store changed */
    assert_int_equal(bindlog_get(s, "k", &b), 0);
    assert_string_equal(b.session_id, "root-s");
    bindlog_close(s);
    /* and gw's own stores work beside it */
    char *mine = location("etcds", fx.eps, "bindlog-test");
    assert_int_equal(open_as(&g, mine, gw()), 0);
    bindlog_close(g);
    free(mine);
    free(other);
}

/* ---- the token: renewed once on expiry, unseen --------------------------------- */

typedef struct reader {
    bindlog *s;
    int rc;
} reader;

static void *read_once(void *arg)
{
    reader *r = arg;
    bindlog_binding b;
    r->rc = bindlog_get(r->s, "k", &b);
    return NULL;
}

static void etcd_tls__expired_token_is_renewed(void **state)
{
    (void)state;
    char *loc = location("etcds", fx.eps, "bindlog-test");
    bindlog *s;
    assert_int_equal(open_as(&s, loc, gw()), 0);
    assert_int_equal(bindlog_bind(s, "k", "s1", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    for (int round = 0; round < 2; round++) {
        /* the fixture's tokens live 2 s: this one is gone */
        struct timespec nap = {3, 200000000L};
        nanosleep(&nap, NULL);
        /* several threads meet the expired token at once */
        pthread_t t[4];
        reader r[4];
        for (int i = 0; i < 4; i++) {
            r[i].s = s;
            r[i].rc = -1000;
            assert_int_equal(pthread_create(&t[i], NULL, read_once, &r[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(t[i], NULL);
            assert_int_equal(r[i].rc, 0);
        }
        nanosleep(&nap, NULL);
        bindlog_result res;
        int rc = bindlog_bind(s, "k", round ? "s1" : "s2", NULL, NULL, NULL, 0, &res);
        if (rc != BINDLOG_APPLIED)
            fail_msg("bind after expiry: %s: %s", bindlog_code_name(rc), bindlog_last_error());
    }
    bindlog_close(s);
    free(loc);
}

/* ---- settings refused before any network: BINDLOG_EINVAL -------------------------- */

static void etcd_tls__bad_settings_are_einval(void **state)
{
    (void)state;
    char loc_creds[512];
    creds none = {NULL, NULL, NULL, NULL, NULL};
    char *loc = location("etcds", fx.eps, "bindlog-test");
    /* credentials in the location: refused, and never echoed */
    snprintf(loc_creds, sizeof loc_creds, "etcds://gw:%s@%s/bindlog-test/x", fx.gw_pw, fx.eps);
    expect_refused(loc_creds, none, BINDLOG_EINVAL, "credentials never go in a location",
                   NULL);
    snprintf(loc_creds, sizeof loc_creds, "etcds://%s,gw:%s@127.0.0.1:2/bindlog-test/x",
             fx.eps, WRONG_PASSWORD);
    expect_refused(loc_creds, none, BINDLOG_EINVAL, "credentials", NULL);

    creds c = gw();
    c.cacert = "/nonexistent/ca.pem";
    expect_refused(loc, c, BINDLOG_EINVAL, "/nonexistent/ca.pem", NULL);
    c = gw();
    c.key = NULL;
    expect_refused(loc, c, BINDLOG_EINVAL, "needs its key", NULL);
    c = gw();
    c.password = NULL;
    expect_refused(loc, c, BINDLOG_EINVAL, "a user needs a password", NULL);
    c = gw();
    c.user = NULL;
    expect_refused(loc, c, BINDLOG_EINVAL, "a password a user", NULL);
    /* TLS files for plain http: a mistake, not something to ignore */
    char *plain = location("etcd", fx.eps, "bindlog-test");
    expect_refused(plain, gw(), BINDLOG_EINVAL, "needs TLS (etcds://)", NULL);
    free(plain);

    bindlog *s;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.etcd_max_txn_ops = 5;
    assert_int_equal(bindlog_open(&s, loc, &o), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "etcd_max_txn_ops 5"));
    free(loc);
}

/* ---- no message holds a password ----------------------------------------------- */

static void etcd_tls__no_password_in_any_message(void **state)
{
    (void)state;
    assert_true(nmsgs >= 15); /* the cases above ran first and failed as expected */
    for (size_t i = 0; i < nmsgs; i++) {
        if (strstr(msgs[i], fx.gw_pw) != NULL || strstr(msgs[i], fx.root_pw) != NULL ||
            strstr(msgs[i], WRONG_PASSWORD) != NULL)
            fail_msg("message %zu holds a password: %s", i, msgs[i]);
    }
}

int main(void)
{
    const char *dir = getenv("BINDLOG_TEST_ETCDS_DIR");
    char endpoints[300] = "";
    if (dir != NULL) {
        snprintf(fx.dir, sizeof fx.dir, "%s", dir);
        char f[2200];
        snprintf(f, sizeof f, "%s/endpoints", dir);
        read_line(f, endpoints, sizeof endpoints);
    }
    if (endpoints[0] == '\0' || strchr(endpoints, ',') != NULL) {
        const char *req = getenv("BINDLOG_REQUIRE_ETCD");
        if (req != NULL && strcmp(req, "1") == 0) {
            fprintf(stderr, "no etcds fixture (BINDLOG_TEST_ETCDS_DIR): is etcd installed?\n");
            return 1;
        }
        printf("[  SKIPPED ] no etcd with TLS and auth (the etcds fixture): skipped\n");
        return 0;
    }
    snprintf(fx.eps, sizeof fx.eps, "%s", endpoints);
    snprintf(fx.port, sizeof fx.port, "%s", strrchr(endpoints, ':') + 1);
    read_line(tls_file("root.password"), fx.root_pw, sizeof fx.root_pw);
    read_line(tls_file("gw.password"), fx.gw_pw, sizeof fx.gw_pw);
    if (fx.root_pw[0] == '\0' || fx.gw_pw[0] == '\0') {
        fprintf(stderr, "the etcds fixture in %s has no passwords\n", fx.dir);
        return 1;
    }
    /* each case says what it uses: nothing from the caller's environment */
    unsetenv("ETCDCTL_CACERT");
    unsetenv("ETCDCTL_CERT");
    unsetenv("ETCDCTL_KEY");
    unsetenv("ETCDCTL_USER");
    unsetenv("ETCDCTL_PASSWORD");

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(etcd_tls__gateway_works_with_least_privilege),
        cmocka_unit_test(etcd_tls__etcdctl_environment),
        cmocka_unit_test(etcd_tls__untrusted_server_is_eio),
        cmocka_unit_test(etcd_tls__host_name_mismatch_is_eio),
        cmocka_unit_test(etcd_tls__refused_client_certificates_are_eio),
        cmocka_unit_test(etcd_tls__plain_http_to_tls_is_eio),
        cmocka_unit_test(etcd_tls__bad_credentials_are_eacces),
        cmocka_unit_test(etcd_tls__confined_user_stays_in_its_prefix),
        cmocka_unit_test(etcd_tls__expired_token_is_renewed),
        cmocka_unit_test(etcd_tls__bad_settings_are_einval),
        cmocka_unit_test(etcd_tls__no_password_in_any_message),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    cleanup();
    return failed;
}
