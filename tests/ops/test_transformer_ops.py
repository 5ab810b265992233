"""F.gelu, F.silu, F.scaled_dot_product_attention, F.add_layer_norm and F.rotary_embedding (engine
extensions) against torch
on every available backend: the fused kernels where a backend has them (simd, webgpu), the
composites elsewhere, on odd shapes, strided views and masks. float32 tolerances: rtol 1e-5 with
atol 1e-6 (gelu) and 1e-5 (attention, layer norm: sums over a row).

Under ENGINE_TEST_DEVICE (tests/webgpu/test_op_suite.py) only that device runs."""
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import engine
import engine.nn.functional as F
from tests.helpers import assert_close

DEVICES = [os.environ["ENGINE_TEST_DEVICE"]] if os.environ.get("ENGINE_TEST_DEVICE") else engine.available_devices()
rng = np.random.default_rng(11)


def pair(shape, device, scale=1.0):
    a = (rng.standard_normal(shape) * scale).astype(np.float32)
    return engine.from_numpy(a, device), torch.tensor(a)


@pytest.fixture
def fused_calls(monkeypatch):
    """Names of the fused kernels each backend ran (so a test sees the fused path was taken)."""
    calls = []
    for device in DEVICES:
        backend = engine.get_backend(device)
        run = backend.run_fused

        def spy(name, *args, run=run):
            calls.append(name)
            return run(name, *args)
        monkeypatch.setattr(backend, "run_fused", spy)
    return calls


def has_fused(device, name) -> bool:
    return name in engine.get_backend(device).fused


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(device, approximate, fused_calls):
    x, tx = pair((3, 7, 29), device, scale=4.0)
    for view, tview in ((x, tx), (x.transpose(0, 2)[:, 1:], tx.transpose(0, 2)[:, 1:])):
        assert_close(F.gelu(view, approximate), TF.gelu(tview, approximate=approximate))
    special = engine.tensor([np.nan, np.inf, -np.inf, -0.0, -30.0, 30.0], device=device)
    # torch in float64: its float32 AVX-512 erf-GELU gives NaN at +inf (inf through its float64 and
    # scalar paths, and on AVX2 machines), so the reference would depend on the CPU
    tspecial = torch.tensor([np.nan, np.inf, -np.inf, -0.0, -30.0, 30.0], dtype=torch.float64)
    assert_close(F.gelu(special, approximate), TF.gelu(tspecial, approximate=approximate).float())   # -inf: NaN in both
    assert_close(engine.nn.GELU(approximate)(x), torch.nn.GELU(approximate)(tx))
    assert ("gelu" in fused_calls) == has_fused(device, "gelu")
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(x, "erf")


def _padding(n, s, lengths):
    return np.arange(s).reshape(1, 1, 1, s) < np.asarray(lengths).reshape(n, 1, 1, 1)       # (N, 1, 1, S)


ATTENTION_CASES = ["plain", "bool_padding", "float_padding", "float_mask", "bool_2d", "causal", "causal_cross",
                   "scale", "gqa", "mqa_broadcast", "head_dim_70", "long_keys"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_scaled_dot_product_attention(device, case, fused_calls):
    n, h, hkv, l, s, e, ev = 2, 4, 4, 6, 6, 8, 8
    if case in ("causal_cross", "long_keys"):
        l, s = (5, 9) if case == "causal_cross" else (3, 150)
    if case in ("gqa", "mqa_broadcast"):
        hkv = 2 if case == "gqa" else 1
    if case == "head_dim_70":
        e, ev = 70, 70
    q, tq = pair((n, h, l, e), device)
    k, tk = pair((n, hkv, s, e), device)
    v, tv = pair((n, hkv, s, ev), device)
    kw = {}
    if case in ("bool_padding", "long_keys"):
        kw["attn_mask"] = _padding(n, s, [s, s - 2 if case == "bool_padding" else 70])
    elif case == "float_padding":
        kw["attn_mask"] = np.where(_padding(n, s, [s, 3]), 0, -1e4).astype(np.float32)
    elif case == "float_mask":
        kw["attn_mask"] = rng.standard_normal((n, 1, l, s)).astype(np.float32)
    elif case == "bool_2d":
        m = rng.random((l, s)) > 0.4
        m[:, 0] = True
        kw["attn_mask"] = m
    elif case in ("causal", "causal_cross"):
        kw["is_causal"] = True
    elif case == "scale":
        kw["scale"] = 0.3
    elif case == "gqa":
        kw["enable_gqa"] = True
    tkw = {name: torch.tensor(value) if isinstance(value, np.ndarray) else value for name, value in kw.items()}
    kw = {name: engine.from_numpy(value, device) if isinstance(value, np.ndarray) else value
          for name, value in kw.items()}
    got = F.scaled_dot_product_attention(q, k, v, **kw)
    assert_close(got, TF.scaled_dot_product_attention(tq, tk, tv, **tkw), atol=1e-5)
    assert got.shape == (n, h, l, ev)
    assert ("attention" in fused_calls) == has_fused(device, "attention")


@pytest.mark.parametrize("device", DEVICES)
def test_attention_on_bert_head_views(device, fused_calls):
    """BERT's q, k, v: one (N, L, 3*H*D) projection viewed (N, L, H, D) and transposed to
    (N, H, L, D), no copies; the result transposed back and merged is a view of the kernel's
    (N, L, H, D) output, so the output projection reads it without a copy."""
    n, l, h, d = 3, 13, 4, 8
    x, tx = pair((n, l, 3 * h * d), device)
    mask = _padding(n, l, [13, 9, 1])
    m, tm = engine.from_numpy(mask, device), torch.tensor(mask)
    heads = [x[..., i * h * d:(i + 1) * h * d].reshape(n, l, h, d).transpose(1, 2) for i in range(3)]
    theads = [tx[..., i * h * d:(i + 1) * h * d].reshape(n, l, h, d).transpose(1, 2) for i in range(3)]
    got = F.scaled_dot_product_attention(*heads, attn_mask=m).transpose(1, 2)
    assert_close(got.reshape(n, l, h * d), TF.scaled_dot_product_attention(*theads, attn_mask=tm)
                 .transpose(1, 2).reshape(n, l, h * d), atol=1e-5)
    if has_fused(device, "attention"):
        assert got.is_contiguous()                    # (N, L, H, D) as the kernel wrote it
        assert fused_calls.count("attention") == 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask_kind", ["bool", "float -inf"])
def test_attention_rows_without_keys_are_nan(device, mask_kind):
    """A query with every key masked: softmax of -inf everywhere is NaN in the composite, so
    every backend gives NaN there (torch 2.13 gives 0: the one place we differ from it)."""
    q, tq = pair((3, 2, 5, 8), device)
    k, tk = pair((3, 2, 7, 8), device)
    v, tv = pair((3, 2, 7, 4), device)
    keep = _padding(3, 7, [7, 0, 4])                                 # batch 1: no key at all
    mask = keep if mask_kind == "bool" else np.where(keep, 0, -np.inf).astype(np.float32)
    got = F.scaled_dot_product_attention(q, k, v, engine.from_numpy(mask, device)).numpy()
    want = TF.scaled_dot_product_attention(tq, tk, tv, torch.tensor(mask)).numpy()
    assert np.isnan(got[1]).all() and (want[1] == 0).all()
    assert not np.isnan(got[[0, 2]]).any()
    assert_close(got[[0, 2]], want[[0, 2]], atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_kernels_equal_their_composites(device, monkeypatch):
    """The same values (to float32 rounding), NaN in the same places, shapes and dtypes, with the
    backend's fused kernels and without them."""
    q, _ = pair((2, 3, 6, 8), device)
    k, _ = pair((2, 3, 9, 8), device)
    v, _ = pair((2, 3, 9, 5), device)
    mask = engine.from_numpy(_padding(2, 9, [9, 0]), device)
    x, _ = pair((4, 5, 16), device, scale=3.0)
    r, _ = pair((4, 5, 16), device)
    w, _ = pair((16,), device)
    angles = engine.from_numpy(np.linspace(-20, 20, 5 * 16, dtype=np.float32).reshape(5, 16), device)
    calls = [lambda: F.gelu(x), lambda: F.gelu(x, "tanh"), lambda: F.silu(x), lambda: F.silu_mul(x, r),
             lambda: F.rotary_embedding(x, angles.cos(), angles.sin()),
             lambda: F.scaled_dot_product_attention(q, k, v, mask), lambda: F.scaled_dot_product_attention(
                 q, k, v, is_causal=True), lambda: F.add_layer_norm(x, r, 16, w, w, 1e-5, w)]
    fused = [f() for f in calls]
    backend = engine.get_backend(device)
    monkeypatch.setattr(backend, "fused", {name: fn for name, fn in backend.fused.items()
                                           if name not in ("gelu", "silu", "silu_mul", "rope", "attention",
                                                            "add_layer_norm")})
    for f, got in zip(calls, fused):
        want = f()
        assert got.dtype == want.dtype and got.shape == want.shape
        assert_close(got, want, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_add_layer_norm(device, fused_calls):
    x, tx = pair((2, 7, 37), device, scale=3.0)
    r, tr = pair((2, 7, 37), device)
    ib, tib = pair((37,), device)
    w, tw = pair((37,), device)
    b, tb = pair((37,), device)
    for args, targs in (((ib, w, b), (tib, tw, tb)), ((None, w, None), (None, tw, None)),
                        ((ib, None, None), (tib, None, None)), ((None, None, None), (None, None, None))):
        got = F.add_layer_norm(x, r, (37,), args[1], args[2], 1e-5, input_bias=args[0])
        total = tx + tr if targs[0] is None else (tx + targs[0]) + tr
        assert_close(got, TF.layer_norm(total, (37,), targs[1], targs[2], 1e-5), atol=1e-5)
    assert ("add_layer_norm" in fused_calls) == has_fused(device, "add_layer_norm")
    # transposed views, two normalized dims, a broadcast residual (composite path)
    assert_close(F.add_layer_norm(x.transpose(0, 1), r.transpose(0, 1), 37, w, b),
                 TF.layer_norm(tx.transpose(0, 1) + tr.transpose(0, 1), (37,), tw, tb), atol=1e-5)
    w2, tw2 = pair((7, 37), device)
    assert_close(F.add_layer_norm(x, r, (7, 37), w2), TF.layer_norm(tx + tr, (7, 37), tw2), atol=1e-5)
    assert_close(F.add_layer_norm(x, r[0], 37, w, b, input_bias=ib),
                 TF.layer_norm(tx + tib + tr[0], (37,), tw, tb), atol=1e-5)
    with pytest.raises(ValueError, match="normalized_shape"):
        F.add_layer_norm(x, r, 36)



def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], -1)


@pytest.mark.parametrize("device", DEVICES)
def test_silu_and_rotary_embedding(device, fused_calls):
    """F.silu against torch; F.rotary_embedding against transformers' formula (x * cos +
    rotate_half(x) * sin) on contiguous tensors and on head views of a stacked projection."""
    x, tx = pair((3, 7, 29), device, scale=4.0)
    assert_close(F.silu(x), TF.silu(tx))
    assert_close(F.silu(x.transpose(0, 2)[:, 1:]), TF.silu(tx.transpose(0, 2)[:, 1:]))
    assert ("silu" in fused_calls) == has_fused(device, "silu")
    qkv, tqkv = pair((2, 5, 3 * 16 + 8), device)                       # (N, T, 3 heads of 16 + more)
    q, tq = (a[..., :48].reshape(2, 5, 3, 16).transpose(1, 2) for a in (qkv, tqkv))   # (N, H, T, d) views
    angles = rng.uniform(-30, 30, (5, 16)).astype(np.float32)
    cos, sin = (engine.from_numpy(f(angles), device) for f in (np.cos, np.sin))
    tcos, tsin = torch.tensor(np.cos(angles)), torch.tensor(np.sin(angles))
    assert_close(F.rotary_embedding(q, cos, sin), tq * tcos + rotate_half(tq) * tsin)
    assert_close(F.rotary_embedding(q[:, :, 2:3], cos[2:3], sin[2:3]), tq[:, :, 2:3] * tcos[2:3] +
                 rotate_half(tq[:, :, 2:3]) * tsin[2:3])
    assert ("rope" in fused_calls) == has_fused(device, "rope")
    with pytest.raises(ValueError, match="d even"):
        F.rotary_embedding(qkv[..., :5], cos, sin)
    with pytest.raises(ValueError, match="must be"):
        F.rotary_embedding(q, cos[:, :8], sin[:, :8])


@pytest.mark.parametrize("device", DEVICES)
def test_silu_mul(device, fused_calls):
    """F.silu_mul(gate, up) against torch's silu(gate) * up: the halves of a stacked gate/up
    projection read in place, contiguous tensors, transposed views, special values."""
    gu, tgu = pair((2, 5, 2 * 37), device, scale=4.0)                  # (N, T, gate | up)
    assert_close(F.silu_mul(gu[..., :37], gu[..., 37:]), TF.silu(tgu[..., :37]) * tgu[..., 37:])
    g, tg = pair((3, 7, 29), device, scale=4.0)
    u, tu = pair((3, 7, 29), device)
    assert_close(F.silu_mul(g, u), TF.silu(tg) * tu)
    assert_close(F.silu_mul(g.transpose(0, 2), u.transpose(0, 2)), TF.silu(tg.transpose(0, 2)) * tu.transpose(0, 2))
    assert ("silu_mul" in fused_calls) == has_fused(device, "silu_mul")
    special = engine.tensor([np.nan, np.inf, -np.inf, -0.0, -30.0, 30.0, 1.0], device=device)
    ones = engine.tensor([1.0] * 7, device=device)
    tspecial = torch.tensor([np.nan, np.inf, -np.inf, -0.0, -30.0, 30.0, 1.0], dtype=torch.float64)
    assert_close(F.silu_mul(special, ones), F.silu(special))                 # the same NaN/inf as F.silu
    assert_close(F.silu_mul(ones, special), (TF.silu(torch.ones(7, dtype=torch.float64)) * tspecial).float())
    with pytest.raises(ValueError, match="one shape"):
        F.silu_mul(g, u[..., 1:])
