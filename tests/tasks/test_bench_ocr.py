"""`python -m engine bench ocr` and the bench page's OCR cases (engine/bench/ocr.py), natively: the
command's options, the batches the pipeline feeds its networks (captured through pipe.network), what
the page hands ONNX Runtime Web, and one short run against rapidocr-onnxruntime. Nothing here
times: the numbers belong to docs/benchmarks.md (the page's run: tests/web/test_bench_ocr.py)."""
from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import engine
from engine.bench import ocr as bench
from engine.cli import main
from tests.helpers import need_import

ROOT = Path(__file__).resolve().parents[2]
FAST = "simd" if "simd" in engine.available_devices() else "numpy"


def test_bench_ocr_help_lists_its_options():
    done = subprocess.run([sys.executable, "-m", "engine", "bench", "ocr", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert all(option in done.stdout for option in ("--model NAME", "--image", "--onnx DIR", "--no-reference", "--rounds"))


def test_the_ocr_options_belong_to_bench_ocr(capsys):
    assert main(["bench", "mnist", "--onnx", "here"]) == 2
    assert "options of bench ocr" in capsys.readouterr().err
    assert main(["bench", "ocr", "--model", "pp-ocrv9"]) == 2
    assert "pp-ocrv4, pp-ocrv5" in capsys.readouterr().err
    assert main(["bench", "ocr", "--sizes", "640"]) == 2
    assert "bench ocr takes" in capsys.readouterr().err


def test_the_peers_files_are_named_by_model_and_network():
    assert bench.peer_name("pp-ocrv4", "det") == "ppocrv4-det.onnx"
    assert bench.peer_name("pp-ocrv5", "keys") == "ppocrv5-keys.txt"
    for model in bench.MODELS:                  # the registry's files of each model set, by the bench's names
        files = bench.onnx_sources(model)
        assert {"det", "cls", "rec"} <= set(files) and all(member.endswith(".onnx") for role, (_, _, member)
                                                          in files.items() if role != "keys")
    assert bench.same_lines(["a", "b", "b", "c"], ["b", "a", "b", "d"]) == 3


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    from tests.tasks.test_ocr import write_site
    weights = write_site(tmp_path_factory.mktemp("bench-ocr") / "pp-ocrv4", "pp-ocrv4")
    return engine.pipeline("ocr", model="pp-ocrv4", weights=weights, device=FAST)


def decode(feed: dict) -> np.ndarray:
    assert feed["type"] == "float32"
    return np.frombuffer(base64.b64decode(feed["base64"]), "<f4").reshape(feed["dims"])


@pytest.mark.slow
def test_the_captured_batches_are_what_the_networks_saw(pipe):
    image = bench.sample_image()
    batches, result = bench.captured_inputs(pipe, image)
    assert "network" not in vars(pipe)                      # the method is the class's again
    settings, boxes = pipe.settings, pipe.stats["boxes"]
    (det,) = batches["det"]
    assert det.shape == (1, 3, *pipe.stats["input"]) and det.dtype == np.float32
    for stage, shape in (("cls", settings["cls"]["image_shape"]), ("rec", settings["rec"]["image_shape"])):
        assert sum(len(x) for x in batches[stage]) == boxes, stage
        assert all(len(x) <= settings[stage]["batch"] and x.shape[1:3] == tuple(shape[:2]) for x in batches[stage])
    assert batches["cls"][0].shape[3] == settings["cls"]["image_shape"][2]
    assert len(result["lines"]) >= 36                        # the sample's 40 lines, a few left to the recognizer's score


@pytest.mark.slow
def test_the_page_gets_those_batches_and_our_times(pipe, loaded):
    loaded("ocr", pipe)
    bench._page.clear()
    cases = asyncio.run(bench.page_cases())
    batches = bench._page["batches"]
    assert cases["image_shape"] == [960, 1280] and cases["lines"] >= 36
    for stage in bench.STAGES:
        feeds = cases["feeds"][stage]
        assert len(feeds) == len(batches[stage]) == len(cases["checks"][stage]) > 0
        for feed, x in zip(feeds, batches[stage]):
            np.testing.assert_array_equal(decode(feed["x"]), x)
    (det,) = cases["checks"]["det"]
    assert det["over"] > 0 and det["threshold"] == pipe.settings["det"]["thresh"]
    assert len(cases["checks"]["rec"][0]) == pipe.network("rec", batches["rec"][0]).shape[0] * \
        pipe.network("rec", batches["rec"][0]).shape[1]
    times = asyncio.run(bench.page_times(repeat=1))
    for kind in ("pipeline", "network"):
        assert set(times[kind]) == {"det", "cls", "rec", "total"} and all(v > 0 for v in times[kind].values())
    assert times["threads"] == engine.get_num_threads()


@pytest.mark.slow
def test_one_short_run_against_rapidocr(pipe, monkeypatch):
    need_import("rapidocr_onnxruntime", "the reference of bench ocr")
    monkeypatch.setattr("engine.tasks.pipeline", lambda *args, **kwargs: pipe)
    result = bench.bench_ocr(repeat=1, rounds=1)
    sides = {c["side"] for c in result["cases"]}
    assert sides == {pipe.device or engine.default_device(), "rapidocr", "onnxruntime"}
    assert {(r["kind"], r["stage"]) for r in result["ratios"]} >= {("pipeline", "total"), ("network", "total")}
    texts = result["texts"]
    assert texts["same"] >= 0.9 * texts["rapidocr"] and texts["rapidocr"] >= 36
    assert result["checks"]["rec"]["same_argmax"] > 0.99
    assert "rapidocr" in bench.format_ocr(result)
