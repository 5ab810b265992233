"""The simd backend on the kernel pool as a page runs it, at several thread counts, under Node.js:
Pyodide with the relaxed side module, web/kernel-pool.js on the threaded build, connected through
web/kernel-bridge.js (tests/kernels/pool_run.mjs). For thread curves on machines with more cores
than a CI runner, and for the memory a model takes on both heaps. From the repository root, after
`python build.py`:

    node --experimental-wasm-relaxed-simd tests/kernels/pool_run.mjs dist/pyodide . \\
        dist/kernels/engine_kernels.relaxed.wasm dist/kernels/engine_kernels.threads.wasm 8 \\
        scripts/pool_bench.py CASE:1,2,4,8

CASE: effnet (EfficientNet-Lite0 b1), minilm (8 x 128 tokens), yolo (YOLOv10n at 640), or a text
model of the site (SmolLM2-135M-Instruct, Qwen2.5-Coder-1.5B-Instruct, ...: a 200-token prompt,
64 new tokens, prefill and decode tok/s). The pool starts with the largest count (the 8 above);
each count is set with engine.set_num_threads, after one untimed run, in two interleaved rounds
(vision and MiniLM: the best of each round's runs).
Prints JSON: per count the times, whether the outputs equal the 1-thread ones bit for bit, and
both heaps' sizes (Pyodide's and the pool's) after the model ran."""
import json
import sys
import time

sys.path.insert(0, "/repo")                        # the repository, as pool_run.mjs mounts it

import numpy as np
import pyodide_js

import engine
from engine.backends.simd import heap, library

pool = heap.start(KERNEL_BRIDGE)  # noqa: F821 - set by pool_run.mjs
library.use(pool)
engine.threads.register(pool)                     # engine.set_num_threads, as the page's worker does
case, _, counts = SCRIPT_ARG.partition(":")  # noqa: F821
counts = [int(n) for n in (counts or "1,2").split(",")]
rng = np.random.default_rng(0)
pyodide_start, pool_start = pyodide_js._module.HEAP8.length, pool.heap.end
VISION = {"effnet": ("image-classification", "efficientnet_lite0", 224),
          "yolo": ("object-detection", "yolov10n", 640)}


def best_ms(fn, runs=4):
    times, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return round(min(times[1:]) * 1e3, 2), out


if case in VISION:
    task, folder, size = VISION[case]
    pipe = await engine.pipeline_async(task, weights=f"/repo/dist/models/{folder}", device="simd")  # noqa: F704
    x = rng.random((1, 3, size, size), dtype=np.float32)
    run = lambda: best_ms(lambda: pipe.forward(x))                                               # noqa: E731
elif case == "minilm":
    pipe = await engine.pipeline_async("sentence-embedding", weights="/repo/dist/models/all-MiniLM-L6-v2",  # noqa: F704
                                       device="simd")
    words = "the quick brown fox jumps over the lazy dog while the cats split their rows".split()
    texts = [" ".join(rng.choice(words, 126)) for _ in range(8)]              # 128 tokens each
    run = lambda: best_ms(lambda: pipe(texts), runs=3)                                           # noqa: E731
else:
    pipe = await engine.pipeline_async("text-generation", weights=f"/repo/dist/models/{case}", device="simd")  # noqa: F704
    from engine.bench.llm import TEXT_PROMPT
    from engine.generation import GenerationConfig, Generator
    prompt = pipe.tokenizer.encode(TEXT_PROMPT).ids[:200]
    generator = Generator(pipe.model, None, 512, set())                        # no end of sequence

    def run():
        generator.reset()
        ids = list(generator.tokens(prompt, GenerationConfig(max_new_tokens=64)))
        stats = generator.stats
        return (round(stats["prefill_tok_s"], 2), round(stats["decode_tok_s"], 2)), np.array(ids)

run()                                               # untimed: loads, captures (engine.graph)
result, first = {"case": case, "started": pool.threads, "reason": POOL_REASON, "rounds": {}}, {}  # noqa: F821
for _ in range(2):
    for n in counts:
        engine.set_num_threads(n)
        timing, out = run()
        result["rounds"].setdefault(n, []).append(timing)
        first.setdefault(n, np.asarray(out))
result["same_bits"] = {n: bool(np.array_equal(first[n], first[counts[0]])) for n in counts}
result["pyodide_heap_mb"] = round((pyodide_js._module.HEAP8.length - pyodide_start) / 2**20, 1)
result["pool_heap_mb"] = round((pool.heap.end - pool_start) / 2**20, 1)
json.dumps(result)
