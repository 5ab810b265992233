"""Capture a function's kernel calls once, replay them at near-zero Python cost.

An eager op pays for its bookkeeping in Python (promotion, broadcasting, shape checks, Tensor
objects): 3-12 us natively for the common cases, more where it must promote or broadcast, 2-3x
that in Pyodide. A decode step of a 30-layer transformer is hundreds of ops, so that bookkeeping
alone would cost more than the arithmetic. When a function's shapes
do not change from call to call (a decode step over a fixed-capacity KV cache, with the position
passed as data), the kernels it calls and the arguments they get are the same every time:

    graph, first = engine.graph.capture(step, ids, positions)   # runs step(ids, positions) once, eagerly
    logits = graph.replay(next_ids, next_positions)             # the same kernels, new input values

`capture` runs the function with the backend's `run`/`run_fused` recorded: for each call the
kernel, its parameters, where each argument comes from (an earlier call's output, or a buffer
that existed before: a weight, a cache, a constant, an input) and the buffers it returned. Those
output buffers become the graph's own: every replay writes the same memory, so every argument
of every step is fixed at capture, as a CUDA graph's are. Each step then becomes one prepared
call, the cheapest its backend allows:

- a native call replayed as recorded: the simd backend reports the C calls a kernel made
  (`backend.native_calls()`); when every pointer they were given lies in the step's own inputs,
  outputs or parameters (no temporary copy made on the way), the step is those calls with those
  arguments, and nothing else runs in Python. The backend joins consecutive ones into one
  program (`backend.join_prepared`; wasm_kernels/program.c): one ctypes call runs them all, so a
  decode step's ~400 kernels replay in a handful of calls;
- an elementwise NumPy kernel (one ufunc) as `ufunc(*inputs, out=output)`;
- anything else: the kernel called on its fixed input views, its result copied into the output.

`replay` copies the new input values into the input tensors' buffers and runs the prepared calls
in order; buffers written in place (the KV cache by INDEX_COPY) are written again. What it
returns is the function's output, as Tensors viewing the graph's buffers (overwritten by the next
replay).

The contract, checked where it can be: the function reads nothing from the host while captured
(`.numpy()`, `.item()`, `bool(t)` raise GraphError: the value would be baked in), every value that
changes between calls comes in through the inputs, and input shapes stay as captured. Backends
whose storage is NumPy arrays (numpy, simd) replay this way.

The webgpu backend replays differently: its kernels only record dispatches (a pipeline, the
buffers bound, the workgroups) and submit them when data must come back, so capturing keeps the
function's dispatches with their buffers, and a replay writes the new input values into the
inputs' buffers and submits the same dispatches again, in one bridge call in the browser: no
kernel runs in Python at all. (Checks kernels do on the host, such as an index's range against
the host copy of a small integer tensor, run at capture only.)
"""
from __future__ import annotations

import contextlib
import functools
from collections import OrderedDict

import numpy as np

from .dtypes import int64
from .errors import EngineError, InputError
from .tensor import Tensor, from_numpy, tensor


class GraphError(EngineError):
    """A function that cannot be captured (a host read while capturing, an unsupported backend)."""


class _Recorder:
    """Stands in for the backend's run/run_fused/copy_out while capturing."""

    def __init__(self, backend):
        self.backend = backend
        self.steps: list = []
        self.slot_of: dict[int, int] = {}       # id(buffer) -> slot, for buffers the steps produced
        self.keep: list = []                    # those buffers (the graph's own from now on)
        self.native = getattr(backend, "native_calls", None)

    def _refs(self, inputs):
        return [(self.slot_of.get(id(t._buf)), t._buf, t._layout) for t in inputs]

    def _produced(self, outs) -> list[int]:
        slots = []
        for buf, _ in outs:
            self.slot_of[id(buf)] = len(self.keep)
            slots.append(len(self.keep))
            self.keep.append(buf)
        return slots

    def _record(self, kind, key, run, inputs, dtype, params):
        with self.native() if self.native else contextlib.nullcontext() as calls:
            outs = run(self.backend, key, inputs, dtype, params)
        known = [t._buf for t in inputs] + [buf for buf, _ in outs] + \
            [v for v in params.values() if isinstance(v, np.ndarray)]
        self.steps.append((kind, key, self._refs(inputs), dtype, params, self._produced(outs),
                           [shape for _, shape in outs], calls, known))
        return outs

    def run(self, op, inputs, dtype, params):
        return self._record("op", op, type(self.backend).run, inputs, dtype, params)

    def run_fused(self, name, inputs, dtype, params):
        return self._record("fused", name, type(self.backend).run_fused, inputs, dtype, params)

    def copy_out(self, buf, layout):
        raise GraphError("a captured function read a tensor's value on the host (.numpy(), .item(), bool(), "
                         "...): that value would be fixed in the graph; pass it in as an input instead")


def _copy_into(outputs, fn, args, kwargs):
    """A step run as a kernel call on fixed views, its result(s) copied into the graph's buffers."""
    def call():
        result = fn(*args, **kwargs)
        if result is None:                                 # written in place (INDEX_COPY)
            return
        for out, r in zip(outputs, result if isinstance(result, tuple) else (result,)):
            np.copyto(out, r, casting="unsafe")
    return call


class Graph:
    def __init__(self, backend, inputs: list[Tensor], recorder: _Recorder, outputs, dispatches: list | None = None):
        self.backend = backend
        self.ops = len(recorder.steps)
        self.names = [key if isinstance(key, str) else key.name.lower() for _, key, *_ in recorder.steps]
        self.shapes = [tuple(t.shape) for t in inputs]
        if dispatches is None:                                # NumPy storage: one prepared call a step
            self.inputs = [backend.view(t._buf, t._layout) for t in inputs]         # written by replay
            self.slots = list(recorder.keep)
            self.prepared = {"native": 0, "ufunc": 0, "copy": 0}      # how the steps replay (for tests, profiles)
            calls = [self._prepare(step) for step in recorder.steps]
            join = getattr(backend, "join_prepared", None)    # consecutive native steps as one call
            self.calls = join(calls) if join is not None else calls
        else:                                                 # a device: its recorded dispatches again
            self.inputs = [t._buf for t in inputs]
            self.slots = list(recorder.keep)                  # the buffers the dispatches write
            self.prepared = {"dispatches": len(dispatches)}
            self.calls = [functools.partial(backend.replay, dispatches)]
        self.dispatches = dispatches
        self._single = isinstance(outputs, Tensor)
        outputs = [outputs] if self._single else list(outputs)
        if not all(isinstance(t, Tensor) for t in outputs):
            raise GraphError("a captured function must return a Tensor or a tuple of Tensors")
        self.outputs = [Tensor(t._buf, t._layout, t.dtype, backend) for t in outputs]
        whole = getattr(backend, "whole_graph", None)         # the whole step as one call of the backend's own
        if dispatches is None and whole is not None and self.prepared["native"]:
            program = whole(calls, self.inputs, [t._buf for t in outputs], self.slots)
            if program is not None:
                self.calls = [program]

    def _prepare(self, step):
        kind, key, refs, dtype, params, out_slots, shapes, calls, known = step
        backend = self.backend
        args = [backend.view(self.slots[slot] if slot is not None else buf, layout) for slot, buf, layout in refs]
        outputs = [self.slots[slot].reshape(shape) for slot, shape in zip(out_slots, shapes)]
        if calls:
            bound = backend.bind_native(calls, known)
            if bound is not None:
                self.prepared["native"] += 1
                return bound
        if kind == "op":
            fn, kwargs = backend.kernels[key], dict(params, dtype=dtype)
            ufunc = getattr(fn, "ufunc", None)
            if ufunc is not None and len(outputs) == 1 and \
                    ufunc.resolve_dtypes(tuple(a.dtype for a in args) + (None,))[-1] == outputs[0].dtype:
                self.prepared["ufunc"] += 1
                call = functools.partial(ufunc, *args, out=outputs[0])
                call.host = (args, outputs)                     # what it reads and writes (whole_graph)
                return call
        else:
            fn, kwargs = backend.fused[key], dict(params)
        self.prepared["copy"] += 1
        call = _copy_into(outputs, fn, args, kwargs)
        call.host = (args + [v for v in params.values() if isinstance(v, np.ndarray)], outputs)
        return call

    def replay(self, *values):
        """Run the captured kernels on new input values (array-likes of the captured shapes);
        returns the output Tensor(s), viewing the graph's buffers (until the next replay)."""
        self._write(values)
        self._run()
        return self.outputs[0] if self._single else tuple(self.outputs)

    def launch(self, *values):
        """replay() for a graph with one output, read back without waiting where the backend can
        (a device: one submission with the read-back in it, engine.backends.webgpu.gpu.launch):
        returns an object whose result() gives the output as NumPy. With no values the inputs keep
        what is in them: what the last replay wrote into them on the device (engine.sampler)."""
        if not self._single:
            raise GraphError("launch() reads back a graph with one output")
        if values:
            self._write(values)
        out = self.outputs[0]
        if self.dispatches is None:
            self._run()
            return _Ready(out.numpy())
        return self.backend.launch(self.dispatches, out._buf, out._layout)

    def _run(self) -> None:
        with np.errstate(all="ignore"):
            for call in self.calls:
                call()

    def _write(self, values) -> None:
        if len(values) != len(self.inputs):
            raise InputError(f"the graph takes {len(self.inputs)} inputs, got {len(values)}")
        for target, shape, value in zip(self.inputs, self.shapes, values):
            value = np.asarray(value)
            if value.shape != shape:
                raise InputError(f"graph input of shape {value.shape}, captured with {shape}")
            if isinstance(target, np.ndarray):
                np.copyto(target, value, casting="unsafe")
            else:
                self.backend.write_input(target, value)


class _Ready:
    """Graph.launch's answer where it was computed on the host: already there."""

    def __init__(self, value: np.ndarray):
        self.value = value

    def result(self) -> np.ndarray:
        return self.value


def capture(fn, *inputs: Tensor) -> tuple[Graph, object]:
    """Run fn(*inputs) once, eagerly, recording its kernel calls; returns (graph, its output).
    The inputs are Tensors on one backend whose buffers replay() overwrites with new values."""
    if not inputs or not all(isinstance(t, Tensor) for t in inputs):
        raise InputError("capture needs the function's input tensors")
    backend = inputs[0]._backend
    host = getattr(backend, "storage", None) == "numpy" and hasattr(backend, "_own")
    if not host and not hasattr(backend, "recording"):
        raise GraphError(f"capture/replay runs on backends with NumPy storage (numpy, simd) or that record "
                         f"their dispatches (webgpu), not {backend.name}")
    if any(t._backend is not backend or not t._layout.is_contiguous or t._layout.offset for t in inputs):
        raise InputError("graph inputs must be contiguous tensors on one backend")
    if not host:
        for t in inputs:
            backend.own_input(t._buf)                # replay writes it: no buffer shared by value
    recorder = _Recorder(backend)
    backend.run, backend.run_fused, backend.copy_out = recorder.run, recorder.run_fused, recorder.copy_out
    try:
        with contextlib.nullcontext() if host else backend.recording() as dispatches:
            outputs = fn(*inputs)
    finally:
        del backend.run, backend.run_fused, backend.copy_out      # the class's methods again
    return Graph(backend, list(inputs), recorder, outputs, dispatches), outputs


class StepGraphs:
    """One captured graph per key (a decode step per attention window), captured on the key's
    first call and replayed after. Its inputs are int64 arrays (a step's token ids and
    positions); where the backend cannot capture, the function runs eagerly from then on
    (`enabled` False). engine.generation and engine.speech.decoder step through one of these."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.graphs: dict = {}

    @property
    def captured(self) -> bool:
        """Whether steps are being replayed from captured graphs."""
        return self.enabled and bool(self.graphs)

    def clear(self) -> None:
        """Forget the graphs (they hold tensors that were just replaced)."""
        self.graphs.clear()

    def launch(self, key, fn, values, device):
        """run() read back without waiting where the backend can (Graph.launch): an object whose
        result() gives the output as NumPy. values () leaves the key's graph's inputs as they are
        (written on the device by its last replay); a graph's first call needs values."""
        step = self.graphs.get(key)
        if step is not None:
            return step.launch(*values)
        return _Ready(self.run(key, fn, values, device).numpy())

    def run(self, key, fn, values, device):
        """fn(*inputs) through the key's graph, the inputs int64 tensors of `values` on `device`."""
        step = self.graphs.get(key)
        if step is not None:
            return step.replay(*values)
        inputs = [tensor(v, dtype=int64, device=device) for v in values]     # the graph's inputs
        if not self.enabled:
            return fn(*inputs)
        try:
            step, out = capture(fn, *inputs)
        except GraphError:                          # this backend runs eagerly
            self.enabled = False
            return fn(*inputs)
        self.graphs[key] = step
        return out



class Passes:
    """A model's whole forward pass, captured once per input shape and replayed, where the backend
    replays a whole pass faster than it runs one eagerly (`backend.replays_whole()`: in a page
    with the kernel pool, a replay is one program on every core, heap_program.py); elsewhere the
    pass runs eagerly. The `limit` most recent shapes are kept (a captured pass holds every
    buffer it made); a function that cannot be captured runs eagerly from then on, and so does a
    pass whose backend has its kernels wrapped (inside an outer capture, or engine.bench.profile
    timing each kernel)."""

    def __init__(self, limit: int = 2):
        self.limit = limit
        self.graphs: OrderedDict = OrderedDict()
        self.eager: set = set()

    def clear(self) -> None:
        self.graphs.clear()

    @staticmethod
    def replays(device) -> bool:
        """Whether a pass on `device` is captured and replayed: its backend replays a whole pass
        faster than it runs one, and its kernels are not wrapped (a capture, a profile)."""
        from .device import get_backend
        backend = get_backend(device)
        whole = getattr(backend, "replays_whole", None)
        return whole is not None and whole() and "run" not in getattr(backend, "__dict__", {})

    def run(self, key, fn, arrays, device):
        """fn(*tensors) for NumPy `arrays` put on `device`: a Tensor or a tuple of Tensors, which
        view the graph's buffers when replayed (read them before the next run)."""
        key = (key, device, tuple((a.shape, a.dtype.str) for a in arrays))
        if key in self.eager or not self.replays(device):
            return fn(*[from_numpy(np.array(a), device) for a in arrays])
        step = self.graphs.get(key)
        if step is not None:
            self.graphs.move_to_end(key)
            return step.replay(*arrays)
        inputs = [from_numpy(np.array(a), device) for a in arrays]       # the graph's own inputs
        try:
            step, out = capture(fn, *inputs)
        except GraphError:
            self.eager.add(key)
            return fn(*[from_numpy(np.array(a), device) for a in arrays])
        self.graphs[key] = step
        while len(self.graphs) > self.limit:
            self.graphs.popitem(last=False)
        return out
