/*
 * mdb_tables.h -- reading a bindlog store's tables with LMDB directly, for
 * the benches' byte counts (bindlog-bench's "bytes per event", bindlog-size).
 * Header only: both programs link LMDB themselves, the library does not
 * export its table code.
 */
#ifndef BINDLOG_BENCH_MDB_TABLES_H
#define BINDLOG_BENCH_MDB_TABLES_H

#include <stdint.h>
#include <string.h>

#include <lmdb.h>

/* Bytes of the pages on LMDB's free list (each value of the free database
 * is a page list whose first word is its count). */
static inline uint64_t bench_free_bytes(MDB_txn *txn, uint64_t psize)
{
    MDB_cursor *cur;
    MDB_val k, v;
    uint64_t bytes = 0;
    if (mdb_cursor_open(txn, 0, &cur) != 0)
        return 0;
    while (mdb_cursor_get(cur, &k, &v, MDB_NEXT) == 0)
        if (v.mv_size >= sizeof(size_t))
            bytes += (uint64_t)*(const size_t *)v.mv_data * psize;
    mdb_cursor_close(cur);
    return bytes;
}

/* The next named table under `cur`, a cursor on the main database: its name
 * in name[cap], opened as *dbi, with its statistics in *st.  0, or
 * MDB_NOTFOUND past the last one; keys that are no table are skipped. */
static inline int bench_next_table(MDB_txn *txn, MDB_cursor *cur, char *name, size_t cap,
                                   MDB_dbi *dbi, MDB_stat *st)
{
    MDB_val k, v;
    while (mdb_cursor_get(cur, &k, &v, MDB_NEXT) == 0) {
        if (k.mv_size == 0 || k.mv_size >= cap)
            continue;
        memcpy(name, k.mv_data, k.mv_size);
        name[k.mv_size] = '\0';
        if (mdb_dbi_open(txn, name, 0, dbi) == 0 && mdb_stat(txn, *dbi, st) == 0)
            return 0;
    }
    return MDB_NOTFOUND;
}

#endif
