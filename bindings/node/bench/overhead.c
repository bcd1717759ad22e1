/*
 * overhead.c -- the raw C side of the Node binding's per-call overhead
 * (bench/split.mjs makes the same calls from Node and subtracts).
 *
 *   bindlog_node_overhead DIR N
 *
 * Opens a new store in DIR with durability NONE (so no flush hides the
 * call's own cost), binds N keys k<i> -> s<i> in batches of 1000 (as
 * split.mjs does: the layout of the store then matches), then times from
 * one thread:
 *   get     N bindlog_get() of k<i>
 *   split   N bindlog_split(k<i>, s<i>, c<i>, 1): each one applied, one
 *           transaction each (no other thread: no group)
 * and prints one JSON line {"n":N,"get_us":..,"split_us":..,"get_cpu_us":..,
 * "split_cpu_us":..}: microseconds per call of wall-clock time and of the
 * process's CPU time (all threads; steadier than wall time on a shared
 * machine).  Uses include/bindlog.h only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bindlog.h"

static double clock_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static double now_us(void)
{
    return clock_us(CLOCK_MONOTONIC);
}
static double cpu_us(void)
{
    return clock_us(CLOCK_PROCESS_CPUTIME_ID);
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "overhead: %s: %s (%s)\n", what, bindlog_strerror(rc), bindlog_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    bindlog *s;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_binding b;
    bindlog_result r;
    char key[32], sid[32], child[32];
    int rc;

    if (argc != 3 || atoi(argv[2]) <= 0) {
        fprintf(stderr, "usage: %s DIR N\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[2]);
    o.durability = BINDLOG_DURABILITY_NONE;
    if ((rc = bindlog_open(&s, argv[1], &o)) != 0)
        return fail("open", rc);
    enum { BATCH = 1000 };
    static char keys[BATCH][32], sids[BATCH][32];
    static bindlog_event ev[BATCH];
    for (int i = 0; i < n; i += BATCH) {
        int m = n - i < BATCH ? n - i : BATCH;
        for (int j = 0; j < m; j++) {
            snprintf(keys[j], sizeof keys[j], "k%d", i + j);
            snprintf(sids[j], sizeof sids[j], "s%d", i + j);
            ev[j] =
                (bindlog_event){.type = BINDLOG_EVENT_BIND, .key = keys[j], .session_id = sids[j]};
        }
        if ((rc = bindlog_apply_batch(s, ev, (size_t)m, NULL, NULL)) < 0)
            return fail("bind", rc);
    }

    double t0 = now_us(), c0 = cpu_us();
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "k%d", i);
        if ((rc = bindlog_get(s, key, &b)) != 0)
            return fail("get", rc);
    }
    double t1 = now_us(), c1 = cpu_us();
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "k%d", i);
        snprintf(sid, sizeof sid, "s%d", i);
        snprintf(child, sizeof child, "c%d", i);
        if ((rc = bindlog_split(s, key, sid, child, 1, NULL, 0, &r)) != BINDLOG_APPLIED)
            return fail("split", rc);
    }
    double t2 = now_us(), c2 = cpu_us();
    printf(
        "{\"n\":%d,\"get_us\":%.3f,\"split_us\":%.3f,\"get_cpu_us\":%.3f,\"split_cpu_us\":%.3f}\n",
        n, (t1 - t0) / n, (t2 - t1) / n, (c1 - c0) / n, (c2 - c1) / n);
    bindlog_close(s);
    return 0;
}
