/*
 * cmd_write.c -- operator repair: bind, new, split, invalidate, unbind.
 *
 * Each command applies exactly one event through the public API, with the
 * same rules a gateway's call gets (there is no back door), and prints the
 * outcome.  APPLIED and ALREADY exit 0; STALE and MOVED exit 1 because the
 * change the operator asked for did not happen (nothing was written).
 *
 * A write command refuses a directory that holds no store unless --create
 * is given: a mistyped -d at 3 a.m. must not "repair" a brand-new empty
 * store while the real one stays broken.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_JSON = 1,
    OPT_EXPECT,
    OPT_REASON,
    OPT_ORIGIN,
    OPT_ORIGIN_FILE,
    OPT_GENERATION,
    OPT_CREATE
};

/* What the command line gave; NULL means "not given" (the library
 * default), "" is a real value, exactly as in the API. */
typedef struct write_args {
    const char *pos[3];
    int npos;
    const char *expect, *reason;
    unsigned char *origin; /* owned; NULL = no origin given */
    size_t origin_len;
    uint64_t generation;
    int json, create;
} write_args;

/* Reads an origin from a file ("-" = stdin), refusing one that is larger
 * than the library accepts rather than cutting it. */
static int read_origin_file(cli *c, const char *path, write_args *w)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    size_t n;

    if (f == NULL) {
        fprintf(stderr, "bindlog %s: cannot read origin file '%s': %s\n", c->cmd, path,
                strerror(errno));
        return CLI_STORE;
    }
    free(w->origin);
    w->origin = malloc(BINDLOG_ORIGIN_MAX + 1);
    if (w->origin == NULL) {
        if (f != stdin)
            fclose(f);
        return cli_lib_error(c, BINDLOG_ENOMEM, "origin");
    }
    n = fread(w->origin, 1, BINDLOG_ORIGIN_MAX + 1, f);
    if (ferror(f)) {
        fprintf(stderr, "bindlog %s: cannot read origin file '%s': %s\n", c->cmd, path,
                strerror(errno));
        if (f != stdin)
            fclose(f);
        return CLI_STORE;
    }
    if (f != stdin)
        fclose(f);
    if (n > BINDLOG_ORIGIN_MAX)
        return cli_usage_error(c, "origin file '%s' is larger than %d bytes", path,
                               BINDLOG_ORIGIN_MAX);
    w->origin_len = n;
    return 0;
}

/* Parses a write command's arguments: exactly `npos` positionals and the
 * options in `opts`.  Returns 0, -1 after --help, or an exit code. */
static int parse_write(cli *c, const cli_command *cmd, const cli_opt *opts, int npos,
                       const char *const *names, write_args *w)
{
    cli_args a;
    const char *v;
    int r, rc;

    memset(w, 0, sizeof(*w));
    w->generation = BINDLOG_ANY_GENERATION;
    cli_args_init(&a, c, cmd);
    while ((r = cli_next(&a, opts, &v)) != CLI_ARG_DONE) {
        switch (r) {
        case CLI_ARG_HELP:
            return -1;
        case CLI_ARG_ERROR:
            return CLI_USAGE;
        case CLI_ARG_POSITIONAL:
            if (w->npos >= npos) {
                fprintf(stderr, "bindlog %s: unexpected argument '", c->cmd);
                cli_put_escaped(stderr, v, strlen(v));
                fprintf(stderr, "'\nTry 'bindlog %s --help'.\n", c->cmd);
                return CLI_USAGE;
            }
            w->pos[w->npos++] = v;
            break;
        case OPT_JSON:
            w->json = 1;
            break;
        case OPT_CREATE:
            w->create = 1;
            break;
        case OPT_EXPECT:
            w->expect = v;
            break;
        case OPT_REASON:
            w->reason = v;
            break;
        case OPT_ORIGIN:
            if (w->origin != NULL)
                return cli_usage_error(c, "give one of --origin and --origin-file");
            if (strlen(v) > BINDLOG_ORIGIN_MAX)
                return cli_usage_error(c, "--origin is longer than %d bytes",
                                       BINDLOG_ORIGIN_MAX);
            w->origin_len = strlen(v);
            if ((w->origin = malloc(w->origin_len + 1)) == NULL)
                return cli_lib_error(c, BINDLOG_ENOMEM, "origin");
            memcpy(w->origin, v, w->origin_len + 1);
            break;
        case OPT_ORIGIN_FILE:
            if (w->origin != NULL)
                return cli_usage_error(c, "give one of --origin and --origin-file");
            if ((rc = read_origin_file(c, v, w)) != 0)
                return rc;
            break;
        case OPT_GENERATION:
            if (strcmp(v, "any") == 0)
                w->generation = BINDLOG_ANY_GENERATION;
            else if (cli_parse_u64(c, "--generation", v, &w->generation) != 0)
                return CLI_USAGE;
            else if (w->generation == BINDLOG_ANY_GENERATION)
                return cli_usage_error(c, "--generation: use 'any' to skip the check");
            break;
        }
    }
    if (w->npos < npos)
        return cli_usage_error(c, "missing %s", names[w->npos]);
    return 0;
}

/* Opens the store for writing; without --create a missing store is an
 * error, checked by a read-only open first (which never creates one). */
static int open_for_write(cli *c, const write_args *w, bindlog **out)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *probe = NULL;
    int rc;

    *out = NULL;
    if (!w->create && c->dir != NULL && c->dir[0] != '\0') {
        o.read_only = 1;
        rc = bindlog_open(&probe, c->dir, &o);
        bindlog_close(probe);
        if (rc == BINDLOG_ENOTFOUND) {
            fprintf(stderr, "bindlog %s: no store at '", c->cmd);
            cli_put_escaped(stderr, c->dir, strlen(c->dir));
            fprintf(stderr, "' (give --create to make a new one)\n");
            return CLI_STORE;
        }
        /* Other failures are reported by the real open below. */
    }
    return cli_open(c, 0, out);
}

static void print_result(const write_args *w, const bindlog_result *r)
{
    if (w->json) {
        cli_json j;
        cli_json_begin(&j, stdout);
        cli_json_str(&j, "outcome", cli_outcome_name(r->outcome));
        cli_json_u64(&j, "lsn", r->lsn);
        cli_json_u64(&j, "generation", r->generation);
        cli_json_str(&j, "session_id", r->session_id);
        cli_json_end(&j);
        return;
    }
    cli_kv kv = {stdout, 11};
    cli_kv_line(&kv, "outcome", "%s", cli_outcome_name(r->outcome));
    if (r->lsn != 0)
        cli_kv_line(&kv, "lsn", "%llu", (unsigned long long)r->lsn);
    else
        cli_kv_line(&kv, "lsn", "- (nothing written)");
    cli_kv_line(&kv, "generation", "%llu", (unsigned long long)r->generation);
    if (r->session_id[0] != '\0')
        cli_kv_bytes(&kv, "session_id", r->session_id, strlen(r->session_id));
    else
        cli_kv_line(&kv, "session_id", "- (not bound)");
}

/* Prints the outcome (or the error) and picks the exit code. */
static int finish(cli *c, int rc, const write_args *w, const bindlog_result *r)
{
    /* The library's message names the call, the key and the check that
     * refused ("split k: key is not bound"), arguments included. */
    if (rc < 0)
        return cli_lib_error(c, rc, "event not applied");
    print_result(w, r);
    if (rc == BINDLOG_STALE || rc == BINDLOG_MOVED) {
        cli_warn(c, "event refused, %s; nothing written", bindlog_strerror(rc));
        return CLI_PROBLEM;
    }
    return CLI_OK;
}

#define COMMON_OPTS {"--json", NULL, 0, OPT_JSON}, {"--create", NULL, 0, OPT_CREATE}
#define ORIGIN_OPTS                                                                              \
    {"--origin", NULL, 1, OPT_ORIGIN}, {"--origin-file", NULL, 1, OPT_ORIGIN_FILE}

#define COMMON_HELP                                                                              \
    "--json prints the result as one JSON object.  The store must exist unless\n"              \
    "--create is given.  Exit 0 for applied or already, 1 for stale or moved\n"               \
    "(nothing written) and for ENOTFOUND/EEXIST/ECONFLICT refusals.\n"

/* Runs one write command: parse, open, apply, report. */
typedef int (*apply_fn)(bindlog *s, const write_args *w, bindlog_result *r);

static int run_write(cli *c, const cli_command *cmd, const cli_opt *opts, int npos,
                     const char *const *names, apply_fn apply)
{
    write_args w;
    bindlog *s = NULL;
    bindlog_result r;
    int rc;

    rc = parse_write(c, cmd, opts, npos, names, &w);
    if (rc != 0) {
        free(w.origin);
        return rc < 0 ? CLI_OK : rc;
    }
    if ((rc = open_for_write(c, &w, &s)) == 0) {
        memset(&r, 0, sizeof(r));
        rc = finish(c, apply(s, &w, &r), &w, &r);
        bindlog_close(s);
    }
    free(w.origin);
    return rc;
}

/* ---- bind --------------------------------------------------------------- */

static int apply_bind(bindlog *s, const write_args *w, bindlog_result *r)
{
    return bindlog_bind(s, w->pos[0], w->pos[1], w->expect, w->reason, w->origin, w->origin_len,
                        r);
}

static int run_bind(cli *c)
{
    static const cli_opt opts[] = {COMMON_OPTS, ORIGIN_OPTS, {"--expect", NULL, 1, OPT_EXPECT},
                                   {"--reason", NULL, 1, OPT_REASON}, CLI_OPT_END};
    static const char *const names[] = {"KEY", "SESSION"};
    return run_write(c, &cli_cmd_bind, opts, 2, names, apply_bind);
}

const cli_command cli_cmd_bind = {
    "bind", "route a key to a session (operator repair)",
    "bind KEY SESSION [--expect ID] [--reason R] [--origin TEXT | --origin-file FILE]\n"
    "            [--json] [--create]\n"
    "\n"
    "BIND: route KEY to SESSION, creating SESSION as a root session or re-opening\n"
    "it, and ending the session KEY was bound to (reason default 'switch').\n"
    "--expect ID applies only if KEY is bound to ID now (--expect '' = only if\n"
    "unbound), else the outcome is moved.  --origin replaces the session's origin\n"
    "(--origin-file reads it from a file, '-' for stdin).\n" COMMON_HELP,
    run_bind};

/* ---- new ---------------------------------------------------------------- */

static int apply_new(bindlog *s, const write_args *w, bindlog_result *r)
{
    return bindlog_new_session(s, w->pos[0], w->pos[1], w->reason, w->origin, w->origin_len, r);
}

static int run_new(cli *c)
{
    static const cli_opt opts[] = {COMMON_OPTS, ORIGIN_OPTS, {"--reason", NULL, 1, OPT_REASON},
                                   CLI_OPT_END};
    static const char *const names[] = {"KEY", "SESSION"};
    return run_write(c, &cli_cmd_new, opts, 2, names, apply_new);
}

const cli_command cli_cmd_new = {
    "new", "start a new session on a key (/new)",
    "new KEY SESSION [--reason R] [--origin TEXT | --origin-file FILE] [--json] [--create]\n"
    "\n"
    "NEW_SESSION: create SESSION (it must not exist) with KEY's current session as\n"
    "its parent, end that session (reason default 'new_session'), bind KEY to it.\n" COMMON_HELP,
    run_new};

/* ---- split -------------------------------------------------------------- */

static int apply_split(bindlog *s, const write_args *w, bindlog_result *r)
{
    return bindlog_split(s, w->pos[0], w->pos[1], w->pos[2], w->generation, w->origin,
                         w->origin_len, r);
}

static int run_split(cli *c)
{
    static const cli_opt opts[] = {COMMON_OPTS, ORIGIN_OPTS,
                                   {"--generation", NULL, 1, OPT_GENERATION}, CLI_OPT_END};
    static const char *const names[] = {"KEY", "PARENT", "CHILD"};
    return run_write(c, &cli_cmd_split, opts, 3, names, apply_split);
}

const cli_command cli_cmd_split = {
    "split", "continue a session in a child (compression split)",
    "split KEY PARENT CHILD [--generation N|any] [--origin TEXT | --origin-file FILE]\n"
    "             [--json] [--create]\n"
    "\n"
    "SPLIT: if KEY is bound to PARENT, create CHILD (parent PARENT, origin copied\n"
    "from PARENT unless --origin is given), end PARENT with 'compression' and\n"
    "bind KEY to CHILD; the generation is unchanged.  --generation N applies only\n"
    "if KEY's generation is N (else stale); the default 'any' skips that check.\n" COMMON_HELP,
    run_split};

/* ---- invalidate, unbind ------------------------------------------------- */

static int apply_invalidate(bindlog *s, const write_args *w, bindlog_result *r)
{
    return bindlog_invalidate(s, w->pos[0], w->reason, r);
}

static int run_invalidate(cli *c)
{
    static const cli_opt opts[] = {COMMON_OPTS, {"--reason", NULL, 1, OPT_REASON}, CLI_OPT_END};
    static const char *const names[] = {"KEY"};
    return run_write(c, &cli_cmd_invalidate, opts, 1, names, apply_invalidate);
}

const cli_command cli_cmd_invalidate = {
    "invalidate", "bump a key's generation (/stop)",
    "invalidate KEY [--reason R] [--json] [--create]\n"
    "\n"
    "INVALIDATE: generation + 1 with the binding unchanged, so every run that\n"
    "started before is stale (reason default 'invalidate').\n" COMMON_HELP,
    run_invalidate};

static int apply_unbind(bindlog *s, const write_args *w, bindlog_result *r)
{
    return bindlog_unbind(s, w->pos[0], w->reason, r);
}

static int run_unbind(cli *c)
{
    static const cli_opt opts[] = {COMMON_OPTS, {"--reason", NULL, 1, OPT_REASON}, CLI_OPT_END};
    static const char *const names[] = {"KEY"};
    return run_write(c, &cli_cmd_unbind, opts, 1, names, apply_unbind);
}

const cli_command cli_cmd_unbind = {
    "unbind", "end a key's session and leave it unbound (idle expiry)",
    "unbind KEY [--reason R] [--json] [--create]\n"
    "\n"
    "UNBIND: end KEY's session (reason default 'unbind'), leave a tombstone,\n"
    "generation + 1.\n" COMMON_HELP,
    run_unbind};
