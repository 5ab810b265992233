"""SmolLM2's GGUF on the built site: served as is with its manifest, and read lazily by Range
through the development server (tests/build/test_build_nginx.py does the same through nginx):
the header in one request, then only the tensors asked for, equal to the original file's."""
import asyncio
import collections
import hashlib
import json
import threading

import numpy as np

from buildtools.devserver import make_server
from engine.runtime import UrllibTransport
from engine.site.folders import fetch_gguf

NAME = "SmolLM2-135M-Instruct"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
WANTED = ["blk.7.attn_k.weight", "blk.29.ffn_norm.weight"]     # a Q4_1 matrix and an F32 vector


class Recorder(UrllibTransport):
    """UrllibTransport that notes each request: (file, start, end, body bytes)."""

    def __init__(self):
        super().__init__()
        self.log = []

    async def get(self, url, start=None, end=None):
        status, headers, body = await super().get(url, start, end)
        self.log.append((url.rsplit("/", 1)[-1], start, end, len(body)))
        return status, headers, body


def check_lazy_load(base: str, original) -> None:
    """Fetch two SmolLM2 tensors from the site at `base`: one request for the manifest, one for the
    whole header (its 1.8 MB of metadata), one per tensor; equal to the original; then one more
    tensor on first use."""
    transport = Recorder()
    weights = asyncio.run(fetch_gguf(f"{base}models/{NAME}/", transport=transport, names=WANTED, coalesce_gap=0))
    header = original.data_offset
    infos = [original.info(n) for n in WANTED]
    assert transport.log[:2] == [("manifest.json", None, None, transport.log[0][3]), (FILE, 0, header, header)]
    assert sorted(transport.log[2:]) == sorted((FILE, i.offset, i.offset + i.nbytes, i.nbytes) for i in infos)
    assert weights.fetch_stats["network_bytes"] == header + sum(i.nbytes for i in infos)   # nothing else
    assert weights.metadata["tokenizer.ggml.merges"] == original.metadata["tokenizer.ggml.merges"]
    assert weights.info("token_embd.weight").ggml_type == "q8_0"
    q, norm = weights["blk.7.attn_k.weight"], weights["blk.29.ffn_norm.weight"]
    assert np.array_equal(q.raw, original["blk.7.attn_k.weight"].raw)
    assert np.array_equal(q.dequantize().numpy(), original["blk.7.attn_k.weight"].dequantize().numpy())
    assert np.array_equal(norm.numpy(), original["blk.29.ffn_norm.weight"].numpy())
    up = weights["blk.0.ffn_up.weight"]                          # not asked for: fetched now
    info = original.info("blk.0.ffn_up.weight")
    assert transport.log[-1] == (FILE, info.offset, info.offset + info.nbytes, info.nbytes)
    assert np.array_equal(up.raw, original["blk.0.ffn_up.weight"].raw)


def test_smollm2_is_served_as_is_with_a_manifest(dist, smollm2_gguf):
    original = smollm2_gguf
    folder = dist / "models" / NAME
    assert sorted(p.name for p in folder.iterdir()) == [FILE, "manifest.json"]
    data = (folder / FILE).read_bytes()
    assert data == bytes(original.source.read(0, original.source.size()))
    manifest = json.loads((folder / "manifest.json").read_text())
    gguf = manifest["gguf"]
    assert manifest["container"] == "gguf" and manifest["model"] == NAME
    assert (gguf["size"], gguf["header_bytes"]) == (len(data), original.data_offset) == (98362432, 1785664)
    assert gguf["header_sha256"] == hashlib.sha256(data[:original.data_offset]).hexdigest()
    assert gguf["parts"] == [{"file": FILE, "offset": 0}]
    assert manifest["files"] == {FILE: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}}
    assert collections.Counter(t["ggml_type"] for t in manifest["tensors"].values()) == \
        {"q4_1": 210, "f32": 61, "q8_0": 1}
    for name, t in manifest["tensors"].items():
        info = original.info(name)
        assert (t["offset"], t["nbytes"], t["shape"]) == (info.offset, info.nbytes, list(info.shape)), name
        assert t["sha256"] == hashlib.sha256(data[info.offset:info.offset + info.nbytes]).hexdigest(), name
    assert manifest["metadata"]["general.architecture"] == "llama"
    assert manifest["metadata"]["tokenizer.chat_template"] == original.metadata["tokenizer.chat_template"]


def test_smollm2_is_in_the_registry_for_text_generation(dist):
    listing = {m["name"]: m for m in json.loads((dist / "registry.json").read_text())}
    assert listing[NAME]["tasks"] == ["text-generation"] and listing[NAME]["format"] == "gguf"
    info = json.loads((dist / "build-info.json").read_text())
    assert info["models"][NAME] == {"bytes": 98362432, "manifest": f"models/{NAME}/manifest.json"}


def test_smollm2_loads_lazily_over_the_development_server(dist, smollm2_gguf):
    server = make_server(dist, isolation=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        check_lazy_load(f"http://127.0.0.1:{server.server_port}/", smollm2_gguf)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# --- a GGUF published in byte parts (the Qwen2.5 and Gemma 3 entries): every part checked, and the join
def _parts_entry(tmp_path, data: bytes, cut: int, part_sha=None, joined_sha=None, **fields):
    from engine import registry
    (tmp_path / "a.bin").write_bytes(data[:cut])
    (tmp_path / "b.bin").write_bytes(data[cut:])
    part_sha = part_sha or [hashlib.sha256(data[:cut]).hexdigest(), hashlib.sha256(data[cut:]).hexdigest()]
    sources = (registry.Source("repo", files={"weights": str(tmp_path / "a.bin")}, sha256={"weights": part_sha[0]}),
               registry.Source("repo", files={"weights.part2": str(tmp_path / "b.bin")},
                               sha256={"weights.part2": part_sha[1]}))
    return registry.Model(name="toy-gguf", tasks=(), pipeline=None, title="toy", load=None, sources=sources,
                          filename="toy-q8_0.gguf", sha256=joined_sha or hashlib.sha256(data).hexdigest(), **fields)


def test_parts_join_to_the_named_file_or_the_build_names_the_part(tmp_path):
    import pytest
    from buildtools import convert
    from buildtools.steps import BuildError
    data = np.random.default_rng(0).integers(0, 256, 1 << 16, dtype=np.uint8).tobytes()   # only joined, not read
    cut = len(data) // 3
    entry = _parts_entry(tmp_path, data, cut)
    assert entry.site_format == "gguf" and entry.site_file == "toy-q8_0.gguf"
    paths = [tmp_path / "a.bin", tmp_path / "b.bin"]
    where, joined = convert.checkpoint_file(entry, paths)
    assert joined == data and where.count(" + ") == 1
    bad = bytearray(data)
    bad[cut + 5] ^= 1                                    # a byte of the second part changed
    entry = _parts_entry(tmp_path, bytes(bad), cut,
                         part_sha=[hashlib.sha256(data[:cut]).hexdigest(), hashlib.sha256(data[cut:]).hexdigest()])
    with pytest.raises(BuildError, match=r"toy-gguf: weights.part2 \(.*b.bin\) is not the file the registry names"):
        convert.checkpoint_file(entry, paths)
    entry = _parts_entry(tmp_path, data, cut, joined_sha="0" * 64)   # each part right, the join not
    with pytest.raises(BuildError, match=r"its 2 part\(s\) do not join to the checkpoint the registry names"):
        convert.checkpoint_file(entry, paths)
