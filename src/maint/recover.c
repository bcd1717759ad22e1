/*
 * recover.c -- bindlog_recover(): rebuild a store from what is intact.
 *
 * The salvage (recover.h; data.mdb in recover_mdb.c, the write-ahead log
 * in recover_wal.c) gives intact log records by LSN, the meta records, the base image if its tables are whole,
 * and evidence of the stored state: bindings and sessions (each carries
 * the LSN that last changed it) and the history index.  The rebuild walks
 * the LSNs from the base image (or from 1 when the image is damaged) to the
 * head, on a state kept in a scratch store Y:
 *
 *   - an intact record is re-derived exactly (bl_replay_one: decided again
 *     by the state machine, byte-identical, as replay and check do);
 *   - an intact record that does not re-derive (it follows a loss: its key
 *     or session is not in the state the log would have produced) and came
 *     from the log is applied by the after-images its frame carries (the
 *     state its event produced, exactly: recover_walk.c, by_image);
 *   - one that has none (data.mdb's copy) is applied by its effect: the state before it is made what the record
 *     says it was (the key's binding and generation, the bound session live
 *     on that key), then the record is decided and must give its own bytes;
 *   - a lost LSN is replaced by what the stored state says about it: the
 *     bindings whose last change it was, the sessions created or ended
 *     there.  Its effect on anything else is lost.
 *
 * The last LSN handled by any rule but the first is the cut: up to it
 * the state is built from evidence, after it every record re-derived
 * exactly.  The new store is made by replay itself (bindlog_replay) from an
 * intermediate store X holding the state at the cut as its base image and
 * the records after it as its log, so the new store is exactly what replay
 * makes of any store and passes check (which recover runs to be sure).
 * The state at the cut is built by a second run of the same walk stopped
 * at the cut: the walk is deterministic.  With nothing lost the cut is the
 * base image (or 0) and the new store replays the whole log: the same
 * digest as the original.
 *
 * What was lost, for the report: the lost LSN ranges; the keys whose
 * history has a gap (named by evidence of a lost LSN, or holding a record
 * applied by effect or skipped); lost LSNs that nothing ties to a key.
 */
#define _GNU_SOURCE
#include "maint/recover.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <dirent.h>

#include "core/error.h"

/* The sources, in the order they run: data.mdb first, whose meta records
 * say where the write-ahead log starts; then the log, whose records are
 * the most trusted copies (BL_TRUST_WAL).  A store of format 1, or one
 * whose log file is gone, has no log: that source is optional. */
static const struct {
    bl_salvage_fn fn;
    int required;
} sources[] = {
    {bl_salvage_mdb, 1}, /* data.mdb */
    {bl_salvage_wal, 0}, /* bindlog.wal */
};

/* ---- the intermediate store and the new one ------------------------------------- */

static int open_scratch(const char *dir, uint64_t size, bindlog **out)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.map_size = (size_t)(3 * size + ((uint64_t)256 << 20));
    return bindlog_open(out, dir, &o);
}

/* X: the state of y as its base image at `cut`, the records after it as
 * its log.  The walk kept no sibling chain it could trust (the stored
 * values it took as evidence link records of later LSNs, or lost ones), so
 * the image is linked again from the sessions it holds (bl_relink): the
 * new store's children table indexes every child of the image, and the
 * records after the cut link on from there. */
static int build_x(bl_salvage *sv, bl_env *y, const bl_base *base, uint64_t head_lsn,
                   int64_t head_time, bl_env *x)
{
    MDB_txn *txn, *ytxn;
    int rc, map_full = 0;

    if ((rc = bl_wtxn_begin(x, &txn)) != 0)
        return rc;
    if ((rc = bl_read_begin_fresh(y, &ytxn)) != 0) {
        bl_wtxn_abort(x, txn);
        return rc;
    }
    for (int s = 0; s < 2 && rc == 0; s++) {
        bl_cursor c;
        MDB_val k, v;
        if ((rc = bl_cursor_open(&c, y, ytxn, y->dbi[s ? BL_DB_SESSIONS : BL_DB_BINDINGS], NULL,
                                 0)) != 0)
            break;
        while ((rc = bl_cursor_next(&c, &k, &v)) > 0)
            if ((rc = bl_mdb_error(mdb_put(txn, x->dbi[s ? BL_DB_BASE_SESSIONS : BL_DB_BASE_BINDINGS],
                                           &k, &v, MDB_APPEND))) != 0)
                break;
        bl_cursor_close(&c);
    }
    bl_read_end(y, ytxn);
    if (rc == 0)
        rc = bl_relink(x, txn, BL_DB_BASE_SESSIONS, &map_full);
    for (size_t i = 0; rc == 0 && i < sv->recs.n; i++) {
        const bl_srec *r = &sv->recs.v[i];
        unsigned char kb[8];
        if (r->lsn <= base->lsn || r->lsn > head_lsn)
            continue;
        bl_put64be(kb, r->lsn);
        MDB_val k = {8, kb}, v = {r->n, (void *)r->p};
        rc = bl_mdb_error(mdb_put(txn, x->dbi[BL_DB_LOG], &k, &v, MDB_APPEND));
    }
    if (rc == 0 && (rc = bl_base_put(x, txn, base)) != 0)
        rc = bl_mdb_error(rc);
    bl_head h = {head_lsn, head_time};
    if (rc == 0 && (rc = bl_meta_put_head(x, txn, &h)) != 0)
        rc = bl_mdb_error(rc);
    if (rc != 0) {
        bl_wtxn_abort(x, txn);
        return rc;
    }
    return bl_wtxn_commit(x, txn, &map_full);
}

static int dir_is_new(const char *dir)
{
    struct stat st;
    DIR *d;
    struct dirent *de;
    int rc = 0;
    if (stat(dir, &st) != 0)
        return errno == ENOENT ? 0 : bl_mdb_error(errno);
    if (!S_ISDIR(st.st_mode) || (d = opendir(dir)) == NULL)
        return BINDLOG_EEXIST;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            rc = BINDLOG_EEXIST;
            break;
        }
    closedir(d);
    return rc;
}

static int recover(const char *dir, const char *out_dir, bindlog_recover_report *rep,
                   bindlog_progress_fn progress, void *pctx)
{
    bl_salvage sv;
    bl_evidence ev;
    bl_keyset gap = {NULL, 0, 0};
    bl_walk w;
    bindlog *y = NULL, *y2 = NULL, *x = NULL, *out = NULL;
    char *scratch = NULL, path[4200];
    int rc;

    memset(&sv, 0, sizeof sv);
    memset(&ev, 0, sizeof ev);
    memset(&w, 0, sizeof w);
    if ((rc = dir_is_new(out_dir)) != 0)
        return rc == BINDLOG_EEXIST
                   ? bl_err_set(rc, "the output directory is not empty: recover needs a new one")
                   : rc;

    /* salvage */
    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) {
        rc = sources[i].fn(&sv, dir);
        if (rc == BINDLOG_ENOTFOUND && !sources[i].required)
            rc = 0;
        if (rc != 0)
            goto out;
    }
    bl_salvage_dedupe(&sv);
    if ((rc = bl_salvage_resolve(&sv)) != 0 || (rc = bl_evidence_build(&sv, &ev)) != 0)
        goto out;
    rep->pages = sv.pages;
    rep->damaged_pages = sv.damaged;
    rep->records_found = sv.recs.n;
    /* which records only the log had (or had the best copy of) */
    rep->log_state = sv.wal_state;
    snprintf(rep->log_why, sizeof rep->log_why, "%s", sv.wal_why);
    for (size_t i = 0; i < sv.recs.n; i++)
        if (sv.recs.v[i].trust == BL_TRUST_WAL) {
            if (rep->log_records++ == 0)
                rep->log_first_lsn = sv.recs.v[i].lsn;
            rep->log_last_lsn = sv.recs.v[i].lsn;
        }

    /* where the bl_walk starts and ends */
    int base_ok = sv.have_meta && !sv.base_damaged;
    uint64_t base_lsn = sv.have_meta && sv.meta.have_base ? sv.meta.base.lsn : 0;
    bl_base base = {0};
    if (base_lsn > 0 && base_ok) {
        base = sv.meta.base;
        rep->base_image = 1;
    } else if (base_lsn > 0 || (!sv.have_meta && (sv.base[0].n || sv.base[1].n))) {
        rep->base_image = -1; /* start at LSN 1 with what survives of the compacted log */
        sv.base[0].n = sv.base[1].n = 0;
    } else {
        sv.base[0].n = sv.base[1].n = 0;
    }
    uint64_t head = sv.have_meta && sv.meta.have_head ? sv.meta.head.lsn : 0;
    if (sv.recs.n && sv.recs.v[sv.recs.n - 1].lsn > head)
        head = sv.recs.v[sv.recs.n - 1].lsn;
    if (head < base.lsn)
        head = base.lsn;
    rep->head_lsn = head;
    rep->head_known = sv.have_meta && sv.meta.whole;
    rep->base_lsn = base.lsn;

    /* first bl_walk: what is lost, and the cut */
    if ((scratch = bl_scratch_dir("recover")) == NULL) {
        rc = bl_mdb_error(errno);
        goto out;
    }
    uint64_t size = 0;
    for (size_t i = 0; i < sv.maps.n; i++)
        size += sv.maps.v[i].n;
    snprintf(path, sizeof path, "%s/a", scratch);
    if ((rc = open_scratch(path, size, &y)) != 0)
        goto out;
    w.sv = &sv;
    w.ev = &ev;
    w.y = y->e;
    w.start = base.lsn;
    w.head = w.stop = head;
    w.gap = &gap;
    w.rep = rep;
    w.progress = progress;
    w.pctx = pctx;
    bl_replayer_init(&w.r, base.lsn + 1, base.time_ms, &base.counts);
    if ((rc = bl_walk_run(&w)) != 0)
        goto out;
    uint64_t cut = w.cut;
    bl_replayer_free(&w.r);
    if (rep->nranges == SIZE_MAX) {
        rc = BINDLOG_ENOMEM;
        goto out;
    }

    /* second bl_walk, stopped at the cut: the state the new log starts from */
    snprintf(path, sizeof path, "%s/b", scratch);
    if ((rc = open_scratch(path, size, &y2)) != 0)
        goto out;
    bl_walk w2 = w;
    w2.y = y2->e;
    w2.stop = cut;
    w2.gap = NULL;
    w2.rep = NULL;
    w2.progress = NULL;
    memset(&w2.ranges, 0, sizeof w2.ranges);
    bl_replayer_init(&w2.r, base.lsn + 1, base.time_ms, &base.counts);
    if ((rc = bl_walk_run(&w2)) != 0) {
        bl_replayer_free(&w2.r);
        goto out;
    }
    bl_base at = {cut, w2.r.last_time, w2.r.counts};
    bl_replayer_free(&w2.r);
    if ((rc = bl_walk_count_live(y2->e, &at.counts.live_bindings, &at.counts.live_sessions)) != 0)
        goto out;

    /* X, then replay into the new store */
    int64_t head_time = at.time_ms;
    for (size_t i = 0; i < sv.recs.n; i++)
        if (sv.recs.v[i].lsn > cut && sv.recs.v[i].lsn <= head) {
            bl_record rec;
            if (bl_record_decode(sv.recs.v[i].p, sv.recs.v[i].n, &rec) == 0 &&
                rec.time_ms > head_time)
                head_time = rec.time_ms;
        }
    snprintf(path, sizeof path, "%s/x", scratch);
    if ((rc = open_scratch(path, size, &x)) != 0)
        goto out;
    if ((rc = build_x(&sv, y2->e, &at, head, head_time, x->e)) != 0)
        goto out;
    bindlog_close(y);
    bindlog_close(y2);
    y = y2 = NULL;
    uint64_t last = 0;
    rc = bindlog_replay(x, out_dir, UINT64_MAX, INT64_MAX, rep->digest, &last, NULL, NULL);
    if (rc != 0) {
        rc = bl_err_nested(rc, "replaying the salvaged log into %s failed", out_dir);
        goto out;
    }
    rep->cut_lsn = cut > base.lsn ? cut : 0;
    rep->records_rederived = head - (cut > base.lsn ? cut : base.lsn);
    rep->new_head_lsn = last;

    /* the new store must check clean */
    bindlog_check_report chk;
    if ((rc = bindlog_open(&out, out_dir, NULL)) != 0 ||
        (rc = bindlog_check(out, &chk, NULL, NULL)) != 0) {
        rc = bl_err_nested(rc, "the rebuilt store could not be checked");
        goto out;
    }
    if (chk.problems != 0) {
        rc = bl_err_set(BINDLOG_ECORRUPT, "the rebuilt store does not check clean: %s",
                        chk.message);
        goto out;
    }

    bl_keyset_unique(&gap);
    rep->keys = gap.v;
    rep->nkeys = gap.n;
    gap.v = NULL;
    gap.n = 0;
    rep->ranges = w.ranges.v;
    rep->nranges = w.ranges.n;
    w.ranges.v = NULL;
out:
    bindlog_close(out);
    bindlog_close(x);
    bindlog_close(y);
    bindlog_close(y2);
    bl_scratch_remove(scratch);
    free(scratch);
    for (size_t i = 0; i < gap.n; i++)
        free(gap.v[i]);
    free(gap.v);
    free(w.ranges.v);
    bl_evidence_free(&ev);
    bl_salvage_free(&sv);
    if (rc != 0)
        rep->nranges = 0;
    return rc;
}

int bindlog_recover(const char *dir, const char *out_dir, bindlog_recover_report *rep,
                    bindlog_progress_fn progress, void *progress_ctx)
{
    char q[BL_ERR_QUOTE_MAX];
    int rc;

    bl_err_clear();
    if (rep != NULL)
        memset(rep, 0, sizeof(*rep));
    if (dir == NULL || dir[0] == '\0' || out_dir == NULL || out_dir[0] == '\0' || rep == NULL)
        rc = BINDLOG_EINVAL;
    else
        rc = recover(dir, out_dir, rep, progress, progress_ctx);
    return BL_API_DONE(rc, "recover %s",
                       dir ? bl_err_bytes(q, sizeof q, dir, strnlen(dir, 4096)) : "(null)");
}

void bindlog_recover_report_free(bindlog_recover_report *rep)
{
    if (rep == NULL)
        return;
    for (size_t i = 0; i < rep->nkeys; i++)
        free(rep->keys[i]);
    free(rep->keys);
    free(rep->ranges);
    rep->keys = NULL;
    rep->ranges = NULL;
    rep->nkeys = rep->nranges = 0;
}
