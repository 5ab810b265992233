"""Hostile images, classes of finding of the readers' fuzzer (tests/fuzz): .npy headers that broke
NumPy's reader (tokenizer errors, a 4 GB header length allocated before it was checked), PNG zlib
bombs whose millions of rows were undone one Python step each, and JPEG marker runs walked byte by
byte. Each now decodes quickly or is an InputError naming the file."""
from __future__ import annotations

import io
import struct
import time
import tracemalloc
import zlib

import numpy as np
import pytest

from engine.errors import InputError
from engine.vision import image_size, read_image
from tests.fuzz.images import png_join
from tests.vision.test_image import encode_png, ihdr, png_from_idat


def refused(data: bytes, match: str, seconds: float = 2.0) -> str:
    start = time.perf_counter()
    with pytest.raises(InputError, match=match) as info:
        read_image(data)
    assert time.perf_counter() - start < seconds
    assert str(info.value).startswith("<bytes>: ")
    return str(info.value)


# --- .npy ----------------------------------------------------------------------------------------

def npy(header: str, body: bytes = b"", version=(1, 0), length: int | None = None) -> bytes:
    raw = header.encode("latin-1")
    size = 2 if version == (1, 0) else 4
    return b"\x93NUMPY" + bytes(version) + (len(raw) if length is None else length).to_bytes(size, "little") + raw + body


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("array", [np.arange(12, dtype=np.uint8).reshape(3, 4),
                                   np.asfortranarray(np.linspace(0, 1, 24, dtype=">f4").reshape(2, 4, 3)),
                                   np.ones((2, 2), bool), np.arange(6, dtype="<u2").reshape(3, 2, 1)],
                         ids=["u8", "fortran-big-endian", "bool", "u2"])
def test_npy_read_by_hand_equals_numpy(version, array):
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version)
    expected = np.load(io.BytesIO(buffer.getvalue()))
    got = read_image(buffer.getvalue())
    assert got.shape[:2] == expected.shape[:2]
    if expected.dtype == np.uint8:
        np.testing.assert_array_equal(got.reshape(expected.shape), expected)
    assert image_size(buffer.getvalue()) == (expected.shape[1], expected.shape[0], "NPY")


@pytest.mark.parametrize("header", [
    "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), '''",     # NumPy: tokenize.TokenError
    "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2" + "(" * 300,
    "{'descr': " + "-" * 9000 + "1}",                                       # ast: MemoryError
    "{'descr': '|O', 'fortran_order': False, 'shape': (2, 2), }",
    "{'descr': '<U5', 'fortran_order': False, 'shape': (2, 2), }",
    "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2, 2), }",
    "{'descr': '|u1', 'fortran_order': 'x', 'shape': (2, 2), }",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (2, -2), }",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (" + "1" * 3000 + ", 2), }",
    "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), 'extra': 1, }",
    "{'descr': '|u1', 'fortran_order': False}",
    "__import__('os').system('true')",
], ids=["triple-quote", "parentheses", "unary-chain", "object", "unicode", "structured", "fortran-order",
        "negative", "huge-dim", "extra-key", "no-shape", "code"])
def test_npy_headers(header):
    refused(npy(header, bytes(4)), r"\.npy")


def test_npy_header_length_of_4_gb_is_not_allocated():
    data = npy("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }", bytes(4), (2, 0), 0xEFFFFFFF)
    tracemalloc.start()
    refused(data, "header length 4026531839 is over")
    assert tracemalloc.get_traced_memory()[1] < 1 << 20
    tracemalloc.stop()


def test_npy_data_claimed_but_absent_is_not_allocated(tmp_path):
    path = tmp_path / "short.npy"
    path.write_bytes(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (8000, 8000), }", bytes(16)))
    tracemalloc.start()
    with pytest.raises(InputError, match="short.npy: .npy data truncated: shape \\(8000, 8000\\)"):
        read_image(path)
    assert tracemalloc.get_traced_memory()[1] < 1 << 20
    tracemalloc.stop()


# --- PNG zlib bombs ----------------------------------------------------------------------------------

def bomb(width: int, height: int, filter_type: int, colour: int = 0) -> bytes:
    row = bytes([filter_type]) + bytes(width * {0: 1, 2: 3, 6: 4}[colour])
    squeeze = zlib.compressobj(9)
    stream = squeeze.compress(row * height) + squeeze.flush()
    return png_join([[b"IHDR", struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0)],
                     [b"IDAT", stream], [b"IEND", b""]])


@pytest.mark.parametrize("filter_type", [0, 1, 2, 4], ids=["none", "sub", "up", "paeth"])
def test_a_31kb_bomb_of_16_million_rows_decodes_without_a_python_step_per_row(filter_type):
    data = bomb(1, 16_000_000, filter_type)
    assert len(data) < 40_000
    start = time.perf_counter()
    image = read_image(data)
    assert time.perf_counter() - start < 5
    assert image.shape == (16_000_000, 1, 1) and not image.any()


@pytest.mark.parametrize("width, height, filter_type, colour", [(1, 16_000_000, 3, 0), (16_000_000, 1, 3, 0),
                                                                 (4096, 4096, 4, 2)],
                         ids=["tall-average", "wide-average", "square-paeth"])
def test_bombs_the_wavefront_would_take_minutes_on_are_refused(width, height, filter_type, colour):
    refused(bomb(width, height, filter_type, colour), "Average/Paeth filters would take too long to undo here")


def test_paeth_and_average_still_decode_within_the_budget():
    rng = np.random.default_rng(3)
    samples = rng.integers(0, 256, (300, 200, 3))
    for filters in [(3,), (4,), (3, 4, 2, 1, 0)]:
        np.testing.assert_array_equal(read_image(encode_png(samples, 2, 8, filters=filters)), samples)


@pytest.mark.parametrize("shape", [(5000, 1, 1), (2000, 3, 3), (40, 300, 3)], ids=["1-wide", "3-wide", "wide-rows"])
def test_none_sub_up_rows_are_undone_right_in_both_layouts(shape):
    # narrow rows go through running sums over chunks of rows, wide ones a NumPy call per row
    rng = np.random.default_rng(4)
    samples = rng.integers(0, 256, shape)
    colour = 0 if shape[2] == 1 else 2
    for filters in [(0,), (1,), (2,), (2, 2, 2, 1, 2, 0, 2), (0, 2, 1)]:
        np.testing.assert_array_equal(read_image(encode_png(samples, colour, 8, filters=filters)), samples)


def test_sub_byte_depths_unpack_in_uint8():
    data = png_from_idat(ihdr(17, 3, depth=2), zlib.compress((b"\0" + b"\xe4\x1b\xff\x00\x80") * 3))
    image = read_image(data)
    assert image.dtype == np.uint8 and image[0, :8, 0].tolist() == [255, 170, 85, 0, 0, 85, 170, 255]


# --- JPEG marker walk --------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [b"\xff\xd8\xff" + b"\xff" * 5_000_000, b"\xff\xd8" + b"\xff\x01" * 2_500_000],
                         ids=["fill-bytes", "markers"])
def test_jpeg_marker_runs_are_not_walked_byte_by_byte(data):
    start = time.perf_counter()
    with pytest.raises(InputError, match="corrupt JPEG"):
        image_size(data)
    assert time.perf_counter() - start < 0.5


def test_jpeg_fill_bytes_before_the_frame_header():
    assert image_size(b"\xff\xd8\xff\xff\xff\xc0\x00\x11\x08\x00\x07\x00\x09") == (9, 7, "JPEG")
