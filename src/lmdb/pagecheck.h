/*
 * pagecheck.h -- our own validator of LMDB 0.9's on-disk format, and the
 * guards that keep LMDB away from pages nobody has validated.
 *
 * LMDB trusts its file: a page number past the end of the file is a
 * SIGBUS, a node offset or a key size out of its page is a read of
 * whatever lies there, a zeroed page is an assertion.  It has no page
 * checksums.  bindlog therefore reads the file itself, page by page, and
 * lets LMDB's cursors and lookups touch only what passed these checks.
 *
 * The format (64-bit little-endian hosts; the same constants as mdb.c of
 * the mdb.RE/0.9 branch, Debian's liblmdb 0.9.24):
 *
 *   page header, 16 bytes: u64 pgno, u16 pad, u16 flags, then u16 lower,
 *     u16 upper (tree pages) or u32 pages (the first page of an overflow
 *     run).  Flags: 0x01 branch, 0x02 leaf, 0x04 overflow, 0x08 meta
 *     (0x10 dirty, 0x20 leaf2, 0x40 sub-page, 0x4000 loose and 0x8000 keep
 *     never reach the disk for bindlog's tables).
 *   meta page (pages 0 and 1), after the header: u32 magic 0xBEEFC0DE,
 *     u32 version 1, u64 address, u64 mapsize, the FREE and the MAIN
 *     database records (48 bytes each: u32 pad, u16 flags, u16 depth,
 *     u64 branch pages, u64 leaf pages, u64 overflow pages, u64 entries,
 *     u64 root), u64 last_pg, u64 txnid.  FREE's pad is the page size.
 *     Transaction N writes page N % 2; the current meta is the one with
 *     the larger txnid, and the two txnids are consecutive (or both 0).
 *   tree pages: after the header an array of u16 node offsets (lower marks
 *     its end, so there are (lower - 16) / 2 nodes) sorted by key; the
 *     nodes themselves lie in [upper, page size), packed: LMDB moves them
 *     by the sizes they claim when it deletes, merges or splits, so they
 *     never overlap and leave no gap (each node's size rounded up to even).  A node: u16 lo, u16 hi,
 *     u16 flags, u16 key size, the key, then on a leaf the data (lo | hi <<
 *     16 bytes), or with flag 0x01 (F_BIGDATA) the u64 number of the
 *     overflow run holding it.  On a branch, lo | hi << 16 | flags << 32 is
 *     the child's page number and the first node's key is ignored.
 *     Flag 0x02 (F_SUBDATA) marks the records of named tables in the MAIN
 *     database: their data is a 48-byte database record.  Flag 0x04
 *     (F_DUPDATA) is for sorted duplicates, which bindlog never uses.
 *   FREE holds u64 txnid -> a list of freed page numbers (u64 count, then
 *     the numbers, sorted descending); LMDB reuses them for new pages.
 *
 * Page numbers count from the start of the file; 0 and 1 are the meta
 * pages, so a tree page is in [2, last_pg] and within the file.  Depth is
 * at most 32 (LMDB's cursor stack).
 *
 * Where the checks run (docs/design.md, "Damaged files"):
 *   - open: both meta pages, the file's length, the MAIN database and the
 *     meta table in full, and the header of every table's root page
 *     (bl_pc_open); a damaged entry inside a root is found by the first
 *     call that reads its table, so the intact tables stay readable;
 *   - scans (check, dump, stat's digest, history, lineage, replay, export,
 *     compaction, vacuum): the whole tree, or the key range, the cursor is
 *     about to walk (bl_pc_guard_*);
 *   - point reads on read transactions: our own search down the tree,
 *     every byte bounds-checked, instead of mdb_get (bl_pc_get);
 *   - the write path: the committed root-to-leaf path of every key it
 *     reads or writes, and the FREE database once (bl_pc_guard_write*).
 * A table validated in full in snapshot T stays valid for every later
 * snapshot of this process: later pages are written by LMDB itself.
 */
#ifndef BL_PAGECHECK_H
#define BL_PAGECHECK_H

#include <stddef.h>
#include <stdint.h>

#include "lmdb/store.h"

/* ---- the format ------------------------------------------------------------ */

#define BL_PC_HDR 16          /* page header */
#define BL_PC_NODE 8          /* node header */
#define BL_PC_DBREC 48        /* MDB_db */
#define BL_PC_META 136        /* MDB_meta */
#define BL_PC_MAXDEPTH 32     /* CURSOR_STACK */
#define BL_PC_MAXKEY 511      /* MDB_MAXKEYSIZE */
#define BL_PC_INVALID UINT64_MAX /* P_INVALID: the root of an empty tree */
#define BL_PC_MAGIC 0xBEEFC0DEu

#define BL_PC_P_BRANCH 0x01u
#define BL_PC_P_LEAF 0x02u
#define BL_PC_P_OVERFLOW 0x04u
#define BL_PC_P_META 0x08u

#define BL_PC_F_BIGDATA 0x01u
#define BL_PC_F_SUBDATA 0x02u
#define BL_PC_F_DUPDATA 0x04u

/* Trees, beside bindlog's tables (BL_DB_*, 0..BL_DB_COUNT-1). */
#define BL_PC_FREE BL_DB_COUNT
#define BL_PC_MAIN (BL_DB_COUNT + 1)
#define BL_PC_NTREES (BL_DB_COUNT + 2)
#define BL_PC_ALL_TABLES ((1u << BL_DB_COUNT) - 1u)
#define BL_PC_BIT(t) (1u << (t))

/* The name of a tree: "log", ..., "free list", "main database". */
const char *bl_pc_tree_name(int tree);
/* The tree a name in the MAIN database stands for, or -1. */
int bl_pc_tree_of(const void *name, size_t len);

/* An MDB_db record. */
typedef struct bl_pc_db {
    uint32_t pad;
    uint16_t flags, depth;
    uint64_t branch_pages, leaf_pages, overflow_pages, entries;
    uint64_t root;
} bl_pc_db;

void bl_pc_db_decode(const unsigned char *p, bl_pc_db *db);

/* A meta page. */
typedef struct bl_pc_meta {
    uint32_t magic, version;
    uint64_t mapsize;
    bl_pc_db dbs[2]; /* [0] FREE, [1] MAIN */
    uint64_t last_pg, txnid;
    unsigned psize;
} bl_pc_meta;

/*
 * Decode meta page `slot` (0 or 1) from `page` (avail bytes of it) and
 * check every field on its own.  0; -1 with why filled when what LMDB reads
 * of both meta pages is damaged (header, magic, version, page size, the
 * transaction number); -2 when a field LMDB reads only from the current
 * meta page is (last page, map size, the FREE and MAIN records).
 */
int bl_pc_meta_read(const unsigned char *page, size_t avail, unsigned slot, bl_pc_meta *m,
                    char *why, size_t cap);

/*
 * Check the two meta pages together (ok[i]: what bl_pc_meta_read returned
 * for slot i) and return the current one's slot, or -1 with why filled
 * (unless bl_pc_meta_read filled it): the parts LMDB reads of both must be
 * intact, and their txnids consecutive.  The caller checks ok[current].
 */
int bl_pc_meta_pick(const bl_pc_meta m[2], const int ok[2], char *why, size_t cap);

/* Check a database record of tree `tree` against the file (npages pages
 * readable, last_pg from the meta page).  0, or -1 with why filled. */
int bl_pc_db_check(const bl_pc_db *db, int tree, uint64_t npages, uint64_t last_pg, char *why,
                   size_t cap);

/* Pages [0, npages) of a data file are readable at map + pgno * psize;
 * last_pg bounds the page numbers a free list may name (free pages past
 * the end of the file were never written). */
typedef struct bl_pc_file {
    const unsigned char *map;
    uint64_t npages;
    unsigned psize;
    uint64_t last_pg;
} bl_pc_file;

/* What is wrong and where: the page, its tree, its depth, and the key
 * range its parent gives it (lo inclusive, hi exclusive). */
typedef struct bl_pc_fault {
    uint64_t lsn;            /* the log entry at fault, when one is (else 0) */
    uint64_t pgno;
    int tree;
    unsigned level;          /* 1 = root; 0 = not in a tree (meta pages) */
    int has_lo, has_hi;
    size_t lo_len, hi_len;
    unsigned char lo[BL_PC_MAXKEY], hi[BL_PC_MAXKEY];
    char why[240];
} bl_pc_fault;

/* Copy a message, cut to cap bytes with its terminator. */
void bl_pc_copy(char *dst, size_t cap, const char *src);

/*
 * "page 485 of table log (LSNs 3120..3178): node 4 lies past the end of
 * the page" into out.  Keys are shown as LSNs, escaped strings, or
 * key/LSN pairs as the tree's layout says.
 */
void bl_pc_fault_format(const bl_pc_fault *f, char *out, size_t cap);

/*
 * Check one tree page in isolation: header (its own number, flags,
 * bounds), every node (offsets and sizes within the page, flags allowed
 * in `tree`, child page numbers and overflow runs within the file, the
 * header of every overflow run) and the order of its keys.  want: the
 * page type the caller expects (BL_PC_P_BRANCH or BL_PC_P_LEAF), 0 for
 * either.  0, or -1 with why filled.
 */
int bl_pc_page_check(const bl_pc_file *f, uint64_t pgno, int tree, unsigned want, char *why,
                     size_t cap);

/* A walk over a whole tree, every page checked (bl_pc_page_check) and the
 * tree's shape too: depth, key ranges given by the parents, no page seen
 * twice, and the counts of the database record. */
typedef struct bl_pc_walk {
    const bl_pc_file *f;
    int tree;
    uint64_t *seen;          /* bitmap of npages bits shared across walks, or NULL */
    /* called for every leaf entry that passed (may be NULL); nonzero stops */
    int (*entry)(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v,
                 size_t vn, unsigned nflags);
    /* called for every page that passed (may be NULL) */
    void (*passed)(void *ctx, uint64_t pgno);
    void *ctx;
    int keep_going;          /* skip a damaged subtree and go on counting faults */
    /* out */
    uint64_t faults;
    bl_pc_fault first;
    uint64_t branch_pages, leaf_pages, overflow_pages, entries;
} bl_pc_walk;

/* Only the header of a tree page: its number, type, bounds and node count
 * (what open checks of every table's root).  0, or -1 with why filled. */
int bl_pc_page_head_check(const bl_pc_file *f, uint64_t pgno, int tree, unsigned want,
                          char *why, size_t cap);

/* Check page pgno as a leaf of `tree` (bl_pc_page_check) and call entry
 * for each of its entries (values resolved through their overflow runs):
 * for salvaging pages that no tree reaches.  0, BINDLOG_ECORRUPT when the
 * page is not a valid leaf, or the callback's nonzero value. */
int bl_pc_leaf_each(const bl_pc_file *f, uint64_t pgno, int tree,
                    int (*entry)(void *ctx, const unsigned char *k, size_t kn,
                                 const unsigned char *v, size_t vn, unsigned nflags),
                    void *ctx);

/* Walk the tree of `db`.  0 when everything passed, BINDLOG_ECORRUPT with
 * w->first (and w->faults) filled, or the entry callback's nonzero value. */
int bl_pc_walk_tree(bl_pc_walk *w, const bl_pc_db *db);

/*
 * Search `key` in the tree of `db` as LMDB would, checking every byte it
 * reads on the way.  0 with *val / *vlen set (pointing into f->map; an
 * overflow value checked to lie within the file), BINDLOG_ENOTFOUND, or
 * BINDLOG_ECORRUPT with *fault filled.  last: ignore key and go to the
 * last entry (the path of an append).  visit, when not NULL, is called for
 * each page of the path before it is read (want: the page type the depth
 * needs) and may refuse it: 0 or -1 with why filled.
 */
typedef int (*bl_pc_visit_fn)(void *ctx, uint64_t pgno, unsigned want, char *why, size_t cap);
int bl_pc_search(const bl_pc_file *f, const bl_pc_db *db, int tree, const void *key,
                 size_t klen, int last, bl_pc_visit_fn visit, void *vctx,
                 const unsigned char **val, size_t *vlen, bl_pc_fault *fault);

/* ---- the guards (pagecheck_env.c) ------------------------------------------ */

typedef struct bl_pc bl_pc;

/*
 * Before mdb_env_open: read both meta pages of dir/data.mdb with pread and
 * check what LMDB will use of them at open (a page size, map size or last
 * page out of range makes it read outside its map).  0 when they pass or
 * the file is not LMDB's at all (LMDB refuses that itself), else
 * BINDLOG_ECORRUPT with a last-error detail.
 */
int bl_pc_preopen(const char *dir);

/*
 * Open: validate the snapshot LMDB will start from (meta pages, file
 * length, MAIN and meta in full, every table's root) and set up the guard
 * state of e.  Call after mdb_env_open and before the first table is
 * opened.  writable: the environment is opened for writing, so that its
 * background walk will read the whole file (bl_pc_reads_usual).  0, or
 * BINDLOG_ECORRUPT with a last-error detail naming the file, page, table
 * and fault and saying to run check / recover.
 */
int bl_pc_open(bl_env *e, int writable);
/* Release the guard state (env_free).  NULL-safe. */
void bl_pc_close(bl_env *e);
/* The map changed size (bl_env_resize, map_lock held exclusive). */
void bl_pc_remap(bl_env *e);
/* A writable open (`writable` above) advises the page check's map of the
 * file for random reads (no read-ahead around a fault: docs/design.md,
 * "Damaged files"), for the open and the first commits; the background
 * walk (when its own read of a cold file ends, at most 50 ms in, or at its
 * end), a walk in a writer's thread, or an open that starts no walk put
 * the usual advice back with this.  Takes map_lock shared. */
void bl_pc_reads_usual(bl_env *e);
/* 1 while the page check's map reads single pages (from a writable open
 * until the walk's own read of the file ends): the time in which commits
 * are counted for the walk to hold its reads (commit.c). */
int bl_pc_reading_ahead(const bl_env *e);

/*
 * bl_get_checked (limits.h) for read-only transactions, without LMDB
 * touching a page: our own search in txn's snapshot of table `table`
 * (BL_DB_*), then the table's length limits.  0, BINDLOG_ENOTFOUND,
 * BINDLOG_ECORRUPT with a last-error detail, or another BINDLOG_E* code.
 * The value points into the map: valid while the caller holds map_lock and
 * the transaction.
 */
int bl_pc_get(bl_env *e, MDB_txn *txn, int table, const MDB_val *key, MDB_val *data);

/*
 * bl_pc_get in two steps, for a search from a thread that does not own the
 * transaction: bl_pc_root reads table `table`'s root in txn's snapshot
 * (on txn's thread: 0, BINDLOG_ENOTSUP when the store has no page guard,
 * BINDLOG_ECORRUPT or another code); bl_pc_get_at searches from that
 * root without calling LMDB, and may run on any thread while txn stays
 * open and map_lock is held (shared) on the caller's behalf.  Returns and
 * value as bl_pc_get.
 */
int bl_pc_root(bl_env *e, MDB_txn *txn, int table, bl_pc_db *db);
int bl_pc_get_at(bl_env *e, const bl_pc_db *db, int table, const MDB_val *key, MDB_val *data);

/* Validate in full the tables in `mask` (BL_PC_BIT(BL_DB_*)) of txn's
 * snapshot before a scan.  Call with map_lock held, before any cursor is
 * opened.  0 or BINDLOG_ECORRUPT (last-error detail set). */
int bl_pc_guard_tables(bl_env *e, MDB_txn *txn, unsigned mask);

/* Validate what an iterator of `kind` (BL_IT_*) over [seek, to] will read
 * (backend.h); arguments as bl_lmdb_iter got them. */
int bl_pc_guard_iter(bl_env *e, MDB_txn *txn, int kind, const void *seek, size_t seek_len,
                     uint64_t to);

/* The trees in `mask` (BL_PC_BIT of BL_DB_* and BL_PC_FREE), in a read
 * transaction of its own: before compaction, vacuum and import, whose
 * write transactions walk whole tables.  Call without map_lock. */
int bl_pc_guard_all(bl_env *e, unsigned mask);
#define BL_PC_EVERYTHING (BL_PC_ALL_TABLES | BL_PC_BIT(BL_PC_FREE))

/*
 * bl_pc_guard_all(e, BL_PC_EVERYTHING) for a background thread (ckpt.c,
 * from open): the whole-store walk of the newest snapshot, through a
 * mapping of its own and without map_lock, so that readers, writers and
 * map growth never wait for it.  stop(ctx, done, total) is asked every
 * thousand or so entries, with the entries walked so far and the tables'
 * entries in all (0 while unknown; the free list comes on top of them);
 * when it returns nonzero the walk ends.  0 (the store passed: a
 * later write goes ahead without walking), BINDLOG_ECORRUPT with the
 * last-error detail a write would get, BL_PC_STOPPED (stopped, or the
 * snapshot kept moving: not done), or another BINDLOG_E* code.  Call
 * without map_lock.
 */
int bl_pc_guard_store_bg(bl_env *e, int (*stop)(void *ctx, uint64_t done, uint64_t total),
                         void *ctx);
#define BL_PC_STOPPED 2
/* What an import reads in full: the state it digests, and the free list. */
#define BL_PC_IMPORT_TABLES                                                    \
    (BL_PC_BIT(BL_DB_BINDINGS) | BL_PC_BIT(BL_DB_SESSIONS) | BL_PC_BIT(BL_PC_FREE))
/* What replay reads: the base image and the log. */
#define BL_PC_REPLAY_TABLES                                                    \
    (BL_PC_BIT(BL_DB_META) | BL_PC_BIT(BL_DB_LOG) | BL_PC_BIT(BL_DB_BASE_BINDINGS) | \
     BL_PC_BIT(BL_DB_BASE_SESSIONS))

/*
 * check: validate every tree of txn's snapshot, both meta pages included;
 * damage is a finding, not an error: the report gets a problem per damaged
 * page (the first one described) and 1 is returned.  0 when nothing is
 * damaged, <0 on an error.
 */
int bl_pc_check_store(bl_env *e, MDB_txn *txn, bindlog_check_report *out);

/*
 * The write path: before mdb_get / mdb_put run in write transaction txn,
 * make sure its base snapshot passed the whole-store check (every tree,
 * and the free list against them: LMDB reuses the pages the free list
 * names), now or earlier in this process.  The environment is found
 * through txn; key and the plan say which pages the call needs, for the
 * day a cheaper check than the whole store suffices.  0 or
 * BINDLOG_ECORRUPT (last-error detail set): a damaged store refuses every
 * write.
 */
int bl_pc_guard_write(MDB_txn *txn, MDB_dbi dbi, const void *key, size_t len);
int bl_pc_guard_plan(const bl_tables *t, const bl_plan *p, const bl_encoded *enc);

#endif /* BL_PAGECHECK_H */
