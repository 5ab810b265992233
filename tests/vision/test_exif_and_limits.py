"""EXIF orientation (our parser against Pillow's ImageOps.exif_transpose) and the image reader's
limits: truncated, zero-size and huge-header images, and a legal but huge PNG."""
from __future__ import annotations

import io
import struct
import tracemalloc
import zlib

import numpy as np
import pytest
from PIL import Image, ImageOps

import engine.vision.image as image_module
from engine.errors import InputError
from engine.vision import read_image
from engine.vision.exif import apply_orientation, exif_orientation
from tests.vision.test_image import chunk, ihdr, png_from_idat

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_every_orientation_as_pillow_shows_it(fmt, orientation):
    rng = np.random.default_rng(orientation)
    im = Image.fromarray(rng.integers(0, 256, (24, 40, 3), dtype=np.uint8))
    buf = io.BytesIO()
    im.save(buf, fmt, exif=_exif(orientation))
    data = buf.getvalue()
    assert exif_orientation(data) == orientation
    with Image.open(io.BytesIO(data)) as ref:
        expected = np.asarray(ImageOps.exif_transpose(ref).convert("RGB"))
    got = read_image(data)
    assert got.shape == expected.shape == ((40, 24, 3) if orientation >= 5 else (24, 40, 3))
    np.testing.assert_array_equal(got, expected)


def test_png_orientation_without_pillow(monkeypatch):
    monkeypatch.setattr(image_module, "_pillow", lambda: None)
    samples = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    rows = b"".join(b"\0" + row.tobytes() for row in samples)
    data = png_from_idat(ihdr(3, 2, colour=2), zlib.compress(rows), extra=chunk(b"eXIf", _exif(6)[6:]))   # eXIf holds the TIFF data alone
    np.testing.assert_array_equal(read_image(data), np.rot90(samples, -1))      # 90 degrees clockwise


def test_apply_orientation_is_the_dihedral_group():
    x = np.arange(12).reshape(3, 4)
    assert (apply_orientation(x, 6) == np.rot90(x, -1)).all()
    assert (apply_orientation(x, 8) == np.rot90(x, 1)).all()
    assert (apply_orientation(x, 3) == np.rot90(x, 2)).all()
    assert (apply_orientation(x, 5) == x.T).all()
    assert (apply_orientation(x, 7) == np.rot90(x, 2).T).all()
    assert apply_orientation(x, 1) is x and apply_orientation(x, 0) is x and apply_orientation(x, 9) is x


def _jpeg_with_app1(body: bytes) -> bytes:
    return b"\xff\xd8" + b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body + b"\xff\xd9"


def _tiff(entries: list[tuple[int, int, int, int]], order: str = "<", ifd: int = 8, count=None) -> bytes:
    head = (b"II*\x00" if order == "<" else b"MM\x00*") + struct.pack(order + "I", ifd)
    n = len(entries) if count is None else count
    body = struct.pack(order + "H", n) + b"".join(struct.pack(order + "HHII", *e) for e in entries)
    return head + b"\0" * (ifd - 8) + body


@pytest.mark.parametrize("body, expected", [
    (b"Exif\0\0" + _tiff([(0x0112, 3, 1, 6)]), 6),
    (b"Exif\0\0" + _tiff([(0x0112, 3, 1, 6 << 16)], order=">"), 6),            # big-endian SHORT
    (b"Exif\0\0" + _tiff([(0x0100, 4, 1, 640), (0x0112, 3, 1, 8)]), 8),
    (b"Exif\0\0" + _tiff([(0x0112, 3, 1, 9)]), 1),                                # out of range
    (b"Exif\0\0" + _tiff([(0x0112, 2, 1, 6)]), 1),                                # ASCII, not a number
    (b"Exif\0\0" + b"II*\x00" + struct.pack("<I", 1 << 30) + _tiff([(0x0112, 3, 1, 6)])[8:], 1),  # IFD past the end
    (b"Exif\0\0" + _tiff([(0x0112, 3, 1, 6)], count=65535), 6),                   # count beyond the data
    (b"Exif\0\0" + _tiff([], count=65535), 1),
    (b"Exif\0\0" + b"II*\x00", 1),                                                # truncated header
    (b"Exif\0\0" + b"XX*\x00" + bytes(20), 1),
    (b"Exif\0", 1),
], ids=["little", "big", "second-entry", "range", "type", "ifd-offset", "count", "empty-count", "short",
        "order", "no-tiff"])
def test_exif_parser_is_bounds_checked(body, expected):
    assert exif_orientation(_jpeg_with_app1(body)) == expected


def test_exif_parser_survives_every_truncation_and_stray_bytes():
    data = _jpeg_with_app1(b"Exif\0\0" + _tiff([(0x0100, 4, 1, 640), (0x0112, 3, 1, 3)]))
    for end in range(len(data)):
        assert exif_orientation(data[:end]) in (1, 3)
    rng = np.random.default_rng(0)
    for _ in range(300):
        junk = bytearray(data)
        junk[rng.integers(2, len(junk))] = rng.integers(0, 256)
        assert 1 <= exif_orientation(bytes(junk)) <= 8
    assert exif_orientation(b"\xff\xd8" + b"\xff" * 100_000) == 1
    assert exif_orientation(b"") == exif_orientation(b"GIF89a") == 1


# --- the reader's limits -------------------------------------------------------------------------
def test_truncated_image_is_one_line():
    rows = b"".join(b"\0" + bytes(30) for _ in range(10))
    data = png_from_idat(ihdr(10, 10, colour=2), zlib.compress(rows))
    for end in (20, 40, len(data) - 20):
        with pytest.raises(InputError, match=r"^<bytes>: (truncated|corrupt)") as info:
            read_image(data[:end])
        assert "\n" not in str(info.value)


def test_zero_size_image_is_refused():
    with pytest.raises(InputError, match=r"zero size \(0x5\)"):
        read_image(png_from_idat(ihdr(0, 5), zlib.compress(b"")))


def test_a_20000_by_20000_header_is_refused_before_allocating():
    data = png_from_idat(ihdr(20000, 20000, colour=2), zlib.compress(b"\0" * 100))
    tracemalloc.start()
    with pytest.raises(InputError, match=r"20000x20000 = 400000000 pixels, more than max_pixels=64000000"):
        read_image(data)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20


def _wide_png(filter_type: int) -> tuple[bytes, np.ndarray | None]:
    """A 64000 x 1000 RGB PNG, every row in one filter: for Sub a photo-like image (a gradient
    with noise, returned too), for Paeth noise as the filtered bytes (what it decodes to is
    Pillow's business; the limit depends only on the size and the filters). uint8 throughout:
    the image alone is 192 MB."""
    rng = np.random.default_rng(0)
    h, w = 1000, 64000
    if filter_type == 4:
        filtered, img = np.frombuffer(rng.bytes(h * w * 3), np.uint8).reshape(h, w * 3), None
    else:
        x = np.linspace(0, 180, w).astype(np.uint8)[None, :, None]
        y = np.linspace(0, 60, h).astype(np.uint8)[:, None, None]
        img = x + y + (np.frombuffer(rng.bytes(h * w * 3), np.uint8).reshape(h, w, 3) & 15)
        flat = img.reshape(h, w * 3)
        filtered = flat.copy()
        filtered[:, 3:] -= flat[:, :-3]                        # Sub: minus the pixel on the left, mod 256
    rows = np.concatenate([np.full((h, 1), filter_type, np.uint8), filtered], 1)
    level = 0 if filter_type == 4 else 1                          # noise: stored, not compressed
    return png_from_idat(ihdr(w, h, colour=2), zlib.compress(rows.tobytes(), level)), img


@pytest.mark.slow                   # a 192 MB image is made and encoded first
def test_a_64000_by_1000_png_decodes_with_our_decoder(monkeypatch):
    # Its time is a measurement, not an assertion (docs/robustness.md: 1.5-1.7 s of CPU here,
    # Pillow 1.2-1.3 s); what bounds it is the work limit, which counts rows, not seconds
    data, img = _wide_png(1)
    monkeypatch.setattr(image_module, "_pillow", lambda: None)       # our decoder, as in the browser
    np.testing.assert_array_equal(read_image(data), img)


@pytest.mark.slow                   # a 192 MB image is made and encoded first
def test_a_64000_by_1000_paeth_png_is_refused_by_the_work_limit_or_given_to_pillow(monkeypatch):
    data, _ = _wide_png(4)
    with Image.open(io.BytesIO(data)) as ref:
        np.testing.assert_array_equal(read_image(data), np.asarray(ref))     # natively Pillow decodes it
    monkeypatch.setattr(image_module, "_pillow", lambda: None)
    with pytest.raises(InputError, match=r"64000x1000 pixels whose Average/Paeth filters would take too long "
                                         r"to undo here \(work \d+, at most 60000000: about 2 s\)"):
        read_image(data)


@pytest.mark.slow                   # a 36 MB image is made and encoded first
def test_a_12_megapixel_paeth_photo_still_decodes(monkeypatch):
    monkeypatch.setattr(image_module, "_pillow", lambda: None)
    rng = np.random.default_rng(1)
    h, w = 3000, 4000
    rows = np.concatenate([np.full((h, 1), 4, np.uint8), rng.integers(0, 4, (h, w * 3), dtype=np.uint8)], 1)
    got = read_image(png_from_idat(ihdr(w, h, colour=2), zlib.compress(rows.tobytes(), 1)))
    assert got.shape == (h, w, 3)          # under the work limit: decoded, not refused
