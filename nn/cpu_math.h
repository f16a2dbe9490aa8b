/*
 * cpu_math.h (internal to nn/): exp and the normal CDF for the CPU backend,
 * written branch-free so GCC vectorises the loops that call them (glibc's
 * scalar expf/erff would cost as much as all the matrix multiplies of a small
 * model). Only the float versions are approximations; the float64 backend uses
 * libm, so finite-difference tests check the math, not the approximation.
 *
 * Accuracy (tests/nn/test_cpu_math.c): pt_expf within 2 ulp on [-87, 88];
 * pt_normal_cdff within 3e-7 relative to float64 over [-13, 13].
 * Coefficients: scripts/fit_erfc.py.
 */
#ifndef PT_NN_CPU_MATH_H
#define PT_NN_CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* e^x: x = n ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial
 * (truncation error below 1e-8 relative), 2^n assembled in the exponent bits. */
static inline float pt_expf(float x)
{
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float n = nearbyintf(x * 1.44269504088896341f);
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.42860682030941723212e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* 0.5 erfc(z) for z = |x| / sqrt 2 >= 0, with relative accuracy kept in the
 * tail: exp(-z^2) is taken as exp(-x^2/2) from x itself, split exactly into
 * hi + lo, so neither the scaling of x nor the squaring adds rounding error to
 * the exponent (at z = 4 that error alone would be 2e-6 relative). */
static inline float pt_half_erfc_of_x(float x)
{
    float ax = fabsf(x);
    float z = ax * 0.70710678118654752f;
    /* z < 1: 1 - z A(z^2) */
    float u = z * z;
    float a = 7.882500417e-05f;
    a = a * u - 8.018859006e-04f;
    a = a * u + 5.189312812e-03f;
    a = a * u - 2.685432954e-02f;
    a = a * u + 1.128359749e-01f;
    a = a * u - 3.761262691e-01f;
    a = a * u + 1.128379166e+00f;
    float small = 1.0f - z * a;
    /* z >= 1: exp(-z^2) B(1 / (1 + z)) */
    float zc = z > 9.0f ? 9.0f : z;
    float xc = ax > 12.7f ? 12.7f : ax;
    float t = 1.0f / (1.0f + zc);
    float b = -3.135067476e+00f;
    b = b * t + 1.037622583e+01f;
    b = b * t - 1.421746799e+01f;
    b = b * t + 9.608558902e+00f;
    b = b * t - 2.489984823e+00f;
    b = b * t - 2.562383718e-01f;
    b = b * t - 3.384176805e-01f;
    b = b * t + 2.865598631e-01f;
    b = b * t + 5.639884876e-01f;
    b = b * t + 5.641933369e-01f;
    b = b * t + 1.101815763e-08f;
    float hi = xc * xc, lo = fmaf(xc, xc, -hi); /* x^2 = hi + lo exactly */
    float large = pt_expf(-0.5f * hi) * (1.0f - 0.5f * lo) * b;
    large = z > 9.0f ? 0.0f : large; /* erfc(9) < 5e-37: nothing of use in float */
    return 0.5f * (z < 1.0f ? small : large);
}

/* Phi(x) = P(N(0,1) <= x) = 0.5 erfc(-x / sqrt 2). */
static inline float pt_normal_cdff(float x)
{
    float tail = pt_half_erfc_of_x(x);
    return x < 0.0f ? tail : 1.0f - tail;
}

static inline double pt_normal_cdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }

#endif
