"""`python -m engine bench gemm|ops`: float32 matmul GFLOP/s and single ops on each backend, beside
numpy (the reference) in the same run. Numbers are reported, never asserted.
"""
from __future__ import annotations

import time

import numpy as np

from . import machine, median_ms


GEMM_SHAPES = ((128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (128, 384, 1536))


def bench_gemm(repeat: int = 20, device: str | None = None, shapes=None) -> dict:
    """float32 matmul (M x K) @ (K x N) through the engine on `device` and on numpy (the
    reference) in the same run; GFLOP/s = 2 M K N / median time. device=None: every available one."""
    from ..device import available, describe, synchronize
    from ..tensor import from_numpy

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
            ms = median_ms(lambda: (ta @ tb, synchronize(name)), runs)
            case[name] = {"ms": round(ms, 4), "gflops": round(2 * m * k * n / ms / 1e6, 2)}
        cases.append(case)
    return {"model": "gemm", "devices": devices, "adapters": {d: describe(d) for d in devices}, "repeat": repeat,
            "machine": machine(), "numpy": np.__version__, "cases": cases}


# (name, inputs, the op, the fused kernels it may use[, the same in NumPy itself]): inputs are
# shapes of float32 normal values, or arrays; the kernels a CNN and a transformer spend their time
# in, at the sizes they see (the transformer ones: all-MiniLM-L6-v2, hidden 384, 12 heads of 32,
# FFN 1536, 128 tokens), then two ops so small that their time is the engine's own per-op cost
# (dispatch, promotion, checks), timed beside NumPy's own expression on the same arrays.
def _op_cases():
    from ..nn import functional as F
    lengths = np.array([128, 100, 77, 128, 64, 128, 90, 111])           # a padded batch of 8 sequences
    padding = (np.arange(128) < lengths[:, None]).reshape(8, 1, 1, 128)  # (N, 1, 1, S), True = attend

    def attention(x, mask):                          # q, k, v: BERT's strided head views of one projection
        q, k, v = (x[..., i * 384:(i + 1) * 384].reshape(8, 128, 12, 32).transpose(1, 2) for i in range(3))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return [
        ("matmul", [(512, 512), (512, 512)], lambda a, b: a @ b, (), lambda a, b: a @ b),
        ("linear", [(128, 384), (1536, 384), (1536,)], F.linear, (), lambda x, w, b: x @ w.T + b),
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
        ("sum", [(128, 1536)], lambda x: x.sum(-1), (), lambda x: x.sum(-1)),
        ("add", [(4,), (4,)], lambda a, b: a + b, (), lambda a, b: a + b),                  # per-op overhead
        ("add scalar", [(4,)], lambda a: a + 0.5, (), lambda a: a + np.float32(0.5)),
        ("linear", [(1, 64), (64, 64)], F.linear, (), lambda x, w: x @ w.T),
    ]


def bench_ops(repeat: int = 20, device: str | None = None, inner: int = 10) -> dict:
    """Per-op time on `device` and numpy (device=None: every available one), same run: each
    sample runs the op `inner` times and then waits for the device, so a GPU's per-op time
    is its throughput, not one submission's round trip (ops slower than 20 ms run fewer times).
    Where a device has a fused kernel for the op, the composite is timed too, with that kernel
    taken out of the backend's table ("composite_ms"); where the op is one NumPy expression,
    that expression on the same arrays is timed too ("numpy_itself_ms": the engine's overhead
    is numpy's time over it)."""
    from ..device import available, describe, get_backend
    from ..tensor import from_numpy

    devices = list(dict.fromkeys(["numpy"] + ([device] if device else available())))
    rng = np.random.default_rng(0)
    cases = []
    for name, inputs, op, kernels, *itself in _op_cases():
        arrays = [a if isinstance(a, np.ndarray) else rng.standard_normal(a, dtype=np.float32) for a in inputs]
        case = {"op": name, "shapes": [list(np.shape(a)) for a in arrays]}
        if itself:
            case["numpy_itself_ms"] = _op_ms(lambda: itself[0](*arrays), "numpy", repeat, inner)
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
            "machine": machine(), "numpy": np.__version__, "cases": cases}


def _op_ms(fn, device: str, repeat: int, inner: int) -> float:
    """Median ms per call of fn, `inner` calls per sample then a device sync; after a timed
    warm-up, slow ops get fewer calls per sample and fewer samples, and ops of a few
    microseconds more calls per sample (up to 2,000)."""
    from ..device import synchronize

    t0 = time.perf_counter()
    fn()
    synchronize(device)
    once = time.perf_counter() - t0
    if once > 0.02:
        inner, repeat = 1, max(1, min(repeat, int(1.0 / once)))
    elif once < 2e-4:               # a few-us op: enough calls a sample that a 5-100 us browser timer resolves it
        inner = max(inner, min(2000, int(2e-3 / max(once, 1e-6))))

    def run():
        for _ in range(inner):
            fn()
        synchronize(device)
    return round(median_ms(run, repeat) / inner, 5)          # 10 ns: the small ops take a few us


def format_gemm(result: dict) -> str:
    """The table of a bench_gemm result: per shape, ms and GFLOP/s on each device."""
    devices = result["devices"]
    lines = [f"float32 GEMM on {', '.join(devices)} ({result['machine']}, NumPy {result['numpy']}); "
             f"median of up to {result['repeat']} runs; GFLOP/s = 2*M*K*N / time",
             f"{'M x K x N':>18} " + " ".join(f"{d + ' ms':>11} {d + ' GFLOP/s':>14}" for d in devices)]
    for c in result["cases"]:
        lines.append(f"{c['m']:>5} x{c['k']:>5} x{c['n']:>5} " +
                     " ".join(f"{c[d]['ms']:>11.3f} {c[d]['gflops']:>14.1f}" for d in devices))
    return "\n".join(lines)


def format_ops(result: dict) -> str:
    """The table of a bench_ops result: per op, ms on each device, numpy's time over each device's,
    and where a device has a fused kernel, its composite's time over the kernel's; last, NumPy's
    own expression for the op, where it is one."""
    devices = result["devices"]
    fused = [d for d in devices if any("composite_ms" in c[d] for c in result["cases"])]
    lines = [f"float32 ops ({result['machine']}, NumPy {result['numpy']}); median of {result['repeat']} runs; "
             "ms per op; x = numpy / device (above 1: faster than numpy); fused x = the device's composite / "
             "its fused kernel; numpy itself = the op as one NumPy expression, no engine"]
    lines += [f"  {d}: {result['adapters'][d]}" for d in devices if result["adapters"][d] != d]
    lines.append(f"{'op':>14} {'shapes':>34} " + " ".join(f"{d + ' ms':>11}" for d in devices) + " " +
                 " ".join(f"{'x ' + d:>9}" for d in devices[1:]) + "".join(f" {'composite ' + d:>16} {'fused x':>8}"
                                                                       for d in fused) +
                 f" {'numpy itself ms':>16}")
    for c in result["cases"]:
        shapes = " ".join("x".join(map(str, s)) for s in c["shapes"])
        if len(shapes) > 34:
            shapes = shapes[:31] + "..."
        base = c["numpy"]["ms"]
        line = f"{c['op']:>14} {shapes:>34} " + " ".join(f"{c[d]['ms']:>11.4f}" for d in devices) + " " + \
            " ".join(f"{base / c[d]['ms']:>9.2f}" for d in devices[1:])
        for d in fused:
            composite = c[d].get("composite_ms")
            line += f" {composite:>16.3f} {composite / c[d]['ms']:>8.2f}" if composite else f" {'':>16} {'':>8}"
        itself = c.get("numpy_itself_ms")
        line += f" {itself:>16.4f}" if itself is not None else f" {'':>16}"
        lines.append(line)
    return "\n".join(lines)
