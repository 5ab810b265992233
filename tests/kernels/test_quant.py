"""The quantized kernels of the simd backend (wasm_kernels/quant*.c) against the NumPy reference
(engine/backends/numpy/quantized.py): linear_q within the int8-activation tolerance of
reference.linear_q_reference (the worst case of quantizing x per block of 32, + float32 sums),
embedding_q bit for bit equal to engine.quants.dequantize. Every computable GGML type, odd
shapes, strided and batched x, with and without bias; through the wrapper and the public API."""
import gguf
import numpy as np
import pytest

import engine
import engine.nn.functional as F
from engine import quants
from engine.backends.numpy import quantized as reference_kernels
from engine.backends.simd import quantized as Q
from engine.quantized import QuantizedTensor
from tests.kernels.reference import GEMM_RTOL, linear_q_reference, random_blocks

TYPES = Q.TYPES
SMALL = [t for t in TYPES if quants.BY_NAME[t].block_size == 32]


def columns(qtype, blocks_of_256=(1, 3)):
    """Row lengths to test: several blocks, and a count of blocks that is not a multiple of 4."""
    if quants.BY_NAME[qtype].block_size == 256:
        return [256 * n for n in blocks_of_256]
    return [32 * 7, 576]                               # 7 blocks: one group of 4 and a tail of 3


def bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def assert_linear(actual, x, weight, qtype, rows, cols, bias=None, what=""):
    """Within the stated tolerance of the exact product, and of the NumPy kernel's float32 one."""
    w = quants.dequantize(weight, qtype).reshape(rows, cols)
    expected, tolerance = linear_q_reference(x, w, bias)
    assert actual.shape == expected.shape and actual.dtype == np.float32, what
    error = np.abs(actual - expected)
    assert (error <= tolerance).all(), f"{what}: worst error / tolerance {np.max(error / tolerance):.3g}"
    numpy = reference_kernels.linear_q(x, *([bias] if bias is not None else []), weight=weight, qtype=qtype,
                                       rows=rows, cols=cols)
    magnitude = np.abs(x.astype(np.float64).reshape(-1, cols)) @ np.abs(w.astype(np.float64)).T
    assert (np.abs(actual - numpy) <= tolerance + GEMM_RTOL * magnitude.reshape(tolerance.shape)).all(), what


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("m", [1, 3, 37])
def test_linear_q_matches_reference(qtype, m, rng):
    for rows in (1, 5, 67):
        for cols in columns(qtype):
            weight = random_blocks(qtype, rows, cols, rng)
            x = rng.standard_normal((m, cols)).astype(np.float32) * rng.uniform(0.1, 10, (m, 1)).astype(np.float32)
            bias = rng.standard_normal(rows).astype(np.float32)
            out = Q.linear_q(x, bias, weight=weight, qtype=qtype, rows=rows, cols=cols)
            assert_linear(out, x, weight, qtype, rows, cols, bias, f"{qtype} {m}x{cols} @ {rows}")
            out = Q.linear_q(x, weight=weight, qtype=qtype, rows=rows, cols=cols)
            assert_linear(out, x, weight, qtype, rows, cols, None, f"{qtype} {m}x{cols} @ {rows} no bias")


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("m", [2, 3, 5, 9, 37])
def test_many_rows_give_each_row_what_it_gets_alone(qtype, m, rng):
    """Bit for bit: rows of x multiplied together (a prompt: panels, or four at a time) equal the
    same rows one at a time (decoding), so a chat that feeds a prompt whole and one that reuses
    its cache and feeds the last token alone cannot drift apart. Every tail: 1 to 3 blocks past
    a multiple of 4, and none."""
    counts = (1, 2, 3, 4, 5, 6, 7, 18) if quants.BY_NAME[qtype].block_size == 32 else (1, 2, 3)
    for n in counts:
        cols = n * quants.BY_NAME[qtype].block_size
        for rows in (1, 3, 8):
            weight = random_blocks(qtype, rows, cols, rng)
            x = rng.standard_normal((m, cols)).astype(np.float32) * rng.uniform(0.1, 10, (m, 1)).astype(np.float32)
            bias = rng.standard_normal(rows).astype(np.float32)
            for b in ((bias,), ()):
                together = Q.linear_q(x, *b, weight=weight, qtype=qtype, rows=rows, cols=cols)
                alone = np.concatenate([Q.linear_q(x[i:i + 1], *b, weight=weight, qtype=qtype, rows=rows, cols=cols)
                                        for i in range(m)])
                np.testing.assert_array_equal(bits(together), bits(alone), f"{qtype} {m}x{cols} @ {rows}")


@pytest.mark.parametrize("qtype", TYPES)
def test_linear_q_batch_dims_and_strided_x(qtype, rng):
    cols, rows = columns(qtype)[-1], 9
    weight = random_blocks(qtype, rows, cols, rng)
    wide = rng.standard_normal((2, 3, 2 * cols)).astype(np.float32)
    for x in (wide[..., :cols],                        # rows 2*cols apart
              wide[..., ::2],                          # elements 2 apart: copied first
              np.swapaxes(wide[..., :cols].copy(), 0, 1),   # leading dims that do not collapse
              wide[0, 0, :cols]):                      # one vector, no leading dims
        out = Q.linear_q(x, weight=weight, qtype=qtype, rows=rows, cols=cols)
        assert out.shape == x.shape[:-1] + (rows,)
        assert_linear(out, x, weight, qtype, rows, cols, what=f"{qtype} x {x.shape} strides {x.strides}")


@pytest.mark.parametrize("qtype", ["q4_1", "q8_0", "q6_k"])
def test_linear_q_special_values(qtype, rng):
    cols, rows = columns(qtype)[0], 6
    weight = random_blocks(qtype, rows, cols, rng)
    bias = rng.standard_normal(rows).astype(np.float32)
    zeros = Q.linear_q(np.zeros((2, cols), np.float32), bias, weight=weight, qtype=qtype, rows=rows, cols=cols)
    np.testing.assert_array_equal(zeros, np.broadcast_to(bias, (2, rows)))     # x = 0: exactly the bias
    x = rng.standard_normal((3, cols)).astype(np.float32)
    x[1, 5], x[2, -1] = np.nan, np.inf
    out = Q.linear_q(x, weight=weight, qtype=qtype, rows=rows, cols=cols)
    assert np.isfinite(out[0]).all() and np.isnan(out[1]).all() and not np.isfinite(out[2]).any()
    tiny = np.full((1, cols), 1e-38, np.float32)                               # subnormal steps: no inf/NaN
    assert np.isfinite(Q.linear_q(tiny, weight=weight, qtype=qtype, rows=rows, cols=cols)).all()
    assert Q.linear_q(np.zeros((0, cols), np.float32), weight=weight, qtype=qtype, rows=rows,
                      cols=cols).shape == (0, rows)


@pytest.mark.parametrize("qtype", SMALL)
def test_linear_q_on_gguf_quantized_weights(qtype, rng):
    """Weights as llama.cpp's quantizer makes them: error typically ~1e-3 of sum |x| |w|."""
    rows, cols = 48, 576
    dense = rng.standard_normal((rows, cols)).astype(np.float32) * 0.05
    weight = gguf.quants.quantize(dense, getattr(gguf.GGMLQuantizationType, qtype.upper())).reshape(-1)
    x = rng.standard_normal((4, cols)).astype(np.float32)
    out = Q.linear_q(x, weight=weight, qtype=qtype, rows=rows, cols=cols)
    assert_linear(out, x, weight, qtype, rows, cols, what=qtype)
    w = quants.dequantize(weight, qtype).reshape(rows, cols).astype(np.float64)
    relative = np.abs(out - x.astype(np.float64) @ w.T) / (np.abs(x.astype(np.float64)) @ np.abs(w).T)
    assert relative.max() < 4e-3


@pytest.mark.parametrize("qtype", TYPES)
def test_embedding_q_bit_exact(qtype, rng):
    for rows in (1, 7):
        for cols in columns(qtype, (1, 2)):
            weight = random_blocks(qtype, rows, cols, rng, exponents=(-7, 4.5))   # f16's whole range
            table = quants.dequantize(weight, qtype).reshape(rows, cols)
            for ids in (np.array(rows - 1), rng.integers(0, rows, 5), rng.integers(0, rows, (2, 3)),
                        np.zeros(0, np.int64)):
                out = Q.embedding_q(ids, weight=weight, qtype=qtype, rows=rows, cols=cols)
                assert out.shape == ids.shape + (cols,) and out.dtype == np.float32
                np.testing.assert_array_equal(bits(out), bits(table[ids]), err_msg=f"{qtype} {rows}x{cols} {ids}")


def test_embedding_q_out_of_range():
    weight = random_blocks("q4_0", 5, 64, np.random.default_rng(0))
    for ids, bad in (([0, 5, 1], 5), ([[1, 2], [-1, 7]], -1)):
        message = f"index {bad} is out of range for 5 rows"
        with pytest.raises(IndexError, match=message):
            reference_kernels.embedding_q(np.array(ids), weight=weight, qtype="q4_0", rows=5, cols=64)
        with pytest.raises(IndexError, match=message):
            Q.embedding_q(np.array(ids), weight=weight, qtype="q4_0", rows=5, cols=64)


def test_wrong_weight_is_refused():
    weight = np.zeros(18 * 3, np.uint8)
    with pytest.raises(ValueError, match="expected 36 contiguous bytes"):
        Q.linear_q(np.zeros((1, 64), np.float32), weight=weight, qtype="q4_0", rows=1, cols=64)
    with pytest.raises(ValueError, match="not 'q8_1'"):
        Q.embedding_q(np.zeros(1, np.int64), weight=weight, qtype="q8_1", rows=1, cols=32)


# --- through the public API -------------------------------------------------------------------------
def test_simd_backend_runs_the_c_kernels():
    from engine.backends.numpy.backend import NumpyBackend
    from engine.backends.simd.backend import SimdBackend
    assert SimdBackend.fused["linear_q"] is Q.linear_q and SimdBackend.fused["embedding_q"] is Q.embedding_q
    assert SimdBackend.quantized_in is NumpyBackend.quantized_in      # GGML bytes shared with numpy


@pytest.mark.parametrize("qtype", ["q4_1", "q8_0", "q5_0", "q3_k", "q4_k", "q6_k"])
def test_functional_linear_and_embedding(qtype, rng):
    rows, cols = 40, columns(qtype)[0]
    raw = random_blocks(qtype, rows, cols, rng)
    on_numpy = QuantizedTensor.from_raw(raw, qtype, (rows, cols), name="w")
    on_simd = on_numpy.to("simd")
    assert on_simd.device == "simd" and on_simd._buf is on_numpy._buf      # moving is free
    x = rng.standard_normal((2, 3, cols)).astype(np.float32)
    bias = rng.standard_normal(rows).astype(np.float32)
    out = F.linear(engine.from_numpy(x, "simd"), on_simd, engine.from_numpy(bias, "simd"))
    assert out.device == "simd" and out.shape == (2, 3, rows)
    assert_linear(out.numpy(), x, raw, qtype, rows, cols, bias, qtype)
    ids = np.array([[3, 0, rows - 1]])
    got = F.embedding(engine.from_numpy(ids, "simd"), on_simd).numpy()
    want = F.embedding(engine.from_numpy(ids), on_numpy).numpy()
    np.testing.assert_array_equal(bits(got), bits(want))
    np.testing.assert_array_equal(bits(on_simd.dequantize().numpy()), bits(on_numpy.dequantize().numpy()))
    with pytest.raises(IndexError, match=f"index {rows} is out of range for {rows} rows"):
        F.embedding(engine.from_numpy(np.array([rows]), "simd"), on_simd)
