"""CTranslate2 model.bin: our reader against files written field by field from the format's layout
(tests/io/ctranslate2_writer.py), against Whisper tiny.en and base as PyPI packages ship them
(checked with a second, struct-only parse), and against every kind of broken file."""
from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import engine
from engine import dtypes
from engine.errors import (
    InvalidHeader,
    MissingTensor,
    SizeMismatch,
    TruncatedFile,
    UnknownDtype,
)
from engine.formats.ctranslate2 import load_ctranslate2, looks_like_ctranslate2
from engine.formats.describe import detect_format, inspect_file
from engine.formats.sources import BytesSource
from tests.io.ctranslate2_writer import model_bin, string, variable
from tests.whisper_files import checkpoint, checkpoint_parts

RNG = np.random.default_rng(0)
BF16_BITS = np.array([[0x3F80, 0xC000], [0x7F80, 0x0001]], np.uint16)       # 1, -2, inf, a subnormal
VARIABLES = [
    ("decoder/activation", np.array(3, np.int8)),                 # the scalars a real file holds
    ("decoder/alignment_layer", np.array(-1, np.int16)),
    ("encoder/weight", RNG.standard_normal((3, 4)).astype(np.float32)),
    ("encoder/int8", np.arange(-4, 4, dtype=np.int8).reshape(2, 4)),
    ("encoder/int16", np.array([-32768, 0, 32767], np.int16)),
    ("encoder/int32", np.array([[-(1 << 31)], [(1 << 31) - 1]], np.int32)),
    ("decoder/embeddings/weight", RNG.standard_normal((5, 2, 3)).astype(np.float16)),
    ("decoder/bf16", BF16_BITS, "bfloat16"),
    ("decoder/empty", np.zeros((0, 7), np.float32)),
]
ALIASES = [("decoder/projection/weight", "decoder/embeddings/weight")]
EXPECTED_DTYPES = [dtypes.int8, dtypes.int16, dtypes.float32, dtypes.int8, dtypes.int16, dtypes.int32,
                   dtypes.float16, dtypes.bfloat16, dtypes.float32]


def write(tmp_path, data: bytes, name: str = "model.bin") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def expect(error, data: bytes, tensor=None, name="bad.bin") -> str:
    """Open `data` as a file named `name`: it must raise `error` naming the file (and `tensor`)."""
    with pytest.raises(error) as info:
        load_ctranslate2(data, name=name)
    message = str(info.value)
    assert name in message and info.value.file == name
    if tensor is not None:
        assert repr(tensor) in message and info.value.tensor == tensor
    return message


# --- what a valid file holds ---------------------------------------------------------------------

def test_every_dtype_scalars_and_aliases(tmp_path):
    path = write(tmp_path, model_bin(VARIABLES, ALIASES, spec="WhisperSpec", revision=3))
    with engine.load_ctranslate2(path) as weights:
        assert list(weights) == [v[0] for v in VARIABLES] + [a for a, _ in ALIASES]
        assert weights.metadata == {"format": "ctranslate2", "binary_version": "6", "spec": "WhisperSpec",
                                    "spec_revision": "3"}
        assert weights.aliases == dict(ALIASES)
        for (name, array, *_), dtype in zip(VARIABLES, EXPECTED_DTYPES):
            t = weights[name]
            assert t.dtype is dtype and t.shape == array.shape, name
            assert np.array_equal(t.raw_numpy().reshape(array.shape), array), name
        assert weights["decoder/activation"].shape == () and int(weights["decoder/activation"].numpy()) == 3
        assert np.array_equal(weights["decoder/bf16"].numpy(), np.array([[1, -2], [np.inf, 2.0 ** -133]], np.float32))
        alias, target = weights["decoder/projection/weight"], weights["decoder/embeddings/weight"]
        assert alias.dtype is target.dtype and alias.shape == target.shape
        assert np.array_equal(alias.numpy(), target.numpy())
        assert weights.info("decoder/projection/weight").offset == weights.info("decoder/embeddings/weight").offset
        many = weights.get_many()
        assert list(many) == list(weights) and np.array_equal(many["decoder/projection/weight"].numpy(),
                                                               target.numpy())
        with pytest.raises(MissingTensor):
            weights["decoder/nothing"]


def test_opens_bytes_paths_and_sources_alike(tmp_path):
    data = model_bin(VARIABLES[:3])
    path = write(tmp_path, data)
    for source in (data, bytearray(data), Path(path), path, BytesSource(data, name="x")):
        weights = load_ctranslate2(source)
        assert np.array_equal(weights["encoder/weight"].numpy(), VARIABLES[2][1])
    assert load_ctranslate2(data, name="named.bin").name == "named.bin"
    assert engine.load_ctranslate2 is load_ctranslate2


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_every_binary_version(version):
    """1: no spec name and revision; 2 adds them; 3 adds aliases; 4 replaces (item size, element
    count) by (dtype id, byte count); 5 and 6 keep the layout of 4."""
    old = [("a", np.array([1.5, -2], np.float32)), ("b", np.array([[7]], np.int16)), ("c", np.array(-3, np.int8))]
    items = old if version < 4 else old + [("d", np.array([1, 2], np.float16))]
    aliases = [("e", "a")] if version >= 3 else []
    weights = load_ctranslate2(model_bin(items, aliases, version=version, spec="S", revision=5))
    assert list(weights) == [n for n, _ in items] + [a for a, _ in aliases]
    for name, array in items:
        assert np.array_equal(weights[name].numpy(), array) and weights[name].shape == array.shape
    assert weights.metadata["binary_version"] == str(version)
    assert (weights.metadata["spec"], weights.metadata["spec_revision"]) == (("S", "5") if version >= 2 else ("", "1"))


def test_format_detection_and_inspect(tmp_path):
    path = write(tmp_path, model_bin(VARIABLES, ALIASES))
    assert looks_like_ctranslate2(Path(path).read_bytes()[:64]) and detect_format(path) == "ctranslate2"
    for head in (b"PK\x03\x04rest", b"\x80\x02}q\x00", b"GGUF\x03\x00\x00\x00", struct.pack("<Q", 40) + b"{",
                 b"\x07\x00\x00\x00\x02\x00a\x00", b"\x06\x00\x00\x00\x03\x00ab", b""):
        assert not looks_like_ctranslate2(head), head
    report = inspect_file(path)
    assert report["format"] == "ctranslate2" and report["aliases"] == dict(ALIASES)
    assert [t["name"] for t in report["tensors"]] == [v[0] for v in VARIABLES]      # aliases apart
    assert report["total_bytes"] == sum(v[1].nbytes for v in VARIABLES)
    assert inspect_file(tmp_path)["file"] == path                                    # a folder holding it


# --- the real files ------------------------------------------------------------------------------

def struct_parse(data: bytes):
    """A second parse, with struct only: (header, [(name, dims, type id, bytes)], aliases)."""
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    def text():
        nonlocal pos
        (length,) = take("H")
        pos += length
        return data[pos - length:pos - 1].decode()

    version, spec, revision, count = take("I")[0], text(), take("I")[0], take("I")[0]
    found = []
    for _ in range(count):
        name = text()
        dims = take(f"{take('B')[0]}I")
        type_id, nbytes = take("BI")
        found.append((name, dims, type_id, data[pos:pos + nbytes]))
        pos += nbytes
    aliases = [(text(), text()) for _ in range(take("I")[0])]
    assert pos == len(data)
    return (version, spec, revision), found, aliases


def check_real(data: bytes, name: str):
    weights = load_ctranslate2(data, name=name)
    header, found, aliases = struct_parse(data)
    assert header == (6, "WhisperSpec", 3)
    assert weights.metadata == {"format": "ctranslate2", "binary_version": "6", "spec": "WhisperSpec",
                                "spec_revision": "3"}
    assert list(weights) == [f[0] for f in found] + [a for a, _ in aliases]
    assert weights.aliases == dict(aliases) == {"decoder/projection/weight": "decoder/embeddings/weight"}
    by_id = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16"}
    for variable_name, dims, type_id, raw in found:
        t = weights[variable_name]
        assert t.shape == dims and t.dtype.name == by_id[type_id], variable_name
        assert t.raw_numpy().tobytes() == raw, variable_name
    assert found[0][:3] == ("decoder/activation", (), 1) and int(weights["decoder/activation"].numpy()) == 3
    assert int(weights["decoder/alignment_layer"].numpy()) == -1
    assert found[-1][0] == "encoder/position_encodings/encodings" and found[-1][2] == 4
    return weights, Counter(f[2] for f in found)


def test_whisper_tiny_en_as_shipped():
    weights, types = check_real(checkpoint("tiny.en"), "tiny.en/model.bin")
    assert types == {4: 139, 1: 5, 2: 4}                          # float16 tensors, int8 and int16 options
    assert len(weights) == 149
    assert weights["encoder/position_encodings/encodings"].shape == (1500, 384)
    assert weights["decoder/embeddings/weight"].shape == (51864, 384)
    assert weights["encoder/conv1/weight"].shape == (384, 80, 3)
    assert int(weights["decoder/num_heads"].numpy()) == int(weights["encoder/num_heads"].numpy()) == 6


def test_whisper_base_from_its_two_parts():
    weights, types = check_real(checkpoint("base"), "base/model.bin")
    assert types == {4: 203, 1: 5, 2: 4}
    assert weights["decoder/embeddings/weight"].shape == (51865, 512)
    assert int(weights["decoder/num_heads"].numpy()) == 8
    with pytest.raises(TruncatedFile):                             # one part alone is cut short
        load_ctranslate2(checkpoint_parts("base")[0], name="part1")


# --- hostile files -------------------------------------------------------------------------------

def test_every_cut_is_a_truncated_file():
    data = model_bin(VARIABLES, ALIASES)
    for end in range(len(data)):
        expect(TruncatedFile, data[:end])


def test_trailing_bytes():
    assert "3 bytes follow" in expect(InvalidHeader, model_bin(VARIABLES, ALIASES) + b"abc")
    assert "follow the last variable" in expect(InvalidHeader, model_bin(VARIABLES[:2], version=2) + b"\0")


@pytest.mark.parametrize("version", [0, 7, 0xFFFFFFFF])
def test_unknown_binary_version(version):
    assert f"binary version {version}" in expect(InvalidHeader, struct.pack("<I", version) + b"\0" * 20)


@pytest.mark.parametrize("type_id", [6, 255])
def test_unknown_dtype_id(type_id):
    data = model_bin([("ok", np.zeros(2, np.float32)), variable("odd", np.zeros(2, np.float32), type_id=type_id)])
    assert f"dtype id {type_id}" in expect(UnknownDtype, data, tensor="odd")


def test_unknown_item_size_before_version_4():
    data = model_bin([variable("odd", np.zeros(2, np.float32), version=3, type_id=3)], version=3)
    expect(UnknownDtype, data, tensor="odd")


def test_rank_above_8():
    data = model_bin([variable("deep", np.zeros((1,) * 9, np.float32))])
    assert "rank 9" in expect(InvalidHeader, data, tensor="deep")


def test_absurd_dims_are_refused_before_any_allocation():
    huge = (0xFFFFFFFF,) * 8
    data = model_bin([variable("huge", np.zeros(1, np.float32), shape=huge)])
    expect(SizeMismatch, data, tensor="huge")
    # dims and byte count that agree, over a file far shorter: nothing is allocated for it
    data = model_bin([variable("long", np.zeros(1, np.float32), shape=(0x3FFFFFFF,), byte_count=0xFFFFFFFC)])
    assert "4294967292 bytes" in expect(TruncatedFile, data, tensor="long")


def test_byte_count_disagreeing_with_the_shape():
    data = model_bin([variable("w", np.zeros((2, 3), np.float16), byte_count=10)])
    assert "needs 12" in expect(SizeMismatch, data, tensor="w")


@pytest.mark.parametrize("which", ["variables", "aliases"])
def test_counts_larger_than_the_file(which):
    kwargs = {"count": 0xFFFFFFFF} if which == "variables" else {"alias_count": 0xFFFFFFFF}
    assert "4294967295" in expect(TruncatedFile, model_bin(VARIABLES[:2], ALIASES[:0], **kwargs))


def test_duplicate_names():
    twice = [("w", np.zeros(1, np.float32)), ("w", np.ones(1, np.float32))]
    assert "two variables" in expect(InvalidHeader, model_bin(twice), tensor="w")
    expect(InvalidHeader, model_bin(VARIABLES[:1], [("a", VARIABLES[0][0]), ("a", VARIABLES[0][0])]), tensor="a")
    expect(InvalidHeader, model_bin(VARIABLES[:2], [(VARIABLES[1][0], VARIABLES[0][0])]), tensor=VARIABLES[1][0])


def test_alias_of_a_missing_name():
    message = expect(InvalidHeader, model_bin(VARIABLES[:1], [("tied", "nowhere")]), tensor="tied")
    assert "'nowhere'" in message
    chained = load_ctranslate2(model_bin(VARIABLES[:1], [("a", VARIABLES[0][0]), ("b", "a")]))
    assert int(chained["b"].numpy()) == 3                     # an alias of an alias defined before it


@pytest.mark.parametrize("record, words", [
    (struct.pack("<H", 0), "length 0"),                                  # a string without its NUL
    (struct.pack("<H", 2) + b"ab", "NUL-terminated"),
    (struct.pack("<H", 3) + b"a\0\0", "NUL-terminated"),
    (struct.pack("<H", 3) + b"\xff\xfe\0", "UTF-8"),
    (string(""), "empty name"),
])
def test_bad_names(record, words):
    data = model_bin([record + b"\0" * 16])
    assert words in expect(InvalidHeader, data)


def test_bad_spec_name():
    data = model_bin(VARIABLES[:1])
    assert "spec name" in expect(InvalidHeader, data[:4] + struct.pack("<H", 0) + data[4:])
