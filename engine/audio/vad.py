"""Speech segments from a voice activity detector's per-window probabilities.

    speech_segments(probs, len(samples))     # [{"start": 4064, "end": 37344}, ...] in samples

The rules are the silero-vad package's `get_speech_timestamps` (v6.2.3; its facts, written anew
here), with its defaults:

- speech starts at the first window at or above `threshold` (0.5), and ends where the
  probability falls below `neg_threshold` (threshold - 0.15, at least 0.01) and stays below it
  for `min_silence_ms` (100 ms): at the first window of that silence;
- a segment of `min_speech_ms` (250 ms) or less is dropped;
- a segment longer than `max_speech_s` (default: no limit) is cut at the longest pause within
  it that outlasted `min_silence_at_max_ms` (98 ms) and came back to speech; with no such pause,
  at the current window;
- speech still open at the end runs to the end, if it is long enough;
- each segment is padded by `speech_pad_ms` (30 ms) on both sides, within the audio; where two
  segments are closer than twice that, they share the gap between them.

One quirk is kept, as the reference has it: a silence that begins at sample 0 counts as none
(its start is recorded as 0, which the rules read as "no silence yet").
"""
from __future__ import annotations

import math


def speech_segments(probs, samples: int, rate: int = 16000, window: int = 512, threshold: float = 0.5,
                    neg_threshold: float | None = None, min_speech_ms: float = 250, min_silence_ms: float = 100,
                    speech_pad_ms: float = 30, max_speech_s: float = math.inf,
                    min_silence_at_max_ms: float = 98) -> list[dict]:
    """[{"start", "end"}] in samples, from one probability per `window` samples of audio
    `samples` long."""
    low = max(threshold - 0.15, 0.01) if neg_threshold is None else neg_threshold
    min_speech = rate * min_speech_ms / 1000
    pad = rate * speech_pad_ms / 1000
    longest = rate * max_speech_s - window - 2 * pad
    min_silence = rate * min_silence_ms / 1000
    min_pause_to_cut = rate * min_silence_at_max_ms / 1000
    segments: list[dict] = []
    current: dict = {}
    speaking = False
    silent_since = 0              # where the silence under way began (0: none)
    pauses: list[tuple] = []      # (where a pause began, how long) within the current segment
    for i, p in enumerate(probs):
        at = window * i
        if p >= threshold and silent_since:
            if at - silent_since > min_pause_to_cut:
                pauses.append((silent_since, at - silent_since))
            silent_since = 0
        if p >= threshold and not speaking:
            speaking, current = True, {"start": at}
            continue
        if speaking and at - current["start"] > longest:
            if pauses:
                cut, length = max(pauses, key=lambda pause: pause[1])
                segments.append({"start": current["start"], "end": cut})
                current = {"start": cut + length}         # the speech after that pause goes on
            else:
                segments.append({"start": current["start"], "end": at})
                current, speaking = {}, False
            silent_since, pauses = 0, []
            if not speaking:
                continue
        if p < low and speaking:
            silent_since = silent_since or at
            if at - silent_since < min_silence:
                continue
            if silent_since - current["start"] > min_speech:
                segments.append({"start": current["start"], "end": silent_since})
            current, speaking, silent_since, pauses = {}, False, 0, []
    if current and samples - current["start"] > min_speech:
        segments.append({"start": current["start"], "end": samples})
    return _padded(segments, samples, pad)


def _padded(segments: list[dict], samples: int, pad: float) -> list[dict]:
    for i, segment in enumerate(segments):
        if i == 0:
            segment["start"] = int(max(0, segment["start"] - pad))
        if i + 1 < len(segments):
            following = segments[i + 1]
            gap = following["start"] - segment["end"]
            if gap < 2 * pad:
                segment["end"] += int(gap // 2)
                following["start"] = int(max(0, following["start"] - gap // 2))
            else:
                segment["end"] = int(min(samples, segment["end"] + pad))
                following["start"] = int(max(0, following["start"] - pad))
        else:
            segment["end"] = int(min(samples, segment["end"] + pad))
    return segments
