"""The quantized kernels (engine.ops "linear_q", "embedding_q") in C: wasm_kernels/quant*.c.

The weight is GGML's own bytes, as on the numpy backend (simd inherits its quantized_in, so
moving a QuantizedTensor between the two is free). linear_q multiplies in integers with x
quantized per block of 32 to 14-bit integers held in int16 (see wasm_kernels/README.md): it
agrees with the float32 product to that precision, not bit for bit. embedding_q dequantizes bit for bit as
engine.quants.dequantize.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from ... import quants
from . import library
from .kernels import address_of, call_with_scratch

TYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k")
_F32 = np.dtype(np.float32)
# id(weight) -> (weak reference, (qtype, rows, cols), (GGML type id, address)): a weight is checked
# and its address looked up once, not per product (each lookup costs ~10 us in Pyodide)
_weights: dict[int, tuple] = {}


def _weight(weight: np.ndarray, qtype: str, rows: int, cols: int) -> tuple[int, int]:
    """(the GGML type id the C kernels take, the address of the blocks), after checking them."""
    entry = _weights.get(id(weight))
    if entry is not None and entry[0]() is weight and entry[1] == (qtype, rows, cols):
        return entry[2]
    if qtype not in TYPES:
        raise ValueError(f"the simd quantized kernels read {', '.join(TYPES)}, not {qtype!r}")
    kind = quants.BY_NAME[qtype]
    if cols % kind.block_size or weight.dtype != np.uint8 or not weight.flags.c_contiguous or \
            weight.size != rows * kind.row_bytes(cols):
        raise ValueError(f"{qtype} weight of {rows} x {cols}: expected {rows * kind.row_bytes(cols)} contiguous "
                         f"bytes, got {weight.size} {weight.dtype}")
    key = id(weight)
    library.get().resident(weight)
    found = (kind.id, address_of(weight))
    _weights[key] = (weakref.ref(weight, lambda _, key=key: _weights.pop(key, None)), (qtype, rows, cols), found)
    return found


def linear_q(x, *bias, weight, qtype, rows, cols):
    """x (..., cols) float32 @ dequantize(weight) (rows, cols).T (+ bias (rows,)) -> (..., rows)."""
    kind, address = _weight(weight, qtype, rows, cols)
    lead = x.shape[:-1]
    m = math.prod(lead)
    if x.dtype != _F32:
        x = x.astype(_F32)
    x_row = cols
    if not x.flags.c_contiguous:
        x = x.reshape(m, cols)                       # a view when the leading dims collapse
        if m > 1 and x.strides[0] % 4 or cols > 1 and x.strides[1] != 4:
            x = np.ascontiguousarray(x)
        x_row = x.strides[0] // 4
    y = np.empty(lead + (rows,), _F32)
    b = None
    if bias:
        b = bias[0] if bias[0].dtype == _F32 and bias[0].flags.c_contiguous else np.ascontiguousarray(bias[0], _F32)
        b = address_of(b)
    if m and rows:
        call_with_scratch(library.get().linear_q_f32, kind, m, rows, cols, address_of(x), x_row, address, b,
                           address_of(y))
    return y


def embedding_q(ids, *, weight, qtype, rows, cols):
    """Rows `ids` (any shape, each in [0, rows)) of dequantize(weight) -> ids.shape + (cols,)."""
    kind, address = _weight(weight, qtype, rows, cols)
    ids = np.asarray(ids)
    flat = np.ascontiguousarray(ids, np.int64).reshape(-1)
    y = np.empty(ids.shape + (cols,), _F32)
    bad = library.get().embedding_q_f32(kind, flat.size, address_of(flat), rows, cols, address, address_of(y))
    if bad:
        raise IndexError(f"index {int(flat[bad - 1])} is out of range for {rows} rows")
    return y


KERNELS = {"linear_q": linear_q, "embedding_q": embedding_q}
