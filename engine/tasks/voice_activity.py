"""Voice activity: where the speech is in audio (Silero VAD v6, models/silero_vad.py).

    vad = engine.pipeline("voice-activity")
    vad("talk.wav")                          # [{"start": 0.26, "end": 3.97}, ...] in seconds
    vad.probabilities(samples)               # the speech probability of each 32 ms
    stream = vad.stream()
    for piece in microphone:                 # float32 samples at 16 kHz, any lengths
        for segment in stream.feed(piece):   # each segment once it is final
            print(segment)
    stream.finish()                          # the rest, when the audio ends

    python -m engine vad talk.wav --json

Segments follow the silero-vad package's get_speech_timestamps rules and defaults
(engine.audio.vad): options threshold (0.5), neg_threshold, min_speech_ms (250), min_silence_ms
(100), speech_pad_ms (30), max_speech_s (no limit). A stream gives the same segments as the
whole recording, each as soon as no later audio can change it.
"""
from __future__ import annotations

import json
import math
import sys

import numpy as np

from ..errors import InputError
from . import contracts
from .base import Command, Pipeline, add_device_argument

TASK = "voice-activity"
SAMPLE_RATE = 16000
OPTIONS = {"threshold": (0.0, 1.0), "neg_threshold": (0.0, 1.0), "min_speech_ms": (0.0, 1e7),
           "min_silence_ms": (0.0, 1e7), "speech_pad_ms": (0.0, 1e5), "max_speech_s": (0.1, math.inf)}


def _checked(options: dict) -> dict:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InputError(f"unknown voice-activity option(s) {unknown}; known: {sorted(OPTIONS)}")
    for name, value in options.items():
        lo, hi = OPTIONS[name]
        if value is None and name == "neg_threshold":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
            raise InputError(f"{name} = {value!r}: must be a number in [{lo}, {hi}]")
    return options


class VoiceActivity(Pipeline):
    """Audio -> its speech segments (engine.audio.vad's rules on the model's probabilities)."""
    MODEL = contracts.VoiceActivityModel

    def __init__(self, entry, device: str | None = None, weights=None, **defaults):
        super().__init__(entry, device, weights)
        self.model = self.build(device)
        self.defaults = _checked(dict(defaults))

    def probabilities(self, audio, sampling_rate: int = SAMPLE_RATE) -> np.ndarray:
        """The speech probability of each 512 samples (32 ms) of 16 kHz audio, the last chunk
        zero-padded."""
        from ..audio import audio_input
        samples = audio_input(audio, sampling_rate)
        return self.run(lambda model: speech_probabilities(model, samples))

    def __call__(self, audio, sampling_rate: int = SAMPLE_RATE, **options) -> list[dict]:
        """[{"start", "end"}] in seconds."""
        from ..audio import audio_input, speech_segments
        options = _checked({**self.defaults, **options})
        samples = audio_input(audio, sampling_rate)
        probs = self.run(lambda model: speech_probabilities(model, samples))
        return [_seconds(s) for s in speech_segments(probs, samples.size, **options)]

    def stream(self, **options) -> "VoiceStream":
        """Segments as 16 kHz samples come in (VoiceStream.feed), the same as the whole audio's."""
        return VoiceStream(self, _checked({**self.defaults, **options}))


class VoiceStream:
    """One recording fed as it comes: feed(samples) -> the segments that became final (seconds);
    finish() -> the rest."""

    def __init__(self, pipe: VoiceActivity, options: dict):
        from ..audio import Segmenter
        self.pipe, self.segmenter = pipe, Segmenter(**options)
        self.chunk = pipe.model.config.chunk
        self.state = pipe.model.initial_state()
        self.held = np.zeros(0, np.float32)
        self.samples = 0
        self.finished = False

    def feed(self, samples) -> list[dict]:
        if self.finished:
            raise InputError("this voice-activity stream is finished: start another with pipe.stream()")
        samples = np.asarray(samples, np.float32).reshape(-1)
        self.samples += samples.size
        self.held = np.concatenate([self.held, samples])
        whole = self.held.size - self.held.size % self.chunk
        out = self._chunks(self.held[:whole])
        self.held = self.held[whole:]
        return out

    def finish(self) -> list[dict]:
        """The audio ended: its last partial chunk (zero-padded) and the segments still open."""
        out = []
        if self.held.size:
            out += self._chunks(np.pad(self.held, (0, self.chunk - self.held.size)))
            self.held = np.zeros(0, np.float32)
        self.finished = True
        return out + [_seconds(s) for s in self.segmenter.finish(self.samples)]

    def _chunks(self, samples: np.ndarray) -> list[dict]:
        probs, self.state = self.pipe.model.run(samples, self.state)
        return [_seconds(s) for p in probs for s in self.segmenter.push(float(p))]


def speech_probabilities(model, samples: np.ndarray) -> np.ndarray:
    """A VoiceActivityModel's probability for each of its chunks of `samples` (16 kHz float32), the
    last one zero-padded."""
    padded = np.pad(samples, (0, -samples.size % model.config.chunk))
    return model.run(padded, model.initial_state())[0]


def _seconds(segment: dict) -> dict:
    return {"start": round(segment["start"] / SAMPLE_RATE, 3), "end": round(segment["end"] / SAMPLE_RATE, 3)}


PIPELINE = VoiceActivity


# --- the command line -----------------------------------------------------------------------------
def _add_arguments(p) -> None:
    p.add_argument("audio", nargs="+", metavar="FILE", help="audio files (WAV natively; others through ffmpeg)")
    p.add_argument("--json", action="store_true", help='one JSON object a file: {"file", "segments", "audio_s", '
                                                      '"speech_s"}')
    p.add_argument("--threshold", type=float, default=0.5, help="speech at or above this probability (0.5)")
    p.add_argument("--min-speech-ms", type=float, default=250, help="drop speech this short or shorter (250)")
    p.add_argument("--min-silence-ms", type=float, default=100, help="a pause this long ends a segment (100)")
    p.add_argument("--speech-pad-ms", type=float, default=30, help="padding on both sides of a segment (30)")
    p.add_argument("--max-speech-s", type=float, default=math.inf, help="cut longer segments at their longest pause")
    p.add_argument("--weights", default=None, help="the model's safetensors (default: the built dist/models/...)")
    add_device_argument(p)


def _vad(args) -> int:
    from ..audio import audio_input
    from . import pipeline
    pipe = pipeline(TASK, device=args.device, weights=args.weights)
    options = {"threshold": args.threshold, "min_speech_ms": args.min_speech_ms,
               "min_silence_ms": args.min_silence_ms, "speech_pad_ms": args.speech_pad_ms,
               "max_speech_s": args.max_speech_s}
    for path in args.audio:
        samples = audio_input(path)
        segments = pipe(samples, **options)
        speech = sum(s["end"] - s["start"] for s in segments)
        if args.json:
            print(json.dumps({"file": path, "segments": segments, "audio_s": round(samples.size / SAMPLE_RATE, 3),
                              "speech_s": round(speech, 3)}))
            continue
        if len(args.audio) > 1:
            print(f"==> {path} <==")
        for s in segments:
            print(f"{s['start']:.3f}\t{s['end']:.3f}")
        print(f"{path}: {len(segments)} segments, {speech:.1f} s of speech in {samples.size / SAMPLE_RATE:.1f} s",
              file=sys.stderr)
    return 0


COMMANDS = {
    "vad": Command(
        help="where the speech is in audio files (Silero VAD): segments in seconds",
        description="Find the speech in audio files with Silero VAD v6 (voice-activity task): one segment per line "
                    "(start and end in seconds, tab-separated), or JSON with --json; the rules and defaults are "
                    "silero-vad's get_speech_timestamps.",
        add_arguments=_add_arguments, run=_vad),
}
