"""Benchmarks: the engine and PyTorch on the same model, inputs and machine, in one run.

Numbers are reported as times and ratios (engine / torch: below 1 means the
engine is faster); they are never test assertions.
"""
from __future__ import annotations

import platform
import statistics
import time

import numpy as np


def _median_ms(fn, repeat: int) -> float:
    fn()                                             # warm-up: caches, lazy loading
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def bench_mnist(repeat: int = 20, device: str | None = None, batches=(1, 64)) -> dict:
    from models import mnist_cnn
    from .device import default_device
    from .tensor import from_numpy

    model = mnist_cnn.load(device=device)
    reference = _torch_mnist(mnist_cnn.WEIGHTS)
    rng = np.random.default_rng(0)
    cases = []
    for batch in batches:
        x = rng.random((batch, 1, 28, 28), dtype=np.float32)
        engine_ms = _median_ms(lambda: model(from_numpy(x, device)).numpy(), repeat)
        case = {"batch": batch, "engine_ms": round(engine_ms, 3)}
        if reference is not None:
            torch, net = reference
            with torch.no_grad():
                tx = torch.from_numpy(x)
                torch_ms = _median_ms(lambda: net(tx).numpy(), repeat)
            case.update(torch_ms=round(torch_ms, 3), ratio=round(engine_ms / torch_ms, 2))
        cases.append(case)
    info = {"model": "mnist_cnn", "device": device or default_device(), "repeat": repeat,
            "machine": f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}",
            "numpy": np.__version__, "cases": cases}
    if reference is not None:
        info["torch"] = f"{reference[0].__version__} ({reference[0].get_num_threads()} threads)"
    else:
        info["torch"] = "not installed: engine times only"
    return info


def _torch_mnist(weights):
    """The torch twin with the same weights, or None when torch is not installed."""
    try:
        import torch
        from models.train_mnist import TorchMnistCNN
    except ImportError:
        return None
    from .io import load_safetensors
    net = TorchMnistCNN().eval()
    state = {k: torch.from_numpy(v.numpy()) for k, v in load_safetensors(weights).items()}
    net.load_state_dict(state)
    return torch, net


def format_table(result: dict) -> str:
    lines = [f"{result['model']} on {result['device']} ({result['machine']}, NumPy {result['numpy']}); "
             f"torch {result['torch']}; median of {result['repeat']} runs",
             f"{'batch':>6} {'engine ms':>10} {'torch ms':>10} {'engine/torch':>13}"]
    for c in result["cases"]:
        lines.append(f"{c['batch']:>6} {c['engine_ms']:>10.3f} {c.get('torch_ms', float('nan')):>10.3f} "
                     f"{c.get('ratio', float('nan')):>12.2f}x")
    return "\n".join(lines)
