/*
 * test_gemm.c: the float32 CPU backend's matrix product kernels
 * (nn/cpu_gemm.h) compute exactly the arithmetic their header promises,
 * whatever the shape, the rows that share a call, the thread count or the
 * instruction set.
 *
 * Forward, y = init + x w^T:
 *  - exact: every element equals, bit for bit, an emulation written here
 *    from the contract alone (acc = 0; acc = fmaf(x, w, acc) for k
 *    ascending; y = init + acc, init = (add + b), add, b or nothing), for
 *    M, N, K on and around every tile and vector width (MR = 6 rows, panels
 *    of 16 and 32 columns, the 16 x 16 packing blocks), K = 1 and N = 1,
 *    every init mode, add aliased with y, and the parallel paths (one row
 *    chunk, several chunks, w packed in several groups) on thread pools
 *    (nn/cpu_pool.h) of 1, 2 and 3 threads;
 *  - the same for the kernel compiled for AVX2 + FMA (and packing w 16 KiB
 *    at a time) and for no vector extensions (fmaf loops), built from the
 *    same source under other names (tests/nn/CMakeLists.txt), so the three
 *    builds agree bit for bit;
 *  - rows: a row's output computed alone, in any slice of a batch, at any
 *    offset, with 1, 2 or 3 threads, is the same bits as in one call over
 *    all rows (this is what the activation cache needs, checked directly);
 *  - math: within a proven bound of a float64 reference. K fused
 *    multiply-adds round K times, each by at most u = 2^-24 relative, and
 *    forming init and adding it round twice more, so (Higham, recursive
 *    summation) |y - exact| <= gamma(K + 2) * (|add| + |b| + sum |x w|),
 *    gamma(n) = n u / (1 - n u). The float64 reference is exact to about
 *    K 2^-53 relative, far inside that. A wrong index or a dropped term
 *    changes y by about one |x w| term, which for these sizes is larger
 *    than the bound (the emulation check above catches anything smaller).
 *
 * Backward, dx = dy w and dw += dy^T x:
 *  - exact: both against emulations of their contracts (dx: acc = 0,
 *    acc = fmaf(dy[r,o], w[o,i], acc) for o ascending, dx = acc; dw: per
 *    chunk of rows (the chunks computed again here from the contract's
 *    formula) acc = 0, acc = fmaf(dy[r,o], x[r,i], acc) for its rows r
 *    ascending, the chunks' accs added in order, dw = dw + that sum), bit
 *    for bit, for every (rows, out, in) from
 *    {1, 7, 17, 33, 64, 65, 100, 384, 1536} of at most 2^21 multiply-adds
 *    (583 shapes, which cross the vector width, the tiles, dw's task blocks
 *    and its steps along the rows) and the demo ViT's layers, at 1, 2 and 3
 *    threads, for all three builds;
 *  - math: within the float64 bounds of the same argument, gamma(out)
 *    sum |dy w| for dx and gamma(rows + 1) (|dw| + sum |dy x|) for dw;
 *  - dx times a given mul in the same pass (pt_gemm_nn_f32_with, the
 *    backward after GELU): the emulation's dx times mul, one rounded
 *    product per element, bit for bit, for every shape above and build,
 *    with 1 to 24 of the caller's tasks in 1 to 8 groups among dx's, each
 *    run once;
 *  - the backend: the float32 backend's linear_bwd, which runs dx's tasks,
 *    dw's partial sums (or db's column sums) and their sums in pool runs, gives the emulations'
 *    bits for dx and dw (and the column sums' for db) for every subset of
 *    the three asked for, at 1, 2 and 3 threads; linear_bwd_mul the same,
 *    with dx times mul.
 *
 * The emulations and the float64 references share no code with the kernels.
 */
#include "nn/backend.h"
#include "nn/cpu_gemm.h"
#include "nn/nn.h"
#include "tests/common/cunit_main.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the kernels compiled for other instruction sets (tests/nn/CMakeLists.txt) */
#define OTHER_BUILD(sfx)                                                                           \
    void pt_gemm_nt_f32##sfx(pt_pool *pool, float *y, const float *x, const float *w,            \
                             const float *b, const float *add, int rows, int out, int in);         \
    void pt_gemm_nn_f32##sfx(pt_pool *pool, float *y, const float *x, const float *w, int rows,  \
                             int n, int k);                                                        \
    void pt_gemm_nn_f32_with##sfx(pt_pool *pool, float *y, const float *x, const float *w,       \
                                  const float *mul, int rows, int n, int k, long extra,            \
                                  int extra_groups, pt_pool_fn fn, void *ctx);                     \
    void pt_gemm_tn_f32##sfx(pt_pool *pool, float *c, float *colsum, const float *a,             \
                             const float *b, int k, int m, int n);                                 \
    const char *pt_gemm_f32_isa##sfx(void);
OTHER_BUILD(_avx2)
OTHER_BUILD(_portable)

typedef void (*gemm_fn)(pt_pool *, float *, const float *, const float *, const float *,
                        const float *, int, int, int);
typedef void (*gemm_nn_fn)(pt_pool *, float *, const float *, const float *, int, int, int);
typedef void (*gemm_nn_with_fn)(pt_pool *, float *, const float *, const float *, const float *,
                                int, int, int, long, int, pt_pool_fn, void *);
typedef void (*gemm_tn_fn)(pt_pool *, float *, float *, const float *, const float *, int, int,
                           int);
static const struct {
    gemm_fn fn;
    gemm_nn_fn nn;
    gemm_nn_with_fn nn_with;
    gemm_tn_fn tn;
    const char *(*isa)(void);
} builds[] = {{pt_gemm_nt_f32, pt_gemm_nn_f32, pt_gemm_nn_f32_with, pt_gemm_tn_f32,
               pt_gemm_f32_isa},
              {pt_gemm_nt_f32_avx2, pt_gemm_nn_f32_avx2, pt_gemm_nn_f32_with_avx2,
               pt_gemm_tn_f32_avx2, pt_gemm_f32_isa_avx2},
              {pt_gemm_nt_f32_portable, pt_gemm_nn_f32_portable, pt_gemm_nn_f32_with_portable,
               pt_gemm_tn_f32_portable, pt_gemm_f32_isa_portable}};
enum { BUILDS = sizeof builds / sizeof *builds };

static pt_rng rng;

/* A pool of each thread count, made once and kept (the process ends with the test). */
static pt_pool *pool_of(int threads)
{
    static pt_pool *pools[4];
    if (!pools[threads])
        CU_ASSERT_FATAL(pt_pool_create(&pools[threads], threads, NULL) == 0);
    return pools[threads];
}

static float *rand_floats(size_t n, float lo, float hi)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * (float)pt_rng_uniform(&rng);
    return p;
}

/* The test's own reference loops (the contract, bounds, sums) are not
 * instrumented in the sanitizer build: they are most of this test's time
 * there, and the kernels they check still are. */
#if defined(__SANITIZE_ADDRESS__) || defined(__clang__)
#define REFERENCE __attribute__((no_sanitize("address", "undefined")))
#else
#define REFERENCE
#endif

/* The contract, written out the slow and obvious way. */
REFERENCE static void emulate(float *y, const float *x, const float *w, const float *b, const float *add,
                    int M, int N, int K)
{
    for (int r = 0; r < M; r++)
        for (int o = 0; o < N; o++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc = fmaf(x[(size_t)r * K + k], w[(size_t)o * K + k], acc);
            const float a = add ? add[(size_t)r * N + o] : 0.0f;
            if (add && b) {
                const float init = a + b[o];
                y[(size_t)r * N + o] = init + acc;
            } else if (add) {
                y[(size_t)r * N + o] = a + acc;
            } else if (b) {
                y[(size_t)r * N + o] = b[o] + acc;
            } else {
                y[(size_t)r * N + o] = acc;
            }
        }
}

/* Number of elements outside the proven bound of the float64 result. */
REFERENCE static long outside_bound(const float *y, const float *x, const float *w, const float *b,
                          const float *add, int M, int N, int K)
{
    const double u = ldexp(1.0, -24), n = K + 2, gamma = n * u / (1 - n * u);
    long bad = 0;
    for (int r = 0; r < M; r++)
        for (int o = 0; o < N; o++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double p = (double)x[(size_t)r * K + k] * (double)w[(size_t)o * K + k];
                s += p;
                mag += fabs(p);
            }
            if (add) {
                s += add[(size_t)r * N + o];
                mag += fabs((double)add[(size_t)r * N + o]);
            }
            if (b) {
                s += b[o];
                mag += fabs((double)b[o]);
            }
            bad += !(fabs((double)y[(size_t)r * N + o] - s) <= gamma * mag);
        }
    return bad;
}

/* init modes: 0 none, 1 bias, 2 add, 3 add + bias, 4 add aliased with y, 5 that + bias */
static long one_case(int M, int N, int K, int mode, int threads, int check_bound)
{
    float *x = rand_floats((size_t)M * K, -1, 1), *w = rand_floats((size_t)N * K, -1, 1);
    float *b = rand_floats((size_t)N, -1, 1), *add = rand_floats((size_t)M * N, -2, 2);
    float *want = malloc((size_t)M * N * sizeof *want), *y = malloc((size_t)M * N * sizeof *y);
    const int use_b = mode & 1, use_add = mode >= 2, aliased = mode >= 4;
    emulate(want, x, w, use_b ? b : NULL, use_add ? add : NULL, M, N, K);
    long bad = 0;
    pt_pool *pool = pool_of(threads);
    for (int v = 0; v < BUILDS; v++) {
        if (aliased)
            memcpy(y, add, (size_t)M * N * sizeof *y);
        else
            for (size_t i = 0; i < (size_t)M * N; i++)
                y[i] = NAN; /* an element left unwritten fails */
        builds[v].fn(pool, y, x, w, use_b ? b : NULL, aliased ? y : use_add ? add : NULL, M, N,
                     K);
        if (memcmp(y, want, (size_t)M * N * sizeof *y)) {
            bad++;
            printf("\n  %s: M=%d N=%d K=%d init mode %d, %d threads: not the contract's bits",
                   builds[v].isa(), M, N, K, mode, threads);
        }
    }
    if (check_bound) {
        long out = outside_bound(want, x, w, use_b ? b : NULL, use_add ? add : NULL, M, N, K);
        if (out) {
            bad++;
            printf("\n  M=%d N=%d K=%d: %ld elements outside the float64 bound", M, N, K, out);
        }
    }
    free(x);
    free(w);
    free(b);
    free(add);
    free(want);
    free(y);
    return bad;
}

/* On x86 the other builds really are other code: the flags that take
 * AVX-512 and then AVX2 + FMA away reached them (else the comparisons of
 * the three below would compare one build with itself). */
static void builds_differ(void)
{
    for (int v = 0; v < BUILDS; v++)
        printf("%s%s", v ? ", " : " (", builds[v].isa());
    printf(") ");
#if defined(__x86_64__)
    CU_ASSERT_STRING_NOT_EQUAL(builds[1].isa(), "avx512");
    CU_ASSERT_STRING_EQUAL(builds[2].isa(), "portable");
#endif
}

/* Shapes on and around every block width, every init mode, one thread. */
static void small_shapes_exact(void)
{
    pt_rng_seed(&rng, 11, 0);
    static const int Ms[] = {1, 2, 5, 6, 7, 12, 13, 17};
    static const int Ns[] = {1, 2, 7, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 97, 113, 128};
    static const int Ks[] = {1, 2, 3, 15, 16, 17, 31, 33, 64, 100};
    long bad = 0;
    int n = 0;
    for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++)
        for (size_t j = 0; j < sizeof Ns / sizeof *Ns; j++)
            for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++, n++)
                bad += one_case(Ms[i], Ns[j], Ks[k], n % 6, 1, 1);
    CU_ASSERT_EQUAL(bad, 0);
}

/* The parallel paths: one row chunk (task = panel) and several chunks
 * (packing, barrier, tasks), at 1, 2 and 3 threads, every init mode. */
/* The thread counts the shape sweeps run at: 1, 2 and 3, or under the
 * sanitizers (PT_TEST_SANITIZED, set by CMake for that build, where the
 * emulations run several times slower) 1 and 3: one thread and several,
 * the cases a memory error would differ between. The normal build checks
 * the bits at all three. */
static int thread_step(void)
{
    const char *s = getenv("PT_TEST_SANITIZED");
    return s && *s && strcmp(s, "0") != 0 ? 2 : 1;
}

static void parallel_shapes_exact(void)
{
    pt_rng_seed(&rng, 12, 0);
    /* the last: a panel of 32 x 70000 floats is more than the 8 MiB the
     * kernel packs at a time, so each panel is a group of its own */
    static const int shapes[][3] = {{17, 256, 64}, {34, 100, 129}, {601, 47, 300},
                                    {250, 33, 257}, {7, 40, 70000}};
    long bad = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int threads = 1; threads <= 3; threads += thread_step())
            bad += one_case(shapes[s][0], shapes[s][1], shapes[s][2], (int)(s + threads) % 6,
                            threads, threads == 1);
    CU_ASSERT_EQUAL(bad, 0);
}

/* A row's bits alone, in slices at every offset, at 1, 2 and 3 threads,
 * against one call over all rows: directly the property the cache needs. */
static void rows_independent_of_batch(void)
{
    pt_rng_seed(&rng, 13, 0);
    static const int NKs[][2] = {{1, 1}, {33, 17}, {96, 32}, {192, 64}, {65, 129}, {256, 64}};
    enum { ROWS = 61 };
    long bad = 0;
    for (size_t s = 0; s < sizeof NKs / sizeof *NKs; s++) {
        const int N = NKs[s][0], K = NKs[s][1];
        float *x = rand_floats((size_t)ROWS * K, -1, 1), *w = rand_floats((size_t)N * K, -1, 1);
        float *b = rand_floats((size_t)N, -1, 1), *add = rand_floats((size_t)ROWS * N, -2, 2);
        float *all = malloc((size_t)ROWS * N * sizeof *all);
        float *y = malloc((size_t)ROWS * N * sizeof *y);
        pt_gemm_nt_f32(pool_of(1), all, x, w, b, add, ROWS, N, K);
        for (int threads = 1; threads <= 3; threads++) {
            static const int lens[] = {1, 2, 5, 6, 7, 13, 17, 34, ROWS};
            for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
                for (int r0 = 0; r0 + lens[l] <= ROWS; r0 += lens[l] > 6 ? 3 : 1) {
                    const size_t at = (size_t)r0 * N;
                    pt_gemm_nt_f32(pool_of(threads), y, x + (size_t)r0 * K, w, b, add + at,
                                   lens[l], N, K);
                    if (memcmp(y, all + at, (size_t)lens[l] * N * sizeof *y)) {
                        bad++;
                        printf("\n  N=%d K=%d: rows %d..%d at %d threads differ from one call", N,
                               K, r0, r0 + lens[l] - 1, threads);
                    }
                }
        }
        free(x);
        free(w);
        free(b);
        free(add);
        free(all);
        free(y);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* ---------------------------------------------------------------- backward */

/* dx = dy w by the contract: acc = 0; acc = fmaf(dy[r,k], w[k,i], acc) for
 * k (= o) ascending; dx = acc. Here x stands for dy, N = in, K = out. */
REFERENCE static void emulate_nn(float *y, const float *x, const float *w, int M, int N, int K)
{
    for (int r = 0; r < M; r++)
        for (int n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc = fmaf(x[(size_t)r * K + k], w[(size_t)k * N + n], acc);
            y[(size_t)r * N + n] = acc;
        }
}

/* dw's chunks of rows, written again from the contract: C = min(8, K / 256,
 * 2^20 / (M N)), at least 1 (M N counted as 1 when 0); chunk c is the rows
 * [K c / C, K (c + 1) / C). */
static int contract_chunks(int K, int M, int N)
{
    long long size = (long long)M * N;
    long long c = 8;
    if (size < 1)
        size = 1;
    if (K / 256 < c)
        c = K / 256;
    if ((1LL << 20) / size < c)
        c = (1LL << 20) / size;
    return c < 1 ? 1 : (int)c;
}

static int chunk_start(int K, int C, int c) { return (int)((long long)K * c / C); }

/* dw += dy^T x by the contract: per chunk of rows acc = 0; acc =
 * fmaf(dy[r,o], x[r,i], acc) for its rows r ascending; the chunks' accs
 * added in order; dw = dw + that sum. a = dy [K, M], b = x [K, N], c = dw
 * [M, N]. */
REFERENCE static void emulate_tn(float *c, const float *a, const float *b, int K, int M, int N)
{
    const int C = contract_chunks(K, M, N);
    for (int o = 0; o < M; o++)
        for (int i = 0; i < N; i++) {
            float sum = 0.0f;
            for (int ch = 0; ch < C; ch++) {
                float acc = 0.0f;
                for (int r = chunk_start(K, C, ch); r < chunk_start(K, C, ch + 1); r++)
                    acc = fmaf(a[(size_t)r * M + o], b[(size_t)r * N + i], acc);
                sum = ch ? sum + acc : acc;
            }
            c[(size_t)o * N + i] = c[(size_t)o * N + i] + sum;
        }
}

/* Elements of dx outside the proven bound of the float64 product: K
 * roundings, |dx - exact| <= gamma(K) sum |dy w| (as outside_bound). */
REFERENCE static long nn_outside_bound(const float *y, const float *x, const float *w, int M, int N, int K)
{
    const double u = ldexp(1.0, -24), gamma = K * u / (1 - K * u);
    long bad = 0;
    for (int r = 0; r < M; r++)
        for (int n = 0; n < N; n++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double p = (double)x[(size_t)r * K + k] * (double)w[(size_t)k * N + n];
                s += p;
                mag += fabs(p);
            }
            bad += !(fabs((double)y[(size_t)r * N + n] - s) <= gamma * mag);
        }
    return bad;
}

/* The same for dw: K fused multiply-adds and the addition to dw0, K + 1
 * roundings, |dw - exact| <= gamma(K + 1) (|dw0| + sum |dy x|). */
REFERENCE static long tn_outside_bound(const float *c, const float *c0, const float *a, const float *b,
                             int K, int M, int N)
{
    const double u = ldexp(1.0, -24), n = K + 1, gamma = n * u / (1 - n * u);
    long bad = 0;
    for (int o = 0; o < M; o++)
        for (int i = 0; i < N; i++) {
            double s = c0[(size_t)o * N + i], mag = fabs(s);
            for (int r = 0; r < K; r++) {
                const double p = (double)a[(size_t)r * M + o] * (double)b[(size_t)r * N + i];
                s += p;
                mag += fabs(p);
            }
            bad += !(fabs((double)c[(size_t)o * N + i] - s) <= gamma * mag);
        }
    return bad;
}

/* db += dy's column sums by the contract, over dw's chunks of rows for a
 * product of N columns: per chunk acc = 0; acc = acc + dy[r,o] for its
 * rows r ascending; the chunks' accs added in order; db = db + that sum. */
REFERENCE static void emulate_colsum(float *db, const float *dy, int K, int M, int N)
{
    const int C = contract_chunks(K, M, N);
    for (int o = 0; o < M; o++) {
        float sum = 0.0f;
        for (int ch = 0; ch < C; ch++) {
            float acc = 0.0f;
            for (int r = chunk_start(K, C, ch); r < chunk_start(K, C, ch + 1); r++)
                acc = acc + dy[(size_t)r * M + o];
            sum = ch ? sum + acc : acc;
        }
        db[o] = db[o] + sum;
    }
}

/* The caller's tasks run among dx's (pt_gemm_nn_f32_with): how often each
 * ran. */
enum { EXTRA_PER_GROUP = 3 };
typedef struct {
    atomic_int runs[8 * EXTRA_PER_GROUP];
    long n;
} extra_count;

static void count_extra(void *ctx, long t, int thread)
{
    (void)thread;
    extra_count *ec = ctx;
    if (t >= 0 && t < ec->n)
        atomic_fetch_add(&ec->runs[t], 1);
}

/* One backward shape: dx = dy w, and dw += dy^T x with and without db +=
 * dy's column sums, by every build on a pool of `threads`, against the
 * emulations bit for bit; with check_bound, the native build's results
 * against the float64 bounds too. */
static long bwd_case(int rows, int out, int in, int threads, int check_bound)
{
    float *dy = rand_floats((size_t)rows * out, -1, 1), *w = rand_floats((size_t)out * in, -1, 1);
    float *x = rand_floats((size_t)rows * in, -1, 1), *dw0 = rand_floats((size_t)out * in, -2, 2);
    float *want_dx = malloc((size_t)rows * in * sizeof *want_dx);
    float *want_dw = malloc((size_t)out * in * sizeof *want_dw);
    float *dx = malloc((size_t)rows * in * sizeof *dx), *dw = malloc((size_t)out * in * sizeof *dw);
    float *db0 = rand_floats((size_t)out, -2, 2), *want_db = malloc((size_t)out * sizeof *want_db);
    float *db = malloc((size_t)out * sizeof *db);
    float *mul = rand_floats((size_t)rows * in, -1.5f, 1.5f);
    float *want_mul = malloc((size_t)rows * in * sizeof *want_mul);
    emulate_nn(want_dx, dy, w, rows, in, out);
    for (size_t i = 0; i < (size_t)rows * in; i++)
        want_mul[i] = want_dx[i] * mul[i]; /* dx, then one rounded product */
    memcpy(want_dw, dw0, (size_t)out * in * sizeof *dw);
    emulate_tn(want_dw, dy, x, rows, out, in);
    memcpy(want_db, db0, (size_t)out * sizeof *db);
    emulate_colsum(want_db, dy, rows, out, in);
    long bad = 0;
    pt_pool *pool = pool_of(threads);
    for (int v = 0; v < BUILDS; v++) {
        for (size_t i = 0; i < (size_t)rows * in; i++)
            dx[i] = NAN; /* an element left unwritten fails */
        builds[v].nn(pool, dx, dy, w, rows, in, out);
        if (memcmp(dx, want_dx, (size_t)rows * in * sizeof *dx)) {
            bad++;
            printf("\n  %s: dx = dy w, rows=%d out=%d in=%d, %d threads: not the contract's bits",
                   builds[v].isa(), rows, out, in, threads);
        }
        if (v == 0 && check_bound && nn_outside_bound(dx, dy, w, rows, in, out)) {
            bad++;
            printf("\n  dx rows=%d out=%d in=%d: outside the float64 bound", rows, out, in);
        }
        /* dx times mul in the same pass (the backward after GELU), on the
         * given pool however small the product, with the caller's tasks in
         * 1 to 8 groups among dx's: each of them run once */
        for (size_t i = 0; i < (size_t)rows * in; i++)
            dx[i] = NAN;
        const int groups = 1 + (rows + out + in + v) % 8;
        /* any count, fewer than the groups and not a multiple of them too */
        extra_count ec = {{0}, 1 + (rows * 7 + in + v) % (8 * EXTRA_PER_GROUP)};
        builds[v].nn_with(pool, dx, dy, w, mul, rows, in, out, ec.n, groups, count_extra, &ec);
        if (memcmp(dx, want_mul, (size_t)rows * in * sizeof *dx)) {
            bad++;
            printf("\n  %s: dx = (dy w) * mul, rows=%d out=%d in=%d, %d threads: not the "
                   "contract's bits",
                   builds[v].isa(), rows, out, in, threads);
        }
        for (long t = 0; t < ec.n; t++)
            if (atomic_load(&ec.runs[t]) != 1) {
                bad++;
                printf("\n  %s: rows=%d out=%d in=%d, %d threads, %d groups: the caller's task "
                       "%ld ran %d times",
                       builds[v].isa(), rows, out, in, threads, groups, t,
                       atomic_load(&ec.runs[t]));
            }
        for (int sums = 0; sums < 2; sums++) {
            memcpy(dw, dw0, (size_t)out * in * sizeof *dw);
            memcpy(db, db0, (size_t)out * sizeof *db);
            builds[v].tn(pool, dw, sums ? db : NULL, dy, x, rows, out, in);
            if (memcmp(dw, want_dw, (size_t)out * in * sizeof *dw)) {
                bad++;
                printf("\n  %s: dw += dy^T x%s, rows=%d out=%d in=%d, %d threads: not the "
                       "contract's bits",
                       builds[v].isa(), sums ? " with db" : "", rows, out, in, threads);
            }
            if (memcmp(db, sums ? want_db : db0, (size_t)out * sizeof *db)) {
                bad++;
                printf("\n  %s: db %s, rows=%d out=%d in=%d, %d threads: not the contract's bits",
                       builds[v].isa(), sums ? "+= column sums" : "touched without colsum", rows,
                       out, in, threads);
            }
        }
        if (v == 0 && check_bound && tn_outside_bound(dw, dw0, dy, x, rows, out, in)) {
            bad++;
            printf("\n  dw rows=%d out=%d in=%d: outside the float64 bound", rows, out, in);
        }
    }
    free(dy);
    free(w);
    free(x);
    free(dw0);
    free(want_dx);
    free(want_dw);
    free(dx);
    free(dw);
    free(db0);
    free(want_db);
    free(db);
    free(mul);
    free(want_mul);
    return bad;
}

/* Every (rows, out, in) from sizes on and around the vector width, the
 * tiles (6 and 8 rows, panels of 16 and 32 columns), dw's task blocks and
 * steps along k (192 x 256 and 32 rows for AVX-512; 300 cuts a block in
 * both directions, 100 and 17 a step), and the models' widths,
 * whose product is at most 2^21 multiply-adds (2^21 keeps the portable
 * build's fmaf and the emulations quick), at 1, 2 and 3 threads
 * (thread_step). */
static void backward_shapes_exact(void)
{
    pt_rng_seed(&rng, 14, 0);
    static const int sizes[] = {1, 7, 17, 33, 64, 65, 100, 300, 384, 1536};
    enum { S = sizeof sizes / sizeof *sizes };
    long bad = 0;
    int cases = 0;
    for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++)
            for (int k = 0; k < S; k++) {
                const int rows = sizes[i], out = sizes[j], in = sizes[k];
                if ((double)rows * out * in > (1 << 21))
                    continue;
                for (int threads = 1; threads <= 3; threads += thread_step())
                    bad += bwd_case(rows, out, in, threads, threads == 1);
                cases++;
            }
    /* no product (in = 0): the column sums alone, still by the contract */
    for (int v = 0; v < BUILDS; v++)
        for (int i = 0; i < S; i++) {
            const int rows = sizes[i], out = sizes[(i * 3 + 1) % S];
            float *dy = rand_floats((size_t)rows * out, -1, 1), *db = rand_floats((size_t)out, -2, 2);
            float *want = malloc((size_t)out * sizeof *want);
            memcpy(want, db, (size_t)out * sizeof *want);
            emulate_colsum(want, dy, rows, out, 0);
            builds[v].tn(pool_of(2), NULL, db, dy, NULL, rows, out, 0);
            if (memcmp(db, want, (size_t)out * sizeof *db)) {
                bad++;
                printf("\n  %s: db alone (in = 0), rows=%d out=%d: not the contract's bits",
                       builds[v].isa(), rows, out);
            }
            free(dy);
            free(db);
            free(want);
        }
    printf(" (%d shapes) ", cases);
    CU_ASSERT_EQUAL(bad, 0);
}

/* The models' shapes, with many tasks for the pool: the demo ViT's four
 * layers (2176 rows: dw's k in 17 steps) and two others. */
static void backward_model_shapes_exact(void)
{
    pt_rng_seed(&rng, 15, 0);
    static const int shapes[][3] = {{2176, 192, 64}, {2176, 64, 64}, {2176, 256, 64},
                                    {2176, 64, 256}, {250, 1152, 96}, {601, 47, 300}};
    long bad = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int threads = 1; threads <= 3; threads += thread_step())
            bad += bwd_case(shapes[s][0], shapes[s][1], shapes[s][2], threads, threads == 1);
    CU_ASSERT_EQUAL(bad, 0);
}

/* The float32 backend's linear_bwd, which runs dx's tasks with dw's
 * partial sums (or db's column sums) among them, then the partial sums'
 * sums: dx and dw have the emulations' bits, db
 * the column sums' (per chunk of dw's rows acc = 0, acc += dy[r,o] for r
 * ascending; the chunks added in order; db = db + that sum),
 * whichever of the three are asked for, at 1, 2 and 3 threads. */
static void backend_linear_bwd_exact(void)
{
    pt_rng_seed(&rng, 16, 0);
    static const int shapes[][3] = {{2176, 192, 64}, {2176, 64, 256}, {100, 65, 33},
                                    {1, 7, 17},      {300, 384, 1536}, {17, 1, 1}};
    long bad = 0;
    for (int threads = 1; threads <= 3; threads++) {
        pt_backend *be;
        pt_err err = {0};
        CU_ASSERT_FATAL(pt_backend_open(&be, "cpu", threads, &err) == 0);
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            const int rows = shapes[s][0], out = shapes[s][1], in = shapes[s][2];
            const size_t nx = (size_t)rows * in, nw = (size_t)out * in;
            float *dy = rand_floats((size_t)rows * out, -1, 1), *w = rand_floats(nw, -1, 1);
            float *x = rand_floats(nx, -1, 1), *dw0 = rand_floats(nw, -2, 2);
            float *db0 = rand_floats((size_t)out, -2, 2);
            float *want_dx = malloc(nx * sizeof(float)), *want_dw = malloc(nw * sizeof(float));
            float *want_db = malloc((size_t)out * sizeof(float));
            emulate_nn(want_dx, dy, w, rows, in, out);
            memcpy(want_dw, dw0, nw * sizeof(float));
            emulate_tn(want_dw, dy, x, rows, out, in);
            memcpy(want_db, db0, (size_t)out * sizeof(float));
            emulate_colsum(want_db, dy, rows, out, in);
            /* backend buffers (the CPU backend's are host memory) */
            float *bdy = be->ops->alloc(be, (size_t)rows * out * sizeof(float));
            float *bx = be->ops->alloc(be, nx * sizeof(float));
            float *bw = be->ops->alloc(be, nw * sizeof(float));
            float *bdx = be->ops->alloc(be, nx * sizeof(float));
            float *bdw = be->ops->alloc(be, nw * sizeof(float));
            float *bdb = be->ops->alloc(be, (size_t)out * sizeof(float));
            memcpy(bdy, dy, (size_t)rows * out * sizeof(float));
            memcpy(bx, x, nx * sizeof(float));
            memcpy(bw, w, nw * sizeof(float));
            for (int want = 1; want < 8; want++) {
                memcpy(bdw, dw0, nw * sizeof(float));
                memcpy(bdb, db0, (size_t)out * sizeof(float));
                for (size_t i = 0; i < nx; i++)
                    bdx[i] = NAN;
                be->ops->linear_bwd(be, want & 1 ? bdx : NULL, want & 2 ? bdw : NULL,
                                    want & 4 ? bdb : NULL, bdy, bx, bw, rows, out, in);
                const int ok_dx = !(want & 1) || !memcmp(bdx, want_dx, nx * sizeof(float));
                const int ok_dw = !memcmp(bdw, want & 2 ? want_dw : dw0, nw * sizeof(float));
                const int ok_db =
                    !memcmp(bdb, want & 4 ? want_db : db0, (size_t)out * sizeof(float));
                if (!ok_dx || !ok_dw || !ok_db) {
                    bad++;
                    printf("\n  linear_bwd rows=%d out=%d in=%d want %d, %d threads: %s%s%s", rows,
                           out, in, want, threads, ok_dx ? "" : "dx ", ok_dw ? "" : "dw ",
                           ok_db ? "" : "db ");
                }
            }
            /* linear_bwd_mul (dx always wanted): dx times mul, one rounded
             * product each, and dw, db as linear_bwd's */
            float *bmul = be->ops->alloc(be, nx * sizeof(float));
            float *want_mul = malloc(nx * sizeof(float));
            for (size_t i = 0; i < nx; i++) {
                bmul[i] = 2.0f * (float)pt_rng_uniform(&rng) - 1.0f;
                want_mul[i] = want_dx[i] * bmul[i];
            }
            CU_ASSERT_FATAL(be->ops->linear_bwd_mul != NULL);
            for (int want = 1; want < 8; want += 2) {
                memcpy(bdw, dw0, nw * sizeof(float));
                memcpy(bdb, db0, (size_t)out * sizeof(float));
                for (size_t i = 0; i < nx; i++)
                    bdx[i] = NAN;
                be->ops->linear_bwd_mul(be, bdx, want & 2 ? bdw : NULL, want & 4 ? bdb : NULL,
                                        bdy, bx, bw, rows, out, in, bmul);
                const int ok_dx = !memcmp(bdx, want_mul, nx * sizeof(float));
                const int ok_dw = !memcmp(bdw, want & 2 ? want_dw : dw0, nw * sizeof(float));
                const int ok_db =
                    !memcmp(bdb, want & 4 ? want_db : db0, (size_t)out * sizeof(float));
                if (!ok_dx || !ok_dw || !ok_db) {
                    bad++;
                    printf("\n  linear_bwd_mul rows=%d out=%d in=%d want %d, %d threads: %s%s%s",
                           rows, out, in, want, threads, ok_dx ? "" : "dx ", ok_dw ? "" : "dw ",
                           ok_db ? "" : "db ");
                }
            }
            be->ops->free(be, bmul);
            free(want_mul);
            be->ops->free(be, bdy);
            be->ops->free(be, bx);
            be->ops->free(be, bw);
            be->ops->free(be, bdx);
            be->ops->free(be, bdw);
            be->ops->free(be, bdb);
            free(dy), free(w), free(x), free(dw0), free(db0);
            free(want_dx), free(want_dw), free(want_db);
        }
        pt_backend_close(be);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static const pt_test tests[] = {
    {"three_builds_differ", builds_differ},
    {"small_shapes_exact_and_within_bound", small_shapes_exact},
    {"parallel_shapes_exact_1_2_3_threads", parallel_shapes_exact},
    {"rows_independent_of_batch_and_threads", rows_independent_of_batch},
    {NULL, NULL}};
static const pt_test bwd_tests[] = {
    {"backward_shapes_exact_and_within_bound", backward_shapes_exact},
    {"backward_model_shapes_exact_1_2_3_threads", backward_model_shapes_exact},
    {"backend_linear_bwd_exact_1_2_3_threads", backend_linear_bwd_exact},
    {NULL, NULL}};
static const pt_test_suite suites[] = {
    {"forward linear kernel", tests}, {"backward linear kernels", bwd_tests}, {NULL, NULL}};
