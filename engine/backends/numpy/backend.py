"""NumPy backend: allocator (copy_in / view / copy_out) and the kernel runner."""
from __future__ import annotations

import numpy as np

from . import quantized
from .kernels import FUSED, KERNELS


class NumpyBackend:
    name = "numpy"
    storage = "numpy"          # backends with the same storage kind share buffers: moving is free
    kernels = KERNELS
    fused = FUSED

    # --- allocator ------------------------------------------------------------------
    def copy_in(self, raw: np.ndarray):
        """Storage for a raw array (storage dtype). Contiguous input is not copied."""
        return np.ascontiguousarray(raw).reshape(-1)

    def view(self, buf: np.ndarray, layout) -> np.ndarray:
        """A NumPy view of `layout` over `buf`: no copy, read-only for strided views."""
        shape = layout.shape
        if layout.offset == 0 and buf.size == layout.numel and layout.is_contiguous:
            return buf.reshape(shape)
        if layout.numel == 0:
            return np.empty(shape, buf.dtype)
        item = buf.itemsize
        return np.ndarray(shape, buf.dtype, buffer=buf, offset=layout.offset * item,
                          strides=tuple(s * item for s in layout.strides))

    def copy_out(self, buf, layout) -> np.ndarray:
        """A NumPy array the caller owns, in the storage dtype."""
        return np.array(self.view(buf, layout), copy=True, order="C")

    # GGML blocks (engine.quantized): kept as they are
    quantized_in = staticmethod(quantized.quantized_in)
    quantized_out = staticmethod(quantized.quantized_out)

    def sync(self) -> None:
        pass

    # --- kernels --------------------------------------------------------------------
    def run(self, op, inputs, dtype, params):
        """Run a primitive op; returns one buffer per output."""
        arrays = [self.view(t._buf, t._layout) for t in inputs]
        with np.errstate(all="ignore"):
            out = self.kernels[op](*arrays, dtype=dtype, **params)
        if out is None:                                   # INDEX_COPY wrote into its first input
            return []
        if isinstance(out, tuple):
            return [self._own(o, d) for o, d in zip(out, dtype)]
        return [self._own(out, dtype)]

    def run_fused(self, name, inputs, dtype, params):
        arrays = [self.view(t._buf, t._layout) for t in inputs]
        with np.errstate(all="ignore"):
            return [self._own(self.fused[name](*arrays, **params), dtype)]

    @staticmethod
    def _own(a, dtype):
        a = np.asarray(a)
        if a.dtype != dtype.storage:
            a = a.astype(dtype.storage)
        return np.ascontiguousarray(a).reshape(-1), a.shape


BACKEND = NumpyBackend()
