/*
 * group.h -- group commit, independent of the storage backend.
 *
 * Every mutating call becomes a request on a queue.  If no thread is
 * committing, the caller becomes the leader at once (a lone caller never
 * waits on a timer); otherwise it sleeps while the current leader works:
 * the first caller to queue after a group was taken leads the next one,
 * with everything that queued up meanwhile, and the others sleep until
 * their group is complete and are woken together, in one call (group.c,
 * "Who sleeps and who wakes whom").  The backend supplies `run`, which
 * commits one group in one storage transaction and sets every request's
 * rc and outcomes, and optionally `finish`, a step that must complete
 * before the group's callers hear their outcomes but need not hold up the
 * next group's queueing (LMDB: the write-ahead log's flush in FULL
 * durability).  The queue also keeps the sticky-failure flag and this
 * process's commit statistics (commits, grouped events).  Calls by type
 * and outcome are counted per handle, above the seam (api.c).
 */
#ifndef BL_GROUP_H
#define BL_GROUP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/error.h"

/* Room for the detail of a request's error (bl_greq.msg); what
 * commit_each hands back per event (backend.h). */
#define BL_GREQ_MSG_MAX BL_EACH_MSG_MAX

typedef struct bl_greq {
    struct bl_greq *next;
    const void *owner;    /* the calling thread's (its last request): who waits for it */
    unsigned par;         /* the parity of the group that takes it (bl_group.epoch) */
    bindlog *h;
    const bl_event *ev;
    size_t n;
    bindlog_result *out;  /* n results */
    int *outcomes;        /* per event: outcome or error (the backend's bookkeeping) */
    size_t err_index;     /* the failing event when rc < 0 */
    int rc;               /* 0 or the request's error */
    /* 1 once the group that took it is complete: its rc, outcomes and
     * results are final.  Set last, with release order; after that the
     * leader never touches the request (its thread may have returned). */
    atomic_int done;
    /* The detail of rc, in words, for the caller's bindlog_last_error():
     * the leader runs in another thread, so it cannot set the caller's
     * thread-local message itself.  "" = none (the code's text is used). */
    char msg[BL_GREQ_MSG_MAX];
} bl_greq;

typedef struct bl_group {
    pthread_mutex_t mu;   /* queue, leader, statistics */
    bl_greq *head, *tail;
    int leader;           /* a thread is running a group */
    /* The head request's thread waits here to take the queue (while a
     * group runs, or is flushed when holding), and the leader waits here
     * for the flush's writers (rejoin): one waiter at a time. */
    pthread_cond_t lead_cv;
    /* Completion words: a group taken in epoch e bumps done_word[e & 1]
     * when it completes and wakes every thread asleep on it, in one call
     * (bl_plat_wake_all_local, or done_cv where the platform can only poll).
     * The epoch moves on each time a leader takes the queue. */
    unsigned epoch;
    _Atomic uint32_t done_word[2];
    int native_wait;      /* the platform sleeps on a word (else done_mu/done_cv) */
    pthread_mutex_t done_mu;
    pthread_cond_t done_cv[2];
    /* Filling (bl_group_fill): requests queued, how many the next leader
     * expects (the last group's plus those queued while it ran), and the
     * leader's wait for them. */
    size_t queued, expect;
    unsigned fill_us;     /* 0: never wait */
    int64_t last_run_ns;  /* how long the last group's run took */
    int filling;          /* a leader waits on fill_cv */
    pthread_cond_t fill_cv;
    int hold;             /* bl_group_hold: leaders wait for finishing == 0 */
    int finishing;        /* groups whose `finish` is running */
    int64_t finish_ns;    /* how long the last `finish` took */
    size_t rejoin;        /* the held leader waits for this many queued ... */
    int64_t rejoin_until; /* ... until then (monotonic ns) */
    int rejoining;        /* it waits (queueing signals it, or takes over) */
    uint64_t rejoin_seq;  /* each rejoin's number ... */
    uint64_t taken_seq;   /* ... and the last one a queueing writer took over */
    uint64_t budget;      /* bl_group_budget: a group's bytes, estimated (0: no bound) */
    atomic_int panic;     /* sticky: a commit failed fatally */
    uint64_t commits, grouped_events; /* this process's, over every handle */
    _Atomic(char *) panic_why;        /* what failed first (set once, malloc'ed) */
    atomic_int panic_code;            /* its BINDLOG_E* code where known (0: not) */
} bl_group;

/* Commit `group` (a list through ->next).  Set each request's rc, outcomes,
 * err_index and results.  Return 1 if `finish` must still run for it. */
typedef int (*bl_group_run_fn)(void *ctx, bl_greq *group);
/* Finish a committed group after leadership was handed on; 0, or the error
 * every request of the group then fails with. */
typedef int (*bl_group_finish_fn)(void *ctx, bl_greq *group);

void bl_group_init(bl_group *g);
void bl_group_destroy(bl_group *g);

/*
 * Filling, for a backend whose commit costs a network round trip (etcd).
 * With steady writers a group commits while the next one queues, so each
 * group holds about half of them and groups alternate.  With filling on, a
 * new leader first waits -- up to max_us, and never more than a quarter of
 * the last group's run -- until as many requests are queued as were in
 * flight last time (the last group plus those that queued while it ran),
 * so the writers that just got their outcomes join this group instead of
 * forming the next.  A lone writer never waits: one request was in flight
 * and one is queued.  0 (the default) turns it off.  Call before use.
 */
void bl_group_fill(bl_group *g, unsigned max_us);

/*
 * Holding, for a backend whose `finish` is a flush (LMDB's write-ahead log
 * in FULL durability).  A new leader does not take the queue while an
 * earlier group's `finish` is still running: everything that arrives during
 * a flush then joins one group (one frame, one flush) instead of forming
 * many small groups that would each wait for a flush of their own.  The
 * group's deciding and writing (microseconds) no longer overlap the flush
 * (milliseconds); a lone writer never waits (no flush runs when it comes
 * back).  And the first leader after a flush waits, three flushes and
 * 800 us at most, for the writers that flush released to come back with
 * their next events, so that the groups do not alternate between nearly
 * all the writers and one; the writer whose arrival ends that wait (or
 * that arrives after its deadline) takes the group in the sleeping
 * leader's place (group.c, rejoin).  Call before use.
 */
void bl_group_hold(bl_group *g, int on);

/*
 * Bounding, for a backend whose group goes out as one frame of a log that
 * holds at most so many bytes (LMDB's write-ahead log: a frame must fit in
 * half of it).  A leader takes requests from the queue only while their
 * estimated bytes (bl_event_bytes, from above) stay within `bytes`, and
 * leaves the rest queued for the next group; a request alone over it is
 * still taken alone (a batch must go in one frame; the backend then says
 * whether it fits).  0 (the default): the whole queue.  Call before use.
 */
void bl_group_budget(bl_group *g, uint64_t bytes);

/* An event's share of a frame, estimated from above: its record and its
 * new binding and session values (the origin is in the record and in the
 * session value), plus fixed headers. */
static inline uint64_t bl_event_bytes(const bl_event *ev)
{
    return 3 * (uint64_t)(ev->key_len + ev->sid_len) + 2 * (uint64_t)ev->origin_len +
           ev->reason_len + 256;
}

/* Queue n events and wait for their outcomes (see bl_backend_ops.commit).
 * BINDLOG_EPANIC at once if the group is sticky-failed. */
int bl_group_submit(bl_group *g, bindlog *h, const bl_event *ev, size_t n, bindlog_result *out,
                    size_t *err_index, bl_group_run_fn run, bl_group_finish_fn finish, void *ctx);

/*
 * Queue n independent events at once, one request each, so that they share
 * a storage transaction without sharing its fate: each is applied or
 * refused alone.  codes[i] receives event i's outcome or error and out[i]
 * its result.  Returns 0 when every event was decided (refusals included),
 * or the storage error that failed them (then every code is an error and
 * nothing of theirs was committed, unless the group had already committed).
 * msgs: NULL, or n x BL_GREQ_MSG_MAX bytes: each refused event's detail
 * (the words of its last-error message, without the call's name).
 */
int bl_group_submit_each(bl_group *g, bindlog *h, const bl_event *ev, size_t n,
                         bindlog_result *out, int *codes, char *msgs, bl_group_run_fn run,
                         bl_group_finish_fn finish, void *ctx);

/* 1 for the errors the state machine decides for one event alone
 * (EINVAL, ENOTFOUND, EEXIST, ECONFLICT), 0 for the storage's. */
static inline int bl_group_refusal(int rc)
{
    return rc == BINDLOG_EINVAL || rc == BINDLOG_ENOTFOUND || rc == BINDLOG_EEXIST ||
           rc == BINDLOG_ECONFLICT;
}

/* Every request of the group fails with rc; the detail is the leader's
 * current last-error message, when one was set while running the group. */
void bl_group_fail(bl_greq *group, int rc);

/* Mark the group sticky-failed: a write failed so that the disk's state
 * is unknown.  `fmt` says what failed; the first cause is kept for every
 * later call's message (bl_group_panic_again).  Returns BINDLOG_EPANIC,
 * with the calling thread's message set. */
int bl_group_panic(bl_group *g, const char *fmt, ...) BL_PRINTF(2, 3);
/* BINDLOG_EPANIC for a call after the panic, its message naming the first
 * cause. */
int bl_group_panic_again(bl_group *g);
static inline int bl_group_panicked(bl_group *g) { return atomic_load(&g->panic); }

/* Count one committed transaction (statistics). */
void bl_group_committed(bl_group *g);
/* Copy the statistics into out->commits and out->grouped_events. */
void bl_group_stats(bl_group *g, bindlog_stats *out);

#endif /* BL_GROUP_H */
