"""safetensors reader/writer: cross-checked bit for bit with the `safetensors` package."""
from __future__ import annotations

import json
import struct
import tracemalloc

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

from engine import dtypes
from engine.errors import HeaderTooLarge
from engine.formats import safetensors as st
from engine.formats.safetensors import (SafetensorsFile, ShardedSafetensors, load_safetensors,
                                   save_safetensors)
from engine.formats.sources import BytesSource, FileSource
from engine.tensor import from_raw

DTYPE_NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64",
               "float16", "bfloat16", "float32", "float64"]
SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 3, 5), (3, 0, 2), (1, 1, 1, 3)]


def sample(name: str, shape, seed: int = 0) -> np.ndarray:
    """Storage array (bf16 as uint16 bits) with extremes and float specials."""
    rng = np.random.default_rng(seed)
    dtype = dtypes.BY_NAME[name]
    if name == "bool":
        return np.asarray(rng.random(shape) > 0.5)
    if dtype.kind in "iu":
        info = np.iinfo(dtype.storage)
        return np.asarray(rng.integers(info.min, info.max, size=shape, endpoint=True,
                                       dtype=dtype.storage))
    values = np.asarray(rng.standard_normal(shape) * 1000)
    values = values.astype(np.float32 if name == "bfloat16" else dtype.storage)
    flat = values.reshape(-1)
    flat[:4] = [np.nan, -0.0, np.inf, -np.inf][:flat.size]
    return dtypes.f32_to_bf16_bits(values) if name == "bfloat16" else values


def sample_set(name: str) -> dict[str, np.ndarray]:
    return {f"{name}.{i}": sample(name, shape, i) for i, shape in enumerate(SHAPES)}


def to_torch(bits: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16)


def from_torch(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


def assert_bits(ours, expected: np.ndarray, dtype_name: str) -> None:
    assert ours.dtype is dtypes.BY_NAME[dtype_name]
    raw = ours.raw_numpy()
    assert raw.shape == expected.shape
    assert raw.dtype == expected.dtype
    assert raw.reshape(-1).view(np.uint8).tobytes() == expected.reshape(-1).view(np.uint8).tobytes()


def write_theirs(arrays: dict[str, np.ndarray], path, dtype_name: str) -> None:
    if dtype_name == "bfloat16":      # safetensors.numpy has no bfloat16
        safetensors.torch.save_file({k: to_torch(v) for k, v in arrays.items()}, str(path))
    else:
        safetensors.numpy.save_file(arrays, str(path), metadata={"format": "np"})


def read_theirs(path, dtype_name: str) -> dict[str, np.ndarray]:
    if dtype_name == "bfloat16":
        return {k: from_torch(v) for k, v in safetensors.torch.load_file(str(path)).items()}
    return safetensors.numpy.load_file(str(path))


def as_engine(arrays, dtype_name):
    if dtype_name == "bfloat16":      # NumPy cannot say "bfloat16": wrap the bits
        return {k: from_raw(v.reshape(-1), dtypes.bfloat16, v.shape) for k, v in arrays.items()}
    return arrays


def as_engine_mixed(arrays):
    return {k: as_engine({k: v}, k.split(".")[0])[k] for k, v in arrays.items()}


# --- cross-checks ------------------------------------------------------------------

@pytest.mark.parametrize("dtype_name", DTYPE_NAMES)
def test_read_theirs(tmp_path, dtype_name):
    arrays = sample_set(dtype_name)
    path = tmp_path / "theirs.safetensors"
    write_theirs(arrays, path, dtype_name)
    f = load_safetensors(path)
    assert isinstance(f, SafetensorsFile) and set(f) == set(arrays)
    for name, expected in arrays.items():
        assert f.info(name).shape == expected.shape
        assert_bits(f[name], expected, dtype_name)
    for name, tensor in f.get_many().items():
        assert_bits(tensor, arrays[name], dtype_name)


@pytest.mark.parametrize("dtype_name", DTYPE_NAMES)
def test_theirs_reads_ours(tmp_path, dtype_name):
    arrays = sample_set(dtype_name)
    path = save_safetensors(as_engine(arrays, dtype_name), tmp_path / "ours.safetensors",
                            metadata={"format": "pt"})
    theirs = read_theirs(path, dtype_name)
    assert set(theirs) == set(arrays)
    for name, expected in arrays.items():
        assert theirs[name].shape == expected.shape
        assert theirs[name].tobytes() == expected.tobytes()
    with safetensors.safe_open(path, "np" if dtype_name != "bfloat16" else "pt") as f:
        assert f.metadata() == {"format": "pt"}


def test_mixed_dtypes_roundtrip_and_alignment(tmp_path):
    arrays = {f"{n}.{i}": sample(n, s, i) for n in DTYPE_NAMES for i, s in enumerate(SHAPES[:5])}
    tensors = {k: to_torch(v) if k.startswith("bfloat16") else torch.from_numpy(v)
               for k, v in arrays.items()}
    ours = save_safetensors(as_engine_mixed(arrays), tmp_path / "ours.safetensors")
    back = safetensors.torch.load_file(ours)
    for name, t in tensors.items():
        assert from_torch(back[name]).tobytes() == from_torch(t).tobytes()
    header_length = struct.unpack("<Q", open(ours, "rb").read(8))[0]
    assert header_length % 8 == 0
    f = load_safetensors(ours)
    for name in f:     # every tensor aligned to its itemsize within the file
        assert f.info(name).offset % f.info(name).dtype.itemsize == 0
    theirs = tmp_path / "theirs.safetensors"
    safetensors.torch.save_file(tensors, str(theirs))
    f = load_safetensors(theirs)
    for name, expected in arrays.items():
        assert_bits(f[name], expected, name.split(".")[0])


def test_sharded_ours_read_by_theirs(tmp_path):
    arrays = {f"{n}.{i}": sample(n, s, i) for n in DTYPE_NAMES for i, s in enumerate(SHAPES)}
    arrays["big"] = np.arange(300, dtype=np.float64)          # 2400 bytes > limit
    index_path = save_safetensors(as_engine_mixed(arrays), tmp_path / "model.safetensors",
                                  metadata={"format": "pt"}, max_shard_bytes=1000)
    assert index_path == str(tmp_path / "model.safetensors.index.json")
    index = json.loads(open(index_path).read())
    assert set(index["weight_map"]) == set(arrays)
    assert index["metadata"]["total_size"] == sum(a.nbytes for a in arrays.values())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    for shard in shards:
        names = {k for k, v in index["weight_map"].items() if v == shard}
        loaded = safetensors.torch.load_file(str(tmp_path / shard))
        assert set(loaded) == names
        total = sum(v.numel() * v.element_size() for v in loaded.values())
        assert total <= 1000 or names == {"big"}
        for name, t in loaded.items():
            assert from_torch(t).tobytes() == arrays[name].tobytes()
    f = load_safetensors(index_path)
    assert isinstance(f, ShardedSafetensors) and len(f) == len(arrays)
    for name, tensor in f.get_many().items():
        assert_bits(tensor, arrays[name], name.split(".")[0] if name != "big" else "float64")


def test_hf_style_sharded_dir_by_theirs(tmp_path):
    parts = [{"embed.weight": torch.randn(5, 4).to(torch.bfloat16), "norm": torch.ones(4)},
             {"layers.0.w": torch.randn(3, 4, dtype=torch.float16), "ids": torch.arange(6)}]
    weight_map = {}
    for i, part in enumerate(parts, 1):
        filename = f"model-{i:05d}-of-00002.safetensors"
        safetensors.torch.save_file(part, str(tmp_path / filename), metadata={"format": "pt"})
        weight_map.update({name: filename for name in part})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 123}, "weight_map": weight_map}))
    f = load_safetensors(tmp_path)
    assert isinstance(f, ShardedSafetensors)
    assert f.metadata == {"total_size": 123} and set(f) == set(weight_map)
    assert f.info("ids").file == str(tmp_path / "model-00002-of-00002.safetensors")
    expected = {k: v for part in parts for k, v in part.items()}
    for name, tensor in f.get_many(["ids", "embed.weight", "norm"]).items():
        assert tensor.raw_numpy().tobytes() == from_torch(expected[name]).tobytes()
    assert f["layers.0.w"].dtype is dtypes.float16


def test_directory_with_single_file(tmp_path):
    save_safetensors({"x": np.ones(3, np.float32)}, tmp_path / "model.safetensors")
    f = load_safetensors(tmp_path)
    assert isinstance(f, SafetensorsFile) and f["x"].numpy().tolist() == [1, 1, 1]


# --- laziness ------------------------------------------------------------------------

class CountingSource(BytesSource):
    def __init__(self, data, name="counted.safetensors"):
        super().__init__(data, name)
        self.reads: list[tuple[int, int]] = []

    def _read(self, offset, length):
        self.reads.append((offset, length))
        return super()._read(offset, length)


def _file_bytes(tmp_path, tensors) -> bytes:
    return open(save_safetensors(tensors, tmp_path / "m.safetensors"), "rb").read()


def test_open_reads_only_the_header(tmp_path):
    data = _file_bytes(tmp_path, {f"w{i}": np.full((256, 256), i, np.float32) for i in range(4)})
    source = CountingSource(data)
    f = SafetensorsFile(source)
    header_length = struct.unpack("<Q", data[:8])[0]
    assert source.reads == [(0, 8), (8, header_length)]
    assert len(f) == 4 and "w2" in f and "nope" not in f and list(f.keys())[0] == "w0"
    assert f.info("w3").nbytes == 256 * 256 * 4
    assert len(source.reads) == 2                  # keys, len, in, info: all free
    assert f["w1"].numpy()[0, 0] == 1
    assert source.reads[-1] == (f.info("w1").offset, 256 * 256 * 4)


def test_get_many_coalesces_adjacent_tensors(tmp_path):
    tensors = {f"w{i}": np.full(1000, i, np.float32) for i in range(5)}
    source = CountingSource(_file_bytes(tmp_path, tensors))
    f = SafetensorsFile(source)
    before = len(source.reads)
    got = f.get_many(["w3", "w0", "w1", "w2"])
    assert list(got) == ["w3", "w0", "w1", "w2"]
    assert [t.numpy()[0] for t in got.values()] == [3, 0, 1, 2]
    assert len(source.reads) == before + 1
    assert source.reads[-1] == (f.info("w0").offset, 4 * 4000)


def test_file_source_is_zero_copy(tmp_path, monkeypatch):
    path = save_safetensors({"x": np.arange(10, dtype=np.int32)}, tmp_path / "m.safetensors")
    seen = []
    monkeypatch.setattr(st, "from_raw", lambda raw, dtype, shape: seen.append(raw) or raw)
    f = load_safetensors(path)
    f["x"]
    assert isinstance(f.source, FileSource) and f.source._map is not None
    assert not seen[0].flags.writeable and not seen[0].flags.owndata
    assert seen[0].tolist() == list(range(10))


def test_header_over_limit_is_not_allocated():
    data = struct.pack("<Q", 2 ** 40) + b"{}" + b" " * 6
    source = CountingSource(data, "huge.safetensors")
    tracemalloc.start()
    try:
        with pytest.raises(HeaderTooLarge) as e:
            SafetensorsFile(source)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000 and source.reads == [(0, 8)]
    assert "huge.safetensors" in str(e.value)
    with pytest.raises(HeaderTooLarge):          # over the limit beats "past the end"
        SafetensorsFile(BytesSource(struct.pack("<Q", st.MAX_HEADER_BYTES + 1) + b"{}"))
