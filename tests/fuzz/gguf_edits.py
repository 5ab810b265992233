"""Format-aware GGUF edits that keep the file well formed where the edit does not break it on purpose:
the file is parsed into its metadata and tensor infos, one of them is changed, and it is written
again with every count, length and offset made to agree, so the reader gets past its framing and
meets the change itself.

- metadata: a value of another type (a string for a count, an array for a flag), boundary and huge
  numbers, strings that are not UTF-8 or are very long, empty arrays, arrays nested 100 deep, a key
  repeated, a key dropped;
- tokenizer keys (`tokenizer.ggml.*`, `tokenizer.chat_template`): the vocabulary emptied, cut short,
  its tokens made empty, repeated or hostile; merges that are not "a b" or name unknown tokens;
  token types of another length or out of range; special ids past the vocabulary; a model or
  pre-tokenizer name the engine does not know; chat templates it cannot or must not render;
- tensor infos: dims (zero, huge, many), the GGML type (every id, known or not), the offset
  (misaligned, overlapping, past the end), names repeated or hostile; `general.alignment` changed.
"""
from __future__ import annotations

import functools
import struct

from .edits import HOSTILE_NAMES, INTERESTING, _interesting_near

MAGIC = b"GGUF"
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR = {UINT8: "B", INT8: "b", UINT16: "H", INT16: "h", UINT32: "I", INT32: "i", FLOAT32: "f", BOOL: "?",
           UINT64: "Q", INT64: "q", FLOAT64: "d"}


class Unparsable(Exception):
    pass


def parse(data: bytes):
    """(version, [(key, type, value)], [(name, dims, ggml type, offset)], data after the infos) of a valid
    GGUF; a value is a Python value, an array (element type, [values])."""
    pos = 0

    def take(fmt: str):
        nonlocal pos
        size = struct.calcsize("<" + fmt)
        if pos + size > len(data):
            raise Unparsable("past the end")
        (value,) = struct.unpack_from("<" + fmt, data, pos)
        pos += size
        return value

    def string() -> bytes:
        nonlocal pos
        length = take("Q")
        if pos + length > len(data):
            raise Unparsable("past the end")
        pos += length
        return data[pos - length:pos]

    def value(kind: int, depth: int = 0):
        if kind in _SCALAR:
            return take(_SCALAR[kind])
        if kind == STRING:
            return string()
        if kind == ARRAY and depth < 8:
            element, count = take("I"), take("Q")
            if count > len(data) - pos:
                raise Unparsable("count")
            return (element, [value(element, depth + 1) for _ in range(count)])
        raise Unparsable(f"type {kind}")

    if data[:4] != MAGIC:
        raise Unparsable("magic")
    pos = 4
    version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    if n_tensors + n_kv > len(data):
        raise Unparsable("counts")
    metadata = []
    for _ in range(n_kv):
        key = string()
        kind = take("I")
        metadata.append((key, kind, value(kind)))
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("Q") for _ in range(min(take("I"), 16))]
        infos.append((name, dims, take("I"), take("Q")))
    return version, metadata, infos, data[pos:]


def _write_value(kind: int, value) -> bytes:
    """A value as its type writes it; a value of another kind (an edit put it there) is coerced."""
    if kind in _SCALAR:
        fmt = _SCALAR[kind]
        if fmt in "fd":
            value = float(value) if isinstance(value, (int, float)) and abs(value) < 1e300 or value != value else 0.0
            return struct.pack("<" + fmt, value if fmt == "d" or abs(value) < 3e38 or value != value else float("inf"))
        if fmt == "?":
            return struct.pack("<B", int(value) % 256 if isinstance(value, int) else 1)
        bits = struct.calcsize(fmt) * 8
        value = int(value) % (1 << bits) if isinstance(value, int) else 0
        if fmt.islower() and value >= 1 << (bits - 1):
            value -= 1 << bits
        return struct.pack("<" + fmt, value)
    if kind == STRING:
        value = value if isinstance(value, bytes) else str(value).encode()
        return struct.pack("<Q", len(value)) + value
    element, items = value if isinstance(value, tuple) else (UINT8, [])
    return struct.pack("<IQ", element, len(items)) + b"".join(_write_value(element, item) for item in items)


def write(version: int, metadata, infos) -> bytes:
    """A GGUF's header: magic, counts, metadata, tensor infos (the caller pads and appends the data)."""
    out = [MAGIC, struct.pack("<IQQ", version, len(infos), len(metadata))]
    for key, kind, value in metadata:
        out.append(struct.pack("<Q", len(key)) + key + struct.pack("<I", kind) + _write_value(kind, value))
    for name, dims, ggml_type, offset in infos:
        out.append(struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims))
                   + b"".join(struct.pack("<Q", d % (1 << 64)) for d in dims) + struct.pack("<IQ", ggml_type, offset % (1 << 64)))
    return b"".join(out)


@functools.lru_cache(maxsize=64)
def _parsed(data: bytes):
    try:
        return parse(data)
    except (Unparsable, struct.error, ValueError):
        return None


# --- values ------------------------------------------------------------------------------------------

_BAD_STRINGS = (b"", b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"a" * 5000, b"\x00", b"<|im_end|>", b"\xe2\x80\xa8",
                b"{{", b"{%", b" ", b"\n")
_TEMPLATES = ("{{ x }}", "{% for message in messages %}{{ message }}{% endfor %}", "{%" * 5000, "{{" + "(" * 3000 + "}}",
              "{% raw %}", "{{ '" + "a" * 100_000 + "' }}", "{# " * 2000, "{{ messages[0]['content'] * 1000000 }}",
              "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
              "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
              "{% endif %}" * 3, "{{ '\\x00' }}", "{{ '\\N{BOM}' }}")


def _other_value(rng, kind: int, value):
    """(type, value) replacing a metadata value: another type, a boundary, something hostile."""
    choice = rng.random()
    if choice < 0.25:
        kind = rng.choice(list(_SCALAR) + [STRING, ARRAY])
        if kind == STRING:
            return STRING, rng.choice(_BAD_STRINGS)
        if kind == ARRAY:
            return ARRAY, (rng.choice((UINT32, INT32, STRING, FLOAT32, BOOL)), [])
        return kind, rng.choice(INTERESTING) if _SCALAR[kind] not in "fd" else rng.choice((0.0, -1.0, 1e38, float("nan"), float("inf")))
    if kind in _SCALAR and _SCALAR[kind] not in "fd?":
        return kind, _interesting_near(rng, int(value))
    if kind in _SCALAR:
        return kind, rng.choice((0.0, -0.0, float("nan"), float("inf"), 1e300, -1.0))
    if kind == STRING:
        return STRING, rng.choice(_BAD_STRINGS + tuple(n.encode("utf-8", "surrogatepass") for n in HOSTILE_NAMES[:8]))
    element, items = value
    choice = rng.random()
    if choice < 0.2:
        return ARRAY, (element, [])
    if choice < 0.35:
        nested = (element, items[:2])
        for _ in range(100):
            nested = (ARRAY, [nested])
        return ARRAY, nested
    if choice < 0.5:
        return ARRAY, (rng.choice(list(_SCALAR) + [STRING]), [])
    if not items:
        return ARRAY, (element, items)
    items = list(items)
    where = rng.randrange(len(items))
    if choice < 0.7:
        _, items[where] = _other_value(rng, element, items[where])
    elif choice < 0.8:
        items = items[:rng.randrange(len(items))]
    elif choice < 0.9:
        items.insert(where, items[where])               # a repeated entry
    else:
        items = items + items
    return ARRAY, (element, items)


def _tokenizer_value(rng, key: bytes, kind: int, value):
    """A tokenizer key's value changed the way a broken or hostile export would."""
    name = key.decode("utf-8", "replace")
    if name == "tokenizer.chat_template":
        return STRING, rng.choice(_TEMPLATES).encode()
    if name in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
        return STRING, rng.choice((b"llama", b"bert", b"gpt2", b"smollm", b"gpt-2", b"", b"qwen2", b"\xff", b"t5"))
    if name.endswith("_token_id"):
        return rng.choice((UINT32, INT32, UINT64, STRING)), rng.choice((0, 1, 2 ** 31, 2 ** 32 - 1, -1, 10 ** 6)) \
            if rng.random() < 0.9 else b"0"
    if kind == ARRAY and value[1]:
        element, items = value
        items = list(items)
        i = rng.randrange(len(items))
        if name == "tokenizer.ggml.merges":
            items[i] = rng.choice((b"", b"a", b"a b c", b"\xff \xfe", b"  ", b"zz yy", items[i] + b" x", b"a\x00 b"))
        elif name == "tokenizer.ggml.tokens":
            items[i] = rng.choice((b"", items[(i + 1) % len(items)], b"\xff", b"<|im_start|>", b"a" * 10000, b"\x00"))
        elif name == "tokenizer.ggml.token_type":
            items[i] = rng.choice((0, 2, 3, 4, 5, 6, 7, -1, 2 ** 31))
        elif name == "tokenizer.ggml.scores":
            items[i] = float("nan")
        return ARRAY, (element, items)
    return _other_value(rng, kind, value)


def gguf_edit(rng, data: bytes, ctx) -> bytes:
    parsed = _parsed(data)
    if parsed is None:
        from .containers import gguf_field
        return gguf_field(rng, data, ctx)
    version, metadata, infos, body = parsed
    metadata, infos = list(metadata), list(infos)
    choice = rng.random()
    tokenizer = [i for i, (key, _, _) in enumerate(metadata) if key.startswith(b"tokenizer.")]
    if tokenizer and choice < 0.5:
        i = rng.choice(tokenizer)
        key, kind, value = metadata[i]
        if rng.random() < 0.15:
            del metadata[i]
            ctx.note("gguf:drop-" + key.decode(errors="replace"))
        else:
            metadata[i] = (key, *_tokenizer_value(rng, key, kind, value))
            ctx.note("gguf:tokenizer-" + key.decode(errors="replace").rsplit(".", 1)[-1])
    elif metadata and choice < 0.72:
        i = rng.randrange(len(metadata))
        key, kind, value = metadata[i]
        what = rng.random()
        if what < 0.1:
            metadata.insert(i, metadata[i])
            ctx.note("gguf:repeated-key")
        elif what < 0.2:
            metadata.append((b"general.alignment", UINT32, rng.choice((0, 1, 3, 7, 64, 2 ** 31, 2 ** 32 - 1))))
            ctx.note("gguf:alignment")
        else:
            metadata[i] = (key, *_other_value(rng, kind, value))
            ctx.note("gguf:value")
    elif infos:
        i = rng.randrange(len(infos))
        name, dims, ggml_type, offset = infos[i]
        what = rng.random()
        if what < 0.25:
            dims = list(dims)
            if dims and rng.random() < 0.6:
                dims[rng.randrange(len(dims))] = rng.choice((0, 1, 2, 31, 32, 33, 256, 2 ** 32, 2 ** 62, 2 ** 64 - 1))
            else:
                dims = dims + [1] * rng.choice((1, 3, 8))
            ctx.note("gguf:tensor-dims")
        elif what < 0.5:
            ggml_type = rng.randrange(42)
            ctx.note("gguf:tensor-type")
        elif what < 0.75:
            offset = rng.choice((0, 1, offset + 1, offset + 32, offset - 32, len(body), len(body) + 32, 2 ** 63,
                                 infos[rng.randrange(len(infos))][3]))
            ctx.note("gguf:tensor-offset")
        else:
            name = rng.choice((infos[rng.randrange(len(infos))][0], b"", b"\xff",
                               *(n.encode("utf-8", "surrogatepass") for n in HOSTILE_NAMES[:6])))
            ctx.note("gguf:tensor-name")
        infos[i] = (name, dims, ggml_type, offset)
    return _rebuilt(data, version, metadata, infos, body, parsed)


def _rebuilt(data: bytes, version, metadata, infos, body: bytes, original) -> bytes:
    """The file written again, the tensor data moved so it stays where the (old) offsets point:
    after the header, padded to the alignment the file names (32 unless general.alignment says)."""
    old_head = len(data) - len(body)
    alignment = 32
    for key, kind, value in original[1]:
        if key == b"general.alignment" and isinstance(value, int) and 0 < value <= 1 << 16:
            alignment = value
    old_start = -(-old_head // alignment) * alignment
    tensors = data[old_start:]
    head = write(version, metadata, infos)
    start = -(-len(head) // alignment) * alignment
    return head + bytes(start - len(head)) + tensors


GGUF_EDITS = ((gguf_edit, 16),)
