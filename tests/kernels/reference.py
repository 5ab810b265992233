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


def attention_reference(q, k, v, mask=None, scale=None, causal=False):
    """(expected, tolerance) of softmax(q k^T * scale + mask) v in float64, both (N, L, H, Ev) as
    the kernels write it: K/V heads repeated for grouped queries, a bool mask's False and causal
    keys j > i as -inf, so a row with no finite score is NaN (as the composite gives).

    The tolerance follows the float32 error: the scores' rounding (2e-6 of scale * |q| . |k| +
    |mask|: ~sqrt(E) roundings of 6e-8 for head sizes up to 128) moves the probabilities, whose
    error times |v| makes the output's, plus the exp and the products with v (2e-6 of p . |v|)."""
    q64, k64, v64 = (np.asarray(a, np.float64) for a in (q, k, v))
    rep = q64.shape[1] // k64.shape[1]
    k64, v64 = np.repeat(k64, rep, 1), np.repeat(v64, rep, 1)
    scale = 1 / math.sqrt(q64.shape[-1]) if scale is None else scale
    z = q64 @ np.swapaxes(k64, -1, -2) * scale
    size = scale * np.abs(q64) @ np.swapaxes(np.abs(k64), -1, -2)
    if causal:
        z = np.where(np.tril(np.ones(z.shape[-2:], bool)), z, -np.inf)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype == np.bool_:
            z = np.where(mask, z, -np.inf)
        else:
            z, size = z + mask, size + np.abs(mask)
    with np.errstate(all="ignore"):
        e = np.exp(z - z.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
    expected = p @ v64
    magnitude = np.nan_to_num(p) @ np.abs(v64)
    finite = np.where(np.isfinite(z), size, 0).max(-1, keepdims=True)
    tolerance = (2e-6 * finite + 2e-6) * magnitude + 1e-30
    return expected.transpose(0, 2, 1, 3), tolerance.transpose(0, 2, 1, 3)


def assert_within_or_nan(actual, expected, tolerance, what=""):
    """assert_within where `expected` is finite; NaN exactly where `expected` is NaN."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    nan = np.isnan(expected)
    assert (np.isnan(actual) == nan).all(), f"{what}: NaN at {np.argwhere(np.isnan(actual) != nan)[:3].tolist()}"
    assert_within(np.where(nan, 0, actual), np.where(nan, 0, expected), tolerance, what)
