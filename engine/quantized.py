"""QuantizedTensor: a weight kept in a GGML block format on any backend.

A quantized weight is a stack of rows; each row of `shape[-1]` elements is a run of blocks
(engine.quants). It stays quantized in memory: `F.linear(x, w)` multiplies by it and
`F.embedding(ids, w)` gathers rows of it through the backend's fused kernels "linear_q" and
"embedding_q" (engine.ops), which dequantize block by block as they go. `dequantize()` gives
the whole float32 tensor when one is wanted.

Each backend keeps the blocks in the layout its kernels read (`backend.quantized_in(raw,
qtype, rows)` packs the GGML bytes, `backend.quantized_out(storage, qtype, rows)` gives them
back): numpy and simd share GGML's own bytes, so moving between them is free; webgpu uploads
them to a storage buffer, with the lone f16 scale of the types whose blocks are an odd number of
half-words (q4_0, q5_0, q8_0, q3_k, q6_k) moved after the blocks so that every block starts on a
32-bit word (engine/backends/webgpu/quantized.py).

The tensor reports `dtype` float32, the dtype it computes in, so modules declared in float32
load it as it is (`nn.Linear`, `nn.Embedding`); `qtype` names the block format.
"""
from __future__ import annotations

import math

import numpy as np

from . import dtypes
from . import quants
from .device import get_backend
from .errors import BackendError, SizeMismatch, UnknownDtype
from .layout import Layout
from .tensor import Tensor, from_raw, parse_to_args


class QuantizedTensor:
    __slots__ = ("name", "file", "qtype", "shape", "_buf", "_backend")
    dtype = dtypes.float32                    # what it computes as
    is_quantized = True

    def __init__(self, buf, qtype: str, shape: tuple[int, ...], backend, *, name: str | None = None,
                 file: str | None = None):
        self._buf, self.qtype, self.shape, self._backend = buf, qtype, tuple(shape), backend
        self.name, self.file = name, file

    @classmethod
    def from_raw(cls, raw, qtype: str, shape, device: str | None = None, *, name: str | None = None,
                 file: str | None = None) -> "QuantizedTensor":
        """Wrap GGML blocks (bytes-like or uint8 array, row by row) of type `qtype` and `shape`
        (torch order, the row length last); the bytes must be exactly the blocks that shape needs."""
        kind = quants.BY_NAME.get(qtype)
        if kind is None or not kind.quantized:
            raise UnknownDtype(f"{qtype!r} is not a quantized GGML type; known: "
                               f"{', '.join(n for n, k in quants.BY_NAME.items() if k.quantized)}",
                               file=file, tensor=name)
        shape = tuple(int(n) for n in shape)
        raw = np.frombuffer(raw, np.uint8) if not isinstance(raw, np.ndarray) else raw.reshape(-1)
        if not shape or shape[-1] % kind.block_size:
            raise SizeMismatch(f"shape {shape}: the row length must be a multiple of the {qtype} block size "
                               f"{kind.block_size}", file=file, tensor=name)
        need = kind.row_bytes(shape[-1]) * math.prod(shape[:-1])
        if raw.dtype != np.uint8 or raw.size != need:
            raise SizeMismatch(f"{qtype} {shape} needs {need} bytes, got {raw.size}", file=file, tensor=name)
        backend = get_backend(device)
        rows = math.prod(shape[:-1])
        return cls(backend.quantized_in(raw, qtype, rows), qtype, shape, backend, name=name, file=file)

    # --- the Tensor-like surface modules and loaders use ---------------------------------
    @property
    def device(self) -> str:
        return self._backend.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return self.ndim

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def rows(self) -> int:
        """How many rows of `shape[-1]` elements."""
        return math.prod(self.shape[:-1])

    @property
    def nbytes(self) -> int:
        """Bytes of GGML blocks (what is streamed per product)."""
        return quants.BY_NAME[self.qtype].row_bytes(self.shape[-1]) * self.rows

    @property
    def raw(self) -> np.ndarray:
        """The GGML blocks as uint8, row by row (a copy when the backend repacked them)."""
        return self._backend.quantized_out(self._buf, self.qtype, self.rows)

    def to(self, *args, dtype=None, device=None) -> "QuantizedTensor":
        """to(device) moves the blocks (free between numpy and simd); to(float32) is a no-op,
        other dtypes are refused: dequantize() first."""
        dtype, device = parse_to_args(args, dtype, device)
        if dtype is not None and dtypes.as_dtype(dtype) is not dtypes.float32:
            raise UnknownDtype(f"a {self.qtype} tensor computes in float32; call dequantize() before "
                               f"casting to {dtypes.as_dtype(dtype).name}", file=self.file, tensor=self.name)
        target = None if device is None else get_backend(device)
        if target is None or target is self._backend:
            return self
        if getattr(target, "storage", None) == getattr(self._backend, "storage", False):
            buf = self._buf
        else:
            buf = target.quantized_in(self.raw, self.qtype, self.rows)
        return QuantizedTensor(buf, self.qtype, self.shape, target, name=self.name, file=self.file)

    # --- whole rows of blocks (exact: a row permutation or concatenation moves bytes only) ---
    def _rows_bytes(self) -> np.ndarray:
        return self.raw.reshape(self.rows, -1)

    def _like(self, raw: np.ndarray, rows: int) -> "QuantizedTensor":
        return QuantizedTensor.from_raw(np.ascontiguousarray(raw).reshape(-1), self.qtype, (rows, self.shape[-1]),
                                        self.device, name=self.name, file=self.file)

    def index_rows(self, order) -> "QuantizedTensor":
        """The 2-D weight with its rows taken in `order` (row indices), on the same device."""
        order = np.asarray(order, np.intp)
        if self.ndim != 2 or order.ndim != 1 or (order.size and (order.min() < 0 or order.max() >= self.rows)):
            raise SizeMismatch(f"index_rows: {order.size} row indices for a weight of shape {self.shape}",
                               file=self.file, tensor=self.name)
        return self._like(self._rows_bytes()[order], order.size)

    @staticmethod
    def cat(tensors) -> "QuantizedTensor":
        """2-D weights of one qtype, row length and device stacked row-wise (a weight whose product
        is the parts' products side by side: one kernel call instead of several)."""
        first = tensors[0]
        if any(t.ndim != 2 or t.qtype != first.qtype or t.shape[-1] != first.shape[-1] or t.device != first.device
               for t in tensors):
            raise SizeMismatch("cat: the weights differ in type, row length or device: " +
                               ", ".join(f"{t.name} {t.qtype} {t.shape} on {t.device}" for t in tensors),
                               file=first.file, tensor=first.name)
        rows = sum(t.rows for t in tensors)
        parts = [t._rows_bytes() for t in tensors]
        joined = _adjacent(parts)                    # llama.cpp writes ffn_gate just before ffn_up
        return first._like(np.concatenate(parts) if joined is None else joined, rows)

    @staticmethod
    def adjacent(tensors) -> bool:
        """Whether cat(tensors) is a view of their bytes (they lie end to end in one buffer) rather
        than a copy of them."""
        return _adjacent([t._rows_bytes() for t in tensors]) is not None

    def split(self, sizes) -> list["QuantizedTensor"]:
        """The 2-D weight cut into consecutive runs of `sizes` rows; on backends that keep GGML's
        bytes (numpy, simd) the parts share this tensor's storage."""
        if self.ndim != 2 or sum(sizes) != self.rows or any(n <= 0 for n in sizes):
            raise SizeMismatch(f"split: row counts {list(sizes)} do not add up to the {self.rows} rows of "
                               f"{self.shape}", file=self.file, tensor=self.name)
        rows, parts, start = self._rows_bytes(), [], 0
        for n in sizes:
            parts.append(self._like(rows[start:start + n], n))
            start += n
        return parts

    def dequantize(self) -> Tensor:
        """The float32 tensor, on this tensor's device."""
        ids = from_raw(np.arange(self.rows, dtype=np.int64), dtypes.int64, (self.rows,), self.device)
        return self.run_kernel("embedding_q", [ids]).reshape(self.shape)   # every row

    def run_kernel(self, name: str, tensors) -> Tensor:
        """The backend's quantized kernel `name` ("linear_q" or "embedding_q", engine.ops) on
        `tensors` (float32 x and optional bias, or int64 ids) and these blocks: float32 out."""
        self.check_computable()
        if any(t._backend is not self._backend for t in tensors):
            raise BackendError(f"{name[:-2]}: the input is on {tensors[0].device!r} and the {self.qtype} weight on "
                               f"{self.device!r}; move one of them with .to(device)")
        buf, shape = self._backend.run_fused(name, list(tensors), dtypes.float32, {
            "weight": self._buf, "qtype": self.qtype, "rows": self.rows, "cols": self.shape[-1]})[0]
        return Tensor(buf, Layout(shape), dtypes.float32, self._backend)

    def check_computable(self) -> None:
        """Raise UnknownDtype, naming the tensor, for a type no kernel reads yet (iq*, tq*, ...)."""
        if not quants.can_dequantize(self.qtype):
            raise UnknownDtype(f"cannot compute with GGML type {self.qtype!r} yet; supported: "
                               f"{', '.join(quants.DEQUANTIZABLE)}", file=self.file, tensor=self.name)

    def __repr__(self) -> str:
        where = "" if self.device == "numpy" else f", device={self.device!r}"
        label = f"{self.name!r}, " if self.name else ""
        return f"QuantizedTensor({label}{self.qtype}, shape={self.shape}{where})"


def _root(a: np.ndarray):
    """The object that owns an array's memory (an ndarray, bytes, an mmap), through views and
    memoryview slices."""
    while True:
        if isinstance(a, np.ndarray) and a.base is not None:
            a = a.base
        elif isinstance(a, memoryview) and a.obj is not None:
            a = a.obj
        else:
            return a


def _adjacent(parts: list[np.ndarray]) -> np.ndarray | None:
    """One uint8 view of the parts' bytes when they lie end to end in one buffer (no copy), else None."""
    if not all(p.dtype == np.uint8 and p.flags.c_contiguous for p in parts):
        return None
    root = _root(parts[0])
    if any(_root(p) is not root for p in parts[1:]):
        return None
    addresses = [p.__array_interface__["data"][0] for p in parts]
    if any(a + p.nbytes != b for a, p, b in zip(addresses, parts, addresses[1:])):
        return None
    whole = np.frombuffer(root, np.uint8) if not isinstance(root, np.ndarray) else root.reshape(-1).view(np.uint8)
    start = addresses[0] - whole.__array_interface__["data"][0]
    return whole[start:start + sum(p.nbytes for p in parts)]
