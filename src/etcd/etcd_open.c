/*
 * etcd_open.c -- opening an etcd store: the location, the security
 * settings, the registry of stores shared by the handles of a process, and
 * the store's creation (etcd_store.h, docs/scale-out.md).
 *
 * Location: "etcd://HOST:PORT[,HOST:PORT...]/PREFIX" (plain HTTP) or
 * "etcds://..." (TLS).  Credentials never go in it: an endpoint holding
 * '@' is refused without being echoed.
 *
 * Security settings come from bindlog_options (etcd_cacert, etcd_cert,
 * etcd_key, etcd_user, etcd_password); a string the caller left NULL takes
 * the ETCDCTL_* environment variable etcdctl reads (the TLS ones only for
 * etcds://), and ETCDCTL_USER may carry "user:password".  The client keeps
 * the password (to renew tokens) and wipes it at close; this file keeps
 * none of them beyond the open, only a salted hash to tell apart handles
 * opened on one location with different credentials, which must not
 * share a client.
 *
 * Handles of one process opened on the same location with the same
 * settings share one store object (bl_estore: the client, the group-commit
 * queue, the statistics), as LMDB handles share an environment.
 */
#define _GNU_SOURCE
#include "etcd/etcd_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- the registry of open stores -------------------------------------------- */

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static bl_estore *registry;

static void store_free(bl_estore *st)
{
    if (st == NULL)
        return;
    bl_etcd_close(st->c);
    bl_es_hints_free(st->hints);
    bl_group_destroy(&st->g);
    free(st->location);
    free(st->endpoints);
    free(st->prefix);
    free(st);
}

/* A registered store of `location` opened with the same settings, with one
 * more reference; NULL if none (registry_mu held). */
static bl_estore *registered(const char *location, uint64_t settings)
{
    for (bl_estore *st = registry; st != NULL; st = st->next)
        if (strcmp(st->location, location) == 0 && st->settings == settings) {
            st->refs++;
            return st;
        }
    return NULL;
}

/* ---- the location and the settings -------------------------------------------- */

/* Split "etcd[s]://EPS/PREFIX".  BINDLOG_EINVAL if malformed. */
static int parse_location(const char *loc, int tls, char **eps, unsigned char **prefix,
                          size_t *plen)
{
    const char *p = loc + strlen(tls ? "etcds://" : "etcd://");
    const char *slash = strchr(p, '/');
    *eps = NULL;
    *prefix = NULL;
    if (slash == NULL || slash == p || slash[1] == '\0')
        return BINDLOG_EINVAL; /* no endpoints, or no PREFIX */
    *eps = strndup(p, (size_t)(slash - p));
    *plen = strlen(slash + 1) + 1;
    *prefix = malloc(*plen);
    if (*eps == NULL || *prefix == NULL) {
        free(*eps);
        free(*prefix);
        return BINDLOG_ENOMEM;
    }
    memcpy(*prefix, slash + 1, *plen - 1);
    (*prefix)[*plen - 1] = '/';
    return 0;
}

/* The settings of one open: options, else the environment. */
typedef struct settings {
    bl_etcd_options eo;
    char *user_buf;  /* ETCDCTL_USER "user:password" split in place */
    size_t user_buf_len;
    unsigned max_txn_ops;
} settings;

static const char *env(const char *name)
{
    const char *v = secure_getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* The --max-txn-ops of the servers: the option, else
 * BINDLOG_ETCD_MAX_TXN_OPS, else etcd's default (there is no API to ask
 * etcd).  BINDLOG_EINVAL for an option out of range. */
static int max_txn_ops(unsigned opt, unsigned *out)
{
    const char *v = getenv("BINDLOG_ETCD_MAX_TXN_OPS");
    *out = BL_ETCD_DEFAULT_MAX_TXN_OPS;
    if (opt != 0) {
        if (opt < 16 || opt > 1000000)
            return bl_err_set(BINDLOG_EINVAL, "etcd_max_txn_ops %u is not 16..1000000", opt);
        *out = opt;
    } else if (v != NULL && *v != '\0') {
        char *end;
        unsigned long n = strtoul(v, &end, 10);
        if (*end == '\0' && n >= 16 && n <= 1000000)
            *out = (unsigned)n;
    }
    return 0;
}

static int settings_get(settings *s, const bindlog_options *o, int tls)
{
    bl_etcd_options init = BL_ETCD_OPTIONS_INIT;
    int rc;
    s->eo = init;
    s->user_buf = NULL;
    s->user_buf_len = 0;
    s->eo.tls = tls;
    s->eo.cacert = o->etcd_cacert ? o->etcd_cacert : tls ? env("ETCDCTL_CACERT") : NULL;
    s->eo.cert = o->etcd_cert ? o->etcd_cert : tls ? env("ETCDCTL_CERT") : NULL;
    s->eo.key = o->etcd_key ? o->etcd_key : tls ? env("ETCDCTL_KEY") : NULL;
    s->eo.user = o->etcd_user;
    s->eo.password = o->etcd_password;
    if (s->eo.user == NULL && (s->eo.user = env("ETCDCTL_USER")) != NULL &&
        strchr(s->eo.user, ':') != NULL) {
        /* etcdctl's "--user user:password" */
        if ((s->user_buf = strdup(s->eo.user)) == NULL)
            return BINDLOG_ENOMEM;
        s->user_buf_len = strlen(s->user_buf);
        char *colon = strchr(s->user_buf, ':');
        *colon = '\0';
        s->eo.user = s->user_buf;
        if (s->eo.password == NULL)
            s->eo.password = colon + 1;
    }
    if (s->eo.user != NULL && s->eo.password == NULL)
        s->eo.password = env("ETCDCTL_PASSWORD");
    if ((rc = max_txn_ops(o->etcd_max_txn_ops, &s->max_txn_ops)) != 0)
        return rc;
    s->eo.max_txn_ops = s->max_txn_ops;
    return 0;
}

static void settings_free(settings *s)
{
    if (s->user_buf != NULL) {
        explicit_bzero(s->user_buf, s->user_buf_len);
        free(s->user_buf);
    }
}

/* A salted hash of everything that makes two opens of one location
 * different clients (files, user, password, Txn limit).  The salt differs
 * per process, so the hash tells nothing outside it. */
static uint64_t salt;
static pthread_once_t salt_once = PTHREAD_ONCE_INIT;

static void salt_init(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    salt = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&salt;
}

static uint64_t settings_hash(const settings *s)
{
    const char *parts[] = {s->eo.cacert, s->eo.cert, s->eo.key, s->eo.user, s->eo.password};
    XXH3_state_t *x = XXH3_createState();
    uint64_t h = 0;
    pthread_once(&salt_once, salt_init);
    if (x == NULL)
        return 0;
    XXH3_64bits_reset_withSeed(x, salt);
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        unsigned char present = parts[i] != NULL;
        XXH3_64bits_update(x, &present, 1);
        if (parts[i] != NULL)
            XXH3_64bits_update(x, parts[i], strlen(parts[i]) + 1);
    }
    XXH3_64bits_update(x, &s->eo.tls, sizeof s->eo.tls);
    XXH3_64bits_update(x, &s->max_txn_ops, sizeof s->max_txn_ops);
    h = XXH3_64bits_digest(x);
    XXH3_freeState(x);
    return h;
}

/* ---- creating and checking the store ------------------------------------------- */

/*
 * Make the store: an atomic Txn that holds only if nothing at all is under
 * PREFIX/ and no enclosing prefix holds a store (whose tables would then
 * contain ours), and puts the meta records.
 */
static int create_store(bl_estore *st)
{
    bl_ebuf b = {0}, e = {0}, keys[5] = {{0}}, anc[16] = {{0}};
    bl_etcd_cmp cmps[1 + 16];
    bl_etcd_op ops[4];
    bl_etcd_txn_result res = {0};
    unsigned char fmt[4], head[16] = {0}, counts[BL_ES_COUNTS_BYTES_V3] = {0};
    size_t nc = 0, na = 0;
    int rc;

    bl_put32(fmt, BL_ES_FORMAT);
    if ((rc = bl_ebuf_append(&b, st->prefix, st->prefix_len)) != 0 ||
        (rc = bl_ebuf_reserve(&e, b.len + 2)) != 0)
        goto out;
    e.len = bl_etcd_prefix_end(b.p, b.len, e.p);
    cmps[nc++] = (bl_etcd_cmp){.target = BL_ETCD_CMP_VERSION, .result = BL_ETCD_EQUAL,
                               .key = b.p, .key_len = b.len, .range_end = e.p,
                               .range_end_len = e.len, .number = 0};
    /* enclosing prefixes "a" and "a/b" of "a/b/c/": their magic must not exist */
    for (size_t i = 0; i + 1 < st->prefix_len && na < 16; i++) {
        if (st->prefix[i] != '/' || i == 0)
            continue;
        if ((rc = bl_ebuf_append(&anc[na], st->prefix, i + 1)) != 0 ||
            (rc = bl_ebuf_append(&anc[na], "m/magic", 7)) != 0)
            goto out;
        cmps[nc++] = (bl_etcd_cmp){.target = BL_ETCD_CMP_CREATE, .result = BL_ETCD_EQUAL,
                                   .key = anc[na].p, .key_len = anc[na].len, .number = 0};
        na++;
    }
    if ((rc = bl_es_key(st, BL_ES_META, "magic", 5, &keys[0])) != 0 ||
        (rc = bl_es_key(st, BL_ES_META, "format", 6, &keys[1])) != 0 ||
        (rc = bl_es_key(st, BL_ES_META, "head", 4, &keys[2])) != 0 ||
        (rc = bl_es_key(st, BL_ES_META, "counts", 6, &keys[3])) != 0)
        goto out;
    ops[0] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = keys[0].p, .key_len = keys[0].len,
                          .value = BL_ES_MAGIC, .value_len = strlen(BL_ES_MAGIC)};
    ops[1] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = keys[1].p, .key_len = keys[1].len,
                          .value = fmt, .value_len = 4};
    ops[2] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = keys[2].p, .key_len = keys[2].len,
                          .value = head, .value_len = 16};
    ops[3] = (bl_etcd_op){.type = BL_ETCD_OP_PUT, .key = keys[3].p, .key_len = keys[3].len,
                          .value = counts, .value_len = sizeof counts};
    rc = bl_etcd_txn(st->c, cmps, nc, ops, 4, NULL, 0, &res);
    /* a failed compare (someone else made it, or something else is there)
     * and a retried Txn are sorted out by the caller's re-read */
out:
    bl_etcd_txn_result_free(&res);
    bl_ebuf_free(&b);
    bl_ebuf_free(&e);
    for (size_t i = 0; i < 5; i++)
        bl_ebuf_free(&keys[i]);
    for (size_t i = 0; i < 16; i++)
        bl_ebuf_free(&anc[i]);
    return rc;
}

/* 1 if anything at all is stored under PREFIX/, 0 if not, or an error. */
static int prefix_used(bl_estore *st)
{
    bl_ebuf e = {0};
    bl_etcd_kvs kvs = {0};
    int rc = bl_ebuf_reserve(&e, st->prefix_len + 2);
    if (rc == 0) {
        e.len = bl_etcd_prefix_end(st->prefix, st->prefix_len, e.p);
        rc = bl_etcd_range(st->c, st->prefix, st->prefix_len, e.p, e.len, 0, 1,
                           BL_ETCD_KEYS_ONLY, &kvs);
        if (rc == 0)
            rc = kvs.n > 0;
    }
    bl_etcd_kvs_free(&kvs);
    bl_ebuf_free(&e);
    return rc;
}

/* Check (and unless read-only, create) the store. */
static int attach(bl_estore *st, int read_only)
{
    bl_es_meta m;
    for (int attempt = 0; attempt < 3; attempt++) {
        int rc = bl_es_meta_read(st, 0, &m);
        if (rc != BINDLOG_ENOTSTORE)
            return rc;
        /* no magic: an empty prefix is a store to make; anything else is
         * not ours */
        if ((rc = prefix_used(st)) < 0)
            return rc;
        if (rc == 1) {
            /* a creator in another process may be half-way: look again */
            if ((rc = bl_es_meta_read(st, 0, &m)) != BINDLOG_ENOTSTORE)
                return rc;
            return BINDLOG_ENOTSTORE;
        }
        if (read_only)
            return BINDLOG_ENOTFOUND;
        if ((rc = create_store(st)) != 0)
            return rc;
    }
    return BINDLOG_ENOTSTORE;
}

/* The last-error detail of a failed attach: what the client said when it
 * spoke, else what the store's keys showed. */
static int attach_error(int rc)
{
    const char *client = bl_etcd_last_error();
    switch (rc) {
    case BINDLOG_ENOTSTORE:
        return bl_err_set(rc, "the prefix holds keys that are not a bindlog store, or lies "
                              "inside or around another store's prefix");
    case BINDLOG_ENOTFOUND:
        return bl_err_set(rc, "no store under this prefix (a read-only open creates none)");
    case BINDLOG_EVERSION:
        return bl_err_set(rc, "the store's format is newer than this library's (%u)",
                          (unsigned)BL_ES_FORMAT);
    case BINDLOG_ECORRUPT:
        if (client[0] == '\0')
            return bl_err_set(rc, "the store's meta records are damaged");
        break;
    default:
        break;
    }
    return client[0] != '\0' ? bl_err_set(rc, "%s", client) : rc;
}

/* ---- open and close ----------------------------------------------------------- */

int bl_es_open(bindlog *h, const bindlog_options *o)
{
    int tls = strncmp(h->path, "etcds://", 8) == 0;
    bl_estore *st = NULL;
    settings set;
    uint64_t key;
    int rc;

    /* durability: an acknowledged Txn is fsynced on a quorum already */
    if ((rc = settings_get(&set, o, tls)) != 0)
        goto out;
    key = settings_hash(&set);
    pthread_mutex_lock(&registry_mu);
    st = registered(h->path, key);
    pthread_mutex_unlock(&registry_mu);
    if (st != NULL) {
        h->be = st;
        st = NULL;
        goto out;
    }

    rc = BINDLOG_ENOMEM;
    if ((st = calloc(1, sizeof(*st))) == NULL)
        goto out;
    bl_group_init(&st->g);
    /* a commit is a network round trip: let steady writers share it */
    bl_group_fill(&st->g, BL_ES_GROUP_FILL_US);
    st->refs = 1;
    st->settings = key;
    st->max_txn_ops = set.max_txn_ops;
    if ((st->location = strdup(h->path)) == NULL)
        goto out;
    if ((rc = parse_location(h->path, tls, &st->endpoints, &st->prefix, &st->prefix_len)) != 0) {
        if (rc == BINDLOG_EINVAL)
            bl_err_set(rc, "not an etcd location: want %s://HOST:PORT[,HOST:PORT...]/PREFIX with "
                           "a non-empty PREFIX",
                       tls ? "etcds" : "etcd");
        goto out;
    }
    if ((rc = bl_etcd_open(st->endpoints, &set.eo, &st->c)) != 0) {
        bl_err_set(rc, "%s", bl_etcd_last_error());
        goto out;
    }
    if ((rc = attach(st, h->read_only)) != 0) {
        rc = attach_error(bl_es_error(rc, BINDLOG_EIO));
        goto out;
    }

    /* another thread may have opened the same store meanwhile: share its */
    pthread_mutex_lock(&registry_mu);
    bl_estore *other = registered(h->path, key);
    if (other == NULL) {
        st->next = registry;
        registry = st;
    }
    pthread_mutex_unlock(&registry_mu);
    h->be = other != NULL ? other : st;
    if (other == NULL)
        st = NULL;
out:
    store_free(st);
    settings_free(&set);
    return rc;
}

void bl_es_close(bindlog *h)
{
    bl_estore *st = bl_es_of(h);
    pthread_mutex_lock(&registry_mu);
    if (--st->refs > 0) {
        pthread_mutex_unlock(&registry_mu);
        h->be = NULL;
        return;
    }
    for (bl_estore **p = &registry; *p != NULL; p = &(*p)->next)
        if (*p == st) {
            *p = st->next;
            break;
        }
    pthread_mutex_unlock(&registry_mu);
    store_free(st);
    h->be = NULL;
}
