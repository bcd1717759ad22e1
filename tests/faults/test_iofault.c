/*
 * test_iofault.c -- EIO and ENOSPC on write and on fsync, injected by the
 * LD_PRELOAD shim (shim.h) under LMDB.  The test re-execs itself with the
 * shim preloaded and arms it around single calls.
 *
 * What it pins down (docs/reliability.md, "I/O faults"):
 *   - a failed sync (EIO) or a failed write (EIO), anywhere in a commit,
 *     returns BINDLOG_EPANIC, and every later write on every handle of the
 *     store in this process returns BINDLOG_EPANIC until all are closed;
 *     reopened without the fault, the store checks and holds every event
 *     acknowledged before the fault;
 *   - ENOSPC on a write returns BINDLOG_ENOSPC without panicking, the store
 *     is unchanged, and the handle works again once the writes succeed
 *     ("space returns").
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bindlog.h"
#include "faultutil.h"
#include "shim.h"
#include "testutil.h"

static shim_track_fn shim_track;
static shim_fail_fn shim_fail;
static shim_ops_fn shim_ops;

static int need_shim(void **state)
{
    (void)state;
    shim_track = (shim_track_fn)fu_shim_sym("bl_shim_track");
    shim_fail = (shim_fail_fn)fu_shim_sym("bl_shim_fail");
    shim_ops = (shim_ops_fn)fu_shim_sym("bl_shim_ops");
    if (shim_track == NULL || shim_fail == NULL || shim_ops == NULL) {
        print_message("the shim is not preloaded: skipped\n");
        skip();
    }
    return 0;
}

typedef struct store {
    char *dir;
    bindlog *s;
    fu_ack acks[64];
    size_t n;
} store;

static int durability_of(const char *name)
{
    return strcmp(name, "normal") == 0 ? BINDLOG_DURABILITY_NORMAL
                                       : (strcmp(name, "none") == 0 ? BINDLOG_DURABILITY_NONE
                                                                    : BINDLOG_DURABILITY_FULL);
}

/* A tracked store with a few acknowledged events. */
static void store_open(store *st, int durability)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_result r;
    char key[32], sid[40];

    memset(st, 0, sizeof(*st));
    st->dir = tu_mkdtemp("iofault");
    shim_track(st->dir);
    o.durability = durability;
    assert_int_equal(bindlog_open(&st->s, st->dir, &o), 0);
    for (unsigned k = 0; k < 4; k++) {
        fu_key(key, k);
        snprintf(sid, sizeof(sid), "s%u-1", k);
        assert_int_equal(bindlog_bind(st->s, key, sid, NULL, NULL, "o", 1, &r), BINDLOG_APPLIED);
        st->acks[st->n] = (fu_ack){k, BINDLOG_EVENT_BIND, r.lsn, r.generation, {0}};
        snprintf(st->acks[st->n].session_id, sizeof(st->acks[0].session_id), "%s", sid);
        st->n++;
    }
}

/* One more event on key 0; acked if APPLIED.  Returns the call's rc. */
static int store_event(store *st, bindlog *s)
{
    static unsigned ctr = 100;
    char sid[40];
    bindlog_result r;
    snprintf(sid, sizeof(sid), "s0-%u", ++ctr);
    int rc = bindlog_new_session(s, "fault:0", sid, NULL, NULL, 0, &r);
    if (rc == BINDLOG_APPLIED && st->n < 64) {
        st->acks[st->n] = (fu_ack){0, BINDLOG_EVENT_NEW_SESSION, r.lsn, r.generation, {0}};
        snprintf(st->acks[st->n].session_id, sizeof(st->acks[0].session_id), "%s", sid);
        st->n++;
    }
    return rc;
}

/* Close, reopen without faults and verify; returns the head LSN. */
static uint64_t store_close_verify(store *st, int durability)
{
    char scratch[4096];
    fu_verdict v;

    shim_fail(SHIM_WRITE, 0, 0, 0);
    shim_fail(SHIM_SYNC, 0, 0, 0);
    bindlog_close(st->s);
    shim_track(NULL);
    snprintf(scratch, sizeof(scratch), "%s-replica", st->dir);
    if (fu_verify(st->dir, scratch, st->acks, st->n, durability, &v))
        fail_msg("after reopen: open %d lost %llu mismatched %llu: %s", v.open_rc,
                 (unsigned long long)v.lost, (unsigned long long)v.mismatched, v.msg);
    tu_rmtree(st->dir);
    free(st->dir);
    return v.head_lsn;
}

/* Fail the nth write or sync of one commit with EIO, for every n the commit
 * reaches: EPANIC, sticky on this and a second handle. */
static void eio_sweep(int what, const char *mode)
{
    int durability = durability_of(mode);
    for (long nth = 1;; nth++) {
        store st;
        bindlog *s2;
        store_open(&st, durability);
        assert_int_equal(bindlog_open(&s2, st.dir, NULL), 0);
        size_t acked = st.n;
        long before = shim_ops(what);
        shim_fail(what, nth, EIO, 1);
        int rc = store_event(&st, st.s);
        long reached = shim_ops(what) - before;
        shim_fail(what, 0, 0, 0);
        if (rc == BINDLOG_APPLIED) {
            /* the commit did fewer than nth such operations: sweep done */
            assert_true(reached < nth);
            bindlog_close(s2);
            store_close_verify(&st, durability);
            print_message("  %s %s: %ld operations per commit, each failure -> EPANIC\n", mode,
                          what == SHIM_WRITE ? "write" : "sync", nth - 1);
            assert_true(nth > 1 || durability == BINDLOG_DURABILITY_NONE || what == SHIM_WRITE);
            break;
        }
        if (rc != BINDLOG_EPANIC)
            fail_msg("%s: EIO on %s %ld of a commit returned %d (%s), not BINDLOG_EPANIC", mode,
                     what == SHIM_WRITE ? "write" : "sync", nth, rc, bindlog_strerror(rc));
        /* sticky: for every later write, on every handle */
        assert_int_equal(store_event(&st, st.s), BINDLOG_EPANIC);
        assert_int_equal(store_event(&st, s2), BINDLOG_EPANIC);
        assert_int_equal(bindlog_unbind(s2, "fault:1", NULL, NULL), BINDLOG_EPANIC);
        bindlog_close(s2);
        uint64_t head = store_close_verify(&st, durability);
        print_message("  %s: EIO on %s %ld -> EPANIC; reopened: head %llu, acked %zu, the failed "
                      "event %s\n",
                      mode, what == SHIM_WRITE ? "write" : "sync", nth, (unsigned long long)head,
                      acked, head > acked ? "is there" : "is not there");
        assert_true(nth < 64);
    }
}

static void iofault__fsync_eio_panics_sticky(void **state)
{
    (void)state;
    eio_sweep(SHIM_SYNC, "full");
    eio_sweep(SHIM_SYNC, "normal");
}

static void iofault__write_eio_panics_sticky(void **state)
{
    (void)state;
    eio_sweep(SHIM_WRITE, "full");
    eio_sweep(SHIM_WRITE, "normal");
    eio_sweep(SHIM_WRITE, "none");
}

/* The disk is full for a while: every write fails with ENOSPC from the nth
 * write of a commit on, for three calls; then space returns. */
static void enospc_case(int what, long nth, const char *mode)
{
    int durability = durability_of(mode);
    store st;
    unsigned char d1[BINDLOG_DIGEST_SIZE], d2[BINDLOG_DIGEST_SIZE];
    uint64_t h1, h2;
    bindlog_binding b;

    store_open(&st, durability);
    assert_int_equal(bindlog_digest(st.s, d1, &h1), 0);
    shim_fail(what, nth, ENOSPC, -1);
    int rc1 = store_event(&st, st.s);
    int rc2 = store_event(&st, st.s);
    int rc3 = bindlog_invalidate(st.s, "fault:2", NULL, NULL);
    int rget = bindlog_get(st.s, "fault:3", &b);
    shim_fail(what, 0, 0, 0); /* space returns */
    int rc4 = store_event(&st, st.s);
    print_message("  %s: ENOSPC on every %s from the %ld-th: %s, %s, %s; read %s; after: %s\n",
                  mode, what == SHIM_WRITE ? "write" : "sync", nth, bindlog_code_name(rc1),
                  bindlog_code_name(rc2), bindlog_code_name(rc3), bindlog_code_name(rget),
                  bindlog_code_name(rc4));
    if (rc1 == BINDLOG_APPLIED) { /* the commit never reached the nth operation */
        store_close_verify(&st, durability);
        return;
    }
    assert_int_equal(rc1, BINDLOG_ENOSPC);
    assert_int_equal(rc2, BINDLOG_ENOSPC);
    assert_int_equal(rc3, BINDLOG_ENOSPC);
    assert_int_equal(rget, 0);
    assert_int_equal(bindlog_digest(st.s, d2, &h2), 0);
    assert_int_equal(rc4, BINDLOG_APPLIED);
    assert_int_equal(h2, h1 + 1); /* nothing of the refused calls, then the new event */
    store_close_verify(&st, durability);
}

static void iofault__enospc_on_data_write_recovers(void **state)
{
    (void)state;
    enospc_case(SHIM_WRITE, 1, "full");
    enospc_case(SHIM_WRITE, 1, "normal");
    enospc_case(SHIM_WRITE, 1, "none");
}

/* Where the ENOSPC lands on the meta page write (the last write of a FULL
 * commit) LMDB marks its environment fatally failed, so the handle does not
 * come back: the call must still fail cleanly and the store reopen intact. */
static void iofault__enospc_sweep_every_write(void **state)
{
    (void)state;
    const char *modes[] = {"full", "normal"};
    for (size_t m = 0; m < 2; m++)
        for (long nth = 1; nth <= 8; nth++) {
            int durability = durability_of(modes[m]);
            store st;
            store_open(&st, durability);
            long before = shim_ops(SHIM_WRITE);
            shim_fail(SHIM_WRITE, nth, ENOSPC, 1);
            int rc1 = store_event(&st, st.s);
            long reached = shim_ops(SHIM_WRITE) - before;
            shim_fail(SHIM_WRITE, 0, 0, 0);
            int rc2 = store_event(&st, st.s);
            print_message("  %s: ENOSPC on write %ld of %ld: %s, then %s\n", modes[m], nth,
                          reached, bindlog_code_name(rc1), bindlog_code_name(rc2));
            assert_true(rc1 == BINDLOG_APPLIED || rc1 == BINDLOG_ENOSPC ||
                        rc1 == BINDLOG_EPANIC);
            assert_true(rc2 == BINDLOG_APPLIED || rc2 == BINDLOG_EPANIC);
            if (rc1 == BINDLOG_ENOSPC && rc2 != BINDLOG_APPLIED)
                print_message("    -> the handle did not come back after ENOSPC (LMDB "
                              "fatal error on a failed meta write)\n");
            store_close_verify(&st, durability);
            if (rc1 == BINDLOG_APPLIED)
                break;
        }
}

static void iofault__enospc_on_sync(void **state)
{
    (void)state;
    enospc_case(SHIM_SYNC, 1, "full");
    enospc_case(SHIM_SYNC, 1, "normal");
}

int main(int argc, char **argv)
{
    (void)argc;
    fu_preload_self(argv, BINDLOG_SHIM_PATH);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(iofault__fsync_eio_panics_sticky, need_shim),
        cmocka_unit_test_setup(iofault__write_eio_panics_sticky, need_shim),
        cmocka_unit_test_setup(iofault__enospc_on_data_write_recovers, need_shim),
        cmocka_unit_test_setup(iofault__enospc_sweep_every_write, need_shim),
        cmocka_unit_test_setup(iofault__enospc_on_sync, need_shim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
