/*
 * backend_lmdb.c -- the LMDB backend's table of operations.
 *
 * The operations themselves live where their LMDB work is: store.c (the
 * environment), commit.c (the write path), iter.c (reads), digest.c,
 * replay.c, compact.c and stream.c.  This file only opens and closes a
 * handle on the shared environment and lists the functions.
 */
#include "lmdb/store.h"

static int lmdb_open(bindlog *h, const bindlog_options *o)
{
    return bl_env_acquire(h->path, o, &h->e);
}

static void lmdb_close(bindlog *h)
{
    if (!h->read_only)
        bl_env_release_writer(h->e);
    bl_env_release(h->e);
    h->e = NULL;
}

const bl_backend_ops bl_lmdb_ops = {
    .name = "lmdb",
    .scheme = NULL,
    .open = lmdb_open,
    .close = lmdb_close,
    .commit = bl_commit,
    .commit_each = bl_commit_each,
    .get = bl_lmdb_get,
    .session_get = bl_lmdb_session_get,
    .iter = bl_lmdb_iter,
    .stats = bl_lmdb_stats,
    .digest = bl_lmdb_digest,
    .check = bl_lmdb_check,
    .replay = bl_lmdb_replay,
    .lsn_at_time = bl_lmdb_lsn_at_time,
    .wait = bl_lmdb_wait,
    .checkpoint = bl_lmdb_checkpoint,
    .compact = bl_lmdb_compact,
    .export_stream = bl_lmdb_export,
    .import_stream = bl_lmdb_import,
};
