"""The reference quantized kernels (engine.ops "linear_q", "embedding_q") in NumPy.

The weight is GGML's own bytes, (rows * row_bytes,) uint8. Products dequantize a panel of
rows at a time (PANEL_BYTES of float32 at most) and multiply it in float32, so memory stays
bounded whatever the matrix; gathers dequantize only the rows asked for.
"""
from __future__ import annotations

import numpy as np

from ... import quants

PANEL_BYTES = 4 << 20


def _rows(weight: np.ndarray, qtype: str, rows: int, cols: int) -> np.ndarray:
    """The blocks as (rows, row_bytes)."""
    return weight.reshape(rows, quants.BY_NAME[qtype].row_bytes(cols))


def linear_q(x, *bias, weight, qtype, rows, cols):
    """x (..., cols) float32 @ dequantize(weight) (rows, cols).T (+ bias (rows,)) -> (..., rows)."""
    blocks = _rows(weight, qtype, rows, cols)
    x2 = np.ascontiguousarray(x, np.float32).reshape(-1, cols)
    out = np.empty((x2.shape[0], rows), np.float32)
    step = max(1, PANEL_BYTES // (4 * cols))
    for r in range(0, rows, step):
        panel = quants.dequantize(blocks[r:r + step], qtype).reshape(-1, cols)
        np.matmul(x2, panel.T, out=out[:, r:r + step])
    if bias:
        out += bias[0]
    return out.reshape(x.shape[:-1] + (rows,))


def embedding_q(ids, *, weight, qtype, rows, cols):
    """Rows `ids` (any shape, each in [0, rows)) of dequantize(weight) -> ids.shape + (cols,)."""
    ids = np.asarray(ids)
    if ids.size and (ids.min() < 0 or ids.max() >= rows):
        bad = ids[(ids < 0) | (ids >= rows)].flat[0]
        raise IndexError(f"index {int(bad)} is out of range for {rows} rows")
    picked = _rows(weight, qtype, rows, cols)[ids.reshape(-1).astype(np.intp, copy=False)]
    return quants.dequantize(picked, qtype).reshape(ids.shape + (cols,))


def quantized_in(raw: np.ndarray, qtype: str, rows: int) -> np.ndarray:
    """Storage of GGML blocks: the bytes themselves (shared, not copied)."""
    return np.ascontiguousarray(raw, np.uint8).reshape(-1)


def quantized_out(storage: np.ndarray, qtype: str, rows: int) -> np.ndarray:
    return storage


KERNELS = {"linear_q": linear_q, "embedding_q": embedding_q}
