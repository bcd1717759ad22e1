/*
 * wal_base.h -- the template store of wal_fuzzer.c and make_wal_seeds.c.
 *
 * A fuzz input is the ring of a write-ahead log (64 KiB).  It is tried
 * against a fixed store: an empty one whose meta "wal" names salt
 * WB_SALT, a 64 KiB ring, and the position WB_START (8 KiB before the end of
 * the ring's first lap, so that valid logs cross the end of the ring and
 * carry a WRAP frame), with the chain starting at the salt.  The seeds are
 * real logs the library wrote on that store (make_wal_seeds.c).
 */
#ifndef BINDLOG_FUZZ_WAL_BASE_H
#define BINDLOG_FUZZ_WAL_BASE_H

#include <stdint.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bindlog.h"
#include "lmdb/walenv.h"

#define WB_CAP ((uint64_t)64 << 10)
#define WB_SALT 0x62696e646c6f6721ull /* "!golndib" */
#define WB_START (WB_CAP - 8192)

/* Make the template store in dir (which must be empty): 0 or an error. */
static inline int wb_make_template(const char *dir)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    MDB_txn *txn;
    int rc;

    o.durability = BINDLOG_DURABILITY_NONE;
    o.log_size = WB_CAP;
    if ((rc = bindlog_open(&s, dir, &o)) != 0)
        return rc;
    bl_env *e = s->e;
    bl_wal_meta wm = {WB_SALT, WB_CAP, WB_START, WB_SALT};
    rc = mdb_txn_begin(e->env, NULL, 0, &txn);
    if (rc == 0) {
        rc = bl_meta_put_wal(e, txn, &wm);
        if (rc == 0)
            rc = mdb_txn_commit(txn);
        else
            mdb_txn_abort(txn);
    }
    /* the shared memory still describes the old salt: the next process to
     * open the store alone rebuilds it */
    bindlog_close(s);
    if (rc != 0)
        return BINDLOG_EIO;
    /* and the log's header names the store's salt, as data.mdb does */
    char *path = bl_path_join(dir, BL_WAL_FILE);
    int fd = path != NULL ? open(path, O_RDWR) : -1;
    free(path);
    if (fd < 0)
        return BINDLOG_EIO;
    rc = bl_wal_set_filled(fd, WB_CAP, WB_SALT, 0);
    close(fd);
    return rc;
}

#endif /* BINDLOG_FUZZ_WAL_BASE_H */
