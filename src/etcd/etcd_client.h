/*
 * etcd_client.h -- a small etcd v3 client over the JSON gateway (internal).
 *
 * The etcd backend is built on this: range reads, Txns with compares,
 * deletes, compaction and member status, spoken as JSON over HTTP/1.1 to
 * etcd's grpc-gateway (/v3/kv/range, /v3/kv/txn, ...) with libcurl, and
 * parsed with json-c.  No hand-written HTTP or JSON; only base64 is ours
 * (keys and values travel base64-encoded; the decoder is strict).
 *
 * Endpoints and failover.  A client holds an ordered list of endpoints
 * ("host:port", http or https).  Each call starts at the endpoint that last
 * answered and, when an endpoint cannot be reached or answers that it cannot
 * serve now (connection refused or reset, connect timeout, HTTP 5xx, gRPC
 * UNAVAILABLE / DEADLINE_EXCEEDED, "too many requests"), moves on to the
 * next one.  If every endpoint refused the connection the call fails at once
 * with BINDLOG_EIO; if at least one was alive but unable to serve (a
 * cluster electing a leader), the client sleeps a little (25 ms, doubling up
 * to 500 ms) and goes round again until the request timeout runs out.  The
 * BINDLOG_EIO message then names every endpoint tried and what each said.
 *
 * Timeouts.  request_timeout_ms bounds a whole call, failover and retries
 * included; attempt_timeout_ms bounds one attempt on one endpoint (a member
 * that holds the request, e.g. one whose leader just died, costs at most that
 * before the next endpoint is tried); connect_timeout_ms bounds each TCP
 * connect (a blackholed host).  A call returns within request_timeout_ms
 * (plus a few milliseconds of bookkeeping).
 *
 * Writes with an unknown outcome.  When a request reached a server but no
 * answer came back (timeout, reset, 5xx), etcd may or may not have applied
 * it.  The client sends it again to the next endpoint, as etcd's own clients
 * do: puts and deletes are idempotent, and a Txn guarded by compares on mod
 * revisions fails its compares on the retry if the first attempt applied.
 * bl_etcd_txn_result.retried tells the caller this happened, so a Txn that
 * "failed" its compares can be recognised as possibly its own earlier
 * success (the backend must re-read and tell by content).
 *
 * TLS and auth (bl_etcd_options version 2).  With tls every endpoint is
 * https and its certificate is checked against the CA file (or the
 * system's store) and the endpoint's host name; a certificate that cannot
 * be verified, a name that does not match it, and a server that refuses
 * our client certificate are transport failures (BINDLOG_EIO, the message
 * says which and where).  With a user, the client authenticates once
 * (/v3/auth/authenticate), sends the token with every request, and when
 * etcd calls a token invalid (it expired, or auth changed) renews it once
 * and sends the request again, unseen by the caller.  A cluster without
 * auth enabled is used without a token, as etcd's own client does.
 *
 * Errors.  Functions return 0 or a negative code: BINDLOG_EINVAL (bad
 * arguments, or etcd refused the request as invalid: too many ops, duplicate
 * keys in a Txn, future revision), BINDLOG_ENOSPC (etcd's space quota is
 * exhausted: "mvcc: database space exceeded"; careful: the write that
 * crosses the quota is applied *and* answered with this error, only later
 * ones are refused), BINDLOG_EACCES (etcd auth: bad credentials, no
 * credentials where etcd wants them, or a user without permission on a
 * key),
 * BL_ETCD_ECOMPACTED (a read at a compacted revision), BINDLOG_ENOMEM,
 * BINDLOG_ECORRUPT (etcd sent bytes that are not valid base64, or a
 * DATA_LOSS error) and BINDLOG_EIO (no endpoint could serve the call, or
 * one answered something we cannot parse).  After a failure,
 * bl_etcd_last_error() describes it, with the server's message kept and the
 * endpoint named; it never contains the password.
 *
 * Thread safety.  A bl_etcd handle may be used from any number of threads at
 * once.  It keeps a pool of libcurl easy handles: a call takes an idle one
 * (or makes one) and gives it back, so concurrent calls run in parallel and
 * each easy handle keeps its connections alive between calls.  The pool
 * grows to the largest number of concurrent calls seen and is freed by
 * bl_etcd_close().  libcurl's global state is initialised once per process
 * (pthread_once) and never cleaned up.
 */
#ifndef BL_ETCD_CLIENT_H
#define BL_ETCD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "bindlog.h"

/*
 * A read at a revision older than etcd's compaction point.  Internal: the
 * backend translates it (re-read at the latest revision, or BINDLOG_ENOTFOUND
 * for history that is gone); it never reaches the public API.  Outside the
 * public range of codes (BINDLOG_ERROR_MIN) on purpose.
 */
#define BL_ETCD_ECOMPACTED (-101)

/* etcd's default --max-txn-ops: the most compares, or success ops, or
 * failure ops one Txn may carry. */
#define BL_ETCD_DEFAULT_MAX_TXN_OPS 128

#define BL_ETCD_OPTIONS_VERSION 2

/* Options of bl_etcd_open().  Initialise with BL_ETCD_OPTIONS_INIT. */
typedef struct bl_etcd_options {
    unsigned version;           /* BL_ETCD_OPTIONS_VERSION */
    long connect_timeout_ms;    /* per TCP connect; 0 = default (1000) */
    long request_timeout_ms;    /* per call, retries and failover included;
                                   0 = default (5000) */
    /* Per attempt on one endpoint; 0 = default (2000).  After it the next
     * endpoint is tried.  Keeps a request stuck in a member that lost its
     * leader (etcd holds it up to 5 s + 2 election timeouts before saying
     * "request timed out") from eating the whole call.  Must exceed the
     * slowest legitimate request: page large ranges with a limit. */
    long attempt_timeout_ms;
    /* The servers' --max-txn-ops; 0 = default (128).  Txns over it are
     * refused locally with BINDLOG_EINVAL so the caller can split them; a
     * value above the servers' real limit makes etcd refuse them instead
     * (also BINDLOG_EINVAL). */
    unsigned max_txn_ops;
    /* Version 2: TLS and auth.  tls: speak https, verifying each server's
     * certificate and host name against `cacert` (a PEM file; NULL: the
     * system's store).  cert and key: a client certificate and its
     * private key (PEM files, both or neither).  user and password: etcd's
     * authentication (both or neither); a token is fetched on the first
     * call and renewed once whenever etcd calls it invalid.  The strings
     * are copied; the password is wiped from memory at close. */
    int tls;
    const char *cacert;
    const char *cert;
    const char *key;
    const char *user;
    const char *password;
} bl_etcd_options;

#define BL_ETCD_OPTIONS_INIT { BL_ETCD_OPTIONS_VERSION, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL }

/* A client.  Opaque; thread-safe. */
typedef struct bl_etcd bl_etcd;

/*
 * Open a client on `endpoints`: "host:port[,host:port...]", each optionally
 * written "http://host:port" (or "https://host:port" with o->tls); IPv6
 * hosts in brackets.  Connects lazily: a client on endpoints that are all
 * down opens fine and fails on its first call.  Environment proxies
 * (http_proxy, ...) are ignored: endpoints are always contacted directly.
 * `o` NULL means the defaults.  Returns 0, BINDLOG_EINVAL (a bad endpoint;
 * TLS files given without tls, unreadable, or a certificate without its
 * key; a user without a password) or BINDLOG_ENOMEM; *out is NULL on
 * failure.
 */
int bl_etcd_open(const char *endpoints, const bl_etcd_options *o, bl_etcd **out);

/* Close a client.  NULL is a no-op.  No call may be running on it. */
void bl_etcd_close(bl_etcd *c);

/* The Txn limit in use (bl_etcd_options.max_txn_ops). */
unsigned bl_etcd_max_txn_ops(const bl_etcd *c);

/*
 * A description of the last failure of a bl_etcd_* call made by the calling
 * thread (any client), e.g. "no etcd endpoint answered; tried 127.0.0.1:1
 * (Couldn't connect to server), ...".  Thread-local storage, valid until the
 * thread's next bl_etcd_* call; "" if there was none.  Never NULL.
 */
const char *bl_etcd_last_error(void);

/*
 * etcd's prefix convention: the range_end that makes [prefix, range_end)
 * cover every key starting with `prefix`.  Writes it to `out` (room for
 * `len` bytes, at least 1) and returns its length: the prefix with its last
 * byte below 0xff incremented and the bytes after it dropped, or the single
 * byte "\0" (meaning "to the end of the keyspace") when the prefix is empty
 * or all 0xff.
 */
size_t bl_etcd_prefix_end(const void *prefix, size_t len, unsigned char *out);

/* ---- results ------------------------------------------------------------ */

/* One key-value pair.  key and value are owned by the enclosing bl_etcd_kvs
 * and each is followed by a NUL byte not counted in its length (convenient
 * for text; keys and values may hold NUL bytes themselves). */
typedef struct bl_etcd_kv {
    unsigned char *key;
    size_t key_len;
    unsigned char *value;       /* empty (value_len 0) with BL_ETCD_KEYS_ONLY */
    size_t value_len;
    int64_t create_revision;    /* revision of the key's creation */
    int64_t mod_revision;       /* revision of its last change */
    int64_t version;            /* number of changes since creation */
} bl_etcd_kv;

/* The answer to a range read.  Initialise to zero ({0}); free with
 * bl_etcd_kvs_free(), which also leaves it zeroed for reuse. */
typedef struct bl_etcd_kvs {
    bl_etcd_kv *kvs;            /* n entries, in the requested order */
    size_t n;
    int more;                   /* the limit cut the range short */
    int64_t count;              /* number of keys in the whole range */
    int64_t revision;           /* the store revision the read saw */
} bl_etcd_kvs;

void bl_etcd_kvs_free(bl_etcd_kvs *kvs);

/* ---- reads and writes ---------------------------------------------------- */

/* Range flags. */
#define BL_ETCD_KEYS_ONLY 0x1    /* no values */
#define BL_ETCD_COUNT_ONLY 0x2   /* no kvs, only count */
#define BL_ETCD_SERIALIZABLE 0x4 /* answer from the member's local state: may
                                    be stale, but needs no quorum */
#define BL_ETCD_SORT_DESCEND 0x8 /* by key, descending (default ascending) */

/*
 * Read [key, range_end) at `revision` (0 = the latest), at most `limit` keys
 * (0 = no limit).  range_end NULL reads the single key `key`; see
 * bl_etcd_prefix_end() for prefixes.  key_len must be > 0.  Linearizable
 * unless BL_ETCD_SERIALIZABLE.  `out` is overwritten (not freed) and owned by
 * the caller afterwards, also after a failure (then empty).
 * Returns 0 (a missing key is n == 0, not an error), BL_ETCD_ECOMPACTED,
 * BINDLOG_EINVAL (also: revision in the future), BINDLOG_EIO, ...
 */
int bl_etcd_range(bl_etcd *c, const void *key, size_t key_len, const void *range_end,
                  size_t range_end_len, int64_t revision, int64_t limit, int flags,
                  bl_etcd_kvs *out);

/* Put one key.  *revision (may be NULL) receives the revision written. */
int bl_etcd_put(bl_etcd *c, const void *key, size_t key_len, const void *value,
                size_t value_len, int64_t *revision);

/* Delete [key, range_end) (range_end NULL: the one key).  *deleted and
 * *revision may be NULL. */
int bl_etcd_delete_range(bl_etcd *c, const void *key, size_t key_len, const void *range_end,
                         size_t range_end_len, int64_t *deleted, int64_t *revision);

/* ---- transactions --------------------------------------------------------- */

/* What a compare looks at. */
#define BL_ETCD_CMP_VERSION 0 /* the key's version (0: absent) */
#define BL_ETCD_CMP_CREATE 1  /* its create_revision (0: absent) */
#define BL_ETCD_CMP_MOD 2     /* its mod_revision (0: absent) */
#define BL_ETCD_CMP_VALUE 3   /* its value (an absent key fails every value compare) */

/* How. */
#define BL_ETCD_EQUAL 0
#define BL_ETCD_GREATER 1
#define BL_ETCD_LESS 2
#define BL_ETCD_NOT_EQUAL 3

/* One compare of a Txn: "<target of key> <result> <number or value>".  With
 * range_end set the compare must hold for every key in [key, range_end).
 * Pointers are borrowed for the call only. */
typedef struct bl_etcd_cmp {
    int target;                 /* BL_ETCD_CMP_* */
    int result;                 /* BL_ETCD_EQUAL, ... */
    const void *key;
    size_t key_len;             /* > 0 */
    const void *range_end;      /* NULL: the single key */
    size_t range_end_len;
    int64_t number;             /* VERSION, CREATE, MOD */
    const void *value;          /* VALUE (may be NULL when value_len is 0) */
    size_t value_len;
} bl_etcd_cmp;

#define BL_ETCD_OP_RANGE 0
#define BL_ETCD_OP_PUT 1
#define BL_ETCD_OP_DELETE 2

/* One operation of a Txn branch.  Pointers are borrowed for the call only. */
typedef struct bl_etcd_op {
    int type;                   /* BL_ETCD_OP_* */
    int flags;                  /* RANGE: BL_ETCD_KEYS_ONLY, _COUNT_ONLY, _SORT_DESCEND */
    const void *key;
    size_t key_len;             /* > 0 */
    const void *range_end;      /* RANGE, DELETE; NULL: the single key */
    size_t range_end_len;
    const void *value;          /* PUT (may be NULL when value_len is 0) */
    size_t value_len;
    int64_t limit;              /* RANGE: 0 = no limit */
} bl_etcd_op;

/* The response to one op of the branch that ran. */
typedef struct bl_etcd_op_result {
    int type;                   /* BL_ETCD_OP_* of the op */
    bl_etcd_kvs kvs;            /* RANGE: the keys read */
    int64_t deleted;            /* DELETE: how many keys went */
} bl_etcd_op_result;

/* The answer to a Txn.  Initialise to zero; free with
 * bl_etcd_txn_result_free(). */
typedef struct bl_etcd_txn_result {
    int succeeded;              /* every compare held: the success ops ran */
    int64_t revision;           /* store revision after the Txn */
    bl_etcd_op_result *results; /* one per op of the branch that ran, in order */
    size_t nresults;
    /* The request was sent again after an attempt whose outcome is unknown
     * (see the top of this file). */
    int retried;
} bl_etcd_txn_result;

void bl_etcd_txn_result_free(bl_etcd_txn_result *r);

/*
 * Run a Txn: if every compare holds, the success ops, else the failure ops,
 * atomically at one revision.  ncmp, nsucc and nfail may each be 0 (with the
 * array NULL) and each must be <= bl_etcd_max_txn_ops(c), else
 * BINDLOG_EINVAL without contacting etcd.  etcd also refuses two writes to
 * one key in a branch (BINDLOG_EINVAL).  `out` is overwritten and owned by
 * the caller afterwards.
 */
int bl_etcd_txn(bl_etcd *c, const bl_etcd_cmp *cmps, size_t ncmp, const bl_etcd_op *success,
                size_t nsucc, const bl_etcd_op *failure, size_t nfail, bl_etcd_txn_result *out);

/* ---- watch ------------------------------------------------------------------ */

/*
 * Watch `key` from `start_revision` (0: from now) for at most timeout_ms
 * (> 0): fn is called with each change of the key, in revision order
 * (a deletion has an empty value and version 0), until it returns
 * non-zero.  The kv is valid during the call only.  One streaming request
 * to the endpoint that answered last (the others if it cannot be reached).
 * Returns 1 (fn asked to stop), 0 (the time ran out with the watch in
 * place), or BL_ETCD_ECOMPACTED (start_revision is compacted: read again),
 * BINDLOG_EACCES, BINDLOG_EIO (no endpoint kept a watch), BINDLOG_EINVAL,
 * BINDLOG_ENOMEM.  Thread-safe; each call holds its own connection.
 */
int bl_etcd_watch(bl_etcd *c, const void *key, size_t key_len, int64_t start_revision,
                  long timeout_ms, int (*fn)(void *ctx, const bl_etcd_kv *kv), void *ctx);

/* ---- maintenance ------------------------------------------------------------ */

/* The status of the member that answered. */
typedef struct bl_etcd_status_info {
    char endpoint[272];         /* "host:port" of the member that answered */
    char version[32];           /* etcd server version, e.g. "3.4.23" */
    uint64_t member_id;         /* the answering member */
    uint64_t leader;            /* the leader's member id; 0 = no leader */
    int64_t revision;           /* current store revision */
    int64_t db_size;            /* backend file size, bytes */
    int64_t db_size_in_use;     /* bytes in use within it (0 if not reported) */
    uint64_t raft_term;
    uint64_t raft_index;
} bl_etcd_status_info;

/* Ask the first endpoint that answers for its status. */
int bl_etcd_status(bl_etcd *c, bl_etcd_status_info *out);

/*
 * Compact etcd's history below `revision`: reads at older revisions fail
 * with BL_ETCD_ECOMPACTED afterwards.  `physical` waits until the space is
 * reclaimed in the backend.  Compacting at or below the current compaction
 * point is BL_ETCD_ECOMPACTED; above the store revision, BINDLOG_EINVAL.
 */
int bl_etcd_compact(bl_etcd *c, int64_t revision, int physical);

/* ---- base64 (exposed for tests) ------------------------------------------- */

/* Standard alphabet with padding, as etcd's gateway speaks it.  encode
 * writes 4*ceil(len/3) characters plus a NUL and returns the count (without
 * the NUL); `out` needs bl_etcd_b64_encoded_len(len) + 1 bytes. */
size_t bl_etcd_b64_encoded_len(size_t len);
size_t bl_etcd_b64_encode(const void *in, size_t len, char *out);

/* Strict decode: length a multiple of 4, only alphabet characters, padding
 * only at the end, unused bits zero.  `out` needs len/4*3 bytes.  Returns 0
 * and the decoded length in *out_len, or BINDLOG_ECORRUPT. */
int bl_etcd_b64_decode(const char *in, size_t len, unsigned char *out, size_t *out_len);

#endif /* BL_ETCD_CLIENT_H */
