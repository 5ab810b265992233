"""engine/vision/ocr.py, step by step, against rapidocr-onnxruntime's own code on the same inputs:
its resizing and normalization (DetPreProcess, the classifier's and recognizer's resize_norm_img),
DBNet's post-processing (DBPostProcess with OpenCV and pyclipper) on probability maps, its reading
order (sorted_boxes), its crops and its CTC decoding (CTCLabelDecode)."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import InputError
from engine.vision import ocr
from tests.helpers import need_import

DET = {"limit_side_len": 736, "limit_type": "min", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "thresh": 0.3,
       "box_thresh": 0.5, "max_candidates": 1000, "unclip_ratio": 1.6, "use_dilation": True, "score_mode": "fast"}


def rapid(module: str):
    need_import("cv2", "OpenCV is rapidocr's image library (the reference here)")
    need_import("pyclipper", "pyclipper is rapidocr's polygon offset (the reference here)")
    return need_import(f"rapidocr_onnxruntime.{module}", "rapidocr-onnxruntime is the OCR reference")


def image(h, w, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def blob_map(h: int, w: int, seed: int) -> np.ndarray:
    """A probability map with text-line-like blobs (rectangles, some turned) over noise."""
    rng = np.random.default_rng(seed)
    prob = rng.random((h, w), dtype=np.float32) * 0.25
    yy, xx = np.mgrid[0:h, 0:w]
    for _ in range(12):
        cx, cy = rng.uniform(20, w - 20), rng.uniform(10, h - 10)
        half_w, half_h, angle = rng.uniform(5, w / 4), rng.uniform(3, 12), rng.uniform(-0.3, 0.3)
        u = (xx - cx) * np.cos(angle) + (yy - cy) * np.sin(angle)
        v = -(xx - cx) * np.sin(angle) + (yy - cy) * np.cos(angle)
        inside = (np.abs(u) < half_w) & (np.abs(v) < half_h)
        prob[inside] = rng.uniform(0.55, 0.99)
    return prob


@pytest.mark.parametrize("shape", [(960, 1280), (500, 700), (100, 1500), (40, 40)])
@pytest.mark.parametrize("limit", [("min", 736), ("max", 960)])
def test_detector_input_is_rapidocrs(shape, limit):
    utils = rapid("ch_ppocr_det.utils")
    det = {**DET, "limit_type": limit[0], "limit_side_len": limit[1]}
    bgr = image(*shape)
    theirs = utils.DetPreProcess(limit[1], limit[0], DET["mean"], DET["std"])(bgr)
    ours = ocr.detector_input(bgr, det)
    assert ours.shape == theirs.shape and ours.dtype == np.float32
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("shape", [(48, 20), (30, 400), (64, 1000), (100, 90)])
def test_classifier_and_recognizer_inputs_are_rapidocrs(shape):
    cls = rapid("ch_ppocr_cls.text_cls")
    rec = rapid("ch_ppocr_rec.text_recognize")
    crops = [image(*shape, seed=1), image(shape[0] + 7, shape[1] // 2 + 3, seed=2)]
    classifier = object.__new__(cls.TextClassifier)
    classifier.cls_image_shape = [3, 48, 192]
    theirs = np.stack([classifier.resize_norm_img(c) for c in crops])
    np.testing.assert_array_equal(ocr.classifier_batch(crops, [3, 48, 192]), theirs)
    recognizer = object.__new__(rec.TextRecognizer)
    recognizer.rec_image_shape = [3, 48, 320]
    widest = max([320 / 48] + [c.shape[1] / c.shape[0] for c in crops])
    theirs = np.stack([recognizer.resize_norm_img(c, widest) for c in crops])
    np.testing.assert_array_equal(ocr.recognizer_batch(crops, [3, 48, 320]), theirs)


@pytest.mark.parametrize("seed", range(6))
def test_db_boxes_are_rapidocrs(seed):
    utils = rapid("ch_ppocr_det.utils")
    h, w = (320, 480) if seed % 2 else (256, 640)
    prob = blob_map(h, w, seed)
    post = utils.DBPostProcess(thresh=0.3, box_thresh=0.5, max_candidates=1000, unclip_ratio=1.6,
                               score_mode="fast", use_dilation=True)
    dest = (h * 3 // 2, w * 3 // 2)
    their_boxes, their_scores = post(prob[None, None], dest)
    boxes, scores = ocr.db_boxes(prob, DET, *dest)
    assert len(boxes) == len(their_boxes) > 0
    # the same boxes, as sets (the contours' order decides the list's)
    ours = sorted(map(lambda b: b.tolist(), boxes))
    theirs = sorted(map(lambda b: np.asarray(b).tolist(), their_boxes))
    diff = np.abs(np.array(ours, float) - np.array(theirs, float))
    assert diff.max() <= 1, diff.max()
    np.testing.assert_allclose(sorted(scores), sorted(their_scores), rtol=1e-5)


def test_reading_order_and_kept_boxes_are_rapidocrs():
    need_import("rapidocr_onnxruntime", "rapidocr-onnxruntime is the OCR reference")
    from rapidocr_onnxruntime.ch_ppocr_det.text_detect import TextDetector
    from rapidocr_onnxruntime.main import RapidOCR
    rng = np.random.default_rng(3)
    boxes = []
    for _ in range(60):
        x, y, bw, bh = rng.integers(0, 900), rng.integers(0, 700), rng.integers(2, 300), rng.integers(2, 40)
        boxes.append([[x, y], [x + bw, y + rng.integers(-5, 6)], [x + bw, y + bh], [x, y + bh]])
    boxes = np.array(boxes, np.int32)
    detector = object.__new__(TextDetector)
    theirs = detector.filter_tag_det_res(boxes.copy(), (720, 1000))
    kept = ocr.keep_boxes(boxes, 720, 1000)
    np.testing.assert_array_equal(kept, theirs)
    ordered = RapidOCR.sorted_boxes(theirs)
    np.testing.assert_array_equal(kept[ocr.reading_order(kept)], np.array(ordered))


def test_crops_are_rapidocrs():
    need_import("rapidocr_onnxruntime", "rapidocr-onnxruntime is the OCR reference")
    from rapidocr_onnxruntime.main import RapidOCR
    bgr = image(300, 400, seed=5)
    boxes = np.array([[[10, 20], [200, 30], [198, 70], [8, 60]], [[300, 10], [340, 10], [340, 280], [300, 280]],
                      [[50, 100], [150, 100], [150, 130], [50, 130]]], np.float32)
    theirs = RapidOCR.get_crop_img_list(object.__new__(RapidOCR), bgr, boxes)
    ours = ocr.crop_lines(bgr, boxes)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        assert np.mean(np.abs(a.astype(int) - b.astype(int)) <= 2) >= 0.99


def test_ctc_decode_is_rapidocrs():
    rec = rapid("ch_ppocr_rec.utils")
    characters = list("abcdefghij0123")
    decoder = rec.CTCLabelDecode(character=list(characters))
    rng = np.random.default_rng(0)
    probs = rng.random((5, 40, len(characters) + 2)).astype(np.float32) ** 4
    probs[2] = 0
    probs[2, :, 0] = 1                                         # all blank: no text, score 0
    probs /= probs.sum(2, keepdims=True)
    ours = ocr.ctc_decode(probs, decoder.character)
    theirs = decoder(probs)
    assert [t for t, _ in ours] == [t for t, _ in theirs]
    np.testing.assert_allclose([s for _, s in ours], [s for _, s in theirs], rtol=1e-6)
    assert ours[2] == ("", 0.0)
    with pytest.raises(InputError, match="recognizer gave shape"):
        ocr.ctc_decode(probs[:, :, :5], decoder.character)


@pytest.mark.parametrize("shape", [(1, 20000), (20000, 1), (12, 600), (4000, 3000), (20, 20)])
def test_fit_image_maps_boxes_back(shape):
    bgr = np.full((*shape, 3), 255, np.uint8)
    fitted, mapping = ocr.fit_image(bgr)
    h, w = fitted.shape[:2]
    assert min(h, w) >= 30 and max(h, w) <= 2000 + 2 * mapping["top"] + 32
    corners = np.array([[[0, mapping["top"]], [w, mapping["top"]], [w, h - mapping["top"]],
                         [0, h - mapping["top"]]]], np.float32)
    back = ocr.to_original(corners, mapping, *shape)
    np.testing.assert_allclose(back[0, 2], [shape[1], shape[0]], rtol=0.05, atol=1)
