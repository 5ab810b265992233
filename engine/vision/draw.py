"""Drawing detections onto an image, and writing it as PNG, in NumPy only (no Pillow, no OpenCV).

    image = draw_detections(image, detections)    # boxes, "label 0.93" tags, keypoints and limbs
    write_png("out.png", image)

Detections are the pipelines' dicts (engine/tasks/object_detection.py): a "box" with xmin, ymin,
xmax, ymax, a "label" and "score", and for pose "keypoints" [{"name", "x", "y", "score"}] joined
by detection.SKELETON where both ends score above `keypoint_threshold`. Text is a built-in 3x5
bitmap font scaled up (lower-case letters, digits, ". % - : _"; anything else draws as "?").
"""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from ..errors import InputError
from .detection import SKELETON, as_rgb

__all__ = ["draw_detections", "draw_rectangle", "draw_line", "draw_disc", "draw_text", "encode_png", "write_png"]

# 3x5 glyphs, rows top to bottom, "#" set
_GLYPHS = {
    "0": "###|#.#|#.#|#.#|###", "1": ".#.|##.|.#.|.#.|###", "2": "###|..#|###|#..|###", "3": "###|..#|.##|..#|###",
    "4": "#.#|#.#|###|..#|..#", "5": "###|#..|###|..#|###", "6": "###|#..|###|#.#|###", "7": "###|..#|..#|.#.|.#.",
    "8": "###|#.#|###|#.#|###", "9": "###|#.#|###|..#|###", "a": ".#.|#.#|###|#.#|#.#", "b": "##.|#.#|##.|#.#|##.",
    "c": ".##|#..|#..|#..|.##", "d": "##.|#.#|#.#|#.#|##.", "e": "###|#..|##.|#..|###", "f": "###|#..|##.|#..|#..",
    "g": ".##|#..|#.#|#.#|.##", "h": "#.#|#.#|###|#.#|#.#", "i": "###|.#.|.#.|.#.|###", "j": "..#|..#|..#|#.#|.#.",
    "k": "#.#|#.#|##.|#.#|#.#", "l": "#..|#..|#..|#..|###", "m": "#.#|###|###|#.#|#.#", "n": "##.|#.#|#.#|#.#|#.#",
    "o": ".#.|#.#|#.#|#.#|.#.", "p": "##.|#.#|##.|#..|#..", "q": ".#.|#.#|#.#|##.|.##", "r": "##.|#.#|##.|#.#|#.#",
    "s": ".##|#..|.#.|..#|##.", "t": "###|.#.|.#.|.#.|.#.", "u": "#.#|#.#|#.#|#.#|###", "v": "#.#|#.#|#.#|#.#|.#.",
    "w": "#.#|#.#|###|###|#.#", "x": "#.#|#.#|.#.|#.#|#.#", "y": "#.#|#.#|.#.|.#.|.#.", "z": "###|..#|.#.|#..|###",
    " ": "...|...|...|...|...", ".": "...|...|...|...|.#.", "%": "#.#|..#|.#.|#..|#.#", "-": "...|...|###|...|...",
    ":": "...|.#.|...|.#.|...", "_": "...|...|...|...|###", "?": "###|..#|.#.|...|.#.",
}
_MASKS = {ch: np.array([[c == "#" for c in row] for row in rows.split("|")]) for ch, rows in _GLYPHS.items()}
# box colours by class index, and the limbs' and keypoints' colour
_PALETTE = np.array([(255, 56, 56), (255, 157, 151), (255, 112, 31), (255, 178, 29), (207, 210, 49), (72, 249, 10),
                     (146, 204, 23), (61, 219, 134), (26, 147, 52), (0, 212, 187), (44, 153, 168), (0, 194, 255),
                     (52, 69, 147), (100, 115, 255), (0, 24, 236), (132, 56, 255), (82, 0, 133), (203, 56, 255),
                     (255, 149, 200), (255, 55, 199)], np.uint8)
_LIMB, _JOINT = (51, 153, 255), (255, 128, 0)


def _fill(img, x0, y0, x1, y1, color) -> None:
    """Fill the pixels [x0, x1) x [y0, y1), clipped to the image."""
    h, w = img.shape[:2]
    x0, x1 = max(int(x0), 0), min(int(x1), w)
    y0, y1 = max(int(y0), 0), min(int(y1), h)
    if x0 < x1 and y0 < y1:
        img[y0:y1, x0:x1] = color


def draw_rectangle(img, box, color, thickness: int = 2) -> None:
    """The outline of box (x0, y0, x1, y1), `thickness` pixels inwards, in place."""
    x0, y0, x1, y1 = (int(round(v)) for v in box)
    t = thickness
    _fill(img, x0, y0, x1 + 1, y0 + t, color)
    _fill(img, x0, y1 + 1 - t, x1 + 1, y1 + 1, color)
    _fill(img, x0, y0, x0 + t, y1 + 1, color)
    _fill(img, x1 + 1 - t, y0, x1 + 1, y1 + 1, color)


def draw_line(img, p0, p1, color, thickness: int = 2) -> None:
    """A straight line from p0 to p1 (x, y), `thickness` pixels wide, in place."""
    h, w = img.shape[:2]
    n = int(max(abs(p1[0] - p0[0]), abs(p1[1] - p0[1]))) + 1
    t = np.linspace(0.0, 1.0, n)
    xs = np.rint(p0[0] + (p1[0] - p0[0]) * t).astype(np.int64)
    ys = np.rint(p0[1] + (p1[1] - p0[1]) * t).astype(np.int64)
    for dy in range(-(thickness // 2), thickness - thickness // 2):
        for dx in range(-(thickness // 2), thickness - thickness // 2):
            x, y = xs + dx, ys + dy
            inside = (x >= 0) & (x < w) & (y >= 0) & (y < h)
            img[y[inside], x[inside]] = color


def draw_disc(img, centre, radius: int, color) -> None:
    """A filled disc, in place."""
    h, w = img.shape[:2]
    cx, cy = int(round(centre[0])), int(round(centre[1]))
    x0, x1, y0, y1 = max(cx - radius, 0), min(cx + radius + 1, w), max(cy - radius, 0), min(cy + radius + 1, h)
    if x0 >= x1 or y0 >= y1:
        return
    yy, xx = np.ogrid[y0:y1, x0:x1]
    img[y0:y1, x0:x1][(xx - cx) ** 2 + (yy - cy) ** 2 <= radius * radius] = color


def draw_text(img, x: int, y: int, text: str, color, background=None, scale: int = 2) -> None:
    """`text` with its top-left corner at (x, y), each font pixel `scale` pixels, on a filled
    `background` box when one is given; in place."""
    glyphs = [_MASKS.get(ch, _MASKS.get(ch.lower(), _MASKS["?"])) for ch in text]
    if not glyphs:
        return
    mask = np.zeros((7, 4 * len(glyphs) + 1), bool)                 # 1 font pixel of margin around
    for i, glyph in enumerate(glyphs):
        mask[1:6, 1 + 4 * i:4 + 4 * i] = glyph
    mask = mask.repeat(scale, 0).repeat(scale, 1)
    h, w = img.shape[:2]
    x0, y0 = int(x), int(y)
    x1, y1 = min(x0 + mask.shape[1], w), min(y0 + mask.shape[0], h)
    mx, my = max(-x0, 0), max(-y0, 0)
    x0, y0 = max(x0, 0), max(y0, 0)
    if x0 >= x1 or y0 >= y1:
        return
    region = img[y0:y1, x0:x1]
    if background is not None:
        region[...] = background
    region[mask[my:my + y1 - y0, mx:mx + x1 - x0]] = color


def draw_detections(image, detections: list[dict], keypoint_threshold: float = 0.5) -> np.ndarray:
    """An RGB copy of `image` with each detection's box, tag and (pose) skeleton drawn."""
    out = as_rgb(image).copy()
    h, w = out.shape[:2]
    thickness = max(1, round((h + w) / 600))
    scale = max(2, round((h + w) / 500))
    labels: dict[str, int] = {}
    for det in detections:
        label = det.get("label", "person")
        color = _PALETTE[labels.setdefault(label, len(labels)) % len(_PALETTE)]
        b = det["box"]
        draw_rectangle(out, (b["xmin"], b["ymin"], b["xmax"], b["ymax"]), color, thickness)
        tag = f"{label} {det['score']:.2f}"
        tag_height, tag_width = 7 * scale, (4 * len(tag) + 1) * scale
        top = b["ymin"] - tag_height if b["ymin"] >= tag_height else b["ymin"]
        left = max(0, min(b["xmin"], w - tag_width))                    # inside the image where it fits
        light = float(color @ np.array([0.299, 0.587, 0.114])) > 150     # dark text on light colours
        draw_text(out, left, top, tag, (0, 0, 0) if light else (255, 255, 255), background=color, scale=scale)
        points = det.get("keypoints")
        if points:
            seen = [p["score"] >= keypoint_threshold for p in points]
            for i, j in SKELETON:
                if i < len(points) and j < len(points) and seen[i] and seen[j]:
                    draw_line(out, (points[i]["x"], points[i]["y"]), (points[j]["x"], points[j]["y"]), _LIMB,
                              thickness)
            for p, shown in zip(points, seen):
                if shown:
                    draw_disc(out, (p["x"], p["y"]), thickness + 2, _JOINT)
    return out


def encode_png(image) -> bytes:
    """uint8 (H, W), (H, W, 1..4) -> PNG bytes (8-bit, no filter, zlib level 6)."""
    img = np.asarray(image)
    if img.dtype != np.uint8:
        raise InputError(f"expected a uint8 image, got dtype {img.dtype}")
    if img.ndim == 2:
        img = img[:, :, None]
    if img.ndim != 3 or not 1 <= img.shape[2] <= 4 or img.shape[0] == 0 or img.shape[1] == 0:
        raise InputError(f"expected a non-empty (H, W) or (H, W, C) image with C in 1..4, got shape {img.shape}")
    h, w, c = img.shape
    colour = {1: 0, 2: 4, 3: 2, 4: 6}[c]
    rows = np.concatenate([np.zeros((h, 1), np.uint8), np.ascontiguousarray(img).reshape(h, w * c)], axis=1)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + chunk(b"IEND", b""))


def write_png(path, image) -> None:
    Path(path).write_bytes(encode_png(image))
