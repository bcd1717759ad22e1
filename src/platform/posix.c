/*
 * posix.c -- the platform layer on nothing but POSIX (the BSDs, and Linux
 * with -DBINDLOG_PLATFORM=posix so that CI runs the whole test suite on
 * these fallbacks): every item is the portable one of fallback.c.  Locks
 * of an open file description are flock(), the one item outside POSIX
 * (fallback.c says why).
 */
#include "platform/fallback.h"

/* Every file of src/platform/ may be compiled (the bindings compile the
 * folder): only the one of the platform selected has content. */
#if defined(BL_PLATFORM_POSIX)

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

const char *bl_plat_name(void) { return "posix"; }

void bl_plat_wait(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms)
{
    bl_plat_fb_wait(word, seen, timeout_ms);
}

/* The sleepers poll: nothing to wake. */
void bl_plat_wake_all(_Atomic uint32_t *word) { (void)word; }

void bl_plat_wait_local(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms)
{
    bl_plat_fb_wait(word, seen, timeout_ms);
}

void bl_plat_wake_all_local(_Atomic uint32_t *word) { (void)word; }

int bl_plat_fdlock(int fd, off_t byte, int type, int wait)
{
    (void)byte; /* flock: the whole file */
    return bl_plat_fb_flock(fd, type, wait);
}

int bl_plat_fdlock_held(int fd, off_t byte)
{
    (void)byte;
    return bl_plat_fb_flock_held(fd);
}

int bl_plat_xlock_init(bl_plat_xlock *l, uint32_t byte) { return bl_plat_fb_xlock_init(l, byte); }
int bl_plat_xlock_attach(bl_plat_xlock *l, int fd) { return bl_plat_fb_xlock_attach(l, fd); }
void bl_plat_xlock_detach(bl_plat_xlock *l) { bl_plat_fb_xlock_detach(l); }
int bl_plat_xlock_lock(bl_plat_xlock *l, int *owner_died, int64_t timeout_ms)
{
    return bl_plat_fb_xlock_lock(l, owner_died, timeout_ms);
}
void bl_plat_xlock_consistent(bl_plat_xlock *l) { bl_plat_fb_xlock_consistent(l); }
void bl_plat_xlock_unlock(bl_plat_xlock *l) { bl_plat_fb_xlock_unlock(l); }

/* posix_fallocate, but only where the size may change: on a file system
 * without fallocate some systems emulate it by writing into every block,
 * which would race with the other users of a file that is in use (the
 * case of keep_size).  EOPNOTSUPP there. */
int bl_plat_reserve(int fd, off_t len, int keep_size)
{
    if (keep_size)
        return EOPNOTSUPP;
    int err = posix_fallocate(fd, 0, len);
    return err == EINVAL || err == ENOSYS ? EOPNOTSUPP : err;
}

int bl_plat_write_zeros(int fd, off_t off, off_t len) { return bl_plat_fb_write_zeros(fd, off, len); }
int bl_plat_tmpfile_at(int dirfd, const char *name) { return bl_plat_fb_tmpfile_at(dirfd, name); }
int bl_plat_flush(int fd) { return bl_plat_fb_fsync(fd); }
int bl_plat_flush_file(int fd) { return bl_plat_fb_fsync(fd); }
int bl_plat_flush_weakened(void) { return 0; }
void bl_plat_writeback(int fd) { (void)fd; }
void bl_plat_read_exact(int fd)
{
    (void)fd;
}
int bl_plat_resident(const void *addr, size_t len)
{
    (void)addr;
    (void)len;
    return -1;
}
void bl_plat_rwlock_prefer_writers(pthread_rwlockattr_t *a) { (void)a; }
void *bl_plat_map_anon(size_t bytes, int populate)
{
    (void)populate;
    return calloc(1, bytes);
}
void bl_plat_unmap_anon(void *p, size_t bytes)
{
    (void)bytes;
    free(p);
}
int bl_plat_io_idle_begin(int *saved)
{
    *saved = -1;
    return ENOTSUP;
}
void bl_plat_io_idle_end(int saved) { (void)saved; }
int bl_plat_random(void *buf, size_t n) { return bl_plat_fb_random(buf, n); }
const char *bl_plat_secure_getenv(const char *name) { return bl_plat_fb_secure_getenv(name); }

#else
typedef int bl_plat_posix_unused; /* not this platform: an empty unit */
#endif /* BL_PLATFORM_POSIX */
