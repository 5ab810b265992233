"""Neural-network functions with torch.nn.functional's names and signatures.

All are composites of the primitives in engine.ops (via engine.functions); a
backend may register a fused kernel for speed, never for different results.
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from .. import dtypes
from ..functions import *  # noqa: F401,F403  (F.cat, F.softmax, ... as in one namespace)
from ..functions import (add, cast, cat, div, erf, index_select, masked_fill, matmul, maximum, mean, minimum, mul,
                         neg, rsqrt, run_fused, run_op, sigmoid, softmax, sqrt, sub, sum, tanh, to_floating)
from ..rows import RowTable
from ..ops import Op
from ..quantized import QuantizedTensor
from ..tensor import Tensor, from_raw

# the star import above shadows these builtins with tensor functions
_all, _any, _max, _min, _sum = builtins.all, builtins.any, builtins.max, builtins.min, builtins.sum


def _pair(v, name: str) -> tuple[int, int]:
    if type(v) is int:                                # the hot case, checked cheaply
        return v, v
    if type(v) is tuple and len(v) == 2 and type(v[0]) is int and type(v[1]) is int:
        return v
    v = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    if len(v) != 2 or not _all(isinstance(i, (int, np.integer)) for i in v):
        raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")
    return int(v[0]), int(v[1])


def _fused_f32(name: str, tensors, **params) -> Tensor | None:
    """The backend's fused kernel `name` when it has one and every tensor is float32 on that
    backend; None means: run the composite (same result, more ops)."""
    backend = tensors[0]._backend
    if name not in backend.fused:
        return None
    for t in tensors:
        if t.dtype is not dtypes.float32 or t._backend is not backend:
            return None
    return run_fused(name, tensors, **params)


def _const(a: np.ndarray, like: Tensor) -> Tensor:
    """A small host-computed constant (pooling weights, masks) on `like`'s device."""
    dt = dtypes.from_numpy_dtype(a.dtype)
    return from_raw(np.ascontiguousarray(a), dt, a.shape, like.device)


# --- layers -----------------------------------------------------------------------------
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    if isinstance(weight, QuantizedTensor):           # multiplied block by block, never dequantized whole
        return _linear_quantized(input, weight, bias)
    shape, weight_shape = input.shape, weight.shape
    if len(weight_shape) == 2 and shape and shape[-1] == weight_shape[1] and \
            (bias is None or bias.shape == weight_shape[:1]):
        if weight.dtype is dtypes.float16 and input.dtype is dtypes.float32:   # a checkpoint's float16 weight
            fused = _linear_f16_weight(input, weight, bias)
        else:
            fused = _fused_f32("linear", [input, weight] if bias is None else [input, weight, bias])
        if fused is not None:
            return fused
    out = matmul(input, weight.T)                     # (..., in) @ (in, out) -> (..., out)
    return out if bias is None else add(out, bias)


def _linear_f16_weight(input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor | None:  # noqa: A002
    """float32 x times a float16 weight widened inside the backend's kernel (never a float32 copy
    of the weight); None where the backend has no such kernel (the composite widens, then multiplies)."""
    backend = input._backend
    if "linear_f16w" not in backend.fused or weight._backend is not backend:
        return None
    if bias is not None:
        if bias._backend is not backend:
            return None
        bias = cast(bias, dtypes.float32)
    return run_fused("linear_f16w", [input, weight] if bias is None else [input, weight, bias])


def _linear_quantized(input: Tensor, weight: QuantizedTensor, bias: Tensor | None) -> Tensor:  # noqa: A002
    if weight.ndim != 2 or input.ndim < 1 or input.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: input of shape {input.shape} cannot multiply a weight of shape "
                         f"{weight.shape} ({weight.qtype}): the last dims must match")
    if bias is not None and tuple(bias.shape) != weight.shape[:1]:
        raise ValueError(f"linear: bias of shape {bias.shape} for a weight of shape {weight.shape}")
    tensors = [cast(input, dtypes.float32)] + ([cast(bias, dtypes.float32)] if bias is not None else [])
    out = weight.run_kernel("linear_q", tensors)      # (..., in) -> (..., out) float32
    return cast(out, input.dtype) if input.dtype.is_floating_point else out


def pad(input: Tensor, pad, mode: str = "constant", value=None) -> Tensor:  # noqa: A002
    """`pad` lists (before, after) pairs from the last dim backwards, as in torch."""
    pad = list(pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad must have an even length of at most 2*{input.ndim}, got {len(pad)}")
    pairs = [(0, 0)] * input.ndim
    for i in range(len(pad) // 2):
        pairs[input.ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    x = input
    for d, (lo, hi) in enumerate(pairs):              # negative padding crops, as in torch
        if lo < 0 or hi < 0:
            x = x.narrow(d, -_min(lo, 0), x.shape[d] + _min(lo, 0) + _min(hi, 0))
    pairs = [(_max(lo, 0), _max(hi, 0)) for lo, hi in pairs]
    if not _any(lo or hi for lo, hi in pairs):
        return x
    if mode == "constant":
        return run_op(Op.PAD, [x], x.dtype, pads=tuple(pairs), value=0 if value is None else value)
    for d, (lo, hi) in enumerate(pairs):              # the other modes gather along each dim
        if lo or hi:
            x = index_select(x, d, _pad_index(x.shape[d], lo, hi, mode))
    return x


def _pad_index(n: int, lo: int, hi: int, mode: str) -> np.ndarray:
    i = np.arange(-lo, n + hi)
    if mode == "replicate":
        return np.clip(i, 0, n - 1)
    if mode == "circular":
        if lo > n or hi > n:
            raise ValueError(f"circular padding of {_max(lo, hi)} exceeds the dimension size {n}")
        return i % n
    if mode == "reflect":
        if lo >= n or hi >= n:
            raise ValueError(f"reflect padding of {_max(lo, hi)} must be smaller than the dimension size {n}")
        period = 2 * (n - 1) if n > 1 else 1
        i = np.abs(i) % period
        return np.where(i >= n, period - i, i)
    raise ValueError(f"unknown padding mode {mode!r}; use constant, reflect, replicate or circular")


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,  # noqa: A002
           dilation=1, groups: int = 1) -> Tensor:
    return conv2d_act(input, weight, bias, stride, padding, dilation, groups)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,  # noqa: A002
           dilation=1, groups: int = 1) -> Tensor:
    """torch's conv1d over (N, C, L) or (C, L) input with an (O, C/groups, k) weight: conv2d on a
    height of one, so it runs the backends' conv2d kernels."""
    return conv1d_act(input, weight, bias, stride, padding, dilation, groups)


def conv1d_act(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,  # noqa: A002
               dilation=1, groups: int = 1, activation: str = "none") -> Tensor:
    """activation(conv1d(...)) as one kernel where the backend fuses it (see conv2d_act)."""
    if input.ndim not in (2, 3) or weight.ndim != 3:
        raise ValueError(f"conv1d expects input (N, C, L) and weight (O, C/groups, k), got {input.shape} and "
                         f"{weight.shape}")
    def single(v, name):                              # k or (k,) -> (1, k): the height is one
        v = v if isinstance(v, (tuple, list)) else (v,)
        if len(v) != 1 or not isinstance(v[0], (int, np.integer)):
            raise ValueError(f"conv1d: {name} must be an int or a 1-tuple of ints, got {v!r}")
        return 1, int(v[0])
    pad = padding if isinstance(padding, str) else ((0, 0), (single(padding, "padding")[1],) * 2)
    out = conv2d_act(input.unsqueeze(-2), weight.unsqueeze(-2), bias, single(stride, "stride"), pad,
                     single(dilation, "dilation"), groups, activation)
    return out.squeeze(-2)


def conv2d_act(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,  # noqa: A002
               dilation=1, groups: int = 1, activation: str = "none") -> Tensor:
    """activation(conv2d(...)): an engine extension (like torch.ao's fused ConvReLU2d) that a
    backend runs as one kernel with the activation in its epilogue. `padding` may also be per
    side, ((top, bottom), (left, right)), as TensorFlow's "SAME" needs; `activation` is one of
    CONV_ACTIVATIONS."""
    if activation not in CONV_ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(CONV_ACTIVATIONS)}, got {activation!r}")
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    if x.ndim != 4 or weight.ndim != 4:
        raise ValueError(f"conv2d expects input (N, C, H, W) and weight (O, C/groups, kh, kw), "
                         f"got {input.shape} and {weight.shape}")
    n, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    if c != cg * groups or o % groups:
        raise ValueError(f"conv2d: input has {c} channels but weight {weight.shape} with groups={groups} "
                         f"expects {cg * groups} (and out channels divisible by groups)")
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    pads = _conv_pads(padding, (sh, sw), (dh * (kh - 1), dw * (kw - 1)))
    if h + _sum(pads[0]) < dh * (kh - 1) + 1 or w + _sum(pads[1]) < dw * (kw - 1) + 1:
        raise ValueError(f"conv2d: input {input.shape} (padded) is smaller than the kernel {weight.shape[2:]}")
    if bias is None or bias.shape == (o,):            # padding, bias and activation inside the kernel
        fused = _fused_f32("conv2d", [x, weight] + ([bias] if bias is not None else []), stride=(sh, sw),
                           pads=pads, dilation=(dh, dw), groups=groups, activation=activation)
        if fused is not None:
            return fused.squeeze(0) if unbatched else fused
    dt = x.dtype.compute if x.dtype.is_floating_point else dtypes.float32
    x = cast(x, dt)
    if _any(p for pair in pads for p in pair):
        x = run_op(Op.PAD, [x], dt, pads=((0, 0), (0, 0)) + pads, value=0)
    out = run_op(Op.CONV2D, [x, cast(weight, dt)], dt, stride=(sh, sw), dilation=(dh, dw), groups=groups)
    if bias is not None:
        out = add(out, bias.reshape(o, 1, 1))
    out = CONV_ACTIVATIONS[activation](out)
    return out.squeeze(0) if unbatched else out


def _conv_pads(padding, stride: tuple[int, int], reach: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    """((top, bottom), (left, right)) from conv2d's padding; reach: dilation * (kernel - 1) per dim."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0), (0, 0)
        if padding == "same":
            if stride != (1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions")
            return tuple((r // 2, r - r // 2) for r in reach)    # the extra pixel goes after, as in torch
        raise ValueError(f"padding must be 'valid', 'same', an int or a pair, got {padding!r}")
    if isinstance(padding, (tuple, list)) and len(padding) == 2 and \
            _all(isinstance(p, (tuple, list)) for p in padding):
        pads = tuple(_pair(p, "padding") for p in padding)
        if _any(p < 0 for pair in pads for p in pair):
            raise ValueError(f"padding must not be negative, got {padding!r}")
        return pads
    ph, pw = _pair(padding, "padding")
    return (ph, ph), (pw, pw)


def _pool_geometry(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> tuple[int, int]:
    """(output size, extra padding after) for one spatial dim, torch's rule."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:       # last window must start inside the input
        out -= 1
    extra = _max(0, (out - 1) * s + d * (k - 1) + 1 - (size + 2 * p))
    return out, extra


def _windows(x: Tensor, kernel, stride, dilation, out_hw) -> Tensor:
    """(N, C, Ho, Wo, kh, kw) view of a contiguous padded (N, C, H, W) tensor."""
    x = x.contiguous()
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = kernel, stride, dilation, out_hw
    return x._as_strided((n, c, ho, wo, kh, kw), (c * h * w, h * w, sh * w, sw, dh * w, dw))


def _pool_setup(input, kernel_size, stride, padding, dilation, ceil_mode, name):
    x = input.unsqueeze(0) if input.ndim == 3 else input
    if x.ndim != 4:
        raise ValueError(f"{name} expects (N, C, H, W) or (C, H, W), got {input.shape}")
    k = _pair(kernel_size, "kernel_size")
    s = k if stride is None or stride == [] else _pair(stride, "stride")
    p, d = _pair(padding, "padding"), _pair(dilation, "dilation")
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise ValueError(f"{name}: padding {p} must be at most half the kernel size {k}")
    geo = [_pool_geometry(x.shape[2 + i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(2)]
    if geo[0][0] <= 0 or geo[1][0] <= 0:
        raise ValueError(f"{name}: input {input.shape} is too small for kernel {k}")
    return x, k, s, p, d, geo


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
               ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
    if return_indices:
        raise NotImplementedError("max_pool2d(return_indices=True) is not supported")
    x, k, s, p, d, geo = _pool_setup(input, kernel_size, stride, padding, dilation, ceil_mode, "max_pool2d")
    x = to_floating(x) if x.dtype.is_floating_point else x
    pads = ((0, 0), (0, 0), (p[0], p[0] + geo[0][1]), (p[1], p[1] + geo[1][1]))
    if _any(a or b for a, b in pads):
        fill = -math.inf if x.dtype.is_floating_point else int(np.iinfo(x.dtype.storage).min)
        x = run_op(Op.PAD, [x], x.dtype, pads=pads, value=fill)
    ho, wo = geo[0][0], geo[1][0]
    if s == (1, 1) and k[0] * k[1] > 2:
        # stride 1 (YOLO's SPPF: 5x5, three times): the window max as kw shifted maxima along the
        # rows, then kh along the columns (max is associative, so the same values): k_h + k_w - 2
        # elementwise passes instead of a reduction over a (kh, kw) strided window per pixel
        rows = x[:, :, :, 0:wo]
        for j in range(1, k[1]):
            rows = maximum(rows, x[:, :, :, j * d[1]:j * d[1] + wo])
        out = rows[:, :, 0:ho]
        for i in range(1, k[0]):
            out = maximum(out, rows[:, :, i * d[0]:i * d[0] + ho])
        out = out.contiguous()
    else:
        win = _windows(x, k, s, d, (ho, wo))
        out = run_op(Op.MAX, [win], x.dtype, axes=(4, 5), keepdim=False)
    return out.squeeze(0) if input.ndim == 3 else out


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,  # noqa: A002
               count_include_pad: bool = True, divisor_override=None) -> Tensor:
    x, k, s, p, _, geo = _pool_setup(input, kernel_size, stride, padding, 1, ceil_mode, "avg_pool2d")
    x = to_floating(x)
    (ho, eh), (wo, ew) = geo
    pads = ((0, 0), (0, 0), (p[0], p[0] + eh), (p[1], p[1] + ew))
    if _any(a or b for a, b in pads):
        x = run_op(Op.PAD, [x], x.dtype, pads=pads, value=0)
    total = sum(_windows(x, k, s, (1, 1), (ho, wo)), (4, 5))
    if divisor_override:
        return _squeeze3(div(total, divisor_override), input)
    h, w = input.shape[-2:]
    # divisor per output position: cells of each window inside the padded (or the real) input
    counts = []
    for size, kk, ss, pp, n in ((h, k[0], s[0], p[0], ho), (w, k[1], s[1], p[1], wo)):
        start = np.arange(n) * ss - pp
        end = np.minimum(start + kk, size + pp)
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, size)
        counts.append((end - np.maximum(start, -pp)).astype(np.float32))
    divisor = np.outer(counts[0], counts[1]).astype(np.float32)
    return _squeeze3(div(total, _const(divisor, x)), input)


def _squeeze3(out: Tensor, input: Tensor) -> Tensor:
    return out.squeeze(0) if input.ndim == 3 else out


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:  # noqa: A002
    """Average over torch's adaptive windows [floor(i*H/Ho), ceil((i+1)*H/Ho)).

    The windows are separable, so this is two products with averaging matrices.
    """
    h, w = input.shape[-2:]
    size = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size, output_size)
    ho, wo = (h if size[0] is None else size[0]), (w if size[1] is None else size[1])
    x = to_floating(input)
    if (ho, wo) == (1, 1):
        return mean(x, (-2, -1), keepdim=True)
    ph, pw = _averaging_matrix(h, ho), _averaging_matrix(w, wo)
    out = matmul(_const(ph, x), x)                    # (Ho, H) @ (..., H, W) -> (..., Ho, W)
    return matmul(out, _const(pw.T.copy(), x))        # (..., Ho, W) @ (W, Wo) -> (..., Ho, Wo)


def _averaging_matrix(n: int, out: int) -> np.ndarray:
    m = np.zeros((out, n), np.float32)
    for i in range(out):
        lo, hi = (i * n) // out, -(-((i + 1) * n) // out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


# --- normalisation ----------------------------------------------------------------------
def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",  # noqa: A002
                align_corners=None, recompute_scale_factor=None, antialias: bool = False) -> Tensor:
    """torch's interpolate for mode="nearest" over the last one or two dims ((N, C, L) or
    (N, C, H, W)): output index i reads input index min(floor(i * scale), in - 1), with
    scale = 1 / scale_factor when given (torch's rule unless recompute_scale_factor), else
    in / out. An integer scale factor repeats each pixel (a broadcast and one copy); any other
    size gathers rows and columns by index."""
    if mode != "nearest":
        raise NotImplementedError(f"interpolate(mode={mode!r}); only 'nearest' is supported")
    if align_corners is not None or antialias:
        raise ValueError("align_corners and antialias do not apply to mode='nearest'")
    spatial = input.ndim - 2
    if spatial not in (1, 2):
        raise ValueError(f"interpolate expects (N, C, L) or (N, C, H, W), got {input.shape}")
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate needs exactly one of size and scale_factor")
    sizes_in = input.shape[2:]
    if size is not None:
        out = (size,) * spatial if isinstance(size, int) else tuple(int(v) for v in size)
        steps = [i / o for i, o in zip(sizes_in, out)]
    else:
        factors = (scale_factor,) * spatial if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        out = tuple(int(math.floor(i * f)) for i, f in zip(sizes_in, factors))
        steps = [i / o for i, o in zip(sizes_in, out)] if recompute_scale_factor else [1.0 / f for f in factors]
    if len(out) != spatial or _any(o <= 0 for o in out):
        raise ValueError(f"interpolate: bad output size {out} for input {input.shape}")
    repeats = [o // i if o % i == 0 and s * (o // i) == 1 else 0 for i, o, s in zip(sizes_in, out, steps)]
    if _all(repeats):                                 # whole repeats: x[..., i, :] -> rows i*r .. i*r+r-1
        lead = input.shape[:2]
        spread = lead + _sum(((i, 1) for i in sizes_in), ())
        wide = lead + _sum(((i, r) for i, r in zip(sizes_in, repeats)), ())
        return input.reshape(spread).expand(wide).contiguous().reshape(lead + out)
    x = input
    for axis, (i, o, s) in enumerate(zip(sizes_in, out, steps)):
        index = np.minimum(np.floor(np.arange(o, dtype=np.float64) * s).astype(np.int64), i - 1)
        x = index_select(x, 2 + axis, index)
    return x


def batch_norm(input: Tensor, running_mean: Tensor, running_var: Tensor, weight: Tensor | None = None,  # noqa: A002
               bias: Tensor | None = None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5) -> Tensor:
    """Inference batch norm: y = x * scale + shift with per-channel scale and shift."""
    if training:
        raise NotImplementedError("batch_norm(training=True): this engine runs inference only")
    shape = (-1,) + (1,) * (input.ndim - 2)            # broadcast over (N, C, *spatial)
    scale = rsqrt(add(to_floating(running_var), eps))
    if weight is not None:
        scale = mul(scale, weight)
    shift = mul(running_mean, scale)
    shift = sub(bias, shift) if bias is not None else mul(shift, -1.0)
    x = to_floating(input)
    scale, shift = scale.reshape(shape), shift.reshape(shape)
    if "mul_add" in x._backend.fused and scale.dtype is x.dtype and shift.dtype is x.dtype:
        return run_fused("mul_add", [x, scale, shift])
    return add(mul(x, scale), shift)


def _norm_dims(x: Tensor, normalized_shape) -> tuple[int, ...]:
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(ns):]) != ns:
        raise ValueError(f"normalized_shape {ns} does not match the input's trailing shape {x.shape}")
    return tuple(range(x.ndim - len(ns), x.ndim))


def _affine_fits(x: Tensor, dims, *params) -> bool:
    """Each given weight/bias has exactly the normalized shape (what a fused norm takes)."""
    shape = tuple(x.shape[d] for d in dims)
    return _all(p is None or tuple(p.shape) == shape for p in params)


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,  # noqa: A002
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    x = to_floating(input)
    dims = _norm_dims(x, normalized_shape)
    if _affine_fits(x, dims, weight, bias):
        fused = _fused_f32("layer_norm", [t for t in (x, weight, bias) if t is not None],
                           normalized_dims=len(dims), eps=float(eps), has_weight=weight is not None,
                           has_bias=bias is not None)
        if fused is not None:
            return fused
    centred = sub(x, mean(x, dims, keepdim=True))
    y = mul(centred, rsqrt(add(mean(mul(centred, centred), dims, keepdim=True), eps)))
    if weight is not None:
        y = mul(y, weight)
    return y if bias is None else add(y, bias)


def add_layer_norm(input: Tensor, residual: Tensor, normalized_shape, weight: Tensor | None = None,  # noqa: A002
                   bias: Tensor | None = None, eps: float = 1e-5, input_bias: Tensor | None = None) -> Tensor:
    """layer_norm(input + input_bias + residual, ...): an engine extension (not in torch) for the
    post-norm residual of BERT-style blocks, `LayerNorm(dense(h) + h)`, which a backend may run as
    one kernel. input_bias is the preceding linear's bias, so the linear can run without it."""
    x = to_floating(input)
    dims = _norm_dims(x, normalized_shape)
    if tuple(residual.shape) == tuple(x.shape) and _affine_fits(x, dims, input_bias, weight, bias):
        fused = _fused_f32("add_layer_norm", [t for t in (x, residual, input_bias, weight, bias) if t is not None],
                           normalized_dims=len(dims), eps=float(eps), has_input_bias=input_bias is not None,
                           has_weight=weight is not None, has_bias=bias is not None)
        if fused is not None:
            return fused
    total = x if input_bias is None else add(x, input_bias)
    return layer_norm(add(total, residual), normalized_shape, weight, bias, eps)


def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,  # noqa: A002
             eps: float | None = None) -> Tensor:
    x = to_floating(input)
    dims = _norm_dims(x, normalized_shape)
    eps = float(np.finfo(x.dtype.storage).eps) if eps is None else eps
    if _affine_fits(x, dims, weight):
        fused = _fused_f32("rms_norm", [t for t in (x, weight) if t is not None], normalized_dims=len(dims),
                           eps=float(eps), has_weight=weight is not None)
        if fused is not None:
            return fused
    y = mul(x, rsqrt(add(mean(mul(x, x), dims, keepdim=True), eps)))
    return y if weight is None else mul(y, weight)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:  # noqa: A002
    x = to_floating(input)
    if p == 2:
        norm = sqrt(sum(mul(x, x), dim, keepdim=True))
    else:
        norm = sum(x.abs() ** p, dim, keepdim=True) ** (1.0 / p)
    return div(x, maximum(norm, eps))


# --- activations ------------------------------------------------------------------------
def relu6(input: Tensor) -> Tensor:  # noqa: A002
    return hardtanh(input, 0.0, 6.0)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:  # noqa: A002
    if "hardtanh" in input._backend.fused and input.dtype.is_floating_point and input.dtype is input.dtype.compute:
        return run_fused("hardtanh", [input], min_val=float(min_val), max_val=float(max_val))
    return minimum(maximum(input, min_val), max_val)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    x = to_floating(input)
    if approximate in ("none", "tanh"):
        fused = _fused_f32("gelu", [x], approximate=approximate)
        if fused is not None:
            return fused
    if approximate == "none":                       # x * Phi(x), Phi the normal CDF
        return mul(mul(x, 0.5), add(erf(mul(x, 1 / math.sqrt(2))), 1.0))
    if approximate == "tanh":
        inner = mul(add(x, mul(mul(mul(x, x), x), 0.044715)), math.sqrt(2 / math.pi))
        return mul(mul(x, 0.5), add(tanh(inner), 1.0))
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(input: Tensor) -> Tensor:  # noqa: A002
    x = to_floating(input)
    fused = _fused_f32("silu", [x])
    if fused is not None:
        return fused
    return mul(x, sigmoid(x))


def hardswish(input: Tensor) -> Tensor:  # noqa: A002
    """x * relu6(x + 3) / 6 (Howard et al. 2019, "Searching for MobileNetV3",
    https://arxiv.org/abs/1905.02244), divided by 6 last as torch does."""
    x = to_floating(input)
    return div(mul(x, relu6(add(x, 3.0))), 6.0)


def silu_mul(gate: Tensor, up: Tensor) -> Tensor:
    """silu(gate) * up: the product of a SwiGLU feed-forward layer (Shazeer 2020, "GLU Variants
    Improve Transformer", https://arxiv.org/abs/2002.05202), whose gate and up projections are
    often one stacked matmul. An engine extension (torch has no functional for it), with a fused
    kernel where the backend has one: it reads the two halves where they lie."""
    g, u = to_floating(gate), to_floating(up)
    if tuple(g.shape) != tuple(u.shape):
        raise ValueError(f"silu_mul: gate {tuple(g.shape)} and up {tuple(u.shape)} must have one shape")
    fused = _fused_f32("silu_mul", [g, u])
    if fused is not None:
        return fused
    return mul(silu(g), u)


def rotary_embedding(input: Tensor, cos: Tensor, sin: Tensor) -> Tensor:  # noqa: A002
    """Rotary position embeddings (Su et al. 2021, RoFormer, https://arxiv.org/abs/2104.09864) in
    transformers' convention: input (..., T, d) * cos + rotate_half(input) * sin, with
    rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]) and cos, sin (T, d) the angles' cosines and
    sines (each frequency twice: [f0..f(d/2-1), f0..f(d/2-1)]). An engine extension (torch has no
    functional for it), with a fused kernel where the backend has one."""
    x = to_floating(input)
    if x.ndim < 2 or x.shape[-1] % 2:
        raise ValueError(f"rotary_embedding: input must be (..., T, d) with d even, got {tuple(x.shape)}")
    if cos.shape != sin.shape or cos.ndim > 2 or tuple(cos.shape)[-1:] != (x.shape[-1],) or \
            (cos.ndim == 2 and cos.shape[0] not in (1, x.shape[-2])):
        raise ValueError(f"rotary_embedding: cos {tuple(cos.shape)} and sin {tuple(sin.shape)} must be (T, d) for "
                         f"input {tuple(x.shape)}")
    fused = _fused_f32("rope", [x, cos, sin])
    if fused is not None:
        return fused
    half = x.shape[-1] // 2
    rotated = cat([neg(x[..., half:]), x[..., :half]], -1)
    return add(mul(x, cos), mul(rotated, sin))


def dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:  # noqa: A002
    if training and p > 0:
        raise NotImplementedError("dropout(training=True): this engine runs inference only")
    return input


def embedding(input: Tensor, weight: Tensor, padding_idx=None, max_norm=None, norm_type=2.0,  # noqa: A002
              scale_grad_by_freq=False, sparse=False) -> Tensor:
    if max_norm is not None:
        raise NotImplementedError("embedding(max_norm=...) renormalises weights in place; not supported")
    if isinstance(weight, QuantizedTensor):           # only the rows asked for are dequantized
        if weight.ndim != 2:
            raise ValueError(f"embedding: the weight must be 2-D, got shape {weight.shape}")
        idx = input if isinstance(input, Tensor) else from_raw(np.asarray(input, np.int64), dtypes.int64,
                                                                np.shape(input), weight.device)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"embedding indices must be integer, got {idx.dtype}")
        return weight.run_kernel("embedding_q", [cast(idx, dtypes.int64)])
    if isinstance(weight, RowTable):                  # rows fetched on demand (engine.rows)
        ids = np.asarray(input.numpy() if isinstance(input, Tensor) else input)
        rows = weight.gather(ids)                     # (numel, D) float32 on the host
        return from_raw(rows, dtypes.float32, ids.shape + (weight.shape[1],), weight.device)
    idx = input if isinstance(input, Tensor) else from_raw(np.asarray(input, np.int64), dtypes.int64,
                                                            np.shape(input), weight.device)
    rows = index_select(weight, 0, idx.reshape(-1))   # (numel, D)
    return rows.reshape(tuple(idx.shape) + (weight.shape[1],))


# --- attention --------------------------------------------------------------------------
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(Q K^T * scale + mask) V over (..., L, E) queries and (..., S, E) keys.

    A bool mask marks the pairs that take part (True = attend); a float mask is
    added to the scores. is_causal keeps key j <= query i (top-left aligned).
    A query row with no key to attend (all masked) is NaN, as softmax of -inf
    everywhere is (torch 2.13 gives 0 there).
    """
    if dropout_p:
        raise NotImplementedError("scaled_dot_product_attention(dropout_p>0): inference only")
    if is_causal and attn_mask is not None:
        raise ValueError("pass either attn_mask or is_causal=True, not both")
    q, k, v = to_floating(query), to_floating(key), to_floating(value)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    fused = _fused_attention(q, k, v, attn_mask, is_causal, scale, enable_gqa)
    if fused is not None:
        return fused
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]             # each KV head serves `rep` query heads
        k = _repeat_heads(k, rep)
        v = _repeat_heads(v, rep)
    scores = mul(matmul(q, k.mT), scale)              # (..., L, S)
    L, S = scores.shape[-2:]
    if is_causal:
        allowed = np.tril(np.ones((L, S), np.bool_))
        scores = masked_fill(scores, _const(~allowed, scores), -math.inf)
    elif attn_mask is not None:
        if attn_mask.dtype is dtypes.bool_:
            scores = masked_fill(scores, attn_mask.logical_not(), -math.inf)
        else:
            scores = add(scores, attn_mask)
    return matmul(softmax(scores, -1), v)            # (..., L, Ev)


def _fused_attention(q, k, v, attn_mask, is_causal, scale, enable_gqa) -> Tensor | None:
    """The backend's "attention" kernel for (N, H, L, E) float32 q/k/v on one backend (K/V heads
    equal, one, or a divisor under enable_gqa) and a bool or float32 mask broadcastable to
    (N, H, L, S); None: run the composite. The kernel writes (N, L, H, Ev) (what an output
    projection reads); the result is that buffer seen as (N, H, L, Ev)."""
    backend = q._backend
    if "attention" not in backend.fused or q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        return None
    (n, h, l, e), (nk, hk, s, ek), (nv, hv, sv, ev) = q.shape, k.shape, v.shape
    if not (n == nk == nv and hk == hv and s == sv and e == ek and 0 < hk and h % hk == 0 and
            (hk in (1, h) or enable_gqa) and n * h * l * s * e * ev) or \
            _any(t.dtype is not dtypes.float32 or t._backend is not backend for t in (k, v)) or \
            q.dtype is not dtypes.float32:
        return None
    tensors = [q, k, v]
    if attn_mask is not None:
        if attn_mask._backend is not backend or attn_mask.dtype not in (dtypes.bool_, dtypes.float32) or \
                attn_mask.ndim > 4:
            return None
        try:
            tensors.append(attn_mask.expand(n, h, l, s))
        except ValueError:
            return None
    return run_fused("attention", tensors, scale=float(scale), is_causal=bool(is_causal)).transpose(1, 2)


def _repeat_heads(x: Tensor, rep: int) -> Tensor:
    *lead, h, s, e = x.shape
    return x.unsqueeze(-3).expand(*lead, h, rep, s, e).reshape(*lead, h * rep, s, e)


# conv2d_act's activations: the names the simd kernels' epilogue knows, each with its composite
CONV_ACTIVATIONS = {"none": lambda x: x, "relu": relu, "relu6": relu6, "gelu": gelu,
                    "gelu_tanh": lambda x: gelu(x, approximate="tanh"), "silu": silu,
                    "hardswish": hardswish}
