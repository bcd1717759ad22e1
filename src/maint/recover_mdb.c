/*
 * recover_mdb.c -- the data.mdb salvage source of bindlog_recover().
 *
 * The file is mapped read-only (never opened through LMDB, never written)
 * and read with the page validator (lmdb/pagecheck.h):
 *
 *   1. the meta pages: each one that names a plausible MAIN database is a
 *      starting point, the newest first (LMDB keeps the tree of the older
 *      one intact until the next commit);
 *   2. from each, the trees of the tables, walked page by page with
 *      damaged subtrees skipped: log records from both trees; the meta
 *      records, the base image and the stored state (bindings, sessions,
 *      history) from the newest tree that has them;
 *   3. every other page of the file that is a valid leaf: log records
 *      left in pages that no tree reaches any more (freed by later
 *      commits, not yet reused), including records compacted away.
 *
 * A log record is taken only if it decodes, its checksum is right and it
 * carries the LSN it is stored under.
 */
#define _GNU_SOURCE
#include "maint/recover.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "lmdb/pagecheck.h"

typedef struct scan {
    bl_salvage *sv;
    int trust;
    int table;
    uint64_t *covered;        /* pages whose log records were taken already */
    bl_salvage_meta meta;
    int meta_seen;
} scan;

static int take_record(scan *sc, const unsigned char *k, size_t kn, const unsigned char *v,
                       size_t vn)
{
    bl_record rec;
    if (kn != 8 || bl_record_decode(v, vn, &rec) != 0 || rec.lsn != bl_get64be(k))
        return 0;
    return bl_salvage_record(sc->sv, rec.lsn, v, vn, sc->trust);
}

static int on_entry(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v,
                    size_t vn, unsigned nflags)
{
    scan *sc = ctx;
    (void)nflags;
    switch (sc->table) {
    case BL_DB_LOG:
        return take_record(sc, k, kn, v, vn);
    case BL_DB_HISTORY:
        return bl_salvage_history(sc->sv, k, kn);
    case BL_DB_META:
        sc->meta_seen = 1;
        if (kn == 4 && memcmp(k, "head", 4) == 0 && vn == 16) {
            sc->meta.have_head = 1;
            sc->meta.head.lsn = bl_get64(v);
            sc->meta.head.time_ms = (int64_t)bl_get64(v + 8);
        } else if (kn == 4 && memcmp(k, "base", 4) == 0 && vn == 8) {
            sc->meta.have_base = 1;
            sc->meta.base.lsn = bl_get64(v);
        } else if (kn == 9 && memcmp(k, "base_time", 9) == 0 && vn == 8) {
            sc->meta.base.time_ms = (int64_t)bl_get64(v);
        } else if (kn == 11 && memcmp(k, "base_counts", 11) == 0 && bl_counts_len_ok(vn)) {
            bl_counts_decode(v, vn, &sc->meta.base.counts);
        } else if (kn == 3 && memcmp(k, "wal", 3) == 0 && vn == 32) {
            sc->meta.have_wal = 1;
            sc->meta.wal_salt = bl_get64(v);
            sc->meta.wal_cap = bl_get64(v + 8);
            sc->meta.wal_pos = bl_get64(v + 16);
            sc->meta.wal_chain = bl_get64(v + 24);
        }
        return 0;
    default:
        return bl_salvage_entry(sc->sv, sc->table, k, kn, v, vn);
    }
}

static void mark_covered(void *ctx, uint64_t pgno)
{
    scan *sc = ctx;
    sc->covered[pgno >> 6] |= (uint64_t)1 << (pgno & 63);
}

/* The table records the MAIN database of one meta page names. */
typedef struct tables {
    bl_pc_db db[BL_DB_COUNT];
    unsigned have;
} tables;

static int on_table(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v,
                    size_t vn, unsigned nflags)
{
    tables *t = ctx;
    int tree = bl_pc_tree_of(k, kn);
    if (tree >= 0 && (nflags & BL_PC_F_SUBDATA) && vn == BL_PC_DBREC) {
        bl_pc_db_decode(v, &t->db[tree]);
        t->have |= 1u << tree;
    }
    return 0;
}

/* Walk one table of one tree with entries going to the salvage; returns
 * the number of damaged pages (or <0 on an error of the salvage). */
static int64_t walk_table(scan *sc, const bl_pc_file *f, const tables *t, int table,
                          int *whole)
{
    bl_pc_walk w;
    char why[240];
    int rc;

    *whole = 0;
    if (!(t->have & (1u << table)))
        return 0;
    if (bl_pc_db_check(&t->db[table], table, f->npages, UINT64_MAX - 1, why, sizeof why) != 0)
        return 1;
    memset(&w, 0, sizeof w);
    w.f = f;
    w.tree = table;
    w.entry = on_entry;
    w.ctx = sc;
    w.keep_going = 1;
    if (table == BL_DB_LOG && sc->trust == BL_TRUST_CURRENT)
        w.passed = mark_covered;
    sc->table = table;
    rc = bl_pc_walk_tree(&w, &t->db[table]);
    if (rc != 0 && rc != BINDLOG_ECORRUPT)
        return rc;
    *whole = rc == 0;
    return rc == 0 ? 0 : (int64_t)(w.faults ? w.faults : 1);
}

/* The page size: the meta pages say it; else the system's. */
static unsigned page_size(const unsigned char *map, size_t size)
{
    static const unsigned sizes[] = {4096, 8192, 16384, 32768, 512, 1024, 2048};
    bl_pc_meta m;
    char why[240];
    if (size >= BL_PC_HDR + BL_PC_META &&
        bl_pc_meta_read(map, size, 0, &m, why, sizeof why) != -1)
        return m.psize;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (size >= sizes[i] + BL_PC_HDR + BL_PC_META &&
            bl_pc_meta_read(map + sizes[i], size - sizes[i], 1, &m, why, sizeof why) != -1 &&
            m.psize == sizes[i])
            return m.psize;
    long os = sysconf(_SC_PAGESIZE);
    return os > 0 ? (unsigned)os : 4096;
}

int bl_salvage_mdb(bl_salvage *sv, const char *dir)
{
    char path[4200];
    struct stat st;
    int fd, rc = 0;

    if (snprintf(path, sizeof path, "%s/data.mdb", dir) >= (int)sizeof path)
        return BINDLOG_EINVAL;
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        rc = bl_mdb_error(errno);
        return bl_err_set(rc, "%s: cannot read it", path);
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return bl_err_set(BINDLOG_ENOTSTORE, "%s is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return bl_err_set(BINDLOG_ENOTSTORE, "%s is empty", path);
    }
    size_t size = (size_t)st.st_size;
    unsigned char *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return bl_err_set(bl_mdb_error(errno), "%s: cannot map it", path);
    if ((rc = bl_salvage_keep(sv, map, size)) != 0) {
        munmap(map, size);
        return rc;
    }

    bl_pc_file f = {map, size / page_size(map, size), page_size(map, size), 0};
    f.last_pg = f.npages ? f.npages - 1 : 0;
    uint64_t *covered = calloc(f.npages / 64 + 1, sizeof(uint64_t));
    if (covered == NULL)
        return BINDLOG_ENOMEM;

    /* 1. the meta pages, newest first */
    bl_pc_meta m[2];
    int okm[2], order[2] = {0, 1};
    char why[240];
    for (unsigned s = 0; s < 2; s++)
        okm[s] = f.npages > s ? bl_pc_meta_read(map + (size_t)s * f.psize, f.psize, s, &m[s], why,
                                                sizeof why)
                              : -1;
    /* meta page 1 first when page 0 is unreadable or 1 is the newer */
    if (okm[0] == -1 || (okm[1] != -1 && m[1].txnid > m[0].txnid)) {
        order[0] = 1;
        order[1] = 0;
    }

    /* 2. the trees of both */
    int64_t damaged = 0;
    int have_meta = 0, have_state = 0, any_tree = 0;
    for (int i = 0; i < 2 && rc >= 0; i++) {
        int s = order[i];
        tables t;
        bl_pc_walk w;
        scan sc;
        int whole, current = i == 0;
        if (okm[s] == -1)
            continue;
        memset(&t, 0, sizeof t);
        memset(&w, 0, sizeof w);
        w.f = &f;
        w.tree = BL_PC_MAIN;
        w.entry = on_table;
        w.ctx = &t;
        w.keep_going = 1;
        if (bl_pc_db_check(&m[s].dbs[1], BL_PC_MAIN, f.npages, UINT64_MAX - 1, why, sizeof why) !=
            0) {
            damaged += current;
            continue;
        }
        int mrc = bl_pc_walk_tree(&w, &m[s].dbs[1]);
        if (mrc == BINDLOG_ENOMEM) {
            rc = BINDLOG_ENOMEM;
            break;
        }
        if (mrc == BINDLOG_ECORRUPT && current)
            damaged += (int64_t)w.faults;
        if (t.have == 0)
            continue;
        any_tree = 1;
        memset(&sc, 0, sizeof sc);
        sc.sv = sv;
        sc.trust = current ? BL_TRUST_CURRENT : BL_TRUST_OLDER;
        sc.covered = covered;
        int64_t d = walk_table(&sc, &f, &t, BL_DB_LOG, &whole);
        if (d < 0) {
            rc = (int)d;
            break;
        }
        if (current)
            damaged += d;
        /* the rest from the newest tree that reads them */
        if (!have_meta) {
            d = walk_table(&sc, &f, &t, BL_DB_META, &whole);
            if (current && d > 0)
                damaged += d;
            sc.meta.whole = whole;
            if (whole || sc.meta.have_head || sc.meta.have_base) {
                bl_salvage_set_meta(sv, &sc.meta);
                have_meta = 1;
                /* the base image goes with the meta records that date it */
                int wb = 0, ws = 0;
                int64_t d1 = walk_table(&sc, &f, &t, BL_DB_BASE_BINDINGS, &wb);
                int64_t d2 = walk_table(&sc, &f, &t, BL_DB_BASE_SESSIONS, &ws);
                if (d1 < 0 || d2 < 0) {
                    rc = (int)(d1 < 0 ? d1 : d2);
                    break;
                }
                if (current)
                    damaged += d1 + d2;
                if (d1 > 0 || d2 > 0)
                    bl_salvage_base_damaged(sv);
            }
        }
        if (!have_state) {
            static const int state[3] = {BL_DB_BINDINGS, BL_DB_SESSIONS, BL_DB_HISTORY};
            for (int j = 0; j < 3; j++) {
                d = walk_table(&sc, &f, &t, state[j], &whole);
                if (d < 0) {
                    rc = (int)d;
                    break;
                }
                if (current)
                    damaged += d;
            }
            have_state = 1;
        }
        if (current && (t.have & (1u << BL_DB_CHILDREN))) {
            /* the children index counts too in what is damaged */
            memset(&w, 0, sizeof w);
            w.f = &f;
            w.tree = BL_DB_CHILDREN;
            w.keep_going = 1;
            if (bl_pc_walk_tree(&w, &t.db[BL_DB_CHILDREN]) == BINDLOG_ECORRUPT)
                damaged += (int64_t)w.faults;
        }
    }

    /* 3. every other leaf of the file */
    scan raw;
    memset(&raw, 0, sizeof raw);
    raw.sv = sv;
    raw.trust = BL_TRUST_FREE;
    raw.table = BL_DB_LOG;
    uint64_t found_leaves = 0;
    for (uint64_t pg = 2; pg < f.npages && rc >= 0; pg++) {
        const unsigned char *p = map + pg * f.psize;
        if (covered[pg >> 6] & ((uint64_t)1 << (pg & 63)))
            continue;
        if (bl_get64(p) != pg || bl_get16(p + 10) != BL_PC_P_LEAF)
            continue;
        int r = bl_pc_leaf_each(&f, pg, BL_DB_LOG, on_entry, &raw);
        if (r == 0)
            found_leaves++;
        else if (r != BINDLOG_ECORRUPT)
            rc = r;
    }
    free(covered);
    if (rc < 0)
        return rc;
    bl_salvage_pages(sv, f.npages, (uint64_t)damaged);
    if (!any_tree && found_leaves == 0 && okm[0] == -1 && okm[1] == -1)
        return bl_err_set(BINDLOG_ENOTSTORE, "%s holds no LMDB meta page and no page of a bindlog "
                                             "log",
                          path);
    return 0;
}
