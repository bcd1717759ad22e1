/*
 * store.c -- the LMDB environment, its tables and the process-wide registry.
 *
 * A store directory holds LMDB's data.mdb and lock.mdb plus bindlog.lock, an
 * advisory lock file that every writing process holds shared so that vacuum
 * (which replaces data.mdb) can tell when no writer is around.
 *
 * Tables (named LMDB databases, keys compared bytewise):
 *   meta      "magic" -> "bindlog-store"; "format" -> u32 format version;
 *             "head" -> u64 lsn, i64 time_ms; "base" -> u64 base lsn;
 *             "counts" -> u64 applied[6], u64 live_bindings, u64 live_sessions
 *   log       be64 lsn -> record (record.h)
 *   bindings  key -> binding value        sessions  id -> session value
 *   children  be64 parent's created_lsn, child -> "": formats 6 and 7, only the
 *             children whose record the log no longer holds (the others
 *             are linked by the session values' sibling chain)
 *   history   key 0x00 be64 lsn -> "": format 2 only (empty from format 3 on,
 *             where each record's prev_lsn chains its key's history)
 *   base_bindings / base_sessions: the state at meta "base" (compaction)
 * Big-endian LSNs in keys make byte order numeric order; all values are
 * little-endian.  docs/format.md has the bytes.
 *
 * Opening the same directory twice in one process returns the same bl_env
 * (matched by device and inode), because LMDB forbids a second MDB_env on
 * the same files: closing it would drop the first one's fcntl locks.
 */
#define _GNU_SOURCE
#include "lmdb/store.h"
#include "lmdb/limits.h"
#include "lmdb/tail.h"
#include "lmdb/wal.h"
#include "lmdb/walenv.h"
#include "lmdb/pagecheck.h"

#include "core/error.h"
#include "platform/platform.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define BL_DEFAULT_MAPSIZE ((size_t)256 << 20)
#define BL_MIN_MAPSIZE ((size_t)64 << 10)
#define BL_MAGIC "bindlog-store"

static const char *const db_names[BL_DB_COUNT] = {
    "meta", "log", "bindings", "sessions", "children", "history", "base_bindings",
    "base_sessions",
};

const char *bl_db_name(int db)
{
    return db >= 0 && db < BL_DB_COUNT ? db_names[db] : "(unknown)";
}

_Thread_local int bl_open_format2;

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static bl_env *registry;
static uint64_t next_env_id = 1;

/*
 * Per-thread read transaction cache.  A thread's cache names the store by
 * its never-reused id, so an entry whose store has closed is recognised
 * without touching freed memory.  The store owns every bl_rtxn (its list,
 * under registry_mu) and aborts them when it closes; a thread that exits
 * first gives its transaction back through the key's destructor, so that
 * thread pools do not leak LMDB reader slots.
 */
struct bl_rtxn {
    bl_rtxn *next; /* in the store's list */
    MDB_txn *txn;  /* reset when idle */
    int busy;      /* inside a read right now */
};

typedef struct bl_tcache {
    uint64_t env_id;
    bl_rtxn *rt;
} bl_tcache;

static pthread_key_t tcache_key;
static pthread_once_t tcache_once = PTHREAD_ONCE_INIT;
/* The same pointer as the key's value, for the hot path: reading a
 * _Thread_local costs one load where pthread_once + getspecific cost calls.
 * The key is still what runs the destructor at thread exit. */
static _Thread_local bl_tcache *tls_tcache;

static bl_env *find_env_by_id(uint64_t id)
{
    for (bl_env *e = registry; e != NULL; e = e->next)
        if (e->id == id)
            return e;
    return NULL;
}

/* Drop a cached transaction from its store (registry_mu held). */
static void rtxn_drop(bl_env *e, bl_rtxn *rt)
{
    bl_rtxn **pp = &e->rtxns;
    while (*pp != NULL && *pp != rt)
        pp = &(*pp)->next;
    if (*pp == rt) {
        *pp = rt->next;
        mdb_txn_abort(rt->txn);
        free(rt);
    }
}

/* ThreadSanitizer does not know that a thread's dynamic TLS block (the
 * library's, when it was dlopen()ed, as Python's ctypes does) is freed by
 * another thread only after this destructor has run, and reports the two
 * writes as a race.  Clearing the pointer is needed (a later destructor of
 * another library could still call into bindlog), so the one store is left
 * out of TSan's view instead. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BL_NO_TSAN __attribute__((no_sanitize("thread")))
#endif
#endif
#if !defined(BL_NO_TSAN) && defined(__SANITIZE_THREAD__)
#define BL_NO_TSAN __attribute__((no_sanitize_thread))
#endif
#ifndef BL_NO_TSAN
#define BL_NO_TSAN
#endif

BL_NO_TSAN __attribute__((noinline)) static void tls_forget(void) { tls_tcache = NULL; }

static void tcache_destroy(void *p)
{
    bl_tcache *tc = p;
    tls_forget();
    pthread_mutex_lock(&registry_mu);
    bl_env *e = tc->rt ? find_env_by_id(tc->env_id) : NULL;
    if (e != NULL)
        rtxn_drop(e, tc->rt);
    pthread_mutex_unlock(&registry_mu);
    free(tc);
}

static void tcache_init(void) { pthread_key_create(&tcache_key, tcache_destroy); }

/* (the name in parentheses: store.h's model for the analyzer is a macro) */
int(bl_mdb_error)(int rc)
{
    switch (rc) {
    case 0:
        return 0;
    case MDB_NOTFOUND:
        return BINDLOG_ENOTFOUND;
    case MDB_MAP_FULL:
    case ENOSPC:
    case EDQUOT:
        return BINDLOG_ENOSPC;
    case MDB_READERS_FULL:
    case MDB_TXN_FULL:
    case MDB_DBS_FULL:
    case EBUSY:
    case EAGAIN:
        return BINDLOG_EBUSY;
    case MDB_INVALID:
        return BINDLOG_ENOTSTORE;
    case MDB_VERSION_MISMATCH:
        return BINDLOG_EVERSION;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INCOMPATIBLE:
    case MDB_BAD_VALSIZE:
        return BINDLOG_ECORRUPT;
    case MDB_PANIC:
        return BINDLOG_EPANIC;
    case ENOMEM:
        return BINDLOG_ENOMEM;
    case EACCES:
    case EPERM:
    case EROFS:
        return BINDLOG_EACCES;
    case ENOENT:
        return BINDLOG_ENOTFOUND;
    case ENOTDIR:
        return BINDLOG_ENOTSTORE;
    default:
        return BINDLOG_EIO;
    }
}

int bl_sys_error(const char *what)
{
    int err = errno;
    return bl_err_set(bl_mdb_error(err), "%s: %s", what, strerror(err));
}

/* 1 if the file system holding dir has less than 1 MiB left for us (root
 * may use the blocks reserved for it). */
static int fs_full(const char *dir)
{
    struct statvfs v;
    if (statvfs(dir, &v) != 0)
        return 0;
    uint64_t avail = geteuid() == 0 ? (uint64_t)v.f_bfree : (uint64_t)v.f_bavail;
    return avail * v.f_frsize < ((uint64_t)1 << 20);
}

int bl_write_error(bl_env *e, int mdb_rc)
{
    if (mdb_rc == ENOSPC || mdb_rc == EDQUOT || (mdb_rc == EIO && fs_full(e->path)))
        return bl_err_set(BINDLOG_ENOSPC, "data.mdb: no space left on the device%s",
                          mdb_rc == EIO ? " (a short write)" : "");
    return bl_mdb_error(mdb_rc);
}

int bl_env_fatal(bl_env *e)
{
    MDB_txn *t;
    int rc = mdb_txn_begin(e->env, NULL, MDB_RDONLY, &t);
    if (rc == 0)
        mdb_txn_abort(t);
    return rc == MDB_PANIC;
}

/* mkdir -p with mode 0700 for every directory it creates.  *made (if not
 * NULL) receives the length of the shallowest directory it created, 0 when
 * it created none, so that a failed open can take them away again. */
static int make_dirs(const char *dir, size_t *made)
{
    size_t n = strlen(dir);
    char *p = malloc(n + 1);
    int rc = 0;

    if (made != NULL)
        *made = 0;
    if (p == NULL)
        return BINDLOG_ENOMEM;
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n && rc == 0; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0700) == 0) {
            if (made != NULL && *made == 0)
                *made = i;
        } else if (errno != EEXIST) {
            char q[BL_ERR_QUOTE_MAX];
            int err = errno;
            rc = bl_err_set(bl_mdb_error(err), "cannot create directory %s: %s",
                            bl_err_bytes(q, sizeof q, p, strlen(p)), strerror(err));
        }
        p[i] = c;
    }
    free(p);
    return rc;
}

/* Flush the directories holding the names make_dirs() made (made: its
 * *made, not 0): dir's parent, and its parents up to that of the shallowest
 * directory made.  (dir's own names are flushed as the log is created.) */
static int flush_made_dirs(const char *dir, size_t made)
{
    char *p = strdup(dir);
    size_t n = strlen(dir);
    int rc = 0;

    if (p == NULL)
        return BINDLOG_ENOMEM;
    while (rc == 0) {
        while (n > 0 && p[n - 1] == '/') /* "a/b/" */
            n--;
        while (n > 0 && p[n - 1] != '/') /* the last name */
            n--;
        while (n > 1 && p[n - 1] == '/') /* "a//b" */
            n--;
        const char *parent = n == 0 ? "." : p; /* "store": the working directory */
        p[n] = '\0';
        int err = bl_sync_dir(parent);
        if (err != 0) {
            char q[BL_ERR_QUOTE_MAX], what[BL_ERR_QUOTE_MAX + 64];
            snprintf(what, sizeof what, "flushing the directory %s after making one in it",
                     bl_err_bytes(q, sizeof q, parent, strlen(parent)));
            errno = err;
            rc = bl_sys_error(what);
        }
        if (n < made) /* the parent of the shallowest one made */
            break;
    }
    free(p);
    return rc;
}

/* Remove the directories make_dirs() created (made: its *made), deepest
 * first.  rmdir() removes only empty ones, so nothing else is lost. */
static void unmake_dirs(const char *dir, size_t made)
{
    size_t n = strlen(dir);
    char *p;

    if (made == 0 || (p = strdup(dir)) == NULL)
        return;
    while (n >= made) {
        p[n] = '\0';
        /* the deepest ones may never have been made: make_dirs stopped */
        if (rmdir(p) != 0 && errno != ENOENT)
            break;
        while (n > 0 && p[n - 1] == '/') /* "a//b" */
            n--;
        while (n > 0 && p[n - 1] != '/')
            n--;
        while (n > 1 && p[n - 1] == '/')
            n--;
        if (n < made)
            break;
    }
    free(p);
}

/* 1 if `name` (in dir) exists, 0 if not, <0 on error. */
static int file_exists(const char *dir, const char *name)
{
    struct stat st;
    char *p = bl_path_join(dir, name);
    int rc;

    if (p == NULL)
        return BINDLOG_ENOMEM;
    rc = stat(p, &st) == 0 ? 1 : (errno == ENOENT ? 0 : bl_mdb_error(errno));
    free(p);
    return rc;
}

/* ---- open's checks of the store's files ------------------------------------
 *
 * Before LMDB touches anything: the store's files must be regular files in
 * the directory (a symbolic link would make bindlog write wherever it
 * points: `lock.mdb -> /etc/passwd` followed by a root `stat`); data.mdb,
 * when there is one, must be an LMDB file, so that a directory holding
 * something else is refused before LMDB creates lock.mdb beside it; and
 * lock.mdb is allocated on disk before LMDB maps it, so that a full disk is
 * BINDLOG_ENOSPC at open instead of a SIGBUS on the first touch of the map.
 * What a failed open created, it removes again (undo_created()).
 */

/* The files a store directory may hold. */
static const char *const store_files[] = {"data.mdb", "lock.mdb", "bindlog.lock", BL_WAL_FILE,
                                          BL_SHM_FILE};
#define STORE_FILES (sizeof(store_files) / sizeof(store_files[0]))

/* Refuse any store file that is there but is not a regular file. */
static int check_store_files(const char *dir)
{
    for (size_t i = 0; i < STORE_FILES; i++) {
        struct stat st;
        char *p = bl_path_join(dir, store_files[i]);
        int rc;

        if (p == NULL)
            return BINDLOG_ENOMEM;
        rc = lstat(p, &st);
        free(p);
        if (rc != 0) {
            if (errno == ENOENT)
                continue;
            return bl_err_set(bl_mdb_error(errno), "%s: %s", store_files[i], strerror(errno));
        }
        if (S_ISLNK(st.st_mode))
            return bl_err_set(BINDLOG_ENOTSTORE,
                              "%s is a symbolic link: a store's files must be regular files in "
                              "its directory (refused, so that nothing is written where it "
                              "points)",
                              store_files[i]);
        if (!S_ISREG(st.st_mode))
            return bl_err_set(BINDLOG_ENOTSTORE, "%s is not a regular file (a %s)",
                              store_files[i],
                              S_ISDIR(st.st_mode)    ? "directory"
                              : S_ISFIFO(st.st_mode) ? "fifo"
                              : S_ISSOCK(st.st_mode) ? "socket"
                                                     : "device");
    }
    return 0;
}

/*
 * Is data.mdb an LMDB file at all?  LMDB 0.9 refuses a file whose first page
 * is not a meta page with its magic and data version (mdb_env_read_header);
 * say so before LMDB opens it, since LMDB creates lock.mdb first.  The
 * bytes: page header (u64 pgno, u16 pad, u16 flags with P_META 0x08, u32),
 * then u32 magic 0xBEEFC0DE, u32 version 1.  0 = it is; 1 = it is empty (a
 * creation that never wrote its first page); BINDLOG_ENOTSTORE with a
 * detail when it is not.  damage-scan validates it further.
 */
#define LMDB_META_PROBE 24
static int probe_data_file(const char *dir)
{
    unsigned char b[LMDB_META_PROBE];
    struct stat st;
    char *p = bl_path_join(dir, "data.mdb");
    int fd, rc = 0;

    if (p == NULL)
        return BINDLOG_ENOMEM;
    fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    free(p);
    if (fd < 0)
        return bl_err_set(bl_mdb_error(errno), "data.mdb: %s", strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = bl_err_set(bl_mdb_error(errno), "data.mdb: %s", strerror(errno));
    } else if (st.st_size == 0) {
        rc = 1;
    } else if (st.st_size < LMDB_META_PROBE || pread(fd, b, sizeof(b), 0) != (ssize_t)sizeof(b) ||
               (bl_get16(b + 10) & 0x08) == 0 || bl_get32(b + 16) != 0xBEEFC0DEu ||
               bl_get32(b + 20) != 1) {
        rc = bl_err_set(BINDLOG_ENOTSTORE, "data.mdb is not an LMDB file");
    }
    close(fd);
    return rc;
}

/*
 * The size LMDB 0.9 gives lock.mdb for max_readers reader slots
 * (mdb_env_setup_locks: (maxreaders - 1) * sizeof(MDB_reader) +
 * sizeof(MDB_txninfo)).  Those structs are private to mdb.c; these mirror
 * them for a build with POSIX mutexes (Linux): a reader is {txnid, pid,
 * tid} and the table's header {magic, format, reader mutex, txnid,
 * count}, each padded to a 64-byte cache line, then the writer mutex,
 * padded the same, then the first reader.  test_open checks that LMDB keeps
 * exactly this size, so a layout change cannot go unnoticed.
 */
#define LMDB_CACHELINE 64
#define LMDB_PAD(n) (((n) + LMDB_CACHELINE - 1) & ~(size_t)(LMDB_CACHELINE - 1))
static off_t lmdb_lock_size(unsigned max_readers)
{
    struct rx { size_t txnid; pid_t pid; pthread_t tid; };
    struct tx { uint32_t magic, format; pthread_mutex_t rmutex; size_t txnid; unsigned n; };
    size_t reader = LMDB_PAD(sizeof(struct rx));
    size_t info = LMDB_PAD(sizeof(struct tx)) + LMDB_PAD(sizeof(pthread_mutex_t)) + reader;
    return (off_t)((max_readers - 1) * reader + info);
}

/* Files this open created, so that a failure can remove them. */
enum { MADE_DATA = 1, MADE_LOCK = 2 };

/*
 * 1 if no process has an LMDB environment on the lock file open on fd.
 * Every LMDB 0.9 environment holds a shared fcntl lock on byte 0 of
 * lock.mdb for its whole life (mdb_env_excl_lock), so an exclusive one can
 * be had only when none does.  Held until fd is closed.  (Closing fd drops
 * every lock this process holds on the file; it holds none: the registry
 * would have returned its environment instead of making one.)
 */
static int lock_file_unused(int fd)
{
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 1;
    return fcntl(fd, F_SETLK, &fl) == 0;
}

/*
 * Allocate lock.mdb's blocks before LMDB maps it.  LMDB sizes the file with
 * ftruncate(), which allocates nothing: on a full disk its first write
 * through the map is a SIGBUS inside mdb_env_open().  A missing file is
 * created; one that is shorter than LMDB's size for max_readers and that no
 * process has open is extended to it; one in use keeps its size (the
 * processes that mapped it agree on it) and only has its holes allocated.
 * bl_plat_reserve (fallocate(2)), not posix_fallocate(3): the latter's fallback on file
 * systems without fallocate writes a zero into every block, racing with
 * other processes' reader slots; there the file is left to LMDB as before.
 * Allocation changes none of the file's bytes.  A directory the caller may
 * not write in is left to LMDB (a read-only environment, see env_create).
 */
static int prealloc_lock_file(const char *dir, unsigned max_readers, unsigned *made)
{
    char *p = bl_path_join(dir, "lock.mdb");
    struct stat st;
    off_t want = lmdb_lock_size(max_readers);
    int fd, rc = 0, keep_size = 0;

    if (p == NULL)
        return BINDLOG_ENOMEM;
    fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0)
        *made |= MADE_LOCK;
    else if (errno == EEXIST)
        fd = open(p, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    free(p);
    if (fd < 0)
        return errno == EACCES || errno == EROFS || errno == EPERM
                   ? 0
                   : bl_err_set(bl_mdb_error(errno), "lock.mdb: %s", strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = bl_err_set(bl_mdb_error(errno), "lock.mdb: %s", strerror(errno));
    } else if (st.st_size != want && st.st_size != 0 && !lock_file_unused(fd)) {
        want = st.st_size; /* in use: its size is the one every process mapped */
        keep_size = 1;
    }
    int err = rc == 0 && want > 0 ? bl_plat_reserve(fd, want, keep_size) : 0;
    if (err != 0 && err != EOPNOTSUPP) {
        rc = bl_err_set(bl_mdb_error(err),
                        "lock.mdb: cannot allocate its %lld-byte reader table: %s",
                        (long long)want, strerror(err));
    }
    close(fd);
    return rc;
}

/*
 * Remove the files a failed open created, so that it leaves nothing behind
 * (a read-only open of a directory that is not a store, a creation that
 * ran out of space).  Only files that did not exist when the open began,
 * and only while no process has an environment on them: one that opened
 * them meanwhile keeps them.
 */
static void undo_created(const char *dir, unsigned made)
{
    char *lock = bl_path_join(dir, "lock.mdb"), *data = bl_path_join(dir, "data.mdb");
    int fd;

    if (made != 0 && lock != NULL && data != NULL) {
        fd = open(lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || lock_file_unused(fd)) {
            if (made & MADE_DATA)
                unlink(data);
            if ((made & MADE_LOCK) && fd >= 0)
                unlink(lock);
        }
        if (fd >= 0)
            close(fd);
    }
    free(lock);
    free(data);
}

/* A directory without data.mdb may become a store only if it holds nothing
 * but the files a store leaves behind; anything else belongs to someone.
 * 0 sets the last-error detail to the first stranger found. */
static int dir_is_empty_enough(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int ok = 1;

    if (d == NULL) {
        int err = errno;
        return bl_err_set(bl_mdb_error(err), "cannot list the directory: %s", strerror(err));
    }
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strcmp(n, ".") != 0 && strcmp(n, "..") != 0 && strcmp(n, "lock.mdb") != 0 &&
            strcmp(n, "bindlog.lock") != 0 && strcmp(n, BL_WAL_FILE) != 0 &&
            strcmp(n, BL_SHM_FILE) != 0) {
            char q[BL_ERR_QUOTE_MAX];
            bl_err_set(BINDLOG_ENOTSTORE,
                       "the directory has no data.mdb but holds %s: not a store, and not "
                       "empty enough to become one",
                       bl_err_bytes(q, sizeof q, n, strlen(n)));
            ok = 0;
            break;
        }
    }
    closedir(d);
    return ok;
}

/* ---- meta ------------------------------------------------------------------ */

static int meta_get(bl_env *e, MDB_txn *txn, const char *name, MDB_val *v)
{
    MDB_val k = {strlen(name), (void *)name};
    return bl_get_checked(txn, e->dbi[BL_DB_META], BL_DB_META, &k, v);
}

static int meta_put(bl_env *e, MDB_txn *txn, const char *name, const void *p, size_t n)
{
    MDB_val k = {strlen(name), (void *)name}, v = {n, (void *)p};
    return mdb_put(txn, e->dbi[BL_DB_META], &k, &v, 0);
}

int bl_meta_get_u64(bl_env *e, MDB_txn *txn, const char *name, uint64_t *out)
{
    MDB_val v;
    int rc = meta_get(e, txn, name, &v);
    *out = 0;
    if (rc == BINDLOG_ENOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    if (v.mv_size != 8)
        return BINDLOG_ECORRUPT;
    *out = bl_get64(v.mv_data);
    return 0;
}

int bl_meta_put_u64(bl_env *e, MDB_txn *txn, const char *name, uint64_t val)
{
    unsigned char b[8];
    bl_put64(b, val);
    return meta_put(e, txn, name, b, sizeof(b));
}

void bl_head_encode(unsigned char out[BL_HEAD_BYTES], const bl_head *h)
{
    bl_put64(out, h->lsn);
    bl_put64(out + 8, (uint64_t)h->time_ms);
}

int bl_head_decode(const void *p, size_t n, bl_head *h)
{
    memset(h, 0, sizeof(*h));
    if (n != BL_HEAD_BYTES)
        return bl_err_set(BINDLOG_ECORRUPT, "meta \"head\" is %zu bytes, not %d", n,
                          BL_HEAD_BYTES);
    h->lsn = bl_get64(p);
    h->time_ms = (int64_t)bl_get64((const unsigned char *)p + 8);
    return 0;
}

size_t bl_counts_encode(unsigned char out[BL_COUNTS_BYTES], const bl_counts *c)
{
    for (int i = 0; i < BINDLOG_EVENT_ROUTE; i++)
        bl_put64(out + 8 * i, c->applied[i]);
    bl_put64(out + 8 * BINDLOG_EVENT_ROUTE, c->live_bindings);
    bl_put64(out + 8 * (BINDLOG_EVENT_ROUTE + 1), c->live_sessions);
    if (c->applied[BINDLOG_EVENT_ROUTE] == 0)
        return BL_COUNTS_BYTES_V3;
    bl_put64(out + BL_COUNTS_BYTES_V3, c->applied[BINDLOG_EVENT_ROUTE]);
    return BL_COUNTS_BYTES;
}

void bl_counts_decode(const unsigned char *in, size_t len, bl_counts *c)
{
    for (int i = 0; i < BINDLOG_EVENT_ROUTE; i++)
        c->applied[i] = bl_get64(in + 8 * i);
    c->live_bindings = bl_get64(in + 8 * BINDLOG_EVENT_ROUTE);
    c->live_sessions = bl_get64(in + 8 * (BINDLOG_EVENT_ROUTE + 1));
    c->applied[BINDLOG_EVENT_ROUTE] = len == BL_COUNTS_BYTES ? bl_get64(in + BL_COUNTS_BYTES_V3) : 0;
}

void bl_gstats_encode(unsigned char out[BL_GSTATS_BYTES], const bl_gstats *g)
{
    bl_put64(out, g->commits);
    bl_put64(out + 8, g->grouped_events);
}

int bl_gstats_decode(const void *p, size_t n, bl_gstats *g)
{
    memset(g, 0, sizeof(*g));
    if (n != BL_GSTATS_BYTES)
        return bl_err_set(BINDLOG_ECORRUPT, "meta \"stats\" is %zu bytes, not %d", n,
                          BL_GSTATS_BYTES);
    g->commits = bl_get64(p);
    g->grouped_events = bl_get64((const unsigned char *)p + 8);
    return 0;
}

int bl_meta_get_head(bl_env *e, MDB_txn *txn, bl_head *h)
{
    MDB_val v;
    int rc = meta_get(e, txn, "head", &v);
    memset(h, 0, sizeof(*h));
    if (rc == BINDLOG_ENOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    return bl_head_decode(v.mv_data, v.mv_size, h);
}

int bl_meta_put_head(bl_env *e, MDB_txn *txn, const bl_head *h)
{
    unsigned char b[BL_HEAD_BYTES];
    bl_head_encode(b, h);
    return meta_put(e, txn, "head", b, sizeof(b));
}

int bl_meta_get_counts(bl_env *e, MDB_txn *txn, bl_counts *c)
{
    MDB_val v;
    int rc = meta_get(e, txn, "counts", &v);
    memset(c, 0, sizeof(*c));
    if (rc == BINDLOG_ENOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    if (!bl_counts_len_ok(v.mv_size))
        return bl_err_set(BINDLOG_ECORRUPT, "meta \"counts\" is %zu bytes, not %d or %d",
                          v.mv_size, BL_COUNTS_BYTES_V3, BL_COUNTS_BYTES);
    bl_counts_decode(v.mv_data, v.mv_size, c);
    return 0;
}

int bl_meta_put_counts(bl_env *e, MDB_txn *txn, const bl_counts *c)
{
    unsigned char b[BL_COUNTS_BYTES];
    return meta_put(e, txn, "counts", b, bl_counts_encode(b, c));
}

int bl_meta_get_gstats(bl_env *e, MDB_txn *txn, bl_gstats *g)
{
    MDB_val v;
    int rc = meta_get(e, txn, "stats", &v);
    memset(g, 0, sizeof(*g));
    if (rc == BINDLOG_ENOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    return bl_gstats_decode(v.mv_data, v.mv_size, g);
}

void bl_counts_apply(bl_counts *c, const bl_plan *p)
{
    c->applied[p->rec.type]++;
    c->live_bindings += (uint64_t)(int64_t)p->d_live_bindings;
    c->live_sessions += (uint64_t)(int64_t)p->d_live_sessions;
}

/* ---- opening --------------------------------------------------------------- */

/* Open every table in txn; create them (and stamp meta) if `create`. */
static int open_tables(bl_env *e, MDB_txn *txn, int create)
{
    unsigned flags = create ? MDB_CREATE : 0;
    for (int i = 0; i < BL_DB_COUNT; i++) {
        int rc = mdb_dbi_open(txn, db_names[i], flags, &e->dbi[i]);
        if (rc == MDB_NOTFOUND)
            return bl_err_set(BINDLOG_ENOTSTORE, "data.mdb has bindlog's meta table but no "
                                                 "'%s' table", db_names[i]);
        if (rc != 0)
            return bl_mdb_error(rc);
    }
    return 0;
}

/* Check that the tables are a bindlog store of a format we read. */
static int check_meta(bl_env *e, MDB_txn *txn)
{
    MDB_val v;
    int rc = meta_get(e, txn, "magic", &v);
    if (rc == BINDLOG_ENOTFOUND)
        return bl_err_set(BINDLOG_ENOTSTORE, "data.mdb is an LMDB file with a 'meta' table "
                                             "but no bindlog magic: someone else's");
    if (rc < 0)
        return rc;
    if (v.mv_size != strlen(BL_MAGIC) || memcmp(v.mv_data, BL_MAGIC, v.mv_size) != 0)
        return bl_err_set(BINDLOG_ENOTSTORE, "data.mdb's magic is not bindlog's: someone "
                                             "else's LMDB file");
    rc = meta_get(e, txn, "format", &v);
    if (rc < 0)
        return rc == BINDLOG_ENOTFOUND
                   ? bl_err_set(BINDLOG_ENOTSTORE, "data.mdb has bindlog's magic but no format")
                   : rc;
    if (v.mv_size != 4)
        return bl_err_set(BINDLOG_ECORRUPT, "the store's format record is %zu bytes, not 4",
                          v.mv_size);
    uint32_t fmt = bl_get32(v.mv_data);
    if (fmt == 0)
        return bl_err_set(BINDLOG_ECORRUPT, "the store's format record says 0");
    if (fmt > BINDLOG_FORMAT_VERSION)
        return bl_err_set(BINDLOG_EVERSION,
                          "the store is format %u; this library (%s) reads format %d: "
                          "open it with a newer bindlog",
                          (unsigned)fmt, BINDLOG_VERSION_STRING, BINDLOG_FORMAT_VERSION);
    if (fmt >= 2 && fmt <= 6 && bl_open_format2)
        return 0; /* bindlog upgrade, checkpointing a format-2 to 6 store before it reads it */
    if (fmt < BINDLOG_FORMAT_VERSION)
        return bl_err_set(BINDLOG_EVERSION,
                          "the store has format %u, from before %s; this library reads format "
                          "%d: run `bindlog upgrade DIR` to convert it",
                          (unsigned)fmt,
                          fmt == 1   ? "the write-ahead log"
                          : fmt == 2 ? "records chained their key's history"
                          : fmt == 3 ? "the compact encodings"
                          : fmt == 4 ? "session values referred to their records"
                          : fmt == 5 ? "session values linked their children"
                                     : "records kept UUIDs in 16 bytes",
                          BINDLOG_FORMAT_VERSION);
    return 0;
}

/* Open the tables of an existing store, or make a new one (store.h).  Two
 * processes creating the same store race safely: creation happens in a
 * write transaction that first looks for the magic (and walenv.c creates
 * only while it holds the shared memory alone). */
int bl_env_init_tables(bl_env *e, int may_create, uint64_t salt, uint64_t cap)
{
    MDB_txn *txn;
    MDB_dbi meta;
    int rc;

    rc = bl_txn_begin(e, MDB_RDONLY, &txn);
    if (rc != 0)
        return rc;
    rc = mdb_dbi_open(txn, "meta", 0, &meta);
    if (rc == 0) {
        e->dbi[BL_DB_META] = meta;
        rc = check_meta(e, txn);
        if (rc == 0)
            rc = open_tables(e, txn, 0);
        if (rc == 0)
            rc = bl_mdb_error(mdb_txn_commit(txn));
        else
            mdb_txn_abort(txn);
        return rc;
    }
    mdb_txn_abort(txn);
    if (rc != MDB_NOTFOUND)
        return bl_mdb_error(rc);
    if (!may_create)
        return bl_err_set(BINDLOG_ENOTSTORE, "data.mdb is an LMDB file without bindlog's "
                                             "meta table");

    rc = bl_txn_begin(e, 0, &txn);
    if (rc != 0)
        return rc;
    /* An LMDB file that already holds other named tables is someone else's. */
    MDB_dbi main_db;
    MDB_stat st;
    rc = mdb_dbi_open(txn, NULL, 0, &main_db);
    if (rc == 0)
        rc = mdb_stat(txn, main_db, &st);
    if (rc == 0 && st.ms_entries != 0) {
        rc = mdb_dbi_open(txn, "meta", 0, &meta);
        if (rc == MDB_NOTFOUND)
            rc = bl_err_set(BINDLOG_ENOTSTORE,
                            "data.mdb is an LMDB file holding %zu tables or keys of its own "
                            "and no bindlog meta table: someone else's",
                            (size_t)st.ms_entries);
    }
    if (rc != 0) {
        mdb_txn_abort(txn);
        return rc < 0 && rc >= BINDLOG_ERROR_MIN ? rc : bl_mdb_error(rc);
    }
    rc = open_tables(e, txn, 1);
    if (rc == 0) {
        MDB_val v;
        if (meta_get(e, txn, "magic", &v) == BINDLOG_ENOTFOUND) {
            unsigned char fmt[4];
            bl_put32(fmt, BINDLOG_FORMAT_VERSION);
            bl_wal_meta wm = {salt, cap, 0, salt};
            rc = meta_put(e, txn, "magic", BL_MAGIC, strlen(BL_MAGIC));
            if (rc == 0)
                rc = meta_put(e, txn, "format", fmt, sizeof(fmt));
            if (rc == 0)
                rc = bl_meta_put_wal(e, txn, &wm);
            rc = rc == 0 ? 0 : bl_write_error(e, rc);
        } else {
            rc = check_meta(e, txn);
        }
    }
    if (rc == 0) {
        /* the first commit of a new store: on a full disk a short write */
        rc = mdb_txn_commit(txn);
        return rc == 0 ? 0 : bl_write_error(e, rc);
    }
    mdb_txn_abort(txn);
    return rc;
}

/* LMDB commits are checkpoints and maintenance now, never on a caller's
 * commit path: in FULL and NORMAL they use LMDB's own two syncs (amortised
 * over the thousands of events a checkpoint folds), in NONE none. */
static unsigned sync_flags(int durability)
{
    return durability == BINDLOG_DURABILITY_NONE ? MDB_NOSYNC : 0;
}

/* Take the advisory writer lock (shared).  Vacuum holds it exclusive. */
static int writer_lock(bl_env *e)
{
    if (e->lock_fd >= 0)
        return 0;
    char *p = bl_path_join(e->path, "bindlog.lock");
    if (p == NULL)
        return BINDLOG_ENOMEM;
    int fd = open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    free(p);
    if (fd < 0) {
        int err = errno;
        if (err == ELOOP)
            return bl_err_set(BINDLOG_ENOTSTORE, "bindlog.lock is a symbolic link");
        return bl_err_set(bl_mdb_error(err), "cannot open bindlog.lock for writing: %s",
                          strerror(err));
    }
    if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
        int err = errno;
        close(fd);
        if (err == EWOULDBLOCK)
            return bl_err_set(BINDLOG_EBUSY, "bindlog.lock is held exclusively: a vacuum is "
                                             "rewriting the store; open it again after");
        return bl_err_set(bl_mdb_error(err), "bindlog.lock: %s", strerror(err));
    }
    e->lock_fd = fd;
    return 0;
}

static void env_free(bl_env *e)
{
    if (e == NULL)
        return;
    bl_walenv_close(e);
    while (e->rtxns != NULL) {
        bl_rtxn *rt = e->rtxns;
        e->rtxns = rt->next;
        mdb_txn_abort(rt->txn);
        free(rt);
    }
    bl_pc_close(e);
    if (e->env != NULL)
        mdb_env_close(e->env);
    if (e->lock_fd >= 0)
        close(e->lock_fd);
    bl_srw_destroy(&e->map_lock);
    bl_group_destroy(&e->g);
    free(e->enc.buf);
    free(e->path);
    free(e);
}

static int env_create(const char *dir, const struct stat *st, const bindlog_options *o,
                      bl_env **out)
{
    bl_env *e = calloc(1, sizeof(*e));
    unsigned made = 0, max_readers;
    int rc, exists;

    if (e == NULL)
        return BINDLOG_ENOMEM;
    e->lock_fd = -1;
    e->dev = st->st_dev;
    e->ino = st->st_ino;
    /* growth must not starve behind a stream of readers */
    if ((rc = bl_srw_init(&e->map_lock, 1)) != 0) {
        free(e);
        return bl_err_set(BINDLOG_ENOMEM, "no memory for the map's lock (%s)", strerror(rc));
    }
    bl_group_init(&e->g);
    e->path = strdup(dir);
    if (e->path == NULL) {
        rc = BINDLOG_ENOMEM;
        goto out;
    }

    if ((rc = check_store_files(dir)) != 0)
        goto out;
    exists = file_exists(dir, "data.mdb");
    if (exists < 0) {
        rc = bl_err_set(exists, "cannot look at data.mdb (%s)", bindlog_strerror(exists));
        goto out;
    }
    if (exists && (rc = probe_data_file(dir)) != 0) {
        if (rc < 0) {
            /* LMDB cannot tell a damaged file from a foreign one; see below */
            if (rc == BINDLOG_ENOTSTORE && file_exists(dir, "bindlog.lock") == 1)
                rc = bl_err_set(BINDLOG_ECORRUPT,
                                "data.mdb is not a readable LMDB file (its first page is not "
                                "an LMDB meta page), yet bindlog.lock shows a store lived "
                                "here: damaged");
            goto out;
        }
        /* empty: a creation that never wrote a page, or a store whose file
         * was emptied, which its log (frames in bindlog.wal) tells: refused
         * before LMDB writes its first pages into it.  Otherwise a writer
         * makes the store again; a reader has no store to read. */
        rc = bl_wal_refuse_orphan(dir, "data.mdb is empty");
        if (rc == BINDLOG_ECORRUPT && probe_data_file(dir) != 1) {
            bl_err_clear(); /* written meanwhile: a store being made, not one lost */
            rc = 0;
        }
        if (rc != 0)
            goto out;
        if (o->read_only) {
            rc = bl_err_set(BINDLOG_ENOTFOUND, "data.mdb is empty: no store here yet");
            goto out;
        }
    }
    if (!exists) {
        /* a log with frames says a store lived here and lost its file */
        rc = bl_wal_refuse_orphan(dir, "there is no data.mdb");
        if (rc == BINDLOG_ECORRUPT && file_exists(dir, "data.mdb") != 0) {
            bl_err_clear(); /* made meanwhile: a store being made, not one lost */
            rc = 0;
        }
        if (rc != 0)
            goto out;
        if (o->read_only) {
            rc = bl_err_set(BINDLOG_ENOTFOUND, "no store here (no data.mdb), and a read-only "
                                               "open never creates one");
            goto out;
        }
        rc = dir_is_empty_enough(dir);
        if (rc <= 0) {
            rc = rc == 0 ? BINDLOG_ENOTSTORE : rc;
            goto out;
        }
        made |= MADE_DATA;
    }
    /* the caller's slots, and one for this process's background thread
     * (its walk of the store holds a snapshot for as long as the walk
     * lasts): with max_readers 1 a caller's read must not find its one slot
     * taken by the store itself */
    max_readers = (o->max_readers ? o->max_readers : 126) + 1;
    if ((rc = prealloc_lock_file(dir, max_readers, &made)) != 0)
        goto out;

    if (exists && (rc = bl_pc_preopen(dir)) != 0)
        goto out; /* damaged meta pages: LMDB would believe them */
    if ((rc = bl_mdb_error(mdb_env_create(&e->env))) != 0)
        goto out;
    mdb_env_set_maxdbs(e->env, BL_DB_COUNT + 4);
    mdb_env_set_maxreaders(e->env, max_readers);
    mdb_env_set_mapsize(e->env, o->map_size ? o->map_size : BL_DEFAULT_MAPSIZE);
    unsigned flags = MDB_NOTLS | sync_flags(o->durability);
    rc = mdb_env_open(e->env, dir, flags, 0600);
    if ((rc == EACCES || rc == EROFS) && o->read_only) {
        /* no write access: a read-only environment still serves reads */
        mdb_env_close(e->env);
        e->env = NULL;
        if ((rc = bl_mdb_error(mdb_env_create(&e->env))) != 0)
            goto out;
        mdb_env_set_maxdbs(e->env, BL_DB_COUNT + 4);
        rc = mdb_env_open(e->env, dir, MDB_NOTLS | MDB_RDONLY, 0600);
        e->env_rdonly = 1;
    }
    if (rc != 0) {
        int mrc = rc;
        rc = bl_write_error(e, rc); /* a short write on a full disk is ENOSPC */
        /* LMDB cannot tell a damaged file from a foreign one.  bindlog.lock
         * is made by every writable open, so a directory that has it held
         * a bindlog store: its unreadable data file is damage, not a
         * stranger's file. */
        if (rc == BINDLOG_ENOTSTORE && exists && file_exists(dir, "bindlog.lock") == 1)
            rc = bl_err_set(BINDLOG_ECORRUPT, "data.mdb is not a readable LMDB file, yet "
                                              "bindlog.lock shows a store lived here: damaged");
        else if (rc == BINDLOG_ENOTSTORE)
            bl_err_set(rc, "data.mdb is not an LMDB file");
        else if (rc == BINDLOG_EACCES)
            bl_err_set(rc, "permission denied opening data.mdb and lock.mdb%s (%s)",
                       o->read_only ? "" : " for writing", mdb_strerror(mrc));
        else if (rc == BINDLOG_EVERSION)
            bl_err_set(rc, "data.mdb or lock.mdb was written by another LMDB version");
        else if (rc != BINDLOG_ENOSPC) /* bl_write_error() said it */
            bl_err_set(rc, "cannot open data.mdb and lock.mdb: %s", mdb_strerror(mrc));
        goto out;
    }
    if (!e->env_rdonly) {
        int dead = 0;
        mdb_reader_check(e->env, &dead);
    }
    if ((rc = bl_pc_open(e, !o->read_only && !e->env_rdonly)) != 0)
        goto out; /* a damaged file: LMDB never reads it */
    rc = bl_walenv_open(e, o, !o->read_only);
out:
    if (rc != 0) {
        env_free(e);
        undo_created(dir, made);
        return rc;
    }
    *out = e;
    return 0;
}

/*
 * After a fork the child starts with an empty registry: the environments
 * listed are the parent's (its LMDB environment, maps, locks, checkpointer
 * thread), which the child must never hand to a handle of its own, close
 * or otherwise touch (api.c refuses the parent's handles with
 * BINDLOG_EFORK).  A child's open of the same store then makes a fresh
 * environment, as any other process's would.  The parent's stay allocated,
 * unreachable, until the child exits or execs; their descriptors are
 * close-on-exec.  registry_mu is made anew too: another thread of the
 * parent may have held it at the fork, and that thread does not exist
 * here.
 */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void registry_after_fork(void)
{
    registry = NULL;
    pthread_mutex_init(&registry_mu, NULL);
}

static void registry_fork_register(void) { (void)pthread_atfork(NULL, NULL, registry_after_fork); }

int bl_env_acquire(const char *dir, const bindlog_options *o, bl_env **out)
{
    struct stat st;
    bl_env *e;
    size_t made_dirs = 0;
    int rc = 0;

    *out = NULL;
    if (pthread_once(&fork_once, registry_fork_register) != 0)
        return bl_err_set(BINDLOG_ENOMEM, "cannot register the fork handler");
    if (stat(dir, &st) != 0) {
        int err = errno;
        if (err != ENOENT)
            return bl_err_set(bl_mdb_error(err), "cannot look at the directory: %s",
                              strerror(err));
        if (o->read_only)
            return bl_err_set(BINDLOG_ENOTFOUND, "no such directory, and a read-only open "
                                                 "never creates one");
        /* the store's first acknowledged event lasts no longer than the
         * names of the directories made for it: flushed now, before they
         * hold anything (the store's own names, as its log is created) */
        if ((rc = make_dirs(dir, &made_dirs)) != 0 ||
            (made_dirs != 0 && o->durability != BINDLOG_DURABILITY_NONE &&
             (rc = flush_made_dirs(dir, made_dirs)) != 0)) {
            unmake_dirs(dir, made_dirs);
            return rc;
        }
        if (stat(dir, &st) != 0) {
            err = errno;
            return bl_err_set(bl_mdb_error(err), "cannot look at the directory: %s",
                              strerror(err));
        }
    }
    if (!S_ISDIR(st.st_mode))
        return bl_err_set(BINDLOG_ENOTSTORE, S_ISREG(st.st_mode)
                                                 ? "is a file, not a store directory"
                                                 : "is not a directory");

    pthread_mutex_lock(&registry_mu);
    for (e = registry; e != NULL; e = e->next)
        if (e->dev == st.st_dev && e->ino == st.st_ino)
            break;
    if (e == NULL) {
        rc = env_create(dir, &st, o, &e);
        if (rc == 0)
            e->made_dirs = made_dirs;
        if (rc != 0)
            unmake_dirs(dir, made_dirs); /* a failed open leaves nothing it made */
        if (rc == 0) {
            e->id = next_env_id++;
            e->next = registry;
            registry = e;
        }
    } else if (e->env_rdonly && !o->read_only) {
        rc = bl_err_set(BINDLOG_EACCES, "this process has the store open read-only (no "
                                        "write access to its files), so it cannot write too");
    }
    if (rc == 0 && !o->read_only && e->writers == 0)
        rc = writer_lock(e);
    if (rc == 0 && !o->read_only)
        bl_ckpt_want(e); /* the background checkpointer, at the first commit */
    if (rc == 0) {
        e->refs++;
        if (!o->read_only)
            e->writers++;
        *out = e;
    } else if (e != NULL && e->refs == 0) {
        /* created just now for this call: unlink, and free below */
        bl_env **pp = &registry;
        while (*pp != e)
            pp = &(*pp)->next;
        *pp = e->next;
    } else {
        e = NULL;
    }
    pthread_mutex_unlock(&registry_mu);
    if (rc != 0 && e != NULL)
        env_free(e);
    /* a writer's first write needs the whole file walked: start that now,
     * in the background (without a thread, the write walks itself) */
    if (rc == 0 && !o->read_only)
        (void)bl_ckpt_open(*out);
    return rc;
}

int bl_env_open_handles(bl_env *e)
{
    pthread_mutex_lock(&registry_mu);
    int n = e->refs;
    pthread_mutex_unlock(&registry_mu);
    return n;
}

void bl_env_release(bl_env *e)
{
    /* The last handle folds the log first, without the registry's lock
     * (the checkpoint takes the map lock, which readers take before the
     * registry's); a handle opened meanwhile simply keeps the environment. */
    pthread_mutex_lock(&registry_mu);
    int last = e->refs == 1;
    pthread_mutex_unlock(&registry_mu);
    if (last)
        bl_walenv_finish(e);
    pthread_mutex_lock(&registry_mu);
    e->refs--;
    if (e->refs == 0) {
        bl_env **pp = &registry;
        while (*pp != e)
            pp = &(*pp)->next;
        *pp = e->next;
        env_free(e);
    } else if (last && e->writers > 0) {
        bl_ckpt_want(e); /* another handle came: its checkpointer goes on */
    }
    pthread_mutex_unlock(&registry_mu);
}

int bl_env_flush_names(bl_env *e)
{
    int rc = bl_wal_sync(e->wal->fd);
    if (rc != 0)
        return rc;
    int err = bl_sync_dir(e->path);
    if (err != 0) {
        errno = err;
        return bl_sys_error("flushing the new store's directory");
    }
    return e->made_dirs != 0 ? flush_made_dirs(e->path, e->made_dirs) : 0;
}

void bl_env_release_writer(bl_env *e)
{
    pthread_mutex_lock(&registry_mu);
    if (--e->writers == 0 && e->lock_fd >= 0) {
        close(e->lock_fd);
        e->lock_fd = -1;
    }
    pthread_mutex_unlock(&registry_mu);
}

/* ---- map growth ------------------------------------------------------------ */

int bl_env_resize(bl_env *e, int adopt_only)
{
    MDB_envinfo info;
    int rc;

    bl_srw_wrlock(&e->map_lock);
    if (adopt_only) {
        rc = mdb_env_set_mapsize(e->env, 0);
    } else {
        mdb_env_info(e->env, &info);
        size_t size = info.me_mapsize;
        size = size < BL_MIN_MAPSIZE ? BL_MIN_MAPSIZE : size;
        /* double, but at most 1 GiB at a time */
        size += size < ((size_t)1 << 30) ? size : ((size_t)1 << 30);
        rc = mdb_env_set_mapsize(e->env, size);
    }
    if (rc == 0)
        e->map_epoch++;
    bl_pc_remap(e);
    bl_srw_wrunlock(&e->map_lock);
    return rc == 0 ? 0 : (rc == ENOMEM ? BINDLOG_ENOSPC : bl_mdb_error(rc));
}

int bl_txn_begin(bl_env *e, unsigned flags, MDB_txn **txn)
{
    for (int tries = 0;; tries++) {
        int rc = mdb_txn_begin(e->env, NULL, flags, txn);
        if (rc == 0)
            return 0;
        if (rc != MDB_MAP_RESIZED || tries >= 16)
            return bl_mdb_error(rc);
        if (e->id == 0) {
            /* still being opened (under registry_mu): no other thread can
             * see this environment, so its map is adopted without map_lock */
            if ((rc = mdb_env_set_mapsize(e->env, 0)) != 0)
                return bl_mdb_error(rc);
            bl_pc_remap(e);
        } else if ((rc = bl_env_resize(e, 1)) != 0) {
            return rc;
        }
    }
}

/* The calling thread's cached transaction for e, made on first use; NULL
 * when the thread is already inside a read of e (or out of memory). */
static bl_rtxn *thread_rtxn(bl_env *e, int *rc)
{
    bl_tcache *tc;

    *rc = 0;
    tc = tls_tcache;
    if (tc != NULL && tc->env_id == e->id && tc->rt != NULL)
        return tc->rt->busy ? NULL : tc->rt;
    if (tc == NULL) {
        pthread_once(&tcache_once, tcache_init);
        if ((tc = calloc(1, sizeof(*tc))) == NULL)
            return NULL;
        if (pthread_setspecific(tcache_key, tc) != 0) {
            free(tc);
            return NULL;
        }
        tls_tcache = tc;
    }
    bl_rtxn *rt = calloc(1, sizeof(*rt));
    if (rt == NULL)
        return NULL;
    *rc = mdb_txn_begin(e->env, NULL, MDB_RDONLY, &rt->txn);
    if (*rc != 0) {
        free(rt);
        return NULL;
    }
    mdb_txn_reset(rt->txn);
    pthread_mutex_lock(&registry_mu);
    /* the thread moved to another store: give the old one its slot back,
     * unless the thread is inside a read of it right now (A then B nested):
     * then the new transaction is simply not cached */
    bl_env *old = tc->rt ? find_env_by_id(tc->env_id) : NULL;
    if (old != NULL && tc->rt->busy) {
        pthread_mutex_unlock(&registry_mu);
        mdb_txn_abort(rt->txn);
        free(rt);
        return NULL;
    }
    if (old != NULL)
        rtxn_drop(old, tc->rt);
    rt->next = e->rtxns;
    e->rtxns = rt;
    tc->env_id = e->id;
    tc->rt = rt;
    pthread_mutex_unlock(&registry_mu);
    return rt;
}

int bl_read_begin(bl_env *e, MDB_txn **txn)
{
    if (bl_group_panicked(&e->g))
        return bl_group_panic_again(&e->g); /* the handle is unusable until reopened */
    for (int tries = 0;; tries++) {
        bl_map_rdlock(e);
        int rc;
        bl_rtxn *rt = thread_rtxn(e, &rc);
        if (rt == NULL && rc == 0) {
            bl_map_unlock(e);
            return bl_read_begin_fresh(e, txn);
        }
        if (rt != NULL)
            rc = mdb_txn_renew(rt->txn);
        if (rc == 0) {
            rt->busy = 1;
            *txn = rt->txn;
            return 0;
        }
        bl_map_unlock(e);
        if (rc != MDB_MAP_RESIZED || tries > 8)
            return bl_mdb_error(rc);
        if ((rc = bl_env_resize(e, 1)) != 0)
            return rc;
    }
}

int bl_read_begin_fresh(bl_env *e, MDB_txn **txn)
{
    if (bl_group_panicked(&e->g))
        return bl_group_panic_again(&e->g);
    for (int tries = 0;; tries++) {
        bl_map_rdlock(e);
        int rc = mdb_txn_begin(e->env, NULL, MDB_RDONLY, txn);
        if (rc == 0)
            return 0;
        bl_map_unlock(e);
        if (rc != MDB_MAP_RESIZED || tries > 8)
            return bl_mdb_error(rc);
        if ((rc = bl_env_resize(e, 1)) != 0)
            return rc;
    }
}

void bl_read_end(bl_env *e, MDB_txn *txn)
{
    bl_tcache *tc = tls_tcache;
    if (tc != NULL && tc->env_id == e->id && tc->rt != NULL && tc->rt->txn == txn) {
        mdb_txn_reset(txn);
        tc->rt->busy = 0;
    } else {
        mdb_txn_abort(txn);
    }
    bl_map_unlock(e);
}

/* ---- tables, views, apply ----------------------------------------------- */

void bl_tables_live(bl_env *e, MDB_txn *txn, bl_tables *t)
{
    t->txn = txn;
    t->bindings = e->dbi[BL_DB_BINDINGS];
    t->sessions = e->dbi[BL_DB_SESSIONS];
    /* formats 6 and 7: a child whose record is in the log is found through the
     * sibling chain of the session values, and the children table indexes
     * only the others (compaction adds them: bl_tables_compact) */
    t->children = 0;
    t->history = 0; /* format 3: a key's history is the chain of its records' prev_lsn */
    t->log = e->dbi[BL_DB_LOG];
    t->reflog = e->dbi[BL_DB_LOG];
    t->refbase = e->dbi[BL_DB_BASE_SESSIONS];
    t->rec_get = NULL;
    t->rec_ctx = NULL;
}

void bl_tables_base(bl_env *e, MDB_txn *txn, bl_tables *t)
{
    t->txn = txn;
    t->bindings = e->dbi[BL_DB_BASE_BINDINGS];
    t->sessions = e->dbi[BL_DB_BASE_SESSIONS];
    t->children = t->history = t->log = t->reflog = t->refbase = 0;
    t->rec_get = NULL;
    t->rec_ctx = NULL;
}

void bl_tables_compact(bl_env *e, MDB_txn *txn, bl_tables *t)
{
    bl_tables_base(e, txn, t);
    t->children = e->dbi[BL_DB_CHILDREN];
}

/* The view's tables are live, base or another store's: their encodings,
 * and so their limits, are those of bindings and sessions. */
static int view_binding(void *ctx, const char *key, size_t len, bl_bval *out)
{
    bl_tables *t = ctx;
    MDB_val k = {len, (void *)key}, v;
    int rc = bl_pc_guard_write(t->txn, t->bindings, key, len); /* what mdb_get will walk */
    if (rc == 0)
        rc = bl_get_checked(t->txn, t->bindings, BL_DB_BINDINGS, &k, &v);
    if (rc != 0)
        return rc;
    return bl_bval_decode(v.mv_data, v.mv_size, out);
}

int bl_tables_ref(void *ctx, int what, uint64_t lsn, const char *id, size_t id_len,
                  const void **v, size_t *n)
{
    bl_tables *t = ctx;
    unsigned char kb[8];
    MDB_val k = {8, kb}, val;
    MDB_dbi dbi = what == BL_REF_BASE ? t->refbase : t->reflog;
    int db = what == BL_REF_BASE ? BL_DB_BASE_SESSIONS : BL_DB_LOG;
    int rc;

    if (t->rec_get != NULL)
        return t->rec_get(t->rec_ctx, what, lsn, id, id_len, v, n);
    if (what == BL_REF_BASE)
        k = (MDB_val){id_len, (void *)id};
    else
        bl_put64be(kb, lsn);
    if ((rc = bl_pc_guard_write(t->txn, dbi, k.mv_data, k.mv_size)) == 0)
        rc = bl_get_checked(t->txn, dbi, db, &k, &val);
    if (rc == 0) {
        *v = val.mv_data;
        *n = val.mv_size;
    }
    return rc;
}

static int view_session(void *ctx, const char *id, size_t len, bl_sval *out)
{
    bl_tables *t = ctx;
    MDB_val k = {len, (void *)id}, v;
    int rc = bl_pc_guard_write(t->txn, t->sessions, id, len); /* what mdb_get will walk */
    if (rc == 0)
        rc = bl_get_checked(t->txn, t->sessions, BL_DB_SESSIONS, &k, &v);
    if (rc != 0)
        return rc;
    /* a base image holds whole values only: no log to refer to */
    return bl_sval_read(v.mv_data, v.mv_size, id, len,
                        bl_tables_refs(t) ? bl_tables_ref : NULL, t, out);
}

void bl_view_init(bl_view *v, bl_tables *t)
{
    v->ctx = t;
    v->binding = view_binding;
    v->session = view_session;
}

int bl_child_entry_key(MDB_txn *txn, MDB_dbi sessions, int db, const bl_sval *sv,
                       const void *id, size_t id_len, unsigned char out[BL_LCHILD_KEY_MAX])
{
    MDB_val k = {sv->parent_len, (void *)sv->parent}, v;
    bl_sval parent;
    char q[BL_ERR_QUOTE_MAX], q2[BL_ERR_QUOTE_MAX];
    int rc;

    if (sv->parent_len == 0)
        return 0;
    rc = bl_get_checked(txn, sessions, db, &k, &v);
    if (rc == BINDLOG_ENOTFOUND)
        return 0; /* a parent the store does not hold (bl_child_indexed) */
    if (rc == 0)
        rc = bl_sval_decode_any(v.mv_data, v.mv_size, &parent); /* its created_lsn only */
    if (rc == BINDLOG_ECORRUPT || rc == BINDLOG_EVERSION)
        return bl_err_set(BINDLOG_ECORRUPT, "session '%s' names parent '%s', which is damaged in %s",
                          bl_err_bytes(q, sizeof q, id, id_len),
                          bl_err_bytes(q2, sizeof q2, sv->parent, sv->parent_len),
                          bl_db_name(db));
    if (rc != 0)
        return rc;
    if (!bl_child_indexed(sv->created_lsn, parent.created_lsn))
        return 0;
    return (int)bl_lchild_key(out, parent.created_lsn, id, id_len);
}

int bl_plan_puts(const bl_plan *p, const bl_encoded *enc, bl_put_fn fn, void *ctx)
{
    const unsigned char *b = enc->buf;
    int rc;

    rc = fn(ctx, BL_DB_BINDINGS, p->rec.key, p->rec.key_len, b + enc->bval_off, enc->bval_len);
    for (unsigned i = 0; rc == 0 && i < p->nsess; i++)
        rc = fn(ctx, BL_DB_SESSIONS, b + enc->sid_off[i], p->sess[i].id_len,
                b + enc->sval_off[i], enc->sval_len[i]);
    return rc;
}

typedef struct tables_put {
    bl_tables *t;
    int *map_full;
} tables_put;

static int put_one(void *ctx, unsigned table, const void *k, size_t kn, const void *v, size_t vn)
{
    tables_put *tp = ctx;
    bl_tables *t = tp->t;
    MDB_dbi dbi = table == BL_DB_BINDINGS   ? t->bindings
                  : table == BL_DB_SESSIONS ? t->sessions
                  : table == BL_DB_CHILDREN ? t->children
                  : table == BL_DB_HISTORY  ? t->history
                                            : 0;
    if (dbi == 0)
        return 0; /* a table these tables do not maintain */
    MDB_val key = {kn, (void *)k}, val = {vn, (void *)v};
    int rc = mdb_put(t->txn, dbi, &key, &val, 0);
    if (rc == MDB_MAP_FULL)
        *tp->map_full = 1;
    return bl_mdb_error(rc);
}

int bl_tables_apply(bl_tables *t, const bl_plan *p, const bl_encoded *enc, int *map_full)
{
    tables_put tp = {t, map_full};
    unsigned char k[8];
    int rc;

    *map_full = 0;
    if ((rc = bl_pc_guard_plan(t, p, enc)) != 0)
        return rc; /* a damaged page on a path the writes would walk */
    rc = bl_plan_puts(p, enc, put_one, &tp);
    if (rc == 0 && t->children && enc->child_len &&
        bl_child_indexed(p->rec.lsn, p->child_parent_lsn)) {
        /* a child whose record leaves the log (compaction): the children
         * table indexes it from now on, unless its parent is nobody's
         * parent (a creation recover lost: bl_child_indexed).  The child
         * is the plan's first session (bl_decide). */
        unsigned char ck[BL_LCHILD_KEY_MAX];
        const unsigned char *b = enc->buf;
        rc = put_one(&tp, BL_DB_CHILDREN, ck,
                     bl_lchild_key(ck, p->child_parent_lsn, b + enc->sid_off[0],
                                   p->sess[0].id_len),
                     "", 0);
    }
    if (rc == 0 && t->log) {
        MDB_val key = {8, k}, val = {enc->rec_len, enc->buf + enc->rec_off};
        bl_put64be(k, p->rec.lsn);
        /* LSNs only grow: MDB_APPEND skips the search and refuses reuse */
        int mrc = mdb_put(t->txn, t->log, &key, &val, MDB_APPEND);
        if (mrc == MDB_MAP_FULL)
            *map_full = 1;
        rc = mrc == MDB_KEYEXIST ? BINDLOG_ECORRUPT : bl_mdb_error(mrc);
    }
    return rc;
}

/* ---- cursors ------------------------------------------------------------- */

int bl_cursor_open(bl_cursor *c, bl_env *e, MDB_txn *txn, MDB_dbi dbi, const void *seek,
                   size_t seek_len)
{
    memset(c, 0, sizeof(*c));
    c->e = e;
    c->txn = txn;
    c->dbi = dbi;
    c->db = bl_table_of(e, dbi);
    if (seek_len > sizeof(c->key))
        return BINDLOG_EINVAL;
    if (seek_len)
        memcpy(c->key, seek, seek_len);
    c->key_len = seek_len;
    c->epoch = e->map_epoch;
    return bl_mdb_error(mdb_cursor_open(txn, dbi, &c->c));
}

int bl_cursor_open_snap(bl_cursor *c, bl_snap *s, int db, const void *seek, size_t seek_len)
{
    const bl_tent *ents;
    size_t n;
    int rc = bl_cursor_open(c, s->e, s->txn, s->e->dbi[db], seek, seek_len);
    if (rc != 0)
        return rc;
    if ((rc = bl_snap_table(s, db, &ents, &n)) != 0) {
        bl_cursor_close(c);
        return rc;
    }
    c->tail = ents;
    c->tail_n = n;
    /* the first tail entry >= seek */
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (bl_key_cmp(ents[mid].key, ents[mid].klen, seek, seek_len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    c->tail_i = lo;
    return 0;
}

/* Move the LMDB side to its next entry, as `lm` says, re-seeking after a
 * remap (its page pointers died with the old map).  That includes a cursor
 * not yet used: mdb_cursor_open already loaded the table's root page. */
static int lm_advance(bl_cursor *c)
{
    MDB_val k, v;
    int rc;

    if (c->lm == 3)
        return 0;
    if (c->epoch != c->e->map_epoch) {
        mdb_cursor_close(c->c);
        c->c = NULL;
        if ((rc = mdb_cursor_open(c->txn, c->dbi, &c->c)) != 0)
            return bl_mdb_error(rc);
        c->epoch = c->e->map_epoch;
        /* back to the first key after the last one returned (or >= the
         * seek key when nothing was returned yet) */
        if (c->key_len) {
            k = (MDB_val){c->key_len, c->key};
            rc = mdb_cursor_get(c->c, &k, &v, MDB_SET_RANGE);
            if (rc == 0 && c->returned && k.mv_size == c->key_len &&
                memcmp(k.mv_data, c->key, c->key_len) == 0)
                rc = mdb_cursor_get(c->c, &k, &v, MDB_NEXT);
        } else if (c->returned) {
            rc = MDB_NOTFOUND; /* impossible: keys are never empty */
        } else {
            rc = mdb_cursor_get(c->c, &k, &v, MDB_FIRST);
        }
    } else if (c->lm == 1) {
        return 0; /* the peeked entry is still valid */
    } else if (c->lm == 2) {
        rc = mdb_cursor_get(c->c, &k, &v, MDB_NEXT);
    } else if (c->key_len) {
        k = (MDB_val){c->key_len, c->key};
        rc = mdb_cursor_get(c->c, &k, &v, MDB_SET_RANGE);
    } else {
        rc = mdb_cursor_get(c->c, &k, &v, MDB_FIRST);
    }
    c->epoch = c->e->map_epoch;
    if (rc == MDB_NOTFOUND) {
        c->lm = 3;
        return 0;
    }
    if (rc != 0)
        return bl_mdb_error(rc);
    /* before the merge compares a key whose length is damaged (an unchecked
     * cursor's caller checks; the compare reads at most a tail key's length) */
    if (!c->unchecked && (rc = bl_entry_check(c->db, &k, &v)) != 0)
        return rc;
    c->lk = k;
    c->lv = v;
    c->lm = 1;
    return 0;
}

int bl_cursor_next(bl_cursor *c, MDB_val *k, MDB_val *v)
{
    int rc;

    if (c->state == 2)
        return 0;
    if ((rc = lm_advance(c)) != 0)
        return rc;
    const bl_tent *t = c->tail_i < c->tail_n ? &c->tail[c->tail_i] : NULL;
    if (c->lm == 3 && t == NULL) {
        c->state = 2;
        return 0;
    }
    int cmp = c->lm == 3 ? 1
              : t == NULL ? -1
                          : bl_key_cmp(c->lk.mv_data, c->lk.mv_size, t->key, t->klen);
    if (cmp < 0) {
        *k = c->lk;
        *v = c->lv;
        c->lm = 2;
    } else {
        *k = (MDB_val){t->klen, (void *)t->key};
        *v = (MDB_val){t->vlen, (void *)t->val};
        c->tail_i++;
        if (cmp == 0)
            c->lm = 2; /* the tail's value replaces LMDB's */
    }
    c->state = 1;
    if (!c->unchecked && (rc = bl_entry_check(c->db, k, v)) != 0)
        return rc;
    if (k->mv_size > sizeof(c->key))
        return bl_entry_check(-1, k, v); /* even unchecked, a key LMDB cannot hold */
    memcpy(c->key, k->mv_data, k->mv_size);
    c->key_len = k->mv_size;
    c->returned = 1;
    return 1;
}

void bl_cursor_close(bl_cursor *c)
{
    if (c->c != NULL)
        mdb_cursor_close(c->c);
    c->c = NULL;
}
