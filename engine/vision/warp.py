"""The crop of a rotated text box, in NumPy only: what rapidocr-onnxruntime 1.4.4's
get_rotate_crop_image does with OpenCV (cv2.getPerspectiveTransform, then cv2.warpPerspective with
INTER_CUBIC and BORDER_REPLICATE), written from OpenCV's documented arithmetic and checked against it
(tests/vision/test_polygons.py):

- `get_perspective_transform`: the homography of four point pairs (the 8 x 8 linear system);
- `warp_perspective`: each output pixel samples the source at the inverse mapping, rounded to 1/32
  pixel, with a 4 x 4 bicubic kernel (a = -0.75) in 15-bit fixed point; sources outside repeat the
  edge pixels;
- `rotate_crop`: the box straightened, and turned upright when it is tall.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from .polygons import box_corners

__all__ = ["get_perspective_transform", "warp_perspective", "rotate_crop"]


def get_perspective_transform(src, dst) -> np.ndarray:
    """(3, 3) float64 homography taking the 4 `src` points to the 4 `dst` points, with
    M[2, 2] = 1: cv2.getPerspectiveTransform (the 8 x 8 linear system, solved by LU)."""
    src, dst = box_corners(src, "get_perspective_transform src"), box_corners(dst, "get_perspective_transform dst")
    a = np.zeros((8, 8))
    b = np.zeros(8)
    for i, ((x, y), (u, v)) in enumerate(zip(src, dst)):
        a[i] = x, y, 1, 0, 0, 0, -x * u, -y * u
        a[i + 4] = 0, 0, 0, x, y, 1, -x * v, -y * v
        b[i], b[i + 4] = u, v
    try:
        solution = np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        raise InputError("get_perspective_transform: the points are degenerate (three on a line?)") from None
    return np.append(solution, 1.0).reshape(3, 3)


_SUBPIXEL = 32                     # cv2's INTER_TAB_SIZE: source positions in 1/32 pixel
_WEIGHT_BITS = 15                  # cv2's fixed-point interpolation weights for 8-bit images


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """(..., 4) Keys cubic weights (a = -0.75, OpenCV's) for taps at -1, 0, 1, 2 from the
    integer position, t in [0, 1); float32 as OpenCV computes them."""
    a = np.float32(-0.75)
    t = t.astype(np.float32)
    one = np.float32(1)
    w0 = ((a * (t + one) - 5 * a) * (t + one) + 8 * a) * (t + one) - 4 * a
    w1 = ((a + 2) * t - (a + 3)) * t * t + one
    w2 = ((a + 2) * (one - t) - (a + 3)) * (one - t) * (one - t) + one
    return np.stack([w0, w1, w2, one - w0 - w1 - w2], axis=-1)


def _fixed_point_kernels() -> np.ndarray:
    """(32 * 32, 4, 4) int32 bicubic kernels for each 1/32 sub-pixel position (row fraction
    major), the products of the 1-D weights rounded to 15 bits; a rounding surplus or
    deficit is taken from, or given to, the smallest or largest of the 4 central taps, so
    each kernel sums to exactly 1 << 15 (as OpenCV does)."""
    w = _cubic_weights(np.arange(_SUBPIXEL) / _SUBPIXEL)              # (32, 4)
    products = (w[:, None, :, None] * w[None, :, None, :]).astype(np.float32)  # (32 ry, 32 rx, 4, 4)
    kernels = np.rint(products.astype(np.float64) * (1 << _WEIGHT_BITS)).astype(np.int32)
    kernels = kernels.reshape(-1, 4, 4)
    surplus = kernels.sum(axis=(1, 2)) - (1 << _WEIGHT_BITS)
    for k in np.flatnonzero(surplus):
        centre = kernels[k, 1:3, 1:3]
        flat = centre.ravel()
        # first minimum / maximum in row-major order, as a strict comparison scan finds them
        small, large = 0, 0
        for i in range(1, 4):
            if flat[i] < flat[small]:
                small = i
            elif flat[i] > flat[large]:
                large = i
        index = large if surplus[k] < 0 else small
        centre[index // 2, index % 2] -= surplus[k]
    return kernels


_KERNELS = None
_IDENTITY = False              # whether _KERNELS[0] (no fraction) takes each pixel as it is (set with _KERNELS)


def warp_perspective(image: np.ndarray, matrix, size: tuple[int, int]) -> np.ndarray:
    """cv2.warpPerspective(image, matrix, (width, height), flags=INTER_CUBIC,
    borderMode=BORDER_REPLICATE) for uint8 (H, W) or (H, W, C) images: each output pixel
    samples the source at matrix^-1 (x, y), rounded to 1/32 pixel, with a 4 x 4 bicubic
    kernel in 15-bit fixed point; sources outside repeat the edge pixels."""
    global _KERNELS, _IDENTITY
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim not in (2, 3) or image.shape[0] == 0 or image.shape[1] == 0:
        raise InputError(f"warp_perspective wants a non-empty uint8 (H, W) or (H, W, C) image, "
                         f"got {image.dtype} of shape {image.shape}")
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.shape != (3, 3) or not np.isfinite(matrix).all():
        raise InputError(f"warp_perspective wants a finite (3, 3) matrix, got shape {matrix.shape}")
    try:
        width, height = (int(v) for v in size)
    except (TypeError, ValueError):
        raise InputError(f"warp_perspective wants size=(width, height), got {size!r}") from None
    if width <= 0 or height <= 0:
        raise InputError(f"warp_perspective wants a positive output size, got {width} x {height}")
    try:
        inverse = np.linalg.inv(matrix)
    except np.linalg.LinAlgError:
        raise InputError("warp_perspective: the matrix is singular") from None
    if _KERNELS is None:
        _KERNELS = _fixed_point_kernels()
        identity = np.zeros((4, 4), _KERNELS.dtype)
        identity[1, 1] = 1 << _WEIGHT_BITS
        _IDENTITY = bool(np.array_equal(_KERNELS[0], identity))
    source = image if image.ndim == 3 else image[:, :, None]
    rows_in, cols_in = source.shape[:2]
    shift = np.rint(inverse[:2, 2])
    if _IDENTITY and np.allclose(inverse, [[1, 0, shift[0]], [0, 1, shift[1]], [0, 0, 1]], rtol=0, atol=1e-9):
        rows = np.clip(np.arange(height) + int(shift[1]), 0, rows_in - 1)      # a shift by whole pixels (an
        cols = np.clip(np.arange(width) + int(shift[0]), 0, cols_in - 1)       # upright box): pixels as they are
        out = source[rows[:, None], cols[None, :]]
        return out if image.ndim == 3 else out[:, :, 0]
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float64)
    x = inverse[0, 0] * xs + inverse[0, 1] * ys + inverse[0, 2]
    y = inverse[1, 0] * xs + inverse[1, 1] * ys + inverse[1, 2]
    w = inverse[2, 0] * xs + inverse[2, 1] * ys + inverse[2, 2]
    scale = np.divide(_SUBPIXEL, w, out=np.zeros_like(w), where=w != 0)
    limit = float(2 ** 31 - 1)
    fx = np.rint(np.clip(x * scale, -limit, limit)).astype(np.int64)
    fy = np.rint(np.clip(y * scale, -limit, limit)).astype(np.int64)
    sx, sy = fx >> 5, fy >> 5                                  # integer source pixel
    if _IDENTITY and not ((fx | fy) & 31).any():               # whole source pixels: each as it is
        out = source[np.clip(sy, 0, rows_in - 1), np.clip(sx, 0, cols_in - 1)]
        return out if image.ndim == 3 else out[:, :, 0]
    kernel = _KERNELS[(fy & 31) * _SUBPIXEL + (fx & 31)]       # (h, w, 4, 4)
    total = np.zeros((height, width, source.shape[2]), dtype=np.int64)
    for i in range(4):
        rows = np.clip(sy + (i - 1), 0, rows_in - 1)
        for j in range(4):
            cols = np.clip(sx + (j - 1), 0, cols_in - 1)
            total += source[rows, cols].astype(np.int64) * kernel[:, :, i, j, None]
    out = np.clip((total + (1 << (_WEIGHT_BITS - 1))) >> _WEIGHT_BITS, 0, 255).astype(np.uint8)
    return out if image.ndim == 3 else out[:, :, 0]


def rotate_crop(image: np.ndarray, points) -> np.ndarray:
    """The box `points` (4 corners: top-left, top-right, bottom-right, bottom-left) cut out
    of the image and straightened, as rapidocr's get_rotate_crop_image: the crop is as wide
    as the longer of the top and bottom sides and as tall as the longer of the left and right
    sides (float32 lengths, truncated), warped by the perspective transform of the corners,
    and turned 90 degrees counterclockwise when it is at least 1.5 times taller than wide."""
    corners = box_corners(points, "rotate_crop").astype(np.float32)
    width = int(max(np.linalg.norm(corners[0] - corners[1]), np.linalg.norm(corners[2] - corners[3])))
    height = int(max(np.linalg.norm(corners[0] - corners[3]), np.linalg.norm(corners[1] - corners[2])))
    if width <= 0 or height <= 0:
        raise InputError(f"rotate_crop: the box is degenerate ({width} x {height} pixels)")
    target = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float32)
    crop = warp_perspective(image, get_perspective_transform(corners, target), (width, height))
    return np.rot90(crop) if height / width >= 1.5 else crop
