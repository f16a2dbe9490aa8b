/*
 * cpu_lanes.h (internal to nn/, included by cpu_ops.c after cpu_real.h):
 * the fixed-order pieces the CPU backend's forward ops are built from, so
 * that a row (or an element) gets the same bits wherever it sits in a batch
 * and whatever thread computes it. The activation cache depends on that.
 *
 * Left to itself the compiler may vectorise a reduction with `omp simd` in
 * an order that depends on where the row starts in memory (it peels
 * iterations until the loads are aligned), and an elementwise loop may run
 * some elements through a scalar peel or remainder and the rest through the
 * vector body, split differently for every batch size and thread count.
 * Here neither can happen by construction:
 *
 *  - a row sum keeps LANES partial sums in an explicit vector, lane l adding
 *    v[l], v[l + LANES], ... in turn (without `omp simd reduction` or
 *    -ffast-math the compiler may not reorder it), then adds the lanes in a
 *    fixed tree; the order depends on the row's length only;
 *  - an elementwise function of several operations runs through exactly one
 *    compiled copy (a noinline function over one aligned block of a fixed
 *    length), so every element meets the same instructions; the last,
 *    partial block is copied in and out of a padded block. Or it is written
 *    on explicit vectors (lanes_at and lanes_put, as GELU's float32 build
 *    is), which leaves the compiler no scalar path to choose.
 *
 * Elementwise multiply-adds that may run in either a vector body or a scalar
 * remainder are written with R_FMA, not left to contraction.
 */
#ifndef PT_NN_CPU_LANES_H
#define PT_NN_CPU_LANES_H

#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

enum { LANES = 16 }; /* lanes_fold's shuffles are written for 16 */
#define BLOCK_ALIGNED __attribute__((aligned(64)))

/* LANES elements in one (or, for double, two) vector registers, and the
 * same for unaligned loads through any pointer. */
typedef real lanes_v __attribute__((vector_size(LANES * sizeof(real))));
typedef real lanes_vu __attribute__((vector_size(LANES * sizeof(real)), aligned(sizeof(real)),
                                     may_alias));
#ifdef PT_REAL_F64
typedef int64_t lanes_int;
#else
typedef int32_t lanes_int;
#endif
typedef lanes_int lanes_iv __attribute__((vector_size(LANES * sizeof(real))));

/* v[i .. i + LANES), pad past n: the last block of a row goes through the
 * same loop body as the others. */
static inline __attribute__((always_inline)) lanes_v lanes_at(const real *v, int i, int n, real pad)
{
    if (i + LANES <= n)
        return *(const lanes_vu *)(v + i);
#if defined(__AVX512F__) && !defined(PT_REAL_F64)
    /* a masked load: the generic loop below compiles to scalar stores that
     * the vector load then waits for */
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    return (lanes_v)_mm512_mask_loadu_ps(_mm512_set1_ps(pad), m, v + i);
#else
    real t[LANES] BLOCK_ALIGNED;
    for (int l = 0; l < LANES; l++)
        t[l] = i + l < n ? v[i + l] : pad;
    return *(const lanes_v *)t;
#endif
}

/* v[i .. min(i + LANES, n)) = x's first lanes: the store that matches
 * lanes_at, nothing past n written. */
static inline __attribute__((always_inline)) void lanes_put(real *v, int i, int n, lanes_v x)
{
    if (i + LANES <= n) {
        *(lanes_vu *)(v + i) = x;
        return;
    }
#if defined(__AVX512F__) && !defined(PT_REAL_F64)
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(v + i, m, (__m512)x);
#else
    for (int l = 0; i + l < n; l++)
        v[i + l] = x[l];
#endif
}

/* lane 0 + ... + lane 15 in a fixed tree: lane l adds lane l + 8, then the
 * sums add l + 4, l + 2 and l + 1 (rotations of the whole vector, constant
 * shuffles). */
#if defined(__clang__)
#define LANES_ROTATE(v, k)                                                                      \
    __builtin_shufflevector(v, v, (k) % 16, (k + 1) % 16, (k + 2) % 16, (k + 3) % 16,             \
                            (k + 4) % 16, (k + 5) % 16, (k + 6) % 16, (k + 7) % 16, (k + 8) % 16, \
                            (k + 9) % 16, (k + 10) % 16, (k + 11) % 16, (k + 12) % 16,            \
                            (k + 13) % 16, (k + 14) % 16, (k + 15) % 16)
#else
#define LANES_ROTATE(v, k)                                                                      \
    __builtin_shuffle(v, (lanes_iv){(k) % 16, (k + 1) % 16, (k + 2) % 16, (k + 3) % 16,           \
                                    (k + 4) % 16, (k + 5) % 16, (k + 6) % 16, (k + 7) % 16,       \
                                    (k + 8) % 16, (k + 9) % 16, (k + 10) % 16, (k + 11) % 16,     \
                                    (k + 12) % 16, (k + 13) % 16, (k + 14) % 16, (k + 15) % 16})
#endif

/* (GCC spells a constant shuffle __builtin_shuffle, clang
 * __builtin_shufflevector; both give the same rotation.) */
static inline real lanes_fold(lanes_v acc)
{
    acc += LANES_ROTATE(acc, 8);
    acc += LANES_ROTATE(acc, 4);
    acc += LANES_ROTATE(acc, 2);
    acc += LANES_ROTATE(acc, 1);
    return acc[0];
}

/* 0 + lane 0 + lane 1 + ... + lane 15, added in that order */
static inline real lanes_sum_in_order(lanes_v acc)
{
    real s = 0;
    for (int l = 0; l < LANES; l++)
        s += acc[l];
    return s;
}

/* Blocks for elementwise functions: a block function takes `len` elements
 * (a constant: LANES, or a multiple of it where a longer block saves calls)
 * in and out of 64-byte aligned arrays, so its one compiled copy needs no
 * peeling. block_load copies elements [i0, i0 + len) of src in, past n as
 * pad (a value the block function must accept; the results there are
 * dropped), and returns how many are real; block_store copies those out. */
static inline __attribute__((always_inline)) int block_load(real *blk, int len, const real *src,
                                                            size_t i0, size_t n, real pad)
{
    if (i0 + (size_t)len <= n) {
        memcpy(blk, src + i0, (size_t)len * sizeof *blk);
        return len;
    }
    const int have = (int)(n - i0);
    for (int l = 0; l < len; l++)
        blk[l] = l < have ? src[i0 + l] : pad;
    return have;
}

static inline __attribute__((always_inline)) void block_store(real *dst, size_t i0, const real *blk,
                                                              int len, int have)
{
    if (have >= len)
        memcpy(dst + i0, blk, (size_t)len * sizeof *dst);
    else
        memcpy(dst + i0, blk, (size_t)have * sizeof *dst);
}

#endif
