/*
 * stream_base.h -- the history stream_fuzzer's scratch store starts from.
 *
 * Shared by stream_fuzzer.c (which imports each input into a store holding
 * this history) and make_stream_seeds.c (whose incremental exports continue
 * it), so that incremental seeds start exactly at the scratch store's
 * head + 1.  Event times come from *clock, which each call advances.
 */
#ifndef BINDLOG_FUZZ_STREAM_BASE_H
#define BINDLOG_FUZZ_STREAM_BASE_H

#include <stdint.h>

#include "bindlog.h"

#define BL_STREAM_BASE_TIME 1767225600000 /* 2026-01-01 */

/* 5 events: bind, split, new_session, invalidate, unbind.  0 or an error. */
static inline int base_history(bindlog *s, int64_t *clock)
{
    int rc;
    *clock += 1000;
    if ((rc = bindlog_bind(s, "agent:main:telegram:dm:1", "A", "", NULL, "{\"peer\":1}", 10,
                           NULL)) != BINDLOG_APPLIED)
        return rc < 0 ? rc : BINDLOG_EINVAL;
    *clock += 1000;
    if ((rc = bindlog_split(s, "agent:main:telegram:dm:1", "A", "A1", 1, NULL, 0, NULL)) !=
        BINDLOG_APPLIED)
        return rc < 0 ? rc : BINDLOG_EINVAL;
    *clock += 1000;
    if ((rc = bindlog_new_session(s, "agent:main:discord:9", "B", NULL, "", 0, NULL)) !=
        BINDLOG_APPLIED)
        return rc < 0 ? rc : BINDLOG_EINVAL;
    *clock += 1000;
    if ((rc = bindlog_invalidate(s, "agent:main:telegram:dm:1", "stop", NULL)) != BINDLOG_APPLIED)
        return rc < 0 ? rc : BINDLOG_EINVAL;
    *clock += 1000;
    if ((rc = bindlog_unbind(s, "agent:main:discord:9", NULL, NULL)) != BINDLOG_APPLIED)
        return rc < 0 ? rc : BINDLOG_EINVAL;
    return 0;
}

#endif /* BINDLOG_FUZZ_STREAM_BASE_H */
