"""`python -m engine inspect FILE`: the tensors and metadata of a weights file, from its header.

Reads safetensors (a file, an index .json, or a folder holding either), GGUF, PyTorch
.pth/.pt checkpoints (zip or legacy) and CTranslate2 model.bin files. The format is told by
content (magic "GGUF", a zip or pickle stream, a safetensors header length followed by "{", a
CTranslate2 version and spec name); the extension only picks
which reader explains a file that matches none. Only headers are read, never tensor data,
so a many-gigabyte file is listed at once. Long metadata (token lists, merges, chat
templates) is abbreviated so the report stays readable.
"""
from __future__ import annotations

import math
import os
import struct

import numpy as np

from ..errors import FetchError, InvalidHeader, SourceNotFound, TruncatedFile
from .ctranslate2 import looks_like_ctranslate2

LONG_STRING = 200          # strings longer than this are cut, with their length
LONG_LIST = 16             # lists longer than this become "[N items: first, ... ]"
SHOWN_ITEMS = 3            # items shown of an abbreviated list
SHOWN_ITEM_CHARS = 40      # characters shown of each string item of an abbreviated list

_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
_EXTENSIONS = {".safetensors": "safetensors", ".json": "safetensors", ".gguf": "gguf",
               ".pth": "pth", ".pt": "pth", ".bin": "pth", ".ckpt": "pth"}


# --- metadata abbreviation ----------------------------------------------------------------

def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def _item_repr(value) -> str:
    """One item of an abbreviated list, itself kept short."""
    value = abbreviate(value)
    if isinstance(value, str):
        return repr(_cut(value, SHOWN_ITEM_CHARS))
    return _cut(repr(value), SHOWN_ITEM_CHARS)


def abbreviate(value):
    """A JSON-ready copy of a metadata value: long strings cut, long lists and arrays as
    "[N items: a, b, c, ... ]", NumPy scalars as Python numbers, bytes described."""
    if isinstance(value, np.ndarray):
        if value.size > LONG_LIST:
            head = ", ".join(_item_repr(v) for v in value.reshape(-1)[:SHOWN_ITEMS].tolist())
            return f"[{value.size} items of {value.dtype}: {head}, ... ]"
        return [abbreviate(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        if len(value) > LONG_LIST:
            head = ", ".join(_item_repr(v) for v in value[:SHOWN_ITEMS])
            return f"[{len(value)} items: {head}, ... ]"
        return [abbreviate(v) for v in value]
    if isinstance(value, dict):
        return {str(k): abbreviate(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        return f"<{len(raw)} bytes, not UTF-8: {raw[:SHOWN_ITEM_CHARS]!r}>"
    if isinstance(value, str):
        return _cut(value, LONG_STRING)
    return value


# --- format detection ---------------------------------------------------------------------

def _looks_like_safetensors(head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return 2 <= length <= size - 8 and head[8:9] == b"{"


def detect_format(path: str) -> str:
    """"safetensors", "gguf", "pth" or "ctranslate2", from the file's first bytes. Raises SourceNotFound, or InvalidHeader naming the file."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        raise SourceNotFound("no such file", file=path) from None
    except (OSError, ValueError) as e:      # a directory, a NUL in the name... (as the loaders word it)
        raise FetchError(f"cannot open: {getattr(e, 'strerror', None) or e}", file=path) from None
    hint = _EXTENSIONS.get(os.path.splitext(path)[1].lower())
    if head[:4] == b"GGUF":
        return "gguf"
    if head[:4] in _ZIP_MAGICS or head[:1] == b"\x80":     # zip archive, or pickle protocol >= 2
        return "pth"
    if _looks_like_safetensors(head, size) or (hint == "safetensors" and head[:1] == b"{"):
        return "safetensors"
    if looks_like_ctranslate2(head):
        return "ctranslate2"
    if hint is not None and size > 0:
        return hint                       # the reader for that format says what is wrong
    if size == 0:
        raise TruncatedFile("empty file", file=path)
    raise InvalidHeader("not a safetensors, GGUF, PyTorch or CTranslate2 checkpoint file", file=path)


def _resolve_folder(path: str) -> str:
    """A folder: the standard names first, else its only index or its only weights file."""
    from .safetensors import INDEX_NAME, SINGLE_NAME
    names = sorted(os.listdir(path))
    for wanted in (INDEX_NAME, SINGLE_NAME):
        if wanted in names:
            return os.path.join(path, wanted)
    for suffix in (".safetensors.index.json", ".safetensors", ".gguf", ".pth", ".pt", ".bin"):
        found = [n for n in names if n.endswith(suffix)]
        if len(found) == 1:
            return os.path.join(path, found[0])
    raise SourceNotFound(f"folder holds no {INDEX_NAME}, {SINGLE_NAME} or single weights file",
                         file=path)


# --- readers: each returns (tensors, metadata, extra summary fields) ----------------------

def _tensor(name: str, type_name: str, shape, nbytes: int) -> dict:
    return {"name": name, "type": type_name, "shape": list(shape), "bytes": int(nbytes)}


def _inspect_safetensors(path: str):
    from .safetensors import ShardedSafetensors, load_safetensors
    with load_safetensors(path) as weights:
        tensors = []
        for name in weights:
            info = weights.info(name)
            tensors.append(_tensor(name, info.dtype.name, info.shape, info.nbytes))
        extra = {}
        if isinstance(weights, ShardedSafetensors):
            extra["shards"] = weights.shard_names
        return tensors, dict(weights.metadata), extra


def _inspect_gguf(path: str):
    from .gguf import load_gguf
    with load_gguf(path) as weights:
        tensors = [_tensor(name, info.ggml_type, info.shape, info.nbytes)
                   for name, info in ((n, weights.info(n)) for n in weights)]
        return tensors, dict(weights.metadata), {"version": weights.version,
                                                 "alignment": weights.alignment}


def _inspect_pth(path: str):
    from .pth import read_pth_header
    entries, layout = read_pth_header(path)
    tensors = [_tensor(name, dtype.name, shape, math.prod(shape) * dtype.itemsize) for name, dtype, shape in entries]
    return tensors, {}, {"layout": layout}


def _inspect_ctranslate2(path: str):
    from .ctranslate2 import load_ctranslate2
    with load_ctranslate2(path) as weights:     # aliases apart: their bytes are their target's
        tensors = [_tensor(name, info.dtype.name, info.shape, info.nbytes)
                   for name, info in ((n, weights.info(n)) for n in weights if n not in weights.aliases)]
        return tensors, dict(weights.metadata), {"aliases": dict(weights.aliases)}


_READERS = {"safetensors": _inspect_safetensors, "gguf": _inspect_gguf, "pth": _inspect_pth,
            "ctranslate2": _inspect_ctranslate2}


def inspect_file(path) -> dict:
    """The report: {"file", "format", "tensor_count", "total_bytes", "tensors": [{"name",
    "type", "shape", "bytes"}], "metadata"} plus, per format, GGUF "version"/"alignment",
    sharded safetensors "shards", .pth "layout", CTranslate2 "aliases" (alias -> target)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise SourceNotFound("no such file", file=path)
    target = _resolve_folder(path) if os.path.isdir(path) else path
    fmt = detect_format(target)
    tensors, metadata, extra = _READERS[fmt](target)
    return {"file": target, "format": fmt, "tensor_count": len(tensors),
            "total_bytes": sum(t["bytes"] for t in tensors), **extra,
            "tensors": tensors, "metadata": abbreviate(metadata)}


# --- text ---------------------------------------------------------------------------------

def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def summary_line(report: dict) -> str:
    count = report["tensor_count"]
    parts = [f"{count} tensor{'' if count == 1 else 's'}", f"{report['total_bytes']} bytes "
             f"({human_bytes(report['total_bytes'])})", report["format"]]
    if report["format"] == "gguf":
        parts += [f"version {report['version']}", f"alignment {report['alignment']}"]
    if "shards" in report:
        parts.append(f"{len(report['shards'])} shards")
    if "layout" in report:
        parts.append(f"{report['layout']} layout")
    if report.get("aliases"):
        parts.append(", ".join(f"{alias} = {target}" for alias, target in report["aliases"].items()))
    return ", ".join(parts)


def format_text(report: dict) -> str:
    lines = [f"{report['file']}: {report['format']}"]
    if report["metadata"]:
        lines.append("metadata:")
        width = max(len(k) for k in report["metadata"])
        for key, value in report["metadata"].items():
            # a template's newlines would break the table: those strings are shown escaped
            shown = value if isinstance(value, str) and value.isprintable() else repr(value)
            lines.append(f"  {key:<{width}}  {shown}")
    rows = [(t["name"], t["type"], "[" + ", ".join(map(str, t["shape"])) + "]", str(t["bytes"]))
            for t in report["tensors"]]
    header = ("name", "type", "shape", "bytes")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    lines.append("tensors:")
    for row in [header, *rows]:
        lines.append(f"  {row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:<{widths[2]}}  "
                     f"{row[3]:>{widths[3]}}")
    lines.append(summary_line(report))
    return "\n".join(lines)
