"""The one list of primitive ops. Everything else is composed from these.

A backend implements each op in its kernel table (`KERNELS: dict[Op, fn]`) and
may add fused kernels for composites (`FUSED: dict[str, fn]`, named from the declared `FUSED`
below) as an optimisation; a composite checks that table, it never try/excepts. `check_tables`
holds each backend to both lists.

Kernel contract (what `run` guarantees a backend):
- inputs are engine Tensors on that backend, already cast to the op's compute
  dtype and, for elementwise ops, expanded to one common shape (stride-0 dims);
- `dtype` is the output dtype; the kernel returns a new contiguous buffer and
  the output shape.

The one exception is INDEX_COPY, the only op that writes into an existing buffer (a KV cache
filled in place, engine.nn.KVCache): inputs (dest, index, source), params `axis`; source has
dest's shape with `index.numel()` rows at `axis`; the kernel writes source's rows into dest's
storage at the rows named by index (each in [0, dest.shape[axis])) and returns no outputs
(`run` returns []). dest is a view with no stride-0 dims (Tensor.index_copy_ checks). Backends
that can check the index on the host raise IndexError there; a device kernel that cannot skips
an out-of-range row, so nothing outside dest is ever written.

Fused kernels a backend may offer (`backend.fused[name](*arrays, **params)`, one
result with the composite's exact semantics; callers check dtypes first):
- "mul_add" (x, a, b): x * a + b, broadcasting (inference batch norm);
- "hardtanh" (x, min_val, max_val): clamp, NaN kept;
- "softmax" (x, dim);
- "layer_norm" (x, [weight], [bias], normalized_dims, eps, has_weight, has_bias);
- "rms_norm" (x, [weight], normalized_dims, eps, has_weight);
- "linear" (x, weight, [bias]): x @ weight.T + bias, all float32;
- "linear_f16w" (x, weight, [bias]): the same with a float16 weight (x and bias float32),
  widened exactly inside the kernel: the float32 product of the widened weight, up to
  summation order;
- "conv2d" (x, weight, [bias], stride, pads, dilation, groups, activation): unpadded
  NCHW x, pads ((top, bottom), (left, right)) of zeros, all float32, then the activation
  named as in nn.functional.CONV_ACTIVATIONS ("none", "relu", "relu6", ...);
- "gelu" (x, approximate): x * Phi(x) with erf ("none") or the tanh form ("tanh"), float32;
- "silu" (x): x * sigmoid(x), float32;
- "silu_mul" (gate, up): silu(gate) * up (SwiGLU's product), one shape, float32; the result
  contiguous;
- "rope" (x, cos, sin): rotary position embeddings, x (..., T, d) * cos + rotate_half(x) * sin
  with rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]) and cos, sin broadcastable to (T, d),
  all float32; the result contiguous;
- "attention" (q, k, v, [mask], scale, is_causal): softmax(q @ k^T * scale + mask) @ v for
  float32 q (N, H, L, E), k (N, Hkv, S, E), v (N, Hkv, S, Ev), any strides, H a multiple of
  Hkv (query head h reads KV head h // (H // Hkv)); mask bool (True = attend) or float32
  (added), already expanded to (N, H, L, S) (stride-0 dims); is_causal keeps key j <= query i.
  Returns (N, L, H, Ev): the heads side by side, as an output projection reads them (the
  caller sees it as (N, H, L, Ev) through a transpose). Rows with every key masked are NaN;
- "add_layer_norm" (x, residual, [input_bias], [weight], [bias], normalized_dims, eps,
  has_input_bias, has_weight, has_bias): layer_norm((x + input_bias) + residual), residual
  of x's shape, the others of the normalized shape, all float32;
- "select_token" (logits, marks, state, config, ids, positions): the next token from float32
  logits (V,) by the sampler and token rules of engine/sampler.py, whose `select_token` is
  the reference; writes ids and positions (a decode step's inputs), marks and state in place
  and returns (4,) float32 [token, log-probability, 0, 0]. Backends that keep tensors on a
  device offer it, so a decode step reads back 16 bytes instead of the logits.

Quantized kernels every backend must have (no composite of the ops below reads GGML blocks;
engine.quantized). `weight` is the backend's storage of `rows` rows of `cols` elements in
GGML type `qtype` (made by `backend.quantized_in(raw, qtype, rows)`):
- "linear_q" (x, [bias], weight, qtype, rows, cols): float32 x (..., cols) times the
  dequantized weight transposed, plus bias (rows,): (..., rows). Kernels may quantize x per
  block (int8 dot products, as llama.cpp does): results then agree with the float32 product
  to int8 activation precision, not bit for bit;
- "embedding_q" (ids, weight, qtype, rows, cols): int64 ids (any shape, each in [0, rows),
  else IndexError) -> ids.shape + (cols,) float32 rows, dequantized exactly as
  engine.quants.dequantize does.
"""
from __future__ import annotations

import enum


class Op(enum.Enum):
    # Every kernel call looks its op up in a dict: Enum's own __hash__ is a Python function
    # (hash of the name), the identity hash is C. Members are singletons, equality is identity.
    __hash__ = object.__hash__

    # elementwise, one input
    NEG = enum.auto(); ABS = enum.auto(); EXP = enum.auto(); LOG = enum.auto()          # noqa: E702
    SQRT = enum.auto(); SIN = enum.auto(); COS = enum.auto(); TANH = enum.auto()       # noqa: E702
    ERF = enum.auto(); RECIPROCAL = enum.auto(); FLOOR = enum.auto(); CEIL = enum.auto()  # noqa: E702
    LOGICAL_NOT = enum.auto(); CAST = enum.auto(); CONTIGUOUS = enum.auto()             # noqa: E702
    # elementwise, two inputs
    ADD = enum.auto(); SUB = enum.auto(); MUL = enum.auto(); DIV = enum.auto()          # noqa: E702
    POW = enum.auto(); MAXIMUM = enum.auto(); MINIMUM = enum.auto()                     # noqa: E702
    EQ = enum.auto(); NE = enum.auto(); LT = enum.auto(); LE = enum.auto()              # noqa: E702
    GT = enum.auto(); GE = enum.auto(); AND = enum.auto(); OR = enum.auto(); XOR = enum.auto()  # noqa: E702
    # elementwise, three inputs
    WHERE = enum.auto()
    # reductions over `axes`, keepdim
    SUM = enum.auto(); MAX = enum.auto(); MIN = enum.auto(); ARGMAX = enum.auto(); ARGMIN = enum.auto()  # noqa: E702
    TOPK = enum.auto()            # (values, indices) along one axis
    # data movement
    CAT = enum.auto()             # along `axis`
    PAD = enum.auto()             # constant padding, `pads` = ((before, after), ...) per dim
    INDEX_SELECT = enum.auto()    # gather rows of `axis` by an int64 index vector
    INDEX_COPY = enum.auto()      # in place: dest's rows of `axis` at an int64 index vector = source
    # compute-heavy
    MATMUL = enum.auto()          # (B, M, K) @ (B, K, N) with equal batch shapes
    CONV2D = enum.auto()          # NCHW, input already padded; stride, dilation, groups


# The fused kernels a backend may offer, by name (their semantics above), and the quantized ones every
# backend must: each backend's table is checked against these (check_tables), as its op table is
# against Op.
FUSED = frozenset(("mul_add", "hardtanh", "softmax", "layer_norm", "rms_norm", "add_layer_norm", "linear",
                   "linear_f16w", "conv2d", "gelu", "silu", "silu_mul", "rope", "attention", "linear_q",
                   "embedding_q", "select_token"))
QUANTIZED = frozenset(("linear_q", "embedding_q"))


def check_tables(backend: str, kernels: dict, fused: dict) -> None:
    """A backend's tables as this module declares them: a kernel for every Op, fused kernels only
    under declared names, and the quantized ones among them (a RuntimeError naming what is off)."""
    problems = []
    if set(kernels) != set(Op):
        problems.append(f"its op table misses {sorted(o.name for o in set(Op) - set(kernels))}")
    if set(fused) - FUSED:
        problems.append(f"fused kernels not declared in engine.ops.FUSED: {sorted(set(fused) - FUSED)}")
    if QUANTIZED - set(fused):
        problems.append(f"it lacks the quantized kernels {sorted(QUANTIZED - set(fused))}")
    if problems:
        raise RuntimeError(f"the {backend} backend's kernel tables are not engine.ops': {'; '.join(problems)}")


UNARY = {Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.SQRT, Op.SIN, Op.COS, Op.TANH, Op.ERF, Op.RECIPROCAL,
         Op.FLOOR, Op.CEIL, Op.LOGICAL_NOT}
BINARY = {Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAXIMUM, Op.MINIMUM,
          Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.AND, Op.OR, Op.XOR}
COMPARISONS = {Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE}
LOGICAL = {Op.AND, Op.OR, Op.XOR, Op.LOGICAL_NOT}
REDUCTIONS = {Op.SUM, Op.MAX, Op.MIN, Op.ARGMAX, Op.ARGMIN}
