"""The simd backend: the NumPy backend's allocator (storage is a flat NumPy array, shared
with the numpy backend) and one kernel table in which the C kernels take the float32 ops
they cover; every other op and dtype runs the NumPy kernel on the same storage.
"""
from __future__ import annotations

import math

import numpy as np

from ... import dtypes
from ...ops import BINARY, REDUCTIONS, UNARY, Op, check_tables
from ..numpy import kernels as numpy_kernels
from ..numpy.backend import NumpyBackend
from . import kernels as C
from . import library, quantized
from .heap import HeapLibrary
from .heap_program import PoolProgram, Unplaceable
from .program import Program, join

# --- primitive ops ----------------------------------------------------------------------------------
_numpy_matmul, _numpy_conv2d = numpy_kernels.KERNELS[Op.MATMUL], numpy_kernels.KERNELS[Op.CONV2D]
_numpy_cast = numpy_kernels.KERNELS[Op.CAST]


def _matmul(a, b, *, dtype):
    return C.gemm(a, b) if dtype is dtypes.float32 else _numpy_matmul(a, b, dtype=dtype)


def _conv2d(x, w, *, dtype, stride, dilation, groups):
    if dtype is not dtypes.float32:
        return _numpy_conv2d(x, w, dtype=dtype, stride=stride, dilation=dilation, groups=groups)
    return C.conv2d(x, w, stride=stride, dilation=dilation, groups=groups)


_HALF_CASTS = {(dtypes.float16, dtypes.float32): C.f16_to_f32, (dtypes.bfloat16, dtypes.float32): C.bf16_to_f32,
               (dtypes.float32, dtypes.bfloat16): C.f32_to_bf16}


def _cast(a, *, dtype, src):
    convert = _HALF_CASTS.get((src, dtype))
    return convert(a) if convert is not None else _numpy_cast(a, dtype=dtype, src=src)


_numpy_index_copy = numpy_kernels.KERNELS[Op.INDEX_COPY]


def _index_copy(dest, index, source, *, dtype, axis):       # in place: float32 rows in C (a KV cache)
    if not C.index_copy(dest, index, source, axis):
        _numpy_index_copy(dest, index, source, dtype=dtype, axis=axis)
    library.get().written(dest)                          # copies of it elsewhere (the pool's heap) go stale


_numpy_add = numpy_kernels.KERNELS[Op.ADD]


def _add(a, b, *, dtype):           # a residual connection in C (one call of a captured step's program)
    if a.dtype == b.dtype == np.float32 and a.shape == b.shape and a.flags.c_contiguous and b.flags.c_contiguous:
        return C.add(a, b)
    return _numpy_add(a, b, dtype=dtype)


_add.ufunc = np.add                 # engine.graph replays a broadcast one as np.add(..., out=)


# Ops the C kernels do not cover run the NumPy kernel on the shared storage (declared here;
# the table is checked complete below).
NUMPY_OPS = (UNARY | BINARY | REDUCTIONS) - {Op.ADD} | {Op.CONTIGUOUS, Op.WHERE, Op.TOPK, Op.CAT, Op.PAD, Op.INDEX_SELECT}
KERNELS = {**{op: numpy_kernels.KERNELS[op] for op in NUMPY_OPS},
           Op.MATMUL: _matmul, Op.CONV2D: _conv2d, Op.CAST: _cast, Op.INDEX_COPY: _index_copy, Op.ADD: _add}


# --- fused kernels (engine.functions / engine.nn.functional call them with float32 tensors) ------------
def _softmax(x, *, dim):
    if x.dtype != np.float32:                       # float64: the composite's formula, in NumPy
        e = np.exp(x - np.max(x, axis=dim, keepdims=True))
        return e / np.sum(e, axis=dim, keepdims=True)
    return C.softmax(x, dim)


def _layer_norm(x, *params, normalized_dims, eps, has_weight, has_bias):
    weight = params[0] if has_weight else None
    bias = params[int(has_weight)] if has_bias else None
    return C.layer_norm(x, math.prod(x.shape[x.ndim - normalized_dims:]), weight, bias, eps)


def _add_layer_norm(x, residual, *params, normalized_dims, eps, has_input_bias, has_weight, has_bias):
    input_bias, weight, bias = _optional_params(params, has_input_bias, has_weight, has_bias)
    return C.add_layer_norm(x, residual, math.prod(x.shape[x.ndim - normalized_dims:]), weight, bias, eps,
                            input_bias)


def _optional_params(params, *present):
    """The optional tensors of a fused call, None where absent (they come in this order)."""
    it = iter(params)
    return [next(it) if p else None for p in present]


def _rms_norm(x, *params, normalized_dims, eps, has_weight):
    return C.rms_norm(x, math.prod(x.shape[x.ndim - normalized_dims:]), params[0] if has_weight else None, eps)


def _linear(x, weight, *bias):      # x (..., K) @ weight (N, K).T + bias (N,); weight float32 or float16
    if x.ndim == 2:
        return C.linear(x, weight, bias[0] if bias else None)
    out = C.linear(x.reshape(math.prod(x.shape[:-1]), x.shape[-1]), weight, bias[0] if bias else None)
    return out.reshape(x.shape[:-1] + weight.shape[:1])


def _conv2d_bias(x, weight, *bias, stride, pads, dilation, groups, activation):
    return C.conv2d(x, weight, bias[0] if bias else None, stride, pads, dilation, groups, activation)


def _per_channel(x, a) -> bool:
    """a broadcasts against x (N, C, ...) as one value per channel: shape (C, 1, ..., 1) or shorter"""
    shape = (1,) * (x.ndim - a.ndim) + a.shape
    return x.ndim >= 2 and len(shape) == x.ndim and shape[1] == x.shape[1] and math.prod(shape) == x.shape[1]


def _mul_add(x, a, b):
    if x.dtype == a.dtype == b.dtype == np.float32 and _per_channel(x, a) and _per_channel(x, b):
        return C.scale_shift(x, a.reshape(-1), b.reshape(-1))
    return numpy_kernels.FUSED["mul_add"](x, a, b)


def _gelu(x, *, approximate):
    return C.activation(x, "gelu" if approximate == "none" else "gelu_tanh")


def _silu(x):
    return C.activation(x, "silu")


def _attention(q, k, v, *mask, scale, is_causal):  # -> (N, L, H, Dv)
    return C.attention(q, k, v, mask[0] if mask else None, scale, is_causal)


def _hardtanh(x, *, min_val, max_val):
    if x.dtype == np.float32:
        return C.clamp(x, min_val, max_val)
    return numpy_kernels.FUSED["hardtanh"](x, min_val=min_val, max_val=max_val)


FUSED = {**quantized.KERNELS,                    # linear_q, embedding_q (engine.ops)
         "mul_add": _mul_add, "hardtanh": _hardtanh, "softmax": _softmax, "layer_norm": _layer_norm,
         "rms_norm": _rms_norm, "linear": _linear, "linear_f16w": _linear, "conv2d": _conv2d_bias, "gelu": _gelu, "silu": _silu,
         "silu_mul": C.silu_mul, "rope": C.rope, "attention": _attention, "add_layer_norm": _add_layer_norm}
check_tables("simd", KERNELS, FUSED)


def _in_order(parts):
    def call():
        for part in parts:
            part()
    return call


class SimdBackend(NumpyBackend):
    name = "simd"
    kernels = KERNELS
    fused = FUSED

    # --- engine.graph: a step's C calls replayed as recorded -------------------------------------
    native_calls = staticmethod(library.recording)

    @staticmethod
    def bind_native(calls, known):
        """The recorded C calls of one step as a prepared call, when every pointer they were given
        lies in the `known` arrays (the step's inputs, outputs and parameters, which the graph
        keeps); None when one does not (the kernel passed a temporary copy: it must run again).
        A call that takes scratch gets its own, of the size it asks for. Calls on the loaded
        library become a Program (one crossing for them all, joined with its neighbours by
        `join_prepared`); a call of the browser's kernel pool its prepared descriptor (heap.py)."""
        spans = [(a.ctypes.data, a.ctypes.data + a.nbytes) for a in known if isinstance(a, np.ndarray)]
        steps = []                                      # [name, C function, arguments, its scratch]
        pooled = []                                     # the pool's prepared calls, in order
        for name, fn, args, result in calls:
            restype, types = library.SIGNATURES[name]
            scratch = name in library.SCRATCH
            if result and scratch:                      # it asked for more scratch and wrote nothing
                continue
            if result:                                  # it reported bad input
                return None
            args = list(args)
            for value, kind in zip(args[:len(args) - 2 * scratch], types):
                if kind is library.POINTER and value and not any(lo <= value < hi for lo, hi in spans):
                    return None
            own = None
            if scratch:
                own = np.empty(max(fn(*args[:-2], None, 0), 1), np.float32)   # the size it needs
                args[-2:] = own.ctypes.data, own.size
            prepared = getattr(fn, "prepared", None)          # a call of the browser's kernel pool (heap.py)
            prepared = prepared(*args) if prepared is not None else None
            steps.append([name, fn, args, own])
            pooled.append(prepared)
        if not steps:
            return None
        loaded = library.get()
        if not any(pooled):
            bound = Program(loaded, steps)
        else:
            parts = join([prepared or Program(loaded, [step]) for prepared, step in zip(pooled, steps)])
            bound = parts[0] if len(parts) == 1 else _in_order(parts)
        bound.native = (steps, known)                   # for whole_graph
        return bound

    join_prepared = staticmethod(join)

    @staticmethod
    def replays_whole() -> bool:
        """Whether a whole pass replayed from a graph beats running it eagerly: in a page whose
        kernel pool has threads to use (a replay is a program on all of them, heap_program.py)."""
        loaded = library.get()
        return isinstance(loaded, HeapLibrary) and loaded.threads > 1

    @staticmethod
    def whole_graph(calls, inputs, outputs, slots):
        """A captured graph's prepared calls (C calls from bind_native, `.native`; NumPy steps,
        `.host`) as one call of the library's own where it has one (in a page with the kernel
        pool: the whole program on the pool, heap_program.py); None to replay them as they are."""
        loaded = library.get()
        if not isinstance(loaded, HeapLibrary):
            return None
        try:
            return PoolProgram(loaded, calls, inputs, outputs, slots)
        except Unplaceable as e:
            loaded.unplaced = str(e)               # why the last graph replays call by call (profiles, tests)
            return None


BACKEND = SimdBackend()
