"""WGSL shaders as functions on device buffers: each fills a template, records one dispatch
and returns the contiguous float32 output buffer; nothing is read back here.

A `View` is how the engine's Layout sits in a buffer (shape, element strides, offset), so
transposed, sliced and broadcast (stride 0) inputs run without copies.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .gpu import Gpu, GpuBuffer

SHADERS = Path(__file__).resolve().parent / "shaders"
WORKGROUP = 256                                     # elementwise shaders' workgroup size

# elementwise expressions in `a` (and `b`), f32; NaN propagates as in NumPy where WGSL's
# min/max would not
BINARY = {"add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b",
          "maximum": "select(max(a, b), a + b, is_nan(a) || is_nan(b))",
          "minimum": "select(min(a, b), a + b, is_nan(a) || is_nan(b))"}
ACTIVATIONS = {"none": "v", "relu": "select(max(v, 0.0), v, is_nan(v))",
               "relu6": "select(clamp(v, 0.0, 6.0), v, is_nan(v))"}


@dataclass(frozen=True)
class View:
    buf: GpuBuffer
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @classmethod
    def contiguous(cls, buf: GpuBuffer, shape) -> "View":
        shape = tuple(shape)
        strides, acc = [], 1
        for n in reversed(shape):
            strides.append(acc)
            acc *= max(n, 1)
        return cls(buf, shape, tuple(reversed(strides)))


@lru_cache(maxsize=None)
def shader(name: str, **fill) -> str:
    source = (SHADERS / "common.wgsl").read_text() + (SHADERS / f"{name}.wgsl").read_text()
    for key, value in fill.items():
        source = source.replace("{{" + key + "}}", str(value))
    if "{{" in source:
        raise ValueError(f"shader {name}.wgsl has unfilled template fields")
    return source


def _placeholder(gpu: Gpu) -> GpuBuffer:
    """A small buffer for a binding the shader variant never reads (WebGPU still wants one,
    and it may not alias the output)."""
    if not hasattr(gpu, "_placeholder"):
        gpu._placeholder = gpu.buffer(16)
    return gpu._placeholder


def _grid(count: int, per_group: int, limit: int) -> tuple[int, int, int]:
    """Workgroups covering `count` invocations, folded into y past the per-dimension limit."""
    groups = math.ceil(count / per_group)
    if groups <= limit:
        return groups, 1, 1
    return limit, math.ceil(groups / limit), 1


def _meta(gpu: Gpu, numel: int, shape, views) -> GpuBuffer:
    offsets = [v.offset for v in views] + [0] * (2 - len(views))
    words = [numel, len(shape), *offsets, *shape]
    for v in views:
        if any(s < 0 for s in v.strides):
            raise ValueError(f"negative strides {v.strides} are not supported on webgpu")
        words += list(v.strides)
    return gpu.upload(np.array(words, np.uint32))


def binary(gpu: Gpu, op: str, x: View, y: View) -> GpuBuffer:
    """op(x, y) with x and y already broadcast to one shape (stride-0 dims)."""
    if x.shape != y.shape:
        raise ValueError(f"binary {op}: shapes {x.shape} and {y.shape} must be broadcast first")
    numel = math.prod(x.shape)
    out = gpu.buffer(4 * numel)
    gpu.dispatch(shader("binary", EXPR=BINARY[op]), [x.buf, y.buf, out, _meta(gpu, numel, x.shape, [x, y])],
                 _grid(numel, WORKGROUP, gpu.limits["max_workgroups"]))
    return out


def unary(gpu: Gpu, expr: str, x: View) -> GpuBuffer:
    """`expr` in `a` over every element of x, into a contiguous buffer."""
    numel = math.prod(x.shape)
    out = gpu.buffer(4 * numel)
    gpu.dispatch(shader("unary", EXPR=expr), [x.buf, out, _meta(gpu, numel, x.shape, [x])],
                 _grid(numel, WORKGROUP, gpu.limits["max_workgroups"]))
    return out


def gemm(gpu: Gpu, a: View, b: View, bias: View | None = None, bias_along: str = "n",
         activation: str = "none") -> GpuBuffer:
    """act(a @ b + bias): a (batch, M, K), b (batch, K, N) (batch strides may be 0), bias
    contiguous (N,) along columns or (M,) along rows; out contiguous (batch, M, N)."""
    (batch, m, k), (batch_b, k2, n) = a.shape, b.shape
    if k != k2 or batch != batch_b:
        raise ValueError(f"gemm: shapes {a.shape} and {b.shape} do not multiply")
    out = gpu.buffer(4 * batch * m * n)
    mode = 0 if bias is None else {"n": 1, "m": 2}[bias_along]
    params = np.array([m, n, k, 0, a.offset, *a.strides, b.offset, *b.strides, 0, m * n, 0,
                       0 if bias is None else bias.offset], np.uint32)
    bias_buf = bias.buf if bias is not None else _placeholder(gpu)    # bound but unread when mode is 0
    source = shader("gemm", BIAS=mode, ACTIVATION=ACTIVATIONS[activation])
    gpu.dispatch(source, [a.buf, b.buf, out, gpu.upload(params), bias_buf],
                 (math.ceil(n / 64), math.ceil(m / 64), batch))
    return out
