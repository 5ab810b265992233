"""`python -m engine transcribe`: the pipeline's transcript in each format, files written to
--output-dir, and bad input as exit status 2 with one line on stderr."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import engine
from engine.speech import write
from tests.audio.clips import speak
from tests.whisper_files import built_weights

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow                  # a Whisper model per command


def run(*args):
    return subprocess.run([sys.executable, "-m", "engine", "transcribe", *map(str, args)], check=False,
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("transcribe")
    weights = built_weights("tiny.en", folder / "whisper-tiny.en")
    clip = speak("Hello there. The weather is nice today.", folder / "hello.wav")
    pipe = engine.pipeline("speech-recognition", model="whisper-tiny.en", weights=weights)
    return folder, weights, clip, pipe(clip)


def test_formats_equal_the_pipeline(setup):
    _folder, weights, clip, result = setup
    for fmt in ("srt", "json"):
        r = run(clip, "--model", "tiny.en", "--weights", weights, "--format", fmt)
        assert r.returncode == 0, r.stderr
        if fmt == "json":
            assert json.loads(r.stdout) == json.loads(write(result, "json"))
        else:
            assert r.stdout == write(result, fmt)
            assert r.stdout.startswith("1\n00:00:00,000 --> ")
        assert "en, " in r.stderr and "real-time factor" in r.stderr


def test_output_dir_and_several_files(setup, tmp_path):
    _folder, weights, clip, result = setup
    second = tmp_path / "again.wav"
    second.write_bytes(clip.read_bytes())
    r = run(clip, second, "--model", "whisper-tiny.en", "--weights", weights, "--format", "vtt",
            "--output-dir", tmp_path / "out", "--language", "English")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    for name in ("hello.vtt", "again.vtt"):
        assert (tmp_path / "out" / name).read_text() == write(result, "vtt")


def one_line_error(r, *needles):
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def test_bad_input_exits_2_with_one_line(setup, tmp_path):
    _folder, weights, clip, _ = setup
    one_line_error(run(tmp_path / "missing.wav", "--model", "tiny.en", "--weights", weights), "missing.wav")
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF\x10\x00\x00\x00WAVEfmt ")
    one_line_error(run(bad, "--model", "tiny.en", "--weights", weights), "bad.wav")
    one_line_error(run(clip, "--model", "tiny.en", "--weights", weights, "--language", "fr"), "language")
    one_line_error(run(clip, "--model", "small"), "whisper-small")


def test_bench_whisper(setup, tmp_path):
    """`bench whisper` on the built tiny.en (ENGINE_DIST: the folder built_weights wrote), without
    the torch reference: a row per backend, and the same text as the pipeline."""
    folder, weights, clip, result = setup
    env = {**os.environ, "ENGINE_DIST": str(Path(weights).parents[2])}
    r = subprocess.run([sys.executable, "-m", "engine", "bench", "whisper", "--models", "whisper-tiny.en",
                        "--device", "simd", "--audio", str(clip), "--no-reference", "--json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout)["models"]["whisper-tiny.en"]["simd"]
    assert row["text"] == result["text"] and row["tokens"] == sum(len(s["tokens"]) for s in result["segments"])
    assert row["real_time_factor"] > 0 and row["encode_s"] > 0 and row["windows"] == 1 and row["graphs"]
    bad = subprocess.run([sys.executable, "-m", "engine", "bench", "mnist", "--audio", str(clip)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600, check=False)
    assert bad.returncode == 2 and "options of bench whisper" in bad.stderr
