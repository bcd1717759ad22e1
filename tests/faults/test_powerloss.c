/*
 * test_powerloss.c -- power-loss images of a store, per durability mode.
 *
 * Method (docs/reliability.md, "Power loss"):
 *   1. The parent makes a store and a FULL-mode base of acknowledged events.
 *   2. A child, with the LD_PRELOAD shim tracking the store's files, runs the
 *      3-thread workload in the mode under test and acknowledges APPLIED
 *      events on a pipe; the shim simulates a power loss at its n-th tracked
 *      I/O operation (random n): it writes its undo journal -- for every
 *      write since the file's last fsync/fdatasync, the bytes it overwrote;
 *      O_DSYNC writes are durable at once -- and _exit()s.
 *   3. The parent makes many disk images from the files and the journal:
 *      each unsynced write is kept, dropped, or torn (a random subset of
 *      its 512-byte sectors reverted), reverting in reverse order, so that
 *      every sector ends at one of the versions it went through since the
 *      last sync.  Strategies rotate: keep all (a process crash), drop all,
 *      random subset of writes, torn sectors, drop a random suffix.
 *   4. Each image is opened and verified in a separate process (a crash
 *      while opening is counted, not fatal to the test): it must open or
 *      fail with BINDLOG_ECORRUPT; then every acknowledged event must be
 *      there, and the log must re-derive the state (faultutil.h).
 * Assertions: FULL -- every image opens, passes, loses nothing.  NORMAL --
 * every image opens and passes (never corrupt); acknowledged events of the
 * last commit(s) may be missing (counted).  NONE -- counted only.
 *
 * Size: BINDLOG_POWERLOSS_IMAGES (images per crash, default 25; 10 under a
 * sanitizer, TU_SANITIZED) and BINDLOG_POWERLOSS_RUNS (crashes per mode,
 * default 8 FULL, 4 others).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindlog.h"
#include "faultutil.h"
#include "shim.h"
#include "testutil.h"

#define SECTOR 512

static shim_track_fn shim_track;
static shim_crash_after_fn shim_crash_after;

static int need_shim(void **state)
{
    (void)state;
    shim_track = (shim_track_fn)fu_shim_sym("bl_shim_track");
    shim_crash_after = (shim_crash_after_fn)fu_shim_sym("bl_shim_crash_after");
    if (shim_track == NULL || shim_crash_after == NULL) {
        print_message("the shim is not preloaded: skipped\n");
        skip();
    }
    return 0;
}

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v != NULL && atol(v) > 0 ? atol(v) : dflt;
}

/* ---- the journal ---------------------------------------------------------- */

typedef struct jent {
    char kind;  /* 'W' or 'D' */
    char name[SHIM_NAME_MAX];
    uint64_t seq, off, len, size_before;
    unsigned char *old;
} jent;

typedef struct journal {
    jent *e;
    size_t n;
    char zname[8][SHIM_NAME_MAX];
    uint64_t zsize[8];
    size_t nz;
} journal;

static int rd(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n ? 0 : -1; }

static void journal_read(const char *path, journal *j)
{
    FILE *f = fopen(path, "rb");
    char kind;
    size_t cap = 0;

    memset(j, 0, sizeof(*j));
    assert_non_null(f);
    while (fread(&kind, 1, 1, f) == 1) {
        char name[SHIM_NAME_MAX];
        assert_int_equal(rd(f, name, sizeof(name)), 0);
        name[SHIM_NAME_MAX - 1] = '\0';
        if (kind == 'Z') {
            assert_true(j->nz < 8);
            memcpy(j->zname[j->nz], name, sizeof(name));
            assert_int_equal(rd(f, &j->zsize[j->nz], 8), 0);
            j->nz++;
            continue;
        }
        assert_true(kind == 'W' || kind == 'D');
        if (j->n == cap) {
            cap = cap ? 2 * cap : 64;
            j->e = realloc(j->e, cap * sizeof(*j->e));
            assert_non_null(j->e);
        }
        jent *e = &j->e[j->n++];
        memset(e, 0, sizeof(*e));
        e->kind = kind;
        memcpy(e->name, name, sizeof(name));
        assert_int_equal(rd(f, &e->seq, 8) | rd(f, &e->off, 8) | rd(f, &e->len, 8), 0);
        if (kind == 'W') {
            assert_int_equal(rd(f, &e->size_before, 8), 0);
            e->old = malloc(e->len ? e->len : 1);
            assert_non_null(e->old);
            assert_int_equal(rd(f, e->old, e->len), 0);
        }
    }
    fclose(f);
}

static void journal_free(journal *j)
{
    for (size_t i = 0; i < j->n; i++)
        free(j->e[i].old);
    free(j->e);
}

static size_t journal_writes(const journal *j)
{
    size_t n = 0;
    for (size_t i = 0; i < j->n; i++)
        n += j->e[i].kind == 'W';
    return n;
}

/* ---- images ------------------------------------------------------------------ */

enum { KEEP_ALL, DROP_ALL, DROP_SOME, TORN, DROP_SUFFIX, STRATEGIES };
static const char *const strategy_names[] = {"keep all", "drop all", "drop some", "torn",
                                             "drop suffix"};

/* Is [a, b) of file `name` covered by a durable write later than seq? */
static int durable_after(const journal *j, const char *name, uint64_t seq, uint64_t a, uint64_t b)
{
    for (size_t i = 0; i < j->n; i++) {
        const jent *e = &j->e[i];
        if (e->kind == 'D' && e->seq > seq && strcmp(e->name, name) == 0 && e->off < b &&
            e->off + e->len > a)
            return 1;
    }
    return 0;
}

/* Build image `img` (a directory) from the crashed store `dir`. */
static void make_image(const char *dir, const char *img, const journal *j, int strategy,
                       unsigned *seed)
{
    char src[4096 + SHIM_NAME_MAX + 2], dst[4096 + SHIM_NAME_MAX + 2];
    size_t nw = journal_writes(j), suffix_from = nw ? (size_t)rand_r(seed) % (nw + 1) : 0;

    tu_rmtree(img);
    assert_int_equal(mkdir(img, 0700), 0);
    for (size_t z = 0; z < j->nz; z++) {
        if (strcmp(j->zname[z], "data.mdb") != 0 && strcmp(j->zname[z], "bindlog.wal") != 0)
            continue; /* lock.mdb is rebuilt by LMDB, bindlog.shm by recovery; bindlog.lock
                         is empty */
        snprintf(src, sizeof(src), "%s/%s", dir, j->zname[z]);
        snprintf(dst, sizeof(dst), "%s/%s", img, j->zname[z]);
        assert_int_equal(fu_copy_file(src, dst), 0);
        int fd = open(dst, O_RDWR);
        assert_true(fd >= 0);
        uint64_t keep_size = j->zsize[z];
        size_t wi = nw;
        for (size_t i = j->n; i-- > 0;) {
            const jent *e = &j->e[i];
            if (e->kind != 'W')
                continue;
            wi--;
            if (strcmp(e->name, j->zname[z]) != 0)
                continue;
            int all = strategy == DROP_ALL || (strategy == DROP_SUFFIX && wi >= suffix_from) ||
                      (strategy == DROP_SOME && rand_r(seed) % 2);
            int any_kept = 0;
            if (strategy != KEEP_ALL)
                for (uint64_t s0 = e->off / SECTOR * SECTOR; s0 < e->off + e->len; s0 += SECTOR) {
                    uint64_t a = s0 > e->off ? s0 : e->off;
                    uint64_t b = s0 + SECTOR < e->off + e->len ? s0 + SECTOR : e->off + e->len;
                    int revert = all || (strategy == TORN && rand_r(seed) % 2);
                    if (!revert || durable_after(j, e->name, e->seq, a, b)) {
                        any_kept = 1;
                        continue;
                    }
                    assert_int_equal(pwrite(fd, e->old + (a - e->off), b - a, (off_t)a),
                                     (ssize_t)(b - a));
                }
            else
                any_kept = 1;
            if (any_kept && e->off + e->len > keep_size)
                keep_size = e->off + e->len;
        }
        struct stat st;
        assert_int_equal(fstat(fd, &st), 0);
        if ((uint64_t)st.st_size > keep_size)
            assert_int_equal(ftruncate(fd, (off_t)keep_size), 0);
        close(fd);
    }
}

/* ---- verdicts ------------------------------------------------------------------ */

typedef struct tally {
    long crashes_done, images, opened, passed, ecorrupt, other_open_err, problems, lossy,
        crashed, not_last; /* images that lost an acked event but kept a later one */
    uint64_t acked, lost;
    long by_strategy_lossy[STRATEGIES], by_strategy_bad[STRATEGIES];
    char first_bad[600];
} tally;

/* Verify image `img` in a child process; fold the verdict into t. */
static void judge(const char *img, const fu_ack *acks, size_t n, int durability, int strategy,
                  tally *t)
{
    char scratch[4096 + 32];
    int p[2], status;
    fu_verdict v;

    snprintf(scratch, sizeof(scratch), "%s-replica", img);
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        fu_child_signals();
        close(p[0]);
        shim_track(NULL);
        fu_verify(img, scratch, acks, n, durability, &v);
        ssize_t w = write(p[1], &v, sizeof(v));
        _exit(w == (ssize_t)sizeof(v) ? 0 : 1);
    }
    close(p[1]);
    ssize_t r = read(p[0], &v, sizeof(v));
    close(p[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    t->images++;
    if (r != (ssize_t)sizeof(v) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        t->crashed++;
        t->by_strategy_bad[strategy]++;
        if (t->first_bad[0] == '\0')
            snprintf(t->first_bad, sizeof(t->first_bad), "%s: verifier crashed (status 0x%x)",
                     strategy_names[strategy], status);
        tu_rmtree(scratch);
        return;
    }
    if (v.open_rc != 0) {
        if (v.open_rc == BINDLOG_ECORRUPT)
            t->ecorrupt++;
        else
            t->other_open_err++;
        t->by_strategy_bad[strategy]++;
        if (t->first_bad[0] == '\0')
            snprintf(t->first_bad, sizeof(t->first_bad), "%s: open -> %s",
                     strategy_names[strategy], bindlog_code_name(v.open_rc));
        return;
    }
    t->opened++;
    t->acked += v.acked;
    t->lost += v.lost;
    if (v.lost)
        t->lossy++, t->by_strategy_lossy[strategy]++;
    if (v.lost && v.kept_max_lsn > v.lost_min_lsn) {
        t->not_last++;
        if (t->first_bad[0] == '\0')
            snprintf(t->first_bad, sizeof(t->first_bad),
                     "%s: lost acked LSN %llu but kept %llu", strategy_names[strategy],
                     (unsigned long long)v.lost_min_lsn, (unsigned long long)v.kept_max_lsn);
    }
    if (v.problems || v.mismatched || v.gen_back) {
        t->problems++;
        t->by_strategy_bad[strategy]++;
        if (t->first_bad[0] == '\0')
            snprintf(t->first_bad, sizeof(t->first_bad), "%s: %.500s", strategy_names[strategy],
                     v.msg);
    } else if (!v.lost) {
        t->passed++;
    }
}

/* ---- one crash ------------------------------------------------------------------ */

static void crash_run(int durability, unsigned seed, long images, tally *t)
{
    char *dir = tu_mkdtemp("plstore");
    char jpath[4096 + 16], img[4096 + 16];
    fu_workload base = FU_WORKLOAD_INIT, w = FU_WORKLOAD_INIT;
    fu_ack *acks = NULL, *run_acks = NULL;
    size_t nbase, nrun;
    int p[2], status;
    journal j;
    char tmpl[4096 + 16];

    snprintf(jpath, sizeof(jpath), "%s-journal", dir);
    snprintf(img, sizeof(img), "%s-img", dir);

    /* the base: FULL, synced, not tracked */
    snprintf(tmpl, sizeof(tmpl), "%s-acks", dir);
    int afd = open(tmpl, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(afd >= 0);
    base.threads = 2;
    base.events_per_thread = 20;
    base.seed = seed;
    /* a small log: the crash lands in wraps and checkpoints too, and the
     * images stay small */
    base.log_size = 64 << 10;
    assert_int_equal(fu_run_workload(dir, &base, afd), 0);
    assert_int_equal(lseek(afd, 0, SEEK_SET), 0);
    nbase = fu_read_acks(afd, &acks);
    close(afd);
    unlink(tmpl);

    /* the crash: a random operation among the first few hundred */
    w.threads = 3;
    w.events_per_thread = 40;
    w.durability = durability;
    w.key_base = 1000;
    w.seed = seed + 1;
    long nth = 1 + (long)(seed * 2654435761u % 240u);
    for (;;) {
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            shim_track(dir);
            shim_crash_after(nth, jpath);
            int rc = fu_run_workload(dir, &w, p[1]);
            _exit(rc == 0 ? 0 : 2);
        }
        close(p[1]);
        nrun = fu_read_acks(p[0], &run_acks);
        close(p[0]);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status) == SHIM_CRASH_EXIT)
            break;
        assert_int_equal(WEXITSTATUS(status), 0); /* finished before the crash point */
        free(run_acks);
        run_acks = NULL;
        assert_true(nth > 1);
        nth /= 2;
        tu_rmtree(dir);
        /* the same base again; its threads interleave differently, so its
         * acks are read again */
        afd = open(tmpl, O_RDWR | O_CREAT | O_TRUNC, 0600);
        assert_true(afd >= 0);
        assert_int_equal(fu_run_workload(dir, &base, afd), 0);
        assert_int_equal(lseek(afd, 0, SEEK_SET), 0);
        free(acks);
        nbase = fu_read_acks(afd, &acks);
        close(afd);
        unlink(tmpl);
    }
    t->crashes_done++;

    acks = realloc(acks, (nbase + nrun + 1) * sizeof(*acks));
    assert_non_null(acks);
    memcpy(acks + nbase, run_acks, nrun * sizeof(*acks));
    free(run_acks);

    journal_read(jpath, &j);
    unsigned s = seed;
    for (long i = 0; i < images; i++) {
        int strategy = (int)(i % STRATEGIES);
        make_image(dir, img, &j, strategy, &s);
        judge(img, acks, nbase + nrun, durability, strategy, t);
    }
    journal_free(&j);
    free(acks);
    unlink(jpath);
    tu_rmtree(img);
    tu_rmtree(dir);
    free(dir);
}

static void run_mode(const char *name, int durability, long runs, tally *t)
{
#ifdef TU_SANITIZED
    long images = env_long("BINDLOG_POWERLOSS_IMAGES", 10);
#else
    long images = env_long("BINDLOG_POWERLOSS_IMAGES", 25);
#endif
    runs = env_long("BINDLOG_POWERLOSS_RUNS", runs);
    memset(t, 0, sizeof(*t));
    for (long r = 0; r < runs; r++)
        crash_run(durability, (unsigned)(r * 7 + 3), images, t);
    print_message("  %-6s crashes %ld images %ld opened %ld passed %ld | ECORRUPT %ld other-open-err "
                  "%ld problems %ld verifier-crashed %ld | images losing acked %ld (not only the "
                  "last: %ld), acked events lost %llu of %llu\n",
                  name, t->crashes_done, t->images, t->opened, t->passed, t->ecorrupt,
                  t->other_open_err, t->problems, t->crashed, t->lossy, t->not_last,
                  (unsigned long long)t->lost, (unsigned long long)t->acked);
    for (int s = 0; s < STRATEGIES; s++)
        if (t->by_strategy_lossy[s] || t->by_strategy_bad[s])
            print_message("         %-12s lossy %ld bad %ld\n", strategy_names[s],
                          t->by_strategy_lossy[s], t->by_strategy_bad[s]);
    if (t->first_bad[0])
        print_message("         first bad image: %s\n", t->first_bad);
}

static void powerloss__full_loses_nothing(void **state)
{
    (void)state;
    tally t;
    run_mode("FULL", BINDLOG_DURABILITY_FULL, 8, &t);
    assert_int_equal(t.crashed, 0);
    assert_int_equal(t.opened, t.images);
    assert_int_equal(t.problems, 0);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.passed, t.images);
}

static void powerloss__normal_never_corrupts(void **state)
{
    (void)state;
    tally t;
    run_mode("NORMAL", BINDLOG_DURABILITY_NORMAL, 4, &t);
    assert_int_equal(t.crashed, 0);
    assert_int_equal(t.opened, t.images);
    assert_int_equal(t.problems, 0);
    assert_int_equal(t.not_last, 0); /* a power loss drops the last commits, nothing else */
}

static void powerloss__none_is_recorded(void **state)
{
    (void)state;
    tally t;
    run_mode("NONE", BINDLOG_DURABILITY_NONE, 4, &t);
    assert_true(t.images > 0); /* NONE promises nothing after a power loss */
}

int main(int argc, char **argv)
{
    (void)argc;
    fu_preload_self(argv, BINDLOG_SHIM_PATH);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(powerloss__full_loses_nothing, need_shim),
        cmocka_unit_test_setup(powerloss__normal_never_corrupts, need_shim),
        cmocka_unit_test_setup(powerloss__none_is_recorded, need_shim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
