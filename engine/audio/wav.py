"""A RIFF/WAVE reader in NumPy only (so it runs unchanged under Pyodide).

Reads PCM 8-bit (unsigned), 16-, 24- and 32-bit (signed), IEEE float 32 and 64, in the plain
format and in WAVE_FORMAT_EXTENSIBLE (sub-format GUID PCM or float), with any channel count.
Chunks other than `fmt ` and `data` (LIST, fact, cue, ...) are skipped, with RIFF's pad byte
after an odd-sized chunk.

Sizes a header declares are checked against the bytes the file holds before anything is
allocated from them. One exception, because writers that stream (a recorder, ffmpeg to a pipe)
cannot know the length when they write the header: a RIFF or data size of 0 or 0xFFFFFFFF that
runs past the end means "up to the end of the file". Any other size past the end is an error:
the file was cut short.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import AudioError

WAVE_FORMAT_PCM = 0x0001
WAVE_FORMAT_IEEE_FLOAT = 0x0003
WAVE_FORMAT_EXTENSIBLE = 0xFFFE
# The sub-format GUID of WAVE_FORMAT_EXTENSIBLE is the format tag followed by these 14 bytes
# (KSDATAFORMAT_SUBTYPE_PCM = 00000001-0000-0010-8000-00aa00389b71, little-endian first fields).
GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
# Tags met in the wild that this reader does not decode, named in its error.
OTHER_FORMATS = {0x0002: "Microsoft ADPCM", 0x0006: "A-law", 0x0007: "mu-law", 0x0011: "IMA ADPCM",
                 0x0031: "GSM 6.10", 0x0050: "MPEG", 0x0055: "MP3", 0x0161: "WMA"}
STREAMING_SIZES = (0, 0xFFFFFFFF)
MIN_RATE, MAX_RATE = 1_000, 1_000_000      # Hz: beyond these a header is broken, not exotic
# (format, bits) -> the little-endian dtype of one sample as stored
_STORED = {(WAVE_FORMAT_PCM, 8): "u1", (WAVE_FORMAT_PCM, 16): "<i2", (WAVE_FORMAT_PCM, 24): None,
           (WAVE_FORMAT_PCM, 32): "<i4", (WAVE_FORMAT_IEEE_FLOAT, 32): "<f4",
           (WAVE_FORMAT_IEEE_FLOAT, 64): "<f8"}


def read_wav(source, name: str | None = None) -> tuple[np.ndarray, int]:
    """(samples, sample_rate) of a WAV file: samples is float32 of shape (frames, channels).

    `source` is the file's bytes (bytes, bytearray, memoryview) or a path; `name` names it in
    errors (a path names itself). Integer formats are scaled to [-1, 1) (8-bit: (x - 128) / 128,
    n-bit signed: x / 2**(n-1)); float formats are returned as stored. A partial last frame is
    dropped. Raises AudioError, naming the file and the field, on anything it cannot read."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = memoryview(source).cast("B")
    else:
        name = os.fspath(source) if name is None else name
        try:
            with open(source, "rb") as f:
                data = memoryview(f.read())
        except OSError as e:
            raise AudioError(f"cannot open ({e.strerror or e})", file=name) from None
    return _parse(data, name)


def _u16(data, at: int) -> int:
    return int.from_bytes(data[at:at + 2], "little")


def _u32(data, at: int) -> int:
    return int.from_bytes(data[at:at + 4], "little")


def _parse(data: memoryview, name) -> tuple[np.ndarray, int]:
    def bad(message):
        return AudioError(message, file=name)

    if len(data) == 0:
        raise bad("empty file (0 bytes): not a WAV file")
    if len(data) < 12:
        raise bad(f"RIFF header: the file is {len(data)} bytes, shorter than the 12-byte header")
    magic, kind = bytes(data[0:4]), bytes(data[8:12])
    if magic in (b"RIFX", b"RF64") and kind == b"WAVE":
        raise bad(f"RIFF header: {magic.decode()} WAV files (big-endian or 64-bit sizes) are not supported")
    if magic != b"RIFF" or kind != b"WAVE":
        raise bad(f"RIFF header: not a WAV file (starts with {magic!r}, form {kind!r}; expected b'RIFF' and b'WAVE')")
    riff_size = _u32(data, 4)
    end = 8 + riff_size
    streaming = riff_size in STREAMING_SIZES
    if end > len(data):
        if riff_size not in STREAMING_SIZES:
            raise bad(f"RIFF header: declared size {riff_size} bytes is larger than the file holds "
                      f"({len(data) - 8} bytes after the header): the file is truncated")
        end = len(data)
    elif riff_size < 4:
        if riff_size not in STREAMING_SIZES:
            raise bad(f"RIFF header: declared size {riff_size} bytes is smaller than the 4-byte form type")
        end = len(data)

    fmt = samples = None
    at = 12
    while at + 8 <= end and (fmt is None or samples is None):
        chunk_id, size = bytes(data[at:at + 4]), _u32(data, at + 4)
        body = at + 8
        label = chunk_id.decode("latin-1")
        if chunk_id == b"data" and (size == 0xFFFFFFFF or (size == 0 and streaming)):
            size = end - body                       # written before its length was known
        if body + size > end:
            raise bad(f"{label!r} chunk at byte {at}: declared size {size} bytes is larger than the file "
                      f"holds ({end - body} bytes left): the file is truncated")
        if chunk_id == b"fmt " and fmt is None:
            fmt = _format(data[body:body + size], bad)
        elif chunk_id == b"data" and samples is None:
            samples = (body, size)
        at = body + size + (size & 1)
    if fmt is None:
        raise bad("no 'fmt ' chunk" + (" before the end of the file" if samples is not None else ""))
    if samples is None:
        raise bad("no 'data' chunk")
    return _samples(data, *samples, fmt, bad), fmt[2]


def _format(chunk: memoryview, bad) -> tuple[int, int, int, int]:
    """(format, channels, sample_rate, bits) of a fmt chunk, checked."""
    if len(chunk) < 16:
        raise bad(f"fmt chunk: {len(chunk)} bytes, fewer than the 16 every format needs")
    tag, channels, rate = _u16(chunk, 0), _u16(chunk, 2), _u32(chunk, 4)
    block_align, bits = _u16(chunk, 12), _u16(chunk, 14)
    fmt = tag
    if tag == WAVE_FORMAT_EXTENSIBLE:
        if len(chunk) < 40:
            raise bad(f"fmt chunk: {len(chunk)} bytes, fewer than the 40 WAVE_FORMAT_EXTENSIBLE needs")
        guid = bytes(chunk[24:40])
        fmt = _u16(chunk, 24)
        if guid[2:] != GUID_TAIL:
            raise bad(f"fmt chunk: WAVE_FORMAT_EXTENSIBLE sub-format GUID {guid.hex()} is not a known one")
    if fmt not in (WAVE_FORMAT_PCM, WAVE_FORMAT_IEEE_FLOAT):
        known = f" ({OTHER_FORMATS[fmt]})" if fmt in OTHER_FORMATS else ""
        raise bad(f"fmt chunk: format tag 0x{fmt:04x}{known} is not supported: only PCM and IEEE float are read")
    if (fmt, bits) not in _STORED:
        kind = "PCM" if fmt == WAVE_FORMAT_PCM else "float"
        raise bad(f"fmt chunk: {bits} bits per sample is not supported for {kind} "
                  f"({'8, 16, 24, 32' if fmt == WAVE_FORMAT_PCM else '32, 64'})")
    if channels == 0:
        raise bad("fmt chunk: 0 channels")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise bad(f"fmt chunk: sample rate {rate} Hz is outside {MIN_RATE}..{MAX_RATE}")
    if block_align != channels * bits // 8:
        raise bad(f"fmt chunk: block align {block_align} bytes does not match {channels} channels "
                  f"of {bits} bits ({channels * bits // 8} bytes)")
    return fmt, channels, rate, bits


def _samples(data: memoryview, at: int, size: int, fmt: tuple, bad) -> np.ndarray:
    kind, channels, _, bits = fmt
    frame = channels * bits // 8
    frames = size // frame                          # a partial last frame is dropped
    raw = data[at:at + frames * frame]
    stored = _STORED[kind, bits]
    if stored is None:                              # 24-bit: each sample into the top of an int32
        wide = np.zeros((frames * channels, 4), np.uint8)
        wide[:, 1:] = np.frombuffer(raw, np.uint8).reshape(-1, 3)
        x = (wide.view("<i4")[:, 0] >> 8).astype(np.float32) * np.float32(2.0 ** -23)
    else:
        x = np.frombuffer(raw, stored)
        if kind == WAVE_FORMAT_IEEE_FLOAT:
            with np.errstate(over="ignore"):        # float64 beyond float32: inf, refused below
                x = x.astype(np.float32)
            if not np.isfinite(x).all():
                first = int(np.flatnonzero(~np.isfinite(x))[0])
                raise bad(f"data chunk: sample {first // channels} of channel {first % channels} "
                          f"is not finite ({x[first]})")
        elif bits == 8:
            x = (x.astype(np.float32) - np.float32(128)) * np.float32(1 / 128)
        else:
            x = x.astype(np.float32) * np.float32(2.0 ** (1 - bits))
    return x.reshape(frames, channels)
