/*
 * cli_etcd.c -- the tool's etcd options: TLS files, credentials and the Txn
 * size, with etcdctl's names (docs/scale-out.md, docs/tools.md).
 *
 *   bindlog -d etcds://HOST:PORT/PREFIX --cacert CA.pem --cert C.pem
 *           --key C.key --user gw[:PASSWORD] [--password PASSWORD]
 *           [--max-txn-ops N] COMMAND ...
 *
 * They go before the command, like -d.  Each one that is not given is left
 * NULL in bindlog_options, where the library takes the ETCDCTL_* variable
 * etcdctl reads (ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY, ETCDCTL_USER,
 * ETCDCTL_PASSWORD): the environment is the better place for a password,
 * which on a command line is visible to every user of the machine.
 *
 * The tool never prints a password: not the option's value, and not a
 * location that carries one ("etcds://user:pw@host/P" is refused before
 * the library sees it, without being echoed).
 */
#include "cli.h"

#include <string.h>

/* The flags, their help, and the bindlog_options field each one sets. */
enum { E_CACERT, E_CERT, E_KEY, E_USER, E_PASSWORD, E_MAX_TXN_OPS, E_COUNT };

static const struct {
    const char *name;
    const char *help;
} flags[E_COUNT] = {
    [E_CACERT] = {"--cacert", "FILE  CA certificates that sign the etcd servers' (etcds://)"},
    [E_CERT] = {"--cert", "FILE    client certificate (etcds://)"},
    [E_KEY] = {"--key", "FILE     its private key"},
    [E_USER] = {"--user", "USER[:PASSWORD]  etcd user (auth)"},
    [E_PASSWORD] = {"--password", "PASSWORD  its password (better: ETCDCTL_PASSWORD)"},
    [E_MAX_TXN_OPS] = {"--max-txn-ops", "N  the etcd servers' --max-txn-ops (default 128)"},
};

int cli_etcd_flag(cli *c, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *val = NULL;
    int which = -1, next = *i + 1;

    for (int k = 0; k < E_COUNT && which < 0; k++) {
        size_t n = strlen(flags[k].name);
        if (strcmp(a, flags[k].name) == 0) {
            if (next >= argc)
                return -cli_usage_error(c, "option '%s' needs a value", flags[k].name);
            val = argv[next++];
            which = k;
        } else if (strncmp(a, flags[k].name, n) == 0 && a[n] == '=') {
            val = a + n + 1;
            which = k;
        }
    }
    if (which < 0)
        return 0;
    if (val[0] == '\0')
        return -cli_usage_error(c, "option '%s' needs a non-empty value", flags[which].name);
    switch (which) {
    case E_CACERT:
        c->etcd.cacert = val;
        break;
    case E_CERT:
        c->etcd.cert = val;
        break;
    case E_KEY:
        c->etcd.key = val;
        break;
    case E_USER: {
        /* etcdctl's "user:password", split in a copy */
        size_t n = strcspn(val, ":");
        if (n == 0 || n >= sizeof c->etcd.user_buf)
            return -cli_usage_error(c, "option '--user' needs a user name of 1..%zu bytes",
                                    sizeof c->etcd.user_buf - 1);
        memcpy(c->etcd.user_buf, val, n);
        c->etcd.user_buf[n] = '\0';
        c->etcd.user = c->etcd.user_buf;
        if (val[n] == ':')
            c->etcd.password = val + n + 1;
        break;
    }
    case E_PASSWORD:
        c->etcd.password = val;
        break;
    default: { /* E_MAX_TXN_OPS */
        uint64_t n;
        if (cli_parse_u64(c, "--max-txn-ops", val, &n) != 0)
            return -CLI_USAGE;
        if (n < 16 || n > 1000000)
            return -cli_usage_error(c, "--max-txn-ops must be 16..1000000");
        c->etcd.max_txn_ops = (unsigned)n;
        break;
    }
    }
    *i = next;
    return 1;
}

/* 1 if the authority of a "scheme://" location holds '@': credentials. */
static int has_credentials(const char *loc)
{
    const char *p = strstr(loc, "://");
    if (p == NULL)
        return 0;
    p += 3;
    size_t n = strcspn(p, "/");
    return memchr(p, '@', n) != NULL;
}

int cli_etcd_options(const cli *c, bindlog_options *o)
{
    if (has_credentials(c->dir))
        return cli_usage_error(c, "the store location holds credentials ('@' before the "
                                  "prefix): they never go there; use --user and "
                                  "ETCDCTL_PASSWORD (or --password)");
    o->etcd_cacert = c->etcd.cacert;
    o->etcd_cert = c->etcd.cert;
    o->etcd_key = c->etcd.key;
    o->etcd_user = c->etcd.user;
    o->etcd_password = c->etcd.password;
    o->etcd_max_txn_ops = c->etcd.max_txn_ops;
    return 0;
}

void cli_etcd_usage(FILE *f)
{
    fprintf(f, "etcd options (before COMMAND; DIR etcd://HOST:PORT/PREFIX or etcds:// for TLS):\n");
    for (int k = 0; k < E_COUNT; k++)
        fprintf(f, "  %s %s\n", flags[k].name, flags[k].help);
    fprintf(f, "  unset ones come from ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY, ETCDCTL_USER,\n"
               "  ETCDCTL_PASSWORD and BINDLOG_ETCD_MAX_TXN_OPS.\n");
}
