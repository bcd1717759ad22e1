/*
 * gen_routes.c -- writes the format-3 golden stores with routing of
 * tests/data/format3/routes.tar.gz (make_routes.sh).
 *
 * Built against the library at commit e1621d2 (format 3 with inbound
 * routing: a binding's last activity in 8 trailing bytes, ROUTE records),
 * never against today's.  Deterministic: a fixed clock and a fixed
 * pseudo-random sequence.
 *
 *   gen_routes DIR [crash]
 *
 * About 300 calls over 30 keys: bindlog_route with an idle policy (ROUTED
 * on a fresh binding, CREATED on an unbound key, RESET after a long
 * silence), binds, splits and invalidates between them.  Prints "head LSN",
 * "digest HEX" and "activity KEY MS" for every key with a last activity.
 * With "crash" it exits without closing the store: its last records stay
 * in bindlog.wal.
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
    return now_ms;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static unsigned next(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "gen_routes: %s: %s (%s)\n", what, bindlog_strerror(rc), bindlog_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s;
    int rc;
    unsigned seq = 0;

    if (argc != 2 && !(argc == 3 && strcmp(argv[2], "crash") == 0)) {
        fprintf(stderr, "usage: gen_routes DIR [crash]\n");
        return 2;
    }
    o.clock_ms = fixed_clock;
    if ((rc = bindlog_open(&s, argv[1], &o)) != 0)
        die("open", rc);
    bindlog_policy idle = {BINDLOG_RESET_IDLE, 3600 * 1000, 0};
    for (int i = 0; i < 300; i++) {
        char key[64], sid[64], origin[64];
        bindlog_result r;
        bindlog_route_result rr;
        bindlog_binding b;
        /* mostly seconds apart, now and then two hours: an idle reset */
        now_ms += next(10) == 0 ? 2 * 3600 * 1000 : 1000 + next(5000);
        snprintf(key, sizeof key, "agent:main:telegram:dm:%u", next(30));
        snprintf(sid, sizeof sid, "r-%05u", ++seq);
        int olen = snprintf(origin, sizeof origin, "{\"msg\":%d}", i);
        int bound = bindlog_get(s, key, &b) == 0 && b.session_id[0] != '\0';
        switch (next(10)) {
        case 0:
            rc = bindlog_bind(s, key, sid, NULL, NULL, origin, (size_t)olen, &r);
            break;
        case 1:
            rc = bound ? bindlog_split(s, key, b.session_id, sid, b.generation, NULL, 0, &r)
                       : bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, &r);
            break;
        case 2:
            rc = bound ? bindlog_invalidate(s, key, NULL, &r)
                       : bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, &r);
            break;
        default:
            rc = bindlog_route(s, key, now_ms, &idle, sid, origin, (size_t)olen, &rr);
            break;
        }
        if (rc < 0)
            die(key, rc);
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
    for (unsigned k = 0; k < 30; k++) {
        char key[64];
        bindlog_binding b;
        snprintf(key, sizeof key, "agent:main:telegram:dm:%u", k);
        if (bindlog_get(s, key, &b) == 0 && b.last_activity_ms != 0)
            printf("activity %s %lld\n", key, (long long)b.last_activity_ms);
    }
    if (argc == 3) {
        fflush(stdout);
        _exit(0); /* no close: no final checkpoint */
    }
    bindlog_close(s);
    return 0;
}
