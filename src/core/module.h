/*
 * module.h -- backends that live in a separately loaded module.
 *
 * libbindlog itself holds the LMDB backend only, so that it depends on
 * LMDB, xxHash and libc and nothing else.  The etcd backend (libcurl,
 * json-c, OpenSSL behind them) is a module, libbindlog-etcd.so, loaded with
 * dlopen() on the first open of an etcd:// or etcds:// location and never
 * unloaded.  Where it is looked for, in order:
 *
 *   1. $BINDLOG_ETCD_MODULE, a full path (tests; an operator's override).
 *      When set, it is the only place tried.  Ignored in set-user-ID
 *      programs (secure_getenv).
 *   2. the directory of the file holding libbindlog's code (dladdr): the
 *      directory of libbindlog.so, or of the program that linked
 *      libbindlog.a; and, if it exists, the libdir relative to that
 *      directory as an installed bindir (BINDLOG_BIN_TO_LIBDIR, "../lib"):
 *      a relocated install of a statically linked program;
 *   3. the install libdir compiled in (BINDLOG_INSTALL_LIBDIR).
 *
 * Without it the open fails with BINDLOG_ENOTSUP and a last-error message
 * that names every place tried and what to install.
 *
 * The handshake.  A module exports one symbol, bindlog_module_init
 * (BL_MODULE_INIT_SYMBOL), of type bl_module_init_fn.  The loader passes a
 * bl_module_host; the module checks that the host is its own build (same
 * BL_MODULE_ABI, same library version string, same struct sizes) and
 * answers with its bl_module_info, whose backend ops the loader then uses
 * for every handle of those schemes.  Either side refusing the other is
 * BINDLOG_ENOTSUP with the reason ("libbindlog-etcd.so is version 0.2.0,
 * libbindlog 0.1.0").
 *
 * What the module shares with its host.  The module links its own copy of
 * the pure core, the LMDB backend and the maintenance code (its mirror of an
 * etcd store is a scratch LMDB store; docs/design.md explains the choice).
 * Those copies keep no state that matters across the boundary except the
 * calling thread's last-error message, which must be the host's so that
 * bindlog_last_error() shows what the backend said: the host hands over
 * err_slot (error.h, bl_err_forward) and the module's error functions write
 * the host's buffer.  Handles, iterators and options cross the boundary as
 * the structs of core/backend.h, whose layout the version check pins.
 */
#ifndef BL_MODULE_H
#define BL_MODULE_H

#include <stddef.h>

#include "core/backend.h"

/* Bumped whenever bl_module_host, bl_module_info or the seam's structs
 * (core/backend.h) change in a way an older module would misread. */
#define BL_MODULE_ABI 1

#define BL_MODULE_INIT_SYMBOL "bindlog_module_init"

/* What the host hands the module. */
typedef struct bl_module_host {
    unsigned abi;             /* BL_MODULE_ABI of the host */
    const char *version;      /* BINDLOG_VERSION_STRING of the host */
    size_t handle_size;       /* sizeof(struct bindlog) */
    size_t options_size;      /* sizeof(bindlog_options) */
    size_t iter_size;         /* sizeof(struct bindlog_iter) */
    /* The calling thread's last-error buffer and its "detail set" flag
     * (bl_err_slot in error.h). */
    void (*err_slot)(char **msg, int **set);
} bl_module_host;

/* What the module answers.  Static storage in the module. */
typedef struct bl_module_info {
    unsigned abi;             /* BL_MODULE_ABI of the module */
    const char *version;      /* BINDLOG_VERSION_STRING of the module */
    const bl_backend_ops *ops;
} bl_module_info;

/* The module's entry: NULL, with the reason in why[cap], if it refuses the
 * host.  Called once, under the loader's lock. */
typedef const bl_module_info *(*bl_module_init_fn)(const bl_module_host *host, char *why,
                                                   size_t cap);

/*
 * The backend for `location` if its scheme is one a module serves
 * ("etcd://", "etcds://"): loads the module on first use.  Returns 1 with
 * *ops set, 0 if no module serves that scheme (the caller decides), or
 * BINDLOG_ENOTSUP with the last-error detail set when the module cannot be
 * loaded.  Thread-safe.
 */
int bl_module_backend(const char *location, const bl_backend_ops **ops);

/*
 * Serve the schemes of module `name` ("etcd") with `ops` linked into the
 * program, without loading anything: for test programs that drive a
 * backend's internals and so must use the copy they link.  Call before the
 * first open of such a location.
 */
void bl_module_builtin(const char *name, const bl_backend_ops *ops);

/*
 * The module's side of the handshake (a module calls it from its entry):
 * checks `host` against this build, installs the error forwarding and
 * returns `info`, or NULL with the reason in why[cap].
 */
const bl_module_info *bl_module_accept(const bl_module_host *host, const bl_module_info *info,
                                       char *why, size_t cap);

#endif /* BL_MODULE_H */
