"""engine.vision.contours against OpenCV: find_contours must give cv2.findContours(RETR_LIST,
CHAIN_APPROX_SIMPLE)'s contours point for point and in the same order; dilate_2x2 must equal
cv2.dilate with a 2 x 2 kernel pixel for pixel. No tolerance: both are exact."""
import numpy as np
import pytest

from engine.errors import InputError
from engine.vision.contours import dilate_2x2, find_contours
from tests.helpers import need_import


def reference(mask):
    cv2 = need_import("cv2")
    contours, _ = cv2.findContours((mask != 0).astype(np.uint8) * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    return [c.reshape(-1, 2) for c in contours]


def assert_same(mask):
    ours, theirs = find_contours(mask), reference(mask)
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.dtype == np.int32 and a.shape == b.shape and (a == b).all(), (i, a.tolist(), b.tolist())


def masks():
    rng = np.random.default_rng(7)
    yield "empty", np.zeros((9, 11), np.uint8)
    yield "full", np.ones((9, 11), np.uint8)
    yield "one pixel", np.pad(np.ones((1, 1), np.uint8), 3)
    yield "corner pixels", np.pad(np.zeros((3, 3), np.uint8), 1, constant_values=1)
    yield "1x1 on", np.ones((1, 1), np.uint8)
    yield "1xN row", (rng.random((1, 30)) < 0.5).astype(np.uint8)
    yield "Nx1 column", (rng.random((30, 1)) < 0.5).astype(np.uint8)
    ring = np.zeros((12, 12), np.uint8)
    ring[2:10, 2:10] = 1
    ring[4:8, 4:8] = 0
    ring[5:7, 5:7] = 1                              # an island inside the hole
    yield "nested", ring
    lines = np.zeros((20, 20), np.uint8)
    lines[3, 1:19] = 1
    lines[5:18, 7] = 1
    np.fill_diagonal(lines[8:, 8:], 1)
    lines[19, ::2] = 1                              # pixels touching the bottom edge
    yield "thin lines", lines
    for i in range(60):
        h, w = rng.integers(1, 48, 2)
        yield f"noise {i}", (rng.random((h, w)) < rng.uniform(0.05, 0.95)).astype(np.uint8)
    for i in range(20):
        blobs = np.zeros((64, 80), np.uint8)
        for _ in range(12):
            y, x, bh, bw = rng.integers(-4, 64), rng.integers(-4, 80), rng.integers(1, 20), rng.integers(1, 30)
            blobs[max(y, 0):y + bh, max(x, 0):x + bw] = 1
            if bh > 4 and bw > 4:                   # some with holes
                blobs[max(y, 0) + 2:y + bh - 2, max(x, 0) + 2:x + bw - 2] = rng.integers(0, 2)
        yield f"blobs {i}", blobs


@pytest.mark.parametrize("name,mask", list(masks()), ids=lambda v: v if isinstance(v, str) else "")
def test_find_contours_matches_opencv(name, mask):
    assert_same(mask)


def test_find_contours_accepts_bool_and_float_masks():
    rng = np.random.default_rng(3)
    mask = rng.random((25, 31)) < 0.4
    expected = [c.tolist() for c in find_contours(mask.astype(np.uint8))]
    assert [c.tolist() for c in find_contours(mask)] == expected
    assert [c.tolist() for c in find_contours(mask * 0.7)] == expected
    assert find_contours(np.zeros((0, 5), bool)) == []


@pytest.mark.slow
def test_find_contours_large_text_map_matches_opencv():
    rng = np.random.default_rng(11)
    mask = np.zeros((960, 1280), np.uint8)
    for i in range(40):
        y, x0 = 20 + 23 * i, int(rng.integers(0, 300))
        x1 = x0 + int(rng.integers(300, 900))
        mask[y:y + 16, x0:x1] = rng.random((16, x1 - x0)) > 0.02
    ys, xs = rng.integers(0, 955, 2000), rng.integers(0, 1270, 2000)
    for y, x in zip(ys, xs):
        mask[y:y + rng.integers(2, 6), x:x + rng.integers(3, 10)] = 1
    assert_same(mask)


@pytest.mark.parametrize("bad", [np.zeros((3, 3, 1)), np.zeros(5), np.array([["a"]]), [[None]]])
def test_find_contours_rejects_bad_input(bad):
    with pytest.raises(InputError, match="find_contours wants"):
        find_contours(bad)


def test_dilate_2x2_matches_opencv():
    cv2 = need_import("cv2")
    rng = np.random.default_rng(5)
    for h, w in [(1, 1), (1, 7), (7, 1), (13, 17), (40, 33)]:
        mask = (rng.random((h, w)) < 0.2).astype(np.uint8)
        assert (dilate_2x2(mask) == cv2.dilate(mask, np.array([[1, 1], [1, 1]], np.uint8))).all()
        grey = rng.integers(0, 256, (h, w)).astype(np.uint8)
        assert (dilate_2x2(grey) == cv2.dilate(grey, np.ones((2, 2), np.uint8))).all()
    boolean = rng.random((9, 9)) < 0.3
    assert dilate_2x2(boolean).dtype == bool
    with pytest.raises(InputError, match="dilate_2x2 wants a 2-D mask"):
        dilate_2x2(np.zeros((2, 2, 2)))
