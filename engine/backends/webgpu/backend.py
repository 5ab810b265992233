"""The webgpu backend: tensors live in device buffers; one kernel table maps every primitive op
(and the fused kernels) to WGSL shaders (kernels.py). Data leaves the device only through
copy_out (`.numpy()`, `.item()`), which the device layer counts.

Every element on the device is 32 bits: float32 as f32; float16 and bfloat16 as the f32 that
holds their value exactly (casts round on the device); int64, int32, int16 and int8 as i32
(int64 values must fit in 32 bits: a clear error otherwise); uint8 and bool as u32. WebGPU has
no float64: such tensors are refused, as torch's MPS backend does.

Except a float16 weight where the device has shader-f16: a 2-D float16 tensor copied in (a
checkpoint's weight that the model keeps in float16, as Whisper does where "linear_f16w" is
offered) stays half-width (Storage.half, f16 views): half the memory and the bytes a product
reads. linear_f16w multiplies by it as it is (quantized.linear_f16, kernels.gemm), embedding's
index_select, cat (Whisper's stacked projections) and contiguous copy it half-width, a cast to
float32 widens it in one pass, and every other op reads a float32 copy made for that op
(`wide`); an index_copy into it widens it for good.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from ... import dtypes
from ...errors import BackendError
from ...layout import Layout
from ...ops import Op, check_tables
from . import kernels as K
from . import quantized as Q
from .gpu import Gpu, GpuBuffer

TYPE = {dtypes.float32: "f32", dtypes.float16: "f32", dtypes.bfloat16: "f32", dtypes.int64: "i32", dtypes.int32: "i32",
        dtypes.int16: "i32",
        dtypes.int8: "i32", dtypes.uint8: "u32", dtypes.bool_: "u32"}
_BY_STORAGE = {d.storage: d for d in TYPE}            # numpy storage dtype -> engine dtype
_DEVICE_NUMPY = {"f32": np.float32, "i32": np.int32, "u32": np.uint32}
SHADOW_LIMIT = 1 << 16                                # integer tensors up to this size keep a host copy
SHARED_LIMIT = 64                                     # bytes: tensors this small share one buffer per value
HALF = "shader-f16"                                   # the device feature that keeps float16 weights half-width


class Storage:
    """A tensor's device buffer, its engine dtype, and (small integer tensors made on the
    host) the host values, so index checks need no read-back. half: the buffer holds float16
    values as f16, two bytes each (a float16 weight on a device with shader-f16)."""
    __slots__ = ("buf", "dtype", "host", "half")

    def __init__(self, buf: GpuBuffer, dtype: dtypes.DType, host: np.ndarray | None = None, half: bool = False):
        self.buf, self.dtype, self.host, self.half = buf, dtype, host, half


def _to_device_values(raw: np.ndarray, dtype: dtypes.DType) -> np.ndarray:
    if dtype is dtypes.bfloat16:
        return dtypes.bf16_bits_to_f32(raw)
    if dtype is dtypes.int64 and raw.size and (raw.min() < -2**31 or raw.max() >= 2**31):
        bad = raw[(raw < -2**31) | (raw >= 2**31)].flat[0]
        raise BackendError(f"int64 value {int(bad)} does not fit the webgpu backend's 32-bit integers")
    return raw.astype(_DEVICE_NUMPY[TYPE[dtype]], copy=False)


def _from_device_values(a: np.ndarray, dtype: dtypes.DType) -> np.ndarray:
    if dtype is dtypes.bfloat16:
        return dtypes.f32_to_bf16_bits(a)
    return a.astype(dtype.storage)


def _values(data: bytes, storage: "Storage", layout: Layout, lo: int) -> np.ndarray:
    """The layout's elements from the bytes of the first elements of the storage's buffer (its
    device values, or float16 values as they are where it is half-width)."""
    device = np.dtype(np.float16 if storage.half else _DEVICE_NUMPY[TYPE[storage.dtype]])
    flat = np.frombuffer(data, device)[lo:] if data else np.empty(0, device)
    view = np.lib.stride_tricks.as_strided(flat, layout.shape, tuple(device.itemsize * s for s in layout.strides)) \
        if layout.numel else np.empty(layout.shape, device)
    values = np.array(view, copy=True)
    return values if storage.half else _from_device_values(values, storage.dtype)


def _width(storage: "Storage") -> int:
    """Bytes per element in the storage's buffer."""
    return 2 if storage.half else 4


class _Launched:
    """A graph's output on its way back (WebGPUBackend.launch)."""

    def __init__(self, pending, storage, layout, lo):
        self.pending, self.storage, self.layout, self.lo = pending, storage, layout, lo

    def result(self) -> np.ndarray:
        return _values(self.pending.result(), self.storage, self.layout, self.lo)


class WebGPUBackend:
    name = "webgpu"
    storage = "webgpu"

    def __init__(self, gpu: Gpu):
        self.gpu = gpu
        self.kernels = KERNELS
        self.fused = FUSED

    # --- allocator ------------------------------------------------------------------
    def copy_in(self, raw: np.ndarray) -> Storage:
        raw = np.ascontiguousarray(raw)
        dtype = _BY_STORAGE.get(raw.dtype)
        if dtype is None:
            raise BackendError(f"{raw.dtype} tensors are not supported on webgpu (WebGPU has no 64-bit "
                               "floats); use float32")
        if dtype is dtypes.float16 and raw.ndim == 2 and 4 * raw.size > SHARED_LIMIT and HALF in self.gpu.features:
            return Storage(self.gpu.upload(raw), dtype, half=True)     # a weight: kept half-width
        host = raw.copy() if dtype.kind in "iub" and raw.size <= SHADOW_LIMIT else None
        values = _to_device_values(raw.reshape(-1), dtype)
        # scalars (x + 1, eps, ...) recur every forward pass: tensors are immutable, so equal small
        # ones share a cached buffer instead of a new upload each time
        buf = self.gpu.params(values) if values.nbytes <= SHARED_LIMIT else self.gpu.upload(values)
        return Storage(buf, dtype, host)

    def quantized_in(self, raw: np.ndarray, qtype: str, rows: int) -> Q.QuantizedBuffer:
        """GGML blocks (engine.quantized) in the layout the quantized shaders read (quantized.py)."""
        return Q.upload(self.gpu, raw, qtype)

    def quantized_out(self, storage: Q.QuantizedBuffer, qtype: str, rows: int) -> np.ndarray:
        return Q.download(self.gpu, storage)

    def view(self, storage: Storage, layout: Layout) -> K.View:
        return K.View(storage.buf, layout.shape, layout.strides, layout.offset,
                      "f16" if storage.half else TYPE[storage.dtype])

    def wide(self, v: K.View) -> K.View:
        """v itself, or a half-width view's values widened to a contiguous f32 copy (exact)."""
        if v.type != "f16":
            return v
        return K.View.contiguous(K.elementwise(self.gpu, "f32(a)", [v], "f32"), v.shape)

    def widen_for_good(self, storage: Storage) -> None:
        """A half-width storage held as f32 from now on (before it is written in place)."""
        if storage.half:
            count = storage.buf.size // 2
            storage.buf = K.elementwise(self.gpu, "f32(a)", [K.View(storage.buf, (count,), (1,), 0, "f16")], "f32")
            storage.half = False

    def copy_out(self, storage: Storage, layout: Layout) -> np.ndarray:
        """Reads back the span the layout touches (counted by the device layer)."""
        lo, hi = layout.span()
        return _values(self.gpu.read(storage.buf, _width(storage) * hi) if hi > lo else b"", storage, layout, lo)

    def sync(self) -> None:
        """Wait until every recorded dispatch has run."""
        self.gpu.synchronize()

    # --- engine.graph: a captured function's dispatches submitted again -------------------------
    @contextlib.contextmanager
    def recording(self):
        """The dispatches made inside the block, kept (with their buffers) for replay()."""
        self.gpu.flush()                                   # what came before is not the graph's
        dispatches = self.gpu.record()
        try:
            yield dispatches
        finally:
            self.gpu.stop_recording()

    def own_input(self, storage: Storage) -> None:
        """Before capture: a small tensor sharing a buffer with every tensor of its value gets its
        own, since replay will overwrite it."""
        if self.gpu.is_shared(storage.buf):
            storage.buf = self.gpu.upload(np.frombuffer(self.gpu.read(storage.buf, storage.buf.size), np.uint8))

    def replay(self, dispatches: list) -> None:
        self.gpu.replay(dispatches)

    @staticmethod
    def replays_whole() -> bool:
        """A whole forward pass replayed from its captured dispatches (engine.graph.Passes) costs
        no Python per kernel, against ~50 us a kernel recorded eagerly: always worth it here."""
        return True

    def launch(self, dispatches: list, storage: Storage, layout: Layout) -> "_Launched":
        """engine.graph's Graph.launch: the dispatches and the output's read-back in one
        submission; the answer's result() waits for it."""
        lo, hi = layout.span()
        return _Launched(self.gpu.launch(dispatches, storage.buf, _width(storage) * hi), storage, layout, lo)

    def write_input(self, storage: Storage, values: np.ndarray) -> None:
        """A graph input's new values (its whole buffer, contiguous), written on the device; the
        host copy of a small integer tensor follows."""
        values = np.ascontiguousarray(values, storage.dtype.storage).reshape(-1)
        if storage.half:                                   # float16 bits, padded to whole words
            data = values.view(np.uint8)
            self.gpu.write(storage.buf, np.concatenate([data, np.zeros(-data.size % 4, np.uint8)]))
            return
        self.gpu.write(storage.buf, _to_device_values(values, storage.dtype))
        if storage.host is not None:
            storage.host = values.copy()

    def counters(self) -> dict:
        """The device layer's counts so far (submissions, bytes read back, dispatches recorded from
        Python, ...): a caller takes the difference over what it measures."""
        return dict(self.gpu.stats)

    def describe(self) -> str:
        return f"webgpu on {self.gpu.info}"

    # --- kernels --------------------------------------------------------------------
    def run(self, op, inputs, dtype, params):
        views = [self.view(t._buf, t._layout) for t in inputs]
        half = False
        for v in views:
            if v.type == "f16":                           # a half-width weight among the inputs
                views, half = self._half_inputs(op, inputs, views)
                break
        outs = self.kernels[op](self, *views, dtype=dtype, sources=[t._buf for t in inputs], **params)
        if outs is None:                                  # INDEX_COPY wrote into its first input
            return []
        outs = outs if isinstance(dtype, tuple) else [outs]
        out_dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
        return [(Storage(buf, d, half=half), shape) for (buf, shape), d in zip(outs, out_dtypes)]

    def _half_inputs(self, op, inputs, views):
        """(views, whether the output is half-width) for an op with a half-width input: the ops
        of _HALF_OPS read f16 as it is (cat only when every part is half), the others a float32
        copy; an index_copy into one widens its storage for good."""
        if op is Op.INDEX_COPY:
            self.widen_for_good(inputs[0]._buf)
        elif op in _HALF_OPS and (op is not Op.CAT or all(v.type == "f16" for v in views)):
            return views, _HALF_OPS[op]
        return [self.wide(self.view(t._buf, t._layout)) for t in inputs], False

    def run_fused(self, name, inputs, dtype, params):
        views = [self.view(t._buf, t._layout) for t in inputs]
        if name != "linear_f16w":                          # only it reads a half-width weight as it is
            views = [self.wide(v) for v in views]
        if name == "embedding_q":                          # checks its ids on the host copy
            params = {**params, "sources": [t._buf for t in inputs]}
        buf, shape = self.fused[name](self, *views, **params)
        return [(Storage(buf, dtype), shape)]

    # --- helpers for the kernel table ----------------------------------------------
    def contiguous(self, v: K.View) -> K.View:
        if v.is_contiguous:
            return v
        return K.View.contiguous(K.elementwise(self.gpu, "a", [v], v.type), v.shape, v.type)


# --- elementwise expressions -----------------------------------------------------------------
def _wrap(expr: str, dtype: dtypes.DType) -> str:
    """expr's 32-bit result brought into dtype's range, as NumPy's fixed-width arithmetic does."""
    if dtype is dtypes.int8:
        return f"((({expr}) << 24u) >> 24u)"
    if dtype is dtypes.int16:
        return f"((({expr}) << 16u) >> 16u)"
    if dtype is dtypes.uint8:
        return f"(({expr}) & 0xffu)"
    if dtype is dtypes.bool_:
        return f"select(0u, 1u, ({expr}) != 0u)"
    if dtype is dtypes.float16:
        return f"round_f16({expr})"
    if dtype is dtypes.bfloat16:
        return f"round_bf16({expr})"
    return expr


def _f32(x: float) -> str:
    """An exact f32 literal (NaN and infinities included)."""
    return f"f32_bits({K.f32_bits(x)}u)"


_FLOAT_UNARY = {Op.EXP: "exp_(a)", Op.LOG: "log_(a)", Op.SQRT: "sqrt_(a)", Op.SIN: "sincos_(a, false)", Op.COS: "sincos_(a, true)",
                Op.TANH: "tanh_(a)", Op.ERF: "erf_(a)", Op.RECIPROCAL: "div_(1.0, a)", Op.FLOOR: "floor(a)",
                Op.CEIL: "ceil(a)"}


def _unary(op):
    def kernel(be, x, *, dtype, sources):
        t = x.type
        if op is Op.NEG:
            expr = "(0u - a)" if t == "u32" else "-a"
        elif op is Op.ABS:
            expr = "a" if t == "u32" else "abs(a)"
        elif op is Op.LOGICAL_NOT:
            expr = f"select(0u, 1u, a == {t}(0))"
        else:
            if t != "f32":
                raise BackendError(f"{op.name.lower()} needs a floating tensor on webgpu, got {dtype}")
            expr = _FLOAT_UNARY[op]
        return K.elementwise(be.gpu, _wrap(expr, dtype), [x], TYPE[dtype]), x.shape
    return kernel


_COMPARE = {Op.EQ: "==", Op.NE: "!=", Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">="}
_ARITH = {Op.ADD: "a + b", Op.SUB: "a - b", Op.MUL: "a * b", Op.AND: "a & b", Op.OR: "a | b", Op.XOR: "a ^ b"}


def _binary(op):
    def kernel(be, x, y, *, dtype, sources):
        t = x.type
        if op in _COMPARE:
            cond = f"a {_COMPARE[op]} b"
            if t == "f32":                               # NaN compares unequal to everything
                cond = f"(is_nan(a) || is_nan(b) || {cond})" if op is Op.NE else \
                    f"(!is_nan(a) && !is_nan(b) && {cond})"
            expr = f"select(0u, 1u, {cond})"
        elif op in _ARITH:
            expr = _ARITH[op]
            if dtype is dtypes.bool_ and op in (Op.ADD, Op.MUL):   # bool + bool is or, * is and
                expr = "a | b" if op is Op.ADD else "a & b"
        elif op is Op.DIV:
            expr = "div_(a, b)" if t == "f32" else "div_(f32(a), f32(b))"
        elif op is Op.POW:
            expr = "pow_(a, b)" if t == "f32" else "ipow(a, b)"
        elif op in (Op.MAXIMUM, Op.MINIMUM):
            name = "max" if op is Op.MAXIMUM else "min"
            expr = f"{name}_(a, b)" if t == "f32" else f"{name}(a, b)"
        else:
            raise BackendError(f"{op} is not a binary op")
        return K.elementwise(be.gpu, _wrap(expr, dtype), [x, y], TYPE[dtype]), x.shape
    return kernel


def _where(be, c, x, y, *, dtype, sources):
    return K.elementwise(be.gpu, "select(c, b, a != 0u)", [c, x, y], TYPE[dtype]), x.shape


def _cast(be, x, *, dtype, src, sources):
    if x.type == "f16":                                   # a half-width weight: widened in one pass
        if dtype is dtypes.float32:
            return K.elementwise(be.gpu, "f32(a)", [x], "f32"), x.shape
        x = be.wide(x)
    s, t = x.type, TYPE[dtype]
    if dtype is dtypes.bool_:
        expr = "select(0u, 1u, a != 0.0 || is_nan(a))" if s == "f32" else f"select(0u, 1u, a != {s}(0))"
    elif t == "f32":
        expr = "a" if s == "f32" else "f32(a)"
    elif t == "i32":
        expr = "a" if s == "i32" else "i32(a)"
    else:                                                 # uint8 from anything
        expr = "u32(i32(a))" if s == "f32" else ("u32(a)" if s == "i32" else "a")
    if dtype is src or (src in (dtypes.float16, dtypes.bfloat16) and dtype is dtypes.float32):
        expr = "a"                                         # the f32 already holds the exact value
    return K.elementwise(be.gpu, _wrap(expr, dtype), [x], t), x.shape


def _contiguous(be, x, *, dtype, sources):
    return K.elementwise(be.gpu, "a", [x], x.type), x.shape


# --- reductions --------------------------------------------------------------------------------
def _out_shape(shape, axes, keepdim):
    return tuple(1 if d in axes else n for d, n in enumerate(shape) if keepdim or d not in axes)


def _reduce(name):
    def kernel(be, x, *, dtype, axes, keepdim, sources):
        axes = tuple(sorted(a % len(x.shape) for a in axes)) if x.shape else ()
        acc = ("f32" if x.type == "f32" else "i32") if name == "sum" else x.type
        if name != "sum" and x.numel == 0:
            raise ValueError(f"{name} of an empty tensor")
        return K.reduce(be.gpu, name, x, axes, acc, TYPE[dtype]), _out_shape(x.shape, axes, keepdim)
    return kernel


def _argreduce(name):
    def kernel(be, x, *, dtype, axis, keepdim, sources):
        if x.numel == 0:
            raise ValueError(f"attempt to get {name} of an empty sequence")
        axes = tuple(range(len(x.shape))) if axis is None else (axis % max(len(x.shape), 1),)
        if axis is None and keepdim:
            shape = (1,) * len(x.shape)
        elif axis is None:
            shape = ()
        else:
            shape = _out_shape(x.shape, axes, keepdim)
        if not x.shape:                                      # a 0-d tensor: index 0
            return K.fill(be.gpu, 1, 0), shape
        return K.reduce(be.gpu, name, x, axes, x.type, "i32"), shape
    return kernel


def _topk(be, x, *, dtype, axis, k, largest, sorted, sources):  # noqa: A002 - torch's name
    axis = axis % len(x.shape)
    values, indices, shape = K.topk(be.gpu, x, axis, k, largest)
    return [(values, shape), (indices, shape)]


# --- data movement -------------------------------------------------------------------------------
def _cat(be, *views, dtype, axis, sources):
    axis = axis % len(views[0].shape)
    shape = list(views[0].shape)
    shape[axis] = sum(v.shape[axis] for v in views)
    out = be.gpu.buffer(K.itemsize(views[0].type) * math.prod(shape))      # half-width parts: a half-width whole
    strides, start = K.contiguous_strides(shape), 0
    for v in views:
        K.scatter(be.gpu, v, K.View(out, v.shape, strides, start * strides[axis], v.type))
        start += v.shape[axis]
    return out, tuple(shape)


def _fill_bits(value, dtype: dtypes.DType) -> int:
    """The 32 device bits of `value` in dtype (converted as the numpy backend's pad does)."""
    src = dtypes.float64 if dtype.is_floating_point else dtypes.int64
    raw = dtypes.cast_numpy(np.array(value, src.storage).reshape(1), src, dtype)
    return int(_to_device_values(raw, dtype).view(np.uint32)[0])


def _pad(be, x, *, dtype, pads, value, sources):
    shape = tuple(n + lo + hi for n, (lo, hi) in zip(x.shape, pads))
    out = K.fill(be.gpu, math.prod(shape), _fill_bits(value, dtype))
    strides = K.contiguous_strides(shape)
    K.scatter(be.gpu, x, K.View(out, x.shape, strides, sum(lo * s for (lo, _), s in zip(pads, strides)), x.type))
    return out, shape


def _index_values(be, source: Storage, index: K.View) -> np.ndarray:
    """An index tensor's values: its host copy when made on the host, else read back."""
    host = source.host
    if host is not None:
        return np.lib.stride_tricks.as_strided(host[index.offset:], index.shape,
                                               tuple(host.itemsize * s for s in index.strides))
    return be.copy_out(source, Layout(index.shape, index.strides, index.offset))


def _index_select(be, x, index, *, dtype, axis, sources):
    axis = axis % len(x.shape)
    n = x.shape[axis]
    values = _index_values(be, sources[1], index)
    if values.size and (values.min() < -n or values.max() >= n):
        bad = values[(values < -n) | (values >= n)][0]
        raise IndexError(f"index {int(bad)} is out of range for dimension {axis} of size {n}")
    return K.gather(be.gpu, x, axis, index)


def _index_copy(be, dest, index, source, *, dtype, axis, sources):
    n = dest.shape[axis]
    if sources[1].host is not None:                    # checked when the host has the values
        values = _index_values(be, sources[1], index)
        if values.size and (values.min() < 0 or values.max() >= n):
            bad = values[(values < 0) | (values >= n)][0]
            raise IndexError(f"index {int(bad)} is out of range for dimension {axis} of size {n}")
    target = sources[0]
    if 4 * dest.numel <= SHARED_LIMIT and be.gpu.is_shared(target.buf):   # small host-made tensors share
        # a buffer per value: this one gets its own before it is written
        target.buf = be.gpu.upload(np.frombuffer(be.gpu.read(target.buf, target.buf.size), np.uint8))
        dest = K.View(target.buf, dest.shape, dest.strides, dest.offset, dest.type)
    target.host = None                                 # the host shadow no longer holds the values
    K.index_copy(be.gpu, dest, axis, index, source)


# --- GEMM and convolution --------------------------------------------------------------------------
def _collapse(be, v: K.View, keep: int) -> K.View:
    """v (..., *last `keep` dims) as (B, *last) with one stride for B: the leading dims merged,
    copied only when they do not step uniformly."""
    lead = [(n, st) for n, st in zip(v.shape[:-keep], v.strides[:-keep]) if n != 1]
    if not all(lead[i][1] == lead[i + 1][1] * lead[i + 1][0] for i in range(len(lead) - 1)):
        v = be.contiguous(v)
        lead = [(0, v.strides[-keep - 1])]
    step = lead[-1][1] if lead else 0
    return K.View(v.buf, (math.prod(v.shape[:-keep]),) + v.shape[-keep:], (step,) + v.strides[-keep:], v.offset,
                  v.type)


def _matmul(be, a, b, *, dtype, sources):
    if a.type == "u32":
        raise BackendError(f"matmul of {dtype} tensors is not supported on webgpu")
    out_shape = a.shape[:-1] + b.shape[-1:]
    return K.gemm(be.gpu, _collapse(be, a, 2), _collapse(be, b, 2)), out_shape


def _conv2d(be, x, w, *, dtype, stride, dilation, groups, sources):
    if x.type != "f32":
        raise BackendError(f"conv2d of {dtype} tensors is not supported on webgpu")
    return K.conv2d(be.gpu, be.contiguous(x), be.contiguous(w), None, stride, ((0, 0), (0, 0)), dilation, groups)


# ops that read a half-width (f16) input as it is (run._half_inputs), and whether their output stays half
_HALF_OPS = {Op.CAST: False, Op.CONTIGUOUS: True, Op.CAT: True, Op.INDEX_SELECT: True}

KERNELS = {
    **{op: _unary(op) for op in (Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.SQRT, Op.SIN, Op.COS, Op.TANH, Op.ERF,
                                 Op.RECIPROCAL, Op.FLOOR, Op.CEIL, Op.LOGICAL_NOT)},
    **{op: _binary(op) for op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAXIMUM, Op.MINIMUM, Op.EQ, Op.NE,
                                  Op.LT, Op.LE, Op.GT, Op.GE, Op.AND, Op.OR, Op.XOR)},
    Op.CAST: _cast, Op.CONTIGUOUS: _contiguous, Op.WHERE: _where,
    Op.SUM: _reduce("sum"), Op.MAX: _reduce("max"), Op.MIN: _reduce("min"),
    Op.ARGMAX: _argreduce("argmax"), Op.ARGMIN: _argreduce("argmin"), Op.TOPK: _topk,
    Op.CAT: _cat, Op.PAD: _pad, Op.INDEX_SELECT: _index_select, Op.INDEX_COPY: _index_copy,
    Op.MATMUL: _matmul, Op.CONV2D: _conv2d,
}


# --- fused kernels (float32 tensors; see engine.ops) --------------------------------------------------
def _mul_add(be, x, a, b):
    views = [x, a.expand(x.shape), b.expand(x.shape)]
    return K.elementwise(be.gpu, "a * b + c", views, "f32"), x.shape


def _hardtanh(be, x, *, min_val, max_val):
    expr = f"select(clamp(a, {_f32(min_val)}, {_f32(max_val)}), a, is_nan(a))"
    return K.elementwise(be.gpu, expr, [x], "f32"), x.shape


def _softmax(be, x, *, dim):
    x = be.contiguous(x)
    dim = dim % len(x.shape)
    outer, n, inner = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1:])
    return K.rows(be.gpu, "softmax", x, outer, n, inner), x.shape


def _norm(kind):
    def kernel(be, x, *params, normalized_dims, eps, has_weight, has_bias=False):
        x = be.contiguous(x)
        n = math.prod(x.shape[len(x.shape) - normalized_dims:])
        weight = be.contiguous(params[0]) if has_weight else None
        bias = be.contiguous(params[int(has_weight)]) if has_bias else None
        return K.rows(be.gpu, kind, x, x.numel // n if n else 0, n, 1, weight, bias, eps), x.shape
    return kernel


def _add_layer_norm(be, x, residual, *params, normalized_dims, eps, has_input_bias, has_weight, has_bias):
    x, residual = be.contiguous(x), be.contiguous(residual)
    n = math.prod(x.shape[len(x.shape) - normalized_dims:])
    it = iter(params)
    input_bias, weight, bias = (be.contiguous(next(it)) if present else None
                                for present in (has_input_bias, has_weight, has_bias))
    return K.rows(be.gpu, "add_layer_norm", x, x.numel // n if n else 0, n, 1, weight, bias, eps, residual,
                  input_bias), x.shape


def _gelu(be, x, *, approximate):
    expr = f"activate(a, {K.ACTIVATIONS['gelu' if approximate == 'none' else 'gelu_tanh']}u)"
    return K.elementwise(be.gpu, expr, [x], "f32"), x.shape


def _silu(be, x):
    return K.elementwise(be.gpu, f"activate(a, {K.ACTIVATIONS['silu']}u)", [x], "f32"), x.shape


def _attention(be, q, k, v, *mask, scale, is_causal):   # -> (N, L, H, Ev)
    return K.attention(be.gpu, q, k, v, mask[0] if mask else None, scale, is_causal)


def _linear(be, x, weight, *bias):                  # x (..., K) @ weight (N, K).T + bias (N,)
    k, n = x.shape[-1], weight.shape[0]
    rows = _collapse(be, x, 1)                      # (rows, K)
    a = K.View(rows.buf, (1,) + rows.shape, (0,) + rows.strides, rows.offset, rows.type)
    b = K.View(weight.buf, (1, k, n), (0, weight.strides[1], weight.strides[0]), weight.offset, weight.type)
    return K.gemm(be.gpu, a, b, be.contiguous(bias[0]) if bias else None, "n"), x.shape[:-1] + (n,)


def _linear_f16w(be, x, weight, *bias):             # linear with a float16 weight (N, K)
    """A half-width weight read as it is, accumulating in f32: up to Q.MATVEC_ROWS rows of x
    stream it once (f16_matvec.wgsl), more go through the tiled GEMM (gemm_io.wgsl, widening it
    as it loads); a float16 weight held as f32 (no shader-f16) is plain linear."""
    if weight.type != "f16" or math.prod(x.shape[:-1]) > Q.MATVEC_ROWS or weight.strides[1] != 1:
        return _linear(be, x, weight, *bias)
    x2 = _collapse(be, x, 1)                                # (M, K)
    if x2.strides[1] != 1:
        x2 = be.contiguous(x2)
    out = Q.linear_f16(be.gpu, x2, be.contiguous(bias[0]) if bias else None, weight)
    return out, x.shape[:-1] + (weight.shape[0],)


def _conv2d_fused(be, x, weight, *bias, stride, pads, dilation, groups, activation):
    return K.conv2d(be.gpu, be.contiguous(x), be.contiguous(weight), be.contiguous(bias[0]) if bias else None,
                    stride, pads, dilation, groups, activation)


def _select_token(be, logits, marks, state, config, ids, positions):   # -> (4,): engine/sampler.py
    logits = be.contiguous(logits)
    if logits.offset:
        logits = K.View.contiguous(K.elementwise(be.gpu, "a", [logits], "f32"), logits.shape)
    vocab = logits.numel
    scratch = be.gpu.buffer(4 * vocab)                   # the filtered logits (kept by the dispatch)
    out = be.gpu.buffer(16)
    be.gpu.dispatch(K.shader("select_token"), [logits.buf, marks.buf, state.buf, config.buf, ids.buf,
                                               positions.buf, out, scratch], (1, 1, 1))
    return out, (4,)


# --- quantized kernels (GGML blocks, engine.quantized; quantized.py) --------------------------------
def _linear_q(be, x, *bias, weight, qtype, rows, cols):     # x (..., cols) -> (..., rows)
    x2 = _collapse(be, x, 1)                                # (M, cols), read as vec4s
    if x2.strides[1] != 1 or x2.offset % 4 or (x2.shape[0] > 1 and x2.strides[0] % 4):
        x2 = be.contiguous(x2)
    out = Q.linear(be.gpu, x2, be.contiguous(bias[0]) if bias else None, weight, rows, cols)
    return out, x.shape[:-1] + (rows,)


def _embedding_q(be, ids, *, weight, qtype, rows, cols, sources):   # ids (...) -> (..., cols)
    values = _index_values(be, sources[0], ids)
    if values.size and (values.min() < 0 or values.max() >= rows):
        bad = values[(values < 0) | (values >= rows)].flat[0]
        raise IndexError(f"index {int(bad)} is out of range for {rows} rows")
    flat = be.contiguous(ids)
    flat = K.View(flat.buf, (flat.numel,), (1,), flat.offset, flat.type)
    return Q.embedding(be.gpu, flat, weight, rows, cols), ids.shape + (cols,)


FUSED = {"mul_add": _mul_add, "hardtanh": _hardtanh, "softmax": _softmax, "layer_norm": _norm("layer_norm"),
         "rms_norm": _norm("rms_norm"), "linear": _linear, "linear_f16w": _linear_f16w,
         "conv2d": _conv2d_fused, "gelu": _gelu,
         "silu": _silu, "attention": _attention, "add_layer_norm": _add_layer_norm, "linear_q": _linear_q,
         "embedding_q": _embedding_q, "select_token": _select_token}
check_tables("webgpu", KERNELS, FUSED)

