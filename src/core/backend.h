/*
 * backend.h -- the storage seam.
 *
 * A handle's operations go through a table of functions that one storage
 * backend implements: LMDB (an embedded store in a directory, store.c and
 * the files around it) or etcd (a shared store for gateway fleets,
 * backend_etcd.c).  api.c, the only layer above the seam, checks every
 * argument the same way for all of them and never knows which backend runs.
 *
 * The seam sits at the level of whole operations rather than of a key-value
 * interface: each backend does what it is good at (LMDB: one write
 * transaction with cursors; etcd: reads at one revision and a conditional
 * Txn), while the event semantics stay in the shared pure modules every
 * backend calls: machine.c (bl_decide) and record.c (the encodings, so log
 * records, state values and digests are byte-identical across backends and
 * a store moves between them with export and import).
 *
 * Contract for every operation: arguments were checked by api.c (non-NULL
 * handle and outputs, valid keys and ids with their lengths measured);
 * return codes are those documented in bindlog.h.
 */
#ifndef BL_BACKEND_H
#define BL_BACKEND_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "bindlog.h"
#include "core/machine.h"

typedef struct bl_backend_ops bl_backend_ops;
struct bl_env;

/* A handle: generic fields, plus the backend's own state. */
struct bindlog {
    const bl_backend_ops *ops;
    struct bl_env *e; /* LMDB: the shared environment (NULL for other backends) */
    void *be;         /* other backends: their per-handle state */
    char *path;       /* what bindlog_open was given */
    unsigned fork_gen; /* bl_fork_gen when opened: another value = a forked child */
    long pid;          /* the process that opened it (for the message) */
    int read_only;
    int durability;
    int64_t (*clock_ms)(void *);
    void *clock_ctx;
    /* Calls through this handle by event type and result: outcome, or
     * BINDLOG_STAT_ERROR (bindlog_stats.events).  Counted above the seam
     * by api.c for every backend; per handle, so two handles of one process
     * (a gateway's writer and its metrics scraper) do not mix their counts. */
    _Atomic uint64_t calls[BINDLOG_EVENT_COUNT][BINDLOG_STAT_COLUMNS];
};

/*
 * Fork detection (api.c).  bl_fork_gen is bumped in every child by a
 * pthread_atfork handler registered at the first open, so a handle opened
 * before the fork carries an older value: one atomic load per call, no
 * getpid() (glibc does not cache the pid).  bl_fork_refuse() sets the
 * detail (both pids, what to do) and returns BINDLOG_EFORK.
 */
extern _Atomic unsigned bl_fork_gen;
int bl_fork_refuse(const bindlog *s);
static inline int bl_fork_check(const bindlog *s)
{
    return atomic_load_explicit(&bl_fork_gen, memory_order_relaxed) == s->fork_gen
               ? 0
               : bl_fork_refuse(s);
}

/* Count one call of event type `type` that returned rc (an outcome or an
 * error) in the handle's statistics (api.c). */
void bl_count_call(bindlog *s, int type, int rc);

/* The detail of one refused event of a commit_each (group.h's
 * BL_GREQ_MSG_MAX, kept equal). */
#define BL_EACH_MSG_MAX 320

/* Hand nv checked, independent events to the backend's commit_each in
 * chunks of at most 8,192 events and an eighth of the write-ahead log's
 * bytes (one group commit each), counting each call by its type (entries.c;
 * bindlog_import_entries and bindlog_apply_each).  res and rcs are scratch
 * of at least min(nv, 8192) entries, msgs NULL or as many x
 * BL_EACH_MSG_MAX bytes; a refused event's detail then goes to
 * out_msgs + which[k] * BL_EACH_MSG_MAX; event k's result goes to
 * codes[which[k]] (outcome or its own refusal) and, when it applied or was
 * an outcome, out[which[k]] (codes, out may be NULL).  fn (may be NULL)
 * gets done + events handed so far, of total.  0, or the storage error that
 * failed a chunk: the events after it were not tried (their codes are left
 * as they were). */
int bl_commit_each_chunked(bindlog *s, const bl_event *ev, const size_t *which, size_t nv,
                           bindlog_result *res, int *rcs, char *msgs, bindlog_result *out,
                           int *codes, char *out_msgs, size_t done, size_t total,
                           bindlog_progress_fn fn, void *ctx);

/* The time an event gets from this handle's clock (before the
 * never-decreasing rule, which the backend applies against its head). */
int64_t bl_now_ms(const bindlog *h);

/* Fill a public session from a decoded value, copying at most origin_cap
 * bytes of its origin (api.c; for every backend). */
void bl_session_fill(bindlog_session *out, const char *id, size_t id_len, const bl_sval *v,
                     void *origin_buf, size_t origin_cap);

/* The copies a log or history iterator hands records out of; what
 * bl_rec_emit() points the caller's record at stays valid until the next
 * emit or bl_rec_buf_free(). */
typedef struct bl_rec_buf {
    char key[BINDLOG_KEY_MAX + 1], sid[BINDLOG_ID_MAX + 1], other[BINDLOG_ID_MAX + 1];
    char reason[BINDLOG_REASON_MAX + 1];
    unsigned char *origin;
    size_t origin_cap;
} bl_rec_buf;

/* Decode the stored record `bytes` that was found under `lsn` into `buf`
 * and fill `rec` from it.  1, or BINDLOG_ECORRUPT (also for a record stored
 * under another LSN's key), BINDLOG_EVERSION, BINDLOG_ENOMEM. */
int bl_rec_emit(bl_rec_buf *buf, const void *bytes, size_t len, uint64_t lsn,
                bindlog_record *rec);
void bl_rec_buf_free(bl_rec_buf *buf);

/* Iterator kinds; which next_* function a kind accepts is checked above the
 * seam. */
enum {
    BL_IT_LOG = 1,    /* arg unused; from..to LSNs */
    BL_IT_HISTORY,    /* arg = key */
    BL_IT_BINDINGS,
    BL_IT_SESSIONS,
    BL_IT_CHILDREN,   /* arg = parent session id */
    BL_IT_ANCESTORS,  /* arg = session id */
};

typedef struct bl_iter_ops {
    int (*next_record)(bindlog_iter *it, bindlog_record *rec);
    int (*next_binding)(bindlog_iter *it, bindlog_binding *out);
    int (*next_session)(bindlog_iter *it, bindlog_session *out, void *buf, size_t cap);
    void (*close)(bindlog_iter *it);
} bl_iter_ops;

/* Every backend's iterator starts with this. */
struct bindlog_iter {
    const bl_iter_ops *ops;
    bindlog *h;
    int kind;
};

struct bl_backend_ops {
    const char *name;   /* "lmdb", "etcd" */
    const char *scheme; /* location prefix that selects it ("etcd://"), or NULL
                           for the default: a directory */

    /* Open h->path with the options; sets h->e or h->be.  close never fails. */
    int (*open)(bindlog *h, const bindlog_options *o);
    void (*close)(bindlog *h);

    /* The write path: n events in order (n > 1: all or nothing), outcomes
     * in out[] (never NULL here), *err_index on error.  Events are checked
     * (bl_event_check) and the handle writable. */
    int (*commit)(bindlog *h, const bl_event *ev, size_t n, bindlog_result *out,
                  size_t *err_index);
    /* n independent events (bindlog_import_entries): each applied or
     * refused alone, all in as few storage transactions as the backend can
     * (one group commit).  codes[i]: outcome or error of event i; out[i]:
     * its result.  0, or a storage error that failed them all. */
    int (*commit_each)(bindlog *h, const bl_event *ev, size_t n, bindlog_result *out,
                       int *codes, char *msgs);

    int (*get)(bindlog *h, const char *key, size_t key_len, bindlog_binding *out);
    int (*session_get)(bindlog *h, const char *id, size_t id_len, bindlog_session *out,
                       void *origin_buf, size_t origin_cap);
    /* Open an iterator of `kind` (see above). */
    int (*iter)(bindlog *h, int kind, const char *arg, size_t arg_len, uint64_t from,
                uint64_t to, bindlog_iter **out);
    int (*stats)(bindlog *h, bindlog_stats *out);
    int (*digest)(bindlog *h, unsigned char out[BINDLOG_DIGEST_SIZE], uint64_t *head_lsn);

    /* Maintenance, as documented for the public functions. */
    int (*check)(bindlog *h, bindlog_check_report *out, bindlog_progress_fn fn, void *ctx);
    int (*replay)(bindlog *h, const char *out_dir, uint64_t to_lsn, int64_t to_time_ms,
                  unsigned char digest[BINDLOG_DIGEST_SIZE], uint64_t *last_lsn,
                  bindlog_progress_fn fn, void *ctx);
    int (*lsn_at_time)(bindlog *h, int64_t time_ms, uint64_t *lsn);
    /* bindlog_wait(): return once the head LSN exceeds after_lsn or
     * timeout_ms passed (-1: never), the head seen in *head (never NULL
     * here).  Changes made by other processes count. */
    int (*wait)(bindlog *h, uint64_t after_lsn, int timeout_ms, uint64_t *head);
    /* bindlog_checkpoint(): fold the write-ahead log into the state now;
     * *lsn gets the checkpointed LSN.  NULL for a backend without a log
     * (the call is then BINDLOG_ENOTSUP).  The handle is writable. */
    int (*checkpoint)(bindlog *h, uint64_t *lsn);
    int (*compact)(bindlog *h, uint64_t keep_from_lsn, uint64_t *removed,
                   bindlog_progress_fn fn, void *ctx);
    int (*export_stream)(bindlog *h, uint64_t from_lsn, int fd, uint64_t *records,
                         bindlog_progress_fn fn, void *ctx);
    int (*import_stream)(bindlog *h, int fd, uint64_t *records, uint64_t *err_offset,
                         bindlog_progress_fn fn, void *ctx);
};

/* A wait that polls read_head every period_ms (a backend without a way to
 * be woken: the caller sleeps between reads, never spins).  read_head
 * returns 0 with the head LSN, or an error that ends the wait. */
int bl_wait_poll(bindlog *h, uint64_t after_lsn, int timeout_ms, uint64_t *head,
                 int (*read_head)(bindlog *h, uint64_t *head), int period_ms);

/* The embedded backend (src/lmdb).  Others are modules (core/module.h). */
extern const bl_backend_ops bl_lmdb_ops;

#endif /* BL_BACKEND_H */
