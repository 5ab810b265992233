"""Float64 references and comparisons shared by the kernel tests."""
import math

import numpy as np


def nan_like(shape) -> np.ndarray:
    """An output buffer full of NaN: an element the kernel skips stays NaN and fails the comparison."""
    return np.full(shape, np.nan, np.float32)


def activation_reference(z: np.ndarray, name: str) -> np.ndarray:
    """The activations in float64, exactly (math.erf for GELU)."""
    z = np.asarray(z, np.float64)
    if name == "none":
        return z
    if name == "relu":
        return np.maximum(z, 0)
    if name == "relu6":
        return np.clip(z, 0, 6)
    if name == "gelu":
        return z * 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    if name == "gelu_tanh":
        return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    if name == "silu":
        return z / (1 + np.exp(-z))
    raise ValueError(name)


def assert_within(actual, expected, tolerance, what=""):
    """|actual - expected| <= tolerance elementwise (tolerance an array or a number); NaN fails."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    error = np.abs(actual - expected)
    bad = ~(error <= tolerance)
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        tol = np.broadcast_to(tolerance, error.shape)[i]
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} elements off, first at {i}: "
                             f"{actual[i]} vs {expected[i]} (tolerance {tol:.3g})")


# GEMM: float32 rounding grows with the magnitude of the terms summed, so the tolerance is
# relative to sum_k |a_ik| |b_kj| (+ |bias|) rather than to the result, which may cancel.
GEMM_RTOL = 1e-5
# activations: the approximations of erf/exp are good to ~5e-7 relative; slopes are at most 1.13
ACTIVATION_RTOL = 2e-6


def gemm_reference(a, b, bias=None, activation="none"):
    """(expected, tolerance) of act(a @ b + bias) in float64."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    z, scale = a64 @ b64, np.abs(a64) @ np.abs(b64)
    if bias is not None:
        z, scale = z + np.asarray(bias, np.float64), scale + np.abs(np.asarray(bias, np.float64))
    tolerance = 1.13 * GEMM_RTOL * scale + ACTIVATION_RTOL * np.abs(z) + 1e-30
    return activation_reference(z, activation), tolerance
