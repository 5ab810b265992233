"""Borders of a binary mask, as OpenCV's findContours(RETR_LIST, CHAIN_APPROX_SIMPLE) lists them.

The algorithm is Suzuki & Abe's border following (S. Suzuki, K. Abe, "Topological structural
analysis of digitized binary images by border following", CVGIP 30(1), 1985), the one OpenCV
implements. The mask is scanned in raster order inside a frame of zeros. A foreground pixel with
a zero on its left that no border has visited yet starts an outer border; a zero with a
foreground pixel on its left starts a hole border at that pixel, unless an earlier border passed
that pixel with its right neighbour a zero (the paper's negative NBD mark). From the start
pixel the border is followed with 8-connectivity: the neighbours of the current pixel are
searched counterclockwise from the one after the previous pixel. Conventions of OpenCV kept so
the output matches it point for point: directions are numbered 0..7 counterclockwise from east
(y grows downwards), an outer border's first neighbour is searched clockwise from the west,
a hole's from the east; CHAIN_APPROX_SIMPLE keeps a pixel only where the direction of travel
changes; the list holds the borders in the reverse of the order the scan found them.

Speed (this runs under Pyodide on ~1280x960 maps): whether a pixel is non-zero never changes
while borders are followed (only marks are added), so each pixel's 8 neighbours are packed
into one byte up front with NumPy, and the counterclockwise search becomes one lookup in a
(256 x 8) table. The per-pixel loop is then a few operations on `bytes`/`bytearray`, and the
start candidates of the scan come from vectorised comparisons with the left neighbour.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError

__all__ = ["find_contours", "dilate_2x2"]

# direction d -> (dx, dy): E, NE, N, NW, W, SW, S, SE (image rows grow downwards)
_STEPS = ((1, 0), (1, -1), (0, -1), (-1, -1), (-1, 0), (-1, 1), (0, 1), (1, 1))


def _tables():
    """(ccw, cw): ccw[code * 8 + after] = d | marks << 3 for the first non-zero neighbour
    counterclockwise after direction `after`; marks = 3 when the east neighbour was examined
    and found zero on the way (the paper's negative mark), else 1 (visited). cw[code * 8 +
    start] = the first non-zero neighbour clockwise after `start`, or 8 when there is none."""
    ccw, cw = bytearray(256 * 8), bytearray(256 * 8)
    for code in range(256):
        for start in range(8):
            for k in range(start + 1, start + 9):
                if code >> (k & 7) & 1:
                    ccw[code * 8 + start] = (k & 7) | ((3 if k > 8 else 1) << 3)
                    break
            cw[code * 8 + start] = 8
            for k in range(1, 9):
                d = (start - k) & 7
                if code >> d & 1:
                    cw[code * 8 + start] = d
                    break
    return bytes(ccw), bytes(cw)


_CCW, _CW = _tables()


def _binary(mask, name: str) -> np.ndarray:
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise InputError(f"{name} wants a 2-D mask (H, W), got shape {mask.shape}")
    if mask.dtype.kind not in "biuf":
        raise InputError(f"{name} wants a boolean or numeric mask, got dtype {mask.dtype}")
    return mask


def find_contours(mask) -> list[np.ndarray]:
    """Borders (outer and holes) of the non-zero pixels of a 2-D mask, 8-connected, as a list
    of (K, 2) int32 arrays of (x, y) points: cv2.findContours(mask, RETR_LIST,
    CHAIN_APPROX_SIMPLE)'s contours, reshaped from (K, 1, 2), in the same order."""
    mask = _binary(mask, "find_contours")
    height, width = mask.shape
    if height == 0 or width == 0:
        return []
    stride = width + 2
    fg = np.zeros((height + 2, stride), dtype=bool)          # a frame of zeros all round
    fg[1:-1, 1:-1] = mask != 0
    flat = fg.ravel()
    size = flat.size
    # code[p]: bit d set when the neighbour of p in direction d is non-zero
    steps = [dx + dy * stride for dx, dy in _STEPS]
    code = np.zeros(size, dtype=np.uint8)
    inner = slice(stride + 1, size - stride - 1)
    for d, step in enumerate(steps):
        code[inner] |= flat[stride + 1 + step:size - stride - 1 + step].view(np.uint8) << d
    code_bytes = code.tobytes()
    # scan candidates in raster order: p starts an outer border when p is on and p - 1 off,
    # the zero at p starts a hole border at p - 1 when p - 1 is on
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1   # 0 -> 1 or 1 -> 0 at p
    candidates = changes.tolist()
    outer = flat[changes].tolist()
    marks = bytearray(size)       # bit 0: visited by a border, bit 1: negative mark
    ccw, cw = _CCW, _CW
    found = []
    for p, is_outer in zip(candidates, outer):
        if is_outer:
            if marks[p]:
                continue
            start, search = p, 4                   # first neighbour clockwise from the west
        else:
            start = p - 1
            if marks[start] & 2:
                continue
            search = 0                              # ... from the east, for a hole
        c8 = code_bytes[start] << 3
        first = cw[c8 + search]
        if first == 8:                               # an isolated pixel
            marks[start] = 3
            found.append([start])
            continue
        # follow the border until we stand on `last` (the first neighbour found clockwise)
        # about to step back onto `start`
        last = start + steps[first]
        back = first ^ 4
        points = []
        append = points.append
        previous = back
        here, after = start, first
        while True:
            t = ccw[(code_bytes[here] << 3) + after]
            marks[here] |= t >> 3
            d = t & 7
            if d != previous:
                append(here)
                previous = d
            if here == last and d == back:
                break
            here += steps[d]
            after = d ^ 4
        found.append(points)
    found.reverse()
    result = []
    for points in found:
        flat_points = np.array(points, dtype=np.int64)
        xy = np.empty((len(points), 2), dtype=np.int32)
        xy[:, 1] = flat_points // stride - 1
        xy[:, 0] = flat_points - (xy[:, 1] + 1) * stride - 1
        result.append(xy)
    return result


def dilate_2x2(mask) -> np.ndarray:
    """cv2.dilate(mask, np.ones((2, 2))): each pixel becomes the maximum of itself and its
    neighbours above, to the left and above-left (the kernel's anchor is its centre, (1, 1));
    pixels outside the image do not count. Same dtype and shape as `mask`."""
    mask = _binary(mask, "dilate_2x2")
    out = mask.copy()
    np.maximum(out[1:], mask[:-1], out=out[1:])
    np.maximum(out[:, 1:], out[:, :-1].copy(), out=out[:, 1:])
    return out
