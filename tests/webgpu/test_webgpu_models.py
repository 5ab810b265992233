"""MNIST and EfficientNet-Lite0 end to end on webgpu against the numpy backend, on the real
weights; a forward pass keeps everything on the device and reads back only its output."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import engine
from engine.backends import webgpu

DIGITS = Path(__file__).resolve().parents[2] / "samples" / "digits"

# float32 on a different summation order (tiled GEMM, tree reductions): per logit
MNIST_ATOL, EFFNET_ATOL = 1e-4, 2e-3


@pytest.mark.slow
def test_mnist_logits_equal_numpy(gpu, mnist):
    from models import mnist_cnn
    images, _, _, held = mnist
    x = images[held[:32], None].astype(np.float32)
    expected = mnist_cnn.load()(engine.from_numpy(x)).numpy()
    got = mnist_cnn.load(device="webgpu")(engine.from_numpy(x, "webgpu")).numpy()
    assert np.abs(got - expected).max() <= MNIST_ATOL
    assert (got.argmax(1) == expected.argmax(1)).all()


@pytest.mark.slow
def test_efficientnet_logits_equal_numpy_and_read_back_once(gpu, effnet_state):
    from models import efficientnet_lite
    state = {k: v.numpy() for k, v in effnet_state.items()}
    x = np.random.default_rng(5).standard_normal((2, 3, 224, 224)).astype(np.float32)
    expected = efficientnet_lite.fold_batchnorm(efficientnet_lite.load(state))(engine.from_numpy(x)).numpy()
    model = efficientnet_lite.fold_batchnorm(efficientnet_lite.load(state, "webgpu"))
    xg = engine.from_numpy(x, "webgpu")
    before = dict(gpu.stats)
    logits = model(xg)
    assert gpu.stats["reads"] == before["reads"]                        # nothing came back yet
    got = logits.numpy()
    assert gpu.stats["reads"] == before["reads"] + 1                    # only the (2, 1000) logits
    assert gpu.stats["read_bytes"] - before["read_bytes"] == 2 * 1000 * 4
    assert np.abs(got - expected).max() <= EFFNET_ATOL * np.abs(expected).max()
    assert (got.argmax(1) == expected.argmax(1)).all()


def test_digit_pipeline_on_webgpu(gpu):
    cpu, gpu_pipe = engine.pipeline("digit-classification"), engine.pipeline("digit-classification", device="webgpu")
    for digit in "0137":
        a, b = cpu(DIGITS / f"{digit}.png", top_k=3), gpu_pipe(DIGITS / f"{digit}.png", top_k=3)
        assert [p["label"] for p in a] == [p["label"] for p in b] and a[0]["label"] == digit
        assert all(abs(p["score"] - q["score"]) < 1e-4 for p, q in zip(a, b))


@pytest.mark.slow
def test_image_pipeline_on_webgpu(gpu, effnet_weights, sample_photos):
    cpu = engine.pipeline("image-classification", weights=effnet_weights)
    gpu_pipe = engine.pipeline("image-classification", weights=effnet_weights, device="webgpu")
    photo = str(sample_photos["chelsea.png"])
    a, b = cpu(photo, top_k=3), gpu_pipe(photo, top_k=3)
    assert [p["index"] for p in a] == [p["index"] for p in b]
    assert all(abs(p["score"] - q["score"]) < 1e-3 for p, q in zip(a, b))


def test_software_adapters_are_never_picked_automatically(gpu):
    if gpu.info.software:
        assert not engine.device.auto_selectable("webgpu")
        assert engine.device.best_available() != "webgpu"
    else:
        assert engine.device.best_available() == "webgpu"
    assert "webgpu" in engine.available_devices()                       # asked for by name, it works
    assert (engine.ones(3, device="webgpu") * 2).sum().item() == 6.0


def test_what_webgpu_cannot_hold_is_refused_clearly(gpu):
    with pytest.raises(engine.EngineError, match="float64 tensors are not supported on webgpu"):
        engine.from_numpy(np.zeros(3), "webgpu")
    with pytest.raises(engine.EngineError, match="int64 value 4294967296 does not fit"):
        engine.tensor([1, 2**32], device="webgpu")
    t = engine.tensor([-2**31, 2**31 - 1], device="webgpu")
    assert t.dtype is engine.int64 and t.tolist() == [-2**31, 2**31 - 1]


def test_adapter_is_described(gpu):
    info = webgpu.device().info
    assert info.vendor or info.device
    assert str(info)
