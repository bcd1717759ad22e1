/*
 * cmd_expire.c -- bindlog expire: unbind the keys that have been idle for
 * longer than a duration (bindlog_expire), optionally under a key prefix,
 * with a dry run.  Meant for cron: gateways pile up finished cron-run keys
 * (agent:main:cron:<job>:run:<id>) by the thousand.
 *
 * A key's activity is the later of its last routed message and its last
 * binding change, as bindlog_route() judges freshness.  Each key goes with
 * an UNBIND (reason "expired", generation + 1, the session ended) in group
 * commits; a key that routed a message after the sweep looked at it stays.
 */
#include "cli.h"

#include <string.h>

enum { OPT_IDLE = 1, OPT_PREFIX, OPT_DRY_RUN, OPT_JSON };

static int run_expire(cli *c)
{
    static const cli_opt opts[] = {{"--idle", NULL, 1, OPT_IDLE},
                                   {"--prefix", NULL, 1, OPT_PREFIX},
                                   {"--dry-run", "-n", 0, OPT_DRY_RUN},
                                   {"--json", NULL, 0, OPT_JSON},
                                   CLI_OPT_END};
    const char *v, *prefix = NULL, *idle_arg = NULL;
    int64_t idle = -1;
    int dry = 0, json = 0, r;
    cli_args a;

    cli_args_init(&a, c, &cli_cmd_expire);
    while ((r = cli_next(&a, opts, &v)) != CLI_ARG_DONE) {
        switch (r) {
        case CLI_ARG_HELP:
            return CLI_OK;
        case CLI_ARG_ERROR:
            return CLI_USAGE;
        case CLI_ARG_POSITIONAL:
            return cli_usage_error(c, "unexpected argument '%s'", v);
        case OPT_IDLE:
            idle_arg = v;
            if (cli_parse_duration(c, "--idle", v, &idle) != 0)
                return CLI_USAGE;
            break;
        case OPT_PREFIX:
            prefix = v;
            break;
        case OPT_DRY_RUN:
            dry = 1;
            break;
        case OPT_JSON:
            json = 1;
            break;
        }
    }
    if (idle_arg == NULL)
        return cli_usage_error(c, "--idle DURATION is required (like 24h or 7d)");
    if (idle <= 0)
        return cli_usage_error(c, "--idle: '%s' must be longer than 0", idle_arg);

    int64_t now = cli_now_ms(c);
    int64_t cutoff = now - idle;
    if (cutoff <= 0)
        return cli_usage_error(c, "--idle: '%s' reaches back before 1970", idle_arg);

    bindlog *s = NULL;
    int rc = cli_open(c, dry, &s);
    if (rc != 0)
        return rc;
    uint64_t n = 0;
    rc = bindlog_expire(s, cutoff, prefix, dry, &n);
    bindlog_close(s);
    if (rc < 0)
        return cli_lib_error(c, rc, "expire failed after %llu keys", (unsigned long long)n);

    char t[CLI_TIME_MAX];
    cli_format_time(cutoff, t);
    if (json) {
        cli_json j;
        cli_json_begin(&j, stdout);
        cli_json_bool(&j, "dry_run", dry);
        cli_json_str(&j, "prefix", prefix ? prefix : "");
        cli_json_i64(&j, "cutoff_ms", cutoff);
        cli_json_u64(&j, dry ? "would_expire" : "expired", n);
        cli_json_end(&j);
    } else {
        cli_kv kv = {stdout, 12};
        cli_kv_line(&kv, "idle before", "%s", t);
        if (prefix != NULL && prefix[0] != '\0')
            cli_kv_bytes(&kv, "prefix", prefix, strlen(prefix));
        cli_kv_line(&kv, dry ? "would expire" : "expired", "%llu key%s%s",
                    (unsigned long long)n, n == 1 ? "" : "s", dry ? " (dry run: nothing written)" : "");
    }
    return cli_finish_output(c, CLI_OK);
}

const cli_command cli_cmd_expire = {
    "expire", "unbind keys idle for longer than a duration (cron cleanup)",
    "expire --idle DURATION [--prefix P] [--dry-run] [--json]\n"
    "\n"
    "UNBIND (reason 'expired') every bound key whose last activity -- its last\n"
    "routed message or binding change, whichever is later -- is older than\n"
    "DURATION (like 30m, 24h, 7d), only keys starting with P when --prefix is\n"
    "given.  The sessions end, the keys become tombstones (generation + 1) and\n"
    "route anew next time.  Keys go in group commits; one routed meanwhile\n"
    "stays.  --dry-run (-n) counts them and writes nothing.  Prints the count.\n"
    "Exit 0 on success, 3 on a store error.\n",
    run_expire};
