"""The quantized kernels (engine.ops "linear_q", "embedding_q") in WGSL, and how GGML blocks sit
in a device buffer.

Layout: a tensor's blocks in row order, each block's bytes as they are in GGML when they are
32-bit aligned there (q4_1, q5_1, q2_k, q4_k, q5_k). q4_0, q5_0, q8_0, q3_k and q6_k carry one f16
scale d that leaves the rest unaligned (18, 22, 34, 110, 210 bytes): their blocks lose d, and
all the d follow the blocks, two to a word. So the buffer holds exactly the GGML bytes (plus at
most 2 bytes of padding), every quant is read with aligned u32 loads, and no block is padded:
a decode step streams no more than the file's size.

Shaders: quant_blocks.wgsl dequantizes a "unit" of 8 weights of any of the ten types (two runs
of 4 consecutive elements), one function per type; the three kernels are written once over it:
qembedding.wgsl (one thread per unit), qmatvec.wgsl (1 to 4 rows of x: threads of a workgroup
walk the units of a pair of weight rows, sharing each x load between the two, then add up their
partial sums) and qmatmul.wgsl (more rows: the register tiles of the float32 GEMM, K walked a
few whole units at a time, each unit of the weight tile dequantized once into workgroup memory
and reused by every row of x in the tile). Everything accumulates in float32; x is not quantized.

float16 weights (linear_f16w; backend.py keeps a 2-D float16 tensor half-width where the device
has shader-f16) take the same two routes: f16_matvec.wgsl for up to 4 rows of x (`linear_f16`
here, the weight read once as vec4<f16>), and the tiled GEMM for more (kernels.gemm: gemm_io.wgsl
with B stored as f16, widening each weight as it enters the shared tile). Both multiply and add
in float32: the product over the widened weight, up to summation order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ... import quants
from .gpu import Gpu, GpuBuffer
from .kernels import View, workgroups_for, placeholder, words, shader

MATVEC_ROWS = 4                  # rows of x up to which the product streams the weights once


@dataclass(frozen=True)
class Format:
    body: int                    # 32-bit words per block on the device
    hi: int                      # a unit's second run starts this many elements after its first
    scale_at: int | None = None  # byte offset of the f16 d kept apart (see the module docstring)


FORMATS = {
    "q4_0": Format(body=4, hi=16, scale_at=0),           # d | qs[16]
    "q4_1": Format(body=5, hi=16),                       # d m | qs[16]
    "q5_0": Format(body=5, hi=16, scale_at=0),           # d | qh[4] qs[16]
    "q5_1": Format(body=6, hi=16),                       # d m | qh[4] | qs[16]
    "q8_0": Format(body=8, hi=4, scale_at=0),            # d | qs[32]
    "q2_k": Format(body=21, hi=32),                      # scales[16] qs[64] d dmin
    "q3_k": Format(body=27, hi=32, scale_at=108),        # hmask[32] qs[64] scales[12] | d
    "q4_k": Format(body=36, hi=32),                      # d dmin scales[12] qs[128]
    "q5_k": Format(body=44, hi=32),                      # d dmin scales[12] qh[32] qs[128]
    "q6_k": Format(body=52, hi=32, scale_at=208),        # ql[128] qh[64] scales[16] | d
}


class QuantizedBuffer:
    """The device copy of a quantized tensor: `blocks` blocks of GGML type `qtype`; for the types
    with a separate d, the d start at word `scales`."""
    __slots__ = ("buf", "qtype", "blocks", "scales")

    def __init__(self, buf: GpuBuffer, qtype: str, blocks: int, scales: int):
        self.buf, self.qtype, self.blocks, self.scales = buf, qtype, blocks, scales


def upload(gpu: Gpu, raw: np.ndarray, qtype: str) -> QuantizedBuffer:
    """GGML bytes (whole blocks) -> the device layout. Types no kernel reads are kept as they are."""
    kind, fmt = quants.BY_NAME[qtype], FORMATS.get(qtype)
    blocks = np.ascontiguousarray(raw, np.uint8).reshape(-1, kind.type_size)
    if fmt is None or fmt.scale_at is None:
        return QuantizedBuffer(gpu.upload(blocks), qtype, len(blocks), 0)
    at = fmt.scale_at
    body = np.concatenate([blocks[:, :at], blocks[:, at + 2:]], axis=1)
    packed = np.concatenate([body.reshape(-1), blocks[:, at:at + 2].reshape(-1)])
    return QuantizedBuffer(gpu.upload(packed), qtype, len(blocks), body.size // 4)


def download(gpu: Gpu, q: QuantizedBuffer) -> np.ndarray:
    """The GGML bytes back (one read)."""
    kind, fmt = quants.BY_NAME[q.qtype], FORMATS.get(q.qtype)
    data = np.frombuffer(gpu.read(q.buf, q.blocks * kind.type_size), np.uint8)
    if fmt is None or fmt.scale_at is None:
        return data.copy()
    at, body_bytes = fmt.scale_at, q.blocks * (kind.type_size - 2)
    body = data[:body_bytes].reshape(q.blocks, -1)
    blocks = np.empty((q.blocks, kind.type_size), np.uint8)
    blocks[:, :at], blocks[:, at:at + 2], blocks[:, at + 2:] = \
        body[:, :at], data[body_bytes:].reshape(-1, 2), body[:, at:]
    return blocks.reshape(-1)


def _blocks_fill(qtype: str) -> dict:
    kind = quants.BY_NAME[qtype]
    return {"QTYPE": qtype, "UNITS": kind.block_size // 8, "BLOCK": kind.block_size, "HI": FORMATS[qtype].hi}


def embedding(gpu: Gpu, ids: View, w: QuantizedBuffer, rows: int, cols: int) -> GpuBuffer:
    """Rows `ids` (a contiguous i32 view, each in [0, rows)) of the dequantized weight:
    (ids.numel, cols) float32, contiguous."""
    count = ids.numel
    out = gpu.buffer(4 * count * cols)
    row_units = cols // 8
    if count * row_units:
        params = words(count * row_units, row_units, cols // quants.BY_NAME[w.qtype].block_size, ids.offset,
                        rows, cols // 4, w.scales, 0)
        gpu.dispatch(shader("qembedding", ("quant_blocks",), **_blocks_fill(w.qtype)),
                     [w.buf, ids.buf, out, gpu.params(params)], workgroups_for(count * row_units, 64, gpu))
    return out


def linear(gpu: Gpu, x: View, bias: View | None, w: QuantizedBuffer, rows: int, cols: int) -> GpuBuffer:
    """x (M, cols) @ dequantized weight (rows, cols).T + bias: (M, rows) float32, contiguous.
    x: unit column stride, its offset and row stride multiples of 4 (read as vec4s); bias a
    contiguous (rows,) view or None."""
    m = x.shape[0]
    out = gpu.buffer(4 * m * rows)
    if not m * rows:
        return out
    row_blocks = cols // quants.BY_NAME[w.qtype].block_size
    x_row = x.strides[0] // 4 if m > 1 else 0
    bias_buf = bias.buf if bias is not None else placeholder(gpu)
    has_bias, bias_off = int(bias is not None), bias.offset if bias is not None else 0
    if m <= MATVEC_ROWS:
        tpr = _threads_per_row(cols // 8)
        params = words(rows, row_blocks, x.offset // 4, x_row, has_bias, bias_off, w.scales, 0)
        gpu.dispatch(_matvec_shader(w.qtype, tpr, m), [w.buf, x.buf, out, gpu.params(params), bias_buf],
                     workgroups_for(rows, 128 // tpr, gpu))
    else:
        tiling, groups = _matmul_tiling(gpu, m, rows)
        params = words(m, rows, row_blocks, x.offset // 4, x_row, has_bias, bias_off, w.scales)
        gpu.dispatch(_matmul_shader(w.qtype, *tiling), [w.buf, x.buf, out, gpu.params(params), bias_buf], groups)
    return out


def _threads_per_row(units: int) -> int:
    """About four units (32 weights) of each of its two rows a thread, 8 to 64 threads on a pair
    of rows (a workgroup holds 64 / that pairs): enough loads in flight, few reduction steps."""
    return max(8, min(64, 1 << max(units // 4, 1).bit_length() - 1))


def _pair_statements(m: int, loads: list[str], step: str) -> dict:
    """The statements of a matvec shader over a pair of weight rows (qmatvec.wgsl,
    f16_matvec.wgsl) for m rows of x: its 2 m sums declared, each x row's `loads`, `step`
    ({j}, {r}: weight row j of the pair, x row r) accumulating each sum, then the sums into
    workgroup memory, added up and stored with the bias."""
    pad = " " * 8
    sums = [(j, r) for j in range(2) for r in range(m)]         # (weight row of the pair, x row)
    accumulate = [f"{pad}{line.format(r=r)}" for r in range(m) for line in loads]
    accumulate += [f"{pad}{step.format(j=j, r=r)}" for j, r in sums]
    return {
        "DECLARE": "\n".join(f"    var acc{j}_{r} = 0.0;" for j, r in sums),
        "ACCUMULATE": "\n".join(accumulate),
        "PARTS": "\n".join(f"    part[{64 * (2 * r + j)}u + lid] = acc{j}_{r};" for j, r in sums),
        "SUM": "\n".join(f"{pad}    part[{64 * i}u + lid] += part[{64 * i}u + lid + s];" for i in range(2 * m)),
        "STORE": "\n".join(f"{pad}Y[{r}u * p.n + n] = part[{128 * r}u + lid] + b0;" for r in range(m)),
        "STORE1": "\n".join(f"{pad}Y[{r}u * p.n + n + 1u] = part[{128 * r + 64}u + lid] + b1;" for r in range(m)),
    }


@lru_cache(maxsize=None)
def _matvec_shader(qtype: str, tpr: int, m: int) -> str:
    statements = _pair_statements(m, ["let x0{r} = X[i0 + {r}u * p.x_row];", "let x1{r} = X[i1 + {r}u * p.x_row];"],
                                  "acc{j}_{r} += dot(v{j}.lo, x0{r}) + dot(v{j}.hi, x1{r});")
    return shader("qmatvec", ("quant_blocks",), TPR=tpr, M=m, **statements, **_blocks_fill(qtype))


def _matmul_tiling(gpu: Gpu, m: int, n: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """((RM, RN, TK), workgroups) for an (m, n) output. On a GPU, the tile the float32 product
    of that size takes (kernels.TILES, the first with kernels.TILE_TARGET workgroups), so each
    dequantized weight is reused by as many rows of x as float32 reuses a loaded one, and the GPU
    gets as many workgroups. A software adapter runs few workgroups at a time on a CPU, where
    the fewest, largest tiles win: one row tile covering x's rows (16 to 128), 128 weight rows,
    k-steps of 8 (on lavapipe ~1.7-2.2x as fast as with float32's tiles at 5 and 16 rows, ~1.15x at 37).
    kernels.FORCE_TILES, set by the tests, forces one of kernels.TILES."""
    from . import kernels

    def grid(rm, rn):
        return math.ceil(n / (16 * rn)), math.ceil(m / (16 * rm)), 1
    if kernels.FORCE_TILES is not None:
        return kernels.FORCE_TILES, grid(*kernels.FORCE_TILES[:2])
    if gpu.info.software:
        rm, rn = (next(r for r in (1, 2, 4, 8) if 16 * r >= size or r == 8) for size in (m, n))
        return (rm, rn, 8), grid(rm, rn)
    for rm, rn, tk in kernels.TILES:
        if math.prod(grid(rm, rn)) >= kernels.TILE_TARGET:
            return (rm, rn, tk), grid(rm, rn)
    return kernels.TILES[-1], grid(*kernels.TILES[-1][:2])


@lru_cache(maxsize=None)
def _matmul_shader(qtype: str, rm: int, rn: int, tk: int) -> str:
    pad = " " * 12
    product = [f"{pad}let a{i} = Xs[k][lid.y + {16 * i}u];" for i in range(rm)]
    product += [f"{pad}let b{j} = Ws[k][lid.x + {16 * j}u];" for j in range(rn)]
    product += [f"{pad}c{i}_{j} = fma(a{i}, b{j}, c{i}_{j});" for i in range(rm) for j in range(rn)]
    statements = {
        "DECLARE": "\n".join(f"    var c{i}_{j} = 0.0;" for i in range(rm) for j in range(rn)),
        "PRODUCT": "\n".join(product),
        "STORE": "\n".join(f"    put(row0 + lid.y + {16 * i}u, col0 + lid.x + {16 * j}u, c{i}_{j});"
                           for i in range(rm) for j in range(rn)),
    }
    # where unit u starts in its block (quant_blocks.wgsl): 8 u for q8_0, 4 u for the other 32-element
    # blocks, k_at(u) for the super-blocks
    at = "k_at(u)" if quants.BY_NAME[qtype].block_size == 256 else "8u * u" if qtype == "q8_0" else "4u * u"
    return shader("qmatmul", ("quant_blocks",), RM=rm, RN=rn, TK=tk, UNIT_AT=at, **statements,
                  **_blocks_fill(qtype))


# --- float16 weights (shader-f16) -------------------------------------------------------------------
def linear_f16(gpu: Gpu, x: View, bias: View | None, w: View) -> GpuBuffer:
    """x (M, K) f32 @ w (N, K) f16 .T + bias, M of 1 to MATVEC_ROWS: (M, N) float32, contiguous.
    x and w: unit column strides; bias a contiguous (N,) f32 view or None. Read as vec4s where K,
    both offsets and both row strides are multiples of 4, else element by element."""
    (m, k), n = x.shape, w.shape[0]
    out = gpu.buffer(4 * m * n)
    if not m * n:
        return out
    x_row, w_row = (x.strides[0] if m > 1 else 0), (w.strides[0] if n > 1 else 0)
    v = 4 if all(s % 4 == 0 for s in (k, x.offset, x_row, w.offset, w_row)) else 1
    bias_buf = bias.buf if bias is not None else placeholder(gpu)
    tpr = _threads_per_row(k // v // 2)                 # as units of 8 weights: ~8 chunks of each row a thread
    params = words(n, k // v, x.offset // v, x_row // v, w.offset // v, w_row // v, int(bias is not None),
                   bias.offset if bias is not None else 0)
    gpu.dispatch(_f16_matvec_shader(tpr, m, v), [w.buf, x.buf, out, gpu.params(params), bias_buf],
                 workgroups_for(n, 128 // tpr, gpu))
    return out


@lru_cache(maxsize=None)
def _f16_matvec_shader(tpr: int, m: int, v: int) -> str:
    statements = _pair_statements(m, ["let x{r} = X[i + {r}u * p.x_row];"],
                                  "acc{j}_{r} += dot(v{j}, x{r});" if v == 4 else "acc{j}_{r} = fma(v{j}, x{r}, acc{j}_{r});")
    tw, tx = ("vec4<f16>", "vec4<f32>") if v == 4 else ("f16", "f32")
    return shader("f16_matvec", TPR=tpr, M=m, TW=tw, TX=tx, **statements)
