"""Guards for reading untrusted bytes, written once for every reader.

The page loads files from any static host and the CLI reads whatever it is handed, so each reader
(safetensors, GGUF, .pth, PNG/.npy, tokenizer.json, manifests) must turn any input into a result or
one of the engine's errors naming the file and the field, and never into another exception, a hang,
an allocation sized by a number the file claims but cannot back, or a read outside its file. The
checks that recur across those formats live here. Each takes `fail`: a callable that makes the
reader's own error from a message (InvalidHeader naming the file and tensor, TokenizerError naming
the field, ...), so the helper says what is wrong and the reader says where.

tests/fuzz/ (and scripts/fuzz.py for long runs) throws mutated files at every reader to keep it so.
"""
from __future__ import annotations

import itertools
import json
import math
from typing import Callable

MAX_JSON_BYTES = 100_000_000   # safetensors' own header limit; indexes, manifests, tokenizer.json are far smaller
# Real files nest 3 (safetensors) to about 8 (tokenizer.json) levels. Readers walk some documents
# recursively (a Sequence of Sequences of normalizers), and Python's json module itself recurses:
# past ~1000 levels it raises RecursionError, and on Pyodide's smaller stack it may crash first.
MAX_JSON_DEPTH = 64
MAX_DIMS = 64                  # NumPy's limit on dimensions (NPY_MAXDIMS)
INT64_MAX = (1 << 63) - 1      # the largest size or offset a NumPy array (or any of these formats) can hold
UINT64_MAX = (1 << 64) - 1

Fail = Callable[[str], BaseException]


def shown(value, limit: int = 80) -> str:
    """repr(value) cut to `limit` characters, for a message about an untrusted value. It never raises
    (an int of more than 4300 digits has no str in Python >= 3.11; containers nested past the
    recursion limit have no repr) and its work stays within `limit`: lists, tuples, dicts, sets and
    their subclasses are written here, item by item, until the text is long enough, so a container
    that shares its items through a pickle's memo (2**40 items unfolded) is never walked whole."""
    parts: list[str] = []
    size = 0
    stack = [value]
    try:
        while stack and size <= limit:
            node = stack.pop()
            if type(node) is _Text:
                text = node
            elif isinstance(node, (list, tuple, dict, set, frozenset)):
                text = _opening(node, stack, limit)
            else:
                text = _scalar(node, limit - size + 1)
            parts.append(text)
            size += len(text)
    except (ValueError, RecursionError):     # the int-to-str limit, a repr that recurses
        return f"<{type(value).__name__} too large to show>"
    text = "".join(parts)
    return text if len(text) <= limit and not stack else text[:limit] + "..."


class _Text(str):
    """Literal text on shown()'s stack (brackets, separators)."""


def _scalar(value, limit: int) -> str:
    if type(value) in (str, bytes, bytearray) and len(value) > limit:
        return repr(value[:limit])
    return repr(value)


def _opening(node, stack: list, limit: int) -> str:
    """The text that opens `node`, with its first `limit` items (each shows as a character at least)
    and the closing text pushed, last first."""
    kind = type(node)
    fields = getattr(kind, "_fields", None) if isinstance(node, tuple) else None
    if fields is not None and len(fields) == len(node):          # a NamedTuple: Name(a=1, b=2)
        opening, closing = f"{kind.__name__}(", ")"
        items = [[_Text(f"{field}="), item] for field, item in zip(fields, node)]
    elif isinstance(node, dict):
        opening, closing = "{", "}"
        if kind is not dict:
            opening, closing = f"{kind.__name__}({{", "})"
        items = [[key, _Text(": "), item] for key, item in itertools.islice(dict.items(node), limit)]
    elif isinstance(node, (set, frozenset)):
        if not node:
            return f"{kind.__name__}()"
        opening, closing = ("{", "}") if kind is set else (f"{kind.__name__}({{", "})")
        items = [[item] for item in node]
    else:
        opening, closing = ("[", "]") if isinstance(node, list) else ("(", ",)" if len(node) == 1 else ")")
        if kind not in (list, tuple):
            opening, closing = f"{kind.__name__}({opening}", f"{closing})"
        items = [[item] for item in itertools.islice(node, limit)]
    pieces = [_Text(closing)]
    for i in range(len(items) - 1, -1, -1):        # pushed last first; the stack stays as long as the items
        pieces.extend(reversed(items[i]))
        if i:
            pieces.append(_Text(", "))
    stack.extend(pieces)
    return opening


# --- JSON -------------------------------------------------------------------------------------------

class _Refused(Exception):
    """Raised inside the JSON parser's hooks; load_json turns it into the reader's error."""


def _integer(text: str) -> int:
    # the formats read here store 64-bit integers at most; bigger ones are refused before Python
    # builds them (and later quotes them in messages or multiplies them into shapes)
    value = int(text) if len(text) <= 20 else None
    if value is None or not -(1 << 63) <= value <= UINT64_MAX:
        raise _Refused(f"integer {text[:24]}{'...' if len(text) > 24 else ''} does not fit in 64 bits")
    return value


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"number {text[:24]} is out of range")
    return value


def _constant(name: str):
    raise _Refused(f"{name} is not JSON")


def _unique_keys(pairs: list) -> dict:
    found = dict(pairs)
    if len(found) != len(pairs):             # rare: only then look for the repeated key (linear)
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"duplicate key {shown(key)}")
            seen.add(key)
    return found


def _depth(document, limit: int) -> int:
    """How deeply containers nest (1 for a flat object), counted up to `limit` + 1 at most.

    Walked a level at a time without recursion: a header of 100,000 small entries has about 300,000
    nodes, and a list per level keeps the per-node Python work to one type test."""
    depth, level = 0, [document]
    while level and depth <= limit:
        depth += 1
        children = []
        for node in level:
            children.extend(node.values() if type(node) is dict else node)
        level = [child for child in children if type(child) is dict or type(child) is list]
    return depth


def load_json(data, fail: Fail, *, what: str = "the file", unique_keys: bool = False,
              max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH):
    """Parse untrusted JSON (bytes or str): what every JSON reader of the engine uses.

    Refused through `fail`: more than `max_bytes`, text that is not UTF-8 or not JSON, NaN and
    Infinity (not JSON, though Python's parser takes them), integers beyond 64 bits and numbers
    beyond a float's range, containers nested deeper than `max_depth`, and with `unique_keys` a key
    repeated in one object (which other readers of the same file might resolve differently)."""
    if len(data) > max_bytes:
        raise fail(f"{what} is {len(data)} bytes, over the limit of {max_bytes}")
    if not isinstance(data, str):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise fail(f"{what} is not UTF-8 text (byte {e.start})") from None
    try:
        document = json.loads(data, parse_int=_integer, parse_float=_number, parse_constant=_constant,
                              object_pairs_hook=_unique_keys if unique_keys else None)
    except json.JSONDecodeError as e:
        raise fail(f"{what} is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    except _Refused as e:
        raise fail(f"{what} is not valid JSON: {e}") from None
    except RecursionError:
        raise fail(f"{what} nests JSON containers deeper than {max_depth} levels") from None
    if isinstance(document, (dict, list)) and _depth(document, max_depth) > max_depth:
        raise fail(f"{what} nests JSON containers deeper than {max_depth} levels")
    return document


# --- names of other files ----------------------------------------------------------------------------

def checked_name(name, fail: Fail, what: str = "file name") -> str:
    """A file named inside a file (a shard in an index, a part or processor file in a manifest),
    opened beside it on disk or fetched beside it over HTTP.

    It must be a relative path of plain components: nothing that climbs out of the folder (".."),
    starts at a root ("/", a drive, a backslash), names the folder itself ("", ".", "a//b", "a/"),
    holds characters a file system or URL treats specially (NUL and other control or unprintable
    characters, lone surrogates, "%" "?" "#" which a URL would decode or cut at, ":"), or is longer
    than file systems allow (255 bytes a component, 1024 in all)."""
    if not isinstance(name, str):
        raise fail(f"{what} must be a string, got {shown(name)}")
    parts = name.split("/")
    if (not name.isprintable() or any(c in name for c in "\\:%?#")
            or any(part in ("", ".", "..") for part in parts)
            or len(name.encode("utf-8", "surrogatepass")) > 1024
            or any(len(part.encode("utf-8", "surrogatepass")) > 255 for part in parts)):
        raise fail(f"{what} {shown(name)} is not a plain relative path inside the folder")
    return name


# --- shapes and sizes --------------------------------------------------------------------------------

def checked_shape(shape, fail: Fail, what: str = "shape", *, max_dims: int = MAX_DIMS) -> tuple[int, ...]:
    """A shape (or strides) read from a file: at most `max_dims` ints (not bools), each in
    [0, 2**63), and together at most 2**63 - 1 elements, so NumPy can hold it and arithmetic on it
    stays small. The reader still checks the bytes against the file."""
    if not isinstance(shape, (list, tuple)):
        raise fail(f"{what} must be a list of non-negative integers, got {shown(shape)}")
    if len(shape) > max_dims:
        raise fail(f"{what} has {len(shape)} dimensions, more than {max_dims}")
    if not all(type(n) is int and 0 <= n <= INT64_MAX for n in shape):
        raise fail(f"{what} must hold integers in [0, 2**63), got {shown(shape)}")
    if 0 not in shape and math.prod(shape) > INT64_MAX:
        raise fail(f"{what} {shown(list(shape))} has more than 2**63 elements")
    return tuple(shape)
