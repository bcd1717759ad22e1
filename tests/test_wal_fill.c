/*
 * test_wal_fill.c -- the zero-fill of a new log's ring (src/lmdb/ckpt.c,
 * fill_step; docs/design.md, "The files").
 *
 * A new store's ring is only reserved (fallocate); the background thread
 * writes zeros over it ahead of the writers so that frames land on written
 * blocks.  Each byte of the ring must be zeroed at most once in the store's
 * life, never behind the written end (from the tail), and the frontier
 * must survive a restart.  These cases commit FULL events one at a time
 * while the filler works (so that commits and fill steps interleave, as
 * on a gateway's first events) and read the filler's own account of what
 * it wrote (bl_walenv.fill), the shared frontier and the log's header.
 * The name carries "wal" so that they run under ThreadSanitizer with the
 * concurrency label.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"
#include "core/backend.h"
#include "lmdb/walenv.h"
#include "testutil.h"

static bindlog *open_log(const char *dir, uint64_t log_size)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.durability = BINDLOG_DURABILITY_FULL;
    o.log_size = log_size;
    int rc = bindlog_open(&s, dir, &o);
    if (rc != 0)
        fail_msg("open %s: %s (%s)", dir, bindlog_code_name(rc), bindlog_last_error());
    return s;
}

static void bind_one(bindlog *s, unsigned i)
{
    char key[64], sid[64];
    snprintf(key, sizeof key, "agent:main:fill:%u", i % 97);
    snprintf(sid, sizeof sid, "fill-s%u", i);
    assert_int_equal(bindlog_bind(s, key, sid, NULL, NULL, "origin", 6, NULL), BINDLOG_APPLIED);
}

static uint64_t header_filled(const char *dir, uint64_t cap)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/bindlog.wal", dir);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    uint64_t f = bl_wal_filled(fd, cap);
    close(fd);
    return f;
}

/* Commit FULL events one at a time until the shared frontier reaches the
 * end of the ring (60 s at most: a filler that never ends fails); returns
 * how many were committed. */
static unsigned commit_until_filled(bindlog *s, unsigned from)
{
    bl_walenv *w = s->e->wal;
    unsigned n = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(&w->shm.m->filled) < w->cap) {
        bind_one(s, from + n++);
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 60)
            fail_msg("the ring was not filled in 60 s (%llu of %llu bytes)",
                     (unsigned long long)atomic_load(&w->shm.m->filled),
                     (unsigned long long)w->cap);
    }
    return n;
}

static void zeroed_once(uint64_t log_size)
{
    char *tmp = tu_mkdtemp("fill");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/store", tmp);

    bindlog *s = open_log(dir, log_size);
    bl_walenv *w = s->e->wal;
    uint64_t cap = w->cap;
    assert_int_equal(atomic_load(&w->shm.m->filled), 0); /* only reserved */
    unsigned n = commit_until_filled(s, 0);
    /* a few more: a frame behind the frontier must not pull it back */
    for (unsigned i = 0; i < 50; i++)
        bind_one(s, n + i);

    bl_fill_stats *f = &w->fill;
    bl_wal_at end;
    bl_shm_get_end(w->shm.m, &end);
    uint64_t steps = atomic_load(&f->steps), bytes = atomic_load(&f->bytes);
    print_message("ring %llu bytes: %u FULL commits while it filled, frames to %llu; "
                  "%llu fill steps, %llu bytes zeroed, %llu again, %llu behind the end\n",
                  (unsigned long long)cap, n, (unsigned long long)end.pos,
                  (unsigned long long)steps, (unsigned long long)bytes,
                  (unsigned long long)atomic_load(&f->again),
                  (unsigned long long)atomic_load(&f->behind));
    assert_true(steps > 0);
    assert_true(bytes <= cap);                     /* never more than the ring */
    assert_int_equal(atomic_load(&f->again), 0);   /* no byte zeroed twice */
    assert_int_equal(atomic_load(&f->behind), 0);  /* never from the tail */
    assert_true(steps <= (cap + (256u << 10) - 1) / (256u << 10) + 1);
    assert_int_equal(atomic_load(&f->hi), cap);    /* it went to the end */
    assert_int_equal(atomic_load(&w->shm.m->filled), cap);
    assert_int_equal(header_filled(dir, cap), cap); /* and said so durably */
    bindlog_close(s);

    /* a restart finds the ring filled and zeroes nothing */
    s = open_log(dir, 0);
    w = s->e->wal;
    assert_int_equal(atomic_load(&w->shm.m->filled), cap);
    for (unsigned i = 0; i < 200; i++)
        bind_one(s, 100000 + i);
    assert_int_equal(bindlog_checkpoint(s, NULL), 0);
    assert_int_equal(atomic_load(&w->fill.steps), 0);
    assert_int_equal(atomic_load(&w->fill.bytes), 0);
    bindlog_close(s);
    tu_rmtree(tmp);
    free(tmp);
}

/* The ring of a new store is zeroed once, ahead of the writers, in steps
 * that never overlap and never start behind the written end, however the
 * commits interleave with them; the frontier is in the header. */
static void wal_fill__the_ring_is_zeroed_once_ahead_of_the_writers(void **state)
{
    (void)state;
    unsetenv("BINDLOG_CHECKPOINT");
    zeroed_once((uint64_t)2 << 20);
}

/* The same with a ring that is not a whole number of fill steps: the last
 * step stops at the end of the ring. */
static void wal_fill__a_ring_of_odd_size_is_zeroed_to_its_end(void **state)
{
    (void)state;
    unsetenv("BINDLOG_CHECKPOINT");
    zeroed_once(((uint64_t)1 << 20) + 12288);
}

/* A restart between two fill steps goes on from the header's frontier:
 * nothing the first process zeroed is zeroed again. */
static void wal_fill__a_restart_resumes_at_the_frontier(void **state)
{
    (void)state;
    unsetenv("BINDLOG_CHECKPOINT");
    char *tmp = tu_mkdtemp("fill");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/store", tmp);

    bindlog *s = open_log(dir, (uint64_t)4 << 20);
    bl_walenv *w = s->e->wal;
    uint64_t cap = w->cap;
    bind_one(s, 0); /* starts the filler */
    /* close as soon as it made some progress, but (most likely) not all */
    struct timespec ts = {0, 100000L};
    for (int i = 0; i < 600000 && atomic_load(&w->fill.hi) == 0; i++)
        nanosleep(&ts, NULL);
    bindlog_close(s);
    uint64_t first = header_filled(dir, cap);
    assert_true(first > 0);

    s = open_log(dir, 0);
    w = s->e->wal;
    assert_true(atomic_load(&w->shm.m->filled) >= first);
    unsigned n = commit_until_filled(s, 1);
    bl_wal_at end;
    bl_shm_get_end(w->shm.m, &end);
    uint64_t bytes = atomic_load(&w->fill.bytes);
    print_message("first process: frontier %llu; second: %u commits, %llu bytes zeroed\n",
                  (unsigned long long)first, n, (unsigned long long)bytes);
    assert_true(bytes <= cap - first); /* only what lay beyond the first's frontier */
    assert_int_equal(atomic_load(&w->fill.again), 0);
    assert_int_equal(atomic_load(&w->fill.behind), 0);
    assert_int_equal(header_filled(dir, cap), cap);
    bindlog_close(s);
    tu_rmtree(tmp);
    free(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wal_fill__the_ring_is_zeroed_once_ahead_of_the_writers),
        cmocka_unit_test(wal_fill__a_ring_of_odd_size_is_zeroed_to_its_end),
        cmocka_unit_test(wal_fill__a_restart_resumes_at_the_frontier),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
