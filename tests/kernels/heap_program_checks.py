"""Runs inside Pyodide beside the kernel pool (tests/kernels/pool_run.mjs): a tiny random llama's
decode steps, captured on the pool, replay as one PoolProgram (engine/backends/simd/heap_program.py)
and give the side module's eager bits: greedy ids and logits, through a prefix reused by a second
prompt (an eager prefill writes the cache the program's mirror holds), a switch to one thread and
back, and a cache that grows (its graphs and mirrors dropped). Evaluates to a JSON string."""
import json
import sys

sys.path.insert(0, "/repo")

import numpy as np

import engine
from engine.backends.simd import heap, heap_program, library
from engine.generation import GenerationConfig, Generator
from models import llama

local = library.load()
pool = heap.start(KERNEL_BRIDGE)  # noqa: F821 - set by pool_run.mjs
rng = np.random.default_rng(11)
config = llama.Config(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
model = llama.DecoderForCausalLM(config).to(device="simd")
model.load_state_dict({name: engine.from_numpy(0.2 * rng.standard_normal(p.shape).astype(np.float32), "simd")
                       for name, p in model.named_parameters()})
first, more = [1, 17, 40, 99, 3], [7, 8, 9]
greedy = GenerationConfig(max_new_tokens=12)


def conversation(first_rows=64):
    """Two turns, the second extending the first; its ids, and the logits of one more step."""
    gen = Generator(model, None, 128, set())
    gen.first_rows = first_rows
    gen.bind(model)
    ids = list(gen.tokens(first, greedy))
    ids += list(gen.tokens(first + ids + more, greedy))
    return gen, ids, gen._forward([ids[-1]]).copy()


library.use(local)
_, want_ids, want_logits = conversation()
library.use(pool)
gen, ids, logits = conversation()
step = next(iter(gen.steps.graphs.values()))
kinds = [type(c).__name__ for c in step.calls]
same = ids == want_ids and bool(np.array_equal(logits, want_logits))
program = step.calls[0]
segments = ["pool" if seg.host is None else "host" for seg in getattr(program, "_segments", [])]

pool.set_num_threads(1)                  # the same calls on the side module, the mirrors marked
gen1, ids1, logits1 = conversation()
pool.set_num_threads(2)
one_thread_same = ids1 == want_ids and bool(np.array_equal(logits1, want_logits))
more_ids = list(gen1.tokens(first + ids1 + more + [5], greedy))   # on the pool again, over rows written on one thread
library.use(local)
gen_local = Generator(model, None, 128, set(), use_graphs=False)
expected_more = list(gen_local.tokens(first + ids1 + more + [5], greedy))
library.use(pool)
switched_same = more_ids == expected_more

grown, grown_ids, grown_logits = conversation(first_rows=8)   # 8 -> 16 -> 32 -> 64 rows, graphs dropped on each
library.use(local)
_, want_grown_ids, want_grown_logits = conversation(first_rows=8)
library.use(pool)
grown_same = grown_ids == want_grown_ids and bool(np.array_equal(grown_logits, want_grown_logits))
# a pipeline's whole pass (engine.graph.Passes): captured per shape on the pool, the eager bits
digits = await engine.pipeline_async("digit-classification", device="simd",  # noqa: F704 - top-level await
                                     weights="/repo/models/mnist_cnn.safetensors")
images = rng.random((3, 1, 28, 28), dtype=np.float32)
library.use(local)
want_digits = [digits.forward(images[i:i + 1]) for i in range(3)]
library.use(pool)
got_digits = [digits.forward(images[i:i + 1]) for i in range(3)]
pass_kinds = [type(c).__name__ for g in digits._passes.graphs.values() for c in g.calls]
pass_same = all(np.array_equal(a, b) for a, b in zip(want_digits, got_digits))

caches = {id(heap_program._root(t._buf)) for g in (gen, gen1, grown) for t in g.cache.key + g.cache.value}
mirrored_caches = len(caches & set(pool._mirrors))
del gen, gen1, grown, step, program
import gc  # noqa: E402

gc.collect()
json.dumps({"kinds": kinds, "segments": segments, "same": same, "one_thread_same": one_thread_same,
            "switched_same": switched_same, "pass_kinds": pass_kinds, "pass_same": pass_same, "grown_same": grown_same,
            "mirrored_caches": mirrored_caches, "mirrors_left": len(caches & set(pool._mirrors)),
            "threads": pool.threads, "unplaced": pool.unplaced, "ids": ids, "want_ids": want_ids})
