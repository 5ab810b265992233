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
    if name == "hardswish":
        return z * np.clip(z + 3, 0, 6) / 6
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


# --- GGML quantized weights (engine.quants) -------------------------------------------------------
# type -> byte offsets of the f16 scales in a block (ggml-common.h; engine/quants.py has the layouts)
QUANT_SCALES = {"q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,), "q5_1": (0, 2), "q8_0": (0,),
                "q2_k": (80, 82), "q3_k": (108,), "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,)}


def random_blocks(qtype: str, rows: int, cols: int, rng, exponents=(-4.0, 0.0)) -> np.ndarray:
    """GGML blocks for a (rows, cols) weight, flat uint8: random bytes (every pattern of the quants,
    high bits and sub-block scales is valid), the f16 scales overwritten by finite values
    +-10^U(exponents), a tenth of them 0; the first block all ones and the second all zeros below
    the scales (the extremes of every field)."""
    from engine import quants
    kind = quants.BY_NAME[qtype]
    count = rows * cols // kind.block_size
    blocks = rng.integers(0, 256, (count, kind.type_size), dtype=np.uint8)
    blocks[:1] = 0xFF
    blocks[1:2] = 0
    for offset in QUANT_SCALES[qtype]:
        scale = (10.0 ** rng.uniform(*exponents, count) * rng.choice([-1, 1], count)).astype(np.float16)
        scale[rng.random(count) < 0.1] = 0
        blocks[:, offset:offset + 2] = scale.reshape(-1, 1).view(np.uint8)
    return blocks.reshape(-1)


# linear_q quantizes x per block of 32 to 14 bits: q = round(x / dx), dx = max|x_block| / 8191, so
# each x_k moves by at most dx / 2 = max|x_block| / 16382 and y_n by at most sum over blocks b of
# max|x_b| / 16382 * sum_{k in b} |w_nk|. The tolerance is that worst case (+1% for the float32
# rounding of dx and x / dx) plus the float32 error of the sums, GEMM_RTOL * sum_k |x_k| |w_nk|.
# Measured errors stay below 40% of it (typically 10-20%: the roundings are independent, not
# all of the same sign); about 5e-5 of sum_k |x_k| |w_nk| on random data.
QUANT_X_STEP = 1.01 / 16382


def linear_q_reference(x, w, bias=None):
    """(expected, tolerance) of linear_q in float64: x (..., K) float32, w (N, K) the dequantized
    weight, bias (N,) or None; both (..., N)."""
    x64 = np.asarray(x, np.float64).reshape(-1, np.shape(x)[-1])
    w64 = np.asarray(w, np.float64)
    expected, magnitude = x64 @ w64.T, np.abs(x64) @ np.abs(w64).T
    if bias is not None:
        expected, magnitude = expected + np.asarray(bias, np.float64), magnitude + np.abs(bias)
    blocks = x64.shape[1] // 32
    step = np.abs(x64).reshape(-1, blocks, 32).max(-1) * QUANT_X_STEP          # (M, blocks)
    weight_sums = np.abs(w64).reshape(-1, blocks, 32).sum(-1)                   # (N, blocks)
    tolerance = step @ weight_sums.T + GEMM_RTOL * magnitude + 1e-30
    shape = np.shape(x)[:-1] + (w64.shape[0],)
    return expected.reshape(shape), tolerance.reshape(shape)
