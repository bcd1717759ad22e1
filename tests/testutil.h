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

#include <stddef.h>

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

/*
 * Drop `file` from the page cache (its dirty pages written first), as a
 * restart on a busy host finds it.  1 if it is out of the cache now, 0 if
 * the file system keeps it in memory (tmpfs) or this system cannot tell
 * (not Linux): the caller then checks what does not depend on it.
 */
int tu_evict(const char *file);

/*
 * How many of this process's mappings of `file` are advised for random
 * reads ("rr" among their VmFlags in /proc/self/smaps), or -1 where that
 * cannot be told (not Linux).
 */
int tu_random_maps_of(const char *file);

/* ---- one test source, both backends ------------------------------------------
 *
 * With BINDLOG_TEST_BACKEND=etcd the contract tests run against etcd: the
 * endpoints come from $BINDLOG_TEST_ETCD_ENDPOINTS, or from the first line
 * of the file named by $BINDLOG_TEST_ETCD_ENDPOINTS_FILE (written by the
 * ctest fixture).  With BINDLOG_TEST_BACKEND=etcds, the same over TLS with
 * etcd's auth on: locations are etcds://, and the library (and testutil's
 * own client) take the CA, client certificate, user and password from the
 * ETCDCTL_* environment; tu_backend_skip() sets ETCDCTL_PASSWORD from the
 * file $BINDLOG_TEST_ETCD_PASSWORD_FILE (the fixture's random password).
 * Otherwise they run on LMDB directories.
 */

/* 1 if the tests run on etcd (BINDLOG_TEST_BACKEND=etcd or etcds), else 0. */
int tu_backend_is_etcd(void);

/*
 * The etcd endpoints of the etcd run, or NULL when none are configured (the
 * fixture found no etcd): tests then skip, unless BINDLOG_REQUIRE_ETCD=1,
 * where tu_store_location() aborts.  Static; never freed.
 */
const char *tu_etcd_endpoints(void);

/*
 * A fresh, empty store location: a tu_mkdtemp(tag) directory, or on etcd
 * "etcd://ENDPOINTS/bindlog-test/<tag>-<pid>-<counter>-<random>", a prefix
 * nobody uses.  The caller frees it (after tu_store_remove()).  Aborts on
 * failure like tu_mkdtemp().
 */
char *tu_store_location(const char *tag);

/* Remove what tu_store_location() made: tu_rmtree() of the directory, or
 * delete every key under the etcd prefix.  NULL is a no-op. */
void tu_store_remove(const char *loc);

/*
 * Call first in main() of a test that runs on both backends: 1 means "skip
 * the whole program" (etcd run without endpoints: etcd is not installed;
 * a message says so), 0 means go on.  With BINDLOG_REQUIRE_ETCD=1 a missing
 * etcd is a failure instead: it prints why and exits with status 1.
 */
int tu_backend_skip(void);

/* etcd locations only: put PREFIX "/" name = value directly (to forge or
 * plant foreign data), count every key under PREFIX "/", or read one back.
 * put returns 0 or a BINDLOG_E* code; count returns the number or -1. */
int tu_etcd_put(const char *loc, const char *name, const void *value, size_t len);
long tu_etcd_count(const char *loc);
/* Delete PREFIX "/" name (n bytes: a children key holds a NUL); 0 if it
 * was there and is gone, BINDLOG_ENOTFOUND if it was not there. */
int tu_etcd_del(const char *loc, const void *name, size_t n);

/* 1 if `loc` is an etcd location ("etcd://..." or "etcds://..."). */
int tu_is_etcd_location(const char *loc);

/* TU_FORK_SANITIZED: built with ASan or TSan, whose allocators are not
 * fork-safe.  A child forked while another thread of the parent is inside
 * the sanitizer's malloc can wait forever on the runtime's own lock (seen
 * under ASan: a child stuck in SizeClassAllocator64's mutex); glibc's
 * malloc takes its locks around fork.  Tests that fork while the parent's
 * threads run quiet them first, or run that case without sanitizers. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TU_FORK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TU_FORK_SANITIZED 1
#endif
#endif

/* TU_SANITIZED: the same builds.  Long randomized campaigns run fewer
 * rounds there by default: a round costs 4-8 times as much, and the
 * sanitizer's value is in the code paths each round takes, which the
 * plain build's full-size run covers in number. */
#ifdef TU_FORK_SANITIZED
#define TU_SANITIZED 1
#endif

/* TU_TSAN: built with ThreadSanitizer, under which a store's write path
 * runs 20-30 times slower: a test that needs a store of tens of MiB skips
 * there (the plain and ASan builds run it; its threads are the ones the
 * smaller tests of its suite already run under TSan). */
#if defined(__SANITIZE_THREAD__)
#define TU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TU_TSAN 1
#endif
#endif

#endif /* BINDLOG_TESTUTIL_H */
