/*
 * testutil.c -- temporary directories and store locations for the tests
 * (see testutil.h).
 */
/* nftw() and FTW_PHYS/FTW_DEPTH are XSI; mkdtemp() is POSIX.1-2008;
 * mincore() is neither (Linux's, for tu_evict). */
#define _DEFAULT_SOURCE
#if !defined(_XOPEN_SOURCE) || _XOPEN_SOURCE < 700
#undef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700
#endif

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <pthread.h>
#include <time.h>

#include "etcd/etcd_client.h"

int tu_evict(const char *file)
{
#if defined(__linux__)
    struct stat st;
    int fd = open(file, O_RDONLY | O_CLOEXEC), out = 0;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    (void)fdatasync(fd);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    /* out if its first page is: mincore on a mapping of it */
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    unsigned char vec = 1;
    if (map != MAP_FAILED) {
        out = mincore(map, 1, &vec) == 0 && !(vec & 1);
        munmap(map, (size_t)st.st_size);
    }
    close(fd);
    return out;
#else
    (void)file;
    return 0;
#endif
}

int tu_random_maps_of(const char *file)
{
#if defined(__linux__)
    char want[PATH_MAX], line[PATH_MAX + 256];
    if (realpath(file, want) == NULL)
        return -1;
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (fp == NULL)
        return -1;
    size_t wn = strlen(want);
    unsigned long lo, hi;
    char perms[5];
    int in = 0, n = 0;
    while (fgets(line, sizeof line, fp) != NULL) {
        size_t ln = strcspn(line, "\n");
        line[ln] = 0;
        if (strncmp(line, "VmFlags:", 8) == 0) {
            if (in && strstr(line, " rr") != NULL)
                n++;
            in = 0;
        } else if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3) {
            /* a mapping's first line: "start-end perms offset dev inode path" */
            in = ln > wn && strcmp(line + ln - wn, want) == 0 && line[ln - wn - 1] == ' ';
        }
    }
    fclose(fp);
    return n;
#else
    (void)file;
    return -1;
#endif
}

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

/* ---- one test source, both backends (see testutil.h) ---------------------------- */

int tu_backend_is_etcd(void)
{
    const char *b = getenv("BINDLOG_TEST_BACKEND");
    return b != NULL && (strcmp(b, "etcd") == 0 || strcmp(b, "etcds") == 0);
}

/* etcds: TLS, and the fixture's credentials (testutil.h). */
static int backend_is_etcds(void)
{
    const char *b = getenv("BINDLOG_TEST_BACKEND");
    return b != NULL && strcmp(b, "etcds") == 0;
}

int tu_is_etcd_location(const char *loc)
{
    return loc != NULL && (strncmp(loc, "etcd://", 7) == 0 || strncmp(loc, "etcds://", 8) == 0);
}

/* The etcds fixture writes a random password for its user to a file:
 * hand it to the library the way an operator would, in ETCDCTL_PASSWORD. */
static void load_password(void)
{
    const char *f = getenv("BINDLOG_TEST_ETCD_PASSWORD_FILE");
    char pw[256];
    if (f == NULL || f[0] == '\0' || getenv("ETCDCTL_PASSWORD") != NULL)
        return;
    FILE *fp = fopen(f, "r");
    if (fp == NULL)
        return;
    if (fgets(pw, sizeof pw, fp) != NULL) {
        pw[strcspn(pw, "\r\n")] = '\0';
        setenv("ETCDCTL_PASSWORD", pw, 1);
    }
    fclose(fp);
}

static char endpoints_buf[1024];
static pthread_once_t endpoints_once = PTHREAD_ONCE_INIT;

static void load_endpoints(void)
{
    const char *v = getenv("BINDLOG_TEST_ETCD_ENDPOINTS");
    if (v != NULL && v[0] != '\0') {
        snprintf(endpoints_buf, sizeof endpoints_buf, "%s", v);
        return;
    }
    const char *f = getenv("BINDLOG_TEST_ETCD_ENDPOINTS_FILE");
    if (f == NULL || f[0] == '\0')
        return;
    FILE *fp = fopen(f, "r");
    if (fp == NULL)
        return;
    if (fgets(endpoints_buf, sizeof endpoints_buf, fp) == NULL)
        endpoints_buf[0] = '\0';
    fclose(fp);
    endpoints_buf[strcspn(endpoints_buf, "\r\n")] = '\0';
}

const char *tu_etcd_endpoints(void)
{
    pthread_once(&endpoints_once, load_endpoints);
    return endpoints_buf[0] != '\0' ? endpoints_buf : NULL;
}

int tu_backend_skip(void)
{
    if (backend_is_etcds())
        load_password();
    if (!tu_backend_is_etcd() || tu_etcd_endpoints() != NULL)
        return 0;
    const char *req = getenv("BINDLOG_REQUIRE_ETCD");
    if (req != NULL && strcmp(req, "1") == 0) {
        fprintf(stderr, "BINDLOG_TEST_BACKEND=etcd and BINDLOG_REQUIRE_ETCD=1, but no etcd "
                        "endpoints: is etcd installed?\n");
        exit(1);
    }
    printf("[  SKIPPED ] etcd is not available: the etcd variant of this test is skipped\n");
    return 1;
}

char *tu_store_location(const char *tag)
{
    static unsigned counter;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    if (!tu_backend_is_etcd())
        return tu_mkdtemp(tag);
    const char *eps = tu_etcd_endpoints();
    if (eps == NULL) {
        fprintf(stderr, "tu_store_location: BINDLOG_TEST_BACKEND=etcd but no endpoints "
                        "(BINDLOG_TEST_ETCD_ENDPOINTS or _FILE)\n");
        abort();
    }
    if (tag == NULL || tag[0] == '\0')
        tag = "test";
    pthread_mutex_lock(&mu);
    unsigned n = ++counter;
    pthread_mutex_unlock(&mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    size_t len = strlen(eps) + strlen(tag) + 128;
    char *loc = malloc(len);
    if (loc == NULL) {
        fprintf(stderr, "tu_store_location: out of memory\n");
        abort();
    }
    snprintf(loc, len, "%s://%s/bindlog-test/%s-%ld-%u-%lx", backend_is_etcds() ? "etcds" : "etcd",
             eps, tag, (long)getpid(), n, (unsigned long)(ts.tv_nsec ^ ts.tv_sec));
    return loc;
}

/* A client on the endpoints of `loc` and its prefix "PREFIX/" (malloc'd);
 * on etcds:// with the TLS files and credentials of the ETCDCTL_*
 * environment, as the library takes them. */
static bl_etcd *loc_client(const char *loc, unsigned char **prefix, size_t *plen)
{
    if (!tu_is_etcd_location(loc))
        return NULL;
    int tls = strncmp(loc, "etcds://", 8) == 0;
    const char *p = loc + (tls ? 8 : 7), *slash = strchr(p, '/');
    bl_etcd *c = NULL;
    bl_etcd_options o = BL_ETCD_OPTIONS_INIT;
    *prefix = NULL;
    if (slash == NULL)
        return NULL;
    if (tls) {
        o.tls = 1;
        o.cacert = getenv("ETCDCTL_CACERT");
        o.cert = getenv("ETCDCTL_CERT");
        o.key = getenv("ETCDCTL_KEY");
        o.user = getenv("ETCDCTL_USER");
        o.password = o.user ? getenv("ETCDCTL_PASSWORD") : NULL;
    }
    char *eps = strndup(p, (size_t)(slash - p));
    *plen = strlen(slash + 1) + 1;
    *prefix = malloc(*plen);
    if (eps == NULL || *prefix == NULL || bl_etcd_open(eps, &o, &c) != 0) {
        free(eps);
        free(*prefix);
        *prefix = NULL;
        return NULL;
    }
    free(eps);
    memcpy(*prefix, slash + 1, *plen - 1);
    (*prefix)[*plen - 1] = '/';
    return c;
}

void tu_store_remove(const char *loc)
{
    unsigned char *prefix, end[1100];
    size_t plen;
    if (loc == NULL)
        return;
    if (!tu_is_etcd_location(loc)) {
        tu_rmtree(loc);
        return;
    }
    bl_etcd *c = loc_client(loc, &prefix, &plen);
    if (c == NULL)
        return;
    if (plen < sizeof end) {
        size_t elen = bl_etcd_prefix_end(prefix, plen, end);
        if (bl_etcd_delete_range(c, prefix, plen, end, elen, NULL, NULL) != 0)
            fprintf(stderr, "tu_store_remove: %s: %s\n", loc, bl_etcd_last_error());
    }
    free(prefix);
    bl_etcd_close(c);
}

int tu_etcd_put(const char *loc, const char *name, const void *value, size_t len)
{
    unsigned char *prefix;
    size_t plen;
    bl_etcd *c = loc_client(loc, &prefix, &plen);
    if (c == NULL)
        return BINDLOG_EINVAL;
    size_t n = strlen(name);
    unsigned char *k = malloc(plen + n);
    int rc = BINDLOG_ENOMEM;
    if (k != NULL) {
        memcpy(k, prefix, plen);
        memcpy(k + plen, name, n);
        rc = bl_etcd_put(c, k, plen + n, value, len, NULL);
    }
    free(k);
    free(prefix);
    bl_etcd_close(c);
    return rc;
}

int tu_etcd_del(const char *loc, const void *name, size_t n)
{
    unsigned char *prefix;
    size_t plen;
    int64_t deleted = 0;
    bl_etcd *c = loc_client(loc, &prefix, &plen);
    if (c == NULL)
        return BINDLOG_EINVAL;
    unsigned char *k = malloc(plen + n);
    int rc = BINDLOG_ENOMEM;
    if (k != NULL) {
        memcpy(k, prefix, plen);
        memcpy(k + plen, name, n);
        rc = bl_etcd_delete_range(c, k, plen + n, NULL, 0, &deleted, NULL);
        if (rc == 0 && deleted != 1)
            rc = BINDLOG_ENOTFOUND;
    }
    free(k);
    free(prefix);
    bl_etcd_close(c);
    return rc;
}

long tu_etcd_count(const char *loc)
{
    unsigned char *prefix, end[1100];
    size_t plen;
    long n = -1;
    bl_etcd *c = loc_client(loc, &prefix, &plen);
    if (c == NULL)
        return -1;
    if (plen < sizeof end) {
        bl_etcd_kvs kvs = {0};
        size_t elen = bl_etcd_prefix_end(prefix, plen, end);
        if (bl_etcd_range(c, prefix, plen, end, elen, 0, 0, BL_ETCD_COUNT_ONLY, &kvs) == 0)
            n = (long)kvs.count;
        bl_etcd_kvs_free(&kvs);
    }
    free(prefix);
    bl_etcd_close(c);
    return n;
}
