"""The inference worker's Python side (runs in Pyodide inside web/worker.js).

worker.js calls these functions and posts their results to the page. Every
result is a JSON string so nothing depends on proxy lifetimes. The model code,
preprocessing and weight parsing are the same as natively; only fetching
(engine.web.fetch) and the WebGPU device (engine.backends.webgpu.browser) touch the browser.

The entry points are `async def`: Python entered asynchronously may wait for the GPU with
pyodide.ffi.run_sync (JSPI), which the webgpu backend does to read results back. While one
call waits, the worker takes the next message, so model work runs under one lock.
"""
from __future__ import annotations

import asyncio
import json
import time

import numpy as np

MODELS = {"digit-classification": "models/mnist_cnn/", "image-classification": "models/efficientnet_lite0/"}
_state: dict = {"device": None, "pipelines": {}, "stats": {}, "namespace": None}


class _ModelLock:
    """One model call at a time; the task holding it may take it again (engine.run source
    that awaits load())."""

    def __init__(self):
        self._lock, self._owner, self._depth = asyncio.Lock(), None, 0

    async def __aenter__(self):
        task = asyncio.current_task()
        if self._owner is not task:
            await self._lock.acquire()
            self._owner = task
        self._depth += 1

    async def __aexit__(self, *exc):
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
            self._lock.release()


_lock = _ModelLock()


async def devices() -> str:
    """{"available": [...], "best": name, "unavailable": {name: why}, "adapter": str | None}
    for the backend select (asking for the GPU adapter here, in an async call)."""
    from engine import device
    unavailable = {name: device.unavailable_reason(name) for name in device.known()}
    available = [name for name, why in unavailable.items() if why is None]
    return json.dumps({"available": available, "best": device.best_available(),
                       "unavailable": {name: why for name, why in unavailable.items() if why is not None},
                       "adapter": str(device.get_backend("webgpu").gpu.info) if "webgpu" in available else None})


def _notice(pipe) -> dict:
    """What the page shows when a pipeline had to leave a lost GPU (once)."""
    notice, pipe.notice = pipe.notice, None
    if notice:
        _state["device"] = pipe.device
        for other in _state["pipelines"].values():       # the others held tensors on it too
            other.to(pipe.device)
    return {"notice": notice} if notice else {}


async def load(task: str, device: str | None, base_url: str, progress=None) -> str:
    """Fetch (lazily, by Range, cache-first) and build the pipeline for `task`."""
    from engine.io.remote import fetch_manifest, fetch_safetensors
    from engine.pipelines import TASKS
    from engine.web.fetch import CacheApiStore, JsFetchTransport

    folder = base_url + MODELS[task]
    transport, cache = JsFetchTransport(), CacheApiStore()
    t0 = time.perf_counter()
    manifest = await fetch_manifest(folder + "manifest.json", transport)
    report = (lambda loaded, total: progress(loaded, total)) if progress is not None else None
    weights = await fetch_safetensors(folder + manifest["index"], transport=transport, manifest=manifest,
                                      cache=cache, progress=report)
    extra = {}
    if "labels.json" in manifest.get("extra", {}):
        status, _, body = await transport.get(folder + "labels.json")
        if status != 200:
            raise RuntimeError(f"could not fetch {folder}labels.json (HTTP {status})")
        extra["labels"] = json.loads(body)
    async with _lock:
        pipe = TASKS[task](device=device or _state["device"], weights=weights, **extra)
    _state["pipelines"][task] = pipe
    _state["device"] = pipe.device or "numpy"
    stats = dict(getattr(weights, "fetch_stats", {}), ms=round((time.perf_counter() - t0) * 1e3, 1),
                 total_bytes=manifest["total_bytes"])
    _state["stats"][task] = stats
    return json.dumps({"task": task, "device": _state["device"], "weights": stats})


def pipeline(task: str = "digit-classification"):
    """The loaded pipeline for `task` (for engine.run(...) at the console and in tests)."""
    return _state["pipelines"][task]


async def set_device(device: str) -> str:
    async with _lock:
        for pipe in _state["pipelines"].values():
            pipe.to(device)
    _state["device"] = device
    return json.dumps({"device": device})


def _rgba(pixels, width: int, height: int) -> np.ndarray:
    """(H, W, 4) uint8 view of RGBA pixels from the page (a JS typed array, or bytes natively)."""
    data = np.frombuffer(pixels.to_py() if hasattr(pixels, "to_py") else pixels, np.uint8)
    return data.reshape(int(height), int(width), 4)


async def predict_digit(pixels, width: int, height: int) -> str:
    """RGBA canvas pixels (a JS Uint8ClampedArray) -> the 10 probabilities and timing."""
    from engine.pipelines import softmax_rows
    pipe = _state["pipelines"]["digit-classification"]
    image = _rgba(pixels, width, height)
    async with _lock:
        t0 = time.perf_counter()
        batch = pipe.preprocess([image])                 # (1, 1, 28, 28)
        blank = not batch.any()
        # preprocess once: the same batch decides "blank" and feeds the model
        probs = softmax_rows(pipe.logits(batch))[0] if not blank else np.zeros(10)
        ms = (time.perf_counter() - t0) * 1e3
        notice = _notice(pipe)
    return json.dumps({"probs": [round(float(p), 6) for p in probs], "blank": blank,
                       "prediction": None if blank else str(int(np.argmax(probs))),
                       "ms": round(ms, 2), "device": _state["device"], **notice})


async def classify_image(pixels, width: int, height: int, top_k: int = 5) -> str:
    """RGBA pixels decoded by the browser -> the top-k ImageNet classes and timing."""
    pipe = _state["pipelines"]["image-classification"]
    image = _rgba(pixels, width, height)
    async with _lock:
        t0 = time.perf_counter()
        predictions = pipe(image, top_k=int(top_k))
        ms = (time.perf_counter() - t0) * 1e3
        notice = _notice(pipe)
    return json.dumps({"predictions": predictions, "ms": round(ms, 2), "device": _state["device"], **notice})


async def bench_image(repeat: int = 5, batches=(1,)) -> str:
    """Median EfficientNet inference time (forward only) on the current device."""
    x = np.random.default_rng(0).standard_normal((max(batches), 3, 224, 224)).astype(np.float32)
    return await _bench("image-classification", {b: x[:b] for b in batches}, repeat, 2)


async def _bench(task: str, inputs: dict, repeat: int, digits: int) -> str:
    """{"batchN_ms": median ms of pipe.logits} for each batch size N -> input in `inputs`."""
    from engine.bench import _median_ms
    async with _lock:
        pipe = _state["pipelines"][task]
        out = {f"batch{b}_ms": round(_median_ms(lambda: pipe.logits(x), repeat), digits) for b, x in inputs.items()}
    return json.dumps({"device": _state["device"], **out})


async def bench_gemm(repeat: int = 5) -> str:
    """GEMM GFLOP/s on every available backend (engine.bench.bench_gemm), in this browser."""
    from engine.bench import bench_gemm as run
    async with _lock:
        return json.dumps(run(repeat=repeat))


async def bench_ops(repeat: int = 5) -> str:
    """Per-op times on every available backend (engine.bench.bench_ops), in this browser."""
    from engine.bench import bench_ops as run
    async with _lock:
        return json.dumps(run(repeat=repeat, inner=3))


async def bench_digit(repeat: int = 20, batches=(1, 16)) -> str:
    """Median MNIST inference time per batch size on the current device."""
    rng = np.random.default_rng(0)
    return await _bench("digit-classification", {b: rng.random((b, 1, 28, 28), dtype=np.float32) for b in batches},
                        repeat, 3)


async def run(source: str) -> str:
    """Run Python source in the worker; the value of its last expression, as JSON.

    Raises with the Python error text on failure (worker.js rejects with it).
    """
    from pyodide.code import eval_code_async
    if _state["namespace"] is None:
        import engine
        _state["namespace"] = {"__name__": "__engine_console__", "engine": engine, "np": np}
    async with _lock:
        value = await eval_code_async(source, globals=_state["namespace"])
    return json.dumps(value, default=_jsonable)


def _jsonable(value):
    from engine import Tensor
    if isinstance(value, Tensor):
        return value.tolist()
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    return repr(value)
