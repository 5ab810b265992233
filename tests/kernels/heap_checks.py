"""Runs inside Pyodide beside the kernel pool (tests/kernels/pool_run.mjs): every export that the
pool runs gives the side module's bits when called through engine.backends.simd.heap (the same
C code, one build flavour: relaxed), on operands that are views, transposes, broadcasts and
overlapping halves of one buffer; weights stay resident; a replayed prepared call and a joined
pair of them give the same bits again. Evaluates to a JSON string {"threads", "reason",
"mismatches": [names], "checks": count, ...}."""
import json
import sys

sys.path.insert(0, "/repo")

import numpy as np

from engine.backends.simd import heap, library
from engine.backends.simd import kernels as K
from engine.backends.simd import quantized as Q
from tests.kernels.reference import random_blocks

local = library.load()
pool = heap.start(KERNEL_BRIDGE)  # noqa: F821 - set by pool_run.mjs
pool.min_work = pool.work_per_byte = 0          # every call of a pooled export goes to the pool
rng = np.random.default_rng(7)
mismatches, checks = [], 0


def same(name, fn, *args, **kwargs):
    """fn(*args, **kwargs) on the side module, then through the pool: the same bits"""
    global checks
    library.use(local)
    expected = fn(*args, **kwargs)
    library.use(pool)
    got = fn(*args, **kwargs)
    checks += 1
    if expected.shape != got.shape or not np.array_equal(expected.view(np.uint32), got.view(np.uint32)):
        mismatches.append(name)


def f32(*shape):
    return rng.standard_normal(shape, dtype=np.float32)


for m, k, n in [(1, 7, 5), (37, 64, 130), (128, 384, 384), (3, 300, 1000)]:
    a, b, bias = f32(m, k), f32(k, n), f32(n)
    same(f"gemm {m}x{k}x{n}", K.gemm, a, b)
    same(f"gemm {m}x{k}x{n} bias gelu, b transposed", K.gemm, a, np.asfortranarray(b), bias, "gelu")
    w = f32(n, k)
    same(f"linear {m}x{k}->{n}", K.linear, a, w, bias)
    same(f"linear f16 {m}x{k}->{n}", K.linear, a, w.astype(np.float16))
x, y = f32(2, 3, 33, 17), f32(1, 3, 17, 9)
same("gemm batched broadcast", K.gemm, x, y)
qkv = f32(2, 40, 3 * 4 * 16)                             # a fused projection: q, k, v overlap in one buffer
q, kk, v = (qkv[..., i * 64:(i + 1) * 64].reshape(2, 40, 4, 16).transpose(0, 2, 1, 3) for i in range(3))
same("attention strided views", K.attention, q, kk, v)
same("attention causal", K.attention, q, kk, v, is_causal=True)
mask = rng.random((2, 1, 40, 40)) > 0.3
same("attention bool mask", K.attention, q, kk, v, mask)
gqa = f32(1, 6, 5, 16), f32(1, 2, 9, 16), f32(1, 2, 9, 8), f32(1, 1, 5, 9)
same("attention float mask, gqa", K.attention, *gqa)
img = f32(2, 8, 19, 23)
for groups, o, kh, stride, pad in [(1, 16, 3, 1, 1), (1, 12, 1, 1, 0), (2, 6, 3, 2, ((0, 1), (1, 0))),
                                   (8, 8, 5, 2, 2), (1, 32, 3, 2, 1)]:
    wc, bc = f32(o, 8 // groups, kh, kh), f32(o)
    same(f"conv2d g{groups} o{o} k{kh} s{stride}", K.conv2d, img, wc, bc, stride, pad, 1, groups, "relu6")
dw, db = f32(8, 1, 3, 3), f32(8)
same("depthwise 3x3 s2", K.depthwise_conv2d, img, dw, db, 2, 1, activation="relu")
for qtype in ("q4_0", "q4_1", "q8_0", "q4_k", "q6_k"):
    rows, cols = 96, 512
    blocks = random_blocks(qtype, rows, cols, rng)
    for m in (1, 5, 37):
        xq = f32(m, cols)
        same(f"linear_q {qtype} m{m}", Q.linear_q, xq, weight=blocks, qtype=qtype, rows=rows, cols=cols)

# weights: copied once, then read where they lie in the heap; a dead weight leaves the heap
library.use(pool)
weight = f32(256, 128)
K.linear(f32(8, 128), weight)
resident = len(pool._entries)
copied = [e for e in pool._entries if e.address]
del weight
evicted = len(pool._entries) == resident - 1

# a prepared call replays the same bits; two joined run in one crossing
a, w1, w2 = f32(16, 64), f32(32, 64), f32(48, 64)
out1, out2 = np.empty((16, 32), np.float32), np.empty((16, 48), np.float32)
library.use(local)
want1, want2 = K.linear(a, w1), K.linear(a, w2)
library.use(pool)
with library.recording() as calls:
    K.linear(a, w1, out=out1)
    K.linear(a, w2, out=out2)
prepared = [fn.prepared(*args) for _, fn, args, _ in calls]
out1[:] = np.nan
out2[:] = np.nan
heap.join(prepared)()
replayed = bool(np.array_equal(out1, want1) and np.array_equal(out2, want2))

# a captured step (engine.graph) replays on the pool (heap_program.py), on one thread on the side module: the same bits
import engine
import engine.nn.functional as F
from engine import graph

w1, w2, b2 = f32(96, 64), f32(40, 96), f32(40)
W1, W2, B2 = (engine.from_numpy(a, "simd") for a in (w1, w2, b2))


def step(x):
    return F.linear(F.gelu(F.linear(x, W1)), W2, B2)


values = [f32(3, 64) for _ in range(3)]
library.use(local)
want = [step(engine.from_numpy(v, "simd")).numpy() for v in values]
library.use(pool)
captured, _ = graph.capture(step, engine.from_numpy(np.zeros((3, 64), np.float32), "simd"))
got = [captured.replay(v).numpy().copy() for v in values]
graph_same = all(np.array_equal(a, b) for a, b in zip(want, got))
pool.set_num_threads(1)                  # the prepared calls run on the side module then
got = [captured.replay(v).numpy().copy() for v in values]
graph_same = graph_same and all(np.array_equal(a, b) for a, b in zip(want, got))
pool.set_num_threads(2)
graph_kinds = [type(c).__name__ for c in captured.calls]     # the whole step as one program on the pool

# a call that fails inside the bridge (its operands placed past the heap's end: the copy in throws)
# is a KernelFault; the kernels go on on the side module, with the same bits
from engine.errors import KernelFault

library.use(local)
want_fault = K.linear(values[0], w1)
library.use(pool)
arena = pool._arena, pool._arena_size
pool._arena, pool._arena_size = pool.heap.end - 256, 1 << 28
try:
    K.linear(values[0], w1)
    fault = None
except KernelFault as e:
    fault = str(e)
pool._arena, pool._arena_size = arena
fault_threads = pool.threads
fault_same = bool(np.array_equal(K.linear(values[0], w1), want_fault))
pool.threads = 2

# a heap that cannot grow (the bridge's RangeError past the memory's maximum): calls and a captured
# step that need more of it run on the side module instead, with the same bits, and say why
def cannot_grow(size):
    raise RangeError_("cannot grow the kernels' memory by %d bytes" % size)


class RangeError_(Exception):
    pass


free, grow = pool.heap.free, pool.heap._grow
pool.heap.free, pool.heap._grow = [], cannot_grow
w3, x3 = f32(128, 96), f32(5, 96)
library.use(local)
want_full = K.linear(x3, w3)
want_step = step(engine.from_numpy(values[1], "simd")).numpy()
library.use(pool)
got_full = K.linear(x3, w3)                        # a new weight: no room to place it
full_message = pool.memory_full
full_graph, _ = graph.capture(step, engine.from_numpy(np.zeros((3, 64), np.float32), "simd"))
pool.memory_full = None
got_step = full_graph.replay(values[1]).numpy().copy()
full_step_message = pool.memory_full
pool.heap.free, pool.heap._grow = free, grow
full_same = bool(np.array_equal(got_full, want_full) and np.array_equal(got_step, want_step))

json.dumps({"full_same": full_same, "full_message": full_message, "full_step_message": full_step_message,
            "fault": fault, "fault_threads": fault_threads, "fault_same": fault_same,
            "graph_same": graph_same, "graph_kinds": graph_kinds, "threads": pool.threads, "reason": POOL_REASON, "mismatches": mismatches, "checks": checks,  # noqa: F821
            "resident_copied": len(copied), "evicted": evicted, "replayed": replayed,
            "heap_end": pool.heap.end})
