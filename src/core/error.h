/*
 * error.h -- the calling thread's last error message (bindlog_last_error).
 *
 * Every public call clears the message on entry and, when it returns a
 * negative code, leaves one that names what failed: the call and its
 * subject ("split agent:main:x"), then the detail a lower layer gave
 * ("key is not bound", "data.mdb: page 485 of table log is damaged") or,
 * when none did, the code's bindlog_strerror() text.
 *
 * Lower layers set a detail with bl_err_set() where they know it; the API
 * layer adds the context with bl_api_done().  The message lives in a
 * thread-local buffer, so a detail must be set in the thread whose call
 * will return the code: the group-commit leader works for other threads,
 * and passes each request's detail back in the request (core/group.h).
 *
 * Messages never contain a raw control byte: caller bytes (keys may hold
 * any byte but NUL) go through bl_err_bytes(), which escapes and bounds
 * them.
 */
#ifndef BL_ERROR_H
#define BL_ERROR_H

#include <stddef.h>

/* Longest message kept, bytes (longer ones are cut with "..."). */
#define BL_ERRMSG_MAX 640
/* Room for one escaped, bounded caller string inside a message. */
#define BL_ERR_QUOTE_MAX 160

#if defined(__GNUC__)
#define BL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define BL_PRINTF(f, a)
#endif

/* Forget the calling thread's message (it reads as ""). */
void bl_err_clear(void);

/* Replace the calling thread's message with the formatted detail; returns
 * rc so that `return bl_err_set(BINDLOG_ECORRUPT, "...")` reads well. */
int bl_err_set(int rc, const char *fmt, ...) BL_PRINTF(2, 3);
#ifdef __clang_analyzer__
/* For clang's static analyzer only (scripts/lint.sh): it cannot see into
 * error.c, so it took `return bl_err_set(BINDLOG_ECORRUPT, ...)` for a
 * return of any value, 0 among them, and reported the outputs such an
 * error path leaves unset as read uninitialized.  This says what the
 * function returns; no build compiles it. */
#define bl_err_set(rc, ...) (bl_err_set((rc), __VA_ARGS__), (rc))
#endif

/* A public call the library made itself failed, and finished its message
 * (bl_api_done), which the next bl_api_done up would drop for the code's
 * words: keep it as this layer's detail, "<formatted fmt> (<its message>)".
 * Returns rc. */
int bl_err_nested(int rc, const char *fmt, ...) BL_PRINTF(2, 3);
#ifdef __clang_analyzer__
#define bl_err_nested(rc, ...) (bl_err_nested((rc), __VA_ARGS__), (rc))
#endif

/* 1 when a detail was set since the last clear. */
int bl_err_isset(void);

/* The calling thread's message ("" when none); valid until the thread's
 * next bindlog call. */
const char *bl_err_get(void);

/*
 * The end of a public call.  rc >= 0: the message is cleared.  rc < 0: the
 * message becomes "<context>: <detail>", where the context is the
 * formatted fmt (the call and its subject) and the detail is what a lower
 * layer set, or bindlog_strerror(rc) when nothing was set.  Returns rc.
 */
int bl_api_done(int rc, const char *fmt, ...) BL_PRINTF(2, 3);

/* bl_api_done for a context that costs work to build, such as a quoted key:
 * its arguments are evaluated only when the call failed (a successful get
 * spent a sixth of its time escaping its key into a message nobody read).
 * rc is evaluated twice: pass a variable. */
#define BL_API_DONE(rc, ...) ((rc) >= 0 ? bl_api_ok(rc) : bl_api_done((rc), __VA_ARGS__))
static inline int bl_api_ok(int rc)
{
    bl_err_clear();
    return rc;
}

/*
 * Write caller bytes into out (cap bytes, NUL-terminated) so that they can
 * go inside a message: printable ASCII as is, backslash and every other
 * byte as \xNN, and at most about cap - 4 output bytes, ending in "..."
 * when cut.  Returns out.
 */
char *bl_err_bytes(char *out, size_t cap, const void *p, size_t n);

/*
 * Modules (core/module.h).  bl_err_slot gives the calling thread's own
 * buffer (BL_ERRMSG_MAX bytes) and flag; a module's copy of this file,
 * given its host's bl_err_slot with bl_err_forward(), then reads and writes
 * the host's message instead of its own.
 */
void bl_err_slot(char **msg, int **set);
void bl_err_forward(void (*slot)(char **msg, int **set));

#endif /* BL_ERROR_H */
