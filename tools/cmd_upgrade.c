/*
 * cmd_upgrade.c -- bindlog upgrade DIR: convert a store of an older
 * on-disk format to the current one, in place.
 *
 * A thin wrapper over bindlog_upgrade() (bindlog.h): the old store is read
 * with bindlog's page validator, a new one is built beside it inside DIR,
 * re-derived, checked and compared, then renamed into place; the old
 * data.mdb stays in DIR/format<N>-backup/ until the operator deletes it.
 *
 * Exit: 0 upgraded, or already current (nothing changed); 2 usage; 3 the
 * store could not be upgraded (nothing changed: the message says why).
 */
#include "cli.h"

#include <string.h>

enum { OPT_JSON = 1 };

static int run_upgrade(cli *c)
{
    static const cli_opt opts[] = {{"--json", NULL, 0, OPT_JSON}, CLI_OPT_END};
    const char *dir = c->dir, *v;
    bindlog_upgrade_report r;
    char hex[2 * BINDLOG_DIGEST_SIZE + 1];
    int json = 0, rc, id, positional = 0;
    cli_args a;
    cli_progress p;

    cli_args_init(&a, c, &cli_cmd_upgrade);
    while ((id = cli_next(&a, opts, &v)) != CLI_ARG_DONE) {
        if (id == CLI_ARG_HELP)
            return CLI_OK;
        if (id == CLI_ARG_ERROR)
            return CLI_USAGE;
        if (id == CLI_ARG_POSITIONAL) {
            if (positional++)
                return cli_usage_error(c, "one store directory only");
            dir = v;
        } else if (id == OPT_JSON) {
            json = 1;
        }
    }
    if (dir == NULL || dir[0] == '\0')
        return cli_usage_error(c, "no store directory: give DIR (or -d DIR)");

    cli_progress_begin(&p, "upgrade", 1);
    rc = bindlog_upgrade(dir, NULL, &r, cli_progress_cb, &p);
    cli_progress_end(&p);
    if (rc != 0) {
        cli_lib_error(c, rc, "cannot upgrade");
        return rc == BINDLOG_EINVAL ? CLI_USAGE : CLI_STORE;
    }
    bindlog_digest_hex(r.digest, hex);
    if (json) {
        cli_json j;
        cli_json_begin(&j, stdout);
        cli_json_str(&j, "dir", dir);
        cli_json_u64(&j, "from_format", r.from_format);
        cli_json_u64(&j, "format", BINDLOG_FORMAT_VERSION);
        cli_json_bool(&j, "upgraded", r.upgraded);
        if (r.upgraded) {
            cli_json_u64(&j, "head_lsn", r.head_lsn);
            cli_json_u64(&j, "base_lsn", r.base_lsn);
            cli_json_u64(&j, "records", r.records);
            cli_json_u64(&j, "bindings", r.bindings);
            cli_json_u64(&j, "sessions", r.sessions);
            cli_json_str(&j, "digest", hex);
            char bk[48];
            snprintf(bk, sizeof bk, "format%u-backup/data.mdb", r.from_format);
            cli_json_str(&j, "backup", bk);
            cli_json_bool(&j, "staging_left", r.staging_left);
        }
        cli_json_end(&j);
        return CLI_OK;
    }
    cli_kv kv = {stdout, 8};
    cli_kv_bytes(&kv, "store", dir, strlen(dir));
    if (!r.upgraded) {
        cli_kv_line(&kv, "format", "%u, already current: nothing to do", r.from_format);
        return CLI_OK;
    }
    cli_kv_line(&kv, "format", "%u -> %d", r.from_format, BINDLOG_FORMAT_VERSION);
    cli_kv_line(&kv, "head", "LSN %llu", (unsigned long long)r.head_lsn);
    if (r.base_lsn)
        cli_kv_line(&kv, "base", "image at LSN %llu", (unsigned long long)r.base_lsn);
    else
        cli_kv_line(&kv, "base", "none (never compacted)");
    cli_kv_line(&kv, "records", "%llu re-derived", (unsigned long long)r.records);
    cli_kv_line(&kv, "state", "%llu bindings, %llu sessions", (unsigned long long)r.bindings,
                (unsigned long long)r.sessions);
    cli_kv_line(&kv, "digest", "%s (the old store's and the new one's)", hex);
    cli_kv_line(&kv, "check", "clean");
    cli_kv_line(&kv, "backup", "format%u-backup/data.mdb (the old data file: delete it once "
                               "you no longer need to go back)", r.from_format);
    if (r.staging_left)
        cli_kv_line(&kv, "staging",
                    ".bindlog-upgrade/ could not be removed: the new store is "
                    "whole; the next 'bindlog upgrade' removes it");
    cli_kv_line(&kv, "result", "UPGRADED");
    return CLI_OK;
}

const cli_command cli_cmd_upgrade = {
    "upgrade", "convert a store of an older on-disk format to the current one",
    "upgrade [DIR] [--json]\n"
    "\n"
    "Convert the store in DIR (or -d DIR), written by an older bindlog\n"
    "(formats 1 to 6), to the current format, in place.  The new store is\n"
    "built inside DIR from the old one's base image and log (every record\n"
    "re-derived), checked, and compared with the old one (state digest,\n"
    "head, counters); only then does it replace the old data.mdb, which is\n"
    "kept as DIR/format<N>-backup/data.mdb (N the old format; the old\n"
    "bindlog.wal beside it).  A crash at any point leaves the old store or\n"
    "the new one.  No other process may have the store open.  A store that\n"
    "is already current is left as it is.\n"
    "Exit 0 upgraded or already current, 3 not upgraded (nothing changed).\n",
    run_upgrade};
