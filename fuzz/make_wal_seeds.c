/*
 * make_wal_seeds.c -- write the seed inputs of wal_fuzzer.c.
 *
 *     fuzz_make_wal_seeds OUTDIR      (writes OUTDIR/seed-*)
 *
 * Each seed is the ring of a real log: the template store of wal_base.h is
 * made, a child process writes a workload into it through the library
 * (the background checkpointer off) and exits without closing, so that
 * every frame stays in the log; the ring from the position recovery
 * starts at (wal_fuzzer.c's input layout), up to the last non-zero byte,
 * is the seed.  The workloads: nothing, one event, every event type with
 * and without origins, batches, a long run that crosses the end of the
 * ring (a WRAP frame), large origins; and one seed of odd length (the
 * fuzzer then writes garbage shared memory too).  Rerun after a format
 * change and commit the result under fuzz/corpora/wal/.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wal_base.h"

static const char *outdir;

static void rm_store(const char *dir)
{
    static const char *const names[] = {"data.mdb", "lock.mdb", "bindlog.lock", "bindlog.wal",
                                        "bindlog.shm"};
    char path[4400];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static int run(bindlog *s, int kind)
{
    char key[64], sid[64], origin[4000];
    memset(origin, 'o', sizeof origin);
    switch (kind) {
    case 0:
        return 0;
    case 1:
        return bindlog_bind(s, "k", "s1", NULL, NULL, NULL, 0, NULL) == BINDLOG_APPLIED ? 0 : 1;
    case 2: /* every type, with and without origins */
        if (bindlog_bind(s, "k", "a", "", "first", "{}", 2, NULL) != BINDLOG_APPLIED ||
            bindlog_new_session(s, "k", "b", NULL, NULL, 0, NULL) != BINDLOG_APPLIED ||
            bindlog_split(s, "k", "b", "c", 2, "split", 5, NULL) != BINDLOG_APPLIED ||
            bindlog_split(s, "k", "c", "d", BINDLOG_ANY_GENERATION, NULL, 0, NULL) !=
                BINDLOG_APPLIED ||
            bindlog_invalidate(s, "k", "stop", NULL) != BINDLOG_APPLIED ||
            bindlog_unbind(s, "k", NULL, NULL) != BINDLOG_APPLIED ||
            bindlog_bind(s, "k", "a", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
            return 1;
        return 0;
    case 3: { /* batches */
        bindlog_event ev[4] = {
            {BINDLOG_EVENT_BIND, "x", "x1", NULL, 0, NULL, NULL, 0},
            {BINDLOG_EVENT_BIND, "y", "y1", NULL, 0, NULL, "o", 1},
            {BINDLOG_EVENT_SPLIT, "x", "x2", "x1", BINDLOG_ANY_GENERATION, NULL, NULL, 0},
            {BINDLOG_EVENT_NEW_SESSION, "y", "y2", NULL, 0, "reset", NULL, 0},
        };
        bindlog_result r[4];
        for (int i = 0; i < 3; i++) {
            ev[0].session_id = i == 0 ? "x1" : i == 1 ? "x3" : "x4";
            if (i > 0)
                ev[2] = (bindlog_event){BINDLOG_EVENT_INVALIDATE, "x", NULL, NULL, 0, NULL, NULL,
                                        0};
            ev[3].session_id = i == 0 ? "y2" : i == 1 ? "y3" : "y4";
            if (bindlog_apply_batch(s, ev, 4, r, NULL) != 0)
                return 1;
        }
        return 0;
    }
    case 4: /* across the end of the ring: a WRAP frame */
        for (int i = 0; i < 35; i++) { /* about 45 KB: no checkpoint needed */
            snprintf(key, sizeof key, "w%d", i % 9);
            snprintf(sid, sizeof sid, "w-s%d", i);
            if (bindlog_bind(s, key, sid, NULL, NULL, origin, 300, NULL) != BINDLOG_APPLIED)
                return 1;
        }
        return 0;
    case 5: /* large origins */
        for (int i = 0; i < 4; i++) { /* about 12 KB each (two session values) */
            snprintf(sid, sizeof sid, "big%d", i);
            if (bindlog_bind(s, "big", sid, NULL, NULL, origin, sizeof origin, NULL) !=
                BINDLOG_APPLIED)
                return 1;
        }
        return 0;
    default:
        return 1;
    }
}

/* `durability` of the writer; `damage`: flip a byte in the body of the
 * seed's second frame (a break in frames a FULL writer flushed: the fuzzer
 * must see recovery refuse, and mutations around it). */
static void make_seed(int kind, const char *name, int with_shm, int durability, int damage)
{
    char dir[4200], path[4400];
    snprintf(dir, sizeof dir, "%s/.store-%d", outdir, kind);
    rm_store(dir);
    if (mkdir(dir, 0700) != 0 || wb_make_template(dir) != 0) {
        fprintf(stderr, "make_wal_seeds: template in %s failed\n", dir);
        exit(1);
    }
    pid_t pid = fork();
    if (pid == 0) {
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        bindlog *s = NULL;
        setenv("BINDLOG_CHECKPOINT", "manual", 1);
        o.durability = durability;
        if (bindlog_open(&s, dir, &o) != 0)
            _exit(2);
        _exit(run(s, kind) == 0 ? 0 : 3); /* no close: the frames stay */
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        fprintf(stderr, "make_wal_seeds: workload %d failed\n", kind);
        exit(1);
    }
    static unsigned char ring[WB_CAP], seed[WB_CAP + 1];
    snprintf(path, sizeof path, "%s/bindlog.wal", dir);
    int fd = open(path, O_RDONLY);
    if (fd < 0 || pread(fd, ring, WB_CAP, BL_WAL_HDR) != (ssize_t)WB_CAP) {
        fprintf(stderr, "make_wal_seeds: cannot read %s\n", path);
        exit(1);
    }
    close(fd);
    size_t n = 0;
    for (size_t i = 0; i < WB_CAP; i++) {
        seed[i] = ring[(WB_START + i) % WB_CAP];
        if (seed[i] != 0)
            n = i + 1;
    }
    if (n < 64)
        n = 64;
    if (damage) {
        size_t first = (64 + (size_t)(seed[36] | seed[37] << 8 | seed[38] << 16) + 7) & ~(size_t)7;
        if (first + 64 + 4 < n)
            seed[first + 64 + 4] ^= 0x10;
    }
    n = (n + 7) & ~(size_t)7;
    if (with_shm)
        seed[n++] = 0; /* odd length: garbage shared memory too */
    snprintf(path, sizeof path, "%s/seed-%s", outdir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(seed, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "make_wal_seeds: cannot write %s\n", path);
        exit(1);
    }
    rm_store(dir);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    mkdir(outdir, 0700);
    const int normal = BINDLOG_DURABILITY_NORMAL, full = BINDLOG_DURABILITY_FULL;
    make_seed(0, "empty", 0, normal, 0);
    make_seed(1, "one-event", 0, normal, 0);
    make_seed(2, "every-type", 0, normal, 0);
    make_seed(2, "every-type-garbage-shm", 1, normal, 0);
    make_seed(3, "batches", 0, normal, 0);
    make_seed(4, "across-the-ring-end", 0, normal, 0);
    make_seed(4, "across-the-ring-end-garbage-shm", 1, normal, 0);
    make_seed(5, "large-origins", 0, normal, 0);
    /* FULL: frames that say how far the log was flushed */
    make_seed(2, "full-every-type", 0, full, 0);
    make_seed(4, "full-across-the-ring-end", 0, full, 0);
    make_seed(2, "full-every-type-second-frame-damaged", 0, full, 1);
    return 0;
}
