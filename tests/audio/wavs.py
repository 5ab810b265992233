"""WAV files built byte by byte, for the headers real writers seldom make (EXTENSIBLE with a
chosen GUID, odd chunks, streaming sizes) and for broken ones."""
from __future__ import annotations

import struct

PCM, FLOAT, EXTENSIBLE = 0x0001, 0x0003, 0xFFFE
GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"


def chunk(chunk_id: bytes, body: bytes, size: int | None = None) -> bytes:
    """A RIFF chunk, with its pad byte when the body is odd; `size` overrides the declared size."""
    return chunk_id + struct.pack("<I", len(body) if size is None else size) + body + b"\0" * (len(body) & 1)


def fmt(tag: int = PCM, channels: int = 1, rate: int = 16000, bits: int = 16, *, block_align: int | None = None,
        sub_format: int | None = None, guid_tail: bytes = GUID_TAIL, valid_bits: int | None = None) -> bytes:
    """The body of a fmt chunk; with sub_format, a WAVE_FORMAT_EXTENSIBLE one (tag 0xFFFE)."""
    align = channels * bits // 8 if block_align is None else block_align
    body = struct.pack("<HHIIHH", EXTENSIBLE if sub_format is not None else tag, channels, rate,
                       (rate * align) & 0xFFFFFFFF, align, bits)
    if sub_format is not None:
        body += struct.pack("<HHI", 22, valid_bits or bits, 0) + struct.pack("<H", sub_format) + guid_tail
    return body


def riff(*chunks: bytes, size: int | None = None) -> bytes:
    """RIFF....WAVE and the chunks; `size` overrides the declared RIFF size."""
    body = b"WAVE" + b"".join(chunks)
    return b"RIFF" + struct.pack("<I", len(body) if size is None else size) + body


def wav(samples: bytes, **format_fields) -> bytes:
    return riff(chunk(b"fmt ", fmt(**format_fields)), chunk(b"data", samples))
