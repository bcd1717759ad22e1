/*
 * mdb_fuzzer.c -- a store whose data.mdb is arbitrary bytes.
 *
 * Each input becomes the data.mdb of a fresh store directory (beside an
 * empty bindlog.lock, so that an unreadable file counts as a damaged store,
 * not a stranger's), and the store goes through what an operator and a
 * gateway do with it, in-process:
 *
 *   read-only:  open, check, get of two keys, session_get, history, the
 *               ancestors of a session, dump of the log, the bindings and
 *               the sessions, the digest and the statistics;
 *   writable:   open, bind, split, unbind, then check again.
 *
 * Nothing may crash or trip ASan/UBSan, and:
 *  - every call returns 0, a documented outcome, or a negative BINDLOG_E*
 *    code with a last-error message;
 *  - when check finds no problem, every scan succeeds: a clean check is a
 *    promise that the store can be read.
 * Any violation aborts.
 *
 * Seeds (fuzz/corpora/mdb/) are real stores written by make_mdb_seeds.c:
 * empty, a few events, enough events for two-level trees, a compacted
 * store with a base image, and values large enough for overflow pages.
 * The keys and sessions below are the ones the seeds hold.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bindlog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define KEY_A "agent:main:telegram:dm:1"
#define KEY_B "agent:main:discord:channel:7"
#define SESSION "s-1-3"

static char g_base[4096];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static void rm_tree(const char *path) { nftw(path, rm_entry, 8, FTW_DEPTH | FTW_PHYS); }

static void rm_base(void)
{
    if (g_base[0])
        rm_tree(g_base);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct stat st;
    (void)argc;
    (void)argv;
    const char *base = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0
                           ? "/dev/shm"
                           : getenv("TMPDIR");
    if (base == NULL || base[0] == '\0')
        base = "/tmp";
    snprintf(g_base, sizeof(g_base), "%s/bindlog-mdb-fuzz-XXXXXX", base);
    if (mkdtemp(g_base) == NULL) {
        perror(g_base);
        abort();
    }
    atexit(rm_base);
    /* check's scratch store goes beside the store, in memory */
    setenv("TMPDIR", g_base, 1);
    return 0;
}

static void put_file(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(path);
        abort();
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, (const char *)p + done, n - done);
        if (w <= 0)
            abort();
        done += (size_t)w;
    }
    close(fd);
}

/* An error code: a documented one, with a message. */
static void expect(int rc, const char *what)
{
    if (rc >= 0)
        return;
    if (rc < BINDLOG_ERROR_MIN || bindlog_strerror(rc)[0] == '\0' ||
        strcmp(bindlog_code_name(rc), "BINDLOG_UNKNOWN") == 0) {
        fprintf(stderr, "mdb_fuzzer: %s returned %d, not a bindlog code\n", what, rc);
        abort();
    }
    if (bindlog_last_error()[0] == '\0') {
        fprintf(stderr, "mdb_fuzzer: %s failed with %s and no message\n", what,
                bindlog_code_name(rc));
        abort();
    }
}

/* Read everything an iterator gives; returns its last code. */
static int drain(bindlog_iter *it, int kind)
{
    bindlog_record rec;
    bindlog_binding b;
    bindlog_session ss;
    char origin[64];
    int rc;
    do {
        rc = kind == 0   ? bindlog_iter_next_record(it, &rec)
             : kind == 1 ? bindlog_iter_next_binding(it, &b)
                         : bindlog_iter_next_session(it, &ss, origin, sizeof origin);
    } while (rc == 1);
    bindlog_iter_close(it);
    return rc;
}

/* Every scan; with `clean` (check passed), each must succeed. */
static void scans(bindlog *s, int clean)
{
    bindlog_iter *it;
    bindlog_binding b;
    bindlog_session ss;
    bindlog_stats st;
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    char origin[64];
    int rc;
    struct {
        const char *what;
        int rc;
    } r[9];
    int n = 0;

#define RUN(name, call)                                                                    \
    do {                                                                                   \
        rc = (call);                                                                       \
        expect(rc, name);                                                                  \
        r[n].what = name;                                                                  \
        r[n++].rc = rc == BINDLOG_ENOTFOUND ? 0 : rc; /* absent is an answer */          \
    } while (0)
    RUN("get", bindlog_get(s, KEY_A, &b));
    RUN("session_get", bindlog_session_get(s, SESSION, &ss, origin, sizeof origin));
    rc = bindlog_log_iter(s, 0, UINT64_MAX, &it);
    RUN("dump --log", rc == 0 ? drain(it, 0) : rc);
    rc = bindlog_history_iter(s, KEY_B, &it);
    RUN("history", rc == 0 ? drain(it, 0) : rc);
    rc = bindlog_bindings_iter(s, &it);
    RUN("dump --bindings", rc == 0 ? drain(it, 1) : rc);
    rc = bindlog_sessions_iter(s, &it);
    RUN("dump --sessions", rc == 0 ? drain(it, 2) : rc);
    rc = bindlog_ancestors_iter(s, SESSION, &it);
    RUN("ancestors", rc == 0 ? drain(it, 2) : rc);
    RUN("digest", bindlog_digest(s, dg, NULL));
    RUN("stats", bindlog_stats_get(s, &st));
#undef RUN
    for (int i = 0; clean && i < n; i++)
        if (r[i].rc < 0) {
            fprintf(stderr, "mdb_fuzzer: check passed, then %s failed: %s (%s)\n", r[i].what,
                    bindlog_code_name(r[i].rc), bindlog_last_error());
            abort();
        }
}

/* Check; returns 1 when it found no problem. */
static int check(bindlog *s)
{
    bindlog_check_report rep;
    int rc = bindlog_check(s, &rep, NULL, NULL);
    expect(rc, "check");
    return rc == 0 && rep.problems == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[4200], path[4300];
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_result res;
    bindlog *s;
    int rc;

    snprintf(dir, sizeof dir, "%s/store", g_base);
    rm_tree(dir);
    if (mkdir(dir, 0700) != 0)
        abort();
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    put_file(path, data, size);
    snprintf(path, sizeof path, "%s/bindlog.lock", dir);
    put_file(path, "", 0);

    o.read_only = 1;
    rc = bindlog_open(&s, dir, &o);
    expect(rc, "open read-only");
    if (rc == 0) {
        scans(s, check(s));
        bindlog_close(s);
    }

    o.read_only = 0;
    o.durability = BINDLOG_DURABILITY_NONE;
    rc = bindlog_open(&s, dir, &o);
    expect(rc, "open");
    if (rc == 0) {
        expect(bindlog_bind(s, KEY_A, "fuzz-1", NULL, NULL, "o", 1, &res), "bind");
        expect(bindlog_split(s, KEY_A, "fuzz-1", "fuzz-2", BINDLOG_ANY_GENERATION, NULL, 0, &res),
               "split");
        expect(bindlog_unbind(s, KEY_B, NULL, &res), "unbind");
        scans(s, check(s));
        bindlog_close(s);
    }
    return 0;
}
