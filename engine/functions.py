"""Tensor-level functions with torch's names (engine.add, engine.sum, ...).

Each one does the bookkeeping (type promotion, broadcasting, dims) and hands a
primitive op from engine.ops to the tensor's backend. Composites are written
once here from primitives.
"""
from __future__ import annotations

import builtins
import math
from typing import NamedTuple

import numpy as np

from . import dtypes as D
from .errors import BackendError
from .layout import Layout, normalize_dim
from .ops import Op
from .tensor import Tensor, _from_raw

_py_max, _py_min, _py_sum, _py_abs = builtins.max, builtins.min, builtins.sum, builtins.abs


# --- dispatch -------------------------------------------------------------------------
def _run(op: Op, inputs, dtype, **params):
    backend = inputs[0]._backend
    for t in inputs[1:]:
        if t._backend is not backend:
            raise BackendError(f"{op.name.lower()}: tensors are on different devices "
                               f"({backend.name} and {t._backend.name}); move them with .to(device)")
    outs = backend.run(op, inputs, dtype, params)
    if isinstance(dtype, tuple):
        return tuple(Tensor(buf, Layout(shape), d, backend) for (buf, shape), d in zip(outs, dtype))
    buf, shape = outs[0]
    return Tensor(buf, Layout(shape), dtype, backend)


def cast(x: Tensor, dtype: D.DType) -> Tensor:
    return x if x.dtype is dtype else _run(Op.CAST, [x], dtype, src=x.dtype)


def contiguous(x: Tensor) -> Tensor:
    return _run(Op.CONTIGUOUS, [x], x.dtype)


def _compute(x: Tensor) -> Tensor:
    """Half types are storage only: widen to float32 before arithmetic."""
    return cast(x, x.dtype.compute)


def _floating(x: Tensor) -> Tensor:
    return cast(x, x.dtype.compute if x.dtype.is_floating_point else D.float32)


def _scalar(value, dtype: D.DType, like: Tensor) -> Tensor:
    raw = D.cast_numpy(np.array(value, np.float64 if isinstance(value, float) else None),
                       D.float64 if isinstance(value, float) else D.as_dtype(np.array(value).dtype), dtype)
    return Tensor(like._backend.copy_in(np.array(raw, copy=True)), Layout(()), dtype, like._backend)


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    ndim = _py_max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        sizes = {s[i - ndim + len(s)] for s in shapes if i - ndim + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _result_type(*xs) -> D.DType:
    """torch's rule: a higher kind (bool < int < float) wins; within a kind, tensors with
    dims decide over 0-d tensors, which decide over Python scalars."""
    rank = {"b": 0, "u": 1, "i": 1, "f": 2}
    dt = None
    for group in ([x.dtype for x in xs if isinstance(x, Tensor) and x.ndim > 0],
                  [x.dtype for x in xs if isinstance(x, Tensor) and x.ndim == 0]):
        if group:
            g = group[0]
            for d in group[1:]:
                g = D.promote_types(g, d)
            if dt is None or rank[g.kind] > rank[dt.kind]:
                dt = g
    for s in xs:
        if not isinstance(s, Tensor):
            if not isinstance(s, (bool, int, float, np.generic)):
                raise TypeError(f"unsupported operand {s!r}")
            dt = D.result_type_scalar(dt, s.item() if isinstance(s, np.generic) else s)
    return dt


def _prepare(xs, dtype: D.DType):
    """Cast all operands to `dtype` and expand them to one shape."""
    like = next(x for x in xs if isinstance(x, Tensor))
    ts = [cast(x, dtype) if isinstance(x, Tensor) else _scalar(x, dtype, like) for x in xs]
    shape = broadcast_shapes(*(t.shape for t in ts))
    return [t if t.shape == shape else t.expand(shape) for t in ts]


def _binary(op: Op, a, b, *, compute=None, out=None):
    dt = _result_type(a, b)
    ct = compute(dt) if compute else dt.compute
    return _run(op, _prepare([a, b], ct), out or ct)


def _float_result(dt):
    return dt.compute if dt.is_floating_point else D.float32


def add(a, b, *, alpha=1):
    return _binary(Op.ADD, a, b if alpha == 1 else mul(b, alpha))


def sub(a, b, *, alpha=1):
    return _binary(Op.SUB, a, b if alpha == 1 else mul(b, alpha))


def mul(a, b):
    return _binary(Op.MUL, a, b)


def div(a, b):
    return _binary(Op.DIV, a, b, compute=_float_result)


def pow(a, b):  # noqa: A001 - torch's name
    return _binary(Op.POW, a, b)


def maximum(a, b):
    return _binary(Op.MAXIMUM, a, b)


def minimum(a, b):
    return _binary(Op.MINIMUM, a, b)


def _compare(op):
    return lambda a, b: _binary(op, a, b, out=D.bool_)


eq, ne, lt, le, gt, ge = (_compare(o) for o in (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE))


def _bitwise(op):
    def fn(a, b):
        dt = _result_type(a, b)
        if dt.is_floating_point:
            raise TypeError(f"{op.name.lower()} is only defined for bool and integer tensors, got {dt}")
        return _run(op, _prepare([a, b], dt), dt)
    return fn


bitwise_and, bitwise_or, bitwise_xor = _bitwise(Op.AND), _bitwise(Op.OR), _bitwise(Op.XOR)
logical_and = lambda a, b: bitwise_and(cast(a, D.bool_), cast(b, D.bool_))  # noqa: E731
logical_or = lambda a, b: bitwise_or(cast(a, D.bool_), cast(b, D.bool_))  # noqa: E731


def logical_not(x: Tensor) -> Tensor:
    return _run(Op.LOGICAL_NOT, [x], D.bool_)


def bitwise_not(x: Tensor) -> Tensor:
    if x.dtype is D.bool_:
        return logical_not(x)
    if x.dtype.kind == "f":
        raise TypeError("bitwise_not is only defined for bool and integer tensors")
    return bitwise_xor(x, _scalar(-1 if x.dtype.kind == "i" else 255, x.dtype, x))


def where(condition, input, other):  # noqa: A002 - torch's names
    dt = _result_type(input, other).compute
    like = next(x for x in (condition, input, other) if isinstance(x, Tensor))
    cond = cast(condition, D.bool_) if isinstance(condition, Tensor) else _scalar(bool(condition), D.bool_, like)
    a, b = (cast(x, dt) if isinstance(x, Tensor) else _scalar(x, dt, like) for x in (input, other))
    shape = broadcast_shapes(cond.shape, a.shape, b.shape)
    return _run(Op.WHERE, [t if t.shape == shape else t.expand(shape) for t in (cond, a, b)], dt)


def masked_fill(x: Tensor, mask: Tensor, value) -> Tensor:
    return where(mask, value, x)


# --- unary ------------------------------------------------------------------------------
def _unary_float(op):
    return lambda x: _run(op, [_floating(x)], _float_result(x.dtype))


exp, log, sqrt, sin, cos, tanh, erf, reciprocal = (
    _unary_float(o) for o in (Op.EXP, Op.LOG, Op.SQRT, Op.SIN, Op.COS, Op.TANH, Op.ERF, Op.RECIPROCAL))


def neg(x: Tensor) -> Tensor:
    return _run(Op.NEG, [_compute(x)], x.dtype.compute)


def abs(x: Tensor) -> Tensor:  # noqa: A001 - torch's name
    return _run(Op.ABS, [_compute(x)], x.dtype.compute)


def floor(x: Tensor) -> Tensor:
    return x if not x.dtype.is_floating_point else _run(Op.FLOOR, [_compute(x)], x.dtype.compute)


def ceil(x: Tensor) -> Tensor:
    return x if not x.dtype.is_floating_point else _run(Op.CEIL, [_compute(x)], x.dtype.compute)


def rsqrt(x: Tensor) -> Tensor:
    return reciprocal(sqrt(x))


def sigmoid(x: Tensor) -> Tensor:
    return reciprocal(add(exp(neg(_floating(x))), 1.0))


def relu(x: Tensor) -> Tensor:
    return maximum(x, 0)


def clamp(x: Tensor, min=None, max=None) -> Tensor:  # noqa: A002 - torch's names
    if min is not None:
        x = maximum(x, min)
    if max is not None:
        x = minimum(x, max)
    return x


clip = clamp


# --- reductions -------------------------------------------------------------------------
def _axes(dim, ndim: int) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(ndim))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    return tuple(sorted({normalize_dim(d, ndim) for d in dims}))


def sum(x: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A001
    out = D.as_dtype(dtype) if dtype is not None else (x.dtype.compute if x.dtype.is_floating_point else D.int64)
    return _run(Op.SUM, [cast(x, out)], out, axes=_axes(dim, x.ndim), keepdim=keepdim)


def mean(x: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    x = x if dtype is None else cast(x, D.as_dtype(dtype))
    if not x.dtype.is_floating_point:
        raise TypeError(f"mean() needs a floating point input, got {x.dtype}; pass dtype=engine.float32")
    axes = _axes(dim, x.ndim)
    count = math.prod(x.shape[a] for a in axes)
    return div(sum(x, axes, keepdim), count)


def var(x: Tensor, dim=None, *, correction: int = 1, keepdim: bool = False) -> Tensor:
    axes = _axes(dim, x.ndim)
    count = math.prod(x.shape[a] for a in axes)
    centred = sub(x, mean(x, axes, keepdim=True))
    return div(sum(mul(centred, centred), axes, keepdim), _py_max(count - correction, 0))


def _extreme(op: Op, arg_op: Op):
    def fn(x: Tensor, dim=None, keepdim: bool = False):
        if isinstance(dim, Tensor):
            return (maximum if op is Op.MAX else minimum)(x, dim)
        xc = _compute(x)
        if dim is None:
            return _run(op, [xc], xc.dtype, axes=tuple(range(x.ndim)), keepdim=False)
        d = normalize_dim(dim, x.ndim)
        values = _run(op, [xc], xc.dtype, axes=(d,), keepdim=keepdim)
        return MinMax(values, _run(arg_op, [xc], D.int64, axis=d, keepdim=keepdim))
    return fn


class MinMax(NamedTuple):
    values: Tensor
    indices: Tensor


class TopK(NamedTuple):
    values: Tensor
    indices: Tensor


max = _extreme(Op.MAX, Op.ARGMAX)  # noqa: A001
min = _extreme(Op.MIN, Op.ARGMIN)  # noqa: A001


def amax(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    return _run(Op.MAX, [_compute(x)], x.dtype.compute, axes=_axes(dim, x.ndim), keepdim=keepdim)


def amin(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    return _run(Op.MIN, [_compute(x)], x.dtype.compute, axes=_axes(dim, x.ndim), keepdim=keepdim)


def _argext(op: Op):
    def fn(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
        if dim is None:
            return _run(op, [_compute(x).reshape(-1)], D.int64, axis=0, keepdim=False)
        return _run(op, [_compute(x)], D.int64, axis=normalize_dim(dim, x.ndim), keepdim=keepdim)
    return fn


argmax, argmin = _argext(Op.ARGMAX), _argext(Op.ARGMIN)


def all(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001
    return amin(cast(x, D.bool_), dim, keepdim)


def any(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001
    return amax(cast(x, D.bool_), dim, keepdim)


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> TopK:  # noqa: A002
    d = normalize_dim(dim, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if not 0 <= k <= n:
        raise ValueError(f"topk: k={k} is out of range for dimension {dim} of size {n}")
    xc = _compute(x)
    return TopK(*_run(Op.TOPK, [xc], (xc.dtype, D.int64), axis=d, k=k, largest=largest, sorted=sorted))


def softmax(x: Tensor, dim: int, dtype=None) -> Tensor:
    x = _floating(x if dtype is None else cast(x, D.as_dtype(dtype)))
    if "softmax" in x._backend.fused:
        return _run_fused("softmax", [x], dim=normalize_dim(dim, x.ndim))
    e = exp(sub(x, amax(x, dim, keepdim=True)))
    return div(e, sum(e, dim, keepdim=True))


def log_softmax(x: Tensor, dim: int, dtype=None) -> Tensor:
    x = _floating(x if dtype is None else cast(x, D.as_dtype(dtype)))
    shifted = sub(x, amax(x, dim, keepdim=True))
    return sub(shifted, log(sum(exp(shifted), dim, keepdim=True)))


def _run_fused(name: str, tensors, **params) -> Tensor:
    """The backend's fused kernel `name` on `tensors`; the result has the first one's dtype."""
    x = tensors[0]
    buf, shape = x._backend.run_fused(name, list(tensors), x.dtype, params)[0]
    return Tensor(buf, Layout(shape), x.dtype, x._backend)


# --- linear algebra ---------------------------------------------------------------------
def matmul(a: Tensor, b: Tensor) -> Tensor:
    dt = _result_type(a, b).compute
    a, b = cast(a, dt), cast(b, dt)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: both arguments need at least one dimension")
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} cannot be multiplied "
                         f"({a2.shape[-1]} != {b2.shape[-2]})")
    if b2.ndim == 2 and a2.ndim > 2:              # one GEMM over all rows when a allows it
        out = _run(Op.MATMUL, [a2.reshape(-1, a2.shape[-1]), b2], dt).reshape(a2.shape[:-1] + b2.shape[-1:])
    else:
        batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        a3, b3 = a2.expand(batch + a2.shape[-2:]), b2.expand(batch + b2.shape[-2:])
        out = _run(Op.MATMUL, [a3, b3], dt)
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    return out


# --- joining and splitting --------------------------------------------------------------
def cat(tensors, dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat() needs at least one tensor")
    d = normalize_dim(dim, tensors[0].ndim)
    ref = tensors[0].shape
    for i, t in enumerate(tensors):
        if t.ndim != len(ref) or t.shape[:d] + t.shape[d + 1:] != ref[:d] + ref[d + 1:]:
            raise ValueError(f"cat: tensor {i} has shape {t.shape}, expected {ref} except in dimension {d}")
    dt = _result_type(*tensors)
    return _run(Op.CAT, [cast(t, dt) for t in tensors], dt, axis=d)


def stack(tensors, dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack() needs at least one tensor")
    if len({t.shape for t in tensors}) != 1:
        raise ValueError(f"stack expects tensors of equal shape, got {[t.shape for t in tensors]}")
    d = normalize_dim(dim, tensors[0].ndim + 1)
    return cat([t.unsqueeze(d) for t in tensors], d)


def split(x: Tensor, split_size_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    d = normalize_dim(dim, x.ndim)
    n = x.shape[d]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0:
            raise ValueError("split_size must be positive")
        sizes = [_py_min(step, n - i) for i in range(0, n, step)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if _py_sum(sizes) != n:
            raise ValueError(f"split sections {sizes} do not add up to dimension {dim} of size {n}")
    out, start = [], 0
    for s in sizes:
        out.append(x.narrow(d, start, s))
        start += s
    return tuple(out)


def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    n = x.shape[normalize_dim(dim, x.ndim)]
    return split(x, _py_max(1, -(-n // chunks)), dim)


def index_select(x: Tensor, dim: int, index) -> Tensor:
    if isinstance(index, Tensor):
        if index.dtype.kind not in "iu":
            raise TypeError(f"index tensors must be integer, got {index.dtype}")
        idx = cast(index, D.int64)
    else:
        idx = _from_raw(np.asarray(index, np.int64), D.int64, np.shape(index), x.device)
    if idx.ndim != 1:
        raise ValueError(f"index_select needs a 1-D index, got shape {idx.shape}")
    return _run(Op.INDEX_SELECT, [x, idx], x.dtype, axis=normalize_dim(dim, x.ndim))


def index_copy_(x: Tensor, dim: int, index, source: Tensor) -> Tensor:
    """In place, torch's Tensor.index_copy_: x's rows `index` along `dim` = source's rows, in
    order (source has x's shape with len(index) at `dim`). Returns x."""
    axis = normalize_dim(dim, x.ndim)
    if isinstance(index, Tensor):
        if index.dtype.kind not in "iu":
            raise TypeError(f"index tensors must be integer, got {index.dtype}")
        idx = cast(index, D.int64)
    else:
        idx = _from_raw(np.asarray(index, np.int64), D.int64, np.shape(index), x.device)
    if idx.ndim > 1:
        raise ValueError(f"index_copy_ needs a 1-D index, got shape {idx.shape}")
    want = x.shape[:axis] + (idx.numel(),) + x.shape[axis + 1:]
    if tuple(source.shape) != want:
        raise ValueError(f"index_copy_: source of shape {tuple(source.shape)} does not fit {idx.numel()} "
                         f"rows of dim {axis} of a {tuple(x.shape)} tensor (expected {want})")
    if builtins.any(n > 1 and s == 0 for n, s in zip(x.shape, x.stride())):
        raise ValueError("index_copy_ writes in place: the destination cannot be an expanded (stride-0) view")
    src = cast(source, x.dtype)
    for t in (idx, src):
        if t._backend is not x._backend:
            raise BackendError(f"index_copy_: tensors are on different devices ({x.device} and {t.device}); "
                               f"move them with .to(device)")
    x._backend.run(Op.INDEX_COPY, [x, idx.reshape(-1), src], x.dtype, {"axis": axis})
    return x


# --- constructors -----------------------------------------------------------------------
def full(size, fill_value, *, dtype=None, device=None) -> Tensor:
    size = tuple(size) if isinstance(size, (tuple, list)) else (size,)
    dt = D.as_dtype(dtype) if dtype is not None else (
        D.bool_ if isinstance(fill_value, bool) else D.int64 if isinstance(fill_value, int) else D.float32)
    raw = D.cast_numpy(np.full(size, fill_value, np.float64 if isinstance(fill_value, float) else None),
                       D.float64 if isinstance(fill_value, float) else D.as_dtype(np.array(fill_value).dtype), dt)
    return _from_raw(np.ascontiguousarray(raw), dt, size, device)


def zeros(*size, dtype=None, device=None) -> Tensor:
    return full(size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size, 0.0 if dtype is None
                else 0, dtype=dtype, device=device)


def ones(*size, dtype=None, device=None) -> Tensor:
    return full(size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size, 1.0 if dtype is None
                else 1, dtype=dtype, device=device)


def zeros_like(x: Tensor, *, dtype=None) -> Tensor:
    return full(x.shape, 0, dtype=dtype or x.dtype, device=x.device)


def ones_like(x: Tensor, *, dtype=None) -> Tensor:
    return full(x.shape, 1, dtype=dtype or x.dtype, device=x.device)


def full_like(x: Tensor, fill_value, *, dtype=None) -> Tensor:
    return full(x.shape, fill_value, dtype=dtype or x.dtype, device=x.device)


def arange(start, end=None, step=1, *, dtype=None, device=None) -> Tensor:
    if end is None:
        start, end = 0, start
    a = np.arange(start, end, step)
    dt = D.as_dtype(dtype) if dtype is not None else (D.int64 if a.dtype.kind in "iu" else D.float32)
    return _from_raw(np.ascontiguousarray(D.cast_numpy(a, D.as_dtype(a.dtype), dt)), dt, a.shape, device)


def _triangle(x: Tensor, diagonal: int, lower: bool) -> Tensor:
    rows, cols = x.shape[-2:]
    r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]
    keep = (c - r <= diagonal) if lower else (c - r >= diagonal)
    mask = _from_raw(np.ascontiguousarray(keep), D.bool_, keep.shape, x.device)
    return where(mask, x, _scalar(0, x.dtype, x))


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(x, diagonal, True)


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(x, diagonal, False)


# Tensor methods: x.name(...) == name(x, ...)
METHODS = {name: globals()[name] for name in (
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin",
    "cos", "tanh", "erf", "reciprocal", "floor", "ceil", "sigmoid", "relu", "clamp", "clip", "masked_fill", "sum",
    "mean", "var", "max", "min", "amax", "amin", "argmax", "argmin", "all", "any", "topk", "softmax",
    "log_softmax", "matmul", "split", "chunk", "index_select", "index_copy_", "tril", "triu", "logical_not", "logical_and",
    "logical_or", "bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor", "eq", "ne", "lt", "le", "gt", "ge")}
METHODS["where"] = lambda x, condition, other: where(condition, x, other)

__all__ = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
           "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "logical_and", "logical_or",
           "logical_not", "where", "masked_fill", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf",
           "reciprocal", "neg", "abs", "floor", "ceil", "sigmoid", "relu", "clamp", "clip", "sum", "mean",
           "var", "max", "min", "amax", "amin", "argmax", "argmin", "all", "any", "topk", "softmax",
           "log_softmax", "matmul", "cat", "stack", "split", "chunk", "index_select", "full", "zeros", "ones",
           "zeros_like", "ones_like", "full_like", "arange", "tril", "triu", "broadcast_shapes", "cast",
           "MinMax", "TopK"]
