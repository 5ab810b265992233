"""engine.vision.transforms against Pillow's Image.resize and hand-computed crops.

Tolerance: uint8 results may differ from Pillow by at most 1 (the brief); in practice they
are identical, since the fixed-point arithmetic and the pass order are Pillow's.
float32 results are compared with Pillow's "F" mode to 1e-5.
"""
import numpy as np
import pytest
from PIL import Image

from engine.errors import InputError
from engine.vision import center_crop, resize, resize_shorter, resize_weights

FILTERS = {"nearest": Image.NEAREST, "box": Image.BOX, "bilinear": Image.BILINEAR,
           "hamming": Image.HAMMING, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
SIZES = [((480, 640), (256, 341)),       # (in_h, in_w) -> (out_h, out_w): non-integer downscale
         ((53, 37), (13, 20)),           # shrink one axis, grow the other
         ((7, 5), (28, 28)),             # upscale
         ((10, 12), (10, 12)),           # same size
         ((1, 1), (1, 1)), ((1, 9), (1, 4)), ((9, 1), (4, 1)), ((1, 1), (6, 5)), ((5, 1), (1, 7)),
         ((97, 61), (31, 200)), ((300, 17), (40, 16)), ((64, 64), (32, 32)), ((33, 35), (34, 34))]


def pillow_resize(img: np.ndarray, size, filter: str) -> np.ndarray:
    out_h, out_w = size
    return np.asarray(Image.fromarray(img).resize((out_w, out_h), FILTERS[filter]))


def max_difference(a, b) -> int:
    return int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max())


@pytest.mark.parametrize("channels", [None, 3], ids=["gray", "rgb"])
@pytest.mark.parametrize("in_size,out_size", SIZES, ids=[f"{a[0]}x{a[1]}-{b[0]}x{b[1]}" for a, b in SIZES])
def test_bilinear_matches_pillow(in_size, out_size, channels):
    rng = np.random.default_rng(sum(in_size) * 7 + sum(out_size))
    img = rng.integers(0, 256, in_size + ((channels,) if channels else ()), dtype=np.uint8)
    got = resize(img, out_size)
    want = pillow_resize(img, out_size, "bilinear")
    assert got.shape == want.shape and got.dtype == np.uint8
    assert max_difference(got, want) <= 1


@pytest.mark.parametrize("filter", list(FILTERS))
def test_every_filter_matches_pillow_on_random_sizes(filter):
    rng = np.random.default_rng(len(filter))
    worst = 0
    for _ in range(40):
        in_h, in_w, out_h, out_w = (int(v) for v in rng.integers(1, 90, 4))
        img = rng.integers(0, 256, (in_h, in_w, 3), dtype=np.uint8)
        worst = max(worst, max_difference(resize(img, (out_h, out_w), filter=filter),
                                          pillow_resize(img, (out_h, out_w), filter)))
    assert worst <= 1


def test_smooth_image_large_downscale():
    y, x = np.mgrid[0:1200, 0:1600]
    img = np.stack([(x * 255) // 1599, (y * 255) // 1199, ((x + y) // 7) % 256], axis=2).astype(np.uint8)
    for size in [(224, 224), (299, 401), (37, 1000)]:
        assert max_difference(resize(img, size), pillow_resize(img, size, "bilinear")) <= 1


@pytest.mark.parametrize("filter", ["bilinear", "bicubic", "lanczos", "box"])
def test_float32_matches_pillow_f_mode(filter):
    rng = np.random.default_rng(1)
    img = rng.random((45, 38, 2), dtype=np.float32)
    for size in [(20, 17), (90, 51), (45, 10)]:
        got = resize(img, size, filter=filter)
        assert got.dtype == np.float32 and got.shape == size + (2,)
        for c in range(2):
            want = np.asarray(Image.fromarray(img[..., c], "F").resize(size[::-1], FILTERS[filter]))
            np.testing.assert_allclose(got[..., c], want, atol=1e-5)


def test_resize_weights_is_the_dense_form():
    rng = np.random.default_rng(2)
    img = rng.random((30, 20), dtype=np.float32)
    for filter in ["bilinear", "bicubic", "nearest"]:
        rows, cols = resize_weights(30, 11, filter), resize_weights(20, 47, filter)
        assert rows.shape == (11, 30) and cols.shape == (47, 20)
        np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-12)
        np.testing.assert_allclose(resize(img, (11, 47), filter=filter), rows @ img @ cols.T, atol=1e-5)


def test_antialias_false_is_plain_interpolation():
    row = np.array([[10.0, 20.0, 30.0, 40.0, 50.0, 60.0]], np.float32)
    # 6 -> 2: centres 1.5 and 4.5 are the centres of pixels 1 and 4; the triangle keeps width 1
    np.testing.assert_allclose(resize(row, (1, 2), antialias=False), [[20.0, 50.0]])
    # 4 -> 2: centres 1.0 and 3.0 fall halfway between two pixels
    np.testing.assert_allclose(resize(row[:, :4], (1, 2), antialias=False), [[15.0, 35.0]])
    # Pillow widens the triangle by 3: weights (2, 3, 2, 1)/8 over pixels 0..3 and (1, 2, 3, 2)/8 over 2..5
    np.testing.assert_allclose(resize(row, (1, 2)), [[22.5, 47.5]])
    up = np.arange(12, dtype=np.uint8).reshape(3, 4)
    np.testing.assert_array_equal(resize(up, (7, 9), antialias=False), resize(up, (7, 9)))


def test_shape_dtype_and_copy():
    img = np.arange(24, dtype=np.uint8).reshape(4, 6)
    same = resize(img, (4, 6))
    np.testing.assert_array_equal(same, img)
    assert same is not img and not np.shares_memory(same, img)
    assert resize(img[..., None], (2, 3)).shape == (2, 3, 1)
    assert resize(img, 5).shape == (5, 5)
    for bad in [dict(size=(0, 3)), dict(size=(2, 3), filter="cubic"), dict(size="big")]:
        with pytest.raises(InputError):
            resize(img, **bad)
    with pytest.raises(InputError, match="dtype"):
        resize(img.astype(np.int32), (2, 2))


@pytest.mark.parametrize("shape,size,expected", [
    ((480, 640), 256, (256, 341)),          # int(256 * 640 / 480) = int(341.33)
    ((640, 480), 256, (341, 256)),
    ((53, 37), 20, (28, 20)),               # int(20 * 53 / 37) = int(28.65): truncated, not rounded
    ((100, 100), 32, (32, 32)),
    ((10, 1000), 20, (20, 2000)),
])
def test_resize_shorter(shape, size, expected):
    img = np.random.default_rng(0).integers(0, 256, shape + (3,), dtype=np.uint8)
    got = resize_shorter(img, size)
    assert got.shape[:2] == expected
    np.testing.assert_array_equal(got, resize(img, expected))


def test_resize_shorter_max_size():
    img = np.zeros((10, 1000), np.uint8)
    assert resize_shorter(img, 20, max_size=500).shape == (5, 500)     # short: int(500 * 20 / 2000)
    with pytest.raises(InputError):
        resize_shorter(img, 20, max_size=20)


def test_center_crop_offsets_round_half_to_even():
    img = np.arange(7 * 9).reshape(7, 9)
    # top = round(3 / 2) = 2, left = round(5 / 2) = 2 (Python rounds 1.5 up and 2.5 down)
    np.testing.assert_array_equal(center_crop(img, (4, 4)), img[2:6, 2:6])
    np.testing.assert_array_equal(center_crop(img, (2, 6)), img[2:4, 2:8])   # round(2.5)=2, round(1.5)=2
    np.testing.assert_array_equal(center_crop(img, 3), img[2:5, 3:6])        # round(2.0)=2, round(3.0)=3
    np.testing.assert_array_equal(center_crop(img, (7, 9)), img)
    rgb = np.arange(6 * 8 * 3).reshape(6, 8, 3)
    np.testing.assert_array_equal(center_crop(rgb, (3, 5)), rgb[2:5, 2:7])   # round(1.5)=2, round(1.5)=2


def test_center_crop_pads_when_larger():
    img = np.arange(1, 7).reshape(2, 3)
    got = center_crop(img, (5, 4))
    want = np.zeros((5, 4), img.dtype)
    want[1:3, 0:3] = img                    # 3 rows of padding: 1 above, 2 below; 1 column right
    np.testing.assert_array_equal(got, want)
    assert center_crop(np.ones((2, 2, 3)), (4, 4)).shape == (4, 4, 3)
