"""Quantized linear and embedding on one backend against engine.quants.dequantize + a float64
NumPy product: every computable GGML type, odd shapes (the input features a multiple of the
block size), x of 1 and 5 rows, with and without bias; embedding and dequantize() exact.

Written once, run twice: natively under pytest (tests/kernels/test_quant_checks.py) and in the
page's worker in Chromium (tests/web/test_quantized_page.py), where `run(device)` is the last
expression of the source given to window.engine.run. It needs only the engine and NumPy. The
result: {"device", "adapter", "errors": {check: worst error / tolerance}}; a check passes when
its value is at most 1.
"""
import numpy as np

import engine
import engine.nn.functional as F
from engine import quants
from engine.device import describe
from engine.bench.quant import random_blocks
from engine.quantized import QuantizedTensor

TYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k")
# linear_q, relative to |x| @ |w|.T (+ |bias|): numpy multiplies the dequantized float32 weight;
# simd and webgpu may quantize x to int8 per block as llama.cpp does (engine.ops)
RTOL = {"numpy": 1e-5}
RTOL_INT8 = 2e-2
# (out features, input blocks): odd sizes, one past a power of two, several blocks
SHAPES = ((7, 3), (67, 5))


def worst_relative(actual, expected, scale, rtol) -> float:
    """max |actual - expected| / (rtol * scale); inf for a shape mismatch or a NaN."""
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if a.shape != e.shape or not np.isfinite(a).all():
        return float("inf")
    return float((np.abs(a - e) / (rtol * scale + 1e-30)).max(initial=0.0))


def exact(actual, expected) -> float:
    """0 when the float32 results are equal bit for bit, else inf."""
    a, e = np.asarray(actual), np.asarray(expected, np.float32)
    return 0.0 if a.dtype == np.float32 and a.shape == e.shape and \
        np.array_equal(a.view(np.uint32), e.view(np.uint32)) else float("inf")


def type_checks(device: str, qtype: str, rng, errors: dict) -> None:
    rtol = RTOL.get(device, RTOL_INT8)
    block = quants.BY_NAME[qtype].block_size
    for out, blocks in SHAPES:
        cols = blocks * block
        raw = random_blocks(qtype, out, cols, rng)
        w = QuantizedTensor.from_raw(raw, qtype, (out, cols), device)
        dense = quants.dequantize(raw, qtype).reshape(out, cols).astype(np.float64)
        bias = rng.standard_normal(out, dtype=np.float32)
        for rows, with_bias in ((1, False), (5, False), (5, True)):
            x = rng.standard_normal((rows, cols), dtype=np.float32)
            expected = x.astype(np.float64) @ dense.T + (bias if with_bias else 0)
            scale = np.abs(x).astype(np.float64) @ np.abs(dense).T + (np.abs(bias) if with_bias else 0)
            b = engine.from_numpy(bias, device) if with_bias else None
            y = F.linear(engine.from_numpy(x, device), w, b)
            name = f"{qtype} linear {rows}x{cols} -> {out}{' + bias' if with_bias else ''}"
            errors[name] = worst_relative(y.numpy(), expected, scale, rtol) if y.device == device else float("inf")
        ids = np.array([[out - 1, 0, 3], [3, out // 2, out - 1]], np.int64)
        got = F.embedding(engine.from_numpy(ids, device), w)
        errors[f"{qtype} embedding {out}x{cols} ids (2, 3)"] = exact(got.numpy(), dense.astype(np.float32)[ids])
        errors[f"{qtype} dequantize {out}x{cols}"] = exact(w.dequantize().numpy(), dense.astype(np.float32))
        try:
            F.embedding(engine.from_numpy(np.array([0, out], np.int64), device), w).numpy()
            errors[f"{qtype} embedding id {out} of {out} rows raises IndexError"] = float("inf")
        except IndexError:
            errors[f"{qtype} embedding id {out} of {out} rows raises IndexError"] = 0.0


def poison_gpu() -> None:
    """Fill pooled webgpu buffers up to 1 MB with NaN, then free them: outputs allocated next
    reuse them, so a shader that skips an element (a row past the last workgroup) shows NaN."""
    from engine.backends import webgpu
    gpu = webgpu.device()
    for shift in range(8, 21):
        bufs = [gpu.upload(np.full((1 << shift) // 4, np.nan, np.float32)) for _ in range(3)]
        del bufs


def run(device: str = "numpy", types=TYPES, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    errors: dict = {}
    for qtype in types:
        if device == "webgpu":
            poison_gpu()
        type_checks(device, qtype, rng, errors)
    return {"device": device, "adapter": describe(device), "errors": errors}
