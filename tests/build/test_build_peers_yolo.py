"""The YOLO peers of the bench page (buildtools/peers.py): ultralytics' own ONNX exports, made
outside the build by scripts/yolo_reference.py --export-onnx into <cache>/peers/, copied into
dist/peers/onnxruntime/ when there, and named with the command that makes them when not."""
from buildtools import peers
from buildtools.steps import Builder


def test_exports_found_in_the_cache_are_copied_and_the_missing_ones_named(tmp_path):
    cache = tmp_path / "cache"
    (cache / "peers").mkdir(parents=True)
    present = {"yolo11n-pose-640": b"pose 640", "yolov10n-320": b"v10 320"}
    for name, data in present.items():
        (cache / "peers" / f"{name}.onnx").write_bytes(data)
    lines = []
    b = Builder(tmp_path / "dist", log=lines.append)
    missing = peers.copy_yolo_onnx(b, cache, log=lines.append)
    folder = tmp_path / "dist" / "peers" / "onnxruntime"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == {f"{n}.onnx": d for n, d in present.items()}
    assert missing == ["yolo11n-pose-320", "yolov10n-640"]
    (line,) = [line for line in lines if "peers-onnx-yolo:" in line]
    assert "yolo11n-pose-320, yolov10n-640" in line and "scripts/yolo_reference.py --export-onnx" in line
    assert str(cache / "peers") in line


def test_a_changed_export_is_copied_again(tmp_path):
    cache = tmp_path / "cache"
    (cache / "peers").mkdir(parents=True)
    for name in peers.YOLO_ONNX:
        (cache / "peers" / f"{name}.onnx").write_bytes(name.encode())
    b = Builder(tmp_path / "dist", log=lambda line: None)
    assert peers.copy_yolo_onnx(b, cache) == []
    (cache / "peers" / "yolov10n-640.onnx").write_bytes(b"exported again")
    b = Builder(tmp_path / "dist", log=lambda line: None)
    peers.copy_yolo_onnx(b, cache)
    assert (tmp_path / "dist" / "peers" / "onnxruntime" / "yolov10n-640.onnx").read_bytes() == b"exported again"
