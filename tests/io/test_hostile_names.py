"""Hostile file names inside files, one class of finding of the readers' fuzzer (tests/fuzz): a shard
in an index, a part, row table or processor file in a manifest is opened beside it, so every such
name goes through engine.untrusted.checked_name, and opening what is not a readable file (a
directory) is a WeightsError, not IsADirectoryError."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from engine.errors import FetchError, InvalidHeader, WeightsError
from engine.formats import save_safetensors
from engine.site import load_gguf, load_safetensors
from engine.site.manifest import check_manifest
from engine.formats.sources import FileSource
from engine.untrusted import checked_name
from tests.fuzz.readers import SEEDS


class Refused(Exception):
    pass


BAD_NAMES = {"parent": "../outside.safetensors", "deep-parent": "sub/../../x.safetensors", "absolute": "/etc/hostname",
             "backslash": "..\\x.safetensors", "drive": "C:x.safetensors", "nul": "model\x00.safetensors",
             "empty": "", "dot": ".", "double-slash": "a//b.safetensors", "trailing-slash": "sub/",
             "too-long": "a" * 300, "escaped-parent": "%2e%2e/x.safetensors", "query": "x.safetensors?y",
             "lone-surrogate": "\ud800.safetensors", "control": "x\n.safetensors", "not-a-string": 7}


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_checked_name_refuses(name):
    with pytest.raises(Refused):
        checked_name(name, Refused)


def test_checked_name_accepts_plain_relative_paths():
    for name in ("model-00001-of-00002.safetensors", "sub/model.safetensors", "mödel.safetensors", "a b.json"):
        assert checked_name(name, Refused) == name


@pytest.fixture
def sharded(tmp_path):
    index = save_safetensors({f"w{i}": np.full(4, i, np.float32) for i in range(3)},
                             tmp_path / "model.safetensors", max_shard_bytes=16)
    return tmp_path, json.loads(open(index).read())


@pytest.mark.parametrize("name", [n for n in BAD_NAMES.values() if n != 7],
                         ids=[k for k, n in BAD_NAMES.items() if n != 7])
def test_index_shard_names(sharded, name):
    folder, index = sharded
    index["weight_map"]["w1"] = name
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InvalidHeader) as info:
        load_safetensors(folder)
    assert info.value.file == str(folder / "model.safetensors.index.json") and info.value.tensor == "w1"


def test_a_shard_that_is_a_directory(sharded):
    folder, index = sharded
    (folder / "shard.safetensors").mkdir()
    index["weight_map"]["w1"] = "shard.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    weights = load_safetensors(folder)
    with pytest.raises(FetchError, match="cannot open") as info:
        weights["w1"]
    assert info.value.file == str(folder / "shard.safetensors")
    assert weights["w0"].numpy().tolist() == [0, 0, 0, 0]


def test_file_source_errors_are_weights_errors(tmp_path):
    for path in (tmp_path, tmp_path / "a\x00b", tmp_path / ("x" * 5000)):
        with pytest.raises(FetchError):
            FileSource(path)


def manifest_of(seed: str) -> dict:
    return json.loads((SEEDS / "manifest" / seed / "manifest.json").read_text())


@pytest.mark.parametrize("change", [
    lambda m: m.update(index="../other/model.safetensors.index.json"),
    lambda m: m["tensors"]["emb"].update(file="/etc/hostname"),              # a row table, fetched later
    lambda m: m["tensors"]["emb"].update(file="unlisted.safetensors"),
    lambda m: m["extra"].update({"../secret.json": m["extra"]["vocab.json"]}),
    lambda m: m["files"].update({"a/../../b": m["files"]["model-rows-00001.safetensors"]}),
    lambda m: m["tensors"]["emb"].update(offset=10 ** 6),                     # past the end of its file
    lambda m: m.update(extra=[]),
], ids=["index", "row-table-file", "unlisted-file", "extra", "files", "past-the-end", "extra-not-object"])
def test_manifest_names_and_spans(change):
    manifest = manifest_of("safetensors_rows")
    check_manifest(manifest, "site/manifest.json")
    change(manifest)
    with pytest.raises(InvalidHeader) as info:
        check_manifest(manifest, "site/manifest.json")
    assert info.value.file == "site/manifest.json"


def test_gguf_folder_part_that_is_a_directory(tmp_path):
    folder = tmp_path / "site"
    shutil.copytree(SEEDS / "manifest" / "gguf_parts", folder)
    part = sorted(folder.glob("*.part-*"))[0]
    part.unlink()
    part.mkdir()
    with pytest.raises(WeightsError, match="cannot open") as info:
        load_gguf(folder)
    assert info.value.file == str(part)
