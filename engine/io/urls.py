"""Weights at a URL, in every Python: `load_safetensors`, `load_gguf` and `load_pth` of an http(s)
URL natively and in Pyodide, and their awaitable forms.

Natively the blocking forms read a URL by Range with urllib as the parser asks for bytes
(engine.io.sources.HttpSource). In Pyodide urllib has no network to reach: the browser fetches
(JS fetch, engine.io.browser) through the `engine.io.remote.Loader` that loads a site's models,
which retries and checks every reply, and the blocking forms wait for it through JavaScript
Promise Integration (`engine.rows.wait`), reading by Range as natively (`LoaderSource`). Where
the runtime cannot block (no JSPI, or Python was not entered asynchronously) they raise
NeedsAwait, naming the awaitable form.

The awaitable forms (`await load_safetensors_async(url)`, ...) work in both, with or without
JSPI: the header first, then every tensor's bytes in coalesced Range requests (a .pth, a zip
whose tensors are all read anyway, whole), through the same Loader (urllib in a thread
natively); the file they return reads from memory.

A bare URL comes with no sha256 to check its bytes against or to key a cache by, so they are
not cached (a site's model folder, whose manifest gives both, is: engine.io.site). What goes
wrong is one error naming the URL: SourceNotFound for a 404; a FetchError for a host that
ignores Range, for an HTML page served instead of the file, and, in the browser, for a request
the browser refuses without a reason (likely CORS: engine.io.browser).
"""
from __future__ import annotations

import asyncio
import os
import sys
import urllib.parse

from ..rows import wait
from .gguf import GGUFFile, load_gguf
from .pth import load_pth
from .remote import HEAD_BYTES, Loader, PrefetchedSource, UrllibTransport, fetch_safetensors
from .safetensors import load_safetensors
from .site import open_gguf_folder
from .sources import ByteSource, is_url

WINDOW = 1 << 20        # a small read past what is here fetches this much (a GGUF header is read piece by piece)
COALESCE_GAP = 64 * 1024
MAX_RUN_BYTES = 8 << 20


def default_transport():
    """The browser's fetch in Pyodide, urllib (in a thread) natively."""
    if sys.platform == "emscripten":
        from .browser import JsFetchTransport
        return JsFetchTransport()
    return UrllibTransport()


def awaitable_form(url: str) -> str:
    """What to await instead of a blocking load of `url`, named after its file type."""
    path = urllib.parse.urlsplit(url).path.lower()
    for suffixes, function in (((".safetensors", ".json"), "load_safetensors_async"), ((".gguf",), "load_gguf_async"),
                               ((".pth", ".pt", ".bin", ".ckpt"), "load_pth_async")):
        if path.endswith(suffixes):
            return f"await engine.{function}(url)"
    return "await engine.load_safetensors_async(url) (or load_gguf_async, load_pth_async)"


class LoaderSource(ByteSource):
    """A URL read by Range through a Loader, each request awaited with engine.rows.wait (JSPI in
    the browser): the first request learns the size and keeps the first HEAD_BYTES; a small read
    past what is here fetches a WINDOW (kept, the last few), a large one exactly its bytes."""

    coalesce_gap = 256 * 1024
    keep_windows = 4

    def __init__(self, url: str, loader: Loader | None = None):
        self.name = url
        self._loader = loader or Loader(default_transport(), whole_files=False)
        self._size: int | None = None
        self._head = b""
        self._windows: list[tuple[int, bytes]] = []

    def _get(self, start: int, end: int, probe: bool = False):
        request = self._loader.request(self.name, start, end, probe=probe, size=None if probe else self._size)
        return wait(request, awaitable_form(self.name))

    def size(self) -> int:
        if self._size is None:
            self._head, self._size = self._get(0, HEAD_BYTES, probe=True)
        return self._size

    def _read(self, offset: int, length: int):
        end = offset + length
        if end <= len(self._head):
            return memoryview(self._head)[offset:end]
        for start, data in self._windows:
            if start <= offset and end <= start + len(data):
                return memoryview(data)[offset - start:end - start]
        if length >= WINDOW:
            if offset < len(self._head):          # the part already here is not fetched again
                body, _ = self._get(len(self._head), end)
                return self._head[offset:] + body
            return self._get(offset, end)[0]
        body, _ = self._get(offset, min(self.size(), offset + WINDOW))
        self._windows = self._windows[-(self.keep_windows - 1):] + [(offset, body)]
        return memoryview(body)[:length]

    def sibling(self, filename: str) -> "LoaderSource":
        return LoaderSource(urllib.parse.urljoin(self.name, urllib.parse.quote(filename)), self._loader)


def open_url(url: str) -> ByteSource:
    """The source engine.io.sources.open_source gives a URL in Pyodide."""
    return LoaderSource(url)


# --- the awaitable forms ------------------------------------------------------------------------
async def load_safetensors_async(location, *, transport=None):
    """`load_safetensors` for code that awaits: a URL of a .safetensors file or of an index (.json)
    is fetched, header first, then every tensor in coalesced Range requests; the file returned
    reads from memory. A path opens as load_safetensors does."""
    if not is_url(location):
        return load_safetensors(location)
    return await fetch_safetensors(location, transport=transport or default_transport(), whole_files=False)


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


async def load_gguf_async(location, *, transport=None) -> GGUFFile:
    """`load_gguf` for code that awaits: a GGUF's header by Range requests (the first HEAD_BYTES,
    then twice as much at a time until it parses: a GGUF does not say how long its header is),
    then every tensor in coalesced Range requests; the file returned reads from memory."""
    if not is_url(location):
        if isinstance(location, (str, os.PathLike)) and (os.path.isdir(location) or
                                                         os.fspath(location).endswith(".json")):
            return open_gguf_folder(location)            # a site's model folder on disk
        return load_gguf(location)
    url = location
    loader = Loader(transport or default_transport(), whole_files=False)
    head, size = await loader.request(url, 0, HEAD_BYTES, probe=True)
    while True:
        source = _HeadSource(url, size)
        source.add(0, head)
        try:
            file = GGUFFile(source)
            break
        except _Need as need:
            end = min(size, max(need.end, 2 * len(head)))
            more, _ = await loader.request(url, len(head), end, size=size)
            head += more
    spans: list[list[int]] = []
    for info in sorted((file.info(name) for name in file), key=lambda info: info.offset):
        if info.nbytes == 0 or info.offset + info.nbytes <= len(head):
            continue
        start, end = info.offset, info.offset + info.nbytes     # a span is read from one piece
        if spans and start <= spans[-1][1] + COALESCE_GAP and end - spans[-1][0] <= MAX_RUN_BYTES:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    bodies = await asyncio.gather(*(loader.request(url, start, end, size=size) for start, end in spans))
    for (start, _), (body, _) in zip(spans, bodies):
        source.add(start, body)
    file.fetch_stats = loader.stats
    return file


async def load_pth_async(location, *, name: str | None = None, transport=None):
    """`load_pth` for code that awaits: a URL's checkpoint fetched whole (its first HEAD_BYTES,
    then the rest: the reader reads every tensor anyway), then read from memory."""
    if not is_url(location):
        return load_pth(location, name=name)
    loader = Loader(transport or default_transport(), whole_files=False)
    head, size = await loader.request(location, 0, HEAD_BYTES, probe=True)
    if size > len(head):
        rest, _ = await loader.request(location, len(head), size, size=size)
        head += rest
    return load_pth(head, name=name or location)

