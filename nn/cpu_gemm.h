/*
 * cpu_gemm.h (internal to nn/): the float32 CPU backend's matrix products,
 * by kernels of our own (nn/cpu_gemm.c, nn/cpu_gemm_tn.c) rather than
 * OpenBLAS, because their arithmetic per output element is fixed by a
 * contract and not by the shape of the call. For each product:
 *
 *   forward  y = init + x w^T  (x [rows, in], w [out, in], y [rows, out]):
 *            y[r,o] = init[r,o] + acc,  acc = fma(x[r,k-1], w[o,k-1], ... fma(x[r,0], w[o,0], 0))
 *   backward dx = dy w  (dy [rows, out], w [out, in], dx [rows, in]):
 *            dx[r,i] = acc,  acc = fma(dy[r,out-1], w[out-1,i], ... fma(dy[r,0], w[0,i], 0))
 *            (or dx[r,i] = acc * mul[r,i], one rounded product, when a mul is given)
 *   backward dw += dy^T x  (dy [rows, out], x [rows, in], dw [out, in]):
 *            dw[o,i] = dw[o,i] + ((acc_0 + acc_1) + ... + acc_{C-1}),
 *            acc_c = fma(dy[e_c-1,o], x[e_c-1,i], ... fma(dy[s_c,o], x[s_c,i], 0))
 *            over the rows [s_c, e_c) of chunk c of C (pt_gemm_tn_chunks below)
 *
 * one float accumulator per element (per chunk of rows for dw), starting at
 * 0, one correctly rounded fused multiply-add per k in ascending order (k =
 * in, out and rows respectively), then for the forward one rounded addition
 * and for dw the chunks' accumulators added in chunk order and the sum
 * added to dw, one rounded addition each (dx is the accumulator itself).
 * The chunks are a function of the shape alone; they let each thread sum
 * the rows it computed in the step before (a thread's tasks are a
 * contiguous run: nn/cpu_pool.h), instead of one task reading every row of
 * dy and x, half of them from another core's cache. The forward's init is add + b (one rounded addition) when both
 * are given, add or b alone when one is, and nothing (y = acc) when neither
 * is. Since each step is correctly rounded, the bits of an
 * element depend only on the operands the formula names: not on which other
 * rows share the call, not on the thread count, the tile the element falls
 * in or the instruction set the kernel was built for. The activation cache
 * relies on that for the forward (docs/ARCHITECTURE.md, "Freezing and the
 * cache"); for the backward it makes the gradients independent of the
 * threads and of how the output is cut into tasks.
 */
#ifndef PT_NN_CPU_GEMM_H
#define PT_NN_CPU_GEMM_H

#include "nn/cpu_pool.h"

#include <stddef.h>

/* Forward: x [rows, in], w [out, in] (PyTorch's Linear layout), b [out] or
 * NULL, add [rows, out] or NULL (may alias y), y [rows, out]. Runs on the
 * threads of pool (NULL: the caller alone); aborts with a message if its
 * packing buffer (out rounded up to the panel width, times in floats, at
 * most 8 MiB or one panel) cannot be allocated, as the backend's other
 * scratch does. */
void pt_gemm_nt_f32(pt_pool *pool, float *y, const float *x, const float *w, const float *b,
                    const float *add, int rows, int out, int in);

/* The packing area a product with out x in weights needs: out rounded up
 * to the panel width, times in floats, at most 8 MiB or one panel (and a
 * 64-byte multiple). The calling thread's area is kept between calls at
 * the largest size any call needed (pt_pool_area). */
size_t pt_gemm_pack_bytes(int out, int in);

/* y [rows, n] = x [rows, k] w [k, n] (w k-major: row k of w is the k-th
 * term's operand), the backward's dx = dy w with n = in, k = out. Packs w
 * and runs as the forward does. */
void pt_gemm_nn_f32(pt_pool *pool, float *y, const float *x, const float *w, int rows, int n,
                    int k);

/* The same, with the caller's own tasks in the same pool run: fn(ctx, t,
 * thread) for t in [0, extra), in the first run that computes (after w's
 * panels are packed; when w is large and packed a part at a time, in the
 * first part's run). They are extra_groups groups (1 or less: one group;
 * group e is the tasks [extra e / G, extra (e + 1) / G) of G groups), in
 * order, group e numbered just ahead of the product's tasks of its e-th
 * share of the rows: tasks of the caller that belong to rows (the
 * backward's dw partial sums over a chunk of rows, pt_gemm_tn_plan) then
 * tend to run on the thread that computes the same rows of y (a thread
 * first takes a contiguous run of the tasks: nn/cpu_pool.h). pool is used as given, however small the product. With mul
 * [rows, n] (not NULL), y = acc * mul element by element, one rounded
 * product: the backward of a layer whose input was GELU's output, dx = (dy
 * w) * GELU'(x), in the pass that writes dx (the same bits as the product
 * followed by gelu_bwd). mul may not alias y. */
void pt_gemm_nn_f32_with(pt_pool *pool, float *y, const float *x, const float *w,
                         const float *mul, int rows, int n, int k, long extra, int extra_groups,
                         pt_pool_fn fn, void *ctx);

/* dw's chunks of rows: C = min(8, k / 256, 2^20 / (m n)), at least 1 (k =
 * rows, m = out, n = in; m n counts as 1 when n is 0); chunk c is the rows
 * [k c / C, k (c + 1) / C) (integer division). At most 2^20 floats of
 * dw's partial sums (with C m of the column sums' beside them), and chunks
 * of at least 256 rows. */
static inline int pt_gemm_tn_chunks(int k, int m, int n)
{
    long long size = (long long)m * n, c = 8;
    if (size < 1)
        size = 1;
    if (k / 256 < c)
        c = k / 256;
    if ((1LL << 20) / size < c)
        c = (1LL << 20) / size;
    return c < 1 ? 1 : (int)c;
}

/* c [m, n] += a^T b, a [k, m], b [k, n]: the backward's dw += dy^T x with
 * k = rows, m = out, n = in; and, when colsum is not NULL, colsum [m] +=
 * a's column sums, the backward's db: per element and chunk of rows (as
 * dw's) one accumulator from 0, an addition of a[r][o] per r in ascending
 * order, the chunks' accumulators added in chunk order, then colsum =
 * colsum + that sum (taken from the rows the product copies anyway,
 * instead of another pass over dy). With more than one chunk, the partial
 * sums are in the calling thread's area (pt_pool_area; aborting with a
 * message if it cannot grow). */
void pt_gemm_tn_f32(pt_pool *pool, float *c, float *colsum, const float *a, const float *b, int k,
                    int m, int n);

/* The partial sums (and column sums) pt_gemm_tn_plan uses for a product of
 * k rows, m x n: none with one chunk; kept per thread as the packing area
 * is (pt_pool_area). */
static inline size_t pt_gemm_tn_part_bytes(int k, int m, int n)
{
    const int chunks = pt_gemm_tn_chunks(k, m, n);
    if (chunks < 2)
        return 0;
    return ((size_t)chunks * ((size_t)m * (size_t)n + (size_t)m) * sizeof(float) + 63) / 64 * 64;
}

/* The same as tasks of runs the caller makes: pt_gemm_tn_plan fills *p
 * (allocating the partial sums when there is more than one chunk) and
 * returns the number of tasks (0 when there is no product: then the tasks
 * sum no colsum either, and the caller must); running pt_gemm_tn_task(p, t)
 * once for every t, on any threads in any order, then (after all of them)
 * pt_gemm_tn_reduce_task(p, t) once for every t below
 * pt_gemm_tn_reduce_tasks(p) (0 with one chunk), then pt_gemm_tn_done(p),
 * is pt_gemm_tn_f32. Tasks are numbered chunk by chunk (a thread's
 * contiguous run of them sums a contiguous run of rows), write disjoint
 * blocks of c or of the partial sums and depend on the shape alone. The
 * fields are the kernel's own. */
typedef struct {
    float *c, *colsum;
    const float *a, *b;
    int k, m, n;
    int mblocks, nblocks, by_b;
    int chunks;
    float *part; /* chunks x [m, n] partial sums, then chunks x [m] column sums */
} pt_gemm_tn;
long pt_gemm_tn_plan(pt_gemm_tn *p, float *c, float *colsum, const float *a, const float *b, int k,
                     int m, int n);
void pt_gemm_tn_task(const pt_gemm_tn *p, long t);
long pt_gemm_tn_reduce_tasks(const pt_gemm_tn *p);
void pt_gemm_tn_reduce_task(const pt_gemm_tn *p, long t);
void pt_gemm_tn_done(pt_gemm_tn *p);

/* The instruction set the kernels were compiled for ("avx512", "avx2-fma"
 * or "portable"), for benchmarks and test logs. */
const char *pt_gemm_f32_isa(void);

#endif
