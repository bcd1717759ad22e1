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
 *   children  parent 0x00 child -> ""     history   key 0x00 be64 lsn -> ""
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
#include "lmdb/pagecheck.h"

#include "core/error.h"

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

int bl_mdb_error(int rc)
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
        if (rmdir(p) != 0)
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

static char *path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p != NULL) {
        memcpy(p, dir, a);
        p[a] = '/';
        memcpy(p + a + 1, name, b + 1);
    }
    return p;
}

/* 1 if `name` (in dir) exists, 0 if not, <0 on error. */
static int file_exists(const char *dir, const char *name)
{
    struct stat st;
    char *p = path_join(dir, name);
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

/* The files a store directory may hold (engine-wal adds its log files). */
static const char *const store_files[] = {"data.mdb", "lock.mdb", "bindlog.lock"};
#define STORE_FILES (sizeof(store_files) / sizeof(store_files[0]))

/* Refuse any store file that is there but is not a regular file. */
static int check_store_files(const char *dir)
{
    for (size_t i = 0; i < STORE_FILES; i++) {
        struct stat st;
        char *p = path_join(dir, store_files[i]);
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
    char *p = path_join(dir, "data.mdb");
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
 * fallocate(2), not posix_fallocate(3): the latter's fallback on file
 * systems without fallocate writes a zero into every block, racing with
 * other processes' reader slots; there the file is left to LMDB as before.
 * Allocation changes none of the file's bytes.  A directory the caller may
 * not write in is left to LMDB (a read-only environment, see env_create).
 */
static int prealloc_lock_file(const char *dir, unsigned max_readers, unsigned *made)
{
    char *p = path_join(dir, "lock.mdb");
    struct stat st;
    off_t want = lmdb_lock_size(max_readers);
    int fd, rc = 0, mode = 0;

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
        mode = FALLOC_FL_KEEP_SIZE;
    }
    if (rc == 0 && want > 0 && fallocate(fd, mode, 0, want) != 0 && errno != EOPNOTSUPP &&
        errno != ENOSYS) {
        int err = errno;
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
    char *lock = path_join(dir, "lock.mdb"), *data = path_join(dir, "data.mdb");
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
            strcmp(n, "bindlog.lock") != 0) {
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

int bl_meta_get_head(bl_env *e, MDB_txn *txn, bl_head *h)
{
    MDB_val v;
    int rc = meta_get(e, txn, "head", &v);
    memset(h, 0, sizeof(*h));
    if (rc == BINDLOG_ENOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    if (v.mv_size != 16)
        return BINDLOG_ECORRUPT;
    h->lsn = bl_get64(v.mv_data);
    h->time_ms = (int64_t)bl_get64((const unsigned char *)v.mv_data + 8);
    return 0;
}

int bl_meta_put_head(bl_env *e, MDB_txn *txn, const bl_head *h)
{
    unsigned char b[16];
    bl_put64(b, h->lsn);
    bl_put64(b + 8, (uint64_t)h->time_ms);
    return meta_put(e, txn, "head", b, sizeof(b));
}

#define COUNTS_SIZE (8 * (BINDLOG_EVENT_COUNT + 2))

int bl_meta_get_counts(bl_env *e, MDB_txn *txn, bl_counts *c)
{
    MDB_val v;
    int rc = meta_get(e, txn, "counts", &v);
    memset(c, 0, sizeof(*c));
    if (rc == BINDLOG_ENOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    if (v.mv_size != COUNTS_SIZE)
        return BINDLOG_ECORRUPT;
    const unsigned char *p = v.mv_data;
    for (int i = 0; i < BINDLOG_EVENT_COUNT; i++)
        c->applied[i] = bl_get64(p + 8 * i);
    c->live_bindings = bl_get64(p + 8 * BINDLOG_EVENT_COUNT);
    c->live_sessions = bl_get64(p + 8 * (BINDLOG_EVENT_COUNT + 1));
    return 0;
}

int bl_meta_put_counts(bl_env *e, MDB_txn *txn, const bl_counts *c)
{
    unsigned char b[COUNTS_SIZE];
    for (int i = 0; i < BINDLOG_EVENT_COUNT; i++)
        bl_put64(b + 8 * i, c->applied[i]);
    bl_put64(b + 8 * BINDLOG_EVENT_COUNT, c->live_bindings);
    bl_put64(b + 8 * (BINDLOG_EVENT_COUNT + 1), c->live_sessions);
    return meta_put(e, txn, "counts", b, sizeof(b));
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
                          "the store is format %u; this library (%s) reads formats 1..%d: "
                          "open it with a newer bindlog",
                          (unsigned)fmt, BINDLOG_VERSION_STRING, BINDLOG_FORMAT_VERSION);
    return 0;
}

/* Open the tables of an existing store, or make a new one.  Two processes
 * creating the same store race safely: creation happens in a write
 * transaction that first looks for the magic. */
static int init_tables(bl_env *e, int may_create)
{
    MDB_txn *txn;
    MDB_dbi meta;
    int rc;

    rc = mdb_txn_begin(e->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0)
        return bl_mdb_error(rc);
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

    rc = mdb_txn_begin(e->env, NULL, 0, &txn);
    if (rc != 0)
        return bl_mdb_error(rc);
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
            rc = meta_put(e, txn, "magic", BL_MAGIC, strlen(BL_MAGIC));
            if (rc == 0)
                rc = meta_put(e, txn, "format", fmt, sizeof(fmt));
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

static unsigned sync_flags(int durability)
{
    switch (durability) {
    case BINDLOG_DURABILITY_NONE:
        return MDB_NOSYNC;
    case BINDLOG_DURABILITY_NORMAL:
        return MDB_NOMETASYNC;
    default:
        return 0;
    }
}

/* Take the advisory writer lock (shared).  Vacuum holds it exclusive. */
static int writer_lock(bl_env *e)
{
    if (e->lock_fd >= 0)
        return 0;
    char *p = path_join(e->path, "bindlog.lock");
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
    pthread_rwlock_destroy(&e->map_lock);
    bl_group_destroy(&e->g);
    free(e->enc.buf);
    free(e->path);
    free(e);
}

static int env_create(const char *dir, const struct stat *st, const bindlog_options *o,
                      bl_env **out)
{
    bl_env *e = calloc(1, sizeof(*e));
    pthread_rwlockattr_t ra;
    unsigned made = 0, max_readers;
    int rc, exists;

    if (e == NULL)
        return BINDLOG_ENOMEM;
    e->lock_fd = -1;
    e->dev = st->st_dev;
    e->ino = st->st_ino;
    pthread_rwlockattr_init(&ra);
    /* growth must not starve behind a stream of readers */
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&e->map_lock, &ra);
    pthread_rwlockattr_destroy(&ra);
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
        /* empty: a creation that never wrote a page.  A writer makes the
         * store again; a reader has no store to read, and LMDB would write
         * its first pages */
        if (o->read_only) {
            rc = bl_err_set(BINDLOG_ENOTFOUND, "data.mdb is empty: no store here yet");
            goto out;
        }
        rc = 0;
    }
    if (!exists) {
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
    max_readers = o->max_readers ? o->max_readers : 126;
    if ((rc = prealloc_lock_file(dir, max_readers, &made)) != 0)
        goto out;

    if (exists && (rc = bl_pc_preopen(dir)) != 0)
        goto out; /* damaged meta pages: LMDB would believe them */
    if ((rc = bl_mdb_error(mdb_env_create(&e->env))) != 0)
        goto out;
    mdb_env_set_maxdbs(e->env, BL_DB_COUNT + 4);
    mdb_env_set_maxreaders(e->env, max_readers);
    mdb_env_set_mapsize(e->env, o->map_size ? o->map_size : BL_DEFAULT_MAPSIZE);
    e->sync_mode = o->durability;
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
    if ((rc = bl_pc_open(e)) != 0)
        goto out; /* a damaged file: LMDB never reads it */
    rc = init_tables(e, !o->read_only);
out:
    if (rc != 0) {
        env_free(e);
        undo_created(dir, made);
        return rc;
    }
    *out = e;
    return 0;
}

int bl_env_acquire(const char *dir, const bindlog_options *o, bl_env **out)
{
    struct stat st;
    bl_env *e;
    size_t made_dirs = 0;
    int rc = 0;

    *out = NULL;
    if (stat(dir, &st) != 0) {
        int err = errno;
        if (err != ENOENT)
            return bl_err_set(bl_mdb_error(err), "cannot look at the directory: %s",
                              strerror(err));
        if (o->read_only)
            return bl_err_set(BINDLOG_ENOTFOUND, "no such directory, and a read-only open "
                                                 "never creates one");
        if ((rc = make_dirs(dir, &made_dirs)) != 0) {
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
    if (rc == 0) {
        e->refs++;
        if (!o->read_only)
            e->writers++;
        *out = e;
    } else if (e != NULL && e->refs == 0) {
        /* created just now for this call: unlink and free */
        bl_env **pp = &registry;
        while (*pp != e)
            pp = &(*pp)->next;
        *pp = e->next;
        env_free(e);
    }
    pthread_mutex_unlock(&registry_mu);
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
    pthread_mutex_lock(&registry_mu);
    e->refs--;
    if (e->refs == 0) {
        bl_env **pp = &registry;
        while (*pp != e)
            pp = &(*pp)->next;
        *pp = e->next;
        env_free(e);
    }
    pthread_mutex_unlock(&registry_mu);
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

    pthread_rwlock_wrlock(&e->map_lock);
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
    pthread_rwlock_unlock(&e->map_lock);
    return rc == 0 ? 0 : (rc == ENOMEM ? BINDLOG_ENOSPC : bl_mdb_error(rc));
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
        return BINDLOG_EPANIC; /* the handle is unusable until reopened */
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
        return BINDLOG_EPANIC;
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
    t->children = e->dbi[BL_DB_CHILDREN];
    t->history = e->dbi[BL_DB_HISTORY];
    t->log = e->dbi[BL_DB_LOG];
}

void bl_tables_base(bl_env *e, MDB_txn *txn, bl_tables *t)
{
    t->txn = txn;
    t->bindings = e->dbi[BL_DB_BASE_BINDINGS];
    t->sessions = e->dbi[BL_DB_BASE_SESSIONS];
    t->children = t->history = t->log = 0;
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

static int view_session(void *ctx, const char *id, size_t len, bl_sval *out)
{
    bl_tables *t = ctx;
    MDB_val k = {len, (void *)id}, v;
    int rc = bl_pc_guard_write(t->txn, t->sessions, id, len); /* what mdb_get will walk */
    if (rc == 0)
        rc = bl_get_checked(t->txn, t->sessions, BL_DB_SESSIONS, &k, &v);
    if (rc != 0)
        return rc;
    return bl_sval_decode(v.mv_data, v.mv_size, out);
}

void bl_view_init(bl_view *v, bl_tables *t)
{
    v->ctx = t;
    v->binding = view_binding;
    v->session = view_session;
}

static int put(bl_tables *t, MDB_dbi dbi, const void *k, size_t kn, const void *d, size_t dn,
               unsigned flags, int *map_full)
{
    MDB_val key = {kn, (void *)k}, val = {dn, (void *)d};
    int rc = mdb_put(t->txn, dbi, &key, &val, flags);
    if (rc == MDB_MAP_FULL)
        *map_full = 1;
    return bl_mdb_error(rc);
}

int bl_tables_apply(bl_tables *t, const bl_plan *p, const bl_encoded *enc, int *map_full)
{
    const unsigned char *b = enc->buf;
    unsigned char k[BINDLOG_KEY_MAX + 1 + 8];
    int rc;

    *map_full = 0;
    if ((rc = bl_pc_guard_plan(t, p, enc)) != 0)
        return rc; /* a damaged page on a path the writes would walk */
    rc = put(t, t->bindings, p->rec.key, p->rec.key_len, b + enc->bval_off, enc->bval_len, 0,
             map_full);
    for (unsigned i = 0; rc == 0 && i < p->nsess; i++)
        rc = put(t, t->sessions, b + enc->sid_off[i], p->sess[i].id_len, b + enc->sval_off[i],
                 enc->sval_len[i], 0, map_full);
    if (rc == 0 && t->children && enc->child_len)
        rc = put(t, t->children, b + enc->child_off, enc->child_len, "", 0, 0, map_full);
    if (rc == 0 && t->history) {
        memcpy(k, p->rec.key, p->rec.key_len);
        k[p->rec.key_len] = 0;
        bl_put64be(k + p->rec.key_len + 1, p->rec.lsn);
        rc = put(t, t->history, k, p->rec.key_len + 9, "", 0, 0, map_full);
    }
    if (rc == 0 && t->log) {
        bl_put64be(k, p->rec.lsn);
        /* LSNs only grow: MDB_APPEND skips the search and refuses reuse */
        rc = put(t, t->log, k, 8, b + enc->rec_off, enc->rec_len, MDB_APPEND, map_full);
        if (rc == BINDLOG_EIO)
            rc = BINDLOG_ECORRUPT; /* MDB_KEYEXIST: an LSN would be reused */
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

int bl_cursor_next(bl_cursor *c, MDB_val *k, MDB_val *v)
{
    int rc;

    if (c->state == 2)
        return 0;
    if (c->state == 1 && c->epoch != c->e->map_epoch) {
        /* the map moved: pages the cursor points at are gone; re-seek */
        mdb_cursor_close(c->c);
        c->c = NULL;
        if ((rc = mdb_cursor_open(c->txn, c->dbi, &c->c)) != 0)
            return bl_mdb_error(rc);
        c->epoch = c->e->map_epoch;
        *k = (MDB_val){c->key_len, c->key};
        rc = mdb_cursor_get(c->c, k, v, MDB_SET_RANGE);
        if (rc == 0 && k->mv_size == c->key_len && memcmp(k->mv_data, c->key, c->key_len) == 0)
            rc = mdb_cursor_get(c->c, k, v, MDB_NEXT);
    } else if (c->state == 1) {
        rc = mdb_cursor_get(c->c, k, v, MDB_NEXT);
    } else if (c->key_len) {
        *k = (MDB_val){c->key_len, c->key};
        rc = mdb_cursor_get(c->c, k, v, MDB_SET_RANGE);
    } else {
        rc = mdb_cursor_get(c->c, k, v, MDB_FIRST);
    }
    if (rc == MDB_NOTFOUND) {
        c->state = 2;
        return 0;
    }
    if (rc != 0)
        return bl_mdb_error(rc);
    c->state = 1;
    if ((rc = bl_entry_check(c->db, k, v)) != 0)
        return rc;
    memcpy(c->key, k->mv_data, k->mv_size);
    c->key_len = k->mv_size;
    return 1;
}

void bl_cursor_close(bl_cursor *c)
{
    if (c->c != NULL)
        mdb_cursor_close(c->c);
    c->c = NULL;
}
