"""The one place that picks a backend. Nothing else branches on the device."""
from __future__ import annotations

import importlib
import warnings

from . import runtime
from .errors import BackendError

# name -> module implementing it (a module with a `BACKEND` object and, when the backend
# depends on something that may be missing here, `unavailable_reason()`)
BACKENDS = {"numpy": "engine.backends.numpy", "simd": "engine.backends.simd", "webgpu": "engine.backends.webgpu"}
_loaded: dict = {}
_default = "numpy"


def known() -> list[str]:
    """Every backend this engine has, available here or not."""
    return list(BACKENDS)


def unavailable_reason(name: str) -> str | None:
    """None when device `name` can be used here, else why not (e.g. simd without a C compiler)."""
    if name not in BACKENDS:
        return f"unknown device {name!r}; known: {', '.join(known())}"
    module = importlib.import_module(BACKENDS[name])
    check = getattr(module, "unavailable_reason", None)
    return check() if check is not None else None


def available() -> list[str]:
    return [name for name in BACKENDS if unavailable_reason(name) is None]


# Fastest first. A GPU beats the CPU; in Pyodide NumPy has no BLAS, so the wasm kernels win
# by 10x and more; natively NumPy's BLAS (multi-threaded, AVX) beats our kernels on a plain
# matmul, so it stays the native default for tensors and for whatever has no entry below.
PREFERENCE = {"emscripten": ["webgpu", "simd", "numpy"], "native": ["webgpu", "numpy", "simd"]}


def auto_selectable(name: str) -> bool:
    """Usable and worth picking automatically: a backend module may say no (webgpu on an
    adapter that emulates a GPU on the CPU, which only an explicit device= gets)."""
    if unavailable_reason(name) is not None:
        return False
    check = getattr(importlib.import_module(BACKENDS[name]), "auto_selectable", None)
    return check() if check is not None else True


def _runtime() -> str:
    return "emscripten" if runtime.in_browser() else "native"


def best_available() -> str:
    """The fastest backend worth using here (what the page's "auto" picks). Where NumPy is this
    runtime's last resort (Pyodide: no BLAS) and it is all that is left, a RuntimeWarning says why
    each faster backend cannot be used (e.g. the simd kernels not fetched, no WebGPU adapter)."""
    order = PREFERENCE[_runtime()]
    skipped = {}
    for name in order:
        if auto_selectable(name):
            if name == order[-1] and skipped:
                _warn_fallback(name, skipped)
            return name
        reason = unavailable_reason(name)
        if reason is not None:                  # not chosen by policy (an emulated GPU): unavailable
            skipped[name] = reason
    raise BackendError("no backend is available here")            # numpy always is


def _warn_fallback(name: str, skipped: dict[str, str], stacklevel: int = 3) -> None:
    reasons = "; ".join(f"{other}: {why}" for other, why in skipped.items())
    warnings.warn(f"running on {name}, the slowest backend here, because {reasons}", RuntimeWarning,
                  stacklevel=stacklevel + 1)


def best_for_quantized() -> str:
    """Where a model with GGML-quantized weights runs when no device is named: simd, whose kernels
    multiply the blocks as they are and whose decode steps replay as captured graphs, when it is
    available; else the default (in the browser, Whisper's float16 weights too). (NumPy's reference kernels dequantize every weight for every
    product: SmolLM2 decodes ~30x slower there. webgpu is picked only when asked for: its chat
    speed on a real GPU has not been measured yet.)"""
    reason = unavailable_reason("simd")
    if reason is None:
        return "simd"
    _warn_fallback(_default, {"simd": reason})
    return _default


def best_for_pipeline(native_device: str | None) -> str | None:
    """The backend a model's pipeline runs on when no device is named: natively its registry
    entry's `native_device` (where it measured faster than the default: docs/benchmarks.md,
    "Natively") when that is available here, else None (the default). In Pyodide, for such a
    model, the fastest backend available (best_available, which warns when only NumPy is left:
    it has no BLAS there). Text generation and speech pick for themselves (best_for_quantized)."""
    if native_device is None:
        return None
    if _runtime() == "emscripten":
        return best_available()
    return native_device if unavailable_reason(native_device) is None else None


def get_backend(name: str | None = None):
    """The backend object for `name` (None: the default), loaded on first use."""
    name = _default if name is None else str(name)
    backend = _loaded.get(name)
    if backend is None:
        if name not in BACKENDS:
            raise BackendError(f"unknown device {name!r}; available: {', '.join(available())}")
        reason = unavailable_reason(name)
        if reason is not None:
            raise BackendError(f"device {name!r} is not available here: {reason}")
        backend = _loaded[name] = importlib.import_module(BACKENDS[name]).BACKEND
    return backend


def synchronize(name: str | None = None) -> None:
    """Wait until the work queued on device `name` has run (GPU work is asynchronous); like
    torch.cuda.synchronize, for timing."""
    get_backend(name).sync()


def describe(name: str | None = None) -> str:
    """A human-readable name for the device, e.g. the GPU adapter behind webgpu."""
    backend = get_backend(name)
    return backend.describe() if hasattr(backend, "describe") else backend.name


def default_device() -> str:
    return _default


def set_default_device(name: str) -> None:
    global _default
    get_backend(name)
    _default = name
