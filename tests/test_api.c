/*
 * test_api.c -- contract tests of the public API (include/bindlog.h) against
 * SPEC.md: every event and every outcome, the generation rule, LSNs and
 * times, argument checks, read-only handles, batches, iterators, statistics,
 * sharing a store between handles and refusing what is not a store.
 *
 * Written from the specification only: nothing here knows how src/ does it.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bindlog.h"
#include "testutil.h"

/* ---- fixture ------------------------------------------------------------- */

/* The test clock: every call returns g_now, however often the library asks,
 * so a test states exactly which time each event sees. */
static int64_t g_now = 1000;

static int64_t test_clock(void *ctx)
{
    (void)ctx;
    return g_now;
}

typedef struct fx {
    char *tmp;      /* the test's own directory (removed at teardown) */
    char dir[1024]; /* the store directory: tmp/store */
    bindlog *s;
} fx;

static bindlog *open_store(const char *dir, int durability, int read_only, int *rc_out)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = durability;
    o.read_only = read_only;
    o.clock_ms = test_clock;
    bindlog *s = (bindlog *)(uintptr_t)1; /* must be reset to NULL on failure */
    int rc = bindlog_open(&s, dir, &o);
    if (rc_out != NULL)
        *rc_out = rc;
    if (rc != 0) {
        assert_null(s);
        return NULL;
    }
    assert_non_null(s);
    return s;
}

static bindlog *xopen(const char *dir, int read_only)
{
    int rc;
    bindlog *s = open_store(dir, BINDLOG_DURABILITY_NONE, read_only, &rc);
    if (s == NULL)
        fail_msg("bindlog_open(%s): %d %s", dir, rc, bindlog_strerror(rc));
    return s;
}

/* The fixture's store location: on LMDB a directory "store" (not made yet)
 * inside a fresh temporary directory; on etcd a fresh prefix. */
static void fx_location(fx *f)
{
    f->tmp = tu_store_location("api");
    if (tu_is_etcd_location(f->tmp))
        snprintf(f->dir, sizeof f->dir, "%s", f->tmp);
    else
        snprintf(f->dir, sizeof f->dir, "%s/store", f->tmp);
}

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    fx_location(f);
    g_now = 1000;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.clock_ms = test_clock;
    int rc = bindlog_open(&f->s, f->dir, &o);
    if (rc != 0) {
        print_error("bindlog_open(%s): %s\n", f->dir, bindlog_strerror(rc));
        tu_store_remove(f->tmp);
        free(f->tmp);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

/* A fixture without an open handle, for tests of bindlog_open itself. */
static int fx_setup_closed(void **state)
{
    fx *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    fx_location(f);
    g_now = 1000;
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    bindlog_close(f->s);
    tu_store_remove(f->tmp);
    free(f->tmp);
    free(f);
    return 0;
}

#define TEST(name)        cmocka_unit_test_setup_teardown(name, fx_setup, fx_teardown)
#define TEST_CLOSED(name) cmocka_unit_test_setup_teardown(name, fx_setup_closed, fx_teardown)

/* ---- helpers --------------------------------------------------------------- */

#define ASSERT_RES(rc_, res_, oc_, lsn_, gen_, sid_)                                               \
    do {                                                                                           \
        int rc__ = (rc_);                                                                          \
        assert_int_equal(rc__, (oc_));                                                             \
        assert_int_equal((res_).outcome, (oc_));                                                   \
        assert_int_equal((res_).lsn, (uint64_t)(lsn_));                                            \
        assert_int_equal((res_).generation, (uint64_t)(gen_));                                     \
        assert_string_equal((res_).session_id, (sid_));                                            \
    } while (0)

static bindlog_stats stats(bindlog *s)
{
    bindlog_stats st;
    memset(&st, 0, sizeof st);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    return st;
}

static uint64_t head_lsn(bindlog *s)
{
    return stats(s).head_lsn;
}

/* A log record copied out of the iterator (its pointers die with the next
 * call). */
typedef struct rec_copy {
    uint64_t lsn;
    int type;
    int64_t time_ms;
    uint64_t generation;
    char key[BINDLOG_KEY_MAX + 1];
    size_t key_len;
    char sid[BINDLOG_ID_MAX + 1];
    char other[BINDLOG_ID_MAX + 1];
    char reason[BINDLOG_REASON_MAX + 1];
    unsigned char origin[512];
    size_t origin_len;
    int origin_present;
} rec_copy;

static void copy_rec(const bindlog_record *r, rec_copy *c)
{
    memset(c, 0, sizeof *c);
    c->lsn = r->lsn;
    c->type = r->type;
    c->time_ms = r->time_ms;
    c->generation = r->generation;
    assert_non_null(r->key);
    assert_non_null(r->session_id);
    assert_non_null(r->other_id);
    assert_non_null(r->reason);
    assert_true(r->key_len <= BINDLOG_KEY_MAX);
    memcpy(c->key, r->key, r->key_len);
    c->key_len = r->key_len;
    assert_true(strlen(r->session_id) <= BINDLOG_ID_MAX);
    strcpy(c->sid, r->session_id);
    assert_true(strlen(r->other_id) <= BINDLOG_ID_MAX);
    strcpy(c->other, r->other_id);
    assert_true(strlen(r->reason) <= BINDLOG_REASON_MAX);
    strcpy(c->reason, r->reason);
    c->origin_len = r->origin_len;
    c->origin_present = r->origin_present;
    if (r->origin_len > 0) {
        assert_non_null(r->origin);
        memcpy(c->origin, r->origin,
               r->origin_len < sizeof c->origin ? r->origin_len : sizeof c->origin);
    }
}

/* The record at `lsn` (must exist). */
static void read_rec(bindlog *s, uint64_t lsn, rec_copy *c)
{
    bindlog_iter *it = NULL;
    bindlog_record r;
    assert_int_equal(bindlog_log_iter(s, lsn, lsn, &it), 0);
    assert_int_equal(bindlog_iter_next_record(it, &r), 1);
    assert_int_equal(r.lsn, lsn);
    copy_rec(&r, c);
    assert_int_equal(bindlog_iter_next_record(it, &r), 0);
    bindlog_iter_close(it);
}

static uint64_t count_records(bindlog *s, uint64_t from, uint64_t to)
{
    bindlog_iter *it = NULL;
    bindlog_record r;
    uint64_t n = 0;
    int rc;
    assert_int_equal(bindlog_log_iter(s, from, to, &it), 0);
    while ((rc = bindlog_iter_next_record(it, &r)) == 1)
        n++;
    assert_int_equal(rc, 0);
    bindlog_iter_close(it);
    return n;
}

static bindlog_session sess(bindlog *s, const char *id)
{
    bindlog_session ss;
    memset(&ss, 0, sizeof ss);
    int rc = bindlog_session_get(s, id, &ss, NULL, 0);
    if (rc != 0)
        fail_msg("session_get(%s): %d", id, rc);
    assert_string_equal(ss.session_id, id);
    return ss;
}

/* Session's origin must be exactly (o, n). */
static void assert_origin(bindlog *s, const char *id, const void *o, size_t n)
{
    bindlog_session ss;
    unsigned char *buf = malloc(n + 16);
    assert_non_null(buf);
    memset(buf, 0xAA, n + 16);
    assert_int_equal(bindlog_session_get(s, id, &ss, buf, n + 16), 0);
    assert_int_equal(ss.origin_len, n);
    if (n > 0)
        assert_memory_equal(buf, o, n);
    free(buf);
}

static void assert_no_session(bindlog *s, const char *id)
{
    bindlog_session ss;
    assert_int_equal(bindlog_session_get(s, id, &ss, NULL, 0), BINDLOG_ENOTFOUND);
}

/* Binding of key: sid "" means "routes nowhere" (ENOTFOUND). */
static bindlog_binding binding(bindlog *s, const char *key, const char *sid, uint64_t gen)
{
    bindlog_binding b;
    memset(&b, 0x55, sizeof b);
    int rc = bindlog_get(s, key, &b);
    assert_int_equal(rc, sid[0] ? 0 : BINDLOG_ENOTFOUND);
    assert_string_equal(b.session_id, sid);
    assert_int_equal(b.generation, gen);
    assert_string_equal(b.key, key);
    return b;
}

static char *repeat(char c, size_t n)
{
    char *p = malloc(n + 1);
    assert_non_null(p);
    memset(p, c, n);
    p[n] = '\0';
    return p;
}

/* ---- BIND -------------------------------------------------------------------- */

static void api__bind_first_contact_applied(void **state)
{
    fx *f = *state;
    bindlog_result r;
    g_now = 5000;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, "orig", 4, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    bindlog_binding b = binding(f->s, "k", "A", 1);
    assert_int_equal(b.lsn, 1);
    assert_int_equal(b.updated_ms, 5000);

    bindlog_session ss = sess(f->s, "A");
    assert_string_equal(ss.key, "k");
    assert_string_equal(ss.parent_id, "");
    assert_int_equal(ss.created_lsn, 1);
    assert_int_equal(ss.created_ms, 5000);
    assert_int_equal(ss.ended_lsn, 0);
    assert_int_equal(ss.ended_ms, 0);
    assert_string_equal(ss.end_reason, "");
    assert_origin(f->s, "A", "orig", 4);

    rec_copy c;
    read_rec(f->s, 1, &c);
    assert_int_equal(c.type, BINDLOG_EVENT_BIND);
    assert_int_equal(c.time_ms, 5000);
    assert_int_equal(c.generation, 1);
    assert_string_equal(c.key, "k");
    assert_int_equal(c.key_len, 1);
    assert_string_equal(c.sid, "A");
    assert_string_equal(c.other, "");
    assert_int_equal(c.origin_present, 1);
    assert_int_equal(c.origin_len, 4);
    assert_memory_equal(c.origin, "orig", 4);

    /* out may be NULL */
    assert_int_equal(bindlog_bind(f->s, "k2", "B", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    assert_origin(f->s, "B", NULL, 0);
    read_rec(f->s, 2, &c);
    assert_int_equal(c.origin_present, 0);
    assert_int_equal(c.origin_len, 0);
    assert_int_equal(head_lsn(f->s), 2);
}

static void api__bind_retry_already_even_with_mismatched_expect(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", "", NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1, "A");
    /* the retry's expect ("") no longer matches, but the bind is in */
    ASSERT_RES(bindlog_bind(f->s, "k", "A", "", NULL, NULL, 0, &r), r, BINDLOG_ALREADY, 0, 1, "A");
    ASSERT_RES(bindlog_bind(f->s, "k", "A", "X", "why", "o", 1, &r), r, BINDLOG_ALREADY, 0, 1, "A");
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, "o", 1, &r), r, BINDLOG_ALREADY, 0, 1, "A");
    assert_int_equal(head_lsn(f->s), 1);
    /* ALREADY wrote nothing: not even the origin */
    assert_origin(f->s, "A", NULL, 0);
}

static void api__bind_expect_mismatch_moved(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    ASSERT_RES(bindlog_bind(f->s, "k", "B", "X", NULL, NULL, 0, &r), r, BINDLOG_MOVED, 0, 1, "A");
    ASSERT_RES(bindlog_bind(f->s, "k", "B", "", NULL, NULL, 0, &r), r, BINDLOG_MOVED, 0, 1, "A");
    assert_int_equal(head_lsn(f->s), 1);
    assert_no_session(f->s, "B");
    assert_int_equal(sess(f->s, "A").ended_lsn, 0);
    ASSERT_RES(bindlog_bind(f->s, "k", "B", "A", NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 2, 2, "B");
    /* MOVED on a key never bound: its binding is "" */
    ASSERT_RES(bindlog_bind(f->s, "fresh", "C", "A", NULL, NULL, 0, &r), r, BINDLOG_MOVED, 0, 0,
               "");
    assert_no_session(f->s, "C");
    assert_int_equal(head_lsn(f->s), 2);
}

static void api__bind_expect_empty_only_if_unbound(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", "", NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1, "A");
    ASSERT_RES(bindlog_bind(f->s, "k", "B", "", NULL, NULL, 0, &r), r, BINDLOG_MOVED, 0, 1, "A");
    ASSERT_RES(bindlog_unbind(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 2, 2, "");
    /* a tombstone is unbound too */
    ASSERT_RES(bindlog_bind(f->s, "k", "B", "", NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 3, 3, "B");
    /* and expect naming the old session of a tombstone is MOVED */
    ASSERT_RES(bindlog_unbind(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 4, 4, "");
    ASSERT_RES(bindlog_bind(f->s, "k", "C", "B", NULL, NULL, 0, &r), r, BINDLOG_MOVED, 0, 4, "");
}

static void api__bind_live_session_of_other_key_econflict(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k1", "A", NULL, NULL, "a", 1, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    assert_int_equal(bindlog_bind(f->s, "k2", "A", NULL, NULL, NULL, 0, &r), BINDLOG_ECONFLICT);
    assert_int_equal(bindlog_bind(f->s, "k2", "A", "", NULL, NULL, 0, &r), BINDLOG_ECONFLICT);
    assert_int_equal(head_lsn(f->s), 1);
    binding(f->s, "k2", "", 0);
    assert_string_equal(sess(f->s, "A").key, "k1");
    /* MOVED is checked before the conflict */
    ASSERT_RES(bindlog_bind(f->s, "k2", "A", "Z", NULL, NULL, 0, &r), r, BINDLOG_MOVED, 0, 0, "");

    /* once A is no longer k1's binding, k2 may take it over (re-open) */
    ASSERT_RES(bindlog_unbind(f->s, "k1", NULL, &r), r, BINDLOG_APPLIED, 2, 2, "");
    ASSERT_RES(bindlog_bind(f->s, "k2", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 3, 1,
               "A");
    bindlog_session ss = sess(f->s, "A");
    assert_string_equal(ss.key, "k2");
    assert_int_equal(ss.ended_lsn, 0);
    assert_origin(f->s, "A", "a", 1);
    /* and now k1 conflicts */
    assert_int_equal(bindlog_bind(f->s, "k1", "A", NULL, NULL, NULL, 0, &r), BINDLOG_ECONFLICT);
    assert_int_equal(head_lsn(f->s), 3);
}

static void api__bind_reopen_ended_session(void **state)
{
    fx *f = *state;
    bindlog_result r;
    g_now = 100;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, "oa", 2, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    g_now = 200;
    ASSERT_RES(bindlog_new_session(f->s, "k", "B", NULL, "ob", 2, &r), r, BINDLOG_APPLIED, 2, 2,
               "B");
    bindlog_session ss = sess(f->s, "A");
    assert_int_equal(ss.ended_lsn, 2);
    assert_int_equal(ss.ended_ms, 200);
    assert_string_equal(ss.end_reason, "new_session");

    /* /resume A with no origin: re-opened, origin kept */
    g_now = 300;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", "B", "resume", NULL, 0, &r), r, BINDLOG_APPLIED, 3, 3,
               "A");
    ss = sess(f->s, "A");
    assert_int_equal(ss.ended_lsn, 0);
    assert_int_equal(ss.ended_ms, 0);
    assert_string_equal(ss.end_reason, "");
    assert_string_equal(ss.key, "k");
    assert_string_equal(ss.parent_id, "");
    assert_int_equal(ss.created_lsn, 1);
    assert_int_equal(ss.created_ms, 100);
    assert_origin(f->s, "A", "oa", 2);
    ss = sess(f->s, "B");
    assert_int_equal(ss.ended_lsn, 3);
    assert_int_equal(ss.ended_ms, 300);
    assert_string_equal(ss.end_reason, "resume");
    assert_string_equal(ss.parent_id, "A");
    rec_copy c;
    read_rec(f->s, 3, &c);
    assert_string_equal(c.sid, "A");
    assert_string_equal(c.other, "B");
    assert_string_equal(c.reason, "resume");
    assert_int_equal(c.origin_present, 0);

    /* re-open B on another key with a new origin: key moves, origin replaced */
    ASSERT_RES(bindlog_bind(f->s, "k2", "B", NULL, NULL, "new-origin", 10, &r), r, BINDLOG_APPLIED,
               4, 1, "B");
    ss = sess(f->s, "B");
    assert_string_equal(ss.key, "k2");
    assert_string_equal(ss.parent_id, "A");
    assert_int_equal(ss.created_lsn, 2);
    assert_int_equal(ss.ended_lsn, 0);
    assert_string_equal(ss.end_reason, "");
    assert_origin(f->s, "B", "new-origin", 10);

    /* re-open with an explicitly empty origin clears it */
    ASSERT_RES(bindlog_unbind(f->s, "k2", NULL, &r), r, BINDLOG_APPLIED, 5, 2, "");
    assert_string_equal(sess(f->s, "B").end_reason, "unbind");
    ASSERT_RES(bindlog_bind(f->s, "k2", "B", NULL, NULL, "", 0, &r), r, BINDLOG_APPLIED, 6, 3, "B");
    assert_origin(f->s, "B", NULL, 0);
    read_rec(f->s, 6, &c);
    assert_int_equal(c.origin_present, 1);
    assert_int_equal(c.origin_len, 0);
    assert_string_equal(c.other, "");
}

static void api__bind_default_reason_switch(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    ASSERT_RES(bindlog_bind(f->s, "k", "B", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 2, 2,
               "B");
    bindlog_session ss = sess(f->s, "A");
    assert_int_equal(ss.ended_lsn, 2);
    assert_string_equal(ss.end_reason, "switch");
    rec_copy c;
    read_rec(f->s, 2, &c);
    assert_string_equal(c.other, "A");
    assert_string_equal(c.reason, "switch");
    /* "" is a real reason, not the default */
    ASSERT_RES(bindlog_bind(f->s, "k", "C", NULL, "", NULL, 0, &r), r, BINDLOG_APPLIED, 3, 3, "C");
    assert_string_equal(sess(f->s, "B").end_reason, "");
    assert_int_equal(sess(f->s, "B").ended_lsn, 3);
    read_rec(f->s, 3, &c);
    assert_string_equal(c.reason, "");
    /* the longest reason */
    char *r64 = repeat('r', 64);
    ASSERT_RES(bindlog_bind(f->s, "k", "D", NULL, r64, NULL, 0, &r), r, BINDLOG_APPLIED, 4, 4, "D");
    assert_string_equal(sess(f->s, "C").end_reason, r64);
    free(r64);
    /* a new root session, not a child */
    assert_string_equal(sess(f->s, "D").parent_id, "");
}

/* ---- NEW_SESSION --------------------------------------------------------------- */

static void api__new_session_parent_is_current_binding(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, "oa", 2, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    g_now = 2000;
    ASSERT_RES(bindlog_new_session(f->s, "k", "B", NULL, "ob", 2, &r), r, BINDLOG_APPLIED, 2, 2,
               "B");
    bindlog_session ss = sess(f->s, "B");
    assert_string_equal(ss.parent_id, "A");
    assert_string_equal(ss.key, "k");
    assert_int_equal(ss.created_lsn, 2);
    assert_int_equal(ss.created_ms, 2000);
    assert_int_equal(ss.ended_lsn, 0);
    assert_origin(f->s, "B", "ob", 2);
    ss = sess(f->s, "A");
    assert_int_equal(ss.ended_lsn, 2);
    assert_int_equal(ss.ended_ms, 2000);
    assert_string_equal(ss.end_reason, "new_session");
    rec_copy c;
    read_rec(f->s, 2, &c);
    assert_int_equal(c.type, BINDLOG_EVENT_NEW_SESSION);
    assert_string_equal(c.sid, "B");
    assert_string_equal(c.other, "A");
    assert_string_equal(c.reason, "new_session");
    assert_int_equal(c.generation, 2);

    /* explicit reason, NULL origin = empty */
    ASSERT_RES(bindlog_new_session(f->s, "k", "C", "user /reset", NULL, 0, &r), r, BINDLOG_APPLIED,
               3, 3, "C");
    assert_string_equal(sess(f->s, "B").end_reason, "user /reset");
    assert_string_equal(sess(f->s, "C").parent_id, "B");
    assert_origin(f->s, "C", NULL, 0);
    read_rec(f->s, 3, &c);
    assert_string_equal(c.reason, "user /reset");
    assert_int_equal(c.origin_present, 0);
}

static void api__new_session_root_when_unbound(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_new_session(f->s, "k", "A", NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    assert_string_equal(sess(f->s, "A").parent_id, "");
    rec_copy c;
    read_rec(f->s, 1, &c);
    assert_string_equal(c.other, "");
    ASSERT_RES(bindlog_unbind(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 2, 2, "");
    ASSERT_RES(bindlog_new_session(f->s, "k", "B", NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 3, 3,
               "B");
    bindlog_session ss = sess(f->s, "B");
    assert_string_equal(ss.parent_id, "");
    /* A stays as the unbind left it */
    ss = sess(f->s, "A");
    assert_int_equal(ss.ended_lsn, 2);
    assert_string_equal(ss.end_reason, "unbind");
}

static void api__new_session_existing_id_eexist(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    /* live on another key */
    assert_int_equal(bindlog_new_session(f->s, "k2", "A", NULL, NULL, 0, &r), BINDLOG_EEXIST);
    ASSERT_RES(bindlog_new_session(f->s, "k", "B", NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 2, 2,
               "B");
    /* ended */
    assert_int_equal(bindlog_new_session(f->s, "k", "A", NULL, NULL, 0, &r), BINDLOG_EEXIST);
    assert_int_equal(bindlog_new_session(f->s, "k2", "A", NULL, NULL, 0, &r), BINDLOG_EEXIST);
    assert_int_equal(head_lsn(f->s), 2);
    binding(f->s, "k", "B", 2);
    binding(f->s, "k2", "", 0);
    assert_int_equal(sess(f->s, "A").ended_lsn, 2);
}

static void api__new_session_retry_already(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_new_session(f->s, "k", "A", NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    ASSERT_RES(bindlog_new_session(f->s, "k", "B", "r", "x", 1, &r), r, BINDLOG_APPLIED, 2, 2, "B");
    ASSERT_RES(bindlog_new_session(f->s, "k", "B", "r", "x", 1, &r), r, BINDLOG_ALREADY, 0, 2, "B");
    ASSERT_RES(bindlog_new_session(f->s, "k", "B", NULL, NULL, 0, &r), r, BINDLOG_ALREADY, 0, 2,
               "B");
    assert_int_equal(head_lsn(f->s), 2);
    assert_origin(f->s, "B", "x", 1);
}

/* ---- SPLIT ----------------------------------------------------------------- */

static void api__split_unbound_enotfound(void **state)
{
    fx *f = *state;
    bindlog_result r;
    assert_int_equal(bindlog_split(f->s, "k", "A", "C", 0, NULL, 0, &r), BINDLOG_ENOTFOUND);
    assert_int_equal(bindlog_split(f->s, "k", "A", "C", BINDLOG_ANY_GENERATION, NULL, 0, &r),
                     BINDLOG_ENOTFOUND);
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    ASSERT_RES(bindlog_unbind(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 2, 2, "");
    assert_int_equal(bindlog_split(f->s, "k", "A", "C", 2, NULL, 0, &r), BINDLOG_ENOTFOUND);
    assert_int_equal(bindlog_split(f->s, "k", "A", "C", BINDLOG_ANY_GENERATION, NULL, 0, &r),
                     BINDLOG_ENOTFOUND);
    /* ENOTFOUND comes first, even when the child exists */
    assert_int_equal(bindlog_split(f->s, "k", "X", "A", 2, NULL, 0, &r), BINDLOG_ENOTFOUND);
    assert_int_equal(head_lsn(f->s), 2);
    assert_no_session(f->s, "C");
}

static void api__split_already_even_with_stale_generation(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    ASSERT_RES(bindlog_split(f->s, "k", "A", "C", 1, NULL, 0, &r), r, BINDLOG_APPLIED, 2, 1, "C");
    ASSERT_RES(bindlog_invalidate(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 3, 2, "C");
    /* the split is in; the generation in the result tells the run it is stale */
    ASSERT_RES(bindlog_split(f->s, "k", "A", "C", 1, NULL, 0, &r), r, BINDLOG_ALREADY, 0, 2, "C");
    /* even a "parent" that is not C's parent: the key is bound to the child */
    ASSERT_RES(bindlog_split(f->s, "k", "Q", "C", 0, NULL, 0, &r), r, BINDLOG_ALREADY, 0, 2, "C");
    assert_int_equal(head_lsn(f->s), 3);
}

static void api__split_stale(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    ASSERT_RES(bindlog_invalidate(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 2, 2, "A");
    ASSERT_RES(bindlog_split(f->s, "k", "A", "C", 1, NULL, 0, &r), r, BINDLOG_STALE, 0, 2, "A");
    /* a zeroed generation never matches */
    ASSERT_RES(bindlog_split(f->s, "k", "A", "C", 0, NULL, 0, &r), r, BINDLOG_STALE, 0, 2, "A");
    /* a generation from the future is not current either */
    ASSERT_RES(bindlog_split(f->s, "k", "A", "C", 3, NULL, 0, &r), r, BINDLOG_STALE, 0, 2, "A");
    /* STALE comes before MOVED and EEXIST */
    ASSERT_RES(bindlog_bind(f->s, "k2", "X", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 3, 1,
               "X");
    ASSERT_RES(bindlog_split(f->s, "k", "Z", "X", 1, NULL, 0, &r), r, BINDLOG_STALE, 0, 2, "A");
    assert_int_equal(head_lsn(f->s), 3);
    assert_no_session(f->s, "C");
    assert_int_equal(sess(f->s, "A").ended_lsn, 0);
    ASSERT_RES(bindlog_split(f->s, "k", "A", "C", 2, NULL, 0, &r), r, BINDLOG_APPLIED, 4, 2, "C");
}

static void api__split_moved(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    ASSERT_RES(bindlog_bind(f->s, "k", "B", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 2, 2,
               "B");
    ASSERT_RES(bindlog_split(f->s, "k", "A", "C", 2, NULL, 0, &r), r, BINDLOG_MOVED, 0, 2, "B");
    ASSERT_RES(bindlog_split(f->s, "k", "A", "C", BINDLOG_ANY_GENERATION, NULL, 0, &r), r,
               BINDLOG_MOVED, 0, 2, "B");
    /* MOVED comes before EEXIST */
    ASSERT_RES(bindlog_split(f->s, "k", "A", "A2", 2, NULL, 0, &r), r, BINDLOG_MOVED, 0, 2, "B");
    ASSERT_RES(bindlog_bind(f->s, "k2", "X", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 3, 1,
               "X");
    ASSERT_RES(bindlog_split(f->s, "k", "A", "X", 2, NULL, 0, &r), r, BINDLOG_MOVED, 0, 2, "B");
    assert_int_equal(head_lsn(f->s), 3);
    assert_no_session(f->s, "C");
}

static void api__split_child_exists_eexist(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    ASSERT_RES(bindlog_bind(f->s, "k2", "X", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 2, 1,
               "X");
    /* live on another key */
    assert_int_equal(bindlog_split(f->s, "k", "A", "X", 1, NULL, 0, &r), BINDLOG_EEXIST);
    /* ended */
    ASSERT_RES(bindlog_unbind(f->s, "k2", NULL, &r), r, BINDLOG_APPLIED, 3, 2, "");
    assert_int_equal(bindlog_split(f->s, "k", "A", "X", BINDLOG_ANY_GENERATION, NULL, 0, &r),
                     BINDLOG_EEXIST);
    assert_int_equal(head_lsn(f->s), 3);
    binding(f->s, "k", "A", 1);
    bindlog_session ss = sess(f->s, "A");
    assert_int_equal(ss.ended_lsn, 0);
    ss = sess(f->s, "X");
    assert_string_equal(ss.key, "k2");
    assert_string_equal(ss.parent_id, "");
}

static void api__split_parent_equals_child_einval(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    assert_int_equal(bindlog_split(f->s, "k", "A", "A", 1, NULL, 0, &r), BINDLOG_EINVAL);
    /* argument check: before the state checks (the key here is unbound) */
    assert_int_equal(bindlog_split(f->s, "nokey", "Q", "Q", 1, NULL, 0, &r), BINDLOG_EINVAL);
    assert_int_equal(head_lsn(f->s), 1);
}

static void api__split_origin_null_copies_parent(void **state)
{
    fx *f = *state;
    bindlog_result r;
    const unsigned char po[] = {'p', 0, 'o', 0xff, '\n'}; /* opaque, NULs included */
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, po, sizeof po, &r), r, BINDLOG_APPLIED, 1,
               1, "A");
    ASSERT_RES(bindlog_split(f->s, "k", "A", "B", 1, NULL, 0, &r), r, BINDLOG_APPLIED, 2, 1, "B");
    assert_origin(f->s, "B", po, sizeof po);
    assert_origin(f->s, "A", po, sizeof po);
    /* the split record carries the child's effective origin (bindlog.h,
     * bindlog_record.origin_present): replay never looks at the parent */
    rec_copy c;
    read_rec(f->s, 2, &c);
    assert_int_equal(c.origin_present, 1);
    assert_int_equal(c.origin_len, sizeof po);
    assert_memory_equal(c.origin, po, sizeof po);

    /* non-NULL, zero length: explicitly empty */
    ASSERT_RES(bindlog_split(f->s, "k", "B", "C", 1, "", 0, &r), r, BINDLOG_APPLIED, 3, 1, "C");
    assert_origin(f->s, "C", NULL, 0);
    read_rec(f->s, 3, &c);
    assert_int_equal(c.origin_present, 1);
    assert_int_equal(c.origin_len, 0);

    /* copying an empty origin gives an empty one; then a new one */
    ASSERT_RES(bindlog_split(f->s, "k", "C", "D", 1, NULL, 0, &r), r, BINDLOG_APPLIED, 4, 1, "D");
    assert_origin(f->s, "D", NULL, 0);
    read_rec(f->s, 4, &c);
    assert_int_equal(c.origin_present, 1);
    assert_int_equal(c.origin_len, 0);
    ASSERT_RES(bindlog_split(f->s, "k", "D", "E", 1, "new", 3, &r), r, BINDLOG_APPLIED, 5, 1, "E");
    assert_origin(f->s, "E", "new", 3);
    read_rec(f->s, 5, &c);
    assert_int_equal(c.origin_present, 1);
    assert_int_equal(c.origin_len, 3);
    assert_memory_equal(c.origin, "new", 3);
}

static void api__split_generation_unchanged(void **state)
{
    fx *f = *state;
    bindlog_result r;
    g_now = 10;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    ASSERT_RES(bindlog_invalidate(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 2, 2, "A");
    g_now = 20;
    ASSERT_RES(bindlog_split(f->s, "k", "A", "B", 2, NULL, 0, &r), r, BINDLOG_APPLIED, 3, 2, "B");
    g_now = 30;
    /* the run that split stays current and may split again */
    ASSERT_RES(bindlog_split(f->s, "k", "B", "C", 2, NULL, 0, &r), r, BINDLOG_APPLIED, 4, 2, "C");
    bindlog_binding b = binding(f->s, "k", "C", 2);
    assert_int_equal(b.lsn, 4);
    assert_int_equal(b.updated_ms, 30);
    bindlog_session ss = sess(f->s, "B");
    assert_string_equal(ss.parent_id, "A");
    assert_string_equal(ss.key, "k");
    assert_int_equal(ss.created_lsn, 3);
    assert_int_equal(ss.created_ms, 20);
    assert_int_equal(ss.ended_lsn, 4);
    assert_int_equal(ss.ended_ms, 30);
    assert_string_equal(ss.end_reason, "compression");
    rec_copy c;
    read_rec(f->s, 4, &c);
    assert_int_equal(c.type, BINDLOG_EVENT_SPLIT);
    assert_string_equal(c.sid, "C");
    assert_string_equal(c.other, "B");
    assert_int_equal(c.generation, 2);
}

/* ---- INVALIDATE -------------------------------------------------------------- */

static void api__invalidate_bumps_generation_keeps_binding(void **state)
{
    fx *f = *state;
    bindlog_result r;
    g_now = 1000;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    g_now = 2000;
    ASSERT_RES(bindlog_invalidate(f->s, "k", "user /stop", &r), r, BINDLOG_APPLIED, 2, 2, "A");
    bindlog_binding b = binding(f->s, "k", "A", 2);
    assert_int_equal(b.lsn, 2);
    assert_int_equal(b.updated_ms, 2000);
    bindlog_session ss = sess(f->s, "A");
    assert_int_equal(ss.ended_lsn, 0);
    assert_string_equal(ss.end_reason, "");
    assert_int_equal(ss.created_lsn, 1);

    rec_copy c;
    read_rec(f->s, 2, &c);
    assert_int_equal(c.type, BINDLOG_EVENT_INVALIDATE);
    assert_string_equal(c.reason, "user /stop");
    assert_string_equal(c.key, "k");
    assert_string_equal(c.sid, "A");
    assert_string_equal(c.other, "");
    assert_int_equal(c.generation, 2);
    assert_int_equal(c.time_ms, 2000);

    /* invalidating again is not ALREADY: each /stop is an epoch */
    ASSERT_RES(bindlog_invalidate(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 3, 3, "A");
    read_rec(f->s, 3, &c);
    assert_string_equal(c.reason, "invalidate");
    ASSERT_RES(bindlog_invalidate(f->s, "k", "", &r), r, BINDLOG_APPLIED, 4, 4, "A");
    read_rec(f->s, 4, &c);
    assert_string_equal(c.reason, "");
}

static void api__invalidate_unbound_enotfound(void **state)
{
    fx *f = *state;
    bindlog_result r;
    assert_int_equal(bindlog_invalidate(f->s, "k", NULL, &r), BINDLOG_ENOTFOUND);
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    ASSERT_RES(bindlog_unbind(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 2, 2, "");
    assert_int_equal(bindlog_invalidate(f->s, "k", NULL, &r), BINDLOG_ENOTFOUND);
    assert_int_equal(head_lsn(f->s), 2);
    binding(f->s, "k", "", 2);
    binding(f->s, "never", "", 0);
}

/* ---- UNBIND ------------------------------------------------------------------- */

static void api__unbind_leaves_tombstone(void **state)
{
    fx *f = *state;
    bindlog_result r;
    g_now = 100;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    g_now = 200;
    ASSERT_RES(bindlog_unbind(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 2, 2, "");
    bindlog_binding b = binding(f->s, "k", "", 2);
    (void)b;
    bindlog_session ss = sess(f->s, "A");
    assert_int_equal(ss.ended_lsn, 2);
    assert_int_equal(ss.ended_ms, 200);
    assert_string_equal(ss.end_reason, "unbind");
    assert_string_equal(ss.key, "k");
    rec_copy c;
    read_rec(f->s, 2, &c);
    assert_int_equal(c.type, BINDLOG_EVENT_UNBIND);
    assert_string_equal(c.sid, "A");
    assert_string_equal(c.reason, "unbind");
    assert_int_equal(c.generation, 2);

    /* the tombstone is a binding entry */
    bindlog_iter *it = NULL;
    assert_int_equal(bindlog_bindings_iter(f->s, &it), 0);
    assert_int_equal(bindlog_iter_next_binding(it, &b), 1);
    assert_string_equal(b.key, "k");
    assert_string_equal(b.session_id, "");
    assert_int_equal(b.generation, 2);
    assert_int_equal(b.lsn, 2);
    assert_int_equal(b.updated_ms, 200);
    assert_int_equal(bindlog_iter_next_binding(it, &b), 0);
    bindlog_iter_close(it);

    ASSERT_RES(bindlog_unbind(f->s, "k", "again", &r), r, BINDLOG_ALREADY, 0, 2, "");
    assert_int_equal(bindlog_unbind(f->s, "never", NULL, &r), BINDLOG_ENOTFOUND);
    assert_int_equal(head_lsn(f->s), 2);
    assert_string_equal(sess(f->s, "A").end_reason, "unbind");

    /* explicit reason */
    ASSERT_RES(bindlog_bind(f->s, "k2", "B", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 3, 1,
               "B");
    ASSERT_RES(bindlog_unbind(f->s, "k2", "idle 24h", &r), r, BINDLOG_APPLIED, 4, 2, "");
    assert_string_equal(sess(f->s, "B").end_reason, "idle 24h");
    read_rec(f->s, 4, &c);
    assert_string_equal(c.reason, "idle 24h");
}

/* ---- the generation rule -------------------------------------------------------- */

static void api__generation_never_goes_backwards(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    ASSERT_RES(bindlog_unbind(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 2, 2, "");
    /* a rebind after the tombstone continues from its generation */
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 3, 3,
               "A");
    ASSERT_RES(bindlog_unbind(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 4, 4, "");
    ASSERT_RES(bindlog_new_session(f->s, "k", "B", NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 5, 5,
               "B");

    /* close + open: the numbers survive */
    bindlog_close(f->s);
    f->s = xopen(f->dir, 0);
    binding(f->s, "k", "B", 5);
    ASSERT_RES(bindlog_unbind(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 6, 6, "");
    bindlog_close(f->s);
    f->s = xopen(f->dir, 0);
    binding(f->s, "k", "", 6);
    /* resuming an old session is a bind: + 1 */
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 7, 7,
               "A");
    ASSERT_RES(bindlog_bind(f->s, "k", "B", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 8, 8,
               "B");
    ASSERT_RES(bindlog_split(f->s, "k", "B", "C", 8, NULL, 0, &r), r, BINDLOG_APPLIED, 9, 8, "C");
    ASSERT_RES(bindlog_invalidate(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 10, 9, "C");
    /* the session moves to another key: that key has its own epoch */
    ASSERT_RES(bindlog_unbind(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 11, 10, "");
    ASSERT_RES(bindlog_bind(f->s, "other", "C", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 12, 1,
               "C");
    bindlog_close(f->s);
    f->s = xopen(f->dir, 0);
    binding(f->s, "k", "", 10);
    binding(f->s, "other", "C", 1);
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 13, 11,
               "A");
}

static void api__lsn_dense_from_one(void **state)
{
    fx *f = *state;
    bindlog_result r;
    uint64_t expect = 0;
    ASSERT_RES(bindlog_bind(f->s, "a", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, ++expect,
               1, "A");
    ASSERT_RES(bindlog_bind(f->s, "a", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_ALREADY, 0, 1,
               "A");
    assert_int_equal(bindlog_new_session(f->s, "b", "A", NULL, NULL, 0, &r), BINDLOG_EEXIST);
    ASSERT_RES(bindlog_new_session(f->s, "b", "B", NULL, NULL, 0, &r), r, BINDLOG_APPLIED, ++expect,
               1, "B");
    ASSERT_RES(bindlog_split(f->s, "a", "A", "C", 7, NULL, 0, &r), r, BINDLOG_STALE, 0, 1, "A");
    ASSERT_RES(bindlog_split(f->s, "a", "A", "C", 1, NULL, 0, &r), r, BINDLOG_APPLIED, ++expect, 1,
               "C");
    assert_int_equal(bindlog_bind(f->s, "", "A", NULL, NULL, NULL, 0, &r), BINDLOG_EINVAL);
    ASSERT_RES(bindlog_invalidate(f->s, "b", NULL, &r), r, BINDLOG_APPLIED, ++expect, 2, "B");
    ASSERT_RES(bindlog_unbind(f->s, "b", NULL, &r), r, BINDLOG_APPLIED, ++expect, 3, "");
    ASSERT_RES(bindlog_unbind(f->s, "b", NULL, &r), r, BINDLOG_ALREADY, 0, 3, "");
    assert_int_equal(head_lsn(f->s), expect);
    assert_int_equal(stats(f->s).log_records, expect);

    bindlog_iter *it = NULL;
    bindlog_record rec;
    uint64_t want = 1;
    int rc;
    assert_int_equal(bindlog_log_iter(f->s, 0, UINT64_MAX, &it), 0);
    while ((rc = bindlog_iter_next_record(it, &rec)) == 1)
        assert_int_equal(rec.lsn, want++);
    assert_int_equal(rc, 0);
    bindlog_iter_close(it);
    assert_int_equal(want, expect + 1);
}

static void api__time_never_decreases(void **state)
{
    fx *f = *state;
    bindlog_result r;
    g_now = 1000;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    g_now = 500; /* the clock goes back */
    ASSERT_RES(bindlog_new_session(f->s, "k", "B", NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 2, 2,
               "B");
    g_now = 400;
    ASSERT_RES(bindlog_invalidate(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 3, 3, "B");
    g_now = 2000;
    ASSERT_RES(bindlog_unbind(f->s, "k", NULL, &r), r, BINDLOG_APPLIED, 4, 4, "");
    g_now = 1500;
    ASSERT_RES(bindlog_bind(f->s, "k", "C", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 5, 5,
               "C");

    const int64_t want[] = {0, 1000, 1000, 1000, 2000, 2000};
    rec_copy c;
    for (uint64_t l = 1; l <= 5; l++) {
        read_rec(f->s, l, &c);
        assert_int_equal(c.time_ms, want[l]);
    }
    assert_int_equal(sess(f->s, "A").ended_ms, 1000);
    assert_int_equal(sess(f->s, "B").created_ms, 1000);
    assert_int_equal(sess(f->s, "B").ended_ms, 2000);
    assert_int_equal(sess(f->s, "C").created_ms, 2000);
    assert_int_equal(binding(f->s, "k", "C", 5).updated_ms, 2000);

    /* across close + open the previous record's time still holds */
    bindlog_close(f->s);
    g_now = 100;
    f->s = xopen(f->dir, 0);
    ASSERT_RES(bindlog_bind(f->s, "k2", "D", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 6, 1,
               "D");
    read_rec(f->s, 6, &c);
    assert_int_equal(c.time_ms, 2000);
    assert_int_equal(sess(f->s, "D").created_ms, 2000);
    g_now = 3000;
    ASSERT_RES(bindlog_invalidate(f->s, "k2", NULL, &r), r, BINDLOG_APPLIED, 7, 2, "D");
    read_rec(f->s, 7, &c);
    assert_int_equal(c.time_ms, 3000);
}

/* ---- keys and ids as bytes -------------------------------------------------------- */

static void api__key_any_bytes_but_nul(void **state)
{
    fx *f = *state;
    bindlog_result r;
    /* keys may hold control bytes and any high byte */
    const char *keys[] = {"a\nb", "\x01", "\x7f\x1f", "caf\xc3\xa9", "\xff\xfe"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char id[16];
        snprintf(id, sizeof id, "s%zu", i);
        ASSERT_RES(bindlog_bind(f->s, keys[i], id, NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED,
                   i + 1, 1, id);
        binding(f->s, keys[i], id, 1);
        assert_string_equal(sess(f->s, id).key, keys[i]);
    }
    /* ids and reasons may hold high bytes, and spaces */
    ASSERT_RES(
        bindlog_bind(f->s, "u", "s\xc3\xa9ssion \xe2\x9c\x93", NULL, "ra\xc3\xafson", NULL, 0, &r),
        r, BINDLOG_APPLIED, 6, 1, "s\xc3\xa9ssion \xe2\x9c\x93");
    ASSERT_RES(bindlog_unbind(f->s, "u", "ra\xc3\xafson", &r), r, BINDLOG_APPLIED, 7, 2, "");
    assert_string_equal(sess(f->s, "s\xc3\xa9ssion \xe2\x9c\x93").end_reason, "ra\xc3\xafson");
}

/* ---- argument checks ------------------------------------------------------------- */

/* Every call below must be EINVAL and write nothing. */
#define EXPECT_EINVAL(call)                                                                        \
    do {                                                                                           \
        uint64_t h__ = head_lsn(f->s);                                                             \
        int rc__ = (call);                                                                         \
        if (rc__ != BINDLOG_EINVAL)                                                                \
            fail_msg("%s: got %d (%s), want BINDLOG_EINVAL", #call, rc__,                          \
                     bindlog_code_name(rc__));                                                     \
        assert_int_equal(head_lsn(f->s), h__);                                                     \
    } while (0)

/* Runs every bad-argument call on f->s (writable or read-only). */
static void run_einval_calls(fx *f)
{
    bindlog_result r;
    char *k400 = repeat('k', 400), *k401 = repeat('k', 401);
    char *i128 = repeat('i', 128), *i129 = repeat('i', 129);
    char *r65 = repeat('r', 65);
    unsigned char *big = calloc(1, BINDLOG_ORIGIN_MAX + 1);
    assert_non_null(big);
    const char *bad_ids[] = {"a\x01", "\x1f", "x\x7f", "line\n", "\t", i129, ""};
    const char *bad_reasons[] = {"a\x01", "\x1f", "x\x7f", "line\n", r65};

    /* NULL handle */
    assert_int_equal(bindlog_bind(NULL, "k", "A", NULL, NULL, NULL, 0, &r), BINDLOG_EINVAL);
    assert_int_equal(bindlog_new_session(NULL, "k", "A", NULL, NULL, 0, &r), BINDLOG_EINVAL);
    assert_int_equal(bindlog_split(NULL, "k", "A", "B", 1, NULL, 0, &r), BINDLOG_EINVAL);
    assert_int_equal(bindlog_invalidate(NULL, "k", NULL, &r), BINDLOG_EINVAL);
    assert_int_equal(bindlog_unbind(NULL, "k", NULL, &r), BINDLOG_EINVAL);
    bindlog_event ev = {BINDLOG_EVENT_BIND, "k", "A", NULL, 0, NULL, NULL, 0};
    assert_int_equal(bindlog_apply_batch(NULL, &ev, 1, &r, NULL), BINDLOG_EINVAL);
    bindlog_binding b;
    bindlog_session ss;
    bindlog_stats st;
    assert_int_equal(bindlog_get(NULL, "k", &b), BINDLOG_EINVAL);
    assert_int_equal(bindlog_session_get(NULL, "A", &ss, NULL, 0), BINDLOG_EINVAL);
    assert_int_equal(bindlog_stats_get(NULL, &st), BINDLOG_EINVAL);

    /* keys */
    const char *bad_keys[] = {NULL, "", k401};
    for (size_t i = 0; i < sizeof bad_keys / sizeof bad_keys[0]; i++) {
        const char *k = bad_keys[i];
        EXPECT_EINVAL(bindlog_bind(f->s, k, "A", NULL, NULL, NULL, 0, &r));
        EXPECT_EINVAL(bindlog_new_session(f->s, k, "A", NULL, NULL, 0, &r));
        EXPECT_EINVAL(bindlog_split(f->s, k, "A", "B", 1, NULL, 0, &r));
        EXPECT_EINVAL(bindlog_invalidate(f->s, k, NULL, &r));
        EXPECT_EINVAL(bindlog_unbind(f->s, k, NULL, &r));
        EXPECT_EINVAL(bindlog_get(f->s, k, &b));
    }
    /* ids: NULL, empty, too long, control bytes */
    EXPECT_EINVAL(bindlog_bind(f->s, "k", NULL, NULL, NULL, NULL, 0, &r));
    EXPECT_EINVAL(bindlog_new_session(f->s, "k", NULL, NULL, NULL, 0, &r));
    EXPECT_EINVAL(bindlog_split(f->s, "k", NULL, "B", 1, NULL, 0, &r));
    EXPECT_EINVAL(bindlog_split(f->s, "k", "A", NULL, 1, NULL, 0, &r));
    EXPECT_EINVAL(bindlog_session_get(f->s, NULL, &ss, NULL, 0));
    for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
        const char *id = bad_ids[i];
        EXPECT_EINVAL(bindlog_bind(f->s, "k", id, NULL, NULL, NULL, 0, &r));
        EXPECT_EINVAL(bindlog_new_session(f->s, "k", id, NULL, NULL, 0, &r));
        EXPECT_EINVAL(bindlog_split(f->s, "k", id, "B", 1, NULL, 0, &r));
        EXPECT_EINVAL(bindlog_split(f->s, "k", "A", id, 1, NULL, 0, &r));
        EXPECT_EINVAL(bindlog_session_get(f->s, id, &ss, NULL, 0));
    }
    /* reasons */
    for (size_t i = 0; i < sizeof bad_reasons / sizeof bad_reasons[0]; i++) {
        const char *rs = bad_reasons[i];
        EXPECT_EINVAL(bindlog_bind(f->s, "k", "A", NULL, rs, NULL, 0, &r));
        EXPECT_EINVAL(bindlog_new_session(f->s, "k", "A", rs, NULL, 0, &r));
        EXPECT_EINVAL(bindlog_invalidate(f->s, "k", rs, &r));
        EXPECT_EINVAL(bindlog_unbind(f->s, "k", rs, &r));
    }
    /* origins: too long, NULL with a length */
    EXPECT_EINVAL(bindlog_bind(f->s, "k", "A", NULL, NULL, big, BINDLOG_ORIGIN_MAX + 1, &r));
    EXPECT_EINVAL(bindlog_new_session(f->s, "k", "A", NULL, big, BINDLOG_ORIGIN_MAX + 1, &r));
    EXPECT_EINVAL(bindlog_split(f->s, "k", "A", "B", 1, big, BINDLOG_ORIGIN_MAX + 1, &r));
    EXPECT_EINVAL(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 5, &r));
    EXPECT_EINVAL(bindlog_new_session(f->s, "k", "A", NULL, NULL, 1, &r));
    EXPECT_EINVAL(bindlog_split(f->s, "k", "A", "B", 1, NULL, 3, &r));
    /* parent == child */
    EXPECT_EINVAL(bindlog_split(f->s, "k", "A", "A", 1, NULL, 0, &r));
    /* reads with NULL outputs */
    EXPECT_EINVAL(bindlog_get(f->s, "k", NULL));
    EXPECT_EINVAL(bindlog_session_get(f->s, "A", NULL, NULL, 0));
    EXPECT_EINVAL(bindlog_stats_get(f->s, NULL));

    /* batches: bad type, bad field, NULL events */
    bindlog_event evs[3] = {
        {BINDLOG_EVENT_BIND, "bk", "BA", NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_INVALIDATE, "bk", NULL, NULL, 0, NULL, NULL, 0},
        {0, "bk", "BB", NULL, 0, NULL, NULL, 0},
    };
    const int bad_types[] = {0, BINDLOG_EVENT_COUNT, -1, 99};
    for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
        size_t ei = 12345;
        evs[2].type = bad_types[i];
        EXPECT_EINVAL(bindlog_apply_batch(f->s, evs, 3, NULL, &ei));
        assert_int_equal(ei, 2);
    }
    evs[2].type = BINDLOG_EVENT_BIND;
    evs[2].key = k401;
    {
        size_t ei = 12345;
        EXPECT_EINVAL(bindlog_apply_batch(f->s, evs, 3, NULL, &ei));
        assert_int_equal(ei, 2);
    }
    EXPECT_EINVAL(bindlog_apply_batch(f->s, NULL, 2, NULL, NULL));

    free(k400);
    free(k401);
    free(i128);
    free(i129);
    free(r65);
    free(big);
}

static void api__bad_arguments_einval(void **state)
{
    fx *f = *state;
    run_einval_calls(f);
    assert_int_equal(head_lsn(f->s), 0);
    /* nothing at all was created */
    bindlog_stats st = stats(f->s);
    assert_int_equal(st.bindings, 0);
    assert_int_equal(st.sessions, 0);
    assert_int_equal(st.log_records, 0);
}

static void api__limits_exactly_at_max_accepted(void **state)
{
    fx *f = *state;
    bindlog_result r;
    char *k400 = repeat('k', 400), *i128 = repeat('i', 128), *r64 = repeat('r', 64);
    unsigned char *big = malloc(BINDLOG_ORIGIN_MAX);
    assert_non_null(big);
    for (size_t i = 0; i < BINDLOG_ORIGIN_MAX; i++)
        big[i] = (unsigned char)(i * 31 + 7);

    ASSERT_RES(bindlog_bind(f->s, k400, i128, NULL, r64, big, BINDLOG_ORIGIN_MAX, &r), r,
               BINDLOG_APPLIED, 1, 1, i128);
    binding(f->s, k400, i128, 1);
    bindlog_session ss = sess(f->s, i128);
    assert_string_equal(ss.key, k400);
    assert_origin(f->s, i128, big, BINDLOG_ORIGIN_MAX);
    ASSERT_RES(bindlog_unbind(f->s, k400, r64, &r), r, BINDLOG_APPLIED, 2, 2, "");
    assert_string_equal(sess(f->s, i128).end_reason, r64);

    /* the record carries them all */
    bindlog_iter *it = NULL;
    bindlog_record rec;
    assert_int_equal(bindlog_log_iter(f->s, 1, 1, &it), 0);
    assert_int_equal(bindlog_iter_next_record(it, &rec), 1);
    assert_int_equal(rec.key_len, 400);
    assert_memory_equal(rec.key, k400, 400);
    assert_string_equal(rec.session_id, i128);
    assert_string_equal(rec.reason, r64);
    assert_int_equal(rec.origin_len, BINDLOG_ORIGIN_MAX);
    assert_memory_equal(rec.origin, big, BINDLOG_ORIGIN_MAX);
    bindlog_iter_close(it);

    /* split with a maximal origin too, and new_session */
    ASSERT_RES(bindlog_new_session(f->s, k400, "n", r64, big, BINDLOG_ORIGIN_MAX, &r), r,
               BINDLOG_APPLIED, 3, 3, "n");
    ASSERT_RES(bindlog_split(f->s, k400, "n", "m", 3, big, BINDLOG_ORIGIN_MAX, &r), r,
               BINDLOG_APPLIED, 4, 3, "m");
    assert_origin(f->s, "m", big, BINDLOG_ORIGIN_MAX);
    ASSERT_RES(bindlog_invalidate(f->s, k400, r64, &r), r, BINDLOG_APPLIED, 5, 4, "m");
    free(k400);
    free(i128);
    free(r64);
    free(big);
}

/* ---- read-only handles ---------------------------------------------------------- */

static void api__readonly_handle_ereadonly(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "A");
    bindlog_close(f->s);
    f->s = xopen(f->dir, 1);

    /* valid calls: EREADONLY, before any state check */
    assert_int_equal(bindlog_bind(f->s, "k", "B", NULL, NULL, NULL, 0, &r), BINDLOG_EREADONLY);
    assert_int_equal(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), BINDLOG_EREADONLY);
    assert_int_equal(bindlog_new_session(f->s, "k", "B", NULL, NULL, 0, &r), BINDLOG_EREADONLY);
    assert_int_equal(bindlog_new_session(f->s, "k", "A", NULL, NULL, 0, &r), BINDLOG_EREADONLY);
    assert_int_equal(bindlog_split(f->s, "k", "A", "C", 1, NULL, 0, &r), BINDLOG_EREADONLY);
    assert_int_equal(bindlog_split(f->s, "nokey", "A", "C", 1, NULL, 0, &r), BINDLOG_EREADONLY);
    assert_int_equal(bindlog_invalidate(f->s, "k", NULL, &r), BINDLOG_EREADONLY);
    assert_int_equal(bindlog_invalidate(f->s, "nokey", NULL, &r), BINDLOG_EREADONLY);
    assert_int_equal(bindlog_unbind(f->s, "k", NULL, &r), BINDLOG_EREADONLY);
    assert_int_equal(bindlog_unbind(f->s, "nokey", NULL, &r), BINDLOG_EREADONLY);
    bindlog_event ev[2] = {
        {BINDLOG_EVENT_BIND, "k2", "Z", NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_UNBIND, "k", NULL, NULL, 0, NULL, NULL, 0},
    };
    assert_int_equal(bindlog_apply_batch(f->s, ev, 2, NULL, NULL), BINDLOG_EREADONLY);
    int codes[2] = {99, 99};
    char msgs[2][BINDLOG_EACH_MESSAGE_MAX];
    assert_int_equal(bindlog_apply_each(f->s, ev, 2, NULL, codes, msgs), BINDLOG_EREADONLY);
    assert_int_equal(codes[0], BINDLOG_EREADONLY);
    assert_int_equal(codes[1], BINDLOG_EREADONLY);
    assert_string_equal(msgs[1], "unbind k: the handle was opened read-only");

    /* bad arguments: EINVAL first */
    run_einval_calls(f);

    /* reads work, and nothing changed */
    binding(f->s, "k", "A", 1);
    assert_int_equal(sess(f->s, "A").ended_lsn, 0);
    assert_int_equal(head_lsn(f->s), 1);
    assert_int_equal(count_records(f->s, 0, UINT64_MAX), 1);
    assert_no_session(f->s, "B");
    unsigned char d[BINDLOG_DIGEST_SIZE];
    assert_int_equal(bindlog_digest(f->s, d, NULL), 0);
}

static void api__readonly_open_missing_store_enotfound(void **state)
{
    fx *f = *state;
    int rc;
    bindlog *s = open_store(f->dir, BINDLOG_DURABILITY_NONE, 1, &rc);
    assert_null(s);
    assert_int_equal(rc, BINDLOG_ENOTFOUND);
    if (tu_is_etcd_location(f->dir)) {
        /* nothing was created under the prefix */
        assert_int_equal(tu_etcd_count(f->dir), 0);
        s = open_store(f->dir, BINDLOG_DURABILITY_NONE, 1, &rc);
        assert_null(s);
        assert_int_equal(rc, BINDLOG_ENOTFOUND);
        return;
    }
    /* nothing was created */
    struct stat st;
    assert_int_equal(stat(f->dir, &st), -1);
    /* an empty existing directory is not a store either */
    assert_int_equal(mkdir(f->dir, 0700), 0);
    s = open_store(f->dir, BINDLOG_DURABILITY_NONE, 1, &rc);
    assert_null(s);
    assert_int_equal(rc, BINDLOG_ENOTFOUND);
}

/* ---- codes ---------------------------------------------------------------------- */

static void api__strerror_and_code_name(void **state)
{
    (void)state;
    for (int rc = BINDLOG_ERROR_MIN - 5; rc < BINDLOG_OUTCOME_COUNT + 5; rc++) {
        const char *s = bindlog_strerror(rc);
        assert_non_null(s);
        assert_true(s[0] != '\0');
        const char *n = bindlog_code_name(rc);
        assert_non_null(n);
        assert_true(n[0] != '\0');
    }
    const int odd[] = {INT_MIN, INT_MAX, -1000, 1000};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        assert_string_equal(bindlog_strerror(odd[i]), "unknown error");
        assert_string_equal(bindlog_code_name(odd[i]), "BINDLOG_UNKNOWN");
    }
    assert_string_equal(bindlog_strerror(BINDLOG_ERROR_MIN - 1), "unknown error");
    assert_string_equal(bindlog_code_name(BINDLOG_ERROR_MIN - 1), "BINDLOG_UNKNOWN");

    static const struct {
        int rc;
        const char *name;
    } names[] = {
        {BINDLOG_APPLIED, "BINDLOG_APPLIED"},
        {BINDLOG_ALREADY, "BINDLOG_ALREADY"},
        {BINDLOG_STALE, "BINDLOG_STALE"},
        {BINDLOG_MOVED, "BINDLOG_MOVED"},
        {BINDLOG_ENOTFOUND, "BINDLOG_ENOTFOUND"},
        {BINDLOG_EINVAL, "BINDLOG_EINVAL"},
        {BINDLOG_EEXIST, "BINDLOG_EEXIST"},
        {BINDLOG_ECONFLICT, "BINDLOG_ECONFLICT"},
        {BINDLOG_ECORRUPT, "BINDLOG_ECORRUPT"},
        {BINDLOG_EVERSION, "BINDLOG_EVERSION"},
        {BINDLOG_EIO, "BINDLOG_EIO"},
        {BINDLOG_ENOSPC, "BINDLOG_ENOSPC"},
        {BINDLOG_ENOMEM, "BINDLOG_ENOMEM"},
        {BINDLOG_EBUSY, "BINDLOG_EBUSY"},
        {BINDLOG_EREADONLY, "BINDLOG_EREADONLY"},
        {BINDLOG_ENOTSTORE, "BINDLOG_ENOTSTORE"},
        {BINDLOG_EACCES, "BINDLOG_EACCES"},
        {BINDLOG_EPANIC, "BINDLOG_EPANIC"},
        {BINDLOG_ENOTSUP, "BINDLOG_ENOTSUP"},
        {BINDLOG_EFORK, "BINDLOG_EFORK"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        assert_string_equal(bindlog_code_name(names[i].rc), names[i].name);
        /* every known code has its own text */
        assert_string_not_equal(bindlog_strerror(names[i].rc), "unknown error");
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(bindlog_strerror(names[i].rc), bindlog_strerror(names[j].rc));
    }
    assert_string_equal(bindlog_event_name(BINDLOG_EVENT_BIND), "bind");
    assert_string_equal(bindlog_event_name(BINDLOG_EVENT_NEW_SESSION), "new_session");
    assert_string_equal(bindlog_event_name(BINDLOG_EVENT_SPLIT), "split");
    assert_string_equal(bindlog_event_name(BINDLOG_EVENT_INVALIDATE), "invalidate");
    assert_string_equal(bindlog_event_name(BINDLOG_EVENT_UNBIND), "unbind");
    assert_string_equal(bindlog_event_name(0), "unknown");
    assert_string_equal(bindlog_event_name(99), "unknown");
    assert_string_equal(bindlog_version(), BINDLOG_VERSION_STRING);
}

/* ---- session_get origin copying ------------------------------------------------- */

static void api__session_get_origin_copy(void **state)
{
    fx *f = *state;
    unsigned char o[100];
    for (size_t i = 0; i < sizeof o; i++)
        o[i] = (unsigned char)(i + 1);
    assert_int_equal(bindlog_bind(f->s, "k", "A", NULL, NULL, o, sizeof o, NULL), BINDLOG_APPLIED);

    unsigned char buf[32];
    bindlog_session ss;
    memset(buf, 0xEE, sizeof buf);
    assert_int_equal(bindlog_session_get(f->s, "A", &ss, buf, 10), 0);
    assert_int_equal(ss.origin_len, sizeof o);
    assert_memory_equal(buf, o, 10);
    for (size_t i = 10; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xEE); /* not one byte past the cap */

    memset(&ss, 0, sizeof ss);
    assert_int_equal(bindlog_session_get(f->s, "A", &ss, NULL, 0), 0);
    assert_int_equal(ss.origin_len, sizeof o);
    assert_string_equal(ss.key, "k");

    /* cap 0 with a buffer: nothing copied */
    memset(buf, 0xEE, sizeof buf);
    assert_int_equal(bindlog_session_get(f->s, "A", &ss, buf, 0), 0);
    assert_int_equal(buf[0], 0xEE);

    assert_int_equal(bindlog_session_get(f->s, "nope", &ss, NULL, 0), BINDLOG_ENOTFOUND);
}

/* ---- batches ----------------------------------------------------------------------- */

static void api__batch_ordered_each_sees_previous(void **state)
{
    fx *f = *state;
    bindlog_event ev[] = {
        {BINDLOG_EVENT_BIND, "k", "A", "", 0, NULL, "oa", 2},
        {BINDLOG_EVENT_SPLIT, "k", "C", "A", 1, NULL, NULL, 0},
        {BINDLOG_EVENT_INVALIDATE, "k", NULL, NULL, 0, "stop", NULL, 0},
        {BINDLOG_EVENT_SPLIT, "k", "D", "C", 1, NULL, NULL, 0}, /* stale now */
        {BINDLOG_EVENT_NEW_SESSION, "k", "D", NULL, 0, NULL, "od", 2},
        {BINDLOG_EVENT_UNBIND, "k", NULL, NULL, 0, "bye", NULL, 0},
        {BINDLOG_EVENT_BIND, "k", "C", "", 0, NULL, NULL, 0},
    };
    const size_t n = sizeof ev / sizeof ev[0];
    bindlog_result out[sizeof ev / sizeof ev[0]];
    size_t ei = 777;
    g_now = 4242;
    assert_int_equal(bindlog_apply_batch(f->s, ev, n, out, &ei), 0);
    ASSERT_RES(out[0].outcome, out[0], BINDLOG_APPLIED, 1, 1, "A");
    ASSERT_RES(out[1].outcome, out[1], BINDLOG_APPLIED, 2, 1, "C");
    ASSERT_RES(out[2].outcome, out[2], BINDLOG_APPLIED, 3, 2, "C");
    ASSERT_RES(out[3].outcome, out[3], BINDLOG_STALE, 0, 2, "C");
    ASSERT_RES(out[4].outcome, out[4], BINDLOG_APPLIED, 4, 3, "D");
    ASSERT_RES(out[5].outcome, out[5], BINDLOG_APPLIED, 5, 4, "");
    ASSERT_RES(out[6].outcome, out[6], BINDLOG_APPLIED, 6, 5, "C");
    assert_int_equal(head_lsn(f->s), 6);
    binding(f->s, "k", "C", 5);
    assert_origin(f->s, "C", "oa", 2);
    assert_origin(f->s, "D", "od", 2);
    bindlog_session ss = sess(f->s, "D");
    assert_string_equal(ss.parent_id, "C");
    assert_int_equal(ss.ended_lsn, 5);
    assert_string_equal(ss.end_reason, "bye");
    ss = sess(f->s, "C");
    assert_int_equal(ss.ended_lsn, 0);
    assert_int_equal(ss.created_lsn, 2);
    rec_copy c;
    read_rec(f->s, 3, &c);
    assert_string_equal(c.reason, "stop");
    assert_int_equal(c.time_ms, 4242);
}

static void api__batch_error_writes_nothing(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "x", "X", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "X");
    bindlog_event ev[] = {
        {BINDLOG_EVENT_BIND, "k", "A", NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_INVALIDATE, "x", NULL, NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_NEW_SESSION, "k2", "A", NULL, 0, NULL, NULL, 0}, /* A exists now */
        {BINDLOG_EVENT_UNBIND, "k", NULL, NULL, 0, NULL, NULL, 0},
    };
    bindlog_result out[4];
    size_t ei = 777;
    assert_int_equal(bindlog_apply_batch(f->s, ev, 4, out, &ei), BINDLOG_EEXIST);
    assert_int_equal(ei, 2);
    assert_int_equal(head_lsn(f->s), 1);
    binding(f->s, "k", "", 0);
    binding(f->s, "x", "X", 1);
    assert_no_session(f->s, "A");
    assert_int_equal(count_records(f->s, 0, UINT64_MAX), 1);
    bindlog_stats st = stats(f->s);
    assert_int_equal(st.bindings, 1);
    assert_int_equal(st.sessions, 1);

    /* ENOTFOUND, ECONFLICT as the failing event; err_index may be NULL */
    bindlog_event ev2[] = {
        {BINDLOG_EVENT_BIND, "k", "A", NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_INVALIDATE, "never", NULL, NULL, 0, NULL, NULL, 0},
    };
    assert_int_equal(bindlog_apply_batch(f->s, ev2, 2, NULL, NULL), BINDLOG_ENOTFOUND);
    bindlog_event ev3[] = {
        {BINDLOG_EVENT_UNBIND, "x", NULL, NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_BIND, "k", "A", NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_BIND, "k3", "A", NULL, 0, NULL, NULL, 0},
    };
    ei = 777;
    assert_int_equal(bindlog_apply_batch(f->s, ev3, 3, out, &ei), BINDLOG_ECONFLICT);
    assert_int_equal(ei, 2);
    assert_int_equal(head_lsn(f->s), 1);
    binding(f->s, "x", "X", 1);
    assert_int_equal(sess(f->s, "X").ended_lsn, 0);
    assert_no_session(f->s, "A");

    /* the store still works, and the next LSN is 2 */
    ASSERT_RES(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 2, 1,
               "A");
}

static void api__batch_rejections_do_not_abort(void **state)
{
    fx *f = *state;
    bindlog_event ev[] = {
        {BINDLOG_EVENT_BIND, "k", "A", NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_BIND, "k", "A", "zzz", 0, NULL, NULL, 0},                     /* ALREADY */
        {BINDLOG_EVENT_SPLIT, "k", "C", "A", 99, NULL, NULL, 0},                     /* STALE */
        {BINDLOG_EVENT_BIND, "k", "B", "X", 0, NULL, NULL, 0},                       /* MOVED */
        {BINDLOG_EVENT_SPLIT, "k", "C", "Q", BINDLOG_ANY_GENERATION, NULL, NULL, 0}, /* MOVED */
        {BINDLOG_EVENT_NEW_SESSION, "k", "B", NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_UNBIND, "k", NULL, NULL, 0, NULL, NULL, 0},
        {BINDLOG_EVENT_UNBIND, "k", NULL, NULL, 0, NULL, NULL, 0}, /* ALREADY */
    };
    bindlog_result out[8];
    size_t ei = 777;
    assert_int_equal(bindlog_apply_batch(f->s, ev, 8, out, &ei), 0);
    ASSERT_RES(out[0].outcome, out[0], BINDLOG_APPLIED, 1, 1, "A");
    ASSERT_RES(out[1].outcome, out[1], BINDLOG_ALREADY, 0, 1, "A");
    ASSERT_RES(out[2].outcome, out[2], BINDLOG_STALE, 0, 1, "A");
    ASSERT_RES(out[3].outcome, out[3], BINDLOG_MOVED, 0, 1, "A");
    ASSERT_RES(out[4].outcome, out[4], BINDLOG_MOVED, 0, 1, "A");
    ASSERT_RES(out[5].outcome, out[5], BINDLOG_APPLIED, 2, 2, "B");
    ASSERT_RES(out[6].outcome, out[6], BINDLOG_APPLIED, 3, 3, "");
    ASSERT_RES(out[7].outcome, out[7], BINDLOG_ALREADY, 0, 3, "");
    assert_int_equal(head_lsn(f->s), 3);
    assert_no_session(f->s, "C");
    /* out may be NULL */
    bindlog_event one = {BINDLOG_EVENT_BIND, "k", "E", NULL, 0, NULL, NULL, 0};
    assert_int_equal(bindlog_apply_batch(f->s, &one, 1, NULL, NULL), 0);
    binding(f->s, "k", "E", 4);
}

static void api__batch_empty_noop(void **state)
{
    fx *f = *state;
    bindlog_event ev = {BINDLOG_EVENT_BIND, "k", "A", NULL, 0, NULL, NULL, 0};
    bindlog_result out;
    size_t ei = 777;
    assert_int_equal(bindlog_apply_batch(f->s, &ev, 0, &out, &ei), 0);
    assert_int_equal(bindlog_apply_batch(f->s, NULL, 0, NULL, NULL), 0);
    assert_int_equal(head_lsn(f->s), 0);
    binding(f->s, "k", "", 0);
}

/* Independent events: a refusal fails alone, the rest apply in order, each
 * seeing those before it that applied. */
static void api__apply_each_refusals_fail_alone(void **state)
{
    fx *f = *state;
    bindlog_result r;
    ASSERT_RES(bindlog_bind(f->s, "x", "X", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 1, 1,
               "X");
    bindlog_event ev[] = {
        {BINDLOG_EVENT_BIND, "k", "A", "", 0, NULL, NULL, 0},
        {BINDLOG_EVENT_BIND, "k2", "X", "", 0, NULL, NULL, 0},       /* X is x's: ECONFLICT */
        {99, "k", NULL, NULL, 0, NULL, NULL, 0},                     /* no such type: EINVAL */
        {BINDLOG_EVENT_SPLIT, "k", "B", "A", 1, NULL, NULL, 0},      /* sees event 0 */
        {BINDLOG_EVENT_SPLIT, "k", "C", "A", 1, NULL, NULL, 0},      /* A is no longer bound */
        {BINDLOG_EVENT_NEW_SESSION, "k3", "A", NULL, 0, NULL, NULL, 0}, /* A exists: EEXIST */
        {BINDLOG_EVENT_INVALIDATE, "x", NULL, NULL, 0, NULL, NULL, 0},
    };
    const size_t n = sizeof ev / sizeof ev[0];
    bindlog_result out[sizeof ev / sizeof ev[0]];
    int codes[sizeof ev / sizeof ev[0]];
    char msgs[sizeof ev / sizeof ev[0]][BINDLOG_EACH_MESSAGE_MAX];
    assert_int_equal(bindlog_apply_each(f->s, ev, n, out, codes, msgs), 0);
    assert_string_equal(bindlog_last_error(), "");
    assert_int_equal(codes[0], BINDLOG_APPLIED);
    assert_int_equal(codes[1], BINDLOG_ECONFLICT);
    assert_int_equal(codes[2], BINDLOG_EINVAL);
    assert_int_equal(codes[3], BINDLOG_APPLIED);
    assert_true(codes[4] == BINDLOG_MOVED || codes[4] == BINDLOG_STALE);
    assert_int_equal(codes[5], BINDLOG_EEXIST);
    assert_int_equal(codes[6], BINDLOG_APPLIED);
    ASSERT_RES(codes[0], out[0], BINDLOG_APPLIED, 2, 1, "A");
    ASSERT_RES(codes[3], out[3], BINDLOG_APPLIED, 3, 1, "B");
    ASSERT_RES(codes[6], out[6], BINDLOG_APPLIED, 4, 2, "X");
    assert_int_equal(head_lsn(f->s), 4);
    binding(f->s, "k", "B", 1);
    binding(f->s, "k2", "", 0);
    binding(f->s, "x", "X", 2);
    assert_no_session(f->s, "C");
    /* each refusal in the words its single call would have had */
    assert_string_equal(msgs[0], "");
    assert_string_equal(msgs[3], "");
    assert_non_null(strstr(msgs[1], "bind k2: "));
    assert_non_null(strstr(msgs[1], "x")); /* the key that holds X */
    assert_non_null(strstr(msgs[2], "k: "));
    assert_non_null(strstr(msgs[5], "new_session k3: "));
    assert_int_equal(bindlog_bind(f->s, "k2", "X", "", NULL, NULL, 0, &r), BINDLOG_ECONFLICT);
    assert_string_equal(msgs[1], bindlog_last_error());

    /* the arguments */
    assert_int_equal(bindlog_apply_each(f->s, ev, n, out, NULL, NULL), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "codes is NULL"));
    assert_int_equal(bindlog_apply_each(f->s, NULL, 2, out, codes, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_apply_each(NULL, ev, n, out, codes, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_apply_each(f->s, ev, 0, NULL, NULL, NULL), 0);
    assert_int_equal(head_lsn(f->s), 4);
    /* calls are counted by type and result, as any write */
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(f->s, &st), 0);
    assert_true(st.events[BINDLOG_EVENT_SPLIT][BINDLOG_APPLIED] >= 1);
    assert_true(st.events[BINDLOG_EVENT_BIND][BINDLOG_STAT_ERROR] >= 1); /* the ECONFLICT */
}

/* More than an eighth of the log in one call: cut into several group
 * commits, every event still applied in order. */
static void api__apply_each_larger_than_the_log_budget(void **state)
{
    fx *f = *state;
    enum { N = 200 };
    static char origin[40000];
    memset(origin, 'o', sizeof origin);
    bindlog_event ev[N];
    char keys[N][32], ids[N][32];
    int codes[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "big:%d", i);
        snprintf(ids[i], sizeof ids[i], "S%d", i);
        ev[i] = (bindlog_event){BINDLOG_EVENT_BIND, keys[i], ids[i], "", 0, NULL, origin,
                                sizeof origin};
    }
    bindlog_stats before, after;
    assert_int_equal(bindlog_stats_get(f->s, &before), 0);
    assert_int_equal(bindlog_apply_each(f->s, ev, N, NULL, codes, NULL), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(codes[i], BINDLOG_APPLIED);
    assert_int_equal(bindlog_stats_get(f->s, &after), 0);
    assert_int_equal(after.head_lsn, before.head_lsn + N);
    /* 200 x ~120 KB is about 3 times the default 8 MiB log: several groups */
    assert_true(after.commits - before.commits >= 3);
    binding(f->s, "big:199", "S199", 1);
}

/* ---- iterators ------------------------------------------------------------------- */

static void api__log_iter_range(void **state)
{
    fx *f = *state;
    char id[16];
    for (int i = 1; i <= 10; i++) {
        snprintf(id, sizeof id, "s%d", i);
        assert_int_equal(bindlog_new_session(f->s, "k", id, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    }
    struct {
        uint64_t from, to, first, n;
    } cases[] = {
        {0, UINT64_MAX, 1, 10}, {3, 6, 3, 4}, {8, 100, 8, 3}, {11, UINT64_MAX, 0, 0},
        {5, 5, 5, 1},           {0, 2, 1, 2}, {7, 3, 0, 0},   {1, 10, 1, 10},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        bindlog_iter *it = NULL;
        bindlog_record rec;
        uint64_t n = 0;
        int rc;
        assert_int_equal(bindlog_log_iter(f->s, cases[c].from, cases[c].to, &it), 0);
        while ((rc = bindlog_iter_next_record(it, &rec)) == 1) {
            assert_int_equal(rec.lsn, cases[c].first + n);
            snprintf(id, sizeof id, "s%d", (int)rec.lsn);
            assert_string_equal(rec.session_id, id);
            assert_int_equal(rec.generation, rec.lsn);
            n++;
        }
        assert_int_equal(rc, 0);
        /* at the end it stays at the end */
        assert_int_equal(bindlog_iter_next_record(it, &rec), 0);
        bindlog_iter_close(it);
        assert_int_equal(n, cases[c].n);
    }
    /* a snapshot: writes after opening are not seen */
    bindlog_iter *it = NULL;
    bindlog_record rec;
    assert_int_equal(bindlog_log_iter(f->s, 10, UINT64_MAX, &it), 0);
    assert_int_equal(bindlog_new_session(f->s, "k", "s11", NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    assert_int_equal(bindlog_iter_next_record(it, &rec), 1);
    assert_int_equal(rec.lsn, 10);
    assert_int_equal(bindlog_iter_next_record(it, &rec), 0);
    bindlog_iter_close(it);
}

static void api__history_iter_only_that_key(void **state)
{
    fx *f = *state;
    bindlog_result r;
    /* keys that are prefixes of each other must not bleed into one another */
    assert_int_equal(bindlog_bind(f->s, "a", "A1", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_bind(f->s, "ab", "B1", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_split(f->s, "a", "A1", "A2", 1, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_bind(f->s, "a\x01", "C1", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_invalidate(f->s, "ab", NULL, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_split(f->s, "a", "A1", "A3", 1, NULL, 0, &r), BINDLOG_MOVED);
    assert_int_equal(bindlog_unbind(f->s, "a", NULL, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_bind(f->s, "b", "D1", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);

    struct {
        const char *key;
        uint64_t lsns[4];
        size_t n;
    } want[] = {
        {"a", {1, 3, 6}, 3}, {"ab", {2, 5}, 2}, {"a\x01", {4}, 1}, {"b", {7}, 1}, {"zz", {0}, 0},
    };
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        bindlog_iter *it = NULL;
        bindlog_record rec;
        size_t n = 0;
        int rc;
        assert_int_equal(bindlog_history_iter(f->s, want[w].key, &it), 0);
        while ((rc = bindlog_iter_next_record(it, &rec)) == 1) {
            assert_true(n < want[w].n);
            assert_int_equal(rec.lsn, want[w].lsns[n]);
            assert_string_equal(rec.key, want[w].key);
            n++;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(n, want[w].n);
        bindlog_iter_close(it);
    }
    bindlog_iter *it = NULL;
    assert_int_equal(bindlog_history_iter(f->s, "", &it), BINDLOG_EINVAL);
    assert_int_equal(bindlog_history_iter(f->s, NULL, &it), BINDLOG_EINVAL);
}

static void collect_sessions(bindlog_iter *it, char ids[][BINDLOG_ID_MAX + 1], size_t cap,
                             size_t *n)
{
    bindlog_session ss;
    int rc;
    *n = 0;
    while ((rc = bindlog_iter_next_session(it, &ss, NULL, 0)) == 1) {
        assert_true(*n < cap);
        strcpy(ids[(*n)++], ss.session_id);
    }
    assert_int_equal(rc, 0);
    bindlog_iter_close(it);
}

static void api__lineage_children_and_ancestors(void **state)
{
    fx *f = *state;
    bindlog_result r;
    char ids[16][BINDLOG_ID_MAX + 1];
    size_t n;
    bindlog_iter *it = NULL;

    assert_int_equal(bindlog_bind(f->s, "k", "A", NULL, NULL, "oa", 2, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_split(f->s, "k", "A", "B", 1, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_split(f->s, "k", "B", "C", 1, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_split(f->s, "k", "C", "D", 1, NULL, 0, &r), BINDLOG_APPLIED);
    /* C gets a second child: resume C, then /new from it */
    assert_int_equal(bindlog_bind(f->s, "k", "C", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_new_session(f->s, "k", "C0", NULL, NULL, 0, &r), BINDLOG_APPLIED);
    /* an unrelated root */
    assert_int_equal(bindlog_bind(f->s, "k2", "Z", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);

    assert_int_equal(bindlog_ancestors_iter(f->s, "D", &it), 0);
    collect_sessions(it, ids, 16, &n);
    assert_int_equal(n, 3);
    assert_string_equal(ids[0], "C");
    assert_string_equal(ids[1], "B");
    assert_string_equal(ids[2], "A");

    assert_int_equal(bindlog_ancestors_iter(f->s, "C0", &it), 0);
    collect_sessions(it, ids, 16, &n);
    assert_int_equal(n, 3);
    assert_string_equal(ids[0], "C");
    assert_string_equal(ids[1], "B");
    assert_string_equal(ids[2], "A");

    assert_int_equal(bindlog_ancestors_iter(f->s, "A", &it), 0);
    collect_sessions(it, ids, 16, &n);
    assert_int_equal(n, 0);

    it = NULL;
    assert_int_equal(bindlog_ancestors_iter(f->s, "nope", &it), BINDLOG_ENOTFOUND);
    bindlog_iter_close(it);

    assert_int_equal(bindlog_children_iter(f->s, "A", &it), 0);
    collect_sessions(it, ids, 16, &n);
    assert_int_equal(n, 1);
    assert_string_equal(ids[0], "B");

    assert_int_equal(bindlog_children_iter(f->s, "C", &it), 0);
    collect_sessions(it, ids, 16, &n);
    assert_int_equal(n, 2);
    assert_string_equal(ids[0], "C0"); /* id order */
    assert_string_equal(ids[1], "D");

    assert_int_equal(bindlog_children_iter(f->s, "D", &it), 0);
    collect_sessions(it, ids, 16, &n);
    assert_int_equal(n, 0);
    assert_int_equal(bindlog_children_iter(f->s, "nope", &it), 0);
    collect_sessions(it, ids, 16, &n);
    assert_int_equal(n, 0);

    /* the sessions an ancestors iterator returns carry their fields and origin */
    bindlog_session ss;
    char buf[8];
    assert_int_equal(bindlog_ancestors_iter(f->s, "B", &it), 0);
    assert_int_equal(bindlog_iter_next_session(it, &ss, buf, sizeof buf), 1);
    assert_string_equal(ss.session_id, "A");
    assert_string_equal(ss.end_reason, "compression");
    assert_int_equal(ss.origin_len, 2);
    assert_memory_equal(buf, "oa", 2);
    assert_int_equal(bindlog_iter_next_session(it, &ss, buf, sizeof buf), 0);
    bindlog_iter_close(it);
}

static int bytecmp(const char *a, const char *b)
{
    return strcmp(a, b); /* unsigned bytes; a prefix sorts first */
}

static void api__bindings_and_sessions_iter_byte_order(void **state)
{
    fx *f = *state;
    const char *keys[] = {"b", "a", "ab", "a\x01", "caf\xc3\xa9", "B", "\xff", "a\x7f", "aa"};
    const char *ids[] = {"s-b", "s-a", "s-ab", "s-\x80", "S", "s", "s-\xff", "s-aa", "t"};
    const size_t n = sizeof keys / sizeof keys[0];
    for (size_t i = 0; i < n; i++)
        assert_int_equal(bindlog_bind(f->s, keys[i], ids[i], NULL, NULL, NULL, 0, NULL),
                         BINDLOG_APPLIED);
    assert_int_equal(bindlog_unbind(f->s, "ab", NULL, NULL), BINDLOG_APPLIED);

    bindlog_iter *it = NULL;
    bindlog_binding b, prev;
    memset(&prev, 0, sizeof prev);
    size_t count = 0;
    int rc;
    assert_int_equal(bindlog_bindings_iter(f->s, &it), 0);
    while ((rc = bindlog_iter_next_binding(it, &b)) == 1) {
        if (count > 0)
            assert_true(bytecmp(prev.key, b.key) < 0);
        size_t i;
        for (i = 0; i < n && strcmp(keys[i], b.key) != 0; i++)
            ;
        assert_true(i < n);
        if (strcmp(b.key, "ab") == 0) {
            assert_string_equal(b.session_id, "");
            assert_int_equal(b.generation, 2);
        } else {
            assert_string_equal(b.session_id, ids[i]);
            assert_int_equal(b.generation, 1);
            assert_int_equal(b.lsn, i + 1);
        }
        prev = b;
        count++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(count, n);
    bindlog_iter_close(it);

    bindlog_session ss, sprev;
    memset(&sprev, 0, sizeof sprev);
    count = 0;
    assert_int_equal(bindlog_sessions_iter(f->s, &it), 0);
    while ((rc = bindlog_iter_next_session(it, &ss, NULL, 0)) == 1) {
        if (count > 0)
            assert_true(bytecmp(sprev.session_id, ss.session_id) < 0);
        size_t i;
        for (i = 0; i < n && strcmp(ids[i], ss.session_id) != 0; i++)
            ;
        assert_true(i < n);
        assert_string_equal(ss.key, keys[i]);
        assert_int_equal(ss.created_lsn, i + 1);
        assert_int_equal(ss.ended_lsn, strcmp(keys[i], "ab") == 0 ? n + 1 : 0);
        sprev = ss;
        count++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(count, n);
    bindlog_iter_close(it);
}

static void api__iter_wrong_kind_einval(void **state)
{
    fx *f = *state;
    assert_int_equal(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    assert_int_equal(bindlog_split(f->s, "k", "A", "B", 1, NULL, 0, NULL), BINDLOG_APPLIED);
    bindlog_record rec;
    bindlog_binding b;
    bindlog_session ss;
    bindlog_iter *it = NULL;

    assert_int_equal(bindlog_log_iter(f->s, 0, UINT64_MAX, &it), 0);
    assert_int_equal(bindlog_iter_next_binding(it, &b), BINDLOG_EINVAL);
    assert_int_equal(bindlog_iter_next_session(it, &ss, NULL, 0), BINDLOG_EINVAL);
    assert_int_equal(bindlog_iter_next_record(it, &rec), 1); /* still usable */
    bindlog_iter_close(it);

    assert_int_equal(bindlog_history_iter(f->s, "k", &it), 0);
    assert_int_equal(bindlog_iter_next_binding(it, &b), BINDLOG_EINVAL);
    assert_int_equal(bindlog_iter_next_session(it, &ss, NULL, 0), BINDLOG_EINVAL);
    bindlog_iter_close(it);

    assert_int_equal(bindlog_bindings_iter(f->s, &it), 0);
    assert_int_equal(bindlog_iter_next_record(it, &rec), BINDLOG_EINVAL);
    assert_int_equal(bindlog_iter_next_session(it, &ss, NULL, 0), BINDLOG_EINVAL);
    assert_int_equal(bindlog_iter_next_binding(it, &b), 1);
    bindlog_iter_close(it);

    assert_int_equal(bindlog_sessions_iter(f->s, &it), 0);
    assert_int_equal(bindlog_iter_next_record(it, &rec), BINDLOG_EINVAL);
    assert_int_equal(bindlog_iter_next_binding(it, &b), BINDLOG_EINVAL);
    bindlog_iter_close(it);

    assert_int_equal(bindlog_children_iter(f->s, "A", &it), 0);
    assert_int_equal(bindlog_iter_next_record(it, &rec), BINDLOG_EINVAL);
    assert_int_equal(bindlog_iter_next_binding(it, &b), BINDLOG_EINVAL);
    bindlog_iter_close(it);

    assert_int_equal(bindlog_ancestors_iter(f->s, "B", &it), 0);
    assert_int_equal(bindlog_iter_next_record(it, &rec), BINDLOG_EINVAL);
    assert_int_equal(bindlog_iter_next_binding(it, &b), BINDLOG_EINVAL);
    bindlog_iter_close(it);

    /* NULL iterator / NULL item */
    assert_int_equal(bindlog_iter_next_record(NULL, &rec), BINDLOG_EINVAL);
    assert_int_equal(bindlog_iter_next_binding(NULL, &b), BINDLOG_EINVAL);
    assert_int_equal(bindlog_iter_next_session(NULL, &ss, NULL, 0), BINDLOG_EINVAL);
    bindlog_iter_close(NULL);
}

/* ---- statistics ------------------------------------------------------------------- */

static void api__stats_counts(void **state)
{
    fx *f = *state;
    bindlog_result r;
    bindlog_stats st = stats(f->s);
    assert_int_equal(st.head_lsn, 0);
    assert_int_equal(st.bindings, 0);
    assert_int_equal(st.sessions, 0);
    assert_int_equal(st.durability, BINDLOG_DURABILITY_NONE);
    /* the etcd store keeps its own format 1 (src/etcd/etcd_store.h) */
    assert_int_equal(st.format_version, tu_backend_is_etcd() ? 1u : BINDLOG_FORMAT_VERSION);

    assert_int_equal(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), BINDLOG_ALREADY);
    assert_int_equal(bindlog_bind(f->s, "k", "B", "X", NULL, NULL, 0, &r), BINDLOG_MOVED);
    assert_int_equal(bindlog_bind(f->s, "k2", "A", NULL, NULL, NULL, 0, &r), BINDLOG_ECONFLICT);
    assert_int_equal(bindlog_split(f->s, "k", "A", "C", 5, NULL, 0, &r), BINDLOG_STALE);
    assert_int_equal(bindlog_split(f->s, "k", "A", "C", 1, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_split(f->s, "k", "A", "C", 1, NULL, 0, &r), BINDLOG_ALREADY);
    assert_int_equal(bindlog_split(f->s, "k", "A", "D", 1, NULL, 0, &r), BINDLOG_MOVED);
    assert_int_equal(bindlog_split(f->s, "k2", "A", "C", 1, NULL, 0, &r), BINDLOG_ENOTFOUND);

    st = stats(f->s);
    assert_int_equal(st.head_lsn, 2);
    assert_int_equal(st.log_records, 2);
    assert_int_equal(st.bindings, 1);
    assert_int_equal(st.live_bindings, 1);
    assert_int_equal(st.sessions, 2);
    assert_int_equal(st.live_sessions, 1);

    assert_int_equal(bindlog_invalidate(f->s, "k", NULL, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_invalidate(f->s, "k2", NULL, &r), BINDLOG_ENOTFOUND);
    assert_int_equal(bindlog_new_session(f->s, "k", "D", NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_new_session(f->s, "k", "D", NULL, NULL, 0, &r), BINDLOG_ALREADY);
    assert_int_equal(bindlog_new_session(f->s, "k3", "A", NULL, NULL, 0, &r), BINDLOG_EEXIST);
    assert_int_equal(bindlog_bind(f->s, "k4", "E", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_unbind(f->s, "k", NULL, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_unbind(f->s, "k", NULL, &r), BINDLOG_ALREADY);
    assert_int_equal(bindlog_unbind(f->s, "k5", NULL, &r), BINDLOG_ENOTFOUND);

    st = stats(f->s);
    assert_int_equal(st.head_lsn, 6);
    assert_int_equal(st.log_records, 6);
    assert_int_equal(st.base_lsn, 0);
    assert_int_equal(st.bindings, 2);      /* k (tombstone), k4 */
    assert_int_equal(st.live_bindings, 1); /* k4 */
    assert_int_equal(st.sessions, 4);      /* A C D E */
    assert_int_equal(st.live_sessions, 1); /* E */
    assert_int_equal(st.applied[BINDLOG_EVENT_BIND], 2);
    assert_int_equal(st.applied[BINDLOG_EVENT_NEW_SESSION], 1);
    assert_int_equal(st.applied[BINDLOG_EVENT_SPLIT], 1);
    assert_int_equal(st.applied[BINDLOG_EVENT_INVALIDATE], 1);
    assert_int_equal(st.applied[BINDLOG_EVENT_UNBIND], 1);

    const uint64_t want[BINDLOG_EVENT_COUNT][BINDLOG_STAT_COLUMNS] = {
        [BINDLOG_EVENT_BIND] = {2, 1, 0, 1, 1},   [BINDLOG_EVENT_NEW_SESSION] = {1, 1, 0, 0, 1},
        [BINDLOG_EVENT_SPLIT] = {1, 1, 1, 1, 1},  [BINDLOG_EVENT_INVALIDATE] = {1, 0, 0, 0, 1},
        [BINDLOG_EVENT_UNBIND] = {1, 1, 0, 0, 1},
    };
    for (int t = 1; t < BINDLOG_EVENT_COUNT; t++)
        for (int c = 0; c < BINDLOG_STAT_COLUMNS; c++)
            if (st.events[t][c] != want[t][c])
                fail_msg("events[%s][%d] = %llu, want %llu", bindlog_event_name(t), c,
                         (unsigned long long)st.events[t][c], (unsigned long long)want[t][c]);
    assert_true(st.commits >= 6);
    assert_true(st.grouped_events >= 6);
    if (!tu_is_etcd_location(f->dir))
        assert_true(st.map_size > 0); /* LMDB only: etcd has no map */
    assert_true(st.file_size > 0);

    /* applied[] is persistent; events[] belongs to the handle */
    bindlog_close(f->s);
    f->s = xopen(f->dir, 0);
    st = stats(f->s);
    assert_int_equal(st.applied[BINDLOG_EVENT_BIND], 2);
    assert_int_equal(st.applied[BINDLOG_EVENT_UNBIND], 1);
    assert_int_equal(st.live_bindings, 1);
    assert_int_equal(st.live_sessions, 1);
    assert_int_equal(st.sessions, 4);
    assert_int_equal(st.bindings, 2);
}

/* Rejected calls count too: "calls by type and result" (bindlog.h), and an
 * argument error is a result.  Kept apart from api__stats_counts so that a
 * library that counts only state errors fails here alone. */
static void api__stats_count_argument_errors(void **state)
{
    fx *f = *state;
    bindlog_result r;
    assert_int_equal(bindlog_bind(f->s, "", "A", NULL, NULL, NULL, 0, &r), BINDLOG_EINVAL);
    assert_int_equal(bindlog_split(f->s, "k", "A", "A", 1, NULL, 0, &r), BINDLOG_EINVAL);
    assert_int_equal(bindlog_unbind(f->s, "k", "bad\n", &r), BINDLOG_EINVAL);
    bindlog_stats st = stats(f->s);
    assert_int_equal(st.events[BINDLOG_EVENT_BIND][BINDLOG_STAT_ERROR], 1);
    assert_int_equal(st.events[BINDLOG_EVENT_SPLIT][BINDLOG_STAT_ERROR], 1);
    assert_int_equal(st.events[BINDLOG_EVENT_UNBIND][BINDLOG_STAT_ERROR], 1);
    assert_int_equal(st.events[BINDLOG_EVENT_INVALIDATE][BINDLOG_STAT_ERROR], 0);
}

/* Calls are counted per handle: a second handle of the same process (a
 * metrics scraper beside the gateway's writer) starts from zero and counts
 * only its own calls, while applied[] is the store's. */
static void api__stats_calls_per_handle(void **state)
{
    fx *f = *state;
    bindlog_result r;
    bindlog *s2 = xopen(f->dir, 0);
    assert_int_equal(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    assert_int_equal(bindlog_bind(f->s, "k", "A", NULL, NULL, NULL, 0, &r), BINDLOG_ALREADY);
    assert_int_equal(bindlog_split(s2, "k", "A", "B", 99, NULL, 0, &r), BINDLOG_STALE);
    bindlog_event ev[2] = {{BINDLOG_EVENT_INVALIDATE, "k", NULL, NULL, 0, NULL, NULL, 0},
                           {BINDLOG_EVENT_UNBIND, "nobody", NULL, NULL, 0, NULL, NULL, 0}};
    size_t at = 0;
    assert_int_equal(bindlog_apply_batch(s2, ev, 2, NULL, &at), BINDLOG_ENOTFOUND);

    bindlog_stats a = stats(f->s), b = stats(s2);
    assert_int_equal(a.events[BINDLOG_EVENT_BIND][BINDLOG_APPLIED], 1);
    assert_int_equal(a.events[BINDLOG_EVENT_BIND][BINDLOG_ALREADY], 1);
    assert_int_equal(a.events[BINDLOG_EVENT_SPLIT][BINDLOG_STALE], 0);
    assert_int_equal(b.events[BINDLOG_EVENT_BIND][BINDLOG_APPLIED], 0);
    assert_int_equal(b.events[BINDLOG_EVENT_SPLIT][BINDLOG_STALE], 1);
    /* the failed batch: one error, for the event at fault, nothing applied */
    assert_int_equal(b.events[BINDLOG_EVENT_UNBIND][BINDLOG_STAT_ERROR], 1);
    assert_int_equal(b.events[BINDLOG_EVENT_INVALIDATE][BINDLOG_APPLIED], 0);
    assert_int_equal(a.events[BINDLOG_EVENT_UNBIND][BINDLOG_STAT_ERROR], 0);
    /* what was applied is the store's, the same through both */
    assert_int_equal(a.applied[BINDLOG_EVENT_BIND], 1);
    assert_int_equal(b.applied[BINDLOG_EVENT_BIND], 1);
    bindlog_close(s2);
}

/* ---- two handles, one store --------------------------------------------------------- */

static void api__two_handles_share_store(void **state)
{
    fx *f = *state;
    bindlog_result r;
    bindlog *s2 = xopen(f->dir, 0);
    assert_true(s2 != f->s);

    assert_int_equal(bindlog_bind(f->s, "k", "A", NULL, NULL, "o1", 2, &r), BINDLOG_APPLIED);
    binding(s2, "k", "A", 1);
    assert_origin(s2, "A", "o1", 2);
    ASSERT_RES(bindlog_split(s2, "k", "A", "B", 1, NULL, 0, &r), r, BINDLOG_APPLIED, 2, 1, "B");
    binding(f->s, "k", "B", 1);
    assert_int_equal(head_lsn(f->s), 2);
    ASSERT_RES(bindlog_split(f->s, "k", "A", "B", 1, NULL, 0, &r), r, BINDLOG_ALREADY, 0, 1, "B");

    unsigned char d1[BINDLOG_DIGEST_SIZE], d2[BINDLOG_DIGEST_SIZE];
    uint64_t h1 = 0, h2 = 0;
    assert_int_equal(bindlog_digest(f->s, d1, &h1), 0);
    assert_int_equal(bindlog_digest(s2, d2, &h2), 0);
    assert_memory_equal(d1, d2, sizeof d1);
    assert_int_equal(h1, 2);
    assert_int_equal(h2, 2);

    /* closing one leaves the other working */
    bindlog_close(f->s);
    f->s = NULL;
    ASSERT_RES(bindlog_invalidate(s2, "k", NULL, &r), r, BINDLOG_APPLIED, 3, 2, "B");
    binding(s2, "k", "B", 2);
    bindlog_iter *it = NULL;
    assert_int_equal(bindlog_log_iter(s2, 0, UINT64_MAX, &it), 0);
    bindlog_record rec;
    int n = 0;
    while (bindlog_iter_next_record(it, &rec) == 1)
        n++;
    assert_int_equal(n, 3);
    bindlog_iter_close(it);

    /* a third handle opened now sees everything; then close in open order */
    bindlog *s3 = xopen(f->dir, 0);
    binding(s3, "k", "B", 2);
    ASSERT_RES(bindlog_unbind(s3, "k", NULL, &r), r, BINDLOG_APPLIED, 4, 3, "");
    binding(s2, "k", "", 3);
    bindlog_close(s2);
    binding(s3, "k", "", 3);
    f->s = s3;
    /* and a read-only handle beside a writable one */
    bindlog *ro = xopen(f->dir, 1);
    binding(ro, "k", "", 3);
    assert_int_equal(bindlog_bind(ro, "k", "Z", NULL, NULL, NULL, 0, &r), BINDLOG_EREADONLY);
    ASSERT_RES(bindlog_bind(f->s, "k", "Z", NULL, NULL, NULL, 0, &r), r, BINDLOG_APPLIED, 5, 4,
               "Z");
    binding(ro, "k", "Z", 4);
    bindlog_close(ro);
    binding(f->s, "k", "Z", 4);
    assert_non_null(bindlog_path(f->s));
    assert_string_equal(bindlog_path(f->s), f->dir);
}

/* ---- opening what is not a store -------------------------------------------------- */

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

static void api__open_unrelated_dir_enotstore(void **state)
{
    fx *f = *state;
    char path[1200];
    int rc;
    if (tu_is_etcd_location(f->dir)) {
        /* a prefix holding someone else's key */
        assert_int_equal(tu_etcd_put(f->dir, "notes.txt", "remember the milk\n", 18), 0);
        assert_null(open_store(f->dir, BINDLOG_DURABILITY_NONE, 0, &rc));
        assert_int_equal(rc, BINDLOG_ENOTSTORE);
        assert_null(open_store(f->dir, BINDLOG_DURABILITY_NONE, 1, &rc));
        assert_int_equal(rc, BINDLOG_ENOTSTORE);
        assert_int_equal(tu_etcd_count(f->dir), 1); /* nothing was added */
        return;
    }
    assert_int_equal(mkdir(f->dir, 0700), 0);
    snprintf(path, sizeof path, "%s/notes.txt", f->dir);
    write_file(path, "remember the milk\n", 18);

    assert_null(open_store(f->dir, BINDLOG_DURABILITY_NONE, 0, &rc));
    assert_int_equal(rc, BINDLOG_ENOTSTORE);
    /* nothing was added to the directory */
    snprintf(path, sizeof path, "%s/data.mdb", f->dir);
    struct stat st;
    assert_int_equal(stat(path, &st), -1);
    assert_int_equal(errno, ENOENT);
    snprintf(path, sizeof path, "%s/notes.txt", f->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 18);
}

/*
 * A data.mdb that is not an LMDB file.  Either BINDLOG_ENOTSTORE (it is not a
 * bindlog store: LMDB finds no valid meta page, MDB_INVALID) or
 * BINDLOG_ECORRUPT (it is a store whose file is damaged) is a truthful answer:
 * from garbage alone the library cannot tell whether the file was ever a
 * store.  What matters is that it refuses and leaves the file alone.
 */
static void api__open_garbage_data_mdb_refused(void **state)
{
    fx *f = *state;
    if (tu_is_etcd_location(f->dir))
        skip(); /* LMDB's data file; test_etcd_backend forges etcd meta instead */
    char path[1200];
    assert_int_equal(mkdir(f->dir, 0700), 0);
    snprintf(path, sizeof path, "%s/data.mdb", f->dir);
    enum { N = 16384 };
    unsigned char *junk = malloc(N);
    assert_non_null(junk);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < N; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        junk[i] = (unsigned char)x;
    }
    write_file(path, junk, N);

    int rc;
    assert_null(open_store(f->dir, BINDLOG_DURABILITY_NONE, 0, &rc));
    if (rc != BINDLOG_ENOTSTORE && rc != BINDLOG_ECORRUPT)
        fail_msg("garbage data.mdb: got %d (%s), want ENOTSTORE or ECORRUPT", rc,
                 bindlog_code_name(rc));
    assert_null(open_store(f->dir, BINDLOG_DURABILITY_NONE, 1, &rc));
    if (rc != BINDLOG_ENOTSTORE && rc != BINDLOG_ECORRUPT)
        fail_msg("garbage data.mdb (read-only): got %d (%s)", rc, bindlog_code_name(rc));

    /* the file is untouched */
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    unsigned char *back = malloc(N + 1);
    assert_non_null(back);
    assert_int_equal(fread(back, 1, N + 1, fp), N);
    fclose(fp);
    assert_memory_equal(back, junk, N);
    free(back);
    free(junk);
}

static void api__open_bad_arguments(void **state)
{
    fx *f = *state;
    bindlog *s = NULL;
    assert_int_equal(bindlog_open(NULL, f->dir, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_open(&s, NULL, NULL), BINDLOG_EINVAL);
    assert_null(s);
    assert_int_equal(bindlog_open(&s, "", NULL), BINDLOG_EINVAL);
    assert_null(s);
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.version = 0;
    assert_int_equal(bindlog_open(&s, f->dir, &o), BINDLOG_EINVAL);
    assert_null(s);
    o = (bindlog_options)BINDLOG_OPTIONS_INIT;
    o.durability = 7;
    assert_int_equal(bindlog_open(&s, f->dir, &o), BINDLOG_EINVAL);
    assert_null(s);
    /* opts NULL = defaults: creates the store */
    assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
    assert_non_null(s);
    assert_int_equal(stats(s).durability, BINDLOG_DURABILITY_FULL);
    bindlog_close(s);
}

static void api__close_null_noop(void **state)
{
    (void)state;
    bindlog_close(NULL);
    bindlog_iter_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(api__bind_first_contact_applied),
        TEST(api__bind_retry_already_even_with_mismatched_expect),
        TEST(api__bind_expect_mismatch_moved),
        TEST(api__bind_expect_empty_only_if_unbound),
        TEST(api__bind_live_session_of_other_key_econflict),
        TEST(api__bind_reopen_ended_session),
        TEST(api__bind_default_reason_switch),
        TEST(api__new_session_parent_is_current_binding),
        TEST(api__new_session_root_when_unbound),
        TEST(api__new_session_existing_id_eexist),
        TEST(api__new_session_retry_already),
        TEST(api__split_unbound_enotfound),
        TEST(api__split_already_even_with_stale_generation),
        TEST(api__split_stale),
        TEST(api__split_moved),
        TEST(api__split_child_exists_eexist),
        TEST(api__split_parent_equals_child_einval),
        TEST(api__split_origin_null_copies_parent),
        TEST(api__split_generation_unchanged),
        TEST(api__invalidate_bumps_generation_keeps_binding),
        TEST(api__invalidate_unbound_enotfound),
        TEST(api__unbind_leaves_tombstone),
        TEST(api__generation_never_goes_backwards),
        TEST(api__lsn_dense_from_one),
        TEST(api__time_never_decreases),
        TEST(api__key_any_bytes_but_nul),
        TEST(api__bad_arguments_einval),
        TEST(api__limits_exactly_at_max_accepted),
        TEST(api__readonly_handle_ereadonly),
        TEST_CLOSED(api__readonly_open_missing_store_enotfound),
        TEST_CLOSED(api__strerror_and_code_name),
        TEST(api__session_get_origin_copy),
        TEST(api__batch_ordered_each_sees_previous),
        TEST(api__batch_error_writes_nothing),
        TEST(api__batch_rejections_do_not_abort),
        TEST(api__batch_empty_noop),
        TEST(api__apply_each_refusals_fail_alone),
        TEST(api__apply_each_larger_than_the_log_budget),
        TEST(api__log_iter_range),
        TEST(api__history_iter_only_that_key),
        TEST(api__lineage_children_and_ancestors),
        TEST(api__bindings_and_sessions_iter_byte_order),
        TEST(api__iter_wrong_kind_einval),
        TEST(api__stats_counts),
        TEST(api__stats_count_argument_errors),
        TEST(api__stats_calls_per_handle),
        TEST(api__two_handles_share_store),
        TEST_CLOSED(api__open_unrelated_dir_enotstore),
        TEST_CLOSED(api__open_garbage_data_mdb_refused),
        TEST_CLOSED(api__open_bad_arguments),
        TEST_CLOSED(api__close_null_noop),
    };
    if (tu_backend_skip())
        return 0;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
