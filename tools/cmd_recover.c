/*
 * cmd_recover.c -- bindlog recover DIR --out NEW: rebuild a damaged store.
 *
 * A thin wrapper over bindlog_recover() (bindlog.h): the store in DIR is
 * read page by page (and its write-ahead log frame by frame), never
 * opened, never written; NEW is built from what is intact and checked.  The report says what was found, what was lost
 * (LSN ranges, keys whose history has a gap) and what NEW holds.
 *
 * Exit: 0 NEW holds everything the store had; 1 NEW was built but records
 * were lost (listed); 2 usage; 3 nothing could be built.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

enum { OPT_JSON = 1, OPT_OUT };

static void ranges_text(const bindlog_recover_report *r, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < r->nranges && o + 48 < cap; i++) {
        const bindlog_lsn_range *g = &r->ranges[i];
        if (g->first == g->last)
            o += (size_t)snprintf(out + o, cap - o, "%s%llu", i ? "," : "",
                                  (unsigned long long)g->first);
        else
            o += (size_t)snprintf(out + o, cap - o, "%s%llu-%llu", i ? "," : "",
                                  (unsigned long long)g->first, (unsigned long long)g->last);
    }
    if (o + 48 >= cap)
        snprintf(out + o, cap - o, ",...");
}

static int run_recover(cli *c)
{
    static const cli_opt opts[] = {{"--json", NULL, 0, OPT_JSON},
                                   {"--out", "-o", 1, OPT_OUT},
                                   CLI_OPT_END};
    const char *dir = c->dir, *out = NULL, *v;
    bindlog_recover_report r;
    char hex[2 * BINDLOG_DIGEST_SIZE + 1], ranges[1024];
    int json = 0, rc, id, positional = 0;
    cli_args a;
    cli_progress p;

    cli_args_init(&a, c, &cli_cmd_recover);
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
        } else if (id == OPT_OUT) {
            out = v;
        }
    }
    if (dir == NULL || dir[0] == '\0')
        return cli_usage_error(c, "no store directory: give DIR (or -d DIR)");
    if (out == NULL || out[0] == '\0')
        return cli_usage_error(c, "missing --out NEW (the new store to build)");

    cli_progress_begin(&p, "recover", 1);
    rc = bindlog_recover(dir, out, &r, cli_progress_cb, &p);
    cli_progress_end(&p);
    if (rc != 0) {
        bindlog_recover_report_free(&r);
        cli_lib_error(c, rc, "cannot recover");
        return rc == BINDLOG_EINVAL || rc == BINDLOG_EEXIST ? CLI_USAGE : CLI_STORE;
    }
    /* a log that could not be read may have held events nobody can count */
    int lost = r.records_lost || r.records_by_effect || r.records_skipped || r.base_image < 0 ||
               !r.head_known || r.log_state < 0 || (r.log_state > 0 && r.log_why[0] != '\0');
    bindlog_digest_hex(r.digest, hex);
    ranges_text(&r, ranges, sizeof ranges);
    if (json) {
        cli_json j;
        cli_json_begin(&j, stdout);
        cli_json_str(&j, "dir", dir);
        cli_json_str(&j, "out", out);
        cli_json_u64(&j, "pages", r.pages);
        cli_json_u64(&j, "damaged_pages", r.damaged_pages);
        cli_json_u64(&j, "records_found", r.records_found);
        cli_json_u64(&j, "head_lsn", r.head_lsn);
        cli_json_bool(&j, "head_known", r.head_known);
        cli_json_str(&j, "log", r.log_state > 0 ? "read" : r.log_state < 0 ? "unreadable" : "none");
        cli_json_u64(&j, "log_records", r.log_records);
        cli_json_u64(&j, "log_first_lsn", r.log_first_lsn);
        cli_json_u64(&j, "log_last_lsn", r.log_last_lsn);
        if (r.log_why[0] != '\0')
            cli_json_str(&j, "log_why", r.log_why);
        cli_json_u64(&j, "base_lsn", r.base_lsn);
        cli_json_str(&j, "base_image",
                     r.base_image > 0 ? "intact" : r.base_image < 0 ? "damaged" : "none");
        cli_json_u64(&j, "records_lost", r.records_lost);
        cli_json_str(&j, "lost_lsns", ranges);
        cli_json_u64(&j, "records_by_effect", r.records_by_effect);
        cli_json_u64(&j, "records_skipped", r.records_skipped);
        cli_json_u64(&j, "keys_with_gap", r.nkeys);
        cli_json_u64(&j, "lost_without_key", r.unknown_lost);
        cli_json_u64(&j, "cut_lsn", r.cut_lsn);
        cli_json_u64(&j, "records_rederived", r.records_rederived);
        cli_json_u64(&j, "new_head_lsn", r.new_head_lsn);
        cli_json_str(&j, "digest", hex);
        cli_json_bool(&j, "lost", lost);
        cli_json_end(&j);
        for (size_t i = 0; i < r.nkeys; i++) {
            cli_json_begin(&j, stdout);
            cli_json_bytes(&j, "gap_key", r.keys[i], strlen(r.keys[i]));
            cli_json_end(&j);
        }
    } else {
        cli_kv kv = {stdout, 17};
        cli_kv_bytes(&kv, "store", dir, strlen(dir));
        cli_kv_line(&kv, "pages", "%llu read, %llu damaged", (unsigned long long)r.pages,
                    (unsigned long long)r.damaged_pages);
        cli_kv_line(&kv, "records", "%llu intact, head LSN %llu%s",
                    (unsigned long long)r.records_found, (unsigned long long)r.head_lsn,
                    r.head_known ? "" : " (its meta records are damaged: later records may be "
                                        "lost unseen)");
        if (r.log_state > 0 && r.log_records > 0)
            cli_kv_line(&kv, "log", "%llu records from bindlog.wal, LSNs %llu-%llu (not yet "
                                    "checkpointed)",
                        (unsigned long long)r.log_records, (unsigned long long)r.log_first_lsn,
                        (unsigned long long)r.log_last_lsn);
        else if (r.log_state > 0)
            cli_kv_line(&kv, "log", "bindlog.wal read: no record after the checkpoint");
        else if (r.log_state < 0)
            cli_kv_line(&kv, "log", "bindlog.wal NOT READ: %s", r.log_why);
        else
            cli_kv_line(&kv, "log", "none (no bindlog.wal)");
        if (r.log_state > 0 && r.log_why[0] != '\0')
            cli_kv_line(&kv, "log", "bindlog.wal INCOMPLETE: %s", r.log_why);
        if (r.base_image > 0)
            cli_kv_line(&kv, "base image", "intact, LSN %llu", (unsigned long long)r.base_lsn);
        else if (r.base_image < 0)
            cli_kv_line(&kv, "base image", "DAMAGED: rebuilt from LSN 1");
        else
            cli_kv_line(&kv, "base image", "none");
        cli_kv_line(&kv, "lost", "%llu records%s%s", (unsigned long long)r.records_lost,
                    r.nranges ? ": LSNs " : "", ranges);
        cli_kv_line(&kv, "by effect", "%llu records after a loss applied by what they record",
                    (unsigned long long)r.records_by_effect);
        if (r.records_skipped)
            cli_kv_line(&kv, "skipped", "%llu records could not be applied",
                        (unsigned long long)r.records_skipped);
        cli_kv_line(&kv, "keys with a gap", "%zu%s", r.nkeys,
                    r.unknown_lost ? " (and lost records no evidence ties to a key)" : "");
        for (size_t i = 0; i < r.nkeys; i++) {
            fputs("  ", stdout);
            cli_put_escaped(stdout, r.keys[i], strlen(r.keys[i]));
            fputc('\n', stdout);
        }
        cli_kv_bytes(&kv, "new store", out, strlen(out));
        if (r.cut_lsn)
            cli_kv_line(&kv, "built", "state at LSN %llu from evidence, then %llu records "
                                      "re-derived; head %llu",
                        (unsigned long long)r.cut_lsn, (unsigned long long)r.records_rederived,
                        (unsigned long long)r.new_head_lsn);
        else
            cli_kv_line(&kv, "built", "%llu records re-derived; head %llu",
                        (unsigned long long)r.records_rederived,
                        (unsigned long long)r.new_head_lsn);
        cli_kv_line(&kv, "digest", "%s", hex);
        cli_kv_line(&kv, "check", "clean");
        cli_kv_line(&kv, "result", "%s", lost ? "RECOVERED WITH LOSSES" : "RECOVERED, NOTHING LOST");
    }
    bindlog_recover_report_free(&r);
    return lost ? CLI_PROBLEM : CLI_OK;
}

const cli_command cli_cmd_recover = {
    "recover", "rebuild a damaged store from what is intact into a new one",
    "recover [DIR] --out NEW [--json]\n"
    "\n"
    "Read the store in DIR (or -d DIR) page by page, without opening it and\n"
    "without writing to it, and build a new store in NEW (which must not exist\n"
    "or be empty) from every log record that is intact (in data.mdb, and in\n"
    "the valid frames of bindlog.wal not yet checkpointed), the base image if\n"
    "it is, and what the stored state says about the records that are lost.\n"
    "Records are re-derived as replay does; after a loss, a record that no\n"
    "longer re-derives is applied by the state its log frame recorded after\n"
    "it (or, from data.mdb, by what it records), and the state up to the last\n"
    "such record or loss is NEW's base image, the intact records after it\n"
    "NEW's log.  NEW is checked before the command ends.\n"
    "Prints what was found and lost: LSN ranges, and the keys whose history\n"
    "has a gap.  Exit 0 when nothing was lost, 1 when something was (NEW is\n"
    "built all the same), 3 when no store could be built.\n",
    run_recover};
