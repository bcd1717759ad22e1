/*
 * shm.c -- the shared-memory file of a store (shm.h).
 *
 * Attaching: every process holds an OFD lock (a process's fcntl lock where
 * there are none, bl_plat_lock_range) on byte 0 of bindlog.shm for
 * as long as it has the store open: shared normally, exclusive while it
 * rebuilds the content.  OFD locks belong to the open file description, so
 * two environments of one process would each hold their own (bindlog keeps
 * one per store and process anyway), they die with the process, and
 * turning an exclusive lock into a shared one is atomic (a flock() would
 * drop it in between).
 *
 *   1. try the exclusive lock: granted = nobody else is attached: alone;
 *   2. otherwise wait for a shared lock (an initialiser holds exclusive
 *      until it is done), then try to upgrade: granted = everybody left
 *      meanwhile: alone after all;
 *   3. otherwise the content was built by a process that is still
 *      attached: trust it (the caller checks bl_shm_valid()).
 * A process that died while initialising leaves the magic cleared (it is
 * written last), so the next one sees an invalid file and retries.
 *
 * Wake-ups: waits on words of the shared mapping (bl_plat_wait: a futex on
 * Linux).  A publisher only makes the wake system call when a waiter
 * counter says somebody sleeps.
 */
#define _GNU_SOURCE
#include "lmdb/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"
#include "core/error.h"
#include "platform/platform.h"

#define SHM_MAGIC "BLSHMEM"

_Static_assert(sizeof(bl_shm) <= BL_SHM_SIZE, "bl_shm must fit its file");

static int ofd_lock(int fd, int type, int wait)
{
    return bl_plat_lock_range(fd, 0, 1, type, wait);
}

int bl_shm_open(const char *dir, int read_only, bl_shmh *h, int *alone)
{
    size_t n = strlen(dir);
    char *path = malloc(n + sizeof("/" BL_SHM_FILE));
    int fd, err;
    struct stat st;

    h->fd = -1;
    h->m = NULL;
    h->path = NULL;
    h->made = 0;
    *alone = 0;
    if (path == NULL)
        return BINDLOG_ENOMEM;
    memcpy(path, dir, n);
    memcpy(path + n, "/" BL_SHM_FILE, sizeof("/" BL_SHM_FILE));
    fd = read_only ? -1 : open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_CREAT | O_EXCL, 0600);
    if (fd >= 0)
        h->made = 1;
    else
        fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    err = errno;
    if (fd < 0) {
        free(path);
        if (err == ENOENT)
            return BINDLOG_ENOTFOUND;
        if (err == ELOOP)
            return bl_err_set(BINDLOG_ENOTSTORE, "%s is a symbolic link", BL_SHM_FILE);
        if (err == EACCES || err == EPERM || err == EROFS)
            return bl_err_set(BINDLOG_EACCES, "%s: %s", BL_SHM_FILE, strerror(err));
        return bl_err_set(BINDLOG_EIO, "%s: %s", BL_SHM_FILE, strerror(err));
    }
    h->path = path;
    h->fd = fd;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        bl_shm_close(h);
        return bl_err_set(BINDLOG_ENOTSTORE, "%s is not a regular file", BL_SHM_FILE);
    }
    if ((err = ofd_lock(fd, BL_PLAT_EXCLUSIVE, 0)) == 0) {
        *alone = 1;
    } else if (err == EAGAIN || err == EACCES) {
        if ((err = ofd_lock(fd, BL_PLAT_SHARED, 1)) == 0 && ofd_lock(fd, BL_PLAT_EXCLUSIVE, 0) == 0)
            *alone = 1;
    }
    if (err != 0) {
        bl_shm_close(h);
        return bl_err_set(BINDLOG_EIO, "%s: cannot lock: %s", BL_SHM_FILE, strerror(err));
    }
    if (fstat(fd, &st) != 0 || st.st_nlink == 0) {
        /* a failed open removed it while this one waited (bl_shm_discard) */
        bl_shm_close(h);
        return BINDLOG_EBUSY;
    }
    if (*alone) {
        /* The size is ours to set: nobody else has it mapped.  Its blocks
         * are allocated now, so that the first store through the map cannot
         * die of SIGBUS on a full disk (a tmpfs most of all). */
        err = 0;
        if ((uint64_t)st.st_size != BL_SHM_SIZE && ftruncate(fd, BL_SHM_SIZE) != 0)
            err = errno;
        if (err == 0 && (err = bl_plat_reserve(fd, BL_SHM_SIZE, 0)) != 0) {
            if (err == EOPNOTSUPP) {
                /* no fallocate here: write the page (bl_shm_init rewrites it) */
                static const unsigned char zero[BL_SHM_SIZE];
                err = pwrite(fd, zero, sizeof zero, 0) == (ssize_t)sizeof zero ? 0 : errno;
            }
        }
        if (err != 0) {
            bl_shm_discard(h);
            return bl_err_set(err == ENOSPC ? BINDLOG_ENOSPC : BINDLOG_EIO, "%s: %s",
                              BL_SHM_FILE, strerror(err));
        }
    } else if ((uint64_t)st.st_size < BL_SHM_SIZE) {
        bl_shm_close(h);
        return bl_err_set(BINDLOG_EBUSY, "%s is being set up by another process",
                          BL_SHM_FILE);
    }
    void *p = mmap(NULL, BL_SHM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        err = errno;
        if (*alone)
            bl_shm_discard(h);
        else
            bl_shm_close(h);
        return bl_err_set(err == ENOMEM ? BINDLOG_ENOMEM : BINDLOG_EIO, "%s: mmap: %s",
                          BL_SHM_FILE, strerror(err));
    }
    h->m = p;
    if ((err = bl_plat_xlock_attach(&h->m->wlock, fd)) != 0 ||
        (err = bl_plat_xlock_attach(&h->m->clock, fd)) != 0) {
        if (*alone)
            bl_shm_discard(h);
        else
            bl_shm_close(h);
        return bl_err_set(BINDLOG_ENOMEM, "%s: %s", BL_SHM_FILE, strerror(err));
    }
    return 0;
}

void bl_shm_close(bl_shmh *h)
{
    if (h->m != NULL) {
        bl_plat_xlock_detach(&h->m->wlock);
        bl_plat_xlock_detach(&h->m->clock);
        munmap(h->m, BL_SHM_SIZE);
    }
    if (h->fd >= 0)
        close(h->fd); /* drops the OFD lock */
    free(h->path);
    h->m = NULL;
    h->fd = -1;
    h->path = NULL;
    h->made = 0;
}

void bl_shm_discard(bl_shmh *h)
{
    /* the exclusive lock is still held: nobody else maps it */
    if (h->made && h->fd >= 0 && h->path != NULL)
        unlink(h->path);
    bl_shm_close(h);
}

int bl_shm_init(bl_shmh *h, uint64_t salt, uint64_t cap, const bl_wal_at *end,
                const bl_wal_at *ckpt)
{
    bl_shm *m = h->m;
    int rc;

    /* cleared first, written last: a death in between leaves it invalid */
    memset(m->magic, 0, sizeof(m->magic));
    atomic_thread_fence(memory_order_seq_cst);
    memset((char *)m + sizeof(m->magic), 0, sizeof(*m) - sizeof(m->magic));
    m->version = BL_SHM_VERSION;
    m->size = (uint32_t)sizeof(*m);
    m->salt = salt;
    m->cap = cap;
    /* bytes 1 and 2 of the file, where the lock is an fcntl one (byte 0
     * is the attach lock) */
    rc = bl_plat_xlock_init(&m->wlock, 1);
    if (rc == 0)
        rc = bl_plat_xlock_init(&m->clock, 2);
    if (rc != 0)
        return bl_err_set(BINDLOG_EIO, "%s: cannot make its locks: %s", BL_SHM_FILE,
                          strerror(rc));
    atomic_store(&m->end_lsn, end->lsn);
    atomic_store(&m->end_pos, end->pos);
    atomic_store(&m->end_chain, end->chain);
    atomic_store(&m->vis_lsn, end->lsn);
    atomic_store(&m->ckpt_lsn, ckpt->lsn);
    atomic_store(&m->ckpt_pos, ckpt->pos);
    atomic_store(&m->ckpt_chain, ckpt->chain);
    atomic_thread_fence(memory_order_seq_cst);
    memcpy(m->magic, SHM_MAGIC, sizeof(SHM_MAGIC));
    atomic_thread_fence(memory_order_seq_cst);
    return 0;
}

int bl_shm_share(bl_shmh *h)
{
    int err = ofd_lock(h->fd, BL_PLAT_SHARED, 1);
    h->made = 0; /* in use from now on: never removed */
    return err == 0 ? 0 : bl_err_set(BINDLOG_EIO, "%s: cannot lock: %s", BL_SHM_FILE,
                                     strerror(err));
}

int bl_shm_valid(const bl_shmh *h, uint64_t salt, uint64_t cap)
{
    const bl_shm *m = h->m;
    atomic_thread_fence(memory_order_seq_cst);
    return memcmp(m->magic, SHM_MAGIC, sizeof(SHM_MAGIC)) == 0 &&
           m->version == BL_SHM_VERSION && m->size == sizeof(*m) && m->salt == salt &&
           m->cap == cap;
}

int bl_shm_lock(bl_plat_xlock *mu, int *owner_died)
{
    int rc = bl_plat_xlock_lock(mu, owner_died);
    if (rc != 0)
        return bl_err_set(BINDLOG_EIO, "%s: a lock is unusable: %s", BL_SHM_FILE, strerror(rc));
    return 0;
}

void bl_shm_unlock(bl_plat_xlock *mu) { bl_plat_xlock_unlock(mu); }

/* ---- seqlocks ------------------------------------------------------------ */

void bl_shm_get_end(bl_shm *m, bl_wal_at *at)
{
    for (;;) {
        uint32_t s = atomic_load_explicit(&m->end_seq, memory_order_acquire);
        if (s & 1) {
            sched_yield();
            continue;
        }
        at->lsn = atomic_load_explicit(&m->end_lsn, memory_order_relaxed);
        at->pos = atomic_load_explicit(&m->end_pos, memory_order_relaxed);
        at->chain = atomic_load_explicit(&m->end_chain, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&m->end_seq, memory_order_relaxed) == s)
            return;
    }
}

void bl_shm_set_end(bl_shm *m, const bl_wal_at *at)
{
    atomic_fetch_add_explicit(&m->end_seq, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&m->end_lsn, at->lsn, memory_order_relaxed);
    atomic_store_explicit(&m->end_pos, at->pos, memory_order_relaxed);
    atomic_store_explicit(&m->end_chain, at->chain, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->end_seq, 1, memory_order_release);
}

void bl_shm_get_ckpt(bl_shm *m, bl_wal_at *at)
{
    for (;;) {
        uint32_t s = atomic_load_explicit(&m->ckpt_seq, memory_order_acquire);
        if (s & 1) {
            sched_yield();
            continue;
        }
        at->lsn = atomic_load_explicit(&m->ckpt_lsn, memory_order_relaxed);
        at->pos = atomic_load_explicit(&m->ckpt_pos, memory_order_relaxed);
        at->chain = atomic_load_explicit(&m->ckpt_chain, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&m->ckpt_seq, memory_order_relaxed) == s)
            return;
    }
}

void bl_shm_set_ckpt(bl_shm *m, const bl_wal_at *at)
{
    atomic_fetch_add_explicit(&m->ckpt_seq, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&m->ckpt_lsn, at->lsn, memory_order_relaxed);
    atomic_store_explicit(&m->ckpt_pos, at->pos, memory_order_relaxed);
    atomic_store_explicit(&m->ckpt_chain, at->chain, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->ckpt_seq, 1, memory_order_release);
}

/* ---- the visible end and wake-ups -------------------------------------- */


void bl_shm_wake(_Atomic uint32_t *word)
{
    atomic_fetch_add(word, 1);
    bl_plat_wake_all(word);
}

void bl_shm_publish(bl_shm *m, uint64_t lsn)
{
    uint64_t cur = atomic_load(&m->vis_lsn);
    while (cur < lsn && !atomic_compare_exchange_weak(&m->vis_lsn, &cur, lsn))
        ;
    /* vis_lsn is stored before head_waiters is read, and a waiter counts
     * itself before it reads vis_lsn (both sequentially consistent), so
     * either the waiter sees the new end or this sees the waiter. */
    if (cur < lsn && atomic_load(&m->head_waiters) != 0) {
        atomic_fetch_add_explicit(&m->wakes, 1, memory_order_relaxed);
        bl_shm_wake(&m->head_futex);
    }
}

void bl_shm_set_vis(bl_shm *m, uint64_t lsn) { atomic_store(&m->vis_lsn, lsn); }

void bl_shm_sleep(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms)
{
    bl_plat_wait(word, seen, timeout_ms); /* the caller re-checks */
}
