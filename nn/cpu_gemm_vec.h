/*
 * cpu_gemm_vec.h (internal to nn/, for the product kernels only): the
 * vector layer that nn/cpu_gemm.c and nn/cpu_gemm_tn.c are written on, the
 * tile sizes they share, and the names they export.
 *
 * One vector type and the handful of operations the kernels use, built for
 * AVX-512 (zmm), AVX2 + FMA (ymm) or neither (arrays of VL floats and
 * fmaf); the build's flags choose. Every operation is either a move of bits
 * or one correctly rounded IEEE operation per lane (an addition, or a fused
 * multiply-add written as an explicit intrinsic or fmaf, never a * b + c
 * left to the compiler's contraction), so the three builds give the same
 * bits lane for lane.
 *
 * Names: tests/nn/CMakeLists.txt compiles the kernels once more per
 * instruction set with PT_GEMM_SUFFIX set (e.g. _avx2), and every function
 * they export is named through GEMM_FN so that the builds link side by side.
 */
#ifndef PT_NN_CPU_GEMM_VEC_H
#define PT_NN_CPU_GEMM_VEC_H

#include <math.h>
#include <string.h>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#ifndef PT_GEMM_SUFFIX
#define PT_GEMM_SUFFIX
#endif
#define PT_GEMM_CAT2(a, b) a##b
#define PT_GEMM_CAT(a, b) PT_GEMM_CAT2(a, b)
#define GEMM_FN(name) PT_GEMM_CAT(name, PT_GEMM_SUFFIX)

#define INLINE static inline __attribute__((always_inline))

#if defined(__AVX512F__)
#define ISA "avx512"
enum { VL = 16 };
typedef __m512 vec;
INLINE vec v_zero(void) { return _mm512_setzero_ps(); }
INLINE vec v_load(const float *p) { return _mm512_load_ps(p); } /* packed panel: aligned */
INLINE void v_store(float *p, vec v) { _mm512_store_ps(p, v); }
INLINE vec v_loadu(const float *p) { return _mm512_loadu_ps(p); }
INLINE void v_storeu(float *p, vec v) { _mm512_storeu_ps(p, v); }
INLINE vec v_add(vec a, vec b) { return _mm512_add_ps(a, b); }
INLINE vec v_mul(vec a, vec b) { return _mm512_mul_ps(a, b); }
/* c + a[0] * b, rounded once; GCC folds the broadcast into the FMA's operand */
INLINE vec v_fma_bcast(const float *a, vec b, vec c)
{
    return _mm512_fmadd_ps(_mm512_set1_ps(*a), b, c);
}
#elif defined(__AVX2__) && defined(__FMA__)
#define ISA "avx2-fma"
enum { VL = 8 };
typedef __m256 vec;
INLINE vec v_zero(void) { return _mm256_setzero_ps(); }
INLINE vec v_load(const float *p) { return _mm256_load_ps(p); }
INLINE void v_store(float *p, vec v) { _mm256_store_ps(p, v); }
INLINE vec v_loadu(const float *p) { return _mm256_loadu_ps(p); }
INLINE void v_storeu(float *p, vec v) { _mm256_storeu_ps(p, v); }
INLINE vec v_add(vec a, vec b) { return _mm256_add_ps(a, b); }
INLINE vec v_mul(vec a, vec b) { return _mm256_mul_ps(a, b); }
INLINE vec v_fma_bcast(const float *a, vec b, vec c)
{
    return _mm256_fmadd_ps(_mm256_broadcast_ss(a), b, c);
}
#else
#define ISA "portable"
enum { VL = 8 };
typedef struct {
    float l[VL];
} vec;
INLINE vec v_zero(void) { return (vec){{0}}; }
INLINE vec v_load(const float *p)
{
    vec v;
    memcpy(v.l, p, sizeof v.l);
    return v;
}
INLINE void v_store(float *p, vec v) { memcpy(p, v.l, sizeof v.l); }
INLINE vec v_loadu(const float *p) { return v_load(p); }
INLINE void v_storeu(float *p, vec v) { v_store(p, v); }
INLINE vec v_add(vec a, vec b)
{
    for (int i = 0; i < VL; i++)
        a.l[i] += b.l[i];
    return a;
}
INLINE vec v_mul(vec a, vec b)
{
    for (int i = 0; i < VL; i++)
        a.l[i] *= b.l[i];
    return a;
}
/* fmaf is the correctly rounded fused operation of C99 (a library call where
 * the CPU has no FMA: slow, and exactly the same result) */
INLINE vec v_fma_bcast(const float *a, vec b, vec c)
{
    for (int i = 0; i < VL; i++)
        c.l[i] = fmaf(*a, b.l[i], c.l[i]);
    return c;
}
#endif

/* A micro-kernel's tile: MR rows x NR columns (two vectors), the weight
 * gradient's panel (nn/cpu_gemm_tn.c). The forward and dx kernel
 * (nn/cpu_gemm.c) keeps MR rows but, with AVX-512, 4 vectors of columns. */
enum { MR = 6, NR = 2 * VL };

#endif
