/*
 * fallback.c -- portable POSIX versions of the platform layer (fallback.h).
 *
 * Waiting on a shared word: a bounded sleep-poll.  There is no portable way
 * to sleep on a word of shared memory across processes, so the waiter reads
 * the word, sleeps a little (doubling from 50 us up to 2 ms) and reads it
 * again until it moved or the timeout passed.  Correct, because every waker
 * changes the word before it wakes (the callers' protocol); slower, because
 * a wake-up is noticed up to 2 ms late.
 *
 * The cross-process mutex without robust mutexes: an fcntl lock on one byte
 * of the shared file gives exclusion between processes and is dropped by
 * the kernel when its holder dies (SQLite's and LMDB's locks rest on the
 * same guarantee).  fcntl locks belong to a process (or, as OFD locks, to an
 * open file description shared by the threads), so the threads of one
 * process first take a process-local mutex, kept in a small list keyed by
 * the lock's address in this process's mapping.  The word `held` in the
 * mapping is set by each holder after it got both and cleared before it
 * lets go: a locker that finds it set knows the previous holder died
 * holding the lock.
 *
 * A lock of an open file description (bl_plat_fdlock) without OFD locks:
 * flock(), whole-file, which no close of another descriptor drops.
 *
 * The fcntl calls themselves are one function with the command as a
 * parameter: linux.c passes the OFD commands, the mutex above the
 * process's ones.
 */
#define _GNU_SOURCE
#include "platform/fallback.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void bl_plat_fb_wait(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms)
{
    struct timespec now, end;
    long nap_ns = 50000;

    clock_gettime(CLOCK_MONOTONIC, &end);
    if (timeout_ms >= 0) {
        end.tv_sec += (time_t)(timeout_ms / 1000);
        end.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (end.tv_nsec >= 1000000000L) {
            end.tv_sec++;
            end.tv_nsec -= 1000000000L;
        }
    }
    while (atomic_load(word) == seen) {
        struct timespec nap = {0, nap_ns};
        if (timeout_ms >= 0) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            long long left = (long long)(end.tv_sec - now.tv_sec) * 1000000000LL +
                             (end.tv_nsec - now.tv_nsec);
            if (left <= 0)
                return;
            if (left < nap_ns)
                nap.tv_nsec = (long)left;
        }
        if (nanosleep(&nap, NULL) != 0 && errno == EINTR)
            return; /* like a futex: a signal ends the wait */
        if (nap_ns < 2000000L)
            nap_ns *= 2;
    }
}

int bl_plat_fb_fcntl_lock(int fd, int cmd, off_t start, off_t len, int type)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = (short)(type == BL_PLAT_EXCLUSIVE ? F_WRLCK /* POSIX: short l_type */
                        : type == BL_PLAT_SHARED  ? F_RDLCK
                                                  : F_UNLCK);
    fl.l_whence = SEEK_SET;
    fl.l_start = start;
    fl.l_len = len;
    for (;;) {
        if (fcntl(fd, cmd, &fl) == 0)
            return 0;
        if (errno != EINTR)
            return errno;
    }
}

int bl_plat_fb_fcntl_held(int fd, int getcmd, off_t start, off_t len)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = start;
    fl.l_len = len;
    if (fcntl(fd, getcmd, &fl) != 0)
        return 1;
    return fl.l_type != F_UNLCK;
}

/* flock() is not in POSIX, but every system this layer is for has it (the
 * BSDs, macOS, illumos, Linux), and store.c relies on it already for
 * bindlog.lock.  It is the only portable lock that belongs to an open file
 * description rather than to the process. */
int bl_plat_fb_flock(int fd, int type, int wait)
{
    int op = type == BL_PLAT_EXCLUSIVE ? LOCK_EX : type == BL_PLAT_SHARED ? LOCK_SH : LOCK_UN;
    if (!wait && type != BL_PLAT_UNLOCK)
        op |= LOCK_NB;
    for (;;) {
        if (flock(fd, op) == 0)
            return 0;
        if (errno != EINTR)
            return errno == EWOULDBLOCK ? EAGAIN : errno;
    }
}

int bl_plat_fb_flock_held(int fd)
{
    int err = bl_plat_fb_flock(fd, BL_PLAT_EXCLUSIVE, 0);
    if (err != 0)
        return 1;
    bl_plat_fb_flock(fd, BL_PLAT_UNLOCK, 0);
    return 0;
}

int bl_plat_fb_write_zeros(int fd, off_t off, off_t len)
{
    static const unsigned char zero[65536];
    while (len > 0) {
        size_t n = len < (off_t)sizeof zero ? (size_t)len : sizeof zero;
        ssize_t w = pwrite(fd, zero, n, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        off += w;
        len -= w;
    }
    return 0;
}

int bl_plat_fb_tmpfile_at(int dirfd, const char *name)
{
    int fd = openat(dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 && unlinkat(dirfd, name, 0) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

int bl_plat_fb_fsync(int fd)
{
    while (fsync(fd) != 0) {
        if (errno != EINTR)
            return errno;
    }
    return 0;
}

int bl_plat_fb_mincore(const void *addr, size_t len)
{
#if defined(__APPLE__) || defined(__FreeBSD__) || defined(__NetBSD__) || defined(__OpenBSD__)
    char vec[256]; /* the BSDs' mincore takes char */
#else
    unsigned char vec[256];
#endif
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    const char *p = addr, *end = p + len;
    while (p < end) {
        size_t n = (size_t)(end - p) > sizeof vec * pg ? sizeof vec * pg : (size_t)(end - p);
        if (mincore((void *)p, n, vec) != 0)
            return -1;
        for (size_t i = 0; i < (n + pg - 1) / pg; i++)
            if (!(vec[i] & 1))
                return 0;
        p += n;
    }
    return 1;
}

int bl_plat_fb_random(void *buf, size_t n)
{
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    unsigned char *p = buf;
    int err = 0;

    if (fd < 0)
        return errno;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            err = r < 0 ? errno : EIO;
            break;
        }
        p += r;
        n -= (size_t)r;
    }
    close(fd);
    return err;
}

const char *bl_plat_fb_secure_getenv(const char *name)
{
    if (getuid() != geteuid() || getgid() != getegid())
        return NULL;
    return getenv(name);
}

#if !BL_PLAT_ROBUST

/* This process's side of a bl_plat_xlock: found by the lock's address. */
typedef struct local {
    struct local *next;
    const bl_plat_xlock *l;
    int fd;
    int dirty; /* locked with owner_died and not yet made consistent */
    pthread_mutex_t mu;
} local;

static pthread_mutex_t locals_mu = PTHREAD_MUTEX_INITIALIZER;
static local *locals;

static local *find(const bl_plat_xlock *l)
{
    local *x;
    pthread_mutex_lock(&locals_mu);
    for (x = locals; x != NULL && x->l != l; x = x->next)
        ;
    pthread_mutex_unlock(&locals_mu);
    return x;
}

int bl_plat_fb_xlock_init(bl_plat_xlock *l, uint32_t byte)
{
    atomic_store(&l->held, 0);
    l->byte = byte;
    return 0;
}

int bl_plat_fb_xlock_attach(bl_plat_xlock *l, int fd)
{
    local *x = find(l);
    if (x != NULL) {
        x->fd = fd;
        return 0;
    }
    if ((x = calloc(1, sizeof *x)) == NULL)
        return ENOMEM;
    x->l = l;
    x->fd = fd;
    pthread_mutex_init(&x->mu, NULL);
    pthread_mutex_lock(&locals_mu);
    x->next = locals;
    locals = x;
    pthread_mutex_unlock(&locals_mu);
    return 0;
}

void bl_plat_fb_xlock_detach(const bl_plat_xlock *l)
{
    local **pp, *x = NULL;
    pthread_mutex_lock(&locals_mu);
    for (pp = &locals; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->l == l) {
            x = *pp;
            *pp = x->next;
            break;
        }
    }
    pthread_mutex_unlock(&locals_mu);
    if (x != NULL) {
        pthread_mutex_destroy(&x->mu);
        free(x);
    }
}

int bl_plat_fb_xlock_lock(bl_plat_xlock *l, int *owner_died, int64_t timeout_ms)
{
    local *x = find(l);
    int64_t end = timeout_ms < 0 ? 0 : bl_mono_ms() + timeout_ms;
    struct timespec nap = {0, 200000};
    int err;

    *owner_died = 0;
    if (x == NULL)
        return EINVAL; /* not attached: a bug of the caller */
    /* bounded: a trylock loop (macOS has no pthread_mutex_timedlock) */
    if (timeout_ms < 0) {
        pthread_mutex_lock(&x->mu);
    } else {
        while (pthread_mutex_trylock(&x->mu) != 0) {
            if (bl_mono_ms() >= end)
                return ETIMEDOUT;
            nanosleep(&nap, NULL);
        }
    }
    /* EDEADLK: the kernel sees a process, not its threads; one thread of
     * this process holding the other lock while another waits for this one
     * looks like a cycle when the holder here waits for that other lock.
     * The thread holding it will let go: wait and ask again.  With a
     * timeout the lock is tried and the wait is a poll. */
    for (;;) {
        err = bl_plat_fb_fcntl_lock(x->fd, timeout_ms < 0 ? F_SETLKW : F_SETLK, (off_t)l->byte, 1,
                                    BL_PLAT_EXCLUSIVE);
        if (err == 0)
            break;
        if (err != EDEADLK && err != EAGAIN && err != EACCES)
            break;
        if (timeout_ms >= 0 && bl_mono_ms() >= end) {
            err = ETIMEDOUT;
            break;
        }
        nanosleep(&nap, NULL);
    }
    if (err != 0) {
        pthread_mutex_unlock(&x->mu);
        return err;
    }
    /* set: its holder died holding it (the kernel dropped its fcntl lock) */
    if (atomic_exchange(&l->held, (uint32_t)getpid()) != 0) {
        *owner_died = 1;
        x->dirty = 1;
    }
    return 0;
}

void bl_plat_fb_xlock_consistent(bl_plat_xlock *l)
{
    local *x = find(l);
    if (x != NULL)
        x->dirty = 0;
}

void bl_plat_fb_xlock_unlock(bl_plat_xlock *l)
{
    local *x = find(l);
    if (x == NULL)
        return;
    /* not made consistent: the next locker is told its holder died */
    if (!x->dirty)
        atomic_store(&l->held, 0);
    x->dirty = 0;
    bl_plat_fb_fcntl_lock(x->fd, F_SETLK, (off_t)l->byte, 1, BL_PLAT_UNLOCK);
    pthread_mutex_unlock(&x->mu);
}

#endif /* !BL_PLAT_ROBUST */
