"""models/llama.py's decoder for every family it reads, against transformers on tiny random models.

Each case builds transformers' model of the family with random weights, writes the GGUF llama.cpp's
converter would write (tests/llama_gguf.py), and compares models.llama.load of that file with
transformers loading the same file (`from_pretrained(folder, gguf_file=...)`), which checks our
reading of the format. Where transformers' GGUF reader lacks a key, the value is passed to it:
Qwen3's head_dim (it does not map qwen3.attention.key_length), Gemma 3's query_pre_attn_scalar
(no GGUF key; its default, 256, is the 270M's head dim, not the tiny one's). Mistral: llama.cpp writes
it as "llama" and transformers reads it as Llama, without the window, so its weights as transformers
read them are put in a MistralForCausalLM of the written config. Sliding windows (Mistral 5,
Gemma 3 4) are shorter than the 13-token sequences and the generations, so sliding and global
layers both matter, and the cached steps run past the window.

Float32 weights: logits within 1e-4 on every backend, without and with the KV cache, and greedy
generation (engine.generation, decode steps replayed as graphs) equal to transformers' greedy
decoding. Quantized weights (Q8_0; Q5_0 with Q8_0 attn_v, as the Q4_K_M files mix them, which
stacks q and k but not v): transformers dequantizes the file; numpy and webgpu compute on the
dequantized values (1e-4), simd quantizes activations to 14 bits (engine/backends/simd/quantized.py)."""
import os

import numpy as np
import pytest

import engine
from engine.errors import EngineError, InvalidHeader, MissingTensor
from engine.generation import GenerationConfig, Generator
from models import llama
from tests.helpers import need_import
from tests.llama_gguf import TINY, changed, family_model, metadata_of, write_gguf

torch = need_import("torch")
transformers = need_import("transformers")
gguf = need_import("gguf")

DEVICES = [os.environ["ENGINE_TEST_DEVICE"]] if os.environ.get("ENGINE_TEST_DEVICE") else engine.available_devices()
CASES = [("llama", True), ("mistral", False), ("qwen2", True), ("qwen2", False), ("qwen3", True), ("phi3", False),
         ("gemma3", True)]
IDS = np.random.default_rng(3).integers(0, TINY["vocab_size"], (2, 13))
# what transformers' GGUF reader does not read (see the module docstring)
NOT_READ = {"qwen3": {"head_dim": 32}, "gemma3": {"query_pre_attn_scalar": 32}}
# Phi3Config's default pad and eos ids (32000) lie outside the tiny vocabulary: the file names them
METADATA = {"phi3": {"tokenizer.ggml.padding_token_id": 0, "tokenizer.ggml.eos_token_id": 1}}


def transformers_reading(path, family: str, written):
    """transformers' model of the GGUF at `path` (float32)."""
    transformers.utils.logging.disable_progress_bar()
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                              dtype=torch.float32, **NOT_READ.get(family, {}))
    if family == "mistral":
        assert type(model).__name__ == "LlamaForCausalLM"
        mistral = type(written)(written.config).eval()
        mistral.load_state_dict(model.state_dict())
        model = mistral
    return model.eval()


def written(family, tied, tmp_path, qtype=None, qtypes=None, seed=0):
    """(transformers' reading of the file, its path) for a tiny random model of `family`."""
    model = family_model(family, tied, seed)
    path = tmp_path / f"{family}.gguf"
    write_gguf(path, model, qtype, METADATA.get(family), qtypes)
    return transformers_reading(path, family, model), path


@pytest.fixture(scope="module", params=CASES, ids=[f"{f}-{'tied' if t else 'untied'}" for f, t in CASES])
def tiny(request, tmp_path_factory):
    family, tied = request.param
    return (family,) + written(family, tied, tmp_path_factory.mktemp(family))


def logits_of(model, ids=IDS) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(ids)).logits.numpy()


@pytest.mark.parametrize("device", DEVICES)
def test_logits_match_transformers(tiny, device):
    family, reference, path = tiny
    model = llama.load(path, device)
    assert model.config.architecture == ("llama" if family == "mistral" else family)
    logits = model(engine.tensor(IDS, device=device), engine.arange(IDS.shape[1], device=device)).numpy()
    np.testing.assert_allclose(logits, logits_of(reference), atol=1e-4, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_cached_steps_past_the_window_give_the_full_forwards_logits(tiny, device):
    """Prefill 3 tokens, then one at a time to 13 (past the sliding windows), reading the cache's
    first 16 rows: each step's logits are transformers' at that position."""
    family, reference, path = tiny
    model = llama.load(path, device)
    cache = model.new_cache(32, batch=2)
    got = [model(engine.tensor(IDS[:, :3], device=device), engine.arange(3, device=device), cache, window=16).numpy()]
    cache.append(range(3))
    for t in range(3, IDS.shape[1]):
        got.append(model(engine.tensor(IDS[:, t:t + 1], device=device), engine.tensor([t], device=device), cache,
                         last_only=True, window=16).numpy())
        cache.append([0])
    np.testing.assert_allclose(np.concatenate(got, 1), logits_of(reference), atol=1e-4, rtol=0)


def greedy(reference, prompt: list, n: int) -> list:
    """transformers' greedy continuation: the argmax of its logits at each step."""
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(logits_of(reference, np.array([ids]))[0, -1].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_generation_equals_transformers(tiny, device):
    """engine.generation over the model's own cache (steps replayed as graphs where the backend can)."""
    family, reference, path = tiny
    prompt = [5, 17, 42, 99, 3, 120]
    generator = Generator(llama.load(path, device), None, capacity=64)
    ids = list(generator.tokens(prompt, GenerationConfig(max_new_tokens=30)))
    assert ids == greedy(reference, prompt, 30)


QUANTIZED = [("qwen2", "q5_0", {"attn_v": "q8_0"}), ("gemma3", "q5_0", {"attn_v": "q8_0"}), ("phi3", "q8_0", None),
             ("llama", "q4_0", None)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family,qtype,qtypes", QUANTIZED, ids=[f"{f}-{q}" for f, q, _ in QUANTIZED])
def test_quantized_weights_match_transformers_reading_of_them(tmp_path, device, family, qtype, qtypes):
    reference, path = written(family, family == "gemma3", tmp_path, qtype, qtypes, seed=1)
    model = llama.load(path, device)
    block = model.blk[0]
    if qtypes:                                  # v's type differs: q and k stacked, v multiplied alone
        assert block.attn_qkv is None and block.attn_qk.qtype == qtype and block.attn_v.weight.qtype == "q8_0"
    else:
        assert block.attn_qkv.qtype == qtype
    assert block.ffn_gate_up.qtype == qtype
    logits = model(engine.tensor(IDS, device=device), engine.arange(IDS.shape[1], device=device)).numpy()
    expected = logits_of(reference)
    tolerance = 3e-3 * np.abs(expected).max() if device == "simd" else 1e-4
    np.testing.assert_allclose(logits, expected, atol=tolerance, rtol=0)
    assert (logits.argmax(-1) == expected.argmax(-1)).mean() > 0.9


def test_what_each_family_is_made_of(tmp_path):
    """The parts the table turns on, read from the files (numpy)."""
    models = {}
    for family, tied in CASES:
        (tmp_path / family).mkdir(exist_ok=True)
        models[family] = llama.load(written(family, tied, tmp_path / family)[1], "numpy")
    qwen2, gemma3, phi3 = models["qwen2"].blk[0], models["gemma3"], models["phi3"].blk[0]
    assert qwen2.attn_qkv_bias.shape == (64 + 2 * 32,) and models["llama"].blk[0].attn_qkv_bias is None
    np.testing.assert_array_equal(qwen2.attn_k.bias.numpy(), qwen2.attn_qkv_bias.numpy()[64:96])
    assert [b.sliding for b in gemma3.blk] == [True] * 5 + [False]          # every 6th layer global
    assert gemma3.config.head_dim == 32 and gemma3.blk[0].attn_qkv.shape == (4 * 32 + 2 * 2 * 32, 64)
    gemma3.new_cache(16), models["mistral"].new_cache(16)
    assert gemma3.rope_local_cos.shape == (16, 32) and models["mistral"].rope_local_cos is None
    assert [b.sliding for b in models["mistral"].blk] == [True, True] and models["mistral"].config.sliding_window == 5
    assert phi3.attn_qkv.shape == (128, 64) and phi3.ffn_gate_up.shape == (2 * 96, 64)
    with engine.load_gguf(tmp_path / "phi3" / "phi3.gguf") as weights:     # the file's fused tensors, as they are
        np.testing.assert_array_equal(phi3.attn_qkv.numpy(), weights["blk.0.attn_qkv.weight"].numpy())
        np.testing.assert_array_equal(phi3.ffn_gate_up.numpy(), weights["blk.0.ffn_up.weight"].numpy())
    assert models["qwen3"].blk[0].attn_qk_norm.shape == (4 + 2, 32)


def test_rope_tables_follow_the_cache_not_the_context_length(tmp_path):
    """A file that states 131072 positions: the tables hold what the cache the model is used with
    holds (here 300 positions, then 1000), not 131072 x d."""
    model = family_model("qwen2", True)
    model.config.max_position_embeddings = 131072
    write_gguf(tmp_path / "long.gguf", model)
    ours = llama.load(tmp_path / "long.gguf", "numpy")
    assert ours.config.max_position_embeddings == 131072 and ours.rope_cos is None
    cache = ours.new_cache(300)
    assert ours.rope_cos.shape == (300, 16) and cache.capacity == 300
    before = ours.rope_cos.numpy()
    ours.new_cache(1000)
    assert ours.rope_cos.shape == (1000, 16)
    np.testing.assert_array_equal(ours.rope_cos.numpy()[:300], before)       # rows kept as they were


@pytest.mark.parametrize("device", DEVICES)
def test_llama3_rope_frequencies_from_the_file(tmp_path, device):
    """Llama 3.1+'s RoPE scaling, which llama.cpp's converter writes as `rope_freqs.weight` (the
    frequencies' divisors). transformers' GGUF reader ignores that tensor, so the reference is the
    transformers model written (rope_type llama3; its original context 32, so that the three bands
    of frequencies all occur in a head of 16)."""
    reference = family_model("llama", True, rope_parameters={
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    write_gguf(tmp_path / "llama3.gguf", reference)
    model = llama.load(tmp_path / "llama3.gguf", device)
    factors = model.rope_freqs                         # 1 (short wavelengths), 8 (long ones), between
    assert factors.min() == 1.0 and factors.max() == 8.0 and ((factors > 1) & (factors < 8)).any()
    logits = model(engine.tensor(IDS, device=device), engine.arange(IDS.shape[1], device=device)).numpy()
    np.testing.assert_allclose(logits, logits_of(reference), atol=1e-4, rtol=0)


# --- bad files: clear errors naming the file and the key or tensor --------------------------------------
@pytest.fixture(scope="module")
def gemma_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bad") / "gemma3.gguf"
    write_gguf(path, family_model("gemma3"))
    return path


def test_an_unknown_architecture_is_named_with_the_supported_ones(gemma_file):
    metadata = {**metadata_of(gemma_file), "general.architecture": "mamba"}
    with pytest.raises(InvalidHeader) as caught:
        llama.Config.from_gguf(metadata, file="m.gguf")
    message = str(caught.value)
    assert "'mamba'" in message and "m.gguf" in message and "general.architecture" in message
    assert all(family in message for family in llama.FAMILIES)


@pytest.mark.parametrize("change,key", [
    ({"gemma3.context_length": 1 << 40}, "gemma3.context_length"),
    ({"gemma3.context_length": 0}, "gemma3.context_length"),
    ({"gemma3.attention.sliding_window": None}, "gemma3.attention.sliding_window"),
    ({"gemma3.attention.key_length": 33, "gemma3.attention.value_length": 33}, "gemma3.attention.key_length"),
    ({"gemma3.attention.head_count_kv": 3}, "gemma3.attention.head_count"),
    ({"gemma3.attention.value_length": 64}, "gemma3.attention.value_length"),
    ({"gemma3.rope.dimension_count": 16}, "gemma3.rope.dimension_count"),
    ({"gemma3.rope.scaling.type": "yarn"}, "gemma3.rope.scaling.type"),
    ({"gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": -1.0}, "gemma3.rope.scaling.factor"),
])
def test_bad_keys_name_the_key_and_the_file(gemma_file, change, key):
    with pytest.raises(InvalidHeader) as caught:
        llama.Config.from_gguf(changed(metadata_of(gemma_file), change), file="g.gguf")
    assert key in str(caught.value) and "g.gguf" in str(caught.value)


def test_an_absurd_context_length_in_a_file_names_the_key(tmp_path):
    model = family_model("qwen2")
    model.config.max_position_embeddings = 1 << 30
    write_gguf(tmp_path / "huge.gguf", model)
    with pytest.raises(InvalidHeader, match="qwen2.context_length") as caught:
        llama.load(tmp_path / "huge.gguf")
    assert "huge.gguf" in str(caught.value)


def test_a_missing_tensor_names_the_files_tensor(tmp_path):
    """Phi-3's q, k and v come from one tensor: the error names that one."""
    write_gguf(tmp_path / "phi3.gguf", family_model("phi3", False), metadata=METADATA["phi3"])
    with engine.load_gguf(tmp_path / "phi3.gguf") as weights:
        class Without:                               # the file's tensors less one
            metadata, name = weights.metadata, weights.name

            def __contains__(self, key):
                return key != "blk.1.attn_qkv.weight" and key in weights

            def keys(self):
                return [k for k in weights.keys() if k != "blk.1.attn_qkv.weight"]

            def __getitem__(self, key):
                return weights[key]
        with pytest.raises(MissingTensor, match=r"blk\.1\.attn_qkv\.weight") as caught:
            llama.load(Without())
    assert "phi3.gguf" in str(caught.value) and "attn_q.weight" not in str(caught.value)


def test_a_file_cut_short_in_a_tensor_names_the_tensor(gemma_file, tmp_path):
    data = gemma_file.read_bytes()
    with engine.load_gguf(gemma_file) as weights:
        last = max(weights.keys(), key=lambda name: weights.info(name).offset)
        cut = weights.info(last).offset + weights.info(last).nbytes // 2
    (tmp_path / "cut.gguf").write_bytes(data[:cut])
    with pytest.raises(EngineError) as caught:
        llama.load(tmp_path / "cut.gguf")
    assert "cut.gguf" in str(caught.value) and last in str(caught.value)


def test_longrope_files_are_refused(tmp_path):
    write_gguf(tmp_path / "phi3.gguf", family_model("phi3", False), metadata=METADATA["phi3"])
    with engine.load_gguf(tmp_path / "phi3.gguf") as weights:
        class WithFactors:
            metadata, name = weights.metadata, weights.name

            def __contains__(self, key):
                return key == "rope_factors_long.weight" or key in weights

            def keys(self):
                return list(weights.keys()) + ["rope_factors_long.weight"]

            def __getitem__(self, key):
                return weights[key]
        with pytest.raises(InvalidHeader, match="LongRoPE") as caught:
            llama.load(WithFactors())
    assert "rope_factors_long.weight" in str(caught.value)


def test_quantized_projections_are_stacked_only_as_views_or_when_small(monkeypatch):
    """gate and up (or q, k, v) become one weight when their bytes lie end to end (a view: a GGUF
    read whole) or when they are small; apart otherwise, so that a model fetched by runs of
    tensors (the page) holds no second copy of its largest weights."""
    from engine.quantized import QuantizedTensor
    from tests.kernels.reference import random_blocks
    rng = np.random.default_rng(0)
    whole = QuantizedTensor.from_raw(random_blocks("q4_k", 6, 256, rng), "q4_k", (6, 256), "numpy")
    gate, up = whole.split([3, 3])                               # end to end in one buffer
    apart = [QuantizedTensor.from_raw(random_blocks("q4_k", 3, 256, rng), "q4_k", (3, 256), "numpy")
             for _ in range(2)]
    monkeypatch.setattr(llama, "STACK_COPY_BYTES", 0)
    fused, parts = llama._stack([gate, up])
    assert fused is not None and np.shares_memory(fused.raw, whole.raw) and len(parts) == 2
    assert llama._stack(apart) == (None, apart)
    monkeypatch.setattr(llama, "STACK_COPY_BYTES", 2 << 20)
    fused, parts = llama._stack(apart)                           # small: one product instead of two
    np.testing.assert_array_equal(fused.raw, np.concatenate([t.raw for t in apart]))
