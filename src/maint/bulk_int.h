/*
 * bulk_int.h -- what the three files of the bulk replay share (bulk.h is
 * its interface): the state of a run, and helpers.
 *
 *   bulk.c         the scan (partitions, spill, references, the copier),
 *                  bl_bulk_run();
 *   bulk_decide.c  deciding a partition in memory and writing its runs;
 *   bulk_merge.c   merging the runs in table order, on a thread of its own
 *                  that hands them to the caller's sink through a ring.
 */
#ifndef BL_BULK_INT_H
#define BL_BULK_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "maint/bulk.h"
#include "core/digest.h"
#include "core/record.h"

#define SPILL_BLOCK ((size_t)128 << 10) /* > the largest entry (a record: 66 KiB) */
#define RUN_BUF ((size_t)128 << 10) /* > the largest run entry (a session: 66 KiB) */

/* The three runs of a decided partition, in the order they are merged. */
enum { RUN_KEYS, RUN_SESS, RUN_KIDS, RUN_COUNT };
/* a record held by reference is gathered into one block before it is
 * decided (decide_part), and bl_bulk_record_ref refuses longer ones */
_Static_assert(BL_RECORD_MAX <= SPILL_BLOCK, "a record fits in a spill block");
#define MAX_THREADS 2

typedef struct block {
    uint64_t off;
    uint32_t len;
} block;

typedef struct seg {
    int file;      /* index of the decide thread whose files hold it */
    uint64_t off, len;
} seg;

typedef struct ref {
    const void *p;
    uint64_t lsn;
    uint32_t len;
} ref;

typedef struct part {
    unsigned char *buf; /* the block being filled */
    size_t len;
    block *blocks;
    size_t nblocks, capblocks;
    uint64_t bytes;
    ref *refs;      /* records decided in place, after the spilled entries */
    size_t nrefs, caprefs;
    seg run[RUN_COUNT]; /* its runs, once decided */
} part;

struct bl_bulk {
    char *tmpdir;
    int spill;
    uint64_t spill_size;
    unsigned nparts;
    part *parts;
    const char *why;
    /* decide */
    int rfd[RUN_COUNT][MAX_THREADS]; /* runs of each kind, per decide thread */
    atomic_uint next_part;
    atomic_int stop;   /* a thread failed: the others stop too */
    int rc;            /* first failure */
    pthread_mutex_t mu;
    bl_bulk_counts counts;
    double t_open, c_open; /* BINDLOG_BULK_DEBUG: phase times, wall and CPU */
    /* the copier: records fed by reference are copied into the spill by a
     * second thread, in the order they come (see bl_bulk_record_ref) */
    struct copier *cp;
    int no_copier;
    size_t nrefs;      /* records held by reference in the partitions */
    size_t ref_max;    /* REF_MAX, or BINDLOG_BULK_REF_MAX for the tests */
    size_t ref_cap0;   /* first size of a partition's references: its share
                        * of the input at 128 bytes a record.  The bench's
                        * records take 147 bytes of an export stream and
                        * 165 of the log's leaf pages, so they never
                        * regrow (a regrowth's copy faults pages in twice);
                        * pages reserved and never touched cost nothing. */
    int refs_off;      /* more than REF_MAX came: references spilled, copier on */
    /* progress: the scan is the first third of `total`, deciding the
     * second, merging the last (bl_bulk_set_progress) */
    bindlog_progress_fn progress;
    void *progress_ctx;
    uint64_t total;
    unsigned parts_done;      /* under mu */
    uint64_t entries, merged; /* keys and sessions decided (under mu) / merged */
};

/* Names in byte order, shorter first. */
static inline int bl_bulk_name_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c != 0 ? c : (al > bl) - (al < bl);
}

/* Whole-buffer pread / pwrite of the bulk path's own temporary files: 0 or
 * BINDLOG_EIO / BINDLOG_ENOSPC / BINDLOG_ENOMEM. */
int bl_bulk_read_all(int fd, void *p, size_t n, uint64_t off);
int bl_bulk_write_all(int fd, const void *p, size_t n, uint64_t off);

/* Record why the bulk path gives up (the first reason wins); returns
 * BL_BULK_FALLBACK. */
int bl_bulk_fall_back(bl_bulk *b, const char *why);

/* BINDLOG_BULK_DEBUG set (not "0"): phase times and waits on stderr. */
int bl_bulk_debug_on(void);

/* A decide thread: takes partitions in turn until none is left or one
 * fails (b->stop), its runs in thread t's files (bulk_decide.c). */
typedef struct bl_bulk_worker {
    bl_bulk *b;
    int t;
    int rc;
} bl_bulk_worker;
void *bl_bulk_decide_thread(void *arg);

/* Merge every partition's runs into `sink`, on a second thread when
 * `threads` >= 2 (bulk_merge.c).  The sink's error, the merge's own, or
 * BL_BULK_FALLBACK (a session used by keys of two partitions, or a
 * children index entry made by two). */
int bl_bulk_merge_all(bl_bulk *b, const bl_bulk_sink *sink, int threads, bl_digest *dg);

#endif /* BL_BULK_INT_H */
