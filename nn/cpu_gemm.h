/*
 * cpu_gemm.h (internal to nn/): the float32 CPU backend's matrix products,
 * by kernels of our own (nn/cpu_gemm.c) rather than OpenBLAS, because
 * their arithmetic per output element is fixed by a contract and not by
 * the shape of the call. For each product:
 *
 *   forward  y = init + x w^T  (x [rows, in], w [out, in], y [rows, out]):
 *            y[r,o] = init[r,o] + acc,  acc = fma(x[r,k-1], w[o,k-1], ... fma(x[r,0], w[o,0], 0))
 *   backward dx = dy w  (dy [rows, out], w [out, in], dx [rows, in]):
 *            dx[r,i] = acc,  acc = fma(dy[r,out-1], w[out-1,i], ... fma(dy[r,0], w[0,i], 0))
 *
 * one float accumulator per element, starting at 0, one correctly rounded
 * fused multiply-add per k in ascending order (k = in and out
 * respectively), then for the forward one rounded addition (dx is the
 * accumulator itself). The forward's init is add + b (one rounded addition)
 * when both are given, add or b alone when one is, and nothing (y = acc)
 * when neither is. Since each step is correctly rounded, the bits of an
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
 * thread) for t in [0, extra), claimed ahead of the product's own tasks in
 * the first run that computes (after w's panels are packed; when w is large
 * and packed a part at a time, in the first part's run). pool is used as
 * given, however small the product. */
void pt_gemm_nn_f32_with(pt_pool *pool, float *y, const float *x, const float *w, int rows, int n,
                         int k, long extra, pt_pool_fn fn, void *ctx);

/* The instruction set the kernels were compiled for ("avx512", "avx2-fma"
 * or "portable"), for benchmarks and test logs. */
const char *pt_gemm_f32_isa(void);

#endif
