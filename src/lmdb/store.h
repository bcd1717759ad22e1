/*
 * store.h -- the LMDB environment behind one or more bindlog handles.
 *
 * One bl_env exists per store directory per process (LMDB forbids a second
 * environment on the same files in one process); handles point to it and it
 * is closed with its last handle.  It owns the LMDB environment, the table
 * handles, the group-commit queue and this process's statistics.
 *
 * Map memory and growth: LMDB hands out pointers into its memory map, and
 * mdb_env_set_mapsize() replaces the map.  Every piece of code that touches
 * map memory (a read, a cursor step, the write transaction) therefore holds
 * `map_lock` shared, and growth holds it exclusive.  A cursor kept across
 * releases of the lock must re-seek when `map_epoch` changed (bl_cursor).
 */
#ifndef BL_STORE_H
#define BL_STORE_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "bindlog.h"
#include "core/backend.h"
#include "core/digest.h"
#include "core/group.h"
#include "core/machine.h"

/* Named LMDB tables.  docs/format.md describes each key and value. */
enum {
    BL_DB_META,          /* "format", "magic", "head", "base", "counts" */
    BL_DB_LOG,           /* be64 lsn -> record */
    BL_DB_BINDINGS,      /* key -> binding value */
    BL_DB_SESSIONS,      /* session id -> session value */
    BL_DB_CHILDREN,      /* parent 0x00 child -> "" */
    BL_DB_HISTORY,       /* key 0x00 be64 lsn -> "" */
    BL_DB_BASE_BINDINGS, /* base image of compaction: key -> binding value */
    BL_DB_BASE_SESSIONS, /* base image of compaction: id -> session value */
    BL_DB_COUNT
};

/* Persistent counters kept in meta "counts" (derived from the state; `check`
 * verifies them). */
typedef struct bl_counts {
    uint64_t applied[BINDLOG_EVENT_COUNT];
    uint64_t live_bindings;
    uint64_t live_sessions;
} bl_counts;

/* meta "head": the last LSN and its time, so times never go backwards. */
typedef struct bl_head {
    uint64_t lsn;
    int64_t time_ms;
} bl_head;

typedef struct bl_rtxn bl_rtxn;

typedef struct bl_env {
    struct bl_env *next; /* registry list, under the registry mutex */
    uint64_t id;         /* unique for the process's life: never reused */
    bl_rtxn *rtxns;      /* cached per-thread read transactions (registry mutex) */
    dev_t dev;
    ino_t ino;
    int refs;            /* handles */
    int writers;         /* writable handles */
    char *path;

    MDB_env *env;
    MDB_dbi dbi[BL_DB_COUNT];
    int env_rdonly;      /* the environment itself is MDB_RDONLY */
    int lock_fd;         /* bindlog.lock: shared flock while writable handles exist */

    pthread_rwlock_t map_lock;
    unsigned map_epoch;  /* bumped on every remap; under map_lock exclusive */

    bl_group g;          /* group commit queue, sticky failure, statistics */
    int sync_mode;       /* durability the env flags are set to (leader only) */
    bl_encoded enc;      /* the leader's scratch buffer */
    struct bl_pc *pc;    /* page validation (pagecheck.h) */
} bl_env;


/* ---- environment (store.c) ---------------------------------------------- */

int bl_env_acquire(const char *dir, const bindlog_options *o, bl_env **out);
void bl_env_release(bl_env *e);
/* A writable handle closes: the last one drops the advisory writer lock so
 * that vacuum can run.  Call before bl_env_release(). */
void bl_env_release_writer(bl_env *e);

/* Map an LMDB or errno code to a BINDLOG_E* code. */
int bl_mdb_error(int rc);

/*
 * The code for a failed LMDB write (a commit, the creation of a store) in
 * e's directory.  LMDB reports a short write -- the file system ran out of
 * room part way -- as EIO ("short write, filesystem full?"); while the file
 * system is full (less than 1 MiB left) that EIO is BINDLOG_ENOSPC, as are
 * ENOSPC and EDQUOT, with a last-error detail.  Anything else is
 * bl_mdb_error(rc).
 */
int bl_write_error(bl_env *e, int mdb_rc);

/* 1 if LMDB gave up on e (MDB_FATAL_ERROR: a meta page write failed), so
 * that every later transaction would be MDB_PANIC.  Caller holds map_lock
 * shared. */
int bl_env_fatal(bl_env *e);

/* Grow the map (double it) or adopt a size another process set (grow_to 0).
 * Takes map_lock exclusive: the caller must not hold it. */
int bl_env_resize(bl_env *e, int adopt_only);

/*
 * Read transactions: begin under map_lock shared, which the caller keeps
 * while it touches map memory.  bl_read_begin returns with the lock held on
 * success and released on failure; bl_read_end ends the transaction and
 * unlocks.  Each thread keeps one reset transaction per store and renews it
 * (mdb_txn_renew is far cheaper than begin/abort), so short reads from many
 * threads share no lock but the map's.  A thread that is already inside a
 * read of the same store gets a fresh transaction instead.
 * bl_read_begin_fresh always begins a new transaction: for iterators, which
 * keep theirs for their whole life; end it with bl_read_end too.
 */
int bl_read_begin(bl_env *e, MDB_txn **txn);
int bl_read_begin_fresh(bl_env *e, MDB_txn **txn);
void bl_read_end(bl_env *e, MDB_txn *txn);
static inline void bl_map_rdlock(bl_env *e) { pthread_rwlock_rdlock(&e->map_lock); }
static inline void bl_map_unlock(bl_env *e) { pthread_rwlock_unlock(&e->map_lock); }

/* ---- tables ----------------------------------------------------------------- */

/* Which tables a view reads and an apply writes: the live ones, or the base
 * image (compaction), or another store's (replay). */
typedef struct bl_tables {
    MDB_txn *txn;
    MDB_dbi bindings, sessions;
    MDB_dbi children, history, log; /* 0 = do not maintain */
} bl_tables;

/* The LMDB name of table db (BL_DB_*): "log", "bindings", ... */
const char *bl_db_name(int db);

void bl_tables_live(bl_env *e, MDB_txn *txn, bl_tables *t);
void bl_tables_base(bl_env *e, MDB_txn *txn, bl_tables *t);

/* A bl_view over tables (for bl_decide). */
void bl_view_init(bl_view *v, bl_tables *t);

/* Write an APPLIED, encoded plan.  Returns 0 or a BINDLOG_E* (map full is
 * BINDLOG_ENOSPC with *map_full set so the caller can grow and retry). */
int bl_tables_apply(bl_tables *t, const bl_plan *p, const bl_encoded *enc, int *map_full);

/* meta records: getters return BINDLOG_E* codes (a missing record reads as
 * zero); putters return raw LMDB codes so the caller can spot MDB_MAP_FULL. */
int bl_meta_get_head(bl_env *e, MDB_txn *txn, bl_head *h);
int bl_meta_put_head(bl_env *e, MDB_txn *txn, const bl_head *h);
int bl_meta_get_counts(bl_env *e, MDB_txn *txn, bl_counts *c);
int bl_meta_put_counts(bl_env *e, MDB_txn *txn, const bl_counts *c);
int bl_meta_get_u64(bl_env *e, MDB_txn *txn, const char *name, uint64_t *v);
int bl_meta_put_u64(bl_env *e, MDB_txn *txn, const char *name, uint64_t v);

/* Apply a plan's counter deltas. */
void bl_counts_apply(bl_counts *c, const bl_plan *p);

/* ---- cursors that survive a remap -------------------------------------- */

typedef struct bl_cursor {
    bl_env *e;
    MDB_txn *txn;
    MDB_dbi dbi;
    int db;                     /* BL_DB_* of dbi (limits.h), or -1 */
    MDB_cursor *c;
    unsigned epoch;
    int state;                  /* 0 fresh, 1 positioned, 2 at end */
    unsigned char key[512];     /* last key returned (LMDB keys are <= 511) */
    size_t key_len;
} bl_cursor;

/* Position at the first key >= seek (NULL: first key). */
int bl_cursor_open(bl_cursor *c, bl_env *e, MDB_txn *txn, MDB_dbi dbi, const void *seek,
                   size_t seek_len);
/* Next entry (the first one after open).  Caller holds map_lock shared and
 * uses k/v only while it does.  1 entry, 0 end, <0 error.  The entry's
 * lengths are checked against its table's limits first (limits.h): a
 * damaged length is BINDLOG_ECORRUPT, never handed on. */
int bl_cursor_next(bl_cursor *c, MDB_val *k, MDB_val *v);
void bl_cursor_close(bl_cursor *c);

/* ---- write path (commit.c) ---------------------------------------------- */

/* Apply n events through group commit.  Returns 0 (outcomes in out[]), or
 * an error with *err_index set to the failing event. */
int bl_commit(bindlog *h, const bl_event *ev, size_t n, bindlog_result *out, size_t *err_index);
/* n independent events, one request each in one group (bl_group_submit_each). */
int bl_commit_each(bindlog *h, const bl_event *ev, size_t n, bindlog_result *out, int *codes);

/* The state digest of the given tables (digest.c); caller holds map_lock
 * shared.  Unless keep_lock, it releases and retakes the lock between
 * chunks so that growth is not held up by a long scan of a read snapshot;
 * inside a write transaction pass keep_lock = 1 (a thread waiting to grow the
 * map while this one holds LMDB's writer lock would deadlock). */
int bl_digest_tables(bl_env *e, MDB_txn *txn, MDB_dbi bindings, MDB_dbi sessions,
                     int keep_lock, unsigned char out[BINDLOG_DIGEST_SIZE]);


/* Handles open on the environment in this process (vacuum refuses if any
 * other than its own). */
int bl_env_open_handles(bl_env *e);


/* ---- the LMDB backend's operations (backend_lmdb.c lists them) ---------- */

int bl_lmdb_get(bindlog *h, const char *key, size_t key_len, bindlog_binding *out);
int bl_lmdb_session_get(bindlog *h, const char *id, size_t id_len, bindlog_session *out,
                        void *origin_buf, size_t origin_cap);
int bl_lmdb_iter(bindlog *h, int kind, const char *arg, size_t arg_len, uint64_t from,
                 uint64_t to, bindlog_iter **out);
int bl_lmdb_stats(bindlog *h, bindlog_stats *out);
int bl_lmdb_digest(bindlog *h, unsigned char out[BINDLOG_DIGEST_SIZE], uint64_t *head_lsn);
int bl_lmdb_wait(bindlog *h, uint64_t after_lsn, int timeout_ms, uint64_t *head);
int bl_lmdb_check(bindlog *h, bindlog_check_report *out, bindlog_progress_fn fn, void *ctx);
int bl_lmdb_replay(bindlog *h, const char *out_dir, uint64_t to_lsn, int64_t to_time_ms,
                   unsigned char digest[BINDLOG_DIGEST_SIZE], uint64_t *last_lsn,
                   bindlog_progress_fn fn, void *ctx);
int bl_lmdb_lsn_at_time(bindlog *h, int64_t time_ms, uint64_t *lsn);
int bl_lmdb_compact(bindlog *h, uint64_t keep_from_lsn, uint64_t *removed,
                    bindlog_progress_fn fn, void *ctx);
int bl_lmdb_export(bindlog *h, uint64_t from_lsn, int fd, uint64_t *records,
                   bindlog_progress_fn fn, void *ctx);
int bl_lmdb_import(bindlog *h, int fd, uint64_t *records, uint64_t *err_offset,
                   bindlog_progress_fn fn, void *ctx);

#endif /* BL_STORE_H */
