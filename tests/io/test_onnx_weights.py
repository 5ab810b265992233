"""buildtools/onnx_weights.py, the build's reader of ONNX files (PP-OCR's): the tensors in the order
the graph first uses them, from Constant nodes and initializers alike, its nodes and metadata; and a
WeightsError naming the file for what is not an ONNX model (truncated, corrupt, empty)."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import WeightsError
from tests.helpers import need_import


def small_model(metadata=None) -> bytes:
    """x -> Conv(W from a Constant node, b an initializer) -> Add(c, a Constant) -> y."""
    need_import("onnx", "the build reads ONNX with PyPI onnx")
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.arange(2 * 3 * 3 * 3, dtype=np.float32).reshape(2, 3, 3, 3), "w")
    b = numpy_helper.from_array(np.array([0.5, -0.5], np.float32), "b")
    c = numpy_helper.from_array(np.array([2.0], np.float64), "c")
    nodes = [helper.make_node("Constant", [], ["w"], value=w),
             helper.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Constant", [], ["c"], value=c),
             helper.make_node("Add", ["h", "c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[b])
    model = helper.make_model(graph)
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    return model.SerializeToString()


def test_tensors_in_the_graphs_order_with_nodes_and_metadata():
    from buildtools.onnx_weights import read_onnx
    ck = read_onnx(small_model({"character": "a\nb"}), "small.onnx")
    assert list(ck) == ["w", "b", "c"]                        # first use: Conv's inputs, then Add's
    np.testing.assert_array_equal(ck.array("w"), np.arange(54, dtype=np.float32).reshape(2, 3, 3, 3))
    assert ck["c"].dtype.name == "float32"                    # float64 constants come as float32
    assert [n.op for n in ck.nodes] == ["Conv", "Add"] and ck.nodes[0].attrs["pads"] == [1, 1, 1, 1]
    assert ck.metadata == {"character": "a\nb"}
    assert ck.consumers["h"] == [1] and ck.name == "small.onnx"


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "no nodes"])
def test_what_is_not_an_onnx_model_is_a_clear_error(damage):
    from buildtools.onnx_weights import read_onnx
    data = small_model()
    if damage == "truncated":
        data = data[:len(data) // 2]
    elif damage == "garbage":
        data = bytes(np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8))
    elif damage == "empty":
        data = b""
    else:
        need_import("onnx")
        from onnx import helper
        data = helper.make_model(helper.make_graph([], "g", [], [])).SerializeToString()
    with pytest.raises(WeightsError, match="bad.onnx"):
        read_onnx(data, "bad.onnx")


def test_a_tensor_kept_in_another_file_is_refused_before_anything_is_read(tmp_path, monkeypatch):
    """External data names a path the onnx package would open (relative to the working folder):
    the build refuses it, reading nothing outside the file."""
    need_import("onnx")
    from onnx import TensorProto, helper

    from buildtools.onnx_weights import read_onnx
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "secret.bin"
    graph = helper.make_graph([helper.make_node("Relu", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[tensor])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WeightsError, match="another file"):
        read_onnx(helper.make_model(graph).SerializeToString(), "external.onnx")
