"""engine.audio.read_wav against sox, which reads the same files itself, and Python's wave
module; headers made by hand (tests/audio/wavs.py); every broken header a clear AudioError."""
import struct
import sys
import wave

import numpy as np
import pytest

from engine.audio import load_audio, read_wav
from engine.errors import AudioError, InputError
from tests.audio import wavs
from tests.audio.clips import sox, speak

# (bits, sox encoding, rate, channels): every format the reader supports, at the common rates
FORMATS = [(8, "unsigned-integer", 8000, 1), (16, "signed-integer", 16000, 1), (24, "signed-integer", 22050, 2),
           (32, "signed-integer", 44100, 1), (32, "floating-point", 48000, 2), (64, "floating-point", 16000, 1),
           (16, "signed-integer", 44100, 2), (24, "signed-integer", 48000, 3), (16, "signed-integer", 8000, 6)]


def sox_samples(path, channels: int) -> np.ndarray:
    """The samples of a WAV as sox reads them, as float32 (frames, channels). (sox rounds
    32-bit integers to multiples of 2**-24 on the way to float.)"""
    raw = path.with_suffix(".f32")
    sox("-D", path, "-t", "raw", "-e", "floating-point", "-b", 32, "-L", raw)
    return np.fromfile(raw, "<f4").reshape(-1, channels)


def sox_integers(path, bits: int, channels: int) -> np.ndarray:
    """The integer samples of a WAV as sox writes them raw, decoded here (24-bit by hand),
    scaled to [-1, 1) in float64."""
    raw = path.with_suffix(".raw")
    encoding = "unsigned-integer" if bits == 8 else "signed-integer"
    sox("-D", path, "-t", "raw", "-e", encoding, "-b", bits, "-L", raw)
    data = np.fromfile(raw, np.uint8)
    if bits == 8:
        values = data.astype(np.int64) - 128
    elif bits == 24:
        triples = data.reshape(-1, 3).astype(np.int64)
        values = triples[:, 0] | triples[:, 1] << 8 | triples[:, 2] << 16
        values -= (values >= 1 << 23) << 24
    else:
        values = data.view(f"<i{bits // 8}").astype(np.int64)
    return (values / 2.0 ** (bits - 1)).reshape(-1, channels)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """Half a second of a different signal in each of 6 channels, as 32-bit float (sox synth)."""
    path = tmp_path_factory.mktemp("wav") / "source.wav"
    sox("-n", "-r", 48000, "-c", 6, "-b", 32, "-e", "floating-point", path, "synth", 0.5,
        "sine", 300, "sine", "200-3000", "square", 440, "pinknoise", "sine", 1000, "whitenoise", "vol", 0.7)
    return path


@pytest.mark.parametrize("bits, encoding, rate, channels", FORMATS)
def test_formats_match_sox(tmp_path, source, bits, encoding, rate, channels):
    path = tmp_path / f"x_{bits}_{encoding}_{rate}_{channels}.wav"
    sox("-D", source, "-r", rate, "-c", channels, "-b", bits, "-e", encoding, path, "remix", *range(1, channels + 1))
    samples, sample_rate = read_wav(path)
    expected = sox_samples(path, channels)
    assert sample_rate == rate
    assert samples.dtype == np.float32 and samples.shape == expected.shape and samples.shape[0] > rate // 3
    if bits == 32 and encoding == "signed-integer" or bits == 64:    # sox holds samples as int32
        np.testing.assert_allclose(samples, expected, rtol=0, atol=2 ** -23)
    else:
        np.testing.assert_array_equal(samples, expected)
    if encoding != "floating-point":               # exactly the integers, each rounded once to float32
        np.testing.assert_array_equal(samples, sox_integers(path, bits, channels).astype(np.float32))
    if bits == 64:                                 # sox writes the data chunk last
        stored = np.frombuffer(path.read_bytes()[-samples.size * 8:], "<f8").reshape(-1, channels)
        np.testing.assert_array_equal(samples, stored.astype(np.float32))
    assert np.abs(samples).max() <= 1.0
    # the same bytes through read_wav(bytes) and under another name
    again, _ = read_wav(memoryview(path.read_bytes()), name="given.wav")
    np.testing.assert_array_equal(again, samples)


def test_sox_writes_extensible_and_it_is_read(tmp_path, source):
    """sox writes WAVE_FORMAT_EXTENSIBLE for more than 16 bits or 2 channels: those cases above
    read it; check that they really were EXTENSIBLE files."""
    path = tmp_path / "ext.wav"
    sox("-D", source, "-b", 24, path)
    assert struct.unpack("<H", path.read_bytes()[20:22])[0] == wavs.EXTENSIBLE
    np.testing.assert_array_equal(read_wav(path)[0], sox_samples(path, 6))


def test_16_bit_matches_python_wave(tmp_path):
    path = speak("Testing one two three.", tmp_path / "speech.wav")
    with wave.open(str(path)) as f:
        expected = np.frombuffer(f.readframes(f.getnframes()), "<i2").astype(np.float32) / 32768
        rate = f.getframerate()
    samples, sample_rate = read_wav(path)
    assert sample_rate == rate == 16000 and samples.shape == (len(expected), 1)
    np.testing.assert_array_equal(samples[:, 0], expected)


@pytest.mark.parametrize("sub_format, bits, dtype", [(wavs.PCM, 16, "<i2"), (wavs.PCM, 32, "<i4"), (wavs.FLOAT, 32, "<f4")])
def test_extensible_by_hand(sub_format, bits, dtype):
    rng = np.random.default_rng(0)
    values = rng.integers(-2 ** (bits - 1), 2 ** (bits - 1), (50, 2)) if sub_format == wavs.PCM else rng.uniform(-1, 1, (50, 2))
    data = wavs.wav(values.astype(dtype).tobytes(), channels=2, rate=22050, bits=bits, sub_format=sub_format)
    samples, rate = read_wav(data)
    expected = values / 2.0 ** (bits - 1) if sub_format == wavs.PCM else values
    assert rate == 22050
    np.testing.assert_allclose(samples, expected.astype(np.float32), rtol=1e-7, atol=0)


def test_odd_chunks_are_skipped_with_their_pad_byte():
    pcm = np.arange(-20, 20, dtype="<i2").tobytes()
    plain = read_wav(wavs.wav(pcm))[0]
    crowded = wavs.riff(wavs.chunk(b"LIST", b"INFOISFT\x03\x00\x00\x00ab\x00"),      # 15 bytes: padded
                        wavs.chunk(b"JUNK", b"x" * 7), wavs.chunk(b"fmt ", wavs.fmt()),
                        wavs.chunk(b"fact", struct.pack("<I", 40)), wavs.chunk(b"data", pcm),
                        wavs.chunk(b"id3 ", b"y" * 9))
    np.testing.assert_array_equal(read_wav(crowded)[0], plain)
    # fmt after data is allowed; an odd-sized data chunk (8-bit mono) keeps its pad byte
    odd = bytes(range(100, 133))
    late = wavs.riff(wavs.chunk(b"data", odd), wavs.chunk(b"fmt ", wavs.fmt(bits=8)))
    np.testing.assert_array_equal(read_wav(late)[0][:, 0], (np.arange(100, 133) - 128) / 128)


def test_streaming_sizes_read_to_the_end():
    pcm = np.arange(0, 300, 3, dtype="<i2").tobytes()
    expected = read_wav(wavs.wav(pcm))[0]
    for riff_size, data_size in ((0xFFFFFFFF, 0xFFFFFFFF), (0, 0), (0xFFFFFFFF, 0), (0, 0xFFFFFFFF)):
        data = wavs.riff(wavs.chunk(b"fmt ", wavs.fmt()), wavs.chunk(b"data", pcm, size=data_size), size=riff_size)
        np.testing.assert_array_equal(read_wav(data)[0], expected)
    # a streamed file cut inside a frame: the partial frame is dropped
    cut = wavs.riff(wavs.chunk(b"fmt ", wavs.fmt()), wavs.chunk(b"data", pcm, size=0xFFFFFFFF), size=0xFFFFFFFF)[:-1]
    np.testing.assert_array_equal(read_wav(cut)[0], expected[:-1])


def test_trailing_bytes_after_riff_are_ignored():
    pcm = np.arange(10, dtype="<i2").tobytes()
    np.testing.assert_array_equal(read_wav(wavs.wav(pcm) + b"TAG trailing junk")[0], read_wav(wavs.wav(pcm))[0])


GOOD_PCM = np.arange(64, dtype="<i2").tobytes()
GOOD = wavs.wav(GOOD_PCM)
BAD = {
    "empty": (b"", "empty file"),
    "short": (b"RIFF\x04\x00", "RIFF header: the file is 6 bytes"),
    "not riff": (b"ID3\x04" + b"\0" * 40, "not a WAV file"),
    "rifx": (b"RIFX" + GOOD[4:], "RIFX WAV files"),
    "truncated": (GOOD[:-10], "RIFF header: declared size 164 bytes is larger than the file holds (154 bytes"),
    "truncated in header": (GOOD[:30], "RIFF header: declared size 164 bytes"),
    "data past riff": (wavs.riff(wavs.chunk(b"fmt ", wavs.fmt()), wavs.chunk(b"data", GOOD_PCM[:-10], size=128)),
                       "'data' chunk at byte 36: declared size 128 bytes is larger than the file holds (118 bytes"),
    "fmt past riff": (wavs.riff(wavs.chunk(b"fmt ", wavs.fmt()[:10], size=16)),
                      "'fmt ' chunk at byte 12: declared size 16 bytes is larger"),
    "huge riff": (b"RIFF" + struct.pack("<I", 0x7FFFFFF0) + GOOD[8:], "RIFF header: declared size 2147483632"),
    "huge data": (wavs.riff(wavs.chunk(b"fmt ", wavs.fmt()), wavs.chunk(b"data", GOOD_PCM, size=0xFFFFFFF0)),
                  "'data' chunk at byte 36: declared size 4294967280"),
    "huge other chunk": (wavs.riff(wavs.chunk(b"LIST", b"abcd", size=0x40000000), wavs.chunk(b"data", GOOD_PCM)),
                         "'LIST' chunk at byte 12: declared size 1073741824"),
    "no fmt": (wavs.riff(wavs.chunk(b"data", GOOD_PCM)), "no 'fmt ' chunk"),
    "no data": (wavs.riff(wavs.chunk(b"fmt ", wavs.fmt())), "no 'data' chunk"),
    "nothing": (wavs.riff(), "no 'fmt ' chunk"),
    "zero channels": (wavs.wav(GOOD_PCM, channels=0, block_align=2), "fmt chunk: 0 channels"),
    "zero rate": (wavs.wav(GOOD_PCM, rate=0), "fmt chunk: sample rate 0 Hz"),
    "absurd rate": (wavs.wav(GOOD_PCM, rate=4_000_000_000), "fmt chunk: sample rate 4000000000 Hz"),
    "12 bits": (wavs.wav(GOOD_PCM, bits=12, block_align=2), "fmt chunk: 12 bits per sample is not supported for PCM"),
    "float 16": (wavs.wav(GOOD_PCM, tag=wavs.FLOAT, bits=16), "fmt chunk: 16 bits per sample is not supported for float"),
    "adpcm": (wavs.wav(GOOD_PCM, tag=2), "fmt chunk: format tag 0x0002 (Microsoft ADPCM) is not supported"),
    "mp3 in extensible": (wavs.wav(GOOD_PCM, sub_format=0x55), "format tag 0x0055 (MP3)"),
    "unknown guid": (wavs.wav(GOOD_PCM, sub_format=1, guid_tail=b"\1" * 14), "sub-format GUID 0100"),
    "short fmt": (wavs.riff(wavs.chunk(b"fmt ", wavs.fmt()[:14]), wavs.chunk(b"data", GOOD_PCM)),
                  "fmt chunk: 14 bytes, fewer than the 16"),
    "short extensible": (wavs.riff(wavs.chunk(b"fmt ", wavs.fmt(sub_format=1)[:30]), wavs.chunk(b"data", GOOD_PCM)),
                         "fmt chunk: 30 bytes, fewer than the 40"),
    "block align": (wavs.wav(GOOD_PCM, block_align=3), "fmt chunk: block align 3 bytes does not match 1 channels"),
    "nan": (wavs.wav(np.array([0.5, np.nan], "<f4").tobytes(), tag=wavs.FLOAT, bits=32),
            "data chunk: sample 1 of channel 0 is not finite"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_give_audio_errors_naming_file_and_field(tmp_path, case):
    data, message = BAD[case]
    path = tmp_path / f"{case.replace(' ', '_')}.wav"
    path.write_bytes(data)
    with pytest.raises(AudioError) as raised:
        read_wav(path)
    assert message in str(raised.value) and str(path) in str(raised.value), str(raised.value)
    assert raised.value.file == str(path)
    with pytest.raises(AudioError, match="given name"):
        read_wav(data, name="given name")
    assert isinstance(raised.value, InputError)


def test_missing_file(tmp_path):
    with pytest.raises(AudioError, match="cannot open .*nothing.wav"):
        read_wav(tmp_path / "nothing.wav")
    with pytest.raises(AudioError, match="cannot open"):
        read_wav(tmp_path)                              # a directory


def test_empty_data_is_empty_audio():
    samples, rate = read_wav(wavs.wav(b"", channels=2))
    assert samples.shape == (0, 2) and rate == 16000


# --- load_audio --------------------------------------------------------------------------------------

def test_load_audio_downmixes_and_resamples(tmp_path, source):
    path = tmp_path / "stereo.wav"
    sox("-D", source, "-r", 44100, "-b", 16, "-c", 2, path, "remix", 1, 2)
    stereo, _ = read_wav(path)
    mono = load_audio(path)
    assert mono.dtype == np.float32 and mono.shape == (-(-len(stereo) * 16000 // 44100),)
    from engine.audio import resample
    np.testing.assert_array_equal(mono, resample(stereo.mean(axis=1), 44100, 16000))
    np.testing.assert_array_equal(load_audio(path.read_bytes()), mono)
    np.testing.assert_array_equal(load_audio(stereo, orig_sr=44100), mono)
    np.testing.assert_array_equal(load_audio(stereo[:, 0], sr=44100, orig_sr=44100), stereo[:, 0])


def test_load_audio_bad_calls(tmp_path):
    with pytest.raises(InputError, match="orig_sr"):
        load_audio(np.zeros(10, np.float32))
    with pytest.raises(InputError, match="only for arrays"):
        load_audio(GOOD, orig_sr=8000)
    with pytest.raises(AudioError, match="shape"):
        load_audio(np.zeros((2, 2, 2)), orig_sr=16000)
    with pytest.raises(AudioError, match="cannot open"):
        load_audio(tmp_path / "absent.mp3")


def test_other_formats_without_ffmpeg_or_in_the_browser(tmp_path, monkeypatch):
    from engine.audio import load as load_module
    path = tmp_path / "song.mp3"
    path.write_bytes(b"ID3\x03" + b"\0" * 100)
    monkeypatch.setattr(load_module.shutil, "which", lambda name: None)
    with pytest.raises(AudioError, match=f"only WAV is read.*{path.name}"):
        load_audio(path)
    monkeypatch.setattr(sys, "platform", "emscripten")
    with pytest.raises(AudioError, match="only WAV files and float32 sample arrays are read in the browser"):
        load_audio(path.read_bytes(), name="song.mp3")
    np.testing.assert_array_equal(load_audio(GOOD), read_wav(GOOD)[0][:, 0])     # WAV still is


def test_load_audio_clips_beyond_full_scale_as_ffmpeg_does():
    loud = np.array([0.5, 3.0, -1e30, 1.0, -0.25], np.float32)
    data = wavs.wav(loud.tobytes(), tag=wavs.FLOAT, bits=32)
    np.testing.assert_array_equal(read_wav(data)[0][:, 0], loud)                 # read as stored
    np.testing.assert_array_equal(load_audio(data), [0.5, 1.0, -1.0, 1.0, -0.25])
    with pytest.raises(AudioError, match="finite"):
        load_audio(np.array([0.0, np.inf]), orig_sr=16000)


FAKE_FFMPEG = """#!{python}
# Stands in for ffmpeg: notes its arguments and stdin, answers as ffmpeg would.
import json, sys
data = sys.stdin.buffer.read() if "pipe:0" in sys.argv else b""
open({log!r}, "w").write(json.dumps({{"argv": sys.argv[1:], "stdin": len(data)}}))
if "broken" in " ".join(sys.argv) or data.startswith(b"broken"):
    sys.stderr.write("ffmpeg version x\\nInvalid data found when processing input\\n")
    sys.exit(1)
sys.stdout.buffer.write(bytes([0, 0, 0, 0x40, 0, 0x80, 0xff, 0x7f]))     # s16le 0, 16384, -32768, 32767
"""


@pytest.fixture
def fake_ffmpeg(tmp_path, monkeypatch):
    """An `ffmpeg` first on PATH that records how it was called (the real one need not be installed)."""
    import json
    import os
    import sys
    folder = tmp_path / "bin"
    folder.mkdir()
    log = tmp_path / "ffmpeg.json"
    (folder / "ffmpeg").write_text(FAKE_FFMPEG.format(python=sys.executable, log=str(log)))
    (folder / "ffmpeg").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return lambda: json.loads(log.read_text())


def test_other_formats_through_ffmpeg_as_openai_whisper_runs_it(tmp_path, fake_ffmpeg):
    path = tmp_path / "song.mp3"
    path.write_bytes(b"ID3\x03" + b"\0" * 100)
    samples = load_audio(path)
    np.testing.assert_array_equal(samples, np.array([0, 16384, -32768, 32767], np.float32) / 32768)
    assert samples.dtype == np.float32
    assert fake_ffmpeg()["argv"] == ["-nostdin", "-threads", "0", "-i", str(path), "-f", "s16le", "-ac", "1",
                                     "-acodec", "pcm_s16le", "-ar", "16000", "-"]
    load_audio(path.read_bytes(), sr=8000)                  # bytes: through stdin
    called = fake_ffmpeg()
    assert called["stdin"] == 104 and called["argv"][called["argv"].index("-i") + 1] == "pipe:0"
    assert called["argv"][called["argv"].index("-ar") + 1] == "8000"
    broken = tmp_path / "broken.mp3"
    broken.write_bytes(b"nothing")
    with pytest.raises(AudioError, match=f"ffmpeg could not decode it: Invalid data found when processing input.*{broken}"):
        load_audio(broken)
