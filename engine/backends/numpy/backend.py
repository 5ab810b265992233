"""NumPy backend: allocator (copy_in / view / copy_out) and the kernel runner."""
from __future__ import annotations

import numpy as np

from ...ops import check_tables
from . import quantized
from .kernels import FUSED, KERNELS

check_tables("numpy", KERNELS, FUSED)

# Kernels run with NumPy's floating-point warnings off (1/0 is inf, as in torch, not a warning).
# `with np.errstate(all="ignore")` costs ~0.8 us natively, more than a small ufunc; NumPy 2 keeps
# that mode in a context variable, so the mode is made once here and each call only sets and
# resets the variable: the same state errstate would set, at a sixth of the cost.
try:
    from numpy._core._ufunc_config import _extobj_contextvar as FP_MODE, _make_extobj
    QUIET_FP = _make_extobj(all="ignore")
except ImportError:                         # another NumPy: the public context manager
    class FP_MODE:                          # noqa: N801 - stands in for the context variable
        @staticmethod
        def set(_):
            state = np.errstate(all="ignore")
            state.__enter__()
            return state

        @staticmethod
        def reset(state):
            state.__exit__(None, None, None)
    QUIET_FP = None


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
        if not layout.offset and buf.size == layout.numel and layout.is_contiguous:   # the common case
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
        view = self.view
        arrays = [view(t._buf, t._layout) for t in inputs]
        kernel = self.kernels[op]
        token = FP_MODE.set(QUIET_FP)
        try:
            out = kernel(*arrays, dtype=dtype, **params)
        finally:
            FP_MODE.reset(token)
        if type(out) is np.ndarray and out.dtype is dtype.storage and out.flags.c_contiguous:
            return [(out.reshape(-1), out.shape)]         # the common case of _own
        if out is None:                                   # INDEX_COPY wrote into its first input
            return []
        if isinstance(out, tuple):
            return [self._own(o, d) for o, d in zip(out, dtype)]
        return [self._own(out, dtype)]

    def run_fused(self, name, inputs, dtype, params):
        view = self.view
        arrays = [view(t._buf, t._layout) for t in inputs]
        kernel = self.fused[name]
        token = FP_MODE.set(QUIET_FP)
        try:
            out = kernel(*arrays, **params)
        finally:
            FP_MODE.reset(token)
        if type(out) is np.ndarray and out.dtype is dtype.storage and out.flags.c_contiguous:
            return [(out.reshape(-1), out.shape)]
        return [self._own(out, dtype)]

    @staticmethod
    def _own(a, dtype):
        a = np.asarray(a)
        if a.dtype != dtype.storage:
            a = a.astype(dtype.storage)
        return np.ascontiguousarray(a).reshape(-1), a.shape


BACKEND = NumpyBackend()
