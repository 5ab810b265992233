"""Quantized linear benchmark: `F.linear(x, w)` with w in a GGML block format, per backend and type.

For each shape of SmolLM2-135M's projections (in -> out features) and each row count (1: a
decode step, 37: the prefill of a 37-token chat prompt) it reports GB/s of weight bytes
streamed (the blocks of one product / its time) and GFLOP/s (2 * rows * in * out / time), with
the float32 product on the same backend and shape as the reference: `vs_f32` = f32 time / this
type's time, measured in the same run (above 1: faster than float32). Numbers are reported,
never asserted. The CLI (`python -m engine bench qlinear`) and the bench page
(engine.web.worker.bench_qlinear) both call `bench_qlinear`.

`random_blocks` makes valid random blocks of any computable type (random bits, f16 scales
overwritten with finite ones); the tests build their weights with it too.
"""
from __future__ import annotations

import numpy as np

from .. import quants
from ..errors import InputError
from . import machine, time_ms

TYPES = ("q4_0", "q4_1", "q8_0", "q4_k", "q6_k")            # SmolLM2's Q4_1/Q8_0 and the common K types
# (in, out) features of SmolLM2-135M (dim 576, 3 KV heads of 64, FFN 1536, vocabulary 49152)
SHAPES = ((576, 576),        # attn_q, attn_output
          (576, 192),        # attn_k, attn_v
          (576, 1536),       # ffn_gate, ffn_up
          (1536, 576),       # ffn_down
          (576, 49152))      # output head (the tied token embedding)
ROWS = (1, 37)               # decode one token; prefill a 37-token prompt
# --quick and the bench page's default: the layer shapes without the 28M-weight head, short samples
QUICK = {"shapes": ((576, 576), (576, 1536), (1536, 576)), "min_time": 0.05}


def random_blocks(qtype: str, rows: int, cols: int, rng: np.random.Generator | int = 0) -> np.ndarray:
    """Valid random GGML blocks for a (rows, cols) weight of type `qtype`: (rows * row_bytes,) uint8.

    Every quant bit and packed sub-block scale is random; the f16 fields (d, and m / dmin where
    the type has them) are overwritten with finite values of random sign and magnitudes 1e-3 to
    1e-1 (random bits would make some inf or NaN), so every weight is finite."""
    kind = quants.BY_NAME[qtype]
    layout = quants.BLOCKS[qtype]                                # the block's fields
    rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
    if cols % kind.block_size:
        raise InputError(f"{qtype}: cols {cols} is not a multiple of the block size {kind.block_size}")
    n = rows * (cols // kind.block_size)
    blocks = rng.integers(0, 256, (n, kind.type_size), dtype=np.uint8)
    records = blocks.reshape(-1).view(layout)                    # (n,) records, views into `blocks`
    for field, (dtype, _offset) in layout.fields.items():
        if dtype == np.dtype("<f2"):
            magnitude = 10.0 ** rng.uniform(-3, -1, n)
            records[field] = (magnitude * rng.choice([-1.0, 1.0], n)).astype(np.float16)
    return blocks.reshape(-1)


def _figures(x: float) -> float:
    """x to 4 significant figures: a tiny product's GB/s stays above 0, as a fixed number of decimals would not."""
    return float(f"{x:.4g}")


def resolve_devices(devices=None) -> list[str]:
    """None: every backend worth picking here (not a CPU emulation of a GPU); "all" among them:
    every available one; else the names given, in order, each checked."""
    from ..device import auto_selectable, available, get_backend, known
    if not devices:
        return [d for d in known() if auto_selectable(d)]
    names: list[str] = []
    for d in devices:
        names += available() if d == "all" else [d]
    names = list(dict.fromkeys(names))
    for d in names:
        get_backend(d)                           # BackendError: unknown or unavailable, says why
    return names


def bench_qlinear(devices=None, types=TYPES, shapes=SHAPES, rows=ROWS, repeat: int = 20,
                  min_time: float = 0.2, seed: int = 0) -> dict:
    """Time F.linear(x (rows, in), w (out, in)) per device, type (and float32) and shape, same
    inputs on every device. A backend without quantized kernels is listed in "skipped" (its
    float32 products are still timed); a type whose block does not divide a shape's input features
    (the K types' 256 and SmolLM2's 576) is listed in "not_applicable" for that shape; a product that
    raises is listed in "failed" with its error (the bench page then still reports the others)."""
    from ..device import describe, get_backend
    from ..nn import functional as F
    from ..quantized import QuantizedTensor
    from ..tensor import from_numpy

    devices = resolve_devices(devices)
    shapes = [(int(k), int(n)) for k, n in shapes]
    types = list(dict.fromkeys(t.lower() for t in types))
    for t in types:
        if not quants.can_dequantize(t) or not quants.BY_NAME[t].quantized:
            computable = [n for n in quants.DEQUANTIZABLE if quants.BY_NAME[n].quantized]
            raise InputError(f"{t!r} is not a computable quantized type; known: {', '.join(computable)}")
    skipped = {d: "no quantized kernels (backend.quantized_in)" for d in devices
               if getattr(get_backend(d), "quantized_in", None) is None}
    cases, not_applicable, failed = [], [], []
    for cols, out in shapes:
        rng = np.random.default_rng([seed, cols, out])
        xs = {r: rng.standard_normal((r, cols), dtype=np.float32) for r in rows}
        for qtype in ["f32"] + types:
            kind = quants.BY_NAME[qtype]
            if cols % kind.block_size:                    # as llama.cpp, which stores such rows in another type
                not_applicable.append({"type": qtype, "in": cols, "out": out,
                                       "why": f"{cols} is not a multiple of the block size {kind.block_size}"})
                continue
            if qtype == "f32":
                weight = rng.standard_normal((out, cols), dtype=np.float32) * np.float32(0.05)
            else:
                weight = random_blocks(qtype, out, cols, rng)
            nbytes = kind.row_bytes(cols) * out
            for dev in devices:
                if qtype != "f32" and dev in skipped:
                    continue
                try:                                      # a broken kernel is reported; the others still run
                    w = (from_numpy(weight, dev) if qtype == "f32" else
                         QuantizedTensor.from_raw(weight, qtype, (out, cols), dev))
                    for r, x in xs.items():
                        tx = from_numpy(x, dev)
                        ms = time_ms(lambda: F.linear(tx, w), dev, repeat, min_time)
                        cases.append({"device": dev, "type": qtype, "in": cols, "out": out, "rows": r,
                                      "bytes": nbytes, "ms": _figures(ms), "gbps": _figures(nbytes / ms / 1e6),
                                      "gflops": _figures(2 * r * cols * out / ms / 1e6)})
                except Exception as e:                    # noqa: BLE001
                    failed.append({"device": dev, "type": qtype, "in": cols, "out": out,
                                   "error": f"{type(e).__name__}: {e}"})
                w = None
            del weight
    order = {"f32": 0, **{t: i + 1 for i, t in enumerate(types)}}
    cases.sort(key=lambda c: (devices.index(c["device"]), shapes.index((c["in"], c["out"])),
                              list(rows).index(c["rows"]), order[c["type"]]))
    f32_ms = {(c["device"], c["in"], c["out"], c["rows"]): c["ms"] for c in cases if c["type"] == "f32"}
    for c in cases:
        f32 = f32_ms.get((c["device"], c["in"], c["out"], c["rows"]))
        c["vs_f32"] = _figures(f32 / c["ms"]) if f32 is not None else None
    return {"model": "qlinear", "devices": devices, "adapters": {d: describe(d) for d in devices},
            "types": ["f32"] + types, "shapes": [list(s) for s in shapes], "rows": list(rows), "repeat": repeat,
            "min_time": min_time, "machine": machine(), "numpy": np.__version__, "skipped": skipped,
            "not_applicable": not_applicable, "failed": failed, "cases": cases}


def format_qlinear(result: dict) -> str:
    """One line per device, shape, row count and type: ms, GB/s, GFLOP/s, speed-up over f32."""
    lines = [f"quantized linear x (rows, in) @ w (out, in).T ({result['machine']}, NumPy {result['numpy']}); "
             f"median of up to {result['repeat']} samples or {result['min_time']} s; GB/s = weight bytes / time; "
             "vs f32 = f32 time / this time (above 1: faster than the float32 product)"]
    lines += [f"  {d}: {result['adapters'][d]}" for d in result["devices"] if result["adapters"][d] != d]
    lines += [f"  {d}: skipped ({why})" for d, why in result["skipped"].items()]
    lines += [f"  {n['type']} {n['in']} -> {n['out']}: not applicable ({n['why']})" for n in result["not_applicable"]]
    errors: dict = {}
    for f in result["failed"]:                   # one line each (GPU errors span several), the JSON has them whole
        error = " | ".join(line.strip() for line in f["error"].splitlines() if line.strip())
        error = error if len(error) <= 240 else error[:237] + "..."
        errors.setdefault((f["device"], f["type"], error), []).append(f"{f['in']} -> {f['out']}")
    lines += [f"  {d} {t} FAILED on {', '.join(shapes)}: {error}" for (d, t, error), shapes in errors.items()]
    lines.append(f"{'device':>8} {'in -> out':>13} {'rows':>5} {'type':>5} {'bytes':>11} {'ms':>10} "
                 f"{'GB/s':>8} {'GFLOP/s':>8} {'vs f32':>7}")
    previous = None
    for c in result["cases"]:
        group = (c["device"], c["in"], c["out"], c["rows"])
        if previous is not None and group[:3] != previous[:3]:
            lines.append("")
        previous = group
        shape = f"{c['in']} -> {c['out']}"
        lines.append(f"{c['device']:>8} {shape:>13} {c['rows']:>5} {c['type']:>5} {c['bytes']:>11,} "
                     f"{c['ms']:>10.4f} {c['gbps']:>8.2f} {c['gflops']:>8.2f} " +
                     (f"{c['vs_f32']:>6.2f}x" if c["vs_f32"] is not None else f"{'-':>7}"))
    return "\n".join(lines)
