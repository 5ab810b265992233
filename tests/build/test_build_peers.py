"""The bench page's peers (buildtools/peers.py): ONNX Runtime Web's models, exported at build time
from the same weights the site converts, checked as ONNX graphs and, for MiniLM, run by ONNX's own
reference evaluator against our engine's sentence embeddings on the same token ids (the browser
run of both, and of EfficientNet, is tests/web/test_bench_peers.py). A failed export skips only
that model, saying why."""
import numpy as np
import pytest

import engine
from buildtools import peers, site
from buildtools.fetch import npm_pack
from buildtools.steps import Builder
from tests.helpers import need_import


@pytest.fixture(scope="module")
def built_peers(cache, tmp_path_factory):
    """(dist, log lines) of the peers' steps alone, from the real packages (exports kept in the
    download cache's onnx/ folder, so only a changed exporter exports again)."""
    for name in ("torch", "onnx", "onnxscript", "efficientnet_lite_pytorch", "transformers"):
        need_import(name, "the ONNX exports need it")
    dist = tmp_path_factory.mktemp("peers") / "dist"
    fetched = {name: npm_pack(name, version, cache) for _, name, version, _ in peers.PEERS}
    lines = []
    peers.build_peers(Builder(dist, log=lines.append), fetched, site.ROOT, cache, False, log=lines.append)
    return dist, lines


def load(path):
    onnx = need_import("onnx", "the ONNX exports are checked with it")
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    shapes = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*model.graph.input, *model.graph.output]}
    return model, shapes


def test_the_peers_folder_holds_the_runtime_and_both_models(built_peers):
    dist, lines = built_peers
    folder = dist / "peers" / "onnxruntime"
    assert {"ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm", "LICENCE",
            "efficientnet_lite0.onnx", "all-MiniLM-L6-v2.onnx"} <= {p.name for p in folder.iterdir()}
    assert not [line for line in lines if "skipped" in line], lines


def test_efficientnet_export_is_the_checkpoint_at_batch_1(built_peers):
    model, shapes = load(built_peers[0] / "peers" / "onnxruntime" / "efficientnet_lite0.onnx")
    assert shapes == {"pixel_values": [1, 3, 224, 224], "logits": [1, 1000]}
    # every weight of the checkpoint is in the graph (4,652,008 parameters, batch norms folded or not)
    from onnx import numpy_helper
    stored = sum(numpy_helper.to_array(t).size for t in model.graph.initializer)
    assert stored >= 4_600_000, stored
    assert "Conv" in {n.op_type for n in model.graph.node}


def test_minilm_export_gives_our_sentence_embeddings(built_peers, minilm_folder):
    """ONNX's reference evaluator on the exported graph: the same unit vectors as our engine's
    pipeline on the same float32 weights and token ids (batch 2, 128 tokens, the second padded)."""
    model, shapes = load(built_peers[0] / "peers" / "onnxruntime" / "all-MiniLM-L6-v2.onnx")
    assert shapes == {"input_ids": ["batch", 128], "attention_mask": ["batch", 128], "token_type_ids": ["batch", 128],
                      "embeddings": ["batch", 384]}
    from onnx.reference import ReferenceEvaluator
    ids = np.random.default_rng(3).integers(1000, 2000, (2, 128))
    mask = np.ones_like(ids)
    mask[1, 100:] = 0
    ids[1, 100:] = 0
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    (theirs,) = ReferenceEvaluator(model).run(None, batch)
    pipe = engine.pipeline("sentence-embedding", weights=minilm_folder, device="numpy")
    ours = pipe.embed(batch)
    np.testing.assert_allclose(theirs, ours, atol=2e-5)


def test_an_export_that_cannot_run_skips_that_model_only(cache, tmp_path, monkeypatch):
    """Without its packages an export is skipped, the log says exactly why, and the runtime and the
    other peers are still built; the next build tries again."""
    real = peers.package_versions
    monkeypatch.setattr(peers, "package_versions", lambda: {**real(), "onnxscript": None})
    fetched = {name: npm_pack(name, version, cache) for _, name, version, _ in peers.PEERS}
    lines = []
    b = Builder(tmp_path / "dist", log=lines.append)
    monkeypatch.setattr(peers, "ONNX_MODELS", {"efficientnet_lite0": peers.ONNX_MODELS["efficientnet_lite0"]})
    peers.build_peers(b, fetched, site.ROOT, cache, False, log=lines.append)
    skipped = [line for line in lines if "skipped" in line]
    assert len(skipped) == 1 and "onnxscript not installed" in skipped[0], lines
    folder = tmp_path / "dist" / "peers"
    assert (folder / "onnxruntime" / "ort.wasm.min.mjs").is_file() and (folder / "wllama" / "wllama.wasm").is_file()
    assert not (folder / "onnxruntime" / "efficientnet_lite0.onnx").exists()
    assert "peers-onnx-efficientnet_lite0" not in b.state["steps"]            # not recorded: tried again next time
