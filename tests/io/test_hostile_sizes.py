"""Hostile shapes and sizes, one class of finding of the readers' fuzzer (tests/fuzz): shapes go through
engine.untrusted.checked_shape (at most 64 dims, each below 2**63, fewer than 2**63 elements), so a
shape never reaches NumPy's errors or a message that cannot be made, and counts are checked against
the bytes before anything is allocated. (.pth: tests/io/test_hostile_pth.py.)"""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from engine.errors import InvalidHeader, SizeMismatch, WeightsError
from engine.site import load_gguf, load_safetensors
from engine.site.manifest import check_manifest
from engine.site.folders import row_blocks
from engine.untrusted import checked_shape, shown
from tests.fuzz.readers import SEEDS
from tests.io.test_gguf_errors import build, tensor


class Refused(Exception):
    pass


@pytest.mark.parametrize("shape, reason", [
    ([1] * 65, "65 dimensions, more than 64"),
    ([2 ** 63], r"integers in \[0, 2\*\*63\)"),
    ([2 ** 32, 2 ** 32], "more than 2\\*\\*63 elements"),
    ([-1], r"integers in \[0, 2\*\*63\)"),
    ([True, 2], r"integers in \[0, 2\*\*63\)"),
    ("3", "must be a list"),
])
def test_checked_shape_refuses(shape, reason):
    with pytest.raises(Refused, match=reason):
        checked_shape(shape, Refused)


def test_checked_shape_accepts():
    assert checked_shape([1] * 64, Refused) == (1,) * 64
    assert checked_shape((0, 2 ** 62, 2 ** 62), Refused) == (0, 2 ** 62, 2 ** 62)    # no elements


def test_messages_never_fail_on_values_python_cannot_print():
    assert shown(10 ** 5000) == "<int too large to show>"
    assert shown([1, (2, 10 ** 5000)]) == "<list too large to show>"
    assert shown("x" * 1000, 10) == "'xxxxxxxxx..."


def safetensors(tmp_path, header: dict, data: bytes = b"") -> str:
    blob = json.dumps(header).encode()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return str(path)


@pytest.mark.parametrize("shape", [[1] * 65, [2 ** 63], [2 ** 40, 2 ** 40], [4294967296] * 3])
def test_safetensors_shapes(tmp_path, shape):
    # 65 dims of 1 with consistent offsets used to reach NumPy's "maximum supported dimension"
    path = safetensors(tmp_path, {"w": {"dtype": "U8", "shape": shape, "data_offsets": [0, 1]}}, b"\0")
    with pytest.raises(InvalidHeader) as info:
        load_safetensors(path)
    assert info.value.tensor == "w" and "shape" in str(info.value)


def test_safetensors_shape_of_64_dims_still_reads(tmp_path):
    path = safetensors(tmp_path, {"w": {"dtype": "U8", "shape": [1] * 64, "data_offsets": [0, 1]}}, b"\7")
    assert load_safetensors(path)["w"].numpy().reshape(-1).tolist() == [7]


def test_safetensors_long_names_are_cut_in_messages(tmp_path):
    name = "n" * 100_000
    path = safetensors(tmp_path, {name: {"dtype": "F32", "shape": [3], "data_offsets": [0, 4]}}, bytes(4))
    with pytest.raises(SizeMismatch) as info:
        load_safetensors(path)
    assert info.value.tensor == name and len(str(info.value)) < 1000


def test_gguf_quantized_tensor_with_no_rows(tmp_path):
    # a q4_k tensor of shape (0, 256): its dequantization used to fail in a reshape
    path = tmp_path / "empty.gguf"
    path.write_bytes(build(tensors=[tensor("q", [256, 0], 12, 0)]))
    weights = load_gguf(path)
    assert weights["q"].dequantize().numpy().shape == (0, 256)


def test_manifest_row_table_must_agree_with_its_bytes():
    # the rows were gathered as the shape said: (40, 10**12) made every gathered row 4 TB
    manifest = json.loads((SEEDS / "manifest" / "safetensors_rows" / "manifest.json").read_text())
    entry = manifest["tensors"]["emb"]
    assert row_blocks(entry, "emb", "m.json")[1:] == (entry["rows"]["block_rows"], entry["rows"]["sha256"])
    entry["shape"] = [40, 10 ** 12]
    with pytest.raises(InvalidHeader, match="needs 80000000000000 bytes, its entry says 320") as info:
        row_blocks(entry, "emb", "m.json")
    assert info.value.tensor == "emb"
    entry["shape"] = [1] * 65
    with pytest.raises(WeightsError):
        check_manifest(manifest, "m.json")


def test_manifest_counts_are_64_bit():
    manifest = json.loads((SEEDS / "manifest" / "safetensors_rows" / "manifest.json").read_text())
    manifest["files"]["model-rows-00001.safetensors"]["size"] = 2 ** 64
    with pytest.raises(InvalidHeader, match="needs size"):
        check_manifest(manifest, "m.json")
    np.testing.assert_equal(len(manifest["tensors"]), 3)
