/*
 * test_pool.c: the CPU backend's thread pool (nn/cpu_pool.h).
 *
 *  - every task of a run runs exactly once, with a thread index below the
 *    pool's thread count, for task counts 0, 1, 2, 3, 5, 7, 64, 1000 and
 *    100003 on pools of 1, 2, 3, 4 and 8 threads (more threads than tasks
 *    included), and a NULL pool;
 *  - claiming is dynamic: a task that will not finish until every other task
 *    of its run has finished does finish, at every thread count above one,
 *    wherever it lies: first in a range, last in one, last of the run
 *    (tasks are split up front into one range per thread; without the
 *    others taking what is left of a range, it would wait forever for the
 *    tasks that sit behind it in its own);
 *  - the same with PIPETRAIN_POOL_RANGES=0 (one shared counter), and each
 *    task once with it;
 *  - a reduction written as one partial per task, combined in task order
 *    after the run, gives the same bits at every thread count and in every
 *    repetition;
 *  - repeated use: thousands of short runs back to back, each checked, with
 *    the spin as built, with none (every wait asleep on the futex) and with
 *    a long one (every wait spinning);
 *  - a run started inside a task runs serially, and correctly; two threads
 *    running one pool at once both get every task run once;
 *  - the spin adapts: after long gaps between runs a worker's spin limit
 *    falls to zero, after short ones it grows back;
 *  - teardown: pools made and destroyed, used and unused, at every thread
 *    count (the sanitizer build checks that nothing leaks).
 */
#include "nn/cpu_pool.h"
#include "tests/common/cunit_main.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const int thread_counts[] = {1, 2, 3, 4, 8};
enum { THREAD_COUNTS = sizeof thread_counts / sizeof *thread_counts };

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sleep_s(double s)
{
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

static pt_pool *make(int threads)
{
    pt_pool *p = NULL;
    CU_ASSERT_FATAL(pt_pool_create(&p, threads, NULL) == 0);
    CU_ASSERT_EQUAL(pt_pool_threads(p), threads);
    return p;
}

/* ------------------------------------------------------- each task once */

typedef struct {
    _Atomic int *runs;
    _Atomic int bad_thread;
    int threads;
    double busy_s; /* each task's time */
} count_job;

static void count_task(void *ctx, long t, int thread)
{
    count_job *j = ctx;
    atomic_fetch_add(&j->runs[t], 1);
    if (thread < 0 || thread >= j->threads)
        atomic_store(&j->bad_thread, 1);
    if (j->busy_s > 0) {
        const double t0 = now_s();
        while (now_s() - t0 < j->busy_s)
            ;
    }
}

/* Runs `tasks` tasks of busy_s seconds each on pool; 0 when each ran exactly
 * once on a valid thread. */
static long check_once_busy(pt_pool *pool, long tasks, double busy_s)
{
    count_job j = {calloc((size_t)(tasks > 0 ? tasks : 1), sizeof(_Atomic int)), 0,
                   pt_pool_threads(pool), busy_s};
    pt_pool_run(pool, tasks, count_task, &j);
    long bad = atomic_load(&j.bad_thread);
    for (long t = 0; t < tasks; t++)
        bad += atomic_load(&j.runs[t]) != 1;
    free(j.runs);
    return bad;
}

static long check_once(pt_pool *pool, long tasks) { return check_once_busy(pool, tasks, 0); }

static void every_task_once(void)
{
    static const long sizes[] = {0, 1, 2, 3, 5, 7, 64, 1000, 100003};
    long bad = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        bad += check_once(NULL, sizes[s]);
    CU_ASSERT_EQUAL(pt_pool_threads(NULL), 1);
    for (int c = 0; c < THREAD_COUNTS; c++) {
        pt_pool *p = make(thread_counts[c]);
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            const long b = check_once(p, sizes[s]);
            if (b)
                printf("\n  %d threads, %ld tasks: %ld tasks not run exactly once", thread_counts[c],
                       sizes[s], b);
            bad += b;
        }
        pt_pool_destroy(p);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* ------------------------------------------------------ dynamic claiming */

typedef struct {
    long tasks, blocker;
    _Atomic long finished;
    _Atomic int timed_out;
} wait_job;

/* Task j->blocker returns only once every other task has finished (or after 20 s). */
static void waiting_task(void *ctx, long t, int thread)
{
    (void)thread;
    wait_job *j = ctx;
    if (t == j->blocker) {
        const double t0 = now_s();
        while (atomic_load(&j->finished) < j->tasks - 1)
            if (now_s() - t0 > 20) {
                atomic_store(&j->timed_out, 1);
                break;
            }
    } else {
        sleep_s(1e-4);
    }
    atomic_fetch_add(&j->finished, 1);
}

/* The blocker at the first and the last task of every thread's range
 * (thread r of T: [r n / T, (r + 1) n / T)), with n = 4 T + 3. */
static void blocked_anywhere(int threads)
{
    pt_pool *p = make(threads);
    const long n = 4L * threads + 3;
    for (int r = 0; r < threads; r++)
        for (int end = 0; end < 2; end++) {
            wait_job j = {n, end ? (r + 1) * n / threads - 1 : r * n / threads, 0, 0};
            pt_pool_run(p, j.tasks, waiting_task, &j);
            CU_ASSERT_EQUAL(atomic_load(&j.finished), j.tasks);
            CU_ASSERT_FALSE(atomic_load(&j.timed_out));
        }
    pt_pool_destroy(p);
}

static void claiming_is_dynamic(void)
{
    for (int c = 1; c < THREAD_COUNTS; c++)
        blocked_anywhere(thread_counts[c]);
}

static long many_runs(pt_pool *p, int runs);

/* one shared counter (PIPETRAIN_POOL_RANGES=0): each task once, and dynamic */
static void one_shared_counter(void)
{
    setenv("PIPETRAIN_POOL_RANGES", "0", 1);
    long bad = 0;
    for (int c = 0; c < THREAD_COUNTS; c++) {
        pt_pool *p = make(thread_counts[c]);
        CU_ASSERT_EQUAL(pt_pool_stride(p), thread_counts[c]);
        static const long sizes[] = {1, 2, 3, 7, 1000};
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
            bad += check_once(p, sizes[s]);
        bad += many_runs(p, 300);
        pt_pool_destroy(p);
        if (thread_counts[c] > 1)
            blocked_anywhere(thread_counts[c]);
    }
    unsetenv("PIPETRAIN_POOL_RANGES");
    pt_pool *p = make(3);
    CU_ASSERT_EQUAL(pt_pool_stride(p), 1);
    pt_pool_destroy(p);
    CU_ASSERT_EQUAL(bad, 0);
}

/* ------------------------------------------------- reduction in fixed order */

enum { RED_N = 300007, RED_PER = 1000 };

typedef struct {
    const float *x;
    float *part;
} red_job;

static void sum_task(void *ctx, long t, int thread)
{
    (void)thread;
    red_job *j = ctx;
    const long i0 = t * RED_PER, i1 = i0 + RED_PER < RED_N ? i0 + RED_PER : RED_N;
    float s = 0;
    for (long i = i0; i < i1; i++)
        s += j->x[i];
    j->part[t] = s;
}

static float reduce(pt_pool *pool, const float *x)
{
    const long tasks = (RED_N + RED_PER - 1) / RED_PER;
    float part[(RED_N + RED_PER - 1) / RED_PER];
    red_job j = {x, part};
    pt_pool_run(pool, tasks, sum_task, &j);
    float total = 0;
    for (long t = 0; t < tasks; t++)
        total += part[t];
    return total;
}

static void reduction_fixed_order(void)
{
    float *x = malloc(RED_N * sizeof *x);
    uint64_t s = 12345;
    for (long i = 0; i < RED_N; i++) { /* magnitudes from 1e-4 to 1e4: order matters */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) - 0.5) *
               (i % 7 == 0 ? 1e4f : i % 3 == 0 ? 1e-4f : 1.0f);
    }
    const float want = reduce(NULL, x);
    long bad = 0;
    for (int c = 0; c < THREAD_COUNTS; c++) {
        pt_pool *p = make(thread_counts[c]);
        for (int rep = 0; rep < 20; rep++) {
            const float got = reduce(p, x);
            bad += memcmp(&got, &want, sizeof got) != 0;
        }
        pt_pool_destroy(p);
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(x);
}

/* --------------------------------------------------------- repeated use */

/* Runs of 1 to 9 tasks, every other one of tasks of 2 us, so that workers
 * join runs at every stage: asleep, waking late, spinning. */
static long many_runs(pt_pool *p, int runs)
{
    long bad = 0;
    for (int r = 0; r < runs; r++)
        bad += check_once_busy(p, 1 + r % 9, r % 2 ? 2e-6 : 0);
    return bad;
}

static void repeated_use(void)
{
    /* as built, never spinning (the futex path every time), always spinning */
    static const char *spins[] = {NULL, "0", "1000000"};
    long bad = 0;
    for (size_t s = 0; s < sizeof spins / sizeof *spins; s++) {
        if (spins[s])
            setenv("PIPETRAIN_SPIN_US", spins[s], 1);
        else
            unsetenv("PIPETRAIN_SPIN_US");
        for (int c = 0; c < THREAD_COUNTS; c++) {
            pt_pool *p = make(thread_counts[c]);
            bad += many_runs(p, thread_counts[c] > 2 && spins[s] && spins[s][0] != '0' ? 300 : 3000);
            pt_pool_stats st;
            pt_pool_get_stats(p, &st);
            /* no spin: every wait sleeps (a worker may be asleep right now,
             * its wait not yet counted) */
            if (spins[s] && spins[s][0] == '0' && thread_counts[c] > 1)
                CU_ASSERT(st.sleeps >= st.waits && st.sleeps <= st.waits + thread_counts[c] - 1);
            pt_pool_destroy(p);
        }
    }
    unsetenv("PIPETRAIN_SPIN_US");
    CU_ASSERT_EQUAL(bad, 0);
}

/* -------------------------------------------------- nesting, two callers */

typedef struct {
    pt_pool *pool;
    _Atomic long bad;
} nest_job;

static void nesting_task(void *ctx, long t, int thread)
{
    (void)t;
    (void)thread;
    nest_job *j = ctx;
    atomic_fetch_add(&j->bad, check_once(j->pool, 13));
}

typedef struct {
    pt_pool *pool;
    long bad;
} caller_arg;

/* A run started inside a task of a run that itself ran inline (one task):
 * on the calling thread, in order, as thread 0 (it took the pool) */
typedef struct {
    pt_pool *pool;
    long next, off;
} inline_job;

static void inner_task(void *ctx, long t, int thread)
{
    inline_job *j = ctx;
    j->off += thread != 0 || t != j->next; /* run on this thread alone: no race */
    j->next = t + 1;
}

static void outer_task(void *ctx, long t, int thread)
{
    (void)t;
    (void)thread;
    inline_job *j = ctx;
    pt_pool_run(j->pool, 10000, inner_task, j);
}

static void *second_caller(void *arg)
{
    caller_arg *a = arg;
    a->bad = many_runs(a->pool, 2000);
    return NULL;
}

static void nested_and_concurrent_runs(void)
{
    for (int c = 0; c < THREAD_COUNTS; c++) {
        pt_pool *p = make(thread_counts[c]);
        nest_job j = {p, 0};
        pt_pool_run(p, 50, nesting_task, &j);
        CU_ASSERT_EQUAL(atomic_load(&j.bad), 0);
        inline_job one = {p, 0, 0};
        pt_pool_run(p, 1, outer_task, &one);
        CU_ASSERT(one.next == 10000 && one.off == 0);
        if (one.off)
            printf("\n  %d threads: %ld of 10000 nested tasks off the caller or out of order",
                   thread_counts[c], one.off);
        caller_arg a = {p, 0};
        pthread_t tid;
        CU_ASSERT_FATAL(pthread_create(&tid, NULL, second_caller, &a) == 0);
        const long mine = many_runs(p, 2000);
        pthread_join(tid, NULL);
        CU_ASSERT_EQUAL(mine, 0);
        CU_ASSERT_EQUAL(a.bad, 0);
        pt_pool_destroy(p);
    }
}

/* ------------------------------------------------------------ adaptation */

static void nothing(void *ctx, long t, int thread)
{
    (void)ctx;
    (void)t;
    (void)thread;
}

/* about 20 us of work */
static void busy_task(void *ctx, long t, int thread)
{
    (void)ctx;
    (void)t;
    (void)thread;
    const double t0 = now_s();
    while (now_s() - t0 < 2e-5)
        ;
}

static void spin_adapts(void)
{
    setenv("PIPETRAIN_SPIN_US", "1000", 1); /* a 1 ms cap */
    pt_pool *p = make(2);
    unsetenv("PIPETRAIN_SPIN_US");
    pt_pool_stats st;
    pt_pool_get_stats(p, &st);
    CU_ASSERT_EQUAL(st.spin_ns_worker, 1000000);
    /* 30 gaps of 10 ms: each outlasts the cap, so the worker's limit halves each time */
    for (int r = 0; r < 30; r++) {
        pt_pool_run(p, 2, nothing, NULL);
        sleep_s(0.01);
    }
    pt_pool_get_stats(p, &st);
    printf("(after long gaps: worker spins %lld ns, ", st.spin_ns_worker);
    CU_ASSERT(st.spin_ns_worker < 1000);
    /* back-to-back runs of a few tasks of 20 us: the worker's gaps between
     * them are microseconds and its limit grows back (the highest it
     * reaches is what counts: on a loaded machine a gap can still be long) */
    long long most = 0;
    for (int r = 0; r < 2000 && most < 1000000; r++) {
        pt_pool_run(p, 8, busy_task, NULL);
        pt_pool_get_stats(p, &st);
        most = st.spin_ns_worker > most ? st.spin_ns_worker : most;
    }
    printf("after short ones up to %lld ns) ", most);
    CU_ASSERT(most >= 500000);
    pt_pool_destroy(p);
}

/* ------------------------------------------------------ per-thread scratch */

/* Each task notes its thread's scratch area, writes a pattern of its own
 * into all of it, sleeps a little (so the other threads run meanwhile) and
 * reads the pattern back: an area shared with another thread fails. */
typedef struct {
    void *area[8];
    _Atomic int bad;
} scratch_job;

static void scratch_task(void *ctx, long t, int thread)
{
    scratch_job *j = ctx;
    unsigned char *a = pt_pool_scratch();
    if (!a || ((uintptr_t)a & 63) || (j->area[thread] && j->area[thread] != a))
        atomic_store(&j->bad, 1);
    j->area[thread] = a;
    memset(a, (int)(t & 0xff), PT_POOL_SCRATCH);
    sleep_s(0.0002);
    for (unsigned long i = 0; i < PT_POOL_SCRATCH; i += 4093)
        if (a[i] != (unsigned char)(t & 0xff))
            atomic_store(&j->bad, 1);
}

static void scratch_per_thread(void)
{
    for (int c = 0; c < THREAD_COUNTS; c++) {
        pt_pool *p = make(thread_counts[c]);
        scratch_job j = {{NULL}, 0};
        pt_pool_run(p, 64, scratch_task, &j);
        CU_ASSERT_EQUAL(atomic_load(&j.bad), 0);
        for (int a = 0; a < thread_counts[c]; a++)
            for (int b = a + 1; b < thread_counts[c]; b++)
                CU_ASSERT(!j.area[a] || j.area[a] != j.area[b]);
        pt_pool_destroy(p);
    }
}

/* -------------------------------------------------------------- teardown */

static void teardown(void)
{
    for (int rep = 0; rep < 20; rep++)
        for (int c = 0; c < THREAD_COUNTS; c++) {
            pt_pool *p = make(thread_counts[c]);
            if (rep % 2)
                CU_ASSERT_EQUAL(check_once(p, 17), 0);
            pt_pool_destroy(p);
        }
    pt_pool_destroy(NULL);
}

/* A thread's GEMM areas (pt_pool_area): 64-byte aligned, kept while big
 * enough, grown when not (to a multiple of 64), one of each kind apart,
 * none shared with another thread, let go of by pt_pool_release_areas; a
 * thread's are unmapped when it ends. */
typedef struct {
    void *pack, *parts;
    int bad;
    pthread_barrier_t *both;
} area_seen;

static void *areas_thread(void *arg)
{
    area_seen *seen = arg;
    int bad = pt_pool_area_bytes(PT_AREA_PACK) != 0 || pt_pool_area_bytes(PT_AREA_PARTS) != 0;
    unsigned char *a = pt_pool_area(PT_AREA_PACK, 100, "a test");
    bad |= !a || ((uintptr_t)a & 63) || pt_pool_area_bytes(PT_AREA_PACK) != 128;
    memset(a, 7, 100);
    bad |= pt_pool_area(PT_AREA_PACK, 60, "a test") != a || a[99] != 7; /* kept */
    unsigned char *b = pt_pool_area(PT_AREA_PARTS, 4000, "a test");
    bad |= !b || b == a || ((uintptr_t)b & 63) || pt_pool_area_bytes(PT_AREA_PARTS) != 4032;
    a = pt_pool_area(PT_AREA_PACK, 1 << 20, "a test"); /* grown */
    bad |= !a || ((uintptr_t)a & 63) || pt_pool_area_bytes(PT_AREA_PACK) != (1u << 20);
    memset(a, 1, 1 << 20);
    bad |= pt_pool_area(PT_AREA_PARTS, 10, "a test") != b;
    seen->pack = a;
    seen->parts = b;
    seen->bad = bad;
    pthread_barrier_wait(seen->both); /* both threads hold theirs at once */
    /* let go of (after a profile), then mapped again at the size asked */
    pt_pool_release_areas();
    bad = pt_pool_area_bytes(PT_AREA_PACK) != 0 || pt_pool_area_bytes(PT_AREA_PARTS) != 0;
    a = pt_pool_area(PT_AREA_PACK, 200, "a test");
    bad |= !a || pt_pool_area_bytes(PT_AREA_PACK) != 256 || pt_pool_area_bytes(PT_AREA_PARTS) != 0;
    seen->bad |= bad;
    return NULL;
}

static void areas_per_thread(void)
{
    pthread_barrier_t both;
    CU_ASSERT_FATAL(pthread_barrier_init(&both, NULL, 2) == 0);
    area_seen seen[2] = {{NULL, NULL, 1, &both}, {NULL, NULL, 1, &both}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CU_ASSERT_FATAL(pthread_create(&t[i], NULL, areas_thread, &seen[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    CU_ASSERT(seen[0].bad == 0 && seen[1].bad == 0);
    CU_ASSERT(seen[0].pack != seen[1].pack && seen[0].parts != seen[1].parts);
    pthread_barrier_destroy(&both);
}

static const pt_test tests[] = {
    {"every_task_once_any_threads_and_sizes", every_task_once},
    {"claiming_is_dynamic", claiming_is_dynamic},
    {"one_shared_counter", one_shared_counter},
    {"reduction_fixed_order_same_bits", reduction_fixed_order},
    {"repeated_use_spinning_and_sleeping", repeated_use},
    {"nested_and_concurrent_runs", nested_and_concurrent_runs},
    {"spin_adapts", spin_adapts},
    {"scratch_per_thread", scratch_per_thread},
    {"areas_per_thread", areas_per_thread},
    {"teardown", teardown},
    {NULL, NULL}};
static const pt_test_suite suites[] = {{"thread pool", tests}, {NULL, NULL}};
