"""The pre- and post-processing of PP-OCR (text detection, orientation, recognition), in NumPy.

What the reference does (PaddleOCR's tools/infer and rapidocr-onnxruntime 1.4.4, whose defaults the
model entries carry) and we reproduce step for step, so that our boxes and text can be compared
with its output:

- the image is BGR uint8: PaddleOCR's models were trained on OpenCV's channel order;
- `fit_image`: a side longer than 2000 px is scaled down, one shorter than 30 px up (each rounded to
  a multiple of 32), and a very flat or very low image is padded above and below with black;
- `detector_input`: resized for the detector (`limit_type` "min": the shorter side to at least
  `limit_side_len`; "max": the longer to at most), rounded to multiples of 32, then
  (x / 255 - mean) / std, channels first;
- `db_boxes` (DBNet's post-processing, Liao et al. 2020, arXiv 1911.08947): the probability map
  binarized at `thresh`, dilated by 2x2, its borders followed (engine.vision.contours); each
  border's minimum-area rectangle is scored by the mean probability inside it, expanded by the
  "unclip" offset (area * ratio / perimeter) and boxed again (engine.vision.polygons);
- `reading_order`: top to bottom, then left to right within 10 px rows, as the reference sorts;
- `crop_lines`: each box cut out by a perspective warp, turned upright when tall;
- `classifier_batch` and `recognizer_batch`: resized to the network's height keeping the aspect
  ratio, padded on the right with zeros (after normalization);
- `ctc_decode`: CTC's greedy path (Graves et al. 2006): the best class per column, repeats merged,
  blanks (class 0) dropped; the line's score is the mean probability of the kept columns.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from .detection import as_rgb, resize_linear

MAX_SIDE = 2000            # rapidocr's Global.max_side_len
MIN_SIDE = 30              # Global.min_side_len
MIN_HEIGHT = 30            # Global.min_height: lower images are padded
FLAT_RATIO = 8             # Global.width_height_ratio: flatter images are padded
MIN_BOX_SIDE = 3           # DBPostProcess.min_size
ROW_TOLERANCE = 10         # reading order: boxes whose tops differ by less share a row


def to_bgr(image) -> np.ndarray:
    """uint8 (H, W, 3) BGR from an RGB(A) or grey uint8 image (alpha dropped)."""
    return np.ascontiguousarray(as_rgb(image)[:, :, ::-1])


def _scaled(image: np.ndarray, ratio: float) -> tuple[np.ndarray, float, float]:
    h, w = image.shape[:2]
    new_h = max(32, int(round(int(h * ratio) / 32) * 32))       # at least one stride (a 1 x 20000 strip)
    new_w = max(32, int(round(int(w * ratio) / 32) * 32))
    return resize_linear(image, new_w, new_h), h / new_h, w / new_w


def fit_image(bgr: np.ndarray) -> tuple[np.ndarray, dict]:
    """(image to detect in, how its points map back to `bgr`'s: {"ratio_h", "ratio_w", "top"})."""
    ratio_h = ratio_w = 1.0
    h, w = bgr.shape[:2]
    if max(h, w) > MAX_SIDE:
        bgr, ratio_h, ratio_w = _scaled(bgr, MAX_SIDE / max(h, w))
    h, w = bgr.shape[:2]
    if min(h, w) < MIN_SIDE:
        bgr, ratio_h, ratio_w = _scaled(bgr, MIN_SIDE / min(h, w))
    h, w = bgr.shape[:2]
    top = 0
    if h <= MIN_HEIGHT or w / h > FLAT_RATIO:
        top = int(abs(max(int(w / FLAT_RATIO), MIN_HEIGHT) * 2 - h) / 2)
        padded = np.zeros((h + 2 * top, w, 3), np.uint8)
        padded[top:top + h] = bgr
        bgr = padded
    return bgr, {"ratio_h": ratio_h, "ratio_w": ratio_w, "top": top}


def to_original(boxes: np.ndarray, mapping: dict, height: int, width: int) -> np.ndarray:
    """(N, 4, 2) boxes in fit_image's pixels -> the original image's, clipped to it."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4, 2).copy()
    boxes[:, :, 1] -= mapping["top"]
    boxes[:, :, 0] *= mapping["ratio_w"]
    boxes[:, :, 1] *= mapping["ratio_h"]
    boxes = np.maximum(boxes, 0)
    boxes[..., 0] = np.minimum(boxes[..., 0], width)
    boxes[..., 1] = np.minimum(boxes[..., 1], height)
    return boxes


def detector_size(height: int, width: int, det: dict) -> tuple[int, int]:
    """The detector's input (height, width), multiples of 32, as DetPreProcess.resize picks it."""
    limit, kind = det["limit_side_len"], det["limit_type"]
    if kind == "max":
        ratio = limit / max(height, width) if max(height, width) > limit else 1.0
    else:
        ratio = limit / min(height, width) if min(height, width) < limit else 1.0
    return (max(32, int(round(int(height * ratio) / 32) * 32)),
            max(32, int(round(int(width * ratio) / 32) * 32)))


def detector_input(bgr: np.ndarray, det: dict) -> np.ndarray:
    """(1, 3, h, w) float32: resized to detector_size and normalized with det's mean and std."""
    h, w = detector_size(*bgr.shape[:2], det)
    resized = resize_linear(bgr, w, h)
    mean = np.asarray(det["mean"], np.float64)
    std = np.asarray(det["std"], np.float64)
    x = (resized.astype(np.float32) * np.float32(1 / 255) - mean) / std     # float64, as the reference's
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], np.float32)


def db_boxes(prob: np.ndarray, det: dict, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """DBNet's post-processing: the (h, w) probability map -> ((N, 4, 2) int32 boxes in a
    (height, width) image, (N,) scores), at most det["max_candidates"] borders examined."""
    from .contours import dilate_2x2, find_contours
    from .polygons import box_score_fast, get_mini_boxes, unclip
    map_h, map_w = prob.shape
    mask = prob > det["thresh"]
    if det.get("use_dilation", True):
        mask = dilate_2x2(mask.astype(np.uint8))
    boxes, scores = [], []
    for contour in find_contours(mask)[:det["max_candidates"]]:
        points, short = get_mini_boxes(contour)
        if short < MIN_BOX_SIDE:
            continue
        score = box_score_fast(prob, points)
        if det["box_thresh"] > score:
            continue
        box, short = get_mini_boxes(unclip(points, det["unclip_ratio"]))
        if short < MIN_BOX_SIDE + 2:
            continue
        box = np.array(box, np.float64)
        box[:, 0] = np.clip(np.round(box[:, 0] / map_w * width), 0, width)
        box[:, 1] = np.clip(np.round(box[:, 1] / map_h * height), 0, height)
        boxes.append(box.astype(np.int32))
        scores.append(score)
    return np.array(boxes, np.int32).reshape(-1, 4, 2), np.array(scores, np.float64)


def order_clockwise(points: np.ndarray) -> np.ndarray:
    """Four points -> top-left, top-right, bottom-right, bottom-left (by x, then y in each pair)."""
    by_x = points[np.argsort(points[:, 0], kind="stable")]
    left, right = by_x[:2], by_x[2:]
    tl, bl = left[np.argsort(left[:, 1], kind="stable")]
    tr, br = right[np.argsort(right[:, 1], kind="stable")]
    return np.array([tl, tr, br, bl], np.float32)


def keep_boxes(boxes: np.ndarray, height: int, width: int) -> np.ndarray:
    """Boxes ordered clockwise, clipped to the image, and those under 4 px on a side dropped."""
    kept = []
    for box in boxes:
        box = order_clockwise(box)
        box[:, 0] = np.floor(np.clip(box[:, 0], 0, width - 1))
        box[:, 1] = np.floor(np.clip(box[:, 1], 0, height - 1))
        if int(np.linalg.norm(box[0] - box[1])) <= 3 or int(np.linalg.norm(box[0] - box[3])) <= 3:
            continue
        kept.append(box)
    return np.array(kept, np.float32).reshape(-1, 4, 2)


def reading_order(boxes: np.ndarray) -> list[int]:
    """Indices of `boxes` top to bottom, then left to right where their tops are within 10 px."""
    order = sorted(range(len(boxes)), key=lambda i: (boxes[i][0][1], boxes[i][0][0]))
    for i in range(len(order) - 1):               # the reference's pass of neighbour swaps
        for j in range(i, -1, -1):
            a, b = boxes[order[j]][0], boxes[order[j + 1]][0]
            if abs(b[1] - a[1]) < ROW_TOLERANCE and b[0] < a[0]:
                order[j], order[j + 1] = order[j + 1], order[j]
            else:
                break
    return order


def crop_lines(bgr: np.ndarray, boxes: np.ndarray) -> list[np.ndarray]:
    """Each box cut out upright (engine.vision.warp.rotate_crop)."""
    from .warp import rotate_crop
    return [rotate_crop(bgr, box) for box in boxes]


def _resized_padded(crop: np.ndarray, height: int, width: int) -> np.ndarray:
    """(3, height, width) float32: the crop resized to `height` (its width at most `width`),
    normalized to [-1, 1], zeros to the right."""
    h, w = crop.shape[:2]
    ratio = w / float(h)
    resized_w = width if math.ceil(height * ratio) > width else int(math.ceil(height * ratio))
    resized_w = max(resized_w, 1)
    resized = resize_linear(crop, resized_w, height).astype(np.float32)
    out = np.zeros((3, height, width), np.float32)
    out[:, :, :resized_w] = (resized.transpose(2, 0, 1) / 255 - 0.5) / 0.5
    return out


def by_aspect(crops: list[np.ndarray]) -> np.ndarray:
    """The crops' indices from the narrowest (width / height) to the widest, as both stages batch."""
    return np.argsort(np.array([c.shape[1] / float(c.shape[0]) for c in crops]))


def classifier_batch(crops: list[np.ndarray], shape) -> np.ndarray:
    """(N, 3, 48, 192) float32 for the angle classifier (shape: [3, height, width])."""
    _, height, width = shape
    return np.stack([_resized_padded(c, height, width) for c in crops])


def recognizer_batch(crops: list[np.ndarray], shape) -> np.ndarray:
    """(N, 3, 48, W) float32 for the recognizer: W is the batch's widest aspect ratio (at least
    shape's width / height) times the height."""
    _, height, width = shape
    widest = max([width / height] + [c.shape[1] / float(c.shape[0]) for c in crops])
    return np.stack([_resized_padded(c, height, int(height * widest)) for c in crops])


def ctc_decode(probs: np.ndarray, characters: list[str]) -> list[tuple[str, float]]:
    """(N, T, classes) probabilities -> [(text, score)]: the greedy CTC path with repeats merged
    and blanks (class 0) dropped; score = the mean probability of the kept columns (0 if none)."""
    if probs.ndim != 3 or probs.shape[2] != len(characters):
        raise InputError(f"the recognizer gave shape {probs.shape}, expected (N, T, {len(characters)})")
    best = probs.argmax(axis=2)
    best_p = probs.max(axis=2)
    keep = best != 0
    keep[:, 1:] &= best[:, 1:] != best[:, :-1]
    out = []
    for ids, p, k in zip(best, best_p, keep):
        text = "".join(characters[i] for i in ids[k])
        out.append((text, float(np.mean(p[k], dtype=np.float64)) if k.any() else 0.0))
    return out
