"""gemm_f16w_f32 (a linear layer's float16 weight, widened inside the kernel) against float64
NumPy of the widened weight: rows of x from a decode step's 1 to an encoder's 1500 (the
dot-product path up to 4 rows, the packed GEMM above), K and N around the 8-wide blocks and
panels, with and without bias, weights with every kind of float16 (normal, zero, subnormal,
inf, NaN). Tolerance: reference.gemm_reference (the float32 GEMM's). Then the layer: F.linear
and F.embedding with a float16 weight on simd (the fused kernel, and a captured graph
replaying it as one native call) against numpy."""
import numpy as np
import pytest

import engine
import engine.nn.functional as F
from engine import graph
from engine.backends.simd import kernels as K
from tests.kernels.reference import assert_within, assert_within_or_nan, gemm_reference, nan_like

ROWS = [1, 2, 3, 5, 17, 64, 1500]
SIZES = [(7, 5), (8, 8), (13, 9), (64, 33), (257, 130), (512, 515), (1000, 3)]      # (K, N)


def half_weight(rng, n, k, special=False):
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float16)
    w.flat[::7] = (rng.standard_normal(w.size)[::7] * 3e-6).astype(np.float16)   # subnormals (< 6.1e-5)
    w.flat[::11] = 0
    w.flat[::13] = -0.0
    if special:                                      # inf and NaN in a few rows
        w[0, k // 2] = np.inf
        w[n // 2, 0] = -np.inf
        w[n - 1, k - 1] = np.nan
    return w


def reference(x, w, bias=None):
    with np.errstate(invalid="ignore"):
        return gemm_reference(x, w.astype(np.float32).T, bias)


@pytest.mark.parametrize("m,k,n", [(m, k, n) for m in ROWS for k, n in SIZES if m * k * n < 2e8])   # + encoder sizes
def test_linear_f16_weight(rng, m, k, n):
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = half_weight(rng, n, k)
    assert (w.view(np.uint16) & 0x7c00 == 0).any() and (w != 0).any()
    for bias in (None, rng.standard_normal(n, dtype=np.float32)):
        expected, tolerance = reference(x, w, bias)
        out = K.linear(x, w, bias, out=nan_like((m, n)))
        assert_within(out, expected, tolerance, f"{m}x{k} by {n}x{k}, bias {bias is not None}")


def test_encoder_sizes(rng):
    """1500 rows by a 512 -> 2048 and a 2048 -> 512 weight (a base encoder's MLP)."""
    for k, n in ((512, 2048), (2048, 512)):
        x = rng.standard_normal((1500, k), dtype=np.float32)
        w, bias = half_weight(rng, n, k), rng.standard_normal(n, dtype=np.float32)
        expected, tolerance = reference(x, w, bias)
        assert_within(K.linear(x, w, bias), expected, tolerance, f"1500x{k} by {n}x{k}")


@pytest.mark.parametrize("m", [1, 2, 5, 64])
def test_inf_and_nan_weights(rng, m):
    k, n = 45, 21
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = half_weight(rng, n, k, special=True)
    expected, tolerance = reference(x, w)
    out = K.linear(x, w, out=nan_like((m, n)))
    infinite = np.isinf(expected)
    assert infinite[:, 0].all() and np.isnan(expected[:, n - 1]).all()
    np.testing.assert_array_equal(out[infinite], expected[infinite])
    finite = np.where(infinite, 0, expected)
    assert_within_or_nan(np.where(infinite, 0, out), finite, np.where(np.isfinite(tolerance), tolerance, 0),
                         f"{m} rows")


def test_large_and_nan_rows(rng):
    """1-4 rows are multiplied as x * 2^112 against w * 2^-112: rows near 2^16, where that copy
    would overflow (the unscaled path), and a NaN"""
    k, n = 40, 9
    w = half_weight(rng, n, k)
    for big in (6e4, 65535.0, 65536.0, 3e38):
        x = rng.standard_normal((3, k)).astype(np.float32)
        x[0, 5], x[2, 17] = big, -big
        expected, tolerance = reference(x, w)
        assert_within(K.linear(x, w, out=nan_like((3, n))), expected, tolerance, f"|x| up to {big}")
    x[1, 3] = np.nan
    out = K.linear(x, w, out=nan_like((3, n)))
    assert np.isnan(out[1]).all() and np.isfinite(out[[0, 2]]).all()


# The dot products of 1-4 rows (a decode step): in WebAssembly and the portable native build the
# lanes holding a zero, subnormal, inf or NaN are zeroed in the fast loop and their 8-blocks listed,
# then added exactly after it (natively with F16C, vcvtph2ps widens everything). K around the
# 8-blocks and its tail, N around the groups of 4 weight rows (and 1 for 3-4 rows of x).
DOT_SIZES = [(1, 1), (3, 5), (7, 3), (8, 9), (9, 1), (15, 7), (16, 13), (17, 4), (40, 6), (383, 9), (384, 11),
             (385, 3), (1000, 7)]


def mixed_halves(rng, n, k, subnormal=0.0, zero=0.0):
    """normal halves (N(0, 0.05)) with a fraction of subnormals (any mantissa, either sign) and of
    signed zeros"""
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float16)
    bits = w.view(np.uint16)
    where = rng.random((n, k)) < subnormal
    bits[where] = (rng.integers(1, 1024, where.sum()) | (rng.integers(0, 2, where.sum()) << 15)).astype(np.uint16)
    where = rng.random((n, k)) < zero
    bits[where] = (rng.integers(0, 2, where.sum()) << 15).astype(np.uint16)
    return w


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5])
def test_few_rows_every_kind_of_half(rng, m):
    """1-5 rows of x against weights with no, few, many and only subnormals (and signed zeros):
    a subnormal-only row's sum is small, so its tolerance would not hide a dropped product"""
    for k, n in DOT_SIZES:
        x = rng.standard_normal((m, k), dtype=np.float32)
        for subnormal, zero in ((0.0, 0.0), (0.005, 0.001), (0.3, 0.1), (1.0, 0.0), (0.0, 1.0)):
            w = mixed_halves(rng, n, k, subnormal, zero)
            bias = rng.standard_normal(n, dtype=np.float32) if k % 2 else None
            expected, tolerance = reference(x, w, bias)
            out = K.linear(x, w, bias, out=nan_like((m, n)))
            assert_within(out, expected, tolerance, f"{m}x{k} by {n}x{k}, subnormal {subnormal}, zero {zero}")


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_few_rows_subnormals_exactly(rng, m):
    """one subnormal in one weight row of a group (the others normal), in the first, a middle and
    the last 8-block and in the K tail: with x = 1 there and 0 elsewhere each sum is that
    subnormal exactly; and every subnormal and signed zero against x = 1 (the exact sum)"""
    k, n = 37, 9
    for at in (0, 13, 31, 32, 36):
        for row in range(n):
            w = mixed_halves(rng, n, k)
            w[row, at] = np.float16(-3 * 2.0 ** -24) if row % 2 else np.float16(1023 * 2.0 ** -24)
            x = np.zeros((m, k), np.float32)
            x[:, at] = 1
            out = K.linear(x, w, out=nan_like((m, n)))
            expected = w[:, at].astype(np.float32)
            np.testing.assert_array_equal(out, np.broadcast_to(expected, (m, n)), f"row {row}, k {at}")
    every = np.arange(0x400, dtype=np.uint16)              # zero and every subnormal mantissa, both signs
    w = np.concatenate([every, every | 0x8000]).view(np.float16).reshape(8, 256)
    x = np.ones((m, 256), np.float32)
    expected = w.astype(np.float64).sum(axis=1)             # multiples of 2^-24 below 2^-6: exact in float32
    np.testing.assert_array_equal(K.linear(x, w, out=nan_like((m, 8))), np.broadcast_to(expected, (m, 8)))


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5])
def test_few_rows_inf_and_nan_among_subnormals(rng, m):
    """an inf or NaN in a group of weight rows that also holds subnormals: that group is computed
    again on the plain path, the other groups are not affected"""
    k, n = 45, 13
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = mixed_halves(rng, n, k, subnormal=0.05, zero=0.02)
    w[1, 9], w[6, 44], w[12, 0] = np.inf, np.nan, -np.inf
    with np.errstate(invalid="ignore"):
        expected, tolerance = reference(x, w)
    out = K.linear(x, w, out=nan_like((m, n)))
    special = [1, 6, 12]
    np.testing.assert_array_equal(out[:, special], expected[:, special])
    rest = [j for j in range(n) if j not in special]
    assert_within(out[:, rest], expected[:, rest], tolerance[:, rest], f"{m} rows")


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_few_rows_epilogue(rng, m):
    """bias and GELU on the dot products' results, N not a multiple of the groups"""
    k, n = 70, 11
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = mixed_halves(rng, n, k, subnormal=0.01)
    bias = rng.standard_normal(n, dtype=np.float32)
    out = K._gemm_2d(x, K._strides(x), w, (1, k), m, n, k, bias, "gelu", nan_like((m, n)), "gemm_f16w_f32")
    assert_within(out, *gemm_reference(x, w.astype(np.float32).T, bias, "gelu"), f"{m} rows, gelu")


def test_strided_weight_and_rows(rng):
    """a weight view with a row stride (every other row of a stacked weight) and a transposed one"""
    x = rng.standard_normal((3, 40), dtype=np.float32)
    stacked = half_weight(rng, 22, 40)
    for w in (stacked[::2], np.asfortranarray(stacked)):
        for rows in (x[:1], x, np.repeat(x, 3, axis=0)):
            expected, tolerance = reference(rows, w)
            assert_within(K.linear(rows, w), expected, tolerance, f"{w.strides}, {rows.shape[0]} rows")


def test_bad_shapes():
    with pytest.raises(ValueError, match="do not multiply"):
        K.linear(np.ones((2, 3), np.float32), np.ones((4, 5), np.float16))


@pytest.mark.parametrize("shape", [(1, 1, 64), (2, 5, 64), (300, 64)])
def test_functional_linear_on_simd_equals_numpy(rng, shape):
    x = rng.standard_normal(shape, dtype=np.float32)
    w = half_weight(rng, 33, 64)
    for bias in (None, rng.standard_normal(33, dtype=np.float32), rng.standard_normal(33).astype(np.float16)):
        tensors = {d: (engine.from_numpy(x, d), engine.from_numpy(w, d),
                       None if bias is None else engine.from_numpy(bias, d)) for d in ("numpy", "simd")}
        out = {d: F.linear(*t) for d, t in tensors.items()}
        assert out["simd"].dtype is engine.float32 and out["simd"].shape == shape[:-1] + (33,)
        b64 = None if bias is None else bias.astype(np.float64)
        expected, tolerance = reference(x.reshape(-1, 64), w, b64)
        assert_within(out["simd"].numpy().reshape(-1, 33), expected, tolerance, "simd")
        assert_within(out["numpy"].numpy().reshape(-1, 33), expected, tolerance, "numpy (widened, then multiplied)")


def test_captured_step_replays_the_kernel_natively(rng):
    """a decode step's head: the float16 weight is the graph's parameter, read in place by the
    recorded C call (no float32 copy that the replay would have to make again)"""
    w = engine.from_numpy(half_weight(rng, 101, 48), "simd")
    bias = engine.from_numpy(rng.standard_normal(101, dtype=np.float32), "simd")
    xs = rng.standard_normal((4, 1, 48), dtype=np.float32)
    g, first = graph.capture(lambda x: F.linear(x, w, bias), engine.from_numpy(xs[0], "simd"))
    assert g.ops == 1 and g.prepared["native"] == 1, g.prepared
    w64 = w.numpy().astype(np.float64)
    for t, x in enumerate(xs):
        got = first if t == 0 else g.replay(x)
        expected, tolerance = reference(x, w64.astype(np.float16), bias.numpy())
        assert_within(got.numpy(), expected, tolerance, f"step {t}")


def test_embedding_rows_of_a_float16_table(rng):
    """F.embedding of a float16 table gathers float16 rows; widened with .float() they are the
    table's rows exactly (the token embedding is also the output head)"""
    table = half_weight(rng, 50, 24, special=True)
    ids = np.array([[3, 0, 49, 25], [0, 0, 7, 1]])
    for device in ("numpy", "simd"):
        rows = F.embedding(engine.from_numpy(ids, device), engine.from_numpy(table, device)).float()
        assert rows.dtype is engine.float32
        np.testing.assert_array_equal(rows.numpy().view(np.uint32), table[ids].astype(np.float32).view(np.uint32))
    with pytest.raises(IndexError):
        F.embedding(engine.from_numpy(np.array([50]), "simd"), engine.from_numpy(table, "simd")).numpy()
