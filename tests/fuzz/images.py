"""Format-aware mutations of images and arrays: PNG, .npy and JPEG. See mutate.py for what each reaches."""
from __future__ import annotations

import functools
import struct
import zlib

from .edits import GENERIC, _fit, _interesting_near, _write_int, header_int, mutate_bytes


# --- PNG -----------------------------------------------------------------------------------------------

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_chunks(data: bytes) -> list[list] | None:
    """[[type, body], ...] of a PNG whose chunk framing is intact, else None."""
    if not data.startswith(PNG_SIGNATURE):
        return None
    chunks, pos = [], 8
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        if pos + 12 + length > len(data):
            return None
        chunks.append([data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]])
        pos += 12 + length
    return chunks if chunks else None


def png_join(chunks) -> bytes:
    return PNG_SIGNATURE + b"".join(struct.pack(">I", len(body)) + kind + body
                                    + struct.pack(">I", zlib.crc32(kind + body)) for kind, body in chunks)


def _ihdr(chunks):
    return next((c for c in chunks if c[0] == b"IHDR" and len(c[1]) == 13), None)


def png_ihdr(rng, data: bytes, ctx) -> bytes:
    chunks = png_chunks(data)
    header = chunks and _ihdr(chunks)
    if not header:
        return header_int(rng, data, ctx)
    fields = list(struct.unpack(">IIBBBBB", header[1]))
    which = rng.randrange(7)
    if which < 2:
        fields[which] = _fit(_interesting_near(rng, fields[which]), 4)
    else:
        fields[which] = rng.choice((0, 1, 2, 3, 4, 6, 8, 16, 255, rng.randrange(256)))
    header[1] = struct.pack(">IIBBBBB", *fields)
    ctx.note(f"png:ihdr-{('width', 'height', 'depth', 'colour', 'compression', 'filter', 'interlace')[which]}")
    return png_join(chunks)


def png_chunk_frame(rng, data: bytes, ctx) -> bytes:
    """A chunk's length field or CRC broken."""
    out = bytearray(data)
    pos, starts = 8, []
    while pos + 12 <= len(out):
        starts.append(pos)
        pos += 12 + struct.unpack_from(">I", out, pos)[0]
    if not starts:
        return header_int(rng, data, ctx)
    at = rng.choice(starts)
    if rng.random() < 0.6:
        _write_int(out, at, 4, _interesting_near(rng, struct.unpack_from(">I", out, at)[0]), ">")
        ctx.note("png:chunk-length")
    else:
        length = struct.unpack_from(">I", out, at)[0]
        if at + 12 + length <= len(out):
            out[at + 8 + length + rng.randrange(4)] ^= 0xFF
        ctx.note("png:crc")
    return bytes(out)


def png_chunk_order(rng, data: bytes, ctx) -> bytes:
    chunks = png_chunks(data)
    if not chunks:
        return header_int(rng, data, ctx)
    choice = rng.random()
    if choice < 0.2:
        chunks.insert(rng.randrange(len(chunks) + 1), list(rng.choice(chunks)))
        ctx.note("png:duplicate-chunk")
    elif choice < 0.35 and len(chunks) > 1:
        del chunks[rng.randrange(len(chunks))]
        ctx.note("png:drop-chunk")
    elif choice < 0.5:
        kind = rng.choice((b"ABCD", b"abCD", b"PLTE", b"tRNS", b"IDAT", b"IEND", b"\0\0\0\0", b"IHDR"))
        body = bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 2, 3, 6, 13, 255, 768, 769, 1000))))
        chunks.insert(rng.randrange(1, len(chunks) + 1), [kind, body])
        ctx.note(f"png:insert-{kind.decode('latin-1')}")
    elif choice < 0.7:
        for chunk in chunks:
            if chunk[0] in (b"PLTE", b"tRNS"):
                chunk[1] = chunk[1][:rng.randrange(len(chunk[1]) + 1)] + bytes(rng.choice((0, 1, 300)))
        ctx.note("png:palette-sizes")
    else:
        joined = b"".join(body for kind, body in chunks if kind == b"IDAT")
        if joined:
            step = rng.choice((1, 2, 7))
            pieces = [[b"IDAT", joined[i:i + step]] for i in range(0, len(joined), step)]
            first = next(i for i, c in enumerate(chunks) if c[0] == b"IDAT")
            chunks = [c for c in chunks[:first]] + pieces + [c for c in chunks[first:] if c[0] != b"IDAT"]
            ctx.note("png:split-idat")
    return png_join(chunks)


def png_scanlines(rng, data: bytes, ctx) -> bytes:
    """The inflated image data mutated (filter bytes above all) and compressed again; CRCs fixed."""
    chunks = png_chunks(data)
    if not chunks:
        return header_int(rng, data, ctx)
    joined = b"".join(body for kind, body in chunks if kind == b"IDAT")
    try:
        raw = zlib.decompress(joined)
    except zlib.error:
        return png_stream(rng, data, ctx)
    if rng.random() < 0.5 and raw:
        out = bytearray(raw)
        for _ in range(rng.randint(1, 6)):
            out[rng.randrange(len(out))] = rng.choice((0, 1, 2, 3, 4, 5, 255))
        raw = bytes(out)
        ctx.note("png:filter-bytes")
    else:
        raw = mutate_bytes(rng, raw, ctx, GENERIC)
    return _png_with_idat(chunks, zlib.compress(raw))


def png_stream(rng, data: bytes, ctx) -> bytes:
    """The compressed stream mutated, CRCs fixed (so zlib, not the CRC check, meets the damage)."""
    chunks = png_chunks(data)
    if not chunks:
        return header_int(rng, data, ctx)
    joined = b"".join(body for kind, body in chunks if kind == b"IDAT")
    ctx.note("png:zlib-stream")
    return _png_with_idat(chunks, mutate_bytes(rng, joined, ctx, GENERIC))


def _png_with_idat(chunks, stream: bytes) -> bytes:
    first = next((i for i, c in enumerate(chunks) if c[0] == b"IDAT"), len(chunks) - 1)
    rest = [c for c in chunks if c[0] != b"IDAT"]
    return png_join(rest[:first] + [[b"IDAT", stream]] + rest[first:])


@functools.lru_cache(maxsize=16)
def _png_bomb_stream(rows: int, row_bytes: int, filter_type: int) -> bytes:
    squeeze, parts = zlib.compressobj(9), []
    line = bytes([filter_type]) + bytes(row_bytes)
    block = line * max(1, (1 << 20) // len(line))
    done = 0
    while done < rows:
        n = min(rows - done, len(block) // len(line))
        parts.append(squeeze.compress(block[:n * len(line)]))
        done += n
    return b"".join(parts) + squeeze.flush()


# (width, height, colour, depth): a few kB that inflate to megabytes; the decoder must stay fast
PNG_BOMBS = ((1, 16_000_000, 0, 8), (16_000_000, 1, 0, 8), (4096, 4096, 2, 8), (2000, 2000, 6, 16),
             (1, 4_000_000, 6, 8), (8000, 2000, 0, 1), (3, 3_000_000, 3, 8))


def png_bomb(rng, data: bytes, ctx) -> bytes:
    width, height, colour, depth = rng.choice(PNG_BOMBS)
    interlace = rng.random() < 0.15 and width * height <= 4_000_000
    filter_type = rng.choice((0, 1, 2, 3, 4))
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    if interlace:
        raw_rows = [(-(-(height - y0) // dy), -(-(width - x0) // dx)) for x0, y0, dx, dy in
                    ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))]
        stream = zlib.compress(b"".join((bytes([filter_type]) + bytes((w * channels * depth + 7) // 8)) * h
                                        for h, w in raw_rows if h and w), 9)
    else:
        stream = _png_bomb_stream(height, (width * channels * depth + 7) // 8, filter_type)
    chunks = [[b"IHDR", struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, int(interlace))]]
    if colour == 3:
        chunks.append([b"PLTE", bytes(range(9))])
    chunks += [[b"IDAT", stream[i:i + 65536]] for i in range(0, len(stream), 65536)] + [[b"IEND", b""]]
    ctx.note(f"png:bomb-{width}x{height}-c{colour}-d{depth}-f{filter_type}{'-adam7' if interlace else ''}")
    return png_join(chunks)


PNG = ((png_ihdr, 6), (png_chunk_frame, 3), (png_chunk_order, 4), (png_scanlines, 6), (png_stream, 2),
       (png_bomb, 1))


# --- .npy ---------------------------------------------------------------------------------------------

NPY_DESCRS = ("'|u1'", "'<u2'", "'<i8'", "'>i4'", "'|b1'", "'<f2'", "'<f8'", "'>f8'", "'<c8'", "'|O'", "'<U5'",
              "'|V8'", "'<M8[s]'", "[('a', '<i4')]", "'x'", "12", "('<i4', (2,))", "'<f16'", "None", "'<u8'",
              "[('a', '<i4', (70,))]", "'" + "<" * 3000 + "'")
NPY_SHAPES = ("()", "(0,)", "(0, 5)", "(5, 0)", "(2147483648, 2147483648)", "(9223372036854775807, 2)",
              "(" + "1" + "0" * 3000 + ", 3)", "(-1, 2)", "(" + "1, " * 65 + ")", "(" + "1, " * 3000 + ")",
              "(2, 'a')", "(2.5, 3)", "[3, 4]", "None", "(4294967296, 4294967296, 4)", "(3, 3, 5)", "(3, 3, 0)")
NPY_BREAKERS = ("'", '"""', "(", "{", "\\", "\x00", "#", "é", "\u2028", "\t", "\\\n", "'''", "[", "}", "\r",
                "0x", "1_", "lambda: 0", "__import__('os')", "(" * 300, "{'a': " * 300, "\x0c")


def _npy_parts(data: bytes):
    """(version, length field size, header text, data) of an .npy file, else None."""
    if not data.startswith(b"\x93NUMPY") or len(data) < 10:
        return None
    major = data[6]
    size = 2 if major == 1 else 4
    if len(data) < 8 + size:
        return None
    length = int.from_bytes(data[8:8 + size], "little")
    header = data[8 + size:8 + size + length]
    return data[6:8], size, header.decode("latin-1"), data[8 + size + length:]


def _npy_join(version: bytes, size: int, header: str, body: bytes) -> bytes:
    raw = header.encode("latin-1") if all(ord(c) < 256 for c in header) else header.encode("utf-8", "surrogatepass")
    return b"\x93NUMPY" + version + _fit(len(raw), size).to_bytes(size, "little") + raw + body


def npy_header(rng, data: bytes, ctx) -> bytes:
    parts = _npy_parts(data)
    if not parts:
        return header_int(rng, data, ctx)
    version, size, header, body = parts
    key = rng.choice(("descr", "shape", "fortran_order"))
    value = {"descr": NPY_DESCRS, "shape": NPY_SHAPES, "fortran_order": ("True", "False", "1", "'x'", "None")}[key]
    start = header.find(f"'{key}':")
    if start < 0:
        return header_int(rng, data, ctx)
    start += len(key) + 3
    depth, end = 0, start
    while end < len(header):                        # the value runs to the next top-level comma
        c = header[end]
        depth += c in "([{"
        depth -= c in ")]}"
        if depth < 0 or (depth == 0 and c == ","):
            break
        end += 1
    header = header[:start] + " " + rng.choice(value) + header[end:]
    ctx.note(f"npy:{key}")
    return _npy_join(version, size, header, body)


def npy_break(rng, data: bytes, ctx) -> bytes:
    """Text that Python's tokenizer or ast.literal_eval chokes on, inside the header."""
    parts = _npy_parts(data)
    if not parts:
        return header_int(rng, data, ctx)
    version, size, header, body = parts
    at = rng.randrange(len(header) + 1)
    text = rng.choice(NPY_BREAKERS)
    ctx.note("npy:break")
    return _npy_join(version, size, header[:at] + text + header[at:], body)


def npy_length(rng, data: bytes, ctx) -> bytes:
    parts = _npy_parts(data)
    if not parts:
        return header_int(rng, data, ctx)
    version, size, _, _ = parts
    out = bytearray(data)
    value = rng.choice((0, 1, 0xFFFF, 0xEFFFFFFF, 0xFFFFFFFF, 10, 100_000)) if rng.random() < 0.7 else \
        _interesting_near(rng, int.from_bytes(out[8:8 + size], "little"))
    _write_int(out, 8, size, value)
    ctx.note("npy:header-length")
    return bytes(out)


def npy_version(rng, data: bytes, ctx) -> bytes:
    out = bytearray(data)
    if len(out) >= 8:
        out[6:8] = bytes(rng.choice(((1, 0), (2, 0), (3, 0), (0, 0), (4, 0), (255, 255), (1, 1))))
    ctx.note("npy:version")
    return bytes(out)


NPY = ((npy_header, 8), (npy_break, 4), (npy_length, 3), (npy_version, 2))


# --- JPEG -------------------------------------------------------------------------------------------------

def jpeg_frame(rng, data: bytes, ctx) -> bytes:
    """A start-of-frame's height/width, or a segment length, set to a boundary value."""
    out = bytearray(data)
    markers = [i for i in range(2, len(out) - 8) if out[i] == 0xFF and 0xC0 <= out[i + 1] <= 0xFE]
    if not markers:
        return header_int(rng, data, ctx)
    at = rng.choice(markers)
    if 0xC0 <= out[at + 1] <= 0xCF and out[at + 1] not in (0xC4, 0xC8, 0xCC) and rng.random() < 0.7:
        _write_int(out, at + 5 + 2 * rng.randrange(2), 2, rng.choice((0, 1, 0xFFFF, 0x8000, 16384)), ">")
        ctx.note("jpeg:frame-size")
    else:
        _write_int(out, at + 2, 2, rng.choice((0, 1, 2, 3, 0xFFFF)), ">")
        ctx.note("jpeg:segment-length")
    return bytes(out)


IMAGE = ((jpeg_frame, 4),)
