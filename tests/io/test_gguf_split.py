"""GGUF split files (llama.cpp's gguf-split: name-00001-of-00003.gguf, ...) open as one model: from
disk, by URL (blocking and awaited), with every disagreement between the files an error naming
the file and the key. The files are written by gguf-py's own writer (its split_max_tensors)."""
from __future__ import annotations

import asyncio
import shutil

import numpy as np
import pytest

import engine
from engine.errors import InvalidHeader, MissingShard, MissingTensor
from engine.formats.gguf_split import GGUFSplits
from tests.helpers import need_import, to_numpy


def _write(path, split_max_tensors: int = 0, tensors: int = 7, extra=None):
    gguf = need_import("gguf")
    writer = gguf.GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    writer.add_block_count(3)
    writer.add_string("general.name", "split test")
    for key, value in (extra or {}).items():
        writer.add_uint32(key, value)
    rng = np.random.default_rng(0)
    for i in range(tensors):
        writer.add_tensor(f"blk.{i}.w", rng.standard_normal((4, 32)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture
def split(tmp_path):
    """(folder of model-0000N-of-00003.gguf, the same model in one file)."""
    folder = tmp_path / "split"
    folder.mkdir()
    _write(folder / "model.gguf", split_max_tensors=3)
    _write(tmp_path / "whole.gguf")
    names = sorted(p.name for p in folder.iterdir())
    assert names == [f"model-0000{i}-of-00003.gguf" for i in (1, 2, 3)], names
    return folder, tmp_path / "whole.gguf"


def _same(opened, whole_path):
    with engine.load_gguf(whole_path) as whole:
        assert sorted(opened) == sorted(whole)
        for name in whole:
            np.testing.assert_array_equal(to_numpy(opened[name]), to_numpy(whole[name]))
        assert opened.metadata["general.name"] == whole.metadata["general.name"] == "split test"
        assert opened.metadata["llama.block_count"] == 3
        many = opened.get_many()
        assert list(many) == list(opened)


def test_the_first_file_opens_the_whole_model(split):
    folder, whole = split
    with engine.load_gguf(folder / "model-00001-of-00003.gguf") as opened:
        assert isinstance(opened, GGUFSplits) and len(opened.files) == 3
        assert opened.metadata["split.count"] == 3 and opened.metadata["split.tensors.count"] == 7
        _same(opened, whole)
        with pytest.raises(MissingTensor, match="no such tensor"):
            opened["blk.99.w"]


def test_a_later_file_says_to_open_the_first(split):
    folder, _ = split
    with pytest.raises(InvalidHeader, match=r"file 2 of a GGUF split into 3: open the first "
                                            r"\(model-00001-of-00003.gguf\)") as e:
        engine.load_gguf(folder / "model-00002-of-00003.gguf")
    assert e.value.tensor == "split.no"


def test_a_missing_file_is_named(split):
    folder, _ = split
    (folder / "model-00003-of-00003.gguf").unlink()
    with pytest.raises(MissingShard, match="model-00003-of-00003.gguf"):
        engine.load_gguf(folder / "model-00001-of-00003.gguf")


def test_a_renamed_first_file_cannot_find_the_others(split, tmp_path):
    folder, _ = split
    shutil.copy(folder / "model-00001-of-00003.gguf", tmp_path / "renamed.gguf")
    with pytest.raises(InvalidHeader, match="named <prefix>-00001-of-00003.gguf"):
        engine.load_gguf(tmp_path / "renamed.gguf")


def test_files_of_two_splits_do_not_mix(split, tmp_path):
    """A file of another split (here: one split into 2) in place of the second is refused."""
    folder, _ = split
    other = tmp_path / "other"
    other.mkdir()
    _write(other / "model.gguf", split_max_tensors=4)           # 2 files
    shutil.copy(other / "model-00002-of-00002.gguf", folder / "model-00002-of-00003.gguf")
    with pytest.raises(InvalidHeader, match="split.count is 2, but the first file says 3"):
        engine.load_gguf(folder / "model-00001-of-00003.gguf")


def _hand_split(folder, total: int, second_first_tensor: int):
    """Two files written with the split keys by hand: 2 tensors each, the second's numbered from
    `second_first_tensor`, the first saying `total` tensors in all."""
    gguf = need_import("gguf")
    for number, first in ((0, 0), (1, second_first_tensor)):
        writer = gguf.GGUFWriter(str(folder / f"hand-0000{number + 1}-of-00002.gguf"), "llama")
        writer.add_uint16("split.no", number)
        writer.add_uint16("split.count", 2)
        writer.add_int32("split.tensors.count", total)
        for i in range(first, first + 2):
            writer.add_tensor(f"blk.{i}.w", np.zeros((2, 32), np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return folder / "hand-00001-of-00002.gguf"


def test_the_files_must_hold_the_tensors_the_first_counts(tmp_path):
    with engine.load_gguf(_hand_split(tmp_path, 4, 2)) as opened:
        assert sorted(opened) == [f"blk.{i}.w" for i in range(4)]
    with pytest.raises(InvalidHeader, match="split.tensors.count is 5, but the 2 files hold 4 tensors"):
        engine.load_gguf(_hand_split(tmp_path, 5, 2))
    with pytest.raises(InvalidHeader, match="the tensor is in two files of the split") as e:
        engine.load_gguf(_hand_split(tmp_path, 4, 1))
    assert e.value.tensor == "blk.1.w"


def test_by_url_blocking_and_awaited(split, http_server):
    folder, whole = split
    for path in folder.iterdir():
        shutil.copy(path, http_server.root / path.name)
    url = http_server.url("model-00001-of-00003.gguf")
    with engine.load_gguf(url) as opened:
        _same(opened, whole)
    opened = asyncio.run(engine.site.load_gguf_async(url))
    assert isinstance(opened, GGUFSplits)
    _same(opened, whole)
    (http_server.root / "model-00002-of-00003.gguf").unlink()
    with pytest.raises(MissingShard, match="model-00002-of-00003.gguf"):
        asyncio.run(engine.site.load_gguf_async(url))
