"""WGSL shaders as functions on device buffers: each fills a template, records one dispatch
and returns a contiguous output buffer; nothing is read back here.

A `View` is how the engine's Layout sits in a buffer (shape, element strides, offset) plus
the WGSL element type, so transposed, sliced and broadcast (stride 0) inputs run without
copies. Every element on the device is 32 bits: f32 (float32, and float16/bfloat16 values
held exactly in f32), i32 (the signed integers) or u32 (uint8, bool); except f16, a float16
weight kept half-width where the device has shader-f16 (backend.py), which the data-movement
shaders (elementwise, scatter, gather) and the products with a weight read as they are.
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .gpu import Gpu, GpuBuffer

SHADERS = Path(__file__).resolve().parent / "shaders"
ACTIVATIONS = {"none": 0, "relu": 1, "relu6": 2, "gelu": 3, "gelu_tanh": 4, "silu": 5, "hardswish": 6}
NAN_TEST = {"f32": "is_nan(x)", "i32": "false", "u32": "false"}


@dataclass(frozen=True)
class View:
    buf: GpuBuffer
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0
    type: str = "f32"                      # WGSL element type: f32, i32, u32 or f16 (shader-f16)

    @classmethod
    def contiguous(cls, buf: GpuBuffer, shape, type: str = "f32") -> "View":  # noqa: A002
        return cls(buf, tuple(shape), contiguous_strides(shape), 0, type)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def is_contiguous(self) -> bool:
        return all(n == 1 or s == e for n, s, e in zip(self.shape, self.strides, contiguous_strides(self.shape)))

    def permute(self, dims) -> "View":
        return View(self.buf, tuple(self.shape[d] for d in dims), tuple(self.strides[d] for d in dims),
                    self.offset, self.type)

    def expand(self, shape) -> "View":
        """Broadcast to `shape` (NumPy rules): new and size-1 dims get stride 0."""
        shape = tuple(shape)
        pad = len(shape) - len(self.shape)
        strides = []
        for d, n in enumerate(shape):
            own = self.shape[d - pad] if d >= pad else 1
            if own not in (1, n):
                raise ValueError(f"cannot broadcast {self.shape} to {shape}")
            strides.append(self.strides[d - pad] if d >= pad and own == n else 0)
        return View(self.buf, shape, tuple(strides), self.offset, self.type)


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


@lru_cache(maxsize=None)
def _source(name: str) -> str:
    return (SHADERS / f"{name}.wgsl").read_text()


@lru_cache(maxsize=None)
def shader(name: str, include: tuple[str, ...] = (), **fill) -> str:
    """common.wgsl + the `include`d files + name.wgsl with the template fields filled: one
    shader variant (tiles.wgsl includes how it reads and writes; convolutions their Params)."""
    source = "".join(_source(part) for part in include) + _source(name)
    for key, value in fill.items():
        source = source.replace("{{" + key + "}}", str(value))
    if "{{" in source:
        raise ValueError(f"shader {name}.wgsl has unfilled template fields")
    # a variant over f16 values (half-width weights) needs the extension, first in the module
    enable = "enable f16;\n" if _USES_F16.search(re.sub(r"//[^\n]*", "", source)) else ""
    return enable + _source("common") + source


_USES_F16 = re.compile(r"\bf16\b")


def itemsize(type: str) -> int:  # noqa: A002
    """Bytes per element of a WGSL element type on the device."""
    return 2 if type == "f16" else 4


def words(*values) -> np.ndarray:
    return np.array(values, np.uint32)


def f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def placeholder(gpu: Gpu) -> GpuBuffer:
    """A small buffer for a binding a shader variant never reads (WebGPU still wants one,
    and it may not alias the output)."""
    if getattr(gpu, "_placeholder", None) is None:
        gpu._placeholder = gpu.upload(np.zeros(4, np.uint32))
    return gpu._placeholder


def workgroups_for(count: int, per_group: int, gpu: Gpu) -> tuple[int, int, int]:
    """Workgroups covering `count` items, folded into y past the per-dimension limit."""
    groups, limit = math.ceil(count / per_group), gpu.limits["max_workgroups"]
    return (groups, 1, 1) if groups <= limit else (limit, math.ceil(groups / limit), 1)


def _check_strides(*views: View) -> None:
    for v in views:
        if any(s < 0 for s in v.strides):
            raise ValueError(f"negative strides {v.strides} are not supported on webgpu")


# --- elementwise ------------------------------------------------------------------------------
def elementwise(gpu: Gpu, expr: str, inputs: list[View], out_type: str) -> GpuBuffer:
    """Z = expr(a, b, c) over 1-3 inputs of one shape (broadcast already); Z contiguous."""
    shape = inputs[0].shape
    if any(v.shape != shape for v in inputs):
        raise ValueError(f"elementwise: shapes {[v.shape for v in inputs]} must be broadcast first")
    _check_strides(*inputs)
    numel = math.prod(shape)
    out = gpu.buffer(itemsize(out_type) * numel)
    if numel == 0:
        return out
    views = list(inputs) + [None] * (3 - len(inputs))
    info = [numel, len(shape), *[v.offset if v else 0 for v in views], *shape]
    for v in views:
        info += list(v.strides) if v else [0] * len(shape)
    types = {f"T{i}": v.type if v else "u32" for i, v in enumerate(views)}
    buffers = [v.buf if v else placeholder(gpu) for v in views]
    gpu.dispatch(shader("elementwise", ("strided",), EXPR=expr, TZ=out_type, **types),
                 buffers + [out, gpu.params(words(*info))], workgroups_for(numel, 256, gpu))
    return out


def scatter(gpu: Gpu, x: View, z: View) -> None:
    """z[...] = x[...] for two views of one shape (z a view into an output buffer)."""
    _check_strides(x, z)
    numel = x.numel
    if numel:
        info = words(numel, len(x.shape), x.offset, z.offset, *x.shape, *x.strides, *z.strides)
        gpu.dispatch(shader("scatter", ("strided",), T=x.type), [x.buf, z.buf, gpu.params(info)],
                     workgroups_for(numel, 256, gpu))


def index_copy(gpu: Gpu, z: View, axis: int, index: View, x: View) -> None:
    """In place: z's rows along `axis` at a 1-D i32 index view = x's rows (x of z's shape with
    index.numel rows at `axis`); rows whose index is outside z are skipped."""
    _check_strides(x, z, index)
    numel = x.numel
    if numel:
        info = words(numel, len(x.shape), x.offset, z.offset, axis, z.shape[axis], index.offset,
                      index.strides[0] if index.strides else 0, *x.shape, *x.strides, *z.strides)
        gpu.dispatch(shader("index_copy", ("strided",), T=x.type), [x.buf, index.buf, z.buf, gpu.params(info)],
                     workgroups_for(numel, 256, gpu))


def fill(gpu: Gpu, numel: int, bits: int) -> GpuBuffer:
    out = gpu.buffer(4 * numel)
    if numel:
        gpu.dispatch(shader("fill"), [out, gpu.params(words(numel, bits))], workgroups_for(numel, 256, gpu))
    return out


# --- reductions, top-k, gather -------------------------------------------------------------------
REDUCE_OPS = {"sum": 0, "max": 1, "min": 2, "argmax": 3, "argmin": 4}


def reduce(gpu: Gpu, op: str, x: View, axes: tuple[int, ...], acc_type: str, out_type: str) -> GpuBuffer:
    """op over `axes` of x: one output per combination of the other dims, in their order."""
    _check_strides(x)
    keep = [d for d in range(len(x.shape)) if d not in axes]
    v = x.permute(keep + list(axes))
    nk = len(keep)
    n_out, n_red = math.prod(v.shape[:nk]), math.prod(v.shape[nk:])
    out = gpu.buffer(4 * n_out)
    if n_out:
        info = words(n_out, n_red, nk, len(axes), v.offset, *v.shape[:nk], *v.strides[:nk], *v.shape[nk:],
                      *v.strides[nk:])
        per = min(64, 1 << max(0, math.ceil(n_red / 8) - 1).bit_length())   # ~8 elements a thread
        source = shader("reduce", ("strided",), TX=x.type, TA=acc_type, TZ=out_type, OP=REDUCE_OPS[op],
                        NAN=NAN_TEST[acc_type], PER=per)
        gpu.dispatch(source, [x.buf, out, gpu.params(info)], workgroups_for(n_out, 64 // per, gpu))
    return out


def topk(gpu: Gpu, x: View, axis: int, k: int, largest: bool) -> tuple[GpuBuffer, GpuBuffer, tuple]:
    """(values, int indices) of the k first along `axis` in order; shape of x with axis -> k."""
    _check_strides(x)
    others = [d for d in range(len(x.shape)) if d != axis]
    out_shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    out_strides = contiguous_strides(out_shape)
    rows = math.prod(x.shape[d] for d in others)
    values, indices = gpu.buffer(4 * rows * k), gpu.buffer(4 * rows * k)
    if rows and k:
        info = words(rows, x.shape[axis], k, int(largest), len(others), x.offset, x.strides[axis],
                      out_strides[axis], *[x.shape[d] for d in others], *[x.strides[d] for d in others],
                      *[out_strides[d] for d in others])
        gpu.dispatch(shader("topk", ("strided",), T=x.type, NAN=NAN_TEST[x.type]),
                     [x.buf, values, indices, gpu.params(info)], workgroups_for(rows, 64, gpu))
    return values, indices, out_shape


def gather(gpu: Gpu, x: View, axis: int, index: View) -> tuple[GpuBuffer, tuple]:
    """x gathered along `axis` by a 1-D i32 index view (in range, negatives from the end)."""
    _check_strides(x, index)
    out_shape = x.shape[:axis] + (index.numel,) + x.shape[axis + 1:]
    numel = math.prod(out_shape)
    out = gpu.buffer(itemsize(x.type) * numel)
    if numel:
        info = words(numel, len(out_shape), x.offset, axis, x.shape[axis], index.offset,
                      index.strides[0] if index.strides else 0, *out_shape, *x.strides)
        gpu.dispatch(shader("gather", ("strided",), T=x.type), [x.buf, index.buf, out, gpu.params(info)],
                     workgroups_for(numel, 256, gpu))
    return out, out_shape


# --- GEMM and convolution: one tiled product (tiles.wgsl) with two ways to read and write ------------
# (RM, RN, TK): results per thread and depth step; a workgroup's tile is (16 RM) x (16 RN).
# Large tiles reuse each load more; small ones give a small product enough workgroups to keep
# a GPU busy: on a GPU the first with at least TILE_TARGET workgroups is used (else the one with
# most). A software adapter runs workgroups on a few CPU cores, where fewer, larger ones win
# (SwiftShader: a 512^3 product in 208 ms with 8x8 per thread, 1367 ms with 1x1) as long as the
# tile is not mostly padding (a batch of 3x7 products): there the largest within 2x of the output.
TILES = ((8, 8, 8), (4, 4, 16), (2, 2, 16), (1, 1, 16))
TILE_TARGET = 256
FORCE_TILES: tuple[int, int, int] | None = None      # tests run every configuration with this


def _tiling(gpu: Gpu, rows: int, cols: int, batch: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """((RM, RN, TK), workgroups) for an output of batch x rows x cols."""
    def grid(rm, rn):
        return math.ceil(cols / (16 * rn)), math.ceil(rows / (16 * rm)), batch
    if FORCE_TILES is not None:
        return FORCE_TILES, grid(*FORCE_TILES[:2])
    for rm, rn, tk in TILES:
        if gpu.info.software and 8 * rm <= rows and 8 * rn <= cols:
            return (rm, rn, tk), grid(rm, rn)
        if not gpu.info.software and math.prod(grid(rm, rn)) >= TILE_TARGET:
            return (rm, rn, tk), grid(rm, rn)
    rm, rn, tk = TILES[-1]
    return (rm, rn, tk), grid(rm, rn)


@lru_cache(maxsize=None)
def _tiles_shader(io: tuple[str, ...], tiling, a_load: str, b_load: str, **fill) -> str:
    """tiles.wgsl after the `io` files, with the per-thread statements written out for (RM, RN,
    TK). Each tile is
    loaded along its contiguous dimension, four elements at a time where they are aligned
    vec4s: a_load "k", "k4" (A's depth, as vec4) or "m"; b_load "n", "n4" or "k"."""
    rm, rn, tk = tiling
    tm, tn, pad = 16 * rm, 16 * rn, " " * 8

    def loads(name, rows, cols, fast_is_k, width, load):
        """Statements filling shared tile name[k][other] (k < rows) by `load` (a vec4 if width 4)."""
        fast_size = rows if fast_is_k else cols
        per_fast = fast_size // width
        total = rows * cols // width
        lines = []
        for q in range(-(-total // 256)):
            idx = f"(li + {256 * q}u)"
            fast, slow = f"{idx} % {per_fast}u * {width}u", f"{idx} / {per_fast}u"
            k, other = (fast, slow) if fast_is_k else (slow, fast)
            guard = f"if ({idx} < {total}u) " if total % 256 else ""
            if width == 1:
                lines.append(f"{pad}{guard}{{ {name}[{k}][{other}] = {load.format(k=k, other=other)}; }}")
            else:
                ks = [f"{k} + {i}u" if fast_is_k else k for i in range(4)]
                others = [other if fast_is_k else f"{other} + {i}u" for i in range(4)]
                stores = " ".join(f"{name}[{ks[i]}][{others[i]}] = v[{i}];" for i in range(4))
                lines.append(f"{pad}{guard}{{ let v = {load.format(k=k, other=other)}; {stores} }}")
        return "\n".join(lines)
    load_a = loads("As", tk, tm, a_load != "m", 4 if a_load == "k4" else 1, "load_a(g, row0 + {other}, k0 + {k})")
    load_b = loads("Bs", tk, tn, b_load == "k", 4 if b_load == "n4" else 1, "load_b(g, k0 + {k}, col0 + {other})")
    mul = "fma(a{i}, b{j}, c{i}_{j})" if fill["T"] == "f32" else "c{i}_{j} + a{i} * b{j}"
    product = [f"{pad}    let a{i} = As[k][lid.y + {16 * i}u];" for i in range(rm)]
    product += [f"{pad}    let b{j} = Bs[k][lid.x + {16 * j}u];" for j in range(rn)]
    product += [f"{pad}    c{i}_{j} = {mul.format(i=i, j=j)};" for i in range(rm) for j in range(rn)]
    declare = [f"    var c{i}_{j}: {fill['T']};" for i in range(rm) for j in range(rn)]
    store = [f"    put(g, row0 + lid.y + {16 * i}u, col0 + lid.x + {16 * j}u, c{i}_{j});"
             for i in range(rm) for j in range(rn)]
    vector = {"TA": f"vec4<{fill['T']}>" if a_load == "k4" else fill["T"], "VA": 4 if a_load == "k4" else 1,
              "TB": f"vec4<{fill['T']}>" if b_load == "n4" else fill["T"], "VB": 4 if b_load == "n4" else 1}
    return shader("tiles", io, RM=rm, RN=rn, TK=tk, DECLARE="\n".join(declare), LOAD_A=load_a,
                  LOAD_B=load_b, PRODUCT="\n".join(product), STORE="\n".join(store), **vector, **fill)


def _aligned(*values: int) -> bool:
    return all(v % 4 == 0 for v in values)


def gemm(gpu: Gpu, a: View, b: View, bias: View | None = None, bias_along: str = "n",
         activation: str = "none") -> GpuBuffer:
    """act(a @ b + bias): a (batch, M, K), b (batch, K, N) (batch strides may be 0), bias
    contiguous (N,) along columns or (M,) along rows; out contiguous (batch, M, N). b may be f16
    with a f32 (a half-width weight): widened as it is read, the same f32 product."""
    (batch, m, k), (batch_b, k2, n) = a.shape, b.shape
    half = b.type == "f16" and a.type == "f32"
    if k != k2 or batch != batch_b or (a.type != b.type and not half):
        raise ValueError(f"gemm: shapes {a.shape} and {b.shape} ({a.type}, {b.type}) do not multiply")
    _check_strides(a, b)
    out = gpu.buffer(4 * batch * m * n)
    if batch * m * n == 0:
        return out
    mode = 0 if bias is None else {"n": 1, "m": 2}[bias_along]
    params = words(m, n, k, 0, a.offset, *a.strides, b.offset, *b.strides, 0, m * n, 0,
                    0 if bias is None else bias.offset)
    epilogue = f"activate(v, {ACTIVATIONS[activation]}u)" if a.type == "f32" else "v"
    tiling, groups = _tiling(gpu, m, n, batch)
    # load along whichever dimension is contiguous, as vec4s when every row starts 16-byte aligned
    a_load = "m" if a.strides[1] == 1 and a.strides[2] != 1 else "k"
    if a.strides[2] == 1 and _aligned(k, a.offset, a.strides[0], a.strides[1]):
        a_load = "k4"
    b_load = "k" if b.strides[1] == 1 and b.strides[2] != 1 else "n"
    if b.strides[2] == 1 and _aligned(n, b.offset, b.strides[0], b.strides[1]):
        b_load = "n4"
    stored = "f16" if half else a.type                       # B's elements in its buffer
    source = _tiles_shader(("gemm_io",), tiling, a_load, b_load, T=a.type, BIAS=mode, EPILOGUE=epilogue,
                           HB=f"vec4<{stored}>" if b_load == "n4" else stored)
    gpu.dispatch(source, [a.buf, b.buf, out, gpu.params(params), bias.buf if bias else placeholder(gpu)], groups)
    return out


def conv2d(gpu: Gpu, x: View, w: View, bias: View | None, stride, pads, dilation, groups: int,
           activation: str = "none") -> tuple[GpuBuffer, tuple]:
    """act(conv2d(x, w) + bias), f32 NCHW; x and w contiguous; pads ((top, bottom), (left, right))."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), ((pt, pb), (pl, pr)) = stride, dilation, pads
    ho = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    shape = (n, o, ho, wo)
    out = gpu.buffer(4 * math.prod(shape))
    if not math.prod(shape):
        return out, shape
    params = words(n, c, h, wd, o, kh, kw, groups, sh, sw, dh, dw, pt, pl, ho, wo, x.offset, w.offset,
                    bias.offset if bias else 0, int(bias is not None), ACTIVATIONS[activation], 0, 0, 0)
    buffers = [x.buf, w.buf, out, gpu.params(params), bias.buf if bias else placeholder(gpu)]
    if groups == c == o and cg == 1:
        gpu.dispatch(shader("depthwise", ("conv_params",)), buffers, workgroups_for(math.prod(shape), 256, gpu))
    else:
        tiling, grid = _tiling(gpu, o // groups, n * ho * wo, groups)
        a_load = "k4" if _aligned(cg * kh * kw, w.offset) else "k"      # the weights, row by row
        gpu.dispatch(_tiles_shader(("conv_params", "conv_io"), tiling, a_load, "n", T="f32"), buffers, grid)
    return out, shape


# --- row-wise: softmax and the norms -----------------------------------------------------------
ROW_KINDS = {"softmax": 0, "layer_norm": 1, "rms_norm": 2, "add_layer_norm": 3}


def rows(gpu: Gpu, kind: str, x: View, outer: int, n: int, inner: int, weight: View | None = None,
         bias: View | None = None, eps: float = 0.0, residual: View | None = None,
         input_bias: View | None = None) -> GpuBuffer:
    """x contiguous, viewed as (outer, n, inner); the result has x's shape, contiguous.
    add_layer_norm: layer norm of (x + input_bias) + residual, residual contiguous like x."""
    out = gpu.buffer(4 * outer * n * inner)
    count = outer * inner
    if count and n:
        optional = [weight, bias, residual, input_bias]
        params = words(count, n, inner, x.offset, *[int(v is not None) for v in optional],
                        *[v.offset if v is not None else 0 for v in optional], f32_bits(eps), 0, 0, 0)
        gpu.dispatch(shader("rows", KIND=ROW_KINDS[kind]),
                     [x.buf, out, gpu.params(params)] + [v.buf if v is not None else placeholder(gpu)
                                                          for v in optional], workgroups_for(count, 1, gpu))
    return out


# --- attention ------------------------------------------------------------------------------------
ATTENTION_SHARED = 3840            # floats of workgroup memory for a chunk's K and V rows (of 4096)


def attention(gpu: Gpu, q: View, k: View, v: View, mask: View | None, scale: float,
              causal: bool) -> tuple[GpuBuffer, tuple]:
    """softmax(q k^T * scale + mask) v for f32 views q (N, H, L, E), k (N, Hkv, S, E), v (N, Hkv, S,
    Ev) (H a multiple of Hkv), mask None or an (N, H, L, S) view (u32 bool: 0 masks; f32: added);
    out contiguous (N, L, H, Ev). One shader variant per head size (its loops unroll)."""
    _check_strides(q, k, v, *([mask] if mask is not None else []))
    (n, h, l, e), (_, hkv, s, _), ev = q.shape, k.shape, v.shape[3]
    shape = (n, l, h, ev)
    out = gpu.buffer(4 * math.prod(shape))
    blocks = -(-l // 64)
    if n * h * l * ev:
        kind = 0 if mask is None else (2 if mask.type == "f32" else 1)
        m = mask if mask is not None else View(placeholder(gpu), (1, 1, 1, 1), (0, 0, 0, 0), 0, "u32")
        info = words(n, h, h // hkv, l, s, kind, int(causal), f32_bits(scale), blocks, q.offset, *q.strides,
                      k.offset, *k.strides, v.offset, *v.strides, m.offset, *m.strides)
        source = _attention_shader(e, ev, "f32" if kind == 2 else "u32")
        gpu.dispatch(source, [q.buf, k.buf, v.buf, m.buf, out, gpu.params(info)],
                     workgroups_for(n * h * blocks, 1, gpu))
    return out, shape


@lru_cache(maxsize=None)
def _attention_shader(e: int, ev: int, mask_type: str) -> str:
    """attention.wgsl for head sizes e, ev: the query and output row as single variables, the
    dot product over four partial sums."""
    bk = max(1, min(32, ATTENTION_SHARED // (e + ev)))
    pad = " " * 16
    statements = {
        "DECLARE": "\n".join([f"    var q{p}: f32;" for p in range(e)] + [f"    var acc{c}: f32;" for c in range(ev)]),
        "LOAD_Q": "\n".join(f"        q{p} = Q[q_at + {p}u * q_step];" for p in range(e)),
        "DOT": "\n".join(f"{pad}d{p % 4} = fma(q{p}, Ks[kj + {p}u], d{p % 4});" for p in range(e)),
        "RESCALE": "\n".join(f"            acc{c} = acc{c} * rescale;" for c in range(ev)),
        "ACCUMULATE": "\n".join(f"{pad}acc{c} = fma(p, Vs[vj + {c}u], acc{c});" for c in range(ev)),
        "STORE": "\n".join(f"        Y[out + {c}u] = select(acc{c} / total, nan(), no_key);" for c in range(ev)),
    }
    return shader("attention", MASK_T=mask_type, E=e, EV=ev, BK=bk, KS=bk * e, VS=bk * ev, **statements)
