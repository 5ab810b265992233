"""engine.vision.image against Pillow (the reference decoder) and hand-made PNGs.

Pillow cannot write interlaced, 2/4-bit gray or 16-bit colour PNGs, so `encode_png` below
writes them: every filter type in turn, row by row, and Adam7 when asked.
"""
import io
import struct
import sys
import time
import tracemalloc
import zlib

import numpy as np
import pytest
from PIL import Image, ImageOps

from engine.errors import InputError
from engine.vision import from_pillow, image_size, read_image, to_float, to_grayscale

SIGNATURE = b"\x89PNG\r\n\x1a\n"
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
COMBOS = [(0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (2, 8), (2, 16), (3, 1), (3, 2), (3, 4), (3, 8),
          (4, 8), (4, 16), (6, 8), (6, 16)]
PILLOW_MODE = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def ihdr(width, height, depth=8, colour=0, interlace=0) -> bytes:
    return chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, interlace))


def png_from_idat(header: bytes, idat: bytes, extra: bytes = b"") -> bytes:
    return SIGNATURE + header + extra + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def _scanlines(samples: np.ndarray, depth: int, filters) -> bytes:
    h, w, ch = samples.shape
    if depth == 16:
        rows = samples.astype(">u2").view(np.uint8).reshape(h, w * ch * 2)
    elif depth == 8:
        rows = samples.astype(np.uint8).reshape(h, w * ch)
    else:
        bits = (samples[..., :1] >> np.arange(depth - 1, -1, -1)) & 1
        rows = np.packbits(bits.astype(np.uint8).reshape(h, w * depth), axis=1)
    bpp = max(1, ch * depth // 8)
    out, up = [], np.zeros(rows.shape[1], np.int32)
    for r, row in enumerate(rows.astype(np.int32)):
        kind = filters[r % len(filters)]
        left = np.concatenate([np.zeros(bpp, np.int32), row[:-bpp]])
        upleft = np.concatenate([np.zeros(bpp, np.int32), up[:-bpp]])
        pa, pb, pc = np.abs(up - upleft), np.abs(left - upleft), np.abs(left + up - 2 * upleft)
        paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, upleft))
        predicted = [0, left, up, (left + up) // 2, paeth][kind]
        out.append(bytes([kind]) + ((row - predicted) % 256).astype(np.uint8).tobytes())
        up = row
    return b"".join(out)


def encode_png(samples, colour, depth, *, palette=None, trns=None, interlace=False,
               idat_size=None, filters=(0, 1, 2, 3, 4)) -> bytes:
    """samples (H, W, C) at the file's bit depth -> PNG bytes."""
    h, w, _ = samples.shape
    passes = ADAM7 if interlace else ((0, 0, 1, 1),)
    raw = b"".join(_scanlines(samples[y0::dy, x0::dx], depth, filters)
                   for x0, y0, dx, dy in passes if samples[y0::dy, x0::dx].size)
    data = zlib.compress(raw)
    idat_size = idat_size or len(data)
    body = ihdr(w, h, depth, colour, int(interlace))
    if palette is not None:
        body += chunk(b"PLTE", palette)
    if trns is not None:
        body += chunk(b"tRNS", trns)
    body += b"".join(chunk(b"IDAT", data[i : i + idat_size]) for i in range(0, len(data), idat_size))
    return SIGNATURE + body + chunk(b"IEND", b"")


def expected_pixels(samples, colour, depth, palette=None, trns=None):
    """What read_image should return, computed from the samples directly."""
    if colour == 3:
        lut = np.zeros((256, 4), np.uint8)
        lut[:, 3] = 255
        lut[: len(palette) // 3, :3] = np.frombuffer(palette, np.uint8).reshape(-1, 3)
        if trns is None:
            return lut[samples[..., 0], :3]
        lut[: len(trns), 3] = np.frombuffer(trns, np.uint8)
        return lut[samples[..., 0]]
    scaled = samples >> 8 if depth == 16 else samples * (255 // ((1 << depth) - 1))
    scaled = scaled.astype(np.uint8)
    if trns is None:
        return scaled
    key = np.frombuffer(trns, ">u2")
    alpha = np.where((samples == key).all(axis=2, keepdims=True), 0, 255).astype(np.uint8)
    return np.concatenate([scaled, alpha], axis=2)


def random_case(rng, colour, depth, height=13, width=9):
    samples = rng.integers(0, 1 << depth, (height, width, CHANNELS[colour]))
    palette = None
    if colour == 3:
        palette = rng.integers(0, 256, 3 * min(1 << depth, 200), dtype=np.uint8).tobytes()
        samples %= len(palette) // 3
    return samples, palette


# --- PNG: every colour type x bit depth -----------------------------------------------

@pytest.mark.parametrize("interlace", [False, True], ids=["plain", "adam7"])
@pytest.mark.parametrize("colour,depth", COMBOS)
def test_png_colour_types_and_depths(tmp_path, colour, depth, interlace):
    rng = np.random.default_rng(colour * 100 + depth)
    for height, width in [(13, 9), (1, 1), (2, 3), (8, 17)]:
        samples, palette = random_case(rng, colour, depth, height, width)
        path = tmp_path / f"c{colour}d{depth}_{height}x{width}.png"
        path.write_bytes(encode_png(samples, colour, depth, palette=palette, interlace=interlace))
        got = read_image(path)
        want = expected_pixels(samples, colour, depth, palette)
        assert got.dtype == np.uint8 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        with Image.open(path) as im:     # Pillow keeps 16-bit gray as I;16, the rest in 8 bits
            sixteen = im.mode.startswith("I;16")
            ref = np.asarray(im) >> 8 if sixteen else np.asarray(im.convert(PILLOW_MODE[got.shape[2]]))
        np.testing.assert_array_equal(got, ref.reshape(got.shape))


@pytest.mark.parametrize("mode,options", [("1", {}), ("L", {}), ("LA", {}), ("RGB", {}), ("RGBA", {}),
                                          ("I;16", {}), ("P", {"bits": 1}), ("P", {"bits": 2}),
                                          ("P", {"bits": 4}), ("P", {})])
def test_png_written_by_pillow(tmp_path, mode, options):
    rng = np.random.default_rng(7)
    height, width = 61, 97
    # a smooth image makes Pillow's encoder mix all filter types
    smooth = np.cumsum(rng.integers(-3, 4, (height, width, 4)), axis=1) % 256
    if mode == "P":
        colours = 1 << options.get("bits", 8)
        im = Image.fromarray((smooth[..., 0] % colours).astype(np.uint8), "P")
        im.putpalette(rng.integers(0, 256, 768, dtype=np.uint8).tobytes())
    elif mode == "I;16":
        im = Image.fromarray((smooth[..., 0] * 257).astype(np.uint16))
    else:
        bands = smooth[..., : 1 if mode == "1" else len(mode)].astype(np.uint8)
        im = Image.fromarray(bands.squeeze(axis=2) if bands.shape[2] == 1 else bands).convert(mode)
    path = tmp_path / f"{mode.replace(';', '')}.png"
    im.save(path, **options)
    got = read_image(path)
    with Image.open(path) as ref:
        if ref.mode.startswith("I;16"):
            want = np.asarray(ref) >> 8
        else:
            want = np.asarray(ref.convert({"1": "L", "P": "RGB"}.get(ref.mode, ref.mode)))
    np.testing.assert_array_equal(got, want.reshape(got.shape))


def test_palette_with_trns_matches_pillow(tmp_path):
    rng = np.random.default_rng(3)
    im = Image.fromarray(rng.integers(0, 16, (20, 30), dtype=np.uint8), "P")
    im.putpalette(rng.integers(0, 256, 48, dtype=np.uint8).tobytes())
    path = tmp_path / "trns.png"
    im.save(path, transparency=bytes(range(0, 160, 20)))      # alpha for the first 8 entries only
    got = read_image(path)
    assert got.shape == (20, 30, 4)
    with Image.open(path) as ref:
        np.testing.assert_array_equal(got, np.asarray(ref.convert("RGBA")))


@pytest.mark.parametrize("colour,depth", [(0, 2), (0, 8), (0, 16), (2, 8), (2, 16)])
def test_trns_colour_key(tmp_path, colour, depth):
    rng = np.random.default_rng(depth)
    samples, _ = random_case(rng, colour, depth, 16, 16)
    key = samples[3, 4]
    trns = struct.pack(f">{len(key)}H", *key)
    data = encode_png(samples, colour, depth, trns=trns, interlace=depth == 8)
    got = read_image(data)
    assert got.shape[2] == CHANNELS[colour] + 1 and got[3, 4, -1] == 0
    np.testing.assert_array_equal(got, expected_pixels(samples, colour, depth, trns=trns))
    if depth == 8:
        with Image.open(io.BytesIO(data)) as ref:
            np.testing.assert_array_equal(got, np.asarray(ref.convert(PILLOW_MODE[got.shape[2]])))


def test_many_idat_chunks_and_single_filters():
    rng = np.random.default_rng(5)
    samples = rng.integers(0, 256, (23, 31, 3))
    for filters in [(0,), (1,), (2,), (3,), (4,), (3, 3, 0, 4, 1)]:
        data = encode_png(samples, 2, 8, idat_size=7, filters=filters)
        np.testing.assert_array_equal(read_image(data), samples.astype(np.uint8))


def test_large_photo_like_png(tmp_path):
    rng = np.random.default_rng(11)
    img = np.cumsum(rng.integers(0, 256, (300, 400, 3)), axis=1).astype(np.uint8)
    path = tmp_path / "photo.png"
    Image.fromarray(img).save(path)
    np.testing.assert_array_equal(read_image(path), img)
    assert image_size(path) == (400, 300, "PNG")


# --- other formats ---------------------------------------------------------------------

def test_image_size_formats(tmp_path):
    img = Image.fromarray(np.zeros((21, 34, 3), np.uint8))
    for fmt, options in [("PNG", {}), ("JPEG", {}), ("JPEG", {"progressive": True}), ("GIF", {}), ("BMP", {}),
                         ("WEBP", {"lossless": True}), ("WEBP", {"quality": 80})]:
        buffer = io.BytesIO()
        img.save(buffer, fmt, **options)
        assert image_size(buffer.getvalue()) == (34, 21, fmt), (fmt, options)
    rgba = io.BytesIO()
    Image.fromarray(np.zeros((21, 34, 4), np.uint8)).save(rgba, "WEBP", exif=b"Exif\0\0")   # VP8X container
    assert image_size(rgba.getvalue()) == (34, 21, "WEBP")
    np.save(tmp_path / "a.npy", np.zeros((5, 6, 3), np.uint8))
    assert image_size(tmp_path / "a.npy") == (6, 5, "NPY")


def test_jpeg_through_pillow_with_exif_orientation(tmp_path):
    rng = np.random.default_rng(2)
    im = Image.fromarray(rng.integers(0, 256, (40, 64, 3), dtype=np.uint8))
    plain, rotated = tmp_path / "plain.jpg", tmp_path / "rotated.jpg"
    im.save(plain)
    exif = Image.Exif()
    exif[0x0112] = 6                                  # Orientation: rotate 90 clockwise to view
    im.save(rotated, exif=exif)
    with Image.open(plain) as ref:
        np.testing.assert_array_equal(read_image(plain), np.asarray(ref.convert("RGB")))
    got = read_image(rotated)
    assert got.shape == (64, 40, 3)
    with Image.open(rotated) as ref:
        np.testing.assert_array_equal(got, np.asarray(ImageOps.exif_transpose(ref).convert("RGB")))
    gray = tmp_path / "gray.jpg"
    im.convert("L").save(gray)
    assert read_image(gray).shape == (40, 64, 1)


def test_other_formats_through_pillow(tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    rgb = rng.integers(0, 256, (9, 14, 3), dtype=np.uint8)
    for fmt in ["gif", "bmp", "tiff"]:
        path = tmp_path / f"a.{fmt}"
        Image.fromarray(rgb).save(path)
        with Image.open(path) as ref:
            np.testing.assert_array_equal(read_image(path), np.asarray(ref.convert("RGB")))
    # formats we do not sniff (TIFF) are opened lazily and size-checked before load()
    monkeypatch.setattr(Image.Image, "load", lambda self: pytest.fail("decoded before the size check"))
    with pytest.raises(InputError, match=r"a\.tiff: image is 14x9"):
        read_image(tmp_path / "a.tiff", max_pixels=100)


def test_pillow_colour_spaces_become_rgb(tmp_path):
    """CMYK, YCbCr and LAB have no alpha (LAB's "A" band is a colour axis): RGB as convert("RGB");
    palette transparency and alpha modes keep alpha; PIL images take the same path."""
    rgb = Image.fromarray(np.random.default_rng(5).integers(0, 256, (9, 14, 3), dtype=np.uint8))
    for mode, fmt in [("CMYK", "JPEG"), ("CMYK", "TIFF"), ("YCbCr", "TIFF"), ("LAB", "TIFF")]:
        path = tmp_path / f"{mode}.{fmt.lower()}"
        rgb.convert(mode).save(path)
        with Image.open(path) as ref:
            np.testing.assert_array_equal(read_image(path), np.asarray(ref.convert("RGB")), err_msg=mode)
            np.testing.assert_array_equal(from_pillow(ref), np.asarray(ref.convert("RGB")), err_msg=mode)
    assert from_pillow(rgb.convert("PA")).shape == (9, 14, 4)
    assert from_pillow(rgb.convert("I")).shape == (9, 14, 1)


def test_pillow_refuses_huge_headers_by_size(tmp_path, monkeypatch):
    path = tmp_path / "big.tiff"
    Image.new("RGB", (300, 200)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)        # Pillow refuses above twice this
    with pytest.raises(InputError, match=r"big\.tiff: image too large"):
        read_image(path)


def test_without_pillow_png_works_and_jpeg_explains(tmp_path, monkeypatch):
    jpeg, png = tmp_path / "photo.jpg", tmp_path / "ok.png"
    Image.new("RGB", (8, 6)).save(jpeg)
    Image.new("RGB", (8, 6), (1, 2, 3)).save(png)
    monkeypatch.setitem(sys.modules, "PIL", None)     # `from PIL import ...` now raises ImportError
    assert read_image(png)[0, 0].tolist() == [1, 2, 3]
    assert image_size(jpeg) == (8, 6, "JPEG")
    with pytest.raises(InputError, match=r"photo\.jpg: JPEG images need Pillow"):
        read_image(jpeg)


def test_npy(tmp_path):
    np.save(tmp_path / "gray.npy", np.arange(12, dtype=np.uint8).reshape(3, 4))
    assert read_image(tmp_path / "gray.npy").shape == (3, 4, 1)
    np.save(tmp_path / "float.npy", np.array([[[0.0, 0.5, 1.0]]], np.float32))
    assert read_image(tmp_path / "float.npy").tolist() == [[[0, 128, 255]]]
    np.save(tmp_path / "objects.npy", np.array([[{"a": 1}]], dtype=object), allow_pickle=True)
    np.save(tmp_path / "big.npy", np.full((2, 2), 300, np.int32))
    np.save(tmp_path / "flat.npy", np.zeros(5, np.uint8))
    for bad in ["objects", "big", "flat"]:
        with pytest.raises(InputError, match=f"{bad}.npy"):
            read_image(tmp_path / f"{bad}.npy")


# --- bad input -------------------------------------------------------------------------

def _pillow_png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def _bad_files():
    good = _pillow_png()
    idat_at = good.index(b"IDAT")
    bad_crc = bytearray(good)
    bad_crc[idat_at + 10] ^= 0xFF
    row = b"\0" + bytes(8)
    yield "truncated", good[: len(good) // 2], "truncated"
    yield "bad_crc", bytes(bad_crc), "bad CRC in PNG IDAT"
    yield "bad_signature", b"\x89PNX" + good[4:], "not a recognised image"
    yield "not_an_image", b"hello, this is text and not an image at all", "not a recognised image"
    yield "empty", b"", "empty file"
    yield "zero_width", png_from_idat(ihdr(0, 5), zlib.compress(b"")), r"zero size \(0x5\)"
    yield "bad_zlib", png_from_idat(ihdr(8, 2), b"\x78\x9c not deflate data"), "zlib"
    yield "short_data", png_from_idat(ihdr(8, 2), zlib.compress(row)), "too short"
    yield "long_data", png_from_idat(ihdr(8, 2), zlib.compress(row * 3)), "more than the 18 bytes"
    yield "bad_filter", png_from_idat(ihdr(8, 2), zlib.compress(b"\7" + bytes(8) + row)), "filter type 7"
    yield "bad_depth", png_from_idat(ihdr(4, 4, depth=4, colour=2), b""), "colour type 2 with bit depth 4"
    yield "no_palette", png_from_idat(ihdr(4, 1, colour=3), zlib.compress(b"\0" + bytes(4))), "PLTE"
    yield "no_iend", good[:-12], "truncated"
    yield "truncated_jpeg", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "truncated JPEG"


@pytest.mark.parametrize("label,data,reason", list(_bad_files()), ids=[c[0] for c in _bad_files()])
def test_bad_input_names_the_file(tmp_path, label, data, reason):
    path = tmp_path / f"{label}.png"
    path.write_bytes(data)
    with pytest.raises(InputError, match=reason) as info:
        read_image(path)
    message = str(info.value)
    assert message.startswith(str(path) + ": ") and "\n" not in message
    if data:
        with pytest.raises(InputError, match="<bytes>"):
            read_image(data)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="nowhere.png: cannot open"):
        read_image(tmp_path / "nowhere.png")


def test_huge_header_fails_fast_without_allocating(tmp_path):
    path = tmp_path / "huge.png"
    path.write_bytes(png_from_idat(ihdr(30000, 30000, colour=6), zlib.compress(b"\0" * 100)))
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"huge\.png: image is 30000x30000 = 900000000 pixels"):
        read_image(path)
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 0.5 and peak < 1 << 20


def test_zip_bomb_is_bounded(tmp_path):
    path = tmp_path / "bomb.png"
    path.write_bytes(png_from_idat(ihdr(64, 64), zlib.compress(bytes(50_000_000), 9)))   # ~50 kB on disk
    tracemalloc.start()
    with pytest.raises(InputError, match=r"bomb\.png: PNG image data inflates to more than"):
        read_image(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 << 20


def test_max_pixels_checked_before_decoding_jpeg(tmp_path, monkeypatch):
    path = tmp_path / "big.jpg"
    Image.new("RGB", (100, 80)).save(path)
    monkeypatch.setattr(Image.Image, "load", lambda self: pytest.fail("decoded before the size check"))
    with pytest.raises(InputError, match=r"big\.jpg: image is 100x80 = 8000 pixels, more than max_pixels=1000$"):
        read_image(path, max_pixels=1000)


# --- float conversion -------------------------------------------------------------------

def test_to_float_and_grayscale_match_pillow():
    rng = np.random.default_rng(9)
    rgb = rng.integers(0, 256, (17, 23, 3), dtype=np.uint8)
    assert to_float(rgb).dtype == np.float32 and to_float(rgb).max() <= 1.0
    gray = to_grayscale(rgb)
    want = np.asarray(Image.fromarray(rgb).convert("L")) / 255
    assert gray.shape == (17, 23) and gray.dtype == np.float32
    assert np.abs(gray - want).max() <= 0.5 / 255 + 1e-6
    np.testing.assert_allclose(to_grayscale(rgb[..., :1]), to_float(rgb[..., 0]))


def test_grayscale_alpha_composites_over_background():
    rgba = np.array([[[255, 0, 0, 0], [255, 0, 0, 255], [0, 0, 255, 51]]], np.uint8)
    np.testing.assert_allclose(to_grayscale(rgba), [[1.0, 0.299, 0.114 * 0.2 + 0.8]], atol=1e-6)
    np.testing.assert_allclose(to_grayscale(rgba, background=0.0), [[0.0, 0.299, 0.114 * 0.2]], atol=1e-6)
    np.testing.assert_allclose(to_grayscale(rgba, background=None), [[0.299, 0.299, 0.114]], atol=1e-6)
    gray_alpha = np.array([[[100, 0], [100, 255]]], np.uint8)
    np.testing.assert_allclose(to_grayscale(gray_alpha), [[1.0, 100 / 255]], atol=1e-6)
    with pytest.raises(InputError):
        to_grayscale(np.zeros((2, 2, 5), np.uint8))
