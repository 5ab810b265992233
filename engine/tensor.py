"""engine.Tensor: a dtype, a Layout (shape/strides/offset) and a backend buffer.

Views share the buffer and change only the Layout. Data never moves between
host and backend except through `numpy()` (or `item()`/`tolist()`).

This module holds what needs no kernel: metadata, views and leaving the engine. The methods
that compute (operators, `x.sum(1)`, `to(dtype)`, `contiguous()`, ...) are engine.functions'
functions, which that module attaches to the class when it is imported (engine imports it), so
this module never imports it: the layers go one way.
"""
from __future__ import annotations

import math

import numpy as np

from . import dtypes
from .device import get_backend
from .layout import Layout, normalize_dim


class Tensor:
    __slots__ = ("_buf", "_layout", "dtype", "_backend", "__weakref__")
    __hash__ = object.__hash__          # == builds a tensor, so hash by identity like torch

    def __init__(self, buf, layout: Layout, dtype: dtypes.DType, backend):
        self._buf = buf
        self._layout = layout
        self.dtype = dtype
        self._backend = backend

    # --- metadata ---------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._layout.shape

    @property
    def ndim(self) -> int:
        return len(self._layout.shape)

    @property
    def device(self) -> str:
        return self._backend.name

    def dim(self) -> int:
        return self.ndim

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[normalize_dim(dim, self.ndim)]

    def numel(self) -> int:
        return self._layout.numel

    def stride(self, dim: int | None = None):
        return self._layout.strides if dim is None else self._layout.strides[normalize_dim(dim, self.ndim)]

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    def is_contiguous(self) -> bool:
        return self._layout.is_contiguous

    @property
    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", threshold=50, precision=4, prefix="tensor(")
        extra = "" if self.dtype in (dtypes.float32, dtypes.int64, dtypes.bool_) else f", dtype={self.dtype}"
        return f"tensor({body}{extra}{'' if self.device == 'numpy' else f', device={self.device!r}'})"

    # --- leaving the engine -----------------------------------------------------------
    def raw_numpy(self) -> np.ndarray:
        """A host copy in the storage dtype (bfloat16 as uint16 bits)."""
        return self._backend.copy_out(self._buf, self._layout)

    def numpy(self) -> np.ndarray:
        """A host NumPy copy; bfloat16 comes back as float32 (NumPy has no bfloat16)."""
        return dtypes.to_numpy_compute(self.raw_numpy(), self.dtype)

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def item(self):
        if self.numel() != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        return bool(self.item())

    def __index__(self):
        if self.dtype.kind not in "iu":
            raise TypeError("only integer tensors can be used as an index")
        return int(self.item())

    # --- conversion: to(), float(), contiguous(), clone() ... are attached by engine.functions ---
    @staticmethod
    def _from_raw_on(raw: np.ndarray, dtype: dtypes.DType, shape, backend) -> "Tensor":
        return Tensor(backend.copy_in(raw), Layout(shape), dtype, backend)

    # --- views ------------------------------------------------------------------------
    def _view(self, layout: Layout) -> "Tensor":
        return Tensor(self._buf, layout, self.dtype, self._backend)

    def _infer_shape(self, shape) -> tuple[int, ...]:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(int(s) for s in shape)
        if shape.count(-1) > 1:
            raise ValueError("only one dimension can be -1")
        if -1 in shape:
            rest = math.prod(s for s in shape if s != -1)
            if rest == 0 or self.numel() % rest:
                raise ValueError(f"shape {shape} is invalid for input of size {self.numel()}")
            shape = tuple(self.numel() // rest if s == -1 else s for s in shape)
        if math.prod(shape) != self.numel():
            raise ValueError(f"shape {shape} is invalid for input of size {self.numel()}")
        return shape

    def view(self, *shape) -> "Tensor":
        shape = self._infer_shape(shape)
        layout = self._layout.view(shape)
        if layout is None:
            raise ValueError(f"view size {shape} is not compatible with the tensor's strides "
                             f"{self.stride()} (shape {self.shape}); use reshape()")
        return self._view(layout)

    def reshape(self, *shape) -> "Tensor":
        shape = self._infer_shape(shape)
        layout = self._layout.view(shape)
        return self._view(layout) if layout is not None else self.contiguous().view(shape)

    def permute(self, *dims) -> "Tensor":
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        return self._view(self._layout.permute(dims))

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        dims = list(range(self.ndim))
        a, b = normalize_dim(dim0, self.ndim), normalize_dim(dim1, self.ndim)
        dims[a], dims[b] = dims[b], dims[a]
        return self.permute(dims)

    def t(self) -> "Tensor":
        if self.ndim > 2:
            raise ValueError("t() expects a tensor with <= 2 dimensions")
        return self if self.ndim < 2 else self.transpose(0, 1)

    @property
    def T(self) -> "Tensor":  # noqa: N802 - torch's name
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> "Tensor":  # noqa: N802 - torch's name
        return self.transpose(-2, -1)

    def unsqueeze(self, dim: int) -> "Tensor":
        return self._view(self._layout.unsqueeze(normalize_dim(dim, self.ndim + 1)))

    def squeeze(self, dim=None) -> "Tensor":
        if dim is None:
            dims = [i for i, n in enumerate(self.shape) if n == 1]
        else:
            dims = [normalize_dim(d, self.ndim) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))]
            dims = [d for d in dims if self.shape[d] == 1]
        lay = self._layout
        return self._view(Layout([n for i, n in enumerate(lay.shape) if i not in dims],
                                 [s for i, s in enumerate(lay.strides) if i not in dims], lay.offset))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        if self.ndim == 0:
            return self.reshape(1)
        a, b = normalize_dim(start_dim, self.ndim), normalize_dim(end_dim, self.ndim)
        return self.reshape(self.shape[:a] + (-1,) + self.shape[b + 1:]) if b >= a else self

    def unflatten(self, dim: int, sizes) -> "Tensor":
        d = normalize_dim(dim, self.ndim)
        return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

    def expand(self, *shape) -> "Tensor":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return self._view(self._layout.expand(shape))

    def broadcast_to(self, shape) -> "Tensor":
        return self.expand(shape)

    def expand_as(self, other: "Tensor") -> "Tensor":
        return self.expand(other.shape)

    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        d = normalize_dim(dim, self.ndim)
        return self._view(self._layout.slice(d, start, start + length, 1))

    def _as_strided(self, shape, strides, offset=None) -> "Tensor":
        """Internal: an arbitrary view over the same buffer (pooling windows, im2col)."""
        return self._view(Layout(shape, strides, self._layout.offset if offset is None else offset))

    def __getitem__(self, index) -> "Tensor":
        if not isinstance(index, tuple):
            index = (index,)
        if sum(1 for i in index if i is not None and i is not Ellipsis) > self.ndim:
            raise IndexError(f"too many indices for a tensor of {self.ndim} dimensions")
        if any(i is Ellipsis for i in index):
            k = index.index(Ellipsis)
            fill = self.ndim - sum(1 for i in index if i is not None and i is not Ellipsis)
            index = index[:k] + (slice(None),) * fill + index[k + 1:]
        layout, dim, gathers = self._layout, 0, []
        for i in index:
            if i is None:
                layout = layout.unsqueeze(dim)
                dim += 1
            elif isinstance(i, slice):
                if i.step is not None and i.step <= 0:
                    raise ValueError("step must be greater than zero")
                layout = layout.slice(dim, i.start, i.stop, i.step or 1)
                dim += 1
            elif isinstance(i, (int, np.integer)) or (isinstance(i, Tensor) and i.ndim == 0
                                                       and i.dtype.kind in "iu"):
                layout = layout.select(dim, int(i))
            elif isinstance(i, (list, np.ndarray, Tensor)):
                gathers.append((dim, i))
                dim += 1
            else:
                raise TypeError(f"unsupported index {i!r}")
        out = self._view(layout)
        if len(gathers) > 1:
            raise IndexError("indexing with more than one index tensor is not supported")
        for d, idx in gathers:
            out = out.index_select(d, idx)            # a kernel: engine.functions' method
        return out


def parse_to_args(args, dtype=None, device=None):
    """torch's `.to(...)` positional forms: a dtype, a device name, or both."""
    for a in args:
        if isinstance(a, (dtypes.DType, np.dtype)) or (isinstance(a, str) and a in dtypes.BY_NAME):
            dtype = a
        else:
            device = a
    return dtype, device


def from_raw(raw: np.ndarray, dtype: dtypes.DType, shape, device: str | None = None) -> Tensor:
    """Wrap raw storage (bfloat16 as uint16 bits) without copying when contiguous."""
    return Tensor._from_raw_on(raw, dtype, tuple(shape), get_backend(device))



def from_numpy(a: np.ndarray, device: str | None = None) -> Tensor:
    """A tensor over a NumPy array's data (shared when contiguous), keeping its dtype."""
    a = np.asarray(a)
    return from_raw(a, dtypes.from_numpy_dtype(a.dtype), a.shape, device)


def tensor(data, dtype=None, device: str | None = None) -> Tensor:
    """A new tensor (copied) from a Python scalar, nested lists, a NumPy array or a Tensor.

    Python floats become float32 and ints int64, as in torch.
    """
    if isinstance(data, Tensor):
        a = data.numpy()
    else:
        a = np.array(data)
        if a.dtype == np.float64 and not isinstance(data, np.ndarray):
            a = a.astype(np.float32)
        if a.dtype.kind in "iu" and not isinstance(data, np.ndarray):
            a = a.astype(np.int64)
    src = dtypes.as_dtype(a.dtype)
    dst = (data.dtype if isinstance(data, Tensor) else src) if dtype is None else dtypes.as_dtype(dtype)
    return from_raw(np.array(dtypes.cast_numpy(a, src, dst), copy=True), dst, a.shape, device)
