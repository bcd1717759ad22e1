/*
 * pagecheck.c -- LMDB 0.9's on-disk format, checked byte by byte (the
 * layout is described in pagecheck.h).
 *
 * Everything here works on a read-only view of the file (bl_pc_file): a
 * base address and the number of whole pages that may be read there.  No
 * function reads outside [map, map + npages * psize), whatever the bytes
 * say, and none trusts a length, an offset or a page number before
 * checking it against those bounds.  The guards (pagecheck_env.c), the
 * check command, recover and the fuzzer all go through these functions.
 *
 * Fields are read with bl_get16/bl_get64 (little-endian byte loads), so an
 * odd offset in a damaged page is a finding, not an unaligned access; LMDB
 * writes host byte order, and bindlog runs on little-endian hosts.
 */
#define _GNU_SOURCE
#include "lmdb/pagecheck.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static const char *const tree_names[BL_PC_NTREES] = {
    "meta", "log", "bindings", "sessions", "children", "history", "base_bindings",
    "base_sessions", "free list", "main database",
};

const char *bl_pc_tree_name(int tree)
{
    return tree >= 0 && tree < BL_PC_NTREES ? tree_names[tree] : "?";
}

int bl_pc_tree_of(const void *name, size_t len)
{
    for (int i = 0; i < BL_DB_COUNT; i++)
        if (strlen(tree_names[i]) == len && memcmp(tree_names[i], name, len) == 0)
            return i;
    return -1;
}

static void say(char *why, size_t cap, const char *fmt, ...) BL_PRINTF(3, 4);
static void say(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    if (cap == 0)
        return;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): va_start is right above */
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
}

typedef unsigned long long ull;

void bl_pc_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (cap == 0)
        return;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ---- records and meta pages ------------------------------------------------ */

void bl_pc_db_decode(const unsigned char *p, bl_pc_db *db)
{
    db->pad = bl_get32(p);
    db->flags = bl_get16(p + 4);
    db->depth = bl_get16(p + 6);
    db->branch_pages = bl_get64(p + 8);
    db->leaf_pages = bl_get64(p + 16);
    db->overflow_pages = bl_get64(p + 24);
    db->entries = bl_get64(p + 32);
    db->root = bl_get64(p + 40);
}

/* LMDB's flags of mdb_dbi_open (lmdb.h) */
#define DB_INTEGERKEY 0x08u
#define ENV_FIXEDMAP 0x01u
#define ENV_NOSUBDIR 0x4000u

int bl_pc_db_check(const bl_pc_db *db, int tree, uint64_t npages, uint64_t last_pg, char *why,
                   size_t cap)
{
    const char *name = bl_pc_tree_name(tree);
    unsigned flags = db->flags;

    if (tree == BL_PC_FREE) {
        /* FREE's pad is the page size and its flags the environment's */
        if ((flags & ~(ENV_FIXEDMAP | ENV_NOSUBDIR)) != DB_INTEGERKEY) {
            say(why, cap, "the %s record has flags 0x%x (integer keys only expected)", name,
                flags);
            return -1;
        }
    } else if (flags != 0) {
        /* duplicates or integer keys would send LMDB down paths (sub-
         * cursors) that bindlog's tables never use */
        say(why, cap, "the %s record has flags 0x%x (none expected)", name, flags);
        return -1;
    }
    if (db->root == BL_PC_INVALID) {
        if (db->depth != 0 || db->entries != 0 || db->branch_pages || db->leaf_pages ||
            db->overflow_pages) {
            say(why, cap, "the %s record has no root but claims depth %u and %llu entries", name,
                db->depth, (ull)db->entries);
            return -1;
        }
        return 0;
    }
    if (db->depth == 0 || db->depth > BL_PC_MAXDEPTH) {
        say(why, cap, "the %s record has depth %u (1..%d possible)", name, db->depth,
            BL_PC_MAXDEPTH);
        return -1;
    }
    if (db->root < 2 || db->root > last_pg) {
        say(why, cap, "the %s record's root page %llu is outside pages 2..%llu", name,
            (ull)db->root, (ull)last_pg);
        return -1;
    }
    if (db->root >= npages) {
        say(why, cap,
            "the %s record's root page %llu lies past the end of the file (%llu pages): the "
            "file is truncated",
            name, (ull)db->root, (ull)npages);
        return -1;
    }
    if (db->leaf_pages == 0 || db->branch_pages > last_pg || db->leaf_pages > last_pg ||
        db->overflow_pages > last_pg || (db->depth == 1) != (db->branch_pages == 0)) {
        say(why, cap, "the %s record's page counts (%llu branch, %llu leaf, %llu overflow) do "
                      "not fit depth %u and %llu pages",
            name, (ull)db->branch_pages, (ull)db->leaf_pages, (ull)db->overflow_pages,
            db->depth, (ull)last_pg + 1);
        return -1;
    }
    return 0;
}

int bl_pc_meta_read(const unsigned char *page, size_t avail, unsigned slot, bl_pc_meta *m,
                    char *why, size_t cap)
{
    const unsigned char *p = page + BL_PC_HDR;
    uint64_t pgno;
    unsigned flags;

    memset(m, 0, sizeof(*m));
    if (avail < BL_PC_HDR + BL_PC_META) {
        say(why, cap, "meta page %u is cut short by the end of the file", slot);
        return -1;
    }
    pgno = bl_get64(page);
    flags = bl_get16(page + 10);
    m->magic = bl_get32(p);
    m->version = bl_get32(p + 4);
    m->mapsize = bl_get64(p + 16);
    bl_pc_db_decode(p + 24, &m->dbs[0]);
    bl_pc_db_decode(p + 24 + BL_PC_DBREC, &m->dbs[1]);
    m->last_pg = bl_get64(p + 24 + 2 * BL_PC_DBREC);
    m->txnid = bl_get64(p + 32 + 2 * BL_PC_DBREC);
    m->psize = m->dbs[0].pad;

    if (flags != BL_PC_P_META || pgno != slot) {
        say(why, cap, "meta page %u has header page %llu, flags 0x%x (page %u, flags 0x8 "
                      "expected)",
            slot, (ull)pgno, flags, slot);
        return -1;
    }
    if (m->magic != BL_PC_MAGIC) {
        say(why, cap, "meta page %u has magic 0x%08x, not LMDB's 0xbeefc0de", slot, m->magic);
        return -1;
    }
    if (m->version != 1) {
        say(why, cap, "meta page %u has data version %u (LMDB 0.9 writes 1)", slot,
            m->version);
        return -1;
    }
    if (m->psize < 512 || m->psize > 32768 || (m->psize & (m->psize - 1)) != 0) {
        say(why, cap, "meta page %u has page size %u (a power of two in 512..32768 expected)",
            slot, m->psize);
        return -1;
    }
    if (m->txnid != 0 && (m->txnid & 1) != slot) {
        say(why, cap, "meta page %u holds transaction %llu (transaction N is written to page "
                      "N %% 2)",
            slot, (ull)m->txnid);
        return -1;
    }
    /* the fields below are read only from the current meta page */
    if (m->last_pg < 1 || m->last_pg >= ((uint64_t)1 << 40)) {
        say(why, cap, "meta page %u names last page %llu", slot, (ull)m->last_pg);
        return -2;
    }
    if (m->mapsize / m->psize < m->last_pg + 1 || m->mapsize > ((uint64_t)1 << 47)) {
        say(why, cap, "meta page %u has map size %llu for %llu pages of %u bytes", slot,
            (ull)m->mapsize, (ull)m->last_pg + 1, m->psize);
        return -2;
    }
    /* the roots are checked against the file by the caller; here only that
     * the records are records */
    char sub[160];
    if (bl_pc_db_check(&m->dbs[0], BL_PC_FREE, UINT64_MAX, m->last_pg, sub, sizeof sub) != 0 ||
        bl_pc_db_check(&m->dbs[1], BL_PC_MAIN, UINT64_MAX, m->last_pg, sub, sizeof sub) != 0) {
        say(why, cap, "meta page %u: %s", slot, sub);
        return -2;
    }
    return 0;
}

int bl_pc_meta_pick(const bl_pc_meta m[2], const int ok[2], char *why, size_t cap)
{
    if (ok[0] == -1 || ok[1] == -1)
        return -1; /* why was filled by bl_pc_meta_read */
    if (m[0].psize != m[1].psize) {
        say(why, cap, "the meta pages disagree on the page size (%u and %u)", m[0].psize,
            m[1].psize);
        return -1;
    }
    uint64_t a = m[0].txnid, b = m[1].txnid;
    if (!(a == 0 && b == 0) && a + 1 != b && b + 1 != a) {
        say(why, cap, "the meta pages hold transactions %llu and %llu, which are not "
                      "consecutive: one of them is damaged",
            (ull)a, (ull)b);
        return -1;
    }
    return a < b ? 1 : 0;
}

/* ---- one page ---------------------------------------------------------------- */

static int cmp_keys(int tree, const unsigned char *a, size_t an, const unsigned char *b,
                    size_t bn)
{
    if (tree == BL_PC_FREE && an == 8 && bn == 8) {
        uint64_t x = bl_get64(a), y = bl_get64(b);
        return x < y ? -1 : x > y;
    }
    if (tree == BL_DB_LOG && an == 8 && bn == 8) { /* big-endian LSNs */
        uint64_t x = bl_get64be(a), y = bl_get64be(b);
        return x < y ? -1 : x > y;
    }
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    return c != 0 ? c : an < bn ? -1 : an > bn;
}

static const char *page_type(unsigned flags)
{
    switch (flags) {
    case BL_PC_P_BRANCH:
        return "branch page";
    case BL_PC_P_LEAF:
        return "leaf page";
    case BL_PC_P_OVERFLOW:
        return "overflow page";
    case BL_PC_P_META:
        return "meta page";
    case 0:
        return "page of zeros";
    default:
        return "page of no known type";
    }
}

/* The first page of an overflow run holding `dsize` bytes. */
static int overflow_check(const bl_pc_file *f, uint64_t ov, uint64_t dsize, char *why,
                          size_t cap)
{
    if (ov < 2 || ov >= f->npages) {
        say(why, cap, "its value's overflow page %llu is outside the file (%llu pages)",
            (ull)ov, (ull)f->npages);
        return -1;
    }
    const unsigned char *p = f->map + ov * f->psize;
    uint64_t pgno = bl_get64(p), pages = bl_get32(p + 12);
    unsigned flags = bl_get16(p + 10);
    if (pgno != ov || flags != BL_PC_P_OVERFLOW) {
        say(why, cap, "its value's overflow page %llu is a %s numbered %llu", (ull)ov,
            page_type(flags), (ull)pgno);
        return -1;
    }
    if (pages == 0 || pages > f->npages - ov) {
        say(why, cap, "its value's overflow run of %llu pages from page %llu passes the end "
                      "of the file (%llu pages)",
            (ull)pages, (ull)ov, (ull)f->npages);
        return -1;
    }
    if (dsize > pages * f->psize - BL_PC_HDR) {
        say(why, cap, "its value of %llu bytes does not fit its overflow run of %llu pages",
            (ull)dsize, (ull)pages);
        return -1;
    }
    return 0;
}

/* A free list record: a count, then that many page numbers, descending. */
static int idl_check(const bl_pc_file *f, const unsigned char *v, size_t n, char *why,
                     size_t cap)
{
    if (n < 8 || n % 8 != 0) {
        say(why, cap, "a free list record of %zu bytes is not a list of page numbers", n);
        return -1;
    }
    uint64_t count = bl_get64(v), prev = UINT64_MAX;
    if (count > n / 8 - 1) {
        say(why, cap, "a free list record counts %llu pages in %zu bytes", (ull)count, n);
        return -1;
    }
    for (uint64_t i = 1; i <= count; i++) {
        uint64_t pg = bl_get64(v + 8 * i);
        /* pages past the end of the file may be free (never written) */
        if (pg < 2 || pg > f->last_pg || pg >= prev) {
            say(why, cap, "a free list record lists page %llu (after %llu; pages 2..%llu, in "
                          "descending order, expected)",
                (ull)pg, (ull)prev, (ull)f->last_pg);
            return -1;
        }
        prev = pg;
    }
    return 0;
}

/* Node i of page p: its offset, checked.  0 or -1. */
static int node_at(const bl_pc_file *f, const unsigned char *p, unsigned upper, unsigned i,
                   unsigned *off, char *why, size_t cap)
{
    unsigned o = bl_get16(p + BL_PC_HDR + 2 * i);
    if (o < upper || o > f->psize - BL_PC_NODE || (o & 1)) {
        say(why, cap, "node %u lies at offset %u, outside the node area %u..%u", i, o, upper,
            f->psize);
        return -1;
    }
    unsigned ks = bl_get16(p + o + 6);
    if (ks > BL_PC_MAXKEY || o + BL_PC_NODE + ks > f->psize) {
        say(why, cap, "node %u's key of %u bytes runs past the end of the page", i, ks);
        return -1;
    }
    *off = o;
    return 0;
}

/* Header checks shared by the full check and the search: the page lies in
 * the file, is the page it claims to be, of a tree type, with sane bounds.
 * Sets *pp, *flags, *n (nodes) and *upper. */
static int page_head(const bl_pc_file *f, uint64_t pgno, int tree, unsigned want,
                     const unsigned char **pp, unsigned *flags, unsigned *n, unsigned *upper,
                     char *why, size_t cap)
{
    if (pgno < 2 || pgno >= f->npages) {
        say(why, cap, "page number %llu is outside the file (%llu pages)", (ull)pgno,
            (ull)f->npages);
        return -1;
    }
    const unsigned char *p = f->map + pgno * f->psize;
    uint64_t self = bl_get64(p);
    unsigned fl = bl_get16(p + 10), lower = bl_get16(p + 12), up = bl_get16(p + 14);
    if (fl != BL_PC_P_BRANCH && fl != BL_PC_P_LEAF) {
        say(why, cap, "it is a %s (flags 0x%x), not a branch or leaf page", page_type(fl), fl);
        return -1;
    }
    if (self != pgno) {
        say(why, cap, "its header says it is page %llu", (ull)self);
        return -1;
    }
    if (want != 0 && fl != want) {
        say(why, cap, "it is a %s where the tree's depth needs a %s", page_type(fl),
            page_type(want));
        return -1;
    }
    if (lower < BL_PC_HDR || lower > up || up > f->psize || (lower & 1)) {
        say(why, cap, "its free-space bounds %u..%u are impossible in a page of %u bytes",
            lower, up, f->psize);
        return -1;
    }
    unsigned nk = (lower - BL_PC_HDR) / 2;
    unsigned min = fl == BL_PC_P_LEAF ? 1 : tree == BL_PC_FREE ? 1 : 2;
    if (nk < min) {
        say(why, cap, "a %s with %u nodes", page_type(fl), nk);
        return -1;
    }
    *pp = p;
    *flags = fl;
    *n = nk;
    *upper = up;
    return 0;
}

/* The entry a leaf node holds, named as the messages of limits.c name
 * them: "LSN 3", "key agent:main:x", "session s-1".  The key lies within
 * the page (node_at checked it). */
static void entry_name(int tree, const unsigned char *k, size_t n, char *out, size_t cap)
{
    char q[BL_ERR_QUOTE_MAX];
    if (tree == BL_DB_LOG && n == 8)
        snprintf(out, cap, "LSN %llu", (ull)bl_get64be(k));
    else if (tree == BL_DB_BINDINGS || tree == BL_DB_BASE_BINDINGS)
        snprintf(out, cap, "key %s", bl_err_bytes(q, 96, k, n));
    else if (tree == BL_DB_SESSIONS || tree == BL_DB_BASE_SESSIONS)
        snprintf(out, cap, "session %s", bl_err_bytes(q, 96, k, n));
    else if (tree == BL_DB_HISTORY && n >= 9 && k[n - 9] == 0)
        snprintf(out, cap, "key %s LSN %llu", bl_err_bytes(q, 96, k, n - 9),
                 (ull)bl_get64be(k + n - 8));
    else
        snprintf(out, cap, "entry %s", bl_err_bytes(q, 96, k, n));
}

/* The data of leaf node at `off`: inline (checked to fit the page) or in
 * an overflow run (checked to fit the file).  0 or -1. */
static int leaf_data(const bl_pc_file *f, const unsigned char *p, unsigned off, unsigned i,
                     int tree, const unsigned char **v, size_t *vn, unsigned *nflags,
                     char *why, size_t cap)
{
    unsigned fl = bl_get16(p + off + 4), ks = bl_get16(p + off + 6);
    uint64_t ds = bl_get16(p + off) | ((uint64_t)bl_get16(p + off + 2) << 16);
    unsigned allowed = tree == BL_PC_MAIN ? (BL_PC_F_BIGDATA | BL_PC_F_SUBDATA)
                                          : BL_PC_F_BIGDATA;
    size_t at = (size_t)off + BL_PC_NODE + ks;

    if (ks == 0) {
        say(why, cap, "node %u has an empty key", i);
        return -1;
    }
    if (fl & ~allowed || fl == (BL_PC_F_BIGDATA | BL_PC_F_SUBDATA)) {
        say(why, cap, "node %u has flags 0x%x, impossible in the %s", i, fl,
            bl_pc_tree_name(tree));
        return -1;
    }
    *nflags = fl;
    if (fl & BL_PC_F_BIGDATA) {
        if (at + 8 > f->psize) {
            say(why, cap, "node %u's overflow page number runs past the end of the page", i);
            return -1;
        }
        uint64_t ov = bl_get64(p + at);
        char sub[150], name[160];
        if (overflow_check(f, ov, ds, sub, sizeof sub) != 0) {
            entry_name(tree, p + off + BL_PC_NODE, ks, name, sizeof name);
            say(why, cap, "%s: %s (node %u)", name, sub, i);
            return -1;
        }
        *v = f->map + ov * f->psize + BL_PC_HDR;
        *vn = (size_t)ds;
        return 0;
    }
    if (at + ds > f->psize) {
        char name[160];
        entry_name(tree, p + off + BL_PC_NODE, ks, name, sizeof name);
        say(why, cap, "%s: value of %llu bytes runs past the end of the page (node %u)", name,
            (ull)ds, i);
        return -1;
    }
    if ((fl & BL_PC_F_SUBDATA) && ds != BL_PC_DBREC) {
        say(why, cap, "node %u is a table record of %llu bytes (48 expected)", i, (ull)ds);
        return -1;
    }
    *v = p + at;
    *vn = (size_t)ds;
    return 0;
}

static uint64_t branch_child(const unsigned char *p, unsigned off)
{
    return bl_get16(p + off) | ((uint64_t)bl_get16(p + off + 2) << 16) |
           ((uint64_t)bl_get16(p + off + 4) << 32);
}

int bl_pc_page_head_check(const bl_pc_file *f, uint64_t pgno, int tree, unsigned want,
                          char *why, size_t cap)
{
    const unsigned char *p;
    unsigned flags, n, upper;
    return page_head(f, pgno, tree, want, &p, &flags, &n, &upper, why, cap);
}

/* bl_pc_page_check, and the LSN of the log entry at fault, if one is. */
static int page_check(const bl_pc_file *f, uint64_t pgno, int tree, unsigned want, char *why,
                      size_t cap, uint64_t *bad_lsn);

int bl_pc_page_check(const bl_pc_file *f, uint64_t pgno, int tree, unsigned want, char *why,
                     size_t cap)
{
    return page_check(f, pgno, tree, want, why, cap, NULL);
}

/* Mark 2-byte granules [a, b) of a page in m; -1 if one was marked. */
static int mark_span(uint64_t *m, unsigned a, unsigned b)
{
    while (a < b) {
        unsigned bit = a & 63, n = 64 - bit < b - a ? 64 - bit : b - a;
        uint64_t mask = (n == 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1)) << bit;
        if (m[a >> 6] & mask)
            return -1;
        m[a >> 6] |= mask;
        a += n;
    }
    return 0;
}

static int page_check(const bl_pc_file *f, uint64_t pgno, int tree, unsigned want, char *why,
                      size_t cap, uint64_t *bad_lsn)
{
    const unsigned char *p, *pk = NULL; /* the key before, once have_pk */
    unsigned flags, n, upper, pks = 0;
    int have_pk = 0;
    /* LMDB keeps a page's nodes packed in [upper, page end): its deletes,
     * merges and splits move them by the sizes they claim, so nodes that
     * overlap or leave gaps make those moves run past the page */
    uint64_t used[32768 / 2 / 64];
    size_t packed = 0;

    if (page_head(f, pgno, tree, want, &p, &flags, &n, &upper, why, cap) != 0)
        return -1;
    memset(used, 0, (f->psize / 2 + 63) / 64 * sizeof(uint64_t));
    for (unsigned i = 0; i < n; i++) {
        unsigned off;
        if (node_at(f, p, upper, i, &off, why, cap) != 0)
            return -1;
        const unsigned char *k = p + off + BL_PC_NODE;
        unsigned ks = bl_get16(p + off + 6);
        size_t sz = BL_PC_NODE + ks;
        if (flags == BL_PC_P_BRANCH) {
            uint64_t child = branch_child(p, off);
            if (child < 2 || child >= f->npages || child == pgno) {
                say(why, cap, "node %u points to page %llu, outside the file's pages 2..%llu", i,
                    (ull)child, (ull)f->npages - 1);
                return -1;
            }
        } else {
            const unsigned char *v;
            size_t vn;
            unsigned nf;
            if (leaf_data(f, p, off, i, tree, &v, &vn, &nf, why, cap) != 0) {
                if (bad_lsn != NULL && tree == BL_DB_LOG && ks == 8)
                    *bad_lsn = bl_get64be(k);
                return -1;
            }
            if (tree == BL_PC_FREE) {
                char sub[150];
                if (ks != 8) {
                    say(why, cap, "node %u of the free list has a key of %u bytes", i, ks);
                    return -1;
                }
                if (idl_check(f, v, vn, sub, sizeof sub) != 0) {
                    say(why, cap, "node %u: %s", i, sub);
                    return -1;
                }
            }
            sz += (nf & BL_PC_F_BIGDATA) ? 8 : vn;
        }
        sz = (sz + 1) & ~(size_t)1;
        if (off + sz > f->psize || mark_span(used, off / 2, (unsigned)((off + sz) / 2)) != 0) {
            say(why, cap, "node %u (%zu bytes at offset %u) overlaps another node or runs past "
                          "the end of the page",
                i, sz, off);
            if (flags == BL_PC_P_LEAF && bad_lsn != NULL && tree == BL_DB_LOG && ks == 8)
                *bad_lsn = bl_get64be(k);
            return -1;
        }
        packed += sz;
        if (flags == BL_PC_P_BRANCH && i == 0)
            continue; /* the first key of a branch is never compared */
        if (have_pk && cmp_keys(tree, pk, pks, k, ks) >= 0) {
            say(why, cap, "nodes %u and %u are out of key order", i - 1, i);
            return -1;
        }
        pk = k;
        pks = ks;
        have_pk = 1;
    }
    if (packed != f->psize - upper) {
        say(why, cap, "its nodes take %zu bytes of the %u between their bounds and the end of "
                      "the page",
            packed, f->psize - upper);
        return -1;
    }
    return 0;
}

int bl_pc_leaf_each(const bl_pc_file *f, uint64_t pgno, int tree,
                    int (*entry)(void *ctx, const unsigned char *k, size_t kn,
                                 const unsigned char *v, size_t vn, unsigned nflags),
                    void *ctx)
{
    char why[240];
    if (bl_pc_page_check(f, pgno, tree, BL_PC_P_LEAF, why, sizeof why) != 0)
        return BINDLOG_ECORRUPT;
    const unsigned char *p = f->map + pgno * f->psize;
    unsigned n = (bl_get16(p + 12) - BL_PC_HDR) / 2;
    for (unsigned i = 0; i < n; i++) {
        unsigned off = bl_get16(p + BL_PC_HDR + 2 * i), nf;
        const unsigned char *v;
        size_t vn;
        int rc;
        if (leaf_data(f, p, off, i, tree, &v, &vn, &nf, why, sizeof why) != 0)
            return BINDLOG_ECORRUPT; /* cannot happen: the page passed */
        if ((rc = entry(ctx, p + off + BL_PC_NODE, bl_get16(p + off + 6), v, vn, nf)) != 0)
            return rc;
    }
    return 0;
}

/* ---- faults ---------------------------------------------------------------- */

static void fault_set(bl_pc_fault *ft, uint64_t pgno, int tree, unsigned level,
                      const unsigned char *lo, size_t lon, int has_lo, const unsigned char *hi,
                      size_t hin, int has_hi, const char *why)
{
    ft->lsn = 0;
    ft->pgno = pgno;
    ft->tree = tree;
    ft->level = level;
    ft->has_lo = has_lo && lon <= sizeof(ft->lo);
    ft->has_hi = has_hi && hin <= sizeof(ft->hi);
    ft->lo_len = ft->has_lo ? lon : 0;
    ft->hi_len = ft->has_hi ? hin : 0;
    if (ft->lo_len)
        memcpy(ft->lo, lo, ft->lo_len);
    if (ft->hi_len)
        memcpy(ft->hi, hi, ft->hi_len);
    bl_pc_copy(ft->why, sizeof(ft->why), why);
}

/* One key of `tree`, readable. */
static void show_key(int tree, const unsigned char *k, size_t n, char *out, size_t cap)
{
    char q[BL_ERR_QUOTE_MAX];
    if ((tree == BL_DB_LOG || tree == BL_PC_FREE) && n == 8) {
        snprintf(out, cap, "%llu",
                 (ull)(tree == BL_DB_LOG ? bl_get64be(k) : bl_get64(k)));
    } else if (tree == BL_DB_HISTORY && n >= 9 && k[n - 9] == 0) {
        snprintf(out, cap, "'%s' LSN %llu", bl_err_bytes(q, 96, k, n - 9),
                 (ull)bl_get64be(k + n - 8));
    } else if (tree == BL_DB_CHILDREN && n > 8) {
        snprintf(out, cap, "parent LSN %llu -> '%s'", (ull)bl_get64be(k),
                 bl_err_bytes(q, 96, k + 8, n - 8));
    } else {
        snprintf(out, cap, "'%s'", bl_err_bytes(q, 96, k, n));
    }
}

void bl_pc_fault_format(const bl_pc_fault *f, char *out, size_t cap)
{
    char lo[128], hi[128], range[300];
    const char *unit = f->tree == BL_DB_LOG    ? "LSNs"
                       : f->tree == BL_PC_FREE ? "transactions"
                       : f->tree == BL_DB_SESSIONS || f->tree == BL_DB_BASE_SESSIONS
                           ? "session ids"
                           : "keys";

    if (f->level == 0) {
        snprintf(out, cap, "%s", f->why);
        return;
    }
    if (f->has_lo)
        show_key(f->tree, f->lo, f->lo_len, lo, sizeof lo);
    if (f->has_hi) {
        if (f->tree == BL_DB_LOG && f->hi_len == 8 && bl_get64be(f->hi) > 0)
            snprintf(hi, sizeof hi, "%llu", (ull)(bl_get64be(f->hi) - 1));
        else
            show_key(f->tree, f->hi, f->hi_len, hi, sizeof hi);
    }
    if (f->has_lo && f->has_hi)
        snprintf(range, sizeof range, "%s %s%s%s%s", unit, f->tree == BL_DB_LOG ? "" : "from ", lo,
                 f->tree == BL_DB_LOG ? ".." : " up to ", hi);
    else if (f->has_lo)
        snprintf(range, sizeof range, "%s from %s on", unit, lo);
    else if (f->has_hi)
        snprintf(range, sizeof range, "%s %s%s", unit, f->tree == BL_DB_LOG ? "up to " : "below ",
                 hi);
    else
        snprintf(range, sizeof range, "all its %s", unit);
    char where[32];
    if (f->level == 1)
        snprintf(where, sizeof where, "its root page");
    else
        snprintf(where, sizeof where, "depth %u", f->level);
    snprintf(out, cap, "page %llu of %s %s (%s, %s): %s", (ull)f->pgno,
             f->tree >= BL_DB_COUNT ? "the" : "table", bl_pc_tree_name(f->tree), range, where,
             f->why);
}

/* ---- whole trees ------------------------------------------------------------- */

typedef struct wbound {
    const unsigned char *k;
    size_t n;
    int has;
} wbound;

static int walk_fault(bl_pc_walk *w, uint64_t pgno, unsigned level, wbound lo, wbound hi,
                      const char *why)
{
    if (w->faults++ == 0)
        fault_set(&w->first, pgno, w->tree, level, lo.k, lo.n, lo.has, hi.k, hi.n, hi.has, why);
    return BINDLOG_ECORRUPT;
}

static int seen_test_set(uint64_t *bits, uint64_t pg)
{
    uint64_t m = (uint64_t)1 << (pg & 63);
    int was = (bits[pg >> 6] & m) != 0;
    bits[pg >> 6] |= m;
    return was;
}

static int walk_page(bl_pc_walk *w, uint64_t pgno, unsigned level, unsigned depth, wbound lo,
                     wbound hi)
{
    const bl_pc_file *f = w->f;
    char why[200];
    unsigned want = level == depth ? BL_PC_P_LEAF : BL_PC_P_BRANCH;
    int rc;

    if (pgno < f->npages && seen_test_set(w->seen, pgno))
        return walk_fault(w, pgno, level, lo, hi,
                          "the page is reached twice (a loop, or a page two trees share)");
    uint64_t bad_lsn = 0;
    if (page_check(f, pgno, w->tree, want, why, sizeof why, &bad_lsn) != 0) {
        rc = walk_fault(w, pgno, level, lo, hi, why);
        if (w->faults == 1)
            w->first.lsn = bad_lsn;
        return rc;
    }

    const unsigned char *p = f->map + pgno * f->psize;
    unsigned n = (bl_get16(p + 12) - BL_PC_HDR) / 2;
    /* keys must lie in the range the parent gives: lo <= key < hi; they
     * are sorted (bl_pc_page_check), so the first and the last decide (a
     * branch's first key is never compared) */
    unsigned first = want == BL_PC_P_LEAF ? 0 : 1;
    for (unsigned i = first; i < n; i = i == first && n - 1 > first ? n - 1 : n) {
        unsigned off = bl_get16(p + BL_PC_HDR + 2 * i);
        const unsigned char *k = p + off + BL_PC_NODE;
        size_t ks = bl_get16(p + off + 6);
        if ((lo.has && cmp_keys(w->tree, k, ks, lo.k, lo.n) < 0) ||
            (hi.has && cmp_keys(w->tree, k, ks, hi.k, hi.n) >= 0)) {
            snprintf(why, sizeof why, "node %u's key lies outside the range its parent gives",
                     i);
            return walk_fault(w, pgno, level, lo, hi, why);
        }
    }
    if (w->passed != NULL)
        w->passed(w->ctx, pgno);

    if (want == BL_PC_P_LEAF) {
        w->leaf_pages++;
        w->entries += n;
        for (unsigned i = 0; i < n; i++) {
            unsigned off = bl_get16(p + BL_PC_HDR + 2 * i), nf;
            const unsigned char *v;
            size_t vn;
            leaf_data(f, p, off, i, w->tree, &v, &vn, &nf, why, sizeof why);
            if (nf & BL_PC_F_BIGDATA) {
                uint64_t ov = bl_get64(p + off + BL_PC_NODE + bl_get16(p + off + 6));
                uint64_t pages = bl_get32(f->map + ov * f->psize + 12);
                w->overflow_pages += pages;
                for (uint64_t q = 0; q < pages; q++)
                    if (seen_test_set(w->seen, ov + q))
                        return walk_fault(w, pgno, level, lo, hi,
                                          "an overflow run overlaps another page of the file");
            }
            if (w->entry != NULL &&
                (rc = w->entry(w->ctx, p + off + BL_PC_NODE, bl_get16(p + off + 6), v, vn, nf)))
                return rc;
        }
        return 0;
    }

    w->branch_pages++;
    int bad = 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned off = bl_get16(p + BL_PC_HDR + 2 * i);
        wbound clo = lo, chi = hi;
        if (i > 0)
            clo = (wbound){p + off + BL_PC_NODE, bl_get16(p + off + 6), 1};
        if (i + 1 < n) {
            unsigned noff = bl_get16(p + BL_PC_HDR + 2 * (i + 1));
            chi = (wbound){p + noff + BL_PC_NODE, bl_get16(p + noff + 6), 1};
        }
        rc = walk_page(w, branch_child(p, off), level + 1, depth, clo, chi);
        if (rc == BINDLOG_ECORRUPT && w->keep_going) {
            bad = 1;
            continue;
        }
        if (rc != 0)
            return rc;
    }
    return bad ? BINDLOG_ECORRUPT : 0;
}

int bl_pc_walk_tree(bl_pc_walk *w, const bl_pc_db *db)
{
    uint64_t *own = NULL;
    wbound none = {NULL, 0, 0};
    int rc;

    w->faults = 0;
    w->branch_pages = w->leaf_pages = w->overflow_pages = w->entries = 0;
    memset(&w->first, 0, sizeof(w->first));
    if (db->root == BL_PC_INVALID)
        return 0;
    if (w->seen == NULL) {
        own = calloc(w->f->npages / 64 + 1, sizeof(uint64_t));
        if (own == NULL)
            return BINDLOG_ENOMEM;
        w->seen = own;
    }
    rc = walk_page(w, db->root, 1, db->depth, none, none);
    if (rc == 0 && (w->branch_pages != db->branch_pages || w->leaf_pages != db->leaf_pages ||
                    w->overflow_pages != db->overflow_pages || w->entries != db->entries)) {
        char why[200];
        snprintf(why, sizeof why,
                 "the table's record counts %llu entries in %llu/%llu/%llu branch/leaf/overflow "
                 "pages, the tree holds %llu in %llu/%llu/%llu",
                 (ull)db->entries, (ull)db->branch_pages, (ull)db->leaf_pages,
                 (ull)db->overflow_pages, (ull)w->entries, (ull)w->branch_pages,
                 (ull)w->leaf_pages, (ull)w->overflow_pages);
        rc = walk_fault(w, db->root, 1, none, none, why);
    }
    if (own != NULL) {
        free(own);
        w->seen = NULL;
    }
    return rc;
}

/* ---- one key --------------------------------------------------------------- */

/* Where LSN `k` should lie in a leaf of n nodes of the log reached below
 * separator lo: the log's LSNs run without a gap, so at its distance from
 * that separator (one probe, where a binary search takes five; a compacted
 * front or damage only makes the guess miss).  n when there is no guess. */
static unsigned log_slot(int tree, const unsigned char *k, size_t klen, wbound lo, unsigned n)
{
    if (tree != BL_DB_LOG || klen != 8 || !lo.has || lo.n != 8)
        return n;
    uint64_t d = bl_get64be(k) - bl_get64be(lo.k); /* wraps past n when k < lo */
    return d < n ? (unsigned)d : n;
}

int bl_pc_search(const bl_pc_file *f, const bl_pc_db *db, int tree, const void *key,
                 size_t klen, int last, bl_pc_visit_fn visit, void *vctx,
                 const unsigned char **val, size_t *vlen, bl_pc_fault *fault)
{
    const unsigned char *k = key;
    wbound lo = {NULL, 0, 0}, hi = {NULL, 0, 0};
    uint64_t pg = db->root;
    char why[200];

    if (pg == BL_PC_INVALID)
        return BINDLOG_ENOTFOUND;
    for (unsigned level = 1;; level++) {
        const unsigned char *p;
        unsigned flags, n, upper, off, want = level == db->depth ? BL_PC_P_LEAF : BL_PC_P_BRANCH;

        if (level > db->depth || level > BL_PC_MAXDEPTH) {
            snprintf(why, sizeof why, "the tree is deeper than its record's depth %u",
                     db->depth);
            goto bad;
        }
        if (visit != NULL && visit(vctx, pg, want, why, sizeof why) != 0)
            goto bad;
        if (page_head(f, pg, tree, want, &p, &flags, &n, &upper, why, sizeof why) != 0)
            goto bad;
        if (flags == BL_PC_P_BRANCH) {
            /* LMDB's rule: the last child whose separator is <= key (the
             * first separator is never compared) */
            unsigned lo_i = last ? n : 1, hi_i = n, i;
            while (lo_i < hi_i) {
                unsigned mid = lo_i + (hi_i - lo_i) / 2;
                if (node_at(f, p, upper, mid, &off, why, sizeof why) != 0)
                    goto bad;
                if (cmp_keys(tree, p + off + BL_PC_NODE, bl_get16(p + off + 6), k, klen) <= 0)
                    lo_i = mid + 1;
                else
                    hi_i = mid;
            }
            i = lo_i - 1;
            if (node_at(f, p, upper, i, &off, why, sizeof why) != 0)
                goto bad;
            uint64_t child = branch_child(p, off);
            if (child < 2 || child >= f->npages || child == pg) {
                snprintf(why, sizeof why, "node %u points to page %llu, outside the file", i,
                         (ull)child);
                goto bad;
            }
            if (i > 0)
                lo = (wbound){p + off + BL_PC_NODE, bl_get16(p + off + 6), 1};
            if (i + 1 < n) {
                unsigned noff;
                if (node_at(f, p, upper, i + 1, &noff, why, sizeof why) != 0)
                    goto bad;
                hi = (wbound){p + noff + BL_PC_NODE, bl_get16(p + noff + 6), 1};
            }
            pg = child;
            continue;
        }
        /* a leaf: exact match */
        unsigned a = 0, b = n;
        if (last) {
            a = n - 1;
        } else if ((a = log_slot(tree, k, klen, lo, n)) < n &&
                   node_at(f, p, upper, a, &off, why, sizeof why) == 0 &&
                   cmp_keys(tree, p + off + BL_PC_NODE, bl_get16(p + off + 6), k, klen) == 0) {
            /* found at the first probe */
        } else {
            a = 0;
            while (a < b) {
                unsigned mid = a + (b - a) / 2;
                if (node_at(f, p, upper, mid, &off, why, sizeof why) != 0)
                    goto bad;
                int c = cmp_keys(tree, p + off + BL_PC_NODE, bl_get16(p + off + 6), k, klen);
                if (c == 0) {
                    a = mid;
                    break;
                }
                if (c < 0)
                    a = mid + 1;
                else
                    b = mid;
            }
            if (a >= n)
                return BINDLOG_ENOTFOUND;
        }
        if (node_at(f, p, upper, a, &off, why, sizeof why) != 0)
            goto bad;
        if (!last && cmp_keys(tree, p + off + BL_PC_NODE, bl_get16(p + off + 6), k, klen) != 0)
            return BINDLOG_ENOTFOUND;
        unsigned nf;
        if (leaf_data(f, p, off, a, tree, val, vlen, &nf, why, sizeof why) != 0)
            goto bad;
        return 0;
    bad:
        if (fault != NULL)
            fault_set(fault, pg, tree, level, lo.k, lo.n, lo.has, hi.k, hi.n, hi.has, why);
        return BINDLOG_ECORRUPT;
    }
}
