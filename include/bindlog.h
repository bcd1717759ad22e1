/*
 * bindlog.h -- crash-safe session bindings for chat gateways.
 *
 * A gateway routes every chat to a *session key* and each key to its current
 * *session id*.  bindlog stores those bindings, the sessions behind them and
 * an append-only, checksummed log of every change.  Each change is one event,
 * committed by appending its log record, together with the state it
 * produces, to the store's write-ahead log (one frame and, in FULL, one
 * flush per group of concurrent events), so a crash never separates them;
 * a background checkpoint folds the log into LMDB.
 *
 * This header is the manual.  Conventions that hold for every function:
 *
 *  - Return values: a negative value is a BINDLOG_E* error code (stable
 *    forever, see bindlog_strerror()).  Mutating calls return a non-negative
 *    *outcome* (BINDLOG_APPLIED, _ALREADY, _STALE, _MOVED) on success; other
 *    calls return 0 on success unless documented otherwise.
 *  - Strings: every `const char *` argument is a NUL-terminated string that
 *    the caller owns; bindlog never keeps a pointer to it after the call.
 *    Keys are 1..BINDLOG_KEY_MAX bytes; session ids 1..BINDLOG_ID_MAX bytes
 *    without control bytes (0x00-0x1F, 0x7F); reasons 0..BINDLOG_REASON_MAX
 *    bytes without control bytes.  An optional string that is NULL takes its
 *    default; "" is a real value.
 *  - Results: result structs are plain values owned by the caller; nothing in
 *    them points into the store.  On a negative return their contents are
 *    unspecified.
 *  - Thread safety: a bindlog handle may be used from any number of threads
 *    at once.  Iterators (bindlog_iter) are not thread-safe: use one from one
 *    thread at a time.
 *  - Argument checks (BINDLOG_EINVAL) come first, then the read-only check
 *    (BINDLOG_EREADONLY), then the state checks.
 *  - Processes: every call on a handle or an iterator made in a child
 *    process forked after the handle was opened returns BINDLOG_EFORK, before
 *    any other check ("Processes and fork", after bindlog_path()).
 *
 * Copyright (c) 2026 the bindlog developers.  MIT licence.
 */
#ifndef BINDLOG_H
#define BINDLOG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Symbol visibility: the shared library exports only BINDLOG_API names. */
#if defined(BINDLOG_STATIC)
#define BINDLOG_API
#elif defined(BINDLOG_BUILDING) && defined(__GNUC__)
#define BINDLOG_API __attribute__((visibility("default")))
#else
#define BINDLOG_API
#endif

/* ------------------------------------------------------------------------ */
/** @name Versions
 * The library version, the on-disk format and the export stream format are
 * numbered separately.  A store or stream written by a newer format is
 * refused with BINDLOG_EVERSION; older ones within the supported range are
 * read. */
/**@{*/
#define BINDLOG_VERSION_MAJOR 0
#define BINDLOG_VERSION_MINOR 1
#define BINDLOG_VERSION_PATCH 0
#define BINDLOG_VERSION_STRING "0.1.0"
/** On-disk store format written by this library. */
#define BINDLOG_FORMAT_VERSION 7
/** Log record encoding version written by this library. */
#define BINDLOG_RECORD_VERSION 4

/** The library's version string, e.g. "0.1.0".  Static, never NULL. */
BINDLOG_API const char *bindlog_version(void);
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Limits */
/**@{*/
#define BINDLOG_KEY_MAX 400       /**< longest session key, bytes */
#define BINDLOG_ID_MAX 128        /**< longest session id, bytes */
#define BINDLOG_REASON_MAX 64     /**< longest reason, bytes */
#define BINDLOG_ORIGIN_MAX 65536  /**< longest origin blob, bytes */
#define BINDLOG_READERS_MAX 65536 /**< most reader slots bindlog_options may ask for */
/** Pass as run_generation to skip the generation check of a split.  No key
 * ever reaches this generation; a zeroed value (0) never matches a key that
 * has seen an event. */
#define BINDLOG_ANY_GENERATION UINT64_MAX
/**
 * The highest LSN a log record may carry: 2^63 - 1.  LSNs stay below 2^63
 * so that "the next LSN" (head + 1) and every range end can never wrap.
 * The event that would need an LSN above it is refused with
 * BINDLOG_ENOSPC ("the log's LSN space is exhausted"; nothing is written,
 * the store stays readable); records and streams that carry a higher LSN
 * are damaged (BINDLOG_ECORRUPT).  At a million events a second the
 * ceiling is 292,000 years away: only a forged or damaged input gets near.
 */
#define BINDLOG_LSN_MAX ((uint64_t)INT64_MAX)
/**
 * The range of event times, in milliseconds since the Unix epoch: years 0
 * to 9999 of the proleptic Gregorian calendar (0000-01-01T00:00:00.000Z to
 * 9999-12-31T23:59:59.999Z).  A record, a binding or a session carrying a
 * time outside it is damaged (BINDLOG_ECORRUPT, also in an import); an
 * event whose time would fall outside it (the handle's clock reads later
 * than 9999) is refused with BINDLOG_EINVAL and not logged.
 */
#define BINDLOG_TIME_MIN_MS INT64_C(-62167219200000)
#define BINDLOG_TIME_MAX_MS INT64_C(253402300799999)
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Outcomes (non-negative returns of mutating calls) */
/**@{*/
#define BINDLOG_APPLIED 0 /**< state changed; one log record written */
#define BINDLOG_ALREADY 1 /**< state already as requested; nothing written */
/*
 * ALREADY does not mean "still current".  A split retried after /stop (an
 * INVALIDATE) comes back ALREADY -- the split did go in -- with the key's
 * generation now higher than the run's.  A run goes on only when:
 *
 *     (rc == BINDLOG_APPLIED || rc == BINDLOG_ALREADY) &&
 *         res.generation == run_generation
 *
 * (Python: Result.is_current(run_generation); Node: result.isCurrent()).
 */
#define BINDLOG_STALE 2   /**< run_generation is not the key's current one */
#define BINDLOG_MOVED 3   /**< key not bound to the session the caller expected */
#define BINDLOG_OUTCOME_COUNT 4 /**< outcomes of the events above (batches, statistics) */
/* bindlog_route() answers with one of its own three, each of which logged
 * one record (see "Inbound routing"). */
#define BINDLOG_ROUTED 4  /**< fresh: same session; the message's activity recorded */
#define BINDLOG_CREATED 5 /**< unbound key: fresh_session_id bound (a NEW_SESSION) */
#define BINDLOG_RESET 6   /**< stale by policy: fresh_session_id bound, previous ended */
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Error codes (negative, stable forever) */
/**@{*/
#define BINDLOG_ENOTFOUND -1  /**< no such key, session, store or record */
#define BINDLOG_EINVAL -2     /**< bad argument (NULL, empty, too long, control bytes, ...) */
#define BINDLOG_EEXIST -3     /**< the session id already exists */
#define BINDLOG_ECONFLICT -4  /**< the session is the live binding of another key */
#define BINDLOG_ECORRUPT -5   /**< damaged data: bad checksum, length or encoding */
#define BINDLOG_EVERSION -6   /**< written by a newer, unsupported format */
#define BINDLOG_EIO -7        /**< an I/O error (the operation did not happen) */
#define BINDLOG_ENOSPC -8     /**< no space left on the device or in the map */
#define BINDLOG_ENOMEM -9     /**< out of memory */
#define BINDLOG_EBUSY -10     /**< resource busy (reader table full, store locked) */
#define BINDLOG_EREADONLY -11 /**< a write through a read-only handle */
#define BINDLOG_ENOTSTORE -12 /**< the directory holds something that is not a bindlog store */
#define BINDLOG_EACCES -13    /**< permission denied */
#define BINDLOG_EPANIC -14    /**< a fatal I/O error made the handle unusable: close and reopen */
#define BINDLOG_ENOTSUP -15   /**< not supported by this build (e.g. a backend module not installed) */
#define BINDLOG_EFORK -16     /**< the handle belongs to another process: it was opened before a fork */
#define BINDLOG_ERROR_MIN -16 /**< most negative error code */
/**@}*/

/**
 * A static English description of an error code or outcome.
 * Unknown values give "unknown error".  Never NULL; never freed.
 * Thread-safe.
 */
BINDLOG_API const char *bindlog_strerror(int rc);

/**
 * The calling thread's message for the last error a bindlog call returned
 * to it, naming what failed and why: the call and its subject, then the
 * detail, e.g. "split agent:main:x: key is not bound" or "open ./store:
 * data.mdb: ...".  "" after a call that succeeded (any non-negative
 * return, STALE and MOVED included).  Caller bytes inside it are escaped
 * (\xNN) and long ones cut with "...".
 *
 * Ownership: a thread-local buffer owned by the library; valid until the
 * calling thread's next bindlog call.  Never NULL.  Thread-safe: each
 * thread sees only the outcome of its own calls.  bindlog_close(),
 * bindlog_iter_close() and bindlog_strerror() leave it unchanged.
 */
BINDLOG_API const char *bindlog_last_error(void);

/**
 * The symbolic name of an error code or outcome, e.g. "BINDLOG_ENOTFOUND"
 * or "BINDLOG_APPLIED", or "BINDLOG_UNKNOWN".
 * Static, never NULL.  Thread-safe.
 */
BINDLOG_API const char *bindlog_code_name(int rc);

/* ------------------------------------------------------------------------ */
/** @name Event types */
/**@{*/
#define BINDLOG_EVENT_BIND 1
#define BINDLOG_EVENT_NEW_SESSION 2
#define BINDLOG_EVENT_SPLIT 3
#define BINDLOG_EVENT_INVALIDATE 4
#define BINDLOG_EVENT_UNBIND 5
/** A routed message on a fresh binding (bindlog_route's ROUTED): records
 * the key's last activity (the record's time_ms) and nothing else; the
 * binding, its generation, lsn and updated_ms are unchanged.  Only
 * bindlog_route() writes it: a batch refuses it with BINDLOG_EINVAL. */
#define BINDLOG_EVENT_ROUTE 6
#define BINDLOG_EVENT_COUNT 7 /**< one past the last type; index 0 is unused */

/** Lower-case name of an event type ("bind", "new_session", "split",
 * "invalidate", "unbind", "route"), or "unknown".  Static, never NULL. */
BINDLOG_API const char *bindlog_event_name(int type);
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Opening a store */
/**@{*/
#define BINDLOG_DURABILITY_FULL 0   /**< APPLIED survives power loss (one flush of the log per group commit) */
#define BINDLOG_DURABILITY_NORMAL 1 /**< survives a process crash, no flush on the commit path; power loss may drop the last commits, never corrupts */
#define BINDLOG_DURABILITY_NONE 2   /**< no flushes at all: tests and bulk loads; power loss may lose or corrupt */

#define BINDLOG_OPTIONS_VERSION 4

/**
 * Options of bindlog_open().  Always initialise with BINDLOG_OPTIONS_INIT so
 * that fields added later take their defaults.
 *
 * Versions: fields are only ever added at the end, and `version` says which
 * ones the caller's struct has.  A caller built against version 1 (up to
 * clock_ctx) keeps working: bindlog_open reads only the fields of the
 * version it is given and takes the defaults for the others.
 */
typedef struct bindlog_options {
    unsigned version;   /**< BINDLOG_OPTIONS_VERSION */
    int durability;     /**< BINDLOG_DURABILITY_*; default FULL */
    int read_only;      /**< non-zero: every write returns BINDLOG_EREADONLY and
                             a missing store is BINDLOG_ENOTFOUND */
    size_t map_size;    /**< initial LMDB map size in bytes; 0 = default
                             (256 MiB).  The map grows by itself when full. */
    /** LMDB reader slots for the caller's threads and processes (each
     * thread that reads holds one while the store is open); 0 = default
     * (126); at most BINDLOG_READERS_MAX, else BINDLOG_EINVAL.  The store
     * adds one for its own background thread, so bindlog_stats reports
     * max_readers + 1.  Used only when no process has the store open
     * (LMDB sizes its reader table then); the table never shrinks. */
    unsigned max_readers;
    /** Clock for event times, in milliseconds since the Unix epoch; NULL =
     * the system's real-time clock.  Meant for tests and simulations.
     * Called from whichever thread commits; must be thread-safe. */
    int64_t (*clock_ms)(void *clock_ctx);
    void *clock_ctx; /**< passed to clock_ms */

    /* ---- version 2: etcd in production (docs/scale-out.md) ----
     * Used by etcd:// and etcds:// locations only.  A string left NULL
     * takes the value of the environment variable etcdctl reads
     * (ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY, ETCDCTL_USER,
     * ETCDCTL_PASSWORD; ETCDCTL_USER may be "user:password"), as libpq takes
     * PGPASSWORD; the TLS ones only for etcds://.  The strings are copied
     * by bindlog_open; the password is kept (to renew etcd's auth token)
     * and wiped when the store's last handle closes.  No message, log or
     * statistic ever contains it, and a location that holds credentials
     * ("etcds://user:pw@host...") is refused. */
    /** etcds://: the CA certificates (PEM file) that sign the servers'
     * certificates; NULL: the system's store.  The server's certificate
     * must also name the endpoint's host (or IP address). */
    const char *etcd_cacert;
    /** etcds://: a client certificate (PEM file) for servers that ask
     * for one (etcd --client-cert-auth); with etcd_key. */
    const char *etcd_cert;
    const char *etcd_key;      /**< its private key (PEM file, unencrypted) */
    /** etcd's authentication (RBAC): user and password, both or neither.
     * The user needs read and write permission on PREFIX/ (docs/scale-out.md
     * lists the least a gateway needs). */
    const char *etcd_user;
    const char *etcd_password; /**< see etcd_user */
    /** The most operations one etcd Txn may carry: the servers'
     * --max-txn-ops, which a client cannot ask.  0: the environment's
     * BINDLOG_ETCD_MAX_TXN_OPS, else etcd's default, 128.  Larger groups of
     * events then fit one Txn.  16..1000000; a value above the servers'
     * makes large batches fail with BINDLOG_EINVAL. */
    unsigned etcd_max_txn_ops;

    /* ---- version 3: the write-ahead log ---- */
    /** Bytes of the write-ahead log's ring when this call creates the
     * store (rounded up to 4 KiB, at least 64 KiB, at most 1 GiB); 0 =
     * default (8 MiB).  The log's blocks are reserved at creation and it
     * never grows; an existing store keeps the size it was made with.  A
     * group commit (a batch, with whatever joined it) must fit in half of
     * it.  docs/design.md, "The write-ahead log". */
    uint64_t log_size;

    /* ---- version 4: processes that share a store ---- */
    /** The bound, in milliseconds, of every wait for another process of
     * the same store: for the writers' lock, the checkpointers' lock (a
     * writer whose log is full waits for the checkpoint in progress), and
     * an open waiting for the process that rebuilds bindlog.shm.  Past it
     * the call returns BINDLOG_EBUSY and bindlog_last_error() names the
     * holder's pid and what it holds (a process stopped by a signal or a
     * debugger, as a rule); nothing was written.  0 = default (10000);
     * negative = wait without bound.  The holder of a lock that dies never
     * blocks anyone: its lock is taken over at once. */
    int lock_timeout_ms;
} bindlog_options;

#define BINDLOG_OPTIONS_INIT \
    { BINDLOG_OPTIONS_VERSION, BINDLOG_DURABILITY_FULL, 0, 0, 0, NULL, NULL, \
      NULL, NULL, NULL, NULL, NULL, 0, 0, 0 }

/** An open store.  Opaque; thread-safe. */
typedef struct bindlog bindlog;

/**
 * Open (and, unless read-only, create) the store in directory `dir`.
 *
 * A missing directory is created (mode 0700, with missing parents) and an
 * empty store made in it; store files are created 0600.  Unless durability
 * is NONE, the directories that hold the names made (the store's files and
 * the directories created) are flushed before the open returns, so that a
 * new store's first acknowledged event survives a power loss.  Stale reader slots
 * left by dead processes are cleared.  Opening a store that is already open
 * in this process shares its LMDB environment (LMDB forbids two on the same
 * files), so any number of handles may be open at once.
 *
 * The store's files (data.mdb, lock.mdb, bindlog.lock) must be regular
 * files: a symbolic link or any other kind of file in their place is
 * refused with BINDLOG_ENOTSTORE, so that nothing is ever written where a
 * link points (the directory itself may be reached through a link).  An
 * open that fails leaves nothing it created: not the files, not the
 * directories.  A read-only open creates nothing but, for a store whose
 * lock.mdb is missing, lock.mdb itself (LMDB's reader table, which keeps
 * writers from reusing the pages a reader reads).  lock.mdb is allocated
 * on disk before LMDB maps it, so a full disk is BINDLOG_ENOSPC here, never
 * a crash later.
 *
 * A writable open of a local store also starts, in a background thread, the
 * check of every page of data.mdb that the process's first checkpoint needs
 * (docs/design.md, "Damaged files"): neither open nor a write waits for it
 * (the checkpoint that folds the log into data.mdb does), and damage it
 * finds makes every later write fail with BINDLOG_ECORRUPT naming the page.
 * Where data.mdb is not in the page cache the check reads it in small reads
 * of its own, so that the first commits' flushes are not queued behind
 * them.  The thread ends with the check (or becomes the log's checkpointer
 * at the first write); closing the last handle stops it.  A read-only open
 * starts no thread.
 *
 * @param out   receives the handle; set to NULL on failure.
 * @param dir   the store directory, or "etcd://HOST:PORT[,HOST:PORT...]/PREFIX"
 *              for a store shared by a fleet on etcd (plain HTTP), or
 *              "etcds://HOST:PORT[,HOST:PORT...]/PREFIX" (TLS; see the
 *              etcd_* options) (docs/scale-out.md).  Any other "scheme://"
 *              is refused with BINDLOG_EINVAL.  etcd locations need the etcd
 *              module, libbindlog-etcd.so, installed beside libbindlog (it
 *              is loaded on the first such open).
 * @param opts  options, or NULL for the defaults.
 * @return 0, or
 *   BINDLOG_EINVAL (NULL out/dir, empty dir, bad opts->version or value; on
 *   etcd: a malformed location, credentials in it, TLS files that cannot be
 *   read or given for etcd://, a user without a password),
 *   BINDLOG_ENOTFOUND (read-only open of a missing store, or of an empty
 *   data.mdb that a creation left),
 *   BINDLOG_ENOTSTORE (the directory holds something else; `dir` is a
 *   file, not a directory; a store file is a symbolic link or not a
 *   regular file; data.mdb is not an LMDB file),
 *   BINDLOG_EVERSION (a newer on-disk format), BINDLOG_EACCES (also: etcd
 *   refused the credentials, or the user has no permission on the prefix),
 *   BINDLOG_ENOTSUP (an etcd location without the etcd module),
 *   BINDLOG_ECORRUPT (damage the message names; also a directory whose
 *   data.mdb is missing, empty or without bindlog's tables while its
 *   bindlog.wal holds frames: the store's file was lost, and creating a
 *   new store would truncate its log, so nothing is written),
 *   BINDLOG_EIO (also: etcd unreachable, or TLS failed: a
 *   server certificate that no trusted CA signed or that names another
 *   host, a client certificate the server refuses), BINDLOG_ENOMEM,
 *   BINDLOG_ENOSPC, BINDLOG_EBUSY (a local store: another process has been
 *   rebuilding bindlog.shm for longer than opts->lock_timeout_ms, or
 *   bindlog.shm was removed or replaced while other processes have the store
 *   open -- it must never be deleted under them; once they have all closed
 *   it, the store opens again).  bindlog_last_error() says which, and on
 *   etcd which endpoint.
 * Thread-safe.
 */
BINDLOG_API int bindlog_open(bindlog **out, const char *dir, const bindlog_options *opts);

/**
 * Close a handle.  NULL is a no-op; never fails.  Every iterator of the
 * handle must be closed first.  The environment is closed with its last
 * handle.  Must not race with other calls on the same handle.
 *
 * In a child process forked while the handle was open (see "Processes and
 * fork" below) it frees only the handle's own memory: the environment,
 * its maps, locks and descriptors are the parent's and are left exactly as
 * they are (LMDB forbids using an environment after fork(); closing it
 * would run the last handle's checkpoint through the parent's state and
 * close descriptors whose POSIX locks belong to the whole process).
 */
BINDLOG_API void bindlog_close(bindlog *s);

/** The directory the handle was opened on.  Owned by the handle. */
BINDLOG_API const char *bindlog_path(const bindlog *s);

/**
 * @par Processes and fork
 * A handle, and every iterator of it, belongs to the process that opened
 * it.  After fork() every call on it in the child, reads and iterators
 * included, returns BINDLOG_EFORK before touching anything of the
 * parent's (its LMDB environment and reader slots, the log's shared memory
 * and locks, the group commit's threads, any of which another thread of
 * the parent may have held at the fork), and bindlog_last_error() names
 * the two processes.  bindlog_close() and bindlog_iter_close() in the
 * child free what is the child's alone (the handle's memory; an
 * iterator's snapshot stays the parent's, its memory is not freed).  The
 * parent is unaffected.  The child may open the same store itself: its
 * bindlog_open() gets an environment of its own, never the parent's.
 * Detection uses pthread_atfork(): a child made without the fork handlers
 * (a raw clone or fork system call) is not detected; posix_spawn and
 * fork-then-exec never need it.  The check is one atomic load per call.
 */
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Results */
/**@{*/

/** What a mutating call did.  Plain caller-owned value. */
typedef struct bindlog_result {
    int outcome;                        /**< BINDLOG_APPLIED, _ALREADY, _STALE, _MOVED */
    uint64_t lsn;                       /**< record written; 0 when nothing was logged */
    uint64_t generation;                /**< the key's generation after the call */
    char session_id[BINDLOG_ID_MAX + 1]; /**< the key's binding after the call, "" if none */
} bindlog_result;

/** A key's binding.  Plain caller-owned value. */
typedef struct bindlog_binding {
    char session_id[BINDLOG_ID_MAX + 1]; /**< "" for a tombstone (unbound) */
    uint64_t generation;                 /**< the key's epoch; never decreases */
    uint64_t lsn;                        /**< last event that changed this binding */
    int64_t updated_ms;                  /**< time of that event */
    char key[BINDLOG_KEY_MAX + 1];       /**< the key itself */
    /** Time of the key's last routed message (bindlog_route), 0 if none.
     * Durable state: only a routed message moves it, never backwards; open,
     * recovery, replay, export/import and upgrade keep it exactly.  A
     * tombstone keeps it too.  bindlog_import_entries sets it to each
     * entry's time when the entry asks (import-json: updatedAt). */
    int64_t last_activity_ms;
} bindlog_binding;

/** A session.  Plain caller-owned value; the origin is copied separately. */
typedef struct bindlog_session {
    char session_id[BINDLOG_ID_MAX + 1];
    char key[BINDLOG_KEY_MAX + 1];        /**< the key it was last bound to */
    char parent_id[BINDLOG_ID_MAX + 1];   /**< "" for a root session */
    uint64_t created_lsn, ended_lsn;      /**< ended_lsn 0 = live */
    int64_t created_ms, ended_ms;
    char end_reason[BINDLOG_REASON_MAX + 1];
    size_t origin_len;                    /**< full length, even when origin_cap was smaller */
} bindlog_session;
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Events
 *
 * Each returns a negative error or an outcome; on APPLIED exactly one log
 * record was committed (durably as the handle's durability mode promises).
 * Rejected events (ALREADY, STALE, MOVED, errors) write nothing.  `out` may be
 * NULL.  `origin` is opaque bytes (0..BINDLOG_ORIGIN_MAX), NULL meaning
 * "none given" (origin_len must then be 0).  Writes through a read-only
 * handle return BINDLOG_EREADONLY; after a fatal commit failure every call
 * returns BINDLOG_EPANIC.  Concurrent calls from threads of one process share
 * one write transaction and one sync (group commit).  Thread-safe.
 *
 * Common errors: BINDLOG_EINVAL, BINDLOG_EREADONLY, BINDLOG_EPANIC,
 * BINDLOG_EIO, BINDLOG_ENOSPC, BINDLOG_ENOMEM, BINDLOG_EBUSY.  On a local
 * store, BINDLOG_EBUSY (nothing written) also means that another process
 * held the writers' lock, or the checkpointers' lock while this write
 * needed log space, for longer than the open's lock_timeout_ms (the last
 * error names its pid); BINDLOG_EIO naming bindlog.shm means that file was
 * removed or replaced under this process: nothing more is written until
 * every process has closed the store.
 */
/**@{*/

/**
 * BIND: route `key` to `session_id` (first contact, /resume, repair).
 * ALREADY if the key is bound to session_id; MOVED if `expect` is not NULL and
 * differs from the current binding ("" = only if unbound);
 * BINDLOG_ECONFLICT if session_id is the live binding of another key.
 * Otherwise creates session_id as a root session (or re-opens it, replacing
 * its origin only when origin is not NULL), ends the previous session with
 * `reason` (default "switch"), binds, generation + 1.
 */
BINDLOG_API int bindlog_bind(bindlog *s, const char *key, const char *session_id,
                             const char *expect, const char *reason,
                             const void *origin, size_t origin_len, bindlog_result *out);

/**
 * NEW_SESSION: /new, /reset.  ALREADY if the key is bound to session_id;
 * BINDLOG_EEXIST if session_id exists.  Otherwise creates it with the current
 * binding as parent, ends the previous session with `reason` (default
 * "new_session"), binds, generation + 1.
 */
BINDLOG_API int bindlog_new_session(bindlog *s, const char *key, const char *session_id,
                                    const char *reason, const void *origin, size_t origin_len,
                                    bindlog_result *out);

/**
 * SPLIT: a compression split, a compare-and-swap inside the write
 * transaction.  In order: BINDLOG_ENOTFOUND if the key is unbound; ALREADY if
 * bound to child_id; STALE if run_generation is not BINDLOG_ANY_GENERATION
 * and differs from the key's generation; MOVED if not bound to parent_id;
 * BINDLOG_EEXIST if child_id exists.  Otherwise creates child_id (parent
 * parent_id, origin = `origin`, or a copy of the parent's when NULL), ends
 * the parent with "compression", binds the child.  Generation unchanged.
 * parent_id == child_id is BINDLOG_EINVAL.
 */
BINDLOG_API int bindlog_split(bindlog *s, const char *key, const char *parent_id,
                              const char *child_id, uint64_t run_generation,
                              const void *origin, size_t origin_len, bindlog_result *out);

/**
 * INVALIDATE: /stop.  Generation + 1, binding unchanged (its lsn and
 * updated_ms change).  BINDLOG_ENOTFOUND if the key is unbound.  The reason
 * (default "invalidate") is kept in the log.
 */
BINDLOG_API int bindlog_invalidate(bindlog *s, const char *key, const char *reason,
                                   bindlog_result *out);

/**
 * UNBIND: idle expiry.  Ends the bound session with `reason` (default
 * "unbind"), leaves a tombstone, generation + 1.  ALREADY on a tombstone;
 * BINDLOG_ENOTFOUND for a key never bound.
 */
BINDLOG_API int bindlog_unbind(bindlog *s, const char *key, const char *reason,
                               bindlog_result *out);

/**
 * One event of a batch.  Field use by type is documented per field.  A
 * pointer its type does not take must be NULL: a SPLIT's reason, a
 * NEW_SESSION's expect, an INVALIDATE's or UNBIND's session_id, expect and
 * origin; given, the event is BINDLOG_EINVAL ("this event type takes no
 * reason (leave it NULL)", "invalidate and unbind take no origin").
 */
typedef struct bindlog_event {
    int type;               /**< BINDLOG_EVENT_* */
    const char *key;
    const char *session_id; /**< BIND target, NEW_SESSION id, SPLIT child */
    const char *expect;     /**< BIND: expected current binding or NULL; SPLIT: parent_id */
    uint64_t generation;    /**< SPLIT: run generation */
    const char *reason;     /**< BIND, NEW_SESSION, INVALIDATE, UNBIND */
    const void *origin;     /**< BIND, NEW_SESSION, SPLIT */
    size_t origin_len;
} bindlog_event;

/**
 * Apply `n` events in order in one write transaction, each seeing the ones
 * before it.  `out`, if not NULL, has room for n results.  On an error in
 * event i nothing of the batch is written, `*err_index` (if not NULL) is set
 * to i and the error is returned; otherwise returns 0 and each out[i] holds
 * that event's outcome (STALE, MOVED and ALREADY do not abort the batch).
 * n == 0 is a no-op returning 0.  BINDLOG_EINVAL for ev == NULL with n > 0.
 */
BINDLOG_API int bindlog_apply_batch(bindlog *s, const bindlog_event *ev, size_t n,
                                    bindlog_result *out, size_t *err_index);

/** Room for one event's message of bindlog_apply_each(), NUL included. */
#define BINDLOG_EACH_MESSAGE_MAX 640

/**
 * Apply `n` independent events: each is checked, decided and applied on
 * its own, in order (each sees those before it that applied), and all of
 * them share the write-ahead log's group commits (one sync per group in
 * FULL; a call whose events would not fit in an eighth of the log is cut
 * into several groups).  Unlike bindlog_apply_batch, an event the state
 * machine refuses (BINDLOG_EINVAL, ENOTFOUND, EEXIST, ECONFLICT) fails
 * alone: the others still apply.  What an asyncio or event-loop binding
 * hands over from one loop turn.
 *
 * @param codes  required, n entries: codes[i] is event i's outcome
 *               (BINDLOG_APPLIED, _ALREADY, _STALE, _MOVED) or its own
 *               error.
 * @param out    optional, n entries: out[i] is event i's result when
 *               codes[i] is an outcome (unspecified otherwise).
 * @param messages optional, n entries: messages[i] is "" for an event
 *               that got an outcome, else what bindlog_last_error() would
 *               have said for it alone ("bind k2: session 'X' is bound to
 *               key 'x'"), cut with "..." to fit.
 * @return 0 when every event was decided (look at codes: a refused event
 *   does not make the call fail, and leaves no last-error detail: its
 *   words are in messages), BINDLOG_EINVAL (NULL handle, ev
 *   NULL with n > 0, codes NULL), BINDLOG_EREADONLY, BINDLOG_EFORK, or a
 *   storage error that failed a group commit (BINDLOG_EIO, ENOSPC,
 *   EPANIC...): every event of that group and after it has that code in
 *   codes and none of them was applied; events of earlier groups were.
 *   n == 0 is a no-op returning 0.  Thread-safe like every write.
 */
BINDLOG_API int bindlog_apply_each(bindlog *s, const bindlog_event *ev, size_t n,
                                   bindlog_result *out, int *codes,
                                   char (*messages)[BINDLOG_EACH_MESSAGE_MAX]);
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Inbound routing and reset policies
 *
 * Which session does an inbound message go to now, given when its key was
 * last active and the gateway's reset policy?  bindlog_route() answers in
 * one write, atomically, with the answer logged.  Freshness is judged on
 * the key's activity *before* this message: the latest of its last routed
 * message (last_activity_ms) and its last binding change (updated_ms: a
 * session a gateway bound with /new, /resume or a split counts as active
 * from then on).  "now" is the event's time: now_ms, or the log's last
 * time if the caller's clock reads earlier (times never go back along the
 * log, so neither does last activity).
 */
/**@{*/
#define BINDLOG_RESET_NONE 0           /**< never reset */
#define BINDLOG_RESET_IDLE 1           /**< stale when now - activity > idle_ms */
#define BINDLOG_RESET_DAILY 2          /**< stale when activity < daily_boundary_ms */
#define BINDLOG_RESET_BOTH 3           /**< stale when either is */
#define BINDLOG_RESET_DAILY_AND_IDLE 4 /**< stale only when both are */

/** A reset policy.  Plain caller-owned value, read during the call only. */
typedef struct bindlog_policy {
    int mode;                  /**< BINDLOG_RESET_* */
    int64_t idle_ms;           /**< IDLE, BOTH, DAILY_AND_IDLE: > 0; else ignored */
    /** DAILY, BOTH, DAILY_AND_IDLE: the latest daily boundary at or before
     * now, in the gateway's time zone (the caller computes it; >= 0);
     * else ignored. */
    int64_t daily_boundary_ms;
} bindlog_policy;

/** What bindlog_route() did.  Plain caller-owned value. */
typedef struct bindlog_route_result {
    int outcome;                 /**< BINDLOG_ROUTED, _CREATED, _RESET */
    /** RESET: BINDLOG_RESET_IDLE or BINDLOG_RESET_DAILY (the reason logged:
     * "idle" or "daily"; DAILY when both hold); else BINDLOG_RESET_NONE. */
    int reason;
    /** the record written; 0 for a ROUTED coalesced with a message of the
     * same key in the same millisecond (nothing to log: the activity
     * already stands at this time) */
    uint64_t lsn;
    uint64_t generation;         /**< the key's generation after the call */
    int64_t last_activity_ms;    /**< the key's last activity before this call; 0 if none */
    char session_id[BINDLOG_ID_MAX + 1];  /**< where this message goes */
    char previous_id[BINDLOG_ID_MAX + 1]; /**< RESET: the session that ended; else "" */
} bindlog_route_result;

/**
 * Route one inbound message of `key` at `now_ms` (ms since the epoch; 0 =
 * the handle's clock) under `policy`, in one write:
 *  - key bound and fresh (or bound to fresh_session_id, or mode NONE):
 *    ROUTED, a small ROUTE record sets last activity to now; the binding,
 *    generation and its lsn are unchanged (a run stays current).  When the
 *    activity already stands at now (several messages of one key in one
 *    millisecond, as in one group commit) nothing is logged (out->lsn 0);
 *  - key never bound or a tombstone: CREATED, a NEW_SESSION binding
 *    fresh_session_id (reason "new_session");
 *  - key bound and stale by the policy: RESET, a NEW_SESSION with reason
 *    "idle" or "daily": fresh_session_id is created with the old session as
 *    parent, the old one ended, generation + 1 (runs on the old session get
 *    STALE on their splits).  The change feed shows it like /new.
 * Either way this message goes to out->session_id, and the key's last
 * activity is now.  Concurrent routes of one key share group commits and
 * are decided one after the other: at a boundary exactly one of them
 * RESETs and the others are ROUTED to the new session.
 *
 * `fresh_session_id` is required (a valid session id) even when the answer
 * turns out ROUTED: pass a new id every call; it is used, and must not
 * exist (BINDLOG_EEXIST), only for CREATED and RESET.  `origin` (NULL = none)
 * becomes the new session's origin.  `out` may be NULL.
 *
 * @return BINDLOG_ROUTED, BINDLOG_CREATED, BINDLOG_RESET, or BINDLOG_EINVAL
 *   (NULL key or policy, unknown mode, idle_ms <= 0 or a negative
 *   daily_boundary_ms for a mode that uses it, negative now_ms, a bad
 *   fresh id or origin), BINDLOG_EEXIST, and the events' common errors.
 *   Thread-safe like every write.
 */
BINDLOG_API int bindlog_route(bindlog *s, const char *key, int64_t now_ms,
                              const bindlog_policy *policy, const char *fresh_session_id,
                              const void *origin, size_t origin_len,
                              bindlog_route_result *out);

/**
 * Expiry: UNBIND (reason "expired") every bound key whose activity (the
 * later of last_activity_ms and updated_ms, as bindlog_route judges it) is
 * before `cutoff_ms`, limited to keys starting with `prefix` (NULL or "" =
 * every key).  Keys are found on one snapshot, then unbound in group
 * commits, each only if it is still idle when its UNBIND is decided (a key
 * routed meanwhile stays).  With `dry_run` non-zero nothing is written and
 * `*count` says how many keys would go.  `count` may be NULL.
 *
 * @return 0, BINDLOG_EINVAL (NULL handle, cutoff_ms <= 0, a prefix over
 *   BINDLOG_KEY_MAX bytes), BINDLOG_EREADONLY (not for a dry run), or a
 *   storage error: keys unbound in group commits before it stay unbound and
 *   are counted in *count.  Thread-safe; each UNBIND counts in the
 *   statistics like a bindlog_unbind() call.
 */
BINDLOG_API int bindlog_expire(bindlog *s, int64_t cutoff_ms, const char *prefix, int dry_run,
                               uint64_t *count);
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Reads
 * Each read sees one committed snapshot.  Readers never block writers.
 * Thread-safe. */
/**@{*/

/**
 * The binding of `key`.  Returns 0, or BINDLOG_ENOTFOUND when the key routes
 * nowhere (never bound, or a tombstone): `out->generation` then still holds
 * the key's last generation (0 if never bound), `out->session_id` is "" and
 * `out->key` is the key.  BINDLOG_EINVAL for bad arguments;
 * BINDLOG_ECORRUPT when the stored binding is damaged (a value that does
 * not decode, or whose length is beyond the limit of a binding: the last
 * error names the key and the length).
 */
BINDLOG_API int bindlog_get(bindlog *s, const char *key, bindlog_binding *out);

/**
 * The session `session_id`.  Copies at most `origin_cap` bytes of its origin
 * into `origin_buf` (NULL with cap 0 is fine) and always reports the full
 * length in out->origin_len.  Returns 0, BINDLOG_ENOTFOUND, BINDLOG_EINVAL,
 * or BINDLOG_ECORRUPT for a damaged stored session (as bindlog_get()).
 */
BINDLOG_API int bindlog_session_get(bindlog *s, const char *session_id, bindlog_session *out,
                                    void *origin_buf, size_t origin_cap);
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Iteration
 *
 * An iterator reads one consistent snapshot taken when it was opened; writes
 * made after that are not seen.  Keep iterators short-lived: an open snapshot
 * keeps LMDB from reusing the pages it sees, so the file grows while it
 * lives.  Every iterator is closed with bindlog_iter_close() (NULL is a
 * no-op) before its handle is closed.  Not thread-safe: one thread at a time.
 *
 * The bindlog_iter_next_* functions return 1 with an item, 0 at the end, or a
 * negative error (BINDLOG_ECORRUPT for a damaged record or an entry whose
 * stored length is beyond its table's limit, BINDLOG_EINVAL when
 * the next_* function does not match the iterator's kind).  Pointers inside
 * the items they fill belong to the iterator and stay valid until the next
 * call on it or its close.
 */
/**@{*/
typedef struct bindlog_iter bindlog_iter;

/** One log record, as the log iterators return it. */
typedef struct bindlog_record {
    uint64_t lsn;
    int type;                /**< BINDLOG_EVENT_* */
    int64_t time_ms;
    uint64_t generation;     /**< the key's generation after the event */
    const char *key;         /**< NUL-terminated */
    size_t key_len;
    const char *session_id;  /**< the key's binding after the event (SPLIT:
                                  child; UNBIND: the session it ended) */
    const char *other_id;    /**< BIND/NEW_SESSION: the previous binding;
                                  SPLIT: parent; otherwise "" */
    const char *reason;      /**< the effective reason ("" if none) */
    const void *origin;      /**< origin bytes (may be NULL when origin_len is 0) */
    size_t origin_len;
    int origin_present;      /**< 0 when the event carried no origin (a BIND or
                                  NEW_SESSION called with NULL).  A SPLIT record
                                  always carries the child's effective origin (the
                                  parent's copy when the call gave none), so that
                                  replay never needs to look at the parent: 1. */
} bindlog_record;

/** Log records with from_lsn <= lsn <= to_lsn, oldest first (0 and
 * UINT64_MAX for the whole log; from_lsn > to_lsn is an empty range).
 * Compacted records are not there. */
BINDLOG_API int bindlog_log_iter(bindlog *s, uint64_t from_lsn, uint64_t to_lsn,
                                 bindlog_iter **out);
/** Every retained log record that changed `key`'s binding, oldest first
 * (a ROUTE record, a routed message that moved nothing, is in the log but
 * not here: bindlog_log_iter() has it).  The
 * history is a chain: the key's binding names its last record and each
 * record (version 2) the one before it; opening the iterator walks the
 * chain on its snapshot and keeps 8 bytes per record of the key, so the
 * open costs one log lookup per record of the key and a damaged record
 * on the chain (or one of version 1, which does not chain) is
 * BINDLOG_ECORRUPT from the open, with a last-error detail naming its LSN.
 * The chain ends at the first record compaction removed. */
BINDLOG_API int bindlog_history_iter(bindlog *s, const char *key, bindlog_iter **out);
/** Next record of a log or history iterator. */
BINDLOG_API int bindlog_iter_next_record(bindlog_iter *it, bindlog_record *rec);

/** Every binding (tombstones included), in key byte order. */
BINDLOG_API int bindlog_bindings_iter(bindlog *s, bindlog_iter **out);
/** Next binding of a bindings iterator. */
BINDLOG_API int bindlog_iter_next_binding(bindlog_iter *it, bindlog_binding *out);

/** Every session, in id byte order. */
BINDLOG_API int bindlog_sessions_iter(bindlog *s, bindlog_iter **out);
/** The direct children of `session_id` (sessions split from or opened after
 * it): those whose creating record the log holds newest first, then those
 * compaction folded, in id order (the LMDB backend; the etcd backend lists
 * all of them in id order).  An unknown session simply has none.  A next
 * call returns BINDLOG_ECORRUPT if the store's sibling chain or children
 * index names a session whose parent is another, or a record that created
 * no child of it (a damaged store: `bindlog check` names it). */
BINDLOG_API int bindlog_children_iter(bindlog *s, const char *session_id, bindlog_iter **out);
/** The ancestors of `session_id`: its parent, the parent's parent, ... up to
 * the root.  BINDLOG_ENOTFOUND if session_id does not exist.  The walk also
 * ends at a parent the store does not hold, or holds created after its
 * child: only a store rebuilt by bindlog_recover() after the parent was
 * lost has such a session (its value still names the parent, which a
 * later event may have re-created under the same id).  A next call
 * returns BINDLOG_ECORRUPT on a parent cycle (a damaged store). */
BINDLOG_API int bindlog_ancestors_iter(bindlog *s, const char *session_id, bindlog_iter **out);
/**
 * Next session of a sessions, children or ancestors iterator; the origin is
 * copied as for bindlog_session_get().
 */
BINDLOG_API int bindlog_iter_next_session(bindlog_iter *it, bindlog_session *out,
                                          void *origin_buf, size_t origin_cap);

/** Close an iterator; NULL is a no-op. */
BINDLOG_API void bindlog_iter_close(bindlog_iter *it);
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Statistics and digest */
/**@{*/

/** Columns of bindlog_stats.events: the four outcomes, then errors. */
#define BINDLOG_STAT_ERROR BINDLOG_OUTCOME_COUNT
#define BINDLOG_STAT_COLUMNS (BINDLOG_OUTCOME_COUNT + 1)

/** Statistics of a store.  Plain caller-owned value. */
typedef struct bindlog_stats {
    uint64_t head_lsn;         /**< last LSN written (0: empty store) */
    uint64_t base_lsn;         /**< records up to here were compacted into the base image */
    uint64_t log_records;      /**< records retained in the log */
    uint64_t bindings;         /**< keys with a binding entry (tombstones included) */
    uint64_t live_bindings;    /**< keys bound to a session */
    uint64_t sessions;         /**< sessions known */
    uint64_t live_sessions;    /**< sessions not ended */
    /** APPLIED events by type over the store's whole life (persistent,
     * every process): applied[BINDLOG_EVENT_BIND] ... */
    uint64_t applied[BINDLOG_EVENT_COUNT];
    /** Calls made through THIS HANDLE since it was opened, by type and
     * result: events[type][outcome], events[type][BINDLOG_STAT_ERROR]
     * (arguments refused included; a failed batch counts one error, for
     * the event at fault; each entry of bindlog_import_entries counts as a
     * bind).  Per handle, not per process or store: another handle of the
     * same process starts from zero, and nothing persists (a refused call
     * writes nothing).  Store-wide counts of what was applied are in
     * applied[]. */
    uint64_t events[BINDLOG_EVENT_COUNT][BINDLOG_STAT_COLUMNS];
    /** Group commits over the store's life, every process's (persistent:
     * one frame of the write-ahead log each). */
    uint64_t commits;
    /** APPLIED events those commits carried: grouped_events / commits is
     * the events per flush (persistent, every process). */
    uint64_t grouped_events;
    uint64_t map_size;         /**< current LMDB map size, bytes */
    uint64_t map_used;         /**< bytes of the map in use (last page) */
    uint64_t file_size;        /**< size of the data file, bytes */
    unsigned readers_used;     /**< reader slots in use (all processes) */
    unsigned readers_max;      /**< reader slots in LMDB's table: the options'
                                    max_readers + 1 for the store's own thread */
    int durability;            /**< this handle's durability mode */
    unsigned format_version;   /**< the store's on-disk format */
    /** The last LSN the checkpoint folded into LMDB: records after it are
     * in the write-ahead log only (head_lsn - checkpoint_lsn of them). */
    uint64_t checkpoint_lsn;
    /** Size of the write-ahead log file (bindlog.wal), bytes: fixed, the
     * log is preallocated. */
    uint64_t log_size;
    /** Bytes of the log's ring holding frames not yet checkpointed (0 in a
     * process that reads the log without the shared memory). */
    uint64_t log_used;
} bindlog_stats;

/** Fill `out` from one snapshot.  Returns 0 or an error. */
BINDLOG_API int bindlog_stats_get(bindlog *s, bindlog_stats *out);

#define BINDLOG_DIGEST_SIZE 16
/**
 * The state digest: XXH3-128 over the canonical encoding of every binding and
 * every session (docs/format.md), from one snapshot.  Two stores with the same
 * digest hold the same state, whatever their logs.  `out` receives 16 bytes
 * (big-endian high64 then low64).  If `head_lsn` is not NULL it receives the
 * LSN of the snapshot.  Returns 0 or an error (BINDLOG_ECORRUPT names the
 * first damaged entry in key order).  On a machine of two or more CPUs, a
 * store of more than 8,192 sessions is hashed on two threads: the call
 * starts one of its own and joins it before it returns (as
 * bindlog_export(), whose trailer holds the digest, does).
 */
BINDLOG_API int bindlog_digest(bindlog *s, unsigned char out[BINDLOG_DIGEST_SIZE],
                               uint64_t *head_lsn);

/** Format a digest as 32 lower-case hex digits and a NUL into `hex`. */
BINDLOG_API void bindlog_digest_hex(const unsigned char digest[BINDLOG_DIGEST_SIZE],
                                    char hex[2 * BINDLOG_DIGEST_SIZE + 1]);
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Maintenance: check, replay, compaction, export and import
 *
 * These stream the log in bounded memory and work on a live store while
 * other handles and processes write.  Long operations report progress
 * through an optional callback, called from the calling thread now and then
 * with how far they have got and the total expected (0 if unknown), both
 * counted in records.  (A bulk replay counts its three phases, reading
 * the log, deciding and merging, as a third of the total each.)
 */
/**@{*/
typedef void (*bindlog_progress_fn)(void *ctx, uint64_t done, uint64_t total);

/** What bindlog_check() found.  Plain caller-owned value. */
typedef struct bindlog_check_report {
    uint64_t problems;            /**< problems found; 0 = the store is consistent */
    uint64_t records;             /**< log records verified */
    uint64_t head_lsn;            /**< the snapshot's head LSN */
    uint64_t first_bad_lsn;       /**< LSN of the first bad record, 0 if none */
    char first_bad_key[BINDLOG_KEY_MAX + 1]; /**< first bad key or session id, "" if none */
    char message[512];            /**< the first problem in words, "" if none */
    unsigned char state_digest[BINDLOG_DIGEST_SIZE];  /**< digest of the stored state */
    unsigned char replay_digest[BINDLOG_DIGEST_SIZE]; /**< digest of base image + log replayed */
} bindlog_check_report;

/**
 * Verify one snapshot: every record's checksum and LSN (dense, matching its
 * key), that replaying base image + log reproduces every binding and session
 * (digests equal, and the first differing key named; each record carries
 * its key's previous LSN, so this also verifies every key's history
 * chain), the children index, that the history table of format 2 is empty,
 * and the persistent counters.  Returns 0 when the check
 * ran (see out->problems), or a negative error if it could not run.  An
 * entry whose length LMDB reports beyond its table's limit (a damaged page)
 * is a problem like any other, named by LSN or key (a damaged state table
 * then has no state_digest: it stays zero).
 *
 * How (docs/design.md, "Bulk replay"): the log is replayed partitioned by
 * key, each partition in memory with the same state machine as the write
 * path, and the result is compared with the stored tables in one ordered
 * pass.  Memory stays bounded whatever the store's size (a few partitions
 * of 8 MiB of log at a time, and 24 bytes for each of the log's first
 * million records, which are decided where they lie in the map: at most
 * 24 MiB); temporary files under $TMPDIR (or /tmp) take about as much
 * disk as the state, and are unlinked at once.  While the
 * log is read and the partitions decided, this process's writers cannot
 * grow the map (they wait for it, other processes do not).  When anything
 * is wrong, or a session moved between keys of two partitions, the check
 * is redone record by record in a scratch store under $TMPDIR, which names
 * the first bad LSN or key exactly.  Reads only.  Thread-safe.
 */
BINDLOG_API int bindlog_check(bindlog *s, bindlog_check_report *out,
                              bindlog_progress_fn progress, void *progress_ctx);

/**
 * Rebuild the state from this store's base image and log into a new store
 * at `out_dir` (which must not exist or be empty), replaying records with
 * lsn <= to_lsn and time_ms <= to_time_ms (pass UINT64_MAX and INT64_MAX for
 * everything).  The new store holds the base image and the replayed log
 * too.  On success `digest` (if not NULL) receives its state digest and
 * `last_lsn` (if not NULL) the last LSN replayed.  Replay to the head
 * reproduces this store's digest exactly.  Errors: BINDLOG_EEXIST if
 * out_dir holds anything; BINDLOG_ENOTFOUND if to_lsn (or to_time_ms) lies
 * before the base image (that past was compacted away); BINDLOG_ECORRUPT
 * if a record does not re-derive; BINDLOG_ENOSPC, BINDLOG_EIO,
 * BINDLOG_ENOMEM.  On any error nothing is left at `out_dir` (the files
 * of the new store are removed, and the directory too if the call made
 * it), so the same call can run again once the cause is gone.  Runs the
 * bulk replay described at
 * bindlog_check() (same memory, disk and map-growth notes), writing every
 * table of the new store in key order, and falls back to the record-by-
 * record replay when the bulk one cannot decide alone.  The new store is
 * synced once at the end: its files, and their names with the directories
 * that hold them (out_dir and those the call made), so that a replay that
 * returned 0 survives a power loss.  Thread-safe.
 */
BINDLOG_API int bindlog_replay(bindlog *s, const char *out_dir, uint64_t to_lsn,
                               int64_t to_time_ms, unsigned char digest[BINDLOG_DIGEST_SIZE],
                               uint64_t *last_lsn, bindlog_progress_fn progress,
                               void *progress_ctx);

/**
 * Wait for the log to move: return 0 as soon as the head LSN is greater
 * than `after_lsn`, or once `timeout_ms` milliseconds have passed (0: look
 * once and return at once; -1: no timeout), with the head LSN seen stored
 * in `*head` (if not NULL).  The caller compares *head with after_lsn to
 * tell a change from a timeout.  Events committed by other handles and
 * other processes count, as on etcd.  The waiting thread sleeps: it does
 * not spin.  This is what `bindlog dump --log --follow` and the bindings'
 * follow() are built on: read the records after after_lsn with
 * bindlog_log_iter(), then wait again after the last one.
 *
 * Returns 0, or BINDLOG_EINVAL (NULL handle, timeout_ms < -1), or an
 * error reading the head (BINDLOG_EPANIC, BINDLOG_EIO, ...).  Thread-safe;
 * any number of threads may wait on one handle.
 */
BINDLOG_API int bindlog_wait(bindlog *s, uint64_t after_lsn, int timeout_ms, uint64_t *head);

/**
 * Checkpoint: fold every event acknowledged so far (everything the
 * write-ahead log holds that readers may see) into the store's data file,
 * in the calling thread, and let the log's space be reused.  A background
 * thread of every writing process does this by itself (when half of
 * the log is used, and once a second otherwise), so a gateway never needs
 * to call it; it is for tools and tests, and before copying data.mdb alone
 * (bindlog_export is the safe way to copy a live store).  In FULL and
 * NORMAL the data file is synced (LMDB's two syncs); in NONE it is not.
 * `checkpoint_lsn` (if not NULL) receives the last LSN the data file holds
 * afterwards.
 *
 * Returns 0, or BINDLOG_EINVAL (NULL handle), BINDLOG_EREADONLY (a
 * read-only handle), BINDLOG_ENOTSUP (the etcd backend, which has no log),
 * BINDLOG_ENOSPC (the data file could not grow: nothing changed, the log
 * keeps everything, retry once there is space), BINDLOG_EPANIC,
 * BINDLOG_EIO.  Thread-safe.
 */
BINDLOG_API int bindlog_checkpoint(bindlog *s, uint64_t *checkpoint_lsn);

/**
 * The smallest LSN whose record's time_ms is >= time_ms (head + 1 if none),
 * found by binary search over the log.  For "compact everything older than".
 */
BINDLOG_API int bindlog_lsn_at_time(bindlog *s, int64_t time_ms, uint64_t *lsn);

/**
 * Online compaction: fold every log record with lsn < keep_from_lsn into
 * the base image and delete it, in bounded transactions so writers keep
 * going.  Afterwards replay(base image + remaining log) still equals the
 * state.  keep_from_lsn beyond head + 1 is clamped to head + 1.  `removed`
 * (if not NULL) receives the number of records dropped.  Thread-safe.
 * @return 0; BINDLOG_EINVAL (NULL handle), BINDLOG_EREADONLY,
 *   BINDLOG_ECORRUPT (damage found on the way: nothing more is compacted),
 *   BINDLOG_ENOSPC (a chunk could not be written: the chunks before it
 *   stay compacted, the state is unchanged), BINDLOG_EPANIC (a write or a
 *   flush of data.mdb failed after LMDB's meta page, or the flush that makes
 *   the compaction durable failed: every handle of the store in this
 *   process is unusable until all are closed; the store reopens with its
 *   state), BINDLOG_EFORK; on etcd also BINDLOG_EIO and BINDLOG_EACCES
 *   (docs/scale-out.md, "Errors").
 */
BINDLOG_API int bindlog_compact(bindlog *s, uint64_t keep_from_lsn, uint64_t *removed,
                                bindlog_progress_fn progress, void *progress_ctx);

/**
 * Rewrite the store in `dir` to its live size (an LMDB compacting copy,
 * fsync, atomic rename, directory fsync).  Only while nothing has the
 * store open: BINDLOG_EBUSY when a writer has it open in any process, when
 * another process has it open even only to read (it would go on reading
 * the replaced file), or when another handle of this process has it open.
 * Do not open the store while a vacuum runs.  BINDLOG_ENOTFOUND if there
 * is no store in `dir`.  A crash at any point leaves either the old or the
 * new file.  Sizes of the data file before and after go to
 * `before`/`after` when not NULL.
 */
BINDLOG_API int bindlog_vacuum(const char *dir, uint64_t *before, uint64_t *after);

/**
 * Write a portable, checksummed stream of one snapshot of the store to file
 * descriptor `fd` (docs/format.md, "Export stream").  from_lsn 0 or 1: a
 * full stream (header, base image, every retained record, trailer with
 * count and digest).  from_lsn > 1: an incremental stream of the records
 * from_lsn..head, no image (from_lsn = head + 1 gives an empty one);
 * BINDLOG_ENOTFOUND if records from from_lsn on no longer exist (compacted)
 * or never did (beyond head + 1).  BINDLOG_ECORRUPT if the log is damaged
 * (nothing damaged is ever exported).  `records` (if not NULL) receives the
 * number of records written.  Thread-safe.
 */
BINDLOG_API int bindlog_export(bindlog *s, uint64_t from_lsn, int fd, uint64_t *records,
                               bindlog_progress_fn progress, void *progress_ctx);

/**
 * Read a stream from `fd` into this store: a full stream into an empty
 * store restores it (same digest); an incremental stream that starts at
 * head + 1 appends.  Refused, with `err_offset` (if not NULL) set to the
 * byte offset of the header field or frame at fault and nothing of the
 * stream applied: torn or altered streams (BINDLOG_ECORRUPT, or
 * BINDLOG_EVERSION for a newer stream or record version), streams whose
 * LSNs could pass BINDLOG_LSN_MAX (a first_lsn above 2^63: offset 16) or
 * whose times leave years 0-9999 (BINDLOG_ECORRUPT at the frame, with a
 * last-error message naming the number), a full stream
 * into a non-empty store or an overlapping incremental one
 * (BINDLOG_EEXIST), an incremental stream that leaves a gap after the head
 * (BINDLOG_ENOTFOUND), a full disk (BINDLOG_ENOSPC: nothing reached the
 * store); a failed flush of the commit is BINDLOG_EPANIC (every handle of
 * the store in this process unusable until all are closed).  The whole stream is applied in one write
 * transaction, so other writers of the store wait until it is done.  A
 * refused stream changes nothing in the store, but the store itself
 * exists once bindlog_open() made it: to leave nothing behind in a new
 * directory, import into a temporary one beside it and rename it into
 * place on success (what `bindlog import` does).  A
 * full stream is re-derived by the bulk replay described at
 * bindlog_check() (the records of its first 64 MiB are decided where the
 * import's transaction holds them, 24 bytes each; the rest are copied to
 * temporary files, about their size); an incremental one record by record.  `records` (if not
 * NULL) receives the number of records applied.  Thread-safe.
 */
BINDLOG_API int bindlog_import(bindlog *s, int fd, uint64_t *records, uint64_t *err_offset,
                               bindlog_progress_fn progress, void *progress_ctx);

/**
 * Write what the file (or directory) open as `fd` holds to stable storage,
 * the way the library flushes its own files: fsync() on Linux and the
 * BSDs; fcntl(F_FULLFSYNC) on macOS, where fsync() only hands the data to
 * the drive's cache and a power loss can still take it (falling back to
 * fsync() only where the file system refuses F_FULLFSYNC).  For a program
 * that writes an export (or anything else) beside the store and wants
 * FULL's promise for it: flush the file, rename it into place, flush the
 * directory.  EINTR is retried.  Returns 0, BINDLOG_EINVAL (fd < 0, or a
 * descriptor that cannot be flushed, such as a pipe), or BINDLOG_EIO (the
 * flush failed: what was written may be lost; do not retry and trust it).
 * Thread-safe.
 */
BINDLOG_API int bindlog_fsync(int fd);
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Recovering a damaged store
 *
 * bindlog_recover() rebuilds a new store from what is still intact in a
 * damaged one, and says exactly what was lost (docs/reliability.md,
 * "Recovering a damaged store").
 */
/**@{*/

/** A range of LSNs, both ends included. */
typedef struct bindlog_lsn_range {
    uint64_t first, last;
} bindlog_lsn_range;

/** What bindlog_recover() found and built.  Counts are of LSNs and pages;
 * the two arrays are allocated by the call and freed by
 * bindlog_recover_report_free() (fields may be added, never removed). */
typedef struct bindlog_recover_report {
    uint64_t pages;            /**< pages of data.mdb read */
    uint64_t damaged_pages;    /**< pages of the current trees that failed validation */
    uint64_t records_found;    /**< LSNs with a record that decodes and checksums right */
    uint64_t head_lsn;         /**< the last LSN the store had (its meta "head", or the
                                    highest record found) */
    int head_known;            /**< 1: the store's meta records were read whole, so
                                    head_lsn is its head; 0: they are damaged, and
                                    records after the highest one found may be lost
                                    without being counted */
    uint64_t base_lsn;         /**< the base image the rebuild started from (0: none) */
    int base_image;            /**< 1: the store's base image was read whole; 0: the store
                                    had none; -1: it is damaged, the rebuild started at LSN 1 */
    uint64_t records_lost;     /**< LSNs after the base image with no intact record */
    uint64_t records_by_effect;/**< intact records that no longer re-derive (they follow a
                                    loss): applied to the state by the after-images their
                                    log frame carries, or (a record from data.mdb) by
                                    what they record */
    uint64_t records_skipped;  /**< intact records whose effect could not be applied */
    uint64_t cut_lsn;          /**< the new store's base image LSN: the state up to here is
                                    built from evidence (0: the log re-derived whole) */
    uint64_t records_rederived;/**< records after the cut, re-derived exactly: the new
                                    store's log */
    size_t nranges;            /**< lost LSN ranges, in order */
    bindlog_lsn_range *ranges;
    size_t nkeys;              /**< keys whose history has a gap, in byte order */
    char **keys;               /**< NUL-terminated */
    uint64_t unknown_lost;     /**< lost records that no evidence ties to a key */
    uint64_t new_head_lsn;     /**< the new store's head */
    unsigned char digest[BINDLOG_DIGEST_SIZE]; /**< the new store's state digest */
    /** The write-ahead log, bindlog.wal, which holds the records not yet
     * checkpointed into data.mdb: 1 its valid frames were read (from the
     * checkpoint data.mdb's meta records name, as recovery at open reads
     * them); 0 there is none (a format-1 store, or the file is gone);
     * -1 it is there but could not be read (log_why says why: e.g. it is
     * another store's log).  With 1, a non-empty log_why says the log was
     * read but is incomplete (cut short): events after what it holds may
     * be lost without being counted. */
    int log_state;
    uint64_t log_records;      /**< records taken from the log (its copy is kept when
                                    data.mdb has one too) ... */
    uint64_t log_first_lsn;    /**< ... LSNs log_first_lsn..log_last_lsn (0 if none) */
    uint64_t log_last_lsn;
    char log_why[160];         /**< log_state -1: why; 1: what is missing, or "" */
} bindlog_recover_report;

/**
 * Rebuild the store in `dir` into a new store at `out_dir` (which must not
 * exist or be empty), without ever opening `dir` through LMDB: data.mdb is
 * read page by page with bindlog's own validator, so a damaged file is
 * never a crash, and nothing in `dir` is written.  Salvaged: every log
 * record that decodes and checksums right, from any page (the current
 * tree, the older meta page's tree, free pages) and from the valid frames
 * of the write-ahead log (bindlog.wal) after the last checkpoint, which
 * hold the most recent records (rep->log_*); the base image when its
 * tables are whole; the stored bindings and sessions, the previous LSN each
 * record names (format 3) and format 2's history index as evidence.  Rebuilt: records are re-derived by the state machine as by
 * bindlog_replay(); after a lost record, records that no longer re-derive
 * are applied by the state their log frame recorded after them (exactly),
 * or by their effect when they come from data.mdb, and lost records are replaced by what the
 * stored state says about their LSN.  The new store holds that state as a
 * base image at the last LSN built that way (`cut_lsn`), then the intact
 * records after it, re-derived; it always passes bindlog_check() (which
 * the call runs before returning).  A store with nothing damaged recovers
 * to the same digest.  `rep` (required) says what was found, lost and
 * built; free it with bindlog_recover_report_free() whatever the return.
 *
 * Returns 0 (rep->records_lost, records_by_effect and records_skipped
 * say whether anything was lost), BINDLOG_EINVAL, BINDLOG_EEXIST (out_dir
 * holds something), BINDLOG_ENOTFOUND (no data.mdb in dir),
 * BINDLOG_ENOTSTORE (data.mdb holds nothing of a bindlog store),
 * BINDLOG_ENOMEM, BINDLOG_ENOSPC, BINDLOG_EIO, BINDLOG_EACCES, with a
 * last-error detail; on an error out_dir may hold a partial store: remove
 * it.  Temporary stores go under $TMPDIR (about twice data.mdb's live
 * size).  `progress` (may be NULL) gets LSNs done and the total.
 * Thread-safe; needs no lock on `dir`: copy the store first if a writer may
 * still be running on it.
 */
BINDLOG_API int bindlog_recover(const char *dir, const char *out_dir,
                                bindlog_recover_report *rep, bindlog_progress_fn progress,
                                void *progress_ctx);

/** Free the arrays of a report (and zero them); NULL is a no-op. */
BINDLOG_API void bindlog_recover_report_free(bindlog_recover_report *rep);
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Upgrading a store of an older on-disk format
 *
 * Opening a store of an older format gives BINDLOG_EVERSION and a message
 * naming `bindlog upgrade DIR`; bindlog_upgrade() converts it
 * (docs/tools.md, "upgrade"; docs/format.md, "Format 1" and "Format 2").
 */
/**@{*/

/** What bindlog_upgrade() did.  Plain caller-owned value (fields may be
 * added at the end, never removed). */
typedef struct bindlog_upgrade_report {
    unsigned from_format;  /**< the format the store had (1 to 6), or
                                BINDLOG_FORMAT_VERSION when it was current */
    int upgraded;          /**< 1: converted by this call; 0: nothing done */
    uint64_t head_lsn;     /**< the store's head LSN (unchanged by the upgrade) */
    uint64_t base_lsn;     /**< its base image's LSN (0: never compacted) */
    uint64_t records;      /**< log records re-derived into the new store */
    uint64_t bindings;     /**< binding entries (tombstones included) */
    uint64_t sessions;     /**< sessions */
    /** The state digest, the old store's and the new one's (they are
     * verified equal): what bindlog_digest() gives for the store. */
    unsigned char digest[BINDLOG_DIGEST_SIZE];
    /** 1: upgraded, but the staging directory `dir`/.bindlog-upgrade/
     * (what the new store was built in, by then empty or holding the
     * leftovers of the build) could not be removed after the switch.
     * The new store is whole and in use either way; the next
     * bindlog_upgrade() of `dir` removes it, or delete it by hand. */
    int staging_left;
} bindlog_upgrade_report;

/**
 * Convert the store in directory `dir` of format 1 (written by bindlog
 * before the write-ahead log), 2 (before records chained their key's
 * history), 3 (before the compact encodings), 4 (before session values
 * referred to their records), 5 (before session values linked their
 * children) or 6 (before log records kept UUIDs in 16 bytes) to the
 * current format, in place and atomically.
 *
 * A store of format 2 to 6 is first opened and closed as a writer, which
 * checkpoints its write-ahead log into data.mdb (and which fails if
 * another process keeps the store open); under the locks below, its
 * data.mdb must then hold the store's head, or BINDLOG_EBUSY (a writer
 * came in between).  The new store is built in `dir`/.bindlog-upgrade/
 * from the old store's base image and log, read with bindlog's own page
 * validator (never through LMDB): every record is re-derived by the
 * current state machine (as bindlog_import() does with a full stream), and
 * the result must pass bindlog_check() with the old store's state digest,
 * head, base image and applied counters.  Only then is it renamed into
 * place.  The old data.mdb is kept as `dir`/format<N>-backup/data.mdb (N
 * the old format; a hard link, so no copy) until
 * the user deletes it; to go back to the old library, stop every process
 * and move it over `dir`/data.mdb, then delete bindlog.wal and bindlog.shm
 * (events written after the upgrade are then lost: export them first).
 * A crash at any point leaves either the old store (run the upgrade again)
 * or the new one, never neither.
 *
 * No other process may have the store open: the call takes bindlog.lock
 * exclusively and refuses while any process holds LMDB's lock on lock.mdb.
 *
 * @param dir   the store directory (may be reached through a symbolic
 *              link; its files must be regular files).
 * @param opts  options for the new store, or NULL: map_size, max_readers
 *              and log_size are used, durability is FULL while it is built,
 *              read_only must be 0.
 * @param rep   required; filled on success (zeroed first).
 * @param progress, progress_ctx  optional: records imported so far.
 * @return 0: upgraded (rep->upgraded 1), or already current (rep->upgraded
 *   0, rep->from_format BINDLOG_FORMAT_VERSION; nothing was touched).  On
 *   error nothing of the store changed (bindlog.lock may have been made,
 *   as any writer's open makes it): BINDLOG_EINVAL (NULL/empty dir or rep, bad opts,
 *   an etcd location), BINDLOG_ENOTFOUND (no such directory, no data.mdb),
 *   BINDLOG_ENOTSTORE (dir is a file; data.mdb is a link, not LMDB's or
 *   not bindlog's), BINDLOG_EVERSION (a format newer than this library's),
 *   BINDLOG_ECORRUPT (the old store is damaged or its log does not
 *   re-derive: the message says where, and `bindlog recover` salvages it),
 *   BINDLOG_EBUSY (another process has it open), BINDLOG_EEXIST
 *   (format<N>-backup/data.mdb holds another file), BINDLOG_ENOSPC,
 *   BINDLOG_EIO, BINDLOG_EACCES, BINDLOG_ENOMEM; with a last-error detail.
 * Thread-safe (a second upgrade of the same store meanwhile gets
 * BINDLOG_EBUSY).  Needs
 * free disk space of about the store's size.
 */
BINDLOG_API int bindlog_upgrade(const char *dir, const bindlog_options *opts,
                                bindlog_upgrade_report *rep, bindlog_progress_fn progress,
                                void *progress_ctx);
/**@}*/

/* ------------------------------------------------------------------------ */
/** @name Moving a gateway's sessions in
 *
 * A gateway that kept its routing table in a file (a sessions.json of
 * key -> session id) moves it into a store with one call: each entry
 * becomes a BIND of its key to its session, logged with the entry's own
 * time.  The caller parses its file (the `bindlog import-json` command
 * parses two gateways' formats; the Python and Node bindings use their own
 * JSON parsers) and hands the entries over; libbindlog reads no JSON.
 */
/**@{*/

/** One entry of a gateway's routing table.  Caller-owned; read during
 * the call only. */
typedef struct bindlog_import_entry {
    const char *key;        /**< the session key (rules as for bindlog_bind) */
    const char *session_id; /**< the session the key routes to */
    /** The entry's last update, ms since the Unix epoch: the event's time in
     * the log and the order entries are applied in.  0 = the handle's clock
     * at the start of the call; negative is BINDLOG_EINVAL. */
    int64_t time_ms;
    const void *origin;     /**< the session's origin (e.g. the entry itself as
                                 JSON), or NULL for none */
    size_t origin_len;      /**< 0..BINDLOG_ORIGIN_MAX; 0 when origin is NULL */
} bindlog_import_entry;

/**
 * Bind every entry's key to its session, as BIND(key, session_id,
 * expect = "" (only if the key is unbound), reason = "import", origin), each
 * entry applied or refused alone: one entry that cannot go in never stops
 * or undoes the others.
 *
 * Order and time: entries are applied in order of time_ms (equal times in
 * array order), each logged with its own time_ms.  Times never decrease
 * along the log, so an entry older than the store's last record is logged
 * at that record's time (its order among the entries still follows
 * time_ms).  Entries share write transactions and syncs (group commit), so
 * thousands go in per second even with BINDLOG_DURABILITY_FULL.
 *
 * Per entry, codes[i] (if `codes` is not NULL) receives its outcome or
 * error, and out[i] (if `out` is not NULL) its result (unspecified when
 * codes[i] < 0):
 *  - BINDLOG_APPLIED: bound now (one log record; the session was created,
 *    or re-opened, with `origin`);
 *  - BINDLOG_ALREADY: the key was already bound to this session (so a
 *    second run of the same import changes nothing);
 *  - BINDLOG_MOVED: the key is bound to another session (out[i].session_id
 *    says which); left as it is;
 *  - BINDLOG_ECONFLICT: the session is the live binding of another key (two
 *    keys naming one session: the entry with the earlier time wins);
 *  - BINDLOG_EINVAL: a key, session id, origin or time the contract refuses.
 * Every entry counts as one bind call in bindlog_stats.events.
 *
 * Progress (optional) is reported as entries decided out of n.
 *
 * Returns 0 when every entry was decided (whatever its code), or an error
 * that stopped the call: BINDLOG_EINVAL (NULL handle; entries NULL with
 * n > 0), BINDLOG_EREADONLY, BINDLOG_ENOMEM, or a storage error (BINDLOG_EIO,
 * BINDLOG_ENOSPC, BINDLOG_EPANIC, ...).  After a storage error the entries
 * whose code is that error were not applied and the others were; running
 * the call again is safe (what went in comes back ALREADY).
 * bindlog_last_error() is "" after a return of 0 (look at the codes).
 * Thread-safe.
 */
BINDLOG_API int bindlog_import_entries(bindlog *s, const bindlog_import_entry *entries, size_t n,
                                       bindlog_result *out, int *codes,
                                       bindlog_progress_fn progress, void *progress_ctx);
/**@}*/

#ifdef __cplusplus
}
#endif
#endif /* BINDLOG_H */
