"""QuantizedTensor as modules and functions see it: wrapping GGML blocks, moving between
backends, loading into nn.Linear / nn.Embedding from a GGUF file, and the clear errors.
The kernels themselves are compared per backend in tests/kernels and tests/webgpu."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

import engine
import engine.nn.functional as F
from engine import nn, quants
from engine.errors import BackendError, DtypeMismatch, ShapeMismatch, SizeMismatch, UnknownDtype
from engine.quantized import QuantizedTensor

RNG = np.random.default_rng(7)


def _blocks(qtype: Q, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(raw bytes, their float32 dequantization) of a random (rows, cols) matrix."""
    raw = gguf.quants.quantize(RNG.standard_normal((rows, cols)).astype(np.float32), qtype)
    return raw.reshape(-1), gguf.quants.dequantize(raw, qtype).reshape(rows, cols)


def _write(path, tensors: dict) -> None:
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, (array, qtype) in tensors.items():
        writer.add_tensor(name, array, raw_dtype=qtype)
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file,
                 writer.close):
        step()


def test_from_raw_describes_the_blocks():
    raw, dense = _blocks(Q.Q4_1, 6, 64)
    w = QuantizedTensor.from_raw(raw, "q4_1", (6, 64), "numpy", name="w")
    assert (w.shape, w.qtype, w.dtype, w.device, w.ndim, w.numel(), w.rows) == (
        (6, 64), "q4_1", engine.float32, "numpy", 2, 384, 6)
    assert w.nbytes == raw.size == 6 * 2 * 20
    assert np.array_equal(w.raw, raw)
    assert np.array_equal(w.dequantize().numpy(), dense)
    assert "q4_1" in repr(w) and "'w'" in repr(w)


def test_dequantize_keeps_any_shape():
    raw, dense = _blocks(Q.Q8_0, 6, 32)
    w = QuantizedTensor.from_raw(raw, "q8_0", (2, 3, 32))
    assert np.array_equal(w.dequantize().numpy(), dense.reshape(2, 3, 32))


@pytest.mark.parametrize("qtype", ["q4_0", "q8_0", "q4_k"])
def test_linear_and_embedding_match_dequantize_then_float32(qtype):
    block = quants.BY_NAME[qtype].block_size
    cols = 2 * max(block, 64)
    raw = RNG.integers(0, 256, quants.BY_NAME[qtype].row_bytes(cols) * 5, dtype=np.uint8)
    scales = {"q4_0": [0], "q8_0": [0], "q4_k": [0, 2]}[qtype]     # f16 scale byte offsets per block
    blocks = raw.reshape(-1, quants.BY_NAME[qtype].type_size)
    for offset in scales:                                            # finite, modest f16 scales
        blocks[:, offset:offset + 2] = np.array([0.01], np.float16).view(np.uint8)
    dense = quants.dequantize(raw, qtype).reshape(5, cols)
    w = QuantizedTensor.from_raw(raw, qtype, (5, cols))
    x = RNG.standard_normal((2, 3, cols)).astype(np.float32)
    bias = RNG.standard_normal(5).astype(np.float32)
    got = F.linear(engine.tensor(x), w, engine.tensor(bias)).numpy()
    want = x.astype(np.float64) @ dense.T.astype(np.float64) + bias
    assert got.shape == (2, 3, 5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * (np.abs(x) @ np.abs(dense).T).max())
    ids = np.array([[4, 0], [2, 2]])
    assert np.array_equal(F.embedding(engine.tensor(ids), w).numpy(), dense[ids])


def test_linear_keeps_the_input_float_dtype():
    raw, dense = _blocks(Q.Q8_0, 4, 32)
    w = QuantizedTensor.from_raw(raw, "q8_0", (4, 32))
    x = engine.tensor(RNG.standard_normal((1, 32)).astype(np.float32)).to(engine.float16)
    assert F.linear(x, w).dtype is engine.float16


def test_moves_between_backends_without_copy_when_storage_is_shared():
    raw, _ = _blocks(Q.Q4_0, 3, 32)
    w = QuantizedTensor.from_raw(raw, "q4_0", (3, 32), "numpy")    # numpy and simd share host bytes
    s = w.to("simd")
    assert s.device == "simd" and s._buf is w._buf and w.to("numpy") is w
    assert w.to(engine.float32) is w
    with pytest.raises(UnknownDtype, match="dequantize"):
        w.to(engine.float16)


def test_cat_of_neighbours_in_one_file_is_a_view(tmp_path, monkeypatch):
    """Weights that lie end to end in one buffer (llama.cpp writes ffn_gate just before ffn_up)
    stack without a copy; others are copied; either way the rows are the parts' rows. (Host
    storage: pinned to numpy, as the op suite reruns this file with webgpu as the default.)"""
    monkeypatch.setattr(engine.device, "_default", "numpy")
    (a, _), (b, _), (c, _) = _blocks(Q.Q4_1, 4, 64), _blocks(Q.Q4_1, 3, 64), _blocks(Q.Q4_1, 2, 64)
    _write(tmp_path / "w.gguf", {n: (r.reshape(-1, 40), Q.Q4_1) for n, r in (("a", a), ("b", b), ("c", c))})
    with engine.load_gguf(tmp_path / "w.gguf") as f:
        ta, tb, tc = f["a"], f["b"], f["c"]
        assert f.info("b").offset - f.info("a").offset == a.size          # 160 bytes: no alignment padding
        joined = QuantizedTensor.cat([ta, tb])
        assert joined.shape == (7, 64) and np.array_equal(joined.raw, np.concatenate([a, b]))
        assert np.shares_memory(joined._buf, ta._buf)
        swapped = QuantizedTensor.cat([tb, ta])
        assert not np.shares_memory(swapped._buf, ta._buf) and np.array_equal(swapped.raw, np.concatenate([b, a]))
        x = engine.from_numpy(RNG.standard_normal((2, 64)).astype(np.float32))
        np.testing.assert_allclose(F.linear(x, joined).numpy(),
                                   np.concatenate([F.linear(x, ta).numpy(), F.linear(x, tb).numpy()], 1), rtol=1e-6)
    separate = [QuantizedTensor.from_raw(r.copy(), "q4_1", (r.size // 40, 64), "numpy") for r in (a, c)]
    assert not np.shares_memory(QuantizedTensor.cat(separate)._buf, separate[0]._buf)


def test_modules_load_quantized_weights_as_they_are(tmp_path):
    lin_raw, lin = _blocks(Q.Q8_0, 48, 64)
    emb_raw, emb = _blocks(Q.Q4_0, 10, 64)
    bias = RNG.standard_normal(48).astype(np.float32)
    _write(tmp_path / "m.gguf", {"lin.weight": (lin_raw.reshape(48, -1), Q.Q8_0), "lin.bias": (bias, None),
                                 "emb.weight": (emb_raw.reshape(10, -1), Q.Q4_0)})

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.emb = nn.Linear(64, 48), nn.Embedding(10, 64)

    m = M()
    m.load_state_dict(engine.load_gguf(tmp_path / "m.gguf"))
    assert isinstance(m.lin.weight, QuantizedTensor) and m.lin.weight.qtype == "q8_0"
    m.to(engine.float16)                       # floating tensors cast; quantized ones stay as they are
    assert m.lin.bias.dtype is engine.float16 and m.lin.weight.qtype == "q8_0"
    m.to(engine.float32)
    ids = engine.tensor([[3, 9]])
    x = m.emb(ids)                                                     # (1, 2, 64)
    np.testing.assert_array_equal(x.numpy(), emb[[[3, 9]]])
    y = m.lin(x).numpy()
    np.testing.assert_allclose(y, emb[[[3, 9]]] @ lin.T + bias.astype(np.float16), rtol=1e-4, atol=1e-4)


def test_loading_checks_shape_and_names_the_tensor(tmp_path):
    raw, _ = _blocks(Q.Q4_1, 8, 64)
    _write(tmp_path / "w.gguf", {"weight": (raw.reshape(8, -1), Q.Q4_1)})
    with pytest.raises(ShapeMismatch) as e:
        nn.Linear(32, 8, bias=False).load_state_dict(engine.load_gguf(tmp_path / "w.gguf"))
    assert "'weight'" in str(e.value) and "w.gguf" in str(e.value)
    with pytest.raises(DtypeMismatch):
        nn.Linear(64, 8, bias=False, dtype=engine.float16).load_state_dict(engine.load_gguf(tmp_path / "w.gguf"))


def test_bad_construction_is_a_clear_error():
    with pytest.raises(SizeMismatch, match="needs 40 bytes, got 39"):
        QuantizedTensor.from_raw(np.zeros(39, np.uint8), "q4_1", (2, 32), name="w")
    with pytest.raises(SizeMismatch, match="multiple of the q4_k block size 256"):
        QuantizedTensor.from_raw(np.zeros(144, np.uint8), "q4_k", (1, 128))
    with pytest.raises(UnknownDtype, match="not a quantized"):
        QuantizedTensor.from_raw(np.zeros(8, np.uint8), "f32", (2,))


def test_bad_calls_are_clear_errors():
    raw, _ = _blocks(Q.Q8_0, 4, 64)
    w = QuantizedTensor.from_raw(raw, "q8_0", (4, 64), name="w")
    with pytest.raises(ValueError, match="last dims must match"):
        F.linear(engine.ones(2, 32), w)
    with pytest.raises(ValueError, match="bias of shape"):
        F.linear(engine.ones(2, 64), w, engine.ones(3))
    with pytest.raises(IndexError, match="index 4 is out of range for 4 rows"):
        F.embedding(engine.tensor([0, 4]), w)
    with pytest.raises(TypeError, match="integer"):
        F.embedding(engine.tensor([0.5]), w)
    with pytest.raises(BackendError, match="move one of them"):
        F.linear(engine.ones(2, 64), w.to("simd"))
