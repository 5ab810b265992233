"""The simd backend through the engine's API: the same expressions on device="simd" and
device="numpy" agree (tolerances: 1e-5 relative to the magnitudes summed, as the kernels'
own tests); ops the C kernels do not cover and other dtypes run the NumPy kernels; the
device table lists simd only where its library loads."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import engine
import engine.nn as nn
import engine.nn.functional as F
from engine.backends.simd.backend import KERNELS, NUMPY_OPS
from engine.ops import Op
from tests.kernels.reference import assert_within

ROOT = Path(__file__).resolve().parents[2]


def both(*arrays):
    return [engine.from_numpy(a) for a in arrays], [engine.from_numpy(a, "simd") for a in arrays]


def agree(fn, *arrays, rtol=1e-5, atol=1e-6):
    (ref_in, simd_in) = both(*arrays)
    expected, actual = fn(*ref_in), fn(*simd_in)
    assert actual.device == "simd" and expected.device == "numpy"
    assert actual.dtype is expected.dtype and actual.shape == expected.shape
    e = expected.numpy()
    assert_within(actual.numpy(), e, rtol * np.abs(e) + atol, getattr(fn, "__name__", "expression"))


def test_table_is_declared_complete():
    assert set(KERNELS) == set(Op)
    assert NUMPY_OPS.isdisjoint({Op.MATMUL, Op.CONV2D, Op.CAST})
    assert "simd" in engine.available_devices() and engine.device.unavailable_reason("simd") is None


@pytest.mark.parametrize("a_shape,b_shape", [((5,), (5,)), ((3, 5), (5,)), ((5,), (5, 2)), ((7, 9), (9, 13)),
                                             ((2, 3, 4, 5), (5, 6)), ((4, 1, 3, 8), (2, 8, 5)), ((1, 1), (1, 1))])
def test_matmul(rng, a_shape, b_shape):
    a, b = rng.standard_normal(a_shape, dtype=np.float32), rng.standard_normal(b_shape, dtype=np.float32)
    agree(lambda x, y: x @ y, a, b)


def test_matmul_views_without_copies(rng):
    a, b = rng.standard_normal((6, 10), dtype=np.float32), rng.standard_normal((12, 10), dtype=np.float32)
    agree(lambda x, y: x @ y.T, a, b)
    agree(lambda x, y: x[:, ::2] @ y[1::2, ::2].T, a, b)
    agree(lambda x, y: x.unsqueeze(0).expand(3, 6, 10) @ y.T, a, b)


def test_other_dtypes_fall_back_to_numpy(rng):
    a = rng.standard_normal((4, 5))
    (x,), (y,) = both(a)
    assert (y @ y.T).device == "simd"
    np.testing.assert_array_equal((y @ y.T).numpy(), (x @ x.T).numpy())             # float64: NumPy's matmul
    ints = rng.integers(-5, 5, (3, 4))
    (xi,), (yi,) = both(ints)
    np.testing.assert_array_equal((yi @ yi.T).numpy(), (xi @ xi.T).numpy())


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(3, 7), (2, 4, 7), (7,), (1, 7)])
def test_linear(rng, shape, bias):
    layer = nn.Linear(7, 5, bias=bias)
    layer.weight = engine.from_numpy(rng.standard_normal((5, 7), dtype=np.float32))
    if bias:
        layer.bias = engine.from_numpy(rng.standard_normal(5, dtype=np.float32))
    x = rng.standard_normal(shape, dtype=np.float32)
    simd_layer = nn.Linear(7, 5, bias=bias).to("simd")
    simd_layer.load_state_dict(layer.state_dict())
    expected, actual = layer(engine.from_numpy(x)).numpy(), simd_layer(engine.from_numpy(x, "simd")).numpy()
    assert_within(actual, expected, 1e-5 * np.abs(expected) + 1e-5, "linear")


@pytest.mark.parametrize("kwargs", [dict(padding=1), dict(padding="same", dilation=2), dict(stride=2, padding=(0, 2)),
                                    dict(groups=3, padding=1), dict(groups=6, stride=2, padding=2)])
def test_conv2d_with_bias(rng, kwargs):
    x = rng.standard_normal((2, 6, 9, 10), dtype=np.float32)
    groups = kwargs.get("groups", 1)
    w = rng.standard_normal((6, 6 // groups, 3, 3), dtype=np.float32)
    b = rng.standard_normal(6, dtype=np.float32)
    agree(lambda x, w, b: F.conv2d(x, w, b, **kwargs), x, w, b, atol=1e-5)
    agree(lambda x, w: F.conv2d(x, w, None, **kwargs), x, w, atol=1e-5)
    agree(lambda x, w, b: F.conv2d(x[0], w, b, **kwargs), x, w, b, atol=1e-5)       # unbatched


@pytest.mark.parametrize("activation", ["relu", "relu6", "gelu", "gelu_tanh", "silu", "hardswish"])
@pytest.mark.parametrize("groups", [1, 6])
def test_conv2d_act_fuses_the_activation(rng, activation, groups):
    x = rng.standard_normal((2, 6, 9, 10), dtype=np.float32) * 4
    w = rng.standard_normal((6, 6 // groups, 3, 3), dtype=np.float32)
    b = rng.standard_normal(6, dtype=np.float32)
    agree(lambda x, w, b: F.conv2d_act(x, w, b, 2, ((0, 1), (1, 0)), 1, groups, activation), x, w, b, atol=2e-5)


def test_conv2d_half_weights_take_the_composite(rng):
    x = rng.standard_normal((1, 2, 5, 5), dtype=np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float16)
    agree(lambda x, w: F.conv2d(x, w, padding=1), x, w, atol=1e-5)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax(rng, dim):
    x = rng.standard_normal((3, 4, 5), dtype=np.float32) * 20
    agree(lambda t: F.softmax(t, dim), x, atol=1e-7)
    agree(lambda t: F.softmax(t.transpose(0, 2), dim), x, atol=1e-7)
    agree(lambda t: F.softmax(t, dim), x.astype(np.float64), atol=1e-12)


def test_norm_layers(rng):
    x = rng.standard_normal((2, 3, 8), dtype=np.float32) + 5
    w, b = rng.standard_normal(8, dtype=np.float32), rng.standard_normal(8, dtype=np.float32)
    agree(lambda t, w, b: F.layer_norm(t, (8,), w, b), x, w, b, atol=1e-5)
    agree(lambda t: F.layer_norm(t, (3, 8), None, None, eps=1e-3), x, atol=1e-5)
    agree(lambda t, w: F.rms_norm(t, (8,), w, eps=1e-6), x, w, atol=1e-5)
    agree(lambda t: F.rms_norm(t, (8,)), x, atol=1e-5)
    agree(lambda t, w: F.layer_norm(t, (8,), w), x, w.astype(np.float64), atol=1e-5)   # float64 weight: composite


def test_batch_norm_and_clamps(rng):
    x = rng.standard_normal((2, 4, 3, 5), dtype=np.float32) * 4
    mean, var = rng.standard_normal(4, dtype=np.float32), rng.random(4, dtype=np.float32) + 0.5
    w, b = rng.standard_normal(4, dtype=np.float32), rng.standard_normal(4, dtype=np.float32)
    agree(lambda t, m, v, w, b: F.relu6(F.batch_norm(t, m, v, w, b, eps=1e-3)), x, mean, var, w, b)
    agree(lambda t: F.hardtanh(t, -2.0, 2.5), x)
    agree(lambda t: F.hardtanh(t[:, ::2], -2.0, 2.5), x.astype(np.float64))


def test_half_casts(rng):
    x = rng.standard_normal(101, dtype=np.float32) * 100
    for dtype in (engine.float16, engine.bfloat16):
        (ref,), (simd,) = both(x)
        np.testing.assert_array_equal(simd.to(dtype).raw_numpy(), ref.to(dtype).raw_numpy())
        np.testing.assert_array_equal(simd.to(dtype).float().numpy(), ref.to(dtype).float().numpy())


def test_moving_between_devices(rng):
    x = engine.from_numpy(rng.standard_normal((3, 4), dtype=np.float32))
    y = x.to("simd")
    assert y.device == "simd" and np.array_equal(y.numpy(), x.numpy())
    assert y.to("numpy").device == "numpy"
    with pytest.raises(engine.EngineError, match="different devices"):
        x + y


def test_without_a_compiler_simd_is_unavailable_and_says_why(tmp_path):
    code = ("import engine, engine.device as d; print(engine.available_devices()); "
            "print(d.unavailable_reason('simd'))\n"
            "try:\n    engine.tensor([1.0], device='simd')\nexcept engine.EngineError as e:\n    print(e)")
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "ENGINE_SIMD_LIBRARY")}
    env.update(PATH=str(tmp_path), ENGINE_KERNELS_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    devices, reason, error = out.stdout.splitlines()
    assert "'simd'" not in devices and devices.startswith("['numpy'")
    assert "no C compiler found" in reason
    assert error.startswith("device 'simd' is not available here: no C compiler found")


def test_empty_dims(rng):
    w, b = rng.standard_normal((4, 3), dtype=np.float32), rng.standard_normal(4, dtype=np.float32)
    agree(lambda x, w, b: F.linear(x, w, b), np.zeros((0, 3), np.float32), w, b)
    agree(lambda x, w, b: F.linear(x, w, b), np.zeros((2, 0), np.float32), np.zeros((4, 0), np.float32), b)
    agree(lambda x, y: x @ y, np.zeros((2, 0), np.float32), np.zeros((0, 5), np.float32))


def test_library_refuses_a_foreign_library():
    import ctypes.util
    from engine.backends.simd.library import Library
    with pytest.raises(OSError, match="lacks the exports"):
        Library(ctypes.util.find_library("m") or "libm.so.6")


def test_moving_between_numpy_and_simd_shares_memory():
    a = engine.ones(3, 4)
    b = a.to("simd")
    assert b.device == "simd" and b._buf is a._buf           # same NumPy storage: no copy
    assert b.to("numpy")._buf is a._buf
    assert (b @ b.T).device == "simd"


def test_pipelines_measured_faster_on_simd_default_to_it_natively():
    """A registry entry's native_device: natively its pipeline runs on simd when no device is
    named (docs/benchmarks.md, "Natively"); the others keep the default."""
    from engine import device, registry
    assert device.best_for_pipeline(registry.for_task("image-classification").native_device) == "simd"
    assert device.best_for_pipeline(registry.for_task("sentence-embedding").native_device) == "simd"
    assert device.best_for_pipeline(registry.for_task("feature-extraction").native_device) == "simd"
    assert device.best_for_pipeline(registry.for_task("speech-recognition").native_device) is None
