/*
 * stats.c -- the state digest of LMDB tables, and the statistics.
 *
 * The digest's encoding lives in core/digest.c; this file feeds it the
 * bindings and sessions tables in key order, from one read snapshot.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lmdb/pagecheck.h"
#include "lmdb/store.h"

/* Entries hashed between releases of the map lock, so growth is not held
 * up for the whole scan of a large store. */
#define DIGEST_CHUNK 4096

static int hash_table(bl_env *e, MDB_txn *txn, MDB_dbi dbi, int tag, int keep_lock,
                      bl_digest *st)
{
    bl_cursor c;
    MDB_val k, v;
    int rc;
    unsigned long n = 0;

    if ((rc = bl_cursor_open(&c, e, txn, dbi, NULL, 0)) != 0)
        return rc;
    while ((rc = bl_cursor_next(&c, &k, &v)) > 0) {
        if ((rc = bl_digest_add(st, tag, k.mv_data, k.mv_size, v.mv_data, v.mv_size)) != 0)
            break;
        if (!keep_lock && ++n % DIGEST_CHUNK == 0) {
            bl_map_unlock(e);
            bl_map_rdlock(e);
        }
    }
    bl_cursor_close(&c);
    return rc;
}

int bl_digest_tables(bl_env *e, MDB_txn *txn, MDB_dbi bindings, MDB_dbi sessions,
                     int keep_lock, unsigned char out[BINDLOG_DIGEST_SIZE])
{
    bl_digest *st = bl_digest_new();
    int rc;

    if (st == NULL)
        return BINDLOG_ENOMEM;
    rc = hash_table(e, txn, bindings, 'B', keep_lock, st);
    if (rc == 0)
        rc = hash_table(e, txn, sessions, 'S', keep_lock, st);
    if (rc == 0)
        bl_digest_final(st, out);
    bl_digest_free(st);
    return rc;
}

int bl_lmdb_digest(bindlog *s, unsigned char out[BINDLOG_DIGEST_SIZE], uint64_t *head_lsn)
{
    MDB_txn *txn;
    bl_head head;
    int rc;

    if (s == NULL || out == NULL)
        return BINDLOG_EINVAL;
    if ((rc = bl_read_begin(s->e, &txn)) != 0)
        return rc;
    rc = bl_pc_guard_tables(s->e, txn, BL_PC_BIT(BL_DB_BINDINGS) | BL_PC_BIT(BL_DB_SESSIONS));
    if (rc == 0)
        rc = bl_meta_get_head(s->e, txn, &head);
    if (rc == 0)
        rc = bl_digest_tables(s->e, txn, s->e->dbi[BL_DB_BINDINGS], s->e->dbi[BL_DB_SESSIONS], 0,
                              out);
    if (rc == 0 && head_lsn != NULL)
        *head_lsn = head.lsn;
    bl_read_end(s->e, txn);
    return rc;
}

static uint64_t entries(MDB_txn *txn, MDB_dbi dbi)
{
    MDB_stat st;
    return mdb_stat(txn, dbi, &st) == 0 ? st.ms_entries : 0;
}

int bl_lmdb_stats(bindlog *s, bindlog_stats *out)
{
    bl_env *e;
    MDB_txn *txn;
    MDB_envinfo info;
    MDB_stat est;
    bl_head head;
    bl_counts counts;
    MDB_val k = {6, "format"}, v;
    int rc;

    if (s == NULL || out == NULL)
        return BINDLOG_EINVAL;
    e = s->e;
    memset(out, 0, sizeof(*out));
    if ((rc = bl_read_begin(e, &txn)) != 0)
        return rc;
    if ((rc = bl_meta_get_head(e, txn, &head)) == 0 &&
        (rc = bl_meta_get_counts(e, txn, &counts)) == 0 &&
        (rc = bl_meta_get_u64(e, txn, "base", &out->base_lsn)) == 0) {
        out->head_lsn = head.lsn;
        out->log_records = entries(txn, e->dbi[BL_DB_LOG]);
        out->bindings = entries(txn, e->dbi[BL_DB_BINDINGS]);
        out->sessions = entries(txn, e->dbi[BL_DB_SESSIONS]);
        out->live_bindings = counts.live_bindings;
        out->live_sessions = counts.live_sessions;
        memcpy(out->applied, counts.applied, sizeof(out->applied));
        if (mdb_get(txn, e->dbi[BL_DB_META], &k, &v) == 0 && v.mv_size == 4)
            out->format_version = bl_get32(v.mv_data);
        mdb_env_info(e->env, &info);
        mdb_env_stat(e->env, &est);
        out->map_size = info.me_mapsize;
        out->map_used = (uint64_t)(info.me_last_pgno + 1) * est.ms_psize;
        out->readers_used = info.me_numreaders;
        out->readers_max = info.me_maxreaders;
    }
    bl_read_end(e, txn);
    if (rc != 0)
        return rc;

    bl_group_stats(&e->g, out);
    out->durability = s->durability;

    size_t n = strlen(e->path) + sizeof("/data.mdb");
    char *p = malloc(n);
    struct stat st;
    if (p != NULL) {
        snprintf(p, n, "%s/data.mdb", e->path);
        if (stat(p, &st) == 0)
            out->file_size = (uint64_t)st.st_size;
        free(p);
    }
    return 0;
}

/* The head LSN of the newest snapshot. */
static int read_head(bindlog *s, uint64_t *lsn)
{
    MDB_txn *txn;
    bl_head head;
    int rc = bl_read_begin(s->e, &txn);
    if (rc != 0)
        return rc;
    rc = bl_meta_get_head(s->e, txn, &head);
    bl_read_end(s->e, txn);
    *lsn = head.lsn;
    return rc;
}

/* Another process's commit changes nothing this process could be woken
 * by, so the head is read every 5 ms: a change is seen within 5 ms, and
 * an idle waiter costs 200 cheap reads a second. */
int bl_lmdb_wait(bindlog *s, uint64_t after_lsn, int timeout_ms, uint64_t *head)
{
    return bl_wait_poll(s, after_lsn, timeout_ms, head, read_head, 5);
}
