"""Live dictation: audio fed as it is recorded, the text of each utterance as soon as a pause
ends it, and a final transcript equal to the recording's as a file with vad=True.

    dictation = Dictation(packs, voice)         # engine.speech.utterances.Packs, a VAD stream
    for piece in microphone:                    # float32 samples at 16 kHz, any lengths
        for event in dictation.feed(piece):
            ...
    events = dictation.finish()                 # the recording ended
    dictation.result()                          # {"text", "segments", "language", "speech"}

Events, in order:
- {"type": "utterance", "pack", "start", "end", "speech_end", "text", "segments", "seconds"}: an
  utterance that the voice-activity stream closed, transcribed alone (times in the recording;
  speech_end: where its speech stopped, the padding after it left out; seconds: the time its
  transcription took);
- {"type": "pack", "pack", "text", "segments"}: a pack closed (engine.speech.utterances: the
  next utterance did not fit its 30 s, or the recording ended), transcribed whole as
  transcribe_speech transcribes it; it replaces the drafts of its utterances. A pack of one
  utterance is that utterance's text, not transcribed again.
The voice-activity stream gives the segments of the whole recording (engine/tasks/voice_activity),
and the packs go through the same Packs as transcribe_speech: so the packs' text is the file's.
"""
from __future__ import annotations

import time

import numpy as np

from ..audio import SAMPLE_RATE
from .utterances import fits, samples, seconds

KEEP_S = 40           # audio kept before the newest sample: a segment is at most a window and its padding


class Dictation:
    def __init__(self, packs, voice, pad_s: float = 0.0):
        self.packs, self.voice, self.pad_s = packs, voice, pad_s
        self.buffer = np.zeros(0, np.float32)
        self.base = 0                          # the recording's sample at buffer[0]
        self.pack = 0                          # the open pack's number
        self.alone = None                      # the open pack's one utterance, transcribed
        self.speech: list[tuple[int, int]] = []
        self.segments: list[dict] = []
        self.text = ""

    def feed(self, piece) -> list[dict]:
        piece = np.asarray(piece, np.float32).reshape(-1)
        self.buffer = np.concatenate([self.buffer, piece])
        events = self._utterances(self.voice.feed(piece))
        drop = self.buffer.size - KEEP_S * SAMPLE_RATE
        if drop > 0:
            self.buffer, self.base = self.buffer[drop:], self.base + drop
        return events

    def finish(self) -> list[dict]:
        """The recording ended: the utterances still open join the last pack, which closes (no
        drafts: the pack's text comes at once)."""
        events = self._utterances(self.voice.finish(), draft=False)
        return events + self._close()

    def result(self) -> dict:
        return {"text": self.text, "segments": self.segments, "language": self.packs.detected,
                "speech": seconds(self.speech)}

    def _utterances(self, closed: list[dict], draft: bool = True) -> list[dict]:
        """Utterances the VAD closed: each joins the open pack (closing it first when it does not
        fit); those of the open pack that are new are drafted together, one transcription, so a
        dictation that fell behind (several closed while the last call ran) catches up."""
        events, new = [], []
        for segment in closed:
            (start, end), = samples([segment])
            audio = self.buffer[max(start - self.base, 0):max(end - self.base, 0)]
            if end <= start or audio.size == 0:
                continue
            if self.packs.pieces and not fits(self.packs.size, end - start):
                events += self._close()
                new = []
            self.packs.add(start, end, audio)
            self.speech.append((start, end))
            new.append(segment)
        if not new or not draft:
            return events
        started = time.perf_counter()
        text = self.packs.draft(len(new))
        self.alone = text if len(self.packs.pieces) == 1 else None
        events.append({"type": "utterance", "pack": self.pack, "start": new[0]["start"], "end": new[-1]["end"],
                       "speech_end": round(max(new[-1]["end"] - self.pad_s, new[-1]["start"]), 3),
                       "text": text["text"], "segments": text["segments"],
                       "seconds": round(time.perf_counter() - started, 4)})
        return events

    def _close(self) -> list[dict]:
        result = self.packs.close(self.alone)
        self.alone = None
        if result is None:
            return []
        self.segments += result["segments"]
        self.text += result["text"]
        event = {"type": "pack", "pack": self.pack, "text": result["text"], "segments": result["segments"]}
        self.pack += 1
        return [event]
