/*
 * cli.h -- what the bindlog command-line tool's files share.
 *
 * The tool is a thin layer over the public API (<bindlog.h>) and nothing
 * else: if an operator can do it here, a program can do it through the
 * library.  bindlog.c holds main, the option parser, dispatch and the output
 * helpers below; cmd_inspect.c, cmd_stat.c, cmd_write.c, cmd_maint.c and
 * cmd_import_json.c hold the commands (json.c is import-json's parser).
 *
 * Exit codes are part of the interface (docs/tools.md):
 *   0 success, 1 a problem found (check failed, an event refused, a key or
 *   session not found), 2 usage error, 3 store or I/O error.
 */
#ifndef BINDLOG_CLI_H
#define BINDLOG_CLI_H

#include <bindlog.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { CLI_OK = 0, CLI_PROBLEM = 1, CLI_USAGE = 2, CLI_STORE = 3 };

/* ---- invocation --------------------------------------------------------- */

/* The etcd options given on the command line (cli_etcd.c); NULL / 0 for
 * the ones not given, which the library then takes from ETCDCTL_*. */
typedef struct cli_etcd_settings {
    const char *cacert, *cert, *key, *user, *password;
    unsigned max_txn_ops;
    char user_buf[256]; /* the USER of --user USER:PASSWORD */
} cli_etcd_settings;

/* One run of the tool: the global options and the command's own argv
 * (argv[0] is the command name). */
typedef struct cli {
    const char *dir;  /* -d DIR or $BINDLOG_DIR; NULL when neither was given */
    const char *cmd;  /* the command name, for messages */
    int argc;
    char **argv;
    int have_clock;   /* BINDLOG_CLOCK_MS was set: every event gets that time */
    int64_t clock_ms;
    cli_etcd_settings etcd; /* --cacert, --cert, --key, --user, ... */
    /* check: an open refused as damaged (BINDLOG_ECORRUPT) is the check's
     * finding, not a failure to run: cli_open then stays quiet and leaves
     * the library's code in open_rc */
    int corrupt_is_finding;
    int open_rc;
} cli;

/* A command: its name, a one-line summary for `bindlog --help`, its usage
 * text for `bindlog CMD --help`, and the function that runs it. */
typedef struct cli_command {
    const char *name;
    const char *summary;
    const char *usage;
    int (*run)(cli *c);
} cli_command;

/* Defined in cmd_*.c; bindlog.c lists them in its dispatch table. */
extern const cli_command cli_cmd_stat, cli_cmd_get, cli_cmd_history, cli_cmd_lineage,
    cli_cmd_dump;
extern const cli_command cli_cmd_bind, cli_cmd_new, cli_cmd_split, cli_cmd_invalidate,
    cli_cmd_unbind;
extern const cli_command cli_cmd_check, cli_cmd_replay, cli_cmd_compact, cli_cmd_export,
    cli_cmd_import, cli_cmd_import_json;
extern const cli_command cli_cmd_recover, cli_cmd_upgrade, cli_cmd_expire;

/* ---- option parsing ----------------------------------------------------- */

/* An option a command accepts.  `name` is the long form ("--from"), `alias`
 * an optional short form ("-o"); `id` is what cli_next() returns for it. */
typedef struct cli_opt {
    const char *name;
    const char *alias;
    int has_arg;
    int id;
} cli_opt;

#define CLI_OPT_END {NULL, NULL, 0, 0}

/* What cli_next() returns besides an option id (ids are positive). */
enum {
    CLI_ARG_DONE = 0,      /* no more arguments */
    CLI_ARG_POSITIONAL = -1, /* *val is a positional argument */
    CLI_ARG_HELP = -2,     /* --help or -h: the command's usage was printed */
    CLI_ARG_ERROR = -3     /* a usage error, already reported */
};

/* Iterates over c->argv[1..]: "--opt VALUE", "--opt=VALUE", "-o VALUE",
 * and "--" which ends the options (everything after it is positional, so
 * keys that start with '-' can be named).  Unknown options, a missing value
 * and a value given to a flag are usage errors reported here. */
typedef struct cli_args {
    cli *c;
    const cli_command *cmd;
    int i;
    int options_done;
} cli_args;

void cli_args_init(cli_args *a, cli *c, const cli_command *cmd);
int cli_next(cli_args *a, const cli_opt *opts, const char **val);

/* ---- messages ----------------------------------------------------------- */

/* "bindlog CMD: MESSAGE\nTry 'bindlog CMD --help'."  Returns CLI_USAGE. */
int cli_usage_error(const cli *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "bindlog CMD: MESSAGE: <what failed> (<code name>)", where <what failed>
 * is bindlog_last_error() -- the failing call, its subject (key, session,
 * file) and the check that refused -- or the code's bindlog_strerror()
 * text when the library left none (an error of the tool's own, like
 * BINDLOG_ENOMEM).  So call it right after the failing library call.  An
 * empty MESSAGE leaves out its ": ".  Returns the exit code the error
 * deserves: CLI_USAGE for BINDLOG_EINVAL (the operator's arguments were
 * refused), CLI_PROBLEM for state refusals (ENOTFOUND, EEXIST,
 * ECONFLICT), CLI_STORE for everything else. */
int cli_lib_error(const cli *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The exit code a library error deserves, as cli_lib_error() picks it. */
int cli_exit_code(int rc);
/* Prints "bindlog CMD: MESSAGE" on stderr, nothing else. */
void cli_warn(const cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the store ---------------------------------------------------------- */

/* The etcd options (cli_etcd.c).  cli_etcd_flag: if argv[*i] is one of
 * them, take it (and its value) and advance *i: 1; not one: 0; a usage
 * error, reported: -CLI_USAGE.  cli_etcd_options: put them into o, or
 * refuse a location holding credentials (CLI_USAGE, reported, without
 * echoing it).  cli_etcd_usage: their help. */
int cli_etcd_flag(cli *c, int argc, char **argv, int *i);
int cli_etcd_options(const cli *c, bindlog_options *o);
void cli_etcd_usage(FILE *f);

/* Opens c->dir; read_only for every inspect command, so they work on a
 * live store beside a writing gateway and never create one.  Reports the
 * failure with the path and returns the exit code (0 on success). */
int cli_open(cli *c, int read_only, bindlog **out);

/* ---- strict parsing of operator input ---------------------------------- */

/* Decimal u64: digits only (no sign, no space, no "0x"), no overflow.
 * `what` names the option in the error.  Returns 0 or CLI_USAGE. */
int cli_parse_u64(const cli *c, const char *what, const char *s, uint64_t *out);
/* A duration "30s", "15m", "2h", "7d", "500ms": a positive integer and a
 * unit, in milliseconds.  Returns 0 or CLI_USAGE. */
int cli_parse_duration(const cli *c, const char *what, const char *s, int64_t *ms);
/* A time: milliseconds since the epoch ("1767225600000") or ISO-8601 UTC
 * "2026-01-01T00:00:00Z" / "2026-01-01T00:00:00.250Z" / "2026-01-01".
 * Returns 0 or CLI_USAGE. */
int cli_parse_time(const cli *c, const char *what, const char *s, int64_t *ms);
/* The tool's idea of "now": BINDLOG_CLOCK_MS when set, else the real clock. */
int64_t cli_now_ms(const cli *c);

/* ---- output ------------------------------------------------------------ */

/* ISO-8601 UTC with milliseconds, "2026-01-01T00:00:00.000Z". */
#define CLI_TIME_MAX 40
void cli_format_time(int64_t ms, char buf[CLI_TIME_MAX]);

/* Writes bytes for a human: printable UTF-8 as is; control bytes, C1
 * controls, bidirectional overrides, invalid UTF-8 and the backslash as
 * \xNN / \\ so that no value from the store can drive the terminal and
 * every escape is unambiguous. */
void cli_put_escaped(FILE *f, const void *p, size_t n);
/* The same, for the key=value fields of a record line: the value is
 * quoted ("...", with \" inside) when it is empty or holds a space, '=' or
 * '"', so every field reads back unambiguously. */
void cli_put_value(FILE *f, const void *p, size_t n);

/* Non-zero when the n bytes are well-formed UTF-8 (no overlongs, no
 * surrogates, nothing above U+10FFFF). */
int cli_utf8_valid(const void *p, size_t n);

/* JSON, one object per line: cli_json_begin(f) then fields then
 * cli_json_end(f).  Byte strings that are valid UTF-8 are JSON strings;
 * anything else is {"base64":"..."} (RFC 4648, padded).  Non-ASCII control
 * characters are \u-escaped so the output is terminal-safe too. */
typedef struct cli_json {
    FILE *f;
    int n; /* fields written in the current object */
} cli_json;
void cli_json_begin(cli_json *j, FILE *f);
void cli_json_end(cli_json *j);
void cli_json_str(cli_json *j, const char *name, const char *s);
void cli_json_bytes(cli_json *j, const char *name, const void *p, size_t n);
void cli_json_null(cli_json *j, const char *name);
void cli_json_u64(cli_json *j, const char *name, uint64_t v);
void cli_json_i64(cli_json *j, const char *name, int64_t v);
void cli_json_bool(cli_json *j, const char *name, int v);
void cli_json_time(cli_json *j, const char *name, int64_t ms); /* ISO string */
/* A nested object: cli_json_open(j, "name") ... cli_json_close(j). */
void cli_json_open(cli_json *j, const char *name);
void cli_json_close(cli_json *j);

/* "name:   value" lines, aligned on the longest name of the block. */
typedef struct cli_kv {
    FILE *f;
    int width;
} cli_kv;
void cli_kv_line(const cli_kv *kv, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A name: value line whose value is raw bytes from the store, escaped. */
void cli_kv_bytes(const cli_kv *kv, const char *name, const void *p, size_t n);

/* Flushes stdout and reports a write error (full disk, closed pipe) as
 * exit code 3; returns rc unchanged otherwise.  Every command ends with it
 * so that truncated output never exits 0. */
int cli_finish_output(const cli *c, int rc);

/* ---- progress ----------------------------------------------------------- */

/* A progress line on stderr, "\r"-updated, shown only when stderr is a
 * terminal and the work has already taken about a second (so short runs
 * and scripts see nothing), and erased by cli_progress_end().  `also_stdout`
 * false suppresses it when stdout is the same terminal (dump output and a
 * progress line would interleave).  Pass cli_progress_cb and the struct to
 * the library's bindlog_progress_fn parameters. */
typedef struct cli_progress {
    const char *label;
    int enabled;
    int64_t start_ms, last_ms;
    size_t shown; /* characters of the line on screen, 0 if none */
} cli_progress;
void cli_progress_begin(cli_progress *p, const char *label, int allow_with_tty_stdout);
void cli_progress_cb(void *ctx, uint64_t done, uint64_t total);
void cli_progress_end(cli_progress *p);

/* ---- shared record output ---------------------------------------------- */

/* Text and JSON forms of a log record, used by history and dump --log. */
void cli_print_record_header(FILE *f);
void cli_print_record(FILE *f, const bindlog_record *r, int with_key);
void cli_json_record(FILE *f, const bindlog_record *r);

/* The outcome name in lower case: "applied", "already", "stale", "moved". */
const char *cli_outcome_name(int outcome);

#endif /* BINDLOG_CLI_H */
