"""A tiny random llama for tests: transformers' LlamaForCausalLM, and the GGUF llama.cpp's
converter would write for it (gguf-py's writer; attn_q/attn_k rows in llama.cpp's order)."""
import numpy as np

TINY = dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-5)

# GGUF names of transformers' per-layer parameters
LAYER_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down"}


def reference_model(tied: bool, seed: int = 0, **config):
    import torch
    import transformers
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**{**TINY, **config}, tie_word_embeddings=tied, attn_implementation="eager")
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():                      # larger than the default init, so that errors show
        for p in model.parameters():
            p.normal_(0.0, 0.2 if p.ndim == 2 else 1.0)
    return model


def gguf_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's Q/K row order: per head, HF rows [i | d/2 + i] interleaved as 2i, 2i+1."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, -1).swapaxes(1, 2).reshape(weight.shape)


def write_gguf(path, model, qtype=None, metadata=None) -> None:
    """model's weights as a llama GGUF (matrices in qtype when given); with qtype, the model's
    matrices become dequantize(quantize(w)) in place, so that it computes what the file holds.
    metadata: more keys (a tokenizer's, say) as {key: value} of a GGUF's metadata."""
    import gguf
    import torch
    c = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_rope_freq_base(c.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    writer.add_vocab_size(c.vocab_size)
    for key, value in (metadata or {}).items():
        writer.add_key_value(key, value, _value_type(gguf, value), _sub_type(gguf, value))
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    if not c.tie_word_embeddings:
        names["lm_head.weight"] = "output.weight"
    for i in range(c.num_hidden_layers):
        for hf, ours in LAYER_NAMES.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{ours}.weight"
    params = dict(model.named_parameters())
    for hf, name in names.items():
        value = params[hf].detach().numpy().astype(np.float32)
        raw = None
        if qtype is not None and value.ndim == 2:
            kind = gguf.GGMLQuantizationType[qtype.upper()]
            data = gguf.quants.quantize(value, kind)
            with torch.no_grad():
                params[hf].copy_(torch.from_numpy(gguf.quants.dequantize(data, kind).reshape(value.shape)))
            value, raw = data, kind
        if name.endswith("attn_q.weight"):
            value = gguf_rows(value, c.num_attention_heads)
        elif name.endswith("attn_k.weight"):
            value = gguf_rows(value, c.num_key_value_heads)
        writer.add_tensor(name, np.ascontiguousarray(value), raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()




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
