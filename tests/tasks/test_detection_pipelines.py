"""The object-detection and pose-estimation pipelines end to end on the real YOLO weights: the same
detections as ultralytics (recorded in tests/models/yolo_reference/), the worker's entry point,
and bad input."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

import engine
from engine.errors import InputError
from engine.vision import read_image

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "models" / "yolo_reference"
SAMPLES = ROOT / "samples" / "detection"
TASKS = {"yolov10n": "object-detection", "yolo11n_pose": "pose-estimation"}


def write_site(folder: Path, name: str) -> Path:
    """The model as the site serves it (model.safetensors and config.json beside it), made from the
    ultralytics checkpoint with the model file's own build-time functions, kept in float32."""
    import models.yolo as Y
    from engine.formats.pth import read_module_checkpoint
    from tests.yolo_files import checkpoint
    ckpt = read_module_checkpoint(checkpoint(name), name=f"{name}.pt")
    config = Y.config_from_checkpoint(ckpt)
    folder.mkdir(parents=True, exist_ok=True)
    engine.save_safetensors({k: v.numpy() for k, v in Y.inference_tensors(ckpt, config)}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(config.to_dict()))
    return folder / "model.safetensors"


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    folder = tmp_path_factory.mktemp("yolo")
    return {name: write_site(folder / name, name) for name in TASKS}


@pytest.fixture(scope="module")
def pipes(weights):
    return {name: engine.pipeline(task, weights=weights[name]) for name, task in TASKS.items()}


def iou(a, b) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    return w * h / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h)


def corners(d) -> list[float]:
    return [d["box"][k] for k in ("xmin", "ymin", "xmax", "ymax")]


@pytest.mark.slow
@pytest.mark.parametrize("size", [640, 320])
@pytest.mark.parametrize("image", ["bus", "zidane"])
@pytest.mark.parametrize("name", list(TASKS))
def test_same_detections_as_ultralytics(pipes, name, image, size):
    """Each of ultralytics' detections has one of ours of its class with IoU >= 0.99 and a score
    within 0.01, and we find nothing else."""
    pipe = pipes[name]
    ref = np.load(FIXTURES / f"{name}_{image}_{size}.npz")
    ours = pipe(str(SAMPLES / f"{image}.jpg"), size=size)
    assert len(ours) == len(ref["boxes"]), (ours, ref["boxes"])
    unmatched = list(range(len(ours)))
    for k, (box, score, cls) in enumerate(zip(ref["boxes"], ref["scores"], ref["classes"])):
        label = pipe.labels[int(cls)]
        match = [i for i in unmatched if ours[i].get("label", label) == label and iou(corners(ours[i]), box) >= 0.99
                 and abs(ours[i]["score"] - float(score)) <= 0.01]
        assert match, f"ultralytics' {label} {score:.3f} {box} not found in {ours}"
        unmatched.remove(match[0])
        if name == "yolo11n_pose":
            points = np.array([[p["x"], p["y"], p["score"]] for p in ours[match[0]]["keypoints"]])
            np.testing.assert_allclose(points[:, :2], ref["keypoints"][k, :, :2], atol=1.0)
            np.testing.assert_allclose(points[:, 2], ref["keypoints"][k, :, 2], atol=0.01)


def test_formats_lists_and_timings(pipes):
    photo = read_image(SAMPLES / "zidane.jpg")
    det = pipes["yolov10n"]
    found = det(photo, size=320)
    assert found and all(set(d) == {"label", "score", "box"} for d in found)
    assert {d["label"] for d in found} <= set(det.labels) and det.labels[0] in {d["label"] for d in found}  # people
    assert all(set(d["box"]) == {"xmin", "ymin", "xmax", "ymax"} for d in found)
    assert det([photo, photo], size=320) == [found, found]
    assert set(det.stats) >= {"pre", "network", "post"} and det.stats["input"] == [192, 320]
    assert det(photo, size=320, threshold=0.99) == []
    people = pipes["yolo11n_pose"](photo, size=320)
    assert people and all(set(p) == {"score", "box", "keypoints"} and len(p["keypoints"]) == 17 for p in people)


def test_bad_input(pipes):
    det = pipes["yolov10n"]
    for kwargs, match in [({"size": 300}, "multiple of 32"), ({"size": 0}, "multiple of 32"),
                          ({"threshold": 1.5}, "threshold")]:
        with pytest.raises(InputError, match=match):
            det(np.zeros((10, 10, 3), np.uint8), **kwargs)
    with pytest.raises(InputError, match="zero size"):
        det(np.zeros((0, 10, 3), np.uint8))
    with pytest.raises(InputError, match="expected an image"):
        det(3.5)
    with pytest.raises(InputError, match=r"^<bytes>: .*[Tt]runcated"):
        det((SAMPLES / "bus.jpg").read_bytes()[:200])


def test_worker_entry_point(pipes, loaded):
    from engine.tasks import worker_entry_points
    detect_image = worker_entry_points()["detect_image"]
    photo = read_image(SAMPLES / "zidane.jpg")
    loaded("object-detection", pipes["yolov10n"])
    loaded("pose-estimation", pipes["yolo11n_pose"])
    rgba = np.concatenate([photo, np.full(photo.shape[:2] + (1,), 255, np.uint8)], 2)
    answer = json.loads(asyncio.run(detect_image(rgba.tobytes(), photo.shape[1], photo.shape[0], 320, 0.25)))
    assert answer["detections"] == pipes["yolov10n"](photo, size=320)
    assert answer["task"] == "object-detection" and answer["size"] == 320 and answer["input"] == [192, 320]
    assert (answer["width"], answer["height"]) == (1280, 720)
    assert set(answer["timings"]) == {"pre", "network", "post"} and answer["device"]
    assert answer["ms"] == pytest.approx(sum(answer["timings"].values()), abs=0.05)
    from_file = json.loads(asyncio.run(detect_image((SAMPLES / "zidane.jpg").read_bytes(), 0, 0, 320, 0.25, "pose")))
    assert from_file["task"] == "pose-estimation"
    assert from_file["detections"] == pipes["yolo11n_pose"](photo, size=320)
