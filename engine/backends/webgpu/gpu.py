"""The WebGPU device layer: buffers, cached compute pipelines, batched dispatches, counted reads.

One class, `Gpu`, holds everything the backend needs; what differs between the browser
(navigator.gpu through Pyodide's `js` module) and CPython (PyPI `wgpu`) is only how an
adapter is found and how a buffer is read back, and lives in an `api` object
(`NativeApi` here; browser.BrowserApi calls the same WebGPU methods by their JS names; the
package's `default_api` picks one).

- Dispatches are recorded into one command encoder and submitted together when data must
  come back (`read`), or when `flush()` is called; nothing waits on the GPU otherwise.
- A pipeline is compiled once per distinct WGSL source (the backend fills templates, so a
  source is one shader variant) and kept.
- Buffers are pooled by size class (powers of two from 256 bytes) and reused when the
  tensor that held one is freed. A shader's parameters (shapes, strides, offsets) live in
  small read-only buffers kept by content, so a forward pass run again writes none of them;
  and since the pool hands back the same buffers, its bind groups are found in a cache too.
- `stats["reads"]` counts read-backs, so a test can prove a forward pass reads only its
  output.
- A lost device (driver reset, `destroy()`) turns every later call into `DeviceLost`, which
  pipelines answer by rebuilding on the next best backend.
"""
from __future__ import annotations

import os
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ...errors import DeviceLost

SOFTWARE_ADAPTERS = ("swiftshader", "llvmpipe", "lavapipe", "softpipe", "warp")
STORAGE = 0x80 | 0x8 | 0x4           # STORAGE | COPY_DST | COPY_SRC
STAGING = 0x1 | 0x8                  # MAP_READ | COPY_DST
UNIFORM = 0x40 | 0x8                 # UNIFORM | COPY_DST
MIN_BUFFER = 256
PARAMS_CACHE = 4096                  # parameter buffers kept by content
BIND_GROUP_CACHE = 4096
OPTIONAL_FEATURES = ("shader-f16",)  # asked for where the adapter offers them


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
        self._recording: list | None = None               # dispatches kept for replay (engine.graph)
        self._params: OrderedDict[bytes, GpuBuffer] = OrderedDict()
        self._staging: dict[int, list] = {}               # mappable buffers for launch(), by size
        self._queued = None                               # a launch held for the next wait (browser)
        # dispatches: every dispatch submitted; recorded: those a kernel recorded from Python
        # (a replay records none); submits: queue submissions; reads/read_bytes: read-backs
        # calls: calls into the api (in the browser, each crosses the bridge to JavaScript)
        self.stats = {"reads": 0, "read_bytes": 0, "dispatches": 0, "recorded": 0, "submits": 0, "pipelines": 0,
                      "buffers_created": 0, "calls": 0}
        self.features: frozenset = frozenset(getattr(api, "features", ()))   # "shader-f16" where offered

    # --- loss ---------------------------------------------------------------------------
    @property
    def lost(self) -> str | None:
        """Why the device was lost, or None while it works."""
        return self.api.lost

    def _call(self, method: str, *args):
        """api.method(*args), with a lost device reported as DeviceLost naming the adapter."""
        if self.api.lost is None:
            self.stats["calls"] += 1
            try:
                return getattr(self.api, method)(*args)
            except Exception as e:
                if self.api.lost is None and "lost" not in str(e).lower():
                    raise
                self.api.lost = self.api.lost or str(e).strip().splitlines()[-1]
                raise DeviceLost(f"the WebGPU device ({self.info}) was lost: {self.api.lost}") from e
        self._pending = []
        raise DeviceLost(f"the WebGPU device ({self.info}) was lost: {self.api.lost}")

    def destroy(self) -> None:
        """Give the device up now (what a driver reset does to it; tests use this)."""
        self._pending = []
        self.api.destroy()

    # --- buffers ----------------------------------------------------------------------
    def buffer(self, nbytes: int):
        """A storage buffer of at least nbytes (pooled); returned to the pool when the handle dies."""
        size = _size_class(nbytes)
        free = self._pool.get(size)
        raw = free.pop() if free else None
        if raw is None:
            raw = self._call("create_buffer", size, STORAGE)
            self.stats["buffers_created"] += 1
        handle = GpuBuffer(raw, size)
        weakref.finalize(handle, self._pool.setdefault(size, []).append, raw)
        return handle

    def upload(self, array: np.ndarray) -> "GpuBuffer":
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        buf = self.buffer(data.nbytes)
        if data.nbytes % 4:                                 # writes come in whole words
            data = np.concatenate([data, np.zeros(4 - data.nbytes % 4, np.uint8)])
        if data.nbytes:
            self._send_queued()                             # a held launch comes before this write
            self._call("write", buf.raw, data)
        return buf

    def params(self, words: np.ndarray) -> "GpuBuffer":
        """A read-only buffer holding `words` (a shader's parameters), shared by every dispatch
        that passes the same values; the least recently used are let go past PARAMS_CACHE."""
        key = words.tobytes()
        buf = self._params.get(key)
        if buf is None:
            buf = self._params[key] = self.upload(words)
            if len(self._params) > PARAMS_CACHE:
                self._params.popitem(last=False)          # back to the pool once no dispatch holds it
        else:
            self._params.move_to_end(key)
        return buf

    def is_shared(self, buf: "GpuBuffer") -> bool:
        """Whether buf is one of the value-shared parameter buffers (never to be written)."""
        return any(b is buf for b in self._params.values())

    def read(self, buf: "GpuBuffer", nbytes: int) -> bytes:
        """The first nbytes of buf, after every recorded dispatch has run (counted)."""
        self.flush()
        self.stats["reads"] += 1
        self.stats["read_bytes"] += nbytes
        return self._call("read", buf.raw, _round4(nbytes))[:nbytes] if nbytes else b""

    # --- compute ----------------------------------------------------------------------
    def pipeline(self, source: str):
        pipe = self._pipelines.get(source)
        if pipe is None:
            pipe = self._pipelines[source] = self._call("create_pipeline", source)
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
        if self._recording is not None:
            self._recording.append(self._pending[-1])
        self.stats["dispatches"] += 1
        self.stats["recorded"] += 1
        if len(self._pending) >= 256:                      # bound the encoder's size
            self.flush()

    def record(self):
        """Keep every dispatch made from now on (the handles too, so no buffer they use goes back
        to the pool) until stop_recording(); returns the list they go into."""
        self._recording = []
        return self._recording

    def stop_recording(self) -> None:
        self._recording = None

    def replay(self, dispatches: list, chunk: int = 1024) -> None:
        """Submit recorded dispatches again, as they were: the same pipelines, buffers and
        workgroups, in as few submissions (bridge calls in the browser) as the chunk allows."""
        self.flush()
        for start in range(0, len(dispatches), chunk):
            self._call("submit", [(pipe, [b.raw for b in bufs], wg) for pipe, bufs, wg in dispatches[start:start + chunk]])
            self.stats["submits"] += 1
        self.stats["dispatches"] += len(dispatches)

    def launch(self, dispatches: list, buf: "GpuBuffer", nbytes: int) -> "Pending":
        """Submit what is recorded and `dispatches` (recorded earlier, engine.graph) with a copy of
        buf's first nbytes into a mappable buffer after them: one command buffer, one
        queue.submit, one read-back (counted). The mapping is asked for at once and waited for
        only by Pending.result(), so the host may submit the next step meanwhile.

        Where the api joins a submission with a wait (`submit_then_mapped`: the browser, where
        each call crosses the bridge), the submission is held until the next wait, a write or a
        flush, so a decode loop that launches a step and then waits for the one before crosses
        the bridge once a step."""
        self._send_queued()
        pending, self._pending = self._pending, []
        size = _size_class(nbytes)
        free = self._staging.setdefault(size, [])
        staging = free.pop() if free else self._call("create_buffer", size, STAGING)
        items = [(pipe, [b.raw for b in bufs], wg) for pipe, bufs, wg in pending + list(dispatches)]
        launched = Pending(self, staging, size, None, nbytes)
        read = (buf.raw, staging, _round4(nbytes))
        if hasattr(self.api, "submit_then_mapped"):
            self._queued = (items, read, launched)
        else:
            launched.mapping = self._call("submit", items, read)
        self.stats["submits"] += 1
        self.stats["dispatches"] += len(dispatches)
        self.stats["reads"] += 1
        self.stats["read_bytes"] += nbytes
        return launched

    def _send_queued(self) -> None:
        """Submit the launch held for the next wait, now (something must come after it)."""
        if self._queued is not None:
            items, read, launched = self._queued
            self._queued = None
            launched.mapping = self._call("submit", items, read)

    def write(self, buf: "GpuBuffer", data: np.ndarray) -> None:
        """Overwrite buf's first bytes with data (a whole number of 32-bit words), ordered before
        the next submission."""
        self._send_queued()
        self._call("write", buf.raw, np.ascontiguousarray(data).reshape(-1).view(np.uint8))

    def synchronize(self) -> None:
        """Submit what is recorded and wait until the device has finished it (for timing)."""
        self.flush()
        self._call("wait")

    def flush(self) -> None:
        self._send_queued()
        if self._pending:
            pending, self._pending = self._pending, []
            self._call("submit", [(pipe, [b.raw for b in bufs], wg) for pipe, bufs, wg in pending])
            self.stats["submits"] += 1


class Pending:
    """A launched submission's read-back: result() waits for its mapping and gives the bytes."""

    def __init__(self, gpu: Gpu, staging, size: int, mapping, nbytes: int):
        self.gpu, self.staging, self.size, self.mapping, self.nbytes = gpu, staging, size, mapping, nbytes

    def result(self) -> bytes:
        if self.staging is None:
            raise RuntimeError("a launched read-back is read once")
        gpu, n = self.gpu, _round4(self.nbytes)
        if gpu._queued is not None:                     # the held launch goes with this wait: one call
            items, read, launched = gpu._queued
            gpu._queued = None
            launched.mapping, data = gpu._call("submit_then_mapped", items, read, self.staging, self.mapping, n)
        else:
            data = gpu._call("mapped", self.staging, self.mapping, n)
        data = data[:self.nbytes]
        self.gpu._staging[self.size].append(self.staging)
        self.staging = None
        return data


class GpuBuffer:
    """A pooled device buffer; `size` is its capacity in bytes."""
    __slots__ = ("raw", "size", "__weakref__")

    def __init__(self, raw, size: int):
        self.raw, self.size = raw, size


def _round4(n: int) -> int:
    return (n + 3) & ~3


# --- native: PyPI wgpu (Vulkan/Metal/D3D12; Mesa lavapipe on a machine without a GPU) -----------
class NativeApi:
    """What Gpu needs, on PyPI wgpu; browser.BrowserApi is the same on navigator.gpu.

    info, limits, lost (why the device was lost, or None); create_buffer, write (a uint8
    array of whole words), read, wait, create_pipeline, submit (a list of (pipeline,
    buffers, workgroups)), destroy."""
    lost: str | None = None

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
        wanted = ("max-storage-buffer-binding-size", "max-buffer-size")   # what the adapter allows, not 128 MB
        self.features = frozenset(f for f in OPTIONAL_FEATURES if f in adapter.features)
        self.device = adapter.request_device_sync(required_features=sorted(self.features),
                                                  required_limits={k: adapter.limits[k] for k in wanted})
        self._groups: OrderedDict = OrderedDict()          # (pipeline, buffers) -> bind group
        limits = self.device.limits
        self.limits = {"max_workgroups": limits["max-compute-workgroups-per-dimension"],
                       "max_binding": limits["max-storage-buffer-binding-size"]}

    def create_buffer(self, size: int, usage: int):
        return self.device.create_buffer(size=size, usage=usage)

    def write(self, raw, data: np.ndarray) -> None:
        self.device.queue.write_buffer(raw, 0, data)

    def read(self, raw, nbytes: int) -> bytes:
        return bytes(self.device.queue.read_buffer(raw, 0, nbytes))

    def wait(self) -> None:
        # wgpu 0.32's on_submitted_work_done_sync fails (a callback signature mismatch); a read
        # waits for the queue as well
        if getattr(self, "_tick", None) is None:
            self._tick = self.device.create_buffer(size=4, usage=STORAGE)
        self.device.queue.read_buffer(self._tick, 0, 4)

    def create_pipeline(self, source: str):
        module = self.device.create_shader_module(code=source)
        return self.device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})

    def submit(self, dispatches, read=None):
        """One command buffer: the dispatches, then (read = (source, staging, nbytes)) a copy into
        the mappable staging buffer, whose mapping is asked for and returned (mapped() waits)."""
        encoder = self.device.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        for pipe, buffers, (x, y, z) in dispatches:
            group = self._bind_group(pipe, buffers)
            cpass.set_pipeline(pipe)
            cpass.set_bind_group(0, group)
            cpass.dispatch_workgroups(x, y, z)
        cpass.end()
        if read is not None:
            source, staging, nbytes = read
            encoder.copy_buffer_to_buffer(source, 0, staging, 0, nbytes)
        self.device.queue.submit([encoder.finish()])
        return read[1].map_async(1, 0, read[2]) if read is not None else None    # GPUMapMode.READ

    def mapped(self, staging, mapping, nbytes: int) -> bytes:
        mapping.sync_wait()
        data = bytes(staging.read_mapped(0, nbytes))
        staging.unmap()
        return data

    def _bind_group(self, pipe, buffers):
        """Pooled buffers are never freed, so a (pipeline, buffers) key stays valid."""
        key = (id(pipe), *map(id, buffers))
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = self.device.create_bind_group(
                layout=pipe.get_bind_group_layout(0),
                entries=[{"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
                         for i, b in enumerate(buffers)])
            if len(self._groups) > BIND_GROUP_CACHE:
                self._groups.popitem(last=False)
        else:
            self._groups.move_to_end(key)
        return group

    def destroy(self) -> None:
        self.device.destroy()
        self.lost = "destroyed"
