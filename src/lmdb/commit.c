/*
 * commit.c -- the write path: one group, one frame of the write-ahead log,
 * one flush (FULL), every caller its own outcome.
 *
 * Every mutating call becomes a request on the environment's group-commit
 * queue (core/group.c).  The leader of a group (run_group):
 *   1. takes the writers' lock (shared memory: across processes), and
 *      catches this process's index up to the log's written end, so that it
 *      decides against the newest state, whoever wrote it;
 *   2. decides each event with bl_decide() on an overlay view: the puts of
 *      this group so far, then the index's newest versions, then an LMDB
 *      snapshot (the index is pinned meanwhile: it must keep covering
 *      everything after that snapshot).  The split's compare-and-swap is
 *      this decision, under the lock, against the newest state;
 *   3. encodes every APPLIED event into the frame: its record, then its
 *      state after-images as puts (bl_plan_puts), and after the last one
 *      the group's meta puts (head, counts, store-wide statistics);
 *   4. makes room if the log is full (a checkpoint, in this thread: the
 *      only time a caller waits for one), writes the frame with one
 *      pwrite at the written end, links it into the index, records the new
 *      written end; in NORMAL and NONE it also publishes it as visible;
 *   5. releases the lock.
 * In FULL, `finish` then runs after leadership has passed on (the next
 * group is being decided meanwhile): one fdatasync of the log, then the
 * visible end moves over the group and its callers hear APPLIED.
 *
 * Rejections leave no trace: nothing is written until the frame, and a
 * batch whose event fails is cut out of the frame being built (its puts
 * and records rolled back).  A failed write is ENOSPC or EIO for the whole
 * group, with nothing published; the frame's header is then overwritten so
 * that recovery can never adopt a frame its callers were told failed (if
 * even that fails, durability is unknown: panic).  A failed flush is a
 * panic (BINDLOG_EPANIC): retrying a failed fsync is how data gets lost.
 */
#define _GNU_SOURCE
#include "lmdb/pagecheck.h"
#include "lmdb/walenv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL /* the overlay hashes every key it sees: no library calls */
#include <xxhash.h>

#include "core/error.h"
#include "core/failpoint.h"
#include "core/record.h"

/* ---- the frame being built, and its overlay ------------------------------ */

/* A put of the frame the overlay can answer for: offsets into buf (which
 * may move as it grows), and the hash of (table, key), kept so that a
 * probe compares it before any byte and a rehash never hashes again. */
typedef struct ovput {
    uint32_t koff, klen, voff, vlen;
    uint32_t hash;
    unsigned table;
} ovput;

struct bl_wbuild {
    unsigned char *buf; /* frame header, then body */
    size_t len, cap;
    ovput *puts;
    size_t nputs, pcap;
    uint32_t *slots;    /* index + 1 of the newest put of a key, 0 empty */
    size_t nslots;
    uint32_t nrec;
    /* where record i of the group lies in buf (its value), for the
     * reference values that name it (view_record) */
    struct recpos {
        uint32_t off, len;
    } *recs;
    size_t reccap;
};

typedef struct gstate {
    bl_env *e;
    struct bl_wbuild *b;
    MDB_txn *txn;
    bl_head head;
    bl_counts counts;
    bl_gstats gst;
    uint64_t applied;
} gstate;

static int buf_room(struct bl_wbuild *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    size_t n = b->cap ? b->cap : 4096;
    while (n < b->len + more)
        n *= 2;
    unsigned char *nb = realloc(b->buf, n);
    if (nb == NULL)
        return BINDLOG_ENOMEM;
    b->buf = nb;
    b->cap = n;
    return 0;
}

/* The overlay's hash of (table, key).  XXH3 costs a few dozen
 * instructions for a key of any length here; FNV-1a, a byte at a time, was
 * a fifth of apply_batch's instructions. */
static uint32_t ov_hash(unsigned table, const void *k, size_t kn)
{
    return (uint32_t)XXH3_64bits_withSeed(k, kn, table);
}

/* The slot of (table, key): the one holding it, or the empty one where it
 * would go.  Linear probing; the table is at most half full. */
static size_t ov_slot(const struct bl_wbuild *b, uint32_t h, unsigned table, const void *k,
                      size_t kn)
{
    size_t i = (size_t)h & (b->nslots - 1);
    while (b->slots[i] != 0) {
        const ovput *p = &b->puts[b->slots[i] - 1];
        if (p->hash == h && p->table == table && p->klen == kn &&
            memcmp(b->buf + p->koff, k, kn) == 0)
            break;
        i = (i + 1) & (b->nslots - 1);
    }
    return i;
}

/* Rebuild the slots over the puts (the stored hashes: no key is read);
 * a later put of a key replaces an earlier one, as in add_entry. */
static int ov_rehash(struct bl_wbuild *b, size_t nslots)
{
    if (nslots != b->nslots) {
        uint32_t *s = calloc(nslots, sizeof(*s));
        if (s == NULL)
            return BINDLOG_ENOMEM;
        free(b->slots);
        b->slots = s;
        b->nslots = nslots;
    } else {
        memset(b->slots, 0, nslots * sizeof(*b->slots));
    }
    for (size_t i = 0; i < b->nputs; i++) {
        const ovput *p = &b->puts[i];
        b->slots[ov_slot(b, p->hash, p->table, b->buf + p->koff, p->klen)] = (uint32_t)i + 1;
    }
    return 0;
}

/* The tables whose newest values the group reads back (lookup); a frame
 * carries no other (formats 6 and 7 link children through the sessions). */
static int ov_wanted(unsigned table)
{
    return table == BL_DB_BINDINGS || table == BL_DB_SESSIONS || table == BL_DB_META;
}

/* Append an entry to the body; for a put, register it in the overlay. */
static int add_entry(struct bl_wbuild *b, unsigned kind, unsigned table, const void *k,
                     size_t kn, const void *v, size_t vn)
{
    int rc;
    if ((rc = buf_room(b, BL_WE_HDR + kn + vn)) != 0)
        return rc;
    bl_wentry_hdr(b->buf + b->len, kind, table, kn, vn);
    size_t koff = b->len + BL_WE_HDR;
    if (kn)
        memcpy(b->buf + koff, k, kn);
    if (vn)
        memcpy(b->buf + koff + kn, v, vn);
    b->len = koff + kn + vn;
    if (kind != BL_WE_PUT || !ov_wanted(table))
        return 0;
    if (b->nputs == b->pcap) {
        size_t n = b->pcap ? 2 * b->pcap : 64;
        ovput *np = realloc(b->puts, n * sizeof(*np));
        if (np == NULL)
            return BINDLOG_ENOMEM;
        b->puts = np;
        b->pcap = n;
    }
    if ((b->nputs + 1) * 2 > b->nslots && (rc = ov_rehash(b, b->nslots * 2)) != 0)
        return rc;
    uint32_t h = ov_hash(table, k, kn);
    size_t s = ov_slot(b, h, table, k, kn);
    b->puts[b->nputs] = (ovput){(uint32_t)koff, (uint32_t)kn, (uint32_t)(koff + kn),
                                (uint32_t)vn, h, table};
    b->slots[s] = (uint32_t)++b->nputs;
    return 0;
}

/* The group's next record, placed where view_record finds it. */
static int add_record(struct bl_wbuild *b, const void *v, size_t vn)
{
    if (b->nrec == b->reccap) {
        size_t n = b->reccap ? 2 * b->reccap : 64;
        struct recpos *nr = realloc(b->recs, n * sizeof(*nr));
        if (nr == NULL)
            return BINDLOG_ENOMEM;
        b->recs = nr;
        b->reccap = n;
    }
    int rc = add_entry(b, BL_WE_RECORD, 0, NULL, 0, v, vn);
    if (rc == 0)
        b->recs[b->nrec] = (struct recpos){(uint32_t)(b->len - vn), (uint32_t)vn};
    return rc;
}

static int build_reset(struct bl_wbuild *b)
{
    /* Size the slots for a group like the previous one: a run of
     * 1,000-event batches keeps the slots it grew to (regrowing them from
     * 64 at every group was a tenth of apply_batch), and single events
     * after a batch do not clear thousands of slots per group. */
    size_t fit = 64;
    while (fit < 2 * (b->nputs + 1))
        fit *= 2;
    b->len = BL_WAL_FRAME_HDR;
    b->nputs = 0;
    b->nrec = 0;
    if (b->nslots == 0 || b->nslots > 8 * fit) {
        int rc = ov_rehash(b, fit);
        if (rc != 0)
            return rc;
    } else {
        memset(b->slots, 0, b->nslots * sizeof(*b->slots));
    }
    return buf_room(b, 0);
}

/* ---- the overlay view --------------------------------------------------------- */

/* (table, key) in the group's LMDB snapshot. */
static int lookup_lmdb(gstate *g, unsigned table, const void *k, size_t kn, const void **v,
                       size_t *vn)
{
    int rc;
    /* Until the whole-store walk has passed the file (a process's first
     * groups may run before its verdict), LMDB is read the way readers
     * read it: our own bounds-checked search, which names a damaged page
     * instead of following it.  After, every page is known good. */
    MDB_val key = {kn, (void *)k}, val;
    if (atomic_load_explicit(&g->e->wal->store_checked, memory_order_acquire)) {
        rc = mdb_get(g->txn, g->e->dbi[table], &key, &val);
        if (rc != 0)
            return bl_mdb_error(rc);
    } else if ((rc = bl_pc_get(g->e, g->txn, (int)table, &key, &val)) != 0) {
        return rc;
    }
    *v = val.mv_data;
    *vn = val.mv_size;
    return 0;
}

/* The newest value of (table, key): this group's puts, then the index
 * (every frame written, flushed or not: the leader decides against the
 * newest state), then LMDB.  *v points into the frame, the index or the
 * map; valid until the group ends (the frame: until it grows; the index:
 * pinned while the group is decided). */
static int lookup(gstate *g, unsigned table, const void *k, size_t kn, const void **v,
                  size_t *vn)
{
    struct bl_wbuild *b = g->b;
    size_t s = ov_slot(b, ov_hash(table, k, kn), table, k, kn);
    if (b->slots[s] != 0) {
        const ovput *p = &b->puts[b->slots[s] - 1];
        *v = b->buf + p->voff;
        *vn = p->vlen;
        return 0;
    }
    /* run_group pins the index while it decides: the value stays where
     * it is until then */
    if (bl_wal_tail_peek(g->e, table, k, kn, v, vn))
        return 0;
    return lookup_lmdb(g, table, k, kn, v, vn);
}

static int view_binding(void *ctx, const char *key, size_t len, bl_bval *out)
{
    const void *v = NULL;
    size_t n = 0;
    int rc = lookup(ctx, BL_DB_BINDINGS, key, len, &v, &n);
    return rc != 0 ? rc : bl_bval_decode(v, n, out);
}

/* What a reference names: a session's creating record is in the group,
 * among the index's kept records, in the index or in LMDB; a base image is
 * only ever in LMDB. */
static int view_ref(void *ctx, int what, uint64_t lsn, const char *id, size_t id_len,
                    const void **v, size_t *n)
{
    gstate *g = ctx;
    struct bl_wbuild *b = g->b;
    if (what == BL_REF_BASE)
        return lookup(g, BL_DB_BASE_SESSIONS, id, id_len, v, n);
    uint64_t first = g->head.lsn - b->nrec + 1; /* the group's own records */
    if (b->nrec != 0 && lsn >= first && lsn <= g->head.lsn) {
        const struct recpos *r = &b->recs[lsn - first];
        *v = b->buf + r->off;
        *n = r->len;
        return BL_REF_VERIFIED; /* encoded by this group */
    }
    unsigned char kb[8];
    bl_put64be(kb, lsn);
    /* the kept records (the newest, past the checkpoint too), the tail's
     * map: copies of frames whose checksums were verified (or that this
     * process wrote); else LMDB's page, checked as it is decoded */
    if (bl_tail_kept(&g->e->wal->tail, lsn, v, n) ||
        bl_wal_tail_peek(g->e, BL_DB_LOG, kb, 8, v, n))
        return BL_REF_VERIFIED;
    return lookup_lmdb(g, BL_DB_LOG, kb, 8, v, n);
}

static int view_session(void *ctx, const char *id, size_t len, bl_sval *out)
{
    const void *v = NULL;
    size_t n = 0;
    int rc = lookup(ctx, BL_DB_SESSIONS, id, len, &v, &n);
    return rc != 0 ? rc : bl_sval_read(v, n, id, len, view_ref, ctx, out);
}

/* The group's starting point: head, counts and statistics, through the
 * same view (the newest frame's meta puts, or LMDB's). */
static int read_meta(gstate *g)
{
    const void *v = NULL;
    size_t n = 0;
    int rc;

    memset(&g->head, 0, sizeof(g->head));
    memset(&g->counts, 0, sizeof(g->counts));
    memset(&g->gst, 0, sizeof(g->gst));
    if ((rc = lookup(g, BL_DB_META, "head", 4, &v, &n)) == 0)
        rc = bl_head_decode(v, n, &g->head);
    if (rc != 0 && rc != BINDLOG_ENOTFOUND)
        return rc;
    if ((rc = lookup(g, BL_DB_META, "counts", 6, &v, &n)) == 0) {
        if (!bl_counts_len_ok(n))
            return bl_err_set(BINDLOG_ECORRUPT, "meta \"counts\" is %zu bytes", n);
        bl_counts_decode(v, n, &g->counts);
    } else if (rc != BINDLOG_ENOTFOUND) {
        return rc;
    }
    if ((rc = lookup(g, BL_DB_META, "stats", 5, &v, &n)) == 0)
        rc = bl_gstats_decode(v, n, &g->gst);
    return rc == BINDLOG_ENOTFOUND ? 0 : rc;
}

/* ---- deciding ------------------------------------------------------------------ */

static void fill_result(bindlog_result *r, const bl_plan *p)
{
    r->outcome = p->outcome;
    r->lsn = p->outcome == BINDLOG_APPLIED ? p->rec.lsn : 0;
    r->generation = p->after.generation;
    memcpy(r->session_id, p->after.sid, p->after.sid_len);
    r->session_id[p->after.sid_len] = '\0';
}

static int put_entry(void *ctx, unsigned table, const void *k, size_t kn, const void *v,
                     size_t vn)
{
    return add_entry(ctx, BL_WE_PUT, table, k, kn, v, vn);
}

/*
 * Decide one event and add it to the frame.  Returns the outcome or a
 * per-event error (nothing added); a failure to build the frame is also
 * stored in *fatal.
 */
static int apply_one(gstate *g, bindlog *h, const bl_event *ev, bindlog_result *res, char *why,
                     int *fatal)
{
    bl_view view = {g, view_binding, view_session};
    bl_plan plan;
    int64_t t_ms = ev->time_ms != 0 ? ev->time_ms : bl_now_ms(h); /* 0: the clock */
    int rc;

    if (t_ms < g->head.time_ms)
        t_ms = g->head.time_ms; /* the wall clock went back: keep the log monotonic */
    rc = bl_decide(&view, ev, g->head.lsn + 1, t_ms, &plan);
    if (rc < 0) {
        bl_plan_explain(&plan, rc, why, BL_GREQ_MSG_MAX);
        return rc;
    }
    if (res != NULL)
        fill_result(res, &plan); /* before the frame grows under what plan points at */
    if (ev->route_out != NULL && plan.route_outcome != 0)
        bl_route_fill(&plan, ev->route_out); /* ROUTED may also be coalesced (ALREADY) */
    if (rc != BINDLOG_APPLIED)
        return rc;
    g->e->enc.ref_ok = BL_SVAL_REF; /* the sessions it creates refer to this record */
    g->e->enc.links = 1;
    if ((rc = bl_plan_encode(&plan, &g->e->enc)) != 0 ||
        (rc = add_record(g->b, g->e->enc.buf + g->e->enc.rec_off, g->e->enc.rec_len)) != 0 ||
        (rc = bl_plan_puts(&plan, &g->e->enc, put_entry, g->b)) != 0 ||
        (rc = BL_FAILPOINT("commit.append")) != 0) {
        *fatal = rc;
        return rc;
    }
    g->b->nrec++;
    g->head.lsn++;
    g->head.time_ms = t_ms;
    bl_counts_apply(&g->counts, &plan);
    g->applied++;
    return BINDLOG_APPLIED;
}

typedef struct mark {
    size_t len, nputs;
    uint32_t nrec;
    bl_head head;
    bl_counts counts;
    uint64_t applied;
} mark;

/* Apply a request's events; returns 1 if it wrote anything.  A batch
 * that fails is cut out of the frame again. */
static int apply_req(gstate *g, bl_greq *r, int *fatal)
{
    struct bl_wbuild *b = g->b;
    mark m = {b->len, b->nputs, b->nrec, g->head, g->counts, g->applied};
    int wrote = 0, rc;

    r->rc = 0;
    r->err_index = 0;
    for (size_t i = 0; i < r->n; i++) {
        rc = apply_one(g, r->h, &r->ev[i], r->out ? &r->out[i] : NULL, r->msg, fatal);
        r->outcomes[i] = rc;
        if (rc < 0) {
            r->rc = rc;
            r->err_index = i;
            break;
        }
        wrote |= rc == BINDLOG_APPLIED;
    }
    if (r->rc == 0 || *fatal)
        return wrote;
    /* all or nothing: roll the batch back */
    b->len = m.len;
    b->nputs = m.nputs;
    b->nrec = m.nrec;
    g->head = m.head;
    g->counts = m.counts;
    g->applied = m.applied;
    if ((rc = ov_rehash(b, b->nslots)) != 0)
        *fatal = rc;
    return 0;
}

/* ---- writing --------------------------------------------------------------------- */

/* Overwrite the header of a frame whose write failed, so that no recovery
 * ever adopts it.  0 or the write's error. */
static int unwrite(bl_walenv *w, uint64_t pos)
{
    unsigned char z[BL_WAL_FRAME_HDR];
    memset(z, 0, sizeof z);
    return bl_wal_pwrite(w->fd, w->cap, pos, z, sizeof z);
}

/* Withdraw a frame whose callers will hear that it failed: overwrite its
 * header (and the WRAP frame's before it, at wpos, if wrap), then, unless
 * the store runs without flushes, make that durable, so that no recovery,
 * after a crash or a power loss, ever adopts it.  1 if withdrawn, 0 if
 * that failed too (the state of the disk is then unknown). */
static int withdraw(bl_walenv *w, uint64_t fpos, int wrap, uint64_t wpos, int durability)
{
    int ok = unwrite(w, fpos) == 0 && (!wrap || unwrite(w, wpos) == 0);
    if (ok && durability != BINDLOG_DURABILITY_NONE && bl_wal_sync(w->fd) != 0)
        ok = 0;
    bl_err_clear();
    return ok;
}

/* Where the frame goes after `end`: *fpos, and whether a WRAP frame must
 * go at end.pos first. */
static void place(const bl_walenv *w, const bl_wal_at *end, uint64_t size, uint64_t *fpos,
                  int *wrap)
{
    uint64_t off = end->pos % w->cap;
    *wrap = off + size + BL_WAL_FRAME_HDR > w->cap;
    *fpos = *wrap ? (end->pos / w->cap + 1) * w->cap : end->pos;
}

/* Room for `size` bytes after end, given the checkpoint (I4)?  The new
 * end, plus a WRAP frame it may need later, must not pass the checkpoint
 * position one lap on. */
static int room(const bl_walenv *w, const bl_wal_at *end, uint64_t size)
{
    uint64_t fpos;
    bl_wal_at ck;
    int wrap;
    if (bl_shm_get_ckpt(w->shm.m, &ck) != 0)
        return 0; /* damaged: make_room's checkpoint rebuilds it */
    place(w, end, size, &fpos, &wrap);
    return fpos + size + BL_WAL_FRAME_HDR <= ck.pos + w->cap;
}

/* Make room for the frame (the log is full): first wait for the
 * checkpoint in progress, if any (the background thread's, as a rule: it
 * is folding the log's older part, and once it commits the frame fits and
 * the thread goes on with the rest while this leader writes); only if that
 * left no room, checkpoint in this thread.  0, ENOSPC with a detail, or
 * EBUSY when a stopped checkpointer holds its lock past the bound. */
static int make_room(bl_env *e, const bl_wal_at *end, uint64_t size)
{
    bl_walenv *w = e->wal;
    int rc;
    if (size + 2 * BL_WAL_FRAME_HDR > w->cap / 2)
        return bl_err_set(BINDLOG_ENOSPC,
                          "the group's frame is %llu bytes, more than half of the %llu-byte "
                          "log: apply the batch in smaller parts, or open the store with a "
                          "larger log_size",
                          (unsigned long long)size, (unsigned long long)w->cap);
    for (int tries = 0; !room(w, end, size); tries++) {
        if (tries >= 3)
            return bl_err_set(BINDLOG_ENOSPC, "the log is full and could not be checkpointed");
        bl_err_clear();
        if (tries == 0) {
            /* a checkpointer that stays inside its fold (stopped) past the
             * bound: BINDLOG_EBUSY naming it, not a wait for ever */
            if ((rc = bl_ckpt_settle(e)) == BINDLOG_EBUSY)
                return rc;
            if (rc == 0 && room(w, end, size))
                break;
        }
        bl_err_clear();
        if ((rc = bl_ckpt_run(e, 1)) != 0) {
            char why[BL_ERRMSG_MAX];
            if (rc == BINDLOG_EPANIC || rc == BINDLOG_EBUSY)
                return rc;
            snprintf(why, sizeof why, "%s", bl_err_isset() ? bl_err_get() : bindlog_strerror(rc));
            return bl_err_set(BINDLOG_ENOSPC,
                              "the log is full and the checkpoint that would free it failed "
                              "(%s: %s)",
                              bindlog_code_name(rc), why);
        }
    }
    return 0;
}

/* Write the frame in b->buf (header filled here) after `end`; *after gets
 * the new end.  0 or BINDLOG_E*. */
static int write_frame(bl_env *e, struct bl_wbuild *b, const bl_wal_at *end, int64_t time_ms,
                       uint64_t first_lsn, int durability, bl_wal_at *after, bl_wframe *f)
{
    bl_walenv *w = e->wal;
    uint64_t body = b->len - BL_WAL_FRAME_HDR, size = bl_wframe_size(body), fpos, chain;
    int wrap, rc;

    if ((rc = buf_room(b, size - b->len)) != 0)
        return rc;
    memset(b->buf + b->len, 0, size - b->len); /* padding */
    place(w, end, size, &fpos, &wrap);
    chain = end->chain;
    /* how far the log is known flushed: a frame after a break that says
     * more than the break's position proves the break is damage */
    uint64_t durable_pos = atomic_load(&w->shm.m->durable);
    if (durable_pos > end->pos)
        durable_pos = end->pos; /* a stray write: never claim more than was written */
    if (wrap) {
        unsigned char hw[BL_WAL_FRAME_HDR];
        if ((rc = BL_FAILPOINT("wal.recycle")) != 0)
            return rc;
        chain = bl_wframe_seal(hw, BL_WF_WRAP, w->salt, end->pos, first_lsn, 0, 0, time_ms,
                               durable_pos, chain);
        if ((rc = bl_wal_pwrite(w->fd, w->cap, end->pos, hw, sizeof hw)) != 0)
            return rc;
    }
    chain = bl_wframe_seal(b->buf, 0, w->salt, fpos, first_lsn, b->nrec, (uint32_t)body,
                           time_ms, durable_pos, chain);
    rc = BL_FAILPOINT("wal.append");
    /* cppcheck-suppress knownConditionTrueFalse ; BL_FAILPOINT() is 0 without failpoints */
    if (rc == 0)
        rc = bl_wal_pwrite(w->fd, w->cap, fpos, b->buf, size);
    if (rc != 0) {
        /* The callers hear it failed: it must never be found as a frame.
         * A write cut short by a full disk cannot have completed the frame
         * (its checksum covers every byte); anything else might have, so
         * it is withdrawn, and if even that fails the state of the disk is
         * unknown. */
        int undone = withdraw(w, fpos, wrap, end->pos, durability);
        if (!undone && rc != BINDLOG_ENOSPC)
            return bl_group_panic(&e->g,
                                  "%s: writing the group's frame at position %llu failed "
                                  "(%s), and so did withdrawing it",
                                  BL_WAL_FILE, (unsigned long long)fpos, bindlog_strerror(rc));
        return bl_err_set(rc, "%s: writing the group's frame (%llu bytes at position %llu) "
                              "failed: %s",
                          BL_WAL_FILE, (unsigned long long)size, (unsigned long long)fpos,
                          rc == BINDLOG_ENOSPC ? "no space left on the device"
                                               : "input/output error");
    }
    *after = (bl_wal_at){first_lsn + b->nrec - 1, fpos + size, chain};
    f->flags = 0;
    f->salt = w->salt;
    f->pos = fpos;
    f->first_lsn = first_lsn;
    f->nrec = b->nrec;
    f->body_len = (uint32_t)body;
    f->time_ms = time_ms;
    f->sum = chain;
    f->body = b->buf + BL_WAL_FRAME_HDR;
    return 0;
}

/* Link our own frame into the index (a WRAP frame before it needs no
 * entry: the index's end simply moves past both). */
static int link_own(bl_walenv *w, const bl_wframe *f, const bl_wal_at *after)
{
    bl_tgroup *g = bl_tgroup_make(f, after);
    if (g == NULL)
        return BINDLOG_ENOMEM;
    int rc = bl_tail_link(&w->tail, g);
    if (rc != 0)
        bl_tgroup_unref(g);
    return rc;
}

/* ---- the group --------------------------------------------------------------- */

static int build_group(gstate *g, bl_greq *group, int *durability)
{
    int fatal = 0, rc;
    *durability = BINDLOG_DURABILITY_NONE;
    if ((rc = read_meta(g)) != 0)
        return rc;
    if ((rc = BL_FAILPOINT("commit.begin")) != 0)
        return rc;
    for (bl_greq *r = group; r != NULL && !fatal; r = r->next) {
        if (r != group && (fatal = BL_FAILPOINT("commit.group")) != 0)
            break; /* between two requests of one group */
        if (apply_req(g, r, &fatal) && r->h->durability < *durability)
            *durability = r->h->durability;
    }
    if (fatal)
        return fatal;
    if (g->applied == 0)
        return 0;
    /* the group's meta puts, tagged with its last record */
    unsigned char hb[BL_HEAD_BYTES], cb[BL_COUNTS_BYTES], sb[BL_GSTATS_BYTES];
    g->gst.commits++;
    g->gst.grouped_events += g->applied;
    bl_head_encode(hb, &g->head);
    size_t cn = bl_counts_encode(cb, &g->counts);
    bl_gstats_encode(sb, &g->gst);
    if ((rc = add_entry(g->b, BL_WE_PUT, BL_DB_META, "head", 4, hb, sizeof hb)) != 0 ||
        (rc = add_entry(g->b, BL_WE_PUT, BL_DB_META, "counts", 6, cb, cn)) != 0 ||
        (rc = add_entry(g->b, BL_WE_PUT, BL_DB_META, "stats", 5, sb, sizeof sb)) != 0)
        return rc;
    return 0;
}

/*
 * Commit one group.  Runs without the queue lock: only the leader touches
 * w->build and e->enc.  Returns 1 when the group must still be flushed by
 * finish_group (FULL).
 */
static int run_group(void *ctx, bl_greq *group)
{
    bl_env *e = ctx;
    bl_walenv *w = e->wal;
    gstate g = {e, w->build, NULL, {0, 0}, {{0}, 0, 0}, {0, 0}, 0};
    bl_wal_at end, after;
    bl_wframe f;
    int rc, durability = BINDLOG_DURABILITY_NONE;

    if (bl_group_panicked(&e->g)) {
        rc = bl_group_panic_again(&e->g);
        goto fail;
    }
    /* a damaged LMDB file takes no write once the whole-store walk has
     * found the damage (docs/design.md, "Damaged files").  The walk runs
     * once per process, in the background from open, and a group does not
     * wait for it: a commit writes only the log, and the checkpoint, the
     * one writer of data.mdb, waits for the verdict and refuses a damaged
     * file (ckpt.c).  Without a background walk (manual checkpoints, or a
     * walk stopped short) the first group walks itself, as before. */
    if (!atomic_load_explicit(&w->store_checked, memory_order_acquire) &&
        (rc = bl_ckpt_walk_wait(e, 0)) != 0)
        goto fail;
    if (g.b == NULL) {
        if ((g.b = w->build = calloc(1, sizeof(*g.b))) == NULL) {
            rc = BINDLOG_ENOMEM;
            goto fail;
        }
    }
    if ((rc = bl_wal_lock(e)) != 0)
        goto fail;
    bl_shm_get_end(w->shm.m, &end); /* checked by bl_wal_lock */
    if ((rc = bl_wal_catch_up(e, end.lsn)) != 0)
        goto unlock;
    bl_srw_rdlock(&w->tail.lock);
    bl_wal_at iend = w->tail.end;
    bl_srw_rdunlock(&w->tail.lock);
    if (iend.pos != end.pos || iend.lsn != end.lsn) {
        rc = bl_err_set(BINDLOG_ECORRUPT,
                        "the log's written end (LSN %llu at %llu) is not where this "
                        "process's index ends (LSN %llu at %llu)",
                        (unsigned long long)end.lsn, (unsigned long long)end.pos,
                        (unsigned long long)iend.lsn, (unsigned long long)iend.pos);
        goto unlock;
    }

    /* decide, against a pinned index over an LMDB snapshot */
    bl_tail_pin(&w->tail);
    rc = bl_read_begin(e, &g.txn);
    if (rc == 0) {
        rc = build_reset(g.b);
        if (rc == 0)
            rc = build_group(&g, group, &durability);
        bl_read_end(e, g.txn);
    }
    bl_tail_unpin(&w->tail);
    if (rc == 0 && g.applied == 0) {
        bl_wal_unlock(e);
        return 0; /* every event was refused: nothing to write */
    }
    if (rc == 0 && g.head.lsn != end.lsn + g.applied)
        rc = bl_err_set(BINDLOG_ECORRUPT,
                        "meta \"head\" says LSN %llu, the log's end %llu",
                        (unsigned long long)(g.head.lsn - g.applied), (unsigned long long)end.lsn);
    if (rc != 0)
        goto unlock;
    if ((rc = BL_FAILPOINT("commit.before")) != 0)
        goto unlock;

    /* room, then the write */
    uint64_t size = bl_wframe_size(g.b->len - BL_WAL_FRAME_HDR);
    if ((rc = make_room(e, &end, size)) != 0)
        goto unlock;
    if (durability != BINDLOG_DURABILITY_NONE &&
        atomic_load(&w->shm.m->ckpt_unsynced)) {
        /* a NONE-mode checkpointer left LMDB unsynced: sync it before its
         * checkpoint's log space is overwritten (I4) */
        if (mdb_env_sync(e->env, 1) != 0) {
            rc = bl_err_set(BINDLOG_EIO, "data.mdb: sync before reusing log space failed");
            goto unlock;
        }
        bl_shm_store32(&w->shm.m->ckpt_unsynced, 0);
    }
    if ((rc = write_frame(e, g.b, &end, g.head.time_ms, end.lsn + 1, durability, &after,
                          &f)) != 0)
        goto unlock;
    if (link_own(w, &f, &after) != 0) {
        /* written, but this process has no memory to index it: nobody has
         * seen it yet (the shared end has not moved), so it is withdrawn
         * and the group fails; if that fails, panic */
        if (!withdraw(w, f.pos, f.pos != end.pos, end.pos, durability)) {
            rc = bl_group_panic(&e->g,
                                "%s: no memory to index the group's frame, and "
                                "withdrawing it failed",
                                BL_WAL_FILE);
            goto unlock;
        }
        rc = bl_err_set(BINDLOG_ENOMEM, "no memory to index the group's frame (withdrawn)");
        goto unlock;
    }
    bl_shm_set_end(w->shm.m, &after);
    /* the frame's blocks are written now: the zero-fill need not go there.
     * `filled` only ever grows: the filler works ahead of the writers, and
     * a frame that lands behind its frontier must not pull it back (it
     * would then zero the same bytes again, from the tail, with a flush
     * each time).  Every change is under the writers' lock. */
    uint64_t reach = after.pos < w->cap ? after.pos : w->cap;
    if (atomic_load(&w->shm.m->filled) < reach)
        bl_shm_store64(&w->shm.m->filled, reach);
    if (BL_FAILPOINT("commit.after") != 0) {
        /* eio here stands for a write that reported failure after it was
         * all done: the frame may or may not be there */
        bl_wal_unlock(e);
        rc = bl_group_panic(&e->g,
                            "%s: the group's frame write reported a failure after it "
                            "was done (failpoint commit.after)",
                            BL_WAL_FILE);
        goto fail;
    }
    if (durability != BINDLOG_DURABILITY_FULL)
        bl_shm_publish(w->shm.m, after.lsn);
    bl_wal_unlock(e);
    bl_group_committed(&e->g);
    if (atomic_load_explicit(&w->want_thread, memory_order_relaxed) &&
        atomic_exchange(&w->want_thread, 0) && bl_ckpt_start(e) != 0)
        atomic_store(&w->want_thread, 1); /* no thread: the next group tries again */
    if (bl_wal_used(e) >= w->trigger)
        bl_ckpt_kick(e);
    return durability == BINDLOG_DURABILITY_FULL;

unlock:
    bl_wal_unlock(e);
fail:
    bl_group_fail(group, rc);
    return 0;
}

/* FULL: one flush of the log, after leadership went to the next group;
 * then everything written before the flush began becomes visible.  A
 * failure leaves durability unknown: never retry, panic. */
static int finish_group(void *ctx, bl_greq *group)
{
    bl_env *e = ctx;
    bl_walenv *w = e->wal;
    bl_wal_at end;
    (void)group;
    int rc = bl_wal_end(e, &end);
    if (rc != 0)
        return rc;
    rc = BL_FAILPOINT("wal.flush");
    /* cppcheck-suppress knownConditionTrueFalse ; BL_FAILPOINT() is 0 without failpoints */
    if (rc == 0)
        rc = bl_wal_sync(w->fd);
    if (rc == 0 && BL_FAILPOINT("commit.synced") != 0)
        rc = BINDLOG_EIO;
    if (rc != 0)
        return bl_group_panic(&e->g, "%s",
                              bl_err_isset() ? bl_err_get() : "flushing the log failed");
    bl_wal_flushed(e, end.pos);
    bl_shm_publish(w->shm.m, end.lsn);
    return 0;
}

/* While the whole-store walk reads a cold file ahead (from a writable
 * open to the end of its read, at most its first 50 ms), the callers inside
 * a commit are counted, and it holds its reads while they read and flush
 * (pagecheck_env.c, read_ahead).  Only then: the rest of the time a commit
 * pays one load, not two writes to a line every writer shares. */
static int commit_in(bindlog *h)
{
    if (!bl_pc_reading_ahead(h->e))
        return 0;
    atomic_fetch_add_explicit(&h->e->wal->committing, 1, memory_order_relaxed);
    return 1;
}

static void commit_out(bl_walenv *w, int counted)
{
    if (counted)
        atomic_fetch_sub_explicit(&w->committing, 1, memory_order_relaxed);
}

int bl_commit(bindlog *h, const bl_event *ev, size_t n, bindlog_result *out, size_t *err_index)
{
    bl_walenv *w = h->e->wal;
    if (w->shm.m == NULL)
        return bl_err_set(BINDLOG_EREADONLY, "the store is open without its shared memory");
    int counted = commit_in(h);
    int rc = bl_group_submit(&h->e->g, h, ev, n, out, err_index, run_group, finish_group, h->e);
    commit_out(w, counted);
    return rc;
}

int bl_commit_each(bindlog *h, const bl_event *ev, size_t n, bindlog_result *out, int *codes,
                   char *msgs)
{
    bl_walenv *w = h->e->wal;
    if (w->shm.m == NULL)
        return bl_err_set(BINDLOG_EREADONLY, "the store is open without its shared memory");
    int counted = commit_in(h);
    int rc =
        bl_group_submit_each(&h->e->g, h, ev, n, out, codes, msgs, run_group, finish_group, h->e);
    commit_out(w, counted);
    return rc;
}

void bl_commit_free(struct bl_wbuild *b)
{
    if (b == NULL)
        return;
    free(b->buf);
    free(b->puts);
    free(b->slots);
    free(b->recs);
    free(b);
}
