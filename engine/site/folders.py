"""A model folder on a static site, fetched as a pipeline needs it.

dist/models/<name>/ (buildtools/convert.py) holds the manifest, the sharded safetensors
and the processor files. `fetch_model` reads the manifest, prefetches every tensor except
the row tables (engine.site.remote: coalesced Range requests, sha256-verified, cached),
fetches the processor files (verified and cached by their sha256 too), and returns a
`Checkpoint` whose row tables (word embeddings) fetch their blocks of rows later, for the
ids a text actually uses, through the same loader.

Row tables in the manifest: the tensor's entry has
    "rows": {"block_rows": B, "sha256": [one per block of B rows, the last one shorter]}
and its bytes are the tensor's [offset, offset + nbytes) as for any tensor.

A folder whose manifest says "container": "gguf" (engine.site.manifest) serves a GGUF as is,
or split into byte parts: `fetch_gguf` reads its header in one request and its tensors as
they are wanted (`fetch_model` does the same and prefetches them all). Natively,
`open_gguf_folder` reads such a folder from disk, parts and all.

A whole built site is named by its base (`site_root`: a URL, or natively a folder), and says
which models it serves in its registry.json (`read_registry`, `served_model`), as
`engine.pipeline(task, site=...)` checks before it fetches a model folder.
"""
from __future__ import annotations

import hashlib
import os
import urllib.parse
from pathlib import Path

from .. import dtypes
from ..errors import InputError, IntegrityError, InvalidHeader, SourceNotFound, TruncatedFile
from ..rows import RowTable
from ..untrusted import load_json, shown
from .checkpoint import Checkpoint
from ..formats.gguf import GGUFFile
from .manifest import cache_key, check_manifest, gguf_parts, key_prefix
from .remote import Loader, RemoteGGUF, fetch_manifest, fetch_safetensors
from ..formats.sources import ByteSource, FileSource, is_url

MANIFEST_NAME = "manifest.json"
REGISTRY_NAME = "registry.json"
_LOADER_OPTIONS = ("coalesce_gap", "max_run_bytes", "retries", "backoff", "sleep", "concurrency")


class _Overlay:
    """The prefetched tensors, plus the row tables under their names."""

    def __init__(self, tensors, tables: dict):
        self.tensors, self.tables = tensors, tables
        self.name = getattr(tensors, "name", None)

    def __getattr__(self, name):            # metadata, info, fetch_stats, ...: the weights'
        if name in ("tensors", "tables"):
            raise AttributeError(name)
        return getattr(self.tensors, name)

    def __contains__(self, name):
        return name in self.tables or name in self.tensors

    def keys(self):
        return list(self.tensors.keys()) + list(self.tables)

    def __iter__(self):
        return iter(self.keys())

    def __getitem__(self, name):
        return self.tables[name] if name in self.tables else self.tensors[name]


def row_blocks(entry: dict, name: str, where: str) -> tuple[dtypes.DType, int, list[str]]:
    """(stored dtype, block_rows, sha256 per block) of a row table's manifest entry, checked: the
    rows are fetched and gathered by these numbers, so they must agree with its byte count."""
    rows = entry.get("rows")
    shape = entry.get("shape")
    if not (isinstance(rows, dict) and type(rows.get("block_rows")) is int and rows["block_rows"] > 0
            and isinstance(rows.get("sha256"), list) and isinstance(shape, list) and len(shape) == 2
            and all(type(n) is int and n > 0 for n in shape)):
        raise InvalidHeader('manifest row table needs "shape" (2 positive ints) and "rows": '
                            '{"block_rows", "sha256": [...]}', file=where, tensor=name)
    dtype = dtypes.BY_SAFETENSORS.get(entry.get("dtype"))
    if dtype is None:
        raise InvalidHeader(f"manifest row table has unknown dtype {shown(entry.get('dtype'))}", file=where,
                            tensor=name)
    if shape[0] * shape[1] * dtype.itemsize != entry["nbytes"]:
        raise InvalidHeader(f"manifest row table of shape {shape} {dtype.name} needs "
                            f"{shape[0] * shape[1] * dtype.itemsize} bytes, its entry says {entry['nbytes']}",
                            file=where, tensor=name)
    block_rows, shas = rows["block_rows"], rows["sha256"]
    if len(shas) != -(-shape[0] // block_rows):
        raise InvalidHeader(f"manifest row table has {len(shas)} block hashes for {shape[0]} rows in blocks "
                            f"of {block_rows}", file=where, tensor=name)
    return dtype, block_rows, shas


def _row_fetcher(loader: Loader, url: str, name: str, entry: dict, block_rows: int, shas: list[str],
                 size: int | None = None):
    """async (blocks) -> {block: bytes}: cached blocks from the cache, the others by Range
    (adjacent blocks in one request), each checked against its sha256 before it is kept."""
    row_bytes = entry["nbytes"] // entry["shape"][0]

    def span(block: int) -> tuple[int, int]:
        start = entry["offset"] + block * block_rows * row_bytes
        return start, min(start + block_rows * row_bytes, entry["offset"] + entry["nbytes"])

    def key(block: int) -> str | None:
        return cache_key(url, f"engine-rows={name}:{block}", shas[block]) if loader.cache is not None else None

    async def fetch(blocks: list[int]) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        for block in blocks:
            k = key(block)
            data = await loader.cache_call("get", k) if k else None
            if data is not None and hashlib.sha256(data).hexdigest() == shas[block]:
                loader.stats["cache_bytes"] += len(data)
                found[block] = bytes(data)
        todo = [b for b in blocks if b not in found]
        runs: list[list[int]] = []
        for block in todo:                          # adjacent blocks share a request
            if runs and block == runs[-1][-1] + 1:
                runs[-1].append(block)
            else:
                runs.append([block])

        async def fetch_run(run):
            start, end = span(run[0])[0], span(run[-1])[1]
            body, _ = await loader.request(url, start, end, size=size)
            for block in run:
                a, b = span(block)
                data = body[a - start:b - start]
                if hashlib.sha256(data).hexdigest() != shas[block]:
                    raise IntegrityError(f"downloaded rows of block {block} (bytes [{a}, {b})) are corrupt: "
                                         f"their sha256 differs from the manifest's", file=url, tensor=name)
                if key(block):
                    await loader.cache_call("put", key(block), data)
                found[block] = data
        for run in runs:
            await fetch_run(run)
        loader.stats["row_blocks"] = loader.stats.get("row_blocks", 0) + len(todo)
        return found
    return fetch


async def _prune_rows(loader: Loader, url: str, name: str, shas: list[str]) -> None:
    """Delete the cached row blocks of `name` in `url` that the current manifest would not make."""
    current = {cache_key(url, f"engine-rows={name}:{block}", sha) for block, sha in enumerate(shas)}
    prefix = f"{key_prefix(url)}engine-rows={name}:"
    for key in await loader.cache_call("keys") or []:
        if key.startswith(prefix) and key not in current:
            await loader.cache_call("delete", key)


async def fetch_file(loader: Loader, url: str, sha256: str, size: int) -> bytes:
    """A whole small file, cached by its sha256 and verified."""
    key = cache_key(url, "engine-file", sha256) if loader.cache is not None else None
    data = await loader.cache_call("get", key) if key else None
    if data is not None and hashlib.sha256(data).hexdigest() == sha256:
        loader.stats["cache_bytes"] += len(data)
        return bytes(data)
    body, _ = await loader.request(url)
    if len(body) != size or hashlib.sha256(body).hexdigest() != sha256:
        raise IntegrityError("the file differs from the manifest (size or sha256)", file=url)
    if key:
        await loader.cache_call("put", key, body)
    return body


async def fetch_gguf(folder: str, *, transport, cache=None, progress=None, names=None, manifest=None,
                     **options) -> RemoteGGUF:
    """The GGUF in site folder `folder` (a URL ending in "/"), lazily.

    One request for the manifest (unless given), one Range request for the header and metadata
    (its length and sha256 are in the manifest; from the cache when it holds them), then the
    tensors `names` (all by default; () for none) by coalesced Range requests, each checked
    against its sha256 and cached. Any other tensor is fetched the first time it is read (or
    `await weights.fetch(names)`). Returns a GGUFFile (`.metadata`, `.info(name)`, quantized
    tensors as QuantizedTensor) with `.fetch_stats`; `progress(loaded, total)` follows the
    tensor bytes of each fetch. `options`: coalesce_gap, max_run_bytes, retries, backoff,
    sleep, concurrency.
    """
    if manifest is None:
        manifest = await fetch_manifest(folder + MANIFEST_NAME, transport, **{
            k: v for k, v in options.items() if k in ("retries", "backoff", "sleep")})
    else:
        check_manifest(manifest, folder + MANIFEST_NAME)
    if manifest.get("container") != "gguf":
        raise InvalidHeader("the manifest describes no GGUF (\"container\": \"gguf\")", file=folder + MANIFEST_NAME)
    loader = Loader(transport, cache, manifest, progress, **{k: v for k, v in options.items() if k in _LOADER_OPTIONS})
    shard = await loader.open_gguf(folder)
    weights = shard.file
    if names is None or names:
        await weights.fetch(names)
    elif cache is not None and not shard.head_cached:           # the header alone: keep it too
        await loader.load([(shard, [])])
    return weights


def prefetch_bytes(manifest: dict) -> int:
    """The tensor bytes fetch_model downloads up front for a checked manifest: every tensor but
    the row tables, whose blocks come later, as the texts need them."""
    return sum(entry["nbytes"] for entry in manifest["tensors"].values() if "rows" not in entry)


async def fetch_model(folder: str, *, transport, cache=None, progress=None, manifest=None,
                      **options) -> Checkpoint:
    """The model in site folder `folder` (a URL ending in "/"): tensors prefetched, row tables
    lazy, processor files fetched. `options` go to fetch_safetensors (retries, backoff, ...).
    A GGUF folder gives its GGUF with every tensor fetched (fetch_gguf). `manifest`: its
    manifest.json already fetched (fetch_manifest), to look at it before any weight moves."""
    if manifest is None:
        manifest = await fetch_manifest(folder + MANIFEST_NAME, transport, **{
            k: v for k, v in options.items() if k in ("retries", "backoff", "sleep")})
    else:
        check_manifest(manifest, folder + MANIFEST_NAME)
    tensors = manifest["tensors"]
    row_names = [name for name, entry in tensors.items() if "rows" in entry]
    if manifest.get("container") == "gguf":
        weights = await fetch_gguf(folder, transport=transport, cache=cache, progress=progress, names=None,
                                   manifest=manifest, **options)
        location = folder + manifest["gguf"]["file"]
    else:
        location = folder + manifest["index"]
        weights = await fetch_safetensors(location, transport=transport, manifest=manifest, cache=cache,
                                          progress=progress, names=[n for n in tensors if n not in row_names],
                                          **options)
    loader = Loader(transport, cache, manifest, **{k: v for k, v in options.items()
                                                    if k in ("retries", "backoff", "sleep", "concurrency")})
    loader.stats = weights.fetch_stats                # one account of what was fetched
    tables = {}
    for name in row_names:
        entry = tensors[name]
        dtype, block_rows, shas = row_blocks(entry, name, folder + MANIFEST_NAME)
        tables[name] = RowTable(name, tuple(entry["shape"]), dtype, block_rows,
                                _row_fetcher(loader, folder + entry["file"], name, entry, block_rows, shas,
                                             manifest["files"].get(entry["file"], {}).get("size")))
        if cache is not None:                       # blocks of an older build of this table: gone
            await _prune_rows(loader, folder + entry["file"], name, shas)
    files = {}
    for name, entry in manifest.get("extra", {}).items():
        files[name] = await fetch_file(loader, folder + name, entry["sha256"], entry["size"])
    return Checkpoint(_Overlay(weights, tables), files, location=location, complete=True)


# --- a GGUF folder on disk ---------------------------------------------------------------
class PartsSource(ByteSource):
    """One file stored as consecutive parts (ByteSources): byte x is in the part whose span
    [offset, offset + size) holds it."""

    def __init__(self, parts: list[ByteSource], name: str):
        self.parts, self.name = parts, name
        self.offsets = [0]
        for part in parts:
            self.offsets.append(self.offsets[-1] + part.size())

    def size(self) -> int:
        return self.offsets[-1]

    def _read(self, offset: int, length: int):
        end, pieces = offset + length, []
        for part, start, stop in zip(self.parts, self.offsets, self.offsets[1:]):
            a, b = max(offset, start), min(end, stop)
            if a < b:
                pieces.append(part.read(a - start, b - a))
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)     # zero-copy within a part

    def close(self) -> None:
        for part in self.parts:
            part.close()


def open_gguf_folder(location) -> GGUFFile:
    """The GGUF of a built site folder (dist/models/<name>/ or its manifest.json) from disk: the
    file itself when served whole, else its parts read as one file (sizes checked against the
    manifest; the sha256s are the page's business)."""
    path = Path(location)
    manifest_path = path / MANIFEST_NAME if path.is_dir() else path
    with FileSource(manifest_path) as source:
        data = source.read(0, source.size())
    manifest = load_json(data, lambda message: InvalidHeader(message, file=str(manifest_path)), what="manifest",
                         unique_keys=True)
    check_manifest(manifest, str(manifest_path))
    if manifest.get("container") != "gguf":
        raise InvalidHeader("the manifest describes no GGUF (\"container\": \"gguf\")", file=str(manifest_path))
    folder = manifest_path.parent
    parts = []
    try:
        for filename, _, size in gguf_parts(manifest):
            parts.append(FileSource(folder / filename))
            if parts[-1].size() != size:
                raise TruncatedFile(f"{parts[-1].size()} bytes, the manifest says {size}", file=parts[-1].name)
        source = parts[0] if len(parts) == 1 else PartsSource(parts, os.fspath(folder / manifest["gguf"]["file"]))
        return GGUFFile(source)
    except BaseException:
        for part in parts:
            part.close()
        raise


# --- a built site: its base and its registry ---------------------------------------------
def site_root(site, page_url: str | None = None) -> str:
    """`site=` as a base: an http(s) URL ending in "/"; in the browser (`page_url`, the page's or
    the worker's own address) a relative URL is resolved against it; natively a built site's
    folder (dist/, or what `python build.py --out FOLDER` wrote)."""
    if isinstance(site, os.PathLike):
        site = os.fspath(site)
    if not isinstance(site, str) or not site:
        raise InputError(f"site must be the base URL of a built site (or natively its folder), got {site!r}")
    if page_url is not None and not is_url(site):
        site = urllib.parse.urljoin(page_url, site)
    if is_url(site):
        return site if site.endswith("/") else site + "/"
    if page_url is not None or not Path(site).is_dir():
        raise InputError(f"site {site!r} is neither an http(s) URL nor a folder" if page_url is None else
                         f"site {site!r} is not an http(s) URL: in the browser a site is a URL")
    return os.fspath(Path(site))


async def read_registry(root: str, transport=None) -> list[dict]:
    """The models the built site at `root` (site_root) serves: its registry.json, each entry
    with at least "name" and "tasks" (engine.registry.describe wrote it)."""
    where = root + REGISTRY_NAME if is_url(root) else os.path.join(root, REGISTRY_NAME)
    try:
        if is_url(root):
            body, _ = await Loader(transport).request(where)
        else:
            with FileSource(where) as source:
                body = bytes(source.read(0, source.size()))
    except SourceNotFound:
        raise SourceNotFound(f"no built site at {root}: it has no {REGISTRY_NAME}", file=where) from None
    doc = load_json(body, lambda message: InvalidHeader(message, file=where), what=f"the site's {REGISTRY_NAME}")
    if not (isinstance(doc, list) and all(isinstance(m, dict) and isinstance(m.get("name"), str)
                                          and isinstance(m.get("tasks"), list) for m in doc)):
        raise InvalidHeader(f"the site's {REGISTRY_NAME} is not a list of models, each with \"name\" and "
                            f"\"tasks\"", file=where)
    return doc


def served_model(models: list[dict], root: str, task: str, model: str | None, known) -> str:
    """The name of the model that serves `task` from the site at `root` (its registry.json's
    `models`): `model` when the site serves it, else the site's first model for the task that
    this engine has code for (`known` names).
    """
    listing = "; ".join(f"{m['name']} ({', '.join(map(str, m['tasks']))})" for m in models) or "nothing"
    if model is not None:
        if not any(m["name"] == model for m in models):
            raise InputError(f"the site {root} does not serve the model {model!r}; it serves: {listing}")
        return model
    serving = [m["name"] for m in models if task in m["tasks"]]
    usable = [name for name in serving if name in known]
    if not usable:
        what = f"only with models this engine has no code for ({', '.join(serving)})" if serving else \
            "with no model"
        raise InputError(f"the site {root} serves the task {task!r} {what}; it serves: {listing}")
    return usable[0]
