/*
 * cpu_math.h (internal to nn/): exp and the normal CDF for the CPU backend,
 * written branch-free so GCC vectorises the loops that call them (glibc's
 * scalar expf/erff would cost as much as all the matrix multiplies of a small
 * model). Only the float versions are approximations; the float64 backend uses
 * libm, so finite-difference tests check the math, not the approximation.
 *
 * Accuracy (tests/nn/test_cpu_math.c, measured over every float): pt_expf
 * within 1.3 ulp on [-87, 88]; the normal CDF within 5e-7 relative to float64
 * over [-12.7, 12.7] (2.4e-7 absolute on [-10, 10]). A NaN in gives a NaN out.
 * Coefficients: scripts/fit_erfc.py.
 */
#ifndef PT_NN_CPU_MATH_H
#define PT_NN_CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

/* The two polynomials, by Horner's rule, written once for the scalar
 * functions and their 16-lane versions below (r, t: a float or a pt_f16).
 * e^r for |r| <= ln2/2: the degree-7 Taylor polynomial. */
#define PT_EXP_TAYLOR7(r)                                                                          \
    (((((((1.0f / 5040.0f * (r) + 1.0f / 720.0f)                                                   \
          * (r) + 1.0f / 120.0f)                                                                   \
         * (r) + 1.0f / 24.0f)                                                                     \
        * (r) + 1.0f / 6.0f)                                                                       \
       * (r) + 0.5f)                                                                               \
      * (r) + 1.0f)                                                                                \
     * (r) + 1.0f)

/* erfc(z) exp(z^2) on [0, 9] in t = 1 / (1 + z / 2) (scripts/fit_erfc.py) */
#define PT_ERFC_B(t)                                                                               \
    (((((((((-4.731035957e-02f * (t) + 2.237867214e-01f)                                          \
            * (t) - 3.519710784e-01f)                                                              \
           * (t) + 1.086572272e-01f)                                                               \
          * (t) + 1.046879437e-01f)                                                                \
         * (t) + 1.375749369e-01f)                                                                 \
        * (t) + 2.636985869e-01f)                                                                  \
       * (t) + 2.783779827e-01f)                                                                   \
      * (t) + 2.825177253e-01f)                                                                    \
     * (t) - 1.969932494e-05f)

/* e^x: x = n ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial
 * (truncation error below 1e-8 relative), 2^n assembled in the exponent bits. */
static inline float pt_expf(float x)
{
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float n = nearbyintf(x * 1.44269504088896341f);
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.42860682030941723212e-6f;
    float p = PT_EXP_TAYLOR7(r);
    /* a NaN x: n is NaN, whose conversion would be undefined; p is NaN
     * anyway, and so is the result */
    int32_t ni = (int32_t)(n == n ? n : 0.0f);
    uint32_t bits = (uint32_t)(ni + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* The normal CDF Phi(x) and density phi(x) together, as GELU's forward and
 * backward need them; they share exp(-x^2/2), the expensive part.
 *
 * Phi(x) = 1 - 0.5 erfc(|x| / sqrt 2) for x >= 0 and 0.5 erfc(|x| / sqrt 2)
 * below, with erfc(z) = exp(-z^2) B(1 / (1 + z/2)) on [0, 9] (one region, no
 * branches), so Phi keeps relative accuracy in the lower tail. exp(-x^2/2) is
 * taken from x itself with x^2 split exactly into hi + lo: rounding x / sqrt 2
 * first would cost 2e-6 relative at z = 4. */
static inline void pt_gelu_partsf(float x, float *cdf, float *pdf)
{
    float ax = fabsf(x);
    float xc = ax > 12.7f ? 12.7f : ax; /* z = 9 */
    float hi = xc * xc, lo = fmaf(xc, xc, -hi);
    float e = pt_expf(-0.5f * hi) * (1.0f - 0.5f * lo);
    e = ax > 12.7f ? 0.0f : e; /* below 1e-35: nothing of use in float */
    float t = 1.0f / (1.0f + 0.35355339059327376f * xc);
    float b = PT_ERFC_B(t);
    float tail = 0.5f * e * b; /* 0.5 erfc(|x| / sqrt 2) */
    *cdf = x < 0.0f ? tail : 1.0f - tail;
    *pdf = e * 0.39894228040143267794f;
}

static inline float pt_normal_cdff(float x)
{
    float cdf, pdf;
    pt_gelu_partsf(x, &cdf, &pdf);
    return cdf;
}

/* ------------------------------------------------- 16 lanes at a time
 *
 * The same two functions on vectors of 16 floats, operation for operation,
 * so that a loop over a tensor needs no auto-vectoriser: every element, the
 * last partial vector's included, goes through the same instructions
 * wherever it sits. Where the target fuses multiply-adds (as the scalar
 * functions' contracted expressions then are), tests/nn/test_cpu_math.c
 * checks that they give the scalar functions' bits; it checks their
 * accuracy everywhere. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi" /* 64-byte vectors by value: inline only */
#endif
typedef float pt_f16 __attribute__((vector_size(64)));
typedef int32_t pt_i16 __attribute__((vector_size(64)));
#define PT_F16_INLINE static inline __attribute__((always_inline))

PT_F16_INLINE pt_f16 pt_f16_set(float a) { return (pt_f16){0} + a; }

/* Lane masks from comparisons (false where either side is a NaN, as C's
 * operators), and m ? a : b lane by lane: AVX-512's mask registers where
 * the target has them; all-ones/all-zeros lanes otherwise, computed on the
 * two 256-bit halves where the target has AVX2 (GCC turns a comparison of
 * 64-byte vectors into 16 scalar ones there), by C's vector operators
 * elsewhere. Each is the same correctly rounded or bit-moving operation
 * per lane on every target. */
#if defined(__AVX512F__)
typedef __mmask16 pt_m16;
PT_F16_INLINE pt_m16 pt_f16_gt(pt_f16 a, pt_f16 b)
{
    return _mm512_cmp_ps_mask((__m512)a, (__m512)b, _CMP_GT_OQ);
}
PT_F16_INLINE pt_m16 pt_f16_lt(pt_f16 a, pt_f16 b)
{
    return _mm512_cmp_ps_mask((__m512)a, (__m512)b, _CMP_LT_OQ);
}
PT_F16_INLINE pt_m16 pt_f16_eq(pt_f16 a, pt_f16 b)
{
    return _mm512_cmp_ps_mask((__m512)a, (__m512)b, _CMP_EQ_OQ);
}
PT_F16_INLINE pt_f16 pt_f16_sel(pt_m16 m, pt_f16 a, pt_f16 b)
{
    return (pt_f16)_mm512_mask_blend_ps(m, (__m512)b, (__m512)a);
}
#elif defined(__AVX2__)
typedef pt_i16 pt_m16;
typedef struct {
    __m256 lo, hi;
} pt_f16_halves;
PT_F16_INLINE pt_f16_halves pt_f16_split(pt_f16 a)
{
    pt_f16_halves h;
    memcpy(&h, &a, sizeof h);
    return h;
}
PT_F16_INLINE pt_f16 pt_f16_join(__m256 lo, __m256 hi)
{
    pt_f16 r;
    memcpy(&r, &lo, sizeof lo);
    memcpy((char *)&r + sizeof lo, &hi, sizeof hi);
    return r;
}
#define PT_F16_CMP(a, b, op)                                                                       \
    (pt_m16) pt_f16_join(_mm256_cmp_ps(pt_f16_split(a).lo, pt_f16_split(b).lo, op),               \
                         _mm256_cmp_ps(pt_f16_split(a).hi, pt_f16_split(b).hi, op))
PT_F16_INLINE pt_m16 pt_f16_gt(pt_f16 a, pt_f16 b) { return PT_F16_CMP(a, b, _CMP_GT_OQ); }
PT_F16_INLINE pt_m16 pt_f16_lt(pt_f16 a, pt_f16 b) { return PT_F16_CMP(a, b, _CMP_LT_OQ); }
PT_F16_INLINE pt_m16 pt_f16_eq(pt_f16 a, pt_f16 b) { return PT_F16_CMP(a, b, _CMP_EQ_OQ); }
#undef PT_F16_CMP
PT_F16_INLINE pt_f16 pt_f16_sel(pt_m16 m, pt_f16 a, pt_f16 b)
{
    const pt_f16_halves hm = pt_f16_split((pt_f16)m), ha = pt_f16_split(a), hb = pt_f16_split(b);
    return pt_f16_join(_mm256_blendv_ps(hb.lo, ha.lo, hm.lo), _mm256_blendv_ps(hb.hi, ha.hi, hm.hi));
}
#else
typedef pt_i16 pt_m16;
PT_F16_INLINE pt_m16 pt_f16_gt(pt_f16 a, pt_f16 b) { return a > b; }
PT_F16_INLINE pt_m16 pt_f16_lt(pt_f16 a, pt_f16 b) { return a < b; }
PT_F16_INLINE pt_m16 pt_f16_eq(pt_f16 a, pt_f16 b) { return a == b; }
PT_F16_INLINE pt_f16 pt_f16_sel(pt_m16 m, pt_f16 a, pt_f16 b)
{
    return (pt_f16)((m & (pt_i16)a) | (~m & (pt_i16)b));
}
#endif

/* fmaf lane by lane */
PT_F16_INLINE pt_f16 pt_f16_fma(pt_f16 a, pt_f16 b, pt_f16 c)
{
#if defined(__AVX512F__)
    return (pt_f16)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__AVX2__) && defined(__FMA__)
    const pt_f16_halves ha = pt_f16_split(a), hb = pt_f16_split(b), hc = pt_f16_split(c);
    return pt_f16_join(_mm256_fmadd_ps(ha.lo, hb.lo, hc.lo), _mm256_fmadd_ps(ha.hi, hb.hi, hc.hi));
#else
    pt_f16 r;
    for (int l = 0; l < 16; l++)
        r[l] = fmaf(a[l], b[l], c[l]);
    return r;
#endif
}

/* nearbyintf lane by lane (to nearest, ties to even, in the default mode) */
PT_F16_INLINE pt_f16 pt_f16_round(pt_f16 x)
{
#if defined(__AVX512F__)
    return (pt_f16)_mm512_roundscale_ps((__m512)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#elif defined(__AVX2__)
    const pt_f16_halves h = pt_f16_split(x);
    return pt_f16_join(_mm256_round_ps(h.lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                       _mm256_round_ps(h.hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
    pt_f16 r;
    for (int l = 0; l < 16; l++)
        r[l] = nearbyintf(x[l]);
    return r;
#endif
}

/* pt_expf lane by lane for x in [-87, 88] or NaN, where its clamp changes
 * nothing */
PT_F16_INLINE pt_f16 pt_f16_expf_unclamped(pt_f16 x)
{
    pt_f16 n = pt_f16_round(x * 1.44269504088896341f);
    pt_f16 r = x - n * 0.693145751953125f;
    r = r - n * 1.42860682030941723212e-6f;
    const pt_f16 p = PT_EXP_TAYLOR7(r);
    const pt_i16 ni = __builtin_convertvector(pt_f16_sel(pt_f16_eq(n, n), n, pt_f16_set(0.0f)),
                                              pt_i16);
    const pt_i16 bits = (ni + 127) << 23;
    return p * (pt_f16)bits;
}

/* pt_expf lane by lane */
PT_F16_INLINE pt_f16 pt_f16_expf(pt_f16 x)
{
    const pt_f16 lo = pt_f16_set(-87.0f), hi = pt_f16_set(88.0f);
    return pt_f16_expf_unclamped(
        pt_f16_sel(pt_f16_lt(x, lo), lo, pt_f16_sel(pt_f16_gt(x, hi), hi, x)));
}

/* pt_expf lane by lane for x <= 0 or NaN, where only the lower clamp can
 * change anything */
PT_F16_INLINE pt_f16 pt_f16_expf_nonpos(pt_f16 x)
{
    const pt_f16 lo = pt_f16_set(-87.0f);
    return pt_f16_expf_unclamped(pt_f16_sel(pt_f16_lt(x, lo), lo, x));
}

/* pt_gelu_partsf lane by lane */
PT_F16_INLINE void pt_f16_gelu_parts(pt_f16 x, pt_f16 *cdf, pt_f16 *pdf)
{
    const pt_f16 ax = (pt_f16)((pt_i16)x & 0x7fffffff);
    const pt_m16 beyond = pt_f16_gt(ax, pt_f16_set(12.7f));
    const pt_f16 xc = pt_f16_sel(beyond, pt_f16_set(12.7f), ax);
    const pt_f16 hi = xc * xc, lo = pt_f16_fma(xc, xc, -hi);
    pt_f16 e = pt_f16_expf_unclamped(-0.5f * hi) * (1.0f - 0.5f * lo); /* in [-80.7, 0] */
    e = pt_f16_sel(beyond, pt_f16_set(0.0f), e);
    const pt_f16 t = 1.0f / (1.0f + 0.35355339059327376f * xc);
    const pt_f16 b = PT_ERFC_B(t);
    const pt_f16 tail = 0.5f * e * b;
    *cdf = pt_f16_sel(pt_f16_lt(x, pt_f16_set(0.0f)), tail, 1.0f - tail);
    *pdf = e * 0.39894228040143267794f;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

static inline double pt_normal_cdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }

static inline void pt_gelu_parts(double x, double *cdf, double *pdf)
{
    *cdf = pt_normal_cdf(x);
    *pdf = 0.39894228040143267794 * exp(-0.5 * x * x);
}

#endif
