"""engine.pipeline("speech-recognition") end to end (our WAV reader, log-mel, Whisper model and
decoding) against openai-whisper's transcribe() on the same samples: greedy tokens identical
on espeak-ng speech in English (tiny.en, also longer than 30 s) and French (base, detected)."""
from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.audio import load_audio
from engine.errors import EngineError, InputError
from tests.audio.clips import speak
from tests.helpers import need, need_import
from tests.speech.reference import openai_model
from tests.speech.test_decoding import ENGLISH, FRENCH, LONG
from tests.whisper_files import built_weights

torch = need_import("torch")
whisper = need_import("whisper", "openai-whisper (pip install --no-deps openai-whisper)")
pytestmark = pytest.mark.slow                  # Whisper models on torch and ours: seconds per test


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("whisper")


@pytest.fixture(scope="module")
def tiny(folder):
    return engine.pipeline("speech-recognition", model="whisper-tiny.en",
                           weights=built_weights("tiny.en", folder / "whisper-tiny.en"))


@pytest.fixture(scope="module")
def clips(folder):
    return {"en": speak(ENGLISH, folder / "en.wav"), "fr": speak(FRENCH, folder / "fr.wav", voice="fr"),
            "long": speak(LONG, folder / "long.wav")}


def reference(which, path):
    with torch.no_grad():
        return whisper.transcribe(openai_model(which), torch.from_numpy(load_audio(path)), temperature=0.0,
                                  fp16=False, verbose=None)


def same_tokens(got, expected):
    assert got["language"] == expected["language"]
    assert [s["tokens"] for s in got["segments"]] == [s["tokens"] for s in expected["segments"]]
    assert got["text"] == expected["text"]
    for a, b in zip(got["segments"], expected["segments"]):
        assert (a["start"], a["end"]) == pytest.approx((b["start"], b["end"]))


@pytest.mark.parametrize("clip", ["en", "long"])
def test_tiny_en_tokens_equal_openai_whisper(tiny, clips, clip):
    result = tiny(clips[clip], temperature=0.0)
    same_tokens(result, reference("tiny.en", clips[clip]))
    if clip == "long":
        assert result["segments"][-1]["end"] > 30
    assert set(result) == {"text", "language", "segments"}
    assert {"id", "start", "end", "text", "tokens", "avg_logprob", "no_speech_prob", "compression_ratio",
            "temperature"} <= set(result["segments"][0])


def test_base_detects_french_with_openai_whisper_tokens(folder, clips):
    base = engine.pipeline("speech-recognition", model="whisper-base",
                           weights=built_weights("base", folder / "whisper-base"))
    result = base(clips["fr"], temperature=0.0)
    assert result["language"] == "fr"
    same_tokens(result, reference("base", clips["fr"]))
    assert base(clips["fr"], language="French", temperature=0.0)["segments"] == result["segments"]


def test_a_path_wav_bytes_and_samples_agree(tiny, clips):
    by_path = tiny(clips["en"], temperature=0.0)
    assert tiny(clips["en"].read_bytes(), temperature=0.0) == by_path
    assert tiny(load_audio(clips["en"]), temperature=0.0) == by_path
    seen = []
    assert tiny(str(clips["en"]), temperature=0.0, on_segment=seen.append)["segments"] == seen


@pytest.mark.parametrize("options, field", [({"language": "xx"}, "language"), ({"language": "fr"}, "language"),
                                            ({"task": "summarize"}, "task"), ({"beam_size": 5}, "beam_size")])
def test_bad_options_name_the_field(tiny, clips, options, field):
    with pytest.raises(InputError, match=field):
        tiny(clips["en"], **options)


def test_bad_audio(tiny, tmp_path):
    with pytest.raises(InputError, match="empty"):
        tiny(np.zeros(0, np.float32))
    with pytest.raises(InputError, match="audio must be"):
        tiny(3.5)
    with pytest.raises(EngineError, match="missing.wav"):
        tiny(str(tmp_path / "missing.wav"))


def test_moved_to_another_backend_gives_the_same_tokens(tiny, clips):
    from engine.device import unavailable_reason
    other = "simd"
    need(unavailable_reason(other) is None, f"the simd backend: {unavailable_reason(other)}")
    before = tiny(clips["en"], temperature=0.0)
    try:
        tiny.to(other)
        after = tiny(clips["en"], temperature=0.0)
    finally:
        tiny.to("numpy")
    assert [s["tokens"] for s in after["segments"]] == [s["tokens"] for s in before["segments"]]
