/*
 * cpu_lanes.h (internal to nn/, included by the CPU op files after cpu_real.h):
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
#if defined(__AVX512F__) || defined(__AVX2__)
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

/* ---------------------------------------------- the lanes as two halves
 *
 * Without AVX-512 GCC has no register for a 64-byte vector: it keeps a
 * lanes_v in memory and moves it in and out at other widths, which stalls
 * the loads (the LayerNorm forward at d 64 ran at 2 GFLOP/s). Where the
 * target has AVX2 + FMA and no AVX-512, the row sums' hot loops use
 * lanes_pair instead: lanes 0-7 and 8-15 in two 256-bit registers. Each
 * lane meets the same operations as in a lanes_v, and lanes_pair_fold adds
 * in lanes_fold's tree (lane l + lane l + 8, then + 4, + 2, + 1), so the
 * bits are the same. */
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__) && !defined(PT_REAL_F64)
#define PT_LANES_PAIR 1
#include "nn/cpu_math.h"
/* cpu_math.h's halves of a pt_f16: the same two registers */
typedef pt_f16_halves lanes_pair;

static inline __attribute__((always_inline)) lanes_pair lanes_pair_zero(void)
{
    return (lanes_pair){_mm256_setzero_ps(), _mm256_setzero_ps()};
}

/* lanes_at's elements (pad past n) as a pair */
static inline __attribute__((always_inline)) lanes_pair lanes_pair_at(const float *v, int i, int n,
                                                                      float pad)
{
    if (i + LANES <= n)
        return (lanes_pair){_mm256_loadu_ps(v + i), _mm256_loadu_ps(v + i + 8)};
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i have = _mm256_set1_epi32(n - i);
    const __m256i mlo = _mm256_cmpgt_epi32(have, idx);
    const __m256i mhi = _mm256_cmpgt_epi32(have, _mm256_add_epi32(idx, _mm256_set1_epi32(8)));
    const __m256 p = _mm256_set1_ps(pad);
    return (lanes_pair){_mm256_blendv_ps(p, _mm256_maskload_ps(v + i, mlo), _mm256_castsi256_ps(mlo)),
                        _mm256_blendv_ps(p, _mm256_maskload_ps(v + i + 8, mhi),
                                         _mm256_castsi256_ps(mhi))};
}

static inline __attribute__((always_inline)) lanes_pair lanes_pair_add(lanes_pair a, lanes_pair b)
{
    return (lanes_pair){_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
}

/* a * b lane by lane, rounded: the empty asm keeps -ffp-contract=fast from
 * fusing the product into an addition that follows */
static inline __attribute__((always_inline)) lanes_pair lanes_pair_rounded_mul(lanes_pair a,
                                                                               lanes_pair b)
{
    lanes_pair p = {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
    __asm__("" : "+x"(p.lo), "+x"(p.hi));
    return p;
}

/* acc + (a - s)^2 lane by lane, as GCC compiles `acc += d * d` with
 * d = a - s under -ffp-contract=fast: one rounded subtraction, one fused
 * multiply-add */
static inline __attribute__((always_inline)) lanes_pair lanes_pair_add_sq_diff(lanes_pair acc,
                                                                               lanes_pair a, float s)
{
    const __m256 sv = _mm256_set1_ps(s);
    const __m256 dlo = _mm256_sub_ps(a.lo, sv), dhi = _mm256_sub_ps(a.hi, sv);
    return (lanes_pair){_mm256_fmadd_ps(dlo, dlo, acc.lo), _mm256_fmadd_ps(dhi, dhi, acc.hi)};
}

/* lanes_put for a pair: elements [i, min(i + LANES, n)), nothing past n */
static inline __attribute__((always_inline)) void lanes_pair_put(float *v, int i, int n, lanes_pair x)
{
    if (i + LANES <= n) {
        _mm256_storeu_ps(v + i, x.lo);
        _mm256_storeu_ps(v + i + 8, x.hi);
        return;
    }
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i have = _mm256_set1_epi32(n - i);
    _mm256_maskstore_ps(v + i, _mm256_cmpgt_epi32(have, idx), x.lo);
    _mm256_maskstore_ps(v + i + 8, _mm256_cmpgt_epi32(have, _mm256_add_epi32(idx, _mm256_set1_epi32(8))),
                        x.hi);
}

/* lanes_sum_in_order for a pair */
static inline float lanes_pair_sum_in_order(lanes_pair a)
{
    float t[LANES] BLOCK_ALIGNED;
    _mm256_store_ps(t, a.lo);
    _mm256_store_ps(t + 8, a.hi);
    float s = 0;
    for (int l = 0; l < LANES; l++)
        s += t[l];
    return s;
}

static inline __attribute__((always_inline)) float lanes_pair_fold(lanes_pair a)
{
    const __m256 s = _mm256_add_ps(a.lo, a.hi);                                       /* + 8 */
    const __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)); /* + 4 */
    const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));                              /* + 2 */
    const __m128 v = _mm_add_ss(u, _mm_shuffle_ps(u, u, 1));                          /* + 1 */
    return _mm_cvtss_f32(v);
}
#endif

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
