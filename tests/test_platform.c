/*
 * test_platform.c -- the platform layer (src/platform/platform.h) on its
 * own, whichever file the build selected (linux.c, or posix.c with
 * -DBINDLOG_PLATFORM=posix): the items whose fallbacks differ most from
 * the Linux calls are checked across real processes.
 *
 *  - a word in a shared mapping: a sleeper in another process wakes when
 *    the word moves and is woken, and a wait on an unmoved word times out;
 *  - the cross-process mutex: a bounded lock of a held one times out, a
 *    holder killed with SIGKILL leaves it to the next locker with
 *    owner_died set, exclusion holds between processes,
 *    and a lock not made consistent is reported again;
 *  - reserving space, temporary files, random bytes, the flush (and
 *    bindlog_fsync, the same flush on the public API);
 *  - a lock of an open file description survives the close of another
 *    descriptor of its file, and conflicts with another description of the
 *    same process;
 *  - a thread's idle I/O priority (the open's page walk) is taken and
 *    given back, and is the thread's own, not its process's;
 *  - anonymous tables come zeroed, writable to their last byte, and on
 *    Linux resident before their first touch (and a 2 MiB multiple
 *    aligned for huge pages).
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* mincore */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bindlog.h"
#include "platform/platform.h"
#include "testutil.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A shared file of one page, mapped: what bindlog.shm is to the library. */
typedef struct shared {
    char *dir;
    int fd;
    struct {
        _Atomic uint32_t word;
        _Atomic uint32_t inside; /* processes inside the lock at once */
        _Atomic uint32_t max_inside;
        bl_plat_xlock lock;
    } *m;
} shared;

static void shared_open(shared *s, const char *tag)
{
    char path[4096];
    s->dir = tu_mkdtemp(tag);
    assert_non_null(s->dir);
    snprintf(path, sizeof path, "%s/page", s->dir);
    s->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    assert_true(s->fd >= 0);
    assert_int_equal(ftruncate(s->fd, 4096), 0);
    s->m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    assert_true(s->m != MAP_FAILED);
    memset(s->m, 0, sizeof *s->m);
    assert_int_equal(bl_plat_xlock_init(&s->m->lock, 1), 0);
    assert_int_equal(bl_plat_xlock_attach(&s->m->lock, s->fd), 0);
}

static void shared_close(shared *s)
{
    bl_plat_xlock_detach(&s->m->lock);
    munmap(s->m, 4096);
    close(s->fd);
    tu_rmtree(s->dir);
    free(s->dir);
}

static void wait_ok(pid_t pid)
{
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void platform__a_sleeper_in_another_process_is_woken(void **state)
{
    (void)state;
    shared s;
    shared_open(&s, "plat-wake");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* wait for the word to move from 0, for at most 10 s */
        int64_t end = now_ms() + 10000;
        while (atomic_load(&s.m->word) == 0 && now_ms() < end)
            bl_plat_wait(&s.m->word, 0, end - now_ms());
        _exit(atomic_load(&s.m->word) == 1 ? 0 : 1);
    }
    struct timespec nap = {0, 50 * 1000000L};
    nanosleep(&nap, NULL); /* let it sleep */
    int64_t t0 = now_ms();
    atomic_store(&s.m->word, 1);
    bl_plat_wake_all(&s.m->word);
    wait_ok(pid);
    int64_t took = now_ms() - t0;
    print_message("    %s: woken and exited %lld ms after the wake\n", bl_plat_name(),
                  (long long)took);
    assert_true(took < 5000);
    shared_close(&s);
}

static void platform__a_wait_on_an_unmoved_word_times_out(void **state)
{
    (void)state;
    _Atomic uint32_t w = 7;
    int64_t t0 = now_ms();
    while (now_ms() - t0 < 30)
        bl_plat_wait(&w, 7, 30 - (now_ms() - t0));
    assert_true(now_ms() - t0 >= 30);
    /* a word that already moved returns at once */
    t0 = now_ms();
    bl_plat_wait(&w, 8, 5000);
    assert_true(now_ms() - t0 < 1000);
}

static void platform__a_killed_holder_leaves_the_lock_marked(void **state)
{
    (void)state;
    shared s;
    int died = -1, pipefd[2];
    char c;
    shared_open(&s, "plat-xlock");
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int d;
        if (bl_plat_xlock_lock(&s.m->lock, &d, -1) != 0)
            _exit(1);
        if (write(pipefd[1], "L", 1) != 1)
            _exit(2);
        pause(); /* killed holding it */
        _exit(3);
    }
    close(pipefd[1]);
    assert_int_equal(read(pipefd[0], &c, 1), 1);
    close(pipefd[0]);
    /* held by a live process: a bounded lock gives up */
    int64_t t0 = now_ms();
    assert_int_equal(bl_plat_xlock_lock(&s.m->lock, &died, 50), ETIMEDOUT);
    assert_true(now_ms() - t0 >= 45);
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(bl_plat_xlock_lock(&s.m->lock, &died, -1), 0);
    assert_int_equal(died, 1);
    /* not made consistent: the next locker is told again */
    bl_plat_xlock_unlock(&s.m->lock);
#if BL_PLAT_ROBUST
    /* a robust mutex unlocked without pthread_mutex_consistent is
     * unrecoverable (POSIX): the caller gets an error, never the lock */
    assert_int_not_equal(bl_plat_xlock_lock(&s.m->lock, &died, -1), 0);
#else
    assert_int_equal(bl_plat_xlock_lock(&s.m->lock, &died, -1), 0);
    assert_int_equal(died, 1);
    bl_plat_xlock_consistent(&s.m->lock);
    bl_plat_xlock_unlock(&s.m->lock);
    assert_int_equal(bl_plat_xlock_lock(&s.m->lock, &died, -1), 0);
    assert_int_equal(died, 0);
    bl_plat_xlock_unlock(&s.m->lock);
#endif
    shared_close(&s);
}

static void platform__the_lock_excludes_other_processes(void **state)
{
    (void)state;
    shared s;
    pid_t pid[3];
    shared_open(&s, "plat-excl");
    for (int p = 0; p < 3; p++) {
        pid[p] = fork();
        assert_true(pid[p] >= 0);
        if (pid[p] == 0) {
            for (int i = 0; i < 200; i++) {
                int d;
                if (bl_plat_xlock_lock(&s.m->lock, &d, -1) != 0)
                    _exit(1);
                uint32_t in = atomic_fetch_add(&s.m->inside, 1) + 1;
                uint32_t mx = atomic_load(&s.m->max_inside);
                while (in > mx && !atomic_compare_exchange_weak(&s.m->max_inside, &mx, in))
                    ;
                sched_yield();
                atomic_fetch_sub(&s.m->inside, 1);
                bl_plat_xlock_unlock(&s.m->lock);
            }
            _exit(0);
        }
    }
    for (int p = 0; p < 3; p++)
        wait_ok(pid[p]);
    assert_int_equal(atomic_load(&s.m->max_inside), 1);
    shared_close(&s);
}

static void platform__files_random_and_flush(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("plat-files");
    char path[4096];
    struct stat st;
    assert_non_null(dir);

    int dfd = open(dir, O_RDONLY | O_CLOEXEC);
    assert_true(dfd >= 0);
    int fd = bl_plat_tmpfile_at(dfd, "scratch");
    assert_true(fd >= 0);
    snprintf(path, sizeof path, "%s/scratch", dir);
    assert_int_equal(stat(path, &st), -1); /* nameless */
    assert_int_equal(write(fd, "abc", 3), 3);
    assert_int_equal(bl_plat_flush(fd), 0);
    assert_int_equal(bl_plat_flush_file(fd), 0);
    close(fd);

    snprintf(path, sizeof path, "%s/reserved", dir);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    int err = bl_plat_reserve(fd, 1 << 20, 0);
    if (err == EOPNOTSUPP)
        err = bl_plat_write_zeros(fd, 0, 1 << 20);
    assert_int_equal(err, 0);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_size, 1 << 20);
    assert_true((long long)st.st_blocks * 512 >= 1 << 20);
    /* keep_size: never changes the size */
    err = bl_plat_reserve(fd, 2 << 20, 1);
    assert_true(err == 0 || err == EOPNOTSUPP);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_size, 1 << 20);
    close(fd);
    close(dfd);

    uint64_t a = 0, b = 0;
    assert_int_equal(bl_plat_random(&a, sizeof a), 0);
    assert_int_equal(bl_plat_random(&b, sizeof b), 0);
    assert_true(a != b);
    assert_non_null(bl_plat_secure_getenv("PATH"));
    tu_rmtree(dir);
    free(dir);
}

/* bl_plat_resident tells a file's pages in the page cache from those out
 * of it (the background walk's read ahead skips what is cached), and after
 * bl_plat_read_exact a read brings in what it asked for and nothing
 * around it (no read-ahead, which some virtual disks size at 8 MiB).  The
 * portable layer cannot tell (-1).  Eviction needs a file system that
 * honours POSIX_FADV_DONTNEED (not tmpfs, whose pages are the file):
 * elsewhere only the first part runs. */
static void platform__resident_pages_and_exact_reads(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("plat-resident");
    char path[4096];
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = (size_t)4 << 20, piece = 16 * pg;
    assert_non_null(dir);
    snprintf(path, sizeof path, "%s/file", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    unsigned char *buf = malloc(len);
    assert_non_null(buf);
    memset(buf, 0x5a, len);
    assert_int_equal(write(fd, buf, len), (ssize_t)len);
    assert_int_equal(fsync(fd), 0);
    unsigned char *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(map != MAP_FAILED);

    int r = bl_plat_resident(map, len);
    if (!strcmp(bl_plat_name(), "posix")) {
        assert_int_equal(r, -1);
        goto out;
    }
    assert_int_equal(r, 1); /* just written */
#if defined(__linux__)
    assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    if (bl_plat_resident(map, len) == 1) {
        print_message("  this file system keeps the file in memory: no eviction to check\n");
        goto out;
    }
    assert_int_equal(bl_plat_resident(map, pg), 0);
    /* reads from the start of the file, one after the other, are what
     * the kernel reads ahead of most (a window from 32 pages up) */
    int rd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(rd >= 0);
    bl_plat_read_exact(rd);
    assert_int_equal(pread(rd, buf, piece, 0), (ssize_t)piece);
    assert_int_equal(pread(rd, buf, piece, (off_t)piece), (ssize_t)piece);
    close(rd);
    assert_int_equal(bl_plat_resident(map, 2 * piece), 1);
    assert_int_equal(bl_plat_resident(map + 2 * piece, pg), 0); /* nothing after */
    assert_int_equal(bl_plat_resident(map, len), 0);
#endif
out:
    munmap(map, len);
    close(fd);
    free(buf);
    tu_rmtree(dir);
    free(dir);
}

/* The walk thread's idle I/O priority: taken, then given back exactly
 * (the checkpoints after the walk run at the thread's own priority), and
 * another thread of the process keeps its own meanwhile.  The portable
 * layer has no such call: ENOTSUP, nothing saved, nothing to give back. */
typedef struct io_other {
    int go[2]; /* a pipe: the thread asks once a byte arrives */
    int saved;
} io_other;

static void *io_idle_other(void *p)
{
    io_other *o = p;
    char c;
    if (read(o->go[0], &c, 1) != 1)
        return (void *)(intptr_t)EIO;
    int err = bl_plat_io_idle_begin(&o->saved);
    bl_plat_io_idle_end(o->saved);
    return (void *)(intptr_t)err;
}

static void platform__io_idle_is_the_threads_and_given_back(void **state)
{
    (void)state;
    int was = -2, idle = -2, again = -2;
    int err = bl_plat_io_idle_begin(&was);
    if (!strcmp(bl_plat_name(), "posix")) {
        assert_int_equal(err, ENOTSUP);
        assert_int_equal(was, -1);
        bl_plat_io_idle_end(was);
        return;
    }
    assert_int_equal(err, 0);
    assert_true(was >= 0);
    /* now idle: what a second call saves is the idle setting */
    assert_int_equal(bl_plat_io_idle_begin(&idle), 0);
    assert_true(idle != was);
    /* a thread made while this one was not idle keeps its own priority
     * when this one turns idle (a thread made after would inherit idle) */
    bl_plat_io_idle_end(was);
    io_other o = {.saved = -2};
    pthread_t t;
    void *terr;
    assert_int_equal(pipe(o.go), 0);
    assert_int_equal(pthread_create(&t, NULL, io_idle_other, &o), 0);
    assert_int_equal(bl_plat_io_idle_begin(&idle), 0);
    assert_int_equal(write(o.go[1], "x", 1), 1);
    assert_int_equal(pthread_join(t, &terr), 0);
    assert_int_equal((int)(intptr_t)terr, 0);
    assert_int_equal(o.saved, was);
    close(o.go[0]);
    close(o.go[1]);
    /* given back: the next call saves the priority of before */
    bl_plat_io_idle_end(was);
    assert_int_equal(bl_plat_io_idle_begin(&again), 0);
    assert_int_equal(again, was);
    bl_plat_io_idle_end(again);
}

/* bl_plat_map_anon: zeroed, all of it writable, given back whole; on
 * Linux, with populate, every page is mapped before the first touch
 * (mincore), without, none is; and a table of a 2 MiB multiple starts on
 * a 2 MiB boundary, so that huge pages can hold all of it. */
static void platform__anonymous_tables_are_zeroed_and_mapped_when_asked(void **state)
{
    (void)state;
    const size_t sizes[] = {1, 4096, 100000, (size_t)3 << 19, (size_t)2 << 20, (size_t)8 << 20};
    long pg = sysconf(_SC_PAGESIZE);
    for (int populate = 1; populate >= 0; populate--)
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            size_t n = sizes[i];
            unsigned char *p = bl_plat_map_anon(n, populate);
            assert_non_null(p);
#ifdef __linux__
            if (!strcmp(bl_plat_name(), "linux")) {
                size_t npages = (n + (size_t)pg - 1) / (size_t)pg;
                unsigned char *res = malloc(npages);
                assert_non_null(res);
                assert_int_equal(mincore(p, n, res), 0);
                size_t resident = 0;
                for (size_t j = 0; j < npages; j++)
                    resident += res[j] & 1;
                /* (a kernel before 5.14 has no MADV_POPULATE_WRITE: a 2 MiB
                 * multiple is then mapped at its first touches) */
                if (!populate)
                    assert_int_equal(resident, 0);
                else if (n % ((size_t)2 << 20) != 0 ||
                         madvise(p, n, 23 /* MADV_POPULATE_WRITE */) == 0)
                    assert_int_equal(resident, npages);
                free(res);
                if (n % ((size_t)2 << 20) == 0)
                    assert_int_equal((uintptr_t)p % ((size_t)2 << 20), 0);
            }
#endif
            for (size_t j = 0; j < n; j += 997)
                assert_int_equal(p[j], 0);
            assert_int_equal(p[n - 1], 0);
            memset(p, 0xa5, n);
            assert_int_equal(p[n - 1], 0xa5);
            bl_plat_unmap_anon(p, n);
        }
    bl_plat_unmap_anon(NULL, 4096); /* nothing to give back */
}

/* A lock of an open file description (the world lock's kind): closing
 * another descriptor of the file leaves it held (a process's fcntl lock
 * would be gone), another description of the same process conflicts with
 * it, another process sees it, and a shared lock turned exclusive and
 * back is still a lock. */
static int conflicts(int err) { return err == EAGAIN || err == EACCES; }

static void platform__an_fdlock_outlives_the_other_descriptors(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("plat-fdlock");
    char path[4096];
    snprintf(path, sizeof path, "%s/data", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(bl_plat_fdlock(fd, 1000, BL_PLAT_SHARED, 0), 0);

    int other = open(path, O_RDONLY | O_CLOEXEC); /* what LMDB or a check does */
    assert_true(other >= 0);
    assert_int_equal(close(other), 0);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int cfd = open(path, O_RDWR | O_CLOEXEC);
        int held = cfd >= 0 && bl_plat_fdlock_held(cfd, 1000);
        int excl = cfd >= 0 ? bl_plat_fdlock(cfd, 1000, BL_PLAT_EXCLUSIVE, 0) : -1;
        int shr = cfd >= 0 ? bl_plat_fdlock(cfd, 1000, BL_PLAT_SHARED, 0) : -1;
        if (!held || !conflicts(excl) || shr != 0) {
            fprintf(stderr, "child: held %d, exclusive %d, shared %d\n", held, excl, shr);
            _exit(1);
        }
        _exit(0);
    }
    wait_ok(pid);

    /* a second description in this very process conflicts like a process */
    int fd2 = open(path, O_RDWR | O_CLOEXEC);
    assert_true(fd2 >= 0);
    assert_true(conflicts(bl_plat_fdlock(fd2, 1000, BL_PLAT_EXCLUSIVE, 0)));
    assert_int_equal(bl_plat_fdlock(fd, 1000, BL_PLAT_UNLOCK, 0), 0);
    assert_int_equal(bl_plat_fdlock_held(fd2, 1000), 0);
    assert_int_equal(bl_plat_fdlock(fd2, 1000, BL_PLAT_EXCLUSIVE, 0), 0);
    assert_true(conflicts(bl_plat_fdlock(fd, 1000, BL_PLAT_SHARED, 0)));
    assert_int_equal(bl_plat_fdlock(fd2, 1000, BL_PLAT_SHARED, 0), 0); /* converted */
    assert_int_equal(bl_plat_fdlock(fd, 1000, BL_PLAT_SHARED, 0), 0);
    int fd3 = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd3 >= 0);
    assert_int_equal(bl_plat_fdlock_held(fd3, 1000), 1);
    close(fd3);
    close(fd2);
    close(fd);
    tu_rmtree(dir);
    free(dir);
}

/* bindlog_fsync, the platform's flush for programs on the public API (the
 * CLI's export): a file and a directory flush; what cannot be flushed (a
 * pipe, no descriptor) is BINDLOG_EINVAL with a message. */
static void platform__bindlog_fsync_flushes_files_and_directories(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("plat-fsync");
    char path[4096];
    snprintf(path, sizeof path, "%s/export", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "stream", 6), 6);
    assert_int_equal(bindlog_fsync(fd), 0);
    assert_string_equal(bindlog_last_error(), "");
    close(fd);
    int dfd = open(dir, O_RDONLY | O_CLOEXEC);
    assert_true(dfd >= 0);
    assert_int_equal(bindlog_fsync(dfd), 0);
    close(dfd);

    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(bindlog_fsync(p[1]), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "fsync"));
    close(p[0]);
    close(p[1]);
    assert_int_equal(bindlog_fsync(-1), BINDLOG_EINVAL);
    assert_non_null(strstr(bindlog_last_error(), "negative"));
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(platform__a_sleeper_in_another_process_is_woken),
        cmocka_unit_test(platform__a_wait_on_an_unmoved_word_times_out),
        cmocka_unit_test(platform__a_killed_holder_leaves_the_lock_marked),
        cmocka_unit_test(platform__the_lock_excludes_other_processes),
        cmocka_unit_test(platform__files_random_and_flush),
        cmocka_unit_test(platform__resident_pages_and_exact_reads),
        cmocka_unit_test(platform__an_fdlock_outlives_the_other_descriptors),
        cmocka_unit_test(platform__bindlog_fsync_flushes_files_and_directories),
        cmocka_unit_test(platform__io_idle_is_the_threads_and_given_back),
        cmocka_unit_test(platform__anonymous_tables_are_zeroed_and_mapped_when_asked),
    };
    print_message("platform layer: %s\n", bl_plat_name());
    return cmocka_run_group_tests(tests, NULL, NULL);
}
