/*
 * module.c -- loading backends that live in a separate module (module.h).
 */
#define _GNU_SOURCE
#include "core/module.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "platform/platform.h"

#ifndef BINDLOG_INSTALL_LIBDIR
#define BINDLOG_INSTALL_LIBDIR "/usr/local/lib"
#endif
/* The install libdir relative to the bindir: where a program linked with
 * libbindlog.a and installed in PREFIX/bin finds PREFIX/lib after the tree
 * was moved (a relocatable install). */
#ifndef BINDLOG_BIN_TO_LIBDIR
#define BINDLOG_BIN_TO_LIBDIR "../lib"
#endif

/* The modules this library knows: which schemes each one serves, its file
 * name, the environment variable that overrides where it is, and what a
 * user installs to get it. */
typedef struct module_def {
    const char *name;
    const char *schemes[3];
    const char *file;
    const char *env;
    const char *package;
} module_def;

static const module_def modules[] = {
    {"etcd", {"etcd://", "etcds://", NULL}, "libbindlog-etcd.so", "BINDLOG_ETCD_MODULE",
     "the bindlog etcd module (libbindlog-etcd.so, built with libcurl and json-c; "
     "`cmake --install` puts it beside libbindlog)"},
};
#define NMODULES (sizeof(modules) / sizeof(modules[0]))

/* Loaded (or built-in) backends, per module; set once, never cleared: a
 * module is never unloaded, since handles may point into it. */
static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static const bl_backend_ops *loaded[NMODULES];

void bl_module_builtin(const char *name, const bl_backend_ops *ops)
{
    pthread_mutex_lock(&load_mu);
    for (size_t i = 0; i < NMODULES; i++)
        if (strcmp(modules[i].name, name) == 0)
            loaded[i] = ops;
    pthread_mutex_unlock(&load_mu);
}

/* Append to a bounded message; a full buffer keeps what fitted. */
static void add(char *buf, size_t cap, const char *fmt, const char *a, const char *b)
{
    size_t used = strlen(buf);
    if (used + 1 < cap)
        snprintf(buf + used, cap - used, fmt, a, b);
}

/* The directory holding libbindlog's code, with a trailing '/', in dir[cap];
 * 0 if it cannot be told. */
static int own_dir(char *dir, size_t cap)
{
    Dl_info info;
    if (dladdr((void *)&bl_module_backend, &info) == 0 || info.dli_fname == NULL)
        return 0;
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash == NULL)
        return 0; /* a bare name: the main program found through PATH */
    size_t n = (size_t)(slash - info.dli_fname) + 1;
    if (n >= cap)
        return 0;
    memcpy(dir, info.dli_fname, n);
    dir[n] = '\0';
    return 1;
}

/* Try the module file at `path`: 1 with *ops, or 0 with the reason added to
 * tried[] (not there, not loadable, not ours, refused). */
static int try_path(const char *path, const bl_backend_ops **ops, char *tried, size_t tcap)
{
    char why[320];
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        const char *e = dlerror();
        add(tried, tcap, "%s (%s); ", path, e != NULL ? e : "cannot be loaded");
        return 0;
    }
    bl_module_init_fn init;
    void *sym = dlsym(dl, BL_MODULE_INIT_SYMBOL);
    memcpy(&init, &sym, sizeof init); /* ISO C has no object-to-function cast */
    if (init == NULL) {
        add(tried, tcap, "%s (%s); ", path, "not a bindlog module: no " BL_MODULE_INIT_SYMBOL);
        dlclose(dl);
        return 0;
    }
    bl_module_host host = {BL_MODULE_ABI, BINDLOG_VERSION_STRING, sizeof(struct bindlog),
                           sizeof(bindlog_options), sizeof(struct bindlog_iter), bl_err_slot};
    why[0] = '\0';
    const bl_module_info *info = init(&host, why, sizeof why);
    if (info == NULL || info->ops == NULL) {
        add(tried, tcap, "%s (it refused libbindlog: %s); ", path,
            why[0] ? why : "no reason given");
        /* it may have started threads or registered handlers: keep it */
        return 0;
    }
    if (info->abi != BL_MODULE_ABI || info->version == NULL ||
        strcmp(info->version, BINDLOG_VERSION_STRING) != 0) {
        snprintf(why, sizeof why, "module version %s (interface %u); libbindlog is %s "
                                  "(interface %u): install the module of the same release",
                 info->version ? info->version : "(none)", info->abi, BINDLOG_VERSION_STRING,
                 (unsigned)BL_MODULE_ABI);
        add(tried, tcap, "%s (%s); ", path, why);
        return 0;
    }
    *ops = info->ops;
    return 1;
}

/* Load module mi (load_mu held): 1 with *ops, or BINDLOG_ENOTSUP with the
 * places tried in the last-error detail. */
static int load(size_t mi, const bl_backend_ops **ops)
{
    const module_def *m = &modules[mi];
    char tried[1024] = "", path[4096] = "", dir[4000];
    const char *env = bl_plat_secure_getenv(m->env);

    if (env != NULL && env[0] != '\0') {
        if (try_path(env, ops, tried, sizeof tried))
            return 1;
    } else {
        char inst[4096];
        if (own_dir(dir, sizeof dir)) {
            snprintf(path, sizeof path, "%s%s", dir, m->file);
            if (try_path(path, ops, tried, sizeof tried))
                return 1;
            /* a program in PREFIX/bin: PREFIX/lib, if that exists */
            snprintf(inst, sizeof inst, "%s%s/%s", dir, BINDLOG_BIN_TO_LIBDIR, m->file);
            if (access(inst, F_OK) == 0 && try_path(inst, ops, tried, sizeof tried))
                return 1;
        }
        snprintf(inst, sizeof inst, "%s/%s", BINDLOG_INSTALL_LIBDIR, m->file);
        if (strcmp(inst, path) != 0 && try_path(inst, ops, tried, sizeof tried))
            return 1;
    }
    size_t n = strlen(tried);
    if (n >= 2 && tried[n - 2] == ';')
        tried[n - 2] = '\0';
    return bl_err_set(BINDLOG_ENOTSUP, "%s locations need %s; tried %s%s%s", m->name,
                      m->package, tried, env != NULL && env[0] != '\0' ? ", named by $" : "",
                      env != NULL && env[0] != '\0' ? m->env : "");
}

int bl_module_backend(const char *location, const bl_backend_ops **ops)
{
    for (size_t i = 0; i < NMODULES; i++) {
        const module_def *m = &modules[i];
        int match = 0;
        for (const char *const *s = m->schemes; *s != NULL; s++)
            match |= strncmp(location, *s, strlen(*s)) == 0;
        if (!match)
            continue;
        int rc = 1;
        pthread_mutex_lock(&load_mu);
        if (loaded[i] == NULL && (rc = load(i, &loaded[i])) != 1)
            loaded[i] = NULL;
        *ops = loaded[i];
        pthread_mutex_unlock(&load_mu);
        return rc;
    }
    return 0;
}

const bl_module_info *bl_module_accept(const bl_module_host *host, const bl_module_info *info,
                                       char *why, size_t cap)
{
    if (host == NULL || host->abi != BL_MODULE_ABI) {
        snprintf(why, cap, "module interface %u, libbindlog's %u", (unsigned)BL_MODULE_ABI,
                 host ? host->abi : 0);
        return NULL;
    }
    if (host->version == NULL || strcmp(host->version, info->version) != 0) {
        snprintf(why, cap, "the module is version %s, libbindlog %s: install the module of "
                           "the same release",
                 info->version, host->version ? host->version : "(unknown)");
        return NULL;
    }
    if (host->handle_size != sizeof(struct bindlog) ||
        host->options_size != sizeof(bindlog_options) ||
        host->iter_size != sizeof(struct bindlog_iter) || host->err_slot == NULL) {
        snprintf(why, cap, "libbindlog %s was built with another layout of its internal "
                           "structs: rebuild the module with it",
                 host->version);
        return NULL;
    }
    bl_err_forward(host->err_slot);
    return info;
}
