/*
 * test_allocfail.c -- allocation-failure sweep.
 *
 * The test executable defines malloc/calloc/realloc/free itself (glibc lets
 * a program replace them; these forward to __libc_malloc and friends), so
 * every allocation of the process -- bindlog's, LMDB's, libc's strdup --
 * goes through a counter.  The counter is armed only around the operation
 * under test: for N = 1, 2, ... the N-th allocation fails (and the ones
 * after it succeed), until the operation makes fewer than N allocations.
 * Each run must return success or BINDLOG_ENOMEM (never crash, never
 * another code), and the store must reopen, hold every acknowledged event
 * and check afterwards (faultutil.h).  One exception, counted and printed:
 * when LMDB's mdb_txn_commit itself fails with ENOMEM, src/lmdb/commit.c treats
 * it like any failed commit and panics the environment (BINDLOG_EPANIC);
 * that is safe (a reopen finds the last commit) but stronger than needed,
 * since LMDB marks a commit that failed after writing the meta page fatal
 * by itself (docs/reliability.md, "Allocation failures").  Leaks: run it once under valgrind
 * (docs/reliability.md); a failed open or call must free what it took.
 *
 * Operations: bindlog_open (create and reopen), bindlog_bind, bindlog_split,
 * bindlog_apply_batch, and bindlog_replay / bindlog_import when the
 * library defines them (FU_HAVE_*).  Skipped under sanitizers, which own
 * malloc themselves.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bindlog.h"
#include "faultutil.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define AF_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define AF_SANITIZED 1
#endif
#endif

#ifndef AF_SANITIZED
static long af_fail_at;  /* 0: disarmed */
static long af_count;    /* allocations since armed */

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static int af_fail(void)
{
    if (__atomic_load_n(&af_fail_at, __ATOMIC_RELAXED) == 0)
        return 0;
    return __atomic_add_fetch(&af_count, 1, __ATOMIC_RELAXED) ==
           __atomic_load_n(&af_fail_at, __ATOMIC_RELAXED);
}

void *malloc(size_t n)
{
    if (af_fail()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    if (af_fail()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    if (af_fail()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_realloc(p, n);
}

void free(void *p) { __libc_free(p); }

static void arm(long n)
{
    __atomic_store_n(&af_count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&af_fail_at, n, __ATOMIC_RELAXED);
}

/* Disarm; returns the allocations made while armed. */
static long disarm(void)
{
    __atomic_store_n(&af_fail_at, 0, __ATOMIC_RELAXED);
    return __atomic_load_n(&af_count, __ATOMIC_RELAXED);
}

typedef struct fx {
    char *dir;
    char scratch[4200];
    char out[4200];
    fu_ack acks[64];
    size_t n;
    bindlog *s;
    int stream_fd;
} fx;

static void ack(fx *f, unsigned key, int type, const bindlog_result *r)
{
    f->acks[f->n] = (fu_ack){key, (uint32_t)type, r->lsn, r->generation, {0}};
    snprintf(f->acks[f->n].session_id, sizeof(f->acks[0].session_id), "%s", r->session_id);
    f->n++;
}

/* A store with keys 0..2 bound, open in f->s. */
static void fx_setup(fx *f)
{
    bindlog_result r;
    char key[32], sid[40];

    memset(f, 0, sizeof(*f));
    f->stream_fd = -1;
    f->dir = tu_mkdtemp("allocfail");
    snprintf(f->scratch, sizeof(f->scratch), "%s-replica", f->dir);
    snprintf(f->out, sizeof(f->out), "%s-out", f->dir);
    assert_int_equal(bindlog_open(&f->s, f->dir, NULL), 0);
    for (unsigned k = 0; k < 3; k++) {
        fu_key(key, k);
        snprintf(sid, sizeof(sid), "s%u-1", k);
        assert_int_equal(bindlog_bind(f->s, key, sid, NULL, NULL, "origin", 6, &r),
                         BINDLOG_APPLIED);
        ack(f, k, BINDLOG_EVENT_BIND, &r);
    }
}

/* Close, reopen unarmed, verify `dir` against f's acks, clean up. */
static void fx_teardown(fx *f, const char *what, long nth)
{
    fu_verdict v;
    bindlog_close(f->s);
    f->s = NULL;
    if (fu_verify(f->dir, f->scratch, f->acks, f->n, BINDLOG_DURABILITY_FULL, &v))
        fail_msg("%s, allocation %ld failed: store afterwards: open %d lost %llu: %s", what, nth,
                 v.open_rc, (unsigned long long)v.lost, v.msg);
    if (f->stream_fd >= 0)
        close(f->stream_fd);
    tu_rmtree(f->out);
    tu_rmtree(f->dir);
    free(f->dir);
}

enum { OP_OPEN_NEW, OP_REOPEN, OP_BIND, OP_SPLIT, OP_BATCH, OP_REPLAY, OP_IMPORT, OP_COUNT };
static const char *const op_names[] = {"open (create)", "open (existing)", "bind", "split",
                                       "apply_batch", "replay", "import"};

/* Run op once on f (armed by the caller).  Returns its rc; records acks. */
static int run_op(fx *f, int op)
{
    bindlog_result r[3];
    bindlog *h = NULL;
    int rc;

    switch (op) {
    case OP_OPEN_NEW:
        rc = bindlog_open(&h, f->out, NULL);
        bindlog_close(h);
        return rc;
    case OP_REOPEN:
        /* close first, so that the environment itself is opened again */
        bindlog_close(f->s);
        f->s = NULL;
        return bindlog_open(&f->s, f->dir, NULL);
    case OP_BIND:
        rc = bindlog_bind(f->s, "fault:9", "s9-1", NULL, "first", "o", 1, &r[0]);
        if (rc == BINDLOG_APPLIED)
            ack(f, 9, BINDLOG_EVENT_BIND, &r[0]);
        return rc;
    case OP_SPLIT:
        rc = bindlog_split(f->s, "fault:0", "s0-1", "s0-2", BINDLOG_ANY_GENERATION, NULL, 0, &r[0]);
        if (rc == BINDLOG_APPLIED)
            ack(f, 0, BINDLOG_EVENT_SPLIT, &r[0]);
        return rc;
    case OP_BATCH: {
        bindlog_event ev[3] = {
            {BINDLOG_EVENT_INVALIDATE, "fault:1", NULL, NULL, 0, "stop", NULL, 0},
            {BINDLOG_EVENT_SPLIT, "fault:1", "s1-2", "s1-1", BINDLOG_ANY_GENERATION, NULL, "x", 1},
            {BINDLOG_EVENT_UNBIND, "fault:2", NULL, NULL, 0, NULL, NULL, 0},
        };
        rc = bindlog_apply_batch(f->s, ev, 3, r, NULL);
        if (rc == 0) {
            ack(f, 1, BINDLOG_EVENT_INVALIDATE, &r[0]);
            ack(f, 1, BINDLOG_EVENT_SPLIT, &r[1]);
            ack(f, 2, BINDLOG_EVENT_UNBIND, &r[2]);
        }
        return rc;
    }
#ifdef FU_HAVE_bindlog_replay
    case OP_REPLAY: {
        unsigned char d[BINDLOG_DIGEST_SIZE];
        uint64_t last;
        rc = bindlog_replay(f->s, f->out, UINT64_MAX, INT64_MAX, d, &last, NULL, NULL);
        return rc;
    }
#endif
#if defined(FU_HAVE_bindlog_import)
    case OP_IMPORT: {
        uint64_t recs = 0, off = 0;
        rc = bindlog_open(&h, f->out, NULL);
        if (rc != 0)
            return rc;
        if (lseek(f->stream_fd, 0, SEEK_SET) != 0)
            abort();
        rc = bindlog_import(h, f->stream_fd, &recs, &off, NULL, NULL);
        bindlog_close(h);
        return rc;
    }
#endif
    default:
        return BINDLOG_EINVAL;
    }
}

/* Prepare what op needs beyond fx_setup (unarmed). */
static void prepare(fx *f, int op)
{
    if (op == OP_IMPORT) {
#ifdef FU_HAVE_bindlog_import
        char path[4300];
        uint64_t recs;
        snprintf(path, sizeof(path), "%s-stream", f->dir);
        f->stream_fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        assert_true(f->stream_fd >= 0);
        unlink(path);
        assert_int_equal(bindlog_export(f->s, 0, f->stream_fd, &recs, NULL, NULL), 0);
#endif
    }
}

/* After a run of op: the output store (replay, import, open-new) must be
 * usable or removable; check what is cheap to check. */
static void after(fx *f, int op, int rc)
{
    if ((op == OP_REPLAY || op == OP_IMPORT) && rc == 0) {
        bindlog *h;
        unsigned char d1[BINDLOG_DIGEST_SIZE], d2[BINDLOG_DIGEST_SIZE];
        assert_int_equal(bindlog_open(&h, f->out, NULL), 0);
        assert_int_equal(bindlog_digest(h, d1, NULL), 0);
        assert_int_equal(bindlog_digest(f->s, d2, NULL), 0);
        assert_memory_equal(d1, d2, sizeof(d1));
        bindlog_close(h);
    }
    if (op == OP_OPEN_NEW && rc != 0) {
        /* a failed create leaves nothing that stops a later one */
        bindlog *h;
        assert_int_equal(bindlog_open(&h, f->out, NULL), 0);
        bindlog_close(h);
    }
}

#endif /* !AF_SANITIZED */

static void allocfail__sweep(void **state)
{
    (void)state;
#ifdef AF_SANITIZED
    print_message("built with a sanitizer, which owns malloc: skipped\n");
    skip();
#else
    for (int op = 0; op < OP_COUNT; op++) {
#ifndef FU_HAVE_bindlog_replay
        if (op == OP_REPLAY)
            continue;
#endif
#ifndef FU_HAVE_bindlog_import
        if (op == OP_IMPORT)
            continue;
#endif
        long nth, enomem = 0, ok = 0, panics = 0;
        for (nth = 1; nth < 100000; nth++) {
            fx f;
            fx_setup(&f);
            prepare(&f, op);
            arm(nth);
            int rc = run_op(&f, op);
            long made = disarm();
            if (rc == BINDLOG_ENOMEM)
                enomem++;
            else if (rc == BINDLOG_EPANIC && op != OP_OPEN_NEW && op != OP_REOPEN)
                panics++; /* ENOMEM inside mdb_txn_commit: see the header comment */
            else if (rc >= 0)
                ok++;
            else
                fail_msg("%s with allocation %ld failing returned %d (%s): neither success nor "
                         "BINDLOG_ENOMEM",
                         op_names[op], nth, rc, bindlog_strerror(rc));
            after(&f, op, rc);
            fx_teardown(&f, op_names[op], nth);
            if (made < nth) {
                assert_true(rc >= 0); /* nothing failed: it must have worked */
                break;
            }
        }
        print_message("  %-16s %4ld allocations: %ld failures -> BINDLOG_ENOMEM, %ld -> "
                      "BINDLOG_EPANIC, %ld absorbed (the call still succeeded)\n",
                      op_names[op], nth - 1, enomem, panics, ok - 1);
    }
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(allocfail__sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
