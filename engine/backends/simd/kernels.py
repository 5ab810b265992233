"""NumPy-level entry points to the C kernels: float32 arrays in, float32 arrays out.

Each function checks shapes, derives element strides from the arrays (views, transposes
and broadcast stride-0 dims pass without a copy), allocates the contiguous output (or
fills `out`, for tests) and makes one ctypes call. Scratch memory is one cached NumPy
buffer per thread that grows on demand: the C side says how much it needs.
"""
from __future__ import annotations

import ctypes
import math
import threading

import numpy as np

from . import library

ACTIVATIONS = {"none": 0, "relu": 1, "relu6": 2, "gelu": 3, "gelu_tanh": 4, "silu": 5, "hardswish": 6}
_F32 = np.dtype(np.float32)
_local = threading.local()      # ctypes releases the GIL: each thread gets its own scratch


_from_buffer, _addressof = ctypes.c_char.from_buffer, ctypes.addressof


def address_of(a: np.ndarray) -> int:
    """The address of a's first element. Through ctypes' buffer view when NumPy lets it write
    there (3x cheaper than building `__array_interface__`, which read-only and strided arrays
    need): a small op's pointers cost as much as its arithmetic."""
    flags = a.flags
    if flags.writeable and flags.c_contiguous and a.size:
        return _addressof(_from_buffer(a))
    return a.__array_interface__["data"][0]


def _optional(a) -> int | None:
    return None if a is None else address_of(a)


def _elements(a: np.ndarray) -> np.ndarray:
    """`a` as float32 with strides in whole elements (a copy only when they are not)."""
    if type(a) is not np.ndarray:
        a = np.asarray(a)
    if a.dtype != _F32:
        raise TypeError(f"the simd kernels compute in float32, got {a.dtype}")
    if a.flags.c_contiguous or all(s % 4 == 0 for s in a.strides):
        return a
    return np.ascontiguousarray(a)


def _strides(a: np.ndarray) -> tuple[int, ...]:
    strides = a.strides
    if len(strides) == 2:                            # the hot case (every GEMM)
        return strides[0] // 4, strides[1] // 4
    return tuple(s // 4 for s in strides)


def _output(shape, out) -> np.ndarray:
    if out is None:
        return np.empty(shape, np.float32)
    if out.shape != tuple(shape) or out.dtype != _F32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of shape {tuple(shape)}")
    return out


def call_with_scratch(fn, *args) -> None:
    """fn(*args, scratch, size) returns 0, or the floats it needs (then it wrote nothing)."""
    scratch = getattr(_local, "scratch", None)          # (buffer, its address, its size): looked up once
    if scratch is None:
        scratch = _local.scratch = _scratch(0)
    need = fn(*args, scratch[1], scratch[2])
    if need:
        scratch = _local.scratch = _scratch(max(need, 2 * scratch[2]))
        if fn(*args, scratch[1], scratch[2]):
            raise RuntimeError(f"{fn.__name__} asked for more scratch twice")


def _scratch(size: int):
    buffer = np.empty(size, np.float32)
    return buffer, address_of(buffer), size


def _activation(name: str) -> int:
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


def _collapse(shape, strides):
    """(count, stride) when the dims of `shape` step uniformly through memory, else None."""
    count, stride = 1, 0
    for size, step in zip(reversed(shape), reversed(strides)):
        if size == 1:
            continue
        if count > 1 and step != stride * count:
            return None
        stride, count = (step if count == 1 else stride), count * size
    return count, stride


# --- GEMM ---------------------------------------------------------------------------------------
def gemm(a, b, bias=None, activation: str = "none", out=None) -> np.ndarray:
    """act(a @ b + bias): a (..., M, K), b (..., K, N), batch dims broadcast as np.matmul;
    bias broadcastable to (M, N) ((N,) along columns, (M, 1) along rows)."""
    a, b = _elements(a), _elements(b)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"gemm: shapes {a.shape} and {b.shape} do not multiply")
    (m, k), n = a.shape[-2:], b.shape[-1]
    if a.ndim == 2 and b.ndim == 2:                  # one product: no batch to broadcast
        return _gemm_2d(a, _strides(a), b, _strides(b), m, n, k, bias, activation, out)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + (m, k))
    b = np.broadcast_to(b, batch + (k, n))
    y = _output(batch + (m, n), out)
    bias_args = _bias_arguments(bias, m, n)
    lib, act = library.get(), _activation(activation)
    sa, sb = _strides(a), _strides(b)
    if len(batch) > 1 and None in (_collapse(batch, sa[:-2]), _collapse(batch, sb[:-2])):
        for index in np.ndindex(*batch[:-1]):        # batch dims that do not collapse: one call per leading index
            gemm(a[index], b[index], bias, activation, y[index])
        return y
    count, a_batch = _collapse(batch, sa[:-2]) or (1, 0)
    b_batch = (_collapse(batch, sb[:-2]) or (1, 0))[1]
    call_with_scratch(lib.gemm_f32, count, m, n, k, address_of(a), a_batch, *sa[-2:], address_of(b), b_batch,
                       *sb[-2:], address_of(y), m * n, n, *bias_args, act)
    return y


def linear(x, weight, bias=None, out=None) -> np.ndarray:
    """x (M, K) @ weight (N, K).T + bias (N,): weight read through its strides, never copied.
    A float16 weight (as checkpoints store it) is widened inside the kernel, exactly: the
    result is that of the float32 weight, up to summation order, at half the weight traffic."""
    x = _elements(x)
    half = type(weight) is np.ndarray and weight.dtype == _F16
    weight = _half_elements(weight) if half else _elements(weight)
    if x.ndim != 2 or weight.ndim != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"linear: shapes {x.shape} and {weight.shape} do not multiply")
    row_stride, column_stride = weight.strides[0] // weight.itemsize, weight.strides[1] // weight.itemsize
    library.get().resident(weight)
    return _gemm_2d(x, _strides(x), weight, (column_stride, row_stride), x.shape[0], weight.shape[0],
                    x.shape[1], bias, "none", out, "gemm_f16w_f32" if half else "gemm_f32")


_F16 = np.dtype(np.float16)


def _half_elements(a: np.ndarray) -> np.ndarray:
    """a float16 array with strides in whole elements (a copy only when they are not)"""
    if a.flags.c_contiguous or all(s % 2 == 0 for s in a.strides):
        return a
    return np.ascontiguousarray(a)


def _gemm_2d(a, a_strides, b, b_strides, m: int, n: int, k: int, bias, activation: str, out,
             kernel: str = "gemm_f32") -> np.ndarray:
    """One (M, K) @ (K, N) product, a and b given with their element strides (b's may be a
    transpose's): the whole call in one ctypes call and no temporary array."""
    y = _output((m, n), out)
    call_with_scratch(getattr(library.get(), kernel), 1, m, n, k, address_of(a), 0, *a_strides, address_of(b), 0,
                      *b_strides, address_of(y), m * n, n, *_bias_arguments(bias, m, n), _activation(activation))
    return y


def _bias_arguments(bias, m: int, n: int) -> tuple:
    """(address, row stride, column stride) of a bias broadcast to (M, N): a dim of size 1
    steps by 0. (None, 0, 0) for no bias."""
    if bias is None:
        return None, 0, 0
    bias = _elements(bias)
    if bias.ndim > 2:
        raise ValueError(f"gemm: a bias of shape {bias.shape} does not broadcast to ({m}, {n})")
    shape = (1,) * (2 - bias.ndim) + bias.shape
    strides = (0,) * (2 - bias.ndim) + _strides(bias)
    steps = []
    for size, stride, want in zip(shape, strides, (m, n)):
        if size != want and size != 1:
            raise ValueError(f"gemm: a bias of shape {bias.shape} does not broadcast to ({m}, {n})")
        steps.append(stride if size == want else 0)
    return (address_of(bias), *steps)


# --- convolution --------------------------------------------------------------------------------
def _pair(v) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, (tuple, list)) else (int(v), int(v))


def conv_out_size(size, kernel, stride, dilation, padding) -> int:
    """A convolution's output extent along one dim (padding: both sides together), as the C
    kernels compute it."""
    return (size + padding - dilation * (kernel - 1) - 1) // stride + 1


def _conv_geometry(x, weight, stride, padding, dilation):
    (sh, sw), (dh, dw) = _pair(stride), _pair(dilation)
    if isinstance(padding, (tuple, list)) and isinstance(padding[0], (tuple, list)):
        (pt, pb), (pl, pr) = padding
    else:
        (pt, pl) = _pair(padding)
        pb, pr = pt, pl
    if min(sh, sw, dh, dw) < 1 or min(pt, pb, pl, pr) < 0:
        raise ValueError("conv2d: stride and dilation must be >= 1, padding >= 0")
    h, w = x.shape[2:]
    kh, kw = weight.shape[2:]
    ho, wo = conv_out_size(h, kh, sh, dh, pt + pb), conv_out_size(w, kw, sw, dw, pl + pr)
    if ho < 1 or wo < 1:
        raise ValueError(f"conv2d: input {x.shape} (padded) is smaller than the kernel {weight.shape[2:]}")
    return (sh, sw, dh, dw, pt, pl, pb, pr), (ho, wo)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1, activation: str = "none",
           out=None) -> np.ndarray:
    """act(conv2d(x, weight) + bias), NCHW: x (N, C, H, W), weight (O, C/groups, kh, kw), bias (O,);
    padding: int, (ph, pw) or ((top, bottom), (left, right)), zeros outside the input."""
    x, weight = np.ascontiguousarray(_elements(x)), np.ascontiguousarray(_elements(weight))
    n, c = x.shape[:2]
    o, cg = weight.shape[:2]
    if x.ndim != 4 or weight.ndim != 4 or c != cg * groups or o % groups:
        raise ValueError(f"conv2d: input {x.shape} and weight {weight.shape} do not match groups={groups}")
    geometry, (ho, wo) = _conv_geometry(x, weight, stride, padding, dilation)
    bias = None if bias is None else np.ascontiguousarray(_elements(bias)).reshape(o)
    y = _output((n, o, ho, wo), out)
    library.get().resident(weight)
    call_with_scratch(library.get().conv2d_f32, n, c, *x.shape[2:], address_of(x), o, *weight.shape[2:],
                       address_of(weight), groups, *geometry, _optional(bias), _activation(activation), address_of(y))
    return y


def depthwise_conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, activation: str = "none",
                     out=None) -> np.ndarray:
    """The direct depthwise kernel: x (N, C, H, W), weight (C, 1, kh, kw), bias (C,)."""
    x, weight = np.ascontiguousarray(_elements(x)), np.ascontiguousarray(_elements(weight))
    n, c = x.shape[:2]
    if weight.shape[:2] != (c, 1):
        raise ValueError(f"depthwise_conv2d: weight {weight.shape} does not match {c} channels")
    geometry, (ho, wo) = _conv_geometry(x, weight, stride, padding, dilation)
    bias = None if bias is None else np.ascontiguousarray(_elements(bias)).reshape(c)
    y = _output((n, c, ho, wo), out)
    library.get().resident(weight)
    call_with_scratch(library.get().depthwise_conv2d_f32, n, c, *x.shape[2:], address_of(x), *weight.shape[2:],
                       address_of(weight), *geometry, _optional(bias), _activation(activation), address_of(y))
    return y


def im2col(x, kernel, stride=1, padding=0, dilation=1, out=None) -> np.ndarray:
    """x (C, H, W) -> columns (C * kh * kw, Ho * Wo), zeros where a tap falls in the padding."""
    x = np.ascontiguousarray(_elements(x))
    kh, kw = _pair(kernel)
    geometry, (ho, wo) = _conv_geometry(x[None], np.empty((1, 1, kh, kw)), stride, padding, dilation)
    c = x.shape[0]
    y = _output((c * kh * kw, ho * wo), out)
    library.get().im2col_f32(c, *x.shape[1:], address_of(x), kh, kw, *geometry, address_of(y))
    return y


# --- row-wise kernels -----------------------------------------------------------------------------
def softmax(x, axis: int = -1, out=None) -> np.ndarray:
    x = _elements(x)
    axis = axis % x.ndim
    outer, n, inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
    view = x.reshape(outer, n, inner)               # a view when the dims collapse, else NumPy copies
    y = _output(x.shape, out)
    library.get().softmax_f32(outer, n, inner, address_of(view), *_strides(view), address_of(y))
    return y


def _rows(x, count: int):
    """x as (rows, count) with contiguous rows (copying only if it must)."""
    rows = x.reshape(x.size // count if count else 0, count)
    return rows if count < 2 or rows.strides[1] == 4 else np.ascontiguousarray(rows)


def _vector(v, n: int):
    return None if v is None else np.ascontiguousarray(_elements(v)).reshape(n)


def layer_norm(x, normalized_size: int, weight=None, bias=None, eps: float = 1e-5, out=None) -> np.ndarray:
    """over the trailing dims holding `normalized_size` elements; weight/bias of that many elements"""
    x = _elements(x)
    rows, y = _rows(x, normalized_size), _output(x.shape, out)
    weight, bias = _vector(weight, normalized_size), _vector(bias, normalized_size)
    library.get().layer_norm_f32(rows.shape[0], normalized_size, address_of(rows), _strides(rows)[0], address_of(y),
                                 _optional(weight), _optional(bias), eps)
    return y


def add_layer_norm(x, residual, normalized_size: int, weight=None, bias=None, eps: float = 1e-5, input_bias=None,
                   out=None) -> np.ndarray:
    """layer_norm((x + input_bias) + residual) over the trailing `normalized_size` elements; residual
    of x's shape, input_bias/weight/bias of normalized_size elements (or None)."""
    x, residual = _elements(x), _elements(residual)
    if residual.shape != x.shape:
        raise ValueError(f"add_layer_norm: residual {residual.shape} does not match the input {x.shape}")
    rows, res, y = _rows(x, normalized_size), _rows(residual, normalized_size), _output(x.shape, out)
    weight, bias = _vector(weight, normalized_size), _vector(bias, normalized_size)
    input_bias = _vector(input_bias, normalized_size)
    library.get().add_layer_norm_f32(rows.shape[0], normalized_size, address_of(rows), _strides(rows)[0],
                                     _optional(input_bias), address_of(res), _strides(res)[0], address_of(y),
                                     _optional(weight), _optional(bias), eps)
    return y


def rms_norm(x, normalized_size: int, weight=None, eps: float = 1e-6, out=None) -> np.ndarray:
    x = _elements(x)
    rows, y = _rows(x, normalized_size), _output(x.shape, out)
    weight = _vector(weight, normalized_size)
    library.get().rms_norm_f32(rows.shape[0], normalized_size, address_of(rows), _strides(rows)[0], address_of(y),
                               _optional(weight), eps)
    return y


def scale_shift(x, scale, shift, activation: str = "none", out=None) -> np.ndarray:
    """act(x * scale[c] + shift[c]) for x (N, C, ...): inference batch norm."""
    x = np.ascontiguousarray(_elements(x))
    c = x.shape[1]
    scale, shift = _vector(scale, c), _vector(shift, c)
    y = _output(x.shape, out)
    library.get().scale_shift_f32(x.shape[0], c, math.prod(x.shape[2:]), address_of(x), address_of(scale),
                                  address_of(shift), _activation(activation), address_of(y))
    return y


def activation(x, name: str, out=None) -> np.ndarray:
    """act(x) elementwise, with the GEMM epilogue's activations ("gelu": x Phi(x) with erf, ...)."""
    x = np.ascontiguousarray(_elements(x))
    y = _output(x.shape, out)
    library.get().activation_f32(x.size, address_of(x), _activation(name), address_of(y))
    return y


def silu_mul(gate, up, out=None) -> np.ndarray:
    """silu(gate) * up (SwiGLU), gate and up of one shape: rows of contiguous elements at any
    uniform row stride (the halves of a stacked gate/up projection are read where they lie)."""
    gate, up = _elements(gate), _elements(up)
    if gate.shape != up.shape:
        raise ValueError(f"silu_mul: gate {gate.shape} and up {up.shape} differ")
    n = gate.shape[-1] if gate.ndim else 1
    g, u, y = _rows(gate, n), _rows(up, n), _output(gate.shape, out)
    if g.shape[0]:
        library.get().silu_mul_f32(g.shape[0], n, address_of(g), _strides(g)[0], address_of(u), _strides(u)[0],
                                   address_of(y))
    return y


def rope(x, cos, sin, out=None) -> np.ndarray:
    """x (..., t, d) * cos + rotate_half(x) * sin, cos and sin broadcastable to (t, d): rotary
    position embeddings. x's leading dims may be any uniform stride (a head view of a stacked
    projection is read where it lies); rows need contiguous elements."""
    x = _elements(x)
    if x.ndim < 2 or x.shape[-1] % 2:
        raise ValueError(f"rope: x must be (..., t, d) with d even, got {x.shape}")
    t, d = x.shape[-2:]
    cos, sin = (np.ascontiguousarray(np.broadcast_to(_elements(c), (t, d))) for c in (cos, sin))
    outer = x.size // (t * d) if t * d else 0
    lead = _collapse(x.shape[:-2], _strides(x)[:-2]) if x.ndim > 2 else (1, 0)
    if d > 1 and x.strides[-1] != 4 or lead is None:
        x = np.ascontiguousarray(x)
        lead = (outer, t * d)
    y = _output(x.shape, out)
    if outer:
        library.get().rope_f32(outer, t, d, address_of(x), lead[1], _strides(x)[-2], address_of(cos), address_of(sin),
                               address_of(y))
    return y


def add(a, b, out=None) -> np.ndarray:
    """a + b for float32 arrays of one shape."""
    a, b = np.ascontiguousarray(_elements(a)), np.ascontiguousarray(_elements(b))
    if a.shape != b.shape:
        raise ValueError(f"add: {a.shape} and {b.shape} differ")
    y = _output(a.shape, out)
    library.get().add_f32(a.size, address_of(a), address_of(b), address_of(y))
    return y


def clamp(x, lo: float, hi: float, out=None) -> np.ndarray:
    x = np.ascontiguousarray(_elements(x))
    y = _output(x.shape, out)
    library.get().clamp_f32(x.size, address_of(x), lo, hi, address_of(y))
    return y


# --- attention -----------------------------------------------------------------------------------
_MASK_KINDS = {np.dtype(np.bool_): 1, _F32: 2}


def attention(q, k, v, mask=None, scale: float | None = None, is_causal: bool = False, out=None) -> np.ndarray:
    """softmax(q @ k^T * scale + mask) @ v for q (N, H, L, D), k (N, Hkv, S, D), v (N, Hkv, S, Dv), any
    strides (BERT's transposed head views pass without a copy); H a multiple of Hkv: query head h
    reads KV head h // (H // Hkv) (grouped-query attention, K/V never repeated). mask: None, bool
    (True = attend) or float32 (added), broadcastable to (N, H, L, S); is_causal keeps key j <= query
    i. Returns (N, L, H, Dv), contiguous: the heads already side by side for the output projection."""
    q, k, v = _elements(q), _elements(k), _elements(v)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"attention: q, k, v must be (N, H, L, D), got {q.shape}, {k.shape}, {v.shape}")
    (n, h, l, d), (_, hkv, s, _), dv = q.shape, k.shape, v.shape[-1]
    if k.shape[0] != n or v.shape[:3] != k.shape[:3] or k.shape[3] != d or not hkv or h % hkv:
        raise ValueError(f"attention: shapes q {q.shape}, k {k.shape}, v {v.shape} do not match")
    mask_args = (None, 0, 0, 0, 0, 0)
    if mask is not None:
        mask = np.asarray(mask)
        kind = _MASK_KINDS.get(mask.dtype)
        if kind is None:
            raise TypeError(f"attention: the mask must be bool or float32, got {mask.dtype}")
        mask = np.broadcast_to(mask, (n, h, l, s))
        if any(st % mask.itemsize for st in mask.strides):
            mask = np.ascontiguousarray(mask)
        mask_args = (address_of(mask), kind) + tuple(st // mask.itemsize for st in mask.strides)
    scale = 1 / math.sqrt(d) if scale is None else scale
    y = _output((n, l, h, dv), out)
    call_with_scratch(library.get().attention_f32, n, h, hkv, l, s, d, dv, address_of(q), *_strides(q), address_of(k),
                       *_strides(k), address_of(v), *_strides(v), *mask_args, int(bool(is_causal)), float(scale),
                       address_of(y))
    return y


# --- in-place row copies --------------------------------------------------------------------------
def index_copy(dest, index, source, axis: int) -> bool:
    """dest's rows `index` (int64) along `axis` = source's, in place, when the C kernel can address
    them (float32, the dims after `axis` one contiguous run in both, the dims before it one
    stride); False when it cannot (the caller copies another way). IndexError for an index
    outside [0, dest.shape[axis]), before anything is written."""
    if dest.dtype != _F32 or source.dtype != _F32 or index.dtype != np.int64 or index.ndim != 1:
        return False
    inner = math.prod(dest.shape[axis + 1:])
    d_inner, s_inner = (_collapse(a.shape[axis + 1:], _strides(a)[axis + 1:]) or (0, 0) for a in (dest, source))
    d_outer, s_outer = (_collapse(a.shape[:axis], _strides(a)[:axis]) for a in (dest, source))
    if inner > 1 and (d_inner[1] != 1 or s_inner[1] != 1) or d_outer is None or s_outer is None or \
            any(st % 4 for a in (dest, source) for st in a.strides):
        return False
    index = np.ascontiguousarray(index)
    outer = math.prod(dest.shape[:axis])
    bad = library.get().index_copy_f32(outer, dest.shape[axis], inner, address_of(dest), d_outer[1],
                                       dest.strides[axis] // 4, address_of(index), index.size, address_of(source),
                                       s_outer[1], source.strides[axis] // 4)
    if bad:
        raise IndexError(f"index {int(index[bad - 1])} is out of range for dimension {axis} of size "
                         f"{dest.shape[axis]}")
    return True


# --- half-type conversions (bit patterns as uint16) ---------------------------------------------------
def _bits(a, dtype) -> np.ndarray:
    a = np.ascontiguousarray(a)
    if a.dtype != dtype:
        raise TypeError(f"expected {np.dtype(dtype)}, got {a.dtype}")
    return a


def _convert(a, src, dst, kernel: str) -> np.ndarray:
    a = _bits(a, src)
    y = np.empty(a.shape, dst)
    getattr(library.get(), kernel)(a.size, address_of(a), address_of(y))
    return y


def f16_to_f32(a) -> np.ndarray:
    return _convert(a, np.float16, np.float32, "f16_to_f32")


def bf16_to_f32(bits) -> np.ndarray:
    return _convert(bits, np.uint16, np.float32, "bf16_to_f32")


def f32_to_bf16(a) -> np.ndarray:
    return _convert(a, np.float32, np.uint16, "f32_to_bf16")
