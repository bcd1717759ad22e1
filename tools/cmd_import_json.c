/*
 * cmd_import_json.c -- import-json: move a gateway's sessions.json in.
 *
 *   bindlog import-json --format openclaw|hermes FILE [--dry-run] [--json]
 *
 * Two gateways keep their routing table as one JSON object, key -> entry:
 *
 *   openclaw  { "<key>": { "sessionId": "...", "updatedAt": <ms or ISO>, ... }, ... }
 *   hermes    { "<key>": { "session_key": "<key>", "session_id": "...",
 *                          "created_at": "...", "updated_at": "...",
 *                          "origin": {...}, ... },
 *               ..., "_README": "..." }
 *
 * Each entry becomes one BIND (expect unbound) through
 * bindlog_import_entries(), ordered by the entry's update time and logged
 * with it, which also becomes the key's last activity (so bindlog_route's
 * idle and daily resets judge an imported session by when the gateway last
 * used it, never by the import), the entry itself (compact JSON) as the
 * session's origin.  The
 * file is parsed by tools/json.c (strict RFC 8259, depth and size limits):
 * libbindlog reads no JSON.  What cannot go in is reported by key and
 * skipped, never half-applied:
 *
 *   malformed  the entry is not an object, or lacks its session id or time
 *   invalid    a key, session id, origin or time the contract refuses
 *   moved      the key is bound to another session in the store already
 *   conflict   the session is the live binding of another key (two keys
 *              naming one session: the entry with the earlier time wins)
 *
 * Members whose name starts with '_' and whose value is not an object are
 * notes for humans (hermes' "_README"), counted as ignored.  Times: epoch
 * milliseconds (an integer), or ISO-8601 ("2026-01-01T10:00:00.5Z",
 * "+02:00" offsets; without an offset, the machine's local time zone, as
 * Python's datetime.now().isoformat() wrote it).  --dry-run decides every
 * entry against the store (read-only) and the file without writing.
 * Exit 0 when every entry went in or was already there, 1 when any was
 * skipped, 3 when the file or the store could not be read.
 */
#define _GNU_SOURCE
#include "cli.h"
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { OPT_JSON = 1, OPT_FORMAT, OPT_DRY_RUN };
enum { FMT_OPENCLAW = 1, FMT_HERMES };

/* What became of an entry. */
enum {
    E_APPLIED,
    E_ALREADY,
    E_MOVED,
    E_CONFLICT,
    E_INVALID,
    E_MALFORMED,
    E_IGNORED,
    E_NSTATES
};
static const char *const state_names[E_NSTATES] = {
    "applied", "already", "moved", "conflict", "invalid", "malformed", "ignored",
};

/* Largest file read (it is parsed in memory) and deepest nesting. */
#define MAX_FILE ((size_t)256 << 20)
#define MAX_DEPTH 64
/* 9999-12-31T23:59:59.999Z: later times are refused as nonsense. */
#define MAX_TIME_MS 253402300799999LL

typedef struct entry {
    const json_value *v; /* the member */
    char *key, *sid;     /* NUL-terminated copies (key may be cut at a NUL: see bad) */
    size_t key_len, sid_len;
    char *origin;        /* the entry as compact JSON */
    size_t origin_len;
    int64_t time_ms;
    int state;
    char why[BINDLOG_KEY_MAX + 2 * BINDLOG_ID_MAX + 100]; /* for skipped entries */
    bindlog_result res;
} entry;

/* ---- reading the file ------------------------------------------------------ */

static int read_file(cli *c, const char *path, char **buf, size_t *len)
{
    int fd, from_stdin = strcmp(path, "-") == 0;
    struct stat st;
    size_t cap, n = 0;
    char *b;

    if (from_stdin) {
        if (isatty(STDIN_FILENO))
            return cli_usage_error(c, "refusing to read JSON from a terminal: give FILE or "
                                      "redirect stdin");
        fd = STDIN_FILENO;
    } else if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        fprintf(stderr, "bindlog import-json: cannot open '");
        cli_put_escaped(stderr, path, strlen(path));
        fprintf(stderr, "': %s\n", strerror(errno));
        return CLI_STORE;
    }
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        cli_warn(c, "'%s' is a directory, not a JSON file", path);
        close(fd);
        return CLI_STORE;
    }
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > MAX_FILE) {
        cli_warn(c, "'%s' is %llu bytes, over import-json's limit of %zu MiB; nothing imported",
                 path, (unsigned long long)st.st_size, MAX_FILE >> 20);
        if (!from_stdin)
            close(fd);
        return CLI_STORE;
    }
    cap = S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size + 1 : 1 << 16;
    if ((b = malloc(cap)) == NULL) {
        if (!from_stdin)
            close(fd);
        return cli_lib_error(c, BINDLOG_ENOMEM, "cannot read '%s'", path);
    }
    for (;;) {
        if (n == cap) {
            size_t ncap = cap * 2;
            char *nb = n > MAX_FILE ? NULL : realloc(b, ncap);
            if (nb == NULL) {
                free(b);
                if (!from_stdin)
                    close(fd);
                if (n > MAX_FILE) {
                    cli_warn(c, "'%s' is over import-json's limit of %zu MiB; nothing imported",
                             path, MAX_FILE >> 20);
                    return CLI_STORE;
                }
                return cli_lib_error(c, BINDLOG_ENOMEM, "cannot read '%s'", path);
            }
            b = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int err = errno;
            free(b);
            if (!from_stdin)
                close(fd);
            cli_warn(c, "cannot read '%s': %s", path, strerror(err));
            return CLI_STORE;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (!from_stdin)
        close(fd);
    if (n > MAX_FILE) {
        free(b);
        cli_warn(c, "'%s' is over import-json's limit of %zu MiB; nothing imported", path,
                 MAX_FILE >> 20);
        return CLI_STORE;
    }
    *buf = b;
    *len = n;
    return 0;
}

/* ---- times ------------------------------------------------------------------ */

static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static int num(const char *s, size_t *i, size_t len, int n, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < n; k++, (*i)++) {
        if (*i >= len || s[*i] < '0' || s[*i] > '9')
            return -1;
        v = v * 10 + (unsigned)(s[*i] - '0');
    }
    *out = v;
    return 0;
}

/* An ISO-8601 date and time, into ms since the epoch; -1 if it is not one. */
static int parse_iso(const char *s, size_t len, int64_t *ms)
{
    static const unsigned mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    unsigned y, mo, d, hh, mi, ss, frac = 0, oh = 0, om = 0;
    size_t i = 0;
    int sign = 0, have_zone = 0;

    if (num(s, &i, len, 4, &y) || i >= len || s[i++] != '-' || num(s, &i, len, 2, &mo) ||
        i >= len || s[i++] != '-' || num(s, &i, len, 2, &d) || i >= len ||
        (s[i] != 'T' && s[i] != 't' && s[i] != ' '))
        return -1;
    i++;
    if (num(s, &i, len, 2, &hh) || i >= len || s[i++] != ':' || num(s, &i, len, 2, &mi) ||
        i >= len || s[i++] != ':' || num(s, &i, len, 2, &ss))
        return -1;
    if (i < len && (s[i] == '.' || s[i] == ',')) {
        int n = 0;
        i++;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            if (n < 3)
                frac = frac * 10 + (unsigned)(s[i] - '0');
            n++;
            i++;
        }
        if (n == 0 || n > 9)
            return -1;
        for (; n < 3; n++)
            frac *= 10;
    }
    if (i < len && (s[i] == 'Z' || s[i] == 'z')) {
        have_zone = 1;
        i++;
    } else if (i < len && (s[i] == '+' || s[i] == '-')) {
        sign = s[i++] == '-' ? -1 : 1;
        if (num(s, &i, len, 2, &oh))
            return -1;
        if (i < len && s[i] == ':')
            i++;
        if (num(s, &i, len, 2, &om) || oh > 23 || om > 59)
            return -1;
        have_zone = 1;
    }
    if (i != len)
        return -1;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] + (mo == 2 && leap) || hh > 23 ||
        mi > 59 || ss > 60)
        return -1;
    if (ss == 60)
        ss = 59; /* a leap second: the last millisecond-exact moment before it */
    if (!have_zone) {
        /* No offset: local time, as datetime.now().isoformat() writes it. */
        struct tm tm = {0};
        tm.tm_year = (int)y - 1900;
        tm.tm_mon = (int)mo - 1;
        tm.tm_mday = (int)d;
        tm.tm_hour = (int)hh;
        tm.tm_min = (int)mi;
        tm.tm_sec = (int)ss;
        tm.tm_isdst = -1;
        errno = 0;
        time_t t = mktime(&tm);
        if (t == (time_t)-1 && errno != 0)
            return -1;
        *ms = (int64_t)t * 1000 + frac;
        return 0;
    }
    *ms = days_from_civil(y, mo, d) * 86400000 + (int64_t)hh * 3600000 + (int64_t)mi * 60000 +
          (int64_t)ss * 1000 + frac - sign * ((int64_t)oh * 3600000 + (int64_t)om * 60000);
    return 0;
}

/* The entry's time from member `name`: an integer of ms, or an ISO string.
 * 0 when fine; otherwise the reason is in e->why. */
static int entry_time(entry *e, const json_value *t, const char *name)
{
    if (t->type == JSON_NUMBER) {
        int64_t v = 0;
        for (size_t i = 0; i < t->len; i++) {
            char ch = t->str[i];
            if (ch < '0' || ch > '9' || v > MAX_TIME_MS) {
                snprintf(e->why, sizeof e->why,
                         "%s is not a whole, non-negative number of milliseconds", name);
                return -1;
            }
            v = v * 10 + (ch - '0');
        }
        e->time_ms = v;
    } else if (t->type == JSON_STRING) {
        if (parse_iso(t->str, t->len, &e->time_ms) != 0) {
            snprintf(e->why, sizeof e->why,
                     "%s is not an ISO-8601 date and time (like 2026-01-01T10:00:00Z)", name);
            return -1;
        }
    } else {
        snprintf(e->why, sizeof e->why, "%s is %s, not a time", name, json_type_name(t->type));
        return -1;
    }
    if (e->time_ms <= 0 || e->time_ms > MAX_TIME_MS) {
        snprintf(e->why, sizeof e->why, "%s is out of range (1970 to 9999)", name);
        return -1;
    }
    return 0;
}

/* ---- entries ------------------------------------------------------------------ */

static char *dup_bytes(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s != NULL) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

/* What the contract refuses in a key or session id (bindlog.h), or NULL. */
static const char *bad_key(const char *k, size_t n)
{
    if (n == 0)
        return "the key is empty";
    if (n > BINDLOG_KEY_MAX)
        return "the key is longer than 400 bytes";
    if (memchr(k, '\0', n) != NULL)
        return "the key holds a NUL character";
    return NULL;
}

static const char *bad_id(const char *s, size_t n)
{
    if (n == 0)
        return "the session id is empty";
    if (n > BINDLOG_ID_MAX)
        return "the session id is longer than 128 bytes";
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0x7F)
            return "the session id holds a control character";
    return NULL;
}

/* Read one member of the top-level object into e (state set when it is
 * skipped before the store sees it).  -1 only when out of memory. */
static int read_entry(const char *text, int format, const json_value *m, entry *e)
{
    const char *id_name = format == FMT_OPENCLAW ? "sessionId" : "session_id";
    const json_value *sid, *t;
    const char *why;

    e->v = m;
    e->state = -1;
    if ((e->key = dup_bytes(m->name, m->name_len)) == NULL)
        return -1;
    e->key_len = m->name_len;
    if (m->type != JSON_OBJECT) {
        if (m->name_len > 0 && m->name[0] == '_') {
            e->state = E_IGNORED; /* a note for humans, like hermes' _README */
            return 0;
        }
        e->state = E_MALFORMED;
        snprintf(e->why, sizeof e->why, "the entry is %s, not an object",
                 json_type_name(m->type));
        return 0;
    }
    sid = json_get(m, id_name);
    if (sid == NULL || sid->type != JSON_STRING) {
        e->state = E_MALFORMED;
        if (sid == NULL)
            snprintf(e->why, sizeof e->why, "%s is missing", id_name);
        else
            snprintf(e->why, sizeof e->why, "%s is %s, not a string", id_name,
                     json_type_name(sid->type));
        return 0;
    }
    if ((e->sid = dup_bytes(sid->str, sid->len)) == NULL)
        return -1;
    e->sid_len = sid->len;
    if (format == FMT_HERMES) {
        const json_value *sk = json_get(m, "session_key");
        if (sk != NULL && (sk->type != JSON_STRING || sk->len != m->name_len ||
                           memcmp(sk->str, m->name, sk->len) != 0)) {
            e->state = E_MALFORMED;
            snprintf(e->why, sizeof e->why,
                     "session_key is not the entry's own key (which one routes?)");
            return 0;
        }
        t = json_get(m, "updated_at");
        if (t == NULL || t->type == JSON_NULL) {
            t = json_get(m, "created_at");
            if (t == NULL || t->type == JSON_NULL) {
                e->state = E_MALFORMED;
                snprintf(e->why, sizeof e->why, "updated_at and created_at are missing");
                return 0;
            }
            if (entry_time(e, t, "created_at") != 0) {
                e->state = E_MALFORMED;
                return 0;
            }
        } else if (entry_time(e, t, "updated_at") != 0) {
            e->state = E_MALFORMED;
            return 0;
        }
    } else {
        t = json_get(m, "updatedAt");
        if (t == NULL) {
            e->state = E_MALFORMED;
            snprintf(e->why, sizeof e->why, "updatedAt is missing");
            return 0;
        }
        if (entry_time(e, t, "updatedAt") != 0) {
            e->state = E_MALFORMED;
            return 0;
        }
    }
    if ((why = bad_key(m->name, m->name_len)) != NULL ||
        (why = bad_id(sid->str, sid->len)) != NULL) {
        e->state = E_INVALID;
        snprintf(e->why, sizeof e->why, "%s", why);
        return 0;
    }
    if ((e->origin = malloc(m->end - m->start + 1)) == NULL)
        return -1;
    e->origin_len = json_compact(text, m, e->origin);
    if (e->origin_len > BINDLOG_ORIGIN_MAX) {
        e->state = E_INVALID;
        snprintf(e->why, sizeof e->why,
                 "the entry is %zu bytes as compact JSON, over the 65536 an origin may hold",
                 e->origin_len);
    }
    return 0;
}

static void free_entries(entry *es, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(es[i].key);
        free(es[i].sid);
        free(es[i].origin);
    }
    free(es);
}

/* ---- --dry-run: the store's answer without writing --------------------------- */

/* A string -> string map for what the dry run has bound so far (open
 * addressing; the strings belong to the entries). */
typedef struct smap {
    const char **k, **v;
    size_t cap, n;
} smap;

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603u;
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

static const char *smap_get(const smap *m, const char *k)
{
    if (m->cap == 0)
        return NULL;
    for (size_t i = hash_str(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->k[i] == NULL)
            return NULL;
        if (strcmp(m->k[i], k) == 0)
            return m->v[i];
    }
}

static int smap_put(smap *m, const char *k, const char *v)
{
    if ((m->n + 1) * 2 > m->cap) {
        smap nm = {NULL, NULL, m->cap ? m->cap * 2 : 256, 0};
        nm.k = calloc(nm.cap, sizeof(*nm.k));
        nm.v = calloc(nm.cap, sizeof(*nm.v));
        if (nm.k == NULL || nm.v == NULL) {
            free(nm.k);
            free(nm.v);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->k[i] != NULL)
                smap_put(&nm, m->k[i], m->v[i]);
        free(m->k);
        free(m->v);
        *m = nm;
    }
    size_t i = hash_str(k) & (m->cap - 1);
    while (m->k[i] != NULL && strcmp(m->k[i], k) != 0)
        i = (i + 1) & (m->cap - 1);
    if (m->k[i] == NULL)
        m->n++;
    m->k[i] = k;
    m->v[i] = v;
    return 0;
}

static void smap_free(smap *m)
{
    free(m->k);
    free(m->v);
}

/* BIND(key, sid, expect "") decided against the store (NULL: none yet,
 * as if empty) and the entries the dry run took before this one (SPEC
 * section 2's order of checks). */
static int dry_decide(bindlog *s, smap *keys, smap *sessions, entry *e)
{
    bindlog_binding b;
    bindlog_session se;
    const char *cur = smap_get(keys, e->key), *holder;
    int rc;

    memset(&e->res, 0, sizeof e->res);
    if (cur == NULL) {
        rc = s == NULL ? BINDLOG_ENOTFOUND : bindlog_get(s, e->key, &b);
        if (rc != 0 && rc != BINDLOG_ENOTFOUND)
            return rc;
        cur = rc == 0 ? b.session_id : "";
        e->res.generation = rc == 0 ? b.generation : 0;
    }
    snprintf(e->res.session_id, sizeof e->res.session_id, "%s", cur);
    if (strcmp(cur, e->sid) == 0) {
        e->state = E_ALREADY;
        return 0;
    }
    if (cur[0] != '\0') {
        e->state = E_MOVED;
        snprintf(e->why, sizeof e->why, "the key is bound to session '%s' already", cur);
        return 0;
    }
    holder = smap_get(sessions, e->sid);
    if (holder == NULL) {
        rc = s == NULL ? BINDLOG_ENOTFOUND : bindlog_session_get(s, e->sid, &se, NULL, 0);
        if (rc != 0 && rc != BINDLOG_ENOTFOUND)
            return rc;
        /* a live session is the binding of its key (unless this run moved
         * that key, which it never does: it binds unbound keys only) */
        if (rc == 0 && se.ended_lsn == 0)
            holder = se.key;
        if (holder != NULL) {
            e->state = E_CONFLICT;
            snprintf(e->why, sizeof e->why, "session '%s' is the live binding of key '%s'",
                     e->sid, holder);
            return 0;
        }
    } else {
        e->state = E_CONFLICT;
        snprintf(e->why, sizeof e->why, "session '%s' is the live binding of key '%s'", e->sid,
                 holder);
        return 0;
    }
    e->state = E_APPLIED;
    if (smap_put(keys, e->key, e->sid) != 0 || smap_put(sessions, e->sid, e->key) != 0)
        return BINDLOG_ENOMEM;
    return 0;
}

typedef struct order {
    int64_t t;
    size_t i;
} order;

static int order_cmp(const void *a, const void *b)
{
    const order *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int dry_run(cli *c, bindlog *s, entry **todo, size_t n)
{
    smap keys = {0}, sessions = {0};
    order *o = malloc((n ? n : 1) * sizeof(*o));
    int rc = 0;

    if (o == NULL)
        return cli_lib_error(c, BINDLOG_ENOMEM, "dry run");
    for (size_t i = 0; i < n; i++)
        o[i] = (order){todo[i]->time_ms, i};
    qsort(o, n, sizeof(*o), order_cmp);
    for (size_t k = 0; k < n && rc == 0; k++)
        rc = dry_decide(s, &keys, &sessions, todo[o[k].i]);
    free(o);
    smap_free(&keys);
    smap_free(&sessions);
    return rc == 0 ? 0 : cli_lib_error(c, rc, "cannot read the store");
}

/* ---- the real import ------------------------------------------------------ */

static int do_import(cli *c, bindlog *s, entry **todo, size_t n)
{
    bindlog_import_entry *in = malloc((n ? n : 1) * sizeof(*in));
    bindlog_result *out = malloc((n ? n : 1) * sizeof(*out));
    int *codes = malloc((n ? n : 1) * sizeof(*codes));
    cli_progress p;
    int rc;

    if (in == NULL || out == NULL || codes == NULL) {
        free(in);
        free(out);
        free(codes);
        return cli_lib_error(c, BINDLOG_ENOMEM, "import");
    }
    for (size_t i = 0; i < n; i++)
        in[i] = (bindlog_import_entry){todo[i]->key, todo[i]->sid, todo[i]->time_ms,
                                       todo[i]->origin, todo[i]->origin_len};
    cli_progress_begin(&p, "import-json", 1);
    rc = bindlog_import_entries(s, in, n, out, codes, cli_progress_cb, &p);
    cli_progress_end(&p);
    if (rc != 0)
        rc = cli_lib_error(c, rc, "import stopped; what went in stays in, and a second run "
                                  "skips it");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        entry *e = todo[i];
        bindlog_session se;
        e->res = out[i];
        switch (codes[i]) {
        case BINDLOG_APPLIED:
            e->state = E_APPLIED;
            break;
        case BINDLOG_ALREADY:
            e->state = E_ALREADY;
            break;
        case BINDLOG_MOVED:
            e->state = E_MOVED;
            snprintf(e->why, sizeof e->why, "the key is bound to session '%s' already",
                     out[i].session_id);
            break;
        case BINDLOG_ECONFLICT:
            e->state = E_CONFLICT;
            if (bindlog_session_get(s, e->sid, &se, NULL, 0) == 0)
                snprintf(e->why, sizeof e->why, "session '%s' is the live binding of key '%s'",
                         e->sid, se.key);
            else
                snprintf(e->why, sizeof e->why, "session '%s' is the live binding of another key",
                         e->sid);
            break;
        default:
            e->state = E_INVALID;
            snprintf(e->why, sizeof e->why, "refused: %s (%s)", bindlog_strerror(codes[i]),
                     bindlog_code_name(codes[i]));
            break;
        }
    }
    free(in);
    free(out);
    free(codes);
    return rc;
}

/* ---- the command ------------------------------------------------------------ */

static void report_entry(const entry *e, int json)
{
    if (json) {
        cli_json j;
        cli_json_begin(&j, stdout);
        cli_json_bytes(&j, "key", e->key, e->key_len);
        if (e->sid != NULL)
            cli_json_bytes(&j, "session_id", e->sid, e->sid_len);
        else
            cli_json_null(&j, "session_id");
        if (e->time_ms > 0)
            cli_json_i64(&j, "time_ms", e->time_ms);
        else
            cli_json_null(&j, "time_ms");
        cli_json_str(&j, "outcome", state_names[e->state]);
        cli_json_u64(&j, "lsn", e->state == E_APPLIED ? e->res.lsn : 0);
        cli_json_str(&j, "detail", e->why);
        cli_json_end(&j);
        return;
    }
    if (e->state <= E_ALREADY || e->state == E_IGNORED)
        return;
    fprintf(stderr, "bindlog import-json: key '");
    cli_put_escaped(stderr, e->key, e->key_len);
    fprintf(stderr, "': %s, skipped: ", state_names[e->state]);
    cli_put_escaped(stderr, e->why, strlen(e->why));
    fputc('\n', stderr);
}

static int run_import_json(cli *c)
{
    static const cli_opt opts[] = {{"--json", NULL, 0, OPT_JSON},
                                   {"--format", NULL, 1, OPT_FORMAT},
                                   {"--dry-run", NULL, 0, OPT_DRY_RUN},
                                   CLI_OPT_END};
    cli_args a;
    const char *v, *path = NULL;
    int format = 0, json = 0, dry = 0, r, rc;
    char *text = NULL;
    size_t len = 0, n = 0, ntodo = 0;
    json_doc doc = {0};
    json_error jerr;
    json_limits lim = {MAX_DEPTH, MAX_FILE};
    entry *es = NULL, **todo = NULL;
    bindlog *s = NULL;
    uint64_t count[E_NSTATES] = {0};

    cli_args_init(&a, c, &cli_cmd_import_json);
    while ((r = cli_next(&a, opts, &v)) != CLI_ARG_DONE) {
        switch (r) {
        case CLI_ARG_HELP:
            return CLI_OK;
        case CLI_ARG_ERROR:
            return CLI_USAGE;
        case CLI_ARG_POSITIONAL:
            if (path != NULL)
                return cli_usage_error(c, "unexpected argument '%s'", v);
            path = v;
            break;
        case OPT_JSON:
            json = 1;
            break;
        case OPT_DRY_RUN:
            dry = 1;
            break;
        case OPT_FORMAT:
            if (strcmp(v, "openclaw") == 0)
                format = FMT_OPENCLAW;
            else if (strcmp(v, "hermes") == 0)
                format = FMT_HERMES;
            else
                return cli_usage_error(c, "--format: '%s' is not openclaw or hermes", v);
            break;
        }
    }
    if (format == 0)
        return cli_usage_error(c, "missing --format openclaw|hermes");
    if (path == NULL)
        return cli_usage_error(c, "missing FILE (a sessions.json, or - for stdin)");
    if (c->dir == NULL || c->dir[0] == '\0')
        return cli_usage_error(c, "no store directory: give -d DIR or set BINDLOG_DIR");

    if ((rc = read_file(c, path, &text, &len)) != 0)
        return rc;
    r = json_parse(text, len, &lim, &doc, &jerr);
    if (r == -2) {
        rc = cli_lib_error(c, BINDLOG_ENOMEM, "cannot parse '%s'", path);
        goto out;
    }
    if (r != 0) {
        fprintf(stderr, "bindlog import-json: '");
        cli_put_escaped(stderr, path, strlen(path));
        fprintf(stderr, "' is not valid JSON: byte %zu (line %zu, column %zu): %s; nothing "
                        "imported\n",
                jerr.offset, jerr.line, jerr.column, jerr.msg);
        rc = CLI_STORE;
        goto out;
    }
    if (doc.root->type != JSON_OBJECT) {
        fprintf(stderr, "bindlog import-json: '");
        cli_put_escaped(stderr, path, strlen(path));
        fprintf(stderr, "' holds %s, not an object of key -> entry; nothing imported\n",
                json_type_name(doc.root->type));
        rc = CLI_STORE;
        goto out;
    }

    n = doc.root->count;
    es = calloc(n ? n : 1, sizeof(*es));
    todo = calloc(n ? n : 1, sizeof(*todo));
    if (es == NULL || todo == NULL) {
        rc = cli_lib_error(c, BINDLOG_ENOMEM, "import");
        goto out;
    }
    {
        size_t i = 0;
        for (const json_value *m = doc.root->child; m != NULL; m = m->next, i++) {
            if (read_entry(text, format, m, &es[i]) != 0) {
                rc = cli_lib_error(c, BINDLOG_ENOMEM, "import");
                goto out;
            }
            if (es[i].state < 0)
                todo[ntodo++] = &es[i];
        }
    }

    if (dry) {
        /* A store that does not exist yet is an empty one to a dry run. */
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        o.read_only = 1;
        r = bindlog_open(&s, c->dir, &o);
        if (r != 0 && r != BINDLOG_ENOTFOUND) {
            rc = cli_lib_error(c, r, "cannot open the store");
            goto out;
        }
        if ((rc = dry_run(c, s, todo, ntodo)) != 0)
            goto out;
    } else {
        if ((rc = cli_open(c, 0, &s)) != 0)
            goto out;
        if ((rc = do_import(c, s, todo, ntodo)) != 0)
            goto out;
    }

    for (size_t i = 0; i < n; i++) {
        count[es[i].state]++;
        report_entry(&es[i], json);
    }
    {
        bindlog_stats st;
        uint64_t skipped = count[E_MOVED] + count[E_CONFLICT] + count[E_INVALID] +
                           count[E_MALFORMED];
        int have_st = s != NULL && bindlog_stats_get(s, &st) == 0;
        if (json) {
            cli_json j;
            cli_json_begin(&j, stdout);
            cli_json_bool(&j, "summary", 1);
            cli_json_str(&j, "format", format == FMT_OPENCLAW ? "openclaw" : "hermes");
            cli_json_bool(&j, "dry_run", dry);
            cli_json_u64(&j, "entries", n - count[E_IGNORED]);
            for (int k = 0; k < E_NSTATES; k++)
                cli_json_u64(&j, state_names[k], count[k]);
            cli_json_u64(&j, "skipped", skipped);
            if (have_st)
                cli_json_u64(&j, "head_lsn", st.head_lsn);
            cli_json_end(&j);
        } else {
            cli_kv kv = {stdout, 10};
            cli_kv_line(&kv, "format", "%s%s", format == FMT_OPENCLAW ? "openclaw" : "hermes",
                        dry ? " (dry run: nothing written)" : "");
            cli_kv_line(&kv, "entries", "%llu", (unsigned long long)(n - count[E_IGNORED]));
            for (int k = 0; k < E_NSTATES; k++)
                cli_kv_line(&kv, state_names[k], "%llu", (unsigned long long)count[k]);
            if (have_st)
                cli_kv_line(&kv, "head_lsn", "%llu", (unsigned long long)st.head_lsn);
        }
        rc = skipped ? CLI_PROBLEM : CLI_OK;
    }
out:
    bindlog_close(s);
    if (es != NULL)
        free_entries(es, n);
    free(todo);
    json_free(&doc);
    free(text);
    return rc;
}

const cli_command cli_cmd_import_json = {
    "import-json", "move a gateway's sessions.json in (openclaw, hermes)",
    "import-json --format openclaw|hermes FILE [--dry-run] [--json]\n"
    "\n"
    "Bind every entry of a gateway's sessions.json (key -> entry; FILE '-' is\n"
    "stdin) in the store: one BIND per entry, only if the key is unbound,\n"
    "applied in order of the entry's update time and logged with it, the entry\n"
    "itself (compact JSON) kept as the session's origin.  Running it again\n"
    "changes nothing (already).  An entry that cannot go in is reported by key\n"
    "and skipped: malformed (no session id or time), invalid (a key or id the\n"
    "store refuses), moved (the key is bound elsewhere), conflict (its session\n"
    "is bound to another key: the older entry wins).  Keys starting with '_'\n"
    "whose value is not an object are notes (ignored).  Times are epoch ms or\n"
    "ISO-8601 (without an offset: this machine's local time).  --dry-run writes\n"
    "nothing and says what would happen; --json writes one object per entry and\n"
    "a summary object.  Exit 1 if any entry was skipped, 3 if FILE is not JSON.\n",
    run_import_json};
