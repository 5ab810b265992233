"""Tensor.index_copy_ (Op.INDEX_COPY, the one in-place primitive: how a KV cache is written)
against NumPy's fancy-index assignment on every available backend: each axis, strided
destination views, dtypes, the checks, and that nothing but the named rows changes.

Under ENGINE_TEST_DEVICE (tests/webgpu/test_op_suite.py) only that device runs."""
import os

import numpy as np
import pytest

import engine

DEVICES = [os.environ["ENGINE_TEST_DEVICE"]] if os.environ.get("ENGINE_TEST_DEVICE") else engine.available_devices()
rng = np.random.default_rng(12)


def expected(dest: np.ndarray, axis: int, index, source: np.ndarray) -> np.ndarray:
    out = dest.copy()
    out[(slice(None),) * axis + (np.asarray(index, np.intp),)] = source
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape,axis,index", [((7,), 0, [3, 0, 6]), ((5, 3), 0, [4, 1]), ((2, 3, 11, 5), 2, [10]),
                                              ((2, 3, 11, 5), -2, [0, 5, 9]), ((3, 4, 5), 1, []),
                                              ((3, 4, 5), 2, [4, 3, 2, 1, 0])])
def test_index_copy_matches_numpy(device, shape, axis, index):
    dest = rng.standard_normal(shape).astype(np.float32)
    rows = list(shape)
    rows[axis] = len(index)
    source = rng.standard_normal(rows).astype(np.float32)
    x = engine.from_numpy(dest.copy(), device)
    out = x.index_copy_(axis, engine.tensor(index, dtype=engine.int64, device=device),
                        engine.from_numpy(source, device))
    assert out is x
    np.testing.assert_array_equal(x.numpy(), expected(dest, axis % len(shape), index, source))


@pytest.mark.parametrize("device", DEVICES)
def test_index_copy_into_a_strided_view_writes_through_to_its_base(device):
    base = rng.standard_normal((4, 6, 5)).astype(np.float32)
    x = engine.from_numpy(base.copy(), device)
    view = x.transpose(0, 1)[1:5]                  # (4, 4, 5), strided, offset
    src = rng.standard_normal((4, 2, 5)).astype(np.float32)
    view.index_copy_(1, engine.tensor([3, 0], device=device), engine.from_numpy(src, device))
    want = base.copy()
    np.swapaxes(want, 0, 1)[1:5][:, [3, 0]] = src
    np.testing.assert_array_equal(x.numpy(), want)


@pytest.mark.parametrize("device", DEVICES)
def test_index_copy_casts_the_source_and_keeps_integer_dtypes(device):
    x = engine.from_numpy(np.arange(12, dtype=np.int32).reshape(3, 4), device)
    x.index_copy_(0, [2], engine.from_numpy(np.full((1, 4), -5, np.int32), device))
    np.testing.assert_array_equal(x.numpy(), expected(np.arange(12, dtype=np.int32).reshape(3, 4), 0, [2],
                                                      np.full((1, 4), -5, np.int32)))
    y = engine.zeros(2, 3, device=device)
    y.index_copy_(1, [1], engine.from_numpy(np.ones((2, 1), np.int64), device))
    assert y.dtype is engine.float32
    np.testing.assert_array_equal(y.numpy(), [[0, 1, 0], [0, 1, 0]])


@pytest.mark.parametrize("device", DEVICES)
def test_index_copy_leaves_equal_valued_tensors_alone(device):
    """Small equal-valued tensors may share storage on a backend (webgpu): a write into one
    must not show in another."""
    a = engine.zeros(4, device=device)
    b = engine.zeros(4, device=device)
    a.index_copy_(0, [1], engine.from_numpy(np.array([7.0], np.float32), device))
    np.testing.assert_array_equal(a.numpy(), [0, 7, 0, 0])
    np.testing.assert_array_equal(b.numpy(), [0, 0, 0, 0])
    np.testing.assert_array_equal(engine.zeros(4, device=device).numpy(), [0, 0, 0, 0])


@pytest.mark.parametrize("device", DEVICES)
def test_index_copy_errors(device):
    x = engine.zeros(3, 4, device=device)
    before = x.numpy()
    with pytest.raises(IndexError, match="index 3 is out of range"):
        x.index_copy_(0, [3], engine.ones(1, 4, device=device))
    with pytest.raises(IndexError, match="index -1 is out of range"):
        x.index_copy_(0, [-1], engine.ones(1, 4, device=device))
    with pytest.raises(ValueError, match="does not fit"):
        x.index_copy_(0, [0, 1], engine.ones(1, 4, device=device))
    with pytest.raises(ValueError, match="1-D index"):
        x.index_copy_(0, [[0]], engine.ones(1, 4, device=device))
    with pytest.raises(TypeError, match="integer"):
        x.index_copy_(0, engine.tensor([0.0], device=device), engine.ones(1, 4, device=device))
    with pytest.raises(ValueError, match="stride-0"):
        engine.zeros(1, 4, device=device).expand(3, 4).index_copy_(0, [0], engine.ones(1, 4, device=device))
    np.testing.assert_array_equal(x.numpy(), before)      # a failed call writes nothing


def test_index_copy_on_the_device_skips_rows_it_cannot_check():
    """webgpu: an index computed on the GPU (no host copy to check) that falls outside the
    destination writes nothing rather than past the buffer."""
    if "webgpu" not in DEVICES:
        pytest.skip("webgpu is not among the devices under test")
    x = engine.zeros(3, 2, device="webgpu")
    idx = engine.tensor([1, 2], device="webgpu") + engine.tensor(1, device="webgpu")   # [2, 3], made on the GPU
    x.index_copy_(0, idx, engine.from_numpy(np.array([[1, 2], [3, 4]], np.float32), "webgpu"))
    np.testing.assert_array_equal(x.numpy(), [[0, 0], [0, 0], [1, 2]])
