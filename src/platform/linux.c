/*
 * linux.c -- the platform layer on Linux, glibc or musl: futexes on the
 * shared word (not FUTEX_PRIVATE, so they work across processes), OFD
 * locks, robust process-shared mutexes, fallocate, getrandom, O_TMPFILE,
 * secure_getenv, fdatasync.
 */
#define _GNU_SOURCE
#include "platform/fallback.h"

/* Every file of src/platform/ may be compiled (the bindings compile the
 * folder): only the one of the platform selected has content. */
#if defined(BL_PLATFORM_LINUX)

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

const char *bl_plat_name(void) { return "linux"; }

/* ---- futex --------------------------------------------------------------- */

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

static void futex_wait(_Atomic uint32_t *word, int op, uint32_t seen, int64_t timeout_ms)
{
    struct timespec ts, *tp = NULL;
    if (timeout_ms >= 0) {
        ts.tv_sec = (time_t)(timeout_ms / 1000);
        ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
        tp = &ts;
    }
    futex(word, op, seen, tp); /* EAGAIN, EINTR, ETIMEDOUT: the caller re-checks */
}

void bl_plat_wait(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms)
{
    futex_wait(word, FUTEX_WAIT, seen, timeout_ms);
}

void bl_plat_wake_all(_Atomic uint32_t *word) { futex(word, FUTEX_WAKE, INT_MAX, NULL); }

/* A private futex: the kernel keys it by address in this process, without
 * looking up the page's mapping and taking a reference on it, as a shared
 * one must.  The group commit's writers wait and are woken once per event
 * (core/group.c): at 64 FULL writers, 1-9% more events per second. */
void bl_plat_wait_local(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms)
{
    futex_wait(word, FUTEX_WAIT_PRIVATE, seen, timeout_ms);
}

void bl_plat_wake_all_local(_Atomic uint32_t *word)
{
    futex(word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
}

/* ---- locks --------------------------------------------------------------- */

/* Without OFD locks there would be only the process's fcntl locks, which
 * any close of the file drops: refuse to build rather than fall back. */
#ifndef F_OFD_SETLK
#error "bindlog needs OFD locks (F_OFD_SETLK: Linux 3.15 with glibc 2.20, or musl)"
#endif

int bl_plat_fdlock(int fd, off_t byte, int type, int wait)
{
    return bl_plat_fb_fcntl_lock(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, byte, 1, type);
}

int bl_plat_fdlock_held(int fd, off_t byte)
{
    return bl_plat_fb_fcntl_held(fd, F_OFD_GETLK, byte, 1);
}

int bl_plat_xlock_init(bl_plat_xlock *l, uint32_t byte)
{
    pthread_mutexattr_t a;
    int rc;
    (void)byte;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    rc = pthread_mutex_init(l, &a);
    pthread_mutexattr_destroy(&a);
    return rc;
}

int bl_plat_xlock_attach(bl_plat_xlock *l, int fd)
{
    (void)l;
    (void)fd;
    return 0;
}

void bl_plat_xlock_detach(bl_plat_xlock *l) { (void)l; }

int bl_plat_xlock_lock(bl_plat_xlock *l, int *owner_died, int64_t timeout_ms)
{
    int rc;
    if (timeout_ms < 0) {
        rc = pthread_mutex_lock(l);
    } else if ((rc = pthread_mutex_trylock(l)) == EBUSY) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t)(timeout_ms / 1000);
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        rc = pthread_mutex_timedlock(l, &ts);
    }
    *owner_died = rc == EOWNERDEAD;
    if (rc == EBUSY)
        rc = ETIMEDOUT;
    return rc == EOWNERDEAD ? 0 : rc;
}

void bl_plat_xlock_consistent(bl_plat_xlock *l) { pthread_mutex_consistent(l); }
void bl_plat_xlock_unlock(bl_plat_xlock *l) { pthread_mutex_unlock(l); }

/* ---- files --------------------------------------------------------------- */

int bl_plat_reserve(int fd, off_t len, int keep_size)
{
    if (fallocate(fd, keep_size ? FALLOC_FL_KEEP_SIZE : 0, 0, len) == 0)
        return 0;
    return errno == ENOSYS ? EOPNOTSUPP : errno;
}

int bl_plat_write_zeros(int fd, off_t off, off_t len) { return bl_plat_fb_write_zeros(fd, off, len); }

int bl_plat_tmpfile_at(int dirfd, const char *name)
{
#ifdef O_TMPFILE
    int fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0)
        return fd;
#endif
    return bl_plat_fb_tmpfile_at(dirfd, name);
}

int bl_plat_flush(int fd)
{
    while (fdatasync(fd) != 0) {
        if (errno != EINTR)
            return errno;
    }
    return 0;
}

int bl_plat_flush_file(int fd) { return bl_plat_fb_fsync(fd); }

int bl_plat_flush_weakened(void) { return 0; }

void bl_plat_writeback(int fd) { (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE); }

void bl_plat_read_exact(int fd)
{
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
}

int bl_plat_resident(const void *addr, size_t len)
{
    return bl_plat_fb_mincore(addr, len);
}

void bl_plat_rwlock_prefer_writers(pthread_rwlockattr_t *a)
{
#ifdef __GLIBC__
    pthread_rwlockattr_setkind_np(a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#else
    (void)a; /* musl's rwlocks already let a waiting writer in first */
#endif
}

/* Tables of 2 MiB or more go on transparent huge pages where the system
 * allows them (THP "always" or "madvise"): four faults map an 8 MiB ring,
 * where 4 KiB pages take 2,048, each ~1 us on a bare host and 10-15 us
 * under a hypervisor that shadows page tables.  The mapping is aligned
 * to 2 MiB (its slack unmapped again) so that every huge page fits.  With
 * populate, the pages are mapped before returning: MADV_POPULATE_WRITE
 * (Linux 5.14), else MAP_POPULATE. */
#define BL_HUGE ((size_t)2 << 20)

void *bl_plat_map_anon(size_t bytes, int populate)
{
    const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
#if defined(MADV_HUGEPAGE) && defined(MADV_POPULATE_WRITE)
    if (bytes >= BL_HUGE && bytes % BL_HUGE == 0) {
        unsigned char *raw = mmap(NULL, bytes + BL_HUGE, prot, flags, -1, 0);
        if (raw == MAP_FAILED)
            return NULL;
        size_t head = (BL_HUGE - (uintptr_t)raw % BL_HUGE) % BL_HUGE;
        unsigned char *p = raw + head;
        if (head != 0)
            munmap(raw, head);
        munmap(p + bytes, BL_HUGE - head);
        (void)madvise(p, bytes, MADV_HUGEPAGE); /* THP "never": 4 KiB pages */
        /* the pages now; on a kernel before 5.14 (EINVAL) at first touches */
        if (populate)
            (void)madvise(p, bytes, MADV_POPULATE_WRITE);
        return p;
    }
#endif
    void *p = mmap(NULL, bytes, prot, flags | (populate ? MAP_POPULATE : 0), -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void bl_plat_unmap_anon(void *p, size_t bytes)
{
    if (p != NULL)
        munmap(p, bytes);
}

/* ioprio_get/ioprio_set have no glibc wrapper; their constants
 * (linux/ioprio.h, which older kernels' headers lack): who =
 * IOPRIO_WHO_PROCESS with id 0, the calling thread; the class in the bits
 * from 13 up. */
enum { IOPRIO_WHO_THREAD = 1, IOPRIO_IDLE = 3 << 13 };

int bl_plat_io_idle_begin(int *saved)
{
    *saved = -1;
#if defined(SYS_ioprio_get) && defined(SYS_ioprio_set)
    long was = syscall(SYS_ioprio_get, IOPRIO_WHO_THREAD, 0);
    if (was < 0)
        return errno;
    if (syscall(SYS_ioprio_set, IOPRIO_WHO_THREAD, 0, IOPRIO_IDLE) != 0)
        return errno;
    *saved = (int)was;
    return 0;
#else
    return ENOTSUP;
#endif
}

void bl_plat_io_idle_end(int saved)
{
#if defined(SYS_ioprio_set)
    if (saved >= 0)
        (void)syscall(SYS_ioprio_set, IOPRIO_WHO_THREAD, 0, saved);
#else
    (void)saved;
#endif
}

/* ---- the process ------------------------------------------------------------ */

int bl_plat_random(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return errno == ENOSYS ? bl_plat_fb_random(p, n) : errno;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

const char *bl_plat_secure_getenv(const char *name) { return secure_getenv(name); }

#else
typedef int bl_plat_linux_unused; /* not this platform: an empty unit */
#endif /* BL_PLATFORM_LINUX */
