"""Audio from a file, bytes or an array, as float32 mono samples at the rate the model wants.

WAV is read here (engine/audio/wav.py) on every platform. Natively, any other container
(MP3, FLAC, Ogg, M4A, video...) is decoded by the `ffmpeg` command when it is on PATH, with the
arguments openai-whisper uses, so both see the same samples. Under Pyodide there is no ffmpeg:
the page decodes other formats with the browser's decodeAudioData and passes float32 samples.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np

from .. import runtime
from ..errors import AudioError, InputError
from .mel import SAMPLE_RATE
from .resample import downmix, resample
from .wav import read_wav


def _is_wav(head: bytes) -> bool:
    return head[:4] in (b"RIFF", b"RIFX", b"RF64") and head[8:12] == b"WAVE"


def load_audio(source, sr: int = SAMPLE_RATE, *, orig_sr: int | None = None, name: str | None = None) -> np.ndarray:
    """float32 mono samples of `source` at `sr` Hz, in [-1, 1].

    `source`: a path or the bytes of a file (WAV anywhere; other formats natively through
    ffmpeg), or an array of samples at `orig_sr` Hz, shape (samples,) or (samples, channels).
    Channels are averaged; the rate is changed with engine.audio.resample; samples beyond
    full scale (float data) are clipped to [-1, 1], as ffmpeg's 16-bit output that
    openai-whisper reads clips them. `name` names the source in errors. Raises AudioError on
    audio it cannot read."""
    if isinstance(source, np.ndarray):
        return _from_array(source, sr, orig_sr, name)
    if orig_sr is not None:
        raise InputError("orig_sr is only for arrays of samples: a file states its own rate")
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        name = name or "<bytes>"
    else:
        name = os.fspath(source) if name is None else name
        try:
            with open(source, "rb") as f:
                data = f.read()
        except OSError as e:
            raise AudioError(f"cannot open ({e.strerror or e})", file=name) from None
    if _is_wav(data[:12]):
        samples, rate = read_wav(data, name=name)
        return _from_array(samples, sr, rate, name)
    return _decode_other(data, source, sr, name)


def audio_input(audio, sampling_rate: int = SAMPLE_RATE) -> np.ndarray:
    """A pipeline's audio argument as float32 mono samples at 16 kHz: a path, the bytes of a
    file, or an array (or list) of samples at `sampling_rate`."""
    if isinstance(audio, (list, tuple)):
        audio = np.asarray(audio, np.float32)
    if isinstance(audio, np.ndarray):
        return load_audio(audio, orig_sr=sampling_rate, name="audio")
    if isinstance(audio, (str, bytes, bytearray, memoryview)) or hasattr(audio, "__fspath__"):
        return load_audio(audio)
    raise InputError(f"audio must be a path, the bytes of a file or an array of samples, got {type(audio).__name__}")


def _from_array(samples: np.ndarray, sr: int, orig_sr, name) -> np.ndarray:
    if orig_sr is None:
        raise InputError("an array of samples needs its rate: load_audio(array, orig_sr=...)")
    if samples.ndim not in (1, 2):
        raise AudioError(f"samples must be (samples,) or (samples, channels), got shape {samples.shape}", file=name)
    if samples.dtype.kind not in "fiu":
        raise AudioError(f"samples must be numbers, got dtype {samples.dtype}", file=name)
    mono = downmix(samples, axis=1) if samples.ndim == 2 else samples.astype(np.float32)
    if not np.isfinite(mono).all():
        raise AudioError("samples must be finite numbers (found NaN or infinity)", file=name)
    out = resample(mono, orig_sr, sr) if orig_sr != sr else np.array(mono, np.float32)
    return np.clip(out, -1.0, 1.0, out=out)


def _decode_other(data: bytes, source, sr: int, name) -> np.ndarray:
    """A container other than WAV: ffmpeg natively, as openai-whisper runs it."""
    if runtime.in_browser():
        raise AudioError("only WAV files and float32 sample arrays are read in the browser "
                         "(the page decodes other formats before they reach Python)", file=name)
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise AudioError("not a WAV file, and without the ffmpeg command on PATH only WAV is read", file=name)
    # a path goes to ffmpeg as is (it may seek); bytes go through stdin
    given_path = not isinstance(source, (bytes, bytearray, memoryview))
    command = [ffmpeg, *(["-nostdin"] if given_path else []), "-threads", "0",
               "-i", os.fspath(source) if given_path else "pipe:0",
               "-f", "s16le", "-ac", "1", "-acodec", "pcm_s16le", "-ar", str(sr), "-"]
    try:
        done = subprocess.run(command, input=None if given_path else data, capture_output=True, check=False)
    except OSError as e:
        raise AudioError(f"could not run ffmpeg ({e.strerror or e})", file=name) from None
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        raise AudioError(f"ffmpeg could not decode it: {reason[0]}", file=name)
    return np.frombuffer(done.stdout, np.int16).astype(np.float32) / np.float32(32768.0)
