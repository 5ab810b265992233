"""Two-phase HTTP loading: async prefetch (engine.site.remote), then the sync parser.

Against the Range server of conftest.py with UrllibTransport, and against an in-memory
transport and cache that count every request and byte.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import struct
import sys
import types

import numpy as np
import pytest

from engine.errors import (FetchError, IntegrityError, InvalidHeader, MissingShard,
                           MissingTensor, SourceNotFound, TruncatedFile)
from engine.site.remote import (HEAD_BYTES, PrefetchedSource, fetch_manifest,
                              fetch_safetensors)
from engine.formats.safetensors import (SafetensorsFile, ShardedSafetensors, load_safetensors,
                                   save_safetensors)
from engine.runtime import UrllibTransport
from tests.helpers import range_reply

BASE = "https://site.test/w/"
INDEX = "model.safetensors.index.json"


def tensors(bias=0.0):
    rng = np.random.default_rng(0)
    return {
        "embed.weight": rng.standard_normal((100, 200)).astype(np.float32),   # 80 kB
        "layer.0.weight": rng.standard_normal((64, 64)).astype(np.float32),
        "layer.0.bias": rng.standard_normal(64).astype(np.float32),
        "layer.1.weight": rng.standard_normal((64, 64)).astype(np.float16),
        "layer.1.bias": rng.integers(-9, 9, 64),
        "head.weight": rng.standard_normal((10, 300)).astype(np.float32),
        "head.bias": np.full(10, bias, np.float32),
        "scale": np.float32(3.0),
        "empty": np.zeros((0, 3), np.float32),
        "mask": np.array([True, False] * 3 + [True]),
    }


@pytest.fixture
def site(tmp_path):
    """model.safetensors (one file) and 4 shards + index, with their manifests."""
    save_safetensors(tensors(), tmp_path / "model.safetensors")
    save_safetensors(tensors(), tmp_path / "model.safetensors", max_shard_bytes=20_000)
    return tmp_path


def make_manifest(path, model="toy"):
    """The manifest buildtools/convert.py writes, for a local file or index."""
    weights = load_safetensors(path)
    shards = ([(f, weights.shard(f)) for f in weights.shard_names]
              if isinstance(weights, ShardedSafetensors) else [(path.name, weights)])
    files, entries = {}, {}
    for filename, shard in shards:
        data = shard.source.read(0, shard.source.size())
        files[filename] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name in shard:
            i = shard.info(name)
            entries[name] = {"file": filename, "dtype": i.dtype.safetensors,
                             "shape": list(i.shape), "offset": i.offset, "nbytes": i.nbytes,
                             "sha256": hashlib.sha256(data[i.offset:i.offset + i.nbytes])
                             .hexdigest()}
    return {"format": 1, "model": model, "index": path.name,
            "total_bytes": sum(f["size"] for f in files.values()), "files": files,
            "tensors": entries, "metadata": {}, "extra": {}}


def files_of(root):
    return {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}


class FakeTransport:
    """Serves a dict of files under BASE with exact Range semantics; records calls."""

    def __init__(self, files):
        self.files = dict(files)
        self.calls = []          # (filename, start, end)
        self.fail = []           # statuses or exceptions for the next calls

    async def get(self, url, start=None, end=None):
        name = url[len(BASE):]
        self.calls.append((name, start, end))
        if self.fail:
            fault = self.fail.pop(0)
            if isinstance(fault, Exception):
                raise fault
            return fault, {}, b""
        data = self.files.get(name)
        if data is None:
            return 404, {}, b""
        return range_reply(data, start, end)

    def requested(self):
        return sorted({name for name, _, _ in self.calls})


class MemoryCache:
    def __init__(self):
        self.entries = {}

    async def get(self, key):
        return self.entries.get(key)

    async def put(self, key, data):
        self.entries[key] = bytes(data)

    async def delete(self, key):
        self.entries.pop(key, None)

    async def keys(self):
        return list(self.entries)


class Sleeps(list):
    """A `sleep` that records its delays instead of waiting."""

    async def __call__(self, seconds):
        self.append(seconds)


def fetch(url, transport, **options):
    options.setdefault("sleep", Sleeps())
    return asyncio.run(fetch_safetensors(url, transport=transport, **options))


def assert_same(weights, reference, names=None):
    for name in reference if names is None else names:
        got, want = weights[name], reference[name]
        assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape), name
        assert np.array_equal(got.numpy(), want.numpy()), name


# --- PrefetchedSource ------------------------------------------------------------

def test_prefetched_source_serves_spans_zero_copy():
    data = bytes(range(100))
    source = PrefetchedSource("https://h/dir/model.safetensors", 1000)
    source.add(200, data)
    view = source.read(210, 5)
    assert bytes(view) == data[10:15] and view.obj is data
    with pytest.raises(FetchError, match=r"bytes \[290, 310\) were not prefetched.*"
                                         r"https://h/dir/model.safetensors"):
        source.read(290, 20)
    with pytest.raises(TruncatedFile):
        source.read(990, 20)
    sibling = source.sibling("shard 1.safetensors")
    assert sibling.name == "https://h/dir/shard%201.safetensors"
    with pytest.raises(FetchError, match="not prefetched"):
        sibling.size()


# --- loading over the Range server -----------------------------------------------

def test_single_file_over_http_fetches_each_byte_once(site, http_server):
    size = (site / "model.safetensors").stat().st_size
    assert size > HEAD_BYTES
    w = fetch(http_server.url("model.safetensors"), UrllibTransport())
    assert isinstance(w, SafetensorsFile) and w.name == http_server.url("model.safetensors")
    assert_same(w, load_safetensors(site / "model.safetensors"))
    # the probe, then the rest of the data buffer in one request
    assert http_server.requests == [f"bytes=0-{HEAD_BYTES - 1}", f"bytes={HEAD_BYTES}-{size - 1}"]
    assert w.fetch_stats == {"requests": 2, "network_bytes": size, "cache_bytes": 0, "runs": 1}


def test_sharded_over_http_all_and_subset(site, http_server):
    reference = load_safetensors(site / INDEX)
    w = fetch(http_server.url(INDEX), UrllibTransport())
    assert isinstance(w, ShardedSafetensors) and len(reference.shard_names) == 4
    assert_same(w, reference)
    total = sum((site / f).stat().st_size for f in [INDEX, *reference.shard_names])
    assert w.fetch_stats["network_bytes"] == total
    assert w.fetch_stats["requests"] == 1 + 4 + 1      # index, probes, the 80 kB shard's rest

    http_server.requests.clear()
    w = fetch(http_server.url(INDEX), UrllibTransport(), names=["layer.1.bias", "head.bias"])
    assert_same(w, reference, ["layer.1.bias", "head.bias"])
    assert w.fetch_stats["requests"] == 3                # index + two small shards
    with pytest.raises(FetchError, match="not prefetched"):
        w["embed.weight"]                                # its shard was never fetched


def test_only_the_wanted_ranges_are_fetched_and_coalesced(site):
    transport = FakeTransport(files_of(site))
    local = load_safetensors(site / "model.safetensors")
    far = ["layer.0.weight", "layer.1.weight"]           # beyond the probe, 4 bytes apart
    spans = [(local.info(n).offset, local.info(n).offset + local.info(n).nbytes) for n in far]
    assert spans[0][0] >= HEAD_BYTES and spans[1][0] - spans[0][1] == 4
    w = fetch(BASE + "model.safetensors", transport, names=far, coalesce_gap=0)
    assert_same(w, local, far)
    assert transport.calls == [("model.safetensors", 0, HEAD_BYTES)] + \
        [("model.safetensors", a, b) for a, b in spans]
    assert w.fetch_stats["runs"] == 2
    with pytest.raises(FetchError, match="not prefetched"):
        w["scale"]                                       # between them, never fetched

    transport.calls.clear()                              # the default gap merges them
    w = fetch(BASE + "model.safetensors", transport, names=far)
    assert transport.calls[1:] == [("model.safetensors", spans[0][0], spans[1][1])]
    assert w.fetch_stats["runs"] == 1 and w["scale"].item() == 3.0

    transport.calls.clear()                              # adjacent tensors: one request
    adjacent = ["layer.0.weight", "scale"]
    w = fetch(BASE + "model.safetensors", transport, names=adjacent, coalesce_gap=0)
    assert_same(w, local, adjacent)
    assert len(transport.calls) == 2 and w.fetch_stats["runs"] == 1

    transport.calls.clear()                              # big runs are split at tensors
    w = fetch(BASE + "model.safetensors", transport, max_run_bytes=20_000)
    assert_same(w, local)
    sizes = [end - start for _, start, end in transport.calls[1:]]
    assert w.fetch_stats["runs"] == len(sizes) + 1 > 3   # the first run came with the probe
    assert max(sizes) <= 20_000          # embed.weight's own run lies mostly in the probe


def test_header_longer_than_the_probe(tmp_path):
    many = {f"block.{i}.a_rather_long_parameter_name.weight": np.full(2, i, np.int16)
            for i in range(1500)}
    save_safetensors(many, tmp_path / "model.safetensors")
    data = (tmp_path / "model.safetensors").read_bytes()
    header_end = 8 + struct.unpack("<Q", data[:8])[0]
    assert header_end > HEAD_BYTES
    transport = FakeTransport(files_of(tmp_path))
    w = fetch(BASE + "model.safetensors", transport)
    assert transport.calls[:2] == [("model.safetensors", 0, HEAD_BYTES),
                                   ("model.safetensors", HEAD_BYTES, header_end)]
    assert_same(w, load_safetensors(tmp_path / "model.safetensors"))


def test_missing_tensor_fails_before_fetching_shards(site):
    transport = FakeTransport(files_of(site))
    with pytest.raises(MissingTensor, match="nope"):
        fetch(BASE + INDEX, transport, names=["scale", "nope"])
    assert transport.requested() == [INDEX]


# --- failures --------------------------------------------------------------------

class FaultOnce:
    """Puts the server in `mode` for the first data request (not the probe)."""

    def __init__(self, server, mode):
        self.server, self.mode, self.inner = server, mode, UrllibTransport(timeout=10)

    async def get(self, url, start=None, end=None):
        if self.mode and start:
            self.server.mode, self.mode = self.mode, None
            try:
                return await self.inner.get(url, start, end)
            finally:
                self.server.mode = "normal"
        return await self.inner.get(url, start, end)


@pytest.mark.parametrize("mode", ["cut", "short"])
def test_retry_after_a_broken_reply(site, http_server, mode):
    sleep = sleeps = Sleeps()
    w = fetch(http_server.url("model.safetensors"), FaultOnce(http_server, mode), sleep=sleep)
    assert_same(w, load_safetensors(site / "model.safetensors"))
    assert sleeps == [0.25] and w.fetch_stats["requests"] == 3


def test_retry_after_503_then_give_up(site, http_server):
    sleep = sleeps = Sleeps()
    http_server.fail_next = 2
    w = fetch(http_server.url(INDEX), UrllibTransport(), sleep=sleep)
    assert_same(w, load_safetensors(site / INDEX))
    assert sleeps == [0.25, 0.5]

    http_server.fail_next = 10
    url = http_server.url("model.safetensors")
    with pytest.raises(FetchError, match=rf"bytes \[0, {HEAD_BYTES}\).*HTTP 503.*"
                                         rf"3 attempts.*{url}"):
        fetch(url, UrllibTransport(), retries=2)


def test_transport_exceptions_and_bad_replies_are_retried(site):
    transport = FakeTransport(files_of(site))
    transport.fail = [OSError("reset"), 429, 302]
    w = fetch(BASE + "model.safetensors", transport)
    assert w.fetch_stats["requests"] == 5
    transport.fail = [OSError("reset")] * 4
    with pytest.raises(FetchError, match="OSError: reset"):
        fetch(BASE + "model.safetensors", transport)


def test_server_ignoring_range_has_each_file_read_whole_once(site, http_server):
    """A host without Range support (Python's http.server): each file is downloaded whole once
    and sliced; the tensors are the right ones."""
    http_server.mode = "ignore_range"
    reference = load_safetensors(site / INDEX)
    manifest = make_manifest(site / INDEX)
    w = fetch(http_server.url(INDEX), UrllibTransport(), manifest=manifest)
    assert_same(w, reference)
    shards = [r for r in http_server.requests if r is not None]
    # per shard: the probe (answered 200, its body not read), then the file whole
    assert len(shards) == 4 and w.fetch_stats["requests"] == 1 + 2 * 4


def test_server_ignoring_range_with_a_file_too_large_to_read_whole(site, http_server, monkeypatch):
    import engine.site.fetcher as fetcher
    monkeypatch.setattr(fetcher, "WHOLE_FILE_LIMIT", 50_000)
    http_server.mode = "ignore_range"
    with pytest.raises(FetchError, match=r"ignores HTTP Range requests.*over 50,000 bytes.*serve it with HTTP Range"):
        fetch(http_server.url("model.safetensors"), UrllibTransport())
    assert len(http_server.requests) == 1                # no pointless retries, nothing downloaded


class CompressingTransport(FakeTransport):
    """A host that gzips on the fly, as a browser sees it: a range request fails (the browser
    cannot decode a slice of a gzip stream), a plain GET is the file (decoded) with
    Content-Encoding: gzip in its headers."""

    async def get(self, url, start=None, end=None):
        if start is not None:
            self.calls.append((url[len(BASE):], start, end))
            raise ConnectionError("the connection failed (TypeError: Failed to fetch)")
        return await super().get(url)

    async def head(self, url):
        self.calls.append((url[len(BASE):], "head", None))
        return 200, {"Content-Encoding": "gzip"}


def test_host_compressing_on_the_fly_has_each_file_read_whole(site):
    transport, manifest = CompressingTransport(files_of(site)), make_manifest(site / INDEX)
    w = fetch(BASE + INDEX, transport, manifest=manifest)
    assert_same(w, load_safetensors(site / INDEX))
    shard = sorted(manifest["files"])[0]
    assert [c for c in transport.calls if c[0] == shard] == [(shard, 0, HEAD_BYTES), (shard, "head", None),
                                                             (shard, None, None)]


def test_network_errors_ask_for_the_headers_once_then_retry(site):
    class Broken(CompressingTransport):
        async def head(self, url):
            self.calls.append((url[len(BASE):], "head", None))
            return 200, {}                      # not compressed: a network failure like any other
    transport = Broken(files_of(site))
    with pytest.raises(FetchError, match=r"could not fetch bytes \[0, 65536\): the connection failed "
                                         r"\(TypeError: Failed to fetch\) \(gave up after 4 attempts\)"):
        fetch(BASE + "model.safetensors", transport)
    assert [c[1] for c in transport.calls] == [0, "head", 0, 0, 0]


def test_416_to_a_probe_of_a_file_that_has_bytes_is_retried(site):
    transport = FakeTransport(files_of(site))
    size = len(files_of(site)["model.safetensors"])
    transport.fail = [416] * 4
    with pytest.raises(FetchError, match=r"HTTP 416 \(gave up after 4 attempts\)"):
        fetch(BASE + "model.safetensors", transport)

    async def bogus_416(url, start=None, end=None):
        return 416, {"content-range": f"bytes */{size}"}, b""
    transport.get = bogus_416
    with pytest.raises(FetchError, match=rf"range not satisfiable: the server says the file has {size} bytes"):
        fetch(BASE + "model.safetensors", transport)


def test_bytes_spoilt_on_the_way_are_fetched_once_more(site):
    """A run whose bytes fail their sha256 is fetched again once, whole, before it is an error."""
    files, manifest = files_of(site), make_manifest(site / "model.safetensors")
    transport = FakeTransport(files)
    get, spoilt = transport.get, []

    async def spoil_once(url, start=None, end=None):
        status, headers, body = await get(url, start, end)
        if start and not spoilt:
            spoilt.append(start)
            body = bytes([body[0] ^ 1]) + body[1:]
        return status, headers, body
    transport.get = spoil_once
    w = fetch(BASE + "model.safetensors", transport, manifest=manifest)
    assert len(spoilt) == 1
    assert_same(w, load_safetensors(site / "model.safetensors"))


def test_a_cache_that_refuses_to_store_is_reported_and_left_alone(site):
    class Full(MemoryCache):
        puts = 0

        async def put(self, key, data):
            Full.puts += 1
            raise RuntimeError("QuotaExceededError: Quota exceeded.")
    manifest = make_manifest(site / INDEX)
    w = fetch(BASE + INDEX, FakeTransport(files_of(site)), manifest=manifest, cache=Full())
    assert_same(w, load_safetensors(site / INDEX))
    assert Full.puts == 1                                # asked once, then no more copies offered
    assert w.fetch_stats["cache_error"] == ("storing in the cache failed: RuntimeError: "
                                            "QuotaExceededError: Quota exceeded.")


def test_not_found(site, http_server):
    with pytest.raises(SourceNotFound, match="nothing.safetensors"):
        fetch(http_server.url("nothing.safetensors"), UrllibTransport())
    shard = load_safetensors(site / INDEX).weight_map["head.bias"]
    (site / shard).unlink()
    with pytest.raises(MissingShard, match=shard):
        fetch(http_server.url(INDEX), UrllibTransport())


def test_header_validation_still_applies(site, http_server):
    data = (site / "model.safetensors").read_bytes()
    (site / "cut.safetensors").write_bytes(data[:-100])
    url = http_server.url("cut.safetensors")
    with pytest.raises(TruncatedFile, match=url):
        fetch(url, UrllibTransport())
    (site / "tiny.safetensors").write_bytes(b"\x01")
    with pytest.raises(TruncatedFile, match="tiny"):
        fetch(http_server.url("tiny.safetensors"), UrllibTransport())


# --- manifest and cache ----------------------------------------------------------

def test_fetch_manifest(site, http_server):
    manifest = make_manifest(site / INDEX)
    (site / "manifest.json").write_text(json.dumps(manifest))
    assert asyncio.run(fetch_manifest(http_server.url("manifest.json"), UrllibTransport())) \
        == manifest
    (site / "bad.json").write_text(json.dumps({"format": 1, "tensors": {"x": {"file": "a"}}}))
    with pytest.raises(InvalidHeader, match="bad.json"):
        asyncio.run(fetch_manifest(http_server.url("bad.json"), UrllibTransport()))


def test_flipped_byte_is_caught_and_never_cached(site):
    manifest = make_manifest(site / "model.safetensors")
    files = files_of(site)
    offset = manifest["tensors"]["head.weight"]["offset"] + 5
    data = bytearray(files["model.safetensors"])
    data[offset] ^= 0x10
    files["model.safetensors"] = bytes(data)
    cache = MemoryCache()
    with pytest.raises(IntegrityError, match=r"model\.safetensors.*head\.weight"):
        fetch(BASE + "model.safetensors", FakeTransport(files), manifest=manifest, cache=cache)
    assert cache.entries == {}


def test_manifest_must_agree_with_the_header(site):
    transport = FakeTransport(files_of(site))
    manifest = make_manifest(site / INDEX)
    manifest["tensors"]["head.bias"]["offset"] += 4
    with pytest.raises(IntegrityError, match="head.bias"):
        fetch(BASE + INDEX, transport, manifest=manifest)
    manifest = make_manifest(site / INDEX)
    manifest["tensors"]["ghost"] = dict(manifest["tensors"]["head.bias"])
    with pytest.raises(IntegrityError, match="ghost"):
        fetch(BASE + INDEX, transport, manifest=manifest)


def test_warm_load_makes_no_shard_requests(site):
    manifest, cache = make_manifest(site / INDEX), MemoryCache()
    transport = FakeTransport(files_of(site))
    reference = load_safetensors(site / INDEX)
    cold = fetch(BASE + INDEX, transport, manifest=manifest, cache=cache)
    assert_same(cold, reference)
    assert len(cache.entries) == 8                      # a head and a run per shard
    transport.calls.clear()
    warm = fetch(BASE + INDEX, transport, manifest=manifest, cache=cache)
    assert_same(warm, reference)
    assert transport.calls == [(INDEX, None, None)]
    assert warm.fetch_stats["requests"] == 1
    assert warm.fetch_stats["network_bytes"] == len(transport.files[INDEX])
    assert warm.fetch_stats["cache_bytes"] > sum(t.nbytes for t in tensors().values())
    unkeyed = MemoryCache()                             # no manifest: nothing to key or verify by
    fetch(BASE + INDEX, transport, cache=unkeyed)
    assert unkeyed.entries == {}


def test_changed_weights_miss_the_cache_and_stale_keys_are_pruned(site, tmp_path_factory):
    cache = MemoryCache()
    fetch(BASE + INDEX, FakeTransport(files_of(site)), manifest=make_manifest(site / INDEX),
          cache=cache)
    before = set(cache.entries)
    new = tmp_path_factory.mktemp("v2")
    save_safetensors(tensors(bias=1.5), new / "model.safetensors", max_shard_bytes=20_000)
    changed = load_safetensors(new / INDEX).weight_map["head.bias"]
    transport = FakeTransport(files_of(new))
    w = fetch(BASE + INDEX, transport, manifest=make_manifest(new / INDEX), cache=cache)
    assert w["head.bias"].numpy().tolist() == [1.5] * 10
    assert transport.requested() == sorted([INDEX, changed])   # the rest: from the cache
    kept, added = before & set(cache.entries), set(cache.entries) - before
    assert len(kept) == 6 and len(added) == 2 and all(changed in key for key in added)
    assert not any(changed in key for key in kept)      # the old entries of that shard: gone


def test_subset_load_keeps_other_entries(site):
    manifest, cache = make_manifest(site / "model.safetensors"), MemoryCache()
    transport = FakeTransport(files_of(site))
    fetch(BASE + "model.safetensors", transport, manifest=manifest, cache=cache,
          names=["layer.0.weight"], coalesce_gap=0)
    fetch(BASE + "model.safetensors", transport, manifest=manifest, cache=cache,
          names=["layer.1.weight"], coalesce_gap=0)
    assert len(cache.entries) == 3                       # head + both runs: still current
    transport.calls.clear()
    fetch(BASE + "model.safetensors", transport, manifest=manifest, cache=cache,
          names=["layer.0.weight", "layer.1.weight"], coalesce_gap=0)
    assert transport.calls == []


def test_corrupted_cache_entries_are_deleted_and_refetched(site):
    manifest, cache = make_manifest(site / INDEX), MemoryCache()
    transport = FakeTransport(files_of(site))
    fetch(BASE + INDEX, transport, manifest=manifest, cache=cache)
    shard = load_safetensors(site / INDEX).weight_map["embed.weight"]
    run_key = next(k for k in cache.entries if shard in k and "engine-range" in k)
    head_key = next(k for k in cache.entries if "engine-head" in k and shard not in k)
    cache.entries[run_key] = cache.entries[run_key][:-1] + b"\x00"
    cache.entries[head_key] = b"garbage"
    good = dict(cache.entries)
    transport.calls.clear()
    w = fetch(BASE + INDEX, transport, manifest=manifest, cache=cache)
    assert_same(w, load_safetensors(site / INDEX))
    assert transport.requested() == sorted([INDEX, shard, head_key.split("?")[0][len(BASE):]])
    assert cache.entries[run_key] != good[run_key] and cache.entries.keys() == good.keys()
    calls = len(transport.calls)
    fetch(BASE + INDEX, transport, manifest=manifest, cache=cache)
    assert len(transport.calls) == calls + 1             # all healed: the index only


def test_a_failing_cache_is_only_a_miss(site):
    class Broken(MemoryCache):
        async def get(self, key):
            raise RuntimeError("QuotaExceededError")
        put = delete = keys = get
    w = fetch(BASE + INDEX, FakeTransport(files_of(site)), manifest=make_manifest(site / INDEX),
              cache=Broken())
    assert_same(w, load_safetensors(site / INDEX))


def test_progress_reaches_total(site):
    manifest, cache = make_manifest(site / INDEX), MemoryCache()
    for _ in range(2):                                   # network, then cache
        seen = []
        w = fetch(BASE + INDEX, FakeTransport(files_of(site)), manifest=manifest, cache=cache,
                  progress=lambda loaded, total: seen.append((loaded, total)))
        total = sum(t.nbytes for t in tensors().values())
        assert seen[0] == (0, total) and seen[-1] == (total, total)
        assert [s[0] for s in seen] == sorted(s[0] for s in seen)
        assert w.fetch_stats["runs"] == len(seen) - 1 == 4


def test_cache_key_scheme(site):
    manifest, cache = make_manifest(site / "model.safetensors"), MemoryCache()
    fetch(BASE + "model.safetensors", FakeTransport(files_of(site)), manifest=manifest,
          cache=cache, names=["head.bias"])
    entry = manifest["tensors"]["head.bias"]
    digest = hashlib.sha256(entry["sha256"].encode()).hexdigest()
    a, b = entry["offset"], entry["offset"] + entry["nbytes"]
    file_sha = manifest["files"]["model.safetensors"]["sha256"]
    assert set(cache.entries) == {
        f"{BASE}model.safetensors?engine-range={a}-{b}&sha256={digest}",
        f"{BASE}model.safetensors?engine-head&sha256={file_sha}"}


def test_browser_module_imports_natively_and_cache_falls_back(monkeypatch):
    from engine.site.browser import CacheApiStore, CacheUnavailable
    from engine.runtime import JsFetchTransport
    assert JsFetchTransport().stall_timeout == 20.0
    monkeypatch.setitem(sys.modules, "js", types.SimpleNamespace())   # no `caches`
    with pytest.raises(CacheUnavailable, match="secure context"):
        asyncio.run(CacheApiStore().get("https://h/k"))
