/*
 * gen_format1.c -- writes the format-1 golden stores of tests/data/format1/.
 *
 * Built against the library at commit ac406c8 (the last main with format 1,
 * before the write-ahead log) by make_format1.sh, never against today's:
 * the point is bytes that format-1 code wrote.  Deterministic: a fixed
 * clock, a fixed pseudo-random sequence, so a rerun writes the same events
 * (LMDB's page layout may still differ by free pages).
 *
 *   gen_format1 DIR compact_keep_from [crash]
 *
 * writes about 400 events over 40 keys (bind, new_session, split,
 * invalidate, unbind; origins on some; splits with stale generations, so
 * some calls log nothing), then, if compact_keep_from > 0, compacts the log
 * before that LSN (meta "base", the base image tables) and writes 60 more
 * events after the compaction.  Prints "head LSN" and "digest HEX".  With
 * "crash" it then exits without closing the store: on format 2 the last
 * records stay in bindlog.wal, not yet checkpointed into data.mdb
 * (tests/data/format2/make_format2.sh uses this file too).
 */
#include <bindlog.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int64_t now_ms = 1767225600000; /* 2026-01-01T00:00:00Z */

static int64_t fixed_clock(void *ctx)
{
    (void)ctx;
    now_ms += 1000;
    return now_ms;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static unsigned next(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "gen_format1: %s: %s (%s)\n", what, bindlog_strerror(rc), bindlog_last_error());
    exit(1);
}

static unsigned sid_seq;

static void events(bindlog *s, int n)
{
    char key[64], sid[64], origin[128];
    bindlog_result r;
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "agent:main:telegram:dm:%u", next(40));
        snprintf(sid, sizeof sid, "s-%05u", ++sid_seq);
        int with_origin = next(3) == 0;
        int olen = snprintf(origin, sizeof origin, "{\"chat\":%u,\"n\":%d}", next(1000), i);
        bindlog_binding b;
        int bound = bindlog_get(s, key, &b) == 0 && b.session_id[0] != '\0';
        int rc;
        switch (bound ? next(10) : 0) {
        case 0: case 1: case 2:
            rc = bindlog_bind(s, key, sid, NULL, next(2) ? "import" : NULL,
                              with_origin ? origin : NULL, with_origin ? (size_t)olen : 0, &r);
            break;
        case 3: case 4:
            rc = bindlog_new_session(s, key, sid, next(2) ? "reset" : NULL,
                                     with_origin ? origin : NULL, with_origin ? (size_t)olen : 0,
                                     &r);
            break;
        case 5: case 6: case 7:
            /* a stale run generation now and then: STALE, nothing logged */
            rc = bindlog_split(s, key, b.session_id, sid,
                               next(4) == 0 && b.generation > 1 ? b.generation - 1
                                                                : b.generation,
                               with_origin ? origin : NULL, with_origin ? (size_t)olen : 0, &r);
            break;
        case 8:
            rc = bindlog_invalidate(s, key, next(2) ? "expired" : NULL, &r);
            break;
        default:
            rc = bindlog_unbind(s, key, "closed", &r);
            break;
        }
        if (rc < 0)
            die(key, rc);
    }
}

int main(int argc, char **argv)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s;
    int rc;

    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "crash") == 0)) {
        fprintf(stderr, "usage: gen_format1 DIR compact_keep_from [crash]\n");
        return 2;
    }
    unsigned long long keep = strtoull(argv[2], NULL, 10);
    o.clock_ms = fixed_clock;
    if ((rc = bindlog_open(&s, argv[1], &o)) != 0)
        die("open", rc);
    events(s, 400);
    if (keep > 0) {
        uint64_t removed = 0;
        if ((rc = bindlog_compact(s, keep, &removed, NULL, NULL)) != 0)
            die("compact", rc);
        events(s, 60);
    }
    unsigned char d[BINDLOG_DIGEST_SIZE];
    char hex[2 * BINDLOG_DIGEST_SIZE + 1];
    uint64_t head = 0;
    if ((rc = bindlog_digest(s, d, &head)) != 0)
        die("digest", rc);
    bindlog_digest_hex(d, hex);
    bindlog_check_report chk;
    if ((rc = bindlog_check(s, &chk, NULL, NULL)) != 0 || chk.problems != 0)
        die("check", rc ? rc : BINDLOG_ECORRUPT);
    printf("head %llu\ndigest %s\n", (unsigned long long)head, hex);
    if (argc == 4) {
        fflush(stdout);
        _exit(0); /* no close: no final checkpoint */
    }
    bindlog_close(s);
    return 0;
}
