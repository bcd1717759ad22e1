/*
 * digest.h -- the state digest, fed one entry at a time (digest.c).
 *
 * XXH3-128 over every binding in key order as
 *     'B'  u16 key_len  key  u32 value_len  binding value
 * then every session in id order as
 *     'S'  u8 id_len  id  u32 value_len  session value
 * (docs/format.md).  No LMDB here: the bulk replay digests its merge with it.
 */
#ifndef BL_DIGEST_H
#define BL_DIGEST_H

#include <stddef.h>

#include "bindlog.h"
#include "core/record.h"

/* The digest one entry at a time (digest.c): add the bindings in key order
 * (tag 'B'), then the sessions in id order ('S'), then take the 16 bytes. */
typedef struct bl_digest bl_digest; /* opaque: an XXH3 state and a buffer */
bl_digest *bl_digest_new(void); /* NULL when out of memory */
void bl_digest_free(bl_digest *d);
/* Add one entry.  Lengths over the limits of the tag's table (a key of
 * 1..BINDLOG_KEY_MAX bytes and a value of at most BL_BVAL_MAX for 'B'; an
 * id of 1..BINDLOG_ID_MAX and at most BL_SVAL_MAX for 'S') are damage: 0,
 * or BINDLOG_ECORRUPT with a last-error detail, before any byte is read. */
int bl_digest_add(bl_digest *d, int tag, const void *k, size_t kn, const void *v, size_t vn);
/* Add a session whose value was decoded (and a reference resolved,
 * bl_sval_read): what bl_digest_add() of its whole value adds. */
int bl_digest_add_sval(bl_digest *d, const void *id, size_t id_len, const bl_sval *sv);
void bl_digest_final(bl_digest *d, unsigned char out[BINDLOG_DIGEST_SIZE]);

/* A gatherer: entries added to it (bl_digest_add, bl_digest_add_sval) are
 * encoded and kept, not hashed, so that one thread can encode a run of
 * entries while another hashes the run before it.  NULL when out of
 * memory; bl_digest_free() frees it.  Its adds may also fail with
 * BINDLOG_ENOMEM (the kept bytes grow); bl_digest_final() is not for it. */
bl_digest *bl_digest_new_gather(void);
/* Hash the entries gathered in `from`, in the order added, into digest d
 * as if they had been added to d at this point, and empty `from` for the
 * next run.  0, or BINDLOG_EINVAL when d is itself a gatherer. */
int bl_digest_take(bl_digest *d, bl_digest *from);

#endif /* BL_DIGEST_H */
