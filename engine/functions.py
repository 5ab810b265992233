"""Tensor-level functions with torch's names (engine.add, engine.sum, ...).

Each one does the bookkeeping (type promotion, broadcasting, dims) and hands a
primitive op from engine.ops to the tensor's backend. Composites are written
once here from primitives.

Importing this module also gives engine.Tensor its computing methods: the operators
(`a + b` is `add(a, b)`), the methods named in METHODS (`x.sum(1)` is `sum(x, 1)`) and the
conversions (`to`, `float`, `contiguous`, ...), set on the class at the end of this file.

The common elementwise case (two tensors of one dtype and one shape, or a tensor and a Python
scalar that keeps its dtype) skips the general promotion and broadcasting: it is what most ops
of a model are, and at a few microseconds an op the bookkeeping is most of their cost.
"""
from __future__ import annotations

import builtins
import math
from typing import NamedTuple

import numpy as np

from . import dtypes
from .device import get_backend
from .errors import BackendError
from .layout import Layout, normalize_dim
from .ops import Op
from .tensor import Tensor, from_raw, parse_to_args

_py_max, _py_min, _py_sum, _py_abs = builtins.max, builtins.min, builtins.sum, builtins.abs


# --- dispatch -------------------------------------------------------------------------
def run_op(op: Op, inputs, dtype, **params):
    """Run primitive `op` on `inputs` (Tensors already prepared as engine.ops' contract says)
    on their backend; the output Tensor(s) of `dtype` (a tuple of dtypes: one per output)."""
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


def cast(x: Tensor, dtype: dtypes.DType) -> Tensor:
    return x if x.dtype is dtype else run_op(Op.CAST, [x], dtype, src=x.dtype)


def contiguous(x: Tensor) -> Tensor:
    return run_op(Op.CONTIGUOUS, [x], x.dtype)


def _compute(x: Tensor) -> Tensor:
    """Half types are storage only: widen to float32 before arithmetic."""
    return cast(x, x.dtype.compute)


def to_floating(x: Tensor) -> Tensor:
    return cast(x, x.dtype.compute if x.dtype.is_floating_point else dtypes.float32)


# 0-d constants made from Python scalars, by (type, value, dtype, backend): a model adds the same
# 1.0 or scales by the same 0.125 at every call. Only where storage is host memory (numpy, simd),
# never float zeros or NaN (0.0 == -0.0 and NaN != NaN would make a key lie), at most 256.
_SCALARS: dict = {}


def _filled(shape: tuple, value, dtype: dtypes.DType) -> np.ndarray:
    """A NumPy array of `shape` holding the Python scalar `value` in `dtype`'s storage, cast as the
    engine casts (a float through float64)."""
    is_float = isinstance(value, float)
    return dtypes.cast_numpy(np.full(shape, value, np.float64 if is_float else None),
                             dtypes.float64 if is_float else dtypes.as_dtype(np.array(value).dtype), dtype)


def _scalar(value, dtype: dtypes.DType, like: Tensor) -> Tensor:
    kind, backend = type(value), like._backend
    key = None
    if (kind is int or kind is bool or (kind is float and value == value and value != 0.0)) and \
            getattr(backend, "storage", None) == "numpy":
        key = (kind, value, dtype, backend)
        cached = _SCALARS.get(key)
        if cached is not None:
            return cached
    out = Tensor(backend.copy_in(np.array(_filled((), value, dtype), copy=True)), Layout(()), dtype, backend)
    if key is not None:
        if len(_SCALARS) >= 256:
            _SCALARS.clear()
        _SCALARS[key] = out
    return out


def _scalar_as(value, dtype: dtypes.DType, like: Tensor) -> Tensor:
    """`value` as a `dtype` tensor of `like`'s shape (a stride-0 view of one element)."""
    s = _scalar(value, dtype, like)
    shape = like._layout.shape
    return s if not shape else Tensor(s._buf, Layout(shape, (0,) * len(shape), s._layout.offset), dtype, s._backend)


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    ndim = _py_max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        sizes = {s[i - ndim + len(s)] for s in shapes if i - ndim + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _result_type(*xs) -> dtypes.DType:
    """torch's rule: a higher kind (bool < int < float) wins; within a kind, tensors with
    dims decide over 0-d tensors, which decide over Python scalars."""
    rank = {"b": 0, "u": 1, "i": 1, "f": 2}
    dt = None
    for group in ([x.dtype for x in xs if isinstance(x, Tensor) and x.ndim > 0],
                  [x.dtype for x in xs if isinstance(x, Tensor) and x.ndim == 0]):
        if group:
            g = group[0]
            for d in group[1:]:
                g = dtypes.promote_types(g, d)
            if dt is None or rank[g.kind] > rank[dt.kind]:
                dt = g
    for s in xs:
        if not isinstance(s, Tensor):
            if not isinstance(s, (bool, int, float, np.generic)):
                raise TypeError(f"unsupported operand {s!r}")
            dt = dtypes.result_type_scalar(dt, s.item() if isinstance(s, np.generic) else s)
    return dt


def _prepare(xs, dtype: dtypes.DType):
    """Cast all operands to `dtype` and expand them to one shape."""
    like = next(x for x in xs if isinstance(x, Tensor))
    ts = [cast(x, dtype) if isinstance(x, Tensor) else _scalar(x, dtype, like) for x in xs]
    shape = broadcast_shapes(*(t.shape for t in ts))
    return [t if t.shape == shape else t.expand(shape) for t in ts]


def _binary(op: Op, a, b, *, compute=None, out=None):
    kind_a, kind_b = type(a), type(b)
    if kind_a is Tensor:                              # fast paths: nothing to cast or broadcast
        dt = a.dtype
        if kind_b is Tensor:
            if dt is b.dtype and a._backend is b._backend and a._layout.shape == b._layout.shape:
                ct = compute(dt) if compute else dt.compute
                if ct is dt:
                    return _run_elementwise(op, a, b, out or dt)
        elif kind_b is float or kind_b is int or kind_b is bool:
            ct = dtypes.result_type_scalar(dt, b)
            ct = compute(ct) if compute else ct.compute
            if ct is dt:
                return _run_elementwise(op, a, _scalar_as(b, dt, a), out or dt)
    elif kind_b is Tensor and (kind_a is float or kind_a is int or kind_a is bool):
        dt = b.dtype
        ct = dtypes.result_type_scalar(dt, a)
        ct = compute(ct) if compute else ct.compute
        if ct is dt:
            return _run_elementwise(op, _scalar_as(a, dt, b), b, out or dt)
    dt = _result_type(a, b)
    ct = compute(dt) if compute else dt.compute
    return run_op(op, _prepare([a, b], ct), out or ct)


def _run_elementwise(op: Op, a: Tensor, b: Tensor, dtype: dtypes.DType) -> Tensor:
    """run_op for two operands already of one shape, dtype and backend."""
    backend = a._backend
    buf, shape = backend.run(op, [a, b], dtype, {})[0]
    return Tensor(buf, Layout(shape), dtype, backend)


def _float_result(dt):
    return dt.compute if dt.is_floating_point else dtypes.float32


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
    return lambda a, b: _binary(op, a, b, out=dtypes.bool_)


eq, ne, lt, le, gt, ge = (_compare(o) for o in (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE))


def _bitwise(op):
    def fn(a, b):
        dt = _result_type(a, b)
        if dt.is_floating_point:
            raise TypeError(f"{op.name.lower()} is only defined for bool and integer tensors, got {dt}")
        return run_op(op, _prepare([a, b], dt), dt)
    return fn


bitwise_and, bitwise_or, bitwise_xor = _bitwise(Op.AND), _bitwise(Op.OR), _bitwise(Op.XOR)
logical_and = lambda a, b: bitwise_and(cast(a, dtypes.bool_), cast(b, dtypes.bool_))  # noqa: E731
logical_or = lambda a, b: bitwise_or(cast(a, dtypes.bool_), cast(b, dtypes.bool_))  # noqa: E731


def logical_not(x: Tensor) -> Tensor:
    return run_op(Op.LOGICAL_NOT, [x], dtypes.bool_)


def bitwise_not(x: Tensor) -> Tensor:
    if x.dtype is dtypes.bool_:
        return logical_not(x)
    if x.dtype.kind == "f":
        raise TypeError("bitwise_not is only defined for bool and integer tensors")
    return bitwise_xor(x, _scalar(-1 if x.dtype.kind == "i" else 255, x.dtype, x))


def where(condition, input, other):  # noqa: A002 - torch's names
    dt = _result_type(input, other).compute
    like = next(x for x in (condition, input, other) if isinstance(x, Tensor))
    cond = cast(condition, dtypes.bool_) if isinstance(condition, Tensor) else \
        _scalar(bool(condition), dtypes.bool_, like)
    a, b = (cast(x, dt) if isinstance(x, Tensor) else _scalar(x, dt, like) for x in (input, other))
    shape = broadcast_shapes(cond.shape, a.shape, b.shape)
    return run_op(Op.WHERE, [t if t.shape == shape else t.expand(shape) for t in (cond, a, b)], dt)


def masked_fill(x: Tensor, mask: Tensor, value) -> Tensor:
    return where(mask, value, x)


# --- unary ------------------------------------------------------------------------------
def _unary_float(op):
    return lambda x: run_op(op, [to_floating(x)], _float_result(x.dtype))


exp, log, sqrt, sin, cos, tanh, erf, reciprocal = (
    _unary_float(o) for o in (Op.EXP, Op.LOG, Op.SQRT, Op.SIN, Op.COS, Op.TANH, Op.ERF, Op.RECIPROCAL))


def neg(x: Tensor) -> Tensor:
    return run_op(Op.NEG, [_compute(x)], x.dtype.compute)


def abs(x: Tensor) -> Tensor:  # noqa: A001 - torch's name
    return run_op(Op.ABS, [_compute(x)], x.dtype.compute)


def floor(x: Tensor) -> Tensor:
    return x if not x.dtype.is_floating_point else run_op(Op.FLOOR, [_compute(x)], x.dtype.compute)


def ceil(x: Tensor) -> Tensor:
    return x if not x.dtype.is_floating_point else run_op(Op.CEIL, [_compute(x)], x.dtype.compute)


def rsqrt(x: Tensor) -> Tensor:
    return reciprocal(sqrt(x))


def sigmoid(x: Tensor) -> Tensor:
    return reciprocal(add(exp(neg(to_floating(x))), 1.0))


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
    out = dtypes.as_dtype(dtype) if dtype is not None else (
        x.dtype.compute if x.dtype.is_floating_point else dtypes.int64)
    return run_op(Op.SUM, [cast(x, out)], out, axes=_axes(dim, x.ndim), keepdim=keepdim)


def mean(x: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    x = x if dtype is None else cast(x, dtypes.as_dtype(dtype))
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
            return run_op(op, [xc], xc.dtype, axes=tuple(range(x.ndim)), keepdim=False)
        d = normalize_dim(dim, x.ndim)
        values = run_op(op, [xc], xc.dtype, axes=(d,), keepdim=keepdim)
        return MinMax(values, run_op(arg_op, [xc], dtypes.int64, axis=d, keepdim=keepdim))
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
    return run_op(Op.MAX, [_compute(x)], x.dtype.compute, axes=_axes(dim, x.ndim), keepdim=keepdim)


def amin(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    return run_op(Op.MIN, [_compute(x)], x.dtype.compute, axes=_axes(dim, x.ndim), keepdim=keepdim)


def _argext(op: Op):
    def fn(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
        if dim is None:
            return run_op(op, [_compute(x).reshape(-1)], dtypes.int64, axis=0, keepdim=False)
        return run_op(op, [_compute(x)], dtypes.int64, axis=normalize_dim(dim, x.ndim), keepdim=keepdim)
    return fn


argmax, argmin = _argext(Op.ARGMAX), _argext(Op.ARGMIN)


def all(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001
    return amin(cast(x, dtypes.bool_), dim, keepdim)


def any(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001
    return amax(cast(x, dtypes.bool_), dim, keepdim)


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> TopK:  # noqa: A002
    d = normalize_dim(dim, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if not 0 <= k <= n:
        raise ValueError(f"topk: k={k} is out of range for dimension {dim} of size {n}")
    xc = _compute(x)
    return TopK(*run_op(Op.TOPK, [xc], (xc.dtype, dtypes.int64), axis=d, k=k, largest=largest, sorted=sorted))


def softmax(x: Tensor, dim: int, dtype=None) -> Tensor:
    x = to_floating(x if dtype is None else cast(x, dtypes.as_dtype(dtype)))
    if "softmax" in x._backend.fused:
        return run_fused("softmax", [x], dim=normalize_dim(dim, x.ndim))
    e = exp(sub(x, amax(x, dim, keepdim=True)))
    return div(e, sum(e, dim, keepdim=True))


def log_softmax(x: Tensor, dim: int, dtype=None) -> Tensor:
    x = to_floating(x if dtype is None else cast(x, dtypes.as_dtype(dtype)))
    shifted = sub(x, amax(x, dim, keepdim=True))
    return sub(shifted, log(sum(exp(shifted), dim, keepdim=True)))


def run_fused(name: str, tensors, **params) -> Tensor:
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
        out = run_op(Op.MATMUL, [a2.reshape(-1, a2.shape[-1]), b2], dt).reshape(a2.shape[:-1] + b2.shape[-1:])
    else:
        batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        a3, b3 = a2.expand(batch + a2.shape[-2:]), b2.expand(batch + b2.shape[-2:])
        out = run_op(Op.MATMUL, [a3, b3], dt)
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
    return run_op(Op.CAT, [cast(t, dt) for t in tensors], dt, axis=d)


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
        idx = cast(index, dtypes.int64)
    else:
        idx = from_raw(np.asarray(index, np.int64), dtypes.int64, np.shape(index), x.device)
    if idx.ndim != 1:
        raise ValueError(f"index_select needs a 1-D index, got shape {idx.shape}")
    return run_op(Op.INDEX_SELECT, [x, idx], x.dtype, axis=normalize_dim(dim, x.ndim))


def index_copy_(x: Tensor, dim: int, index, source: Tensor) -> Tensor:
    """In place, torch's Tensor.index_copy_: x's rows `index` along `dim` = source's rows, in
    order (source has x's shape with len(index) at `dim`). Returns x."""
    axis = normalize_dim(dim, x.ndim)
    if isinstance(index, Tensor):
        if index.dtype.kind not in "iu":
            raise TypeError(f"index tensors must be integer, got {index.dtype}")
        idx = cast(index, dtypes.int64)
    else:
        idx = from_raw(np.asarray(index, np.int64), dtypes.int64, np.shape(index), x.device)
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
    dt = dtypes.as_dtype(dtype) if dtype is not None else (
        dtypes.bool_ if isinstance(fill_value, bool) else
        dtypes.int64 if isinstance(fill_value, int) else dtypes.float32)
    return from_raw(np.ascontiguousarray(_filled(size, fill_value, dt)), dt, size, device)


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
    dt = dtypes.as_dtype(dtype) if dtype is not None else (dtypes.int64 if a.dtype.kind in "iu" else dtypes.float32)
    return from_raw(np.ascontiguousarray(dtypes.cast_numpy(a, dtypes.as_dtype(a.dtype), dt)), dt, a.shape, device)


def _triangle(x: Tensor, diagonal: int, lower: bool) -> Tensor:
    rows, cols = x.shape[-2:]
    r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]
    keep = (c - r <= diagonal) if lower else (c - r >= diagonal)
    mask = from_raw(np.ascontiguousarray(keep), dtypes.bool_, keep.shape, x.device)
    return where(mask, x, _scalar(0, x.dtype, x))


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(x, diagonal, True)


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(x, diagonal, False)


# --- Tensor's computing methods ---------------------------------------------------------
def _to(x: Tensor, *args, dtype=None, device=None) -> Tensor:
    """to(dtype), to(device) or both, like torch."""
    dtype, device = parse_to_args(args, dtype, device)
    out = x
    target = None if device is None else get_backend(device)
    if target is not None and target is not x._backend:
        if getattr(target, "storage", None) == getattr(x._backend, "storage", False):
            out = Tensor(x._buf, x._layout, x.dtype, target)      # same memory, no copy
        else:
            out = from_raw(x.raw_numpy(), x.dtype, x.shape, target.name)
    if dtype is not None and dtypes.as_dtype(dtype) is not out.dtype:
        out = cast(out, dtypes.as_dtype(dtype))
    return out


def _contiguous_method(x: Tensor) -> Tensor:
    """torch's Tensor.contiguous(): x itself when it already is."""
    return x if x._layout.is_contiguous else contiguous(x)


CONVERSIONS = {
    "to": _to, "contiguous": _contiguous_method, "clone": contiguous,
    "float": lambda x: _to(x, dtypes.float32), "half": lambda x: _to(x, dtypes.float16),
    "bfloat16": lambda x: _to(x, dtypes.bfloat16), "long": lambda x: _to(x, dtypes.int64),
    "int": lambda x: _to(x, dtypes.int32), "bool": lambda x: _to(x, dtypes.bool_)}

OPERATORS = {
    "__add__": add, "__radd__": lambda x, o: add(o, x), "__sub__": sub, "__rsub__": lambda x, o: sub(o, x),
    "__mul__": mul, "__rmul__": lambda x, o: mul(o, x), "__truediv__": div, "__rtruediv__": lambda x, o: div(o, x),
    "__pow__": pow, "__rpow__": lambda x, o: pow(o, x), "__matmul__": matmul,
    "__rmatmul__": lambda x, o: matmul(o, x), "__neg__": neg, "__abs__": abs,
    "__eq__": eq, "__ne__": ne, "__lt__": lt, "__le__": le, "__gt__": gt, "__ge__": ge,
    "__and__": bitwise_and, "__or__": bitwise_or, "__xor__": bitwise_xor, "__invert__": bitwise_not}

# Tensor methods: x.name(...) == name(x, ...)
METHODS = {name: globals()[name] for name in (
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin",
    "cos", "tanh", "erf", "reciprocal", "floor", "ceil", "sigmoid", "relu", "clamp", "clip", "masked_fill", "sum",
    "mean", "var", "max", "min", "amax", "amin", "argmax", "argmin", "all", "any", "topk", "softmax",
    "log_softmax", "matmul", "split", "chunk", "index_select", "index_copy_", "tril", "triu", "logical_not",
    "logical_and", "logical_or", "bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor", "eq", "ne", "lt", "le", "gt", "ge")}
METHODS["where"] = lambda x, condition, other: where(condition, x, other)


def _attach_methods() -> None:
    for table in (CONVERSIONS, OPERATORS, METHODS):
        for name, fn in table.items():
            if name in vars(Tensor):
                raise AssertionError(f"Tensor.{name} is defined twice (engine.tensor and engine.functions)")
            setattr(Tensor, name, fn)


_attach_methods()

__all__ = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
           "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "logical_and", "logical_or",
           "logical_not", "where", "masked_fill", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf",
           "reciprocal", "neg", "abs", "floor", "ceil", "sigmoid", "relu", "clamp", "clip", "sum", "mean",
           "var", "max", "min", "amax", "amin", "argmax", "argmin", "all", "any", "topk", "softmax",
           "log_softmax", "matmul", "cat", "stack", "split", "chunk", "index_select", "full", "zeros", "ones",
           "zeros_like", "ones_like", "full_like", "arange", "tril", "triu", "broadcast_shapes", "cast",
           "MinMax", "TopK"]
