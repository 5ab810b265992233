"""Capture a function's kernel calls once, replay them at near-zero Python cost.

An eager op pays for its bookkeeping in Python (promotion, broadcasting, shape checks, Tensor
objects): ~30 us natively, more in Pyodide. A decode step of a 30-layer transformer is ~1,000
ops, so that bookkeeping alone would cost more than the arithmetic. When a function's shapes do
not change from call to call (a decode step over a fixed-capacity KV cache, with the position
passed as data), the kernels it calls and the arguments they get are the same every time:

    graph = engine.graph.capture(step, ids, positions)    # runs step(ids, positions) once, eagerly
    logits = graph.replay(next_ids, next_positions)        # the same kernels, new input values

`capture` runs the function with the backend's `run`/`run_fused` recorded: for each call the
kernel, its parameters, and where each argument comes from: an earlier call's output (a slot,
viewed with the recorded layout) or a buffer that existed before (a weight, a cache, a constant,
an input: referenced as is, its view made once). `replay` copies the new input values into the
input tensors' buffers and calls the kernels in order; buffers written in place (the KV cache by
INDEX_COPY) are written again. What it returns is the function's output, as Tensors viewing this
replay's buffers (valid until the next replay).

The contract, checked where it can be: the function reads nothing from the host while captured
(`.numpy()`, `.item()`, `bool(t)` raise GraphError: the value would be baked in), every value that
changes between calls comes in through the inputs, and input shapes stay as captured. Backends
whose storage is NumPy arrays (numpy, simd) replay; others raise GraphError at capture, and
callers fall back to eager calls.
"""
from __future__ import annotations

import numpy as np

from .errors import EngineError, InputError
from .tensor import Tensor


class GraphError(EngineError):
    """A function that cannot be captured (a host read while capturing, an unsupported backend)."""


class _Recorder:
    """Stands in for the backend's run/run_fused/copy_out while capturing."""

    def __init__(self, backend):
        self.backend = backend
        self.steps: list = []
        self.slot_of: dict[int, int] = {}       # id(buffer) -> slot, for buffers the steps produced
        self.keep: list = []                    # those buffers, alive so that no id is reused

    def _refs(self, inputs):
        return [(self.slot_of.get(id(t._buf)), t._buf, t._layout) for t in inputs]

    def _produced(self, outs) -> list[int]:
        slots = []
        for buf, _ in outs:
            self.slot_of[id(buf)] = len(self.keep)
            slots.append(len(self.keep))
            self.keep.append(buf)
        return slots

    def run(self, op, inputs, dtype, params):
        outs = type(self.backend).run(self.backend, op, inputs, dtype, params)
        self.steps.append(("op", op, self._refs(inputs), dtype, params, self._produced(outs)))
        return outs

    def run_fused(self, name, inputs, dtype, params):
        outs = type(self.backend).run_fused(self.backend, name, inputs, dtype, params)
        self.steps.append(("fused", name, self._refs(inputs), dtype, params, self._produced(outs)))
        return outs

    def copy_out(self, buf, layout):
        raise GraphError("a captured function read a tensor's value on the host (.numpy(), .item(), bool(), "
                         "...): that value would be fixed in the graph; pass it in as an input instead")


class Graph:
    def __init__(self, backend, inputs: list[Tensor], recorder: _Recorder, outputs):
        self.backend = backend
        self.inputs = [backend.view(t._buf, t._layout) for t in inputs]         # written by replay
        self.slots = list(recorder.keep)
        self.ops = len(recorder.steps)
        self.plan = [self._compiled(step) for step in recorder.steps]
        self._single = isinstance(outputs, Tensor)
        outputs = [outputs] if self._single else list(outputs)
        if not all(isinstance(t, Tensor) for t in outputs):
            raise GraphError("a captured function must return a Tensor or a tuple of Tensors")
        # per output: (slot or None, the buffer when no step produced it, layout, dtype)
        self.outputs = [(recorder.slot_of.get(id(t._buf)), t._buf, t._layout, t.dtype) for t in outputs]

    def _compiled(self, step):
        kind, key, refs, dtype, params, out_slots = step
        backend = self.backend
        if kind == "op":
            fn, kwargs = backend.kernels[key], dict(params, dtype=dtype)
        else:
            fn, kwargs = backend.fused[key], dict(params)
        args = [(slot, layout) if slot is not None else (None, backend.view(buf, layout))
                for slot, buf, layout in refs]
        return fn, args, kwargs, out_slots, dtype

    def replay(self, *values):
        """Run the captured kernels on new input values (array-likes of the captured shapes);
        returns the output Tensor(s), viewing this replay's results."""
        if len(values) != len(self.inputs):
            raise InputError(f"the graph takes {len(self.inputs)} inputs, got {len(values)}")
        for target, value in zip(self.inputs, values):
            value = np.asarray(value)
            if value.shape != target.shape:
                raise InputError(f"graph input of shape {value.shape}, captured with {target.shape}")
            np.copyto(target, value, casting="unsafe")
        slots, view, own = self.slots, self.backend.view, self.backend._own
        with np.errstate(all="ignore"):
            for fn, args, kwargs, out_slots, dtype in self.plan:
                out = fn(*[a if s is None else view(slots[s], a) for s, a in args], **kwargs)
                if out is None:                           # written in place (INDEX_COPY)
                    continue
                if isinstance(out, tuple):
                    for slot, o, d in zip(out_slots, out, dtype):
                        slots[slot] = own(o, d)[0]
                else:
                    slots[out_slots[0]] = own(out, dtype)[0]
        results = tuple(Tensor(buf if slot is None else slots[slot], layout, dtype, self.backend)
                        for slot, buf, layout, dtype in self.outputs)
        return results[0] if self._single else results


def capture(fn, *inputs: Tensor) -> tuple[Graph, object]:
    """Run fn(*inputs) once, eagerly, recording its kernel calls; returns (graph, its output).
    The inputs are Tensors on one backend whose buffers replay() overwrites with new values."""
    if not inputs or not all(isinstance(t, Tensor) for t in inputs):
        raise InputError("capture needs the function's input tensors")
    backend = inputs[0]._backend
    if getattr(backend, "storage", None) != "numpy" or not hasattr(backend, "_own"):
        raise GraphError(f"capture/replay runs on backends with NumPy storage (numpy, simd), not {backend.name}")
    if any(t._backend is not backend or not t._layout.is_contiguous or t._layout.offset for t in inputs):
        raise InputError("graph inputs must be contiguous tensors on one backend")
    recorder = _Recorder(backend)
    backend.run, backend.run_fused, backend.copy_out = recorder.run, recorder.run_fused, recorder.copy_out
    try:
        outputs = fn(*inputs)
    finally:
        del backend.run, backend.run_fused, backend.copy_out      # the class's methods again
    return Graph(backend, list(inputs), recorder, outputs), outputs
