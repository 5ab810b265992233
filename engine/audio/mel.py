"""Whisper's audio front end: the log-mel spectrogram, in NumPy only.

Facts taken from the reference, openai-whisper's whisper/audio.py (MIT): audio at 16 kHz,
30-second windows (480000 samples, 3000 frames); a short-time Fourier transform with n_fft 400,
hop 160, a periodic Hann window and torch.stft's center=True (reflect padding of n_fft // 2 on
each side), whose last frame is dropped; power |X|^2; Slaney-style mel filters as
librosa.filters.mel(sr=16000, n_fft=400, n_mels=80 or 128) makes them (the reference ships them
as assets/mel_filters.npz; here they are computed from the same formulas); then
log10(max(x, 1e-10)), floored at 8 below the maximum, and (x + 4) / 4.

Agreement with the reference (tests/audio/test_mel.py): float32 throughout, the largest absolute
difference from whisper.audio.log_mel_spectrogram is below 1e-4 (measured: 5e-5 on espeak-ng
speech in English and French, 80 and 128 mels; 1e-6 on noise). The output spans about -1.5 to
1.5; the two round float32 FFTs, sums and log10 differently.

Cost, and why the FFT stays in NumPy on every backend: the spectrogram of a 30-second window
takes 12-23 ms natively (min-median of 7 runs on a 2-core machine under load; torch.stft's
whisper.audio.log_mel_spectrogram takes 10-20 ms on the same run). numpy.fft.rfft is pocketfft
in C, natively and in Pyodide. The encoder of a 30-second window is tens of GFLOP (about 35 for
tiny.en, 90 for base by counting its matrix products): a second or more on one core. Moving the
FFT to the simd or webgpu backends would save about 1% of a transcription, less with the
decoder counted, and add kernels to maintain: it does not pay.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..errors import InputError

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_LENGTH = 30                                # seconds in one window of the encoder
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE           # 480000 samples in a window
N_FRAMES = N_SAMPLES // HOP_LENGTH               # 3000 mel frames in a window
N_SAMPLES_PER_TOKEN = HOP_LENGTH * 2             # the encoder's convolutions have stride 2
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH    # 100: 10 ms a frame
TOKENS_PER_SECOND = SAMPLE_RATE // N_SAMPLES_PER_TOKEN   # 50: 20 ms an encoder position


def pad_or_trim(array, length: int = N_SAMPLES, *, axis: int = -1) -> np.ndarray:
    """`array` cut to `length` along `axis`, or padded with zeros at its end to that length."""
    array = np.asarray(array)
    size = array.shape[axis]
    if size > length:
        array = np.take(array, np.arange(length), axis=axis)
    elif size < length:
        widths = [(0, 0)] * array.ndim
        widths[axis] = (0, length - size)
        array = np.pad(array, widths)
    return array


def hz_to_mel(frequencies):
    """Slaney's mel scale (librosa's htk=False): linear below 1 kHz, logarithmic above."""
    f = np.asarray(frequencies, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, min_log_hz) / min_log_hz) / logstep, f / f_sp)


def mel_to_hz(mels):
    m = np.asarray(mels, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


@functools.cache
def mel_filters(n_mels: int = 80, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) float32: triangles evenly spaced on the Slaney mel scale from 0
    to the Nyquist frequency, each scaled to unit area in Hz ("slaney" norm), as
    librosa.filters.mel computes them. Cached: treat the result as read-only."""
    if n_mels <= 0:
        raise InputError(f"n_mels must be positive, got {n_mels}")
    bins = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sample_rate / 2), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - bins[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    weights = weights.astype(np.float32)
    weights.setflags(write=False)
    return weights


@functools.cache
def _hann(n: int) -> np.ndarray:
    """The periodic Hann window (torch.hann_window's default)."""
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)


def log_mel_spectrogram(audio, n_mels: int = 80, padding: int = 0) -> np.ndarray:
    """Whisper's log-mel spectrogram of 16 kHz audio: (n_mels, frames) float32, or
    (..., n_mels, frames) for a batch (..., samples), with frames = samples // 160 (after
    `padding` zero samples are appended). `audio` is an array of samples (a file: pass
    load_audio(path)). As in the reference, the floor at max - 8 uses the maximum over
    the whole input, batch included."""
    if isinstance(audio, (str, bytes)) or hasattr(audio, "__fspath__"):
        raise InputError("log_mel_spectrogram takes samples: read a file with load_audio(path) first")
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim == 0:
        raise InputError("log_mel_spectrogram needs an array of samples, got a 0-d array")
    if padding > 0:
        audio = np.concatenate([audio, np.zeros(audio.shape[:-1] + (padding,), np.float32)], axis=-1)
    if audio.shape[-1] == 0:
        raise InputError("log_mel_spectrogram needs at least one sample, got none")
    half = N_FFT // 2
    padded = np.pad(audio, [(0, 0)] * (audio.ndim - 1) + [(half, half)], mode="reflect")
    frames = audio.shape[-1] // HOP_LENGTH                      # the reference's last frame dropped
    # one window every HOP_LENGTH samples, as a strided view: a view of every sample's window
    # (sliding_window_view) declares N_FFT times the audio's bytes, past wasm32's 2 GiB after ~55 s
    step = padded.strides[-1]
    windows = np.lib.stride_tricks.as_strided(padded, padded.shape[:-1] + (frames, N_FFT),
                                              padded.strides[:-1] + (HOP_LENGTH * step, step), writeable=False)
    window, filters = _hann(N_FFT), mel_filters(n_mels).T
    mel = np.empty(audio.shape[:-1] + (n_mels, frames), np.float32)      # (..., n_mels, frames)
    # N_FRAMES (30 s) frames at a time: the spectrum of 5 minutes at once would take ~200 MB of a
    # page's heap (windows, complex spectrum, power), a window's worth takes ~10 MB
    for start in range(0, frames, N_FRAMES):
        spectrum = np.fft.rfft(windows[..., start:start + N_FRAMES, :] * window, axis=-1)   # (..., f, 201) complex64
        power = spectrum.real ** 2 + spectrum.imag ** 2
        mel[..., start:start + N_FRAMES] = np.swapaxes(power @ filters, -1, -2)
    log_spec = np.log10(np.maximum(mel, np.float32(1e-10), out=mel), out=mel)
    if log_spec.size:
        np.maximum(log_spec, log_spec.max() - np.float32(8.0), out=log_spec)
    log_spec += np.float32(4.0)
    log_spec /= np.float32(4.0)
    return log_spec
