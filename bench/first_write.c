/*
 * first_write.c -- bindlog-first-write: what a restarted process pays for
 * its first write (docs/design.md, "Damaged files: where pages are
 * validated").
 *
 * Usage: bindlog-first-write DIR [--runs N] [--delay MS] [--durability full|normal|none]
 *                            [--no-write] [--cold] [--writers N [--seconds S]]
 *
 * Each run opens the existing store DIR in a new handle (the only one of
 * the process, so the environment is made anew), waits MS milliseconds
 * (0: the write comes at once, as a request that arrives with the
 * restart), binds a new key, binds a second one, and closes.  It prints
 * one row per run -- open, the first write, the second write and close, in
 * milliseconds -- and then the median of each column.  The whole-store
 * page walk a writable open starts runs beside the writes (the checkpoint
 * takes its verdict, not the first write); the second write is the steady
 * state; close folds the log once the walk is over, or after a short wait
 * leaves it to the next writer.  --no-write: open, wait, close (what close
 * costs while the walk a writable open started is still under way).
 * --cold: before each open, data.mdb is flushed and dropped from the page
 * cache (posix_fadvise POSIX_FADV_DONTNEED, no root needed), as after a
 * restart on a busy host: the open's walk then reads the file from the
 * disk while the first write flushes the log (without it the runs after
 * the first find the file cached: the warm case).
 * --writers N: instead of the two writes, N threads bind from the open on
 * (each over 500 keys of its own) for S seconds (default 2), and each run
 * prints the events completed in every 100 ms and in all: how fast a load
 * of writers comes up to speed on a store just opened, cold or warm.
 * Public API only, so the same source measures any build.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* What the calling thread read from the disk: its major faults, and the
 * 512-byte blocks it read (Linux counts per thread; elsewhere, zeros). */
typedef struct thread_io {
    long majflt, inblock;
} thread_io;

static void thread_io_get(thread_io *io)
{
    io->majflt = io->inblock = 0;
#ifdef RUSAGE_THREAD
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) == 0) {
        io->majflt = ru.ru_majflt;
        io->inblock = ru.ru_inblock;
    }
#endif
}

static int bind_one(bindlog *h, int run, int i)
{
    char key[96], sid[96];
    bindlog_result res;
    snprintf(key, sizeof key, "first-write:%ld:%d:%d", (long)getpid(), run, i);
    snprintf(sid, sizeof sid, "first-write-s:%ld:%d:%d", (long)getpid(), run, i);
    int rc = bindlog_bind(h, key, sid, NULL, NULL, "bench", 5, &res);
    if (rc != BINDLOG_APPLIED) {
        fprintf(stderr, "bind: %s: %s\n", bindlog_code_name(rc), bindlog_last_error());
        return -1;
    }
    return 0;
}

/* ---- --writers: a load from the open on ------------------------------------ */

#define LOAD_SLICES 600 /* of 100 ms: a minute at most */

typedef struct load {
    bindlog *h;
    double t0, end; /* now_ms() of the open, and of the end */
    _Atomic long slice[LOAD_SLICES];
    _Atomic int failed;
} load;

typedef struct loader {
    load *l;
    int id;
} loader;

static void *load_main(void *p)
{
    loader *w = p;
    load *l = w->l;
    char key[96], sid[96];
    bindlog_result res;
    for (long i = 0; now_ms() < l->end && !atomic_load(&l->failed); i++) {
        snprintf(key, sizeof key, "first-write:load:%d:%ld", w->id, i % 500);
        snprintf(sid, sizeof sid, "first-write-load:%ld:%d:%ld", (long)getpid(), w->id, i);
        if (bindlog_bind(l->h, key, sid, NULL, NULL, "bench", 5, &res) < 0) {
            fprintf(stderr, "bind: %s\n", bindlog_last_error());
            atomic_store(&l->failed, 1);
            break;
        }
        long s = (long)((now_ms() - l->t0) / 100.0);
        if (s >= 0 && s < LOAD_SLICES)
            atomic_fetch_add(&l->slice[s], 1);
    }
    return NULL;
}

/* One run of --writers: open, n threads binding for secs seconds, close. */
static int load_run(const char *dir, const bindlog_options *o, int n, int secs, int run)
{
    load *l = calloc(1, sizeof *l);
    loader *ws = calloc((size_t)n, sizeof *ws);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    int started = 0, rc = 0;
    if (l == NULL || ws == NULL || th == NULL) {
        fprintf(stderr, "out of memory\n");
        rc = -1;
        goto out;
    }
    l->t0 = now_ms();
    if (bindlog_open(&l->h, dir, o) != 0) {
        fprintf(stderr, "open: %s\n", bindlog_last_error());
        rc = -1;
        goto out;
    }
    double open_ms = now_ms() - l->t0;
    l->end = l->t0 + secs * 1000.0;
    for (; started < n; started++) {
        ws[started] = (loader){l, started};
        if (pthread_create(&th[started], NULL, load_main, &ws[started]) != 0)
            break;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    bindlog_close(l->h);
    long total = 0;
    printf("%-4d open %.2f ms; events per 100 ms:", run, open_ms);
    for (int i = 0; i < secs * 10 && i < LOAD_SLICES; i++) {
        printf(" %ld", atomic_load(&l->slice[i]));
        total += atomic_load(&l->slice[i]);
    }
    printf("; %ld in all\n", total);
    if (started < n || atomic_load(&l->failed))
        rc = -1;
out:
    free(th);
    free(ws);
    free(l);
    return rc;
}

/* Drop DIR/data.mdb from the page cache (its dirty pages written first,
 * else they would stay): the next open finds it on the disk only. */
static int evict(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        perror(path);
        return -1;
    }
    int rc = fdatasync(fd) != 0 ? errno : posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (rc != 0) {
        fprintf(stderr, "%s: cannot drop it from the page cache: %s\n", path, strerror(rc));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    int runs = 5, delay_ms = 0, writes = 1, cold = 0, writers = 0, secs = 2;
    bindlog_options o = BINDLOG_OPTIONS_INIT;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-write"))
            writes = 0;
        else if (!strcmp(argv[i], "--cold"))
            cold = 1;
        else if (!strcmp(argv[i], "--writers") && i + 1 < argc)
            writers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            secs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--delay") && i + 1 < argc)
            delay_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--durability") && i + 1 < argc) {
            const char *d = argv[++i];
            o.durability = !strcmp(d, "none")     ? BINDLOG_DURABILITY_NONE
                           : !strcmp(d, "normal") ? BINDLOG_DURABILITY_NORMAL
                                                  : BINDLOG_DURABILITY_FULL;
        } else if (argv[i][0] != '-' && dir == NULL)
            dir = argv[i];
        else
            dir = NULL, i = argc;
    }
    if (dir == NULL || runs < 1 || runs > 1000 || delay_ms < 0 || writers < 0 || writers > 1024 ||
        secs < 1 || secs > LOAD_SLICES / 10) {
        fprintf(stderr, "usage: bindlog-first-write DIR [--runs N] [--delay MS] "
                        "[--durability full|normal|none] [--no-write] [--cold] "
                        "[--writers N [--seconds S]]\n");
        return 2;
    }
    if (writers > 0) {
        printf("%s page cache; %d writers for %d s from the open on\n",
               cold ? "cold: data.mdb dropped from the" : "warm: whatever is in the", writers,
               secs);
        for (int r = 0; r < runs; r++)
            if ((cold && evict(dir) != 0) || load_run(dir, &o, writers, secs, r) != 0)
                return 1;
        return 0;
    }
    double *col[4];
    for (int c = 0; c < 4; c++)
        if ((col[c] = calloc((size_t)runs, sizeof(double))) == NULL)
            return 1;
    printf("%s page cache\n", cold ? "cold: data.mdb dropped from the" : "warm: whatever is in the");
    printf("%-4s %10s %12s %12s %10s %12s\n", "run", "open ms", "1st write ms", "2nd write ms",
           "close ms", "1st faults/KB");
    for (int r = 0; r < runs; r++) {
        bindlog *h = NULL;
        if (cold && evict(dir) != 0)
            return 1;
        double t0 = now_ms();
        int rc = bindlog_open(&h, dir, &o);
        double t1 = now_ms();
        if (rc != 0) {
            fprintf(stderr, "open: %s: %s\n", bindlog_code_name(rc), bindlog_last_error());
            return 1;
        }
        if (delay_ms > 0) {
            struct timespec ts = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        double t2 = now_ms();
        thread_io io0, io1;
        thread_io_get(&io0);
        if (writes && bind_one(h, r, 0) != 0)
            return 1;
        double t3 = now_ms();
        thread_io_get(&io1);
        if (writes && bind_one(h, r, 1) != 0)
            return 1;
        double t4 = now_ms();
        bindlog_close(h);
        double t5 = now_ms();
        col[0][r] = t1 - t0;
        col[1][r] = t3 - t2;
        col[2][r] = t4 - t3;
        col[3][r] = t5 - t4;
        printf("%-4d %10.2f %12.2f %12.2f %10.2f %5ld/%-6ld\n", r, col[0][r], col[1][r], col[2][r],
               col[3][r], io1.majflt - io0.majflt, (io1.inblock - io0.inblock) / 2);
    }
    printf("%-4s %10.2f %12.2f %12.2f %10.2f\n", "p50", median(col[0], runs),
           median(col[1], runs), median(col[2], runs), median(col[3], runs));
    for (int c = 0; c < 4; c++)
        free(col[c]);
    return 0;
}
