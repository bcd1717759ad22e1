/*
 * stream_export.c -- export: a store's records (and with from_lsn 0 its
 * base image first) as a portable, checksummed stream (stream.h has the
 * layout), written through a buffer that keeps the whole-stream checksum.
 */
#define _GNU_SOURCE
#include "lmdb/pagecheck.h"
#include "maint/maint.h"
#include "maint/stream.h"

#include "core/error.h"
#include "lmdb/limits.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- buffered output with a running checksum ------------------------------- */

typedef struct writer {
    int fd;
    unsigned char *buf;
    size_t len;
    XXH3_state_t *hash; /* every byte written so far */
} writer;

static int wr_flush(writer *w)
{
    size_t done = 0;
    while (done < w->len) {
        ssize_t n = write(w->fd, w->buf + done, w->len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? bl_mdb_error(errno) : BINDLOG_EIO;
        done += (size_t)n;
    }
    w->len = 0;
    return 0;
}

/* Append to the buffer, which wr_room() keeps with space for a frame. */
static void wr_put(writer *w, const void *p, size_t n)
{
    XXH3_64bits_update(w->hash, p, n);
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

/* Make room for one more frame.  The write happens with e's map lock
 * released: a slow reader of the stream (a pipe) must not keep writers of
 * this process from growing the map.  Callers' cursors re-seek. */
static int wr_room(writer *w, bl_env *e)
{
    int rc = 0;
    if (w->len + ST_FRAME_MAX > ST_IO_BUF) {
        bl_map_unlock(e);
        rc = wr_flush(w);
        bl_map_rdlock(e);
    }
    return rc;
}

/* Frame a payload; `sealed` appends the frame checksum ('C', 'B', 'S'). */
static void wr_frame(writer *w, unsigned char *frame, int tag, size_t payload, int sealed)
{
    size_t len = payload + (sealed ? ST_CHECKSUM : 0);
    frame[0] = (unsigned char)tag;
    bl_put32(frame + 1, (uint32_t)len);
    if (sealed)
        bl_put64(frame + ST_FRAME_HDR + payload, XXH3_64bits(frame, ST_FRAME_HDR + payload));
    wr_put(w, frame, ST_FRAME_HDR + len);
}

/* ---- export ------------------------------------------------------------------- */

/* Write the 'B' or 'S' frames of one base-image table.  Caller holds the
 * map lock, which is released now and then (the cursor re-seeks). */
static int export_image_table(bl_env *e, MDB_txn *txn, int sessions, writer *w,
                              unsigned char *frame, uint64_t expect)
{
    bl_cursor c;
    MDB_val k, v;
    uint64_t n = 0;
    int rc;

    rc = bl_cursor_open(&c, e, txn, e->dbi[sessions ? BL_DB_BASE_SESSIONS : BL_DB_BASE_BINDINGS],
                        NULL, 0);
    while (rc == 0 && (rc = wr_room(w, e)) == 0 && (rc = bl_cursor_next(&c, &k, &v)) > 0) {
        unsigned char *p = frame + ST_FRAME_HDR;
        size_t klen_bytes = sessions ? 1 : 2;
        int ok = sessions ? bl_valid_id(k.mv_data, k.mv_size) : bl_valid_key(k.mv_data, k.mv_size);
        if (!ok || klen_bytes + k.mv_size + v.mv_size + ST_CHECKSUM > ST_S_MAX) {
            rc = BINDLOG_ECORRUPT; /* never ship what an import must refuse */
            break;
        }
        if (sessions)
            p[0] = (unsigned char)k.mv_size;
        else
            bl_put16(p, (uint16_t)k.mv_size);
        memcpy(p + klen_bytes, k.mv_data, k.mv_size);
        memcpy(p + klen_bytes + k.mv_size, v.mv_data, v.mv_size);
        /* The mark of a session the live table keeps as a reference is the
         * store's business: the stream carries the value whole, as every
         * reader of streams takes it, and the importing store decides its
         * own forms. */
        if (sessions && v.mv_size >= 2 && p[klen_bytes + k.mv_size] == 2)
            p[klen_bytes + k.mv_size + 1] &= (unsigned char)~BL_SVAL_F_REF;
        wr_frame(w, frame, sessions ? 'S' : 'B', klen_bytes + k.mv_size + v.mv_size, 1);
        rc = 0;
        n++;
    }
    bl_cursor_close(&c);
    if (rc == 0 && n != expect)
        rc = BINDLOG_ECORRUPT;
    return rc;
}

int bl_lmdb_export(bindlog *s, uint64_t from_lsn, int fd, uint64_t *records,
                   bindlog_progress_fn progress, void *progress_ctx)
{
    writer w = {.fd = fd};
    unsigned char *frame = NULL, hdr[ST_HEADER];
    bl_env *e;
    bl_snap ss;
    MDB_txn *txn = NULL; /* ss.txn while the snapshot is open */
    bl_head head;
    bl_base base;
    uint64_t first, count = 0;
    int64_t last_time;
    int rc, full;

    if (records != NULL)
        *records = 0;
    if (s == NULL || fd < 0)
        return BINDLOG_EINVAL;
    e = s->e;
    w.buf = malloc(ST_IO_BUF);
    frame = malloc(ST_FRAME_MAX);
    w.hash = XXH3_createState();
    if (w.buf == NULL || frame == NULL || w.hash == NULL) {
        rc = BINDLOG_ENOMEM;
        goto out;
    }
    XXH3_64bits_reset(w.hash);
    if ((rc = bl_snap_open(e, &ss, 1)) != 0)
        goto out;
    txn = ss.txn;
    if ((rc = bl_pc_guard_tables(e, txn, BL_PC_ALL_TABLES)) != 0 ||
        (rc = bl_snap_head(&ss, &head)) != 0 || (rc = bl_base_get(e, txn, &base)) != 0)
        goto out;
    full = from_lsn <= 1;
    first = full ? base.lsn + 1 : from_lsn;
    /* an incremental stream needs every record from from_lsn on */
    if (!full && (from_lsn <= base.lsn || from_lsn > head.lsn + 1)) {
        rc = BINDLOG_ENOTFOUND;
        goto out;
    }
    last_time = full ? base.time_ms : 0;

    memcpy(hdr, ST_MAGIC, 8);
    bl_put32(hdr + 8, ST_VERSION);
    bl_put32(hdr + 12, full ? ST_FLAG_IMAGE : 0);
    bl_put64(hdr + 16, first);
    bl_put64(hdr + 24, XXH3_64bits(hdr, 24));
    wr_put(&w, hdr, sizeof(hdr));

    if (full) {
        uint64_t nb = bl_stream_entries(txn, e->dbi[BL_DB_BASE_BINDINGS]);
        uint64_t ns = bl_stream_entries(txn, e->dbi[BL_DB_BASE_SESSIONS]);
        unsigned char *p = frame + ST_FRAME_HDR;
        bl_put64(p, (uint64_t)base.time_ms);
        unsigned char cb[BL_COUNTS_BYTES];
        bl_counts_encode(cb, &base.counts);
        memcpy(p + 8, cb, BL_COUNTS_BYTES_V3);
        bl_put64(p + 8 + BL_COUNTS_BYTES_V3, nb);
        bl_put64(p + 16 + BL_COUNTS_BYTES_V3, ns);
        wr_frame(&w, frame, 'C', ST_C_LEN - ST_CHECKSUM, 1);
        if ((rc = export_image_table(e, txn, 0, &w, frame, nb)) != 0 ||
            (rc = export_image_table(e, txn, 1, &w, frame, ns)) != 0)
            goto out;
    }

    if (first <= head.lsn) {
        bl_cursor c;
        MDB_val k, v;
        unsigned char kb[8];
        bl_put64be(kb, first);
        if ((rc = bl_cursor_open_snap(&c, &ss, BL_DB_LOG, kb, 8)) != 0)
            goto out;
        for (uint64_t lsn = first; lsn <= head.lsn; lsn++) {
            bl_record rec;
            if ((rc = wr_room(&w, e)) != 0)
                break;
            if ((rc = bl_cursor_next(&c, &k, &v)) <= 0) {
                rc = rc == 0 ? BINDLOG_ECORRUPT : rc; /* the log ends before the head */
                break;
            }
            if (k.mv_size != 8 || bl_get64be(k.mv_data) != lsn ||
                bl_record_decode(v.mv_data, v.mv_size, &rec) != 0 || rec.lsn != lsn) {
                rc = BINDLOG_ECORRUPT; /* a hole or a damaged record: check names it */
                break;
            }
            rc = 0;
            last_time = rec.time_ms;
            frame[0] = 'R';
            bl_put32(frame + 1, (uint32_t)v.mv_size);
            wr_put(&w, frame, ST_FRAME_HDR);
            wr_put(&w, v.mv_data, v.mv_size);
            if (++count % 65536 == 0 && progress != NULL) {
                bl_map_unlock(e);
                progress(progress_ctx, count, head.lsn - first + 1);
                bl_map_rdlock(e);
            }
        }
        bl_cursor_close(&c);
        if (rc != 0)
            goto out;
    }

    /* trailer: what the importer must end up with */
    unsigned char *p = frame + ST_FRAME_HDR;
    uint64_t last = first + count - 1;
    if (count == 0)
        last_time = full ? base.time_ms : head.time_ms;
    bl_put64(p, count);
    bl_put64(p + 8, last);
    bl_put64(p + 16, (uint64_t)last_time);
    if ((rc = bl_digest_snap(&ss, 0, p + 24)) != 0)
        goto out;
    if ((rc = wr_room(&w, e)) != 0)
        goto out;
    frame[0] = 'T';
    bl_put32(frame + 1, ST_T_LEN);
    wr_put(&w, frame, ST_FRAME_HDR + ST_T_LEN - ST_CHECKSUM);
    unsigned char sum[ST_CHECKSUM];
    bl_put64(sum, XXH3_64bits_digest(w.hash));
    wr_put(&w, sum, sizeof(sum));
    bl_snap_close(&ss); /* the last write without the map lock */
    txn = NULL;
    if ((rc = wr_flush(&w)) != 0)
        goto out;
    if (records != NULL)
        *records = count;
    if (progress != NULL)
        progress(progress_ctx, count, count);
out:
    if (txn != NULL)
        bl_snap_close(&ss);
    XXH3_freeState(w.hash);
    free(w.buf);
    free(frame);
    return rc;
}

