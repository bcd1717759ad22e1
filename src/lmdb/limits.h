/*
 * limits.h -- the length limits of every table's keys and values, checked
 * on everything LMDB hands back (limits.c).
 *
 * LMDB returns whatever length a node header says.  One flipped bit there
 * turns a 160-byte log record into a 536,871,072-byte one whose data runs
 * off the map, and the first checksum, hash or copy of it is a SIGBUS, not
 * an error.  LMDB has no page checksums to catch it, so no code here trusts
 * a length it did not check: bl_cursor_next() checks every entry it
 * returns, point reads go through bl_get_checked(), and the few loops on
 * raw LMDB cursors call bl_entry_check() before they touch a value.  The
 * limits are those of the encodings (docs/format.md, "LMDB tables"), which
 * no byte our encoders write can exceed.
 */
#ifndef BL_LIMITS_H
#define BL_LIMITS_H

#include <lmdb.h>

#include "lmdb/store.h"

/* meta holds short named records (the largest is 64 bytes); these bounds
 * leave room for records added later without letting a damaged length
 * through. */
#define BL_META_KEY_MAX 64
#define BL_META_VALUE_MAX 1024

/* The BL_DB_* table that `dbi` is in e, or -1 (then the loosest limits
 * apply: LMDB's own key limit and the largest value of any table). */
int bl_table_of(const bl_env *e, MDB_dbi dbi);

/*
 * 0 if the key and value lengths of an entry of table `db` (BL_DB_* or -1)
 * are within its encoding's limits, else BINDLOG_ECORRUPT with a
 * last-error detail naming the file, the table, the entry (the LSN, key or
 * session) and the length: e.g. "data.mdb: table log, LSN 42: value of
 * 536871072 bytes is over the limit of 66301 bytes (a damaged page)".  Reads no byte of the
 * value, and of the key only when its length is within the limit.
 */
int bl_entry_check(int db, const MDB_val *k, const MDB_val *v);

/* mdb_get() of `key` in table `db` (whose handle is `dbi`), then
 * bl_entry_check().  0, BINDLOG_ENOTFOUND, BINDLOG_ECORRUPT or another
 * BINDLOG_E* code. */
int bl_get_checked(MDB_txn *txn, MDB_dbi dbi, int db, const MDB_val *key, MDB_val *v);

#endif /* BL_LIMITS_H */
