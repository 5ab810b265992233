"""K-quant dequantization (Q2_K..Q6_K): bit for bit equal to gguf-py's dequantizers.

gguf-py 0.19 cannot quantize K types (NotImplementedError), so the blocks are random
bytes with the f16 super-scales overwritten by finite values: every bit pattern of the
packed quants and 6-bit scales is reachable, and the scales span f16's range.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize as their_dequantize

from engine import dtypes
from engine.errors import WeightsError
from engine import quants
from engine.formats.gguf import load_gguf
from engine.quantized import QuantizedTensor

# type -> (bytes per super-block of 256, byte offsets of its f16 scales), from ggml-common.h
K_TYPES = {
    Q.Q2_K: (84, (80, 82)),     # scales[16] qs[64] d dmin
    Q.Q3_K: (110, (108,)),      # hmask[32] qs[64] scales[12] d
    Q.Q4_K: (144, (0, 2)),      # d dmin scales[12] qs[128]
    Q.Q5_K: (176, (0, 2)),      # d dmin scales[12] qh[32] qs[128]
    Q.Q6_K: (210, (208,)),      # ql[128] qh[64] scales[16] d
}
SHAPES = [(256,), (1, 256), (3, 512), (2, 3, 256), (2, 1, 2, 768)]      # torch order


def random_blocks(qtype, shape, seed=0) -> np.ndarray:
    """Raw blocks for a tensor of `shape`: (*shape[:-1], row bytes) uint8."""
    size, scale_offsets = K_TYPES[qtype]
    rng = np.random.default_rng(seed)
    rows, n = int(np.prod(shape[:-1], dtype=np.int64)), shape[-1] // 256
    blocks = rng.integers(0, 256, (rows * n, size), dtype=np.uint8)
    blocks[0, :] = 0xFF                   # all-ones quants and scales, zeros below
    if len(blocks) > 1:
        blocks[1, :] = 0
    for offset in scale_offsets:
        magnitude = np.float32(10.0) ** rng.uniform(-7, 4.5, len(blocks)).astype(np.float32)
        scale = (magnitude * rng.choice([-1, 1], len(blocks))).astype(np.float16)
        scale[rng.random(len(blocks)) < 0.1] = 0
        assert np.isfinite(scale).all()
        blocks[:, offset:offset + 2] = scale.reshape(-1, 1).view(np.uint8)
    return blocks.reshape(*shape[:-1], n * size)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def test_gguf_py_still_cannot_quantize_k_types():
    """If this fails, gguf-py learned to quantize: use its blocks in the tests below."""
    with pytest.raises(NotImplementedError):
        gguf.quants.quantize(np.zeros((1, 256), np.float32), Q.Q4_K)


@pytest.mark.parametrize("qtype", K_TYPES, ids=lambda q: q.name)
def test_dequantize_bit_exact(qtype):
    name = qtype.name.lower()
    assert quants.can_dequantize(name)
    assert (quants.BY_NAME[name].block_size, quants.BY_NAME[name].type_size) == (
        256, K_TYPES[qtype][0])
    for i, shape in enumerate(SHAPES):
        blocks = random_blocks(qtype, shape, seed=i)
        theirs = their_dequantize(blocks, qtype)
        assert theirs.shape == shape and np.isfinite(theirs).all()
        mine = quants.dequantize(blocks.reshape(-1), name)
        assert mine.dtype == np.float32 and mine.shape == (int(np.prod(shape)),)
        assert np.array_equal(bits(mine.reshape(shape)), bits(theirs)), (name, shape)


@pytest.mark.parametrize("qtype", K_TYPES, ids=lambda q: q.name)
def test_many_super_blocks_bit_exact(qtype):
    """4096 super-blocks in one call: the vectorised path, no per-block loop."""
    blocks = random_blocks(qtype, (64, 64 * 256), seed=99)
    mine = quants.dequantize(blocks, qtype.name.lower())
    assert np.array_equal(bits(mine), bits(their_dequantize(blocks, qtype)).reshape(-1))


def test_gguf_file_with_k_quant_tensors(tmp_path):
    tensors = {"blk.0.attn_q.weight": (Q.Q4_K, (3, 512)),
               "blk.0.ffn_down.weight": (Q.Q6_K, (2, 2, 256)),
               "output_norm.weight": (Q.F32, (8,))}
    raws = {}
    writer = gguf.GGUFWriter(str(tmp_path / "k.gguf"), arch="test")
    for i, (name, (qtype, shape)) in enumerate(tensors.items()):
        if qtype == Q.F32:
            writer.add_tensor(name, np.arange(8, dtype=np.float32))
            continue
        raws[name] = random_blocks(qtype, shape, seed=i)
        writer.add_tensor(name, raws[name], raw_dtype=qtype)
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file,
                 writer.write_tensors_to_file, writer.close):
        step()
    f = load_gguf(tmp_path / "k.gguf")
    for name, raw in raws.items():
        qtype, shape = tensors[name]
        q = f[name]
        assert isinstance(q, QuantizedTensor)
        assert (q.qtype, q.shape, q.nbytes) == (qtype.name.lower(), shape, raw.nbytes)
        assert np.array_equal(q.raw, raw.reshape(-1))
        t = q.dequantize()
        assert t.dtype is dtypes.float32 and tuple(t.shape) == shape
        assert np.array_equal(bits(t.numpy()), bits(their_dequantize(raw, qtype)))
    assert f["output_norm.weight"].numpy().tolist() == list(range(8))


@pytest.mark.parametrize("qtype", K_TYPES, ids=lambda q: q.name)
def test_wrong_size_names_the_type(qtype):
    name, size = qtype.name.lower(), K_TYPES[qtype][0]
    for nbytes in (size - 1, size + 1, 3 * size - 2):
        with pytest.raises(WeightsError) as e:
            quants.dequantize(np.zeros(nbytes, np.uint8), name)
        assert name in str(e.value) and str(size) in str(e.value) and str(nbytes) in str(e.value)
