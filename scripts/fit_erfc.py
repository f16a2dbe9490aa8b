#!/usr/bin/env python3
"""Derives the polynomial in the float erfc used by the CPU backend
(nn/cpu_math.h, pt_gelu_partsf). Run it to check or regenerate the
coefficients; it needs numpy.

For z in [0, 9]:  erfc(z) = exp(-z^2) * B(t),  t = 1 / (1 + z/2),
B of degree 9, least squares on Chebyshev nodes of z. It prints the
coefficients (lowest degree first) and the worst relative error of
exp(z^2) erfc(z) evaluated in float64 and with float32 Horner steps."""
import math
import numpy as np

P = np.polynomial.polynomial
DEG, LO, HI = 9, 0.0, 9.0


def fit():
    z = LO + (np.cos(np.linspace(0, np.pi, 8000)) + 1) * 0.5 * (HI - LO)
    f = np.array([math.erfc(x) * math.exp(x * x) for x in z])
    return P.polyfit(1 / (1 + 0.5 * z), f, DEG)


def errors(c):
    zz = np.linspace(LO, HI, 40000)
    ref = np.array([math.erfc(x) * math.exp(x * x) for x in zz])
    t = 1 / (1 + 0.5 * zz)
    e64 = np.max(np.abs(P.polyval(t, c) - ref) / ref)
    t32, c32 = t.astype(np.float32), c.astype(np.float32)
    acc = np.full_like(t32, c32[-1])
    for k in range(len(c32) - 2, -1, -1):
        acc = (acc * t32 + c32[k]).astype(np.float32)
    return e64, np.max(np.abs(acc - ref) / ref)


if __name__ == "__main__":
    c = fit()
    e64, e32 = errors(c)
    print("B:", ", ".join("%.9ef" % x for x in c))
    print("max rel err: float64 %.2e, float32 Horner %.2e" % (e64, e32))
