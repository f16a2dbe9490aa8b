/*
 * test_pool.c: the CPU backend's thread pool (nn/cpu_pool.h).
 *
 *  - every task of a run runs exactly once, with a thread index below the
 *    pool's thread count, for task counts 0, 1, 2, 3, 5, 7, 64, 1000 and
 *    100003 on pools of 1, 2, 3, 4 and 8 threads (more threads than tasks
 *    included), and a NULL pool;
 *  - claiming is dynamic: a task that will not finish until every other task
 *    of its run has finished does finish, at every thread count above one
 *    (with tasks split up front among the threads it would wait forever for
 *    tasks that sit behind it on its own thread);
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
 *    count (the sanitizer build checks that nothing leaks);
 *  - placement: with a CPU for every thread, each task runs on the CPU its
 *    thread is pinned to (distinct CPUs of the caller's set), the caller
 *    gets its own mask back when the pool is destroyed; nothing is pinned
 *    with PIPETRAIN_PIN=0, with one thread, or when the node-local ranks
 *    (OMPI_COMM_WORLD_LOCAL_*) would need more CPUs than the set has; rank r
 *    takes the CPUs after those of ranks below it.
 */
#define _GNU_SOURCE /* sched_getcpu, CPU_* */
#include "nn/cpu_pool.h"
#include "tests/common/cunit_main.h"

#include <pthread.h>
#include <sched.h>
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
    long tasks;
    _Atomic long finished;
    _Atomic int timed_out;
} wait_job;

/* Task 0 returns only once every other task has finished (or after 20 s). */
static void waiting_task(void *ctx, long t, int thread)
{
    (void)thread;
    wait_job *j = ctx;
    if (t == 0) {
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

static void claiming_is_dynamic(void)
{
    for (int c = 1; c < THREAD_COUNTS; c++) {
        pt_pool *p = make(thread_counts[c]);
        for (int rep = 0; rep < 3; rep++) {
            wait_job j = {4 * thread_counts[c] + 3, 0, 0};
            pt_pool_run(p, j.tasks, waiting_task, &j);
            CU_ASSERT_EQUAL(atomic_load(&j.finished), j.tasks);
            CU_ASSERT_FALSE(atomic_load(&j.timed_out));
        }
        pt_pool_destroy(p);
    }
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

/* ------------------------------------------------------------- placement */

typedef struct {
    _Atomic int cpu_of[8], ran[8];
    _Atomic int wrong;
} where_job;

/* Checks that the thread running it may run on its pinned CPU alone, and on
 * it; takes about 20 us, so that every thread gets tasks. */
static void where_task(void *ctx, long t, int thread)
{
    where_job *j = ctx;
    const int want = atomic_load(&j->cpu_of[thread]);
    cpu_set_t mine;
    if (want >= 0 && (pthread_getaffinity_np(pthread_self(), sizeof mine, &mine) ||
                      CPU_COUNT(&mine) != 1 || !CPU_ISSET(want, &mine) || sched_getcpu() != want))
        atomic_fetch_add(&j->wrong, 1);
    atomic_fetch_add(&j->ran[thread], 1);
    const double t0 = now_s();
    while (now_s() - t0 < 20e-6)
        ;
    (void)t;
}

static int same_mask(const cpu_set_t *a)
{
    cpu_set_t now;
    return sched_getaffinity(0, sizeof now, &now) == 0 && CPU_EQUAL(a, &now);
}

static void placement(void)
{
    cpu_set_t before;
    CU_ASSERT_FATAL(sched_getaffinity(0, sizeof before, &before) == 0);
    const int cpus = CPU_COUNT(&before);
    int first[8], k = 0;
    for (int c = 0; c < CPU_SETSIZE && k < 8; c++)
        if (CPU_ISSET(c, &before))
            first[k++] = c;
    char buf[256];
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    for (int threads = 1; threads <= 3; threads++) {
        pt_pool *p = make(threads);
        pt_pool_describe(p, buf, sizeof buf);
        const int expect = threads > 1 && cpus >= threads;
        printf("(%d threads, %d CPUs: %s) ", threads, cpus, buf);
        CU_ASSERT_EQUAL(pt_pool_cpu(p, 0) >= 0, expect);
        CU_ASSERT_EQUAL(strstr(buf, "; pinned to CPU") != NULL, expect);
        where_job j = {.wrong = 0};
        for (int t = 0; t < 8; t++) {
            atomic_init(&j.cpu_of[t], t < threads ? pt_pool_cpu(p, t) : -1);
            atomic_init(&j.ran[t], 0);
        }
        for (int t = 0; expect && t < threads; t++) {
            CU_ASSERT_EQUAL(pt_pool_cpu(p, t), first[t]); /* rank 0: the set's first CPUs */
            for (int u = 0; u < t; u++)
                CU_ASSERT_NOT_EQUAL(pt_pool_cpu(p, t), pt_pool_cpu(p, u));
        }
        CU_ASSERT_EQUAL(pt_pool_cpu(p, threads), -1);
        for (int rep = 0; rep < 50; rep++)
            pt_pool_run(p, 64, where_task, &j);
        CU_ASSERT_EQUAL(atomic_load(&j.wrong), 0);
        for (int t = 0; expect && t < threads; t++)
            CU_ASSERT(atomic_load(&j.ran[t]) > 0); /* every pinned thread was checked */
        if (expect) {
            cpu_set_t one;
            CU_ASSERT_FATAL(sched_getaffinity(0, sizeof one, &one) == 0);
            CU_ASSERT_EQUAL(CPU_COUNT(&one), 1);
            CU_ASSERT(CPU_ISSET(pt_pool_cpu(p, 0), &one));
        }
        pt_pool_destroy(p);
        CU_ASSERT(same_mask(&before));
    }
    if (cpus < 2) {
        printf("(one CPU: the pinned cases are not reachable here) ");
        return;
    }
    /* switched off */
    setenv("PIPETRAIN_PIN", "0", 1);
    pt_pool *p = make(2);
    pt_pool_describe(p, buf, sizeof buf);
    CU_ASSERT_EQUAL(pt_pool_cpu(p, 0), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "not pinned (PIPETRAIN_PIN=0)"));
    CU_ASSERT(same_mask(&before));
    pt_pool_destroy(p);
    unsetenv("PIPETRAIN_PIN");
    /* ranks on the node: rank 1 of 2 with one thread each takes the second CPU;
     * two threads each need 4 CPUs */
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    p = make(2);
    CU_ASSERT_EQUAL(pt_pool_cpu(p, 0) >= 0, cpus >= 4);
    if (cpus >= 4)
        CU_ASSERT_EQUAL(pt_pool_cpu(p, 0), first[2]);
    pt_pool_destroy(p);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8", 1); /* 16 CPUs needed */
    p = make(2);
    pt_pool_describe(p, buf, sizeof buf);
    CU_ASSERT_EQUAL(pt_pool_cpu(p, 0) >= 0, cpus >= 16);
    if (cpus < 16)
        CU_ASSERT_PTR_NOT_NULL(strstr(buf, "not pinned (fewer CPUs than threads on this node)"));
    pt_pool_destroy(p);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);
    p = make(2);
    CU_ASSERT_EQUAL(pt_pool_cpu(p, 1), first[1]);
    pt_pool_destroy(p);
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    CU_ASSERT(same_mask(&before));
}

static const pt_test tests[] = {
    {"every_task_once_any_threads_and_sizes", every_task_once},
    {"claiming_is_dynamic", claiming_is_dynamic},
    {"reduction_fixed_order_same_bits", reduction_fixed_order},
    {"repeated_use_spinning_and_sleeping", repeated_use},
    {"nested_and_concurrent_runs", nested_and_concurrent_runs},
    {"spin_adapts", spin_adapts},
    {"teardown", teardown},
    {"placement", placement},
    {NULL, NULL}};
static const pt_test_suite suites[] = {{"thread pool", tests}, {NULL, NULL}};
