"""Reading images into NumPy arrays without Pillow.

PNG is decoded here (spec: https://www.w3.org/TR/png-3/), `.npy` through NumPy; other
formats (JPEG, GIF, BMP, WebP, ...) go through Pillow when it is importable natively. In
the browser the page decodes those formats and hands pixels to Python.

Convention: `read_image` returns uint8 (H, W, C) with C = 1 gray, 2 gray+alpha, 3 RGB,
4 RGBA. Alpha is present when the file has an alpha channel or PNG tRNS transparency.
16-bit PNG samples keep their high byte (as Pillow does for 16-bit RGB); 1/2/4-bit gray
is scaled to 0..255. Every failure is an `InputError` whose message starts with the file
name (or "<bytes>") and gives a one-line reason.
"""
from __future__ import annotations

import contextlib
import io
import os
import struct
import warnings
import zlib

import numpy as np

from ..errors import InputError

__all__ = ["read_image", "image_size", "from_pillow", "to_float", "to_grayscale"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}          # colour type -> samples per pixel
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),   # (x0, y0, dx, dy)
          (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
# JPEG start-of-frame markers; C4 (DHT), C8 (JPG) and CC (DAC) share the range but are not frames.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_WAVEFRONT_ELEMENTS = 1 << 24          # memory cap (elements) of one band in _unfilter_wavefront


class _Bad(Exception):
    """A one-line reason the bytes are no readable image; the public functions add the name."""


# --- public API --------------------------------------------------------------------------

def read_image(source, *, max_pixels: int = 64_000_000) -> np.ndarray:
    """Decode a PNG, .npy or (natively, with Pillow) any other image to uint8 (H, W, C).

    `source` is a path or the file's bytes. The size is checked from the header before
    anything is decoded: zero-sized or larger than `max_pixels` images are refused.
    """
    name = _name(source)
    with _opened(source, name) as f:
        try:
            width, height, fmt = _header(f)
            _check_size(width, height, max_pixels)
            f.seek(0)
            if fmt == "PNG":
                return _decode_png(f.read(), max_pixels)
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
    if head.startswith(b"\x93NUMPY"):
        f.seek(0)
        try:
            fmt = np.lib.format
            read = fmt.read_array_header_1_0 if fmt.read_magic(f) == (1, 0) else fmt.read_array_header_2_0
            shape = read(f)[0]
        except (ValueError, OSError, EOFError) as e:
            raise _Bad(f"corrupt .npy header ({e})") from None
        if len(shape) not in (2, 3):
            raise _Bad(f".npy array of shape {shape} is not an (H, W) or (H, W, C) image")
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
    """Walk the marker segments up to the first start-of-frame; never reads scan data."""
    f.seek(2)
    while True:
        marker, code = _read(f, 2, "JPEG (no frame header)")
        if marker != 0xFF:
            raise _Bad(f"corrupt JPEG (no marker at byte {f.tell() - 2})")
        while code == 0xFF:                  # fill bytes may precede a marker
            code = _read(f, 1, "JPEG (no frame header)")[0]
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
    raw = _inflate(idat, expected)

    bytes_per_pixel = max(1, channels * depth // 8)      # filter unit; 1 for sub-byte depths
    img = np.empty((height, width, channels), np.uint16 if depth == 16 else np.uint8)
    pos = 0
    for (x0, y0, dx, dy), (h, w), n in zip(passes, shapes, row_bytes):
        if h and w:
            rows = raw[pos : pos + h * (n + 1)].reshape(h, n + 1)
            pos += h * (n + 1)
            img[y0::dy, x0::dx] = _unpack(_unfilter(rows, bytes_per_pixel), w, channels, depth)
    return _png_to_8bit(img, colour, depth, palette, transparency)


def _inflate(chunks, expected: int) -> np.ndarray:
    """Inflate IDAT bodies to exactly `expected` bytes; never produce more than expected + 1."""
    stream, out = zlib.decompressobj(), bytearray()
    try:
        for chunk in chunks:
            out += stream.decompress(chunk, expected - len(out) + 1)
            if len(out) > expected:
                raise _Bad(f"PNG image data inflates to more than the {expected} bytes the header implies")
            if stream.eof:
                break
    except zlib.error as e:
        raise _Bad(f"corrupt PNG image data (zlib: {e})") from None
    if len(out) < expected:
        raise _Bad(f"PNG image data too short ({len(out)} of {expected} bytes)")
    return np.frombuffer(out, np.uint8)


def _unfilter(rows: np.ndarray, bpp: int) -> np.ndarray:
    """Undo per-row filters: rows (h, 1 + n) with the filter type first -> (h, n) bytes."""
    types, data = rows[:, 0], rows[:, 1:]
    if types.size and types.max() > 4:
        raise _Bad(f"corrupt PNG (unknown filter type {int(types.max())})")
    out = np.empty_like(data)
    # Average and Paeth need the left neighbour's result, so rows with them go through the
    # wavefront; encoders mix types row by row, so it takes every row from the first to the
    # last such row (its cost is per band, not per row), the rest go row by row.
    hard = np.flatnonzero(types >= 3)
    lo, hi = (hard[0], hard[-1] + 1) if hard.size else (len(types), len(types))
    _unfilter_rows(data, types, out, 0, lo, bpp)
    if hard.size:
        prev = out[lo - 1] if lo else np.zeros(data.shape[1], np.uint8)
        out[lo:hi] = _unfilter_wavefront(data[lo:hi], types[lo:hi], prev, bpp)
    _unfilter_rows(data, types, out, hi, len(types), bpp)
    return out


def _unfilter_rows(data, types, out, lo, hi, bpp):
    """None, Sub and Up rows, one vectorised row at a time."""
    prev = out[lo - 1] if lo else np.zeros(data.shape[1], np.uint8)
    for i in range(lo, hi):
        if types[i] == 0:
            out[i] = data[i]
        elif types[i] == 1:                       # Sub: running sum per byte lane, mod 256
            out[i] = np.cumsum(data[i].reshape(-1, bpp), axis=0, dtype=np.uint8).reshape(-1)
        else:                                     # Up
            out[i] = data[i] + prev
        prev = out[i]


def _unfilter_wavefront(data: np.ndarray, types: np.ndarray, prev: np.ndarray, bpp: int) -> np.ndarray:
    """Pixel (r, c) needs (r, c-1), (r-1, c) and (r-1, c-1), so all pixels with equal r + c
    are independent: each anti-diagonal is one vectorised step. Bands of rows bound the
    memory of the diagonal-major copies."""
    m, cols = len(data), data.shape[1] // bpp
    band = int((-cols + (cols * cols + 4 * _WAVEFRONT_ELEMENTS / bpp) ** 0.5) / 2)
    band = max(1, min(m, band))
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
    """(h, n) unfiltered bytes -> (h, width, channels) samples (uint16 for 16-bit)."""
    h = data.shape[0]
    if depth == 8:
        return data.reshape(h, width, channels)
    if depth == 16:
        pairs = data.reshape(h, width * channels, 2).astype(np.uint16)
        return ((pairs[..., 0] << 8) | pairs[..., 1]).reshape(h, width, channels)
    bits = np.unpackbits(data, axis=1)[:, : width * depth].reshape(h, width, depth)
    return (bits @ (1 << np.arange(depth - 1, -1, -1))).astype(np.uint8)[..., None]


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

def _decode_npy(f) -> np.ndarray:
    """uint8 as is; bool as 0/255; other integers in 0..255; floats in [0, 1] scaled by 255."""
    try:
        arr = np.load(f, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise _Bad(f"cannot read .npy ({e})") from None
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or not 1 <= arr.shape[2] <= 4:
        raise _Bad(f".npy array of shape {arr.shape} is not (H, W) or (H, W, C) with C in 1..4")
    if arr.dtype == np.uint8:
        return arr
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
    try:
        with _no_bomb_warning(Image), Image.open(f) as im:    # lazy: pixels are decoded by load()
            _check_size(*im.size, max_pixels)
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
