/*
 * maint.h -- helpers shared by the maintenance code: replay and check
 * (replay.c), compaction and vacuum (compact.c), export and import
 * (stream.c).
 *
 * The one idea they share: a stored record is trusted only if the state
 * machine re-derives it.  bl_replay_one() decodes a record, re-decides the
 * event it stands for against the state it is being applied to, requires
 * APPLIED and byte-identical re-encoding, and only then writes the plan.
 * Replay into a new store, check (into a scratch store), compaction (into
 * the base image) and import (into the live tables) all go through it, so a
 * damaged or forged record can reach no table.
 *
 * Write transactions on an environment other handles may use follow the
 * rules of store.h and commit.c: map_lock is held shared while the
 * transaction is open (bl_wtxn_*), a full map is grown with the lock
 * released and the work redone, and a commit that fails after writing
 * makes the environment sticky-failed (BINDLOG_EPANIC).
 */
#ifndef BL_MAINT_H
#define BL_MAINT_H

#include <stddef.h>
#include <stdint.h>

#include "maint/bulk.h"
#include "lmdb/store.h"

/* ---- the base image's meta records ---------------------------------------
 *
 * meta "base"        u64 LSN of the base image (0 = none: the log is whole);
 * meta "base_time"   i64 time_ms of the record at that LSN (so a store
 *                    replayed or imported from an image alone still keeps
 *                    event times monotonic);
 * meta "base_counts" the counters (bl_counts, same layout as meta "counts")
 *                    of the state at that LSN, so that check can verify
 *                    meta "counts" exactly although the records that
 *                    produced the image are gone.
 * All three are missing (read as zero) in a store never compacted. */
typedef struct bl_base {
    uint64_t lsn;
    int64_t time_ms;
    bl_counts counts;
} bl_base;

/* Read the base image's meta records (missing ones read as zero).
 * BINDLOG_E* code. */
int bl_base_get(bl_env *e, MDB_txn *txn, bl_base *b);
/* Write them.  Returns a raw LMDB code (MDB_MAP_FULL must stay visible). */
int bl_base_put(bl_env *e, MDB_txn *txn, const bl_base *b);

/* bl_counts_encode / bl_counts_decode and BL_COUNTS_BYTES: lmdb/store.h. */

/* ---- write transactions ---------------------------------------------------
 *
 * bl_wtxn_begin returns with map_lock held shared and the transaction
 * open (adopting a map another process grew); on failure nothing is held.
 * bl_wtxn_abort and bl_wtxn_commit end the transaction and release the
 * lock.  bl_wtxn_commit returns 0, BINDLOG_ENOSPC (with *map_full set when
 * growing the map and redoing the work may help; the store is unchanged),
 * or BINDLOG_EPANIC (the commit failed after writing; e->panic is set). */
int bl_wtxn_begin(bl_env *e, MDB_txn **txn);
void bl_wtxn_abort(bl_env *e, MDB_txn *txn);
int bl_wtxn_commit(bl_env *e, MDB_txn *txn, int *map_full);

/* ---- re-deriving records -------------------------------------------------- */

/* Running state of a replay.  Only the fields up to `why` are state; save
 * and restore them (bl_replay_mark) to redo a chunk after a full map. */
typedef struct bl_replayer {
    uint64_t next_lsn;  /* the LSN the next record must carry */
    int64_t last_time;  /* time of the previous record: times never go back */
    int64_t to_time;    /* records later than this are not applied */
    bl_counts counts;   /* meta "counts" after the records applied so far */
    uint64_t applied;   /* records applied by this replayer */
    const char *why;    /* static words for the last refusal, or NULL */
    bl_encoded enc;     /* scratch buffer, reused for every record */
} bl_replayer;

typedef struct bl_replay_mark {
    uint64_t next_lsn, applied;
    int64_t last_time;
    bl_counts counts;
} bl_replay_mark;

void bl_replayer_init(bl_replayer *r, uint64_t next_lsn, int64_t last_time,
                      const bl_counts *counts);
void bl_replayer_free(bl_replayer *r);
void bl_replayer_save(const bl_replayer *r, bl_replay_mark *m);
void bl_replayer_restore(bl_replayer *r, const bl_replay_mark *m);

/*
 * Re-derive the stored record [bytes, bytes+len), found under `key_lsn`,
 * against tables `t` and apply it there.  Returns 0 (applied), 1 (its time
 * is after r->to_time: not applied, the replay stops here),
 * BINDLOG_ECORRUPT / BINDLOG_EVERSION with r->why set (the record is
 * damaged, out of sequence, or does not re-derive to the same bytes;
 * nothing written), or a storage error (*map_full set when the map is
 * full).  The caller holds the map locks of the environments `bytes` and
 * `t` live in.
 */
/*
 * Give every session of table db (BL_DB_SESSIONS or BL_DB_BASE_SESSIONS of
 * e, whole values, marked or not) the sibling chain the state machine would
 * have given it (relink.c): each parent names its youngest child, each
 * child its next older sibling, over the sessions the table holds.  For a
 * table whose values came from elsewhere (an etcd mirror, the state recover
 * rebuilt).  Rewrites only the values that change, in txn (a write
 * transaction of e); a value that does not decode whole is left as it is
 * (check names it).  0, BINDLOG_ENOMEM, or an LMDB error (*map_full set
 * when the map is full).
 */
int bl_relink(bl_env *e, MDB_txn *txn, int db, int *map_full);

int bl_replay_one(bl_replayer *r, bl_tables *t, const void *bytes, size_t len, uint64_t key_lsn,
                  int *map_full);

/* Records re-derived per write transaction, and the bytes of record data
 * after which a transaction is cut short: large enough that commits cost
 * little, small enough that a full map costs little to redo and that
 * writers in other threads interleave with compaction. */
#define BL_CHUNK_RECORDS 20000
#define BL_CHUNK_BYTES ((size_t)16 << 20)
#define BL_COMPACT_CHUNK 5000

/* ---- the bulk replay on LMDB (bulk_lmdb.c; see bulk.h) ---------------------
 *
 * An appender writes entries in key order with MDB_APPEND: into the
 * caller's transaction (txn != NULL: import), or into transactions of its
 * own, committed every 8 MiB, with the map grown before each (replay and
 * check, whose targets nobody else writes), each commit's writeback started
 * at once (sync_file_range) so that the target's one sync at the end has
 * little left to write.  Puts return 0 or BINDLOG_E*
 * (BINDLOG_ECORRUPT for a key out of order or repeated). */
typedef struct bl_appender {
    bl_env *e;
    MDB_txn *txn;
    int own;
    MDB_cursor *cur[BL_DB_COUNT];
    size_t bytes;
    int map_full;      /* a put found the map full (BINDLOG_ENOSPC) */
} bl_appender;

int bl_appender_init(bl_appender *a, bl_env *e, MDB_txn *txn);
int bl_appender_put(bl_appender *a, int db, const void *k, size_t kn, const void *v, size_t vn);
/* The same, and *at receives where the value now lies: in a dirty page of
 * the caller's transaction (txn != NULL), where it stays, unchanged, until
 * that transaction ends, as long as LMDB does not spill dirty pages (it does
 * past 128K of them, 512 MiB: the caller keeps well under that while it
 * uses *at).  MDB_APPEND fills pages left to right and moves no node it
 * has placed; MDB_RESERVE hands back the room. */
int bl_appender_put_at(bl_appender *a, int db, const void *k, size_t kn, const void *v,
                       size_t vn, const void **at);
int bl_appender_finish(bl_appender *a); /* commits its own transaction */
void bl_appender_abort(bl_appender *a);
/* A bulk sink writing bindings, history, sessions and children through a. */
void bl_appender_sink(bl_appender *a, bl_bulk_sink *s);

/* Writeback while one long commit writes (import's single transaction): a
 * thread that starts the writeback of e's data file every millisecond
 * (sync_file_range, without waiting) until bl_writeback_stop(), so that the
 * sync after the commit finds most pages on the disk already.  NULL when no
 * thread could be started, or off Linux: then the sync writes everything,
 * as before.  It never syncs and never fails the commit; stop joins it. */
typedef struct bl_writeback bl_writeback;
bl_writeback *bl_writeback_start(bl_env *e);
void bl_writeback_stop(bl_writeback *w); /* NULL is a no-op */

/* Grow e's map until `want` bytes are free past its last page (no
 * transaction of this thread may be open).  0 or BINDLOG_E*. */
int bl_reserve_map(bl_env *e, uint64_t want);

/* Feed src's base image tables into b (and to base_out's base tables if
 * not NULL), counting its live entries.  Caller holds src's map lock. */
int bl_bulk_feed_image(bl_bulk *b, bl_env *src, MDB_txn *stxn, bl_appender *base_out,
                       uint64_t *live_bindings, uint64_t *live_sessions);

/* Feeding src's log from next_lsn up to last_lsn (records after to_time
 * end it), copying records to log_out's log table if not NULL.  Any
 * irregularity (a hole, a key that is not an LSN, time going back, a
 * damaged record at the to_time stop) is BL_BULK_FALLBACK: the sequential
 * replay reports it exactly.  Records are fed by reference
 * (bl_bulk_record_ref): the caller keeps src's map lock, without releasing
 * it, until bl_bulk_run() has decided every partition. */
typedef struct bl_bulk_scan {
    bl_env *src;
    bl_snap *ss;                 /* the source: LMDB plus the log's tail */
    uint64_t next_lsn, last_lsn; /* in: the range; out: next_lsn is one past the last fed */
    int64_t last_time, to_time;  /* in: the time before next_lsn; out: the last fed */
    bl_appender *log_out;
    struct bl_logcopy *log_later; /* instead of log_out: the records, to copy on a thread */
    uint64_t scanned, total;
    bindlog_progress_fn progress;
    void *progress_ctx;
} bl_bulk_scan;
int bl_bulk_feed_log(bl_bulk *b, bl_bulk_scan *x);

/*
 * The log records a replay copies into its target, written on a thread of
 * their own while the bulk replay reads the log and decides
 * (bl_bulk_feed_log collects them by reference: the caller holds the
 * source's snapshot and map lock until bl_logcopy_join).  The thread
 * writes them in transactions of its own, so the target's writer must have
 * committed before bl_logcopy_start and begin nothing before
 * bl_logcopy_join.  Records are consecutive by LSN from the first added.
 * The thread starts at once and copies the records as they are added, a
 * batch at a time; adds are made from one thread.
 */
typedef struct bl_logcopy bl_logcopy;
/* NULL on no memory (the caller copies inline instead); `records` is how
 * many will be added at most (an estimate is enough: it only sizes). */
bl_logcopy *bl_logcopy_new(uint64_t records);
/* Start the thread writing into dst (before or after the first add).
 * When no thread can start, the copy runs in bl_logcopy_join instead. */
void bl_logcopy_start(bl_logcopy *lc, bl_env *dst);
/* 0, BINDLOG_ENOMEM, or BINDLOG_EINVAL (an LSN out of sequence, or an add
 * after the join). */
int bl_logcopy_add(bl_logcopy *lc, const void *rec, size_t len, uint64_t lsn);
/* No more records: wait for the copy of those added.  0 or its error;
 * again: the same result. */
int bl_logcopy_join(bl_logcopy *lc);
/* Joins first if need be. */
void bl_logcopy_free(bl_logcopy *lc);

/* About how many bytes of image and log a bulk replay of e will be fed. */
uint64_t bl_bulk_size_hint(bl_env *e, MDB_txn *txn);

/* $TMPDIR, or /tmp when it is unset or empty. */
const char *bl_tmp_root(void);

/* Scratch directories for check, replay and the etcd mirror (replay.c). */
char *bl_scratch_dir(const char *tag);
void bl_scratch_remove(const char *dir);

#endif /* BL_MAINT_H */
