/*
 * limits.c -- the length limits of every table's keys and values (limits.h).
 *
 * One table of limits, from the encodings of record.h:
 *
 *   table                 key bytes                 value bytes
 *   meta                  1..64                     0..1024
 *   log                   8 (a big-endian LSN)      0..BL_RECORD_MAX (66,311)
 *   bindings, base_*      1..BINDLOG_KEY_MAX        0..BL_BVAL_MAX (163)
 *   sessions, base_*      1..BINDLOG_ID_MAX         0..BL_SVAL_MAX (66,188)
 *   children              9..BL_LCHILD_KEY_MAX (136) 0
 *   history               1..BL_HISTORY_KEY_MAX     0
 *
 * Only the upper bounds matter for safety (a short value cannot run off the
 * map, and every decoder refuses one); they are checked here, at the seam
 * with LMDB, so that the message can name the table and the entry.
 */
#define _GNU_SOURCE
#include "lmdb/limits.h"

#include <stdio.h>

#include "core/error.h"
#include "core/record.h"

/* LMDB's default largest key (MDB_MAXKEYSIZE). */
#define BL_MDB_KEY_MAX 511

typedef struct table_limits {
    size_t key_min, key_max, val_max;
} table_limits;

static table_limits limits_of(int db)
{
    switch (db) {
    case BL_DB_META:
        return (table_limits){1, BL_META_KEY_MAX, BL_META_VALUE_MAX};
    case BL_DB_LOG:
        return (table_limits){8, 8, BL_RECORD_MAX};
    case BL_DB_BINDINGS:
    case BL_DB_BASE_BINDINGS:
        return (table_limits){1, BINDLOG_KEY_MAX, BL_BVAL_MAX};
    case BL_DB_SESSIONS:
    case BL_DB_BASE_SESSIONS:
        return (table_limits){1, BINDLOG_ID_MAX, BL_SVAL_MAX};
    case BL_DB_CHILDREN:
        return (table_limits){9, BL_LCHILD_KEY_MAX, 0};
    case BL_DB_HISTORY:
        return (table_limits){1, BL_HISTORY_KEY_MAX, 0};
    default:
        return (table_limits){0, BL_MDB_KEY_MAX, BL_RECORD_MAX};
    }
}

int bl_table_of(const bl_env *e, MDB_dbi dbi)
{
    for (int i = 0; i < BL_DB_COUNT; i++)
        if (e->dbi[i] == dbi)
            return i;
    return -1;
}

/* "LSN 42", "key agent:x", ...: the entry, for a message.  The key's
 * length was checked. */
static const char *describe(char *out, size_t cap, int db, const MDB_val *k)
{
    char q[BL_ERR_QUOTE_MAX];

    if (db == BL_DB_LOG && k->mv_size == 8) {
        snprintf(out, cap, "LSN %llu", (unsigned long long)bl_get64be(k->mv_data));
        return out;
    }
    bl_err_bytes(q, sizeof(q), k->mv_data, k->mv_size);
    switch (db) {
    case BL_DB_BINDINGS:
    case BL_DB_BASE_BINDINGS:
        snprintf(out, cap, "key %s", q);
        break;
    case BL_DB_SESSIONS:
    case BL_DB_BASE_SESSIONS:
        snprintf(out, cap, "session %s", q);
        break;
    case BL_DB_META:
        snprintf(out, cap, "record %s", q);
        break;
    default:
        snprintf(out, cap, "entry %s", q);
        break;
    }
    return out;
}

int bl_entry_check(int db, const MDB_val *k, const MDB_val *v)
{
    table_limits l = limits_of(db);
    const char *table = db >= 0 ? bl_db_name(db) : "(unknown)";
    char what[BL_ERR_QUOTE_MAX + 16];

    if (k->mv_size < l.key_min || k->mv_size > l.key_max)
        return bl_err_set(BINDLOG_ECORRUPT,
                          "data.mdb: table %s: a key of %zu bytes, outside %zu..%zu (a "
                          "damaged page)",
                          table, k->mv_size, l.key_min, l.key_max);
    if (v->mv_size > l.val_max)
        return bl_err_set(BINDLOG_ECORRUPT,
                          "data.mdb: table %s, %s: value of %zu bytes is over the limit of %zu "
                          "bytes (a damaged page)",
                          table, describe(what, sizeof(what), db, k), v->mv_size, l.val_max);
    return 0;
}

int bl_get_checked(MDB_txn *txn, MDB_dbi dbi, int db, const MDB_val *key, MDB_val *v)
{
    MDB_val k = *key;
    int rc = mdb_get(txn, dbi, &k, v);
    if (rc != 0)
        return bl_mdb_error(rc);
    return bl_entry_check(db, key, v);
}
