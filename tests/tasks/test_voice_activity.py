"""The voice-activity task (engine/tasks/voice_activity.py) on Silero VAD's real weights (the
silero-vad package's safetensors): segments in seconds equal the package's get_speech_timestamps
on the same audio; a stream fed in pieces of any length gives the same segments, each no later
than the audio that settles it; `python -m engine vad --json` prints them; silence, a 0.2 s
clip and bad options give an answer or a clear error."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import engine
from engine.errors import InputError
from tests.helpers import need_import

ROOT = Path(__file__).resolve().parents[2]
SPEECH = ROOT / "samples" / "speech" / "gettysburg-en.wav"


@pytest.fixture(scope="module")
def weights():
    from importlib import resources
    need_import("silero_vad", "the weights come with the reference package (PyPI silero-vad, the test extra)")
    return str(resources.files("silero_vad").joinpath("data/silero_vad_16k.safetensors"))


@pytest.fixture(scope="module")
def vad(weights):
    return engine.pipeline("voice-activity", weights=weights, device="numpy")


@pytest.fixture(scope="module")
def paused():
    from engine.audio import load_audio
    speech = load_audio(str(SPEECH))
    gap = np.zeros(16000 * 3, np.float32)
    return np.concatenate([speech[:16000 * 6], gap, speech[16000 * 6:16000 * 14], gap[:16000]])


def test_segments_equal_the_packages(vad, weights, paused):
    torch = need_import("torch", "the reference runs on torch")
    silero = need_import("silero_vad", "the reference (PyPI silero-vad, the test extra)")
    from safetensors.numpy import load_file
    from tests.models.test_silero_vad import NAMES
    reference = silero.load_silero_vad()
    tensors = load_file(weights)
    reference._model.load_state_dict({ours: torch.from_numpy(tensors[name]) for ours, name in NAMES.items()})
    for options in ({}, {"max_speech_s": 4.0}, {"min_silence_ms": 500, "threshold": 0.6}):
        reference.reset_states()
        names = {"max_speech_s": "max_speech_duration_s", "min_silence_ms": "min_silence_duration_ms",
                 "threshold": "threshold"}
        want = silero.get_speech_timestamps(torch.from_numpy(paused), reference,
                                            **{names[k]: v for k, v in options.items()})
        got = vad(paused, **options)
        assert got == [{"start": round(s["start"] / 16000, 3), "end": round(s["end"] / 16000, 3)} for s in want]
    plain = vad(paused)
    assert len(plain) >= 2 and any(a["end"] <= 6.3 and b["start"] >= 8.7 for a, b in zip(plain, plain[1:])), plain


def test_a_stream_in_pieces_gives_the_same_segments(vad, paused):
    whole = vad(paused)
    rng = np.random.default_rng(2)
    for _ in range(3):
        stream, got, at = vad.stream(), [], 0
        while at < paused.size:
            n = int(rng.integers(1, 4000))
            for segment in stream.feed(paused[at:at + n]):
                assert segment["end"] <= (at + n) / 16000           # settled by the audio come so far
                got.append(segment)
            at += n
        got += stream.finish()
        assert got == whole
        with pytest.raises(InputError, match="finished"):
            stream.feed(paused[:10])


def test_the_command_line_prints_the_segments(vad, weights):
    out = subprocess.run([sys.executable, "-m", "engine", "vad", str(SPEECH), "--json", "--weights", weights,
                          "--device", "numpy"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["segments"] == vad(str(SPEECH)) and result["file"] == str(SPEECH)
    assert 0 < result["speech_s"] <= result["audio_s"]


def test_silence_short_clips_and_bad_options(vad):
    assert vad(np.zeros(16000 * 5, np.float32)) == []
    assert vad(np.zeros(3200, np.float32)) == []                     # 0.2 s
    assert vad(np.zeros(0, np.float32)) == []
    loud = np.clip(np.random.default_rng(0).standard_normal(16000 * 2) * 10, -1, 1).astype(np.float32)
    assert isinstance(vad(loud), list)                               # clipping noise: an answer
    assert vad.probabilities(np.zeros(1000, np.float32)).shape == (2,)
    with pytest.raises(InputError, match="threshold"):
        vad(np.zeros(100, np.float32), threshold=2)
    with pytest.raises(InputError, match="unknown voice-activity option"):
        vad.stream(window=3)
    with pytest.raises(InputError, match="audio must be"):
        vad(3.5)
