"""MiniLM's and a GGUF's float16 weights half-width on the webgpu backend where the adapter offers
shader-f16 (issue 38): models/bert.py and models/llama.py keep them float16 where the backend offers
linear_f16w, as models/whisper.py does (tests/webgpu/test_webgpu_f16.py tests the kernels).

- BERT: a small random one whose checkpoint is float16 (as the site's MiniLM copy is) gives numpy's
  float32 hidden states within float32 summation order (1e-4, as tests/models/test_bert.py), its
  Linear weights and word embedding half-width; a word embedding served by rows (a RowTable) stays
  one, the Linear weights half all the same; without shader-f16 nothing is half and the answer is
  the same. The real all-MiniLM-L6-v2 in float16: embeddings with cosine >= 0.9999 to simd's (slow).
- GGUF: a tiny llama written with F16 matrices (tied and untied head) generates simd's greedy tokens
  on webgpu, its F16 weights (the stacked projections, the head, the token embedding) half-width;
  F16 beside a quantized attn_v (q and k stacked, v apart) gives numpy's logits.

Skipped where there is no adapter (tests/webgpu/conftest.py) or it has no shader-f16 (float16 is
then held as float32, as before), but the test of the path without the feature.
"""
from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.helpers import need_import

ATOL = 1e-4                 # float32 summation order (the float16 values widen exactly)
COSINE = 0.9999             # MiniLM's float16 figure (tests/models/test_minilm.py)


@pytest.fixture()
def half(gpu):
    if "shader-f16" not in gpu.features:
        pytest.skip(f"the adapter ({gpu.info}) offers no shader-f16: float16 weights stay float32-wide")
    return gpu


def storages(model) -> list:
    """The distinct device storages of a model's tensors (row views share their stack's)."""
    tensors = [t for t in list(model.parameters()) + list(model.buffers()) if isinstance(t, engine.Tensor)]
    return list({id(t._buf): t._buf for t in tensors}.values())


def named(model, name: str):
    *path, attr = name.split(".")
    module = model
    for part in path:
        module = module._modules[part]
    return getattr(module, attr)


# --- BERT ----------------------------------------------------------------------------------------
def tiny_bert_state(rng):
    """A small BERT's state (models/bert.py), random, every tensor float16 as the site stores them."""
    from models import bert
    config = bert.Config(vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=80, max_position_embeddings=40)
    state = {}
    for name, t in bert.BertModel(config).state_dict().items():
        a = rng.standard_normal(t.shape).astype(np.float32) * (0.2 if t.ndim > 1 else 1.0)
        if "LayerNorm.weight" in name:
            a = 1 + 0.2 * a
        state[name] = engine.from_numpy(a.astype(np.float16))
    return config, state


def row_table(weight: np.ndarray, block_rows: int = 16):
    """`weight` (float16) as the site serves a word embedding: blocks of rows fetched on demand."""
    from engine.rows import RowTable

    async def fetch(blocks):
        return {b: weight[b * block_rows:(b + 1) * block_rows].tobytes() for b in blocks}
    return RowTable("embeddings.word_embeddings.weight", weight.shape, engine.float16, block_rows, fetch)


def bert_hidden(state, config, device):
    from models import bert
    model = bert.load(state, device=device, config=config)
    rng = np.random.default_rng(8)
    ids = rng.integers(1, config.vocab_size, (2, 11))
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    return model, model(ids, mask, (rng.random(ids.shape) < 0.3).astype(np.int64)).numpy()[mask.astype(bool)]


@pytest.mark.parametrize("mode", ["half", "no_half", "rows"])
def test_small_bert_with_float16_weights_equals_float32(gpu, monkeypatch, mode):
    if mode != "no_half" and "shader-f16" not in gpu.features:
        pytest.skip(f"the adapter ({gpu.info}) offers no shader-f16")
    if mode == "no_half":
        monkeypatch.setattr(gpu, "features", frozenset())
    config, state = tiny_bert_state(np.random.default_rng(7))
    _, want = bert_hidden(state, config, "numpy")                       # numpy: the float32 weights
    if mode == "rows":
        state["embeddings.word_embeddings.weight"] = row_table(state["embeddings.word_embeddings.weight"].numpy())
    model, got = bert_hidden(state, config, "webgpu")
    np.testing.assert_allclose(got, want, rtol=ATOL, atol=ATOL)
    names = model.half_weights()
    assert len(names) == 1 + 6 * config.num_hidden_layers
    if mode == "rows":                                                  # rows come widened, the rest half
        assert type(model.embeddings.word_embeddings.weight).__name__ == "RowTable"
        names = names[1:]
    for name in names:
        w = named(model, name)
        assert w.dtype is engine.float16 and w._buf.half == (mode != "no_half"), name
    for t in (model.embeddings.position_embeddings.weight, model.encoder.layer[0].attention.self.query.bias):
        assert t.dtype is engine.float32                                # what no product reads: widened


@pytest.mark.slow
def test_minilm_half_on_webgpu_matches_simd(half, minilm_folder, tmp_path):
    """all-MiniLM-L6-v2 in float16 (the site's dtype) through the pipeline: its Linear weights and
    word embedding half-width on the device (measured: 72.5 MB of buffers against 143.8 MB of
    float32-held ones), embeddings with cosine >= 0.9999 to simd's. ~3 s on lavapipe, 2 cores."""
    import shutil
    for name in ("config.json", "tokenizer.json", "sentence_bert_config.json", "1_Pooling"):
        src = minilm_folder / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    weights = engine.load_safetensors(minilm_folder / "model.safetensors")
    engine.save_safetensors({n: weights[n].numpy().astype(np.float16) for n in weights.keys()},
                            tmp_path / "model.safetensors")
    sentences = ["A man is eating food.", "A monkey is playing drums.", "Le chat dort sur le canapé.",
                 "Someone in a gorilla costume is playing a set of drums."]
    want = engine.pipeline("sentence-embedding", weights=tmp_path, device="simd")(sentences)
    pipe = engine.pipeline("sentence-embedding", weights=tmp_path, device="webgpu")
    model = pipe.model
    for name in model.half_weights():
        w = named(model, name)
        assert w.dtype is engine.float16 and w._buf.half, name
        assert w._buf.buf.size < 4 * w.numel()                          # under what float32 would take
    held = storages(model)
    halves = [s for s in held if s.half]
    assert len(halves) == 1 + 6 * 6
    assert sum(s.buf.size for s in halves) > 0.9 * sum(s.buf.size for s in held)
    got = pipe(sentences)
    a = got / np.linalg.norm(got, axis=1, keepdims=True)
    b = want / np.linalg.norm(want, axis=1, keepdims=True)
    assert got.shape == (len(sentences), 384) and (a * b).sum(1).min() >= COSINE


# --- GGUF F16 --------------------------------------------------------------------------------------
def f16_llama(path, tied: bool, **more):
    """A tiny llama (tests/llama_gguf.py) written with F16 matrices (and `more` for write_gguf)."""
    need_import("torch")
    need_import("transformers")
    need_import("gguf")
    from tests.llama_gguf import reference_model, write_gguf
    write_gguf(path, reference_model(tied=tied, seed=5), "f16", **more)
    return path


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_f16_llama_generates_simds_tokens_half_width(half, tmp_path, tied):
    from engine.generation import GenerationConfig, Generator
    from models import llama
    path = f16_llama(tmp_path / "f16.gguf", tied)
    with engine.load_gguf(path) as weights:
        assert weights.info("blk.0.attn_q.weight").ggml_type == weights.info("token_embd.weight").ggml_type == "f16"
    prompt, config = [1, 17, 40, 99, 3, 12], GenerationConfig(max_new_tokens=20)
    cpu = llama.load(path, "simd")
    assert cpu.blk[0].attn_qkv.dtype is engine.float16                 # simd offers linear_f16w too
    want = list(Generator(cpu, None, 64, set()).tokens(prompt, config))
    model = llama.load(path, "webgpu")
    got = list(Generator(model, None, 64, set()).tokens(prompt, config))
    assert got == want and len(got) == 20
    names = model.half_weights()
    assert ("output.weight" in names) == (not tied)
    for name in names:
        w = named(model, name)
        assert w.dtype is engine.float16 and w._buf.half, name
    for block in model.blk:                                             # the stacks half, the parts their views
        assert block.attn_qkv._buf.half and block.attn_q.weight._buf is block.attn_qkv._buf
        assert block.ffn_gate_up._buf.half and block.ffn_up.weight._buf is block.ffn_gate_up._buf
        assert block.attn_norm.weight.dtype is engine.float32
    assert len([s for s in storages(model) if s.half]) == 1 + (not tied) + 4 * len(model.blk)


def test_f16_beside_a_quantized_matrix_gives_numpys_logits(half, tmp_path):
    """attn_v in Q8_0, the rest F16: q and k stacked half-width, v quantized apart."""
    from models import llama
    path = f16_llama(tmp_path / "mixed.gguf", True, qtypes={"attn_v": "q8_0"})
    ids = np.random.default_rng(3).integers(0, 160, (2, 9))
    want = llama.load(path, "numpy")(engine.tensor(ids), engine.arange(9)).numpy()
    model = llama.load(path, "webgpu")
    block = model.blk[0]
    assert block.attn_qkv is None and block.attn_qk._buf.half and block.attn_v.weight.qtype == "q8_0"
    got = model(engine.tensor(ids, device="webgpu"), engine.arange(9, device="webgpu")).numpy()
    np.testing.assert_allclose(got, want, rtol=ATOL, atol=ATOL)
