"""engine.pipeline(task): a model with its pre- and post-processing behind one call.

    clf = engine.pipeline("digit-classification")
    clf("seven.png")            # [{"label": "7", "score": 0.98}, ...]
    clf = engine.pipeline("image-classification")
    clf("cat.jpg", top_k=3)     # [{"label": "tabby cat", "index": 281, "score": 0.71}, ...]
"""
from __future__ import annotations

import os
import warnings

import numpy as np

from .errors import DeviceLost, InputError


def _as_image(item) -> np.ndarray:
    """A path, bytes, PIL image or NumPy array -> NumPy image array."""
    from .vision import from_pillow, read_image
    if isinstance(item, (str, os.PathLike, bytes, bytearray)):
        return read_image(item)
    if hasattr(item, "mode") and hasattr(item, "size") and hasattr(item, "convert"):   # a PIL image
        return from_pillow(item)
    if isinstance(item, np.ndarray):
        return item
    raise InputError(f"expected an image path, bytes, a PIL image or a NumPy array, got {type(item).__name__}")


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    """(N, classes) logits -> probabilities."""
    shifted = np.exp(logits - logits.max(1, keepdims=True))
    return shifted / shifted.sum(1, keepdims=True)


class _ImageClassifier:
    """Shared by the classification pipelines: batches, backend, softmax, top-k, and
    carrying on when the GPU goes away (the model is rebuilt from its weights on the next
    best backend; `notice` says so)."""

    labels: list
    with_index = True                           # entries carry the class index
    batch_size = 16                             # images per forward pass (bounds memory)
    notice: str | None = None                   # set when the pipeline had to change backend

    def build(self, device: str | None):
        """The model on `device`, from the weights this pipeline was made with."""
        raise NotImplementedError

    def preprocess(self, images) -> np.ndarray:
        raise NotImplementedError

    def logits(self, batch: np.ndarray) -> np.ndarray:
        from .tensor import from_numpy
        x = np.ascontiguousarray(batch, np.float32)
        try:
            return self.model(from_numpy(x, self.device)).numpy()
        except DeviceLost as e:
            self._fall_back(e)
            return self.model(from_numpy(x, self.device)).numpy()

    def _fall_back(self, error: DeviceLost) -> None:
        from .device import best_available
        device = best_available()               # a lost device is no longer available
        self.notice = f"{error}; continuing on {device}"
        warnings.warn(self.notice, RuntimeWarning, stacklevel=3)
        self.model, self.device = self.build(device), device

    def probabilities(self, images) -> np.ndarray:
        """(N, classes) class probabilities for a list of images."""
        chunks = [images[i:i + self.batch_size] for i in range(0, len(images), self.batch_size)]
        return softmax_rows(np.concatenate([self.logits(self.preprocess(chunk)) for chunk in chunks]))

    def to(self, device: str):
        """Move the model to another backend (weights are not downloaded again)."""
        try:
            self.model.to(device)
        except DeviceLost:                      # its tensors are gone: build it again
            self.model = self.build(device)
        self.device = device
        return self

    def _top(self, probs: np.ndarray, top_k: int) -> list[dict]:
        order = np.argsort(-probs, kind="stable")[:top_k]
        if self.with_index:
            return [{"label": self.labels[i], "index": int(i), "score": float(probs[i])} for i in order]
        return [{"label": self.labels[i], "score": float(probs[i])} for i in order]

    def __call__(self, inputs, top_k: int = 5):
        """One image -> its predictions; a list of images -> a list of predictions."""
        single = not isinstance(inputs, (list, tuple))
        items = [inputs] if single else list(inputs)
        if not items:
            return []
        if not 1 <= top_k <= len(self.labels):
            raise InputError(f"top_k must be between 1 and {len(self.labels)}, got {top_k}")
        results = [self._top(p, top_k) for p in self.probabilities(items)]
        return results[0] if single else results


class DigitClassification(_ImageClassifier):
    """Handwritten digit recognition with models/mnist_cnn.py."""

    task = "digit-classification"
    with_index = False
    batch_size = 512

    def __init__(self, device: str | None = None, weights=None):
        from models import mnist_cnn
        self._mnist = mnist_cnn
        self.device, self.weights = device, mnist_cnn.WEIGHTS if weights is None else weights
        self.labels = mnist_cnn.LABELS
        self.model = self.build(device)

    def build(self, device):
        return self._mnist.fold_batchnorm(self._mnist.load(self.weights, device))

    def preprocess(self, images) -> np.ndarray:
        """Images -> (N, 1, 28, 28) float32 batch in MNIST's format."""
        return np.stack([self._mnist.preprocess(_as_image(im)) for im in images])[:, None]


class ImageClassification(_ImageClassifier):
    """ImageNet-1k classification with EfficientNet-Lite0 (models/efficientnet_lite.py).

    weights: a safetensors file, index, folder or URL, a .pth file, or a mapping; default
    the site's converted copy, dist/models/efficientnet_lite0/ (`python build.py` writes it).
    labels: a list of class names or a JSON file of them; default labels.json beside the
    weights, else beside the default weights.
    """

    task = "image-classification"
    batch_size = 8                              # peak ~0.1 GB of activations at 224x224

    def __init__(self, device: str | None = None, weights=None, labels=None):
        from models import efficientnet_lite
        self._effnet = efficientnet_lite
        self.device, self.weights = device, weights
        self.model = self.build(device)
        self.labels = self._labels(labels, weights)
        classes = self.model.config.num_classes
        if len(self.labels) != classes:
            raise InputError(f"{len(self.labels)} class names for a model with {classes} classes")

    def build(self, device):
        # BatchNorm folded into the convs: the same maths, one pass less per conv
        return self._effnet.fold_batchnorm(self._effnet.load(self.weights, device))

    def _labels(self, labels, weights) -> list[str]:
        if labels is not None and not isinstance(labels, (str, os.PathLike)):
            return [str(name) for name in labels]
        if labels is None:                      # a .pth or a mapping has no labels.json beside it
            beside = isinstance(weights, (str, os.PathLike)) and not os.fspath(weights).endswith((".pth", ".pt"))
            labels = self._effnet.labels_beside(weights if beside else self._effnet.WEIGHTS)
        return self._effnet.load_labels(labels)

    def preprocess(self, images) -> np.ndarray:
        """Images -> (N, 3, S, S) float32 batch, (pixel - 127) / 128."""
        size = self.model.config.image_size
        return np.stack([self._effnet.preprocess(_as_image(im), size) for im in images])


TASKS = {cls.task: cls for cls in (DigitClassification, ImageClassification)}


def pipeline(task: str, device: str | None = None, weights=None, **options):
    """A ready-to-call pipeline for `task` (one of engine.pipelines.TASKS) on `device`;
    `options` go to the task (image-classification: labels=)."""
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; available: {', '.join(TASKS)}")
    from .device import get_backend
    get_backend(device)                       # a clear error for an unknown device, before loading
    return TASKS[task](device=device, weights=weights, **options)

