"""models/llama.py against transformers' LlamaForCausalLM.

A tiny random llama (GQA, tied and untied heads) is written to a GGUF the way llama.cpp's
converter writes one (gguf-py's writer, attn_q/attn_k rows permuted for its interleaved RoPE),
loaded through models.llama.load, and compared on every backend: float32 weights, and Q8_0
weights against transformers holding dequantize(quantize(w)). The cached path (prefill, then a
token at a time into a preallocated KVCache) must give the logits of the full forward.
The real SmolLM2 GGUF is tested in test_llama_smollm2.py."""
import dataclasses
import os

import numpy as np
import pytest

import engine
from engine.errors import EngineError, InvalidHeader
from models import llama
from tests.helpers import need_import
from tests.llama_gguf import TINY, changed, metadata_of, reference_model, write_gguf

torch = need_import("torch")
transformers = need_import("transformers")
gguf = need_import("gguf")

DEVICES = [os.environ["ENGINE_TEST_DEVICE"]] if os.environ.get("ENGINE_TEST_DEVICE") else engine.available_devices()
@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def tiny(request, tmp_path_factory):
    """(transformers model, GGUF path) of a tiny random llama in float32."""
    model = reference_model(request.param)
    path = tmp_path_factory.mktemp("llama") / "tiny.gguf"
    write_gguf(path, model)
    return model, path


IDS = np.random.default_rng(3).integers(0, TINY["vocab_size"], (2, 13))


def reference_logits(model, ids=IDS) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(ids)).logits.numpy()


@pytest.mark.parametrize("device", DEVICES)
def test_tiny_llama_matches_transformers(tiny, device):
    reference, path = tiny
    model = llama.load(path, device)
    assert (model.output is None) == reference.config.tie_word_embeddings
    positions = engine.arange(IDS.shape[1], device=device)
    logits = model(engine.tensor(IDS, device=device), positions).numpy()              # no cache: causal
    np.testing.assert_allclose(logits, reference_logits(reference), atol=1e-4, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_cached_decoding_gives_the_full_forwards_logits(tiny, device):
    """Prefill 5 tokens into a KVCache of 32 positions, then one token at a time: each step's
    logits equal the full forward's at that position (what generation relies on)."""
    reference, path = tiny
    model = llama.load(path, device)
    expected = reference_logits(reference)
    cache = model.new_cache(32, batch=2)
    assert cache.key[0].shape == (2, TINY["num_key_value_heads"], 32, 16)   # no copies per query head
    got = [model(engine.tensor(IDS[:, :5], device=device), engine.arange(5, device=device), cache).numpy()]
    cache.append(range(5))
    for t in range(5, IDS.shape[1]):
        step = model(engine.tensor(IDS[:, t:t + 1], device=device), engine.tensor([t], device=device), cache,
                     last_only=True)
        cache.append([0])
        got.append(step.numpy())
    np.testing.assert_allclose(np.concatenate(got, 1), expected, atol=1e-4, rtol=0)
    assert cache.length == IDS.shape[1]


@pytest.mark.parametrize("device", DEVICES)
def test_q8_0_llama_matches_transformers_on_the_dequantized_weights(tmp_path, device):
    """Q8_0 matrices stay quantized (projections stacked as Q8_0 too); numpy and webgpu compute
    in float32 on the dequantized values, simd quantizes activations to 14 bits (wasm_kernels/README)."""
    reference = reference_model(tied=True, seed=1)
    write_gguf(tmp_path / "q8.gguf", reference, "q8_0")
    model = llama.load(tmp_path / "q8.gguf", device)
    assert model.blk[0].attn_qkv.qtype == "q8_0" and model.token_embd.weight.qtype == "q8_0"
    logits = model(engine.tensor(IDS, device=device), engine.arange(IDS.shape[1], device=device)).numpy()
    expected = reference_logits(reference)
    tolerance = 2e-3 * np.abs(expected).max() if device == "simd" else 1e-4
    np.testing.assert_allclose(logits, expected, atol=tolerance, rtol=0)
    assert (logits.argmax(-1) == expected.argmax(-1)).mean() > 0.9


def test_the_projections_are_stacked_as_row_views(tiny):
    """q, k, v (and gate, up) are one matrix each (one product per input), the per-name weights its rows."""
    _, path = tiny
    model = llama.load(path, "numpy")
    block = model.blk[0]
    assert block.attn_qkv.shape == (64 + 2 * 32, 64) and block.ffn_gate_up.shape == (2 * 96, 64)
    np.testing.assert_array_equal(block.attn_k.weight.numpy(), block.attn_qkv.numpy()[64:96])


def test_config_from_gguf_reads_the_llama_keys(tiny):
    _, path = tiny
    config = llama.Config.from_gguf(metadata_of(path))
    assert config.rms_norm_eps == pytest.approx(TINY["rms_norm_eps"], rel=1e-6)      # a float32 in the file
    assert dataclasses.replace(config, rms_norm_eps=TINY["rms_norm_eps"]) == llama.Config(**TINY)
    assert config.head_dim == 16


@pytest.mark.parametrize("change,field", [
    ({"general.architecture": "gpt2"}, "general.architecture"),
    ({"llama.embedding_length": None}, "llama.embedding_length"),
    ({"llama.block_count": 10 ** 9}, "llama.block_count"),
    ({"llama.attention.head_count": "4"}, "llama.attention.head_count"),
    ({"llama.attention.head_count_kv": 3}, "llama.attention.head_count"),
    ({"llama.rope.dimension_count": 8}, "llama.rope.dimension_count"),
    ({"llama.rope.freq_base": float("nan")}, "llama.rope.freq_base"),
])
def test_bad_config_keys_name_the_key(tiny, change, field):
    with pytest.raises(InvalidHeader) as caught:
        llama.Config.from_gguf(changed(metadata_of(tiny[1]), change), file="x.gguf")
    assert field in str(caught.value) and "x.gguf" in str(caught.value)


def test_a_missing_tensor_is_a_clear_error(tmp_path):
    reference = reference_model(tied=True)
    write_gguf(tmp_path / "t.gguf", reference)
    with engine.load_gguf(tmp_path / "t.gguf") as weights:
        class Without:                               # the file's tensors less one
            metadata, name = weights.metadata, weights.name

            def __contains__(self, key):
                return key != "blk.1.ffn_up.weight" and key in weights

            def keys(self):
                return [k for k in weights.keys() if k != "blk.1.ffn_up.weight"]

            def __getitem__(self, key):
                if key == "blk.1.ffn_up.weight":
                    raise KeyError(key)
                return weights[key]
        with pytest.raises(EngineError, match="blk.1.ffn_up.weight"):
            llama.load(Without())
