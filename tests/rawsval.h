/*
 * rawsval.h -- a session value read raw from a store's LMDB file, for tests
 * that open data.mdb with LMDB itself: a reference (format 5) resolved as
 * the library does (bl_sval_read), through the raw log and base image.
 */
#ifndef BL_TEST_RAWSVAL_H
#define BL_TEST_RAWSVAL_H

#include <lmdb.h>

#include "core/record.h"
#include "lmdb/limits.h"

typedef struct tu_raw_ref {
    MDB_txn *txn;
    MDB_dbi log, base;
} tu_raw_ref;

static int tu_raw_ref_get(void *ctx, int what, uint64_t lsn, const char *id, size_t id_len,
                          const void **v, size_t *n)
{
    tu_raw_ref *rr = ctx;
    unsigned char kb[8];
    MDB_val k = {8, kb}, val;
    bl_put64be(kb, lsn);
    if (what == BL_REF_BASE)
        k = (MDB_val){id_len, (void *)id};
    int rc = mdb_get(rr->txn, what == BL_REF_BASE ? rr->base : rr->log, &k, &val);
    if (rc == MDB_NOTFOUND)
        return BINDLOG_ENOTFOUND;
    if (rc != 0)
        return BINDLOG_EIO;
    *v = val.mv_data;
    *n = val.mv_size;
    return 0;
}

/* The session value v of id k, decoded and resolved; 0 or BINDLOG_E*. */
static inline int tu_raw_sval(MDB_txn *txn, MDB_dbi log, MDB_dbi base, const MDB_val *k,
                              const MDB_val *v, bl_sval *out)
{
    tu_raw_ref rr = {txn, log, base};
    return bl_sval_read(v->mv_data, v->mv_size, k->mv_data, k->mv_size, tu_raw_ref_get, &rr, out);
}

#endif /* BL_TEST_RAWSVAL_H */
