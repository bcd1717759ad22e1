/*
 * relink.c -- give the sessions of a table the sibling chain the state
 * machine would have given them (bl_relink, maint.h).
 *
 * The machine links a child to its parent as it creates it (machine.c,
 * link_child): the parent names its youngest child's creating LSN, each
 * child its next older sibling's.  A table whose values came from
 * somewhere else has to be linked again from what it holds: an etcd
 * store's mirror (etcd keeps a children index of its own and no chain) and
 * the state bindlog_recover rebuilt from evidence (whose stored values
 * link records it may have lost).  A parent's children are the sessions
 * of the table that name it and were created after it (bl_child_indexed),
 * in creation order: the same chain replay derives from the same creations.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "maint/maint.h"

/* A session of the table: its id and parent (copied: the pass that
 * rewrites values may move the pages they were read from), its creation,
 * its links as stored and as they should be. */
typedef struct sess_link {
    size_t id_off, id_len, parent_off, parent_len;
    uint64_t created_lsn;
    uint64_t had_child, had_sibling; /* as stored */
    uint64_t child_lsn, sibling_lsn; /* as the machine would have them */
} sess_link;

typedef struct relink {
    sess_link *l;
    size_t n, cap;
    char *names; /* the ids and parents, end to end */
    size_t used, room;
} relink;

static int id_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n != 0 ? memcmp(a, b, n) : 0; /* no names at all: memcmp wants pointers */
    return c != 0 ? c : an < bn ? -1 : an > bn;
}

static _Thread_local const char *sort_names; /* qsort has no context argument */

/* Children by parent, then by creation. */
static int by_parent(const void *pa, const void *pb)
{
    const sess_link *a = *(const sess_link *const *)pa, *b = *(const sess_link *const *)pb;
    int c = id_cmp(sort_names + a->parent_off, a->parent_len, sort_names + b->parent_off,
                   b->parent_len);
    return c != 0 ? c : a->created_lsn < b->created_lsn ? -1 : a->created_lsn > b->created_lsn;
}

static int same_parent(const relink *r, const sess_link *a, const sess_link *b)
{
    return id_cmp(r->names + a->parent_off, a->parent_len, r->names + b->parent_off,
                  b->parent_len) == 0;
}

/* The session `id` (the table is in id order, and so is r->l), or NULL. */
static sess_link *find(relink *r, const char *id, size_t len)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = id_cmp(r->names + r->l[mid].id_off, r->l[mid].id_len, id, len);
        if (c == 0)
            return &r->l[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int keep_name(relink *r, const void *p, size_t n, size_t *off)
{
    if (r->used + n > r->room) {
        size_t room = r->room ? 2 * r->room : 64 * 1024;
        while (room < r->used + n)
            room *= 2;
        char *nn = realloc(r->names, room);
        if (nn == NULL)
            return BINDLOG_ENOMEM;
        r->names = nn;
        r->room = room;
    }
    if (n)
        memcpy(r->names + r->used, p, n);
    *off = r->used;
    r->used += n;
    return 0;
}

/* Every session of the table, with its links as stored. */
static int gather(relink *r, bl_env *e, MDB_txn *txn, int db)
{
    bl_cursor c;
    MDB_val k, v;
    int rc = bl_cursor_open(&c, e, txn, e->dbi[db], NULL, 0);
    if (rc != 0)
        return rc;
    while ((rc = bl_cursor_next(&c, &k, &v)) > 0) {
        bl_sval sv;
        sess_link *s;
        if (bl_sval_decode(v.mv_data, v.mv_size, &sv) != 0)
            continue; /* left as it is, for check to name (an etcd store's damage) */
        if (r->n == r->cap) {
            size_t cap = r->cap ? 2 * r->cap : 1024;
            sess_link *nl = realloc(r->l, cap * sizeof *nl);
            if (nl == NULL) {
                rc = BINDLOG_ENOMEM;
                break;
            }
            r->l = nl;
            r->cap = cap;
        }
        s = &r->l[r->n];
        memset(s, 0, sizeof *s);
        s->id_len = k.mv_size;
        s->parent_len = sv.parent_len;
        s->created_lsn = sv.created_lsn;
        s->had_child = sv.child_lsn;
        s->had_sibling = sv.sibling_lsn;
        if ((rc = keep_name(r, k.mv_data, k.mv_size, &s->id_off)) != 0 ||
            (rc = keep_name(r, sv.parent, sv.parent_len, &s->parent_off)) != 0)
            break;
        r->n++;
    }
    bl_cursor_close(&c);
    return rc;
}

/* The chain the machine would have built from the table's creations. */
static int link(relink *r)
{
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
    sess_link **kids = r->n ? malloc(r->n * sizeof *kids) : NULL;
    size_t nk = 0;
    if (r->n && kids == NULL)
        return BINDLOG_ENOMEM;
    /* kids is freed below, after the loops (the analyzer loses it here) */
    /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc) */
    for (size_t i = 0; i < r->n; i++) {
        sess_link *p;
        if (r->l[i].parent_len != 0 &&
            (p = find(r, r->names + r->l[i].parent_off, r->l[i].parent_len)) != NULL &&
            bl_child_indexed(r->l[i].created_lsn, p->created_lsn))
            kids[nk++] = &r->l[i];
    }
    sort_names = r->names;
    if (nk > 1)
        /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers */
        qsort(kids, nk, sizeof *kids, by_parent);
    for (size_t i = 0; i < nk; i++) {
        int first = i == 0 || !same_parent(r, kids[i - 1], kids[i]);
        kids[i]->sibling_lsn = first ? 0 : kids[i - 1]->created_lsn;
        if (i + 1 == nk || !same_parent(r, kids[i + 1], kids[i]))
            find(r, r->names + kids[i]->parent_off, kids[i]->parent_len)->child_lsn =
                kids[i]->created_lsn;
    }
    free(kids);
    return 0;
}

/* Rewrite the values whose links differ, in their own form (each decoded
 * in gather). */
static int rewrite(relink *r, bl_env *e, MDB_txn *txn, int db, int *map_full)
{
    unsigned char *buf = NULL;
    size_t cap = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < r->n; i++) {
        const sess_link *s = &r->l[i];
        MDB_val k = {s->id_len, r->names + s->id_off}, v;
        bl_sval sv;
        if (s->child_lsn == s->had_child && s->sibling_lsn == s->had_sibling)
            continue;
        if ((rc = bl_mdb_error(mdb_get(txn, e->dbi[db], &k, &v))) != 0)
            break;
        if (bl_sval_decode(v.mv_data, v.mv_size, &sv) != 0) {
            rc = BINDLOG_ECORRUPT;
            break;
        }
        sv.child_lsn = s->child_lsn;
        sv.sibling_lsn = s->sibling_lsn;
        size_t n = bl_sval_size(&sv);
        if (n > cap) {
            unsigned char *nb = realloc(buf, n);
            if (nb == NULL) {
                rc = BINDLOG_ENOMEM;
                break;
            }
            buf = nb;
            cap = n;
        }
        v = (MDB_val){bl_sval_encode_base(&sv, buf, n), buf}; /* keeps a mark */
        if (v.mv_size == 0) {
            rc = BINDLOG_ECORRUPT;
            break;
        }
        int mrc = mdb_put(txn, e->dbi[db], &k, &v, 0);
        if (mrc == MDB_MAP_FULL)
            *map_full = 1;
        rc = bl_mdb_error(mrc);
    }
    free(buf);
    return rc;
}

int bl_relink(bl_env *e, MDB_txn *txn, int db, int *map_full)
{
    relink r = {0};
    int rc;
    *map_full = 0;
    if ((rc = gather(&r, e, txn, db)) == 0 && (rc = link(&r)) == 0)
        rc = rewrite(&r, e, txn, db, map_full);
    free(r.l);
    free(r.names);
    return rc;
}
