/*
 * test_wal_damage.c -- damage to bindlog.wal is never silent.
 *
 * Each case makes a store whose writer acknowledged 100 FULL events (one
 * frame each) and died without closing (fork + _exit: nothing was
 * checkpointed, so the log holds every event), damages its log as an
 * operator's mishap or a bad disk would, and then:
 *   - a read-write open, a read-only open and a private read-only open
 *     (no bindlog.shm) refuse with BINDLOG_ECORRUPT, naming bindlog.wal,
 *     the byte of the break, the LSNs at risk and `bindlog recover`;
 *   - bindlog_recover keeps every intact frame, the ones after the damage
 *     included, and names exactly the LSNs lost.
 * And the torn tails a crash may leave still open: a torn last frame, and
 * a hole among NORMAL frames no flush covered.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindlog.h"
#include "lmdb/walenv.h"
#include "testutil.h"

#define EVENTS 100
#define LOG_SIZE ((uint64_t)1 << 20)

/* The frames of a log, in order: file offset, size, first LSN. */
typedef struct frames {
    uint64_t off[EVENTS + 1], size[EVENTS + 1];
    size_t n; /* frames[i] holds LSN i (1-based; one event per frame) */
    uint64_t salt, cap;
} frames;

/* In a child: open `dir` (creating it), bind keys k<i> to <tag>s<i> for i
 * in [from, from + n) (with an origin of origin_len bytes), one
 * acknowledged group each, and die without closing. */
static void write_and_die(const char *dir, int durability, int from, int n, const char *tag,
                          size_t origin_len)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("BINDLOG_CHECKPOINT", "manual", 1); /* the log keeps every event */
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        bindlog *s = NULL;
        o.durability = durability;
        o.log_size = LOG_SIZE;
        if (bindlog_open(&s, dir, &o) != 0)
            _exit(2);
        char key[32], sid[32];
        for (int i = from; i < from + n; i++) {
            snprintf(key, sizeof key, "k%03d", i);
            snprintf(sid, sizeof sid, "%ss%03d", tag, i);
            static const char origin[512];
            if (bindlog_bind(s, key, sid, NULL, NULL, origin_len ? origin : NULL, origin_len,
                             NULL) != BINDLOG_APPLIED)
                _exit(3);
        }
        _exit(0); /* no close: no checkpoint, the log holds the events */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static int frame_cb(void *ctx, const bl_wframe *f, const bl_wal_at *after)
{
    frames *fr = ctx;
    (void)after;
    if ((f->flags & BL_WF_WRAP) || f->nrec != 1 || f->first_lsn != fr->n + 1 || fr->n >= EVENTS)
        return -1;
    fr->n++;
    fr->off[fr->n] = BL_WAL_HDR + f->pos % fr->cap;
    fr->size[fr->n] = bl_wframe_size(f->body_len);
    return 0;
}

static void list_frames(const char *dir, frames *fr)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, BL_WAL_FILE);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    memset(fr, 0, sizeof(*fr));
    assert_int_equal(bl_wal_header(fd, &fr->salt, &fr->cap), 1);
    bl_wal_at start = {0, 0, fr->salt}, end;
    assert_int_equal(bl_wal_scan(fd, fr->cap, fr->salt, &start, UINT64_MAX, frame_cb, fr, &end),
                     0);
    close(fd);
}

static void wal_path(char *out, size_t cap, const char *dir)
{
    snprintf(out, cap, "%s/%s", dir, BL_WAL_FILE);
}

static void wal_read(const char *dir, uint64_t off, void *buf, size_t n)
{
    char path[4200];
    wal_path(path, sizeof path, dir);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, buf, n, (off_t)off), (ssize_t)n);
    close(fd);
}

static void wal_write(const char *dir, uint64_t off, const void *buf, size_t n)
{
    char path[4200];
    wal_path(path, sizeof path, dir);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, buf, n, (off_t)off), (ssize_t)n);
    close(fd);
}

static void wal_zero(const char *dir, uint64_t off, size_t n)
{
    unsigned char z[4096];
    memset(z, 0, sizeof z);
    assert_true(n <= sizeof z);
    wal_write(dir, off, z, n);
}

static void wal_flip(const char *dir, uint64_t off, unsigned char mask)
{
    unsigned char b;
    wal_read(dir, off, &b, 1);
    b ^= mask;
    wal_write(dir, off, &b, 1);
}

/* A store of EVENTS acknowledged events, its frames listed. */
static char *make_store(const char *tag, frames *fr)
{
    char *dir = tu_mkdtemp(tag);
    write_and_die(dir, BINDLOG_DURABILITY_FULL, 1, EVENTS, "", 0);
    list_frames(dir, fr);
    assert_int_equal(fr->n, EVENTS);
    return dir;
}

static int try_open(const char *dir, int ro, uint64_t *head)
{
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    o.read_only = ro;
    int rc = bindlog_open(&s, dir, &o);
    if (rc == 0) {
        bindlog_stats st;
        assert_int_equal(bindlog_stats_get(s, &st), 0);
        *head = st.head_lsn;
        bindlog_close(s);
    }
    return rc;
}

/* Read-write, read-only and private read-only (no bindlog.shm) opens all
 * refuse, and the message names the file, the byte, the LSNs, the way out. */
static void assert_refused(const char *dir, uint64_t byte, const char *lsns)
{
    char shm[4200], aside[4200], want_byte[64], want_lsns[64];
    uint64_t head = 0;
    snprintf(want_byte, sizeof want_byte, "at byte %llu ", (unsigned long long)byte);
    snprintf(want_lsns, sizeof want_lsns, "%s were acknowledged", lsns);
    snprintf(shm, sizeof shm, "%s/bindlog.shm", dir);
    snprintf(aside, sizeof aside, "%s/bindlog.shm.aside", dir);
    for (int mode = 0; mode < 3; mode++) {
        if (mode == 2)
            assert_int_equal(rename(shm, aside), 0);
        int rc = try_open(dir, mode > 0, &head);
        const char *msg = bindlog_last_error();
        if (rc != BINDLOG_ECORRUPT)
            fail_msg("open (mode %d) gave %s, head %llu: %s", mode, bindlog_code_name(rc),
                     (unsigned long long)head, msg);
        if (strstr(msg, "bindlog.wal is damaged") == NULL || strstr(msg, want_byte) == NULL ||
            (lsns != NULL && strstr(msg, want_lsns) == NULL) ||
            strstr(msg, "bindlog recover") == NULL)
            fail_msg("open (mode %d): the message misses '%s' or '%s': %s", mode, want_byte,
                     want_lsns, msg);
        if (mode == 2)
            assert_int_equal(rename(aside, shm), 0);
    }
}

/* Recover into a new store: exactly LSNs first..last lost, every other
 * event kept (its key bound as the writer left it). */
static void assert_recovered(const char *dir, uint64_t first, uint64_t last)
{
    char *out = tu_mkdtemp("waldmg-out");
    bindlog_recover_report rep;
    int rc = bindlog_recover(dir, out, &rep, NULL, NULL);
    if (rc != 0)
        fail_msg("recover: %s: %s", bindlog_code_name(rc), bindlog_last_error());
    assert_int_equal(rep.log_state, 1);
    assert_int_equal(rep.head_lsn, EVENTS);
    assert_int_equal(rep.records_lost, last - first + 1);
    assert_int_equal(rep.nranges, 1);
    assert_int_equal(rep.ranges[0].first, first);
    assert_int_equal(rep.ranges[0].last, last);
    assert_int_equal(rep.new_head_lsn, EVENTS);
    bindlog_recover_report_free(&rep);

    bindlog *s = NULL;
    assert_int_equal(bindlog_open(&s, out, NULL), 0);
    for (int i = 1; i <= EVENTS; i++) {
        char key[32], sid[32];
        bindlog_binding b;
        snprintf(key, sizeof key, "k%03d", i);
        snprintf(sid, sizeof sid, "s%03d", i);
        rc = bindlog_get(s, key, &b);
        if ((uint64_t)i >= first && (uint64_t)i <= last)
            continue; /* lost: what evidence says, if anything */
        assert_int_equal(rc, 0);
        assert_string_equal(b.session_id, sid);
    }
    bindlog_close(s);
    tu_rmtree(out);
    free(out);
}

/* ---- damage --------------------------------------------------------------------- */

static void wal_damage__a_flipped_byte_in_an_acknowledged_body(void **state)
{
    (void)state;
    frames fr;
    char *dir = make_store("waldmg-flip", &fr);
    wal_flip(dir, fr.off[50] + BL_WAL_FRAME_HDR + 20, 0x10);
    assert_refused(dir, fr.off[50], "LSNs 50-100");
    assert_recovered(dir, 50, 50);
    tu_rmtree(dir);
    free(dir);
}

static void wal_damage__a_zeroed_frame(void **state)
{
    (void)state;
    frames fr;
    char *dir = make_store("waldmg-zero", &fr);
    wal_zero(dir, fr.off[50], (size_t)fr.size[50]);
    assert_refused(dir, fr.off[50], "LSNs 50-100");
    assert_recovered(dir, 50, 50);
    tu_rmtree(dir);
    free(dir);
}

static void wal_damage__two_swapped_frames(void **state)
{
    (void)state;
    frames fr;
    unsigned char a[4096], b[4096];
    char *dir = make_store("waldmg-swap", &fr);
    assert_true(fr.size[50] <= sizeof a && fr.size[51] <= sizeof b);
    wal_read(dir, fr.off[50], a, (size_t)fr.size[50]);
    wal_read(dir, fr.off[51], b, (size_t)fr.size[51]);
    wal_write(dir, fr.off[50], b, (size_t)fr.size[51]);
    wal_write(dir, fr.off[50] + fr.size[51], a, (size_t)fr.size[50]);
    assert_refused(dir, fr.off[50], "LSNs 50-100");
    assert_recovered(dir, 50, 51);
    tu_rmtree(dir);
    free(dir);
}

static void wal_damage__a_duplicated_frame(void **state)
{
    (void)state;
    frames fr;
    unsigned char a[4096];
    char *dir = make_store("waldmg-dup", &fr);
    assert_int_equal(fr.size[49], fr.size[50]); /* same-sized events */
    wal_read(dir, fr.off[49], a, (size_t)fr.size[49]);
    wal_write(dir, fr.off[50], a, (size_t)fr.size[49]);
    assert_refused(dir, fr.off[50], "LSNs 50-100");
    assert_recovered(dir, 50, 50);
    tu_rmtree(dir);
    free(dir);
}

static void wal_damage__one_bit_in_a_frame_header(void **state)
{
    (void)state;
    frames fr;
    char *dir = make_store("waldmg-hdr", &fr);
    wal_flip(dir, fr.off[90] + 16, 0x08); /* its position field */
    assert_refused(dir, fr.off[90], "LSNs 90-100");
    assert_recovered(dir, 90, 90);
    tu_rmtree(dir);
    free(dir);
}

static void wal_damage__a_frame_from_another_store(void **state)
{
    (void)state;
    frames fr, fo;
    unsigned char a[4096];
    char *dir = make_store("waldmg-fa", &fr), *other = make_store("waldmg-fb", &fo);
    assert_int_equal(fo.off[50], fr.off[50]);
    wal_read(other, fo.off[50], a, (size_t)fo.size[50]);
    wal_write(dir, fr.off[50], a, (size_t)fo.size[50]);
    assert_refused(dir, fr.off[50], "LSNs 50-100");
    assert_recovered(dir, 50, 50);
    tu_rmtree(dir);
    tu_rmtree(other);
    free(dir);
    free(other);
}

static void wal_damage__another_stores_log_over_a_new_store(void **state)
{
    (void)state;
    frames fr, fo;
    char *dir = make_store("waldmg-la", &fr), *other = make_store("waldmg-lb", &fo);
    char from[4200], to[4200];
    uint64_t head = 0;
    wal_path(from, sizeof from, other);
    wal_path(to, sizeof to, dir);
    assert_int_equal(rename(from, to), 0);
    for (int ro = 0; ro < 2; ro++) {
        assert_int_equal(try_open(dir, ro, &head), BINDLOG_ECORRUPT);
        assert_non_null(strstr(bindlog_last_error(), "bindlog.wal belongs to another log"));
    }
    /* recover does not take another store's events for this one's, and
     * says the log could not be read */
    char *out = tu_mkdtemp("waldmg-lout");
    bindlog_recover_report rep;
    assert_int_equal(bindlog_recover(dir, out, &rep, NULL, NULL), 0);
    assert_int_equal(rep.log_state, -1);
    assert_non_null(strstr(rep.log_why, "another log"));
    assert_int_equal(rep.log_records, 0);
    bindlog_recover_report_free(&rep);
    tu_rmtree(out);
    free(out);
    tu_rmtree(dir);
    tu_rmtree(other);
    free(dir);
    free(other);
}

/* A log damaged under an open handle: check reads bindlog.wal again and
 * names the first bad frame; an undamaged one checks clean. */
static void wal_damage__check_names_the_first_bad_frame(void **state)
{
    (void)state;
    frames fr;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    bindlog_check_report rep;
    char want[64];
    char *dir = make_store("waldmg-check", &fr);
    o.read_only = 1;
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    if (rep.problems != 0)
        fail_msg("an undamaged log: %s", rep.message);
    wal_flip(dir, fr.off[50] + BL_WAL_FRAME_HDR + 20, 0x10);
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_int_equal(rep.problems, 1);
    assert_int_equal(rep.first_bad_lsn, 50);
    snprintf(want, sizeof want, "damaged at byte %llu ", (unsigned long long)fr.off[50]);
    if (strstr(rep.message, want) == NULL || strstr(rep.message, "LSNs 50-100") == NULL)
        fail_msg("the message misses '%s' or LSNs 50-100: %s", want, rep.message);
    bindlog_close(s);
    tu_rmtree(dir);
    free(dir);
}

/* Copy dir/name to dir2/name. */
static void copy_file(const char *dir, const char *dir2, const char *name)
{
    char from[4200], to[4200];
    unsigned char buf[65536];
    ssize_t n;
    snprintf(from, sizeof from, "%s/%s", dir, name);
    snprintf(to, sizeof to, "%s/%s", dir2, name);
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(in >= 0 && out >= 0);
    while ((n = read(in, buf, sizeof buf)) > 0)
        assert_int_equal(write(out, buf, (size_t)n), n);
    assert_int_equal(n, 0);
    close(in);
    close(out);
}

/* The last frame replaced, under an open handle, by a valid frame of the
 * same log that holds another event (a twin of the store took a different
 * event 100 after the same 99): every checksum, the chain and the LSNs
 * verify, so only the comparison with the records the handle serves can
 * tell, and check names that frame. */
static void wal_damage__check_finds_a_valid_frame_that_is_not_the_one_served(void **state)
{
    (void)state;
    frames fr, ft;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    bindlog_check_report rep;
    unsigned char a[4096];
    char want[160];
    char *dir = tu_mkdtemp("waldmg-sub"), *twin = tu_mkdtemp("waldmg-subt");
    write_and_die(dir, BINDLOG_DURABILITY_FULL, 1, EVENTS - 1, "", 0);
    copy_file(dir, twin, "data.mdb");
    copy_file(dir, twin, BL_WAL_FILE);
    write_and_die(dir, BINDLOG_DURABILITY_FULL, EVENTS, 1, "", 0);
    write_and_die(twin, BINDLOG_DURABILITY_FULL, EVENTS, 1, "x", 0);
    list_frames(dir, &fr);
    list_frames(twin, &ft);
    assert_int_equal(fr.n, EVENTS);
    assert_int_equal(ft.n, EVENTS);
    assert_true(fr.salt == ft.salt && fr.off[EVENTS] == ft.off[EVENTS]);
    assert_true(ft.size[EVENTS] <= sizeof a);

    o.read_only = 1;
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    if (rep.problems != 0)
        fail_msg("before the swap: %s", rep.message);
    wal_read(twin, ft.off[EVENTS], a, (size_t)ft.size[EVENTS]);
    wal_write(dir, fr.off[EVENTS], a, (size_t)ft.size[EVENTS]);
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_true(rep.problems >= 1);
    assert_int_equal(rep.first_bad_lsn, EVENTS);
    snprintf(want, sizeof want,
             "the frame at byte %llu holds a record of LSN %d that is not "
             "the one the store serves",
             (unsigned long long)fr.off[EVENTS], EVENTS);
    if (strstr(rep.message, want) == NULL)
        fail_msg("the message misses '%s': %s", want, rep.message);
    bindlog_close(s);
    tu_rmtree(dir);
    tu_rmtree(twin);
    free(dir);
    free(twin);
}

/* Another log's frame written where this log's next frame belongs, under
 * an open handle: check looks past the end and says so; an open refuses. */
static void wal_damage__check_finds_another_logs_frame_past_the_end(void **state)
{
    (void)state;
    frames fr;
    bindlog_options o = BINDLOG_OPTIONS_INIT;
    bindlog *s = NULL;
    bindlog_check_report rep;
    unsigned char a[4096];
    uint64_t head = 0;
    char *dir = make_store("waldmg-end", &fr), *other = tu_mkdtemp("waldmg-endo");
    uint64_t next = fr.off[EVENTS] + fr.size[EVENTS];
    write_and_die(other, BINDLOG_DURABILITY_FULL, 1, EVENTS + 1, "", 0);
    assert_true(fr.size[EVENTS] <= sizeof a);
    wal_read(other, next, a, (size_t)fr.size[EVENTS]); /* its frame 101, as long as ours */

    o.read_only = 1;
    assert_int_equal(bindlog_open(&s, dir, &o), 0);
    wal_write(dir, next, a, (size_t)fr.size[EVENTS]);
    assert_int_equal(bindlog_check(s, &rep, NULL, NULL), 0);
    assert_true(rep.problems >= 1);
    assert_int_equal(rep.first_bad_lsn, EVENTS + 1);
    if (strstr(rep.message, "a frame of another log lies where the next frame belongs") == NULL)
        fail_msg("the message misses the other log's frame: %s", rep.message);
    bindlog_close(s);
    assert_int_equal(try_open(dir, 1, &head), BINDLOG_ECORRUPT);
    tu_rmtree(dir);
    tu_rmtree(other);
    free(dir);
    free(other);
}

/* Another store's frames under this store's own header: the frame where
 * the log goes on is another log's, so the open refuses. */
static void wal_damage__another_stores_frames_under_our_header(void **state)
{
    (void)state;
    frames fr, fo;
    static unsigned char ring[LOG_SIZE];
    uint64_t head = 0;
    char *dir = make_store("waldmg-fh", &fr), *other = make_store("waldmg-fo", &fo);
    wal_read(other, BL_WAL_HDR, ring, sizeof ring);
    wal_write(dir, BL_WAL_HDR, ring, sizeof ring);
    for (int ro = 0; ro < 2; ro++) {
        assert_int_equal(try_open(dir, ro, &head), BINDLOG_ECORRUPT);
        assert_non_null(strstr(bindlog_last_error(), "a frame of another log"));
        assert_non_null(strstr(bindlog_last_error(), "LSNs from 1 on"));
    }
    tu_rmtree(dir);
    tu_rmtree(other);
    free(dir);
    free(other);
}

/* A log cut short after frame 60: the open refuses (writes would extend
 * it), and recover reads it as far as it goes, saying it is incomplete. */
static void wal_damage__a_cut_log_is_read_up_to_the_cut(void **state)
{
    (void)state;
    frames fr;
    uint64_t head = 0;
    char path[4200];
    char *dir = make_store("waldmg-cut", &fr), *out = tu_mkdtemp("waldmg-cut-out");
    wal_path(path, sizeof path, dir);
    assert_int_equal(truncate(path, (off_t)fr.off[61]), 0);
    assert_int_equal(try_open(dir, 1, &head), BINDLOG_ECORRUPT);
    assert_non_null(strstr(bindlog_last_error(), "the log was cut"));

    bindlog_recover_report rep;
    int rc = bindlog_recover(dir, out, &rep, NULL, NULL);
    if (rc != 0)
        fail_msg("recover: %s: %s", bindlog_code_name(rc), bindlog_last_error());
    assert_int_equal(rep.log_state, 1);
    assert_non_null(strstr(rep.log_why, "cut short"));
    assert_int_equal(rep.log_records, 60);
    assert_int_equal(rep.log_last_lsn, 60);
    assert_int_equal(rep.new_head_lsn, 60);
    bindlog_recover_report_free(&rep);
    tu_rmtree(out);
    tu_rmtree(dir);
    free(out);
    free(dir);
}

/* Keys bound again and again (event i binds k<7i mod 37>), frame 50 lost:
 * the key's later event (87, which rebinds it from the lost 50's session)
 * is applied by its effect, so every key ends where the writer left it. */
static void wal_damage__a_keys_later_event_survives_its_lost_earlier_one(void **state)
{
    (void)state;
    char *dir = tu_mkdtemp("waldmg-rebind"), *out = tu_mkdtemp("waldmg-rebind-out");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("BINDLOG_CHECKPOINT", "manual", 1);
        bindlog_options o = BINDLOG_OPTIONS_INIT;
        bindlog *s = NULL;
        o.log_size = LOG_SIZE;
        if (bindlog_open(&s, dir, &o) != 0)
            _exit(2);
        for (int i = 1; i <= EVENTS; i++) {
            char key[32], sid[32];
            snprintf(key, sizeof key, "k%d", 7 * i % 37);
            snprintf(sid, sizeof sid, "s%d", i);
            if (bindlog_bind(s, key, sid, NULL, NULL, NULL, 0, NULL) != BINDLOG_APPLIED)
                _exit(3);
        }
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    frames fr;
    memset(&fr, 0, sizeof fr);
    char path[4200];
    wal_path(path, sizeof path, dir);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(bl_wal_header(fd, &fr.salt, &fr.cap), 1);
    bl_wal_at start = {0, 0, fr.salt}, end;
    assert_int_equal(bl_wal_scan(fd, fr.cap, fr.salt, &start, UINT64_MAX, frame_cb, &fr, &end), 0);
    close(fd);
    assert_true(fr.n >= 50);
    wal_flip(dir, fr.off[50] + BL_WAL_FRAME_HDR + 20, 0x10);

    bindlog_recover_report rep;
    int rc = bindlog_recover(dir, out, &rep, NULL, NULL);
    if (rc != 0)
        fail_msg("recover: %s: %s", bindlog_code_name(rc), bindlog_last_error());
    assert_int_equal(rep.records_lost, 1);
    assert_int_equal(rep.records_skipped, 0);
    bindlog_recover_report_free(&rep);
    bindlog *s = NULL;
    assert_int_equal(bindlog_open(&s, out, NULL), 0);
    for (int key = 0; key < 37; key++) {
        int last = 0;
        for (int i = 1; i <= EVENTS; i++)
            if (7 * i % 37 == key)
                last = i;
        if (last == 50)
            continue; /* its own event is the one lost */
        char k[32], want[32];
        bindlog_binding b;
        snprintf(k, sizeof k, "k%d", key);
        snprintf(want, sizeof want, "s%d", last);
        assert_int_equal(bindlog_get(s, k, &b), 0);
        if (strcmp(b.session_id, want) != 0)
            fail_msg("%s is bound to '%s', the writer left it on %s", k, b.session_id, want);
    }
    bindlog_close(s);
    tu_rmtree(out);
    tu_rmtree(dir);
    free(out);
    free(dir);
}

/* ---- torn tails open ----------------------------------------------------------------- */

static void wal_damage__a_torn_last_frame_is_dropped(void **state)
{
    (void)state;
    frames fr;
    uint64_t head = 0;
    char *dir = make_store("waldmg-torn", &fr);
    uint64_t half = fr.size[EVENTS] / 2;
    wal_zero(dir, fr.off[EVENTS] + half, (size_t)(fr.size[EVENTS] - half));
    assert_int_equal(try_open(dir, 1, &head), 0);
    assert_int_equal(head, EVENTS - 1);
    assert_int_equal(try_open(dir, 0, &head), 0);
    assert_int_equal(head, EVENTS - 1);
    tu_rmtree(dir);
    free(dir);
}

/* NORMAL: a first writer's 40 events are flushed by the next open's
 * recovery; the second writer's 60 never are.  A hole among those is a
 * tail a power loss may tear: the store opens before it.  A hole among
 * the flushed ones is damage. */
static void wal_damage__a_hole_in_unflushed_normal_frames_is_a_torn_tail(void **state)
{
    (void)state;
    frames fr;
    uint64_t head = 0;
    char *dir = tu_mkdtemp("waldmg-normal");
    write_and_die(dir, BINDLOG_DURABILITY_NORMAL, 1, 40, "", 0);
    write_and_die(dir, BINDLOG_DURABILITY_NORMAL, 41, 60, "", 0);
    list_frames(dir, &fr);
    assert_int_equal(fr.n, EVENTS);
    wal_zero(dir, fr.off[70], (size_t)fr.size[70]);
    assert_int_equal(try_open(dir, 1, &head), 0);
    assert_int_equal(head, 69);
    wal_zero(dir, fr.off[20], (size_t)fr.size[20]);
    assert_refused(dir, fr.off[20], "LSNs 20-100");
    tu_rmtree(dir);
    free(dir);
}

/* A torn NORMAL tail (a hole at frame 50 of 60), dropped at the next open;
 * that writer's 3 smaller frames write over part of it and it dies too.
 * The old tail's frames beyond the new end were never acknowledged: the
 * store opens at 52, and recover does not bring them back. */
static void wal_damage__leftovers_of_a_torn_tail_stay_dropped(void **state)
{
    (void)state;
    frames fr;
    uint64_t head = 0;
    char *dir = tu_mkdtemp("waldmg-left"), *out = tu_mkdtemp("waldmg-left-out");
    write_and_die(dir, BINDLOG_DURABILITY_NORMAL, 1, 60, "", 300);
    memset(&fr, 0, sizeof fr);
    char path[4200];
    wal_path(path, sizeof path, dir);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(bl_wal_header(fd, &fr.salt, &fr.cap), 1);
    bl_wal_at start = {0, 0, fr.salt}, end;
    assert_int_equal(bl_wal_scan(fd, fr.cap, fr.salt, &start, UINT64_MAX, frame_cb, &fr, &end), 0);
    close(fd);
    assert_int_equal(fr.n, 60);
    wal_zero(dir, fr.off[50], (size_t)fr.size[50]);
    write_and_die(dir, BINDLOG_DURABILITY_NORMAL, 50, 3, "", 0);
    assert_int_equal(try_open(dir, 1, &head), 0);
    assert_int_equal(head, 52);

    bindlog_recover_report rep;
    int rc = bindlog_recover(dir, out, &rep, NULL, NULL);
    if (rc != 0)
        fail_msg("recover: %s: %s", bindlog_code_name(rc), bindlog_last_error());
    assert_int_equal(rep.head_lsn, 52);
    assert_int_equal(rep.records_lost, 0);
    assert_int_equal(rep.new_head_lsn, 52);
    bindlog_recover_report_free(&rep);
    tu_rmtree(out);
    tu_rmtree(dir);
    free(out);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wal_damage__a_flipped_byte_in_an_acknowledged_body),
        cmocka_unit_test(wal_damage__a_zeroed_frame),
        cmocka_unit_test(wal_damage__two_swapped_frames),
        cmocka_unit_test(wal_damage__a_duplicated_frame),
        cmocka_unit_test(wal_damage__one_bit_in_a_frame_header),
        cmocka_unit_test(wal_damage__a_frame_from_another_store),
        cmocka_unit_test(wal_damage__another_stores_log_over_a_new_store),
        cmocka_unit_test(wal_damage__another_stores_frames_under_our_header),
        cmocka_unit_test(wal_damage__check_names_the_first_bad_frame),
        cmocka_unit_test(wal_damage__check_finds_a_valid_frame_that_is_not_the_one_served),
        cmocka_unit_test(wal_damage__check_finds_another_logs_frame_past_the_end),
        cmocka_unit_test(wal_damage__a_cut_log_is_read_up_to_the_cut),
        cmocka_unit_test(wal_damage__a_keys_later_event_survives_its_lost_earlier_one),
        cmocka_unit_test(wal_damage__a_torn_last_frame_is_dropped),
        cmocka_unit_test(wal_damage__a_hole_in_unflushed_normal_frames_is_a_torn_tail),
        cmocka_unit_test(wal_damage__leftovers_of_a_torn_tail_stay_dropped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
