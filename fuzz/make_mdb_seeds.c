/*
 * make_mdb_seeds.c -- real data.mdb files for fuzz/corpora/mdb/.
 *
 *     fuzz_make_mdb_seeds OUTDIR     (writes OUTDIR/mdb/seed-*)
 *
 * Each seed is the data.mdb of a store made through the public API with a
 * fixed clock, so the bytes are reproducible on one LMDB version and page
 * size:
 *   seed-empty       a new store (meta table only)
 *   seed-small       a dozen events on the fuzzer's keys (mdb_fuzzer.c)
 *   seed-deep        enough keys that log, history and sessions have
 *                    branch pages
 *   seed-compacted   seed-small's events and more, compacted: a base image
 *   seed-overflow    origins of 9 KiB: values on overflow pages
 *   seed-vacuumed    seed-deep after compaction and vacuum (LMDB's
 *                    compacting copy writes the meta pages its own way)
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

static int64_t g_clock = 1767225600000; /* 2026-01-01 */
static char g_out[4096], g_tmp[4096];

static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return g_clock += 1000;
}

static void ok(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "make_mdb_seeds: %s: %s (%s)\n", what, bindlog_strerror(rc),
                bindlog_last_error());
        exit(1);
    }
}

static bindlog *fresh(const char *name)
{
    char dir[4200];
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s;
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
    o.durability = BINDLOG_DURABILITY_NONE;
    o.clock_ms = clock_fn;
    ok(bindlog_open(&s, dir, &o), dir);
    return s;
}

/* Copy name's data.mdb to OUTDIR/mdb/seed-name. */
static void keep(const char *name)
{
    char src[4300], dst[4300], buf[65536];
    snprintf(src, sizeof src, "%s/%s/data.mdb", g_tmp, name);
    snprintf(dst, sizeof dst, "%s/mdb/seed-%s", g_out, name);
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    size_t n;
    if (in == NULL || out == NULL) {
        perror(in == NULL ? src : dst);
        exit(1);
    }
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) {
            perror(dst);
            exit(1);
        }
    fclose(in);
    if (fclose(out) != 0) {
        perror(dst);
        exit(1);
    }
}

/* The fuzzer's keys: agent:main:telegram:dm:1 ends bound to s-1-3 (after
 * two splits), agent:main:discord:channel:7 has a history. */
static void small_history(bindlog *s)
{
    bindlog_result r;
    ok(bindlog_bind(s, "agent:main:telegram:dm:1", "s-1-1", "", NULL, "{\"peer\":1}", 10, &r),
       "bind");
    ok(bindlog_split(s, "agent:main:telegram:dm:1", "s-1-1", "s-1-2", r.generation, NULL, 0, &r),
       "split");
    ok(bindlog_split(s, "agent:main:telegram:dm:1", "s-1-2", "s-1-3", r.generation, NULL, 0, &r),
       "split");
    ok(bindlog_bind(s, "agent:main:discord:channel:7", "d-7-1", "", NULL, NULL, 0, &r), "bind");
    ok(bindlog_new_session(s, "agent:main:discord:channel:7", "d-7-2", NULL, NULL, 0, &r), "new");
    ok(bindlog_invalidate(s, "agent:main:discord:channel:7", "stop", &r), "invalidate");
    ok(bindlog_new_session(s, "agent:main:discord:channel:7", "d-7-3", "reset", "o", 1, &r),
       "new");
    ok(bindlog_bind(s, "agent:main:slack:C9", "sl-9-1", NULL, NULL, NULL, 0, &r), "bind");
    ok(bindlog_unbind(s, "agent:main:slack:C9", "idle", &r), "unbind");
    ok(bindlog_bind(s, "agent:main:slack:C9", "sl-9-1", "", NULL, NULL, 0, &r), "rebind");
}

static void many(bindlog *s, unsigned n, size_t origin_len)
{
    char key[64], a[32], b[32], *origin = calloc(1, origin_len + 1);
    bindlog_result r;
    memset(origin, 'x', origin_len);
    for (unsigned i = 0; i < n; i++) {
        snprintf(key, sizeof key, "agent:main:telegram:dm:%u", 1000 + i);
        snprintf(a, sizeof a, "m-%u-1", i);
        snprintf(b, sizeof b, "m-%u-2", i);
        ok(bindlog_bind(s, key, a, "", NULL, origin, origin_len, &r), "bind");
        ok(bindlog_split(s, key, a, b, r.generation, NULL, 0, &r), "split");
    }
    free(origin);
}

int main(int argc, char **argv)
{
    bindlog *s;
    uint64_t removed;

    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_make_mdb_seeds OUTDIR\n");
        return 2;
    }
    snprintf(g_out, sizeof g_out, "%s", argv[1]);
    snprintf(g_tmp, sizeof g_tmp, "%s/mdb-seed-stores", argv[1]);
    mkdir(g_out, 0700);
    char mdb[4200];
    snprintf(mdb, sizeof mdb, "%s/mdb", g_out);
    if ((mkdir(mdb, 0700) != 0 && errno != EEXIST) || (mkdir(g_tmp, 0700) != 0 && errno != EEXIST)) {
        perror(g_out);
        return 1;
    }

    bindlog_close(fresh("empty"));
    keep("empty");

    s = fresh("small");
    small_history(s);
    bindlog_close(s);
    keep("small");

    s = fresh("deep");
    small_history(s);
    many(s, 250, 0);
    bindlog_close(s);
    keep("deep");

    s = fresh("compacted");
    small_history(s);
    many(s, 20, 0);
    ok(bindlog_compact(s, 30, &removed, NULL, NULL), "compact");
    bindlog_close(s);
    keep("compacted");

    s = fresh("overflow");
    small_history(s);
    many(s, 3, 9000);
    bindlog_close(s);
    keep("overflow");

    s = fresh("vacuumed");
    small_history(s);
    many(s, 250, 0);
    ok(bindlog_compact(s, 400, &removed, NULL, NULL), "compact");
    bindlog_close(s);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/vacuumed", g_tmp);
    ok(bindlog_vacuum(dir, NULL, NULL), "vacuum");
    keep("vacuumed");

    printf("seeds in %s/mdb; scratch stores in %s (remove them)\n", g_out, g_tmp);
    return 0;
}
