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
import warnings

import numpy as np

# what web/worker.js may call (by these names, with the message's args)
EXPORTS = ("devices", "tasks", "set_device", "predict_digit", "classify_image", "embed_texts", "bench_digit",
           "bench_image", "bench_text", "bench_gemm", "bench_ops", "bench_qlinear", "run", "chat", "chat_stop",
           "chat_reset", "chat_defaults", "bench_llm")
CHAT_TASK = "text-generation"
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
    """Fetch (lazily, by Range, cache-first) and build the pipeline for `task`: its model and
    where its weights lie come from the registry."""
    from engine import pipeline as make_pipeline
    from engine import registry
    from engine.web.loader import load_checkpoint

    registry.set_site(base_url)
    entry = registry.for_task(task)
    t0 = time.perf_counter()
    report = (lambda loaded, total: progress(loaded, total)) if progress is not None else None
    checkpoint = await load_checkpoint(entry, progress=report)
    async with _lock:
        pipe = make_pipeline(task, device=device or _state["device"], weights=checkpoint)
    _state["pipelines"][task] = pipe
    _state["device"] = pipe.device or "numpy"
    weights = checkpoint.tensors.tensors          # the prefetched part (row tables come later)
    stats = dict(getattr(weights, "fetch_stats", {}), ms=round((time.perf_counter() - t0) * 1e3, 1))
    _state["stats"][task] = stats
    return json.dumps({"task": task, "model": entry.name, "device": _state["device"], "weights": stats})


def tasks() -> str:
    """The registry as the page sees it (engine.registry.describe)."""
    from engine import registry
    return json.dumps(registry.describe())


def pipeline(task: str = "digit-classification"):
    """The loaded pipeline for `task` (for engine.run(...) at the console and in tests)."""
    return _state["pipelines"][task]


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


async def embed_texts(texts, task: str = "sentence-embedding") -> str:
    """Texts -> their unit vectors, the cosine similarity of every pair, the texts truncated,
    the rows fetched for them and timing."""
    pipe = _state["pipelines"][task]
    texts = list(texts.to_py() if hasattr(texts, "to_py") else texts)
    async with _lock:
        t0 = time.perf_counter()
        with warnings.catch_warnings():              # truncation is reported in the result instead
            warnings.simplefilter("ignore", UserWarning)
            batch = await pipe.prepare(texts)        # word-embedding rows by Range, without blocking
        t1 = time.perf_counter()
        vectors = pipe.embed(batch)                  # falls back by itself if the GPU is lost
        ms = (time.perf_counter() - t1) * 1e3
        notice = _notice(pipe)
    similarity = pipe.similarity(vectors, vectors)
    return json.dumps({"embeddings": np.round(vectors, 7).tolist(), "similarity": np.round(similarity, 6).tolist(),
                       "truncated": pipe.truncated, "max_length": pipe.max_length,
                       "tokens": int(batch["attention_mask"].sum()),
                       "fetch_ms": round((t1 - t0) * 1e3, 2), "ms": round(ms, 2), "device": _state["device"],
                       "rows": _row_stats(pipe), "cache_error": _fetch_stats(pipe).get("cache_error"), **notice})


def _fetch_stats(pipe) -> dict:
    """What the loader of the pipeline's weights counted (the row tables' fetches included)."""
    return getattr(getattr(pipe.checkpoint.tensors, "tensors", pipe.checkpoint.tensors), "fetch_stats", {})


def _row_stats(pipe) -> dict:
    tables = getattr(pipe.checkpoint.tensors, "tables", {})
    return {name: {"fetched_rows": t.fetched_rows, "rows": t.shape[0]} for name, t in tables.items()}


async def bench_text(repeat: int = 5, shapes=((1, 128), (8, 128)), task: str = "sentence-embedding") -> str:
    """Median encoder time (forward, pooling, normalisation) per (batch, length) on the current device,
    plus tokenizer throughput."""
    from engine.bench import median_ms
    async with _lock:
        pipe = _state["pipelines"][task]
        rng = np.random.default_rng(0)
        out = {}
        for n, length in shapes:
            ids = rng.integers(1000, 2000, (n, length))
            batch = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
            await pipe.fetch_rows(ids)
            out[f"batch{n}x{length}_ms"] = round(median_ms(lambda: pipe.embed(batch), repeat), 2)
        from engine.bench.text import tokenizer_throughput
        out["tokenizer"] = tokenizer_throughput(pipe.tokenizer)
    return json.dumps({"device": _state["device"], **out})


async def bench_image(repeat: int = 5, batches=(1,)) -> str:
    """Median EfficientNet inference time (forward only) on the current device."""
    x = np.random.default_rng(0).standard_normal((max(batches), 3, 224, 224)).astype(np.float32)
    return await _bench("image-classification", {b: x[:b] for b in batches}, repeat, 2)


async def _bench(task: str, inputs: dict, repeat: int, digits: int) -> str:
    """{"batchN_ms": median ms of pipe.logits} for each batch size N -> input in `inputs`."""
    from engine.bench import median_ms
    async with _lock:
        pipe = _state["pipelines"][task]
        out = {f"batch{b}_ms": round(median_ms(lambda: pipe.logits(x), repeat), digits) for b, x in inputs.items()}
    return json.dumps({"device": _state["device"], **out})


async def bench_gemm(repeat: int = 5, max_side: int | None = None) -> str:
    """GEMM GFLOP/s on every available backend (engine.bench.ops.bench_gemm), in this browser; with
    max_side, only the shapes of at most max_side**3 multiply-adds."""
    from engine.bench.ops import GEMM_SHAPES, bench_gemm as run
    shapes = [s for s in GEMM_SHAPES if max_side is None or s[0] * s[1] * s[2] <= max_side ** 3]
    async with _lock:
        return json.dumps(run(repeat=repeat, shapes=shapes))


async def bench_ops(repeat: int = 5) -> str:
    """Per-op times on every available backend (engine.bench.ops.bench_ops), in this browser."""
    from engine.bench.ops import bench_ops as run
    async with _lock:
        return json.dumps(run(repeat=repeat, inner=3))


async def bench_qlinear(repeat: int = 5, full: bool = False) -> str:
    """Quantized linear GB/s and GFLOP/s per GGML type against float32 on every available backend
    (engine.bench.quant.bench_qlinear, as `python -m engine bench qlinear` natively), in this
    browser: its quick set, or with `full` the CLI's default set; "table" is the CLI's table."""
    from engine.bench.quant import QUICK, bench_qlinear as run, format_qlinear
    from engine.device import available
    async with _lock:
        result = run(devices=available(), repeat=repeat, **({} if full else QUICK))
    return json.dumps({**result, "table": format_qlinear(result)})


# --- chat: the answer streams to the page piece by piece ------------------------------------------
def _options(value) -> dict:
    value = value.to_py() if hasattr(value, "to_py") else value
    return json.loads(value) if isinstance(value, str) else dict(value or {})


_chat = {"stop": False}


async def chat(messages, options=None, on_piece=None) -> str:
    """Answer a conversation ([{"role", "content"}, ...], JSON or a list), calling on_piece(text)
    with each piece as it comes, and yielding to the worker's message loop between tokens so that
    chat_stop can arrive. The earlier turns' tokens still in the cache are not fed again.

    A chat_stop that arrives while this call waits for another model call to finish stops it
    too: messages are taken in order, so any Stop after this call began is meant for it."""
    _chat["stop"] = False
    pipe = _state["pipelines"][CHAT_TASK]
    messages = messages.to_py() if hasattr(messages, "to_py") else messages
    messages = json.loads(messages) if isinstance(messages, str) else list(messages)
    pieces = []
    async with _lock:
        memory = _heap_bytes()
        for piece in pipe.stream(messages, cancel=lambda: _chat["stop"], **_options(options)):
            pieces.append(piece)
            if on_piece is not None:
                on_piece(piece)
            await asyncio.sleep(0)                  # the Stop button's message gets its turn
            memory = max(memory, _heap_bytes())
        notice = _notice(pipe)
    stats = {k: round(v, 4) if isinstance(v, float) else v for k, v in pipe.stats.items()}
    return json.dumps({"text": "".join(pieces), "stats": stats, "device": _state["device"],
                       "heap_bytes": memory, **notice})


def chat_stop() -> str:
    """Stop the answer being generated, or about to be (it ends before its next token); no lock:
    it runs between tokens."""
    _chat["stop"] = True
    pipe = _state["pipelines"].get(CHAT_TASK)
    if pipe is not None:
        pipe.cancel()
    return json.dumps({"stopped": pipe is not None})


async def chat_reset() -> str:
    """A new conversation: the cached one is dropped (nothing to drop before the model loads)."""
    async with _lock:
        pipe = _state["pipelines"].get(CHAT_TASK)
        if pipe is not None:
            pipe.reset()
    return json.dumps({"reset": pipe is not None})


def chat_defaults() -> str:
    """What the chat card starts from: the model's default system message, context length, model."""
    pipe = _state["pipelines"][CHAT_TASK]
    return json.dumps({"system": pipe.template.default_system if pipe.template else None,
                       "capacity": pipe.generator.cache.capacity, "model": pipe.entry.name,
                       "defaults": {"temperature": 0.0, "max_new_tokens": 256}})


def _heap_bytes() -> int:
    """The wasm heap's size in this worker (the whole linear memory), 0 natively."""
    try:
        import pyodide_js
        return int(pyodide_js._module.HEAPU8.length)
    except (ImportError, AttributeError):
        return 0


async def bench_llm(new_tokens: int = 128, repeat: int = 1) -> str:
    """Prefill and decode tokens/s of the chat model on the current device (the 37-token chat
    prompt, greedy, `new_tokens` new ones, EOS ignored), as `python -m engine bench llm`."""
    from engine.bench.llm import bench_pipeline
    pipe = _state["pipelines"][CHAT_TASK]
    async with _lock:
        result = bench_pipeline(pipe, new_tokens=new_tokens, repeat=repeat)
    return json.dumps({**result, "heap_bytes": _heap_bytes(), "device": _state["device"]})


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
