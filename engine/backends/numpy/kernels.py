"""Kernel table of the NumPy backend: one entry per primitive op (engine.ops.Op)."""
from __future__ import annotations

import math

import numpy as np

from ... import dtypes
from ...ops import Op
from ...selection import select_token
from .quantized import KERNELS as QUANTIZED

_SQRT_PI = math.sqrt(math.pi)


# erf's Maclaurin series x * sum c_n x^2n, c_n = 2/sqrt(pi) (-1)^n / (n! (2n + 1)), highest first (Horner)
_ERF_SERIES = [2 / _SQRT_PI * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(22)][::-1]


def erf(x: np.ndarray) -> np.ndarray:
    """erf without SciPy, accurate to ~1e-9 in float64.

    |x| < 2: Maclaurin series (22 terms, Horner, in place); |x| >= 2: the continued fraction of
    erfc (20 levels), evaluated only where needed. In float64, rounded to the input's type.
    """
    x64 = np.asarray(x, np.float64)
    ax = np.abs(x64)
    small = np.minimum(ax, 2.0)
    x2 = small * small
    series = np.full_like(x2, _ERF_SERIES[0])
    for c in _ERF_SERIES[1:]:
        series *= x2
        series += c
    series *= small
    far = ax >= 2.0
    if far.any():
        big = ax[far]
        frac = big.copy()
        for k in range(20, 0, -1):
            frac = big + (k / 2) / frac
        series[far] = 1 - np.exp(-big * big) / _SQRT_PI / frac
    return np.copysign(series, x64).astype(x.dtype)


def _topk(a, *, dtype, axis, k, largest, sorted):  # noqa: A002 - torch's name
    key = -a if largest and a.dtype != np.bool_ else a
    if largest and a.dtype == np.bool_:
        key = ~a
    n = a.shape[axis]
    if k < n:
        part = np.argpartition(key, k - 1, axis=axis)
        idx = np.take(part, np.arange(k), axis=axis)
    else:
        idx = np.broadcast_to(np.arange(n).reshape([-1 if d == axis % a.ndim else 1 for d in range(a.ndim)]),
                              a.shape).copy()
    if sorted:
        order = np.argsort(np.take_along_axis(key, idx, axis=axis), axis=axis, kind="stable")
        idx = np.take_along_axis(idx, order, axis=axis)
    return np.take_along_axis(a, idx, axis=axis), idx.astype(np.int64)


def _pad(a, *, dtype, pads, value):
    fill = dtypes.cast_numpy(np.array(value, np.float64 if dtype.is_floating_point else np.int64),
                        dtypes.float64 if dtype.is_floating_point else dtypes.int64, dtype)
    return np.pad(a, pads, mode="constant", constant_values=fill)


def _index_select(a, index, *, dtype, axis):
    n = a.shape[axis]
    if index.size and (index.min() < -n or index.max() >= n):
        bad = index[(index < -n) | (index >= n)][0]
        raise IndexError(f"index {int(bad)} is out of range for dimension {axis} of size {n}")
    return np.take(a, index.astype(np.intp, copy=False), axis=axis)   # intp is 32-bit on wasm32


def _index_copy(dest, index, source, *, dtype, axis):
    """In place (engine.ops INDEX_COPY): dest's rows `index` along `axis` = source's."""
    n = dest.shape[axis]
    if index.size and (index.min() < 0 or index.max() >= n):
        bad = index[(index < 0) | (index >= n)][0]
        raise IndexError(f"index {int(bad)} is out of range for dimension {axis} of size {n}")
    where = (slice(None),) * axis + (index.astype(np.intp, copy=False),)
    dest[where] = source
    return None


def _conv2d(x, w, *, dtype, stride, dilation, groups):
    """x (N, C, H, W) already padded; w (O, C/groups, kh, kw)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    sh, sw = stride
    dh, dw = dilation
    ho = (h - dh * (kh - 1) - 1) // sh + 1
    wo = (wd - dw * (kw - 1) - 1) // sw + 1
    if groups == c and cg == 1 and o == c:       # depthwise: kh*kw shifted multiply-adds
        if ho * wo > 8 * c and sh == sw:
            return _depthwise_planes(x, w, sh, dilation, ho, wo)
        return _depthwise_channels_last(x, w, stride, dilation, ho, wo)
    if kh == kw == 1 and (sh, sw) == (1, 1) and groups == 1 and ho * wo >= 256:
        # pointwise on large maps: one GEMM per image, (O, C) @ (C, H*W), lands in (N, O, H, W)
        # order with no im2col copy and no output transpose
        return np.matmul(w.reshape(o, c), x.reshape(n, c, h * wd)).reshape(n, o, ho, wo)
    # im2col with the batch inside the columns: one strided copy per kernel tap, then
    # one large GEMM per group, (O/g, K) @ (K, N*Ho*Wo), which BLAS runs far better
    # than N small ones
    cols = np.empty((groups, cg, kh, kw, n, ho, wo), x.dtype)
    xg = x.reshape(n, groups, cg, h, wd).transpose(1, 2, 0, 3, 4)          # (g, C/g, N, H, W)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xg[..., i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw]
    out = np.matmul(w.reshape(groups, o // groups, cg * kh * kw),
                    cols.reshape(groups, cg * kh * kw, n * ho * wo))     # (g, O/g, N*Ho*Wo)
    return out.reshape(o, n, ho, wo).transpose(1, 0, 2, 3)


# Depthwise convolution is memory-bound: each tap is one multiply and one add over the
# output. NumPy's cost is per inner loop, so the two layouts below keep inner loops long:
# many channels on small maps go channels-last (runs of Wo*C values); few channels on
# large maps go plane by plane, each (n, c) plane flattened so that a tap is one shifted
# 1-D slice, in row blocks that stay in cache.
_DEPTHWISE_BLOCK = 1 << 14          # elements per row block of the per-plane path (64 KiB of float32)


def _depthwise_channels_last(x, w, stride, dilation, ho, wo):
    n, c = x.shape[:2]
    kh, kw = w.shape[2:]
    (sh, sw), (dh, dw) = stride, dilation
    xt = np.ascontiguousarray(x.transpose(0, 2, 3, 1))                     # (N, H, W, C)
    wt = np.ascontiguousarray(w[:, 0].transpose(1, 2, 0))                 # (kh, kw, C)
    out = np.empty((n, ho, wo, c), np.result_type(x, w))
    tmp = np.empty_like(out)
    for i in range(kh):
        for j in range(kw):
            patch = xt[:, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw]
            if i == j == 0:
                np.multiply(patch, wt[i, j], out=out)
            else:
                out += np.multiply(patch, wt[i, j], out=tmp)
    return out.transpose(0, 3, 1, 2)


def _depthwise_planes(x, w, s, dilation, ho, wo):
    """Output (oy, ox) is stored at q = oy * W + ox of a plane with the input's row pitch
    W, so tap (i, j) reads input s * q + i * dh * W + j * dw: one strided slice per tap.
    Positions with ox >= wo are computed and dropped (s x more work on each row, still
    cheaper than gathering the stride phases first)."""
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    dh, dw = dilation
    planes = np.ascontiguousarray(x).reshape(n * c, h * wd)
    length = (ho - 1) * wd + wo                                            # q of the last output, + 1
    taps = np.tile(w.reshape(c, kh * kw), (n, 1))                         # (N*C, kh*kw)
    out = np.empty((n * c, ho * wd), np.result_type(x, w))
    rows = max(1, _DEPTHWISE_BLOCK // length)
    tmp = np.empty((min(rows, n * c), length), out.dtype)
    for r0 in range(0, n * c, rows):
        r1 = min(r0 + rows, n * c)
        acc, scratch = out[r0:r1, :length], tmp[:r1 - r0]
        for i in range(kh):
            for j in range(kw):
                start = i * dh * wd + j * dw
                patch = planes[r0:r1, start: start + s * (length - 1) + 1: s]
                weight = taps[r0:r1, i * kw + j, None]
                if i == j == 0:
                    np.multiply(patch, weight, out=acc)
                else:
                    acc += np.multiply(patch, weight, out=scratch)
    return out.reshape(n, c, ho, wd)[:, :, :, :wo]


def _small_window_reduce(ufunc, fallback):
    """Reductions over a few trailing axes (pooling windows): fold slices with the
    ufunc, which beats NumPy's reduce over a strided 6-D view by an order of magnitude."""
    def kernel(a, *, dtype, axes, keepdim):
        tail = a.shape[a.ndim - len(axes):]
        if keepdim or len(axes) < 2 or axes != tuple(range(a.ndim - len(axes), a.ndim)) or \
                math.prod(tail) > 64 or math.prod(tail) == 0 or a.ndim == len(axes):
            return fallback(a, axis=axes, keepdims=keepdim)
        out = None
        for idx in np.ndindex(*tail):
            part = a[(Ellipsis,) + idx]
            out = part.copy() if out is None else ufunc(out, part, out=out)
        return out
    return kernel


_sum_windows = _small_window_reduce(np.add, np.sum)


def _sum_cast(a, *, dtype, axes, keepdim):
    return np.sum(a, axis=axes, keepdims=keepdim, dtype=dtype.storage)


def _arg(fn):
    return lambda a, *, dtype, axis, keepdim: fn(a, axis=axis, keepdims=keepdim)


def _unary(fn):
    kernel = lambda a, *, dtype: fn(a)                     # noqa: E731
    kernel.ufunc = fn if isinstance(fn, np.ufunc) else None   # engine.graph calls it with out=
    return kernel


def _binary(fn):
    kernel = lambda a, b, *, dtype: fn(a, b)               # noqa: E731
    kernel.ufunc = fn if isinstance(fn, np.ufunc) else None
    return kernel


KERNELS = {
    Op.NEG: _unary(np.negative), Op.ABS: _unary(np.abs), Op.EXP: _unary(np.exp), Op.LOG: _unary(np.log),
    Op.SQRT: _unary(np.sqrt), Op.SIN: _unary(np.sin), Op.COS: _unary(np.cos), Op.TANH: _unary(np.tanh),
    Op.ERF: _unary(erf), Op.RECIPROCAL: _unary(np.reciprocal), Op.FLOOR: _unary(np.floor),
    Op.CEIL: _unary(np.ceil), Op.LOGICAL_NOT: _unary(np.logical_not),
    Op.CAST: lambda a, *, dtype, src: dtypes.cast_numpy(a, src, dtype),
    Op.CONTIGUOUS: _unary(np.ascontiguousarray),
    Op.ADD: _binary(np.add), Op.SUB: _binary(np.subtract), Op.MUL: _binary(np.multiply),
    Op.DIV: _binary(np.true_divide), Op.POW: _binary(np.power),
    Op.MAXIMUM: _binary(np.maximum), Op.MINIMUM: _binary(np.minimum),
    Op.EQ: _binary(np.equal), Op.NE: _binary(np.not_equal), Op.LT: _binary(np.less),
    Op.LE: _binary(np.less_equal), Op.GT: _binary(np.greater), Op.GE: _binary(np.greater_equal),
    Op.AND: _binary(np.bitwise_and), Op.OR: _binary(np.bitwise_or), Op.XOR: _binary(np.bitwise_xor),
    Op.WHERE: lambda c, a, b, *, dtype: np.where(c, a, b),
    Op.SUM: lambda a, *, dtype, axes, keepdim: (_sum_windows if a.dtype == dtype.storage else _sum_cast)(
        a, dtype=dtype, axes=axes, keepdim=keepdim),
    Op.MAX: _small_window_reduce(np.maximum, np.max), Op.MIN: _small_window_reduce(np.minimum, np.min),
    Op.ARGMAX: _arg(np.argmax), Op.ARGMIN: _arg(np.argmin),
    Op.TOPK: _topk,
    Op.CAT: lambda *arrays, dtype, axis: np.concatenate(arrays, axis=axis),
    Op.PAD: _pad,
    Op.INDEX_SELECT: _index_select,
    Op.INDEX_COPY: _index_copy,
    Op.MATMUL: lambda a, b, *, dtype: np.matmul(a, b),
    Op.CONV2D: _conv2d,
}

def _mul_add(x, a, b):
    """x * a + b (broadcasting) with one output allocation: batch norm at inference."""
    out = np.multiply(x, a)
    out += b
    return out


def _linear(x, weight, *bias):
    """x (..., K) @ weight (N, K).T + bias: the composite's own kernels (one MATMUL over all rows,
    then ADD) in one call, so the result is the composite's bit for bit, without its bookkeeping."""
    rows = x if x.ndim == 2 else x.reshape(-1, x.shape[-1])
    out = np.matmul(rows, weight.T)
    if bias:
        np.add(out, bias[0], out=out)
    return out if x.ndim == 2 else out.reshape(x.shape[:-1] + weight.shape[:1])


# Fused kernels for composites (optional speed-ups with the composite's exact semantics).
FUSED: dict = {
    **QUANTIZED,                        # every backend has these (engine.ops)
    "mul_add": _mul_add,
    "linear": _linear,
    # one pass instead of maximum then minimum; NaN propagates as through those
    "hardtanh": lambda x, *, min_val, max_val: np.clip(x, min_val, max_val),
    "select_token": select_token,      # the reference (engine.selection)
}
