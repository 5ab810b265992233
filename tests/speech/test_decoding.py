"""Our decoding and transcription (engine.speech) against openai-whisper's, both over the
reference's own torch model (tests/speech/reference.py), so that only the logic differs:
greedy tokens, timestamps, segments, languages and scores must agree on espeak-ng speech."""
from __future__ import annotations

import numpy as np
import pytest

from engine.audio import load_audio
from engine.errors import InputError
from engine.speech import DecodingOptions, decode, detect_language, transcribe
from tests.audio.clips import speak
from tests.helpers import need_import
from tests.speech.reference import (
    TorchSession,
    TorchWhisper,
    openai_model,
    speech_tokenizer,
)

torch = need_import("torch")
whisper = need_import("whisper", "openai-whisper (pip install --no-deps openai-whisper)")
pytestmark = pytest.mark.slow                  # Whisper models on torch and ours: seconds per test

ENGLISH = "The quick brown fox jumps over the lazy dog. It was a sunny day in the park."
FRENCH = "Bonjour à tous. Aujourd'hui, nous allons parler de la cuisine française et du bon pain."
LONG = ("Speech recognition turns spoken words into text. "
        "The model listens to thirty seconds of audio at a time. "
        "Longer recordings are cut into windows, and the timestamps are carried across them. "
        "Each window is decoded with the text before it as a prompt. "
        "This sentence comes after the first window has ended. "
        "Numbers like twenty one and forty two are spoken as words. "
        "The weather today is cold, with a little rain in the evening. "
        "The train to the city leaves at eight in the morning. "
        "She opened the window and the birds were singing outside. "
        "A good cup of coffee makes the morning much better. "
        "The library closes early on Sundays during the summer. "
        "Thank you for listening to this long recording.")
FLOATS = ("start", "end", "avg_logprob", "no_speech_prob", "compression_ratio", "temperature")


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("speech")
    en = load_audio(speak(ENGLISH, folder / "en.wav"))
    return {"en": en, "silence": np.zeros(5 * 16000, np.float32),
            "fr": load_audio(speak(FRENCH, folder / "fr.wav", voice="fr")),
            "long": load_audio(speak(LONG, folder / "long.wav"))}


def reference_mel(audio, model):
    return whisper.log_mel_spectrogram(torch.from_numpy(audio), model.dims.n_mels,
                                       padding=whisper.audio.N_SAMPLES).numpy()


def ours(which, audio, **options):
    model = openai_model(which)
    return transcribe(TorchWhisper(model), speech_tokenizer(which, model), mel=reference_mel(audio, model),
                      session=TorchSession(model), **options)


def reference(which, audio, **options):
    with torch.no_grad():
        return whisper.transcribe(openai_model(which), torch.from_numpy(audio), fp16=False, verbose=None, **options)


def assert_same_transcript(got, expected):
    assert got["language"] == expected["language"]
    assert got["text"] == expected["text"]
    assert len(got["segments"]) == len(expected["segments"])
    for a, b in zip(got["segments"], expected["segments"]):
        assert a["tokens"] == b["tokens"], (a["text"], b["text"])
        assert (a["id"], a["seek"], a["text"]) == (b["id"], b["seek"], b["text"])
        for key in FLOATS:
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key


@pytest.mark.parametrize("clip", ["en", "long", "silence"])
def test_tiny_en_transcript_equals_the_reference(clips, clip):
    got = ours("tiny.en", clips[clip], temperature=0.0)
    expected = reference("tiny.en", clips[clip], temperature=0.0)
    assert_same_transcript(got, expected)
    if clip == "silence":                       # no speech: the window is skipped
        assert got["segments"] == [] and got["text"] == ""
        return
    assert got["text"].strip()
    segments = got["segments"]
    assert all(s["start"] < s["end"] for s in segments if s["text"])
    if clip == "long":                          # > 30 s: several windows, timestamps carried across
        duration = len(clips[clip]) / 16000
        assert duration > 30
        assert len({s["seek"] for s in segments}) >= 2
        assert segments[-1]["end"] > 30
        assert segments[-1]["end"] <= duration + 1


def test_base_detects_french_and_transcribes_as_the_reference(clips):
    got = ours("base", clips["fr"], temperature=0.0)
    expected = reference("base", clips["fr"], temperature=0.0)
    assert got["language"] == "fr"
    assert_same_transcript(got, expected)


def test_base_translation_and_initial_prompt(clips):
    got = ours("base", clips["fr"], temperature=0.0, task="translate", initial_prompt="A talk about bread.")
    expected = reference("base", clips["fr"], temperature=0.0, task="translate", initial_prompt="A talk about bread.")
    assert_same_transcript(got, expected)


@pytest.mark.parametrize("without_timestamps", [False, True])
def test_one_window_as_whisper_decode(clips, without_timestamps):
    model = openai_model("base")
    mel = reference_mel(clips["en"], model)[:, :3000]
    expected = whisper.decode(model, torch.from_numpy(mel), whisper.DecodingOptions(
        fp16=False, without_timestamps=without_timestamps))
    tokenizer = speech_tokenizer("base", model)
    session = TorchSession(model)
    session.set_audio(TorchWhisper(model).encode(mel))
    got = decode(session, tokenizer, DecodingOptions(without_timestamps=without_timestamps))
    assert got.language == expected.language == "en"
    assert got.tokens == expected.tokens
    assert got.text == expected.text
    for key in ("avg_logprob", "no_speech_prob", "compression_ratio"):
        assert getattr(got, key) == pytest.approx(getattr(expected, key), rel=1e-4, abs=1e-6), key
    code, probs = detect_language(session, tokenizer.specials)
    _, reference_probs = model.detect_language(torch.from_numpy(mel))
    assert code == "en" and set(probs) == set(reference_probs)
    for k, p in probs.items():
        assert p == pytest.approx(reference_probs[k], rel=1e-4, abs=1e-7)


def test_special_tokens_and_suppression_equal_the_reference():
    from whisper.tokenizer import get_tokenizer
    for which, multilingual in (("tiny.en", False), ("base", True)):
        model = openai_model(which)
        s = speech_tokenizer(which, model)
        t = get_tokenizer(multilingual, num_languages=model.num_languages,
                          language="en" if multilingual else None, task="transcribe" if multilingual else None)
        sp = s.specials
        assert (sp.eot, sp.sot, sp.translate, sp.transcribe, sp.sot_lm, sp.sot_prev, sp.no_speech, sp.no_timestamps,
                sp.timestamp_begin) == (t.eot, t.sot, t.translate, t.transcribe, t.sot_lm, t.sot_prev, t.no_speech,
                                        t.no_timestamps, t.timestamp_begin)
        expected = set(t.non_speech_tokens) | {t.transcribe, t.translate, t.sot, t.sot_prev, t.sot_lm, t.no_speech}
        assert set(s.suppress_tokens("-1").tolist()) == expected
        assert s.blank_tokens().tolist() == sorted(t.encode(" ") + [t.eot])
        if multilingual:
            assert sorted(sp.language_tokens) == sorted(t.all_language_tokens)
            assert dict(zip(sp.language_tokens, sp.language_codes)) == dict(zip(t.all_language_tokens,
                                                                               t.all_language_codes))
            assert sp.sot_sequence("fr", "translate") == list(get_tokenizer(
                True, num_languages=model.num_languages, language="fr", task="translate").sot_sequence)
        else:
            assert sp.language_tokens == () and sp.sot_sequence(None, "transcribe") == [t.sot]


@pytest.mark.parametrize("options, field", [
    ({"language": "xx"}, "language"), ({"task": "summarize"}, "task"), ({"temperature": -1.0}, "temperature"),
    ({"best_of": 0, "temperature": 0.5}, "best_of"), ({"beam_size": 5}, "beam_size"),
])
def test_bad_options_name_the_field(clips, options, field):
    model = openai_model("base")
    kwargs = {"temperature": options.pop("temperature")} if "temperature" in options else {}
    with pytest.raises(InputError, match=field):
        transcribe(TorchWhisper(model), speech_tokenizer("base", model), clips["en"],
                   session=TorchSession(model), **kwargs, **options)


def test_english_only_model_refuses_other_languages_and_translation(clips):
    model = openai_model("tiny.en")
    tokenizer = speech_tokenizer("tiny.en", model)
    for options, field in (({"language": "fr"}, "language"), ({"task": "translate"}, "task")):
        with pytest.raises(InputError, match=field):
            transcribe(TorchWhisper(model), tokenizer, clips["en"], session=TorchSession(model), **options)


def test_empty_audio_is_an_input_error():
    model = openai_model("tiny.en")
    with pytest.raises(InputError, match="audio"):
        transcribe(TorchWhisper(model), speech_tokenizer("tiny.en", model), np.zeros(0, np.float32),
                   session=TorchSession(model))


def test_temperature_fallback_is_seeded_and_ends_at_the_last_temperature(clips):
    """A compression ratio above 0 always "fails": every window is decoded at each temperature in
    turn and kept at the last; sampling is repeatable with its seed."""
    options = {"temperature": (0.0, 0.5, 1.0), "compression_ratio_threshold": 0.0, "seed": 3, "sample_len": 32}
    first = ours("tiny.en", clips["en"], **options)
    assert first["segments"] and all(s["temperature"] == 1.0 for s in first["segments"])
    assert ours("tiny.en", clips["en"], **options) == first


def test_best_of_keeps_the_most_likely_sample(clips):
    model = openai_model("tiny.en")
    mel = reference_mel(clips["en"], model)[:, :3000]
    tokenizer = speech_tokenizer("tiny.en", model)
    session = TorchSession(model)
    session.set_audio(TorchWhisper(model).encode(mel))
    one = decode(session, tokenizer, DecodingOptions(temperature=0.8, seed=5, sample_len=32))
    best = decode(session, tokenizer, DecodingOptions(temperature=0.8, seed=5, best_of=4, sample_len=32))
    again = decode(session, tokenizer, DecodingOptions(temperature=0.8, seed=5, sample_len=32))
    assert again.tokens == one.tokens                 # the same seed, the same first sample
    assert best.sum_logprob / len(best.tokens) >= one.sum_logprob / len(one.tokens)
