"""The weights manifest a site publishes beside its shards, and the cache keys it yields.

Format 1 (written by buildtools/convert.py):
    {"format": 1, "model", "index", "total_bytes",
     "files":   {shard: {"size", "sha256"}},
     "tensors": {name: {"file", "dtype", "shape", "offset" (absolute in the shard),
                        "nbytes", "sha256"}},
     "metadata": {...}}

A GGUF served as is, or split into byte parts for hosts with a file-size limit, has
"container": "gguf" (absent means "safetensors") and
    {"format": 1, "container": "gguf", "model", "total_bytes",
     "gguf":    {"file" (its name), "size", "sha256" (of the whole file), "version",
                 "alignment", "header_bytes", "header_sha256",
                 "parts": [{"file", "offset"}, ...]},
     "files":   {part: {"size", "sha256"}},
     "tensors": {name: {"ggml_type", "shape" (torch order), "offset" (absolute in the
                        GGUF), "nbytes", "sha256"}},
     "metadata": {the header's scalar metadata (no arrays)}}
`header_bytes` is where the data section starts: bytes [0, header_bytes) hold the magic,
the metadata (the tokenizer's arrays: several MB, with no length prefix for the whole
block) and the tensor infos, so a client fetches them with one Range request. Part i holds
the GGUF's bytes [offset_i, offset_i + its size): byte x of the GGUF is byte x - offset_i
of the part with offset_i <= x < offset_i + size. Served as is, the one part is the GGUF.

Cache keys (engine.site.remote): `{shard_url}?engine-range={a}-{b}&sha256={h}` holds
bytes [a, b) of a shard, h being the sha256 of the concatenated sha256s of the tensors
that tile [a, b), so changed weights get new keys; `{shard_url}?engine-head&sha256=
{file sha256}` holds the shard's header. A key is stale once the current manifest
would not give it; "&" replaces "?" when the shard URL has a query already.
"""
from __future__ import annotations

import hashlib
import math
import re

from ..errors import IntegrityError, InvalidHeader
from ..untrusted import INT64_MAX, checked_name, checked_shape, shown
from ..formats.safetensors import SafetensorsFile, TensorInfo

MANIFEST_FORMAT = 1
CONTAINERS = ("safetensors", "gguf")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _is_count(value) -> bool:
    return type(value) is int and 0 <= value <= INT64_MAX


def _is_sha256(value) -> bool:
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


def check_manifest(doc, where: str) -> None:
    """Raise InvalidHeader naming `where` unless `doc` is a well-formed manifest.

    Every file it names (index, shards, GGUF parts, processor files) must be a plain relative name
    (engine.untrusted.checked_name: the page fetches it beside the manifest, the CLI opens it there)
    listed under "files" or "extra", and every tensor's bytes must lie inside the file it names."""
    def bad(message, tensor=None):
        raise InvalidHeader(f"manifest {message}", file=where, tensor=tensor)

    def name(value, what, tensor=None):
        return checked_name(value, lambda message: InvalidHeader(f"manifest {message}", file=where, tensor=tensor),
                            what)
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        bad(f'must be a JSON object with "format": {MANIFEST_FORMAT}')
    if doc.get("container", "safetensors") not in CONTAINERS:
        bad(f'"container" must be one of {", ".join(CONTAINERS)}, got {shown(doc["container"])}')
    tensors, files = doc.get("tensors"), doc.get("files", {})
    if not isinstance(tensors, dict) or not isinstance(files, dict):
        bad('"tensors" and "files" must be objects')
    for filename, entry in files.items():
        name(filename, "file name")
        if not (isinstance(entry, dict) and _is_count(entry.get("size")) and _is_sha256(entry.get("sha256"))):
            bad(f"entry for file {shown(filename)} needs size and a lower-case hex sha256")
    extra = doc.get("extra", {})
    if not isinstance(extra, dict) or not isinstance(doc.get("metadata", {}), dict):
        bad('"extra" and "metadata" must be objects')
    for filename, entry in extra.items():
        name(filename, "processor file name")
        if not (isinstance(entry, dict) and _is_count(entry.get("size")) and _is_sha256(entry.get("sha256"))):
            bad(f"entry for processor file {shown(filename)} needs size and a lower-case hex sha256")
    if doc.get("container") == "gguf":
        return _check_gguf(doc, bad, name)
    name(doc.get("index"), '"index"')
    for tensor, entry in tensors.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("file"), str)
                and _is_count(entry.get("offset")) and _is_count(entry.get("nbytes"))
                and _is_sha256(entry.get("sha256"))):
            bad("entry needs file, offset, nbytes and a lower-case hex sha256", tensor)
        if entry["file"] not in files:
            bad(f"entry names file {shown(entry['file'])}, which \"files\" does not list", tensor)
        if entry["offset"] + entry["nbytes"] > files[entry["file"]]["size"]:
            bad(f"bytes [{entry['offset']}, {entry['offset'] + entry['nbytes']}) lie past the end of "
                f"{entry['file']} ({files[entry['file']]['size']} bytes)", tensor)
        if not isinstance(entry.get("dtype", ""), str):
            bad(f"dtype must be a string, got {shown(entry['dtype'])}", tensor)
        if "shape" in entry:
            checked_shape(entry["shape"], lambda message: InvalidHeader(f"manifest {message}", file=where,
                                                                        tensor=tensor))


def _check_gguf(doc: dict, bad, name) -> None:
    gguf, files = doc.get("gguf"), doc["files"]
    if not (isinstance(gguf, dict) and isinstance(gguf.get("file"), str) and _is_count(gguf.get("size"))
            and _is_sha256(gguf.get("sha256")) and _is_count(gguf.get("header_bytes"))
            and 0 < gguf["header_bytes"] <= gguf["size"] and _is_sha256(gguf.get("header_sha256"))
            and isinstance(gguf.get("parts"), list) and gguf["parts"]):
        bad('"gguf" needs file, size, sha256, header_bytes (at most size), header_sha256 and parts')
    name(gguf["file"], "GGUF file name")
    covered = 0
    for part in gguf["parts"]:           # contiguous, in order, each listed under "files"
        if not (isinstance(part, dict) and isinstance(part.get("file"), str) and part["file"] in files
                and part.get("offset") == covered):
            bad(f"GGUF part {shown(part)} must name a file of \"files\" and start at byte {covered}")
        covered += files[part["file"]]["size"]
    if covered != gguf["size"] or len(files) != len(gguf["parts"]):
        bad(f"GGUF parts hold {covered} bytes in {len(gguf['parts'])} files; the GGUF has {gguf['size']} "
            f"and \"files\" lists {len(files)}")
    for tensor, entry in doc["tensors"].items():
        if not (isinstance(entry, dict) and isinstance(entry.get("ggml_type"), str)
                and isinstance(entry.get("shape"), list) and all(_is_count(n) for n in entry["shape"])
                and _is_count(entry.get("offset")) and _is_count(entry.get("nbytes"))
                and _is_sha256(entry.get("sha256"))):
            bad("entry needs ggml_type, shape, offset, nbytes and a lower-case hex sha256", tensor)
        if not gguf["header_bytes"] <= entry["offset"] <= entry["offset"] + entry["nbytes"] <= gguf["size"]:
            bad(f"bytes [{entry['offset']}, {entry['offset'] + entry['nbytes']}) lie outside the data "
                f"section [{gguf['header_bytes']}, {gguf['size']})", tensor)


def gguf_parts(manifest: dict) -> list[tuple[str, int, int]]:
    """(part file, offset in the GGUF, size) of a checked GGUF manifest, in order."""
    return [(p["file"], p["offset"], manifest["files"][p["file"]]["size"]) for p in manifest["gguf"]["parts"]]


def gguf_metadata(metadata: dict) -> dict:
    """The metadata a GGUF manifest carries: scalars (no arrays, no non-UTF-8 strings, no NaN)."""
    return {key: value for key, value in metadata.items()
            if isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value))}


def check_gguf_header(file, manifest: dict) -> None:
    """A GGUF's parsed header (engine.formats.gguf.GGUFFile) must say what its manifest says."""
    gguf, tensors = manifest["gguf"], manifest["tensors"]

    def fail(message, tensor=None):
        raise IntegrityError(f"the manifest disagrees with the GGUF header: {message}", file=file.name,
                             tensor=tensor)
    if file.data_offset != gguf["header_bytes"]:
        fail(f"the data section starts at byte {file.data_offset}, the manifest says {gguf['header_bytes']}")
    for key in ("version", "alignment"):
        if key in gguf and gguf[key] != getattr(file, key):
            fail(f"{key} {getattr(file, key)}, the manifest says {gguf[key]}")
    for name in file:
        info, entry = file.info(name), tensors.get(name)
        if entry is None:
            fail("the header has this tensor but the manifest does not list it", name)
        if (entry["offset"], entry["nbytes"]) != (info.offset, info.nbytes):
            fail(f"the manifest puts it at bytes [{entry['offset']}, {entry['offset'] + entry['nbytes']}), "
                 f"the header at [{info.offset}, {info.offset + info.nbytes})", name)
        if (entry["ggml_type"], tuple(entry["shape"])) != (info.ggml_type, info.shape):
            fail(f"the manifest says {entry['ggml_type']} {entry['shape']}, the header "
                 f"{info.ggml_type} {list(info.shape)}", name)
    for name in tensors:
        if name not in file:
            fail("the manifest lists this tensor, the header lacks it", name)
    listed = manifest.get("metadata", {})
    for key, value in listed.items():
        if file.metadata.get(key) != value:
            fail(f"metadata key {key!r} is {file.metadata.get(key)!r}, the manifest says {value!r}")
    for key, value in gguf_metadata(file.metadata).items():
        if key not in listed:
            fail(f"metadata key {key!r} is in the header, not in the manifest")


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


def key_prefix(url: str) -> str:
    return url + ("&" if "?" in url else "?")


def cache_key(url: str, what: str, sha256: str) -> str:
    return f"{key_prefix(url)}{what}&sha256={sha256}"


def tiling(infos: list[TensorInfo], start: int, end: int) -> list[TensorInfo]:
    """The tensors whose bytes make up [start, end) (empty ones have none)."""
    return [i for i in infos if start <= i.offset and i.offset + i.nbytes <= end and i.nbytes]


def run_digest(manifest: dict, members: list[TensorInfo]) -> str:
    shas = "".join(manifest["tensors"][m.name]["sha256"] for m in members)
    return hashlib.sha256(shas.encode("ascii")).hexdigest()


def is_stale(key: str, url: str, head_sha256: str | None, infos: list,
             manifest: dict) -> bool:
    """Whether `key` is an entry of shard `url` that the current manifest would not make.

    `head_sha256`: the hash its header entry is keyed by now (the shard's, or a GGUF
    header's; None: none is current). `infos`: every tensor of the shard's current
    header, sorted by offset.
    """
    prefix = key_prefix(url)
    if not key.startswith(prefix + "engine-"):
        return False                                # not this shard's
    params = dict(part.partition("=")[::2] for part in key[len(prefix):].split("&"))
    if "engine-head" in params:
        return head_sha256 is None or params.get("sha256") != head_sha256
    try:
        start, end = map(int, params.get("engine-range", "").split("-"))
    except ValueError:
        return True
    members = tiling(infos, start, end)             # the bytes [start, end) hold now
    return not (members and members[0].offset == start
                and max(m.offset + m.nbytes for m in members) == end
                and params.get("sha256") == run_digest(manifest, members))
