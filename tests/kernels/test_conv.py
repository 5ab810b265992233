"""conv2d_f32 (im2col + GEMM, direct 1x1, direct depthwise), depthwise_conv2d_f32 and im2col_f32
against the numpy backend's convolution run in float64. Tolerance: 1e-5 of the same convolution
of |x| and |w| (+ |bias|), plus 2e-6 of |z| after an activation (reference.gemm_reference's rule)."""
import numpy as np
import pytest

from engine.backends.numpy.kernels import _conv2d as numpy_conv2d
from engine.backends.simd import kernels as K
from tests.kernels.reference import (ACTIVATION_RTOL, GEMM_RTOL, activation_reference, assert_within, nan_like)

# (N, C, H, W, O, kh, kw, stride, ((top, bottom), (left, right)), dilation, groups)
CASES = [
    (1, 1, 5, 5, 1, 3, 3, (1, 1), ((0, 0), (0, 0)), (1, 1), 1),
    (2, 3, 9, 11, 6, 3, 3, (2, 2), ((1, 1), (1, 1)), (1, 1), 1),
    (1, 4, 7, 7, 8, 1, 1, (1, 1), ((0, 0), (0, 0)), (1, 1), 1),          # direct 1x1: x is B as it lies
    (2, 5, 9, 9, 3, 1, 1, (2, 2), ((0, 0), (0, 0)), (1, 1), 1),          # strided 1x1: through im2col
    (1, 4, 6, 6, 4, 1, 1, (1, 1), ((1, 0), (0, 1)), (1, 1), 1),          # padded 1x1
    (3, 6, 8, 10, 4, 3, 2, (2, 1), ((1, 1), (2, 2)), (1, 2), 2),         # groups, anisotropic everything
    (1, 8, 13, 13, 8, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 8),        # depthwise 3x3
    (2, 5, 16, 12, 5, 5, 5, (2, 2), ((1, 2), (1, 2)), (1, 1), 5),        # depthwise 5x5 stride 2, TF SAME pads
    (1, 3, 11, 9, 3, 3, 3, (1, 2), ((3, 3), (0, 2)), (3, 2), 3),         # depthwise dilated, strided
    (1, 4, 10, 10, 8, 3, 3, (1, 1), ((1, 1), (1, 1)), (2, 2), 4),        # channel multiplier 2: grouped GEMM
    (1, 3, 6, 6, 2, 6, 6, (1, 1), ((0, 0), (0, 0)), (1, 1), 1),          # kernel as large as the input
    (1, 2, 4, 4, 3, 3, 3, (3, 3), ((2, 2), (2, 2)), (1, 1), 1),          # taps entirely in the padding
    (2, 32, 14, 14, 64, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1),      # MNIST-sized
    (1, 7, 23, 29, 7, 3, 3, (2, 2), ((0, 1), (0, 1)), (1, 1), 7),        # odd plane, depthwise, SAME stride 2
    (1, 17, 3, 2, 5, 1, 1, (1, 1), ((0, 0), (0, 0)), (1, 1), 1),         # plane smaller than a tile
    # the columns made in the GEMM's panels: two k blocks (depth 288 > 256), panels inside the image,
    # by its edges, across output rows (wo 37); stride 2 on wide rows; dilated taps; grouped
    (1, 32, 19, 37, 20, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    (1, 6, 21, 90, 9, 3, 3, (2, 2), ((1, 1), (1, 1)), (1, 1), 1),
    (1, 5, 24, 70, 6, 3, 3, (2, 2), ((1, 0), (1, 0)), (1, 1), 1),
    (1, 4, 20, 52, 7, 3, 3, (1, 1), ((2, 2), (2, 2)), (2, 2), 1),
    (1, 64, 12, 40, 70, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 2),
]


def reference(x, w, bias, stride, pads, dilation, groups, activation="none"):
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    padded = np.pad(x64, ((0, 0), (0, 0)) + tuple(pads))
    z = numpy_conv2d(padded, w64, dtype=None, stride=stride, dilation=dilation, groups=groups)
    scale = numpy_conv2d(np.abs(padded), np.abs(w64), dtype=None, stride=stride, dilation=dilation, groups=groups)
    if bias is not None:
        z, scale = z + bias.reshape(-1, 1, 1), scale + np.abs(bias.astype(np.float64)).reshape(-1, 1, 1)
    return activation_reference(z, activation), 1.13 * GEMM_RTOL * scale + ACTIVATION_RTOL * np.abs(z) + 1e-30


def make(rng, n, c, h, w, o, kh, kw, groups):
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    weight = (rng.standard_normal((o, c // groups, kh, kw)) / np.sqrt(c // groups * kh * kw)).astype(np.float32)
    return x, weight, rng.standard_normal(o, dtype=np.float32)


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_conv2d(rng, case):
    n, c, h, w, o, kh, kw, stride, pads, dilation, groups = case
    x, weight, bias = make(rng, n, c, h, w, o, kh, kw, groups)
    for b in (None, bias):
        expected, tolerance = reference(x, weight, b, stride, pads, dilation, groups)
        out = K.conv2d(x, weight, b, stride, pads, dilation, groups, out=nan_like(expected.shape))
        assert_within(out, expected, tolerance, f"bias={b is not None}")
    prepadded = np.pad(x, ((0, 0), (0, 0)) + pads)          # explicit pads == zeros already in the input
    np.testing.assert_array_equal(K.conv2d(prepadded, weight, bias, stride, 0, dilation, groups),
                                  K.conv2d(x, weight, bias, stride, pads, dilation, groups))


@pytest.mark.parametrize("activation", ["none", "relu", "relu6", "gelu", "gelu_tanh", "silu", "hardswish"])
def test_conv2d_epilogue(rng, activation):
    for case in (CASES[1], CASES[2], CASES[6]):               # im2col, direct 1x1, depthwise
        n, c, h, w, o, kh, kw, stride, pads, dilation, groups = case
        x, weight, bias = make(rng, n, c, h, w, o, kh, kw, groups)
        x *= 3
        expected, tolerance = reference(x, weight, bias, stride, pads, dilation, groups, activation)
        out = K.conv2d(x, weight, bias, stride, pads, dilation, groups, activation, out=nan_like(expected.shape))
        assert_within(out, expected, tolerance, activation)


@pytest.mark.parametrize("case", [c for c in CASES if c[10] == c[1] == c[4]], ids=lambda c: f"{c[5]}x{c[6]}s{c[7]}")
@pytest.mark.parametrize("activation", ["none", "relu6", "silu", "hardswish"])
def test_depthwise_export(rng, case, activation):
    n, c, h, w, o, kh, kw, stride, pads, dilation, groups = case
    x, weight, bias = make(rng, n, c, h, w, o, kh, kw, groups)
    expected, tolerance = reference(x, weight, bias, stride, pads, dilation, groups, activation)
    out = K.depthwise_conv2d(x, weight, bias, stride, pads, dilation, activation, out=nan_like(expected.shape))
    assert_within(out, expected, tolerance, "depthwise")
    np.testing.assert_array_equal(out, K.conv2d(x, weight, bias, stride, pads, dilation, groups, activation))


def test_depthwise_on_large_planes(rng):
    """Many vectors per row and every border column: EfficientNet's 112x112 depthwise layers."""
    x, weight, bias = make(rng, 1, 4, 112, 112, 4, 3, 3, 4)
    for stride, pads in (((1, 1), ((1, 1), (1, 1))), ((2, 2), ((0, 1), (0, 1)))):
        expected, tolerance = reference(x, weight, bias, stride, pads, (1, 1), 4, "relu6")
        out = K.depthwise_conv2d(x, weight, bias, stride, pads, 1, "relu6", out=nan_like(expected.shape))
        assert_within(out, expected, tolerance, f"stride {stride}")


@pytest.mark.parametrize("case", CASES[:6], ids=[f"case{i}" for i in range(6)])
def test_im2col(rng, case):
    _, c, h, w, _, kh, kw, (sh, sw), pads, (dh, dw), _ = case
    x = rng.standard_normal((c, h, w), dtype=np.float32)
    padded = np.pad(x, ((0, 0),) + pads)
    ho = (padded.shape[1] - dh * (kh - 1) - 1) // sh + 1
    wo = (padded.shape[2] - dw * (kw - 1) - 1) // sw + 1
    expected = np.stack([padded[ch, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw]
                         for ch in range(c) for i in range(kh) for j in range(kw)]).reshape(c * kh * kw, ho * wo)
    out = K.im2col(x, (kh, kw), (sh, sw), pads, (dh, dw), out=nan_like(expected.shape))
    np.testing.assert_array_equal(out, expected)               # a copy: exact


def test_conv2d_rejects_bad_geometry():
    x, w = np.ones((1, 2, 3, 3), np.float32), np.ones((2, 2, 5, 5), np.float32)
    with pytest.raises(ValueError, match="smaller than the kernel"):
        K.conv2d(x, w)
    with pytest.raises(ValueError, match="do not match"):
        K.conv2d(x, np.ones((2, 3, 1, 1), np.float32))
    with pytest.raises(ValueError, match="stride"):
        K.conv2d(x, np.ones((2, 2, 1, 1), np.float32), stride=0)
