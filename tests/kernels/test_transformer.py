"""The transformer-encoder kernels (activation_f32, add_layer_norm_f32, attention_f32) against
float64 NumPy. Tolerances: activations 2e-6 relative to |x| (the erf/exp approximations are good
to ~5e-7 relative, slopes at most 1.13); add + layer norm as layer norm (tests/kernels/
test_rowwise.py) on the float32 sum; attention as reference.attention_reference states it
(scores to 2e-6 of scale |q|.|k|, then through the softmax, + 2e-6 of p.|v|). Every
output starts as NaN, and rows with no key to attend must come out NaN (as the composite)."""
import math

import numpy as np
import pytest

from engine.backends.simd import kernels as K
from tests.kernels.reference import (activation_reference, assert_within, assert_within_or_nan, attention_reference,
                                     nan_like)
from tests.kernels.test_rowwise import norm_tolerance


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "silu", "relu", "relu6", "hardswish"])
@pytest.mark.parametrize("count", [1, 3, 4, 7, 8, 9, 1001])
def test_activation(rng, activation, count):
    x = (rng.standard_normal(count) * 4).astype(np.float32)
    if count >= 8:
        x[:8] = [np.nan, np.inf, -np.inf, -0.0, 12.0, -12.0, 1e-30, -40.0]
    with np.errstate(all="ignore"):
        expected = activation_reference(x, activation)            # -inf: NaN (-inf * 0), as the composites
    y = K.activation(x, activation, out=nan_like(count))
    special = ~np.isfinite(expected)
    np.testing.assert_array_equal(y[special], expected[special])
    assert_within(y[~special], expected[~special], 2e-6 * np.abs(x[~special]) + 1e-37, activation)
    assert K.activation(np.empty(0, np.float32), activation).shape == (0,)


@pytest.mark.parametrize("n", [1, 3, 4, 7, 1001])
def test_silu_mul(rng, n):
    """silu(gate) * up, the halves of a stacked (rows, 2n) projection read in place: exactly the
    activation kernel's silu then one float32 multiply (so decoding gives the composite's bits)."""
    gate_up = (rng.standard_normal((5, 2 * n)) * 4).astype(np.float32)
    gate_up[0, :min(n, 4)] = [np.nan, np.inf, -np.inf, -0.0][:min(n, 4)]
    gate, up = gate_up[:, :n], gate_up[:, n:]
    silu = K.activation(np.ascontiguousarray(gate), "silu")
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(K.silu_mul(gate, up, out=nan_like((5, n))), silu * up)
        np.testing.assert_array_equal(K.silu_mul(gate.T, up.T), (silu * up).T)       # element-strided: copied
    assert K.silu_mul(gate[:0], up[:0]).shape == (0, n)
    with pytest.raises(ValueError, match="differ"):
        K.silu_mul(gate, up[:, 1:])


def test_gelu_large_inputs_take_both_branches(rng):
    """Vectors with every |x| < 1.41 take the erf-only path; others the erfc tail too: both must agree."""
    x = np.concatenate([rng.uniform(-1.4, 1.4, 64), rng.uniform(-9, 9, 64), rng.uniform(-1.4, 1.4, 3)]
                       ).astype(np.float32)
    x[::7] *= 3
    expected = activation_reference(x, "gelu")
    assert_within(K.activation(x, "gelu"), expected, 2e-6 * np.abs(x) + 1e-37, "gelu")
    assert_within(K.gemm(x.reshape(-1, 1), np.ones((1, 5), np.float32), activation="gelu"),
                  np.repeat(expected[:, None], 5, 1), 2e-6 * np.abs(x)[:, None] + 1e-37, "gemm epilogue")


@pytest.mark.parametrize("n", [1, 3, 4, 7, 9, 64, 384, 1001])
def test_add_layer_norm(rng, n):
    x = rng.standard_normal((6, n), dtype=np.float32) * 3
    residual = rng.standard_normal((6, n), dtype=np.float32) * 2 + 50          # an offset to survive
    input_bias, weight, bias = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    for ib, w, b in ((None, None, None), (input_bias, None, None), (input_bias, weight, bias), (None, weight, None)):
        total = x + ib + residual if ib is not None else x + residual          # float32, added in this order
        t64 = total.astype(np.float64)
        centred = t64 - t64.mean(-1, keepdims=True)
        expected = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5)
        expected = expected * (1 if w is None else w) + (0 if b is None else b)
        out = K.add_layer_norm(x, residual, n, w, b, 1e-5, ib, out=nan_like(x.shape))
        tol = norm_tolerance(total) * np.abs(1 if w is None else w) + 1e-6
        assert_within(out, expected, tol, f"input_bias={ib is not None} weight={w is not None}")
    strided = K.add_layer_norm(np.asfortranarray(x), np.asfortranarray(residual), n, weight, bias, 1e-5, input_bias)
    assert_within(strided, K.add_layer_norm(x, residual, n, weight, bias, 1e-5, input_bias), 0, "strided rows")
    with pytest.raises(ValueError, match="residual"):
        K.add_layer_norm(x, residual[:3], n)


def _qkv(rng, n, h, hkv, l, s, e, ev):
    return (rng.standard_normal((n, h, l, e), dtype=np.float32), rng.standard_normal((n, hkv, s, e), dtype=np.float32),
            rng.standard_normal((n, hkv, s, ev), dtype=np.float32))


def check_attention(q, k, v, mask=None, scale=None, causal=False, what=""):
    n, h, l, _ = q.shape
    out = K.attention(q, k, v, mask, scale, causal, out=nan_like((n, l, h, v.shape[-1])))
    expected, tol = attention_reference(q, k, v, mask, scale, causal)
    assert_within_or_nan(out, expected, tol, what)
    return out


# (N, H, Hkv, L, S, E, Ev): tails of the 4-row query tile and the 8-key score tile, Ev not a
# multiple of 4 or 8 (V packed), one key, grouped-query and multi-query heads (their rows share
# tiles: decoding one token with 9 heads over 3 KV heads, as SmolLM2 does)
SHAPES = [(1, 1, 1, 1, 1, 1, 1), (2, 3, 3, 5, 7, 8, 8), (1, 4, 2, 9, 13, 5, 3), (2, 2, 1, 6, 17, 16, 12),
          (1, 2, 2, 4, 8, 32, 36), (3, 12, 12, 17, 33, 32, 32), (1, 9, 3, 1, 37, 64, 64)]


@pytest.mark.parametrize("shape", SHAPES)
def test_attention_masks(rng, shape):
    n, h, hkv, l, s, e, ev = shape
    q, k, v = _qkv(rng, *shape)
    padding = np.ones((n, 1, 1, s), bool)
    for b in range(n):
        padding[b, ..., 1 + rng.integers(0, s):] = False          # key padding: the first key stays
    check_attention(q, k, v, what="no mask")
    check_attention(q, k, v, padding, what="bool padding mask")
    check_attention(q, k, v, np.where(padding, 0, -1e4).astype(np.float32), what="float padding mask")
    check_attention(q, k, v, rng.standard_normal((n, h, l, s)).astype(np.float32), what="float mask per query")
    per_query = rng.random((1, h, l, s)) > 0.5
    per_query[..., 0] = True
    check_attention(q, k, v, per_query, what="bool mask per head and query")
    per_head = rng.random((n, h, 1, s)) > 0.5
    per_head[..., -1] = True
    check_attention(q, k, v, per_head, what="bool mask per head (the same for every query)")
    check_attention(q, k, v, causal=True, what="causal")
    check_attention(q, k, v, scale=0.3, what="scale")


@pytest.mark.parametrize("s", [1, 5, 16, 17, 70, 1500])
@pytest.mark.parametrize("e,ev", [(64, 64), (4, 4), (12, 36), (8, 40), (6, 8), (8, 6)])
def test_attention_one_query_row_gives_the_tiles_bits(rng, s, e, ev):
    """decoding one token without grouped heads (Whisper's decoder: 1 query row per KV head)
    reads K and V in place (no K^T packed, no tile of 4 repeated rows) and gives exactly the bits
    that row gets in a tile of several query rows; K and V views of one fused projection (a
    cross-attention's), every kind of mask. e or ev not a multiple of 4 keeps the tiles."""
    n, h = 2, 3
    kv = rng.standard_normal((n, s, h * (e + ev)), dtype=np.float32)
    k = kv[..., :h * e].reshape(n, s, h, e).transpose(0, 2, 1, 3)
    v = kv[..., h * e:].reshape(n, s, h, ev).transpose(0, 2, 1, 3)
    queries = rng.standard_normal((n, h, 3, e), dtype=np.float32)
    padding = np.ones((n, 1, 1, s), bool)
    padding[1, ..., 1 + s // 2:] = False
    masks = [None, padding, np.where(padding, 0, -1e4).astype(np.float32),
             rng.standard_normal((n, h, 1, s)).astype(np.float32), rng.random((1, h, 1, s)) > 0.3]
    for mask in masks:
        one = K.attention(queries[:, :, :1], k, v, mask, out=nan_like((n, 1, h, ev)))
        tiled = K.attention(queries, k, v, None if mask is None else np.broadcast_to(mask, (n, h, 3, s)),
                            out=nan_like((n, 3, h, ev)))
        np.testing.assert_array_equal(one, tiled[:, :1], f"mask {None if mask is None else mask.dtype}")
        expected, tolerance = attention_reference(queries[:, :, :1], k, v, mask)
        assert_within_or_nan(one, expected, tolerance, f"one row, s {s}, e {e}, ev {ev}")


def test_attention_on_bert_views(rng):
    """q, k, v as BERT makes them: one (N, L, 3*H*D) projection, each part viewed (N, L, H, D)
    and transposed to (N, H, L, D): strided, no copy. K's transposed memory too (ks_d != 1)."""
    n, l, h, d = 3, 21, 4, 8
    x = rng.standard_normal((n, l, 3 * h * d), dtype=np.float32)
    q, k, v = (x[..., i * h * d:(i + 1) * h * d].reshape(n, l, h, d).transpose(0, 2, 1, 3) for i in range(3))
    assert not q.flags.c_contiguous
    padding = np.ones((n, 1, 1, l), bool)
    padding[1, ..., 15:] = False
    check_attention(q, k, v, padding, what="bert views")
    check_attention(q, np.ascontiguousarray(k.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2), v.transpose(0, 1, 2, 3),
                    padding, what="K transposed in memory")
    check_attention(q, k, np.asfortranarray(v), padding, what="V strided (packed)")


def test_attention_rows_without_keys_are_nan(rng):
    q, k, v = _qkv(rng, 3, 2, 2, 6, 9, 4, 5)
    mask = np.ones((3, 1, 1, 9), bool)
    mask[1] = False                                              # batch 1: no key at all
    out = check_attention(q, k, v, mask, what="fully masked batch")
    assert np.isnan(out[1]).all() and not np.isnan(out[[0, 2]]).any()
    per_query = np.ones((3, 2, 6, 9), bool)
    per_query[0, 1, 4] = False                                   # one query row of one head
    out = check_attention(q, k, v, per_query, what="one fully masked row")
    assert np.isnan(out[0, 4, 1]).all() and np.isnan(out).sum() == 5
    check_attention(q, k, v, np.full((3, 1, 1, 9), -np.inf, np.float32), what="-inf float mask")
    q[2, 0, 3, 1] = np.nan                                       # NaN in a query: its row only
    out = check_attention(q, k, v, what="NaN query")
    assert np.isnan(out[2, 3, 0]).all() and np.isnan(out).sum() == 5


def test_attention_checks_its_arguments(rng):
    q, k, v = _qkv(rng, 1, 3, 2, 4, 5, 8, 8)
    with pytest.raises(ValueError, match="do not match"):
        K.attention(q, k, v)                                     # 3 query heads over 2 KV heads
    with pytest.raises(TypeError, match="bool or float32"):
        K.attention(q[:, :2], k, v, np.ones((1, 1, 1, 5), np.int32))
    with pytest.raises(ValueError, match="(N, H, L, D)"):
        K.attention(q[0], k[0], v[0])
    big = np.ones((1, 1, 1, 3000), bool)                        # scratch grows with S
    q1, k1, v1 = _qkv(rng, 1, 1, 1, 3, 3000, 8, 8)
    check_attention(q1, k1, v1, big, scale=1 / math.sqrt(80), what="long keys")


def rope_reference(x, cos, sin):
    """x * cos + rotate_half(x) * sin in float32, operation by operation (NumPy's roundings)."""
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin


@pytest.mark.parametrize("shape", [(1, 1, 2), (3, 1, 8), (2, 5, 64), (1, 9, 37, 64), (2, 3, 4, 6)])
def test_rope_is_numpys_formula_exactly(rng, shape):
    """Bit for bit: the kernel multiplies, multiplies and adds as NumPy does (no fused multiply-add)."""
    x = rng.standard_normal(shape, dtype=np.float32) * 3
    angles = rng.uniform(-40, 40, shape[-2:]).astype(np.float32)
    cos, sin = np.cos(angles), np.sin(angles)
    np.testing.assert_array_equal(K.rope(x, cos, sin, out=nan_like(shape)), rope_reference(x, cos, sin))
    np.testing.assert_array_equal(K.rope(x, cos[:1], sin[:1]), rope_reference(x, cos[:1], sin[:1]))   # broadcast row


def test_rope_reads_head_views_of_a_stacked_projection(rng):
    """q (N, H, T, d) as a transposed view of a (N, T, H * d + more) projection: no copy needed."""
    n, t, h, d = 1, 5, 3, 8
    qkv = rng.standard_normal((n, t, h * d + 16), dtype=np.float32)
    q = qkv[..., :h * d].reshape(n, t, h, d).transpose(0, 2, 1, 3)           # strides (.., d, row, 1)
    angles = rng.uniform(-9, 9, (t, d)).astype(np.float32)
    cos, sin = np.cos(angles), np.sin(angles)
    np.testing.assert_array_equal(K.rope(q, cos, sin), rope_reference(q, cos, sin))
    odd = np.asfortranarray(rng.standard_normal((2, 3, 4, 6), dtype=np.float32))   # elements not contiguous
    np.testing.assert_array_equal(K.rope(odd, cos[:4, :6], sin[:4, :6]), rope_reference(odd, cos[:4, :6], sin[:4, :6]))
    with pytest.raises(ValueError, match="d even"):
        K.rope(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))


def test_index_copy_writes_rows_in_place(rng):
    """A KV cache (N, Hkv, C, d) written at positions along axis 2 from a head view; any other
    layout is declined (False) for NumPy to do; a bad index writes nothing."""
    cache = rng.standard_normal((1, 3, 16, 8), dtype=np.float32)
    qkv = rng.standard_normal((1, 2, 3 * 8 + 5), dtype=np.float32)
    k = qkv[..., :24].reshape(1, 2, 3, 8).transpose(0, 2, 1, 3)               # (1, 3, 2, 8), strided
    expected = cache.copy()
    expected[:, :, [5, 0]] = k
    assert K.index_copy(cache, np.array([5, 0]), k, 2) is True
    np.testing.assert_array_equal(cache, expected)
    with pytest.raises(IndexError, match="16 is out of range"):
        K.index_copy(cache, np.array([3, 16]), k, 2)
    np.testing.assert_array_equal(cache, expected)                            # nothing written
    rows = np.zeros((5, 7), np.float32)
    assert K.index_copy(rows, np.array([4]), np.ones((1, 7), np.float32), 0) and rows[4].all() and not rows[:4].any()
    assert K.index_copy(cache.transpose(0, 1, 3, 2), np.array([1]), np.ones((1, 3, 1, 16), np.float32), 2) is False
    batch = np.zeros((2, 3, 4, 8), np.float32)                                # two sequences of a strided view:
    two = rng.standard_normal((2, 1, 29), dtype=np.float32)[..., :24].reshape(2, 1, 3, 8).transpose(0, 2, 1, 3)
    assert K.index_copy(batch, np.array([1]), two, 2) is False               # the leading dims do not collapse
    assert K.index_copy(cache.astype(np.float64), np.array([1]), k.astype(np.float64), 2) is False
