"""Benchmarks: the engine against its peers (PyTorch, numpy) on the same inputs and machine, in one run.

One module per subject; `python -m engine bench ...` and the bench page's worker entry points call them:
- `models`: MNIST CNN and EfficientNet-Lite0 forward passes against torch;
- `ops`: float32 GEMM GFLOP/s and single ops per backend, beside numpy;
- `text`: all-MiniLM-L6-v2 sentence embeddings against transformers, and the tokenizer's throughput;
- `quant`: linear layers with GGML quantized weights against the float32 product;
- `llm`: SmolLM2 chat prefill and decode tokens/s against transformers.
- `detection`: YOLO11n-pose and YOLOv10n (network and pipeline) against ultralytics on torch.

This module holds what they share: the timers, the machine's description and the per-kernel
profile. Numbers are reported as times and ratios; they are never test assertions.
"""
from __future__ import annotations

import contextlib
import platform
import statistics
import time

import numpy as np


def timed_ms(fn, repeat: int) -> tuple[float, float]:
    """(median, fastest) wall time of `repeat` calls of fn in ms, after one untimed call (caches,
    lazy loading). On a shared machine the fastest run is the steadier measure of the work itself."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times)


def median_ms(fn, repeat: int) -> float:
    """Median wall time of `repeat` calls of fn, in ms, after one untimed call."""
    return timed_ms(fn, repeat)[0]


def time_ms(fn, device: str, repeat: int = 20, min_time: float = 0.2) -> float:
    """Median ms per call of fn on `device`. After a warm-up call, samples of `inner` calls
    (about 1 ms in all: beyond a browser's coarse timer) each end with a device sync, so a GPU's
    time is its throughput; samples are taken until `min_time` seconds have passed (at least 3)
    or `repeat` were taken."""
    from ..device import synchronize

    def sample(calls: int) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        synchronize(device)
        return (time.perf_counter() - t0) / calls

    sample(1)                                    # warm-up: pipelines, lazily built tables, caches
    first = sample(1)
    inner = max(1, min(100, int(1e-3 / max(first, 1e-7))))
    times = [first] if inner == 1 else []
    start = time.perf_counter()
    while len(times) < repeat and (len(times) < 3 or time.perf_counter() - start < min_time):
        times.append(sample(inner))
    return statistics.median(times) * 1e3


def machine() -> str:
    """The processor architecture, the Python and the kernels' threads of a benchmark, e.g.
    "x86_64 CPython 3.11.2, 2 threads"."""
    from ..threads import get_num_threads
    n = get_num_threads()
    return (f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}, "
            f"{n} thread{'s' if n != 1 else ''}")


@contextlib.contextmanager
def threads(count: int):
    """Inside the block the engine's kernels and torch (when installed) run on `count` threads, so
    that a comparison is at the same count; yields a description, e.g. "2 threads (torch 2)". (The
    numpy backend's BLAS keeps its own threads.)"""
    from ..threads import get_num_threads, set_num_threads
    try:
        import torch
    except ImportError:
        torch = None
    before, torch_before = get_num_threads(), torch.get_num_threads() if torch else None
    set_num_threads(count)
    if torch:
        torch.set_num_threads(count)
    try:
        n = get_num_threads()
        yield f"{n} thread{'s' if n != 1 else ''}" + (f" (torch {torch.get_num_threads()})" if torch else "")
    finally:
        set_num_threads(before)
        if torch:
            torch.set_num_threads(torch_before)


def profile(model, shape, device: str | None = None, repeat: int = 3, forward=None) -> dict:
    """Where a forward pass of `model` on a (*shape) input (or a call of `forward()`) spends its
    time, per kernel: each op is followed by a device sync, so a GPU's time is charged to the op
    that queued it (the sum exceeds an unprofiled pass by the syncs). Rows sorted by total time."""
    from ..device import get_backend
    from ..tensor import from_numpy

    backend = get_backend(device)
    if forward is None:
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        forward = lambda: model(from_numpy(x, device)).numpy()        # noqa: E731
    forward()                                        # warm: pipelines, caches
    rows: dict = {}

    def timed(method, label):
        def run(name, inputs, dtype, params):
            t0 = time.perf_counter()
            out = method(name, inputs, dtype, params)
            backend.sync()
            key = label(name, inputs, params)
            row = rows.setdefault(key, [0, 0.0])
            row[0] += 1
            row[1] += (time.perf_counter() - t0) * 1e3 / repeat
            return out
        return run

    def kind(name, inputs, params):                  # convolutions by shape: they differ most
        if name in ("conv2d", "CONV2D") and len(inputs) > 1:
            o, cg, kh, kw = inputs[1].shape
            return f"conv2d {kh}x{kw}" + (" depthwise" if params.get("groups", 1) > 1 and cg == 1 else "")
        if name == "linear_q" and "qtype" in params:     # quantized products by GGML type and shape
            return f"linear_q {params['qtype']} {params['cols']}->{params['rows']}"
        return name.lower()
    backend.run = timed(backend.run, lambda op, inputs, params: kind(op.name, inputs, params))
    backend.run_fused = timed(backend.run_fused, kind)
    try:
        t0 = time.perf_counter()
        for _ in range(repeat):
            forward()
        total = (time.perf_counter() - t0) * 1e3 / repeat
    finally:
        del backend.run, backend.run_fused
    ops = sorted(({"op": k, "calls": n // repeat, "ms": round(ms, 3)} for k, (n, ms) in rows.items()),
                 key=lambda r: -r["ms"])
    return {"total_ms": round(total, 3), "ops": ops}


def format_profile(prof: dict, what: str) -> list[str]:
    """The lines of a profile() table: one row per kernel, its calls, time and share."""
    return [f"profile of one {what} pass, a sync after each op ({prof['total_ms']:.3f} ms in all):",
            f"{'op':>24} {'calls':>6} {'ms':>9} {'share':>6}",
            *(f"{r['op']:>24} {r['calls']:>6} {r['ms']:>9.3f} {r['ms'] / prof['total_ms']:>6.0%}"
              for r in prof["ops"])]
