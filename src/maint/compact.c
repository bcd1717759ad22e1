/*
 * compact.c -- online compaction and vacuum.
 *
 * Compaction keeps a base image: the state at meta "base" in the tables
 * base_bindings and base_sessions.  Folding records base+1..c into it means
 * re-deriving each of them against the base image exactly as replay does
 * (bl_replay_one on bl_tables_base, which writes only bindings and
 * sessions), then deleting the records and advancing meta "base", "base_time" and "base_counts", all in one write
 * transaction of at most BL_COMPACT_CHUNK records.  Each transaction leaves
 * a consistent store (replay of base image + remaining log == state), so
 * writers interleave between chunks and a crash at any point loses at most
 * the chunk in flight, which the next run redoes.  A record that does not
 * re-derive stops compaction with BINDLOG_ECORRUPT before anything of its
 * chunk is written: damage is never folded into the image.
 *
 * The write transactions follow the rules of commit.c's run_group: the
 * map lock is held shared while a transaction is open, a full map is grown
 * with the lock released and the chunk redone, and a commit that fails
 * after writing makes the environment sticky-failed.  LMDB serialises them
 * with the group-commit leader's transactions (one writer at a time, in
 * every process).
 *
 * Vacuum rewrites data.mdb to its live size with LMDB's compacting copy.
 * Deleted records leave free pages that LMDB reuses but never returns to
 * the file system; only a copy can.  Replacing the file under a process
 * that has it open would leave that process reading the old file forever
 * (and its reader slots would confuse the new file's transaction ids), so
 * vacuum runs only when the store is open nowhere else:
 *   - writers (any process) hold bindlog.lock shared: vacuum takes it
 *     exclusive without waiting, BINDLOG_EBUSY otherwise, and keeps it, so
 *     no writer can open during the vacuum;
 *   - any process that has the LMDB environment open, reader or writer,
 *     holds a shared fcntl lock on byte 0 of lock.mdb (LMDB's own
 *     liveness lock): a conflicting one seen through F_GETLK is
 *     BINDLOG_EBUSY;
 *   - in this process, another open handle is BINDLOG_EBUSY.
 * The copy goes to data.mdb.vacuum, is fsynced, renamed over data.mdb and
 * the directory fsynced: rename is atomic, so a crash leaves either the old
 * file or the complete new one (and at worst a stale data.mdb.vacuum,
 * which the next vacuum removes).
 */
#define _GNU_SOURCE
#include "lmdb/pagecheck.h"
#include "maint/maint.h"
#include "lmdb/walenv.h"
#include "core/error.h"
#include "lmdb/limits.h"
#include "platform/platform.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- compaction -------------------------------------------------------------- */

/*
 * Fold up to BL_COMPACT_CHUNK records, base+1..min(cut, ...), into the base
 * image in one write transaction.  *moved receives the records folded (0:
 * nothing left to do).  On the first call *cut is computed from
 * keep_from_lsn against the head seen then (later writes are not chased).
 */
static int compact_chunk(bl_env *e, bl_replayer *r, uint64_t keep_from, uint64_t *cut, int first,
                         uint64_t *total, uint64_t *moved)
{
    MDB_txn *txn;
    bl_head head;
    bl_base base;
    bl_tables t;
    int rc, map_full = 0;

    *moved = 0;
    for (int grow = 0;; grow++) {
        uint64_t n = 0;
        if ((rc = bl_wtxn_begin(e, &txn)) != 0)
            return rc;
        if ((rc = bl_meta_get_head(e, txn, &head)) != 0 ||
            (rc = bl_base_get(e, txn, &base)) != 0) {
            bl_wtxn_abort(e, txn);
            return rc;
        }
        if (first) {
            *cut = keep_from > 0 ? keep_from - 1 : 0;
            if (*cut > head.lsn)
                *cut = head.lsn;
            *total = *cut > base.lsn ? *cut - base.lsn : 0;
        }
        if (base.lsn >= *cut) {
            bl_wtxn_abort(e, txn);
            return 0;
        }
        bl_replay_mark m = {base.lsn + 1, 0, base.time_ms, base.counts};
        bl_replayer_restore(r, &m);
        bl_tables_compact(e, txn, &t);
        while (rc == 0 && n < BL_COMPACT_CHUNK && r->next_lsn <= *cut) {
            unsigned char kb[8];
            uint64_t lsn = r->next_lsn;
            MDB_val k = {8, kb}, v;

            bl_put64be(kb, lsn);
            rc = bl_get_checked(txn, e->dbi[BL_DB_LOG], BL_DB_LOG, &k, &v);
            if (rc == BINDLOG_ENOTFOUND) {
                rc = BINDLOG_ECORRUPT; /* a hole in the log: check names it */
                break;
            }
            if (rc != 0)
                break;
            if ((rc = bl_replay_one(r, &t, v.mv_data, v.mv_size, lsn, &map_full)) != 0)
                break;
            k = (MDB_val){8, kb};
            rc = mdb_del(txn, e->dbi[BL_DB_LOG], &k, NULL);
            if (rc != 0) {
                map_full = rc == MDB_MAP_FULL;
                rc = bl_mdb_error(rc);
                break;
            }
            n++;
        }
        if (rc == 0) {
            base.lsn = r->next_lsn - 1;
            base.time_ms = r->last_time;
            base.counts = r->counts;
            if ((rc = bl_base_put(e, txn, &base)) != 0) {
                map_full = rc == MDB_MAP_FULL;
                rc = bl_mdb_error(rc);
            }
        }
        if (rc == 0) {
            rc = bl_wtxn_commit(e, txn, &map_full);
        } else {
            bl_wtxn_abort(e, txn);
        }
        if (rc != 0 && map_full && grow < 64) {
            if ((rc = bl_env_resize(e, 0)) != 0)
                return rc;
            continue;
        }
        if (rc == 0)
            *moved = n;
        return rc;
    }
}

int bl_lmdb_compact(bindlog *s, uint64_t keep_from_lsn, uint64_t *removed,
                    bindlog_progress_fn progress, void *progress_ctx)
{
    bl_replayer r;
    uint64_t cut = 0, total = 0, done = 0, moved;
    int rc, panic;

    if (removed != NULL)
        *removed = 0;
    if (s == NULL)
        return BINDLOG_EINVAL;
    if (s->read_only)
        return BINDLOG_EREADONLY;
    panic = bl_group_panicked(&s->e->g);
    if (panic)
        return bl_group_panic_again(&s->e->g);
    /* compaction deletes, which rebalances pages beside any path */
    if ((rc = bl_pc_guard_all(s->e, BL_PC_EVERYTHING)) != 0)
        return rc;

    /* compaction works on records LMDB holds: fold the log's tail first,
     * so that it can reach everything acknowledged so far */
    if ((rc = bl_ckpt_run(s->e, 0)) != 0)
        return rc;
    bl_replayer_init(&r, 1, 0, NULL);
    for (int first = 1;; first = 0) {
        rc = compact_chunk(s->e, &r, keep_from_lsn, &cut, first, &total, &moved);
        if (rc != 0 || moved == 0)
            break;
        done += moved;
        if (removed != NULL)
            *removed = done;
        if (progress != NULL)
            progress(progress_ctx, done, total);
    }
    bl_replayer_free(&r);
    /* The chunks were committed with the environment's current sync flags;
     * make the whole compaction durable as this handle promises. */
    if (rc == 0 && done > 0 && s->durability != BINDLOG_DURABILITY_NONE) {
        int src = mdb_env_sync(s->e->env, 1);
        /* a failed flush is never retried: the kernel may have dropped
         * the pages it could not write, and the next commit's meta page
         * would name them */
        if (src != 0)
            rc = bl_group_panic(&s->e->g, "data.mdb: flushing the compaction failed: %s",
                                mdb_strerror(src));
    }
    return rc;
}

/* ---- vacuum ------------------------------------------------------------------- */

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p != NULL)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/*
 * 1 if another process holds LMDB's liveness lock on lock.mdb (opened as
 * `fd`), i.e. has the environment open; 0 if not; <0 on error.  F_GETLK
 * reports locks of other processes only, so our own environment's lock
 * does not count.  Caution: POSIX drops every fcntl lock a process holds
 * on a file when it closes *any* descriptor of that file, so `fd` must
 * stay open until this process's environment on the store is closed.
 */
static int held_elsewhere(int fd)
{
    struct flock fl;

    memset(&fl, 0, sizeof(fl));
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 1;
    if (fcntl(fd, F_GETLK, &fl) != 0)
        return bl_sys_error("lock.mdb (asking for its lock)");
    return fl.l_type != F_UNLCK;
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static int vacuum(const char *dir, uint64_t *before, uint64_t *after)
{
    char *data = NULL, *tmp = NULL, *lock = NULL, *lmdb_lock = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *h = NULL;
    struct stat st;
    int lock_fd = -1, probe_fd = -1, fd = -1, dfd = -1, rc, renamed = 0;

    if (before != NULL)
        *before = 0;
    if (after != NULL)
        *after = 0;
    if (dir == NULL || dir[0] == '\0')
        return BINDLOG_EINVAL;
    data = join(dir, "data.mdb");
    tmp = join(dir, "data.mdb.vacuum");
    lock = join(dir, "bindlog.lock");
    lmdb_lock = join(dir, "lock.mdb");
    if (data == NULL || tmp == NULL || lock == NULL || lmdb_lock == NULL) {
        rc = BINDLOG_ENOMEM;
        goto out;
    }
    if (stat(data, &st) != 0) {
        rc = errno == ENOENT ? bl_err_set(BINDLOG_ENOTFOUND, "no store here (no data.mdb)")
                             : bl_err_set(bl_mdb_error(errno), "data.mdb: %s", strerror(errno));
        goto out;
    }
    if (before != NULL)
        *before = (uint64_t)st.st_size;

    /* no writer anywhere, and none may come while we work */
    lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd < 0) {
        rc = bl_sys_error("bindlog.lock");
        goto out;
    }
    if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
        rc = errno == EWOULDBLOCK
                 ? bl_err_set(BINDLOG_EBUSY, "a writer has the store open (bindlog.lock is held)")
                 : bl_sys_error("bindlog.lock");
        goto out;
    }
    o.read_only = 1;
    if ((rc = bindlog_open(&h, dir, &o)) != 0) {
        char why[BL_ERRMSG_MAX]; /* the message is the calling thread's own buffer */
        snprintf(why, sizeof why, "%s", bindlog_last_error());
        bl_err_set(rc, "%s", why);
        goto out;
    }
    /* another handle of this process (it would keep the old file) */
    if (bl_env_open_handles(h->e) > 1) {
        rc = bl_err_set(BINDLOG_EBUSY, "another handle of this process has the store open");
        goto out;
    }
    /* another process with the environment open, even only to read */
    probe_fd = open(lmdb_lock, O_RDWR | O_CLOEXEC);
    if (probe_fd < 0) {
        rc = bl_sys_error("lock.mdb");
        goto out;
    }
    if ((rc = held_elsewhere(probe_fd)) != 0) {
        rc = rc > 0 ? bl_err_set(BINDLOG_EBUSY, "another process has the store open, even if "
                                                "only to read (lock.mdb is locked)")
                    : rc;
        goto out;
    }

    /* a stale copy of a vacuum that crashed is garbage */
    if (unlink(tmp) != 0 && errno != ENOENT) {
        rc = bl_sys_error("data.mdb.vacuum (a crashed vacuum's copy)");
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = bl_sys_error("data.mdb.vacuum");
        goto out;
    }
    /* the compacting copy walks every tree, the free list included */
    if ((rc = bl_pc_guard_all(h->e, BL_PC_EVERYTHING)) != 0)
        goto out;
    bl_map_rdlock(h->e);
    rc = mdb_env_copyfd2(h->e->env, fd, MDB_CP_COMPACT);
    bl_map_unlock(h->e);
    if (rc != 0) {
        rc = bl_err_set(bl_mdb_error(rc),
                        "writing the compacted copy data.mdb.vacuum: %s; "
                        "data.mdb is as it was",
                        mdb_strerror(rc));
        goto out;
    }
    if (bl_plat_flush_file(fd) != 0 || close(fd) != 0) {
        fd = -1;
        rc = bl_sys_error("flushing the compacted copy data.mdb.vacuum (data.mdb is as it was)");
        goto out;
    }
    fd = -1;

    /* a reader that opened while we copied: leave it the old file */
    if ((rc = held_elsewhere(probe_fd)) != 0) {
        rc = rc > 0 ? bl_err_set(BINDLOG_EBUSY, "another process opened the store during the "
                                                "copy; the old file stays")
                    : rc;
        goto out;
    }
    if (rename(tmp, data) != 0) {
        rc = bl_sys_error("renaming data.mdb.vacuum over data.mdb");
        goto out;
    }
    renamed = 1;
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || bl_plat_flush_file(dfd) != 0) {
        rc = bl_sys_error("flushing the directory after the compacted copy replaced data.mdb");
        goto out;
    }
    if (after != NULL)
        *after = file_size(data);
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    if (rc != 0 && !renamed && tmp != NULL)
        unlink(tmp);
    if (dfd >= 0)
        close(dfd);
    bindlog_close(h); /* first: closing probe_fd drops the environment's fcntl lock */
    if (probe_fd >= 0)
        close(probe_fd);
    if (lock_fd >= 0)
        close(lock_fd); /* drops the exclusive writer lock */
    free(data);
    free(tmp);
    free(lock);
    free(lmdb_lock);
    return rc;
}

int bindlog_vacuum(const char *dir, uint64_t *before, uint64_t *after)
{
    char q[BL_ERR_QUOTE_MAX];
    bl_err_clear();
    int rc = vacuum(dir, before, after);
    return BL_API_DONE(rc, "vacuum %s",
                       dir ? bl_err_bytes(q, sizeof q, dir, strnlen(dir, 4096)) : "(null)");
}
