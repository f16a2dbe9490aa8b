/*
 * cpu_misc.c: the CPU backend's elementwise and reduction ops: GELU, row
 * copies, mean pooling over each example's real tokens, dropout,
 * cross-entropy, AdamW, sums of squares and scaling. Compiled twice, as
 * every CPU backend file is (nn/cpu_real.h); the ops table and the
 * determinism rules all of them follow are in nn/cpu_ops.c.
 */
#include "nn/cpu_real.h"
#include "nn/cpu_lanes.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------- gelu */

/* Elements per block of the loops below (tasks are whole blocks). */
enum { GELU_BLOCK = 4 * LANES };

/* The elementwise ops' jobs: y (and dydx) from x, or dx from dy and dydx,
 * over n elements, tasks of `per` blocks. */
typedef struct {
    real *y, *dydx;
    const real *x, *dy;
    size_t n;
    long per;
} elem_job;

/* Block k of GELU's loops is elements [k * GELU_BLOCK, (k + 1) * GELU_BLOCK).
 * float32: the arithmetic on explicit vectors (cpu_math.h's pt_f16_*, the
 * scalar functions' operations lane by lane), so every element, those of
 * the last partial vector included, goes through the same vector
 * operations wherever it sits (see cpu_lanes.h): no vectoriser decides
 * which elements take a scalar path; with AVX-512 the forward runs a
 * block's four vectors side by side, which lets their long dependency
 * chains overlap; with AVX2 (PT_LANES_PAIR) one at a time, loaded and
 * stored as pairs of 256-bit halves (four side by side were 2.1x slower
 * there: GCC keeps arrays of 64-byte vectors in memory without AVX-512).
 * The derivative Phi(x) + x phi(x) is one fused multiply-add of the two
 * parts the forward has anyway, the same on every instruction set.
 * float64, the oracle: libm, element by element. dydx may alias x: each
 * vector (AVX2) or block is read whole before any of it is written. */
static void gelu_fwd_task(void *ctx, long t, int thread)
{
    (void)thread;
    const elem_job *j = ctx;
    real *y = j->y, *dydx = j->dydx;
    const real *x = j->x;
    const size_t n = j->n, blocks = (n + GELU_BLOCK - 1) / GELU_BLOCK;
    long k0, k1;
    task_items(t, j->per, (long)blocks, &k0, &k1);
    for (size_t k = (size_t)k0; k < (size_t)k1; k++) {
        const size_t i0 = k * GELU_BLOCK;
        const int len = n - i0 < GELU_BLOCK ? (int)(n - i0) : GELU_BLOCK;
#if defined(PT_LANES_PAIR)
        /* loads and stores as pairs (cpu_lanes.h), the arithmetic as below */
        for (int v = 0; v < GELU_BLOCK / LANES && v * LANES < len; v++) {
            const lanes_pair p = lanes_pair_at(x + i0, v * LANES, len, 0);
            const pt_f16 xv = pt_f16_join(p.lo, p.hi);
            pt_f16 cdf, pdf;
            pt_f16_gelu_parts(xv, &cdf, &pdf);
            lanes_pair_put(y + i0, v * LANES, len, pt_f16_split(xv * cdf));
            if (dydx)
                lanes_pair_put(dydx + i0, v * LANES, len, pt_f16_split(pt_f16_fma(xv, pdf, cdf)));
        }
#elif !defined(PT_REAL_F64)
        lanes_v xv[GELU_BLOCK / LANES], cdf[GELU_BLOCK / LANES], pdf[GELU_BLOCK / LANES];
        for (int v = 0; v < GELU_BLOCK / LANES; v++)
            xv[v] = v * LANES < len ? lanes_at(x + i0, v * LANES, len, 0) : (lanes_v){0};
        for (int v = 0; v < GELU_BLOCK / LANES; v++)
            pt_f16_gelu_parts(xv[v], &cdf[v], &pdf[v]);
        for (int v = 0; v < GELU_BLOCK / LANES && v * LANES < len; v++) {
            lanes_put(y + i0, v * LANES, len, xv[v] * cdf[v]);
            if (dydx)
                lanes_put(dydx + i0, v * LANES, len, pt_f16_fma(xv[v], pdf[v], cdf[v]));
        }
#else
        for (size_t i = i0; i < i0 + (size_t)len; i++) {
            real cdf, pdf;
            const real xi = x[i];
            R_GELU_PARTS(xi, &cdf, &pdf);
            y[i] = xi * cdf;
            if (dydx)
                dydx[i] = cdf + xi * pdf;
        }
#endif
    }
}

/* dx = dy * dydx; dx may alias dy. */
static void gelu_bwd_task(void *ctx, long t, int thread)
{
    (void)thread;
    const elem_job *j = ctx;
    real *dx = j->y;
    const real *dy = j->dy, *dydx = j->x;
    const size_t n = j->n, blocks = (n + GELU_BLOCK - 1) / GELU_BLOCK;
    long k0, k1;
    task_items(t, j->per, (long)blocks, &k0, &k1);
    for (size_t k = (size_t)k0; k < (size_t)k1; k++) {
        const size_t i0 = k * GELU_BLOCK;
        const int len = n - i0 < GELU_BLOCK ? (int)(n - i0) : GELU_BLOCK;
        for (int i = 0; i < len; i += LANES)
            lanes_put(dx + i0, i, len, lanes_at(dy + i0, i, len, 0) * lanes_at(dydx + i0, i, len, 0));
    }
}

void CPU_FN(pt_cpu_gelu_fwd)(pt_backend *be, void *y_, void *dydx_, const void *x_, size_t n)
{
    const size_t blocks = (n + GELU_BLOCK - 1) / GELU_BLOCK;
    elem_job j = {y_, dydx_, x_, NULL, n, per_task(GELU_BLOCK)};
    pt_pool_run(PAR_POOL(be, n), tasks_for((long)blocks, j.per), gelu_fwd_task, &j);
}

void CPU_FN(pt_cpu_gelu_bwd)(pt_backend *be, void *dx_, const void *dy_, const void *dydx_,
                             size_t n)
{
    const size_t blocks = (n + GELU_BLOCK - 1) / GELU_BLOCK;
    elem_job j = {dx_, NULL, dydx_, dy_, n, per_task(GELU_BLOCK)};
    pt_pool_run(PAR_POOL(be, n), tasks_for((long)blocks, j.per), gelu_bwd_task, &j);
}


void CPU_FN(pt_cpu_copy_rows)(pt_backend *be, void *dst_, int dst_stride, const void *src_,
                              int src_stride, int rows, int cols, int accumulate)
{
    (void)be;
    real *dst = dst_;
    const real *src = src_;
    for (int r = 0; r < rows; r++) {
        real *o = dst + (size_t)r * dst_stride;
        const real *i = src + (size_t)r * src_stride;
        if (accumulate) {
#pragma omp simd
            for (int c = 0; c < cols; c++)
                o[c] += i[c];
        } else {
            memcpy(o, i, (size_t)cols * sizeof *i);
        }
    }
}

/* -------------------------------------------------------------- mean pool */

static int pool_len(const int32_t *lens, int b, int T)
{
    return lens[b] < 1 ? 1 : lens[b] > T ? T : lens[b];
}

/* Each example's sum runs over t in order, the same order whatever else is
 * in the batch. */
typedef struct {
    real *y;
    const real *x;
    const int32_t *lens;
    int n, T, d;
    long per;
} mean_pool_job;

static void mean_pool_fwd_task(void *ctx, long t_, int thread)
{
    (void)thread;
    const mean_pool_job *j = ctx;
    real *y = j->y;
    const real *x = j->x;
    const int32_t *lens = j->lens;
    const int T = j->T, d = j->d;
    long b0, b1;
    task_items(t_, j->per, j->n, &b0, &b1);
    for (int b = (int)b0; b < b1; b++) {
        const int L = pool_len(lens, b, T);
        real *yb = y + (size_t)b * d;
        const real *xb = x + (size_t)b * T * d;
        memcpy(yb, xb, (size_t)d * sizeof *yb);
        for (int t = 1; t < L; t++) {
#pragma omp simd
            for (int c = 0; c < d; c++)
                yb[c] += xb[(size_t)t * d + c];
        }
        const real inv = (real)1 / (real)L;
#pragma omp simd
        for (int c = 0; c < d; c++)
            yb[c] *= inv;
    }
}

void CPU_FN(pt_cpu_mean_pool_fwd)(pt_backend *be, void *y_, const void *x_, const int32_t *lens,
                                  int n, int T, int d)
{
    mean_pool_job j = {y_, x_, lens, n, T, d, per_task((size_t)T * d)};
    pt_pool_run(PAR_POOL(be, (size_t)n * T * d), tasks_for(n, j.per), mean_pool_fwd_task, &j);
}

/* dx travels as y, dy as x */
static void mean_pool_bwd_task(void *ctx, long t_, int thread)
{
    (void)thread;
    const mean_pool_job *j = ctx;
    real *dx = j->y;
    const real *dy = j->x;
    const int32_t *lens = j->lens;
    const int T = j->T, d = j->d;
    long b0, b1;
    task_items(t_, j->per, j->n, &b0, &b1);
    for (int b = (int)b0; b < b1; b++) {
        const int L = pool_len(lens, b, T);
        const real inv = (real)1 / (real)L;
        real *db = dx + (size_t)b * T * d;
        for (int t = 0; t < L; t++) {
#pragma omp simd
            for (int c = 0; c < d; c++)
                db[(size_t)t * d + c] = dy[(size_t)b * d + c] * inv;
        }
        memset(db + (size_t)L * d, 0, (size_t)(T - L) * d * sizeof *db);
    }
}

void CPU_FN(pt_cpu_mean_pool_bwd)(pt_backend *be, void *dx_, const void *dy_, const int32_t *lens,
                                  int n, int T, int d)
{
    mean_pool_job j = {dx_, dy_, lens, n, T, d, per_task((size_t)T * d)};
    pt_pool_run(PAR_POOL(be, (size_t)n * T * d), tasks_for(n, j.per), mean_pool_bwd_task, &j);
}

/* ---------------------------------------------------------------- dropout */

/* Elementwise, so an element's bits depend on its own inputs and mask bit
 * only; the mask is a function of (key, the example's id, the element's
 * index), never of where the example sits in the call. A task is one chunk
 * of one example's elements. */
typedef struct dropout_job {
    real *y;
    const real *x, *add;
    const pt_dropout *drop;
    uint32_t thr;
    real keep;
    size_t per, chunks;
} dropout_job;

static void dropout_task(void *ctx, long t, int thread)
{
    (void)thread;
    const dropout_job *j = ctx;
    real *y = j->y;
    const real *x = j->x, *add = j->add;
    const uint32_t thr = j->thr;
    const real keep = j->keep;
    const size_t c = (size_t)t, per = j->per;
    const size_t b = c / j->chunks, e0 = c % j->chunks * CHUNK_ELEMS;
    const size_t e1 = e0 + CHUNK_ELEMS < per ? e0 + CHUNK_ELEMS : per, o = b * per;
    const uint64_t row = pt_dropout_row(j->drop->key, j->drop->ids[b]);
    if (add) {
#pragma omp simd
        for (size_t e = e0; e < e1; e++)
            y[o + e] = R_FMA(x[o + e], pt_dropout_bits(row, e) >= thr ? keep : 0, add[o + e]);
    } else {
#pragma omp simd
        for (size_t e = e0; e < e1; e++)
            y[o + e] = x[o + e] * (pt_dropout_bits(row, e) >= thr ? keep : 0);
    }
}

void CPU_FN(pt_cpu_dropout)(pt_backend *be, void *y_, const void *x_, const void *add_, int n,
                            size_t per, const pt_dropout *drop)
{
    dropout_job j = {y_, x_, add_, drop, pt_dropout_threshold(drop->p),
                     (real)(1.0 / (1.0 - drop->p)), per, (per + CHUNK_ELEMS - 1) / CHUNK_ELEMS};
    pt_pool_run(PAR_POOL(be, (size_t)n * per), (long)((size_t)n * j.chunks), dropout_task, &j);
}

/* ----------------------------------------------------------------- losses */

/* e = exp(z - mx) on one block of LANES: the one compiled copy (cpu_lanes.h). */
static __attribute__((noinline)) void exp_block(real *restrict e, const real *restrict z, real mx)
{
    e = __builtin_assume_aligned(e, 64);
    z = __builtin_assume_aligned(z, 64);
#pragma omp simd
    for (int l = 0; l < LANES; l++)
        e[l] = R_EXP(z[l] - mx);
}

/* Per row: the max (exact in any order), the exponentials by exp_block, their
 * sum in lanes order (lane l takes blocks' element l in turn), so a row's
 * loss and gradient depend on the row alone. */
typedef struct {
    real *dlogits;
    const real *logits;
    const int32_t *targets;
    double *row_loss;
    int64_t *task_hits; /* per task, added in task order */
    int rows, classes;
    double scale;
    long per;
} xent_job;

static void cross_entropy_task(void *ctx, long t, int thread)
{
    (void)thread;
    const xent_job *j = ctx;
    real *dlogits = j->dlogits;
    const real *logits = j->logits;
    const int32_t *targets = j->targets;
    double *row_loss = j->row_loss;
    const int classes = j->classes;
    const double scale = j->scale;
    int64_t hits = 0;
    long r0, r1;
    task_items(t, j->per, j->rows, &r0, &r1);
    for (int r = (int)r0; r < r1; r++) {
        const real *z = logits + (size_t)r * classes;
        real *g = dlogits ? dlogits + (size_t)r * classes : NULL;
        int arg = 0;
        real mx = z[0];
        for (int c = 1; c < classes; c++)
            if (z[c] > mx) {
                mx = z[c];
                arg = c;
            }
        lanes_v acc = {0};
        for (int c0 = 0; c0 < classes; c0 += LANES) {
            real zb[LANES] BLOCK_ALIGNED, e[LANES] BLOCK_ALIGNED;
            const int have = block_load(zb, LANES, z, (size_t)c0, (size_t)classes, mx);
            exp_block(e, zb, mx);
            if (g)
                block_store(g, (size_t)c0, e, LANES, have);
            for (int l = have; l < LANES; l++)
                e[l] = 0;
            acc += *(const lanes_v *)e;
        }
        const real sum = lanes_fold(acc);
        const int y = targets[r];
        row_loss[r] = (double)mx + log((double)sum) - (double)z[y];
        hits += arg == y;
        if (g) {
            const real k = (real)scale / sum;
#pragma omp simd
            for (int c = 0; c < classes; c++)
                g[c] *= k;
            g[y] -= (real)scale;
        }
    }
    j->task_hits[t] = hits;
}

double CPU_FN(pt_cpu_cross_entropy)(pt_backend *be, void *dlogits_, const void *logits_,
                                    const int32_t *targets, int rows, int classes, double scale,
                                    int64_t *correct)
{
    double *row_loss = CPU_FN(pt_cpu_scratch)((size_t)rows * sizeof *row_loss);
    const long per = per_task((size_t)classes), tasks = tasks_for(rows, per);
    int64_t *task_hits = CPU_FN(pt_cpu_scratch)((size_t)tasks * sizeof *task_hits);
    xent_job j = {dlogits_, logits_, targets, row_loss, task_hits, rows, classes, scale, per};
    pt_pool_run(PAR_POOL(be, (size_t)rows * classes), tasks, cross_entropy_task, &j);
    int64_t hits = 0;
    for (long t = 0; t < tasks; t++)
        hits += task_hits[t];
    free(task_hits);
    double total = 0;
    for (int r = 0; r < rows; r++)
        total += row_loss[r];
    free(row_loss);
    *correct += hits;
    return total;
}

/* -------------------------------------------------------------- optimizer */

typedef struct {
    real *p, *m, *v;
    const real *g;
    size_t n;
    const pt_adamw_args *a;
} adamw_job;

static void adamw_task(void *ctx, long t, int thread)
{
    (void)thread;
    const adamw_job *j = ctx;
    real *p = j->p, *m = j->m, *v = j->v;
    const real *g = j->g;
    const pt_adamw_args *a = j->a;
    long i0, i1;
    task_items(t, TASK_WORK, (long)j->n, &i0, &i1);
    const real decay = (real)(1.0 - a->lr * a->weight_decay);
    const real b1 = (real)a->beta1, b2 = (real)a->beta2;
    const real c1 = (real)(1.0 - a->beta1), c2 = (real)(1.0 - a->beta2);
    const real step = (real)(a->lr / a->bias_corr1);
    const real bc2_sqrt = (real)sqrt(a->bias_corr2);
    const real eps = (real)a->eps, gs = (real)a->grad_scale;
    /* The multiply-adds are explicit: left to contraction, the vectorised
     * body and the scalar remainder of this loop may fuse different pairs
     * (and did: p * decay in one, step * (...) in the other), so an
     * element's bits would depend on where the task's range ends. */
#pragma omp simd
    for (size_t i = (size_t)i0; i < (size_t)i1; i++) {
        const real gi = g[i] * gs;
        const real mi = R_FMA(m[i], b1, c1 * gi);
        const real vi = R_FMA(v[i], b2, c2 * gi * gi);
        m[i] = mi;
        v[i] = vi;
        p[i] = R_FMA(-step, mi / (R_SQRT(vi) / bc2_sqrt + eps), p[i] * decay);
    }
}

void CPU_FN(pt_cpu_adamw)(pt_backend *be, void *p_, const void *g_, void *m_, void *v_, size_t n,
                          const pt_adamw_args *a)
{
    adamw_job j = {p_, m_, v_, g_, n, a};
    pt_pool_run(PAR_POOL(be, n), tasks_for((long)n, TASK_WORK), adamw_task, &j);
}

typedef struct {
    real *x;
    const real *cx;
    double *part;
    size_t n;
    double f;
} vec_job;

/* Sixteen doubles: sumsq's partial sums, lane l adding elements l, l + 16,
 * ... of a chunk (two independent chains of vector multiply-adds, where a
 * single double accumulator was one scalar chain, four cycles an element). */
typedef double sumsq_v __attribute__((vector_size(16 * sizeof(double))));
typedef real sumsq_in __attribute__((vector_size(16 * sizeof(real)), aligned(sizeof(real)),
                                     may_alias));

/* task t: chunk t of CHUNK_ELEMS elements, its sum of squares in double.
 * The lanes are added in a fixed order at the end, so a chunk's sum depends
 * on its elements alone (never on threads), and the chunks' sums are added
 * in chunk order by cpu_sumsq. A float's square is exact in double, so only
 * the additions round. */
static void sumsq_task(void *ctx, long t, int thread)
{
    (void)thread;
    const vec_job *j = ctx;
    const real *x = j->cx;
    const size_t n = j->n, i0 = (size_t)t * CHUNK_ELEMS;
    const size_t i1 = i0 + CHUNK_ELEMS < n ? i0 + CHUNK_ELEMS : n;
    sumsq_v acc = {0};
    size_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        const sumsq_v v = __builtin_convertvector(*(const sumsq_in *)(x + i), sumsq_v);
        acc += v * v;
    }
    for (int l = 0; i < i1; i++, l++)
        acc[l] += (double)x[i] * (double)x[i];
    double s = 0;
    for (int l = 0; l < 16; l++)
        s += acc[l];
    j->part[t] = s;
}

double CPU_FN(pt_cpu_sumsq)(pt_backend *be, const void *x_, size_t n)
{
    size_t chunks = (n + CHUNK_ELEMS - 1) / CHUNK_ELEMS;
    double *part = CPU_FN(pt_cpu_scratch)(chunks * sizeof *part);
    vec_job j = {NULL, x_, part, n, 0};
    pt_pool_run(PAR_POOL(be, n), (long)chunks, sumsq_task, &j);
    double total = 0;
    for (size_t c = 0; c < chunks; c++)
        total += part[c];
    free(part);
    return total;
}

static void scale_task(void *ctx, long t, int thread)
{
    (void)thread;
    const vec_job *j = ctx;
    real *x = j->x;
    const real k = (real)j->f;
    long i0, i1;
    task_items(t, TASK_WORK, (long)j->n, &i0, &i1);
#pragma omp simd
    for (size_t i = (size_t)i0; i < (size_t)i1; i++)
        x[i] *= k;
}

void CPU_FN(pt_cpu_scale)(pt_backend *be, void *x_, size_t n, double f)
{
    vec_job j = {x_, NULL, NULL, n, f};
    pt_pool_run(PAR_POOL(be, n), tasks_for((long)n, TASK_WORK), scale_task, &j);
}
