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
static _Thread_local char msg[BL_ERRMSG_MAX];
static _Thread_local int msg_set;

/* vsnprintf into buf, marking a cut with "..." at the end. */
static void format_cut(char *buf, size_t cap, const char *fmt, va_list ap)
{
    int n = vsnprintf(buf, cap, fmt, ap);
    if (n >= 0 && (size_t)n >= cap && cap > 4)
        memcpy(buf + cap - 4, "...", 4);
}

void bl_err_clear(void)
{
    msg[0] = '\0';
    msg_set = 0;
}

int bl_err_set(int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    format_cut(msg, sizeof msg, fmt, ap);
    va_end(ap);
    msg_set = 1;
    return rc;
}

int bl_err_isset(void) { return msg_set; }

const char *bl_err_get(void) { return msg; }

int bl_api_done(int rc, const char *fmt, ...)
{
    char ctx[BL_ERRMSG_MAX], detail[BL_ERRMSG_MAX];
    va_list ap;

    if (rc >= 0) {
        bl_err_clear();
        return rc;
    }
    va_start(ap, fmt);
    format_cut(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    if (msg_set && msg[0] != '\0')
        memcpy(detail, msg, sizeof detail);
    else
        snprintf(detail, sizeof detail, "%s", bindlog_strerror(rc));
    int n = snprintf(msg, sizeof msg, "%s: %s", ctx, detail);
    if (n >= 0 && (size_t)n >= sizeof msg)
        memcpy(msg + sizeof msg - 4, "...", 4);
    msg_set = 0; /* the next layer up starts from a finished message */
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
