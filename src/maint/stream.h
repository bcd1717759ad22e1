/*
 * stream.h -- the export stream's layout, shared by export (stream_export.c)
 * and import (stream.c).
 *
 * Layout (docs/format.md, "Export stream", has every byte):
 *
 *   header   32 bytes: "BLSTREAM", u32 version, u32 flags, u64 first_lsn,
 *            u64 XXH3-64 of the 24 bytes before it
 *   image    only with flag IMAGE (a full stream):
 *            'C' frame: base time, counters, number of bindings and sessions
 *            'B' frame per binding, 'S' frame per session, in key order
 *   records  'R' frame per record, LSNs first_lsn, first_lsn + 1, ...
 *   trailer  'T' frame: record count, last LSN, last time, state digest,
 *            XXH3-64 of every stream byte before this checksum
 *
 * A frame is u8 tag, u32 payload length, payload.  'C', 'B' and 'S'
 * payloads end with an XXH3-64 of the frame before it; an 'R' payload is a
 * log record, which carries its own.  So every frame is verified where it
 * is read and a refusal names the offset of the frame at fault, and the
 * trailer's whole-stream checksum catches anything the frames could not
 * (a dropped or duplicated frame that happens to fit).
 */
#ifndef BL_STREAM_H
#define BL_STREAM_H

#include "maint/maint.h"

#define ST_MAGIC "BLSTREAM"
#define ST_VERSION 1u
#define ST_FLAG_IMAGE 0x1u
#define ST_FLAGS_KNOWN ST_FLAG_IMAGE
#define ST_HEADER 32
#define ST_FRAME_HDR 5
#define ST_CHECKSUM 8
/* The image header carries meta "counts" in its 64-byte layout (stream
 * version 1): a base image's count of ROUTE records is not carried (0). */
#define ST_C_LEN (8 + BL_COUNTS_BYTES_V3 + 8 + 8 + ST_CHECKSUM)
#define ST_T_LEN (8 + 8 + 8 + BINDLOG_DIGEST_SIZE + ST_CHECKSUM)
#define ST_B_MAX (2 + BINDLOG_KEY_MAX + BL_BVAL_MAX + ST_CHECKSUM) /* either version */
#define ST_S_MAX \
    (1 + BINDLOG_ID_MAX + 42 + BINDLOG_KEY_MAX + BINDLOG_ID_MAX + BINDLOG_REASON_MAX + \
     BINDLOG_ORIGIN_MAX + ST_CHECKSUM)
#define ST_FRAME_MAX (ST_FRAME_HDR + ST_S_MAX)
#define ST_IO_BUF ((size_t)1 << 20)

/* Entries of a table in txn's snapshot (0 if it cannot say). */
static inline uint64_t bl_stream_entries(MDB_txn *txn, MDB_dbi dbi)
{
    MDB_stat st;
    return mdb_stat(txn, dbi, &st) == 0 ? st.ms_entries : 0;
}

#endif /* BL_STREAM_H */
