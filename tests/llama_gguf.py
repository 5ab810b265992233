"""Tiny random decoders for tests: transformers' model of each family models/llama.py reads
(llama, mistral, qwen2, qwen3, phi3, gemma3), and the GGUF llama.cpp's converter would write for
it (gguf-py's writer, its tensor names, and its conventions: attn_q/attn_k rows permuted for the
llama layout, Gemma's norm weights stored as w + 1, Phi-3's fused attn_qkv and ffn_up kept fused)."""
import numpy as np

import engine

TINY = dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-5)

# GGUF names of transformers' per-layer parameters
LAYER_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down",
               "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",        # qwen3, gemma3
               "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up"}              # phi3
GEMMA3_LAYER_NAMES = {**LAYER_NAMES, "post_attention_layernorm": "post_attention_norm",
                      "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm"}

# family -> (transformers config class, its tiny config beyond TINY). Mistral's window and Gemma 3's
# are shorter than the tests' sequences, so that sliding layers differ from global ones; Gemma 3 has
# 6 layers, so that the 6th is global; Qwen3's and Gemma 3's head dims differ from width / heads.
FAMILIES = {
    "llama": ("LlamaConfig", {}),
    "mistral": ("MistralConfig", {"sliding_window": 5}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {"head_dim": 32}),
    "phi3": ("Phi3Config", {"pad_token_id": 0}),
    "gemma3": ("Gemma3TextConfig", {"head_dim": 32, "num_hidden_layers": 6, "sliding_window": 4,
                                    "query_pre_attn_scalar": 32, "rope_theta": 1e6}),
}
ARCHITECTURE = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3",
                "gemma3_text": "gemma3"}       # transformers' model_type -> general.architecture


def reference_model(tied: bool, seed: int = 0, **config):
    """A tiny random transformers LlamaForCausalLM."""
    return family_model("llama", tied, seed, **config)


def family_model(family: str, tied: bool = True, seed: int = 0, **config):
    """A tiny random transformers model of `family` (a FAMILIES key), eager attention."""
    import torch
    import transformers
    torch.manual_seed(seed)
    kind, extra = FAMILIES[family]
    config = getattr(transformers, kind)(**{**TINY, **extra, **config}, tie_word_embeddings=tied,
                                         attn_implementation="eager")
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():                      # larger than the default init, so that errors show
        for p in model.parameters():
            p.normal_(0.0, 0.2 if p.ndim == 2 else 1.0)
    return model


def gguf_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's Q/K row order: per head, HF rows [i | d/2 + i] interleaved as 2i, 2i+1."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, -1).swapaxes(1, 2).reshape(weight.shape)


def write_gguf(path, model, qtype=None, metadata=None, qtypes=None) -> None:
    """model's weights as the GGUF of its family (matrices in qtype when given, or in qtypes[name]
    for the GGUF names listed there, "attn_v" say); the model's quantized matrices become
    dequantize(quantize(w)) in place, so that it computes what the file holds. metadata: more keys
    (a tokenizer's, say) as {key: value} of a GGUF's metadata."""
    import gguf
    import torch
    c = model.config
    arch = ARCHITECTURE[c.model_type]
    heads, kv_heads = c.num_attention_heads, c.num_key_value_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    rope = c.rope_parameters.get("full_attention", c.rope_parameters)
    writer.add_rope_freq_base(rope["rope_theta"])
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    if arch in ("qwen3", "gemma3"):
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if arch in ("llama", "phi3"):
        writer.add_rope_dimension_count(head_dim)
    if arch in ("llama", "gemma3") and getattr(c, "sliding_window", None):
        writer.add_sliding_window(c.sliding_window)
    writer.add_vocab_size(c.vocab_size)
    for key, value in (metadata or {}).items():
        writer.add_key_value(key, value, _value_type(gguf, value), _sub_type(gguf, value))
    layer_names = GEMMA3_LAYER_NAMES if arch == "gemma3" else LAYER_NAMES
    params = dict(model.named_parameters())
    for hf, param in params.items():
        if hf == "lm_head.weight" and c.tie_word_embeddings:
            continue                                   # tied: the head is the embeddings
        name = _gguf_name(hf, layer_names)
        value = param.detach().numpy().astype(np.float32)
        if arch == "gemma3" and name.endswith("norm.weight"):
            value = value + 1                          # llama.cpp stores Gemma's (1 + w)
        raw, kind = None, (qtypes or {}).get(name.split(".")[-2], qtype)
        if kind is not None and value.ndim == 2:
            kind = gguf.GGMLQuantizationType[kind.upper()]
            data = gguf.quants.quantize(value, kind)
            with torch.no_grad():
                param.copy_(torch.from_numpy(gguf.quants.dequantize(data, kind).reshape(value.shape)))
            value, raw = data, kind
        if arch == "llama" and (".attn_q." in name or ".attn_k." in name):
            value = gguf_rows(value, heads if ".attn_q." in name else kv_heads)
        writer.add_tensor(name, np.ascontiguousarray(value), raw_dtype=raw)
    if rope.get("rope_type") == "llama3":
        writer.add_tensor("rope_freqs.weight", llama3_rope_factors(rope, head_dim))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def llama3_rope_factors(rope: dict, head_dim: int) -> np.ndarray:
    """What llama.cpp's converter writes as `rope_freqs.weight` for Llama 3.1's RoPE: per frequency,
    the divisor of transformers' llama3 scaling (1 for short wavelengths, `factor` for long ones,
    interpolated between)."""
    freqs = 1.0 / rope["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    context = rope["original_max_position_embeddings"]
    out = []
    for freq in freqs:
        wavelen = 2 * np.pi / freq
        if wavelen < context / high:
            out.append(1.0)
        elif wavelen > context / low:
            out.append(factor)
        else:
            smooth = (context / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, np.float32)


def _gguf_name(hf: str, layer_names: dict) -> str:
    if hf == "lm_head.weight":
        return "output.weight"
    if hf in ("model.embed_tokens.weight", "model.norm.weight"):
        return {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}[hf]
    _, _, layer, rest = hf.split(".", 3)               # model.layers.{i}.{module}.{weight|bias}
    module, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{layer_names[module]}.{kind}"


def _value_type(gguf, value):
    T = gguf.GGUFValueType
    if isinstance(value, bool):
        return T.BOOL
    if isinstance(value, int):
        return T.UINT32 if value >= 0 else T.INT32
    if isinstance(value, float):
        return T.FLOAT32
    return T.STRING if isinstance(value, str) else T.ARRAY


def _sub_type(gguf, value):
    return _value_type(gguf, value[0]) if isinstance(value, list) and value else None


def metadata_of(path) -> dict:
    """A GGUF file's metadata, as a dict to change."""
    with engine.load_gguf(path) as weights:
        return dict(weights.metadata)


def changed(metadata: dict, changes: dict, delete=None) -> dict:
    """`metadata` with `changes` applied in place: a value that is `delete` removes its key."""
    for key, value in changes.items():
        if value is delete:
            del metadata[key]
        else:
            metadata[key] = value
    return metadata

