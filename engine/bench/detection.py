"""`python -m engine bench yolo`: YOLO11n-pose and YOLOv10n at 640 and 320, batch 1, per backend,
against ultralytics on torch when a Python with ultralytics is given.

Two timings per case:
- network: the model's forward pass on a seeded 1x3xSxS input (the shape the bench page's ONNX
  peer is exported at), to its decoded head tensor;
- pipeline: samples/detection/bus.jpg (already decoded) to detections: letterbox, network, the
  post-processing (NMS for YOLO11, top-k for YOLOv10), as the task runs it. The letterbox keeps
  the aspect ratio and pads to a multiple of 32, so at 640 the network sees 640x480.

The reference is ultralytics 8.4.190's own BN-fused torch module (the one its predictor runs),
on the same .pt, timed by scripts/yolo_reference.py --serve-timing in a subprocess of the given
Python (`--reference-python`; ultralytics is never imported here). Its network time is the
forward pass alone on the same SxS shape; its pipeline time is `YOLO.predict` on the same pixels
(its LetterBox, forward, NMS or top-k, Results). Both sides run at the engine's thread count. The
rounds interleave engine and reference, case by case, so that a slower minute of a shared machine
falls on both; each figure is the median over rounds of per-round medians (and the fastest run).

On a machine whose cores other jobs also use, torch's OpenMP threads (2 or more) spin at every
barrier and lose their core for a scheduler slice: measured here under load, a YOLOv10n pass at 320
took 0.6-1.4 s instead of 30-50 ms. `OMP_WAIT_POLICY=PASSIVE` in the environment (the subprocess
inherits it, and the header says so) makes them sleep instead; one thread is not affected.
"""
from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import numpy as np

from . import machine, timed_ms

MODELS = {"yolo11n_pose": "pose-estimation", "yolov10n": "object-detection"}
SIZES = (640, 320)
IMAGE = "bus.jpg"


def _root() -> Path:
    import importlib

    from .. import registry
    return Path(importlib.import_module(registry.MODEL_PACKAGE).__file__).resolve().parent.parent


def sample_image() -> np.ndarray:
    """samples/detection/bus.jpg as uint8 (H, W, 3) RGB."""
    from ..vision import as_image
    return as_image(str(_root() / "samples" / "detection" / IMAGE))


class Reference:
    """ultralytics on torch in a subprocess: `ask(kind, model, size, repeat)` -> (median, fastest) ms."""

    def __init__(self, python: str, threads: int):
        script = _root() / "scripts" / "yolo_reference.py"
        self.process = subprocess.Popen([python, str(script), "--serve-timing", "--threads", str(threads)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        self.info = self._answer()

    def _answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            error = self.process.stderr.read().strip().splitlines()
            from ..errors import EngineError
            raise EngineError(f"the reference Python stopped: {error[-1] if error else 'no message'}")
        return json.loads(line)

    def ask(self, kind: str, model: str, size: int, repeat: int) -> tuple[float, float]:
        self.process.stdin.write(f"{kind} {model} {size} {repeat}\n")
        self.process.stdin.flush()
        answer = self._answer()
        return answer["ms"], answer.get("best_ms", answer["ms"])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=30)


def bench_yolo(devices, models=tuple(MODELS), sizes=SIZES, repeat: int = 10, rounds: int = 3,
               reference_python: str | None = None, weights: dict | None = None) -> dict:
    """{"cases": [{model, size, kind, <device>_ms..., torch_ms, <device>_ratio...}], ...}: the
    median over `rounds` interleaved rounds of each side's median of `repeat` runs."""
    from ..tasks import pipeline
    from ..tensor import from_numpy
    from ..threads import get_num_threads
    image = sample_image()
    rng = np.random.default_rng(0)
    inputs = {size: rng.random((1, 3, size, size), dtype=np.float32) for size in sizes}
    pipes = {(name, device): pipeline(MODELS[name], model=name, device=device,
                                      **({"weights": weights[name]} if weights and name in weights else {}))
             for name in models for device in devices}
    reference = Reference(reference_python, get_num_threads()) if reference_python else None
    samples: dict = {}
    try:
        for _ in range(rounds):
            for name in models:
                for size in sizes:
                    for device in devices:
                        pipe, x = pipes[name, device], inputs[size]
                        samples.setdefault((name, size, "network", device), []).append(timed_ms(
                            lambda pipe=pipe, x=x, device=device: pipe.model(from_numpy(x, device)).numpy(), repeat))
                        samples.setdefault((name, size, "pipeline", device), []).append(
                            timed_ms(lambda pipe=pipe, size=size: pipe(image, size=size), repeat))
                    if reference is not None:
                        for kind in ("network", "pipeline"):
                            samples.setdefault((name, size, kind, "torch"), []).append(
                                reference.ask(kind, name, size, repeat))
    finally:
        if reference is not None:
            reference.close()
    cases = []
    for name in models:
        for size in sizes:
            for kind in ("network", "pipeline"):
                case = {"model": name, "size": size, "kind": kind}
                for side in (*devices, "torch"):
                    if (name, size, kind, side) in samples:
                        runs = samples[name, size, kind, side]
                        case[f"{side}_ms"] = round(statistics.median(r[0] for r in runs), 2)
                        case[f"{side}_best_ms"] = round(min(r[1] for r in runs), 2)
                if "torch_ms" in case:
                    for device in devices:
                        case[f"{device}_ratio"] = round(case[f"{device}_ms"] / case["torch_ms"], 2)
                        case[f"{device}_best_ratio"] = round(case[f"{device}_best_ms"] / case["torch_best_ms"], 2)
                cases.append(case)
    out = {"devices": list(devices), "repeat": repeat, "rounds": rounds, "machine": machine(),
           "image": IMAGE, "image_shape": list(image.shape[:2]), "cases": cases}
    if reference is not None:
        info = reference.info
        out["torch"] = (f"ultralytics {info['ultralytics']} on torch {info['torch']} ({info['threads']} threads"
                        + (f", OMP_WAIT_POLICY={info['omp_wait_policy']}" if info.get("omp_wait_policy") else "") + ")")
    else:
        out["torch"] = "not measured (--reference-python PATH: a Python with ultralytics)"
    return out


def format_yolo(result: dict) -> str:
    devices = result["devices"]
    torch = any("torch_ms" in c for c in result["cases"])
    lines = [f"YOLO batch 1 ({result['machine']}); torch: {result['torch']}",
             (f"network: a 1x3xSxS input; pipeline: {result['image']} ({result['image_shape'][1]}x"
              f"{result['image_shape'][0]}) to detections; median of {result['rounds']} interleaved rounds of "
              f"{result['repeat']} runs" + ("; ratio = engine / torch time (below 1: faster), of the medians and "
                                            "of the fastest runs" if torch else "")),
             f"{'model':>13} {'size':>5} {'kind':>9} " + " ".join(f"{d + ' ms':>10}" for d in devices)
             + (f" {'torch ms':>9} " + " ".join(f"{d + '/torch':>12} {'fastest':>8}" for d in devices)
                if torch else "")]
    for c in result["cases"]:
        lines.append(f"{c['model']:>13} {c['size']:>5} {c['kind']:>9} "
                     + " ".join(f"{c[d + '_ms']:>10.2f}" for d in devices)
                     + (f" {c.get('torch_ms', float('nan')):>9.2f} "
                        + " ".join(f"{c.get(d + '_ratio', float('nan')):>11.2f}x {c.get(d + '_best_ratio', float('nan')):>7.2f}x"
                                   for d in devices) if torch else ""))
    return "\n".join(lines)


def main_args_check(python: str | None) -> None:
    """A clear error before any model loads when --reference-python cannot run."""
    if python is None:
        return
    from ..errors import EngineError
    try:
        subprocess.run([python, "-c", "import ultralytics, torch"], check=True, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise EngineError(f"--reference-python {python}: cannot import ultralytics and torch there ({e})") from None

