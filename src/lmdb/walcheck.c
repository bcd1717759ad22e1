/*
 * walcheck.c -- bindlog_check's look at the write-ahead log itself
 * (walenv.h, bl_wal_verify).
 *
 * The rest of the check replays the snapshot's log and compares the result
 * with its state; the snapshot's records after the checkpoint come from
 * this process's index of the log, read when the store was opened or as
 * the log grew.  This part reads bindlog.wal again, from the snapshot's
 * checkpoint to its head, exactly as recovery would: every frame's checksum
 * chain, salt, position and LSN continuity, each record decoding, and each
 * record byte for byte the one the snapshot serves.  Where the valid prefix
 * ends it looks past the break (bl_wal_past_break) as recovery does.  So a
 * log damaged after the store was opened, which the next open would refuse
 * or cut short, is a problem now, named by its first bad frame.
 */
#define _GNU_SOURCE
#include "lmdb/walenv.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/record.h"

typedef struct vctx {
    bl_snap *ss;
    uint64_t cap, head;
    bl_wal_finding *out;
} vctx;

static int bad(bl_wal_finding *out, uint64_t lsn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(bl_wal_finding *out, uint64_t lsn, const char *fmt, ...)
{
    va_list ap;
    out->bad = 1;
    out->lsn = lsn;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): va_start is right above */
    vsnprintf(out->msg, sizeof out->msg, fmt, ap);
    va_end(ap);
    return 1; /* stops the scan */
}

/* One valid frame: its records must be the snapshot's. */
static int verify_frame(void *ctx, const bl_wframe *f, const bl_wal_at *after)
{
    vctx *v = ctx;
    size_t off = 0;
    uint64_t lsn = f->first_lsn;
    bl_wentry en;
    (void)after;
    v->out->frames++;
    while (bl_wbody_next(f->body, f->body_len, &off, &en) == 1) {
        if (en.kind != BL_WE_RECORD)
            continue;
        if (lsn <= v->head) {
            unsigned char k[8];
            MDB_val val;
            bl_put64be(k, lsn);
            int rc = bl_snap_get(v->ss, BL_DB_LOG, k, sizeof k, &val);
            if (rc != 0 && rc != BINDLOG_ENOTFOUND)
                return rc;
            if (rc == BINDLOG_ENOTFOUND || val.mv_size != en.vlen ||
                memcmp(val.mv_data, en.val, en.vlen) != 0)
                return bad(v->out, lsn,
                           "%s: the frame at byte %llu holds a record of LSN %llu that is not "
                           "the one the store serves",
                           BL_WAL_FILE, (unsigned long long)(BL_WAL_HDR + f->pos % v->cap),
                           (unsigned long long)lsn);
        }
        lsn++;
    }
    return 0;
}

int bl_wal_verify(bl_snap *ss, bl_wal_finding *out)
{
    bl_env *e = ss->e;
    bl_walenv *w = e->wal;
    bl_wal_meta wm;
    bl_wal_at start, end, ck;
    bl_wal_break b;
    int rc;

    memset(out, 0, sizeof(*out));
    if (w == NULL || w->fd < 0)
        return 0;
    if ((rc = bl_meta_get_wal(e, ss->txn, &wm)) != 0)
        return rc == BINDLOG_ENOTFOUND ? 0 : rc; /* the meta check reports it */
    start = (bl_wal_at){ss->lmdb_head, wm.pos, wm.chain};
    vctx v = {ss, w->cap, ss->head, out};
    rc = bl_wal_scan(w->fd, w->cap, w->salt, &start, ss->head, verify_frame, &v, &end);
    if (rc < 0)
        return rc;
    if (out->bad)
        return 0;
    if (end.lsn < ss->head) {
        /* a checkpoint after the snapshot may have let writers reuse the
         * space: then this is no finding */
        if (w->shm.m != NULL) {
            if ((rc = bl_wal_ckpt(e, &ck)) != 0)
                return rc;
            if (ck.lsn > ss->lmdb_head)
                return 0;
        }
        bad(out, end.lsn + 1,
            "%s is damaged at byte %llu (log position %llu): the frame there does not verify "
            "as the one expected (LSN %llu: checksum chain, salt, position or LSN); LSNs "
            "%llu-%llu are served from memory and would be lost at the next open: run "
            "'bindlog recover'",
            BL_WAL_FILE, (unsigned long long)(BL_WAL_HDR + end.pos % w->cap),
            (unsigned long long)end.pos, (unsigned long long)(end.lsn + 1),
            (unsigned long long)(end.lsn + 1), (unsigned long long)ss->head);
        return 0;
    }
    /* Past the end: only when no writer moved it meanwhile (the frames a
     * live writer appends are no break). */
    bl_wal_at wend = end;
    if (w->shm.m != NULL && (rc = bl_wal_end(e, &wend)) != 0)
        return rc;
    if (wend.lsn != end.lsn)
        return 0;
    if ((rc = bl_wal_past_break(w->fd, w->cap, w->salt, &end, &b)) != 0)
        return rc;
    if (w->shm.m != NULL) {
        if ((rc = bl_wal_end(e, &wend)) != 0)
            return rc;
        if (wend.lsn != end.lsn)
            return 0;
    }
    if (b.durable > end.pos || b.foreign)
        bad(out, end.lsn + 1,
            "%s is damaged at byte %llu (log position %llu): %s; LSNs %llu-%llu lie after it",
            BL_WAL_FILE, (unsigned long long)(BL_WAL_HDR + end.pos % w->cap),
            (unsigned long long)end.pos,
            b.foreign ? "a frame of another log lies where the next frame belongs"
                      : "later frames of this log say it was flushed beyond it",
            (unsigned long long)(end.lsn + 1),
            (unsigned long long)(b.last_lsn > end.lsn ? b.last_lsn : end.lsn + 1));
    return 0;
}
