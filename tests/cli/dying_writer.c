/*
 * dying_writer.c -- a writer that dies without closing, for the CLI golden
 * tests (tests/cli/cases_recover.sh): the store it leaves holds its events
 * in bindlog.wal only, never checkpointed, as a gateway killed mid-run
 * leaves it.  On the public API only.
 *
 *   dying_writer DIR N      bind k001..kN to s001..sN (FULL, one group
 *                           each, with no background checkpoint), then
 *                           _exit(0) without bindlog_close
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bindlog.h"

/* A fixed time, so that the output (digests) is the same on every run. */
static int64_t fixed_clock(void *ctx)
{
    (void)ctx;
    return 1767225600000;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: dying_writer DIR N\n");
        return 2;
    }
    int n = atoi(argv[2]);
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    o.durability = BINDLOG_DURABILITY_FULL;
    o.log_size = 1 << 20;
    o.clock_ms = fixed_clock;
    if (bindlog_open(&s, argv[1], &o) != 0) {
        fprintf(stderr, "dying_writer: %s\n", bindlog_last_error());
        return 3;
    }
    for (int i = 1; i <= n; i++) {
        char key[32], sid[32];
        snprintf(key, sizeof key, "k%03d", i);
        snprintf(sid, sizeof sid, "s%03d", i);
        if (bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED) {
            fprintf(stderr, "dying_writer: %s\n", bindlog_last_error());
            return 3;
        }
    }
    _exit(0);
}
