"""Polygon geometry for text detection (PP-OCR's DB post-processing), in NumPy only.

What DBPostProcess does with OpenCV, pyclipper and shapely (reference: rapidocr-onnxruntime
1.4.4, ch_ppocr_det/utils.py and main.py), written from the algorithms:

- `min_area_rect`, `box_points`: the minimum-area enclosing rectangle. Its sides lie along
  an edge of the convex hull (Freeman & Shapira, "Determining the minimum-area encasing
  rectangle for an arbitrary closed curve", CACM 1975; Toussaint, "Solving geometric problems
  with the rotating calipers", 1983), so each hull edge is tried, vectorised. The result is
  given in OpenCV's RotatedRect convention: angle in (0, 90] degrees, `width` along the side
  at that angle; boxPoints' corner order.
- `order_points`, `get_mini_boxes`: the corners ordered as DBPostProcess orders them.
- `polygon_area`, `polygon_perimeter`: shapely's Polygon.area and .length.
- `unclip`: Clipper's offset of a closed polygon with round joins (PyclipperOffset, JT_ROUND,
  ET_CLOSEDPOLYGON) by area * ratio / perimeter: integer input (truncated), outward normals
  of a counterclockwise polygon, each convex corner filled with an arc of points that deviates
  at most ArcTolerance = 0.25 from the true circle, coordinates rounded half away from zero,
  then duplicate and collinear points dropped as Clipper's union does.
- `fill_polygon`, `box_score_fast`: cv2.fillPoly's rasterisation (scanlines between the edges
  in 16.16 fixed point, plus each edge drawn as an 8-connected line) and the mean score in it.

The crop of a rotated box is engine/vision/warp.py's.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InputError

__all__ = ["convex_hull", "min_area_rect", "box_points", "order_points", "get_mini_boxes",
           "polygon_area", "polygon_perimeter", "unclip", "fill_polygon", "box_score_fast"]


def _points(points, name: str, minimum: int = 1) -> np.ndarray:
    """(N, 2) float64 from (N, 2) or OpenCV's (N, 1, 2), with a clear error otherwise."""
    try:
        array = np.asarray(points)
    except (TypeError, ValueError) as e:
        raise InputError(f"{name} wants an (N, 2) array of points: {e}") from None
    if array.dtype.kind not in "biuf":
        raise InputError(f"{name} wants numeric points, got dtype {array.dtype}")
    if array.ndim == 3 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 2 or array.shape[1] != 2:
        raise InputError(f"{name} wants an (N, 2) array of (x, y) points, got shape {array.shape}")
    if len(array) < minimum:
        raise InputError(f"{name} needs at least {minimum} point(s), got {len(array)}")
    array = array.astype(np.float64)
    if not np.isfinite(array).all():
        raise InputError(f"{name} got a point that is not finite (nan or inf)")
    return array


def box_corners(box, name: str) -> np.ndarray:
    """The 4 corners of a box as a (4, 2) float64 array; an InputError naming `name` otherwise."""
    array = _points(box, name)
    if len(array) != 4:
        raise InputError(f"{name} wants a box of 4 points, got {len(array)}")
    return array


# ---- convex hull and minimum-area rectangle ------------------------------------------------

def _cross(o, a, b):
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def convex_hull(points) -> np.ndarray:
    """Vertices of the convex hull of (N, 2) points, counterclockwise in (x, right; y, up)
    terms, without collinear points (Andrew's monotone chain). Points strictly inside the
    quadrilateral of the four extreme points are dropped first, vectorised (Akl & Toussaint
    1978), so the Python loop sees few points."""
    pts = _points(points, "convex_hull")
    pts = np.unique(pts, axis=0)                           # sorted by x, then y
    if len(pts) > 8:
        # leftmost, lowest, rightmost, highest: counterclockwise in y-up terms
        quad = pts[[np.argmin(pts[:, 0]), np.argmin(pts[:, 1]), np.argmax(pts[:, 0]), np.argmax(pts[:, 1])]]
        outside = np.zeros(len(pts), dtype=bool)
        for i in range(4):
            a, b = quad[i], quad[(i + 1) % 4]
            outside |= (b[0] - a[0]) * (pts[:, 1] - a[1]) - (b[1] - a[1]) * (pts[:, 0] - a[0]) <= 0
        pts = pts[outside]
    if len(pts) < 3:
        return pts
    rows = pts.tolist()
    lower, upper = [], []
    for p in rows:
        while len(lower) >= 2 and _cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in reversed(rows):
        while len(upper) >= 2 and _cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return np.array(lower[:-1] + upper[:-1], dtype=np.float64)


def min_area_rect(points) -> tuple[tuple[float, float], tuple[float, float], float]:
    """((cx, cy), (width, height), angle) of the smallest rectangle enclosing the points,
    as cv2.minAreaRect gives it: angle in (0, 90] degrees is the direction of the `width`
    side (x right, y down); one point gives size 0 and angle 0, collinear points a zero
    height and the angle of the segment from its last point (largest x, then y) to its
    first."""
    hull = convex_hull(points)
    if len(hull) == 1:
        return (float(hull[0, 0]), float(hull[0, 1])), (0.0, 0.0), 0.0
    if len(hull) == 2:
        first, last = hull[0], hull[-1]                   # np.unique sorted them
        vx, vy = first - last
        center = np.float32((first + last) / 2)
        return ((float(center[0]), float(center[1])), (float(np.float32(math.hypot(vx, vy))), 0.0),
                float(np.float32(math.degrees(math.atan2(vy, vx)))))
    edges = np.roll(hull, -1, axis=0) - hull              # (M, 2)
    lengths = np.hypot(edges[:, 0], edges[:, 1])
    u = edges / lengths[:, None]                          # unit edge directions
    along = u @ hull.T                                    # (M edges, M points)
    across = (u[:, ::-1] * (-1.0, 1.0)) @ hull.T          # normals (-uy, ux)
    lo_a, hi_a = along.min(axis=1), along.max(axis=1)
    lo_c, hi_c = across.min(axis=1), across.max(axis=1)
    best = int(np.argmin((hi_a - lo_a) * (hi_c - lo_c)))
    ux, uy = u[best]
    mid_a, mid_c = (lo_a[best] + hi_a[best]) / 2, (lo_c[best] + hi_c[best]) / 2
    cx, cy = ux * mid_a - uy * mid_c, uy * mid_a + ux * mid_c
    side_u, side_v = hi_a[best] - lo_a[best], hi_c[best] - lo_c[best]
    theta = math.degrees(math.atan2(uy, ux)) % 180.0       # direction of side_u in [0, 180)
    if theta >= 90.0:                                       # the other side is at theta - 90
        theta, side_u, side_v = theta - 90.0, side_v, side_u
    if theta == 0.0 or np.float32(theta) == 0.0:            # horizontal: OpenCV says 90, vertical first
        theta, side_u, side_v = 90.0, side_v, side_u
    f = np.float32
    return ((float(f(cx)), float(f(cy))), (float(f(side_u)), float(f(side_v))), float(f(theta)))


def box_points(rect) -> np.ndarray:
    """(4, 2) float32 corners of a rectangle ((cx, cy), (w, h), angle): cv2.boxPoints, with
    its float32 arithmetic and corner order."""
    try:
        (cx, cy), (w, h), angle = rect
        cx, cy, w, h, angle = (np.float32(v) for v in (cx, cy, w, h, angle))   # RotatedRect's floats
    except (TypeError, ValueError):
        raise InputError(f"box_points wants ((cx, cy), (width, height), angle), got {rect!r}") from None
    f = np.float32
    radians = float(angle) * math.pi / 180.0
    b, a = f(math.cos(radians)) * f(0.5), f(math.sin(radians)) * f(0.5)
    out = np.empty((4, 2), dtype=np.float32)
    out[0] = cx - a * h - b * w, cy + b * h - a * w
    out[1] = cx + a * h - b * w, cy - b * h - a * w
    out[2] = f(2) * cx - out[0, 0], f(2) * cy - out[0, 1]
    out[3] = f(2) * cx - out[1, 0], f(2) * cy - out[1, 1]
    return out


def order_points(corners) -> np.ndarray:
    """The 4 corners in DBPostProcess's order: sorted by x (stable), the left pair and the
    right pair each split by y, giving top-left, top-right, bottom-right, bottom-left."""
    corners = box_corners(corners, "order_points") if not isinstance(corners, np.ndarray) or corners.dtype != np.float32 \
        else corners.reshape(4, 2)
    pts = corners[np.argsort(corners[:, 0], kind="stable")]
    first, fourth = (0, 1) if pts[1][1] > pts[0][1] else (1, 0)
    second, third = (2, 3) if pts[3][1] > pts[2][1] else (3, 2)
    return pts[[first, second, third, fourth]]


def get_mini_boxes(contour) -> tuple[np.ndarray, float]:
    """(box, short side): the minimum-area rectangle of the contour's points as 4 float32
    corners in `order_points` order, and the length of its shorter side."""
    rect = min_area_rect(contour)
    return order_points(box_points(rect)), min(rect[1])


# ---- area, perimeter and the offset polygon ------------------------------------------------

def polygon_area(points) -> float:
    """Area enclosed by the closed polygon (shapely's Polygon.area): |shoelace| / 2."""
    pts = _points(points, "polygon_area")
    x, y = pts[:, 0], pts[:, 1]
    return abs(float(np.dot(x, np.roll(y, -1)) - np.dot(np.roll(x, -1), y))) / 2.0


def polygon_perimeter(points) -> float:
    """Length of the closed polygon's boundary, the closing edge included (Polygon.length)."""
    pts = _points(points, "polygon_perimeter")
    edges = np.roll(pts, -1, axis=0) - pts
    return float(np.hypot(edges[:, 0], edges[:, 1]).sum())


def _round_half_away(value: float) -> int:
    return int(value - 0.5) if value < 0 else int(value + 0.5)


_ARC_TOLERANCE = 0.25


def unclip(box, ratio: float = 2.0) -> np.ndarray:
    """The box grown by distance = area * ratio / perimeter with round corners, as
    pyclipper.PyclipperOffset (JT_ROUND, ET_CLOSEDPOLYGON).Execute(distance) gives it: an
    (K, 2) int64 polygon, counterclockwise in (x right, y up) terms; (0, 2) when the box
    has no area. The input is truncated to integers first, as pyclipper does."""
    pts = _points(box, "unclip", 3)
    ratio = float(ratio)
    if not ratio >= 0 or not math.isfinite(ratio):
        raise InputError(f"unclip wants a finite ratio >= 0, got {ratio}")
    perimeter = polygon_perimeter(pts)
    if perimeter == 0:
        return np.zeros((0, 2), dtype=np.int64)
    delta = polygon_area(pts) * ratio / perimeter
    path = [(int(x), int(y)) for x, y in pts.tolist()]     # int(): truncation, as pyclipper
    path = [p for i, p in enumerate(path) if p != path[i - 1]] if len(set(path)) > 1 else path[:1]
    if len(path) < 3:
        return np.zeros((0, 2), dtype=np.int64)
    doubled = sum(path[i - 1][0] * path[i][1] - path[i][0] * path[i - 1][1] for i in range(len(path)))
    if doubled == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if doubled < 0:                                         # make it counterclockwise (y up)
        path.reverse()
    if abs(delta) < 1e-20:
        return _simplified(path)
    tolerance = min(_ARC_TOLERANCE, abs(delta) * _ARC_TOLERANCE)
    steps = math.pi / math.acos(1 - tolerance / abs(delta))
    steps = min(steps, abs(delta) * math.pi)                # no finer than about a pixel
    step_sin, step_cos = math.sin(2 * math.pi / steps), math.cos(2 * math.pi / steps)
    steps_per_radian = steps / (2 * math.pi)
    n = len(path)
    normals = []
    for i in range(n):
        (x1, y1), (x2, y2) = path[i], path[(i + 1) % n]
        length = math.hypot(x2 - x1, y2 - y1)
        normals.append(((y2 - y1) / length, -(x2 - x1) / length))   # right of the edge: outward
    out = []
    for j in range(n):
        k = j - 1
        (nkx, nky), (njx, njy) = normals[k], normals[j]
        px, py = path[j]
        sin_a = nkx * njy - njx * nky
        cos_a = nkx * njx + nky * njy
        if abs(sin_a * delta) < 1.0 and cos_a > 0:          # nearly straight: one point
            out.append((_round_half_away(px + nkx * delta), _round_half_away(py + nky * delta)))
            continue
        sin_a = max(-1.0, min(1.0, sin_a))
        if sin_a * delta < 0:                               # a concave corner
            out.append((_round_half_away(px + nkx * delta), _round_half_away(py + nky * delta)))
            out.append((px, py))
            out.append((_round_half_away(px + njx * delta), _round_half_away(py + njy * delta)))
            continue
        count = max(_round_half_away(steps_per_radian * abs(math.atan2(sin_a, cos_a))), 1)
        x, y = nkx, nky
        for _ in range(count):                              # the arc, rotating the normal
            out.append((_round_half_away(px + x * delta), _round_half_away(py + y * delta)))
            x, y = x * step_cos - step_sin * y, x * step_sin + y * step_cos
        out.append((_round_half_away(px + njx * delta), _round_half_away(py + njy * delta)))
    return _simplified(out)


def _simplified(path) -> np.ndarray:
    """The polygon without repeated points and without points on a straight line between
    their neighbours (what Clipper's union leaves of a simple polygon)."""
    changed = True
    while changed and len(path) >= 3:
        changed = False
        kept = []
        n = len(path)
        for i in range(n):
            a, b, c = path[i - 1], path[i], path[(i + 1) % n]
            if b == a or (b[0] - a[0]) * (c[1] - b[1]) == (b[1] - a[1]) * (c[0] - b[0]):
                changed = True
                continue
            kept.append(b)
        path = kept
    if len(path) < 3:
        return np.zeros((0, 2), dtype=np.int64)
    return np.array(path, dtype=np.int64)


# ---- rasterising a polygon and the box score -----------------------------------------------



def _divide_towards_zero(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b > 0) else -quotient
_SHIFT = 16                        # cv2.fillPoly's fixed-point fraction bits


def _line_pixels(x0: int, y0: int, x1: int, y1: int):
    """(ys, xs) of the 8-connected line between two integer points, drawn from its left end
    (the lower one when vertical) with ties rounded towards that end, as cv2.line does."""
    if (x0, y0) > (x1, y1):
        x0, y0, x1, y1 = x1, y1, x0, y0
    dx, dy = x1 - x0, y1 - y0
    n = max(abs(dx), abs(dy))
    j = np.arange(n + 1, dtype=np.int64)
    if n == 0:
        return np.array([y0]), np.array([x0])
    sy = 1 if dy >= 0 else -1
    if abs(dx) >= abs(dy):                                  # x is the major axis
        offset = -((n - 2 * j * abs(dy)) // (2 * n))        # ceil(j |dy| / n - 1/2)
        return y0 + sy * offset, x0 + j
    offset = -((n - 2 * j * abs(dx)) // (2 * n))
    return y0 + sy * j, x0 + offset


def _clip_line(x0: int, y0: int, x1: int, y1: int, width: int, height: int):
    """The segment clipped to the image as cv2.line clips it before drawing (Cohen &
    Sutherland's outcodes, one pass: both ends onto the top/bottom rows, then onto the
    left/right columns, each crossing truncated towards zero), or None when it misses."""
    right, bottom = width - 1, height - 1

    def code(x, y, rows=True):
        return (x < 0) + (x > right) * 2 + ((y < 0) * 4 + (y > bottom) * 8 if rows else 0)

    c0, c1 = code(x0, y0), code(x1, y1)
    if (c0 & c1) == 0 and (c0 | c1) != 0:
        if c0 & 12:
            edge = 0 if c0 < 8 else bottom
            x0 += int((edge - y0) * (x1 - x0) / (y1 - y0))
            y0, c0 = edge, code(x0, edge, False)
        if c1 & 12:
            edge = 0 if c1 < 8 else bottom
            x1 += int((edge - y1) * (x1 - x0) / (y1 - y0))
            y1, c1 = edge, code(x1, edge, False)
        if (c0 & c1) == 0 and (c0 | c1) != 0:
            if c0:
                edge = 0 if c0 == 1 else right
                y0 += int((edge - x0) * (y1 - y0) / (x1 - x0))
                x0, c0 = edge, 0
            if c1:
                edge = 0 if c1 == 1 else right
                y1 += int((edge - x1) * (y1 - y0) / (x1 - x0))
                x1, c1 = edge, 0
    return x0, y0, x1, y1, not (c0 | c1)


def fill_polygon(mask: np.ndarray, points, value=1) -> np.ndarray:
    """Set the pixels of the polygon with integer vertices to `value` in `mask` (in place,
    and returned), as cv2.fillPoly(mask, [points], value) does: on each scanline between two
    vertices the span from the ceiling of the left edge's x to the floor of the right one's
    (x stepped in 16.16 fixed point), spans paired left to right, plus every edge drawn as an
    8-connected line; parts outside the mask are clipped."""
    if not isinstance(mask, np.ndarray) or mask.ndim not in (2, 3):
        raise InputError(f"fill_polygon wants an (H, W) or (H, W, C) NumPy array, got "
                         f"{type(mask).__name__} of shape {getattr(mask, 'shape', None)}")
    pts = _points(points, "fill_polygon")
    if not (np.abs(pts) < 2 ** 30).all():
        raise InputError("fill_polygon: vertex coordinates must be within +-2**30")
    pts = np.trunc(pts).astype(np.int64)
    height, width = mask.shape[:2]
    n = len(pts)
    span_y, span_x0, span_x1 = [], [], []
    for i in range(n):
        (xa, ya), (xb, yb) = pts[i - 1].tolist(), pts[i].tolist()
        *clipped, hit = _clip_line(xa, ya, xb, yb, width, height)
        if hit:
            ly, lx = _line_pixels(*clipped)
            span_y.append(ly), span_x0.append(lx), span_x1.append(lx)
    # crossings of the non-horizontal edges with scanlines y0 <= y < y1
    cross_y, cross_x = [], []
    for i in range(n):
        (xa, ya), (xb, yb) = pts[i - 1].tolist(), pts[i].tolist()
        if ya == yb:
            continue
        inside = 0 <= xa < width and 0 <= xb < width and 0 <= ya < height and 0 <= yb < height
        # an edge that leaves the image runs along its clipped line (as drawn) instead, its
        # x extrapolated from the clipped ends to the rows outside
        fa, fb, ga, gb = xa << _SHIFT, xb << _SHIFT, ya, yb
        if not inside:
            ca, cya, cb, cyb, _ = _clip_line(xa, ya, xb, yb, width, height)
            if cya != cyb:
                fa, fb, ga, gb = ca << _SHIFT, cb << _SHIFT, cya, cyb
            else:
                fa, fb = xa << _SHIFT, xb << _SHIFT
        if ya > yb:
            xa, ya, xb, yb = xb, yb, xa, ya
            fa, fb, ga, gb = fb, fa, gb, ga
        step = _divide_towards_zero(fb - fa, gb - ga)
        ys = np.arange(ya, yb, dtype=np.int64)
        cross_y.append(ys)
        cross_x.append(fa + (ys - ga) * step)
    if cross_y:
        ys, xs = np.concatenate(cross_y), np.concatenate(cross_x)
        order = np.lexsort((xs, ys))
        ys, xs = ys[order], xs[order]
        span_y.append(ys[0::2])
        span_x0.append((xs[0::2] + (1 << _SHIFT) - 1) >> _SHIFT)     # ceiling
        span_x1.append(xs[1::2] >> _SHIFT)                          # floor
    if not span_y:
        return mask
    ys, x0s, x1s = np.concatenate(span_y), np.concatenate(span_x0), np.concatenate(span_x1)
    keep = (ys >= 0) & (ys < height) & (x0s <= x1s) & (x1s >= 0) & (x0s < width)
    ys, x0s, x1s = ys[keep], np.clip(x0s[keep], 0, width - 1), np.clip(x1s[keep], 0, width - 1)
    if len(ys) == 0:
        return mask
    top, bottom = int(ys.min()), int(ys.max())
    left, right = int(x0s.min()), int(x1s.max())
    counts = np.zeros((bottom - top + 1, right - left + 2), dtype=np.int32)
    np.add.at(counts, (ys - top, x0s - left), 1)
    np.add.at(counts, (ys - top, x1s - left + 1), -1)
    inside = np.cumsum(counts, axis=1)[:, :-1] > 0
    mask[top:bottom + 1, left:right + 1][inside] = value
    return mask


def box_score_fast(pred: np.ndarray, box) -> float:
    """Mean of the (H, W) map `pred` over the box filled as cv2.fillPoly fills it (corners
    truncated to integers), within the box's bounding rectangle clipped to the map: rapidocr's
    DBPostProcess.box_score_fast."""
    pred = np.asarray(pred)
    if pred.ndim != 2 or pred.size == 0:
        raise InputError(f"box_score_fast wants a non-empty (H, W) score map, got shape {pred.shape}")
    pts = _points(box, "box_score_fast")
    h, w = pred.shape
    xmin = int(np.clip(np.floor(pts[:, 0].min()), 0, w - 1))
    xmax = int(np.clip(np.ceil(pts[:, 0].max()), 0, w - 1))
    ymin = int(np.clip(np.floor(pts[:, 1].min()), 0, h - 1))
    ymax = int(np.clip(np.ceil(pts[:, 1].max()), 0, h - 1))
    corners = np.asarray(box).reshape(-1, 2)
    local = corners - np.array((xmin, ymin), dtype=corners.dtype)   # in the box's dtype, as rapidocr
    mask = fill_polygon(np.zeros((ymax - ymin + 1, xmax - xmin + 1), dtype=bool), local, True)
    values = pred[ymin:ymax + 1, xmin:xmax + 1][mask]
    return float(values.astype(np.float64).mean()) if values.size else 0.0
