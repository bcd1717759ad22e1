/*
 * cmd_inspect.c -- the read-only commands: get, history, lineage, dump
 * (stat is in cmd_stat.c).
 *
 * Every one of them opens the store read-only, so it runs beside a gateway
 * that is writing (LMDB readers never block the writer) and never creates a
 * store by accident.  Each reads one snapshot per iterator; a live store may
 * move between two commands, never within one listing.
 */
#include "cli.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_JSON = 1, OPT_DOT, OPT_LOG, OPT_BINDINGS, OPT_SESSIONS, OPT_FROM, OPT_TO, OPT_FOLLOW };

/* Text output shows at most this much of an origin; --json shows it all. */
#define ORIGIN_SHOW 120

/* parse_simple's way of saying "--help was shown: exit 0". */
#define HELP_SHOWN (-1)

/* Reads the positional arguments and flags of a simple command.  `npos`
 * positionals are required, named in `names` for the error message. */
static int parse_simple(cli *c, const cli_command *cmd, const cli_opt *opts, int *json,
                        const char **pos, int npos, const char *const *names, int *dot)
{
    cli_args a;
    const char *v;
    int got = 0, r;

    cli_args_init(&a, c, cmd);
    while ((r = cli_next(&a, opts, &v)) != CLI_ARG_DONE) {
        switch (r) {
        case CLI_ARG_HELP:
            return HELP_SHOWN;
        case CLI_ARG_ERROR:
            return CLI_USAGE;
        case CLI_ARG_POSITIONAL:
            if (got >= npos)
                return cli_usage_error(c, "unexpected argument '%s'", v);
            pos[got++] = v;
            break;
        case OPT_JSON:
            *json = 1;
            break;
        case OPT_DOT:
            *dot = 1;
            break;
        default:
            return cli_usage_error(c, "option not handled");
        }
    }
    if (got < npos)
        return cli_usage_error(c, "missing %s", names[got]);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* get                                                                        */

static int run_get(cli *c)
{
    static const cli_opt opts[] = {{"--json", NULL, 0, OPT_JSON}, CLI_OPT_END};
    static const char *const names[] = {"KEY"};
    const char *key = NULL; /* set by parse_simple on success; -O3 cannot tell */
    bindlog *s = NULL;
    bindlog_binding b;
    bindlog_session ss;
    unsigned char *origin = NULL;
    int json = 0, dot = 0, rc, have_sess = 0;
    char t[CLI_TIME_MAX];

    rc = parse_simple(c, &cli_cmd_get, opts, &json, &key, 1, names, &dot);
    if (rc != 0)
        return rc == HELP_SHOWN ? CLI_OK : rc;
    if ((rc = cli_open(c, 1, &s)) != 0)
        return rc;
    rc = bindlog_get(s, key, &b);
    if (rc != 0 && rc != BINDLOG_ENOTFOUND) {
        rc = cli_lib_error(c, rc, "cannot read the binding");
        goto out;
    }
    if (rc == 0) {
        origin = malloc(BINDLOG_ORIGIN_MAX);
        if (origin == NULL) {
            rc = cli_lib_error(c, BINDLOG_ENOMEM, "cannot read the session");
            goto out;
        }
        /* The binding and the session come from two snapshots; a writer in
         * between may have ended the session, which is then shown as is. */
        rc = bindlog_session_get(s, b.session_id, &ss, origin, BINDLOG_ORIGIN_MAX);
        if (rc == 0)
            have_sess = 1;
        else if (rc != BINDLOG_ENOTFOUND) {
            rc = cli_lib_error(c, rc, "cannot read session '%s'", b.session_id);
            goto out;
        }
    }
    cli_format_time(b.updated_ms, t);
    if (json) {
        cli_json j;
        cli_json_begin(&j, stdout);
        cli_json_str(&j, "key", key);
        cli_json_bool(&j, "bound", b.session_id[0] != '\0');
        cli_json_str(&j, "session_id", b.session_id);
        cli_json_u64(&j, "generation", b.generation);
        cli_json_u64(&j, "lsn", b.lsn);
        cli_json_i64(&j, "updated_ms", b.updated_ms);
        cli_json_time(&j, "updated", b.updated_ms);
        if (b.last_activity_ms != 0) { /* only keys that routed messages have one */
            cli_json_i64(&j, "last_activity_ms", b.last_activity_ms);
            cli_json_time(&j, "last_activity", b.last_activity_ms);
        }
        if (have_sess) {
            cli_json_str(&j, "parent_id", ss.parent_id);
            cli_json_u64(&j, "created_lsn", ss.created_lsn);
            cli_json_bytes(&j, "origin", origin, ss.origin_len);
        }
        cli_json_end(&j);
    } else {
        cli_kv kv = {stdout, 11};
        cli_kv_bytes(&kv, "key", key, strlen(key));
        if (b.session_id[0] != '\0')
            cli_kv_bytes(&kv, "session_id", b.session_id, strlen(b.session_id));
        else
            cli_kv_line(&kv, "session_id", "- (not bound)");
        cli_kv_line(&kv, "generation", "%llu", (unsigned long long)b.generation);
        if (b.lsn != 0) {
            cli_kv_line(&kv, "lsn", "%llu", (unsigned long long)b.lsn);
            cli_kv_line(&kv, "updated", "%s", t);
        }
        if (b.last_activity_ms != 0) {
            cli_format_time(b.last_activity_ms, t);
            cli_kv_line(&kv, "activity", "%s", t);
        }
        if (have_sess) {
            size_t n = ss.origin_len < ORIGIN_SHOW ? ss.origin_len : ORIGIN_SHOW;
            if (ss.parent_id[0] != '\0')
                cli_kv_bytes(&kv, "parent_id", ss.parent_id, strlen(ss.parent_id));
            else
                cli_kv_line(&kv, "parent_id", "- (root)");
            cli_kv_line(&kv, "created", "lsn %llu", (unsigned long long)ss.created_lsn);
            printf("origin:      ");
            cli_put_escaped(stdout, origin, n);
            if (n < ss.origin_len)
                printf("...(%zu bytes)", ss.origin_len);
            putchar('\n');
        }
    }
    if (b.session_id[0] == '\0') {
        fprintf(stderr, "bindlog get: key '");
        cli_put_escaped(stderr, key, strlen(key));
        fprintf(stderr, "' is not bound\n");
        rc = CLI_PROBLEM;
    } else {
        rc = CLI_OK;
    }
out:
    free(origin);
    bindlog_close(s);
    return rc;
}

const cli_command cli_cmd_get = {
    "get", "the binding of a key",
    "get KEY [--json]\n"
    "\n"
    "Print the session KEY routes to, its generation, the LSN and time of the\n"
    "last event that changed it, and the bound session's parent and origin.\n"
    "Exit 1 when the key is not bound (never bound, or unbound).\n",
    run_get};

/* ------------------------------------------------------------------------ */
/* history                                                                    */

static int run_history(cli *c)
{
    static const cli_opt opts[] = {{"--json", NULL, 0, OPT_JSON}, CLI_OPT_END};
    static const char *const names[] = {"KEY"};
    const char *key;
    bindlog *s = NULL;
    bindlog_iter *it = NULL;
    bindlog_record r;
    int json = 0, dot = 0, rc;

    rc = parse_simple(c, &cli_cmd_history, opts, &json, &key, 1, names, &dot);
    if (rc != 0)
        return rc == HELP_SHOWN ? CLI_OK : rc;
    if ((rc = cli_open(c, 1, &s)) != 0)
        return rc;
    if ((rc = bindlog_history_iter(s, key, &it)) != 0) {
        rc = cli_lib_error(c, rc, "cannot read the history");
        goto out;
    }
    if (!json)
        cli_print_record_header(stdout);
    while ((rc = bindlog_iter_next_record(it, &r)) == 1) {
        if (json)
            cli_json_record(stdout, &r);
        else
            cli_print_record(stdout, &r, 0);
    }
    if (rc < 0) {
        rc = cli_lib_error(c, rc, "cannot read the history");
        goto out;
    }
    rc = CLI_OK;
out:
    bindlog_iter_close(it);
    bindlog_close(s);
    return rc;
}

const cli_command cli_cmd_history = {
    "history", "every logged event of a key, oldest first",
    "history KEY [--json]\n"
    "\n"
    "Print every retained log record that touched KEY, oldest first: LSN, time\n"
    "(UTC), type, the generation after the event, the session ids, reason and\n"
    "origin.  Records removed by compaction are not shown.\n",
    run_history};

/* ------------------------------------------------------------------------ */
/* lineage                                                                    */

/* Deepest descendant level shown, and most sessions visited: the output
 * must end, and the walk's memory stay bounded (about 40 bytes a level),
 * whatever a damaged children index holds.  A chain of splits is one level
 * per split: a million of them is years of compactions of one chat. */
#define LINEAGE_MAX_DEPTH 1000000
#define LINEAGE_MAX_NODES 10000000u

/* A set of session ids already printed (open addressing, grows at 1/2). */
typedef struct idset {
    char **slot;
    size_t cap, n;
} idset;

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603u;
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

/* 1 added, 0 already there, negative on allocation failure. */
static int idset_add(idset *set, const char *id)
{
    size_t i;

    if (set->n * 2 >= set->cap) {
        size_t ncap = set->cap ? set->cap * 2 : 64, k;
        char **ns = calloc(ncap, sizeof(*ns));
        if (ns == NULL)
            return BINDLOG_ENOMEM;
        for (k = 0; k < set->cap; k++) {
            if (set->slot[k] == NULL)
                continue;
            for (i = fnv1a(set->slot[k]) & (ncap - 1); ns[i] != NULL; i = (i + 1) & (ncap - 1))
                ;
            ns[i] = set->slot[k];
        }
        free(set->slot);
        set->slot = ns;
        set->cap = ncap;
    }
    for (i = fnv1a(id) & (set->cap - 1); set->slot[i] != NULL; i = (i + 1) & (set->cap - 1))
        if (strcmp(set->slot[i], id) == 0)
            return 0;
    if ((set->slot[i] = strdup(id)) == NULL)
        return BINDLOG_ENOMEM;
    set->n++;
    return 1;
}

static void idset_free(idset *set)
{
    size_t i;
    for (i = 0; i < set->cap; i++)
        free(set->slot[i]);
    free(set->slot);
}

/* The direct children of `id`, copied out so that no iterator stays open
 * while we descend: each iterator holds a read transaction and a reader
 * slot, and a deep tree would exhaust them. */
static int children_of(bindlog *s, const char *id, char ***out, size_t *n)
{
    bindlog_iter *it;
    bindlog_session ss;
    char **v = NULL;
    size_t cap = 0;
    int rc;

    *out = NULL;
    *n = 0;
    if ((rc = bindlog_children_iter(s, id, &it)) != 0)
        return rc;
    while ((rc = bindlog_iter_next_session(it, &ss, NULL, 0)) == 1) {
        if (*n == cap) {
            char **nv = realloc(v, (cap ? cap * 2 : 8) * sizeof(*nv));
            if (nv == NULL) {
                rc = BINDLOG_ENOMEM;
                break;
            }
            v = nv;
            cap = cap ? cap * 2 : 8;
        }
        if ((v[*n] = strdup(ss.session_id)) == NULL) {
            rc = BINDLOG_ENOMEM;
            break;
        }
        (*n)++;
    }
    bindlog_iter_close(it);
    if (rc < 0) {
        while (*n > 0)
            free(v[--*n]);
        free(v);
        return rc;
    }
    *out = v;
    return 0;
}

/* Writes an id as a DOT double-quoted string: escaped for the terminal
 * first (so invalid UTF-8 becomes \xNN, which is also unique), then with
 * the backslashes and quotes DOT needs. */
static void put_dot_string(const char *s)
{
    char *buf = NULL;
    size_t len = 0, i;
    FILE *m = open_memstream(&buf, &len);

    if (m == NULL) {
        fputs("\"?\"", stdout);
        return;
    }
    cli_put_escaped(m, s, strlen(s));
    fclose(m);
    putchar('"');
    for (i = 0; i < len; i++) {
        if (buf[i] == '"' || buf[i] == '\\')
            putchar('\\');
        putchar(buf[i]);
    }
    putchar('"');
    free(buf);
}

typedef struct lineage_ctx {
    bindlog *s;
    int dot;
    const char *selected;
} lineage_ctx;

/* One session's line: its id, the selection mark and its state. */
static int print_node(lineage_ctx *lc, const char *prefix, const char *id)
{
    bindlog_session ss;
    bindlog_binding b;
    int rc, bound = 0;
    char t[CLI_TIME_MAX];

    rc = bindlog_session_get(lc->s, id, &ss, NULL, 0);
    if (rc != 0)
        return rc;
    rc = bindlog_get(lc->s, ss.key, &b);
    if (rc != 0 && rc != BINDLOG_ENOTFOUND)
        return rc;
    bound = rc == 0 && strcmp(b.session_id, id) == 0;

    if (lc->dot) {
        printf("  ");
        put_dot_string(id);
        printf(" [label=");
        {
            char *buf = NULL;
            size_t len = 0;
            FILE *m = open_memstream(&buf, &len);
            if (m == NULL)
                return BINDLOG_ENOMEM;
            cli_put_escaped(m, id, strlen(id));
            if (ss.ended_lsn == 0)
                fprintf(m, "\nlive%s", bound ? ", bound" : "");
            else
                fprintf(m, "\nended at lsn %llu: %s", (unsigned long long)ss.ended_lsn,
                        ss.end_reason);
            fclose(m);
            putchar('"');
            for (size_t i = 0; i < len; i++) {
                if (buf[i] == '\n')
                    fputs("\\n", stdout);
                else if (buf[i] == '"' || buf[i] == '\\')
                    printf("\\%c", buf[i]);
                else
                    putchar(buf[i]);
            }
            putchar('"');
            free(buf);
        }
        if (bound)
            printf(", style=filled, fillcolor=palegreen");
        if (strcmp(id, lc->selected) == 0)
            printf(", penwidth=3");
        printf("];\n");
        return 0;
    }

    fputs(prefix, stdout);
    cli_put_escaped(stdout, id, strlen(id));
    if (strcmp(id, lc->selected) == 0)
        fputs("  <==", stdout);
    cli_format_time(ss.created_ms, t);
    printf("  created lsn %llu", (unsigned long long)ss.created_lsn);
    if (ss.ended_lsn != 0) {
        printf(", ended lsn %llu (", (unsigned long long)ss.ended_lsn);
        cli_put_escaped(stdout, ss.end_reason, strlen(ss.end_reason));
        putchar(')');
    } else if (bound) {
        fputs(", LIVE, bound to ", stdout);
        cli_put_value(stdout, ss.key, strlen(ss.key));
    } else {
        fputs(", live but not bound", stdout);
    }
    putchar('\n');
    return 0;
}

/* A level of the depth-first walk: the children still to print, and the
 * column their lines start at (the length of the prefix before them). */
typedef struct frame {
    char **ids;
    size_t n, i;
    size_t col;
} frame;

static void free_frame(frame *f)
{
    while (f->n > 0)
        free(f->ids[--f->n]);
    free(f->ids);
    f->ids = NULL;
}

/* Room for `len` bytes of prefix (and its terminator) in *buf. */
static int prefix_room(char **buf, size_t *cap, size_t len)
{
    if (len + 1 <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < len + 1)
        n *= 2;
    char *nb = realloc(*buf, n);
    if (nb == NULL)
        return BINDLOG_ENOMEM;
    *buf = nb;
    *cap = n;
    return 0;
}

/*
 * The tree of root's descendants, depth first.  A session with one child
 * is followed by that child in its own column, with no branch mark: a
 * chain of splits reads down one column however long it is.  Only where a
 * session has several children does the tree branch and indent ("|-- ",
 * "`-- ", four characters a level).  Each level's children are copied out
 * before descending (children_of), and the stack and the prefix grow as
 * the walk needs them.
 */
static int walk_descendants(cli *c, lineage_ctx *lc, const char *root, idset *seen)
{
    frame *stack = NULL;
    size_t sp = 0, cap = 0, nodes = 0, pcap = 0;
    char *prefix = NULL;
    int rc = 0, truncated = 0;

    if ((rc = prefix_room(&prefix, &pcap, 0)) != 0)
        return rc;
    prefix[0] = '\0';
    cap = 64;
    if ((stack = calloc(cap, sizeof(*stack))) == NULL) {
        free(prefix);
        return BINDLOG_ENOMEM;
    }
    if ((rc = children_of(lc->s, root, &stack[0].ids, &stack[0].n)) != 0)
        goto out;
    sp = 1;
    while (sp > 0) {
        frame *f = &stack[sp - 1];
        const char *id;
        int last, added, chain;
        size_t col;

        if (f->i >= f->n) {
            free_frame(f);
            sp--;
            continue;
        }
        id = f->ids[f->i++];
        last = f->i == f->n;
        chain = f->n == 1;
        /* the line: the level's prefix, then a branch mark unless this is
         * the only child */
        col = f->col + (chain ? 0 : 4);
        if ((rc = prefix_room(&prefix, &pcap, col)) != 0)
            goto out;
        if (!chain)
            memcpy(prefix + f->col, last ? "`-- " : "|-- ", 4);
        prefix[col] = '\0';
        if ((added = idset_add(seen, id)) < 0) {
            rc = added;
            goto out;
        }
        if (lc->dot) {
            printf("  ");
            put_dot_string(sp == 1 ? root : stack[sp - 2].ids[stack[sp - 2].i - 1]);
            printf(" -> ");
            put_dot_string(id);
            printf(";\n");
        }
        if (!added) {
            /* Seen before: only a damaged children index does this. */
            if (!lc->dot) {
                fputs(prefix, stdout);
                cli_put_escaped(stdout, id, strlen(id));
                fputs("  (already shown: the children index has a cycle)\n", stdout);
            }
            continue;
        }
        if (++nodes > LINEAGE_MAX_NODES) {
            truncated = 1;
            break;
        }
        if ((rc = print_node(lc, prefix, id)) != 0)
            goto out;
        /* its children's lines go below it: under its branch mark, the
         * rule of its siblings still to come ("|   ") or blank */
        if (!chain)
            memcpy(prefix + f->col, last ? "    " : "|   ", 4);
        if (sp > LINEAGE_MAX_DEPTH) {
            truncated = 1;
            continue;
        }
        if (sp == cap) {
            frame *ns = realloc(stack, 2 * cap * sizeof(*ns));
            if (ns == NULL) {
                rc = BINDLOG_ENOMEM;
                goto out;
            }
            memset(ns + cap, 0, cap * sizeof(*ns));
            stack = ns;
            cap *= 2;
        }
        if ((rc = children_of(lc->s, id, &stack[sp].ids, &stack[sp].n)) != 0)
            goto out;
        stack[sp].i = 0;
        stack[sp].col = col;
        sp++;
    }
    if (truncated)
        cli_warn(c, "lineage cut short: deeper than %d levels or more than %u sessions",
                 LINEAGE_MAX_DEPTH, LINEAGE_MAX_NODES);
out:
    while (sp > 0)
        free_frame(&stack[--sp]);
    free(stack);
    free(prefix);
    return rc;
}

static int run_lineage(cli *c)
{
    static const cli_opt opts[] = {{"--dot", NULL, 0, OPT_DOT}, CLI_OPT_END};
    static const char *const names[] = {"SESSION"};
    const char *id;
    bindlog *s = NULL;
    bindlog_iter *it = NULL;
    bindlog_session ss;
    char **anc = NULL;
    size_t nanc = 0, cap = 0, i;
    idset seen = {NULL, 0, 0};
    lineage_ctx lc;
    int json = 0, dot = 0, rc;

    rc = parse_simple(c, &cli_cmd_lineage, opts, &json, &id, 1, names, &dot);
    if (rc != 0)
        return rc == HELP_SHOWN ? CLI_OK : rc;
    if ((rc = cli_open(c, 1, &s)) != 0)
        return rc;
    if ((rc = bindlog_session_get(s, id, &ss, NULL, 0)) != 0) {
        rc = cli_lib_error(c, rc, "%s", "");
        goto out;
    }
    /* Ancestors come nearest first; the tree prints them root first. */
    if ((rc = bindlog_ancestors_iter(s, id, &it)) != 0) {
        rc = cli_lib_error(c, rc, "cannot read the ancestors");
        goto out;
    }
    while ((rc = bindlog_iter_next_session(it, &ss, NULL, 0)) == 1) {
        if (nanc == cap) {
            char **na = realloc(anc, (cap ? cap * 2 : 8) * sizeof(*na));
            if (na == NULL) {
                rc = BINDLOG_ENOMEM;
                break;
            }
            anc = na;
            cap = cap ? cap * 2 : 8;
        }
        if ((anc[nanc] = strdup(ss.session_id)) == NULL) {
            rc = BINDLOG_ENOMEM;
            break;
        }
        nanc++;
    }
    bindlog_iter_close(it);
    if (rc < 0) {
        rc = cli_lib_error(c, rc, "cannot read the ancestors");
        goto out;
    }

    lc.s = s;
    lc.dot = dot;
    lc.selected = id;
    if (dot)
        printf("digraph lineage {\n  node [shape=box, fontname=\"monospace\"];\n");
    /* Root first, then each ancestor's child down to the session: a chain,
     * one column (walk_descendants) */
    for (i = nanc + 1; i-- > 0;) {
        const char *node = i == 0 ? id : anc[i - 1];
        if (idset_add(&seen, node) < 0 || (rc = print_node(&lc, "", node)) != 0) {
            rc = cli_lib_error(c, rc ? rc : BINDLOG_ENOMEM, "cannot read the lineage");
            goto out;
        }
        if (dot && i > 0) {
            printf("  ");
            put_dot_string(node);
            printf(" -> ");
            put_dot_string(i == 1 ? id : anc[i - 2]);
            printf(";\n");
        }
    }
    if ((rc = walk_descendants(c, &lc, id, &seen)) != 0) {
        rc = cli_lib_error(c, rc, "cannot read the descendants");
        goto out;
    }
    if (dot)
        printf("}\n");
    rc = CLI_OK;
out:
    for (i = 0; i < nanc; i++)
        free(anc[i]);
    free(anc);
    idset_free(&seen);
    bindlog_close(s);
    return rc;
}

const cli_command cli_cmd_lineage = {
    "lineage", "a session's ancestors and descendants",
    "lineage SESSION [--dot]\n"
    "\n"
    "Print the chain of ancestors of SESSION from its root, then the tree of its\n"
    "descendants (splits and /new sessions opened after it), one line per\n"
    "session: created and ended LSN, end reason, and LIVE for the session its\n"
    "key is bound to.  The session asked for is marked <==.  A session\n"
    "printed right below another in the same column, with no branch mark, is\n"
    "its only child: a chain of splits reads down one column.  Where a session\n"
    "has several children the tree branches (|-- and `--).\n"
    "--dot writes a Graphviz digraph instead (bound session filled, the asked\n"
    "one in bold): bindlog lineage S --dot | dot -Tsvg > lineage.svg\n"
    "Exit 1 when SESSION does not exist.\n",
    run_lineage};

/* ------------------------------------------------------------------------ */
/* dump                                                                       */

/* --follow ends cleanly on SIGINT or SIGTERM: the handler only sets this
 * flag, and the wait below returns at least every FOLLOW_SLICE_MS to look
 * at it. */
static volatile sig_atomic_t stop_following;
#define FOLLOW_SLICE_MS 200

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_following = 1;
}

/*
 * dump --log --follow: after the records up to the head, wait for the log
 * to move (bindlog_wait: another process's commits count) and print the new
 * records, each exactly once and in LSN order, until SIGINT or SIGTERM.
 * Records compacted away before they could be read are reported as a gap
 * on stderr, never silently skipped.  Each batch is flushed at once, so a
 * pipe (| jq, | grep --line-buffered) sees records as they commit.
 */
static int follow_log(cli *c, bindlog *s, uint64_t last, int json)
{
    struct sigaction sa;
    int rc = CLI_OK;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    fflush(stdout);
    while (!stop_following) {
        bindlog_iter *it = NULL;
        bindlog_record r;
        uint64_t head = 0;
        int lrc;

        if ((lrc = bindlog_wait(s, last, FOLLOW_SLICE_MS, &head)) != 0)
            return cli_lib_error(c, lrc, "cannot follow the log after LSN %llu",
                                 (unsigned long long)last);
        if (head <= last)
            continue; /* timed out: look at the flag, wait again */
        if ((lrc = bindlog_log_iter(s, last + 1, head, &it)) != 0)
            return cli_lib_error(c, lrc, "cannot read the log after LSN %llu",
                                 (unsigned long long)last);
        while ((lrc = bindlog_iter_next_record(it, &r)) == 1) {
            if (r.lsn != last + 1)
                cli_warn(c, "records %llu..%llu were compacted before they could be shown",
                         (unsigned long long)(last + 1), (unsigned long long)(r.lsn - 1));
            if (json)
                cli_json_record(stdout, &r);
            else
                cli_print_record(stdout, &r, 1);
            last = r.lsn;
        }
        if (lrc < 0)
            rc = cli_lib_error(c, lrc, "cannot read the log after LSN %llu",
                               (unsigned long long)last);
        bindlog_iter_close(it);
        if (rc != CLI_OK)
            return rc;
        if (last < head) {
            cli_warn(c, "records %llu..%llu were compacted before they could be shown",
                     (unsigned long long)(last + 1), (unsigned long long)head);
            last = head;
        }
        if (fflush(stdout) != 0)
            return CLI_STORE; /* the reader went away: cli_finish_output says so */
    }
    return CLI_OK;
}

static int dump_log(cli *c, bindlog *s, uint64_t from, uint64_t to, int json, int follow)
{
    bindlog_iter *it = NULL;
    bindlog_record r;
    bindlog_stats st;
    cli_progress p;
    uint64_t done = 0, total = 0, last = from > 0 ? from - 1 : 0;
    int rc;

    /* The expected count is only for the progress line. */
    int have_st = bindlog_stats_get(s, &st) == 0;
    if (have_st && st.log_records > 0) {
        uint64_t lo = from > st.base_lsn + 1 ? from : st.base_lsn + 1;
        uint64_t hi = to < st.head_lsn ? to : st.head_lsn;
        total = hi >= lo ? hi - lo + 1 : 0;
    }
    if ((rc = bindlog_log_iter(s, from, to, &it)) != 0)
        return cli_lib_error(c, rc, "cannot read the log");
    cli_progress_begin(&p, "dump", 0);
    if (!json)
        cli_print_record_header(stdout);
    while ((rc = bindlog_iter_next_record(it, &r)) == 1) {
        if (json)
            cli_json_record(stdout, &r);
        else
            cli_print_record(stdout, &r, 1);
        last = r.lsn;
        if ((++done & 4095) == 0)
            cli_progress_cb(&p, done, total);
    }
    cli_progress_end(&p);
    if (rc < 0)
        rc = cli_lib_error(c, rc, "cannot read the log after %llu records",
                           (unsigned long long)done);
    bindlog_iter_close(it);
    if (rc != 0)
        return rc;
    /* Nothing listed although the head was past `from`: those records were
     * compacted (the listing's snapshot is no older than `st`), so the
     * follow starts after them instead of reporting them as a gap. */
    if (follow && done == 0 && have_st && st.head_lsn > last)
        last = st.head_lsn;
    return follow ? follow_log(c, s, last, json) : CLI_OK;
}

static int dump_bindings(cli *c, bindlog *s, int json)
{
    bindlog_iter *it = NULL;
    bindlog_binding b;
    char t[CLI_TIME_MAX];
    int rc;

    if ((rc = bindlog_bindings_iter(s, &it)) != 0)
        return cli_lib_error(c, rc, "cannot read the bindings");
    while ((rc = bindlog_iter_next_binding(it, &b)) == 1) {
        cli_format_time(b.updated_ms, t);
        if (json) {
            cli_json j;
            cli_json_begin(&j, stdout);
            cli_json_str(&j, "key", b.key);
            cli_json_bool(&j, "bound", b.session_id[0] != '\0');
            cli_json_str(&j, "session_id", b.session_id);
            cli_json_u64(&j, "generation", b.generation);
            cli_json_u64(&j, "lsn", b.lsn);
            cli_json_i64(&j, "updated_ms", b.updated_ms);
            cli_json_time(&j, "updated", b.updated_ms);
            if (b.last_activity_ms != 0) {
                cli_json_i64(&j, "last_activity_ms", b.last_activity_ms);
                cli_json_time(&j, "last_activity", b.last_activity_ms);
            }
            cli_json_end(&j);
        } else {
            fputs("key=", stdout);
            cli_put_value(stdout, b.key, strlen(b.key));
            fputs(" session=", stdout);
            cli_put_value(stdout, b.session_id, strlen(b.session_id));
            printf(" generation=%llu lsn=%llu updated=%s", (unsigned long long)b.generation,
                   (unsigned long long)b.lsn, t);
            if (b.last_activity_ms != 0) {
                cli_format_time(b.last_activity_ms, t);
                printf(" activity=%s", t);
            }
            putchar('\n');
        }
    }
    bindlog_iter_close(it);
    if (rc < 0)
        return cli_lib_error(c, rc, "cannot read the bindings");
    return CLI_OK;
}

static int dump_sessions(cli *c, bindlog *s, int json)
{
    bindlog_iter *it = NULL;
    bindlog_session ss;
    unsigned char *origin;
    char t1[CLI_TIME_MAX], t2[CLI_TIME_MAX];
    int rc;

    if ((origin = malloc(BINDLOG_ORIGIN_MAX)) == NULL)
        return cli_lib_error(c, BINDLOG_ENOMEM, "cannot read the sessions");
    if ((rc = bindlog_sessions_iter(s, &it)) != 0) {
        free(origin);
        return cli_lib_error(c, rc, "cannot read the sessions");
    }
    while ((rc = bindlog_iter_next_session(it, &ss, origin, BINDLOG_ORIGIN_MAX)) == 1) {
        size_t on = ss.origin_len < BINDLOG_ORIGIN_MAX ? ss.origin_len : BINDLOG_ORIGIN_MAX;
        cli_format_time(ss.created_ms, t1);
        cli_format_time(ss.ended_ms, t2);
        if (json) {
            cli_json j;
            cli_json_begin(&j, stdout);
            cli_json_str(&j, "session_id", ss.session_id);
            cli_json_str(&j, "key", ss.key);
            cli_json_str(&j, "parent_id", ss.parent_id);
            cli_json_u64(&j, "created_lsn", ss.created_lsn);
            cli_json_i64(&j, "created_ms", ss.created_ms);
            cli_json_time(&j, "created", ss.created_ms);
            cli_json_bool(&j, "live", ss.ended_lsn == 0);
            cli_json_u64(&j, "ended_lsn", ss.ended_lsn);
            cli_json_i64(&j, "ended_ms", ss.ended_ms);
            if (ss.ended_lsn != 0)
                cli_json_time(&j, "ended", ss.ended_ms);
            else
                cli_json_null(&j, "ended");
            cli_json_str(&j, "end_reason", ss.end_reason);
            cli_json_bytes(&j, "origin", origin, on);
            cli_json_end(&j);
        } else {
            size_t n = on < ORIGIN_SHOW ? on : ORIGIN_SHOW;
            fputs("session=", stdout);
            cli_put_value(stdout, ss.session_id, strlen(ss.session_id));
            fputs(" key=", stdout);
            cli_put_value(stdout, ss.key, strlen(ss.key));
            fputs(" parent=", stdout);
            cli_put_value(stdout, ss.parent_id, strlen(ss.parent_id));
            printf(" created_lsn=%llu created=%s", (unsigned long long)ss.created_lsn, t1);
            if (ss.ended_lsn != 0) {
                printf(" ended_lsn=%llu ended=%s reason=", (unsigned long long)ss.ended_lsn, t2);
                cli_put_value(stdout, ss.end_reason, strlen(ss.end_reason));
            } else {
                fputs(" live", stdout);
            }
            fputs(" origin=", stdout);
            cli_put_value(stdout, origin, n);
            if (n < ss.origin_len)
                printf("...(%zu bytes)", ss.origin_len);
            putchar('\n');
        }
    }
    bindlog_iter_close(it);
    free(origin);
    if (rc < 0)
        return cli_lib_error(c, rc, "cannot read the sessions");
    return CLI_OK;
}

static int run_dump(cli *c)
{
    static const cli_opt opts[] = {{"--json", NULL, 0, OPT_JSON},
                                   {"--log", NULL, 0, OPT_LOG},
                                   {"--bindings", NULL, 0, OPT_BINDINGS},
                                   {"--sessions", NULL, 0, OPT_SESSIONS},
                                   {"--from", NULL, 1, OPT_FROM},
                                   {"--to", NULL, 1, OPT_TO},
                                   {"--follow", "-f", 0, OPT_FOLLOW},
                                   CLI_OPT_END};
    cli_args a;
    const char *v;
    bindlog *s = NULL;
    uint64_t from = 0, to = UINT64_MAX;
    int json = 0, what = 0, range = 0, follow = 0, have_to = 0, r, rc;

    cli_args_init(&a, c, &cli_cmd_dump);
    while ((r = cli_next(&a, opts, &v)) != CLI_ARG_DONE) {
        switch (r) {
        case CLI_ARG_HELP:
            return CLI_OK;
        case CLI_ARG_ERROR:
            return CLI_USAGE;
        case CLI_ARG_POSITIONAL:
            return cli_usage_error(c, "unexpected argument '%s'", v);
        case OPT_JSON:
            json = 1;
            break;
        case OPT_LOG:
        case OPT_BINDINGS:
        case OPT_SESSIONS:
            if (what != 0 && what != r)
                return cli_usage_error(c, "choose one of --log, --bindings, --sessions");
            what = r;
            break;
        case OPT_FROM:
            if (cli_parse_u64(c, "--from", v, &from) != 0)
                return CLI_USAGE;
            range = 1;
            break;
        case OPT_TO:
            if (cli_parse_u64(c, "--to", v, &to) != 0)
                return CLI_USAGE;
            range = have_to = 1;
            break;
        case OPT_FOLLOW:
            follow = 1;
            break;
        }
    }
    if (what == 0)
        what = OPT_LOG;
    if (range && what != OPT_LOG)
        return cli_usage_error(c, "--from and --to apply to --log only");
    if (follow && what != OPT_LOG)
        return cli_usage_error(c, "--follow applies to --log only");
    if (follow && have_to)
        return cli_usage_error(c, "--follow never ends at an LSN: leave out --to");
    if (from > to)
        return cli_usage_error(c, "--from %llu is after --to %llu", (unsigned long long)from,
                               (unsigned long long)to);
    if ((rc = cli_open(c, 1, &s)) != 0)
        return rc;
    if (what == OPT_LOG)
        rc = dump_log(c, s, from, to, json, follow);
    else if (what == OPT_BINDINGS)
        rc = dump_bindings(c, s, json);
    else
        rc = dump_sessions(c, s, json);
    bindlog_close(s);
    return rc;
}

const cli_command cli_cmd_dump = {
    "dump", "list log records, bindings or sessions",
    "dump [--log | --bindings | --sessions] [--from LSN] [--to LSN] [--json]\n"
    "     dump --log --follow [--from LSN] [--json]\n"
    "\n"
    "List the log (default; --from/--to bound the LSNs, inclusive), every\n"
    "binding (tombstones included, in key byte order) or every session (in id\n"
    "byte order).  Text lines are key=value fields, values quoted when empty or\n"
    "holding spaces, bytes that could drive a terminal shown as \\xNN.  --json\n"
    "writes one JSON object per line (see docs/tools.md for the rules).\n"
    "--follow (-f) then keeps printing the records committed afterwards, by\n"
    "any process, each once and in order, until interrupted (SIGINT or\n"
    "SIGTERM: exit 0).\n",
    run_dump};
