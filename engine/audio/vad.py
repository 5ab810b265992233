"""Speech segments from a voice activity detector's per-window probabilities, all at once or as
the probabilities come.

    speech_segments(probs, len(samples))     # [{"start": 4064, "end": 37344}, ...] in samples
    segmenter = Segmenter()
    for p in probs_as_they_come:
        for segment in segmenter.push(p):    # each segment once it is final
            ...
    segmenter.finish(len(samples))           # the rest

The rules are the silero-vad package's `get_speech_timestamps` (v6.2.3; its facts, written anew
here), with its defaults:

- speech starts at the first window at or above `threshold` (0.5), and ends where the
  probability falls below `neg_threshold` (threshold - 0.15, at least 0.01) and stays below it
  for `min_silence_ms` (100 ms): at the first window of that silence;
- a segment of `min_speech_ms` (250 ms) or less is dropped;
- a segment longer than `max_speech_s` (default: no limit) is cut at the longest pause within
  it that outlasted `min_silence_at_max_ms` (98 ms) and came back to speech, and the speech after
  that pause goes on as the next segment; with no such pause, it is cut at the current window;
- speech still open at the end runs to the end, if it is long enough;
- each segment is padded by `speech_pad_ms` (30 ms) on both sides, within the audio; where two
  segments are closer than twice that, they share the gap between them.

A segment is final once the next one has begun, or once the audio has gone twice the padding
past its end with no speech (no later segment can then come close enough to share a gap).
One quirk is kept, as the reference has it: a silence that begins at sample 0 counts as none
(its start is recorded as 0, which the rules read as "no silence yet").
"""
from __future__ import annotations

import math


class Segmenter:
    """The rules above, one probability at a time (segments in samples)."""

    def __init__(self, rate: int = 16000, window: int = 512, threshold: float = 0.5,
                 neg_threshold: float | None = None, min_speech_ms: float = 250, min_silence_ms: float = 100,
                 speech_pad_ms: float = 30, max_speech_s: float = math.inf, min_silence_at_max_ms: float = 98):
        self.window, self.threshold = window, threshold
        self.low = max(threshold - 0.15, 0.01) if neg_threshold is None else neg_threshold
        self.min_speech = rate * min_speech_ms / 1000
        self.pad = rate * speech_pad_ms / 1000
        self.longest = rate * max_speech_s - window - 2 * self.pad
        self.min_silence = rate * min_silence_ms / 1000
        self.min_pause_to_cut = rate * min_silence_at_max_ms / 1000
        self.raw: list[dict] = []         # segments as found, before padding
        self.given = 0                    # how many of them went out padded
        self.count = 0                    # probabilities pushed
        self.current: dict = {}
        self.speaking = False
        self.silent_since = 0             # where the silence under way began (0: none)
        self.pauses: list[tuple] = []     # (where a pause began, how long) within the current segment

    def push(self, p: float) -> list[dict]:
        """One window's probability; the segments that became final with it, padded."""
        self._step(float(p), self.window * self.count)
        self.count += 1
        return self._final(self.window * self.count, math.inf)

    def finish(self, samples: int) -> list[dict]:
        """The audio ended after `samples`: the segments not given out yet, padded."""
        if self.current and samples - self.current["start"] > self.min_speech:
            self.raw.append({"start": self.current["start"], "end": samples})
        self.current, self.speaking = {}, False
        return self._final(samples, samples, done=True)

    def _step(self, p: float, at: int) -> None:
        if p >= self.threshold and self.silent_since:
            if at - self.silent_since > self.min_pause_to_cut:
                self.pauses.append((self.silent_since, at - self.silent_since))
            self.silent_since = 0
        if p >= self.threshold and not self.speaking:
            self.speaking, self.current = True, {"start": at}
            return
        if self.speaking and at - self.current["start"] > self.longest:
            if self.pauses:
                cut, length = max(self.pauses, key=lambda pause: pause[1])
                self.raw.append({"start": self.current["start"], "end": cut})
                self.current = {"start": cut + length}          # the speech after that pause goes on
            else:
                self.raw.append({"start": self.current["start"], "end": at})
                self.current, self.speaking = {}, False
            self.silent_since, self.pauses = 0, []
            if not self.speaking:
                return
        if p < self.low and self.speaking:
            self.silent_since = self.silent_since or at
            if at - self.silent_since < self.min_silence:
                return
            if self.silent_since - self.current["start"] > self.min_speech:
                self.raw.append({"start": self.current["start"], "end": self.silent_since})
            self.current, self.speaking, self.silent_since, self.pauses = {}, False, 0, []

    def _final(self, position: int, samples: float, done: bool = False) -> list[dict]:
        out = []
        earliest = self.current["start"] if self.current else position      # where a next segment may start
        while self.given < len(self.raw):
            k = self.given
            following = self.raw[k + 1] if k + 1 < len(self.raw) else None
            if following is None and not done and earliest - self.raw[k]["end"] < 2 * self.pad:
                break                             # a next segment may still come close enough to share the gap
            out.append(self._padded(k, following, samples))
            self.given += 1
        return out

    def _padded(self, k: int, following, samples: float) -> dict:
        segment = self.raw[k]
        if k == 0:
            start = int(max(0, segment["start"] - self.pad))
        else:
            gap = segment["start"] - self.raw[k - 1]["end"]
            start = int(max(0, segment["start"] - (gap // 2 if gap < 2 * self.pad else self.pad)))
        if following is not None and following["start"] - segment["end"] < 2 * self.pad:
            end = segment["end"] + int((following["start"] - segment["end"]) // 2)
        else:
            end = int(min(samples, segment["end"] + self.pad))
        return {"start": start, "end": end}


def speech_segments(probs, samples: int, **options) -> list[dict]:
    """[{"start", "end"}] in samples, from one probability per window of audio `samples` long
    (options: Segmenter's)."""
    segmenter = Segmenter(**options)
    out = []
    for p in probs:
        out += segmenter.push(p)
    return out + segmenter.finish(samples)
