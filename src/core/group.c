/*
 * group.c -- group commit, independent of the storage backend (group.h).
 */
#define _GNU_SOURCE
#include "core/group.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "platform/platform.h"

void bl_group_init(bl_group *g)
{
    memset(g, 0, sizeof(*g));
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->fill_cv, NULL);
    pthread_cond_init(&g->lead_cv, NULL);
    pthread_mutex_init(&g->done_mu, NULL);
    pthread_cond_init(&g->done_cv[0], NULL);
    pthread_cond_init(&g->done_cv[1], NULL);
    atomic_init(&g->done_word[0], 0);
    atomic_init(&g->done_word[1], 0);
    /* the portable layer's word wait polls (naps of up to 2 ms): a
     * blocked writer would wait that long for its outcome */
    g->native_wait = strcmp(bl_plat_name(), "posix") != 0;
    atomic_init(&g->panic, 0);
    atomic_init(&g->panic_why, NULL);
    atomic_init(&g->panic_code, 0);
}

void bl_group_destroy(bl_group *g)
{
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->fill_cv);
    pthread_cond_destroy(&g->lead_cv);
    pthread_mutex_destroy(&g->done_mu);
    pthread_cond_destroy(&g->done_cv[0]);
    pthread_cond_destroy(&g->done_cv[1]);
    free(atomic_load(&g->panic_why));
}

void bl_group_fill(bl_group *g, unsigned max_us) { g->fill_us = max_us; }

void bl_group_hold(bl_group *g, int on) { g->hold = on; }

void bl_group_budget(bl_group *g, uint64_t bytes) { g->budget = bytes; }

/* The requests at the head of the queue whose bytes fit the budget (at
 * least one): the last of them, and their count in *n (g->mu held). */
static bl_greq *take_within_budget(bl_group *g, size_t *n)
{
    bl_greq *last = g->head;
    uint64_t bytes = 0;
    size_t k = 0;
    for (bl_greq *r = g->head; r != NULL; r = r->next) {
        uint64_t b = 0;
        for (size_t i = 0; i < r->n; i++)
            b += bl_event_bytes(&r->ev[i]);
        if (k > 0 && bytes + b > g->budget)
            break;
        bytes += b;
        last = r;
        k++;
    }
    *n = k;
    return last;
}

/* The leader's wait for the group to fill (g->mu held; see bl_group_fill). */
static void fill(bl_group *g)
{
    int64_t wait_ns = (int64_t)g->fill_us * 1000;
    if (wait_ns > g->last_run_ns / 4)
        wait_ns = g->last_run_ns / 4;
    if (wait_ns <= 0)
        return;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until); /* pthread_cond_timedwait's clock */
    int64_t ns = until.tv_nsec + wait_ns;
    until.tv_sec += (time_t)(ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    g->filling = 1;
    while (g->queued < g->expect)
        if (pthread_cond_timedwait(&g->fill_cv, &g->mu, &until) == ETIMEDOUT)
            break;
    g->filling = 0;
}

/* The longest a leader waits for the writers of the group just flushed. */
#define REJOIN_MAX_NS 800000

/* Was rejoin number `mine` taken over (g->mu held)?  Its sleeper may
 * run only after later rejoins were taken too: a later rejoin can only
 * begin once this one has ended, and a sleeper still waiting did not end
 * it. */
static int rejoin_taken(const bl_group *g, uint64_t mine) { return g->taken_seq >= mine; }

/*
 * A leader right after a flush (bl_group_hold): the writers of the group
 * that flush completed come straight back with their next events (a busy
 * gateway's do).  Taking the queue at once would leave them to form the
 * next group alone, and the groups would alternate between nearly all the
 * writers and one.  So it waits until the queue holds as many as were in
 * flight when the flush ended, for three flushes at most and never more
 * than REJOIN_MAX_NS: a writer that does not come back costs the others
 * that much latency, once (g->mu held).  Measured: 16 FULL writers formed
 * groups of 7.7 and ran 27k events/s; with a rejoin, 13-14 and 33k.
 *
 * The thread that ends the wait leads.  A sleeping leader, woken by a
 * signal or its timer, must then get a CPU that the writers coming back
 * keep busy: at 64 writers on two vCPUs it ran 95 us after its deadline,
 * a quarter of every group's cycle.  So the writer whose queueing
 * completes the rejoin, or that queues after its deadline, takes the
 * group itself (take_over) while it runs anyway; the sleeper, woken,
 * finds its rejoin taken and waits for its request like any other writer.
 * Only a deadline that passes with nobody queueing is the sleeper's to
 * act on.  The deadline is longer because, ended on time, it can be: 64
 * writers then formed groups of 56 instead of 44 and ran 132-138k
 * events/s instead of 112-119k (half a flush, with the late wake-up), and
 * with three flushes instead of two 118-143k (mean 127k) instead of
 * 100-128k (118k) in seven interleaved pairs; 16 writers kept their
 * rate, their p99 latency rose from ~390 to ~470 us.
 * Returns 1 if the rejoin was taken over.
 */
static int rejoin(bl_group *g)
{
    if (g->queued >= g->rejoin)
        return 0;
    struct timespec until;
    int64_t left = g->rejoin_until - bl_mono_ns();
    if (left <= 0)
        return 0;
    clock_gettime(CLOCK_REALTIME, &until); /* pthread_cond_timedwait's clock */
    int64_t ns = until.tv_nsec + left;
    until.tv_sec += (time_t)(ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    uint64_t mine = ++g->rejoin_seq;
    g->rejoining = 1;
    while (g->queued < g->rejoin && !rejoin_taken(g, mine))
        if (pthread_cond_timedwait(&g->lead_cv, &g->mu, &until) == ETIMEDOUT)
            break;
    if (rejoin_taken(g, mine))
        return 1; /* the group is led by the writer that took it */
    g->rejoining = 0;
    return 0;
}

/* Does the rejoin a leader sleeps in end with this queueing (g->mu held)? */
static int rejoin_over(const bl_group *g)
{
    return g->rejoining && (g->queued >= g->rejoin || bl_mono_ns() >= g->rejoin_until);
}

void bl_group_fail(bl_greq *group, int rc)
{
    const char *detail = bl_err_isset() ? bl_err_get() : "";
    for (bl_greq *r = group; r != NULL; r = r->next) {
        snprintf(r->msg, sizeof r->msg, "%s", detail);
        r->rc = rc;
        r->err_index = 0;
        for (size_t i = 0; i < r->n; i++)
            r->outcomes[i] = rc;
    }
}

int bl_group_panic(bl_group *g, const char *fmt, ...)
{
    char why[320];
    va_list ap;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): va_start is the line above */
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    /* the first cause stays: set once, read without a lock */
    char *mine = strdup(why), *none = NULL;
    if (mine != NULL && !atomic_compare_exchange_strong(&g->panic_why, &none, mine))
        free(mine);
    atomic_store(&g->panic, 1);
    return bl_err_set(BINDLOG_EPANIC,
                      "%s: the disk's state is unknown; close every handle of the store and "
                      "reopen it",
                      why);
}

int bl_group_panic_again(bl_group *g)
{
    const char *why = atomic_load(&g->panic_why);
    return bl_err_set(BINDLOG_EPANIC,
                      "an earlier fatal I/O error (%s) made the store's handles in this "
                      "process unusable: close every one and reopen",
                      why != NULL ? why : "unknown");
}

void bl_group_committed(bl_group *g)
{
    pthread_mutex_lock(&g->mu);
    g->commits++;
    pthread_mutex_unlock(&g->mu);
}

void bl_group_stats(bl_group *g, bindlog_stats *out)
{
    pthread_mutex_lock(&g->mu);
    out->commits = g->commits;
    out->grouped_events = g->grouped_events;
    pthread_mutex_unlock(&g->mu);
}

/* ---- sleeping and waking ------------------------------------------------------ */

/*
 * Who sleeps and who wakes whom.  Every cost here is paid per event by
 * blocking callers, so the rule is: a writer that does not lead sleeps
 * once and is woken once, together with the rest of its group; nobody is
 * woken to find there is nothing to do, and nobody woken has to queue
 * again for a lock to learn that it is done.
 *
 *   - The requests queued between two takes of the queue form one epoch,
 *     and (but for a budget's leftovers, below) one group.  A writer that
 *     does not lead sleeps on its epoch's completion word (done_word),
 *     with no lock held.  The group's leader, once the group is complete
 *     (flushed, in FULL), marks each request done, bumps the word and
 *     wakes every sleeper on it in one call: each finds its request done
 *     and returns.  Waking them one by one on a condition variable of
 *     their own cost the leader a preemption per writer (each woken
 *     writer took its CPU), and the writers a second sleep each on the
 *     mutex the leader still held: about three context switches an event
 *     at 64 writers, instead of one.
 *   - The thread of the queue's head request takes it: a writer that
 *     queues into an empty queue leads at once if no group runs (and,
 *     holding, none is being flushed), else waits on lead_cv until then.
 *     The leader that ends a group signals lead_cv; holding, with the
 *     group still to flush, the flush's end does instead (the queue could
 *     not be taken before anyway: one sleep, not two).
 *   - Holding, the head's thread then sleeps once more, in the rejoin,
 *     unless a queueing writer ends that wait first and takes the group
 *     in its place (rejoin, take_over): the head's request is then in
 *     the group taken, and its thread sleeps on the group's word like the
 *     rest, after one wake-up from lead_cv to learn that.
 *   - A budget can leave requests queued after a take.  They move to the
 *     next epoch; their threads, asleep on the old word, wake when the
 *     group taken completes, find their request not done, and look again
 *     under the queue lock: the head's thread then leads.  That costs one
 *     spurious wake-up each, only for groups of more than a quarter of
 *     the log.
 */

/* Sleep while done_word[p] == seen (without g->mu). */
static void word_wait(bl_group *g, unsigned p, uint32_t seen)
{
    if (g->native_wait) {
        bl_plat_wait_local(&g->done_word[p], seen, -1);
        return;
    }
    pthread_mutex_lock(&g->done_mu);
    while (atomic_load(&g->done_word[p]) == seen)
        pthread_cond_wait(&g->done_cv[p], &g->done_mu);
    pthread_mutex_unlock(&g->done_mu);
}

/* Wake every thread asleep on done_word[p] (bumped before, without g->mu). */
static void word_wake(bl_group *g, unsigned p)
{
    if (g->native_wait) {
        bl_plat_wake_all_local(&g->done_word[p]);
        return;
    }
    pthread_mutex_lock(&g->done_mu); /* a sleeper is either before its check or asleep */
    pthread_mutex_unlock(&g->done_mu);
    pthread_cond_broadcast(&g->done_cv[p]);
}

/* A finished group: statistics, every request done, its epoch's word
 * bumped (g->mu held); returns the word to wake (word_wake, after g->mu
 * is let go).  Each request's next is read before it is marked done: its
 * thread may return as soon as it is, taking the request with it. */
static unsigned mark_done(bl_group *g, bl_greq *group)
{
    unsigned p = group->par;
    for (bl_greq *r = group, *next; r != NULL; r = next) {
        next = r->next;
        g->grouped_events += r->n;
        atomic_store_explicit(&r->done, 1, memory_order_release);
    }
    atomic_fetch_add(&g->done_word[p], 1);
    return p;
}

/* Is a group running, or (holding) one being flushed?  Then the queue's
 * head waits (g->mu held). */
static int busy(const bl_group *g) { return g->leader || (g->hold && g->finishing > 0); }

/* A group ended (g->mu held): the head's thread may take the queue. */
static void next_leader(bl_group *g)
{
    if (g->head != NULL && !busy(g))
        pthread_cond_signal(&g->lead_cv);
}

static void run_taken(bl_group *g, bl_group_run_fn run, bl_group_finish_fn finish, void *ctx);

/*
 * Lead one group: take the queue (after the waits holding and filling ask
 * for), run it, let go of leadership, finish it, and wake its callers.
 * Entered with g->mu held, no leader and nothing being flushed while
 * holding; returns with g->mu released.  The queue is FIFO and a leader
 * takes all of it (or what fits the budget), so requests queued together
 * finish together, or in order.
 */
static void lead(bl_group *g, bl_group_run_fn run, bl_group_finish_fn finish, void *ctx)
{
    g->leader = 1;
    if (g->hold && rejoin(g)) {
        pthread_mutex_unlock(&g->mu); /* taken over: its request is in that group */
        return;
    }
    if (g->fill_us != 0 && g->queued < g->expect)
        fill(g);
    run_taken(g, run, finish, ctx);
}

/* A queueing writer ends a rejoin (rejoin_over): it leads the group in
 * the sleeping leader's place, which it wakes to find that out (g->mu
 * held, returns with it released). */
static void take_over(bl_group *g, bl_group_run_fn run, bl_group_finish_fn finish, void *ctx)
{
    g->taken_seq = g->rejoin_seq;
    g->rejoining = 0;
    /* the only thread blocked on lead_cv: the queue's head waits there
     * only while a group runs or is flushed, and none does */
    pthread_cond_broadcast(&g->lead_cv);
    run_taken(g, run, finish, ctx);
}

/* Take the queue and run it (g->mu held, g->leader set; returns with
 * g->mu released). */
static void run_taken(bl_group *g, bl_group_run_fn run, bl_group_finish_fn finish, void *ctx)
{
    bl_greq *group = g->head;
    size_t size = g->queued;
    g->rejoin_until = 0; /* the flush's writers are in this group or late */
    g->epoch++;          /* whoever queues from now on is in the next group */
    if (g->budget != 0) {
        /* what does not fit stays queued, for the next leader, in the
         * next epoch */
        size_t taken;
        bl_greq *last_taken = take_within_budget(g, &taken);
        g->head = last_taken->next;
        last_taken->next = NULL;
        if (g->head == NULL)
            g->tail = NULL;
        for (bl_greq *r = g->head; r != NULL; r = r->next)
            r->par = g->epoch & 1;
        size = taken;
        g->queued -= taken;
    } else {
        g->head = g->tail = NULL;
        g->queued = 0;
    }
    pthread_mutex_unlock(&g->mu);

    int64_t t0 = g->fill_us != 0 ? bl_mono_ns() : 0;
    int pending = run(ctx, group) && finish != NULL;

    pthread_mutex_lock(&g->mu);
    if (g->fill_us != 0) {
        g->last_run_ns = bl_mono_ns() - t0;
        g->expect = size + g->queued; /* in flight while it ran */
    }
    g->leader = 0;
    if (pending) {
        /* Committed, but callers must wait for `finish`; the next group
         * need not (unless holding): it builds meanwhile. */
        g->finishing++;
        next_leader(g);
        pthread_mutex_unlock(&g->mu);
        int64_t t1 = bl_mono_ns();
        int rc = finish(ctx, group);
        if (rc != 0)
            bl_group_fail(group, rc);
        pthread_mutex_lock(&g->mu);
        if (--g->finishing == 0 && g->hold) {
            /* the group's writers will be back at once: the next leader
             * waits a little for them (rejoin) */
            int64_t now = bl_mono_ns();
            g->finish_ns = now - t1;
            g->rejoin = g->queued + size;
            int64_t wait = 3 * g->finish_ns;
            g->rejoin_until = now + (wait < REJOIN_MAX_NS ? wait : REJOIN_MAX_NS);
        }
    }
    next_leader(g);
    unsigned p = mark_done(g, group);
    pthread_mutex_unlock(&g->mu);
    word_wake(g, p);
}

/* Is the queue's head one of the caller's requests (g->mu held)? */
static int at_head(const bl_group *g, const void *owner)
{
    return g->head != NULL && g->head->owner == owner;
}

/*
 * Queue the requests first..last (linked through ->next, g->mu held) and
 * return once `last` is done, leading groups meanwhile whenever the
 * queue's head is ours.  Returns with g->mu released.
 */
static void queue_and_wait(bl_group *g, bl_greq *first, bl_greq *last, size_t count,
                           bl_group_run_fn run, bl_group_finish_fn finish, void *ctx)
{
    for (bl_greq *r = first;; r = r->next) {
        r->owner = last;
        r->par = g->epoch & 1;
        if (r == last)
            break;
    }
    if (g->tail)
        g->tail->next = first;
    else
        g->head = first;
    g->tail = last;
    g->queued += count;
    if (g->filling && g->queued >= g->expect)
        pthread_cond_signal(&g->fill_cv);
    if (rejoin_over(g)) {
        take_over(g, run, finish, ctx);
        if (atomic_load_explicit(&last->done, memory_order_acquire))
            return;
        pthread_mutex_lock(&g->mu); /* a budget left it queued */
    }

    for (;;) {
        if (atomic_load_explicit(&last->done, memory_order_acquire))
            break;
        if (at_head(g, last)) {
            while (busy(g))
                pthread_cond_wait(&g->lead_cv, &g->mu);
            lead(g, run, finish, ctx);
        } else {
            /* the word is read under g->mu: a completion after this
             * changes it, and the wait returns at once */
            unsigned p = last->par;
            uint32_t seen = atomic_load(&g->done_word[p]);
            pthread_mutex_unlock(&g->mu);
            word_wait(g, p, seen);
        }
        if (atomic_load_explicit(&last->done, memory_order_acquire))
            return;
        pthread_mutex_lock(&g->mu); /* not ours yet: look again */
    }
    pthread_mutex_unlock(&g->mu);
}

int bl_group_submit(bl_group *g, bindlog *h, const bl_event *ev, size_t n, bindlog_result *out,
                    size_t *err_index, bl_group_run_fn run, bl_group_finish_fn finish, void *ctx)
{
    int one_outcome;
    bl_greq req = {0};

    req.h = h;
    req.ev = ev;
    req.n = n;
    req.out = out;
    req.outcomes = n == 1 ? &one_outcome : malloc(n * sizeof(int));
    if (req.outcomes == NULL)
        return BINDLOG_ENOMEM;

    pthread_mutex_lock(&g->mu);
    if (atomic_load(&g->panic)) {
        pthread_mutex_unlock(&g->mu);
        if (n != 1)
            free(req.outcomes);
        return bl_group_panic_again(g);
    }
    queue_and_wait(g, &req, &req, 1, run, finish, ctx);

    if (err_index != NULL)
        *err_index = req.err_index;
    if (n != 1)
        free(req.outcomes);
    if (req.rc < 0 && req.msg[0] != '\0')
        bl_err_set(req.rc, "%s", req.msg); /* in the caller's thread */
    return req.rc;
}

int bl_group_submit_each(bl_group *g, bindlog *h, const bl_event *ev, size_t n,
                         bindlog_result *out, int *codes, char *msgs, bl_group_run_fn run,
                         bl_group_finish_fn finish, void *ctx)
{
    bl_greq *req;
    int rc = 0;

    if (n == 0)
        return 0;
    if ((req = calloc(n, sizeof(*req))) == NULL)
        return BINDLOG_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        req[i].next = i + 1 < n ? &req[i + 1] : NULL;
        req[i].h = h;
        req[i].ev = &ev[i];
        req[i].n = 1;
        req[i].out = &out[i];
        req[i].outcomes = &codes[i];
    }
    pthread_mutex_lock(&g->mu);
    if (atomic_load(&g->panic)) {
        pthread_mutex_unlock(&g->mu);
        free(req);
        return bl_group_panic_again(g);
    }
    queue_and_wait(g, &req[0], &req[n - 1], n, run, finish, ctx);
    /* A storage failure fails every request of the group alike; a refusal
     * of the state machine is one event's own.  Say which. */
    for (size_t i = 0; i < n; i++) {
        codes[i] = req[i].rc < 0 ? req[i].rc : req[i].outcomes[0];
        if (msgs != NULL)
            memcpy(msgs + i * BL_GREQ_MSG_MAX, req[i].msg, BL_GREQ_MSG_MAX);
        if (req[i].rc < 0 && !bl_group_refusal(req[i].rc) && rc == 0) {
            rc = req[i].rc;
            if (req[i].msg[0] != '\0')
                bl_err_set(rc, "%s", req[i].msg);
        }
    }
    free(req);
    return rc;
}
