/*
 * test_cache_sweep.c: the sweep of dead jobs' segments against real
 * processes and real timing (cache.c states the protocol). A creator paused
 * at random points while another process sweeps in a tight loop never loses
 * its segment, its disk file or its data; a creator killed at random moments
 * leaves nothing the next sweep does not remove; a zero-length or zero-filled
 * segment is kept while a process holds it and removed after; a rank still
 * attached keeps a segment whose creator died; other users' files, names
 * that are not segments, links, FIFOs, directories and a live job's disk file
 * in /dev/shm are never touched. These tests share /dev/shm with whatever
 * else runs on the machine, which is the point: the sweep must be safe beside
 * it.
 */
#define _GNU_SOURCE /* unshare, for cache_testing.h */
#include "tests/cache/cache_testing.h"
#include "tests/common/cunit_main.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/wait.h>

/* Busy-waits: a sleep is rounded up to tens of microseconds, coarser than
 * the steps of a creation, and the random points must fall inside them. */
static void spin_us(double us)
{
    const double end = now_us() + us;
    while (now_us() < end)
        ;
}

static void sleep_us(long us)
{
    struct timespec t = {0, us * 1000};
    nanosleep(&t, NULL);
}

/* A file under /dev/shm with `bytes` zero bytes (0: zero-length); returns its
 * descriptor, or -1. */
static int make_shm_file(const char *name, off_t bytes)
{
    char path[300];
    snprintf(path, sizeof path, "/dev/shm%.127s", name); /* names here are under 128 */
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 && bytes && ftruncate(fd, bytes) != 0) {
        close(fd);
        unlink(path);
        return -1;
    }
    return fd;
}

/* Random moments are counted from when the child starts the step under
 * test, not from fork: how soon a child runs after fork depends on the load. */
static void wait_started(shared *f, pid_t kid)
{
    for (;;) {
        siginfo_t info = {0};
        if (atomic_load(&f->started) || waitid(P_PID, (id_t)kid, &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
            info.si_pid != 0) /* started, or exited without starting (reaped later) */
            break;
        sched_yield();
    }
    atomic_store(&f->started, 0);
}

/* The span random kills are drawn from, after a round whose kill came
 * `early` (before the step changed anything) or not. How long the step takes
 * varies several-fold with the load, so the span follows it: a little more
 * than the step took the last time a child finished it, wider after an early
 * kill; most kills land inside the step and some just after it. */
static double kill_span_us(shared *f, double span, int early)
{
    const long ns = atomic_exchange(&f->took_ns, 0);
    if (ns > 0)
        return 1.25 * (double)ns / 1e3;
    return early && span < 20000 ? span * 1.5 : span;
}

static pid_t sweeper_start(shared *f)
{
    pid_t pid = fork();
    if (pid == 0) {
        while (!atomic_load(&f->stop)) {
            pt_cache_sweep(NULL);
            atomic_fetch_add(&f->sweeps, 1);
        }
        _exit(0);
    }
    return pid;
}

/* Creators race a process that sweeps without pause. The test stops each
 * creator (SIGSTOP) at random points of its life, so every instant of a
 * creation, the earliest ones included, is at some round held still for long
 * enough for the sweeper to look at the segment. Every other round a dead
 * segment of the same name is planted first: some sweeper holds it while the
 * creator's own sweep removes it and the creator takes the name. */
static void race_creator_against_sweeper(void)
{
    private_dev_shm();
    enum { ROUNDS = 200 };
    char dir[] = "/tmp/pt-cache-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    shared *f = shared_map();
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    const pid_t sweeper = sweeper_start(f);
    pt_rng rng;
    pt_rng_seed(&rng, 20240610, 0);
    int failed = 0, pauses = 0;
    const double t0 = now_us();
    /* At least ROUNDS rounds and ROUNDS stops: on a loaded machine (or under
     * ASan) a creator may finish before its first stop, so rounds go on,
     * up to 10 x ROUNDS, until the stops are there. */
    int r = 0;
    for (; r < ROUNDS || (pauses < ROUNDS && r < 10 * ROUNDS); r++) {
        char job[64], name[128];
        snprintf(job, sizeof job, "race-%d-%d", (int)getpid(), r);
        seg_name(name, sizeof name, job);
        pt_cache_spec spec = {job, 24, ENTRY * sizeof(float), 8 * ENTRY * sizeof(float), dir,
                              16 * ENTRY * sizeof(float)};
        if (r % 2) {
            int fd = make_shm_file(name, 4096);
            CU_ASSERT(fd >= 0);
            if (fd >= 0)
                close(fd);
        }
        pid_t kid = fork();
        if (kid == 0)
            _exit(race_creator(&spec, f));
        wait_started(f, kid);
        int status = 0;
        /* a creation takes about 75 us here: the first stop falls in it
         * (or just after), the following ones spread over the rest */
        for (;;) {
            spin_us((double)pt_rng_below(&rng, 100));
            kill(kid, SIGSTOP);
            if (waitpid(kid, &status, WUNTRACED) != kid || !WIFSTOPPED(status))
                break;
            pauses++;
            sleep_us(100); /* several sweeps run meanwhile */
            kill(kid, SIGCONT);
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            if (++failed <= 3)
                printf("\n  round %d: creator exit %d (10 never created, 11 put failed, 12 its segment or disk "
                       "file was removed while it lived, 13 wrong data)",
                       r, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            shm_unlink(name); /* do not leave a failed round behind */
        }
        CU_ASSERT_FALSE(shm_exists(name)); /* the creator's close removed it */
    }
    atomic_store(&f->stop, 1);
    waitpid(sweeper, NULL, 0);
    const long sweeps = atomic_load(&f->sweeps);
    munmap(f, sizeof *f);
    printf("\n  %d rounds, %d pauses, %ld sweeps in %.2f s ", r, pauses, sweeps, (now_us() - t0) / 1e6);
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT(pauses >= ROUNDS); /* the creators were stopped mid-life, not only after */
    CU_ASSERT(sweeps >= ROUNDS); /* the sweeper really ran alongside */
    CU_ASSERT_EQUAL(rmdir(dir), 0);
}

/* A child that creates a cache with a disk tier, fills it, writes a byte to
 * `ready` and waits to be killed; it sets f->started (if f) first. */
static pid_t spawn_holder(const pt_cache_spec *spec, int ready, shared *f)
{
    pid_t kid = fork();
    if (kid == 0) {
        pt_cache *c;
        pt_err err;
        float in[ENTRY];
        const double t0 = now_us();
        if (f)
            atomic_store(&f->started, 1);
        if (pt_cache_create(&c, spec, &err))
            _exit(1);
        for (int64_t id = 0; id < spec->samples; id++) {
            pattern(id, 1, in);
            pt_cache_put(c, id, 1, in, &err);
        }
        if (f)
            atomic_store(&f->took_ns, (long)((now_us() - t0) * 1e3));
        ssize_t w = write(ready, "x", 1);
        (void)w;
        for (;;)
            pause();
    }
    return kid;
}

/* Creators killed at random moments: before their segment exists, while it
 * is being made (before and after its header, before and after its disk
 * file), while it is filled, and (every third round) once it is complete.
 * After each kill one sweep leaves neither segment nor disk file, and a live
 * cache beside them is untouched. */
static void creator_killed_at_random_then_sweep(void)
{
    private_dev_shm();
    enum { ROUNDS = 60 };
    char dir[] = "/tmp/pt-cache-XXXXXX", wdir[] = "/tmp/pt-cache-XXXXXX", wjob[64];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(wdir));
    job_name(wjob, sizeof wjob, "witness");
    pt_cache *w = witness_create(wjob, wdir);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    pt_rng rng;
    pt_rng_seed(&rng, 777, 0);
    shared *f = shared_map();
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    int leftovers = 0;
    double span = 400;
    for (int r = 0; r < ROUNDS; r++) {
        char job[64], name[128];
        snprintf(job, sizeof job, "killed-%d-%d", (int)getpid(), r);
        seg_name(name, sizeof name, job);
        pt_cache_spec spec = {job, 12, ENTRY * sizeof(float), 4 * ENTRY * sizeof(float), dir,
                              8 * ENTRY * sizeof(float)};
        int ready[2];
        CU_ASSERT_EQUAL_FATAL(pipe(ready), 0);
        pid_t kid = spawn_holder(&spec, ready[1], f);
        close(ready[1]);
        char byte;
        if (r % 3 == 0) {
            CU_ASSERT_EQUAL(read(ready[0], &byte, 1), 1);
        } else {
            wait_started(f, kid);
            spin_us((double)pt_rng_below(&rng, (uint64_t)span + 1));
        }
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
        close(ready[0]);
        const int left = shm_exists(name);
        if (r % 3)
            span = kill_span_us(f, span, !left);
        leftovers += left;
        pt_err err = {0};
        pt_cache_sweep(&err);
        CU_ASSERT_FALSE(shm_exists(name));
        CU_ASSERT_TRUE(dir_is_empty(dir)); /* its disk file went with it */
        if (shm_exists(name))
            shm_unlink(name);
    }
    munmap(f, sizeof *f);
    printf("\n  %d of %d killed creators left a segment (the last kills within %.0f us) ", leftovers, ROUNDS, span);
    CU_ASSERT(leftovers >= ROUNDS / 3); /* at least the complete ones: the sweep had work */
    CU_ASSERT_TRUE(witness_intact(w));
    pt_cache_close(w);
    CU_ASSERT_EQUAL(rmdir(wdir), 0);
    CU_ASSERT_EQUAL(rmdir(dir), 0);
}

/* The states a segment passes through while a job creates it, zero-length
 * and zero-filled (no magic, no creator recorded), held by a live process the
 * way every user of a segment holds it (a shared flock, see cache.c): kept
 * however often it is swept, removed by the first sweep after the holder
 * dies. */
static void zero_segments_kept_while_held(void)
{
    private_dev_shm();
    char empty[128], zeros[128], job[64];
    job_name(job, sizeof job, "zero-length");
    seg_name(empty, sizeof empty, job);
    job_name(job, sizeof job, "zero-filled");
    seg_name(zeros, sizeof zeros, job);
    int ready[2];
    CU_ASSERT_EQUAL_FATAL(pipe(ready), 0);
    pid_t holder = fork();
    if (holder == 0) {
        int a = make_shm_file(empty, 0), b = make_shm_file(zeros, 1 << 16);
        if (a < 0 || b < 0 || flock(a, LOCK_SH) || flock(b, LOCK_SH))
            _exit(1);
        ssize_t w = write(ready[1], "x", 1);
        (void)w;
        for (;;)
            pause();
    }
    char byte;
    CU_ASSERT_EQUAL_FATAL(read(ready[0], &byte, 1), 1);
    close(ready[0]);
    close(ready[1]);
    for (int i = 0; i < 3; i++)
        pt_cache_sweep(NULL);
    CU_ASSERT_TRUE(shm_exists(empty));
    CU_ASSERT_TRUE(shm_exists(zeros));
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CU_ASSERT(pt_cache_sweep(NULL) >= 2);
    CU_ASSERT_FALSE(shm_exists(empty));
    CU_ASSERT_FALSE(shm_exists(zeros));
    shm_unlink(empty);
    shm_unlink(zeros);
}

/* A rank attached to a segment keeps it when the creator dies first (its
 * mapping and disk file stay usable, and unlinking would free no memory while
 * it is mapped); it goes when the last user is gone. */
static void attached_rank_keeps_segment(void)
{
    private_dev_shm();
    char job[64], name[128], dir[] = "/tmp/pt-cache-XXXXXX";
    job_name(job, sizeof job, "attached");
    seg_name(name, sizeof name, job);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    pt_cache_spec spec = {job, 12, ENTRY * sizeof(float), 4 * ENTRY * sizeof(float), dir,
                          8 * ENTRY * sizeof(float)};
    int ready[2];
    CU_ASSERT_EQUAL_FATAL(pipe(ready), 0);
    pid_t creator = spawn_holder(&spec, ready[1], NULL);
    char byte;
    CU_ASSERT_EQUAL_FATAL(read(ready[0], &byte, 1), 1);
    pid_t rank = fork();
    if (rank == 0) {
        pt_cache *a;
        pt_err err;
        if (pt_cache_attach(&a, &spec, &err))
            _exit(1);
        ssize_t w = write(ready[1], "x", 1);
        (void)w;
        for (;;)
            pause();
    }
    CU_ASSERT_EQUAL_FATAL(read(ready[0], &byte, 1), 1);
    close(ready[0]);
    close(ready[1]);
    kill(creator, SIGKILL);
    waitpid(creator, NULL, 0);
    pt_cache_sweep(NULL);
    CU_ASSERT_TRUE(shm_exists(name));
    CU_ASSERT_FALSE(dir_is_empty(dir));
    kill(rank, SIGKILL);
    waitpid(rank, NULL, 0);
    CU_ASSERT(pt_cache_sweep(NULL) >= 1);
    CU_ASSERT_FALSE(shm_exists(name));
    CU_ASSERT_TRUE(dir_is_empty(dir));
    CU_ASSERT_EQUAL(rmdir(dir), 0);
}

/* Files in /dev/shm that are not this user's segments, all unheld and
 * zero-filled (what a dead creation looks like), survive sweeps unchanged:
 * another user's name; this user's name on another user's file (as root the
 * sweep could open it); names no segment has; a symbolic link to a file; a
 * FIFO (opening it would block); a directory; a live job's disk file kept in
 * /dev/shm itself. */
static void foreign_files_untouched(void)
{
    private_dev_shm();
    const unsigned me = (unsigned)getuid(), other = me + 4242;
    const int pid = (int)getpid();
    char files[5][128], link_name[128], fifo[128], dirname[128], path[700], target[300];
    snprintf(files[0], sizeof files[0], "/pipetrain-%u-other-user-%d", other, pid);
    /* given to another user below, which only root can do; else left out
     * (it would be this user's dead segment, rightly swept) */
    snprintf(files[1], sizeof files[1], "/pipetrain-%u-not-mine-%d", me, pid);
    snprintf(files[2], sizeof files[2], "/pipetrain-%u-dotted-%d.x", me, pid);
    snprintf(files[3], sizeof files[3], "/pipetrainx-%u-%d", me, pid);
    snprintf(files[4], sizeof files[4], "/pt-link-target-%d", pid);
    const int nfiles = 5;
    for (int i = 0; i < nfiles; i++) {
        if (i == 1 && me != 0)
            continue;
        int fd = make_shm_file(files[i], 4096);
        CU_ASSERT_FATAL(fd >= 0);
        if (i <= 1 && me == 0)
            CU_ASSERT_EQUAL(fchown(fd, other, other), 0);
        close(fd);
    }
    snprintf(target, sizeof target, "/dev/shm%s", files[4]);
    snprintf(link_name, sizeof link_name, "/pipetrain-%u-link-%d", me, pid);
    snprintf(path, sizeof path, "/dev/shm%s", link_name);
    CU_ASSERT_EQUAL(symlink(target, path), 0);
    snprintf(fifo, sizeof fifo, "/pipetrain-%u-fifo-%d", me, pid);
    snprintf(path, sizeof path, "/dev/shm%s", fifo);
    CU_ASSERT_EQUAL(mkfifo(path, 0600), 0);
    snprintf(dirname, sizeof dirname, "/pipetrain-%u-dir-%d", me, pid);
    snprintf(path, sizeof path, "/dev/shm%s", dirname);
    CU_ASSERT_EQUAL(mkdir(path, 0700), 0);
    char wjob[64], disk_file[700];
    job_name(wjob, sizeof wjob, "disk-in-shm");
    pt_cache *w = witness_create(wjob, "/dev/shm");
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    snprintf(disk_file, sizeof disk_file, "/dev/shm%s.cache", pt_cache_name(w));
    struct stat st;
    CU_ASSERT_EQUAL(stat(disk_file, &st), 0);

    for (int i = 0; i < 3; i++)
        pt_cache_sweep(NULL);

    static const char zero[4096];
    for (int i = 0; i < nfiles; i++) {
        if (i == 1 && me != 0)
            continue;
        char got[4096];
        snprintf(path, sizeof path, "/dev/shm%s", files[i]);
        int fd = open(path, O_RDONLY);
        CU_ASSERT(fd >= 0);
        if (fd >= 0) {
            CU_ASSERT_EQUAL(read(fd, got, sizeof got), (ssize_t)sizeof got);
            CU_ASSERT_EQUAL(memcmp(got, zero, sizeof zero), 0);
            close(fd);
        }
        CU_ASSERT_EQUAL(unlink(path), 0);
    }
    const char *others[] = {link_name, fifo};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "/dev/shm%s", others[i]);
        CU_ASSERT_EQUAL(lstat(path, &st), 0);
        CU_ASSERT_EQUAL(unlink(path), 0);
    }
    snprintf(path, sizeof path, "/dev/shm%s", dirname);
    CU_ASSERT_EQUAL(rmdir(path), 0);
    CU_ASSERT_TRUE(witness_intact(w));
    CU_ASSERT_EQUAL(stat(disk_file, &st), 0);
    pt_cache_close(w);
    CU_ASSERT_NOT_EQUAL(stat(disk_file, &st), 0); /* its creator's close removed it */
}

static const pt_test tests[] = {{"race_creator_against_sweeper", race_creator_against_sweeper},
                                {"creator_killed_at_random_then_sweep", creator_killed_at_random_then_sweep},
                                {"zero_segments_kept_while_held", zero_segments_kept_while_held},
                                {"attached_rank_keeps_segment", attached_rank_keeps_segment},
                                {"foreign_files_untouched", foreign_files_untouched},
                                {NULL, NULL}};
static const pt_test_suite suites[] = {{"sweep of the shared cache", tests}, {NULL, NULL}};
