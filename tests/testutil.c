/*
 * testutil.c -- temporary directories for the tests (see testutil.h).
 */
/* nftw() and FTW_PHYS/FTW_DEPTH are XSI; mkdtemp() is POSIX.1-2008. */
#if !defined(_XOPEN_SOURCE) || _XOPEN_SOURCE < 700
#undef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700
#endif

#include "testutil.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The base directory: first non-empty of $BINDLOG_TEST_TMPDIR, $TMPDIR, /tmp. */
static const char *tmp_base(void)
{
    const char *vars[] = {"BINDLOG_TEST_TMPDIR", "TMPDIR"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v != NULL && v[0] != '\0')
            return v;
    }
    return "/tmp";
}

char *tu_mkdtemp(const char *tag)
{
    const char *base = tmp_base();
    if (tag == NULL || tag[0] == '\0')
        tag = "test";

    /* ctest creates <build>/tmp at configure time, but a test binary run by
     * hand after `rm -rf build/tmp` should still work. */
    if (mkdir(base, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "tu_mkdtemp: cannot create %s: %s\n", base, strerror(errno));
        abort();
    }

    size_t len = strlen(base) + strlen("/bindlog-") + strlen(tag) + strlen("-XXXXXX") + 1;
    char *path = malloc(len);
    if (path == NULL) {
        fprintf(stderr, "tu_mkdtemp: out of memory\n");
        abort();
    }
    snprintf(path, len, "%s/bindlog-%s-XXXXXX", base, tag);
    if (mkdtemp(path) == NULL) {
        fprintf(stderr, "tu_mkdtemp: mkdtemp(%s): %s\n", path, strerror(errno));
        abort();
    }
    return path;
}

/* nftw callback: called children first (FTW_DEPTH), so directories are empty
 * by the time they are removed. */
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    int rc = (flag == FTW_DP) ? rmdir(path) : unlink(path);
    if (rc != 0 && errno != ENOENT)
        fprintf(stderr, "tu_rmtree: cannot remove %s: %s\n", path, strerror(errno));
    return 0; /* keep going: remove as much as possible */
}

void tu_rmtree(const char *path)
{
    if (path == NULL)
        return;
    if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        fprintf(stderr, "tu_rmtree: cannot walk %s: %s\n", path, strerror(errno));
}
