/*
 * seed_check.c -- the seed scenarios of SPEC section 2 as one self-contained
 * program on the public API alone: no cmocka, no test helpers, so that the
 * cross builds (scripts/cross-build.sh: macOS, musl) can compile and link it
 * for targets without cmocka, and run it where they can.  tests/test_seed.c
 * is the full cmocka version; this one checks the same traces in FULL mode
 * (the flush of the platform layer), then reopens the store and checks that
 * everything acknowledged is still there.
 *
 *   seed_check [DIR]     DIR (default: a fresh directory under $TMPDIR or
 *                        /tmp) is made and removed.  Exit 0 when every check
 *                        passed, 1 with the first failure named.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bindlog.h"

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "seed_check: %s:%d: %s failed (%s)\n", __FILE__, __LINE__, #cond,      \
                    bindlog_last_error());                                                         \
            failures++;                                                                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)

static uint64_t head(bindlog *s)
{
    bindlog_stats st;
    memset(&st, 0, sizeof st);
    return bindlog_stats_get(s, &st) == 0 ? st.head_lsn : UINT64_MAX;
}

static int bound_to(bindlog *s, const char *key, const char *sid, uint64_t gen)
{
    bindlog_binding b;
    memset(&b, 0, sizeof b);
    int rc = bindlog_get(s, key, &b);
    return rc == (sid[0] ? 0 : BINDLOG_ENOTFOUND) && strcmp(b.session_id, sid) == 0 &&
           b.generation == gen;
}

static int absent(bindlog *s, const char *id)
{
    bindlog_session ss;
    return bindlog_session_get(s, id, &ss, NULL, 0) == BINDLOG_ENOTFOUND;
}

/* 1. A split is published even if the turn then fails; a retry is ALREADY. */
static void split_published(bindlog *s)
{
    const char *key = "seed1";
    const char oc[] = "{\"split\":1}";
    bindlog_result r;
    bindlog_session ss;
    char buf[64];

    CHECK(bindlog_bind(s, key, "A1", NULL, NULL, "{}", 2, &r) == BINDLOG_APPLIED);
    uint64_t g = r.generation, before = head(s);
    CHECK(bindlog_split(s, key, "A1", "C1", g, oc, sizeof oc - 1, &r) == BINDLOG_APPLIED);
    CHECK(r.generation == g && strcmp(r.session_id, "C1") == 0);
    CHECK(head(s) == before + 1);
    CHECK(bound_to(s, key, "C1", g));
    CHECK(bindlog_session_get(s, "C1", &ss, buf, sizeof buf) == 0);
    CHECK(ss.origin_len == sizeof oc - 1 && memcmp(buf, oc, ss.origin_len) == 0);
    CHECK(strcmp(ss.parent_id, "A1") == 0);
    CHECK(bindlog_session_get(s, "A1", &ss, NULL, 0) == 0);
    CHECK(ss.ended_lsn != 0 && strcmp(ss.end_reason, "compression") == 0);
    CHECK(bindlog_split(s, key, "A1", "C1", g, oc, sizeof oc - 1, &r) == BINDLOG_ALREADY);
    CHECK(head(s) == before + 1);
}

/* 2. /stop + /new while the run compresses: the late split is STALE, no trace. */
static void stop_new_then_stale(bindlog *s)
{
    const char *key = "seed2";
    bindlog_result r;

    CHECK(bindlog_bind(s, key, "A2", NULL, NULL, NULL, 0, &r) == BINDLOG_APPLIED);
    uint64_t g = r.generation;
    CHECK(bindlog_invalidate(s, key, NULL, &r) == BINDLOG_APPLIED);
    CHECK(bindlog_new_session(s, key, "B2", NULL, NULL, 0, &r) == BINDLOG_APPLIED);
    uint64_t now = r.generation, before = head(s);
    CHECK(now == g + 2);
    CHECK(bindlog_split(s, key, "A2", "C2", g, NULL, 0, &r) == BINDLOG_STALE);
    CHECK(head(s) == before && absent(s, "C2") && bound_to(s, key, "B2", now));
}

/* 3. The identity guard: MOVED for the second run, also with ANY. */
static void identity_guard(bindlog *s)
{
    const char *key = "seed3";
    bindlog_result r;

    CHECK(bindlog_bind(s, key, "A3", NULL, NULL, NULL, 0, &r) == BINDLOG_APPLIED);
    uint64_t g = r.generation;
    CHECK(bindlog_split(s, key, "A3", "C3", g, NULL, 0, &r) == BINDLOG_APPLIED);
    uint64_t before = head(s);
    CHECK(bindlog_split(s, key, "A3", "D3", g, NULL, 0, &r) == BINDLOG_MOVED);
    CHECK(head(s) == before && absent(s, "D3") && bound_to(s, key, "C3", g));

    CHECK(bindlog_bind(s, "seed3b", "A3b", NULL, NULL, NULL, 0, &r) == BINDLOG_APPLIED);
    CHECK(bindlog_bind(s, "seed3b", "B3b", NULL, "resume", NULL, 0, &r) == BINDLOG_APPLIED);
    before = head(s);
    CHECK(bindlog_split(s, "seed3b", "A3b", "C3b", BINDLOG_ANY_GENERATION, NULL, 0, &r) ==
          BINDLOG_MOVED);
    CHECK(head(s) == before && absent(s, "C3b") && bound_to(s, "seed3b", "B3b", r.generation));
}

/* After a reopen every acknowledged event is there. */
static void reopened(bindlog *s, uint64_t acked)
{
    CHECK(head(s) == acked);
    CHECK(bound_to(s, "seed1", "C1", 1));
    CHECK(bound_to(s, "seed2", "B2", 3));
    CHECK(bound_to(s, "seed3", "C3", 1));
    CHECK(bound_to(s, "seed3b", "B3b", 2));
}

/* The store's files are flat: remove them, then the directory. */
static void remove_store(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[8192];
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < sizeof p)
            unlink(p);
    }
    if (d != NULL)
        closedir(d);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    char dir[4096];
    bindlog *s = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    int rc;

    if (argc > 1) {
        snprintf(dir, sizeof dir, "%s", argv[1]);
    } else {
        const char *t = getenv("TMPDIR");
        char tmpl[4096];
        snprintf(tmpl, sizeof tmpl, "%s/bindlog-seed-XXXXXX", t && t[0] ? t : "/tmp");
        if (mkdtemp(tmpl) == NULL) {
            fprintf(stderr, "seed_check: cannot make a directory under %s\n", tmpl);
            return 1;
        }
        snprintf(dir, sizeof dir, "%s", tmpl);
    }
    o.durability = BINDLOG_DURABILITY_FULL;
    if ((rc = bindlog_open(&s, dir, &o)) != 0) {
        fprintf(stderr, "seed_check: open %s: %s (%s)\n", dir, bindlog_strerror(rc),
                bindlog_last_error());
        return 1;
    }
    split_published(s);
    stop_new_then_stale(s);
    identity_guard(s);
    uint64_t acked = head(s);
    bindlog_close(s);
    s = NULL;
    if ((rc = bindlog_open(&s, dir, &o)) != 0) {
        fprintf(stderr, "seed_check: reopen: %s (%s)\n", bindlog_strerror(rc), bindlog_last_error());
        failures++;
    } else {
        reopened(s, acked);
        bindlog_close(s);
    }
    remove_store(dir);
    printf("seed_check: %s: %s (%llu events)\n", bindlog_version(),
           failures ? "FAILED" : "passed", (unsigned long long)acked);
    return failures ? 1 : 0;
}
