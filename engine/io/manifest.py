"""The weights manifest a site publishes beside its shards, and the cache keys it yields.

Format 1 (written by buildtools/convert.py):
    {"format": 1, "model", "index", "total_bytes",
     "files":   {shard: {"size", "sha256"}},
     "tensors": {name: {"file", "dtype", "shape", "offset" (absolute in the shard),
                        "nbytes", "sha256"}},
     "metadata": {...}}

Cache keys (engine.io.remote): `{shard_url}?engine-range={a}-{b}&sha256={h}` holds
bytes [a, b) of a shard, h being the sha256 of the concatenated sha256s of the tensors
that tile [a, b), so changed weights get new keys; `{shard_url}?engine-head&sha256=
{file sha256}` holds the shard's header. A key is stale once the current manifest
would not give it; "&" replaces "?" when the shard URL has a query already.
"""
from __future__ import annotations

import hashlib
import re

from ..errors import IntegrityError, InvalidHeader
from .safetensors import SafetensorsFile, TensorInfo

MANIFEST_FORMAT = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _is_count(value) -> bool:
    return type(value) is int and value >= 0


def _is_sha256(value) -> bool:
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


def check_manifest(doc, where: str) -> None:
    """Raise InvalidHeader naming `where` unless `doc` is a well-formed manifest."""
    def bad(message, tensor=None):
        raise InvalidHeader(f"manifest {message}", file=where, tensor=tensor)
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        bad(f'must be a JSON object with "format": {MANIFEST_FORMAT}')
    tensors, files = doc.get("tensors"), doc.get("files", {})
    if not isinstance(tensors, dict) or not isinstance(files, dict):
        bad('"tensors" and "files" must be objects')
    for name, entry in tensors.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("file"), str)
                and _is_count(entry.get("offset")) and _is_count(entry.get("nbytes"))
                and _is_sha256(entry.get("sha256"))):
            bad("entry needs file, offset, nbytes and a lower-case hex sha256", name)
    for filename, entry in files.items():
        if not (isinstance(entry, dict) and _is_count(entry.get("size"))
                and _is_sha256(entry.get("sha256"))):
            bad(f"entry for file {filename!r} needs size and a lower-case hex sha256")


def check_header(file: SafetensorsFile, filename: str, manifest: dict) -> None:
    """The shard's header must say what the manifest says, tensor by tensor."""
    tensors = manifest["tensors"]
    for name in file:
        info, entry = file.info(name), tensors.get(name)
        if entry is None or entry["file"] != filename:
            raise IntegrityError(f"the header has this tensor but the manifest does not list "
                                 f"it in {filename!r}", file=file.name, tensor=name)
        if (entry["offset"], entry["nbytes"]) != (info.offset, info.nbytes):
            raise IntegrityError(
                f"the manifest puts it at bytes [{entry['offset']}, "
                f"{entry['offset'] + entry['nbytes']}), the header at [{info.offset}, "
                f"{info.offset + info.nbytes})", file=file.name, tensor=name)
        dtype, shape = entry.get("dtype", info.dtype.safetensors), entry.get("shape", info.shape)
        if dtype not in (info.dtype.safetensors, info.dtype.name) or tuple(shape) != info.shape:
            raise IntegrityError(f"the manifest says {dtype} {list(shape)}, the header "
                                 f"{info.dtype.safetensors} {list(info.shape)}",
                                 file=file.name, tensor=name)
    for name, entry in tensors.items():
        if entry["file"] == filename and name not in file:
            raise IntegrityError(f"the manifest lists this tensor in {filename!r}, whose "
                                 f"header lacks it", file=file.name, tensor=name)


def _key_prefix(url: str) -> str:
    return url + ("&" if "?" in url else "?")


def cache_key(url: str, what: str, sha256: str) -> str:
    return f"{_key_prefix(url)}{what}&sha256={sha256}"


def tiling(infos: list[TensorInfo], start: int, end: int) -> list[TensorInfo]:
    """The tensors whose bytes make up [start, end) (empty ones have none)."""
    return [i for i in infos if start <= i.offset and i.offset + i.nbytes <= end and i.nbytes]


def run_digest(manifest: dict, members: list[TensorInfo]) -> str:
    shas = "".join(manifest["tensors"][m.name]["sha256"] for m in members)
    return hashlib.sha256(shas.encode("ascii")).hexdigest()


def is_stale(key: str, url: str, filename: str, infos: list[TensorInfo],
             manifest: dict) -> bool:
    """Whether `key` is an entry of shard `url` that the current manifest would not make.

    `infos`: every tensor of the shard's current header, sorted by offset.
    """
    prefix = _key_prefix(url)
    if not key.startswith(prefix + "engine-"):
        return False                                # not this shard's
    params = dict(part.partition("=")[::2] for part in key[len(prefix):].split("&"))
    if "engine-head" in params:
        entry = manifest.get("files", {}).get(filename)
        return entry is None or params.get("sha256") != entry["sha256"]
    try:
        start, end = map(int, params.get("engine-range", "").split("-"))
    except ValueError:
        return True
    members = tiling(infos, start, end)             # the bytes [start, end) hold now
    return not (members and members[0].offset == start
                and max(m.offset + m.nbytes for m in members) == end
                and params.get("sha256") == run_digest(manifest, members))
