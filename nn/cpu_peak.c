/*
 * cpu_peak.c: the cores' floating-point peak, measured: independent chains of
 * fused multiply-adds on registers alone, at the widest vectors the build
 * has, on a pool of the backend's own threads (pt_cpu_peak_flops), and one
 * short burst of them for bench/core_canary (pt_cpu_fma_burst). What
 * run.profile_ops compares each op's FLOP/s with.
 */
#include "nn/nn.h"
#include "nn/cpu_pool.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CHAINS independent multiply-add chains: enough to cover the latency of
 * two FMA pipes (4 cycles x 2), so the loop runs at the pipes' throughput. */
enum { CHAINS = 12 };

#if defined(__AVX512F__)
#define PEAK_ISA "avx512 (zmm, 16 floats)"
enum { PEAK_LANES = 16 };
typedef __m512 peak_vec;
#define PEAK_SET1 _mm512_set1_ps
#define PEAK_FMA _mm512_fmadd_ps
#define PEAK_ADD _mm512_add_ps
static float peak_sum(peak_vec v) { return _mm512_reduce_add_ps(v); }
#elif defined(__AVX2__) && defined(__FMA__)
#define PEAK_ISA "avx2-fma (ymm, 8 floats)"
enum { PEAK_LANES = 8 };
typedef __m256 peak_vec;
#define PEAK_SET1 _mm256_set1_ps
#define PEAK_FMA _mm256_fmadd_ps
#define PEAK_ADD _mm256_add_ps
static float peak_sum(peak_vec v)
{
    float t[8];
    _mm256_storeu_ps(t, v);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#else
#define PEAK_ISA "scalar fmaf"
enum { PEAK_LANES = 1 };
typedef float peak_vec;
#define PEAK_SET1(x) (x)
#define PEAK_FMA fmaf
#define PEAK_ADD(a, b) ((a) + (b))
static float peak_sum(peak_vec v) { return v; }
#endif

static volatile float peak_sink;

static __attribute__((noinline)) void fma_chains(long iters)
{
    peak_vec acc[CHAINS];
    const peak_vec mul = PEAK_SET1(0.999999f), inc = PEAK_SET1(1e-7f);
    for (int k = 0; k < CHAINS; k++)
        acc[k] = PEAK_SET1(1.0f + 0.001f * (float)k);
    for (long i = 0; i < iters; i++) {
#pragma GCC unroll 12
        for (int k = 0; k < CHAINS; k++)
            acc[k] = PEAK_FMA(acc[k], mul, inc);
    }
    peak_vec s = acc[0];
    for (int k = 1; k < CHAINS; k++)
        s = PEAK_ADD(s, acc[k]);
    peak_sink = peak_sum(s);
}

/* Each thread's rounds run as SLICES tasks of the pool (the backend's kind of
 * threads), so the time is that of the pool's threads working together. */
enum { SLICES = 8 };

static void chains_task(void *ctx, long t, int thread)
{
    (void)t;
    (void)thread;
    fma_chains(*(const long *)ctx);
}

double pt_cpu_fma_burst(long rounds)
{
    if (rounds < 1)
        rounds = 1;
    fma_chains(rounds);
    return (double)rounds * CHAINS * PEAK_LANES * 2.0;
}

/* FLOP/s of a pool of `threads` threads running the chains for iters rounds
 * per thread. */
static double chains_rate(pt_pool *pool, int threads, long iters)
{
    long per = iters / SLICES > 0 ? iters / SLICES : 1;
    double t0 = now_s();
    pt_pool_run(pool, (long)threads * SLICES, chains_task, &per);
    double t = now_s() - t0;
    return (double)threads * SLICES * (double)per * CHAINS * PEAK_LANES * 2.0 /
           (t > 0 ? t : 1e-9);
}

double pt_cpu_peak_flops(int threads, char *how, size_t how_size)
{
    if (threads < 1)
        threads = 1;
    pt_pool *pool = NULL;
    if (pt_pool_create(&pool, threads, NULL))
        threads = 1; /* cannot start them: what one thread does */
    /* size the rounds to about 50 ms from a short first run, then keep the
     * best of 5: other work on the cores can only make a run slower */
    long iters = 100000;
    double rate = chains_rate(pool, threads, iters);
    iters = (long)(0.05 * rate / ((double)threads * CHAINS * PEAK_LANES * 2.0));
    if (iters < 1000)
        iters = 1000;
    double best = 0.0;
    for (int r = 0; r < 5; r++) {
        double x = chains_rate(pool, threads, iters);
        if (x > best)
            best = x;
    }
    pt_pool_destroy(pool);
    if (how)
        snprintf(how, how_size,
                 "measured: %d independent FMA chains of %s per thread, %d thread%s, best of 5 runs "
                 "of %ld rounds",
                 CHAINS, PEAK_ISA, threads, threads == 1 ? "" : "s", iters / SLICES * SLICES);
    return best;
}
