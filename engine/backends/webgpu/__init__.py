"""The webgpu backend: WGSL compute shaders on a WebGPU device, natively through PyPI `wgpu`
and in the browser through navigator.gpu (gpu.py: the device layer; kernels.py: the shaders
as functions; backend.py: the kernel table)."""
from __future__ import annotations

from ... import runtime

_state: dict = {}


def default_api():
    """The device layer's implementation for this platform: navigator.gpu in Pyodide, wgpu natively."""
    if runtime.in_browser():
        from .browser import BrowserApi
        return BrowserApi()
    from .gpu import NativeApi
    return NativeApi()


def device():
    """The process's Gpu, created on first use (raises RuntimeError when there is none)."""
    if "gpu" not in _state:
        try:
            from .gpu import Gpu
            _state["gpu"] = Gpu(default_api())
        except Exception as e:                      # no wgpu, no adapter, no navigator.gpu
            _state["gpu"], _state["reason"] = None, f"{type(e).__name__}: {e}" if not isinstance(
                e, RuntimeError) else str(e)
    if _state["gpu"] is None:
        raise RuntimeError(_state["reason"])
    return _state["gpu"]


def unavailable_reason() -> str | None:
    try:
        gpu = device()
    except RuntimeError as e:
        return str(e)
    return f"the WebGPU device was lost: {gpu.lost}" if gpu.lost else None


def auto_selectable() -> bool:
    """Automatic selection (asked once the backend is available) skips adapters that emulate
    a GPU on the CPU, far slower than simd."""
    return not device().info.software


def __getattr__(name):
    if name == "BACKEND":
        if "backend" not in _state:
            from .backend import WebGPUBackend
            _state["backend"] = WebGPUBackend(device())
        return _state["backend"]
    raise AttributeError(name)
