"""`python -m engine bench mnist|effnet`: a model's forward pass on the engine and on PyTorch, same
weights, inputs and machine, in one run. Ratios are engine / torch: below 1 the engine is faster.
"""
from __future__ import annotations

import numpy as np

from . import format_profile, machine, median_ms, profile


def _compare(name: str, model, reference, shape, batches, repeat: int, device: str | None) -> dict:
    """Time `model` (engine) and `reference` ((torch, module) or None) on the same random
    inputs of (batch, *shape) for each batch size."""
    from ..device import default_device, describe
    from ..tensor import from_numpy

    rng = np.random.default_rng(0)
    cases = []
    for batch in batches:
        x = rng.random((batch, *shape), dtype=np.float32)
        engine_ms = median_ms(lambda: model(from_numpy(x, device)).numpy(), repeat)
        case = {"batch": batch, "engine_ms": round(engine_ms, 3)}
        if reference is not None:
            torch, net = reference
            with torch.no_grad():
                tx = torch.from_numpy(x)
                torch_ms = median_ms(lambda: net(tx).numpy(), repeat)
            case.update(torch_ms=round(torch_ms, 3), ratio=round(engine_ms / torch_ms, 2))
        cases.append(case)
    info = {"model": name, "device": device or default_device(), "adapter": describe(device), "repeat": repeat,
            "machine": machine(), "numpy": np.__version__, "cases": cases}
    if reference is not None:
        info["torch"] = f"{reference[0].__version__} ({reference[0].get_num_threads()} threads)"
    else:
        info["torch"] = "not installed: engine times only"
    return info


def bench_mnist(repeat: int = 20, device: str | None = None, batches=(1, 64), weights=None,
                with_profile: bool = False) -> dict:
    from models import mnist_cnn
    model = mnist_cnn.load(mnist_cnn.WEIGHTS if weights is None else weights, device=device)
    reference = _torch_mnist(model)                  # from the checkpoint's own tensors
    mnist_cnn.fold_batchnorm(model)                  # then as the pipeline runs it
    result = _compare("mnist_cnn", model, reference, (1, 28, 28), batches, repeat, device)
    if with_profile:
        result["profile"] = profile(model, (batches[0], 1, 28, 28), device)
    return result


def bench_effnet(repeat: int = 20, device: str | None = None, batches=(1, 8), weights=None,
                 with_profile: bool = False) -> dict:
    """EfficientNet-Lite0 at 224x224; torch runs efficientnet-lite-pytorch with the same weights."""
    from models import efficientnet_lite

    from .. import registry
    model = efficientnet_lite.load(weights or registry.default_location(efficientnet_lite.ENTRY), device)
    reference = _torch_effnet(model)                 # from the checkpoint's own tensors
    efficientnet_lite.fold_batchnorm(model)          # then as the pipeline runs it
    size = model.config.image_size
    result = _compare("efficientnet_lite0", model, reference, (3, size, size), batches, repeat, device)
    if with_profile:
        result["profile"] = profile(model, (batches[0], 3, size, size), device)
    return result


def _torch_mnist(model):
    """The torch twin with `model`'s weights, or None when torch is not installed."""
    try:
        import torch
        from .mnist_twin import TorchMnistCNN
    except ImportError:
        return None
    net = TorchMnistCNN().eval()
    net.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in model.state_dict().items()})
    return torch, net


def _torch_effnet(model):
    """efficientnet-lite-pytorch's model with `model`'s weights, or None when it is not installed."""
    try:
        import torch
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError:
        return None
    net = EfficientNet.from_name("efficientnet-lite0").eval()
    net.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in model.state_dict().items()})
    return torch, net


def format_table(result: dict) -> str:
    """The table of a bench_mnist / bench_effnet result: per batch, engine and torch ms and their ratio."""
    lines = [f"{result['model']} on {result['adapter']} ({result['machine']}, NumPy {result['numpy']}); "
             f"torch {result['torch']}; median of {result['repeat']} runs",
             f"{'batch':>6} {'engine ms':>10} {'torch ms':>10} {'engine/torch':>13}"]
    for c in result["cases"]:
        lines.append(f"{c['batch']:>6} {c['engine_ms']:>10.3f} {c.get('torch_ms', float('nan')):>10.3f} "
                     f"{c.get('ratio', float('nan')):>12.2f}x")
    if "profile" in result:
        lines += format_profile(result["profile"], f"batch-{result['cases'][0]['batch']}")
    return "\n".join(lines)
