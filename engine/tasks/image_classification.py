"""Image classification: images -> the top-k classes with softmax scores.

    clf = engine.pipeline("image-classification")
    clf("cat.jpg", top_k=3)     # [{"label": "tabby cat", "index": 281, "score": 0.71}, ...]

    python -m engine classify cat.jpg --top 3

The class is generic over classifiers: the registry entry gives the model, its preprocessing
(entry.options["preprocess"]) and its class names. Digit classification runs it too
(engine/tasks/digit_classification.py).
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from ..errors import EngineError, InputError
from ..site.checkpoint import Checkpoint
from . import state
from . import contracts
from .base import INPUT_ERRORS, Command, Pipeline, add_device_argument, bad_input, softmax_rows

CARD = 2                     # where its card stands on the page (engine.tasks.card_order)


class ImageClassification(Pipeline):
    """Images -> top-k classes with softmax scores: batches of `batch_size`, the model's own
    preprocessing (entry.options["preprocess"]: image -> (C, H, W) float32).

    labels: a list of class names or a JSON file of them; default the entry's own list, else
    labels.json beside the weights (or beside the default weights).
    """
    MODEL = contracts.ImageClassifier


    def __init__(self, entry, device: str | None = None, weights=None, labels=None):
        super().__init__(entry, device, weights)
        options = entry.options
        self.with_index = options.get("with_index", True)      # entries carry the class index
        self.batch_size = options.get("batch_size", 8)         # images per forward pass (bounds memory)
        self._preprocess = options["preprocess"]
        self.model = self.build(device)
        self.labels = self._labels(labels)
        classes = options.get("num_classes") or len(self.labels)
        if len(self.labels) != classes:
            raise InputError(f"{len(self.labels)} class names for a model with {classes} classes")

    def _labels(self, labels) -> list[str]:
        if labels is None and "labels" in self.entry.options:
            return list(self.entry.options["labels"])
        if labels is not None and not isinstance(labels, (str, os.PathLike)):
            return [str(name) for name in labels]
        where = os.fspath(labels) if labels is not None else None
        data = Checkpoint(None, location=where).file(os.path.basename(where)) if where \
            else self.checkpoint.file("labels.json")
        try:
            names = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise InputError(f"cannot read the class names ({e})") from None
        if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
            raise InputError("class names must be a JSON list of strings")
        return names

    def preprocess(self, images) -> np.ndarray:
        """Images -> (N, C, H, W) float32 batch."""
        from ..vision import as_image
        return np.stack([self._preprocess(as_image(im)) for im in images])

    def logits(self, batch: np.ndarray) -> np.ndarray:
        return self.forward(np.ascontiguousarray(batch, np.float32))

    def probabilities(self, images) -> np.ndarray:
        """(N, classes) class probabilities for a list of images."""
        chunks = [images[i:i + self.batch_size] for i in range(0, len(images), self.batch_size)]
        return softmax_rows(np.concatenate([self.logits(self.preprocess(chunk)) for chunk in chunks]))

    def _top(self, probs: np.ndarray, top_k: int) -> list[dict]:
        order = np.argsort(-probs, kind="stable")[:top_k]
        if self.with_index:
            return [{"label": self.labels[i], "index": int(i), "score": float(probs[i])} for i in order]
        return [{"label": self.labels[i], "score": float(probs[i])} for i in order]

    def __call__(self, inputs, top_k: int = 5):
        """One image -> its predictions; a list of images -> a list of predictions."""
        single = not isinstance(inputs, (list, tuple))
        items = [inputs] if single else list(inputs)
        if not items:
            return []
        if not 1 <= top_k <= len(self.labels):
            raise InputError(f"top_k must be between 1 and {len(self.labels)}, got {top_k}")
        results = [self._top(p, top_k) for p in self.probabilities(items)]
        return results[0] if single else results


PIPELINE = ImageClassification


# --- the command line -----------------------------------------------------------------------------
def add_image_arguments(p, top: int, json_help: str, weights_help: str, top_help: str | None = None) -> None:
    """What every image classification command takes: IMAGE..., --top, --json, --weights, --device."""
    p.add_argument("images", nargs="+", metavar="IMAGE")
    p.add_argument("--top", type=int, default=top, metavar="K",
                   help=top_help or f"how many classes to print (default {top})")
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--weights", default=None, help=weights_help)
    add_device_argument(p)


def classify_each(task: str, args) -> int:
    """Run the pipeline of `task` on each image in turn: a bad image is one line on stderr
    (its name and why) and exit status 2; the others are still classified."""
    from . import pipeline
    clf = pipeline(task, device=args.device, weights=args.weights)
    if not 1 <= args.top <= len(clf.labels):
        raise EngineError(f"--top must be between 1 and {len(clf.labels)}, got {args.top}")
    status = 0
    for path in args.images:
        try:
            preds = clf(path, top_k=args.top)
        except INPUT_ERRORS as e:
            bad_input(path, e)
            status = 2
            continue
        if args.json:
            print(json.dumps({"input": path, "predictions": [{**p, "score": round(p["score"], 6)} for p in preds]}))
        else:
            print(f"{path}: " + "  ".join(f"{p['label']} ({p['score']:.1%})" for p in preds))
    return status


def _classify(args) -> int:
    if args.top < 1:
        raise EngineError(f"--top must be at least 1, got {args.top}")
    return classify_each("image-classification", args)


COMMANDS = {
    "classify": Command(
        help="name what is in photos (ImageNet-1k, EfficientNet-Lite0)",
        description="Classify each image into the 1000 ImageNet classes with EfficientNet-Lite0 (PNG or .npy; "
                    "JPEG and other formats need Pillow natively).",
        add_arguments=lambda p: add_image_arguments(
            p, top=5, json_help='one JSON object per line: {"input", "predictions": [{"label", "index", "score"}]}',
            weights_help="a safetensors file, index, folder or URL, or a .pth file (default: "
                         "dist/models/efficientnet_lite0, built by build.py)"),
        run=_classify),
}


# --- the page's worker ----------------------------------------------------------------------------
async def classify_image(pixels, width: int, height: int, top_k: int = 5) -> str:
    """RGBA pixels decoded by the browser -> the top-k ImageNet classes and timing."""
    pipe = state.loaded("image-classification")
    image = state.rgba(pixels, width, height)
    async with state.lock:
        t0 = time.perf_counter()
        predictions = pipe(image, top_k=int(top_k))
        ms = (time.perf_counter() - t0) * 1e3
        notice = state.notice(pipe)
    return json.dumps({"predictions": predictions, "ms": round(ms, 2), "device": state.current["device"], **notice})


WORKER = (classify_image,)
