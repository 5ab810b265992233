"""Reading text in images (OCR): PP-OCR's detector, 0/180 classifier and recognizer.

    ocr = engine.pipeline("ocr")                       # PP-OCRv4 mobile: Chinese and English
    ocr("receipt.png")
    # {"lines": [{"text": "TOTAL 12.50", "score": 0.97, "box": [[x, y], [x, y], [x, y], [x, y]]}, ...],
    #  "text": "the lines joined by newlines"}
    engine.pipeline("ocr", model="pp-ocrv5")           # PP-OCRv5 mobile: multilingual

    python -m engine ocr receipt.png --json
    python -m engine ocr page.png --save boxes.png --model pp-ocrv5

An image is a path, the bytes of a file, a PIL image or a uint8 array (H, W, C) in RGB(A) or grey.
The lines come in reading order (top to bottom, then left to right); each box is the line's four
corners clockwise from its top-left, in the image's pixels. `pipe.stats` holds the last call's
times in ms ("det", "cls", "rec") and the detector's input size. The steps, which follow the
reference (rapidocr-onnxruntime) step for step, are engine/vision/ocr.py's.

What the model gives (models/ppocr.py, contracts.TextReader): three networks as attributes,
`det(x)` (N, 3, H, W) -> (N, 1, H, W) text probabilities, `cls(x)` (N, 3, 48, 192) -> (N, 2)
probabilities of 0 and 180 degrees, `rec(x)` (N, 3, 48, W) -> (N, W / 8, classes) probabilities;
and `settings`: the thresholds and shapes (the entry's options as config.json carries them) and
the recognizer's `characters` (class 0 is CTC's blank).

The page's worker calls (JSON answers):
    read_text(pixels, width, height)
        pixels: RGBA bytes of a width x height image decoded by the page; or, with width and
        height 0, the bytes of an image file (EXIF orientation honoured).
        -> {"task": "ocr", "lines": [...], "text", "width", "height", "input": [h, w],
            "timings": {"det", "cls", "rec"} (ms), "ms" (their sum), "device"} (+ "notice")
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from . import contracts, state
from .base import INPUT_ERRORS, Command, Pipeline, add_device_argument, bad_input

TASK = "ocr"
CARD = 7                     # where its card stands on the page (engine.tasks.card_order)
MAX_LINES = 1000             # the detector's max_candidates bounds the lines; this bounds the recognizer


class TextReader(Pipeline):
    """Images -> lines of text with their boxes."""
    MODEL = contracts.TextReader

    def __init__(self, entry, device: str | None = None, weights=None):
        super().__init__(entry, device, weights)
        self.model = self.build(device)
        self.stats: dict = {}

    def load_model(self, device: str | None):
        return self.entry.load(self.checkpoint.tensors, device, config=self.checkpoint.file("config.json"))

    @property
    def settings(self) -> dict:
        return self.model.settings

    def network(self, name: str, x: np.ndarray) -> np.ndarray:
        """One of the three networks on a NumPy batch, eagerly: not through captured passes
        (engine.graph.Passes), whose buffers stay held per input shape (the recognizer's batches
        each have their own width: in a page with the kernel pool 0.7-0.9 GB a shape)."""
        from ..tensor import from_numpy
        return self.run(lambda model: getattr(model, name)(from_numpy(x, self.device)).numpy())

    def _batched(self, name: str, crops: list, make, size: int) -> list:
        """The network `name` over the crops, narrowest first in batches of `size`; its outputs
        in the crops' order."""
        from ..vision.ocr import by_aspect
        order = by_aspect(crops)
        out: list = [None] * len(crops)
        for start in range(0, len(order), size):
            chunk = order[start:start + size]
            result = self.network(name, make([crops[i] for i in chunk]))
            for i, row in zip(chunk, result):
                out[i] = row
        return out

    def read(self, image) -> list[dict]:
        """One image -> its lines [{"text", "score", "box"}] in reading order (those the
        recognizer scores under the model's text_score are left out)."""
        from ..vision import as_image
        from ..vision import ocr
        settings = self.settings
        det, cls, rec = settings["det"], settings["cls"], settings["rec"]
        t0 = time.perf_counter()
        bgr = ocr.to_bgr(as_image(image))
        height, width = bgr.shape[:2]
        fitted, mapping = ocr.fit_image(bgr)
        x = ocr.detector_input(fitted, det)
        prob = self.network("det", x)[0, 0]
        boxes, _ = ocr.db_boxes(prob, det, *fitted.shape[:2])
        boxes = ocr.keep_boxes(boxes, *fitted.shape[:2])
        boxes = boxes[ocr.reading_order(boxes)][:MAX_LINES]
        crops = ocr.crop_lines(fitted, boxes)
        t1 = time.perf_counter()
        if crops and settings.get("use_cls", True):
            probs = self._batched("cls", crops, lambda c: ocr.classifier_batch(c, cls["image_shape"]), cls["batch"])
            crops = [np.ascontiguousarray(c[::-1, ::-1]) if p[1] > p[0] and p[1] > cls["thresh"] else c
                     for c, p in zip(crops, probs)]
        t2 = time.perf_counter()
        texts = []
        if crops:
            probs = self._batched("rec", crops, lambda c: ocr.recognizer_batch(c, rec["image_shape"]), rec["batch"])
            texts = [ocr.ctc_decode(p[None], self.model.characters)[0] for p in probs]
        t3 = time.perf_counter()
        boxes = ocr.to_original(boxes, mapping, height, width)
        lines = [{"text": text, "score": round(score, 5), "box": [[round(float(x), 1), round(float(y), 1)] for x, y in box]}
                 for box, (text, score) in zip(boxes, texts) if score >= settings["text_score"]]
        self.stats = {"det": (t1 - t0) * 1e3, "cls": (t2 - t1) * 1e3, "rec": (t3 - t2) * 1e3,
                      "input": list(x.shape[2:]), "width": width, "height": height, "boxes": len(boxes)}
        return lines

    def __call__(self, inputs):
        """One image -> {"lines", "text"}; a list of images -> a list of them."""
        single = not isinstance(inputs, (list, tuple))
        results = []
        for image in ([inputs] if single else inputs):
            lines = self.read(image)
            results.append({"lines": lines, "text": "\n".join(line["text"] for line in lines)})
        return results[0] if single else results


PIPELINE = TextReader


# --- the command line -----------------------------------------------------------------------------
def _add_arguments(p) -> None:
    p.add_argument("images", nargs="+", metavar="IMAGE")
    p.add_argument("--json", action="store_true",
                   help='one JSON object per line: {"input", "lines": [{"text", "score", "box"}], "text"}')
    p.add_argument("--save", default=None, metavar="OUT.png",
                   help="draw the lines' boxes into a PNG (OUT-2.png, ... for more images)")
    p.add_argument("--model", default=None, help="pp-ocrv4 (Chinese and English, the default) or pp-ocrv5 "
                                                 "(multilingual), or another registry model serving ocr")
    p.add_argument("--weights", default=None, help="the model's weights (default: the built dist/models/...)")
    add_device_argument(p)


def _saved_path(out: str, index: int, count: int) -> Path:
    path = Path(out)
    return path if count == 1 or index == 0 else path.with_name(f"{path.stem}-{index + 1}{path.suffix or '.png'}")


def draw_lines(image, lines: list[dict]) -> np.ndarray:
    """The image (RGB) with each line's box outlined."""
    from ..vision.detection import as_rgb
    from ..vision.draw import draw_line
    out = as_rgb(image).copy()
    for line in lines:
        corners = [tuple(int(round(v)) for v in point) for point in line["box"]]
        for a, b in zip(corners, corners[1:] + corners[:1]):
            draw_line(out, a, b, (255, 40, 40), thickness=2)
    return out


def _ocr(args) -> int:
    from ..vision import as_image
    from ..vision.draw import write_png
    from . import pipeline
    pipe = pipeline(TASK, device=args.device, weights=args.weights, model=args.model)
    status = 0
    for index, path in enumerate(args.images):
        try:
            image = as_image(path)
            result = pipe(image)
        except INPUT_ERRORS as e:
            bad_input(path, e)
            status = 2
            continue
        if args.json:
            print(json.dumps({"input": path, **result}, ensure_ascii=False))
        else:
            sys.stdout.write(f"{path}:\n" if len(args.images) > 1 else "")
            print(result["text"] if result["lines"] else "(no text found)")
        if args.save:
            write_png(_saved_path(args.save, index, len(args.images)), draw_lines(image, result["lines"]))
    return status


COMMANDS = {
    "ocr": Command(
        help="read the text in images (PP-OCR: detector, angle classifier, recognizer)",
        description="Find the lines of text in each image and read them with PaddleOCR's PP-OCR mobile models "
                    "(PNG or .npy; JPEG and other formats need Pillow natively). Prints the text in reading "
                    "order, or with --json each line's text, score and box.",
        add_arguments=_add_arguments,
        run=_ocr),
}


# --- the page's worker ----------------------------------------------------------------------------
async def read_text(pixels, width: int, height: int) -> str:
    """RGBA pixels decoded by the page (or, with width = height = 0, a file's bytes) -> the lines,
    the joined text and the times of each stage (the module's docstring)."""
    pipe = state.loaded(TASK)
    if int(width) == 0 and int(height) == 0:
        from ..vision import read_image
        image = read_image(bytes(state.py(pixels)))
    else:
        image = state.rgba(pixels, width, height)
    async with state.lock:
        result = pipe(image)
        stats = dict(pipe.stats)
        notice = state.notice(pipe)
    timings = {name: round(stats[name], 2) for name in ("det", "cls", "rec")}
    return json.dumps({"task": TASK, **result, "width": stats["width"], "height": stats["height"],
                       "input": stats["input"], "timings": timings, "ms": round(sum(timings.values()), 2),
                       "device": state.current["device"], **notice}, ensure_ascii=False)


WORKER = (read_text,)
