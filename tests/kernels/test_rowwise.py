"""softmax_f32, layer_norm_f32, rms_norm_f32, scale_shift_f32, clamp_f32 and add_f32 against float64
NumPy. Tolerances: softmax 2e-6 relative + 1e-9 (exp to ~1e-7, the sum in float32); norms
1e-5 relative + 1e-6 (float32 sums over the row), layer norm also 2^-22 |x| / std (x - mean
rounds to float32, as in NumPy); affine and clamp exact (the same float32 operations as NumPy)."""
import numpy as np
import pytest

from engine.backends.simd import kernels as K
from tests.kernels.reference import activation_reference, assert_within, nan_like

SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 31, 64, 1001]


def softmax_reference(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("n", SIZES)
def test_softmax_rows(rng, n):
    x = rng.standard_normal((6, n), dtype=np.float32) * 10
    expected = softmax_reference(x, -1)
    assert_within(K.softmax(x, -1, out=nan_like(x.shape)), expected, 2e-6 * expected + 1e-9, "rows")
    strided = np.asfortranarray(x)                               # elements of a row 6 apart
    assert_within(K.softmax(strided, -1), expected, 2e-6 * expected + 1e-9, "strided rows")


@pytest.mark.parametrize("shape,axis", [((3, 5, 7), 1), ((2, 9, 4, 3), 1), ((4, 6), 0), ((5, 2, 3), 0),
                                        ((3, 1, 6), 1), ((2, 3, 11), 2)])
def test_softmax_any_axis(rng, shape, axis):
    x = rng.standard_normal(shape, dtype=np.float32) * 4
    expected = softmax_reference(x, axis)
    assert_within(K.softmax(x, axis, out=nan_like(shape)), expected, 2e-6 * expected + 1e-9, f"axis {axis}")
    y = np.swapaxes(np.swapaxes(x, 0, -1).copy(), 0, -1)          # same values, transposed memory
    assert_within(K.softmax(y, axis), expected, 2e-6 * expected + 1e-9, "transposed memory")


def test_softmax_large_values_and_infinities():
    x = np.array([[1e4, 1e4 - 1, 1e4 - 100, -1e4, 3e38, 0, 0, 0],
                  [-np.inf, 0, 1, -np.inf, 2, 3, -np.inf, 4],
                  [88, 89, 90, -88, -89, -103, -104, -200],
                  [np.nan, 0, 0, 0, 0, 0, 0, 0]], np.float32)
    with np.errstate(all="ignore"):
        expected = softmax_reference(x, -1)
    out = K.softmax(x, -1)
    assert_within(out[:3], expected[:3], 2e-6 * expected[:3] + 1e-9, "extremes")
    assert np.isnan(out[3]).all()                                 # NaN anywhere: the row is NaN, as the composite
    assert np.isnan(K.softmax(np.full((1, 3), -np.inf, np.float32))).all()


def norm_tolerance(x, axis=-1):
    """1e-5 of |normalized| + the float32 rounding of x - mean (ulp(|x|) / std: large under an offset)"""
    x = x.astype(np.float64)
    centred = x - x.mean(axis=axis, keepdims=True)
    std = np.sqrt((centred ** 2).mean(axis=axis, keepdims=True) + 1e-5)
    return 1e-5 * np.abs(centred / std) + 2 ** -22 * np.abs(x).max(axis=axis, keepdims=True) / std + 1e-6


@pytest.mark.parametrize("n", SIZES)
def test_layer_norm(rng, n):
    x = rng.standard_normal((7, n), dtype=np.float32) * 3 + 100          # an offset the centring must survive
    weight, bias = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    x64 = x.astype(np.float64)
    centred = x64 - x64.mean(-1, keepdims=True)
    normed = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5)
    tol = norm_tolerance(x)
    for w, b in ((None, None), (weight, None), (None, bias), (weight, bias)):
        expected = normed * (1 if w is None else w) + (0 if b is None else b)
        scale = np.abs(1 if w is None else w)
        out = K.layer_norm(x, n, w, b, 1e-5, out=nan_like(x.shape))
        assert_within(out, expected, tol * scale + 1e-6, f"weight={w is not None} bias={b is not None}")
    assert_within(K.layer_norm(np.asfortranarray(x), n, weight, bias), normed * weight + bias,
                  tol * np.abs(weight) + 1e-6, "strided rows")


def test_layer_norm_over_trailing_dims(rng):
    x = rng.standard_normal((2, 3, 4, 5), dtype=np.float32)
    x64 = x.astype(np.float64).reshape(6, 20)
    centred = x64 - x64.mean(-1, keepdims=True)
    expected = (centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-3)).reshape(x.shape)
    assert_within(K.layer_norm(x, 20, eps=1e-3), expected, 1e-5 * np.abs(expected) + 1e-6, "two dims")


@pytest.mark.parametrize("n", SIZES)
def test_rms_norm(rng, n):
    x = rng.standard_normal((5, n), dtype=np.float32) * 2
    weight = rng.standard_normal(n, dtype=np.float32)
    x64 = x.astype(np.float64)
    normed = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6)
    for w in (None, weight):
        expected = normed * (1 if w is None else w)
        out = K.rms_norm(x, n, w, 1e-6, out=nan_like(x.shape))
        assert_within(out, expected, 1e-5 * np.abs(expected) + 1e-6, f"weight={w is not None}")


@pytest.mark.parametrize("activation", ["none", "relu", "relu6", "gelu", "gelu_tanh", "silu", "hardswish"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 4, 1, 1), (3, 1, 9), (2, 5)])
def test_scale_shift(rng, shape, activation):
    x = rng.standard_normal(shape, dtype=np.float32) * 4
    c = shape[1]
    scale, shift = rng.standard_normal(c, dtype=np.float32), rng.standard_normal(c, dtype=np.float32)
    per_channel = (1, c) + (1,) * (len(shape) - 2)
    z = x * scale.reshape(per_channel) + shift.reshape(per_channel)        # float32, as NumPy's mul_add
    out = K.scale_shift(x, scale, shift, activation, out=nan_like(shape))
    if activation == "none":
        np.testing.assert_array_equal(out, z)
    else:
        expected = activation_reference(z, activation)
        assert_within(out, expected, 2e-6 * np.abs(expected) + 1e-7, activation)


@pytest.mark.parametrize("count", [0, 1, 3, 4, 5, 17])
def test_clamp(rng, count):
    x = rng.standard_normal(count, dtype=np.float32) * 5
    if count > 2:
        x[:3] = [np.nan, np.inf, -np.inf]
    np.testing.assert_array_equal(K.clamp(x, 0.0, 6.0, out=nan_like(x.shape)), np.clip(x, 0, 6))
    np.testing.assert_array_equal(K.clamp(x, -1.5, 1.5), np.clip(x, -1.5, 1.5))


@pytest.mark.parametrize("count", [0, 1, 3, 4, 5, 17])
def test_add(rng, count):
    """add_f32 (a residual connection): the same float32 additions as NumPy's, NaN and infinities too."""
    a, b = (rng.standard_normal(count, dtype=np.float32) * 5 for _ in range(2))
    if count > 2:
        a[:3] = [np.nan, np.inf, -np.inf]
        b[1:3] = [-np.inf, 1.0]
    np.testing.assert_array_equal(K.add(a, b, out=nan_like(a.shape)), a + b)
    np.testing.assert_array_equal(K.add(a[::-1], b), a[::-1] + b)                # a strided operand
