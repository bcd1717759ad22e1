/*
 * bindlog.c -- the bindlog command-line tool: main, option parsing,
 * dispatch, and the output helpers every command shares (escaping, JSON,
 * aligned name: value lines, times, progress).
 *
 *   bindlog [-d DIR] COMMAND [options]      (DIR defaults to $BINDLOG_DIR)
 *
 * Only <bindlog.h> is used: the tool is what any program could build on the
 * public API.  Everything read from the store is untrusted bytes on its way
 * to a terminal, so it goes through cli_put_escaped() or the JSON writer,
 * never straight to printf("%s").
 */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Commands                                                                   */

static const cli_command *const commands[] = {
    &cli_cmd_stat,   &cli_cmd_get,   &cli_cmd_history, &cli_cmd_lineage,    &cli_cmd_dump,
    &cli_cmd_bind,   &cli_cmd_new,   &cli_cmd_split,   &cli_cmd_invalidate, &cli_cmd_unbind,
    &cli_cmd_check,  &cli_cmd_replay, &cli_cmd_compact, &cli_cmd_export,    &cli_cmd_import,
    &cli_cmd_import_json, &cli_cmd_recover, &cli_cmd_upgrade, &cli_cmd_expire,
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void main_usage(FILE *f)
{
    size_t i;

    fprintf(f, "usage: bindlog [-d DIR] COMMAND [options]\n"
               "\n"
               "Inspect, repair and maintain a bindlog store (crash-safe session bindings).\n"
               "DIR is the store directory; it defaults to $BINDLOG_DIR.\n"
               "\n"
               "commands:\n");
    for (i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-11s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(f, "\n"
               "'bindlog COMMAND --help' describes a command.\n"
               "exit status: 0 success, 1 a problem found (check failed, event refused,\n"
               "not found), 2 usage error, 3 store or I/O error.\n"
               "environment: BINDLOG_DIR (default store), BINDLOG_CLOCK_MS (a fixed event\n"
               "time in ms since the epoch, for reproducible tests).\n\n");
    cli_etcd_usage(f);
}

/* BINDLOG_CLOCK_MS pins the clock the library stamps events with, so that
 * tests (tests/cli) produce the same times and digests on every run. */
static int64_t fixed_clock(void *ctx)
{
    return *(const int64_t *)ctx;
}

int main(int argc, char **argv)
{
    cli c;
    int i = 1;
    size_t k;
    const char *env;

    memset(&c, 0, sizeof(c));
    c.cmd = NULL;
    env = getenv("BINDLOG_DIR");
    if (env != NULL && env[0] != '\0')
        c.dir = env;

    /* Global options come before the command; -d is accepted after it too
     * (see cli_next), which is where people tend to type it. */
    while (i < argc && argv[i][0] == '-') {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            main_usage(stdout);
            return cli_finish_output(&c, CLI_OK);
        }
        if (strcmp(a, "--version") == 0) {
            printf("bindlog %s (store format %d)\n", bindlog_version(), BINDLOG_FORMAT_VERSION);
            return cli_finish_output(&c, CLI_OK);
        }
        if (strcmp(a, "-d") == 0 || strcmp(a, "--dir") == 0) {
            if (i + 1 >= argc)
                return cli_usage_error(&c, "option '%s' needs a directory", a);
            c.dir = argv[i + 1];
            i += 2;
            continue;
        }
        if (strncmp(a, "--dir=", 6) == 0) {
            c.dir = a + 6;
            i++;
            continue;
        }
        int etcd = cli_etcd_flag(&c, argc, argv, &i);
        if (etcd < 0)
            return -etcd;
        if (etcd > 0)
            continue;
        return cli_usage_error(&c, "unknown option '%s'", a);
    }
    if (i >= argc) {
        fprintf(stderr, "bindlog: no command given\n");
        main_usage(stderr);
        return CLI_USAGE;
    }

    for (k = 0; k < N_COMMANDS; k++) {
        if (strcmp(argv[i], commands[k]->name) == 0) {
            c.cmd = commands[k]->name;
            env = getenv("BINDLOG_CLOCK_MS");
            if (env != NULL) {
                uint64_t v;
                if (cli_parse_u64(&c, "BINDLOG_CLOCK_MS", env, &v) != 0)
                    return CLI_USAGE;
                if (v > (uint64_t)INT64_MAX)
                    return cli_usage_error(&c, "BINDLOG_CLOCK_MS '%s' is out of range", env);
                c.have_clock = 1;
                c.clock_ms = (int64_t)v;
            }
            c.argc = argc - i;
            c.argv = argv + i;
            return cli_finish_output(&c, commands[k]->run(&c));
        }
    }
    fprintf(stderr, "bindlog: unknown command '");
    cli_put_escaped(stderr, argv[i], strlen(argv[i]));
    fprintf(stderr, "'\nTry 'bindlog --help'.\n");
    return CLI_USAGE;
}

/* ------------------------------------------------------------------------ */
/* Option parsing                                                             */

void cli_args_init(cli_args *a, cli *c, const cli_command *cmd)
{
    a->c = c;
    a->cmd = cmd;
    a->i = 1;
    a->options_done = 0;
}

static const cli_opt dir_opts[] = {{"--dir", "-d", 1, 1}, CLI_OPT_END};

static const cli_opt *find_opt(const cli_opt *opts, const char *arg, size_t len)
{
    for (; opts != NULL && opts->name != NULL; opts++) {
        if (strlen(opts->name) == len && strncmp(opts->name, arg, len) == 0)
            return opts;
        if (opts->alias != NULL && strlen(opts->alias) == len &&
            strncmp(opts->alias, arg, len) == 0)
            return opts;
    }
    return NULL;
}

int cli_next(cli_args *a, const cli_opt *opts, const char **val)
{
    cli *c = a->c;
    const char *arg, *eq;
    const cli_opt *o;
    size_t len;
    int is_dir;

    *val = NULL;
    if (a->i >= c->argc)
        return CLI_ARG_DONE;
    arg = c->argv[a->i++];
    /* "-" alone is a positional argument (conventionally stdin/stdout). */
    if (a->options_done || arg[0] != '-' || arg[1] == '\0') {
        *val = arg;
        return CLI_ARG_POSITIONAL;
    }
    if (strcmp(arg, "--") == 0) {
        a->options_done = 1;
        return cli_next(a, opts, val);
    }
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
        printf("usage: bindlog [-d DIR] %s", a->cmd->usage);
        return CLI_ARG_HELP;
    }
    eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
    o = find_opt(opts, arg, len);
    is_dir = 0;
    if (o == NULL && (o = find_opt(dir_opts, arg, len)) != NULL)
        is_dir = 1;
    if (o == NULL) {
        fprintf(stderr, "bindlog %s: unknown option '", c->cmd);
        cli_put_escaped(stderr, arg, len);
        fprintf(stderr, "'\nTry 'bindlog %s --help'.\n", c->cmd);
        return CLI_ARG_ERROR;
    }
    if (!o->has_arg) {
        if (eq != NULL) {
            cli_usage_error(c, "option '%s' takes no value", o->name);
            return CLI_ARG_ERROR;
        }
        return o->id;
    }
    if (eq != NULL) {
        *val = eq + 1;
    } else {
        if (a->i >= c->argc) {
            cli_usage_error(c, "option '%s' needs a value", o->name);
            return CLI_ARG_ERROR;
        }
        *val = c->argv[a->i++];
    }
    if (is_dir) {
        c->dir = *val;
        return cli_next(a, opts, val);
    }
    return o->id;
}

/* ------------------------------------------------------------------------ */
/* Messages                                                                   */

static void vmessage(const cli *c, const char *fmt, va_list ap)
{
    if (c != NULL && c->cmd != NULL)
        fprintf(stderr, "bindlog %s: ", c->cmd);
    else
        fprintf(stderr, "bindlog: ");
    vfprintf(stderr, fmt, ap);
}

int cli_usage_error(const cli *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmessage(c, fmt, ap);
    va_end(ap);
    if (c != NULL && c->cmd != NULL && c->argv != NULL)
        fprintf(stderr, "\nTry 'bindlog %s --help'.\n", c->cmd);
    else
        fprintf(stderr, "\nTry 'bindlog --help'.\n");
    return CLI_USAGE;
}

int cli_lib_error(const cli *c, int rc, const char *fmt, ...)
{
    const char *what = bindlog_last_error();
    char msg[512];
    va_list ap;

    if (what[0] == '\0')
        what = bindlog_strerror(rc);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c != NULL && c->cmd != NULL)
        fprintf(stderr, "bindlog %s: ", c->cmd);
    else
        fprintf(stderr, "bindlog: ");
    if (msg[0] != '\0')
        fprintf(stderr, "%s: ", msg);
    /* the message quotes keys and paths already escaped (\xNN); escaping
     * again costs nothing and keeps stderr safe whatever it holds */
    cli_put_escaped(stderr, what, strlen(what));
    fprintf(stderr, " (%s)\n", bindlog_code_name(rc));
    return cli_exit_code(rc);
}

int cli_exit_code(int rc)
{
    switch (rc) {
    case BINDLOG_EINVAL:
        return CLI_USAGE;
    case BINDLOG_ENOTFOUND:
    case BINDLOG_EEXIST:
    case BINDLOG_ECONFLICT:
        return CLI_PROBLEM;
    default:
        return CLI_STORE;
    }
}

void cli_warn(const cli *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmessage(c, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int cli_finish_output(const cli *c, int rc)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        const char *why = strerror(errno);
        if (c != NULL && c->cmd != NULL)
            fprintf(stderr, "bindlog %s: cannot write output: %s\n", c->cmd, why);
        else
            fprintf(stderr, "bindlog: cannot write output: %s\n", why);
        return CLI_STORE;
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The store                                                                  */

int cli_open(cli *c, int read_only, bindlog **out)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    int rc;

    *out = NULL;
    if (c->dir == NULL || c->dir[0] == '\0')
        return cli_usage_error(c, "no store directory: give -d DIR or set BINDLOG_DIR");
    o.read_only = read_only;
    if ((rc = cli_etcd_options(c, &o)) != 0)
        return rc;
    if (c->have_clock) {
        o.clock_ms = fixed_clock;
        o.clock_ctx = &c->clock_ms;
    }
    rc = bindlog_open(out, c->dir, &o);
    c->open_rc = rc;
    if (rc == BINDLOG_ECORRUPT && c->corrupt_is_finding)
        return CLI_PROBLEM;
    if (rc != 0) {
        /* A missing store is not "not found, exit 1": the command could not
         * run at all, which is a store error.  The library's message names
         * the directory and what was found there. */
        cli_lib_error(c, rc, "cannot open the store");
        return rc == BINDLOG_EINVAL ? CLI_USAGE : CLI_STORE;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Strict parsing                                                             */

int cli_parse_u64(const cli *c, const char *what, const char *s, uint64_t *out)
{
    uint64_t v = 0;
    const char *p;

    if (s[0] == '\0')
        return cli_usage_error(c, "%s: empty number", what);
    for (p = s; *p != '\0'; p++) {
        unsigned d;
        if (*p < '0' || *p > '9') {
            fprintf(stderr, "bindlog %s: %s: '", c->cmd, what);
            cli_put_escaped(stderr, s, strlen(s));
            fprintf(stderr, "' is not a non-negative decimal number\nTry 'bindlog %s --help'.\n",
                    c->cmd);
            return CLI_USAGE;
        }
        d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return cli_usage_error(c, "%s: '%s' is too large (the maximum is %llu)", what, s,
                                   (unsigned long long)UINT64_MAX);
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int cli_parse_duration(const cli *c, const char *what, const char *s, int64_t *ms)
{
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000},
                 {"w", 604800000}};
    uint64_t v = 0;
    const char *p = s;
    size_t i;

    while (*p >= '0' && *p <= '9') {
        unsigned d = (unsigned)(*p - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10)
            return cli_usage_error(c, "%s: '%s' is too large", what, s);
        v = v * 10 + d;
        p++;
    }
    if (p == s)
        return cli_usage_error(c, "%s: '%s' is not a duration (like 30s, 15m, 2h, 7d)", what,
                               s);
    for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(p, units[i].unit) == 0) {
            if (v > (uint64_t)(INT64_MAX / units[i].ms))
                return cli_usage_error(c, "%s: '%s' is too large", what, s);
            *ms = (int64_t)v * units[i].ms;
            return 0;
        }
    }
    return cli_usage_error(c, "%s: '%s' needs a unit: ms, s, m, h, d or w (like 30s, 7d)", what,
                           s);
}

/* Days since 1970-01-01 of a proleptic Gregorian date, and back (Howard
 * Hinnant's algorithms): timegm() and gmtime_r() are not both in C11+POSIX,
 * and these also behave for times before 1970. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    int64_t era;
    unsigned yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = (unsigned)(y - era * 400);
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    int64_t era;
    unsigned doe, yoe, doy, mp;

    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = (unsigned)(z - era * 146097);
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

void cli_format_time(int64_t ms, char buf[CLI_TIME_MAX])
{
    int64_t days, rem, y;
    unsigned mo, d;

    days = ms / 86400000;
    rem = ms % 86400000;
    if (rem < 0) {
        rem += 86400000;
        days--;
    }
    civil_from_days(days, &y, &mo, &d);
    snprintf(buf, CLI_TIME_MAX, "%04lld-%02u-%02uT%02u:%02u:%02u.%03uZ", (long long)y, mo, d,
             (unsigned)(rem / 3600000), (unsigned)(rem / 60000 % 60),
             (unsigned)(rem / 1000 % 60), (unsigned)(rem % 1000));
}

/* Reads exactly n digits at *p. */
static int digits(const char **p, int n, unsigned *out)
{
    unsigned v = 0;
    int i;

    for (i = 0; i < n; i++) {
        char ch = (*p)[i];
        if (ch < '0' || ch > '9')
            return -1;
        v = v * 10 + (unsigned)(ch - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

int cli_parse_time(const cli *c, const char *what, const char *s, int64_t *ms)
{
    static const unsigned mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const char *p = s;
    unsigned y, mo, d, hh = 0, mi = 0, ss = 0, frac = 0;
    size_t i;
    int leap;

    for (i = 0; s[i] >= '0' && s[i] <= '9'; i++)
        ;
    if (i > 0 && s[i] == '\0') {
        uint64_t v;
        if (cli_parse_u64(c, what, s, &v) != 0)
            return CLI_USAGE;
        if (v > (uint64_t)INT64_MAX)
            return cli_usage_error(c, "%s: '%s' is out of range", what, s);
        *ms = (int64_t)v;
        return 0;
    }
    if (digits(&p, 4, &y) || *p++ != '-' || digits(&p, 2, &mo) || *p++ != '-' ||
        digits(&p, 2, &d))
        goto bad;
    if (*p == 'T') {
        p++;
        if (digits(&p, 2, &hh) || *p++ != ':' || digits(&p, 2, &mi) || *p++ != ':' ||
            digits(&p, 2, &ss))
            goto bad;
        if (*p == '.') {
            int n = 0;
            p++;
            while (*p >= '0' && *p <= '9' && n < 3) {
                frac = frac * 10 + (unsigned)(*p++ - '0');
                n++;
            }
            if (n == 0)
                goto bad;
            while (n++ < 3)
                frac *= 10;
        }
        /* Local time would make the cut depend on the operator's TZ. */
        if (*p++ != 'Z')
            goto bad;
    }
    if (*p != '\0')
        goto bad;
    leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] + (mo == 2 && leap) || hh > 23 ||
        mi > 59 || ss > 59)
        return cli_usage_error(c, "%s: '%s' is not a valid date and time", what, s);
    *ms = days_from_civil(y, mo, d) * 86400000 + (int64_t)hh * 3600000 + (int64_t)mi * 60000 +
          (int64_t)ss * 1000 + frac;
    return 0;
bad:
    return cli_usage_error(c,
                           "%s: '%s' is not a time: use ms since the epoch or ISO-8601 UTC "
                           "like 2026-01-01T12:00:00Z",
                           what, s);
}

int64_t cli_now_ms(const cli *c)
{
    struct timespec ts;

    if (c->have_clock)
        return c->clock_ms;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------------ */
/* UTF-8 and escaping                                                         */

/* Length of the well-formed UTF-8 sequence at p (1..4) and its code point,
 * or 0 when the bytes there are not one (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF). */
static size_t utf8_seq(const unsigned char *p, size_t n, uint32_t *cp)
{
    uint32_t v;
    size_t len, i;

    if (p[0] < 0x80) {
        *cp = p[0];
        return 1;
    }
    if (p[0] >= 0xC2 && p[0] <= 0xDF) {
        len = 2;
        v = p[0] & 0x1F;
    } else if (p[0] >= 0xE0 && p[0] <= 0xEF) {
        len = 3;
        v = p[0] & 0x0F;
    } else if (p[0] >= 0xF0 && p[0] <= 0xF4) {
        len = 4;
        v = p[0] & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)) ||
        (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

int cli_utf8_valid(const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i = 0;
    uint32_t cp;

    while (i < n) {
        size_t l = utf8_seq(b + i, n - i, &cp);
        if (l == 0)
            return 0;
        i += l;
    }
    return 1;
}

/* Code points that a terminal acts on or that reorder what the operator
 * reads: C0 and C1 controls, DEL, the bidirectional embeddings, overrides
 * and isolates ("trojan source"), and the line/paragraph separators. */
static int dangerous_cp(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
           (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 || cp == 0x2029 || cp == 0x200E ||
           cp == 0x200F || cp == 0x061C;
}

static void put_escaped(FILE *f, const void *p, size_t n, int quoted)
{
    const unsigned char *b = p;
    size_t i = 0, j;
    uint32_t cp;

    while (i < n) {
        size_t l, run = 0;
        /* Printable ASCII needs no decoding: write whole runs at once
         * (dump of millions of records spends its time here). */
        while (i + run < n && b[i + run] >= 0x20 && b[i + run] < 0x7F && b[i + run] != '\\' &&
               !(quoted && b[i + run] == '"'))
            run++;
        if (run > 0) {
            fwrite(b + i, 1, run, f);
            i += run;
            continue;
        }
        l = utf8_seq(b + i, n - i, &cp);
        if (l == 0) {
            fprintf(f, "\\x%02X", b[i]);
            i++;
            continue;
        }
        if (dangerous_cp(cp)) {
            for (j = 0; j < l; j++)
                fprintf(f, "\\x%02X", b[i + j]);
        } else if (cp == '\\' || (quoted && cp == '"')) {
            fputc('\\', f);
            fputc((int)cp, f);
        } else {
            fwrite(b + i, 1, l, f);
        }
        i += l;
    }
}

void cli_put_escaped(FILE *f, const void *p, size_t n)
{
    put_escaped(f, p, n, 0);
}

void cli_put_value(FILE *f, const void *p, size_t n)
{
    const char *s = p;
    size_t i;
    int quote = n == 0;

    for (i = 0; i < n && !quote; i++)
        quote = s[i] == ' ' || s[i] == '=' || s[i] == '"';
    if (quote)
        fputc('"', f);
    put_escaped(f, p, n, quote);
    if (quote)
        fputc('"', f);
}

/* ------------------------------------------------------------------------ */
/* JSON                                                                       */

static void json_string_body(FILE *f, const unsigned char *b, size_t n)
{
    size_t i = 0;
    uint32_t cp;

    fputc('"', f);
    while (i < n) {
        size_t l, run = 0;
        while (i + run < n && b[i + run] >= 0x20 && b[i + run] < 0x7F && b[i + run] != '\\' &&
               b[i + run] != '"')
            run++;
        if (run > 0) {
            fwrite(b + i, 1, run, f);
            i += run;
            continue;
        }
        l = utf8_seq(b + i, n - i, &cp); /* the caller checked validity */
        if (cp == '"' || cp == '\\') {
            fputc('\\', f);
            fputc((int)cp, f);
        } else if (cp == '\n') {
            fputs("\\n", f);
        } else if (cp == '\t') {
            fputs("\\t", f);
        } else if (cp == '\r') {
            fputs("\\r", f);
        } else if (dangerous_cp(cp)) {
            fprintf(f, "\\u%04x", (unsigned)cp);
        } else {
            fwrite(b + i, 1, l, f);
        }
        i += l;
    }
    fputc('"', f);
}

static void base64(FILE *f, const unsigned char *b, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t i;

    for (i = 0; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16 | (uint32_t)b[i + 1] << 8 | b[i + 2];
        fputc(tab[v >> 18], f);
        fputc(tab[(v >> 12) & 63], f);
        fputc(tab[(v >> 6) & 63], f);
        fputc(tab[v & 63], f);
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)b[i] << 16;
        fputc(tab[v >> 18], f);
        fputc(tab[(v >> 12) & 63], f);
        fputs("==", f);
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)b[i] << 16 | (uint32_t)b[i + 1] << 8;
        fputc(tab[v >> 18], f);
        fputc(tab[(v >> 12) & 63], f);
        fputc(tab[(v >> 6) & 63], f);
        fputc('=', f);
    }
}

static void json_name(cli_json *j, const char *name)
{
    if (j->n++ > 0)
        fputc(',', j->f);
    /* Field names are this file's literals: plain ASCII, no escaping. */
    fprintf(j->f, "\"%s\":", name);
}

void cli_json_begin(cli_json *j, FILE *f)
{
    j->f = f;
    j->n = 0;
    fputc('{', f);
}

void cli_json_end(cli_json *j)
{
    fputs("}\n", j->f);
}

void cli_json_open(cli_json *j, const char *name)
{
    json_name(j, name);
    fputc('{', j->f);
    j->n = 0;
}

void cli_json_close(cli_json *j)
{
    fputc('}', j->f);
    /* The enclosing object has at least the nested one as a field. */
    j->n = 1;
}

void cli_json_bytes(cli_json *j, const char *name, const void *p, size_t n)
{
    json_name(j, name);
    if (cli_utf8_valid(p, n)) {
        json_string_body(j->f, p, n);
    } else {
        fputs("{\"base64\":\"", j->f);
        base64(j->f, p, n);
        fputs("\"}", j->f);
    }
}

void cli_json_str(cli_json *j, const char *name, const char *s)
{
    cli_json_bytes(j, name, s, strlen(s));
}

void cli_json_null(cli_json *j, const char *name)
{
    json_name(j, name);
    fputs("null", j->f);
}

void cli_json_u64(cli_json *j, const char *name, uint64_t v)
{
    json_name(j, name);
    fprintf(j->f, "%llu", (unsigned long long)v);
}

void cli_json_i64(cli_json *j, const char *name, int64_t v)
{
    json_name(j, name);
    fprintf(j->f, "%lld", (long long)v);
}

void cli_json_bool(cli_json *j, const char *name, int v)
{
    json_name(j, name);
    fputs(v ? "true" : "false", j->f);
}

void cli_json_time(cli_json *j, const char *name, int64_t ms)
{
    char t[CLI_TIME_MAX];

    cli_format_time(ms, t);
    cli_json_str(j, name, t);
}

/* ------------------------------------------------------------------------ */
/* name: value lines                                                          */

/* "name:" and the spaces that align the value column. */
static void kv_name(const cli_kv *kv, const char *name)
{
    size_t n = strlen(name);
    int pad = kv->width > (int)n ? kv->width - (int)n : 0;

    fprintf(kv->f, "%s:%*s ", name, pad, "");
}

void cli_kv_line(const cli_kv *kv, const char *name, const char *fmt, ...)
{
    va_list ap;

    kv_name(kv, name);
    va_start(ap, fmt);
    vfprintf(kv->f, fmt, ap);
    va_end(ap);
    fputc('\n', kv->f);
}

void cli_kv_bytes(const cli_kv *kv, const char *name, const void *p, size_t n)
{
    kv_name(kv, name);
    cli_put_escaped(kv->f, p, n);
    fputc('\n', kv->f);
}

/* ------------------------------------------------------------------------ */
/* Progress                                                                   */

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void cli_progress_begin(cli_progress *p, const char *label, int allow_with_tty_stdout)
{
    memset(p, 0, sizeof(*p));
    p->label = label;
    p->enabled = isatty(STDERR_FILENO) && (allow_with_tty_stdout || !isatty(STDOUT_FILENO));
    p->start_ms = mono_ms();
}

void cli_progress_cb(void *ctx, uint64_t done, uint64_t total)
{
    cli_progress *p = ctx;
    char line[160];
    int64_t now;
    int len;

    if (!p->enabled)
        return;
    now = mono_ms();
    /* Quiet for the first second, then at most ten updates a second. */
    if (now - p->start_ms < 1000 || now - p->last_ms < 100)
        return;
    p->last_ms = now;
    if (total > 0)
        len = snprintf(line, sizeof(line), "%s: %llu / %llu records (%u%%)", p->label,
                       (unsigned long long)done, (unsigned long long)total,
                       (unsigned)(done >= total ? 100 : done * 100 / total));
    else
        len = snprintf(line, sizeof(line), "%s: %llu records", p->label,
                       (unsigned long long)done);
    if (len < 0)
        return;
    if ((size_t)len >= sizeof(line))
        len = (int)sizeof(line) - 1;
    /* Pad over the tail of a longer previous line instead of relying on
     * terminal escape sequences. */
    fprintf(stderr, "\r%s%*s", line, p->shown > (size_t)len ? (int)(p->shown - (size_t)len) : 0,
            "");
    if ((size_t)len > p->shown)
        p->shown = (size_t)len;
    fflush(stderr);
}

void cli_progress_end(cli_progress *p)
{
    if (p->shown > 0) {
        fprintf(stderr, "\r%*s\r", (int)p->shown, "");
        fflush(stderr);
        p->shown = 0;
    }
}

/* ------------------------------------------------------------------------ */
/* Records                                                                    */

const char *cli_outcome_name(int outcome)
{
    switch (outcome) {
    case BINDLOG_APPLIED:
        return "applied";
    case BINDLOG_ALREADY:
        return "already";
    case BINDLOG_STALE:
        return "stale";
    case BINDLOG_MOVED:
        return "moved";
    case BINDLOG_ROUTED:
        return "routed";
    case BINDLOG_CREATED:
        return "created";
    case BINDLOG_RESET:
        return "reset";
    default:
        return "unknown";
    }
}

/* What the other id of a record means, by type (bindlog_record.other_id). */
static const char *other_label(int type)
{
    switch (type) {
    case BINDLOG_EVENT_BIND:
        return "prev";
    case BINDLOG_EVENT_NEW_SESSION:
        return "parent";
    case BINDLOG_EVENT_SPLIT:
        return "parent";
    default:
        return NULL;
    }
}

/* Long origins are cut in text output (the JSON form is complete). */
#define ORIGIN_TEXT_MAX 120

void cli_print_record_header(FILE *f)
{
    fprintf(f, "%8s  %-24s  %-11s  %5s  %s\n", "LSN", "TIME", "TYPE", "GEN", "DETAILS");
}

void cli_print_record(FILE *f, const bindlog_record *r, int with_key)
{
    char t[CLI_TIME_MAX];
    const char *ol = other_label(r->type);

    cli_format_time(r->time_ms, t);
    fprintf(f, "%8llu  %-24s  %-11s  %5llu ", (unsigned long long)r->lsn, t,
            bindlog_event_name(r->type), (unsigned long long)r->generation);
    if (with_key) {
        fputs(" key=", f);
        cli_put_value(f, r->key, r->key_len);
    }
    fputs(" session=", f);
    cli_put_value(f, r->session_id, strlen(r->session_id));
    if (ol != NULL) {
        fprintf(f, " %s=", ol);
        cli_put_value(f, r->other_id, strlen(r->other_id));
    }
    fputs(" reason=", f);
    cli_put_value(f, r->reason, strlen(r->reason));
    if (r->origin_present) {
        size_t n = r->origin_len < ORIGIN_TEXT_MAX ? r->origin_len : ORIGIN_TEXT_MAX;
        fputs(" origin=", f);
        cli_put_value(f, r->origin, n);
        if (n < r->origin_len)
            fprintf(f, "...(%zu bytes)", r->origin_len);
    }
    fputc('\n', f);
}

void cli_json_record(FILE *f, const bindlog_record *r)
{
    cli_json j;

    cli_json_begin(&j, f);
    cli_json_u64(&j, "lsn", r->lsn);
    cli_json_str(&j, "type", bindlog_event_name(r->type));
    cli_json_i64(&j, "time_ms", r->time_ms);
    cli_json_time(&j, "time", r->time_ms);
    cli_json_u64(&j, "generation", r->generation);
    cli_json_bytes(&j, "key", r->key, r->key_len);
    cli_json_str(&j, "session_id", r->session_id);
    cli_json_str(&j, "other_id", r->other_id);
    cli_json_str(&j, "reason", r->reason);
    if (r->origin_present)
        cli_json_bytes(&j, "origin", r->origin, r->origin_len);
    else
        cli_json_null(&j, "origin");
    cli_json_end(&j);
}
