/*
 * test_cache_sweep_steps.c: the sweep of dead jobs' segments, with creators
 * and sweepers stepped through their system calls under ptrace instead of
 * timed: a creator stopped at each of its system calls in turn, with a sweep
 * run there, keeps its segment, disk file and data; a creator killed at each
 * of its system calls in turn leaves nothing the next sweep does not remove;
 * a sweeper killed at each of its system calls leaves no disk file without
 * its segment. Exhaustive at syscall granularity and repeatable run to run;
 * skipped, saying so, where ptrace is not permitted.
 */
#define _GNU_SOURCE /* unshare, for cache_testing.h */
#include "tests/cache/cache_testing.h"
#include "tests/common/cunit_main.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>

enum { TRACE_DENIED = 77 };

/* Memory management calls (mmap, munmap, mprotect, brk, madvise) come and
 * go with the allocator's state, which a forked child inherits from its
 * parent: under ASan the same sweep made one more mmap every other round, so
 * the n-th call was another call from round to round, and the kill meant for
 * the entry of one call landed on its neighbour every time. They touch no
 * file, so they are not counted: the n-th counted call is the same call in
 * every round. */
static int memory_call(long nr)
{
    return nr == SYS_mmap || nr == SYS_munmap || nr == SYS_mprotect || nr == SYS_brk ||
           nr == SYS_madvise || nr == SYS_mremap;
}

/* Runs body(arg) in a child traced with ptrace and calls at(at_arg, n) at the
 * entry of the child's n-th system call (n from 1, memory_call's not
 * counted), the child stopped there.
 * A process touches files only through system calls and a kill takes effect
 * between them, so stopping or killing it at every entry covers every state
 * a creator or sweeper can be seen in, or leave behind, at syscall
 * granularity, exhaustively and without timing. If at returns 1 the child is
 * killed there, before that call runs. Returns the child's exit status, -2 if
 * killed, -1 if ptrace is not permitted here, -3 on a tracing error. */
static int traced_run(int (*body)(void *), void *arg, int (*at)(void *, int), void *at_arg)
{
    pid_t kid = fork();
    if (kid == 0) {
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0)
            _exit(TRACE_DENIED);
        raise(SIGSTOP);
        _exit(body(arg)); /* _exit: no atexit work (a leak check would ptrace) */
    }
    int st;
    if (waitpid(kid, &st, 0) != kid || !WIFSTOPPED(st))
        return WIFEXITED(st) && WEXITSTATUS(st) == TRACE_DENIED ? -1 : -3;
    ptrace(PTRACE_SETOPTIONS, kid, NULL, (void *)(long)(PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL));
    int n = 0, entry = 1, sig = 0;
    for (;;) {
        ptrace(PTRACE_SYSCALL, kid, NULL, (void *)(long)sig);
        sig = 0;
        if (waitpid(kid, &st, 0) != kid)
            return -3;
        if (WIFEXITED(st))
            return WEXITSTATUS(st);
        if (WIFSIGNALED(st))
            return -2;
        if (WSTOPSIG(st) != (SIGTRAP | 0x80)) {
            sig = WSTOPSIG(st); /* a signal for the child: deliver it */
            continue;
        }
#if defined(__x86_64__) /* elsewhere every call counts */
        struct user_regs_struct regs;
        if (entry && ptrace(PTRACE_GETREGS, kid, NULL, &regs) == 0 && memory_call((long)regs.orig_rax)) {
            entry = !entry;
            continue;
        }
#endif
        if (entry && at(at_arg, ++n)) {
            kill(kid, SIGKILL);
            waitpid(kid, &st, 0);
            return -2;
        }
        entry = !entry;
    }
}

static int skip_untraced(int rc)
{
    if (rc == -1)
        printf("\n  skipped: ptrace is not permitted here ");
    return rc == -1;
}

typedef struct traced_cache {
    pt_cache_spec spec;
    char job[64], name[128];
    int kill_at;      /* kill at this system call; 0: never */
    int visible;      /* stops at which the segment had its name */
} traced_cache;

/* The traced creator: creates, fills, reaches the cache by name again and
 * reads it back, closes: race_creator, once. */
static int traced_creator(void *arg)
{
    traced_cache *t = arg;
    shared f; /* race_creator's flag, unused here */
    atomic_init(&f.started, 0);
    return race_creator(&t->spec, &f);
}

/* At every stop of the creator, a sweep, as a concurrent start would run. */
static int sweep_at_stop(void *arg, int n)
{
    traced_cache *t = arg;
    (void)n;
    pt_cache_sweep(NULL);
    t->visible += shm_exists(t->name);
    return 0;
}

static int kill_at_stop(void *arg, int n)
{
    return n == ((traced_cache *)arg)->kill_at;
}

static void traced_spec(traced_cache *t, const char *what, int round, const char *dir)
{
    memset(t, 0, sizeof *t);
    snprintf(t->job, sizeof t->job, "%s-%d-%d", what, (int)getpid(), round);
    seg_name(t->name, sizeof t->name, t->job);
    t->spec = (pt_cache_spec){t->job, 24, ENTRY * sizeof(float), 8 * ENTRY * sizeof(float), dir,
                              16 * ENTRY * sizeof(float)};
}

/* The race of race_creator_against_sweeper without timing: the creator is
 * stopped at the entry of each of its system calls, from the first of its
 * creation to the last of its close, and a sweep runs while it is stopped
 * there. Its segment, disk file and data must come through (it checks them
 * by name at the end), and the segment must have been there to be swept at
 * some stops, so the sweeps had it to look at. */
static void creator_stopped_at_every_syscall_keeps_segment(void)
{
    private_dev_shm();
    char dir[] = "/tmp/pt-cache-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    traced_cache t;
    traced_spec(&t, "stepped", 0, dir);
    int rc = traced_run(traced_creator, &t, sweep_at_stop, &t);
    if (!skip_untraced(rc)) {
        if (rc)
            printf("\n  creator exit %d (10 never created, 11 put failed, 12 its segment or disk file was "
                   "removed while it lived, 13 wrong data) ", rc);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT(t.visible > 10);
        printf("\n  swept at %d stops with the segment named ", t.visible);
    }
    shm_unlink(t.name);
    CU_ASSERT_EQUAL(rmdir(dir), 0);
}

/* A creator killed at the entry of its 1st, 2nd, ... system call, until one
 * that is not killed runs to its end: before its segment exists, before and
 * after its name, its disk file, its magic, while filling, while closing.
 * After each, one sweep leaves neither segment nor disk file, and a live
 * cache beside it is untouched. */
static void creator_killed_at_every_syscall_then_sweep(void)
{
    private_dev_shm();
    char dir[] = "/tmp/pt-cache-XXXXXX", wdir[] = "/tmp/pt-cache-XXXXXX", wjob[64];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(wdir));
    job_name(wjob, sizeof wjob, "witness");
    pt_cache *w = witness_create(wjob, wdir);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    int kills = 0, leftovers = 0, rc = -2;
    for (int n = 1; rc == -2 && n < 10000; n++) {
        traced_cache t;
        traced_spec(&t, "killed-at", n, dir);
        t.kill_at = n;
        rc = traced_run(traced_creator, &t, kill_at_stop, &t);
        if (skip_untraced(rc))
            break;
        kills += rc == -2;
        leftovers += shm_exists(t.name);
        pt_cache_sweep(NULL);
        CU_ASSERT_FALSE(shm_exists(t.name));
        CU_ASSERT_TRUE(dir_is_empty(dir));
        if (shm_exists(t.name) || !dir_is_empty(dir)) {
            char disk[300];
            snprintf(disk, sizeof disk, "%s%.127s.cache", dir, t.name);
            printf("\n  killed at system call %d: left behind %s%s ", n, shm_exists(t.name) ? t.name : "",
                   dir_is_empty(dir) ? "" : " its disk file");
            shm_unlink(t.name);
            unlink(disk);
            break;
        }
    }
    if (rc != -1) {
        CU_ASSERT_EQUAL(rc, 0); /* the last one ran to its end */
        CU_ASSERT(leftovers > 0 && leftovers < kills); /* kills before and after the segment had a name */
        printf("\n  %d kills, %d left a segment ", kills, leftovers);
    }
    CU_ASSERT_TRUE(witness_intact(w));
    pt_cache_close(w);
    CU_ASSERT_EQUAL(rmdir(wdir), 0);
    CU_ASSERT_EQUAL(rmdir(dir), 0);
}

static int traced_sweep(void *arg)
{
    (void)arg;
    return pt_cache_sweep(NULL) >= 0 ? 0 : 1;
}

/* A sweeper killed at the entry of each of its system calls, in turn, while
 * removing two dead jobs' segments: at no point does a disk file outlive its
 * segment (else nothing would name the file and no sweep could find it), and
 * the next sweep finishes the job. */
static void sweeper_killed_at_every_syscall_leaves_no_orphan(void)
{
    private_dev_shm();
    enum { DEAD = 2 };
    char dir[] = "/tmp/pt-cache-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    int rc = -2, kills = 0, between = 0, bad = 0;
    for (int n = 1; rc == -2 && n < 10000 && !bad; n++) {
        traced_cache d[DEAD];
        char disk[DEAD][300];
        int ready[2];
        CU_ASSERT_EQUAL_FATAL(pipe(ready), 0);
        for (int k = 0; k < DEAD; k++) {
            traced_spec(&d[k], "half-swept", n * DEAD + k, dir);
            snprintf(disk[k], sizeof disk[k], "%s%.127s.cache", dir, d[k].name);
        }
        pid_t holder = fork();
        if (holder == 0) { /* makes the dead jobs' caches, then is killed */
            pt_cache *c;
            pt_err err;
            for (int k = 0; k < DEAD; k++)
                if (pt_cache_create(&c, &d[k].spec, &err))
                    _exit(1);
            ssize_t wr = write(ready[1], "x", 1);
            (void)wr;
            for (;;)
                pause();
        }
        close(ready[1]);
        char byte;
        CU_ASSERT_EQUAL(read(ready[0], &byte, 1), 1);
        close(ready[0]);
        kill(holder, SIGKILL);
        waitpid(holder, NULL, 0);
        traced_cache at = {.kill_at = n};
        rc = traced_run(traced_sweep, NULL, kill_at_stop, &at);
        if (skip_untraced(rc))
            break;
        kills += rc == -2;
        for (int k = 0; k < DEAD; k++) {
            struct stat st;
            const int seg = shm_exists(d[k].name), file = stat(disk[k], &st) == 0;
            CU_ASSERT(seg || !file);
            bad += !seg && file;
            between += seg && !file;
        }
        pt_cache_sweep(NULL);
        for (int k = 0; k < DEAD; k++) {
            CU_ASSERT_FALSE(shm_exists(d[k].name));
            CU_ASSERT_NOT_EQUAL(unlink(disk[k]), 0); /* gone already; an orphan is not left in /tmp */
        }
        if (bad)
            printf("\n  a sweeper killed at its system call %d left a disk file without its segment ", n);
    }
    if (rc != -1) {
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT(between > 0); /* some kills fell between a disk file and its segment */
        printf("\n  %d kills, %d left a segment without its disk file ", kills, between);
    }
    CU_ASSERT_EQUAL(rmdir(dir), 0);
}

static const pt_test tests[] = {{"creator_stopped_at_every_syscall_keeps_segment",
                                 creator_stopped_at_every_syscall_keeps_segment},
                                {"creator_killed_at_every_syscall_then_sweep", creator_killed_at_every_syscall_then_sweep},
                                {"sweeper_killed_at_every_syscall_leaves_no_orphan",
                                 sweeper_killed_at_every_syscall_leaves_no_orphan},
                                {NULL, NULL}};
static const pt_test_suite suites[] = {{"sweep of the shared cache, stepped by system call", tests}, {NULL, NULL}};
