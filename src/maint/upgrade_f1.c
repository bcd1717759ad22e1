/*
 * upgrade_f1.c -- the reader of format-1 stores (upgrade.h).
 *
 * data.mdb is mapped read-only and read with bindlog's own LMDB page
 * validator (lmdb/pagecheck.h), the way recover reads a damaged store:
 * the current meta page, the main database's records of the named tables,
 * then each table walked page by page, every byte bounds-checked.  Nothing
 * here opens an LMDB environment, so a damaged format-1 file is an error
 * naming the page, never a crash, and no lock file is touched (the caller
 * holds the store's locks).
 *
 * The tables are found by their format-1 names, not by today's table
 * list, and their values are never decoded with today's state encoders:
 * log records go through bl_record_decode (record version 1 decodes in
 * every version of the library), binding and session values are handed to
 * the export stream and the digest as the bytes format 1 wrote.  The
 * stream's layout is docs/format.md's "Export stream" (version 1).
 */
#define _GNU_SOURCE
#include "maint/upgrade.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/digest.h"
#include "core/error.h"
#include "core/record.h"
#include "lmdb/pagecheck.h"

/* ---- the file and its tables ---------------------------------------------------- */

/* Format 1's tables, by their LMDB names (docs/format.md, "Format 1"). */
enum { F1_META, F1_LOG, F1_BINDINGS, F1_SESSIONS, F1_BASE_BINDINGS, F1_BASE_SESSIONS, F1_N };
static const char *const f1_names[F1_N] = {"meta",     "log",           "bindings",
                                           "sessions", "base_bindings", "base_sessions"};

#define F1_COUNTS 64 /* u64 applied[6], live bindings, live sessions */

typedef struct f1 {
    unsigned char *map;
    size_t size;
    bl_pc_file f;
    bl_pc_db db[F1_N];
    unsigned have; /* bit i: table i is in the main database */
} f1;

/* The page validator names trees by today's table list; a name it does
 * not know is walked as a plain table (the checks are the same). */
static int tree_of(int t)
{
    int tree = bl_pc_tree_of(f1_names[t], strlen(f1_names[t]));
    return tree >= 0 ? tree : 0;
}

static int damaged(const char *what, const char *why)
{
    return bl_err_set(BINDLOG_ECORRUPT,
                      "data.mdb is damaged (%s: %s); nothing was changed: `bindlog recover DIR "
                      "--out NEWDIR` rebuilds what is intact",
                      what, why);
}

static int on_main(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v, size_t vn,
                   unsigned nflags)
{
    f1 *s = ctx;
    for (int t = 0; t < F1_N; t++)
        if (strlen(f1_names[t]) == kn && memcmp(f1_names[t], k, kn) == 0 &&
            (nflags & BL_PC_F_SUBDATA) && vn == BL_PC_DBREC) {
            bl_pc_db_decode(v, &s->db[t]);
            s->have |= 1u << t;
        }
    return 0;
}

static void f1_close(f1 *s)
{
    if (s->map != NULL)
        munmap(s->map, s->size);
    s->map = NULL;
}

/* Map dir/data.mdb and find its tables through the current meta page. */
static int f1_open(const char *dir, f1 *s)
{
    char path[4200], why[240];
    struct stat st;
    int fd;

    memset(s, 0, sizeof *s);
    if (snprintf(path, sizeof path, "%s/data.mdb", dir) >= (int)sizeof path)
        return bl_err_set(BINDLOG_EINVAL, "the directory's path is too long");
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        if (err == ENOENT)
            return bl_err_set(BINDLOG_ENOTFOUND, "no store here (no data.mdb)");
        if (err == ELOOP)
            return bl_err_set(BINDLOG_ENOTSTORE, "data.mdb is a symbolic link: a store's files "
                                                 "must be regular files in its directory");
        return bl_err_set(bl_mdb_error(err), "data.mdb: %s", strerror(err));
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return bl_err_set(BINDLOG_ENOTSTORE, "data.mdb is not a regular file");
    }
    if (st.st_size < BL_PC_HDR + BL_PC_META) {
        close(fd);
        return bl_err_set(BINDLOG_ENOTSTORE, "data.mdb is %s: not an LMDB file",
                          st.st_size == 0 ? "empty" : "too short");
    }
    s->size = (size_t)st.st_size;
    s->map = mmap(NULL, s->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        return bl_err_set(bl_mdb_error(errno), "data.mdb: cannot map it: %s", strerror(errno));
    }

    /* the meta pages: what LMDB itself would start from */
    bl_pc_meta m[2];
    int ok[2];
    if (bl_get32(s->map + BL_PC_HDR) != BL_PC_MAGIC) {
        f1_close(s);
        return bl_err_set(BINDLOG_ENOTSTORE, "data.mdb is not an LMDB file");
    }
    ok[0] = bl_pc_meta_read(s->map, s->size, 0, &m[0], why, sizeof why);
    if (ok[0] == -1) {
        f1_close(s);
        return damaged("meta page 0", why);
    }
    unsigned psize = m[0].psize;
    if (s->size >= 2 * (size_t)psize) {
        ok[1] = bl_pc_meta_read(s->map + psize, s->size - psize, 1, &m[1], why, sizeof why);
    } else {
        /* bl_pc_meta_pick leaves a -1's reason in `why` to its reader */
        ok[1] = -1;
        snprintf(why, sizeof why, "meta page 1 is cut short by the end of the file");
    }
    int cur = bl_pc_meta_pick(m, ok, why, sizeof why);
    if (cur < 0 || ok[cur] != 0) {
        f1_close(s);
        return damaged("its meta pages", cur < 0 ? why : "the current meta page");
    }
    s->f.map = s->map;
    s->f.psize = psize;
    s->f.npages = s->size / psize;
    s->f.last_pg = m[cur].last_pg;
    if (s->f.last_pg >= s->f.npages) {
        f1_close(s);
        return damaged("the file", "it is shorter than its meta page says");
    }

    /* the main database: the named tables */
    if (bl_pc_db_check(&m[cur].dbs[1], BL_PC_MAIN, s->f.npages, s->f.last_pg, why, sizeof why) !=
        0) {
        f1_close(s);
        return damaged("the main database", why);
    }
    bl_pc_walk w;
    memset(&w, 0, sizeof w);
    w.f = &s->f;
    w.tree = BL_PC_MAIN;
    w.entry = on_main;
    w.ctx = s;
    int rc = bl_pc_walk_tree(&w, &m[cur].dbs[1]);
    if (rc != 0) {
        char msg[400];
        bl_pc_fault_format(&w.first, msg, sizeof msg);
        f1_close(s);
        return rc == BINDLOG_ECORRUPT ? damaged("the main database", msg) : rc;
    }
    if (!(s->have & (1u << F1_META))) {
        f1_close(s);
        return bl_err_set(BINDLOG_ENOTSTORE, "data.mdb is an LMDB file without bindlog's meta "
                                             "table: not a bindlog store");
    }
    return 0;
}

/* Walk table t (if the store has it), every page validated, entries to fn
 * in key order.  fn returns 0 or a BINDLOG_E* code with a detail set. */
typedef int (*entry_fn)(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v,
                        size_t vn);
typedef struct walk_ctx {
    entry_fn fn;
    void *ctx;
    int rc; /* what fn returned, when it stopped the walk */
} walk_ctx;

static int on_walk(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v, size_t vn,
                   unsigned nflags)
{
    walk_ctx *wc = ctx;
    (void)nflags;
    wc->rc = wc->fn(wc->ctx, k, kn, v, vn);
    return wc->rc;
}

static int walk(const f1 *s, int t, entry_fn fn, void *ctx, uint64_t *entries)
{
    char why[240], what[64];
    bl_pc_walk w;
    walk_ctx wc = {fn, ctx, 0};

    if (entries != NULL)
        *entries = 0;
    if (!(s->have & (1u << t)))
        return 0; /* a table never created is empty */
    snprintf(what, sizeof what, "table %s", f1_names[t]);
    if (bl_pc_db_check(&s->db[t], tree_of(t), s->f.npages, s->f.last_pg, why, sizeof why) != 0)
        return damaged(what, why);
    memset(&w, 0, sizeof w);
    w.f = &s->f;
    w.tree = tree_of(t);
    w.entry = on_walk;
    w.ctx = &wc;
    int rc = bl_pc_walk_tree(&w, &s->db[t]);
    if (rc != 0 && wc.rc != 0)
        return wc.rc;
    if (rc != 0) {
        char msg[400];
        bl_pc_fault_format(&w.first, msg, sizeof msg);
        return rc == BINDLOG_ECORRUPT ? damaged(what, msg) : rc;
    }
    if (entries != NULL)
        *entries = s->db[t].entries;
    return 0;
}

/* ---- meta ------------------------------------------------------------------------ */

typedef struct meta_ctx {
    bl_f1_info *info;
    int magic, format;
} meta_ctx;

static int meta_is(const unsigned char *k, size_t kn, const char *name)
{
    return kn == strlen(name) && memcmp(k, name, kn) == 0;
}

static int bad_meta(const char *name, size_t vn)
{
    return bl_err_set(BINDLOG_ECORRUPT, "data.mdb's meta record '%s' is %zu bytes long: damaged",
                      name, vn);
}

static int on_meta(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v, size_t vn)
{
    meta_ctx *mc = ctx;
    bl_f1_info *in = mc->info;
    if (meta_is(k, kn, "magic")) {
        mc->magic = vn == 13 && memcmp(v, "bindlog-store", 13) == 0;
    } else if (meta_is(k, kn, "format")) {
        if (vn != 4)
            return bad_meta("format", vn);
        in->format = bl_get32(v);
        mc->format = 1;
    } else if (meta_is(k, kn, "head")) {
        if (vn != 16)
            return bad_meta("head", vn);
        in->head_lsn = bl_get64(v);
        in->head_time = (int64_t)bl_get64(v + 8);
    } else if (meta_is(k, kn, "base")) {
        if (vn != 8)
            return bad_meta("base", vn);
        in->base_lsn = bl_get64(v);
    } else if (meta_is(k, kn, "base_time")) {
        if (vn != 8)
            return bad_meta("base_time", vn);
        in->base_time = (int64_t)bl_get64(v);
    } else if (meta_is(k, kn, "counts")) {
        /* format 3 with routes: 8 more bytes, the applied ROUTE count */
        if (vn != F1_COUNTS && vn != F1_COUNTS + 8)
            return bad_meta("counts", vn);
        memcpy(in->counts, v, F1_COUNTS);
        in->routes = vn > F1_COUNTS ? bl_get64(v + F1_COUNTS) : 0;
    } else if (meta_is(k, kn, "base_counts")) {
        if (vn != F1_COUNTS && vn != F1_COUNTS + 8)
            return bad_meta("base_counts", vn);
        memcpy(in->base_counts, v, F1_COUNTS);
        in->base_routes = vn > F1_COUNTS ? bl_get64(v + F1_COUNTS) : 0;
    }
    return 0;
}

static int read_meta(const f1 *s, bl_f1_info *info)
{
    meta_ctx mc = {info, 0, 0};
    memset(info, 0, sizeof *info);
    int rc = walk(s, F1_META, on_meta, &mc, NULL);
    if (rc != 0)
        return rc;
    if (!mc.magic)
        return bl_err_set(BINDLOG_ENOTSTORE, "data.mdb has a meta table but no bindlog magic: "
                                             "someone else's LMDB file");
    if (!mc.format || info->format == 0)
        return bl_err_set(BINDLOG_ECORRUPT, "data.mdb has bindlog's magic but no valid format "
                                            "record");
    return 0;
}

int bl_f1_probe(const char *dir, bl_f1_info *info)
{
    f1 s;
    int rc = f1_open(dir, &s);
    if (rc == 0)
        rc = read_meta(&s, info);
    f1_close(&s);
    return rc;
}

/* ---- the export stream ------------------------------------------------------------ */

#define ST_HEADER 32
#define ST_FRAME_HDR 5
#define ST_CHECKSUM 8
#define ST_FRAME_MAX (ST_FRAME_HDR + 1 + BINDLOG_ID_MAX + BL_SVAL_MAX + ST_CHECKSUM)
#define ST_BUF ((size_t)1 << 20)

typedef struct out {
    int fd;
    unsigned char *buf;
    size_t len;
    XXH3_state_t *hash; /* every byte so far: the trailer's checksum */
    unsigned char frame[ST_FRAME_MAX];
    int rc;             /* the first write error */
} out;

static void out_flush(out *o)
{
    size_t done = 0;
    while (o->rc == 0 && done < o->len) {
        ssize_t n = write(o->fd, o->buf + done, o->len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int err = n < 0 ? errno : EIO;
            o->rc = bl_err_set(bl_mdb_error(err), "writing the stream of the format-1 store: %s",
                               strerror(err));
            break;
        }
        done += (size_t)n;
    }
    o->len = 0;
}

static void out_put(out *o, const void *p, size_t n)
{
    if (o->len + n > ST_BUF)
        out_flush(o);
    XXH3_64bits_update(o->hash, p, n);
    memcpy(o->buf + o->len, p, n);
    o->len += n;
}

/* Frame o->frame's payload; `sealed` ends it with the frame's XXH3-64. */
static void out_frame(out *o, int tag, size_t payload, int sealed)
{
    size_t len = payload + (sealed ? ST_CHECKSUM : 0);
    o->frame[0] = (unsigned char)tag;
    bl_put32(o->frame + 1, (uint32_t)len);
    if (sealed)
        bl_put64(o->frame + ST_FRAME_HDR + payload, XXH3_64bits(o->frame, ST_FRAME_HDR + payload));
    out_put(o, o->frame, ST_FRAME_HDR + len);
}

/* 'B' and 'S' frames of the base image, as the bytes format 1 stored. */
typedef struct image_ctx {
    out *o;
    int sessions;
} image_ctx;

static int on_image(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v, size_t vn)
{
    image_ctx *ic = ctx;
    unsigned char *p = ic->o->frame + ST_FRAME_HDR;
    size_t kb = ic->sessions ? 1 : 2;
    int ok = ic->sessions ? bl_valid_id((const char *)k, kn) && vn <= BL_SVAL_MAX
                          : bl_valid_key((const char *)k, kn) && vn <= BL_BVAL_MAX;
    if (!ok)
        return bl_err_set(BINDLOG_ECORRUPT, "data.mdb's table %s holds an entry of a %zu-byte "
                                            "key and a %zu-byte value: damaged",
                          ic->sessions ? "base_sessions" : "base_bindings", kn, vn);
    if (ic->sessions)
        p[0] = (unsigned char)kn;
    else
        bl_put16(p, (uint16_t)kn);
    memcpy(p + kb, k, kn);
    memcpy(p + kb + kn, v, vn);
    out_frame(ic->o, ic->sessions ? 'S' : 'B', kb + kn + vn, 1);
    return ic->o->rc;
}

/* 'R' frames: records base + 1 .. head, dense, each carrying its key's LSN. */
typedef struct log_ctx {
    out *o;
    uint64_t next;
    int64_t last_time;
    uint64_t count;
} log_ctx;

static int on_record(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v,
                     size_t vn)
{
    log_ctx *lc = ctx;
    bl_record rec;
    if (kn != 8)
        return bl_err_set(BINDLOG_ECORRUPT, "data.mdb's log holds a %zu-byte key: damaged", kn);
    uint64_t lsn = bl_get64be(k);
    if (lsn != lc->next)
        return bl_err_set(BINDLOG_ECORRUPT, "data.mdb's log has LSN %llu where %llu should be: "
                                            "damaged",
                          (unsigned long long)lsn, (unsigned long long)lc->next);
    int rc = bl_record_decode(v, vn, &rec);
    if (rc != 0 || rec.lsn != lsn)
        return bl_err_set(rc == BINDLOG_EVERSION ? rc : BINDLOG_ECORRUPT,
                          "data.mdb's log record at LSN %llu %s", (unsigned long long)lsn,
                          rc == BINDLOG_EVERSION ? "has a record version newer than this library"
                          : rc != 0              ? "does not decode (checksum or fields): damaged"
                                                 : "carries another LSN: damaged");
    if (rec.time_ms < lc->last_time)
        return bl_err_set(BINDLOG_ECORRUPT, "data.mdb's log goes back in time at LSN %llu: "
                                            "damaged",
                          (unsigned long long)lsn);
    lc->o->frame[0] = 'R';
    bl_put32(lc->o->frame + 1, (uint32_t)vn);
    out_put(lc->o, lc->o->frame, ST_FRAME_HDR);
    out_put(lc->o, v, vn);
    lc->next++;
    lc->count++;
    lc->last_time = rec.time_ms;
    return lc->o->rc;
}

/* The digest of the stored state, as bindlog_digest() computes it. */
typedef struct digest_ctx {
    bl_digest *d;
    int tag;
} digest_ctx;

static int on_state(void *ctx, const unsigned char *k, size_t kn, const unsigned char *v,
                    size_t vn)
{
    digest_ctx *dc = ctx;
    return bl_digest_add(dc->d, dc->tag, k, kn, v, vn);
}

static int export_f1(const f1 *s, int fd, bl_f1_info *info)
{
    out o;
    bl_digest *d = NULL;
    int rc;

    memset(&o, 0, sizeof o);
    o.fd = fd;
    o.buf = malloc(ST_BUF);
    o.hash = XXH3_createState();
    if (o.buf == NULL || o.hash == NULL || (d = bl_digest_new()) == NULL) {
        rc = BINDLOG_ENOMEM;
        goto done;
    }
    XXH3_64bits_reset(o.hash);
    /* what the caller took with the digest (drained(): the library's
     * digest and table sizes), which read_meta starts afresh */
    int given = info->digest_given;
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    uint64_t given_b = info->bindings, given_s = info->sessions;
    memcpy(dg, info->digest, sizeof dg);
    if ((rc = read_meta(s, info)) != 0)
        goto done;
    info->digest_given = given;
    if (given) {
        memcpy(info->digest, dg, sizeof dg);
        info->bindings = given_b;
        info->sessions = given_s;
    }
    /* formats 2 to 6 have format 1's tables (and more meta records): once
     * the log is checkpointed, data.mdb alone is the store.  Every value in
     * it is whole up to format 4; the sessions table of formats 5 to 7 may
     * hold references, read whole by the library for the digest
     * (digest_given), and this reader exports only the base image (whole)
     * and the log, whose records (version 3) the import re-derives */
    if (info->format < 1 || info->format > 6 || (info->format >= 5 && !info->digest_given)) {
        rc = bl_err_set(BINDLOG_EINVAL, "data.mdb is format %u, not 1 to 4 (or 5 or 6 with its digest)",
                        (unsigned)info->format);
        goto done;
    }
    if (info->base_lsn > info->head_lsn || info->head_lsn > BINDLOG_LSN_MAX) {
        rc = bl_err_set(BINDLOG_ECORRUPT, "data.mdb's meta says base %llu and head %llu: damaged",
                        (unsigned long long)info->base_lsn, (unsigned long long)info->head_lsn);
        goto done;
    }

    /* the state digest first: it goes into the trailer */
    if (!info->digest_given) {
        digest_ctx dc = {d, 'B'};
        if ((rc = walk(s, F1_BINDINGS, on_state, &dc, &info->bindings)) != 0)
            goto done;
        dc.tag = 'S';
        if ((rc = walk(s, F1_SESSIONS, on_state, &dc, &info->sessions)) != 0)
            goto done;
        bl_digest_final(d, info->digest);
    }

    /* header: a full stream, from the record after the base image */
    unsigned char hdr[ST_HEADER];
    uint64_t first = info->base_lsn + 1;
    memcpy(hdr, "BLSTREAM", 8);
    bl_put32(hdr + 8, 1);
    bl_put32(hdr + 12, 1); /* IMAGE */
    bl_put64(hdr + 16, first);
    bl_put64(hdr + 24, XXH3_64bits(hdr, 24));
    out_put(&o, hdr, sizeof hdr);

    /* the image: counters and sizes, then its bindings and sessions */
    unsigned char *p = o.frame + ST_FRAME_HDR;
    uint64_t nb = (s->have & (1u << F1_BASE_BINDINGS)) ? s->db[F1_BASE_BINDINGS].entries : 0;
    uint64_t ns = (s->have & (1u << F1_BASE_SESSIONS)) ? s->db[F1_BASE_SESSIONS].entries : 0;
    bl_put64(p, (uint64_t)info->base_time);
    memcpy(p + 8, info->base_counts, F1_COUNTS);
    bl_put64(p + 8 + F1_COUNTS, nb);
    bl_put64(p + 16 + F1_COUNTS, ns);
    out_frame(&o, 'C', 24 + F1_COUNTS, 1);
    image_ctx ic = {&o, 0};
    if ((rc = walk(s, F1_BASE_BINDINGS, on_image, &ic, NULL)) != 0)
        goto done;
    ic.sessions = 1;
    if ((rc = walk(s, F1_BASE_SESSIONS, on_image, &ic, NULL)) != 0)
        goto done;

    /* the log */
    log_ctx lc = {&o, first, info->base_time, 0};
    if ((rc = walk(s, F1_LOG, on_record, &lc, NULL)) != 0)
        goto done;
    if (lc.next != info->head_lsn + 1) {
        rc = bl_err_set(BINDLOG_ECORRUPT, "data.mdb's log ends at LSN %llu but its head is %llu: "
                                          "damaged",
                        (unsigned long long)(lc.next - 1), (unsigned long long)info->head_lsn);
        goto done;
    }
    info->records = lc.count;

    /* trailer */
    bl_put64(p, lc.count);
    bl_put64(p + 8, lc.next - 1);
    bl_put64(p + 16, (uint64_t)lc.last_time);
    memcpy(p + 24, info->digest, BINDLOG_DIGEST_SIZE);
    o.frame[0] = 'T';
    bl_put32(o.frame + 1, 24 + BINDLOG_DIGEST_SIZE + ST_CHECKSUM);
    out_put(&o, o.frame, ST_FRAME_HDR + 24 + BINDLOG_DIGEST_SIZE);
    unsigned char sum[ST_CHECKSUM];
    bl_put64(sum, XXH3_64bits_digest(o.hash));
    out_put(&o, sum, sizeof sum);
    out_flush(&o);
    rc = o.rc;
done:
    bl_digest_free(d);
    XXH3_freeState(o.hash);
    free(o.buf);
    return rc;
}

int bl_f1_export(const char *dir, int fd, bl_f1_info *info)
{
    f1 s;
    int rc = f1_open(dir, &s);
    if (rc == 0)
        rc = export_f1(&s, fd, info);
    f1_close(&s);
    if (rc == BINDLOG_ECORRUPT && strstr(bl_err_get(), "bindlog recover") == NULL) {
        char why[BL_ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", bl_err_get());
        rc = bl_err_set(rc, "%s; nothing was changed: `bindlog recover DIR --out NEWDIR` "
                            "rebuilds what is intact",
                        why);
    }
    return rc;
}
