/*
 * cmd_maint.c -- maintenance: check, replay, compact, export, import.
 *
 * Thin wrappers over the library's maintenance calls (bindlog.h, "check,
 * replay, compaction, export and import"): the work, its safety on a live
 * store and its bounded memory are the library's; this file parses the
 * operator's intent, shows progress on a terminal and reports the result.
 * check, replay and export open the store read-only; compact and import
 * write and so open it read-write; compact --vacuum works on the directory
 * and refuses (BINDLOG_EBUSY) while any writer has it open.
 */
#define _GNU_SOURCE /* mkostemp */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    OPT_JSON = 1,
    OPT_OUT,
    OPT_TO_LSN,
    OPT_TO_TIME,
    OPT_KEEP_FROM,
    OPT_KEEP_LAST,
    OPT_OLDER_THAN,
    OPT_VACUUM,
    OPT_FROM_LSN,
    OPT_OUTPUT,
    OPT_INPUT
};

static void hex_of(const unsigned char d[BINDLOG_DIGEST_SIZE], char hex[2 * BINDLOG_DIGEST_SIZE + 1])
{
    bindlog_digest_hex(d, hex);
}

/* Runs the option loop for commands that take no positionals.  `handle`
 * is called with each option; returns 0, -1 after --help, or an exit code. */
typedef int (*opt_fn)(cli *c, void *ctx, int id, const char *val);

static int parse_opts(cli *c, const cli_command *cmd, const cli_opt *opts, opt_fn fn, void *ctx)
{
    cli_args a;
    const char *v;
    int r, rc;

    cli_args_init(&a, c, cmd);
    while ((r = cli_next(&a, opts, &v)) != CLI_ARG_DONE) {
        if (r == CLI_ARG_HELP)
            return -1;
        if (r == CLI_ARG_ERROR)
            return CLI_USAGE;
        if (r == CLI_ARG_POSITIONAL) {
            fprintf(stderr, "bindlog %s: unexpected argument '", c->cmd);
            cli_put_escaped(stderr, v, strlen(v));
            fprintf(stderr, "'\nTry 'bindlog %s --help'.\n", c->cmd);
            return CLI_USAGE;
        }
        if ((rc = fn(c, ctx, r, v)) != 0)
            return rc;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* check                                                                      */

static int check_opt(cli *c, void *ctx, int id, const char *val)
{
    (void)c;
    (void)val;
    if (id == OPT_JSON)
        *(int *)ctx = 1;
    return 0;
}

static int run_check(cli *c)
{
    static const cli_opt opts[] = {{"--json", NULL, 0, OPT_JSON}, CLI_OPT_END};
    bindlog *s = NULL;
    bindlog_check_report rep;
    cli_progress p;
    char sh[2 * BINDLOG_DIGEST_SIZE + 1], rh[2 * BINDLOG_DIGEST_SIZE + 1];
    int json = 0, rc;

    if ((rc = parse_opts(c, &cli_cmd_check, opts, check_opt, &json)) != 0)
        return rc < 0 ? CLI_OK : rc;
    int opened;
    memset(&rep, 0, sizeof(rep));
    c->corrupt_is_finding = 1;
    if ((rc = cli_open(c, 1, &s)) != 0 && c->open_rc != BINDLOG_ECORRUPT)
        return rc;
    opened = s != NULL;
    if (!opened) {
        /* the store refuses to open as damaged (a break in the log's
         * acknowledged frames, another store's log, ...): that is what
         * the check found, and the message names the first bad frame */
        rep.problems = 1;
        snprintf(rep.message, sizeof rep.message, "%s", bindlog_last_error());
    } else {
        cli_progress_begin(&p, "check", 1);
        rc = bindlog_check(s, &rep, cli_progress_cb, &p);
        cli_progress_end(&p);
        bindlog_close(s);
        if (rc != 0)
            return cli_lib_error(c, rc, "the check could not run");
    }
    hex_of(rep.state_digest, sh);
    hex_of(rep.replay_digest, rh);
    if (json) {
        cli_json j;
        cli_json_begin(&j, stdout);
        cli_json_bool(&j, "ok", rep.problems == 0);
        cli_json_u64(&j, "problems", rep.problems);
        cli_json_u64(&j, "records", rep.records);
        cli_json_u64(&j, "head_lsn", rep.head_lsn);
        cli_json_u64(&j, "first_bad_lsn", rep.first_bad_lsn);
        cli_json_str(&j, "first_bad_key", rep.first_bad_key);
        cli_json_str(&j, "message", rep.message);
        cli_json_str(&j, "state_digest", sh);
        cli_json_str(&j, "replay_digest", rh);
        cli_json_end(&j);
    } else {
        cli_kv kv = {stdout, 14};
        if (opened) {
            cli_kv_line(&kv, "records", "%llu", (unsigned long long)rep.records);
            cli_kv_line(&kv, "head_lsn", "%llu", (unsigned long long)rep.head_lsn);
            cli_kv_line(&kv, "state_digest", "%s", sh);
            cli_kv_line(&kv, "replay_digest", "%s", rh);
        } else {
            cli_kv_line(&kv, "open", "refused: the store is damaged");
        }
        cli_kv_line(&kv, "problems", "%llu", (unsigned long long)rep.problems);
        if (rep.problems != 0) {
            if (rep.first_bad_lsn != 0)
                cli_kv_line(&kv, "first_bad_lsn", "%llu", (unsigned long long)rep.first_bad_lsn);
            if (rep.first_bad_key[0] != '\0')
                cli_kv_bytes(&kv, "first_bad_key", rep.first_bad_key, strlen(rep.first_bad_key));
            cli_kv_bytes(&kv, "message", rep.message, strlen(rep.message));
        }
        cli_kv_line(&kv, "result", "%s", rep.problems == 0 ? "ok" : "FAILED");
    }
    if (rep.problems != 0) {
        fprintf(stderr, "bindlog check: %llu problem%s found: ", (unsigned long long)rep.problems,
                rep.problems == 1 ? "" : "s");
        cli_put_escaped(stderr, rep.message, strlen(rep.message));
        fputc('\n', stderr);
        return CLI_PROBLEM;
    }
    return CLI_OK;
}

const cli_command cli_cmd_check = {
    "check", "verify checksums, LSNs, indexes and replay == state",
    "check [--json]\n"
    "\n"
    "Verify one snapshot of the store: every log record's checksum and LSN, the\n"
    "indexes, the counters, and that replaying the base image and the log gives\n"
    "exactly the stored state (equal digests); and bindlog.wal from the last\n"
    "checkpoint to the head: every frame's checksum, salt, position and LSN, its\n"
    "records equal to the store's, and no frame after the end that says the log\n"
    "was flushed beyond it.  Names the first bad LSN, key or frame (its byte in\n"
    "bindlog.wal).  A store that refuses to open as damaged (BINDLOG_ECORRUPT:\n"
    "a break in the log's acknowledged frames, another store's log) is reported\n"
    "as the problem found, with the refusal's message.\n"
    "Read-only: safe on a live store.  Exit 1 when a problem is found.\n",
    run_check};

/* ------------------------------------------------------------------------ */
/* replay                                                                     */

typedef struct replay_args {
    const char *out;
    uint64_t to_lsn;
    int64_t to_time;
    int have_lsn, have_time, json;
} replay_args;

static int replay_opt(cli *c, void *ctx, int id, const char *val)
{
    replay_args *r = ctx;

    switch (id) {
    case OPT_JSON:
        r->json = 1;
        return 0;
    case OPT_OUT:
        r->out = val;
        return 0;
    case OPT_TO_LSN:
        r->have_lsn = 1;
        return cli_parse_u64(c, "--to-lsn", val, &r->to_lsn);
    case OPT_TO_TIME:
        r->have_time = 1;
        return cli_parse_time(c, "--to-time", val, &r->to_time);
    }
    return 0;
}

static int run_replay(cli *c)
{
    static const cli_opt opts[] = {{"--json", NULL, 0, OPT_JSON},
                                   {"--out", "-o", 1, OPT_OUT},
                                   {"--to-lsn", NULL, 1, OPT_TO_LSN},
                                   {"--to-time", NULL, 1, OPT_TO_TIME},
                                   CLI_OPT_END};
    replay_args ra = {NULL, UINT64_MAX, INT64_MAX, 0, 0, 0};
    bindlog *s = NULL;
    unsigned char dg[BINDLOG_DIGEST_SIZE], live[BINDLOG_DIGEST_SIZE];
    char hex[2 * BINDLOG_DIGEST_SIZE + 1], lhex[2 * BINDLOG_DIGEST_SIZE + 1];
    uint64_t last = 0, live_lsn = 0;
    cli_progress p;
    int rc, compared = 0, match = 0;

    if ((rc = parse_opts(c, &cli_cmd_replay, opts, replay_opt, &ra)) != 0)
        return rc < 0 ? CLI_OK : rc;
    if (ra.out == NULL)
        return cli_usage_error(c, "missing --out DIR (the new store to replay into)");
    if (ra.have_lsn && ra.have_time)
        return cli_usage_error(c, "give one of --to-lsn and --to-time");
    if ((rc = cli_open(c, 1, &s)) != 0)
        return rc;
    cli_progress_begin(&p, "replay", 1);
    rc = bindlog_replay(s, ra.out, ra.to_lsn, ra.to_time, dg, &last, cli_progress_cb, &p);
    cli_progress_end(&p);
    if (rc != 0) {
        bindlog_close(s);
        cli_lib_error(c, rc, "%s", rc == BINDLOG_ECORRUPT
                                       ? "replay failed (remove the partial store before retrying)"
                                       : "replay failed");
        return cli_exit_code(rc) == CLI_USAGE ? CLI_USAGE : CLI_STORE;
    }
    /* A replay of the whole log must reproduce the live digest; compare
     * when the store has not moved on since (a writer may be running). */
    if (!ra.have_lsn && !ra.have_time && bindlog_digest(s, live, &live_lsn) == 0 &&
        live_lsn == last) {
        compared = 1;
        match = memcmp(dg, live, BINDLOG_DIGEST_SIZE) == 0;
        hex_of(live, lhex);
    }
    bindlog_close(s);
    hex_of(dg, hex);
    if (ra.json) {
        cli_json j;
        cli_json_begin(&j, stdout);
        cli_json_str(&j, "out", ra.out);
        cli_json_u64(&j, "last_lsn", last);
        cli_json_str(&j, "digest", hex);
        if (compared)
            cli_json_bool(&j, "matches_live", match);
        else
            cli_json_null(&j, "matches_live");
        cli_json_end(&j);
    } else {
        cli_kv kv = {stdout, 12};
        cli_kv_bytes(&kv, "out", ra.out, strlen(ra.out));
        cli_kv_line(&kv, "last_lsn", "%llu", (unsigned long long)last);
        cli_kv_line(&kv, "digest", "%s", hex);
        if (compared)
            cli_kv_line(&kv, "live_digest", "%s (%s)", lhex, match ? "matches" : "DIFFERS");
    }
    if (compared && !match) {
        cli_warn(c, "the replayed state differs from the live state at lsn %llu; run "
                    "'bindlog check'",
                 (unsigned long long)last);
        return CLI_PROBLEM;
    }
    return CLI_OK;
}

const cli_command cli_cmd_replay = {
    "replay", "rebuild the state from the log into a new store",
    "replay --out DIR [--to-lsn N | --to-time T] [--json]\n"
    "\n"
    "Rebuild a new store in DIR (which must not exist or be empty) from this\n"
    "store's base image and log, up to LSN N or to the last record with a time\n"
    "<= T (ms since the epoch, or ISO-8601 UTC like 2026-01-01T12:00:00Z), and\n"
    "print its digest.  A replay of the whole log is compared with the live\n"
    "digest; exit 1 if they differ.  Inspect the result with bindlog -d DIR.\n",
    run_replay};

/* ------------------------------------------------------------------------ */
/* compact                                                                    */

typedef struct compact_args {
    int mode; /* OPT_KEEP_FROM, OPT_KEEP_LAST, OPT_OLDER_THAN, OPT_VACUUM */
    uint64_t n;
    int64_t age_ms;
    int json;
} compact_args;

static int compact_opt(cli *c, void *ctx, int id, const char *val)
{
    compact_args *ca = ctx;

    if (id == OPT_JSON) {
        ca->json = 1;
        return 0;
    }
    if (ca->mode != 0 && ca->mode != id)
        return cli_usage_error(c, "give one of --keep-from, --keep-last, --older-than, --vacuum");
    ca->mode = id;
    switch (id) {
    case OPT_KEEP_FROM:
        return cli_parse_u64(c, "--keep-from", val, &ca->n);
    case OPT_KEEP_LAST:
        return cli_parse_u64(c, "--keep-last", val, &ca->n);
    case OPT_OLDER_THAN:
        return cli_parse_duration(c, "--older-than", val, &ca->age_ms);
    }
    return 0;
}

static int run_vacuum(cli *c, const compact_args *ca)
{
    uint64_t before = 0, after = 0;
    int rc;

    if (c->dir == NULL || c->dir[0] == '\0')
        return cli_usage_error(c, "no store directory: give -d DIR or set BINDLOG_DIR");
    rc = bindlog_vacuum(c->dir, &before, &after);
    if (rc != 0) {
        cli_lib_error(c, rc, "%s", rc == BINDLOG_EBUSY
                                       ? "cannot vacuum now (stop the gateway first, or run "
                                         "'compact --keep-...', which works online)"
                                       : "cannot vacuum");
        return CLI_STORE;
    }
    if (ca->json) {
        cli_json j;
        cli_json_begin(&j, stdout);
        cli_json_u64(&j, "size_before", before);
        cli_json_u64(&j, "size_after", after);
        cli_json_end(&j);
    } else {
        cli_kv kv = {stdout, 11};
        cli_kv_line(&kv, "size_before", "%llu", (unsigned long long)before);
        cli_kv_line(&kv, "size_after", "%llu", (unsigned long long)after);
    }
    return CLI_OK;
}

static int run_compact(cli *c)
{
    static const cli_opt opts[] = {{"--json", NULL, 0, OPT_JSON},
                                   {"--keep-from", NULL, 1, OPT_KEEP_FROM},
                                   {"--keep-last", NULL, 1, OPT_KEEP_LAST},
                                   {"--older-than", NULL, 1, OPT_OLDER_THAN},
                                   {"--vacuum", NULL, 0, OPT_VACUUM},
                                   CLI_OPT_END};
    compact_args ca = {0, 0, 0, 0};
    bindlog *s = NULL;
    bindlog_stats st;
    uint64_t keep_from = 0, removed = 0;
    cli_progress p;
    int rc;

    if ((rc = parse_opts(c, &cli_cmd_compact, opts, compact_opt, &ca)) != 0)
        return rc < 0 ? CLI_OK : rc;
    if (ca.mode == 0)
        return cli_usage_error(c, "say what to keep: --keep-from LSN, --keep-last N or "
                                  "--older-than DURATION (or --vacuum)");
    if (ca.mode == OPT_VACUUM)
        return run_vacuum(c, &ca);
    if ((rc = cli_open(c, 0, &s)) != 0)
        return rc;
    if ((rc = bindlog_stats_get(s, &st)) != 0) {
        rc = cli_lib_error(c, rc, "cannot read statistics");
        goto out;
    }
    switch (ca.mode) {
    case OPT_KEEP_FROM:
        keep_from = ca.n;
        break;
    case OPT_KEEP_LAST:
        /* The last N records stay: everything before head - N + 1 goes. */
        keep_from = ca.n >= st.head_lsn ? 1 : st.head_lsn - ca.n + 1;
        break;
    case OPT_OLDER_THAN: {
        int64_t now = cli_now_ms(c);
        int64_t cut = now - ca.age_ms; /* both non-negative: no overflow */
        if ((rc = bindlog_lsn_at_time(s, cut, &keep_from)) != 0) {
            rc = cli_lib_error(c, rc, "cannot find the cut in the log");
            goto out;
        }
        break;
    }
    }
    cli_progress_begin(&p, "compact", 1);
    rc = bindlog_compact(s, keep_from, &removed, cli_progress_cb, &p);
    cli_progress_end(&p);
    if (rc != 0) {
        rc = cli_lib_error(c, rc, "compaction to lsn %llu failed", (unsigned long long)keep_from);
        goto out;
    }
    if ((rc = bindlog_stats_get(s, &st)) != 0) {
        rc = cli_lib_error(c, rc, "cannot read statistics");
        goto out;
    }
    if (ca.json) {
        cli_json j;
        cli_json_begin(&j, stdout);
        cli_json_u64(&j, "keep_from", keep_from);
        cli_json_u64(&j, "removed", removed);
        cli_json_u64(&j, "base_lsn", st.base_lsn);
        cli_json_u64(&j, "log_records", st.log_records);
        cli_json_u64(&j, "head_lsn", st.head_lsn);
        cli_json_end(&j);
    } else {
        cli_kv kv = {stdout, 11};
        cli_kv_line(&kv, "keep_from", "%llu", (unsigned long long)keep_from);
        cli_kv_line(&kv, "removed", "%llu", (unsigned long long)removed);
        cli_kv_line(&kv, "base_lsn", "%llu", (unsigned long long)st.base_lsn);
        cli_kv_line(&kv, "log_records", "%llu", (unsigned long long)st.log_records);
        cli_kv_line(&kv, "head_lsn", "%llu", (unsigned long long)st.head_lsn);
    }
    rc = CLI_OK;
out:
    bindlog_close(s);
    return rc;
}

const cli_command cli_cmd_compact = {
    "compact", "drop old log records into the base image; --vacuum shrinks the file",
    "compact (--keep-from LSN | --keep-last N | --older-than DURATION) [--json]\n"
    "       compact --vacuum [--json]\n"
    "\n"
    "Fold the log records before the cut into the base image and delete them,\n"
    "in short transactions, so a running gateway keeps writing.  The state and\n"
    "its digest do not change; history and dump --log lose the old records.\n"
    "  --keep-from LSN        keep LSN and later\n"
    "  --keep-last N          keep the last N records\n"
    "  --older-than DURATION  drop records older than now - DURATION (30s, 15m,\n"
    "                         2h, 7d, 2w, 500ms)\n"
    "--vacuum rewrites the data file to its live size; it needs every writer to\n"
    "have closed the store (else exit 3, BINDLOG_EBUSY) and is crash-safe.\n",
    run_compact};

/* ------------------------------------------------------------------------ */
/* export                                                                     */

typedef struct stream_args {
    const char *path;
    uint64_t from_lsn;
    int json;
} stream_args;

static int stream_opt(cli *c, void *ctx, int id, const char *val)
{
    stream_args *sa = ctx;

    switch (id) {
    case OPT_JSON:
        sa->json = 1;
        return 0;
    case OPT_OUTPUT:
    case OPT_INPUT:
        sa->path = val;
        return 0;
    case OPT_FROM_LSN:
        return cli_parse_u64(c, "--from-lsn", val, &sa->from_lsn);
    }
    return 0;
}

/* ---- files written and replaced safely ------------------------------------ */

/* "a symbolic link", "a directory", ...: what a path that is not a regular
 * file is, for messages. */
static const char *file_kind(mode_t m)
{
    return S_ISLNK(m)    ? "a symbolic link"
           : S_ISDIR(m)  ? "a directory"
           : S_ISFIFO(m) ? "a fifo"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

/* The directory part of path ("." when none) and its last component,
 * both malloc'd; trailing slashes are not part of the name. */
static int split_path(const char *path, char **dir, char **base)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    size_t d = b;
    while (d > 1 && path[d - 1] == '/')
        d--;
    *dir = b == 0 ? strdup(".") : strndup(path, d);
    *base = strndup(path + b, n - b);
    if (*dir == NULL || *base == NULL) {
        free(*dir);
        free(*base);
        return -1;
    }
    return 0;
}

/* Flush a directory, so that a rename in it survives a power loss
 * (bindlog_fsync: F_FULLFSYNC on macOS, where fsync stops at the drive's
 * cache).  0, or -1 with errno set. */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = bindlog_fsync(fd);
    close(fd);
    if (rc != 0)
        errno = rc == BINDLOG_EINVAL ? EINVAL : EIO;
    return rc != 0 ? -1 : 0;
}

/*
 * A file written to a temporary beside its target and renamed over it once
 * complete (export -o FILE).  The temporary is made by mkostemp (O_EXCL:
 * never an existing file or link, and a name nobody can predict, so a link
 * planted at "FILE.partial" in a shared directory leads nowhere) in FILE's
 * directory, so that the rename is atomic.  A target that exists and is
 * not a regular file (a device, a fifo, a directory, a link) is refused
 * and left as it is: /dev/null is not replaced by a regular file, and a
 * fifo is not opened (which could block).
 */
typedef struct safe_out {
    const char *path;  /* the target */
    char *dir;         /* its directory */
    char *tmp;         /* the temporary, while it exists */
    int fd;
} safe_out;

/* A target that is there must be a regular file.  0 or CLI_USAGE. */
static int safe_out_check(const cli *c, const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode))
        return 0;
    fprintf(stderr, "bindlog %s: '", c->cmd);
    cli_put_escaped(stderr, path, strlen(path));
    fprintf(stderr, "' is %s, not a regular file: refusing to replace it (give a regular "
                    "file, or '-' for stdout)\n",
            file_kind(st.st_mode));
    return CLI_USAGE;
}

static int safe_out_open(const cli *c, safe_out *o, const char *path)
{
    char *base = NULL;
    int rc;

    memset(o, 0, sizeof(*o));
    o->path = path;
    o->fd = -1;
    if ((rc = safe_out_check(c, path)) != 0)
        return rc;
    if (split_path(path, &o->dir, &base) != 0)
        return cli_lib_error(c, BINDLOG_ENOMEM, "export");
    size_t n = strlen(o->dir) + strlen(base) + sizeof("/..XXXXXX");
    if ((o->tmp = malloc(n)) == NULL) {
        free(base);
        return cli_lib_error(c, BINDLOG_ENOMEM, "export");
    }
    snprintf(o->tmp, n, "%s/.%s.XXXXXX", o->dir, base);
    free(base);
    o->fd = mkostemp(o->tmp, O_CLOEXEC | O_NOFOLLOW);
    if (o->fd < 0) {
        fprintf(stderr, "bindlog %s: cannot create a temporary file in '", c->cmd);
        cli_put_escaped(stderr, o->dir, strlen(o->dir));
        fprintf(stderr, "': %s\n", strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        return CLI_STORE;
    }
    return 0;
}

/* Make the written file durable and put it in place.  0 or an exit code;
 * on failure the temporary is gone and the target untouched. */
static int safe_out_commit(const cli *c, safe_out *o)
{
    int rc;
    /* F_FULLFSYNC on macOS (bindlog_fsync), as the store's own files */
    if (bindlog_fsync(o->fd) != 0) {
        fprintf(stderr, "bindlog %s: cannot write '%s': %s\n", c->cmd, o->tmp,
                bindlog_last_error());
        return CLI_STORE;
    }
    if (close(o->fd) != 0) {
        o->fd = -1;
        fprintf(stderr, "bindlog %s: cannot write '%s': %s\n", c->cmd, o->tmp, strerror(errno));
        return CLI_STORE;
    }
    o->fd = -1;
    /* once more: the target may have been replaced while the stream was
     * written */
    if ((rc = safe_out_check(c, o->path)) != 0)
        return rc;
    if (rename(o->tmp, o->path) != 0) {
        fprintf(stderr, "bindlog %s: cannot rename '%s' to '%s': %s\n", c->cmd, o->tmp, o->path,
                strerror(errno));
        return CLI_STORE;
    }
    free(o->tmp);
    o->tmp = NULL;
    if (sync_dir(o->dir) != 0) {
        fprintf(stderr, "bindlog %s: cannot sync directory '%s': %s\n", c->cmd, o->dir,
                strerror(errno));
        return CLI_STORE;
    }
    return 0;
}

/* Release; a temporary still there (a failure) is removed. */
static void safe_out_end(safe_out *o)
{
    if (o->fd >= 0)
        close(o->fd);
    if (o->tmp != NULL)
        unlink(o->tmp);
    free(o->tmp);
    free(o->dir);
    o->fd = -1;
    o->tmp = o->dir = NULL;
}

static int run_export(cli *c)
{
    static const cli_opt opts[] = {{"--json", NULL, 0, OPT_JSON},
                                   {"--output", "-o", 1, OPT_OUTPUT},
                                   {"--from-lsn", NULL, 1, OPT_FROM_LSN},
                                   CLI_OPT_END};
    stream_args sa = {NULL, 0, 0};
    bindlog *s = NULL;
    safe_out out = {.fd = -1};
    uint64_t records = 0;
    cli_progress p;
    int fd = -1, rc, to_stdout;

    if ((rc = parse_opts(c, &cli_cmd_export, opts, stream_opt, &sa)) != 0)
        return rc < 0 ? CLI_OK : rc;
    to_stdout = sa.path == NULL || strcmp(sa.path, "-") == 0;
    if (to_stdout && isatty(STDOUT_FILENO))
        return cli_usage_error(c, "refusing to write a binary stream to a terminal: give -o FILE "
                                  "or redirect stdout");
    if (to_stdout && sa.json)
        return cli_usage_error(c, "--json needs -o FILE (the stream itself goes to stdout)");
    /* before the store is opened: a refused target costs nothing */
    if (!to_stdout && (rc = safe_out_check(c, sa.path)) != 0)
        return rc;
    if ((rc = cli_open(c, 1, &s)) != 0)
        return rc;
    if (to_stdout) {
        fd = STDOUT_FILENO;
        fflush(stdout);
    } else {
        if ((rc = safe_out_open(c, &out, sa.path)) != 0)
            goto out;
        fd = out.fd;
    }
    cli_progress_begin(&p, "export", 1);
    rc = bindlog_export(s, sa.from_lsn, fd, &records, cli_progress_cb, &p);
    cli_progress_end(&p);
    if (rc != 0) {
        rc = cli_lib_error(c, rc, "export failed");
        goto out;
    }
    if (!to_stdout) {
        if ((rc = safe_out_commit(c, &out)) != 0)
            goto out;
        if (sa.json) {
            cli_json j;
            cli_json_begin(&j, stdout);
            cli_json_str(&j, "file", sa.path);
            cli_json_u64(&j, "records", records);
            cli_json_end(&j);
        } else {
            cli_kv kv = {stdout, 7};
            cli_kv_bytes(&kv, "file", sa.path, strlen(sa.path));
            cli_kv_line(&kv, "records", "%llu", (unsigned long long)records);
        }
    }
    rc = CLI_OK;
out:
    safe_out_end(&out); /* a failed export leaves no temporary file behind */
    bindlog_close(s);
    return rc;
}

const cli_command cli_cmd_export = {
    "export", "write a portable, checksummed stream of the store",
    "export [--from-lsn N] [-o FILE] [--json]\n"
    "\n"
    "Write the store as a stream (header, base image, records, trailer with\n"
    "count and digest) to FILE, or to stdout when FILE is '-' or not given\n"
    "(never to a terminal).  FILE appears only once complete and synced: the\n"
    "stream goes to a new temporary file beside it, renamed over it at the end.\n"
    "A FILE that exists and is not a regular file (a device, a fifo, a directory,\n"
    "a symbolic link) is refused and left alone.  --from-lsn N\n"
    "writes an incremental stream of the records from N on, for a standby whose\n"
    "head is N - 1.  Read-only: safe on a live store.\n",
    run_export};

/* ------------------------------------------------------------------------ */
/* import                                                                     */

/* ---- import into a new directory: staged, renamed into place -------------- */

/*
 * A refused import leaves nothing behind.  The library's import is all or
 * nothing within a store, but opening the target creates the store before
 * the stream is read: `import -i /etc/hostname` into a new directory used
 * to leave an empty store there, which a later write without --create then
 * took for a real one.  So when the target holds no store (it does not
 * exist, or is an empty directory), the store is built in a temporary
 * directory beside it ("." + name + ".import-XXXXXX", in the nearest
 * directory that exists) and renamed into place only once the stream is
 * accepted and synced; a refusal removes the temporary, and with it every
 * file the import made.  Missing parents of the target are made only then.
 * A target that already holds something goes through the library directly.
 */
typedef struct staged {
    char *tmp;      /* the temporary store directory, while it exists */
    char *parent;   /* the directory the target goes into */
    char *anchor;   /* where tmp was made: parent, or its nearest existing ancestor */
} staged;

/* 1 if the import into `dir` must be staged: dir is missing, or an empty
 * directory (not a link to one: renaming over a link would replace the
 * link, not fill the directory it names). */
static int wants_staging(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0)
        return errno == ENOENT;
    if (!S_ISDIR(st.st_mode))
        return 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    struct dirent *de;
    int empty = 1;
    while (empty && (de = readdir(d)) != NULL)
        empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
    closedir(d);
    return empty;
}

/* Remove a temporary store directory: its files (the import made them all,
 * none is a directory), then itself. */
static void remove_tmp_store(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    if (d != NULL) {
        while ((de = readdir(d)) != NULL)
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                unlinkat(dirfd(d), de->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}

/* mkdir -p (0700, as the library makes store directories). */
static int make_parents(const char *dir)
{
    char *p = strdup(dir);
    int rc = 0;
    if (p == NULL)
        return -1;
    for (size_t i = 1, n = strlen(p); i <= n && rc == 0; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char ch = p[i];
        p[i] = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            rc = -1;
        p[i] = ch;
    }
    free(p);
    return rc;
}

/* staged_begin(): no temporary can be made beside the target (its parent
 * is not writable), but the target is an empty directory: the store is
 * made in it, and a refusal removes the files the import made there. */
#define STAGE_IN_PLACE (-2)

/* Make the temporary directory.  0, STAGE_IN_PLACE or an exit code
 * (reported). */
static int staged_begin(const cli *c, staged *st, const char *target)
{
    char *base = NULL;
    struct stat sb;

    memset(st, 0, sizeof(*st));
    if (split_path(target, &st->parent, &base) != 0)
        return cli_lib_error(c, BINDLOG_ENOMEM, "import");
    /* the nearest ancestor that exists: nothing is created above it yet */
    st->anchor = strdup(st->parent);
    while (st->anchor != NULL && stat(st->anchor, &sb) != 0 && errno == ENOENT) {
        char *up, *name;
        if (split_path(st->anchor, &up, &name) != 0) {
            free(st->anchor);
            st->anchor = NULL;
            break;
        }
        free(name);
        int same = strcmp(up, st->anchor) == 0;
        free(st->anchor);
        st->anchor = up;
        if (same)
            break;
    }
    size_t n = (st->anchor ? strlen(st->anchor) : 0) + strlen(base) + sizeof("/..import-XXXXXX");
    if (st->anchor == NULL || (st->tmp = malloc(n)) == NULL) {
        free(base);
        return cli_lib_error(c, BINDLOG_ENOMEM, "import");
    }
    snprintf(st->tmp, n, "%s/.%s.import-XXXXXX", st->anchor, base);
    free(base);
    if (mkdtemp(st->tmp) == NULL) {
        int err = errno;
        free(st->tmp);
        st->tmp = NULL;
        if ((err == EACCES || err == EPERM || err == EROFS) && stat(target, &sb) == 0)
            return STAGE_IN_PLACE; /* the target is an empty directory we may write in */
        errno = err;
        fprintf(stderr, "bindlog %s: cannot create a temporary directory in '", c->cmd);
        cli_put_escaped(stderr, st->anchor, strlen(st->anchor));
        fprintf(stderr, "': %s\n", strerror(errno));
        return CLI_STORE;
    }
    return 0;
}

/* The import was accepted (and the store closed): put it in place. */
static int staged_commit(const cli *c, staged *st, const char *target)
{
    if (make_parents(st->parent) != 0) {
        fprintf(stderr, "bindlog %s: cannot create '%s': %s\n", c->cmd, st->parent,
                strerror(errno));
        return CLI_STORE;
    }
    /* over a missing target or an empty directory; anything else that
     * appeared meanwhile is not replaced */
    if (rename(st->tmp, target) != 0) {
        fprintf(stderr, "bindlog %s: cannot move the imported store into '", c->cmd);
        cli_put_escaped(stderr, target, strlen(target));
        fprintf(stderr, "': %s; nothing imported\n", strerror(errno));
        return CLI_STORE;
    }
    free(st->tmp);
    st->tmp = NULL;
    if (sync_dir(st->parent) != 0) {
        fprintf(stderr, "bindlog %s: cannot sync directory '%s': %s\n", c->cmd, st->parent,
                strerror(errno));
        return CLI_STORE;
    }
    return 0;
}

static void staged_end(staged *st)
{
    if (st->tmp != NULL)
        remove_tmp_store(st->tmp);
    free(st->tmp);
    free(st->parent);
    free(st->anchor);
    memset(st, 0, sizeof(*st));
}

static int run_import(cli *c)
{
    static const cli_opt opts[] = {{"--json", NULL, 0, OPT_JSON},
                                   {"--input", "-i", 1, OPT_INPUT},
                                   CLI_OPT_END};
    stream_args sa = {NULL, 0, 0};
    bindlog *s = NULL;
    bindlog_stats st;
    staged stage = {0};
    unsigned char dg[BINDLOG_DIGEST_SIZE];
    char hex[2 * BINDLOG_DIGEST_SIZE + 1];
    uint64_t records = 0, off = 0, dlsn = 0;
    cli_progress p;
    int fd, rc, from_stdin, staging = 0;

    if ((rc = parse_opts(c, &cli_cmd_import, opts, stream_opt, &sa)) != 0)
        return rc < 0 ? CLI_OK : rc;
    from_stdin = sa.path == NULL || strcmp(sa.path, "-") == 0;
    if (from_stdin && isatty(STDIN_FILENO))
        return cli_usage_error(c, "refusing to read a stream from a terminal: give -i FILE or "
                                  "redirect stdin");
    if (c->dir == NULL || c->dir[0] == '\0')
        return cli_usage_error(c, "no store directory: give -d DIR or set BINDLOG_DIR");
    if (from_stdin) {
        fd = STDIN_FILENO;
    } else if ((fd = open(sa.path, O_RDONLY | O_CLOEXEC)) < 0) {
        fprintf(stderr, "bindlog import: cannot open '%s': %s\n", sa.path, strerror(errno));
        return CLI_STORE;
    }
    if ((staging = wants_staging(c->dir)) != 0 &&
        (rc = staged_begin(c, &stage, c->dir)) != 0 && rc != STAGE_IN_PLACE)
        goto out;
    if (stage.tmp != NULL) {
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        if ((rc = bindlog_open(&s, stage.tmp, &o)) != 0) {
            fprintf(stderr, "bindlog import: cannot make a store for '");
            cli_put_escaped(stderr, c->dir, strlen(c->dir));
            fprintf(stderr, "': %s (%s)\n", bindlog_last_error(), bindlog_code_name(rc));
            rc = cli_exit_code(rc);
            goto out;
        }
    } else if ((rc = cli_open(c, 0, &s)) != 0) {
        goto out;
    }
    cli_progress_begin(&p, "import", 1);
    rc = bindlog_import(s, fd, &records, &off, cli_progress_cb, &p);
    cli_progress_end(&p);
    if (rc != 0) {
        /* EEXIST's generic text speaks of session ids; here it means the
         * stream does not fit this store. */
        cli_lib_error(c, rc, "nothing applied");
        rc = rc == BINDLOG_EEXIST ? CLI_PROBLEM : CLI_STORE;
        if (staging && stage.tmp == NULL) {
            /* made in place in what was an empty directory: unmake it
             * (every file a new store has) */
            static const char *const files[] = {"data.mdb", "lock.mdb", "bindlog.wal",
                                                "bindlog.shm", "bindlog.lock"};
            bindlog_close(s);
            s = NULL;
            for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
                char path[4096];
                if (snprintf(path, sizeof(path), "%s/%s", c->dir, files[i]) < (int)sizeof(path))
                    unlink(path);
            }
        }
        goto out;
    }
    if ((rc = bindlog_stats_get(s, &st)) != 0 || (rc = bindlog_digest(s, dg, &dlsn)) != 0) {
        rc = cli_lib_error(c, rc, "imported, but cannot read the result");
        goto out;
    }
    if (stage.tmp != NULL) {
        bindlog_close(s);
        s = NULL;
        if ((rc = staged_commit(c, &stage, c->dir)) != 0)
            goto out;
    }
    hex_of(dg, hex);
    if (sa.json) {
        cli_json j;
        cli_json_begin(&j, stdout);
        cli_json_u64(&j, "records", records);
        cli_json_u64(&j, "head_lsn", st.head_lsn);
        cli_json_u64(&j, "base_lsn", st.base_lsn);
        cli_json_str(&j, "digest", hex);
        cli_json_end(&j);
    } else {
        cli_kv kv = {stdout, 8};
        cli_kv_line(&kv, "records", "%llu", (unsigned long long)records);
        cli_kv_line(&kv, "head_lsn", "%llu", (unsigned long long)st.head_lsn);
        cli_kv_line(&kv, "base_lsn", "%llu", (unsigned long long)st.base_lsn);
        cli_kv_line(&kv, "digest", "%s (at lsn %llu)", hex, (unsigned long long)dlsn);
    }
    rc = CLI_OK;
out:
    if (!from_stdin)
        close(fd);
    bindlog_close(s);
    staged_end(&stage); /* a refused import into a new directory leaves nothing */
    return rc;
}

const cli_command cli_cmd_import = {
    "import", "restore or append a stream written by export",
    "import [-i FILE] [--json]\n"
    "\n"
    "Read a stream from FILE (or stdin, never a terminal) into the store: a full\n"
    "stream into an empty or new store restores it with the same digest; an\n"
    "incremental stream starting at head + 1 appends.  A torn, altered,\n"
    "overlapping or gapped stream is refused with its byte offset and nothing is\n"
    "applied (exit 3; exit 1 for a full stream into a non-empty store).  Into a\n"
    "directory that does not exist or is empty, the store is built beside it and\n"
    "moved into place only once the stream is accepted: a refused import leaves\n"
    "nothing there.\n",
    run_import};
