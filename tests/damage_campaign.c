/*
 * damage_campaign.c -- damage copies of a store and run the CLI on them.
 *
 *   damage_campaign (--store DIR | --gateway-sim PATH) --cli PATH [--work DIR]
 *                   [--per-kind N | --full] [--seed S] [--timeout SEC] [--jobs J]
 *                   [--key KEY] [--kinds k1,k2,...] [--strict]
 *                   [--allow-loss | --allow-recover-loss] [--show-refusals]
 *
 * Two halves.  This file damages data.mdb (below); damage_campaign_log.c
 * damages bindlog.wal and bindlog.shm of stores it makes itself, whose
 * writer died with acknowledged events only in the log, and holds every
 * open, get, check and recover to the silent-loss oracle.  --kinds selects
 * kinds of either half ("data" and "log" name all of one); --store and
 * --gateway-sim are needed only for the data.mdb half.  With --strict the
 * exit status is 1 if anything crashed, hung, answered wrong, failed to
 * recover or lost an acknowledged event silently (--allow-loss: losses are
 * counted, not failed on; --allow-recover-loss: only recover's).
 * --show-refusals prints each refusal of a damaged copy with its message.
 * --write-copy LOGKIND:INDEX DIR writes one log/shm copy (as a LOSS line
 * names it: "whdr #12" is whdr:12) into DIR, to reproduce a finding.
 *
 * DIR is a pristine store; with --gateway-sim the driver makes one itself
 * in its work directory by running examples/gateway_sim (5,154 events,
 * durability none: the same bytes as a FULL run, in a fifth of a second).  For each damage kind the
 * driver makes copies of its data.mdb, each damaged in one way drawn from a seeded generator (the
 * same seed gives the same copies), and runs each of ten commands of the CLI on it under a timeout:
 *
 *   stat, get KEY, history KEY, lineage SESSION, dump, check,
 *   replay --out, export -o, bind (the write path), compact (compaction
 *   with --keep-last 1000, then --vacuum)
 *
 * The write commands get a fresh copy each.  It counts, per kind and
 * command, crashes (death by a signal), hangs (killed at the timeout), and
 * wrong answers: check exiting 0 on a copy whose state, as the three dumps
 * (log, bindings, sessions, --json) show it, differs from the pristine
 * store's, or cannot be read at all.  Every copy check does not pass is
 * then recovered (recover COPY --out NEW) and NEW checked: a recover that
 * crashes, hangs, fails or builds a store check does not pass is counted
 * in the last column (a refusal is right only for a file cut before its
 * second page: nothing of a store is left).
 *
 * Kinds and the counts of the full campaign:
 *   trunc     160  the file cut at a random length (half on page bounds)
 *   flip1    1100  one byte XORed with a random non-zero value
 *   flipN     200  a run of 2..64 random bytes
 *   header    200  a random byte of a tree page's 16-byte header
 *   randpage  150  a page of random bytes
 *   zeropage  150  a page of zeros
 *   meta      800  1..8 random bytes in the first 152 bytes of page 0 or 1
 * --per-kind N makes N copies of each kind instead (CI uses a handful).
 *
 * Output: a table of crashes / hangs per kind and command, then wrong
 * answers per kind, then one line per crash or hang naming the copy (kind,
 * index, the damage) so that it can be reproduced.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "damage_campaign.h"

enum { K_TRUNC, K_FLIP1, K_FLIPN, K_HEADER, K_RANDPAGE, K_ZEROPAGE, K_META, NKINDS };
static const char *const kind_names[NKINDS] = {"trunc",    "flip1",    "flipN", "header",
                                               "randpage", "zeropage", "meta"};
static const unsigned full_counts[NKINDS] = {160, 1100, 200, 200, 150, 150, 800};

const char *const dc_cmd_names[NCMDS] = {"stat",  "get",    "history", "lineage", "dump",
                                         "check", "replay", "export",  "bind",    "compact"};
#define cmd_names dc_cmd_names

typedef struct damage {
    int kind;
    unsigned idx;
    uint64_t off, len; /* trunc: new length */
    unsigned char bytes[4096];
} damage;

static struct {
    const char *store, *work, *key, *sim;
    char session[256];
    unsigned per_kind, jobs;
    int full, strict, kinds_mask;
    uint64_t seed;
    unsigned char *data;
    size_t size;
    unsigned psize;
    char *ref; /* the pristine dumps */
    size_t ref_len;
} cfg;

const char *dc_cli;
unsigned dc_timeout;

/* ---- helpers ------------------------------------------------------------- */

_Noreturn void dc_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "damage_campaign: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

uint64_t dc_mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

uint64_t dc_below(uint64_t *s, uint64_t n)
{
    return n ? dc_mix(s) % n : 0;
}

unsigned char *dc_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0, got;
    if (f == NULL)
        return NULL;
    do {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 20;
            unsigned char *nb = realloc(buf, cap);
            if (nb == NULL)
                dc_die("out of memory");
            buf = nb;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    *len = n;
    return buf;
}

void dc_write_file(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        dc_die("%s: %s", path, strerror(errno));
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, (const char *)p + done, n - done);
        if (w <= 0)
            dc_die("%s: %s", path, strerror(errno));
        done += (size_t)w;
    }
    close(fd);
}

void dc_rm_rf(const char *path)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", path, (char *)NULL);
        _exit(127);
    }
    int st;
    while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
}

char *dc_path2(const char *a, const char *b)
{
    char *p;
    if (asprintf(&p, "%s/%s", a, b) < 0)
        dc_die("out of memory");
    return p;
}

/* ---- damage ------------------------------------------------------------------ */

/* Copy i of kind k: the damage, drawn from the seed alone. */
static void make_damage(int k, unsigned i, damage *d)
{
    uint64_t s = cfg.seed * 1000003u + (uint64_t)k * 7919u + i;
    uint64_t pages = cfg.size / cfg.psize;
    dc_mix(&s);
    memset(d, 0, sizeof(*d));
    d->kind = k;
    d->idx = i;
    switch (k) {
    case K_TRUNC:
        d->len = i % 2 ? dc_below(&s, pages) * cfg.psize : dc_below(&s, cfg.size);
        break;
    case K_FLIP1:
        d->off = dc_below(&s, cfg.size);
        d->len = 1;
        d->bytes[0] = (unsigned char)(1 + dc_below(&s, 255));
        break;
    case K_FLIPN:
        d->len = 2 + dc_below(&s, 63);
        d->off = dc_below(&s, cfg.size - d->len);
        for (uint64_t j = 0; j < d->len; j++)
            d->bytes[j] = (unsigned char)dc_mix(&s);
        break;
    case K_HEADER:
        d->off = (2 + dc_below(&s, pages - 2)) * cfg.psize + dc_below(&s, 16);
        d->len = 1;
        d->bytes[0] = (unsigned char)dc_mix(&s);
        break;
    case K_RANDPAGE:
    case K_ZEROPAGE:
        d->off = (2 + dc_below(&s, pages - 2)) * cfg.psize;
        d->len = cfg.psize;
        for (uint64_t j = 0; j < d->len; j++)
            d->bytes[j] = k == K_RANDPAGE ? (unsigned char)dc_mix(&s) : 0;
        break;
    default: /* K_META */
        d->len = 1 + (dc_below(&s, 4) == 0 ? dc_below(&s, 8) : 0);
        d->off = dc_below(&s, 2) * cfg.psize + dc_below(&s, 152 - d->len + 1);
        for (uint64_t j = 0; j < d->len; j++)
            d->bytes[j] = (unsigned char)(1 + dc_below(&s, 255));
        break;
    }
}

static void describe(const damage *d, char *out, size_t cap)
{
    switch (d->kind) {
    case K_TRUNC:
        snprintf(out, cap, "truncated to %llu bytes", (unsigned long long)d->len);
        break;
    case K_FLIP1:
    case K_META:
        if (d->len == 1) {
            snprintf(out, cap, "byte %llu (page %llu) XOR 0x%02x", (unsigned long long)d->off,
                     (unsigned long long)(d->off / cfg.psize), d->bytes[0]);
            break;
        }
        /* fall through */
    default:
        snprintf(out, cap, "%llu bytes at %llu (page %llu) %s", (unsigned long long)d->len,
                 (unsigned long long)d->off, (unsigned long long)(d->off / cfg.psize),
                 d->kind == K_ZEROPAGE ? "zeroed"
                 : d->kind == K_META   ? "XORed"
                                       : "overwritten");
        break;
    }
}

/* Write the damaged copy into dir (made empty first). */
static void write_copy(const char *dir, const damage *d)
{
    dc_rm_rf(dir);
    if (mkdir(dir, 0700) != 0)
        dc_die("%s: %s", dir, strerror(errno));
    char *data = dc_path2(dir, "data.mdb"), *lock = dc_path2(dir, "bindlog.lock");
    unsigned char *buf = malloc(cfg.size);
    size_t n = cfg.size;
    if (buf == NULL)
        dc_die("out of memory");
    memcpy(buf, cfg.data, cfg.size);
    if (d->kind == K_TRUNC) {
        n = d->len;
    } else {
        for (uint64_t j = 0; j < d->len && d->off + j < n; j++) {
            if (d->kind == K_FLIP1 || d->kind == K_META)
                buf[d->off + j] ^= d->bytes[j];
            else
                buf[d->off + j] = d->bytes[j];
        }
    }
    dc_write_file(data, buf, n);
    dc_write_file(lock, "", 0); /* a store's own file: damage, not a stranger's */
    free(buf);
    free(data);
    free(lock);
}

/* ---- running the CLI ----------------------------------------------------------- */

/* Wait for child pid under the timeout.  Returns R_EXIT (*code = exit
 * status), R_SIGNAL (*code = signal) or R_HANG (killed). */
static int wait_child(pid_t pid, int *code)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            if (WIFSIGNALED(st)) {
                *code = WTERMSIG(st);
                return R_SIGNAL;
            }
            *code = WEXITSTATUS(st);
            return R_EXIT;
        }
        if (r < 0 && errno != EINTR)
            dc_die("waitpid: %s", strerror(errno));
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec >= (time_t)dc_timeout) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            *code = 0;
            return R_HANG;
        }
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Run argv with stdout to out_path (NULL: /dev/null), stderr discarded. */
int dc_run(char *const argv[], const char *out_path, int *code)
{
    pid_t pid = fork();
    if (pid < 0)
        dc_die("fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int nul = open("/dev/null", O_RDWR);
        if (fd >= 0)
            dup2(fd, 1);
        if (nul >= 0) {
            dup2(nul, 2);
            dup2(nul, 0);
        }
        setenv("BINDLOG_CLOCK_MS", "1767276000000", 1);
        execv(argv[0], argv);
        _exit(127);
    }
    return wait_child(pid, code);
}

int dc_run_fn(int (*fn)(void *), void *arg, int *code)
{
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0)
        dc_die("fork: %s", strerror(errno));
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) {
            dup2(nul, 1);
            dup2(nul, 2);
            dup2(nul, 0);
        }
        int rc = fn(arg);
        fflush(NULL);
        _exit(rc);
    }
    return wait_child(pid, code);
}

#define ARGV(...) ((char *const[]){(char *)dc_cli, "-d", (char *)dir, __VA_ARGS__, NULL})

int dc_run_cmd(int c, const char *dir, const char *scratch, const char *key, const char *session,
               int *code)
{
    char *out = dc_path2(scratch, "out"), *bls = dc_path2(scratch, "x.bls");
    int r = R_EXIT;
    dc_rm_rf(out);
    unlink(bls);
    switch (c) {
    case C_STAT:
        r = dc_run(ARGV("stat"), NULL, code);
        break;
    case C_GET:
        r = dc_run(ARGV("get", (char *)key), NULL, code);
        break;
    case C_HISTORY:
        r = dc_run(ARGV("history", (char *)key), NULL, code);
        break;
    case C_LINEAGE:
        r = dc_run(ARGV("lineage", (char *)session), NULL, code);
        break;
    case C_DUMP:
        r = dc_run(ARGV("dump"), NULL, code);
        break;
    case C_CHECK:
        r = dc_run(ARGV("check"), NULL, code);
        break;
    case C_REPLAY:
        r = dc_run(ARGV("replay", "--out", out), NULL, code);
        break;
    case C_EXPORT:
        r = dc_run(ARGV("export", "-o", bls), NULL, code);
        break;
    case C_BIND:
        r = dc_run(ARGV("bind", (char *)key, "campaign-session"), NULL, code);
        break;
    default: /* C_COMPACT */
        r = dc_run(ARGV("compact", "--keep-last", "1000"), NULL, code);
        if (r == R_EXIT) {
            int code2;
            int r2 = dc_run(ARGV("compact", "--vacuum"), NULL, &code2);
            if (r2 != R_EXIT) {
                r = r2;
                *code = code2;
            }
        }
        break;
    }
    free(out);
    free(bls);
    return r;
}

/* The state as the dumps show it, appended to a buffer; 0, or -1 if a dump
 * failed. */
static int read_state(const char *dir, const char *scratch, char **buf, size_t *len)
{
    static const char *const what[3] = {"--log", "--bindings", "--sessions"};
    char *out = dc_path2(scratch, "state");
    int rc = 0;
    *buf = NULL;
    *len = 0;
    for (int i = 0; i < 3 && rc == 0; i++) {
        int code;
        if (dc_run(ARGV("dump", (char *)what[i], "--json"), out, &code) != R_EXIT || code != 0) {
            rc = -1;
            break;
        }
        size_t n;
        unsigned char *b = dc_read_file(out, &n);
        if (b == NULL) {
            rc = -1;
            break;
        }
        char *nb = realloc(*buf, *len + n + 1);
        if (nb == NULL)
            dc_die("out of memory");
        memcpy(nb + *len, b, n);
        *buf = nb;
        *len += n;
        free(b);
    }
    unlink(out);
    free(out);
    return rc;
}

/* ---- one copy ------------------------------------------------------------------ */

/* Results of one copy: one line per command, "kind idx cmd outcome code",
 * and "kind idx wrong" when check passed a changed state. */
static void do_copy(const damage *d, FILE *res, const char *wdir)
{
    char *dir = dc_path2(wdir, "copy"), *wcopy = dc_path2(wdir, "wcopy"),
         *scratch = dc_path2(wdir, "s");
    char what[200];
    int outcome[NCMDS], code[NCMDS];
    char *rec = dc_path2(wdir, "recovered");

    mkdir(scratch, 0700);
    describe(d, what, sizeof what);
    write_copy(dir, d);
    for (int c = 0; c < NCMDS; c++) {
        const char *target = dir;
        if (c == C_BIND || c == C_COMPACT) {
            write_copy(wcopy, d);
            target = wcopy;
        }
        outcome[c] = dc_run_cmd(c, target, scratch, cfg.key, cfg.session, &code[c]);
        fprintf(res, "%d %u %d %d %d %s\n", d->kind, d->idx, c, outcome[c], code[c], what);
    }
    if (outcome[C_CHECK] != R_EXIT || code[C_CHECK] != 0) {
        /* flagged (or unopenable): recover it, and check what recover built */
        int rcode, ccode = -1, ro;
        dc_rm_rf(rec);
        ro = dc_run((char *const[]){(char *)dc_cli, "recover", dir, "--out", rec, NULL}, NULL,
                    &rcode);
        if (ro == R_EXIT && rcode <= 1)
            ro = dc_run((char *const[]){(char *)dc_cli, "-d", rec, "check", NULL}, NULL, &ccode);
        /* a file cut before its second page holds nothing to recover:
         * recover's refusal (exit 3) is then the right answer */
        int nothing = d->kind == K_TRUNC && d->len < 2 * (uint64_t)cfg.psize;
        if (ro == R_EXIT && rcode == 3 && nothing)
            ccode = 0, rcode = 0;
        if (ro != R_EXIT || rcode > 1 || ccode != 0)
            fprintf(res, "%d %u -2 %d %d %s\n", d->kind, d->idx, ro,
                    ro != R_EXIT ? rcode
                    : rcode > 1  ? rcode
                                 : 100 + ccode,
                    what);
    }
    if (outcome[C_CHECK] == R_EXIT && code[C_CHECK] == 0) {
        char *st;
        size_t n;
        int bad = read_state(dir, scratch, &st, &n) != 0 || n != cfg.ref_len ||
                  memcmp(st, cfg.ref, n) != 0;
        free(st);
        if (bad)
            fprintf(res, "%d %u -1 0 0 %s\n", d->kind, d->idx, what);
    }
    fflush(res);
    free(dir);
    free(wcopy);
    free(scratch);
    free(rec);
}

/* ---- main --------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: damage_campaign (--store DIR | --gateway-sim PATH) --cli PATH [--work DIR]\n"
            "                       [--per-kind N | --full] [--seed S] [--timeout SEC]\n"
            "                       [--jobs J] [--key KEY] [--kinds k1,k2,...] [--strict]\n"
            "                       [--allow-loss | --allow-recover-loss] [--show-refusals]\n"
            "       damage_campaign --cli PATH --write-copy LOGKIND:INDEX DIR [--seed S]\n"
            "kinds: data (all of:) trunc flip1 flipN header randpage zeropage meta;\n"
            "       log (all of:) wtrunc wtorn whdr wbody wzero wswap wdup wfframe wflog\n"
            "       wring wfhdr sflip szero strunc sdel sforeign\n");
    exit(2);
}

/* Is name one of the comma-separated items of list? */
static int in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p++)
        if ((p == list || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
            return 1;
    return 0;
}

static unsigned copies_of(int k)
{
    if (!(cfg.kinds_mask & (1 << k)))
        return 0;
    return cfg.full ? full_counts[k] : cfg.per_kind;
}

/* The data.mdb half: returns crashes + hangs + wrong answers + failed
 * recoveries. */
static unsigned data_campaign(void)
{
    if (cfg.sim != NULL) {
        char *store = dc_path2(cfg.work, "pristine");
        int code;
        dc_rm_rf(store);
        if (dc_run((char *const[]){(char *)cfg.sim, store, "--durability", "none", NULL}, NULL,
                   &code) != R_EXIT ||
            code != 0)
            dc_die("%s failed", cfg.sim);
        cfg.store = store;
    }

    char *data = dc_path2(cfg.store, "data.mdb");
    if ((cfg.data = dc_read_file(data, &cfg.size)) == NULL || cfg.size < 3 * 4096)
        dc_die("%s: cannot read a store there", data);
    cfg.psize = (unsigned)(cfg.data[16 + 24] | cfg.data[16 + 25] << 8 | cfg.data[16 + 26] << 16);
    if (cfg.psize < 512 || cfg.psize > 65536)
        dc_die("%s: page size %u?", data, cfg.psize);
    free(data);

    /* the pristine state, and the session the key routes to */
    {
        char *scratch = dc_path2(cfg.work, "ref");
        const char *dir = cfg.store;
        int code;
        mkdir(scratch, 0700);
        if (read_state(cfg.store, scratch, &cfg.ref, &cfg.ref_len) != 0)
            dc_die("%s: the pristine store does not dump", cfg.store);
        char *out = dc_path2(scratch, "get");
        if (dc_run(ARGV("get", (char *)cfg.key, "--json"), out, &code) != R_EXIT || code != 0)
            dc_die("%s: key %s is not bound in the pristine store", cfg.store, cfg.key);
        size_t n;
        char *g = (char *)dc_read_file(out, &n), *p;
        if (g == NULL || (p = strstr(g, "\"session_id\":\"")) == NULL)
            dc_die("cannot read the key's session");
        p += strlen("\"session_id\":\"");
        size_t m = strcspn(p, "\"");
        if (m >= sizeof cfg.session)
            dc_die("session id too long");
        memcpy(cfg.session, p, m);
        cfg.session[m] = '\0';
        free(g);
        free(out);
        dc_rm_rf(scratch);
        free(scratch);
    }

    /* the copies, split over jobs */
    unsigned total = 0;
    for (int k = 0; k < NKINDS; k++)
        total += copies_of(k);
    fprintf(stderr, "damage_campaign: %u copies x %d commands, %u job(s), store %s (%zu bytes)\n",
            total, NCMDS, cfg.jobs, cfg.store, cfg.size);
    pid_t *pids = calloc(cfg.jobs, sizeof(pid_t));
    for (unsigned j = 0; j < cfg.jobs; j++) {
        char name[32];
        snprintf(name, sizeof name, "job%u", j);
        char *wdir = dc_path2(cfg.work, name), *resp;
        if (asprintf(&resp, "%s/results.%u", cfg.work, j) < 0)
            dc_die("out of memory");
        mkdir(wdir, 0700);
        pids[j] = fork();
        if (pids[j] == 0) {
            FILE *res = fopen(resp, "w");
            unsigned n = 0;
            if (res == NULL)
                _exit(2);
            for (int k = 0; k < NKINDS; k++)
                for (unsigned i = 0; i < copies_of(k); i++, n++) {
                    damage d;
                    if (n % cfg.jobs != j)
                        continue;
                    make_damage(k, i, &d);
                    do_copy(&d, res, wdir);
                }
            fclose(res);
            _exit(0);
        }
        free(wdir);
        free(resp);
    }
    for (unsigned j = 0; j < cfg.jobs; j++) {
        int st;
        waitpid(pids[j], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            dc_die("job %u failed", j);
    }
    free(pids);

    /* the tables */
    static unsigned crash[NKINDS][NCMDS], hang[NKINDS][NCMDS], wrong[NKINDS], recfail[NKINDS];
    unsigned tot_crash = 0, tot_hang = 0, tot_wrong = 0, tot_recfail = 0;
    char line[600];
    for (unsigned j = 0; j < cfg.jobs; j++) {
        char *resp;
        if (asprintf(&resp, "%s/results.%u", cfg.work, j) < 0)
            dc_die("out of memory");
        FILE *res = fopen(resp, "r");
        if (res == NULL)
            dc_die("%s: %s", resp, strerror(errno));
        while (fgets(line, sizeof line, res) != NULL) {
            int k, c, o, code, at = 0;
            unsigned idx;
            if (sscanf(line, "%d %u %d %d %d %n", &k, &idx, &c, &o, &code, &at) < 5 || k < 0 ||
                k >= NKINDS || c >= NCMDS)
                continue;
            line[strcspn(line, "\n")] = '\0';
            if (c == -2) {
                recfail[k]++;
                tot_recfail++;
                printf("RECOVER %-8s #%-4u %s (%d): %s\n", kind_names[k], idx,
                       o == R_SIGNAL ? "crashed"
                       : o == R_HANG ? "hung"
                       : code >= 100 ? "built a store check does not pass"
                                     : "failed",
                       code, line + at);
            } else if (c < 0) {
                wrong[k]++;
                tot_wrong++;
                printf("WRONG  %-8s #%-4u check passed a changed state: %s\n", kind_names[k], idx,
                       line + at);
            } else if (o == R_SIGNAL) {
                crash[k][c]++;
                tot_crash++;
                printf("CRASH  %-8s #%-4u %-8s signal %d (%s): %s\n", kind_names[k], idx,
                       cmd_names[c], code, strsignal(code), line + at);
            } else if (o == R_HANG) {
                hang[k][c]++;
                tot_hang++;
                printf("HANG   %-8s #%-4u %-8s: %s\n", kind_names[k], idx, cmd_names[c], line + at);
            }
        }
        fclose(res);
        free(resp);
    }
    printf("\ncrashes (hangs) per damage kind and command, %u copies, seed %llu:\n", total,
           (unsigned long long)cfg.seed);
    printf("%-9s %6s", "kind", "copies");
    for (int c = 0; c < NCMDS; c++)
        printf(" %8s", cmd_names[c]);
    printf(" %8s %8s\n", "wrong", "recover");
    for (int k = 0; k < NKINDS; k++) {
        if (!copies_of(k))
            continue;
        printf("%-9s %6u", kind_names[k], copies_of(k));
        for (int c = 0; c < NCMDS; c++) {
            char cell[32];
            if (hang[k][c])
                snprintf(cell, sizeof cell, "%u(%u)", crash[k][c], hang[k][c]);
            else
                snprintf(cell, sizeof cell, "%u", crash[k][c]);
            printf(" %8s", cell);
        }
        printf(" %8u %8u\n", wrong[k], recfail[k]);
    }
    printf("total: %u crashes, %u hangs, %u wrong answers, %u failed recoveries\n", tot_crash,
           tot_hang, tot_wrong, tot_recfail);
    return tot_crash + tot_hang + tot_wrong + tot_recfail;
}

int main(int argc, char **argv)
{
    char tmpl[] = "/tmp/damage-campaign-XXXXXX";

    cfg.per_kind = 3;
    cfg.jobs = 1;
    dc_timeout = 20;
    cfg.seed = 16;
    cfg.key = "agent:main:telegram:dm:100000000";
    cfg.kinds_mask = (1 << NKINDS) - 1;
    unsigned log_mask = (1u << DC_LOG_NKINDS) - 1;
    int allow_loss = 0, show_refusals = 0;
    const char *write_copy_of = NULL, *write_copy_to = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--full") == 0) {
            cfg.full = 1;
        } else if (strcmp(a, "--strict") == 0) {
            cfg.strict = 1;
        } else if (strcmp(a, "--allow-loss") == 0) {
            allow_loss = DC_ALLOW_OPEN_LOSS | DC_ALLOW_RECOVER_LOSS;
        } else if (strcmp(a, "--allow-recover-loss") == 0) {
            allow_loss |= DC_ALLOW_RECOVER_LOSS;
        } else if (strcmp(a, "--show-refusals") == 0) {
            show_refusals = 1;
        } else if (strcmp(a, "--write-copy") == 0 && i + 2 < argc) {
            write_copy_of = argv[++i];
            write_copy_to = argv[++i];
        } else if (v == NULL) {
            usage();
        } else if (strcmp(a, "--store") == 0) {
            cfg.store = v, i++;
        } else if (strcmp(a, "--gateway-sim") == 0) {
            cfg.sim = v, i++;
        } else if (strcmp(a, "--cli") == 0) {
            dc_cli = v, i++;
        } else if (strcmp(a, "--work") == 0) {
            cfg.work = v, i++;
        } else if (strcmp(a, "--key") == 0) {
            cfg.key = v, i++;
        } else if (strcmp(a, "--per-kind") == 0) {
            cfg.per_kind = (unsigned)strtoul(v, NULL, 10), i++;
            cfg.full = 0; /* the later of --full and --per-kind wins */
        } else if (strcmp(a, "--seed") == 0) {
            cfg.seed = strtoull(v, NULL, 10), i++;
        } else if (strcmp(a, "--timeout") == 0) {
            dc_timeout = (unsigned)strtoul(v, NULL, 10), i++;
        } else if (strcmp(a, "--jobs") == 0) {
            cfg.jobs = (unsigned)strtoul(v, NULL, 10), i++;
        } else if (strcmp(a, "--kinds") == 0) {
            cfg.kinds_mask = 0;
            log_mask = 0;
            for (int k = 0; k < NKINDS; k++)
                if (in_list(v, kind_names[k]))
                    cfg.kinds_mask |= 1 << k;
            for (int k = 0; k < DC_LOG_NKINDS; k++)
                if (in_list(v, dc_log_kind_names[k]) || in_list(v, "log"))
                    log_mask |= 1u << k;
            if (in_list(v, "data"))
                cfg.kinds_mask = (1 << NKINDS) - 1;
            i++;
        } else {
            usage();
        }
    }
    if (dc_cli == NULL || cfg.jobs == 0 || dc_timeout == 0)
        usage();
    /* a sanitizer's report in a command or probe counts as a crash, not as
     * an exit status that could pass for an answer */
    setenv("ASAN_OPTIONS", "abort_on_error=1", 0);
    if (cfg.work == NULL && (cfg.work = mkdtemp(tmpl)) == NULL)
        dc_die("mkdtemp: %s", strerror(errno));
    mkdir(cfg.work, 0700);
    if (write_copy_of != NULL) {
        const char *colon = strchr(write_copy_of, ':');
        char kind[32];
        char *lwork = dc_path2(cfg.work, "log");
        if (colon == NULL || (size_t)(colon - write_copy_of) >= sizeof kind)
            usage();
        memcpy(kind, write_copy_of, (size_t)(colon - write_copy_of));
        kind[colon - write_copy_of] = '\0';
        if (dc_log_write_copy(lwork, cfg.seed, kind, (unsigned)strtoul(colon + 1, NULL, 10),
                              write_copy_to) != 0)
            usage();
        free(lwork);
        if (strcmp(cfg.work, tmpl) == 0)
            dc_rm_rf(cfg.work);
        return 0;
    }
    unsigned failures = 0;
    if (cfg.kinds_mask) {
        if ((cfg.store == NULL) == (cfg.sim == NULL))
            usage();
        failures += data_campaign();
    }
    if (log_mask) {
        char *lwork = dc_path2(cfg.work, "log");
        failures += dc_log_campaign(lwork, cfg.seed, cfg.per_kind, cfg.full, cfg.jobs, log_mask,
                                    allow_loss, show_refusals);
        free(lwork);
    }
    if (cfg.work == tmpl || strcmp(cfg.work, tmpl) == 0)
        dc_rm_rf(cfg.work);
    return cfg.strict && failures ? 1 : 0;
}
