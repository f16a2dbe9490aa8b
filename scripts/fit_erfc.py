#!/usr/bin/env python3
"""Derives the polynomial coefficients of the float erf/erfc used by the CPU
backend (nn/cpu_math.h). Run it to check or regenerate them; it needs numpy.

Two regions of z >= 0:
  z <  1: erf(z) = z * A(z^2)                      (least squares in Chebyshev nodes)
  z >= 1: erfc(z) = exp(-z^2) * B(1 / (1 + z))      (fit on [1, 9])
It prints the coefficients (lowest degree first) and the worst relative error
of each region evaluated in float64."""
import math
import numpy as np

P = np.polynomial.polynomial

def fit_a(deg=6, za=1.0):
    u = (np.cos(np.linspace(0, np.pi, 4000)) + 1) * 0.5 * za * za
    z = np.sqrt(u)
    f = np.array([math.erf(t) / t if t > 0 else 2 / math.sqrt(math.pi) for t in z])
    c = P.polyfit(u, f, deg)
    zz = np.linspace(1e-6, za, 40000)
    ref = np.array([math.erf(t) for t in zz])
    return c, np.max(np.abs(P.polyval(zz * zz, c) * zz - ref) / ref)

def fit_b(deg=10, lo=1.0, hi=9.0):
    z = lo + (np.cos(np.linspace(0, np.pi, 8000)) + 1) * 0.5 * (hi - lo)
    f = np.array([math.erfc(x) * math.exp(x * x) for x in z])
    c = P.polyfit(1 / (1 + z), f, deg)
    zz = np.linspace(lo, hi, 40000)
    ref = np.array([math.erfc(x) for x in zz])
    got = P.polyval(1 / (1 + zz), c) * np.exp(-zz * zz)
    return c, np.max(np.abs(got - ref) / ref)

if __name__ == "__main__":
    a, ea = fit_a()
    b, eb = fit_b()
    print("A:", ", ".join("%.9ef" % x for x in a), "  max rel err %.2e" % ea)
    print("B:", ", ".join("%.9ef" % x for x in b), "  max rel err %.2e" % eb)
