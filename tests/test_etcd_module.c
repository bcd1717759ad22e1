/*
 * test_etcd_module.c -- libbindlog loads the etcd backend as a module
 * (src/core/module.h), and says what to install when it cannot.
 *
 * Unlike the other tests this one links the shared libbindlog.so, as an
 * application does, so that the loader looks beside the real library.
 * Each case runs in a child process: a loaded module stays loaded, and the
 * cases need the loader to start from nothing.
 *
 * Paths come from tests/CMakeLists.txt: BL_LIBRARY (libbindlog.so),
 * BL_MODULE (libbindlog-etcd.so), BL_FAKE_OTHER_RELEASE and BL_FAKE_REFUSING
 * (tests/etcd/fake_module.c), BL_INSTALL_LIBDIR.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindlog.h"

/* Nothing listens on port 1 of the loopback interface: an etcd open there
 * fails at once with BINDLOG_EIO once the module is loaded. */
#define NOWHERE "etcd://127.0.0.1:1/module-test"

/* Run fn in a child; the child's failures print why and exit non-zero. */
static void in_child(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void check(int ok, const char *fmt, ...)
{
    if (ok)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "child: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    _exit(1);
}

/* Open `loc` and expect rc, and a last-error message containing each of
 * the NULL-terminated strings that follow. */
static void expect_open(int (*open_fn)(bindlog **, const char *, const bindlog_options *),
                        const char *(*last_error)(void), const char *loc, int rc, ...)
{
    bindlog *s = NULL;
    int got = open_fn(&s, loc, NULL);
    const char *msg = last_error();
    check(got == rc, "open %s: %s (%d), expected %d; last error: %s", loc,
          bindlog_code_name(got), got, rc, msg);
    check(s == NULL, "a failed open left a handle");
    va_list ap;
    va_start(ap, rc);
    for (const char *want; (want = va_arg(ap, const char *)) != NULL;)
        check(strstr(msg, want) != NULL, "last error \"%s\" does not mention \"%s\"", msg, want);
    va_end(ap);
}

static void missing_module(void)
{
    setenv("BINDLOG_ETCD_MODULE", "/nonexistent/libbindlog-etcd.so", 1);
    for (int i = 0; i < 2; i++) { /* a failed load is tried again, not remembered */
        expect_open(bindlog_open, bindlog_last_error, NOWHERE, BINDLOG_ENOTSUP,
                    "open etcd://127.0.0.1:1/module-test", "libbindlog-etcd.so",
                    "/nonexistent/libbindlog-etcd.so", "BINDLOG_ETCD_MODULE", NULL);
        expect_open(bindlog_open, bindlog_last_error, "etcds://127.0.0.1:1/x", BINDLOG_ENOTSUP,
                    "install", NULL);
    }
    check(strcmp(bindlog_strerror(BINDLOG_ENOTSUP), "not supported by this build") == 0,
          "strerror(ENOTSUP)");
}

static void module__missing_is_enotsup(void **state)
{
    (void)state;
    in_child(missing_module);
}

/* LMDB stores never touch the module. */
static void lmdb_alone(void)
{
    char dir[] = "/tmp/bindlog-module-XXXXXX";
    const char *base = getenv("BINDLOG_TEST_TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/bindlog-module-XXXXXX", base ? base : "/tmp");
    char *d = mkdtemp(base ? path : dir);
    check(d != NULL, "mkdtemp: %s", strerror(errno));
    setenv("BINDLOG_ETCD_MODULE", "/nonexistent/libbindlog-etcd.so", 1);
    bindlog *s;
    char store[4200];
    snprintf(store, sizeof store, "%s/store", d);
    check(bindlog_open(&s, store, NULL) == 0, "LMDB open: %s", bindlog_last_error());
    check(bindlog_bind(s, "k", "s1", NULL, NULL, NULL, 0, NULL) == BINDLOG_APPLIED, "bind");
    bindlog_close(s);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    check(system(cmd) == 0, "rm");
}

static void module__lmdb_needs_no_module(void **state)
{
    (void)state;
    in_child(lmdb_alone);
}

static void not_a_module(void)
{
    setenv("BINDLOG_ETCD_MODULE", BL_LIBRARY, 1);
    expect_open(bindlog_open, bindlog_last_error, NOWHERE, BINDLOG_ENOTSUP, BL_LIBRARY,
                "not a bindlog module", NULL);
}

static void module__not_a_module_refused(void **state)
{
    (void)state;
    in_child(not_a_module);
}

static void other_release(void)
{
    setenv("BINDLOG_ETCD_MODULE", BL_FAKE_OTHER_RELEASE, 1);
    expect_open(bindlog_open, bindlog_last_error, NOWHERE, BINDLOG_ENOTSUP,
                "0.0.0-fake", BINDLOG_VERSION_STRING, "same release", NULL);
}

static void module__other_release_refused(void **state)
{
    (void)state;
    in_child(other_release);
}

static void refusing(void)
{
    setenv("BINDLOG_ETCD_MODULE", BL_FAKE_REFUSING, 1);
    expect_open(bindlog_open, bindlog_last_error, NOWHERE, BINDLOG_ENOTSUP,
                "refuses every host", NULL);
}

static void module__refusing_module_is_enotsup(void **state)
{
    (void)state;
    in_child(refusing);
}

/* With no override the module beside libbindlog.so is found and runs: the
 * open gets as far as the network, and the module's own message (which
 * endpoint, what happened) reaches bindlog_last_error(). */
static void beside(void)
{
    unsetenv("BINDLOG_ETCD_MODULE");
    expect_open(bindlog_open, bindlog_last_error, NOWHERE, BINDLOG_EIO, "tried 127.0.0.1:1 (",
                NULL);
    Dl_info info;
    void *mod = dlopen(BL_MODULE, RTLD_NOW | RTLD_NOLOAD);
    check(mod != NULL, "the module beside the library was not the one loaded");
    check(dladdr(dlsym(mod, "bindlog_module_init"), &info) != 0, "dladdr");
    check(strcmp(info.dli_fname, BL_MODULE) == 0, "loaded %s, not %s", info.dli_fname,
          BL_MODULE);
}

static void module__found_beside_the_library(void **state)
{
    (void)state;
    in_child(beside);
}

/* A copy of libbindlog.so in a directory without the module looks there,
 * then in the install libdir, and says so. */
static void elsewhere(void)
{
    char mod[4200];
    snprintf(mod, sizeof mod, "%s/libbindlog-etcd.so", BL_INSTALL_LIBDIR);
    if (access(mod, F_OK) == 0) {
        printf("child: %s is installed: nothing to test\n", mod);
        return;
    }
    unsetenv("BINDLOG_ETCD_MODULE");
    const char *base = getenv("BINDLOG_TEST_TMPDIR");
    char dir[4096], copy[4200], cmd[9000];
    snprintf(dir, sizeof dir, "%s/bindlog-copy-XXXXXX", base ? base : "/tmp");
    check(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(copy, sizeof copy, "%s/libbindlog-copy.so", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", BL_LIBRARY, copy);
    check(system(cmd) == 0, "cp");
    void *lib = dlopen(copy, RTLD_NOW | RTLD_LOCAL);
    check(lib != NULL, "dlopen %s: %s", copy, dlerror());
    int (*open_fn)(bindlog **, const char *, const bindlog_options *);
    const char *(*last_error)(void);
    void *p = dlsym(lib, "bindlog_open"), *q = dlsym(lib, "bindlog_last_error");
    check(p != NULL && q != NULL, "dlsym");
    memcpy(&open_fn, &p, sizeof p);
    memcpy(&last_error, &q, sizeof q);
    char here[4300];
    snprintf(here, sizeof here, "%s/libbindlog-etcd.so", dir);
    expect_open(open_fn, last_error, NOWHERE, BINDLOG_ENOTSUP, here, mod, NULL);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    check(system(cmd) == 0, "rm");
}

static void module__not_found_elsewhere(void **state)
{
    (void)state;
    in_child(elsewhere);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(module__missing_is_enotsup),
        cmocka_unit_test(module__lmdb_needs_no_module),
        cmocka_unit_test(module__not_a_module_refused),
        cmocka_unit_test(module__other_release_refused),
        cmocka_unit_test(module__refusing_module_is_enotsup),
        cmocka_unit_test(module__found_beside_the_library),
        cmocka_unit_test(module__not_found_elsewhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
