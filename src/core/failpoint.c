/*
 * failpoint.c -- the runtime of BL_FAILPOINT (failpoint.h) in test builds.
 *
 * Compiled into every library, but empty unless BINDLOG_FAILPOINTS is
 * defined: release libraries contain no failpoint code and no failpoint
 * names.  In a failpoint build, the first hit of any failpoint reads
 * BINDLOG_FAILPOINT and keeps a small table of armed names; each hit of an
 * armed name bumps its counter under a mutex and fires the action on the
 * n-th hit.  The cost of an unarmed hit is a lock and a few string compares,
 * which only test builds pay.
 */
#define _GNU_SOURCE
#include "core/failpoint.h"

#ifdef BINDLOG_FAILPOINTS

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"

#define FP_MAX 16
#define FP_NAME_MAX 64

enum fp_action { FP_KILL, FP_ABORT, FP_EIO, FP_SLEEP };

typedef struct fp_entry {
    char name[FP_NAME_MAX];
    enum fp_action action;
    unsigned long nth;    /* fire on this hit (1-based) */
    unsigned long sleep_ms;
    unsigned long hits;   /* hits so far */
} fp_entry;

static pthread_mutex_t fp_mu = PTHREAD_MUTEX_INITIALIZER;
static int fp_loaded;
static size_t fp_count;
static fp_entry fp_table[FP_MAX];
static pthread_once_t fp_once = PTHREAD_ONCE_INIT;

/* A thread of the parent (the background page walk hits "walk.step" every
 * 1,024 entries) may hold fp_mu at the fork: the child, which has only
 * the forking thread, would wait for it forever at its first failpoint.
 * The child starts with a fresh lock, as the store registry does; the
 * table itself is only counters. */
static void fp_after_fork(void) { pthread_mutex_init(&fp_mu, NULL); }
static void fp_register(void) { (void)pthread_atfork(NULL, NULL, fp_after_fork); }

static void fp_lock(void)
{
    (void)pthread_once(&fp_once, fp_register);
    pthread_mutex_lock(&fp_mu);
}

/* Parse one "name[:action[:n]]" entry into e; 0 or -1 (malformed). */
static int parse_entry(const char *s, size_t len, fp_entry *e)
{
    char buf[256];
    char *action, *end;

    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    memset(e, 0, sizeof(*e));
    e->action = FP_KILL;
    e->nth = 1;
    action = strchr(buf, ':');
    if (action != NULL) {
        *action++ = '\0';
        char *nth = strchr(action, ':');
        if (nth != NULL) {
            *nth++ = '\0';
            e->nth = strtoul(nth, &end, 10);
            if (*nth == '\0' || *end != '\0' || e->nth == 0)
                return -1;
        }
        if (strcmp(action, "kill") == 0 || action[0] == '\0') {
            e->action = FP_KILL;
        } else if (strcmp(action, "abort") == 0) {
            e->action = FP_ABORT;
        } else if (strcmp(action, "eio") == 0) {
            e->action = FP_EIO;
        } else if (strncmp(action, "sleep=", 6) == 0) {
            e->action = FP_SLEEP;
            e->sleep_ms = strtoul(action + 6, &end, 10);
            if (action[6] == '\0' || *end != '\0')
                return -1;
        } else {
            return -1;
        }
    }
    if (buf[0] == '\0' || strlen(buf) >= sizeof(e->name))
        return -1;
    memcpy(e->name, buf, strlen(buf) + 1);
    return 0;
}

/* Read BINDLOG_FAILPOINT into the table (fp_mu held). */
static void load(void)
{
    const char *v = getenv("BINDLOG_FAILPOINT");

    fp_loaded = 1;
    fp_count = 0;
    while (v != NULL && *v != '\0' && fp_count < FP_MAX) {
        const char *comma = strchr(v, ',');
        size_t len = comma != NULL ? (size_t)(comma - v) : strlen(v);
        if (parse_entry(v, len, &fp_table[fp_count]) == 0)
            fp_count++;
        else
            (void)fprintf(stderr, "bindlog: ignoring malformed BINDLOG_FAILPOINT entry '%.*s'\n",
                    (int)len, v);
        v = comma != NULL ? comma + 1 : NULL;
    }
}

int bl_failpoint_hit(const char *name)
{
    enum fp_action action = FP_SLEEP;
    unsigned long sleep_ms = 0;
    int fire = 0;

    fp_lock();
    if (!fp_loaded)
        load();
    for (size_t i = 0; i < fp_count; i++) {
        fp_entry *e = &fp_table[i];
        if (strcmp(e->name, name) != 0)
            continue;
        /* one-shot, except sleep, which slows every hit from the n-th on */
        if (++e->hits == e->nth || (e->action == FP_SLEEP && e->hits > e->nth)) {
            fire = 1;
            action = e->action;
            sleep_ms = e->sleep_ms;
        }
        break;
    }
    pthread_mutex_unlock(&fp_mu);
    if (!fire)
        return 0;

    if (action == FP_KILL)
        (void)kill(getpid(), SIGKILL); /* cannot be caught: the process ends here */
    if (action == FP_KILL || action == FP_ABORT)
        abort();
    if (action == FP_EIO)
        return BINDLOG_EIO;
    struct timespec ts = {(time_t)(sleep_ms / 1000), (long)(sleep_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
    return 0;
}

void bl_failpoint_reset(void)
{
    fp_lock();
    fp_loaded = 0;
    fp_count = 0;
    memset(fp_table, 0, sizeof(fp_table));
    pthread_mutex_unlock(&fp_mu);
}

unsigned long bl_failpoint_hits(const char *name)
{
    unsigned long hits = 0;

    fp_lock();
    if (!fp_loaded)
        load();
    for (size_t i = 0; i < fp_count; i++)
        if (strcmp(fp_table[i].name, name) == 0)
            hits = fp_table[i].hits;
    pthread_mutex_unlock(&fp_mu);
    return hits;
}

#else

/* ISO C wants at least one declaration in a translation unit. */
typedef int bl_failpoint_unused;

#endif /* BINDLOG_FAILPOINTS */
