/*
 * replay.c -- replay, check and time lookup over a store's log.
 *
 * Replay rebuilds a state from the base image and the log.  It never trusts
 * a stored record: bl_replay_one() re-decides the event the record stands
 * for against the state replayed so far and requires the state machine to
 * produce the very same bytes.  A damaged, reordered or forged record is
 * therefore reported at its LSN instead of being applied.
 *
 * Memory stays flat: the source is read through one read transaction (one
 * consistent snapshot) and the result is built in an LMDB store on disk (a
 * new store for bindlog_replay, a scratch store under $TMPDIR for
 * bindlog_check), in write transactions of BL_CHUNK_RECORDS records with no
 * sync until the end.  Between chunks the source's map lock is released so
 * that writers of this process can grow the map; a chunk that fills the
 * target's map is aborted, the map grown and the chunk redone.
 *
 * Check replays into the scratch store with the children and history
 * indexes maintained, then walks the stored and the replayed tables side by
 * side (both are in key order), which names the first differing key of the
 * bindings, sessions, children and history tables in one sequential pass.
 */
#define _GNU_SOURCE
#include "lmdb/pagecheck.h"
#include "maint/maint.h"
#include "lmdb/tail.h"
#include "lmdb/walenv.h"

#include "core/error.h"
#include "lmdb/limits.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- base image meta ------------------------------------------------------ */

int bl_base_get(bl_env *e, MDB_txn *txn, bl_base *b)
{
    MDB_val k = {11, "base_counts"}, v;
    uint64_t t;
    int rc;

    memset(b, 0, sizeof(*b));
    if ((rc = bl_meta_get_u64(e, txn, "base", &b->lsn)) != 0 ||
        (rc = bl_meta_get_u64(e, txn, "base_time", &t)) != 0)
        return rc;
    b->time_ms = (int64_t)t;
    rc = mdb_get(txn, e->dbi[BL_DB_META], &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc != 0)
        return bl_mdb_error(rc);
    if (!bl_counts_len_ok(v.mv_size))
        return BINDLOG_ECORRUPT;
    bl_counts_decode(v.mv_data, v.mv_size, &b->counts);
    return 0;
}

int bl_base_put(bl_env *e, MDB_txn *txn, const bl_base *b)
{
    unsigned char buf[BL_COUNTS_BYTES];
    MDB_val k = {11, "base_counts"}, v = {sizeof(buf), buf};
    int rc;

    if ((rc = bl_meta_put_u64(e, txn, "base", b->lsn)) != 0 ||
        (rc = bl_meta_put_u64(e, txn, "base_time", (uint64_t)b->time_ms)) != 0)
        return rc;
    v.mv_size = bl_counts_encode(buf, &b->counts);
    return mdb_put(txn, e->dbi[BL_DB_META], &k, &v, 0);
}

/* ---- write transactions -------------------------------------------------- */

int bl_wtxn_begin(bl_env *e, MDB_txn **txn)
{
    for (int tries = 0;; tries++) {
        bl_map_rdlock(e);
        int rc = mdb_txn_begin(e->env, NULL, 0, txn);
        if (rc == 0)
            return 0;
        bl_map_unlock(e);
        if (rc != MDB_MAP_RESIZED || tries > 8)
            return bl_mdb_error(rc);
        /* another process grew the map: adopt its size and retry */
        if ((rc = bl_env_resize(e, 1)) != 0)
            return rc;
    }
}

void bl_wtxn_abort(bl_env *e, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    bl_map_unlock(e);
}

int bl_wtxn_commit(bl_env *e, MDB_txn *txn, int *map_full)
{
    int rc = mdb_txn_commit(txn);
    /* A write that ran out of room (ENOSPC, or the EIO of a short write on
     * a full file system) before LMDB wrote its meta page changed nothing
     * durable: the pages went to free space no meta page names, and LMDB
     * has not given up on the environment.  Only then is it "no space";
     * anything else may have half-reached the disk. */
    int code = rc == 0 || rc == MDB_MAP_FULL ? 0 : bl_write_error(e, rc);
    int fatal = code == BINDLOG_ENOSPC && bl_env_fatal(e);
    bl_map_unlock(e);
    *map_full = rc == MDB_MAP_FULL;
    if (rc == 0)
        return 0;
    if (rc == MDB_MAP_FULL || (code == BINDLOG_ENOSPC && !fatal))
        return BINDLOG_ENOSPC; /* nothing reached the meta page */
    /* The commit failed after writing: as in commit.c, never carry on.
     * What failed is kept for a caller to whom this store is its own
     * scratch (replay's new store: an ENOMEM stays an ENOMEM there). */
    int none = 0;
    atomic_compare_exchange_strong(&e->g.panic_code, &none, code != 0 ? code : BINDLOG_EIO);
    return bl_group_panic(&e->g, "data.mdb: a commit failed after writing: %s", mdb_strerror(rc));
}

/* ---- re-deriving one record ------------------------------------------------ */

void bl_replayer_init(bl_replayer *r, uint64_t next_lsn, int64_t last_time,
                      const bl_counts *counts)
{
    memset(r, 0, sizeof(*r));
    r->next_lsn = next_lsn;
    r->last_time = last_time;
    r->to_time = INT64_MAX;
    if (counts != NULL)
        r->counts = *counts;
}

void bl_replayer_free(bl_replayer *r)
{
    free(r->enc.buf);
    r->enc.buf = NULL;
    r->enc.cap = 0;
}

void bl_replayer_save(const bl_replayer *r, bl_replay_mark *m)
{
    m->next_lsn = r->next_lsn;
    m->applied = r->applied;
    m->last_time = r->last_time;
    m->counts = r->counts;
}

void bl_replayer_restore(bl_replayer *r, const bl_replay_mark *m)
{
    r->next_lsn = m->next_lsn;
    r->applied = m->applied;
    r->last_time = m->last_time;
    r->counts = m->counts;
}

int bl_replay_one(bl_replayer *r, bl_tables *t, const void *bytes, size_t len, uint64_t key_lsn,
                  int *map_full)
{
    bl_record rec;
    bl_event ev;
    bl_view view;
    bl_plan plan;
    int rc;

    *map_full = 0;
    r->why = NULL;
    rc = bl_record_decode(bytes, len, &rec);
    if (rc != 0) {
        r->why = rc == BINDLOG_EVERSION ? "record written by a newer record version"
                                        : "bad checksum or encoding";
        return rc;
    }
    if (rec.lsn != key_lsn) {
        r->why = "record carries another LSN than the position it is stored at";
        return BINDLOG_ECORRUPT;
    }
    if (rec.lsn != r->next_lsn) {
        r->why = "LSN out of sequence";
        return BINDLOG_ECORRUPT;
    }
    if (rec.time_ms < r->last_time) {
        r->why = "time goes backwards";
        return BINDLOG_ECORRUPT;
    }
    if (rec.time_ms > r->to_time)
        return 1;
    if (bl_event_from_record(&rec, &ev) != 0) {
        r->why = "unknown event type";
        return BINDLOG_ECORRUPT;
    }
    bl_view_init(&view, t);
    rc = bl_decide(&view, &ev, rec.lsn, rec.time_ms, &plan);
    switch (rc) {
    case BINDLOG_APPLIED:
        break;
    case BINDLOG_ALREADY:
    case BINDLOG_STALE:
    case BINDLOG_MOVED:
    case BINDLOG_EINVAL:
    case BINDLOG_ENOTFOUND:
    case BINDLOG_EEXIST:
    case BINDLOG_ECONFLICT:
    case BINDLOG_ECORRUPT:
        r->why = "the event does not apply to the state before it";
        return BINDLOG_ECORRUPT;
    default:
        return rc; /* a storage error of the view */
    }
    /* the tables' own form: references in live tables, marked whole
     * values in a base image */
    r->enc.ref_ok = bl_tables_refs(t) ? BL_SVAL_REF : BL_SVAL_BASE;
    r->enc.links = 1;
    if ((rc = bl_plan_encode(&plan, &r->enc)) != 0)
        return rc;
    /* A record of the current version must re-derive to the same bytes; an
     * older one (version 1: an old export stream, an etcd store) to the
     * same fields, and what goes into a log table is the re-derived
     * record, in the current version. */
    if (rec.version == BINDLOG_RECORD_VERSION
            ? r->enc.rec_len != len || memcmp(r->enc.buf + r->enc.rec_off, bytes, len) != 0
            : !bl_record_same(&plan.rec, &rec)) {
        /* e.g. a generation, an id or an origin the state does not give */
        r->why = "the event re-derives to different bytes than the stored record";
        return BINDLOG_ECORRUPT;
    }
    if ((rc = bl_tables_apply(t, &plan, &r->enc, map_full)) != 0)
        return rc;
    bl_counts_apply(&r->counts, &plan);
    r->next_lsn++;
    r->last_time = rec.time_ms;
    r->applied++;
    return 0;
}

/* ---- helpers for targets --------------------------------------------------- */

/* 0 if `dir` does not exist or is an empty directory; BINDLOG_EEXIST if it
 * holds anything (a replay never writes into somebody's files). */
static int dir_must_be_new(const char *dir)
{
    struct stat st;
    DIR *d;
    struct dirent *de;
    int rc = 0;

    if (stat(dir, &st) != 0)
        return errno == ENOENT ? 0 : bl_mdb_error(errno);
    if (!S_ISDIR(st.st_mode))
        return BINDLOG_EEXIST;
    if ((d = opendir(dir)) == NULL)
        return bl_mdb_error(errno);
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            rc = BINDLOG_EEXIST;
            break;
        }
    closedir(d);
    return rc;
}

/* Open a new store for writing the result into, with a map large enough
 * for a copy of the source (the map is address space, not disk) and no
 * syncs until the end. */
static int open_target(bl_env *src, const char *dir, bindlog **out)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    MDB_envinfo info;
    MDB_stat st;

    mdb_env_info(src->env, &info);
    mdb_env_stat(src->env, &st);
    uint64_t used = (uint64_t)(info.me_last_pgno + 1) * st.ms_psize;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.map_size = (size_t)(2 * used + ((uint64_t)64 << 20));
    if (o.map_size < ((size_t)256 << 20))
        o.map_size = (size_t)256 << 20;
    int rc = bindlog_open(out, dir, &o);
    return rc != 0 ? bl_err_nested(rc, "the new store could not be made") : 0;
}

/* Remove a scratch directory made by bl_scratch_dir(): its files and those
 * of its subdirectories.  NULL is a no-op. */
void bl_scratch_remove(const char *dir)
{
    DIR *d;
    struct dirent *de;
    char path[4096];

    if (dir == NULL || (d = opendir(dir)) == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
            continue;
        if (unlink(path) != 0 && errno == EISDIR)
            bl_scratch_remove(path);
    }
    closedir(d);
    rmdir(dir);
}

/* Let writers of this process grow the source's map between chunks: the
 * read transaction survives, cursors are reopened per chunk. */
static void src_breathe(bl_env *src)
{
    bl_map_unlock(src);
    bl_map_rdlock(src);
}

/* ---- copying the base image ------------------------------------------------ */

typedef struct image_copy {
    bl_env *src;
    bl_snap *ss;       /* the source (its base tables: never in the log's tail) */
    bl_env *dst;
    int with_base;     /* also fill the target's base tables */
    uint64_t live;     /* live entries of the table being copied */
    uint64_t live_bindings, live_sessions; /* of the whole image, when done */
    uint64_t entries;  /* entries copied */
    const char *why;   /* on BINDLOG_ECORRUPT: what is wrong ... */
    char bad[BINDLOG_KEY_MAX + 1]; /* ... with which key or id */
} image_copy;

static int put_raw(MDB_txn *txn, MDB_dbi dbi, const void *k, size_t kn, const void *d, size_t dn,
                   unsigned flags, int *map_full)
{
    MDB_val key = {kn, (void *)k}, val = {dn, (void *)d};
    int rc = mdb_put(txn, dbi, &key, &val, flags);
    if (rc == MDB_MAP_FULL)
        *map_full = 1;
    return rc == MDB_KEYEXIST ? BINDLOG_ECORRUPT : bl_mdb_error(rc);
}

/* Validate and write one image entry into the target. */
static int image_entry(image_copy *x, MDB_txn *txn, int sessions, const MDB_val *k,
                       const MDB_val *v, int *live, int *map_full)
{
    bl_env *d = x->dst;
    unsigned char ck[BL_LCHILD_KEY_MAX];
    int rc;

    *live = 0;
    if (!sessions) {
        bl_bval b;
        if (!bl_valid_key(k->mv_data, k->mv_size) ||
            bl_bval_decode(v->mv_data, v->mv_size, &b) != 0) {
            x->why = "damaged binding in the base image";
            return BINDLOG_ECORRUPT;
        }
        *live = b.sid_len != 0;
        rc = put_raw(txn, d->dbi[BL_DB_BINDINGS], k->mv_data, k->mv_size, v->mv_data,
                     v->mv_size, MDB_APPEND, map_full);
        if (rc == 0 && x->with_base)
            rc = put_raw(txn, d->dbi[BL_DB_BASE_BINDINGS], k->mv_data, k->mv_size, v->mv_data,
                         v->mv_size, MDB_APPEND, map_full);
        return rc;
    }
    bl_sval s;
    if (!bl_valid_id(k->mv_data, k->mv_size) ||
        bl_sval_decode(v->mv_data, v->mv_size, &s) != 0 ||
        (s.parent_len && !bl_valid_id(s.parent, s.parent_len))) {
        x->why = "damaged session in the base image";
        return BINDLOG_ECORRUPT;
    }
    *live = s.ended_lsn == 0;
    /* the live table's form: a marked session as the reference it is
     * there (resolved through the base image, or the source's) */
    unsigned char rb[BL_SVAL_REF_MAX];
    size_t rn = s.ref ? bl_sval_encode_ref(&s, rb, sizeof rb) : 0;
    if (s.ref && rn == 0) {
        x->why = "damaged session in the base image";
        return BINDLOG_ECORRUPT;
    }
    rc = put_raw(txn, d->dbi[BL_DB_SESSIONS], k->mv_data, k->mv_size, rn ? rb : v->mv_data,
                 rn ? rn : v->mv_size, MDB_APPEND, map_full);
    if (rc == 0 && x->with_base)
        rc = put_raw(txn, d->dbi[BL_DB_BASE_SESSIONS], k->mv_data, k->mv_size, v->mv_data,
                     v->mv_size, MDB_APPEND, map_full);
    if (rc == 0 && s.parent_len) {
        /* the children index of the image (the records that built it are
         * gone), keyed by the parent's created_lsn, read from the image */
        int n = bl_child_entry_key(x->ss->txn, x->src->dbi[BL_DB_BASE_SESSIONS],
                                   BL_DB_BASE_SESSIONS, &s, k->mv_data, k->mv_size, ck);
        if (n == BINDLOG_ECORRUPT)
            x->why = "a session of the base image names a damaged parent";
        rc = n <= 0 ? n : put_raw(txn, d->dbi[BL_DB_CHILDREN], ck, (size_t)n, "", 0, 0, map_full);
    }
    return rc;
}

/* Copy one base-image table of the source into the target, in chunks.
 * Caller holds the source's map lock. */
static int copy_image_table(image_copy *x, int sessions)
{
    MDB_dbi sdbi = x->src->dbi[sessions ? BL_DB_BASE_SESSIONS : BL_DB_BASE_BINDINGS];
    unsigned char saved[512], last[512];
    size_t saved_len = 0, last_len = 0;
    int have_saved = 0;

    for (int grow = 0;;) {
        MDB_txn *txn;
        MDB_cursor *c;
        MDB_val k, v;
        uint64_t n = 0, live = 0;
        int rc, mrc, done = 0, map_full = 0, is_live;

        if ((rc = bl_wtxn_begin(x->dst, &txn)) != 0)
            return rc;
        if ((rc = mdb_cursor_open(x->ss->txn, sdbi, &c)) != 0) {
            bl_wtxn_abort(x->dst, txn);
            return bl_mdb_error(rc);
        }
        if (have_saved) {
            k = (MDB_val){saved_len, saved};
            mrc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
            if (mrc == 0 && k.mv_size == saved_len && memcmp(k.mv_data, saved, saved_len) == 0)
                mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
        } else {
            mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
        }
        while (n < BL_CHUNK_RECORDS) {
            if (mrc == MDB_NOTFOUND) {
                done = 1;
                break;
            }
            if (mrc != 0) {
                rc = bl_mdb_error(mrc);
                break;
            }
            if (bl_entry_check(sessions ? BL_DB_BASE_SESSIONS : BL_DB_BASE_BINDINGS, &k, &v)) {
                size_t m = k.mv_size <= BINDLOG_KEY_MAX ? k.mv_size : 0;
                x->why = "a length over its limit in the base image (a damaged page)";
                memcpy(x->bad, k.mv_data, m);
                x->bad[m] = '\0';
                rc = BINDLOG_ECORRUPT;
                break;
            }
            memcpy(last, k.mv_data, k.mv_size);
            last_len = k.mv_size;
            if ((rc = image_entry(x, txn, sessions, &k, &v, &is_live, &map_full)) != 0) {
                if (rc == BINDLOG_ECORRUPT) {
                    size_t m = k.mv_size < BINDLOG_KEY_MAX ? k.mv_size : BINDLOG_KEY_MAX;
                    memcpy(x->bad, k.mv_data, m);
                    x->bad[m] = '\0';
                }
                break;
            }
            n++;
            live += (uint64_t)is_live;
            mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
        }
        mdb_cursor_close(c);
        if (rc == 0)
            rc = bl_wtxn_commit(x->dst, txn, &map_full);
        else
            bl_wtxn_abort(x->dst, txn);
        if (rc != 0) {
            if (map_full && grow++ < 64 && (rc = bl_env_resize(x->dst, 0)) == 0)
                continue; /* redo the chunk from the last committed key */
            return rc;
        }
        x->entries += n;
        x->live += live;
        if (n) {
            memcpy(saved, last, last_len);
            saved_len = last_len;
            have_saved = 1;
        }
        if (done)
            return 0;
        src_breathe(x->src);
    }
}

/* ---- replaying the log ------------------------------------------------------ */

typedef struct log_replay {
    bl_env *src;
    bl_snap *ss;        /* the source: LMDB plus the log's tail */
    bl_env *dst;
    int dst_log;        /* keep the log table in the target (replay), or not (check) */
    uint64_t last_lsn;  /* replay records up to here (min of to_lsn and head) */
    uint64_t total;     /* progress: records expected */
    bindlog_progress_fn progress;
    void *progress_ctx;
    uint64_t bad_lsn;   /* on BINDLOG_ECORRUPT: the LSN at fault */
    uint64_t found_lsn; /* ... and when a record is missing, the next LSN found (0: none) */
    int stopped;        /* a record after to_time was reached */
    char why[128];      /* r->why when it needs numbers */
} log_replay;

static int put_meta(bl_env *e, MDB_txn *txn, const bl_replayer *r, int *map_full)
{
    bl_head head = {r->next_lsn - 1, r->last_time};
    int rc = bl_meta_put_head(e, txn, &head);
    if (rc == 0)
        rc = bl_meta_put_counts(e, txn, &r->counts);
    *map_full = rc == MDB_MAP_FULL;
    return bl_mdb_error(rc);
}

/* Replay the source's records from r->next_lsn to x->last_lsn into the
 * target's live tables.  Caller holds the source's map lock. */
static int replay_log(log_replay *x, bl_replayer *r)
{
    for (int grow = 0;;) {
        bl_replay_mark mark;
        MDB_txn *txn;
        bl_cursor cur;
        bl_tables t;
        unsigned char kb[8];
        MDB_val k, v;
        size_t n = 0, bytes = 0;
        int rc, done = 0, map_full = 0;

        if (r->next_lsn > x->last_lsn || x->stopped)
            return 0;
        bl_replayer_save(r, &mark);
        if ((rc = bl_wtxn_begin(x->dst, &txn)) != 0)
            return rc;
        bl_tables_live(x->dst, txn, &t);
        if (!x->dst_log) {
            /* a scratch without the log: a reference's record is the
             * source's, which re-derived byte for byte before it applied */
            t.log = 0;
            t.rec_get = bl_snap_ref;
            t.rec_ctx = x->ss;
        }
        bl_put64be(kb, r->next_lsn);
        if ((rc = bl_cursor_open_snap(&cur, x->ss, BL_DB_LOG, kb, 8)) != 0) {
            bl_cursor_close(&cur);
            bl_wtxn_abort(x->dst, txn);
            return rc;
        }
        bl_cursor_unchecked(&cur); /* a damaged length is reported below */
        int crc = bl_cursor_next(&cur, &k, &v);
        while (n < BL_CHUNK_RECORDS && bytes < BL_CHUNK_BYTES) {
            if (r->next_lsn > x->last_lsn) {
                done = 1;
                break;
            }
            if (crc < 0) {
                rc = crc;
                break;
            }
            uint64_t lsn = crc == 1 && k.mv_size == 8 ? bl_get64be(k.mv_data) : 0;
            if (crc == 1 && k.mv_size != 8) {
                r->why = "log key is not an 8-byte LSN";
                x->bad_lsn = r->next_lsn;
                rc = BINDLOG_ECORRUPT;
                break;
            }
            if (crc == 0 || lsn != r->next_lsn) {
                r->why = "log record missing";
                x->bad_lsn = r->next_lsn;
                x->found_lsn = lsn;
                rc = BINDLOG_ECORRUPT;
                break;
            }
            if ((rc = bl_entry_check(BL_DB_LOG, &k, &v)) != 0) {
                /* a damaged length: not one byte of it is read */
                snprintf(x->why, sizeof(x->why),
                         "value of %zu bytes is over the limit of %d bytes (a damaged page)",
                         v.mv_size, BL_RECORD_MAX);
                r->why = x->why;
                x->bad_lsn = lsn;
                break;
            }
            rc = bl_replay_one(r, &t, v.mv_data, v.mv_size, lsn, &map_full);
            if (rc == 1) {
                x->stopped = done = 1;
                rc = 0;
                break;
            }
            if (rc != 0) {
                x->bad_lsn = lsn;
                break;
            }
            n++;
            bytes += v.mv_size;
            crc = bl_cursor_next(&cur, &k, &v);
        }
        bl_cursor_close(&cur);
        if (rc == 0 && n > 0)
            rc = put_meta(x->dst, txn, r, &map_full);
        if (rc == 0 && n > 0) {
            rc = bl_wtxn_commit(x->dst, txn, &map_full);
        } else {
            bl_wtxn_abort(x->dst, txn);
        }
        if (rc != 0) {
            bl_replayer_restore(r, &mark);
            if (map_full && grow++ < 64 && (rc = bl_env_resize(x->dst, 0)) == 0)
                continue;
            return rc;
        }
        if (x->progress != NULL)
            x->progress(x->progress_ctx, r->applied, x->total);
        if (done || n == 0)
            return 0;
        src_breathe(x->src);
    }
}

/* Copy the source's base image into a target and stamp the target's meta
 * (head at the base, counts, and the base records when with_base). */
static int start_target(bl_env *src, bl_snap *ss, bl_env *dst, const bl_base *base,
                        int with_base, image_copy *img)
{
    MDB_txn *txn;
    bl_head head = {base->lsn, base->time_ms};
    int rc, map_full = 0;

    memset(img, 0, sizeof(*img));
    img->src = src;
    img->ss = ss;
    img->dst = dst;
    img->with_base = with_base;
    if ((rc = copy_image_table(img, 0)) != 0)
        return rc;
    img->live_bindings = img->live;
    img->live = 0;
    if ((rc = copy_image_table(img, 1)) != 0)
        return rc;
    img->live_sessions = img->live;
    for (int grow = 0;;) {
        if ((rc = bl_wtxn_begin(dst, &txn)) != 0)
            return rc;
        rc = bl_meta_put_head(dst, txn, &head);
        if (rc == 0)
            rc = bl_meta_put_counts(dst, txn, &base->counts);
        if (rc == 0 && with_base)
            rc = bl_base_put(dst, txn, base);
        if (rc != 0) {
            map_full = rc == MDB_MAP_FULL;
            bl_wtxn_abort(dst, txn);
            rc = bl_mdb_error(rc);
        } else {
            rc = bl_wtxn_commit(dst, txn, &map_full);
        }
        if (rc != 0 && map_full && grow++ < 64 && bl_env_resize(dst, 0) == 0)
            continue;
        return rc;
    }
}

/* Stamp a target built by the bulk path: head, counts and the base image's
 * meta records. */
static int finish_target(bl_env *dst, const bl_base *base, const bl_replayer *r)
{
    for (int grow = 0;;) {
        MDB_txn *txn;
        int rc, map_full = 0;
        if ((rc = bl_wtxn_begin(dst, &txn)) != 0)
            return rc;
        rc = put_meta(dst, txn, r, &map_full);
        if (rc == 0 && (rc = bl_base_put(dst, txn, base)) != 0) {
            map_full = rc == MDB_MAP_FULL;
            rc = bl_mdb_error(rc);
        }
        if (rc == 0)
            rc = bl_wtxn_commit(dst, txn, &map_full);
        else
            bl_wtxn_abort(dst, txn);
        if (rc != 0 && map_full && grow++ < 64 && bl_env_resize(dst, 0) == 0)
            continue;
        return rc;
    }
}

/* ---- the bulk path (bulk.h) ----------------------------------------------- */

/* What a bulk replay did. */
typedef struct bulk_result {
    bl_bulk_scan scan;        /* scan.next_lsn: one past the last record replayed */
    bl_counts counts;         /* meta "counts" after it */
    uint64_t live_bindings, live_sessions; /* of the base image */
    unsigned char digest[BINDLOG_DIGEST_SIZE]; /* of the state replayed */
} bulk_result;

/* The sink of a replay whose log records are copied into the target on a
 * thread of their own while the bulk replay decides: the target has one
 * writer at a time, so the tables are written once that thread is done,
 * through `app` begun again then.  Called on the thread that runs
 * bl_bulk_run (the merge's consumer). */
typedef struct later_sink {
    const bl_bulk_sink *inner;
    bl_logcopy *lc;
    bl_appender *app;
    bl_env *dst;
    int ready, rc;
} later_sink;

static int later_ready(later_sink *l)
{
    if (!l->ready) {
        l->ready = 1;
        l->rc = bl_logcopy_join(l->lc);
        if (l->rc == 0)
            l->rc = bl_appender_init(l->app, l->dst, NULL);
    }
    return l->rc;
}

static int later_binding(void *ctx, const void *k, size_t kn, const void *v, size_t vn)
{
    later_sink *l = ctx;
    int rc = later_ready(l);
    return rc != 0 ? rc : l->inner->binding(l->inner->ctx, k, kn, v, vn);
}

static int later_session(void *ctx, const void *k, size_t kn, const void *v, size_t vn)
{
    later_sink *l = ctx;
    int rc = later_ready(l);
    return rc != 0 ? rc : l->inner->session(l->inner->ctx, k, kn, v, vn);
}

static int later_child(void *ctx, uint64_t parent_lsn, const void *c, size_t cn)
{
    later_sink *l = ctx;
    int rc = later_ready(l);
    return rc != 0 ? rc : l->inner->child(l->inner->ctx, parent_lsn, c, cn);
}

/* Logs up to this many records are copied on a thread (16 bytes of
 * reference each, 16 MiB at most); longer ones inline, as they are read. */
#define LOG_LATER_MAX ((uint64_t)1 << 20)

/*
 * Replay src's base image and log (up to last_lsn and to_time) by the bulk
 * path into `sink`, and into `copy` (if not NULL) the base image and the
 * log records themselves (replay keeps them; check does not).  When `copy`
 * is its own transaction's and the appender `sink` writes through, the log
 * records are copied on a thread of their own while the replay reads the
 * log and decides (later_sink), where the tables' writes then wait for it.  Returns 0,
 * BL_BULK_FALLBACK (the sequential replay must run instead: what the sink
 * and copy received is to be discarded), or an error.  Caller holds src's
 * map lock.
 */
static int replay_bulk(bl_env *src, bl_snap *ss, const bl_base *base, uint64_t last_lsn,
                       int64_t to_time, bl_appender *copy, const bl_bulk_sink *sink,
                       int want_digest, bulk_result *res, bindlog_progress_fn progress,
                       void *progress_ctx)
{
    bl_bulk *b = NULL;
    bl_bulk_counts d;
    int rc;

    memset(res, 0, sizeof(*res));
    if (bl_bulk_open(&b, bl_tmp_root(), bl_bulk_size_hint(src, ss->txn)) != 0)
        return BL_BULK_FALLBACK; /* no temporary files: the sequential path needs none */
    if (progress != NULL && last_lsn > base->lsn)
        bl_bulk_set_progress(b, progress, progress_ctx, last_lsn - base->lsn);
    rc = bl_bulk_feed_image(b, src, ss->txn, copy, &res->live_bindings, &res->live_sessions);
    uint64_t records = last_lsn > base->lsn ? last_lsn - base->lsn : 0;
    bl_logcopy *lc = NULL;
    later_sink later = {sink, NULL, copy, NULL, 0, 0};
    bl_bulk_sink later_s = {&later, later_binding, later_session, later_child};
    if (rc == 0 && copy != NULL && copy->own && sink->ctx == copy && records > 0 &&
        records <= LOG_LATER_MAX && (lc = bl_logcopy_new(records)) != NULL) {
        later.lc = lc;
        later.dst = copy->e;
        /* the thread's transactions come after the image's; it copies the
         * records as the scan below finds them */
        if ((rc = bl_appender_finish(copy)) == 0)
            bl_logcopy_start(lc, copy->e);
    }
    res->scan = (bl_bulk_scan){.src = src,
                               .ss = ss,
                               .next_lsn = base->lsn + 1,
                               .last_lsn = last_lsn,
                               .last_time = base->time_ms,
                               .to_time = to_time,
                               .log_out = lc != NULL ? NULL : copy,
                               .log_later = lc,
                               .total = records,
                               .progress = progress,
                               .progress_ctx = progress_ctx};
    if (rc == 0)
        rc = bl_bulk_feed_log(b, &res->scan);
    if (rc == 0 && lc != NULL)
        sink = &later_s;
    if (rc == 0)
        rc = bl_bulk_run(b, sink, &d, want_digest ? res->digest : NULL);
    if (lc != NULL) {
        /* nothing merged (or a failure before): the table writer is
         * begun all the same, for the caller to finish or abort */
        int jrc = later_ready(&later);
        if (rc == 0)
            rc = jrc;
        bl_logcopy_free(lc);
    }
    if (rc == 0) {
        res->counts = base->counts;
        for (int i = 0; i < BINDLOG_EVENT_COUNT; i++)
            res->counts.applied[i] += d.applied[i];
        res->counts.live_bindings += (uint64_t)d.live_bindings;
        res->counts.live_sessions += (uint64_t)d.live_sessions;
        if (progress != NULL)
            progress(progress_ctx, res->scan.total, res->scan.total);
    }
    bl_bulk_free(b);
    return rc;
}

/* Remove what a failed build left in a store directory (the directory was
 * empty before: dir_must_be_new). */
static void wipe_store(const char *dir)
{
    static const char *const files[] = {"data.mdb", "lock.mdb", "bindlog.lock", "bindlog.wal",
                                        "bindlog.shm"};
    char path[4096];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        if (snprintf(path, sizeof(path), "%s/%s", dir, files[i]) < (int)sizeof(path))
            unlink(path);
}

/* ---- bindlog_replay -------------------------------------------------------- */

int bl_lmdb_replay(bindlog *s, const char *out_dir, uint64_t to_lsn, int64_t to_time_ms,
                   unsigned char digest[BINDLOG_DIGEST_SIZE], uint64_t *last_lsn,
                   bindlog_progress_fn progress, void *progress_ctx)
{
    bl_env *src;
    bl_snap ss;
    int have_ss = 0;
    bindlog *dst = NULL;
    bl_head head;
    bl_base base;
    bl_replayer r;
    image_copy img;
    log_replay x;
    unsigned char dg[BINDLOG_DIGEST_SIZE] = {0};
    int rc, have_digest = 0, touched = 0;

    if (s == NULL || out_dir == NULL || out_dir[0] == '\0')
        return BINDLOG_EINVAL;
    if ((rc = dir_must_be_new(out_dir)) != 0)
        return rc;
    struct stat dst_st;
    int made_dir = stat(out_dir, &dst_st) != 0; /* open_target makes it */
    src = s->e;
    if ((rc = bl_snap_open(src, &ss, 1)) != 0)
        return rc;
    have_ss = 1;
    bl_replayer_init(&r, 1, 0, NULL);
    if ((rc = bl_pc_guard_tables(src, ss.txn, BL_PC_REPLAY_TABLES)) != 0 ||
        (rc = bl_snap_head(&ss, &head)) != 0 || (rc = bl_base_get(src, ss.txn, &base)) != 0)
        goto out;
    /* the state before the base image was compacted away */
    if (to_lsn < base.lsn || (base.lsn > 0 && to_time_ms < base.time_ms)) {
        rc = BINDLOG_ENOTFOUND;
        goto out;
    }
    touched = 1; /* from here on a failure removes what was made */
    if ((rc = open_target(src, out_dir, &dst)) != 0)
        goto out;
    uint64_t last = to_lsn < head.lsn ? to_lsn : head.lsn;
    if (bl_bulk_enabled()) {
        bulk_result res;
        bl_appender app;
        bl_bulk_sink sink;
        if ((rc = bl_appender_init(&app, dst->e, NULL)) != 0)
            goto out;
        bl_appender_sink(&app, &sink);
        rc = replay_bulk(src, &ss, &base, last, to_time_ms, &app, &sink, 1, &res, progress,
                         progress_ctx);
        if (rc == 0)
            rc = bl_appender_finish(&app);
        else
            bl_appender_abort(&app);
        if (rc == 0) {
            bl_replayer_init(&r, res.scan.next_lsn, res.scan.last_time, &res.counts);
            if ((rc = finish_target(dst->e, &base, &r)) != 0)
                goto out;
            have_digest = 1;
            memcpy(dg, res.digest, sizeof(dg));
            goto built;
        }
        if (rc != BL_BULK_FALLBACK)
            goto out;
        /* start again from an empty store, record by record */
        bindlog_close(dst);
        dst = NULL;
        wipe_store(out_dir);
        if ((rc = open_target(src, out_dir, &dst)) != 0)
            goto out;
    }
    if ((rc = start_target(src, &ss, dst->e, &base, 1, &img)) != 0)
        goto out;

    bl_replayer_init(&r, base.lsn + 1, base.time_ms, &base.counts);
    r.to_time = to_time_ms;
    memset(&x, 0, sizeof(x));
    x.src = src;
    x.ss = &ss;
    x.dst = dst->e;
    x.dst_log = 1;
    x.last_lsn = last;
    x.total = x.last_lsn - base.lsn;
    x.progress = progress;
    x.progress_ctx = progress_ctx;
    if ((rc = replay_log(&x, &r)) != 0)
        goto out;
built:
    bl_snap_close(&ss);
    have_ss = 0;

    /* one sync for the whole build; then the names of its files (opened
     * without flushes, the new store flushed none) */
    if ((rc = mdb_env_sync(dst->e->env, 1)) != 0) {
        rc = bl_err_set(bl_mdb_error(rc),
                        "the new store's data.mdb: the flush of the build "
                        "failed: %s",
                        mdb_strerror(rc));
        goto out;
    }
    if ((rc = bl_env_flush_names(dst->e)) != 0)
        goto out;
    if (digest != NULL && have_digest)
        memcpy(digest, dg, sizeof(dg));
    else if (digest != NULL)
        rc = bindlog_digest(dst, digest, NULL);
    if (rc == 0 && last_lsn != NULL)
        *last_lsn = r.next_lsn - 1;
out:
    if (have_ss)
        bl_snap_close(&ss);
    /* LMDB gave up on the new store after a failed write: that handle is
     * ours, not the caller's, and goes with the directory: an I/O error */
    if (rc == BINDLOG_EPANIC && dst != NULL && bl_group_panicked(&dst->e->g)) {
        const char *why = atomic_load(&dst->e->g.panic_why);
        int code = atomic_load(&dst->e->g.panic_code);
        rc = bl_err_set(code != 0 ? code : BINDLOG_EIO, "the new store could not be written (%s)",
                        why != NULL ? why : "a write failed");
    }
    bindlog_close(dst);
    if (rc != 0 && touched) {
        /* a failed replay leaves nothing (the directory was empty, or not
         * there): the same call can run again once the cause is gone */
        wipe_store(out_dir);
        if (made_dir)
            rmdir(out_dir);
    }
    bl_replayer_free(&r);
    return rc;
}

/* ---- bindlog_lsn_at_time --------------------------------------------------- */

int bl_lmdb_lsn_at_time(bindlog *s, int64_t time_ms, uint64_t *lsn)
{
    bl_snap ss;
    bl_head head;
    uint64_t base, lo, hi;
    int rc;

    if (s == NULL || lsn == NULL)
        return BINDLOG_EINVAL;
    if ((rc = bl_snap_open(s->e, &ss, 0)) != 0)
        return rc;
    if ((rc = bl_snap_head(&ss, &head)) != 0 ||
        (rc = bl_meta_get_u64(s->e, ss.txn, "base", &base)) != 0)
        goto out;
    /* times never decrease along the log, so the answer is a partition
     * point of [base + 1, head + 1] */
    lo = base + 1;
    hi = head.lsn + 1;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        unsigned char kb[8];
        MDB_val v;
        bl_record rec;
        bl_put64be(kb, mid);
        rc = bl_snap_get(&ss, BL_DB_LOG, kb, 8, &v);
        if (rc == BINDLOG_ENOTFOUND) {
            rc = BINDLOG_ECORRUPT; /* a hole in the retained log */
            goto out;
        }
        if (rc != 0)
            goto out;
        if ((rc = bl_record_decode(v.mv_data, v.mv_size, &rec)) != 0)
            goto out;
        if (rec.lsn != mid) {
            rc = BINDLOG_ECORRUPT;
            goto out;
        }
        if (rec.time_ms >= time_ms)
            hi = mid;
        else
            lo = mid + 1;
    }
    *lsn = lo;
out:
    bl_snap_close(&ss);
    return rc;
}

/* ---- bindlog_check --------------------------------------------------------- */

/* Printable rendering of key bytes for messages: control and non-ASCII
 * bytes as \xHH, cut to fit. */
static void escape(char *out, size_t cap, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        if (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '\\' && b[i] != '\'')
            out[o++] = (char)b[i];
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", b[i]);
    }
    out[o] = '\0';
}

typedef struct checker {
    bindlog_check_report *out;
    int damaged; /* a stored table holds an entry no code may read (limits.h) */
} checker;

/* Count a problem; the first one is described in the report. */
static void problem(checker *ck, uint64_t lsn, const void *key, size_t key_len, const char *fmt,
                    ...)
{
    bindlog_check_report *out = ck->out;
    va_list ap;

    if (out->problems++ != 0)
        return;
    out->first_bad_lsn = lsn;
    if (key != NULL) {
        size_t m = key_len < BINDLOG_KEY_MAX ? key_len : BINDLOG_KEY_MAX;
        memcpy(out->first_bad_key, key, m);
        out->first_bad_key[m] = '\0';
    }
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): va_start is right above */
    vsnprintf(out->message, sizeof(out->message), fmt, ap);
    va_end(ap);
}


/* One entry of the log seen by scan_rest(). */
static void scan_entry(checker *ck, const MDB_val *k, const MDB_val *v, uint64_t *expect,
                       uint64_t *seen)
{
    bl_record rec;

    if (k->mv_size != 8) {
        problem(ck, 0, NULL, 0, "the log table holds a key that is not an 8-byte LSN");
        return;
    }
    uint64_t lsn = bl_get64be(k->mv_data);
    if (lsn != *expect)
        problem(ck, *expect, NULL, 0, "log records %llu..%llu are missing",
                (unsigned long long)*expect, (unsigned long long)(lsn - 1));
    if (bl_entry_check(BL_DB_LOG, k, v) != 0)
        problem(ck, lsn, NULL, 0,
                "log record %llu: value of %zu bytes is over the limit of %d bytes (a damaged "
                "page)",
                (unsigned long long)lsn, v->mv_size, BL_RECORD_MAX);
    else if (bl_record_decode(v->mv_data, v->mv_size, &rec) != 0)
        problem(ck, lsn, NULL, 0, "log record %llu: bad checksum or encoding",
                (unsigned long long)lsn);
    else if (rec.lsn != lsn)
        problem(ck, lsn, NULL, 0, "log record %llu carries LSN %llu", (unsigned long long)lsn,
                (unsigned long long)rec.lsn);
    *expect = lsn + 1;
    (*seen)++;
}

/*
 * After replay stopped at a bad record, keep scanning the rest of the log
 * (checksums, LSNs, density) from LSN `from`, so that every damaged record
 * is counted.  Caller holds the source's map lock.
 */
static int scan_rest(checker *ck, bl_env *src, bl_snap *ss, uint64_t from, uint64_t *seen)
{
    unsigned char kb[8];
    uint64_t expect = from;
    bl_cursor c;
    MDB_val k, v;
    int rc;
    size_t n = 0;

    bl_put64be(kb, from);
    if ((rc = bl_cursor_open_snap(&c, ss, BL_DB_LOG, kb, 8)) != 0) {
        bl_cursor_close(&c);
        return rc;
    }
    bl_cursor_unchecked(&c); /* scan_entry reports a damaged length */
    while ((rc = bl_cursor_next(&c, &k, &v)) > 0) {
        scan_entry(ck, &k, &v, &expect, seen);
        if (++n % 4096 == 0)
            src_breathe(src); /* the cursor re-seeks if the map moved */
    }
    bl_cursor_close(&c);
    return rc;
}

/* The log's first and last keys must lie in (base, head]. */
static int check_log_bounds(checker *ck, bl_env *src, bl_snap *ss, uint64_t base, uint64_t head)
{
    MDB_cursor *c;
    MDB_val k, v, first = {0, NULL}, last = {0, NULL};
    const bl_tent *tail;
    size_t ntail;
    int rc;

    if ((rc = bl_snap_table(ss, BL_DB_LOG, &tail, &ntail)) != 0)
        return rc;
    if ((rc = mdb_cursor_open(ss->txn, src->dbi[BL_DB_LOG], &c)) != 0)
        return bl_mdb_error(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
    if (rc == 0) {
        first = k;
        rc = mdb_cursor_get(c, &k, &v, MDB_LAST);
        last = k;
    }
    /* the log's tail follows LMDB's log table */
    if (ntail) {
        if (first.mv_data == NULL)
            first = (MDB_val){tail[0].klen, (void *)tail[0].key};
        last = (MDB_val){tail[ntail - 1].klen, (void *)tail[ntail - 1].key};
    }
    if (first.mv_size == 8 && bl_get64be(first.mv_data) <= base)
        problem(ck, bl_get64be(first.mv_data), NULL, 0,
                "log record %llu is at or below the base image (LSN %llu): compaction left it",
                (unsigned long long)bl_get64be(first.mv_data), (unsigned long long)base);
    if (last.mv_size == 8 && bl_get64be(last.mv_data) > head)
        problem(ck, bl_get64be(last.mv_data), NULL, 0,
                "log record %llu is past the head LSN %llu in meta \"head\"",
                (unsigned long long)bl_get64be(last.mv_data), (unsigned long long)head);
    mdb_cursor_close(c);
    return rc == 0 || rc == MDB_NOTFOUND ? 0 : bl_mdb_error(rc);
}

static int key_cmp(const MDB_val *a, const MDB_val *b)
{
    size_t n = a->mv_size < b->mv_size ? a->mv_size : b->mv_size;
    int c = n ? memcmp(a->mv_data, b->mv_data, n) : 0;
    if (c != 0)
        return c;
    return a->mv_size < b->mv_size ? -1 : a->mv_size > b->mv_size;
}

/* Describe a problem with an entry of table `db` (key k). */
static void entry_problem(checker *ck, int db, const MDB_val *k, const char *what)
{
    char esc[200];
    const char *p = k->mv_data;
    size_t n = k->mv_size;

    switch (db) {
    case BL_DB_BINDINGS:
        escape(esc, sizeof(esc), p, n);
        problem(ck, 0, p, n, "binding of key '%s' %s", esc, what);
        break;
    case BL_DB_SESSIONS:
        escape(esc, sizeof(esc), p, n);
        problem(ck, 0, p, n, "session '%s' %s", esc, what);
        break;
    case BL_DB_CHILDREN: { /* be64 parent created_lsn, child */
        uint64_t plsn = n >= 8 ? bl_get64be((const unsigned char *)p) : 0;
        size_t off = n >= 8 ? 8 : 0;
        escape(esc, sizeof(esc), p + off, n - off);
        problem(ck, 0, p + off, n - off,
                "children index entry of the session created at LSN %llu -> '%s' %s",
                (unsigned long long)plsn, esc, what);
        break;
    }
    default: { /* history: key 0x00 be64 lsn */
        size_t kl = n >= 9 ? n - 9 : n;
        uint64_t lsn = n >= 9 ? bl_get64be((const unsigned char *)p + kl + 1) : 0;
        escape(esc, sizeof(esc), p, kl);
        problem(ck, lsn, p, kl, "history index entry of key '%s' at LSN %llu %s", esc,
                (unsigned long long)lsn, what);
        break;
    }
    }
}

/* Is the stored value of a bindings / sessions entry live? */
static int entry_live(int db, const MDB_val *v)
{
    if (db == BL_DB_BINDINGS) {
        bl_bval b;
        return bl_bval_decode(v->mv_data, v->mv_size, &b) == 0 && b.sid_len != 0;
    }
    if (db == BL_DB_SESSIONS) {
        bl_sval s; /* ended_lsn only: no need to resolve a reference */
        return bl_sval_decode_any(v->mv_data, v->mv_size, &s) == 0 && s.ended_lsn == 0;
    }
    return 0;
}

/* Two values of session `k` that differ in bytes but may hold the same
 * session: one whole, the other a reference (a store whose sessions were
 * written whole, as an etcd mirror's are), resolved through the store's
 * snapshot (the replay's records are the store's).  1 if the same, their
 * sibling chains included. */
static int same_session(bl_snap *ss, const MDB_val *k, const MDB_val *a, const MDB_val *b)
{
    bl_sval x, y;
    if (k->mv_size == 0 || k->mv_size > BINDLOG_ID_MAX ||
        bl_sval_read(a->mv_data, a->mv_size, k->mv_data, k->mv_size, bl_snap_ref, ss, &x) != 0 ||
        bl_sval_read(b->mv_data, b->mv_size, k->mv_data, k->mv_size, bl_snap_ref, ss, &y) != 0) {
        bl_err_clear();
        return 0;
    }
    /* the sibling chain is not in the digest's form: compared apart */
    return bl_sval_same_v1(&x, &y) && x.child_lsn == y.child_lsn && x.sibling_lsn == y.sibling_lsn;
}

/*
 * Walk table `db` of the store and of the replayed scratch side by side and
 * report every key that is only in one of them or whose values differ.
 * Counts the store's live entries into *live.  Caller holds both map locks.
 */
static int compare_table(checker *ck, bl_env *src, bl_snap *ss, bl_env *dst, MDB_txn *dtxn,
                         int db, uint64_t *live)
{
    bl_cursor a, b;
    MDB_val ka, va, kb, vb;
    uint64_t n = 0;
    int ra, rb, rc;

    *live = 0;
    if ((rc = bl_cursor_open_snap(&a, ss, db, NULL, 0)) != 0)
        return rc;
    if ((rc = bl_cursor_open(&b, dst, dtxn, dst->dbi[db], NULL, 0)) != 0) {
        bl_cursor_close(&a);
        return rc;
    }
    ra = bl_cursor_next(&a, &ka, &va);
    rb = bl_cursor_next(&b, &kb, &vb);
    while ((ra > 0 || rb > 0) && ra >= 0 && rb >= 0) {
        int c = ra <= 0 ? 1 : rb <= 0 ? -1 : key_cmp(&ka, &kb);
        if (c <= 0)
            *live += (uint64_t)entry_live(db, &va);
        if (c == 0 &&
            (va.mv_size != vb.mv_size ||
             (va.mv_size && memcmp(va.mv_data, vb.mv_data, va.mv_size) != 0)) &&
            !(db == BL_DB_SESSIONS && same_session(ss, &ka, &va, &vb)))
            entry_problem(ck, db, &ka, "differs from what the log replays to");
        else if (c < 0)
            entry_problem(ck, db, &ka, "is in the store but the log does not produce it");
        else if (c > 0)
            entry_problem(ck, db, &kb, "is missing from the store (the log produces it)");
        if (c <= 0) {
            if (++n % 4096 == 0) {
                /* let the store's writers grow its map; the scratch lock is
                 * dropped and retaken around it so that the locks are always
                 * taken store first, scratch second */
                bl_map_unlock(dst);
                src_breathe(src);
                bl_map_rdlock(dst);
            }
            ra = bl_cursor_next(&a, &ka, &va);
        }
        if (c >= 0)
            rb = bl_cursor_next(&b, &kb, &vb);
    }
    bl_cursor_close(&a);
    bl_cursor_close(&b);
    if (ra == BINDLOG_ECORRUPT) {
        /* the store's table is damaged where the walk stopped: that is a
         * finding of the check, not a failure of it */
        problem(ck, 0, NULL, 0, "%s",
                bl_err_isset() ? bl_err_get() : "LMDB reports a damaged page in the table");
        ck->damaged = 1;
        return 0;
    }
    return ra < 0 ? ra : rb < 0 ? rb : 0;
}

/* meta "counts" against the replay's event counts and the tables' live
 * entries. */
static void compare_counts(checker *ck, const bl_counts *stored, const bl_counts *replayed,
                           uint64_t live_b, uint64_t live_s)
{
    for (int i = 1; i < BINDLOG_EVENT_COUNT; i++)
        if (stored->applied[i] != replayed->applied[i])
            problem(ck, 0, NULL, 0,
                    "meta \"counts\" says %llu %s events applied, base image and log say %llu",
                    (unsigned long long)stored->applied[i], bindlog_event_name(i),
                    (unsigned long long)replayed->applied[i]);
    if (stored->live_bindings != live_b || stored->live_sessions != live_s)
        problem(ck, 0, NULL, 0,
                "meta \"counts\" says %llu live bindings and %llu live sessions, the tables "
                "hold %llu and %llu",
                (unsigned long long)stored->live_bindings,
                (unsigned long long)stored->live_sessions, (unsigned long long)live_b,
                (unsigned long long)live_s);
}

static void base_counts_problem(checker *ck, const bl_base *base, uint64_t live_b,
                                uint64_t live_s)
{
    problem(ck, base->lsn, NULL, 0,
            "meta \"base_counts\" says %llu live bindings and %llu live sessions, the "
            "base image holds %llu and %llu",
            (unsigned long long)base->counts.live_bindings,
            (unsigned long long)base->counts.live_sessions, (unsigned long long)live_b,
            (unsigned long long)live_s);
}

/* ---- check by the bulk path: the merged replay against the stored tables -- */

/* The four tables compared, in the order their problems are reported. */
static const int cmp_db[4] = {BL_DB_BINDINGS, BL_DB_SESSIONS, BL_DB_CHILDREN, BL_DB_HISTORY};
enum { T_BIND, T_SESS, T_CHILD, T_HIST };

typedef struct walker {
    bl_cursor c;
    MDB_val k, v;
    int rc;       /* 1: (k, v) is the current stored entry; 0: none left; < 0: error */
} walker;

/* A sink that walks each stored table beside the merged replay, like
 * compare_table() does with a scratch store.  Problems are kept per table
 * and reported in compare_table()'s order at the end. */
typedef struct cmp_sink {
    bl_env *src;
    bl_snap *ss;
    unsigned epoch;
    walker w[4];
    bindlog_check_report rep[4];
    checker ck[4];
    uint64_t live[4];
    unsigned long calls;
} cmp_sink;

static void stored_seen(cmp_sink *c, int t)
{
    /* Only counted when the entry matched the replay, byte for byte (any
     * difference in bindings or sessions sends check to the sequential
     * path): so the value is one this process encoded, and its byte rules
     * need no checking again. */
    bl_sval sv;
    const MDB_val *v = &c->w[t].v;
    if (t == T_SESS)
        c->live[t] += bl_sval_decode_trusted(v->mv_data, v->mv_size, &sv) == 0 &&
                      sv.ended_lsn == 0;
    else if (t == T_BIND)
        c->live[t] += (uint64_t)entry_live(BL_DB_BINDINGS, v);
}

/* Let this process's writers grow the store's map now and then; a cursor
 * whose map moved is re-opened on its current key. */
static int cmp_breathe(cmp_sink *c)
{
    if (++c->calls % 4096 != 0)
        return 0;
    src_breathe(c->src);
    if (c->epoch == c->src->map_epoch)
        return 0;
    c->epoch = c->src->map_epoch;
    for (int t = 0; t < 4; t++) {
        walker *w = &c->w[t];
        unsigned char key[512];
        size_t n = w->c.key_len;
        if (w->rc <= 0)
            continue;
        memcpy(key, w->c.key, n);
        bl_cursor_close(&w->c);
        if ((w->rc = bl_cursor_open_snap(&w->c, c->ss, cmp_db[t], key, n)) ==
            0)
            w->rc = bl_cursor_next(&w->c, &w->k, &w->v);
        if (w->rc < 0)
            return w->rc;
    }
    return 0;
}

/* The replay produced (k, v) in table t: match it with the stored entries. */
static int cmp_entry(cmp_sink *c, int t, const void *k, size_t kn, const void *v, size_t vn)
{
    walker *w = &c->w[t];
    MDB_val key = {kn, (void *)k};
    int db = cmp_db[t];

    while (w->rc > 0) {
        int order = key_cmp(&w->k, &key);
        if (order > 0)
            break;
        stored_seen(c, t);
        if (order == 0) {
            MDB_val rv = {vn, (void *)v};
            if ((w->v.mv_size != vn || (vn && memcmp(w->v.mv_data, v, vn) != 0)) &&
                !(t == T_SESS && same_session(c->ss, &key, &w->v, &rv)))
                entry_problem(&c->ck[t], db, &key, "differs from what the log replays to");
            w->rc = bl_cursor_next(&w->c, &w->k, &w->v);
            return w->rc < 0 ? w->rc : cmp_breathe(c);
        }
        entry_problem(&c->ck[t], db, &w->k, "is in the store but the log does not produce it");
        w->rc = bl_cursor_next(&w->c, &w->k, &w->v);
    }
    if (w->rc < 0)
        return w->rc;
    entry_problem(&c->ck[t], db, &key, "is missing from the store (the log produces it)");
    return cmp_breathe(c);
}

/* The stored entries of table t that the replay did not produce. */
static int cmp_drain(cmp_sink *c, int t)
{
    walker *w = &c->w[t];
    while (w->rc > 0) {
        stored_seen(c, t);
        entry_problem(&c->ck[t], cmp_db[t], &w->k,
                      "is in the store but the log does not produce it");
        w->rc = bl_cursor_next(&w->c, &w->k, &w->v);
    }
    return w->rc;
}

static int cmp_binding(void *ctx, const void *k, size_t kn, const void *v, size_t vn)
{
    return cmp_entry(ctx, T_BIND, k, kn, v, vn);
}


static int cmp_session(void *ctx, const void *k, size_t kn, const void *v, size_t vn)
{
    return cmp_entry(ctx, T_SESS, k, kn, v, vn);
}

static int cmp_child(void *ctx, uint64_t parent_lsn, const void *child, size_t cn)
{
    unsigned char k[BL_LCHILD_KEY_MAX];
    return cmp_entry(ctx, T_CHILD, k, bl_lchild_key(k, parent_lsn, child, cn), "", 0);
}

/*
 * check by the bulk path.  Returns 0 when the check is complete (every
 * problem reported into ck, digests and record count in the report),
 * BL_BULK_FALLBACK when the sequential check must run instead (nothing has
 * been reported), or an error.  Caller holds src's map lock.
 */
static int check_bulk(checker *ck, bl_env *src, bl_snap *ss, const bl_head *head,
                      const bl_base *base, const bl_counts *stored, bindlog_progress_fn progress,
                      void *progress_ctx)
{
    bindlog_check_report *out = ck->out;
    cmp_sink c;
    bl_bulk_sink sink = {&c, cmp_binding, cmp_session, cmp_child};
    bulk_result res;
    int rc = 0;

    memset(&c, 0, sizeof(c));
    c.src = src;
    c.ss = ss;
    c.epoch = src->map_epoch;
    for (int t = 0; t < 4; t++) {
        c.ck[t].out = &c.rep[t];
        c.w[t].rc = 0;
        if (rc == 0 && (rc = bl_cursor_open_snap(&c.w[t].c, ss, cmp_db[t], NULL, 0)) == 0)
            rc = c.w[t].rc = bl_cursor_next(&c.w[t].c, &c.w[t].k, &c.w[t].v);
        rc = rc > 0 ? 0 : rc;
    }
    if (rc == 0)
        rc = replay_bulk(src, ss, base, head->lsn, INT64_MAX, NULL, &sink, 1, &res, progress,
                         progress_ctx);
    /* what the replay did not produce */
    for (int t = 0; rc == 0 && t < 4; t++)
        rc = cmp_drain(&c, t);
    /* A state that differs from its log: the sequential check reports it
     * with both digests.  Otherwise the replay produced exactly the stored
     * bindings and sessions, and so has the same digest. */
    if (rc == 0 && (c.rep[T_BIND].problems || c.rep[T_SESS].problems))
        rc = BL_BULK_FALLBACK;
    if (rc == 0) {
        if (res.live_bindings != base->counts.live_bindings ||
            res.live_sessions != base->counts.live_sessions)
            base_counts_problem(ck, base, res.live_bindings, res.live_sessions);
        out->records = res.scan.next_lsn - 1 - base->lsn;
        rc = check_log_bounds(ck, src, ss, base->lsn, head->lsn);
    }
    if (rc == 0) {
        for (int t = 0; t < 4; t++)
            if (c.rep[t].problems) {
                problem(ck, c.rep[t].first_bad_lsn, c.rep[t].first_bad_key,
                        strlen(c.rep[t].first_bad_key), "%s", c.rep[t].message);
                out->problems += c.rep[t].problems - 1;
            }
        compare_counts(ck, stored, &res.counts, c.live[T_BIND], c.live[T_SESS]);
        memcpy(out->replay_digest, res.digest, BINDLOG_DIGEST_SIZE);
        memcpy(out->state_digest, res.digest, BINDLOG_DIGEST_SIZE);
    }
    for (int t = 0; t < 4; t++)
        bl_cursor_close(&c.w[t].c);
    /* damage met on the way (a length over its limit, a page LMDB refuses):
     * the sequential check reports it where it is */
    return rc == BINDLOG_ECORRUPT ? BL_BULK_FALLBACK : rc;
}

const char *bl_tmp_root(void)
{
    const char *base = getenv("TMPDIR");
    return base == NULL || base[0] == '\0' ? "/tmp" : base;
}

/* A new, empty directory under $TMPDIR (or /tmp) named bindlog-TAG-<random>
 * (mkdtemp's template); malloc'd, NULL with errno set on failure. */
char *bl_scratch_dir(const char *tag)
{
    const char *base = bl_tmp_root();
    size_t n = strlen(base) + strlen(tag) + sizeof("/bindlog--XXXXXX");
    char *p = malloc(n);
    if (p == NULL)
        return NULL;
    snprintf(p, n, "%s/bindlog-%s-XXXXXX", base, tag);
    if (mkdtemp(p) == NULL) {
        free(p);
        return NULL;
    }
    return p;
}

/* The log file itself, from the checkpoint to the snapshot's head
 * (lmdb/walcheck.c): its first bad frame is a problem. */
static int check_wal(checker *ck, bl_snap *ss)
{
    bl_wal_finding f;
    int rc = bl_wal_verify(ss, &f);
    if (rc == 0 && f.bad)
        problem(ck, f.lsn, NULL, 0, "%s", f.msg);
    return rc;
}

int bl_lmdb_check(bindlog *s, bindlog_check_report *out, bindlog_progress_fn progress,
                  void *progress_ctx)
{
    checker ck;
    bl_env *src;
    bl_snap ss;
    int have_ss = 0;
    MDB_txn *dtxn = NULL;
    bindlog *scratch = NULL;
    char *dir = NULL;
    /* zero: when the meta records are damaged the getters after the failing
     * one never run, and the report below still reads these */
    bl_head head = {0};
    bl_base base = {0};
    bl_counts counts = {0};
    bl_replayer r;
    image_copy img;
    log_replay x;
    uint64_t scanned = 0;
    int rc, replay_ok = 1;

    if (s == NULL || out == NULL)
        return BINDLOG_EINVAL;
    memset(out, 0, sizeof(*out));
    memset(&x, 0, sizeof(x));
    ck.out = out;
    ck.damaged = 0;
    src = s->e;
    bl_replayer_init(&r, 1, 0, NULL);
    if ((dir = bl_scratch_dir("check")) == NULL)
        return bl_mdb_error(errno);
    if ((rc = bl_snap_open(src, &ss, 1)) != 0)
        goto out;
    have_ss = 1;
    if ((rc = bl_snap_head(&ss, &head)) != 0 || (rc = bl_base_get(src, ss.txn, &base)) != 0 ||
        (rc = bl_snap_counts(&ss, &counts)) != 0) {
        if (rc != BINDLOG_ECORRUPT)
            goto out;
        /* without head and base there is nothing to replay against */
        problem(&ck, 0, NULL, 0, "meta records \"head\", \"base\" or \"counts\" are damaged");
        replay_ok = 0;
    }
    out->head_lsn = head.lsn;
    /* damaged pages are findings: reported, and nothing walks them */
    if ((rc = bl_pc_check_store(src, ss.txn, out)) != 0) {
        rc = rc > 0 ? 0 : rc;
        goto out;
    }

    if (replay_ok && bl_bulk_enabled()) {
        rc = check_bulk(&ck, src, &ss, &head, &base, &counts, progress, progress_ctx);
        if (rc != BL_BULK_FALLBACK)
            goto out; /* done, or an error */
        /* something to report: the sequential replay finds it exactly */
        memset(out, 0, sizeof(*out));
        out->head_lsn = head.lsn;
    }
    if (replay_ok) {
        if ((rc = open_target(src, dir, &scratch)) != 0)
            goto out;
        rc = start_target(src, &ss, scratch->e, &base, 0, &img);
        if (rc == BINDLOG_ECORRUPT) {
            char esc[200];
            escape(esc, sizeof(esc), img.bad, strlen(img.bad));
            problem(&ck, 0, img.bad, strlen(img.bad), "%s: '%s'", img.why, esc);
            replay_ok = 0;
        } else if (rc != 0) {
            goto out;
        } else if (img.live_bindings != base.counts.live_bindings ||
                   img.live_sessions != base.counts.live_sessions) {
            base_counts_problem(&ck, &base, img.live_bindings, img.live_sessions);
        }
    }
    if (replay_ok) {
        bl_replayer_init(&r, base.lsn + 1, base.time_ms, &base.counts);
        memset(&x, 0, sizeof(x));
        x.src = src;
        x.ss = &ss;
        x.dst = scratch->e;
        x.last_lsn = head.lsn;
        x.total = head.lsn - base.lsn;
        x.progress = progress;
        x.progress_ctx = progress_ctx;
        rc = replay_log(&x, &r);
        if (rc == BINDLOG_ECORRUPT || rc == BINDLOG_EVERSION) {
            problem(&ck, x.bad_lsn, NULL, 0, "log record %llu: %s",
                    (unsigned long long)x.bad_lsn, r.why ? r.why : "damaged");
            replay_ok = 0;
            uint64_t from = x.bad_lsn + 1;
            if (r.why != NULL && strcmp(r.why, "log record missing") == 0)
                from = x.found_lsn; /* 0: nothing after the hole */
            if (from != 0 && (rc = scan_rest(&ck, src, &ss, from, &scanned)) != 0)
                goto out;
        } else if (rc != 0) {
            goto out;
        }
    }
    /* records that re-derived, plus those scanned after a bad one (a failed
     * chunk is rolled back, so r.applied stops at the last commit) */
    out->records = (replay_ok ? r.applied : x.bad_lsn > base.lsn ? x.bad_lsn - base.lsn - 1 : 0) +
                   scanned;
    if ((rc = check_log_bounds(&ck, src, &ss, base.lsn, head.lsn)) != 0)
        goto out;

    if (replay_ok) {
        uint64_t live_b, live_s, dummy;
        if ((rc = bl_read_begin_fresh(scratch->e, &dtxn)) != 0) {
            dtxn = NULL;
            goto out;
        }
        if ((rc = compare_table(&ck, src, &ss, scratch->e, dtxn, BL_DB_BINDINGS, &live_b)) ||
            (rc = compare_table(&ck, src, &ss, scratch->e, dtxn, BL_DB_SESSIONS, &live_s)) ||
            (rc = compare_table(&ck, src, &ss, scratch->e, dtxn, BL_DB_CHILDREN, &dummy)) ||
            (rc = compare_table(&ck, src, &ss, scratch->e, dtxn, BL_DB_HISTORY, &dummy)))
            goto out;
        compare_counts(&ck, &counts, &r.counts, live_b, live_s);
        /* the scratch has no log: its references resolve in the source */
        if ((rc = bl_digest_tables(scratch->e, dtxn, scratch->e->dbi[BL_DB_BINDINGS],
                                   scratch->e->dbi[BL_DB_SESSIONS], 0, bl_snap_ref, &ss,
                                   out->replay_digest)) != 0)
            goto out;
        /* done with the scratch store before the store's digest, which
         * releases and retakes the store's lock between chunks */
        bl_read_end(scratch->e, dtxn);
        dtxn = NULL;
    }
    /* a damaged table has no digest: the report already names the damage */
    if (!ck.damaged) {
        rc = bl_digest_snap(&ss, 0, out->state_digest);
        if (rc == BINDLOG_ECORRUPT) {
            /* a session kept as a reference to a damaged or missing record
             * (or a value that does not decode): the state has no digest,
             * which is a finding of the check, not a failure of it */
            problem(&ck, 0, NULL, 0, "the state has no digest: %s",
                    bl_err_isset() ? bl_err_get() : "a session value does not decode");
            memset(out->state_digest, 0, sizeof(out->state_digest));
            rc = 0;
        }
    }
out:
    if (rc == 0 && have_ss)
        rc = check_wal(&ck, &ss);
    if (dtxn != NULL)
        bl_read_end(scratch->e, dtxn);
    if (have_ss)
        bl_snap_close(&ss);
    bindlog_close(scratch);
    bl_scratch_remove(dir);
    free(dir);
    bl_replayer_free(&r);
    return rc;
}
