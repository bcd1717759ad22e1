/*
 * peer_etcd.c -- the etcd side of bindlog-bench (opt-in with --etcd):
 * throwaway loopback clusters, and the raw etcd client that sets the
 * ceiling for bindlog on etcd://.
 *
 * The raw client.  For every stream event it does what any design that
 * keeps the routing table in etcd with a conditional Txn must do, and
 * nothing more:
 *
 *   1. one read at one revision: a Txn without compares whose success
 *      branch ranges over the head record, the key's binding and the session
 *      records the event names (split: parent and child; bind: expected and
 *      target; /new: the new id), so every value comes with its
 *      mod_revision;
 *   2. if the workload's model says the event applies: one Txn whose
 *      compares require every key read to have the mod_revision it had
 *      (0 = still absent), and whose success branch puts what the event
 *      changes -- for a split: the child session, the parent session (ended),
 *      the binding, the log record (key = zero-padded LSN), the key's history
 *      entry, the children index entry and the head (7 puts).  STALE and
 *      MOVED events write nothing.
 *
 * Keys follow the etcd backend's layout (src/etcd/etcd_store.h): PREFIX "/m/head",
 * "/b/" key, "/s/" id, "/l/" 20-digit LSN, "/h/" key 0x00 LSN, "/c/" parent
 * 0x00 child.
 *
 * It does not decode values or run the state machine: it trusts the model's
 * outcome and writes values of the sizes bindlog's encodings have (binding
 * ~62 B, session ~190 B, record ~230 B, head 16 B), so what separates
 * bindlog from it is exactly bindlog's own work: deciding, encoding,
 * checksumming, its read strategy and its retries.  A lost compare (never
 * with one writer) counts as an error.  It runs with one writer only.
 *
 * Clusters come from tests/etcd/cluster.sh (found through the
 * BINDLOG_BENCH_SOURCE_DIR compile definition), on 127.0.0.1 only, with a
 * watchdog (BL_CLUSTER_OWNER_PID) that stops them should the bench die.
 */
#include "bench.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd/etcd_client.h"

#ifndef BINDLOG_BENCH_SOURCE_DIR
#define BINDLOG_BENCH_SOURCE_DIR "."
#endif

/* ---- clusters ---------------------------------------------------------------- */

static const char *script_path(void)
{
    static char path[4096];
    const char *src = getenv("BINDLOG_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/etcd/cluster.sh",
             src != NULL && *src != '\0' ? src : BINDLOG_BENCH_SOURCE_DIR);
    return path;
}

/* Run cluster.sh with ARGS; the first line of its stdout goes to out (may
 * be NULL).  The exit status, or -1. */
static int run_script(char *out, size_t cap, const char *fmt, ...)
{
    char args[5000], cmd[10000], line[1024] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    if (strchr(script_path(), '\'') != NULL)
        return -1;
    snprintf(cmd, sizeof cmd, "BL_CLUSTER_OWNER_PID=%ld bash '%s' %s", (long)getpid(),
             script_path(), args);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        return -1;
    if (fgets(line, sizeof line, p) == NULL)
        line[0] = '\0';
    while (fgetc(p) != EOF) {
    }
    int status = pclose(p);
    line[strcspn(line, "\n")] = '\0';
    if (out != NULL)
        snprintf(out, cap, "%s", line);
    return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int etcd_available(void)
{
    return run_script(NULL, 0, "check") == 0;
}

int etcd_cluster_start(etcd_cluster *cl, int members, const char *dir)
{
    memset(cl, 0, sizeof(*cl));
    cl->members = members;
    if (strchr(dir, '\'') != NULL ||
        snprintf(cl->dir, sizeof cl->dir, "%s", dir) >= (int)sizeof cl->dir)
        return -1;
    rm_tree(dir);
    if (run_script(cl->endpoints, sizeof cl->endpoints, "start %d '%s'", members, dir) != 0 ||
        cl->endpoints[0] == '\0') {
        run_script(NULL, 0, "stop '%s'", dir);
        return -1;
    }
    cl->own = 1;
    return 0;
}

void etcd_cluster_stop(etcd_cluster *cl, int keep)
{
    if (!cl->own)
        return;
    run_script(NULL, 0, "stop '%s'", cl->dir);
    if (!keep)
        rm_tree(cl->dir);
    cl->own = 0;
}

double etcd_cluster_cpu(const etcd_cluster *cl)
{
    double total = 0;
    long tick = sysconf(_SC_CLK_TCK);
    if (!cl->own || tick <= 0)
        return -1;
    for (int i = 0; i < cl->members; i++) {
        char path[4200], buf[2048];
        long pid = 0;
        snprintf(path, sizeof path, "%s/m%d.pid", cl->dir, i);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            return -1;
        if (fscanf(f, "%ld", &pid) != 1)
            pid = 0;
        fclose(f);
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        if (pid <= 0 || (f = fopen(path, "r")) == NULL)
            return -1;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* after "(comm)": state, then 10 fields, then utime and stime */
        const char *p = strrchr(buf, ')');
        unsigned long ut = 0, st = 0;
        if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                                &ut, &st) != 2)
            return -1;
        total += (double)(ut + st) / (double)tick;
    }
    return total;
}

int etcd_wipe_prefix(const char *endpoints, const char *prefix)
{
    bl_etcd *c = NULL;
    unsigned char end[512];
    size_t plen = strlen(prefix);
    if (plen == 0 || plen >= sizeof end || bl_etcd_open(endpoints, NULL, &c) != 0)
        return -1;
    size_t elen = bl_etcd_prefix_end(prefix, plen, end);
    int rc = bl_etcd_delete_range(c, prefix, plen, end, elen, NULL, NULL);
    bl_etcd_close(c);
    return rc;
}

int64_t etcd_count_prefix(const char *endpoints, const char *prefix)
{
    bl_etcd *c = NULL;
    bl_etcd_kvs kvs = {0};
    unsigned char end[512];
    size_t plen = strlen(prefix);
    if (plen == 0 || plen >= sizeof end || bl_etcd_open(endpoints, NULL, &c) != 0)
        return -1;
    size_t elen = bl_etcd_prefix_end(prefix, plen, end);
    int rc = bl_etcd_range(c, prefix, plen, end, elen, 0, 0, BL_ETCD_COUNT_ONLY, &kvs);
    int64_t n = rc == 0 ? kvs.count : -1;
    bl_etcd_kvs_free(&kvs);
    bl_etcd_close(c);
    return n;
}

/* little-endian u64, as bindlog's head record */
static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---- the raw client ----------------------------------------------------------- */

#define EX_BVAL 62   /* bytes of a binding value with a 36-byte session id */
#define EX_SVAL 120  /* a session value without key and origin (added per event) */
#define EX_REC 110   /* a log record without key and origin (added per event) */
#define EX_KEY_MAX 1024

struct ex_shared {
    bl_etcd *c;
    char prefix[256];
    size_t plen;
    unsigned char blob[EX_SVAL + EX_REC + 2 * BINDLOG_KEY_MAX + 2 * 4096];
    int reported; /* the first error was printed */
};

/* Key builders: prefix + tag + parts. */
static size_t k_make(const ex_shared *x, unsigned char *out, const char *tag, const char *a,
                     size_t alen, const char *b, size_t blen)
{
    size_t n = 0, tl = strlen(tag);
    memcpy(out, x->prefix, x->plen);
    n += x->plen;
    memcpy(out + n, tag, tl);
    n += tl;
    memcpy(out + n, a, alen);
    n += alen;
    if (b != NULL) {
        out[n++] = 0;
        memcpy(out + n, b, blen);
        n += blen;
    }
    return n;
}

static size_t k_lsn(const ex_shared *x, unsigned char *out, uint64_t lsn)
{
    char d[24];
    snprintf(d, sizeof d, "%020llu", (unsigned long long)lsn);
    return k_make(x, out, "l/", d, 20, NULL, 0);
}

ex_shared *ex_open(const char *endpoints, const char *prefix, const workload *w)
{
    bl_etcd_options o = BL_ETCD_OPTIONS_INIT;
    ex_shared *x = calloc(1, sizeof(*x));
    if (x == NULL)
        return NULL;
    o.request_timeout_ms = 15000;
    o.attempt_timeout_ms = 10000;
    snprintf(x->prefix, sizeof x->prefix, "%s/", prefix);
    x->plen = strlen(x->prefix);
    memset(x->blob, 'v', sizeof x->blob);
    if (bl_etcd_open(endpoints, &o, &x->c) != 0) {
        free(x);
        return NULL;
    }
    /* the setup: every key bound to a fresh session, in Txns of up to 20
     * keys (binding, session, record, history: 4 puts each) + the head */
    unsigned char (*keys)[EX_KEY_MAX] = malloc(sizeof(*keys) * 81);
    bl_etcd_op ops[81];
    unsigned char head[16];
    uint64_t lsn = 0;
    int rc = keys == NULL ? -1 : 0;
    for (uint32_t k0 = 0; rc == 0 && k0 < w->nkeys; k0 += 20) {
        size_t n = 0;
        for (uint32_t k = k0; k < w->nkeys && k < k0 + 20; k++) {
            const wl_event *e = &w->setup[k];
            const char *key = w->keys[k], *sid = wl_id(w, e->sid);
            size_t kl = w->key_len[k], sl = strlen(sid), ol = w->origin_len[k];
            char d[24];
            lsn++;
            snprintf(d, sizeof d, "%020llu", (unsigned long long)lsn);
            ops[n] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = keys[n],
                                  .key_len = k_make(x, keys[n], "b/", key, kl, NULL, 0),
                                  .value = x->blob, .value_len = EX_BVAL};
            n++;
            ops[n] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = keys[n],
                                  .key_len = k_make(x, keys[n], "s/", sid, sl, NULL, 0),
                                  .value = x->blob, .value_len = EX_SVAL + kl + ol};
            n++;
            ops[n] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = keys[n],
                                  .key_len = k_lsn(x, keys[n], lsn), .value = x->blob,
                                  .value_len = EX_REC + kl + sl + ol};
            n++;
            ops[n] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = keys[n],
                                  .key_len = k_make(x, keys[n], "h/", key, kl, d, 20),
                                  .value = "", .value_len = 0};
            n++;
        }
        put64(head, lsn);
        put64(head + 8, (uint64_t)wall_ms());
        ops[n] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = keys[n],
                              .key_len = k_make(x, keys[n], "m/head", "", 0, NULL, 0),
                              .value = head, .value_len = sizeof head};
        n++;
        bl_etcd_txn_result res = {0};
        rc = bl_etcd_txn(x->c, NULL, 0, ops, n, NULL, 0, &res);
        bl_etcd_txn_result_free(&res);
    }
    free(keys);
    if (rc != 0) {
        fprintf(stderr, "bindlog-bench: raw etcd setup: %s\n", bl_etcd_last_error());
        bl_etcd_close(x->c);
        free(x);
        return NULL;
    }
    return x;
}

void ex_close(ex_shared *x)
{
    if (x == NULL)
        return;
    bl_etcd_close(x->c);
    free(x);
}

static void *ex_open_thread(void *shared, int tid)
{
    (void)tid;
    return shared;
}

static void ex_close_thread(void *tctx)
{
    (void)tctx;
}

/* Up to 4 keys read (head, binding, two sessions), up to 7 puts. */
static int ex_apply(void *tctx, const workload *w, const wl_event *e)
{
    ex_shared *x = tctx;
    unsigned char rk[4][EX_KEY_MAX], wk[7][EX_KEY_MAX];
    bl_etcd_op rd[4], wr[7];
    bl_etcd_cmp cmp[4];
    bl_etcd_txn_result res = {0};
    const char *key = w->keys[e->key], *sid = wl_id(w, e->sid), *oth = wl_id(w, e->other);
    size_t kl = w->key_len[e->key], sl = strlen(sid), othl = strlen(oth);
    size_t ol = e->origin ? w->origin_len[e->key] : 0;
    size_t nr = 0, nw = 0;
    int rc;

    /* 1. read: head, binding, the sessions the event names */
    rd[nr] = (bl_etcd_op){.type = BL_ETCD_OP_RANGE, .key = rk[nr],
                          .key_len = k_make(x, rk[nr], "m/head", "", 0, NULL, 0)};
    nr++;
    rd[nr] = (bl_etcd_op){.type = BL_ETCD_OP_RANGE, .key = rk[nr],
                          .key_len = k_make(x, rk[nr], "b/", key, kl, NULL, 0)};
    nr++;
    if (sl > 0) {
        rd[nr] = (bl_etcd_op){.type = BL_ETCD_OP_RANGE, .key = rk[nr],
                              .key_len = k_make(x, rk[nr], "s/", sid, sl, NULL, 0)};
        nr++;
    }
    if (othl > 0) {
        rd[nr] = (bl_etcd_op){.type = BL_ETCD_OP_RANGE, .key = rk[nr],
                              .key_len = k_make(x, rk[nr], "s/", oth, othl, NULL, 0)};
        nr++;
    }
    if ((rc = bl_etcd_txn(x->c, NULL, 0, rd, nr, NULL, 0, &res)) != 0)
        goto out;
    if (res.nresults != nr) {
        rc = BINDLOG_EIO;
        goto out;
    }
    uint64_t lsn = 0;
    for (size_t i = 0; i < nr; i++) {
        const bl_etcd_kvs *kv = &res.results[i].kvs;
        cmp[i] = (bl_etcd_cmp){.target = BL_ETCD_CMP_MOD, .result = BL_ETCD_EQUAL,
                               .key = rd[i].key, .key_len = rd[i].key_len,
                               .number = kv->n ? kv->kvs[0].mod_revision : 0};
        if (i == 0 && kv->n && kv->kvs[0].value_len >= 8)
            lsn = get64(kv->kvs[0].value);
    }
    bl_etcd_txn_result_free(&res);
    if (e->outcome != BINDLOG_APPLIED) {
        rc = e->outcome; /* STALE, MOVED: decided on the read, nothing written */
        goto out;
    }

    /* 2. the conditional write */
    unsigned char head[16];
    char d[24];
    lsn++;
    snprintf(d, sizeof d, "%020llu", (unsigned long long)lsn);
    put64(head, lsn);
    put64(head + 8, (uint64_t)wall_ms());
    if (sl > 0) { /* the session the key gets: child, new, or bind target */
        wr[nw] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = wk[nw],
                              .key_len = k_make(x, wk[nw], "s/", sid, sl, NULL, 0),
                              .value = x->blob, .value_len = EX_SVAL + kl + othl + ol};
        nw++;
    }
    if (othl > 0 && strcmp(oth, sid) != 0) { /* the session that ends */
        wr[nw] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = wk[nw],
                              .key_len = k_make(x, wk[nw], "s/", oth, othl, NULL, 0),
                              .value = x->blob, .value_len = EX_SVAL + kl + ol};
        nw++;
    }
    wr[nw] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = wk[nw],
                          .key_len = k_make(x, wk[nw], "b/", key, kl, NULL, 0),
                          .value = x->blob, .value_len = EX_BVAL};
    nw++;
    wr[nw] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = wk[nw], .key_len = k_lsn(x, wk[nw], lsn),
                          .value = x->blob, .value_len = EX_REC + kl + sl + othl + ol};
    nw++;
    wr[nw] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = wk[nw],
                          .key_len = k_make(x, wk[nw], "h/", key, kl, d, 20), .value = "",
                          .value_len = 0};
    nw++;
    if (e->type == BINDLOG_EVENT_SPLIT) {
        wr[nw] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = wk[nw],
                              .key_len = k_make(x, wk[nw], "c/", oth, othl, sid, sl),
                              .value = "", .value_len = 0};
        nw++;
    }
    wr[nw] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = wk[nw],
                          .key_len = k_make(x, wk[nw], "m/head", "", 0, NULL, 0), .value = head,
                          .value_len = sizeof head};
    nw++;
    if ((rc = bl_etcd_txn(x->c, cmp, nr, wr, nw, NULL, 0, &res)) != 0)
        goto out;
    rc = res.succeeded ? BINDLOG_APPLIED : BINDLOG_EBUSY; /* one writer: never lost */
out:
    if (rc < 0 && !x->reported) {
        x->reported = 1;
        fprintf(stderr, "bindlog-bench: raw etcd: %s: %s\n", bindlog_code_name(rc),
                bl_etcd_last_error());
    }
    bl_etcd_txn_result_free(&res);
    return rc;
}

const contender ex_contender = {"raw etcd", ex_open_thread, ex_apply, ex_close_thread};
