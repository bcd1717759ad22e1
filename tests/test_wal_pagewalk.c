/*
 * test_wal_pagewalk.c -- the whole-store page walk in the background.
 *
 * A process's first write needs every page of data.mdb validated
 * (docs/design.md, "Damaged files: where pages are validated").  A writable
 * open starts that walk on the checkpointer's thread; the first write waits
 * only for what is left of it.  These cases check that the walk happens
 * (and only for writers), that damage it finds refuses the first write
 * with the same code and message as a walk in the writer's own thread,
 * that writes and readers racing it are right, that another process
 * growing the map under it is harmless, and that a fork never sees the
 * parent's thread.  Closing during a walk: tests/faults/test_failpoints.c
 * (the walk.step failpoint slows the walk down so that the close is surely
 * in it).  The name carries "wal" so that the cases run under
 * ThreadSanitizer with the concurrency label.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
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
#include "core/backend.h"
#include "lmdb/pagecheck.h"
#include "lmdb/walenv.h"
#include "testutil.h"

/* ThreadSanitizer kills a child of a threaded parent that starts a thread
 * (test_fork.c): there the children write without the checkpointer. */
#if defined(__SANITIZE_THREAD__)
#define CHILD_MANUAL 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CHILD_MANUAL 1
#endif
#endif

#define NKEYS 6000

typedef struct fx {
    char *tmp;
    char dir[1024];
} fx;

static void key_of(char *out, size_t cap, unsigned i)
{
    snprintf(out, cap, "agent:main:walk:dm:%09u", i * 7919u % 1000000007u);
}

static void bind_range(bindlog *s, unsigned from, unsigned n, const char *tag)
{
    bindlog_event ev[100];
    char keys[100][64], sids[100][64];
    for (unsigned b = 0; b < n; b += 100) {
        unsigned m = n - b < 100 ? n - b : 100;
        for (unsigned i = 0; i < m; i++) {
            key_of(keys[i], sizeof keys[i], from + b + i);
            snprintf(sids[i], sizeof sids[i], "%s-%06u", tag, from + b + i);
            memset(&ev[i], 0, sizeof ev[i]);
            ev[i].type = BINDLOG_EVENT_BIND;
            ev[i].key = keys[i];
            ev[i].session_id = sids[i];
        }
        assert_int_equal(bindlog_apply_batch(s, ev, m, NULL, NULL), 0);
    }
}

/* A store of NKEYS bound keys, closed (its log folded into LMDB). */
static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    bindlog *s = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;

    unsetenv("BINDLOG_CHECKPOINT");
    f->tmp = tu_mkdtemp("pagewalk");
    snprintf(f->dir, sizeof(f->dir), "%s/store", f->tmp);
    o.durability = BINDLOG_DURABILITY_NONE;
    assert_int_equal(bindlog_open(&s, f->dir, &o), 0);
    bind_range(s, 0, NKEYS, "s");
    bindlog_close(s);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    unsetenv("BINDLOG_CHECKPOINT");
    tu_rmtree(f->tmp);
    free(f->tmp);
    free(f);
    return 0;
}

static bindlog *xopen(const char *dir, int read_only)
{
    bindlog *s = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    o.durability = BINDLOG_DURABILITY_NONE;
    o.read_only = read_only;
    int rc = bindlog_open(&s, dir, &o);
    if (rc != 0)
        fail_msg("open %s: %s", dir, bindlog_last_error());
    return s;
}

/* The walk's state and the thread's, as ckpt.c keeps them. */
typedef struct wstate {
    int walk, thread_on, exited, active, checked;
} wstate;

static wstate state_of(bindlog *s)
{
    bl_walenv *w = s->e->wal;
    wstate ws;
    pthread_mutex_lock(&w->cmu);
    ws = (wstate){w->walk, w->thread_on, w->exited, w->active, atomic_load(&w->store_checked)};
    pthread_mutex_unlock(&w->cmu);
    return ws;
}

/* Wait (at most 60 s: a hang fails) until the walk is no longer running. */
static wstate walk_settled(bindlog *s)
{
    for (int i = 0; i < 60000; i++) {
        wstate ws = state_of(s);
        if (ws.walk != BL_WALK_RUNNING && (ws.walk != BL_WALK_TODO || !ws.thread_on || ws.exited))
            return ws;
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    fail_msg("the walk never ended");
    return state_of(s);
}

/* ---- damage, the validator's way (as tests/test_pagecheck.c) ------------------ */

typedef struct path_rec {
    uint64_t pg[BL_PC_MAXDEPTH];
    unsigned n;
} path_rec;

static int record_path(void *ctx, uint64_t pgno, unsigned want, char *why, size_t cap)
{
    path_rec *p = ctx;
    (void)want;
    (void)why;
    (void)cap;
    p->pg[p->n++] = pgno;
    return 0;
}

/* Send every node offset of the bindings leaf holding `key` past the end of
 * its page; returns the page number. */
static uint64_t damage_leaf_of(const char *dir, const char *key)
{
    char path[1100], why[240];
    struct stat st;
    bl_pc_meta m[2];
    int ok[2];
    const unsigned char *v;
    size_t vn;
    bl_pc_db db;
    path_rec p;

    snprintf(path, sizeof path, "%s/data.mdb", dir);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    unsigned char *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(map != MAP_FAILED);
    for (unsigned s = 0; s < 2; s++)
        ok[s] = bl_pc_meta_read(map + s * 4096, 4096, s, &m[s], why, sizeof why);
    int cur = bl_pc_meta_pick(m, ok, why, sizeof why);
    assert_true(cur >= 0);
    bl_pc_file f = {map, (uint64_t)st.st_size / m[cur].psize, m[cur].psize, m[cur].last_pg};
    const char *name = bl_pc_tree_name(BL_DB_BINDINGS);
    assert_int_equal(bl_pc_search(&f, &m[cur].dbs[1], BL_PC_MAIN, name, strlen(name), 0, NULL,
                                  NULL, &v, &vn, NULL),
                     0);
    bl_pc_db_decode(v, &db);
    memset(&p, 0, sizeof p);
    assert_int_equal(bl_pc_search(&f, &db, BL_DB_BINDINGS, key, strlen(key), 0, record_path, &p,
                                  &v, &vn, NULL),
                     0);
    uint64_t leaf = p.pg[p.n - 1];
    unsigned n = (bl_get16(map + leaf * f.psize + 12) - 16) / 2;
    for (unsigned j = 0; j < n; j++) {
        unsigned char b[2] = {0xfe, 0xff};
        assert_int_equal(pwrite(fd, b, 2, (off_t)(leaf * f.psize + 16 + 2 * j)), 2);
    }
    munmap(map, (size_t)st.st_size);
    close(fd);
    return leaf;
}

/* The bytes of dir/data.mdb (malloc'd), *n their count. */
static unsigned char *read_mdb(const char *dir, size_t *n)
{
    char path[1100];
    struct stat st;
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    unsigned char *p = malloc((size_t)st.st_size);
    assert_non_null(p);
    assert_int_equal(pread(fd, p, (size_t)st.st_size, 0), st.st_size);
    close(fd);
    *n = (size_t)st.st_size;
    return p;
}

/* ---- the cases ----------------------------------------------------------------- */

/* A writable open walks the store in the background and the thread ends
 * with it; the first write then walks nothing.  A read-only open starts no
 * walk and no thread. */
static void wal_pagewalk__a_writer_open_walks_and_a_reader_does_not(void **state)
{
    fx *f = *state;
    bindlog_result r;
    bindlog_binding b;
    char key[64];

    bindlog *ro = xopen(f->dir, 1);
    wstate ws = state_of(ro);
    assert_int_equal(ws.thread_on, 0);
    assert_int_equal(ws.walk, BL_WALK_TODO);
    key_of(key, sizeof key, 7);
    assert_int_equal(bindlog_get(ro, key, &b), 0);
    assert_int_equal(state_of(ro).thread_on, 0);
    bindlog_close(ro);

    bindlog *s = xopen(f->dir, 0);
    ws = walk_settled(s);
    assert_int_equal(ws.walk, BL_WALK_DONE);
    assert_int_equal(ws.checked, 1);
    assert_int_equal(ws.active, 0); /* no commit yet: no checkpointing */
    assert_true(!ws.thread_on || ws.exited); /* the walk was all it had to do */
    assert_int_equal(bindlog_bind(s, key, "after-walk", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    ws = state_of(s);
    assert_int_equal(ws.thread_on, 1); /* the checkpointer, from the first commit */
    assert_int_equal(ws.active, 1);
    bindlog_close(s);
}

/* Damage found by the background walk refuses the first write with the
 * code and the message a walk in the writer's thread gives (manual
 * checkpoints: no thread at all); a write that comes before the verdict
 * reaches the log only, and data.mdb is never written. */
static void wal_pagewalk__damage_it_finds_refuses_the_first_write(void **state)
{
    fx *f = *state;
    bindlog_result r;
    bindlog_binding b;
    char key[64], other[64], want[64], bg[BL_ERRMSG_MAX + 64], fg[BL_ERRMSG_MAX + 64];

    key_of(key, sizeof key, 1234);
    uint64_t leaf = damage_leaf_of(f->dir, key);
    snprintf(want, sizeof want, "page %llu of table bindings", (unsigned long long)leaf);
    snprintf(other, sizeof other, "agent:main:walk:elsewhere");

    /* the walk ends, then the write comes */
    bindlog *s = xopen(f->dir, 0);
    wstate ws = walk_settled(s);
    assert_int_equal(ws.walk, BL_WALK_BAD);
    assert_int_equal(ws.checked, 0);
    assert_int_equal(bindlog_bind(s, other, "s1", NULL, NULL, NULL, 0, &r), BINDLOG_ECORRUPT);
    snprintf(bg, sizeof bg, "%s", bindlog_last_error());
    if (strstr(bg, want) == NULL)
        fail_msg("'%s' does not name '%s'", bg, want);
    /* every later write too, and reads keep their own guards */
    assert_int_equal(bindlog_bind(s, other, "s1", NULL, NULL, NULL, 0, &r), BINDLOG_ECORRUPT);
    assert_string_equal(bindlog_last_error(), bg);
    assert_int_equal(bindlog_get(s, key, &b), BINDLOG_ECORRUPT);
    bindlog_close(s);

    /* the write comes at once, racing the walk: it does not wait for the
     * verdict.  Refused when the verdict is in; before it, it goes to the
     * log only (acknowledged, readable) and the checkpoint, the one writer
     * of data.mdb, refuses the damaged file with the walk's message.
     * data.mdb is not touched either way, and the event outlives the
     * handle.  (tests/faults makes the write surely come first.) */
    size_t n0, n1;
    unsigned char *mdb0 = read_mdb(f->dir, &n0);
    s = xopen(f->dir, 0);
    int rc = bindlog_bind(s, other, "s1", NULL, NULL, NULL, 0, &r);
    print_message("a write at once: %s\n", bindlog_code_name(rc));
    if (rc == BINDLOG_ECORRUPT) {
        assert_string_equal(bindlog_last_error(), bg);
    } else {
        assert_int_equal(rc, BINDLOG_APPLIED);
        assert_int_equal(bindlog_get(s, other, &b), 0);
        assert_string_equal(b.session_id, "s1");
        assert_int_equal(bindlog_checkpoint(s, NULL), BINDLOG_ECORRUPT);
        if (strstr(bindlog_last_error(), want) == NULL)
            fail_msg("'%s' does not name '%s'", bindlog_last_error(), want);
        assert_int_equal(bindlog_bind(s, other, "s2", NULL, NULL, NULL, 0, &r), BINDLOG_ECORRUPT);
        assert_string_equal(bindlog_last_error(), bg);
    }
    bindlog_close(s);
    unsigned char *mdb1 = read_mdb(f->dir, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(mdb0, mdb1, n0);
    free(mdb0);
    free(mdb1);
    if (rc == BINDLOG_APPLIED) {
        s = xopen(f->dir, 1);
        assert_int_equal(bindlog_get(s, other, &b), 0);
        assert_string_equal(b.session_id, "s1");
        bindlog_close(s);
    }

    /* no background thread: the writer walks itself, as before */
    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    s = xopen(f->dir, 0);
    assert_int_equal(state_of(s).thread_on, 0);
    assert_int_equal(bindlog_bind(s, other, "s1", NULL, NULL, NULL, 0, &r), BINDLOG_ECORRUPT);
    snprintf(fg, sizeof fg, "%s", bindlog_last_error());
    bindlog_close(s);
    unsetenv("BINDLOG_CHECKPOINT");
    assert_string_equal(bg, fg);
}

/*
 * A writable open of a store out of the page cache (a restart on a busy
 * host): the walk reads the file back ahead of itself (docs/design.md,
 * "Damaged files") and comes to the verdict it comes to on a cached file,
 * damage included.  The page check's map of data.mdb is advised for
 * random reads only until the walk is over (tests/faults checks it during
 * the walk); a read-only open never advises it, and a writer without a
 * background walk (manual checkpoints) gives the usual advice back at
 * open.  Where the file system keeps the file in memory (tmpfs) the same
 * runs on a cached file.
 */
static void wal_pagewalk__a_store_out_of_the_cache_is_read_back_and_walked(void **state)
{
    fx *f = *state;
    bindlog_result r;
    bindlog_binding b;
    char key[64], mdb[1100], want[64];

    snprintf(mdb, sizeof mdb, "%s/data.mdb", f->dir);
    int evicted = tu_evict(mdb);
    print_message("  data.mdb %s the page cache\n", evicted ? "out of" : "kept in");
    bindlog *s = xopen(f->dir, 0);
    wstate ws = walk_settled(s);
    assert_int_equal(ws.walk, BL_WALK_DONE);
    assert_int_equal(ws.checked, 1);
    assert_true(tu_random_maps_of(mdb) <= 0);
    key_of(key, sizeof key, 5);
    assert_int_equal(bindlog_bind(s, key, "cold", NULL, NULL, NULL, 0, &r), BINDLOG_APPLIED);
    bindlog_close(s);

    tu_evict(mdb);
    s = xopen(f->dir, 1);
    assert_true(tu_random_maps_of(mdb) <= 0);
    assert_int_equal(bindlog_get(s, key, &b), 0);
    assert_string_equal(b.session_id, "cold");
    assert_true(tu_random_maps_of(mdb) <= 0);
    bindlog_close(s);

    setenv("BINDLOG_CHECKPOINT", "manual", 1);
    s = xopen(f->dir, 0);
    assert_int_equal(state_of(s).thread_on, 0);
    assert_true(tu_random_maps_of(mdb) <= 0);
    bindlog_close(s);
    unsetenv("BINDLOG_CHECKPOINT");

    key_of(key, sizeof key, 1234);
    uint64_t leaf = damage_leaf_of(f->dir, key);
    snprintf(want, sizeof want, "page %llu of table bindings", (unsigned long long)leaf);
    tu_evict(mdb);
    s = xopen(f->dir, 0);
    ws = walk_settled(s);
    assert_int_equal(ws.walk, BL_WALK_BAD);
    assert_int_equal(bindlog_bind(s, "agent:main:walk:cold", "s1", NULL, NULL, NULL, 0, &r),
                     BINDLOG_ECORRUPT);
    if (strstr(bindlog_last_error(), want) == NULL)
        fail_msg("'%s' does not name '%s'", bindlog_last_error(), want);
    assert_true(tu_random_maps_of(mdb) <= 0);
    bindlog_close(s);
}

typedef struct racer {
    bindlog *s;
    unsigned id;
    int bad;
} racer;

static void *race_writes(void *p)
{
    racer *rc = p;
    char key[64], sid[64];
    bindlog_result r;
    bindlog_binding b;
    for (unsigned i = 0; i < 40; i++) {
        snprintf(key, sizeof key, "agent:main:race:%u:%u", rc->id, i);
        snprintf(sid, sizeof sid, "race-%u-%u", rc->id, i);
        if (bindlog_bind(rc->s, key, sid, NULL, NULL, NULL, 0, &r) != BINDLOG_APPLIED)
            rc->bad++;
        key_of(key, sizeof key, (rc->id * 977 + i * 13) % NKEYS);
        if (bindlog_get(rc->s, key, &b) != 0)
            rc->bad++;
    }
    return NULL;
}

/* Writers and readers from the moment the store is open: every write
 * applied (before or after the walk's verdict), every read answered, the
 * walk passes, the store checks clean. */
static void wal_pagewalk__writes_race_the_walk(void **state)
{
    fx *f = *state;
    pthread_t t[4];
    racer r[4];
    bindlog_check_report rep;

    bindlog *s = xopen(f->dir, 0);
    for (unsigned i = 0; i < 4; i++) {
        r[i] = (racer){s, i, 0};
        assert_int_equal(pthread_create(&t[i], NULL, race_writes, &r[i]), 0);
    }
    for (unsigned i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(r[i].bad, 0);
    }
    assert_int_equal(walk_settled(s).checked, 1); /* the writes did not wait for it */
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 0);
    bindlog_close(s);
}

/* Another process writes and checkpoints with a tight map while this one
 * walks and reads: the map grows and moves under the walk, which reads
 * through a mapping of its own. */
static void wal_pagewalk__the_map_grows_under_the_walk(void **state)
{
    fx *f = *state;
    int go[2], status;
    bindlog_check_report rep;

    assert_int_equal(pipe(go), 0);
    pid_t pid = fork(); /* before this process has a thread */
    assert_true(pid >= 0);
    if (pid == 0) {
        char c;
        alarm(60);
        close(go[1]);
        if (read(go[0], &c, 1) != 1)
            _exit(2);
#ifdef CHILD_MANUAL
        setenv("BINDLOG_CHECKPOINT", "manual", 1);
#endif
        bindlog *c2 = NULL;
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        uint64_t ck;
        o.durability = BINDLOG_DURABILITY_NONE;
        o.map_size = 64 << 10;
        if (bindlog_open(&c2, f->dir, &o) != 0)
            _exit(3);
        for (unsigned b = 0; b < 20; b++) {
            bind_range(c2, NKEYS + b * 200, 200, "grow");
            if (bindlog_checkpoint(c2, &ck) != 0)
                _exit(4);
        }
        bindlog_close(c2);
        _exit(0);
    }
    close(go[0]);
    bindlog *s = NULL;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog_stats st0, st1;
    bindlog_binding b;
    bindlog_result r;
    char key[64];
    o.durability = BINDLOG_DURABILITY_NONE;
    o.map_size = 64 << 10;
    assert_int_equal(bindlog_open(&s, f->dir, &o), 0);
    assert_int_equal(bindlog_stats_get(s, &st0), 0);
    assert_int_equal(write(go[1], "g", 1), 1);
    close(go[1]);
    unsigned reads = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        key_of(key, sizeof key, reads++ % NKEYS);
        assert_int_equal(bindlog_get(s, key, &b), 0);
    }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    walk_settled(s);
    assert_int_equal(bindlog_bind(s, "agent:main:walk:last", "last", NULL, NULL, NULL, 0, &r),
                     BINDLOG_APPLIED);
    key_of(key, sizeof key, NKEYS + 3999);
    assert_int_equal(bindlog_get(s, key, &b), 0);
    assert_int_equal(bindlog_stats_get(s, &st1), 0);
    assert_true(st1.map_size > st0.map_size); /* the map did move */
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 0);
    bindlog_close(s);
}

#ifdef TU_FORK_SANITIZED
/* Wait for the walk to end and join its thread, as thread_start in ckpt.c
 * does: a walk-only thread that set `exited` still runs its exit, and
 * ASan's thread exit hands the thread's allocator cache back under the
 * runtime's mutex.  A fork then leaves that mutex locked in the child, and
 * the child's own walk thread waits on it forever (seen under load: the
 * child's open stuck in SizeClassAllocator64's mutex, its close in the
 * join). */
static void walk_joined(bindlog *s)
{
    bl_walenv *w = s->e->wal;
    wstate ws = walk_settled(s);
    assert_true(!ws.thread_on || ws.exited); /* no commit yet: no checkpointer */
    pthread_mutex_lock(&w->cmu);
    if (w->thread_on && w->exited) {
        pthread_join(w->thread, NULL);
        w->thread_on = w->exited = 0;
    }
    pthread_mutex_unlock(&w->cmu);
}
#endif

/* Under sanitizers (TU_FORK_SANITIZED) the parent lets its walk end and
 * joins its thread before it forks (walk_joined): their allocator is not
 * fork-safe.  The fork during the walk is tested without sanitizers; the
 * child's side is the same in both. */
/* A fork while the parent's walk may run: the child's use of the parent's
 * handle is BINDLOG_EFORK (it never waits for a thread it does not have);
 * its own open walks for itself; the parent's write goes ahead. */
static void wal_pagewalk__a_forked_child_never_uses_the_parents_walk(void **state)
{
    fx *f = *state;
    bindlog_result r;
    int status;

    bindlog *s = xopen(f->dir, 0);
#ifdef TU_FORK_SANITIZED
    walk_joined(s);
#endif
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(60);
        if (bindlog_bind(s, "agent:main:walk:child", "c", NULL, NULL, NULL, 0, &r) !=
            BINDLOG_EFORK)
            _exit(2);
        bindlog_close(s); /* frees the handle only */
#ifdef CHILD_MANUAL
        setenv("BINDLOG_CHECKPOINT", "manual", 1);
#endif
        bindlog *mine = NULL;
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        o.durability = BINDLOG_DURABILITY_NONE;
        if (bindlog_open(&mine, f->dir, &o) != 0)
            _exit(3);
        if (bindlog_bind(mine, "agent:main:walk:child", "c", NULL, NULL, NULL, 0, &r) !=
            BINDLOG_APPLIED)
            _exit(4);
        bindlog_close(mine);
        _exit(0);
    }
    assert_int_equal(bindlog_bind(s, "agent:main:walk:parent", "p", NULL, NULL, NULL, 0, &r),
                     BINDLOG_APPLIED);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    bindlog_binding b;
    uint64_t head;
    assert_int_equal(bindlog_wait(s, 0, 0, &head), 0);
    assert_int_equal(bindlog_get(s, "agent:main:walk:child", &b), 0);
    bindlog_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(wal_pagewalk__a_writer_open_walks_and_a_reader_does_not,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(wal_pagewalk__damage_it_finds_refuses_the_first_write,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            wal_pagewalk__a_store_out_of_the_cache_is_read_back_and_walked, setup, teardown),
        cmocka_unit_test_setup_teardown(wal_pagewalk__writes_race_the_walk, setup, teardown),
        cmocka_unit_test_setup_teardown(wal_pagewalk__the_map_grows_under_the_walk, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(wal_pagewalk__a_forked_child_never_uses_the_parents_walk,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
