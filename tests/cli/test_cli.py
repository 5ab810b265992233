"""`python -m engine`: output formats, exit codes, one-line errors."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples" / "digits"


def run(*args, input=None):
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, input=input)


def test_help():
    r = run("--help")
    assert r.returncode == 0 and "digit" in r.stdout and "bench" in r.stdout
    assert run("digit", "--help").returncode == 0


def test_digit_json_lines():
    r = run("digit", str(SAMPLES / "7.png"), str(SAMPLES / "3.png"), "--json", "--top", "2")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["input"] for x in lines] == [str(SAMPLES / "7.png"), str(SAMPLES / "3.png")]
    assert [x["predictions"][0]["label"] for x in lines] == ["7", "3"]
    assert all(len(x["predictions"]) == 2 and set(x["predictions"][0]) == {"label", "score"} for x in lines)


def test_digit_text_output():
    r = run("digit", str(SAMPLES / "0.png"))
    assert r.returncode == 0 and r.stdout.startswith(f"{SAMPLES / '0.png'}: 0 (")


def one_line_error(r, *needles):
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err


def test_bad_images_exit_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    one_line_error(run("digit", str(bad)), "bad.png")
    one_line_error(run("digit", str(tmp_path / "missing.png")), "missing.png")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    one_line_error(run("digit", str(text)), "notes.txt")


def test_good_and_bad_images_together(tmp_path):
    bad = tmp_path / "empty.png"
    bad.write_bytes(b"")
    r = run("digit", str(SAMPLES / "1.png"), str(bad), "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["predictions"][0]["label"] == "1"
    assert "empty.png" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_bad_arguments_exit_2():
    one_line_error(run("digit"), "IMAGE")
    one_line_error(run("digit", str(SAMPLES / "1.png"), "--top", "0"), "--top")
    one_line_error(run("digit", str(SAMPLES / "1.png"), "--device", "cuda"), "available: numpy")
    one_line_error(run("frobnicate"), "invalid choice")


@pytest.mark.parametrize("damage,needle", [
    (lambda b: b[:4], "truncated"),
    (lambda b: b[:len(b) // 2], "truncated"),
    (lambda b: (10 ** 12).to_bytes(8, "little") + b[8:], "header"),
    (lambda b: b[:8] + b"[" + b[9:], "JSON"),
])
def test_bad_weights_exit_2_naming_the_file(tmp_path, damage, needle):
    weights = tmp_path / "broken.safetensors"
    weights.write_bytes(damage((ROOT / "models" / "mnist_cnn.safetensors").read_bytes()))
    r = run("digit", str(SAMPLES / "1.png"), "--weights", str(weights))
    one_line_error(r, "broken.safetensors")
    assert needle.lower() in r.stderr.lower()


@pytest.mark.slow
def test_bench_runs_and_reports_a_ratio():
    r = run("bench", "mnist", "--repeat", "2", "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert [c["batch"] for c in result["cases"]] == [1, 64]
    assert all(c["engine_ms"] > 0 and c["ratio"] > 0 for c in result["cases"])


def test_threads_option_sets_the_kernels_count_and_bench_says_it():
    """`python -m engine --threads N COMMAND`: the C kernels run on N threads, which bench reports."""
    r = run("--threads", "3", "bench", "gemm", "--repeat", "1", "--device", "simd")
    assert r.returncode == 0, r.stderr
    assert "3 threads" in r.stdout.splitlines()[0]
    one_line_error(run("--threads", "0", "tasks"), "positive whole number")
