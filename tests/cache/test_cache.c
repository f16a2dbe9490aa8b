/*
 * test_cache.c: the shared activation cache. Several processes fill and read
 * overlapping samples at once and every hit returns exactly what was stored;
 * the disk tier round-trips; full tiers make puts decline, not fail; a process
 * killed with SIGKILL while holding a segment leaves it behind and the next
 * sweep removes it (and its disk file), also while the killed creator is an
 * unreaped zombie; segments are mode 0600 whatever the
 * umask; a cache opened after a stop signal has no names left; a relative
 * disk directory's file is swept from another working directory; a disk
 * file a creator left half-made (NAME.cache.creating) is swept once dead,
 * not while being made. The sweep against live and dying processes is in
 * test_cache_sweep.c and test_cache_sweep_steps.c.
 */
#define _GNU_SOURCE /* unshare, for cache_testing.h */
#include "tests/cache/cache_testing.h"
#include "tests/common/cunit_main.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void round_trip_and_depths(void)
{
    char job[64];
    job_name(job, sizeof job, "basic");
    pt_cache_spec spec = {job, 50, ENTRY * sizeof(float), 20 * ENTRY * sizeof(float), NULL, 0};
    pt_cache *c;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_cache_create(&c, &spec, &err), 0);
    float in[ENTRY], out[ENTRY];
    pattern(7, 2, in);
    CU_ASSERT_EQUAL(pt_cache_get(c, 7, 2, out, &err), 0); /* empty */
    CU_ASSERT_EQUAL(pt_cache_put(c, 7, 2, in, &err), 1);
    CU_ASSERT_EQUAL(pt_cache_depth(c, 7), 2);
    CU_ASSERT_EQUAL(pt_cache_get(c, 7, 2, out, &err), 1);
    CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
    CU_ASSERT_EQUAL(pt_cache_get(c, 7, 3, out, &err), 0); /* another depth */
    float shallow[ENTRY];
    pattern(7, 1, shallow);
    CU_ASSERT_EQUAL(pt_cache_put(c, 7, 1, shallow, &err), 1); /* a deeper entry exists: kept */
    CU_ASSERT_EQUAL(pt_cache_depth(c, 7), 2);
    pattern(7, 5, in);
    CU_ASSERT_EQUAL(pt_cache_put(c, 7, 5, in, &err), 1); /* deeper: replaces in place */
    CU_ASSERT_EQUAL(pt_cache_get(c, 7, 5, out, &err), 1);
    CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
    pt_cache_stats st;
    pt_cache_stats_get(c, &st);
    CU_ASSERT_EQUAL(st.memory_used, 1); /* one location for the sample, reused */
    /* an entry is written once per depth: another put at its depth (a
     * rank that computed the same sample) keeps the first, never
     * rewriting bytes a reader may be copying */
    float other[ENTRY];
    pattern(8, 5, other);
    CU_ASSERT_EQUAL(pt_cache_put(c, 7, 5, other, &err), 1);
    CU_ASSERT_EQUAL(pt_cache_get(c, 7, 5, out, &err), 1);
    CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
    CU_ASSERT_EQUAL(pt_cache_get(c, 50, 5, out, &err), 0); /* out of range */
    CU_ASSERT_NOT_EQUAL(pt_cache_put(c, 50, 1, in, &err), 1);
    for (int64_t id = 50; id <= 52; id++) /* past the slots: no depth, whatever lies there */
        CU_ASSERT_EQUAL(pt_cache_depth(c, id), 0);
    CU_ASSERT_EQUAL(pt_cache_depth(c, -1), 0);
    CU_ASSERT_EQUAL(pt_cache_get(c, -1, 5, out, &err), 0);
    /* depths up to the slot's 16 bits: 65535 frozen units is a depth */
    pattern(9, 0xffff, in);
    CU_ASSERT_EQUAL(pt_cache_put(c, 9, 0xffff, in, &err), 1);
    CU_ASSERT_EQUAL(pt_cache_depth(c, 9), 0xffff);
    CU_ASSERT_EQUAL(pt_cache_get(c, 9, 0xffff, out, &err), 1);
    CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
    CU_ASSERT_EQUAL(pt_cache_put(c, 10, 0x10000, in, &err), PT_EINTERNAL);
    CU_ASSERT_EQUAL(pt_cache_put(c, 10, 0, in, &err), PT_EINTERNAL);
    CU_ASSERT_EQUAL(pt_cache_depth(c, 10), 0);
    pt_cache_close(c);
    char name[128];
    snprintf(name, sizeof name, "/pipetrain-%u-%s", (unsigned)getuid(), job);
    CU_ASSERT_FALSE(shm_exists(name));
}

/* A child process: random puts and gets over every sample; returns wrong reads. */
static int hammer(const pt_cache_spec *spec, int seed)
{
    pt_cache *c;
    pt_err err;
    if (pt_cache_attach(&c, spec, &err))
        return 100;
    pt_rng rng;
    pt_rng_seed(&rng, (uint64_t)seed, 0);
    float in[ENTRY], out[ENTRY];
    int bad = 0, hits = 0;
    for (int i = 0; i < 20000; i++) {
        int64_t id = (int64_t)pt_rng_below(&rng, (uint64_t)spec->samples);
        int depth = 1 + (int)pt_rng_below(&rng, 4);
        if (pt_rng_below(&rng, 2)) {
            pattern(id, depth, in);
            if (pt_cache_put(c, id, depth, in, &err) < 0)
                bad++;
        } else {
            int got = pt_cache_get(c, id, depth, out, &err);
            if (got < 0)
                bad++;
            if (got == 1) {
                hits++;
                pattern(id, depth, in);
                bad += memcmp(in, out, sizeof in) != 0;
            }
        }
    }
    pt_cache_close(c);
    return bad ? (bad > 99 ? 99 : bad) : (hits ? 0 : 98);
}

static void concurrent_processes(void)
{
    char job[64], dir[] = "/tmp/pt-cache-XXXXXX";
    job_name(job, sizeof job, "multi");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    /* memory for a third of the samples, disk for another third: both tiers in play */
    pt_cache_spec spec = {job, 300, ENTRY * sizeof(float), 100 * ENTRY * sizeof(float), dir,
                          100 * ENTRY * sizeof(float)};
    pt_cache *c;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_cache_create(&c, &spec, &err), 0);
    pid_t kids[4];
    for (int k = 0; k < 4; k++)
        if ((kids[k] = fork()) == 0)
            _exit(hammer(&spec, k + 1));
    for (int k = 0; k < 4; k++) {
        int status = 0;
        waitpid(kids[k], &status, 0);
        CU_ASSERT_TRUE(WIFEXITED(status));
        if (WEXITSTATUS(status))
            printf("\n  process %d: exit %d (wrong reads or no hits)", k, WEXITSTATUS(status));
        CU_ASSERT_EQUAL(WEXITSTATUS(status), 0);
    }
    pt_cache_stats st;
    pt_cache_stats_get(c, &st);
    CU_ASSERT_EQUAL(st.memory_used, 100);
    CU_ASSERT_EQUAL(st.disk_used, 100);
    /* after the storm every stored entry is still exactly its pattern */
    float in[ENTRY], out[ENTRY];
    int checked = 0;
    for (int64_t id = 0; id < 300; id++) {
        int d = pt_cache_depth(c, id);
        if (d) {
            CU_ASSERT_EQUAL(pt_cache_get(c, id, d, out, &err), 1);
            pattern(id, d, in);
            CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
            checked++;
        }
    }
    CU_ASSERT_EQUAL(checked, 200); /* exactly what the two tiers hold */
    pt_cache_close(c);
    CU_ASSERT_EQUAL(rmdir(dir), 0); /* the disk file went with the cache */
}

static void disk_tier_and_full(void)
{
    char job[64], dir[] = "/tmp/pt-cache-XXXXXX";
    job_name(job, sizeof job, "disk");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    pt_cache_spec spec = {job, 30, ENTRY * sizeof(float), 10 * ENTRY * sizeof(float), dir,
                          10 * ENTRY * sizeof(float)};
    pt_cache *c;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_cache_create(&c, &spec, &err), 0);
    float in[ENTRY], out[ENTRY];
    int stored = 0;
    for (int64_t id = 0; id < 30; id++) {
        pattern(id, 1, in);
        int rc = pt_cache_put(c, id, 1, in, &err);
        CU_ASSERT(rc == 0 || rc == 1);
        stored += rc;
    }
    CU_ASSERT_EQUAL(stored, 20); /* 10 in memory, 10 on disk, 10 computed every time */
    for (int64_t id = 0; id < 30; id++) {
        int hit = pt_cache_get(c, id, 1, out, &err);
        CU_ASSERT_EQUAL(hit, id < 20);
        pattern(id, 1, in);
        if (hit)
            CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
    }
    /* entries on disk are deepened in place like those in memory */
    pattern(15, 3, in);
    CU_ASSERT_EQUAL(pt_cache_put(c, 15, 3, in, &err), 1);
    CU_ASSERT_EQUAL(pt_cache_get(c, 15, 3, out, &err), 1);
    CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
    pt_cache_close(c);
    CU_ASSERT_EQUAL(rmdir(dir), 0);
}

/* A disk tier whose writes find no room is closed to new entries instead of
 * failing the put, so the run computes those samples; what it holds stays
 * readable. Here the file size limit fails the write of entry 5 (EFBIG, as
 * ENOSPC would: the reservation within the file's size passes), and in
 * disk_tier_reservation_fails a small file system fails the reservation. */
static void disk_tier_file_system_full(void)
{
    char job[64], dir[] = "/tmp/pt-cache-XXXXXX";
    job_name(job, sizeof job, "diskfull");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    pt_cache_spec spec = {job, 30, ENTRY * sizeof(float), 0, dir, 20 * ENTRY * sizeof(float)};
    pt_cache *c;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_cache_create(&c, &spec, &err), 0);
    struct rlimit was, small;
    CU_ASSERT_FATAL(getrlimit(RLIMIT_FSIZE, &was) == 0);
    small = was;
    small.rlim_cur = 5 * ENTRY * sizeof(float); /* room for entries 0..4 */
    void (*old)(int) = signal(SIGXFSZ, SIG_IGN);
    CU_ASSERT_FATAL(setrlimit(RLIMIT_FSIZE, &small) == 0);
    float in[ENTRY], out[ENTRY];
    int stored = 0, failed = 0;
    for (int64_t id = 0; id < 30; id++) {
        pattern(id, 1, in);
        int rc = pt_cache_put(c, id, 1, in, &err);
        failed += rc < 0;
        stored += rc == 1;
    }
    CU_ASSERT_FATAL(setrlimit(RLIMIT_FSIZE, &was) == 0);
    signal(SIGXFSZ, old);
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT_EQUAL(stored, 5);
    pattern(29, 1, in); /* closed for good: room later changes nothing */
    CU_ASSERT_EQUAL(pt_cache_put(c, 29, 1, in, &err), 0);
    for (int64_t id = 0; id < 30; id++) {
        int hit = pt_cache_get(c, id, 1, out, &err);
        CU_ASSERT_EQUAL(hit, id < 5);
        pattern(id, 1, in);
        if (hit)
            CU_ASSERT_EQUAL(memcmp(in, out, sizeof in), 0);
    }
    pt_cache_stats st;
    pt_cache_stats_get(c, &st);
    CU_ASSERT(st.disk_entries == 20 && st.disk_used == 20); /* used: no more taken */
    pt_cache_close(c);
    CU_ASSERT_EQUAL(rmdir(dir), 0);
}

/* In a mount namespace of its own (else it reports 77: not permitted
 * here), a disk tier on an 8 KiB tmpfs: entries 0..20 (384 bytes each) fit
 * in its two pages, entry 21's reservation fails, and the tier closes. */
static int reservation_fails_child(const char *job)
{
    char dir[] = "/tmp/pt-cache-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("pt-test-disk", dir, "tmpfs", 0, "size=8k") != 0) {
        rmdir(dir);
        return 77;
    }
    pt_cache_spec spec = {job, 30, ENTRY * sizeof(float), 0, dir, 30 * ENTRY * sizeof(float)};
    pt_cache *c;
    pt_err err = {0};
    if (pt_cache_create(&c, &spec, &err) != 0)
        return 2;
    float in[ENTRY], out[ENTRY];
    int stored = 0, failed = 0, wrong = 0;
    for (int64_t id = 0; id < 30; id++) {
        pattern(id, 1, in);
        int rc = pt_cache_put(c, id, 1, in, &err);
        failed += rc < 0;
        stored += rc == 1;
    }
    for (int64_t id = 0; id < 30; id++) {
        pattern(id, 1, in);
        int hit = pt_cache_get(c, id, 1, out, &err);
        wrong += hit != (id < 21) || (hit && memcmp(in, out, sizeof in) != 0);
    }
    pt_cache_close(c);
    umount(dir);
    rmdir(dir);
    return failed ? 3 : stored != 21 ? 4 : wrong ? 5 : 0;
}

static void disk_tier_reservation_fails(void)
{
    char job[64];
    job_name(job, sizeof job, "reserve");
    pid_t pid = fork();
    if (pid == 0)
        _exit(reservation_fails_child(job));
    int status = 0;
    CU_ASSERT_FATAL(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        printf("\n  (no mount namespace permitted: the reservation's failure is not tested) ");
    else
        CU_ASSERT_EQUAL(WEXITSTATUS(status), 0);
}

/* A child that creates a cache named job with its disk tier in dir, in a
 * /dev/shm of its own (as in a container), says so on ready and waits to be
 * killed. */
static pid_t disk_tier_child(const char *job, const char *dir, int ready)
{
    pid_t pid = fork();
    if (pid == 0) {
        private_dev_shm();
        pt_cache_spec spec = {job, 10, ENTRY * sizeof(float), 0, dir, 10 * ENTRY * sizeof(float)};
        pt_cache *c;
        pt_err err = {0};
        char ok = pt_cache_create(&c, &spec, &err) == 0 ? 'y' : 'n';
        if (write(ready, &ok, 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    return pid;
}

/* Disk files whose segment went with its /dev/shm (a job killed in a
 * container, a reboot): the next create with that disk_dir removes them,
 * but never one a live job holds, wherever its segment is. */
static void disk_file_without_segment_swept(void)
{
    char dir[] = "/tmp/pt-cache-XXXXXX", job_a[64], job_b[64], job_c[64], path[256];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    job_name(job_a, sizeof job_a, "alive");
    job_name(job_b, sizeof job_b, "killed");
    job_name(job_c, sizeof job_c, "next");
    int ready[2];
    CU_ASSERT_EQUAL_FATAL(pipe(ready), 0);
    pid_t a = disk_tier_child(job_a, dir, ready[1]), b = disk_tier_child(job_b, dir, ready[1]);
    char got[2] = {0, 0};
    CU_ASSERT_FATAL(a > 0 && b > 0 && read(ready[0], got, 1) == 1 && read(ready[0], got + 1, 1) == 1);
    CU_ASSERT(got[0] == 'y' && got[1] == 'y');
    kill(b, SIGKILL);
    waitpid(b, NULL, 0);
    char file_a[512], file_b[512];
    snprintf(file_a, sizeof file_a, "%s/pipetrain-%u-%s.cache", dir, (unsigned)getuid(), job_a);
    snprintf(file_b, sizeof file_b, "%s/pipetrain-%u-%s.cache", dir, (unsigned)getuid(), job_b);
    CU_ASSERT(access(file_a, F_OK) == 0 && access(file_b, F_OK) == 0);
    pt_cache_spec spec = {job_c, 10, ENTRY * sizeof(float), 0, dir, 10 * ENTRY * sizeof(float)};
    pt_cache *c;
    pt_err err = {0};
    CU_ASSERT_EQUAL_FATAL(pt_cache_create(&c, &spec, &err), 0);
    CU_ASSERT(access(file_b, F_OK) != 0); /* dead: removed */
    CU_ASSERT(access(file_a, F_OK) == 0); /* alive: kept */
    pt_cache_close(c);
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    CU_ASSERT_EQUAL_FATAL(pt_cache_create(&c, &spec, &err), 0);
    CU_ASSERT(access(file_a, F_OK) != 0);
    pt_cache_close(c);
    close(ready[0]);
    close(ready[1]);
    snprintf(path, sizeof path, "%s", dir);
    CU_ASSERT_EQUAL(rmdir(path), 0);
}

/* A creator SIGKILLed while it holds its segment; reap: waited for, else
 * left a zombie (as where nothing reaps a killed job's orphans) until the
 * sweep is done. Either way the next sweep removes the segment. */
static void sigkill_then_sweep_as(int reap)
{
    private_dev_shm();
    char job[64], dir[] = "/tmp/pt-cache-XXXXXX", name[128];
    job_name(job, sizeof job, "killed");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(name, sizeof name, "/pipetrain-%u-%s", (unsigned)getuid(), job);
    pt_cache_spec spec = {job, 40, ENTRY * sizeof(float), 4 * ENTRY * sizeof(float), dir,
                          8 * ENTRY * sizeof(float)};
    int ready[2];
    CU_ASSERT_EQUAL_FATAL(pipe(ready), 0);
    pid_t kid = fork();
    if (kid == 0) {
        pt_cache *c;
        pt_err err;
        float in[ENTRY];
        if (pt_cache_create(&c, &spec, &err))
            _exit(1);
        for (int64_t id = 0; id < 10; id++) {
            pattern(id, 1, in);
            pt_cache_put(c, id, 1, in, &err);
        }
        ssize_t w = write(ready[1], "x", 1);
        (void)w;
        for (;;)
            pause(); /* holds the segment until killed */
    }
    char byte;
    CU_ASSERT_EQUAL(read(ready[0], &byte, 1), 1);
    close(ready[0]);
    close(ready[1]);
    CU_ASSERT_TRUE(shm_exists(name));
    pt_err err = {0};
    CU_ASSERT_EQUAL(pt_cache_sweep(&err) >= 0, 1);
    CU_ASSERT_TRUE(shm_exists(name)); /* its creator is alive: not swept */
    kill(kid, SIGKILL);
    if (reap) {
        waitpid(kid, NULL, 0);
    } else { /* until it has exited, without reaping it: a zombie */
        siginfo_t info;
        CU_ASSERT_EQUAL(waitid(P_PID, (id_t)kid, &info, WEXITED | WNOWAIT), 0);
        CU_ASSERT_EQUAL(kill(kid, 0), 0); /* the pid still answers */
    }
    CU_ASSERT_TRUE(shm_exists(name)); /* a SIGKILL runs no cleanup */
    CU_ASSERT_TRUE(pt_cache_sweep(&err) >= 1);
    CU_ASSERT_FALSE(shm_exists(name));
    CU_ASSERT_EQUAL(rmdir(dir), 0); /* the disk file was removed too */
    if (!reap)
        waitpid(kid, NULL, 0);
}

static void sigkill_then_sweep(void) { sigkill_then_sweep_as(1); }
static void zombie_creator_swept(void) { sigkill_then_sweep_as(0); }

static void mode_0600_and_attach_errors(void)
{
    char job[64], name[128], path[300];
    job_name(job, sizeof job, "mode");
    snprintf(name, sizeof name, "/pipetrain-%u-%s", (unsigned)getuid(), job);
    pt_cache_spec spec = {job, 10, ENTRY * sizeof(float), ENTRY * sizeof(float), NULL, 0};
    mode_t old = umask(0);
    pt_cache *c;
    pt_err err = {0};
    int rc = pt_cache_create(&c, &spec, &err);
    umask(old);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm%s", name);
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
    /* a second creator of the same job is refused (O_EXCL) */
    pt_cache *again;
    CU_ASSERT_NOT_EQUAL(pt_cache_create(&again, &spec, &err), 0);
    /* attaching with another geometry is refused */
    pt_cache_spec other = spec;
    other.entry_bytes = 8;
    CU_ASSERT_NOT_EQUAL(pt_cache_attach(&again, &other, &err), 0);
    pt_cache_close(c);
    CU_ASSERT_NOT_EQUAL(pt_cache_attach(&again, &spec, &err), 0); /* gone */
}

/* A stop signal before the cache was open found no names to take off: the
 * cache opens, works, and has no names left (nothing for a sweep, no rank
 * can attach). In a child: the released state is the process's. */
static void names_released_before_open(void)
{
    char dir[] = "/tmp/pt-cache-XXXXXX", job[64], name[128];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    job_name(job, sizeof job, "released");
    seg_name(name, sizeof name, job);
    pid_t kid = fork();
    if (kid == 0) {
        pt_cache_release_names(); /* as the signal handler does */
        pt_cache_spec spec = {job, 10, ENTRY * sizeof(float), 2 * ENTRY * sizeof(float), dir,
                              10 * ENTRY * sizeof(float)};
        pt_cache *c, *other;
        pt_err err = {0};
        if (pt_cache_create(&c, &spec, &err))
            _exit(2);
        float in[ENTRY], out[ENTRY];
        int bad = shm_exists(name) ? 3 : !dir_is_empty(dir) ? 4 : 0;
        for (int64_t id = 0; id < 5 && !bad; id++) { /* both tiers */
            pattern(id, 1, in);
            bad = pt_cache_put(c, id, 1, in, &err) != 1 || pt_cache_get(c, id, 1, out, &err) != 1 ||
                  memcmp(in, out, sizeof in) ? 5 : 0;
        }
        if (!bad && pt_cache_attach(&other, &spec, &err) == 0)
            bad = 6;
        pt_cache_close(c);
        _exit(bad);
    }
    int status = 0;
    CU_ASSERT_FATAL(kid > 0 && waitpid(kid, &status, 0) == kid && WIFEXITED(status));
    CU_ASSERT_EQUAL(WEXITSTATUS(status), 0);
    CU_ASSERT_FALSE(shm_exists(name));
    CU_ASSERT_EQUAL(rmdir(dir), 0);
}

/* A relative cache.disk_dir: a job SIGKILLed in one working directory, the
 * sweep in another still removes its disk file with the segment (the
 * header names the file by its absolute path). */
static void relative_disk_dir_swept_elsewhere(void)
{
    private_dev_shm();
    char base[] = "/tmp/pt-cache-XXXXXX", a[300], b[300], rel[300], job[64], name[128], here[4096];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(base));
    CU_ASSERT_PTR_NOT_NULL_FATAL(getcwd(here, sizeof here));
    snprintf(a, sizeof a, "%s/a", base);
    snprintf(b, sizeof b, "%s/b", base);
    snprintf(rel, sizeof rel, "%s/a/rel", base);
    CU_ASSERT_FATAL(mkdir(a, 0700) == 0 && mkdir(b, 0700) == 0 && mkdir(rel, 0700) == 0);
    job_name(job, sizeof job, "relative");
    seg_name(name, sizeof name, job);
    int ready[2];
    CU_ASSERT_EQUAL_FATAL(pipe(ready), 0);
    pid_t kid = fork();
    if (kid == 0) {
        pt_cache_spec spec = {job, 10, ENTRY * sizeof(float), 0, "rel", 10 * ENTRY * sizeof(float)};
        pt_cache *c;
        pt_err err = {0};
        char ok = chdir(a) == 0 && pt_cache_create(&c, &spec, &err) == 0 ? 'y' : 'n';
        if (write(ready[1], &ok, 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    char ok = 0;
    CU_ASSERT_FATAL(kid > 0 && read(ready[0], &ok, 1) == 1);
    CU_ASSERT_EQUAL(ok, 'y');
    CU_ASSERT_FALSE(dir_is_empty(rel));
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    close(ready[0]);
    close(ready[1]);
    CU_ASSERT_EQUAL_FATAL(chdir(b), 0); /* where no "rel" is */
    pt_err err = {0};
    CU_ASSERT(pt_cache_sweep(&err) >= 1);
    CU_ASSERT_EQUAL(chdir(here), 0);
    CU_ASSERT_FALSE(shm_exists(name));
    CU_ASSERT_TRUE(dir_is_empty(rel)); /* its disk file went with it */
    CU_ASSERT(rmdir(rel) == 0 && rmdir(a) == 0 && rmdir(b) == 0 && rmdir(base) == 0);
}

/* NAME.cache.creating, the name a disk file has while it is made where
 * there is no O_TMPFILE: one a dead creator left (old, unlocked, its
 * segment gone) is swept; one being made (recent, or locked) is not. */
static void creating_file_swept(void)
{
    private_dev_shm();
    char dir[] = "/tmp/pt-cache-XXXXXX", old[512], fresh[512], held[512];
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    const unsigned uid = (unsigned)getuid();
    const int pid = (int)getpid();
    snprintf(old, sizeof old, "%s/pipetrain-%u-test-old-%d.cache.creating", dir, uid, pid);
    snprintf(fresh, sizeof fresh, "%s/pipetrain-%u-test-fresh-%d.cache.creating", dir, uid, pid);
    snprintf(held, sizeof held, "%s/pipetrain-%u-test-held-%d.cache.creating", dir, uid, pid);
    int fds[3];
    const char *paths[3] = {old, fresh, held};
    for (int k = 0; k < 3; k++)
        CU_ASSERT_FATAL((fds[k] = open(paths[k], O_CREAT | O_EXCL | O_RDWR, 0600)) >= 0);
    const struct timespec past[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    CU_ASSERT(futimens(fds[0], past) == 0 && futimens(fds[2], past) == 0);
    close(fds[0]);
    close(fds[1]);
    pid_t holder = fork(); /* a creator that holds its lock, as create does */
    if (holder == 0) {
        if (flock(fds[2], LOCK_SH) != 0)
            _exit(1);
        for (;;)
            pause();
    }
    close(fds[2]);
    usleep(100 * 1000);
    CU_ASSERT_EQUAL(pt_cache_sweep_disk(dir), 1);
    CU_ASSERT(access(old, F_OK) != 0);
    CU_ASSERT(access(fresh, F_OK) == 0);
    CU_ASSERT(access(held, F_OK) == 0);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CU_ASSERT_EQUAL(pt_cache_sweep_disk(dir), 1); /* unlocked now */
    CU_ASSERT(access(held, F_OK) != 0);
    CU_ASSERT(unlink(fresh) == 0 && rmdir(dir) == 0);
}

static const pt_test tests[] = {{"round_trip_and_depths", round_trip_and_depths},
                                {"concurrent_processes", concurrent_processes},
                                {"disk_tier_and_full", disk_tier_and_full},
                                {"disk_tier_file_system_full", disk_tier_file_system_full},
                                {"disk_tier_reservation_fails", disk_tier_reservation_fails},
                                {"disk_file_without_segment_swept", disk_file_without_segment_swept},
                                {"sigkill_then_sweep", sigkill_then_sweep},
                                {"zombie_creator_swept", zombie_creator_swept},
                                {"mode_0600_and_attach_errors", mode_0600_and_attach_errors},
                                {"names_released_before_open", names_released_before_open},
                                {"relative_disk_dir_swept_elsewhere", relative_disk_dir_swept_elsewhere},
                                {"creating_file_swept", creating_file_swept},
                                {NULL, NULL}};
static const pt_test_suite suites[] = {{"shared activation cache", tests}, {NULL, NULL}};
