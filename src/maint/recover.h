/*
 * recover.h -- what bindlog_recover() salvages, and where from.
 *
 * Recovery reads a damaged store without ever letting LMDB open it, in two
 * parts:
 *
 *   salvage  sources read the store's files and hand over whatever
 *            validates: log records (each decodes and its checksum and LSN
 *            agree), the meta records (head, base image LSN and time and
 *            counters), the base image's entries when its tables are whole,
 *            and evidence of the state (the bindings and sessions tables,
 *            the history index) from the pages that pass;
 *   rebuild  (recover.c) re-derives a store from that: exactly where the
 *            log is whole, from the evidence where it is not, and reports
 *            what was lost.
 *
 * Sources are functions of one shape, tried in the order of
 * bl_salvage_sources[]: today data.mdb (recover_mdb.c).  The write-ahead
 * log of format 2 keeps its recent records in a file of its own; its
 * reader becomes a second source that hands its records over with
 * bl_salvage_record() and a higher trust (a record in the log file is newer
 * than any copy in data.mdb's free pages), and nothing else changes.
 *
 * Every pointer a source hands over must stay valid until the salvage is
 * freed: sources that map files register the mappings with
 * bl_salvage_keep(), which unmaps them at the end.
 */
#ifndef BL_RECOVER_H
#define BL_RECOVER_H

#include <stddef.h>
#include <stdint.h>

#include "maint/maint.h"

typedef struct bl_salvage bl_salvage;

/* How much a copy of a record is trusted when two differ (they never do
 * in a store LMDB wrote: a record's bytes never change once written). */
enum {
    BL_TRUST_FREE = 1,    /* a page no tree reaches (freed, not yet reused) */
    BL_TRUST_OLDER = 2,   /* the tree of the older meta page */
    BL_TRUST_CURRENT = 3, /* the tree of the current meta page */
    BL_TRUST_WAL = 4      /* the write-ahead log of format 2 (to come) */
};

/* A log record found under LSN lsn (the source checked that it decodes and
 * carries that LSN). */
int bl_salvage_record(bl_salvage *sv, uint64_t lsn, const unsigned char *p, size_t n, int trust);

/* An entry of the stored state (table BL_DB_BINDINGS or BL_DB_SESSIONS),
 * or of the base image (BL_DB_BASE_BINDINGS, BL_DB_BASE_SESSIONS); the
 * value is decoded and checked here. */
int bl_salvage_entry(bl_salvage *sv, int table, const unsigned char *k, size_t kn,
                     const unsigned char *v, size_t vn);

/* A history index entry (key 0x00 be64 LSN). */
int bl_salvage_history(bl_salvage *sv, const unsigned char *k, size_t kn);

/* The meta records, from the newest tree that has them readable. */
typedef struct bl_salvage_meta {
    int whole;           /* the meta table was read whole: a missing record is missing */
    int have_head, have_base;
    bl_head head;
    bl_base base;
} bl_salvage_meta;
void bl_salvage_set_meta(bl_salvage *sv, const bl_salvage_meta *m);

/* The base image's tables could not be read whole: it cannot be used. */
void bl_salvage_base_damaged(bl_salvage *sv);

/* Pages read, and tree pages that failed validation. */
void bl_salvage_pages(bl_salvage *sv, uint64_t pages, uint64_t damaged);

/* Keep a mapping alive until the salvage is freed. */
int bl_salvage_keep(bl_salvage *sv, void *map, size_t len);

/* A source: read what it can of the store in `dir` into sv.  0 (even when
 * little was found), BINDLOG_ENOTFOUND when its file is not there,
 * BINDLOG_ENOTSTORE when it holds nothing of a bindlog store, or an I/O
 * error. */
typedef int (*bl_salvage_fn)(bl_salvage *sv, const char *dir);

/* data.mdb, page by page (recover_mdb.c). */
int bl_salvage_mdb(bl_salvage *sv, const char *dir);

#endif /* BL_RECOVER_H */
