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


def _compare(name: str, model, reference, shape, batches, repeat: int, device: str | None) -> dict:
    """Time `model` (engine) and `reference` ((torch, module) or None) on the same random
    inputs of (batch, *shape) for each batch size."""
    from .device import default_device
    from .tensor import from_numpy

    rng = np.random.default_rng(0)
    cases = []
    for batch in batches:
        x = rng.random((batch, *shape), dtype=np.float32)
        engine_ms = _median_ms(lambda: model(from_numpy(x, device)).numpy(), repeat)
        case = {"batch": batch, "engine_ms": round(engine_ms, 3)}
        if reference is not None:
            torch, net = reference
            with torch.no_grad():
                tx = torch.from_numpy(x)
                torch_ms = _median_ms(lambda: net(tx).numpy(), repeat)
            case.update(torch_ms=round(torch_ms, 3), ratio=round(engine_ms / torch_ms, 2))
        cases.append(case)
    from .device import describe
    info = {"model": name, "device": device or default_device(), "adapter": describe(device), "repeat": repeat,
            "machine": _machine(), "numpy": np.__version__, "cases": cases}
    if reference is not None:
        info["torch"] = f"{reference[0].__version__} ({reference[0].get_num_threads()} threads)"
    else:
        info["torch"] = "not installed: engine times only"
    return info


def profile(model, shape, device: str | None = None, repeat: int = 3, forward=None) -> dict:
    """Where a forward pass of `model` on a (*shape) input (or a call of `forward()`) spends its
    time, per kernel: each op is followed by a device sync, so a GPU's time is charged to the op
    that queued it (the sum exceeds an unprofiled pass by the syncs). Rows sorted by total time."""
    from .device import get_backend
    from .tensor import from_numpy

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

    from . import registry
    model = efficientnet_lite.load(weights or registry.default_location(efficientnet_lite.ENTRY), device)
    reference = _torch_effnet(model)                 # from the checkpoint's own tensors
    efficientnet_lite.fold_batchnorm(model)          # then as the pipeline runs it
    size = model.config.image_size
    result = _compare("efficientnet_lite0", model, reference, (3, size, size), batches, repeat, device)
    if with_profile:
        result["profile"] = profile(model, (batches[0], 3, size, size), device)
    return result


GEMM_SHAPES = ((128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (128, 384, 1536))


def bench_gemm(repeat: int = 20, device: str | None = None, shapes=None) -> dict:
    """float32 matmul (M x K) @ (K x N) through the engine on `device` and on numpy (the
    reference) in the same run; GFLOP/s = 2 M K N / median time. device=None: every available one."""
    from .device import available, describe, synchronize
    from .tensor import from_numpy

    devices = list(dict.fromkeys(["numpy"] + ([device] if device else available())))
    rng = np.random.default_rng(0)
    warm = rng.standard_normal((256, 256), dtype=np.float32)
    for name in devices:                            # past JIT tiering (wasm) and thread-pool start (BLAS)
        t = from_numpy(warm, name)
        for _ in range(5):
            t @ t
    cases = []
    for m, k, n in shapes or GEMM_SHAPES:
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        case = {"m": m, "k": k, "n": n}
        runs = max(3, min(repeat, int(4e9 / (2 * m * k * n))))   # fewer runs of the big products
        for name in devices:
            ta, tb = from_numpy(a, name), from_numpy(b, name)
            ms = _median_ms(lambda: (ta @ tb, synchronize(name)), runs)
            case[name] = {"ms": round(ms, 4), "gflops": round(2 * m * k * n / ms / 1e6, 2)}
        cases.append(case)
    return {"model": "gemm", "devices": devices, "adapters": {d: describe(d) for d in devices}, "repeat": repeat,
            "machine": _machine(), "numpy": np.__version__, "cases": cases}


# (name, inputs, the op, the fused kernels it may use): inputs are shapes of float32 normal
# values, or arrays; the kernels a CNN and a transformer spend their time in, at the sizes they
# see (the transformer ones: all-MiniLM-L6-v2, hidden 384, 12 heads of 32, FFN 1536, 128 tokens)
def _op_cases():
    import engine.nn.functional as F
    lengths = np.array([128, 100, 77, 128, 64, 128, 90, 111])           # a padded batch of 8 sequences
    padding = (np.arange(128) < lengths[:, None]).reshape(8, 1, 1, 128)  # (N, 1, 1, S), True = attend

    def attention(x, mask):                          # q, k, v: BERT's strided head views of one projection
        q, k, v = (x[..., i * 384:(i + 1) * 384].reshape(8, 128, 12, 32).transpose(1, 2) for i in range(3))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return [
        ("matmul", [(512, 512), (512, 512)], lambda a, b: a @ b, ()),
        ("linear", [(128, 384), (1536, 384), (1536,)], F.linear, ()),
        ("conv2d 3x3", [(1, 32, 56, 56), (64, 32, 3, 3), (64,)], lambda x, w, b: F.conv2d(x, w, b, padding=1), ()),
        ("depthwise 3x3", [(1, 96, 56, 56), (96, 1, 3, 3), (96,)],
         lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=96), ()),
        ("softmax", [(12, 128, 128)], lambda x: F.softmax(x, dim=-1), ()),
        ("layer_norm", [(128, 384), (384,), (384,)], lambda x, w, b: F.layer_norm(x, (384,), w, b), ()),
        ("add", [(1, 96, 56, 56), (1, 96, 56, 56)], lambda a, b: a + b, ()),
        ("gelu", [(128, 1536)], F.gelu, ("gelu",)),
        ("attention", [(8, 128, 3 * 384), padding], attention, ("attention",)),
        ("add_layer_norm", [(128, 384)] * 2 + [(384,)] * 3,
         lambda x, r, w, b, ib: F.add_layer_norm(x, r, 384, w, b, 1e-12, ib), ("add_layer_norm",)),
        ("add_layer_norm", [(8, 128, 384)] * 2 + [(384,)] * 3,
         lambda x, r, w, b, ib: F.add_layer_norm(x, r, 384, w, b, 1e-12, ib), ("add_layer_norm",)),
        ("sum", [(128, 1536)], lambda x: x.sum(-1), ()),
    ]


def bench_ops(repeat: int = 20, device: str | None = None, inner: int = 10) -> dict:
    """Per-op time on `device` and numpy (device=None: every available one), same run: each
    sample runs the op `inner` times and then waits for the device, so a GPU's per-op time
    is its throughput, not one submission's round trip (ops slower than 20 ms run fewer times).
    Where a device has a fused kernel for the op, the composite is timed too, with that kernel
    taken out of the backend's table ("composite_ms")."""
    from .device import available, describe, get_backend
    from .tensor import from_numpy

    devices = list(dict.fromkeys(["numpy"] + ([device] if device else available())))
    rng = np.random.default_rng(0)
    cases = []
    for name, inputs, op, kernels in _op_cases():
        arrays = [a if isinstance(a, np.ndarray) else rng.standard_normal(a, dtype=np.float32) for a in inputs]
        case = {"op": name, "shapes": [list(np.shape(a)) for a in arrays]}
        for dev in devices:
            tensors = [from_numpy(a, dev) for a in arrays]
            backend = get_backend(dev)
            case[dev] = {"ms": _op_ms(lambda: op(*tensors), dev, repeat, inner)}
            if any(k in backend.fused for k in kernels):
                fused, own = backend.fused, "fused" in vars(backend)   # an instance's table, or its class's
                backend.fused = {k: fn for k, fn in fused.items() if k not in kernels}
                try:
                    case[dev]["composite_ms"] = _op_ms(lambda: op(*tensors), dev, repeat, inner)
                finally:
                    if own:
                        backend.fused = fused
                    else:
                        del backend.fused
        cases.append(case)
    return {"model": "ops", "devices": devices, "adapters": {d: describe(d) for d in devices}, "repeat": repeat,
            "machine": _machine(), "numpy": np.__version__, "cases": cases}


def _op_ms(fn, device: str, repeat: int, inner: int) -> float:
    """Median ms per call of fn, `inner` calls per sample then a device sync; after a timed
    warm-up, slow ops get fewer calls per sample and fewer samples."""
    from .device import synchronize

    t0 = time.perf_counter()
    fn()
    synchronize(device)
    once = time.perf_counter() - t0
    if once > 0.02:
        inner, repeat = 1, max(1, min(repeat, int(1.0 / once)))

    def run():
        for _ in range(inner):
            fn()
        synchronize(device)
    return round(_median_ms(run, repeat) / inner, 4)


def _machine() -> str:
    return f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}"


def _torch_mnist(model):
    """The torch twin with `model`'s weights, or None when torch is not installed."""
    try:
        import torch
        from models.train_mnist import TorchMnistCNN
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
    if result["model"] == "gemm":
        return _format_gemm(result)
    if result["model"] == "ops":
        return _format_ops(result)
    lines = [f"{result['model']} on {result['adapter']} ({result['machine']}, NumPy {result['numpy']}); "
             f"torch {result['torch']}; median of {result['repeat']} runs",
             f"{'batch':>6} {'engine ms':>10} {'torch ms':>10} {'engine/torch':>13}"]
    for c in result["cases"]:
        lines.append(f"{c['batch']:>6} {c['engine_ms']:>10.3f} {c.get('torch_ms', float('nan')):>10.3f} "
                     f"{c.get('ratio', float('nan')):>12.2f}x")
    if "profile" in result:
        lines += format_profile(result["profile"], f"batch-{result['cases'][0]['batch']}")
    return "\n".join(lines)


def format_profile(prof: dict, what: str) -> list[str]:
    """The lines of a profile() table: one row per kernel, its calls, time and share."""
    return [f"profile of one {what} pass, a sync after each op ({prof['total_ms']:.3f} ms in all):",
            f"{'op':>24} {'calls':>6} {'ms':>9} {'share':>6}",
            *(f"{r['op']:>24} {r['calls']:>6} {r['ms']:>9.3f} {r['ms'] / prof['total_ms']:>6.0%}"
              for r in prof["ops"])]


def _format_gemm(result: dict) -> str:
    devices = result["devices"]
    lines = [f"float32 GEMM on {', '.join(devices)} ({result['machine']}, NumPy {result['numpy']}); "
             f"median of up to {result['repeat']} runs; GFLOP/s = 2*M*K*N / time",
             f"{'M x K x N':>18} " + " ".join(f"{d + ' ms':>11} {d + ' GFLOP/s':>14}" for d in devices)]
    for c in result["cases"]:
        lines.append(f"{c['m']:>5} x{c['k']:>5} x{c['n']:>5} " +
                     " ".join(f"{c[d]['ms']:>11.3f} {c[d]['gflops']:>14.1f}" for d in devices))
    return "\n".join(lines)


def _format_ops(result: dict) -> str:
    devices = result["devices"]
    fused = [d for d in devices if any("composite_ms" in c[d] for c in result["cases"])]
    lines = [f"float32 ops ({result['machine']}, NumPy {result['numpy']}); median of {result['repeat']} runs; "
             "ms per op; x = numpy / device (above 1: faster than numpy); fused x = the device's composite / "
             "its fused kernel"]
    lines += [f"  {d}: {result['adapters'][d]}" for d in devices if result["adapters"][d] != d]
    lines.append(f"{'op':>14} {'shapes':>34} " + " ".join(f"{d + ' ms':>11}" for d in devices) + " " +
                 " ".join(f"{'x ' + d:>9}" for d in devices[1:]) + "".join(f" {'composite ' + d:>16} {'fused x':>8}"
                                                                       for d in fused))
    for c in result["cases"]:
        shapes = " ".join("x".join(map(str, s)) for s in c["shapes"])
        if len(shapes) > 34:
            shapes = shapes[:31] + "..."
        base = c["numpy"]["ms"]
        line = f"{c['op']:>14} {shapes:>34} " + " ".join(f"{c[d]['ms']:>11.3f}" for d in devices) + " " + \
            " ".join(f"{base / c[d]['ms']:>9.2f}" for d in devices[1:])
        for d in fused:
            composite = c[d].get("composite_ms")
            line += f" {composite:>16.3f} {composite / c[d]['ms']:>8.2f}" if composite else f" {'':>16} {'':>8}"
        lines.append(line)
    return "\n".join(lines)
