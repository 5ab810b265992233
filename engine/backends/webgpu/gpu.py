"""The WebGPU device layer: buffers, cached compute pipelines, batched dispatches, counted reads.

One class, `Gpu`, holds everything the backend needs; what differs between the browser
(navigator.gpu through Pyodide's `js` module) and CPython (PyPI `wgpu`) is only how an
adapter is found and how a buffer is read back, and lives in an `api` object
(`NativeApi` here; the Pyodide one calls the same WebGPU methods by their JS names).

- Dispatches are recorded into one command encoder and submitted together when data must
  come back (`read`), or when `flush()` is called; nothing waits on the GPU otherwise.
- A pipeline is compiled once per distinct WGSL source (the backend fills templates, so a
  source is one shader variant) and kept.
- Buffers are pooled by size class (powers of two from 256 bytes) and reused when the
  tensor that held one is freed.
- `stats["reads"]` counts read-backs, so a test can prove a forward pass reads only its
  output.
"""
from __future__ import annotations

import os
import weakref
from dataclasses import dataclass

import numpy as np

SOFTWARE_ADAPTERS = ("swiftshader", "llvmpipe", "lavapipe", "softpipe", "warp")
STORAGE = 0x80 | 0x8 | 0x4           # STORAGE | COPY_DST | COPY_SRC
UNIFORM = 0x40 | 0x8                 # UNIFORM | COPY_DST
MIN_BUFFER = 256


@dataclass(frozen=True)
class AdapterInfo:
    vendor: str
    architecture: str
    device: str
    description: str
    software: bool                   # CPU emulation: only ever used when asked for by name

    def __str__(self) -> str:
        name = " ".join(p for p in (self.vendor, self.architecture or self.device) if p)
        return name + (" (software, CPU emulation)" if self.software else "")


def is_software(vendor: str, architecture: str, device: str, description: str, adapter_type: str = "",
                fallback: bool = False) -> bool:
    """SwiftShader, lavapipe/llvmpipe and friends emulate a GPU on the CPU."""
    text = " ".join((vendor, architecture, device, description)).lower()
    return fallback or adapter_type.upper() == "CPU" or any(name in text for name in SOFTWARE_ADAPTERS)


def _size_class(nbytes: int) -> int:
    return max(MIN_BUFFER, 1 << (max(nbytes, 1) - 1).bit_length())


class Gpu:
    """A device with its queue, pipeline cache, buffer pool and one open command encoder."""

    def __init__(self, api):
        self.api = api
        self.info: AdapterInfo = api.info
        self.limits = api.limits
        self._pipelines: dict[str, object] = {}
        self._pool: dict[int, list] = {}
        self._pending: list = []                          # (pipeline, buffers, workgroups)
        self.stats = {"reads": 0, "read_bytes": 0, "dispatches": 0, "submits": 0, "pipelines": 0,
                      "buffers_created": 0}

    # --- buffers ----------------------------------------------------------------------
    def buffer(self, nbytes: int):
        """A storage buffer of at least nbytes (pooled); returned to the pool when the handle dies."""
        size = _size_class(nbytes)
        free = self._pool.get(size)
        raw = free.pop() if free else None
        if raw is None:
            raw = self.api.create_buffer(size, STORAGE)
            self.stats["buffers_created"] += 1
        handle = GpuBuffer(raw, size)
        weakref.finalize(handle, self._pool.setdefault(size, []).append, raw)
        return handle

    def upload(self, array: np.ndarray) -> "GpuBuffer":
        data = np.ascontiguousarray(array)
        buf = self.buffer(data.nbytes)
        if data.nbytes:
            self.api.write(buf.raw, _padded_bytes(data))
        return buf

    def read(self, buf: "GpuBuffer", nbytes: int) -> bytes:
        """The first nbytes of buf, after every recorded dispatch has run (counted)."""
        self.flush()
        self.stats["reads"] += 1
        self.stats["read_bytes"] += nbytes
        return self.api.read(buf.raw, _round4(nbytes))[:nbytes] if nbytes else b""

    # --- compute ----------------------------------------------------------------------
    def pipeline(self, source: str):
        pipe = self._pipelines.get(source)
        if pipe is None:
            pipe = self._pipelines[source] = self.api.create_pipeline(source)
            self.stats["pipelines"] += 1
        return pipe

    def dispatch(self, source: str, buffers, workgroups: tuple[int, int, int]) -> None:
        """Record one dispatch of the shader `source`; buffers bind to @binding(0..) of group 0."""
        if min(workgroups) == 0:
            return
        limit = self.limits["max_workgroups"]
        if max(workgroups) > limit:
            raise ValueError(f"dispatch of {workgroups} workgroups exceeds the device limit {limit}")
        # the handles, not the raw buffers: until submitted, none may go back to the pool, where a
        # queue.write_buffer (ordered before this encoder) could overwrite it
        self._pending.append((self.pipeline(source), list(buffers), workgroups))
        self.stats["dispatches"] += 1
        if len(self._pending) >= 256:                      # bound the encoder's size
            self.flush()

    def synchronize(self) -> None:
        """Submit what is recorded and wait until the device has finished it (for timing)."""
        self.flush()
        self.api.wait()

    def flush(self) -> None:
        if self._pending:
            self.api.submit([(pipe, [b.raw for b in bufs], wg) for pipe, bufs, wg in self._pending])
            self._pending = []
            self.stats["submits"] += 1


class GpuBuffer:
    """A pooled device buffer; `size` is its capacity in bytes."""
    __slots__ = ("raw", "size", "__weakref__")

    def __init__(self, raw, size: int):
        self.raw, self.size = raw, size


def _round4(n: int) -> int:
    return (n + 3) & ~3


def _padded_bytes(data: np.ndarray) -> bytes | memoryview:
    raw = memoryview(data).cast("B")
    return raw if data.nbytes % 4 == 0 else bytes(raw) + b"\0" * (_round4(data.nbytes) - data.nbytes)


def default_api():
    """The device layer's implementation for this platform: navigator.gpu in Pyodide, wgpu natively."""
    import sys
    if sys.platform == "emscripten":
        from .browser import BrowserApi
        return BrowserApi()
    return NativeApi()


# --- native: PyPI wgpu (Vulkan/Metal/D3D12; Mesa lavapipe on a machine without a GPU) -----------
class NativeApi:
    def __init__(self, power_preference: str = "high-performance"):
        os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")   # Mesa's WSI probing warns without one
        try:
            import wgpu
        except ImportError:
            raise RuntimeError("the wgpu package is not installed (pip install wgpu)") from None
        self.wgpu = wgpu
        adapter = wgpu.gpu.request_adapter_sync(power_preference=power_preference)
        if adapter is None:
            raise RuntimeError("no WebGPU adapter (natively: a Vulkan/Metal/D3D12 driver; on Linux without "
                               "a GPU install Mesa's lavapipe, apt package mesa-vulkan-drivers)")
        i = adapter.info
        self.info = AdapterInfo(i.get("vendor", ""), i.get("architecture", ""), i.get("device", ""),
                                i.get("description", ""),
                                is_software(i.get("vendor", ""), i.get("architecture", ""), i.get("device", ""),
                                            i.get("description", ""), i.get("adapter_type", "")))
        self.device = adapter.request_device_sync()
        limits = self.device.limits
        self.limits = {"max_workgroups": limits["max-compute-workgroups-per-dimension"],
                       "max_binding": limits["max-storage-buffer-binding-size"]}

    def create_buffer(self, size: int, usage: int):
        return self.device.create_buffer(size=size, usage=usage)

    def write(self, raw, data) -> None:
        self.device.queue.write_buffer(raw, 0, data)

    def read(self, raw, nbytes: int) -> bytes:
        return bytes(self.device.queue.read_buffer(raw, 0, nbytes))

    def wait(self) -> None:
        self.device.queue.on_submitted_work_done_sync()

    def create_pipeline(self, source: str):
        module = self.device.create_shader_module(code=source)
        return self.device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})

    def submit(self, dispatches) -> None:
        encoder = self.device.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        for pipe, buffers, (x, y, z) in dispatches:
            group = self.device.create_bind_group(
                layout=pipe.get_bind_group_layout(0),
                entries=[{"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
                         for i, b in enumerate(buffers)])
            cpass.set_pipeline(pipe)
            cpass.set_bind_group(0, group)
            cpass.dispatch_workgroups(x, y, z)
        cpass.end()
        self.device.queue.submit([encoder.finish()])
