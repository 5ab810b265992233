"""Reading images into NumPy arrays without Pillow.

PNG is decoded in NumPy (engine/vision/png.py), `.npy` here; other
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

import numpy as np

from ..errors import InputError
from ..untrusted import shown
from .exif import apply_orientation, exif_orientation
from .png import (SIGNATURE, WAVEFRONT_MAX, WAVEFRONT_PER_BYTE, BadImage, check_size,
                  decode_png, worst_work)

__all__ = ["read_image", "image_size", "from_pillow", "to_float", "to_grayscale"]

# JPEG start-of-frame markers; C4 (DHT), C8 (JPG) and CC (DAC) share the range but are not frames.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_MAX_STEPS = 1 << 16               # markers (and fill bytes) looked at before the frame header


# --- public API --------------------------------------------------------------------------

def read_image(source, *, max_pixels: int = 64_000_000) -> np.ndarray:
    """Decode a PNG, .npy or (natively, with Pillow) any other image to uint8 (H, W, C).

    `source` is a path or the file's bytes. The size is checked from the header before
    anything is decoded: zero-sized images, and images of more than `max_pixels` pixels
    (64,000,000 by default, 192 MB as RGB; Pillow's MAX_IMAGE_PIXELS, 89,478,485, plays the
    same part) are refused without allocating them.

    PNG rows filtered with Average or Paeth depend on their left neighbour, so NumPy undoes them
    one anti-diagonal at a time. That work is bounded: at most 256 units per byte of compressed
    data (a zlib bomb is refused), and at most about 2 s (WAVEFRONT_MAX: a 4000 x 3000 RGB
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
            check_size(width, height, max_pixels)
            f.seek(0)
            if fmt == "PNG":
                data = f.read()
                worst = worst_work(data)     # a file that is no zlib bomb but may be slow here
                if _pillow() is not None and WAVEFRONT_MAX < worst <= WAVEFRONT_PER_BYTE * len(data):
                    return _decode_with_pillow(io.BytesIO(data), fmt, max_pixels)
                return apply_orientation(decode_png(data, max_pixels), exif_orientation(data))
            if fmt == "NPY":
                return _decode_npy(f)
            return _decode_with_pillow(f, fmt, max_pixels)
        except BadImage as e:
            raise InputError(f"{name}: {e}") from None


def image_size(source) -> tuple[int, int, str]:
    """(width, height, format) read from the header only; format is Pillow's name ("PNG",
    "JPEG", "GIF", "BMP", "WEBP") or "NPY". JPEG sizes are as stored, before EXIF rotation."""
    name = _name(source)
    with _opened(source, name) as f:
        try:
            return _header(f)
        except BadImage as e:
            raise InputError(f"{name}: {e}") from None


def as_image(item) -> np.ndarray:
    """What the image pipelines accept: a path, the bytes of a file, a PIL image or a NumPy
    array -> a NumPy image array (read_image's, from_pillow's, or the array itself)."""
    if isinstance(item, (str, os.PathLike, bytes, bytearray, memoryview)):
        return read_image(item)
    if hasattr(item, "mode") and hasattr(item, "size") and hasattr(item, "convert"):   # a PIL image
        return from_pillow(item)
    if isinstance(item, np.ndarray):
        return item
    raise InputError(f"expected an image path, bytes, a PIL image or a NumPy array, got {type(item).__name__}")


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


def _header(f) -> tuple[int, int, str]:
    head = f.read(32)
    if not head:
        raise BadImage("empty file")
    if head.startswith(SIGNATURE):
        if len(head) < 24 or head[12:16] != b"IHDR":
            raise BadImage("truncated or corrupt PNG header (no IHDR chunk)")
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
        raise BadImage("not a recognised image (PNG, JPEG, GIF, BMP, WebP or .npy)")
    f.seek(0)
    Image = _pillow()[0]
    try:
        with _no_bomb_warning(Image), Image.open(f) as im:     # lazy: reads the header only
            return im.size[0], im.size[1], im.format
    except Image.DecompressionBombError as e:       # over 2 * MAX_IMAGE_PIXELS, refused by Pillow
        raise BadImage(f"image too large ({e})") from None
    except Exception:                        # Pillow raises many types for "not an image"
        raise BadImage("not a recognised image format") from None


def _read(f, n: int, what: str) -> bytes:
    data = f.read(n)
    if len(data) < n:
        raise BadImage(f"truncated {what}")
    return data


def _jpeg_size(f) -> tuple[int, int]:
    """Walk the marker segments up to the first start-of-frame; never reads scan data. Files have
    a few dozen markers before it; one of nothing but markers or fill bytes is refused after
    _JPEG_MAX_STEPS of them rather than walked byte by byte to its end."""
    f.seek(2)
    for _ in range(_JPEG_MAX_STEPS):
        marker, code = _read(f, 2, "JPEG (no frame header)")
        if marker != 0xFF:
            raise BadImage(f"corrupt JPEG (no marker at byte {f.tell() - 2})")
        if code == 0xFF:                     # fill bytes may precede a marker
            fill = f.read(_JPEG_MAX_STEPS)
            rest = fill.lstrip(b"\xff")
            if not rest:
                raise BadImage("truncated JPEG (no frame header)" if len(fill) < _JPEG_MAX_STEPS
                           else "corrupt JPEG (a run of fill bytes with no marker)")
            f.seek(1 - len(rest), 1)         # just past the marker's code
            code = rest[0]
        if code in (0x01, 0xD8) or 0xD0 <= code <= 0xD7:   # markers without a length
            continue
        if code in (0xD9, 0xDA):
            raise BadImage("corrupt JPEG (no frame header before the image data)")
        (length,) = struct.unpack(">H", _read(f, 2, "JPEG (no frame header)"))
        if code in _JPEG_SOF:
            _, height, width = struct.unpack(">BHH", _read(f, 5, "JPEG frame header"))
            return width, height
        if length < 2:
            raise BadImage("corrupt JPEG (segment length < 2)")
        f.seek(length - 2, 1)
    raise BadImage(f"corrupt JPEG (no frame header in its first {_JPEG_MAX_STEPS} markers)")


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
    raise BadImage("corrupt WebP header")


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
        raise BadImage(f"unsupported .npy version {'.'.join(map(str, version)) or '(none)'}")
    size = _NPY_VERSIONS[version]
    if len(prefix) < 8 + size:
        raise BadImage("truncated .npy header")
    length = int.from_bytes(prefix[8:8 + size], "little")
    if length > _NPY_MAX_HEADER:
        raise BadImage(f".npy header length {length} is over {_NPY_MAX_HEADER} bytes")
    f.seek(8 + size)
    raw = f.read(length)
    if len(raw) < length:
        raise BadImage("truncated .npy header")
    text = raw.decode("utf-8" if version == (3, 0) else "latin-1", "replace").strip()
    inner = text[1:-1] if text[:1] == "{" and text[-1:] == "}" else ""
    entries, pos = {}, 0
    while (match := _NPY_ENTRY.match(inner, pos)) is not None:      # 'key': value, ...
        entries[match[1]] = match[2]
        pos = match.end() + inner.startswith(",", match.end())
    if inner[pos:].strip() or entries.keys() != {"descr", "fortran_order", "shape"}:
        raise BadImage("corrupt .npy header (expected {'descr': ..., 'fortran_order': ..., 'shape': (...)})")
    descr = entries["descr"][1:-1]
    if _NPY_DTYPE.fullmatch(descr) is None:
        raise BadImage(f".npy dtype {shown(descr)} is not bool, an integer or a float")
    if entries["fortran_order"] not in ("True", "False"):
        raise BadImage(f"corrupt .npy header (fortran_order {shown(entries['fortran_order'])})")
    dims = [d.strip().rstrip("L") for d in entries["shape"][1:-1].split(",")]
    if dims and dims[-1] == "":
        dims.pop()                                   # "(3,)"
    if not all(d.isascii() and d.isdigit() and len(d) <= 18 for d in dims):
        raise BadImage(f"corrupt .npy shape {shown(entries['shape'])}")
    shape = tuple(int(d) for d in dims)
    if len(shape) not in (2, 3):
        raise BadImage(f".npy array of shape {shape} is not an (H, W) or (H, W, C) image")
    return shape, np.dtype(descr), entries["fortran_order"] == "True", 8 + size + length


def _decode_npy(f) -> np.ndarray:
    """uint8 as is; bool as 0/255; other integers in 0..255; floats in [0, 1] scaled by 255."""
    shape, dtype, fortran, offset = _npy_header(f)
    if len(shape) == 3 and not 1 <= shape[2] <= 4:
        raise BadImage(f".npy array of shape {shape} is not (H, W) or (H, W, C) with C in 1..4")
    count = math.prod(shape)
    available = f.seek(0, io.SEEK_END) - offset
    if count * dtype.itemsize > available:           # before reading: read(n) allocates n bytes
        raise BadImage(f".npy data truncated: shape {shape} of {dtype} needs {count * dtype.itemsize} bytes, "
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
    raise BadImage(f".npy dtype {arr.dtype} is not uint8, bool, integers in 0..255 or floats in [0, 1]")


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
        raise BadImage(f"{fmt} images need Pillow when running natively (pip install pillow); "
                   "in the browser the page decodes them")
    Image, ImageOps = _pillow()
    data = f.read()
    try:
        with _no_bomb_warning(Image), Image.open(io.BytesIO(data)) as im:    # lazy: load() decodes
            check_size(*im.size, max_pixels)
            if fmt in ("JPEG", "PNG"):                 # EXIF orientation read here (engine/vision/exif.py)
                return apply_orientation(from_pillow(im), exif_orientation(data))
            return from_pillow(ImageOps.exif_transpose(im))
    except BadImage:
        raise
    except Exception as e:                         # Pillow's decoders raise many types
        raise BadImage(f"cannot decode {fmt} ({type(e).__name__}: {e})") from None


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
