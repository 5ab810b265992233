"""engine.vision.polygons against OpenCV, pyclipper, shapely and rapidocr's DBPostProcess.

Exact: fill_polygon (cv2.fillPoly) for polygons inside the mask, box_points, order_points,
polygon_area / polygon_perimeter (to float rounding), unclip (pyclipper) on boxes whose
short side is >= 3 (the ones DBPostProcess unclips) up to where the points start (compared
as cyclic sequences; >= 99.5% must be identical, in practice all are); thinner boxes may
differ by a point, each corner of the minimum-area rectangle within 1.5 px.
Tolerances: min_area_rect's rectangle (as its corners) to 1e-3 px, except where several
rectangles have the same area (OpenCV's float32 scan may pick another; then the areas agree);
OpenCV may also write an axis-aligned rectangle as (w, h, 0) where we write (h, w, 90);
fill_polygon for polygons leaving the mask: >= 97% of them identical (OpenCV's edge
clipping is reproduced only approximately); warp_perspective (INTER_CUBIC, BORDER_REPLICATE,
uint8): at most 1 grey level apart and on < 1% of pixels.
"""
import numpy as np
import pytest

from engine.errors import InputError
from engine.vision.polygons import (box_points, box_score_fast, fill_polygon, get_mini_boxes, min_area_rect,
                                    order_points, polygon_area, polygon_perimeter, unclip)
from engine.vision.warp import get_perspective_transform, rotate_crop, warp_perspective
from tests.helpers import need_import


def random_rects(rng, count, spread=500.0):
    for i in range(count):
        angle = 90.0 if i % 4 == 0 else float(rng.uniform(-90, 90))
        yield ((float(rng.uniform(0, spread)), float(rng.uniform(0, spread))),
               (float(rng.uniform(1, 300)), float(rng.uniform(1, 60))), angle)


def point_clouds(rng, count):
    for i in range(count):
        c = rng.uniform(0, 500, 2)
        w, h = rng.uniform(1, 300), rng.uniform(1, 60)
        pts = rng.normal(0, 1, (int(rng.integers(1, 60)), 2)) * [w / 3, h / 3]
        if i % 2:
            a = np.radians(rng.uniform(0, 180))
            pts = pts @ np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]])
        yield (pts + c).astype(np.int32)


def sorted_corners(corners):
    corners = np.asarray(corners, np.float64)
    return corners[np.lexsort((corners[:, 1], corners[:, 0]))]


def test_min_area_rect_matches_opencv():
    cv2 = need_import("cv2")
    rng = np.random.default_rng(0)
    tied = 0
    for pts in point_clouds(rng, 1500):
        ours, theirs = min_area_rect(pts), cv2.minAreaRect(pts)
        if np.allclose(sorted_corners(box_points(ours)), sorted_corners(cv2.boxPoints(theirs)), atol=1e-3):
            if min(theirs[1]) > 0 and not (0 < theirs[2] <= 90):   # OpenCV's (w, h, 0) for (h, w, 90)
                assert ours[2] == 90 and np.allclose(ours[1], theirs[1][::-1])
            continue
        area, their_area = ours[1][0] * ours[1][1], theirs[1][0] * theirs[1][1]
        assert abs(area - their_area) <= 1e-4 * max(their_area, 1), (pts.tolist(), ours, theirs)
        tied += 1
    assert tied < 20


def test_min_area_rect_degenerate_cases_match_opencv():
    cv2 = need_import("cv2")
    for pts in ([[3, 4]], [[3, 4], [3, 4]], [[0, 0], [5, 0]], [[0, 0], [0, 5]], [[0, 0], [5, 5]],
                [[5, 0], [0, 5]], [[0, 0], [3, 1], [6, 2]], [[0, 0], [-5, 2]], [[0, 0], [10, 0], [10, 4], [0, 4]]):
        pts = np.array(pts, np.int32)
        ours, theirs = min_area_rect(pts), cv2.minAreaRect(pts)
        assert np.allclose(ours[0], theirs[0]) and np.allclose(ours[1], theirs[1]), (pts, ours, theirs)
        assert abs(ours[2] - theirs[2]) < 1e-4, (pts, ours, theirs)


def test_box_points_matches_opencv_exactly():
    cv2 = need_import("cv2")
    rng = np.random.default_rng(1)
    for rect in random_rects(rng, 500):
        assert (box_points(rect) == cv2.boxPoints(rect)).all(), rect


def test_get_mini_boxes_matches_rapidocr():
    need_import("cv2")
    need_import("pyclipper")
    need_import("shapely")
    post = need_import("rapidocr_onnxruntime.ch_ppocr_det.utils").DBPostProcess()
    rng = np.random.default_rng(2)
    differ = 0
    for pts in point_clouds(rng, 800):
        (box, side), (their_box, their_side) = get_mini_boxes(pts), post.get_mini_boxes(pts.reshape(-1, 1, 2))
        if not (np.allclose(box, their_box, atol=1e-3) and abs(side - their_side) < 1e-3):
            differ += 1                                   # a tie between equal-area rectangles
    assert differ < 10


def test_order_points_matches_rapidocr_on_boxes():
    cv2 = need_import("cv2")
    post = need_import("rapidocr_onnxruntime.ch_ppocr_det.utils").DBPostProcess()
    rng = np.random.default_rng(3)
    for rect in random_rects(rng, 300):
        corners = cv2.boxPoints(rect)
        contour = corners.reshape(-1, 1, 2)
        assert (order_points(cv2.boxPoints(cv2.minAreaRect(contour))) == post.get_mini_boxes(contour)[0]).all()


def test_area_and_perimeter_match_shapely():
    shapely = need_import("shapely.geometry")
    rng = np.random.default_rng(4)
    for n in [3, 4, 4, 5, 8, 20]:
        pts = rng.uniform(-50, 50, (n, 2))
        polygon = shapely.Polygon(pts)
        assert polygon_area(pts) == pytest.approx(polygon.area, rel=1e-12, abs=1e-9)
        assert polygon_perimeter(pts) == pytest.approx(polygon.length, rel=1e-12)


def cyclic_equal(a, b):
    a, b = [tuple(p) for p in a], [tuple(p) for p in b]
    if len(a) != len(b):
        return False
    return any(a == c[s:] + c[:s] for c in (b, b[::-1]) for s in range(len(c)))


@pytest.mark.parametrize("thin", [False, True], ids=["boxes", "thin boxes"])
def test_unclip_matches_pyclipper(thin):
    """DBPostProcess unclips only boxes whose short side is >= 3; thinner ones (distance < 1)
    may differ where Clipper's union resolves the rounding's self-intersections."""
    cv2 = need_import("cv2")
    pyclipper = need_import("pyclipper")
    shapely = need_import("shapely.geometry")
    rng = np.random.default_rng(5)
    total, differ = 0, 0
    for rect in random_rects(rng, 1500):
        if (min(rect[1]) < 3) != thin:
            continue
        box = cv2.boxPoints(rect)
        polygon = shapely.Polygon(box)
        offset = pyclipper.PyclipperOffset()
        offset.AddPath(box, pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
        theirs = offset.Execute(polygon.area * 1.5 / polygon.length)
        ours = unclip(box, 1.5)
        total += 1
        if len(theirs) == 1 and cyclic_equal(ours.tolist(), theirs[0]):
            continue
        differ += 1
        a = cv2.boxPoints(cv2.minAreaRect(ours.astype(np.float32)))
        b = cv2.boxPoints(cv2.minAreaRect(np.array(theirs[0], np.float32)))
        nearest = np.linalg.norm(a[:, None] - b[None], axis=-1).min(axis=1)
        assert nearest.max() <= 1.5, (box.tolist(), ours.tolist(), theirs)
    assert differ <= total * (0.4 if thin else 0.005), (differ, total)


def test_unclip_degenerate_and_bad_input():
    assert unclip([[0, 0], [5, 0], [10, 0], [3, 0]]).shape == (0, 2)          # no area
    assert unclip([[1, 1], [1, 1], [1, 1], [1, 1]]).shape == (0, 2)
    assert unclip([[0.2, 0.1], [0.9, 0.3], [0.5, 0.8], [0.1, 0.6]]).shape == (0, 2)  # truncates to a point
    with pytest.raises(InputError, match="ratio"):
        unclip([[0, 0], [4, 0], [4, 4], [0, 4]], -1)
    with pytest.raises(InputError, match="at least 3"):
        unclip([[0, 0], [4, 0]])
    with pytest.raises(InputError, match=r"\(N, 2\)"):
        unclip(np.zeros((4, 3)))


def random_quads(rng, count, low, high):
    cv2 = need_import("cv2")
    for i in range(count):
        if i % 2:
            c = rng.uniform(low, high, 2)
            rect = ((c[0], c[1]), tuple(rng.uniform(0, (high - low) * 0.7, 2)), rng.uniform(0, 180))
            yield cv2.boxPoints(rect).astype(np.int32)
        else:
            yield cv2.convexHull(rng.uniform(low, high, (4, 2)).astype(np.float32)).reshape(-1, 2).astype(np.int32)


def test_fill_polygon_matches_opencv_inside_the_mask():
    cv2 = need_import("cv2")
    rng = np.random.default_rng(6)
    for quad in random_quads(rng, 1500, 0, 39):
        expected = cv2.fillPoly(np.zeros((40, 40), np.uint8), quad.reshape(1, -1, 2), 1)
        ours = fill_polygon(np.zeros((40, 40), np.uint8), quad, 1)
        assert (ours == expected).all(), quad.tolist()


def test_fill_polygon_leaving_the_mask():
    cv2 = need_import("cv2")
    rng = np.random.default_rng(7)
    differ = 0
    for quad in random_quads(rng, 1000, -4, 34):
        expected = cv2.fillPoly(np.zeros((30, 30), np.uint8), quad.reshape(1, -1, 2), 1)
        ours = fill_polygon(np.zeros((30, 30), np.uint8), quad, 1)
        differ += not (ours == expected).all()
    assert differ <= 30


def test_box_score_fast_matches_rapidocr():
    cv2 = need_import("cv2")
    post = need_import("rapidocr_onnxruntime.ch_ppocr_det.utils").DBPostProcess()
    rng = np.random.default_rng(8)
    pred = rng.random((120, 160)).astype(np.float32)
    for rect in random_rects(rng, 300, spread=150):
        box = order_points(cv2.boxPoints(rect))
        assert box_score_fast(pred, box) == pytest.approx(post.box_score_fast(pred, box), rel=1e-9, abs=1e-12)


def test_fill_and_score_bad_input():
    with pytest.raises(InputError, match="fill_polygon wants"):
        fill_polygon([[0, 0]], [[0, 0], [1, 1], [1, 0]])
    with pytest.raises(InputError, match="at least 1"):
        fill_polygon(np.zeros((4, 4)), np.zeros((0, 2)))
    with pytest.raises(InputError, match="score map"):
        box_score_fast(np.zeros((0, 4)), [[0, 0], [1, 0], [1, 1], [0, 1]])
    with pytest.raises(InputError, match="not finite"):
        box_score_fast(np.zeros((4, 4)), [[0, 0], [np.nan, 0], [1, 1], [0, 1]])


def test_perspective_transform_and_warp_match_opencv():
    cv2 = need_import("cv2")
    rng = np.random.default_rng(9)
    image = cv2.GaussianBlur(rng.integers(0, 256, (120, 160, 3)).astype(np.uint8), (0, 0), 1.0)
    image[40:60, 30:100] = rng.integers(0, 256, (20, 70, 3))     # sharp detail too
    for _ in range(60):
        src = (np.array([[10, 10], [100, 20], [95, 60], [5, 50]]) + rng.uniform(-8, 8, (4, 2))).astype(np.float32)
        w, h = int(rng.integers(5, 120)), int(rng.integers(5, 60))
        dst = np.float32([[0, 0], [w, 0], [w, h], [0, h]])
        matrix = cv2.getPerspectiveTransform(src, dst)
        assert np.allclose(get_perspective_transform(src, dst), matrix, rtol=1e-6, atol=1e-8)
        expected = cv2.warpPerspective(image, matrix, (w, h), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)
        ours = warp_perspective(image, matrix, (w, h))
        difference = np.abs(ours.astype(int) - expected)
        assert difference.max() <= 1 and (difference > 0).mean() < 0.01
    grey = image[:, :, 0]
    ours = warp_perspective(grey, matrix, (w, h))
    expected = cv2.warpPerspective(grey, matrix, (w, h), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)
    assert ours.shape == expected.shape and np.abs(ours.astype(int) - expected).max() <= 1


def test_rotate_crop_matches_rapidocr():
    cv2 = need_import("cv2")
    rng = np.random.default_rng(10)
    image = cv2.GaussianBlur(rng.integers(0, 256, (200, 240, 3)).astype(np.uint8), (0, 0), 1.5)
    for rect in [((120, 100), (150, 30), 8.0), ((60, 90), (20, 120), 90.0), ((130, 110), (40, 90), 80.0),
                 ((100, 100), (60, 20), 90.0)]:
        points = order_points(cv2.boxPoints(rect))
        width = int(max(np.linalg.norm(points[0] - points[1]), np.linalg.norm(points[2] - points[3])))
        height = int(max(np.linalg.norm(points[0] - points[3]), np.linalg.norm(points[1] - points[2])))
        target = np.float32([[0, 0], [width, 0], [width, height], [0, height]])
        expected = cv2.warpPerspective(image, cv2.getPerspectiveTransform(points, target), (width, height),
                                       borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)
        if height / width >= 1.5:
            expected = np.rot90(expected)
        ours = rotate_crop(image, points)
        assert ours.shape == expected.shape and np.abs(ours.astype(int) - expected).max() <= 1


def test_crop_bad_input():
    image = np.zeros((10, 10, 3), np.uint8)
    with pytest.raises(InputError, match="degenerate"):
        rotate_crop(image, [[1, 1], [1, 1], [1, 1], [1, 1]])
    with pytest.raises(InputError, match="4 points"):
        rotate_crop(image, [[0, 0], [4, 0], [4, 4]])
    with pytest.raises(InputError, match="uint8"):
        warp_perspective(image.astype(np.float32), np.eye(3), (4, 4))
    with pytest.raises(InputError, match="size"):
        warp_perspective(image, np.eye(3), (4,))
    with pytest.raises(InputError, match="singular"):
        warp_perspective(image, np.zeros((3, 3)), (4, 4))
    with pytest.raises(InputError, match="degenerate"):
        get_perspective_transform([[0, 0], [1, 1], [2, 2], [3, 3]], [[0, 0], [1, 0], [1, 1], [0, 1]])


def test_point_validation_messages():
    with pytest.raises(InputError, match="min_area_rect|convex_hull"):
        min_area_rect(np.zeros((0, 2)))
    with pytest.raises(InputError, match="numeric"):
        min_area_rect([["a", "b"]])
    with pytest.raises(InputError, match="box_points wants"):
        box_points((1, 2, 3))
    with pytest.raises(InputError, match="4 points"):
        order_points(np.zeros((3, 2)))
    with pytest.raises(InputError, match="at least 1"):
        get_mini_boxes(np.zeros((0, 1, 2), np.int32))
