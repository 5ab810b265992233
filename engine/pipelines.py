"""engine.pipeline(task): a model with its pre- and post-processing behind one call.

    clf = engine.pipeline("digit-classification")
    clf("seven.png")            # [{"label": "7", "score": 0.98}, ...]
"""
from __future__ import annotations

import os

import numpy as np

from .errors import InputError


def _as_image(item) -> np.ndarray:
    """A path, bytes, PIL image or NumPy array -> NumPy image array."""
    from .vision import read_image
    if isinstance(item, (str, os.PathLike, bytes, bytearray)):
        return read_image(item)
    if hasattr(item, "mode") and hasattr(item, "size") and hasattr(item, "convert"):   # a PIL image
        return np.asarray(item.convert("RGBA") if item.mode not in ("L", "LA", "RGB", "RGBA") else item)
    if isinstance(item, np.ndarray):
        return item
    raise InputError(f"expected an image path, bytes, a PIL image or a NumPy array, got {type(item).__name__}")


def _top(probs: np.ndarray, labels, top_k: int) -> list[dict]:
    order = np.argsort(-probs, kind="stable")[:top_k]
    return [{"label": labels[i], "score": float(probs[i])} for i in order]


class DigitClassification:
    """Handwritten digit recognition with models/mnist_cnn.py."""

    task = "digit-classification"

    def __init__(self, device: str | None = None, weights=None):
        from models import mnist_cnn
        self._mnist = mnist_cnn
        self.device = device
        self.model = mnist_cnn.load(mnist_cnn.WEIGHTS if weights is None else weights, device)

    def preprocess(self, images) -> np.ndarray:
        """Images -> (N, 1, 28, 28) float32 batch in MNIST's format."""
        return np.stack([self._mnist.preprocess(_as_image(im)) for im in images])[:, None]

    def logits(self, batch: np.ndarray) -> np.ndarray:
        from .tensor import from_numpy
        return self.model(from_numpy(np.ascontiguousarray(batch, np.float32), self.device)).numpy()

    def probabilities(self, images) -> np.ndarray:
        """(N, 10) class probabilities for a list of images."""
        logits = self.logits(self.preprocess(images))
        shifted = np.exp(logits - logits.max(1, keepdims=True))
        return shifted / shifted.sum(1, keepdims=True)

    def to(self, device: str) -> "DigitClassification":
        """Move the model to another backend (weights are not downloaded again)."""
        self.model.to(device)
        self.device = device
        return self

    def __call__(self, inputs, top_k: int = 5):
        """One image -> its predictions; a list of images -> a list of predictions."""
        single = not isinstance(inputs, (list, tuple))
        items = [inputs] if single else list(inputs)
        if not items:
            return []
        if not 1 <= top_k <= 10:
            raise InputError(f"top_k must be between 1 and 10, got {top_k}")
        results = [_top(p, self._mnist.LABELS, top_k) for p in self.probabilities(items)]
        return results[0] if single else results


TASKS = {DigitClassification.task: DigitClassification}


def pipeline(task: str, device: str | None = None, weights=None):
    """A ready-to-call pipeline for `task` (one of engine.pipelines.TASKS) on `device`."""
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; available: {', '.join(TASKS)}")
    from .device import get_backend
    get_backend(device)                       # a clear error for an unknown device, before loading
    return TASKS[task](device=device, weights=weights)

