/*
 * upgrade.h -- bindlog_upgrade(): a store of an older on-disk format moved
 * to the current one (upgrade.c), and the reader of format 1 it starts from
 * (upgrade_f1.c).
 *
 * Format 1 (main up to commit ac406c8, before the write-ahead log) kept
 * every event in data.mdb's tables: meta, log, bindings, sessions,
 * children, history, base_bindings, base_sessions (docs/format.md,
 * "Format 1").  The reader here knows those tables by name and reads them
 * with the page validator (lmdb/pagecheck.h), never through LMDB and never
 * through today's table code: format 2's tables may change while format
 * 1's bytes never will.  What it produces is an export stream (the same
 * bytes `bindlog export` writes, version 1, independent of any on-disk
 * format), which the new store takes in through bindlog_import(): every
 * record re-derived by the current state machine, the result's digest
 * compared with the stream's.
 */
#ifndef BL_UPGRADE_H
#define BL_UPGRADE_H

#include <stddef.h>
#include <stdint.h>

#include "bindlog.h"

/* What the reader found in a data.mdb. */
typedef struct bl_f1_info {
    uint32_t format;       /* meta "format": 1, 2, ... */
    uint64_t head_lsn;     /* meta "head" */
    int64_t head_time;
    uint64_t base_lsn;     /* meta "base" (0: never compacted) */
    int64_t base_time;
    unsigned char counts[8 * (BINDLOG_EVENT_COUNT + 2)];      /* meta "counts", raw */
    unsigned char base_counts[8 * (BINDLOG_EVENT_COUNT + 2)]; /* meta "base_counts", raw */
    /* applied ROUTE events (format 3 with routing: the 8 bytes after the
     * 64 of "counts" and "base_counts"; 0 without) */
    uint64_t routes, base_routes;
    uint64_t records;      /* log records (export) */
    uint64_t bindings;     /* entries of the bindings table (export) */
    uint64_t sessions;     /* entries of the sessions table (export) */
    unsigned char digest[BINDLOG_DIGEST_SIZE]; /* state digest of bindings + sessions (export) */
    /* formats 5 to 7: the caller computed digest (bindlog_digest of the drained
     * store: its sessions may be references, which only the library reads
     * whole), and the export takes it as it is */
    int digest_given;
} bl_f1_info;

/*
 * Read the meta records of dir/data.mdb (a regular file, never followed
 * as a link) and say which format it is.  0 with info->format and the meta
 * fields set; BINDLOG_ENOTFOUND (no data.mdb), BINDLOG_ENOTSTORE (not an
 * LMDB file, or not bindlog's), BINDLOG_ECORRUPT (its meta pages, main
 * database or meta table are damaged), BINDLOG_EIO / EACCES; each with a
 * last-error detail.  Reads only.
 */
int bl_f1_probe(const char *dir, bl_f1_info *info);

/*
 * Write a full export stream of the format-1 store in dir to fd: the base
 * image (meta "base", "base_time", "base_counts", tables base_bindings and
 * base_sessions), every log record after it, and a trailer whose digest is
 * the digest of the stored bindings and sessions tables (what format-1
 * code's bindlog_digest() printed).  Every tree is validated page by page
 * as it is read; records must decode, carry their key's LSN, run densely
 * from base + 1 to meta "head" and never go back in time.  0 with info
 * filled; BINDLOG_ECORRUPT with a detail naming the table and page or LSN;
 * BINDLOG_EIO / ENOSPC writing fd.  Reads only.
 */
int bl_f1_export(const char *dir, int fd, bl_f1_info *info);

#endif /* BL_UPGRADE_H */
