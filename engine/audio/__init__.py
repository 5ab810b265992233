"""Audio input for speech models, in NumPy only so it runs unchanged under Pyodide: a WAV
reader, a band-limited resampler, Whisper's log-mel front end, and speech segments from a voice
activity detector's probabilities."""
from .load import audio_input, load_audio
from .mel import (CHUNK_LENGTH, FRAMES_PER_SECOND, HOP_LENGTH, N_FFT, N_FRAMES, N_SAMPLES, N_SAMPLES_PER_TOKEN,
                  SAMPLE_RATE, TOKENS_PER_SECOND, log_mel_spectrogram, mel_filters, pad_or_trim)
from .resample import downmix, resample
from .vad import Segmenter, speech_segments
from .wav import read_wav

__all__ = ["SAMPLE_RATE", "N_FFT", "HOP_LENGTH", "CHUNK_LENGTH", "N_SAMPLES", "N_FRAMES", "N_SAMPLES_PER_TOKEN",
           "FRAMES_PER_SECOND", "TOKENS_PER_SECOND",
           "audio_input", "load_audio", "read_wav", "resample", "downmix", "log_mel_spectrogram", "mel_filters", "pad_or_trim",
           "Segmenter", "speech_segments"]
