"""The pipelines a long-lived host has loaded, and the one lock their model calls share.

The page's worker (engine/web/worker.py) loads a task's pipeline when its card opens and keeps it
here; the task modules' worker entry points (each module's WORKER) find it with `loaded(task)`.
Their calls are `async def`: Python entered asynchronously may wait for the GPU (the webgpu
backend does, to read results back), and while one call waits the worker takes the next message,
so model work runs under `lock`, one call at a time.

Nothing here touches JavaScript at import: the task modules import it natively too (the command
line, the tests). Values that come from the page as JS proxies are turned into Python by `py`.
"""
from __future__ import annotations

import asyncio
import json

import numpy as np

from ..errors import InputError

# "device": the backend the pipelines run on; "pipelines": task -> pipeline; "stats": task -> what
# loading its weights fetched; "namespace": the console's globals (engine.web.worker.run)
current: dict = {"device": None, "pipelines": {}, "stats": {}, "namespace": None}


class ModelLock:
    """One model call at a time; the task holding it may take it again (console source that
    awaits a load)."""

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


lock = ModelLock()


def loaded(task: str):
    """The pipeline loaded for `task`; an InputError when its card has not loaded it."""
    pipe = current["pipelines"].get(task)
    if pipe is None:
        raise InputError(f"the {task} model is not loaded yet (loaded: {', '.join(current['pipelines']) or 'none'})")
    return pipe


def notice(pipe) -> dict:
    """{"notice": why} once, when the pipeline had to leave a lost GPU; the other pipelines
    follow it to its new backend (they held tensors on the lost one too)."""
    text, pipe.notice = pipe.notice, None
    if not text:
        return {}
    current["device"] = pipe.device
    for other in current["pipelines"].values():
        other.to(pipe.device)
    return {"notice": text}


def py(value):
    """A value from the page (a JS proxy in the worker, plain Python natively) as Python."""
    return value.to_py() if hasattr(value, "to_py") else value


def from_json(value):
    """A JSON string, or an already decoded value, as Python."""
    value = py(value)
    return json.loads(value) if isinstance(value, str) else value


def rgba(pixels, width: int, height: int) -> np.ndarray:
    """(H, W, 4) uint8 view of RGBA pixels from the page (a JS typed array, or bytes natively)."""
    return np.frombuffer(py(pixels), np.uint8).reshape(int(height), int(width), 4)


def heap_bytes() -> int:
    """The wasm heap's size in the worker (the whole linear memory); 0 natively."""
    from .. import runtime
    heap = runtime.heap()
    return 0 if heap is None else heap[1]
