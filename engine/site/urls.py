"""Weights at a URL, in every Python: `load_safetensors`, `load_gguf` and `load_pth` of an http(s)
URL natively and in Pyodide, and their awaitable forms.

Natively the blocking forms read a URL by Range with urllib as the parser asks for bytes
(engine.formats.sources.HttpSource). In Pyodide urllib has no network to reach: the browser fetches
(engine.runtime.transport()) through a `UrlLoader`, the engine.site.remote.Loader that loads a
site's models, which retries and checks every reply, and the blocking forms wait for it through
JavaScript Promise Integration (`engine.runtime.wait`), reading by Range as natively
(`LoaderSource`). Where the runtime cannot block (no JSPI, or Python was not entered
asynchronously) they raise NeedsAwait, naming the awaitable form.

The awaitable forms (`await load_safetensors_async(url)`, ...) work in both, with or without
JSPI: the header first, then every tensor's bytes in coalesced Range requests (a .pth, a zip
whose tensors are all read anyway, whole), through the same loader (urllib in a thread
natively); the file they return reads from memory.

A site's model folder (a URL ending in "/", or its manifest.json) is read as the page reads it
(engine.site.folders): every tensor checked against the manifest's sha256 and cached by it. A bare
URL comes with no sha256s, so what identifies its bytes is the host's strong ETag and its size.
With a cache (the browser's Cache API in Pyodide, none natively) a range read is kept under
the URL, the range and those two; the first request of a load (the header) always goes to the
host, so a file changed there gets new keys, and the old ones are deleted. A file whose ETag
changes during a load is an error, not a mix of two versions. No ETag (or a weak one, or one
another origin's page may not read: Access-Control-Expose-Headers): nothing is cached.

What goes wrong is one error naming the URL: SourceNotFound for a 404; a FetchError for a host
that ignores Range, for an HTML page served instead of the file, and, in the browser, for a
request the browser refuses without a reason (likely CORS: engine.runtime.JsFetchTransport).
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import urllib.parse

from .. import runtime
from ..errors import FetchError, InvalidHeader, MissingShard, SourceNotFound
from ..formats.gguf import GGUFFile, load_gguf
from ..formats.gguf_split import first_split, open_splits, split_count
from .manifest import cache_key, key_prefix
from ..formats.pth import load_pth
from .remote import HEAD_BYTES, Loader, PrefetchedSource, fetch_manifest, fetch_safetensors
from ..formats.safetensors import load_safetensors
from .folders import MANIFEST_NAME, fetch_gguf, open_gguf_folder
from ..formats.sources import CONTENT_RANGE, ByteSource, is_url

WINDOW = 1 << 20        # a small read past what is here fetches this much (a GGUF header is read piece by piece)
COALESCE_GAP = 64 * 1024
MAX_RUN_BYTES = 8 << 20


def default_cache(cache=True):
    """`cache` as a store: True is the browser's Cache API in Pyodide and none natively; False none."""
    if cache is True:
        if not runtime.in_browser():
            return None
        from .browser import CacheApiStore
        return CacheApiStore()
    return cache or None


def awaitable_form(url: str) -> str:
    """What to await instead of a blocking load of `url`, named after its file type."""
    path = urllib.parse.urlsplit(url).path.lower()
    for suffixes, function in (((".safetensors", ".json"), "load_safetensors_async"), ((".gguf",), "load_gguf_async"),
                               ((".pth", ".pt", ".bin", ".ckpt"), "load_pth_async")):
        if path.endswith(suffixes):
            return f"await engine.{function}(url)"
    return "await engine.load_safetensors_async(url) (or load_gguf_async, load_pth_async)"


class _Validated:
    """A transport that notes each file's strong ETag and size from its replies, and refuses a reply
    whose ETag differs from the one noted (the file changed on the host during the load)."""

    def __init__(self, transport):
        self.transport = transport
        self.versions: dict[str, str] = {}       # url -> sha256 of its ETag and size

    async def get(self, url, start=None, end=None):
        status, headers, body = await self.transport.get(url, start, end)
        lower = {k.lower(): v for k, v in (headers or {}).items()}
        etag = lower.get("etag", "").strip()
        if status in (200, 206) and etag and not etag.startswith("W/"):
            match = CONTENT_RANGE.fullmatch(lower.get("content-range", "").strip())
            size = match[3] if match else lower.get("content-length", "") if status == 200 else ""
            version = hashlib.sha256(f"{etag}\n{size}".encode()).hexdigest()
            if self.versions.setdefault(url, version) != version:
                raise FetchError(f"the file changed on the server while it was read (ETag now {etag})", file=url)
        return status, headers, body

    def __getattr__(self, name):                  # head, ...: the transport's own
        return getattr(self.transport, name)


class UrlLoader(Loader):
    """The Loader for a bare URL: no manifest, a host without byte ranges is an error, and range
    reads are cached under the file's version (its ETag and size) where the host gives one."""

    def __init__(self, transport=None, cache=None, **options):
        super().__init__(_Validated(transport or runtime.transport()), cache, None, whole_files=False, **options)

    def range_key(self, url: str, start: int, end: int) -> str | None:
        version = self.transport.versions.get(url)
        if self.cache is None or version is None:
            return None
        return cache_key(url, f"engine-range={start}-{end}", version)

    def plan(self, shard, names):
        runs = super().plan(shard, names)
        for run in runs:                          # fetch_run reads and fills the cache under run.key
            run.key = run.key or self.range_key(shard.url, run.start, run.end)
        return runs

    async def fetch_range(self, url: str, start: int, end: int, size: int) -> bytes:
        """Bytes [start, end) of `url`: from the cache when it holds them for the current version."""
        key = self.range_key(url, start, end)
        if key:
            data = await self.cache_call("get", key)
            if data is not None and len(data) == end - start:
                self.stats["cache_bytes"] += len(data)
                return bytes(data)
            if data is not None:
                await self.cache_call("delete", key)
        body, _ = await self.request(url, start, end, size=size)
        if key:
            await self.cache_call("put", key, body)
        return body

    async def forget_old(self, url: str) -> None:
        """Delete the cached ranges of `url` that belong to another version of it."""
        version = self.transport.versions.get(url)
        if self.cache is None or version is None:
            return
        prefix = key_prefix(url) + "engine-range="
        for key in await self.cache_call("keys") or []:
            if key.startswith(prefix) and not key.endswith(f"&sha256={version}"):
                await self.cache_call("delete", key)

    async def load(self, plan) -> None:
        await super().load(plan)
        for shard, _ in plan:
            await self.forget_old(shard.url)

    async def open(self, url: str) -> tuple[bytes, int]:
        """The first HEAD_BYTES of `url` (always from the host: they tell its version) and its size."""
        head, size = await self.request(url, 0, HEAD_BYTES, probe=True)
        await self.forget_old(url)
        return head, size


class LoaderSource(ByteSource):
    """A URL read by Range through a UrlLoader, each request awaited with engine.rows.wait (JSPI in
    the browser): the first request learns the size and keeps the first HEAD_BYTES; a small read
    past what is here fetches a WINDOW (kept, the last few), a large one exactly its bytes."""

    coalesce_gap = 256 * 1024
    keep_windows = 4

    def __init__(self, url: str, loader: UrlLoader | None = None):
        self.name = url
        self._loader = loader or UrlLoader(cache=default_cache())
        self._size: int | None = None
        self._head = b""
        self._windows: list[tuple[int, bytes]] = []

    def _wait(self, awaitable):
        return runtime.wait(awaitable, awaitable_form(self.name))

    def size(self) -> int:
        if self._size is None:
            self._head, self._size = self._wait(self._loader.open(self.name))
        return self._size

    def _get(self, start: int, end: int) -> bytes:
        return self._wait(self._loader.fetch_range(self.name, start, end, self.size()))

    def _read(self, offset: int, length: int):
        end = offset + length
        if end <= len(self._head):
            return memoryview(self._head)[offset:end]
        for start, data in self._windows:
            if start <= offset and end <= start + len(data):
                return memoryview(data)[offset - start:end - start]
        start, here = offset, b""
        if offset < len(self._head):              # the part already here is not fetched again
            start, here = len(self._head), self._head[offset:]
        if length >= WINDOW:
            return here + self._get(start, end)
        body = here + self._get(start, min(self.size(), offset + WINDOW))
        self._windows = self._windows[-(self.keep_windows - 1):] + [(offset, body)]
        return memoryview(body)[:length]

    def sibling(self, filename: str) -> "LoaderSource":
        return LoaderSource(urllib.parse.urljoin(self.name, urllib.parse.quote(filename)), self._loader)


def open_url(url: str) -> ByteSource:
    """The source engine.formats.sources.open_source gives a URL in Pyodide."""
    return LoaderSource(url)


# --- a site's model folder ----------------------------------------------------------------------
def site_folder(url: str) -> str | None:
    """The folder URL (ending in "/") when `url` names a site's model folder or its manifest.json."""
    parts = urllib.parse.urlsplit(url)
    if parts.path.endswith("/"):
        return url
    if parts.path.endswith("/" + MANIFEST_NAME):
        return urllib.parse.urljoin(url, ".")
    return None


async def _folder_manifest(folder: str, transport, kind: str) -> dict:
    manifest = await fetch_manifest(folder + MANIFEST_NAME, transport)
    container = manifest.get("container", "safetensors")
    if container != kind:
        raise InvalidHeader(f"the folder holds a {container} model: open it with load_{container}",
                            file=folder + MANIFEST_NAME)
    return manifest


async def folder_safetensors(folder: str, *, transport=None, cache=True):
    """Every tensor of a site's safetensors model folder, verified against its manifest."""
    transport = transport or runtime.transport()
    manifest = await _folder_manifest(folder, transport, "safetensors")
    return await fetch_safetensors(folder + manifest["index"], transport=transport, manifest=manifest,
                                   cache=default_cache(cache))


async def folder_gguf(folder: str, *, transport=None, cache=True, names=None):
    """The GGUF of a site's model folder (engine.site.folders.fetch_gguf): tensors `names` (all by
    default; () for none, each then fetched when read) verified against the manifest."""
    transport = transport or runtime.transport()
    manifest = await _folder_manifest(folder, transport, "gguf")
    return await fetch_gguf(folder, transport=transport, cache=default_cache(cache), names=names, manifest=manifest)


def load_folder(url: str, kind: str):
    """load_safetensors / load_gguf of a site folder's URL, blocking (JSPI in the browser)."""
    folder = site_folder(url)
    if kind == "gguf":
        return runtime.wait(folder_gguf(folder, names=()), "await engine.load_gguf_async(url)")
    return runtime.wait(folder_safetensors(folder), "await engine.load_safetensors_async(url)")


# --- the awaitable forms ------------------------------------------------------------------------
async def load_safetensors_async(location, *, transport=None, cache=True):
    """`load_safetensors` for code that awaits: a URL of a .safetensors file or of an index (.json)
    is fetched, header first, then every tensor in coalesced Range requests; the file returned
    reads from memory (a site's model folder: verified against its manifest). A path opens as load_safetensors does. `cache`: True (the browser's Cache
    API in Pyodide, none natively), False, or a store (engine.site.remote.CacheStore)."""
    if not is_url(location):
        return load_safetensors(location)
    if site_folder(location):
        return await folder_safetensors(site_folder(location), transport=transport, cache=cache)
    loader = UrlLoader(transport, default_cache(cache))
    return await fetch_safetensors(location, transport=loader.transport, loader=loader)


class _Need(Exception):
    """The parser wanted bytes up to `end` that are not here yet."""

    def __init__(self, end: int):
        self.end = end


class _HeadSource(PrefetchedSource):
    """The first bytes of a file, read by a parser that is told (_Need) when it wants more."""

    def _read(self, offset: int, length: int):
        if not self.covers(offset, length):
            raise _Need(offset + length)
        return super()._read(offset, length)


async def load_gguf_async(location, *, transport=None, cache=True) -> GGUFFile:
    """`load_gguf` for code that awaits: a GGUF's header by Range requests (the first HEAD_BYTES,
    then at least as much again at a time until it parses: a GGUF does not say how long its
    header is), then every tensor in coalesced Range requests; the file returned reads from
    memory. `cache` as for load_safetensors_async."""
    if not is_url(location):
        if isinstance(location, (str, os.PathLike)) and (os.path.isdir(location) or
                                                         os.fspath(location).endswith(".json")):
            return open_gguf_folder(location)            # a site's model folder on disk
        return load_gguf(location)
    if site_folder(location):
        return await folder_gguf(site_folder(location), transport=transport, cache=cache)
    loader = UrlLoader(transport, default_cache(cache))
    file = await _fetch_gguf(location, loader)
    if split_count(file.metadata) == 1:
        return file
    return await open_splits_async(file, lambda name: _fetch_gguf(
        urllib.parse.urljoin(location, urllib.parse.quote(name)), loader))


async def open_splits_async(first, fetch):
    """engine.formats.gguf_split.open_splits with each other file awaited: `fetch(filename)`."""
    _, others = first_split(first)
    opened = {}
    for name in others:
        try:
            opened[name] = await fetch(name)
        except SourceNotFound as e:
            raise MissingShard(f"file {name!r} of the split is missing (looked for {e.file})", file=first.name) from None
    return open_splits(first, opened.__getitem__)


async def _fetch_gguf(url: str, loader: UrlLoader) -> GGUFFile:
    """One GGUF file at `url`: its header, then every tensor, through `loader`; read from memory."""
    file, source = await gguf_header(url, loader)
    await fetch_gguf_tensors(file, source, loader)
    return file


async def gguf_header(url: str, loader: UrlLoader) -> tuple[GGUFFile, PrefetchedSource]:
    """The GGUF at `url` with its header only (metadata, tensor infos; no tensor bytes unless they
    lie in the first requests): the first HEAD_BYTES, then at least as much again at a time until
    it parses. The source holds what came; fetch_gguf_tensors adds the rest."""
    head, size = await loader.open(url)
    while True:
        source = _HeadSource(url, size)
        source.add(0, head)
        try:
            return GGUFFile(source), source
        except _Need as need:
            end = min(size, max(need.end, 2 * len(head)))
            head += await loader.fetch_range(url, len(head), end, size)


async def fetch_gguf_tensors(file: GGUFFile, source: PrefetchedSource, loader: UrlLoader, progress=None) -> None:
    """Every tensor of `file` (opened by gguf_header) into `source`, in coalesced Range requests;
    `progress(loaded, total)` in bytes as they arrive. The file then reads from memory."""
    url = source.name
    spans: list[list[int]] = []
    for info in sorted((file.info(name) for name in file), key=lambda info: info.offset):
        if info.nbytes == 0 or source.covers(info.offset, info.nbytes):
            continue
        start, end = info.offset, info.offset + info.nbytes     # a span is read from one piece
        if spans and start <= spans[-1][1] + COALESCE_GAP and end - spans[-1][0] <= MAX_RUN_BYTES:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    size, total, loaded = source.size(), sum(end - start for start, end in spans), [0]
    if progress is not None:
        progress(0, total)

    async def fetch(start: int, end: int) -> None:
        body = await loader.fetch_range(url, start, end, size)
        source.add(start, body)
        loaded[0] += len(body)
        if progress is not None:
            progress(loaded[0], total)
    await asyncio.gather(*(fetch(start, end) for start, end in spans))
    file.fetch_stats = loader.stats


async def load_pth_async(location, *, name: str | None = None, transport=None, cache=True):
    """`load_pth` for code that awaits: a URL's checkpoint fetched whole (its first HEAD_BYTES,
    then the rest: the reader reads every tensor anyway), then read from memory. `cache` as for
    load_safetensors_async."""
    if not is_url(location):
        return load_pth(location, name=name)
    loader = UrlLoader(transport, default_cache(cache))
    head, size = await loader.open(location)
    if size > len(head):
        head += await loader.fetch_range(location, len(head), size, size)
    return load_pth(head, name=name or location)
