/*
 * cpu_ops.c: the CPU backend's ops table: our own kernel for the float32
 * forward linear (nn/cpu_gemm.c), OpenBLAS for the other matrix multiplies,
 * OpenMP loops for the rest. This file is compiled twice, once with
 * PT_REAL_F64 undefined (float32: the training backend, `pt_cpu_ops_f32`) and
 * once with it defined (float64: the finite-difference oracle,
 * `pt_cpu_ops_f64`); the two differ only in the typedef and the math
 * functions chosen below.
 *
 * Determinism: every reduction runs over fixed-size chunks whose partial sums
 * are added in chunk order, so results do not depend on the thread count or
 * on scheduling; the only thread-count dependence left is inside OpenBLAS,
 * which only the backward (and the float64 oracle) calls.
 */
#include "nn/cpu_real.h"
#include "nn/cpu_lanes.h"
#ifndef PT_REAL_F64
#include "nn/cpu_gemm.h"
#endif

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PT_REAL_F64
#define OPS_NAME pt_cpu_ops_f64
#else
#define OPS_NAME pt_cpu_ops_f32
#endif

/* Rows per chunk of a chunked reduction: fixed, so sums do not depend on threads. */
enum { CHUNK_ROWS = 64, CHUNK_ELEMS = 8192 };

/* Scratch of a few kilobytes inside an op: if even that fails the process is
 * out of memory and no error path could do anything useful. Aligned to 64
 * bytes so that a vectorised loop over it starts at the same offset from an
 * alignment boundary for every thread and call: the compiler's choice of
 * which iterations run in a scalar peel then never depends on where malloc
 * happened to put the block (attention's softmax relies on this). */
void *CPU_FN(pt_cpu_scratch)(size_t bytes)
{
    size_t size = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, size ? size : 64);
    if (p)
        memset(p, 0, size ? size : 64);
    if (!p) {
        fprintf(stderr, "pipetrain: out of memory allocating %zu bytes of CPU scratch\n", bytes);
        abort();
    }
    return p;
}

/* ----------------------------------------------------------------- memory */

static void *cpu_alloc(pt_backend *be, size_t bytes)
{
    (void)be;
    size_t size = (bytes + 63) / 64 * 64;
    if (size == 0)
        size = 64;
    void *p = aligned_alloc(64, size);
    if (p)
        memset(p, 0, size);
    return p;
}

static void cpu_free(pt_backend *be, void *p)
{
    (void)be;
    free(p);
}

static void cpu_memcpy(pt_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes && dst != src)
        memcpy(dst, src, bytes);
}

static void cpu_zero(pt_backend *be, void *dst, size_t bytes)
{
    (void)be;
    memset(dst, 0, bytes);
}

static void cpu_from_f32(pt_backend *be, void *dst, const float *src, size_t n)
{
    (void)be;
    real *d = dst;
    for (size_t i = 0; i < n; i++)
        d[i] = (real)src[i];
}

static void cpu_to_f32(pt_backend *be, float *dst, const void *src, size_t n)
{
    (void)be;
    const real *s = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)s[i];
}

static int cpu_sync(pt_backend *be, pt_err *err)
{
    (void)be;
    (void)err;
    return 0;
}

/* ----------------------------------------------------------------- linear */

/* The float32 forward is our own kernel (nn/cpu_gemm.h), not sgemm: its
 * rounding per element is fixed, so a row's output does not depend on the
 * rows that share the call, which the activation cache relies on. OpenBLAS
 * picks kernels, edge paths and thread splits by the number of rows, so its
 * bits for a row change with the batch. The float64 oracle has no such duty
 * and keeps dgemm; its y starts as add + b and the product accumulates
 * onto it (beta = 1), the same grouping as the float32 kernel's. */
static void cpu_linear_fwd(pt_backend *be, void *y_, const void *x, const void *w, const void *b_,
                           int rows, int out, int in, const void *add_)
{
    (void)be;
#ifdef PT_REAL_F64
    real *y = y_;
    const real *b = b_, *add = add_;
    if (b || (add && add != y)) {
#pragma omp parallel for schedule(static) PAR_IF((size_t)rows * out)
        for (int r = 0; r < rows; r++)
            for (int o = 0; o < out; o++) {
                const size_t i = (size_t)r * out + o;
                y[i] = add && b ? add[i] + b[o] : add ? add[i] : b[o];
            }
    }
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0, x, in, w, in,
         add || b ? 1.0 : 0.0, y, out);
#else
    pt_gemm_nt_f32(y_, x, w, b_, add_, rows, out, in);
#endif
}

/* db[o] += sum over rows of dy[r, o]: each thread owns a range of columns and
 * walks every row, so the summation order is fixed. */
static void column_sums(real *db, const real *dy, int rows, int cols)
{
    enum { STRIPE = 16 };
    int stripes = (cols + STRIPE - 1) / STRIPE;
#pragma omp parallel for schedule(static) PAR_IF((size_t)rows * cols)
    for (int s = 0; s < stripes; s++) {
        int c0 = s * STRIPE, c1 = c0 + STRIPE < cols ? c0 + STRIPE : cols;
        real acc[STRIPE] = {0};
        for (int r = 0; r < rows; r++) {
            const real *row = dy + (size_t)r * cols;
#pragma omp simd
            for (int c = c0; c < c1; c++)
                acc[c - c0] += row[c];
        }
        for (int c = c0; c < c1; c++)
            db[c] += acc[c - c0];
    }
}

static void cpu_linear_bwd(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                           const void *x, const void *w, int rows, int out, int in)
{
    (void)be;
    if (dx)
        GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in, out, 1.0, dy, out, w, in, 0.0, dx,
             in);
    if (dw)
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, rows, 1.0, dy, out, x, in, 1.0, dw,
             in);
    if (db)
        column_sums(db, dy, rows, out);
}

/* -------------------------------------------------------------- layernorm */

/* Per row: the sums in lanes_sum's fixed order and the output by explicit
 * fused multiply-adds, so a row's bits depend on the row alone. */
static void cpu_layernorm_fwd(pt_backend *be, void *y_, void *mean_, void *rstd_, const void *x_,
                              const void *w_, const void *b_, int rows, int dim, double eps)
{
    (void)be;
    real *y = y_, *mean = mean_, *rstd = rstd_;
    const real *x = x_, *w = w_, *b = b_;
#pragma omp parallel for schedule(static) PAR_IF((size_t)rows * dim)
    for (int r = 0; r < rows; r++) {
        const real *xr = x + (size_t)r * dim;
        real *yr = y + (size_t)r * dim;
        const real m = lanes_sum(xr, dim) / dim;
        const real v = lanes_sumsq_dev(xr, dim, m);
        const real rs = (real)1 / R_SQRT(v / dim + (real)eps);
#pragma omp simd
        for (int i = 0; i < dim; i++)
            yr[i] = R_FMA((xr[i] - m) * rs, w[i], b[i]);
        mean[r] = m;
        rstd[r] = rs;
    }
}

static void cpu_layernorm_bwd(pt_backend *be, void *dx_, void *dw_, void *db_, const void *dy_,
                              const void *x_, const void *mean_, const void *rstd_,
                              const void *w_, int rows, int dim, const void *add_)
{
    (void)be;
    real *dx = dx_, *dw = dw_, *db = db_;
    const real *dy = dy_, *x = x_, *mean = mean_, *rstd = rstd_, *w = w_, *add = add_;
    int chunks = (rows + CHUNK_ROWS - 1) / CHUNK_ROWS;
    real *part = (dw || db) ? CPU_FN(pt_cpu_scratch)((size_t)chunks * 2 * dim * sizeof *part) : NULL;
#pragma omp parallel for schedule(static) PAR_IF((size_t)rows * dim)
    for (int c = 0; c < chunks; c++) {
        real *pw = part ? part + (size_t)c * 2 * dim : NULL, *pb = pw ? pw + dim : NULL;
        int r1 = (c + 1) * CHUNK_ROWS < rows ? (c + 1) * CHUNK_ROWS : rows;
        for (int r = c * CHUNK_ROWS; r < r1; r++) {
            const real *xr = x + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
            const real m = mean[r], rs = rstd[r];
            if (pw) {
#pragma omp simd
                for (int i = 0; i < dim; i++) {
                    real xhat = (xr[i] - m) * rs;
                    pw[i] += dyr[i] * xhat;
                    pb[i] += dyr[i];
                }
            }
            if (!dx)
                continue;
            /* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w */
            real sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
            for (int i = 0; i < dim; i++) {
                real g = dyr[i] * w[i];
                sg += g;
                sgx += g * (xr[i] - m) * rs;
            }
            sg /= dim;
            sgx /= dim;
            real *dxr = dx + (size_t)r * dim;
            if (add) {
                const real *ar = add + (size_t)r * dim;
#pragma omp simd
                for (int i = 0; i < dim; i++)
                    dxr[i] = ar[i] + rs * (dyr[i] * w[i] - sg - (xr[i] - m) * rs * sgx);
            } else {
#pragma omp simd
                for (int i = 0; i < dim; i++)
                    dxr[i] = rs * (dyr[i] * w[i] - sg - (xr[i] - m) * rs * sgx);
            }
        }
    }
    if (part) {
        for (int c = 0; c < chunks; c++) {
            const real *pw = part + (size_t)c * 2 * dim, *pb = pw + dim;
            for (int i = 0; i < dim; i++) {
                if (dw)
                    dw[i] += pw[i];
                if (db)
                    db[i] += pb[i];
            }
        }
        free(part);
    }
}

/* ------------------------------------------------------------------- gelu */

/* The one compiled copy of GELU's arithmetic (see cpu_lanes.h): noinline so
 * that full blocks, the last partial one and every thread run the same
 * instructions on every element. 4 vectors a call, to spread its cost. */
enum { GELU_BLOCK = 4 * LANES };

static __attribute__((noinline)) void gelu_block(real *restrict y, const real *restrict x)
{
    y = __builtin_assume_aligned(y, 64);
    x = __builtin_assume_aligned(x, 64);
#pragma omp simd
    for (int l = 0; l < GELU_BLOCK; l++) {
        real cdf, pdf;
        R_GELU_PARTS(x[l], &cdf, &pdf);
        y[l] = x[l] * cdf;
    }
}

static void cpu_gelu_fwd(pt_backend *be, void *y_, const void *x_, size_t n)
{
    (void)be;
    real *y = y_;
    const real *x = x_;
    const size_t blocks = (n + GELU_BLOCK - 1) / GELU_BLOCK;
#pragma omp parallel for schedule(static) PAR_IF(n)
    for (size_t k = 0; k < blocks; k++) {
        real in[GELU_BLOCK] BLOCK_ALIGNED, out[GELU_BLOCK] BLOCK_ALIGNED;
        const int have = block_load(in, GELU_BLOCK, x, k * GELU_BLOCK, n, 0);
        gelu_block(out, in);
        block_store(y, k * GELU_BLOCK, out, GELU_BLOCK, have);
    }
}

/* Phi(x) = y / x carries the relative error of y (an ulp or two) wherever
 * |x| >= 1e-3; nearer 0, Phi(x) = 0.5 + x phi(0) is exact to x^3 / 15 < 1e-10.
 * phi(x) itself is one exp. */
static void cpu_gelu_bwd(pt_backend *be, void *dx_, const void *dy_, const void *x_,
                         const void *y_, size_t n)
{
    (void)be;
    real *dx = dx_;
    const real *dy = dy_, *x = x_, *y = y_;
#pragma omp parallel for simd schedule(static) PAR_IF(n)
    for (size_t i = 0; i < n; i++) {
        const real xi = x[i];
        const real near0 = (real)0.5 + xi * (real)0.39894228040143267794;
        const real safe = xi > (real)1e-3 || xi < (real)-1e-3 ? xi : (real)1;
        const real cdf = xi > (real)1e-3 || xi < (real)-1e-3 ? y[i] / safe : near0;
        const real pdf = (real)0.39894228040143267794 * R_EXP((real)-0.5 * xi * xi);
        dx[i] = dy[i] * (cdf + xi * pdf);
    }
}

/* -------------------------------------------------------------- embedding */

static void cpu_patchify(pt_backend *be, void *patches_, const void *images_, int n, int C, int H,
                         int W, int p)
{
    (void)be;
    real *patches = patches_;
    const real *images = images_;
    const int gh = H / p, gw = W / p, plen = C * p * p;
#pragma omp parallel for schedule(static) PAR_IF((size_t)n * C * H * W)
    for (int b = 0; b < n; b++)
        for (int py = 0; py < gh; py++)
            for (int px = 0; px < gw; px++) {
                real *dst = patches + ((size_t)b * gh * gw + (size_t)py * gw + px) * plen;
                for (int c = 0; c < C; c++)
                    for (int y = 0; y < p; y++) {
                        const real *src = images + (((size_t)b * C + c) * H + (size_t)py * p + y) * W +
                                          (size_t)px * p;
                        memcpy(dst + ((size_t)c * p + y) * p, src, (size_t)p * sizeof *src);
                    }
            }
}

static void cpu_vit_assemble_fwd(pt_backend *be, void *x_, const void *proj_, const void *cls_,
                                 const void *pos_, int n, int T, int d)
{
    (void)be;
    real *x = x_;
    const real *proj = proj_, *cls = cls_, *pos = pos_;
#pragma omp parallel for schedule(static) PAR_IF((size_t)n * T * d)
    for (int b = 0; b < n; b++) {
        real *xb = x + (size_t)b * T * d;
#pragma omp simd
        for (int c = 0; c < d; c++)
            xb[c] = cls[c] + pos[c];
        for (int t = 1; t < T; t++) {
            const real *pr = proj + ((size_t)b * (T - 1) + t - 1) * d;
#pragma omp simd
            for (int c = 0; c < d; c++)
                xb[(size_t)t * d + c] = pr[c] + pos[(size_t)t * d + c];
        }
    }
}

static void cpu_vit_assemble_bwd(pt_backend *be, void *dproj_, void *dcls_, void *dpos_,
                                 const void *dx_, int n, int T, int d)
{
    (void)be;
    real *dproj = dproj_, *dcls = dcls_, *dpos = dpos_;
    const real *dx = dx_;
    /* Each thread owns token positions t and sums over examples in order. */
#pragma omp parallel for schedule(static) PAR_IF((size_t)n * T * d)
    for (int t = 0; t < T; t++) {
        real *dp = dpos + (size_t)t * d;
        for (int b = 0; b < n; b++) {
            const real *g = dx + ((size_t)b * T + t) * d;
#pragma omp simd
            for (int c = 0; c < d; c++)
                dp[c] += g[c];
            if (t == 0) {
#pragma omp simd
                for (int c = 0; c < d; c++)
                    dcls[c] += g[c];
            } else if (dproj) {
                memcpy(dproj + ((size_t)b * (T - 1) + t - 1) * d, g, (size_t)d * sizeof *g);
            }
        }
    }
}

static void cpu_token_embed_fwd(pt_backend *be, void *x_, const int32_t *tokens, const void *wte_,
                                const void *wpe_, int n, int T, int d)
{
    (void)be;
    real *x = x_;
    const real *wte = wte_, *wpe = wpe_;
#pragma omp parallel for schedule(static) PAR_IF((size_t)n * T * d)
    for (int r = 0; r < n * T; r++) {
        const real *e = wte + (size_t)tokens[r] * d, *p = wpe + (size_t)(r % T) * d;
        real *xr = x + (size_t)r * d;
#pragma omp simd
        for (int c = 0; c < d; c++)
            xr[c] = e[c] + p[c];
    }
}

static void cpu_token_embed_bwd(pt_backend *be, void *dwte_, void *dwpe_, const void *dx_,
                                const int32_t *tokens, int n, int T, int d)
{
    (void)be;
    real *dwte = dwte_, *dwpe = dwpe_;
    const real *dx = dx_;
    /* Rows sharing a token add into the same row of dwte, so this stays serial:
     * it is n*T*d additions, small next to any matrix multiply. */
    for (int r = 0; r < n * T; r++) {
        real *e = dwte + (size_t)tokens[r] * d;
        const real *g = dx + (size_t)r * d;
#pragma omp simd
        for (int c = 0; c < d; c++)
            e[c] += g[c];
    }
#pragma omp parallel for schedule(static) PAR_IF((size_t)n * T * d)
    for (int t = 0; t < T; t++) {
        real *p = dwpe + (size_t)t * d;
        for (int b = 0; b < n; b++) {
            const real *g = dx + ((size_t)b * T + t) * d;
#pragma omp simd
            for (int c = 0; c < d; c++)
                p[c] += g[c];
        }
    }
}

static void cpu_copy_rows(pt_backend *be, void *dst_, int dst_stride, const void *src_,
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
static void cpu_mean_pool_fwd(pt_backend *be, void *y_, const void *x_, const int32_t *lens,
                              int n, int T, int d)
{
    (void)be;
    real *y = y_;
    const real *x = x_;
#pragma omp parallel for schedule(static) PAR_IF((size_t)n * T * d)
    for (int b = 0; b < n; b++) {
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

static void cpu_mean_pool_bwd(pt_backend *be, void *dx_, const void *dy_, const int32_t *lens,
                              int n, int T, int d)
{
    (void)be;
    real *dx = dx_;
    const real *dy = dy_;
#pragma omp parallel for schedule(static) PAR_IF((size_t)n * T * d)
    for (int b = 0; b < n; b++) {
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

/* ---------------------------------------------------------------- dropout */

/* Elementwise, so an element's bits depend on its own inputs and mask bit
 * only; the mask is a function of (key, the example's id, the element's
 * index), never of where the example sits in the call. Chunks of one
 * example's elements are spread over threads. */
static void cpu_dropout(pt_backend *be, void *y_, const void *x_, const void *add_, int n,
                        size_t per, const pt_dropout *drop)
{
    (void)be;
    real *y = y_;
    const real *x = x_, *add = add_;
    const uint32_t thr = pt_dropout_threshold(drop->p);
    const real keep = (real)(1.0 / (1.0 - drop->p));
    const size_t chunks = (per + CHUNK_ELEMS - 1) / CHUNK_ELEMS;
#pragma omp parallel for schedule(static) PAR_IF((size_t)n * per)
    for (size_t c = 0; c < (size_t)n * chunks; c++) {
        const size_t b = c / chunks, e0 = c % chunks * CHUNK_ELEMS;
        const size_t e1 = e0 + CHUNK_ELEMS < per ? e0 + CHUNK_ELEMS : per, o = b * per;
        const uint64_t row = pt_dropout_row(drop->key, drop->ids[b]);
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
}

/* ----------------------------------------------------------------- losses */

/* e = exp(z - mx) on one block of LANES: the one compiled copy, as gelu_block. */
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
static double cpu_cross_entropy(pt_backend *be, void *dlogits_, const void *logits_,
                                const int32_t *targets, int rows, int classes, double scale,
                                int64_t *correct)
{
    (void)be;
    real *dlogits = dlogits_;
    const real *logits = logits_;
    double *row_loss = CPU_FN(pt_cpu_scratch)((size_t)rows * sizeof *row_loss);
    int64_t hits = 0;
#pragma omp parallel for schedule(static) reduction(+ : hits) PAR_IF((size_t)rows * classes)
    for (int r = 0; r < rows; r++) {
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
    double total = 0;
    for (int r = 0; r < rows; r++)
        total += row_loss[r];
    free(row_loss);
    *correct += hits;
    return total;
}

/* -------------------------------------------------------------- optimizer */

static void cpu_adamw(pt_backend *be, void *p_, const void *g_, void *m_, void *v_, size_t n,
                      const pt_adamw_args *a)
{
    (void)be;
    real *p = p_, *m = m_, *v = v_;
    const real *g = g_;
    const real decay = (real)(1.0 - a->lr * a->weight_decay);
    const real b1 = (real)a->beta1, b2 = (real)a->beta2;
    const real c1 = (real)(1.0 - a->beta1), c2 = (real)(1.0 - a->beta2);
    const real step = (real)(a->lr / a->bias_corr1);
    const real bc2_sqrt = (real)sqrt(a->bias_corr2);
    const real eps = (real)a->eps, gs = (real)a->grad_scale;
#pragma omp parallel for simd schedule(static) PAR_IF(n)
    for (size_t i = 0; i < n; i++) {
        real gi = g[i] * gs;
        real mi = m[i] * b1 + c1 * gi;
        real vi = v[i] * b2 + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        real pi = p[i] * decay;
        p[i] = pi - step * (mi / (R_SQRT(vi) / bc2_sqrt + eps));
    }
}

static double cpu_sumsq(pt_backend *be, const void *x_, size_t n)
{
    (void)be;
    const real *x = x_;
    size_t chunks = (n + CHUNK_ELEMS - 1) / CHUNK_ELEMS;
    double *part = CPU_FN(pt_cpu_scratch)(chunks * sizeof *part);
#pragma omp parallel for schedule(static) PAR_IF(n)
    for (size_t c = 0; c < chunks; c++) {
        size_t i1 = (c + 1) * CHUNK_ELEMS < n ? (c + 1) * CHUNK_ELEMS : n;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (size_t i = c * CHUNK_ELEMS; i < i1; i++)
            s += (double)x[i] * (double)x[i];
        part[c] = s;
    }
    double total = 0;
    for (size_t c = 0; c < chunks; c++)
        total += part[c];
    free(part);
    return total;
}

static void cpu_scale(pt_backend *be, void *x_, size_t n, double f)
{
    (void)be;
    real *x = x_;
    const real k = (real)f;
#pragma omp parallel for simd schedule(static) PAR_IF(n)
    for (size_t i = 0; i < n; i++)
        x[i] *= k;
}

const pt_ops OPS_NAME = {
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .zero = cpu_zero,
    .copy = cpu_memcpy,
    .par_from_f32 = cpu_from_f32,
    .par_to_f32 = cpu_to_f32,
    .act_from_f32 = cpu_from_f32,
    .act_to_f32 = cpu_to_f32,
    .sync = cpu_sync,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .attention_fwd = CPU_FN(pt_cpu_attention_fwd),
    .attention_bwd = CPU_FN(pt_cpu_attention_bwd),
    .patchify = cpu_patchify,
    .vit_assemble_fwd = cpu_vit_assemble_fwd,
    .vit_assemble_bwd = cpu_vit_assemble_bwd,
    .token_embed_fwd = cpu_token_embed_fwd,
    .token_embed_bwd = cpu_token_embed_bwd,
    .copy_rows = cpu_copy_rows,
    .mean_pool_fwd = cpu_mean_pool_fwd,
    .mean_pool_bwd = cpu_mean_pool_bwd,
    .dropout = cpu_dropout,
    .cross_entropy = cpu_cross_entropy,
    .adamw = cpu_adamw,
    .sumsq = cpu_sumsq,
    .scale = cpu_scale,
};
