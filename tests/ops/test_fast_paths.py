"""The per-op fast paths (same-shape operands, Python scalars, the 2-D GEMM) give exactly what the
general paths give, and Tensor's computing methods are real attributes of the class."""
import ast
import importlib
import warnings
from pathlib import Path

import numpy as np
import pytest

import engine
from engine import functions
from engine.nn import functional as F
from engine.ops import Op

rng = np.random.default_rng(3)
DEVICES = ["numpy", "simd"]


def general(op, a, b):
    """The same op through the general path (promotion, then broadcasting), never the fast one."""
    dt = functions._result_type(a, b).compute
    return functions.run_op(op, functions._prepare([a, b], dt), dt)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(), (4,), (3, 5), (2, 0)])
def test_same_shape_ops_equal_the_general_path_bit_for_bit(device, shape):
    x, y = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:1] = 0.0
    a, b = engine.from_numpy(x, device), engine.from_numpy(y, device)
    for op, fn in ((Op.ADD, engine.add), (Op.SUB, engine.sub), (Op.MUL, engine.mul), (Op.DIV, engine.div)):
        np.testing.assert_array_equal(fn(a, b).numpy(), general(op, a, b).numpy())
        np.testing.assert_array_equal(fn(b, a).numpy(), general(op, b, a).numpy())
    np.testing.assert_array_equal((a + b).numpy(), x + y)
    np.testing.assert_array_equal((a / b).numpy(), x / y)
    assert (a < b).dtype is engine.bool_ and np.array_equal((a < b).numpy(), x < y)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("value", [0.5, -0.0, 0.0, float("nan"), float("inf"), 3, True, -7])
def test_scalar_operands_equal_numpy_and_keep_signed_zero(device, value):
    x = np.array([-0.0, 0.0, 1.5, -2.0, np.inf], np.float32)
    a = engine.from_numpy(x, device)
    with np.errstate(all="ignore"):
        want = x + np.float32(value), np.float32(value) - x, x * np.float32(value)
    for got, expected in zip((a + value, value - a, a * value), want):
        assert got.dtype is engine.float32
        np.testing.assert_array_equal(got.numpy(), expected)
        assert np.array_equal(np.signbit(got.numpy()), np.signbit(expected))     # -0.0 is not 0.0


def test_scalar_constants_are_cached_per_dtype_and_device_and_left_untouched():
    a = engine.tensor([1.0, 2.0])
    assert (a + 0.25).tolist() == [1.25, 2.25] and (a + 0.25).tolist() == [1.25, 2.25]
    i = engine.tensor([1, 2])
    assert (i + 3).dtype is engine.int64 and (i + 3).tolist() == [4, 5]
    assert (i + 0.5).dtype is engine.float32 and (i + 0.5).tolist() == [1.5, 2.5]    # the general path
    h = engine.tensor([1.0], dtype=engine.float16)
    assert (h + 0.25).dtype is engine.float32 and (h + 0.25).tolist() == [1.25]
    assert (a.to("simd") + 0.25).device == "simd"


def test_ops_warn_about_nothing_and_leave_numpys_error_mode_alone():
    a, z = engine.tensor([1.0, -1.0, 0.0]), engine.tensor([0.0, 0.0, 0.0])
    before = np.geterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = (a / z).numpy()
        (engine.tensor([3e38]) * 10.0).numpy()
    assert np.isposinf(out[0]) and np.isneginf(out[1]) and np.isnan(out[2])
    assert np.geterr() == before
    with pytest.warns(RuntimeWarning):                 # the user's own NumPy still warns
        np.array([1.0]) / np.array([0.0])


@pytest.mark.parametrize("m,k,n", [(1, 64, 64), (3, 5, 7), (0, 4, 3), (2, 0, 3)])
def test_linear_2d_path_equals_the_batched_gemm(m, k, n):
    from engine.backends.simd import kernels as C
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    batched = C.gemm(x[None], w.T[None], bias)[0]                    # the batched path
    np.testing.assert_array_equal(C.linear(x, w, bias), batched)
    np.testing.assert_array_equal(C.gemm(x, w.T, bias), batched)
    np.testing.assert_array_equal(C.gemm(x, w.T, bias[:1].reshape(1, 1)), C.gemm(x[None], w.T[None], bias[:1])[0])
    readonly = w.copy()
    readonly.flags.writeable = False                                 # weights mapped from a file
    got = F.linear(engine.from_numpy(x, "simd"), engine.from_numpy(readonly, "simd"), engine.from_numpy(bias, "simd"))
    np.testing.assert_array_equal(got.numpy(), batched)
    with pytest.raises(ValueError, match="does not broadcast"):
        C.gemm(x, w.T, np.ones((2, 2, n), np.float32))


def test_tensor_methods_are_attributes_of_the_class():
    names = dir(engine.Tensor)
    for name in ("sum", "softmax", "to", "float", "contiguous", "clone", "where", "__add__", "__radd__"):
        assert name in names and callable(getattr(engine.Tensor, name))
    assert not hasattr(engine.Tensor, "__getattr__")
    with pytest.raises(AttributeError, match="no_such_method"):
        engine.tensor([1.0]).no_such_method()
    x = engine.tensor([[1.0, -2.0]])
    assert x.sum(1).tolist() == [-1.0] and x.abs().tolist() == [[1.0, 2.0]]
    assert x.where(x > 0, 0.0).tolist() == [[1.0, 0.0]] and (2 ** x).tolist() == [[2.0, 0.25]]


def test_tensor_module_does_not_import_functions():
    tree = ast.parse(Path(importlib.import_module("engine.tensor").__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | \
        {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert "functions" not in imported and not any("functions" in (m or "") for m in imported)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(7,), (1, 7), (3, 7), (2, 3, 7), (0, 7), "transposed"])
def test_fused_linear_equals_its_composite(device, shape):
    w, b = rng.standard_normal((4, 7)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    if shape == "transposed":
        x = engine.from_numpy(rng.standard_normal((3, 7, 2)).astype(np.float32), device).transpose(1, 2)
    else:
        x = engine.from_numpy(rng.standard_normal(shape).astype(np.float32), device)
    tw, tb = engine.from_numpy(w, device), engine.from_numpy(b, device)
    assert "linear" in tw._backend.fused
    for bias in (tb, None):
        composite = functions.matmul(x, tw.T)
        composite = composite if bias is None else functions.add(composite, bias)
        if device == "numpy":                        # the same kernels: bit for bit
            np.testing.assert_array_equal(F.linear(x, tw, bias).numpy(), composite.numpy())
        else:                                        # the C GEMM sums in its own order
            np.testing.assert_allclose(F.linear(x, tw, bias).numpy(), composite.numpy(), rtol=1e-5, atol=1e-5)
