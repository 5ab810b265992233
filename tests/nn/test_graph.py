"""engine.graph: a function captured once and replayed gives what calling it eagerly gives, on
every backend (numpy and simd replay prepared kernel calls, webgpu its recorded dispatches);
the contract's checks raise GraphError/InputError."""
import numpy as np
import pytest

import engine
import engine.nn.functional as F
from engine import graph
from engine.errors import InputError

REPLAYING = engine.available_devices()
rng = np.random.default_rng(8)


def block(x, positions, cache, w):
    """A bit of everything a decode step does: a linear, a norm, an in-place cache write, a
    masked attention over the cache, an activation, a reduction, a gather."""
    h = F.rms_norm(F.linear(x, w), (8,))                                      # (1, 1, 8)
    k = h.reshape(1, 1, 1, 8)
    cache.index_copy_(2, positions, k)                                        # (1, 1, 16, 8), in place
    mask = engine.le(engine.arange(16, device=x.device).reshape(1, -1), positions.reshape(-1, 1))
    out = F.scaled_dot_product_attention(k, cache, cache, attn_mask=mask)     # (1, 1, 1, 8)
    return F.silu(out).sum(-1), engine.index_select(w, 0, positions)


@pytest.mark.parametrize("device", REPLAYING)
def test_replay_equals_eager_step_after_step(device):
    w = engine.from_numpy(rng.standard_normal((8, 8)).astype(np.float32), device)
    xs = rng.standard_normal((6, 1, 1, 8)).astype(np.float32)
    captured_cache = engine.zeros((1, 1, 16, 8), device=device)
    eager_cache = engine.zeros((1, 1, 16, 8), device=device)
    x0, p0 = engine.from_numpy(xs[0], device), engine.tensor([0], device=device)
    g, first = graph.capture(lambda x, p: block(x, p, captured_cache, w), x0, p0)
    assert g.ops >= 8
    if device == "webgpu":       # one submission of every dispatch the step made
        assert g.prepared["dispatches"] >= g.ops - 2 and len(g.calls) == 1, g.prepared
    else:
        assert sum(g.prepared.values()) == g.ops
        assert g.prepared["ufunc"] >= 1, g.prepared
    if device == "simd":         # the C kernels replay as recorded calls; NumPy's elementwise as ufuncs
        assert g.prepared["native"] >= 4, g.prepared
    expected = block(x0, p0, eager_cache, w)
    np.testing.assert_array_equal(first[0].numpy(), expected[0].numpy())
    for t in range(1, 6):
        got = g.replay(xs[t], [t])
        expected = block(engine.from_numpy(xs[t], device), engine.tensor([t], device=device), eager_cache, w)
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_array_equal(captured_cache.numpy(), eager_cache.numpy())     # written in place too


@pytest.mark.parametrize("device", REPLAYING)
def test_a_host_read_while_capturing_is_an_error(device):
    x = engine.ones((3,), device=device)
    with pytest.raises(graph.GraphError, match="host"):
        graph.capture(lambda t: t * float(t.sum()), x)
    assert (x + 1).numpy().tolist() == [2.0, 2.0, 2.0]        # the backend is itself again


@pytest.mark.parametrize("device", REPLAYING)
def test_replay_checks_its_inputs(device):
    g, _ = graph.capture(lambda t: t * 2, engine.ones((2, 3), device=device))
    with pytest.raises(InputError, match="captured with"):
        g.replay(np.ones((3, 2)))
    with pytest.raises(InputError, match="1 inputs"):
        g.replay(np.ones((2, 3)), np.ones((2, 3)))
    np.testing.assert_array_equal(g.replay(np.full((2, 3), 4.0)).numpy(), np.full((2, 3), 8.0))


@pytest.mark.parametrize("device", REPLAYING)
def test_small_inputs_get_their_own_buffers(device):
    """A one-element input shares nothing with equal constants (webgpu keeps small tensors in one
    buffer per value): replaying with new values leaves the other tensors as they were."""
    five = engine.tensor([5], device=device)
    g, _ = graph.capture(lambda t: t + five, engine.tensor([5], device=device))
    assert g.replay([7]).numpy().tolist() == [12]
    assert five.numpy().tolist() == [5] and (engine.tensor([5], device=device) + 0).numpy().tolist() == [5]


def test_a_backend_that_can_do_neither_says_so(monkeypatch):
    x = engine.ones((2,), device="numpy")
    monkeypatch.setattr(type(x._backend), "storage", "elsewhere")
    with pytest.raises(graph.GraphError, match="not numpy"):
        graph.capture(lambda t: t * 2, x)
