"""`python -m engine detect`: the same detections as the pipeline, --save, exit codes, one-line errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import engine
from engine.vision import read_image
from tests.tasks.test_detection_pipelines import write_site

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples" / "detection"


def run(*args):
    return subprocess.run([sys.executable, "-m", "engine", "detect", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    folder = tmp_path_factory.mktemp("yolo")
    return {name: write_site(folder / name, name) for name in ("yolov10n", "yolo11n_pose")}


def test_help():
    r = run("--help")
    assert r.returncode == 0
    for option in ("--task", "--threshold", "--size", "--json", "--save", "pose-estimation"):
        assert option in r.stdout


def test_json_is_the_pipelines_output(weights):
    photos = [SAMPLES / "bus.jpg", SAMPLES / "zidane.jpg"]
    r = run(*photos, "--json", "--size", "320", "--weights", weights["yolov10n"], "--device", "numpy")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    pipe = engine.pipeline("object-detection", weights=weights["yolov10n"], device="numpy")
    assert [x["input"] for x in lines] == [str(p) for p in photos]
    for x, photo in zip(lines, photos):
        assert x["detections"] == pipe(str(photo), size=320)
    assert len(lines[0]["detections"]) == 4


def test_pose_text_and_save(weights, tmp_path):
    out = tmp_path / "people.png"
    r = run(SAMPLES / "zidane.jpg", "--task", "pose", "--size", "320", "--threshold", "0.5", "--save", out,
            "--weights", weights["yolo11n_pose"], "--device", "numpy")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{SAMPLES / 'zidane.jpg'}: person 0.") and r.stdout.count("person") == 2
    drawn, photo = read_image(out), read_image(SAMPLES / "zidane.jpg")
    assert drawn.shape == photo.shape
    changed = (drawn != photo).any(axis=2)
    assert 0.001 < changed.mean() < 0.2                  # boxes, tags and limbs, not a repainted image


def test_bad_images_are_one_line_each_and_exit_2(weights, tmp_path):
    truncated = tmp_path / "cut.jpg"
    truncated.write_bytes((SAMPLES / "bus.jpg").read_bytes()[:300])
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    r = run(truncated, SAMPLES / "zidane.jpg", empty, tmp_path / "missing.png", "--size", "320",
            "--weights", weights["yolov10n"], "--device", "numpy")
    assert r.returncode == 2
    errors = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and len(errors) == 3, r.stderr
    assert errors[0].startswith(f"error: {truncated}: ") and "runcated" in errors[0]
    assert errors[1].startswith(f"error: {empty}: empty file")
    assert errors[2].startswith(f"error: {tmp_path / 'missing.png'}: cannot open")
    assert r.stdout.startswith(f"{SAMPLES / 'zidane.jpg'}: ")          # the good one is still detected


@pytest.mark.parametrize("args, needle", [(["--threshold", "2"], "--threshold must be between 0 and 1"),
                                          (["--size", "300"], "invalid choice"),
                                          (["--task", "segment"], "invalid choice")])
def test_bad_options_are_one_line(weights, args, needle):
    r = run(SAMPLES / "bus.jpg", *args, "--weights", weights["yolov10n"])
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
