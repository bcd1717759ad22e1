/*
 * stream.c -- import: a stream made by export (stream_export.c; its layout
 * in stream.h) into a store.
 *
 * Import stages the whole stream in ONE write transaction on the live
 * tables: every record is re-derived by the state machine as in replay
 * (bl_replay_one), and the state digest of the result is compared with the
 * trailer's before commit.  Any refusal aborts the transaction, so nothing
 * of a refused stream is ever applied.  The price: the import holds the
 * store's writer lock for its whole duration (other writers wait), and a
 * map that fills up mid-stream can only be grown by starting over, which
 * needs a seekable input; for a pipe the map is grown generously first.
 */
#define _GNU_SOURCE
#include "lmdb/pagecheck.h"
#include "maint/maint.h"
#include "maint/stream.h"
#include "lmdb/walenv.h"

#include "core/error.h"
#include "lmdb/limits.h"
#include "platform/platform.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* A full import's records are handed to the bulk replay where they lie in
 * its transaction's dirty pages until this many bytes are staged: under
 * LMDB's dirty-page limit (128K pages, 512 MiB) with room to spare. */
#define IMPORT_REF_BYTES ((size_t)64 << 20)

/* ---- buffered input with a running checksum -------------------------------- */

typedef struct reader {
    int fd;
    unsigned char *buf;
    size_t len, pos;
    size_t hashed;      /* buf[0, hashed) is in hash (rd_hash) */
    uint64_t off;       /* stream offset of buf[pos] */
    XXH3_state_t *hash; /* every byte consumed so far, once rd_hash() ran */
} reader;

/* Bring the hash up to every byte consumed.  Hashing the buffer in long
 * pieces, not frame by frame: a streaming update costs about as much as
 * hashing a record (two per frame were 2% of an import's CPU). */
static void rd_hash(reader *r)
{
    if (r->pos > r->hashed)
        XXH3_64bits_update(r->hash, r->buf + r->hashed, r->pos - r->hashed);
    r->hashed = r->pos;
}

/* Read exactly n bytes.  0, 1 if the stream ends first, or an error. */
static int rd_exact(reader *r, void *dst, size_t n)
{
    unsigned char *d = dst;
    while (n > 0) {
        if (r->pos == r->len) {
            rd_hash(r); /* the buffer is about to be refilled */
            ssize_t got = read(r->fd, r->buf, ST_IO_BUF);
            int err = got < 0 ? errno : 0;
            if (err == EINTR)
                continue;
            if (got < 0)
                return err != 0 ? bl_mdb_error(err) : BINDLOG_EIO;
            if (got == 0)
                return 1;
            r->len = (size_t)got;
            r->pos = r->hashed = 0;
        }
        size_t take = r->len - r->pos < n ? r->len - r->pos : n;
        memcpy(d, r->buf + r->pos, take);
        r->pos += take;
        r->off += take;
        d += take;
        n -= take;
    }
    return 0;
}

/* ---- import ------------------------------------------------------------------- */

typedef struct importer {
    bl_env *e;
    MDB_txn *txn;
    reader rd;
    unsigned char *frame;
    unsigned char *vbuf;         /* BL_SVAL_MAX: an image value re-encoded */
    const unsigned char *rframe; /* the last 'R' frame: in rd.buf or frame */
    uint64_t err_off;   /* offset of the frame at fault */
    int map_full;
    bindlog_progress_fn progress;
    void *progress_ctx;
    uint64_t records;
    /* a full stream into an empty store goes the bulk way (bulk.h): */
    bl_bulk *bulk;      /* the records and the image, partitioned */
    bl_appender app;    /* base image and log, appended as they are read */
    uint64_t first_off; /* stream offset of the first record's frame: a
                         * refusal found after the scan is named from it
                         * and the lengths of the records before it */
    unsigned char digest[BINDLOG_DIGEST_SIZE]; /* of the state the bulk replay built */
    int have_digest;
    int scan;           /* a full stream the bulk way: image to the base tables
                         * only, records appended by scan_record() */
    int sync_after;     /* the store syncs after the commit (not NONE) */
    size_t ref_bytes;   /* IMPORT_REF_BYTES, or BINDLOG_IMPORT_REF_BYTES (tests) */
} importer;

/* Read a frame header and payload into im->frame.  A truncated frame is
 * BINDLOG_ECORRUPT at the frame's offset.  An 'R' frame that lies whole in
 * the read buffer stays there: im->rframe points at it (at im->frame for
 * any other), valid until the next read. */
static int read_frame(importer *im, int *tag, size_t *len)
{
    reader *r = &im->rd;
    int rc;
    im->err_off = r->off;
    im->rframe = im->frame;
    if (r->len - r->pos >= ST_FRAME_HDR && r->buf[r->pos] == 'R') {
        size_t n = bl_get32(r->buf + r->pos + 1);
        if (n <= BL_RECORD_MAX && r->len - r->pos - ST_FRAME_HDR >= n) {
            im->rframe = r->buf + r->pos;
            *tag = 'R';
            *len = n;
            r->pos += ST_FRAME_HDR + n;
            r->off += ST_FRAME_HDR + n;
            return 0;
        }
    }
    if ((rc = rd_exact(&im->rd, im->frame, ST_FRAME_HDR)) != 0)
        return rc > 0 ? BINDLOG_ECORRUPT : rc;
    *tag = im->frame[0];
    *len = bl_get32(im->frame + 1);
    size_t max = *tag == 'R' ? BL_RECORD_MAX : *tag == 'B' ? ST_B_MAX
               : *tag == 'S' ? ST_S_MAX : *tag == 'C' ? ST_C_LEN : *tag == 'T' ? ST_T_LEN : 0;
    if (*len > max || ((*tag == 'C' || *tag == 'T') && *len != max))
        return BINDLOG_ECORRUPT; /* unknown tag or impossible length */
    /* the trailer's checksum covers everything before it: read it apart */
    size_t body = *tag == 'T' ? *len - ST_CHECKSUM : *len;
    if ((rc = rd_exact(&im->rd, im->frame + ST_FRAME_HDR, body)) != 0)
        return rc > 0 ? BINDLOG_ECORRUPT : rc;
    return 0;
}

static int sealed_ok(const unsigned char *frame, size_t len)
{
    return len >= ST_CHECKSUM &&
           bl_get64(frame + ST_FRAME_HDR + len - ST_CHECKSUM) ==
               XXH3_64bits(frame, ST_FRAME_HDR + len - ST_CHECKSUM);
}

static int put_val(importer *im, MDB_dbi dbi, const void *k, size_t kn, const void *d, size_t dn,
                   unsigned flags)
{
    MDB_val key = {kn, (void *)k}, val = {dn, (void *)d};
    int rc = mdb_put(im->txn, dbi, &key, &val, flags);
    if (rc == MDB_MAP_FULL)
        im->map_full = 1;
    /* MDB_APPEND refuses keys out of order: a duplicated or moved entry */
    return rc == MDB_KEYEXIST ? BINDLOG_ECORRUPT : bl_mdb_error(rc);
}

/* The bulk path failed for reasons of its own (temporary files, memory):
 * the scan goes on, and the sequential replay of its tables follows. */
static void import_bulk_drop(importer *im)
{
    bl_bulk_free(im->bulk);
    im->bulk = NULL;
}

/*
 * An image value of an older version (a stream of format 3 or before
 * carries version-1 values) re-encoded in the current one, so that a store
 * holds one version of each table's values.  *val then points into
 * im->vbuf, valid until the next call.  A value that does not decode is
 * left for the checks after this.
 */
static int current_value(importer *im, int sess, const unsigned char **val, size_t *vl)
{
    unsigned char *buf = im->vbuf;
    const size_t cap = BL_SVAL_MAX;
    size_t n = 0;
    if (sess && *vl >= 2 && *vl <= cap && (*val)[0] == 2 && ((*val)[1] & BL_SVAL_F_REF)) {
        /* a store's mark (bl_sval_encode_base) has no meaning in a stream:
         * the imported session is whole, in this store's image and table */
        memcpy(buf, *val, *vl);
        buf[1] &= (unsigned char)~BL_SVAL_F_REF;
        *val = buf;
        return 0;
    }
    if (*vl == 0 || (*val)[0] >= 2)
        return 0;
    if (sess) {
        bl_sval sv;
        if (bl_sval_decode(*val, *vl, &sv) == 0)
            n = bl_sval_encode(&sv, buf, cap);
    } else {
        bl_bval b;
        if (bl_bval_decode(*val, *vl, &b) == 0)
            n = bl_bval_encode(&b, buf, cap);
    }
    if (n != 0) {
        *val = buf;
        *vl = n;
    }
    return 0;
}

/* The children index of the base image just written: each session with a
 * parent, keyed by the parent's created_lsn (looked up in the image). */
static int image_children(importer *im)
{
    bl_env *e = im->e;
    MDB_cursor *c;
    MDB_val k, v;
    int rc = 0, mrc;

    if ((mrc = mdb_cursor_open(im->txn, e->dbi[BL_DB_BASE_SESSIONS], &c)) != 0)
        return bl_mdb_error(mrc);
    for (mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST); mrc == 0 && rc == 0;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        unsigned char ck[BL_LCHILD_KEY_MAX];
        bl_sval sv;
        int n;
        if ((rc = bl_entry_check(BL_DB_BASE_SESSIONS, &k, &v)) != 0 ||
            (rc = bl_sval_decode(v.mv_data, v.mv_size, &sv)) != 0)
            break;
        n = bl_child_entry_key(im->txn, e->dbi[BL_DB_BASE_SESSIONS], BL_DB_BASE_SESSIONS, &sv,
                               k.mv_data, k.mv_size, ck);
        if (n > 0)
            rc = put_val(im, e->dbi[BL_DB_CHILDREN], ck, (size_t)n, "", 0, 0);
        else
            rc = n;
    }
    mdb_cursor_close(c);
    if (rc == 0 && mrc != MDB_NOTFOUND)
        rc = bl_mdb_error(mrc);
    return rc;
}

/* The base image of a full stream, into an empty store: live and base
 * tables, the children index, and the base meta records. */
static int import_image(importer *im, uint64_t first, bl_base *base)
{
    bl_env *e = im->e;
    uint64_t nb, ns, live_b = 0, live_s = 0, c_off;
    int tag, rc;
    size_t len;

    if ((rc = read_frame(im, &tag, &len)) != 0)
        return rc;
    if (tag != 'C' || !sealed_ok(im->frame, len))
        return BINDLOG_ECORRUPT;
    c_off = im->err_off;
    const unsigned char *p = im->frame + ST_FRAME_HDR;
    base->lsn = first - 1;
    base->time_ms = (int64_t)bl_get64(p);
    if (!bl_valid_time(base->time_ms))
        return bl_err_set(BINDLOG_ECORRUPT,
                          "image header ('C' frame): base time_ms %lld is outside years 0-9999",
                          (long long)base->time_ms);
    bl_counts_decode(p + 8, BL_COUNTS_BYTES_V3, &base->counts);
    nb = bl_get64(p + 8 + BL_COUNTS_BYTES_V3);
    ns = bl_get64(p + 16 + BL_COUNTS_BYTES_V3);

    for (uint64_t i = 0; i < nb + ns; i++) {
        int sess = i >= nb;
        if ((rc = read_frame(im, &tag, &len)) != 0)
            return rc;
        if (tag != (sess ? 'S' : 'B') || !sealed_ok(im->frame, len))
            return BINDLOG_ECORRUPT;
        p = im->frame + ST_FRAME_HDR;
        size_t body = len - ST_CHECKSUM, kl, ko = sess ? 1 : 2;
        if (body < ko)
            return BINDLOG_ECORRUPT;
        kl = sess ? p[0] : bl_get16(p);
        if (ko + kl > body)
            return BINDLOG_ECORRUPT;
        const char *key = (const char *)p + ko;
        const unsigned char *val = p + ko + kl;
        size_t vl = body - ko - kl;
        if ((rc = current_value(im, sess, &val, &vl)) != 0)
            return rc;
        if (im->scan) {
            /* base tables now, live ones from the bulk replay */
            bl_bval b;
            bl_sval sv;
            if (!sess && (!bl_valid_key(key, kl) || bl_bval_decode(val, vl, &b) != 0))
                return BINDLOG_ECORRUPT;
            if (sess && (!bl_valid_id(key, kl) || bl_sval_decode(val, vl, &sv) != 0 ||
                         (sv.parent_len && !bl_valid_id(sv.parent, sv.parent_len))))
                return BINDLOG_ECORRUPT;
            if (sess)
                live_s += sv.ended_lsn == 0;
            else
                live_b += b.sid_len != 0;
            rc = bl_appender_put(&im->app, sess ? BL_DB_BASE_SESSIONS : BL_DB_BASE_BINDINGS, key,
                                 kl, val, vl);
            if (rc == 0 && im->bulk != NULL &&
                (sess ? bl_bulk_image_session(im->bulk, key, kl, val, vl, sv.key, sv.key_len)
                      : bl_bulk_image_binding(im->bulk, key, kl, val, vl)) != 0)
                import_bulk_drop(im); /* checked above, so its own files failed */
            if (rc != 0)
                return rc;
        } else if (!sess) {
            bl_bval b;
            if (!bl_valid_key(key, kl) || bl_bval_decode(val, vl, &b) != 0)
                return BINDLOG_ECORRUPT;
            live_b += b.sid_len != 0;
            if ((rc = put_val(im, e->dbi[BL_DB_BINDINGS], key, kl, val, vl, MDB_APPEND)) != 0 ||
                (rc = put_val(im, e->dbi[BL_DB_BASE_BINDINGS], key, kl, val, vl, MDB_APPEND)))
                return rc;
        } else {
            bl_sval sv;
            if (!bl_valid_id(key, kl) || bl_sval_decode(val, vl, &sv) != 0 ||
                (sv.parent_len && !bl_valid_id(sv.parent, sv.parent_len)))
                return BINDLOG_ECORRUPT;
            live_s += sv.ended_lsn == 0;
            if ((rc = put_val(im, e->dbi[BL_DB_SESSIONS], key, kl, val, vl, MDB_APPEND)) != 0 ||
                (rc = put_val(im, e->dbi[BL_DB_BASE_SESSIONS], key, kl, val, vl, MDB_APPEND)))
                return rc;
        }
    }
    if (!im->scan && ns != 0 && (rc = image_children(im)) != 0) {
        im->err_off = c_off; /* a parent the image does not hold */
        return rc;
    }
    if (live_b != base->counts.live_bindings || live_s != base->counts.live_sessions) {
        im->err_off = c_off; /* the counters do not describe the image */
        return BINDLOG_ECORRUPT;
    }
    if ((rc = bl_base_put(e, im->txn, base)) != 0) {
        im->map_full = rc == MDB_MAP_FULL;
        return bl_mdb_error(rc);
    }
    return 0;
}

/* ---- import of a full stream by the bulk path ------------------------------ */

/* Start the bulk way, if its temporary files can be made (otherwise the
 * import goes record by record, as an incremental one does). */
static void import_bulk_start(importer *im)
{
    struct stat st;
    uint64_t hint = 0;

    if (fstat(im->rd.fd, &st) == 0 && S_ISREG(st.st_mode))
        hint = (uint64_t)st.st_size;
    if (bl_bulk_open(&im->bulk, bl_tmp_root(), hint) != 0)
        return;
    im->scan = 1;
    bl_appender_init(&im->app, im->e, im->txn); /* with the caller's txn: cannot fail */
}

/* One record of a full stream: the checks of its place in the sequence
 * now (a refusal names this frame), the re-derivation in the bulk replay
 * after the scan.  Appended to the log as it comes.  `h` is its head as
 * bl_record_peek() read it, or NULL if that refused it (damage). */
static int scan_record(importer *im, bl_replayer *r, const unsigned char *rec, size_t len,
                       const bl_record_head *h)
{
    bl_record dec;
    unsigned char kb[8];
    int rc;

    if (h == NULL || h->lsn != r->next_lsn || h->time_ms < r->last_time) {
        rc = bl_record_decode(rec, len, &dec); /* EVERSION, as the sequential path says */
        return rc != 0 ? rc : BINDLOG_ECORRUPT;
    }
    if (rec[0] != BINDLOG_RECORD_VERSION)
        import_bulk_drop(im); /* an older version: re-encoded by the sequential path */
    bl_put64be(kb, r->next_lsn);
    /* Where the record lands in the log table is where the bulk replay
     * decides it from (no copy through its spill file), while the import's
     * transaction holds few enough dirty pages that LMDB never spills them
     * (maint.h, bl_appender_put_at); past that the bulk replay copies. */
    const void *at = NULL;
    int by_ref = im->bulk != NULL && im->app.bytes < im->ref_bytes;
    if ((rc = bl_appender_put_at(&im->app, BL_DB_LOG, kb, 8, rec, len, by_ref ? &at : NULL)) !=
        0)
        return rc;
    if (im->bulk != NULL &&
        (by_ref ? bl_bulk_record_ref(im->bulk, at, len, r->next_lsn,
                                     (const unsigned char *)at + (h->key - rec), h->key_len)
                : bl_bulk_record(im->bulk, rec, len, r->next_lsn)) == BL_BULK_FALLBACK) {
        /* a record that cannot even be partitioned is damaged; otherwise
         * the bulk path's own files failed */
        if ((rc = bl_record_decode(rec, len, &dec)) != 0)
            return rc;
        import_bulk_drop(im);
    }
    r->next_lsn++;
    r->last_time = h->time_ms;
    return 0;
}

/*
 * A record whose checksum is right but whose LSN or time is beyond the
 * limits (BINDLOG_LSN_MAX, years 0-9999): a forged or buggy stream, refused
 * with a message that says which number, where the decoder would only say
 * "damaged".  `h` is the record's peeked head.  0 when the numbers are fine
 * or the record is damaged anyway (the decoder then refuses it as such).
 */
static int record_numbers(const unsigned char *rec, size_t len, const bl_record_head *h)
{
    uint64_t lsn = h->lsn;
    int64_t t = h->time_ms;
    if (lsn <= BINDLOG_LSN_MAX && bl_valid_time(t))
        return 0;
    if (XXH3_64bits(rec, len - BL_RECORD_CHECKSUM) != bl_get64(rec + len - BL_RECORD_CHECKSUM))
        return 0;
    if (lsn > BINDLOG_LSN_MAX)
        return bl_err_set(BINDLOG_ECORRUPT,
                          "record: LSN %llu is beyond the last LSN a store can hold (2^63 - 1)",
                          (unsigned long long)lsn);
    return bl_err_set(BINDLOG_ECORRUPT,
                      "record at LSN %llu: time_ms %lld is outside years 0-9999",
                      (unsigned long long)lsn, (long long)t);
}

/* Empty a live table of the import's transaction. */
static int empty_table(importer *im, int db)
{
    int rc = mdb_drop(im->txn, im->e->dbi[db], 0);
    im->map_full = rc == MDB_MAP_FULL;
    return bl_mdb_error(rc);
}

/* The sequential re-derivation, from the base image and log tables the
 * scan wrote into the transaction: what the bulk replay falls back to.  A
 * record that does not re-derive sets im->err_off to its frame. */
static int import_sequential(importer *im, uint64_t first, bl_replayer *r)
{
    bl_env *e = im->e;
    bl_tables t;
    bl_base base;
    MDB_cursor *c;
    MDB_val k, v;
    unsigned char *copy = NULL;
    int rc, mrc;

    if ((rc = empty_table(im, BL_DB_BINDINGS)) != 0 || (rc = empty_table(im, BL_DB_SESSIONS)) ||
        (rc = empty_table(im, BL_DB_CHILDREN)) || (rc = empty_table(im, BL_DB_HISTORY)))
        return rc;
    if ((rc = bl_base_get(e, im->txn, &base)) != 0)
        return rc;
    /* the image into the live tables, then its children index */
    for (int sess = 0; sess < 2; sess++) {
        if ((mrc = mdb_cursor_open(im->txn, e->dbi[sess ? BL_DB_BASE_SESSIONS
                                                        : BL_DB_BASE_BINDINGS], &c)) != 0)
            return bl_mdb_error(mrc);
        for (mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST); mrc == 0 && rc == 0;
             mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
            /* written by this import from checked frames; checked again all
             * the same, as everything LMDB hands back is (limits.h) */
            if ((rc = bl_entry_check(sess ? BL_DB_BASE_SESSIONS : BL_DB_BASE_BINDINGS, &k,
                                     &v)) != 0)
                break;
            rc = put_val(im, e->dbi[sess ? BL_DB_SESSIONS : BL_DB_BINDINGS], k.mv_data,
                         k.mv_size, v.mv_data, v.mv_size, MDB_APPEND);
        }
        mdb_cursor_close(c);
        if (rc != 0)
            return rc;
        if (mrc != MDB_NOTFOUND)
            return bl_mdb_error(mrc);
    }
    if ((rc = image_children(im)) != 0)
        return rc;
    if ((copy = malloc(BL_RECORD_MAX)) == NULL)
        return BINDLOG_ENOMEM;
    bl_replayer_init(r, first, base.time_ms, &base.counts);
    bl_tables_live(e, im->txn, &t);
    t.log = 0; /* already there */
    if ((mrc = mdb_cursor_open(im->txn, e->dbi[BL_DB_LOG], &c)) != 0) {
        free(copy);
        return bl_mdb_error(mrc);
    }
    /* the records' frames follow each other in the stream, each the
     * frame's head and the record as the log holds it */
    uint64_t off = im->first_off;
    for (mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST); mrc == 0 && rc == 0;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if ((rc = bl_entry_check(BL_DB_LOG, &k, &v)) != 0)
            break;
        uint64_t lsn = bl_get64be(k.mv_data);
        size_t len = v.mv_size;
        /* the writes below may move the page the value is on */
        memcpy(copy, v.mv_data, len);
        rc = bl_replay_one(r, &t, copy, len, lsn, &im->map_full);
        if (rc == 0 && copy[0] != BINDLOG_RECORD_VERSION) {
            /* an older record version (an old stream): the log keeps the
             * re-derived record, which carries the key's previous LSN */
            unsigned char lk[8];
            bl_put64be(lk, lsn); /* k points into a page the put may move */
            rc = put_val(im, e->dbi[BL_DB_LOG], lk, 8, r->enc.buf + r->enc.rec_off,
                         r->enc.rec_len, 0);
            k = (MDB_val){8, lk};
            if (rc == 0 && (mrc = mdb_cursor_get(c, &k, &v, MDB_SET)) != 0)
                rc = bl_mdb_error(mrc);
        }
        if (rc != 0) {
            im->err_off = off;
            rc = rc == 1 ? BINDLOG_ECORRUPT : rc;
        }
        off += ST_FRAME_HDR + len;
    }
    mdb_cursor_close(c);
    free(copy);
    if (rc == 0 && mrc != MDB_NOTFOUND)
        rc = bl_mdb_error(mrc);
    return rc;
}

/* After the scan: the live tables from the bulk replay, or from the
 * sequential one when it falls back.  r holds the counts on return. */
static int import_bulk_state(importer *im, uint64_t first, bl_replayer *r)
{
    bl_bulk_sink sink;
    bl_bulk_counts d;
    int rc = BL_BULK_FALLBACK;

    bl_appender_sink(&im->app, &sink);
    if (im->bulk != NULL)
        rc = bl_bulk_run(im->bulk, &sink, &d, im->digest);
    if (rc == BL_BULK_FALLBACK) {
        bl_appender_abort(&im->app); /* its cursors; the transaction is the import's */
        return import_sequential(im, first, r);
    }
    if (rc != 0)
        return rc;
    bl_appender_abort(&im->app);
    im->have_digest = 1;
    for (int i = 0; i < BINDLOG_EVENT_COUNT; i++)
        r->counts.applied[i] += d.applied[i];
    r->counts.live_bindings += (uint64_t)d.live_bindings;
    r->counts.live_sessions += (uint64_t)d.live_sessions;
    return 0;
}

/* One attempt at importing the stream (the caller retries after a full
 * map when the input can be rewound). */
static int import_once(importer *im, uint64_t *err_offset)
{
    bl_env *e = im->e;
    unsigned char hdr[ST_HEADER];
    bl_head head;
    bl_base base;
    bl_counts counts;
    bl_replayer r;
    bl_tables t;
    uint64_t first;
    int rc, tag;
    size_t len;

    bl_replayer_init(&r, 1, 0, NULL);
    im->err_off = 0;
    im->map_full = 0;
    im->records = 0;
    im->have_digest = 0;
    if ((rc = bl_wtxn_begin(e, &im->txn)) != 0)
        return rc;

    /* header: magic, checksum, then version and flags */
    if ((rc = rd_exact(&im->rd, hdr, sizeof(hdr))) != 0) {
        rc = rc > 0 ? BINDLOG_ECORRUPT : rc;
        goto out;
    }
    if (memcmp(hdr, ST_MAGIC, 8) != 0 || bl_get64(hdr + 24) != XXH3_64bits(hdr, 24)) {
        rc = BINDLOG_ECORRUPT;
        goto out;
    }
    uint32_t version = bl_get32(hdr + 8), flags = bl_get32(hdr + 12);
    first = bl_get64(hdr + 16);
    if (version == 0 || version > ST_VERSION) {
        im->err_off = 8;
        rc = version == 0 ? BINDLOG_ECORRUPT : BINDLOG_EVERSION;
        goto out;
    }
    if ((flags & ~ST_FLAGS_KNOWN) != 0 || first == 0) {
        im->err_off = (flags & ~ST_FLAGS_KNOWN) != 0 ? 12 : 16;
        rc = BINDLOG_ECORRUPT;
        goto out;
    }
    if (first > BINDLOG_LSN_MAX + 1) {
        /* it could only go on to LSNs no store can hold: refused before
         * anything else is read, whatever its checksums say */
        im->err_off = 16;
        rc = bl_err_set(BINDLOG_ECORRUPT,
                        "stream header: first_lsn %llu is beyond the last LSN a store can hold "
                        "(2^63 - 1)",
                        (unsigned long long)first);
        goto out;
    }

    if ((rc = bl_meta_get_head(e, im->txn, &head)) != 0 ||
        (rc = bl_base_get(e, im->txn, &base)) != 0 ||
        (rc = bl_meta_get_counts(e, im->txn, &counts)) != 0)
        goto out;
    if (flags & ST_FLAG_IMAGE) {
        /* a full stream restores an empty store, never merges into one */
        if (head.lsn != 0 || base.lsn != 0 || bl_stream_entries(im->txn, e->dbi[BL_DB_BINDINGS]) != 0 ||
            bl_stream_entries(im->txn, e->dbi[BL_DB_SESSIONS]) != 0) {
            rc = BINDLOG_EEXIST;
            goto out;
        }
        if (bl_bulk_enabled())
            import_bulk_start(im);
        if ((rc = import_image(im, first, &base)) != 0)
            goto out;
        head.lsn = base.lsn;
        head.time_ms = base.time_ms;
        counts = base.counts;
    } else if (first != head.lsn + 1) {
        /* incremental: exactly the records after our head */
        im->err_off = 16;
        rc = first <= head.lsn ? BINDLOG_EEXIST : BINDLOG_ENOTFOUND;
        goto out;
    }

    bl_replayer_init(&r, first, head.time_ms, &counts);
    bl_tables_live(e, im->txn, &t);
    im->first_off = im->rd.off;
    for (;;) {
        if ((rc = read_frame(im, &tag, &len)) != 0)
            goto out;
        if (tag == 'T')
            break;
        if (tag != 'R') {
            rc = BINDLOG_ECORRUPT;
            goto out;
        }
        const unsigned char *rec = im->rframe + ST_FRAME_HDR;
        /* the record's own LSN (bl_replay_one checks it against it) and
         * time, read once for the checks below */
        bl_record_head h;
        int peeked = bl_record_peek(rec, len, &h) == 0;
        if (peeked && (rc = record_numbers(rec, len, &h)) != 0)
            goto out;
        if (im->scan)
            rc = scan_record(im, &r, rec, len, peeked ? &h : NULL);
        else
            rc = bl_replay_one(&r, &t, rec, len, peeked ? h.lsn : 0, &im->map_full);
        if (rc != 0) {
            rc = rc == 1 ? BINDLOG_ECORRUPT : rc;
            goto out;
        }
        if (++im->records % 65536 == 0 && im->progress != NULL)
            im->progress(im->progress_ctx, im->records, 0);
    }

    /* trailer: counts, whole-stream checksum, nothing after it, digest */
    rd_hash(&im->rd);
    uint64_t t_off = im->err_off, sum = XXH3_64bits_digest(im->rd.hash);
    const unsigned char *p = im->frame + ST_FRAME_HDR;
    unsigned char tail[ST_CHECKSUM + 1], digest[BINDLOG_DIGEST_SIZE];
    if ((rc = rd_exact(&im->rd, tail, ST_CHECKSUM)) != 0) {
        rc = rc > 0 ? BINDLOG_ECORRUPT : rc;
        goto out;
    }
    if (bl_get64(tail) != sum || bl_get64(p) != im->records ||
        bl_get64(p + 8) != r.next_lsn - 1 || (int64_t)bl_get64(p + 16) != r.last_time) {
        rc = BINDLOG_ECORRUPT;
        goto out;
    }
    im->err_off = im->rd.off;
    if ((rc = rd_exact(&im->rd, tail, 1)) <= 0) {
        rc = rc == 0 ? BINDLOG_ECORRUPT : rc; /* bytes after the trailer */
        goto out;
    }
    im->err_off = t_off;
    if (im->scan && (rc = import_bulk_state(im, first, &r)) != 0)
        goto out;
    /* inside the import's write transaction: keep the map lock throughout */
    if (im->have_digest)
        memcpy(digest, im->digest, sizeof(digest)); /* what the bulk replay wrote */
    else {
        bl_tables lt; /* references resolve in the log and image just written */
        bl_tables_live(e, im->txn, &lt);
        if ((rc = bl_digest_tables(e, im->txn, e->dbi[BL_DB_BINDINGS], e->dbi[BL_DB_SESSIONS],
                                   1, bl_tables_ref, &lt, digest)) != 0)
            goto out;
    }
    if (memcmp(digest, p + 24, BINDLOG_DIGEST_SIZE) != 0) {
        rc = BINDLOG_ECORRUPT; /* the state is not the one the exporter had */
        goto out;
    }
    head.lsn = r.next_lsn - 1;
    head.time_ms = r.last_time;
    if ((rc = bl_meta_put_head(e, im->txn, &head)) != 0 ||
        (rc = bl_meta_put_counts(e, im->txn, &r.counts)) != 0) {
        im->map_full = rc == MDB_MAP_FULL;
        rc = bl_mdb_error(rc);
        goto out;
    }
    /* the commit writes every page of the import at once; with a sync to
     * follow, their writeback starts while it writes */
    bl_writeback *wb = im->sync_after ? bl_writeback_start(e) : NULL;
    rc = bl_wtxn_commit(e, im->txn, &im->map_full);
    bl_writeback_stop(wb);
    im->txn = NULL;
out:
    if (im->app.map_full)
        im->map_full = 1;
    bl_appender_abort(&im->app);
    memset(&im->app, 0, sizeof(im->app));
    bl_bulk_free(im->bulk);
    im->bulk = NULL;
    im->scan = 0;
    if (im->txn != NULL)
        bl_wtxn_abort(e, im->txn);
    im->txn = NULL;
    if (rc != 0 && err_offset != NULL)
        *err_offset = im->err_off;
    bl_replayer_free(&r);
    return rc;
}

int bl_lmdb_import(bindlog *s, int fd, uint64_t *records, uint64_t *err_offset,
                   bindlog_progress_fn progress, void *progress_ctx)
{
    importer im;
    struct stat st;
    off_t start;
    int rc, panic;

    if (records != NULL)
        *records = 0;
    if (err_offset != NULL)
        *err_offset = 0;
    if (s == NULL || fd < 0)
        return BINDLOG_EINVAL;
    if (s->read_only)
        return BINDLOG_EREADONLY;
    panic = bl_group_panicked(&s->e->g);
    if (panic)
        return bl_group_panic_again(&s->e->g);
    /* the tables the import's digest walks; its writes guard their paths */
    if ((rc = bl_pc_guard_all(s->e, BL_PC_IMPORT_TABLES)) != 0)
        return rc;

    memset(&im, 0, sizeof(im));
    im.e = s->e;
    im.progress = progress;
    im.progress_ctx = progress_ctx;
    im.sync_after = s->durability != BINDLOG_DURABILITY_NONE;
    /* the tests take the turn from references to copies on small streams */
    uint64_t rb;
    im.ref_bytes = bl_plat_env_number("BINDLOG_IMPORT_REF_BYTES", IMPORT_REF_BYTES - 1, &rb)
                       ? (size_t)rb
                       : IMPORT_REF_BYTES;
    im.rd.fd = fd;
    im.rd.buf = malloc(ST_IO_BUF);
    im.frame = malloc(ST_FRAME_MAX);
    im.vbuf = malloc(BL_SVAL_MAX);
    im.rd.hash = XXH3_createState();
    if (im.rd.buf == NULL || im.frame == NULL || im.vbuf == NULL || im.rd.hash == NULL) {
        rc = BINDLOG_ENOMEM;
        goto out;
    }
    /* room for the stream: LMDB holds it in about 3x its size with the
     * indexes and the base tables; the map is address space, not disk */
    start = lseek(fd, 0, SEEK_CUR);
    uint64_t want = (uint64_t)2 << 30;
    if (start >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        want = 4 * (uint64_t)(st.st_size > start ? st.st_size - start : 0) + ((uint64_t)64 << 20);
    if ((rc = bl_reserve_map(s->e, want)) != 0)
        goto out;
    /* the import writes LMDB directly: the log is folded in first and its
     * writers wait until the import is done (walenv.h) */
    if ((rc = bl_wal_quiesce(s->e)) != 0)
        goto out;
    for (int attempt = 0;; attempt++) {
        XXH3_64bits_reset(im.rd.hash);
        im.rd.len = im.rd.pos = im.rd.hashed = 0;
        im.rd.off = 0;
        rc = import_once(&im, err_offset);
        if (rc == BINDLOG_ENOSPC && im.map_full && start >= 0 && attempt < 16 &&
            lseek(fd, start, SEEK_SET) == start && bl_env_resize(s->e, 0) == 0) {
            if (err_offset != NULL)
                *err_offset = 0;
            continue; /* start over in a larger map */
        }
        break;
    }
    bl_wal_resume(s->e);
    if (rc == 0) {
        if (records != NULL)
            *records = im.records;
        if (progress != NULL)
            progress(progress_ctx, im.records, im.records);
        if (s->durability != BINDLOG_DURABILITY_NONE) {
            int src = mdb_env_sync(s->e->env, 1);
            /* never retried: as a compaction's (compact.c) */
            if (src != 0)
                rc = bl_group_panic(&s->e->g, "data.mdb: flushing the import's commit failed: %s",
                                    mdb_strerror(src));
        }
    }
out:
    XXH3_freeState(im.rd.hash);
    free(im.rd.buf);
    free(im.frame);
    free(im.vbuf);
    return rc;
}
