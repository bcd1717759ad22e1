/*
 * test_etcd_faults.c -- an etcd commit whose outcome the client does not
 * learn, against a real etcd (the shared 1-member fixture cluster).
 *
 * The etcd backend commits a group in one Txn.  When the reply is lost
 * (the connection drops after the request left), the Txn may or may not
 * have applied, and the backend must find out before it answers
 * (backend_etcd.c, resolve): by reading meta "head" and the records at
 * its LSNs (ours: APPLIED), or, when nothing moved, by fencing the Txn
 * off with a write to "head" (then it can never apply: an error, and
 * nothing happened).  The failpoints, compiled into this test's copy of
 * the backend (bindlog_etcd_faults):
 *   - etcd.commit.reply_lost: the Txn applied and its reply is lost;
 *   - etcd.commit.unsent: the Txn is lost before etcd sees it.
 * Each case checks what the caller was told against what the store holds,
 * and the store checks at the end.  Without etcd the cases skip (unless
 * BINDLOG_REQUIRE_ETCD=1).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bindlog.h"
#include "core/failpoint.h"
#include "core/module.h"
#include "etcd/etcd_store.h"
#include "testutil.h"

typedef struct fx {
    char *loc;
    bindlog *s;
} fx;

static void failpoint(const char *spec)
{
    if (spec == NULL)
        unsetenv("BINDLOG_FAILPOINT");
    else
        setenv("BINDLOG_FAILPOINT", spec, 1);
    bl_failpoint_reset();
}

static int setup(void **state)
{
    if (!tu_backend_is_etcd()) {
        printf("[  SKIPPED ] needs BINDLOG_TEST_BACKEND=etcd and its endpoints (ctest sets them)\n");
        return 0;
    }
    if (tu_backend_skip())
        return 0;
    fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->loc = tu_store_location("etcdfault");
    assert_int_equal(bindlog_open(&f->s, f->loc, NULL), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    failpoint(NULL);
    if (f == NULL)
        return 0;
    bindlog_close(f->s);
    tu_store_remove(f->loc);
    free(f->loc);
    free(f);
    return 0;
}

static void assert_bound(bindlog *s, const char *key, const char *sid)
{
    bindlog_binding b;
    int rc = bindlog_get(s, key, &b);
    if (sid == NULL) {
        assert_int_equal(rc, BINDLOG_ENOTFOUND);
        return;
    }
    assert_int_equal(rc, 0);
    assert_string_equal(b.session_id, sid);
}

static uint64_t head_of(bindlog *s)
{
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    return st.head_lsn;
}

static void assert_checks(bindlog *s)
{
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    if (rep.problems != 0)
        fail_msg("check: %llu problems, first: %s", (unsigned long long)rep.problems,
                 rep.message);
}

/* The Txn applied, its reply was lost: the backend finds its own records
 * at its LSNs and reports APPLIED, once, with those LSNs. */
static void etcd_faults__a_lost_reply_of_an_applied_txn_is_applied(void **state)
{
    fx *f = *state;
    bindlog_result r;
    if (f == NULL)
        skip();
    assert_int_equal(bindlog_bind(f->s, "k1", "s1", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    failpoint("etcd.commit.reply_lost:eio");
    assert_int_equal(bindlog_bind(f->s, "k2", "s2", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bl_failpoint_hits("etcd.commit.reply_lost"), 1);
    assert_int_equal(r.lsn, 2);
    assert_int_equal(head_of(f->s), 2);
    assert_bound(f->s, "k2", "s2");

    /* a batch: all of it, at consecutive LSNs */
    bindlog_event ev[3];
    bindlog_result res[3];
    size_t at = 0;
    static const char *const keys[3] = {"b1", "b2", "b3"}, *const sids[3] = {"t1", "t2", "t3"};
    for (int i = 0; i < 3; i++) {
        memset(&ev[i], 0, sizeof ev[i]);
        ev[i].type = BINDLOG_EVENT_BIND;
        ev[i].key = keys[i];
        ev[i].session_id = sids[i];
    }
    failpoint("etcd.commit.reply_lost:eio");
    assert_int_equal(bindlog_apply_batch(f->s, ev, 3, res, &at), 0);
    assert_int_equal(bl_failpoint_hits("etcd.commit.reply_lost"), 1);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(res[i].outcome, BINDLOG_APPLIED);
        assert_int_equal(res[i].lsn, 3 + (uint64_t)i);
        assert_bound(f->s, keys[i], sids[i]);
    }
    assert_int_equal(head_of(f->s), 5);
    failpoint(NULL);
    assert_checks(f->s);
}

/* The Txn never reached etcd: the backend fences it off (it can never
 * apply now), reports BINDLOG_EIO, and nothing happened; the same event
 * then applies at the LSN the lost one would have taken. */
static void etcd_faults__an_unsent_txn_is_an_error_and_nothing_happened(void **state)
{
    fx *f = *state;
    bindlog_result r;
    if (f == NULL)
        skip();
    assert_int_equal(bindlog_bind(f->s, "k1", "s1", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    failpoint("etcd.commit.unsent:eio");
    assert_int_equal(bindlog_bind(f->s, "k2", "s2", NULL, NULL, NULL, 0, &r), BINDLOG_EIO);
    assert_int_equal(bl_failpoint_hits("etcd.commit.unsent"), 1);
    assert_int_equal(head_of(f->s), 1);
    assert_bound(f->s, "k2", NULL);
    failpoint(NULL);
    assert_int_equal(bindlog_bind(f->s, "k2", "s2", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(r.lsn, 2);
    assert_bound(f->s, "k2", "s2");
    assert_checks(f->s);
}

int main(void)
{
    /* opens of etcd:// locations use this test's copy of the backend,
     * whose failpoints are compiled in, not the module's */
    bl_module_builtin("etcd", &bl_etcd_ops);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(etcd_faults__a_lost_reply_of_an_applied_txn_is_applied,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            etcd_faults__an_unsent_txn_is_an_error_and_nothing_happened, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
