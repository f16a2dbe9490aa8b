/*
 * cpu_pool.c: the CPU backend's thread pool (nn/cpu_pool.h): persistent
 * workers, tasks claimed one at a time from per-thread ranges, and waits that
 * spin briefly and then sleep on a futex, with a spin that adapts to whether
 * spinning pays.
 *
 * A run. The caller publishes the run (the task function, its context and
 * the task count), wakes sleeping workers, claims tasks like any worker, and
 * then waits until the count of finished tasks reaches the task count. It
 * does not wait for the workers themselves: a worker that wakes late finds
 * the run claimed or over and goes back to waiting, so a descheduled thread
 * costs the run only a task it already holds.
 *
 * Claiming. A run's n tasks are cut into one contiguous range per thread
 * (thread t of T: [t n / T, (t + 1) n / T)). Each range has a 64-bit word in
 * a cache line of its own, holding the run's sequence number (high half) and
 * the range's next unclaimed task (low half); a thread claims task i by
 * moving the word from (seq, i) to (seq, i + 1), so a claim belongs to
 * exactly one run. A thread first claims from its own range, then from the
 * others' in turn, so no task waits for a slow thread's range. Why ranges:
 * ops cut their rows into tasks in order, so a thread then mostly reads the
 * rows it wrote in the op before, and claims touch a line no other thread
 * writes. On a chiplet CPU whose two vCPUs the host may place on different
 * L3s, every line written by one thread and read by the other crosses the
 * I/O die (a round trip of 300-370 ns against 50-90 ns on one L3, on the
 * development VM); with one shared counter the demo ran 10% slower there
 * (README, "where the host puts the two vCPUs"). PIPETRAIN_POOL_RANGES=0
 * in the environment brings back the one shared counter, for measuring it.
 * The run's fields are written while every word's sequence number is odd
 * (all are made odd before the first field changes) and read between the
 * load of a word and the claim on it (a sequence lock): a claim that
 * succeeds saw the fields of its own run. A run over 2^30 tasks
 * (MAX_RUN_TASKS) is published in parts, one after another, each cut into
 * ranges of its own. Publishing writes every range's word and a waking
 * worker reads them all, so a run costs O(threads^2) cache-line moves in
 * all: nothing at the 2 to 16 threads a CPU backend runs.
 *
 * Waiting. A waiting thread (a worker between runs, the caller for the last
 * tasks) spins on the word it waits for, with a pause instruction, for up to
 * its spin limit, then sleeps in futex(2) until woken. Spinning pays when
 * the thread it waits for is running and will answer within microseconds;
 * it is wasted when that thread is descheduled (other processes on the
 * cores) or idle for long: the spinner then takes a time slice from work
 * that could use it (another process, or the very thread it waits for),
 * which is what made libgomp's default spin cost 14.5 times the quiet CPU
 * time beside busy processes (README, "Beside other work"). So each thread
 * keeps its own limit, starting at SPIN_CAP: after a wait that lasted no
 * longer than SPIN_CAP (spinning would have covered it, or did) the limit
 * doubles, up to SPIN_CAP; after a longer one it halves, towards 0, where
 * the thread sleeps at once. A wait lasts until the other thread ended it
 * (posted the run, finished the last task: it notes the time), not until
 * this thread noticed: after a sleep that adds the wake-up's latency, tens
 * of microseconds on a virtual machine, which would keep a sleeping thread
 * asleep for good. Beside busy processes the thread waited for is often
 * descheduled, waits outlast the cap and the threads end up sleeping at
 * once; on a quiet machine nearly all waits inside a step are short and
 * they spin. PIPETRAIN_SPIN_US in the
 * environment overrides SPIN_CAP when the pool is made (0: always sleep at
 * once), for measuring it.
 *
 * Nothing here affects results: which thread runs a task and when is the
 * only thing waiting changes (cpu_pool.h states what the tasks must keep to).
 */
#include "nn/cpu_pool.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define CPU_RELAX() ((void)0)
#endif

/* The longest a waiting thread spins before it sleeps, in nanoseconds.
 * Measured on the 2-core development VM (AMD EPYC, AVX-512), demo ViT at 2
 * threads, 200 steps, quiet machine, settings alternated (samples/s of the
 * undisturbed runs): sleeping at once (cap 0) 3485-3799; caps of 5, 10, 20
 * and 50 us and an unbounded spin all 3970-4100, the same within the noise.
 * Waits between ops there: about 80% under 8 us, 90% under 16 us, 1% over
 * 1 ms (the caller's serial work between steps). 20 us, four times the
 * smallest cap that lost nothing, leaves room for slower hand-offs
 * elsewhere and costs a spinning thread little beside busy processes. */
#define SPIN_CAP_NS 20000

/* Tasks per published run: the claim word's low half, with room to count past. */
#define MAX_RUN_TASKS (1L << 30)

/* A worker's stack: 8 MiB, the usual default, fixed (see pt_pool_create). */
#define WORKER_STACK ((size_t)8 << 20)

typedef struct {
    _Atomic uint64_t spin_ns; /* written by its thread only; atomic for pt_pool_get_stats */
    _Atomic long long waits, sleeps;
} waiter;

typedef struct {
    _Alignas(64) _Atomic uint64_t word;
} claim_line;

typedef struct {
    _Alignas(64) waiter w;
    pt_pool *pool;
    int index;
    pthread_t tid;
} worker;

struct pt_pool {
    int threads, started;
    void (*init)(void);
    uint64_t cap_ns;
    int cap_from_env;
    worker *workers; /* threads - 1 */
    /* claims, one word per thread's range of tasks, each in its own cache
     * line: seq << 32 | the range's next task. The pointer and the count are
     * read by every thread in every run and written only by pt_pool_create,
     * so they sit here, away from the lines the caller writes each run. */
    claim_line *claims;
    int ranges; /* 1: one shared word (PIPETRAIN_POOL_RANGES=0), else threads */
    /* the caller's side */
    _Alignas(64) uint32_t seq; /* the last run's sequence number, even */
    waiter caller;
    _Atomic int busy;
    /* the run; written while every claim word's seq is odd */
    _Alignas(64) _Atomic(pt_pool_fn) fn;
    _Atomic(void *) ctx;
    _Atomic uint32_t ntasks;
    _Atomic long base;
    /* workers wait for gen (the last run's seq) to change; posted_ns: when */
    _Alignas(64) _Atomic uint32_t gen;
    _Atomic int sleepers, stop;
    _Atomic uint64_t posted_ns;
    /* the caller waits for done (tasks finished in this run) to reach
     * ntasks; done_ns: when a task last finished */
    _Alignas(64) _Atomic uint32_t done;
    _Atomic int caller_asleep;
    _Atomic uint64_t done_ns;
};

/* set while this thread runs a task of a parallel run: runs it starts are serial */
static _Thread_local int in_task;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void futex_wait(_Atomic uint32_t *word, uint32_t val)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word, int n)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static void count(_Atomic long long *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* After a wait that began at t0 and that the other thread ended at `ended`
 * (its clock when it posted the run or finished the last task; not when
 * this thread saw it, which after a sleep adds the wake-up's latency):
 * double the spin limit if a spin of the cap would have covered the wait,
 * else halve it (see the top of the file). */
static void adapt(waiter *w, uint64_t t0, uint64_t ended, uint64_t cap)
{
    const uint64_t waited = ended > t0 ? ended - t0 : 0;
    uint64_t s = atomic_load_explicit(&w->spin_ns, memory_order_relaxed);
    if (waited <= cap) {
        s = s * 2 + cap / 16;
        s = s > cap ? cap : s;
    } else {
        s /= 2;
    }
    atomic_store_explicit(&w->spin_ns, s, memory_order_relaxed);
}

/* Spins until *word differs from val (want_equal 0) or equals it (1), for at
 * most spin_ns from t0; 1 when it happened. */
static int spin(_Atomic uint32_t *word, uint32_t val, int want_equal, uint64_t t0,
                uint64_t spin_ns)
{
    for (;;) {
        for (int i = 0; i < 16; i++) {
            if ((atomic_load_explicit(word, memory_order_acquire) == val) == want_equal)
                return 1;
            CPU_RELAX();
        }
        if (now_ns() - t0 >= spin_ns)
            return 0;
    }
}

/* A worker: waits until gen differs from seen; returns it. */
static uint32_t wait_run(pt_pool *p, waiter *w, uint32_t seen)
{
    uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
    if (g != seen)
        return g;
    const uint64_t t0 = now_ns();
    const uint64_t limit = atomic_load_explicit(&w->spin_ns, memory_order_relaxed);
    if (!limit || !spin(&p->gen, seen, 0, t0, limit)) {
        count(&w->sleeps);
        atomic_fetch_add(&p->sleepers, 1);
        while (atomic_load(&p->gen) == seen)
            futex_wait(&p->gen, seen);
        atomic_fetch_sub(&p->sleepers, 1);
    }
    count(&w->waits);
    g = atomic_load_explicit(&p->gen, memory_order_acquire);
    adapt(w, t0, atomic_load_explicit(&p->posted_ns, memory_order_relaxed), p->cap_ns);
    return g;
}

/* The caller: waits until done reaches n. */
static void wait_done(pt_pool *p, uint32_t n)
{
    if (atomic_load_explicit(&p->done, memory_order_acquire) == n)
        return;
    waiter *w = &p->caller;
    const uint64_t t0 = now_ns();
    const uint64_t limit = atomic_load_explicit(&w->spin_ns, memory_order_relaxed);
    if (!limit || !spin(&p->done, n, 1, t0, limit)) {
        count(&w->sleeps);
        atomic_store(&p->caller_asleep, 1);
        uint32_t d;
        while ((d = atomic_load(&p->done)) != n)
            futex_wait(&p->done, d);
        atomic_store(&p->caller_asleep, 0);
    }
    count(&w->waits);
    adapt(w, t0, atomic_load_explicit(&p->done_ns, memory_order_relaxed), p->cap_ns);
}

/* The end of range r of a run of n tasks over `ranges` ranges. */
static inline uint32_t range_end(uint32_t n, int ranges, int r)
{
    return (uint32_t)((uint64_t)n * (uint64_t)(r + 1) / (uint64_t)ranges);
}

/* Claims and runs tasks of the current run until none is left: first from
 * this thread's own range, then from the others' in turn. */
static void run_tasks(pt_pool *p, int thread)
{
    const int ranges = p->ranges;
    for (int k = 0; k < ranges; k++) {
        const int r = (thread + k) % ranges;
        _Atomic uint64_t *word = &p->claims[r].word;
        for (;;) {
            uint64_t c = atomic_load_explicit(word, memory_order_acquire);
            if ((c >> 32) & 1) /* a run being published: gen announces it */
                return;
            const pt_pool_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
            void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
            const uint32_t n = atomic_load_explicit(&p->ntasks, memory_order_relaxed);
            const long base = atomic_load_explicit(&p->base, memory_order_relaxed);
            /* the fields' loads complete before the claim re-reads the word */
            atomic_thread_fence(memory_order_acquire);
            const uint32_t t = (uint32_t)c;
            if (t >= range_end(n, ranges, r))
                break;
            if (!atomic_compare_exchange_weak_explicit(word, &c, c + 1, memory_order_acq_rel,
                                                       memory_order_relaxed))
                continue;
            const int was = in_task;
            in_task = 1;
            fn(ctx, base + (long)t, thread);
            in_task = was;
            if (thread)
                atomic_store_explicit(&p->done_ns, now_ns(), memory_order_relaxed);
            if (atomic_fetch_add(&p->done, 1) + 1 == n && thread && atomic_load(&p->caller_asleep))
                futex_wake(&p->done, 1);
        }
    }
}

/* pt_pool_scratch: the area's address per thread, and a key whose
 * destructor frees it when the thread ends */
static _Thread_local void *scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void free_scratch(void *area)
{
    free(area);
    scratch = NULL; /* a later call on this thread (another key's destructor) makes a new one */
}

static void make_scratch_key(void)
{
    scratch_key_ok = pthread_key_create(&scratch_key, free_scratch) == 0;
}

void *pt_pool_scratch(void)
{
    if (!scratch) {
        pthread_once(&scratch_once, make_scratch_key);
        void *s = aligned_alloc(64, PT_POOL_SCRATCH);
        if (!s) {
            fprintf(stderr, "pipetrain: out of memory for a thread's scratch (%lu KiB)\n",
                    PT_POOL_SCRATCH >> 10);
            abort();
        }
        /* without a key (none left), the area lives as long as the process */
        if (scratch_key_ok)
            pthread_setspecific(scratch_key, s);
        scratch = s;
    }
    return scratch;
}

/* pt_pool_area: each thread's areas and their sizes, unmapped by a key's
 * destructor when the thread ends. Mapped apart from the heap: an area
 * that grows is let go of whole, and none sits among the heap's blocks,
 * where one kept from a profile's large products pinned 15-20 MiB of freed
 * heap above it in the resident set of the training that followed. */
typedef struct {
    void *p[PT_AREAS];
    unsigned long bytes[PT_AREAS];
} thread_areas;
static _Thread_local thread_areas areas;
static pthread_key_t areas_key;
static pthread_once_t areas_once = PTHREAD_ONCE_INIT;
static int areas_key_ok;

static void unmap_areas(void *unused)
{
    (void)unused;
    for (int i = 0; i < PT_AREAS; i++) {
        if (areas.p[i])
            munmap(areas.p[i], areas.bytes[i]);
        areas.p[i] = NULL;
        areas.bytes[i] = 0;
    }
}

static void make_areas_key(void) { areas_key_ok = pthread_key_create(&areas_key, unmap_areas) == 0; }

void *pt_pool_area(int which, unsigned long bytes, const char *what)
{
    if (bytes <= areas.bytes[which])
        return areas.p[which];
    pthread_once(&areas_once, make_areas_key);
    if (areas.p[which])
        munmap(areas.p[which], areas.bytes[which]);
    areas.p[which] = NULL;
    areas.bytes[which] = 0;
    bytes = (bytes + 63) / 64 * 64;
    /* page-aligned, so 64-byte aligned */
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "pipetrain: out of memory allocating %lu bytes for %s\n", bytes, what);
        abort();
    }
    areas.p[which] = p;
    areas.bytes[which] = bytes;
    /* the key's value only makes its destructor run (not for a NULL value);
     * without a key (none left) the areas live as long as the process */
    if (areas_key_ok)
        pthread_setspecific(areas_key, &areas);
    return p;
}

unsigned long pt_pool_area_bytes(int which) { return areas.bytes[which]; }

void pt_pool_release_areas(void) { unmap_areas(NULL); }

static void *worker_main(void *arg)
{
    worker *me = arg;
    pt_pool *p = me->pool;
    if (p->init)
        p->init();
    uint32_t seen = 0;
    for (;;) {
        seen = wait_run(p, &me->w, seen);
        if (atomic_load(&p->stop))
            return NULL;
        run_tasks(p, me->index);
    }
}

/* Publishes tasks [base, base + n) and runs them with the workers. */
static void run_part(pt_pool *p, long base, uint32_t n, pt_pool_fn fn, void *ctx)
{
    const uint32_t seq = p->seq;
    /* every range's word odd before any field changes: a claim that
     * succeeds on a word saw the fields of that word's run */
    for (int r = 0; r < p->ranges; r++)
        atomic_store_explicit(&p->claims[r].word, (uint64_t)(seq + 1) << 32, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->ntasks, n, memory_order_relaxed);
    atomic_store_explicit(&p->base, base, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    p->seq = seq + 2;
    for (int r = 0; r < p->ranges; r++)
        atomic_store_explicit(&p->claims[r].word,
                              (uint64_t)(seq + 2) << 32 | (r ? range_end(n, p->ranges, r - 1) : 0),
                              memory_order_release);
    atomic_store_explicit(&p->posted_ns, now_ns(), memory_order_relaxed);
    atomic_store(&p->gen, seq + 2);
    if (atomic_load(&p->sleepers) > 0)
        futex_wake(&p->gen, n - 1 < (uint32_t)INT_MAX ? (int)(n - 1) : INT_MAX);
    run_tasks(p, 0);
    wait_done(p, n);
}

void pt_pool_run(pt_pool *pool, long tasks, pt_pool_fn fn, void *ctx)
{
    if (tasks <= 0)
        return;
    if (!pool || pool->threads < 2 || tasks < 2 || in_task || atomic_exchange(&pool->busy, 1)) {
        /* these tasks are tasks too: a run one of them starts runs inline,
         * in order, as cpu_pool.h says (else a one-task run's task, or one
         * of a caller that found the pool busy, could take the pool) */
        const int was = in_task;
        in_task = 1;
        for (long t = 0; t < tasks; t++)
            fn(ctx, t, 0);
        in_task = was;
        return;
    }
    for (long base = 0; base < tasks; base += MAX_RUN_TASKS) {
        const long n = tasks - base < MAX_RUN_TASKS ? tasks - base : MAX_RUN_TASKS;
        run_part(pool, base, (uint32_t)n, fn, ctx);
    }
    atomic_store(&pool->busy, 0);
}

static void stop_workers(pt_pool *p)
{
    if (!p->started)
        return;
    atomic_store(&p->stop, 1);
    atomic_store(&p->gen, p->seq + 2);
    futex_wake(&p->gen, INT_MAX);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->workers[i].tid, NULL);
    p->started = 0;
}

/* SPIN_CAP_NS, or PIPETRAIN_SPIN_US when it is a decimal number of
 * microseconds from 0 to 1e6 (*from_env then 1; -1 when it is set to
 * something else, which is ignored and said so by pt_pool_describe). */
static uint64_t spin_cap(int *from_env)
{
    const char *s = getenv("PIPETRAIN_SPIN_US");
    *from_env = 0;
    if (s) {
        char *end;
        /* decimal only: not hex, inf, nan, nor a sign */
        const int decimal = ((*s >= '0' && *s <= '9') || *s == '.') &&
                            s[strspn(s, "0123456789.eE+-")] == '\0';
        const double us = decimal ? strtod(s, &end) : -1.0;
        if (decimal && !*end && us >= 0 && us <= 1e6) {
            *from_env = 1;
            return (uint64_t)(us * 1000.0);
        }
        *from_env = -1;
    }
    return SPIN_CAP_NS;
}

int pt_pool_create(pt_pool **out, int threads, void (*init)(void))
{
    *out = NULL;
    pt_pool *p = aligned_alloc(64, (sizeof *p + 63) / 64 * 64);
    if (!p)
        return ENOMEM;
    memset(p, 0, sizeof *p);
    p->threads = threads < 1 ? 1 : threads;
    p->init = init;
    const char *ranges = getenv("PIPETRAIN_POOL_RANGES");
    p->ranges = ranges && !strcmp(ranges, "0") ? 1 : p->threads;
    p->claims = aligned_alloc(64, (size_t)p->ranges * sizeof *p->claims);
    if (!p->claims) {
        free(p);
        return ENOMEM;
    }
    for (int r = 0; r < p->ranges; r++)
        atomic_init(&p->claims[r].word, 0);
    p->cap_ns = spin_cap(&p->cap_from_env);
    atomic_init(&p->caller.spin_ns, p->cap_ns);
    if (p->threads > 1) {
        const size_t bytes = ((size_t)(p->threads - 1) * sizeof *p->workers + 63) / 64 * 64;
        p->workers = aligned_alloc(64, bytes);
        if (!p->workers) {
            free(p->claims);
            free(p);
            return ENOMEM;
        }
        memset(p->workers, 0, bytes);
        /* workers take no signals: they go to the threads the program made */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        /* a fixed stack, whatever `ulimit -s` says: the same room for the
         * tasks' locals on every worker (their large scratch is elsewhere:
         * pt_pool_scratch) */
        pthread_attr_t attr;
        int rc = pthread_attr_init(&attr);
        if (rc == 0) {
            rc = pthread_attr_setstacksize(&attr, WORKER_STACK);
            for (int i = 0; i < p->threads - 1 && rc == 0; i++) {
                worker *w = &p->workers[i];
                w->pool = p;
                w->index = i + 1;
                atomic_init(&w->w.spin_ns, p->cap_ns);
                if ((rc = pthread_create(&w->tid, &attr, worker_main, w)) == 0)
                    p->started++;
            }
            pthread_attr_destroy(&attr);
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc) {
            stop_workers(p);
            free(p->workers);
            free(p->claims);
            free(p);
            return rc;
        }
    }
    *out = p;
    return 0;
}

void pt_pool_destroy(pt_pool *pool)
{
    if (!pool)
        return;
    stop_workers(pool);
    free(pool->workers);
    free(pool->claims);
    free(pool);
}

int pt_pool_stride(const pt_pool *pool)
{
    return pool && pool->ranges == 1 ? pool->threads : 1;
}

int pt_pool_threads(const pt_pool *pool) { return pool ? pool->threads : 1; }

void pt_pool_describe(const pt_pool *pool, char *buf, unsigned long size)
{
    const uint64_t cap = pool ? pool->cap_ns : SPIN_CAP_NS;
    const char *env = pool && pool->cap_from_env > 0 ? " (PIPETRAIN_SPIN_US)" : "";
    const char *ignored = pool && pool->cap_from_env < 0
                              ? "; PIPETRAIN_SPIN_US ignored: not a number of microseconds from 0 to 1e6"
                              : "";
    if (cap == 0)
        snprintf(buf, size, "sleep at once%s", env);
    else
        snprintf(buf, size, "spin up to %g us%s (less after waits that outlast it), then sleep%s",
                 (double)cap / 1000.0, env, ignored);
}

void pt_pool_get_stats(const pt_pool *pool, pt_pool_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!pool)
        return;
    const waiter *ws[2] = {&pool->caller, pool->threads > 1 ? &pool->workers[0].w : NULL};
    for (int i = 0; i < pool->threads; i++) {
        const waiter *w = i == 0 ? &pool->caller : &pool->workers[i - 1].w;
        out->waits += atomic_load_explicit(&w->waits, memory_order_relaxed);
        out->sleeps += atomic_load_explicit(&w->sleeps, memory_order_relaxed);
    }
    out->spin_ns_caller = (long long)atomic_load_explicit(&ws[0]->spin_ns, memory_order_relaxed);
    if (ws[1])
        out->spin_ns_worker = (long long)atomic_load_explicit(&ws[1]->spin_ns, memory_order_relaxed);
}
