"""GGUF reader: cross-checked with gguf-py (its writer, its reader, its dequantizers)."""
from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from gguf.quants import dequantize as their_dequantize
from gguf.quants import quantize as their_quantize

import engine
from engine import dtypes
from engine.errors import UnknownDtype
from engine.formats import gguf as ours
from engine import quants
from engine.formats.gguf import GGUFFile, QuantizedTensor, load_gguf
from engine.formats import safetensors as st
from engine.formats.sources import BytesSource, FileSource

QUANTIZED = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0]
SHAPES = [(1, 32), (3, 64), (5, 96), (2, 3, 128), (4, 1, 2, 32)]      # torch order

METADATA = [   # (key, value, value type, element type) as written
    ("t.u8", 255, V.UINT8, None), ("t.i8", -128, V.INT8, None),
    ("t.u16", 65535, V.UINT16, None), ("t.i16", -32768, V.INT16, None),
    ("t.u32", 2**32 - 1, V.UINT32, None), ("t.i32", -2**31, V.INT32, None),
    ("t.f32", 0.1, V.FLOAT32, None), ("t.bool", True, V.BOOL, None),
    ("t.false", False, V.BOOL, None), ("t.str", "héllo wörld ✓ 🦙 日本語", V.STRING, None),
    ("t.empty_str", "", V.STRING, None),
    ("t.u64", 2**64 - 1, V.UINT64, None), ("t.i64", -2**63, V.INT64, None),
    ("t.f64", 1e300, V.FLOAT64, None),
    ("t.arr_i32", [1, -2, 3], V.ARRAY, V.INT32), ("t.arr_u8", [0, 7, 255], V.ARRAY, V.UINT8),
    ("t.arr_f32", [0.5, -1.25], V.ARRAY, V.FLOAT32), ("t.arr_f64", [1e-300], V.ARRAY, V.FLOAT64),
    ("t.arr_bool", [True, False, True], V.ARRAY, V.BOOL),
    ("t.arr_u64", [2**63, 1], V.ARRAY, V.UINT64), ("t.arr_i16", [-5, 5], V.ARRAY, V.INT16),
    ("t.arr_str", ["a", "", "ü🦙", "<0x0A>"], V.ARRAY, V.STRING),
    ("t.nested", [[1, 2], [3], [[4, 5], [6]]], V.ARRAY, None),
    ("t.nested_str", [["x", "y"], ["z"]], V.ARRAY, None),
    ("t.long_f32", list(np.linspace(-1, 1, 1000, dtype=np.float32)), V.ARRAY, V.FLOAT32),
    ("t.long_i32", list(range(300)), V.ARRAY, V.INT32),
]


def expected_value(value, vtype, subtype):
    """What the reader should give for a written value."""
    if vtype == V.FLOAT32:
        return float(np.float32(value))
    if vtype == V.ARRAY and subtype == V.FLOAT32:
        return [float(np.float32(v)) for v in value]
    return value


def write(path, tensors: dict, metadata=METADATA, alignment: int | None = None) -> str:
    """tensors: name -> (float32 array in torch order, GGML type)."""
    writer = gguf.GGUFWriter(str(path), arch="test")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    for key, value, vtype, subtype in metadata:
        writer.add_key_value(key, value, vtype, sub_type=subtype)
    for name, (array, qtype) in tensors.items():
        if qtype == Q.F32:
            writer.add_tensor(name, array.astype(np.float32))
        elif qtype == Q.F16:
            writer.add_tensor(name, array.astype(np.float16))
        else:
            writer.add_tensor(name, their_quantize(array, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def random(shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 30.0], size=shape[:-1] + (1,)))
    return x.astype(np.float32)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    tensors = {"plain.f32": (random((3, 5), 1), Q.F32), "plain.f16": (random((2, 7), 2), Q.F16),
               "plain.bf16": (random((4, 6), 3), Q.BF16), "vector": (random((11,), 4), Q.F32)}
    for qtype in QUANTIZED:
        for i, shape in enumerate(SHAPES):
            tensors[f"{qtype.name.lower()}.{i}"] = (random(shape, 10 + i), qtype)
    path = write(tmp_path_factory.mktemp("gguf") / "model.gguf", tensors)
    return path, tensors


def test_metadata_equals_what_was_written(model):
    f = load_gguf(model[0])
    assert f.version == 3 and f.alignment == 32
    assert f.metadata["general.architecture"] == "test"
    for key, value, vtype, subtype in METADATA:
        got = f.metadata[key]
        if key.startswith("t.long"):
            assert isinstance(got, np.ndarray) and got.dtype.isnative
            assert np.array_equal(got, np.asarray(value, dtype=got.dtype))
            continue
        assert got == expected_value(value, vtype, subtype), key
        assert type(got) is type(value), key
    assert type(f.metadata["t.bool"]) is bool and type(f.metadata["t.u64"]) is int
    assert f.metadata["t.long_i32"].dtype == np.int32


def test_tensor_infos_equal_gguf_py(model):
    path, tensors = model
    f = load_gguf(path)
    reader = gguf.GGUFReader(path)
    assert list(f) == [t.name for t in reader.tensors] == list(tensors)
    for t in reader.tensors:
        info = f.info(t.name)
        assert info.ggml_type == t.tensor_type.name.lower()
        assert info.shape == tuple(int(d) for d in reversed(t.shape.tolist()))
        assert info.shape == tensors[t.name][0].shape
        assert (info.offset, info.nbytes) == (t.data_offset, t.n_bytes)
        assert info.file == path


def test_plain_tensors_exact(model):
    path, tensors = model
    f = load_gguf(path)
    for name in ("plain.f32", "vector"):
        t = f[name]
        assert isinstance(t, engine.Tensor) and t.dtype is dtypes.float32
        assert np.array_equal(t.numpy(), tensors[name][0])
    t = f["plain.f16"]
    assert t.dtype is dtypes.float16
    assert np.array_equal(t.numpy(), tensors["plain.f16"][0].astype(np.float16))
    t = f["plain.bf16"]
    assert t.dtype is dtypes.bfloat16
    expected = dtypes.f32_to_bf16_bits(tensors["plain.bf16"][0])   # gguf-py rounds alike
    assert np.array_equal(t.raw_numpy(), expected)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("qtype", QUANTIZED, ids=lambda q: q.name)
def test_dequantize_bit_exact(model, qtype):
    path, tensors = model
    f = load_gguf(path)
    for i, shape in enumerate(SHAPES):
        name = f"{qtype.name.lower()}.{i}"
        q = f[name]
        assert isinstance(q, QuantizedTensor)
        assert (q.qtype, q.shape) == (qtype.name.lower(), shape)
        blocks = their_quantize(tensors[name][0], qtype)
        assert q.raw.dtype == np.uint8 and q.nbytes == blocks.nbytes == f.info(name).nbytes
        assert np.array_equal(q.raw, blocks.reshape(-1))
        t = q.dequantize()
        assert t.dtype is dtypes.float32 and tuple(t.shape) == shape
        assert np.array_equal(bits(t.numpy()), bits(their_dequantize(blocks, qtype)))


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16] + QUANTIZED, ids=lambda q: q.name)
def test_dequantize_function_bit_exact_on_extremes(qtype):
    """Wide dynamic range, zeros, tiny values, many blocks, straight through quants."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    x *= np.float32(10.0) ** rng.integers(-6, 5, size=(64, 1)).astype(np.float32)
    x[0] = 0
    x[1, :32] = -np.float32(3.0)
    blocks = their_quantize(x, qtype)
    theirs = their_dequantize(blocks, qtype)
    mine = quants.dequantize(blocks.view(np.uint8).reshape(-1), qtype.name.lower())
    assert np.array_equal(bits(mine.reshape(theirs.shape)), bits(theirs))


def test_type_table_matches_gguf_py():
    for qtype in Q:
        block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        mine = quants.TYPES[qtype.value]
        assert mine.name == qtype.name.lower()
        if qtype != Q.Q8_1:      # ggml's block_q8_1 is 36 bytes (two f16); gguf-py says 40
            assert (mine.block_size, mine.type_size) == (block_size, type_size)
    assert set(quants.TYPES) == {q.value for q in Q}


def test_unsupported_quant_lists_but_refuses_to_dequantize(tmp_path):
    blocks = np.random.default_rng(0).integers(0, 255, (2, 136), dtype=np.uint8)  # 2 rows of 256
    writer = gguf.GGUFWriter(str(tmp_path / "k.gguf"), arch="test")
    writer.add_tensor("w.iq4_xs", blocks, raw_dtype=Q.IQ4_XS)
    writer.add_tensor("w.f32", np.ones(4, np.float32))
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file,
                 writer.write_tensors_to_file, writer.close):
        step()
    f = load_gguf(tmp_path / "k.gguf")
    info = f.info("w.iq4_xs")
    assert (info.ggml_type, info.shape, info.nbytes, info.quantized) == ("iq4_xs", (2, 256), 272, True)
    q = f["w.iq4_xs"]
    assert np.array_equal(q.raw, blocks.reshape(-1))
    for use in (q.dequantize, lambda: engine.nn.functional.linear(engine.ones(3, 256), q)):
        with pytest.raises(UnknownDtype) as e:
            use()
        assert "iq4_xs" in str(e.value) and "'w.iq4_xs'" in str(e.value) and "k.gguf" in str(e.value)
    assert f["w.f32"].numpy().tolist() == [1, 1, 1, 1]


def test_version_2_reads_like_3(model):
    data = bytearray(open(model[0], "rb").read())
    data[4:8] = struct.pack("<I", 2)
    f = load_gguf(bytes(data))
    assert f.version == 2 and f.metadata["t.str"] == METADATA[9][1]
    assert np.array_equal(f["plain.f32"].numpy(), model[1]["plain.f32"][0])


def test_custom_alignment(tmp_path):
    tensors = {"a": (random((3,), 0), Q.F32), "b": (random((2, 32), 1), Q.Q8_0),
               "c": (random((5,), 2), Q.F16)}
    path = write(tmp_path / "aligned.gguf", tensors, metadata=[], alignment=64)
    f = load_gguf(path)
    assert f.alignment == 64 and f.data_offset % 64 == 0
    assert all(f.info(n).offset % 64 == 0 for n in f)
    assert np.array_equal(f["a"].numpy(), tensors["a"][0])
    assert [t.data_offset for t in gguf.GGUFReader(path).tensors] == [f.info(n).offset for n in f]


class CountingSource(BytesSource):
    def __init__(self, data, name="counted.gguf"):
        super().__init__(data, name)
        self.reads: list[tuple[int, int]] = []

    def _read(self, offset, length):
        self.reads.append((offset, length))
        return super()._read(offset, length)


def test_open_reads_only_the_header_and_a_tensor_only_its_bytes(tmp_path):
    tensors = {f"w{i}": (np.full((256, 256), i, np.float32), Q.F32) for i in range(4)}
    tensors["q"] = (random((64, 256)), Q.Q8_0)
    data = open(write(tmp_path / "big.gguf", tensors), "rb").read()
    source = CountingSource(data)
    f = GGUFFile(source)
    assert len(source.reads) == 1 and source.reads[0][0] == 0
    assert source.reads[0][1] <= max(ours.FIRST_CHUNK, f.data_offset) < 256 * 256 * 4
    assert len(f) == 5 and "w2" in f and "nope" not in f and f.info("w3").nbytes == 256 * 256 * 4
    assert len(source.reads) == 1
    assert f["w1"].numpy()[0, 0] == 1
    assert source.reads[-1] == (f.info("w1").offset, 256 * 256 * 4)
    q = f["q"]
    assert source.reads[-1] == (f.info("q").offset, f.info("q").nbytes) and len(source.reads) == 3


def test_header_over_several_chunks(tmp_path):
    """A vocabulary bigger than the first chunk: the window must slide, strings straddle it."""
    vocab = [f"tok{i}_✓" * (i % 5) for i in range(30000)]
    metadata = [("tokenizer.ggml.tokens", vocab, V.ARRAY, V.STRING),
                ("tokenizer.ggml.scores", [float(i) for i in range(30000)], V.ARRAY, V.FLOAT32)]
    data = open(write(tmp_path / "vocab.gguf", {"w": (random((2, 32)), Q.Q4_0)}, metadata),
                "rb").read()
    source = CountingSource(data)
    f = GGUFFile(source)
    assert f.metadata["tokenizer.ggml.tokens"] == vocab
    assert np.array_equal(f.metadata["tokenizer.ggml.scores"], np.arange(30000, dtype=np.float32))
    assert 1 < len(source.reads) < 8
    assert sum(n for _, n in source.reads) <= 2 * f.data_offset + ours.FIRST_CHUNK


def test_file_source_is_zero_copy(model, monkeypatch):
    seen = []
    monkeypatch.setattr(st, "from_raw", lambda raw, dtype, shape: seen.append(raw) or raw)
    f = load_gguf(model[0])
    f["plain.f32"]
    assert isinstance(f.source, FileSource) and f.source._map is not None
    assert not seen[0].flags.writeable and not seen[0].flags.owndata and seen[0].flags.aligned
    assert np.array_equal(seen[0].reshape(3, 5), model[1]["plain.f32"][0])
    raw = f["q8_0.0"].raw
    assert not raw.flags.writeable and not raw.flags.owndata


def test_get_many(model):
    f = load_gguf(model[0])
    got = f.get_many(["q4_0.1", "plain.f32"])
    assert list(got) == ["q4_0.1", "plain.f32"]
    assert np.array_equal(got["plain.f32"].numpy(), model[1]["plain.f32"][0])
    assert np.array_equal(got["q4_0.1"].raw, f["q4_0.1"].raw)


def test_engine_exports_and_bytes_input(model):
    data = open(model[0], "rb").read()
    for location in (model[0], data, bytearray(data), memoryview(data), BytesSource(data)):
        f = engine.load_gguf(location)
        assert len(f) == len(model[1])
        assert np.array_equal(f["vector"].numpy(), model[1]["vector"][0])


def test_over_http_range(http_server, tmp_path):
    tensors = {"big": (random((128, 256), 0), Q.F32), "q": (random((4, 64), 1), Q.Q5_1)}
    write(tmp_path / "m.gguf", tensors)            # 128 KiB: past the 64 KiB probe
    f = load_gguf(http_server.url("m.gguf"))
    assert len(http_server.requests) == 1          # the header comes with the probe
    assert f.metadata["t.nested"] == [[1, 2], [3], [[4, 5], [6]]]
    t = f["q"].dequantize()                        # lies after "big": a request of its own
    blocks = their_quantize(tensors["q"][0], Q.Q5_1)
    assert np.array_equal(bits(t.numpy()), bits(their_dequantize(blocks, Q.Q5_1)))
    info = f.info("q")
    assert http_server.requests[1:] == [f"bytes={info.offset}-{info.offset + info.nbytes - 1}"]
    assert np.array_equal(f["big"].numpy(), tensors["big"][0])
