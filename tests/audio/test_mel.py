"""engine.audio's log-mel front end against openai-whisper's (whisper.audio), the reference
the models were trained with: the filters against its mel_filters.npz, the spectrogram on
espeak-ng speech and on noise, pad_or_trim and the constants."""
from pathlib import Path

import numpy as np
import pytest

from engine import audio
from engine.audio import N_SAMPLES, log_mel_spectrogram, mel_filters, pad_or_trim, read_wav
from engine.errors import InputError
from tests.audio.clips import speak
from tests.helpers import need_import

TOLERANCE = 1e-4        # largest |ours - reference|; measured 1e-6 on noise, 5e-5 on speech (engine/audio/mel.py)


@pytest.fixture(scope="module")
def reference():
    """openai-whisper's audio module (it needs torch)."""
    need_import("torch")
    return need_import("whisper.audio", "the mel reference is openai-whisper (pip install --no-deps openai-whisper)")


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    path = speak("The quick brown fox jumps over the lazy dog. Speech recognition runs in the page.",
                 tmp_path_factory.mktemp("speech") / "fox.wav")
    samples, rate = read_wav(path)
    assert rate == 16000
    return samples[:, 0]


def reference_mel(reference, samples, **kwargs) -> np.ndarray:
    import torch
    return reference.log_mel_spectrogram(torch.from_numpy(np.ascontiguousarray(samples)), **kwargs).numpy()


def test_constants_match(reference):
    for name in ("SAMPLE_RATE", "N_FFT", "HOP_LENGTH", "CHUNK_LENGTH", "N_SAMPLES", "N_FRAMES", "N_SAMPLES_PER_TOKEN",
                 "FRAMES_PER_SECOND", "TOKENS_PER_SECOND"):
        assert getattr(audio, name) == getattr(reference, name), name


@pytest.mark.parametrize("n_mels", [80, 128])
def test_filters_match_mel_filters_npz(reference, n_mels):
    with np.load(Path(reference.__file__).parent / "assets" / "mel_filters.npz") as shipped:
        expected = shipped[f"mel_{n_mels}"]
    ours = mel_filters(n_mels)
    assert ours.dtype == np.float32 and ours.shape == expected.shape == (n_mels, 201)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("padding", [0, N_SAMPLES])
def test_speech_matches_whisper(reference, speech, n_mels, padding):
    ours = log_mel_spectrogram(speech, n_mels=n_mels, padding=padding)
    expected = reference_mel(reference, speech, n_mels=n_mels, padding=padding)
    assert ours.dtype == np.float32 and ours.shape == expected.shape == (n_mels, (len(speech) + padding) // 160)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=TOLERANCE)
    assert expected.max() - expected.min() > 1.5            # speech, not silence


def test_window_of_30_seconds_matches_whisper(reference, speech):
    """What the transcriber feeds the encoder: the clip padded to 30 s, 3000 frames."""
    window = pad_or_trim(speech)
    np.testing.assert_array_equal(window, reference.pad_or_trim(speech))
    ours = log_mel_spectrogram(window)
    assert ours.shape == (80, 3000)
    np.testing.assert_allclose(ours, reference_mel(reference, window), rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("scale", [1.0, 0.01, 1e-6])
def test_noise_matches_whisper(reference, scale):
    rng = np.random.default_rng(7)
    noise = (rng.standard_normal(16000 * 7 + 123) * scale).astype(np.float32)
    np.testing.assert_allclose(log_mel_spectrogram(noise), reference_mel(reference, noise), rtol=0, atol=TOLERANCE)
    batch = noise[:16000 * 6].reshape(2, -1)                  # a batch: one maximum over all of it
    np.testing.assert_allclose(log_mel_spectrogram(batch), reference_mel(reference, batch), rtol=0, atol=TOLERANCE)


def test_audio_over_several_windows_matches_whisper(reference):
    """65 s of speech-like noise with silence: the spectrum is taken 30 s of frames at a time
    (a page's heap), so the chunk edges and the one maximum over all of it are checked here."""
    rng = np.random.default_rng(8)
    audio = (rng.standard_normal(16000 * 65 + 77) * np.repeat(rng.random(65 * 4 + 1), 4000)[:16000 * 65 + 77]
             ).astype(np.float32)
    audio[16000 * 29:16000 * 31] = 0                         # silence across the first chunk's edge
    np.testing.assert_allclose(log_mel_spectrogram(audio, padding=N_SAMPLES),
                               reference_mel(reference, audio, padding=N_SAMPLES), rtol=0, atol=TOLERANCE)


def test_pad_or_trim(reference):
    x = np.arange(24, dtype=np.float32).reshape(2, 12)
    for length in (5, 12, 20):
        for axis in (-1, 0, 1):
            np.testing.assert_array_equal(pad_or_trim(x, length, axis=axis), reference.pad_or_trim(x, length, axis=axis))


def test_silence_and_bad_input():
    silence = log_mel_spectrogram(np.zeros(1600, np.float32))
    np.testing.assert_allclose(silence, np.full((80, 10), (-10 + 4) / 4), rtol=0, atol=1e-6)     # log10(1e-10)
    with pytest.raises(InputError, match="load_audio"):
        log_mel_spectrogram("speech.wav")
    with pytest.raises(InputError, match="0-d"):
        log_mel_spectrogram(np.float32(0))
    with pytest.raises(InputError, match="at least one sample"):
        log_mel_spectrogram(np.zeros(0, np.float32))
    assert log_mel_spectrogram(np.zeros(100, np.float32)).shape == (80, 0)
