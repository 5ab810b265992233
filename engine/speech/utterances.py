"""Transcription of the speech only: a recording's speech segments (a voice-activity detector's,
engine.pipeline("voice-activity")) packed into windows of at most 30 s, each window's segments
put end to end with the pauses between them left out, and the transcript's times mapped back to
the recording.

    packs = pack(segments, N_SAMPLES)     # [[(start, end), ...], ...] in samples, each <= 30 s
    result = transcribe_speech(model, tokenizer, audio, segments, session=session)
    result["segments"]                    # times in the recording, as transcribe() gives them
    result["speech"]                      # the segments transcribed, [{"start", "end"}] in seconds

Why packs and not a window per segment: Whisper's encoder costs the same for 1 s of audio as for
30 s (a window is always 3000 mel frames), so an utterance a window would cost more than the plain
transcription; packed, the pauses are what is saved. faster-whisper's VAD filter packs the same
way (its collect_chunks); the packing here is greedy in time order, so a stream can pack as the
segments come: a pack is final once the next segment does not fit in it (engine.speech.dictation).

Each pack is transcribed by engine.speech.transcribe on its own: initial_prompt before each, the
previous text as the prompt only between the windows of a pack (condition_on_previous_text), the
language detected on the first pack when not given and kept for the rest. Not the previous pack's
text: as a plain-text prompt (no timestamp tokens in it, unlike transcribe's own prompts) it made
tiny.en give one segment without timestamps and drop three quarters of a pack's words on the
benchmark recording (engine.bench.speech.paused_recording). faster-whisper's batched VAD
transcription does not carry text between packs either.
"""
from __future__ import annotations

import bisect

import numpy as np

from ..audio import N_SAMPLES, SAMPLE_RATE
from ..errors import InputError
from .transcribe import transcribe


def pack(segments, limit: int = N_SAMPLES) -> list[list[tuple[int, int]]]:
    """Consecutive (start, end) sample ranges in time order, grouped greedily: a group takes the
    next range while its total length stays <= limit (a longer range is a group alone)."""
    packs: list[list[tuple[int, int]]] = []
    size = 0
    for start, end in segments:
        if end <= start:
            continue
        if packs and size + (end - start) <= limit:
            packs[-1].append((start, end))
            size += end - start
        else:
            packs.append([(start, end)])
            size = end - start
    return packs


class TimeMap:
    """Times in a pack's audio (its pieces end to end) -> times in the recording, in seconds."""

    def __init__(self, pieces):
        self.starts = [int(s) for s, _ in pieces]
        self.lengths = [int(e) - int(s) for s, e in pieces]
        self.offsets = [0]
        for n in self.lengths[:-1]:
            self.offsets.append(self.offsets[-1] + n)

    def __call__(self, seconds: float, end: bool = False) -> float:
        """A start at a piece's boundary is the next piece's start; an end there, the previous
        piece's end."""
        x = round(float(seconds) * SAMPLE_RATE)
        find = bisect.bisect_left if end else bisect.bisect_right
        i = min(max(find(self.offsets, x) - 1, 0), len(self.starts) - 1)
        return (self.starts[i] + min(max(x - self.offsets[i], 0), self.lengths[i])) / SAMPLE_RATE


def mapped(segment: dict, times: TimeMap) -> dict:
    """A transcript segment (and its words, when it has them) at its times in the recording."""
    out = dict(segment)
    out["start"], out["end"] = times(segment["start"]), times(segment["end"], end=True)
    if "words" in segment:
        out["words"] = [{**w, "start": times(w["start"]), "end": times(w["end"], end=True)}
                        for w in segment["words"]]
    return out


def seconds(ranges) -> list[dict]:
    return [{"start": round(s / SAMPLE_RATE, 3), "end": round(e / SAMPLE_RATE, 3)} for s, e in ranges]


def samples(segments) -> list[tuple[int, int]]:
    """[{"start", "end"}] in seconds (a voice-activity pipeline's) -> (start, end) sample ranges."""
    try:
        return [(round(float(s["start"]) * SAMPLE_RATE), round(float(s["end"]) * SAMPLE_RATE)) for s in segments]
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"speech segments must be [{{'start', 'end'}}] in seconds: {e}") from None


def transcribe_pack(model, tokenizer, audio: np.ndarray, pieces, *, prompt: str | None, first_id: int = 0,
                    on_segment=None, **options) -> dict:
    """One pack: its pieces of `audio` end to end, transcribed with `prompt` before it; the result's
    segments at their times in the recording, numbered from first_id."""
    clip = np.concatenate([audio[s:e] for s, e in pieces])
    times = TimeMap(pieces)
    count = [first_id]

    def forward(segment):
        segment = {**mapped(segment, times), "id": count[0]}
        count[0] += 1
        on_segment(segment)

    result = transcribe(model, tokenizer, clip, initial_prompt=prompt, on_segment=forward if on_segment else None,
                        **options)
    result["segments"] = [{**mapped(s, times), "id": first_id + i} for i, s in enumerate(result["segments"])]
    return result


def transcribe_speech(model, tokenizer, audio: np.ndarray, segments, *, session=None, language: str | None = None,
                      initial_prompt: str | None = None, condition_on_previous_text: bool = True,
                      on_segment=None, cancel=None, **options) -> dict:
    """The transcript of the speech in `audio` (float32 at 16 kHz): `segments` are its (start, end)
    sample ranges in time order. Options as engine.speech.transcribe's. The result is
    transcribe()'s ({"text", "segments", "language"}, "cancelled" when stopped) with "speech",
    the ranges transcribed in seconds."""
    audio = np.asarray(audio, np.float32)
    if session is None:
        from .decoder import DecoderSession
        session = DecoderSession(model)
    ranges = [(max(int(s), 0), min(int(e), audio.size)) for s, e in segments]
    out = {"text": "", "segments": [], "language": language, "speech": seconds(ranges)}
    text = ""
    for pieces in pack(ranges):
        result = transcribe_pack(model, tokenizer, audio, pieces, prompt=initial_prompt, first_id=len(out["segments"]),
                                 on_segment=on_segment, session=session, language=out["language"],
                                 condition_on_previous_text=condition_on_previous_text, cancel=cancel, **options)
        out["language"] = result["language"]
        out["segments"] += result["segments"]
        text += result["text"]
        if result.get("cancelled"):
            out["cancelled"] = True
            break
    out["text"] = text
    if out["language"] is None:            # no speech at all: nothing was detected
        out["language"] = "en" if not tokenizer.specials.multilingual else None
    return out
