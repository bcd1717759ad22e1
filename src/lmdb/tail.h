/*
 * tail.h -- this process's index of the log's tail: every put and record
 * of the frames that LMDB does not hold yet, by (table, key).
 *
 * LMDB holds the state up to the checkpoint; the frames after it are the
 * tail.  Each frame ingested (read from the log by catch-up, or the
 * leader's own just written) becomes a *group*: one allocation with a
 * copy of the frame's body and one *version* per entry: a record is a
 * version of (log, be64 LSN), a put a version of (table, key), each tagged
 * with the LSN of its record.  A hash map leads from (table, key) to its
 * newest version, and versions of one key are linked newest to oldest.
 *
 * Readers ask for the newest version at or below a bound (the visible end:
 * frames written but not yet flushed in FULL are in the index but above
 * the bound).  A miss means LMDB has the answer: the index covers every
 * frame after its base, and base is a checkpoint LMDB already holds.
 *
 * Groups are immutable once linked and reference-counted: a snapshot
 * (iterators, maintenance) keeps the groups it reads, so trimming the
 * index after a checkpoint never pulls memory from under it.
 *
 * Locking: `lock` (a reader-writer lock) guards the map, the list and the
 * ends; point reads take it shared for a lookup and a copy.  Linking and
 * trimming take it exclusive for as long as the map changes.  Trimming
 * waits while a leader has the index pinned (bl_tail_pin): its decisions
 * read LMDB through a snapshot taken when it started, so the index must go
 * on covering everything after that snapshot until it is done.
 *
 * The newest records are also kept by LSN in a ring (bl_tail_kept), past
 * the checkpoint that trims them from the map: a leader deciding an event
 * reads the record that created the session it ends or splits, usually
 * some thousands of records back, and a B-tree search of a large log for
 * it was a sixth of a group's work at 64 writers; the ring answers with
 * neither the map's hash nor its lock.  A record never changes once
 * written, so a kept copy needs no invalidation: it goes when newer
 * records overwrite it, or with all the others when the index restarts (a
 * log that moved on without this process).  Only linking writes the ring,
 * under the exclusive lock; a leader reads it while it holds the writers'
 * lock, having linked every frame there is, so nothing links meanwhile.
 */
#ifndef BL_TAIL_H
#define BL_TAIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/srwlock.h"
#include "lmdb/wal.h"

typedef struct bl_tgroup bl_tgroup;

typedef struct bl_tver {
    struct bl_tver *older, *newer; /* versions of the same (table, key) */
    const unsigned char *key, *val;
    uint32_t klen, vlen;
    uint64_t lsn;                  /* the record it belongs to */
    unsigned table;                /* BL_DB_* */
    uint32_t hash;                 /* of (table, key): the map's probes and moves */
    bl_tgroup *g;
} bl_tver;

struct bl_tgroup {
    bl_tgroup *next;               /* the next newer group of the index */
    atomic_int refs;               /* the index's while linked, plus snapshots' */
    uint64_t first_lsn, last_lsn;  /* its records */
    bl_wal_at after;               /* the log point after its frame */
    int64_t time_ms;
    uint32_t nver;
    bl_tver *ver;
    size_t bytes;                  /* memory it holds */
    size_t block;                  /* the allocation it lives in (>= bytes) */
};

/* The kept records (bl_tail_kept): the newest linked in a ring of
 * BL_TAIL_KEPT_BYTES, found by LSN through BL_TAIL_KEPT slots (slot
 * lsn % BL_TAIL_KEPT; lsn 0: empty).  A slot's record is still there while
 * the ring has not written BL_TAIL_KEPT_BYTES past its start.  With records
 * of ~150 bytes that is the last ~55,000: 9.5 MiB in all, mapped at the
 * first link after this process decided a group (readers keep none) and
 * taken from the system as the records fill it. */
#define BL_TAIL_KEPT 65536u
#define BL_TAIL_KEPT_BYTES (8u << 20)
#define BL_TAIL_KEPT_MAX 4096u /* a longer record is not kept (LMDB has it) */
typedef struct bl_tkept {
    uint64_t lsn;
    uint64_t at;                   /* where it starts, counted from the ring's first byte */
    uint32_t len;
} bl_tkept;

/* A slot of the map: the newest version of a key, and the key's hash (a
 * probe past another key reads neither that key's version nor another
 * cache line). */
typedef struct bl_tslot {
    bl_tver *v;                    /* NULL: empty */
    uint32_t hash;
} bl_tslot;

typedef struct bl_tail {
    bl_srwlock lock;
    bl_tgroup *oldest, *newest;
    bl_wal_at base;                /* the index covers the log after this point */
    bl_wal_at end;                 /* ... up to this one */
    _Atomic uint64_t end_lsn;      /* end.lsn and base.lsn, read without the lock */
    _Atomic uint64_t base_lsn;
    _Atomic uint64_t nver;         /* versions in the map (0: skip the lookup) */
    _Atomic uint64_t bytes;        /* memory of the linked groups */
    int pins;                      /* leaders deciding: no trimming meanwhile */
    bl_tslot *slots;               /* open addressing, linear probing */
    size_t nslots, used;
    bl_tkept *kept;                /* BL_TAIL_KEPT slots, allocated at the first link */
    unsigned char *kept_ring;      /* BL_TAIL_KEPT_BYTES */
    uint64_t kept_end;             /* where the next kept record goes */
    int keep;                      /* 1 once a leader pinned the index: keep records */
} bl_tail;

void bl_tail_init(bl_tail *t, const bl_wal_at *base);
void bl_tail_destroy(bl_tail *t);
/* Empty the index and start it at base. */
void bl_tail_reset(bl_tail *t, const bl_wal_at *base);

/* Make a group of a valid frame (not a WRAP) ending at `after`: it copies
 * the body.  NULL when out of memory. */
bl_tgroup *bl_tgroup_make(const bl_wframe *f, const bl_wal_at *after);
void bl_tgroup_ref(bl_tgroup *g);
void bl_tgroup_unref(bl_tgroup *g);

/* Link g as the newest group (its frame follows t->end) and take its
 * reference.  A WRAP frame only moves the end: bl_tail_advance. */
int bl_tail_link(bl_tail *t, bl_tgroup *g);
void bl_tail_advance(bl_tail *t, const bl_wal_at *after);

/* The checkpoint reached `ckpt`: drop the groups it covers (all of them,
 * and restart the index at ckpt, when ckpt is at or past the end).
 * Returns 1 if done, 0 if deferred because a leader pins the index. */
int bl_tail_trim(bl_tail *t, const bl_wal_at *ckpt);

void bl_tail_pin(bl_tail *t);
void bl_tail_unpin(bl_tail *t);

/* The record at lsn among the kept ones: 1 and *rec, *len (valid until
 * the next link), or 0 (the map or LMDB may still have it).  Only for the
 * leader deciding a group (it holds the writers' lock and has linked every
 * frame written: nothing links until it is done). */
int bl_tail_kept(const bl_tail *t, uint64_t lsn, const void **rec, size_t *len);

/* Called with the newest version <= bound of (table, key), under the
 * index's shared lock: copy what is needed.  Returns its code. */
typedef int (*bl_tail_copy_fn)(void *ctx, const bl_tver *v);

/* Look (table, key) up: 1 (found: fn's code is in *fnrc), 0 (not in the
 * tail at or below bound: LMDB has the answer). */
int bl_tail_get(bl_tail *t, unsigned table, const void *key, size_t klen, uint64_t bound,
                bl_tail_copy_fn fn, void *ctx, int *fnrc);

/* The groups with records <= bound, referenced, oldest first (*out
 * malloc'ed; free with bl_tail_groups_free), and the index's base at the
 * time.  0 or BINDLOG_ENOMEM. */
int bl_tail_groups(bl_tail *t, uint64_t bound, bl_tgroup ***out, size_t *n, bl_wal_at *base);
void bl_tail_groups_free(bl_tgroup **gs, size_t n);

/* ---- sorted views of pinned groups (snapshots) ------------------------- */

/* One (key, value) of a table, the newest in the view. */
typedef struct bl_tent {
    const unsigned char *key, *val;
    uint32_t klen, vlen;
    uint64_t lsn;
} bl_tent;

/* The entries of `table` among groups gs[0..n) with above < lsn <= bound,
 * newest per key, sorted by key bytes.  *out malloc'ed (NULL when empty).
 * 0 or BINDLOG_ENOMEM. */
int bl_tail_sorted(bl_tgroup *const *gs, size_t n, unsigned table, uint64_t above,
                   uint64_t bound, bl_tent **out, size_t *count);

/* Binary search a sorted view.  The entry or NULL. */
const bl_tent *bl_tent_find(const bl_tent *e, size_t n, const void *key, size_t klen);

/* Compare two keys as LMDB does by default (bytes, then length). */
int bl_key_cmp(const void *a, size_t an, const void *b, size_t bn);

#endif /* BL_TAIL_H */
