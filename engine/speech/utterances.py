"""Transcription of the speech only: a recording's speech segments (a voice-activity detector's,
engine.pipeline("voice-activity")) packed into windows (at most 29 s of speech and a second of
silence), each window's segments put end to end with the pauses between them left out, and the
transcript's times mapped back to the recording.

    packs = pack(segments)                # [[(start, end), ...], ...] in samples, each <= 29 s
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


# a pack ends with a second of silence: Whisper then hears its speech end and closes the window
# with a single timestamp, instead of a timestamp pair at the cut that makes transcribe() decode
# the last second or two again in a window of its own (on the benchmark recording: 7 windows
# instead of 9, 1.76x the plain transcription's speed instead of 1.48-1.6x)
TAIL_S = 1.0
LIMIT = N_SAMPLES - round(TAIL_S * SAMPLE_RATE)         # a pack's speech and its tail fill a window


def fits(size: int, length: int, limit: int = LIMIT) -> bool:
    """Whether a segment of `length` samples joins a pack of `size`."""
    return size + length <= limit


def pack(segments, limit: int = LIMIT) -> list[list[tuple[int, int]]]:
    """Consecutive (start, end) sample ranges in time order, grouped greedily: a group takes the
    next range while its total length stays <= limit (a longer range is a group alone)."""
    packs: list[list[tuple[int, int]]] = []
    size = 0
    for start, end in segments:
        if end <= start:
            continue
        if packs and fits(size, end - start, limit):
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


class Packs:
    """The transcript of speech segments given in time order, pack by pack: add() each segment's
    audio, and it gives the result of the pack that the segment closed (None while the pack is
    open); close() gives the last one's. transcribe_speech and a live dictation both go through
    it, so they pack and transcribe alike."""

    def __init__(self, model, tokenizer, *, session=None, language: str | None = None,
                 initial_prompt: str | None = None, on_segment=None, **options):
        if session is None:
            from .decoder import DecoderSession
            session = DecoderSession(model)
        self.model, self.tokenizer, self.session = model, tokenizer, session
        self.language, self.prompt, self.on_segment, self.options = language, initial_prompt, on_segment, options
        self.pieces: list[tuple[int, int]] = []        # the open pack's ranges in the recording
        self.audio: list[np.ndarray] = []              # and their samples
        self.segments = 0                              # segments given so far (their next id)

    @property
    def detected(self) -> str | None:
        """The transcript's language: the first pack's (an English-only model's "en" when there
        was no speech at all; None for a multilingual one)."""
        return self.language or ("en" if not self.tokenizer.specials.multilingual else None)

    @property
    def size(self) -> int:
        return sum(e - s for s, e in self.pieces)

    def add(self, start: int, end: int, samples: np.ndarray) -> dict | None:
        """The segment from sample `start` to `end` of the recording, and its samples."""
        done = self.close() if self.pieces and not fits(self.size, end - start) else None
        self.pieces.append((int(start), int(end)))
        self.audio.append(np.asarray(samples, np.float32))
        return done

    def transcribe(self, pieces, audio, language=None, prompt=None, first_id: int = 0, on_segment=None) -> dict:
        """`pieces` (ranges in the recording) whose samples are `audio`, end to end: transcribe()'s
        result, its segments at their times in the recording, numbered from first_id."""
        times = TimeMap(pieces)
        count = [first_id]

        def forward(segment):
            segment = {**mapped(segment, times), "id": count[0]}
            count[0] += 1
            on_segment(segment)

        tail = np.zeros(round(TAIL_S * SAMPLE_RATE), np.float32)
        result = transcribe(self.model, self.tokenizer, np.concatenate([*audio, tail]), session=self.session,
                            language=language, initial_prompt=prompt,
                            on_segment=forward if on_segment else None, **self.options)
        result["segments"] = [{**mapped(s, times), "id": first_id + i} for i, s in enumerate(result["segments"])]
        return result

    def draft(self, n: int = 1) -> dict:
        """The last n segments added, transcribed together as close() would transcribe them were
        they the pack's only ones (a live dictation shows them at once)."""
        return self.transcribe(self.pieces[-n:], self.audio[-n:], self.language, self.prompt)

    def close(self, alone: dict | None = None) -> dict | None:
        """Transcribe the open pack (None when there is none); later packs keep its language.
        alone: the pack's draft() when the pack holds that one segment: its result, renumbered."""
        if not self.pieces:
            return None
        if alone is not None and len(self.pieces) == 1:
            result = {**alone, "segments": [{**s, "id": self.segments + i} for i, s in enumerate(alone["segments"])]}
            for segment in result["segments"] if self.on_segment else ():
                self.on_segment(segment)
        else:
            result = self.transcribe(self.pieces, self.audio, self.language, self.prompt, self.segments,
                                     self.on_segment)
        self.language = result["language"]
        self.segments += len(result["segments"])
        self.pieces, self.audio = [], []
        return result


def transcribe_speech(model, tokenizer, audio: np.ndarray, segments, *, cancel=None, **options) -> dict:
    """The transcript of the speech in `audio` (float32 at 16 kHz): `segments` are its (start, end)
    sample ranges in time order. Options as engine.speech.transcribe's. The result is
    transcribe()'s ({"text", "segments", "language"}, "cancelled" when stopped) with "speech",
    the ranges transcribed in seconds."""
    audio = np.asarray(audio, np.float32)
    ranges = [(max(int(s), 0), min(int(e), audio.size)) for s, e in segments]
    packs = Packs(model, tokenizer, cancel=cancel, **options)
    out = {"text": "", "segments": [], "language": packs.language, "speech": seconds(ranges)}
    for s, e in [*ranges, (None, None)]:
        result = packs.close() if s is None else packs.add(s, e, audio[s:e]) if e > s else None
        if result is not None:
            out["segments"] += result["segments"]
            out["text"] += result["text"]
            if result.get("cancelled"):
                out["cancelled"] = True
                break
    out["language"] = packs.detected
    return out
