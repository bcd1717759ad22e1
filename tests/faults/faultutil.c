/*
 * faultutil.c -- workload, acknowledgements and verifier shared by the
 * fault-injection tests (see faultutil.h).
 */
#define _GNU_SOURCE
#include "faultutil.h"

#include "shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

/* bindlog_check() is used when the library defines it (FU_HAVE_bindlog_check,
 * found by tests/faults/CMakeLists.txt at configure time). */

void fu_key(char out[32], unsigned k) { snprintf(out, 32, "fault:%u", k); }

/* ---- workload --------------------------------------------------------------- */

typedef struct kstate {
    char sid[BINDLOG_ID_MAX + 1];
    unsigned ctr;
} kstate;

typedef struct wthread {
    const fu_workload *w;
    bindlog *s;
    int ack_fd;
    int t;
    int rc;
    pthread_t tid;
} wthread;

static void ack(int fd, unsigned key, int type, const bindlog_result *r)
{
    fu_ack a;
    if (fd < 0)
        return;
    memset(&a, 0, sizeof(a));
    a.key = key;
    a.type = (uint32_t)type;
    a.lsn = r->lsn;
    a.generation = r->generation;
    snprintf(a.session_id, sizeof(a.session_id), "%s", r->session_id);
    /* sizeof(a) < PIPE_BUF: one atomic write, whole or nothing */
    if (write(fd, &a, sizeof(a)) != (ssize_t)sizeof(a))
        abort();
}

static void *wthread_main(void *arg)
{
    wthread *wt = arg;
    const fu_workload *w = wt->w;
    unsigned seed = w->seed * 7919u + (unsigned)wt->t * 104729u + 1;
    kstate *ks = calloc((size_t)w->keys_per_thread, sizeof(*ks));
    char key[32], sid[40], origin[48];

    if (ks == NULL) {
        wt->rc = BINDLOG_ENOMEM;
        return NULL;
    }
    for (int i = 0; i < w->events_per_thread && wt->rc == 0; i++) {
        int ki = (int)(rand_r(&seed) % (unsigned)w->keys_per_thread);
        unsigned kn = w->key_base + (unsigned)(wt->t * w->keys_per_thread + ki);
        kstate *k = &ks[ki];
        bindlog_result res[2];
        int bound = k->sid[0] != '\0';
        int op = (int)(rand_r(&seed) % 100);
        int type, rc;

        fu_key(key, kn);
        snprintf(sid, sizeof(sid), "s%u-%u", kn, ++k->ctr);
        int olen = snprintf(origin, sizeof(origin), "{\"peer\":%u,\"n\":%d}", kn, i);
        const void *orig = op % 3 == 0 ? NULL : origin;

        if (bound && w->batch_every > 0 && i % w->batch_every == w->batch_every - 1) {
            bindlog_event ev[2];
            memset(ev, 0, sizeof(ev));
            ev[0].type = BINDLOG_EVENT_INVALIDATE;
            ev[0].key = key;
            ev[0].reason = "stop";
            ev[1].type = BINDLOG_EVENT_SPLIT;
            ev[1].key = key;
            ev[1].session_id = sid;
            ev[1].expect = k->sid;
            ev[1].generation = BINDLOG_ANY_GENERATION;
            ev[1].origin = orig;
            ev[1].origin_len = orig ? (size_t)olen : 0;
            rc = bindlog_apply_batch(wt->s, ev, 2, res, NULL);
            if (rc == 0 && (res[0].outcome != BINDLOG_APPLIED || res[1].outcome != BINDLOG_APPLIED))
                rc = -10000 - (res[0].outcome != BINDLOG_APPLIED ? res[0].outcome : res[1].outcome);
            if (rc != 0) {
                wt->rc = rc;
                break;
            }
            ack(wt->ack_fd, kn, BINDLOG_EVENT_INVALIDATE, &res[0]);
            ack(wt->ack_fd, kn, BINDLOG_EVENT_SPLIT, &res[1]);
            snprintf(k->sid, sizeof(k->sid), "%s", res[1].session_id);
            continue;
        }
        if (!bound) {
            type = op < 50 ? BINDLOG_EVENT_BIND : BINDLOG_EVENT_NEW_SESSION;
        } else if (op < 25) {
            type = BINDLOG_EVENT_NEW_SESSION;
        } else if (op < 60) {
            type = BINDLOG_EVENT_SPLIT;
        } else if (op < 75) {
            type = BINDLOG_EVENT_INVALIDATE;
        } else if (op < 85) {
            type = BINDLOG_EVENT_UNBIND;
        } else {
            type = BINDLOG_EVENT_BIND;
        }
        size_t ol = orig ? (size_t)olen : 0;
        switch (type) {
        case BINDLOG_EVENT_BIND:
            rc = bindlog_bind(wt->s, key, sid, bound ? k->sid : "", NULL, orig, ol, &res[0]);
            break;
        case BINDLOG_EVENT_NEW_SESSION:
            rc = bindlog_new_session(wt->s, key, sid, NULL, orig, ol, &res[0]);
            break;
        case BINDLOG_EVENT_SPLIT:
            rc = bindlog_split(wt->s, key, k->sid, sid, BINDLOG_ANY_GENERATION, orig, ol, &res[0]);
            break;
        case BINDLOG_EVENT_INVALIDATE:
            rc = bindlog_invalidate(wt->s, key, NULL, &res[0]);
            break;
        default:
            rc = bindlog_unbind(wt->s, key, "idle", &res[0]);
            break;
        }
        if (rc > 0)
            rc = -10000 - rc;
        if (rc != 0) {
            wt->rc = rc;
            break;
        }
        ack(wt->ack_fd, kn, type, &res[0]);
        snprintf(k->sid, sizeof(k->sid), "%s", res[0].session_id);
    }
    free(ks);
    return NULL;
}

int fu_run_workload(const char *dir, const fu_workload *w, int ack_fd)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s;
    wthread *wt;
    int rc;

    o.durability = w->durability;
    o.log_size = w->log_size;
    if ((rc = bindlog_open(&s, dir, &o)) != 0)
        return rc;
    wt = calloc((size_t)w->threads, sizeof(*wt));
    if (wt == NULL) {
        bindlog_close(s);
        return BINDLOG_ENOMEM;
    }
    for (int t = 0; t < w->threads; t++) {
        wt[t].w = w;
        wt[t].s = s;
        wt[t].ack_fd = ack_fd;
        wt[t].t = t;
        if (pthread_create(&wt[t].tid, NULL, wthread_main, &wt[t]) != 0)
            abort();
    }
    rc = 0;
    for (int t = 0; t < w->threads; t++) {
        pthread_join(wt[t].tid, NULL);
        if (rc == 0)
            rc = wt[t].rc;
    }
    free(wt);
    bindlog_close(s);
    return rc;
}

size_t fu_read_acks(int fd, fu_ack **out)
{
    size_t n = 0, cap = 256, got = 0;
    fu_ack *a = malloc(cap * sizeof(*a));
    if (a == NULL)
        abort();
    for (;;) {
        if (n == cap) {
            cap *= 2;
            a = realloc(a, cap * sizeof(*a));
            if (a == NULL)
                abort();
        }
        ssize_t r = read(fd, (char *)&a[n] + got, sizeof(*a) - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
        if (got == sizeof(*a)) {
            n++;
            got = 0;
        }
    }
    *out = a;
    return n;
}

/* ---- verifier --------------------------------------------------------------- */

typedef struct lrec {
    int present;
    int type;
    unsigned key;
    uint64_t generation;
    char sid[BINDLOG_ID_MAX + 1];
} lrec;

static int64_t rep_clock(void *ctx) { return *(const int64_t *)ctx; }

__attribute__((format(printf, 2, 3))) static void problem(fu_verdict *v, const char *fmt, ...)
{
    va_list ap;
    if (v->problems++ != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof(v->msg), fmt, ap);
    va_end(ap);
}

/* The message of a mismatch or a generation gone back, when no problem
 * set one first (those are counted on their own). */
__attribute__((format(printf, 2, 3))) static void problem_msg(fu_verdict *v, const char *fmt,
                                                              ...)
{
    va_list ap;
    if (v->msg[0] != '\0')
        return;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof(v->msg), fmt, ap);
    va_end(ap);
}

/* Re-apply one record to the replica; returns the call's rc. */
static int reapply(bindlog *r, const bindlog_record *rec, bindlog_result *res)
{
    const void *orig = rec->origin_present ? (rec->origin ? rec->origin : "") : NULL;
    switch (rec->type) {
    case BINDLOG_EVENT_BIND:
        return bindlog_bind(r, rec->key, rec->session_id, NULL, rec->reason, orig,
                            rec->origin_len, res);
    case BINDLOG_EVENT_NEW_SESSION:
        return bindlog_new_session(r, rec->key, rec->session_id, rec->reason, orig,
                                   rec->origin_len, res);
    case BINDLOG_EVENT_SPLIT:
        return bindlog_split(r, rec->key, rec->other_id, rec->session_id,
                             BINDLOG_ANY_GENERATION, rec->origin ? rec->origin : "",
                             rec->origin_len, res);
    case BINDLOG_EVENT_INVALIDATE:
        return bindlog_invalidate(r, rec->key, rec->reason, res);
    case BINDLOG_EVENT_UNBIND:
        return bindlog_unbind(r, rec->key, rec->reason, res);
    default:
        return BINDLOG_ECORRUPT;
    }
}

int fu_verify(const char *dir, const char *scratch, const fu_ack *acks, size_t n, int durability,
              fu_verdict *v)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL, *r = NULL;
    bindlog_iter *it = NULL;
    bindlog_record rec;
    bindlog_stats st;
    lrec *log = NULL;
    uint64_t *kgen = NULL;
    size_t nkeys = 0;
    int64_t clock = 0;
    int rc;

    memset(v, 0, sizeof(*v));
    v->acked = n;
    v->check_rc = 1;
    o.durability = durability;
    v->open_rc = bindlog_open(&s, dir, &o);
    if (v->open_rc != 0)
        return 1;
    if ((rc = bindlog_stats_get(s, &st)) != 0) {
        problem(v, "stats: %d", rc);
        goto out;
    }
    v->head_lsn = st.head_lsn;
    log = calloc(st.head_lsn + 2, sizeof(*log));
    for (size_t i = 0; i < n; i++)
        if (acks[i].key + 1 > nkeys)
            nkeys = acks[i].key + 1;
    nkeys += 1;
    kgen = calloc(nkeys + 100000, sizeof(*kgen));
    if (log == NULL || kgen == NULL)
        abort();

    /* the replica, fed through the public API with the records' times */
    tu_rmtree(scratch);
    bindlog_options ro = BINDLOG_OPTIONS_INIT;
    ro.durability = BINDLOG_DURABILITY_NONE;
    ro.clock_ms = rep_clock;
    ro.clock_ctx = &clock;
    if ((rc = bindlog_open(&r, scratch, &ro)) != 0) {
        problem(v, "cannot open the replica: %d", rc);
        goto out;
    }

    if ((rc = bindlog_log_iter(s, 0, UINT64_MAX, &it)) != 0) {
        problem(v, "log iterator: %d", rc);
        goto out;
    }
    uint64_t expect_lsn = st.base_lsn + 1;
    while ((rc = bindlog_iter_next_record(it, &rec)) == 1) {
        bindlog_result res;
        unsigned k = 0;
        v->records++;
        if (rec.lsn != expect_lsn)
            problem(v, "log not dense: lsn %llu where %llu was due", (unsigned long long)rec.lsn,
                    (unsigned long long)expect_lsn);
        expect_lsn = rec.lsn + 1;
        if (sscanf(rec.key, "fault:%u", &k) == 1 && k < nkeys + 100000) {
            if (rec.generation < kgen[k])
                problem(v, "generation of key %u went back at lsn %llu", k, (unsigned long long)rec.lsn);
            kgen[k] = rec.generation;
        }
        if (rec.lsn <= st.head_lsn) {
            lrec *l = &log[rec.lsn];
            l->present = 1;
            l->type = rec.type;
            l->key = k;
            l->generation = rec.generation;
            snprintf(l->sid, sizeof(l->sid), "%s", rec.session_id);
        }
        clock = rec.time_ms;
        int rrc = reapply(r, &rec, &res);
        if (rrc != BINDLOG_APPLIED || res.lsn != rec.lsn || res.generation != rec.generation)
            problem(v, "re-applying lsn %llu through the API gave %d", (unsigned long long)rec.lsn,
                    rrc);
    }
    if (rc < 0)
        problem(v, "log iteration failed with %d at lsn %llu", rc, (unsigned long long)expect_lsn);
    if (expect_lsn != st.head_lsn + 1)
        problem(v, "log ends at %llu, head is %llu", (unsigned long long)(expect_lsn - 1),
                (unsigned long long)st.head_lsn);
    bindlog_iter_close(it);
    it = NULL;

    unsigned char d1[BINDLOG_DIGEST_SIZE], d2[BINDLOG_DIGEST_SIZE];
    if (bindlog_digest(s, d1, NULL) != 0 || bindlog_digest(r, d2, NULL) != 0 ||
        memcmp(d1, d2, sizeof(d1)) != 0)
        problem(v, "state digest differs from the log re-applied (%llu records)",
                (unsigned long long)v->records);

    /* acknowledged events */
    for (size_t i = 0; i < n; i++) {
        const fu_ack *a = &acks[i];
        char key[32];
        bindlog_binding b;
        if (a->lsn == 0 || a->lsn > st.head_lsn || !log[a->lsn].present) {
            v->lost++;
            if (v->lost_min_lsn == 0 || a->lsn < v->lost_min_lsn)
                v->lost_min_lsn = a->lsn;
            continue;
        }
        if (a->lsn > v->kept_max_lsn)
            v->kept_max_lsn = a->lsn;
        const lrec *l = &log[a->lsn];
        /* an UNBIND record names the session it ended; the caller saw "" */
        if (l->key != a->key || l->type != (int)a->type || l->generation != a->generation ||
            (a->type != BINDLOG_EVENT_UNBIND && strcmp(l->sid, a->session_id) != 0)) {
            if (v->mismatched++ == 0)
                problem_msg(v, "acked LSN %llu: the log has key %u type %d generation %llu "
                               "session %s, the ack key %u type %u generation %llu session %s",
                            (unsigned long long)a->lsn, l->key, l->type,
                            (unsigned long long)l->generation, l->sid, a->key, a->type,
                            (unsigned long long)a->generation, a->session_id);
        }
        fu_key(key, a->key);
        rc = bindlog_get(s, key, &b);
        if ((rc != 0 && rc != BINDLOG_ENOTFOUND) || b.generation < a->generation) {
            if (v->gen_back++ == 0)
                problem_msg(v, "key %s: generation %llu (rc %d) below the acked %llu (LSN %llu)",
                            key, (unsigned long long)b.generation, rc,
                            (unsigned long long)a->generation, (unsigned long long)a->lsn);
        }
    }

#ifdef FU_HAVE_bindlog_check
    {
        bindlog_check_report rep;
        v->check_rc = bindlog_check(s, &rep, NULL, NULL);
        if (v->check_rc != 0)
            problem(v, "bindlog_check failed: %d", v->check_rc);
        else if (rep.problems != 0)
            problem(v, "bindlog_check: %.400s", rep.message);
    }
#endif
out:
    bindlog_iter_close(it);
    bindlog_close(r);
    bindlog_close(s);
    tu_rmtree(scratch);
    free(log);
    free(kgen);
    return v->problems || v->lost || v->mismatched || v->gen_back;
}

/* ---- shim --------------------------------------------------------------------- */

void fu_child_signals(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        signal(sigs[i], SIG_DFL);
}

void *fu_shim_sym(const char *name) { return dlsym(RTLD_DEFAULT, name); }

const char *fu_shim_op_name(int what)
{
    return what == SHIM_WRITE ? "write" : what == SHIM_SYNC ? "sync" : "directory operation";
}

#if defined(__SANITIZE_ADDRESS__)
#define FU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FU_ASAN 1
#endif
#endif

void fu_preload_self(char **argv, const char *shim)
{
    if (fu_shim_sym("bl_shim_track") != NULL || getenv("BINDLOG_FU_REEXEC") != NULL)
        return;
    const char *old = getenv("LD_PRELOAD");
    size_t len = strlen(shim) + (old ? strlen(old) : 0) + 2;
    char *pre = malloc(len);
    if (pre == NULL)
        abort();
    snprintf(pre, len, "%s%s%s", shim, old && *old ? ":" : "", old ? old : "");
    setenv("LD_PRELOAD", pre, 1);
    setenv("BINDLOG_FU_REEXEC", "1", 1);
#ifdef FU_ASAN
    {
        /* the shim comes before libasan in the preload list */
        const char *ao = getenv("ASAN_OPTIONS");
        size_t alen = (ao ? strlen(ao) : 0) + sizeof(":verify_asan_link_order=0");
        char *opts = malloc(alen);
        if (opts == NULL)
            abort();
        snprintf(opts, alen, "%s%sverify_asan_link_order=0", ao ? ao : "", ao && *ao ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
        free(opts);
    }
#endif
    execv("/proc/self/exe", argv);
    fprintf(stderr, "fu_preload_self: exec failed (%s); running without the shim\n",
            strerror(errno));
    free(pre);
}

int fu_copy_file(const char *src, const char *dst)
{
    char buf[65536];
    int in = open(src, O_RDONLY | O_CLOEXEC), out;
    ssize_t r;
    if (in < 0)
        return -1;
    out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0) {
        close(in);
        return -1;
    }
    while ((r = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)r) != r) {
            r = -1;
            break;
        }
    close(in);
    close(out);
    return r < 0 ? -1 : 0;
}
