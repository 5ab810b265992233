"""Whole modules saved by torch.save (ultralytics' .pt files), read as inert records: the tensors
against torch's own reading of the same file, the records' settings against the modules torch
built, and the two YOLO checkpoints against the facts of their module trees."""
from __future__ import annotations

import io
import pickle
import subprocess
import sys
import types
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.errors import InvalidHeader
from engine.formats import ModuleCheckpoint, ModuleRecord, load_pth, read_module_checkpoint, read_pth_arrays
from engine.formats.pth import read_pth_header
from tests.io.test_pth import FORMATS, save, torch_bits
from tests.yolo_files import checkpoint


class Block(torch.nn.Module):
    """Settings of every plain kind, a small and a large tensor setting, a non-persistent buffer."""

    def __init__(self, c: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, 2 * c, 3, stride=2, padding=1, bias=False).half()
        self.bn = torch.nn.BatchNorm2d(2 * c)
        self.act = torch.nn.SiLU(inplace=True)
        self.register_buffer("mask", torch.tensor([True, False, True]))
        self.register_buffer("scratch", torch.arange(4.0), persistent=False)
        self.frozen = torch.nn.Parameter(torch.ones(2, dtype=torch.float64), requires_grad=False)
        self.stride = torch.tensor([8.0, 16.0, 32.0])             # small: becomes a list
        self.table = torch.zeros(100)                              # large: left out
        self.c, self.add, self.scale = c, True, 0.5
        self.name, self.nothing = "block", None
        self.shape, self.nested = (1, 2), {"k": [1, (2, 3)], 4: "four"}
        self.size = torch.Size([3, 4])
        self.dtype = torch.float16
        self.detect = getattr(torch.nn.Conv2d, "forward")  # noqa: B009 (a getattr in the pickle, as Pose.detect)
        self._private = 7


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(Block(3), torch.nn.ModuleList([Block(6), torch.nn.Identity()]))
        self.head = torch.nn.Linear(4, 2)
        self.nc, self.names, self.kpt_shape = 2, {0: "a", 1: "b"}, [17, 3]
        for module in self.modules():        # values that are not their initial ones
            for tensor in list(module.parameters(recurse=False)) + list(module.buffers(recurse=False)):
                if tensor.is_floating_point():
                    tensor.data.uniform_(-2, 2)


def expected_tensors(model: torch.nn.Module) -> OrderedDict:
    """Every parameter and buffer (non-persistent ones too) by module path, in state-dict order."""
    out = OrderedDict()
    for path, module in model.named_modules():
        for name, tensor in list(module._parameters.items()) + list(module._buffers.items()):
            if tensor is not None:
                out[f"{path}.{name}" if path else name] = tensor
    return out


def assert_tensors(ours: OrderedDict, expected: OrderedDict) -> None:
    assert list(ours) == list(expected)
    for name, ref in expected.items():
        got = ours[name]
        assert str(got.dtype) == {torch.bool: "bool"}.get(ref.dtype, str(ref.dtype).removeprefix("torch.")), name
        assert got.shape == tuple(ref.shape), name
        assert got.tobytes() == torch_bits(ref), name


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_module_checkpoint_matches_the_module(fmt, tmp_path):
    net = Net().eval()
    path = save({"date": "2026-01-01", "epoch": -1, "model": net, "ema": None, "optimizer": None,
                 "train_args": {"imgsz": 640, "flip": 0.5}}, tmp_path / "net.pt", fmt)
    got = read_module_checkpoint(path)
    assert isinstance(got, ModuleCheckpoint)
    assert_tensors(got.tensors, expected_tensors(net))
    assert got.meta == {"date": "2026-01-01", "epoch": -1, "ema": None, "optimizer": None,
                        "train_args": {"imgsz": 640, "flip": 0.5}}
    assert list(got.modules) == [path for path, _ in net.named_modules()]
    root = got.modules[""]
    assert root == ModuleRecord(f"{Net.__module__}.Net", {"training": False, "nc": 2, "names": {0: "a", 1: "b"},
                                                          "kpt_shape": [17, 3]})
    block = got.modules["model.0"]
    assert block.type == f"{Block.__module__}.Block"
    assert block.attrs == {"training": False, "c": 3, "add": True, "scale": 0.5, "name": "block", "nothing": None,
                           "shape": (1, 2), "nested": {"k": [1, (2, 3)], 4: "four"}, "size": (3, 4),
                           "dtype": "torch.float16", "stride": [8.0, 16.0, 32.0]}
    conv = got.modules["model.1.0.conv"]
    assert conv.type == "torch.nn.modules.conv.Conv2d"
    for key in ("in_channels", "out_channels", "kernel_size", "stride", "padding", "groups", "padding_mode"):
        assert conv.attrs[key] == getattr(net.model[1][0].conv, key), key
    assert got.modules["model.1.1"].type == "torch.nn.modules.linear.Identity"
    # the front door: the same tensors by module path
    arrays = read_pth_arrays(path)
    assert list(arrays) == list(got.tensors)
    assert all(arrays[k][0].tobytes() == v.tobytes() for k, v in got.tensors.items())
    assert load_pth(path)["model.0.conv.weight"].dtype.name == "float16"
    # and `engine inspect`'s header, from the pickle alone
    entries, layout = read_pth_header(path)
    assert layout == fmt and [(n, s) for n, _, s in entries] == [(k, v.shape) for k, v in got.tensors.items()]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_module_saved_alone_and_under_ema(fmt, tmp_path):
    net = Net()
    alone = read_module_checkpoint(save(net, tmp_path / "alone.pt", fmt))
    assert_tensors(alone.tensors, expected_tensors(net))
    assert alone.meta == {}
    under_ema = read_module_checkpoint(save({"model": None, "ema": net}, tmp_path / "ema.pt", fmt))
    assert list(under_ema.tensors) == list(alone.tensors)
    assert under_ema.meta == {"model": None}


def test_a_shared_module_is_read_at_its_first_path(tmp_path):
    shared = torch.nn.Linear(2, 2)
    net = torch.nn.Sequential(shared, torch.nn.ReLU(), shared)
    got = read_module_checkpoint(save(net, tmp_path / "shared.pt", "zip"))
    assert list(got.tensors) == ["0.weight", "0.bias"]          # named_modules() visits it once too
    assert list(got.modules) == [path for path, _ in net.named_modules()]


def test_a_state_dict_is_not_a_module_checkpoint(tmp_path):
    path = save(torch.nn.Linear(2, 2).state_dict(), tmp_path / "sd.pt", "zip")
    with pytest.raises(InvalidHeader, match="holds no torch module.*load_pth"):
        read_module_checkpoint(path)
    assert list(load_pth(path)) == ["weight", "bias"]


# --- the YOLO checkpoints ----------------------------------------------------------------------

def torch_reading(data: bytes):
    """torch.load of an ultralytics checkpoint with each ultralytics class replaced by an empty
    nn.Module subclass: torch's own unpickler and tensors, without ultralytics."""
    classes = {}

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if module.startswith("ultralytics."):
                return classes.setdefault((module, name), type(name, (torch.nn.Module,), {"__module__": module}))
            return super().find_class(module, name)
    stubs = types.ModuleType("stubs")
    stubs.Unpickler, stubs.load, stubs.UnpicklingError = Unpickler, pickle.load, pickle.UnpicklingError
    return torch.load(io.BytesIO(data), weights_only=False, pickle_module=stubs, map_location="cpu")


FACTS = {  # from the module trees: tensor count, dtype, head, and settings the model reads
    "yolo11n_pose": (541, np.float16, "ultralytics.nn.tasks.PoseModel", "ultralytics.nn.modules.head.Pose",
                     {"nc": 1, "kpt_shape": [17, 3], "names": {0: "person"}, "task": "pose"}),
    "yolov10n": (595, np.float32, "ultralytics.nn.tasks.YOLOv10DetectionModel",
                 "ultralytics.nn.modules.head.v10Detect", {"task": "detect"}),
}


@pytest.mark.parametrize("model", sorted(FACTS))
def test_the_yolo_checkpoints(model):
    data = checkpoint(model)
    got = read_module_checkpoint(data, name=f"{model}.pt")
    count, dtype, root_type, head_type, settings = FACTS[model]
    assert len(got.tensors) == count
    assert {a.dtype for a in got.tensors.values() if a.dtype != np.int64} == {np.dtype(dtype)}
    first = got.tensors["model.0.conv.weight"]
    assert first.shape == (16, 3, 3, 3) and first.dtype == dtype
    assert got.modules[""].type == root_type and got.modules["model.23"].type == head_type
    root = got.modules[""].attrs
    assert root["stride"] == [8.0, 16.0, 32.0] and got.modules["model.23"].attrs["stride"] == [8.0, 16.0, 32.0]
    assert {k: root[k] for k in settings} == settings
    assert got.modules["model.0.conv"].attrs["stride"] == (2, 2)
    assert got.modules["model.0.bn"].attrs["eps"] == pytest.approx(1e-3)
    if model == "yolo11n_pose":
        assert got.meta["version"] == "8.2.100" and "AGPL-3.0" in got.meta["license"]
        assert got.modules["model.2"].attrs["c"] == 16 and got.modules["model.2.m.0"].attrs["add"] is True
        assert got.modules["model.23"].attrs["kpt_shape"] == [17, 3]
    else:
        assert len(root["names"]) == 80
        assert got.modules["model.23"].attrs["nc"] == 80
    # every tensor against torch's reading of the same file
    reference = torch_reading(data)
    reference = reference["model"] if reference.get("model") is not None else reference["ema"]
    assert_tensors(got.tensors, expected_tensors(reference))
    # and through the front door, by the same module paths
    arrays = read_pth_arrays(data, name=f"{model}.pt")
    assert list(arrays) == list(got.tensors)


def test_runs_without_torch():
    """The reader imports nothing of torch (the site reads these files in the page)."""
    root = Path(__file__).resolve().parents[2]
    seed = root / "tests" / "fuzz" / "seeds" / "pth_modules" / "model_zip.pt"
    code = ("import sys; sys.modules['torch'] = None\n"
            "from engine.formats import read_module_checkpoint\n"
            f"c = read_module_checkpoint({str(seed)!r})\n"
            "print(len(c.tensors), c.modules['model.1'].attrs['kpt_shape'], c.meta['version'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "22 [17, 3] 8.2.100"
