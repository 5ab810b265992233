"""Headers of very many tensors: checked a column at a time, with the same answers as entry by entry.

The reader checks a header's entries as columns (engine/formats/safetensors_header.py) and goes through
them one by one only when that check does not vouch for the header. These tests hold the two to the
same answers: the same infos, or the same error with the same message.
"""
from __future__ import annotations

import json
import random
import struct

import numpy as np
import pytest
import safetensors.numpy

from engine import dtypes
from engine.errors import WeightsError
from engine.formats import safetensors_header
from engine.formats.safetensors import TensorInfo, load_safetensors
from engine.formats.sources import BytesSource

EMPTY = 100_000


def file_bytes(header: dict | str, data: bytes = b"") -> bytes:
    blob = (header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))).encode()
    blob += b" " * (-len(blob) % 8)
    return struct.pack("<Q", len(blob)) + blob + data


def test_a_hundred_thousand_empty_tensors(tmp_path):
    """100,000 empty tensors (shapes [0], [0, 4], [3, 0, 2]) around two real ones: the empty ones
    sit at offset 0, between the real ones (16) and at the end of the data (24), as writers put them."""
    rows = [(f"layers.{i}.bias", "F32", ([0], [0, 4], [3, 0, 2])[i % 3], (0, 16, 24)[i % 3]) for i in range(EMPTY)]
    rows += [("first", "F32", [4], 0), ("second", "I64", [1], 16)]
    ends = {"first": 16, "second": 24}
    text = ",".join(f'"{name}":{{"dtype":"{code}","shape":{shape},"data_offsets":[{at},{ends.get(name, at)}]}}'
                    for name, code, shape, at in rows)
    data = np.arange(4, dtype="<f4").tobytes() + np.array([7], "<i8").tobytes()
    path = tmp_path / "empty.safetensors"
    path.write_bytes(file_bytes('{"__metadata__":{"format":"pt"},' + text + "}", data))
    theirs = safetensors.numpy.load_file(str(path))
    names = [name for name, *_ in rows]
    start = path.stat().st_size - len(data)
    expected = [TensorInfo(name, dtypes.BY_SAFETENSORS[code], tuple(shape), start + at, ends.get(name, at) - at,
                           str(path)) for name, code, shape, at in rows]
    with load_safetensors(path) as weights:
        assert list(weights) == names and len(weights) == EMPTY + 2
        assert weights.metadata == {"format": "pt"}
        assert [weights.info(name) for name in weights] == expected
        tensors = weights.get_many()
        assert list(tensors) == names
        assert [t.shape for t in tensors.values()] == [theirs[name].shape for name in names]
        assert {t.numpy().size for t in list(tensors.values())[:EMPTY]} == {0}
        assert weights["first"].numpy().tolist() == [0, 1, 2, 3] and weights["second"].numpy().tolist() == [7]
        assert weights["layers.99997.bias"].numpy().shape == (0, 4)


def test_a_sharded_index_of_many_empty_tensors(tmp_path):
    weight_map = {}
    for shard in (1, 2):
        filename = f"model-0000{shard}-of-00002.safetensors"
        header = {f"t.{i}": {"dtype": "F16", "shape": [0, shard], "data_offsets": [0, 0]}
                  for i in range(shard - 1, 20_000, 2)}
        (tmp_path / filename).write_bytes(file_bytes(header))
        weight_map.update(dict.fromkeys(header, filename))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with load_safetensors(tmp_path) as weights:
        assert len(weights) == 20_000 and weights.shard_names == list(dict.fromkeys(weight_map.values()))
        shapes = {tensor.shape for tensor in weights.get_many().values()}
        assert shapes == {(0, 1), (0, 2)} and weights["t.19999"].shape == (0, 2)


# --- the column check against the entry-by-entry check --------------------------------------------

ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "U8": 1, "I64": 8, "BOOL": 1, "F64": 8}


def random_header(rng: random.Random) -> tuple[dict, int]:
    """A valid header of 1 to 6 tensors (empty ones among them), then 0 to 2 faults of the kinds the
    checks look for; with the length of the data buffer, which may be wrong too."""
    header, offset = {}, 0
    for i in range(rng.randint(1, 6)):
        code = rng.choice(list(ITEMSIZE))
        shape = [rng.choice((0, 1, 2, 3)) for _ in range(rng.randint(0, 3))]
        nbytes = ITEMSIZE[code] * int(np.prod(shape, dtype=np.int64))
        header[f"t{i}"] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    data_len = offset
    for _ in range(rng.choice((0, 0, 1, 2))):
        name = rng.choice(list(header))
        entry, fault = header[name], rng.randrange(11)
        if not isinstance(entry, dict):
            continue
        offsets, shape = entry.get("data_offsets"), entry.get("shape")
        if fault == 0 and isinstance(offsets, list) and len(offsets) == 2:
            offsets[rng.randrange(2)] += rng.choice((-2, -1, 1, 2))            # overlap, hole, size
        elif fault == 1 and isinstance(offsets, list) and len(offsets) >= 2:
            entry["data_offsets"] = [offsets[1], offsets[0]]                    # reversed
        elif fault == 2 and shape:
            shape[0] = rng.choice((True, False, 1.0, -1, 0, 2 ** 63, [1]))      # not a dim
        elif fault == 3:
            entry["dtype"] = rng.choice(("F8", "f32", 1, None, ["F32"]))
        elif fault == 4:
            data_len += rng.choice((-1, 1, 8))                                  # truncated, a tail
        elif fault == 5:
            at = rng.randint(0, offset + 2)
            entry["data_offsets"] = [at, at]                                    # an empty tensor anywhere
        elif fault == 6:
            header[name + ".copy"] = json.loads(json.dumps(entry))              # the same bytes twice
        elif fault == 7:
            entry["extra"] = [[1]]                                              # keys the format ignores
        elif fault == 8 and len(entry) == 3:
            del entry[rng.choice(("dtype", "shape", "data_offsets"))]
        elif fault == 9 and isinstance(offsets, list):
            entry["data_offsets"] = offsets + [0]
        elif fault == 10:
            header[name] = rng.choice(([], "x", None, 1))                       # not an object
    return header, max(data_len, 0)


def outcome(blob: bytes):
    """The infos as plain tuples, or the error's type and message."""
    try:
        weights = load_safetensors(BytesSource(blob, "header"))
    except WeightsError as e:
        return type(e).__name__, str(e)
    return [tuple(vars(weights.info(name)).values()) for name in weights]


def test_column_check_answers_as_the_entry_checks(monkeypatch):
    rng = random.Random(7)
    cases = []
    for _ in range(1500):
        header, data_len = random_header(rng)
        cases.append(file_bytes(header, b"\0" * data_len))
    columns = [outcome(blob) for blob in cases]

    def unusual(*args):
        raise safetensors_header._Unusual
    monkeypatch.setattr(safetensors_header, "_columns", unusual)
    entries = [outcome(blob) for blob in cases]
    assert columns == entries
    # both kinds of answer, and each kind of error, are among the cases
    kinds = {answer[0] if isinstance(answer, tuple) else "infos" for answer in entries}
    assert kinds >= {"infos", "InvalidHeader", "UnknownDtype", "InvalidOffsets", "SizeMismatch", "TruncatedFile"}


@pytest.mark.parametrize("header, data_len, error", [
    ({"a": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 8, "overlap tensor 'b'"),
    ({"a": {"dtype": "F32", "shape": [0], "data_offsets": [12, 12]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 8, "lie outside the 8-byte data buffer"),
    ({"a": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, 4, "shape must hold integers"),
])
def test_an_empty_tensor_out_of_place_among_many(header, data_len, error):
    """One bad entry after 5,000 good ones: the error of the small header, word for word."""
    alone = outcome(file_bytes(header, b"\0" * data_len))
    assert error in alone[1]
    many = {f"ok.{i}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]} for i in range(5000)}
    assert outcome(file_bytes({**many, **header}, b"\0" * data_len)) == alone
