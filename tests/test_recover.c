/*
 * test_recover.c -- bindlog_recover(): a damaged store rebuilt from what is
 * intact, and an exact account of what was lost.
 *
 * Stores are damaged behind the library's back (a page zeroed, the file
 * cut, a base image page broken).  Whatever the damage: recover never
 * writes to the store it reads, the new store always checks clean, an
 * undamaged store recovers to the same digest, and the report names the
 * lost LSN ranges exactly.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindlog.h"
#include "core/record.h"
#include "lmdb/pagecheck.h"
#include "testutil.h"
#include "workload.h"

#define EVENTS 1500

typedef struct fx {
    char *tmp;
    char dir[1024], out[1024];
    unsigned char digest[BINDLOG_DIGEST_SIZE];
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    wl_gen g;
    bindlog *s;

    f->tmp = tu_mkdtemp("recover");
    snprintf(f->dir, sizeof f->dir, "%s/store", f->tmp);
    snprintf(f->out, sizeof f->out, "%s/new", f->tmp);
    wl_now = 1000000;
    s = wl_open_store(f->dir);
    wl_gen_init(&g, 16);
    for (int i = 0; i < EVENTS; i++)
        wl_gen_step(&g, s);
    assert_int_equal(bindlog_digest(s, f->digest, NULL), 0);
    bindlog_close(s);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    tu_rmtree(f->tmp);
    free(f->tmp);
    free(f);
    return 0;
}

/* ---- helpers ------------------------------------------------------------------ */

static char *data_path(const char *dir)
{
    static char p[1200];
    snprintf(p, sizeof p, "%s/data.mdb", dir);
    return p;
}

/* The whole file, for "recover wrote nothing". */
static unsigned char *slurp(const char *path, size_t *n)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    unsigned char *b = malloc((size_t)st.st_size + 1);
    assert_int_equal(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
    close(fd);
    *n = (size_t)st.st_size;
    return b;
}

/* The leaf of `table` holding key, found with the validator. */
typedef struct leaf_find {
    uint64_t last;
} leaf_find;

static int note_page(void *ctx, uint64_t pgno, unsigned want, char *why, size_t cap)
{
    (void)want;
    (void)why;
    (void)cap;
    ((leaf_find *)ctx)->last = pgno;
    return 0;
}

static uint64_t leaf_of(const char *dir, int table, const void *key, size_t kn,
                        uint64_t *first_lsn, uint64_t *nkeys)
{
    size_t size;
    unsigned char *map = slurp(data_path(dir), &size);
    bl_pc_meta m[2];
    char why[240];
    int ok[2];
    for (unsigned s = 0; s < 2; s++)
        ok[s] = bl_pc_meta_read(map + s * 4096, 4096, s, &m[s], why, sizeof why);
    int cur = bl_pc_meta_pick(m, ok, why, sizeof why);
    assert_true(cur >= 0);
    bl_pc_file f = {map, size / m[cur].psize, m[cur].psize, m[cur].last_pg};
    const unsigned char *v;
    size_t vn;
    const char *name = bl_pc_tree_name(table);
    bl_pc_db db;
    assert_int_equal(bl_pc_search(&f, &m[cur].dbs[1], BL_PC_MAIN, name, strlen(name), 0, NULL,
                                  NULL, &v, &vn, NULL),
                     0);
    bl_pc_db_decode(v, &db);
    leaf_find lf = {0};
    assert_int_equal(bl_pc_search(&f, &db, table, key, kn, 0, note_page, &lf, &v, &vn, NULL), 0);
    const unsigned char *p = map + lf.last * f.psize;
    if (nkeys != NULL)
        *nkeys = (bl_get16(p + 12) - 16) / 2;
    if (first_lsn != NULL)
        *first_lsn = bl_get64be(p + bl_get16(p + 16) + 8);
    free(map);
    return lf.last;
}

static void zero_page(const char *dir, uint64_t pg)
{
    unsigned char z[4096] = {0};
    int fd = open(data_path(dir), O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, z, sizeof z, (off_t)(pg * 4096)), (ssize_t)sizeof z);
    close(fd);
}

/* Every session's children, as the iterator lists them (the sibling chain
 * through the log, then the children table), are exactly the sessions that
 * name it as their parent and were created after it (docs/format.md), each
 * once. */
static void assert_children_consistent(bindlog *s)
{
    bindlog_iter *all, *it;
    bindlog_session se, ch, pa;
    size_t expected = 0, listed = 0;
    int rc;

    assert_int_equal(bindlog_sessions_iter(s, &all), 0);
    while ((rc = bindlog_iter_next_session(all, &se, NULL, 0)) == 1) {
        if (se.parent_id[0] != '\0' && bindlog_session_get(s, se.parent_id, &pa, NULL, 0) == 0 &&
            pa.created_lsn != 0 && pa.created_lsn < se.created_lsn)
            expected++;
        uint64_t prev = UINT64_MAX;
        int in_table = 0;
        assert_int_equal(bindlog_children_iter(s, se.session_id, &it), 0);
        while ((rc = bindlog_iter_next_session(it, &ch, NULL, 0)) == 1) {
            assert_string_equal(ch.parent_id, se.session_id);
            assert_true(ch.created_lsn > se.created_lsn);
            /* newest first along the chain; the table's (id order) after */
            if (!in_table && ch.created_lsn >= prev)
                in_table = 1;
            if (!in_table)
                prev = ch.created_lsn;
            listed++;
        }
        if (rc != 0)
            fail_msg("children of %s: %s", se.session_id, bindlog_last_error());
        bindlog_iter_close(it);
    }
    assert_int_equal(rc, 0);
    bindlog_iter_close(all);
    assert_int_equal(listed, expected);
}

/* Recover dir into out; the new store checks clean, lists every session's
 * children; its digest into dg. */
static void recover_ok(const char *dir, const char *out, bindlog_recover_report *r,
                       unsigned char dg[BINDLOG_DIGEST_SIZE])
{
    bindlog *s;
    bindlog_check_report chk;
    int rc = bindlog_recover(dir, out, r, NULL, NULL);
    if (rc != 0)
        fail_msg("recover: %s: %s", bindlog_code_name(rc), bindlog_last_error());
    assert_int_equal(bindlog_open(&s, out, NULL), 0);
    assert_int_equal(bindlog_check(s, &chk, NULL, NULL), 0);
    if (chk.problems != 0)
        fail_msg("the recovered store does not check clean: %s", chk.message);
    assert_int_equal(bindlog_digest(s, dg, NULL), 0);
    assert_memory_equal(dg, r->digest, BINDLOG_DIGEST_SIZE);
    assert_children_consistent(s);
    bindlog_close(s);
}

/* A recovery from the log that lost exactly one LSN, of one key. */
/* Every session of a store as one line of text, in id order. */
typedef struct sess_dump {
    char **line;
    size_t n;
} sess_dump;

static void dump_sessions(const char *dir, sess_dump *d)
{
    bindlog *s;
    bindlog_iter *it;
    bindlog_session ss;
    unsigned char org[256];
    bindlog_options ro = BINDLOG_OPTIONS_INIT;
    ro.read_only = 1;
    memset(d, 0, sizeof *d);
    assert_int_equal(bindlog_open(&s, dir, &ro), 0);
    assert_int_equal(bindlog_sessions_iter(s, &it), 0);
    while (bindlog_iter_next_session(it, &ss, org, sizeof org) == 1) {
        char line[1400], hex[2 * sizeof org + 1] = "";
        size_t on = ss.origin_len < sizeof org ? ss.origin_len : sizeof org;
        for (size_t i = 0; i < on; i++)
            snprintf(hex + 2 * i, 3, "%02x", org[i]);
        snprintf(line, sizeof line, "%s key=%s parent=%s created=%" PRIu64 "@%" PRId64
                 " ended=%" PRIu64 "@%" PRId64 " reason=%s origin=%s",
                 ss.session_id, ss.key, ss.parent_id, ss.created_lsn, ss.created_ms,
                 ss.ended_lsn, ss.ended_ms, ss.end_reason, hex);
        d->line = realloc(d->line, (d->n + 1) * sizeof(char *));
        assert_non_null(d->line);
        d->line[d->n++] = strdup(line);
    }
    bindlog_iter_close(it);
    bindlog_close(s);
}

static void dump_free(sess_dump *d)
{
    for (size_t i = 0; i < d->n; i++)
        free(d->line[i]);
    free(d->line);
}

/* The sessions of `a` and `b` whose lines differ (or that only one has),
 * by id, in *ids (a static buffer, space-separated); their number. */
static size_t dump_diff(const sess_dump *a, const sess_dump *b, char *ids, size_t cap)
{
    size_t i = 0, j = 0, n = 0;
    ids[0] = '\0';
    while (i < a->n || j < b->n) {
        size_t ai = i < a->n ? strcspn(a->line[i], " ") : 0, bj = j < b->n ? strcspn(b->line[j], " ") : 0;
        int c = i >= a->n ? 1 : j >= b->n ? -1 : strncmp(a->line[i], b->line[j], ai > bj ? ai : bj);
        const char *id = c <= 0 ? a->line[i] : b->line[j];
        size_t idn = c <= 0 ? ai : bj;
        if (c != 0 || strcmp(a->line[i], b->line[j]) != 0) {
            print_message("  %s\n  %s\n", c <= 0 ? a->line[i] : "-", c >= 0 ? b->line[j] : "-");
            snprintf(ids + strlen(ids), cap - strlen(ids), "%s%.*s", n ? " " : "", (int)idn, id);
            n++;
        }
        if (c <= 0)
            i++;
        if (c >= 0)
            j++;
    }
    return n;
}

static void assert_lost_one(const bindlog_recover_report *r, uint64_t log_records, uint64_t lsn,
                            const char *key, uint64_t new_head)
{
    assert_int_equal(r->log_records, log_records);
    assert_int_equal(r->records_lost, 1);
    assert_int_equal(r->nranges, 1);
    assert_int_equal(r->ranges[0].first, lsn);
    assert_int_equal(r->ranges[0].last, lsn);
    assert_int_equal(r->nkeys, 1);
    assert_string_equal(r->keys[0], key);
    assert_int_equal(r->new_head_lsn, new_head);
}

/* ---- cases ------------------------------------------------------------------------ */

static void recover__undamaged_store_same_digest(void **state)
{
    fx *f = *state;
    bindlog_recover_report r;
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    size_t n0, n1;
    unsigned char *before = slurp(data_path(f->dir), &n0);

    recover_ok(f->dir, f->out, &r, dg);
    assert_memory_equal(dg, f->digest, sizeof dg);
    assert_int_equal(r.records_found, EVENTS);
    assert_int_equal(r.head_lsn, EVENTS);
    assert_int_equal(r.records_lost, 0);
    assert_int_equal(r.records_by_effect, 0);
    assert_int_equal(r.records_skipped, 0);
    assert_int_equal(r.nranges, 0);
    assert_int_equal(r.nkeys, 0);
    assert_int_equal(r.cut_lsn, 0);
    assert_int_equal(r.records_rederived, EVENTS);
    assert_int_equal(r.damaged_pages, 0);
    assert_int_equal(r.base_image, 0);
    bindlog_recover_report_free(&r);

    /* nothing was written where it read */
    unsigned char *after = slurp(data_path(f->dir), &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(before);
    free(after);

    /* a compacted store: its base image is used */
    bindlog *s;
    uint64_t removed;
    char out2[1100];
    assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
    assert_int_equal(bindlog_compact(s, 1000, &removed, NULL, NULL), 0);
    bindlog_close(s);
    snprintf(out2, sizeof out2, "%s/new2", f->tmp);
    recover_ok(f->dir, out2, &r, dg);
    assert_memory_equal(dg, f->digest, sizeof dg);
    assert_int_equal(r.base_image, 1);
    assert_int_equal(r.base_lsn, 999);
    assert_int_equal(r.records_lost, 0);
    assert_int_equal(r.records_rederived, EVENTS - 999);
    bindlog_recover_report_free(&r);
}

/* A zeroed log leaf: the LSNs lost with it are reported as lost ranges
 * inside the leaf, the keys they touched as keys with a gap, and the new
 * store checks clean. */
static void recover__zeroed_log_leaf(void **state)
{
    fx *f = *state;
    unsigned char kb[8], dg[BINDLOG_DIGEST_SIZE];
    uint64_t first, n;
    bindlog_recover_report r;

    bl_put64be(kb, 700);
    uint64_t pg = leaf_of(f->dir, BL_DB_LOG, kb, 8, &first, &n);
    /* the key of every record on the leaf, before it goes */
    char(*leaf_keys)[BINDLOG_KEY_MAX + 1] = calloc(n, sizeof *leaf_keys);
    assert_non_null(leaf_keys);
    bindlog *s;
    bindlog_iter *it;
    bindlog_record rec;
    assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
    assert_int_equal(bindlog_log_iter(s, first, first + n - 1, &it), 0);
    while (bindlog_iter_next_record(it, &rec) == 1)
        snprintf(leaf_keys[rec.lsn - first], sizeof leaf_keys[0], "%s", rec.key);
    bindlog_iter_close(it);
    bindlog_close(s);
    zero_page(f->dir, pg);
    recover_ok(f->dir, f->out, &r, dg);
    /* every key that lost a record is named: by the stored state, or by
     * the next record of the key, which names its previous LSN */
    for (size_t i = 0; i < r.nranges; i++)
        for (uint64_t l = r.ranges[i].first; l <= r.ranges[i].last; l++) {
            int named = 0;
            for (size_t k = 0; k < r.nkeys && !named; k++)
                named = strcmp(r.keys[k], leaf_keys[l - first]) == 0;
            if (!named)
                fail_msg("LSN %llu of key %s is lost and its key is not named",
                         (unsigned long long)l, leaf_keys[l - first]);
        }
    free(leaf_keys);
    /* At most the leaf's records are lost: older copies of it in free
     * pages may give some back (which copies exist depends on when the
     * background checkpoints ran: once, under a loaded ctest -j2, one of
     * them held a record more), so every lost range lies inside the leaf
     * and the ranges add up to the loss. */
    assert_int_equal(r.records_found + r.records_lost, EVENTS);
    assert_true(r.records_lost <= n);
    assert_true(r.nranges >= (r.records_lost > 0));
    uint64_t in_ranges = 0;
    for (size_t i = 0; i < r.nranges; i++) {
        assert_true(r.ranges[i].first >= first && r.ranges[i].last <= first + n - 1);
        assert_true(r.ranges[i].first <= r.ranges[i].last);
        in_ranges += r.ranges[i].last - r.ranges[i].first + 1;
    }
    assert_int_equal(in_ranges, r.records_lost);
    assert_true(r.damaged_pages >= 1);
    if (r.records_lost > 0) {
        assert_true(r.nkeys >= 1);
        assert_true(r.cut_lsn >= r.ranges[r.nranges - 1].last);
    }
    assert_int_equal(r.new_head_lsn, EVENTS);
    for (size_t i = 1; i < r.nkeys; i++)
        assert_true(strcmp(r.keys[i - 1], r.keys[i]) < 0);
    bindlog_recover_report_free(&r);

    /* A session whose creation recover lost (created_lsn 0) is nobody's
     * parent: re-opened on a key and split, its child is not indexed when
     * compaction folds the split, and the store still checks clean and
     * lists every session's children. */
    bindlog *s2;
    bindlog_iter *si;
    bindlog_session se;
    bindlog_result res;
    char lost[BINDLOG_ID_MAX + 1] = "";
    uint64_t removed;
    assert_int_equal(bindlog_open(&s2, f->out, NULL), 0);
    assert_int_equal(bindlog_sessions_iter(s2, &si), 0);
    while (lost[0] == '\0' && bindlog_iter_next_session(si, &se, NULL, 0) == 1)
        if (se.created_lsn == 0 && se.ended_lsn != 0)
            snprintf(lost, sizeof lost, "%s", se.session_id);
    bindlog_iter_close(si);
    if (lost[0] != '\0') {
        assert_int_equal(bindlog_bind(s2, "after:recover", lost, NULL, NULL, NULL, 0, &res),
                         BINDLOG_APPLIED);
        assert_int_equal(bindlog_split(s2, "after:recover", lost, "after-recover-child",
                                       BINDLOG_ANY_GENERATION, NULL, 0, &res),
                         BINDLOG_APPLIED);
        assert_int_equal(bindlog_compact(s2, res.lsn + 1, &removed, NULL, NULL), 0);
        bindlog_check_report chk;
        assert_int_equal(bindlog_check(s2, &chk, NULL, NULL), 0);
        if (chk.problems != 0)
            fail_msg("after a child of a lost creation: %s", chk.message);
        assert_children_consistent(s2);
    } else {
        print_message("no session lost its creation in this run: the re-open is skipped\n");
    }
    bindlog_close(s2);
}

/* The file cut at several lengths: recovered every time, a clean store. */
static void recover__truncated_file(void **state)
{
    fx *f = *state;
    struct stat st;
    assert_int_equal(stat(data_path(f->dir), &st), 0);
    for (int i = 1; i <= 4; i++) {
        char dir[1100], out[1100], cmd[2400];
        bindlog_recover_report r;
        unsigned char dg[BINDLOG_DIGEST_SIZE];
        snprintf(dir, sizeof dir, "%s/cut%d", f->tmp, i);
        snprintf(out, sizeof out, "%s/new%d", f->tmp, i);
        snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", f->dir, dir);
        assert_int_equal(system(cmd), 0);
        assert_int_equal(truncate(data_path(dir), st.st_size * i / 5 + 1234), 0);
        recover_ok(dir, out, &r, dg);
        assert_true(r.head_lsn == EVENTS || r.records_lost > 0);
        bindlog_recover_report_free(&r);
    }
}

/* Pages zeroed or scrambled anywhere: every store that check flags (or
 * that does not open) recovers to a store that checks clean, and a store
 * check passes recovers to its own digest. */
static void recover__damage_always_recovers_clean(void **state)
{
    fx *f = *state;
    struct stat st;
    uint64_t rng = 16;
    assert_int_equal(stat(data_path(f->dir), &st), 0);
    uint64_t pages = (uint64_t)st.st_size / 4096;
    for (int i = 0; i < 40; i++) {
        char dir[1100], out[1100], cmd[2400];
        bindlog_recover_report r;
        bindlog_check_report chk;
        unsigned char dg[BINDLOG_DIGEST_SIZE], orig[BINDLOG_DIGEST_SIZE];
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        bindlog *s;
        int flagged = 1;

        snprintf(dir, sizeof dir, "%s/d%d", f->tmp, i);
        snprintf(out, sizeof out, "%s/n%d", f->tmp, i);
        snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", f->dir, dir);
        assert_int_equal(system(cmd), 0);
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        uint64_t pg = 2 + (rng >> 33) % (pages - 2);
        unsigned char junk[4096];
        for (size_t j = 0; j < sizeof junk; j++)
            junk[j] = i % 2 ? 0 : (unsigned char)((rng >> (j % 56)) ^ j);
        int fd = open(data_path(dir), O_WRONLY);
        assert_int_equal(pwrite(fd, junk, sizeof junk, (off_t)(pg * 4096)), 4096);
        close(fd);

        o.read_only = 1;
        if (bindlog_open(&s, dir, &o) == 0) {
            int rc = bindlog_check(s, &chk, NULL, NULL);
            flagged = rc != 0 || chk.problems != 0;
            if (!flagged)
                assert_int_equal(bindlog_digest(s, orig, NULL), 0);
            bindlog_close(s);
        }
        recover_ok(dir, out, &r, dg);
        if (!flagged) {
            assert_memory_equal(dg, orig, sizeof dg);
            assert_int_equal(r.records_lost, 0);
        }
        bindlog_recover_report_free(&r);
        tu_rmtree(dir);
        tu_rmtree(out);
    }
}

/* A damaged base image: recovery starts at LSN 1 with what survives. */
static void recover__damaged_base_image(void **state)
{
    fx *f = *state;
    bindlog *s;
    uint64_t removed;
    bindlog_recover_report r;
    unsigned char dg[BINDLOG_DIGEST_SIZE];

    assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
    assert_int_equal(bindlog_compact(s, 1200, &removed, NULL, NULL), 0);
    bindlog_close(s);
    /* the base image's sessions table, at its first key */
    char first[BINDLOG_ID_MAX + 1];
    {
        bindlog_iter *it;
        bindlog_session ss;
        assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
        assert_int_equal(bindlog_sessions_iter(s, &it), 0);
        assert_int_equal(bindlog_iter_next_session(it, &ss, NULL, 0), 1);
        snprintf(first, sizeof first, "%s", ss.session_id);
        bindlog_iter_close(it);
        bindlog_close(s);
    }
    uint64_t pg = leaf_of(f->dir, BL_DB_BASE_SESSIONS, first, strlen(first), NULL, NULL);
    zero_page(f->dir, pg);
    recover_ok(f->dir, f->out, &r, dg);
    assert_int_equal(r.base_image, -1);
    assert_int_equal(r.base_lsn, 0);
    bindlog_recover_report_free(&r);
}

static void recover__refusals(void **state)
{
    fx *f = *state;
    bindlog_recover_report r;
    char p[1100];

    /* the output must be new */
    assert_int_equal(bindlog_recover(f->dir, f->dir, &r, NULL, NULL), BINDLOG_EEXIST);
    assert_non_null(strstr(bindlog_last_error(), "not empty"));
    bindlog_recover_report_free(&r);
    assert_int_equal(bindlog_recover(f->dir, NULL, &r, NULL, NULL), BINDLOG_EINVAL);
    assert_int_equal(bindlog_recover(f->dir, f->out, NULL, NULL, NULL), BINDLOG_EINVAL);
    /* nothing there */
    snprintf(p, sizeof p, "%s/nothing", f->tmp);
    assert_int_equal(bindlog_recover(p, f->out, &r, NULL, NULL), BINDLOG_ENOTFOUND);
    bindlog_recover_report_free(&r);
    /* a file that is not a store */
    snprintf(p, sizeof p, "%s/junk", f->tmp);
    assert_int_equal(mkdir(p, 0700), 0);
    FILE *j = fopen(data_path(p), "w");
    for (int i = 0; i < 20000; i++)
        fputc("bindlog"[i % 7], j);
    fclose(j);
    assert_int_equal(bindlog_recover(p, f->out, &r, NULL, NULL), BINDLOG_ENOTSTORE);
    bindlog_recover_report_free(&r);
    struct stat st;
    assert_int_not_equal(stat(f->out, &st), 0); /* nothing built */
    bindlog_recover_report_free(NULL);
}

/* In a child process: open dir (NORMAL, checkpoints manual), run
 * writes(s, arg) -- 0 or the child's exit status -- and die without
 * closing, so that nothing is folded into data.mdb. */
/* The dying writer's clock: stopped at its start, so that all its events
 * share one millisecond.  A lost record's time is salvaged from the record
 * before it: on a busy machine two events a millisecond apart made the
 * salvaged session differ from the original's. */
static int64_t stopped_ms;
static int64_t stopped_clock(void *ctx)
{
    (void)ctx;
    return stopped_ms;
}

static void in_dying_writer(const char *dir, int (*writes)(bindlog *s, int arg), int arg)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        bindlog *s;
        setenv("BINDLOG_CHECKPOINT", "manual", 1);
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        o.durability = BINDLOG_DURABILITY_NORMAL;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        stopped_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
        o.clock_ms = stopped_clock;
        if (bindlog_open(&s, dir, &o) != 0)
            _exit(2);
        _exit(writes(s, arg)); /* no close: nothing folded */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static int bind_wal_keys(bindlog *s, int n)
{
    char key[32], sid[32];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "wal:k%d", i % 20);
        snprintf(sid, sizeof sid, "wal:s%d", i);
        if (bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
            return 3;
    }
    return 0;
}

/* A process binds n keys and dies without closing: its records are in the
 * write-ahead log only (one frame each), after the fixture's EVENTS. */
static void log_only(const char *dir, int n) { in_dying_writer(dir, bind_wal_keys, n); }

/* log_only, then the store's digest before anything damages it. */
static void log_only_digest(const char *dir, int n, unsigned char full[BINDLOG_DIGEST_SIZE])
{
    bindlog *s;
    bindlog_options ro = BINDLOG_OPTIONS_INIT;
    ro.read_only = 1;
    log_only(dir, n);
    assert_int_equal(bindlog_open(&s, dir, &ro), 0);
    assert_int_equal(bindlog_digest(s, full, NULL), 0);
    bindlog_close(s);
}

/* Records only the write-ahead log holds (a process died before any
 * checkpoint folded them into data.mdb): recover takes them from the log's
 * valid frames, says so, and keeps them when data.mdb is damaged. */
static void recover__keeps_the_logs_records(void **state)
{
    fx *f = *state;
    bindlog_recover_report r;
    bindlog_stats st;
    unsigned char full[BINDLOG_DIGEST_SIZE], dg[BINDLOG_DIGEST_SIZE];
    char out[1100], path[1100];
    bindlog *s;

    log_only(f->dir, 200);
    bindlog_options ro = BINDLOG_OPTIONS_INIT;
    ro.read_only = 1;
    assert_int_equal(bindlog_open(&s, f->dir, &ro), 0);
    assert_int_equal(bindlog_stats_get(s, &st), 0);
    assert_int_equal(st.head_lsn, EVENTS + 200);
    assert_int_equal(st.checkpoint_lsn, EVENTS); /* the 200 are in the log only */
    assert_int_equal(bindlog_digest(s, full, NULL), 0);
    bindlog_close(s);

    /* undamaged: everything, the same digest; the log's part is named */
    recover_ok(f->dir, f->out, &r, dg);
    assert_memory_equal(dg, full, sizeof dg);
    assert_int_equal(r.records_found, EVENTS + 200);
    assert_int_equal(r.records_lost, 0);
    assert_int_equal(r.new_head_lsn, EVENTS + 200);
    assert_int_equal(r.log_state, 1);
    assert_int_equal(r.log_records, 200);
    assert_int_equal(r.log_first_lsn, EVENTS + 1);
    assert_int_equal(r.log_last_lsn, EVENTS + 200);
    assert_string_equal(r.log_why, "");
    bindlog_recover_report_free(&r);

    /* data.mdb damaged (a log leaf zeroed): the log's records still come */
    unsigned char kb[8];
    uint64_t first, n;
    bl_put64be(kb, 700);
    zero_page(f->dir, leaf_of(f->dir, BL_DB_LOG, kb, 8, &first, &n));
    snprintf(out, sizeof out, "%s/new-damaged", f->tmp);
    recover_ok(f->dir, out, &r, dg);
    /* (older copies of the leaf in free pages may give some back: the
     * checkpoints that wrote it ran when the machine let them) */
    assert_true(r.records_lost <= n);
    assert_int_equal(r.log_records, 200);
    assert_int_equal(r.log_last_lsn, EVENTS + 200);
    assert_int_equal(r.new_head_lsn, EVENTS + 200);
    bindlog_recover_report_free(&r);
    bindlog_binding b;
    assert_int_equal(bindlog_open(&s, out, &ro), 0);
    assert_int_equal(bindlog_get(s, "wal:k7", &b), 0);
    assert_string_equal(b.session_id, "wal:s187");
    assert_int_equal(b.lsn, EVENTS + 188);
    bindlog_close(s);

    /* without the log file, its records are lost, and the report says
     * there was none */
    snprintf(path, sizeof path, "%s/bindlog.wal", f->dir);
    assert_int_equal(unlink(path), 0);
    snprintf(out, sizeof out, "%s/new-nolog", f->tmp);
    recover_ok(f->dir, out, &r, dg);
    assert_int_equal(r.log_state, 0);
    assert_int_equal(r.log_records, 0);
    assert_int_equal(r.new_head_lsn, EVENTS);
    bindlog_recover_report_free(&r);

    /* a log that is a link is never followed */
    assert_int_equal(symlink("/dev/zero", path), 0);
    snprintf(out, sizeof out, "%s/new-linked", f->tmp);
    recover_ok(f->dir, out, &r, dg);
    assert_int_equal(r.log_state, -1);
    assert_non_null(strstr(r.log_why, "symbolic link"));
    bindlog_recover_report_free(&r);
}

/* The byte of bindlog.wal where the frame holding `lsn` starts (one
 * record per frame: log_only commits them one by one). */
static size_t frame_of(const char *dir, uint64_t lsn)
{
    char path[1100];
    size_t n, at = 0;
    int seen = 0;
    snprintf(path, sizeof path, "%s/bindlog.wal", dir);
    unsigned char *w = slurp(path, &n);
    for (size_t o = 4096; o + 64 <= n; o += 8)
        if (memcmp(w + o, "BLWF", 4) == 0 && bl_get64(w + o + 24) == lsn) {
            at = o;
            seen++;
        }
    assert_int_equal(seen, 1);
    assert_int_equal(bl_get32(w + at + 32), 1);
    free(w);
    return at;
}

static void flip_wal_byte(const char *dir, size_t at)
{
    char path[1100];
    unsigned char byte;
    snprintf(path, sizeof path, "%s/bindlog.wal", dir);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &byte, 1, (off_t)at), 1);
    byte ^= 0x40;
    assert_int_equal(pwrite(fd, &byte, 1, (off_t)at), 1);
    close(fd);
}

/* Damage the one record of the frame holding `lsn` (a bit of its
 * body), recover into `out`, and check that exactly that LSN is lost:
 * the report in *r (free it), the new store's digest in dg. */
static void lose_one_frame(const char *dir, const char *out, uint64_t lsn,
                           bindlog_recover_report *r, unsigned char dg[BINDLOG_DIGEST_SIZE])
{
    flip_wal_byte(dir, frame_of(dir, lsn) + 64 + 20);
    recover_ok(dir, out, r, dg);
    assert_int_equal(r->records_lost, 1);
    assert_int_equal(r->nranges, 1);
    assert_int_equal(r->ranges[0].first, lsn);
    assert_int_equal(r->ranges[0].last, lsn);
}

/* A damaged frame loses its own records and nothing else: the frames
 * after it stand on their own (their records carry their checksums), and
 * recover takes them although the checksum chain is broken there. */
static void recover__a_damaged_frame_loses_only_its_lsns(void **state)
{
    fx *f = *state;
    bindlog_recover_report r;
    unsigned char dg[BINDLOG_DIGEST_SIZE];

    log_only(f->dir, 200);
    lose_one_frame(f->dir, f->out, EVENTS + 100, &r, dg);
    assert_int_equal(r.log_state, 1);
    assert_int_equal(r.log_records, 199);
    assert_int_equal(r.log_first_lsn, EVENTS + 1);
    assert_int_equal(r.log_last_lsn, EVENTS + 200);
    assert_int_equal(r.new_head_lsn, EVENTS + 200);
    bindlog_recover_report_free(&r);
}

/* Every wal:k key bound as the writer was told: key i % 20 last got
 * session wal:s(i) of the last i < n with that remainder. */
static void assert_wal_keys(const char *out, int n)
{
    bindlog *s;
    bindlog_binding b;
    bindlog_options ro = BINDLOG_OPTIONS_INIT;
    ro.read_only = 1;
    assert_int_equal(bindlog_open(&s, out, &ro), 0);
    for (int k = 0; k < 20 && k < n; k++) {
        char key[32], sid[32];
        int last = k + (n - 1 - k) / 20 * 20;
        snprintf(key, sizeof key, "wal:k%d", k);
        snprintf(sid, sizeof sid, "wal:s%d", last);
        int rc = bindlog_get(s, key, &b);
        if (rc != 0 || strcmp(b.session_id, sid) != 0)
            fail_msg("%s: %s, want %s", key, rc ? bindlog_code_name(rc) : b.session_id, sid);
        assert_int_equal(b.lsn, EVENTS + 1 + (uint64_t)last);
    }
    bindlog_close(s);
}

/* The frame of a key's first binding is lost; the key is bound again in
 * intact frames after it.  Those later events re-derive from nothing the
 * state holds (the key was never bound there), so they are taken from the
 * state the log recorded after them: the key ends as the writer was told,
 * only the damaged frame's LSN is named lost, with its key, and the state
 * is the original's (every later event overwrote what the lost one did). */
static void recover__a_later_event_of_a_key_survives_an_earlier_loss(void **state)
{
    fx *f = *state;
    bindlog_recover_report r;
    unsigned char full[BINDLOG_DIGEST_SIZE], dg[BINDLOG_DIGEST_SIZE];
    bindlog *s;
    bindlog_options ro = BINDLOG_OPTIONS_INIT;
    ro.read_only = 1;

    sess_dump before, after;
    char ids[256];

    log_only(f->dir, 200);
    assert_int_equal(bindlog_open(&s, f->dir, &ro), 0);
    assert_int_equal(bindlog_digest(s, full, NULL), 0);
    bindlog_close(s);
    dump_sessions(f->dir, &before);
    /* LSN EVENTS + 6 binds wal:k5 for the first time (to wal:s5); wal:k5 is
     * bound again at EVENTS + 26, + 46, ... + 186 */
    flip_wal_byte(f->dir, frame_of(f->dir, EVENTS + 6) + 64 + 20);

    recover_ok(f->dir, f->out, &r, dg);
    assert_lost_one(&r, 199, EVENTS + 6, "wal:k5", EVENTS + 200);
    assert_int_equal(r.records_skipped, 0);
    /* wal:s5, created by the lost record and kept as a reference to it,
     * comes back from what survives: its end (a later frame's
     * after-image), its key (the key's next record names the lost LSN as
     * its previous one), no origin and no parent (it had none) */
    dump_sessions(f->out, &after);
    assert_int_equal(dump_diff(&before, &after, ids, sizeof ids), 0);
    dump_free(&before);
    dump_free(&after);
    assert_memory_equal(dg, full, sizeof dg);
    bindlog_recover_report_free(&r);
    assert_wal_keys(f->out, 200);
}

/* Routed messages' times: in 2100, after the clock of every event before
 * them (times never go back along the log). */
#define RT_T0 INT64_C(4102444800000)

/* A key's history with routed messages, in the log only: bind rt:k to
 * rt:s0 (LSN EVENTS + 1), two routed messages (ROUTE records, + 2 and
 * + 3), a split to rt:s1 (+ 4), one more routed message (+ 5); and
 * wal:k0 bound to wal:s0 (+ 6), for a record after the last one of rt:k. */
static int route_writes(bindlog *s, int unused)
{
    bindlog_route_result rr;
    bindlog_policy never = {BINDLOG_RESET_NONE, 0, 0};
    (void)unused;
    if (bindlog_bind(s, "rt:k", "rt:s0", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED ||
        bindlog_route(s, "rt:k", RT_T0, &never, "rt:x", NULL, 0, &rr) < 0 ||
        rr.outcome != BINDLOG_ROUTED ||
        bindlog_route(s, "rt:k", RT_T0 + 100, &never, "rt:x", NULL, 0, &rr) < 0 ||
        rr.outcome != BINDLOG_ROUTED ||
        bindlog_split(s, "rt:k", "rt:s0", "rt:s1", BINDLOG_ANY_GENERATION, NULL, 0, NULL) !=
            BINDLOG_APPLIED ||
        bindlog_route(s, "rt:k", RT_T0 + 200, &never, "rt:x", NULL, 0, &rr) < 0 ||
        rr.outcome != BINDLOG_ROUTED ||
        bindlog_bind(s, "wal:k0", "wal:s0", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
        return 3;
    return 0;
}

static void log_only_routes(const char *dir) { in_dying_writer(dir, route_writes, 0); }

/* The frame of a key's first binding is lost, and ROUTE records of that
 * key follow it.  A ROUTE does not move the binding: it re-derives only on
 * a bound key, which the loss took away, so recover takes the key's state
 * from what the log recorded after it, like any later event's: rt:k ends
 * bound to rt:s1 with the last routed message's time, only the lost LSN
 * is named, with its key, and the state is the original's. */
static void recover__routes_after_a_lost_binding_survive(void **state)
{
    fx *f = *state;
    bindlog_recover_report r;
    unsigned char full[BINDLOG_DIGEST_SIZE], dg[BINDLOG_DIGEST_SIZE];
    bindlog *s;
    bindlog_binding b;
    bindlog_options ro = BINDLOG_OPTIONS_INIT;
    ro.read_only = 1;

    sess_dump before, after;
    char ids[256];

    log_only_routes(f->dir);
    assert_int_equal(bindlog_open(&s, f->dir, &ro), 0);
    assert_int_equal(bindlog_digest(s, full, NULL), 0);
    assert_int_equal(bindlog_get(s, "rt:k", &b), 0);
    assert_int_equal(b.last_activity_ms, RT_T0 + 200);
    bindlog_close(s);
    dump_sessions(f->dir, &before);
    flip_wal_byte(f->dir, frame_of(f->dir, EVENTS + 1) + 64 + 20);

    recover_ok(f->dir, f->out, &r, dg);
    assert_lost_one(&r, 5, EVENTS + 1, "rt:k", EVENTS + 6);
    /* rt:s0 was created by the lost record and kept as a reference to it:
     * it comes back with its key, its creation LSN and its end, and as its
     * creation time the last surviving record's before it (this test's
     * earlier records run on another clock, so that differs) */
    dump_sessions(f->out, &after);
    assert_int_equal(dump_diff(&before, &after, ids, sizeof ids), 1);
    assert_string_equal(ids, "rt:s0");
    for (size_t i = 0; i < after.n; i++)
        if (strncmp(after.line[i], "rt:s0 ", 6) == 0)
            assert_non_null(strstr(after.line[i], "key=rt:k parent= created=1501@"));
    dump_free(&before);
    dump_free(&after);
    bindlog_recover_report_free(&r);

    assert_int_equal(bindlog_open(&s, f->out, &ro), 0);
    assert_int_equal(bindlog_get(s, "rt:k", &b), 0);
    assert_string_equal(b.session_id, "rt:s1");
    assert_int_equal(b.last_activity_ms, RT_T0 + 200);
    assert_int_equal(b.lsn, EVENTS + 4); /* the split; a ROUTE does not move it */
    bindlog_close(s);
}

/* A log cut short (the file ends inside the ring): every frame before the
 * cut is read; a log grown past its ring: the ring is read, what lies
 * beyond it ignored, nothing lost. */
static void recover__a_cut_or_grown_log_is_read(void **state)
{
    fx *f = *state;
    bindlog_recover_report r;
    unsigned char full[BINDLOG_DIGEST_SIZE], dg[BINDLOG_DIGEST_SIZE];
    char path[1100], out[1100];
    struct stat st;

    log_only_digest(f->dir, 200, full);
    snprintf(path, sizeof path, "%s/bindlog.wal", f->dir);
    assert_int_equal(stat(path, &st), 0);
    off_t ring = st.st_size;

    /* grown by 1 MiB of junk: everything, the same digest */
    int fd = open(path, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    for (int i = 0; i < 256; i++) {
        unsigned char junk[4096];
        memset(junk, 0xa5 ^ i, sizeof junk);
        memcpy(junk, "BLWF", 4);
        assert_int_equal(write(fd, junk, sizeof junk), (ssize_t)sizeof junk);
    }
    close(fd);
    snprintf(out, sizeof out, "%s/new-grown", f->tmp);
    recover_ok(f->dir, out, &r, dg);
    assert_int_equal(r.log_state, 1);
    assert_int_equal(r.log_records, 200);
    assert_int_equal(r.records_lost, 0);
    assert_int_equal(r.new_head_lsn, EVENTS + 200);
    assert_memory_equal(dg, full, sizeof dg);
    bindlog_recover_report_free(&r);

    /* cut inside the frame of LSN EVENTS + 151: the 150 before it are read */
    assert_int_equal(truncate(path, (off_t)(frame_of(f->dir, EVENTS + 151) + 40)), 0);
    assert_true(ring > (off_t)(frame_of(f->dir, EVENTS + 150) + 4096));
    snprintf(out, sizeof out, "%s/new-cut", f->tmp);
    recover_ok(f->dir, out, &r, dg);
    assert_int_equal(r.log_state, 1);
    assert_non_null(strstr(r.log_why, "cut short"));
    assert_int_equal(r.log_records, 150);
    assert_int_equal(r.log_first_lsn, EVENTS + 1);
    assert_int_equal(r.log_last_lsn, EVENTS + 150);
    assert_int_equal(r.records_lost, 0);
    assert_int_equal(r.new_head_lsn, EVENTS + 150);
    bindlog_recover_report_free(&r);
    assert_wal_keys(out, 150);
}

/* Neither data.mdb nor the log's own header can say whose log it is: both
 * of data.mdb's meta pages and the log's header are zeroed.  Recover then
 * takes the salt most of the log's frames carry and the ring's size from
 * the file, keeps every record the log holds, and data.mdb's records come
 * from its leaves: nothing is lost, the digest is the original's. */
static void recover__the_log_is_read_when_nothing_says_whose_it_is(void **state)
{
    fx *f = *state;
    bindlog_recover_report r;
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    char path[1100];
    unsigned char z[4096] = {0};

    unsigned char full[BINDLOG_DIGEST_SIZE];
    log_only_digest(f->dir, 200, full);
    zero_page(f->dir, 0);
    zero_page(f->dir, 1);
    snprintf(path, sizeof path, "%s/bindlog.wal", f->dir);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, z, sizeof z, 0), (ssize_t)sizeof z);
    close(fd);

    recover_ok(f->dir, f->out, &r, dg);
    assert_int_equal(r.log_state, 1);
    /* with no checkpoint to start from, every frame of the ring counts,
     * the folded ones too (the same records data.mdb's leaves hold) */
    assert_true(r.log_records >= 200);
    assert_int_equal(r.log_last_lsn, EVENTS + 200);
    assert_int_equal(r.records_lost, 0);
    assert_int_equal(r.new_head_lsn, EVENTS + 200);
    assert_memory_equal(dg, full, sizeof dg);
    bindlog_recover_report_free(&r);
    assert_wal_keys(f->out, 200);
}

/* The orphan `child` of a lost `parent`: it still names the parent, its
 * lineage ends at it, and the parent's id has no children. */
static void assert_orphan(bindlog *s, const char *child, const char *parent)
{
    bindlog_session got;
    bindlog_iter *it;
    assert_int_equal(bindlog_session_get(s, child, &got, NULL, 0), 0);
    assert_string_equal(got.parent_id, parent);
    assert_int_equal(bindlog_ancestors_iter(s, child, &it), 0);
    assert_int_equal(bindlog_iter_next_session(it, &got, NULL, 0), 0);
    bindlog_iter_close(it);
    assert_int_equal(bindlog_children_iter(s, parent, &it), 0);
    assert_int_equal(bindlog_iter_next_session(it, &got, NULL, 0), 0);
    bindlog_iter_close(it);
}

/* bindlog_check finds nothing; `what` names the store in the failure. */
static void assert_checks_clean(bindlog *s, const char *what)
{
    bindlog_check_report chk;
    assert_int_equal(bindlog_check(s, &chk, NULL, NULL), 0);
    if (chk.problems != 0)
        fail_msg("check of %s: %s", what, chk.message);
}

/* A child whose parent is lost with every copy of it (its row, its
 * records, its bindings: each page holding its id is zeroed, but for the
 * child's own leaf).  The child keeps naming its parent, which is no
 * session of the new store: the children table holds no entry for it (its
 * key would need the parent's created_lsn), and every path that rebuilds
 * the table from an image (replay and check, bulk or sequential; compact;
 * export and import) agrees with the one the walk wrote.  A session
 * created later under the parent's id is younger than the child, so not
 * its parent to the table either. */
static void recover__a_child_whose_parent_is_lost(void **state)
{
    fx *f = *state;
    bindlog *s;
    bindlog_iter *it;
    bindlog_session ss;
    char child[BINDLOG_ID_MAX + 1] = "", parent[BINDLOG_ID_MAX + 1] = "";
    uint64_t cleaf = 0;

    /* a child and a parent (an id of 4+ bytes, so that few others hold it)
     * on different leaves.  The child is re-opened on a key of its own
     * first: a session the store keeps as a reference (format 5) names its
     * parent through the record that created it, which holds the parent's
     * id and is lost with it; a re-opened one keeps every field itself. */
    for (int skip = 0; child[0] == 0 && skip < 40; skip++) {
        char key[64];
        int seen = 0, found = 0;
        assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
        assert_int_equal(bindlog_sessions_iter(s, &it), 0);
        while (!found && bindlog_iter_next_session(it, &ss, NULL, 0) == 1)
            found = strlen(ss.parent_id) >= 4 && ss.ended_lsn != 0 && seen++ == skip;
        bindlog_iter_close(it);
        assert_true(found);
        snprintf(key, sizeof key, "agent:main:chat:reopened:%d", skip);
        assert_int_equal(bindlog_bind(s, key, ss.session_id, NULL, NULL, NULL, 0, NULL),
                         BINDLOG_APPLIED);
        bindlog_close(s); /* checkpointed: data.mdb holds the whole value */
        uint64_t cl = leaf_of(f->dir, BL_DB_SESSIONS, ss.session_id, strlen(ss.session_id), NULL,
                              NULL);
        if (cl == leaf_of(f->dir, BL_DB_SESSIONS, ss.parent_id, strlen(ss.parent_id), NULL, NULL))
            continue;
        snprintf(child, sizeof child, "%s", ss.session_id);
        snprintf(parent, sizeof parent, "%s", ss.parent_id);
        cleaf = cl;
    }
    assert_true(child[0] != 0);

    /* every page holding the parent's id: as text (its row's key, whole
     * values), and as its 16 bytes when it is a lower-case UUID (what log
     * records of version 4 hold) */
    size_t size;
    unsigned zeroed = 0;
    unsigned char packed[BL_UUID_BYTES];
    int is_uuid = bl_uuid_pack(parent, strlen(parent), packed);
    unsigned char *map = slurp(data_path(f->dir), &size);
    for (uint64_t pg = 2; pg < size / 4096; pg++)
        if (pg != cleaf && (memmem(map + pg * 4096, 4096, parent, strlen(parent)) != NULL ||
                            (is_uuid && memmem(map + pg * 4096, 4096, packed, sizeof packed)))) {
            zero_page(f->dir, pg);
            zeroed++;
        }
    free(map);
    print_message("parent %s (%s): %u pages zeroed\n", parent, is_uuid ? "16 bytes in records" : "text",
                  zeroed);
    assert_true(zeroed >= 2); /* its row and its records at least */

    bindlog_recover_report r;
    unsigned char dg[BINDLOG_DIGEST_SIZE], dg2[BINDLOG_DIGEST_SIZE];
    recover_ok(f->dir, f->out, &r, dg);
    assert_true(r.records_lost > 0);
    bindlog_recover_report_free(&r);

    assert_int_equal(bindlog_open(&s, f->out, NULL), 0);
    assert_int_equal(bindlog_session_get(s, parent, &ss, NULL, 0), BINDLOG_ENOTFOUND);
    assert_orphan(s, child, parent); /* an unknown session has no children */
    /* the child in the base image: check by bulk replay (forced to
     * partitions, where the parent is in none) and sequentially */
    uint64_t head;
    assert_int_equal(bindlog_digest(s, dg2, &head), 0);
    assert_int_equal(bindlog_compact(s, head + 1, NULL, NULL, NULL), 0);
    const char *parts[] = {"3", "1", NULL};
    for (int i = 0; i < 3; i++) {
        if (parts[i] != NULL)
            setenv("BINDLOG_BULK_PARTITIONS", parts[i], 1);
        else
            setenv("BINDLOG_BULK", "0", 1);
        char what[64];
        snprintf(what, sizeof what, "the compacted store (%s)",
                 parts[i] ? parts[i] : "sequential");
        assert_checks_clean(s, what);
        unsetenv("BINDLOG_BULK_PARTITIONS");
        unsetenv("BINDLOG_BULK");
    }
    /* a session named as the lost parent, created now: younger than the
     * child, so its children are its own */
    bindlog_result res;
    assert_int_equal(bindlog_new_session(s, "agent:main:chat:reborn", parent, NULL, NULL, 0, &res),
                     BINDLOG_APPLIED);
    assert_orphan(s, child, parent);
    assert_int_equal(bindlog_digest(s, dg2, &head), 0);
    assert_int_equal(bindlog_compact(s, head + 1, NULL, NULL, NULL), 0);
    assert_checks_clean(s, "the store after the parent's id came back");
    assert_int_equal(bindlog_digest(s, dg, NULL), 0);

    /* export and import: the image path of import agrees (on etcd too,
     * in test_recover_etcd: BINDLOG_TEST_BACKEND=etcd) */
    char path[1100];
    snprintf(path, sizeof path, "%s/stream", f->tmp);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(bindlog_export(s, 0, fd, NULL, NULL, NULL), 0);
    bindlog_close(s);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    char *loc = tu_store_location("imported");
    assert_int_equal(tu_is_etcd_location(loc), tu_backend_is_etcd());
    bindlog *s2 = wl_open_store(loc);
    uint64_t off = 0;
    int irc = bindlog_import(s2, fd, NULL, &off, NULL, NULL);
    if (irc != 0)
        fail_msg("import at %llu: %s: %s", (unsigned long long)off, bindlog_code_name(irc),
                 bindlog_last_error());
    close(fd);
    assert_checks_clean(s2, "the imported store");
    assert_int_equal(bindlog_digest(s2, dg2, NULL), 0);
    assert_memory_equal(dg, dg2, sizeof dg);
    assert_orphan(s2, child, parent);
    bindlog_close(s2);
    tu_store_remove(loc);
    free(loc);
}

/* Three children of one parent, mc:p, each split from it on a key of its
 * own, in the log only: bind mc:k1 to mc:p (LSN EVENTS + 1), split it to
 * mc:c1 (+ 2); the same for mc:k2 and mc:c2 (+ 3, + 4), mc:k3 and mc:c3
 * (+ 5, + 6); last, wal:k0 bound to wal:s0 (+ 7). */
static int three_children_writes(bindlog *s, int unused)
{
    (void)unused;
    for (int i = 1; i <= 3; i++) {
        char key[16], child[16];
        snprintf(key, sizeof key, "mc:k%d", i);
        snprintf(child, sizeof child, "mc:c%d", i);
        if (bindlog_bind(s, key, "mc:p", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED ||
            bindlog_split(s, key, "mc:p", child, BINDLOG_ANY_GENERATION, NULL, 0, NULL) !=
                BINDLOG_APPLIED)
            return 3;
    }
    if (bindlog_bind(s, "wal:k0", "wal:s0", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
        return 3;
    return 0;
}

/* The children of `parent` as the iterator lists them, space-separated in
 * its order, into buf; each must name the parent. */
static void children_of(bindlog *s, const char *parent, char *buf, size_t cap)
{
    bindlog_iter *it;
    bindlog_session ch;
    int rc;
    buf[0] = '\0';
    assert_int_equal(bindlog_children_iter(s, parent, &it), 0);
    while ((rc = bindlog_iter_next_session(it, &ch, NULL, 0)) == 1) {
        assert_string_equal(ch.parent_id, parent);
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? " " : "", ch.session_id);
    }
    if (rc != 0)
        fail_msg("children of %s: %s", parent, bindlog_last_error());
    bindlog_iter_close(it);
}

/* The recovered store `out` lists `want` as mc:p's children (in the
 * iterator's order), and so does it once compaction has folded its whole
 * log, when every child is in the children table (in id order,
 * `want_folded`); check is clean after the fold too. */
static void assert_family(const char *out, const char *want, const char *want_folded)
{
    bindlog *s;
    uint64_t head;
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    char got[256];
    assert_int_equal(bindlog_open(&s, out, NULL), 0);
    children_of(s, "mc:p", got, sizeof got);
    assert_string_equal(got, want);
    assert_int_equal(bindlog_digest(s, dg, &head), 0);
    assert_int_equal(bindlog_compact(s, head + 1, NULL, NULL, NULL), 0);
    assert_checks_clean(s, "the recovered store, compacted");
    assert_children_consistent(s);
    children_of(s, "mc:p", got, sizeof got);
    assert_string_equal(got, want_folded);
    bindlog_close(s);
}

/* The record that created the middle one of a parent's three children is
 * lost, in the write-ahead log.  mc:c3's value links its older sibling
 * through that record's LSN; the new store's chain must not pass through
 * it and leave mc:c1 unreachable.  mc:c2 was kept as a reference to the
 * lost record and nothing else holds it (docs/reliability.md): it is lost
 * with it, and mc:p lists the two that survive. */
static void recover__a_middle_childs_creation_is_lost(void **state)
{
    fx *f = *state;
    bindlog_recover_report r;
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    bindlog *s;
    bindlog_session ss;
    char got[256];
    bindlog_options ro = BINDLOG_OPTIONS_INIT;
    ro.read_only = 1;

    in_dying_writer(f->dir, three_children_writes, 0);
    assert_int_equal(bindlog_open(&s, f->dir, &ro), 0);
    children_of(s, "mc:p", got, sizeof got);
    assert_string_equal(got, "mc:c3 mc:c2 mc:c1"); /* newest first, all in the log */
    bindlog_close(s);

    lose_one_frame(f->dir, f->out, EVENTS + 4, &r, dg);
    assert_int_equal(r.new_head_lsn, EVENTS + 7);
    /* mc:k3's bind at + 5 follows the loss (mc:p is still live on mc:k2
     * without it): its frame's after-images apply it, and the split at + 6
     * re-derives on the state at that cut, so it is in the new log */
    assert_int_equal(r.cut_lsn, EVENTS + 5);
    bindlog_recover_report_free(&r);

    assert_int_equal(bindlog_open(&s, f->out, &ro), 0);
    assert_int_equal(bindlog_session_get(s, "mc:c2", &ss, NULL, 0), BINDLOG_ENOTFOUND);
    assert_int_equal(bindlog_session_get(s, "mc:c3", &ss, NULL, 0), 0);
    assert_int_equal(ss.created_lsn, EVENTS + 6);
    bindlog_close(s);
    /* mc:c3 along the chain (its record is in the new log), then mc:c1
     * from the children table (in the base image) */
    assert_family(f->out, "mc:c3 mc:c1", "mc:c1 mc:c3");
}

/* Filler events: n keys of their own, each bound once. */
static void bind_fillers(bindlog *s, const char *tag, int n)
{
    for (int i = 0; i < n; i++) {
        char key[32], sid[32];
        snprintf(key, sizeof key, "mc:%s:k%d", tag, i);
        snprintf(sid, sizeof sid, "mc:%s:s%d", tag, i);
        assert_int_equal(bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    }
}

/* The same loss in data.mdb, with the child kept: mc:c2 was re-opened on
 * a key of its own, so the stored sessions table holds it whole, parent
 * and creation LSN with it.  Its creating record is lost with the log
 * leaf holding it (and every older copy of that record), so mc:c2 is a
 * child the new store's log does not link: the children table holds it
 * beside mc:c1, and mc:c3, created after the cut, links to it through the
 * LSN the new log does not hold. */
static void recover__a_middle_child_kept_whole_outlives_its_record(void **state)
{
    fx *f = *state;
    bindlog_recover_report r;
    bindlog_result res;
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    bindlog *s;
    bindlog_session ss;
    char got[256];
    uint64_t c1, c2, moved;

    assert_int_equal(bindlog_open(&s, f->dir, NULL), 0);
    assert_int_equal(bindlog_bind(s, "mc:k1", "mc:p", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    assert_int_equal(
        bindlog_split(s, "mc:k1", "mc:p", "mc:c1", BINDLOG_ANY_GENERATION, NULL, 0, &res),
        BINDLOG_APPLIED);
    c1 = res.lsn;
    bind_fillers(s, "a", 150);
    assert_int_equal(bindlog_bind(s, "mc:k2", "mc:p", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    assert_int_equal(
        bindlog_split(s, "mc:k2", "mc:p", "mc:c2", BINDLOG_ANY_GENERATION, NULL, 0, &res),
        BINDLOG_APPLIED);
    c2 = res.lsn;
    bind_fillers(s, "b", 150);
    assert_int_equal(bindlog_bind(s, "mc:k2", "mc:x", NULL, NULL, NULL, 0, &res), BINDLOG_APPLIED);
    moved = res.lsn;
    assert_int_equal(bindlog_bind(s, "mc:k4", "mc:c2", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    bind_fillers(s, "c", 20);
    assert_int_equal(bindlog_bind(s, "mc:k3", "mc:p", NULL, NULL, NULL, 0, NULL), BINDLOG_APPLIED);
    assert_int_equal(
        bindlog_split(s, "mc:k3", "mc:p", "mc:c3", BINDLOG_ANY_GENERATION, NULL, 0, NULL),
        BINDLOG_APPLIED);
    children_of(s, "mc:p", got, sizeof got);
    assert_string_equal(got, "mc:c3 mc:c2 mc:c1");
    bindlog_close(s); /* checkpointed: data.mdb holds it all */

    /* the leaf holding mc:c2's creating record, which holds neither
     * mc:c1's nor mc:k2's move; every page holding a copy of that record's
     * node (older copies of the leaf among the free pages) is zeroed */
    unsigned char kb[8];
    uint64_t first, n;
    bl_put64be(kb, c2);
    uint64_t pg = leaf_of(f->dir, BL_DB_LOG, kb, 8, &first, &n);
    assert_true(first > c1 && first + n - 1 < moved);
    size_t size;
    unsigned char *map = slurp(data_path(f->dir), &size);
    /* the node: its key's size (8, little-endian) and the key, then the
     * start of the record */
    unsigned char head[10] = {8, 0}, pat[24];
    memcpy(head + 2, kb, 8);
    const unsigned char *node = memmem(map + pg * 4096, 4096, head, sizeof head);
    assert_non_null(node);
    assert_true(node + sizeof pat <= map + (pg + 1) * 4096);
    memcpy(pat, node, sizeof pat);
    for (uint64_t p = 2; p < size / 4096; p++)
        if (memmem(map + p * 4096, 4096, pat, sizeof pat) != NULL)
            zero_page(f->dir, p);
    free(map);

    recover_ok(f->dir, f->out, &r, dg);
    int lost = 0;
    for (size_t i = 0; i < r.nranges; i++)
        lost |= r.ranges[i].first <= c2 && c2 <= r.ranges[i].last;
    assert_true(lost);
    /* mc:k2's move follows the loss (mc:k2 is still on mc:p without it)
     * and data.mdb's copy of a record has no after-images: it is applied
     * by its effect, and is the cut; mc:c3's split re-derives after it */
    assert_int_equal(r.cut_lsn, moved);
    bindlog_recover_report_free(&r);

    bindlog_options ro = BINDLOG_OPTIONS_INIT;
    ro.read_only = 1;
    assert_int_equal(bindlog_open(&s, f->out, &ro), 0);
    assert_int_equal(bindlog_session_get(s, "mc:c2", &ss, NULL, 0), 0);
    assert_string_equal(ss.parent_id, "mc:p");
    assert_int_equal(ss.created_lsn, c2);
    bindlog_close(s);
    /* mc:c3 along the chain, then the table: mc:c1 and mc:c2 */
    assert_family(f->out, "mc:c3 mc:c1 mc:c2", "mc:c1 mc:c2 mc:c3");
}

static int reopened_child_writes(bindlog *s, int unused)
{
    (void)unused;
    if (bindlog_bind(s, "ro:k1", "ro:p", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED ||
        bindlog_split(s, "ro:k1", "ro:p", "ro:c", BINDLOG_ANY_GENERATION, "{\"o\":1}", 7, NULL) !=
            BINDLOG_APPLIED ||
        bindlog_bind(s, "ro:k1", "ro:x", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED ||
        bindlog_bind(s, "ro:k2", "ro:c", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED ||
        bindlog_bind(s, "wal:k0", "wal:s0", NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
        return 3;
    return 0;
}

/* A child re-opened on a key of its own, all in the write-ahead log: the
 * re-open's frame carries the child's value whole (parent, origin,
 * creation LSN and time) as its after-image.  The record that created it
 * is lost; the after-image still says everything that record did of the
 * child, so the recovered child keeps its parent and origin. */
static void recover__a_reopened_childs_frame_keeps_its_parent(void **state)
{
    fx *f = *state;
    bindlog_recover_report r;
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    bindlog *s;
    bindlog_session was, ss;
    char worg[16], org[16], got[64];
    bindlog_options ro = BINDLOG_OPTIONS_INIT;
    ro.read_only = 1;

    in_dying_writer(f->dir, reopened_child_writes, 0);
    assert_int_equal(bindlog_open(&s, f->dir, &ro), 0);
    assert_int_equal(bindlog_session_get(s, "ro:c", &was, worg, sizeof worg), 0);
    assert_int_equal(was.created_lsn, EVENTS + 2);
    bindlog_close(s);

    lose_one_frame(f->dir, f->out, EVENTS + 2, &r, dg);
    /* the re-open re-derives on the salvaged ro:c, but is applied by its
     * after-images, which know ro:c's creation: it is the cut */
    assert_int_equal(r.cut_lsn, EVENTS + 4);
    assert_int_equal(r.new_head_lsn, EVENTS + 5);
    bindlog_recover_report_free(&r);

    assert_int_equal(bindlog_open(&s, f->out, &ro), 0);
    assert_int_equal(bindlog_session_get(s, "ro:c", &ss, org, sizeof org), 0);
    assert_string_equal(ss.parent_id, "ro:p");
    assert_string_equal(ss.key, "ro:k2");
    assert_int_equal(ss.created_lsn, was.created_lsn);
    assert_int_equal(ss.created_ms, was.created_ms);
    assert_int_equal(ss.ended_lsn, 0);
    assert_int_equal(ss.origin_len, 7);
    assert_memory_equal(org, "{\"o\":1}", 7);
    children_of(s, "ro:p", got, sizeof got);
    assert_string_equal(got, "ro:c");
    assert_children_consistent(s);
    bindlog_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(recover__undamaged_store_same_digest, setup, teardown),
        cmocka_unit_test_setup_teardown(recover__zeroed_log_leaf, setup, teardown),
        cmocka_unit_test_setup_teardown(recover__truncated_file, setup, teardown),
        cmocka_unit_test_setup_teardown(recover__damage_always_recovers_clean, setup, teardown),
        cmocka_unit_test_setup_teardown(recover__damaged_base_image, setup, teardown),
        cmocka_unit_test_setup_teardown(recover__refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(recover__a_reopened_childs_frame_keeps_its_parent, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(recover__keeps_the_logs_records, setup, teardown),
        cmocka_unit_test_setup_teardown(recover__a_damaged_frame_loses_only_its_lsns, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(recover__a_later_event_of_a_key_survives_an_earlier_loss,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(recover__routes_after_a_lost_binding_survive, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(recover__a_cut_or_grown_log_is_read, setup, teardown),
        cmocka_unit_test_setup_teardown(recover__the_log_is_read_when_nothing_says_whose_it_is,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(recover__a_child_whose_parent_is_lost, setup, teardown),
        cmocka_unit_test_setup_teardown(recover__a_middle_childs_creation_is_lost, setup, teardown),
        cmocka_unit_test_setup_teardown(recover__a_middle_child_kept_whole_outlives_its_record,
                                        setup, teardown),
    };
    if (tu_backend_is_etcd()) {
        /* recover reads directories; only the import of a recovered
         * store's stream runs on etcd */
        if (tu_backend_skip())
            return 0;
        cmocka_set_test_filter("recover__a_child_whose_parent_is_lost");
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
