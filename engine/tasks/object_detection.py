"""Object detection and pose estimation: an image -> boxes with labels, and body keypoints (YOLO).

    det = engine.pipeline("object-detection")              # YOLOv10-N, 80 COCO classes
    det("bus.jpg")        # [{"label": "bus", "score": 0.94, "box": {"xmin", "ymin", "xmax", "ymax"}}, ...]
    pose = engine.pipeline("pose-estimation")              # YOLO11n-pose, 17 COCO keypoints
    pose("zidane.jpg", threshold=0.5, size=320)
    # [{"score", "box": {...}, "keypoints": [{"name": "nose", "x", "y", "score"}, ...]}, ...]

    python -m engine detect bus.jpg --json
    python -m engine detect zidane.jpg --task pose --size 320 --save out.png

One pipeline class serves both tasks (engine/tasks/pose_estimation.py names it for the pose
model); what it returns follows the task it was made for. An image is a path, the bytes of a file,
a PIL image or a uint8 array (H, W, C); sizes are multiples of 32 (320, 480, 640: the default).
Pre- and post-processing are engine/vision/detection.py's; `pipe.stats` holds the last call's
times in ms ("pre", "network", "post").

What the model gives (models/yolo.py): `model(x)`, x a (N, 3, H, W) float32 RGB tensor in [0, 1],
-> (N, 4 + nc + nk, anchors), the head's decoded output; `model.config` (or config.json beside
the weights) gives "nc", "names", "kpt_shape" (pose), "end2end" and "max_det".

The page's worker calls (JSON answers):
    detect_image(pixels, width, height, size=640, threshold=0.25, task="object-detection")
        pixels: RGBA bytes of a width x height image decoded by the page; or, with width and
        height 0, the bytes of an image file (PNG natively; EXIF orientation honoured).
        -> {"task", "detections": [as the pipeline's], "width", "height", "size",
            "input": [input height, input width], "timings": {"pre", "network", "post"} (ms),
            "ms" (their sum), "device"} (+ "notice" when the backend changed)
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ..errors import EngineError, InputError
from . import state
from . import contracts
from .base import INPUT_ERRORS, Command, Pipeline, add_device_argument, bad_input

TASK = "object-detection"
CARD = 3                     # where its card stands on the page (engine.tasks.card_order)
POSE = "pose-estimation"
SIZES = (320, 480, 640)                 # what the command line and the page offer
STRIDE = 32


def check_size(size) -> int:
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or not STRIDE <= size <= 2048 \
            or size % STRIDE:
        raise InputError(f"size must be a multiple of {STRIDE} between {STRIDE} and 2048 (320, 480 or 640), "
                         f"got {size!r}")
    return int(size)


class Detection(Pipeline):
    """Images -> detections (object-detection) or people with keypoints (pose-estimation)."""
    MODEL = contracts.Detector


    def __init__(self, entry, device: str | None = None, weights=None):
        super().__init__(entry, device, weights)
        self.model = self.build(device)
        self.config = self._config()
        self.stats: dict = {}

    def load_model(self, device: str | None):
        """The model on `device`, with config.json from the checkpoint (in the page the weights
        are a mapping of tensors, with nothing beside them for the model to read)."""
        return self.entry.load(self.checkpoint.tensors, device, config=self.checkpoint.file("config.json"))

    def _config(self) -> dict:
        config = getattr(self.model, "config", None)
        if config is None:
            try:
                config = json.loads(self.checkpoint.file("config.json"))
            except ValueError as e:
                raise InputError(f"{self.entry.name}/config.json is not JSON: {e}") from None
        if not isinstance(config, dict):
            config = {name: getattr(config, name) for name in ("nc", "names", "kpt_shape", "end2end", "max_det")
                      if hasattr(config, name)}
        return config

    @property
    def labels(self) -> list[str]:
        from ..vision.detection import class_names
        return class_names(self.config)

    def raw(self, tensor: np.ndarray) -> np.ndarray:
        """(3, h, w) letterboxed input -> the head's (4 + nc + nk, anchors) output."""
        return self.forward(np.ascontiguousarray(tensor[None], np.float32))[0]

    def detect(self, image, threshold: float = 0.25, size: int = 640, iou: float = 0.7) -> dict:
        """One image -> detection.detect's arrays (boxes, scores, classes, keypoints) in its pixels."""
        from ..vision import as_image
        from ..vision.detection import detect, letterbox
        size = check_size(size)
        if not 0 <= threshold <= 1:
            raise InputError(f"threshold must be between 0 and 1, got {threshold}")
        t0 = time.perf_counter()
        tensor, box = letterbox(as_image(image), size, STRIDE)
        t1 = time.perf_counter()
        raw = self.raw(tensor)
        t2 = time.perf_counter()
        found = detect(raw, self.config, box, threshold=threshold, iou=iou)
        t3 = time.perf_counter()
        self.stats = {"pre": (t1 - t0) * 1e3, "network": (t2 - t1) * 1e3, "post": (t3 - t2) * 1e3,
                      "input": [box.input_height, box.input_width], "width": box.width, "height": box.height}
        return found

    def __call__(self, inputs, threshold: float = 0.25, size: int = 640, iou: float = 0.7):
        """One image -> its detections; a list of images -> a list of them."""
        from ..vision.detection import as_dicts
        single = not isinstance(inputs, (list, tuple))
        results = []
        for image in ([inputs] if single else inputs):
            found = self.detect(image, threshold, size, iou)
            if self.task != POSE:
                found.pop("keypoints", None)
            results.append(as_dicts(found, self.config))
        return results[0] if single else results


PIPELINE = Detection


# --- the command line -----------------------------------------------------------------------------
def _task(name: str) -> str:
    return POSE if name in ("pose", POSE) else TASK


def _add_arguments(p) -> None:
    p.add_argument("images", nargs="+", metavar="IMAGE")
    p.add_argument("--task", default=TASK, choices=(TASK, POSE, "pose"),
                   help="object-detection (boxes and labels, the default) or pose-estimation (alias pose)")
    p.add_argument("--threshold", type=float, default=0.25, metavar="T",
                   help="keep detections scoring above T (default 0.25)")
    p.add_argument("--size", type=int, default=640, choices=SIZES, help="the model's input size (default 640)")
    p.add_argument("--json", action="store_true",
                   help='one JSON object per line: {"input", "detections": [...]} in the pipeline\'s format')
    p.add_argument("--save", default=None, metavar="OUT.png",
                   help="draw the boxes, labels and skeletons into a PNG (OUT-2.png, ... for more images)")
    p.add_argument("--model", default=None, help="a registry model serving the task (default: its first)")
    p.add_argument("--weights", default=None, help="the model's weights (default: the built dist/models/...)")
    add_device_argument(p)


def _saved_path(out: str, index: int, count: int) -> Path:
    path = Path(out)
    return path if count == 1 or index == 0 else path.with_name(f"{path.stem}-{index + 1}{path.suffix or '.png'}")


def summary(detections: list[dict]) -> str:
    if not detections:
        return "nothing found"
    return "; ".join(f"{d.get('label', 'person')} {d['score']:.2f} [{d['box']['xmin']:.0f}, {d['box']['ymin']:.0f}, "
                     f"{d['box']['xmax']:.0f}, {d['box']['ymax']:.0f}]" for d in detections)


def _detect(args) -> int:
    from ..vision import as_image
    from ..vision.draw import draw_detections, write_png
    from . import pipeline
    if not 0 <= args.threshold <= 1:
        raise EngineError(f"--threshold must be between 0 and 1, got {args.threshold}")
    task = _task(args.task)
    pipe = pipeline(task, device=args.device, weights=args.weights, model=args.model)
    status = 0
    for index, path in enumerate(args.images):
        try:
            image = as_image(path)
            detections = pipe(image, threshold=args.threshold, size=args.size)
        except INPUT_ERRORS as e:
            bad_input(path, e)
            status = 2
            continue
        if args.json:
            print(json.dumps({"input": path, "detections": detections}))
        else:
            print(f"{path}: {summary(detections)}")
        if args.save:
            write_png(_saved_path(args.save, index, len(args.images)), draw_detections(image, detections))
    return status


COMMANDS = {
    "detect": Command(
        help="find objects (YOLOv10-N, COCO) or people's poses (YOLO11n-pose) in photos",
        description="Detect the 80 COCO object classes with YOLOv10-N, or people and their 17 body keypoints "
                    "with YOLO11n-pose (--task pose), in each image (PNG or .npy; JPEG and other formats need "
                    "Pillow natively).",
        add_arguments=_add_arguments,
        run=_detect),
}


# --- the page's worker ----------------------------------------------------------------------------
async def detect_image(pixels, width: int, height: int, size: int = 640, threshold: float = 0.25,
                       task: str = TASK) -> str:
    """RGBA pixels decoded by the page (or, with width = height = 0, a file's bytes) -> the
    detections, the input size and the times of each stage (the module's docstring)."""
    task = _task(str(task))
    pipe = state.loaded(task)
    if int(width) == 0 and int(height) == 0:
        from ..vision import read_image
        image = read_image(bytes(state.py(pixels)))
    else:
        image = state.rgba(pixels, width, height)
    async with state.lock:
        detections = pipe(image, threshold=float(threshold), size=int(size))
        stats = dict(pipe.stats)
        notice = state.notice(pipe)
    timings = {name: round(stats[name], 2) for name in ("pre", "network", "post")}
    return json.dumps({"task": task, "detections": detections, "width": stats["width"], "height": stats["height"],
                       "size": int(size), "input": stats["input"], "timings": timings,
                       "ms": round(sum(timings.values()), 2), "device": state.current["device"], **notice})


WORKER = (detect_image,)
