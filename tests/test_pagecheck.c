/*
 * test_pagecheck.c -- the LMDB page validator, and the guards that keep
 * LMDB away from damaged pages.
 *
 * Stores are damaged behind the library's back the way a disk, a copy or a
 * truncation would: a page zeroed, a node offset or key size changed, a
 * child pointer sent out of the file, the file cut short, a meta page's
 * transaction number changed.  Every case must give a clear error or a
 * check finding naming the page and table, never a crash (the suite also
 * runs under ASan/UBSan), and an undamaged store must pass everything.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bindlog.h"
#include "core/backend.h"
#include "core/record.h"
#include "lmdb/pagecheck.h"
#include "lmdb/walenv.h"
#include "testutil.h"

#define NKEYS 3000

typedef struct fx {
    char *tmp;
    char dir[1024];
} fx;

static void key_of(char *out, size_t cap, unsigned i)
{
    snprintf(out, cap, "agent:main:telegram:dm:%09u", i * 7919u % 1000000007u);
}

/* A store of NKEYS bound keys (depth 2-3 trees), closed. */
static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    bindlog *s;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_event ev[100];
    char keys[100][64], sids[100][32];

    f->tmp = tu_mkdtemp("pagecheck");
    snprintf(f->dir, sizeof(f->dir), "%s/store", f->tmp);
    o.durability = BINDLOG_DURABILITY_NONE;
    assert_int_equal(bindlog_open(&s, f->dir, &o), 0);
    for (unsigned b = 0; b < NKEYS / 100; b++) {
        for (unsigned i = 0; i < 100; i++) {
            key_of(keys[i], sizeof keys[i], b * 100 + i);
            snprintf(sids[i], sizeof sids[i], "s-%06u", b * 100 + i);
            memset(&ev[i], 0, sizeof ev[i]);
            ev[i].type = BINDLOG_EVENT_BIND;
            ev[i].key = keys[i];
            ev[i].session_id = sids[i];
            ev[i].expect = "";
        }
        assert_int_equal(bindlog_apply_batch(s, ev, 100, NULL, NULL), 0);
    }
    bindlog_close(s);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    tu_rmtree(f->tmp);
    free(f->tmp);
    free(f);
    return 0;
}

/* ---- the file, read with the validator itself ---------------------------------- */

typedef struct tfile {
    int fd;
    unsigned char *map;
    size_t size;
    bl_pc_file f;
    bl_pc_meta m[2];
    int cur;
} tfile;

static void tf_open(tfile *t, const char *dir)
{
    char path[1100];
    struct stat st;
    char why[240];
    int ok[2];

    snprintf(path, sizeof path, "%s/data.mdb", dir);
    t->fd = open(path, O_RDWR);
    assert_true(t->fd >= 0);
    assert_int_equal(fstat(t->fd, &st), 0);
    t->size = (size_t)st.st_size;
    t->map = mmap(NULL, t->size, PROT_READ, MAP_SHARED, t->fd, 0);
    assert_true(t->map != MAP_FAILED);
    for (unsigned s = 0; s < 2; s++)
        ok[s] = bl_pc_meta_read(t->map + s * 4096, 4096, s, &t->m[s], why, sizeof why);
    t->cur = bl_pc_meta_pick(t->m, ok, why, sizeof why);
    assert_true(t->cur >= 0);
    t->f.map = t->map;
    t->f.psize = t->m[t->cur].psize;
    t->f.npages = t->size / t->f.psize;
    t->f.last_pg = t->m[t->cur].last_pg;
}

static void tf_close(tfile *t)
{
    munmap(t->map, t->size);
    close(t->fd);
}

/* The database record of a table, from the MAIN database. */
static void tf_table(tfile *t, int table, bl_pc_db *db)
{
    const unsigned char *v;
    size_t vn;
    const char *name = bl_pc_tree_name(table);
    assert_int_equal(bl_pc_search(&t->f, &t->m[t->cur].dbs[1], BL_PC_MAIN, name, strlen(name), 0,
                                  NULL, NULL, &v, &vn, NULL),
                     0);
    assert_int_equal(vn, BL_PC_DBREC);
    bl_pc_db_decode(v, db);
}

typedef struct path_rec {
    uint64_t pg[BL_PC_MAXDEPTH];
    unsigned n;
} path_rec;

static int record_path(void *ctx, uint64_t pgno, unsigned want, char *why, size_t cap)
{
    path_rec *p = ctx;
    (void)want;
    (void)why;
    (void)cap;
    p->pg[p->n++] = pgno;
    return 0;
}

/* The pages from the root of `table` to the leaf holding key. */
static void tf_path(tfile *t, int table, const void *key, size_t len, path_rec *p)
{
    bl_pc_db db;
    const unsigned char *v;
    size_t vn;
    tf_table(t, table, &db);
    memset(p, 0, sizeof *p);
    assert_int_equal(bl_pc_search(&t->f, &db, table, key, len, 0, record_path, p, &v, &vn, NULL),
                     0);
    assert_true(p->n >= 1);
}

static void poke(tfile *t, uint64_t off, const void *bytes, size_t n)
{
    assert_int_equal(pwrite(t->fd, bytes, n, (off_t)off), (ssize_t)n);
}

static void poke16(tfile *t, uint64_t off, uint16_t v)
{
    unsigned char b[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    poke(t, off, b, 2);
}

static bindlog *open_ro(const char *dir, int *rc)
{
    bindlog *s = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.read_only = 1;
    *rc = bindlog_open(&s, dir, &o);
    return s;
}

/* ---- an undamaged store passes everything -------------------------------------- */

static void pagecheck__pristine_store_passes(void **state)
{
    fx *f = *state;
    tfile t;
    bindlog *s;
    bindlog_check_report rep;
    int rc;

    /* every tree walks clean and its counts match LMDB's own */
    tf_open(&t, f->dir);
    for (int table = 0; table < BL_DB_COUNT; table++) {
        bl_pc_db db;
        bl_pc_walk w;
        tf_table(&t, table, &db);
        memset(&w, 0, sizeof w);
        w.f = &t.f;
        w.tree = table;
        assert_int_equal(bl_pc_walk_tree(&w, &db), 0);
        assert_int_equal(w.entries, db.entries);
        assert_int_equal(w.leaf_pages, db.leaf_pages);
    }
    bl_pc_db hist;
    tf_table(&t, BL_DB_LOG, &hist);
    assert_true(hist.depth >= 2); /* the test exercises branch pages */
    tf_close(&t);

    s = open_ro(f->dir, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 0);
    bindlog_close(s);
}

/* Our search finds exactly what LMDB's mdb_get finds, present or absent. */
static void pagecheck__search_agrees_with_lmdb(void **state)
{
    fx *f = *state;
    tfile t;
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    bl_pc_db db;

    tf_open(&t, f->dir);
    tf_table(&t, BL_DB_BINDINGS, &db);
    assert_int_equal(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 16);
    assert_int_equal(mdb_env_open(env, f->dir, MDB_RDONLY, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "bindings", 0, &dbi), 0);
    for (unsigned i = 0; i < NKEYS + 200; i++) {
        char key[64];
        MDB_val k, v;
        const unsigned char *pv;
        size_t pn;
        key_of(key, sizeof key, i);
        if (i % 3 == 0)
            key[strlen(key) - 1] ^= 1; /* a neighbour of a stored key */
        k = (MDB_val){strlen(key), key};
        int lrc = mdb_get(txn, dbi, &k, &v);
        int prc = bl_pc_search(&t.f, &db, BL_DB_BINDINGS, key, strlen(key), 0, NULL, NULL, &pv,
                               &pn, NULL);
        assert_int_equal(lrc == 0, prc == 0);
        if (lrc == 0) {
            assert_int_equal(pn, v.mv_size);
            assert_ptr_equal(pn ? memcmp(pv, v.mv_data, pn) : 0, 0);
        } else {
            assert_int_equal(prc, BINDLOG_ENOTFOUND);
        }
    }
    mdb_txn_abort(txn);
    mdb_env_close(env);
    tf_close(&t);
}

/* ---- the page validator on its own ------------------------------------------------ */

static void pagecheck__page_fields(void **state)
{
    fx *f = *state;
    tfile t;
    path_rec p;
    char why[240], key[64];
    unsigned char save[4096];

    key_of(key, sizeof key, 17);
    tf_open(&t, f->dir);
    tf_path(&t, BL_DB_BINDINGS, key, strlen(key), &p);
    uint64_t leaf = p.pg[p.n - 1], root = p.pg[0], off = leaf * t.f.psize;
    memcpy(save, t.map + off, sizeof save);
    assert_int_equal(bl_pc_page_check(&t.f, leaf, BL_DB_BINDINGS, BL_PC_P_LEAF, why, sizeof why),
                     0);

    struct {
        size_t at;
        uint16_t v;
        const char *says;
    } cases[] = {
        {0, 7, "header says it is page 7"},          /* pgno */
        {10, 0, "page of zeros"},                     /* flags */
        {10, BL_PC_P_BRANCH, "depth needs a leaf"},  /* a branch where a leaf must be */
        {12, 15, "impossible"},                       /* lower odd */
        {14, 5000, "impossible"},                     /* upper past the page */
        {16, 4095, "outside the node area"},          /* node 0 offset */
        {16, 17, "outside the node area"},            /* node 0 inside the header */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        poke16(&t, off + cases[i].at, cases[i].v);
        assert_int_equal(
            bl_pc_page_check(&t.f, leaf, BL_DB_BINDINGS, BL_PC_P_LEAF, why, sizeof why), -1);
        if (strstr(why, cases[i].says) == NULL)
            fail_msg("case %zu: '%s' does not say '%s'", i, why, cases[i].says);
        poke(&t, off, save, sizeof save);
    }

    /* node 0's key size and data size, and its flags */
    unsigned n0 = bl_get16(save + 16);
    poke16(&t, off + n0 + 6, 4000);
    assert_int_equal(bl_pc_page_check(&t.f, leaf, BL_DB_BINDINGS, 0, why, sizeof why), -1);
    assert_non_null(strstr(why, "key of 4000 bytes runs past"));
    poke(&t, off, save, sizeof save);
    poke16(&t, off + n0 + 2, 0x100); /* data size + 16 MiB */
    assert_int_equal(bl_pc_page_check(&t.f, leaf, BL_DB_BINDINGS, 0, why, sizeof why), -1);
    assert_non_null(strstr(why, "runs past the end of the page"));
    poke(&t, off, save, sizeof save);
    poke16(&t, off + n0 + 4, BL_PC_F_DUPDATA);
    assert_int_equal(bl_pc_page_check(&t.f, leaf, BL_DB_BINDINGS, 0, why, sizeof why), -1);
    assert_non_null(strstr(why, "flags 0x4"));
    poke(&t, off, save, sizeof save);
    poke16(&t, off + n0 + 4, BL_PC_F_BIGDATA); /* its "overflow page" is the key's bytes */
    assert_int_equal(bl_pc_page_check(&t.f, leaf, BL_DB_BINDINGS, 0, why, sizeof why), -1);
    assert_non_null(strstr(why, "overflow"));
    poke(&t, off, save, sizeof save);

    /* two nodes swapped: out of order */
    unsigned char sw[4] = {save[18], save[19], save[16], save[17]};
    poke(&t, off + 16, sw, 4);
    assert_int_equal(bl_pc_page_check(&t.f, leaf, BL_DB_BINDINGS, 0, why, sizeof why), -1);
    assert_non_null(strstr(why, "out of key order"));
    poke(&t, off, save, sizeof save);

    /* a branch child outside the file, and pointing to itself */
    if (p.n > 1) {
        uint64_t roff = root * t.f.psize;
        unsigned char rsave[4096];
        memcpy(rsave, t.map + roff, sizeof rsave);
        unsigned c1 = bl_get16(rsave + 18);
        poke16(&t, roff + c1 + 2, 0x7fff); /* child's high 16 bits */
        assert_int_equal(bl_pc_page_check(&t.f, root, BL_DB_BINDINGS, 0, why, sizeof why), -1);
        assert_non_null(strstr(why, "outside the file"));
        poke(&t, roff, rsave, sizeof rsave);
        unsigned char self[6] = {(unsigned char)root, (unsigned char)(root >> 8), 0, 0, 0, 0};
        poke(&t, roff + c1, self, 6);
        assert_int_equal(bl_pc_page_check(&t.f, root, BL_DB_BINDINGS, 0, why, sizeof why), -1);
        poke(&t, roff, rsave, sizeof rsave);
    }
    assert_int_equal(bl_pc_page_check(&t.f, leaf, BL_DB_BINDINGS, 0, why, sizeof why), 0);
    tf_close(&t);
}

/* A child pointer to another subtree's page: the walk sees a page twice. */
static void pagecheck__walk_finds_shared_page(void **state)
{
    fx *f = *state;
    tfile t;
    bl_pc_db db;
    bl_pc_walk w;

    tf_open(&t, f->dir);
    tf_table(&t, BL_DB_LOG, &db);
    uint64_t roff = db.root * t.f.psize;
    unsigned c0 = bl_get16(t.map + roff + 16), c1 = bl_get16(t.map + roff + 18);
    unsigned char child0[6];
    memcpy(child0, t.map + roff + c0, 6);
    poke(&t, roff + c1, child0, 6); /* children 0 and 1 are one page */
    memset(&w, 0, sizeof w);
    w.f = &t.f;
    w.tree = BL_DB_LOG;
    assert_int_equal(bl_pc_walk_tree(&w, &db), BINDLOG_ECORRUPT);
    char msg[400];
    bl_pc_fault_format(&w.first, msg, sizeof msg);
    assert_non_null(strstr(msg, "table log"));
    assert_true(strstr(msg, "reached twice") != NULL || strstr(msg, "outside the range") != NULL);
    tf_close(&t);
}

/* ---- the library on damaged files --------------------------------------------------- */

/* A zeroed log leaf: check reports it with its LSNs; dump --log and the
 * digest refuse with ECORRUPT; reads elsewhere go on. */
static void pagecheck__zeroed_log_page(void **state)
{
    fx *f = *state;
    tfile t;
    path_rec p;
    unsigned char kb[8], zero[4096] = {0};
    bindlog *s;
    bindlog_check_report rep;
    bindlog_binding b;
    bindlog_iter *it;
    bindlog_record rec;
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    char key[64];
    int rc;

    bl_put64be(kb, 1500);
    tf_open(&t, f->dir);
    tf_path(&t, BL_DB_LOG, kb, 8, &p);
    assert_true(p.n >= 2);
    poke(&t, p.pg[p.n - 1] * t.f.psize, zero, sizeof zero);
    tf_close(&t);

    s = open_ro(f->dir, &rc);
    assert_int_equal(rc, 0); /* open reads meta and roots only */
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_true(rep.problems >= 1);
    assert_non_null(strstr(rep.message, "of table log (LSNs "));
    assert_non_null(strstr(rep.message, "page of zeros"));
    assert_true(rep.first_bad_lsn > 0 && rep.first_bad_lsn <= 1500);

    assert_int_equal(bindlog_log_iter(s, 1, UINT64_MAX, &it), BINDLOG_ECORRUPT);
    assert_non_null(strstr(bindlog_last_error(), "bindlog recover"));
    assert_non_null(strstr(bindlog_last_error(), "table log"));
    /* a range that stays clear of the page still reads */
    assert_int_equal(bindlog_log_iter(s, 2990, UINT64_MAX, &it), 0);
    assert_int_equal(bindlog_iter_next_record(it, &rec), 1);
    bindlog_iter_close(it);
    /* the state tables are intact, but sessions kept as references to the
     * records of that page (format 5) cannot be read whole: the digest
     * says so, naming the page; bindings still read */
    assert_int_equal(bindlog_digest(s, dg, NULL), BINDLOG_ECORRUPT);
    assert_non_null(strstr(bindlog_last_error(), "table log"));
    key_of(key, sizeof key, 5);
    assert_int_equal(bindlog_get(s, key, &b), 0);
    bindlog_close(s);
}

/* A damaged bindings leaf: a get through it is ECORRUPT naming the page,
 * other keys read; once the store walk has found it, every write is
 * refused with the damage named and nothing written (a write elsewhere could still free a page the damage
 * references, or reuse one the free list names wrongly). */
static void pagecheck__damaged_bindings_leaf(void **state)
{
    fx *f = *state;
    tfile t;
    path_rec p, q;
    bindlog *s;
    bindlog_binding b;
    bindlog_result r;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    char key[64], other[64];

    key_of(key, sizeof key, 1234);
    tf_open(&t, f->dir);
    tf_path(&t, BL_DB_BINDINGS, key, strlen(key), &p);
    uint64_t leaf = p.pg[p.n - 1];
    unsigned i;
    for (i = 0; i < NKEYS; i++) {
        key_of(other, sizeof other, i);
        tf_path(&t, BL_DB_BINDINGS, other, strlen(other), &q);
        if (q.pg[q.n - 1] != leaf)
            break;
    }
    assert_true(i < NKEYS);
    /* every node's offset of the leaf points past the page */
    unsigned n = (bl_get16(t.map + leaf * t.f.psize + 12) - 16) / 2;
    for (unsigned j = 0; j < n; j++)
        poke16(&t, leaf * t.f.psize + 16 + 2 * j, 65534);
    tf_close(&t);

    o.durability = BINDLOG_DURABILITY_NONE;
    assert_int_equal(bindlog_open(&s, f->dir, &o), 0);
    assert_int_equal(bindlog_get(s, key, &b), BINDLOG_ECORRUPT);
    char want[64];
    snprintf(want, sizeof want, "page %llu of table bindings", (unsigned long long)leaf);
    if (strstr(bindlog_last_error(), want) == NULL)
        fail_msg("'%s' does not name '%s'", bindlog_last_error(), want);
    assert_int_equal(bindlog_get(s, other, &b), 0);

    uint64_t head;
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    /* writes are refused once the whole-store walk that a writable open
     * starts has found the damage; a write that comes before its verdict
     * and reads no damaged page goes to the log only, never into data.mdb
     * (test_wal_pagewalk and the walk case of tests/faults) */
    bl_ckpt_walk_settle(s->e);
    assert_int_equal(bindlog_wait(s, 0, 0, &head), 0);
    assert_int_equal(bindlog_bind(s, key, "new-session", NULL, NULL, NULL, 0, &r),
                     BINDLOG_ECORRUPT);
    assert_non_null(strstr(bindlog_last_error(), "table bindings"));
    assert_int_equal(bindlog_bind(s, other, "new-session-2", NULL, NULL, NULL, 0, &r),
                     BINDLOG_ECORRUPT);
    assert_non_null(strstr(bindlog_last_error(), want));
    uint64_t after;
    assert_int_equal(bindlog_wait(s, 0, 0, &after), 0);
    assert_int_equal(after, head); /* nothing was written */
    assert_int_equal(bindlog_get(s, other, &b), 0);
    assert_int_equal(bindlog_digest(s, dg, NULL), BINDLOG_ECORRUPT);
    bindlog_close(s);
}

/* The bytes of data.mdb up to its last page that is not free: a cut beyond
 * them takes only pages LMDB's free list holds (a checkpoint's settling
 * commit frees the last pages the checkpoint wrote), which nothing reads
 * and the next commit may write again. */
static off_t used_length(const char *dir)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_cursor *c;
    MDB_val k, v;
    MDB_envinfo info;
    MDB_stat st;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 16), 0);
    assert_int_equal(mdb_env_open(env, dir, MDB_RDONLY, 0600), 0);
    assert_int_equal(mdb_env_info(env, &info), 0);
    assert_int_equal(mdb_env_stat(env, &st), 0);
    size_t npg = info.me_last_pgno + 1;
    unsigned char *is_free = calloc(npg, 1);
    assert_non_null(is_free);
    assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_cursor_open(txn, 0, &c), 0);
    while (mdb_cursor_get(c, &k, &v, MDB_NEXT) == 0) {
        const size_t *idl = v.mv_data; /* count, then the page numbers */
        for (size_t i = 1; i <= idl[0]; i++)
            if (idl[i] < npg)
                is_free[idl[i]] = 1;
    }
    mdb_cursor_close(c);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    size_t keep = npg;
    while (keep > 2 && is_free[keep - 1])
        keep--;
    free(is_free);
    return (off_t)keep * st.ms_psize;
}

/* A cut file: open refuses it with ECORRUPT, a message that says truncated
 * and names recover; so does every length down to the meta pages, unless
 * the cut takes free pages only. */
static void pagecheck__truncated_file(void **state)
{
    fx *f = *state;
    char path[1100];
    struct stat st;
    bindlog *s;
    int rc;

    snprintf(path, sizeof path, "%s/data.mdb", f->dir);
    assert_int_equal(stat(path, &st), 0);
    off_t used = used_length(f->dir);
    for (off_t len = st.st_size - 4096; len > 0; len -= len > 65536 ? 61440 + 4093 : 4093) {
        assert_int_equal(truncate(path, len), 0);
        s = open_ro(f->dir, &rc);
        if (rc == 0) {
            /* only a cut within pages nothing reads may open: then the
             * scans must still refuse what they cannot read */
            bindlog_check_report rep;
            assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
            if (len < used)
                assert_true(rep.problems > 0);
            bindlog_close(s);
            continue;
        }
        assert_true(rc == BINDLOG_ECORRUPT || rc == BINDLOG_ENOTSTORE);
        if (rc == BINDLOG_ECORRUPT && len > 8192 &&
            strstr(bindlog_last_error(), "truncated") == NULL &&
            strstr(bindlog_last_error(), "outside the file") == NULL)
            fail_msg("length %lld: '%s'", (long long)len, bindlog_last_error());
    }
}

/* The meta pages: a transaction number that breaks the alternation, and a
 * root out of the file, are refused at open. */
static void pagecheck__meta_pages(void **state)
{
    fx *f = *state;
    tfile t;
    bindlog *s;
    unsigned char save[152];
    int rc;

    tf_open(&t, f->dir);
    int cur = t.cur;
    uint64_t moff = (uint64_t)cur * t.f.psize;
    memcpy(save, t.map + moff, sizeof save);

    /* txnid + 2: same parity, no longer consecutive */
    unsigned char tx[8];
    uint64_t txn = t.m[cur].txnid + 2;
    for (int i = 0; i < 8; i++)
        tx[i] = (unsigned char)(txn >> (8 * i));
    poke(&t, moff + 16 + 136 - 8, tx, 8);
    s = open_ro(f->dir, &rc);
    assert_null(s);
    assert_int_equal(rc, BINDLOG_ECORRUPT);
    assert_non_null(strstr(bindlog_last_error(), "not consecutive"));
    poke(&t, moff, save, sizeof save);

    /* MAIN's root past the end of the file */
    unsigned char root[8] = {0xff, 0xff, 0xff, 0, 0, 0, 0, 0};
    poke(&t, moff + 16 + 24 + 48 + 40, root, 8);
    s = open_ro(f->dir, &rc);
    assert_null(s);
    assert_int_equal(rc, BINDLOG_ECORRUPT);
    assert_non_null(strstr(bindlog_last_error(), "root page"));
    poke(&t, moff, save, sizeof save);

    s = open_ro(f->dir, &rc);
    assert_int_equal(rc, 0);
    bindlog_close(s);
    tf_close(&t);
}

/* Hundreds of random single-byte changes anywhere in the file: open,
 * check, a get, the digest and a full dump of the log never crash, and
 * check never passes a store whose digest changed. */
static void pagecheck__random_flips_never_crash(void **state)
{
    fx *f = *state;
    tfile t;
    uint64_t rng = 16;
    unsigned char good[BINDLOG_DIGEST_SIZE];
    bindlog *s;
    int rc;

    s = open_ro(f->dir, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(bindlog_digest(s, good, NULL), 0);
    bindlog_close(s);
    tf_open(&t, f->dir);
    for (int n = 0; n < 150; n++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        uint64_t off = (rng >> 20) % t.size;
        unsigned char old = t.map[off], x = (unsigned char)(1 + (rng >> 8) % 255), nb = old ^ x;
        poke(&t, off, &nb, 1);

        s = open_ro(f->dir, &rc);
        if (rc == 0) {
            bindlog_check_report rep;
            bindlog_binding b;
            bindlog_iter *it;
            bindlog_record rec;
            unsigned char dg[BINDLOG_DIGEST_SIZE];
            char key[64];
            key_of(key, sizeof key, (unsigned)(rng % NKEYS));
            rc = bindlog_get(s, key, &b);
            assert_true(rc == 0 || rc == BINDLOG_ECORRUPT || rc == BINDLOG_ENOTFOUND);
            if (bindlog_log_iter(s, 1, UINT64_MAX, &it) == 0) {
                while (bindlog_iter_next_record(it, &rec) == 1)
                    ;
                bindlog_iter_close(it);
            }
            rc = bindlog_check(s, &rep, NULL, NULL);
            assert_true(rc == 0 || rc == BINDLOG_ECORRUPT);
            if (rc == 0 && rep.problems == 0) {
                assert_int_equal(bindlog_digest(s, dg, NULL), 0);
                assert_memory_equal(dg, good, sizeof dg);
            }
            bindlog_close(s);
        } else {
            assert_true(rc == BINDLOG_ECORRUPT || rc == BINDLOG_ENOTSTORE ||
                        rc == BINDLOG_EVERSION);
        }
        poke(&t, off, &old, 1);
    }
    tf_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(pagecheck__pristine_store_passes, setup, teardown),
        cmocka_unit_test_setup_teardown(pagecheck__search_agrees_with_lmdb, setup, teardown),
        cmocka_unit_test_setup_teardown(pagecheck__page_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(pagecheck__walk_finds_shared_page, setup, teardown),
        cmocka_unit_test_setup_teardown(pagecheck__zeroed_log_page, setup, teardown),
        cmocka_unit_test_setup_teardown(pagecheck__damaged_bindings_leaf, setup, teardown),
        cmocka_unit_test_setup_teardown(pagecheck__truncated_file, setup, teardown),
        cmocka_unit_test_setup_teardown(pagecheck__meta_pages, setup, teardown),
        cmocka_unit_test_setup_teardown(pagecheck__random_flips_never_crash, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
