"""Runs inside Pyodide (tests/kernels/pyodide_run.mjs): the WebAssembly kernels against NumPy
with the tolerances of the native tests, and the MNIST CNN on simd vs numpy. Evaluates to a
JSON string: {"flavour", "errors": {check: worst error / tolerance (<= 1 passes)}, ...}.
With SCRIPT_ARG == "bench" it times GEMM instead (engine.bench.ops.bench_gemm); with "bench-quant",
linear_q against the float32 GEMM on the same shapes (quant_bench); with "bench-f16", F.linear's
kernel with a float16 weight against the float32 weight (linear_f16_bench)."""
import json
import sys

sys.path.insert(0, "/repo")

import numpy as np  # noqa: E402

import engine  # noqa: E402
from engine.backends.numpy.kernels import _conv2d as numpy_conv2d  # noqa: E402
from engine.backends.simd import kernels as K  # noqa: E402
from engine.backends.simd import library  # noqa: E402
from engine import dtypes  # noqa: E402
from tests.kernels.reference import (activation_reference, attention_reference, gemm_reference,  # noqa: E402
                                     linear_q_reference, random_blocks)


def worst(actual, expected, tolerance) -> float:
    error = np.abs(np.asarray(actual, np.float64) - np.asarray(expected, np.float64))
    ratio = error / np.maximum(tolerance, 1e-30)
    return float("inf") if np.isnan(ratio).any() else float(ratio.max(initial=0.0))


def gemm_checks(rng, errors):
    for m, k, n in [(1, 1, 1), (7, 1, 5), (5, 3, 2), (17, 31, 29), (3, 257, 5), (97, 101, 89), (130, 520, 530),
                    (1, 1280, 1000), (16, 64, 33)]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        for name, bias, act in (("plain", None, "none"), ("bias-gelu", rng.standard_normal(n, dtype=np.float32),
                                                          "gelu"), ("rowbias-silu", np.ones((m, 1), np.float32),
                                                                    "silu")):
            expected, tol = gemm_reference(a, b, bias, act)
            for layout, bb in (("c", b), ("t", np.asfortranarray(b))):
                out = K.gemm(a, bb, bias, act, out=np.full((m, n), np.nan, np.float32))
                errors[f"gemm {m}x{k}x{n} {name} {layout}"] = worst(out, expected, tol)
    a, b = rng.standard_normal((2, 1, 5, 6), dtype=np.float32), rng.standard_normal((1, 3, 6, 7), dtype=np.float32)
    errors["gemm batched"] = worst(K.gemm(a, b), np.matmul(a, b), 1e-5 * np.matmul(np.abs(a), np.abs(b)))


def half_weight(rng, n, k):
    """a float16 weight with subnormals and signed zeros among its normal numbers"""
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float16)
    w.flat[::7] = (rng.standard_normal(w.size)[::7] * 3e-6).astype(np.float16)
    w.flat[::11] = 0
    w.flat[::13] = -0.0
    return w


def linear_f16_checks(rng, errors):
    """gemm_f16w_f32 (a float16 weight widened in the kernel): the dot products (1-4 rows) and the
    packed GEMM; inf and NaN weights give what the widened weight gives"""
    for m in (1, 2, 3, 5, 17, 64, 300):
        for k, n in ((7, 5), (13, 9), (257, 130), (512, 515)):
            x, w = rng.standard_normal((m, k), dtype=np.float32), half_weight(rng, n, k)
            bias = rng.standard_normal(n, dtype=np.float32) if m % 2 else None
            expected, tol = gemm_reference(x, w.astype(np.float32).T, bias)
            out = K.linear(x, w, bias, out=np.full((m, n), np.nan, np.float32))
            errors[f"linear f16 weight {m}x{k} by {n}x{k}"] = worst(out, expected, tol)
    for m in (1, 5):
        x, w = rng.standard_normal((m, 45), dtype=np.float32), half_weight(rng, 21, 45)
        w[0, 3], w[10, 0], w[20, 44] = np.inf, -np.inf, np.nan
        with np.errstate(invalid="ignore"):
            expected = x.astype(np.float64) @ w.astype(np.float64).T
        out = K.linear(x, w)
        same = np.array_equal(out[:, [0, 10, 20]], expected[:, [0, 10, 20]], equal_nan=True)
        errors[f"linear f16 weight inf/nan {m} rows"] = 0.0 if same else float("inf")
    # 1-5 rows (a decode step's dot products: zero, subnormal, inf and NaN lanes zeroed in the fast
    # loop, their blocks listed and added exactly after it), K around the 8-blocks, N odd
    for m in (1, 2, 3, 4, 5):
        for k, n in ((7, 3), (9, 1), (17, 5), (40, 9), (385, 13)):
            x = rng.standard_normal((m, k), dtype=np.float32)
            for subnormal in (0.005, 0.3, 1.0):
                w = (rng.standard_normal((n, k)) * 0.05).astype(np.float16)
                bits, where = w.view(np.uint16), rng.random((n, k)) < subnormal
                bits[where] = (rng.integers(0, 1024, where.sum()) | (rng.integers(0, 2, where.sum()) << 15))
                expected, tol = gemm_reference(x, w.astype(np.float32).T)
                out = K.linear(x, w, out=np.full((m, n), np.nan, np.float32))
                errors[f"linear f16 weight {m}x{k} by {n}x{k}, subnormal {subnormal}"] = worst(out, expected, tol)
            w[n // 2, k - 1], w[0, 0] = np.nan, -np.inf
            with np.errstate(invalid="ignore"):
                expected, tol = gemm_reference(x, w.astype(np.float32).T)
            out = K.linear(x, w)
            special = [0, n // 2]
            rest = [j for j in range(n) if j not in special]
            same = np.array_equal(out[:, special], expected[:, special], equal_nan=True)
            errors[f"linear f16 weight {m}x{k} by {n}x{k}, inf/nan"] = (
                max(worst(out[:, rest], expected[:, rest], tol[:, rest]) if rest else 0.0, 0.0 if same else float("inf")))
    x = np.zeros((3, 37), np.float32)
    x[:, 33] = 1
    w = (rng.standard_normal((6, 37)) * 0.05).astype(np.float16)
    w[2, 33], w[5, 33] = np.float16(3 * 2.0 ** -24), np.float16(-1023 * 2.0 ** -24)
    same = np.array_equal(K.linear(x, w), np.broadcast_to(w[:, 33].astype(np.float32), (3, 6)))
    errors["linear f16 weight a subnormal in the K tail, exactly"] = 0.0 if same else float("inf")


def linear_f16_bench(repeat: int = 10) -> list:
    """milliseconds of F.linear's kernel with a float16 weight against the same weight in float32
    (best of `repeat`): a decode step's output head and an encoder's MLP"""
    import time
    rng, rows = np.random.default_rng(3), []
    x, w = rng.standard_normal((64, 256), dtype=np.float32), half_weight(rng, 256, 256)
    for rows_of_x in (x[:1], x[:2], x):                 # past V8's tier-up to TurboFan (no OSR in wasm)
        for _ in range(200):
            K.linear(rows_of_x, w)
            K.linear(rows_of_x, w.astype(np.float32))
    for m, k, n in ((1, 512, 51865), (1, 512, 2048), (1, 2048, 512), (2, 512, 2048), (1500, 512, 2048)):
        # as a trained weight: a few zeros and subnormals (~0.1%: blocks with one take the slow path)
        x, w16 = rng.standard_normal((m, k), dtype=np.float32), (rng.standard_normal((n, k)) * 0.05).astype(np.float16)
        w32, out = w16.astype(np.float32), np.empty((m, n), np.float32)
        times = {}
        for name, w in (("f32", w32), ("f16", w16), ("f32 again", w32), ("f16 again", w16)):
            best = float("inf")
            for _ in range(repeat if m == 1 else 2):
                start = time.perf_counter()
                K.linear(x, w, out=out)
                best = min(best, time.perf_counter() - start)
            times[name.split()[0]] = min(times.get(name.split()[0], best), best)
        rows.append({"shape": [m, k, n], "f32_ms": times["f32"] * 1e3, "f16_ms": times["f16"] * 1e3,
                     "f16_weight_GBps": w16.nbytes / times["f16"] / 1e9, "f32_weight_GBps": w32.nbytes / times["f32"] / 1e9,
                     "f16_GFLOPs": 2 * m * k * n / times["f16"] / 1e9, "f32_GFLOPs": 2 * m * k * n / times["f32"] / 1e9})
    return rows


def conv_checks(rng, errors):
    for n, c, h, w, o, kh, kw, stride, pads, dilation, groups in [
            (2, 3, 9, 11, 6, 3, 3, (2, 2), ((1, 1), (1, 1)), (1, 1), 1), (1, 4, 7, 7, 8, 1, 1, (1, 1), ((0, 0),) * 2,
                                                                         (1, 1), 1),
            (3, 6, 8, 10, 4, 3, 2, (2, 1), ((1, 1), (2, 2)), (1, 2), 2), (1, 8, 13, 13, 8, 3, 3, (1, 1),
                                                                          ((1, 1), (1, 1)), (1, 1), 8),
            (2, 5, 16, 12, 5, 5, 5, (2, 2), ((1, 2), (1, 2)), (1, 1), 5), (1, 7, 23, 29, 7, 3, 3, (2, 2),
                                                                           ((0, 1), (0, 1)), (1, 1), 7)]:
        x = rng.standard_normal((n, c, h, w), dtype=np.float32)
        wt = (rng.standard_normal((o, c // groups, kh, kw)) / np.sqrt(kh * kw * c / groups)).astype(np.float32)
        bias = rng.standard_normal(o, dtype=np.float32)
        padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0)) + pads)
        z = numpy_conv2d(padded, wt.astype(np.float64), dtype=None, stride=stride, dilation=dilation, groups=groups)
        scale = numpy_conv2d(np.abs(padded), np.abs(wt.astype(np.float64)), dtype=None, stride=stride,
                             dilation=dilation, groups=groups)
        expected, tol = np.maximum(z + bias.reshape(-1, 1, 1), 0), 1.2e-5 * (scale + np.abs(bias).reshape(-1, 1, 1))
        out = K.conv2d(x, wt, bias, stride, pads, dilation, groups, "relu", out=np.full(expected.shape, np.nan,
                                                                                         np.float32))
        errors[f"conv2d {(c, o, kh, stride, groups)}"] = worst(out, expected, tol + 1e-30)


def rowwise_checks(rng, errors):
    x = rng.standard_normal((5, 4, 37), dtype=np.float32) * 10
    for axis in (0, 1, 2):
        e = np.exp(x.astype(np.float64) - x.max(axis, keepdims=True))
        expected = e / e.sum(axis, keepdims=True)
        errors[f"softmax axis {axis}"] = worst(K.softmax(x, axis), expected, 2e-6 * expected + 1e-9)
    w, b = rng.standard_normal(37, dtype=np.float32), rng.standard_normal(37, dtype=np.float32)
    x64 = x.astype(np.float64)
    centred = x64 - x64.mean(-1, keepdims=True)
    normed = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5)
    errors["layer_norm"] = worst(K.layer_norm(x, 37, w, b), normed * w + b, 1e-5 * np.abs(normed * w) + 1e-5)
    rms = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * w
    errors["rms_norm"] = worst(K.rms_norm(x, 37, w, 1e-6), rms, 1e-5 * np.abs(rms) + 1e-6)
    scale, shift = w[:4], b[:4]
    affine = x * scale.reshape(1, 4, 1) + shift.reshape(1, 4, 1)
    errors["scale_shift relu6"] = worst(K.scale_shift(x, scale, shift, "relu6"), np.clip(affine, 0, 6), 1e-30)
    errors["clamp"] = worst(K.clamp(x, -1.0, 2.0), np.clip(x, -1, 2), 1e-30)
    errors["add"] = worst(K.add(x, x[::-1].copy()), x + x[::-1], 1e-30)


def transformer_checks(rng, errors):
    x = (rng.standard_normal(1001) * 4).astype(np.float32)
    for name in ("gelu", "gelu_tanh", "silu", "hardswish"):
        errors[f"activation {name}"] = worst(K.activation(x, name), activation_reference(x, name),
                                             2e-6 * np.abs(x) + 1e-37)
    gate_up = (rng.standard_normal((5, 2 * 1001)) * 4).astype(np.float32)   # SwiGLU's halves, read in place
    errors["silu_mul (as silu, then one multiply)"] = 0.0 if np.array_equal(
        K.silu_mul(gate_up[:, :1001], gate_up[:, 1001:]),
        K.activation(np.ascontiguousarray(gate_up[:, :1001]), "silu") * gate_up[:, 1001:]) else float("inf")
    special = K.activation(np.array([np.nan, np.inf, -np.inf, -0.0], np.float32), "gelu")
    errors["gelu of nan, inf, -inf, -0"] = 0.0 if np.isnan(special[[0, 2]]).all() and special[1] == np.inf and \
        special[3] == 0 else float("inf")
    h, r = rng.standard_normal((7, 37), dtype=np.float32), rng.standard_normal((7, 37), dtype=np.float32) + 20
    ib, w, b = (rng.standard_normal(37, dtype=np.float32) for _ in range(3))
    total = ((h + ib) + r).astype(np.float64)
    centred = total - total.mean(-1, keepdims=True)
    normed = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5) * w + b
    errors["add_layer_norm"] = worst(K.add_layer_norm(h, r, 37, w, b, 1e-5, ib), normed, 2e-5 * np.abs(w) + 1e-5)
    for n, heads, kv_heads, l, s, e, ev in [(2, 3, 3, 5, 7, 8, 8), (1, 4, 2, 9, 13, 5, 3), (2, 2, 1, 6, 17, 16, 12),
                                            (2, 12, 12, 19, 19, 32, 32)]:
        q = rng.standard_normal((n, heads, l, e), dtype=np.float32)
        k = rng.standard_normal((n, kv_heads, s, e), dtype=np.float32)
        v = rng.standard_normal((n, kv_heads, s, ev), dtype=np.float32)
        padding = np.ones((n, 1, 1, s), bool)
        padding[-1, ..., s // 2:] = False
        float_mask = np.where(padding, 0.5, -1e4).astype(np.float32)
        for name, mask, causal in (("padding", padding, False), ("float mask", float_mask, False),
                                   ("causal", None, True)):
            expected, tol = attention_reference(q, k, v, mask, None, causal)
            errors[f"attention {(n, heads, kv_heads, l, s, e, ev)} {name}"] = worst(
                K.attention(q, k, v, mask, None, causal), expected, tol)
    # one query row per KV head (a decode step's cross-attention over a fused K/V projection): K and V
    # read in place, the bits of that row in a tile of several
    kv = rng.standard_normal((2, 1500, 6 * 128), dtype=np.float32)
    k = kv[..., :384].reshape(2, 1500, 6, 64).transpose(0, 2, 1, 3)
    v = kv[..., 384:].reshape(2, 1500, 6, 64).transpose(0, 2, 1, 3)
    q = rng.standard_normal((2, 6, 3, 64), dtype=np.float32)
    padding = np.ones((2, 1, 1, 1500), bool)
    padding[1, ..., 700:] = False
    one = K.attention(q[:, :, :1], k, v, padding)
    expected, tol = attention_reference(q[:, :, :1], k, v, padding)
    errors["attention one query row"] = worst(one, expected, tol)
    errors["attention one query row: the tile's bits"] = 0.0 if np.array_equal(
        one, K.attention(q, k, v, np.broadcast_to(padding, (2, 6, 3, 1500)))[:, :1]) else float("inf")
    x = rng.standard_normal((2, 11, 3 * 4 * 8), dtype=np.float32)     # BERT's strided head views
    q, k, v = (x[..., i * 32:(i + 1) * 32].reshape(2, 11, 4, 8).transpose(0, 2, 1, 3) for i in range(3))
    padding = np.ones((2, 1, 1, 11), bool)
    padding[0] = False                                                # no key at all: NaN, as the composite
    expected, tol = attention_reference(q, k, v, padding)
    out = K.attention(q, k, v, padding)
    errors["attention bert views"] = worst(out[1], expected[1], tol[1])
    errors["attention fully masked rows are NaN"] = 0.0 if np.isnan(out[0]).all() else float("inf")
    qkv = rng.standard_normal((1, 7, 9 * 64 + 384), dtype=np.float32)   # llama's q heads in its stacked qkv
    q = qkv[..., :9 * 64].reshape(1, 7, 9, 64).transpose(0, 2, 1, 3)
    angles = rng.uniform(-50, 50, (7, 64)).astype(np.float32)
    cos, sin = np.cos(angles), np.sin(angles)
    expected = q * cos + np.concatenate([-q[..., 32:], q[..., :32]], -1) * sin     # NumPy's roundings: exact
    errors["rope (exact)"] = 0.0 if np.array_equal(K.rope(q, cos, sin), expected) else float("inf")
    cache = np.zeros((1, 3, 32, 64), np.float32)
    v = qkv[..., 9 * 64 + 192:].reshape(1, 7, 3, 64).transpose(0, 2, 1, 3)     # llama's v heads
    K.index_copy(cache, np.arange(3, 10, dtype=np.int64), v, 2)
    errors["index_copy (exact)"] = 0.0 if np.array_equal(cache[:, :, 3:10], v) and not cache[:, :, :3].any() and \
        not cache[:, :, 10:].any() else float("inf")


def convert_checks(errors):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    f16 = bits.view(np.float16)
    errors["f16_to_f32 bits"] = float((K.f16_to_f32(f16).view(np.uint32) != f16.astype(np.float32).view(np.uint32))
                                      .sum())
    ours, expected = K.bf16_to_f32(bits).view(np.uint32), dtypes.bf16_bits_to_f32(bits).view(np.uint32)
    errors["bf16_to_f32 bits"] = float((ours != expected).sum())
    values = np.random.default_rng(1).integers(0, 1 << 32, 100_000, dtype=np.uint64).astype(np.uint32)
    values = values.view(np.float32)
    errors["f32_to_bf16 bits"] = float((K.f32_to_bf16(values) != dtypes.f32_to_bf16_bits(values)).sum())


def quant_checks(rng, errors):
    """linear_q within the int8-activation tolerance, embedding_q bit for bit, every type."""
    from engine import quants
    from engine.backends.simd import quantized as Q
    from engine.quantized import QuantizedTensor
    import engine.nn.functional as F
    for qtype in Q.TYPES:
        cols = 512 if quants.BY_NAME[qtype].block_size == 256 else 224
        for m, rows in ((1, 9), (6, 5)):                 # decoding; 4 rows of x at once, then 1 and 1
            weight = random_blocks(qtype, rows, cols, rng)
            w = quants.dequantize(weight, qtype).reshape(rows, cols)
            wide = rng.standard_normal((m, 2 * cols), dtype=np.float32)
            x, bias = wide[:, :cols], rng.standard_normal(rows, dtype=np.float32)    # rows of x strided
            expected, tol = linear_q_reference(x, w, bias)
            together = Q.linear_q(x, bias, weight=weight, qtype=qtype, rows=rows, cols=cols)
            errors[f"linear_q {qtype} {m}x{cols} @ {rows}"] = worst(together, expected, tol)
        for n in (1, 2, 3, 18):                          # many rows = each row alone, bit for bit (any tail)
            k = n * quants.BY_NAME[qtype].block_size
            blocks = random_blocks(qtype, 3, k, rng)
            xs = rng.standard_normal((7, k), dtype=np.float32)
            together = Q.linear_q(xs, weight=blocks, qtype=qtype, rows=3, cols=k)
            alone = np.concatenate([Q.linear_q(xs[i:i + 1], weight=blocks, qtype=qtype, rows=3, cols=k)
                                    for i in range(7)])
            errors[f"linear_q {qtype} 7 rows = each alone, {n} blocks"] = \
                0.0 if np.array_equal(together.view(np.uint32), alone.view(np.uint32)) else float("inf")
        ids = rng.integers(0, rows, (2, 4))
        same = np.array_equal(Q.embedding_q(ids, weight=weight, qtype=qtype, rows=rows, cols=cols).view(np.uint32),
                              w[ids].view(np.uint32))
        errors[f"embedding_q {qtype} bit for bit"] = 0.0 if same else float("inf")
    try:
        Q.embedding_q(np.array([0, 5]), weight=weight, qtype=qtype, rows=5, cols=cols)
        errors["embedding_q out of range raises"] = float("inf")
    except IndexError as e:
        errors["embedding_q out of range raises"] = 0.0 if "index 5 is out of range for 5 rows" in str(e) else 2.0
    raw = random_blocks("q4_1", 7, 64, rng)                    # the public API, simd against numpy
    weight = QuantizedTensor.from_raw(raw, "q4_1", (7, 64))
    x = rng.standard_normal((2, 3, 64), dtype=np.float32)
    expected, tol = linear_q_reference(x, quants.dequantize(raw, "q4_1").reshape(7, 64))
    errors["F.linear q4_1 on simd"] = worst(F.linear(engine.from_numpy(x, "simd"), weight.to("simd")).numpy(),
                                            expected, tol)


def quant_bench(repeat: int = 30) -> list:
    """linear_q of one row of x (decoding) and of 37 (a prompt), GB/s of weight bytes streamed
    (best of `repeat`, through the Python wrapper), beside gemm_f32 with a float32 weight of the
    same shape."""
    import time
    from engine import quants
    from engine.backends.simd import quantized as Q
    rng, cases = np.random.default_rng(0), []

    def best_ms(fn, runs=repeat):
        for _ in range(3):
            fn()
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times) * 1e3
    x, dense = rng.standard_normal((4, 256), dtype=np.float32), rng.standard_normal((256, 256), dtype=np.float32)
    best_ms(lambda: K.gemm(x, dense.T), 200)                      # past V8's tier-up to TurboFan
    for qtype in ("q4_0", "q4_1", "q8_0", "q4_k", "q6_k"):
        weight = random_blocks(qtype, 256, 256, rng)
        best_ms(lambda: Q.linear_q(x, weight=weight, qtype=qtype, rows=256, cols=256), 200)
    for m in (1, 37):
        for rows, cols in ((576, 576), (576, 1536), (1536, 576), (49152, 576)):
            x = rng.standard_normal((m, cols), dtype=np.float32)
            dense = rng.standard_normal((rows, cols), dtype=np.float32)
            ms = best_ms(lambda: K.gemm(x, dense.T))
            case = {"m": m, "rows": rows, "cols": cols,
                    "f32": {"ms": round(ms, 4), "GB/s": round(dense.nbytes / ms / 1e6, 2)}}
            for qtype in ("q4_0", "q4_1", "q8_0", "q4_k", "q6_k"):
                if cols % quants.BY_NAME[qtype].block_size == 0 and (rows < 49152 or qtype == "q8_0"):
                    weight = random_blocks(qtype, rows, cols, rng)
                    ms = best_ms(lambda: Q.linear_q(x, weight=weight, qtype=qtype, rows=rows, cols=cols))
                    case[qtype] = {"ms": round(ms, 4), "GB/s": round(weight.nbytes / ms / 1e6, 2)}
            cases.append(case)
    return cases


def mnist_check(rng, errors):
    from models import mnist_cnn
    batch = rng.random((5, 1, 28, 28), dtype=np.float32)
    expected = mnist_cnn.load()(engine.from_numpy(batch)).numpy()
    actual = mnist_cnn.load(device="simd")(engine.from_numpy(batch, "simd")).numpy()
    errors["mnist logits (atol 1e-4)"] = worst(actual, expected, 1e-4)


def program_checks(rng, errors):
    """engine_run_program in this build: every export as its direct call (tests/kernels/program_cases.py),
    and a captured step replayed as programs giving the eager step's bits."""
    from engine import graph
    from engine.backends.simd.heap_program import PoolProgram
    from engine.backends.simd.program import Program
    from tests.kernels import program_cases
    exact = lambda same: 0.0 if same else float("inf")                      # noqa: E731
    for name, same in program_cases.check_every_export(rng).items():
        errors[f"program {name}"] = exact(same)
    errors["program scratch growth"] = exact(program_cases.check_scratch_growth(rng))
    errors["program bad index"] = exact(program_cases.check_bad_index(rng).startswith("IndexError"))
    F = engine.nn.functional
    w = engine.from_numpy(rng.standard_normal((16, 16)).astype(np.float32), "simd")

    def step(x):
        h = F.rms_norm(F.linear(x, w), (16,))
        return F.silu(F.linear(h + x, w)) + h
    g, _ = graph.capture(step, engine.zeros((2, 16), device="simd"))
    x = rng.standard_normal((2, 16)).astype(np.float32)
    replayed = g.replay(x).numpy()
    eager = step(engine.from_numpy(x, "simd")).numpy()
    joined = len(g.calls) == 1 and isinstance(g.calls[0], (Program, PoolProgram))  # PoolProgram: a page's pool
    errors["program replay of a captured step is one call"] = exact(joined)
    errors["program replay of a captured step gives the eager bits"] = exact(np.array_equal(replayed, eager))


def main(arg: str) -> str:
    lib = library.load()
    result = {"flavour": lib.flavour, "platform": sys.platform, "devices": engine.available_devices()}
    if arg == "bench":
        from engine.bench.ops import bench_gemm
        result["gemm"] = bench_gemm(repeat=5, device="simd")
        return json.dumps(result)
    if arg == "bench-f16":
        result["linear_f16"] = linear_f16_bench()
        return json.dumps(result)
    if arg == "bench-quant":
        result["linear_q"] = quant_bench()
        return json.dumps(result)
    rng, errors = np.random.default_rng(7), {}
    gemm_checks(rng, errors)
    linear_f16_checks(rng, errors)
    conv_checks(rng, errors)
    rowwise_checks(rng, errors)
    transformer_checks(rng, errors)
    convert_checks(errors)
    quant_checks(rng, errors)
    program_checks(rng, errors)
    mnist_check(rng, errors)
    result["errors"] = errors
    return json.dumps(result)


main(globals().get("SCRIPT_ARG", ""))
