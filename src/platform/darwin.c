/*
 * darwin.c -- the platform layer on macOS (12 and later, arm64 and x86_64).
 *
 * Waiting on a shared word: os_sync_wait_on_address_with_timeout and
 * os_sync_wake_by_address_all with their SHARED flags where the system has
 * them (macOS 14.4 and later), else __ulock_wait / __ulock_wake with
 * UL_COMPARE_AND_WAIT_SHARED (the calls libc++ and Chromium use on older
 * systems), else the portable sleep-poll.  Both are looked up with dlsym
 * once, so one binary runs on every version and links without the newest
 * SDK.
 *
 * A flush is fcntl(F_FULLFSYNC): fsync on macOS hands the data to the drive
 * without asking it to write its cache, so it does not survive a power loss
 * (LMDB and SQLite's fullfsync do the same).  Where a file system refuses
 * F_FULLFSYNC (some network and FUSE file systems), fsync is what remains;
 * bl_plat_flush_weakened() tells the caller once.
 *
 * No robust mutexes on macOS: the cross-process mutex is fallback.c's fcntl
 * lock (bindlog.shm is opened once per process).  No OFD locks either: a
 * lock that must outlive the process's other descriptors of its file (the
 * world lock on data.mdb) is a flock() lock, independent of fcntl locks.
 */
/* the BSD and Darwin names (F_FULLFSYNC, fstore_t, issetugid) also in a
 * build that defines _POSIX_C_SOURCE */
#define _DARWIN_C_SOURCE 1
#include "platform/fallback.h"

/* Every file of src/platform/ may be compiled (the bindings compile the
 * folder): only the one of the platform selected has content. */
#if defined(BL_PLATFORM_DARWIN)

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* getentropy is in <sys/random.h> since macOS 10.12; declared here so that
 * the file does not depend on which header a given SDK puts it in. */
int getentropy(void *buf, size_t n);

const char *bl_plat_name(void) { return "darwin"; }

/* ---- waiting on a shared word -------------------------------------------------- */

/* <os/os_sync_wait_on_address.h> (macOS 14.4) */
#define OS_SYNC_WAIT_ON_ADDRESS_NONE 0u
#define OS_SYNC_WAIT_ON_ADDRESS_SHARED 1u
#define OS_SYNC_WAKE_BY_ADDRESS_NONE 0u
#define OS_SYNC_WAKE_BY_ADDRESS_SHARED 1u
#define OS_CLOCK_MACH_ABSOLUTE_TIME 32u
typedef int (*os_wait_fn)(void *addr, uint64_t value, size_t size, uint32_t flags,
                          uint32_t clockid, uint64_t timeout_ns);
typedef int (*os_wait_nt_fn)(void *addr, uint64_t value, size_t size, uint32_t flags);
typedef int (*os_wake_fn)(void *addr, size_t size, uint32_t flags);
/* xnu's <sys/ulock.h> */
#define UL_COMPARE_AND_WAIT 1u
#define UL_COMPARE_AND_WAIT_SHARED 3u
#define ULF_WAKE_ALL 0x00000100u
typedef int (*ulock_wait_fn)(uint32_t op, void *addr, uint64_t value, uint32_t timeout_us);
typedef int (*ulock_wake_fn)(uint32_t op, void *addr, uint64_t wake_value);

static struct {
    os_wait_fn os_wait;
    os_wait_nt_fn os_wait_nt;
    os_wake_fn os_wake;
    ulock_wait_fn ul_wait;
    ulock_wake_fn ul_wake;
} sys;
static pthread_once_t sys_once = PTHREAD_ONCE_INIT;

static void sys_find(void)
{
    sys.os_wait = (os_wait_fn)dlsym(RTLD_DEFAULT, "os_sync_wait_on_address_with_timeout");
    sys.os_wait_nt = (os_wait_nt_fn)dlsym(RTLD_DEFAULT, "os_sync_wait_on_address");
    sys.os_wake = (os_wake_fn)dlsym(RTLD_DEFAULT, "os_sync_wake_by_address_all");
    if (sys.os_wait == NULL || sys.os_wait_nt == NULL || sys.os_wake == NULL)
        sys.os_wait = NULL;
    sys.ul_wait = (ulock_wait_fn)dlsym(RTLD_DEFAULT, "__ulock_wait");
    sys.ul_wake = (ulock_wake_fn)dlsym(RTLD_DEFAULT, "__ulock_wake");
    if (sys.ul_wait == NULL || sys.ul_wake == NULL)
        sys.ul_wait = NULL;
}

/* A wait on a word of one process (local) or of memory mapped by several. */
static void word_wait(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms, int local)
{
    pthread_once(&sys_once, sys_find);
    if (sys.os_wait != NULL) {
        if (timeout_ms < 0)
            sys.os_wait_nt((void *)word, seen, 4,
                           local ? OS_SYNC_WAIT_ON_ADDRESS_NONE : OS_SYNC_WAIT_ON_ADDRESS_SHARED);
        else if (timeout_ms > 0)
            sys.os_wait((void *)word, seen, 4,
                        local ? OS_SYNC_WAIT_ON_ADDRESS_NONE : OS_SYNC_WAIT_ON_ADDRESS_SHARED,
                        OS_CLOCK_MACH_ABSOLUTE_TIME, (uint64_t)timeout_ms * 1000000u);
        return; /* EINTR, ETIMEDOUT, EFAULT: the caller re-checks */
    }
    if (sys.ul_wait != NULL) {
        /* the timeout is in microseconds, 0 meaning none: cap long ones
         * (the caller re-checks and waits again) */
        uint32_t us = 0;
        if (timeout_ms == 0)
            return;
        if (timeout_ms > 0)
            us = timeout_ms >= 4000000 ? 4000000000u : (uint32_t)timeout_ms * 1000u;
        sys.ul_wait(local ? UL_COMPARE_AND_WAIT : UL_COMPARE_AND_WAIT_SHARED, (void *)word, seen, us);
        return;
    }
    bl_plat_fb_wait(word, seen, timeout_ms);
}

static void word_wake_all(_Atomic uint32_t *word, int local)
{
    pthread_once(&sys_once, sys_find);
    if (sys.os_wait != NULL)
        sys.os_wake((void *)word, 4,
                    local ? OS_SYNC_WAKE_BY_ADDRESS_NONE : OS_SYNC_WAKE_BY_ADDRESS_SHARED);
    else if (sys.ul_wait != NULL)
        sys.ul_wake((local ? UL_COMPARE_AND_WAIT : UL_COMPARE_AND_WAIT_SHARED) | ULF_WAKE_ALL,
                    (void *)word, 0);
    /* the sleep-poll needs no wake-up */
}

void bl_plat_wait(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms)
{
    word_wait(word, seen, timeout_ms, 0);
}

void bl_plat_wake_all(_Atomic uint32_t *word) { word_wake_all(word, 0); }

void bl_plat_wait_local(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms)
{
    word_wait(word, seen, timeout_ms, 1);
}

void bl_plat_wake_all_local(_Atomic uint32_t *word) { word_wake_all(word, 1); }

/* ---- locks ---------------------------------------------------------------------- */

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

/* ---- files ---------------------------------------------------------------------- */

int bl_plat_reserve(int fd, off_t len, int keep_size)
{
    struct stat st;
    fstore_t fs;

    if (fstat(fd, &st) != 0)
        return errno;
    /* F_PREALLOCATE counts from the end of what is allocated (F_PEOFPOSMODE) */
    memset(&fs, 0, sizeof fs);
    fs.fst_flags = F_ALLOCATECONTIG | F_ALLOCATEALL;
    fs.fst_posmode = F_PEOFPOSMODE;
    fs.fst_offset = 0;
    fs.fst_length = len;
    if (fcntl(fd, F_PREALLOCATE, &fs) != 0) {
        fs.fst_flags = F_ALLOCATEALL;
        if (fcntl(fd, F_PREALLOCATE, &fs) != 0)
            return errno == EINVAL || errno == ENOTSUP ? EOPNOTSUPP : errno;
    }
    if (!keep_size && st.st_size < len && ftruncate(fd, len) != 0)
        return errno;
    return 0;
}

int bl_plat_write_zeros(int fd, off_t off, off_t len) { return bl_plat_fb_write_zeros(fd, off, len); }
int bl_plat_tmpfile_at(int dirfd, const char *name) { return bl_plat_fb_tmpfile_at(dirfd, name); }

static atomic_int weakened, told;

int bl_plat_flush(int fd)
{
    for (;;) {
        if (fcntl(fd, F_FULLFSYNC) == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno != ENOTSUP && errno != EINVAL && errno != ENOTTY)
            return errno;
        break;
    }
    /* the file system refuses it: fsync is all there is */
    atomic_store(&weakened, 1);
    return bl_plat_fb_fsync(fd);
}

int bl_plat_flush_file(int fd) { return bl_plat_flush(fd); }

int bl_plat_flush_weakened(void) { return atomic_load(&weakened) && !atomic_exchange(&told, 1); }

void bl_plat_writeback(int fd) { (void)fd; }

void bl_plat_read_exact(int fd)
{
    (void)fcntl(fd, F_RDAHEAD, 0);
}

int bl_plat_resident(const void *addr, size_t len)
{
    return bl_plat_fb_mincore(addr, len);
}

/* Darwin's rwlocks already block new readers while a writer waits. */
void bl_plat_rwlock_prefer_writers(pthread_rwlockattr_t *a) { (void)a; }

/* (no MAP_POPULATE: the pages come at their first touches) */
void *bl_plat_map_anon(size_t bytes, int populate)
{
    (void)populate; /* the pages come at first touch */
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void bl_plat_unmap_anon(void *p, size_t bytes)
{
    if (p != NULL)
        munmap(p, bytes);
}

int bl_plat_io_idle_begin(int *saved)
{
    *saved = -1;
    int was = getiopolicy_np(IOPOL_TYPE_DISK, IOPOL_SCOPE_THREAD);
    if (was < 0)
        return errno;
    if (setiopolicy_np(IOPOL_TYPE_DISK, IOPOL_SCOPE_THREAD, IOPOL_THROTTLE) != 0)
        return errno;
    *saved = was;
    return 0;
}

void bl_plat_io_idle_end(int saved)
{
    if (saved >= 0)
        (void)setiopolicy_np(IOPOL_TYPE_DISK, IOPOL_SCOPE_THREAD, saved);
}

/* ---- the process ------------------------------------------------------------------ */

int bl_plat_random(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        size_t k = n < 256 ? n : 256; /* getentropy's limit */
        if (getentropy(p, k) != 0)
            return bl_plat_fb_random(p, n);
        p += k;
        n -= k;
    }
    return 0;
}

const char *bl_plat_secure_getenv(const char *name) { return issetugid() ? NULL : getenv(name); }

#else
typedef int bl_plat_darwin_unused; /* not this platform: an empty unit */
#endif /* BL_PLATFORM_DARWIN */
