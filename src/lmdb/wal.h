/*
 * wal.h -- the write-ahead log file: its header, its frames, and the scan
 * that finds the valid prefix of the log (recovery and catch-up).
 *
 * The log is one preallocated file, `bindlog.wal`, written in place and
 * never grown: a 4096-byte header, then a ring of `cap` bytes.  Every group
 * commit writes exactly one *frame* into the ring: a 64-byte header and a
 * body holding the group's log records, each followed by the state
 * after-images its event produced, as a generic list of puts (table, key,
 * value), and finally the group's meta puts (head, counts, statistics).  A
 * checkpoint applies those puts to LMDB (ckpt.c); nothing in this file
 * knows what the puts mean.
 *
 * Positions are *logical*: a u64 byte offset that only grows.  Frame `pos`
 * lives at byte HDR + pos % cap of the file.  A frame never crosses the end
 * of the ring: when the next frame does not fit, the writer puts a WRAP
 * frame (a header without body) where it stands and continues at the start
 * of the next lap, the next multiple of cap; every frame leaves room for a
 * WRAP frame after it.
 *
 * Validity.  A frame is applied only if all of these hold:
 *   - its magic and version are right and its reserved bits zero;
 *   - its salt is the log's salt (a new store draws a random one), so the
 *     frames of another store's log, or of this directory's earlier store,
 *     never count;
 *   - its position field is the position it was read at, so a frame left
 *     from an earlier lap of the ring never counts;
 *   - its first LSN is exactly the next one expected (LSNs are dense);
 *   - its checksum (XXH3-64 of the header and body) is seeded with the
 *     checksum of the frame before it (the *chain*), so a frame only counts
 *     after the very frame it was written after: leftovers of a frame that
 *     was overwritten by a shorter one can never be mistaken for a
 *     continuation, even at the right position with the right LSN;
 *   - its body parses exactly, and each record decodes (its own checksum)
 *     with the LSN it must have.
 * The scan stops at the first frame that is not valid: that is the end of
 * the log, and nothing after is applied.  A frame is a whole group, so a
 * batch is all or nothing across a crash.
 *
 * Torn tail or damage.  Every frame also says how far the log was known
 * flushed when it was written (`durable`, a logical position; 0 says
 * nothing).  Where the valid prefix ends, bl_wal_past_break looks past the
 * break for frames of the same log that stand on their own (salt, position,
 * a body that parses and records that decode with consecutive LSNs: all
 * but the chain).  If one of them says the log was flushed beyond the
 * break, the break lies in what was made durable, and acknowledged, before
 * it was written: damage, which recovery refuses (walenv.c).  Otherwise the
 * break is the torn, never-flushed tail a crash may leave.
 *
 * docs/format.md gives every byte.
 */
#ifndef BL_WAL_H
#define BL_WAL_H

#include <stddef.h>
#include <stdint.h>

#define BL_WAL_FILE "bindlog.wal"
#define BL_WAL_HDR 4096u              /* bytes before the ring */
#define BL_WAL_FRAME_HDR 64u          /* bytes of a frame header */
#define BL_WAL_VERSION 2u             /* log file version (1 is still read) */
#define BL_WAL_FRAME_VERSION 2u       /* frame version written (1 is still read) */
#define BL_WAL_MIN_CAP ((uint64_t)64 << 10)
#define BL_WAL_MAX_CAP ((uint64_t)1 << 30)
#define BL_WAL_DEFAULT_CAP ((uint64_t)8 << 20)

/* frame flags */
#define BL_WF_WRAP 0x0001u            /* no body: the next frame is at the next lap */
#define BL_WF_KNOWN BL_WF_WRAP

/* body entry kinds */
#define BL_WE_RECORD 1u               /* a log record (value of table log) */
#define BL_WE_PUT 2u                  /* a put: table, key, value */
#define BL_WE_HDR 8u                  /* bytes of an entry header */

/* Longest key and value a put may carry (LMDB's key limit; a session
 * value with the largest origin). */
#define BL_WE_KEY_MAX 511u
#define BL_WE_VAL_MAX ((uint32_t)1 << 20)

/* Frames are 8-byte aligned. */
static inline uint64_t bl_wal_align(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

/* A point in the log: the last LSN before it, the logical position of the
 * next frame, and the chain (the checksum the next frame is seeded with). */
typedef struct bl_wal_at {
    uint64_t lsn;
    uint64_t pos;
    uint64_t chain;
} bl_wal_at;

/* A frame header, decoded. */
typedef struct bl_wframe {
    unsigned flags;
    uint64_t salt, pos, first_lsn;
    uint32_t nrec, body_len;
    int64_t time_ms;          /* the group's last event time */
    uint64_t durable;         /* the log was flushed up to here when written (0: unknown) */
    uint64_t sum;             /* its checksum: the chain after it */
    const unsigned char *body;
} bl_wframe;

/* One entry of a frame body. */
typedef struct bl_wentry {
    unsigned kind;            /* BL_WE_RECORD or BL_WE_PUT */
    unsigned table;           /* BL_WE_PUT: the table (BL_DB_*) */
    const unsigned char *key; /* BL_WE_PUT */
    size_t klen;
    const unsigned char *val; /* the record, or the put's value */
    size_t vlen;
} bl_wentry;

/* ---- the file ------------------------------------------------------------- */

/* "dir/name" in memory the caller frees; NULL when out of memory.  (The
 * store's other files use it too: store.c.) */
char *bl_path_join(const char *dir, const char *name);

/* Make dir/bindlog.wal: the header, then a ring of cap bytes whose blocks
 * are all reserved (posix_fallocate: a write into the log can never run
 * out of space), fsynced with the directory unless `nosync`.  Replaces an
 * existing file.  0 or BINDLOG_E* (ENOSPC when the disk cannot hold it).
 * The ring is then zero-filled in the background (ckpt.c), so that frames
 * overwrite written blocks: no extent to convert and nothing to journal at
 * fdatasync, the cost an append pays. */
int bl_wal_create(const char *dir, uint64_t cap, uint64_t salt, int nosync);
/* Remove dir's log file: only for an open that created it for a store it
 * then failed to make (nothing refers to it yet). */
void bl_wal_remove(const char *dir);

/* The header's `filled` (0 when the header is damaged), and a new header
 * saying `filled`. */
uint64_t bl_wal_filled(int fd, uint64_t cap);
int bl_wal_set_filled(int fd, uint64_t cap, uint64_t salt, uint64_t filled);

/* Open dir/bindlog.wal (read-write unless read_only) and check it against
 * the store's cap and salt (data.mdb's meta "wal"): the file must hold the
 * header and the whole ring, and an intact header must name that salt and
 * cap (a damaged one is no reason to refuse).  *fd set on success.
 * BINDLOG_ENOTFOUND when it does not exist, BINDLOG_ECORRUPT (with a
 * last-error detail) when it is short or another store's log,
 * BINDLOG_EVERSION for a newer log version. */
int bl_wal_open(const char *dir, int read_only, uint64_t cap, uint64_t salt, int *fd);

/* Write len bytes at logical position pos (the caller keeps them inside
 * one lap).  0, BINDLOG_ENOSPC or BINDLOG_EIO. */
int bl_wal_pwrite(int fd, uint64_t cap, uint64_t pos, const void *buf, size_t len);

/* fdatasync.  0 or BINDLOG_EIO. */
int bl_wal_sync(int fd);

/* Flush the directory `dir` (fsync; F_FULLFSYNC on macOS), so that the
 * names made in it last.  0 or the errno of the failure. */
int bl_sync_dir(const char *dir);

/* ---- frames ----------------------------------------------------------------- */

/* Bytes a frame with a body of body_len takes in the ring. */
static inline uint64_t bl_wframe_size(size_t body_len)
{
    return bl_wal_align(BL_WAL_FRAME_HDR + (uint64_t)body_len);
}

/* Fill the 64-byte header `hdr` of a frame whose body (body_len bytes)
 * follows it in memory, and its checksum seeded with `prev_chain`; returns
 * the checksum (the chain after the frame).  `durable`: the logical
 * position up to which the log was flushed (a completed fdatasync that
 * began when the written end was there), 0 if unknown.  Padding after the
 * body is the caller's (zeros). */
uint64_t bl_wframe_seal(unsigned char *hdr, unsigned flags, uint64_t salt, uint64_t pos,
                        uint64_t first_lsn, uint32_t nrec, uint32_t body_len, int64_t time_ms,
                        uint64_t durable, uint64_t prev_chain);

/* Check the frame at buf (avail bytes there) as the frame expected at
 * `at` (position, next LSN at.lsn + 1, chain), in a ring of cap bytes.
 * Returns 1 (valid: *f filled, f->body points into buf), 0 (not a valid
 * frame there: the end of the log), or -n (valid header so far but n more
 * bytes are needed to check the body: read more and call again). */
int bl_wframe_check(const unsigned char *buf, size_t avail, uint64_t salt, uint64_t cap,
                    const bl_wal_at *at, bl_wframe *f);

/* The next entry of a body at *off; 1 (filled), 0 (end), -1 (malformed:
 * a length runs past the body, an unknown kind, a reserved byte set). */
int bl_wbody_next(const unsigned char *body, size_t len, size_t *off, bl_wentry *e);

/* Append an entry header for an entry of `kind` into out (8 bytes). */
void bl_wentry_hdr(unsigned char *out, unsigned kind, unsigned table, size_t klen, size_t vlen);

/* Check a valid frame's body against the frame: entries parse exactly,
 * the first is a record, there are nrec records with LSNs first_lsn,
 * first_lsn + 1, ..., each decodes, puts name a known table with sane
 * sizes.  1 if so, else 0. */
int bl_wframe_body_ok(const bl_wframe *f);

/* The position after frame f (at `at`): the next lap's start for WRAP. */
uint64_t bl_wframe_next(const bl_wframe *f, uint64_t cap);

/* ---- reading the ring ---------------------------------------------------- */

/* A buffered reader of the ring (pread in large blocks). */
typedef struct bl_wreader {
    int fd;
    uint64_t cap;
    unsigned char *buf;
    size_t bufcap;
    uint64_t base;  /* logical position of buf[0] */
    size_t len;     /* valid bytes in buf */
} bl_wreader;

void bl_wreader_init(bl_wreader *r, int fd, uint64_t cap);
void bl_wreader_free(bl_wreader *r);

/* Read the frame expected at `at`.  1 (valid, *f filled; f->body valid
 * until the next read), 0 (the end of the log), <0 an I/O error or
 * BINDLOG_ENOMEM. */
int bl_wreader_frame(bl_wreader *r, uint64_t salt, const bl_wal_at *at, bl_wframe *f);

/* Called for each valid frame of a scan, in order; `at` is the point after
 * it.  A non-zero return stops the scan with that code. */
typedef int (*bl_wal_frame_fn)(void *ctx, const bl_wframe *f, const bl_wal_at *after);

/*
 * Scan the ring from `start` and call fn for every valid frame until the
 * first invalid one, or until a frame would go past last_lsn (UINT64_MAX:
 * no bound; the scan then stops before a frame whose records go beyond).
 * *end receives the point after the last frame accepted.  Returns 0, an
 * I/O error, or fn's code.
 */
int bl_wal_scan(int fd, uint64_t cap, uint64_t salt, const bl_wal_at *start, uint64_t last_lsn,
                bl_wal_frame_fn fn, void *ctx, bl_wal_at *end);

/* ---- frames on their own: looking past a break ------------------------ */

/* Check the bytes at buf (avail of them) as a frame lying at byte `off` of
 * a ring of cap bytes, on its own: everything bl_wframe_check does but the
 * chain, the expected LSN and the salt (f->salt says whose it is).  WRAP
 * frames carry nothing to verify and never pass.  1 (valid: *f filled), 0,
 * or -n (n more bytes needed). */
int bl_wframe_loose(const unsigned char *buf, size_t avail, uint64_t cap, uint64_t off,
                    bl_wframe *f);

/* Called for every frame of a ring scan that passes bl_wframe_loose, in
 * ring order; `off` is its byte in the ring.  Non-zero stops the scan. */
typedef int (*bl_wal_loose_fn)(void *ctx, const bl_wframe *f, uint64_t off);

/* Asked about each frame header (magic, version, flags right; f->body not
 * yet checked) before its body is: 0 skips it at no cost.  NULL: all. */
typedef int (*bl_wal_want_fn)(void *ctx, const bl_wframe *f, uint64_t off);

/* Scan the whole ring (every 8-byte boundary) for frames that stand on
 * their own, whatever their salt; fn sees those `want` asked for.  0, an
 * I/O error, BINDLOG_ENOMEM or fn's code. */
int bl_wal_loose_scan(int fd, uint64_t cap, bl_wal_want_fn want, bl_wal_loose_fn fn, void *ctx);

/* What lies past the end `end` of a log's valid prefix. */
typedef struct bl_wal_break {
    uint64_t frames;    /* frames of this log past the break (pos >= end, LSNs beyond) */
    uint64_t last_lsn;  /* the highest LSN they hold (0: none) */
    uint64_t durable;   /* the furthest flush point they claim (0: none) */
    int foreign;        /* the bytes at the break are a frame of another log */
    uint64_t foreign_salt;
} bl_wal_break;

/* Look past the break at `end` (the point after the last valid frame of
 * the log with `salt`): *out says what was found.  The break is damage to
 * flushed (acknowledged) frames when out->durable > end->pos, or when
 * out->foreign.  0, an I/O error or BINDLOG_ENOMEM. */
int bl_wal_past_break(int fd, uint64_t cap, uint64_t salt, const bl_wal_at *end,
                      bl_wal_break *out);

/* The frames a dir/bindlog.wal holds, whatever its header says: what a
 * directory without a store (no data.mdb, an empty one, or one without
 * bindlog's tables) must not hold, since frames are only ever written
 * into a store that exists.  A log with none is what a creation that
 * crashed before its first commit leaves, which may be made again. */
typedef struct bl_wal_orphan {
    uint64_t frames;              /* frames that stand on their own */
    uint64_t first_lsn, last_lsn; /* the LSNs they hold (when frames > 0) */
} bl_wal_orphan;

/* Scan dir/bindlog.wal (if there is one) for frames.  0 (out->frames says
 * how many), an I/O error or BINDLOG_ENOMEM. */
int bl_wal_orphan_frames(const char *dir, bl_wal_orphan *out);

/* BINDLOG_ECORRUPT naming what was found (`what`: "there is no
 * data.mdb", ...) if dir/bindlog.wal holds frames; otherwise 0 or the
 * scan's error.  Called before anything is created or written. */
int bl_wal_refuse_orphan(const char *dir, const char *what);

/* The header's salt and cap: 1 if the header is intact (magic, checksum),
 * 0 if not (nothing then to compare). */
int bl_wal_header(int fd, uint64_t *salt, uint64_t *cap);

#endif /* BL_WAL_H */
