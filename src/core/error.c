/*
 * error.c -- the calling thread's last error message (error.h).
 */
#define _GNU_SOURCE
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "bindlog.h"

/* The message, and whether a lower layer set a detail since the last
 * clear.  Thread-local: each thread sees the outcome of its own calls. */
static _Thread_local char own_msg[BL_ERRMSG_MAX];
static _Thread_local int own_set;

/* In a module (core/module.h): the host's buffer instead of ours, so that
 * what the module's code says reaches bindlog_last_error().  Set once, at
 * the module's load, before any of its code runs for a caller. */
static void (*forward)(char **msg, int **set);

void bl_err_slot(char **msg, int **set)
{
    *msg = own_msg;
    *set = &own_set;
}

void bl_err_forward(void (*host_slot)(char **msg, int **set)) { forward = host_slot; }

/* The calling thread's buffer (BL_ERRMSG_MAX bytes) and flag. */
static char *cur(int **set)
{
    char *m;
    if (forward != NULL)
        forward(&m, set);
    else
        bl_err_slot(&m, set);
    return m;
}

/* vsnprintf into buf, marking a cut with "..." at the end. */
static void format_cut(char *buf, size_t cap, const char *fmt, va_list ap)
{
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): the callers va_start it */
    int n = vsnprintf(buf, cap, fmt, ap);
    if (n >= 0 && (size_t)n >= cap && cap > 4)
        memcpy(buf + cap - 4, "...", 4);
}

void bl_err_clear(void)
{
    int *set;
    char *msg = cur(&set);
    msg[0] = '\0';
    *set = 0;
}

/* (the name in parentheses: error.h's model for the analyzer is a macro) */
int(bl_err_set)(int rc, const char *fmt, ...)
{
    int *set;
    char *msg = cur(&set);
    va_list ap;
    va_start(ap, fmt);
    format_cut(msg, BL_ERRMSG_MAX, fmt, ap);
    va_end(ap);
    *set = 1;
    return rc;
}

int(bl_err_nested)(int rc, const char *fmt, ...)
{
    int *set;
    char *msg = cur(&set);
    char what[BL_ERRMSG_MAX], why[BL_ERRMSG_MAX];
    va_list ap;
    snprintf(why, sizeof why, "%s", msg);
    va_start(ap, fmt);
    format_cut(what, sizeof what, fmt, ap);
    va_end(ap);
    return bl_err_set(rc, "%s (%s)", what, why);
}

int bl_err_isset(void)
{
    int *set;
    cur(&set);
    return *set;
}

const char *bl_err_get(void)
{
    int *set;
    return cur(&set);
}

int bl_api_done(int rc, const char *fmt, ...)
{
    char ctx[BL_ERRMSG_MAX], detail[BL_ERRMSG_MAX];
    int *set;
    char *msg = cur(&set);
    va_list ap;

    if (rc >= 0) {
        bl_err_clear();
        return rc;
    }
    va_start(ap, fmt);
    format_cut(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    if (*set && msg[0] != '\0')
        memcpy(detail, msg, sizeof detail);
    else
        snprintf(detail, sizeof detail, "%s", bindlog_strerror(rc));
    int n = snprintf(msg, BL_ERRMSG_MAX, "%s: %s", ctx, detail);
    if (n >= 0 && n >= BL_ERRMSG_MAX)
        memcpy(msg + BL_ERRMSG_MAX - 4, "...", 4);
    *set = 0; /* the next layer up starts from a finished message */
    return rc;
}

char *bl_err_bytes(char *out, size_t cap, const void *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *b = p;
    size_t o = 0;

    if (cap == 0)
        return out;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = b[i];
        size_t need = (c >= 0x20 && c < 0x7f && c != '\\') ? 1 : 4;
        if (o + need + 4 > cap) { /* keep room for "..." and the NUL */
            if (cap >= 4) {
                o = o + 4 <= cap ? o : cap - 4;
                memcpy(out + o, "...", 3);
                o += 3;
            }
            break;
        }
        if (need == 1) {
            out[o++] = (char)c;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o < cap ? o : cap - 1] = '\0';
    return out;
}
