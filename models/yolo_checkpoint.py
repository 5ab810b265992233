"""Build time for models/yolo.py: a whole-module ultralytics checkpoint (read by
engine.formats.pth.read_module_checkpoint: module records, tensors, nothing run) -> the site's
config.json (the records the model is built from) and the tensors inference reads; the class
names of a dataset yaml. The registry entries in models/yolo.py name `convert` and `config_json`.
"""
from __future__ import annotations

import json

import numpy as np

from engine.errors import WeightsError
from engine.tensor import from_numpy

HEADS = ("Detect", "Pose", "v10Detect")       # the head types, one per model
SKIPPED_ATTRS = {"type", "yaml", "args", "names", "pt_path", "criterion", "anchors", "strides", "shape", "detect",
                 "training", "inplace", "dynamic", "export", "format"}


def _short(type_name: str) -> str:
    return type_name.rsplit(".", 1)[-1]


def checkpoint_config(checkpoint, names: dict | None = None, imgsz: int = 640) -> dict:
    """config.json's content (models.yolo.Config's fields) for a whole-module checkpoint
    (engine.formats.pth.read_module_checkpoint): every module's short type and plain settings, each
    Conv2d's `bias` (whether it has one), the root's `save`; `names` (index -> class name)
    replaces the checkpoint's where given."""
    modules = {}
    for path, record in checkpoint.modules.items():
        attrs = {k: v for k, v in record.attrs.items() if k not in SKIPPED_ATTRS and not k.startswith("_")}
        entry = {"type": _short(record.type), **attrs}
        if entry["type"] == "Conv2d":
            entry["bias"] = f"{path}.bias" in checkpoint.tensors
        if path == "":
            entry = {"type": entry["type"], "save": list(record.attrs.get("save", []))}
        modules[path] = entry
    for path, entry in list(modules.items()):
        # ultralytics' Conv.default_act is one nn.SiLU shared by every Conv; a reader that lists each
        # pickled object once shows it at its first path only, so a Conv with no `act` has that one
        if entry["type"] in ("Conv", "DWConv") and f"{path}.act" not in modules:
            modules[f"{path}.act"] = {"type": "SiLU"}
    heads = [r for r in modules.values() if r["type"] in HEADS]
    if len(heads) != 1:
        raise WeightsError(f"expected one detection head ({', '.join(HEADS)}), found {len(heads)}")
    head = heads[0]
    kinds = {r["type"] for r in modules.values()}
    architecture = "yolov10" if head["type"] == "v10Detect" else "yolo11" if "C3k2" in kinds else "yolov8"
    root = checkpoint.modules[""].attrs
    names = names if names is not None else root.get("names") or {}
    if len(names) != head["nc"]:
        raise WeightsError(f"{len(names)} class names for a head of {head['nc']} classes")
    end2end = bool(head.get("end2end", head["type"] == "v10Detect"))
    if end2end:                                 # inference runs the one-to-one branch only
        at = next(p for p, r in modules.items() if r is head)
        dropped = tuple(f"{at}.{branch}" for branch in ("cv2", "cv3", "cv4"))
        inside = tuple(d + "." for d in dropped)
        modules = {p: r for p, r in modules.items() if p not in dropped and not p.startswith(inside)}
    config = {"architecture": architecture, "task": "pose" if head["type"] == "Pose" else "detect",
              "nc": head["nc"], "names": {str(k): v for k, v in sorted(names.items(), key=lambda kv: int(kv[0]))},
              "kpt_shape": list(head["kpt_shape"]) if head["type"] == "Pose" else None,
              "strides": [int(s) for s in head["stride"]], "end2end": end2end,
              "max_det": int(head.get("max_det", 300)), "imgsz": imgsz, "modules": modules}
    if config["kpt_shape"] is None:
        del config["kpt_shape"]
    return config


def inference_tensors(checkpoint, config: dict):
    """(name, Tensor) of the tensors inference reads (`config` as checkpoint_config gives it):
    BatchNorm step counters and, for a one-to-one head, the one-to-many branch are left out."""
    dropped = ()
    if config["end2end"]:
        head = next(p for p, r in config["modules"].items() if r["type"] in HEADS)
        dropped = (f"{head}.cv2.", f"{head}.cv3.", f"{head}.cv4.")
    for name, array in checkpoint.tensors.items():
        if name.endswith("num_batches_tracked") or name.startswith(dropped):
            continue
        yield name, from_numpy(np.ascontiguousarray(array))


def parse_names(yaml_text: str) -> dict:
    """The `names:` mapping of a dataset yaml (ultralytics' cfg/datasets/coco.yaml): lines
    "  <index>: <name>" under "names:", as {"0": "person", ...}. Only that form is read."""
    names, inside = {}, False
    for line in yaml_text.splitlines():
        text = line.split("#", 1)[0].rstrip()
        if not text:
            continue
        if not line[0].isspace():
            inside = text == "names:"
            continue
        if inside:
            key, sep, value = text.strip().partition(":")
            if not sep or not key.strip().isdigit():
                raise WeightsError(f"unexpected line under names: {line!r}")
            names[str(int(key))] = value.strip().strip("'\"")
    if not names:
        raise WeightsError("no names: mapping in the dataset yaml")
    return names


def convert(checkpoint):
    """The build's conversion: the tensors inference reads (see inference_tensors)."""
    return inference_tensors(checkpoint, checkpoint_config(checkpoint))


def config_json(checkpoint, read, names_role: str | None = None) -> bytes:
    """config.json made at build time from the checkpoint's records; class names from the
    source file of `names_role` (a dataset yaml) when the checkpoint's are only numbers."""
    names = parse_names(read(names_role).decode("utf-8")) if names_role else None
    return (json.dumps(checkpoint_config(checkpoint, names), indent=1) + "\n").encode()
