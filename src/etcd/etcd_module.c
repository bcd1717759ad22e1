/*
 * etcd_module.c -- the entry of libbindlog-etcd.so (core/module.h).
 *
 * libbindlog loads this module on the first open of an etcd:// or etcds://
 * location and calls bindlog_module_init(), the one symbol the module
 * exports (a linker version script hides every other).  The module carries
 * its own copy of the pure core, the LMDB backend and the maintenance code
 * (docs/design.md, "The etcd module"); bl_module_accept() checks that the
 * host is the same build and points this copy's error functions at the
 * host's last-error buffer.
 */
#include "core/module.h"
#include "etcd/etcd_store.h"

static const bl_module_info etcd_module = {BL_MODULE_ABI, BINDLOG_VERSION_STRING, &bl_etcd_ops};

__attribute__((visibility("default"))) const bl_module_info *
bindlog_module_init(const bl_module_host *host, char *why, size_t cap)
{
    return bl_module_accept(host, &etcd_module, why, cap);
}
