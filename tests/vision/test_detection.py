"""YOLO pre- and post-processing (engine/vision/detection.py) against OpenCV's recorded resize,
ultralytics' recorded letterboxed inputs and final detections, and brute-force references
written here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.errors import InputError
from engine.vision import read_image
from engine.vision.detection import (
    COCO_KEYPOINTS,
    SKELETON,
    Letterbox,
    as_dicts,
    detect,
    letterbox,
    non_max_suppression,
    one_to_one_topk,
    postprocess,
    resize_linear,
    scale_boxes,
    scale_coords,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "models" / "yolo_reference"
SAMPLES = ROOT / "samples" / "detection"
CASES = [(model, image, size) for model in ("yolo11n_pose", "yolov10n") for image in ("bus", "zidane")
         for size in (640, 320)]


def test_resize_is_cv2_inter_linear_bit_for_bit():
    ref = np.load(Path(__file__).with_name("cv2_resize_reference.npz"))
    for i in range(len(ref["cases"])):
        src, dst = ref[f"src_{i}"], ref[f"dst_{i}"]
        np.testing.assert_array_equal(resize_linear(src, dst.shape[1], dst.shape[0]), dst,
                                      err_msg=f"{src.shape[:2]} -> {dst.shape[:2]}")


@pytest.mark.parametrize("model, image, size", CASES)
def test_letterbox_gives_ultralytics_input_exactly(model, image, size):
    ref = np.load(FIXTURES / f"{model}_{image}_{size}.npz")
    tensor, box = letterbox(read_image(SAMPLES / f"{image}.jpg"), size)
    np.testing.assert_array_equal(tensor, ref["pixels"][0].astype(np.float32) / np.float32(255))
    assert (box.height, box.width) == tuple(ref["orig_shape"])
    assert (box.input_height, box.input_width) == ref["pixels"].shape[2:]


def _ultralytics_geometry(h, w, size, stride=32):
    """LetterBox.get_params (auto=True) written out again: (new_w, new_h, left, top, right, bottom)."""
    r = min(size / h, size / w)
    new_w, new_h = max(round(w * r), 1), max(round(h * r), 1)
    dw, dh = ((size - new_w) % stride) / 2, ((size - new_h) % stride) / 2
    return new_w, new_h, round(dw - 0.1), round(dh - 0.1), round(dw + 0.1), round(dh + 0.1)


@pytest.mark.parametrize("h, w", [(1080, 810), (720, 1280), (1, 3000), (3000, 1), (640, 640), (17, 33), (479, 641)])
@pytest.mark.parametrize("size", [320, 480, 640])
def test_letterbox_geometry_and_padding(h, w, size):
    rng = np.random.default_rng(h * w)
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    tensor, box = letterbox(img, size)
    new_w, new_h, left, top, right, bottom = _ultralytics_geometry(h, w, size)
    assert tensor.shape == (3, new_h + top + bottom, new_w + left + right)
    assert tensor.shape[1] % 32 == 0 and tensor.shape[2] % 32 == 0 and max(tensor.shape) <= size
    assert (box.pad_x, box.pad_y, box.width, box.height) == (left, top, w, h)
    pixels = np.rint(tensor * 255).astype(np.uint8).transpose(1, 2, 0)
    np.testing.assert_array_equal(pixels[top:top + new_h, left:left + new_w], resize_linear(img, new_w, new_h))
    inner = np.zeros(pixels.shape[:2], bool)
    inner[top:top + new_h, left:left + new_w] = True
    assert (pixels[~inner] == 114).all()


def test_letterbox_takes_gray_and_rgba_and_refuses_nonsense():
    rgb = np.random.default_rng(0).integers(0, 256, (50, 70, 3), dtype=np.uint8)
    rgba = np.concatenate([rgb, np.zeros((50, 70, 1), np.uint8)], 2)         # alpha dropped, not composited
    np.testing.assert_array_equal(letterbox(rgba, 320)[0], letterbox(rgb, 320)[0])
    gray = rgb[:, :, :1]
    np.testing.assert_array_equal(letterbox(gray, 320)[0], letterbox(np.repeat(gray, 3, 2), 320)[0])
    for bad, match in [(np.zeros((0, 5, 3), np.uint8), "zero size"), (np.zeros((5, 5, 3), np.float32), "uint8"),
                       (np.zeros((5, 5, 5), np.uint8), "C in 1..4")]:
        with pytest.raises(InputError, match=match):
            letterbox(bad)
    with pytest.raises(InputError, match="multiple of 32"):
        letterbox(rgb, 300)


# --- post-processing -----------------------------------------------------------------------------
def _iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def brute_force_nms(raw, nc, threshold, iou, max_det):
    """Per anchor its best class; per class, greedy suppression in plain Python; then all kept
    boxes by score. (anchor, class, score) triples."""
    kept = []
    for c in range(nc):
        cands = [(float(raw[4 + c, a]), a) for a in range(raw.shape[1])
                 if raw[4:4 + nc, a].max() > threshold and int(raw[4:4 + nc, a].argmax()) == c]
        cands.sort(key=lambda t: (-t[0], t[1]))
        chosen = []
        for score, a in cands:
            box = [raw[0, a] - raw[2, a] / 2, raw[1, a] - raw[3, a] / 2, raw[0, a] + raw[2, a] / 2,
                   raw[1, a] + raw[3, a] / 2]
            if all(_iou(box, other) <= iou for _, _, other in chosen):
                chosen.append((score, a, box))
        kept += [(a, c, s) for s, a, _ in chosen]
    kept.sort(key=lambda t: -t[2])
    return kept[:max_det]


def synthetic_raw(rng, nc, anchors, extra=0, clusters=12):
    """Boxes in clusters (so that NMS has work), class probabilities mostly low."""
    centres = rng.uniform(50, 600, (clusters, 2))
    which = rng.integers(0, clusters, anchors)
    xy = centres[which] + rng.normal(0, 6, (anchors, 2))
    wh = rng.uniform(20, 120, (anchors, 2))
    probs = rng.uniform(0, 1, (anchors, nc)) ** 6
    return np.concatenate([xy, wh, probs, rng.uniform(0, 640, (anchors, extra))], 1).T.astype(np.float32)


@pytest.mark.parametrize("nc, iou", [(1, 0.7), (3, 0.7), (5, 0.45)])
def test_nms_equals_a_brute_force_reference(nc, iou):
    rng = np.random.default_rng(nc)
    raw = synthetic_raw(rng, nc, 400, extra=6)
    rows = non_max_suppression(raw, nc, threshold=0.25, iou=iou, max_det=300)
    expected = brute_force_nms(raw, nc, 0.25, iou, 300)
    assert len(rows) == len(expected) > 10
    got = sorted((round(float(r[4]), 6), int(r[5])) for r in rows)
    assert got == sorted((round(s, 6), c) for _, c, s in expected)
    np.testing.assert_allclose(rows[:, 6:], raw[4 + nc:, [a for a, _, _ in expected]].T)   # extra rides along
    assert (np.diff(rows[:, 4]) <= 0).all()


def test_nms_limits_and_an_empty_result():
    rng = np.random.default_rng(7)
    raw = synthetic_raw(rng, 2, 2000, clusters=2000)
    assert len(non_max_suppression(raw, 2, threshold=0.01, max_det=300)) == 300
    few = non_max_suppression(raw, 2, threshold=0.01, max_nms=50)
    assert len(few) <= 50
    nothing = non_max_suppression(np.zeros((4 + 2 + 3, 10), np.float32), 2)
    assert nothing.shape == (0, 6 + 3)


def test_one_to_one_topk_is_yolov10s_rule():
    rng = np.random.default_rng(3)
    nc, anchors, k = 5, 1000, 300
    raw = synthetic_raw(rng, nc, anchors)
    rows = one_to_one_topk(raw, nc, threshold=0.25, max_det=300, head_max_det=k)
    # reference: the k anchors with the best class scores, all their (anchor, class) pairs, the k best
    best = np.argsort(-raw[4:4 + nc].max(0), kind="stable")[:k]
    pairs = sorted(((float(raw[4 + c, a]), a, c) for a in best for c in range(nc)), key=lambda t: -t[0])[:k]
    pairs = [p for p in pairs if p[0] > 0.25]
    assert len(rows) == len(pairs) > 20
    assert [(int(r[5]), round(float(r[4]), 6)) for r in rows] == [(c, round(s, 6)) for s, _, c in pairs]
    a = [p[1] for p in pairs]
    np.testing.assert_allclose(rows[:, :2], (raw[:2, a] - raw[2:4, a] / 2).T, rtol=1e-6)
    # one anchor may give two classes: no NMS, no one-class-per-box rule
    raw2 = np.zeros((4 + 2, 3), np.float32)
    raw2[:4, 0] = [100, 100, 50, 50]
    raw2[4:, 0] = [0.9, 0.8]
    assert [int(r[5]) for r in one_to_one_topk(raw2, 2)] == [0, 1]


def test_scale_back_and_clip():
    box = Letterbox(0.5, 0, 12, 1280, 720, 640, 384)                 # zidane at 640
    boxes = scale_boxes(np.array([[0, 12, 640, 372], [-10, 0, 700, 400], [100, 62, 200, 112]], np.float32), box)
    np.testing.assert_allclose(boxes, [[0, 0, 1280, 720], [0, 0, 1280, 720], [200, 100, 400, 200]])
    points = scale_coords(np.array([[[320, 192, 0.7], [-5, 500, 0.1]]], np.float32), box)
    np.testing.assert_allclose(points, [[[640, 360, 0.7], [0, 720, 0.1]]], rtol=1e-6)


@pytest.mark.parametrize("model, image, size", CASES)
def test_postprocess_on_ultralytics_head_output_gives_its_detections(model, image, size):
    ref = np.load(FIXTURES / f"{model}_{image}_{size}.npz")
    raw = ref["raw"][0].astype(np.float32)
    raw[:, ref["top_index"]] = ref["raw_top"][0]                       # the anchors that matter, unrounded
    pose = model.startswith("yolo11n_pose")
    config = {"nc": 1 if pose else 80, "names": {str(i): f"class{i}" for i in range(1 if pose else 80)},
              "kpt_shape": [17, 3] if pose else None, "end2end": not pose, "max_det": 300}
    _, box = letterbox(read_image(SAMPLES / f"{image}.jpg"), size)
    found = detect(raw, config, box)
    np.testing.assert_array_equal(found["classes"], ref["classes"])
    np.testing.assert_allclose(found["scores"], ref["scores"], atol=1e-6)
    np.testing.assert_allclose(found["boxes"], ref["boxes"], atol=1e-3)
    if pose:
        np.testing.assert_allclose(found["keypoints"], ref["keypoints"], atol=1e-3)
    dicts = postprocess(raw, config, box)
    assert len(dicts) == len(ref["boxes"])
    for d, b, s in zip(dicts, ref["boxes"], ref["scores"]):
        assert d["box"] == pytest.approx(dict(zip(("xmin", "ymin", "xmax", "ymax"), b.tolist())), abs=0.006)
        assert d["score"] == pytest.approx(float(s), abs=1e-5)
        if pose:
            assert set(d) == {"score", "box", "keypoints"}
            assert [k["name"] for k in d["keypoints"]] == list(COCO_KEYPOINTS)
        else:
            assert set(d) == {"label", "score", "box"} and d["label"].startswith("class")


def test_output_formats_and_skeleton():
    found = {"boxes": np.array([[1.234, 2.0, 30.0, 40.555]], np.float32), "scores": np.array([0.5], np.float32),
             "classes": np.array([5])}
    names = {str(i): n for i, n in enumerate(["person", "bicycle", "car", "motorcycle", "airplane", "bus"])}
    assert as_dicts(found, {"names": names}) == [
        {"label": "bus", "score": 0.5, "box": {"xmin": 1.23, "ymin": 2.0, "xmax": 30.0, "ymax": 40.56}}]
    assert len(COCO_KEYPOINTS) == 17 and COCO_KEYPOINTS[0] == "nose" and COCO_KEYPOINTS[-1] == "right_ankle"
    assert len(SKELETON) == 19 and all(0 <= i < 17 and 0 <= j < 17 for i, j in SKELETON)
    with pytest.raises(InputError, match="head's output"):
        detect(np.zeros((10, 5), np.float32), {"nc": 80}, Letterbox(1, 0, 0, 10, 10, 32, 32))
