"""Byte sources: coalescing, files, and HTTP Range reads against a local server."""
from __future__ import annotations

import json

import numpy as np
import pytest
import safetensors.numpy

from engine.errors import FetchError, MissingShard, TruncatedFile
from engine.formats.safetensors import ShardedSafetensors, load_safetensors, save_safetensors
from engine.formats.sources import (BytesSource, FileSource, HttpSource, SourceNotFound,
                               open_source)


class Counting(BytesSource):
    def __init__(self, data, gap):
        super().__init__(data, "mem")
        self.coalesce_gap = gap
        self.reads = []

    def _read(self, offset, length):
        self.reads.append((offset, length))
        return super()._read(offset, length)


def test_read_many_coalesces_and_keeps_order():
    data = bytes(range(256))
    source = Counting(data, gap=4)
    ranges = [(50, 10), (0, 10), (10, 5), (18, 2), (55, 2), (200, 0), (100, 1)]
    views = source.read_many(ranges)
    assert [bytes(v) for v in views] == [data[o:o + n] for o, n in ranges]
    # [0,15) + [18,20) merge across a 3-byte gap; [50,60) holds [55,57); 100 and 200 alone
    assert source.reads == [(0, 20), (50, 10), (100, 1)]
    apart = Counting(data, gap=0)
    apart.read_many([(0, 4), (5, 4), (9, 1)])
    assert apart.reads == [(0, 4), (5, 5)]


def test_read_bounds():
    source = BytesSource(b"abcdef", "six")
    assert bytes(source.read(2, 3)) == b"cde" and bytes(source.read(6, 0)) == b""
    with pytest.raises(TruncatedFile, match="six"):
        source.read(4, 3)
    with pytest.raises(ValueError):
        source.read(-1, 2)


def test_file_source(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"0123456789")
    with FileSource(path) as source:
        assert source.size() == 10 and bytes(source.read(3, 4)) == b"3456"
        assert source.read(3, 4).readonly
        (tmp_path / "other.bin").write_bytes(b"x")
        assert source.sibling("other.bin").name == str(tmp_path / "other.bin")
    (tmp_path / "empty.bin").write_bytes(b"")      # mmap refuses empty files
    assert FileSource(tmp_path / "empty.bin").size() == 0
    with pytest.raises(SourceNotFound, match="nothing.bin"):
        FileSource(tmp_path / "nothing.bin")


def test_file_source_without_mmap(tmp_path, monkeypatch):
    import engine.formats.sources as sources
    monkeypatch.setattr(sources, "mmap", None)   # as on a Pyodide without mmap
    path = save_safetensors({"w": np.arange(6, dtype=np.int16)}, tmp_path / "m.safetensors")
    f = load_safetensors(path)
    assert f.source._map is None and f["w"].numpy().tolist() == list(range(6))


def test_open_source_and_siblings(tmp_path):
    assert isinstance(open_source("https://example.com/x"), HttpSource)
    assert isinstance(open_source(BytesSource(b"")), BytesSource)
    url = HttpSource("http://host/repo/resolve/main/model.safetensors.index.json?x=1")
    assert url.sibling("model 1.safetensors").url == \
        "http://host/repo/resolve/main/model%201.safetensors"
    with pytest.raises(NotImplementedError):
        BytesSource(b"").sibling("x")


# --- HTTP ------------------------------------------------------------------------------

def _theirs(root, name="model.safetensors"):
    arrays = {"a": np.arange(10, dtype=np.float32), "b": np.ones((3, 4), np.int64),
              "c": np.array(True), "d": np.zeros((0, 2), np.float16),
              "e": np.arange(100_000, dtype=np.float32)}     # past the first request
    safetensors.numpy.save_file(arrays, str(root / name))
    return arrays


def test_http_single_file(http_server, tmp_path):
    arrays = _theirs(tmp_path)
    f = load_safetensors(http_server.url("model.safetensors"))
    assert len(http_server.requests) == 1         # the probe carries size and header
    assert set(f) == set(arrays)
    got = f.get_many()
    assert len(http_server.requests) == 2         # all tensors in one Range request
    for name, a in arrays.items():
        assert got[name].raw_numpy().tobytes() == a.tobytes() and got[name].shape == a.shape
    assert f["a"].numpy().tolist() == list(range(10))


def test_http_large_header(http_server, tmp_path):
    tensors = {f"layer.{i}.a_rather_long_parameter_name": np.full(2, i, np.int32)
               for i in range(3000)}
    save_safetensors(tensors, tmp_path / "many.safetensors")
    f = load_safetensors(http_server.url("many.safetensors"))
    assert len(http_server.requests) == 2 and len(f) == 3000
    assert f["layer.2999.a_rather_long_parameter_name"].numpy().tolist() == [2999, 2999]


def test_http_sharded(http_server, tmp_path):
    tensors = {f"w{i}": np.full(100, i, np.float32) for i in range(6)}
    save_safetensors(tensors, tmp_path / "model.safetensors", max_shard_bytes=1000)
    f = load_safetensors(http_server.url("model.safetensors.index.json"))
    assert isinstance(f, ShardedSafetensors) and len(f.shard_names) == 3
    got = f.get_many()
    assert [t.numpy()[0] for t in got.values()] == list(range(6))
    (tmp_path / "model-00003-of-00003.safetensors").unlink()
    f = load_safetensors(http_server.url("model.safetensors.index.json"))
    with pytest.raises(MissingShard, match="model-00003-of-00003") as e:
        f["w5"]
    assert http_server.url("model.safetensors.index.json") in str(e.value)


def test_http_not_found(http_server):
    with pytest.raises(SourceNotFound, match="404"):
        load_safetensors(http_server.url("absent.safetensors"))


def test_http_empty_file(http_server, tmp_path):
    (tmp_path / "empty.safetensors").write_bytes(b"")
    with pytest.raises(TruncatedFile, match="0 bytes"):
        load_safetensors(http_server.url("empty.safetensors"))


def test_http_ignoring_range_is_refused(http_server, tmp_path):
    _theirs(tmp_path)
    http_server.mode = "ignore_range"
    url = http_server.url("model.safetensors")
    with pytest.raises(FetchError, match="Range") as e:
        load_safetensors(url)
    assert e.value.file == url and url in str(e.value)


@pytest.mark.parametrize("mode", ["short", "cut"])
def test_http_short_body(http_server, tmp_path, mode):
    _theirs(tmp_path)
    url = http_server.url("model.safetensors")
    source = HttpSource(url, retries=2, backoff=0)
    source.probe_bytes = 16                       # so the read below needs a request
    source.size()
    http_server.mode = mode
    with pytest.raises(FetchError, match="3 attempts") as e:
        source.read(20, 100)
    assert url in str(e.value) and len(http_server.requests) == 1 + 3


def test_http_retries_transient_errors(http_server, tmp_path):
    arrays = _theirs(tmp_path)
    http_server.fail_next = 2
    f = load_safetensors(HttpSource(http_server.url("model.safetensors"), backoff=0))
    assert f["b"].numpy().tolist() == arrays["b"].tolist()
    http_server.fail_next = 3
    with pytest.raises(FetchError, match="503"):
        load_safetensors(HttpSource(http_server.url("model.safetensors"), backoff=0))


def test_http_file_changed_on_server(http_server, tmp_path):
    _theirs(tmp_path)
    source = HttpSource(http_server.url("model.safetensors"), backoff=0)
    source.probe_bytes = 16
    size = source.size()
    (tmp_path / "model.safetensors").write_bytes(bytes(size + 5))
    with pytest.raises(FetchError, match="Content-Range"):
        source.read(20, 4)


def test_index_over_http_names_the_index(http_server, tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": 1}))
    url = http_server.url("model.safetensors.index.json")
    with pytest.raises(Exception, match="weight_map") as e:
        load_safetensors(url)
    assert url in str(e.value)
