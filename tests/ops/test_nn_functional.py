"""engine.nn.functional against torch.nn.functional on odd shapes and views."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import engine
import engine.nn.functional as F
from tests.helpers import assert_close

rng = np.random.default_rng(2)


def pair(*shape, scale=1.0):
    a = (rng.standard_normal(shape) * scale).astype(np.float32)
    return engine.tensor(a), torch.tensor(a)


CONV_CASES = [  # (N, C, H, W), (O, C/g, kh, kw), kwargs
    ((1, 1, 7, 7), (3, 1, 3, 3), {}),
    ((2, 3, 11, 9), (5, 3, 3, 3), {"padding": 1}),
    ((2, 4, 13, 10), (6, 2, 3, 5), {"stride": 2, "padding": (1, 2), "groups": 2}),
    ((1, 5, 9, 9), (5, 1, 3, 3), {"padding": 1, "groups": 5}),                      # depthwise
    ((2, 6, 17, 15), (6, 1, 5, 5), {"stride": 2, "padding": 2, "groups": 6}),       # depthwise strided
    ((1, 3, 10, 12), (4, 3, 3, 3), {"dilation": 2, "padding": "same"}),
    ((1, 3, 10, 12), (4, 3, 4, 2), {"padding": "same"}),                            # even kernel: asymmetric
    ((1, 2, 6, 6), (3, 2, 1, 1), {"padding": "valid"}),
    ((3, 7, 5, 5), (11, 7, 2, 2), {"stride": (2, 1)}),
    ((2, 3, 8, 8), (3, 1, 3, 3), {"groups": 3, "dilation": (2, 1), "padding": 2}),  # depthwise dilated
    # many channels on a small map: the channels-last depthwise path (the others go plane by plane)
    ((2, 40, 7, 6), (40, 1, 3, 3), {"padding": 1, "groups": 40}),
    ((2, 48, 9, 8), (48, 1, 5, 5), {"stride": 2, "padding": (1, 2), "groups": 48}),
    ((1, 36, 9, 9), (36, 1, 3, 3), {"stride": (2, 1), "dilation": (1, 2), "groups": 36}),
    ((1, 3, 30, 40), (3, 1, 3, 3), {"stride": 3, "padding": 1, "groups": 3}),      # rows past wo dropped
    ((2, 20, 64, 64), (20, 1, 3, 3), {"padding": 1, "groups": 20}),                 # planes in several row blocks
    ((2, 5, 16, 17), (7, 5, 1, 1), {}),                                             # pointwise, one GEMM per image
]


@pytest.mark.parametrize("xs,ws,kw", CONV_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d(xs, ws, kw, bias):
    x, tx = pair(*xs)
    w, tw = pair(*ws)
    b, tb = pair(ws[0]) if bias else (None, None)
    assert_close(F.conv2d(x, w, b, **kw), TF.conv2d(tx, tw, tb, **kw), rtol=1e-5, atol=1e-5)


def test_conv2d_non_contiguous_unbatched_and_errors():
    x, tx = pair(2, 9, 10, 3)
    w, tw = pair(4, 3, 3, 3)
    assert_close(F.conv2d(x.permute(0, 3, 1, 2), w, padding=1), TF.conv2d(tx.permute(0, 3, 1, 2), tw, padding=1),
                 rtol=1e-5, atol=1e-5)
    assert_close(F.conv2d(x.permute(0, 3, 1, 2)[0], w), TF.conv2d(tx.permute(0, 3, 1, 2)[0], tw),
                 rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="channels"):
        F.conv2d(engine.ones(1, 4, 5, 5), w)
    with pytest.raises(ValueError, match="same"):
        F.conv2d(engine.ones(1, 3, 5, 5), w, stride=2, padding="same")


@pytest.mark.parametrize("activation", ["none", "relu", "relu6", "gelu", "gelu_tanh", "silu", "hardswish"])
def test_conv2d_act_per_side_padding(activation):
    x, tx = pair(2, 6, 9, 10)
    w, tw = pair(6, 1, 5, 5)
    b, tb = pair(6)
    acts = {"none": lambda t: t, "relu": torch.relu, "relu6": TF.relu6, "gelu": TF.gelu,
            "gelu_tanh": lambda t: TF.gelu(t, approximate="tanh"), "silu": TF.silu,
            "hardswish": TF.hardswish}
    # TF "SAME" for a stride-2 5x5: one pixel before, two after
    expected = acts[activation](TF.conv2d(TF.pad(tx, (1, 2, 0, 1)), tw, tb, stride=2, groups=6))
    got = F.conv2d_act(x, w, b, stride=2, padding=((0, 1), (1, 2)), groups=6, activation=activation)
    assert_close(got, expected, rtol=1e-5, atol=1e-5)


CONV1D_CASES = [  # (N, C, L), (O, C/g, k), kwargs
    ((1, 80, 300), (16, 80, 3), {"padding": 1}),                 # Whisper's conv1, shorter
    ((2, 16, 301), (16, 16, 3), {"stride": 2, "padding": 1}),    # conv2: stride 2, odd length
    ((2, 6, 20), (4, 3, 5), {"groups": 2, "dilation": 2}),
    ((3, 5, 9), (7, 5, 1), {}),
    ((4, 11), (6, 4, 3), {"padding": "same"}),                   # unbatched
]


@pytest.mark.parametrize("xs,ws,kw", CONV1D_CASES)
@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_conv1d(xs, ws, kw, activation):
    x, tx = pair(*xs)
    w, tw = pair(*ws)
    b, tb = pair(ws[0])
    expected = TF.conv1d(tx, tw, tb, **kw)
    if activation == "gelu":
        expected = TF.gelu(expected)
    assert_close(F.conv1d_act(x, w, b, activation=activation, **kw), expected, rtol=1e-4, atol=1e-4)
    conv = engine.nn.Conv1d(ws[1] * kw.get("groups", 1), ws[0], ws[2], stride=kw.get("stride", 1),
                            padding=kw.get("padding", 0), dilation=kw.get("dilation", 1), groups=kw.get("groups", 1))
    conv.load_state_dict({"weight": w, "bias": b})
    assert_close(conv(x), TF.conv1d(tx, tw, tb, **kw), rtol=1e-4, atol=1e-4)


def test_conv1d_errors():
    with pytest.raises(ValueError, match="conv1d expects"):
        F.conv1d(engine.ones(1, 3, 5, 5), engine.ones(2, 3, 3))
    with pytest.raises(ValueError, match="stride must be"):
        F.conv1d(engine.ones(1, 3, 5), engine.ones(2, 3, 3), stride=(1, 2))


def test_conv2d_act_errors():
    w = engine.ones(4, 3, 3, 3)
    with pytest.raises(ValueError, match="activation must be one of"):
        F.conv2d_act(engine.ones(1, 3, 5, 5), w, activation="swish")
    with pytest.raises(ValueError, match="negative"):
        F.conv2d_act(engine.ones(1, 3, 5, 5), w, padding=((1, -1), (0, 0)))


POOL_CASES = [
    ((1, 2, 8, 8), 2, None, 0, False),
    ((2, 3, 7, 9), 3, 2, 1, False),
    ((2, 3, 7, 9), 3, 2, 1, True),
    ((1, 1, 5, 6), (2, 3), (1, 2), (1, 1), True),
    ((1, 2, 10, 10), 3, 3, 0, True),
]


@pytest.mark.parametrize("shape,k,s,p,ceil", POOL_CASES)
def test_max_pool2d(shape, k, s, p, ceil):
    x, tx = pair(*shape)
    assert_close(F.max_pool2d(x, k, s, p, ceil_mode=ceil), TF.max_pool2d(tx, k, s, p, ceil_mode=ceil))


def test_max_pool2d_dilation_and_views():
    x, tx = pair(2, 9, 9, 3)
    assert_close(F.max_pool2d(x.permute(0, 3, 1, 2), 3, 2, 1, dilation=2),
                 TF.max_pool2d(tx.permute(0, 3, 1, 2), 3, 2, 1, dilation=2))


@pytest.mark.parametrize("shape,k,s,p,ceil", POOL_CASES)
@pytest.mark.parametrize("include_pad", [True, False])
def test_avg_pool2d(shape, k, s, p, ceil, include_pad):
    x, tx = pair(*shape)
    assert_close(F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=include_pad),
                 TF.avg_pool2d(tx, k, s, p, ceil_mode=ceil, count_include_pad=include_pad))
    assert_close(F.avg_pool2d(x, k, s, p, ceil_mode=ceil, divisor_override=5),
                 TF.avg_pool2d(tx, k, s, p, ceil_mode=ceil, divisor_override=5))


@pytest.mark.parametrize("shape,out", [((1, 2, 7, 7), 3), ((2, 3, 10, 9), (4, 5)), ((1, 1, 5, 5), 1),
                                       ((1, 2, 6, 8), (3, None)), ((1, 1, 3, 3), 5), ((4, 7, 6), 2)])
def test_adaptive_avg_pool2d(shape, out):
    x, tx = pair(*shape)
    assert_close(F.adaptive_avg_pool2d(x, out), TF.adaptive_avg_pool2d(tx, out))


def test_batch_norm_layer_norm_rms_norm():
    x, tx = pair(3, 5, 4, 6)
    m, tm = pair(5)
    v = engine.tensor(rng.uniform(0.5, 2, 5).astype(np.float32))
    w, tw = pair(5)
    b, tb = pair(5)
    tv = torch.tensor(v.numpy())
    assert_close(F.batch_norm(x, m, v, w, b, eps=1e-3), TF.batch_norm(tx, tm, tv, tw, tb, eps=1e-3))
    assert_close(F.batch_norm(x, m, v), TF.batch_norm(tx, tm, tv))
    y, ty = pair(2, 7, 9, scale=3.0)
    lw, tlw = pair(9)
    lb, tlb = pair(9)
    assert_close(F.layer_norm(y, (9,), lw, lb), TF.layer_norm(ty, (9,), tlw, tlb), atol=1e-5)
    assert_close(F.layer_norm(y, (7, 9)), TF.layer_norm(ty, (7, 9)), atol=1e-5)
    assert_close(F.layer_norm(y.transpose(1, 2), 7), TF.layer_norm(ty.transpose(1, 2), (7,)), atol=1e-5)
    assert_close(F.rms_norm(y, (9,), lw, eps=1e-5), TF.rms_norm(ty, (9,), tlw, eps=1e-5), atol=1e-5)
    assert_close(F.rms_norm(y, (9,)), TF.rms_norm(ty, (9,)), atol=1e-5)
    with pytest.raises(ValueError, match="normalized_shape"):
        F.layer_norm(y, (8,))
    with pytest.raises(NotImplementedError, match="inference"):
        F.batch_norm(x, m, v, training=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_kernels_equal_their_composites(dtype, monkeypatch):
    """batch_norm and hardtanh use the backend's fused kernels when it has them: same values
    (NaN and infinities included), same dtype, as the composite of primitives."""
    from engine.backends.numpy import kernels
    x = rng.standard_normal((2, 3, 4, 5)).astype(dtype) * 4
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    stats = [engine.tensor(rng.uniform(0.5, 2, 3).astype(dtype)) for _ in range(4)]
    calls = [lambda t: F.batch_norm(t, *stats, eps=1e-3), lambda t: F.batch_norm(t, stats[0], stats[1]),
             lambda t: F.relu6(t), lambda t: F.hardtanh(t[:, 1:], -0.5, 2)]
    fused = [f(engine.tensor(x)) for f in calls]
    monkeypatch.setattr(kernels, "FUSED", {})
    monkeypatch.setattr(engine.get_backend(), "fused", {})
    for f, got in zip(calls, fused):
        want = f(engine.tensor(x))
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("name", ["relu", "relu6", "silu", "sigmoid", "tanh", "gelu", "gelu_tanh", "hardtanh",
                                  "hardswish"])
def test_activations(name):
    x, tx = pair(4, 33, scale=5.0)
    x, tx = x[:, ::2], tx[:, ::2]
    if name == "gelu_tanh":
        assert_close(F.gelu(x, approximate="tanh"), TF.gelu(tx, approximate="tanh"))
    else:
        assert_close(getattr(F, name)(x), getattr(TF, name)(tx))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_log_softmax(dim):
    x, tx = pair(3, 17, 5, scale=30.0)             # large values: needs the max shift
    assert_close(F.softmax(x, dim), TF.softmax(tx, dim))
    assert_close(F.log_softmax(x, dim), TF.log_softmax(tx, dim), atol=1e-5)
    assert_close(x.softmax(dim), tx.softmax(dim))


def test_linear_and_embedding():
    x, tx = pair(2, 3, 7)
    w, tw = pair(5, 7)
    b, tb = pair(5)
    assert_close(F.linear(x, w, b), TF.linear(tx, tw, tb))
    assert_close(F.linear(x.transpose(0, 1), w), TF.linear(tx.transpose(0, 1), tw))
    table, ttable = pair(11, 4)
    ids = rng.integers(0, 11, (3, 5))
    assert_close(F.embedding(engine.tensor(ids), table), TF.embedding(torch.tensor(ids), ttable))
    with pytest.raises(IndexError, match="out of range"):
        F.embedding(engine.tensor([11]), table)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad(mode):
    x, tx = pair(2, 3, 5, 6)
    # torch accepts only these combinations for the non-constant modes
    for xx, txx, pads in [(x, tx, (1, 2, 3, 1)), (x, tx, (0, 0, 2, 0)), (x[0], tx[0], (1, 2)),
                          (x[:, :, ::2], tx[:, :, ::2], (2, 0, 1, 1))]:
        assert_close(F.pad(xx, pads, mode), TF.pad(txx, pads, mode))
    if mode == "constant":
        assert_close(F.pad(x, (1, 1, 0, 0, 1, 0), value=2.5), TF.pad(tx, (1, 1, 0, 0, 1, 0), value=2.5))
        assert_close(F.pad(x, (-1, 2, 1, -2)), TF.pad(tx, (-1, 2, 1, -2)))
        b = engine.tensor(x.numpy(), dtype=engine.bfloat16)
        assert_close(F.pad(b, (1, 1), value=1.5), TF.pad(torch.tensor(x.numpy()).bfloat16(), (1, 1), value=1.5))


@pytest.mark.parametrize("case", ["plain", "causal", "bool_mask", "float_mask", "scale", "gqa", "cross"])
def test_scaled_dot_product_attention(case):
    L, S = (5, 7) if case == "cross" else (6, 6)
    q, tq = pair(2, 4, L, 8)
    kv_heads = 2 if case == "gqa" else 4
    k, tk = pair(2, kv_heads, S, 8)
    v, tv = pair(2, kv_heads, S, 3)
    kw = {}
    tkw = {}
    if case == "causal":
        kw = tkw = {"is_causal": True}
    elif case == "bool_mask":
        m = rng.random((L, S)) > 0.3
        m[:, 0] = True                             # every query sees at least one key
        kw, tkw = {"attn_mask": engine.tensor(m)}, {"attn_mask": torch.tensor(m)}
    elif case == "float_mask":
        m = rng.standard_normal((2, 1, L, S)).astype(np.float32)
        kw, tkw = {"attn_mask": engine.tensor(m)}, {"attn_mask": torch.tensor(m)}
    elif case == "scale":
        kw = tkw = {"scale": 0.3}
    elif case == "gqa":
        kw = tkw = {"enable_gqa": True}
    assert_close(F.scaled_dot_product_attention(q, k, v, **kw), TF.scaled_dot_product_attention(tq, tk, tv, **tkw),
                 atol=1e-5)


def test_dropout_is_identity_in_inference():
    x, _ = pair(3, 4)
    assert F.dropout(x, 0.5) is x
    with pytest.raises(NotImplementedError):
        F.dropout(x, 0.5, training=True)


def test_normalize():
    x, tx = pair(4, 6)
    assert_close(F.normalize(x, dim=1), TF.normalize(tx, dim=1))
    assert_close(F.normalize(x, p=1, dim=0), TF.normalize(tx, p=1, dim=0))
