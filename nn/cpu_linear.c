/*
 * cpu_linear.c: the CPU backend's linear layer, forward and backward: our
 * own kernels for the float32 products (nn/cpu_gemm.h), OpenBLAS for the
 * float64 oracle's (one single-threaded call per block of the output), and
 * the bias gradient's column sums. Compiled twice, as every CPU backend
 * file is (nn/cpu_real.h); the ops table and the determinism rules all of
 * them follow are in nn/cpu_ops.c.
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

/* ----------------------------------------------------------------- linear */

/* The float32 forward is our own kernel (nn/cpu_gemm.h), not sgemm: its
 * rounding per element is fixed, so a row's output does not depend on the
 * rows that share the call, which the activation cache relies on. OpenBLAS
 * picks kernels, edge paths and thread splits by the number of rows, so its
 * bits for a row change with the batch. The float64 oracle has no such duty
 * and keeps dgemm; its y starts as add + b and the product accumulates
 * onto it (beta = 1), the same grouping as the float32 kernel's. */
#ifdef PT_REAL_F64
typedef struct {
    real *y;
    const real *b, *add;
    int rows, out;
    long per;
} init_job;

static void init_task(void *ctx, long t, int thread)
{
    (void)thread;
    const init_job *j = ctx;
    real *y = j->y;
    const real *b = j->b, *add = j->add;
    const int out = j->out;
    long r0, r1;
    task_items(t, j->per, j->rows, &r0, &r1);
    for (int r = (int)r0; r < r1; r++)
        for (int o = 0; o < out; o++) {
            const size_t i = (size_t)r * out + o;
            y[i] = add && b ? add[i] + b[o] : add ? add[i] : b[o];
        }
}
#endif

void CPU_FN(pt_cpu_linear_fwd)(pt_backend *be, void *y_, const void *x, const void *w,
                               const void *b_, int rows, int out, int in, const void *add_)
{
#ifdef PT_REAL_F64
    real *y = y_;
    const real *b = b_, *add = add_;
    if (b || (add && add != y)) {
        init_job j = {y, b, add, rows, out, per_task((size_t)out)};
        pt_pool_run(PAR_POOL(be, (size_t)rows * out), tasks_for(rows, j.per), init_task, &j);
    }
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0, x, in, w, in,
         add || b ? 1.0 : 0.0, y, out);
#else
    pt_gemm_nt_f32(be->impl, y_, x, w, b_, add_, rows, out, in);
#endif
}

/* Columns of db per task of column sums. */
enum { STRIPE = 16 };

/* db[o] += sum over rows of dy[r, o] for the columns of stripe s, over
 * `chunks` chunks of the rows (dw's, nn/cpu_gemm.h; the float64 oracle
 * uses one): per chunk a chain from 0, the chunks added in order, then db
 * = db + that sum. A task owns a stripe of columns and walks every row, so
 * the summation order is fixed. */
static void column_sums(real *db, const real *dy, int rows, int cols, int chunks, int s)
{
    int c0 = s * STRIPE, c1 = c0 + STRIPE < cols ? c0 + STRIPE : cols;
    real sum[STRIPE] = {0};
    for (int ch = 0; ch < chunks; ch++) {
        real acc[STRIPE] = {0};
        const int r1 = (int)((long long)rows * (ch + 1) / chunks);
        for (int r = (int)((long long)rows * ch / chunks); r < r1; r++) {
            const real *row = dy + (size_t)r * cols;
#pragma omp simd
            for (int c = c0; c < c1; c++)
                acc[c - c0] += row[c];
        }
        for (int c = c0; c < c1; c++)
            sum[c - c0] = ch ? sum[c - c0] + acc[c - c0] : acc[c - c0];
    }
    for (int c = c0; c < c1; c++)
        db[c] += sum[c - c0];
}

#ifndef PT_REAL_F64
void CPU_FN(pt_cpu_linear_work_bytes)(const pt_backend *be, int rows, int out, int in,
                                      size_t *pack, size_t *parts)
{
    (void)be;
    /* forward packs w [out, in]; the backward's dx packs it read k-major,
     * as a product with `in` outputs of `out` terms */
    const size_t fwd = pt_gemm_pack_bytes(out, in), bwd = pt_gemm_pack_bytes(in, out);
    *pack = fwd > bwd ? fwd : bwd;
    *parts = pt_gemm_tn_part_bytes(rows, out, in);
}

void CPU_FN(pt_cpu_release_work)(pt_backend *be)
{
    (void)be;
    pt_pool_release_areas();
}

/* The float32 backward's products are our own kernels (nn/cpu_gemm.h),
 * with the arithmetic of each element fixed as the forward's is: dw +=
 * dy^T x one fused chain per element over each of a few chunks of the
 * rows, the chunks' sums added in order (nn/cpu_gemm_tn.c), and db the same
 * over the same chunks with additions, by the same tasks from the rows of
 * dy they copy; dx = dy w the forward's kernel with w read k-major
 * (nn/cpu_gemm.c). Two pool runs (after dx's panels of w are packed, in
 * a short run of their own unless each panel is one task that packs and
 * uses it): first dx's (row chunk, panel) tiles together with dw's (chunk
 * of rows, block of the output) partial sums, each chunk's dw tasks just
 * ahead of dx's tiles of about the same rows (or db's stripes of columns
 * when no dw task carries them); then the partial sums added into dw and
 * db, rows of dw per task. The first run's tasks are numbered by rows, so
 * a thread's contiguous run of them (nn/cpu_pool.h) covers about the same
 * rows as in the ops before and after: a thread reads back what its own
 * core wrote. With one task summing every row of dy and x (most of dw's
 * shapes on the demo ViT are one block), half of them came from the other core's
 * cache (a line of it takes 50-90 ns to come when the two vCPUs share an
 * L3, 300-370 ns when they do not: bench/core_pingpong; the demo at two
 * threads runs 2-4% faster this way, README "Why quiet runs differ"). Tasks
 * depend on the shape alone and each element (or partial sum) is computed
 * by one task, so the bits do not depend on the thread count. */
typedef struct {
    real *db;
    const real *dy;
    int rows, out, chunks;
    long dw_tasks;
    pt_gemm_tn dw;
} bwd_job;

/* The caller's tasks in dx's run (or a run of their own without dx): dw's
 * partial sums, or db's stripes. */
static void linear_bwd_task(void *ctx, long t, int thread)
{
    (void)thread;
    const bwd_job *j = ctx;
    if (t < j->dw_tasks)
        pt_gemm_tn_task(&j->dw, t);
    else
        column_sums(j->db, j->dy, j->rows, j->out, j->chunks, (int)(t - j->dw_tasks));
}

static void linear_bwd_reduce(void *ctx, long t, int thread)
{
    (void)thread;
    pt_gemm_tn_reduce_task(ctx, t);
}

/* linear_bwd_mul: the same bits as cpu_linear_bwd and then cpu_gelu_bwd
 * (dx = dx * mul, one rounded product per element), without the second
 * pass over dx; mul NULL: linear_bwd itself */
void CPU_FN(pt_cpu_linear_bwd_mul)(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                                   const void *x, const void *w, int rows, int out, int in,
                                   const void *mul)
{
    bwd_job j = {db, dy, rows, out, pt_gemm_tn_chunks(rows, out, in), 0, {0}};
    /* db comes with dw's tasks (the same sums, from the rows they copy) */
    if (dw)
        j.dw_tasks = pt_gemm_tn_plan(&j.dw, dw, db, dy, x, rows, out, in);
    const int stripes = db && !j.dw_tasks && rows > 0 ? (out + STRIPE - 1) / STRIPE : 0;
    /* small products run on the caller: the same tasks */
    const double work = (double)rows * out * (in > 0 ? in : 1);
    pt_pool *pool = work > (1 << 17) ? be->impl : NULL;
    /* dw's tasks of each chunk of rows in the run of dx's, ahead of dx's
     * tiles of about the same rows */
    if (dx)
        pt_gemm_nn_f32_with(pool, dx, dy, w, mul, rows, in, out, j.dw_tasks + stripes,
                            j.dw_tasks ? j.dw.chunks : 1, linear_bwd_task, &j);
    else
        pt_pool_run(pool, j.dw_tasks + stripes, linear_bwd_task, &j);
    pt_pool_run(pool, pt_gemm_tn_reduce_tasks(&j.dw), linear_bwd_reduce, &j.dw);
    pt_gemm_tn_done(&j.dw);
}

void CPU_FN(pt_cpu_linear_bwd)(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                               const void *x, const void *w, int rows, int out, int in)
{
    CPU_FN(pt_cpu_linear_bwd_mul)(be, dx, dw, db, dy, x, w, rows, out, in, NULL);
}

#else
/* The float64 oracle's backward products: single-threaded BLAS calls on
 * blocks of their outputs, all tasks of one run (with db's stripes of
 * columns), the dw blocks first (the largest tasks):
 *  - dw in blocks of at most DW_BLOCK along its longer side, rows (out) or
 *    columns (in), each block the whole sum over the batch's rows. Each call
 *    packs all of the operand the blocks share (x, or dy), so blocks are
 *    wide and few;
 *  - dx in blocks of rows of about DX_BLOCK_FMAS multiply-adds (at least
 *    DX_MIN_ROWS), whose shared operand, w, is small.
 * (The float32 backend ran its backward this way, on sgemm, before it had
 * kernels of its own.) Block bounds depend on the shape alone, and each
 * element is computed by one call, whichever thread makes it: the bits do
 * not depend on the thread count. */
enum { DW_BLOCK = 256, DX_BLOCK_FMAS = 1 << 23, DX_MIN_ROWS = 64, BWD_ALIGN = 16 };

typedef struct {
    real *dx, *dw, *db;
    const real *dy, *x, *w;
    int rows, out, in;
    int dw_by_rows, dw_width, dw_tasks, dx_rows, dx_tasks;
} bwd_job;

/* n split into blocks of at most about `most`, equal but for the last, a
 * multiple of BWD_ALIGN wide: the width. */
static int block_width(int n, int most)
{
    const int blocks = (n + most - 1) / most;
    const int w = ((n + blocks - 1) / blocks + BWD_ALIGN - 1) / BWD_ALIGN * BWD_ALIGN;
    return w < n ? w : n;
}

static void linear_bwd_task(void *ctx, long t, int thread)
{
    (void)thread;
    const bwd_job *j = ctx;
    const int rows = j->rows, out = j->out, in = j->in;
    if (t < j->dw_tasks && j->dw_by_rows) {
        const int o0 = (int)t * j->dw_width, m = out - o0 < j->dw_width ? out - o0 : j->dw_width;
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, m, in, rows, 1.0, j->dy + o0, out, j->x, in,
             1.0, j->dw + (size_t)o0 * in, in);
        return;
    }
    if (t < j->dw_tasks) {
        const int i0 = (int)t * j->dw_width, n = in - i0 < j->dw_width ? in - i0 : j->dw_width;
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, out, n, rows, 1.0, j->dy, out, j->x + i0, in,
             1.0, j->dw + i0, in);
        return;
    }
    t -= j->dw_tasks;
    if (t < j->dx_tasks) {
        const int r0 = (int)t * j->dx_rows, m = rows - r0 < j->dx_rows ? rows - r0 : j->dx_rows;
        GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, in, out, 1.0, j->dy + (size_t)r0 * out,
             out, j->w, in, 0.0, j->dx + (size_t)r0 * in, in);
        return;
    }
    column_sums(j->db, j->dy, rows, out, 1, (int)(t - j->dx_tasks));
}

void CPU_FN(pt_cpu_linear_bwd)(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                               const void *x, const void *w, int rows, int out, int in)
{
    bwd_job j = {dx, dw, db, dy, x, w, rows, out, in, 0, 0, 0, 0, 0};
    if (dw && out > 0 && in > 0) {
        j.dw_by_rows = out >= in;
        const int n = j.dw_by_rows ? out : in;
        j.dw_width = block_width(n, DW_BLOCK);
        j.dw_tasks = (n + j.dw_width - 1) / j.dw_width;
    }
    if (dx && rows > 0 && in > 0) {
        const double per = out > 0 ? (double)DX_BLOCK_FMAS / ((double)out * in) : rows;
        j.dx_rows = block_width(rows, per < DX_MIN_ROWS ? DX_MIN_ROWS : per > rows ? rows : (int)per);
        j.dx_tasks = (rows + j.dx_rows - 1) / j.dx_rows;
    }
    const int stripes = db && rows > 0 ? (out + STRIPE - 1) / STRIPE : 0;
    /* small products run on the caller: the same calls */
    const double work = (double)rows * out * (in > 0 ? in : 1);
    pt_pool_run(work > (1 << 17) ? be->impl : NULL, (long)j.dw_tasks + j.dx_tasks + stripes,
                linear_bwd_task, &j);
}
#endif
