"""Every malformed GGUF gives a WeightsError subclass naming the file and the key or tensor."""
from __future__ import annotations

import struct
import tracemalloc

import numpy as np
import pytest

from engine.errors import (InvalidHeader, InvalidOffsets, MissingTensor, TruncatedFile,
                           UnknownDtype, WeightsError)
from engine.formats import gguf as ours
from engine.formats.gguf import load_gguf

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)


def string(text) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def kv(key, vtype: int, payload: bytes) -> bytes:
    return string(key) + struct.pack("<I", vtype) + payload


def array(etype: int, payloads: list[bytes], count: int | None = None) -> bytes:
    n = len(payloads) if count is None else count
    return struct.pack("<IQ", etype, n) + b"".join(payloads)


def tensor(name, dims, type_id=0, offset=0, n_dims=None) -> bytes:
    n = len(dims) if n_dims is None else n_dims
    return (string(name) + struct.pack("<I", n) + struct.pack(f"<{len(dims)}Q", *dims)
            + struct.pack("<IQ", type_id, offset))


def build(kvs=(), tensors=(), data=b"", *, version=3, n_tensors=None, n_kv=None,
          alignment=32, magic=b"GGUF") -> bytes:
    header = magic + struct.pack("<IQQ", version,
                                 len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    header += b"".join(kvs) + b"".join(tensors)
    return header + b"\0" * (-len(header) % alignment) + data


def valid_parts():
    """Every value type, two tensors (f32 and q8_0) with padding between them."""
    kvs = [kv("general.architecture", STR, string("llama")), kv("a.u8", U8, b"\x07"),
           kv("a.i8", I8, b"\xff"), kv("a.u16", U16, struct.pack("<H", 9)),
           kv("a.i16", I16, struct.pack("<h", -9)), kv("a.u32", U32, struct.pack("<I", 5)),
           kv("a.i32", I32, struct.pack("<i", -5)), kv("a.f32", F32, struct.pack("<f", 0.5)),
           kv("a.bool", BOOL, b"\x01"), kv("a.u64", U64, struct.pack("<Q", 2**40)),
           kv("a.i64", I64, struct.pack("<q", -2**40)), kv("a.f64", F64, struct.pack("<d", 2.5)),
           kv("a.strs", ARR, array(STR, [string("x"), string("ÿ")])),
           kv("a.nest", ARR, array(ARR, [array(I32, [struct.pack("<i", 1)])]))]
    tensors = [tensor("w", [3, 2], 0, 0), tensor("q", [32], 8, 32)]
    data = np.arange(6, dtype=np.float32).tobytes() + b"\0" * 8 + b"\x00\x3c" + bytes(range(32))
    return kvs, tensors, data


def valid() -> bytes:
    kvs, tensors, data = valid_parts()
    return build(kvs, tensors, data)


def write(tmp_path, data: bytes, name="bad.gguf") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def expect(error, tmp_path, data: bytes, *, tensor=None, key=None, read=None):
    """Open (and read `read`), check the class and what the message names."""
    path = write(tmp_path, data)
    with pytest.raises(error) as info:
        f = load_gguf(path)
        if read is not None:
            f[read].dequantize()
    message = str(info.value)
    assert path in message and info.value.file == path
    if tensor is not None:
        assert repr(tensor) in message and info.value.tensor == tensor
    if key is not None:
        assert repr(key) in message and info.value.key == key
    return message


def test_valid_file_opens(tmp_path):
    f = load_gguf(write(tmp_path, valid(), "good.gguf"))
    assert f.metadata["a.nest"] == [[1]] and f.metadata["a.strs"] == ["x", "ÿ"]
    assert f["w"].numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert f["q"].dequantize().numpy().tolist() == [float(i) for i in range(32)]


@pytest.mark.parametrize("magic", [b"GGUG", b"FUGG", b"\0\0\0\0", b"GGML"])
def test_bad_magic(tmp_path, magic):
    assert "magic" in expect(InvalidHeader, tmp_path, build(magic=magic))


@pytest.mark.parametrize("version", [0, 1, 4, 0x03000000])
def test_unsupported_version(tmp_path, version):
    message = expect(InvalidHeader, tmp_path, build(version=version))
    assert f"version {version}" in message
    assert ("big-endian" in message) == (version == 0x03000000)


def test_truncation_anywhere(tmp_path):
    kvs, tensors, _ = valid_parts()
    header_end = len(build(kvs, tensors, alignment=1))
    data = valid()
    path = tmp_path / "cut.gguf"
    for cut in range(len(data)):
        path.write_bytes(data[:cut])
        with pytest.raises(WeightsError) as info:
            load_gguf(str(path))
        assert str(path) in str(info.value)
        if cut < header_end:
            assert type(info.value) is TruncatedFile, cut
        else:   # inside the data: past a tensor's start, or before it (an offset past the end)
            assert type(info.value) in (TruncatedFile, InvalidOffsets), cut
            assert info.value.tensor in ("w", "q")


def test_truncated_tensor_is_named(tmp_path):
    message = expect(TruncatedFile, tmp_path, valid()[:-1], tensor="q")
    assert "truncated" in message


def test_truncated_in_a_key_value_names_the_key(tmp_path):
    data = build([kv("k.s", STR, string("abcdef"))])
    expect(TruncatedFile, tmp_path, data[:data.index(b"abcdef") + 3], key="k.s")


def test_misaligned_offset(tmp_path):
    data = build([], [tensor("w", [2], 0, 4)], b"\0" * 16)
    assert "alignment" in expect(InvalidOffsets, tmp_path, data, tensor="w")


def test_offset_out_of_range(tmp_path):
    data = build([], [tensor("w", [2], 0, 2**40)], b"\0" * 32)
    assert "past the end" in expect(InvalidOffsets, tmp_path, data, tensor="w")


def test_overlapping_tensors(tmp_path):
    data = build([], [tensor("a", [16], 0, 0), tensor("b", [8], 0, 32)], b"\0" * 64)
    assert "overlap" in expect(InvalidOffsets, tmp_path, data, tensor="b")
    data = build([], [tensor("a", [8], 0, 0), tensor("b", [8], 0, 0)], b"\0" * 32)
    expect(InvalidOffsets, tmp_path, data, tensor="b")


def test_more_than_four_dims(tmp_path):
    data = build([], [tensor("w", [1, 1, 1, 1, 1], 0, 0)], b"\0" * 4)
    assert "5 dimensions" in expect(InvalidHeader, tmp_path, data, tensor="w")


def test_dims_count_absurd(tmp_path):
    data = build([], [tensor("w", [], 0, 0, n_dims=2**31)], b"\0" * 4)
    expect(InvalidHeader, tmp_path, data, tensor="w")


def test_row_not_a_multiple_of_the_block_size(tmp_path):
    data = build([], [tensor("w", [16, 2], 2, 0)], b"\0" * 36)     # q4_0, rows of 16
    assert "block size 32" in expect(InvalidHeader, tmp_path, data, tensor="w")


def test_unknown_type_id_fails_at_open(tmp_path):
    for type_id in (4, 31, 1000, 2**32 - 1):
        data = build([], [tensor("w", [32], type_id, 0)], b"\0" * 64)
        assert f"type id {type_id}" in expect(UnknownDtype, tmp_path, data, tensor="w")


def test_known_type_without_dequantizer_fails_when_read(tmp_path):
    data = build([], [tensor("w", [256], 23, 0)], b"\0" * 136)     # iq4_xs
    f = load_gguf(write(tmp_path, data, "k.gguf"))
    assert f.info("w").ggml_type == "iq4_xs"
    assert "iq4_xs" in expect(UnknownDtype, tmp_path, data, tensor="w", read="w")


def test_missing_tensor(tmp_path):
    f = load_gguf(write(tmp_path, valid()))
    with pytest.raises(MissingTensor) as e:
        f["nope"]
    assert "'nope'" in str(e.value) and f.name in str(e.value)


def test_huge_string_length(tmp_path):
    data = build([kv("k", STR, struct.pack("<Q", 2**60) + b"abc")])
    expect(TruncatedFile, tmp_path, data, key="k")
    data = build([struct.pack("<Q", 2**60) + b"key"])                 # the key itself
    expect(TruncatedFile, tmp_path, data)


def test_huge_counts_are_checked_before_allocating(tmp_path):
    tracemalloc.start()
    try:
        for n_kv, n_tensors in ((10**9, 0), (0, 2**40), (2**64 - 1, 2**64 - 1)):
            message = expect(TruncatedFile, tmp_path, build(n_kv=n_kv, n_tensors=n_tensors))
            assert "cannot fit" in message
        for etype in (U8, U64, STR, ARR):
            data = build([kv("k.arr", ARR, array(etype, [], count=2**62))])
            expect(TruncatedFile, tmp_path, data, key="k.arr")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10_000_000


def test_array_longer_than_the_file(tmp_path):
    data = build([kv("k", ARR, array(I32, [struct.pack("<i", 1)] * 3, count=100))])
    assert "100" in expect(TruncatedFile, tmp_path, data, key="k")


def nested(depth: int) -> bytes:
    inner = array(I32, [struct.pack("<i", 1)])
    for _ in range(depth - 1):
        inner = array(ARR, [inner])
    return inner


def test_nested_arrays_are_bounded(tmp_path):
    f = load_gguf(build([kv("ok", ARR, nested(ours.MAX_ARRAY_DEPTH))]))
    value = f.metadata["ok"]
    for _ in range(ours.MAX_ARRAY_DEPTH - 1):
        value = value[0]
    assert value == [1]
    expect(InvalidHeader, tmp_path, build([kv("deep", ARR, nested(ours.MAX_ARRAY_DEPTH + 1))]),
           key="deep")
    # far deeper than Python's recursion limit: still a clean error
    expect(InvalidHeader, tmp_path, build([kv("deep", ARR, nested(5000))]), key="deep")


def test_unknown_value_types(tmp_path):
    assert "value type 13" in expect(InvalidHeader, tmp_path, build([kv("k", 13, b"\0" * 8)]),
                                     key="k")
    expect(InvalidHeader, tmp_path, build([kv("k", ARR, array(99, [b"\0"]))]), key="k")


def test_bool_must_be_0_or_1(tmp_path):
    expect(InvalidHeader, tmp_path, build([kv("k", BOOL, b"\x02")]), key="k")
    expect(InvalidHeader, tmp_path, build([kv("k", ARR, array(BOOL, [b"\x01", b"\x05"]))]),
           key="k")


def test_duplicates(tmp_path):
    data = build([kv("k", U8, b"\1"), kv("k", U8, b"\2")])
    assert "duplicate" in expect(InvalidHeader, tmp_path, data, key="k")
    data = build([], [tensor("w", [2], 0, 0), tensor("w", [2], 0, 32)], b"\0" * 40)
    assert "duplicate" in expect(InvalidHeader, tmp_path, data, tensor="w")


@pytest.mark.parametrize("vtype,payload", [
    (U32, struct.pack("<I", 0)), (U32, struct.pack("<I", 48)),
    (U64, struct.pack("<Q", 32)), (I32, struct.pack("<i", 32))])
def test_bad_alignment(tmp_path, vtype, payload):
    data = build([kv("general.alignment", vtype, payload)])
    expect(InvalidHeader, tmp_path, data, key="general.alignment")


def test_utf8(tmp_path):
    expect(InvalidHeader, tmp_path, build([kv(b"k\xff", U8, b"\1")]))
    expect(InvalidHeader, tmp_path, build([], [tensor(b"w\xc3", [2], 0, 0)], b"\0" * 8))
    # a value that is not text (some vocabularies hold raw bytes) is kept as bytes
    f = load_gguf(build([kv("k", STR, string(b"\xff\xfe")),
                         kv("v", ARR, array(STR, [string(b"\x80"), string("ok")]))]))
    assert f.metadata == {"k": b"\xff\xfe", "v": [b"\x80", "ok"]}


def test_corrupted_bytes_only_ever_give_weights_errors():
    """Flip bytes of a valid file: it opens or fails cleanly, and so does every read."""
    data = valid()
    rng = np.random.default_rng(0)
    for _ in range(1500):
        bad = bytearray(data)
        for position in rng.integers(0, len(bad), size=rng.integers(1, 4)):
            bad[position] = rng.integers(0, 256)
        try:
            f = load_gguf(bytes(bad))
            for name in f:
                t = f[name]
                if hasattr(t, "dequantize"):
                    t.dequantize()
        except WeightsError:
            pass
