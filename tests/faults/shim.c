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
 *   - A directory operation names its paths relative to a descriptor or
 *     to the working directory: they are made whole (/proc/self/fd, getcwd)
 *     before they are compared with the tracked directory.
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
    int is_dir;      /* a directory: only its name is followed, never journalled */
    int entry_dirty; /* its name (made by a create, rename, link or mkdir) not yet
                      * flushed with its directory */
    dev_t pdev;      /* that directory */
    ino_t pino;
    unsigned gen; /* the bl_shim_track() call it was last seen under */
} tfile;

typedef struct fdinfo {
    int tracked;
    int dir; /* a tracked directory: its syncs are directory operations */
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
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned);
static int (*real_link)(const char *, const char *);
static int (*real_linkat)(int, const char *, int, const char *, int);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_mkdir)(const char *, mode_t);
static int (*real_mkdirat)(int, const char *, mode_t);
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static off_t (*real_lseek)(int, off_t, int);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char track_dir[4096];
static unsigned track_gen; /* bl_shim_track() calls so far */
static fdinfo fds[MAX_FDS];
static tfile files[MAX_FILES];
static size_t nfiles;
static uint64_t seq;
static long ops[3];  /* tracked writes, syncs, directory operations */
static long all_ops; /* writes and syncs: where a power loss may be */
static failcfg fail[3];
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
    LOAD(rename);
    LOAD(renameat);
    LOAD(renameat2);
    LOAD(link);
    LOAD(linkat);
    LOAD(unlink);
    LOAD(unlinkat);
    LOAD(mkdir);
    LOAD(mkdirat);
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
            int what = strcmp(f[0], "write") == 0 ? SHIM_WRITE
                       : strcmp(f[0], "dir") == 0 ? SHIM_DIR
                                                  : SHIM_SYNC;
            set_fail(what, atol(f[1]), parse_errno(f[2]), n == 4 ? atol(f[3]) : 1);
        }
    }
}

/* ---- control API --------------------------------------------------------- */

SHIM_API void bl_shim_track(const char *dir)
{
    pthread_mutex_lock(&mu);
    snprintf(track_dir, sizeof(track_dir), "%s", dir != NULL ? dir : "");
    track_gen++;
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
    if (what == SHIM_WRITE || what == SHIM_SYNC || what == SHIM_DIR)
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

SHIM_API long bl_shim_unsynced(const char *name)
{
    pthread_mutex_lock(&mu);
    long n = 0;
    int seen = 0;
    for (size_t i = 0; i < nfiles; i++) {
        if (files[i].gen != track_gen || (name != NULL && strcmp(files[i].name, name) != 0))
            continue;
        seen = 1;
        n += files[i].entry_dirty;
        for (size_t j = 0; j < files[i].n; j++)
            n += !files[i].ents[j].durable;
        if (getenv("BINDLOG_SHIM_TRACE") != NULL)
            fprintf(stderr, "shim: %s: name %s, %zu write(s) pending\n", files[i].name,
                    files[i].entry_dirty ? "not flushed" : "flushed", files[i].n);
    }
    pthread_mutex_unlock(&mu);
    return seen || name == NULL ? n : -1;
}

SHIM_API long bl_shim_ops(int what)
{
    pthread_mutex_lock(&mu);
    long n = what == SHIM_WRITE || what == SHIM_SYNC || what == SHIM_DIR ? ops[what] : msyncs;
    pthread_mutex_unlock(&mu);
    return n;
}

/* ---- tracking ------------------------------------------------------------ */

/* 1 if a tracked descriptor refers to files[i].  mu held. */
static int held(size_t i)
{
    for (int fd = 0; fd < MAX_FDS; fd++)
        if (fds[fd].tracked && fds[fd].file == (int)i)
            return 1;
    return 0;
}

/* Forget files[i] (its journal goes).  mu held. */
static void forget(size_t i)
{
    for (size_t j = 0; j < files[i].n; j++)
        free(files[i].ents[j].old);
    free(files[i].ents);
    memset(&files[i], 0, sizeof(files[i]));
}

/* How file_of() finds a file: opened by name, just made (created or
 * mkdir), or given a new name (rename, link). */
enum { AS_OPENED, AS_MADE, AS_RENAMED };

/* The tracked file (or directory) st at path, found or added; -1 when the
 * table is full.  Inode numbers are reused: an entry of st's number is an
 * older, deleted file's when the name was just made, or when it was known
 * by another name and is not renamed, unless a descriptor still holds it.
 * mu held. */
static int file_of(const struct stat *st, const char *path, int how)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t i;
    for (i = 0; i < nfiles; i++)
        if (files[i].dev == st->st_dev && files[i].ino == st->st_ino) {
            int other = strncmp(files[i].name, base, SHIM_NAME_MAX - 1) != 0;
            if ((how == AS_MADE || (how == AS_OPENED && other)) && !held(i))
                break; /* made again below */
            if (how == AS_RENAMED)
                snprintf(files[i].name, sizeof(files[i].name), "%.*s", SHIM_NAME_MAX - 1, base);
            files[i].gen = track_gen;
            return (int)i;
        }
    if (i == nfiles && nfiles == MAX_FILES) {
        /* full: take the place of a file seen under an earlier track call
         * that no descriptor holds any more */
        for (i = 0; i < nfiles && (files[i].gen == track_gen || held(i)); i++)
            ;
        if (i == nfiles) {
            if (getenv("BINDLOG_SHIM_TRACE") != NULL)
                fprintf(stderr, "shim: the file table is full: %s not tracked\n", path);
            return -1;
        }
    }
    if (i < nfiles)
        forget(i);
    else
        nfiles++;
    files[i].dev = st->st_dev;
    files[i].ino = st->st_ino;
    files[i].is_dir = S_ISDIR(st->st_mode);
    snprintf(files[i].name, sizeof(files[i].name), "%.*s", SHIM_NAME_MAX - 1, base);
    files[i].durable_size = (uint64_t)st->st_size;
    files[i].gen = track_gen;
    return (int)i;
}

/* The name `whole` (a full path) was just made in its directory (how:
 * AS_MADE or AS_RENAMED): it is not durable until that directory is
 * flushed.  mu held. */
static void entry_made(const char *whole, int how)
{
    struct stat st, pst;
    char parent[4096];
    const char *slash = strrchr(whole, '/');
    if (slash == NULL || lstat(whole, &st) != 0)
        return;
    snprintf(parent, sizeof parent, "%.*s", slash == whole ? 1 : (int)(slash - whole), whole);
    int i = stat(parent, &pst) == 0 ? file_of(&st, whole, how) : -1;
    if (i < 0)
        return;
    files[i].entry_dirty = 1;
    files[i].pdev = pst.st_dev;
    files[i].pino = pst.st_ino;
}

/* A descriptor was opened: track it if its path is under the tracked dir.
 * made: the open created the file (a new entry in its directory). */
static void opened(int fd, const char *path, int flags, int made)
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
    fds[fd].dir = 0;
    if (track_dir[0] != '\0' && strstr(path, track_dir) != NULL && fstat(fd, &st) == 0 &&
        S_ISDIR(st.st_mode)) {
        fds[fd].dir = 1;
    } else if (track_dir[0] != '\0' && strstr(path, track_dir) != NULL && fstat(fd, &st) == 0 &&
               S_ISREG(st.st_mode)) {
        if (made && path[0] == '/')
            entry_made(path, AS_MADE);
        int i = file_of(&st, path, AS_OPENED);
        if (i >= 0) {
            fds[fd].tracked = 1;
            fds[fd].file = i;
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
            if (files[i].is_dir)
                continue;
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
    if (what != SHIM_DIR) {
        all_ops++;
        if ((crash_at > 0 && all_ops >= crash_at) || crash_flag)
            crash_now();
    }
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

static int dir_op(const char *what, const char *path);

static int do_sync(int fd, int (*real)(int))
{
    if (fd >= 0 && fd < MAX_FDS && fds[fd].dir) {
        int err = dir_op("sync of a directory", NULL);
        if (err != 0) {
            errno = err;
            return -1;
        }
        int rc = real(fd);
        struct stat st;
        if (rc == 0 && fstat(fd, &st) == 0) {
            /* the names in this directory are durable now */
            pthread_mutex_lock(&mu);
            for (size_t i = 0; i < nfiles; i++)
                if (files[i].pdev == st.st_dev && files[i].pino == st.st_ino)
                    files[i].entry_dirty = 0;
            pthread_mutex_unlock(&mu);
        }
        return rc;
    }
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
        fds[fd].dir = 0;
        pthread_mutex_unlock(&mu);
    }
    return real_close(fd);
}

/* ---- directory operations ------------------------------------------------- */

/* Count a directory operation (`what`, on `path`); 0 or the errno to fail
 * it with.  BINDLOG_SHIM_TRACE=1 lists them on stderr. */
static int dir_op(const char *what, const char *path)
{
    pthread_mutex_lock(&mu);
    int err = count_op(SHIM_DIR);
    long n = ops[SHIM_DIR];
    pthread_mutex_unlock(&mu);
    if (getenv("BINDLOG_SHIM_TRACE") != NULL)
        fprintf(stderr, "shim: directory operation %ld: %s %s%s\n", n, what,
                path != NULL ? path : "", err != 0 ? " (failed)" : "");
    return err;
}

/* `path` relative to dirfd, made whole into `whole`; 0, or -1 if it
 * cannot be. */
static int whole_path(int dirfd, const char *path, char *whole, size_t cap)
{
    if (path == NULL)
        return -1;
    if (path[0] == '/') {
        snprintf(whole, cap, "%s", path);
        return 0;
    }
    char base[4096];
    ssize_t n = -1;
    if (dirfd == AT_FDCWD) {
        n = getcwd(base, sizeof base) != NULL ? (ssize_t)strlen(base) : -1;
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        n = readlink(link, base, sizeof base - 1);
    }
    if (n < 0)
        return -1;
    base[n] = '\0';
    snprintf(whole, cap, "%s/%s", base, path);
    return 0;
}

/* Is `path`, relative to dirfd, under the tracked directory? */
static int under(int dirfd, const char *path)
{
    char whole[8192];
    if (track_dir[0] == '\0' || whole_path(dirfd, path, whole, sizeof whole) != 0)
        return 0;
    pthread_mutex_lock(&mu);
    int hit = track_dir[0] != '\0' && strstr(whole, track_dir) != NULL;
    pthread_mutex_unlock(&mu);
    return hit;
}

/* The directory operation made the name `path` (relative to dirfd; how:
 * as entry_made()). */
static void made_name(int dirfd, const char *path, int how)
{
    char whole[8192];
    if (path == NULL || whole_path(dirfd, path, whole, sizeof whole) != 0)
        return;
    pthread_mutex_lock(&mu);
    entry_made(whole, how);
    pthread_mutex_unlock(&mu);
}

/* The common path of every directory operation on paths a and b (b may be
 * NULL): count it and maybe fail it when either is tracked, then do it;
 * the name it makes (dfm, m: NULL for none; how: as entry_made()) is not
 * durable until its directory is flushed. */
#define DIR_OP(dfa, a, dfb, b, dfm, m, how, call)                                                  \
    do {                                                                                           \
        if (under(dfa, a) || under(dfb, b)) {                                                      \
            int err_ = dir_op(__func__, a);                                                        \
            if (err_ != 0) {                                                                       \
                errno = err_;                                                                      \
                return -1;                                                                         \
            }                                                                                      \
            int r_ = call;                                                                         \
            int saved_ = errno;                                                                    \
            if (r_ == 0)                                                                           \
                made_name(dfm, m, how);                                                            \
            errno = saved_;                                                                        \
            return r_;                                                                             \
        }                                                                                          \
        return call;                                                                               \
    } while (0)

SHIM_API int rename(const char *a, const char *b)
{
    DIR_OP(AT_FDCWD, a, AT_FDCWD, b, AT_FDCWD, b, AS_RENAMED, real_rename(a, b));
}

SHIM_API int renameat(int da, const char *a, int db, const char *b)
{
    DIR_OP(da, a, db, b, db, b, AS_RENAMED, real_renameat(da, a, db, b));
}

SHIM_API int renameat2(int da, const char *a, int db, const char *b, unsigned flags)
{
    DIR_OP(da, a, db, b, db, b, AS_RENAMED, real_renameat2(da, a, db, b, flags));
}

SHIM_API int link(const char *a, const char *b)
{
    DIR_OP(AT_FDCWD, a, AT_FDCWD, b, AT_FDCWD, b, AS_RENAMED, real_link(a, b));
}

SHIM_API int linkat(int da, const char *a, int db, const char *b, int flags)
{
    DIR_OP(da, a, db, b, db, b, AS_RENAMED, real_linkat(da, a, db, b, flags));
}

SHIM_API int unlink(const char *a)
{
    DIR_OP(AT_FDCWD, a, AT_FDCWD, NULL, AT_FDCWD, NULL, AS_MADE, real_unlink(a));
}

SHIM_API int unlinkat(int da, const char *a, int flags)
{
    DIR_OP(da, a, AT_FDCWD, NULL, AT_FDCWD, NULL, AS_MADE, real_unlinkat(da, a, flags));
}

SHIM_API int mkdir(const char *a, mode_t mode)
{
    DIR_OP(AT_FDCWD, a, AT_FDCWD, NULL, AT_FDCWD, a, AS_MADE, real_mkdir(a, mode));
}

SHIM_API int mkdirat(int da, const char *a, mode_t mode)
{
    DIR_OP(da, a, AT_FDCWD, NULL, da, a, AS_MADE, real_mkdirat(da, a, mode));
}

/* 1 if an open with these flags may create path (relative to dirfd): it
 * has O_CREAT and nothing is there yet. */
static int absent(int dirfd, const char *path, int flags)
{
    return (flags & O_CREAT) && (flags & O_TMPFILE) != O_TMPFILE &&
           faccessat(dirfd, path, F_OK, AT_SYMLINK_NOFOLLOW) != 0;
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
    int made = absent(AT_FDCWD, path, flags);
    int fd = real_open(path, flags, mode);
    opened(fd, path, flags, made);
    return fd;
}

SHIM_API int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, mode);
    int made = absent(AT_FDCWD, path, flags);
    int fd = real_open64(path, flags, mode);
    opened(fd, path, flags, made);
    return fd;
}

SHIM_API int openat(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, mode);
    int made = absent(dirfd, path, flags);
    int fd = real_openat(dirfd, path, flags, mode);
    opened(fd, path, flags, made);
    return fd;
}

SHIM_API int openat64(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, mode);
    int made = absent(dirfd, path, flags);
    int fd = real_openat64(dirfd, path, flags, mode);
    opened(fd, path, flags, made);
    return fd;
}
