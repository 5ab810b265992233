"""`python -m engine classify` and `bench effnet`: output formats, exit codes, one-line errors."""
import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args):
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def one_line_errors(r, *needles):
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err.splitlines()


def png(width: int, height: int, body: bytes = b"") -> bytes:
    """A PNG whose header claims width x height (valid CRCs, next to no pixel data)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(body)) + chunk(b"IEND", b""))


def test_help():
    r = run("classify", "--help")
    assert r.returncode == 0 and "--top" in r.stdout and "--weights" in r.stdout


def test_json_lines(effnet_weights, sample_photos):
    photos = [sample_photos["chelsea.png"], sample_photos["rocket.jpg"]]
    r = run("classify", *photos, "--json", "--weights", effnet_weights)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["input"] for x in lines] == [str(p) for p in photos]
    for x in lines:
        preds = x["predictions"]
        assert len(preds) == 5 and all(set(p) == {"label", "index", "score"} for p in preds)
        assert [p["score"] for p in preds] == sorted((p["score"] for p in preds), reverse=True)
    assert lines[0]["predictions"][0]["index"] in range(281, 286)          # a cat
    assert lines[1]["predictions"][0]["label"] == "missile"


def test_text_output_and_top(effnet_weights, sample_photos):
    photo = sample_photos["coffee.png"]
    r = run("classify", photo, "--top", "3", "--weights", effnet_weights)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{photo}: espresso (") and r.stdout.count("%)") == 3


def test_bad_images_exit_2_one_line_each(effnet_weights, sample_photos, tmp_path):
    jpeg = sample_photos["rocket.jpg"].read_bytes()
    bad = {"truncated.jpg": jpeg[:len(jpeg) // 3], "notes.txt": b"not an image\n",
           "huge.png": png(30000, 30000), "zero.png": png(0, 10), "empty.png": b""}
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
    good = sample_photos["chelsea.png"]
    r = run("classify", good, *(tmp_path / n for n in bad), "--json", "--weights", effnet_weights)
    errors = one_line_errors(r, *bad)
    assert len(errors) == len(bad)
    assert json.loads(r.stdout)["input"] == str(good)                      # the good one still answered
    assert "30000x30000" in next(e for e in errors if "huge.png" in e)
    assert "zero size" in next(e for e in errors if "zero.png" in e)
    assert "truncated" in next(e for e in errors if "truncated.jpg" in e)


def test_bad_arguments_and_weights(effnet_weights, sample_photos, tmp_path):
    photo = sample_photos["chelsea.png"]
    assert len(one_line_errors(run("classify", photo, "--top", "0", "--weights", effnet_weights), "--top")) == 1
    assert len(one_line_errors(run("classify", photo, "--top", "1001", "--weights", effnet_weights),
                               "--top")) == 1
    missing = tmp_path / "missing" / "model.safetensors.index.json"
    assert len(one_line_errors(run("classify", photo, "--weights", missing), str(missing))) == 1
    assert len(one_line_errors(run("classify"), "IMAGE")) == 1


@pytest.mark.slow
def test_bench_effnet_json(effnet_weights):
    r = run("bench", "effnet", "--repeat", "1", "--json", "--weights", effnet_weights)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["model"] == "efficientnet_lite0" and [c["batch"] for c in result["cases"]] == [1, 8]
    assert all(c["engine_ms"] > 0 and c["torch_ms"] > 0 and c["ratio"] > 0 for c in result["cases"])
