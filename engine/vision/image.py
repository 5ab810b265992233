"""Reading images into NumPy arrays without Pillow.

PNG is decoded here (spec: https://www.w3.org/TR/png-3/), `.npy` through NumPy; other
formats (JPEG, GIF, BMP, WebP, ...) go through Pillow when it is importable natively. In
the browser the page decodes those formats and hands pixels to Python.

EXIF orientation is applied (engine/vision/exif.py): JPEG and PNG pixels come out the way up the
photo is meant to be shown, as browsers and Pillow's ImageOps.exif_transpose show them.

Convention: `read_image` returns uint8 (H, W, C) with C = 1 gray, 2 gray+alpha, 3 RGB,
4 RGBA. Alpha is present when the file has an alpha channel or PNG tRNS transparency.
16-bit PNG samples keep their high byte (as Pillow does for 16-bit RGB); 1/2/4-bit gray
is scaled to 0..255. Every failure is an `InputError` whose message starts with the file
name (or "<bytes>") and gives a one-line reason.
"""
from __future__ import annotations

import contextlib
import io
import math
import os
import re
import struct
import warnings
import zlib

import numpy as np

from ..errors import InputError
from ..untrusted import shown
from .exif import apply_orientation, exif_orientation

__all__ = ["read_image", "image_size", "from_pillow", "to_float", "to_grayscale"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}          # colour type -> samples per pixel
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),   # (x0, y0, dx, dy)
          (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
# JPEG start-of-frame markers; C4 (DHT), C8 (JPG) and CC (DAC) share the range but are not frames.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_MAX_STEPS = 1 << 16               # markers (and fill bytes) looked at before the frame header
_WAVEFRONT_ELEMENTS = 1 << 24          # memory cap (elements) of one band in _unfilter_wavefront
# None/Sub/Up rows: NumPy's running sum down columns is slow on wide arrays (~20 ns a byte) and a
# NumPy call per row slow on millions of short ones (~1 us a row), so long rows go one call each,
# short ones in chunks of about _EASY_ROWS_BYTES
_WIDE_ROW_BYTES = 256
_EASY_ROWS_BYTES = 1 << 22
# Average and Paeth rows are undone one anti-diagonal per NumPy step (_unfilter_wavefront): about
# 50 ns a byte plus 30 us a step (counted as 600 bytes), however short the diagonal. A photo, whose
# data compresses 2-3x, costs about its raw bytes; a zlib bomb inflates 1000x, and one declaring a
# narrow image of millions of rows takes a step per row (31 kB declaring 1 x 16,000,000 would run
# for minutes). So this work may be 256 bytes per byte of compressed data, or _WAVEFRONT_FLOOR
# (about a second) if that is more; beyond it the file is refused as too slow to decode here.
_WAVEFRONT_STEP_BYTES = 600
_WAVEFRONT_PER_BYTE = 256
_WAVEFRONT_FLOOR = 1 << 25
# Whatever the data's size, this work is at most _WAVEFRONT_MAX: measured at about 32 ns a unit here,
# that is about 2 s, and takes a 12-megapixel RGB image (4000 x 3000) all in Paeth (work 45 million),
# fewer pixels in a very wide image, whose narrow bands take a step per column each. Beyond it Pillow
# decodes the file natively when it is installed; otherwise it is refused (read_image's docstring).
_WAVEFRONT_MAX = 60_000_000


class _Bad(Exception):
    """A one-line reason the bytes are no readable image; the public functions add the name."""


class _TooSlow(_Bad):
    """A legal PNG whose filters would take longer than _WAVEFRONT_MAX to undo here."""


# --- public API --------------------------------------------------------------------------

def read_image(source, *, max_pixels: int = 64_000_000) -> np.ndarray:
    """Decode a PNG, .npy or (natively, with Pillow) any other image to uint8 (H, W, C).

    `source` is a path or the file's bytes. The size is checked from the header before
    anything is decoded: zero-sized images, and images of more than `max_pixels` pixels
    (64,000,000 by default, 192 MB as RGB; Pillow's MAX_IMAGE_PIXELS, 89,478,485, plays the
    same part) are refused without allocating them.

    PNG rows filtered with Average or Paeth depend on their left neighbour, so NumPy undoes them
    one anti-diagonal at a time. That work is bounded: at most 256 units per byte of compressed
    data (a zlib bomb is refused), and at most about 2 s (_WAVEFRONT_MAX: a 4000 x 3000 RGB
    image all in Paeth fits; a 64000 x 1000 one does not, its narrow bands taking a step per
    column each). Natively, with Pillow installed, a PNG that could pass that bound were all its
    rows Paeth, and is no bomb by the first rule, is decoded by Pillow instead; otherwise one
    that does pass it is refused with a message that says so. None, Sub and Up rows have no such
    limit (a 64000 x 1000 RGB PNG decodes in about 1.5 s of CPU here, Pillow's in about 1.2 s).
    """
    name = _name(source)
    with _opened(source, name) as f:
        try:
            width, height, fmt = _header(f)
            _check_size(width, height, max_pixels)
            f.seek(0)
            if fmt == "PNG":
                data = f.read()
                worst = _png_worst_work(data)     # a file that is no zlib bomb but may be slow here
                if _pillow() is not None and _WAVEFRONT_MAX < worst <= _WAVEFRONT_PER_BYTE * len(data):
                    return _decode_with_pillow(io.BytesIO(data), fmt, max_pixels)
                return apply_orientation(_decode_png(data, max_pixels), exif_orientation(data))
            if fmt == "NPY":
                return _decode_npy(f)
            return _decode_with_pillow(f, fmt, max_pixels)
        except _Bad as e:
            raise InputError(f"{name}: {e}") from None


def image_size(source) -> tuple[int, int, str]:
    """(width, height, format) read from the header only; format is Pillow's name ("PNG",
    "JPEG", "GIF", "BMP", "WEBP") or "NPY". JPEG sizes are as stored, before EXIF rotation."""
    name = _name(source)
    with _opened(source, name) as f:
        try:
            return _header(f)
        except _Bad as e:
            raise InputError(f"{name}: {e}") from None


def to_float(img) -> np.ndarray:
    """uint8 0..255 -> float32 0..1; floating input is returned as float32 unchanged."""
    img = np.asarray(img)
    if img.dtype == np.uint8:
        return img.astype(np.float32) / np.float32(255)
    if img.dtype.kind == "f":
        return img.astype(np.float32, copy=False)
    raise InputError(f"expected a uint8 or floating image, got dtype {img.dtype}")


def to_grayscale(img, *, background: float | None = 1.0) -> np.ndarray:
    """float32 (H, W) in [0, 1] with ITU-R 601-2 luma L = 0.299 R + 0.587 G + 0.114 B.

    Input is (H, W) or (H, W, C) with C in 1..4 as `read_image` returns. An alpha channel
    is composited over the gray level `background` (default white, 1.0); `background=None`
    ignores alpha as Pillow's convert("L") does.
    """
    x = to_float(img)
    if x.ndim == 2:
        return x
    if x.ndim != 3 or not 1 <= x.shape[2] <= 4:
        raise InputError(f"expected an (H, W) or (H, W, C) image with C in 1..4, got shape {x.shape}")
    channels = x.shape[2]
    colour = x[..., : channels - 1] if channels in (2, 4) else x
    if colour.shape[2] == 3:
        gray = colour @ np.array([0.299, 0.587, 0.114], np.float32)
    else:
        gray = colour[..., 0]
    if channels in (2, 4) and background is not None:
        alpha = x[..., -1]
        gray = gray * alpha + np.float32(background) * (1 - alpha)
    return np.ascontiguousarray(gray, dtype=np.float32)


# --- sources and headers -----------------------------------------------------------------

def _name(source) -> str:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return "<bytes>"
    return os.fspath(source)


@contextlib.contextmanager
def _opened(source, name):
    if isinstance(source, (bytes, bytearray, memoryview)):
        yield io.BytesIO(source)
        return
    try:
        f = open(source, "rb")
    except OSError as e:
        raise InputError(f"{name}: cannot open ({e.strerror or e})") from None
    with f:
        yield f


def _check_size(width: int, height: int, max_pixels: int) -> None:
    if width <= 0 or height <= 0:
        raise _Bad(f"image has zero size ({width}x{height})")
    if width * height > max_pixels:
        raise _Bad(f"image is {width}x{height} = {width * height} pixels, "
                   f"more than max_pixels={max_pixels}")


def _header(f) -> tuple[int, int, str]:
    head = f.read(32)
    if not head:
        raise _Bad("empty file")
    if head.startswith(_PNG_SIGNATURE):
        if len(head) < 24 or head[12:16] != b"IHDR":
            raise _Bad("truncated or corrupt PNG header (no IHDR chunk)")
        width, height = struct.unpack_from(">II", head, 16)
        return width, height, "PNG"
    if head.startswith(b"\xff\xd8\xff"):
        return (*_jpeg_size(f), "JPEG")
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        return (*struct.unpack_from("<HH", head, 6), "GIF")
    if head.startswith(b"BM") and len(head) >= 26:
        if struct.unpack_from("<I", head, 14)[0] == 12:           # OS/2 BITMAPCOREHEADER
            return (*struct.unpack_from("<HH", head, 18), "BMP")
        width, height = struct.unpack_from("<ii", head, 18)
        return width, abs(height), "BMP"                          # negative height: top-down rows
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 30:
        return (*_webp_size(head), "WEBP")
    if head.startswith(_NPY_MAGIC):
        shape = _npy_header(f)[0]
        return shape[1], shape[0], "NPY"
    if _pillow() is None:
        raise _Bad("not a recognised image (PNG, JPEG, GIF, BMP, WebP or .npy)")
    f.seek(0)
    Image = _pillow()[0]
    try:
        with _no_bomb_warning(Image), Image.open(f) as im:     # lazy: reads the header only
            return im.size[0], im.size[1], im.format
    except Image.DecompressionBombError as e:       # over 2 * MAX_IMAGE_PIXELS, refused by Pillow
        raise _Bad(f"image too large ({e})") from None
    except Exception:                        # Pillow raises many types for "not an image"
        raise _Bad("not a recognised image format") from None


def _read(f, n: int, what: str) -> bytes:
    data = f.read(n)
    if len(data) < n:
        raise _Bad(f"truncated {what}")
    return data


def _jpeg_size(f) -> tuple[int, int]:
    """Walk the marker segments up to the first start-of-frame; never reads scan data. Files have
    a few dozen markers before it; one of nothing but markers or fill bytes is refused after
    _JPEG_MAX_STEPS of them rather than walked byte by byte to its end."""
    f.seek(2)
    for _ in range(_JPEG_MAX_STEPS):
        marker, code = _read(f, 2, "JPEG (no frame header)")
        if marker != 0xFF:
            raise _Bad(f"corrupt JPEG (no marker at byte {f.tell() - 2})")
        if code == 0xFF:                     # fill bytes may precede a marker
            fill = f.read(_JPEG_MAX_STEPS)
            rest = fill.lstrip(b"\xff")
            if not rest:
                raise _Bad("truncated JPEG (no frame header)" if len(fill) < _JPEG_MAX_STEPS
                           else "corrupt JPEG (a run of fill bytes with no marker)")
            f.seek(1 - len(rest), 1)         # just past the marker's code
            code = rest[0]
        if code in (0x01, 0xD8) or 0xD0 <= code <= 0xD7:   # markers without a length
            continue
        if code in (0xD9, 0xDA):
            raise _Bad("corrupt JPEG (no frame header before the image data)")
        (length,) = struct.unpack(">H", _read(f, 2, "JPEG (no frame header)"))
        if code in _JPEG_SOF:
            _, height, width = struct.unpack(">BHH", _read(f, 5, "JPEG frame header"))
            return width, height
        if length < 2:
            raise _Bad("corrupt JPEG (segment length < 2)")
        f.seek(length - 2, 1)
    raise _Bad(f"corrupt JPEG (no frame header in its first {_JPEG_MAX_STEPS} markers)")


def _webp_size(head: bytes) -> tuple[int, int]:
    kind = head[12:16]
    if kind == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":     # lossy: 14-bit sizes after the start code
        width, height = struct.unpack_from("<HH", head, 26)
        return width & 0x3FFF, height & 0x3FFF
    if kind == b"VP8L" and head[20] == 0x2F:                   # lossless: 14-bit (size - 1) fields
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8X":                                        # extended: 24-bit (size - 1) fields
        return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1
    raise _Bad("corrupt WebP header")


# --- PNG ---------------------------------------------------------------------------------

def _png_chunks(data: bytes):
    """Yield (type, body) per chunk up to IEND, checking lengths and CRCs."""
    view, pos = memoryview(data), 8
    while True:
        if pos + 12 > len(data):
            raise _Bad("truncated PNG (ends before the IEND chunk)")
        length, kind = struct.unpack_from(">I4s", data, pos)
        end = pos + 12 + length
        label = kind.decode("latin-1")
        if end > len(data):
            raise _Bad(f"truncated PNG ({label} chunk of {length} bytes runs past the end of the file)")
        if zlib.crc32(view[pos + 4 : end - 4]) != struct.unpack_from(">I", data, end - 4)[0]:
            raise _Bad(f"bad CRC in PNG {label} chunk at byte {pos}")
        yield kind, view[pos + 8 : end - 4]
        if kind == b"IEND":
            return
        pos = end


def _decode_png(data: bytes, max_pixels: int) -> np.ndarray:
    if not data.startswith(_PNG_SIGNATURE):
        raise _Bad("not a PNG (bad signature)")
    header, palette, transparency, idat = None, None, None, []
    for kind, body in _png_chunks(data):
        if header is None:
            if kind != b"IHDR" or len(body) != 13:
                raise _Bad("corrupt PNG (first chunk is not a 13-byte IHDR)")
            header = struct.unpack(">IIBBBBB", body)
            width, height, depth, colour, compression, filtering, interlace = header
            _check_size(width, height, max_pixels)       # before anything is inflated
            if depth not in _PNG_DEPTHS.get(colour, ()):
                raise _Bad(f"invalid PNG colour type {colour} with bit depth {depth}")
            if compression or filtering or interlace > 1:
                raise _Bad("unknown PNG compression, filter or interlace method")
        elif kind == b"PLTE":
            palette = bytes(body)
        elif kind == b"tRNS":
            transparency = bytes(body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind != b"IEND" and not kind[0] & 0x20:     # lowercase first letter: ancillary
            raise _Bad(f"unknown critical PNG chunk {kind.decode('latin-1')}")
    if not idat:
        raise _Bad("PNG has no image data (IDAT)")

    channels = _PNG_CHANNELS[colour]
    passes = _ADAM7 if interlace else ((0, 0, 1, 1),)
    shapes = [(-(-(height - y0) // dy), -(-(width - x0) // dx)) for x0, y0, dx, dy in passes]
    row_bytes = [(w * channels * depth + 7) // 8 for _, w in shapes]
    expected = sum(h * (1 + n) for (h, w), n in zip(shapes, row_bytes) if h and w)
    compressed = sum(len(chunk) for chunk in idat)
    raw = _inflate(idat, expected)

    bytes_per_pixel = max(1, channels * depth // 8)      # filter unit; 1 for sub-byte depths
    budget = max(_WAVEFRONT_FLOOR, _WAVEFRONT_PER_BYTE * compressed)
    if not interlace and depth == 8:                     # the common case: unfiltered in place, no copy
        rows = raw.reshape(height, row_bytes[0] + 1)
        _check_work(_unfilter(rows, bytes_per_pixel, budget), budget, compressed, width, height)
        return _png_to_8bit(_drop_filter_bytes(raw, height, row_bytes[0]).reshape(height, width, channels),
                            colour, depth, palette, transparency)
    img = np.empty((height, width, channels), np.uint16 if depth == 16 else np.uint8)
    pos = 0
    for (x0, y0, dx, dy), (h, w), n in zip(passes, shapes, row_bytes):
        if h and w:
            rows = raw[pos : pos + h * (n + 1)].reshape(h, n + 1)
            pos += h * (n + 1)
            work = _check_work(_unfilter(rows, bytes_per_pixel, budget), budget, compressed, width, height)
            budget -= work
            img[y0::dy, x0::dx] = _unpack(rows[:, 1:], w, channels, depth)
    return _png_to_8bit(img, colour, depth, palette, transparency)


def _png_worst_work(data: bytes) -> int:
    """The wavefront's work were every row of the PNG filtered with Paeth (0 for a bad header)."""
    if len(data) < 26:
        return 0
    width, height, depth, colour = struct.unpack_from(">IIBB", data, 16)
    bpp = max(1, _PNG_CHANNELS.get(colour, 1) * depth // 8)
    cols = max(1, (width * _PNG_CHANNELS.get(colour, 1) * depth + 7) // 8 // bpp)
    band = _band_rows(height, cols, bpp)
    return height * cols * bpp + -(-height // band) * (band + cols + 1) * _WAVEFRONT_STEP_BYTES


def _drop_filter_bytes(raw: np.ndarray, h: int, n: int) -> np.ndarray:
    """The (h, n) bytes of rows (h, 1 + n) laid out in `raw`, moved to its start without their
    filter-type bytes: in place, a chunk of rows at a time (each chunk's bytes move to an
    earlier place than any later chunk's)."""
    rows = raw[: h * (n + 1)].reshape(h, n + 1)
    chunk = max(1, _EASY_ROWS_BYTES // max(1, n))
    for start in range(0, h, chunk):
        stop = min(start + chunk, h)
        raw[start * n : stop * n] = rows[start:stop, 1:].reshape(-1)     # overlap: NumPy copies the chunk first
    return raw[: h * n].reshape(h, n)


def _check_work(work: int, budget: int, compressed: int, width: int, height: int) -> int:
    if work > budget:
        raise _Bad(f"PNG image data of {compressed} bytes declares {width}x{height} pixels whose Average/"
                   f"Paeth filters would take too long to undo here (work {work}, at most {budget} for "
                   f"data of this size: a zlib bomb?)")
    if work > _WAVEFRONT_MAX:
        raise _TooSlow(f"PNG of {width}x{height} pixels whose Average/Paeth filters would take too long to undo "
                       f"here (work {work}, at most {_WAVEFRONT_MAX}: about 2 s); natively, installing Pillow "
                       f"decodes it")
    return work


def _inflate(chunks, expected: int) -> np.ndarray:
    """Inflate IDAT bodies to exactly `expected` bytes, into one writable array; never produce
    more than expected + 1."""
    stream, out, size = zlib.decompressobj(), np.empty(expected, np.uint8), 0
    try:
        for chunk in chunks:
            piece = stream.decompress(chunk, expected - size + 1)
            if size + len(piece) > expected:
                raise _Bad(f"PNG image data inflates to more than the {expected} bytes the header implies")
            out[size:size + len(piece)] = np.frombuffer(piece, np.uint8)
            size += len(piece)
            if stream.eof:
                break
    except zlib.error as e:
        raise _Bad(f"corrupt PNG image data (zlib: {e})") from None
    if size < expected:
        raise _Bad(f"PNG image data too short ({size} of {expected} bytes)")
    return out


def _unfilter(rows: np.ndarray, bpp: int, budget: int) -> int:
    """Undo per-row filters in place: rows (h, 1 + n) with the filter type first; afterwards
    rows[:, 1:] holds the bytes. Returns the wavefront's work; past a `budget` (or
    _WAVEFRONT_MAX) of work it stops, unfinished, and says how much it needed."""
    types, data = rows[:, 0].copy(), rows[:, 1:]
    if types.size and types.max() > 4:
        raise _Bad(f"corrupt PNG (unknown filter type {int(types.max())})")
    # Where a filter's neighbours are all zero it is a simpler one: Paeth predicts from the row above
    # alone in a one-pixel-wide image, and from the left alone in the first row
    if data.shape[1] == bpp:
        types[types == 4] = 2
    if types.size and types[0] == 4:
        types[0] = 1
    # Average and Paeth need the left neighbour's result, so rows with them go through the
    # wavefront; encoders mix types row by row, so it takes every row from the first to the
    # last such row (its cost is per band, not per row), the rest go a chunk of rows at a time.
    hard = np.flatnonzero(types >= 3)
    lo, hi = (hard[0], hard[-1] + 1) if hard.size else (len(types), len(types))
    zeros = np.zeros(data.shape[1], np.uint8)
    work = 0
    if hard.size:
        band = _band_rows(hi - lo, data.shape[1] // bpp, bpp)
        steps = -(-(hi - lo) // band) * (band + data.shape[1] // bpp + 1)
        work = (hi - lo) * data.shape[1] + steps * _WAVEFRONT_STEP_BYTES
        if work > min(budget, _WAVEFRONT_MAX):
            return work
    _unfilter_rows(data[:lo], types[:lo], zeros, bpp)
    if hard.size:
        data[lo:hi] = _unfilter_wavefront(data[lo:hi], types[lo:hi], data[lo - 1] if lo else zeros, bpp, band)
    _unfilter_rows(data[hi:], types[hi:], data[hi - 1] if hi else zeros, bpp)
    return work


def _unfilter_rows(data, types, prev, bpp):
    """None, Sub and Up rows, in place, `prev` being the row above the first. Sub is a running
    sum along each row's byte lanes; Up adds the row above. All sums are mod 256 (uint8)."""
    if data.shape[1] >= _WIDE_ROW_BYTES:           # few long rows: one NumPy call per row
        for i, kind in enumerate(types):
            if kind == 1:
                lanes = data[i].reshape(-1, bpp)
                np.cumsum(lanes, axis=0, dtype=np.uint8, out=lanes)
            elif kind == 2:
                np.add(data[i], prev, out=data[i])
            prev = data[i]
        return
    # Many short rows (a zlib bomb can declare millions): no Python step per row. A run of Up rows
    # is a running sum down the columns from the last row that is not Up (or from `prev`).
    chunk = max(1, _EASY_ROWS_BYTES // max(1, data.shape[1]))
    for start in range(0, len(types), chunk):
        kinds, rows = types[start:start + chunk], data[start:start + chunk]
        base = rows.copy()
        sub = kinds == 1
        if sub.any():
            lanes = base[sub].reshape(int(sub.sum()), -1, bpp)
            base[sub] = np.cumsum(lanes, axis=1, dtype=np.uint8).reshape(len(lanes), -1)
        total = np.cumsum(base, axis=0, dtype=np.uint8)                     # (h, n)
        restart = np.maximum.accumulate(np.where(kinds != 2, np.arange(len(kinds)), -1))
        before = np.concatenate([np.zeros((1, rows.shape[1]), np.uint8), total])
        result = total - before[np.maximum(restart, 0)]
        result[restart < 0] += prev
        rows[...] = result
        if len(result):
            prev = rows[-1]


def _band_rows(m: int, cols: int, bpp: int) -> int:
    """Rows per band of the wavefront: its diagonal-major copies hold about _WAVEFRONT_ELEMENTS."""
    band = int((-cols + (cols * cols + 4 * _WAVEFRONT_ELEMENTS / bpp) ** 0.5) / 2)
    return max(1, min(m, band))


def _unfilter_wavefront(data: np.ndarray, types: np.ndarray, prev: np.ndarray, bpp: int, band: int) -> np.ndarray:
    """Pixel (r, c) needs (r, c-1), (r-1, c) and (r-1, c-1), so all pixels with equal r + c
    are independent: each anti-diagonal is one vectorised step. Bands of rows bound the
    memory of the diagonal-major copies."""
    m, cols = len(data), data.shape[1] // bpp
    out = np.empty_like(data)
    for b0 in range(0, m, band):
        nb = min(band, m - b0)
        # diag[i + 1 + c, i] = pixel c of row i (row 0 = previous row); diag[i, i] stays 0.
        # Anti-diagonal j is then the contiguous diag[j].
        diag = np.zeros((nb + cols + 1, nb + 1, bpp), np.int16)
        source = np.zeros((nb + cols + 1, nb + 1, bpp), np.uint8)
        diag[1 : cols + 1, 0] = prev.reshape(cols, bpp)
        for i in range(1, nb + 1):
            source[i + 1 : i + 1 + cols, i] = data[b0 + i - 1].reshape(cols, bpp)
        kind = types[b0 : b0 + nb, None]
        is_sub, is_up, is_average, is_paeth = (kind == 1), (kind == 2), (kind == 3), (kind == 4)
        for j in range(2, nb + cols + 1):
            lo, hi = max(1, j - cols), min(nb, j - 1) + 1
            a = diag[j - 1, lo:hi]                         # left
            b = diag[j - 1, lo - 1 : hi - 1]               # up
            c = diag[j - 2, lo - 1 : hi - 1]               # up-left
            pa, pb, pc = np.abs(b - c), np.abs(a - c), np.abs(a + b - 2 * c)
            rows = slice(lo - 1, hi - 1)
            paeth = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))
            others = np.where(is_average[rows], (a + b) >> 1, a * is_sub[rows] + b * is_up[rows])
            predicted = np.where(is_paeth[rows], paeth, others)
            diag[j, lo:hi] = (source[j, lo:hi] + predicted) & 0xFF
        for i in range(1, nb + 1):
            out[b0 + i - 1] = diag[i + 1 : i + 1 + cols, i].reshape(-1)
        prev = out[b0 + nb - 1]
    return out


def _unpack(data: np.ndarray, width: int, channels: int, depth: int) -> np.ndarray:
    """(h, n) unfiltered bytes -> (h, width, channels) samples (uint16 for 16-bit), in as much
    memory as the samples themselves."""
    h = data.shape[0]
    if depth == 8:
        return data.reshape(h, width, channels)
    if depth == 16:
        return data.view(">u2").reshape(h, width, channels).astype(np.uint16)
    # 1, 2 or 4 bits (gray or palette, one channel), most significant first in each byte
    shifts = np.arange(8 - depth, -1, -depth, dtype=np.uint8)                  # (8 / depth,)
    samples = (data[:, :, None] >> shifts) & np.uint8((1 << depth) - 1)       # (h, n, 8 / depth)
    return samples.reshape(h, -1)[:, :width, None]


def _png_to_8bit(img, colour, depth, palette, transparency) -> np.ndarray:
    if colour == 3:
        if palette is None or len(palette) % 3 or len(palette) > 768:
            raise _Bad("palette PNG without a valid PLTE chunk")
        lut = np.zeros((256, 4), np.uint8)               # out-of-range indices read opaque black
        lut[:, 3] = 255
        lut[: len(palette) // 3, :3] = np.frombuffer(palette, np.uint8).reshape(-1, 3)
        if transparency is None:
            return lut[img[..., 0], :3]
        alpha = np.frombuffer(transparency, np.uint8)[:256]
        lut[: len(alpha), 3] = alpha
        return lut[img[..., 0]]
    alpha = None
    if transparency is not None and colour in (0, 2) and len(transparency) == 2 * img.shape[2]:
        # the key colour is compared at the file's bit depth, before the reduction to 8 bits
        key = np.frombuffer(transparency, ">u2")
        alpha = np.where((img == key).all(axis=2, keepdims=True), 0, 255).astype(np.uint8)
    if depth == 16:
        img = (img >> 8).astype(np.uint8)
    elif depth < 8:
        img = img * np.uint8(255 // ((1 << depth) - 1))
    return img if alpha is None else np.concatenate([img, alpha], axis=2)


# --- .npy and Pillow ---------------------------------------------------------------------

_NPY_MAGIC = b"\x93NUMPY"
_NPY_MAX_HEADER = 10_000        # NumPy's own default limit; it writes about 128 bytes
_NPY_VERSIONS = {(1, 0): 2, (2, 0): 4, (3, 0): 4}     # version -> bytes of the header length
# the header is a Python dict literal: {'descr': '<u1', 'fortran_order': False, 'shape': (3, 4), }
_NPY_ENTRY = re.compile(r"""\s*['"](\w+)['"]\s*:\s*('[^']*'|"[^"]*"|True|False|\([0-9L,\s]*\))\s*""")
_NPY_DTYPE = re.compile(r"[<>|=]?(b1|u1|i1|[ui][248]|f[248])")      # bool, integers, floats


def _npy_header(f) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """(shape, dtype, fortran_order, data offset) of an .npy file.

    Read here rather than by NumPy, whose reader allocates the header length a file states before
    checking it (4 GB from a 4-byte field) and evaluates the header with Python's parser, which
    some texts drive to TokenError, RecursionError or MemoryError. The format: the magic, a
    version, a 2- or 4-byte little-endian header length, the dict literal, the data."""
    f.seek(0)
    prefix = f.read(12)
    version = tuple(prefix[6:8])
    if version not in _NPY_VERSIONS:
        raise _Bad(f"unsupported .npy version {'.'.join(map(str, version)) or '(none)'}")
    size = _NPY_VERSIONS[version]
    if len(prefix) < 8 + size:
        raise _Bad("truncated .npy header")
    length = int.from_bytes(prefix[8:8 + size], "little")
    if length > _NPY_MAX_HEADER:
        raise _Bad(f".npy header length {length} is over {_NPY_MAX_HEADER} bytes")
    f.seek(8 + size)
    raw = f.read(length)
    if len(raw) < length:
        raise _Bad("truncated .npy header")
    text = raw.decode("utf-8" if version == (3, 0) else "latin-1", "replace").strip()
    inner = text[1:-1] if text[:1] == "{" and text[-1:] == "}" else ""
    entries, pos = {}, 0
    while (match := _NPY_ENTRY.match(inner, pos)) is not None:      # 'key': value, ...
        entries[match[1]] = match[2]
        pos = match.end() + inner.startswith(",", match.end())
    if inner[pos:].strip() or entries.keys() != {"descr", "fortran_order", "shape"}:
        raise _Bad("corrupt .npy header (expected {'descr': ..., 'fortran_order': ..., 'shape': (...)})")
    descr = entries["descr"][1:-1]
    if _NPY_DTYPE.fullmatch(descr) is None:
        raise _Bad(f".npy dtype {shown(descr)} is not bool, an integer or a float")
    if entries["fortran_order"] not in ("True", "False"):
        raise _Bad(f"corrupt .npy header (fortran_order {shown(entries['fortran_order'])})")
    dims = [d.strip().rstrip("L") for d in entries["shape"][1:-1].split(",")]
    if dims and dims[-1] == "":
        dims.pop()                                   # "(3,)"
    if not all(d.isascii() and d.isdigit() and len(d) <= 18 for d in dims):
        raise _Bad(f"corrupt .npy shape {shown(entries['shape'])}")
    shape = tuple(int(d) for d in dims)
    if len(shape) not in (2, 3):
        raise _Bad(f".npy array of shape {shape} is not an (H, W) or (H, W, C) image")
    return shape, np.dtype(descr), entries["fortran_order"] == "True", 8 + size + length


def _decode_npy(f) -> np.ndarray:
    """uint8 as is; bool as 0/255; other integers in 0..255; floats in [0, 1] scaled by 255."""
    shape, dtype, fortran, offset = _npy_header(f)
    if len(shape) == 3 and not 1 <= shape[2] <= 4:
        raise _Bad(f".npy array of shape {shape} is not (H, W) or (H, W, C) with C in 1..4")
    count = math.prod(shape)
    available = f.seek(0, io.SEEK_END) - offset
    if count * dtype.itemsize > available:           # before reading: read(n) allocates n bytes
        raise _Bad(f".npy data truncated: shape {shape} of {dtype} needs {count * dtype.itemsize} bytes, "
                   f"the file has {max(available, 0)}")
    f.seek(offset)
    data = f.read(count * dtype.itemsize)
    arr = np.frombuffer(data, dtype, count).reshape(shape, order="F" if fortran else "C")
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.dtype == np.uint8:
        return np.ascontiguousarray(arr)
    if arr.dtype == np.bool_:
        return arr.astype(np.uint8) * np.uint8(255)
    if arr.dtype.kind in "iu" and arr.min() >= 0 and arr.max() <= 255:
        return arr.astype(np.uint8)
    if arr.dtype.kind == "f" and np.isfinite(arr).all() and arr.min() >= 0 and arr.max() <= 1:
        return np.rint(arr * 255).astype(np.uint8)
    raise _Bad(f".npy dtype {arr.dtype} is not uint8, bool, integers in 0..255 or floats in [0, 1]")


def _pillow():
    """(Image, ImageOps) when Pillow is importable, else None."""
    try:
        from PIL import Image, ImageOps
    except ImportError:
        return None
    return Image, ImageOps


_ALPHA_MODES = ("RGBA", "RGBa", "LA", "La", "PA")     # Pillow modes that carry an alpha band


@contextlib.contextmanager
def _no_bomb_warning(Image):
    # Pillow warns on stderr between MAX_IMAGE_PIXELS and twice that; our own max_pixels
    # check comes first, so the warning would only add lines to a one-line error
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        yield


def _decode_with_pillow(f, fmt: str, max_pixels: int) -> np.ndarray:
    if _pillow() is None:
        raise _Bad(f"{fmt} images need Pillow when running natively (pip install pillow); "
                   "in the browser the page decodes them")
    Image, ImageOps = _pillow()
    data = f.read()
    try:
        with _no_bomb_warning(Image), Image.open(io.BytesIO(data)) as im:    # lazy: load() decodes
            _check_size(*im.size, max_pixels)
            if fmt in ("JPEG", "PNG"):                 # EXIF orientation read here (engine/vision/exif.py)
                return apply_orientation(from_pillow(im), exif_orientation(data))
            return from_pillow(ImageOps.exif_transpose(im))
    except _Bad:
        raise
    except Exception as e:                         # Pillow's decoders raise many types
        raise _Bad(f"cannot decode {fmt} ({type(e).__name__}: {e})") from None


def from_pillow(im) -> np.ndarray:
    """A PIL image -> uint8 (H, W, C) in read_image's convention: gray modes ("1", "L",
    "I", "F", "I;16") to L, other colour spaces (CMYK, YCbCr, LAB, HSV, P) to RGB, with
    alpha (LA / RGBA) when the mode has an alpha band or the image a transparency key."""
    gray = im.mode in ("1", "L", "LA", "La", "I", "F") or im.mode.startswith("I;16")
    # not `"A" in getbands()`: LAB's A is a colour axis, not alpha
    alpha = im.mode in _ALPHA_MODES or "transparency" in im.info
    mode = ("LA" if alpha else "L") if gray else ("RGBA" if alpha else "RGB")
    arr = np.asarray(im if im.mode == mode else im.convert(mode))
    return arr[:, :, None] if arr.ndim == 2 else arr
