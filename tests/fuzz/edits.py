"""Mutations of valid files, the shared part: boundary values, generic byte edits, JSON and tokenizer.json
edits, and applying one operator (mutate_bytes). Format-aware edits of binary containers:
containers.py (safetensors, GGUF, zip, pickle) and images.py (PNG, .npy, JPEG); mutate.py picks.
"""
from __future__ import annotations

import json
import math
import struct
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



# --- applying one ---------------------------------------------------------------------------------------

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
