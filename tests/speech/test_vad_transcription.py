"""Transcription of the speech only (vad=True, engine/speech/utterances.py): the packing of
segments into windows and the map of times back to the recording, exactly; then on real weights
(Whisper tiny.en, Silero VAD) on espeak-ng sentences with silences of known length between them:
the words equal the plain transcription's on the speech (its segments over the pauses left out:
Whisper makes up text in long silences) within a word error rate of 0.15 (and as near the
spoken text as it, within 0.1), every segment lies
in the speech it came from, each pack's text is the plain transcription of that pack's audio,
and silence alone gives an empty transcript."""
from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.audio import SAMPLE_RATE, load_audio
from engine.errors import InputError
from engine.speech.metrics import edit_distance, text_within, word_error_rate
from engine.speech.utterances import TAIL_S, TimeMap, mapped, pack
from tests.audio.clips import speak
from tests.helpers import need_import
from tests.whisper_files import built_weights

SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "It was a sunny day in the park, and the children were playing.",
             "Numbers like twenty one and forty two are spoken as words.",
             "The weather today is cold, with a little rain in the evening.",
             "We will meet again at the station tomorrow morning."]
PAUSES_S = [2.5, 1.0, 4.0, 0.8]                  # the silences between them


def test_packs_are_greedy_in_time_order():
    assert pack([(0, 10), (20, 25), (30, 40), (50, 52)], limit=16) == [[(0, 10), (20, 25)], [(30, 40), (50, 52)]]
    assert pack([(0, 30), (40, 45)], limit=16) == [[(0, 30)], [(40, 45)]]     # too long: a pack alone
    assert pack([(5, 5), (6, 8)], limit=16) == [[(6, 8)]]                      # empty ranges dropped
    assert pack([]) == []


def test_times_map_back_to_the_recording():
    times = TimeMap([(16000, 32000), (64000, 80000)])      # 1-2 s and 4-5 s, end to end: 0-1 s, 1-2 s
    assert times(0.0) == 1.0 and times(0.5) == 1.5
    assert times(1.0) == 4.0                               # a start at the boundary: the next piece's
    assert times(1.0, end=True) == 2.0                     # an end there: the previous piece's
    assert times(2.0, end=True) == 5.0 and times(2.5, end=True) == 5.0     # clamped to the last piece
    segment = {"id": 3, "start": 0.25, "end": 1.5, "text": " hi", "words": [{"word": " hi", "start": 0.25,
                                                                             "end": 1.0, "probability": 0.9}]}
    got = mapped(segment, times)
    assert (got["start"], got["end"], got["id"], got["text"]) == (1.25, 4.5, 3, " hi")
    assert (got["words"][0]["start"], got["words"][0]["end"]) == (1.25, 2.0)
    assert segment["start"] == 0.25                        # the original is left alone


def test_word_error_rate():
    assert word_error_rate("Four score and seven", "four score in seven") == 0.25
    assert word_error_rate("a b c", "a b c d e") == pytest.approx(2 / 3)
    assert word_error_rate("", "") == 0.0
    assert edit_distance(list("kitten"), list("sitting")) == 3


@pytest.fixture(scope="module")
def asr(tmp_path_factory):
    need_import("silero_vad", "the VAD's weights come with PyPI silero-vad (the test extra)")
    from importlib import resources
    folder = tmp_path_factory.mktemp("whisper")
    pipe = engine.pipeline("speech-recognition", model="whisper-tiny.en",
                           weights=built_weights("tiny.en", folder / "whisper-tiny.en"), device="numpy")
    vad_weights = str(resources.files("silero_vad").joinpath("data/silero_vad_16k.safetensors"))
    pipe._voice_activity = engine.pipeline("voice-activity", weights=vad_weights, device="numpy")
    return pipe


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """The sentences with the pauses between them, and where each sentence's sound is (seconds)."""
    folder = tmp_path_factory.mktemp("clips")
    parts, spans, at = [np.zeros(SAMPLE_RATE // 2, np.float32)], [], SAMPLE_RATE // 2
    for i, text in enumerate(SENTENCES):
        audio = load_audio(speak(text, folder / f"{i}.wav"))
        loud = np.flatnonzero(np.abs(audio) > 1e-3)
        spans.append(((at + loud[0]) / SAMPLE_RATE, (at + loud[-1]) / SAMPLE_RATE))
        pause = np.zeros(int(PAUSES_S[i] * SAMPLE_RATE) if i < len(PAUSES_S) else SAMPLE_RATE, np.float32)
        parts += [audio, pause]
        at += audio.size + pause.size
    return np.concatenate(parts), spans


@pytest.mark.slow
def test_the_speech_only_transcript_matches_the_plain_one(asr, recording):
    audio, spans = recording
    plain = asr(audio)
    result = asr(audio, vad=True)
    on_speech = text_within(plain["segments"], result["speech"])
    rate = word_error_rate(on_speech, result["text"])
    print(f"\nWER of vad=True against the plain transcript on the speech: {rate:.3f}\n plain: {plain['text']}"
          f"\n vad:   {result['text']}")
    truth = " ".join(SENTENCES)
    print(f" WER against the text: plain {word_error_rate(truth, plain['text']):.3f}, "
          f"on the speech {word_error_rate(truth, on_speech):.3f}, vad {word_error_rate(truth, result['text']):.3f}")
    assert rate <= 0.15                          # tiny.en on espeak-ng: a word in ten may go either way
    assert word_error_rate(truth, result["text"]) <= word_error_rate(truth, on_speech) + 0.1
    # the VAD found the sentences: pauses of 0.8 s and more separate them, 0.15 s kept each side
    speech = result["speech"]
    assert len(speech) == len(SENTENCES)
    for (start, end), s in zip(spans, speech):
        assert s["start"] <= start + 0.05 and s["end"] >= end - 0.05
        assert s["start"] >= start - 0.6 and s["end"] <= end + 0.6          # the VAD hears tails
    # every segment lies in the speech, its times in the recording; ids in order
    assert [s["id"] for s in result["segments"]] == list(range(len(result["segments"])))
    def inside(t):
        return any(s["start"] - 0.002 <= t <= s["end"] + 0.002 for s in speech)
    for segment in result["segments"]:            # a segment may span pieces: its ends are in speech
        assert inside(segment["start"]) and inside(segment["end"]), segment
    assert result["segments"][-1]["end"] > spans[-1][0]


@pytest.mark.slow
def test_a_pack_is_transcribed_as_its_audio_alone(asr, recording):
    """The pack's pieces end to end and its second of silence, transcribed plainly, give its
    segments' tokens and times (shifted back): the mapping adds nothing and loses nothing."""
    from engine.speech.utterances import samples
    audio, _ = recording
    result = asr(audio, temperature=0.0, vad=True)
    ranges = samples(result["speech"])
    pieces = pack(ranges)[0]
    tail = np.zeros(round(TAIL_S * SAMPLE_RATE), np.float32)          # each pack ends with silence
    clip = np.concatenate([audio[s:e] for s, e in pieces] + [tail])
    alone = asr(clip, temperature=0.0)
    times = TimeMap(pieces)
    count = len(alone["segments"])
    assert [s["tokens"] for s in result["segments"][:count]] == [s["tokens"] for s in alone["segments"]]
    for got, want in zip(result["segments"], alone["segments"]):
        assert got["start"] == pytest.approx(times(want["start"])) and got["end"] == pytest.approx(times(want["end"], True))
    assert pieces[0] == ranges[0]


@pytest.mark.slow
def test_silence_and_bad_options(asr):
    silent = np.zeros(SAMPLE_RATE * 3, np.float32)
    result = asr(silent, vad=True)
    assert result["text"] == "" and result["segments"] == [] and result["speech"] == []
    assert result["language"] == "en"
    with pytest.raises(InputError, match="threshold"):
        asr(silent, vad={"threshold": 2})
    with pytest.raises(InputError, match="vad must be"):
        asr(silent, vad="yes")


@pytest.mark.slow
def test_a_dictation_fed_as_it_comes_ends_as_the_file(asr, recording):
    """The recording fed in pieces of random lengths: an utterance event per speech segment, each
    before the audio after it has all come; then the final transcript equals vad=True's on the
    whole recording (text, tokens and times)."""
    audio, spans = recording
    whole = asr(audio, vad=True)
    dictation = asr.dictation()
    rng = np.random.default_rng(3)
    events, fed = [], 0
    while fed < audio.size:
        n = int(rng.integers(200, 6000))
        for event in dictation.feed(audio[fed:fed + n]):
            events.append((fed + n, event))
        fed += n
    events += [(fed, e) for e in dictation.finish()]
    utterances = [e for _, e in events if e["type"] == "utterance"]       # fed in small pieces: one each
    assert [(u["start"], u["end"]) for u in utterances] == [(s["start"], s["end"]) for s in whole["speech"]]
    for at, event in events[:-1]:                    # all but the last: told while the audio still came
        if event["type"] == "utterance":
            assert at / SAMPLE_RATE <= event["end"] + 0.8     # once the pause closed it, plus a piece
            assert event["speech_end"] == pytest.approx(max(event["end"] - 0.15, event["start"]), abs=1e-3)
    result = dictation.result()
    assert result["text"] == whole["text"] and result["speech"] == whole["speech"]
    assert [(s["tokens"], s["start"], s["end"]) for s in result["segments"]] == \
        [(s["tokens"], s["start"], s["end"]) for s in whole["segments"]]
    packs = [e for _, e in events if e["type"] == "pack"]
    assert "".join(p["text"] for p in packs) == whole["text"]


@pytest.mark.slow
def test_bad_input_gives_a_result_or_a_clear_error(asr, tmp_path):
    """Silence, a 0.2 s clip, clipping noise (a square wave at full scale) and a WAV whose header
    claims 3 hours: a transcript or an AudioError naming the file, with vad=True and in a
    dictation alike."""
    from engine.errors import AudioError
    from tests.audio.wavs import chunk, fmt, riff
    rng = np.random.default_rng(9)
    cases = {"silence": np.zeros(SAMPLE_RATE * 5, np.float32),
             "short": rng.normal(0, 0.1, SAMPLE_RATE // 5).astype(np.float32),
             "clipping": np.sign(rng.normal(0, 1, SAMPLE_RATE * 3)).astype(np.float32)}
    for name, audio in cases.items():
        result = asr(audio, vad=True)
        assert isinstance(result["text"], str) and result["language"] == "en", name
        dictation = asr.dictation()
        dictation.feed(audio)
        dictation.finish()
        assert dictation.result()["text"] == result["text"], name
    pcm = (rng.uniform(-0.5, 0.5, SAMPLE_RATE) * 32767).astype("<i2").tobytes()
    claimed = tmp_path / "three-hours.wav"
    claimed.write_bytes(riff(fmt(), chunk(b"data", pcm, size=3 * 3600 * SAMPLE_RATE * 2)))
    with pytest.raises(AudioError, match="three-hours.wav"):
        asr(str(claimed), vad=True)


@pytest.mark.slow
def test_a_dictation_that_fell_behind_drafts_what_closed_together(asr, recording):
    """Fed the whole recording at once (as a worker that was busy gets it): the utterances that
    closed are drafted in one transcription, one event; the final transcript is still the file's."""
    audio, _ = recording
    dictation = asr.dictation()
    events = dictation.feed(audio) + dictation.finish()
    utterances = [e for e in events if e["type"] == "utterance"]
    assert len(utterances) == 1 and utterances[0]["start"] < utterances[0]["end"]
    assert dictation.result()["text"] == asr(audio, vad=True)["text"]


def test_the_benchmark_recording_is_the_sample_with_pauses():
    """engine.bench.speech.paused_recording: the sample's sentences (cut in its silences of 0.2 s
    or more) in order, as many times as fit, with pauses that make about the share asked."""
    from engine.bench.speech import paused_recording, sentences
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    gap, short_gap = np.zeros(SAMPLE_RATE // 2, np.float32), np.zeros(SAMPLE_RATE // 20, np.float32)
    sample = np.concatenate([tone, short_gap, tone, gap, tone, gap, tone])          # 3 sentences
    pieces = sentences(sample)
    assert len(pieces) == 3 and sum(p.size for p in pieces) == sample.size
    audio, cycles = paused_recording(sample, seconds=60, pauses=0.45)
    assert cycles == round(60 * 0.55 * SAMPLE_RATE / sample.size)
    assert 0.35 <= 1 - cycles * sample.size / audio.size <= 0.55
    assert np.array_equal(audio[:pieces[0].size], pieces[0])
