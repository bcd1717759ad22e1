/*
 * workload.c -- the deterministic gateway workload shared by the
 * maintenance tests (replay, check, compaction, streams): see workload.h.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "workload.h"


/* The clock steps 10 ms per call, so every record has its own time. */
static int64_t step_clock(void *ctx)
{
    int64_t *now = ctx;
    return *now += 10;
}

int64_t wl_now;

bindlog *wl_open_store(const char *dir)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.clock_ms = step_clock;
    o.clock_ctx = &wl_now;
    int rc = bindlog_open(&s, dir, &o);
    if (rc != 0)
        fail_msg("bindlog_open(%s): %s", dir, bindlog_strerror(rc));
    return s;
}


static uint32_t rnd(wl_gen *g)
{
    g->rng = g->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g->rng >> 33);
}

void wl_gen_init(wl_gen *g, uint64_t seed)
{
    memset(g, 0, sizeof(*g));
    g->rng = seed;
    for (int i = 0; i < WL_NKEYS; i++)
        g->bound[i] = g->prev[i] = -1;
}

/* Session n's id: a third are UUIDs in lower case (records keep them in
 * 16 bytes), a third the same in upper case (kept as text), a third short
 * names, so that every path that reads a record meets both forms. */
static void wl_sid(char *out, size_t cap, unsigned n)
{
    uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15ull;
    if (n % 3 == 1)
        snprintf(out, cap, "s%u", n);
    else
        snprintf(out, cap, n % 3 ? "%08X-%04X-4%03X-8%03X-%012llX" : "%08x-%04x-4%03x-8%03x-%012llx",
                 n, (unsigned)(h >> 48), (unsigned)(h >> 36) & 0xfff, (unsigned)(h >> 24) & 0xfff,
                 (unsigned long long)(h & 0xffffffffffffull));
}

uint64_t wl_gen_step(wl_gen *g, bindlog *s)
{
    char key[32], sid[48], other[48], origin[64];
    bindlog_result res;
    int k = (int)(rnd(g) % WL_NKEYS), r = (int)(rnd(g) % 100), rc;
    size_t olen = rnd(g) % 40;
    const void *orig = (rnd(g) % 3) ? origin : NULL;

    for (size_t i = 0; i < olen; i++)
        origin[i] = (char)rnd(g);
    if (orig == NULL)
        olen = 0;
    snprintf(key, sizeof(key), "agent:main:chat:%d", k);
    if (g->bound[k] < 0 && r >= 40 && r < 90)
        r = 0; /* split, invalidate and unbind need a bound key */
    if (r < 40) {
        wl_sid(sid, sizeof(sid), g->next_sid);
        rc = bindlog_new_session(s, key, sid, (r & 1) ? "idle" : NULL, orig, olen, &res);
        if (g->bound[k] >= 0)
            g->prev[k] = g->bound[k];
        g->bound[k] = (int)g->next_sid++;
    } else if (r < 65) {
        wl_sid(other, sizeof(other), (unsigned)g->bound[k]);
        wl_sid(sid, sizeof(sid), g->next_sid);
        rc = bindlog_split(s, key, other, sid, BINDLOG_ANY_GENERATION, orig, olen, &res);
        g->prev[k] = g->bound[k];
        g->bound[k] = (int)g->next_sid++;
    } else if (r < 78) {
        rc = bindlog_invalidate(s, key, (r & 1) ? "stop" : NULL, &res);
    } else if (r < 88) {
        rc = bindlog_unbind(s, key, NULL, &res);
        g->prev[k] = g->bound[k];
        g->bound[k] = -1;
    } else if (g->prev[k] >= 0 && (r & 1)) {
        /* /resume: back to a session the key left (re-opens it) */
        wl_sid(sid, sizeof(sid), (unsigned)g->prev[k]);
        rc = bindlog_bind(s, key, sid, NULL, NULL, orig, olen, &res);
        int cur = g->bound[k];
        g->bound[k] = g->prev[k];
        g->prev[k] = cur;
    } else {
        wl_sid(sid, sizeof(sid), g->next_sid);
        rc = bindlog_bind(s, key, sid, NULL, "first", orig, olen, &res);
        if (g->bound[k] >= 0)
            g->prev[k] = g->bound[k];
        g->bound[k] = (int)g->next_sid++;
    }
    if (rc != BINDLOG_APPLIED)
        fail_msg("workload event (r=%d key %d) returned %d %s", r, k, rc, bindlog_strerror(rc));
    return res.lsn;
}
