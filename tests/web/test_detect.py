"""The Detect card in headless Chromium: a photo gives the native pipeline's detections (same class,
IoU >= 0.99 with the native box, score within 0.01) for both tasks; the camera (Chromium's fake
capture device playing a .y4m clip made here from bus.jpg) shows, for the frame it analysed last,
the detections the file path gives for that same frame; bad files get clear errors."""
from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from tests.helpers import need
from tests.web.conftest import BASE_ARGS, CHROMIUM, ROOT, Session

BUS = ROOT / "samples" / "detection" / "bus.jpg"
MODELS = {"object-detection": "yolov10n", "pose-estimation": "yolo11n_pose"}
THRESHOLD = 0.25
LIST = "[data-testid=detect-list]"


@pytest.fixture(scope="module")
def natives(site):
    """The native pipelines on the site's own converted weights."""
    import engine
    pipes = {}
    for task, name in MODELS.items():
        index = site / "models" / name / "model.safetensors.index.json"
        need(index.exists(), f"the site has no {name} (python build.py --models {name})")
        pipes[task] = engine.pipeline(task, weights=str(index))
    return pipes


def iou(a: dict, b: dict) -> float:
    w = max(0.0, min(a["xmax"], b["xmax"]) - max(a["xmin"], b["xmin"]))
    h = max(0.0, min(a["ymax"], b["ymax"]) - max(a["ymin"], b["ymin"]))
    inter = w * h
    area = (a["xmax"] - a["xmin"]) * (a["ymax"] - a["ymin"]) + (b["xmax"] - b["xmin"]) * (b["ymax"] - b["ymin"])
    return inter / (area - inter)


def assert_same(got: list[dict], want: list[dict], min_iou=0.99, score=0.01, where=""):
    """Each wanted detection has one got of the same class with IoU >= min_iou and a score within
    `score`; a detection so close to the threshold that the tolerance decides it may be on one side only."""
    left = list(got)
    for w in want:
        same = [g for g in left if g.get("label") == w.get("label")]
        best = max(same, key=lambda g: iou(g["box"], w["box"]), default=None)
        if best is None or iou(best["box"], w["box"]) < min_iou:
            assert w["score"] < THRESHOLD + score, (where, "missing", w, got)
            continue
        assert abs(best["score"] - w["score"]) <= score, (where, best, w)
        if "keypoints" in w:
            near = [abs(p["x"] - q["x"]) + abs(p["y"] - q["y"]) for p, q in zip(best["keypoints"], w["keypoints"])
                    if q["score"] > 0.5]
            assert [p["name"] for p in best["keypoints"]] == [q["name"] for q in w["keypoints"]]
            assert max(near, default=0) < 2.0, (where, near)
        left.remove(best)
    assert all(g["score"] < THRESHOLD + score for g in left), (where, "extra", left)


def result(page, timeout=240_000) -> list[dict]:
    """The card's detections once its list says done (an error shown fails with its text)."""
    page.wait_for_function(f"(({{dataset: d}}) => ['done', 'error'].includes(d.state) && d.busy !== 'true')"
                           f"(document.querySelector('{LIST}'))", timeout=timeout)
    if page.get_attribute(LIST, "data-state") == "error":
        raise AssertionError(page.text_content("[data-testid=detect-error]"))
    return json.loads(page.get_attribute(LIST, "data-result"))


def expect_new(page):
    page.evaluate(f"document.querySelector('{LIST}').dataset.state = 'waiting'")


def choose(page, task: str, size: int = 640):
    page.select_option("[data-testid=detect-task]", task)
    page.select_option("[data-testid=detect-size]", str(size))


def photo(page, path) -> list[dict]:
    expect_new(page)
    page.set_input_files("[data-testid=detect-input]", str(path))
    return result(page)


def test_a_photo_gives_the_native_detections(dev_server, session_factory, natives):
    s = session_factory(dev_server.url)
    page = s.open()
    assert not [u for u in s.requests if "/models/yolo" in u], "weights load only when the card opens"
    s.open_card("detect")
    for task in MODELS:
        for size in (640, 320):
            choose(page, task, size)
            got = photo(page, BUS)
            want = natives[task](str(BUS), threshold=THRESHOLD, size=size)
            assert want and len(got) >= 1
            assert_same(got, want, where=f"{task} at {size}")
            assert page.text_content("[data-testid=detect-count]") == str(len(got))
            assert float(page.text_content("[data-testid=detect-ms]")) > 0
            assert "network" in page.text_content("[data-testid=detect-split]")
            print(f"\n{task} at {size} in Chromium: {page.text_content('[data-testid=detect-ms]')} ms "
                  f"({page.text_content('[data-testid=detect-split]')})")
    # the photo shows in its own proportions, under a transparent overlay of the same box
    shown = page.evaluate("""() => ['still', 'overlay'].map((id) => {
        const e = document.getElementById(`detect-${id}`), r = e.getBoundingClientRect();
        return [r.width, r.height, getComputedStyle(e).backgroundColor]; })""")
    assert shown[0][:2] == shown[1][:2] and abs(shown[0][0] / shown[0][1] - 810 / 1080) < 0.01, shown
    assert shown[1][2] in ("rgba(0, 0, 0, 0)", "transparent"), shown
    licence = page.text_content("[data-testid=detect-licence]")
    assert "AGPL-3.0" in licence, licence
    weights = [r for r in s.responses if "/models/yolo" in r.url and r.url.endswith(".safetensors")]
    assert weights and all(r.status in (200, 206) for r in weights)
    assert s.foreign_requests() == [] and s.console_errors == []


def test_changing_the_options_runs_the_photo_again(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open("index.html#detect")
    choose(page, "object-detection", 640)
    first = photo(page, BUS)
    expect_new(page)
    page.select_option("[data-testid=detect-size]", "320")
    again = result(page)
    assert {d["label"] for d in again} & {d["label"] for d in first}
    assert "(input 320x256)" in page.text_content("[data-testid=detect-split]")      # 810x1080 fitted, rows x columns


def test_bad_files_give_clear_errors_and_the_card_keeps_working(dev_server, session_factory, tmp_path):
    s = session_factory(dev_server.url)
    page = s.open("index.html#detect")
    data = BUS.read_bytes()
    huge = bytes.fromhex("89504e470d0a1a0a") + (13).to_bytes(4, "big") + b"IHDR" + \
        (20000).to_bytes(4, "big") + (20000).to_bytes(4, "big") + bytes([8, 2, 0, 0, 0]) + b"\0" * 4
    cases = {"cut.jpg": (data[:len(data) // 2], "cut short"), "empty.png": (b"", "empty"),
             "huge.png": (huge, "too large"), "notes.png": (b"this is not an image at all", "cannot decode"),
             "zero.png": (huge[:16] + bytes(8) + huge[24:], "0 pixels")}
    for name, (body, says) in cases.items():
        path = tmp_path / name
        path.write_bytes(body)
        expect_new(page)
        page.set_input_files("[data-testid=detect-input]", str(path))
        page.wait_for_function(f"document.querySelector('{LIST}').dataset.state === 'error'", timeout=60_000)
        text = page.text_content("[data-testid=detect-error]")
        assert name in text and says in text, (name, text)
    assert photo(page, BUS)
    assert page.is_hidden("[data-testid=detect-error]")
    assert page.text_content("[data-testid=engine-status]") == "ready"


# --- the camera ----------------------------------------------------------------------------------
def letterboxed_frame(width=640, height=480) -> np.ndarray:
    """bus.jpg fitted into a width x height frame (black bars), as a webcam would frame it."""
    from engine.vision import read_image
    from engine.vision.detection import resize_linear
    image = read_image(str(BUS))[:, :, :3]
    r = min(width / image.shape[1], height / image.shape[0])
    w, h = round(image.shape[1] * r), round(image.shape[0] * r)
    frame = np.zeros((height, width, 3), np.uint8)
    top, left = (height - h) // 2, (width - w) // 2
    frame[top:top + h, left:left + w] = resize_linear(np.ascontiguousarray(image), w, h)
    return frame


def write_y4m(path, rgb: np.ndarray, frames: int = 10) -> None:
    """An I420 .y4m clip of `frames` identical frames (BT.601 limited range, 2x2 chroma means)."""
    x = rgb.astype(np.float64)
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    y = 16 + 0.257 * r + 0.504 * g + 0.098 * b
    u = 128 - 0.148 * r - 0.291 * g + 0.439 * b
    v = 128 + 0.439 * r - 0.368 * g - 0.071 * b
    half = lambda c: c.reshape(c.shape[0] // 2, 2, c.shape[1] // 2, 2).mean((1, 3))   # noqa: E731
    planes = b"".join(np.clip(np.rint(p), 0, 255).astype(np.uint8).tobytes() for p in (y, half(u), half(v)))
    height, width = rgb.shape[:2]
    with open(path, "wb") as f:
        f.write(f"YUV4MPEG2 W{width} H{height} F30:1 Ip A1:1 C420jpeg\n".encode())
        for _ in range(frames):
            f.write(b"FRAME\n" + planes)


@pytest.fixture(scope="module")
def camera_browser(playwright_driver, tmp_path_factory):
    """Chromium whose camera is a fake capture device playing bus.jpg in a 640x480 clip."""
    clip = tmp_path_factory.mktemp("camera") / "bus.y4m"
    write_y4m(clip, letterboxed_frame())
    b = playwright_driver.chromium.launch(executable_path=CHROMIUM, args=BASE_ARGS + [
        "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
        f"--use-file-for-fake-video-capture={clip}"])
    yield b
    b.close()


@pytest.mark.parametrize("task", list(MODELS))
def test_the_camera_shows_what_the_file_path_gives_for_the_same_frame(dev_server, camera_browser, natives, task,
                                                                      tmp_path):
    s = Session(camera_browser, dev_server.url)
    try:
        s.context.grant_permissions(["camera"])
        page = s.open("index.html#detect")
        choose(page, task, 320)
        page.click("[data-testid=detect-camera]")
        page.wait_for_function(f"+document.querySelector('{LIST}').dataset.frames >= 3", timeout=240_000)
        fps = float(page.text_content("[data-testid=detect-fps]"))
        print(f"\n{task} live at 320 in Chromium: {fps} frames/s, {page.text_content('[data-testid=detect-ms]')} ms "
              f"a frame ({page.text_content('[data-testid=detect-split]')})")
        assert fps > 0 and page.is_visible("[data-testid=detect-video]")
        page.click("[data-testid=detect-stop]")
        page.wait_for_function("!document.querySelector('[data-testid=detect-camera]').disabled", timeout=60_000)
        assert page.is_visible("[data-testid=detect-still]")
        live = json.loads(page.get_attribute(LIST, "data-result"))          # the last analysed frame's
        png = page.evaluate("document.querySelector('[data-testid=detect-still]').toDataURL('image/png')")
        frame = tmp_path / "frame.png"
        frame.write_bytes(base64.b64decode(png.split(",", 1)[1]))
        from engine.vision import read_image
        pixels = read_image(str(frame))
        assert pixels.shape[:2] == (240, 320)           # the 640x480 frame, scaled by the browser to fit 320
        assert_same(photo(page, frame), live, where="the same frame by file")
        # and natively on that frame: the same detections as the card showed live
        assert_same(live, natives[task](pixels[:, :, :3], threshold=THRESHOLD, size=320), where="natively")
        labels = {d.get("label", "person") for d in live}
        assert "person" in labels, live
        assert s.console_errors == []
    finally:
        s.close()


def test_without_a_camera_the_card_says_why(dev_server, session_factory):
    page = session_factory(dev_server.url).open("index.html#detect")
    page.click("[data-testid=detect-camera]")
    page.wait_for_selector("[data-testid=detect-error]:not([hidden])", timeout=60_000)
    assert "the camera could not start" in page.text_content("[data-testid=detect-error]")
    assert page.is_enabled("[data-testid=detect-camera]") and page.is_disabled("[data-testid=detect-stop]")
    assert photo(page, BUS)                                              # and photos still work


# --- the bench page's YOLO section ---------------------------------------------------------------
def test_the_bench_page_times_yolo_beside_onnx_runtime_web_and_a_live_loop(dev_server, session_factory, site):
    """It runs, reports and compares (timings belong to docs/benchmarks.md): ours and the peer on
    the same inputs, the peer's output equal to ours, a live loop's frames/s."""
    from tests.web.test_bench_peers import run_bench
    s = session_factory(dev_server.url)
    results = run_bench(s, "yolo=simd&yolo_sizes=320&yolo_rounds=1&yolo_repeat=1&yolo_frames=3", timeout_ms=600_000)
    page = s.page
    yolo = results["yolo"]
    cases = {"yolov10n_320", "yolo11n_pose_320"}
    (ours,) = yolo["ours"]
    assert ours["device"] == "simd" and set(ours["cases"]) == cases and all(v > 0 for v in ours["cases"].values())
    table = page.text_content("[data-testid=yolo-table]")
    exported = all((site / "peers" / "onnxruntime" / f"{name}-320.onnx").exists() for name in ("yolov10n", "yolo11n-pose"))
    if exported:                                # the ultralytics exports were in the build's cache
        assert {r["case"] for r in yolo["ratios"]} == cases and all(r["ratio"] > 0 for r in yolo["ratios"])
        detect, pose = yolo["checks"]["yolov10n_320"], yolo["checks"]["yolo11n_pose_320"]
        assert detect["detections"] >= 1 and detect["min_iou"] > 0.99 and detect["max_score_diff"] < 0.01, detect
        assert pose["max_box_diff"] < 0.5 and pose["max_score_diff"] < 0.01, pose
    else:
        assert "its export was not built" in table, table
    live = {run["task"]: run for run in yolo["live"]}
    assert set(live) == {"object-detection", "pose-estimation"}
    for run in live.values():
        assert run["frames"] == 3 and run["fps"] > 0 and run["network_ms"] > 0 and run["detections"] >= 1, run
    assert "frames/s" in table and not s.foreign_requests()
