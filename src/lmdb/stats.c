/*
 * stats.c -- the state digest of LMDB tables, and the statistics.
 *
 * The digest's encoding lives in core/digest.c; this file feeds it the
 * bindings and sessions tables in key order, from one snapshot (LMDB plus
 * the log's tail, snap.c).  Statistics read one snapshot too: the
 * store-wide counters are meta records the log's frames carry and the
 * checkpoint folds, so every handle of every process reads the same.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lmdb/pagecheck.h"
#include "lmdb/store.h"
#include "lmdb/walenv.h"

/* Entries hashed between releases of the map lock, so growth is not held
 * up for the whole scan of a large store. */
#define DIGEST_CHUNK 4096

/* Hash a table.  A session kept as a reference (formats 5 to 7) is hashed as
 * the whole value it stands for, resolved through get. */
static int hash_cursor(bl_cursor *c, bl_env *e, int tag, int keep_lock, bl_digest *st,
                       bl_ref_fn get, void *ctx)
{
    MDB_val k, v;
    int rc;
    unsigned long n = 0;

    while ((rc = bl_cursor_next(c, &k, &v)) > 0) {
        if (tag == 'S' && v.mv_size != 0 && ((const unsigned char *)v.mv_data)[0] == 3) {
            bl_sval sv;
            if (k.mv_size == 0 || k.mv_size > BINDLOG_ID_MAX)
                rc = bl_digest_add(st, tag, k.mv_data, k.mv_size, v.mv_data, v.mv_size);
            else if ((rc = bl_sval_read(v.mv_data, v.mv_size, k.mv_data, k.mv_size, get, ctx,
                                        &sv)) == 0)
                rc = bl_digest_add_sval(st, k.mv_data, k.mv_size, &sv);
        } else {
            rc = bl_digest_add(st, tag, k.mv_data, k.mv_size, v.mv_data, v.mv_size);
        }
        if (rc != 0)
            break;
        if (!keep_lock && ++n % DIGEST_CHUNK == 0) {
            bl_map_unlock(e);
            bl_map_rdlock(e);
        }
    }
    bl_cursor_close(c);
    return rc;
}

static int hash_table(bl_env *e, MDB_txn *txn, MDB_dbi dbi, int tag, int keep_lock,
                      bl_digest *st, bl_ref_fn get, void *ctx)
{
    bl_cursor c;
    int rc;

    if ((rc = bl_cursor_open(&c, e, txn, dbi, NULL, 0)) != 0)
        return rc;
    return hash_cursor(&c, e, tag, keep_lock, st, get, ctx);
}

int bl_digest_tables(bl_env *e, MDB_txn *txn, MDB_dbi bindings, MDB_dbi sessions,
                     int keep_lock, bl_ref_fn get, void *ctx,
                     unsigned char out[BINDLOG_DIGEST_SIZE])
{
    bl_digest *st = bl_digest_new();
    int rc;

    if (st == NULL)
        return BINDLOG_ENOMEM;
    rc = hash_table(e, txn, bindings, 'B', keep_lock, st, NULL, NULL);
    if (rc == 0)
        rc = hash_table(e, txn, sessions, 'S', keep_lock, st, get, ctx);
    if (rc == 0)
        bl_digest_final(st, out);
    bl_digest_free(st);
    return rc;
}

int bl_digest_snap(bl_snap *s, int keep_lock, unsigned char out[BINDLOG_DIGEST_SIZE])
{
    bl_digest *st = bl_digest_new();
    bl_cursor c;
    int rc;

    if (st == NULL)
        return BINDLOG_ENOMEM;
    rc = bl_cursor_open_snap(&c, s, BL_DB_BINDINGS, NULL, 0);
    if (rc == 0)
        rc = hash_cursor(&c, s->e, 'B', keep_lock, st, NULL, NULL);
    if (rc == 0 && (rc = bl_cursor_open_snap(&c, s, BL_DB_SESSIONS, NULL, 0)) == 0)
        rc = hash_cursor(&c, s->e, 'S', keep_lock, st, bl_snap_ref, s);
    if (rc == 0)
        bl_digest_final(st, out);
    bl_digest_free(st);
    return rc;
}

int bl_lmdb_digest(bindlog *s, unsigned char out[BINDLOG_DIGEST_SIZE], uint64_t *head_lsn)
{
    bl_snap snap;
    bl_head head;
    int rc;

    if (s == NULL || out == NULL)
        return BINDLOG_EINVAL;
    if ((rc = bl_snap_open(s->e, &snap, 0)) != 0)
        return rc;
    rc = bl_pc_guard_tables(s->e, snap.txn, BL_PC_BIT(BL_DB_BINDINGS) | BL_PC_BIT(BL_DB_SESSIONS));
    if (rc == 0)
        rc = bl_snap_head(&snap, &head);
    if (rc == 0)
        rc = bl_digest_snap(&snap, 0, out);
    if (rc == 0 && head_lsn != NULL)
        *head_lsn = head.lsn;
    bl_snap_close(&snap);
    return rc;
}

static uint64_t file_size(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    struct stat st;
    uint64_t size = 0;
    if (p != NULL) {
        snprintf(p, n, "%s/%s", dir, name);
        if (stat(p, &st) == 0)
            size = (uint64_t)st.st_size;
        free(p);
    }
    return size;
}

int bl_lmdb_stats(bindlog *s, bindlog_stats *out)
{
    bl_env *e;
    bl_snap snap;
    MDB_envinfo info;
    MDB_stat est;
    bl_head head;
    bl_counts counts;
    bl_gstats gst;
    MDB_val v;
    int rc;

    if (s == NULL || out == NULL)
        return BINDLOG_EINVAL;
    e = s->e;
    memset(out, 0, sizeof(*out));
    if ((rc = bl_snap_open(e, &snap, 0)) != 0)
        return rc;
    if ((rc = bl_snap_head(&snap, &head)) == 0 && (rc = bl_snap_counts(&snap, &counts)) == 0 &&
        (rc = bl_snap_gstats(&snap, &gst)) == 0 &&
        (rc = bl_meta_get_u64(e, snap.txn, "base", &out->base_lsn)) == 0) {
        out->head_lsn = head.lsn;
        out->checkpoint_lsn = snap.lmdb_head;
        out->log_records = bl_snap_entries(&snap, BL_DB_LOG);
        out->bindings = bl_snap_entries(&snap, BL_DB_BINDINGS);
        out->sessions = bl_snap_entries(&snap, BL_DB_SESSIONS);
        out->live_bindings = counts.live_bindings;
        out->live_sessions = counts.live_sessions;
        memcpy(out->applied, counts.applied, sizeof(out->applied));
        if (bl_snap_get(&snap, BL_DB_META, "format", 6, &v) == 0 && v.mv_size == 4)
            out->format_version = bl_get32(v.mv_data);
        mdb_env_info(e->env, &info);
        mdb_env_stat(e->env, &est);
        out->map_size = info.me_mapsize;
        out->map_used = (uint64_t)(info.me_last_pgno + 1) * est.ms_psize;
        out->readers_used = info.me_numreaders;
        out->readers_max = info.me_maxreaders;
    }
    bl_snap_close(&snap);
    if (rc != 0)
        return rc;

    bl_group_stats(&e->g, out);
    /* the commit counts are the store's, not this process's */
    out->commits = gst.commits;
    out->grouped_events = gst.grouped_events;
    out->durability = s->durability;
    out->file_size = file_size(e->path, "data.mdb");
    out->log_size = file_size(e->path, BL_WAL_FILE);
    out->log_used = bl_wal_used(e);
    return 0;
}
