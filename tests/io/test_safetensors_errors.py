"""Every malformed input gives its own exception naming the file and the tensor."""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

from engine.errors import (EngineError, HeaderTooLarge, InvalidHeader, InvalidOffsets,
                           MissingShard, MissingTensor, SizeMismatch, TruncatedFile,
                           UnknownDtype)
from engine.formats import safetensors as st
from engine.formats.safetensors import load_safetensors, save_safetensors
from engine.formats.sources import SourceNotFound


def write_raw(tmp_path, header, data: bytes = b"", name="bad.safetensors") -> str:
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    path = tmp_path / name
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return str(path)


def expect(error, path, tensor=None, call=load_safetensors):
    """Run call(path) and check the exception class and what its message names."""
    with pytest.raises(error) as info:
        call(path)
    message = str(info.value)
    assert str(path) in message and info.value.file == str(path)
    if tensor is not None:
        assert repr(tensor) in message and info.value.tensor == tensor
    return message


def entry(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def test_shorter_than_length_field(tmp_path):
    path = tmp_path / "tiny.safetensors"
    path.write_bytes(b"\x01\x02\x03")
    assert "3 bytes" in expect(TruncatedFile, path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.safetensors"
    path.write_bytes(b"")
    expect(TruncatedFile, path)


def test_header_length_past_end(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    assert "1000" in expect(TruncatedFile, path)


def test_header_too_large(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", 2 ** 63) + b"{}")
    expect(HeaderTooLarge, path)


def test_cut_in_data_names_first_cut_tensor(tmp_path):
    tensors = {"a": np.ones(16, np.float32), "b": np.ones(16, np.float32),
               "c": np.ones(16, np.float32)}
    path = save_safetensors(tensors, tmp_path / "cut.safetensors")
    f = load_safetensors(path)
    cut_inside_b = f.info("b").offset + 10
    f.close()
    full = open(path, "rb").read()
    for end, first_cut in ((cut_inside_b, "b"), (f.info("b").offset, "b"), (len(full) - 1, "c")):
        open(path, "wb").write(full[:end])
        assert "truncated" in expect(TruncatedFile, path, first_cut)


@pytest.mark.parametrize("blob", [b"{not json", b'{"\xff\xfe": 1}', b"", b"[1, 2]", b'"x"',
                                  b'{"a": 1, "a": 2}'])
def test_invalid_json(tmp_path, blob):
    expect(InvalidHeader, write_raw(tmp_path, blob))


@pytest.mark.parametrize("bad", [
    {"dtype": "F32", "shape": [2]},                                   # no data_offsets
    {"shape": [2], "data_offsets": [0, 8]},                           # no dtype
    entry(shape=(-2,)), entry(shape=(2.0,)), entry(shape=(True, 2)),  # not dims
    {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]},
    entry(offsets=(0,)), entry(offsets=(-8, 0)), entry(offsets=(0, "8")),
    {"dtype": 32, "shape": [2], "data_offsets": [0, 8]}, [1, 2]])
def test_bad_entry(tmp_path, bad):
    expect(InvalidHeader, write_raw(tmp_path, {"w": bad}, bytes(8)), "w")


def test_bad_metadata(tmp_path):
    header = {"__metadata__": {"step": 3}, "w": entry()}
    expect(InvalidHeader, write_raw(tmp_path, header, bytes(8)))


def test_padding_and_metadata_accepted(tmp_path):
    blob = json.dumps({"__metadata__": {"k": "v"}, "w": entry()}).encode() + b"    "
    f = load_safetensors(write_raw(tmp_path, blob, struct.pack("<2f", 1.5, 2.5)))
    assert f.metadata == {"k": "v"} and f["w"].numpy().tolist() == [1.5, 2.5]


@pytest.mark.parametrize("code", ["F8_E4M3", "U32", "C64", "f32"])
def test_unknown_dtype(tmp_path, code):
    header = {"ok": entry(), "odd": entry(dtype=code, shape=(1,), offsets=(8, 12))}
    assert code in expect(UnknownDtype, write_raw(tmp_path, header, bytes(12)), "odd")


def test_offsets_out_of_bounds(tmp_path):
    path = write_raw(tmp_path, {"w": entry(offsets=(64, 72))}, bytes(8))
    assert "outside" in expect(InvalidOffsets, path, "w")


def test_offsets_reversed(tmp_path):
    expect(InvalidOffsets, write_raw(tmp_path, {"w": entry(offsets=(8, 0))}, bytes(8)), "w")


def test_overlap(tmp_path):
    header = {"a": entry(), "b": entry(offsets=(4, 12))}
    assert "'a'" in expect(InvalidOffsets, write_raw(tmp_path, header, bytes(12)), "b")


def test_hole(tmp_path):
    header = {"a": entry(), "b": entry(offsets=(12, 20))}
    assert "hole" in expect(InvalidOffsets, write_raw(tmp_path, header, bytes(20)), "b")


def test_unindexed_tail(tmp_path):
    expect(InvalidOffsets, write_raw(tmp_path, {"a": entry()}, bytes(12)))


def test_zero_size_tensors_share_an_offset(tmp_path):
    header = {"e1": entry(shape=(0,), offsets=(0, 0)), "a": entry(),
              "e2": entry(shape=(2, 0), offsets=(8, 8))}
    f = load_safetensors(write_raw(tmp_path, header, bytes(8)))
    assert f["e2"].shape == (2, 0) and f["a"].shape == (2,)


def test_size_mismatch(tmp_path):
    path = write_raw(tmp_path, {"w": entry(shape=(3,), offsets=(0, 8))}, bytes(8))
    assert "12" in expect(SizeMismatch, path, "w")


def test_missing_tensor(tmp_path):
    path = save_safetensors({"w": np.zeros(2, np.float32)}, tmp_path / "m.safetensors")
    f = load_safetensors(path)
    expect(MissingTensor, path, "nope", call=lambda p: f["nope"])
    with pytest.raises(KeyError):                 # still a Mapping
        f.info("nope")
    assert f.get("nope") is None


def _sharded(tmp_path):
    tensors = {"a": np.zeros(4, np.float32), "b": np.ones(4, np.float32)}
    return save_safetensors(tensors, tmp_path / "model.safetensors", max_shard_bytes=16)


def test_missing_shard(tmp_path):
    index = _sharded(tmp_path)
    os.remove(tmp_path / "model-00002-of-00002.safetensors")
    f = load_safetensors(index)                   # lazy: the index alone opens fine
    assert f["a"].numpy().tolist() == [0, 0, 0, 0]
    message = expect(MissingShard, index, call=lambda p: f["b"])
    assert "model-00002-of-00002.safetensors" in message


def test_tensor_missing_from_index_or_shard(tmp_path):
    index = _sharded(tmp_path)
    doc = json.loads(open(index).read())
    doc["weight_map"]["ghost"] = "model-00001-of-00002.safetensors"
    open(index, "w").write(json.dumps(doc))
    f = load_safetensors(index)
    expect(MissingTensor, index, "nope", call=lambda p: f["nope"])
    shard = str(tmp_path / "model-00001-of-00002.safetensors")
    expect(MissingTensor, shard, "ghost", call=lambda p: f.info("ghost"))


@pytest.mark.parametrize("text", ["{oops", '{"metadata": {}}', '{"weight_map": []}',
                                  '{"weight_map": {"a": "../secret.safetensors"}}',
                                  '{"weight_map": {"a": 7}}', "[]"])
def test_corrupt_index(tmp_path, text):
    path = tmp_path / "model.safetensors.index.json"
    path.write_text(text)
    expect(InvalidHeader, path)


def test_missing_paths(tmp_path):
    with pytest.raises(SourceNotFound) as e:
        load_safetensors(tmp_path / "absent.safetensors")
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, EngineError)
    with pytest.raises(SourceNotFound):
        load_safetensors(tmp_path)                # a directory with no weights


# --- writer errors and atomicity -----------------------------------------------------

@pytest.mark.parametrize("tensors, error", [
    ({"__metadata__": np.zeros(1)}, ValueError), ({"": np.zeros(1)}, ValueError),
    ({3: np.zeros(1)}, ValueError), ({"c": np.zeros(2, np.complex64)}, TypeError),
    ({"l": [1, 2]}, TypeError)])
def test_writer_rejects(tmp_path, tensors, error):
    with pytest.raises(error):
        save_safetensors(tensors, tmp_path / "m.safetensors")
    assert os.listdir(tmp_path) == []


def test_writer_metadata_must_be_strings(tmp_path):
    with pytest.raises(TypeError, match="step"):
        save_safetensors({"w": np.zeros(1)}, tmp_path / "m.safetensors", metadata={"step": 3})


def test_writer_is_atomic(tmp_path, monkeypatch):
    path = save_safetensors({"w": np.zeros(4, np.float32)}, tmp_path / "m.safetensors")
    before = open(path, "rb").read()

    def fail(fd):
        raise OSError("disk full")
    monkeypatch.setattr(st.os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        save_safetensors({"w": np.ones(4, np.float32)}, path)
    assert open(path, "rb").read() == before and os.listdir(tmp_path) == ["m.safetensors"]


def test_writer_accepts_big_endian_and_views(tmp_path):
    a = np.arange(12, dtype=">i4").reshape(3, 4)[:, ::2]
    f = load_safetensors(save_safetensors({"a": a}, tmp_path / "m.safetensors"))
    assert f["a"].numpy().tolist() == a.tolist() and f["a"].numpy().dtype == np.int32
