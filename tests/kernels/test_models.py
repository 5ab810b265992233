"""End to end: the real MNIST CNN and EfficientNet-Lite0 give the same logits on device="simd"
as on the numpy backend (max abs difference 1e-4; logits are O(10)) and the same top classes."""
from pathlib import Path

import numpy as np
import pytest

import engine
from models import efficientnet_lite as E
from models import mnist_cnn

DIGITS = Path(__file__).resolve().parents[2] / "samples" / "digits"
LOGITS_ATOL = 1e-4


def compare(numpy_model, simd_model, batch: np.ndarray):
    expected = numpy_model(engine.from_numpy(batch)).numpy()
    actual = simd_model(engine.from_numpy(batch, "simd")).numpy()
    assert np.abs(actual - expected).max() <= LOGITS_ATOL, np.abs(actual - expected).max()
    np.testing.assert_array_equal(actual.argmax(-1), expected.argmax(-1))
    return expected, actual


def test_mnist(rng):
    from engine.vision import read_image
    reference, simd = mnist_cnn.load(), mnist_cnn.load(device="simd")
    digits = np.stack([mnist_cnn.preprocess(read_image(p)) for p in sorted(DIGITS.glob("*.png"))])[:, None]
    assert len(digits) >= 4
    compare(reference, simd, digits.astype(np.float32))
    compare(reference, simd, rng.random((17, 1, 28, 28), dtype=np.float32))
    compare(reference, simd, rng.random((1, 1, 28, 28), dtype=np.float32))


@pytest.fixture(scope="module")
def effnets(effnet_weights):
    return E.load(effnet_weights), E.load(effnet_weights, "simd")


def test_efficientnet_lite0(effnets, sample_photos, rng):
    from engine.vision import read_image
    reference, simd = effnets
    photos = np.stack([E.preprocess(read_image(sample_photos[n])) for n in ("chelsea.png", "coffee.png")])
    expected, actual = compare(reference, simd, photos)
    for e, a in zip(expected, actual):
        assert list(np.argsort(-a)[:5]) == list(np.argsort(-e)[:5])
    compare(reference, simd, (rng.random((3, 3, 224, 224), dtype=np.float32) - 0.5) * 2)
