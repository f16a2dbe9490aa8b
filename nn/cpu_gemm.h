/*
 * cpu_gemm.h (internal to nn/): the float32 CPU backend's forward linear,
 * y = init + x w^T, by a kernel of our own (nn/cpu_gemm.c) rather than
 * OpenBLAS, because its arithmetic per output element is fixed by this
 * contract and not by the shape of the call:
 *
 *   y[r,o] = init[r,o] + acc,  acc = fma(x[r,k-1], w[o,k-1], ... fma(x[r,0], w[o,0], 0))
 *
 * one float accumulator per element, starting at 0, one correctly rounded
 * fused multiply-add per k in ascending order, then one rounded addition of
 * init. init is add + b (one rounded addition) when both are given, add or b
 * alone when one is, and nothing (y = acc) when neither is. Since each step
 * is correctly rounded, the bits of y[r,o] depend only on row r of x, row o
 * of w, b[o] and add[r,o]: not on rows, not on which other rows share the
 * call, not on the thread count or the instruction set the kernel was built
 * for. The activation cache relies on that (docs/ARCHITECTURE.md, "Freezing
 * and the cache").
 */
#ifndef PT_NN_CPU_GEMM_H
#define PT_NN_CPU_GEMM_H

#include "nn/cpu_pool.h"

/* x [rows, in], w [out, in] (PyTorch's Linear layout), b [out] or NULL,
 * add [rows, out] or NULL (may alias y), y [rows, out]. Runs on the threads
 * of pool (NULL: the caller alone); aborts with a message if its packing
 * buffer (out rounded up to the panel width, times in floats, at most 8 MiB
 * or one panel) cannot be allocated, as the backend's other scratch does. */
void pt_gemm_nt_f32(pt_pool *pool, float *y, const float *x, const float *w, const float *b,
                    const float *add, int rows, int out, int in);

/* The instruction set the kernels were compiled for ("avx512", "avx2-fma"
 * or "portable"), for benchmarks and test logs. */
const char *pt_gemm_f32_isa(void);

#endif
