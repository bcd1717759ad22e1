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
 * Sources are functions of one shape (bl_salvage_fn), tried in the order
 * of the table sources[] in recover.c: data.mdb (recover_mdb.c), then the
 * write-ahead log, bindlog.wal (recover_wal.c), which holds the records
 * not yet checkpointed into data.mdb.  The log is read from where data.mdb's
 * meta "wal" says the checkpoint left it, so it comes after data.mdb; its
 * records are handed over with the highest trust (BL_TRUST_WAL).
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
    BL_TRUST_WAL = 4      /* the write-ahead log (bindlog.wal): valid frames only */
};

/* A log record found under LSN lsn (the source checked that it decodes and
 * carries that LSN).  A record of version 2 or later also names its key's
 * previous LSN: evidence of that key, should that record be lost. */
int bl_salvage_record(bl_salvage *sv, uint64_t lsn, const unsigned char *p, size_t n, int trust);

/* The same, with the state after-images the record's event produced: the
 * body entries (lmdb/wal.h) that follow it in its log frame, `an` bytes at
 * `after` (the log's copy of a record carries them; data.mdb's does not).
 * After a loss they give the state of what the event touched exactly. */
int bl_salvage_record_after(bl_salvage *sv, uint64_t lsn, const unsigned char *p, size_t n,
                            int trust, const unsigned char *after, size_t an);

/* An entry of the stored state (table BL_DB_BINDINGS or BL_DB_SESSIONS),
 * or of the base image (BL_DB_BASE_BINDINGS, BL_DB_BASE_SESSIONS); the
 * value is decoded and checked here. */
int bl_salvage_entry(bl_salvage *sv, int table, const unsigned char *k, size_t kn,
                     const unsigned char *v, size_t vn);

/* A history index entry (key 0x00 be64 LSN): format 2's index, read when
 * a format-2 store is recovered. */
int bl_salvage_history(bl_salvage *sv, const unsigned char *k, size_t kn);

/* After bl_salvage_dedupe(): every stored session kept as a reference
 * (formats 5 to 7) made whole, marked (bl_sval_encode_base), from the salvaged
 * record that created it or the base image's value; one that resolves
 * nowhere (its record is lost) is dropped, as a damaged value is.  0 or
 * BINDLOG_ENOMEM. */
int bl_salvage_resolve(bl_salvage *sv);
/* A session `id` kept as a reference whose creating record is lost: its
 * own fields (s, decoded) kept, the key `key` or, NULL, the one a later
 * record of the key names for the lost LSN (its previous record), else the
 * stored binding's that is bound to it; no parent and no origin (they were
 * the record's only), and as creation time the last surviving record's
 * before it.  0, or -1 when no key is known. */
int bl_salvage_lost_creation(const bl_salvage *sv, bl_sval *s, const void *id, size_t id_len,
                             const char *key, size_t key_len);
/* The salvaged record at lsn (after bl_salvage_dedupe), or NULL. */
const struct bl_srec *bl_salvage_find_record(const bl_salvage *sv, uint64_t lsn);

/* The meta records, from the newest tree that has them readable. */
typedef struct bl_salvage_meta {
    int whole;           /* the meta table was read whole: a missing record is missing */
    int have_head, have_base;
    bl_head head;
    bl_base base;
    /* meta "wal" (32 bytes: salt, cap, pos, chain): where the log goes on
     * after the checkpoint that wrote `head` (format 2; none in format 1) */
    int have_wal;
    uint64_t wal_salt, wal_cap, wal_pos, wal_chain;
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

/* bindlog.wal's frames after the checkpoint data.mdb's meta names, along
 * the checksum chain and then every frame of the log that stands on its
 * own past a break (recover_wal.c); uses bl_salvage_mdb's meta records
 * when it found them. */
int bl_salvage_wal(bl_salvage *sv, const char *dir);

/* ---- inside recover: recover.c (the call), recover_salvage.c (what was
 * found, and its indexes) and recover_walk.c (the rebuild) ----------------- */

typedef struct bl_srec {
    uint64_t lsn;
    const unsigned char *p;
    size_t n;
    int trust;
    const unsigned char *after; /* its after-images (body entries), or NULL */
    size_t after_n;
} bl_srec;

typedef struct bl_sent {
    const unsigned char *k, *v;
    size_t kn, vn;
    uint64_t a, b; /* bindings: lsn; sessions: created, ended */
} bl_sent;

typedef struct bl_shist {
    uint64_t lsn;
    const unsigned char *k;
    size_t kn;
} bl_shist;

#define VEC(T)                                                                             \
    struct {                                                                               \
        T *v;                                                                              \
        size_t n, cap;                                                                     \
    }

/* Entries of a table, one type for the state's and the base image's (so
 * that code can take either). */
typedef VEC(bl_sent) bl_sentvec;

/* The salvage: what the sources handed over. */
struct bl_salvage {
    VEC(bl_srec) recs;
    bl_sentvec state[2]; /* stored bindings, sessions */
    bl_sentvec base[2];  /* base image bindings, sessions */
    VEC(bl_shist) hist;
    bl_salvage_meta meta;
    int have_meta, base_damaged;
    /* the log (recover_wal.c): 1 read, 0 no bindlog.wal, -1 not readable
     * (why in wal_why); the LSNs its valid frames hold */
    int wal_state;
    char wal_why[160];
    uint64_t wal_first, wal_last;
    VEC(struct mapping { void *p; size_t n; }) maps;
    VEC(void *) bufs; /* whole values made of references (bl_salvage_resolve) */
    uint64_t pages, damaged, conflicts;
};

#define PUSH(vec, item)                                                                    \
    ((vec).n == (vec).cap && bl_rv_grow((void **)&(vec).v, &(vec).cap, sizeof(*(vec).v)) != 0   \
         ? BINDLOG_ENOMEM                                                                  \
         : ((vec).v[(vec).n++] = (item), 0))

/* An entry of the stored state, by the LSN one of its fields names. */
typedef struct bl_byl {
    uint64_t lsn;
    const bl_sent *e;
} bl_byl;

/* What the stored state says happened at each LSN. */
typedef struct bl_evidence {
    bl_byl *bind;          /* stored bindings by the LSN that last changed them */
    bl_byl *created, *ended;
    size_t nbind, ncreated, nended;
} bl_evidence;

/* Keys whose history has a gap (copies, NUL-terminated). */
typedef struct bl_keyset {
    char **v;
    size_t n, cap;
} bl_keyset;

/* One walk over the LSNs (recover_walk.c). */
typedef struct bl_walk {
    bl_salvage *sv;
    const bl_evidence *ev;
    bl_env *y;               /* the state (a scratch store) */
    uint64_t start, head, stop;
    bl_replayer r;
    uint64_t cut;
    size_t ri;               /* next record index */
    /* the report (first run only) */
    bl_keyset *gap;
    bindlog_recover_report *rep;
    uint64_t range_first;    /* open lost range, 0 = none */
    VEC(bindlog_lsn_range) ranges;
    bindlog_progress_fn progress;
    void *pctx;
} bl_walk;

/* qsort that takes an empty array; growth of a VEC (PUSH). */
void bl_rv_sort(void *v, size_t n, size_t size, int (*cmp)(const void *, const void *));
int bl_rv_grow(void **v, size_t *cap, size_t size);
/* Key order (bytes, then length); history entries by LSN. */
int bl_rv_cmp_key(const unsigned char *a, size_t an, const unsigned char *b, size_t bn);
int bl_rv_cmp_hist(const void *a, const void *b);

/* Unmap and free what the salvage holds. */
void bl_salvage_free(bl_salvage *sv);
/* Records sorted by LSN, one copy each (the most trusted). */
void bl_salvage_dedupe(bl_salvage *sv);
/* The stored session `id`, or NULL (after bl_evidence_build sorted them). */
const bl_sent *bl_salvage_session(const bl_salvage *sv, const char *id, size_t n);

int bl_evidence_build(bl_salvage *sv, bl_evidence *ev);
void bl_evidence_free(bl_evidence *ev);
/* The first index of `lsn` in a bl_byl array (or n). */
size_t bl_evidence_find(const bl_byl *v, size_t n, uint64_t lsn);

/* Add a key (ks NULL: nothing); sort and drop duplicates. */
int bl_keyset_add(bl_keyset *ks, const void *k, size_t n);
void bl_keyset_unique(bl_keyset *ks);

/* Walk LSNs start+1..stop on the state in w->y (recover_walk.c), and count
 * the live bindings and sessions of a state. */
int bl_walk_run(bl_walk *w);
int bl_walk_count_live(bl_env *e, uint64_t *lb, uint64_t *ls);

#endif /* BL_RECOVER_H */
