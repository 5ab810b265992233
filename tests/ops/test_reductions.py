"""Reductions, matmul, joins and views against torch and NumPy."""
import numpy as np
import pytest
import torch

import engine
from tests.helpers import assert_close

rng = np.random.default_rng(1)


def pair(shape, dtype=np.float32):
    a = rng.standard_normal(shape).astype(dtype)
    return engine.tensor(a), torch.tensor(a)


@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 2), (1, -1)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_amax_amin(dim, keepdim):
    e, t = pair((3, 5, 7))
    e, t = e.permute(2, 0, 1), t.permute(2, 0, 1)              # non-contiguous input
    kw = {} if dim is None else {"dim": dim, "keepdim": keepdim}
    assert_close(e.sum(**kw), t.sum(**kw))
    assert_close(e.mean(**kw), t.mean(**kw))
    assert_close(engine.amax(e, **kw), torch.amax(t, **kw) if dim is not None else t.max())
    assert_close(engine.amin(e, **kw), torch.amin(t, **kw) if dim is not None else t.min())
    np.testing.assert_allclose(e.sum(**kw).numpy(), np.sum(t.numpy(), axis=dim, keepdims=keepdim and dim is not None),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_argmax_with_dim(dim, keepdim):
    e, t = pair((4, 6, 5))
    v, i = e.max(dim, keepdim)
    tv, ti = t.max(dim, keepdim)
    assert_close(v, tv)
    assert_close(i, ti)
    v, i = engine.min(e, dim, keepdim=keepdim)
    tv, ti = torch.min(t, dim, keepdim=keepdim)
    assert_close(v, tv)
    assert_close(i, ti)
    assert_close(e.argmax(dim, keepdim), t.argmax(dim, keepdim))
    assert_close(e.argmin(dim), t.argmin(dim))
    assert_close(e.argmax(), t.argmax())
    assert_close(e.max(), t.max())
    assert_close(engine.max(e, e * 0.5), torch.max(t, t * 0.5))


def test_integer_and_bool_sums_are_int64():
    a = rng.integers(-5, 5, (3, 4)).astype(np.int32)
    assert engine.tensor(a).sum().dtype is engine.int64
    assert engine.tensor(a).sum(1).tolist() == torch.tensor(a).sum(1).tolist()
    m = engine.tensor(a > 0)
    assert m.sum().item() == int((a > 0).sum()) and m.sum().dtype is engine.int64
    assert m.all().item() == bool((a > 0).all()) and m.any(1).tolist() == (a > 0).any(1).tolist()
    with pytest.raises(TypeError, match="floating point"):
        engine.tensor(a).mean()


def test_var_matches_torch():
    e, t = pair((6, 9))
    assert_close(e.var(1), t.var(1))
    assert_close(engine.var(e, 0, correction=0, keepdim=True), torch.var(t, 0, correction=0, keepdim=True))


@pytest.mark.parametrize("k,dim,largest", [(1, -1, True), (3, -1, True), (5, 0, False), (7, 1, True), (7, -1, False)])
def test_topk(k, dim, largest):
    a = rng.permutation(5 * 7 * 3).reshape(5, 7, 3).astype(np.float32)   # distinct values: no ties
    e, t = engine.tensor(a).transpose(1, 2), torch.tensor(a).transpose(1, 2)
    if k > e.shape[dim]:
        with pytest.raises(ValueError, match="out of range"):
            engine.topk(e, k, dim, largest)
        return
    v, i = engine.topk(e, k, dim, largest)
    tv, ti = torch.topk(t, k, dim, largest)
    assert_close(v, tv)
    assert_close(i, ti)


@pytest.mark.parametrize("sa,sb", [
    ((5,), (5,)), ((5,), (5, 3)), ((4, 5), (5,)), ((4, 5), (5, 3)), ((2, 4, 5), (5, 3)), ((2, 4, 5), (2, 5, 3)),
    ((3, 1, 4, 5), (2, 5, 3)), ((1, 7), (7, 1)), ((13, 17), (17, 11)), ((2, 0, 3), (3, 4))])
def test_matmul_shapes_and_batching(sa, sb):
    ea, ta = pair(sa)
    eb, tb = pair(sb)
    assert_close(ea @ eb, ta @ tb)
    np.testing.assert_allclose((ea @ eb).numpy(), np.matmul(ta.numpy(), tb.numpy()), rtol=1e-5, atol=1e-5)


def test_matmul_non_contiguous_and_mixed_dtypes():
    ea, ta = pair((6, 4, 9))
    eb, tb = pair((3, 4))
    assert_close(ea.transpose(1, 2)[:, ::2] @ eb.T, ta.transpose(1, 2)[:, ::2] @ tb.T)
    half = engine.tensor(rng.standard_normal((4, 5)), dtype=engine.float16)
    out = half @ engine.tensor(np.eye(5, dtype=np.float32))
    assert out.dtype is engine.float32
    assert_close(out, torch.tensor(half.numpy()))
    with pytest.raises(ValueError, match=r"\(4, 9\) and \(4, 9\)"):
        ea[0] @ ea[0]
    ints = engine.tensor([[1, 2], [3, 4]])
    assert (ints @ ints).tolist() == [[7, 10], [15, 22]]


def test_cat_stack_split_chunk():
    ea, ta = pair((2, 3, 4))
    eb, tb = pair((2, 5, 4))
    assert_close(engine.cat([ea, eb], 1), torch.cat([ta, tb], 1))
    assert_close(engine.cat([ea.transpose(0, 2), eb.transpose(0, 2)], -2), torch.cat([ta.transpose(0, 2),
                                                                                      tb.transpose(0, 2)], -2))
    assert_close(engine.stack([ea, ea * 2], -1), torch.stack([ta, ta * 2], -1))
    assert_close(engine.stack([ea, ea], 1), torch.stack([ta, ta], 1))
    for e_part, t_part in zip(engine.split(eb, 2, 1), torch.split(tb, 2, 1)):
        assert_close(e_part, t_part)
    for e_part, t_part in zip(engine.split(eb, [1, 3, 1], 1), torch.split(tb, [1, 3, 1], 1)):
        assert_close(e_part, t_part)
    for e_part, t_part in zip(eb.chunk(3, 1), tb.chunk(3, 1)):
        assert_close(e_part, t_part)
    with pytest.raises(ValueError, match="tensor 1 has shape"):
        engine.cat([ea, eb], 0)
    with pytest.raises(ValueError, match="add up"):
        engine.split(eb, [1, 1], 1)
    assert engine.cat([engine.tensor([1]), engine.tensor([0.5])]).dtype is engine.float32


def test_views_share_storage_and_match_numpy():
    a = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    e = engine.from_numpy(a)
    cases = [
        lambda x: x.reshape(6, 20) if isinstance(x, np.ndarray) else x.view(6, 20),
        lambda x: x.transpose(0, 2, 1, 3) if isinstance(x, np.ndarray) else x.transpose(1, 2),
        lambda x: x[:, 1:, ::2, 1::3],
        lambda x: x[1, ..., -1],
        lambda x: x[None, :, None, 0],
        lambda x: x[:, ::2].reshape(2, -1) if isinstance(x, np.ndarray) else x[:, ::2].reshape(2, -1),
        lambda x: x.transpose(3, 2, 1, 0).reshape(5, 4, 6) if isinstance(x, np.ndarray) else x.permute(3, 2, 1, 0)
        .reshape(5, 4, 6),
        lambda x: np.broadcast_to(x[:1], (3, 3, 4, 5)) if isinstance(x, np.ndarray) else x[:1].expand(3, -1, -1, -1),
        lambda x: x.reshape(2, 3, 20)[..., 5:15:4] if isinstance(x, np.ndarray) else x.flatten(2)[..., 5:15:4],
        lambda x: x[:, [2, 0]],
    ]
    for f in cases:
        np.testing.assert_array_equal(f(e).numpy(), f(a))
    assert e.transpose(1, 2)._buf is e._buf and not e.transpose(1, 2).is_contiguous()
    assert e[:, 1].contiguous().is_contiguous()
    with pytest.raises(ValueError, match="reshape"):
        e.transpose(1, 2).view(-1)
    assert e.transpose(1, 2).reshape(-1).tolist() == a.transpose(0, 2, 1, 3).reshape(-1).tolist()
    with pytest.raises(IndexError):
        e[2]
    assert e.squeeze().shape == (2, 3, 4, 5) and e[:, :1].squeeze(1).shape == (2, 4, 5)
    assert e.unflatten(3, (5, 1)).shape == (2, 3, 4, 5, 1)


@pytest.mark.float64
def test_constructors_and_conversions():
    assert engine.tensor([1.5, 2]).dtype is engine.float32
    assert engine.tensor([1, 2]).dtype is engine.int64
    assert engine.tensor([True]).dtype is engine.bool_
    assert engine.tensor(np.zeros(2)).dtype is engine.float64
    assert engine.zeros(2, 3).shape == (2, 3) and engine.ones((4,), dtype=engine.int8).tolist() == [1] * 4
    assert engine.arange(5).tolist() == list(range(5)) and engine.arange(0, 1, 0.25).dtype is engine.float32
    assert_close(engine.tril(engine.ones(3, 4)), torch.tril(torch.ones(3, 4)))
    assert_close(engine.triu(engine.ones(3, 4), 1), torch.triu(torch.ones(3, 4), 1))
    b = engine.tensor([1.0, 2.5], dtype=engine.bfloat16)
    assert b.numpy().dtype == np.float32 and b.tolist() == [1.0, 2.5]
    assert engine.tensor(b).dtype is engine.bfloat16
    assert engine.tensor(3.5).item() == 3.5 and float(engine.tensor([2.0])) == 2.0
    with pytest.raises(TypeError, match="unsupported dtype"):
        engine.from_numpy(np.zeros(2, np.complex64))


def test_unknown_device_lists_available_ones():
    with pytest.raises(engine.EngineError, match="available: numpy"):
        engine.zeros(2, device="cuda")
    with pytest.raises(engine.EngineError, match="unknown device 'metal'"):
        engine.tensor([1.0]).to("metal")
