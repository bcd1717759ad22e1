/*
 * gateway_turn.c -- one chat's turns on bindlog, as a gateway would run them.
 *
 *   gateway_turn [STORE_DIR]
 *
 * With no STORE_DIR it works in a new directory under $TMPDIR (or /tmp) and
 * removes it at the end; name one to keep the store and look at it with
 * `bindlog -d STORE_DIR dump --log`.
 *
 * A gateway routes a chat to a session key and the key to its current
 * session.  A *run* (one turn of the agent) remembers (session, generation)
 * when it starts.  This program plays the four moments every gateway meets:
 *
 *   1. first contact: bind the key, but only if it is still unbound;
 *   2. a run compresses its context and continues in a child session:
 *      the split is a compare-and-swap on (generation, current session);
 *   3. the user types /stop while a second run is compressing: the late
 *      split comes back STALE and writes nothing, so the stale run cannot
 *      move the key;
 *   4. the change feed: everything that moved, read back from the log, and
 *      bindlog_wait() telling a follower that something new is there;
 *   5. a message after a day of silence: bindlog_route() decides, under a
 *      30-minute idle policy, that the session is stale, starts a new one
 *      (a RESET, logged like /new) and routes this very message to it.
 *
 * Every outcome is checked against what the rules predict: the program
 * exits 1 on any surprise, so CI runs it as a test.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#include <bindlog.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int surprises;

static void expect(const char *what, int got, int want)
{
    int ok = got == want;
    if (!ok)
        surprises++;
    printf("  %s %-44s %s", ok ? "ok  " : "FAIL", what, bindlog_code_name(got));
    if (!ok)
        printf(" (expected %s: %s)", bindlog_code_name(want), bindlog_last_error());
    printf("\n");
}

static void check(const char *what, int ok)
{
    if (!ok)
        surprises++;
    printf("  %s %s\n", ok ? "ok  " : "FAIL", what);
}

/* Where a run stands: the session it works in and the generation it
 * started at. */
typedef struct run {
    char session[BINDLOG_ID_MAX + 1];
    uint64_t generation;
} run;

static int run_start(bindlog *s, const char *key, run *out)
{
    bindlog_binding b;
    int rc = bindlog_get(s, key, &b);
    if (rc != 0)
        return rc;
    snprintf(out->session, sizeof out->session, "%s", b.session_id);
    out->generation = b.generation;
    return 0;
}

/* The run compressed its context: publish the split.  The result says
 * whether the run may go on, and in which session. */
static int run_compress(bindlog *s, const char *key, run *r, const char *child)
{
    static const char origin[] = "{\"peer\":\"telegram\",\"chat\":12345,\"via\":\"compression\"}";
    bindlog_result res;
    int rc = bindlog_split(s, key, r->session, child, r->generation, origin, sizeof origin - 1,
                           &res);
    /* ALREADY is a retry of a split that went in; it is the run's to go on
     * with only if nothing bumped the generation since the run started. */
    if ((rc == BINDLOG_APPLIED || rc == BINDLOG_ALREADY) && res.generation == r->generation)
        snprintf(r->session, sizeof r->session, "%s", child);
    return rc;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int main(int argc, char **argv)
{
    char tmp[4000] = "", dir[4096]; /* dir holds tmp and "/store" */
    if (argc > 1) {
        snprintf(dir, sizeof dir, "%s", argv[1]);
    } else {
        const char *base = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/bindlog-turn-XXXXXX", base && base[0] ? base : "/tmp");
        if (mkdtemp(tmp) == NULL) {
            perror(tmp);
            return 2;
        }
        snprintf(dir, sizeof dir, "%s/store", tmp);
    }

    bindlog *s;
    int rc = bindlog_open(&s, dir, NULL); /* creates the store; FULL durability */
    if (rc != 0) {
        fprintf(stderr, "open %s: %s\n", dir, bindlog_last_error());
        return 2;
    }
    const char *key = "agent:main:telegram:dm:12345";
    bindlog_result res;
    uint64_t head = 0;
    bindlog_stats st;
    if (bindlog_stats_get(s, &st) == 0)
        head = st.head_lsn;

    printf("first contact\n");
    rc = bindlog_bind(s, key, "sess-A", "", "first contact", NULL, 0, &res);
    expect("bind A (only if unbound)", rc, BINDLOG_APPLIED);
    rc = bindlog_bind(s, key, "sess-B", "", "first contact", NULL, 0, &res);
    expect("a racing first contact binds nothing", rc, BINDLOG_MOVED);

    printf("a turn compresses and continues in a child\n");
    run r1;
    if (run_start(s, key, &r1) != 0)
        return 2;
    run retry = r1; /* as the run stood before it compressed */
    expect("split A -> C", run_compress(s, key, &r1, "sess-C"), BINDLOG_APPLIED);
    /* a gateway that lost the reply (a timeout) publishes again */
    expect("the retried split is recognised", run_compress(s, key, &retry, "sess-C"),
           BINDLOG_ALREADY);
    check("... and the retrying run goes on in the child", strcmp(retry.session, "sess-C") == 0);

    printf("/stop while the next turn is compressing\n");
    run r2;
    if (run_start(s, key, &r2) != 0)
        return 2;
    rc = bindlog_invalidate(s, key, "/stop", &res);
    expect("/stop bumps the generation", rc, BINDLOG_APPLIED);
    expect("the stopped run's split is refused", run_compress(s, key, &r2, "sess-D"),
           BINDLOG_STALE);
    bindlog_session sess;
    expect("... and left no session behind", bindlog_session_get(s, "sess-D", &sess, NULL, 0),
           BINDLOG_ENOTFOUND);
    bindlog_binding b;
    rc = bindlog_get(s, key, &b);
    check("the key still routes to the child", rc == 0 && strcmp(b.session_id, "sess-C") == 0);

    printf("the change feed\n");
    uint64_t now = 0;
    rc = bindlog_wait(s, head, 0, &now);
    check("bindlog_wait sees the new records", rc == 0 && now > head);
    bindlog_iter *it;
    int n = 0;
    if (bindlog_log_iter(s, head + 1, UINT64_MAX, &it) == 0) {
        bindlog_record rec;
        while (bindlog_iter_next_record(it, &rec) == 1) {
            printf("    lsn %-3llu %-11s %s -> %s (generation %llu, %s)\n",
                   (unsigned long long)rec.lsn, bindlog_event_name(rec.type), rec.key,
                   rec.session_id, (unsigned long long)rec.generation, rec.reason);
            n++;
        }
        bindlog_iter_close(it);
    }
    check("three records: bind, split, invalidate", n == 3);

    printf("a message after a day of silence (idle reset after 30 minutes)\n");
    bindlog_policy idle = {BINDLOG_RESET_IDLE, 30 * 60 * 1000, 0};
    bindlog_route_result rr;
    int64_t later = b.updated_ms + 24 * 3600 * 1000LL;
    rc = bindlog_route(s, key, later, &idle, "sess-E", NULL, 0, &rr);
    expect("route finds the session stale", rc, BINDLOG_RESET);
    check("... and this message goes to the new session",
          rc == BINDLOG_RESET && strcmp(rr.session_id, "sess-E") == 0 &&
              strcmp(rr.previous_id, "sess-C") == 0);
    rc = bindlog_route(s, key, later + 60 * 1000, &idle, "sess-F", NULL, 0, &rr);
    expect("the next message, a minute later, stays", rc, BINDLOG_ROUTED);

    bindlog_close(s);
    printf("%s: %d surprise(s)\n", surprises ? "FAILED" : "ok", surprises);
    if (tmp[0] != '\0')
        nftw(tmp, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    else
        printf("the store is in %s: try bindlog -d %s dump --log\n", dir, dir);
    return surprises ? 1 : 0;
}
