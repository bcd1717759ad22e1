/*
 * header_test.c -- include/bindlog.h must stand alone.
 *
 * Built with -std=c11 -Wall -Wextra -pedantic -Werror and nothing else on the
 * include path but include/: if the header needs another header first, uses
 * an extension, or declares something badly, this file does not compile, and
 * that is the failure.  Running it checks a few macros that callers rely on.
 */
#include <bindlog.h>

int main(void)
{
    bindlog_options opts = BINDLOG_OPTIONS_INIT;
    bindlog_result res;
    char hex[2 * BINDLOG_DIGEST_SIZE + 1];

    (void)res;
    (void)hex;
    if (opts.version != BINDLOG_OPTIONS_VERSION || opts.durability != BINDLOG_DURABILITY_FULL)
        return 1;
    if (BINDLOG_APPLIED != 0 || BINDLOG_ALREADY != 1 || BINDLOG_STALE != 2 || BINDLOG_MOVED != 3)
        return 1;
    if (BINDLOG_ANY_GENERATION != UINT64_MAX || BINDLOG_ENOTFOUND >= 0 ||
        BINDLOG_EPANIC != -14 || BINDLOG_ENOTSUP != -15 || BINDLOG_EFORK != BINDLOG_ERROR_MIN)
        return 1;
    if (sizeof res.session_id != BINDLOG_ID_MAX + 1)
        return 1;
    /* the limits on numbers: LSNs below 2^63, times in years 0-9999 */
    if (BINDLOG_LSN_MAX != 0x7fffffffffffffffu || BINDLOG_TIME_MIN_MS != -62167219200000 ||
        BINDLOG_TIME_MAX_MS != 253402300799999)
        return 1;
    return 0;
}
