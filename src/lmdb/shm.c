/*
 * shm.c -- the shared-memory file of a store (shm.h).
 *
 * Attaching: every process holds a lock on data.mdb (the world lock) for
 * as long as it has the store open: shared normally, exclusive while it
 * rebuilds bindlog.shm.  It is a lock of the open file description this
 * handle keeps (bl_plat_fdlock: an OFD lock on the byte BL_SHM_WORLD_OFF on
 * Linux, flock() elsewhere), never a process's fcntl lock: the kernel drops
 * all of a process's fcntl locks on a file when the process closes *any*
 * descriptor of it -- LMDB's own, a check's, a backup's, the CLI's -- and a
 * newcomer would then believe it was alone and rebuild bindlog.shm under
 * live writers: two writer worlds (tests/test_world.c).  LMDB locks
 * lock.mdb, never data.mdb, so they do not meet.
 *
 *   1. try the exclusive lock: granted = nobody else is attached: alone;
 *   2. otherwise wait (bounded) for a shared lock (a rebuilder holds
 *      exclusive until it is done), then try to upgrade: granted =
 *      everybody left meanwhile: alone after all;
 *   3. otherwise the content was built by a process that is still
 *      attached: the file must be there, and be the one it was built in
 *      (the device and inode it records), else the open is refused.
 * A process that died while initialising leaves the magic cleared (it is
 * written last), and its world lock gone: the next one rebuilds.
 *
 * The gate.  The rebuilder's exclusive lock turns into a shared one when
 * the file is ready (bl_shm_share), and a newcomer's shared lock is tried
 * as exclusive (step 2).  An OFD lock converts atomically.  flock(2) does
 * not promise to (macOS's, the BSDs' and Linux's manuals: the old lock is
 * removed, then the new one set, and another process may get in between),
 * and a refused non-blocking upgrade leaves nothing held (Linux does
 * that: tests/test_world.c's racing opens fail without the re-take
 * below).  So where conversions are not atomic (BL_PLAT_FDLOCK_ATOMIC 0)
 * every exclusive attempt and every conversion is made holding a second
 * lock, the gate: nobody tries for exclusive while a conversion is under
 * way.  A shared lock taken from nothing needs no gate (it never makes
 * another process alone).  The gate is held for a few system calls at a
 * time, never during a rebuild, and waited for at most the lock timeout.
 * It is a flock of the store directory: data.mdb's flock is the world
 * lock itself (one flock a file); lock.mdb carries LMDB's fcntl locks,
 * which closing a descriptor of it would drop; bindlog.lock's flock says
 * "a writer is here" to vacuum and upgrade; bindlog.shm may be removed or
 * replaced.  The directory lasts as long as the store, and nothing else
 * locks it.
 *
 * Updates: one store per field, or a double-buffered record (end, ckpt):
 * the copy not in use is written with a check word, then the counter is
 * bumped in one store.  Every store has failpoints before and after
 * ("shm.<field>.before/.mid/.after", tests/faults/test_shm_kill.c kills
 * at each of them).
 *
 * Wake-ups: futexes on words of the shared mapping (not FUTEX_PRIVATE, so
 * they work across processes).  A publisher only makes the wake system
 * call when a waiter counter says somebody sleeps; sleepers wake at least
 * every SLEEP_SLICE_MS to look again, so a wrong counter never strands one.
 */
#define _GNU_SOURCE
#include "lmdb/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"
#include "core/error.h"
#include "core/failpoint.h"
#include "platform/platform.h"

#define SHM_MAGIC      "BLSHMEM"
#define SLEEP_SLICE_MS 100

_Static_assert(sizeof(bl_shm) <= BL_SHM_SIZE, "bl_shm must fit its file");

#define FP(name) ((void)BL_FAILPOINT(name))

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the world lock ---------------------------------------------------------- */

static int world_lock(int fd, int type, int wait)
{
    return bl_plat_fdlock(fd, BL_SHM_WORLD_OFF, type, wait);
}

static int conflict(int err) { return err == EAGAIN || err == EACCES; }

static int64_t deadline_of(int64_t timeout_ms)
{
    return timeout_ms < 0 ? INT64_MAX : bl_mono_ms() + timeout_ms;
}

/* The pid a rebuilder wrote into the file (0: unknown).  Only called while
 * this process does not map it (a second descriptor of bindlog.shm would
 * drop the process's fcntl locks on it, platform.h). */
static int32_t rebuilder_pid(const char *path)
{
    int32_t pid = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        if (pread(fd, &pid, sizeof pid, offsetof(bl_shm, init_pid)) != (ssize_t)sizeof pid)
            pid = 0;
        close(fd);
    }
    return pid;
}

/* Wait for the shared world lock until deadline. */
static int world_shared(int fd, int64_t deadline, int64_t timeout_ms, const char *path)
{
    for (long nap = 1;; nap = nap < 16 ? nap * 2 : 16) {
        int err = world_lock(fd, BL_PLAT_SHARED, 0);
        if (!conflict(err)) {
            if (err == 0)
                return 0;
            return bl_err_set(BINDLOG_EIO, "data.mdb: cannot lock: %s", strerror(err));
        }
        if (bl_mono_ms() >= deadline)
            return bl_err_set(BINDLOG_EBUSY,
                              "process %d holds the store's open lock exclusively (it is "
                              "rebuilding %s) for more than %lld ms",
                              (int)rebuilder_pid(path), BL_SHM_FILE, (long long)timeout_ms);
        nap_ms(nap);
    }
}

/* Take the gate (nothing to do where conversions are atomic), waiting
 * until deadline. */
static int gate_take(const bl_shmh *h, int64_t deadline, int64_t timeout_ms)
{
    if (BL_PLAT_FDLOCK_ATOMIC)
        return 0;
    for (long nap = 1;; nap = nap < 16 ? nap * 2 : 16) {
        int err = bl_plat_fdlock(h->gate_fd, 0, BL_PLAT_EXCLUSIVE, 0);
        if (err == 0)
            return 0;
        if (!conflict(err))
            return bl_err_set(BINDLOG_EIO, "the store directory: cannot lock: %s", strerror(err));
        if (bl_mono_ms() >= deadline)
            return bl_err_set(BINDLOG_EBUSY,
                              "another process holds the store directory's lock (taken for a "
                              "few system calls while a process joins the store) for more than "
                              "%lld ms (stopped?)",
                              (long long)timeout_ms);
        nap_ms(nap);
    }
}

/* Let go of the gate explicitly, not by closing: a fork's child shares
 * the description and would keep it held. */
static void gate_release(const bl_shmh *h)
{
    if (!BL_PLAT_FDLOCK_ATOMIC)
        (void)bl_plat_fdlock(h->gate_fd, 0, BL_PLAT_UNLOCK, 0);
}

/*
 * Join the processes that have the store open: *alone = 1 with the world
 * lock exclusive (nobody else attached), or 0 with it shared.  excl = 0
 * (data.mdb open read-only): never alone; BINDLOG_ENOTFOUND when nobody
 * else is attached.
 */
static int world_join(const bl_shmh *h, int excl, int64_t timeout_ms, int *alone)
{
    int64_t deadline = deadline_of(timeout_ms);
    int fd = h->world_fd, err, rc;

    *alone = 0;
    if ((rc = gate_take(h, deadline, timeout_ms)) != 0)
        return rc;
    if (!excl) {
        int held = bl_plat_fdlock_held(fd, BL_SHM_WORLD_OFF);
        gate_release(h);
        if (!held)
            return BINDLOG_ENOTFOUND; /* nobody to share with: private mode */
    } else {
        err = world_lock(fd, BL_PLAT_EXCLUSIVE, 0);
        gate_release(h);
        if (err == 0) {
            *alone = 1;
            return 0;
        }
        if (!conflict(err))
            return bl_err_set(BINDLOG_EIO, "data.mdb: cannot lock: %s", strerror(err));
    }
    if ((rc = world_shared(fd, deadline, timeout_ms, h->path)) != 0 || !excl)
        return rc;
    /* everybody may have left meanwhile: then this one is alone after all */
    if ((rc = gate_take(h, deadline, timeout_ms)) != 0)
        return rc;
    err = world_lock(fd, BL_PLAT_EXCLUSIVE, 0);
    if (err == 0) {
        *alone = 1;
    } else if (!BL_PLAT_FDLOCK_ATOMIC) {
        /* a refused flock upgrade may have dropped the shared lock: take it
         * again (nobody holds exclusive: every attempt is under the gate) */
        err = world_lock(fd, BL_PLAT_SHARED, 0);
        if (err != 0) {
            gate_release(h);
            return bl_err_set(BINDLOG_EIO, "data.mdb: cannot lock shared again: %s",
                              strerror(err));
        }
    }
    gate_release(h);
    return 0;
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir), k = strlen(name);
    char *p = malloc(n + k + 2);
    if (p != NULL) {
        memcpy(p, dir, n);
        p[n] = '/';
        memcpy(p + n + 1, name, k + 1);
    }
    return p;
}

static int open_error(int err, const char *file)
{
    if (err == ELOOP)
        return bl_err_set(BINDLOG_ENOTSTORE, "%s is a symbolic link", file);
    if (err == EACCES || err == EPERM || err == EROFS)
        return bl_err_set(BINDLOG_EACCES, "%s: %s", file, strerror(err));
    return bl_err_set(BINDLOG_EIO, "%s: %s", file, strerror(err));
}

int bl_shm_open(const char *dir, int read_only, int64_t timeout_ms, bl_shmh *h, int *alone)
{
    char *dpath;
    int fd, err, excl = 1;
    struct stat st;

    h->fd = -1;
    h->world_fd = -1;
    h->gate_fd = -1;
    h->timeout_ms = timeout_ms;
    h->m = NULL;
    h->made = 0;
    *alone = 0;
    h->path = join(dir, BL_SHM_FILE);
    dpath = join(dir, "data.mdb");
    if (h->path == NULL || dpath == NULL) {
        free(dpath);
        bl_shm_close(h);
        return BINDLOG_ENOMEM;
    }

    /* 1. the world lock */
    fd = open(dpath, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && read_only && (errno == EACCES || errno == EPERM || errno == EROFS)) {
        fd = open(dpath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        excl = 0; /* a shared lock only: this process can never rebuild */
    }
    err = errno;
    free(dpath);
    if (fd < 0) {
        bl_shm_close(h);
        return open_error(err, "data.mdb");
    }
    h->world_fd = fd;
    if (!BL_PLAT_FDLOCK_ATOMIC) {
        h->gate_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        err = errno;
    }
    if (!BL_PLAT_FDLOCK_ATOMIC && h->gate_fd < 0) {
        bl_shm_close(h);
        return open_error(err, "the store directory");
    }
    if ((err = world_join(h, excl, timeout_ms, alone)) != 0) {
        bl_shm_close(h);
        return err;
    }

    /* 2. the file */
    fd = -1;
    if (*alone && !read_only) {
        fd = open(h->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_CREAT | O_EXCL, 0600);
        h->made = fd >= 0;
    }
    if (fd < 0)
        fd = open(h->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    err = errno;
    if (fd < 0) {
        bl_shm_close(h);
        if (err == ENOENT && *alone)
            return BINDLOG_ENOTFOUND; /* read-only and nobody attached: private mode */
        if (err == ENOENT)
            return bl_err_set(BINDLOG_EBUSY,
                              "%s is missing while other processes have the store open (it was "
                              "removed under them): close the store in every process first",
                              BL_SHM_FILE);
        return open_error(err, BL_SHM_FILE);
    }
    h->fd = fd;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        bl_shm_close(h);
        return bl_err_set(BINDLOG_ENOTSTORE, "%s is not a regular file", BL_SHM_FILE);
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
            return bl_err_set(err == ENOSPC ? BINDLOG_ENOSPC : BINDLOG_EIO, "%s: %s", BL_SHM_FILE,
                              strerror(err));
        }
    } else if ((uint64_t)st.st_size < BL_SHM_SIZE) {
        bl_shm_close(h);
        return bl_err_set(BINDLOG_EBUSY,
                          "%s is not the file the processes that have the store open use (it "
                          "was replaced under them): close the store in every process first",
                          BL_SHM_FILE);
    }
    void *p = mmap(NULL, BL_SHM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        err = errno;
        if (*alone)
            bl_shm_discard(h);
        else
            bl_shm_close(h);
        return bl_err_set(err == ENOMEM ? BINDLOG_ENOMEM : BINDLOG_EIO, "%s: mmap: %s", BL_SHM_FILE,
                          strerror(err));
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
        close(h->fd);
    if (h->world_fd >= 0)
        close(h->world_fd); /* drops the world lock (shared with a fork's child, if any) */
    if (h->gate_fd >= 0)
        close(h->gate_fd); /* never held here: gate_release came first */
    free(h->path);
    h->m = NULL;
    h->fd = -1;
    h->world_fd = -1;
    h->gate_fd = -1;
    h->path = NULL;
    h->made = 0;
}

void bl_shm_discard(bl_shmh *h)
{
    /* the exclusive world lock is still held: nobody else maps it */
    if (h->made && h->fd >= 0 && h->path != NULL)
        unlink(h->path);
    bl_shm_close(h);
}

/* ---- double-buffered points ------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t point_check(uint64_t lsn, uint64_t pos, uint64_t chain, uint32_t n)
{
    return mix(mix(mix(mix(0x9e3779b97f4a7c15ull ^ n) ^ lsn) ^ pos) ^ chain);
}

static void copy_write(bl_shm_copy *c, const bl_wal_at *at, uint32_t n)
{
    atomic_store(&c->lsn, at->lsn);
    atomic_store(&c->pos, at->pos);
    atomic_store(&c->chain, at->chain);
    atomic_store(&c->check, point_check(at->lsn, at->pos, at->chain, n));
}

static void rec_init(bl_shm_rec *r, const bl_wal_at *at)
{
    copy_write(&r->copy[0], at, 0);
    atomic_store(&r->cur, 0);
}

/* The current copy.  The writer only ever writes the copy not in use, and
 * makes it current by one store of the counter: a reader that read the
 * counter as c before and after its loads read copy c whole (all accesses
 * are sequentially consistent).  A moved counter means a live writer made
 * progress: read again.  A stable counter with a wrong check is damage. */
static int rec_get(bl_shm_rec *r, bl_wal_at *at)
{
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        uint32_t c = atomic_load(&r->cur);
        bl_shm_copy *p = &r->copy[c & 1];
        uint64_t lsn = atomic_load(&p->lsn), pos = atomic_load(&p->pos);
        uint64_t chain = atomic_load(&p->chain), check = atomic_load(&p->check);
        if (atomic_load(&r->cur) != c)
            continue;
        if (check == point_check(lsn, pos, chain, c)) {
            at->lsn = lsn;
            at->pos = pos;
            at->chain = chain;
            return 0;
        }
        if (++bad >= 3)
            break;
    }
    return BINDLOG_ECORRUPT;
}

int bl_shm_get_end(bl_shm *m, bl_wal_at *at) { return rec_get(&m->end, at); }

int bl_shm_get_ckpt(bl_shm *m, bl_wal_at *at) { return rec_get(&m->ckpt, at); }

void bl_shm_set_end(bl_shm *m, const bl_wal_at *at)
{
    uint32_t n = atomic_load(&m->end.cur) + 1;
    FP("shm.end.before");
    copy_write(&m->end.copy[n & 1], at, n);
    FP("shm.end.mid");
    atomic_store(&m->end.cur, n);
    FP("shm.end.after");
}

void bl_shm_set_ckpt(bl_shm *m, const bl_wal_at *at)
{
    uint32_t n = atomic_load(&m->ckpt.cur) + 1;
    FP("shm.ckpt.before");
    copy_write(&m->ckpt.copy[n & 1], at, n);
    FP("shm.ckpt.mid");
    atomic_store(&m->ckpt.cur, n);
    FP("shm.ckpt.after");
}

/* ---- content ------------------------------------------------------------------ */

int bl_shm_init(bl_shmh *h, uint64_t salt, uint64_t cap, const bl_wal_at *end,
                const bl_wal_at *ckpt)
{
    bl_shm *m = h->m;
    struct stat st;
    int rc;

    if (fstat(h->fd, &st) != 0)
        return bl_err_set(BINDLOG_EIO, "%s: %s", BL_SHM_FILE, strerror(errno));
    FP("shm.init.before");
    /* cleared first, written last: a death in between leaves it invalid */
    memset(m->magic, 0, sizeof(m->magic));
    atomic_thread_fence(memory_order_seq_cst);
    memset((char *)m + sizeof(m->magic), 0, sizeof(*m) - sizeof(m->magic));
    atomic_store(&m->init_pid, (int32_t)getpid());
    FP("shm.init.mid");
    m->version = BL_SHM_VERSION;
    m->size = (uint32_t)sizeof(*m);
    m->salt = salt;
    m->cap = cap;
    m->dev = (uint64_t)st.st_dev;
    m->ino = (uint64_t)st.st_ino;
    /* bytes 1 and 2 of bindlog.shm where the lock is an fcntl one */
    rc = bl_plat_xlock_init(&m->wlock, 1);
    if (rc == 0)
        rc = bl_plat_xlock_init(&m->clock, 2);
    if (rc != 0)
        return bl_err_set(BINDLOG_EIO, "%s: cannot make its locks: %s", BL_SHM_FILE, strerror(rc));
    rec_init(&m->end, end);
    atomic_store(&m->vis_lsn, end->lsn);
    rec_init(&m->ckpt, ckpt);
    atomic_thread_fence(memory_order_seq_cst);
    memcpy(m->magic, SHM_MAGIC, sizeof(SHM_MAGIC));
    atomic_thread_fence(memory_order_seq_cst);
    FP("shm.init.after");
    return 0;
}

int bl_shm_share(bl_shmh *h)
{
    int rc = gate_take(h, deadline_of(h->timeout_ms), h->timeout_ms);
    if (rc != 0)
        return rc;
    /* atomic with an OFD lock; with flock the exclusive lock goes first,
     * but nobody can try for it meanwhile (the gate) */
    int err = world_lock(h->world_fd, BL_PLAT_SHARED, 0);
    gate_release(h);
    h->made = 0; /* in use from now on: never removed */
    return err == 0 ? 0 : bl_err_set(BINDLOG_EIO, "data.mdb: cannot lock: %s", strerror(err));
}

int bl_shm_valid(const bl_shmh *h, uint64_t salt, uint64_t cap)
{
    const bl_shm *m = h->m;
    struct stat st;
    atomic_thread_fence(memory_order_seq_cst);
    return memcmp(m->magic, SHM_MAGIC, sizeof(SHM_MAGIC)) == 0 && m->version == BL_SHM_VERSION &&
           m->size == sizeof(*m) && m->salt == salt && m->cap == cap && fstat(h->fd, &st) == 0 &&
           m->dev == (uint64_t)st.st_dev && m->ino == (uint64_t)st.st_ino;
}

int bl_shm_linked(const bl_shmh *h)
{
    /* fstat, not stat of the path: a system call without a path lookup on
     * every commit.  Removal and rename-over both leave the mapped file
     * without a link; a file linked elsewhere first and then replaced
     * stays this process's (newcomers refuse the new one: one world). */
    struct stat st;
    if (fstat(h->fd, &st) != 0 || st.st_nlink > 0)
        return 0;
    return bl_err_set(BINDLOG_EIO,
                      "%s was removed or replaced while this process had the store open: "
                      "nothing was written; close the store in every process and open it again",
                      BL_SHM_FILE);
}

/* ---- the locks ------------------------------------------------------------------ */

static _Atomic int32_t *holder_of(bl_shm *m, const bl_plat_xlock *mu)
{
    return mu == &m->wlock ? &m->wlock_pid : &m->clock_pid;
}

int bl_shm_lock(bl_shm *m, bl_plat_xlock *mu, int *owner_died, int64_t timeout_ms)
{
    int rc = bl_plat_xlock_lock(mu, owner_died, timeout_ms);
    if (rc == ETIMEDOUT || rc == EBUSY)
        return bl_err_set(
            BINDLOG_EBUSY, "process %d holds the store's %s for more than %lld ms (stopped?)",
            (int)atomic_load(holder_of(m, mu)),
            mu == &m->wlock ? "writers' lock" : "checkpointers' lock", (long long)timeout_ms);
    if (rc != 0)
        return bl_err_set(BINDLOG_EIO, "%s: a lock is unusable: %s", BL_SHM_FILE, strerror(rc));
    FP("shm.owner.before");
    atomic_store(holder_of(m, mu), (int32_t)getpid());
    FP("shm.owner.after");
    return 0;
}

void bl_shm_unlock(bl_shm *m, bl_plat_xlock *mu)
{
    atomic_store(holder_of(m, mu), 0);
    bl_plat_xlock_unlock(mu);
}

/* ---- the visible end and wake-ups -------------------------------------- */


void bl_shm_wake(_Atomic uint32_t *word)
{
    FP("shm.wake.before");
    atomic_fetch_add(word, 1);
    FP("shm.wake.after");
    bl_plat_wake_all(word);
}

void bl_shm_publish(bl_shm *m, uint64_t lsn)
{
    uint64_t cur = atomic_load(&m->vis_lsn);
    if (cur >= lsn)
        return;
    FP("shm.vis.before");
    while (cur < lsn && !atomic_compare_exchange_weak(&m->vis_lsn, &cur, lsn))
        ;
    FP("shm.vis.after");
    /* vis_lsn is stored before head_waiters is read, and a waiter counts
     * itself before it reads vis_lsn (both sequentially consistent), so
     * either the waiter sees the new end or this sees the waiter. */
    if (cur < lsn && atomic_load(&m->head_waiters) != 0) {
        atomic_fetch_add_explicit(&m->wakes, 1, memory_order_relaxed);
        bl_shm_wake(&m->head_futex);
    }
}

void bl_shm_set_vis(bl_shm *m, uint64_t lsn)
{
    FP("shm.vis.before");
    atomic_store(&m->vis_lsn, lsn);
    FP("shm.vis.after");
}

void bl_shm_store64(_Atomic uint64_t *f, uint64_t v)
{
    FP("shm.word.before");
    atomic_store(f, v);
    FP("shm.word.after");
}

void bl_shm_store32(_Atomic uint32_t *f, uint32_t v)
{
    FP("shm.word.before");
    atomic_store(f, v);
    FP("shm.word.after");
}

void bl_shm_sleep(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms)
{
    if (timeout_ms < 0 || timeout_ms > SLEEP_SLICE_MS)
        timeout_ms = SLEEP_SLICE_MS;
    bl_plat_wait(word, seen, timeout_ms); /* the caller re-checks */
}
