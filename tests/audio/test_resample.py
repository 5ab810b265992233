"""engine.audio.resample: tones keep their frequency and amplitude, what lies above the new
Nyquist frequency is removed, lengths are exact, and a chirp matches sox's resampler."""
import numpy as np
import pytest

from engine.audio import downmix, read_wav, resample
from engine.errors import InputError
from tests.audio.clips import sox

PAIRS = [(48000, 16000), (44100, 16000), (22050, 16000), (8000, 16000), (16000, 44100), (32000, 16000),
         (11025, 16000), (16000, 8000), (96000, 16000)]


def level_db(x) -> float:
    """RMS level relative to a full-scale sine (amplitude 1)."""
    return 20 * np.log10(np.sqrt(np.mean(np.square(x, dtype=np.float64)) * 2) + 1e-30)


def sine(frequency, rate, n, phase=0.3):
    return np.sin(2 * np.pi * frequency * np.arange(n) / rate + phase)


def interior(x, rate):
    """x without its first and last 10 ms, which see the zeros beyond the edges."""
    return x[rate // 100: len(x) - rate // 100]


@pytest.mark.parametrize("orig, new", PAIRS)
def test_tone_keeps_frequency_and_amplitude(orig, new):
    n = orig // 2
    for fraction in (0.05, 0.4, 0.75):                     # of the lower Nyquist frequency
        frequency = fraction * min(orig, new) / 2
        y = resample(sine(frequency, orig, n).astype(np.float32), orig, new)
        expected = sine(frequency, new, len(y))
        np.testing.assert_allclose(interior(y, new), interior(expected, new), rtol=0, atol=1e-4)


@pytest.mark.parametrize("orig, new", [p for p in PAIRS if p[1] < p[0]])
def test_tones_above_the_new_nyquist_are_removed(orig, new):
    n = orig // 2
    for fraction, most in ((1.0, -60), (1.005, -60), (1.01, -60), (1.02, -90), (1.3, -90), (2.0, -90), (2.9, -90)):
        frequency = fraction * new / 2                     # fraction of the new Nyquist frequency
        if frequency >= orig / 2:
            continue
        y = resample(sine(frequency, orig, n).astype(np.float32), orig, new)
        assert level_db(interior(y, new)) < most, (frequency, level_db(interior(y, new)))


@pytest.mark.parametrize("orig, new", PAIRS)
def test_lengths_are_exact(orig, new):
    for n in (0, 1, 2, 7, 441, 1000, 12345):
        y = resample(np.ones(n, np.float32), orig, new)
        assert y.shape == (-(-n * new // orig),) and y.dtype == np.float32
    # a constant stays that constant away from the edges
    y = resample(np.full(orig, 0.25, np.float32), orig, new)
    np.testing.assert_allclose(interior(y, new), 0.25, rtol=0, atol=1e-6)


def test_axes_and_channels():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4410, 3)).astype(np.float32)
    y = resample(x, 44100, 16000)                         # samples first, as read_wav gives them
    assert y.shape == (1600, 3)
    for c in range(3):
        np.testing.assert_array_equal(y[:, c], resample(x[:, c], 44100, 16000))
    np.testing.assert_array_equal(resample(x.T, 44100, 16000, axis=-1), y.T)
    same = resample(x, 16000, 16000)
    np.testing.assert_array_equal(same, x)
    assert same is not x
    np.testing.assert_array_equal(downmix(x), x.mean(axis=1))
    np.testing.assert_array_equal(downmix(x[:, :1]), x[:, 0])


def test_bad_rates():
    for orig, new in ((0, 16000), (16000, -1), (44100.5, 16000), ("x", 16000), (None, 16000)):
        with pytest.raises(InputError, match="whole number of Hz"):
            resample(np.zeros(10), orig, new)
    with pytest.raises(InputError, match="0-d"):
        resample(np.float32(1), 8000, 16000)
    assert resample(np.zeros(10), 16000.0, 8000).shape == (5,)


def test_chirp_matches_sox(tmp_path):
    """A chirp across the band (100 Hz to 0.75 of the new Nyquist), resampled by sox's `rate`
    (linear phase, its own filter): the two agree within 2e-4 (measured: 4e-5) away from the
    ends, where each treats what lies beyond the signal its own way."""
    source, reference = tmp_path / "chirp.wav", tmp_path / "sox16k.wav"
    sox("-n", "-r", 44100, "-c", 1, "-b", 32, "-e", "floating-point", source, "synth", 2, "sine", "100-6000", "vol", 0.5)
    sox(source, "-r", 16000, reference)
    x, rate = read_wav(source)
    expected, _ = read_wav(reference)
    y = resample(x, rate, 16000)
    assert y.shape == expected.shape
    np.testing.assert_allclose(interior(y, 16000), interior(expected, 16000), rtol=0, atol=2e-4)
    assert np.sqrt(np.mean((interior(y - expected, 16000)) ** 2)) < 2e-5


def direct(x, orig, new):
    """The documented definition, one output at a time: output k at input position k * orig / new,
    the kernel's taps normalised to sum to 1."""
    from engine.audio.resample import BETA, ROLLOFF, ZEROS
    fc = ROLLOFF * min(1.0, new / orig)
    half_width = ZEROS / fc
    out = np.zeros(-(-len(x) * new // orig))
    for k in range(len(out)):
        position = k * orig / new
        n = np.arange(int(np.floor(position - half_width)), int(np.ceil(position + half_width)) + 1)
        t = position - n
        inside = np.abs(t) < half_width
        h = np.where(inside, fc * np.sinc(fc * t) * np.i0(BETA * np.sqrt(np.clip(1 - (t / half_width) ** 2, 0, 1)))
                     / np.i0(BETA), 0)
        h /= h.sum()
        valid = (n >= 0) & (n < len(x))
        out[k] = h[valid] @ x[n[valid]]
    return out


@pytest.mark.parametrize("orig, new", PAIRS + [(1001, 16000), (999_983, 16000), (16000, 1009), (7, 3)])
def test_matches_the_direct_definition(orig, new):
    """The polyphase grouping (runs of outputs, merged periods, strided windows) computes exactly
    the definition, for short and odd inputs too, with nothing read from beyond the input."""
    rng = np.random.default_rng(orig + new)
    for n in (1, 5, 97, max(98, min(700, 2000 * orig // new))):      # at most ~2000 outputs: direct() is slow
        x = rng.standard_normal(n).astype(np.float32)
        np.testing.assert_allclose(resample(x, orig, new), direct(x.astype(np.float64), orig, new), rtol=0, atol=2e-5)
