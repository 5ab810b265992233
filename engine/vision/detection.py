"""Pre- and post-processing of YOLO detectors (YOLO11 detect/pose, YOLOv10), in NumPy only so
the page's worker runs the same code as the command line.

    tensor, box = letterbox(image, size=640)         # (3, h, w) float32 in [0, 1], Letterbox(...)
    raw = model(tensor[None])[0]                     # (4 + nc + nk, A): the head's decoded output
    detections = postprocess(raw, config, box, threshold=0.25)

The facts are those of ultralytics 8.4.190 (AGPL-3.0, https://github.com/ultralytics/ultralytics),
as its predictor runs a `.pt` model:
- `data/augment.py` LetterBox with `auto=True` (the predictor's `rect=True`): scale r =
  min(size / h, size / w) (scaling up too), the resized sides `max(round(side * r), 1)`, padding
  only up to the next multiple of the stride (32), split as `round(d / 2 - 0.1)` before and
  `round(d / 2 + 0.1)` after (Python's round), pad value 114, `cv2.resize(..., INTER_LINEAR)`.
- OpenCV's INTER_LINEAR on uint8 (imgproc/src/resize.cpp) is fixed point: source position
  `(d + 0.5) * (src / dst) - 0.5` as a C float, its floor and fraction, clamped to the image's
  edge; weights `round(w * 2048)` (INTER_RESIZE_COEF_BITS = 11); a horizontal pass to int32
  sums, then the vertical pass as its SIMD kernel (VResizeLinearVec_32s8u) computes it:
  `((S0 >> 4) * b0 >> 16) + ((S1 >> 4) * b1 >> 16) + 2 >> 2`. `resize_linear` does exactly
  that: bit-identical to cv2.resize here (tests/vision/cv2_resize_reference.npz). A float
  resize moves scores by up to ~5e-3.
- `utils/nms.py` non_max_suppression: candidates whose best class probability is > the
  threshold, (cx, cy, w, h) -> corners, the best class only, at most max_nms = 30000 by score,
  class-wise greedy NMS by offsetting each class's boxes by class * 7680 pixels (IoU > iou
  suppresses; torchvision.ops.nms), at most max_det = 300 kept.
- `nn/modules/head.py` Detect.postprocess for one-to-one heads (YOLOv10, end2end): no NMS; the
  top k = min(max_det, A) anchors by their best class, then the top k of their k * nc (anchor,
  class) scores; then nms.py's end2end branch keeps those with score > threshold, at most max_det.
- `utils/ops.py` scale_boxes / scale_coords: back to the original image from the input's and
  the original's shapes (gain and padding recomputed as LetterBox did), then clipped to it.

Detections come out in the Hugging Face pipeline formats: object detection
`[{"label", "score", "box": {"xmin", "ymin", "xmax", "ymax"}}]`, pose estimation
`[{"score", "box", "keypoints": [{"name", "x", "y", "score"}]}]`; coordinates are pixels of the
original image rounded to 0.01.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import InputError

__all__ = ["Letterbox", "letterbox", "resize_linear", "postprocess", "non_max_suppression",
           "one_to_one_topk", "scale_boxes", "scale_coords", "box_iou", "COCO_KEYPOINTS", "SKELETON"]

PAD_VALUE = 114                 # LetterBox's padding_value
MAX_WH = 7680                   # non_max_suppression's max_wh: the class offset of class-wise NMS
MAX_NMS = 30000                 # non_max_suppression's max_nms: boxes that go into NMS at most
_COEF_BITS = 11                 # OpenCV's INTER_RESIZE_COEF_BITS

# The 17 COCO keypoints in the model's order, from ultralytics' cfg/datasets/coco-pose.yaml
# (kpt_names); the same order as the COCO keypoint annotations.
COCO_KEYPOINTS = ("nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
                  "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee",
                  "right_knee", "left_ankle", "right_ankle")
# Limbs as pairs of keypoint indices (0-based), the COCO skeleton ultralytics draws
# (utils/plotting.py Annotator.skeleton, which counts from 1): legs, hips, torso, arms, face.
SKELETON = ((15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7), (6, 8),
            (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6))


class Letterbox(NamedTuple):
    """Where the original image lies in the model's input."""
    scale: float                # resized / original (one ratio for both axes)
    pad_x: int                  # columns of padding on the left
    pad_y: int                  # rows of padding on top
    width: int                  # the original image's size
    height: int
    input_width: int            # the model's input (multiples of the stride)
    input_height: int


# --- pre-processing ------------------------------------------------------------------------------
def as_rgb(image) -> np.ndarray:
    """uint8 (H, W, 3) from (H, W) or (H, W, C) with C in 1..4; alpha is dropped, as
    cv2.imread(IMREAD_COLOR) does, and gray repeated."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise InputError(f"expected a uint8 image, got dtype {image.dtype}")
    if image.ndim == 2:
        image = image[:, :, None]
    if image.ndim != 3 or not 1 <= image.shape[2] <= 4:
        raise InputError(f"expected an (H, W) or (H, W, C) image with C in 1..4, got shape {image.shape}")
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise InputError(f"image has zero size ({image.shape[1]}x{image.shape[0]})")
    if image.shape[2] <= 2:
        return np.repeat(image[:, :, :1], 3, axis=2)
    return image[:, :, :3]


def _linear_taps(src: int, dst: int, clamp: bool):
    """OpenCV's INTER_LINEAR source indices and 11-bit weights for one axis."""
    scale = 1.0 / (dst / src)                                            # 1 / inv_scale, in double
    position = ((np.arange(dst) + 0.5) * scale - 0.5).astype(np.float32)  # (float)((d + 0.5) * scale - 0.5)
    first = np.floor(position)
    fraction = position - first
    first = first.astype(np.intp)                                         # take() wants intp: int32 in wasm32
    if clamp:                    # the horizontal pass pins taps outside the image to its edge
        outside = (first < 0) | (first >= src - 1)
        fraction[outside] = 0
        first = np.clip(first, 0, src - 1)
    one = np.float32(1 << _COEF_BITS)
    w0 = np.rint((np.float32(1) - fraction) * one).astype(np.int32)     # saturate_cast<short>: round half even
    w1 = np.rint(fraction * one).astype(np.int32)
    return np.clip(first, 0, src - 1), np.clip(first + 1, 0, src - 1), w0, w1


def resize_linear(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """uint8 (H, W, C) -> (height, width, C) as cv2.resize(image, (width, height),
    interpolation=cv2.INTER_LINEAR), bit for bit (see the module's docstring)."""
    src_h, src_w = image.shape[:2]
    if (src_w, src_h) == (width, height):
        return image.copy()
    x0, x1, a0, a1 = _linear_taps(src_w, width, clamp=True)
    y0, y1, b0, b1 = _linear_taps(src_h, height, clamp=False)
    rows, where = np.unique(np.concatenate([y0, y1]), return_inverse=True)   # only the rows used
    src = image if len(rows) == src_h else image[rows]                    # uint8 gathers, int32 sums
    horizontal = np.multiply(np.take(src, x0, axis=1), a0[:, None], dtype=np.int32)   # (rows, width, C)
    horizontal += np.multiply(np.take(src, x1, axis=1), a1[:, None], dtype=np.int32)  # <= 255 * 2048
    horizontal >>= 4
    top, bottom = horizontal[where[:height]], horizontal[where[height:]]
    top *= b0[:, None, None]
    top >>= 16
    bottom *= b1[:, None, None]
    bottom >>= 16
    top += bottom
    top += 2
    top >>= 2
    return np.clip(top, 0, 255).astype(np.uint8)


def letterbox(image, size: int = 640, stride: int = 32, auto: bool = True) -> tuple[np.ndarray, Letterbox]:
    """uint8 RGB image -> ((3, h, w) float32 in [0, 1], Letterbox): resized keeping its aspect
    ratio so that it fits size x size, padded with 114 to multiples of `stride` (auto=True, as
    ultralytics predicts with a .pt model) or to size x size (auto=False)."""
    image = as_rgb(image)
    if size <= 0 or size % stride:
        raise InputError(f"size must be a positive multiple of {stride}, got {size}")
    height, width = image.shape[:2]
    r = min(size / height, size / width)
    new_w, new_h = max(round(width * r), 1), max(round(height * r), 1)
    dw, dh = size - new_w, size - new_h
    if auto:
        dw, dh = dw % stride, dh % stride
    dw, dh = dw / 2, dh / 2
    top, bottom = round(dh - 0.1), round(dh + 0.1)
    left, right = round(dw - 0.1), round(dw + 0.1)
    resized = resize_linear(image, new_w, new_h)
    h, w = new_h + top + bottom, new_w + left + right
    # x / 255 in float32, as the predictor divides the padded uint8 image (the same bits)
    tensor = np.full((3, h, w), np.float32(PAD_VALUE) / np.float32(255), np.float32)
    np.divide(resized.transpose(2, 0, 1), np.float32(255), out=tensor[:, top:top + new_h, left:left + new_w],
              dtype=np.float32)
    return tensor, Letterbox(r, left, top, width, height, w, h)


# --- post-processing -----------------------------------------------------------------------------
def xywh2xyxy(boxes: np.ndarray) -> np.ndarray:
    """(..., 4) centre and size -> corners, in the input's dtype."""
    half = boxes[..., 2:] / 2
    return np.concatenate([boxes[..., :2] - half, boxes[..., :2] + half], axis=-1)


def box_iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one (4,) corner box with (n, 4) boxes, as torchvision.ops.nms computes it."""
    w = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    h = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = w * h
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / (area + areas - inter)


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> np.ndarray:
    """Greedy NMS: indices kept, by decreasing score; a box goes when its IoU with a kept,
    better box is > iou (torchvision.ops.nms)."""
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size:
        best = order[0]
        keep.append(best)
        rest = order[1:]
        order = rest[box_iou(boxes[best], boxes[rest]) <= iou]
    return np.asarray(keep, np.int64)


def non_max_suppression(raw: np.ndarray, nc: int, threshold: float = 0.25, iou: float = 0.7,
                        max_det: int = 300, max_nms: int = MAX_NMS) -> np.ndarray:
    """(4 + nc + extra, A) head output -> (n, 6 + extra) rows of x1, y1, x2, y2, score, class,
    extra (keypoints), input pixels: ultralytics' rule (module docstring)."""
    x = raw.T.astype(np.float32, copy=False)                         # (A, 4 + nc + extra)
    probabilities = x[:, 4:4 + nc]
    best = probabilities.max(1) if nc else np.zeros(len(x), np.float32)
    x = x[best > threshold]
    if not len(x):
        return np.zeros((0, x.shape[1] + 2 - nc), np.float32)
    cls = probabilities[best > threshold].argmax(1)
    conf = x[np.arange(len(x)), 4 + cls]
    rows = np.concatenate([xywh2xyxy(x[:, :4]), conf[:, None], cls[:, None].astype(np.float32), x[:, 4 + nc:]], 1)
    if len(rows) > max_nms:
        rows = rows[np.argsort(-rows[:, 4], kind="stable")[:max_nms]]
    offset = rows[:, 5:6] * np.float32(MAX_WH)
    keep = nms(rows[:, :4] + offset, rows[:, 4], iou)[:max_det]
    return rows[keep]


def one_to_one_topk(raw: np.ndarray, nc: int, threshold: float = 0.25, max_det: int = 300,
                    head_max_det: int = 300) -> np.ndarray:
    """A one-to-one head's (4 + nc + extra, A) output -> (n, 6 + extra) rows like
    non_max_suppression's, without NMS: YOLOv10's top-k rule (module docstring)."""
    x = raw.T.astype(np.float32, copy=False)
    scores = x[:, 4:4 + nc]
    k = min(head_max_det, len(x))
    anchors = _topk(scores.max(1), k)                                 # the k best anchors
    picked = scores[anchors].reshape(-1)                               # (k * nc,)
    best = _topk(picked, k)
    anchor, cls = anchors[best // nc], best % nc
    rows = np.concatenate([xywh2xyxy(x[anchor, :4]), picked[best, None], cls[:, None].astype(np.float32),
                           x[anchor, 4 + nc:]], 1)
    return rows[rows[:, 4] > threshold][:max_det]


def _topk(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values, largest first (ties: the lower index first)."""
    if k < len(values):
        part = np.argpartition(-values, k - 1)[:k]
        return part[np.lexsort((part, -values[part]))]
    return np.argsort(-values, kind="stable")


def _gains(box: Letterbox):
    """scale_boxes' gain and padding, recomputed from the input's and the original's shapes."""
    gain = min(box.input_height / box.height, box.input_width / box.width)
    new_h, new_w = max(round(box.height * gain), 1), max(round(box.width * gain), 1)
    pad_x = round((box.input_width - new_w) / 2 - 0.1)
    pad_y = round((box.input_height - new_h) / 2 - 0.1)
    return new_w / box.width, new_h / box.height, pad_x, pad_y


def scale_boxes(boxes: np.ndarray, box: Letterbox) -> np.ndarray:
    """(n, 4) corners in input pixels -> original pixels, clipped to the image."""
    gain_x, gain_y, pad_x, pad_y = _gains(box)
    out = boxes.astype(np.float32, copy=True)
    out[:, [0, 2]] = np.clip((out[:, [0, 2]] - pad_x) / gain_x, 0, box.width)
    out[:, [1, 3]] = np.clip((out[:, [1, 3]] - pad_y) / gain_y, 0, box.height)
    return out


def scale_coords(points: np.ndarray, box: Letterbox) -> np.ndarray:
    """(..., >= 2) points with x, y first, input pixels -> original pixels, clipped."""
    gain_x, gain_y, pad_x, pad_y = _gains(box)
    out = points.astype(np.float32, copy=True)
    out[..., 0] = np.clip((out[..., 0] - pad_x) / gain_x, 0, box.width)
    out[..., 1] = np.clip((out[..., 1] - pad_y) / gain_y, 0, box.height)
    return out


def _field(config, name, default=None):
    if isinstance(config, dict):
        return config.get(name, default)
    return getattr(config, name, default)


def class_names(config) -> list[str]:
    """The config's {"0": "person", ...} (or a list) as a list by class index."""
    names = _field(config, "names") or {}
    if isinstance(names, dict):
        return [str(names.get(str(i), names.get(i, str(i)))) for i in range(len(names))]
    return [str(n) for n in names]


def detect(raw: np.ndarray, config, box: Letterbox, threshold: float = 0.25, iou: float = 0.7,
           max_det: int = 300) -> dict:
    """The head's output for one image -> arrays in original pixels: "boxes" (n, 4) corners,
    "scores" (n,), "classes" (n,) int, and for pose "keypoints" (n, nk, 3) (x, y, visibility)."""
    raw = np.asarray(raw)
    if raw.ndim == 3 and raw.shape[0] == 1:
        raw = raw[0]
    kpt_shape = _field(config, "kpt_shape")
    nc = int(_field(config, "nc") or len(class_names(config)))
    extra = int(np.prod(kpt_shape)) if kpt_shape else 0
    if raw.ndim != 2 or raw.shape[0] != 4 + nc + extra:
        raise InputError(f"expected the head's output of shape (4 + {nc} + {extra}, anchors), got {raw.shape}")
    if not 0 <= threshold <= 1 or not 0 <= iou <= 1:
        raise InputError(f"threshold and iou must be in [0, 1], got {threshold} and {iou}")
    if _field(config, "end2end", False):
        rows = one_to_one_topk(raw, nc, threshold, max_det, int(_field(config, "max_det", 300) or 300))
    else:
        rows = non_max_suppression(raw, nc, threshold, iou, max_det)
    result = {"boxes": scale_boxes(rows[:, :4], box), "scores": rows[:, 4].copy(),
              "classes": rows[:, 5].astype(np.int64)}
    if kpt_shape:
        result["keypoints"] = scale_coords(rows[:, 6:].reshape(len(rows), *kpt_shape), box)
    return result


def _corners(b) -> dict:
    return {"xmin": round(float(b[0]), 2), "ymin": round(float(b[1]), 2),
            "xmax": round(float(b[2]), 2), "ymax": round(float(b[3]), 2)}


def as_dicts(found: dict, config) -> list[dict]:
    """detect()'s arrays -> the pipeline format (object detection, or pose when there are
    keypoints)."""
    if "keypoints" in found:
        names = COCO_KEYPOINTS if found["keypoints"].shape[1] == len(COCO_KEYPOINTS) else \
            tuple(str(i) for i in range(found["keypoints"].shape[1]))
        return [{"score": round(float(s), 5), "box": _corners(b),
                 "keypoints": [{"name": n, "x": round(float(k[0]), 2), "y": round(float(k[1]), 2),
                                "score": round(float(k[2]), 5) if len(k) > 2 else 1.0}
                               for n, k in zip(names, kpts)]}
                for b, s, kpts in zip(found["boxes"], found["scores"], found["keypoints"])]
    labels = class_names(config)
    return [{"label": labels[c] if c < len(labels) else str(c), "score": round(float(s), 5), "box": _corners(b)}
            for b, s, c in zip(found["boxes"], found["scores"], found["classes"])]


def postprocess(raw: np.ndarray, config, box: Letterbox, threshold: float = 0.25, iou: float = 0.7,
                max_det: int = 300) -> list[dict]:
    """The head's (4 + nc + nk, A) output for one image -> its detections in the pipeline format."""
    return as_dicts(detect(raw, config, box, threshold, iou, max_det), config)
