"""Every webgpu shader, through the engine's ops, against the numpy backend: odd shapes, strided,
transposed and broadcast views, NaN, every output buffer poisoned with NaN before it is used.

Written once, run twice: natively under pytest (test_shader_checks.py, on lavapipe or a real
GPU) and in the page's worker in Chromium (tests/web/test_webgpu.py, on SwiftShader), where
`run()` is the last expression of the source given to window.engine.run. It needs only the
engine and NumPy. The result: {"adapter": ..., "errors": {check: worst error / tolerance}};
a check passes when its value is at most 1.
"""
import math

import numpy as np

import engine
import engine.nn.functional as F

RTOL = 1e-5                  # float32 against float32 computed in another order


def worst(actual, expected, atol, rtol=RTOL) -> float:
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if a.shape != e.shape:
        return float("inf")
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    if (nan_a != nan_e).any():
        return float("inf")
    with np.errstate(all="ignore"):
        exact = (a == e) | nan_e                     # infinities, NaN where NaN is expected
        error = np.where(exact, 0.0, np.abs(a - e) / (atol + rtol * np.abs(e)))
    return float(np.nan_to_num(error, nan=np.inf).max(initial=0.0))


def poison(gpu) -> None:
    """Fill pooled buffers of every size class up to 16 MB with NaN, then free them: outputs
    allocated next reuse them, so a shader that skips an element shows NaN."""
    for shift in range(8, 25):
        bufs = [gpu.upload(np.full((1 << shift) // 4, np.nan, np.float32)) for _ in range(3)]
        del bufs


def pair(a: np.ndarray):
    """The same values on webgpu and on numpy."""
    return engine.from_numpy(a, "webgpu"), engine.from_numpy(a, "numpy")


def check(errors, name, fn, *arrays, atol=1e-6, rtol=RTOL):
    """fn on webgpu tensors vs fn on numpy tensors."""
    gpu_args, cpu_args = zip(*[pair(a) for a in arrays]) if arrays else ((), ())
    got, want = fn(*gpu_args), fn(*cpu_args)
    if isinstance(want, (tuple, list)):
        errors[name] = max(worst(g.numpy(), w.numpy(), atol, rtol) for g, w in zip(got, want))
    else:
        errors[name] = worst(got.numpy(), want.numpy(), atol, rtol)


def matmul_checks(rng, errors):
    for m, k, n in [(1, 1, 1), (1, 7, 1), (7, 13, 5), (65, 33, 129), (64, 16, 64), (3, 100, 2), (130, 17, 67),
                    (1, 1280, 1000), (97, 101, 89)]:
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        check(errors, f"matmul {m}x{k}x{n}", lambda x, y: x @ y, a, b, atol=1e-5 * math.sqrt(k))
        check(errors, f"matmul {m}x{k}x{n} transposed", lambda x, y: x @ y.T.contiguous().T, a, b,
              atol=1e-5 * math.sqrt(k))
    a, b = rng.standard_normal((2, 1, 5, 6), dtype=np.float32), rng.standard_normal((1, 3, 6, 7), dtype=np.float32)
    check(errors, "matmul batched broadcast", lambda x, y: x @ y, a, b, atol=1e-5)
    x, w, bias = (rng.standard_normal(s, dtype=np.float32) for s in ((3, 4, 37), (70, 37), (70,)))
    check(errors, "linear bias 3d input", F.linear, x, w, bias, atol=1e-5)
    check(errors, "linear on a sliced input", lambda x, w, b: F.linear(x[:, 1:, :], w, b), x, w, bias, atol=1e-5)
    ints = rng.integers(-50, 50, (9, 11)).astype(np.int32), rng.integers(-50, 50, (11, 6)).astype(np.int32)
    check(errors, "matmul int32", lambda x, y: x @ y, *ints, atol=0, rtol=0)


def conv_checks(rng, errors):
    for n, c, h, w, o, k, stride, padding, dilation, groups, act in [
            (2, 3, 9, 11, 6, 3, 2, 1, 1, 1, "relu"), (1, 4, 7, 7, 8, 1, 1, 0, 1, 1, "none"),
            (3, 6, 8, 10, 4, (3, 2), (2, 1), ((1, 1), (2, 2)), (1, 2), 2, "relu6"),
            (1, 8, 13, 13, 8, 3, 1, 1, 1, 8, "relu6"), (2, 5, 16, 12, 5, 5, 2, ((1, 2), (1, 2)), 1, 5, "none"),
            (1, 7, 23, 29, 7, 3, 2, ((0, 1), (0, 1)), 1, 7, "silu"), (1, 96, 17, 17, 96, 5, 1, 2, 1, 96, "relu6"),
            (2, 16, 15, 15, 70, 3, 1, 1, 1, 1, "gelu"), (1, 3, 35, 35, 32, 3, 2, ((0, 1), (0, 1)), 1, 1, "relu6"),
            (1, 12, 11, 13, 12, 5, 1, 2, 1, 12, "hardswish"), (2, 8, 9, 9, 20, 1, 1, 0, 1, 1, "hardswish")]:
        kh, kw = (k, k) if isinstance(k, int) else k
        x = rng.standard_normal((n, c, h, w), dtype=np.float32)
        wt = (rng.standard_normal((o, c // groups, kh, kw)) / np.sqrt(kh * kw * c / groups)).astype(np.float32)
        bias = rng.standard_normal(o, dtype=np.float32)
        check(errors, f"conv2d {(c, o, k, stride, groups, act)}",
              lambda x, w, b: F.conv2d_act(x, w, b, stride, padding, dilation, groups, act), x, wt, bias, atol=1e-5)
    x = rng.standard_normal((2, 6, 9, 9), dtype=np.float32)
    wt = rng.standard_normal((4, 6, 3, 3), dtype=np.float32)
    check(errors, "conv2d of a permuted (non-contiguous) input",
          lambda x, w: F.conv2d(x.permute(0, 1, 3, 2), w, padding="same"), x, wt, atol=1e-5)


def tile_checks(rng, errors):
    """Every tile configuration of the GEMM/conv shader (the device picks one by size), with
    scalar loads (odd sizes) and vec4 loads (sizes and offsets multiples of 4)."""
    from engine.backends.webgpu import kernels as K
    for tiles in K.TILES:
        K.FORCE_TILES = tiles
        try:
            for m, k, n in [(1, 5, 3), (37, 19, 70), (130, 33, 129), (36, 20, 68), (5, 64, 12)]:
                a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
                check(errors, f"tiles {tiles} matmul {m}x{k}x{n}", lambda x, y: x @ y, a, b, atol=1e-5)
                check(errors, f"tiles {tiles} matmul {m}x{k}x{n} b transposed",
                      lambda x, y: x @ y.T.contiguous().T, a, b, atol=1e-5)
                check(errors, f"tiles {tiles} matmul {m}x{k}x{n} a transposed",
                      lambda x, y: x.T.contiguous().T @ y, a, b, atol=1e-5)
            a = rng.standard_normal((36, 21), dtype=np.float32)           # rows 16-byte aligned, start not
            b = rng.standard_normal((20, 68), dtype=np.float32)
            check(errors, f"tiles {tiles} matmul of a sliced a", lambda x, y: x[:, 1:] @ y, a, b, atol=1e-5)
            x = rng.standard_normal((2, 6, 11, 9), dtype=np.float32)
            w = rng.standard_normal((8, 3, 3, 3), dtype=np.float32)
            check(errors, f"tiles {tiles} conv2d groups 2",
                  lambda x, w: F.conv2d_act(x, w, None, 2, 1, 1, 2, "relu"), x, w, atol=1e-5)
            w = rng.standard_normal((12, 6, 2, 2), dtype=np.float32)           # 24 taps: vec4 weight loads
            check(errors, f"tiles {tiles} conv2d 2x2", lambda x, w: F.conv2d(x, w, padding=1), x, w, atol=1e-5)
        finally:
            K.FORCE_TILES = None


def pool_checks(rng, errors):
    x = rng.standard_normal((2, 5, 13, 11), dtype=np.float32)
    x[0, 1, 2, 3] = np.nan
    check(errors, "max_pool2d 3/2 pad 1", lambda t: F.max_pool2d(t, 3, 2, 1), x)
    check(errors, "max_pool2d ceil_mode", lambda t: F.max_pool2d(t, 2, ceil_mode=True), x)
    check(errors, "avg_pool2d 3/2 pad 1", lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=False), x)
    check(errors, "adaptive_avg_pool2d 1", lambda t: F.adaptive_avg_pool2d(t, 1), x)
    check(errors, "adaptive_avg_pool2d (4, 3)", lambda t: F.adaptive_avg_pool2d(t, (4, 3)), x)


def elementwise_checks(rng, errors):
    x = rng.standard_normal((4, 1, 6), dtype=np.float32)
    y = rng.standard_normal((6, 5), dtype=np.float32)
    y[1, 2], x[0, 0, 3] = np.nan, 0.0
    binary = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
              "div": lambda a, b: a / b, "pow": lambda a, b: a.abs() ** b, "maximum": engine.maximum,
              "minimum": engine.minimum, "eq": lambda a, b: a == b, "lt": lambda a, b: a < b,
              "ge": lambda a, b: a >= b, "where": lambda a, b: engine.where(a > 0, a, b)}
    for name, fn in binary.items():                  # (4, 1, 6) with a transposed (5, 6): broadcast, strided
        check(errors, f"{name} broadcast strided", lambda a, b: fn(a, b.T), x, y)
    z = np.concatenate([rng.standard_normal(300, dtype=np.float32) * 4, [np.nan, np.inf, -np.inf, 0.0, -0.0]])
    z = z.astype(np.float32)
    unary = {"exp": engine.exp, "log": lambda t: engine.log(t.abs()), "sqrt": lambda t: engine.sqrt(t.abs()),
             "sin": engine.sin, "cos": engine.cos, "tanh": engine.tanh, "erf": engine.erf,
             "reciprocal": engine.reciprocal, "floor": engine.floor, "ceil": engine.ceil, "abs": engine.abs,
             "neg": lambda t: -t, "relu": F.relu, "relu6": F.relu6, "sigmoid": engine.sigmoid, "silu": F.silu,
             "gelu": F.gelu, "gelu tanh": lambda t: F.gelu(t, approximate="tanh")}
    for name, fn in unary.items():
        check(errors, f"unary {name}", fn, z, atol=2e-6, rtol=4e-6)
    check(errors, "float16 round trip", lambda t: t.to(engine.float16).to(engine.float32), z * 1000)
    check(errors, "bfloat16 round trip", lambda t: t.to(engine.bfloat16).to(engine.float32), z * 1000)
    ints = rng.integers(-100, 100, (7, 9)).astype(np.int64)
    check(errors, "int64 arithmetic", lambda a: (a * 3 - 7) * a.abs() - engine.maximum(a, a * 0), ints, atol=0, rtol=0)
    check(errors, "int to float cast", lambda a: a.to(engine.float32) / 3, ints)
    check(errors, "uint8 wrap", lambda a: (a.to(engine.uint8) + 200).to(engine.int64), ints, atol=0, rtol=0)


def reduction_checks(rng, errors):
    x = rng.standard_normal((3, 7, 5, 11), dtype=np.float32)
    for dims in [(1,), (3,), (0, 2), (1, 2, 3), None]:
        for name, fn in {"sum": engine.sum, "mean": engine.mean, "amax": engine.amax, "amin": engine.amin}.items():
            check(errors, f"{name} over {dims}", lambda t: fn(t, dims) if dims else fn(t), x, atol=1e-5)
    for n in (1, 5, 9, 60, 100, 240, 1000):          # every split of a reduction between threads
        y = rng.standard_normal((7, n), dtype=np.float32)
        check(errors, f"sum of {n}", lambda t: t.sum(-1), y, atol=1e-5)
        check(errors, f"argmax of {n}", lambda t: t.argmax(-1), y, atol=0, rtol=0)
    check(errors, "sum keepdim of a transposed view", lambda t: t.transpose(1, 3).sum(2, keepdim=True), x, atol=1e-5)
    check(errors, "argmax dim 1", lambda t: t.argmax(1), x, atol=0, rtol=0)
    check(errors, "argmin flat", lambda t: t.argmin(), x, atol=0, rtol=0)
    check(errors, "max values, indices", lambda t: tuple(engine.max(t, 2)), x, atol=0, rtol=0)
    check(errors, "topk 4 largest", lambda t: tuple(engine.topk(t, 4, dim=1)), x, atol=0, rtol=0)
    check(errors, "topk 3 smallest last dim", lambda t: tuple(engine.topk(t, 3, largest=False)), x, atol=0, rtol=0)


def rowwise_checks(rng, errors):
    x = rng.standard_normal((3, 5, 37), dtype=np.float32) * 3
    check(errors, "softmax last dim", lambda t: F.softmax(t, -1), x)
    check(errors, "softmax middle dim", lambda t: F.softmax(t, 1), x)
    check(errors, "log_softmax", lambda t: F.log_softmax(t, -1), x, atol=1e-5)
    w, b = rng.standard_normal(37, dtype=np.float32), rng.standard_normal(37, dtype=np.float32)
    check(errors, "layer_norm", lambda t, w, b: F.layer_norm(t, (37,), w, b, 1e-5), x, w, b, atol=1e-5)
    check(errors, "layer_norm no affine", lambda t: F.layer_norm(t, (5, 37)), x, atol=1e-5)
    check(errors, "rms_norm", lambda t, w: F.rms_norm(t, (37,), w, 1e-6), x, w, atol=1e-5)
    q, k, v = (rng.standard_normal((2, 3, 9, 16), dtype=np.float32) for _ in range(3))
    check(errors, "attention causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
          q, k, v, atol=1e-5)


def transformer_checks(rng, errors):
    """The fused kernels of a transformer encoder (gelu, attention, add + layer norm) against the
    numpy backend's composites: odd shapes, strided views, masks, rows with no key (NaN)."""
    x = rng.standard_normal((7, 33), dtype=np.float32) * 4
    check(errors, "gelu of a transposed view", lambda t: F.gelu(t.T), x, atol=2e-6, rtol=4e-6)
    check(errors, "gelu tanh of a slice", lambda t: F.gelu(t[:, 3:], approximate="tanh"), x, atol=2e-6, rtol=4e-6)
    sdpa = F.scaled_dot_product_attention
    for n, h, hkv, l, s, e, ev in [(2, 3, 3, 5, 7, 8, 8), (1, 4, 2, 9, 13, 5, 3), (2, 2, 1, 6, 150, 16, 70),
                                   (1, 2, 2, 70, 40, 8, 8)]:
        q = rng.standard_normal((n, h, l, e), dtype=np.float32)
        k = rng.standard_normal((n, hkv, s, e), dtype=np.float32)
        v = rng.standard_normal((n, hkv, s, ev), dtype=np.float32)
        padding = np.ones((n, 1, 1, s), bool)
        padding[-1, ..., s // 2:] = False
        shape, gqa = (n, h, hkv, l, s, e, ev), hkv != h
        check(errors, f"attention {shape}", lambda q, k, v: sdpa(q, k, v, enable_gqa=gqa), q, k, v, atol=1e-5)
        check(errors, f"attention {shape} bool padding", lambda q, k, v, m: sdpa(q, k, v, m, enable_gqa=gqa),
              q, k, v, padding, atol=1e-5)
        float_mask = rng.standard_normal((n, 1, l, s)).astype(np.float32)
        check(errors, f"attention {shape} float mask", lambda q, k, v, m: sdpa(q, k, v, m, enable_gqa=gqa),
              q, k, v, float_mask, atol=1e-5)
        check(errors, f"attention {shape} causal", lambda q, k, v: sdpa(q, k, v, is_causal=True, enable_gqa=gqa),
              q, k, v, atol=1e-5)
    late = np.zeros((2, 1, 1, 150), bool)                 # keys only past the first chunk of 64; batch 1: none
    late[0, ..., 100:] = True
    q = rng.standard_normal((2, 2, 5, 16), dtype=np.float32)
    k, v = (rng.standard_normal((2, 2, 150, 16), dtype=np.float32) for _ in range(2))
    check(errors, "attention keys in the last chunk only, rows with none (NaN)",
          lambda q, k, v, m: sdpa(q, k, v, m), q, k, v, late, atol=1e-5)
    proj = rng.standard_normal((2, 11, 3 * 4 * 8), dtype=np.float32)

    def bert(t, m):                                       # q, k, v as strided head views of one projection
        q, k, v = (t[..., i * 32:(i + 1) * 32].reshape(2, 11, 4, 8).transpose(1, 2) for i in range(3))
        return sdpa(q, k, v, m).transpose(1, 2).reshape(2, 11, 32)
    check(errors, "attention on BERT's head views", bert, proj, np.arange(11).reshape(1, 1, 1, 11) < np.array(
        [11, 7]).reshape(2, 1, 1, 1), atol=1e-5)
    h, r = rng.standard_normal((3, 5, 37), dtype=np.float32), rng.standard_normal((3, 5, 37), dtype=np.float32) + 9
    ib, w, b = (rng.standard_normal(37, dtype=np.float32) for _ in range(3))
    check(errors, "add_layer_norm", lambda h, r, ib, w, b: F.add_layer_norm(h, r, 37, w, b, 1e-5, ib),
          h, r, ib, w, b, atol=1e-5)
    check(errors, "add_layer_norm no affine, no input bias", lambda h, r: F.add_layer_norm(h, r, (37,)),
          h, r, atol=1e-5)
    check(errors, "add_layer_norm of a transposed residual", lambda h, r, w: F.add_layer_norm(
        h, r.transpose(0, 1).contiguous().transpose(0, 1), 37, w), h, r, w, atol=1e-5)


def movement_checks(rng, errors):
    x = rng.standard_normal((4, 6, 5), dtype=np.float32)
    check(errors, "cat dim 1", lambda t: engine.cat([t, t[:, :2] * 2, t[:, 3:]], 1), x)
    check(errors, "stack", lambda t: engine.stack([t, -t], 2), x)
    check(errors, "split", lambda t: tuple(engine.split(t, [2, 3, 1], dim=1)), x)
    check(errors, "pad constant", lambda t: F.pad(t, (1, 2, 0, 3), value=-1.5), x)
    check(errors, "pad reflect", lambda t: F.pad(t[None], (2, 1, 1, 2), mode="reflect")[0], x)
    table = rng.standard_normal((50, 7), dtype=np.float32)
    ids = np.array([[3, 0, 49], [7, 7, -1]], np.int64)
    check(errors, "embedding", lambda w: F.embedding(engine.from_numpy(ids, w.device), w), table)
    check(errors, "slicing with steps", lambda t: t[::2, 1::3].exp(), x)


def run() -> dict:
    from engine.backends import webgpu
    gpu = webgpu.device()
    rng = np.random.default_rng(7)
    errors: dict = {}
    for checks in (matmul_checks, tile_checks, conv_checks, pool_checks, elementwise_checks, reduction_checks, rowwise_checks,
                   transformer_checks, movement_checks):
        poison(gpu)
        checks(rng, errors)
    return {"adapter": str(gpu.info), "errors": errors}
