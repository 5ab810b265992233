"""EXIF orientation: which way up a photo is meant to be shown, read without Pillow.

Cameras store the sensor's pixels as they came and record in the EXIF Orientation tag (0x0112,
TIFF/EXIF 2.32 section 4.6.4) how to turn them: 1 as stored, 2 mirrored left-right, 3 turned
180 degrees, 4 mirrored top-bottom, 5 transposed, 6 turned 90 degrees clockwise, 7 transversed,
8 turned 90 degrees anticlockwise (the turn that shows the image upright). Browsers apply it when
they decode (`image-orientation: from-image`), Pillow in `ImageOps.exif_transpose`; `read_image`
applies it here so that boxes and keypoints land on the picture the person sees.

The tag is read from a JPEG's APP1 "Exif" segment (before the image data) or a PNG's eXIf chunk:
a TIFF header, then the first IFD's 12-byte entries. Every offset is checked against the
segment's bounds; anything missing, malformed or out of range reads as 1 (as stored).
"""
from __future__ import annotations

import struct

import numpy as np

__all__ = ["exif_orientation", "apply_orientation"]

_ORIENTATION_TAG = 0x0112
_MAX_MARKERS = 1 << 16          # JPEG segments looked at before giving up


def _tiff_orientation(tiff) -> int:
    """The Orientation of a TIFF structure's first IFD (1 when absent or bad)."""
    tiff = bytes(tiff)
    if len(tiff) < 8:
        return 1
    order = {b"II*\x00": "<", b"MM\x00*": ">"}.get(tiff[:4])
    if order is None:
        return 1
    (ifd,) = struct.unpack_from(order + "I", tiff, 4)
    if ifd + 2 > len(tiff):
        return 1
    (count,) = struct.unpack_from(order + "H", tiff, ifd)
    for i in range(min(count, (len(tiff) - ifd - 2) // 12)):
        tag, kind, n = struct.unpack_from(order + "HHI", tiff, ifd + 2 + 12 * i)
        if tag != _ORIENTATION_TAG:
            continue
        if n < 1 or kind not in (3, 4):                   # SHORT (as the standard says) or LONG
            return 1
        (value,) = struct.unpack_from(order + ("H" if kind == 3 else "I"), tiff, ifd + 2 + 12 * i + 8)
        return value if 1 <= value <= 8 else 1
    return 1


def _jpeg_orientation(data: bytes) -> int:
    pos = 2
    for _ in range(_MAX_MARKERS):
        while pos < len(data) and data[pos] == 0xFF and pos + 1 < len(data) and data[pos + 1] == 0xFF:
            pos += 1                                      # fill bytes before a marker
        if pos + 4 > len(data) or data[pos] != 0xFF:
            return 1
        code = data[pos + 1]
        if code in (0x01, 0xD8) or 0xD0 <= code <= 0xD7:  # markers without a length
            pos += 2
            continue
        if code in (0xD9, 0xDA):                          # the image data: no EXIF after it counts
            return 1
        (length,) = struct.unpack_from(">H", data, pos + 2)
        if length < 2 or pos + 2 + length > len(data):
            return 1
        body = memoryview(data)[pos + 4 : pos + 2 + length]
        if code == 0xE1 and bytes(body[:6]) == b"Exif\x00\x00":
            return _tiff_orientation(body[6:])
        pos += 2 + length
    return 1


def _png_orientation(data: bytes) -> int:
    pos = 8
    while pos + 12 <= len(data):
        length, kind = struct.unpack_from(">I4s", data, pos)
        if kind in (b"IDAT", b"IEND") or pos + 12 + length > len(data):
            return 1                                      # eXIf comes before the image data
        if kind == b"eXIf":
            return _tiff_orientation(memoryview(data)[pos + 8 : pos + 8 + length])
        pos += 12 + length
    return 1


def exif_orientation(data) -> int:
    """The EXIF Orientation (1..8) of a JPEG's or PNG's bytes; 1 when there is none."""
    data = data if isinstance(data, bytes) else bytes(data)
    if data.startswith(b"\xff\xd8"):
        return _jpeg_orientation(data)
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return _png_orientation(data)
    return 1


def apply_orientation(image: np.ndarray, orientation: int) -> np.ndarray:
    """(H, W, ...) pixels as stored -> as meant to be shown, for an EXIF Orientation 1..8 (the
    transposes of Pillow's ImageOps.exif_transpose)."""
    if orientation == 2:
        out = image[:, ::-1]
    elif orientation == 3:
        out = image[::-1, ::-1]
    elif orientation == 4:
        out = image[::-1]
    elif orientation == 5:
        out = image.swapaxes(0, 1)
    elif orientation == 6:
        out = image[::-1].swapaxes(0, 1)                 # 90 degrees clockwise
    elif orientation == 7:
        out = image[::-1, ::-1].swapaxes(0, 1)
    elif orientation == 8:
        out = image[:, ::-1].swapaxes(0, 1)              # 90 degrees anticlockwise
    else:
        return image
    return np.ascontiguousarray(out)
