/*
 * testutil.h -- helpers shared by the bindlog tests.
 *
 * Every test gets its own temporary store directory and removes it when it
 * is done (STYLE.md).  Directories are made under $BINDLOG_TEST_TMPDIR (set by
 * ctest to <build>/tmp), else $TMPDIR, else /tmp, so a failed run leaves its
 * stores in the build tree for inspection rather than in /tmp.
 *
 * BINDLOG_TEST_DATA_DIR (a string macro set by tests/CMakeLists.txt) names
 * tests/data in the source tree, for golden files.
 */
#ifndef BINDLOG_TESTUTIL_H
#define BINDLOG_TESTUTIL_H

#ifndef BINDLOG_TEST_DATA_DIR
#define BINDLOG_TEST_DATA_DIR "tests/data"
#endif

/*
 * Make a fresh, empty, uniquely named directory "bindlog-<tag>-XXXXXX" under
 * the test temporary directory and return its path.  The caller owns the
 * string and free()s it (usually after tu_rmtree()).  `tag` should be short
 * and free of '/'; NULL means "test".  Never returns NULL: on any failure it
 * prints the reason to stderr and aborts, since a test cannot go on without
 * its directory.
 */
char *tu_mkdtemp(const char *tag);

/*
 * Remove `path` and everything below it, like `rm -rf`, without following
 * symbolic links.  NULL is a no-op, and so is a path that does not exist.
 * Errors are reported on stderr but do not stop the test: a leftover
 * directory is not a test failure.
 */
void tu_rmtree(const char *path);

#endif /* BINDLOG_TESTUTIL_H */
