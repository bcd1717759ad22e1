/*
 * srwlock.h -- a reader-writer lock whose readers share no cache line.
 *
 * A pthread rwlock taken shared still writes its own word: two threads
 * reading at once pass that cache line between their CPUs twice a call.
 * For a lock that nearly every read takes and that is rarely taken
 * exclusive (the LMDB map's, the log index's), that line bounced on every
 * bindlog_get.  A bl_srwlock is BL_SRW_SHARDS pthread rwlocks, each on
 * cache lines of its own.  A thread always takes the same shard shared
 * (bl_srw_shard_of_thread, fixed at its first call, round robin), so a
 * shared hold means exactly what it would with one rwlock: recursion and
 * preference are that shard's.  Exclusive takes every shard, always in
 * the same order, so two exclusive takers cannot deadlock each other and
 * a reader that holds its shard blocks an exclusive taker as before.
 *
 * Thread-safety: as a pthread rwlock; a shared hold is released by the
 * thread that took it (bl_srw_rdunlock finds the shard the same way).
 */
#ifndef BL_SRWLOCK_H
#define BL_SRWLOCK_H

#include <pthread.h>

#define BL_SRW_SHARDS 8

/* The padding keeps two shards' locks off any common cache line, whatever
 * the system's pthread_rwlock_t size. */
typedef struct bl_srw_shard {
    pthread_rwlock_t lock;
    char pad[64];
} bl_srw_shard;

typedef struct bl_srwlock {
    bl_srw_shard shard[BL_SRW_SHARDS];
} bl_srwlock;

/* prefer_writers: a stream of readers must not starve an exclusive taker
 * (bl_plat_rwlock_prefer_writers).  0, or the errno value of the first
 * shard that failed (none is left initialised then). */
int bl_srw_init(bl_srwlock *l, int prefer_writers);
void bl_srw_destroy(bl_srwlock *l);

/* The calling thread's shard. */
unsigned bl_srw_shard_of_thread(void);

static inline void bl_srw_rdlock(bl_srwlock *l)
{
    pthread_rwlock_rdlock(&l->shard[bl_srw_shard_of_thread()].lock);
}

static inline void bl_srw_rdunlock(bl_srwlock *l)
{
    pthread_rwlock_unlock(&l->shard[bl_srw_shard_of_thread()].lock);
}

/* Exclusive: every shard, in order; the caller holds none of them. */
void bl_srw_wrlock(bl_srwlock *l);
void bl_srw_wrunlock(bl_srwlock *l);

#endif /* BL_SRWLOCK_H */
