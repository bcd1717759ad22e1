/*
 * upgrade.c -- bindlog_upgrade(): a store of format 1 to 6 moved to the
 * current format.  Formats 2 to 6 are first drained (opened as a writer
 * and closed, which checkpoints their log into data.mdb); from there all
 * six are read alike, by the reader of upgrade_f1.c, and the steps below
 * are the same (named for format 1, the first one they were written for).
 *
 * The new store is built inside the store's own directory, in
 * DIR/.bindlog-upgrade/, so that every rename below stays on one file
 * system and nothing is ever written outside DIR (its parent may not even
 * be writable).  Steps, each followed by a failpoint (tests kill the
 * process there: test_upgrade_crash):
 *
 *   lock      bindlog.lock exclusive (every writer holds it shared), and
 *             no other process holding LMDB's liveness lock on lock.mdb
 *             (a reader); otherwise BINDLOG_EBUSY.  Held to the end.
 *   tidy      what an interrupted upgrade left: the staging directory, and
 *             bindlog.wal / bindlog.shm beside a format-1 data.mdb (format 1
 *             never has them).
 *   build     the format-1 reader (upgrade_f1.c) writes a full export
 *             stream of the old store to an unlinked file; a new store in
 *             the staging directory imports it: every record re-derived by
 *             today's state machine, the result's digest compared with the
 *             old store's (the stream's trailer); then check must find no
 *             problem and report that digest for both the stored and the
 *             replayed state, and the head, base and applied counters must
 *             be the old store's.  Closed (a clean close checkpoints
 *             everything into data.mdb), its data.mdb and bindlog.wal
 *             fsynced.                                   "upgrade.built"
 *   backup    DIR/format1-backup/data.mdb: a hard link to the old data.mdb
 *             (no copy; a copy when the file system has no hard links),
 *             fsynced.  Formats 2 to 6 also link their bindlog.wal there
 *             (DIR/format<N>-backup/bindlog.wal).        "upgrade.backup"
 *   wal       the new bindlog.wal renamed into DIR.  Beside the old
 *             data.mdb it is ignored: opening still says format 1.  Beside
 *             a data.mdb of format 2 to 6 it is another log's: a failure
 *             puts the old one back from the backup, and so does the next
 *             run after a crash (restore_wal()).
 *                                                        "upgrade.wal"
 *   switch    the new data.mdb renamed over the old one: the commit point.
 *             The directory is fsynced.                  "upgrade.switch"
 *   clean     the staging directory removed (a failure here leaves it
 *             for the next upgrade's tidy; the call still returns 0).
 *                                                        "upgrade.clean"
 *
 * A crash before the switch leaves the old store as it was (opening it
 * says to run upgrade, and running it again starts over); after it, the
 * new store, whole.  LMDB's lock.mdb stays: its first opener
 * initialises it again.
 */
#define _GNU_SOURCE
#include "maint/upgrade.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/failpoint.h"
#include "lmdb/shm.h"
#include "lmdb/store.h"
#include "lmdb/wal.h"
#include "platform/platform.h"

#define STAGING ".bindlog-upgrade"
/* DIR/format<N>-backup/: where the old data.mdb of format N is kept */
static _Thread_local char backup_dir[24] = "format1-backup";
static _Thread_local char backup_path[48];
#define BACKUP backup_dir

/* BACKUP/name, for messages and *at() calls relative to DIR */
static const char *backup_of(const char *name)
{
    snprintf(backup_path, sizeof backup_path, "%s/%s", backup_dir, name);
    return backup_path;
}

/* ---- files ----------------------------------------------------------------------- */

/* Flush DIR/name (a file or a directory); what: the failure's words
 * (NULL: name). */
static int fsync_at(int dfd, const char *name, const char *what)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return bl_sys_error(what != NULL ? what : name);
    int rc = bl_plat_flush_file(fd) == 0 ? 0 : bl_sys_error(what != NULL ? what : name);
    close(fd);
    return rc;
}

/* Remove the staging directory (or whatever took its name: a link is
 * removed, never followed).  Its files are flat. */
static int remove_staging(int dfd)
{
    struct stat st;
    if (fstatat(dfd, STAGING, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : bl_sys_error(STAGING);
    if (!S_ISDIR(st.st_mode))
        return unlinkat(dfd, STAGING, 0) == 0 ? 0 : bl_sys_error("removing " STAGING);
    int sfd = openat(dfd, STAGING, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0)
        return bl_sys_error(STAGING);
    DIR *d = fdopendir(sfd);
    if (d == NULL) {
        close(sfd);
        return bl_sys_error(STAGING);
    }
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
            unlinkat(dirfd(d), de->d_name, 0) != 0 && errno != ENOENT && rc == 0)
            rc = bl_sys_error("removing the files in " STAGING);
    closedir(d);
    if (rc == 0 && unlinkat(dfd, STAGING, AT_REMOVEDIR) != 0 && errno != ENOENT)
        rc = bl_sys_error("removing " STAGING);
    return rc;
}

/* Remove DIR/name if it is there (a link is removed, never followed). */
static int remove_stray(int dfd, const char *name)
{
    char what[64];
    if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT) {
        snprintf(what, sizeof what, "removing %s", name);
        return bl_sys_error(what);
    }
    return 0;
}

/* Copy data.mdb to BACKUP/data.mdb.tmp, fsync, rename: for file systems
 * without hard links. */
static int copy_backup(int dfd, int bfd)
{
    char buf[1 << 16];
    int rc = 0, in = openat(dfd, "data.mdb", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0)
        return bl_sys_error("data.mdb");
    int out = openat(bfd, "data.mdb.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                     0600);
    if (out < 0) {
        close(in);
        return bl_sys_error(backup_of("data.mdb.tmp"));
    }
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = bl_sys_error("reading data.mdb");
            break;
        }
        if (n == 0)
            break;
        for (ssize_t done = 0; done < n;) {
            ssize_t w = write(out, buf + done, (size_t)(n - done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = bl_sys_error(backup_of("data.mdb.tmp (writing)"));
                break;
            }
            done += w;
        }
        if (rc != 0)
            break;
    }
    if (rc == 0 && bl_plat_flush_file(out) != 0)
        rc = bl_sys_error(backup_of("data.mdb.tmp"));
    close(in);
    if (close(out) != 0 && rc == 0)
        rc = bl_sys_error(backup_of("data.mdb.tmp"));
    if (rc == 0 && renameat(bfd, "data.mdb.tmp", bfd, "data.mdb") != 0)
        rc = bl_sys_error(backup_of("data.mdb"));
    if (rc != 0)
        unlinkat(bfd, "data.mdb.tmp", 0);
    return rc;
}

/* 1 if DIR/a and DIR/b are the same file, 0 if not or either is missing. */
static int same_inode(int dfd, const char *a, const char *b)
{
    struct stat x, y;
    return fstatat(dfd, a, &x, AT_SYMLINK_NOFOLLOW) == 0 &&
           fstatat(dfd, b, &y, AT_SYMLINK_NOFOLLOW) == 0 && x.st_dev == y.st_dev &&
           x.st_ino == y.st_ino;
}

/* Format 2 and later have a log of their own, which the `wal` step
 * replaces with the new store's: BACKUP/bindlog.wal keeps a link to the
 * old one (made with the data.mdb link), so that the old store stays whole
 * until the switch. */
static int backup_wal(int dfd)
{
    if (same_inode(dfd, BL_WAL_FILE, backup_of(BL_WAL_FILE)))
        return 0;
    unlinkat(dfd, backup_of(BL_WAL_FILE), 0); /* not this store's log: a stale one */
    char what[80];
    if (linkat(dfd, BL_WAL_FILE, dfd, backup_of(BL_WAL_FILE), 0) != 0) {
        snprintf(what, sizeof what, "linking the old %s into %s", BL_WAL_FILE, BACKUP);
        return bl_sys_error(what);
    }
    /* the link's name lasts with the backup's directory */
    snprintf(what, sizeof what, "flushing %s after linking the old %s into it", BACKUP,
             BL_WAL_FILE);
    return fsync_at(dfd, BACKUP, what);
}

/* Before the switch (the backup's data.mdb is still DIR's), an attempt
 * that died or failed after the `wal` step left the new store's log beside
 * the old data.mdb, which refuses it as another log's: put the old one
 * back from the backup's link. */
static int restore_wal(int dfd)
{
    if (!same_inode(dfd, "data.mdb", backup_of("data.mdb")) ||
        faccessat(dfd, backup_of(BL_WAL_FILE), F_OK, AT_SYMLINK_NOFOLLOW) != 0 ||
        same_inode(dfd, BL_WAL_FILE, backup_of(BL_WAL_FILE)))
        return 0;
    unlinkat(dfd, BL_WAL_FILE ".restore", 0);
    if (linkat(dfd, backup_of(BL_WAL_FILE), dfd, BL_WAL_FILE ".restore", 0) != 0 ||
        renameat(dfd, BL_WAL_FILE ".restore", dfd, BL_WAL_FILE) != 0)
        return bl_sys_error(BL_WAL_FILE " (putting the old log back)");
    return bl_plat_flush_file(dfd) == 0
               ? 0
               : bl_sys_error("flushing the directory after putting the old log back");
}

/* DIR/format1-backup/data.mdb: the old data.mdb, kept until the user
 * deletes it.  One left by an earlier upgrade of another store is never
 * overwritten. */
static int make_backup(int dfd)
{
    struct stat st, cur;
    int rc;

    if (mkdirat(dfd, BACKUP, 0700) != 0 && errno != EEXIST) {
        char what[48];
        snprintf(what, sizeof what, "making %s", BACKUP);
        return bl_sys_error(what);
    }
    if (fstatat(dfd, BACKUP, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return bl_sys_error(BACKUP);
    if (!S_ISDIR(st.st_mode))
        return bl_err_set(BINDLOG_EEXIST, "%s is there and is not a directory (%s): move it "
                                          "away first",
                          BACKUP, S_ISLNK(st.st_mode) ? "a symbolic link" : "a file");
    int bfd = openat(dfd, BACKUP, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (bfd < 0)
        return bl_sys_error(BACKUP);
    if (fstatat(dfd, "data.mdb", &cur, AT_SYMLINK_NOFOLLOW) != 0) {
        rc = bl_sys_error("data.mdb");
        goto out;
    }
    if (fstatat(bfd, "data.mdb", &st, AT_SYMLINK_NOFOLLOW) == 0) {
        /* an interrupted upgrade of this store left its link: keep it */
        if (st.st_dev == cur.st_dev && st.st_ino == cur.st_ino) {
            rc = 0;
            goto out;
        }
        rc = bl_err_set(BINDLOG_EEXIST, "%s/data.mdb is there already (from an earlier "
                                        "upgrade?) and is not this store's data.mdb: move it "
                                        "away first",
                        BACKUP);
        goto out;
    }
    if (errno != ENOENT) {
        rc = bl_sys_error(backup_of("data.mdb"));
        goto out;
    }
    unlinkat(bfd, "data.mdb.tmp", 0); /* a copy a crash cut short */
    /* failpoint upgrade.nolink (eio): a file system without hard links */
    /* cppcheck-suppress knownConditionTrueFalse ; BL_FAILPOINT() is 0 without failpoints */
    if ((BL_FAILPOINT("upgrade.nolink") != 0 && (errno = EPERM, 1)) ||
        linkat(dfd, "data.mdb", bfd, "data.mdb", 0) != 0) {
        char what[64];
        snprintf(what, sizeof what, "linking the old data.mdb into %s", BACKUP);
        rc = errno == EPERM || errno == ENOTSUP || errno == EMLINK ? copy_backup(dfd, bfd)
                                                                   : bl_sys_error(what);
    } else {
        rc = 0;
    }
    if (rc == 0 && bl_plat_flush_file(bfd) != 0) {
        char what[48];
        snprintf(what, sizeof what, "flushing %s", BACKUP);
        rc = bl_sys_error(what);
    }
    if (rc == 0 && bl_plat_flush_file(dfd) != 0)
        rc = bl_sys_error("flushing the directory after the backup");
out:
    close(bfd);
    return rc;
}

/* ---- the lock ---------------------------------------------------------------------- */

/* 1 if another process holds LMDB's liveness lock on lock.mdb (fd): it has
 * the environment open, even only to read; 0 if not; <0 on an error. */
static int held_elsewhere(int fd)
{
    struct flock fl;
    if (fd < 0)
        return 0; /* no lock.mdb: nobody has it open */
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 1;
    if (fcntl(fd, F_GETLK, &fl) != 0)
        return bl_sys_error("lock.mdb");
    return fl.l_type != F_UNLCK;
}

typedef struct locks {
    int lock_fd, probe_fd;
} locks;

static int take_locks(int dfd, locks *l)
{
    l->lock_fd = openat(dfd, "bindlog.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (l->lock_fd < 0)
        return errno == ELOOP ? bl_err_set(BINDLOG_ENOTSTORE, "bindlog.lock is a symbolic link")
                              : bl_sys_error("bindlog.lock");
    if (flock(l->lock_fd, LOCK_EX | LOCK_NB) != 0)
        return errno == EWOULDBLOCK
                   ? bl_err_set(BINDLOG_EBUSY, "a process has the store open for writing "
                                               "(bindlog.lock is held): stop it first")
                   : bl_sys_error("bindlog.lock");
    l->probe_fd = openat(dfd, "lock.mdb", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (l->probe_fd < 0 && errno != ENOENT)
        return errno == ELOOP ? bl_err_set(BINDLOG_ENOTSTORE, "lock.mdb is a symbolic link")
                              : bl_sys_error("lock.mdb");
    int rc = held_elsewhere(l->probe_fd);
    if (rc > 0)
        return bl_err_set(BINDLOG_EBUSY, "a process has the store open, if only to read "
                                         "(lock.mdb is locked): stop it first");
    return rc;
}

static void drop_locks(locks *l)
{
    if (l->probe_fd >= 0)
        close(l->probe_fd);
    if (l->lock_fd >= 0)
        close(l->lock_fd);
    l->probe_fd = l->lock_fd = -1;
}

/* ---- building the new store ----------------------------------------------------------- */

/* The stream's file: unlinked from the start where the file system can. */
static int stream_file(int sfd)
{
    int fd = bl_plat_tmpfile_at(sfd, "stream");
    return fd >= 0 ? fd : bl_sys_error("the staging stream file");
}

static int differs(const char *what, unsigned long long old, unsigned long long now)
{
    return bl_err_set(BINDLOG_ECORRUPT, "the new store's %s is %llu where the old store's is "
                                        "%llu; nothing was changed",
                      what, now, old);
}

/*
 * A public call made by the upgrade failed: its message becomes this
 * step's detail (the upgrade's own BL_API_DONE keeps only what bl_err_set
 * set).  A handle LMDB gave up on after a failed write (BINDLOG_EPANIC) is
 * one the caller never had: to the caller that is an I/O error.
 */
static int failed(int rc, const char *step)
{
    return bl_err_nested(rc == BINDLOG_EPANIC ? BINDLOG_EIO : rc, "%s", step);
}

/* Build and verify the new store in DIR/STAGING; on return it is closed
 * and its files are synced. */
static int build(const char *dir, int dfd, const bindlog_options *opts, bl_f1_info *info,
                 bindlog_progress_fn progress, void *pctx)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    char path[4200];
    int sfd = -1, fd = -1, rc;

    if (opts != NULL) {
        o.map_size = opts->map_size;
        o.max_readers = opts->max_readers;
        if (opts->version >= 3)
            o.log_size = opts->log_size;
        if (opts->version >= 4)
            o.lock_timeout_ms = opts->lock_timeout_ms;
    }
    if (snprintf(path, sizeof path, "%s/" STAGING, dir) >= (int)sizeof path)
        return bl_err_set(BINDLOG_EINVAL, "the directory's path is too long");
    if (mkdirat(dfd, STAGING, 0700) != 0)
        return bl_sys_error("making " STAGING);
    if ((sfd = openat(dfd, STAGING, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return bl_sys_error(STAGING);
    if ((fd = stream_file(sfd)) < 0) {
        rc = fd;
        goto out;
    }
    if ((rc = bl_f1_export(dir, fd, info)) != 0)
        goto out;
    if (lseek(fd, 0, SEEK_SET) != 0) {
        rc = bl_sys_error("the staging stream file");
        goto out;
    }
    if ((rc = bindlog_open(&s, path, &o)) != 0) {
        rc = failed(rc, "the new store could not be made in " STAGING);
        goto out;
    }
    uint64_t imported = 0, err_offset = 0;
    rc = bindlog_import(s, fd, &imported, &err_offset, progress, pctx);
    if (rc == BINDLOG_ENOSPC || rc == BINDLOG_ENOMEM || rc == BINDLOG_EIO || rc == BINDLOG_EPANIC) {
        rc = failed(rc, "the new store could not be written in " STAGING);
        goto out;
    }
    if (rc != 0) {
        char why[BL_ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", bindlog_last_error());
        rc = bl_err_set(BINDLOG_ECORRUPT,
                        "the format-%u store's log does not re-derive into a new store (%s); "
                        "nothing was changed: `bindlog recover DIR --out NEWDIR` rebuilds what "
                        "is intact",
                        (unsigned)info->format, why);
        goto out;
    }

    /* the new store: clean, the same state, the same history */
    bindlog_check_report chk;
    bindlog_stats st;
    if ((rc = bindlog_checkpoint(s, NULL)) != 0 || (rc = bindlog_check(s, &chk, NULL, NULL)) != 0 ||
        (rc = bindlog_stats_get(s, &st)) != 0) {
        rc = failed(rc, "the new store could not be checkpointed and checked in " STAGING);
        goto out;
    }
    if (chk.problems != 0) {
        rc = bl_err_set(BINDLOG_ECORRUPT, "the new store does not check clean (%s); nothing was "
                                          "changed",
                        chk.message);
        goto out;
    }
    if (memcmp(chk.state_digest, info->digest, BINDLOG_DIGEST_SIZE) != 0 ||
        memcmp(chk.replay_digest, info->digest, BINDLOG_DIGEST_SIZE) != 0) {
        rc = bl_err_set(BINDLOG_ECORRUPT, "the new store's state digest differs from the old "
                                          "store's; nothing was changed");
        goto out;
    }
    if (st.head_lsn != info->head_lsn) {
        rc = differs("head LSN", info->head_lsn, st.head_lsn);
        goto out;
    }
    if (st.base_lsn != info->base_lsn) {
        rc = differs("base image LSN", info->base_lsn, st.base_lsn);
        goto out;
    }
    for (int t = 1; t <= BINDLOG_EVENT_UNBIND; t++)
        if (st.applied[t] != bl_get64(info->counts + 8 * t)) {
            char what[64];
            snprintf(what, sizeof what, "count of applied %s events", bindlog_event_name(t));
            rc = differs(what, bl_get64(info->counts + 8 * t), st.applied[t]);
            goto out;
        }
    /* routes (format 3 with routing): the export stream's image carries no
     * ROUTE count, so the new store counts the retained records' */
    if (st.applied[BINDLOG_EVENT_ROUTE] != info->routes - info->base_routes) {
        rc = differs("count of applied route events", info->routes - info->base_routes,
                     st.applied[BINDLOG_EVENT_ROUTE]);
        goto out;
    }
    bindlog_close(s); /* the last handle: checkpoints and closes the log */
    s = NULL;
    if ((rc = fsync_at(sfd, "data.mdb", NULL)) != 0 || (rc = fsync_at(sfd, BL_WAL_FILE, NULL)) != 0)
        goto out;
    if (bl_plat_flush_file(sfd) != 0)
        rc = bl_sys_error("flushing " STAGING);
out:
    bindlog_close(s);
    if (fd >= 0)
        close(fd);
    if (sfd >= 0)
        close(sfd);
    /* a write of the new store failed and LMDB gave up on it: to the
     * caller, who never had that handle, an I/O error like any other */
    return rc == BINDLOG_EPANIC ? BINDLOG_EIO : rc;
}

/* A failed attempt (before the switch) leaves nothing: the staging
 * directory, the new log beside the old data.mdb and the backup's link to
 * it (only if it is that: a link to the data.mdb still in place). */
static void undo(int dfd)
{
    struct stat a, b;
    remove_staging(dfd);
    if (strcmp(backup_dir, "format1-backup") == 0)
        remove_stray(dfd, BL_WAL_FILE); /* beside format 1 it is ours; format 2's is its own */
    else if (restore_wal(dfd) == 0)
        unlinkat(dfd, backup_of(BL_WAL_FILE), 0);
    if (fstatat(dfd, BACKUP, &a, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(a.st_mode) &&
        fstatat(dfd, "data.mdb", &a, AT_SYMLINK_NOFOLLOW) == 0 &&
        fstatat(dfd, backup_of("data.mdb"), &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
        unlinkat(dfd, backup_of("data.mdb"), 0);
        unlinkat(dfd, BACKUP, AT_REMOVEDIR); /* only if empty */
    }
    (void)bl_plat_flush_file(dfd);
}

/* Format 2 keeps its latest records in bindlog.wal until a checkpoint
 * folds them into data.mdb, and the reader of upgrade_f1.c reads data.mdb
 * only: open the store as a writer, checkpoint and close it.  The
 * checkpoint is asked for, not left to the close: a close waits only a
 * moment for the whole-store page walk a checkpoint needs, and leaves the
 * log unfolded when the walk takes longer (a store of a few hundred MB),
 * which drained() would then take for a writer that came in.  Before the
 * locks: a writer holds bindlog.lock shared, which our own exclusive lock
 * would refuse. */
static int drain_format2(const char *dir)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    bl_open_format2 = 1;
    int rc = bindlog_open(&s, dir, &o);
    bl_open_format2 = 0;
    if (rc != 0)
        return failed(rc, "the store could not be opened to move bindlog.wal into data.mdb");
    rc = bindlog_checkpoint(s, NULL);
    if (rc != 0) /* a damaged store (the walk's or the fold's message), a failing disk */
        rc = failed(rc, "the checkpoint that moves bindlog.wal into data.mdb failed");
    bindlog_close(s);
    return rc;
}

/* Under the locks: 0 if data.mdb's head is the store's head (nothing is
 * left in bindlog.wal only), BINDLOG_EBUSY if a writer came in between the
 * drain and the locks.  A format-5 or 6 store's state digest is taken here, by
 * the library, which reads its references whole (the format-1 reader
 * reads tables as they are stored), with its table sizes. */
static int drained(const char *dir, bl_f1_info *info)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_stats st;
    bindlog *s = NULL;
    uint64_t mdb_head = info->head_lsn, at = 0;
    o.read_only = 1;
    bl_open_format2 = 1;
    int rc = bindlog_open(&s, dir, &o);
    bl_open_format2 = 0;
    if (rc != 0)
        return failed(rc, "the drained store could not be opened");
    rc = bindlog_stats_get(s, &st);
    if (rc == 0 && info->format >= 5 && (rc = bindlog_digest(s, info->digest, &at)) == 0) {
        info->digest_given = 1;
        info->bindings = st.bindings;
        info->sessions = st.sessions;
    }
    if (rc != 0)
        rc = failed(rc, "the drained store could not be read");
    bindlog_close(s);
    if (rc == 0 && (st.head_lsn != mdb_head || (info->digest_given && at != mdb_head)))
        rc = bl_err_set(BINDLOG_EBUSY, "a process wrote to the store during the upgrade (its "
                                       "head is LSN %llu, data.mdb's %llu); nothing was "
                                       "changed: run it again",
                        (unsigned long long)st.head_lsn, (unsigned long long)mdb_head);
    return rc;
}

/* 1 if the library opens dir as a store of the current format. */
static int is_current(const char *dir)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_stats st;
    bindlog *s;
    o.read_only = 1;
    if (bindlog_open(&s, dir, &o) != 0)
        return 0;
    int current = bindlog_stats_get(s, &st) == 0 && st.format_version == BINDLOG_FORMAT_VERSION;
    bindlog_close(s);
    return current;
}

/* ---- the steps ----------------------------------------------------------------------- */

static int fail_at(const char *name)
{
    int rc = BL_FAILPOINT(name);
    /* cppcheck-suppress knownConditionTrueFalse ; BL_FAILPOINT() is 0 without failpoints */
    return rc != 0 ? bl_err_set(rc, "failpoint %s", name) : 0;
}

static int upgrade(const char *dir, const bindlog_options *opts, bindlog_upgrade_report *rep,
                   bindlog_progress_fn progress, void *pctx)
{
    locks l = {-1, -1};
    bl_f1_info info;
    int dfd, rc, locked = 0, started = 0;

    if (opts != NULL && opts->read_only)
        return bl_err_set(BINDLOG_EINVAL, "an upgrade writes: read_only must be 0");
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        int err = errno;
        if (err == ENOENT)
            return bl_err_set(BINDLOG_ENOTFOUND, "no such directory");
        if (err == ENOTDIR)
            return bl_err_set(BINDLOG_ENOTSTORE, "is not a directory");
        return bl_sys_error("the directory");
    }

    /* which format?  Only format 1 has anything to do */
    rc = bl_f1_probe(dir, &info);
    if (rc == BINDLOG_ECORRUPT) {
        /* The probe reads data.mdb holding no lock, and a live store's
         * writer may reuse the pages it reads: ask the library (a current
         * store opens), else look again with nobody else in. */
        char why[BL_ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", bl_err_get());
        if (is_current(dir)) {
            info.format = BINDLOG_FORMAT_VERSION;
            rc = 0;
        } else if ((rc = take_locks(dfd, &l)) == 0) {
            locked = 1;
            rc = bl_f1_probe(dir, &info);
        } else if (rc != BINDLOG_EBUSY) {
            rc = bl_err_set(BINDLOG_ECORRUPT, "%s", why);
        }
    }
    if (rc != 0)
        goto out;
    rep->from_format = info.format;
    if (info.format == BINDLOG_FORMAT_VERSION) {
        /* already current: nothing changes, but the staging directory an
         * upgrade killed right after its switch left behind */
        rc = remove_staging(dfd);
        goto out;
    }
    if (info.format > BINDLOG_FORMAT_VERSION) {
        rc = bl_err_set(BINDLOG_EVERSION, "the store is format %u, newer than this library's "
                                          "%d: nothing to upgrade",
                        (unsigned)info.format, BINDLOG_FORMAT_VERSION);
        goto out;
    }
    if (info.format < 1 || info.format > 6) {
        rc = bl_err_set(BINDLOG_ECORRUPT, "the store says format %u, which never existed",
                        (unsigned)info.format);
        goto out;
    }
    snprintf(backup_dir, sizeof backup_dir, "format%u-backup", (unsigned)info.format);
    if (info.format >= 2) {
        /* an attempt that died after its `wal` step: the old log back
         * first, or the drain's open refuses the new one */
        if (!locked && (rc = take_locks(dfd, &l)) != 0)
            goto out;
        if ((rc = restore_wal(dfd)) != 0)
            goto out;
        drop_locks(&l); /* the drain needs the locks free */
        locked = 0;
        if ((rc = drain_format2(dir)) != 0)
            goto out;
    }

    /* nobody else in, then look again under the lock (another upgrade may
     * have finished since) */
    if (!locked && (rc = take_locks(dfd, &l)) != 0)
        goto out;
    if ((rc = bl_f1_probe(dir, &info)) != 0)
        goto out;
    if (info.format != (unsigned)rep->from_format) {
        rep->from_format = info.format;
        rc = info.format == BINDLOG_FORMAT_VERSION
                 ? 0
                 : bl_err_set(BINDLOG_EVERSION, "the store changed to format %u meanwhile",
                              (unsigned)info.format);
        goto out;
    }
    /* from here on, a failure undoes what this attempt made: only now,
     * since only beside a format-1 data.mdb is a bindlog.wal not the
     * store's own */
    started = 1;
    if (info.format >= 2) {
        if ((rc = drained(dir, &info)) != 0 || (rc = remove_staging(dfd)) != 0)
            goto out;
    } else if ((rc = remove_staging(dfd)) != 0 || (rc = remove_stray(dfd, BL_WAL_FILE)) != 0 ||
               (rc = remove_stray(dfd, BL_SHM_FILE)) != 0) {
        goto out;
    }
    if ((rc = build(dir, dfd, opts, &info, progress, pctx)) != 0 ||
        (rc = fail_at("upgrade.built")) != 0)
        goto out;
    if ((rc = make_backup(dfd)) != 0 || (info.format >= 2 && (rc = backup_wal(dfd)) != 0) ||
        (rc = fail_at("upgrade.backup")) != 0)
        goto out;
    /* a reader that opened meanwhile keeps the old store */
    if ((rc = held_elsewhere(l.probe_fd)) != 0) {
        rc = rc > 0 ? bl_err_set(BINDLOG_EBUSY, "a process opened the store during the upgrade; "
                                                "nothing was changed")
                    : rc;
        goto out;
    }
    /* format 2's shared memory describes its own log (drained: nothing in
     * it is needed); the new store makes its own */
    if (info.format >= 2 && (rc = remove_stray(dfd, BL_SHM_FILE)) != 0)
        goto out;
    if (renameat(dfd, STAGING "/" BL_WAL_FILE, dfd, BL_WAL_FILE) != 0) {
        rc = bl_sys_error("moving the new " BL_WAL_FILE " into the directory");
        goto out;
    }
    if (bl_plat_flush_file(dfd) != 0) {
        rc = bl_sys_error("flushing the directory after moving the new " BL_WAL_FILE " in");
        goto out;
    }
    if ((rc = fail_at("upgrade.wal")) != 0)
        goto out;
    rep->head_lsn = info.head_lsn;
    rep->base_lsn = info.base_lsn;
    rep->records = info.records;
    rep->bindings = info.bindings;
    rep->sessions = info.sessions;
    memcpy(rep->digest, info.digest, BINDLOG_DIGEST_SIZE);
    /* the commit point */
    if (renameat(dfd, STAGING "/data.mdb", dfd, "data.mdb") != 0) {
        rc = bl_sys_error("renaming the new data.mdb over the old one");
        goto out;
    }
    rep->upgraded = 1;
    if (bl_plat_flush_file(dfd) != 0) {
        rc = bl_sys_error("flushing the directory after the new data.mdb went in (the store "
                          "is upgraded)");
        goto out;
    }
    (void)BL_FAILPOINT("upgrade.switch"); /* kill only: the store is upgraded */
    /* what is left is tidying: a failure here leaves the new store */
    if (remove_staging(dfd) == 0)
        (void)bl_plat_flush_file(dfd);
    else
        rep->staging_left = 1;
    (void)BL_FAILPOINT("upgrade.clean");
    rc = 0;
out:
    if (rc != 0 && !rep->upgraded && started)
        undo(dfd); /* nothing of a failed attempt stays */
    drop_locks(&l);
    close(dfd);
    return rc;
}

int bindlog_upgrade(const char *dir, const bindlog_options *opts, bindlog_upgrade_report *rep,
                    bindlog_progress_fn progress, void *progress_ctx)
{
    char q[BL_ERR_QUOTE_MAX];
    int rc;

    bl_err_clear();
    if (rep != NULL)
        memset(rep, 0, sizeof *rep);
    if (dir == NULL || dir[0] == '\0' || rep == NULL ||
        (opts != NULL && (opts->version < 1 || opts->version > BINDLOG_OPTIONS_VERSION)))
        rc = BINDLOG_EINVAL;
    else if (strstr(dir, "://") != NULL)
        rc = bl_err_set(BINDLOG_EINVAL, "not a store directory: an etcd store has no on-disk "
                                        "format to upgrade");
    else
        rc = upgrade(dir, opts, rep, progress, progress_ctx);
    return BL_API_DONE(rc, "upgrade %s",
                       dir ? bl_err_bytes(q, sizeof q, dir, strnlen(dir, 4096)) : "(null)");
}
