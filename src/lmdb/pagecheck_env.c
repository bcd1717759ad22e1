/*
 * pagecheck_env.c -- the guards: where bindlog validates pages before LMDB
 * touches them (pagecheck.h lists the places and the format).
 *
 * Each environment gets a bl_pc: a read-only mapping of data.mdb of our
 * own (LMDB does not publish its map's address; both mappings share the
 * page cache), the number of whole pages the file holds, and a memory of
 * what was validated:
 *
 *   valid_from[tree]  the tree was walked in full in snapshot T; every
 *                     later snapshot of this process is then safe too,
 *                     because a page reachable in a later snapshot is
 *                     either one that was reachable in T (unchanged:
 *                     copy-on-write never rewrites a page in place while a
 *                     snapshot can see it) or one LMDB wrote since.
 *
 * The threat this answers is a file damaged while no process had it open
 * (a disk, a copy, an editor, a truncation): damage made while a process
 * has the store open, under LMDB's feet, is not caught by this memory.
 *
 * The snapshot a read transaction sees is found without reading the meta
 * pages again: the root of every named table comes from the MAIN database
 * through LMDB itself (mdb_get on MAIN_DBI), which is safe because MAIN is
 * validated in full at open.  The write path needs the FREE database too,
 * whose root only a meta page has: it reads the base snapshot's, which
 * cannot change while it holds the write lock.
 */
#define _GNU_SOURCE
#include "lmdb/pagecheck.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "lmdb/limits.h"
#include "lmdb/walenv.h"

#define MAIN_DBI 1 /* LMDB's handle of the MAIN database */

struct bl_pc {
    int fd;                       /* LMDB's descriptor of data.mdb (not ours) */
    _Atomic int random;           /* map is advised for random reads */
    unsigned psize;
    const unsigned char *map;     /* read-only, map_len bytes */
    size_t map_len;
    _Atomic uint64_t file_pages;  /* whole pages in the file, as last seen */
    _Atomic uint64_t valid_from[BL_PC_NTREES];
    int opened;                   /* open's checks passed */
    char file[]; /* ".../data.mdb", for messages */
};

typedef unsigned long long ull;

/* ---- the file and the map ---------------------------------------------------- */

static uint64_t refresh_pages(bl_pc *pc)
{
    struct stat st;
    uint64_t n = atomic_load_explicit(&pc->file_pages, memory_order_relaxed);
    if (fstat(pc->fd, &st) == 0 && (uint64_t)st.st_size / pc->psize > n) {
        n = (uint64_t)st.st_size / pc->psize;
        atomic_store_explicit(&pc->file_pages, n, memory_order_relaxed);
    }
    return n;
}

static void pc_file(bl_pc *pc, bl_pc_file *f)
{
    uint64_t n = atomic_load_explicit(&pc->file_pages, memory_order_relaxed);
    uint64_t in_map = pc->map_len / pc->psize;
    f->map = pc->map;
    f->npages = n < in_map ? n : in_map;
    f->psize = pc->psize;
    f->last_pg = f->npages ? f->npages - 1 : 0;
}

static int map_file(bl_pc *pc, size_t len)
{
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, pc->fd, 0);
    if (m == MAP_FAILED)
        return bl_mdb_error(errno);
    pc->map = m;
    pc->map_len = len;
    return 0;
}

/*
 * From a writable open, for the open and the first commits, the map of
 * the file is advised for random reads: a fault of a page not cached then
 * reads that page, where it would read as much around it as the device's
 * read-ahead (Linux `read_ahead_kb`: 128 KiB by default, 8 MiB on some
 * virtual disks), and a commit's flush queued behind those reads waits for
 * all of them.  The open and the first commits read a few pages each
 * through this map (open_check, bl_pc_get); the walk reads the file in
 * pieces of its own (read_ahead below) and puts the usual advice back.  LMDB's own map is not
 * advised: until the walk's verdict only the checkpoint reads through it, and the checkpoint waits
 * for the walk. Called with map_lock held (the map cannot move), or before the environment is
 * shared.
 */
static void map_advise(bl_pc *pc, int random)
{
    atomic_store(&pc->random, random);
    if (pc->map != NULL)
        (void)posix_madvise((void *)pc->map, pc->map_len,
                            random ? POSIX_MADV_RANDOM : POSIX_MADV_NORMAL);
}

static void map_advise_normal(bl_pc *pc)
{
    if (atomic_load(&pc->random))
        map_advise(pc, 0);
}

/* ---- reporting ----------------------------------------------------------------- */

static int pc_fail(bl_pc *pc, const bl_pc_fault *ft)
{
    char text[400];
    bl_pc_fault_format(ft, text, sizeof text);
    if (!pc->opened)
        return bl_err_set(BINDLOG_ECORRUPT,
                          "%s: %s; the store is damaged: 'bindlog recover' rebuilds a store "
                          "from what is intact",
                          pc->file, text);
    return bl_err_set(BINDLOG_ECORRUPT,
                      "%s: %s; the store is damaged: 'bindlog check' lists the damage, "
                      "'bindlog recover' rebuilds a store from what is intact",
                      pc->file, text);
}

static int fail_why(bl_pc *pc, const char *why)
{
    bl_pc_fault ft;
    memset(&ft, 0, sizeof ft);
    bl_pc_copy(ft.why, sizeof ft.why, why);
    return pc_fail(pc, &ft);
}

/* ---- stopping a long walk ------------------------------------------------------- */

/* A walk in the background asks, every BL_PC_STOP_EVERY leaf entries
 * (and after every read of its read ahead), whether to stop (its
 * environment is closing), telling how far it is; NULL never stops. */
#define BL_PC_STOP_EVERY 1024

typedef struct stopper {
    int (*fn)(void *ctx, uint64_t done, uint64_t total);
    void *ctx;
    uint64_t n, total;    /* entries walked, of the tables' entries (0 until the
                           * main tree has named the tables; the free list's
                           * entries come on top) */
    uint64_t read, pages; /* the read ahead of the walk: pages passed, of the
                           * file's pages (0: no read ahead) */
} stopper;

/* Ask, telling the progress in one unit, so that close can judge the pace
 * (ckpt.c): with a read ahead, the read and the walk count for the file's
 * pages each. */
static int stop_ask(stopper *s)
{
    uint64_t done = s->n, total = s->total;
    if (s->pages != 0) {
        uint64_t n = s->n < s->total ? s->n : s->total;
        done = s->read + (s->total ? n * s->pages / s->total : 0);
        total = 2 * s->pages;
    }
    return s->fn(s->ctx, done, total) ? BL_PC_STOPPED : 0;
}

static int stop_now(stopper *s)
{
    if (s == NULL || ++s->n % BL_PC_STOP_EVERY != 0)
        return 0;
    return stop_ask(s);
}

static int stop_entry(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v,
                      size_t vn, unsigned nflags)
{
    (void)k;
    (void)kn;
    (void)v;
    (void)vn;
    (void)nflags;
    return stop_now(ctx);
}

/* ---- snapshots ----------------------------------------------------------------- */

static void lower_valid_from(bl_pc *pc, int tree, uint64_t t)
{
    uint64_t cur = atomic_load(&pc->valid_from[tree]);
    while (t < cur && !atomic_compare_exchange_weak(&pc->valid_from[tree], &cur, t))
        ;
}

/*
 * A read transaction's id does not always name its snapshot.  LMDB labels
 * it with the last committed id T, then copies the roots from meta page
 * T & 1; two commits landing between the two steps have overwritten that
 * page with T + 2's roots, and the transaction reads T + 2 (consistently,
 * and its reader slot protects those pages too) under T's id.  What is
 * remembered per id must allow for it: the snapshot txn read is at least
 * `t` and at most the newest commit when this is called, which it returns.
 * When that is t itself, no commit after t has reached its meta page, so
 * t + 2 had not begun when the transaction copied its roots: the
 * snapshot is exactly t.
 */
static uint64_t snapshot_ceiling(bl_env *e, uint64_t t)
{
    MDB_envinfo info;
    if (mdb_env_info(e->env, &info) != 0 || info.me_last_txnid < t)
        return UINT64_MAX;
    return info.me_last_txnid;
}

static int is_valid(bl_pc *pc, int tree, uint64_t t)
{
    return atomic_load_explicit(&pc->valid_from[tree], memory_order_acquire) <= t;
}

/* The database record of table `tree` in txn's snapshot, through LMDB's
 * search of MAIN (validated at open).  A missing table reads as empty. */
static int table_record(bl_pc *pc, MDB_txn *txn, int tree, bl_pc_db *db, uint64_t npages)
{
    const char *name = bl_pc_tree_name(tree);
    MDB_val k = {strlen(name), (void *)name}, v;
    char why[200];
    int rc = mdb_get(txn, MAIN_DBI, &k, &v);

    if (rc == MDB_NOTFOUND) {
        memset(db, 0, sizeof(*db));
        db->root = BL_PC_INVALID;
        return 0;
    }
    if (rc != 0)
        return bl_mdb_error(rc);
    if (v.mv_size != BL_PC_DBREC)
        return fail_why(pc, "a table record in the main database is not 48 bytes");
    bl_pc_db_decode(v.mv_data, db);
    if (bl_pc_db_check(db, tree, npages, UINT64_MAX - 1, why, sizeof why) != 0)
        return fail_why(pc, why);
    return 0;
}

/* Meta page `slot` from our map, if it holds transaction t. */
static int meta_of(bl_pc *pc, const bl_pc_file *f, uint64_t t, bl_pc_meta *m)
{
    char why[200];
    unsigned slot = (unsigned)(t & 1);
    if (f->npages < 2)
        return fail_why(pc, "the file is shorter than its two meta pages");
    if (bl_pc_meta_read(f->map + (size_t)slot * f->psize, f->psize, slot, m, why, sizeof why) !=
        0)
        return fail_why(pc, why);
    return m->txnid == t ? 0 : 1;
}

/* ---- walking whole trees --------------------------------------------------------- */

static int walk_one(const bl_pc_file *f, int tree, const bl_pc_db *db,
                    uint64_t *seen, bl_pc_fault *ft)
{
    bl_pc_walk w;
    w = (bl_pc_walk){.f = f, .tree = tree, .seen = seen};
    int rc = bl_pc_walk_tree(&w, db);
    if (rc == BINDLOG_ECORRUPT && ft != NULL)
        *ft = w.first;
    return rc;
}

int bl_pc_guard_tables(bl_env *e, MDB_txn *txn, unsigned mask)
{
    bl_pc *pc = e->pc;
    bl_pc_file f;
    bl_pc_fault ft;
    uint64_t *seen = NULL, t;
    int rc = 0;

    if (pc == NULL)
        return 0;
    t = mdb_txn_id(txn);
    for (int tree = 0; tree < BL_DB_COUNT; tree++) {
        bl_pc_db db;
        if (!(mask & BL_PC_BIT(tree)) || is_valid(pc, tree, t))
            continue;
        refresh_pages(pc);
        pc_file(pc, &f);
        if (seen == NULL && (seen = calloc(f.npages / 64 + 1, sizeof(uint64_t))) == NULL)
            return BINDLOG_ENOMEM;
        if ((rc = table_record(pc, txn, tree, &db, f.npages)) != 0)
            break;
        rc = walk_one(&f, tree, &db, seen, &ft);
        if (rc == BINDLOG_ECORRUPT)
            rc = pc_fail(pc, &ft);
        if (rc != 0)
            break;
        /* the tree walked is of a snapshot between t and the ceiling:
         * valid from the ceiling on (later trees are our writers') */
        uint64_t top = snapshot_ceiling(e, t);
        if (top != UINT64_MAX)
            lower_valid_from(pc, tree, top);
    }
    free(seen);
    return rc;
}

/* ---- key ranges (iterators) ----------------------------------------------------- */

typedef struct range {
    bl_pc *pc;
    const bl_pc_file *f;
    int tree;
    const unsigned char *lo, *hi; /* [lo, hi); hi NULL: to the end */
    size_t lo_len, hi_len;
    bl_pc_fault ft;
} range;

static int keycmp(const unsigned char *a, size_t an, const unsigned char *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    return c != 0 ? c : an < bn ? -1 : an > bn;
}

/* Validate page pgno and, below it, every page a cursor may visit between
 * lo and the first key at or after hi: the children whose range meets
 * [lo, hi), plus the leftmost path of the next child (a cursor steps onto
 * it to find the end of the range).  leftmost: only that path. */
typedef struct rbound {
    const unsigned char *k;
    size_t n;
} rbound;

static int range_page(range *r, uint64_t pgno, unsigned level, unsigned depth, int leftmost,
                      rbound lo, rbound hi)
{
    const bl_pc_file *f = r->f;
    char why[200];
    unsigned want = level == depth ? BL_PC_P_LEAF : BL_PC_P_BRANCH;

    if (level > depth || bl_pc_page_check(f, pgno, r->tree, want, why, sizeof why) != 0) {
        if (level > depth)
            snprintf(why, sizeof why, "the tree is deeper than its record says");
        r->ft.pgno = pgno;
        r->ft.tree = r->tree;
        r->ft.level = level;
        r->ft.has_lo = lo.k != NULL && lo.n <= sizeof r->ft.lo;
        r->ft.has_hi = hi.k != NULL && hi.n <= sizeof r->ft.hi;
        r->ft.lo_len = r->ft.has_lo ? lo.n : 0;
        r->ft.hi_len = r->ft.has_hi ? hi.n : 0;
        if (r->ft.lo_len)
            memcpy(r->ft.lo, lo.k, r->ft.lo_len);
        if (r->ft.hi_len)
            memcpy(r->ft.hi, hi.k, r->ft.hi_len);
        bl_pc_copy(r->ft.why, sizeof r->ft.why, why);
        return BINDLOG_ECORRUPT;
    }
    if (want == BL_PC_P_LEAF)
        return 0;

    const unsigned char *p = f->map + pgno * f->psize;
    unsigned n = (bl_get16(p + 12) - BL_PC_HDR) / 2, first = 0, last = 0;
#define KEY(i) (p + bl_get16(p + BL_PC_HDR + 2 * (i)) + BL_PC_NODE)
#define KLEN(i) ((size_t)bl_get16(p + bl_get16(p + BL_PC_HDR + 2 * (i)) + 6))
#define CHILD(i)                                                                         \
    (bl_get16(p + bl_get16(p + BL_PC_HDR + 2 * (i))) |                                   \
     ((uint64_t)bl_get16(p + bl_get16(p + BL_PC_HDR + 2 * (i)) + 2) << 16) |             \
     ((uint64_t)bl_get16(p + bl_get16(p + BL_PC_HDR + 2 * (i)) + 4) << 32))
    if (!leftmost) {
        /* the child holding lo: the last one whose separator is <= lo */
        for (unsigned i = 1; i < n && keycmp(KEY(i), KLEN(i), r->lo, r->lo_len) <= 0; i++)
            first = i;
        /* the last child holding keys < hi */
        last = n - 1;
        if (r->hi != NULL)
            while (last > first && keycmp(KEY(last), KLEN(last), r->hi, r->hi_len) >= 0)
                last--;
    }
    for (unsigned i = first; i <= last; i++) {
        rbound clo = i > 0 ? (rbound){KEY(i), KLEN(i)} : lo;
        rbound chi = i + 1 < n ? (rbound){KEY(i + 1), KLEN(i + 1)} : hi;
        int rc = range_page(r, CHILD(i), level + 1, depth, leftmost, clo, chi);
        if (rc != 0)
            return rc;
    }
    if (!leftmost && last + 1 < n)
        return range_page(r, CHILD(last + 1), level + 1, depth, 1,
                          (rbound){KEY(last + 1), KLEN(last + 1)},
                          last + 2 < n ? (rbound){KEY(last + 2), KLEN(last + 2)} : hi);
    return 0;
#undef KEY
#undef KLEN
#undef CHILD
}

int bl_pc_guard_iter(bl_env *e, MDB_txn *txn, int kind, const void *seek, size_t seek_len,
                     uint64_t to)
{
    bl_pc *pc = e->pc;
    bl_pc_file f;
    bl_pc_db db;
    unsigned char hi[BINDLOG_KEY_MAX + 2];
    range r;
    int tree, rc;

    if (pc == NULL)
        return 0;
    switch (kind) {
    case BL_IT_LOG:
        tree = BL_DB_LOG;
        break;
    case BL_IT_CHILDREN:
        tree = BL_DB_CHILDREN;
        break;
    case BL_IT_BINDINGS:
        return bl_pc_guard_tables(e, txn, BL_PC_BIT(BL_DB_BINDINGS));
    case BL_IT_SESSIONS:
        return bl_pc_guard_tables(e, txn, BL_PC_BIT(BL_DB_SESSIONS));
    default:
        return 0; /* history, ancestors: point reads through bl_pc_get */
    }
    if (is_valid(pc, tree, mdb_txn_id(txn)))
        return 0;
    refresh_pages(pc);
    pc_file(pc, &f);
    if ((rc = table_record(pc, txn, tree, &db, f.npages)) != 0)
        return rc;
    if (db.root == BL_PC_INVALID)
        return 0;
    memset(&r, 0, sizeof r);
    r.pc = pc;
    r.f = &f;
    r.tree = tree;
    r.lo = seek;
    r.lo_len = seek_len;
    if (kind == BL_IT_LOG) {
        if (to != UINT64_MAX) {
            bl_put64be(hi, to + 1);
            r.hi = hi;
            r.hi_len = 8;
        }
    } else if (kind == BL_IT_CHILDREN && seek_len == 8) {
        /* every child of the parent created at LSN n is below be64(n + 1) */
        bl_put64be(hi, bl_get64be(seek) + 1);
        r.hi = hi;
        r.hi_len = 8;
    } else if (seek_len > 0 && seek_len <= sizeof hi) {
        /* every key under the prefix "name 0x00" is below "name 0x01" */
        memcpy(hi, seek, seek_len);
        hi[seek_len - 1] = 1;
        r.hi = hi;
        r.hi_len = seek_len;
    }
    rc = range_page(&r, db.root, 1, db.depth, 0, (rbound){NULL, 0}, (rbound){NULL, 0});
    return rc == BINDLOG_ECORRUPT ? pc_fail(pc, &r.ft) : rc;
}

/* ---- point reads ------------------------------------------------------------------ */

/* The roots a thread last used: one snapshot of one environment, only
 * ever filled and used by a transaction that is exactly its id's snapshot
 * (snapshot_ceiling). */
static _Thread_local struct {
    uint64_t env_id, txnid;
    unsigned have;
    bl_pc_db db[BL_DB_COUNT];
} tls_roots;

int bl_pc_get(bl_env *e, MDB_txn *txn, int table, const MDB_val *key, MDB_val *data)
{
    bl_pc *pc = e->pc;
    int rc;

    if (pc == NULL)
        return bl_get_checked(txn, e->dbi[table], table, key, data);
    uint64_t t = mdb_txn_id(txn);
    bl_pc_db own, *db = &own;
    if (snapshot_ceiling(e, t) == t) {
        if (tls_roots.env_id != e->id || tls_roots.txnid != t) {
            tls_roots.env_id = e->id;
            tls_roots.txnid = t;
            tls_roots.have = 0;
        }
        db = &tls_roots.db[table];
        if (!(tls_roots.have & BL_PC_BIT(table))) {
            if ((rc = table_record(pc, txn, table, db, UINT64_MAX)) != 0)
                return rc;
            tls_roots.have |= BL_PC_BIT(table);
        }
    } else if ((rc = table_record(pc, txn, table, db, UINT64_MAX)) != 0) {
        return rc; /* commits landed since txn began: its own roots, uncached */
    }
    return bl_pc_get_at(e, db, table, key, data);
}

int bl_pc_root(bl_env *e, MDB_txn *txn, int table, bl_pc_db *db)
{
    if (e->pc == NULL)
        return BINDLOG_ENOTSUP;
    return table_record(e->pc, txn, table, db, UINT64_MAX);
}

int bl_pc_get_at(bl_env *e, const bl_pc_db *db, int table, const MDB_val *key, MDB_val *data)
{
    bl_pc *pc = e->pc;
    bl_pc_file f;
    bl_pc_fault ft;
    const unsigned char *v;
    size_t vn;
    int rc;

    pc_file(pc, &f);
    for (int retry = 0;; retry++) {
        rc = bl_pc_search(&f, db, table, key->mv_data, key->mv_size, 0, NULL, NULL, &v, &vn, &ft);
        if (rc != BINDLOG_ECORRUPT || retry > 0 || refresh_pages(pc) == f.npages)
            break;
        pc_file(pc, &f); /* the file grew since we last looked */
    }
    if (rc == 0) {
        data->mv_data = (void *)v;
        data->mv_size = vn;
        return bl_entry_check(table, key, data); /* the encodings' own limits */
    }
    return rc == BINDLOG_ENOTFOUND ? rc : pc_fail(pc, &ft);
}

/* ---- the write path ------------------------------------------------------------ */

/* Pages of the snapshot's trees, and the free list against them. */
typedef struct live_scan {
    bl_pc_db db[BL_DB_COUNT];
    unsigned have;
    uint64_t *live;
    stopper *stop;
} live_scan;

static int live_table(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v,
                      size_t vn, unsigned nflags)
{
    live_scan *ls = ctx;
    int tree = bl_pc_tree_of(k, kn);
    if (tree >= 0 && (nflags & BL_PC_F_SUBDATA) && vn == BL_PC_DBREC) {
        bl_pc_db_decode(v, &ls->db[tree]);
        ls->have |= BL_PC_BIT(tree);
    }
    return stop_now(ls->stop);
}

/* Pages the snapshot's free list names that are also in `seen` (the pages
 * of its trees); mark: add them to `seen` (check: a page listed twice). */
typedef struct free_scan {
    uint64_t *seen;
    uint64_t npages, shared, first_shared;
    int mark;
    stopper *stop;
} free_scan;

static int free_entry(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v,
                      size_t vn, unsigned nflags)
{
    free_scan *fs = ctx;
    (void)k;
    (void)kn;
    (void)nflags;
    uint64_t count = bl_get64(v); /* bl_pc_page_check checked the list */
    for (uint64_t i = 1; i <= count && 8 * i + 8 <= vn; i++) {
        uint64_t pg = bl_get64(v + 8 * i);
        if (pg >= fs->npages)
            continue; /* freed before it was ever written */
        uint64_t m = (uint64_t)1 << (pg & 63);
        if ((fs->seen[pg >> 6] & m) && fs->shared++ == 0)
            fs->first_shared = pg;
        if (fs->mark)
            fs->seen[pg >> 6] |= m;
    }
    return stop_now(fs->stop);
}

/*
 * Everything a write transaction may read or reuse, in snapshot t (meta
 * page m): every tree in full, then the free list, checked against the
 * pages the trees use.
 *
 * Why all of it: LMDB's writes walk the paths of the keys they touch, but
 * they also hand out the pages the free list names for their copies, and
 * one that a table still uses is then overwritten (LMDB asserts when it
 * notices: mdb_page_touch, "mp->mp_pgno != pgno"; it corrupts when it does
 * not).  And a write into a damaged tree can itself free a page the damage
 * still references (a page reachable twice), which the next write reuses.
 * So a store with any damaged page refuses every write, with the damage in
 * the message; its intact parts stay readable.
 *
 * Once per process: in the background from open (bl_pc_guard_store_bg),
 * or at the first write, and before compaction, vacuum and import.  It
 * costs one read of the whole file; the walks validate every table for
 * later snapshots, so scans after it cost nothing more.  stop: NULL, or
 * asked every BL_PC_STOP_EVERY entries (BL_PC_STOPPED when it says so).
 */
static int guard_store(bl_pc *pc, bl_pc_file *f, const bl_pc_meta *m, uint64_t t, stopper *stop)
{
    live_scan ls;
    free_scan fs;
    bl_pc_walk w;
    char why[200];
    int rc;

    if (stop == NULL)
        map_advise_normal(pc); /* a walk in this thread reads through pc->map */
    f->last_pg = m->last_pg;
    if (bl_pc_db_check(&m->dbs[0], BL_PC_FREE, f->npages, m->last_pg, why, sizeof why) != 0)
        return fail_why(pc, why);
    memset(&ls, 0, sizeof ls);
    if ((ls.live = calloc(f->npages / 64 + 1, sizeof(uint64_t))) == NULL)
        return BINDLOG_ENOMEM;
    ls.stop = stop;
    fs = (free_scan){.seen = ls.live, .npages = f->npages, .stop = stop};
    w = (bl_pc_walk){.f = f, .tree = BL_PC_MAIN, .seen = ls.live, .entry = live_table, .ctx = &ls};
    rc = bl_pc_walk_tree(&w, &m->dbs[1]);
    for (int tree = 0; stop != NULL && tree < BL_DB_COUNT; tree++)
        if (ls.have & BL_PC_BIT(tree))
            stop->total += ls.db[tree].entries;
    for (int tree = 0; rc == 0 && tree < BL_DB_COUNT; tree++) {
        if (!(ls.have & BL_PC_BIT(tree)))
            continue;
        if (bl_pc_db_check(&ls.db[tree], tree, f->npages, m->last_pg, why, sizeof why) != 0) {
            free(ls.live);
            return fail_why(pc, why);
        }
        w = (bl_pc_walk){.f = f, .tree = tree, .seen = ls.live};
        if (stop != NULL) {
            w.entry = stop_entry;
            w.ctx = stop;
        }
        if ((rc = bl_pc_walk_tree(&w, &ls.db[tree])) == 0)
            lower_valid_from(pc, tree, t);
    }
    if (rc == 0) {
        w = (bl_pc_walk){.f = f, .tree = BL_PC_FREE, .seen = ls.live, .entry = free_entry,
                         .ctx = &fs};
        rc = bl_pc_walk_tree(&w, &m->dbs[0]);
    }
    free(ls.live);
    if (rc == BINDLOG_ECORRUPT)
        return pc_fail(pc, &w.first);
    if (rc != 0)
        return rc;
    if (fs.shared) {
        snprintf(why, sizeof why,
                 "the free list names %llu pages that tables use (the first: page %llu): a "
                 "write would overwrite them",
                 (ull)fs.shared, (ull)fs.first_shared);
        return fail_why(pc, why);
    }
    lower_valid_from(pc, BL_PC_FREE, t);
    return 0;
}

/* The write transaction txn may go ahead: its base snapshot (whose meta
 * page is stable under the write lock) passed guard_store, now or before. */
static int guard_write_txn(MDB_txn *txn)
{
    bl_env *e = mdb_env_get_userctx(mdb_txn_env(txn));
    bl_pc_file f;
    bl_pc_meta m;
    int rc;

    if (e == NULL || e->pc == NULL)
        return 0;
    uint64_t base = mdb_txn_id(txn) - 1;
    if (is_valid(e->pc, BL_PC_FREE, base))
        return 0;
    refresh_pages(e->pc);
    pc_file(e->pc, &f);
    if ((rc = meta_of(e->pc, &f, base, &m)) != 0)
        return rc < 0 ? rc : 0; /* not our base (cannot happen under the write lock) */
    return guard_store(e->pc, &f, &m, base, NULL);
}

int bl_pc_guard_write(MDB_txn *txn, MDB_dbi dbi, const void *key, size_t len)
{
    (void)dbi;
    (void)key;
    (void)len;
    return guard_write_txn(txn);
}

int bl_pc_guard_plan(const bl_tables *t, const bl_plan *p, const bl_encoded *enc)
{
    (void)p;
    (void)enc;
    return guard_write_txn(t->txn);
}

/* ---- compaction, vacuum: everything ------------------------------------------------ */

int bl_pc_guard_all(bl_env *e, unsigned mask)
{
    MDB_txn *txn;
    bl_pc_file f;
    bl_pc_meta m;
    int rc;

    if (e->pc == NULL)
        return 0;
    /* a writable open's walk may be under way: what it validates is
     * remembered, so wait for it rather than walk beside it */
    if (mask & BL_PC_BIT(BL_PC_FREE))
        bl_ckpt_walk_settle(e);
    for (int tries = 0;; tries++) {
        if ((rc = bl_read_begin_fresh(e, &txn)) != 0)
            return rc;
        uint64_t t = mdb_txn_id(txn);
        rc = 0;
        /* the store walk covers every table on its way to the free list:
         * it goes first, so that no table is walked twice */
        if ((mask & BL_PC_BIT(BL_PC_FREE)) && !is_valid(e->pc, BL_PC_FREE, t)) {
            refresh_pages(e->pc);
            pc_file(e->pc, &f);
            if ((rc = meta_of(e->pc, &f, t, &m)) == 0)
                rc = guard_store(e->pc, &f, &m, t, NULL);
        }
        if (rc == 0)
            rc = bl_pc_guard_tables(e, txn, mask & BL_PC_ALL_TABLES);
        bl_read_end(e, txn);
        if (rc <= 0 || tries >= 8)
            return rc < 0 ? rc : 0;
        /* two commits landed since the snapshot began: its meta page is
         * gone; a newer snapshot will do */
    }
}

/* ---- reading the file ahead of the background walk ------------------------------ */

/*
 * The background walk reads the whole file.  Through a mapping, each
 * fault of a page not cached would read up to the device's read-ahead in
 * one request (8 MiB on the virtual disk of docs/performance.md), and a
 * commit's flush queued behind such reads waits for them: 2-4 ms at the
 * median and up to 19 ms there, against 0.2 ms behind reads of 64 KiB.
 * So for the first RA_FIRST_NS (the open and a restarted gateway's first
 * commits) the walk reads the file itself, in order, 64 KiB at a time,
 * skipping what is cached, and the page check's map, which the commits
 * read through until the verdict, reads single pages (map_advise).  After
 * that what matters is to have the file in the cache soon: under a load of
 * writers every commit faults on cold pages, and the checkpoint waits for
 * the verdict while the log fills.  So the map gets the usual advice back
 * and the walk goes on through its own map, whose faults read around as
 * the system does, overlapping the disk with the walk's work (a read ahead
 * of the whole file first, even in reads of 1 MiB, left 64 writers on a
 * cold store 15-30% fewer events in their first 2 s).  All of it is
 * advisory: a file that cannot be read this way is walked as it is.
 */
#define RA_PIECE    ((size_t)64 * 1024)
#define RA_SPAN     ((size_t)1024 * 1024) /* cached stretches: one look each */
#define RA_SAMPLES  64
#define RA_FIRST_NS ((int64_t)50 * 1000000)

int bl_pc_reading_ahead(const bl_env *e)
{
    return e->pc != NULL && atomic_load_explicit(&e->pc->random, memory_order_relaxed);
}

void bl_pc_reads_usual(bl_env *e)
{
    if (e->pc == NULL || !atomic_load(&e->pc->random))
        return;
    bl_map_rdlock(e);
    map_advise_normal(e->pc);
    bl_map_unlock(e);
}

/* While a commit of this process runs, its reads (the page check's
 * faults) and its flush would queue behind the walk's: on a virtual disk
 * that serves one request at a time, a flush behind a 64 KiB read took
 * 2-3 ms.  So the next read waits for the commits in progress to end, at
 * most RA_HOLD_NS at a time and never past the read-ahead's time. */
#define RA_HOLD_NS ((int64_t)2 * 1000000)

static void hold_for_commits(bl_env *e, int64_t t0)
{
    int64_t start = bl_mono_ns();
    while (atomic_load_explicit(&e->wal->committing, memory_order_relaxed) > 0) {
        int64_t now = bl_mono_ns();
        if (now - start >= RA_HOLD_NS || now - t0 >= RA_FIRST_NS)
            return;
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

static int read_ahead(bl_env *e, const unsigned char *map, size_t len, stopper *st)
{
    bl_pc *pc = e->pc;
    struct stat mine, lmdbs;
    unsigned char *buf;
    int rc = 0, fd;

    /* a file that looks cached (RA_SAMPLES pages spread over it) is walked
     * as it is, and so is one whose pages cannot be told (the portable
     * layer): looking at every page would cost ~50 ns a page */
    size_t np = len / pc->psize, cached = 0;
    for (size_t i = 0; np != 0 && i < RA_SAMPLES; i++)
        cached += bl_plat_resident(map + np * i / RA_SAMPLES * pc->psize, pc->psize) != 0;
    if (np == 0 || cached == RA_SAMPLES)
        return 0;
    /* the file LMDB has open, not whatever the path names by now */
    if ((fd = open(pc->file, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0)
        return 0;
    if (fstat(fd, &mine) != 0 || fstat(pc->fd, &lmdbs) != 0 || mine.st_dev != lmdbs.st_dev ||
        mine.st_ino != lmdbs.st_ino || (buf = malloc(RA_PIECE)) == NULL) {
        close(fd);
        return 0;
    }
    bl_plat_read_exact(fd);
    size_t reads = 0, off = 0;
    int64_t t0 = bl_mono_ns();
    while (off < len && rc == 0) {
        size_t n = len - off < RA_SPAN ? len - off : RA_SPAN;
        if (bl_plat_resident(map + off, n) == 0) {
            n = n < RA_PIECE ? n : RA_PIECE;
            hold_for_commits(e, t0);
            if (pread(fd, buf, n, (off_t)off) <= 0)
                break; /* the walk meets what this could not read */
            /* progress is told from the first read on: a file found in
             * the cache is told by the walk's own pace alone */
            if (reads++ == 0)
                st->pages = np;
            if (bl_mono_ns() - t0 >= RA_FIRST_NS)
                break; /* the walk reads the rest through its map */
        }
        off += n;
        st->read = reads ? off / pc->psize : 0;
        rc = stop_ask(st);
    }
    /* read to its end, the read counts for half the walk's progress; cut
     * short, the walk's own pace tells the rest */
    st->pages = off < len ? 0 : st->pages;
    st->read = st->pages;
    bl_pc_reads_usual(e);
    free(buf);
    close(fd);
    return rc;
}

int bl_pc_guard_store_bg(bl_env *e, int (*stop)(void *ctx, uint64_t done, uint64_t total),
                         void *ctx)
{
    bl_pc *pc = e->pc;
    stopper st = {stop, ctx, 0, 0, 0, 0};
    MDB_txn *txn;
    bl_pc_meta m = {0};
    int rc;

    if (pc == NULL)
        return 0;
    for (int tries = 0;; tries++) {
        if ((rc = bl_read_begin_fresh(e, &txn)) != 0)
            return rc;
        uint64_t t = mdb_txn_id(txn);
        if (is_valid(pc, BL_PC_FREE, t)) {
            map_advise_normal(pc);
            bl_read_end(e, txn);
            return 0;
        }
        /* a mapping of the file as the snapshot needs it, the walk's own:
         * growth replaces pc->map, never this one, so the walk needs no
         * map lock, and readers and growth never wait for it.  The read
         * transaction keeps the snapshot's pages from being reused; the
         * file never shrinks under an open environment. */
        uint64_t np = refresh_pages(pc);
        size_t len = (size_t)(np > 2 ? np : 2) * pc->psize;
        void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, pc->fd, 0);
        bl_map_unlock(e);
        if (map == MAP_FAILED) {
            rc = bl_err_set(bl_mdb_error(errno), "%s: cannot map the file to check it: %s",
                            pc->file, strerror(errno));
        } else {
            bl_pc_file f = {map, np, pc->psize, np ? np - 1 : 0};
            st.n = st.total = 0; /* each snapshot's walk from its start */
            if (tries == 0)
                rc = read_ahead(e, map, len, &st);
            if (rc == 0 && (rc = meta_of(pc, &f, t, &m)) == 0)
                rc = guard_store(pc, &f, &m, t, &st);
            munmap(map, len);
        }
        bl_map_rdlock(e);
        map_advise_normal(pc); /* read, or stopped: the usual advice from now */
        bl_read_end(e, txn);
        if (rc != 1)
            return rc;
        if (tries >= 8)
            return BL_PC_STOPPED; /* the store changes too fast: not done */
    }
}

/* ---- open ------------------------------------------------------------------------- */

int bl_pc_preopen(const char *dir)
{
    char path[4200], why[2][240], msg[300];
    unsigned char page[2][BL_PC_HDR + BL_PC_META];
    bl_pc_meta m[2];
    int ok[2], fd, cur;

    if (snprintf(path, sizeof path, "%s/data.mdb", dir) >= (int)sizeof path)
        return 0;
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 0; /* LMDB reports it */
    /* Page 0 where LMDB reads it, page 1 at the page size page 0 gives.  A
     * writer of another process may commit between the two reads (the
     * pair then looks like transactions that are not consecutive): what
     * fails is read again until two reads in a row give the same bytes. */
    unsigned char prev[2][BL_PC_HDR + BL_PC_META];
    ssize_t n0, n1;
    for (int attempt = 0;; attempt++) {
        memset(page, 0, sizeof page);
        n0 = pread(fd, page[0], sizeof page[0], 0);
        ok[0] = n0 == (ssize_t)sizeof page[0]
                    ? bl_pc_meta_read(page[0], sizeof page[0], 0, &m[0], why[0], sizeof why[0])
                    : -1;
        n1 = ok[0] != -1 ? pread(fd, page[1], sizeof page[1], (off_t)m[0].psize) : 0;
        ok[1] = n1 == (ssize_t)sizeof page[1]
                    ? bl_pc_meta_read(page[1], sizeof page[1], 1, &m[1], why[1], sizeof why[1])
                    : -1;
        cur = bl_pc_meta_pick(m, ok, msg, sizeof msg);
        if ((cur >= 0 && ok[cur] == 0) || attempt >= 50 ||
            (attempt > 0 && memcmp(prev, page, sizeof page) == 0))
            break;
        memcpy(prev, page, sizeof page);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    close(fd);
    /* not LMDB at all (or too short to be): LMDB refuses it as such */
    if (n0 != (ssize_t)sizeof page[0] || (bl_get32(page[0] + BL_PC_HDR) != BL_PC_MAGIC &&
                                          (n1 != (ssize_t)sizeof page[1] ||
                                           bl_get32(page[1] + BL_PC_HDR) != BL_PC_MAGIC)))
        return 0;
    if (ok[1] == -1 && n1 != (ssize_t)sizeof page[1])
        snprintf(why[1], sizeof why[1], "meta page 1 is cut short by the end of the file");
    if (cur < 0 || ok[cur] != 0) {
        const char *w = cur >= 0 ? why[cur] : ok[0] == -1 ? why[0] : ok[1] == -1 ? why[1] : msg;
        return bl_err_set(BINDLOG_ECORRUPT,
                          "%s: %s; the store is damaged: 'bindlog recover' rebuilds a store "
                          "from what is intact",
                          path, w);
    }
    return 0;
}

/* Collects the table records of the MAIN database during its walk. */
typedef struct main_scan {
    bl_pc_db db[BL_DB_COUNT];
    unsigned have;
} main_scan;

static int main_entry(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v,
                      size_t vn, unsigned nflags)
{
    main_scan *ms = ctx;
    int tree = bl_pc_tree_of(k, kn);
    if (tree >= 0 && (nflags & BL_PC_F_SUBDATA) && vn == BL_PC_DBREC) {
        bl_pc_db_decode(v, &ms->db[tree]);
        ms->have |= BL_PC_BIT(tree);
    }
    return 0;
}

/* Is every page in [from, last] listed in the FREE database? (A file may be
 * shorter than its last page when the final pages were freed unwritten.) */
typedef struct tail_free {
    uint64_t from, last, found;
} tail_free;

static int tail_entry(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v,
                      size_t vn, unsigned nflags)
{
    tail_free *tf = ctx;
    (void)k;
    (void)kn;
    (void)nflags;
    uint64_t count = bl_get64(v); /* bl_pc_page_check checked the list */
    for (uint64_t i = 1; i <= count && 8 * i + 8 <= vn; i++) {
        uint64_t pg = bl_get64(v + 8 * i);
        if (pg >= tf->from && pg <= tf->last)
            tf->found++;
    }
    return 0;
}

/* Check the snapshot of txn (transaction t) before LMDB reads it. */
static int open_check(bl_pc *pc, uint64_t t)
{
    bl_pc_file f;
    bl_pc_meta m[2];
    bl_pc_fault ft;
    char why[2][200], msg[400];
    int ok[2], cur, rc;

    pc_file(pc, &f);
    /* a writer of another process may commit while the two pages are
     * read: a pair that fails is read again, and only a pair that fails
     * the same way twice is damage */
    uint64_t seen[2] = {0, 0};
    for (int look = 0;; look++) {
        for (unsigned s = 0; s < 2; s++)
            ok[s] = bl_pc_meta_read(pc->map + (size_t)s * pc->psize, f.npages > s ? f.psize : 0,
                                    s, &m[s], why[s], sizeof why[s]);
        if (bl_pc_meta_pick(m, ok, why[0], sizeof why[0]) >= 0)
            break;
        if (look >= 8 || (look > 0 && m[0].txnid == seen[0] && m[1].txnid == seen[1]))
            return fail_why(pc, ok[0] != -1 && ok[1] == -1 ? why[1] : why[0]);
        seen[0] = m[0].txnid;
        seen[1] = m[1].txnid;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    /* the meta page our transaction started from: LMDB read its roots */
    cur = (int)(t & 1);
    if (m[cur].txnid != t)
        return 1; /* rewritten by two newer commits since: try again */
    if (ok[cur] != 0)
        return fail_why(pc, why[cur]);
    f.last_pg = m[cur].last_pg;

    /* the file's length against the last page the meta names */
    if (f.npages < m[cur].last_pg + 1) {
        tail_free tf = {f.npages, m[cur].last_pg, 0};
        bl_pc_walk w;
        w = (bl_pc_walk){.f = &f, .tree = BL_PC_FREE, .entry = tail_entry, .ctx = &tf};
        rc = bl_pc_db_check(&m[cur].dbs[0], BL_PC_FREE, f.npages, m[cur].last_pg, why[0],
                            sizeof why[0]) == 0
                 ? bl_pc_walk_tree(&w, &m[cur].dbs[0])
                 : BINDLOG_ECORRUPT;
        if (rc != 0 || tf.found != m[cur].last_pg + 1 - f.npages) {
            snprintf(msg, sizeof msg,
                     "the file holds %llu pages of %u bytes but its current meta page (page "
                     "%d) names %llu: the file is truncated",
                     (ull)f.npages, f.psize, cur, (ull)m[cur].last_pg + 1);
            return fail_why(pc, msg);
        }
    }
    if (bl_pc_db_check(&m[cur].dbs[1], BL_PC_MAIN, f.npages, m[cur].last_pg, why[0],
                       sizeof why[0]) != 0) {
        snprintf(msg, sizeof msg, "meta page %d: %s", cur, why[0]);
        return fail_why(pc, msg);
    }

    /* MAIN and the meta table in full; the roots of the other tables */
    main_scan ms;
    bl_pc_walk w;
    memset(&ms, 0, sizeof ms);
    w = (bl_pc_walk){.f = &f, .tree = BL_PC_MAIN, .entry = main_entry, .ctx = &ms};
    if ((rc = bl_pc_walk_tree(&w, &m[cur].dbs[1])) != 0)
        return rc == BINDLOG_ECORRUPT ? pc_fail(pc, &w.first) : rc;
    for (int tree = 0; tree < BL_DB_COUNT; tree++) {
        bl_pc_db *db = &ms.db[tree];
        if (!(ms.have & BL_PC_BIT(tree)))
            continue;
        if (bl_pc_db_check(db, tree, f.npages, m[cur].last_pg, why[0], sizeof why[0]) != 0)
            return fail_why(pc, why[0]);
        if (db->root == BL_PC_INVALID)
            continue;
        if (tree == BL_DB_META) {
            rc = walk_one(&f, tree, db, NULL, &ft);
        } else {
            unsigned want = db->depth == 1 ? BL_PC_P_LEAF : BL_PC_P_BRANCH;
            rc = 0;
            if (bl_pc_page_head_check(&f, db->root, tree, want, why[0], sizeof why[0]) != 0) {
                memset(&ft, 0, sizeof ft);
                ft.pgno = db->root;
                ft.tree = tree;
                ft.level = 1;
                bl_pc_copy(ft.why, sizeof ft.why, why[0]);
                rc = BINDLOG_ECORRUPT;
            }
        }
        if (rc != 0)
            return rc == BINDLOG_ECORRUPT ? pc_fail(pc, &ft) : rc;
    }
    lower_valid_from(pc, BL_PC_MAIN, t);
    lower_valid_from(pc, BL_DB_META, t);
    for (int tree = 0; tree < BL_DB_COUNT; tree++)
        if (!(ms.have & BL_PC_BIT(tree)) || ms.db[tree].root == BL_PC_INVALID)
            lower_valid_from(pc, tree, t); /* empty: nothing to read */
    return 0;
}

int bl_pc_open(bl_env *e, int writable)
{
    size_t n = strlen(e->path);
    bl_pc *pc = calloc(1, sizeof(*pc) + n + sizeof("/data.mdb"));
    MDB_envinfo info;
    MDB_stat st;
    struct stat fst;
    int rc;

    if (pc == NULL)
        return BINDLOG_ENOMEM;
    memcpy(pc->file, e->path, n);
    memcpy(pc->file + n, "/data.mdb", sizeof("/data.mdb"));
    for (int i = 0; i < BL_PC_NTREES; i++)
        atomic_init(&pc->valid_from[i], UINT64_MAX);
    if ((rc = mdb_env_get_fd(e->env, &pc->fd)) != 0 || (rc = mdb_env_info(e->env, &info)) != 0 ||
        (rc = mdb_env_stat(e->env, &st)) != 0) {
        free(pc);
        return bl_mdb_error(rc);
    }
    pc->psize = st.ms_psize;
    if (fstat(pc->fd, &fst) != 0) {
        rc = bl_mdb_error(errno);
        free(pc);
        return rc;
    }
    atomic_init(&pc->file_pages, (uint64_t)fst.st_size / pc->psize);
    if ((rc = map_file(pc, info.me_mapsize)) != 0) {
        free(pc);
        return rc;
    }
    if (writable)
        map_advise(pc, 1); /* for the open and the first commits (read_ahead) */
    e->pc = pc;

    for (int tries = 0;; tries++) {
        MDB_txn *txn;
        rc = mdb_txn_begin(e->env, NULL, MDB_RDONLY, &txn);
        if (rc == MDB_MAP_RESIZED && tries < 8) {
            /* another process grew the map: adopt it, as bl_env_resize does */
            if ((rc = mdb_env_set_mapsize(e->env, 0)) != 0)
                break;
            bl_pc_remap(e);
            continue;
        }
        if (rc != 0) {
            rc = bl_mdb_error(rc);
            break;
        }
        /* the size after the snapshot began: a writer may have grown the
         * file and committed since the fstat above, and a meta page never
         * names pages written after it */
        refresh_pages(pc);
        rc = open_check(pc, mdb_txn_id(txn));
        mdb_txn_abort(txn);
        if (rc <= 0 || tries >= 8)
            break;
    }
    if (rc > 0)
        rc = bl_err_set(BINDLOG_EBUSY, "%s: the store changed too fast to be checked", pc->file);
    if (rc != 0) {
        bl_pc_close(e);
        return rc;
    }
    pc->opened = 1;
    mdb_env_set_userctx(e->env, e);
    return 0;
}

void bl_pc_close(bl_env *e)
{
    bl_pc *pc = e->pc;
    if (pc == NULL)
        return;
    if (e->env != NULL)
        mdb_env_set_userctx(e->env, NULL);
    if (pc->map != NULL)
        munmap((void *)pc->map, pc->map_len);
    free(pc);
    e->pc = NULL;
}

void bl_pc_remap(bl_env *e)
{
    bl_pc *pc = e->pc;
    MDB_envinfo info;

    if (pc == NULL || mdb_env_info(e->env, &info) != 0 || info.me_mapsize == pc->map_len)
        return;
    const unsigned char *old = pc->map;
    size_t old_len = pc->map_len;
    if (map_file(pc, info.me_mapsize) != 0) {
        /* keep the old mapping: pages past it read as outside the file */
        pc->map = old;
        pc->map_len = old_len;
        return;
    }
    munmap((void *)old, old_len);
    refresh_pages(pc);
    if (atomic_load(&pc->random))
        map_advise(pc, 1); /* the new map came with the usual advice */
}

/* ---- check ------------------------------------------------------------------------ */

static void report(bindlog_check_report *out, const bl_pc_fault *ft, const char *file)
{
    char text[400];
    if (out->problems++ != 0)
        return;
    bl_pc_fault_format(ft, text, sizeof text);
    snprintf(out->message, sizeof out->message, "%s: %s", file, text);
    if (ft->lsn != 0)
        out->first_bad_lsn = ft->lsn;
    else if (ft->tree == BL_DB_LOG && ft->has_lo && ft->lo_len == 8)
        out->first_bad_lsn = bl_get64be(ft->lo);
}

static void report_why(bindlog_check_report *out, const char *why, const char *file)
{
    bl_pc_fault ft;
    memset(&ft, 0, sizeof ft);
    bl_pc_copy(ft.why, sizeof ft.why, why);
    report(out, &ft, file);
}

int bl_pc_check_store(bl_env *e, MDB_txn *txn, bindlog_check_report *out)
{
    bl_pc *pc = e->pc;
    bl_pc_file f;
    bl_pc_meta m[2];
    char why[2][200], msg[300];
    int ok[2], cur = -1, rc = 0;
    uint64_t t = mdb_txn_id(txn), before = out->problems;

    if (pc == NULL)
        return 0;
    refresh_pages(pc);
    pc_file(pc, &f);
    uint64_t *seen = calloc(f.npages / 64 + 1, sizeof(uint64_t));
    if (seen == NULL)
        return BINDLOG_ENOMEM;

    /* both meta pages: a writer may be rewriting one, so look again */
    for (int look = 0; look < 3; look++) {
        for (unsigned s = 0; s < 2; s++)
            ok[s] = bl_pc_meta_read(pc->map + (size_t)s * pc->psize, f.npages > s ? f.psize : 0,
                                    s, &m[s], why[s], sizeof why[s]);
        cur = bl_pc_meta_pick(m, ok, msg, sizeof msg);
        if (cur >= 0 && ok[cur] == 0)
            break;
    }
    if (cur < 0)
        report_why(out, ok[0] == -1 ? why[0] : ok[1] == -1 ? why[1] : msg, pc->file);
    /* the rest of the older page is rewritten before it is read again (and
     * LMDB itself leaves it inconsistent after a failed meta write) */
    if (cur >= 0 && ok[cur] != 0) {
        report_why(out, why[cur], pc->file);
        cur = -1;
    }

    /* every table of the snapshot, in full, going on past damage */
    for (int tree = 0; tree < BL_DB_COUNT && rc >= 0; tree++) {
        bl_pc_db db;
        bl_pc_walk w;
        char dwhy[200];
        const char *name = bl_pc_tree_name(tree);
        MDB_val k = {strlen(name), (void *)name}, v;
        int mrc = mdb_get(txn, MAIN_DBI, &k, &v);
        if (mrc == MDB_NOTFOUND)
            continue;
        if (mrc != 0) {
            rc = bl_mdb_error(mrc);
            break;
        }
        if (v.mv_size != BL_PC_DBREC) {
            report_why(out, "a table record in the main database is not 48 bytes", pc->file);
            continue;
        }
        bl_pc_db_decode(v.mv_data, &db);
        if (bl_pc_db_check(&db, tree, f.npages, UINT64_MAX - 1, dwhy, sizeof dwhy) != 0) {
            report_why(out, dwhy, pc->file);
            continue;
        }
        w = (bl_pc_walk){.f = &f, .tree = tree, .seen = seen, .keep_going = 1};
        rc = bl_pc_walk_tree(&w, &db);
        if (rc == BINDLOG_ECORRUPT) {
            report(out, &w.first, pc->file);
            out->problems += w.faults - 1;
            rc = 0;
        } else if (rc == 0) {
            lower_valid_from(pc, tree, t);
        }
    }

    /* when the snapshot is the newest, its free list and its main database
     * too, and every page of the file accounted for exactly once */
    if (rc >= 0 && cur >= 0 && m[cur].txnid == t && out->problems == before) {
        bl_pc_walk w;
        free_scan fs = {.seen = seen, .npages = f.npages, .mark = 1};
        f.last_pg = m[cur].last_pg;
        w = (bl_pc_walk){.f = &f, .tree = BL_PC_MAIN, .seen = seen};
        rc = bl_pc_walk_tree(&w, &m[cur].dbs[1]);
        if (rc == 0) {
            w.tree = BL_PC_FREE;
            w.entry = free_entry;
            w.ctx = &fs;
            rc = bl_pc_walk_tree(&w, &m[cur].dbs[0]);
        }
        if (rc == BINDLOG_ECORRUPT) {
            report(out, &w.first, pc->file);
            rc = 0;
        } else if (rc == 0 && fs.shared) {
            snprintf(msg, sizeof msg,
                     "%llu pages (the first: page %llu) are both in a table and on the free "
                     "list: LMDB would overwrite them",
                     (ull)fs.shared, (ull)fs.first_shared);
            report_why(out, msg, pc->file);
        } else if (rc == 0) {
            uint64_t lost = 0, first = 0, end = f.npages < f.last_pg + 1 ? f.npages
                                                                          : f.last_pg + 1;
            for (uint64_t pg = 2; pg < end; pg++)
                if (!(seen[pg >> 6] & ((uint64_t)1 << (pg & 63))) && lost++ == 0)
                    first = pg;
            if (lost) {
                snprintf(msg, sizeof msg,
                         "%llu pages (the first: page %llu) are neither in a table nor on the "
                         "free list",
                         (ull)lost, (ull)first);
                report_why(out, msg, pc->file);
            }
        }
    }
    free(seen);
    if (rc < 0)
        return rc;
    return out->problems != before;
}
