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
 *            dw[o,i] = dw[o,i] + acc,  acc = fma(dy[rows-1,o], x[rows-1,i], ... fma(dy[0,o], x[0,i], 0))
 *
 * one float accumulator per element, starting at 0, one correctly rounded
 * fused multiply-add per k in ascending order (k = in, out and rows
 * respectively; dw's chain runs over all of the rows, never split), then
 * for the forward and dw one rounded addition (dx is the accumulator
 * itself). The forward's init is add + b (one rounded addition) when both
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

/* Forward: x [rows, in], w [out, in] (PyTorch's Linear layout), b [out] or
 * NULL, add [rows, out] or NULL (may alias y), y [rows, out]. Runs on the
 * threads of pool (NULL: the caller alone); aborts with a message if its
 * packing buffer (out rounded up to the panel width, times in floats, at
 * most 8 MiB or one panel) cannot be allocated, as the backend's other
 * scratch does. */
void pt_gemm_nt_f32(pt_pool *pool, float *y, const float *x, const float *w, const float *b,
                    const float *add, int rows, int out, int in);

/* y [rows, n] = x [rows, k] w [k, n] (w k-major: row k of w is the k-th
 * term's operand), the backward's dx = dy w with n = in, k = out. Packs w
 * and runs as the forward does. */
void pt_gemm_nn_f32(pt_pool *pool, float *y, const float *x, const float *w, int rows, int n,
                    int k);

/* The same, with the caller's own tasks in the same pool run: fn(ctx, t,
 * thread) for t in [0, extra), numbered ahead of the product's own tasks in
 * the first run that computes (after w's panels are packed; when w is large
 * and packed a part at a time, in the first part's run). pool is used as
 * given, however small the product. The backward's dw tiles and db's column
 * sums run this way, beside dx's tiles. With mul [rows, n] (not NULL), y =
 * acc * mul element by element, one rounded product: the backward of a
 * layer whose input was GELU's output, dx = (dy w) * GELU'(x), in the pass
 * that writes dx (the same bits as the product followed by gelu_bwd). mul
 * may not alias y. */
void pt_gemm_nn_f32_with(pt_pool *pool, float *y, const float *x, const float *w,
                         const float *mul, int rows, int n, int k, long extra, pt_pool_fn fn,
                         void *ctx);

/* c [m, n] += a^T b, a [k, m], b [k, n]: the backward's dw += dy^T x with
 * k = rows, m = out, n = in; and, when colsum is not NULL, colsum [m] +=
 * a's column sums, the backward's db: per element one accumulator from 0,
 * an addition of a[r][o] per r in ascending order, then colsum = colsum +
 * acc (taken from the rows the product copies anyway, instead of another
 * pass over dy). Nothing is allocated. */
void pt_gemm_tn_f32(pt_pool *pool, float *c, float *colsum, const float *a, const float *b, int k,
                    int m, int n);

/* The same as tasks of a run the caller makes: pt_gemm_tn_plan fills *p
 * and returns the number of tasks (0 when there is no product: then the
 * tasks sum no colsum either, and the caller must); running
 * pt_gemm_tn_task(p, t) once for every t, on any threads in any order, is
 * pt_gemm_tn_f32. Tasks write disjoint blocks of c and depend on the shape
 * alone. The fields are the kernel's own. */
typedef struct {
    float *c, *colsum;
    const float *a, *b;
    int k, m, n;
    int mblocks, nblocks, by_b;
} pt_gemm_tn;
long pt_gemm_tn_plan(pt_gemm_tn *p, float *c, float *colsum, const float *a, const float *b, int k,
                     int m, int n);
void pt_gemm_tn_task(const pt_gemm_tn *p, long t);

/* The instruction set the kernels were compiled for ("avx512", "avx2-fma"
 * or "portable"), for benchmarks and test logs. */
const char *pt_gemm_f32_isa(void);

#endif
