/*
 * srwlock.c -- a reader-writer lock whose readers share no cache line
 * (srwlock.h).
 */
#include "core/srwlock.h"

#include <stdatomic.h>

#include "platform/platform.h"

int bl_srw_init(bl_srwlock *l, int prefer_writers)
{
    pthread_rwlockattr_t ra;
    int rc = pthread_rwlockattr_init(&ra);
    if (rc != 0)
        return rc;
    if (prefer_writers)
        bl_plat_rwlock_prefer_writers(&ra);
    for (unsigned i = 0; i < BL_SRW_SHARDS; i++) {
        if ((rc = pthread_rwlock_init(&l->shard[i].lock, &ra)) != 0) {
            while (i-- > 0)
                pthread_rwlock_destroy(&l->shard[i].lock);
            break;
        }
    }
    pthread_rwlockattr_destroy(&ra);
    return rc;
}

void bl_srw_destroy(bl_srwlock *l)
{
    for (unsigned i = 0; i < BL_SRW_SHARDS; i++)
        pthread_rwlock_destroy(&l->shard[i].lock);
}

static atomic_uint next_shard;
static _Thread_local unsigned my_shard; /* 1 + the thread's shard; 0: none yet */

unsigned bl_srw_shard_of_thread(void)
{
    unsigned s = my_shard;
    if (s == 0)
        my_shard = s = 1 + atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) %
                               BL_SRW_SHARDS;
    return s - 1;
}

void bl_srw_wrlock(bl_srwlock *l)
{
    for (unsigned i = 0; i < BL_SRW_SHARDS; i++)
        pthread_rwlock_wrlock(&l->shard[i].lock);
}

void bl_srw_wrunlock(bl_srwlock *l)
{
    for (unsigned i = BL_SRW_SHARDS; i-- > 0;)
        pthread_rwlock_unlock(&l->shard[i].lock);
}
