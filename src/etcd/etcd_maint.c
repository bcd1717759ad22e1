/*
 * etcd_maint.c -- check, replay, compaction, export and import of a store
 * on etcd (the etcd backend's maintenance operations; etcd_store.h).
 *
 * The one idea: a MIRROR.  Every table of the etcd store is copied, at one
 * etcd revision, byte for byte into a scratch LMDB store under $TMPDIR (or
 * /tmp): bindings, sessions, children, base image and meta values keep their
 * names and bytes; log and history keys change only their LSN spelling
 * (20 decimal digits on etcd, big-endian u64 on LMDB), which keeps the order.
 * The mirror then IS the etcd store at that revision, for the LMDB code that
 * already knows how to verify, replay and stream a store:
 *
 *   export  = mirror, then the LMDB export of the mirror: the same stream,
 *             byte for byte, as an LMDB store with the same contents writes
 *             (so stores move between backends with export and import);
 *   check   = mirror, then the LMDB check of the mirror: checksums, LSN
 *             density, base image, every record re-derived by the state
 *             machine, the tables and indexes compared with the replay, the
 *             counters, digest(replay) == digest(state); keys on etcd that
 *             cannot be mirrored (an LSN that is not 20 digits) are problems
 *             of their own, reported first;
 *   replay  = mirror, then the LMDB replay of the mirror into out_dir, up to
 *             to_lsn / to_time_ms, with LMDB's semantics and errors.
 *
 * The price is a scratch copy of the store on local disk (removed before
 * returning) and one pass over it; memory stays bounded (one page of
 * BL_ES_PAGE keys at a time).  A read at the mirror's revision that etcd has
 * compacted away meanwhile (a concurrent bindlog_compact) is BINDLOG_EBUSY:
 * try again.
 *
 * Compaction folds the records below the cut into the base image tables
 * ('B', 'S') in bounded Txns.  Each Txn carries one chunk of records: the
 * base image values of the keys and sessions those records touch (computed
 * by compacting the mirror up to the chunk's end with the LMDB code), the
 * new meta "base", "base_time", "base_counts", and the deletion of the
 * chunk's log records, guarded by a compare on meta "base" so that two
 * compactions cannot interleave.  Each Txn leaves a consistent (base image,
 * base meta, log) triple.  Writers never touch the base image, the base
 * meta or records below the head, so they run on undisturbed.  Finally etcd
 * compacts its history below the revision of the last Txn (the space the
 * old versions held is reclaimed by etcd's defragmentation, an operator's
 * job).
 *
 * Import is all or nothing in two phases.
 *   1. Stage and verify, touching nothing on etcd: the stream is spooled to
 *      a scratch file and imported by the LMDB code into a scratch store --
 *      an empty one for a full stream (after checking that the etcd store
 *      is empty: else BINDLOG_EEXIST at offset 0), the mirror of the etcd
 *      store for an incremental one.  Every check of the stream format
 *      (frames, checksums, re-derivation of every record, the trailer's
 *      digest) happens here, with LMDB's error codes and offsets; a refused
 *      stream leaves the etcd store untouched.
 *   2. Commit: the difference between the scratch store and the etcd store
 *      at the revision read is written.  When it fits one Txn (at most
 *      max_txn_ops - 8 puts and IMPORT_TXN_BYTES bytes, the usual case of an
 *      incremental stream), it is one Txn guarded by meta "head"'s and
 *      "base"'s mod revisions: atomic.  A larger FULL import (moving a store
 *      into etcd) is fenced: one Txn creates meta "import" (a token) and
 *      rewrites meta "head" unchanged, so that writers whose reads came
 *      before fail their compare and re-read (they stay out for the whole
 *      import only if the backend's commit refuses while meta "import"
 *      exists; readers may see part of the image until the end); then
 *      bounded Txns, each guarded by the token, write the image, the log
 *      and the indexes; the last one writes the meta records and deletes
 *      meta "import".  Until then meta "head" says the store is empty.  If
 *      a Txn fails, the written keys are deleted again (the store was
 *      empty) and the marker removed; if even that fails (etcd gone),
 *      meta "import" stays and every later import or write says
 *      BINDLOG_EBUSY until an operator removes the prefix (`etcdctl del
 *      --prefix PREFIX/`) and imports again.  An incremental stream too
 *      large for one Txn is refused with BINDLOG_ENOSPC before anything is
 *      written: ship increments more often, or raise etcd's --max-txn-ops.
 */
#define _GNU_SOURCE
#include "etcd/etcd_store.h"
#include "lmdb/limits.h"
#include "maint/maint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Raw key + value bytes per import or compaction Txn: far below etcd's
 * default --max-request-bytes (1.5 MiB) after base64 and JSON. */
#define IMPORT_TXN_BYTES ((size_t)512 << 10)

/* ---- the mirror --------------------------------------------------------------- */

/* A key on etcd that has no LMDB spelling (check reports it). */
typedef void (*bad_key_fn)(void *ctx, int table, const unsigned char *name, size_t len);

typedef struct mirror {
    char *dir;          /* scratch directory (the store is dir/store) */
    bindlog *h;         /* the scratch LMDB store */
    bl_es_meta meta;    /* the etcd store's meta at `revision` */
    int64_t revision;
    uint64_t bad;       /* keys that could not be mirrored */
    /* etcd's children entries of sessions created after the base image,
     * which an LMDB store of format 6 or 7 links through its sessions instead
     * (mirror_link): found (and taken out of the mirror's children table),
     * and how many there should be */
    uint64_t kids_found, kids_expected;
} mirror;

static const int mirror_tables[] = {BL_ES_BINDINGS, BL_ES_SESSIONS, BL_ES_CHILDREN,
                                    BL_ES_HISTORY, BL_ES_LOG, BL_ES_BASE_BINDINGS,
                                    BL_ES_BASE_SESSIONS, BL_ES_META};

static int lmdb_db_of(int table)
{
    switch (table) {
    case BL_ES_BINDINGS: return BL_DB_BINDINGS;
    case BL_ES_SESSIONS: return BL_DB_SESSIONS;
    case BL_ES_CHILDREN: return BL_DB_CHILDREN;
    case BL_ES_HISTORY: return BL_DB_HISTORY;
    case BL_ES_LOG: return BL_DB_LOG;
    case BL_ES_BASE_BINDINGS: return BL_DB_BASE_BINDINGS;
    case BL_ES_BASE_SESSIONS: return BL_DB_BASE_SESSIONS;
    default: return BL_DB_META;
    }
}

/* The meta records a mirror carries (magic and format are the scratch
 * store's own; "import" is the etcd importer's marker). */
static int meta_mirrored(const unsigned char *name, size_t n)
{
    static const char *const names[] = {"head", "counts", "base", "base_time", "base_counts"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (n == strlen(names[i]) && memcmp(name, names[i], n) == 0)
            return 1;
    return 0;
}

/*
 * The LMDB key of an etcd table entry's name: out (room for 512 bytes),
 * *out_len.  0 = skip it, 1 = mapped, -1 = no LMDB spelling (bad).
 */
static int lmdb_key_of(int table, const unsigned char *name, size_t n, unsigned char *out,
                       size_t *out_len)
{
    uint64_t lsn;
    if (table == BL_ES_META)
        return meta_mirrored(name, n) ? (memcpy(out, name, n), *out_len = n, 1) : 0;
    if (table == BL_ES_LOG) {
        if (bl_es_lsn_parse(name, n, &lsn) != 0)
            return -1;
        bl_put64be(out, lsn);
        *out_len = 8;
        return 1;
    }
    if (table == BL_ES_HISTORY) {
        const unsigned char *z = n > BL_ES_LSN_DIGITS ? name + n - BL_ES_LSN_DIGITS - 1 : NULL;
        if (z == NULL || *z != 0 || bl_es_lsn_parse(z + 1, BL_ES_LSN_DIGITS, &lsn) != 0 ||
            (size_t)(z - name) + 9 > 511)
            return -1;
        memcpy(out, name, (size_t)(z - name) + 1);
        bl_put64be(out + (z - name) + 1, lsn);
        *out_len = (size_t)(z - name) + 9;
        return 1;
    }
    if (n == 0 || n > 511)
        return -1;
    memcpy(out, name, n);
    *out_len = n;
    return 1;
}

/*
 * The LMDB children key of an etcd children entry `parent 0x00 child`: be64
 * of the parent's created_lsn (read from the mirror's sessions, mirrored
 * before the children), then the child id.  1 = mapped, -1 = no LMDB
 * spelling: no separator, or a parent the sessions do not hold or hold
 * damaged (a bad key, which check reports as a problem of its own).
 */
static int lmdb_child_key_of(MDB_txn *txn, bl_env *e, const unsigned char *name, size_t n,
                             unsigned char *out, size_t *out_len)
{
    const unsigned char *z = n ? memchr(name, 0, n) : NULL;
    if (z == NULL || z == name || (size_t)(z - name) + 1 == n)
        return -1;
    size_t pl = (size_t)(z - name), cl = n - pl - 1;
    if (pl > BINDLOG_ID_MAX || cl > BINDLOG_ID_MAX)
        return -1;
    MDB_val pk = {pl, (void *)name}, pv;
    bl_sval sv;
    if (bl_get_checked(txn, e->dbi[BL_DB_SESSIONS], BL_DB_SESSIONS, &pk, &pv) != 0 ||
        bl_sval_decode(pv.mv_data, pv.mv_size, &sv) != 0)
        return -1;
    *out_len = bl_lchild_key(out, sv.created_lsn, z + 1, cl);
    return 1;
}

/* Put one page of etcd entries of `table` into the scratch store, in one
 * LMDB write transaction, growing the map and redoing it when full. */
static int mirror_page(mirror *m, bl_estore *st, int table, const bl_etcd_kvs *kvs,
                       bad_key_fn bad, void *bad_ctx)
{
    bl_env *e = m->h->e;
    unsigned char key[512];
    size_t kl;
    for (int attempt = 0;; attempt++) {
        MDB_txn *txn;
        int rc = bl_wtxn_begin(e, &txn), mrc = 0, full = 0;
        if (rc != 0)
            return rc;
        for (size_t i = 0; i < kvs->n && mrc == 0; i++) {
            size_t n;
            const unsigned char *name = bl_es_key_name(st, table, &kvs->kvs[i], &n);
            int k = name == NULL                ? 0
                    : table == BL_ES_CHILDREN ? lmdb_child_key_of(txn, e, name, n, key, &kl)
                                              : lmdb_key_of(table, name, n, key, &kl);
            if (k < 0 && attempt == 0) {
                m->bad++;
                if (bad != NULL)
                    bad(bad_ctx, table, name, n);
            }
            if (k <= 0)
                continue;
            MDB_val mk = {kl, key}, mv = {kvs->kvs[i].value_len, kvs->kvs[i].value};
            mrc = mdb_put(txn, e->dbi[lmdb_db_of(table)], &mk, &mv, 0);
        }
        if (mrc != 0) {
            bl_wtxn_abort(e, txn);
            if (mrc != MDB_MAP_FULL || attempt > 16)
                return bl_mdb_error(mrc);
            if ((rc = bl_env_resize(e, 0)) != 0)
                return rc;
            continue;
        }
        rc = bl_wtxn_commit(e, txn, &full);
        if (rc == BINDLOG_ENOSPC && full && attempt < 16 && bl_env_resize(e, 0) == 0)
            continue;
        return rc;
    }
}

/* The name of meta record `name` (for bl_es_get). */
static int meta_get(bl_estore *st, const char *name, int64_t revision, bl_etcd_kvs *kvs)
{
    return bl_es_get(st, BL_ES_META, name, strlen(name), revision, kvs);
}

static void mirror_close(mirror *m)
{
    bindlog_close(m->h);
    m->h = NULL;
    bl_scratch_remove(m->dir);
    free(m->dir);
    m->dir = NULL;
}

/* An empty scratch store in a new scratch directory. */
static int scratch_store(mirror *m)
{
    char path[4096];
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    memset(m, 0, sizeof(*m));
    if ((m->dir = bl_scratch_dir("etcd")) == NULL)
        return errno == ENOMEM ? BINDLOG_ENOMEM : BINDLOG_EIO;
    snprintf(path, sizeof path, "%s/store", m->dir);
    o.durability = BINDLOG_DURABILITY_NONE; /* scratch: never needs to survive a crash */
    int rc = bindlog_open(&m->h, path, &o);
    if (rc != 0) {
        rc = bl_err_nested(rc, "the local mirror of the store could not be made");
        mirror_close(m);
    }
    return rc;
}

/* The created_lsn of session id in the mirror (whole values), 0 if none. */
static uint64_t created_of(MDB_txn *txn, bl_env *e, const void *id, size_t n, bl_sval *sv)
{
    MDB_val k = {n, (void *)id}, v;
    if (n == 0 || bl_get_checked(txn, e->dbi[BL_DB_SESSIONS], BL_DB_SESSIONS, &k, &v) != 0 ||
        bl_sval_decode(v.mv_data, v.mv_size, sv) != 0)
        return 0;
    return sv->created_lsn;
}

/*
 * Make the mirror an LMDB store of format 6 or 7 (etcd keeps a children entry
 * for every child and no sibling chain): its sessions and base image get
 * the chain (bl_relink), and the children entries of sessions created
 * after the base image leave its children table, counted (kids_found)
 * against the sessions that should have one (kids_expected) for check.  An
 * entry whose child does not name that parent stays, for the LMDB check to
 * report.
 */
static int mirror_link_txn(mirror *m, MDB_txn *txn, int *full)
{
    bl_env *e = m->h->e;
    uint64_t base = m->meta.base_lsn;
    MDB_cursor *c;
    MDB_val k, v;
    int rc, mrc;

    m->kids_found = m->kids_expected = 0;
    if ((rc = bl_relink(e, txn, BL_DB_BASE_SESSIONS, full)) != 0 ||
        (rc = bl_relink(e, txn, BL_DB_SESSIONS, full)) != 0)
        return rc;
    if ((mrc = mdb_cursor_open(txn, e->dbi[BL_DB_CHILDREN], &c)) != 0)
        return bl_mdb_error(mrc);
    for (mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST); mrc == 0;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        bl_sval child, parent;
        if (k.mv_size <= 8)
            continue;
        uint64_t at = created_of(txn, e, (const unsigned char *)k.mv_data + 8, k.mv_size - 8,
                                 &child);
        if (at <= base)
            continue; /* the image's (or a child the sessions lack: check names it) */
        if (created_of(txn, e, child.parent, child.parent_len, &parent) !=
            bl_get64be(k.mv_data))
            continue; /* not that parent's child: check names it */
        m->kids_found++;
        if ((mrc = mdb_cursor_del(c, 0)) != 0)
            break;
    }
    mdb_cursor_close(c);
    if (mrc != 0 && mrc != MDB_NOTFOUND) {
        *full = mrc == MDB_MAP_FULL;
        return bl_mdb_error(mrc);
    }
    if ((mrc = mdb_cursor_open(txn, e->dbi[BL_DB_SESSIONS], &c)) != 0)
        return bl_mdb_error(mrc);
    for (mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST); mrc == 0;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        bl_sval sv, parent;
        if (bl_sval_decode(v.mv_data, v.mv_size, &sv) != 0 || sv.created_lsn <= base ||
            sv.parent_len == 0)
            continue;
        uint64_t p = created_of(txn, e, sv.parent, sv.parent_len, &parent);
        m->kids_expected += p != 0 && bl_child_indexed(sv.created_lsn, p);
    }
    mdb_cursor_close(c);
    return mrc == MDB_NOTFOUND ? 0 : bl_mdb_error(mrc);
}

/* Run fn in a write transaction of the scratch store e and commit it,
 * growing the map and running it again when full (*full set by fn). */
typedef int (*scratch_fn)(void *ctx, bl_env *e, MDB_txn *txn, int *full);

static int in_scratch_txn(bl_env *e, scratch_fn fn, void *ctx)
{
    for (int attempt = 0;; attempt++) {
        MDB_txn *txn;
        int full = 0, rc = bl_wtxn_begin(e, &txn);
        if (rc != 0)
            return rc;
        if ((rc = fn(ctx, e, txn, &full)) != 0) {
            bl_wtxn_abort(e, txn);
            if (!full || attempt > 16)
                return rc;
            if ((rc = bl_env_resize(e, 0)) != 0)
                return rc;
            continue;
        }
        rc = bl_wtxn_commit(e, txn, &full);
        if (rc == BINDLOG_ENOSPC && full && attempt < 16 && bl_env_resize(e, 0) == 0)
            continue;
        return rc;
    }
}

static int mirror_link_fn(void *ctx, bl_env *e, MDB_txn *txn, int *full)
{
    (void)e;
    return mirror_link_txn(ctx, txn, full);
}

static int mirror_link(mirror *m) { return in_scratch_txn(m->h->e, mirror_link_fn, m); }

/*
 * Mirror the store of etcd handle h at its latest revision into a new
 * scratch store.  Keys without an LMDB spelling go to bad() (or fail with
 * BINDLOG_ECORRUPT when bad is NULL).  On failure nothing is left.
 */
static int mirror_open(bindlog *h, mirror *m, bad_key_fn bad, void *bad_ctx,
                       bindlog_progress_fn progress, void *progress_ctx)
{
    bl_estore *st = bl_es_of(h);
    bl_ebuf b = {0}, end = {0};
    bl_etcd_kvs kvs = {0};
    uint64_t done = 0;
    int rc;

    if ((rc = scratch_store(m)) != 0)
        return rc;
    if ((rc = bl_es_meta_read(st, 0, &m->meta)) != 0)
        goto out;
    m->revision = m->meta.revision;
    for (size_t t = 0; t < sizeof(mirror_tables) / sizeof(mirror_tables[0]); t++) {
        int table = mirror_tables[t];
        if ((rc = bl_es_table_range(st, table, NULL, 0, &b, &end)) != 0)
            goto out;
        for (;;) {
            rc = bl_etcd_range(st->c, b.p, b.len, end.p, end.len, m->revision, BL_ES_PAGE, 0,
                               &kvs);
            if (rc != 0)
                goto out;
            if ((rc = mirror_page(m, st, table, &kvs, bad, bad_ctx)) != 0)
                goto out;
            if (bad == NULL && m->bad != 0) {
                rc = BINDLOG_ECORRUPT;
                goto out;
            }
            done += kvs.n;
            if (progress != NULL && kvs.n)
                progress(progress_ctx, done, 0);
            if (!kvs.more || kvs.n == 0)
                break;
            /* the next page starts just after the last key */
            const bl_etcd_kv *last = &kvs.kvs[kvs.n - 1];
            b.len = 0;
            if ((rc = bl_ebuf_append(&b, last->key, last->key_len)) != 0 ||
                (rc = bl_ebuf_append(&b, "", 1)) != 0)
                goto out;
            bl_etcd_kvs_free(&kvs);
        }
        bl_etcd_kvs_free(&kvs);
    }
    rc = mirror_link(m);
out:
    bl_etcd_kvs_free(&kvs);
    bl_ebuf_free(&b);
    bl_ebuf_free(&end);
    if (rc != 0)
        mirror_close(m);
    /* the mirror's revision was compacted away under us: try again */
    return rc == BL_ETCD_ECOMPACTED ? BINDLOG_EBUSY : rc;
}

/* ---- export, replay ------------------------------------------------------------ */

int bl_etcd_export(bindlog *h, uint64_t from_lsn, int fd, uint64_t *records,
                   bindlog_progress_fn fn, void *ctx)
{
    mirror m;
    if (records != NULL)
        *records = 0;
    int rc = mirror_open(h, &m, NULL, NULL, NULL, NULL);
    if (rc != 0)
        return rc;
    rc = bindlog_export(m.h, from_lsn, fd, records, fn, ctx);
    if (rc != 0)
        rc = bl_err_nested(rc, "exporting the local mirror");
    mirror_close(&m);
    return rc;
}

int bl_etcd_replay(bindlog *h, const char *out_dir, uint64_t to_lsn, int64_t to_time_ms,
                   unsigned char digest[BINDLOG_DIGEST_SIZE], uint64_t *last_lsn,
                   bindlog_progress_fn fn, void *ctx)
{
    mirror m;
    struct stat sb;
    DIR *d;
    /* refuse a used out_dir before copying the store (LMDB's replay would) */
    if (stat(out_dir, &sb) == 0) {
        struct dirent *de;
        int used = 0;
        if (!S_ISDIR(sb.st_mode))
            return BINDLOG_EEXIST;
        if ((d = opendir(out_dir)) != NULL) {
            while ((de = readdir(d)) != NULL)
                used |= strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
            closedir(d);
        }
        if (used)
            return BINDLOG_EEXIST;
    }
    int rc = mirror_open(h, &m, NULL, NULL, NULL, NULL);
    if (rc != 0)
        return rc;
    rc = bindlog_replay(m.h, out_dir, to_lsn, to_time_ms, digest, last_lsn, fn, ctx);
    if (rc != 0)
        rc = bl_err_nested(rc, "replaying the local mirror");
    mirror_close(&m);
    return rc;
}

/* ---- check ---------------------------------------------------------------------- */

typedef struct bad_keys {
    uint64_t n;
    char message[sizeof(((bindlog_check_report *)0)->message)];
    char key[BINDLOG_KEY_MAX + 1];
} bad_keys;

static void note_bad_key(void *ctx, int table, const unsigned char *name, size_t len)
{
    bad_keys *bk = ctx;
    if (bk->n++ != 0)
        return;
    char esc[160];
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < sizeof esc; i++)
        o += (size_t)snprintf(esc + o, sizeof esc - o, name[i] >= 0x20 && name[i] < 0x7f ? "%c"
                                                                                      : "\\x%02x",
                              name[i]);
    snprintf(bk->message, sizeof bk->message,
             "etcd key '%s' of table '%c' does not name an entry (bad LSN or length)", esc,
             table);
    size_t m = len < BINDLOG_KEY_MAX ? len : BINDLOG_KEY_MAX;
    memcpy(bk->key, name, m);
    bk->key[m] = '\0';
}

/* A problem of etcd's history index: the first one names the key. */
static void note_history(bad_keys *bk, const char *key, size_t kl, uint64_t lsn, const char *what)
{
    if (bk->n++ != 0)
        return;
    size_t m = kl < BINDLOG_KEY_MAX ? kl : BINDLOG_KEY_MAX;
    memcpy(bk->key, key, m);
    bk->key[m] = '\0';
    snprintf(bk->message, sizeof bk->message, "etcd history entry of key '%.200s' at LSN %llu %s",
             bk->key, (unsigned long long)lsn, what);
}

/*
 * etcd keeps a history index (key, LSN) beside the log; an LMDB store of
 * format 3 does not (each record chains its key's history), so the LMDB
 * check of the mirror would call every entry extra.  Check the index here
 * against the mirrored log instead: every entry names a record of its key,
 * and there are as many entries as records.  Then empty the mirror's
 * history table.
 */
static int check_history(mirror *m, bad_keys *bk)
{
    bl_env *e = m->h->e;
    MDB_txn *txn;
    MDB_cursor *c;
    MDB_val k, v;
    MDB_stat st;
    uint64_t entries = 0;
    int rc = bl_wtxn_begin(e, &txn), mrc, full = 0;
    if (rc != 0)
        return rc;
    if ((mrc = mdb_cursor_open(txn, e->dbi[BL_DB_HISTORY], &c)) != 0) {
        bl_wtxn_abort(e, txn);
        return bl_mdb_error(mrc);
    }
    for (mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST); mrc == 0;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        const char *key = k.mv_data;
        size_t kl = k.mv_size - 9; /* lmdb_key_of() spelt it: key 0x00 be64 */
        uint64_t lsn = bl_get64be((const unsigned char *)k.mv_data + kl + 1);
        unsigned char lk[8];
        MDB_val rk = {8, lk}, rv;
        bl_record r;
        entries++;
        bl_put64be(lk, lsn);
        int g = mdb_get(txn, e->dbi[BL_DB_LOG], &rk, &rv);
        if (g == MDB_NOTFOUND)
            note_history(bk, key, kl, lsn, "names no record of the log");
        else if (g != 0)
            break;
        else if (bl_record_decode(rv.mv_data, rv.mv_size, &r) == 0 &&
                 (r.key_len != kl || memcmp(r.key, key, kl) != 0))
            note_history(bk, key, kl, lsn, "names a record of another key");
        /* a record that does not decode: the LMDB check names it by LSN */
    }
    mdb_cursor_close(c);
    if (mrc != 0 && mrc != MDB_NOTFOUND) {
        bl_wtxn_abort(e, txn);
        return bl_mdb_error(mrc);
    }
    if ((mrc = mdb_stat(txn, e->dbi[BL_DB_LOG], &st)) == 0 && st.ms_entries != entries &&
        bk->n++ == 0)
        snprintf(bk->message, sizeof bk->message,
                 "etcd history index holds %llu entries for %llu log records",
                 (unsigned long long)entries, (unsigned long long)st.ms_entries);
    if (mrc == 0)
        mrc = mdb_drop(txn, e->dbi[BL_DB_HISTORY], 0);
    if (mrc != 0) {
        bl_wtxn_abort(e, txn);
        return bl_mdb_error(mrc);
    }
    return bl_wtxn_commit(e, txn, &full);
}

int bl_etcd_check(bindlog *h, bindlog_check_report *out, bindlog_progress_fn fn, void *ctx)
{
    mirror m;
    bad_keys bk;
    memset(&bk, 0, sizeof(bk));
    memset(out, 0, sizeof(*out));
    int rc = mirror_open(h, &m, note_bad_key, &bk, NULL, NULL);
    if (rc == BINDLOG_ECORRUPT || rc == BINDLOG_EVERSION || rc == BINDLOG_ENOTSTORE) {
        /* the meta records themselves: there is nothing to replay against */
        out->problems = 1;
        snprintf(out->message, sizeof out->message,
                 "etcd meta records \"magic\", \"format\", \"head\", \"counts\" or \"base\" "
                 "are damaged (%s)", bindlog_code_name(rc));
        return 0;
    }
    if (rc != 0)
        return rc;
    /* the children entries the mirror took out (mirror_link): one for every
     * session created after the base image under a parent of the store */
    if (m.kids_found != m.kids_expected && bk.n++ == 0)
        snprintf(bk.message, sizeof bk.message,
                 "etcd children index holds %llu entries for %llu sessions created after the "
                 "base image under a parent of the store",
                 (unsigned long long)m.kids_found, (unsigned long long)m.kids_expected);
    if ((rc = check_history(&m, &bk)) == 0)
        rc = bindlog_check(m.h, out, fn, ctx);
    if (rc < 0)
        rc = bl_err_nested(rc, "checking the local mirror");
    mirror_close(&m);
    if (rc == 0 && bk.n != 0) {
        /* keys the mirror could not carry come first */
        out->problems += bk.n;
        out->first_bad_lsn = 0;
        memcpy(out->first_bad_key, bk.key, sizeof bk.key);
        memcpy(out->message, bk.message, sizeof bk.message);
    }
    return rc;
}

/* ---- batches of Txn operations ---------------------------------------------------- */

/* Puts and deletes collected for one Txn, with their bytes owned here. */
typedef struct batch {
    bl_etcd_op *ops;
    bl_ebuf *keys, *vals;
    size_t n, cap, bytes;
} batch;

static void batch_clear(batch *b)
{
    b->n = 0;
    b->bytes = 0;
}

static void batch_free(batch *b)
{
    for (size_t i = 0; i < b->cap; i++) {
        bl_ebuf_free(&b->keys[i]);
        bl_ebuf_free(&b->vals[i]);
    }
    free(b->ops);
    free(b->keys);
    free(b->vals);
    memset(b, 0, sizeof(*b));
}

static int batch_init(batch *b, size_t cap)
{
    memset(b, 0, sizeof(*b));
    b->ops = calloc(cap, sizeof(*b->ops));
    b->keys = calloc(cap, sizeof(*b->keys));
    b->vals = calloc(cap, sizeof(*b->vals));
    b->cap = cap;
    if (b->ops == NULL || b->keys == NULL || b->vals == NULL) {
        batch_free(b);
        return BINDLOG_ENOMEM;
    }
    return 0;
}

/* Add a put (value != NULL) or a delete of [key, end) (value NULL; end
 * may be NULL for one key).  The key is given already built. */
static int batch_add(batch *b, const bl_ebuf *key, const bl_ebuf *end, const void *value,
                     size_t value_len)
{
    size_t i = b->n;
    int rc;
    if (i == b->cap)
        return BINDLOG_EINVAL;
    b->keys[i].len = b->vals[i].len = 0;
    if ((rc = bl_ebuf_append(&b->keys[i], key->p, key->len)) != 0)
        return rc;
    if (value != NULL) {
        if ((rc = bl_ebuf_append(&b->vals[i], value, value_len)) != 0)
            return rc;
    } else if (end != NULL && (rc = bl_ebuf_append(&b->vals[i], end->p, end->len)) != 0) {
        return rc;
    }
    b->ops[i] = (bl_etcd_op){.type = value != NULL ? BL_ETCD_OP_PUT : BL_ETCD_OP_DELETE,
                             .key = b->keys[i].p, .key_len = b->keys[i].len};
    if (value != NULL) {
        b->ops[i].value = b->vals[i].p;
        b->ops[i].value_len = value_len;
    } else if (end != NULL) {
        b->ops[i].range_end = b->vals[i].p;
        b->ops[i].range_end_len = b->vals[i].len;
    }
    b->n++;
    b->bytes += key->len + value_len;
    return 0;
}

/* Send a batch with compares; BINDLOG_EBUSY if they did not hold. */
static int batch_send(bl_estore *st, const bl_etcd_cmp *cmp, size_t ncmp, const batch *b,
                      int64_t *revision)
{
    bl_etcd_txn_result res = {0};
    int rc = bl_etcd_txn(st->c, cmp, ncmp, b->ops, b->n, NULL, 0, &res);
    if (rc == 0 && !res.succeeded)
        rc = BINDLOG_EBUSY;
    if (rc == 0 && revision != NULL)
        *revision = res.revision;
    bl_etcd_txn_result_free(&res);
    return bl_es_error(rc, BINDLOG_EBUSY);
}

/* ---- compaction ---------------------------------------------------------------------- */

/* Distinct (table, name) pairs a chunk of records touches: base image
 * entries to rewrite, and history entries (key, be64 LSN) to delete. */
typedef struct touched {
    int table[256];
    bl_ebuf name[256];
    size_t n;
} touched;

static int touch(touched *t, int table, const void *name, size_t len, size_t cap, int *full)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->table[i] == table && t->name[i].len == len && memcmp(t->name[i].p, name, len) == 0)
            return 0;
    if (t->n == cap) {
        *full = 1;
        return 0;
    }
    t->table[t->n] = table;
    t->name[t->n].len = 0;
    int rc = bl_ebuf_append(&t->name[t->n], name, len);
    if (rc == 0)
        t->n++;
    return rc;
}

/* Read one value of the scratch store (LMDB), copied into v.  0, or
 * BINDLOG_ENOTFOUND. */
static int scratch_get(bl_env *e, int db, const void *k, size_t kl, bl_ebuf *v)
{
    MDB_txn *txn;
    MDB_val mk = {kl, (void *)k}, mv;
    int rc = bl_read_begin(e, &txn);
    if (rc != 0)
        return rc;
    rc = mdb_get(txn, e->dbi[db], &mk, &mv);
    v->len = 0;
    if (rc == 0)
        rc = bl_ebuf_append(v, mv.mv_data, mv.mv_size);
    else
        rc = rc == MDB_NOTFOUND ? BINDLOG_ENOTFOUND : bl_mdb_error(rc);
    bl_read_end(e, txn);
    return rc;
}

int bl_etcd_compact_log(bindlog *h, uint64_t keep_from_lsn, uint64_t *removed,
                        bindlog_progress_fn fn, void *ctx)
{
    bl_estore *st = bl_es_of(h);
    mirror m;
    batch b;
    touched *t = NULL;
    bl_ebuf key = {0}, end = {0}, val = {0}, oldbase = {0};
    uint64_t gone = 0, cut, lsn;
    int64_t last_rev = 0, base_mod;
    size_t budget;
    int rc;

    if (removed != NULL)
        *removed = 0;
    if (h->read_only)
        return BINDLOG_EREADONLY;
    if ((rc = mirror_open(h, &m, NULL, NULL, NULL, NULL)) != 0)
        return rc;
    budget = bl_etcd_max_txn_ops(st->c);
    budget = budget > 256 ? 256 : budget;
    if ((rc = batch_init(&b, budget)) != 0 || (t = calloc(1, sizeof(*t))) == NULL) {
        rc = rc ? rc : BINDLOG_ENOMEM;
        goto out;
    }
    cut = keep_from_lsn > m.meta.head_lsn + 1 ? m.meta.head_lsn + 1 : keep_from_lsn;
    base_mod = m.meta.base_mod;
    lsn = m.meta.base_lsn + 1;
    while (lsn < cut) {
        /* a chunk: records lsn..stop-1 whose base image entries, 3 meta puts
         * and 1 delete fit one Txn */
        uint64_t stop = lsn;
        size_t bytes = 0;
        int full = 0;
        for (size_t i = 0; i < t->n; i++)
            t->name[i].len = 0;
        t->n = 0;
        while (stop < cut && !full) {
            unsigned char kb[8];
            bl_record rec;
            size_t before = t->n;
            bl_put64be(kb, stop);
            if ((rc = scratch_get(m.h->e, BL_DB_LOG, kb, 8, &val)) != 0 ||
                (rc = bl_record_decode(val.p, val.len, &rec)) != 0) {
                rc = rc == BINDLOG_ENOTFOUND ? BINDLOG_ECORRUPT : rc; /* check names it */
                goto out;
            }
            size_t room = budget - 4;
            unsigned char hn[BINDLOG_KEY_MAX + 8];
            memcpy(hn, rec.key, rec.key_len); /* its history entry goes too */
            bl_put64be(hn + rec.key_len, stop);
            if ((rc = touch(t, BL_ES_HISTORY, hn, rec.key_len + 8, room, &full)) ||
                (rc = touch(t, BL_ES_BASE_BINDINGS, rec.key, rec.key_len, room, &full)) ||
                (rec.sid_len &&
                 (rc = touch(t, BL_ES_BASE_SESSIONS, rec.sid, rec.sid_len, room, &full))) ||
                (rec.other_len &&
                 (rc = touch(t, BL_ES_BASE_SESSIONS, rec.other, rec.other_len, room, &full))))
                goto out;
            /* a session value is at most about a record's size plus its key */
            bytes += 3 * (val.len + 2 * BINDLOG_KEY_MAX);
            if (full || (bytes > IMPORT_TXN_BYTES && stop > lsn)) {
                for (size_t i = before; i < t->n; i++)
                    t->name[i].len = 0;
                t->n = before; /* this record goes to the next chunk */
                break;
            }
            stop++;
        }
        /* fold the chunk in the mirror, then ship what changed */
        if ((rc = bindlog_compact(m.h, stop, NULL, NULL, NULL)) != 0) {
            rc = bl_err_nested(rc, "compacting the local mirror");
            goto out;
        }
        batch_clear(&b);
        for (size_t i = 0; i < t->n; i++) {
            int db = t->table[i] == BL_ES_BASE_BINDINGS ? BL_DB_BASE_BINDINGS
                                                         : BL_DB_BASE_SESSIONS;
            if (t->table[i] == BL_ES_HISTORY) { /* key, be64 lsn: delete the entry */
                size_t kl = t->name[i].len - 8;
                if ((rc = bl_es_history_key(st, (const char *)t->name[i].p, kl,
                                            bl_get64be(t->name[i].p + kl), &key)) != 0 ||
                    (rc = batch_add(&b, &key, NULL, NULL, 0)) != 0)
                    goto out;
                continue;
            }
            if ((rc = scratch_get(m.h->e, db, t->name[i].p, t->name[i].len, &val)) != 0 ||
                (rc = bl_es_key(st, t->table[i], t->name[i].p, t->name[i].len, &key)) != 0 ||
                (rc = batch_add(&b, &key, NULL, val.p, val.len)) != 0)
                goto out;
        }
        static const char *const metas[] = {"base", "base_time", "base_counts"};
        for (size_t i = 0; i < 3; i++) {
            if ((rc = scratch_get(m.h->e, BL_DB_META, metas[i], strlen(metas[i]), &val)) != 0 ||
                (rc = bl_es_key(st, BL_ES_META, metas[i], strlen(metas[i]), &key)) != 0 ||
                (rc = batch_add(&b, &key, NULL, val.p, val.len)) != 0)
                goto out;
            if (i == 0) {
                oldbase.len = 0;
                bl_ebuf_append(&oldbase, key.p, key.len);
            }
        }
        bl_ebuf lo = {0}, hi = {0};
        if ((rc = bl_es_log_key(st, lsn, &lo)) == 0 && (rc = bl_es_log_key(st, stop, &hi)) == 0)
            rc = batch_add(&b, &lo, &hi, NULL, 0);
        bl_ebuf_free(&lo);
        bl_ebuf_free(&hi);
        if (rc != 0)
            goto out;
        /* nobody else moved the base since we read it */
        bl_etcd_cmp c = {.target = base_mod ? BL_ETCD_CMP_MOD : BL_ETCD_CMP_CREATE,
                         .result = BL_ETCD_EQUAL, .key = oldbase.p, .key_len = oldbase.len,
                         .number = base_mod};
        if ((rc = batch_send(st, &c, 1, &b, &last_rev)) != 0)
            goto out;
        base_mod = last_rev;
        gone += stop - lsn;
        lsn = stop;
        if (fn != NULL)
            fn(ctx, gone, cut - 1 - m.meta.base_lsn);
    }
    if (last_rev > 0) {
        /* drop etcd's history below the compaction: old record versions go */
        int crc = bl_etcd_compact(st->c, last_rev, 0);
        if (crc != 0 && crc != BL_ETCD_ECOMPACTED)
            rc = crc;
    }
out:
    if (removed != NULL)
        *removed = gone;
    if (t != NULL)
        for (size_t i = 0; i < 256; i++)
            bl_ebuf_free(&t->name[i]);
    free(t);
    batch_free(&b);
    bl_ebuf_free(&key);
    bl_ebuf_free(&end);
    bl_ebuf_free(&val);
    bl_ebuf_free(&oldbase);
    mirror_close(&m);
    return bl_es_error(rc, BINDLOG_EBUSY);
}

/* ---- import ---------------------------------------------------------------------------- */

/* Copy everything from fd to a new file `path`; its descriptor in *out. */
static int spool(int fd, const char *path, int *out)
{
    char *buf = malloc((size_t)1 << 20);
    int wfd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600), rc = 0;
    if (buf == NULL || wfd < 0) {
        rc = buf == NULL ? BINDLOG_ENOMEM : bl_mdb_error(errno);
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, buf, (size_t)1 << 20);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = bl_mdb_error(errno);
            goto out;
        }
        if (n == 0)
            break;
        for (ssize_t o = 0; o < n;) {
            ssize_t w = write(wfd, buf + o, (size_t)(n - o));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = w < 0 ? bl_mdb_error(errno) : BINDLOG_EIO;
                goto out;
            }
            o += w;
        }
    }
    if (lseek(wfd, 0, SEEK_SET) != 0)
        rc = bl_mdb_error(errno);
out:
    free(buf);
    if (rc != 0 && wfd >= 0) {
        close(wfd);
        wfd = -1;
    }
    *out = wfd;
    return rc;
}

/* 1 if the spooled stream's header is a valid full (IMAGE) stream header;
 * 0 otherwise (incremental, or damaged: the LMDB import will say how). */
static int is_full_stream(int fd)
{
    unsigned char hdr[32];
    ssize_t n = pread(fd, hdr, sizeof hdr, 0);
    return n == (ssize_t)sizeof hdr && memcmp(hdr, "BLSTREAM", 8) == 0 &&
           (bl_get32(hdr + 12) & 1u) != 0;
}

/* Number of keys of `table` at `revision`. */
static int table_count(bl_estore *st, int table, int64_t revision, int64_t *count)
{
    bl_ebuf b = {0}, e = {0};
    bl_etcd_kvs kvs = {0};
    int rc = bl_es_table_range(st, table, NULL, 0, &b, &e);
    if (rc == 0)
        rc = bl_etcd_range(st->c, b.p, b.len, e.p, e.len, revision, 0, BL_ETCD_COUNT_ONLY, &kvs);
    *count = kvs.count;
    bl_etcd_kvs_free(&kvs);
    bl_ebuf_free(&b);
    bl_ebuf_free(&e);
    return rc;
}

/* The state of one import's commit phase. */
typedef struct importer {
    bl_estore *st;
    const bl_es_meta *meta;   /* the etcd store at `revision` */
    int full;                 /* full stream: the etcd store was empty */
    batch b;
    size_t max_ops;           /* per Txn, room left for the meta and marker ops */
    int fenced;               /* meta "import" was created */
    bl_ebuf marker_key, token;
    uint64_t txns;
} importer;

/* The Txn guard: the marker's token once fenced, else head and base
 * unchanged since the revision read. */
static size_t guard(importer *im, bl_etcd_cmp *c, bl_ebuf *hk, bl_ebuf *bk)
{
    if (im->fenced) {
        c[0] = (bl_etcd_cmp){.target = BL_ETCD_CMP_VALUE, .result = BL_ETCD_EQUAL,
                             .key = im->marker_key.p, .key_len = im->marker_key.len,
                             .value = im->token.p, .value_len = im->token.len};
        return 1;
    }
    bl_es_key(im->st, BL_ES_META, "head", 4, hk);
    bl_es_key(im->st, BL_ES_META, "base", 4, bk);
    c[0] = (bl_etcd_cmp){.target = BL_ETCD_CMP_MOD, .result = BL_ETCD_EQUAL, .key = hk->p,
                         .key_len = hk->len, .number = im->meta->head_mod};
    c[1] = (bl_etcd_cmp){.target = im->meta->base_mod ? BL_ETCD_CMP_MOD : BL_ETCD_CMP_CREATE,
                         .result = BL_ETCD_EQUAL, .key = bk->p, .key_len = bk->len,
                         .number = im->meta->base_mod};
    return 2;
}

/* Create meta "import" (the fence) and rewrite meta "head" unchanged, if
 * head and base are still what was read. */
static int fence(importer *im)
{
    bl_etcd_cmp c[3];
    bl_ebuf hk = {0}, bk = {0}, hv = {0};
    bl_etcd_txn_result res = {0};
    char tok[96];
    struct timespec ts;
    int rc;

    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(tok, sizeof tok, "bindlog-import pid %ld at %lld.%09ld", (long)getpid(),
             (long long)ts.tv_sec, ts.tv_nsec);
    im->token.len = 0;
    if ((rc = bl_ebuf_append(&im->token, tok, strlen(tok))) != 0 ||
        (rc = bl_es_key(im->st, BL_ES_META, "import", 6, &im->marker_key)) != 0)
        goto out;
    size_t n = guard(im, c, &hk, &bk);
    c[n++] = (bl_etcd_cmp){.target = BL_ETCD_CMP_CREATE, .result = BL_ETCD_EQUAL,
                           .key = im->marker_key.p, .key_len = im->marker_key.len};
    unsigned char head[16];
    bl_put64(head, im->meta->head_lsn);
    bl_put64(head + 8, (uint64_t)im->meta->head_time_ms);
    bl_etcd_op ops[2] = {
        {.type = BL_ETCD_OP_PUT, .key = im->marker_key.p, .key_len = im->marker_key.len,
         .value = im->token.p, .value_len = im->token.len},
        {.type = BL_ETCD_OP_PUT, .key = hk.p, .key_len = hk.len, .value = head,
         .value_len = sizeof head},
    };
    rc = bl_etcd_txn(im->st->c, c, n, ops, 2, NULL, 0, &res);
    if (rc == 0 && !res.succeeded)
        rc = BINDLOG_EBUSY; /* a writer or another import came first */
    if (rc == 0)
        im->fenced = 1;
out:
    bl_etcd_txn_result_free(&res);
    bl_ebuf_free(&hk);
    bl_ebuf_free(&bk);
    bl_ebuf_free(&hv);
    return bl_es_error(rc, BINDLOG_EBUSY);
}

/* Send the collected batch (not the last one): fence first if needed. */
static int flush(importer *im)
{
    bl_etcd_cmp c[2];
    bl_ebuf hk = {0}, bk = {0};
    int rc = 0;
    if (im->b.n == 0)
        return 0;
    if (!im->fenced) {
        /* more than one Txn: only a full import into an empty store may */
        if (!im->full)
            return BINDLOG_ENOSPC;
        if ((rc = fence(im)) != 0)
            return rc;
    }
    size_t n = guard(im, c, &hk, &bk);
    rc = batch_send(im->st, c, n, &im->b, NULL);
    im->txns++;
    batch_clear(&im->b);
    bl_ebuf_free(&hk);
    bl_ebuf_free(&bk);
    return rc;
}

/* Queue one put; a full batch is sent first. */
static int queue_put(importer *im, const bl_ebuf *key, const void *v, size_t vl)
{
    int rc;
    if (im->b.n >= im->max_ops ||
        (im->b.n > 0 && im->b.bytes + key->len + vl > IMPORT_TXN_BYTES))
        if ((rc = flush(im)) != 0)
            return rc;
    return batch_add(&im->b, key, NULL, v, vl);
}

/* The etcd key of an LMDB entry of table `table` (log and history keys
 * re-spelt; a children key, be64 parent created_lsn and child id, becomes
 * `parent 0x00 child`, the parent read from the child's value in `txn`),
 * in *out. */
static int etcd_key_of(importer *im, MDB_txn *txn, bl_env *e, int table, const MDB_val *k,
                       bl_ebuf *out)
{
    const unsigned char *p = k->mv_data;
    if (table == BL_ES_CHILDREN) {
        unsigned char ck[BL_CHILD_KEY_MAX];
        MDB_val id = {k->mv_size - 8, (void *)(p + 8)}, v, pv;
        bl_sval sv, parent;
        bl_tables t; /* the scratch store's sessions may be references */
        int rc;
        if (k->mv_size <= 8)
            return BINDLOG_ECORRUPT;
        bl_tables_live(e, txn, &t);
        if ((rc = bl_get_checked(txn, e->dbi[BL_DB_SESSIONS], BL_DB_SESSIONS, &id, &v)) != 0 ||
            (rc = bl_sval_read(v.mv_data, v.mv_size, id.mv_data, id.mv_size, bl_tables_ref, &t,
                               &sv)) != 0)
            return rc == BINDLOG_ENOTFOUND ? BINDLOG_ECORRUPT : rc;
        MDB_val pk = {sv.parent_len, (void *)sv.parent};
        if (sv.parent_len == 0 ||
            bl_get_checked(txn, e->dbi[BL_DB_SESSIONS], BL_DB_SESSIONS, &pk, &pv) != 0 ||
            bl_sval_decode_any(pv.mv_data, pv.mv_size, &parent) != 0 ||
            parent.created_lsn != bl_get64be(p))
            return BINDLOG_ECORRUPT; /* the scratch store was written by this import */
        return bl_es_key(im->st, table, ck,
                         bl_child_key(ck, sv.parent, sv.parent_len, id.mv_data, id.mv_size), out);
    }
    if (table == BL_ES_LOG)
        return k->mv_size == 8 ? bl_es_log_key(im->st, bl_get64be(p), out) : BINDLOG_ECORRUPT;
    if (table == BL_ES_HISTORY)
        return k->mv_size >= 10 ? bl_es_history_key(im->st, (const char *)p, k->mv_size - 9,
                                                    bl_get64be(p + k->mv_size - 8), out)
                                : BINDLOG_ECORRUPT;
    return bl_es_key(im->st, table, k->mv_data, k->mv_size, out);
}

/* The etcd value of a scratch store's entry: etcd keeps every session
 * whole and unmarked (docs/scale-out.md), where the scratch LMDB store
 * (format 7) keeps references in its sessions table, marks in its base
 * image and the sibling chain in both.  *v is left alone or pointed at buf. */
static int etcd_value_of(bl_env *e, MDB_txn *txn, int table, const MDB_val *k, MDB_val *v,
                         bl_ebuf *buf)
{
    const unsigned char *b = v->mv_data;
    bl_sval sv;
    bl_tables t;
    int rc;

    if ((table != BL_ES_SESSIONS && table != BL_ES_BASE_SESSIONS) || v->mv_size < 2 ||
        (b[0] != 3 && !(b[0] == 2 && (b[1] & (BL_SVAL_F_REF | BL_SVAL_F_LINKS)))))
        return 0;
    bl_tables_live(e, txn, &t);
    if ((rc = bl_sval_read(v->mv_data, v->mv_size, k->mv_data, k->mv_size, bl_tables_ref, &t,
                           &sv)) != 0)
        return rc;
    sv.child_lsn = sv.sibling_lsn = 0; /* etcd indexes children under keys of its own */
    buf->len = 0;
    if ((rc = bl_ebuf_reserve(buf, bl_sval_size(&sv))) != 0)
        return rc;
    if ((buf->len = bl_sval_encode(&sv, buf->p, bl_sval_size(&sv))) == 0)
        return BINDLOG_ECORRUPT;
    *v = (MDB_val){buf->len, buf->p};
    return 0;
}

/* Queue every entry of the scratch store's table that etcd does not hold
 * with the same bytes at the revision read. */
static int diff_table(importer *im, bl_env *e, int table)
{
    bl_cursor cur;
    MDB_val k, v;
    bl_ebuf key = {0};
    bl_etcd_kvs kvs = {0};
    bl_ebuf whole = {0};
    int rc, r;

    /* the scratch store is private: one read transaction for the table */
    MDB_txn *txn;
    if ((rc = bl_read_begin_fresh(e, &txn)) != 0)
        return rc;
    /* etcd's history index: one entry per record of the log (an LMDB store
     * of format 3 keeps none: its records chain each key's history) */
    int hist = table == BL_ES_HISTORY;
    rc = bl_cursor_open(&cur, e, txn, e->dbi[hist ? BL_DB_LOG : lmdb_db_of(table)], NULL, 0);
    while (rc == 0 && (r = bl_cursor_next(&cur, &k, &v)) > 0) {
        if (table == BL_ES_META && !meta_mirrored(k.mv_data, k.mv_size))
            continue;
        if (hist) {
            bl_record rec;
            if (k.mv_size != 8 || (rc = bl_record_decode(v.mv_data, v.mv_size, &rec)) != 0 ||
                (rc = bl_es_history_key(im->st, rec.key, rec.key_len, bl_get64be(k.mv_data),
                                        &key)) != 0)
                break;
            v = (MDB_val){0, ""};
        } else if ((rc = etcd_key_of(im, txn, e, table, &k, &key)) != 0 ||
                   (rc = etcd_value_of(e, txn, table, &k, &v, &whole)) != 0)
            break;
        int same = 0;
        if (!im->full) { /* an empty store holds none of it */
            rc = bl_etcd_range(im->st->c, key.p, key.len, NULL, 0, im->meta->revision, 0, 0,
                               &kvs);
            if (rc != 0)
                break;
            same = kvs.n == 1 && kvs.kvs[0].value_len == v.mv_size &&
                   memcmp(kvs.kvs[0].value, v.mv_data, v.mv_size) == 0;
            bl_etcd_kvs_free(&kvs);
        }
        if (!same && table != BL_ES_META) {
            /* the cursor's memory must outlive the etcd call in queue_put */
            bl_ebuf copy = {0};
            if ((rc = bl_ebuf_append(&copy, v.mv_data, v.mv_size)) == 0) {
                bl_map_unlock(e);
                rc = queue_put(im, &key, copy.p, copy.len);
                bl_map_rdlock(e);
            }
            bl_ebuf_free(&copy);
        }
        r = 0;
    }
    if (rc == 0 && r < 0)
        rc = r;
    bl_cursor_close(&cur);
    bl_read_end(e, txn);
    bl_ebuf_free(&key);
    bl_ebuf_free(&whole);
    bl_etcd_kvs_free(&kvs);
    return bl_es_error(rc, BINDLOG_EBUSY);
}

/* The last Txn: what is left of the batch, the meta records that differ,
 * the marker deleted. */
static int commit_last(importer *im, bl_env *e)
{
    static const char *const metas[] = {"head", "counts", "base", "base_time", "base_counts"};
    bl_ebuf key = {0}, val = {0}, hk = {0}, bk = {0};
    bl_etcd_kvs kvs = {0};
    bl_etcd_cmp c[2];
    int rc = 0;

    if (im->b.n + 6 > im->max_ops + 8 || im->b.bytes > IMPORT_TXN_BYTES)
        if ((rc = flush(im)) != 0)
            goto out;
    for (size_t i = 0; i < 5; i++) {
        if ((rc = scratch_get(e, BL_DB_META, metas[i], strlen(metas[i]), &val)) == BINDLOG_ENOTFOUND)
            continue;
        if (rc != 0 || (rc = bl_es_key(im->st, BL_ES_META, metas[i], strlen(metas[i]), &key)))
            goto out;
        if ((rc = meta_get(im->st, metas[i], im->meta->revision, &kvs)) != 0 &&
            rc != BINDLOG_ENOTFOUND)
            goto out;
        /* memcmp with a NULL pointer is undefined even for length 0 */
        int same = kvs.n == 1 && kvs.kvs[0].value_len == val.len &&
                   (val.len == 0 || memcmp(kvs.kvs[0].value, val.p, val.len) == 0);
        bl_etcd_kvs_free(&kvs);
        if ((!same || (im->fenced && i == 0)) &&
            (rc = batch_add(&im->b, &key, NULL, val.p, val.len)) != 0)
            goto out;
    }
    if (im->fenced && (rc = batch_add(&im->b, &im->marker_key, NULL, NULL, 0)) != 0)
        goto out;
    size_t n = guard(im, c, &hk, &bk);
    rc = batch_send(im->st, c, n, &im->b, NULL);
    im->txns++;
    batch_clear(&im->b);
    if (rc == 0)
        im->fenced = 0; /* the marker went with it */
out:
    bl_etcd_kvs_free(&kvs);
    bl_ebuf_free(&key);
    bl_ebuf_free(&val);
    bl_ebuf_free(&hk);
    bl_ebuf_free(&bk);
    return rc;
}

/* After a failed fenced full import: delete what was written (the store
 * was empty), then the marker, in one Txn guarded by the token. */
static int roll_back(importer *im)
{
    static const int tables[] = {BL_ES_BINDINGS, BL_ES_SESSIONS, BL_ES_CHILDREN, BL_ES_HISTORY,
                                 BL_ES_LOG, BL_ES_BASE_BINDINGS, BL_ES_BASE_SESSIONS};
    static const char *const metas[] = {"counts", "base", "base_time", "base_counts"};
    bl_ebuf b = {0}, e = {0}, hk = {0}, bk = {0};
    bl_etcd_cmp c[2];
    int rc = 0;
    batch_clear(&im->b);
    for (size_t i = 0; i < sizeof tables / sizeof tables[0] && rc == 0; i++)
        if ((rc = bl_es_table_range(im->st, tables[i], NULL, 0, &b, &e)) == 0)
            rc = batch_add(&im->b, &b, &e, NULL, 0);
    /* meta records the empty store did not have (it has head, magic, format) */
    for (size_t i = 0; i < 4 && rc == 0; i++) {
        bl_etcd_kvs kvs = {0};
        int g = meta_get(im->st, metas[i], im->meta->revision, &kvs);
        bl_etcd_kvs_free(&kvs);
        if (g == BINDLOG_ENOTFOUND && (rc = bl_es_key(im->st, BL_ES_META, metas[i],
                                                      strlen(metas[i]), &b)) == 0)
            rc = batch_add(&im->b, &b, NULL, NULL, 0);
    }
    if (rc == 0)
        rc = batch_add(&im->b, &im->marker_key, NULL, NULL, 0);
    if (rc == 0) {
        size_t n = guard(im, c, &hk, &bk);
        rc = batch_send(im->st, c, n, &im->b, NULL);
    }
    if (rc == 0)
        im->fenced = 0;
    bl_ebuf_free(&b);
    bl_ebuf_free(&e);
    bl_ebuf_free(&hk);
    bl_ebuf_free(&bk);
    return rc;
}

/*
 * Give the scratch store of an import the children entry of every child
 * (etcd's layout: docs/scale-out.md), where an LMDB store of format 6 or 7 has
 * only those of children whose record its log does not hold and links the
 * others through its sessions.  The scratch store is thrown away after the
 * import; its sessions may be references, read whole through its log.
 */
static int full_children_txn(void *ctx, bl_env *e, MDB_txn *txn, int *full)
{
    MDB_cursor *c;
    MDB_val k, v;
    bl_tables t;
    int mrc, rc = 0;
    (void)ctx;
    bl_tables_live(e, txn, &t);
    if ((mrc = mdb_cursor_open(txn, e->dbi[BL_DB_SESSIONS], &c)) != 0)
        return bl_mdb_error(mrc);
    for (mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST); mrc == 0 && rc == 0;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        bl_sval sv, parent;
        MDB_val pv;
        if ((rc = bl_sval_read(v.mv_data, v.mv_size, k.mv_data, k.mv_size, bl_tables_ref, &t,
                               &sv)) != 0 ||
            sv.parent_len == 0)
            continue;
        MDB_val pk = {sv.parent_len, (void *)sv.parent};
        if (bl_get_checked(txn, e->dbi[BL_DB_SESSIONS], BL_DB_SESSIONS, &pk, &pv) != 0 ||
            bl_sval_decode_any(pv.mv_data, pv.mv_size, &parent) != 0 ||
            !bl_child_indexed(sv.created_lsn, parent.created_lsn))
            continue;
        unsigned char ck[BL_LCHILD_KEY_MAX];
        MDB_val key = {bl_lchild_key(ck, parent.created_lsn, k.mv_data, k.mv_size), ck},
                val = {0, ""};
        int p = mdb_put(txn, e->dbi[BL_DB_CHILDREN], &key, &val, 0);
        *full = p == MDB_MAP_FULL;
        rc = bl_mdb_error(p);
    }
    mdb_cursor_close(c);
    if (rc == 0 && mrc != 0 && mrc != MDB_NOTFOUND)
        rc = bl_mdb_error(mrc);
    return rc;
}

static int full_children(bl_env *e) { return in_scratch_txn(e, full_children_txn, NULL); }

int bl_etcd_import(bindlog *h, int fd, uint64_t *records, uint64_t *err_offset,
                   bindlog_progress_fn fn, void *ctx)
{
    bl_estore *st = bl_es_of(h);
    importer im;
    mirror m;
    bl_etcd_kvs kvs = {0};
    char path[4096];
    int sfd = -1, rc;

    memset(&im, 0, sizeof(im));
    memset(&m, 0, sizeof(m));
    if (records != NULL)
        *records = 0;
    if (err_offset != NULL)
        *err_offset = 0;
    if (h->read_only)
        return BINDLOG_EREADONLY;

    /* phase 1: stage and verify, off etcd */
    char *tmp = bl_scratch_dir("etcd");
    if (tmp == NULL)
        return BINDLOG_EIO;
    snprintf(path, sizeof path, "%s/stream", tmp);
    rc = spool(fd, path, &sfd);
    if (rc == 0 && (rc = meta_get(st, "import", 0, &kvs)) == 0)
        rc = BINDLOG_EBUSY; /* another import runs, or one died half-way */
    else if (rc == BINDLOG_ENOTFOUND)
        rc = 0;
    bl_etcd_kvs_free(&kvs);
    if (rc != 0)
        goto out;
    im.full = is_full_stream(sfd);
    if (im.full) {
        int64_t nb = 0, ns = 0;
        if ((rc = scratch_store(&m)) != 0 || (rc = bl_es_meta_read(st, 0, &m.meta)) != 0 ||
            (rc = table_count(st, BL_ES_BINDINGS, m.meta.revision, &nb)) != 0 ||
            (rc = table_count(st, BL_ES_SESSIONS, m.meta.revision, &ns)) != 0)
            goto out;
        m.revision = m.meta.revision;
        if (m.meta.head_lsn != 0 || m.meta.base_lsn != 0 || nb != 0 || ns != 0) {
            rc = BINDLOG_EEXIST; /* a full stream restores an empty store only */
            goto out;
        }
    } else if ((rc = mirror_open(h, &m, NULL, NULL, NULL, NULL)) != 0) {
        goto out;
    }
    if ((rc = bindlog_import(m.h, sfd, records, err_offset, fn, ctx)) != 0 ||
        (rc = full_children(m.h->e)) != 0)
        goto out;

    /* phase 2: commit the difference */
    im.st = st;
    im.meta = &m.meta;
    size_t ops = bl_etcd_max_txn_ops(st->c);
    im.max_ops = ops > 16 ? ops - 8 : 8;
    if ((rc = batch_init(&im.b, im.max_ops + 8)) != 0)
        goto out;
    static const int order[] = {BL_ES_BASE_BINDINGS, BL_ES_BASE_SESSIONS, BL_ES_BINDINGS,
                                BL_ES_SESSIONS, BL_ES_CHILDREN, BL_ES_HISTORY, BL_ES_LOG};
    for (size_t i = 0; i < sizeof order / sizeof order[0] && rc == 0; i++)
        rc = diff_table(&im, m.h->e, order[i]);
    if (rc == 0)
        rc = commit_last(&im, m.h->e);
    if (rc != 0 && im.fenced && roll_back(&im) != 0)
        rc = rc == BINDLOG_EBUSY ? BINDLOG_EIO : rc; /* the marker stays: see the top */
    if (rc != 0 && records != NULL)
        *records = 0;
out:
    if (sfd >= 0)
        close(sfd);
    batch_free(&im.b);
    bl_ebuf_free(&im.marker_key);
    bl_ebuf_free(&im.token);
    if (m.dir != NULL)
        mirror_close(&m);
    bl_scratch_remove(tmp);
    free(tmp);
    return rc;
}
