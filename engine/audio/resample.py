"""Band-limited resampling by an exact rational ratio, and downmixing, in NumPy only.

`resample(x, orig_sr, new_sr)` is a polyphase windowed-sinc resampler. The ratio is reduced
by the gcd (44100 -> 16000 is up 160, down 441), so output sample k sits exactly at input
position k * down / up. Its value is the input convolved with one low-pass kernel

    h(t) = fc * sinc(fc * t) * kaiser(t / half_width, BETA),  t in input samples,

where fc = ROLLOFF * min(1, up / down) is the cutoff as a fraction of the input's Nyquist
(ROLLOFF of the lower of the two Nyquist frequencies) and half_width = ZEROS / fc. Each
output phase's taps are normalised to sum to 1, so a constant stays constant.
With ZEROS = 24, ROLLOFF = 0.9 and BETA = 10, as fractions of the lower Nyquist frequency:
-0.01 dB at 0.8, -0.8 dB at 0.85, -6 dB at the cutoff 0.9; at least 60 dB of attenuation from
the Nyquist frequency on (64 dB at it, 71 dB at 1.01, more than 100 dB from 1.02), so nothing
folds back into the band (tests/audio/test_resample.py).

How it runs fast without a per-sample loop: the pattern of kernel phases repeats every
`up` outputs (`down` inputs). Outputs are grouped by that period (several periods merged
when `down` is small), and each run of consecutive outputs within a period reads a window
of input that starts a whole period further on for the next row. That window, over all
periods, is a strided view of the input, and the run's outputs are one matrix product of it
with that run's taps: BLAS does the multiply-adds.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InputError

ZEROS = 24           # zero crossings of the sinc on each side, at the lower rate
ROLLOFF = 0.9        # cutoff, as a fraction of the lower Nyquist frequency
BETA = 10.0          # Kaiser window shape: higher, more stopband attenuation, wider transition


def _rate(value, what: str) -> int:
    try:
        rate = int(value)
        exact = rate == value
    except (TypeError, ValueError, OverflowError):
        exact = False
    if not exact or rate <= 0:
        raise InputError(f"{what} must be a positive whole number of Hz, got {value!r}")
    return rate


def _kernel(t: np.ndarray, fc: float, half_width: float) -> np.ndarray:
    inside = np.abs(t) < half_width
    ratio = np.where(inside, t / half_width, 0.0)
    window = np.i0(BETA * np.sqrt(1.0 - ratio * ratio)) / np.i0(BETA)
    return np.where(inside, fc * np.sinc(fc * t) * window, 0.0)


def resample(x, orig_sr: int, new_sr: int, *, axis: int = 0) -> np.ndarray:
    """`x` (float) resampled from orig_sr to new_sr Hz along `axis` (0: samples first, as
    read_wav returns them; -1 for (channels, samples)). Returns float32 with
    ceil(n * new_sr / orig_sr) samples along that axis. The signal is taken as zero outside
    its samples, so the first and last ZEROS / min(rates) seconds see the edge."""
    up, down = _rate(new_sr, "new_sr"), _rate(orig_sr, "orig_sr")
    common = math.gcd(up, down)
    up, down = up // common, down // common
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 0:
        raise InputError("resample needs at least one axis of samples, got a 0-d array")
    x = np.moveaxis(x, axis, -1)
    lead, n = x.shape[:-1], x.shape[-1]
    if up == down:
        return np.moveaxis(x.copy(), -1, axis)
    n_out = -(-n * up // down)
    signals = x.reshape(math.prod(lead), n)                              # (C, n)
    fc = ROLLOFF * min(1.0, up / down)                                   # of the input's Nyquist
    half_width = ZEROS / fc                                              # input samples
    reach = math.ceil(half_width)
    taps = 2 * reach + 1
    # a period: `per_out` outputs read input advancing by `stride` samples per period
    merge = max(1, -(-2 * taps // down))
    per_out, stride = merge * up, merge * down
    run = max(1, taps * up // down)                                      # outputs per matrix product
    periods = -(-n_out // per_out)
    # the input, zero-padded so every window of every period lies inside (the last window read
    # starts (periods - 1) periods on, at the last phase computed; sized by that, not by a whole
    # period, which for rates with a large gcd-reduced ratio is far longer than a short input)
    pad_left = reach + 1
    last_phase = min(per_out, n_out) - 1
    total = max(pad_left + n, pad_left + (periods - 1) * stride + last_phase * down // up + reach + 3)
    padded = np.zeros((signals.shape[0], total), np.float32)
    padded[:, pad_left:pad_left + n] = signals
    out = np.empty((signals.shape[0], periods, per_out), np.float32)     # (C, periods, per_out)
    item = padded.itemsize
    for first in range(0, last_phase + 1, run):
        phases = np.arange(first, min(first + run, last_phase + 1))
        position = phases * down / up                                    # in input samples
        start = math.floor(position[0]) - reach
        width = math.floor(position[-1]) + reach + 1 - start + 1
        offsets = start + np.arange(width)
        weights = _kernel(position[None, :] - offsets[:, None], fc, half_width)   # (width, run)
        weights /= weights.sum(axis=0, keepdims=True)
        windows = np.lib.stride_tricks.as_strided(
            padded[:, pad_left + start:], shape=(signals.shape[0], periods, width),
            strides=(padded.strides[0], stride * item, item), writeable=False)
        out[:, :, phases[0]:phases[-1] + 1] = windows @ weights.astype(np.float32)
    result = out.reshape(signals.shape[0], -1)[:, :n_out]
    return np.moveaxis(result.reshape(*lead, n_out), -1, axis)


def downmix(x, *, axis: int = -1) -> np.ndarray:
    """The mean of the channels along `axis` (-1: the channels of read_wav's (frames, channels)),
    as float32."""
    x = np.asarray(x)
    return x.mean(axis=axis, dtype=np.float32) if x.shape[axis] != 1 else np.take(x, 0, axis=axis).astype(np.float32)
