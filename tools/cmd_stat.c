/*
 * cmd_stat.c -- stat: the store's statistics, as lines, JSON or Prometheus.
 *
 * Opens the store read-only, like every inspection command, so it runs
 * beside a writing gateway.  `stat --prometheus` prints the Prometheus text
 * exposition format (version 0.0.4): a "# HELP" and a "# TYPE" line per
 * metric family, names prefixed "bindlog_", counters ending in "_total",
 * labels type="..." and outcome="...".  It is meant for a node exporter's
 * textfile collector or a scrape wrapper (bindlog serves no HTTP).
 *
 * What each count covers matters to whoever graphs it: applied events by
 * type belong to the store (persistent, the same from every process);
 * calls by type and outcome to the handle that made them (here the
 * command's own: zero); commits and the events they carried to the store
 * (one write-ahead log frame per commit, every process, persistent).  The
 * HELP texts say so.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

enum { OPT_JSON = 1, OPT_PROMETHEUS };


static const char *durability_name(int d)
{
    switch (d) {
    case BINDLOG_DURABILITY_FULL:
        return "full";
    case BINDLOG_DURABILITY_NORMAL:
        return "normal";
    case BINDLOG_DURABILITY_NONE:
        return "none";
    default:
        return "unknown";
    }
}

/* The first LSN still in the log (0 when the log is empty), read rather
 * than assumed from base_lsn so that a hole after compaction shows. */
static int first_lsn(bindlog *s, uint64_t *out)
{
    bindlog_iter *it;
    bindlog_record r;
    int rc;

    *out = 0;
    if ((rc = bindlog_log_iter(s, 0, UINT64_MAX, &it)) != 0)
        return rc;
    rc = bindlog_iter_next_record(it, &r);
    if (rc == 1)
        *out = r.lsn;
    bindlog_iter_close(it);
    return rc < 0 ? rc : 0;
}

static const char *const outcome_cols[BINDLOG_STAT_COLUMNS] = {"applied", "already", "stale",
                                                               "moved", "error"};

/* ---- Prometheus ------------------------------------------------------------ */

/* One family's HELP and TYPE lines. */
static void prom_family(const char *name, const char *type, const char *help)
{
    printf("# HELP bindlog_%s %s\n# TYPE bindlog_%s %s\n", name, help, name, type);
}

static void prom_gauge(const char *name, const char *help, uint64_t v)
{
    prom_family(name, "gauge", help);
    printf("bindlog_%s %llu\n", name, (unsigned long long)v);
}

static void prom_counter(const char *name, const char *help, uint64_t v)
{
    prom_family(name, "counter", help);
    printf("bindlog_%s %llu\n", name, (unsigned long long)v);
}

/* Every field of bindlog_stats that is a number worth graphing.  Label
 * values are this file's literals (event and outcome names): nothing to
 * escape. */
static void print_prometheus(const bindlog_stats *st)
{
    int t, o;

    prom_gauge("head_lsn", "LSN of the last record written (0: empty store).", st->head_lsn);
    prom_gauge("base_lsn", "Records up to this LSN were compacted into the base image.",
               st->base_lsn);
    prom_gauge("log_records", "Records retained in the log.", st->log_records);
    prom_gauge("bindings", "Keys with a binding entry, tombstones included.", st->bindings);
    prom_gauge("live_bindings", "Keys bound to a session.", st->live_bindings);
    prom_gauge("sessions", "Sessions known.", st->sessions);
    prom_gauge("live_sessions", "Sessions not ended.", st->live_sessions);

    prom_family("applied_events_total", "counter",
                "Events applied to the store by type, over its whole life (store-wide: "
                "every process, persistent).");
    for (t = 1; t < BINDLOG_EVENT_COUNT; t++)
        printf("bindlog_applied_events_total{type=\"%s\"} %llu\n", bindlog_event_name(t),
               (unsigned long long)st->applied[t]);

    prom_family("calls_total", "counter",
                "Calls by event type and outcome made through the handle that reported "
                "these metrics (per handle, not persistent).");
    for (t = 1; t < BINDLOG_EVENT_COUNT; t++)
        for (o = 0; o < BINDLOG_STAT_COLUMNS; o++)
            printf("bindlog_calls_total{type=\"%s\",outcome=\"%s\"} %llu\n",
                   bindlog_event_name(t), outcome_cols[o], (unsigned long long)st->events[t][o]);

    prom_counter("commits_total",
                 "Group commits over the store's life, one write-ahead log frame each "
                 "(store-wide: every process, persistent).",
                 st->commits);
    prom_counter("grouped_events_total",
                 "Events those commits applied (store-wide); divided by commits_total: "
                 "events per flush.",
                 st->grouped_events);
    prom_gauge("checkpoint_lsn",
               "The last LSN the data file holds; later records are in the write-ahead log.",
               st->checkpoint_lsn);
    prom_gauge("log_size_bytes", "Size of the write-ahead log file (preallocated, fixed).",
               st->log_size);
    prom_gauge("log_used_bytes", "Bytes of the write-ahead log not yet checkpointed.",
               st->log_used);
    prom_gauge("map_size_bytes", "Current LMDB map size.", st->map_size);
    prom_gauge("map_used_bytes", "Bytes of the map in use (up to the last page).",
               st->map_used);
    prom_gauge("file_size_bytes", "Size of the data file.", st->file_size);
    prom_gauge("readers", "LMDB reader slots in use, all processes.", st->readers_used);
    prom_gauge("readers_max", "LMDB reader slots available.", st->readers_max);
    prom_gauge("format_version", "On-disk format of the store.", st->format_version);
}

static int run_stat(cli *c)
{
    static const cli_opt opts[] = {{"--json", NULL, 0, OPT_JSON},
                                   {"--prometheus", NULL, 0, OPT_PROMETHEUS},
                                   CLI_OPT_END};
    cli_args a;
    const char *v;
    bindlog *s = NULL;
    bindlog_stats st;
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    char hex[2 * BINDLOG_DIGEST_SIZE + 1];
    uint64_t dg_lsn, first;
    int json = 0, prom = 0, r, rc, t, o;

    cli_args_init(&a, c, &cli_cmd_stat);
    while ((r = cli_next(&a, opts, &v)) != CLI_ARG_DONE) {
        if (r == CLI_ARG_HELP)
            return CLI_OK;
        if (r == CLI_ARG_ERROR)
            return CLI_USAGE;
        if (r == CLI_ARG_POSITIONAL)
            return cli_usage_error(c, "unexpected argument '%s'", v);
        json |= r == OPT_JSON;
        prom |= r == OPT_PROMETHEUS;
    }
    if (json && prom)
        return cli_usage_error(c, "give one of --json and --prometheus");
    if ((rc = cli_open(c, 1, &s)) != 0)
        return rc;
    if ((rc = bindlog_stats_get(s, &st)) != 0) {
        rc = cli_lib_error(c, rc, "cannot read statistics");
        goto out;
    }
    if (prom) {
        print_prometheus(&st);
        rc = CLI_OK;
        goto out;
    }
    if ((rc = first_lsn(s, &first)) != 0) {
        rc = cli_lib_error(c, rc, "cannot read the log");
        goto out;
    }

    if (json) {
        if ((rc = bindlog_digest(s, dg, &dg_lsn)) != 0) {
            rc = cli_lib_error(c, rc, "cannot compute the state digest");
            goto out;
        }
        bindlog_digest_hex(dg, hex);
        cli_json j;
        cli_json_begin(&j, stdout);
        cli_json_u64(&j, "head_lsn", st.head_lsn);
        cli_json_u64(&j, "base_lsn", st.base_lsn);
        cli_json_u64(&j, "first_lsn", first);
        cli_json_u64(&j, "log_records", st.log_records);
        cli_json_u64(&j, "bindings", st.bindings);
        cli_json_u64(&j, "live_bindings", st.live_bindings);
        cli_json_u64(&j, "sessions", st.sessions);
        cli_json_u64(&j, "live_sessions", st.live_sessions);
        cli_json_open(&j, "applied");
        for (t = 1; t < BINDLOG_EVENT_COUNT; t++)
            cli_json_u64(&j, bindlog_event_name(t), st.applied[t]);
        cli_json_close(&j);
        cli_json_open(&j, "calls");
        for (t = 1; t < BINDLOG_EVENT_COUNT; t++) {
            cli_json_open(&j, bindlog_event_name(t));
            for (o = 0; o < BINDLOG_STAT_COLUMNS; o++)
                cli_json_u64(&j, outcome_cols[o], st.events[t][o]);
            cli_json_close(&j);
        }
        cli_json_close(&j);
        cli_json_u64(&j, "commits", st.commits);
        cli_json_u64(&j, "grouped_events", st.grouped_events);
        cli_json_u64(&j, "map_size", st.map_size);
        cli_json_u64(&j, "map_used", st.map_used);
        cli_json_u64(&j, "file_size", st.file_size);
        cli_json_u64(&j, "readers_used", st.readers_used);
        cli_json_u64(&j, "readers_max", st.readers_max);
        cli_json_str(&j, "durability", durability_name(st.durability));
        cli_json_u64(&j, "format_version", st.format_version);
        cli_json_u64(&j, "checkpoint_lsn", st.checkpoint_lsn);
        cli_json_u64(&j, "log_size", st.log_size);
        cli_json_u64(&j, "log_used", st.log_used);
        cli_json_str(&j, "digest", hex);
        cli_json_u64(&j, "digest_lsn", dg_lsn);
        cli_json_end(&j);
    } else {
        cli_kv kv = {stdout, 24};
        char name[64];
        cli_kv_line(&kv, "head_lsn", "%llu", (unsigned long long)st.head_lsn);
        cli_kv_line(&kv, "base_lsn", "%llu", (unsigned long long)st.base_lsn);
        if (first != 0)
            cli_kv_line(&kv, "first_lsn", "%llu", (unsigned long long)first);
        else
            cli_kv_line(&kv, "first_lsn", "- (log empty)");
        cli_kv_line(&kv, "log_records", "%llu", (unsigned long long)st.log_records);
        cli_kv_line(&kv, "bindings", "%llu", (unsigned long long)st.bindings);
        cli_kv_line(&kv, "live_bindings", "%llu", (unsigned long long)st.live_bindings);
        cli_kv_line(&kv, "sessions", "%llu", (unsigned long long)st.sessions);
        cli_kv_line(&kv, "live_sessions", "%llu", (unsigned long long)st.live_sessions);
        for (t = 1; t < BINDLOG_EVENT_COUNT; t++) {
            snprintf(name, sizeof(name), "applied.%s", bindlog_event_name(t));
            cli_kv_line(&kv, name, "%llu", (unsigned long long)st.applied[t]);
        }
        /* Per-handle counters: this command's handle has made no calls, but
         * they are fields of bindlog_stats and are shown for completeness. */
        for (t = 1; t < BINDLOG_EVENT_COUNT; t++) {
            snprintf(name, sizeof(name), "calls.%s", bindlog_event_name(t));
            cli_kv_line(&kv, name,
                        "applied %llu, already %llu, stale %llu, moved %llu, error %llu",
                        (unsigned long long)st.events[t][0], (unsigned long long)st.events[t][1],
                        (unsigned long long)st.events[t][2], (unsigned long long)st.events[t][3],
                        (unsigned long long)st.events[t][4]);
        }
        cli_kv_line(&kv, "commits", "%llu", (unsigned long long)st.commits);
        cli_kv_line(&kv, "grouped_events", "%llu", (unsigned long long)st.grouped_events);
        cli_kv_line(&kv, "map_size", "%llu", (unsigned long long)st.map_size);
        cli_kv_line(&kv, "map_used", "%llu", (unsigned long long)st.map_used);
        cli_kv_line(&kv, "file_size", "%llu", (unsigned long long)st.file_size);
        cli_kv_line(&kv, "readers", "%u used of %u", st.readers_used, st.readers_max);
        cli_kv_line(&kv, "durability", "%s", durability_name(st.durability));
        cli_kv_line(&kv, "format_version", "%u", st.format_version);
        cli_kv_line(&kv, "checkpoint_lsn", "%llu", (unsigned long long)st.checkpoint_lsn);
        cli_kv_line(&kv, "log_size", "%llu", (unsigned long long)st.log_size);
        cli_kv_line(&kv, "log_used", "%llu", (unsigned long long)st.log_used);
        /* the digest reads the whole state (seconds on a store of
         * millions of sessions): the lines above are shown first */
        fflush(stdout);
        if ((rc = bindlog_digest(s, dg, &dg_lsn)) != 0) {
            rc = cli_lib_error(c, rc, "cannot compute the state digest");
            goto out;
        }
        bindlog_digest_hex(dg, hex);
        cli_kv_line(&kv, "digest", "%s (at lsn %llu)", hex, (unsigned long long)dg_lsn);
    }
    rc = CLI_OK;
out:
    bindlog_close(s);
    return rc;
}

const cli_command cli_cmd_stat = {
    "stat", "statistics of the store and its state digest",
    "stat [--json | --prometheus]\n"
    "\n"
    "Print the store's statistics (bindlog_stats_get) and its state digest as\n"
    "aligned 'name: value' lines, or one JSON object with --json, or the\n"
    "metrics in Prometheus' text format with --prometheus (for a node\n"
    "exporter's textfile directory or a scrape wrapper; no digest there).\n"
    "applied.*, commits and grouped_events count the store's events and group\n"
    "commits (every process, persistent); calls.* count the calls of this\n"
    "command's own handle (0 here).  checkpoint_lsn is the last LSN the data\n"
    "file holds (later ones are in the write-ahead log), log_size and log_used\n"
    "the log file's size and its bytes not yet checkpointed.\n",
    run_stat};
