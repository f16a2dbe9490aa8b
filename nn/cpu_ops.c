/*
 * cpu_ops.c: the CPU backend's ops table: our own kernels for the float32
 * linear layer's products (nn/cpu_gemm.h), OpenBLAS for the float64
 * oracle's (one single-threaded call per block of the output), loops for
 * the rest, all as tasks on the backend's thread pool (nn/cpu_pool.h, in
 * be->impl).
 * This file is compiled twice, once with
 * PT_REAL_F64 undefined (float32: the training backend, `pt_cpu_ops_f32`) and
 * once with it defined (float64: the finite-difference oracle,
 * `pt_cpu_ops_f64`); the two differ only in the typedef and the math
 * functions chosen below.
 *
 * Determinism: tasks are sized by the problem alone (cpu_real.h, per_task),
 * each writes its own part of the output, and every reduction runs over
 * fixed-size chunks whose partial sums are added in chunk order, so results
 * depend neither on the thread count nor on which thread ran which task.
 * The float32 products fix each element's arithmetic whatever the split
 * (nn/cpu_gemm.h); OpenBLAS, for the float64 oracle, runs single-threaded
 * (the backend sets it so on every thread of the pool), so no split of its
 * own enters a result either.
 *
 * Each parallel loop is a task function over a range of the loop's items
 * with the loop body as it was, and a job struct carrying the loop's
 * variables under their own names.
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
#include <sys/mman.h>

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

/* Allocations of at least HUGE_PAGE bytes (the arenas that hold a
 * segment's activations, gradients and optimizer state) start on a huge
 * page boundary, and their whole huge pages are offered to the kernel as
 * transparent huge pages: a hint, which it follows where
 * /sys/kernel/mm/transparent_hugepage/enabled says `madvise` (the usual
 * default, under which nothing gets huge pages unasked) or `always`. The
 * products read their operands' rows kilobytes apart: with 4 KiB pages a
 * row of a wide layer's activations or gradients is a page of its own, and
 * a weight gradient over a batch's rows walks thousands of pages, more than
 * the TLB holds. Wide ViT, THP `never` against `madvise` with the same
 * binary: docs/PERFORMANCE.md, "Huge pages". Where an allocation sits
 * changes no result. */
#define HUGE_PAGE ((size_t)2 << 20)

static void *cpu_alloc(pt_backend *be, size_t bytes)
{
    (void)be;
    size_t size = (bytes + 63) / 64 * 64;
    if (size == 0)
        size = 64;
    void *p = NULL;
    if (size >= HUGE_PAGE && posix_memalign(&p, HUGE_PAGE, size) == 0) {
#ifdef MADV_HUGEPAGE
        (void)madvise(p, size / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE);
#endif
    } else {
        p = aligned_alloc(64, size);
    }
    if (p)
        memset(p, 0, size);
    return p;
}

static void cpu_free(pt_backend *be, void *p)
{
    (void)be;
    free(p);
}

/* A copy or a fill in pieces of TASK_WORK floats' bytes, a task each: it
 * moves bits only, so the split changes nothing but which core moves them. */
typedef struct {
    char *dst;
    const char *src; /* NULL: zero */
    size_t bytes;
} move_job;

enum { MOVE_BYTES = TASK_WORK * sizeof(float) };

static void move_task(void *ctx, long t, int thread)
{
    (void)thread;
    const move_job *j = ctx;
    const size_t at = (size_t)t * MOVE_BYTES;
    const size_t len = j->bytes - at < MOVE_BYTES ? j->bytes - at : MOVE_BYTES;
    if (j->src)
        memcpy(j->dst + at, j->src + at, len);
    else
        memset(j->dst + at, 0, len);
}

static void move(pt_backend *be, void *dst, const void *src, size_t bytes)
{
    move_job j = {dst, src, bytes};
    pt_pool_run(PAR_POOL(be, bytes / sizeof(float)), tasks_for((long)bytes, MOVE_BYTES),
                move_task, &j);
}

static void cpu_memcpy(pt_backend *be, void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        move(be, dst, src, bytes);
}

static void cpu_zero(pt_backend *be, void *dst, size_t bytes)
{
    if (bytes)
        move(be, dst, NULL, bytes);
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

static void cpu_close(pt_backend *be)
{
    pt_pool_destroy(be->impl);
    be->impl = NULL;
}

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

static void cpu_linear_fwd(pt_backend *be, void *y_, const void *x, const void *w, const void *b_,
                           int rows, int out, int in, const void *add_)
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
static void cpu_linear_bwd_mul(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
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

static void cpu_linear_bwd(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
                           const void *x, const void *w, int rows, int out, int in)
{
    cpu_linear_bwd_mul(be, dx, dw, db, dy, x, w, rows, out, in, NULL);
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

static void cpu_linear_bwd(pt_backend *be, void *dx, void *dw, void *db, const void *dy,
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

/* -------------------------------------------------------------- layernorm */

/* Rows per group of the layernorm forward: their sums are independent
 * chains of additions and folds, run side by side so that one row's latency
 * hides another's. (The backward's row has more to do and runs alone: four
 * rows side by side were faster at d 64 but slower at d 256.) */
enum { LN_ROWS = 4 };

/* Per row: the sum of x and then of (x - mean)^2 in lanes order (cpu_lanes.h:
 * LANES partial sums, lane l adding elements l, l + LANES, ..., then
 * lanes_fold), the output by explicit fused multiply-adds, so a row's bits
 * depend on the row alone (not on the rows it shares a group or a task
 * with). A task's rows run in groups of LN_ROWS. */
typedef struct {
    real *y, *mean, *rstd;
    const real *x, *w, *b;
    int rows, dim;
    double eps;
    long per;
} ln_fwd_job;

static void ln_fwd_task(void *ctx, long t, int thread)
{
    (void)thread;
    const ln_fwd_job *j = ctx;
    real *y = j->y, *mean = j->mean, *rstd = j->rstd;
    const real *x = j->x, *w = j->w, *b = j->b;
    const int dim = j->dim;
    const double eps = j->eps;
    long t0, t1;
    task_items(t, j->per, j->rows, &t0, &t1);
    for (int r0 = (int)t0; r0 < t1; r0 += LN_ROWS) {
        const int nr = t1 - r0 < LN_ROWS ? (int)(t1 - r0) : LN_ROWS;
        const real *xr[LN_ROWS];
        real m[LN_ROWS], rs[LN_ROWS];
        for (int g = 0; g < LN_ROWS; g++)
            xr[g] = x + (size_t)(r0 + (g < nr ? g : 0)) * dim;
#ifdef PT_LANES_PAIR
        lanes_pair pa[LN_ROWS];
        for (int g = 0; g < LN_ROWS; g++)
            pa[g] = lanes_pair_zero();
        for (int i = 0; i < dim; i += LANES)
            for (int g = 0; g < LN_ROWS; g++)
                pa[g] = lanes_pair_add(pa[g], lanes_pair_at(xr[g], i, dim, 0));
        for (int g = 0; g < LN_ROWS; g++) {
            m[g] = lanes_pair_fold(pa[g]) / dim;
            pa[g] = lanes_pair_zero();
        }
        for (int i = 0; i < dim; i += LANES)
            for (int g = 0; g < LN_ROWS; g++)
                pa[g] = lanes_pair_add_sq_diff(pa[g], lanes_pair_at(xr[g], i, dim, m[g]), m[g]);
        for (int g = 0; g < LN_ROWS; g++)
            rs[g] = (real)1 / R_SQRT(lanes_pair_fold(pa[g]) / dim + (real)eps);
#else
        lanes_v acc[LN_ROWS];
        for (int g = 0; g < LN_ROWS; g++)
            acc[g] = (lanes_v){0};
        for (int i = 0; i < dim; i += LANES)
            for (int g = 0; g < LN_ROWS; g++)
                acc[g] += lanes_at(xr[g], i, dim, 0);
        for (int g = 0; g < LN_ROWS; g++) {
            m[g] = lanes_fold(acc[g]) / dim;
            acc[g] = (lanes_v){0};
        }
        for (int i = 0; i < dim; i += LANES)
            for (int g = 0; g < LN_ROWS; g++) {
                const lanes_v d = lanes_at(xr[g], i, dim, m[g]) - m[g];
                acc[g] += d * d;
            }
        for (int g = 0; g < LN_ROWS; g++)
            rs[g] = (real)1 / R_SQRT(lanes_fold(acc[g]) / dim + (real)eps);
#endif
        for (int g = 0; g < nr; g++) {
            real *yr = y + (size_t)(r0 + g) * dim;
            const real mg = m[g], rg = rs[g];
            const real *xg = xr[g];
#pragma omp simd
            for (int i = 0; i < dim; i++)
                yr[i] = R_FMA((xg[i] - mg) * rg, w[i], b[i]);
            mean[r0 + g] = mg;
            rstd[r0 + g] = rg;
        }
    }
}

static void cpu_layernorm_fwd(pt_backend *be, void *y_, void *mean_, void *rstd_, const void *x_,
                              const void *w_, const void *b_, int rows, int dim, double eps)
{
    ln_fwd_job j = {y_, mean_, rstd_, x_, w_, b_, rows, dim, eps, per_task((size_t)dim)};
    pt_pool_run(PAR_POOL(be, (size_t)rows * dim), tasks_for(rows, j.per), ln_fwd_task, &j);
}

typedef struct {
    real *dx, *part;
    const real *dy, *x, *mean, *rstd, *w, *add;
    int rows, dim;
} ln_bwd_job;

/* task t: chunk t of CHUNK_ROWS rows */
static void ln_bwd_task(void *ctx, long t, int thread)
{
    (void)thread;
    const ln_bwd_job *j = ctx;
    real *dx = j->dx, *part = j->part;
    const real *dy = j->dy, *x = j->x, *mean = j->mean, *rstd = j->rstd, *w = j->w, *add = j->add;
    const int rows = j->rows, dim = j->dim;
    for (int c = (int)t; c < t + 1; c++) {
        real *pw = part ? part + (size_t)c * 2 * dim : NULL, *pb = pw ? pw + dim : NULL;
        int r1 = (c + 1) * CHUNK_ROWS < rows ? (c + 1) * CHUNK_ROWS : rows;
        for (int r = c * CHUNK_ROWS; r < r1; r++) {
            const real *xr = x + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
            const real m = mean[r], rs = rstd[r];
            /* one pass: pw += dy * xhat and pb += dy (rows in order: the
             * chunk fixes these sums' order), and for dx = rstd * (g -
             * mean(g) - xhat * mean(g * xhat)), g = dy * w, the row's two
             * sums: LANES partial sums, then the lanes added in order (the
             * order GCC gave the omp simd reduction this replaces, so the
             * bits are the same; the layouts' tests compare runs whose
             * rounding differences grow over training, and a new order
             * moved some of them across their tolerances) */
#ifdef PT_LANES_PAIR
            /* the same operations on pairs (cpu_lanes.h), rounded as GCC
             * compiles the lanes_v loop below under -ffp-contract=fast
             * (checked bit for bit against it): acc_gx's last product fused
             * into its addition, the dw partial's product rounded before
             * its addition */
            const __m256 mv = _mm256_set1_ps(m), rsv = _mm256_set1_ps(rs);
            lanes_pair acc_g = lanes_pair_zero(), acc_gx = lanes_pair_zero();
            for (int i = 0; i < dim; i += LANES) {
                const lanes_pair dyv = lanes_pair_at(dyr, i, dim, 0), xv = lanes_pair_at(xr, i, dim, m);
                const lanes_pair xm = {_mm256_sub_ps(xv.lo, mv), _mm256_sub_ps(xv.hi, mv)};
                if (pw) {
                    const lanes_pair pwv = lanes_pair_at(pw, i, dim, 0);
                    lanes_pair_put(pw, i, dim,
                                   lanes_pair_add(pwv, lanes_pair_rounded_mul(
                                                           dyv, (lanes_pair){_mm256_mul_ps(xm.lo, rsv),
                                                                             _mm256_mul_ps(xm.hi, rsv)})));
                    lanes_pair_put(pb, i, dim, lanes_pair_add(lanes_pair_at(pb, i, dim, 0), dyv));
                }
                const lanes_pair wv = lanes_pair_at(w, i, dim, 0);
                const lanes_pair gv = {_mm256_mul_ps(dyv.lo, wv.lo), _mm256_mul_ps(dyv.hi, wv.hi)};
                acc_g = lanes_pair_add(acc_g, gv);
                acc_gx = (lanes_pair){_mm256_fmadd_ps(_mm256_mul_ps(gv.lo, xm.lo), rsv, acc_gx.lo),
                                      _mm256_fmadd_ps(_mm256_mul_ps(gv.hi, xm.hi), rsv, acc_gx.hi)};
            }
            if (!dx)
                continue;
            const real sg = lanes_pair_sum_in_order(acc_g) / dim,
                       sgx = lanes_pair_sum_in_order(acc_gx) / dim;
#else
            lanes_v acc_g = {0}, acc_gx = {0};
            for (int i = 0; i < dim; i += LANES) {
                const lanes_v dyv = lanes_at(dyr, i, dim, 0), xv = lanes_at(xr, i, dim, m);
                if (pw) {
                    const lanes_v xhat = (xv - m) * rs;
                    lanes_put(pw, i, dim, lanes_at(pw, i, dim, 0) + dyv * xhat);
                    lanes_put(pb, i, dim, lanes_at(pb, i, dim, 0) + dyv);
                }
                const lanes_v gv = dyv * lanes_at(w, i, dim, 0);
                acc_g += gv;
                acc_gx += gv * (xv - m) * rs;
            }
            if (!dx)
                continue;
            const real sg = lanes_sum_in_order(acc_g) / dim, sgx = lanes_sum_in_order(acc_gx) / dim;
#endif
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
}

static void cpu_layernorm_bwd(pt_backend *be, void *dx_, void *dw_, void *db_, const void *dy_,
                              const void *x_, const void *mean_, const void *rstd_,
                              const void *w_, int rows, int dim, const void *add_)
{
    real *dx = dx_, *dw = dw_, *db = db_;
    int chunks = (rows + CHUNK_ROWS - 1) / CHUNK_ROWS;
    real *part = (dw || db) ? CPU_FN(pt_cpu_scratch)((size_t)chunks * 2 * dim * sizeof *part) : NULL;
    ln_bwd_job j = {dx, part, dy_, x_, mean_, rstd_, w_, add_, rows, dim};
    pt_pool_run(PAR_POOL(be, (size_t)rows * dim), chunks, ln_bwd_task, &j);
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

static void cpu_gelu_fwd(pt_backend *be, void *y_, void *dydx_, const void *x_, size_t n)
{
    const size_t blocks = (n + GELU_BLOCK - 1) / GELU_BLOCK;
    elem_job j = {y_, dydx_, x_, NULL, n, per_task(GELU_BLOCK)};
    pt_pool_run(PAR_POOL(be, n), tasks_for((long)blocks, j.per), gelu_fwd_task, &j);
}

static void cpu_gelu_bwd(pt_backend *be, void *dx_, const void *dy_, const void *dydx_, size_t n)
{
    const size_t blocks = (n + GELU_BLOCK - 1) / GELU_BLOCK;
    elem_job j = {dx_, NULL, dydx_, dy_, n, per_task(GELU_BLOCK)};
    pt_pool_run(PAR_POOL(be, n), tasks_for((long)blocks, j.per), gelu_bwd_task, &j);
}

/* -------------------------------------------------------------- embedding */

/* The embedding ops' jobs: their arguments under their own names; tasks of
 * `per` examples (or rows, or token positions). */
typedef struct {
    real *patches;
    const real *images;
    int n, C, H, W, p;
    long per;
} patchify_job;

static void patchify_task(void *ctx, long t, int thread)
{
    (void)thread;
    const patchify_job *j = ctx;
    real *patches = j->patches;
    const real *images = j->images;
    const int C = j->C, H = j->H, W = j->W, p = j->p;
    const int gh = H / p, gw = W / p, plen = C * p * p;
    long b0, b1;
    task_items(t, j->per, j->n, &b0, &b1);
    for (int b = (int)b0; b < b1; b++)
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

static void cpu_patchify(pt_backend *be, void *patches_, const void *images_, int n, int C, int H,
                         int W, int p)
{
    patchify_job j = {patches_, images_, n, C, H, W, p, per_task((size_t)C * H * W)};
    pt_pool_run(PAR_POOL(be, (size_t)n * C * H * W), tasks_for(n, j.per), patchify_task, &j);
}

typedef struct {
    real *x, *dproj, *dcls, *dpos;
    const real *proj, *cls, *pos, *dx;
    const int32_t *tokens;
    int n, T, d;
    long per;
} embed_job;

static void vit_assemble_fwd_task(void *ctx, long t_, int thread)
{
    (void)thread;
    const embed_job *j = ctx;
    real *x = j->x;
    const real *proj = j->proj, *cls = j->cls, *pos = j->pos;
    const int T = j->T, d = j->d;
    long b0, b1;
    task_items(t_, j->per, j->n, &b0, &b1);
    for (int b = (int)b0; b < b1; b++) {
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

static void cpu_vit_assemble_fwd(pt_backend *be, void *x_, const void *proj_, const void *cls_,
                                 const void *pos_, int n, int T, int d)
{
    embed_job j = {.x = x_, .proj = proj_, .cls = cls_, .pos = pos_, .n = n, .T = T, .d = d,
                   .per = per_task((size_t)T * d)};
    pt_pool_run(PAR_POOL(be, (size_t)n * T * d), tasks_for(n, j.per), vit_assemble_fwd_task, &j);
}

/* Each task owns token positions t and sums over examples in order. */
static void vit_assemble_bwd_task(void *ctx, long t_, int thread)
{
    (void)thread;
    const embed_job *j = ctx;
    real *dproj = j->dproj, *dcls = j->dcls, *dpos = j->dpos;
    const real *dx = j->dx;
    const int n = j->n, T = j->T, d = j->d;
    long t0, t1;
    task_items(t_, j->per, T, &t0, &t1);
    for (int t = (int)t0; t < t1; t++) {
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

static void cpu_vit_assemble_bwd(pt_backend *be, void *dproj_, void *dcls_, void *dpos_,
                                 const void *dx_, int n, int T, int d)
{
    embed_job j = {.dproj = dproj_, .dcls = dcls_, .dpos = dpos_, .dx = dx_, .n = n, .T = T,
                   .d = d, .per = per_task((size_t)n * d)};
    pt_pool_run(PAR_POOL(be, (size_t)n * T * d), tasks_for(T, j.per), vit_assemble_bwd_task, &j);
}

/* wte and wpe travel as proj and pos */
static void token_embed_fwd_task(void *ctx, long t, int thread)
{
    (void)thread;
    const embed_job *j = ctx;
    real *x = j->x;
    const real *wte = j->proj, *wpe = j->pos;
    const int32_t *tokens = j->tokens;
    const int T = j->T, d = j->d;
    long r0, r1;
    task_items(t, j->per, (long)j->n * T, &r0, &r1);
    for (int r = (int)r0; r < r1; r++) {
        const real *e = wte + (size_t)tokens[r] * d, *p = wpe + (size_t)(r % T) * d;
        real *xr = x + (size_t)r * d;
#pragma omp simd
        for (int c = 0; c < d; c++)
            xr[c] = e[c] + p[c];
    }
}

static void cpu_token_embed_fwd(pt_backend *be, void *x_, const int32_t *tokens, const void *wte_,
                                const void *wpe_, int n, int T, int d)
{
    embed_job j = {.x = x_, .proj = wte_, .pos = wpe_, .tokens = tokens, .n = n, .T = T, .d = d,
                   .per = per_task((size_t)d)};
    pt_pool_run(PAR_POOL(be, (size_t)n * T * d), tasks_for((long)n * T, j.per),
                token_embed_fwd_task, &j);
}

/* dwpe travels as dpos */
static void token_embed_bwd_task(void *ctx, long t_, int thread)
{
    (void)thread;
    const embed_job *j = ctx;
    real *dwpe = j->dpos;
    const real *dx = j->dx;
    const int n = j->n, T = j->T, d = j->d;
    long t0, t1;
    task_items(t_, j->per, T, &t0, &t1);
    for (int t = (int)t0; t < t1; t++) {
        real *p = dwpe + (size_t)t * d;
        for (int b = 0; b < n; b++) {
            const real *g = dx + ((size_t)b * T + t) * d;
#pragma omp simd
            for (int c = 0; c < d; c++)
                p[c] += g[c];
        }
    }
}

static void cpu_token_embed_bwd(pt_backend *be, void *dwte_, void *dwpe_, const void *dx_,
                                const int32_t *tokens, int n, int T, int d)
{
    real *dwte = dwte_;
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
    embed_job j = {.dpos = dwpe_, .dx = dx_, .n = n, .T = T, .d = d, .per = per_task((size_t)n * d)};
    pt_pool_run(PAR_POOL(be, (size_t)n * T * d), tasks_for(T, j.per), token_embed_bwd_task, &j);
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

static void cpu_mean_pool_fwd(pt_backend *be, void *y_, const void *x_, const int32_t *lens,
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

static void cpu_mean_pool_bwd(pt_backend *be, void *dx_, const void *dy_, const int32_t *lens,
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

static void cpu_dropout(pt_backend *be, void *y_, const void *x_, const void *add_, int n,
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

static double cpu_cross_entropy(pt_backend *be, void *dlogits_, const void *logits_,
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

static void cpu_adamw(pt_backend *be, void *p_, const void *g_, void *m_, void *v_, size_t n,
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

static double cpu_sumsq(pt_backend *be, const void *x_, size_t n)
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

static void cpu_scale(pt_backend *be, void *x_, size_t n, double f)
{
    vec_job j = {x_, NULL, NULL, n, f};
    pt_pool_run(PAR_POOL(be, n), tasks_for((long)n, TASK_WORK), scale_task, &j);
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
    .close = cpu_close,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .attention_fwd = CPU_FN(pt_cpu_attention_fwd),
    .attention_bwd = CPU_FN(pt_cpu_attention_bwd),
#ifndef PT_REAL_F64
    .linear_bwd_mul = cpu_linear_bwd_mul, /* the float64 oracle composes it (nn/backend.h) */
#endif
    .attention_first_fwd = CPU_FN(pt_cpu_attention_first_fwd),
    .attention_first_bwd = CPU_FN(pt_cpu_attention_first_bwd),
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
