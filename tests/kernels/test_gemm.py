"""gemm_f32 against float64 NumPy: odd shapes around the 4x8 tile and the KC/MC/NC blocks,
strided and transposed operands, every epilogue, batches with broadcast (stride-0) dims.
Tolerance: reference.gemm_reference (1e-5 of sum |a||b|, + 2e-6 of |z| after an activation)."""
import numpy as np
import pytest

from engine.backends.simd import kernels as K
from tests.kernels.reference import activation_reference, assert_within, gemm_reference, nan_like

# (M, K, N): 1s, primes, non-multiples of MR=4/NR=8, K=1, K over KC=256, M over MC=96, N over NC=512
SHAPES = [(1, 1, 1), (1, 7, 1), (7, 1, 5), (1, 13, 17), (13, 1, 1), (5, 3, 2), (4, 8, 8), (6, 16, 9),
          (17, 31, 29), (3, 257, 5), (2, 600, 3), (97, 101, 89), (130, 520, 530), (16, 64, 33), (1, 1280, 1000)]
ACTIVATIONS = ["none", "relu", "relu6", "gelu", "gelu_tanh", "silu", "hardswish"]


def layouts(x: np.ndarray):
    """The same matrix as C-order, Fortran-order (a transposed view), a strided slice, reversed rows."""
    yield "c", x
    yield "f", np.asfortranarray(x)
    padded = np.zeros((x.shape[0], 2 * x.shape[1] + 1), np.float32)
    padded[:, 1::2] = x
    yield "every-other-column", padded[:, 1::2]
    yield "reversed-rows", np.ascontiguousarray(x[::-1])[::-1]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_gemm_shapes_and_layouts(rng, m, k, n):
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    expected, tolerance = gemm_reference(a, b)
    for a_name, a_view in layouts(a):
        for b_name, b_view in layouts(b):
            out = K.gemm(a_view, b_view, out=nan_like((m, n)))
            assert_within(out, expected, tolerance, f"{a_name} @ {b_name}")


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("m,k,n", [(1, 9, 3), (5, 300, 21), (33, 70, 130), (2, 1280, 11)])
def test_gemm_epilogues(rng, m, k, n, activation):
    a = (rng.standard_normal((m, k)) / np.sqrt(k) * 3).astype(np.float32)   # z spans the activations' bends
    b = rng.standard_normal((k, n), dtype=np.float32)
    for bias in (None, rng.standard_normal(n, dtype=np.float32), rng.standard_normal((m, 1), dtype=np.float32),
                 rng.standard_normal((m, n), dtype=np.float32)):
        expected, tolerance = gemm_reference(a, b, bias, activation)
        for b_name, b_view in (("c", b), ("transposed", np.asfortranarray(b))):
            out = K.gemm(a, b_view, bias, activation, out=nan_like((m, n)))
            assert_within(out, expected, tolerance, f"{activation}, bias {None if bias is None else bias.shape}, "
                                                    f"b {b_name}")


def test_epilogue_extremes():
    z = np.array([[-1e30, -100, -20, -5, -1e-3, -0.0, 0.0, 1e-30, 1e-3, 3, 5.9, 6.1, 20, 100, 1e30,
                   np.inf, -np.inf, np.nan]], np.float32)
    eye = np.ones((1, 1), np.float32)
    for activation in ACTIVATIONS:
        with np.errstate(all="ignore"):
            expected = activation_reference(z, activation)
        out = K.gemm(eye, z, activation=activation, out=nan_like(z.shape))
        finite = np.isfinite(expected)
        assert_within(out[finite], expected[finite], 2e-6 * np.abs(expected[finite]) + 1e-37, activation)
        assert np.array_equal(np.isnan(out[0]), np.isnan(expected[0])) or activation in ("gelu_tanh", "silu"), \
            activation                                # x * sigmoid: -inf gives NaN, as torch does


def test_k_zero_gives_the_epilogue_of_zero(rng):
    bias = rng.standard_normal(5, dtype=np.float32)
    out = K.gemm(np.empty((3, 0), np.float32), np.empty((0, 5), np.float32), bias, "relu", out=nan_like((3, 5)))
    np.testing.assert_array_equal(out, np.broadcast_to(np.maximum(bias, 0), (3, 5)))
    assert K.gemm(np.empty((0, 4), np.float32), np.ones((4, 3), np.float32)).shape == (0, 3)
    assert K.gemm(np.ones((2, 4), np.float32), np.empty((4, 0), np.float32)).shape == (2, 0)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((3, 5, 7), (7, 4)),            # b shared by every batch: stride 0
    ((1, 5, 7), (3, 7, 4)),         # a broadcast
    ((4, 9, 17), (4, 17, 10)),      # plain batch
    ((2, 1, 5, 6), (1, 3, 6, 7)),   # two batch dims that do not collapse: one call per leading index
    ((2, 3, 5, 6), (2, 3, 6, 7)),
    ((6, 1, 33), (6, 33, 1)),       # M = N = 1
])
def test_batched(rng, a_shape, b_shape):
    a = rng.standard_normal(a_shape, dtype=np.float32)
    b = rng.standard_normal(b_shape, dtype=np.float32)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    tolerance = 1e-5 * np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    out = K.gemm(a, b, out=nan_like(expected.shape))
    assert_within(out, expected, tolerance, f"{a_shape} @ {b_shape}")
    transposed = K.gemm(a, np.swapaxes(np.swapaxes(b, -1, -2).copy(), -1, -2))
    assert_within(transposed, expected, tolerance, "b transposed")


def test_rejects_what_it_cannot_do(rng):
    with pytest.raises(ValueError, match="do not multiply"):
        K.gemm(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32))
    with pytest.raises(TypeError, match="float32"):
        K.gemm(np.ones((2, 3)), np.ones((3, 5)))
    with pytest.raises(ValueError, match="activation"):
        K.gemm(np.ones((2, 3), np.float32), np.ones((3, 5), np.float32), activation="tanh")
