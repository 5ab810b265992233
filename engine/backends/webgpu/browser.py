"""The device layer in the browser: navigator.gpu through Pyodide's `js` module.

The same methods as gpu.NativeApi. WebGPU answers some calls with promises (adapter, device,
pipeline compilation, mapping a buffer for reading); the engine's API is synchronous
(`.numpy()`), so they are awaited with `pyodide.ffi.run_sync`, which suspends the WebAssembly
stack through JavaScript Promise Integration (JSPI). That works when Python was entered
asynchronously: the worker's entry points are `async def` (engine/web/worker.py).

Encoding a command buffer takes a call per dispatch; a small JavaScript helper does that loop
on the JS side, so a submission crosses the bridge once.
"""
from __future__ import annotations

import numpy as np

from .gpu import OPTIONAL_FEATURES, AdapterInfo, is_software

# WebGPU's numeric flags (GPUBufferUsage, GPUMapMode) are the ones gpu.py uses natively.
_HELPERS = r"""
({
  watch(device, state) {
    device.lost.then((info) => { state.lost = info.message || info.reason || "lost"; });
    device.addEventListener("uncapturederror", (event) => {
      state.error = event.error.message;
      console.error(`WebGPU: ${event.error.message}`);
    });
  },
  uid: 0,
  bindGroups: new Map(),          // pooled buffers are never freed: (pipeline, buffers) stays valid
  bindGroup(device, pipeline, bufs) {
    pipeline.uid ||= ++this.uid;
    for (const b of bufs) b.uid ||= ++this.uid;
    const key = `${pipeline.uid}:${bufs.map((b) => b.uid).join(",")}`;
    let group = this.bindGroups.get(key);
    if (!group) {
      if (this.bindGroups.size >= 4096) this.bindGroups.clear();
      pipeline.layout0 ||= pipeline.getBindGroupLayout(0);
      const entries = bufs.map((buffer, binding) => ({ binding, resource: { buffer } }));
      group = device.createBindGroup({ layout: pipeline.layout0, entries });
      this.bindGroups.set(key, group);
    }
    return group;
  },
  submit(device, pipelines, buffers, counts, groups, source, staging, nbytes) {
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    for (let i = 0, b = 0; i < pipelines.length; i++) {
      const pipeline = pipelines[i];
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, this.bindGroup(device, pipeline, buffers.slice(b, b + counts[i])));
      b += counts[i];
      pass.dispatchWorkgroups(groups[3 * i], groups[3 * i + 1], groups[3 * i + 2]);
    }
    pass.end();
    if (staging) encoder.copyBufferToBuffer(source, 0, staging, 0, nbytes);
    device.queue.submit([encoder.finish()]);
    return staging ? staging.mapAsync(0x1, 0, nbytes) : undefined;               // GPUMapMode.READ
  },
  async submitThenMapped(device, pipelines, buffers, counts, groups, source, staging, nbytes, wait, waitMapping,
                         waitBytes) {
    const mapping = this.submit(device, pipelines, buffers, counts, groups, source, staging, nbytes);
    const data = await this.mapped(wait, wait === staging ? mapping : waitMapping, waitBytes);
    return [mapping, data];
  },
  async mapped(staging, mapping, nbytes) {
    await mapping;
    const data = new Uint8Array(staging.getMappedRange(0, nbytes).slice(0));
    staging.unmap();
    return data;
  },
  async read(device, source, nbytes) {
    const staging = device.createBuffer({ size: nbytes, usage: 0x1 | 0x8 });   // MAP_READ | COPY_DST
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(source, 0, staging, 0, nbytes);
    device.queue.submit([encoder.finish()]);
    try {
      await staging.mapAsync(0x1);                                              // GPUMapMode.READ
      return new Uint8Array(staging.getMappedRange().slice(0));
    } finally {
      staging.destroy();
    }
  },
  async pipeline(device, code) {
    const module = device.createShaderModule({ code });
    try {
      return await device.createComputePipelineAsync({ layout: "auto", compute: { module, entryPoint: "main" } });
    } catch (err) {
      const info = await module.getCompilationInfo();
      const lines = info.messages.map((m) => `line ${m.lineNum}: ${m.type}: ${m.message}`);
      throw new Error([err.message, ...lines].join("\n"));
    }
  },
})
"""


class BrowserApi:
    """WebGPU through navigator.gpu (raises RuntimeError saying why when there is none)."""

    def __init__(self, power_preference: str = "high-performance"):
        import js
        from pyodide.code import run_js
        from pyodide.ffi import can_run_sync, run_sync, to_js
        self._js, self._run_sync = js, run_sync
        self._to_js = lambda value: to_js(value, dict_converter=js.Object.fromEntries)
        gpu = getattr(js.navigator, "gpu", None)
        if gpu is None:
            raise RuntimeError("this browser has no WebGPU (navigator.gpu is missing)")
        if not can_run_sync():
            raise RuntimeError("waiting for the GPU from Python needs JavaScript Promise Integration "
                               "(JSPI), which this browser lacks")
        adapter = run_sync(gpu.requestAdapter(self._to_js({"powerPreference": power_preference})))
        if adapter is None:
            raise RuntimeError("navigator.gpu.requestAdapter() found no adapter (WebGPU disabled or blocklisted)")
        i = adapter.info
        fields = [str(getattr(i, k, "") or "") for k in ("vendor", "architecture", "device", "description")]
        fallback = bool(getattr(i, "isFallbackAdapter", False) or getattr(adapter, "isFallbackAdapter", False))
        self.info = AdapterInfo(*fields, is_software(*fields, fallback=fallback))
        wanted = {"maxStorageBufferBindingSize": adapter.limits.maxStorageBufferBindingSize,
                  "maxBufferSize": adapter.limits.maxBufferSize}
        self.features = frozenset(f for f in OPTIONAL_FEATURES if adapter.features.has(f))
        self.device = run_sync(adapter.requestDevice(self._to_js({"requiredLimits": wanted,
                                                                  "requiredFeatures": sorted(self.features)})))
        self.limits = {"max_workgroups": int(self.device.limits.maxComputeWorkgroupsPerDimension),
                       "max_binding": int(self.device.limits.maxStorageBufferBindingSize)}
        self._helpers = run_js(_HELPERS)
        self._state = js.Object.new()
        self._helpers.watch(self.device, self._state)
        import pyodide_js
        self._module = pyodide_js._module                    # its HEAPU8 is the wasm memory

    @property
    def lost(self) -> str | None:
        return getattr(self._state, "lost", None) or None

    @lost.setter
    def lost(self, reason: str) -> None:
        self._state.lost = reason

    def create_buffer(self, size: int, usage: int):
        return self.device.createBuffer(self._to_js({"size": size, "usage": usage}))

    def write(self, raw, data: np.ndarray) -> None:
        """From the wasm heap straight into the buffer: no copy into a JS array first."""
        self.device.queue.writeBuffer(raw, 0, self._module.HEAPU8, data.ctypes.data, data.nbytes)

    def read(self, raw, nbytes: int) -> bytes:
        data = self._run_sync(self._helpers.read(self.device, raw, nbytes)).to_bytes()
        self._raise_error()
        return data

    def wait(self) -> None:
        self._run_sync(self.device.queue.onSubmittedWorkDone())
        self._raise_error()

    def create_pipeline(self, source: str):
        return self._run_sync(self._helpers.pipeline(self.device, source))

    def submit(self, dispatches, read=None):
        """One bridge call: the command buffer (and, read = (source, staging, nbytes), the copy into
        the staging buffer, whose mapping promise comes back for mapped())."""
        pipelines, buffers, counts, groups = self._encode(dispatches)
        source, staging, nbytes = read if read is not None else (None, None, 0)
        return self._helpers.submit(self.device, self._to_js(pipelines), self._to_js(buffers), self._to_js(counts),
                                    self._to_js(groups), source, staging, nbytes)

    def submit_then_mapped(self, dispatches, read, wait, wait_mapping, wait_bytes: int):
        """submit(dispatches, read), then mapped(wait, ...), in one bridge call (Gpu.launch holds a
        decode step's submission for the wait on the step before): (the new mapping, the bytes)."""
        pipelines, buffers, counts, groups = self._encode(dispatches)
        source, staging, nbytes = read
        mapping, data = self._run_sync(self._helpers.submitThenMapped(
            self.device, self._to_js(pipelines), self._to_js(buffers), self._to_js(counts), self._to_js(groups),
            source, staging, nbytes, wait, wait_mapping, wait_bytes))
        self._raise_error()
        return mapping, data.to_bytes()

    def mapped(self, staging, mapping, nbytes: int) -> bytes:
        data = self._run_sync(self._helpers.mapped(staging, mapping, nbytes)).to_bytes()
        self._raise_error()
        return data

    @staticmethod
    def _encode(dispatches):
        """(pipeline, buffers, workgroups) triples as the JS helper's flat lists."""
        pipelines, buffers, counts, groups = [], [], [], []
        for pipe, bufs, workgroups in dispatches:
            pipelines.append(pipe)
            buffers.extend(bufs)
            counts.append(len(bufs))
            groups.extend(workgroups)
        return pipelines, buffers, counts, groups

    def destroy(self) -> None:
        self.device.destroy()
        self.lost = "destroyed"

    def _raise_error(self) -> None:
        """A validation error reported since the last check (WebGPU reports them asynchronously)."""
        error = getattr(self._state, "error", None)
        if error:
            self._state.error = None
            raise RuntimeError(f"WebGPU error: {error}")
