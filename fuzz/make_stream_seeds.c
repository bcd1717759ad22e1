/*
 * make_stream_seeds.c -- real export streams for fuzz/corpora/stream/.
 *
 *     fuzz_make_stream_seeds OUTDIR     (writes OUTDIR/stream/seed-*)
 *
 * Built only when the library has bindlog_import()/bindlog_export().  The
 * seeds: a full export of the base history (stream_base.h), an incremental
 * export that continues it at head + 1 (so it appends to stream_fuzzer's
 * scratch store), a full export of the longer history, and damaged copies
 * of that one (cut in half, one byte short, a flipped byte in the middle,
 * a flipped byte in the trailer).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bindlog.h"
#include "stream_base.h"

static int64_t g_clock = BL_STREAM_BASE_TIME;
static char g_out[4096];

static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return g_clock;
}

static void check(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "make_stream_seeds: %s: %s\n", what, bindlog_strerror(rc));
        exit(1);
    }
}

static void put(const char *name, const unsigned char *p, size_t n)
{
    char path[4300];
    snprintf(path, sizeof(path), "%s/seed-%s", g_out, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* Export s from from_lsn into a malloc'd buffer. */
static unsigned char *export_bytes(bindlog *s, uint64_t from_lsn, size_t *n)
{
    char path[4300];
    snprintf(path, sizeof(path), "%s/.export", g_out);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(path);
        exit(1);
    }
    unlink(path);
    check(bindlog_export(s, from_lsn, fd, NULL, NULL, NULL), "export");
    off_t size = lseek(fd, 0, SEEK_END);
    unsigned char *buf = malloc((size_t)size + 1);
    if (buf == NULL || pread(fd, buf, (size_t)size, 0) != size)
        exit(1);
    close(fd);
    *n = (size_t)size;
    return buf;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    snprintf(g_out, sizeof(g_out), "%s/stream", argv[1]);
    mkdir(argv[1], 0755);
    if (mkdir(g_out, 0755) != 0 && errno != EEXIST) {
        perror(g_out);
        return 1;
    }
    char dir[] = "/tmp/bindlog-stream-seeds-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror(dir);
        return 1;
    }
    char store[sizeof(dir) + 8];
    snprintf(store, sizeof(store), "%s/s", dir);

    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.clock_ms = clock_fn;
    bindlog *s;
    check(bindlog_open(&s, store, &o), "open");
    check(base_history(s, &g_clock), "base history");
    uint64_t head;
    unsigned char d[BINDLOG_DIGEST_SIZE];
    check(bindlog_digest(s, d, &head), "digest");

    size_t n;
    unsigned char *b = export_bytes(s, 0, &n);
    put("full-base", b, n);
    free(b);

    /* more history, then the continuation alone and everything */
    const char *key = "agent:main:telegram:dm:1";
    g_clock += 1000;
    check(bindlog_new_session(s, key, "C", "new", "o", 1, NULL), "new");
    g_clock += 1000;
    check(bindlog_split(s, key, "C", "C1", BINDLOG_ANY_GENERATION, NULL, 0, NULL), "split");
    g_clock += 1000;
    check(bindlog_bind(s, "agent:main:discord:9", "B", "", "resume", NULL, 0, NULL), "bind");
    b = export_bytes(s, head + 1, &n);
    put("incremental", b, n);
    free(b);

    b = export_bytes(s, 0, &n);
    put("full-extended", b, n);
    put("torn-half", b, n / 2);
    put("torn-last-byte", b, n - 1);
    b[n / 2] ^= 0x40;
    put("flipped-middle", b, n);
    b[n / 2] ^= 0x40;
    b[n - 2] ^= 0x01;
    put("flipped-trailer", b, n);
    free(b);

    bindlog_close(s);
    char cmd[sizeof(dir) + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : 1;
}
