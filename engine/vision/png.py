"""PNG decoding in NumPy (spec: https://www.w3.org/TR/png-3/), for engine/vision/image.py's
read_image: chunks with their CRCs, zlib inflated to exactly the size the header implies, the
five row filters undone (None/Sub/Up a NumPy call per long row or per chunk of short ones,
Average/Paeth one anti-diagonal at a time), Adam7 interlacing, 1- to 16-bit samples, palettes and
tRNS transparency, to uint8 (H, W, C) in read_image's convention.

The work of undoing Average and Paeth filters is bounded (the constants below): a zlib bomb is
refused, and so is a legal image that would take more than about 2 s here (TooSlow; read_image
then hands it to Pillow natively when it is installed).
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

__all__ = ["BadImage", "TooSlow", "check_size", "decode_png", "worst_work", "SIGNATURE", "CHANNELS",
           "WAVEFRONT_MAX", "WAVEFRONT_PER_BYTE"]

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}          # colour type -> samples per pixel
_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),   # (x0, y0, dx, dy)
          (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
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
WAVEFRONT_PER_BYTE = 256
_WAVEFRONT_FLOOR = 1 << 25
# Whatever the data's size, this work is at most WAVEFRONT_MAX: measured at about 32 ns a unit here,
# that is about 2 s, and takes a 12-megapixel RGB image (4000 x 3000) all in Paeth (work 45 million),
# fewer pixels in a very wide image, whose narrow bands take a step per column each. Beyond it Pillow
# decodes the file natively when it is installed; otherwise it is refused (read_image's docstring).
WAVEFRONT_MAX = 60_000_000


class BadImage(Exception):
    """A one-line reason the bytes are no readable image; the public functions add the name."""


class TooSlow(BadImage):
    """A legal PNG whose filters would take longer than WAVEFRONT_MAX to undo here."""


def check_size(width: int, height: int, max_pixels: int) -> None:
    if width <= 0 or height <= 0:
        raise BadImage(f"image has zero size ({width}x{height})")
    if width * height > max_pixels:
        raise BadImage(f"image is {width}x{height} = {width * height} pixels, "
                   f"more than max_pixels={max_pixels}")


def _png_chunks(data: bytes):
    """Yield (type, body) per chunk up to IEND, checking lengths and CRCs."""
    view, pos = memoryview(data), 8
    while True:
        if pos + 12 > len(data):
            raise BadImage("truncated PNG (ends before the IEND chunk)")
        length, kind = struct.unpack_from(">I4s", data, pos)
        end = pos + 12 + length
        label = kind.decode("latin-1")
        if end > len(data):
            raise BadImage(f"truncated PNG ({label} chunk of {length} bytes runs past the end of the file)")
        if zlib.crc32(view[pos + 4 : end - 4]) != struct.unpack_from(">I", data, end - 4)[0]:
            raise BadImage(f"bad CRC in PNG {label} chunk at byte {pos}")
        yield kind, view[pos + 8 : end - 4]
        if kind == b"IEND":
            return
        pos = end


def decode_png(data: bytes, max_pixels: int) -> np.ndarray:
    if not data.startswith(SIGNATURE):
        raise BadImage("not a PNG (bad signature)")
    header, palette, transparency, idat = None, None, None, []
    for kind, body in _png_chunks(data):
        if header is None:
            if kind != b"IHDR" or len(body) != 13:
                raise BadImage("corrupt PNG (first chunk is not a 13-byte IHDR)")
            header = struct.unpack(">IIBBBBB", body)
            width, height, depth, colour, compression, filtering, interlace = header
            check_size(width, height, max_pixels)       # before anything is inflated
            if depth not in _DEPTHS.get(colour, ()):
                raise BadImage(f"invalid PNG colour type {colour} with bit depth {depth}")
            if compression or filtering or interlace > 1:
                raise BadImage("unknown PNG compression, filter or interlace method")
        elif kind == b"PLTE":
            palette = bytes(body)
        elif kind == b"tRNS":
            transparency = bytes(body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind != b"IEND" and not kind[0] & 0x20:     # lowercase first letter: ancillary
            raise BadImage(f"unknown critical PNG chunk {kind.decode('latin-1')}")
    if not idat:
        raise BadImage("PNG has no image data (IDAT)")

    channels = CHANNELS[colour]
    passes = _ADAM7 if interlace else ((0, 0, 1, 1),)
    shapes = [(-(-(height - y0) // dy), -(-(width - x0) // dx)) for x0, y0, dx, dy in passes]
    row_bytes = [(w * channels * depth + 7) // 8 for _, w in shapes]
    expected = sum(h * (1 + n) for (h, w), n in zip(shapes, row_bytes) if h and w)
    compressed = sum(len(chunk) for chunk in idat)
    bytes_per_pixel = max(1, channels * depth // 8)      # filter unit; 1 for sub-byte depths
    budget = max(_WAVEFRONT_FLOOR, WAVEFRONT_PER_BYTE * compressed)
    watch = None
    if not interlace:                                    # refuse slow filters as their rows arrive
        seen = [0, None]                                 # rows looked at, the first Average/Paeth row

        def watch(out, size):
            n, done = row_bytes[0], size // (row_bytes[0] + 1)
            if done <= seen[0]:
                return
            types = out[seen[0] * (n + 1) : done * (n + 1) : n + 1]
            hard = (types == 3) | ((types == 4) & (n > bytes_per_pixel))      # as _unfilter counts them
            if seen[0] == 0 and types[0] == 4:
                hard[0] = False
            rows = np.flatnonzero(hard) + seen[0]
            if rows.size:
                seen[1] = rows[0] if seen[1] is None else seen[1]
                _check_work(_wavefront_work(rows[-1] + 1 - seen[1], n, bytes_per_pixel), budget, compressed,
                            width, height)
            seen[0] = done
    raw = _inflate(idat, expected, watch)

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


def worst_work(data: bytes) -> int:
    """The wavefront's work were every row of the PNG filtered with Paeth (0 for a bad header)."""
    if len(data) < 26:
        return 0
    width, height, depth, colour = struct.unpack_from(">IIBB", data, 16)
    bpp = max(1, CHANNELS.get(colour, 1) * depth // 8)
    n = (width * CHANNELS.get(colour, 1) * depth + 7) // 8
    return _wavefront_work(height, max(n, bpp), bpp) if height else 0


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
        raise BadImage(f"PNG image data of {compressed} bytes declares {width}x{height} pixels whose Average/"
                   f"Paeth filters would take too long to undo here (work {work}, at most {budget} for "
                   f"data of this size: a zlib bomb?)")
    if work > WAVEFRONT_MAX:
        raise TooSlow(f"PNG of {width}x{height} pixels whose Average/Paeth filters would take too long to undo "
                       f"here (work {work}, at most {WAVEFRONT_MAX}: about 2 s); natively, installing Pillow "
                       f"decodes it")
    return work


def _wavefront_work(m: int, n: int, bpp: int) -> int:
    """The wavefront's work on m rows of n bytes (the module's constants say what a unit costs)."""
    band = _band_rows(m, n // bpp, bpp)
    steps = -(-m // band) * (band + n // bpp + 1)
    return m * n + steps * _WAVEFRONT_STEP_BYTES


def _inflate(chunks, expected: int, watch=None) -> np.ndarray:
    """Inflate IDAT bodies to exactly `expected` bytes, into one writable array, a few MB at a
    time, calling watch(out, size) after each; never produce more than expected + 1."""
    stream, out = zlib.decompressobj(), np.empty(expected, np.uint8)
    size = 0

    def take(data) -> bytes:
        """Inflate from `data` at most a few MB into `out`; what of `data` is left over."""
        nonlocal size
        piece = stream.decompress(data, min(_EASY_ROWS_BYTES, expected - size + 1))
        if size + len(piece) > expected:
            raise BadImage(f"PNG image data inflates to more than the {expected} bytes the header implies")
        out[size:size + len(piece)] = np.frombuffer(piece, np.uint8)
        size += len(piece)
        if watch is not None and piece:
            watch(out, size)
        return stream.unconsumed_tail if not stream.eof else b""

    # input a MB at a time: an output-bound call keeps the rest of its input as a new bytes object
    # (unconsumed_tail), which for a whole 100 MB chunk would be copied again at every step
    slices = (memoryview(chunk)[i:i + (1 << 20)] for chunk in chunks for i in range(0, len(chunk), 1 << 20))
    try:
        for data in slices:
            while data:
                data = take(data)
            if stream.eof:
                break
        while not stream.eof and size <= expected:          # output still held back with no input left
            before = size
            take(b"")
            if size == before:
                break
    except zlib.error as e:
        raise BadImage(f"corrupt PNG image data (zlib: {e})") from None
    if size < expected:
        raise BadImage(f"PNG image data too short ({size} of {expected} bytes)")
    return out


def _unfilter(rows: np.ndarray, bpp: int, budget: int) -> int:
    """Undo per-row filters in place: rows (h, 1 + n) with the filter type first; afterwards
    rows[:, 1:] holds the bytes. Returns the wavefront's work; past a `budget` (or
    WAVEFRONT_MAX) of work it stops, unfinished, and says how much it needed."""
    types, data = rows[:, 0].copy(), rows[:, 1:]
    if types.size and types.max() > 4:
        raise BadImage(f"corrupt PNG (unknown filter type {int(types.max())})")
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
        work = _wavefront_work(hi - lo, data.shape[1], bpp)
        if work > min(budget, WAVEFRONT_MAX):
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
            raise BadImage("palette PNG without a valid PLTE chunk")
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
