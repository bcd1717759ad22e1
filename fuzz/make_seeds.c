/*
 * make_seeds.c -- write the generated seed inputs of the fuzz corpora.
 *
 *     fuzz_make_seeds OUTDIR      (writes OUTDIR/record/, machine/, cli/, stream/)
 *
 * The committed files under fuzz/corpora/ came from this program (names
 * starting with "seed-") plus inputs that libFuzzer campaigns found
 * ("cov-", merged with -merge=1 to keep only new coverage) and regression
 * inputs for bugs ("regress-").  Rerun it after a format change and commit
 * the result.
 *
 * record seeds: valid records of every event type through the real encoder
 * (with and without origin, the longest key, ids and reason, a 64 KiB
 * origin, UUID ids in both cases), the example record of docs/format.md
 * byte for byte (version 4, and versions 3, 2 and 1 which are still read),
 * binding and session values of both versions, and near misses of version
 * 4 (wrong checksum, version 0 and 5, a gap back past LSN 0, a varint in a
 * longer form, one byte short, trailing byte, reserved flag, a length over
 * the bytes, an odd id code other than a UUID's, the standard
 * reason's bit with reason bytes or on a ROUTE) and a version-1 body under
 * version 2; a session value ended with a standard reason (its code) and
 * one with a code no reason has.
 *
 * machine seeds: programs for machine_fuzzer.c, written with the same byte
 * meanings its decoder gives them (see the op and choose_* switches there):
 * the three seed scenarios of SPEC section 2, a batch that fails half way,
 * a reopen, read-only writes; plus pseudo-random programs.
 *
 * cli seeds: one command line per command and option of the tool, times,
 * durations, the largest u64, bytes that need escaping, --help.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "core/record.h"

static const char *outdir;

static void put_file(const char *sub, const char *name, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", outdir, sub);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/%s/seed-%s", outdir, sub, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* ---- record seeds ---------------------------------------------------------- */

static unsigned char buf[BL_RECORD_MAX + 16];
static unsigned char origin[BINDLOG_ORIGIN_MAX];

static size_t rec(const char *name, unsigned type, const char *key, size_t key_len, const char *sid,
                const char *other, const char *reason, const void *org, size_t org_len,
                int org_flag)
{
    bl_record r = {0};
    r.lsn = 7;
    r.time_ms = 1767225600000;
    r.generation = 3;
    r.type = type;
    r.flags = org_flag ? BL_REC_ORIGIN : 0;
    r.key = key;
    r.key_len = key_len;
    r.sid = sid;
    r.sid_len = strlen(sid);
    r.other = other;
    r.other_len = strlen(other);
    r.reason = reason;
    r.reason_len = strlen(reason);
    r.origin = org;
    r.origin_len = org_len;
    size_t n = bl_record_encode(&r, buf, sizeof(buf));
    if (n == 0) {
        fprintf(stderr, "seed %s does not encode\n", name);
        exit(1);
    }
    put_file("record", name, buf, n);
    return n;
}

/* Re-seal the checksum of buf[0, n) after an edit. */
static void reseal(size_t n) { bl_put64(buf + n - 8, XXH3_64bits(buf, n - 8)); }

static void record_seeds(void)
{
    char key[BINDLOG_KEY_MAX], id[BINDLOG_ID_MAX + 1], reason[BINDLOG_REASON_MAX + 1];
    memset(key, 'k', sizeof(key));
    memset(id, 'i', BINDLOG_ID_MAX);
    id[BINDLOG_ID_MAX] = 0;
    memset(reason, 'r', BINDLOG_REASON_MAX);
    reason[BINDLOG_REASON_MAX] = 0;
    for (size_t i = 0; i < sizeof(origin); i++)
        origin[i] = (unsigned char)(i * 7);

    const char *k = "agent:main:telegram:dm:12345";
    rec("bind", BINDLOG_EVENT_BIND, k, strlen(k), "A", "", "switch", "{\"peer\":1}", 10, 1);
    rec("bind-noorigin", BINDLOG_EVENT_BIND, k, strlen(k), "B", "A", "switch", NULL, 0, 0);
    rec("new", BINDLOG_EVENT_NEW_SESSION, k, strlen(k), "C", "B", "new_session", "", 0, 1);
    rec("split", BINDLOG_EVENT_SPLIT, k, strlen(k), "D", "C", "compression", "x", 1, 1);
    rec("invalidate", BINDLOG_EVENT_INVALIDATE, k, strlen(k), "D", "", "invalidate", NULL, 0, 0);
    rec("unbind", BINDLOG_EVENT_UNBIND, k, strlen(k), "D", "", "", NULL, 0, 0);
    rec("longest", BINDLOG_EVENT_BIND, key, sizeof(key), id, id, reason, "o", 1, 1);
    rec("key-bytes", BINDLOG_EVENT_BIND, "k\x01\x7f\xff", 4, "s\x80", "", "", NULL, 0, 0);
    rec("big-origin", BINDLOG_EVENT_SPLIT, "a", 1, "c", "p", "compression", origin,
        sizeof(origin), 1);

    /* UUIDs: lower case kept in 16 bytes, upper case as text */
    rec("split-uuids", BINDLOG_EVENT_SPLIT, k, strlen(k), "0b6f7f0e-4a0b-4c7e-9d41-8a8e2a7c1f00",
        "5d0c1b9e-7f3a-4e21-b6c8-2f9d4e8a0b13", "compression", NULL, 0, 0);
    rec("bind-upper-uuid", BINDLOG_EVENT_BIND, k, strlen(k), "0B6F7F0E-4A0B-4C7E-9D41-8A8E2A7C1F00",
        "5d0c1b9e-7f3a-4e21-b6c8-2f9d4e8a0b13", "switch", NULL, 0, 0);

    /* docs/format.md's example: BIND k -> s1 from s, reason rx, origin "{",
     * lsn 42, time 1000, generation 3, prev_lsn 40 (record version 4) */
    static const unsigned char example[27] = {
        0x04, 0x11, 0x2a, 0xd0, 0x0f, 0x03, 0x02, 0x01, 0x04, 0x02, 0x02, 0x01, 0x6b, 0x73,
        0x31, 0x73, 0x72, 0x78, 0x7b, 0x03, 0xee, 0xc5, 0x67, 0xb7, 0x93, 0xa1, 0xd3};
    put_file("record", "format-example", example, sizeof(example));
    /* the same record in version 3 (formats 4 to 6), 2 (format 3) and 1
     * (formats 1 and 2): still read */
    static const unsigned char example_v3[27] = {
        0x03, 0x11, 0x2a, 0xd0, 0x0f, 0x03, 0x02, 0x01, 0x02, 0x01, 0x02, 0x01, 0x6b, 0x73,
        0x31, 0x73, 0x72, 0x78, 0x7b, 0x45, 0xbe, 0x42, 0x56, 0x5e, 0x8f, 0x33, 0x93};
    put_file("record", "format-example-v3", example_v3, sizeof(example_v3));
    static const unsigned char example_v2[60] = {
        0x02, 0x01, 0x01, 0x00, 0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe8,
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x00, 0x02, 0x01, 0x02, 0x01, 0x00, 0x00, 0x00, 0x28, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x6b, 0x73, 0x31, 0x73, 0x72, 0x78, 0x7b,
        0x14, 0xe6, 0x86, 0x0a, 0x12, 0xd1, 0xe1, 0xa8};
    put_file("record", "format-example-v2", example_v2, sizeof(example_v2));
    static const unsigned char example_v1[52] = {
        0x01, 0x01, 0x01, 0x00, 0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe8,
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x00, 0x02, 0x01, 0x02, 0x01, 0x00, 0x00, 0x00, 0x6b, 0x73,
        0x31, 0x73, 0x72, 0x78, 0x7b, 0x3f, 0x86, 0x64, 0xfa, 0x6c, 0xf6, 0x59, 0xc2};
    put_file("record", "format-example-v1", example_v1, sizeof(example_v1));

    /* near misses of version 4, each of a different rule */
    memcpy(buf, example, sizeof(example));
    buf[26] ^= 1;
    put_file("record", "bad-checksum", buf, 27);
    memcpy(buf, example, sizeof(example));
    buf[0] = 5;
    reseal(27);
    put_file("record", "version-5", buf, 27);
    buf[0] = 0;
    reseal(27);
    put_file("record", "version-0", buf, 27);
    memcpy(buf, example, sizeof(example));
    buf[6] = 43; /* a gap back past LSN 0 */
    reseal(27);
    put_file("record", "prev-not-below", buf, 27);
    memcpy(buf, example, sizeof(example));
    buf[1] = 0x91; /* a reserved flag bit (bit 7) */
    reseal(27);
    put_file("record", "reserved-flag", buf, 27);
    memcpy(buf, example, sizeof(example));
    buf[8] = 6; /* the sid's code says 3 bytes, one more than there */
    reseal(27);
    put_file("record", "bad-length", buf, 27);
    memcpy(buf, example, sizeof(example));
    buf[9] = 3; /* an odd code other than 1 (a UUID's) */
    reseal(27);
    put_file("record", "odd-id-code", buf, 27);
    buf[0] = 4, buf[1] = 0x11, buf[2] = 0xaa, buf[3] = 0x00; /* lsn 42 in two bytes */
    memcpy(buf + 4, example + 3, 24);
    reseal(28);
    put_file("record", "varint-longer", buf, 28);
    memcpy(buf, example, 19);
    buf[19] = 'x'; /* one byte more than the lengths account for */
    reseal(28);
    put_file("record", "trailing", buf, 28);
    put_file("record", "short", example, 26);
    memcpy(buf, example_v1, sizeof(example_v1));
    buf[0] = 2; /* a version-1 body under version 2: the lengths do not add up */
    reseal(52);
    put_file("record", "version-2-short", buf, 52);
    /* a standard reason is the type byte's bit 6 and no bytes (the seeds
     * "split", "bind", ... above); near misses: the bit with reason bytes,
     * and the bit on a ROUTE, which has no standard reason */
    memcpy(buf, example, sizeof(example));
    buf[1] |= 0x40; /* BIND | (ORIGIN | STD_REASON) << 4, and "rx" still there */
    reseal(27);
    put_file("record", "std-reason-with-bytes", buf, 27);
    size_t rn = rec("route", BINDLOG_EVENT_ROUTE, k, strlen(k), "", "", "", NULL, 0, 0);
    buf[1] |= 0x40;
    reseal(rn);
    put_file("record", "std-reason-on-route", buf, rn);

    /* state values */
    bl_bval bv = {"A", 1, 5, 9, 1767225600000, 0};
    put_file("record", "bval", buf, bl_bval_encode(&bv, buf, sizeof(buf)));
    bl_bval tomb = {"", 0, 6, 10, 1767225600001, 0};
    put_file("record", "bval-tombstone", buf, bl_bval_encode(&tomb, buf, sizeof(buf)));
    bl_sval sv = {k, strlen(k), "A", 1, 3, 0, 1767225600000, 0, "", 0, "{}", 2, 0, 0, 0, {0}};
    put_file("record", "sval", buf, bl_sval_encode(&sv, buf, sizeof(buf)));
    bl_sval sv2 = {key, sizeof(key), id, BINDLOG_ID_MAX, 3, 4, 5, 6, reason, BINDLOG_REASON_MAX,
                   "o", 1, 0, 0, 0, {0}};
    put_file("record", "sval-longest", buf, bl_sval_encode(&sv2, buf, sizeof(buf)));
    put_file("record", "bval-v1", buf, bl_bval_encode_v1(&bv, buf, sizeof(buf)));
    put_file("record", "sval-v1", buf, bl_sval_encode_v1(&sv, buf, sizeof(buf)));
    /* ended by a split: the standard reason as code 3 in the flags byte */
    bl_sval ended = {k, strlen(k), "A", 1, 3, 9, 1767225600000, 1767225600500, "compression",
                     11, "{}", 2, 1, 0, 0, {0}};
    /* format 5: the same session as a reference to its record, and whole
     * with the base image's mark */
    put_file("record", "sval-ref", buf, bl_sval_encode_ref(&ended, buf, sizeof(buf)));
    /* format 6: the sibling chain, its youngest child created at its end
     * (a flag), an older sibling (a varint); whole and live again after a
     * re-open, the child before the end (a varint) */
    bl_sval chain = ended;
    chain.child_lsn = chain.ended_lsn;
    chain.sibling_lsn = 2;
    put_file("record", "sval-chain-ref", buf, bl_sval_encode_ref(&chain, buf, sizeof(buf)));
    chain.ref = 0;
    chain.ended_lsn = 0;
    chain.ended_ms = 0;
    chain.reason = "";
    chain.reason_len = 0;
    put_file("record", "sval-chain-whole", buf, bl_sval_encode(&chain, buf, sizeof(buf)));
    put_file("record", "sval-marked", buf, bl_sval_encode_base(&ended, buf, sizeof(buf)));
    ended.ref = 0;
    size_t en = bl_sval_encode(&ended, buf, sizeof(buf));
    put_file("record", "sval-std-reason", buf, en);
    buf[1] = 6; /* a code no reason has */
    put_file("record", "sval-reason-code-6", buf, en);
}

/* ---- machine seeds --------------------------------------------------------- */

/* Byte meanings, from machine_fuzzer.c. */
enum { OP_BIND = 0, OP_NEW = 3, OP_SPLIT = 5, OP_INVALIDATE = 8, OP_UNBIND = 9, OP_BATCH = 10,
       OP_REOPEN = 12, OP_CLOCK = 13, OP_RO = 14, OP_READS = 15 };
enum { KEY0 = 0, KEY1 = 1, KEY_LONGEST = 6 };
enum { ID_A = 0, ID_B = 1, ID_C = 2, ID_D = 3, ID_FRESH = 10, ID_CURRENT = 12 };
enum { EXPECT_NULL = 0, EXPECT_EMPTY = 2, EXPECT_CURRENT = 3 };
enum { REASON_NULL = 0, REASON_EMPTY = 4 };
enum { ORIGIN_NULL = 0, ORIGIN_EMPTY = 3, ORIGIN_BYTES = 4, ORIGIN_64K = 6 };
enum { GEN_CURRENT = 0, GEN_ANY = 2, GEN_OLD = 3 };

static unsigned char prog[4096];
static size_t plen;

static void b(unsigned v) { prog[plen++] = (unsigned char)v; }

/* A key choice; the longest key takes one more byte (its last character). */
static void key(unsigned k)
{
    b(k);
    if (k == KEY_LONGEST)
        b(0);
}

/* Event bodies (the op byte or batch type byte comes first). */
static void bind_body(unsigned k, unsigned id, unsigned expect, unsigned origin_kind)
{
    key(k), b(id), b(expect), b(REASON_NULL), b(origin_kind);
    if (origin_kind == ORIGIN_BYTES)
        b(3), b('{'), b('1'), b('}');
}
static void new_body(unsigned k, unsigned id)
{
    key(k), b(id), b(REASON_NULL), b(ORIGIN_NULL);
}
static void split_body(unsigned k, unsigned parent, unsigned child, unsigned gen,
                       unsigned origin_kind)
{
    key(k), b(parent), b(child), b(gen), b(origin_kind);
    if (origin_kind == ORIGIN_BYTES)
        b(3), b('c'), b('m'), b('p');
}
static void check(void) { b(0); } /* op_event's "check_get" byte: 0 = yes */

static void machine_seeds(void)
{
    /* 1: a split is published: bind A, split A->fresh, retry is ALREADY */
    plen = 0;
    b(1); /* default map */
    b(OP_BIND), bind_body(KEY0, ID_A, EXPECT_NULL, ORIGIN_BYTES), check();
    b(OP_SPLIT), split_body(KEY0, ID_CURRENT, ID_FRESH, GEN_CURRENT, ORIGIN_BYTES), check();
    b(OP_SPLIT), split_body(KEY0, ID_A, ID_CURRENT, GEN_OLD, ORIGIN_NULL), check();
    b(OP_REOPEN), b(1);
    put_file("machine", "scenario-1-split", prog, plen);

    /* 2: /stop + /new while compressing: the late split is STALE */
    plen = 0;
    b(1);
    b(OP_BIND), bind_body(KEY0, ID_A, EXPECT_EMPTY, ORIGIN_NULL), check();
    b(OP_INVALIDATE), b(KEY0), b(REASON_NULL), check();
    b(OP_NEW), new_body(KEY0, ID_B), check();
    b(OP_SPLIT), split_body(KEY0, ID_A, ID_C, GEN_OLD, ORIGIN_NULL), check();
    b(OP_READS), b(KEY0), b(ID_C);
    put_file("machine", "scenario-2-stale", prog, plen);

    /* 3: identity guard: two runs, the second split is MOVED, also with ANY */
    plen = 0;
    b(1);
    b(OP_BIND), bind_body(KEY0, ID_A, EXPECT_NULL, ORIGIN_EMPTY), check();
    b(OP_SPLIT), split_body(KEY0, ID_A, ID_C, GEN_CURRENT, ORIGIN_NULL), check();
    b(OP_SPLIT), split_body(KEY0, ID_A, ID_D, GEN_CURRENT, ORIGIN_NULL), check();
    b(OP_BIND), bind_body(KEY0, ID_B, EXPECT_CURRENT, ORIGIN_NULL), check();
    b(OP_SPLIT), split_body(KEY0, ID_A, ID_C, GEN_ANY, ORIGIN_NULL), check();
    put_file("machine", "scenario-3-moved", prog, plen);

    /* a batch whose third event fails (EEXIST): nothing of it stays */
    plen = 0;
    b(0); /* tiny map */
    b(OP_BIND), bind_body(KEY1, ID_A, EXPECT_NULL, ORIGIN_64K), check();
    b(OP_BATCH), b(3);
    b(0), bind_body(KEY0, ID_B, EXPECT_NULL, ORIGIN_NULL);
    b(2), split_body(KEY0, ID_B, ID_C, GEN_ANY, ORIGIN_NULL);
    b(1), new_body(KEY_LONGEST, ID_C);
    b(OP_REOPEN), b(0);
    b(OP_RO), b(1), b(0), bind_body(KEY0, ID_D, EXPECT_NULL, ORIGIN_NULL), b(1);
    b(OP_CLOCK), b(2), b(200);
    b(OP_UNBIND), b(KEY1), b(REASON_EMPTY), check();
    b(OP_UNBIND), b(KEY1), b(REASON_NULL), check();
    b(OP_BIND), bind_body(KEY1, ID_A, EXPECT_EMPTY, ORIGIN_NULL), check();
    put_file("machine", "batch-fails", prog, plen);

    /* pseudo-random programs of several lengths */
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < 12; i++) {
        size_t n = (size_t)16 << (i % 5);
        for (size_t j = 0; j < n; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            prog[j] = (unsigned char)(x >> 24);
        }
        char name[32];
        snprintf(name, sizeof(name), "random-%02d", i);
        put_file("machine", name, prog, n);
    }
}

/* ---- cli seeds ------------------------------------------------------------- */

/* cli_fuzzer input: a command index, then NUL-separated arguments. */
static void cli_seed(const char *name, unsigned cmd, const char *const *args)
{
    plen = 0;
    b(cmd);
    for (size_t i = 0; args[i] != NULL; i++) {
        size_t n = strlen(args[i]);
        memcpy(prog + plen, args[i], n + 1);
        plen += n + 1;
    }
    if (plen > 1)
        plen--; /* the last NUL is implied */
    put_file("cli", name, prog, plen);
}

static void cli_seeds(void)
{
    /* command indexes of cli_fuzzer.c */
    enum { STAT, GET, HISTORY, LINEAGE, DUMP, BIND, NEW, SPLIT, INVALIDATE, UNBIND };
    cli_seed("stat", STAT, (const char *const[]){"--json", NULL});
    cli_seed("get", GET, (const char *const[]){"k1", NULL});
    cli_seed("get-tombstone", GET, (const char *const[]){"k2", "--json", NULL});
    cli_seed("history", HISTORY, (const char *const[]){"k1", "--json", NULL});
    cli_seed("lineage-dot", LINEAGE, (const char *const[]){"S2", "--dot", NULL});
    cli_seed("dump-log", DUMP, (const char *const[]){"--log", "--from", "2", "--to", "4", NULL});
    cli_seed("dump-time", DUMP,
             (const char *const[]){"--log", "--from", "2026-01-01T00:00:00.5Z", "--json", NULL});
    cli_seed("dump-all", DUMP, (const char *const[]){"--bindings", "--sessions", NULL});
    cli_seed("bind-expect", BIND,
             (const char *const[]){"k1", "S9", "--expect", "S2", "--reason", "resume", NULL});
    cli_seed("bind-dashdash", BIND, (const char *const[]){"--", "-k", "S9", NULL});
    cli_seed("new", NEW, (const char *const[]){"k3", "N1", "--reason=r", NULL});
    cli_seed("split-gen", SPLIT,
             (const char *const[]){"k1", "S2", "S3", "--generation", "1", "--json", NULL});
    cli_seed("split-any", SPLIT, (const char *const[]){"k1", "S2", "S3", NULL});
    cli_seed("invalidate", INVALIDATE, (const char *const[]){"k3", "--reason", "stop", NULL});
    cli_seed("unbind", UNBIND, (const char *const[]){"k1", NULL});
    cli_seed("duration", STAT, (const char *const[]){"30s", NULL});
    cli_seed("time-leap", GET, (const char *const[]){"2024-02-29T23:59:59.999Z", NULL});
    cli_seed("number-max", GET, (const char *const[]){"18446744073709551615", NULL});
    cli_seed("escape", GET, (const char *const[]){"k\x01\xff\xc3\xa9\x7f", NULL});
    cli_seed("help", SPLIT, (const char *const[]){"--help", NULL});
}

/* ---- stream seeds that need no export --------------------------------------- */

/* Inputs every importer must refuse; the real exports come from
 * make_stream_seeds.c once the library has bindlog_export(). */
static void stream_seeds(void)
{
    static const unsigned char zeros[64];
    static const char text[] = "bindlog export\n{\"not\": \"a stream\"}\n";
    put_file("stream", "empty", "", 0);
    put_file("stream", "zeros", zeros, sizeof(zeros));
    put_file("stream", "text", text, sizeof(text) - 1);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    if (mkdir(outdir, 0755) != 0 && errno != EEXIST) {
        perror(outdir);
        return 1;
    }
    record_seeds();
    machine_seeds();
    cli_seeds();
    stream_seeds();
    return 0;
}
