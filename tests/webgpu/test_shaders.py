"""Every WGSL shader against NumPy on odd shapes, strided and broadcast views, natively."""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine.backends.webgpu import kernels as K
from engine.backends.webgpu.gpu import is_software


def upload(gpu, a: np.ndarray) -> K.View:
    a = np.ascontiguousarray(a, np.float32)
    return K.View.contiguous(gpu.upload(a), a.shape)


def download(gpu, buf, shape) -> np.ndarray:
    return np.frombuffer(gpu.read(buf, 4 * math.prod(shape)), np.float32).reshape(shape)


def strided(view: K.View, shape, strides, offset=0) -> K.View:
    return K.View(view.buf, tuple(shape), tuple(strides), offset)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 7, 1), (7, 13, 5), (65, 33, 129), (64, 16, 64), (3, 100, 2),
                                   (130, 17, 67)])
def test_gemm_odd_shapes(gpu, rng, m, k, n):
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    out = K.gemm(gpu, strided(upload(gpu, a), (1, m, k), (0, k, 1)), strided(upload(gpu, b), (1, k, n), (0, n, 1)))
    np.testing.assert_allclose(download(gpu, out, (m, n)), a @ b, rtol=1e-5, atol=1e-5 * math.sqrt(k))


def test_gemm_batched_transposed_offset_and_broadcast_b(gpu, rng):
    a = rng.standard_normal((3, 5, 7), dtype=np.float32)
    w = rng.standard_normal((9, 7), dtype=np.float32)                  # used as w.T, shared by the batch
    big = rng.standard_normal(200, dtype=np.float32)                   # a starts 11 floats into its buffer
    big[11:11 + a.size] = a.ravel()
    a_view = strided(upload(gpu, big), (3, 5, 7), (35, 7, 1), offset=11)
    out = K.gemm(gpu, a_view, strided(upload(gpu, w), (3, 7, 9), (0, 1, 7)))
    np.testing.assert_allclose(download(gpu, out, (3, 5, 9)), a @ w.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", ["none", "relu", "relu6"])
@pytest.mark.parametrize("along", ["n", "m"])
def test_gemm_bias_and_activation(gpu, rng, activation, along):
    m, k, n = 37, 19, 70
    a, b = rng.standard_normal((m, k), dtype=np.float32) * 3, rng.standard_normal((k, n), dtype=np.float32)
    bias = rng.standard_normal(n if along == "n" else m, dtype=np.float32)
    bias_view = upload(gpu, bias)
    out = K.gemm(gpu, strided(upload(gpu, a), (1, m, k), (0, k, 1)), strided(upload(gpu, b), (1, k, n), (0, n, 1)),
                 bias_view, along, activation)
    expected = a @ b + (bias if along == "n" else bias[:, None])
    expected = {"none": expected, "relu": np.maximum(expected, 0), "relu6": np.clip(expected, 0, 6)}[activation]
    np.testing.assert_allclose(download(gpu, out, (m, n)), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,fn", [("a + b", np.add), ("a - b", np.subtract), ("a * b", np.multiply),
                                   ("div_(a, b)", np.divide), ("max_(a, b)", np.maximum), ("min_(a, b)", np.minimum)])
def test_binary_broadcast_and_strides(gpu, rng, op, fn):
    x = rng.standard_normal((4, 1, 6), dtype=np.float32)
    y = rng.standard_normal((6, 5), dtype=np.float32)                 # used transposed: (5, 6) view
    y[1, 2] = np.nan
    x_view = strided(upload(gpu, x), (4, 5, 6), (6, 0, 1))
    y_view = strided(upload(gpu, y), (4, 5, 6), (0, 1, 5))
    got = download(gpu, K.elementwise(gpu, op, [x_view, y_view], "f32"), (4, 5, 6))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(fn(x, y.T)))     # NaN propagates as in NumPy
        np.testing.assert_allclose(got, fn(x, y.T), rtol=1e-6, atol=0)


def test_elementwise_beyond_one_dispatch_dimension(gpu, rng):
    n = 256 * gpu.limits["max_workgroups"] + 5                       # needs a second row of workgroups
    x = rng.standard_normal(n, dtype=np.float32)
    got = download(gpu, K.elementwise(gpu, "a * 2.0 - 1.0", [upload(gpu, x)], "f32"), (n,))
    np.testing.assert_array_equal(got, x * 2 - 1)


def test_dispatches_wait_for_one_read(gpu, rng):
    """Residency: a chain of shaders runs with nothing read back until the caller asks."""
    x = upload(gpu, rng.standard_normal((33, 47), dtype=np.float32))
    before = dict(gpu.stats)
    y = x
    for _ in range(5):
        y = K.View.contiguous(K.elementwise(gpu, "a * b", [y, x], "f32"), (33, 47))
    assert gpu.stats["reads"] == before["reads"] and gpu.stats["dispatches"] == before["dispatches"] + 5
    download(gpu, y.buf, (33, 47))
    assert gpu.stats["reads"] == before["reads"] + 1


def test_buffers_are_pooled_and_pipelines_cached(gpu, rng):
    x = upload(gpu, rng.standard_normal(1000, dtype=np.float32))
    K.elementwise(gpu, "a + 1.0", [x], "f32")                          # warm: pipeline and buffers exist
    gpu.flush()
    created, pipelines = gpu.stats["buffers_created"], gpu.stats["pipelines"]
    for _ in range(10):
        K.elementwise(gpu, "a + 1.0", [x], "f32")                      # each result dropped at once
        gpu.flush()
    assert gpu.stats["pipelines"] == pipelines
    assert gpu.stats["buffers_created"] <= created + 2


def test_software_adapters_are_recognised(gpu):
    assert is_software("google", "swiftshader", "", "")
    assert is_software("llvmpipe", "", "llvmpipe (LLVM 15.0.6, 256 bits)", "Mesa", "CPU")
    assert is_software("", "", "", "", fallback=True)
    assert not is_software("nvidia", "hopper", "NVIDIA H100", "")
    if "llvmpipe" in gpu.info.device or "lavapipe" in gpu.info.device:
        assert gpu.info.software and "CPU emulation" in str(gpu.info)
