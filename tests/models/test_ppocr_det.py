"""PP-OCR's mobile text detector (models/ppocr_det.py): PP-LCNetV3 + RSE-FPN + DB head.

- A tiny random detector (a shortened PP-LCNetV3 at scale 0.25, a 16-channel neck, with and without
  the RSE shortcut) on every backend, against a torch re-expression written here from PaddleOCR's
  rec_lcnetv3.py (after rep()), necks/db_fpn.py and heads/det_db_head.py: the head's BatchNorms
  unfolded (folded for the engine by torch's fuse_conv_bn_eval), nn.ConvTranspose2d, F.interpolate.
- The real PP-OCRv4 and PP-OCRv5 detectors, converted as the build does for models/ppocr.py's model
  sets (read_onnx, convert, config_from_graph, float32 weights, load), against onnxruntime on the same input:
  a page of text rendered here with OpenCV and random input. Measured on the page: the map within
  5e-5 (v4) and 4e-4 (v5) of onnxruntime's, the 0.3 mask equal on all but a few pixels.
- Bad input and a wrong-shaped tensor fail with errors that name them.
"""
import numpy as np
import pytest

import engine
from buildtools.onnx_weights import read_onnx
from engine import registry
from engine.errors import InputError, WeightsError
from models import pplcnet
from models import ppocr_det as D
from tests.helpers import assert_close, need_import

torch = need_import("torch")
TF = torch.nn.functional

TINY_STAGES = (((3, 16, 32, (1, 1), False),),
               ((3, 32, 64, (2, 2), False),),
               ((3, 64, 128, (2, 2), False),),
               ((3, 128, 256, (2, 2), False), (5, 256, 256, (1, 1), False)),
               ((5, 256, 512, (2, 2), True), (5, 512, 512, (1, 1), True)))


def tiny(shortcut=True):
    return D.Config(scale=0.25, neck_channels=16, shortcut=shortcut, stages=TINY_STAGES)


# --- torch re-expression --------------------------------------------------------------------------
class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.empty(1).uniform_(0.5, 1.5))
        self.bias = torch.nn.Parameter(torch.empty(1).uniform_(-0.2, 0.2))

    def forward(self, x):
        return x * self.scale + self.bias


class Act(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lab = Affine()

    def forward(self, x):
        return self.lab(TF.hardswish(x))


class Rep(torch.nn.Module):
    def __init__(self, cin, cout, k, stride, groups=1):
        super().__init__()
        self.reparam_conv = torch.nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups)
        self.lab = Affine()
        self.act = Act() if tuple(stride) != (2, 2) else None

    def forward(self, x):
        x = self.lab(self.reparam_conv(x))
        return self.act(x) if self.act is not None else x


class SE(torch.nn.Module):
    def __init__(self, c, slope):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c, c // 4, 1)
        self.conv2 = torch.nn.Conv2d(c // 4, c, 1)
        self.slope = slope

    def forward(self, x):
        s = TF.relu(self.conv1(TF.adaptive_avg_pool2d(x, 1)))
        return x * torch.clamp(self.conv2(s) * self.slope + 0.5, 0, 1)


class Block(torch.nn.Module):
    def __init__(self, cin, cout, k, stride, se):
        super().__init__()
        self.dw_conv = Rep(cin, cin, k, stride, cin)
        self.se = SE(cin, 1 / 6) if se else None
        self.pw_conv = Rep(cin, cout, 1, (1, 1))

    def forward(self, x):
        x = self.dw_conv(x)
        return self.pw_conv(self.se(x) if self.se is not None else x)


class Backbone(torch.nn.Module):
    def __init__(self, config: pplcnet.Config):
        super().__init__()
        md, s = pplcnet.make_divisible, config.scale
        self.conv1 = torch.nn.Conv2d(3, md(16 * s), 3, 2, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(md(16 * s))
        for name, stage in zip(pplcnet.STAGE_NAMES, config.stages):
            setattr(self, name, torch.nn.ModuleList(Block(md(cin * s), md(cout * s), k, stride, se)
                                                    for k, cin, cout, stride, se in stage))
        widths = [md(stage[-1][2] * s) for stage in config.stages[1:]]
        self.layer_list = torch.nn.ModuleList(torch.nn.Conv2d(c, o, 1) for c, o in zip(widths, config.out_channels))

    def forward(self, x):
        x, outs = self.bn1(self.conv1(x)), []
        for name in pplcnet.STAGE_NAMES:
            for block in getattr(self, name):
                x = block(x)
            outs.append(x)
        return [conv(o) for conv, o in zip(self.layer_list, outs[1:])]


class RSE(torch.nn.Module):
    def __init__(self, cin, cout, k, shortcut):
        super().__init__()
        self.in_conv = torch.nn.Conv2d(cin, cout, k, padding=k // 2, bias=False)
        self.se_block = SE(cout, 0.2)
        self.shortcut = shortcut

    def forward(self, x):
        x = self.in_conv(x)
        return x + self.se_block(x) if self.shortcut else self.se_block(x)


class Neck(torch.nn.Module):
    def __init__(self, in_channels, c, shortcut):
        super().__init__()
        self.ins_conv = torch.nn.ModuleList(RSE(i, c, 1, shortcut) for i in in_channels)
        self.inp_conv = torch.nn.ModuleList(RSE(c, c // 4, 3, shortcut) for _ in in_channels)

    def forward(self, features):
        up = lambda x, f: TF.interpolate(x, scale_factor=f, mode="nearest")       # noqa: E731
        in2, in3, in4, in5 = (conv(c) for conv, c in zip(self.ins_conv, features))
        out4 = in4 + up(in5, 2)
        out3 = in3 + up(out4, 2)
        out2 = in2 + up(out3, 2)
        p5, p4, p3, p2 = (conv(x) for conv, x in zip(self.inp_conv[::-1], (in5, out4, out3, out2)))
        return torch.cat([up(p5, 8), up(p4, 4), up(p3, 2), p2], 1)


class Head(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c, c // 4, 3, padding=1, bias=False)
        self.conv_bn1 = torch.nn.BatchNorm2d(c // 4)
        self.conv2 = torch.nn.ConvTranspose2d(c // 4, c // 4, 2, 2)
        self.conv_bn2 = torch.nn.BatchNorm2d(c // 4)
        self.conv3 = torch.nn.ConvTranspose2d(c // 4, 1, 2, 2)

    def forward(self, x):
        x = TF.relu(self.conv_bn1(self.conv1(x)))
        x = TF.relu(self.conv_bn2(self.conv2(x)))
        return torch.sigmoid(self.conv3(x))


class Detector(torch.nn.Module):
    def __init__(self, config: D.Config):
        super().__init__()
        self.backbone = Backbone(config.backbone())
        self.neck = Neck(config.backbone().out_channels, config.neck_channels, config.shortcut)
        self.binarize = Head(config.neck_channels)

    def forward(self, x):
        return self.binarize(self.neck(self.backbone(x)))

    def engine_state(self):
        """The engine model's tensors: the BatchNorms folded by torch's fuse_conv_bn_eval."""
        from torch.nn.utils.fusion import fuse_conv_bn_eval
        b, h = self.backbone, self.binarize
        state = {f"backbone.{k}": v for k, v in b.state_dict().items() if not k.startswith(("conv1.", "bn1."))}
        state.update({f"neck.{k}": v for k, v in self.neck.state_dict().items()})
        for name, conv, bn, transpose in (("backbone.conv1.conv", b.conv1, b.bn1, False),
                                          ("head.binarize.conv1", h.conv1, h.conv_bn1, False),
                                          ("head.binarize.conv2", h.conv2, h.conv_bn2, True)):
            fused = fuse_conv_bn_eval(conv, bn, transpose=transpose)
            state[f"{name}.weight"], state[f"{name}.bias"] = fused.weight, fused.bias
        state["head.binarize.conv3.weight"], state["head.binarize.conv3.bias"] = h.conv3.weight, h.conv3.bias
        return {k: engine.from_numpy(v.detach().numpy().copy()) for k, v in state.items()}


def random_torch(config, seed=0):
    torch.manual_seed(seed)
    model = Detector(config).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)
                m.running_mean.uniform_(-0.3, 0.3)
                m.running_var.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("shortcut", [True, False])
@pytest.mark.parametrize("device", engine.available_devices())
def test_tiny_random_against_torch(device, shortcut):
    config = tiny(shortcut)
    reference = random_torch(config)
    model = D.load(reference.engine_state(), device, config)
    x = np.random.default_rng(1).standard_normal((2, 3, 64, 96)).astype(np.float32)
    with torch.no_grad():
        expected = reference(torch.from_numpy(x))
    out = model(engine.from_numpy(x, device))
    assert out.shape == (2, 1, 64, 96)
    assert_close(out, expected, rtol=1e-4, atol=2e-5)


def test_bad_input_names_x():
    model = D.load(random_torch(tiny()).engine_state(), config=tiny())
    for shape in ((1, 3, 48, 64), (1, 1, 64, 64), (3, 64, 64)):
        with pytest.raises(InputError, match="x must be"):
            model(engine.from_numpy(np.zeros(shape, np.float32)))


def test_config_json_round_trip():
    config = D.Config(scale=0.5, neck_channels=64, shortcut=False)
    assert D.Config.from_json(D.json.dumps(config.to_dict())) == config
    with pytest.raises(WeightsError, match="config.json"):
        D.Config.from_json(b"{}")


# --- the real weights -----------------------------------------------------------------------------
def page(cv2, height=480, width=640, seed=0) -> np.ndarray:
    """Lines of words in OpenCV's Hershey font, black on white, of several sizes: (H, W, 3) uint8."""
    rng = np.random.default_rng(seed)
    image = np.full((height, width, 3), 255, np.uint8)
    words = ["invoice", "TOTAL", "12.50", "engine", "Paddle", "OCR", "text", "line", "2024-05-01", "receipt"]
    y = 40
    while y < height - 20:
        x, scale = 20, rng.uniform(0.6, 1.4)
        while x < width - 80:
            cv2.putText(image, " ".join(rng.choice(words, 2)), (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0),
                        max(1, int(scale * 2)), cv2.LINE_AA)
            x += int(rng.uniform(180, 300) * scale)
        y += int(40 * scale) + 10
    return image


def site_model(data: bytes, name: str):
    """What the site serves and the pipeline loads (models/ppocr.py's "det."): read_onnx, convert
    (float32 weights), the config read off the graph, load."""
    checkpoint = read_onnx(data, name)
    config = D.config_from_graph(checkpoint)
    return D.load(dict(D.convert(checkpoint)), config=D.json.dumps(config.to_dict())), config


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pp-ocrv4", "pp-ocrv5"])
def test_real_weights_against_onnxruntime(name):
    ort, cv2 = need_import("onnxruntime"), need_import("cv2")
    from tests import ocr_files
    data = ocr_files.checkpoint(name)
    model, config = site_model(data, name)
    assert config == D.Config(scale=0.75, neck_channels=96, shortcut=True)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    mean, std = (np.float32(registry.model(name).options["det"][k]) for k in ("mean", "std"))
    image = (page(cv2).astype(np.float32) / 255 - mean) / std
    noise = np.random.default_rng(3).uniform(-2, 2, (2, 3, 96, 160))
    for i, x in enumerate((image.transpose(2, 0, 1)[None], noise)):
        x = np.ascontiguousarray(x, np.float32)
        expected = session.run(None, {"x": x})[0]
        out = model(engine.from_numpy(x)).numpy()
        assert out.shape == expected.shape
        assert_close(out, expected, rtol=0, atol=1e-3)
        assert ((out > 0.3) == (expected > 0.3)).mean() >= 0.999
        if i == 0:
            assert 0.05 < (out > 0.3).mean() < 0.5              # the page's lines are found


def test_wrong_shaped_tensor_is_named():
    from tests import ocr_files
    checkpoint = read_onnx(ocr_files.checkpoint("pp-ocrv4"), "det.onnx")
    neck = [n for n in checkpoint.nodes if n.op == "Conv"][37].inputs[1]     # the neck's first conv (ins_conv 3)
    assert checkpoint.array(neck).shape == (96, 360, 1, 1)
    checkpoint._tensors[neck] = engine.from_numpy(np.zeros((95, 360, 1, 1), np.float32))
    with pytest.raises(WeightsError, match=neck) as caught:
        D.convert(checkpoint, D.Config())
    assert caught.value.tensor == neck
    state = dict(random_torch(tiny()).engine_state())
    state["head.binarize.conv2.weight"] = engine.from_numpy(np.zeros((4, 4, 3, 3), np.float32))
    with pytest.raises(WeightsError, match=r"head\.binarize\.conv2\.weight"):
        D.load(state, config=tiny())
