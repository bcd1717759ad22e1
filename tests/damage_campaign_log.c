/*
 * damage_campaign_log.c -- the damage campaign on bindlog.wal and bindlog.shm.
 *
 * The stores: a writer process opens a new store (FULL durability, a
 * 256 KiB ring, BINDLOG_CHECKPOINT=manual), binds one key per event, is
 * told APPLIED for each, and dies (_exit) without closing, so its log
 * holds acknowledged events data.mdb does not.  Four such stores are made
 * in the work directory:
 *   A  110 events, never checkpointed;
 *   B  120 events, checkpointed after the 40th (its first 40 frames are in
 *      data.mdb too: damage there needs nothing back);
 *   C, D  the same two shapes with other session ids and another salt,
 *      only as the source of foreign frames, logs and shms.
 * Event i binds key k<(7 i) mod 37> to session <tag>s<i>, so every key is
 * bound several times and losing an event changes what `get` answers.
 * One event is one group commit is one frame; the driver finds each frame
 * by walking the ring as docs/format.md lays it out (64-byte header,
 * `BLWF`, its own position, body_len, 8-byte aligned), independently of
 * the library.
 *
 * Each copy damages A's or B's log or shm in one way drawn from the seed,
 * and is then put through, each under the timeout:
 *   openrw   a read-write open (on a fresh copy): the head LSN and the
 *            binding of every key, then close;
 *   openro   a read-only open: its head LSN;
 *   get      through that read-only handle, bindlog_get of every key;
 *   check    `bindlog check`;
 *   recover  bindlog_recover into a new store: the LSNs it reports lost,
 *            and the binding of every key in the store it built;
 * and the ten CLI commands of the data.mdb campaign (crashes and hangs).
 *
 * The oracle.  For openrw, openro, get and check an answer is one of
 *   ok       every acknowledged event is there: head = the last LSN the
 *            writer was told, every key bound as the writer was told;
 *   refused  the open (or get) failed, or check exited non-zero;
 *   tail     the head is short, but every frame after it is damaged: the
 *            damage took the log's last frame(s), where a torn write and
 *            damage look alike (not for a replaced log, which is damage);
 *   LOSS     a silent loss: the command succeeded and an acknowledged
 *            event held in an intact frame is missing (check passing on
 *            a store whose read-only open shows one).
 * For recover: ok (nothing lost, every key as acknowledged), lost-damaged
 * (the LSNs it names lost are all in damaged, not yet checkpointed frames,
 * and every key whose last event it kept is bound as acknowledged), LOSS
 * (it names an intact frame's LSN lost, or its store misses an event it
 * does not name, or its head falls short of an intact last frame), or
 * failed (an error).  Copies whose damage touched only frames already
 * checkpointed are counted apart: nothing of theirs is needed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindlog.h"
#include "damage_campaign.h"

#define LOG_RING   ((uint64_t)256 << 10)
#define WAL_HDR    4096u
#define FRAME_HDR  64u
#define NKEYS      37u
#define MAX_EVENTS 120u

enum {
    L_WTRUNC,
    L_WTORN,
    L_WHDR,
    L_WBODY,
    L_WZERO,
    L_WSWAP,
    L_WDUP,
    L_WFFRAME,
    L_WFLOG,
    L_WRING,
    L_WFHDR,
    L_SFLIP,
    L_SZERO,
    L_STRUNC,
    L_SDEL,
    L_SFOREIGN,
    NLKINDS
};
_Static_assert(NLKINDS == DC_LOG_NKINDS, "kind table");
const char *const dc_log_kind_names[DC_LOG_NKINDS] = {
    "wtrunc", "wtorn", "whdr",  "wbody", "wzero", "wswap",  "wdup", "wfframe",
    "wflog",  "wring", "wfhdr", "sflip", "szero", "strunc", "sdel", "sforeign"};
static const char *const kind_what[NLKINDS] = {
    "bindlog.wal cut at a random length",
    "the last frame(s) zeroed from a random byte on (a torn tail)",
    "one byte of a frame header XORed",
    "one byte of a frame body XORed",
    "8..1024 bytes from inside a frame zeroed",
    "two adjacent frames swapped",
    "a frame copied over the next one",
    "another store's frame (same LSN and position) over a frame",
    "another store's whole bindlog.wal over this one",
    "the ring shortened or grown",
    "the 4 KiB file header damaged",
    "one byte of bindlog.shm XORed",
    "bindlog.shm zeroed",
    "bindlog.shm cut short",
    "bindlog.shm deleted",
    "another store's bindlog.shm"};
static const unsigned full_counts[NLKINDS] = {40, 20, 60, 60, 40, 30, 30, 30,
                                              4,  20, 20, 20, 4,  10, 2,  2};

/* Commands with an oracle, then the CLI's ten. */
enum { O_OPENRW, O_OPENRO, O_GET, O_CHECK, O_RECOVER, NORACLE };
static const char *const oracle_names[NORACLE] = {"openrw", "openro", "get", "check", "recover"};
#define NALL (NORACLE + NCMDS)

/* Answers.  A probe exits with PROBE_BASE + its answer(s), so that a
 * child that died another way (a sanitizer's exit 1 or 66, exec's 127) is never
 * taken for one. */
enum { A_OK, A_REFUSED, A_TAIL, A_LOSS, A_FAILED, NANSWERS };
#define PROBE_BASE 100

enum { FL_DATA, FL_LOCKMDB, FL_LOCK, FL_WAL, FL_SHM, NFILES };
static const char *const file_names[NFILES] = {"data.mdb", "lock.mdb", "bindlog.lock",
                                               "bindlog.wal", "bindlog.shm"};

/* A store the writer left, in memory. */
typedef struct lstore {
    char *dir;
    const char *tag;
    unsigned nev;                /* events 1..nev, LSN i */
    uint64_t ckpt;               /* LSNs up to here are in data.mdb */
    unsigned char *file[NFILES]; /* the store's files, by file_names */
    size_t len[NFILES];
    int present[NFILES];
    uint64_t foff[MAX_EVENTS + 1], fsize[MAX_EVENTS + 1]; /* frame of LSN i: file offset, bytes */
    uint64_t frames_end;                                  /* file offset after the last frame */
} lstore;

static lstore st_a, st_b, st_c, st_d;

/* One damaged copy. */
typedef struct lcopy {
    int kind;
    unsigned idx;
    const lstore *base;
    unsigned char *wal, *shm; /* the damaged files (shm NULL: deleted) */
    size_t wal_len, shm_len;
    char what[200];
    int damaged[MAX_EVENTS + 1];      /* frame of LSN i changed */
    int replaced;                     /* the whole log replaced: no tail is allowed */
    unsigned ndamaged, ndamaged_live; /* ... of them after the checkpoint */
} lcopy;

static void key_of(unsigned i, char *out, size_t cap)
{
    snprintf(out, cap, "k%02u", (7 * i) % NKEYS);
}
static void sid_of(const lstore *s, unsigned i, char *out, size_t cap)
{
    snprintf(out, cap, "%ss%03u", s->tag, i);
}

/* The last event of key number k (0: none). */
static unsigned last_event(const lstore *s, unsigned k)
{
    for (unsigned i = s->nev; i >= 1; i--)
        if ((7 * i) % NKEYS == k)
            return i;
    return 0;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- the stores -------------------------------------------------------------- */

typedef struct writer_args {
    const lstore *s;
    unsigned ckpt_after;
} writer_args;

/* In the child: write s->nev acknowledged events and die without closing. */
static int writer(void *arg)
{
    const writer_args *w = arg;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *h = NULL;
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    o.log_size = LOG_RING;
    if (bindlog_open(&h, w->s->dir, &o) != 0)
        return 10;
    for (unsigned i = 1; i <= w->s->nev; i++) {
        char key[16], sid[32];
        bindlog_result r;
        key_of(i, key, sizeof key);
        sid_of(w->s, i, sid, sizeof sid);
        if (bindlog_bind(h, key, sid, NULL, NULL, NULL, 0, &r) != BINDLOG_APPLIED || r.lsn != i)
            return 11;
        if (i == w->ckpt_after) {
            uint64_t at = 0;
            if (bindlog_checkpoint(h, &at) != 0 || at != i)
                return 12;
        }
    }
    _exit(0); /* no close: nothing more is checkpointed */
}

static void make_store(lstore *s, const char *work, const char *name, const char *tag, unsigned nev,
                       unsigned ckpt_after)
{
    writer_args w = {s, ckpt_after};
    int code;
    s->dir = dc_path2(work, name);
    s->tag = tag;
    s->nev = nev;
    s->ckpt = ckpt_after;
    dc_rm_rf(s->dir);
    if (dc_run_fn(writer, &w, &code) != R_EXIT || code != 0)
        dc_die("%s: the writer failed (%d)", s->dir, code);
    for (int f = 0; f < NFILES; f++) {
        char *p = dc_path2(s->dir, file_names[f]);
        s->file[f] = dc_read_file(p, &s->len[f]);
        s->present[f] = s->file[f] != NULL;
        free(p);
    }
    if (!s->present[FL_DATA] || !s->present[FL_WAL] || s->len[FL_WAL] != WAL_HDR + LOG_RING)
        dc_die("%s: no data.mdb, or no bindlog.wal of %llu bytes", s->dir,
               (unsigned long long)(WAL_HDR + LOG_RING));
    /* the frames, one per event, from the ring's start */
    const unsigned char *wal = s->file[FL_WAL];
    uint64_t off = WAL_HDR;
    for (unsigned i = 1; i <= nev; i++) {
        const unsigned char *h = wal + off;
        if (off + FRAME_HDR > s->len[FL_WAL] || memcmp(h, "BLWF", 4) != 0 ||
            get_u64(h + 16) != off - WAL_HDR || get_u64(h + 24) != i || get_u32(h + 32) != 1)
            dc_die("%s: frame %u is not where the log's layout puts it", s->dir, i);
        s->foff[i] = off;
        s->fsize[i] = (FRAME_HDR + get_u32(h + 36) + 7) & ~(uint64_t)7;
        off += s->fsize[i];
    }
    s->frames_end = off;
}

/* ---- damage -------------------------------------------------------------------- */

static void dup_file(const lstore *s, int f, unsigned char **p, size_t *n)
{
    *n = s->len[f];
    *p = malloc(*n ? *n : 1);
    if (*p == NULL)
        dc_die("out of memory");
    if (*n)
        memcpy(*p, s->file[f], *n);
}

/* Copy i of kind k, drawn from the seed alone. */
static void make_lcopy(int k, unsigned i, uint64_t seed, lcopy *c)
{
    uint64_t s = seed * 1000003u + 0x10000u + (uint64_t)k * 7919u + i;
    dc_mix(&s);
    memset(c, 0, sizeof(*c));
    c->kind = k;
    c->idx = i;
    c->base = i % 2 ? &st_b : &st_a;
    const lstore *b = c->base, *foreign = b == &st_a ? &st_c : &st_d;
    dup_file(b, FL_WAL, &c->wal, &c->wal_len);
    if (b->present[FL_SHM])
        dup_file(b, FL_SHM, &c->shm, &c->shm_len);
    unsigned n = b->nev, f = 1 + (unsigned)dc_below(&s, n), f2 = f < n ? f + 1 : f - 1;
    unsigned char *w = c->wal;
    const char *bn = b == &st_a ? "A (never checkpointed)" : "B (checkpointed at 40)";
    char d[160] = "";
    switch (k) {
    case L_WTRUNC:
        c->wal_len = (size_t)dc_below(&s, b->frames_end + 512);
        snprintf(d, sizeof d, "bindlog.wal cut to %zu bytes", c->wal_len);
        break;
    case L_WTORN: {
        unsigned first = i % 4 < 2 ? n : n - 1;
        uint64_t from = b->foff[first] + dc_below(&s, b->fsize[first]);
        memset(w + from, 0, (size_t)(b->frames_end - from));
        snprintf(d, sizeof d, "zeroed from byte %llu to the last frame's end",
                 (unsigned long long)from);
        break;
    }
    case L_WHDR:
    case L_WBODY: {
        uint64_t at = k == L_WHDR
                          ? b->foff[f] + dc_below(&s, FRAME_HDR)
                          : b->foff[f] + FRAME_HDR + dc_below(&s, get_u32(w + b->foff[f] + 36));
        unsigned char x = (unsigned char)(1 + dc_below(&s, 255));
        w[at] ^= x;
        snprintf(d, sizeof d, "byte %llu (frame of LSN %u) XOR 0x%02x", (unsigned long long)at, f,
                 x);
        break;
    }
    case L_WZERO: {
        uint64_t at = b->foff[f] + dc_below(&s, b->fsize[f]), len = 8 + dc_below(&s, 1017);
        if (at + len > c->wal_len)
            len = c->wal_len - at;
        memset(w + at, 0, (size_t)len);
        snprintf(d, sizeof d, "%llu bytes at %llu (frame of LSN %u) zeroed",
                 (unsigned long long)len, (unsigned long long)at, f);
        break;
    }
    case L_WSWAP: {
        unsigned a = f < f2 ? f : f2, z = a + 1;
        memcpy(w + b->foff[a], b->file[FL_WAL] + b->foff[z], (size_t)b->fsize[z]);
        memcpy(w + b->foff[a] + b->fsize[z], b->file[FL_WAL] + b->foff[a], (size_t)b->fsize[a]);
        snprintf(d, sizeof d, "frames of LSNs %u and %u swapped", a, z);
        break;
    }
    case L_WDUP: {
        unsigned a = f < f2 ? f : f2;
        memcpy(w + b->foff[a + 1], b->file[FL_WAL] + b->foff[a], (size_t)b->fsize[a]);
        snprintf(d, sizeof d, "the frame of LSN %u copied over the next", a);
        break;
    }
    case L_WFFRAME:
        memcpy(w + b->foff[f], foreign->file[FL_WAL] + foreign->foff[f], (size_t)foreign->fsize[f]);
        snprintf(d, sizeof d, "store %s's frame of LSN %u over this one's", foreign->tag, f);
        break;
    case L_WFLOG: {
        const lstore *src = (i / 2) % 2 ? &st_d : &st_c;
        free(c->wal);
        dup_file(src, FL_WAL, &c->wal, &c->wal_len);
        c->replaced = 1;
        snprintf(d, sizeof d, "store %s's bindlog.wal (%s) over this one", src->tag,
                 src->ckpt ? "checkpointed" : "never checkpointed");
        break;
    }
    case L_WRING: {
        static const char *const how[4] = {"cut to half its ring", "cut by 4 KiB", "grown by 4 KiB",
                                           "grown by a whole ring"};
        size_t len = i / 2 % 4 == 0   ? WAL_HDR + LOG_RING / 2
                     : i / 2 % 4 == 1 ? c->wal_len - 4096
                     : i / 2 % 4 == 2 ? c->wal_len + 4096
                                      : c->wal_len + LOG_RING;
        unsigned char *nw = realloc(c->wal, len);
        if (nw == NULL)
            dc_die("out of memory");
        if (len > c->wal_len)
            memset(nw + c->wal_len, 0, len - c->wal_len);
        c->wal = nw;
        c->wal_len = len;
        snprintf(d, sizeof d, "bindlog.wal %s (%zu bytes)", how[i / 2 % 4], len);
        break;
    }
    case L_WFHDR:
        if (i / 2 % 3 == 1) {
            memset(w, 0, WAL_HDR);
            snprintf(d, sizeof d, "the 4 KiB header zeroed");
        } else {
            uint64_t at = i / 2 % 3 == 0 ? dc_below(&s, 64) : 64 + dc_below(&s, WAL_HDR - 64);
            unsigned char x = (unsigned char)(1 + dc_below(&s, 255));
            w[at] ^= x;
            snprintf(d, sizeof d, "header byte %llu XOR 0x%02x", (unsigned long long)at, x);
        }
        break;
    case L_SFLIP:
        if (c->shm_len) {
            uint64_t at = dc_below(&s, c->shm_len);
            unsigned char x = (unsigned char)(1 + dc_below(&s, 255));
            c->shm[at] ^= x;
            snprintf(d, sizeof d, "bindlog.shm byte %llu XOR 0x%02x", (unsigned long long)at, x);
        }
        break;
    case L_SZERO:
        memset(c->shm, 0, i / 2 % 2 ? c->shm_len : c->shm_len < 512 ? c->shm_len : 512);
        snprintf(d, sizeof d, "bindlog.shm zeroed (%s)", i / 2 % 2 ? "whole" : "first 512 bytes");
        break;
    case L_STRUNC:
        c->shm_len = (size_t)dc_below(&s, c->shm_len);
        snprintf(d, sizeof d, "bindlog.shm cut to %zu bytes", c->shm_len);
        break;
    case L_SDEL:
        free(c->shm);
        c->shm = NULL;
        snprintf(d, sizeof d, "bindlog.shm deleted");
        break;
    default: /* L_SFOREIGN */
        free(c->shm);
        dup_file(foreign, FL_SHM, &c->shm, &c->shm_len);
        snprintf(d, sizeof d, "store %s's bindlog.shm", foreign->tag);
        break;
    }
    snprintf(c->what, sizeof c->what, "store %s: %s", bn, d);
    /* which frames now differ (or are gone) */
    for (unsigned j = 1; j <= n; j++) {
        uint64_t o = b->foff[j], z = b->fsize[j];
        c->damaged[j] =
            o + z > c->wal_len || memcmp(c->wal + o, b->file[FL_WAL] + o, (size_t)z) != 0;
        if (c->damaged[j]) {
            c->ndamaged++;
            c->ndamaged_live += j > b->ckpt;
        }
    }
}

static void free_lcopy(lcopy *c)
{
    free(c->wal);
    free(c->shm);
}

/* Write the copy into dir (made empty first). */
static void write_lcopy(const char *dir, const lcopy *c)
{
    dc_rm_rf(dir);
    if (mkdir(dir, 0700) != 0)
        dc_die("%s: %s", dir, strerror(errno));
    for (int f = 0; f < NFILES; f++) {
        char *p = dc_path2(dir, file_names[f]);
        if (f == FL_WAL)
            dc_write_file(p, c->wal, c->wal_len);
        else if (f == FL_SHM) {
            if (c->shm != NULL)
                dc_write_file(p, c->shm, c->shm_len);
        } else if (c->base->present[f])
            dc_write_file(p, c->base->file[f], c->base->len[f]);
        free(p);
    }
}

/* ---- the probes (each in a forked child; the answer is its exit status) ---- */

typedef struct probe {
    const lcopy *c;
    const char *dir, *out;
    int read_only;
    FILE *note; /* one line on a loss or a refusal: what was seen */
} probe;

/* Is a head of h allowed: every frame after it damaged (a dropped tail)? */
static int tail_allowed(const lcopy *c, uint64_t h)
{
    if (c->replaced)
        return 0;
    for (uint64_t j = h + 1; j <= c->base->nev; j++)
        if (!c->damaged[j])
            return 0;
    return 1;
}

/* Every key through handle h against the acknowledged history of a store
 * whose head is `head`: A_OK, A_REFUSED (a get failed with an error other
 * than ENOTFOUND), A_TAIL or A_LOSS; *why says the worst. */
static int judge_keys(bindlog *h, const lcopy *c, uint64_t head, char *why, size_t cap)
{
    int worst = A_OK;
    for (unsigned k = 0; k < NKEYS; k++) {
        unsigned last = last_event(c->base, k);
        char key[16], want[32];
        bindlog_binding bd;
        if (last == 0)
            continue;
        snprintf(key, sizeof key, "k%02u", k);
        sid_of(c->base, last, want, sizeof want);
        int rc = bindlog_get(h, key, &bd);
        if (rc == 0 && strcmp(bd.session_id, want) == 0)
            continue;
        int a = rc < 0 && rc != BINDLOG_ENOTFOUND      ? A_REFUSED
                : last > head && tail_allowed(c, head) ? A_TAIL
                                                       : A_LOSS;
        if (a > worst) {
            worst = a;
            snprintf(why, cap, "%s: %s (want %s)", key,
                     rc == 0 ? bd.session_id : bindlog_code_name(rc), want);
        }
    }
    return worst;
}

static int head_answer(const lcopy *c, uint64_t head)
{
    if (head == c->base->nev)
        return A_OK;
    return head < c->base->nev && tail_allowed(c, head) ? A_TAIL : A_LOSS;
}

/* Open (read-write or read-only): exit status open-answer * 8 + get-answer. */
static int probe_open(void *arg)
{
    const probe *p = arg;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *h = NULL;
    bindlog_stats stats;
    char why[300] = "";
    o.read_only = p->read_only;
    int rc = bindlog_open(&h, p->dir, &o);
    if (rc != 0) {
        fprintf(p->note, "refused: %s\n", bindlog_last_error());
        return PROBE_BASE + A_REFUSED * 8 + A_REFUSED;
    }
    if (bindlog_stats_get(h, &stats) != 0) {
        fprintf(p->note, "refused: stats: %s\n", bindlog_last_error());
        bindlog_close(h);
        return PROBE_BASE + A_REFUSED * 8 + A_REFUSED;
    }
    int a_open = head_answer(p->c, stats.head_lsn);
    int a_get = judge_keys(h, p->c, stats.head_lsn, why, sizeof why);
    fprintf(p->note, "head %llu of %u; %s\n", (unsigned long long)stats.head_lsn, p->c->base->nev,
            why);
    bindlog_close(h);
    return PROBE_BASE + a_open * 8 + a_get;
}

/* bindlog_recover into p->out, judged. */
static int probe_recover(void *arg)
{
    const probe *p = arg;
    const lcopy *c = p->c;
    bindlog_recover_report rep;
    int lost[MAX_EVENTS + 2] = {0}, any = 0, answer = A_OK;
    memset(&rep, 0, sizeof rep);
    int rc = bindlog_recover(p->dir, p->out, &rep, NULL, NULL);
    if (rc != 0) {
        fprintf(p->note, "failed: %s\n", bindlog_last_error());
        bindlog_recover_report_free(&rep);
        return PROBE_BASE + A_FAILED;
    }
    for (size_t r = 0; r < rep.nranges; r++)
        for (uint64_t l = rep.ranges[r].first; l <= rep.ranges[r].last && l <= MAX_EVENTS; l++) {
            lost[l] = 1;
            any = 1;
            if (l > c->base->nev || !c->damaged[l] || l <= c->base->ckpt) {
                answer = A_LOSS;
                fprintf(p->note, "names LSN %llu lost, whose frame is intact or checkpointed\n",
                        (unsigned long long)l);
            }
        }
    /* a head short of the last event: only damaged frames may lie past it */
    if (answer == A_OK && rep.new_head_lsn < c->base->nev) {
        for (uint64_t l = rep.new_head_lsn + 1; l <= c->base->nev; l++)
            if (!c->damaged[l] || l <= c->base->ckpt) {
                answer = A_LOSS;
                fprintf(p->note, "built head %llu of %u, but the frame of LSN %llu is intact\n",
                        (unsigned long long)rep.new_head_lsn, c->base->nev, (unsigned long long)l);
                break;
            }
        any = 1;
    }
    if (answer == A_OK) {
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        bindlog *h = NULL;
        o.read_only = 1;
        if (bindlog_open(&h, p->out, &o) != 0) {
            fprintf(p->note, "failed: the recovered store does not open: %s\n",
                    bindlog_last_error());
            bindlog_recover_report_free(&rep);
            return PROBE_BASE + A_FAILED;
        }
        /* every key whose last event it kept (or whose frame is intact) */
        for (unsigned k = 0; k < NKEYS && answer == A_OK; k++) {
            unsigned last = last_event(c->base, k);
            char key[16], want[32];
            bindlog_binding bd;
            if (last == 0 || lost[last])
                continue;
            snprintf(key, sizeof key, "k%02u", k);
            sid_of(c->base, last, want, sizeof want);
            int grc = bindlog_get(h, key, &bd);
            if (grc == 0 && strcmp(bd.session_id, want) == 0)
                continue;
            if (c->damaged[last] && last > c->base->ckpt) {
                any = 1; /* a damaged frame's event, lost without being named */
                continue;
            }
            int named = 0;
            for (size_t g = 0; g < rep.nkeys; g++)
                named |= strcmp(rep.keys[g], key) == 0;
            answer = A_LOSS;
            fprintf(p->note,
                    "the recovered store misses LSN %u (intact, not named lost): %s is %s, want "
                    "%s%s\n",
                    last, key, grc == 0 ? bd.session_id : bindlog_code_name(grc), want,
                    named ? " (the key is among the report's keys with a gap)" : "");
        }
        bindlog_close(h);
    }
    bindlog_recover_report_free(&rep);
    return PROBE_BASE + (answer == A_OK && any ? A_TAIL : answer);
}

/* ---- one copy ------------------------------------------------------------------ */

/* One result line: "L kind idx cmd outcome answer-or-code\twhat\tnote". */
static void put(FILE *res, const lcopy *c, int cmd, int o, int code, const char *note)
{
    fprintf(res, "L %d %u %d %d %d\t%s\t%s\n", c->kind, c->idx, cmd, o, code, c->what, note);
}

/* probe_open's exit status: its open answer (which 0) or its get answer. */
static int open_answer(int o, int code, int which)
{
    code -= PROBE_BASE;
    if (o != R_EXIT || code < 0 || code >= NANSWERS * 8)
        return A_FAILED;
    return which ? code % 8 : code / 8;
}

/* Run probe fn on p under the timeout; the first line it noted into *note. */
static int run_probe(int (*fn)(void *), probe *p, const char *notep, char *note, size_t cap,
                     int *code)
{
    FILE *nf = fopen(notep, "w+");
    if (nf == NULL)
        dc_die("%s: %s", notep, strerror(errno));
    p->note = nf;
    int o = dc_run_fn(fn, p, code);
    rewind(nf);
    if (fgets(note, (int)cap, nf) == NULL)
        note[0] = '\0';
    note[strcspn(note, "\n")] = '\0';
    fclose(nf);
    return o;
}

static void do_lcopy(const lcopy *c, FILE *res, const char *wdir)
{
    char *dir = dc_path2(wdir, "copy"), *wcopy = dc_path2(wdir, "wcopy"),
         *scratch = dc_path2(wdir, "s"), *rec = dc_path2(wdir, "recovered"),
         *notep = dc_path2(wdir, "note");
    char key[16], sid[32], note[400];
    int o, code, ro_state = A_REFUSED;
    key_of(c->base->nev, key, sizeof key);
    sid_of(c->base, c->base->nev, sid, sizeof sid);
    mkdir(scratch, 0700);
    write_lcopy(dir, c);

    /* read-only open and get, on the copy every read-only command shares */
    probe p = {c, dir, rec, 1, NULL};
    o = run_probe(probe_open, &p, notep, note, sizeof note, &code);
    int a_open = open_answer(o, code, 0), a_get = open_answer(o, code, 1);
    put(res, c, O_OPENRO, o, o == R_EXIT ? a_open : code, note);
    put(res, c, O_GET, o, o == R_EXIT ? a_get : code, note);
    if (o == R_EXIT && a_open != A_REFUSED && a_open != A_FAILED)
        ro_state = a_open > a_get ? a_open : a_get;

    /* check: passing is right only on a store that shows every event */
    o = dc_run_cmd(C_CHECK, dir, scratch, key, sid, &code);
    put(res, c, O_CHECK, o,
        o != R_EXIT             ? code
        : code != 0             ? A_REFUSED
        : ro_state == A_REFUSED ? A_OK
                                : ro_state,
        "");

    o = run_probe(probe_recover, &p, notep, note, sizeof note, &code);
    put(res, c, O_RECOVER, o,
        o != R_EXIT                                          ? code
        : code >= PROBE_BASE && code < PROBE_BASE + NANSWERS ? code - PROBE_BASE
                                                             : A_FAILED,
        note);
    dc_rm_rf(rec);

    for (int cli = 0; cli < NCMDS; cli++) {
        const char *target = dir;
        if (cli == C_CHECK)
            continue;
        if (cli == C_BIND || cli == C_COMPACT) {
            write_lcopy(wcopy, c);
            target = wcopy;
        }
        o = dc_run_cmd(cli, target, scratch, key, sid, &code);
        put(res, c, NORACLE + cli, o, code, "");
    }

    /* last, as it may repair what the others read: a read-write open */
    write_lcopy(wcopy, c);
    p.dir = wcopy;
    p.read_only = 0;
    o = run_probe(probe_open, &p, notep, note, sizeof note, &code);
    a_open = open_answer(o, code, 0);
    a_get = open_answer(o, code, 1);
    put(res, c, O_OPENRW, o, o == R_EXIT ? (a_open > a_get ? a_open : a_get) : code, note);
    fflush(res);
    free(dir);
    free(wcopy);
    free(scratch);
    free(rec);
    free(notep);
}

/* ---- the campaign ------------------------------------------------------------ */

static unsigned copies(int k, unsigned kinds_mask, int full, unsigned per_kind)
{
    if (!(kinds_mask & (1u << k)))
        return 0;
    return full ? full_counts[k] : per_kind;
}

/* The four stores, under work/log-stores. */
static char *make_stores(const char *work)
{
    char *stores = dc_path2(work, "log-stores");
    mkdir(work, 0700);
    mkdir(stores, 0700);
    make_store(&st_a, stores, "A", "", 110, 0);
    make_store(&st_b, stores, "B", "", 120, 40);
    make_store(&st_c, stores, "C", "C", 110, 0);
    make_store(&st_d, stores, "D", "D", 120, 40);
    return stores;
}

int dc_log_write_copy(const char *work, uint64_t seed, const char *kind, unsigned idx,
                      const char *dir)
{
    int k = 0;
    while (k < NLKINDS && strcmp(dc_log_kind_names[k], kind) != 0)
        k++;
    if (k == NLKINDS)
        return -1;
    free(make_stores(work));
    lcopy c;
    make_lcopy(k, idx, seed, &c);
    write_lcopy(dir, &c);
    printf("%s #%u: %s\n", kind, idx, c.what);
    for (unsigned j = 1; j <= c.base->nev; j++)
        if (c.damaged[j])
            printf("  frame of LSN %u damaged%s\n", j,
                   j <= c.base->ckpt ? " (already checkpointed)" : "");
    free_lcopy(&c);
    return 0;
}

unsigned dc_log_campaign(const char *work, uint64_t seed, unsigned per_kind, int full,
                         unsigned jobs, unsigned kinds_mask, int allow_loss, int show_refusals)
{
    char *stores = make_stores(work);

    unsigned total = 0;
    for (int k = 0; k < NLKINDS; k++)
        total += copies(k, kinds_mask, full, per_kind);
    fprintf(stderr, "damage_campaign: %u log/shm copies x %d commands, %u job(s)\n", total,
            NALL - 1, jobs);
    pid_t *pids = calloc(jobs, sizeof(pid_t));
    if (pids == NULL)
        dc_die("out of memory");
    fflush(NULL);
    for (unsigned j = 0; j < jobs; j++) {
        char name[32], *wdir, *resp;
        snprintf(name, sizeof name, "ljob%u", j);
        wdir = dc_path2(work, name);
        if (asprintf(&resp, "%s/lresults.%u", work, j) < 0)
            dc_die("out of memory");
        mkdir(wdir, 0700);
        pids[j] = fork();
        if (pids[j] == 0) {
            FILE *res = fopen(resp, "w");
            unsigned n = 0;
            if (res == NULL)
                _exit(2);
            for (int k = 0; k < NLKINDS; k++)
                for (unsigned i = 0; i < copies(k, kinds_mask, full, per_kind); i++, n++) {
                    lcopy c;
                    if (n % jobs != j)
                        continue;
                    make_lcopy(k, i, seed, &c);
                    do_lcopy(&c, res, wdir);
                    fprintf(res, "C %d %u %u %u\n", k, i, c.ndamaged, c.ndamaged_live);
                    free_lcopy(&c);
                }
            fclose(res);
            _exit(0);
        }
        free(wdir);
        free(resp);
    }
    for (unsigned j = 0; j < jobs; j++) {
        int st;
        waitpid(pids[j], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            dc_die("log job %u failed", j);
    }
    free(pids);

    /* the tables */
    static unsigned crash[NLKINDS][NALL], hang[NLKINDS][NALL], ans[NLKINDS][NORACLE][NANSWERS],
        ckpt_only[NLKINDS], frames_hit[NLKINDS];
    unsigned tot_crash = 0, tot_hang = 0, tot_loss = 0, tot_fail = 0, tot_rloss = 0;
    char line[1200];
    for (unsigned j = 0; j < jobs; j++) {
        char *resp;
        if (asprintf(&resp, "%s/lresults.%u", work, j) < 0)
            dc_die("out of memory");
        FILE *res = fopen(resp, "r");
        if (res == NULL)
            dc_die("%s: %s", resp, strerror(errno));
        while (fgets(line, sizeof line, res) != NULL) {
            int k, cmd, o, code;
            unsigned idx, nd, ndl;
            line[strcspn(line, "\n")] = '\0';
            if (sscanf(line, "C %d %u %u %u", &k, &idx, &nd, &ndl) == 4 && k >= 0 && k < NLKINDS) {
                frames_hit[k] += nd > 0;
                ckpt_only[k] += nd > 0 && ndl == 0;
                continue;
            }
            if (sscanf(line, "L %d %u %d %d %d", &k, &idx, &cmd, &o, &code) != 5 || k < 0 ||
                k >= NLKINDS || cmd < 0 || cmd >= NALL)
                continue;
            const char *rest = strchr(line, '\t');
            rest = rest ? rest + 1 : "";
            const char *name = cmd < NORACLE ? oracle_names[cmd] : dc_cmd_names[cmd - NORACLE];
            if (o == R_SIGNAL) {
                crash[k][cmd]++;
                tot_crash++;
                printf("CRASH  %-8s #%-3u %-8s signal %d: %s\n", dc_log_kind_names[k], idx, name,
                       code, rest);
            } else if (o == R_HANG) {
                hang[k][cmd]++;
                tot_hang++;
                printf("HANG   %-8s #%-3u %-8s: %s\n", dc_log_kind_names[k], idx, name, rest);
            } else if (cmd < NORACLE) {
                if (code < 0 || code >= NANSWERS)
                    code = A_FAILED; /* the probe itself could not run */
                ans[k][cmd][code]++;
                if (code == A_LOSS) {
                    tot_loss += cmd != O_RECOVER;
                    tot_rloss += cmd == O_RECOVER;
                    printf("LOSS   %-8s #%-3u %-8s %s\n", dc_log_kind_names[k], idx, name, rest);
                } else if (code == A_REFUSED && show_refusals && cmd != O_GET) {
                    printf("REFUSED %-8s #%-3u %-8s %s\n", dc_log_kind_names[k], idx, name, rest);
                } else if (code == A_FAILED) {
                    tot_fail++;
                    printf("FAILED %-8s #%-3u %-8s %s\n", dc_log_kind_names[k], idx, name, rest);
                }
            }
        }
        fclose(res);
        free(resp);
    }
    printf("\nlog and shm damage kinds:\n");
    for (int k = 0; k < NLKINDS; k++)
        if (copies(k, kinds_mask, full, per_kind))
            printf("  %-9s %s\n", dc_log_kind_names[k], kind_what[k]);
    printf("\nlog and shm damage, %u copies, seed %llu: silent losses (LOSS) / refused (ref) / "
           "tail dropped (tail) per command;\n'ckpt' copies damaged only frames already "
           "checkpointed; recover 'tail' = lost only damaged frames' LSNs, 'fail' = failed\n",
           total, (unsigned long long)seed);
    printf("%-9s %6s %5s", "kind", "copies", "ckpt");
    for (int o = 0; o < NORACLE; o++)
        printf(" %16s", oracle_names[o]);
    printf("\n%-9s %6s %5s", "", "", "");
    for (int o = 0; o < NORACLE; o++)
        printf(" %16s", o == O_RECOVER ? "LOSS/tail/fail" : "LOSS/ref/tail");
    printf("\n");
    for (int k = 0; k < NLKINDS; k++) {
        if (!copies(k, kinds_mask, full, per_kind))
            continue;
        printf("%-9s %6u %5u", dc_log_kind_names[k], copies(k, kinds_mask, full, per_kind),
               ckpt_only[k]);
        for (int o = 0; o < NORACLE; o++) {
            char cell[48];
            const unsigned *a = ans[k][o];
            if (o == O_RECOVER)
                snprintf(cell, sizeof cell, "%u/%u/%u", a[A_LOSS], a[A_TAIL], a[A_FAILED]);
            else
                snprintf(cell, sizeof cell, "%u/%u/%u", a[A_LOSS], a[A_REFUSED], a[A_TAIL]);
            printf(" %16s", cell);
        }
        printf("\n");
    }
    printf("\ncrashes (hangs) per log/shm damage kind and command:\n%-9s", "kind");
    for (int cmd = 0; cmd < NALL; cmd++)
        if (cmd != O_GET && cmd != NORACLE + C_CHECK)
            printf(" %7.7s", cmd < NORACLE ? oracle_names[cmd] : dc_cmd_names[cmd - NORACLE]);
    printf("\n");
    for (int k = 0; k < NLKINDS; k++) {
        if (!copies(k, kinds_mask, full, per_kind))
            continue;
        printf("%-9s", dc_log_kind_names[k]);
        for (int cmd = 0; cmd < NALL; cmd++) {
            char cell[32];
            if (cmd == O_GET || cmd == NORACLE + C_CHECK)
                continue;
            if (hang[k][cmd])
                snprintf(cell, sizeof cell, "%u(%u)", crash[k][cmd], hang[k][cmd]);
            else
                snprintf(cell, sizeof cell, "%u", crash[k][cmd]);
            printf(" %7s", cell);
        }
        printf("\n");
    }
    printf("log total: %u crashes, %u hangs, %u silent losses (open, get, check), %u by recover, "
           "%u failed probes\n",
           tot_crash, tot_hang, tot_loss, tot_rloss, tot_fail);
    free(stores);
    return tot_crash + tot_hang + tot_fail + (allow_loss & DC_ALLOW_OPEN_LOSS ? 0 : tot_loss) +
           (allow_loss & DC_ALLOW_RECOVER_LOSS ? 0 : tot_rloss);
}
