/*
 * etcd_wset.c -- write sets: reads at one revision through an overlay of
 * pending puts, the compares those reads mean, and the Txn that carries
 * them (etcd_store.h).
 *
 * Entries live in an array indexed by an open-addressing hash table of
 * their full etcd keys.  Every value (read or put) is a separate
 * allocation that stays put until the set is reset, so the pointers a view
 * returned survive later puts, rollbacks and array growth.
 */
#define _GNU_SOURCE
#include "etcd/etcd_store.h"

#include <stdlib.h>
#include <string.h>

typedef struct ent {
    unsigned char *key;
    size_t key_len;
    uint64_t hash;
    int table;             /* BL_ES_* (wanted entries), else 0 */
    int wanted;            /* queued for the prefetch */
    int fetched;           /* prefetched: rval/present/mod valid, but no
                              compare until a view read uses it */
    int read;              /* read from etcd: compare it */
    int present;           /* ... and it existed, with mod_revision `mod` */
    int64_t mod;
    unsigned char *rval;   /* the value read */
    size_t rlen;
    int written;           /* a put is pending */
    unsigned char *wval;
    size_t wlen;
} ent;

typedef struct undo {
    size_t idx;
    int written;
    unsigned char *wval;
    size_t wlen;
} undo;

struct bl_es_wset {
    bl_estore *st;
    int64_t revision;
    ent *ents;
    size_t n, cap;
    size_t *slots;         /* hash table of ent index + 1; 0 = empty */
    size_t nslots;         /* power of two */
    undo *undos;
    size_t nundo, capundo;
    void **allocs;         /* every value allocation, freed at reset */
    size_t nallocs, capallocs;
    size_t nputs, ncmps, bytes;
    int error;             /* first storage error of a view read */
    size_t *want;          /* entries queued for the prefetch, in order */
    size_t nwant, capwant;
    int64_t head_mod;      /* mod_revision of meta "head" at the prefetch's
                              revision (0: absent) */
    bl_ebuf kbuf;
};

static uint64_t hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

int bl_es_wset_new(bl_estore *st, int64_t revision, bl_es_wset **out)
{
    bl_es_wset *ws = calloc(1, sizeof(*ws));
    *out = NULL;
    if (ws == NULL)
        return BINDLOG_ENOMEM;
    ws->st = st;
    ws->revision = revision;
    ws->nslots = 256;
    ws->slots = calloc(ws->nslots, sizeof(size_t));
    if (ws->slots == NULL) {
        free(ws);
        return BINDLOG_ENOMEM;
    }
    *out = ws;
    return 0;
}

void bl_es_wset_reset(bl_es_wset *ws, int64_t revision)
{
    for (size_t i = 0; i < ws->nallocs; i++)
        free(ws->allocs[i]);
    for (size_t i = 0; i < ws->n; i++)
        free(ws->ents[i].key);
    ws->nallocs = ws->n = ws->nundo = 0;
    ws->nwant = 0;
    ws->head_mod = 0;
    ws->nputs = ws->ncmps = ws->bytes = 0;
    ws->error = 0;
    memset(ws->slots, 0, ws->nslots * sizeof(size_t));
    ws->revision = revision;
}

void bl_es_wset_free(bl_es_wset *ws)
{
    if (ws == NULL)
        return;
    bl_es_wset_reset(ws, 0);
    free(ws->ents);
    free(ws->slots);
    free(ws->undos);
    free(ws->allocs);
    free(ws->want);
    bl_ebuf_free(&ws->kbuf);
    free(ws);
}

int bl_es_wset_error(const bl_es_wset *ws) { return ws->error; }

/* Keep p for freeing at reset; 0 or BINDLOG_ENOMEM (p freed). */
static int keep(bl_es_wset *ws, void *p)
{
    if (ws->nallocs == ws->capallocs) {
        size_t c = ws->capallocs ? 2 * ws->capallocs : 64;
        void **a = realloc(ws->allocs, c * sizeof(*a));
        if (a == NULL) {
            free(p);
            return BINDLOG_ENOMEM;
        }
        ws->allocs = a;
        ws->capallocs = c;
    }
    ws->allocs[ws->nallocs++] = p;
    return 0;
}

static unsigned char *copy(bl_es_wset *ws, const void *p, size_t n)
{
    unsigned char *c = malloc(n ? n : 1);
    if (c == NULL)
        return NULL;
    if (n)
        memcpy(c, p, n);
    return keep(ws, c) == 0 ? c : NULL;
}

static int grow_slots(bl_es_wset *ws)
{
    size_t ns = ws->nslots * 2;
    size_t *s = calloc(ns, sizeof(size_t));
    if (s == NULL)
        return BINDLOG_ENOMEM;
    for (size_t i = 0; i < ws->n; i++) {
        size_t j = ws->ents[i].hash & (ns - 1);
        while (s[j] != 0)
            j = (j + 1) & (ns - 1);
        s[j] = i + 1;
    }
    free(ws->slots);
    ws->slots = s;
    ws->nslots = ns;
    return 0;
}

/* The entry of key k, made (empty) if `make`; NULL if absent or no memory
 * (*rc tells which). */
static ent *lookup(bl_es_wset *ws, const unsigned char *k, size_t n, int make, int *rc)
{
    uint64_t h = hash_bytes(k, n);
    size_t j = h & (ws->nslots - 1);
    *rc = 0;
    for (; ws->slots[j] != 0; j = (j + 1) & (ws->nslots - 1)) {
        ent *e = &ws->ents[ws->slots[j] - 1];
        if (e->hash == h && e->key_len == n && memcmp(e->key, k, n) == 0)
            return e;
    }
    if (!make)
        return NULL;
    if (ws->n == ws->cap) {
        size_t c = ws->cap ? 2 * ws->cap : 64;
        ent *a = realloc(ws->ents, c * sizeof(*a));
        if (a == NULL)
            goto nomem;
        ws->ents = a;
        ws->cap = c;
    }
    ent *e = &ws->ents[ws->n];
    memset(e, 0, sizeof(*e));
    e->key = malloc(n);
    if (e->key == NULL)
        goto nomem;
    memcpy(e->key, k, n);
    e->key_len = n;
    e->hash = h;
    ws->slots[j] = ++ws->n;
    if (ws->n * 2 > ws->nslots && grow_slots(ws) != 0) {
        /* the entry is in: the table is only fuller than we like */
    }
    return &ws->ents[ws->n - 1];
nomem:
    *rc = BINDLOG_ENOMEM;
    return NULL;
}

/*
 * The current value of `table` name: the pending put, else the value read
 * at the set's revision (read now if not yet).  0 with *v and *len,
 * BINDLOG_ENOTFOUND, or an error (also kept in ws->error).
 */
static int get(bl_es_wset *ws, int table, const void *name, size_t name_len,
               const unsigned char **v, size_t *len)
{
    int rc;
    ent *e;
    if ((rc = bl_es_key(ws->st, table, name, name_len, &ws->kbuf)) != 0)
        goto fail;
    e = lookup(ws, ws->kbuf.p, ws->kbuf.len, 1, &rc);
    if (e == NULL)
        goto fail;
    if (!e->written && !e->read) {
        if (!e->fetched) {
            bl_etcd_kvs kvs;
            size_t idx = (size_t)(e - ws->ents);
            rc = bl_etcd_range(ws->st->c, ws->kbuf.p, ws->kbuf.len, NULL, 0, ws->revision, 0,
                               0, &kvs);
            e = &ws->ents[idx];
            if (rc == 0 && kvs.n == 1) {
                e->rval = copy(ws, kvs.kvs[0].value, kvs.kvs[0].value_len);
                if (e->rval == NULL)
                    rc = BINDLOG_ENOMEM;
                e->rlen = kvs.kvs[0].value_len;
                e->mod = kvs.kvs[0].mod_revision;
                e->present = 1;
            }
            bl_etcd_kvs_free(&kvs);
            if (rc != 0)
                goto fail;
        }
        /* from here on the value is used: the Txn must compare it (its
         * mod_revision as read, whichever revision it was read at) */
        e->read = 1;
        ws->ncmps++;
    }
    if (e->written) {
        *v = e->wval;
        *len = e->wlen;
        return 0;
    }
    if (!e->present)
        return BINDLOG_ENOTFOUND;
    *v = e->rval;
    *len = e->rlen;
    return 0;
fail:
    if (ws->error == 0)
        ws->error = rc;
    return rc;
}

/* ---- bound-session hints ------------------------------------------------------
 *
 * Which session a binding was bound to when this process last saw it (read
 * or wrote it), so that the prefetch can fetch that session in its first
 * Txn along with the binding, instead of in a second round once the
 * binding is read.  A hint is only ever a guess of what to read: every
 * value a decision uses is still read at the group's revision, and a
 * wrong or missing hint costs the second round, as before.  A fixed
 * direct-mapped table per store (HINT_SLOTS entries of the full key's
 * hash and a session id, ~560 KB, allocated on first use); only the
 * group's leader touches it, one at a time. */
#define HINT_SLOTS 4096

typedef struct hint {
    uint64_t hash;                /* of the binding's full etcd key; 0 = empty */
    unsigned char len;
    char sid[BINDLOG_ID_MAX];
} hint;

struct bl_es_hints {
    hint slot[HINT_SLOTS];
};

void bl_es_hints_free(bl_es_hints *h) { free(h); }

static void hint_put(bl_es_wset *ws, uint64_t hash, const char *sid, size_t len)
{
    if (ws->st->hints == NULL && (ws->st->hints = calloc(1, sizeof(bl_es_hints))) == NULL)
        return; /* no memory: no hints, the second round does the work */
    hint *s = &ws->st->hints->slot[hash & (HINT_SLOTS - 1)];
    s->hash = len != 0 && len <= BINDLOG_ID_MAX ? hash | 1 : 0;
    s->len = (unsigned char)(s->hash ? len : 0);
    if (s->len)
        memcpy(s->sid, sid, len);
}

static const hint *hint_get(const bl_es_wset *ws, uint64_t hash)
{
    if (ws->st->hints == NULL)
        return NULL;
    const hint *s = &ws->st->hints->slot[hash & (HINT_SLOTS - 1)];
    return s->hash == (hash | 1) ? s : NULL;
}

/* Learn the session a binding value names (none: forget). */
static void hint_learn(bl_es_wset *ws, const ent *e, const unsigned char *v, size_t n)
{
    bl_bval b;
    if (bl_bval_decode(v, n, &b) == 0)
        hint_put(ws, e->hash, b.sid, b.sid_len);
}

/* 1 if the full key is in the bindings table of the set's store. */
static int is_binding_key(const bl_es_wset *ws, const ent *e)
{
    const bl_estore *st = ws->st;
    return e->key_len > st->prefix_len + 2 && memcmp(e->key, st->prefix, st->prefix_len) == 0 &&
           e->key[st->prefix_len] == BL_ES_BINDINGS && e->key[st->prefix_len + 1] == '/';
}

/* ---- prefetch ---------------------------------------------------------------- */

int bl_es_wset_want(bl_es_wset *ws, int table, const void *name, size_t name_len)
{
    int rc;
    ent *e;
    if (ws->nwant >= BL_ES_PREFETCH_MAX)
        return 0; /* the rest falls back to single reads */
    if ((rc = bl_es_key(ws->st, table, name, name_len, &ws->kbuf)) != 0)
        return rc;
    e = lookup(ws, ws->kbuf.p, ws->kbuf.len, 1, &rc);
    if (e == NULL)
        return rc;
    if (e->wanted || e->fetched || e->read || e->written)
        return 0;
    if (ws->nwant == ws->capwant) {
        size_t c = ws->capwant ? 2 * ws->capwant : 64;
        size_t *a = realloc(ws->want, c * sizeof(*a));
        if (a == NULL)
            return BINDLOG_ENOMEM;
        ws->want = a;
        ws->capwant = c;
    }
    e->wanted = 1;
    e->table = table;
    ws->want[ws->nwant++] = (size_t)(e - ws->ents);
    /* a binding: the session it was bound to, in the same round */
    const hint *h = table == BL_ES_BINDINGS ? hint_get(ws, e->hash) : NULL;
    if (h != NULL) {
        char sid[BINDLOG_ID_MAX];
        size_t len = h->len;
        memcpy(sid, h->sid, len);
        return bl_es_wset_want(ws, BL_ES_SESSIONS, sid, len);
    }
    return 0;
}

/*
 * One read Txn: extra[0..nextra) then RANGEs of want[*from .. *from + n),
 * n as many as fit.  Marks those entries fetched; the extras' answers go to
 * extra_out.  The first Txn of a prefetch (`first`) also reads meta "head"
 * and sets the set's revision; every later one holds only if "head" still
 * has that mod_revision (BL_ES_MOVED if not), so that all its values are
 * also the first one's.
 */
static int fetch_txn(bl_es_wset *ws, int first, const bl_etcd_op *extra, size_t nextra,
                     bl_etcd_kvs *extra_out, size_t *from)
{
    size_t max = bl_etcd_max_txn_ops(ws->st->c);
    size_t n = ws->nwant - *from, nops;
    bl_etcd_txn_result res = {0};
    bl_etcd_cmp cmp;
    bl_etcd_op *ops;
    int rc;

    if (nextra + 1 >= max)
        return BINDLOG_EINVAL;
    if (n > max - nextra - 1)
        n = max - nextra - 1;
    if ((rc = bl_es_key(ws->st, BL_ES_META, "head", 4, &ws->kbuf)) != 0)
        return rc;
    if ((ops = calloc(nextra + n + 1, sizeof(*ops))) == NULL)
        return BINDLOG_ENOMEM;
    for (size_t i = 0; i < nextra; i++)
        ops[i] = extra[i];
    for (size_t i = 0; i < n; i++) {
        const ent *e = &ws->ents[ws->want[*from + i]];
        ops[nextra + i] = (bl_etcd_op){.type = BL_ETCD_OP_RANGE, .key = e->key,
                                       .key_len = e->key_len};
    }
    nops = nextra + n;
    if (first)
        ops[nops++] = (bl_etcd_op){.type = BL_ETCD_OP_RANGE, .key = ws->kbuf.p,
                                   .key_len = ws->kbuf.len};
    cmp = (bl_etcd_cmp){.target = BL_ETCD_CMP_MOD, .result = BL_ETCD_EQUAL,
                        .key = ws->kbuf.p, .key_len = ws->kbuf.len, .number = ws->head_mod};
    rc = bl_etcd_txn(ws->st->c, &cmp, first ? 0 : 1, ops, nops, NULL, 0, &res);
    free(ops);
    if (rc == 0 && !res.succeeded)
        rc = BL_ES_MOVED; /* a state change since the first Txn */
    if (rc == 0 && res.nresults != nops)
        rc = BINDLOG_EIO;
    for (size_t i = 0; rc == 0 && i < nops; i++)
        if (res.results[i].type != BL_ETCD_OP_RANGE)
            rc = BINDLOG_EIO;
    if (rc == 0 && first) {
        const bl_etcd_kvs *h = &res.results[nops - 1].kvs;
        ws->head_mod = h->n == 1 ? h->kvs[0].mod_revision : 0;
        ws->revision = res.revision;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        ent *e = &ws->ents[ws->want[*from + i]];
        const bl_etcd_kvs *kvs = &res.results[nextra + i].kvs;
        if (kvs->n > 1 ||
            (kvs->n == 1 && (kvs->kvs[0].key_len != e->key_len ||
                             memcmp(kvs->kvs[0].key, e->key, e->key_len) != 0))) {
            rc = BINDLOG_EIO; /* not the answer to a single-key range */
            break;
        }
        if (kvs->n == 1) {
            if ((e->rval = copy(ws, kvs->kvs[0].value, kvs->kvs[0].value_len)) == NULL) {
                rc = BINDLOG_ENOMEM;
                break;
            }
            e->rlen = kvs->kvs[0].value_len;
            e->mod = kvs->kvs[0].mod_revision;
            e->present = 1;
        }
        e->fetched = 1;
    }
    if (rc == 0) {
        for (size_t i = 0; i < nextra; i++) {
            extra_out[i] = res.results[i].kvs;
            memset(&res.results[i].kvs, 0, sizeof(res.results[i].kvs));
        }
        *from += n;
    }
    bl_etcd_txn_result_free(&res);
    return rc;
}

int bl_es_wset_prefetch(bl_es_wset *ws, const bl_etcd_op *extra, size_t nextra,
                        bl_etcd_kvs *extra_out, int64_t *revision)
{
    size_t done = 0, round1;
    int rc;

    for (size_t i = 0; i < nextra; i++)
        memset(&extra_out[i], 0, sizeof(extra_out[i]));
    /* round 1: the extras and the keys the events name */
    if ((rc = fetch_txn(ws, 1, extra, nextra, extra_out, &done)) != 0)
        goto fail;
    *revision = ws->revision;
    while (done < ws->nwant)
        if ((rc = fetch_txn(ws, 0, NULL, 0, NULL, &done)) != 0)
            goto fail;
    /* round 2: the sessions the fetched bindings are bound to */
    round1 = ws->nwant;
    for (size_t i = 0; i < round1; i++) {
        const ent *e = &ws->ents[ws->want[i]];
        bl_bval b;
        if (e->table != BL_ES_BINDINGS || !e->present ||
            bl_bval_decode(e->rval, e->rlen, &b) != 0 || b.sid_len == 0)
            continue; /* a bad value is the view read's to report */
        hint_put(ws, e->hash, b.sid, b.sid_len);
        if ((rc = bl_es_wset_want(ws, BL_ES_SESSIONS, b.sid, b.sid_len)) != 0)
            goto fail;
    }
    while (done < ws->nwant)
        if ((rc = fetch_txn(ws, 0, NULL, 0, NULL, &done)) != 0)
            goto fail;
    return 0;
fail:
    for (size_t i = 0; i < nextra; i++)
        bl_etcd_kvs_free(&extra_out[i]);
    return rc;
}

size_t bl_es_wset_nwant(const bl_es_wset *ws) { return ws->nwant; }

static int view_binding(void *ctx, const char *key, size_t key_len, bl_bval *out)
{
    const unsigned char *v = NULL; /* set when get() returns 0; -O3 cannot tell */
    size_t n = 0;
    int rc = get(ctx, BL_ES_BINDINGS, key, key_len, &v, &n);
    if (rc == 0 && (rc = bl_bval_decode(v, n, out)) != 0 && ((bl_es_wset *)ctx)->error == 0)
        ((bl_es_wset *)ctx)->error = rc;
    return rc;
}

static int view_session(void *ctx, const char *id, size_t id_len, bl_sval *out)
{
    const unsigned char *v = NULL;
    size_t n = 0;
    int rc = get(ctx, BL_ES_SESSIONS, id, id_len, &v, &n);
    if (rc == 0 && (rc = bl_sval_decode(v, n, out)) != 0 && ((bl_es_wset *)ctx)->error == 0)
        ((bl_es_wset *)ctx)->error = rc;
    return rc;
}

void bl_es_wset_view(bl_es_wset *ws, bl_view *v)
{
    v->ctx = ws;
    v->binding = view_binding;
    v->session = view_session;
}

/* Queue a put of the full key k. */
static int put_full(bl_es_wset *ws, const unsigned char *k, size_t kn, const void *val,
                    size_t vn)
{
    int rc;
    ent *e = lookup(ws, k, kn, 1, &rc);
    unsigned char *c;
    if (e == NULL)
        return rc;
    size_t idx = (size_t)(e - ws->ents);
    if ((c = copy(ws, val, vn)) == NULL)
        return BINDLOG_ENOMEM;
    if (ws->nundo == ws->capundo) {
        size_t cap = ws->capundo ? 2 * ws->capundo : 64;
        undo *u = realloc(ws->undos, cap * sizeof(*u));
        if (u == NULL)
            return BINDLOG_ENOMEM;
        ws->undos = u;
        ws->capundo = cap;
    }
    e = &ws->ents[idx];
    ws->undos[ws->nundo++] = (undo){idx, e->written, e->wval, e->wlen};
    if (!e->written) {
        ws->nputs++;
        ws->bytes += kn;
    } else {
        ws->bytes -= e->wlen;
    }
    ws->bytes += vn;
    e->written = 1;
    e->wval = c;
    e->wlen = vn;
    return 0;
}

int bl_es_wset_put(bl_es_wset *ws, int table, const void *name, size_t name_len,
                   const void *value, size_t value_len)
{
    int rc = bl_es_key(ws->st, table, name, name_len, &ws->kbuf);
    return rc ? rc : put_full(ws, ws->kbuf.p, ws->kbuf.len, value, value_len);
}

int bl_es_wset_apply(bl_es_wset *ws, const bl_plan *p, const bl_encoded *enc)
{
    const unsigned char *b = enc->buf;
    int rc;
    if ((rc = bl_es_wset_put(ws, BL_ES_BINDINGS, p->rec.key, p->rec.key_len, b + enc->bval_off,
                             enc->bval_len)) != 0)
        return rc;
    for (unsigned i = 0; i < p->nsess; i++)
        if ((rc = bl_es_wset_put(ws, BL_ES_SESSIONS, b + enc->sid_off[i], p->sess[i].id_len,
                                 b + enc->sval_off[i], enc->sval_len[i])) != 0)
            return rc;
    if (enc->child_len != 0) {
        if ((rc = bl_es_key(ws->st, BL_ES_CHILDREN, b + enc->child_off, enc->child_len,
                            &ws->kbuf)) != 0 ||
            (rc = put_full(ws, ws->kbuf.p, ws->kbuf.len, "", 0)) != 0)
            return rc;
    }
    if ((rc = bl_es_history_key(ws->st, p->rec.key, p->rec.key_len, p->rec.lsn, &ws->kbuf)) != 0 ||
        (rc = put_full(ws, ws->kbuf.p, ws->kbuf.len, "", 0)) != 0)
        return rc;
    if ((rc = bl_es_log_key(ws->st, p->rec.lsn, &ws->kbuf)) != 0)
        return rc;
    return put_full(ws, ws->kbuf.p, ws->kbuf.len, b + enc->rec_off, enc->rec_len);
}

size_t bl_es_wset_savepoint(const bl_es_wset *ws) { return ws->nundo; }

void bl_es_wset_rollback(bl_es_wset *ws, size_t savepoint)
{
    while (ws->nundo > savepoint) {
        undo *u = &ws->undos[--ws->nundo];
        ent *e = &ws->ents[u->idx];
        ws->bytes -= e->wlen;
        if (!u->written) {
            ws->nputs--;
            ws->bytes -= e->key_len;
        } else {
            ws->bytes += u->wlen;
        }
        e->written = u->written;
        e->wval = u->wval;
        e->wlen = u->wlen;
    }
}

size_t bl_es_wset_nputs(const bl_es_wset *ws) { return ws->nputs; }
size_t bl_es_wset_ncmps(const bl_es_wset *ws) { return ws->ncmps; }
size_t bl_es_wset_bytes(const bl_es_wset *ws) { return ws->bytes; }

int bl_es_wset_commit(bl_es_wset *ws, int64_t head_mod, const bl_etcd_op *extra,
                      size_t nextra, int *succeeded, int *retried, int64_t *revision)
{
    bl_etcd_cmp *cmps = calloc(ws->ncmps + 1, sizeof(*cmps));
    bl_etcd_op *ops = calloc(ws->nputs + nextra + 1, sizeof(*ops));
    bl_etcd_txn_result res = {0};
    bl_ebuf head = {0};
    size_t nc = 0, no = 0;
    int rc;

    *succeeded = *retried = 0;
    if (cmps == NULL || ops == NULL) {
        rc = BINDLOG_ENOMEM;
        goto out;
    }
    if ((rc = bl_es_key(ws->st, BL_ES_META, "head", 4, &head)) != 0)
        goto out;
    cmps[nc++] = (bl_etcd_cmp){.target = BL_ETCD_CMP_MOD, .result = BL_ETCD_EQUAL,
                               .key = head.p, .key_len = head.len, .number = head_mod};
    for (size_t i = 0; i < ws->n; i++) {
        const ent *e = &ws->ents[i];
        if (e->read)
            cmps[nc++] = (bl_etcd_cmp){
                .target = e->present ? BL_ETCD_CMP_MOD : BL_ETCD_CMP_CREATE,
                .result = BL_ETCD_EQUAL, .key = e->key, .key_len = e->key_len,
                .number = e->present ? e->mod : 0};
        if (e->written)
            ops[no++] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = e->key,
                                     .key_len = e->key_len, .value = e->wval,
                                     .value_len = e->wlen};
    }
    for (size_t i = 0; i < nextra; i++)
        ops[no++] = extra[i];
    rc = bl_etcd_txn(ws->st->c, cmps, nc, ops, no, NULL, 0, &res);
    *retried = res.retried;
    if (rc == 0) {
        *succeeded = res.succeeded;
        if (revision != NULL)
            *revision = res.revision;
    }
    /* what the bindings we wrote are bound to now */
    for (size_t i = 0; rc == 0 && *succeeded && i < ws->n; i++)
        if (ws->ents[i].written && is_binding_key(ws, &ws->ents[i]))
            hint_learn(ws, &ws->ents[i], ws->ents[i].wval, ws->ents[i].wlen);
out:
    bl_etcd_txn_result_free(&res);
    bl_ebuf_free(&head);
    free(cmps);
    free(ops);
    return rc;
}
