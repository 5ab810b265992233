"""A prefix-scoped weight loader: `weights.pp("encoder.layer.3").get("weight", shape)`.

Think of `pp` as `cd`: models ask for their tensors by the checkpoint's own
names relative to where they sit, and every failure names the full tensor.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from . import dtypes
from .errors import DtypeMismatch, MissingTensor, ShapeMismatch
from .rows import RowTable
from .quantized import QuantizedTensor
from .tensor import Tensor, from_numpy


class Weights:
    def __init__(self, tensors: Mapping, prefix: str = "", *, device: str | None = None, file=None):
        self.tensors = tensors
        self.prefix = prefix
        self.device = device
        self.file = file if file is not None else getattr(tensors, "name", None)

    def pp(self, name) -> "Weights":
        """A loader one level down: names are looked up under `prefix.name`."""
        return Weights(self.tensors, self.full_name(str(name)), device=self.device, file=self.file)

    def full_name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def __contains__(self, key: str) -> bool:
        return self.full_name(key) in self.tensors

    def keys(self) -> list[str]:
        """Names under this prefix, relative to it."""
        if not self.prefix:
            return list(self.tensors.keys())
        head = self.prefix + "."
        return [k[len(head):] for k in self.tensors.keys() if k.startswith(head)]

    def get(self, key: str, shape=None, dtype=None):
        """The tensor `key`, checked against `shape` and `dtype` when given."""
        name = self.full_name(key)
        if name not in self.tensors:
            raise MissingTensor("missing tensor", file=self.file, tensor=name)
        info = getattr(self.tensors, "info", None)
        if info is not None:                              # check before reading any data
            meta = info(name)
            self._check(name, tuple(meta.shape), meta.dtype, shape, dtype)
        t = self.tensors[name]
        if isinstance(t, (RowTable, QuantizedTensor)):    # rows on demand / GGML blocks: kept as they are
            self._check(name, t.shape, t.dtype, shape, dtype)
            return t if self.device is None else t.to(self.device)
        if not isinstance(t, Tensor):                     # plain NumPy state dicts work too
            t = from_numpy(np.asarray(t))
        self._check(name, tuple(t.shape), t.dtype, shape, dtype)
        return t if self.device is None else t.to(self.device)

    def _check(self, name, got_shape, got_dtype, shape, dtype) -> None:
        if shape is not None and got_shape != tuple(shape):
            raise ShapeMismatch(f"shape mismatch: expected {tuple(shape)}, found {got_shape}",
                                file=self.file, tensor=name)
        if dtype is not None and got_dtype is not dtypes.as_dtype(dtype):
            raise DtypeMismatch(f"dtype mismatch: expected {dtypes.as_dtype(dtype).name}, found {got_dtype.name}",
                                file=self.file, tensor=name)


class AsFloat32:
    """A checkpoint's tensors by name with half-precision ones widened to float32 as they are
    read (a site stores them in float16; the model computes in float32), less the `ignored`
    names; the `keep` names come as stored (weights a backend multiplies in float16). Row tables
    (embeddings served by rows) stay as they are: they widen the rows they gather."""

    def __init__(self, tensors, ignored=(), keep=()):
        self.tensors, self.ignored, self.keep = tensors, frozenset(ignored), frozenset(keep)
        self.name = getattr(tensors, "name", None)

    def __contains__(self, name):
        return name in self.tensors and name not in self.ignored

    def keys(self):
        return [name for name in self.tensors.keys() if name not in self.ignored]

    def __getitem__(self, name):
        t = self.tensors[name]
        if isinstance(t, Tensor) and t.dtype in (dtypes.float16, dtypes.bfloat16) and name not in self.keep:
            return t.float()
        return t
