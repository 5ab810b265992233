"""Elementwise ops, promotion and broadcasting against torch and NumPy."""
import math

import numpy as np
import pytest
import torch

import engine
from tests.helpers import assert_close

rng = np.random.default_rng(0)

SHAPE_PAIRS = [((7,), (7,)), ((3, 1, 5), (1, 4, 1)), ((1,), (2, 3)), ((), (4,)), ((2, 3, 5), (5,)), ((0, 3), (1, 3))]
FLOATS = [engine.float32, engine.float16, engine.bfloat16, engine.float64]
TORCH = {engine.float32: torch.float32, engine.float16: torch.float16, engine.bfloat16: torch.bfloat16,
         engine.float64: torch.float64, engine.int64: torch.int64, engine.int32: torch.int32,
         engine.int16: torch.int16, engine.int8: torch.int8, engine.uint8: torch.uint8, engine.bool_: torch.bool}


def make(shape, dtype, low=-3.0, high=3.0):
    """The same values as an engine tensor and a torch tensor."""
    if dtype is engine.bool_:
        a = rng.random(shape) > 0.5
    elif dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -20
        a = rng.integers(lo, 20, shape)
    else:
        a = rng.uniform(low, high, shape)
    t = torch.tensor(a).to(TORCH[dtype])
    return engine.tensor(a, dtype=dtype), t


def expected_dtype(t):
    """What our result dtype is for a torch result: half types compute (and stay) float32."""
    return {torch.float16: engine.float32, torch.bfloat16: engine.float32}.get(t.dtype) or \
        next(k for k, v in TORCH.items() if v == t.dtype)


@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS)
@pytest.mark.parametrize("dtype", FLOATS + [engine.int32, engine.int64, engine.uint8])
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "minimum"])
def test_binary_matches_torch(name, dtype, sa, sb):
    ea, ta = make(sa, dtype)
    eb, tb = make(sb, dtype, 0.5, 3.0)
    if name == "div" and dtype.kind in "iu":
        tb = tb.clamp(min=1)
        eb = engine.tensor(tb.numpy(), dtype=dtype)
    out = getattr(engine, name)(ea, eb)
    ref = getattr(torch, name)(ta.float() if dtype in (engine.float16, engine.bfloat16) else ta,
                               tb.float() if dtype in (engine.float16, engine.bfloat16) else tb)
    assert out.dtype is expected_dtype(ref)
    assert_close(out, ref)


@pytest.mark.parametrize("name,op", [("eq", "__eq__"), ("ne", "__ne__"), ("lt", "__lt__"), ("le", "__le__"),
                                     ("gt", "__gt__"), ("ge", "__ge__")])
@pytest.mark.parametrize("dtype", [engine.float32, engine.bfloat16, engine.int64, engine.uint8])
def test_comparisons(name, op, dtype):
    ea, ta = make((4, 1, 3), dtype)
    eb, tb = make((5, 1), dtype)
    eb2, tb2 = ea[:, :, ::2], ta[:, :, ::2]   # also a strided view against itself
    assert_close(getattr(ea, op)(eb), getattr(ta, op)(tb))
    assert_close(getattr(engine, name)(ea[:, :, ::2], eb2), getattr(torch, name)(tb2, tb2))
    assert getattr(ea, op)(eb).dtype is engine.bool_


@pytest.mark.parametrize("scalar", [2, 2.5, True, -1])
@pytest.mark.parametrize("dtype", [engine.float32, engine.float16, engine.int32, engine.int64, engine.uint8,
                                   engine.bool_])
def test_scalar_promotion(dtype, scalar):
    ea, ta = make((3, 4), dtype)
    if dtype is engine.uint8 and scalar == -1:
        scalar = 1
    fns = [lambda x, s: x + s, lambda x, s: s * x, lambda x, s: x / s]
    if dtype is not engine.bool_ and not isinstance(scalar, bool):
        fns.append(lambda x, s: x - s)
    for fn in fns:
        if dtype is engine.bool_ and not isinstance(scalar, float):
            continue
        out, ref = fn(ea, scalar), fn(ta, scalar)
        assert out.dtype is expected_dtype(ref), (dtype, scalar, ref.dtype)
        assert_close(out, ref.float() if ref.dtype in (torch.float16, torch.bfloat16) else ref,
                     rtol=1e-3 if dtype is engine.float16 else None)


@pytest.mark.float64
def test_zero_dim_tensors_do_not_widen_dimensioned_ones():
    a = engine.tensor([1, 2, 3], dtype=engine.int32)
    assert (a + engine.tensor(5)).dtype is engine.int32          # int64 0-d with int32 dims -> int32
    assert (a + engine.tensor(0.5)).dtype is engine.float32      # a higher kind wins
    assert (engine.tensor([1.0], dtype=engine.float64) + engine.tensor(2.0)).dtype is engine.float64


UNARY = {
    "exp": (torch.exp, -5, 5), "log": (torch.log, 0.01, 10), "sqrt": (torch.sqrt, 0, 9), "sin": (torch.sin, -7, 7),
    "cos": (torch.cos, -7, 7), "tanh": (torch.tanh, -8, 8), "erf": (torch.erf, -6, 6),
    "reciprocal": (torch.reciprocal, 0.1, 5), "neg": (torch.neg, -3, 3), "abs": (torch.abs, -3, 3),
    "floor": (torch.floor, -3, 3), "ceil": (torch.ceil, -3, 3), "sigmoid": (torch.sigmoid, -30, 30),
    "rsqrt": (torch.rsqrt, 0.1, 9), "relu": (torch.relu, -3, 3),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_torch(name, dtype):
    fn, lo, hi = UNARY[name]
    a = rng.uniform(lo, hi, (5, 13)).astype(np.float32)
    e = engine.tensor(a, dtype=dtype)[:, ::3]                   # strided view
    t = torch.tensor(a).to(TORCH[dtype])[:, ::3]
    out = getattr(engine, name)(e)
    ref = fn(t.float() if dtype in (engine.float16, engine.bfloat16) else t)
    assert out.shape == tuple(ref.shape)
    # our erf is a series/continued fraction good to 1e-9, not float64's last bit
    assert_close(out, ref, atol=1e-9 if (name, dtype) == ("erf", engine.float64) else None)


@pytest.mark.float64
def test_erf_accuracy_against_math():
    xs = np.linspace(-7, 7, 20001)
    out = engine.erf(engine.tensor(xs, dtype=engine.float64)).numpy()
    ref = np.array([math.erf(v) for v in xs])
    assert np.abs(out - ref).max() < 1e-9


def test_integer_unary_promotes_to_float():
    e = engine.tensor([1, 4, 9])
    assert engine.sqrt(e).dtype is engine.float32
    assert_close(engine.sqrt(e), np.sqrt([1.0, 4.0, 9.0]).astype(np.float32))
    assert engine.abs(engine.tensor([-2, 3])).dtype is engine.int64


def test_where_and_masked_fill():
    a, ta = make((3, 1, 4), engine.float32)
    b, tb = make((5, 1), engine.float32)
    cond = engine.tensor(rng.random((3, 5, 4)) > 0.5)
    tcond = torch.tensor(cond.numpy())
    assert_close(engine.where(cond, a, b), torch.where(tcond, ta, tb))
    assert_close(engine.where(cond, a, 0.0), torch.where(tcond, ta, 0.0))
    assert_close(a.masked_fill(cond, -1.0), ta.masked_fill(tcond, -1.0))
    assert engine.where(cond, engine.tensor([1]), 2.5).dtype is engine.float32


def test_bitwise_and_logical():
    a, ta = make((4, 6), engine.int32)
    b, tb = make((6,), engine.int32)
    assert_close(a & b, ta & tb)
    assert_close(a | b, ta | tb)
    assert_close(a ^ b, ta ^ tb)
    assert_close(~a, ~ta)
    m, tm = make((4, 6), engine.bool_)
    assert_close(~m, ~tm)
    assert_close(engine.logical_and(m, a > 0), torch.logical_and(tm, ta > 0))
    with pytest.raises(TypeError):
        engine.tensor([1.0]) & engine.tensor([2.0])


def test_pow_and_clamp():
    a, ta = make((3, 5), engine.float32, 0.1, 3)
    assert_close(a ** 2, ta ** 2)
    assert_close(a ** 0.5, ta ** 0.5)
    assert_close(2 ** a, 2 ** ta)
    assert_close(a.clamp(0.5, 2.0), ta.clamp(0.5, 2.0))
    assert_close(engine.clamp(a, max=1.0), torch.clamp(ta, max=1.0))


def test_broadcast_error_names_shapes():
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5,\)"):
        engine.ones(3, 4) + engine.ones(5)


def test_cast_round_trips_match_torch():
    a = rng.standard_normal(1000).astype(np.float32) * 100
    a[:4] = [np.nan, np.inf, -np.inf, 0.0]
    e, t = engine.tensor(a), torch.tensor(a)
    for dt in (engine.float16, engine.bfloat16):
        ours = e.to(dt).raw_numpy().view(np.uint16)
        theirs = t.to(TORCH[dt]).view(torch.int16).numpy().view(np.uint16)
        nan = np.isnan(a)
        np.testing.assert_array_equal(ours[~nan], theirs[~nan])   # round to nearest even, bit exact
        assert np.isnan(e.to(dt).numpy()[nan]).all()
    ints = engine.tensor([-3.7, 2.9, 0.0])
    assert ints.to(engine.int64).tolist() == torch.tensor([-3.7, 2.9, 0.0]).to(torch.int64).tolist()
    assert engine.tensor([0.0, 2.0]).to(engine.bool_).tolist() == [False, True]


NUMPY_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
                "maximum": np.maximum, "minimum": np.minimum, "pow": np.power, "eq": np.equal, "lt": np.less,
                "ge": np.greater_equal}


@pytest.mark.parametrize("name", sorted(NUMPY_BINARY))
def test_binary_matches_numpy_on_strided_broadcast_views(name):
    a = rng.uniform(0.5, 2.0, (4, 7, 6)).astype(np.float32)
    b = rng.uniform(0.5, 2.0, (12, 1)).astype(np.float32)   # [::2] -> (6, 1)
    ea, eb = engine.from_numpy(a)[:, ::2].transpose(1, 2), engine.from_numpy(b)[::2]
    na, nb = a[:, ::2].transpose(0, 2, 1), b[::2]
    ref = NUMPY_BINARY[name](na, nb)
    out = getattr(engine, name)(ea, eb)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6 if name != "pow" else 1e-5)
    assert out.numpy().dtype == ref.dtype
