"""Build time only: the tensors of an ONNX file (PyPI `onnx`), for models published as ONNX.

PP-OCR's exports (Paddle2ONNX) keep their weights in Constant nodes rather than initializers;
both are read. The page never parses ONNX: the build converts what this gives into safetensors.

`read_onnx(data, name)` -> OnnxCheckpoint, a mapping name -> engine Tensor in the order the
graph's nodes first use them (a model file's `convert` relies on that order), with
    .nodes     [Node(op, inputs, outputs, attrs)] in the graph's (topological) order
    .metadata  {key: value} of the model's metadata_props (PP-OCR's recognizer: "character")
    .consumers {tensor name: [index into nodes]} of every node input
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

MAX_BYTES = 1 << 31           # an ONNX protobuf cannot exceed 2 GiB; larger input is not one


class Node(NamedTuple):
    op: str
    inputs: tuple
    outputs: tuple
    attrs: dict


class OnnxCheckpoint(Mapping):
    def __init__(self, tensors: OrderedDict, nodes: list, metadata: dict, name: str):
        self._tensors, self.nodes, self.metadata, self.name = tensors, nodes, metadata, name
        self.consumers: dict = {}
        for i, node in enumerate(nodes):
            for t in node.inputs:
                self.consumers.setdefault(t, []).append(i)

    def __getitem__(self, key):
        return self._tensors[key]

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self):
        return len(self._tensors)

    def array(self, key) -> np.ndarray:
        return self._tensors[key].numpy()


def read_onnx(data: bytes, name: str = "model.onnx") -> OnnxCheckpoint:
    """The weights, graph and metadata of the ONNX file `data`; a WeightsError naming `name` if
    it is not one."""
    from engine.errors import WeightsError
    from engine.tensor import from_numpy
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise WeightsError(f"{name}: reading ONNX at build time needs PyPI onnx "
                           "(pip install -e '.[site]')") from None
    if len(data) >= MAX_BYTES:
        raise WeightsError(f"{name}: {len(data)} bytes is more than an ONNX file can hold")
    try:
        model = onnx.load_from_string(bytes(data))
    except Exception as e:          # protobuf's DecodeError and friends
        raise WeightsError(f"{name}: not an ONNX model ({type(e).__name__}: {str(e)[:200]})") from None
    graph = model.graph
    if not graph.node:
        raise WeightsError(f"{name}: the ONNX graph has no nodes")
    def array(tensor) -> np.ndarray:
        """A TensorProto's values; never from outside the file (external data is refused: the onnx
        package would read the path the file names), only the numeric types weights have."""
        if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.external_data:
            raise WeightsError(f"{name}: tensor {tensor.name!r} keeps its data in another file; "
                               "only self-contained ONNX files are read")
        values = numpy_helper.to_array(tensor)
        if values.dtype.kind not in "fiub":
            raise WeightsError(f"{name}: tensor {tensor.name!r} has dtype {values.dtype}, not a number type")
        return values

    constants: dict = {}
    try:
        for init in graph.initializer:
            constants[init.name] = array(init)
        nodes = []
        for node in graph.node:
            attrs = {}
            for a in node.attribute:
                value = onnx.helper.get_attribute_value(a)
                attrs[a.name] = array(value) if isinstance(value, onnx.TensorProto) else value
            if node.op_type == "Constant":
                if not isinstance(attrs.get("value"), np.ndarray):
                    raise WeightsError(f"{name}: Constant node {node.name!r} has no tensor value")
                constants[node.output[0]] = attrs["value"]
                continue
            nodes.append(Node(node.op_type, tuple(node.input), tuple(node.output), attrs))
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as e:
        # the onnx package's own checks of a malformed tensor or attribute (an unknown data type, a
        # length that does not match the shape, a field of the wrong kind)
        raise WeightsError(f"{name}: a tensor or attribute of the ONNX file is malformed "
                           f"({type(e).__name__}: {str(e)[:200]})") from None
    tensors: OrderedDict = OrderedDict()
    for node in nodes:
        for t in node.inputs:
            if t in constants and t not in tensors:
                array = constants[t]
                if array.dtype == np.float64:
                    array = array.astype(np.float32)
                tensors[t] = from_numpy(np.ascontiguousarray(array))
    metadata = {p.key: p.value for p in model.metadata_props}
    return OnnxCheckpoint(tensors, nodes, metadata, name)
