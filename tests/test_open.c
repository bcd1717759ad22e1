/*
 * test_open.c -- choosing a backend from the location given to bindlog_open.
 *
 * A plain path is an LMDB directory and "etcd://" the etcd backend; any other
 * "scheme://" is a typo or a backend this build does not have, and must be
 * refused rather than taken for a relative directory called "scheme:".
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bindlog.h"
#include "testutil.h"

static void open__unknown_scheme_is_refused(void **state)
{
    (void)state;
    char *tmp = tu_mkdtemp("open");
    char *cwd = getcwd(NULL, 0);
    const char *bad[] = {"etdc://127.0.0.1:2379/p", "redis://localhost/x", "s3://bucket/key",
                         "file://store"};
    struct stat st;

    /* relative to a fresh directory, so a wrongly created store shows */
    assert_int_equal(chdir(tmp), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        bindlog *s = (bindlog *)&st; /* must be reset to NULL */
        assert_int_equal(bindlog_open(&s, bad[i], NULL), BINDLOG_EINVAL);
        assert_null(s);
    }
    assert_int_equal(stat("etdc:", &st), -1);
    assert_int_equal(stat("file:", &st), -1);

    /* a path with "://" further on, or a colon alone, is still a directory */
    bindlog *s = NULL;
    assert_int_equal(bindlog_open(&s, "a:b", NULL), 0);
    assert_int_equal(bindlog_bind(s, "k", "s1", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    bindlog_close(s);
    assert_int_equal(stat("a:b/data.mdb", &st), 0);

    assert_int_equal(chdir(cwd), 0);
    free(cwd);
    tu_rmtree(tmp);
    free(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(open__unknown_scheme_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
