/*
 * workload.h -- a deterministic gateway workload for the maintenance tests.
 *
 * Random but always-valid events over WL_NKEYS keys: a tiny model of which
 * key is bound to which session picks events that apply, so every call logs
 * exactly one record and LSNs follow the call count.  Stores are opened in
 * NONE durability with a clock that steps 10 ms per call (wl_now), so every
 * record has its own time and runs are reproducible.
 */
#ifndef BL_TEST_WORKLOAD_H
#define BL_TEST_WORKLOAD_H

#include <stdint.h>

#include "bindlog.h"

#define WL_NKEYS 23

/* Random but always-valid events: a tiny model of which key is bound to
 * which session picks events that apply (so every call logs a record). */
typedef struct wl_gen {
    uint64_t rng;
    unsigned next_sid;
    int bound[WL_NKEYS]; /* session number, -1 unbound */
    int prev[WL_NKEYS];  /* last session the key left, -1 none */
} wl_gen;

/* The workload clock: the time the last event got; set it before a run. */
extern int64_t wl_now;

/* Open (creating) a store on `dir` with the workload clock; fails the test
 * on error. */
bindlog *wl_open_store(const char *dir);

void wl_gen_init(wl_gen *g, uint64_t seed);
/* Apply one event through the single-event API; returns its LSN (fails the
 * test if the event did not apply). */
uint64_t wl_gen_step(wl_gen *g, bindlog *s);

#endif
