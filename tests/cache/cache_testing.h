/*
 * cache_testing.h: what the cache's test programs share: a /dev/shm of the
 * test's own, a recognisable entry per (sample, depth), names of test jobs and
 * their segments, a page of flags shared with child processes, a creator that
 * checks its cache by name after filling it, and a live cache to keep beside
 * a test as the "nothing else" that sweeps must not touch. Functions are
 * static inline so that each program compiles only what it uses.
 */
#ifndef PT_TESTS_CACHE_TESTING_H
#define PT_TESTS_CACHE_TESTING_H

#include "cache/cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static inline int write_proc(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    const ssize_t n = (ssize_t)strlen(text), put = write(fd, text, (size_t)n);
    close(fd);
    return put == n ? 0 : -1;
}

/* Moves this process, and the children it forks from now on, to a fresh,
 * empty /dev/shm (a tmpfs in a mount namespace of its own), so that what a
 * test asserts about /dev/shm ("this sweep removed it") is not disturbed by
 * other sweeps on the machine (another test's, another job's start, which
 * may be the one removing a dead segment when this test sweeps), and so that
 * this test's sweeps never reach other people's segments. The code under
 * test is the same: it still opens /dev/shm. Root needs a mount namespace;
 * other users get one inside a user namespace that maps their ids to
 * themselves. Where neither is permitted the test says so and runs on the
 * machine's /dev/shm. */
static inline void private_dev_shm(void)
{
    const unsigned uid = (unsigned)getuid(), gid = (unsigned)getgid();
    char map[64];
    int ok = unshare(CLONE_NEWNS) == 0;
    if (!ok && unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0) {
        snprintf(map, sizeof map, "%u %u 1", uid, uid);
        ok = write_proc("/proc/self/setgroups", "deny") == 0 && write_proc("/proc/self/uid_map", map) == 0;
        snprintf(map, sizeof map, "%u %u 1", gid, gid);
        ok = ok && write_proc("/proc/self/gid_map", map) == 0;
    }
    ok = ok && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
         mount("pt-test-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") == 0;
    if (!ok)
        printf("\n  (no namespace permitted: on the machine's /dev/shm, beside whatever else sweeps it) ");
}

#define ENTRY 96 /* floats per entry */

static inline void pattern(int64_t id, int depth, float *out)
{
    for (int i = 0; i < ENTRY; i++)
        out[i] = (float)(id * 1000 + depth * 10) + (float)i * 0.001f;
}

static inline void job_name(char *out, size_t n, const char *what)
{
    snprintf(out, n, "test-%s-%d", what, (int)getpid());
}

static inline int shm_exists(const char *name)
{
    char path[300];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm%s", name);
    return stat(path, &st) == 0;
}

static inline void seg_name(char *out, size_t n, const char *job)
{
    snprintf(out, n, "/pipetrain-%u-%.63s", (unsigned)getuid(), job); /* jobs are cut at 63 too */
}

static inline double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static inline int dir_is_empty(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n == 0;
}

/* Flags shared between a test and its children (anonymous shared memory). */
typedef struct shared {
    atomic_int stop;     /* the sweeper's loop ends */
    atomic_int started;  /* a child is about to do what the test times */
    atomic_long took_ns; /* how long it took, when it was not killed first */
    atomic_long sweeps;  /* sweeps the sweeper ran */
} shared;

static inline shared *shared_map(void)
{
    shared *f = mmap(NULL, sizeof *f, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (f == MAP_FAILED)
        return NULL;
    atomic_init(&f->stop, 0);
    atomic_init(&f->started, 0);
    atomic_init(&f->took_ns, 0);
    atomic_init(&f->sweeps, 0);
    return f;
}

/* The creator of the race. Creates the cache (retrying while a planted dead
 * segment of the same name is held by the sweeper that is removing it), fills
 * both tiers, then reaches the cache again by its name: attach opens the
 * segment and the disk file by name, so it fails if either was removed under
 * the living creator. Exit status 0: intact. */
static inline int race_creator(const pt_cache_spec *spec, shared *f)
{
    pt_cache *c = NULL, *a = NULL;
    pt_err err;
    atomic_store(&f->started, 1);
    for (int tries = 0; pt_cache_create(&c, spec, &err); tries++)
        if (tries == 20000)
            return 10;
    float in[ENTRY], out[ENTRY];
    int rc = 0;
    for (int64_t id = 0; rc == 0 && id < spec->samples; id++) {
        pattern(id, 1, in);
        if (pt_cache_put(c, id, 1, in, &err) != 1)
            rc = 11;
    }
    if (rc == 0 && pt_cache_attach(&a, spec, &err)) {
        fprintf(stderr, "\n  creator %d: %s", (int)getpid(), err.msg);
        rc = 12;
    }
    for (int64_t id = 0; rc == 0 && id < spec->samples; id++) {
        pattern(id, 1, in);
        if (pt_cache_get(a, id, 1, out, &err) != 1 || memcmp(in, out, sizeof in) != 0)
            rc = 13;
    }
    pt_cache_close(a);
    pt_cache_close(c);
    return rc;
}

/* A live cache this process keeps through a test, as the "nothing else"
 * that sweeps must leave alone; 1 if all its entries read back. */
static inline int witness_intact(pt_cache *w)
{
    float in[ENTRY], out[ENTRY];
    pt_err err;
    for (int64_t id = 0; id < 12; id++) {
        pattern(id, 1, in);
        if (pt_cache_get(w, id, 1, out, &err) != 1 || memcmp(in, out, sizeof in) != 0)
            return 0;
    }
    return shm_exists(pt_cache_name(w));
}

static inline pt_cache *witness_create(const char *job, const char *dir)
{
    pt_cache_spec spec = {job, 12, ENTRY * sizeof(float), 4 * ENTRY * sizeof(float), dir,
                          8 * ENTRY * sizeof(float)};
    pt_cache *w = NULL;
    pt_err err;
    float in[ENTRY];
    if (pt_cache_create(&w, &spec, &err))
        return NULL;
    for (int64_t id = 0; id < 12; id++) {
        pattern(id, 1, in);
        pt_cache_put(w, id, 1, in, &err);
    }
    return w;
}

#endif
