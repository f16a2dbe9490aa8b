/*
 * cpu_pool.h (internal to nn/): the CPU backend's threads. A pool of
 * `threads` threads is the caller plus threads - 1 workers started once (by
 * the backend when it opens) and joined when it is destroyed; between runs
 * the workers wait, spinning briefly and then asleep (nn/cpu_pool.c says
 * how long they spin and why).
 *
 * pt_pool_run(pool, tasks, fn, ctx) calls fn(ctx, t, thread) once for every
 * task t in [0, tasks), on the caller and the workers, and returns when all
 * have returned. Tasks are claimed one at a time by whichever thread is
 * free: each thread first takes the tasks of its own contiguous range of
 * [0, tasks) (of each part, for a run over 2^30 tasks), in increasing
 * order, then the others' that are left, so a
 * thread that is descheduled or slow holds up only the task it is running. `thread` is the index of the thread
 * running the task (0 = the caller, up to pt_pool_threads - 1), for scratch
 * kept per thread; nothing else may depend on it.
 *
 * Results do not depend on the thread count as long as the caller keeps to
 * two rules: a task's output depends only on its index and the inputs
 * (never on `thread`, on which thread ran the tasks before it, or on how
 * many threads there are), so task boundaries are a function of the
 * problem size alone; and a reduction writes one partial per task, which
 * the caller combines in task order after the run.
 *
 * A NULL pool, a pool of one thread, a run of fewer than two tasks, and a
 * run started from inside a task or while another thread is running the
 * pool all run every task on the calling thread, in order, as thread 0.
 */
#ifndef PT_NN_CPU_POOL_H
#define PT_NN_CPU_POOL_H

typedef struct pt_pool pt_pool;

typedef void (*pt_pool_fn)(void *ctx, long task, int thread);

/* threads >= 1. init, when not NULL, runs first on every worker (not on
 * the caller), e.g. to set thread-local state of a library the tasks call.
 * Returns 0, or an errno value when a thread cannot be started (then
 * nothing is left running). */
int pt_pool_create(pt_pool **out, int threads, void (*init)(void));

/* Stops and joins the workers, frees the pool; NULL is ignored. */
void pt_pool_destroy(pt_pool *pool);

/* The threads of the pool, the caller included; 1 for NULL. */
int pt_pool_threads(const pt_pool *pool);

/* How far apart the tasks one thread claims one after another most often
 * are: 1 (it walks its own range), or the thread count where the threads
 * share one counter (PIPETRAIN_POOL_RANGES=0). For prefetch hints only. */
int pt_pool_stride(const pt_pool *pool);

void pt_pool_run(pt_pool *pool, long tasks, pt_pool_fn fn, void *ctx);

/* The calling thread's scratch: PT_POOL_SCRATCH bytes, 64-byte aligned,
 * one area per thread (the caller's, every worker's, any other thread's),
 * allocated on the thread's first call and freed when the thread ends (the
 * main thread's when the process does). For
 * a task's temporaries too large for a stack, whatever `ulimit -s` says:
 * a task may use it until it returns, and nothing it calls may (tasks do
 * not nest: a run started inside a task runs inline, on the same thread).
 * Aborts, with a message, if the first call cannot allocate it. */
#define PT_POOL_SCRATCH ((unsigned long)256 << 10)
void *pt_pool_scratch(void);

/* The calling thread's area `which` of at least `bytes` bytes, 64-byte
 * aligned: kept between calls and grown as they need (its contents are not
 * kept when it grows), freed when the thread ends. For a GEMM's working
 * memory (the packed weights, a weight gradient's partial sums), which a
 * fresh allocation per call left the allocator to place again on every
 * call. Aborts, with a message naming `what`, if it cannot grow. */
enum { PT_AREA_PACK, PT_AREA_PARTS, PT_AREAS };
void *pt_pool_area(int which, unsigned long bytes, const char *what);
/* The calling thread's area `which` as it stands: its bytes (0: none yet). */
unsigned long pt_pool_area_bytes(int which);
/* Unmaps the calling thread's areas (a later call maps them again). */
void pt_pool_release_areas(void);

/* How the pool's threads wait, in words, into buf: e.g. "spin up to 20 us
 * (less after waits that outlast it), then sleep". */
void pt_pool_describe(const pt_pool *pool, char *buf, unsigned long size);

/* Counters of the waits since the pool was created, for benchmarks and
 * tests: how many waits, how many of them ended asleep, and the current
 * spin limit of the caller and of worker 1 in nanoseconds. */
typedef struct {
    long long waits, sleeps;
    long long spin_ns_caller, spin_ns_worker;
} pt_pool_stats;
void pt_pool_get_stats(const pt_pool *pool, pt_pool_stats *out);

#endif
