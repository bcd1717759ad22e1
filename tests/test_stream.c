/*
 * test_stream.c -- bindlog_export() and bindlog_import().
 *
 * A round trip keeps the digest (with and without a base image);
 * incremental streams append exactly at head + 1 and refuse gaps and
 * overlaps; and a torn or altered stream -- every truncation point and
 * every single-bit flip of a small stream -- is refused with an offset
 * inside the stream while the target stays exactly as it was.  Golden
 * files in tests/data pin the format: each valid stream imports to its
 * recorded digest and re-exports to the same bytes; each invalid one fails
 * with its recorded error and offset (tests/data/README.md).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "bindlog.h"
#include "core/record.h"
#include "testutil.h"
#include "workload.h"

typedef struct fx {
    char *tmp;
    char dir[1024];
    bindlog *s;
    wl_gen g;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    f->tmp = tu_mkdtemp("stream");
    snprintf(f->dir, sizeof(f->dir), "%s/src", f->tmp);
    wl_now = 1000000;
    f->s = wl_open_store(f->dir);
    wl_gen_init(&f->g, 99);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    bindlog_close(f->s);
    tu_rmtree(f->tmp);
    free(f->tmp);
    free(f);
    return 0;
}

static void run(fx *f, bindlog *s, int n)
{
    for (int i = 0; i < n; i++)
        wl_gen_step(&f->g, s);
}

static bindlog *new_store(fx *f, const char *name)
{
    char dir[1100];
    snprintf(dir, sizeof(dir), "%s/%s", f->tmp, name);
    return wl_open_store(dir);
}

/* ---- files ------------------------------------------------------------------- */

typedef struct bytes {
    unsigned char *p;
    size_t n;
} bytes;

static bytes export_bytes(fx *f, bindlog *s, uint64_t from, uint64_t *records)
{
    char path[1100];
    bytes b = {0};
    snprintf(path, sizeof(path), "%s/export.tmp", f->tmp);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    int rc = bindlog_export(s, from, fd, records, NULL, NULL);
    if (rc != 0)
        fail_msg("export: %s", bindlog_strerror(rc));
    off_t end = lseek(fd, 0, SEEK_END);
    b.n = (size_t)end;
    b.p = malloc(b.n + 1);
    assert_int_equal(pread(fd, b.p, b.n, 0), (ssize_t)b.n);
    close(fd);
    unlink(path);
    return b;
}

/* Import `n` bytes of `p` through a file (seekable) or a pipe. */
static int import_bytes(fx *f, bindlog *s, const void *p, size_t n, uint64_t *records,
                        uint64_t *off, int use_pipe)
{
    int rc;
    if (use_pipe) {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            size_t done = 0;
            while (done < n) {
                ssize_t w = write(fds[1], (const char *)p + done, n - done);
                if (w <= 0)
                    _exit(1);
                done += (size_t)w;
            }
            _exit(0);
        }
        close(fds[1]);
        rc = bindlog_import(s, fds[0], records, off, NULL, NULL);
        close(fds[0]);
        int st;
        waitpid(pid, &st, 0);
        return rc;
    }
    char path[1100];
    snprintf(path, sizeof(path), "%s/import.tmp", f->tmp);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, p, n), (ssize_t)n);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    rc = bindlog_import(s, fd, records, off, NULL, NULL);
    close(fd);
    unlink(path);
    return rc;
}

typedef struct snap {
    unsigned char digest[BINDLOG_DIGEST_SIZE];
    bindlog_stats st;
} snap;

static void take(bindlog *s, snap *x)
{
    uint64_t head;
    assert_int_equal(bindlog_digest(s, x->digest, &head), 0);
    assert_int_equal(bindlog_stats_get(s, &x->st), 0);
    assert_int_equal(head, x->st.head_lsn);
}

/* Two stores hold the same thing: state, head, log, base, counters. */
static void assert_same(const snap *a, const snap *b)
{
    assert_memory_equal(a->digest, b->digest, BINDLOG_DIGEST_SIZE);
    assert_int_equal(a->st.head_lsn, b->st.head_lsn);
    assert_int_equal(a->st.base_lsn, b->st.base_lsn);
    assert_int_equal(a->st.log_records, b->st.log_records);
    assert_int_equal(a->st.bindings, b->st.bindings);
    assert_int_equal(a->st.sessions, b->st.sessions);
    assert_int_equal(a->st.live_bindings, b->st.live_bindings);
    assert_int_equal(a->st.live_sessions, b->st.live_sessions);
    assert_memory_equal(a->st.applied, b->st.applied, sizeof(a->st.applied));
}

static void assert_clean(bindlog *s)
{
    bindlog_check_report rep;
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    if (rep.problems != 0)
        fail_msg("check: %s", rep.message);
}

/* ---- round trips ------------------------------------------------------------- */

static void stream__round_trip_keeps_digest(void **state)
{
    fx *f = *state;
    snap a, b;
    uint64_t n, got, off;

    run(f, f->s, 400);
    bytes x = export_bytes(f, f->s, 0, &n);
    assert_int_equal(n, 400);
    for (int use_pipe = 0; use_pipe < 2; use_pipe++) {
        bindlog *t = new_store(f, use_pipe ? "dst-pipe" : "dst-file");
        assert_int_equal(import_bytes(f, t, x.p, x.n, &got, &off, use_pipe), 0);
        assert_int_equal(got, 400);
        take(f->s, &a);
        take(t, &b);
        assert_same(&a, &b);
        assert_clean(t);
        /* and re-exports to the very same bytes */
        bytes y = export_bytes(f, t, 0, NULL);
        assert_int_equal(y.n, x.n);
        assert_memory_equal(y.p, x.p, x.n);
        free(y.p);
        bindlog_close(t);
    }
    free(x.p);
}

static void stream__round_trip_with_base_image(void **state)
{
    fx *f = *state;
    snap a, b;
    uint64_t removed, n;

    run(f, f->s, 300);
    assert_int_equal(bindlog_compact(f->s, 201, &removed, NULL, NULL), 0);
    bytes x = export_bytes(f, f->s, 0, &n);
    assert_int_equal(n, 100);
    bindlog *t = new_store(f, "dst");
    assert_int_equal(import_bytes(f, t, x.p, x.n, &n, NULL, 0), 0);
    take(f->s, &a);
    take(t, &b);
    assert_same(&a, &b);
    assert_int_equal(b.st.base_lsn, 200);
    assert_clean(t);
    /* a base image alone (everything compacted) round-trips too */
    assert_int_equal(bindlog_compact(f->s, UINT64_MAX, &removed, NULL, NULL), 0);
    free(x.p);
    x = export_bytes(f, f->s, 1, &n);
    assert_int_equal(n, 0);
    bindlog *t2 = new_store(f, "dst2");
    assert_int_equal(import_bytes(f, t2, x.p, x.n, &n, NULL, 0), 0);
    take(f->s, &a);
    take(t2, &b);
    assert_same(&a, &b);
    assert_clean(t2);
    /* the restored store goes on where the original stopped */
    run(f, t2, 20);
    assert_clean(t2);
    bindlog_close(t2);
    bindlog_close(t);
    free(x.p);
}

static void stream__incremental_appends_at_head(void **state)
{
    fx *f = *state;
    snap a, b;
    uint64_t n, off;

    run(f, f->s, 300);
    bytes full = export_bytes(f, f->s, 0, NULL);
    bindlog *t = new_store(f, "replica");
    assert_int_equal(import_bytes(f, t, full.p, full.n, NULL, NULL, 0), 0);

    run(f, f->s, 100);
    bytes inc = export_bytes(f, f->s, 301, &n);
    assert_int_equal(n, 100);
    assert_true(inc.n < full.n); /* no image, only the new records */
    assert_int_equal(import_bytes(f, t, inc.p, inc.n, &n, &off, 1), 0);
    assert_int_equal(n, 100);
    take(f->s, &a);
    take(t, &b);
    assert_same(&a, &b);
    assert_clean(t);

    /* the same increment again overlaps: refused at the first_lsn field */
    assert_int_equal(import_bytes(f, t, inc.p, inc.n, &n, &off, 0), BINDLOG_EEXIST);
    assert_int_equal(off, 16);
    assert_int_equal(n, 0);
    take(t, &b);
    assert_same(&a, &b);

    /* a full stream never merges into a non-empty store */
    assert_int_equal(import_bytes(f, t, full.p, full.n, &n, &off, 0), BINDLOG_EEXIST);
    take(t, &b);
    assert_same(&a, &b);

    /* an empty increment (nothing new) is fine */
    bytes none = export_bytes(f, f->s, 401, &n);
    assert_int_equal(n, 0);
    assert_int_equal(import_bytes(f, t, none.p, none.n, &n, &off, 0), 0);

    /* a gap: the replica misses 401..419 */
    run(f, f->s, 50);
    bytes gap = export_bytes(f, f->s, 420, &n);
    assert_int_equal(n, 31);
    assert_int_equal(import_bytes(f, t, gap.p, gap.n, &n, &off, 0), BINDLOG_ENOTFOUND);
    assert_int_equal(off, 16);
    take(t, &b);
    assert_same(&a, &b);

    /* export refuses what it cannot produce */
    uint64_t removed;
    assert_int_equal(bindlog_compact(f->s, 350, &removed, NULL, NULL), 0);
    int fd = open("/dev/null", O_WRONLY);
    assert_int_equal(bindlog_export(f->s, 300, fd, NULL, NULL, NULL), BINDLOG_ENOTFOUND);
    assert_int_equal(bindlog_export(f->s, 452, fd, NULL, NULL, NULL), BINDLOG_ENOTFOUND);
    assert_int_equal(bindlog_export(f->s, 0, -1, NULL, NULL, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_export(NULL, 0, fd, NULL, NULL, NULL), BINDLOG_EINVAL);
    close(fd);
    assert_int_equal(bindlog_import(t, -1, NULL, NULL, NULL, NULL), BINDLOG_EINVAL);

    free(full.p);
    free(inc.p);
    free(none.p);
    free(gap.p);
    bindlog_close(t);
}

/* ---- torn and altered streams ------------------------------------------------ */

/* A small stream with every section: a base image and records. */
static bytes small_stream(fx *f)
{
    uint64_t removed;
    run(f, f->s, 24);
    assert_int_equal(bindlog_compact(f->s, 13, &removed, NULL, NULL), 0);
    return export_bytes(f, f->s, 0, NULL);
}

static void stream__every_truncation_refused(void **state)
{
    fx *f = *state;
    bytes x = small_stream(f);
    bindlog *t = new_store(f, "dst");
    bindlog *inc = new_store(f, "inc");
    snap before, after, ib, ia;
    uint64_t n, off;

    /* an incremental target too, so both kinds of refusal are covered */
    bytes base = export_bytes(f, f->s, 0, NULL);
    assert_int_equal(import_bytes(f, inc, base.p, base.n, NULL, NULL, 0), 0);
    run(f, f->s, 10);
    bytes y = export_bytes(f, f->s, 25, NULL);

    take(t, &before);
    take(inc, &ib);
    for (size_t len = 0; len < x.n; len++) {
        int rc = import_bytes(f, t, x.p, len, &n, &off, 0);
        if (rc != BINDLOG_ECORRUPT)
            fail_msg("truncated at %zu of %zu: %d (%s)", len, x.n, rc, bindlog_strerror(rc));
        assert_true(off <= len);
        assert_int_equal(n, 0);
    }
    for (size_t len = 0; len < y.n; len++) {
        int rc = import_bytes(f, inc, y.p, len, &n, &off, 0);
        if (rc != BINDLOG_ECORRUPT)
            fail_msg("incremental truncated at %zu of %zu: %d", len, y.n, rc);
        assert_true(off <= len);
    }
    /* a byte too many is refused at the end of the trailer */
    unsigned char *z = malloc(x.n + 1);
    memcpy(z, x.p, x.n);
    z[x.n] = 0;
    assert_int_equal(import_bytes(f, t, z, x.n + 1, &n, &off, 0), BINDLOG_ECORRUPT);
    assert_int_equal(off, x.n);
    take(t, &after);
    take(inc, &ia);
    assert_same(&before, &after);
    assert_same(&ib, &ia);
    /* and the intact streams still apply */
    assert_int_equal(import_bytes(f, t, x.p, x.n, &n, &off, 0), 0);
    assert_int_equal(import_bytes(f, inc, y.p, y.n, &n, &off, 0), 0);
    assert_clean(t);
    assert_clean(inc);
    free(z);
    free(x.p);
    free(y.p);
    free(base.p);
    bindlog_close(t);
    bindlog_close(inc);
}

static void stream__every_bit_flip_refused(void **state)
{
    fx *f = *state;
    bytes x = small_stream(f);
    bindlog *t = new_store(f, "dst");
    snap before, after;
    uint64_t n, off;
    unsigned char *z = malloc(x.n);
    uint32_t rng = 1;

    take(t, &before);
    for (size_t pos = 0; pos < x.n; pos++) {
        memcpy(z, x.p, x.n);
        rng = rng * 1103515245u + 12345u;
        z[pos] ^= (unsigned char)(1u << ((rng >> 16) % 8));
        int rc = import_bytes(f, t, z, x.n, &n, &off, 0);
        if (rc != BINDLOG_ECORRUPT && rc != BINDLOG_EVERSION && rc != BINDLOG_ENOTFOUND &&
            rc != BINDLOG_EEXIST)
            fail_msg("flip at %zu of %zu: %d (%s)", pos, x.n, rc, bindlog_strerror(rc));
        assert_true(off <= x.n);
    }
    take(t, &after);
    assert_same(&before, &after);
    free(z);
    free(x.p);
    bindlog_close(t);
}

/* ---- golden files ------------------------------------------------------------ */

static const char *data_dir(void)
{
    const char *d = getenv("BINDLOG_TEST_DATA");
    return d != NULL && d[0] ? d : BINDLOG_TEST_DATA_DIR;
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (fp == NULL)
        fail_msg("cannot write %s: %s", path, strerror(errno));
    assert_int_equal(fwrite(p, 1, n, fp), n);
    fclose(fp);
}

static bytes read_file(const char *path)
{
    bytes b = {0};
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        fail_msg("cannot read %s: %s", path, strerror(errno));
    fseek(fp, 0, SEEK_END);
    b.n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    b.p = malloc(b.n + 1);
    assert_int_equal(fread(b.p, 1, b.n, fp), b.n);
    fclose(fp);
    return b;
}

static void reseal_header(unsigned char *p) { bl_put64(p + 24, XXH3_64bits(p, 24)); }

/* Recompute the trailer's whole-stream checksum (the last 8 bytes), so an
 * alteration is caught by what it breaks, not by the checksum. */
static void reseal_stream(unsigned char *p, size_t n)
{
    bl_put64(p + n - 8, XXH3_64bits(p, n - 8));
}

/* Offset of the first 'R' frame of a stream written by small_stream(). */
static size_t first_record(const bytes *x)
{
    size_t off = 32;
    while (off < x->n && x->p[off] != 'R')
        off += 5 + bl_get32(x->p + off + 1);
    return off;
}

/* A record whose own checksum fails, in a stream resealed around it, passes
 * the scan (its head reads) and is refused where it is decided, after the
 * scan, by the bulk replay's fallback.  The refusal still names the
 * record's frame: for every record of the stream, with its checksum or a
 * byte of its middle altered, read from a file and from a pipe. */
static void stream__damaged_record_named_by_its_frame(void **state)
{
    fx *f = *state;
    bytes x = small_stream(f);
    bindlog *t = new_store(f, "dst");
    unsigned char *z = malloc(x.n);
    snap before, after;
    size_t tested = 0;

    take(t, &before);
    for (size_t at = first_record(&x); at + 5 < x.n && x.p[at] == 'R';
         at += 5 + bl_get32(x.p + at + 1), tested++) {
        size_t len = bl_get32(x.p + at + 1);
        for (int middle = 0; middle < 2; middle++) {
            memcpy(z, x.p, x.n);
            z[at + 5 + (middle ? len / 2 : len - 1)] ^= 0x04;
            reseal_stream(z, x.n);
            for (int use_pipe = 0; use_pipe < 2; use_pipe++) {
                uint64_t n = 1, off = 0;
                int rc = import_bytes(f, t, z, x.n, &n, &off, use_pipe);
                if (rc != BINDLOG_ECORRUPT || off != at)
                    fail_msg("record %zu (frame at %zu, %s byte, %s): %d (%s) at %llu", tested, at,
                             middle ? "middle" : "checksum", use_pipe ? "pipe" : "file", rc,
                             bindlog_strerror(rc), (unsigned long long)off);
                assert_int_equal(n, 0);
            }
        }
    }
    assert_true(tested >= 8);
    take(t, &after);
    assert_same(&before, &after);
    assert_int_equal(import_bytes(f, t, x.p, x.n, NULL, NULL, 0), 0);
    free(z);
    free(x.p);
    bindlog_close(t);
}

static void regen_golden(fx *f)
{
    char path[2048];
    const char *d = data_dir();
    bytes x = small_stream(f);
    size_t r = first_record(&x), rlen = bl_get32(x.p + r + 1);
    unsigned char *z = malloc(x.n + 5 + rlen + 1);

    snprintf(path, sizeof(path), "%s/valid/full-with-image.blstream", d);
    write_file(path, x.p, x.n);

    /* a stream without an image: a whole log from LSN 1 */
    bindlog *s2 = new_store(f, "plain");
    wl_gen g2;
    wl_gen_init(&g2, 5);
    for (int i = 0; i < 12; i++)
        wl_gen_step(&g2, s2);
    bytes p2 = export_bytes(f, s2, 0, NULL);
    snprintf(path, sizeof(path), "%s/valid/full-no-compaction.blstream", d);
    write_file(path, p2.p, p2.n);
    bindlog_close(s2);
    free(p2.p);

#define INVALID(name, buf, len)                                                     \
    do {                                                                            \
        snprintf(path, sizeof(path), "%s/invalid/%s.blstream", d, name);            \
        write_file(path, buf, len);                                                 \
    } while (0)
    INVALID("empty", x.p, 0);
    INVALID("truncated-header", x.p, 20);
    memcpy(z, x.p, x.n);
    z[0] = 'X';
    INVALID("bad-magic", z, x.n);
    memcpy(z, x.p, x.n);
    bl_put32(z + 8, 2);
    reseal_header(z);
    INVALID("newer-version", z, x.n);
    memcpy(z, x.p, x.n);
    bl_put32(z + 12, 0x3);
    reseal_header(z);
    INVALID("reserved-flag", z, x.n);
    memcpy(z, x.p, x.n);
    z[40] ^= 0x10; /* inside the 'C' frame */
    INVALID("flipped-image-byte", z, x.n);
    INVALID("truncated-in-record", x.p, r + 20);
    memcpy(z, x.p, x.n);
    z[r + 5 + 45] ^= 0x01; /* inside the first record */
    reseal_stream(z, x.n);
    INVALID("flipped-record-byte", z, x.n);
    /* the first record twice: its own checksum is fine, its LSN is not */
    memcpy(z, x.p, r + 5 + rlen);
    memcpy(z + r + 5 + rlen, x.p + r, x.n - r);
    reseal_stream(z, x.n + 5 + rlen);
    INVALID("duplicated-record", z, x.n + 5 + rlen);
    memcpy(z, x.p, x.n);
    z[x.n - 20] ^= 0x01; /* inside the trailer's state digest */
    reseal_stream(z, x.n);
    INVALID("wrong-digest", z, x.n);
    memcpy(z, x.p, x.n);
    z[x.n - 1] ^= 0x80;
    INVALID("wrong-stream-checksum", z, x.n);
    memcpy(z, x.p, x.n);
    z[x.n] = '\n';
    INVALID("trailing-byte", z, x.n + 1);
    bytes inc = export_bytes(f, f->s, 20, NULL);
    INVALID("incremental-into-empty", inc.p, inc.n);
    free(inc.p);
#undef INVALID
    free(z);
    free(x.p);
}

/* "<CODE> <offset>" or "ok <records> <digest hex>", one line. */
static void read_expect(const char *path, char *what, size_t cap, uint64_t *a, char *hex)
{
    bytes b = read_file(path);
    b.p[b.n] = 0;
    unsigned long long v = 0;
    char w[64] = "", h[33] = "";
    if (sscanf((char *)b.p, "%63s %llu %32s", w, &v, h) < 2)
        fail_msg("%s: expected \"<CODE> <offset>\" or \"ok <records> <digest>\"", path);
    snprintf(what, cap, "%s", w);
    *a = v;
    memcpy(hex, h, sizeof(h));
    free(b.p);
}

static void stream__golden_files(void **state)
{
    fx *f = *state;
    char path[2048], exp_path[2100], what[64], hex[33];
    int regen = getenv("BINDLOG_REGEN_GOLDEN") != NULL;
    int checked = 0;

    if (regen)
        regen_golden(f);
    for (int valid = 1; valid >= 0; valid--) {
        char sub[1100];
        snprintf(sub, sizeof(sub), "%s/%s", data_dir(), valid ? "valid" : "invalid");
        DIR *dd = opendir(sub);
        if (dd == NULL)
            fail_msg("no golden directory %s", sub);
        struct dirent *de;
        while ((de = readdir(dd)) != NULL) {
            size_t nl = strlen(de->d_name);
            if (nl < 9 || strcmp(de->d_name + nl - 9, ".blstream") != 0)
                continue;
            snprintf(path, sizeof(path), "%s/%s", sub, de->d_name);
            snprintf(exp_path, sizeof(exp_path), "%.*s.expect", (int)(strlen(path) - 9), path);
            bytes x = read_file(path);
            char name[64];
            snprintf(name, sizeof(name), "g%d", checked);
            bindlog *t = new_store(f, name);
            snap before, after;
            take(t, &before);
            uint64_t n = 0, off = 0;
            int rc = import_bytes(f, t, x.p, x.n, &n, &off, 0);
            unsigned char d[BINDLOG_DIGEST_SIZE];
            char got_hex[33];
            assert_int_equal(bindlog_digest(t, d, NULL), 0);
            bindlog_digest_hex(d, got_hex);
            if (regen) {
                char line[128];
                if (valid)
                    snprintf(line, sizeof(line), "ok %llu %s\n", (unsigned long long)n, got_hex);
                else
                    snprintf(line, sizeof(line), "%s %llu\n", bindlog_code_name(rc),
                             (unsigned long long)off);
                write_file(exp_path, line, strlen(line));
            }
            uint64_t a;
            read_expect(exp_path, what, sizeof(what), &a, hex);
            if (valid) {
                if (rc != 0)
                    fail_msg("%s: %s at %llu", path, bindlog_strerror(rc), (unsigned long long)off);
                assert_string_equal(what, "ok");
                assert_int_equal(n, a);
                assert_string_equal(got_hex, hex);
                assert_clean(t);
                /* the format is stable: the golden files were written
                 * with records and values of older versions, which come
                 * back in the current ones; that re-export imports to the
                 * same state and re-exports to exactly its own bytes */
                bytes y = export_bytes(f, t, 0, NULL);
                char name2[64];
                snprintf(name2, sizeof(name2), "r%d", checked);
                bindlog *t2 = new_store(f, name2);
                uint64_t n2 = 0, off2 = 0;
                assert_int_equal(import_bytes(f, t2, y.p, y.n, &n2, &off2, 0), 0);
                assert_int_equal(n2, n);
                assert_int_equal(bindlog_digest(t2, d, NULL), 0);
                bindlog_digest_hex(d, got_hex);
                assert_string_equal(got_hex, hex);
                bytes z = export_bytes(f, t2, 0, NULL);
                assert_int_equal(z.n, y.n);
                assert_memory_equal(z.p, y.p, y.n);
                bindlog_close(t2);
                free(z.p);
                free(y.p);
            } else {
                if (strcmp(bindlog_code_name(rc), what) != 0 || off != a)
                    fail_msg("%s: got %s at %llu, expected %s at %llu", path,
                             bindlog_code_name(rc), (unsigned long long)off, what,
                             (unsigned long long)a);
                take(t, &after);
                assert_same(&before, &after);
            }
            bindlog_close(t);
            free(x.p);
            checked++;
        }
        closedir(dd);
    }
    assert_true(checked >= 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(stream__round_trip_keeps_digest, setup, teardown),
        cmocka_unit_test_setup_teardown(stream__round_trip_with_base_image, setup, teardown),
        cmocka_unit_test_setup_teardown(stream__incremental_appends_at_head, setup, teardown),
        cmocka_unit_test_setup_teardown(stream__every_truncation_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(stream__every_bit_flip_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(stream__damaged_record_named_by_its_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(stream__golden_files, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
