"""Fit the polynomial coefficients of the normal CDF in common.h (`phi4`); prints them.

    erf(a)  = a * P(a^2)              for 0 <= a < 1   (P: degree 6, |error| < 2e-9)
    erfc(a) = exp(-a^2) * Q(1 / a)    for 1 <= a <= 10 (Q: degree 10, relative error < 2e-8)

Weighted least squares on Chebyshev nodes in float64 against Python's math.erf/erfc;
run `python wasm_kernels/fit_erf.py` to reproduce the constants pasted into common.h.
"""
from __future__ import annotations

import math

import numpy as np

P = np.polynomial.polynomial


def _nodes(lo: float, hi: float, count: int = 4000) -> np.ndarray:
    return (np.cos(np.linspace(0, np.pi, count)) + 1) * (hi - lo) / 2 + lo


def fit_small(degree: int = 6) -> tuple[np.ndarray, float]:
    a = _nodes(1e-6, 1.0)
    coef = P.polyfit(a * a, [math.erf(v) / v for v in a], degree)
    t = np.linspace(1e-6, 1.0, 100_001)
    return coef, float(np.abs(P.polyval(t * t, coef) * t - [math.erf(v) for v in t]).max())


def fit_large(degree: int = 10, hi: float = 10.0) -> tuple[np.ndarray, float]:
    u = _nodes(1 / hi, 1.0)
    target = np.array([math.erfc(1 / v) * math.exp(1 / v ** 2) for v in u])
    coef = P.polyfit(u, target, degree, w=1 / target)
    a = np.linspace(1.0, hi, 200_001)
    ref = np.array([math.erfc(v) * math.exp(v * v) for v in a])
    return coef, float(np.abs(P.polyval(1 / a, coef) / ref - 1).max())


def horner(coef: np.ndarray, var: str) -> str:
    expr = f"splat({coef[-1]:.9e}f)"
    for c in coef[-2::-1]:
        expr = f"madd({expr}, {var}, splat({c:.9e}f))"
    return expr


if __name__ == "__main__":
    small, e_small = fit_small()
    large, e_large = fit_large()
    print(f"/* erf(a) / a, a < 1: max abs error {e_small:.1e} */\n{horner(small, 'a2')}")
    print(f"/* erfc(a) * exp(a^2) in u = 1/a: max rel error {e_large:.1e} */\n{horner(large, 'u')}")
