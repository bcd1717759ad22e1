/*
 * shim.c -- LD_PRELOAD shim for I/O faults and power-loss simulation.
 *
 * See shim.h for what it does and how it is configured.  Implementation
 * notes:
 *   - Real functions come from dlsym(RTLD_NEXT).  LMDB 0.9.24 calls open()
 *     (data.mdb twice: once O_RDWR, once O_WRONLY|O_DSYNC for meta pages
 *     unless MDB_NOMETASYNC/MDB_NOSYNC), lseek()+writev() for data pages,
 *     pwrite() for meta pages, fdatasync() (fsync() on some platforms) and
 *     msync() only with MDB_WRITEMAP, which bindlog does not use.  glibc's
 *     64-bit aliases (open64, pwrite64, pwritev64...) are interposed too.
 *   - Files are identified by device and inode, since two descriptors of
 *     one file share its page cache: a sync through either makes every
 *     earlier write of the file durable.
 *   - One mutex serialises every tracked operation together with its
 *     journalling, so the journal's order is the order of the writes, and a
 *     power loss taken while holding it sees no write half done.
 *   - msync() is passed through and counted only: mappings are not tracked.
 */
#define _GNU_SOURCE
#include "shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define SHIM_API __attribute__((visibility("default")))
#define MAX_FDS 4096
#define MAX_FILES 64

typedef struct entry {
    uint64_t seq, off, len, size_before;
    int durable;          /* 'D': an O_DSYNC write, recorded as a barrier */
    unsigned char *old;   /* len bytes, NULL for 'D' */
} entry;

typedef struct tfile {
    dev_t dev;
    ino_t ino;
    char name[SHIM_NAME_MAX];
    uint64_t durable_size;
    entry *ents;
    size_t n, cap;
} tfile;

typedef struct fdinfo {
    int tracked;
    int dsync;
    int file;  /* index in files[] */
} fdinfo;

typedef struct failcfg {
    long first, last; /* fail ops numbered first..last (1-based); last -1 = forever */
    int err;
} failcfg;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off_t);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_close)(int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_msync)(void *, size_t, int);
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static off_t (*real_lseek)(int, off_t, int);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char track_dir[4096];
static fdinfo fds[MAX_FDS];
static tfile files[MAX_FILES];
static size_t nfiles;
static uint64_t seq;
static long ops[2];          /* tracked writes, syncs */
static long all_ops;         /* both */
static failcfg fail[2];
static long crash_at;        /* all_ops number of the power loss, 0 = none */
static char journal_path[4096];
static volatile sig_atomic_t crash_flag;
static long msyncs;

#define LOAD(name) (real_##name = (__typeof__(real_##name))dlsym(RTLD_NEXT, #name))

static void load_real(void)
{
    LOAD(write);
    LOAD(pwrite);
    LOAD(pwrite64);
    LOAD(writev);
    LOAD(pwritev);
    LOAD(pwritev64);
    LOAD(open);
    LOAD(open64);
    LOAD(openat);
    LOAD(openat64);
    LOAD(close);
    LOAD(fsync);
    LOAD(fdatasync);
    LOAD(msync);
    LOAD(pread);
    LOAD(lseek);
}

static void on_signal(int sig)
{
    (void)sig;
    crash_flag = 1;
}

static int parse_errno(const char *s)
{
    if (strcmp(s, "EIO") == 0)
        return EIO;
    if (strcmp(s, "ENOSPC") == 0)
        return ENOSPC;
    if (strcmp(s, "EDQUOT") == 0)
        return EDQUOT;
    return atoi(s);
}

static void set_fail(int what, long nth, int err, long count)
{
    if (err == 0 || nth <= 0) {
        fail[what].err = 0;
        return;
    }
    fail[what].first = ops[what] + nth;
    fail[what].last = count < 0 ? -1 : fail[what].first + (count > 0 ? count : 1) - 1;
    fail[what].err = err;
}

__attribute__((constructor)) static void shim_init(void)
{
    const char *v;

    load_real();
    if ((v = getenv("BINDLOG_SHIM_DIR")) != NULL)
        snprintf(track_dir, sizeof(track_dir), "%s", v);
    if ((v = getenv("BINDLOG_SHIM_JOURNAL")) != NULL)
        snprintf(journal_path, sizeof(journal_path), "%s", v);
    if ((v = getenv("BINDLOG_SHIM_CRASH_AFTER")) != NULL)
        crash_at = atol(v);
    if ((v = getenv("BINDLOG_SHIM_CRASH_SIGNAL")) != NULL) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_signal;
        sigaction(atoi(v), &sa, NULL);
    }
    if ((v = getenv("BINDLOG_SHIM_FAIL")) != NULL) {
        char buf[128], *f[4] = {0};
        int n = 0;
        snprintf(buf, sizeof(buf), "%s", v);
        for (char *p = strtok(buf, ":"); p != NULL && n < 4; p = strtok(NULL, ":"))
            f[n++] = p;
        if (n >= 3) {
            int what = strcmp(f[0], "write") == 0 ? SHIM_WRITE : SHIM_SYNC;
            set_fail(what, atol(f[1]), parse_errno(f[2]), n == 4 ? atol(f[3]) : 1);
        }
    }
}

/* ---- control API --------------------------------------------------------- */

SHIM_API void bl_shim_track(const char *dir)
{
    pthread_mutex_lock(&mu);
    snprintf(track_dir, sizeof(track_dir), "%s", dir != NULL ? dir : "");
    /* no tracked descriptor open: the files seen so far are done with, and
     * the table (MAX_FILES) starts empty again.  A test that tracks store
     * after store would fill it, and files past it went untracked. */
    int open_fds = 0;
    for (int fd = 0; fd < MAX_FDS && !open_fds; fd++)
        open_fds = fds[fd].tracked;
    if (!open_fds) {
        for (size_t i = 0; i < nfiles; i++) {
            for (size_t j = 0; j < files[i].n; j++)
                free(files[i].ents[j].old);
            free(files[i].ents);
        }
        memset(files, 0, sizeof files);
        nfiles = 0;
    }
    pthread_mutex_unlock(&mu);
}

SHIM_API void bl_shim_fail(int what, long nth, int err, long count)
{
    pthread_mutex_lock(&mu);
    if (what == SHIM_WRITE || what == SHIM_SYNC)
        set_fail(what, nth, err, count);
    pthread_mutex_unlock(&mu);
}

SHIM_API void bl_shim_crash_after(long nth, const char *path)
{
    pthread_mutex_lock(&mu);
    crash_at = nth > 0 ? all_ops + nth : 0;
    snprintf(journal_path, sizeof(journal_path), "%s", path != NULL ? path : "");
    pthread_mutex_unlock(&mu);
}

SHIM_API long bl_shim_ops(int what)
{
    pthread_mutex_lock(&mu);
    long n = what == SHIM_WRITE || what == SHIM_SYNC ? ops[what] : msyncs;
    pthread_mutex_unlock(&mu);
    return n;
}

/* ---- tracking ------------------------------------------------------------ */

/* A descriptor was opened: track it if its path is under the tracked dir. */
static void opened(int fd, const char *path, int flags)
{
    struct stat st;
    char real[4096];

    if (fd < 0 || fd >= MAX_FDS || path == NULL)
        return;
    if (path[0] != '/') {
        /* openat() relative to a directory (upgrade's staging files, an
         * O_TMPFILE): the path the descriptor has, from /proc */
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, real, sizeof real - 1);
        if (n > 0) {
            real[n] = '\0';
            path = real;
        }
    }
    pthread_mutex_lock(&mu);
    fds[fd].tracked = 0;
    if (track_dir[0] != '\0' && strstr(path, track_dir) != NULL && fstat(fd, &st) == 0 &&
        S_ISREG(st.st_mode)) {
        size_t i;
        for (i = 0; i < nfiles; i++)
            if (files[i].dev == st.st_dev && files[i].ino == st.st_ino)
                break;
        if (i == nfiles && nfiles < MAX_FILES) {
            const char *base = strrchr(path, '/');
            memset(&files[i], 0, sizeof(files[i]));
            files[i].dev = st.st_dev;
            files[i].ino = st.st_ino;
            snprintf(files[i].name, sizeof(files[i].name), "%.*s", SHIM_NAME_MAX - 1,
                     base ? base + 1 : path);
            files[i].durable_size = (uint64_t)st.st_size;
            nfiles++;
        }
        if (i < nfiles) {
            fds[fd].tracked = 1;
            fds[fd].file = (int)i;
            fds[fd].dsync = (flags & (O_DSYNC | O_SYNC)) != 0;
        }
    }
    pthread_mutex_unlock(&mu);
}

static void put_rec(int fd, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = real_write(fd, b, n);
        if (w <= 0)
            return;
        b += w;
        n -= (size_t)w;
    }
}

/* The power loss: write the journal and leave without any cleanup.  Called
 * with mu held, so no tracked write is half done. */
static void crash_now(void)
{
    int fd = journal_path[0] ? real_open(journal_path, O_WRONLY | O_CREAT | O_TRUNC, 0600) : -1;
    if (fd >= 0) {
        for (size_t i = 0; i < nfiles; i++) {
            char t = 'Z';
            put_rec(fd, &t, 1);
            put_rec(fd, files[i].name, SHIM_NAME_MAX);
            put_rec(fd, &files[i].durable_size, 8);
        }
        /* entries of all files, merged in seq order */
        size_t *pos = calloc(nfiles ? nfiles : 1, sizeof(size_t));
        for (;;) {
            size_t best = nfiles;
            for (size_t i = 0; i < nfiles; i++)
                if (pos && pos[i] < files[i].n &&
                    (best == nfiles || files[i].ents[pos[i]].seq < files[best].ents[pos[best]].seq))
                    best = i;
            if (best == nfiles)
                break;
            entry *e = &files[best].ents[pos[best]++];
            char t = e->durable ? 'D' : 'W';
            put_rec(fd, &t, 1);
            put_rec(fd, files[best].name, SHIM_NAME_MAX);
            put_rec(fd, &e->seq, 8);
            put_rec(fd, &e->off, 8);
            put_rec(fd, &e->len, 8);
            if (!e->durable) {
                put_rec(fd, &e->size_before, 8);
                put_rec(fd, e->old, e->len);
            }
        }
        free(pos);
        real_fsync(fd);
        real_close(fd);
    }
    _exit(SHIM_CRASH_EXIT);
}

/* Count a tracked operation; crash or decide an injected failure.
 * Returns 0 or the errno to fail with.  mu held. */
static int count_op(int what)
{
    all_ops++;
    if ((crash_at > 0 && all_ops >= crash_at) || crash_flag)
        crash_now();
    long n = ++ops[what];
    const failcfg *f = &fail[what];
    if (f->err != 0 && n >= f->first && (f->last < 0 || n <= f->last))
        return f->err;
    return 0;
}

/* Journal a write of len bytes at off to the file behind fd.  mu held. */
static void journal(int fd, uint64_t off, uint64_t len)
{
    tfile *f = &files[fds[fd].file];
    struct stat st;
    entry e;

    if (len == 0)
        return;
    memset(&e, 0, sizeof(e));
    e.seq = ++seq;
    e.off = off;
    e.len = len;
    e.durable = fds[fd].dsync;
    if (!e.durable) {
        e.size_before = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
        e.old = calloc(1, len);
        if (e.old == NULL)
            abort(); /* a journal with a hole would make images lie */
        if (off < e.size_before) {
            uint64_t n = e.size_before - off < len ? e.size_before - off : len;
            /* the descriptor may be write-only: read through a fresh one */
            ssize_t r = real_pread(fd, e.old, n, (off_t)off);
            if (r < 0) {
                char path[64];
                snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
                int rfd = real_open(path, O_RDONLY);
                if (rfd < 0 || real_pread(rfd, e.old, n, (off_t)off) != (ssize_t)n)
                    abort();
                real_close(rfd);
            }
        }
    } else if (f->n == 0) {
        return; /* a durable write with nothing pending: no barrier needed */
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 64;
        entry *p = realloc(f->ents, cap * sizeof(*p));
        if (p == NULL)
            abort();
        f->ents = p;
        f->cap = cap;
    }
    f->ents[f->n++] = e;
}

/* A sync of the file behind fd succeeded: everything pending is durable. */
static void synced(int fd)
{
    tfile *f = &files[fds[fd].file];
    struct stat st;
    for (size_t i = 0; i < f->n; i++)
        free(f->ents[i].old);
    f->n = 0;
    if (fstat(fd, &st) == 0)
        f->durable_size = (uint64_t)st.st_size;
}

static int tracked(int fd) { return fd >= 0 && fd < MAX_FDS && fds[fd].tracked; }

/* The common path of every write: count, maybe fail, journal, write. */
#define TRACKED_WRITE(fd, off, len, call)                                                    \
    do {                                                                                     \
        pthread_mutex_lock(&mu);                                                             \
        int err_ = count_op(SHIM_WRITE);                                                     \
        if (err_ != 0) {                                                                     \
            pthread_mutex_unlock(&mu);                                                       \
            errno = err_;                                                                    \
            return -1;                                                                       \
        }                                                                                    \
        journal(fd, (uint64_t)(off), (uint64_t)(len));                                       \
        ssize_t r_ = call;                                                                   \
        int saved_ = errno;                                                                  \
        pthread_mutex_unlock(&mu);                                                           \
        errno = saved_;                                                                      \
        return r_;                                                                           \
    } while (0)

static size_t iov_len(const struct iovec *iov, int n)
{
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += iov[i].iov_len;
    return len;
}

/* ---- interposed functions ------------------------------------------------ */

SHIM_API ssize_t write(int fd, const void *buf, size_t n)
{
    if (!tracked(fd))
        return real_write(fd, buf, n);
    off_t off = real_lseek(fd, 0, SEEK_CUR);
    TRACKED_WRITE(fd, off, n, real_write(fd, buf, n));
}

SHIM_API ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (!tracked(fd))
        return real_pwrite(fd, buf, n, off);
    TRACKED_WRITE(fd, off, n, real_pwrite(fd, buf, n, off));
}

SHIM_API ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    if (!tracked(fd))
        return real_pwrite64(fd, buf, n, off);
    TRACKED_WRITE(fd, off, n, real_pwrite64(fd, buf, n, off));
}

SHIM_API ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    if (!tracked(fd))
        return real_writev(fd, iov, cnt);
    off_t off = real_lseek(fd, 0, SEEK_CUR);
    TRACKED_WRITE(fd, off, iov_len(iov, cnt), real_writev(fd, iov, cnt));
}

SHIM_API ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    if (!tracked(fd))
        return real_pwritev(fd, iov, cnt, off);
    TRACKED_WRITE(fd, off, iov_len(iov, cnt), real_pwritev(fd, iov, cnt, off));
}

SHIM_API ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    if (!tracked(fd))
        return real_pwritev64(fd, iov, cnt, off);
    TRACKED_WRITE(fd, off, iov_len(iov, cnt), real_pwritev64(fd, iov, cnt, off));
}

static int do_sync(int fd, int (*real)(int))
{
    if (!tracked(fd))
        return real(fd);
    pthread_mutex_lock(&mu);
    int err = count_op(SHIM_SYNC);
    int rc = -1;
    if (err == 0) {
        rc = real(fd);
        err = errno;
        if (rc == 0)
            synced(fd);
    }
    pthread_mutex_unlock(&mu);
    if (rc != 0)
        errno = err;
    return rc;
}

SHIM_API int fsync(int fd) { return do_sync(fd, real_fsync); }
SHIM_API int fdatasync(int fd) { return do_sync(fd, real_fdatasync); }

SHIM_API int msync(void *addr, size_t len, int flags)
{
    pthread_mutex_lock(&mu);
    msyncs++;
    pthread_mutex_unlock(&mu);
    return real_msync(addr, len, flags);
}

SHIM_API int close(int fd)
{
    if (fd >= 0 && fd < MAX_FDS) {
        pthread_mutex_lock(&mu);
        fds[fd].tracked = 0;
        pthread_mutex_unlock(&mu);
    }
    return real_close(fd);
}

/* open and friends: the mode argument exists only with O_CREAT/O_TMPFILE. */
#define OPEN_MODE(flags, mode)                                                               \
    do {                                                                                     \
        if ((flags) & (O_CREAT | O_TMPFILE)) {                                               \
            va_list ap_;                                                                     \
            va_start(ap_, flags);                                                            \
            mode = (mode_t)va_arg(ap_, int);                                                 \
            va_end(ap_);                                                                     \
        }                                                                                    \
    } while (0)

SHIM_API int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, mode);
    int fd = real_open(path, flags, mode);
    opened(fd, path, flags);
    return fd;
}

SHIM_API int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, mode);
    int fd = real_open64(path, flags, mode);
    opened(fd, path, flags);
    return fd;
}

SHIM_API int openat(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, mode);
    int fd = real_openat(dirfd, path, flags, mode);
    opened(fd, path, flags);
    return fd;
}

SHIM_API int openat64(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, mode);
    int fd = real_openat64(dirfd, path, flags, mode);
    opened(fd, path, flags);
    return fd;
}
