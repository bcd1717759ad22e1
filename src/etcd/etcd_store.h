/*
 * etcd_store.h -- the etcd backend's internals (backend_etcd.c and the
 * files beside it; the maintenance operations in etcd_maint.c).
 *
 * A store lives under a PREFIX in one etcd cluster (location
 * "etcd://HOST:PORT[,HOST:PORT...]/PREFIX").  Every key of the store is
 *
 *     PREFIX "/" T "/" NAME
 *
 * with T one letter naming the table, so that within a table etcd's bytewise
 * key order is NAME's byte order (the same order as the LMDB tables):
 *
 *   m  meta       "magic"   -> "bindlog-store"
 *                 "format"  -> u32 format version (BL_ES_FORMAT)
 *                 "head"    -> u64 lsn, i64 time_ms of the last record
 *                 "counts"  -> u64 applied[6], u64 live_bindings, u64 live_sessions
 *                 "base", "base_time", "base_counts" -> the base image's LSN,
 *                              time and counters (maint.h; absent = 0)
 *   b  bindings   key -> binding value (record.h)
 *   s  sessions   session id -> session value (record.h)
 *   l  log        20-digit zero-padded decimal LSN -> record (record.h)
 *   c  children   parent 0x00 child -> ""
 *   h  history    key 0x00 20-digit decimal LSN -> ""
 *   B  base image bindings   key -> binding value
 *   S  base image sessions   id -> session value
 *
 * Every value is byte-identical to what the LMDB backend stores under the
 * same name (little-endian, record.h's encodings), so digests agree and
 * export/import moves a store between backends unchanged.
 *
 * Concurrency.  Every write that changes the state (an event, an import)
 * puts meta "head" in the same Txn and compares "head"'s mod_revision
 * with the revision its reads saw, so writers of every process serialise
 * on "head"; writers also compare every state key they read.  Writers that
 * change only the log and the base image (compaction) never touch the
 * state tables, and need not bump "head": they must however compare the
 * meta keys they change and never delete a record above the base.
 */
#ifndef BL_ETCD_STORE_H
#define BL_ETCD_STORE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "etcd/etcd_client.h"
#include "core/error.h"
#include "core/group.h"
#include "core/machine.h"
#include "core/module.h"

/* Tables (the letter T of the layout above). */
#define BL_ES_META 'm'
#define BL_ES_BINDINGS 'b'
#define BL_ES_SESSIONS 's'
#define BL_ES_LOG 'l'
#define BL_ES_CHILDREN 'c'
#define BL_ES_HISTORY 'h'
#define BL_ES_BASE_BINDINGS 'B'
#define BL_ES_BASE_SESSIONS 'S'

#define BL_ES_MAGIC "bindlog-store"
/* The etcd store's own format version.  It stays 1 when the LMDB store's
 * (BINDLOG_FORMAT_VERSION) moved to 2 with the write-ahead log: the keys
 * and values under a prefix did not change. */
#define BL_ES_FORMAT 1
#define BL_ES_LSN_DIGITS 20   /* decimal digits of an LSN in log and history keys */
#define BL_ES_PAGE 256        /* keys per page of a paged scan */

/* Persistent counters (meta "counts", "base_counts"): same layout and
 * bytes as the LMDB store's bl_counts. */
typedef struct bl_es_counts {
    uint64_t applied[BINDLOG_EVENT_COUNT];
    uint64_t live_bindings;
    uint64_t live_sessions;
} bl_es_counts;

/* As LMDB's meta "counts" (lmdb/store.h): 64 bytes, or 72 once a route
 * was applied (its count last); the encoder returns the length. */
#define BL_ES_COUNTS_BYTES_V3 64
#define BL_ES_COUNTS_BYTES (BL_ES_COUNTS_BYTES_V3 + 8)
size_t bl_es_counts_encode(unsigned char out[BL_ES_COUNTS_BYTES], const bl_es_counts *c);
/* 0 or BINDLOG_ECORRUPT (wrong length). */
int bl_es_counts_decode(const void *in, size_t len, bl_es_counts *c);

/* The meta records, read together at one revision. */
typedef struct bl_es_meta {
    int64_t revision;         /* the store revision the read saw */
    unsigned format;          /* meta "format" */
    uint64_t head_lsn;        /* meta "head" */
    int64_t head_time_ms;
    int64_t head_mod;         /* mod_revision of meta "head" (0: absent) */
    bl_es_counts counts;      /* meta "counts" */
    int64_t counts_mod;
    uint64_t base_lsn;        /* meta "base" (0: never compacted) */
    int64_t base_time_ms;     /* meta "base_time" */
    bl_es_counts base_counts; /* meta "base_counts" */
    int64_t base_mod;         /* mod_revision of meta "base" (0: absent) */
    int64_t import_mod;       /* mod_revision of meta "import", the marker of a
                                 fenced import in progress (0: none); writers
                                 refuse with BINDLOG_EBUSY while it exists */
} bl_es_meta;

/*
 * One store as this process sees it: shared by every handle of the process
 * opened on the same endpoints and prefix (like LMDB's bl_env), so that all
 * of them share one group-commit queue and one set of statistics.
 * Handles keep it in bindlog.be.
 */
typedef struct bl_estore {
    struct bl_estore *next;   /* registry list (registry mutex) */
    int refs;                 /* handles */
    char *location;           /* "etcd[s]://..." as opened (registry key) */
    char *endpoints;          /* "host:port,..." */
    unsigned char *prefix;    /* PREFIX "/" (not NUL-terminated) */
    size_t prefix_len;
    bl_etcd *c;               /* the client (thread-safe) */
    unsigned max_txn_ops;     /* the servers' --max-txn-ops as configured */
    uint64_t settings;        /* salted hash of the security settings and the
                                 Txn limit: part of the registry key */
    bl_group g;               /* group commit, sticky failure, statistics */
    struct bl_es_hints *hints; /* bound-session hints of the prefetch
                                  (etcd_wset.c); NULL until first used */
} bl_estore;

/* The longest a group's leader waits for the writers of the last group to
 * queue again (bl_group_fill; never more than a quarter of a group's run). */
#define BL_ES_GROUP_FILL_US 2000

/* The store of a handle of the etcd backend. */
static inline bl_estore *bl_es_of(bindlog *h) { return (bl_estore *)h->be; }

/* ---- keys ---------------------------------------------------------------- */

/* A growable byte buffer.  Start zeroed; free with bl_ebuf_free(). */
typedef struct bl_ebuf {
    unsigned char *p;
    size_t len, cap;
} bl_ebuf;

int bl_ebuf_reserve(bl_ebuf *b, size_t cap);          /* 0 or BINDLOG_ENOMEM */
int bl_ebuf_append(bl_ebuf *b, const void *p, size_t n); /* 0 or BINDLOG_ENOMEM */
void bl_ebuf_free(bl_ebuf *b);

/* b = PREFIX "/" table "/" name.  0 or BINDLOG_ENOMEM. */
int bl_es_key(const bl_estore *st, int table, const void *name, size_t name_len, bl_ebuf *b);

/* b = PREFIX "/l/" 20-digit lsn. */
int bl_es_log_key(const bl_estore *st, uint64_t lsn, bl_ebuf *b);

/* b = PREFIX "/h/" key 0x00 20-digit lsn; PREFIX "/c/" parent 0x00 child. */
int bl_es_history_key(const bl_estore *st, const char *key, size_t key_len, uint64_t lsn,
                      bl_ebuf *b);
int bl_es_child_key(const bl_estore *st, const char *parent, size_t parent_len,
                    const char *child, size_t child_len, bl_ebuf *b);

/* The key range [begin, end) of every key of `table` whose name starts with
 * `name` (name_len 0: the whole table).  0 or BINDLOG_ENOMEM. */
int bl_es_table_range(const bl_estore *st, int table, const void *name, size_t name_len,
                      bl_ebuf *begin, bl_ebuf *end);

/* Write the 20 decimal digits of lsn to out (no NUL); parse them back
 * (0, or BINDLOG_ECORRUPT for anything but exactly 20 digits in range). */
void bl_es_lsn_format(uint64_t lsn, char out[BL_ES_LSN_DIGITS]);
int bl_es_lsn_parse(const void *p, size_t n, uint64_t *lsn);

/* The name part of a full key of `table` (the bytes after PREFIX "/T/"),
 * or NULL if the key is not in that table. */
const unsigned char *bl_es_key_name(const bl_estore *st, int table, const bl_etcd_kv *kv,
                                    size_t *name_len);

/* ---- reads at one revision -------------------------------------------------- */

/*
 * Map a client error to the public codes: BL_ETCD_ECOMPACTED becomes
 * `compacted` (the caller knows what a compacted revision means for it);
 * everything else passes unchanged, and the client's message of the
 * failure (bl_etcd_last_error) becomes the last-error detail when none was
 * set since the call began.
 */
int bl_es_error(int rc, int compacted);

/*
 * Read every meta record at `revision` (0: a linearizable read of the
 * latest, whose revision lands in m->revision; later reads of the same
 * snapshot pass m->revision).  A store without meta "magic" is
 * BINDLOG_ENOTSTORE; a wrong magic or a bad length BINDLOG_ECORRUPT; a
 * newer format BINDLOG_EVERSION; BL_ETCD_ECOMPACTED for a compacted
 * revision; client errors (BINDLOG_EIO...) unchanged.
 */
int bl_es_meta_read(bl_estore *st, int64_t revision, bl_es_meta *m);

/* Decode the meta records `kvs` read at `revision` (a range over the meta
 * table, e.g. inside a read Txn) into *m, with bl_es_meta_read's checks
 * and errors. */
int bl_es_meta_parse(const bl_estore *st, const bl_etcd_kvs *kvs, int64_t revision,
                     bl_es_meta *m);

/*
 * Read one key of `table` at `revision` (0: latest, linearizable).
 * Returns 0 with the value in *kvs (kvs->n == 1) or BINDLOG_ENOTFOUND
 * (kvs->n == 0), or a client error.  *kvs is overwritten and must be freed
 * with bl_etcd_kvs_free() in every case.
 */
int bl_es_get(bl_estore *st, int table, const void *name, size_t name_len, int64_t revision,
              bl_etcd_kvs *kvs);

/*
 * A paged scan of [begin, end) at one revision, BL_ES_PAGE keys per
 * request, in key order (descending with BL_ETCD_SORT_DESCEND in flags).
 * revision 0 takes the latest at the first page and pins every later page
 * to it (it->revision).  Open copies begin and end.
 */
typedef struct bl_es_pager {
    bl_estore *st;
    bl_ebuf next;         /* where the next page starts (ascending) or ends
                             (descending: exclusive end of the next page) */
    bl_ebuf begin, end;   /* the range */
    int64_t revision;     /* pinned after the first page */
    int flags;            /* BL_ETCD_KEYS_ONLY, BL_ETCD_SORT_DESCEND */
    bl_etcd_kvs page;     /* the current page */
    size_t pos;           /* next entry of page */
    int done;             /* no page after this one */
    int started;
} bl_es_pager;

int bl_es_pager_open(bl_es_pager *pg, bl_estore *st, const void *begin, size_t begin_len,
                     const void *end, size_t end_len, int64_t revision, int flags);
/* 1 with *kv (valid until the next call or close), 0 at the end, or an
 * error (BL_ETCD_ECOMPACTED if the revision was compacted meanwhile). */
int bl_es_pager_next(bl_es_pager *pg, const bl_etcd_kv **kv);
void bl_es_pager_close(bl_es_pager *pg);

/*
 * Call fn for every key of `table` (name prefix `name`, name_len 0 = all)
 * at `revision`, in order; fn returns 0 to go on, anything else stops the
 * scan and is returned.  *revision_out (may be NULL) receives the revision
 * read (useful with revision 0).
 */
int bl_es_scan(bl_estore *st, int table, const void *name, size_t name_len, int64_t revision,
               int (*fn)(void *ctx, const bl_etcd_kv *kv), void *ctx, int64_t *revision_out);

/* ---- write sets (etcd_wset.c) ----------------------------------------------------
 *
 * A write set is what one Txn will do: reads at one revision through an
 * in-memory overlay of the set's own pending puts (so each event decided
 * into it sees the ones before), a compare for every key read from etcd
 * (MOD == its mod_revision, or CREATE == 0 when it was absent), and the
 * puts.  bl_es_wset_view() gives bl_decide() its view; bl_es_wset_apply()
 * adds an APPLIED, encoded plan's puts; savepoints undo the puts of a batch
 * that failed half-way.  Memory the view returns stays valid until the set
 * is reset or freed.
 */
typedef struct bl_es_wset bl_es_wset;

/* The store's bound-session hints (see etcd_wset.c); freed with it. */
typedef struct bl_es_hints bl_es_hints;
void bl_es_hints_free(bl_es_hints *h);

/* A new, empty set reading `st` at `revision` (> 0).  BINDLOG_ENOMEM. */
int bl_es_wset_new(bl_estore *st, int64_t revision, bl_es_wset **out);
void bl_es_wset_free(bl_es_wset *ws);
/* Forget everything and read at `revision` from now on. */
void bl_es_wset_reset(bl_es_wset *ws, int64_t revision);

/*
 * Prefetch.  bl_es_wset_want() names a key of the state tables the group's
 * events will read; bl_es_wset_prefetch() then reads every wanted key in
 * as few read-only Txns (RANGE ops only, no compares) as --max-txn-ops
 * allows, in two rounds: first the wanted keys plus the caller's `extra`
 * RANGE ops (the meta table), then the session each fetched binding is
 * bound to, where not fetched already.  The first Txn's revision becomes
 * the set's revision (*revision; later single reads are pinned to it) and
 * its answers to `extra` land in extra_out[0..nextra) (free each with
 * bl_etcd_kvs_free()).  A Txn cannot be pinned to a revision, so every
 * later Txn compares meta "head"'s mod_revision with the first one's: as
 * every change of the state tables moves "head", all values then equal
 * the first Txn's, one consistent snapshot (decisions that write nothing,
 * e.g. MOVED, rest on it).  If "head" moved, the prefetch fails with
 * BL_ES_MOVED: read again, as after a lost race.  A prefetched value
 * counts as read -- gets its compare in the final Txn, on the
 * mod_revision read -- only once a view read uses it; values never used
 * cost no compare.  Keys not prefetched are read singly at the set's
 * revision, as before.  Call on a set just reset; at most
 * BL_ES_PREFETCH_MAX keys are fetched (the others fall back to single
 * reads).
 */
#define BL_ES_PREFETCH_MAX 1024
#define BL_ES_MOVED (-102) /* internal, like BL_ETCD_ECOMPACTED */
int bl_es_wset_want(bl_es_wset *ws, int table, const void *name, size_t name_len);
int bl_es_wset_prefetch(bl_es_wset *ws, const bl_etcd_op *extra, size_t nextra,
                        bl_etcd_kvs *extra_out, int64_t *revision);
/* Keys wanted so far. */
size_t bl_es_wset_nwant(const bl_es_wset *ws);

/* A bl_view over the set (state tables b and s). */
void bl_es_wset_view(bl_es_wset *ws, bl_view *v);
/* The first storage error a view read met (BINDLOG_EIO, BL_ETCD_ECOMPACTED,
 * BINDLOG_ECORRUPT for a value that does not decode...), 0 if none: tells
 * a refusal of the event from a failure of the store. */
int bl_es_wset_error(const bl_es_wset *ws);
/* Queue the puts of an APPLIED plan encoded into enc: binding, sessions,
 * children and history entries, the log record. */
int bl_es_wset_apply(bl_es_wset *ws, const bl_plan *p, const bl_encoded *enc);
/* Queue one put. */
int bl_es_wset_put(bl_es_wset *ws, int table, const void *name, size_t name_len,
                   const void *value, size_t value_len);

/* Savepoints: the puts queued since can be dropped (reads stay). */
size_t bl_es_wset_savepoint(const bl_es_wset *ws);
void bl_es_wset_rollback(bl_es_wset *ws, size_t savepoint);

/* What the Txn would carry: puts, compares, and raw key+value bytes. */
size_t bl_es_wset_nputs(const bl_es_wset *ws);
size_t bl_es_wset_ncmps(const bl_es_wset *ws);
size_t bl_es_wset_bytes(const bl_es_wset *ws);

/*
 * Send the set as one Txn: its compares plus MOD(meta "head") == head_mod,
 * its puts plus `extra` ops (the caller's meta puts, e.g. head and counts).
 * *succeeded is whether the compares held; *retried the client's flag (the
 * Txn may have applied at an earlier attempt).  Client errors unchanged.
 */
int bl_es_wset_commit(bl_es_wset *ws, int64_t head_mod, const bl_etcd_op *extra,
                      size_t nextra, int *succeeded, int *retried, int64_t *revision);

/* ---- the state digest -------------------------------------------------------- */

/* The digest of tables `btable`, `stable` (bindings and sessions, or the
 * base image's) at `revision` (digest.c's definition). */
int bl_es_digest_tables(bl_estore *st, int btable, int stable, int64_t revision,
                        unsigned char out[BINDLOG_DIGEST_SIZE]);

/* ---- maintenance (etcd_maint.c) ------------------------------------------------
 * The backend's check, replay, compact, export and import.  Compaction is
 * bl_etcd_compact_log: bl_etcd_compact is the client's etcd compaction
 * (etcd_client.h). */

int bl_etcd_check(bindlog *h, bindlog_check_report *out, bindlog_progress_fn fn, void *ctx);
int bl_etcd_replay(bindlog *h, const char *out_dir, uint64_t to_lsn, int64_t to_time_ms,
                   unsigned char digest[BINDLOG_DIGEST_SIZE], uint64_t *last_lsn,
                   bindlog_progress_fn fn, void *ctx);
int bl_etcd_compact_log(bindlog *h, uint64_t keep_from_lsn, uint64_t *removed,
                        bindlog_progress_fn fn, void *ctx);
int bl_etcd_export(bindlog *h, uint64_t from_lsn, int fd, uint64_t *records,
                   bindlog_progress_fn fn, void *ctx);
int bl_etcd_import(bindlog *h, int fd, uint64_t *records, uint64_t *err_offset,
                   bindlog_progress_fn fn, void *ctx);

/* ---- the backend and the module's entry ------------------------------------------ */

/* Open and close a handle's store (etcd_open.c): bl_backend_ops.open and
 * .close of the etcd backend. */
int bl_es_open(bindlog *h, const bindlog_options *o);
void bl_es_close(bindlog *h);

/* The reads (etcd_read.c): bl_backend_ops.get, .session_get, .iter,
 * .stats, .digest, .lsn_at_time and .wait, as core/backend.h describes. */
int bl_es_op_get(bindlog *h, const char *key, size_t n, bindlog_binding *out);
int bl_es_op_session_get(bindlog *h, const char *id, size_t n, bindlog_session *out, void *buf,
                         size_t cap);
int bl_es_op_iter(bindlog *h, int kind, const char *arg, size_t arg_len, uint64_t from,
                  uint64_t to, bindlog_iter **out);
int bl_es_op_stats(bindlog *h, bindlog_stats *out);
int bl_es_op_digest(bindlog *h, unsigned char out[BINDLOG_DIGEST_SIZE], uint64_t *head_lsn);
int bl_es_op_lsn_at_time(bindlog *h, int64_t time_ms, uint64_t *lsn);
int bl_es_op_wait(bindlog *h, uint64_t after_lsn, int timeout_ms, uint64_t *head);

/* The etcd backend's operations (backend_etcd.c): etcd:// and etcds://. */
extern const bl_backend_ops bl_etcd_ops;

/* The entry libbindlog calls when it loads libbindlog-etcd.so
 * (etcd_module.c, core/module.h). */
const bl_module_info *bindlog_module_init(const bl_module_host *host, char *why, size_t cap);

#endif /* BL_ETCD_STORE_H */
