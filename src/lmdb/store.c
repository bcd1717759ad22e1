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
#include "lmdb/pagecheck.h"

#include "core/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define BL_DEFAULT_MAPSIZE ((size_t)256 << 20)
#define BL_MIN_MAPSIZE ((size_t)64 << 10)
#define BL_MAGIC "bindlog-store"

static const char *const db_names[BL_DB_COUNT] = {
    "meta", "log", "bindings", "sessions", "children", "history", "base_bindings",
    "base_sessions",
};

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

static void tcache_destroy(void *p)
{
    bl_tcache *tc = p;
    tls_tcache = NULL;
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

/* mkdir -p with mode 0700 for every directory it creates. */
static int make_dirs(const char *dir)
{
    size_t n = strlen(dir);
    char *p = malloc(n + 1);
    int rc = 0;

    if (p == NULL)
        return BINDLOG_ENOMEM;
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n && rc == 0; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
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
    return bl_mdb_error(mdb_get(txn, e->dbi[BL_DB_META], &k, v));
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
            rc = bl_mdb_error(rc);
        } else {
            rc = check_meta(e, txn);
        }
    }
    if (rc == 0)
        return bl_mdb_error(mdb_txn_commit(txn));
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
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    free(p);
    if (fd < 0) {
        int err = errno;
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

    exists = file_exists(dir, "data.mdb");
    if (exists < 0) {
        rc = bl_err_set(exists, "cannot look at data.mdb (%s)", bindlog_strerror(exists));
        goto out;
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
    }

    if (exists && (rc = bl_pc_preopen(dir)) != 0)
        goto out; /* damaged meta pages: LMDB would believe them */
    if ((rc = bl_mdb_error(mdb_env_create(&e->env))) != 0)
        goto out;
    mdb_env_set_maxdbs(e->env, BL_DB_COUNT + 4);
    mdb_env_set_maxreaders(e->env, o->max_readers ? o->max_readers : 126);
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
        rc = bl_mdb_error(rc);
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
        else
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
        return rc;
    }
    *out = e;
    return 0;
}

int bl_env_acquire(const char *dir, const bindlog_options *o, bl_env **out)
{
    struct stat st;
    bl_env *e;
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
        if ((rc = make_dirs(dir)) != 0)
            return rc;
        if (stat(dir, &st) != 0) {
            err = errno;
            return bl_err_set(bl_mdb_error(err), "cannot look at the directory: %s",
                              strerror(err));
        }
    }
    if (!S_ISDIR(st.st_mode))
        return BINDLOG_ENOTSTORE;

    pthread_mutex_lock(&registry_mu);
    for (e = registry; e != NULL; e = e->next)
        if (e->dev == st.st_dev && e->ino == st.st_ino)
            break;
    if (e == NULL) {
        rc = env_create(dir, &st, o, &e);
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

static int view_binding(void *ctx, const char *key, size_t len, bl_bval *out)
{
    bl_tables *t = ctx;
    MDB_val k = {len, (void *)key}, v;
    int rc = bl_pc_guard_write(t->txn, t->bindings, key, len); /* the pages mdb_get will walk */
    if (rc == 0)
        rc = bl_mdb_error(mdb_get(t->txn, t->bindings, &k, &v));
    if (rc != 0)
        return rc;
    return bl_bval_decode(v.mv_data, v.mv_size, out);
}

static int view_session(void *ctx, const char *id, size_t len, bl_sval *out)
{
    bl_tables *t = ctx;
    MDB_val k = {len, (void *)id}, v;
    int rc = bl_pc_guard_write(t->txn, t->sessions, id, len); /* the pages mdb_get will walk */
    if (rc == 0)
        rc = bl_mdb_error(mdb_get(t->txn, t->sessions, &k, &v));
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
    if (k->mv_size > sizeof(c->key))
        return BINDLOG_ECORRUPT;
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
