/*
 * bulk.h -- re-deriving a whole log fast: partition it by key, decide each
 * partition in memory, merge the results in table order.
 *
 * Replay, check and import into an empty store must re-derive every record
 * (decode, decide again with the state machine, re-encode, compare byte for
 * byte) and then write the state.  Done record by record against LMDB that
 * is a handful of random B-tree reads and writes per record.  This module
 * does the same re-derivation with the same bl_decide(), but:
 *
 *  1. scan: the caller feeds the base image and then the records in LSN
 *     order; each goes to partition hash(key) % P, spilled to one temporary
 *     file in blocks (a session of the image goes with its key);
 *  2. decide: each partition is replayed alone, in LSN order, against an
 *     in-memory view of its own keys and sessions, then sorted and written
 *     out as three runs (keys, sessions, children index entries), up to
 *     two partitions at a time on two threads;
 *  3. merge: the runs of all partitions are merged in table order and handed
 *     to a sink (LMDB writes with MDB_APPEND, or comparisons).
 *
 * Why it is exact: an event reads the binding of its own key and sessions
 * bound to that key (the current binding, the target, the parent), so a
 * partition that holds every event of its keys decides each one exactly as
 * the whole log would -- as long as no session is used by keys of two
 * partitions.  That only happens when a BIND moves a session to another
 * key (or in a damaged log), and it is detected: the same session id comes
 * out of two partitions, or an image session's parent is missing from its
 * partition.  Then, and on any record that does not re-derive,
 * bl_bulk_run() returns BL_BULK_FALLBACK and the caller runs the
 * sequential replay (maint.h), which gives the exact first bad LSN.  So
 * the fast path never decides anything the sequential one would not.
 *
 * Memory: a partition is sized (BL_BULK_PART_BYTES of input) so that its
 * state fits comfortably; two are in memory at a time, plus a block buffer
 * per partition during the scan, a read buffer per run during the merge,
 * and 24 bytes per record held by reference (at most a million).  It does
 * not grow with the log.  Disk: about the size of the log, then of
 * the state, in unlinked temporary files under the given directory.
 *
 * No LMDB here: the inputs are bytes and the output goes through callbacks.
 */
#ifndef BL_BULK_H
#define BL_BULK_H

#include <stddef.h>
#include <stdint.h>

#include "bindlog.h"

/* Returned by bl_bulk_* when the partitioned path cannot decide this input
 * alone (see above): run the sequential path instead. */
#define BL_BULK_FALLBACK 1

/* Input bytes per partition (records and image entries): at most
 * BL_BULK_PART_BYTES, and for an input under 16 x that, 16 partitions of
 * at least BL_BULK_PART_MIN_BYTES (fewer memory pages touched, and two
 * threads balance). */
#define BL_BULK_PART_BYTES ((uint64_t)8 << 20)
#define BL_BULK_PART_MIN_BYTES ((uint64_t)1 << 20)

typedef struct bl_bulk bl_bulk;

/* Counter changes of the replayed records (meta "counts" deltas). */
typedef struct bl_bulk_counts {
    uint64_t applied[BINDLOG_EVENT_COUNT];
    int64_t live_bindings, live_sessions;
    uint64_t records;
} bl_bulk_counts;

/*
 * Where the merged state goes, in each table's key order: each binding (key
 * order); then each session (id order); then each children index entry in
 * the order of the LMDB children table (record.h, bl_lchild_key): by the
 * parent's created_lsn, then the child id bytewise.  A callback returns 0
 * or a negative BINDLOG_E* code, which stops the merge and is returned.
 */
typedef struct bl_bulk_sink {
    void *ctx;
    int (*binding)(void *ctx, const void *key, size_t key_len, const void *val, size_t val_len);
    int (*session)(void *ctx, const void *id, size_t id_len, const void *val, size_t val_len);
    int (*child)(void *ctx, uint64_t parent_lsn, const void *child, size_t child_len);
} bl_bulk_sink;

/*
 * Start a bulk replay.  `tmpdir` holds the temporary files (unlinked at
 * once); `size_hint` is about how many bytes of image and records will be
 * fed (0 if unknown), which sets the number of partitions.  The environment
 * variable BINDLOG_BULK_PARTITIONS=N forces N partitions (tests use it to
 * exercise the merge on small stores).  0 or BINDLOG_ENOMEM / BINDLOG_EIO /
 * BINDLOG_ENOSPC (the temporary files).
 */
int bl_bulk_open(bl_bulk **out, const char *tmpdir, uint64_t size_hint);
void bl_bulk_free(bl_bulk *b);

/* Feed the base image (any order), then the records in LSN order.  The
 * bytes are copied.  `lsn` is the position the record was read from; the
 * caller has checked that positions are dense.  0 or BL_BULK_FALLBACK (an
 * entry that cannot even be partitioned, i.e. damage; or the bulk path's
 * own temporary files or memory failed, which the sequential path does
 * not need).  An image session goes with the key it is (or was last) bound
 * to: `key` is that key, as the caller's bl_sval_decode() of `val` found
 * it (the callers check each value before they feed it). */
int bl_bulk_image_binding(bl_bulk *b, const void *key, size_t key_len, const void *val,
                          size_t val_len);
int bl_bulk_image_session(bl_bulk *b, const void *id, size_t id_len, const void *val,
                          size_t val_len, const void *key, size_t key_len);
int bl_bulk_record(bl_bulk *b, const void *bytes, size_t len, uint64_t lsn);

/* The same, for bytes the caller keeps where they are, unchanged, until
 * bl_bulk_run() has returned (an LMDB read transaction whose map is not
 * moved: replay and check hold the map lock meanwhile; or the dirty pages
 * of import's own write transaction).  They are decided from there: the
 * partition keeps a reference (24 bytes) and nothing goes to the spill,
 * for up to a million records.  Past that the references so far are spilled in order
 * and a second thread copies the rest into the spill as they come (without
 * a second CPU the caller copies them).  bl_bulk_record() after this spills
 * the references first, so that each partition stays in LSN order.  `key`
 * is the record's key as the caller's bl_record_peek() found it (within
 * `bytes`): the callers have peeked already, and a peek is a third of a
 * record's decoding. */
int bl_bulk_record_ref(bl_bulk *b, const void *bytes, size_t len, uint64_t lsn, const void *key,
                       size_t key_len);

/*
 * Decide every partition and merge into `sink`.  Returns 0 (counts filled,
 * and when `digest` is not NULL the state digest of the merged bindings
 * and sessions: encoded on the merge's thread, hashed on the caller's),
 * BL_BULK_FALLBACK (run the
 * sequential path; the sink may have received part of the output, which
 * the caller discards; this includes failures of the bulk path's own
 * temporary files or memory), or the sink's error.  Call once.
 */
int bl_bulk_run(bl_bulk *b, const bl_bulk_sink *sink, bl_bulk_counts *counts,
                unsigned char digest[BINDLOG_DIGEST_SIZE]);

/* Report progress to fn, on the caller's thread only, in units of `total`:
 * the caller reports its scan as the first third, bl_bulk_run() the
 * deciding as the second and the merge as the last. */
void bl_bulk_set_progress(bl_bulk *b, bindlog_progress_fn fn, void *ctx, uint64_t total);

/* Why the last BL_BULK_FALLBACK happened (static words), or NULL. */
const char *bl_bulk_why(const bl_bulk *b);

/* Process-wide tallies, for tests and the bench: bulk runs that finished,
 * and those that fell back. */
void bl_bulk_tally(uint64_t *finished, uint64_t *fell_back);

/* 0 when BINDLOG_BULK=0 is set in the environment (forces the sequential
 * path, for comparisons), else 1. */
int bl_bulk_enabled(void);

#endif /* BL_BULK_H */
