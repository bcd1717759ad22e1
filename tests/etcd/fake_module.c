/*
 * fake_module.c -- stand-ins for libbindlog-etcd.so that the loader must
 * refuse (tests/test_etcd_module.c).  Built twice:
 *   FAKE_MODE 1  answers with another release's version string;
 *   FAKE_MODE 2  refuses its host, with a reason.
 * Neither ever serves a call: the loader refuses them first.
 */
#include <stdio.h>

#include "core/module.h"

#if FAKE_MODE == 1
static const bl_backend_ops no_ops = {.name = "fake", .scheme = "etcd://"};
static const bl_module_info info = {BL_MODULE_ABI, "0.0.0-fake", &no_ops};
#endif

__attribute__((visibility("default"))) const bl_module_info *
bindlog_module_init(const bl_module_host *host, char *why, size_t cap);

__attribute__((visibility("default"))) const bl_module_info *
bindlog_module_init(const bl_module_host *host, char *why, size_t cap)
{
    (void)host;
#if FAKE_MODE == 1
    (void)why;
    (void)cap;
    return &info;
#else
    snprintf(why, cap, "this fake module refuses every host");
    return NULL;
#endif
}
