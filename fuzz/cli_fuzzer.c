/*
 * cli_fuzzer.c -- the bindlog command-line tool's argument handling.
 *
 * Two parts per input:
 *
 *  1. The input, split at NUL bytes, is an argument vector: its first byte
 *     picks a command (stat, get, history, lineage, dump, bind, new, split,
 *     invalidate, unbind) and the pieces after it are that command's
 *     arguments.  tools/bindlog.c's main() (compiled here as
 *     bindlog_cli_main) runs it against a scratch store that holds a few
 *     events (made afresh for every input, so inputs are independent).  It
 *     must not crash, must return one of the documented exit codes (0..3),
 *     and must leave a store that still opens.  Arguments that could point
 *     the tool elsewhere (-d, --dir, anything starting with "-d" or "--d")
 *     are dropped, so a fuzzer cannot make it create directories anywhere;
 *     stdin is /dev/null.
 *
 *  2. The first piece goes to the strict parsers: cli_parse_u64,
 *     cli_parse_duration, cli_parse_time, and cli_utf8_valid /
 *     cli_put_escaped.  Every time cli_parse_time accepts in the years
 *     0000..9999 must format (cli_format_time) and parse back to itself.
 *
 * The tool's stdout goes to /dev/null; its messages on stderr stay (under
 * libFuzzer, -close_fd_mask=2 silences them: run_campaign.sh passes it).
 */
#define _GNU_SOURCE
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bindlog.h"
#include "cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);
int bindlog_cli_main(int argc, char **argv); /* tools/bindlog.c's main */

#define MAX_ARGS 12

static char g_dir[4096];
static FILE *g_null;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static void rm_store(void)
{
    if (g_dir[0])
        nftw(g_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    struct stat st;
    const char *base = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0
                           ? "/dev/shm"
                           : getenv("TMPDIR");
    if (base == NULL || base[0] == '\0')
        base = "/tmp";
    snprintf(g_dir, sizeof(g_dir), "%s/bindlog-cli-fuzz-XXXXXX", base);
    if (mkdtemp(g_dir) == NULL) {
        perror(g_dir);
        abort();
    }
    atexit(rm_store);
    setenv("BINDLOG_DIR", g_dir, 1);
    setenv("BINDLOG_CLOCK_MS", "1767225600000", 1);
    if (freopen("/dev/null", "r", stdin) == NULL)
        abort();
    g_null = fopen("/dev/null", "w");
    if (g_null == NULL)
        abort();
    return 0;
}

/* Point fd 1 at /dev/null while the tool runs (the replay driver's own
 * lines on stdout stay visible); returns the saved fd or -1. */
static int mute_stdout(void)
{
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    dup2(fileno(g_null), STDOUT_FILENO);
    return saved;
}

static void unmute_stdout(int saved)
{
    fflush(stdout);
    clearerr(stdout);
    if (saved >= 0) {
        dup2(saved, STDOUT_FILENO);
        close(saved);
    }
}

/* A fresh store holding a little history: k1 bound to S2 (split from S1),
 * k2 a tombstone, k3 invalidated. */
static void make_store(void)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s;
    o.durability = BINDLOG_DURABILITY_NONE;
    rm_store();
    if (bindlog_open(&s, g_dir, &o) != 0)
        abort();
    bindlog_bind(s, "k1", "S1", NULL, NULL, "{\"peer\":1}", 10, NULL);
    bindlog_split(s, "k1", "S1", "S2", 1, NULL, 0, NULL);
    bindlog_new_session(s, "k2", "T1", NULL, NULL, 0, NULL);
    bindlog_unbind(s, "k2", NULL, NULL);
    bindlog_bind(s, "k3", "U1", "", "first", "", 0, NULL);
    bindlog_invalidate(s, "k3", NULL, NULL);
    bindlog_close(s);
}

static int unsafe_arg(const char *a)
{
    return strncmp(a, "-d", 2) == 0 || strncmp(a, "--d", 3) == 0;
}

static void parsers(const char *s)
{
    cli c;
    uint64_t u;
    int64_t ms, back;
    char buf[CLI_TIME_MAX];

    memset(&c, 0, sizeof(c));
    c.cmd = "fuzz";
    (void)cli_parse_u64(&c, "n", s, &u);
    (void)cli_parse_duration(&c, "d", s, &ms);
    if (cli_parse_time(&c, "t", s, &ms) == 0 && ms >= 0 && ms < 253402300800000) {
        cli_format_time(ms, buf);
        if (cli_parse_time(&c, "t", buf, &back) != 0 || back != ms) {
            fprintf(stderr, "cli_fuzzer: time %lld formats as '%s' which parses as %lld\n",
                    (long long)ms, buf, (long long)back);
            abort();
        }
    }
    (void)cli_utf8_valid(s, strlen(s));
    cli_put_escaped(g_null, s, strlen(s));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const commands[] = {"stat",  "get",   "history",    "lineage", "dump",
                                           "bind",  "new",   "split",      "invalidate",
                                           "unbind"};
    char *argv[MAX_ARGS + 3];
    int argc = 0;

    if (g_dir[0] == '\0')
        LLVMFuzzerInitialize(NULL, NULL);
    if (size == 0 || size > 4096)
        return 0;

    /* data[1..] as NUL-separated strings, in one NUL-terminated copy */
    char *args = malloc(size + 1);
    if (args == NULL)
        return 0;
    memcpy(args, data + 1, size - 1);
    args[size - 1] = '\0';
    parsers(args);

    argv[argc++] = "bindlog";
    argv[argc++] = (char *)commands[data[0] % (sizeof(commands) / sizeof(commands[0]))];
    for (size_t i = 0; i < size - 1 && argc < MAX_ARGS + 2;) {
        char *a = args + i;
        i += strlen(a) + 1;
        if (!unsafe_arg(a))
            argv[argc++] = a;
    }
    argv[argc] = NULL;

    make_store();
    int saved = mute_stdout();
    int rc = bindlog_cli_main(argc, argv);
    unmute_stdout(saved);
    if (rc < CLI_OK || rc > CLI_STORE) {
        fprintf(stderr, "cli_fuzzer: exit code %d\n", rc);
        abort();
    }
    bindlog *s;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    if (bindlog_open(&s, g_dir, &o) != 0) {
        fprintf(stderr, "cli_fuzzer: the store no longer opens\n");
        abort();
    }
    bindlog_close(s);
    free(args);
    return 0;
}
