"""The quantized kernels (linear_q, embedding_q) in WGSL against the NumPy reference, every type.

Blocks are random bytes with their f16 scales (and mins) overwritten by finite values spanning
f16's range, subnormals and zeros included: every bit pattern of quants and sub-block scales is
reachable. Shapes are chosen so that the block count is odd (the lone f16 scales of q4_0, q5_0,
q8_0, q3_k and q6_k sit two to a word) and the weight rows fill no workgroup evenly.

Tolerances: embedding_q and dequantize() equal engine.quants bit for bit. linear_q is compared
with the float64 product of the dequantized weight: |y - y_ref| <= LINEAR_RTOL * (sum_k |x_k
w_nk| + |bias_n|); float32 accumulation of the cols products in any order keeps within
cols * 2^-24 times that sum, and in practice within a few 2^-24 * sqrt(cols).
"""
from __future__ import annotations

import numpy as np
import pytest

import engine
import engine.nn.functional as F
from engine.errors import UnknownDtype
from engine import quants
from engine.quantized import QuantizedTensor

TYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k")
FAST = ("q4_0", "q4_1", "q8_0", "q4_k", "q6_k")            # the types every shape runs on
SCALES = {"q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,), "q5_1": (0, 2), "q8_0": (0,),   # f16 byte offsets
          "q2_k": (80, 82), "q3_k": (108,), "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,)}
ROWS = 37
LINEAR_RTOL = 1e-6


def random_blocks(qtype: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """GGML bytes of a (rows, cols) tensor: random quants, finite random f16 scales."""
    kind = quants.BY_NAME[qtype]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (rows * cols // kind.block_size, kind.type_size), dtype=np.uint8)
    for offset in SCALES[qtype]:
        scale = (np.float32(10.0) ** rng.uniform(-7, 3, len(blocks)) * rng.choice([-1, 1], len(blocks)))
        scale = scale.astype(np.float16)
        scale[rng.random(len(blocks)) < 0.1] = 0
        blocks[:, offset:offset + 2] = scale.reshape(-1, 1).view(np.uint8)
    return blocks.reshape(-1)


def cols_for(qtype: str) -> int:
    """Rows of an odd number of blocks: 9 blocks of 32, or 3 super-blocks of 256."""
    return 3 * 256 if quants.BY_NAME[qtype].block_size == 256 else 9 * 32


@pytest.fixture(scope="module")
def weights(gpu):
    """qtype -> (qtype, GGML bytes, dequantized (ROWS, cols) float32, the tensor on webgpu)."""
    made = {}

    def make(qtype):
        if qtype not in made:
            cols = cols_for(qtype)
            raw = random_blocks(qtype, ROWS, cols, seed=TYPES.index(qtype))
            on_gpu = QuantizedTensor.from_raw(raw, qtype, (ROWS, cols)).to("webgpu")
            made[qtype] = qtype, raw, quants.dequantize(raw, qtype).reshape(ROWS, cols), on_gpu
        return made[qtype]
    return make


@pytest.fixture(params=TYPES)
def weight(request, weights):
    return weights(request.param)


def bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def test_moving_keeps_the_bytes(weight):
    qtype, raw, _, on_gpu = weight
    assert on_gpu.device == "webgpu" and on_gpu.qtype == qtype
    assert np.array_equal(on_gpu.raw, raw)
    back = on_gpu.to("numpy")
    assert back.device == "numpy" and np.array_equal(back.raw, raw)
    direct = QuantizedTensor.from_raw(raw, qtype, (ROWS, cols_for(qtype)), "webgpu")
    assert np.array_equal(direct.raw, raw)


def test_dequantize_is_bit_exact(weight):
    _, _, dense, on_gpu = weight
    out = on_gpu.dequantize()
    assert out.device == "webgpu" and tuple(out.shape) == dense.shape
    assert np.array_equal(bits(out.numpy()), bits(dense))


def test_embedding_is_bit_exact(weight):
    _, _, dense, on_gpu = weight
    ids = np.array([[5, 0, 36], [5, 17, 2]])                 # repeats, the first and last rows
    got = F.embedding(engine.from_numpy(ids, "webgpu"), on_gpu).numpy()
    assert got.shape == (2, 3, dense.shape[1])
    assert np.array_equal(bits(got), bits(dense[ids]))
    want = F.embedding(engine.from_numpy(ids, "numpy"), on_gpu.to("numpy")).numpy()
    assert np.array_equal(bits(got), bits(want))


def check_linear(x: np.ndarray, dense: np.ndarray, bias, got) -> None:
    want = x.astype(np.float64) @ dense.T.astype(np.float64)
    size = np.abs(x).astype(np.float64) @ np.abs(dense).T.astype(np.float64)
    if bias is not None:
        want, size = want + bias, size + np.abs(bias)
    assert got.shape == want.shape
    assert (np.abs(got - want) <= LINEAR_RTOL * size).all(), float(np.max(np.abs(got - want) / size))


# (shape of x (-1: cols), with bias): 1 and 3 rows stream the weights once, 6 and 37 rows take
# the tiled product; the shapes between on the main types
SHAPES = [((-1,), False), ((ROWS, -1), True)]
MORE_SHAPES = [((3, -1), True), ((2, 3, -1), False)]


@pytest.mark.parametrize("qtype,shape,with_bias", [(q, *s) for q in TYPES for s in SHAPES] +
                         [(q, *s) for q in FAST for s in MORE_SHAPES],
                         ids=lambda v: "x".join(str(n) for n in v).replace("-1", "cols") if isinstance(v, tuple)
                         else {True: "bias", False: "no_bias"}.get(v, v))
def test_linear(weights, rng, qtype, shape, with_bias):
    qtype, _, dense, on_gpu = weights(qtype)
    cols = dense.shape[1]
    x = rng.standard_normal(tuple(cols if n == -1 else n for n in shape), dtype=np.float32)
    bias = rng.standard_normal(ROWS, dtype=np.float32) * 100 if with_bias else None
    got = F.linear(engine.from_numpy(x, "webgpu"), on_gpu,
                   engine.from_numpy(bias, "webgpu") if with_bias else None).numpy()
    check_linear(x.reshape(-1, cols), dense, bias, got.reshape(-1, ROWS))
    assert got.shape == x.shape[:-1] + (ROWS,)


# The tiled product (more than 4 rows of x): on a software adapter (lavapipe here) one row tile
# covering x's rows by 128 weight rows (1x8, 4x8 and 8x8 results a thread at 5, 37 and 128 rows);
# on a GPU float32's tiles (kernels.TILES), each forced below. Weight rows TALL: odd, past one
# 128-column tile.
TALL = 131


@pytest.fixture(scope="module")
def tall_weights(gpu):
    made = {}

    def make(qtype):
        if qtype not in made:
            cols = cols_for(qtype)
            raw = random_blocks(qtype, TALL, cols, seed=20 + TYPES.index(qtype))
            made[qtype] = quants.dequantize(raw, qtype).reshape(TALL, cols), QuantizedTensor.from_raw(
                raw, qtype, (TALL, cols), "webgpu")
        return made[qtype]
    return make


@pytest.mark.parametrize("rows", [5, 37, 128])
@pytest.mark.parametrize("qtype", TYPES)
def test_linear_tiled(tall_weights, rng, qtype, rows):
    dense, w = tall_weights(qtype)
    x = rng.standard_normal((rows, dense.shape[1]), dtype=np.float32)
    bias = rng.standard_normal(TALL, dtype=np.float32)
    got = F.linear(engine.from_numpy(x, "webgpu"), w, engine.from_numpy(bias, "webgpu")).numpy()
    check_linear(x, dense, bias, got)


@pytest.mark.parametrize("qtype", ["q4_0", "q5_1", "q8_0", "q2_k", "q4_k", "q6_k"])
def test_linear_every_tiling(tall_weights, rng, monkeypatch, qtype):
    """Each tile configuration forced (as the GEMM shader checks force them), with x rows and weight
    rows that fill no tile evenly."""
    from engine.backends.webgpu import kernels as K
    dense, w = tall_weights(qtype)
    for tiles in K.TILES:
        monkeypatch.setattr(K, "FORCE_TILES", tiles)
        for rows in (5, 37, 130):
            x = rng.standard_normal((rows, dense.shape[1]), dtype=np.float32)
            check_linear(x, dense, None, F.linear(engine.from_numpy(x, "webgpu"), w).numpy())


@pytest.mark.parametrize("qtype", ["q4_1", "q6_k"])
def test_linear_on_views(gpu, rng, qtype):
    """Rows of x sliced out of a wider tensor (read in place), and x transposed or starting off a
    vec4 boundary (copied first)."""
    cols = cols_for(qtype)
    raw = random_blocks(qtype, ROWS, cols, seed=7)
    dense = quants.dequantize(raw, qtype).reshape(ROWS, cols)
    w = QuantizedTensor.from_raw(raw, qtype, (ROWS, cols), "webgpu")
    wide = engine.from_numpy(rng.standard_normal((5, cols + 4), dtype=np.float32), "webgpu")
    tall = engine.from_numpy(rng.standard_normal((cols, 3), dtype=np.float32), "webgpu")
    for x in (wide[:, 4:], wide[1:2, 4:], wide[:, 1:cols + 1], tall.T, wide[:4, 4:]):
        check_linear(x.numpy(), dense, None, F.linear(x, w).numpy())


def test_bad_ids_raise_index_error(gpu):
    raw = random_blocks("q8_0", ROWS, 64)
    w = QuantizedTensor.from_raw(raw, "q8_0", (ROWS, 64), "webgpu")
    for ids in ([0, ROWS], [-1, 3]):
        with pytest.raises(IndexError, match=str(ids[0] if ids[0] < 0 else ids[1])):
            F.embedding(engine.from_numpy(np.array(ids), "webgpu"), w)
    computed = engine.from_numpy(np.array([1, 2]), "webgpu") * 20   # no host copy: read back
    assert computed._buf.host is None
    with pytest.raises(IndexError, match="40"):
        F.embedding(computed, w)


def test_types_without_kernels_still_move(gpu):
    raw = np.random.default_rng(0).integers(0, 256, 2 * 136, dtype=np.uint8)       # iq4_xs, 2 x 256
    w = QuantizedTensor.from_raw(raw, "iq4_xs", (2, 256), "webgpu")
    assert np.array_equal(w.raw, raw) and np.array_equal(w.to("numpy").raw, raw)
    with pytest.raises(UnknownDtype, match="iq4_xs"):
        F.linear(engine.from_numpy(np.zeros((1, 256), np.float32), "webgpu"), w)
