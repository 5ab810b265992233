"""Format-aware mutations of WAV files: the RIFF size, every chunk's id and size, and the fmt
chunk's fields (format tag, channels, rate, block align, bits, the EXTENSIBLE sub-format), set
near interesting values or to values the reader must refuse; sizes set to the streaming 0 and
0xFFFFFFFF. See mutate.py for what each reaches."""
from __future__ import annotations

import functools

from .edits import _interesting_near, _write_int, int_field

RIFF_MAGIC = b"RIFF"
CHUNK_IDS = (b"fmt ", b"data", b"LIST", b"fact", b"JUNK", b"\0\0\0\0")
# values the fmt fields take in real files, or that a reader must refuse
FMT_VALUES = {"tag": (1, 3, 0xFFFE, 2, 6, 7, 0x55, 0), "channels": (0, 1, 2, 6, 255, 65535),
              "rate": (0, 1, 8000, 44100, 999_983, 1_000_001, 0xFFFFFFFF),
              "bits": (0, 1, 8, 12, 16, 20, 24, 32, 64, 65535), "sub-format": (1, 3, 2, 0xFFFE, 0)}


def is_wav(data: bytes) -> bool:
    return data.startswith(RIFF_MAGIC) and data[8:12] == b"WAVE"


def wav_fields(data: bytes) -> list[tuple[int, int, str]]:
    """(offset, size, role) of the integer fields of a valid WAV: the RIFF size, each chunk's
    id and size, the fmt chunk's fields."""
    if len(data) < 12 or not data.startswith(RIFF_MAGIC):
        raise ValueError("not a RIFF file")
    fields, at = [(4, 4, "riff-size")], 12
    while at + 8 <= len(data):
        size = int.from_bytes(data[at + 4:at + 8], "little")
        fields += [(at, 4, "chunk-id"), (at + 4, 4, "chunk-size")]
        if data[at:at + 4] == b"fmt ":
            fields += [(at + 8, 2, "tag"), (at + 10, 2, "channels"), (at + 12, 4, "rate"), (at + 16, 4, "byte-rate"),
                       (at + 20, 2, "block-align"), (at + 22, 2, "bits")]
            if size >= 40:
                fields += [(at + 24, 2, "extension-size"), (at + 26, 2, "valid-bits"), (at + 32, 2, "sub-format")]
        at += 8 + size + (size & 1)
    return [field for field in fields if field[0] + field[1] <= len(data)]     # a file already cut short


@functools.lru_cache(maxsize=64)
def _cached_wav_fields(data: bytes):
    try:
        return wav_fields(data)
    except ValueError:
        return None


def wav_field(rng, data: bytes, ctx) -> bytes:
    """One field set to a value real files use, a boundary, or a streaming size; with a fmt
    field changed, block align is mostly fixed to match, so the reader gets past that check."""
    fields = _cached_wav_fields(data)
    if not fields:
        return int_field(rng, data, ctx)
    offset, size, role = rng.choice(fields)
    out = bytearray(data)
    current = int.from_bytes(data[offset:offset + size], "little")
    if role == "chunk-id":
        out[offset:offset + 4] = rng.choice(CHUNK_IDS)
    elif role in ("riff-size", "chunk-size") and rng.random() < 0.3:
        _write_int(out, offset, size, rng.choice((0, 0xFFFFFFFF)))
    elif role in FMT_VALUES and rng.random() < 0.7:
        _write_int(out, offset, size, rng.choice(FMT_VALUES[role]))
    else:
        _write_int(out, offset, size, _interesting_near(rng, current))
    if role in ("channels", "bits") and rng.random() < 0.8:
        fmt = {r: o for o, _, r in fields}
        channels = int.from_bytes(out[fmt["channels"]:fmt["channels"] + 2], "little")
        bits = int.from_bytes(out[fmt["bits"]:fmt["bits"] + 2], "little")
        _write_int(out, fmt["block-align"], 2, channels * bits // 8)
    ctx.note(f"wav:{role}")
    return bytes(out)


WAV = ((wav_field, 12),)
