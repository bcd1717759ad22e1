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
 *
 * `map_lock` is a bl_srwlock (core/srwlock.h): shared holds from different
 * threads write no common cache line.  With one rwlock, two threads
 * reading at once (or one beside the checkpointer) passed its line between
 * their CPUs on every call.
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
#include "core/srwlock.h"

/* Named LMDB tables.  docs/format.md describes each key and value. */
enum {
    BL_DB_META,          /* "format", "magic", "head", "base", "counts" */
    BL_DB_LOG,           /* be64 lsn -> record */
    BL_DB_BINDINGS,      /* key -> binding value */
    BL_DB_SESSIONS,      /* session id -> session value */
    BL_DB_CHILDREN,      /* be64 parent created_lsn, child -> "" */
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
    size_t made_dirs; /* the open that created the store made directories:
                       * the length of the shallowest one's path; else 0 */

    MDB_env *env;
    MDB_dbi dbi[BL_DB_COUNT];
    int env_rdonly;      /* the environment itself is MDB_RDONLY */
    int lock_fd;         /* bindlog.lock: shared flock while writable handles exist */

    bl_srwlock map_lock;
    unsigned map_epoch;  /* bumped on every remap; under map_lock exclusive */

    bl_group g;          /* group commit queue, sticky failure, statistics */
    bl_encoded enc;      /* the leader's scratch buffer */
    struct bl_walenv *wal; /* the write-ahead log (walenv.h) */
    struct bl_pc *pc;    /* page validation (pagecheck.h) */
} bl_env;


/* ---- environment (store.c) ---------------------------------------------- */

int bl_env_acquire(const char *dir, const bindlog_options *o, bl_env **out);

/* Open the tables of the store (check its magic and format), or create
 * them when may_create and there are none, stamping meta "wal" with the
 * log's salt and cap.  For walenv.c, which decides when a store may be
 * created.  0 or BINDLOG_E* with a last-error detail. */
int bl_env_init_tables(bl_env *e, int may_create, uint64_t salt, uint64_t cap);

/* Set (on the calling thread) only by bindlog upgrade around the open and
 * close that checkpoint a format-2 or format-3 store before it is read: a
 * checkpoint copies its log's puts into the tables as they are (format 2's
 * history index included), in the encodings that log carries.  Never set
 * for anything that writes events. */
extern _Thread_local int bl_open_format2;
void bl_env_release(bl_env *e);
/* Make the names of a new store's files lasting: flush its log file, its
 * directory, and the directories that hold the ones its open made (a store
 * opened without flushes, then filled and flushed as a whole: replay's
 * new store).  0 or BINDLOG_EIO (or another code of the failing flush)
 * naming the file. */
int bl_env_flush_names(bl_env *e);
/* A writable handle closes: the last one drops the advisory writer lock so
 * that vacuum can run.  Call before bl_env_release(). */
void bl_env_release_writer(bl_env *e);

/* Map an LMDB or errno code to a BINDLOG_E* code: 0 for 0, a negative
 * code for anything else. */
int bl_mdb_error(int rc);
/* errno's failure of a system call on `what` (a file, a step): its
 * BINDLOG_E* code, with the message "what: strerror(errno)". */
int bl_sys_error(const char *what);
#ifdef __clang_analyzer__
/* For clang's static analyzer only (as bl_err_set in error.h): it cannot
 * see into store.c, and took an error's code for a possible 0. */
static inline int bl_mdb_error_seen(int rc)
{
    int code = bl_mdb_error(rc);
    return rc == 0 ? 0 : code < 0 ? code : BINDLOG_EIO;
}
#define bl_mdb_error(rc) bl_mdb_error_seen(rc)
#endif

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

/* mdb_txn_begin for callers outside the read and write paths (open,
 * recovery, maintenance), which do not hold map_lock: a map that another
 * process grew (MDB_MAP_RESIZED) is adopted and the begin retried.  0 or
 * BINDLOG_E*. */
int bl_txn_begin(bl_env *e, unsigned flags, MDB_txn **txn);

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
/* map_lock shared; unlocked by the thread that locked it. */
static inline void bl_map_rdlock(bl_env *e) { bl_srw_rdlock(&e->map_lock); }
static inline void bl_map_unlock(bl_env *e) { bl_srw_rdunlock(&e->map_lock); }

/* ---- tables ----------------------------------------------------------------- */

/* Which tables a view reads and an apply writes: the live ones, or the base
 * image (compaction), or another store's (replay). */
typedef struct bl_tables {
    MDB_txn *txn;
    MDB_dbi bindings, sessions;
    MDB_dbi children, history, log; /* 0 = do not maintain */
    /* What a reference session value names (bl_sval_read): through
     * rec_get(rec_ctx, ...) if set, else the log `reflog` and the base
     * image `refbase` of txn.  All unset: the sessions are a base image's
     * (whole values, marked: bl_sval_encode_base), which is also how
     * bl_replay_one() then writes them. */
    MDB_dbi reflog, refbase;
    bl_ref_fn rec_get;
    void *rec_ctx;
} bl_tables;

/* The LMDB name of table db (BL_DB_*): "log", "bindings", ... */
const char *bl_db_name(int db);

void bl_tables_live(bl_env *e, MDB_txn *txn, bl_tables *t);
void bl_tables_base(bl_env *e, MDB_txn *txn, bl_tables *t);
/* The base image as compaction folds records into it: bl_tables_base, and
 * each child a folded record creates gets its entry in the live children
 * table (its record leaves the log, and with it the sibling chain's way to
 * its id: docs/format.md, "LMDB tables"). */
void bl_tables_compact(bl_env *e, MDB_txn *txn, bl_tables *t);

/* A bl_view over tables (for bl_decide).  Its sessions resolve a
 * reference value (bl_sval_read) through the tables' log. */
void bl_view_init(bl_view *v, bl_tables *t);
/* bl_ref_fn over a bl_tables (ctx). */
int bl_tables_ref(void *ctx, int what, uint64_t lsn, const char *id, size_t id_len,
                  const void **v, size_t *n);
/* 1 if t's sessions may hold references (and bl_replay_one writes them). */
static inline int bl_tables_refs(const bl_tables *t) { return t->reflog != 0 || t->rec_get != NULL; }

/*
 * The children-table key of session `id`, whose value is `sv`, when its
 * parent's value is read from `sessions` (table `db` of the limits) in
 * `txn`: be64 of the parent's created_lsn, then `id` (bl_lchild_key).  For
 * the tables built from a base image, whose records are gone.  Returns the
 * key's length; 0 when the session has no entry: a root session, or one
 * whose parent `sessions` does not hold, or holds created after it
 * (bl_child_indexed); BINDLOG_ECORRUPT (with a message) when the parent's
 * value is damaged, or another negative error of the read.
 */
int bl_child_entry_key(MDB_txn *txn, MDB_dbi sessions, int db, const bl_sval *sv,
                       const void *id, size_t id_len, unsigned char out[BL_LCHILD_KEY_MAX]);

/* Write an APPLIED, encoded plan.  Returns 0 or a BINDLOG_E* (map full is
 * BINDLOG_ENOSPC with *map_full set so the caller can grow and retry). */
int bl_tables_apply(bl_tables *t, const bl_plan *p, const bl_encoded *enc, int *map_full);

/* Store-wide commit statistics, meta "stats": groups committed and the
 * events they applied, over the store's life, whichever process wrote. */
typedef struct bl_gstats {
    uint64_t commits;
    uint64_t grouped_events;
} bl_gstats;

/* The bytes of meta "head" (16), "counts" (64 or 72) and "stats" (16): the
 * log's frames carry them as puts, LMDB as values (docs/format.md).
 * "counts" is u64 applied[0..5], live bindings, live sessions (64 bytes),
 * then, interim within format 3, u64 applied[BINDLOG_EVENT_ROUTE] only once
 * a route was applied (72 bytes): a store without routes keeps the bytes
 * it always had.  bl_counts_encode returns the length it wrote. */
#define BL_HEAD_BYTES 16
#define BL_COUNTS_BYTES_V3 64
#define BL_COUNTS_BYTES (BL_COUNTS_BYTES_V3 + 8)
#define BL_GSTATS_BYTES 16
static inline int bl_counts_len_ok(size_t n)
{
    return n == BL_COUNTS_BYTES_V3 || n == BL_COUNTS_BYTES;
}
void bl_head_encode(unsigned char out[BL_HEAD_BYTES], const bl_head *h);
int bl_head_decode(const void *p, size_t n, bl_head *h);            /* 0 or ECORRUPT */
size_t bl_counts_encode(unsigned char out[BL_COUNTS_BYTES], const bl_counts *c);
/* in holds len bytes, bl_counts_len_ok(len) */
void bl_counts_decode(const unsigned char *in, size_t len, bl_counts *c);
void bl_gstats_encode(unsigned char out[BL_GSTATS_BYTES], const bl_gstats *g);
int bl_gstats_decode(const void *p, size_t n, bl_gstats *g);        /* 0 or ECORRUPT */

/*
 * The state writes of an APPLIED, encoded plan, as a list of puts (table,
 * key, value), the log record excepted: this is the one place that knows
 * which tables an event touches.  The write-ahead log carries these puts
 * in its frames and the checkpoint applies them; bl_tables_apply() applies
 * them straight to LMDB tables (replay, compaction).  fn's non-zero return
 * stops the walk and is returned.
 */
typedef int (*bl_put_fn)(void *ctx, unsigned table, const void *k, size_t kn, const void *v,
                         size_t vn);
int bl_plan_puts(const bl_plan *p, const bl_encoded *enc, bl_put_fn fn, void *ctx);

/* meta records: getters return BINDLOG_E* codes (a missing record reads as
 * zero); putters return raw LMDB codes so the caller can spot MDB_MAP_FULL. */
int bl_meta_get_head(bl_env *e, MDB_txn *txn, bl_head *h);
int bl_meta_put_head(bl_env *e, MDB_txn *txn, const bl_head *h);
int bl_meta_get_counts(bl_env *e, MDB_txn *txn, bl_counts *c);
int bl_meta_put_counts(bl_env *e, MDB_txn *txn, const bl_counts *c);
int bl_meta_get_u64(bl_env *e, MDB_txn *txn, const char *name, uint64_t *v);
int bl_meta_get_gstats(bl_env *e, MDB_txn *txn, bl_gstats *g);
int bl_meta_put_u64(bl_env *e, MDB_txn *txn, const char *name, uint64_t v);

/* Apply a plan's counter deltas. */
void bl_counts_apply(bl_counts *c, const bl_plan *p);

/* ---- snapshots: LMDB plus the log's tail (snap.c) ----------------------
 *
 * A consistent view of the whole state for iterators, statistics, the
 * digest and maintenance: an LMDB read transaction (the checkpointed state
 * up to its meta "head" H) plus the groups of the log's tail after H up to
 * the visible end when the snapshot was taken (`head`), kept referenced for
 * the snapshot's life.  Lookups and cursors see the tail's newest value of
 * a key over LMDB's.  How it stays consistent with checkpoints running
 * meanwhile: the groups are taken first, the LMDB transaction begun after,
 * and the index never drops a group before LMDB holds it, so H is at least
 * the index's base and the groups cover (H, head] whole.
 */
struct bl_tgroup;
struct bl_tent;

typedef struct bl_snap {
    bl_env *e;
    MDB_txn *txn;
    uint64_t lmdb_head;           /* LMDB's meta "head" in txn */
    uint64_t head;                /* the snapshot's last LSN */
    struct bl_tgroup **gs;        /* the tail's groups after lmdb_head, oldest first */
    size_t ngs;
    struct bl_tent *tab[BL_DB_COUNT]; /* per table, sorted, built on first use */
    size_t ntab[BL_DB_COUNT];
    unsigned char built[BL_DB_COUNT];
} bl_snap;

/* Take a snapshot.  Returns with map_lock held shared (like bl_read_begin;
 * iterators release it between calls), or an error with nothing held.
 * `fresh`: a transaction of its own (iterators, long scans), else the
 * thread's cached one.  0 or BINDLOG_E*. */
int bl_snap_open(bl_env *e, bl_snap *s, int fresh);
/* End it: the transaction, the map lock, the groups. */
void bl_snap_close(bl_snap *s);
/* The sorted tail entries of table db (empty for a table the log never
 * writes).  0 or BINDLOG_ENOMEM. */
int bl_snap_table(bl_snap *s, int db, const struct bl_tent **ents, size_t *n);
/* Look a key up: the tail, then LMDB.  0 (v set; valid while the map lock
 * is held and the snapshot open), BINDLOG_ENOTFOUND, or an error. */
int bl_snap_get(bl_snap *s, int db, const void *key, size_t klen, MDB_val *v);
/* bl_ref_fn over a snapshot (ctx). */
int bl_snap_ref(void *ctx, int what, uint64_t lsn, const char *id, size_t id_len,
                const void **v, size_t *n);
/* bl_snap_ref from a thread other than the snapshot's: LMDB's side is
 * searched from root[0] (the log's) and root[1] (the base image's
 * sessions'), taken by bl_pc_root on the snapshot's thread, and the two
 * tables' tails must have been built (bl_snap_table) before; the map lock
 * is held for it meanwhile. */
struct bl_pc_db;
int bl_snap_ref_at(bl_snap *s, const struct bl_pc_db *root, int what, uint64_t lsn,
                   const char *id, size_t id_len, const void **v, size_t *n);
/* A session through the snapshot, a reference resolved (bl_sval_read):
 * 0, BINDLOG_ENOTFOUND or an error. */
int bl_snap_session(bl_snap *s, const void *id, size_t id_len, bl_sval *out);
/* Entries of a table in the snapshot (LMDB's plus the tail's new keys). */
uint64_t bl_snap_entries(bl_snap *s, int db);
/* Meta records through the snapshot (missing ones read as zero). */
int bl_snap_head(bl_snap *s, bl_head *h);
int bl_snap_counts(bl_snap *s, bl_counts *c);
int bl_snap_gstats(bl_snap *s, bl_gstats *g);

/* ---- cursors that survive a remap, over a snapshot or a transaction ----- */

typedef struct bl_cursor {
    bl_env *e;
    MDB_txn *txn;
    MDB_dbi dbi;
    int db;                     /* BL_DB_* of dbi (limits.h), or -1 */
    MDB_cursor *c;
    unsigned epoch;
    int state;                  /* 0 fresh, 1 positioned, 2 at end */
    int lm;                     /* LMDB side: 0 unpositioned, 1 peeked, 2 taken, 3 end */
    MDB_val lk, lv;             /* LMDB's peeked entry (this epoch) */
    const struct bl_tent *tail; /* the snapshot's tail entries of the table, or NULL */
    size_t tail_n, tail_i;
    int returned;               /* key below is the last key returned */
    int unchecked;              /* the caller checks each entry's lengths itself */
    unsigned char key[512];     /* last key returned, or the seek key (LMDB keys are <= 511) */
    size_t key_len;
} bl_cursor;

/* Position at the first key >= seek (NULL: first key) of a table in a
 * transaction (no tail). */
int bl_cursor_open(bl_cursor *c, bl_env *e, MDB_txn *txn, MDB_dbi dbi, const void *seek,
                   size_t seek_len);
/* The same over a snapshot: LMDB's entries merged with the tail's, the
 * tail's value winning for a key both have. */
int bl_cursor_open_snap(bl_cursor *c, bl_snap *s, int db, const void *seek, size_t seek_len);
/* Next entry (the first one after open).  Caller holds map_lock shared and
 * uses k/v only while it does.  1 entry, 0 end, <0 error.  The entry's
 * lengths are checked against its table's limits first (limits.h): a
 * damaged length is BINDLOG_ECORRUPT, never handed on. */
int bl_cursor_next(bl_cursor *c, MDB_val *k, MDB_val *v);
/* For a scan that reports a damaged entry as a finding rather than stops
 * at it (check, replay): bl_cursor_next() then returns every entry as it
 * is, and the caller calls bl_entry_check() before it reads a value. */
static inline void bl_cursor_unchecked(bl_cursor *c) { c->unchecked = 1; }
void bl_cursor_close(bl_cursor *c);

/* ---- write path (commit.c) ---------------------------------------------- */

/* Apply n events through group commit.  Returns 0 (outcomes in out[]), or
 * an error with *err_index set to the failing event. */
int bl_commit(bindlog *h, const bl_event *ev, size_t n, bindlog_result *out, size_t *err_index);
/* n independent events, one request each in one group (bl_group_submit_each). */
int bl_commit_each(bindlog *h, const bl_event *ev, size_t n, bindlog_result *out, int *codes,
                   char *msgs);

/* The state digest of the given tables (digest.c); caller holds map_lock
 * shared.  Unless keep_lock, it releases and retakes the lock between
 * chunks so that growth is not held up by a long scan of a read snapshot;
 * inside a write transaction pass keep_lock = 1 (a thread waiting to grow the
 * map while this one holds LMDB's writer lock would deadlock). */
int bl_digest_tables(bl_env *e, MDB_txn *txn, MDB_dbi bindings, MDB_dbi sessions,
                     int keep_lock, bl_ref_fn get, void *ctx,
                     unsigned char out[BINDLOG_DIGEST_SIZE]);
/* The same over a snapshot (the live tables, LMDB plus the tail). */
int bl_digest_snap(bl_snap *s, int keep_lock, unsigned char out[BINDLOG_DIGEST_SIZE]);
/* The session entries hashed so far, process-wide, by bl_digest_snap's
 * helper threads (a store of many sessions is hashed on two threads). */
void bl_digest_split_tally(uint64_t *entries);


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
int bl_lmdb_checkpoint(bindlog *h, uint64_t *lsn);
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
