"""Mutations of valid files: generic byte edits and edits that know the format.

Every mutation is a function `(rng, data, context) -> bytes` (rng a `random.Random`), named so a
finding can say what made its input. Generic edits (bit flips, inserted, deleted, duplicated or
truncated bytes, boundary integers at any offset, splices with another seed) find what a reader
assumes about bytes; the format-aware ones reach past the first checks a random edit trips on:

- JSON (safetensors headers, shard indexes, manifests, tokenizer.json): a node of the parsed document
  replaced by a wrong type, a boundary or enormous number, a hostile path name ("..", NUL, absolute,
  very long, a directory), deep nesting, duplicate keys, thousands of copies of an entry;
- safetensors: the JSON header edited and the length field rewritten to match (or not);
- GGUF: any integer field of the header (counts, lengths, types, dims, offsets), found by walking it;
- zip (.pth): method, flags, sizes, CRC, name lengths and offsets of the local and central records;
  the archive rebuilt with deflate/bzip2/lzma, a corrupt deflate stream, an entry that inflates to a
  gigabyte, or its pickle mutated;
- pickle (.pth): memo indices, integers (as small or as enormous as a pickle can write), strings
  and globals of the opcodes;
- PNG: IHDR fields, chunk lengths and order, PLTE/tRNS sizes, the inflated scanlines (filter bytes),
  zlib bombs that declare millions of pixels in a few kB; CRCs fixed so the decoder reads on;
- .npy: the header's descr/shape/fortran_order, text that breaks Python's tokenizer, the header
  length field, the version;
- tokenizer.json: nested Sequences, Split regexes (malformed and backtracking ones), ids and lengths.
"""
from __future__ import annotations

import bz2
import functools
import io
import json
import lzma
import math
import pickle
import pickletools
import struct
import zipfile
import zlib
from dataclasses import dataclass, field

# boundary values for integer fields of every width; `_fit` wraps them to the field's width
INTERESTING = (0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 63, 64, 65, 127, 128, 255, 256, 1023, 1024, 4095, 4096,
               0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xEFFFFFFF, 0xFFFFFFFF, 1 << 32,
               (1 << 53) + 1, 1 << 62, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, -1, -2, -(1 << 31), -(1 << 63))

# what a string field may be replaced by: names that climb out of a folder, hold NUL, are absolute,
# too long, name a directory (every case folder holds "dir.safetensors/" and "sub/"), or odd text
HOSTILE_NAMES = ("..", "../outside.safetensors", "../../outside.safetensors", "/etc/hostname", "/",
                 ".", "", "dir.safetensors", "sub", "sub/", "sub/../../outside.safetensors", "./x", "a//b",
                 "\x00", "model\x00.safetensors", "a" * 300, "b" * 5000, "C:\\x", "..\\outside.safetensors",
                 "%2e%2e/outside.safetensors", "\ud800", "\u2028", "é" * 20, "\x7f\x01", "con", "-")
WRONG_TYPES = (None, True, False, 0, -1, 1.5, "", "x", [], {}, [0], {"type": "x"}, [[]], "0")
# JSON number texts: too big for 64 bits, past the int-to-str limit, not JSON at all
NUMBER_TEXTS = ("1" + "0" * 30, "1" + "0" * 400, "9" * 3000, "1" + "0" * 5000, "1e400", "-1e400", "NaN",
                "Infinity", "-Infinity", "-0", "0.5", "1e-400", "18446744073709551616", "-9223372036854775809")

# Split patterns: malformed for the translator or for `re`, or backtracking on "aaaa...!"
REGEXES = ("(a+)+b", "(a|aa)+b", "(\\s*)*x", "(x+x+)+y", "((a*)*)*z", "(a|a)*c", "(\\p{L}|a)*!x",
           "(", ")", "[", "\\", "\\p{", "\\p{Foo}", "\\x{110000}", "\\u12", "[z-a]", "(?=", "*", "a**",
           "(?<=a+)b", "(?<n>a)\\k<n>", "(?P<n>a)(?P=n)", "a{1000000}", "a{4294967295}", "(" * 300 + ")" * 300,
           "(" * 3000 + ")" * 3000, "[^]", "\\d+", "$", "(?i:\\p{L}+)", "\\p{N}{1,3}", "|", "()*", "(?:)+")


@dataclass
class Raw:
    """JSON text written as is (numbers beyond Python's JSON, unbalanced nesting...)."""
    text: str


@dataclass
class Pairs:
    """A JSON object written from (key, value) pairs: keys may repeat."""
    items: list = field(default_factory=list)


class _Close(str):
    """The bracket that closes a container, on to_json's stack."""


def to_json(value) -> str:
    """JSON text of a document that may hold Raw and Pairs nodes (and lone surrogates)."""
    parts: list[str] = []
    stack = [value]
    while stack:                      # iterative: mutated documents may nest deeply
        node = stack.pop()
        if isinstance(node, (Raw, _Close)):
            parts.append(node.text if isinstance(node, Raw) else str(node))
        elif isinstance(node, (dict, Pairs)):
            items = list(node.items() if isinstance(node, dict) else node.items)
            parts.append("{")
            stack.append(_Close("}"))
            for i, (key, item) in reversed(list(enumerate(items))):
                stack.append(item)
                stack.append(Raw(("," if i else "") + json.dumps(str(key)) + ":"))
        elif isinstance(node, list):
            parts.append("[")
            stack.append(_Close("]"))
            for i, item in reversed(list(enumerate(node))):
                stack.append(item)
                if i:
                    stack.append(Raw(","))
        else:
            parts.append(json.dumps(node))
    return "".join(parts)


def _fit(value: int, size: int) -> int:
    return value % (1 << (8 * size))


def _write_int(data: bytearray, offset: int, size: int, value: int, order: str = "<") -> None:
    fmt = {1: "B", 2: "H", 4: "I", 8: "Q"}[size]
    struct.pack_into(order + fmt, data, offset, _fit(value, size))


def _interesting_near(rng, value: int) -> int:
    choice = rng.random()
    if choice < 0.6:
        return rng.choice(INTERESTING)
    if choice < 0.8:
        return value + rng.choice((-1, 1, -8, 8, 32))
    return value * rng.choice((2, 16, 1 << 20)) or 1 << rng.randrange(64)


# --- generic byte edits -----------------------------------------------------------------------------

def flip_bits(rng, data: bytes, ctx) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def set_bytes(rng, data: bytes, ctx) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if out:
            out[rng.randrange(len(out))] = rng.choice((0, 0xFF, 0x7F, 0x80, 0x20, rng.randrange(256)))
    return bytes(out)


def int_field(rng, data: bytes, ctx, *, within: int | None = None) -> bytes:
    """A boundary integer written over 1, 2, 4 or 8 bytes at any offset, either byte order."""
    size = rng.choice((1, 2, 4, 4, 8, 8))
    span = len(data) if within is None else min(len(data), within)
    if span < size:
        return data
    out = bytearray(data)
    _write_int(out, rng.randrange(span - size + 1), size, rng.choice(INTERESTING), rng.choice("<<>"))
    return bytes(out)


def header_int(rng, data: bytes, ctx) -> bytes:
    """int_field within the first 64 bytes, where image and archive headers keep their sizes."""
    return int_field(rng, data, ctx, within=64)


def insert_bytes(rng, data: bytes, ctx) -> bytes:
    at = rng.randrange(len(data) + 1)
    if rng.random() < 0.5 and data:
        a = rng.randrange(len(data))
        piece = data[a:a + rng.randint(1, 64)]
    else:
        piece = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    return data[:at] + piece + data[at:]


def delete_bytes(rng, data: bytes, ctx) -> bytes:
    if not data:
        return data
    a = rng.randrange(len(data))
    return data[:a] + data[a + rng.randint(1, max(1, len(data) // 4)):]


def duplicate_bytes(rng, data: bytes, ctx) -> bytes:
    if not data:
        return data
    a = rng.randrange(len(data))
    piece = data[a:a + rng.randint(1, 256)]
    at = rng.randrange(len(data) + 1)
    return data[:at] + piece * rng.choice((1, 2, 16, 1000)) + data[at:]


def truncate(rng, data: bytes, ctx) -> bytes:
    return data[:rng.randrange(len(data) + 1)]


def extend(rng, data: bytes, ctx) -> bytes:
    tail = rng.choice((b"\0", b"\xff", b" ", bytes([rng.randrange(256)])))
    return data + tail * rng.choice((1, 7, 100, 4096))


def splice(rng, data: bytes, ctx) -> bytes:
    """The head of this file and the tail of another of the same kind."""
    other = ctx.other(rng)
    if not other or not data:
        return data
    return data[:rng.randrange(len(data))] + other[rng.randrange(len(other)):]


def zero_range(rng, data: bytes, ctx) -> bytes:
    if not data:
        return data
    a = rng.randrange(len(data))
    n = rng.randint(1, 64)
    return data[:a] + bytes(len(data[a:a + n])) + data[a + n:]


GENERIC = ((flip_bits, 3), (set_bytes, 3), (int_field, 3), (insert_bytes, 2), (delete_bytes, 2),
           (duplicate_bytes, 1), (truncate, 2), (extend, 1), (splice, 1), (zero_range, 1), (header_int, 2))


# --- JSON ---------------------------------------------------------------------------------------------

def _nodes(doc, limit: int = 5000) -> list[tuple[object, object]]:
    """(container, key) of every node below the root (breadth-first, at most `limit`)."""
    out, queue = [], [doc]
    while queue and len(out) < limit:
        node = queue.pop(0)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            out.append((node, key))
            if isinstance(child, (dict, list)):
                queue.append(child)
    return out


def _strings(doc, nodes) -> list[str]:
    found = [c[k] for c, k in nodes if isinstance(c[k], str)] + [k for c, k in nodes if isinstance(k, str)]
    return found or ["x"]


def _json_node_edit(rng, doc, nodes, strings):
    """Replace one node: the new document (Raw/Pairs allowed) and the edit's name."""
    container, key = rng.choice(nodes)
    value = container[key]
    kind = rng.random()
    if kind < 0.15:
        container[key] = rng.choice(WRONG_TYPES)
        return "wrong-type"
    if isinstance(value, bool) or kind < 0.2:
        container[key] = rng.choice((True, False, None, 0, 1))
        return "flag"
    if isinstance(value, int) or (isinstance(value, float) and kind < 0.5):
        if rng.random() < 0.3:
            container[key] = Raw(rng.choice(NUMBER_TEXTS))
        else:
            container[key] = _interesting_near(rng, value if isinstance(value, int) else int(value) if math.isfinite(value) else 0)
        return "number"
    if isinstance(value, str):
        if rng.random() < 0.6:
            container[key] = rng.choice(HOSTILE_NAMES)
        else:
            container[key] = rng.choice(strings)            # a name of something else in the file
        return "string"
    if isinstance(value, list):
        choice = rng.random()
        if choice < 0.3 and value:
            item = value[rng.randrange(len(value))]
            count = rng.choice((2, 10, 65, 1000, 100_000)) if rng.random() < 0.1 else rng.choice((2, 10, 65))
            container[key] = value + [item] * count
            return "grow-list"
        if choice < 0.5:
            container[key] = [rng.choice((0, 1, 1 << 40, (1 << 64) - 1, -1)) for _ in range(rng.choice((0, 3, 65, 100)))]
            return "shape-like"
        if choice < 0.7:
            container[key] = value[:rng.randrange(len(value) + 1)]
            return "shrink-list"
        return _nest(rng, container, key)
    if isinstance(value, dict):
        items = list(value.items())
        choice = rng.random()
        if choice < 0.25 and items:
            k, v = rng.choice(items)
            container[key] = Pairs(items + [(k, rng.choice((v, 0, "x", None)))])
            return "duplicate-key"
        if choice < 0.4 and items:
            k, v = rng.choice(items)
            count = rng.choice((1000, 100_000)) if rng.random() < 0.15 else rng.choice((3, 50))
            # many copies under new names, then one name again: a quadratic duplicate check shows
            container[key] = Pairs(items + [(f"{k}.{i}", v) for i in range(count)] + [(k, v)])
            return "many-entries"
        if choice < 0.55 and items:
            k = rng.choice(items)[0]
            container[key] = {kk: vv for kk, vv in items if kk != k}
            return "remove-key"
        if choice < 0.65:
            container[key] = dict(items + [(rng.choice(strings + ["__fuzz__"]), rng.choice(WRONG_TYPES))])
            return "add-key"
        if choice < 0.75 and items:
            k, v = rng.choice(items)
            container[key] = {(rng.choice(HOSTILE_NAMES) if kk == k else kk): vv for kk, vv in items}
            return "rename-key"
        return _nest(rng, container, key)
    container[key] = rng.choice(WRONG_TYPES)
    return "wrong-type"


def _nest(rng, container, key) -> str:
    depth = rng.choice((100, 2000, 100_000))
    if rng.random() < 0.5:
        container[key] = Raw("[" * depth + "]" * depth)
    else:
        container[key] = Raw('{"a":' * depth + "0" + "}" * depth)
    return f"nest-{depth}"


def json_edit(rng, data: bytes, ctx) -> bytes:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return flip_bits(rng, data, ctx)
    if not isinstance(doc, (dict, list)):
        return to_json(rng.choice(WRONG_TYPES)).encode()
    nodes = _nodes(doc)
    if not nodes or rng.random() < 0.03:
        return to_json(Raw(rng.choice(("[" * 100_000, '{"a":' * 50_000, "[]", "null", "1" + "0" * 5000)))).encode()
    strings = _strings(doc, nodes)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        ctx.note("json:" + _json_node_edit(rng, doc, nodes, strings))
    return to_json(doc).encode("utf-8", "surrogatepass")


def json_text_edit(rng, data: bytes, ctx) -> bytes:
    """Edits of the text itself: a duplicated key, a truncated document, a stray byte order mark."""
    text = data
    choice = rng.random()
    if choice < 0.4 and b'"' in text:
        at = text.find(b'":', rng.randrange(len(text)))
        start = text.rfind(b'"', 0, max(at, 0))
        if at > 0 and start >= 0:
            key = text[start:at + 2]
            brace = text.find(b"{")
            return text[:brace + 1] + key + b"1," + text[brace + 1:]
    if choice < 0.6:
        return b"\xef\xbb\xbf" + text
    if choice < 0.8:
        return text.replace(b"}", b"", 1)
    return text.replace(b'"', b"'", 1)


JSON = ((json_edit, 12), (json_text_edit, 2))


# --- tokenizer.json ----------------------------------------------------------------------------------

_SEQUENCE_KEYS = {"normalizer": "normalizers", "pre_tokenizer": "pretokenizers", "decoder": "decoders"}


def tokenizer_edit(rng, data: bytes, ctx) -> bytes:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return json_edit(rng, data, ctx)
    if not isinstance(doc, dict):
        return json_edit(rng, data, ctx)
    choice = rng.random()
    model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    if choice < 0.2:
        section = rng.choice(list(_SEQUENCE_KEYS))
        node = doc.get(section) or {"type": "Lowercase" if section == "normalizer" else "ByteLevel"}
        depth = rng.choice((2, 40, 300, 3000))
        for _ in range(depth):
            node = {"type": "Sequence", _SEQUENCE_KEYS[section]: [node]}
        doc[section] = node
        ctx.note(f"tokenizer:nest-{section}-{depth}")
    elif choice < 0.4:
        doc["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": rng.choice(REGEXES)},
                                "behavior": rng.choice(("Isolated", "Removed", "MergedWithNext", "Contiguous")),
                                "invert": rng.random() < 0.3}
        ctx.note("tokenizer:regex")
    elif choice < 0.6:
        value = rng.choice((0, -1, 1, 1 << 31, 1 << 32, 1 << 40, 1 << 63, (1 << 64) - 1, 10 ** 9))
        place = rng.choice(("padding-fixed", "pad_to_multiple_of", "pad_id", "max_length", "stride",
                            "type_id", "special-id", "vocab-id", "added-id", "max_input_chars_per_word"))
        if place == "padding-fixed":
            doc["padding"] = {"strategy": {"Fixed": value}, "direction": "Right", "pad_to_multiple_of": None,
                              "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}
        elif place in ("pad_to_multiple_of", "pad_id"):
            doc["padding"] = dict(doc.get("padding") or {"strategy": "BatchLongest"}, **{place: value})
        elif place in ("max_length", "stride"):
            doc["truncation"] = dict(doc.get("truncation") or {"max_length": 8}, **{place: value})
        elif place == "vocab-id" and isinstance(model.get("vocab"), dict) and model["vocab"]:
            model["vocab"][rng.choice(list(model["vocab"]))] = value
        elif place == "added-id" and doc.get("added_tokens"):
            rng.choice(doc["added_tokens"])["id"] = value
        elif place == "max_input_chars_per_word":
            model[place] = value
        else:
            doc["post_processor"] = {"type": "TemplateProcessing",
                                     "single": [{"SpecialToken": {"id": "[X]", "type_id": value}},
                                                {"Sequence": {"id": "A", "type_id": value}}],
                                     "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                                     "special_tokens": {"[X]": {"id": "[X]", "ids": [value], "tokens": ["[X]"]}}}
        ctx.note(f"tokenizer:{place}={value}")
    elif choice < 0.8:
        content = rng.choice(("", "\x00", "a" * 5000, "(*)", "[MASK]", " ", "##", "\ud800", "héllo"))
        count = rng.choice((1, 1, 1000))
        doc.setdefault("added_tokens", [])
        if isinstance(doc["added_tokens"], list):
            doc["added_tokens"] += [{"id": 5000 + i, "content": content + (str(i) if i else ""), "special": rng.random() < 0.5,
                                     "single_word": rng.random() < 0.3, "lstrip": rng.random() < 0.3,
                                     "rstrip": rng.random() < 0.3, "normalized": rng.random() < 0.5}
                                    for i in range(count)]
        ctx.note(f"tokenizer:added-{count}")
    else:
        merges = model.get("merges")
        if isinstance(merges, list) and merges:
            merge = rng.choice(merges)
            model["merges"] = merges + [rng.choice((merge, "a", "x y", ["x", "y"], ["a", "b", "c"], "", " "))] * rng.choice((1, 5000))
            ctx.note("tokenizer:merges")
        elif isinstance(model.get("vocab"), dict):
            model["vocab"][rng.choice(HOSTILE_NAMES)] = len(model["vocab"])
            ctx.note("tokenizer:vocab-name")
    return to_json(doc).encode("utf-8", "surrogatepass")


TOKENIZER = ((tokenizer_edit, 10),) + JSON


# --- safetensors ----------------------------------------------------------------------------------------

def safetensors_header(rng, data: bytes, ctx) -> bytes:
    """The JSON header edited; the length field rewritten to match (mostly)."""
    if len(data) < 8:
        return data
    (length,) = struct.unpack_from("<Q", data)
    if length > len(data) - 8:
        return int_field(rng, data, ctx, within=8)
    header = json_edit(rng, data[8:8 + length], ctx)
    if rng.random() < 0.2:
        header += b" " * rng.randrange(8)
    new_length = len(header) if rng.random() < 0.85 else _interesting_near(rng, len(header))
    return struct.pack("<Q", _fit(new_length, 8)) + header + data[8 + length:]


def safetensors_length(rng, data: bytes, ctx) -> bytes:
    return int_field(rng, data, ctx, within=8) if rng.random() < 0.3 else \
        struct.pack("<Q", _fit(rng.choice(INTERESTING), 8)) + data[8:]


SAFETENSORS = ((safetensors_header, 12), (safetensors_length, 2))


# --- GGUF ------------------------------------------------------------------------------------------------

_GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_fields(data: bytes) -> list[tuple[int, int, str]]:
    """(offset, size, role) of every integer field of a valid GGUF header."""
    fields, pos = [], 4

    def take(size: int, role: str) -> int:
        nonlocal pos
        value = int.from_bytes(data[pos:pos + size], "little")
        fields.append((pos, size, role))
        pos += size
        return value

    def string(role: str) -> None:
        nonlocal pos
        pos += take(8, role)
        if pos > len(data):
            raise ValueError("past the end")

    def value(vtype: int, depth: int = 0) -> None:
        nonlocal pos
        if vtype in _GGUF_SCALAR:
            pos += _GGUF_SCALAR[vtype]
        elif vtype == 8:
            string("string-length")
        elif vtype == 9 and depth < 4:
            element, count = take(4, "array-type"), take(8, "array-length")
            if element in _GGUF_SCALAR:
                pos += count * _GGUF_SCALAR[element]
            elif count > len(data) - pos:         # (each element takes 8 bytes at least)
                raise ValueError("past the end")
            else:
                for _ in range(count):
                    value(element, depth + 1)
        else:
            raise ValueError(vtype)
        if pos > len(data):
            raise ValueError("past the end")

    take(4, "version")
    n_tensors, n_kv = take(8, "tensor-count"), take(8, "kv-count")
    if n_tensors + n_kv > len(data):
        raise ValueError("more entries than bytes")
    for _ in range(n_kv):
        string("key-length")
        value(take(4, "value-type"))
    for _ in range(n_tensors):
        string("name-length")
        dims = take(4, "n-dims")
        if dims > 8:
            raise ValueError("too many dims")
        for _ in range(dims):
            take(8, "dim")
        take(4, "ggml-type")
        take(8, "offset")
    if pos > len(data):
        raise ValueError("past the end")
    return fields


@functools.lru_cache(maxsize=64)
def _cached_gguf_fields(data: bytes):
    try:
        return gguf_fields(data)
    except (ValueError, IndexError, RecursionError):
        return None


def gguf_field(rng, data: bytes, ctx) -> bytes:
    fields = _cached_gguf_fields(data)
    if not fields:
        return int_field(rng, data, ctx)
    offset, size, role = rng.choice(fields)
    current = int.from_bytes(data[offset:offset + size], "little")
    out = bytearray(data)
    _write_int(out, offset, size, _interesting_near(rng, current))
    ctx.note(f"gguf:{role}")
    return bytes(out)


def gguf_type(rng, data: bytes, ctx) -> bytes:
    """A tensor's GGML type or a value type set to another known (or unknown) id."""
    fields = [f for f in (_cached_gguf_fields(data) or []) if f[2] in ("ggml-type", "value-type", "array-type")]
    if not fields:
        return gguf_field(rng, data, ctx)
    offset, size, role = rng.choice(fields)
    out = bytearray(data)
    _write_int(out, offset, size, rng.randrange(42) if role == "ggml-type" else rng.randrange(14))
    ctx.note(f"gguf:{role}-id")
    return bytes(out)


GGUF = ((gguf_field, 10), (gguf_type, 4))


# --- zip (.pth) ----------------------------------------------------------------------------------------

def _zip_records(data: bytes) -> list[tuple[str, int]]:
    """("local" | "central" | "eocd" | "eocd64", offset) of each record, found by signature."""
    out = []
    for kind, signature in (("local", b"PK\x03\x04"), ("central", b"PK\x01\x02"), ("eocd", b"PK\x05\x06"),
                            ("eocd64", b"PK\x06\x06")):
        at = data.find(signature)
        while at >= 0:
            out.append((kind, at))
            at = data.find(signature, at + 4)
    return out


# field -> (offset in a local record, offset in a central record, size)
_ZIP_FIELDS = {"flags": (6, 8, 2), "method": (8, 10, 2), "crc": (14, 16, 4), "compressed-size": (18, 20, 4),
               "size": (22, 24, 4), "name-length": (26, 28, 2), "extra-length": (28, 30, 2),
               "header-offset": (None, 42, 4)}
_METHODS = (0, 1, 6, 8, 9, 12, 14, 18, 19, 93, 95, 96, 97, 98, 99, 0xFFFF)
_FLAGS = (0x1, 0x8, 0x40, 0x800, 0x2000, 0xFFFF, 0x1 | 0x40)


def zip_field(rng, data: bytes, ctx) -> bytes:
    records = _zip_records(data)
    if not records:
        return int_field(rng, data, ctx)
    kind, at = rng.choice(records)
    out = bytearray(data)
    if kind in ("eocd", "eocd64"):
        offsets = (8, 10, 12, 16, 20) if kind == "eocd" else (24, 32, 40, 48)
        offset = rng.choice(offsets)
        size = 2 if kind == "eocd" and offset < 12 else 4 if kind == "eocd" else 8
        if at + offset + size <= len(out):
            _write_int(out, at + offset, size, _interesting_near(rng, 0))
        ctx.note(f"zip:{kind}")
        return bytes(out)
    name, (local, central, size) = rng.choice(list(_ZIP_FIELDS.items()))
    offset = local if kind == "local" else central
    if offset is None or at + offset + size > len(out):
        return bytes(out)
    value = rng.choice(_METHODS) if name == "method" else rng.choice(_FLAGS) if name == "flags" else \
        _interesting_near(rng, int.from_bytes(out[at + offset:at + offset + size], "little"))
    _write_int(out, at + offset, size, value)
    if name in ("method", "flags") and rng.random() < 0.7:      # both records agree: past zipfile's check
        twin = ("central" if kind == "local" else "local")
        twins = [a for k, a in records if k == twin]
        index = [a for k, a in records if k == kind].index(at)
        other = local if twin == "local" else central
        if index < len(twins) and twins[index] + other + size <= len(out):
            _write_int(out, twins[index] + other, size, value)
    ctx.note(f"zip:{kind}-{name}")
    return bytes(out)


@functools.lru_cache(maxsize=1)
def _deflated_block() -> tuple[bytes, bytes]:
    """16 MiB of zeros deflated, ending on a full flush (so copies of it chain), and a final block."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = squeeze.compress(bytes(1 << 24)) + squeeze.flush(zlib.Z_FULL_FLUSH)
    return block, squeeze.flush()


def deflated_zeros(size: int) -> bytes:
    """A raw deflate stream of about `size` zero bytes (1 kB per MiB): an entry that claims little
    and inflates to a lot. After a full flush the compressor starts afresh, so the same 16 MiB
    block can be repeated instead of compressing gigabytes."""
    block, final = _deflated_block()
    return block * max(1, size >> 24) + final


def zip_entries(data: bytes):
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return [(info, archive.read(info)) for info in archive.infolist()]
    except Exception:            # a mutated archive: this mutation needs a readable one
        return None


def _zip_write(entries, methods: dict) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for info, body in entries:
            fresh = zipfile.ZipInfo(info.filename, date_time=(2020, 1, 1, 0, 0, 0))
            fresh.compress_type = methods.get(info.filename, zipfile.ZIP_STORED)
            archive.writestr(fresh, body)
    return buffer.getvalue()


def zip_rebuild(rng, data: bytes, ctx) -> bytes:
    """The archive written again: entries compressed, one corrupted, one a bomb, or its pickle mutated."""
    entries = zip_entries(data)
    if not entries:
        return zip_field(rng, data, ctx)
    names = [info.filename for info, _ in entries]
    choice = rng.random()
    if choice < 0.35:
        method = rng.choice((zipfile.ZIP_DEFLATED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA))
        chosen = names if rng.random() < 0.5 else [rng.choice(names)]
        out = _zip_write(entries, {n: method for n in chosen})
        ctx.note(f"zip:compress-{method}")
        if rng.random() < 0.5:                     # and break the compressed bytes
            return _corrupt_entry(rng, out, rng.choice(chosen), ctx)
        return out
    if choice < 0.5:
        target = rng.choice([n for n in names if "/data/" in n] or names)
        size = rng.choice((1 << 26, 1 << 30, 3 << 30))
        bomb = zip_with_raw_entry(entries, target, deflated_zeros(size), size)
        ctx.note(f"zip:bomb-{size >> 20}MB")
        return bomb
    target = rng.choice([n for n in names if n.endswith("data.pkl")] * 3 + names)
    body = dict((info.filename, b) for info, b in entries)[target]
    mutated = mutate_bytes(rng, body, ctx, PICKLE + GENERIC if target.endswith(".pkl") else GENERIC)
    ctx.note(f"zip:entry-{target.rsplit('/', 1)[-1]}")
    return _zip_write([(info, mutated if info.filename == target else b) for info, b in entries], {})


def _corrupt_entry(rng, data: bytes, name: str, ctx) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(name)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    if info.compress_size == 0:
        return data
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        out[start + rng.randrange(info.compress_size)] ^= 1 << rng.randrange(8)
    ctx.note("zip:corrupt-stream")
    return bytes(out)


def zip_with_raw_entry(entries, target: str, stream: bytes, size: int) -> bytes:
    """The archive with `target` replaced by an already deflated `stream` of `size` bytes."""
    out = io.BytesIO()
    central = []
    for info, body in entries:
        name = info.filename.encode()
        if info.filename == target:           # its CRC is not checked before the end: never reached
            method, payload, crc, length = 8, stream, 0, max(1, size >> 24) << 24
        else:
            method, payload, crc, length = 0, body, zlib.crc32(body), len(body)
        offset = out.tell()
        big = length >= 0xFFFFFFFF
        extra = struct.pack("<HHQQ", 1, 16, length, len(payload)) if big else b""
        sizes = (0xFFFFFFFF, 0xFFFFFFFF) if big else (len(payload), length)
        out.write(struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 45, 0, method, 0, 0x21, crc, *sizes,
                              len(name), len(extra)) + name + extra + payload)
        central.append(struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 45, 45, 0, method, 0, 0x21, crc, *sizes,
                                   len(name), len(extra), 0, 0, 0, 0, offset) + name + extra)
    start = out.tell()
    directory = b"".join(central)
    out.write(directory)
    out.write(struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(central), len(central), len(directory), start, 0))
    return out.getvalue()


ZIP = ((zip_field, 8), (zip_rebuild, 8))


# --- pickle (.pth) ---------------------------------------------------------------------------------------

def _pickle_ops(data: bytes) -> list[tuple[object, object, int, int]]:
    """(opcode, argument, start, end) of each opcode of each pickle at the start of `data` (legacy
    checkpoints hold several in a row)."""
    out, stream = [], io.BytesIO(data)
    try:
        while stream.tell() < len(data):
            start = stream.tell()
            ops = list(pickletools.genops(stream))
            if not ops:
                break
            for (op, arg, pos), following in zip(ops, [p for _, _, p in ops[1:]] + [stream.tell()]):
                out.append((op, arg, pos, following))
            if ops[-1][0].name != "STOP" or stream.tell() == start:
                break
    except Exception:            # the raw storages after the pickles, or mutated bytes
        pass
    return out


def _pickle_int(value: int) -> bytes:
    return pickle.dumps(value, protocol=2)[2:-1]


def pickle_edit(rng, data: bytes, ctx) -> bytes:
    ops = _pickle_ops(data)
    if not ops:
        return int_field(rng, data, ctx)
    choice = rng.random()
    memo = [o for o in ops if o[0].name in ("BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET")]
    ints = [o for o in ops if o[0].name in ("BININT", "BININT1", "BININT2", "LONG1")]
    texts = [o for o in ops if o[0].name in ("BINUNICODE", "SHORT_BINUNICODE", "GLOBAL", "SHORT_BINSTRING")]
    if choice < 0.3 and memo:
        op, arg, start, end = rng.choice(memo)
        index = rng.choice((0x7FFFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 20, arg + 1, 255))
        code = b"r" if op.name.endswith("PUT") else b"j"
        ctx.note(f"pickle:memo-{op.name}")
        return data[:start] + code + struct.pack("<I", index) + data[end:]
    if choice < 0.75 and ints:
        op, arg, start, end = rng.choice(ints)
        value = rng.choice((-1, 0, 1, 1 << 31, 1 << 63, 1 << 64, 10 ** 30, 1 << 4000, 10 ** 5000, -(1 << 63),
                            (1 << 62) + 1, 64 * (arg or 1)))
        ctx.note("pickle:int")
        return data[:start] + _pickle_int(value) + data[end:]
    if texts:
        op, arg, start, end = rng.choice(texts)
        if op.name == "GLOBAL":
            replacement = rng.choice(("torch\nQInt8Storage", "os\nsystem", "builtins\neval", "torch._utils\n_rebuild_tensor_v3",
                                      "collections\nOrderedDict", "torch\nFloatStorage", "torch._utils\n_rebuild_parameter",
                                      "torch\nBoolStorage", "torch._utils\n_rebuild_tensor"))
            ctx.note("pickle:global")
            return data[:start] + b"c" + replacement.encode() + b"\n" + data[end:]
        text = rng.choice(HOSTILE_NAMES[:12] + ("cpu", "cuda:0", "0", "1", "storage", "little", "big"))
        raw = text.encode("utf-8", "surrogatepass")
        ctx.note("pickle:string")
        return data[:start] + b"X" + struct.pack("<I", len(raw)) + raw + data[end:]
    return int_field(rng, data, ctx)


PICKLE = ((pickle_edit, 10),)


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


# --- driving ----------------------------------------------------------------------------------------------

def mutate_bytes(rng, data: bytes, ctx, operators) -> bytes:
    """One operator chosen by weight from `operators`, applied to `data`."""
    total = sum(weight for _, weight in operators)
    pick = rng.random() * total
    for operator, weight in operators:
        pick -= weight
        if pick <= 0:
            break
    before = len(ctx.ops)
    out = operator(rng, data, ctx)
    if len(ctx.ops) == before:
        ctx.note(operator.__name__)
    return out


def operators_for(name: str, data: bytes) -> tuple:
    """The operators that suit a file, judged by its name and first bytes; generic ones always."""
    if name.endswith("tokenizer.json") or (name.endswith(".json") and b'"model"' in data[:200_000]
                                           and b'"vocab"' in data):
        return TOKENIZER + GENERIC
    if name.endswith(".json"):
        return JSON + JSON + GENERIC
    if name.endswith(".safetensors"):
        return SAFETENSORS + GENERIC
    if data.startswith(b"GGUF"):
        return GGUF + GENERIC
    if data.startswith(b"PK"):
        return ZIP + GENERIC
    if data.startswith(b"\x80"):
        return PICKLE + GENERIC
    if data.startswith(PNG_SIGNATURE):
        return PNG + GENERIC
    if data.startswith(b"\x93NUMPY"):
        return NPY + GENERIC
    if data.startswith(b"\xff\xd8"):
        return IMAGE + GENERIC
    return GENERIC
