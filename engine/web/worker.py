"""The inference worker's Python side (runs in Pyodide inside web/worker.js).

worker.js calls the functions named in EXPORTS and posts their results to the page. Every
result is a JSON string so nothing depends on proxy lifetimes. The model code, preprocessing and
weight parsing are the same as natively; only fetching (engine.site.browser) and the WebGPU device
(engine.backends.webgpu.browser) touch the browser.

This module holds what no task owns: the backends, loading a task's pipeline when its card opens,
the console. Each task's entry points (predict_digit, embed_texts, chat, ...) come from its task
module's WORKER (engine/tasks/), the bench page's from engine/web/bench.py; they are exported here
under their own names. The loaded pipelines and the lock that model calls share live in
engine.tasks.state.

The entry points are `async def`: Python entered asynchronously may wait for the GPU with
pyodide.ffi.run_sync (JSPI), which the webgpu backend does to read results back. While one
call waits, the worker takes the next message, so model work runs under one lock.
"""
from __future__ import annotations

import gc
import json
import time

import numpy as np

from engine import tasks as _tasks
from engine.errors import EngineError
from engine.tasks import state

from . import bench

_state = state.current                  # the loaded pipelines (tests and the console read it here)
_lock = state.lock


async def devices() -> str:
    """{"available": [...], "best": name, "unavailable": {name: why}, "adapter": str | None}
    for the backend select (asking for the GPU adapter here, in an async call)."""
    from engine import device
    unavailable = {name: device.unavailable_reason(name) for name in device.known()}
    available = [name for name, why in unavailable.items() if why is None]
    return json.dumps({"available": available, "best": device.best_available(),
                       "unavailable": {name: why for name, why in unavailable.items() if why is not None},
                       "adapter": str(device.get_backend("webgpu").gpu.info) if "webgpu" in available else None})


async def load(task: str, device: str | None, base_url: str, progress=None, model: str | None = None) -> str:
    """Fetch (lazily, by Range, cache-first) and build the pipeline for `task`: its model and
    where its weights lie come from the registry. `model`: a registry model of the task other than
    its first, or the URL of a GGUF (its header checked before its weights come:
    engine.tasks.model_urls). The task's pipeline loaded before is dropped first, with its
    cache, so that its memory serves the new one (the heap itself never shrinks)."""
    from engine import registry, runtime
    from engine.site.browser import load_checkpoint
    from engine.tasks import model_urls

    runtime.set_site(base_url)
    url = model if isinstance(model, str) and model.startswith(("http://", "https://")) else None
    entry = (model_urls.entry_for(task, url) if url else
             registry.for_task(task) if model is None else registry.model(str(model)))
    t0 = time.perf_counter()
    report = (lambda loaded, total: progress(loaded, total)) if progress is not None else None
    async with _lock:
        drop(task)
    checkpoint = await (model_urls.checkpoint(entry, url, report) if url else load_checkpoint(entry, progress=report))
    await _tasks.load_packages(entry, checkpoint)          # jinja2 for a chat model's template
    async with _lock:
        pipe = _tasks.pipeline_for(entry, task, device=device or _state["device"], weights=checkpoint)
        _state["pipelines"][task] = pipe
    _state["device"] = pipe.device or "numpy"
    weights = checkpoint.tensors.tensors if hasattr(checkpoint.tensors, "tensors") else checkpoint.tensors
    stats = dict(getattr(weights, "fetch_stats", {}), ms=round((time.perf_counter() - t0) * 1e3, 1))
    _state["stats"][task] = stats
    return json.dumps({"task": task, "model": entry.name, "url": url, "device": _state["device"], "weights": stats,
                       "heap_bytes": state.heap_bytes()})


async def inspect_model(task: str, url: str) -> str:
    """What the GGUF at `url` is, from its header alone (size, architecture, chat template, tensor
    types) and "refused": why `task`'s model cannot run it, or None (engine.tasks.model_urls)."""
    from engine.tasks import model_urls
    return json.dumps(await model_urls.inspect(task, str(url)))


def drop(task: str) -> bool:
    """Forget the pipeline loaded for `task` (its model, weights and cache), and collect it now."""
    pipe = _state["pipelines"].pop(task, None)
    _state["stats"].pop(task, None)
    if pipe is None:
        return False
    del pipe
    gc.collect()
    return True


def tasks() -> str:
    """The registry as the page sees it, models in the order of their cards (engine.tasks.page_listing)."""
    return json.dumps(_tasks.page_listing())


def pipeline(task: str = "digit-classification"):
    """The loaded pipeline for `task` (for engine.run(...) at the console and in tests)."""
    return state.loaded(task)


async def set_device(device: str) -> str:
    """Move every loaded pipeline to `device` (after the model call in progress, if any). A
    device that cannot be used, or a move that fails, leaves every pipeline where it was."""
    from engine import device as devices
    from engine.errors import BackendError
    async with _lock:
        why = devices.unavailable_reason(device)
        if why is not None:
            raise BackendError(f"backend {device!r} cannot be used here: {why}")
        moved = []
        try:
            for pipe in _state["pipelines"].values():
                previous = pipe.device
                pipe.to(device)
                moved.append((pipe, previous))
        except BaseException:
            for pipe, previous in moved:
                pipe.to(previous)
            raise
        _state["device"] = device
    return json.dumps({"device": device})


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


async def chat_completion(request: str, on_chunk=None) -> str:
    """engine.chat.completions.create in the page (engine-client.js chat.completions.create): the
    request as JSON, answered by the text-generation model loaded here (the client loads the one
    it names first). With "stream": each chunk goes to on_chunk as JSON, between tokens the
    worker takes its next message (chat_stop ends the answer), and the reply is {"engine": ...};
    else the completion. "engine" (not OpenAI's): the run's stats, backend and heap."""
    import asyncio

    from engine import api
    from engine.tasks import text_generation
    request = json.loads(request)
    if not isinstance(request, dict):
        raise EngineError("the request must be a JSON object")
    pipe = state.loaded("text-generation")
    request.update(model=pipe.entry.name, cancel=text_generation.page_cancel())
    request.pop("device", None)
    async with _lock:
        with api.serving(pipe):
            memory = state.heap_bytes()
            if request.get("stream"):
                reply = {}
                for chunk in api.chat.completions.create(**request):
                    if on_chunk is not None:
                        on_chunk(json.dumps(chunk))
                    await asyncio.sleep(0)          # chat_stop's message gets its turn
                    memory = max(memory, state.heap_bytes())
            else:
                reply = api.chat.completions.create(**request)
    stats = {k: round(v, 4) if isinstance(v, float) else v for k, v in pipe.stats.items()}
    return json.dumps({**reply, "engine": {"stats": stats, "device": _state["device"], "heap_bytes": memory,
                                           **state.notice(pipe)}})


def _jsonable(value):
    from engine import Tensor
    if isinstance(value, Tensor):
        return value.tolist()
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    return repr(value)


def _entry_points() -> dict:
    """name -> function: this module's own, the bench page's, then every task module's."""
    table = {fn.__name__: fn for fn in (devices, tasks, set_device, inspect_model, run, chat_completion)}
    for fn in (*bench.ENTRY_POINTS, *_tasks.worker_entry_points().values()):
        if fn.__name__ in table:
            raise EngineError(f"two worker entry points are named {fn.__name__!r}")
        table[fn.__name__] = fn
    return table


_ENTRY_POINTS = _entry_points()
globals().update(_ENTRY_POINTS)         # worker.js calls api[name]: each entry point is an attribute
# what web/worker.js may call (by these names, with the message's args)
EXPORTS = tuple(_ENTRY_POINTS)
