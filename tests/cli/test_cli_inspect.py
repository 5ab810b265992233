"""`python -m engine inspect FILE [--json]`: safetensors (file, sharded folder), GGUF, .pth."""
import json

import numpy as np
import pytest
import test_cli
from test_cli import one_line_error

import engine
from tests.helpers import need_import


def run(*args):
    return test_cli.run("inspect", *args)


def inspect_json(path) -> dict:
    r = run(str(path), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def by_name(report) -> dict:
    return {t["name"]: (t["type"], t["shape"], t["bytes"]) for t in report["tensors"]}


TENSORS = {"embed.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
           "norm.bias": np.zeros(5, np.float16),
           "head.index": np.arange(7, dtype=np.int64)}
EXPECTED = {name: (str(a.dtype), list(a.shape), a.nbytes) for name, a in TENSORS.items()}


def test_safetensors_file(tmp_path):
    path = tmp_path / "w.safetensors"
    long_text = "x" * 1000
    engine.save_safetensors(TENSORS, path, metadata={"format": "pt", "notes": long_text})
    report = inspect_json(path)
    assert report["format"] == "safetensors" and report["file"] == str(path)
    assert by_name(report) == EXPECTED
    assert report["tensor_count"] == 3 and report["total_bytes"] == sum(a.nbytes for a in TENSORS.values())
    assert report["metadata"]["format"] == "pt"
    notes = report["metadata"]["notes"]
    assert len(notes) < 300 and "1000 chars" in notes

    r = run(str(path))
    assert r.returncode == 0, r.stderr
    assert all(name in r.stdout for name in TENSORS) and "float16" in r.stdout
    assert "3 tensors" in r.stdout.splitlines()[-1]


def test_sharded_folder(tmp_path):
    engine.save_safetensors(TENSORS, tmp_path / "model.safetensors", metadata={"format": "pt"},
                            max_shard_bytes=48)
    report = inspect_json(tmp_path)
    assert report["format"] == "safetensors" and report["file"].endswith("model.safetensors.index.json")
    assert len(report["shards"]) > 1
    assert by_name(report) == EXPECTED
    assert report["metadata"]["total_size"] == sum(a.nbytes for a in TENSORS.values())


def test_gguf(tmp_path):
    gguf = need_import("gguf")
    path = tmp_path / "tiny.gguf"
    tokens = [f"tok{i}" for i in range(1000)]
    weight = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    q8 = gguf.quants.quantize(weight, gguf.GGMLQuantizationType.Q8_0)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", tokens)
    writer.add_array("tokenizer.ggml.scores", np.linspace(0, 1, 1000, dtype=np.float32).tolist())
    writer.add_string("tokenizer.chat_template", "{{ x }}" * 100)
    writer.add_uint32("llama.block_count", 2)
    writer.add_tensor("blk.0.attn_q.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("output_norm.weight", np.ones(64, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    report = inspect_json(path)
    assert report["format"] == "gguf" and report["version"] == 3 and report["alignment"] == 32
    assert by_name(report) == {"blk.0.attn_q.weight": ("q8_0", [4, 64], q8.nbytes),
                               "output_norm.weight": ("f32", [64], 256)}
    assert q8.nbytes == 4 * 2 * 34                     # Q8_0: 34 bytes per block of 32
    meta = report["metadata"]
    assert meta["general.architecture"] == "llama" and meta["llama.block_count"] == 2
    assert isinstance(meta["tokenizer.ggml.tokens"], str)
    assert meta["tokenizer.ggml.tokens"].startswith("[1000 items: 'tok0', 'tok1'")
    assert meta["tokenizer.ggml.scores"].startswith("[1000 items")
    assert "700 chars" in meta["tokenizer.chat_template"]
    assert len(json.dumps(meta)) < 2000

    r = run(str(path))
    assert r.returncode == 0, r.stderr
    assert "blk.0.attn_q.weight" in r.stdout and "output_norm.weight" in r.stdout
    assert "q8_0" in r.stdout and "[1000 items" in r.stdout and "tok999" not in r.stdout
    assert "version 3" in r.stdout.splitlines()[-1]


def test_pth(tmp_path):
    torch = need_import("torch")
    path = tmp_path / "model.pth"
    state = {"conv.weight": torch.zeros(2, 3, 3, 3), "bn.running_mean": torch.zeros(4, dtype=torch.float64),
             "bn.num_batches_tracked": torch.tensor(0), "emb": torch.zeros(10, 8, dtype=torch.bfloat16)}
    torch.save(state, path)
    report = inspect_json(path)
    assert report["format"] == "pth" and report["metadata"] == {}
    assert by_name(report) == {"conv.weight": ("float32", [2, 3, 3, 3], 216),
                               "bn.running_mean": ("float64", [4], 32),
                               "bn.num_batches_tracked": ("int64", [], 8),
                               "emb": ("bfloat16", [10, 8], 160)}
    r = run(str(path))
    assert r.returncode == 0, r.stderr
    assert all(name in r.stdout for name in state)
    torch.save(state, path, _use_new_zipfile_serialization=False)     # the legacy layout: the same listing
    legacy = inspect_json(path)
    assert legacy["layout"] == "legacy" and by_name(legacy) == by_name(report)


def test_not_weights_or_missing_exit_2(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("just some text\n")
    one_line_error(run(str(text)), "notes.txt")
    one_line_error(run(str(tmp_path / "missing.safetensors"), "--json"), "missing.safetensors")
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_error(run(str(empty)), "empty")


def test_an_index_that_is_a_directory_exit_2(tmp_path):
    # the fuzzer's case safetensors:20240613:240: a folder whose index name is a directory (IsADirectoryError)
    (tmp_path / "model.safetensors.index.json").mkdir()
    one_line_error(run(str(tmp_path)), "model.safetensors.index.json", "cannot open")
