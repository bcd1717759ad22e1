/*
 * peer_sqlite.c -- the SQLite contender: what a careful gateway would build
 * on SQLite in WAL mode, with bindlog's schema and semantics.
 *
 * Tables mirror bindlog's: bindings (key -> session, generation, lsn, time),
 * sessions (with parent, created/ended lsn and time, end reason, origin), a
 * log with a checksum per record, an index of children by parent and a
 * history index of the log by key.  Every event is one transaction:
 *
 *   BEGIN IMMEDIATE
 *   SPLIT:  UPDATE bindings SET session = child ... WHERE key = ? AND
 *           session = parent AND generation = run_gen RETURNING generation
 *           (the compare-and-swap); on no row, read the binding to tell
 *           STALE / MOVED / ALREADY apart and roll back; else check the child
 *           is new, insert the log record and the child (origin copied from
 *           the parent when none is given) and end the parent
 *   BIND / NEW_SESSION / INVALIDATE: read the binding, apply the contract's
 *           checks in order, insert the log record, create / reopen / end
 *           sessions, upsert the binding with generation + 1
 *   ROUTE:  read the binding with its last activity, decide freshness by
 *           the idle policy; fresh: insert a ROUTE log record and set the
 *           activity; stale or unbound: a NEW_SESSION (reason idle) as above,
 *           then set the activity (bindlog_route's read-decide-update)
 *   COMMIT (or ROLLBACK for a refused event, which writes nothing)
 *
 * The LSN is max(lsn) + 1 inside the write transaction (dense), and the
 * record's checksum is XXH3-64 over its fields, like bindlog's.  One
 * connection per thread, a busy timeout, and `PRAGMA synchronous` as asked.
 */
#include "bench.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

enum {
    S_BEGIN,
    S_COMMIT,
    S_ROLLBACK,
    S_GET_BINDING,
    S_GET_SESSION,
    S_HEAD,
    S_INS_LOG,
    S_PUT_BINDING,
    S_SPLIT_CAS,
    S_INS_SESSION,
    S_INS_SESSION_COPY,
    S_END_SESSION,
    S_REOPEN,
    S_INVALIDATE,
    S_GET_ROUTE,
    S_SET_ACTIVITY,
    S_COUNT
};

static const char *const sql[S_COUNT] = {
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    [S_GET_BINDING] = "SELECT session_id, generation FROM bindings WHERE key = ?1",
    [S_GET_SESSION] = "SELECT key, ended_lsn FROM sessions WHERE id = ?1",
    [S_HEAD] = "SELECT lsn, time_ms FROM log ORDER BY lsn DESC LIMIT 1",
    [S_INS_LOG] = "INSERT INTO log VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    [S_PUT_BINDING] = "INSERT INTO bindings (key, session_id, generation, lsn, updated_ms) "
                      "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(key) DO "
                      "UPDATE SET session_id = excluded.session_id, generation = "
                      "excluded.generation, lsn = excluded.lsn, updated_ms = excluded.updated_ms",
    [S_SPLIT_CAS] = "UPDATE bindings SET session_id = ?1, lsn = ?2, updated_ms = ?3 "
                    "WHERE key = ?4 AND session_id = ?5 AND (?6 IS NULL OR generation = ?6) "
                    "RETURNING generation",
    [S_INS_SESSION] = "INSERT INTO sessions VALUES (?1, ?2, ?3, ?4, ?5, 0, 0, '', ?6)",
    [S_INS_SESSION_COPY] = "INSERT INTO sessions SELECT ?1, ?2, ?3, ?4, ?5, 0, 0, '', origin "
                           "FROM sessions WHERE id = ?3",
    [S_END_SESSION] = "UPDATE sessions SET ended_lsn = ?2, ended_ms = ?3, end_reason = ?4 "
                      "WHERE id = ?1",
    [S_REOPEN] = "UPDATE sessions SET key = ?2, ended_lsn = 0, ended_ms = 0, end_reason = '', "
                 "origin = coalesce(?3, origin) WHERE id = ?1",
    [S_INVALIDATE] = "UPDATE bindings SET generation = generation + 1, lsn = ?2, updated_ms = ?3 "
                     "WHERE key = ?1",
    [S_GET_ROUTE] = "SELECT session_id, generation, max(updated_ms, last_activity_ms) "
                    "FROM bindings WHERE key = ?1",
    [S_SET_ACTIVITY] = "UPDATE bindings SET last_activity_ms = max(last_activity_ms, ?2) "
                       "WHERE key = ?1",
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS bindings (key TEXT PRIMARY KEY, session_id TEXT NOT NULL, "
    "  generation INTEGER NOT NULL, lsn INTEGER NOT NULL, updated_ms INTEGER NOT NULL, "
    "  last_activity_ms INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, key TEXT NOT NULL, "
    "  parent_id TEXT NOT NULL, created_lsn INTEGER NOT NULL, created_ms INTEGER NOT NULL, "
    "  ended_lsn INTEGER NOT NULL, ended_ms INTEGER NOT NULL, end_reason TEXT NOT NULL, "
    "  origin BLOB) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS sessions_children ON sessions (parent_id, id);"
    "CREATE TABLE IF NOT EXISTS log (lsn INTEGER PRIMARY KEY, type INTEGER NOT NULL, "
    "  time_ms INTEGER NOT NULL, key TEXT NOT NULL, session_id TEXT NOT NULL, "
    "  other_id TEXT NOT NULL, reason TEXT NOT NULL, generation INTEGER NOT NULL, "
    "  origin BLOB, checksum INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS log_history ON log (key, lsn);";

typedef struct sq_conn {
    sqlite3 *db;
    int busy_ms;    /* give up waiting for the write lock after this long */
    sqlite3_stmt *st[S_COUNT];
    int outer;      /* inside a caller's transaction: no BEGIN/COMMIT per event */
    int64_t last_ms;
} sq_conn;

static void sq_conn_close(sq_conn *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < S_COUNT; i++)
        sqlite3_finalize(c->st[i]);
    sqlite3_close(c->db);
    free(c);
}

/*
 * SQLite's own busy-timeout schedule (sqliteDefaultBusyCallback: sleep 1, 2,
 * 5, 10, 15, 20, 25, 25, 25, 50, 50, then 100 ms until the timeout), with
 * one addition: once the measurement's deadline has passed, stop waiting, so
 * that 64 threads queued on the write lock do not stretch the run by seconds.
 * The event then returns BENCH_CANCELLED and is not counted.
 */
static int busy_wait(void *ctx, int count)
{
    static const int delays[] = {1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100};
    static const int totals[] = {0, 1, 3, 8, 18, 33, 53, 78, 103, 128, 178, 228};
    const int n = (int)(sizeof delays / sizeof delays[0]);
    const sq_conn *c = ctx;
    int delay, prior;

    if (bench_deadline_ns != 0 && now_ns() >= bench_deadline_ns)
        return 0;
    if (count < n) {
        delay = delays[count];
        prior = totals[count];
    } else {
        delay = delays[n - 1];
        prior = totals[n - 1] + delay * (count - (n - 1));
    }
    if (prior + delay > c->busy_ms) {
        delay = c->busy_ms - prior;
        if (delay <= 0)
            return 0;
    }
    sqlite3_sleep(delay);
    return 1;
}

static sq_conn *sq_conn_open(const char *path, const char *sync, int busy_ms)
{
    sq_conn *c = calloc(1, sizeof(*c));
    char pragma[128];
    if (c == NULL)
        return NULL;
    if (sqlite3_open_v2(path, &c->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK)
        goto fail;
    c->busy_ms = busy_ms;
    sqlite3_busy_handler(c->db, busy_wait, c);
    snprintf(pragma, sizeof pragma, "PRAGMA journal_mode = WAL; PRAGMA synchronous = %s;", sync);
    if (sqlite3_exec(c->db, pragma, NULL, NULL, NULL) != SQLITE_OK)
        goto fail;
    if (sqlite3_exec(c->db, schema, NULL, NULL, NULL) != SQLITE_OK)
        goto fail;
    for (int i = 0; i < S_COUNT; i++)
        if (sqlite3_prepare_v3(c->db, sql[i], -1, SQLITE_PREPARE_PERSISTENT, &c->st[i], NULL) !=
            SQLITE_OK)
            goto fail;
    return c;
fail:
    fprintf(stderr, "bindlog-bench: sqlite %s: %s\n", path,
            c->db ? sqlite3_errmsg(c->db) : "cannot open");
    sq_conn_close(c);
    return NULL;
}

/* Run a statement with no result rows; SQLITE_DONE -> 0. */
static int run(sq_conn *c, int i)
{
    sqlite3_stmt *s = c->st[i];
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc == SQLITE_DONE ? 0 : rc;
}

static void btext(sqlite3_stmt *s, int i, const char *t)
{
    sqlite3_bind_text(s, i, t, -1, SQLITE_STATIC);
}

/* The key's binding: 1 found (sid copied, gen set), 0 none, <0 error. */
static int get_binding(sq_conn *c, const char *key, char *sid, size_t cap, int64_t *gen)
{
    sqlite3_stmt *s = c->st[S_GET_BINDING];
    btext(s, 1, key);
    int rc = sqlite3_step(s);
    sid[0] = '\0';
    *gen = 0;
    if (rc == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(s, 0);
        snprintf(sid, cap, "%s", t ? (const char *)t : "");
        *gen = sqlite3_column_int64(s, 1);
        rc = 1;
    } else {
        rc = rc == SQLITE_DONE ? 0 : -1;
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

/* A session: 1 exists (key, ended_lsn set), 0 none, <0 error. */
static int get_session(sq_conn *c, const char *id, char *key, size_t cap, int64_t *ended)
{
    sqlite3_stmt *s = c->st[S_GET_SESSION];
    btext(s, 1, id);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(s, 0);
        snprintf(key, cap, "%s", t ? (const char *)t : "");
        *ended = sqlite3_column_int64(s, 1);
        rc = 1;
    } else {
        rc = rc == SQLITE_DONE ? 0 : -1;
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

/* The next LSN and the record time (never before the previous record's). */
static int next_lsn(sq_conn *c, int64_t *lsn, int64_t *t)
{
    sqlite3_stmt *s = c->st[S_HEAD];
    int rc = sqlite3_step(s);
    *lsn = 1;
    *t = wall_ms();
    if (rc == SQLITE_ROW) {
        *lsn = sqlite3_column_int64(s, 0) + 1;
        int64_t prev = sqlite3_column_int64(s, 1);
        if (*t < prev)
            *t = prev;
        rc = SQLITE_DONE;
    }
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? 0 : -1;
}

/* Insert the log record, checksummed like bindlog's. */
static int ins_log(sq_conn *c, int64_t lsn, int type, int64_t t, const char *key, const char *sid,
                   const char *other, const char *reason, int64_t gen, const void *org,
                   size_t olen)
{
    unsigned char buf[1024 + BINDLOG_ORIGIN_MAX];
    size_t n = 0, kl = strlen(key), sl = strlen(sid), ol = strlen(other), rl = strlen(reason);
    if (kl + sl + ol + rl + olen + 64 > sizeof buf)
        return -1;
    memcpy(buf + n, &lsn, 8), n += 8;
    buf[n++] = (unsigned char)type;
    memcpy(buf + n, &t, 8), n += 8;
    memcpy(buf + n, &gen, 8), n += 8;
    memcpy(buf + n, key, kl), n += kl;
    buf[n++] = 0;
    memcpy(buf + n, sid, sl), n += sl;
    buf[n++] = 0;
    memcpy(buf + n, other, ol), n += ol;
    buf[n++] = 0;
    memcpy(buf + n, reason, rl), n += rl;
    buf[n++] = 0;
    if (olen)
        memcpy(buf + n, org, olen), n += olen;
    sqlite3_stmt *s = c->st[S_INS_LOG];
    sqlite3_bind_int64(s, 1, lsn);
    sqlite3_bind_int(s, 2, type);
    sqlite3_bind_int64(s, 3, t);
    btext(s, 4, key);
    btext(s, 5, sid);
    btext(s, 6, other);
    btext(s, 7, reason);
    sqlite3_bind_int64(s, 8, gen);
    if (org != NULL)
        sqlite3_bind_blob(s, 9, org, (int)olen, SQLITE_STATIC);
    sqlite3_bind_int64(s, 10, (int64_t)XXH3_64bits(buf, n));
    return run(c, S_INS_LOG);
}

static int ins_session(sq_conn *c, const char *id, const char *key, const char *parent,
                       int64_t lsn, int64_t t, const void *org, size_t olen, int copy_origin)
{
    sqlite3_stmt *s = c->st[copy_origin ? S_INS_SESSION_COPY : S_INS_SESSION];
    btext(s, 1, id);
    btext(s, 2, key);
    btext(s, 3, parent);
    sqlite3_bind_int64(s, 4, lsn);
    sqlite3_bind_int64(s, 5, t);
    if (!copy_origin && org != NULL)
        sqlite3_bind_blob(s, 6, org, (int)olen, SQLITE_STATIC);
    return run(c, copy_origin ? S_INS_SESSION_COPY : S_INS_SESSION);
}

static int end_session(sq_conn *c, const char *id, int64_t lsn, int64_t t, const char *reason)
{
    sqlite3_stmt *s = c->st[S_END_SESSION];
    btext(s, 1, id);
    sqlite3_bind_int64(s, 2, lsn);
    sqlite3_bind_int64(s, 3, t);
    btext(s, 4, reason);
    return run(c, S_END_SESSION);
}

static int put_binding(sq_conn *c, const char *key, const char *sid, int64_t gen, int64_t lsn,
                       int64_t t)
{
    sqlite3_stmt *s = c->st[S_PUT_BINDING];
    btext(s, 1, key);
    btext(s, 2, sid);
    sqlite3_bind_int64(s, 3, gen);
    sqlite3_bind_int64(s, 4, lsn);
    sqlite3_bind_int64(s, 5, t);
    return run(c, S_PUT_BINDING);
}

/* The split's compare-and-swap.  1 swapped (*gen_after set), 0 no row, <0 error. */
static int split_cas(sq_conn *c, const char *key, const char *parent, const char *child,
                     uint64_t run_gen, int64_t lsn, int64_t t, int64_t *gen_after)
{
    sqlite3_stmt *s = c->st[S_SPLIT_CAS];
    btext(s, 1, child);
    sqlite3_bind_int64(s, 2, lsn);
    sqlite3_bind_int64(s, 3, t);
    btext(s, 4, key);
    btext(s, 5, parent);
    if (run_gen != BINDLOG_ANY_GENERATION)
        sqlite3_bind_int64(s, 6, (int64_t)run_gen);
    int rc = sqlite3_step(s), out;
    if (rc == SQLITE_ROW) {
        *gen_after = sqlite3_column_int64(s, 0);
        rc = sqlite3_step(s);
        out = rc == SQLITE_DONE ? 1 : -1;
    } else {
        out = rc == SQLITE_DONE ? 0 : -1;
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return out;
}

static int sq_split(sq_conn *c, const char *key, const char *parent, const char *child,
                    uint64_t run_gen, const void *org, size_t olen, int has_origin)
{
    int64_t lsn, t, gen;
    char cur[BINDLOG_ID_MAX + 1], skey[BINDLOG_KEY_MAX + 1];
    int rc;

    if (next_lsn(c, &lsn, &t) != 0)
        return BINDLOG_EIO;
    rc = split_cas(c, key, parent, child, run_gen, lsn, t, &gen);
    if (rc < 0)
        return BINDLOG_EIO;
    if (rc == 0) {
        /* tell the refusals apart, in the contract's order */
        rc = get_binding(c, key, cur, sizeof cur, &gen);
        if (rc < 0)
            return BINDLOG_EIO;
        if (rc == 0 || cur[0] == '\0')
            return BINDLOG_ENOTFOUND;
        if (strcmp(cur, child) == 0)
            return BINDLOG_ALREADY;
        if (run_gen != BINDLOG_ANY_GENERATION && (int64_t)run_gen != gen)
            return BINDLOG_STALE;
        return BINDLOG_MOVED;
    }
    int64_t ended;
    rc = get_session(c, child, skey, sizeof skey, &ended);
    if (rc != 0)
        return rc > 0 ? BINDLOG_EEXIST : BINDLOG_EIO;
    if (ins_log(c, lsn, BINDLOG_EVENT_SPLIT, t, key, child, parent, "", gen, org, olen) ||
        ins_session(c, child, key, parent, lsn, t, org, olen, !has_origin) ||
        end_session(c, parent, lsn, t, "compression"))
        return BINDLOG_EIO;
    return BINDLOG_APPLIED;
}

static int sq_bind(sq_conn *c, const char *key, const char *sid, const char *expect,
                   const char *reason, const void *org, size_t olen)
{
    char cur[BINDLOG_ID_MAX + 1], skey[BINDLOG_KEY_MAX + 1];
    int64_t gen, ended = 0, lsn, t;
    int rc = get_binding(c, key, cur, sizeof cur, &gen), exists;

    if (rc < 0)
        return BINDLOG_EIO;
    if (strcmp(cur, sid) == 0)
        return BINDLOG_ALREADY;
    if (expect != NULL && strcmp(expect, cur) != 0)
        return BINDLOG_MOVED;
    if ((exists = get_session(c, sid, skey, sizeof skey, &ended)) < 0)
        return BINDLOG_EIO;
    if (exists && ended == 0 && strcmp(skey, key) != 0)
        return BINDLOG_ECONFLICT;
    if (reason == NULL)
        reason = "switch";
    if (next_lsn(c, &lsn, &t) != 0 ||
        ins_log(c, lsn, BINDLOG_EVENT_BIND, t, key, sid, cur, reason, gen + 1, org, olen))
        return BINDLOG_EIO;
    if (exists) {
        sqlite3_stmt *s = c->st[S_REOPEN];
        btext(s, 1, sid);
        btext(s, 2, key);
        if (org != NULL)
            sqlite3_bind_blob(s, 3, org, (int)olen, SQLITE_STATIC);
        rc = run(c, S_REOPEN);
    } else {
        rc = ins_session(c, sid, key, "", lsn, t, org, olen, 0);
    }
    if (rc == 0 && cur[0] != '\0')
        rc = end_session(c, cur, lsn, t, reason);
    if (rc == 0)
        rc = put_binding(c, key, sid, gen + 1, lsn, t);
    return rc == 0 ? BINDLOG_APPLIED : BINDLOG_EIO;
}

static int sq_new(sq_conn *c, const char *key, const char *sid, const char *reason,
                  const void *org, size_t olen)
{
    char cur[BINDLOG_ID_MAX + 1], skey[BINDLOG_KEY_MAX + 1];
    int64_t gen, ended, lsn, t;
    int rc = get_binding(c, key, cur, sizeof cur, &gen);

    if (rc < 0)
        return BINDLOG_EIO;
    if (strcmp(cur, sid) == 0)
        return BINDLOG_ALREADY;
    if ((rc = get_session(c, sid, skey, sizeof skey, &ended)) != 0)
        return rc > 0 ? BINDLOG_EEXIST : BINDLOG_EIO;
    if (reason == NULL)
        reason = "new_session";
    if (next_lsn(c, &lsn, &t) != 0 ||
        ins_log(c, lsn, BINDLOG_EVENT_NEW_SESSION, t, key, sid, cur, reason, gen + 1, org, olen) ||
        ins_session(c, sid, key, cur, lsn, t, org, olen, 0) ||
        (cur[0] != '\0' && end_session(c, cur, lsn, t, reason)) ||
        put_binding(c, key, sid, gen + 1, lsn, t))
        return BINDLOG_EIO;
    return BINDLOG_APPLIED;
}

static int sq_invalidate(sq_conn *c, const char *key, const char *reason)
{
    char cur[BINDLOG_ID_MAX + 1];
    int64_t gen, lsn, t;
    int rc = get_binding(c, key, cur, sizeof cur, &gen);

    if (rc < 0)
        return BINDLOG_EIO;
    if (rc == 0 || cur[0] == '\0')
        return BINDLOG_ENOTFOUND;
    if (reason == NULL)
        reason = "invalidate";
    if (next_lsn(c, &lsn, &t) != 0 ||
        ins_log(c, lsn, BINDLOG_EVENT_INVALIDATE, t, key, cur, "", reason, gen + 1, NULL, 0))
        return BINDLOG_EIO;
    sqlite3_stmt *s = c->st[S_INVALIDATE];
    btext(s, 1, key);
    sqlite3_bind_int64(s, 2, lsn);
    sqlite3_bind_int64(s, 3, t);
    return run(c, S_INVALIDATE) == 0 ? BINDLOG_APPLIED : BINDLOG_EIO;
}

/* bindlog_route's read-decide-update, in the caller's transaction. */
static int sq_route(sq_conn *c, const char *key, const char *fresh, const void *org, size_t olen)
{
    char cur[BINDLOG_ID_MAX + 1] = "";
    int64_t gen = 0, active = 0, lsn, t;
    sqlite3_stmt *s = c->st[S_GET_ROUTE];
    int rc;

    btext(s, 1, key);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const unsigned char *x = sqlite3_column_text(s, 0);
        snprintf(cur, sizeof cur, "%s", x ? (const char *)x : "");
        gen = sqlite3_column_int64(s, 1);
        active = sqlite3_column_int64(s, 2);
        rc = SQLITE_DONE;
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (rc != SQLITE_DONE || next_lsn(c, &lsn, &t) != 0)
        return BINDLOG_EIO;
    int bound = cur[0] != '\0';
    if (bound && (strcmp(cur, fresh) == 0 || t - active <= WL_ROUTE_IDLE_MS)) {
        if (ins_log(c, lsn, BINDLOG_EVENT_ROUTE, t, key, "", "", "", gen, NULL, 0))
            return BINDLOG_EIO;
        rc = BINDLOG_ROUTED;
    } else {
        rc = sq_new(c, key, fresh, bound ? "idle" : "new_session", org, olen);
        if (rc != BINDLOG_APPLIED)
            return rc;
        rc = bound ? BINDLOG_RESET : BINDLOG_CREATED;
    }
    s = c->st[S_SET_ACTIVITY];
    btext(s, 1, key);
    sqlite3_bind_int64(s, 2, t);
    return run(c, S_SET_ACTIVITY) == 0 ? rc : BINDLOG_EIO;
}

static int sq_apply(void *tctx, const workload *w, const wl_event *e)
{
    sq_conn *c = tctx;
    const char *key = w->keys[e->key];
    const void *org = e->origin ? w->origins[e->key] : NULL;
    size_t olen = e->origin ? w->origin_len[e->key] : 0;
    int rc;

    if (!c->outer && run(c, S_BEGIN) != 0) {
        if (bench_deadline_ns != 0 && now_ns() >= bench_deadline_ns)
            return BENCH_CANCELLED; /* gave up waiting at the deadline */
        return BINDLOG_EBUSY;       /* the busy timeout expired */
    }
    switch (e->type) {
    case BINDLOG_EVENT_SPLIT:
        rc = sq_split(c, key, wl_id(w, e->other), wl_id(w, e->sid), e->gen, org, olen, e->origin);
        break;
    case BINDLOG_EVENT_BIND:
        rc = sq_bind(c, key, wl_id(w, e->sid), wl_id(w, e->other), e->reason, org, olen);
        break;
    case BINDLOG_EVENT_NEW_SESSION:
        rc = sq_new(c, key, wl_id(w, e->sid), e->reason, org, olen);
        break;
    case BINDLOG_EVENT_INVALIDATE:
        rc = sq_invalidate(c, key, e->reason);
        break;
    case BINDLOG_EVENT_ROUTE:
        rc = sq_route(c, key, wl_id(w, e->sid), org, olen);
        break;
    default:
        rc = BINDLOG_EINVAL;
        break;
    }
    if (c->outer)
        return rc;
    if (rc == BINDLOG_APPLIED || rc == BINDLOG_ROUTED || rc == BINDLOG_CREATED ||
        rc == BINDLOG_RESET) {
        if (run(c, S_COMMIT) != 0) {
            run(c, S_ROLLBACK);
            return BINDLOG_EIO;
        }
    } else {
        run(c, S_ROLLBACK); /* a refused event writes nothing */
    }
    return rc;
}

static void *sq_open_thread(void *shared, int tid)
{
    const sq_shared *sh = shared;
    (void)tid;
    return sq_conn_open(sh->path, sh->sync, sh->busy_timeout_ms);
}

static void sq_close_thread(void *tctx) { sq_conn_close(tctx); }

const contender sq_contender = {"sqlite", sq_open_thread, sq_apply, sq_close_thread};

int sq_setup(const char *path, const workload *w)
{
    sq_conn *c = sq_conn_open(path, "OFF", 10000);
    int rc = 0;
    if (c == NULL)
        return -1;
    if (sqlite3_exec(c->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
        sq_conn_close(c);
        return -1;
    }
    c->outer = 1;
    for (uint32_t k = 0; k < w->nkeys && rc == 0; k++)
        if (sq_apply(c, w, &w->setup[k]) != BINDLOG_APPLIED)
            rc = -1;
    if (sqlite3_exec(c->db, rc == 0 ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK)
        rc = -1;
    /* start the measured part with an empty WAL */
    if (rc == 0 && sqlite3_exec(c->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL))
        rc = -1;
    sq_conn_close(c);
    return rc;
}
