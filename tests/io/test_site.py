"""A model folder on a site (engine.site.folders): the converter's output fetched by Range, its row
tables block by block for the ids used, everything verified and cached."""
import asyncio
import json

import numpy as np
import pytest

import engine
from buildtools import convert
from engine import registry
from engine.errors import IntegrityError, InvalidHeader
from engine.site.folders import fetch_model
from test_remote import BASE, FakeTransport, MemoryCache, Sleeps

VOCAB, DIM = 1000, 24


def _entry(tmp_path) -> registry.Model:
    rng = np.random.default_rng(0)
    engine.save_safetensors({"emb": rng.standard_normal((VOCAB, DIM)).astype(np.float32),
                             "dense.weight": rng.standard_normal((DIM, DIM)).astype(np.float32),
                             "unused": np.zeros(3, np.float32)}, tmp_path / "toy.safetensors")
    (tmp_path / "vocab.json").write_text('{"a": 1}')
    return registry.Model(name="toy", tasks=("toy",), pipeline="sentence-embedding", title="toy",
                          load=lambda weights, device=None: weights,
                          sources=(registry.Source("repo", files={"weights": "toy.safetensors",
                                                                  "vocab": "vocab.json"}),),
                          processor={"vocab.json": "vocab"}, storage_dtype="float16",
                          row_tensors=("emb",), ignored=("unused",))


@pytest.fixture
def folder(tmp_path):
    entry = _entry(tmp_path)
    convert.write_model(entry, convert.locate(entry, tmp_path, tmp_path / "cache", True), tmp_path / "site")
    out = tmp_path / "site" / "models" / "toy"
    return out, {p.name: p.read_bytes() for p in out.iterdir()}


def load(files, cache=None):
    return asyncio.run(fetch_model(BASE, transport=FakeTransport(files) if isinstance(files, dict) else files,
                                   cache=cache, sleep=Sleeps()))


def test_rows_come_by_block_for_the_ids_used(folder, tmp_path):
    out, files = folder
    manifest = json.loads(files["manifest.json"])
    rows = manifest["tensors"]["emb"]["rows"]
    assert "unused" not in manifest["tensors"] and manifest["tensors"]["emb"]["dtype"] == "F16"
    transport = FakeTransport(files)
    checkpoint = load(transport)
    assert checkpoint.files == {"vocab.json": b'{"a": 1}'}
    assert "model-rows-00001.safetensors" not in transport.requested()        # no row fetched yet
    table = checkpoint.tensors["emb"]
    ids = np.array([[5, 6, 999], [900, 5, 0]])             # the first and last blocks: not adjacent
    got = table.gather(ids)                                   # fetches (asyncio.run natively)
    want = engine.load_safetensors(tmp_path / "toy.safetensors")["emb"].numpy().astype(np.float16)
    np.testing.assert_array_equal(got, want[ids.reshape(-1)].astype(np.float32))
    blocks = {i // rows["block_rows"] for i in ids.reshape(-1)}
    assert table.fetched_rows == sum(min(rows["block_rows"], VOCAB - b * rows["block_rows"]) for b in blocks)
    row_calls = [c for c in transport.calls if c[0] == "model-rows-00001.safetensors"]
    assert len(row_calls) == len(blocks)                      # these blocks are not adjacent
    assert table.missing(ids) == []


def test_second_load_and_rows_come_from_the_cache(folder):
    _, files = folder
    cache = MemoryCache()
    first = load(files, cache)
    asyncio.run(first.tensors["emb"].fetch([1, 2, 500]))
    transport = FakeTransport(files)
    second = load(transport, cache)
    asyncio.run(second.tensors["emb"].fetch([1, 2, 500]))
    assert transport.requested() == ["manifest.json", "model.safetensors.index.json"]
    np.testing.assert_array_equal(second.tensors["emb"].gather([500]), first.tensors["emb"].gather([500]))


def test_a_corrupt_block_is_refused_and_never_cached(folder):
    _, files = folder
    manifest = json.loads(files["manifest.json"])
    entry = manifest["tensors"]["emb"]
    bad = bytearray(files[entry["file"]])
    bad[entry["offset"] + 3] ^= 0x40                          # a byte of row 0
    cache = MemoryCache()
    checkpoint = load({**files, entry["file"]: bytes(bad)}, cache)
    with pytest.raises(IntegrityError, match="block 0.*'emb'"):
        asyncio.run(checkpoint.tensors["emb"].fetch([0]))
    assert not [k for k in cache.entries if "engine-rows" in k]
    asyncio.run(checkpoint.tensors["emb"].fetch([VOCAB - 1]))    # other blocks are fine


def test_ids_out_of_range_and_bad_row_entries(folder):
    _, files = folder
    checkpoint = load(files)
    with pytest.raises(engine.errors.InputError, match=r"\[0, 1000\)"):
        checkpoint.tensors["emb"].gather([VOCAB])
    manifest = json.loads(files["manifest.json"])
    manifest["tensors"]["emb"]["rows"]["sha256"].pop()
    with pytest.raises(InvalidHeader, match="block hashes.*'emb'"):
        load({**files, "manifest.json": json.dumps(manifest).encode()})


def test_a_changed_processor_file_is_refused(folder):
    _, files = folder
    with pytest.raises(IntegrityError, match="vocab.json"):
        load({**files, "vocab.json": b'{"a": 2}'})


def test_row_blocks_of_an_older_build_are_pruned(folder):
    _, files = folder
    cache = MemoryCache()
    asyncio.run(load(files, cache).tensors["emb"].fetch([0, VOCAB - 1]))
    manifest = json.loads(files["manifest.json"])
    shas = manifest["tensors"]["emb"]["rows"]["sha256"]
    shas[0] = "0" * 64                                        # a new build changed block 0
    load({**files, "manifest.json": json.dumps(manifest).encode()}, cache)
    rows = sorted(k for k in cache.entries if "engine-rows" in k)
    assert len(rows) == 1 and rows[0].endswith(shas[-1])      # the unchanged last block stays


def test_memory_check_counts_what_is_prefetched_and_refuses_before_downloading(folder):
    """The page's heap check (engine.site.browser.check_memory): twice the tensor bytes fetched up
    front (row tables come later, block by block) against the heap's headroom."""
    from engine.errors import ModelTooLarge
    from engine.site.folders import prefetch_bytes
    from engine.site.browser import check_memory
    manifest = json.loads(folder[1]["manifest.json"])
    assert prefetch_bytes(manifest) == manifest["tensors"]["dense.weight"]["nbytes"] == DIM * DIM * 2
    mib = 1 << 20
    check_memory(manifest, "toy", BASE, heap_now=(4 << 30, 4096 * mib - 2 * DIM * DIM * 2))    # just fits
    with pytest.raises(ModelTooLarge) as e:
        check_memory(manifest, "toy", BASE + "manifest.json", heap_now=(4 << 30, 4096 * mib - 1000))
    assert str(e.value) == ("toy is too large for this browser: its 1.1 KiB of weights need about 2.2 KiB of "
                            "memory, and this page's WebAssembly heap can grow by 1.0 KiB more (its ceiling is 4.0 "
                            "GiB, 4.0 GiB already in use); nothing was downloaded (file https://site.test/w/manifest.json)")
    manifest["tensors"]["dense.weight"]["nbytes"] = 3 << 30
    with pytest.raises(ModelTooLarge, match=r"its 3.0 GiB of weights need about 6.0 GiB of memory, and this "
                                            r"page's WebAssembly heap can grow by 3.9 GiB more"):
        check_memory(manifest, "toy", BASE, heap_now=(4 << 30, 100 * mib))
    check_memory(manifest, "toy", BASE)                  # natively there is no heap to check
