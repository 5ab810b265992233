"""PP-LCNetV3 (models/pplcnet.py), the PP-OCR backbone.

- Tiny random networks (recognizer and detector mode) on every backend, against a torch
  re-expression written here from PaddleOCR's rec_lcnetv3.py (re-parameterized form: conv with
  bias, scalar affine, hardswish, affine; SE with ReLU and hardsigmoid; avg_pool2d([3, 2]) or the
  four layer_list maps).
- The real PP-OCRv4 recognizer and detector and the PP-OCRv5 recognizer backbones, read from
  their ONNX exports by convert_backbone, against onnxruntime's intermediate outputs.
- A wrong-shaped tensor is refused with a WeightsError naming it.
"""
import numpy as np
import pytest

import engine
from engine.errors import WeightsError
from models import pplcnet as P
from tests.helpers import need_import

torch = need_import("torch")
TF = torch.nn.functional

# small stages: rec keeps the three (2, 1) strides that bring 48 rows down to 3 before the pool
TINY_REC = P.Config(scale=0.5, det=False, stages=(
    ((3, 16, 32, (1, 1), False),),
    ((3, 32, 32, (1, 1), False),),
    ((3, 32, 48, (2, 1), False),),
    ((5, 48, 64, (1, 2), False),),
    ((5, 64, 64, (2, 1), True), (5, 64, 64, (2, 1), False)),
))
TINY_DET = P.Config(scale=0.5, det=True, stages=(
    ((3, 16, 32, (1, 1), False),),
    ((3, 32, 32, (2, 2), False), (3, 32, 32, (1, 1), False)),
    ((3, 32, 48, (2, 2), False),),
    ((5, 48, 64, (2, 2), False), (5, 64, 64, (1, 1), False)),
    ((5, 64, 64, (2, 2), True), (5, 64, 64, (1, 1), True)),
))


def random_state(model, seed=0):
    """Random weights by name; the affine scales near 1 as trained ones are."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, t in model.state_dict().items():
        shape = tuple(t.shape)
        if name.endswith("lab.scale"):
            value = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith("lab.bias") or name.endswith(".bias"):
            value = 0.1 * rng.standard_normal(shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            value = rng.standard_normal(shape) / np.sqrt(fan_in)
        state[name] = value.astype(np.float32)
    return state


# --- torch re-expression (rec_lcnetv3.py, exported form) ------------------------------------
def torch_hardswish_lab(x, s, name):
    return TF.hardswish(x) * s[f"{name}.lab.scale"] + s[f"{name}.lab.bias"]


def torch_rep(x, s, name, kernel, stride, groups):
    w, b = s[f"{name}.reparam_conv.weight"], s[f"{name}.reparam_conv.bias"]
    x = TF.conv2d(x, w, b, stride, (kernel - 1) // 2, 1, groups)
    x = x * s[f"{name}.lab.scale"] + s[f"{name}.lab.bias"]
    if tuple(stride) != (2, 2):                              # Act, unless stride == 2
        x = torch_hardswish_lab(x, s, f"{name}.act")
    return x


def torch_backbone(x, state, config):
    s = {k: torch.from_numpy(v) for k, v in state.items()}
    x = TF.conv2d(x, s["conv1.conv.weight"], s["conv1.conv.bias"], 2, 1)
    outs = []
    for name, stage in zip(P.STAGE_NAMES, config.stages):
        for i, (k, cin, _, stride, se) in enumerate(stage):
            c = P.make_divisible(cin * config.scale, config.divisor)
            x = torch_rep(x, s, f"{name}.{i}.dw_conv", k, stride, c)
            if se:
                g = TF.relu(TF.conv2d(x.mean((2, 3), keepdim=True), s[f"{name}.{i}.se.conv1.weight"],
                                      s[f"{name}.{i}.se.conv1.bias"]))
                x = x * TF.hardsigmoid(TF.conv2d(g, s[f"{name}.{i}.se.conv2.weight"], s[f"{name}.{i}.se.conv2.bias"]))
            x = torch_rep(x, s, f"{name}.{i}.pw_conv", 1, (1, 1), 1)
        outs.append(x)
    if config.det:
        return [TF.conv2d(o, s[f"layer_list.{j}.weight"], s[f"layer_list.{j}.bias"]) for j, o in enumerate(outs[1:])]
    return TF.avg_pool2d(x, (3, 2), (3, 2))


@pytest.mark.parametrize("device", engine.available_devices())
@pytest.mark.parametrize("config, size", [(TINY_REC, (48, 40)), (TINY_DET, (64, 96))], ids=["rec", "det"])
def test_tiny_random_backbone_matches_torch(config, size, device):
    model = P.PPLCNetV3(config)
    state = random_state(model)
    model.load_state_dict({k: engine.from_numpy(v) for k, v in state.items()})
    model.fold().to(device)
    x = np.random.default_rng(1).standard_normal((2, 3, *size)).astype(np.float32)
    ours = model(engine.from_numpy(x, device))
    with torch.no_grad():
        theirs = torch_backbone(torch.from_numpy(x), state, config)
    ours, theirs = (ours, theirs) if config.det else ([ours], [theirs])
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)


def test_channel_rounding_matches_the_exports():
    assert [P.make_divisible(c * 0.95) for c in (16, 32, 64, 128, 256, 512)] == [16, 32, 64, 128, 240, 480]
    assert [P.make_divisible(c * 0.75) for c in (16, 32, 64, 128, 256, 512)] == [16, 32, 48, 96, 192, 384]
    assert P.Config.detector().out_channels == (12, 18, 42, 360)
    assert P.Config.recognizer().out_channels == 480


# --- the real exports ------------------------------------------------------------------------
REAL = {  # model name -> (backbone config, input size, the graph's tensors that are the backbone's outputs)
    "pp-ocrv4-rec": (P.Config.recognizer(), (48, 160), ["p2o.AveragePool.1"]),
    "pp-ocrv5-rec": (P.Config.recognizer(), (48, 160), ["p2o.pd_op.pool2d.2.0"]),
}


def onnx_outputs(data: bytes, names, x):
    """onnxruntime's values of the graph's tensors `names` for input x."""
    onnx, ort = need_import("onnx"), need_import("onnxruntime")
    model = onnx.load_from_string(data)
    for name in names:
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(list(names), {"x": x})


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_backbones_match_onnxruntime(name):
    from buildtools.onnx_weights import read_onnx
    from tests.ocr_files import checkpoint
    config, size, outputs = REAL[name]
    data = checkpoint(name)
    pairs, after = P.convert_backbone(read_onnx(data, name), config)
    model = P.PPLCNetV3(config)
    model.load_state_dict(dict(pairs))
    model.fold()
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, *size)).astype(np.float32)
    (theirs,) = onnx_outputs(data, outputs, x)
    ours = model(engine.from_numpy(x)).numpy()
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-3)       # measured 3e-4 at |x| up to 50


def test_real_detector_backbone_matches_onnxruntime():
    """The detector's export (v4) through det mode: the four layer_list maps."""
    import zipfile

    from buildtools.onnx_weights import read_onnx
    from tests.ocr_files import wheel_path
    with zipfile.ZipFile(wheel_path("pp-ocrv4")) as archive:        # the model set's wheel: its detector
        data = archive.read("rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx")
    checkpoint_ = read_onnx(data, "ch_PP-OCRv4_det_infer.onnx")
    config = P.Config.detector()
    pairs, after = P.convert_backbone(checkpoint_, config)
    conv = checkpoint_.nodes[after]
    assert conv.op == "Conv"                                  # the neck's first conv reads the last map
    model = P.PPLCNetV3(config)
    model.load_state_dict(dict(pairs))
    model.fold()
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 96, 128)).astype(np.float32)
    layer_list = [n.outputs[0] for n in checkpoint_.nodes[after - 4:after]]
    theirs = onnx_outputs(data, layer_list, x)
    ours = model(engine.from_numpy(x))
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-4, atol=1e-3)


def test_wrong_shaped_tensor_is_named():
    """A checkpoint whose depthwise weight has the wrong shape: the error names the layer and the
    ONNX tensor (a tiny graph built here in the exports' form)."""
    onnx = need_import("onnx")
    from buildtools.onnx_weights import read_onnx
    data = tiny_onnx(onnx, dw_channels=16)
    pairs, _ = P.convert_backbone(read_onnx(data, "tiny.onnx"), ONE_BLOCK)
    assert [n for n, _ in pairs][:3] == ["conv1.conv.weight", "conv1.conv.bias", "blocks2.0.dw_conv.reparam_conv.weight"]
    bad = tiny_onnx(onnx, dw_channels=8)
    with pytest.raises(WeightsError, match=r"blocks2\.0\.dw_conv\.reparam_conv.*dw\.w.*shape"):
        P.convert_backbone(read_onnx(bad, "tiny.onnx"), ONE_BLOCK)


ONE_BLOCK = P.Config(scale=1.0, stages=(((3, 16, 16, (1, 1), False),),) + ((),) * 4)


def tiny_onnx(onnx, dw_channels):
    """conv1 + BN, then one block's depthwise rep layer (conv, lab, hardswish as Paddle2ONNX
    writes it, lab) and pointwise rep layer, as Constant nodes feed them."""
    h, rng = onnx.helper, np.random.default_rng(0)
    nodes = []

    def const(name, array):
        nodes.append(h.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(
            np.asarray(array, np.float32), name)))
        return name

    def conv(x, out, w, b=None, group=1, k=3):
        inputs = [x, const(f"{out}.w", w)] + ([const(f"{out}.b", b)] if b is not None else [])
        nodes.append(h.make_node("Conv", inputs, [out], kernel_shape=[k, k], strides=[1, 1] if out != "c1" else [2, 2],
                                 pads=[k // 2] * 4, group=group))
        return out

    def lab(x, out):
        nodes.append(h.make_node("Mul", [const(f"{out}.s", [1.1]), x], [f"{out}.m"]))
        nodes.append(h.make_node("Add", [f"{out}.m", const(f"{out}.t", [0.1])], [out]))
        return out

    def hardswish(x, out):
        nodes.append(h.make_node("Add", [x, const(f"{out}.3", [3.0])], [f"{out}.a"]))
        nodes.append(h.make_node("Clip", [f"{out}.a", const(f"{out}.lo", 0.0), const(f"{out}.hi", 6.0)], [f"{out}.c"]))
        nodes.append(h.make_node("Mul", [x, f"{out}.c"], [f"{out}.m"]))
        nodes.append(h.make_node("Div", [f"{out}.m", const(f"{out}.6", [6.0])], [out]))
        return out

    x = conv("x", "c1", rng.standard_normal((16, 3, 3, 3)))
    nodes.append(h.make_node("BatchNormalization", [x] + [const(f"bn.{p}", v) for p, v in
                 (("g", np.ones(16)), ("b", np.zeros(16)), ("m", np.zeros(16)), ("v", np.ones(16)))], ["bn"]))
    x = conv("bn", "dw", rng.standard_normal((dw_channels, 1, 3, 3)), np.zeros(dw_channels), group=16)
    x = lab(hardswish(lab(x, "dw.lab"), "dw.hs"), "dw.act")
    x = conv(x, "pw", rng.standard_normal((16, 16, 1, 1)), np.zeros(16), k=1)
    x = lab(hardswish(lab(x, "pw.lab"), "pw.hs"), "y")
    graph = h.make_graph(nodes, "tiny", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    return h.make_model(graph).SerializeToString()
