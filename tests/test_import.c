/*
 * test_import.c -- bindlog_import_entries(): a gateway's routing table
 * moved in.  Entries go in in time order with their own times, each
 * applied or refused alone; a second run is all ALREADY; refusals name
 * their entry through its code; many entries share few commits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bindlog.h"
#include "testutil.h"

#define T0 1767225600000LL /* 2026-01-01T00:00:00Z */

typedef struct fx {
    char *dir;
    bindlog *s;
} fx;

static int64_t fixed_clock(void *ctx) { return *(const int64_t *)ctx; }
static int64_t g_now = T0 + 86400000; /* the handle's clock: a day later */

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.clock_ms = fixed_clock;
    o.clock_ctx = &g_now;
    f->dir = tu_mkdtemp("import");
    assert_int_equal(bindlog_open(&f->s, f->dir, &o), 0);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    bindlog_close(f->s);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* Every record of the log, in order: key, time and reason checked by the
 * caller through these arrays (at most `max`). */
static size_t read_log(bindlog *s, char keys[][32], int64_t *times, size_t max)
{
    bindlog_iter *it;
    bindlog_record r;
    size_t n = 0;
    assert_int_equal(bindlog_log_iter(s, 0, UINT64_MAX, &it), 0);
    while (bindlog_iter_next_record(it, &r) == 1) {
        assert_true(n < max);
        assert_int_equal(r.type, BINDLOG_EVENT_BIND);
        assert_string_equal(r.reason, "import");
        snprintf(keys[n], 32, "%s", r.key);
        times[n++] = r.time_ms;
    }
    bindlog_iter_close(it);
    return n;
}

static void import__time_order_and_entry_times(void **state)
{
    fx *f = *state;
    bindlog_import_entry e[4] = {
        {"k:c", "S-c", T0 + 3000, "{\"c\":1}", 7},
        {"k:a", "S-a", T0 + 1000, "{\"a\":1}", 7},
        {"k:d", "S-d", T0 + 3000, NULL, 0}, /* same time as k:c: array order */
        {"k:b", "S-b", T0 + 2000, "", 0},
    };
    int codes[4];
    bindlog_result out[4];
    assert_int_equal(bindlog_import_entries(f->s, e, 4, out, codes, NULL, NULL), 0);
    assert_string_equal(bindlog_last_error(), "");
    for (int i = 0; i < 4; i++) {
        assert_int_equal(codes[i], BINDLOG_APPLIED);
        assert_string_equal(out[i].session_id, e[i].session_id);
        assert_int_equal(out[i].generation, 1);
    }
    assert_int_equal(out[1].lsn, 1); /* k:a is the oldest */
    assert_int_equal(out[2].lsn, 4);

    char keys[8][32];
    int64_t times[8];
    assert_int_equal(read_log(f->s, keys, times, 8), 4);
    const char *want[4] = {"k:a", "k:b", "k:c", "k:d"};
    const int64_t wt[4] = {T0 + 1000, T0 + 2000, T0 + 3000, T0 + 3000};
    for (int i = 0; i < 4; i++) {
        assert_string_equal(keys[i], want[i]);
        assert_int_equal(times[i], wt[i]);
    }
    /* the entry is the session's origin; the binding carries its time */
    bindlog_session se;
    char buf[16];
    assert_int_equal(bindlog_session_get(f->s, "S-c", &se, buf, sizeof buf), 0);
    assert_int_equal(se.origin_len, 7);
    assert_memory_equal(buf, "{\"c\":1}", 7);
    assert_int_equal(se.created_ms, T0 + 3000);
    bindlog_binding b;
    assert_int_equal(bindlog_get(f->s, "k:b", &b), 0);
    assert_int_equal(b.updated_ms, T0 + 2000);
}

static void import__second_run_is_already(void **state)
{
    fx *f = *state;
    bindlog_import_entry e[3] = {
        {"k1", "S1", T0 + 1, "o", 1}, {"k2", "S2", T0 + 2, "o", 1}, {"k3", "S3", T0 + 3, NULL, 0}};
    int codes[3];
    bindlog_result out[3];
    bindlog_stats st;
    assert_int_equal(bindlog_import_entries(f->s, e, 3, out, codes, NULL, NULL), 0);
    assert_int_equal(bindlog_import_entries(f->s, e, 3, out, codes, NULL, NULL), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(codes[i], BINDLOG_ALREADY);
        assert_int_equal(out[i].lsn, 0);
    }
    assert_int_equal(bindlog_stats_get(f->s, &st), 0);
    assert_int_equal(st.head_lsn, 3);
    /* every entry counted as a bind call of this handle */
    assert_int_equal(st.events[BINDLOG_EVENT_BIND][BINDLOG_APPLIED], 3);
    assert_int_equal(st.events[BINDLOG_EVENT_BIND][BINDLOG_ALREADY], 3);
}

/* Entries that cannot go in are refused alone and say why by their code;
 * everything else goes in. */
static void import__refusals_stay_alone(void **state)
{
    fx *f = *state;
    bindlog_result r;
    /* a key the gateway already moved elsewhere */
    assert_int_equal(bindlog_bind(f->s, "k:moved", "S-other", NULL, NULL, NULL, 0, &r), 0);
    char long_key[BINDLOG_KEY_MAX + 2];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    bindlog_import_entry e[8] = {
        {"k:ok1", "S1", T0 + 10, NULL, 0},
        {"", "S2", T0 + 11, NULL, 0},                    /* empty key */
        {"k:ctl", "S\x01", T0 + 12, NULL, 0},            /* control byte in the id */
        {"k:first", "S-dup", T0 + 13, NULL, 0},          /* two keys, one session: */
        {"k:second", "S-dup", T0 + 14, NULL, 0},         /*   the later is refused */
        {"k:moved", "S-mine", T0 + 15, NULL, 0},         /* bound elsewhere: MOVED */
        {long_key, "S3", T0 + 16, NULL, 0},              /* key too long */
        {"k:neg", "S4", -5, NULL, 0},                    /* a time before 1970 */
    };
    int codes[8];
    bindlog_result out[8];
    assert_int_equal(bindlog_import_entries(f->s, e, 8, out, codes, NULL, NULL), 0);
    assert_int_equal(codes[0], BINDLOG_APPLIED);
    assert_int_equal(codes[1], BINDLOG_EINVAL);
    assert_int_equal(codes[2], BINDLOG_EINVAL);
    assert_int_equal(codes[3], BINDLOG_APPLIED);
    assert_int_equal(codes[4], BINDLOG_ECONFLICT);
    assert_int_equal(codes[5], BINDLOG_MOVED);
    assert_string_equal(out[5].session_id, "S-other");
    assert_int_equal(codes[6], BINDLOG_EINVAL);
    assert_int_equal(codes[7], BINDLOG_EINVAL);

    bindlog_binding b;
    assert_int_equal(bindlog_get(f->s, "k:first", &b), 0);
    assert_string_equal(b.session_id, "S-dup");
    assert_int_equal(bindlog_get(f->s, "k:second", &b), BINDLOG_ENOTFOUND);
    assert_int_equal(bindlog_get(f->s, "k:moved", &b), 0);
    assert_string_equal(b.session_id, "S-other");
    bindlog_stats st;
    assert_int_equal(bindlog_stats_get(f->s, &st), 0);
    assert_int_equal(st.head_lsn, 3); /* k:moved's own bind, k:ok1, k:first */
}

/* Times never decrease along the log: an entry older than the head is
 * logged at the head's time; 0 takes the handle's clock. */
static void import__old_entries_at_head_time(void **state)
{
    fx *f = *state;
    bindlog_result r;
    int64_t saved = g_now;
    g_now = T0 + 5000;
    assert_int_equal(bindlog_bind(f->s, "live", "L", NULL, NULL, NULL, 0, &r), 0);
    g_now = saved;
    bindlog_import_entry e[2] = {{"old", "O", T0 + 1000, NULL, 0}, {"now", "N", 0, NULL, 0}};
    int codes[2];
    assert_int_equal(bindlog_import_entries(f->s, e, 2, NULL, codes, NULL, NULL), 0);
    assert_int_equal(codes[0], BINDLOG_APPLIED);
    assert_int_equal(codes[1], BINDLOG_APPLIED);
    char keys[4][32];
    int64_t times[4];
    bindlog_iter *it;
    bindlog_record rec;
    assert_int_equal(bindlog_log_iter(f->s, 2, UINT64_MAX, &it), 0);
    size_t n = 0;
    while (bindlog_iter_next_record(it, &rec) == 1 && n < 4) {
        snprintf(keys[n], 32, "%s", rec.key);
        times[n++] = rec.time_ms;
    }
    bindlog_iter_close(it);
    assert_int_equal(n, 2);
    assert_string_equal(keys[0], "old");
    assert_int_equal(times[0], T0 + 5000); /* not T0 + 1000: the head's time */
    assert_string_equal(keys[1], "now");
    assert_int_equal(times[1], g_now);
}

static void import__call_level_errors(void **state)
{
    fx *f = *state;
    bindlog_import_entry e[1] = {{"k", "S", T0, NULL, 0}};
    int codes[1] = {42};
    assert_int_equal(bindlog_import_entries(NULL, e, 1, NULL, NULL, NULL, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_import_entries(f->s, NULL, 1, NULL, NULL, NULL, NULL),
                     BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "import_entries"));
    assert_int_equal(bindlog_import_entries(f->s, NULL, 0, NULL, NULL, NULL, NULL), 0);

    bindlog *ro;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.read_only = 1;
    assert_int_equal(bindlog_open(&ro, f->dir, &o), 0);
    assert_int_equal(bindlog_import_entries(ro, e, 1, NULL, codes, NULL, NULL),
                     BINDLOG_EREADONLY);
    assert_int_equal(codes[0], BINDLOG_EREADONLY);
    assert_string_equal(bindlog_last_error(),
                        "import_entries (1 entries): the handle was opened read-only");
    bindlog_close(ro);
}

typedef struct prog {
    uint64_t calls, last, total;
} prog;

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    prog *p = ctx;
    assert_true(done >= p->last);
    p->calls++;
    p->last = done;
    p->total = total;
}

/* Thousands of entries share a handful of commits (group commit), and
 * progress ends at n. */
static void import__many_entries_few_commits(void **state)
{
    fx *f = *state;
    enum { N = 9000 };
    bindlog_import_entry *e = calloc(N, sizeof(*e));
    char(*keys)[24] = calloc(N, 24), (*ids)[24] = calloc(N, 24);
    int *codes = calloc(N, sizeof(int));
    bindlog_stats s0, s1;
    prog p = {0, 0, 0};
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], 24, "agent:main:k%d", i);
        snprintf(ids[i], 24, "sess-%d", i);
        e[i] = (bindlog_import_entry){keys[i], ids[i], T0 + (N - i), ids[i], strlen(ids[i])};
    }
    assert_int_equal(bindlog_stats_get(f->s, &s0), 0);
    assert_int_equal(bindlog_import_entries(f->s, e, N, NULL, codes, on_progress, &p), 0);
    assert_int_equal(bindlog_stats_get(f->s, &s1), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(codes[i], BINDLOG_APPLIED);
    assert_int_equal(s1.head_lsn, N);
    assert_true(s1.commits - s0.commits <= 4); /* 3 chunks of at most 4096 */
    assert_int_equal(p.last, N);
    assert_int_equal(p.total, N);
    /* the newest entry (index 0) went in last */
    bindlog_binding b;
    assert_int_equal(bindlog_get(f->s, keys[0], &b), 0);
    assert_int_equal(b.lsn, N);
    free(e);
    free(keys);
    free(ids);
    free(codes);
}

/* Entries with large origins on a store with a small log: the import
 * splits them into commits whose frames fit the log (a 10k-entry
 * sessions.json of realistic entries once failed whole with ENOSPC on the
 * default 8 MiB log: one commit of 5.8 MB). */
static void import__large_entries_fit_a_small_log(void **state)
{
    (void)state;
    enum { N = 600, ORIGIN = 2048 };
    char *dir = tu_mkdtemp("import-small-log");
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.log_size = 256 * 1024;
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    bindlog_import_entry *e = calloc(N, sizeof(*e));
    char(*keys)[40] = calloc(N, 40), (*ids)[40] = calloc(N, 40); /* room for any int */
    unsigned char *origin = malloc(ORIGIN);
    int *codes = calloc(N, sizeof(int));
    memset(origin, '{', ORIGIN);
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], 40, "agent:main:telegram:dm:%d", i);
        snprintf(ids[i], 40, "sess-%d", i);
        e[i] = (bindlog_import_entry){keys[i], ids[i], T0 + i, origin, ORIGIN};
    }
    bindlog_stats s0, s1;
    assert_int_equal(bindlog_stats_get(s, &s0), 0);
    int rc = bindlog_import_entries(s, e, N, NULL, codes, NULL, NULL);
    if (rc != 0)
        fail_msg("import_entries: %s (%s)", bindlog_code_name(rc), bindlog_last_error());
    for (int i = 0; i < N; i++)
        assert_int_equal(codes[i], BINDLOG_APPLIED);
    assert_int_equal(bindlog_stats_get(s, &s1), 0);
    assert_int_equal(s1.head_lsn, N);
    /* ~2.6 MB of frames through a 256 KiB log: many commits, none too big */
    assert_true(s1.commits - s0.commits >= 8);
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 0);
    bindlog_close(s);
    free(e);
    free(keys);
    free(ids);
    free(origin);
    free(codes);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(import__time_order_and_entry_times, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(import__second_run_is_already, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(import__refusals_stay_alone, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(import__old_entries_at_head_time, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(import__call_level_errors, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(import__many_entries_few_commits, fx_setup,
                                        fx_teardown),
        cmocka_unit_test(import__large_entries_fit_a_small_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
