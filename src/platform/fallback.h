/*
 * fallback.h -- the portable POSIX implementation of every item of
 * platform.h, named bl_plat_fb_*.  posix.c is nothing but these; linux.c
 * and darwin.c call the ones their system has no better answer for.
 * Internal to src/platform/.
 */
#ifndef BL_PLATFORM_FALLBACK_H
#define BL_PLATFORM_FALLBACK_H

#include "platform/platform.h"

void bl_plat_fb_wait(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ms);
/* An fcntl lock on [start, start + len) with the command given: F_SETLK,
 * F_SETLKW, or Linux's F_OFD_SETLK, F_OFD_SETLKW (EINTR retried); whether
 * another holder's lock covers any of it, asked with F_GETLK or
 * F_OFD_GETLK.  The lock kinds behind bl_plat_fdlock and bl_plat_xlock. */
int bl_plat_fb_fcntl_lock(int fd, int cmd, off_t start, off_t len, int type);
int bl_plat_fb_fcntl_held(int fd, int getcmd, off_t start, off_t len);
/* bl_plat_fdlock and bl_plat_fdlock_held with flock(). */
int bl_plat_fb_flock(int fd, int type, int wait);
int bl_plat_fb_flock_held(int fd);
int bl_plat_fb_write_zeros(int fd, off_t off, off_t len);
int bl_plat_fb_tmpfile_at(int dirfd, const char *name);
int bl_plat_fb_fsync(int fd);
/* bl_plat_resident with mincore, which Linux, macOS and the BSDs have
 * (outside POSIX, as flock is): linux.c and darwin.c; posix.c keeps the
 * portable answer, -1. */
int bl_plat_fb_mincore(const void *addr, size_t len);
int bl_plat_fb_random(void *buf, size_t n);
const char *bl_plat_fb_secure_getenv(const char *name);

#if !BL_PLAT_ROBUST
int bl_plat_fb_xlock_init(bl_plat_xlock *l, uint32_t byte);
int bl_plat_fb_xlock_attach(bl_plat_xlock *l, int fd);
void bl_plat_fb_xlock_detach(const bl_plat_xlock *l);
int bl_plat_fb_xlock_lock(bl_plat_xlock *l, int *owner_died, int64_t timeout_ms);
void bl_plat_fb_xlock_consistent(bl_plat_xlock *l);
void bl_plat_fb_xlock_unlock(bl_plat_xlock *l);
#endif

#endif /* BL_PLATFORM_FALLBACK_H */
