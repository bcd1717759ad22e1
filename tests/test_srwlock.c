/*
 * test_srwlock.c -- the sharded reader-writer lock (src/core/srwlock.h):
 * readers on different shards, exclusive holds that exclude all of them,
 * recursion of a shared hold, and the shards threads are given.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "core/srwlock.h"

#define READERS 8
#define ROUNDS 2000

typedef struct {
    bl_srwlock lock;
    atomic_int readers_in;     /* readers between their lock and unlock */
    atomic_int writer_in;      /* 1 while the writer holds it exclusive */
    atomic_int violations;     /* a reader beside the writer, or the reverse */
    atomic_int stop;
    unsigned shard[READERS];
    atomic_int started;
} shared;

typedef struct {
    shared *s;
    int index;
    long reads;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *a = p;
    shared *s = a->s;
    s->shard[a->index] = bl_srw_shard_of_thread();
    atomic_fetch_add(&s->started, 1);
    while (!atomic_load(&s->stop)) {
        bl_srw_rdlock(&s->lock);
        atomic_fetch_add(&s->readers_in, 1);
        for (int i = 0; i < 64; i++) /* a hold long enough to meet a writer */
            if (atomic_load(&s->writer_in))
                atomic_fetch_add(&s->violations, 1);
        atomic_fetch_sub(&s->readers_in, 1);
        bl_srw_rdunlock(&s->lock);
        a->reads++;
        sched_yield(); /* eight readers on few CPUs: leave the writer some */
    }
    return NULL;
}

/* Every exclusive hold sees no reader inside, and no reader ever sees the
 * writer: with readers spread over every shard, a writer that took only
 * one shard met readers in each of six runs of 20,000 rounds. */
static void srwlock__exclusive_excludes_readers_of_every_shard(void **state)
{
    (void)state;
    static shared s;
    memset(&s, 0, sizeof s);
    assert_int_equal(bl_srw_init(&s.lock, 1), 0);
    pthread_t th[READERS];
    reader_arg args[READERS];
    for (int i = 0; i < READERS; i++) {
        args[i] = (reader_arg){&s, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, reader, &args[i]), 0);
    }
    while (atomic_load(&s.started) < READERS)
        sched_yield();
    for (int r = 0; r < ROUNDS; r++) {
        bl_srw_wrlock(&s.lock);
        atomic_store(&s.writer_in, 1);
        for (int i = 0; i < 64; i++)
            if (atomic_load(&s.readers_in) != 0)
                atomic_fetch_add(&s.violations, 1);
        atomic_store(&s.writer_in, 0);
        bl_srw_wrunlock(&s.lock);
        if (r % 64 == 0)
            sched_yield(); /* let readers in between */
    }
    atomic_store(&s.stop, 1);
    long reads = 0;
    for (int i = 0; i < READERS; i++) {
        pthread_join(th[i], NULL);
        reads += args[i].reads;
    }
    assert_int_equal(atomic_load(&s.violations), 0);
    assert_true(reads > 0);
    /* the readers were spread: eight threads started one after another
     * were given eight different shards */
    unsigned seen = 0;
    for (int i = 0; i < READERS; i++) {
        assert_true(s.shard[i] < BL_SRW_SHARDS);
        seen |= 1u << s.shard[i];
    }
    assert_int_equal(seen, (1u << BL_SRW_SHARDS) - 1);
    bl_srw_destroy(&s.lock);
}

/* A thread keeps its shard, so a shared hold taken twice (no writer
 * waiting) nests, and the lock is free again after both releases. */
static void srwlock__a_shared_hold_nests_and_unwinds(void **state)
{
    (void)state;
    bl_srwlock l;
    assert_int_equal(bl_srw_init(&l, 0), 0);
    unsigned mine = bl_srw_shard_of_thread();
    assert_int_equal(bl_srw_shard_of_thread(), mine);
    bl_srw_rdlock(&l);
    bl_srw_rdlock(&l);
    assert_int_equal(pthread_rwlock_trywrlock(&l.shard[mine].lock), EBUSY);
    bl_srw_rdunlock(&l);
    assert_int_equal(pthread_rwlock_trywrlock(&l.shard[mine].lock), EBUSY);
    bl_srw_rdunlock(&l);
    bl_srw_wrlock(&l); /* every shard free: returns */
    for (unsigned i = 0; i < BL_SRW_SHARDS; i++)
        assert_int_equal(pthread_rwlock_tryrdlock(&l.shard[i].lock), EBUSY);
    bl_srw_wrunlock(&l);
    for (unsigned i = 0; i < BL_SRW_SHARDS; i++) {
        assert_int_equal(pthread_rwlock_tryrdlock(&l.shard[i].lock), 0);
        pthread_rwlock_unlock(&l.shard[i].lock);
    }
    bl_srw_destroy(&l);
}

/* No two shards' locks share a cache line. */
static void srwlock__shards_sit_on_lines_of_their_own(void **state)
{
    (void)state;
    bl_srwlock l;
    for (unsigned i = 0; i + 1 < BL_SRW_SHARDS; i++) {
        uintptr_t end = (uintptr_t)&l.shard[i].lock + sizeof(pthread_rwlock_t) - 1;
        uintptr_t next = (uintptr_t)&l.shard[i + 1].lock;
        assert_true(next / 64 > end / 64);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(srwlock__exclusive_excludes_readers_of_every_shard),
        cmocka_unit_test(srwlock__a_shared_hold_nests_and_unwinds),
        cmocka_unit_test(srwlock__shards_sit_on_lines_of_their_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
