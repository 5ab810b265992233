"""The quantized tiled product (qmatmul.wgsl, more than 4 rows of x) against the float32 tiled GEMM
(tiles.wgsl) of the same shape, in one run on the webgpu backend: for each shape, row count and
type, N calls of F.linear recorded and submitted, then one wait; the best of a few such samples,
the types taken in turn within each sample.
Prints ms per call and `vs f32` = float32's time / this type's time (1 or above: at least as fast
as float32). On lavapipe (a CPU emulation of a GPU) this is a proxy only: the relative cost of
arithmetic and memory holds roughly, the workgroup counts a real GPU needs do not; and there the
quantized product takes its own tile for a software adapter (quantized._matmul_tiling), while on
a GPU it takes the float32 product's.

    python scripts/qmatmul_bench.py                          # the default shapes, rows and types
    python scripts/qmatmul_bench.py --rows 37 --shapes 1536x576 --types q4_k,q8_0 --calls 3
    python scripts/qmatmul_bench.py --json out.json          # also the numbers as JSON

Shapes are in x out features: SmolLM2-135M's 576->1536, 1536->576, 576->49152 and Qwen2.5-0.5B's
896->4864 and 4864->896. A type whose block does not divide the input features (the K-quants'
256 and 576 or 896) is skipped for that shape, as llama.cpp stores such rows in another type.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine                                                      # noqa: E402
import engine.nn.functional as F                                   # noqa: E402
from engine import quants                                          # noqa: E402
from engine.bench.quant import random_blocks                       # noqa: E402
from engine.device import describe, synchronize                    # noqa: E402
from engine.quantized import QuantizedTensor                       # noqa: E402

TYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k")
SHAPES = ((576, 1536), (1536, 576), (576, 49152), (896, 4864), (4864, 896))
ROWS = (37, 128)


def best_ms(fns: dict, calls: int, samples: int) -> dict:
    """name -> best ms per call over `samples` samples of `calls` calls and one wait, the names
    taken in turn within each sample (so a machine's load drifts over all of them alike)."""
    for fn in fns.values():                     # warm-up: pipelines compiled, buffers pooled
        fn()
    synchronize("webgpu")
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(samples):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            synchronize("webgpu")
            best[name] = min(best[name], (time.perf_counter() - t0) / calls * 1e3)
    return best


def bench(shapes, rows, types, calls: int = 3, samples: int = 3, variants=None, out=print) -> list[dict]:
    """The cases, one per shape, row count and type ("f32" first; vs_f32 = its time / this one's).
    `variants`: extra name -> (qtype, fn(x, w)) products timed beside them (another kernel)."""
    cases = []
    for cols, n_out in shapes:
        rng = np.random.default_rng([cols, n_out])
        xs = {r: engine.from_numpy(rng.standard_normal((r, cols), dtype=np.float32), "webgpu") for r in rows}
        weights = {"f32": engine.from_numpy(rng.standard_normal((n_out, cols), dtype=np.float32) * np.float32(0.05),
                                            "webgpu")}
        for qtype in types:
            if cols % quants.BY_NAME[qtype].block_size == 0:
                weights[qtype] = QuantizedTensor.from_raw(random_blocks(qtype, n_out, cols, rng), qtype,
                                                          (n_out, cols), "webgpu")
        products = {name: (name, F.linear) for name in weights}
        products.update({name: (qtype, fn) for name, (qtype, fn) in (variants or {}).items() if qtype in weights})
        for r in rows:
            fns = {name: (lambda fn=fn, w=weights[qtype], x=xs[r]: fn(x, w)) for name, (qtype, fn) in products.items()}
            ms = best_ms(fns, calls, samples)
            for name in fns:
                case = {"in": cols, "out": n_out, "rows": r, "type": name, "ms": ms[name],
                        "vs_f32": ms["f32"] / ms[name]}
                cases.append(case)
                out(f"{f'{cols} -> {n_out}':>13} {r:>5} {name:>8} {case['ms']:>10.2f} {case['vs_f32']:>6.2f}x")
            out("")
    return cases


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--shapes", default=",".join(f"{k}x{n}" for k, n in SHAPES), help="INxOUT,...")
    ap.add_argument("--rows", default=",".join(map(str, ROWS)))
    ap.add_argument("--calls", type=int, default=3, help="calls per sample (one wait after them)")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--json", help="write the cases here too")
    args = ap.parse_args(argv)
    types = [t for t in args.types.split(",") if t]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
    rows = [int(r) for r in args.rows.split(",") if r]
    print(f"webgpu: {describe('webgpu')}; best of {args.samples} samples of {args.calls} calls + one wait, "
          "the types in turn within each sample")
    print(f"{'in -> out':>13} {'rows':>5} {'type':>8} {'ms':>10} {'vs f32':>7}", flush=True)
    cases = bench(shapes, rows, types, args.calls, args.samples, out=lambda line: print(line, flush=True))
    if args.json:
        Path(args.json).write_text(json.dumps({"adapter": describe("webgpu"), "cases": cases}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
