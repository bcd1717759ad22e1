/*
 * faultutil.h -- shared pieces of the fault-injection tests (tests/faults/):
 * a multi-threaded gateway workload that acknowledges every APPLIED event
 * on a pipe, and the verifier that reopens a store after a crash or a fault
 * and proves that nothing acknowledged was lost and that the store checks.
 *
 * The workload: each thread owns its own keys ("fault:<n>"), so it can
 * predict every outcome: every call it makes must be APPLIED.  It writes one
 * fu_ack per applied event on `ack_fd` only after the call returned, so an
 * ack means "the caller was told APPLIED".  A thread stops at its first
 * error (its code is returned).
 *
 * The verifier: open the store, then
 *   - every acked event is in the log at its LSN with the same key, type,
 *     session and generation (else "lost" or "mismatched");
 *   - no key's generation is below its last acked one ("gen_back");
 *   - the log is dense and each key's generations never go down;
 *   - the log re-applied through the public API into a fresh store (clock
 *     injected from the records' times) gives every event APPLIED at the
 *     same LSN and generation, and the same state digest;
 *   - bindlog_check() reports no problem, when the library has it
 *     (FU_HAVE_bindlog_check: defined when the library has it).
 */
#ifndef BINDLOG_FAULTUTIL_H
#define BINDLOG_FAULTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "bindlog.h"

typedef struct fu_ack {
    uint32_t key;         /* key number: "fault:<key>" */
    uint32_t type;        /* BINDLOG_EVENT_* */
    uint64_t lsn;
    uint64_t generation;
    char session_id[BINDLOG_ID_MAX + 1]; /* binding after the event */
} fu_ack;

typedef struct fu_workload {
    int threads;
    int keys_per_thread;
    int events_per_thread;
    int durability;       /* BINDLOG_DURABILITY_* */
    unsigned key_base;    /* first key number (phases of one store use disjoint keys) */
    unsigned seed;
    int batch_every;      /* every n-th event is a 2-event batch (0: never) */
    uint64_t log_size;    /* bindlog_options.log_size when the store is created (0: default) */
} fu_workload;

#define FU_WORKLOAD_INIT {4, 8, 60, BINDLOG_DURABILITY_FULL, 0, 1, 7, 0}

/* Run the workload on the store in `dir`, acking on ack_fd (-1: no acks).
 * Returns 0, the first error a thread met (bindlog_open's included), or
 * -10000 - outcome when a call was not APPLIED (a test assumption broke). */
int fu_run_workload(const char *dir, const fu_workload *w, int ack_fd);

/* Read acks from fd until EOF; returns the count, *out malloc'ed. */
size_t fu_read_acks(int fd, fu_ack **out);

typedef struct fu_verdict {
    int open_rc;          /* bindlog_open's result (the rest is 0 if it failed) */
    int check_rc;         /* bindlog_check's return, or 1 when not linked in */
    uint64_t acked, lost, mismatched, gen_back;
    uint64_t head_lsn, records;
    uint64_t problems;    /* log/replay/check problems */
    /* the smallest LSN of a lost acked event (0: none lost) and the largest
     * of a kept one: losses are "the last commits" only when
     * kept_max_lsn < lost_min_lsn */
    uint64_t lost_min_lsn, kept_max_lsn;
    char msg[512];        /* the first problem, "" if none */
} fu_verdict;

/* Verify the store in dir against the acks (see above).  `scratch` is a
 * directory the re-application may create and remove.  Returns 0 when
 * everything holds, 1 otherwise (details in *v). */
int fu_verify(const char *dir, const char *scratch, const fu_ack *acks, size_t n, int durability,
              fu_verdict *v);

/* Key string of key number k. */
void fu_key(char out[32], unsigned k);

/* ---- the LD_PRELOAD shim --------------------------------------------------- */

/* Re-exec the running test with the shim (path `shim`) in LD_PRELOAD,
 * unless it is loaded already.  Call first in main().  Under
 * AddressSanitizer, also tells ASan not to insist on coming first. */
void fu_preload_self(char **argv, const char *shim);

/* A shim control function (shim.h), or NULL when the shim is not loaded. */
void *fu_shim_sym(const char *name);
/* The name of the shim's operation class `what` (SHIM_WRITE, SHIM_SYNC,
 * SHIM_DIR: shim.h), for messages: "write", "sync", "directory operation". */
const char *fu_shim_op_name(int what);

/* In a forked child: give crash signals back their default action, so that
 * a crash kills the child instead of cmocka's handler running the rest of
 * the test suite inside it. */
void fu_child_signals(void);

/* Copy file src to dst (0600).  0 or -1. */
int fu_copy_file(const char *src, const char *dst);

#endif /* BINDLOG_FAULTUTIL_H */
