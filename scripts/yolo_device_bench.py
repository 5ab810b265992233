"""YOLO11n-pose and YOLOv10n on a device: the network's time per backend at 640 and 320, batch 1,
on bus.jpg letterboxed as the pipeline does (640x480 / 320x256) and on a square SxS input (the
bench page's ONNX peer shape). Real weights from a built site (they are small enough to carry to a
borrowed GPU machine); the webgpu outputs are compared with numpy's on the same input.

    python scripts/yolo_device_bench.py out.json [numpy,webgpu,simd] [dist/models] [IMAGE]

IMAGE defaults to samples/detection/bus.jpg (a .npy of its pixels where Pillow is missing).

docs/webgpu.md has its numbers on an H100."""
import json
import os
import sys
import time

import numpy as np

import engine
import models.yolo as Y
from engine.vision import read_image
from engine.vision.detection import letterbox

MODELS = ("yolo11n_pose", "yolov10n")
ROUNDS = 10
devices = sys.argv[2].split(",") if len(sys.argv) > 2 else ["numpy", "webgpu"]   # the first is the reference
root = sys.argv[3] if len(sys.argv) > 3 else "dist/models"
out = {"devices": engine.available_devices(), "threads": engine.get_num_threads(), "runs": []}
image = read_image(sys.argv[4] if len(sys.argv) > 4 else os.path.join(os.path.dirname(__file__), "..", "samples", "detection", "bus.jpg"))
for name in MODELS:
    reference = {}
    for device in [d for d in devices if d in out["devices"]]:
        model = Y.load(os.path.join(root, name), device)
        for size in (640, 320):
            inputs = {"bus": letterbox(image, size)[0][None], "square": np.zeros((1, 3, size, size), np.float32) + 0.5}
            for kind, x in inputs.items():
                model(engine.from_numpy(x, device)).numpy()          # warm: pipelines compiled, anchors made
                times = []
                for _ in range(ROUNDS):
                    t = time.perf_counter()
                    y = model(engine.from_numpy(x, device)).numpy()    # upload, forward, read back
                    times.append((time.perf_counter() - t) * 1e3)
                key = (size, kind)
                row = {"model": name, "device": device, "size": size, "input": kind, "shape": list(x.shape),
                       "median_ms": float(np.median(times)), "min_ms": float(np.min(times))}
                if key in reference:
                    ref_device, ref = reference[key]
                    row["max_abs_diff"] = {ref_device: float(np.max(np.abs(y - ref)))}
                else:
                    reference[key] = (device, y)
                out["runs"].append(row)
                print(json.dumps(row), flush=True)
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1)
