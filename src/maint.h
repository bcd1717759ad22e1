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

#include "store.h"

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

/* Encoded size of bl_counts in meta records and streams. */
#define BL_COUNTS_BYTES (8 * (BINDLOG_EVENT_COUNT + 2))
void bl_counts_encode(unsigned char out[BL_COUNTS_BYTES], const bl_counts *c);
void bl_counts_decode(const unsigned char in[BL_COUNTS_BYTES], bl_counts *c);

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
int bl_replay_one(bl_replayer *r, bl_tables *t, const void *bytes, size_t len, uint64_t key_lsn,
                  int *map_full);

/* Records re-derived per write transaction, and the bytes of record data
 * after which a transaction is cut short: large enough that commits cost
 * little, small enough that a full map costs little to redo and that
 * writers in other threads interleave with compaction. */
#define BL_CHUNK_RECORDS 20000
#define BL_CHUNK_BYTES ((size_t)16 << 20)
#define BL_COMPACT_CHUNK 5000

/* Scratch directories for check, replay and the etcd mirror (replay.c). */
char *bl_scratch_dir(const char *tag);
void bl_scratch_remove(const char *dir);

#endif /* BL_MAINT_H */
