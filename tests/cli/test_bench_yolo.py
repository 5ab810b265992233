"""`python -m engine bench yolo` (engine/bench/detection.py): engine and reference timed case by
case in interleaved rounds, ratios engine / reference, the reference a subprocess speaking
scripts/yolo_reference.py --serve-timing's line protocol (here a stand-in that answers fixed
times, since ultralytics is never installed for the tests), and its option errors."""
from __future__ import annotations

import json
import stat
import sys

import numpy as np
import pytest

import engine
import engine.tasks
from engine.bench import detection
from engine.cli import main
from engine.errors import EngineError


class FakePipeline:
    def __init__(self, calls, name, device):
        self.calls, self.name, self.device = calls, name, device
        self.model = lambda x: self.calls.append(("network", name, x.shape[-1], device)) or x

    def __call__(self, image, size):
        self.calls.append(("pipeline", self.name, size, self.device))


@pytest.fixture
def calls(monkeypatch):
    calls = []
    monkeypatch.setattr(engine.tasks, "pipeline", lambda task, model, device: FakePipeline(calls, model, device))
    monkeypatch.setattr(detection, "sample_image", lambda: np.zeros((90, 120, 3), np.uint8))
    return calls


def stand_in(tmp_path, body: str):
    """An executable 'Python' that runs `body` with the script's arguments in sys.argv and the
    log file's path in LOG."""
    path = tmp_path / "python"
    path.write_text(f"#!{sys.executable}\nimport json, sys\nLOG = {str(tmp_path / 'log')!r}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


ANSWER = """
print(json.dumps({"ready": True, "torch": "t", "ultralytics": "u", "threads": int(sys.argv[sys.argv.index("--threads") + 1])}), flush=True)
with open(LOG, "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
    for line in sys.stdin:
        kind, model, size, repeat = line.split()
        log.write(line)
        log.flush()
        ms = 1000.0 if kind == "network" else 2000.0
        print(json.dumps({"ms": ms, "best_ms": ms / 2}), flush=True)
"""


def test_rounds_interleave_engine_and_reference_and_give_ratios(calls, tmp_path):
    result = detection.bench_yolo(["numpy"], sizes=(64, 32), repeat=2, rounds=2,
                                  reference_python=stand_in(tmp_path, ANSWER))
    log = (tmp_path / "log").read_text().splitlines()
    script, *requests = log
    assert script.endswith("scripts/yolo_reference.py --serve-timing --threads " + str(engine.get_num_threads()))
    models = ("yolo11n_pose", "yolov10n")
    assert requests == [f"{kind} {m} {s} 2" for _ in range(2) for m in models for s in (64, 32)
                        for kind in ("network", "pipeline")]
    # each engine case: one untimed call then `repeat` timed ones, before the reference's turn
    network = [c for c in calls if c[0] == "network"]
    assert len(network) == 2 * 2 * 2 * 3 and network[0] == ("network", "yolo11n_pose", 64, "numpy")
    assert [c["model"] for c in result["cases"]] == [m for m in models for _ in range(4)]
    for case in result["cases"]:
        assert case["torch_ms"] == (1000.0 if case["kind"] == "network" else 2000.0)
        assert case["numpy_ratio"] == round(case["numpy_ms"] / case["torch_ms"], 2)
        assert case["torch_best_ms"] == case["torch_ms"] / 2 and case["numpy_best_ms"] <= case["numpy_ms"]
        assert case["numpy_best_ratio"] == round(case["numpy_best_ms"] / case["torch_best_ms"], 2)
    assert result["torch"] == "ultralytics u on torch t (" + str(engine.get_num_threads()) + " threads)"
    text = detection.format_yolo(result)
    assert "numpy/torch" in text and text.count("\n") == 2 + len(result["cases"])


def test_without_a_reference_only_the_engine_is_timed(calls):
    result = detection.bench_yolo(["numpy"], sizes=(32,), repeat=1, rounds=1)
    assert all("torch_ms" not in c and "numpy_ms" in c for c in result["cases"])
    assert "not measured" in result["torch"]


def test_a_reference_that_stops_is_a_clear_error(calls, tmp_path):
    python = stand_in(tmp_path, "sys.stderr.write('ModuleNotFoundError: No module named ultralytics\\n')\n")
    with pytest.raises(EngineError, match="reference Python stopped: ModuleNotFoundError"):
        detection.bench_yolo(["numpy"], sizes=(32,), repeat=1, rounds=1, reference_python=python)


@pytest.mark.parametrize("argv, message", [
    (["bench", "yolo", "--sizes", "100"], "--sizes: multiples of 32"),
    (["bench", "yolo", "--rounds", "0"], "--rounds >= 1"),
    (["bench", "yolo", "--weights", "w"], "bench yolo takes"),
    (["bench", "mnist", "--reference-python", "p"], "options of bench yolo"),
    (["bench", "yolo", "--reference-python", "/nonexistent/python"], "cannot import ultralytics"),
])
def test_bad_options_are_one_line_errors(argv, message, capsys, calls):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not calls


def test_json_output(calls, capsys):
    assert main(["bench", "yolo", "--sizes", "32", "--repeat", "1", "--rounds", "1", "--device", "numpy",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["devices"] == ["numpy"] and len(result["cases"]) == 4
