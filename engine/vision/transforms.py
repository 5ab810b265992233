"""Resize and crop (H, W) or (H, W, C) NumPy images the way Pillow and torchvision do.

`resize` reproduces Pillow's Image.resize (libImaging/Resample.c): a separable convolution,
one pass per axis. For output index i along an axis, centre = (i + 0.5) * in / out; when
shrinking, the filter is stretched by in / out (that is Pillow's antialiasing) and the taps
are normalised to sum to 1. For uint8 Pillow rounds the weights to 22-bit fixed point and
the result of each pass to uint8; we do the same in integers, so results are bit-identical
to Pillow 13 for L and RGB images (older Pillow, which always runs the horizontal pass
first, differs by at most 1). float images follow Pillow's "F" mode (float64 weights and
sums, stored in the input's dtype between the passes).

Each pass applies an (out, in) weight matrix (`resize_weights` gives it dense). The matrix
is a band of `ksize` taps per row, so it is applied as `ksize` gathers rather than a dense
product: that costs O(out * ksize) instead of O(out * in), which matters in the browser,
where NumPy has no optimised BLAS.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError

__all__ = ["resize", "resize_weights", "resize_shorter", "center_crop"]

_PRECISION_BITS = 32 - 8 - 2           # Pillow's fixed-point weights for 8-bit images


def _box(x):
    return ((x > -0.5) & (x <= 0.5)).astype(np.float64)


def _triangle(x):
    return np.maximum(1.0 - np.abs(x), 0.0)


def _hamming(x):
    x = np.abs(x)
    px = np.pi * np.where(x == 0, 1.0, x)
    # Pillow's constants are C floats (0.54f, 0.46f); keeping them keeps rounding identical
    value = np.sin(px) / px * (float(np.float32(0.54)) + float(np.float32(0.46)) * np.cos(px))
    return np.where(x == 0, 1.0, np.where(x < 1, value, 0.0))


def _bicubic(x, a=-0.5):
    x = np.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def _lanczos(x):
    return np.where((x >= -3) & (x < 3), np.sinc(x) * np.sinc(x / 3), 0.0)


# name -> (support at scale 1, kernel); "nearest" is handled apart, as in Pillow
_FILTERS = {"box": (0.5, _box), "bilinear": (1.0, _triangle), "hamming": (1.0, _hamming),
            "bicubic": (2.0, _bicubic), "lanczos": (3.0, _lanczos)}


def _coefficients(in_size: int, out_size: int, filter: str, antialias: bool):
    """Pillow's precompute_coeffs: first input index per output and (out, ksize) weights."""
    support, kernel = _FILTERS[filter]
    scale = in_size / out_size
    filterscale = max(scale, 1.0) if antialias else 1.0
    support *= filterscale
    center = (np.arange(out_size) + 0.5) * scale
    first = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.intp)   # intp: int32 on wasm32
    last = np.minimum(np.trunc(center + support + 0.5), in_size).astype(np.intp)
    ksize = max(1, int((last - first).max()))
    taps = first[:, None] + np.arange(ksize)
    weights = kernel((taps - center[:, None] + 0.5) * (1.0 / filterscale))
    weights = np.where(taps < last[:, None], weights, 0.0)
    total = weights.sum(axis=1, keepdims=True)
    weights = np.divide(weights, total, out=weights.copy(), where=total != 0)
    return first, weights


def _nearest_indices(in_size: int, out_size: int) -> np.ndarray:
    # Pillow resizes NEAREST through an affine transform that steps the source coordinate
    # by repeated addition; cumsum adds sequentially too, so the indices agree exactly.
    scale = in_size / out_size
    coords = np.cumsum(np.concatenate([[scale * 0.5], np.full(out_size - 1, scale)]))
    return np.minimum(coords.astype(np.intp), in_size - 1)


def resize_weights(in_size: int, out_size: int, filter: str = "bilinear", *,
                   antialias: bool = True) -> np.ndarray:
    """Dense (out_size, in_size) float64 matrix W such that resizing along one axis is
    W @ x (before uint8 rounding); handy for running the resize as a matmul elsewhere."""
    matrix = np.zeros((out_size, in_size))
    if filter == "nearest":
        matrix[np.arange(out_size), _nearest_indices(in_size, out_size)] = 1.0
        return matrix
    first, weights = _coefficients(in_size, out_size, _check_filter(filter), antialias)
    taps = np.minimum(first[:, None] + np.arange(weights.shape[1]), in_size - 1)
    np.add.at(matrix, (np.arange(out_size)[:, None], taps), weights)
    return matrix


def _resample_axis(x: np.ndarray, axis: int, out_size: int, filter: str, antialias: bool) -> np.ndarray:
    in_size = x.shape[axis]
    if filter == "nearest":
        return np.take(x, _nearest_indices(in_size, out_size), axis=axis)
    first, weights = _coefficients(in_size, out_size, filter, antialias)
    # taps past the end carry zero weight; clamping keeps their indices valid
    taps = np.minimum(first[:, None] + np.arange(weights.shape[1]), in_size - 1)
    integer = x.dtype == np.uint8
    if integer:      # round half away from zero, as Pillow's normalize_coeffs_8bpp
        scaled = weights * (1 << _PRECISION_BITS)
        weights = np.trunc(scaled + np.where(scaled < 0, -0.5, 0.5)).astype(np.int64)
    shape = [1] * x.ndim
    shape[axis] = out_size
    total = 0
    for k in range(weights.shape[1]):
        total = total + np.take(x, taps[:, k], axis=axis) * weights[:, k].reshape(shape)
    if integer:
        total = (total + (1 << (_PRECISION_BITS - 1))) >> _PRECISION_BITS
        return np.clip(total, 0, 255).astype(np.uint8)
    return total.astype(x.dtype)


def _check_filter(filter: str) -> str:
    if filter not in _FILTERS and filter != "nearest":
        raise InputError(f"unknown filter {filter!r}; expected one of nearest, {', '.join(_FILTERS)}")
    return filter


def _check_image(img) -> np.ndarray:
    img = np.asarray(img)
    if img.ndim not in (2, 3) or img.shape[0] == 0 or img.shape[1] == 0:
        raise InputError(f"expected a non-empty (H, W) or (H, W, C) image, got shape {img.shape}")
    if img.dtype != np.uint8 and img.dtype.kind != "f":
        raise InputError(f"expected a uint8 or floating image, got dtype {img.dtype}")
    return img


def _pair(size, what: str) -> tuple[int, int]:
    if isinstance(size, (int, np.integer)):
        size = (size, size)
    try:
        height, width = (int(s) for s in size)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be an int or (height, width), got {size!r}") from None
    if height <= 0 or width <= 0:
        raise InputError(f"{what} must be positive, got {(height, width)}")
    return height, width


def resize(img, size, *, filter: str = "bilinear", antialias: bool = True) -> np.ndarray:
    """Resize to size = (height, width) like Pillow's Image.resize((width, height), filter).

    img: uint8 or floating (H, W) or (H, W, C); the result has the same dtype. Filters:
    nearest, box, bilinear, hamming, bicubic (a = -0.5), lanczos. antialias=False keeps the
    filter's support fixed when shrinking (plain interpolation, like torch's
    interpolate(antialias=False)). Channels are resized independently: unlike Pillow, RGBA
    is not premultiplied by alpha.
    """
    img = _check_image(img)
    height, width = _pair(size, "size")
    _check_filter(filter)
    # Pillow skips a pass whose size does not change, and since Pillow 13 runs the vertical
    # pass first when it removes more than twice as many rows as the horizontal removes
    # columns; the order changes uint8 results by at most 1 (intermediate rounding).
    shrink_h, shrink_w = img.shape[0] - height, img.shape[1] - width
    axes = (0, 1) if shrink_h > 0 and shrink_h > 2 * shrink_w else (1, 0)
    out = img
    for axis in axes:
        target = (height, width)[axis]
        if target != img.shape[axis]:
            out = _resample_axis(out, axis, target, filter, antialias)
    return img.copy() if out is img else out


def resize_shorter(img, size: int, *, max_size: int | None = None, filter: str = "bilinear",
                   antialias: bool = True) -> np.ndarray:
    """Resize so the shorter side is `size`, keeping the aspect ratio like torchvision's
    Resize(int): the longer side is int(size * long / short) (truncated), then capped by
    `max_size` with the shorter side scaled down to match."""
    img = _check_image(img)
    height, width = img.shape[:2]
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = int(size), int(size * long / short)
    if new_short <= 0:
        raise InputError(f"size must be positive, got {size}")
    if max_size is not None:
        if max_size <= new_short:
            raise InputError(f"max_size={max_size} must be larger than size={size}")
        if new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    new_w, new_h = (new_short, new_long) if width <= height else (new_long, new_short)
    return resize(img, (new_h, new_w), filter=filter, antialias=antialias)


def center_crop(img, size) -> np.ndarray:
    """Crop the centre (height, width) (or size x size) like torchvision's CenterCrop:
    offsets round((in - out) / 2) with Python's round (half to even); a crop larger than
    the image pads with zeros, the extra pixel going right/bottom."""
    img = np.asarray(img)
    if img.ndim not in (2, 3):
        raise InputError(f"expected an (H, W) or (H, W, C) image, got shape {img.shape}")
    crop_h, crop_w = _pair(size, "crop size")
    height, width = img.shape[:2]
    if crop_h > height or crop_w > width:
        pad_h, pad_w = max(crop_h - height, 0), max(crop_w - width, 0)
        padding = [(pad_h // 2, (pad_h + 1) // 2), (pad_w // 2, (pad_w + 1) // 2)] + [(0, 0)] * (img.ndim - 2)
        img = np.pad(img, padding)
        height, width = img.shape[:2]
    top = int(round((height - crop_h) / 2.0))
    left = int(round((width - crop_w) / 2.0))
    return img[top : top + crop_h, left : left + crop_w].copy()
