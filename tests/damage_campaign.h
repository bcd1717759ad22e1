/*
 * damage_campaign.h -- what the two halves of the damage campaign share:
 * damage_campaign.c (data.mdb, and the driver's main) and
 * damage_campaign_log.c (bindlog.wal and bindlog.shm of stores whose
 * writer died with acknowledged events only in the log).
 */
#ifndef DAMAGE_CAMPAIGN_H
#define DAMAGE_CAMPAIGN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* How a run ended. */
enum { R_EXIT, R_SIGNAL, R_HANG };

/* The CLI commands every damaged copy goes through (dc_cmd_names). */
enum {
    C_STAT,
    C_GET,
    C_HISTORY,
    C_LINEAGE,
    C_DUMP,
    C_CHECK,
    C_REPLAY,
    C_EXPORT,
    C_BIND,
    C_COMPACT,
    NCMDS
};
extern const char *const dc_cmd_names[NCMDS];

extern const char *dc_cli;  /* the bindlog CLI under test */
extern unsigned dc_timeout; /* seconds before a run counts as hung */

_Noreturn void dc_die(const char *fmt, ...);
/* splitmix64: the copies depend on the seed alone */
uint64_t dc_mix(uint64_t *s);
uint64_t dc_below(uint64_t *s, uint64_t n); /* [0, n); 0 for n = 0 */
/* A whole file in memory the caller frees (NULL if it cannot be read). */
unsigned char *dc_read_file(const char *path, size_t *len);
void dc_write_file(const char *path, const void *p, size_t n);
void dc_rm_rf(const char *path);
char *dc_path2(const char *a, const char *b); /* "a/b", caller frees */

/* Run argv (stdout to out_path, NULL: /dev/null; stderr discarded), or
 * fn(arg) in a forked child whose exit status is fn's return, under the
 * timeout.  R_EXIT (*code = exit status), R_SIGNAL (*code = the signal) or
 * R_HANG. */
int dc_run(char *const argv[], const char *out_path, int *code);
int dc_run_fn(int (*fn)(void *), void *arg, int *code);
/* Run CLI command c on the store in dir (scratch: a directory for its
 * outputs); key and session name what get, history, lineage, bind use. */
int dc_run_cmd(int c, const char *dir, const char *scratch, const char *key, const char *session,
               int *code);

/* The log half: damage bindlog.wal and bindlog.shm copies of stores it
 * makes itself under `work`, with `jobs` processes; prints its tables to
 * stdout.  kinds_mask selects dc_log_kind_names; `full` the full counts,
 * else per_kind copies of each.  Returns the number of failures under the
 * oracle: crashes, hangs, failed probes, and the silent losses allow_loss
 * (DC_ALLOW_*) does not let pass.  show_refusals: a line per refusal, with
 * its message. */
#define DC_LOG_NKINDS         16
#define DC_ALLOW_OPEN_LOSS    1 /* losses by an open, get or check */
#define DC_ALLOW_RECOVER_LOSS 2 /* losses by recover */
extern const char *const dc_log_kind_names[DC_LOG_NKINDS];
unsigned dc_log_campaign(const char *work, uint64_t seed, unsigned per_kind, int full,
                         unsigned jobs, unsigned kinds_mask, int allow_loss, int show_refusals);
/* Write copy idx of log/shm kind `kind` (as the campaign makes it from
 * stores made anew under `work`: their salts and times differ from run to
 * run, the damage does not) into dir, and print which frames it damaged.
 * 0, or -1 for an unknown kind. */
int dc_log_write_copy(const char *work, uint64_t seed, const char *kind, unsigned idx,
                      const char *dir);

#endif
