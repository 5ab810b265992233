"""Hostile JSON, one class of finding of the readers' fuzzer (tests/fuzz): every JSON reader goes
through engine.untrusted.load_json, which bounds size, depth and numbers, so no document gives
RecursionError, a thousand-digit integer or a quadratic duplicate check."""
from __future__ import annotations

import json
import shutil
import struct
import time

import pytest

from engine.errors import InvalidHeader
from engine.site import load_gguf, load_safetensors
from engine.site.folders import open_gguf_folder
from engine.untrusted import MAX_JSON_DEPTH, load_json
from tests.fuzz.readers import SEEDS


class Refused(Exception):
    pass


HOSTILE = {
    "nested-100000": "[" * 100_000 + "]" * 100_000,
    "nested-objects": '{"a":' * 50_000 + "1" + "}" * 50_000,
    "nested-65": "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
    "int-5000-digits": '{"a": 1' + "0" * 5000 + "}",
    "int-past-64-bits": '{"a": 18446744073709551616}',
    "nan": '{"a": NaN}',
    "infinity": '{"a": -Infinity}',
    "float-past-range": '{"a": 1e400}',
    "not-utf8": b'{"\xff": 1}',
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_load_json_refuses_through_the_readers_error(text):
    with pytest.raises(Refused) as info:
        load_json(text, Refused, what="the doc")
    assert str(info.value).startswith("the doc ")


def test_load_json_accepts_what_files_hold():
    document = {"a": [1, -2, 2 ** 64 - 1, -(2 ** 63), 0.5, None, True, "é"], "b": {"c": [[[]]]}}
    assert load_json(json.dumps(document).encode(), Refused) == document
    assert load_json('{"a": 1, "a": 2}', Refused) == {"a": 2}             # duplicates allowed unless asked
    with pytest.raises(Refused, match="duplicate key 'a'"):
        load_json('{"a": 1, "a": 2}', Refused, unique_keys=True)
    with pytest.raises(Refused, match="over the limit of 10"):
        load_json("[" + " " * 20 + "]", Refused, max_bytes=10)


def safetensors_with_header(path, header_text: str, data: bytes = b"") -> str:
    blob = header_text.encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return str(path)


@pytest.mark.parametrize("text", [HOSTILE["nested-100000"], HOSTILE["int-5000-digits"], HOSTILE["nan"]],
                         ids=["nested", "huge-int", "nan"])
def test_safetensors_header(tmp_path, text):
    path = safetensors_with_header(tmp_path / "bad.safetensors", text)
    with pytest.raises(InvalidHeader) as info:
        load_safetensors(path)
    assert info.value.file == path and "header" in str(info.value)


def test_a_duplicate_among_100000_names_is_found_fast(tmp_path):
    # the duplicate check was quadratic: this header took minutes
    entries = ", ".join(f'"t{i}": {{"dtype": "U8", "shape": [1], "data_offsets": [{i}, {i + 1}]}}'
                        for i in range(100_000))
    text = "{" + entries + ', "t5": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}'
    path = safetensors_with_header(tmp_path / "dup.safetensors", text, bytes(100_000))
    start = time.perf_counter()
    with pytest.raises(InvalidHeader, match="duplicate key 't5'"):
        load_safetensors(path)
    assert time.perf_counter() - start < 5


def test_shard_index(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(HOSTILE["nested-objects"])
    with pytest.raises(InvalidHeader, match="index nests JSON containers deeper than"):
        load_safetensors(tmp_path)


def test_site_manifest(tmp_path):
    folder = tmp_path / "site"
    shutil.copytree(SEEDS / "manifest" / "gguf_parts", folder)
    assert sorted(load_gguf(folder)) == sorted(open_gguf_folder(folder / "manifest.json"))
    for text in (HOSTILE["nested-100000"], HOSTILE["infinity"], '{"format": 1, "format": 1}'):
        (folder / "manifest.json").write_text(text)
        with pytest.raises(InvalidHeader) as info:
            load_gguf(folder)
        assert info.value.file == str(folder / "manifest.json")
