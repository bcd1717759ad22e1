/*
 * failpoint.h -- named fault-injection points for test builds.
 *
 * A failpoint is a named place in the write path where a test can kill the
 * process, abort it, make the surrounding operation fail or slow it down, to
 * prove that a crash or an error there loses nothing acknowledged and leaves
 * a store that checks (docs/reliability.md lists every point and what each
 * action means there).
 *
 *     if ((rc = BL_FAILPOINT("commit.before")) != 0)
 *         ... fail the operation with rc (BINDLOG_EIO) ...
 *
 * Release builds: BL_FAILPOINT(name) is the constant 0 and no failpoint code
 * or string is compiled in.  Builds with BINDLOG_FAILPOINTS defined (the
 * internal `bindlog_faults` library of the test tree, CMake option
 * BINDLOG_FAILPOINTS) read the environment variable
 *
 *     BINDLOG_FAILPOINT=name[:action[:n]][,name[:action[:n]]...]
 *
 * once, at the first hit of any failpoint.  Actions:
 *     kill       SIGKILL to itself: a crash the process cannot intercept (default)
 *     abort      abort()
 *     eio        BL_FAILPOINT returns BINDLOG_EIO: the call site fails the
 *                operation it is in, as if the storage had reported an error
 *     sleep=MS   sleep MS milliseconds, then carry on (widens races, e.g.
 *                lets requests pile up into one group)
 * n: the action fires on the n-th hit of that name only (default 1); every
 * other hit is a no-op.  Except sleep, which fires on every hit from the
 * n-th on.  Hits are counted per process.  An unknown action or
 * a malformed entry is reported on stderr and ignored.
 */
#ifndef BL_FAILPOINT_H
#define BL_FAILPOINT_H

#ifdef BINDLOG_FAILPOINTS

/* Count a hit of failpoint `name` (a string literal: its address is not
 * kept) and fire its action if armed for this hit.  Returns 0, or
 * BINDLOG_EIO for the eio action.  Thread-safe. */
int bl_failpoint_hit(const char *name);

/* Forget the configuration and every hit count, and read BINDLOG_FAILPOINT
 * again at the next hit.  For tests that change the variable at run time
 * (e.g. in a child after fork()); not to be called while another thread may
 * be inside bl_failpoint_hit(). */
void bl_failpoint_reset(void);

/* Hits of `name` counted since the configuration was read (0 for a name
 * that is not configured: only configured names are counted). */
unsigned long bl_failpoint_hits(const char *name);

#define BL_FAILPOINT(name) bl_failpoint_hit(name)

#else

#define BL_FAILPOINT(name) 0

#endif /* BINDLOG_FAILPOINTS */

#endif /* BL_FAILPOINT_H */
