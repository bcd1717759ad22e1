/*
 * stream_fuzzer.c -- bindlog_import() of arbitrary bytes.
 *
 * Every input is imported twice, as a whole stream read from a file
 * descriptor:
 *
 *  - into a scratch store that already holds a short history (the events of
 *    base_history(), at fixed times), where a full stream must be refused
 *    (BINDLOG_EEXIST) and an incremental one may append at head + 1;
 *  - into an empty store, where a full stream may restore.
 *
 * Either way the import must not crash, and:
 *  - when it refuses (negative return), the code is one bindlog.h documents
 *    for a refused stream (BINDLOG_ECORRUPT, _EVERSION, _EEXIST,
 *    _ENOTFOUND), the store's digest and head are exactly what they were
 *    (nothing of a partial stream applied), and err_offset is set and
 *    within the input;
 *  - when it accepts, `records` is the number of LSNs the head moved, and
 *    bindlog_check() finds no problem in the result; a store restored into
 *    an empty one exports (bindlog_export) into a stream that imports into
 *    another empty store with the same digest.
 * Any violation aborts.
 *
 * Seeds (fuzz/corpora/stream/) are real exports made by make_stream_seeds.c,
 * plus their torn and altered variants.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bindlog.h"
#include "stream_base.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char g_base[4096];
static int64_t g_clock;

static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return g_clock;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "stream_fuzzer: %s (%s)\n", what, bindlog_code_name(rc));
    abort();
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static void rm_tree(const char *path) { nftw(path, rm_entry, 8, FTW_DEPTH | FTW_PHYS); }

static void rm_base(void)
{
    if (g_base[0])
        rm_tree(g_base);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    struct stat st;
    const char *base = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0
                           ? "/dev/shm"
                           : getenv("TMPDIR");
    if (base == NULL || base[0] == '\0')
        base = "/tmp";
    snprintf(g_base, sizeof(g_base), "%s/bindlog-stream-fuzz-XXXXXX", base);
    if (mkdtemp(g_base) == NULL) {
        perror(g_base);
        abort();
    }
    atexit(rm_base);
    /* full streams are imported (and checked) by the bulk replay: three
     * partitions make even tiny streams go through its partitioned merge */
    if (getenv("BINDLOG_BULK_PARTITIONS") == NULL)
        setenv("BINDLOG_BULK_PARTITIONS", "3", 1);
    return 0;
}

static bindlog *open_fresh(const char *name)
{
    char dir[4200];
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s;
    snprintf(dir, sizeof(dir), "%s/%s", g_base, name);
    rm_tree(dir);
    o.durability = BINDLOG_DURABILITY_NONE;
    o.clock_ms = clock_fn;
    int rc = bindlog_open(&s, dir, &o);
    if (rc != 0)
        die("open", rc);
    return s;
}

/* A file holding the bytes, positioned at 0. */
static int bytes_fd(const void *data, size_t size)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/input", g_base);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(path);
        abort();
    }
    unlink(path);
    const char *p = data;
    for (size_t done = 0; done < size;) {
        ssize_t n = write(fd, p + done, size - done);
        if (n <= 0)
            abort();
        done += (size_t)n;
    }
    if (lseek(fd, 0, SEEK_SET) != 0)
        abort();
    return fd;
}

static void state(bindlog *s, unsigned char d[BINDLOG_DIGEST_SIZE], uint64_t *head)
{
    int rc = bindlog_digest(s, d, head);
    if (rc != 0)
        die("digest", rc);
}

static void check_clean(bindlog *s, const char *what)
{
    bindlog_check_report rep;
    int rc = bindlog_check(s, &rep, NULL, NULL);
    if (rc != 0 || rep.problems != 0) {
        fprintf(stderr, "stream_fuzzer: %s: check: %s, %llu problems: %s\n", what,
                bindlog_code_name(rc), (unsigned long long)rep.problems, rep.message);
        abort();
    }
}

/* Import data into s; returns the import's return code after checking the
 * refusal and acceptance rules. */
static int import_into(bindlog *s, const uint8_t *data, size_t size, const char *what)
{
    unsigned char d0[BINDLOG_DIGEST_SIZE], d1[BINDLOG_DIGEST_SIZE];
    uint64_t h0, h1, records = UINT64_MAX, off = UINT64_MAX;

    state(s, d0, &h0);
    int fd = bytes_fd(data, size);
    int rc = bindlog_import(s, fd, &records, &off, NULL, NULL);
    close(fd);
    state(s, d1, &h1);
    if (getenv("BINDLOG_FUZZ_TRACE") != NULL)
        fprintf(stderr, "%s: %s, %llu records, err_offset %lld, head %llu -> %llu\n", what,
                bindlog_code_name(rc), (unsigned long long)(rc < 0 ? 0 : records),
                rc < 0 ? (long long)off : -1LL, (unsigned long long)h0, (unsigned long long)h1);
    if (rc < 0) {
        if (h1 != h0 || memcmp(d0, d1, sizeof(d0)) != 0) {
            fprintf(stderr, "stream_fuzzer: %s: refused (%s at offset %llu) but head %llu -> %llu "
                    "or the digest changed\n",
                    what, bindlog_code_name(rc), (unsigned long long)off,
                    (unsigned long long)h0, (unsigned long long)h1);
            abort();
        }
        if (rc != BINDLOG_ECORRUPT && rc != BINDLOG_EVERSION && rc != BINDLOG_EEXIST &&
            rc != BINDLOG_ENOTFOUND) {
            fprintf(stderr, "stream_fuzzer: %s: refused with %s, not a documented refusal\n",
                    what, bindlog_code_name(rc));
            abort();
        }
        if (off == UINT64_MAX || off > size) {
            fprintf(stderr,
                    "stream_fuzzer: %s: err_offset %llu unset or beyond the %zu input bytes\n",
                    what, (unsigned long long)off, size);
            abort();
        }
    } else {
        if (records == UINT64_MAX || h1 != h0 + records) {
            fprintf(stderr, "stream_fuzzer: %s: accepted %llu records, head %llu -> %llu\n", what,
                    (unsigned long long)records, (unsigned long long)h0,
                    (unsigned long long)h1);
            abort();
        }
        check_clean(s, what);
    }
    return rc;
}

/* A restored store must export into a stream that restores the same state. */
static void export_round_trip(bindlog *s)
{
    unsigned char d0[BINDLOG_DIGEST_SIZE], d1[BINDLOG_DIGEST_SIZE];
    uint64_t h0, h1, n;
    char path[4200];

    snprintf(path, sizeof(path), "%s/export", g_base);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        abort();
    unlink(path);
    int rc = bindlog_export(s, 0, fd, &n, NULL, NULL);
    if (rc != 0)
        die("export of an imported store", rc);
    if (lseek(fd, 0, SEEK_SET) != 0)
        abort();
    bindlog *t = open_fresh("again");
    rc = bindlog_import(t, fd, &n, NULL, NULL, NULL);
    close(fd);
    if (rc != 0)
        die("import of an export of an imported store", rc);
    state(s, d0, &h0);
    state(t, d1, &h1);
    if (h0 != h1 || memcmp(d0, d1, sizeof(d0)) != 0)
        die("export/import round trip changed the state", 0);
    bindlog_close(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (g_base[0] == '\0')
        LLVMFuzzerInitialize(NULL, NULL);
    g_clock = BL_STREAM_BASE_TIME;

    bindlog *s = open_fresh("full");
    int rc = base_history(s, &g_clock);
    if (rc != 0)
        die("base history", rc);
    import_into(s, data, size, "into a store with history");
    bindlog_close(s);

    s = open_fresh("empty");
    if (import_into(s, data, size, "into an empty store") >= 0)
        export_round_trip(s);
    bindlog_close(s);
    return 0;
}
