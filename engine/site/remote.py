"""Weights over HTTP in two phases: an async prefetch, then the unchanged sync parser.

In the browser fetch and the Cache API are async while the safetensors and GGUF readers
are synchronous (and JSPI is not in every browser). So `fetch_safetensors` first downloads
exactly what the wanted tensors need — each shard's head, then their byte ranges
coalesced into few Range requests, verified against the site's manifest and cached —
into `PrefetchedSource`s, and `SafetensorsFile` parses those from memory with every
validation it applies to a local file. A GGUF on a site (`Loader.open_gguf`, used by
engine.site.folders.fetch_gguf) goes the same way: its header in one request (the manifest
gives its length and sha256), parsed by `GGUFFile`, then its tensors as `RemoteGGUF`
asks for them; the file may be split into byte parts, each range read from the parts
holding it. The requests themselves (retries, checked replies, a host without byte ranges read
whole, the cache as a help) are engine.site.fetcher's, which `Loader` builds on; bytes that fail
their sha256 are fetched once more here, then an IntegrityError names the tensor.

The cache is used only with a manifest, whose sha256s key and verify its entries
(engine.site.manifest): a warm load then requests nothing but the index.
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import posixpath
import struct
import urllib.parse
from dataclasses import dataclass, field

from .. import runtime
from ..errors import FetchError, IntegrityError, MissingShard, MissingTensor, SourceNotFound, WeightsError
from ..formats.gguf import GGUFFile
from ..formats.safetensors import MAX_HEADER_BYTES, SafetensorsFile, ShardedSafetensors, TensorInfo, parse_json
from ..formats.sources import ByteSource
from .fetcher import CacheStore, Fetcher, Transport
from .manifest import (cache_key, check_gguf_header, check_header, check_manifest, gguf_parts,
                       is_stale, run_digest, tiling)

HEAD_BYTES = 64 * 1024          # one request usually holds the whole header


class PrefetchedSource(ByteSource):
    """A remote file's size and the spans of it fetched so far, served from memory.

    Reading bytes that were not prefetched is an error, not a hidden request: the
    sync parser cannot wait for the network.
    """

    def __init__(self, url: str, size: int | None = None):
        self.name = url
        self._size = size
        self._spans: list[tuple[int, memoryview]] = []     # (offset, bytes), by offset

    def add(self, offset: int, data) -> None:
        self._spans.append((offset, memoryview(data).cast("B")))
        self._spans.sort(key=lambda span: span[0])

    def size(self) -> int:
        if self._size is None:
            raise FetchError("this file was not prefetched", file=self.name)
        return self._size

    def _span(self, offset: int, end: int):
        for start, view in self._spans:
            if start <= offset and end <= start + view.nbytes:
                return view[offset - start:end - start]
        return None

    def covers(self, offset: int, length: int) -> bool:
        """Whether bytes [offset, offset + length) are here."""
        return length == 0 or self._span(offset, offset + length) is not None

    def _read(self, offset: int, length: int):
        view = self._span(offset, offset + length)
        if view is None:
            raise FetchError(f"bytes [{offset}, {offset + length}) were not prefetched; name their "
                             f"tensor in names=... when fetching", file=self.name)
        return view

    def read_many(self, ranges: list[tuple[int, int]]) -> list[memoryview]:
        return [self.read(offset, length) for offset, length in ranges]   # all in memory

    def sibling(self, filename: str) -> "PrefetchedSource":
        return PrefetchedSource(urllib.parse.urljoin(self.name, urllib.parse.quote(filename)))


@dataclass
class _Shard:
    """One weights file being fetched: its parsed header and the bytes that arrived."""
    url: str
    filename: str
    source: PrefetchedSource
    file: SafetensorsFile | GGUFFile
    head: bytes                          # bytes [0, len(head)) of the file
    header_bytes: int                    # of which the header (what the cache keeps)
    parts: list[tuple[str, int, int]]    # (url, offset, size): where its bytes are served
    head_sha256: str | None = None       # the header's cache entry is current for this hash
    head_key: str | None = None
    head_cached: bool = False

    @functools.cached_property
    def infos(self) -> list[TensorInfo]:
        return sorted((self.file.info(n) for n in self.file),
                      key=lambda i: (i.offset, i.nbytes, i.name))


@dataclass
class _Run:
    shard: _Shard
    start: int
    end: int
    members: list[TensorInfo] = field(default_factory=list)   # the tensors tiling it
    key: str | None = None


async def _gather(coroutines):
    """asyncio.gather that cancels the rest when one fails, raising its error as is."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class Loader(Fetcher):
    """A checkpoint's tensors prefetched: each file's header (from the cache when its sha256 still
    holds), then the wanted tensors' bytes in runs (tensors at most `coalesce_gap` apart share a
    request, up to `max_run_bytes`), each checked against the `manifest`'s sha256s and cached;
    `progress(loaded, total)` as bytes arrive."""

    def __init__(self, transport, cache=None, manifest=None, progress=None, *,
                 coalesce_gap=64 * 1024, max_run_bytes=8 << 20, retries=3, backoff=0.25,
                 sleep=asyncio.sleep, concurrency=4, whole_files=True):
        super().__init__(transport, cache, retries=retries, backoff=backoff, sleep=sleep, concurrency=concurrency,
                         whole_files=whole_files)
        self.manifest, self.progress = manifest, progress
        self.coalesce_gap, self.max_run = coalesce_gap, max_run_bytes
        self.loaded = self.total = 0

    async def _cached_head(self, key, parse) -> _Shard | None:
        """The shard parsed from the header cached under `key` (its bytes, then their sha256), or
        None: no key, nothing cached, or an entry that is damaged or no longer parses (deleted)."""
        if not key:
            return None
        blob = await self.cache_call("get", key)
        if blob is None:
            return None
        head = bytes(blob[:-32])
        if hashlib.sha256(head).digest() == bytes(blob[-32:]):
            try:
                shard = parse(head)
                self.stats["cache_bytes"] += len(head)
                shard.head_key, shard.head_cached = key, True
                return shard
            except WeightsError:
                pass
        await self.cache_call("delete", key)
        return None

    async def open_shard(self, url: str, filename: str) -> _Shard:
        entry = (self.manifest or {}).get("files", {}).get(filename)
        key = cache_key(url, "engine-head", entry["sha256"]) if entry and self.cache else None
        shard = await self._cached_head(key, lambda head: self._parse(url, filename, entry["size"], head))
        if shard is not None:
            return shard
        head, size = await self.request(url, 0, HEAD_BYTES, probe=True, size=entry["size"] if entry else None)
        if entry and entry["size"] != size:
            raise IntegrityError(f"the manifest says {entry['size']} bytes, the server has "
                                 f"{size}", file=url)
        if len(head) >= 8:
            need = 8 + struct.unpack_from("<Q", head)[0]
            if len(head) < need <= min(size, 8 + MAX_HEADER_BYTES):   # else the parser fails
                rest, _ = await self.request(url, len(head), need, size=size)
                head += rest
        shard = self._parse(url, filename, size, head)
        shard.head_key = key
        return shard

    def _parse(self, url, filename, size, head) -> _Shard:
        source = PrefetchedSource(url, size)
        source.add(0, head)
        file = SafetensorsFile(source)       # every header check of the sync reader
        if self.manifest is not None:
            check_header(file, filename, self.manifest)
        entry = (self.manifest or {}).get("files", {}).get(filename)
        return _Shard(url, filename, source, file, head, 8 + struct.unpack_from("<Q", head)[0],
                      [(url, 0, size)], head_sha256=entry["sha256"] if entry else None)

    async def open_gguf(self, folder: str) -> _Shard:
        """The GGUF of a site folder whose manifest this loader holds: its header and metadata in
        one Range request (or from the cache), checked against the manifest's sha256, parsed by
        GGUFFile, compared with the manifest tensor by tensor. No tensor bytes yet."""
        gguf = self.manifest["gguf"]
        filename, header_bytes = gguf["file"], gguf["header_bytes"]
        url = urllib.parse.urljoin(folder, urllib.parse.quote(filename))
        parts = [(urllib.parse.urljoin(folder, urllib.parse.quote(name)), offset, part_size)
                 for name, offset, part_size in gguf_parts(self.manifest)]
        key = cache_key(url, "engine-head", gguf["header_sha256"]) if self.cache else None
        shard = await self._cached_head(key, lambda head: self._parse_gguf(url, filename, parts, head))
        if shard is not None:
            return shard
        head = await self.fetch_span(parts, 0, header_bytes, check_size=True)
        if hashlib.sha256(head).hexdigest() != gguf["header_sha256"]:
            raise IntegrityError(f"the header (bytes [0, {header_bytes})) differs from the manifest: "
                                 f"sha256 {hashlib.sha256(head).hexdigest()}, expected "
                                 f"{gguf['header_sha256']}", file=url)
        shard = self._parse_gguf(url, filename, parts, head)
        shard.head_key = key
        return shard

    def _parse_gguf(self, url, filename, parts, head) -> _Shard:
        gguf = self.manifest["gguf"]
        source = PrefetchedSource(url, gguf["size"])
        source.add(0, head)
        file = RemoteGGUF(source, self, header_bytes=gguf["header_bytes"])   # every check of the reader
        check_gguf_header(file, self.manifest)
        shard = _Shard(url, filename, source, file, head, len(head), parts, head_sha256=gguf["header_sha256"])
        file._shard = shard
        return shard

    def plan(self, shard: _Shard, names) -> list[_Run]:
        wanted = sorted((shard.file.info(n) for n in names), key=lambda i: i.offset)
        spans: list[list[int]] = []
        for info in wanted:
            if info.nbytes == 0:
                continue                    # nothing to fetch
            if (spans and info.offset <= spans[-1][1] + self.coalesce_gap
                    and info.offset + info.nbytes - spans[-1][0] <= self.max_run):
                spans[-1][1] = max(spans[-1][1], info.offset + info.nbytes)
            else:
                spans.append([info.offset, info.offset + info.nbytes])
        infos, runs = shard.infos, []
        for start, end in spans:
            run = _Run(shard, start, end, tiling(infos, start, end))
            if self.manifest is not None and self.cache is not None:
                run.key = cache_key(shard.url, f"engine-range={start}-{end}",
                                    run_digest(self.manifest, run.members))
            runs.append(run)
        return runs

    def _mismatch(self, run: _Run, data) -> tuple[str | None, str] | None:
        """(tensor, why) for bytes that are not the run's, or None when they are."""
        if len(data) != run.end - run.start:
            return None, f"{len(data)} bytes instead of {run.end - run.start}"
        if self.manifest is None:
            return None
        view = memoryview(data)
        for m in run.members:
            want = self.manifest["tensors"][m.name]["sha256"]
            got = hashlib.sha256(view[m.offset - run.start:m.offset - run.start + m.nbytes])
            if got.hexdigest() != want:
                return m.name, f"sha256 {got.hexdigest()} differs from the manifest's {want}"
        return None

    async def fetch_run(self, run: _Run) -> None:
        shard = run.shard
        if run.key:
            data = await self.cache_call("get", run.key)
            if data is not None:
                if self._mismatch(run, data) is None:
                    self.stats["cache_bytes"] += len(data)
                    return self._deliver(run, bytes(data))
                await self.cache_call("delete", run.key)       # corrupted: refetch once
        have = len(shard.head)          # a network probe may already hold the run's start
        if run.end <= have:
            data = shard.head[run.start:run.end]
        else:
            body = await self.fetch_span(shard.parts, max(run.start, have), run.end)
            data = shard.head[run.start:have] + body if run.start < have else body
        bad = self._mismatch(run, data)
        if bad is not None:             # once more, all of it from the network: bytes spoilt on the way
            data = await self.fetch_span(shard.parts, run.start, run.end)
            bad = self._mismatch(run, data)
        if bad is not None:
            raise IntegrityError(f"downloaded bytes [{run.start}, {run.end}) are corrupt: "
                                 f"{bad[1]}", file=shard.url, tensor=bad[0])
        if run.key:
            await self.cache_call("put", run.key, data)
        self._deliver(run, data)

    def _deliver(self, run: _Run, data: bytes) -> None:
        run.shard.source.add(run.start, data)
        self.loaded += len(data)
        if self.progress is not None:
            self.progress(self.loaded, self.total)

    async def load(self, plan: list[tuple[_Shard, list[str]]]) -> None:
        runs = [run for shard, names in plan for run in self.plan(shard, names)]
        self.stats["runs"] += len(runs)
        self.loaded, self.total = 0, sum(run.end - run.start for run in runs)
        if self.progress is not None:
            self.progress(0, self.total)
        try:
            await _gather(self.fetch_run(run) for run in runs)
        finally:
            self._files.clear()             # whole files read for a host without ranges: sliced by now
        if self.cache is None or self.manifest is None:
            return
        for shard, _ in plan:               # only now: a header that led to bad data is not kept
            if shard.head_key and not shard.head_cached:
                header = shard.head[:shard.header_bytes]
                await self.cache_call("put", shard.head_key,
                                  header + hashlib.sha256(header).digest())
                shard.head_cached = True
        await self.prune([shard for shard, _ in plan])

    async def prune(self, shards: list[_Shard]) -> None:
        """Delete the entries of these shards that no longer hold current bytes."""
        for key in await self.cache_call("keys") or []:
            for shard in shards:
                if is_stale(key, shard.url, shard.head_sha256, shard.infos, self.manifest):
                    await self.cache_call("delete", key)


class RemoteGGUF(GGUFFile):
    """A GGUF on a site (engine.site.folders.fetch_gguf): the header parsed, and each tensor
    fetched by Range the first time it is wanted — verified by its sha256, cached — then
    kept. `await fetch(names)` fetches ahead (adjacent tensors share requests); reading a
    tensor not fetched yet waits for it (JSPI in the browser, asyncio.run natively)."""

    def __init__(self, source: PrefetchedSource, loader: "Loader", *, header_bytes: int):
        super().__init__(source, header_bytes=header_bytes)
        self._loader, self._shard = loader, None
        self.fetch_stats = loader.stats

    def missing(self, names=None) -> list[str]:
        """The tensors among `names` (all by default) whose bytes are not here yet."""
        infos = [self.info(n) for n in (self if names is None else names)]
        return [i.name for i in infos if not self.source.covers(i.offset, i.nbytes)]

    async def fetch(self, names=None) -> int:
        """Fetch the tensors `names` (all by default) that are not here yet; how many."""
        todo = self.missing(None if names is None else list(dict.fromkeys(names)))
        if todo:
            await self._loader.load([(self._shard, todo)])
        return len(todo)

    def _wait_for(self, names) -> None:
        if self.missing(names):
            from ..rows import PREPARE
            runtime.wait(self.fetch(names), PREPARE)

    def __getitem__(self, name: str):
        self._wait_for([name])
        return super().__getitem__(name)

    def get_many(self, names=None) -> dict:
        names = list(self if names is None else names)
        self._wait_for(names)
        return super().get_many(names)


async def fetch_safetensors(url: str, *, transport: Transport, names=None,
                            manifest: dict | None = None, cache: CacheStore | None = None,
                            progress=None, coalesce_gap: int = 64 * 1024,
                            max_run_bytes: int = 8 << 20, retries: int = 3, backoff: float = 0.25,
                            sleep=asyncio.sleep, concurrency: int = 4, whole_files: bool = True,
                            loader: Loader | None = None):
    """Prefetch the tensors `names` (all by default) of a .safetensors URL or an index URL.

    Returns a `SafetensorsFile` or `ShardedSafetensors` whose wanted tensors read from
    memory, with `.fetch_stats` {"requests", "network_bytes", "cache_bytes", "runs"}.
    With a manifest every fetched tensor is checked against its sha256 and the cache
    is used; `progress(loaded_bytes, total_bytes)` is called as tensor bytes arrive.
    Wanted tensors at most `coalesce_gap` apart share a request, up to `max_run_bytes`
    per request (a bigger tensor gets one of its own), at most `concurrency` at a time.
    `whole_files=False`: a host without byte ranges is an error instead of read whole. `loader`:
    one made by the caller (engine.site.urls), used instead of all the options above.
    """
    if manifest is not None:
        check_manifest(manifest, "manifest")
    if loader is None:
        loader = Loader(transport, cache, manifest, progress, coalesce_gap=coalesce_gap,
                        max_run_bytes=max_run_bytes, retries=retries, backoff=backoff, sleep=sleep,
                        concurrency=concurrency, whole_files=whole_files)
    wanted = None if names is None else list(dict.fromkeys(names))
    if urllib.parse.urlsplit(url).path.endswith(".json"):      # an index
        body, _ = await loader.request(url)
        index = PrefetchedSource(url, len(body))
        index.add(0, body)
        weights = ShardedSafetensors(index)
        wanted = list(weights.weight_map) if wanted is None else wanted
        groups: dict[str, list[str]] = {}
        for name in wanted:
            if name not in weights.weight_map:
                raise MissingTensor("no such tensor in the index", file=url, tensor=name)
            groups.setdefault(weights.weight_map[name], []).append(name)

        async def open_shard(filename):
            shard_url = index.sibling(filename).name
            try:
                return await loader.open_shard(shard_url, filename)
            except SourceNotFound:
                raise MissingShard(f"shard {filename!r} named in the index does not exist "
                                   f"(looked for {shard_url})", file=url) from None
        shards = await _gather(open_shard(filename) for filename in groups)
        for shard in shards:
            weights.add_shard(shard.filename, shard.file)
        plan = [(shard, groups[shard.filename]) for shard in shards]
    else:
        filename = urllib.parse.unquote(posixpath.basename(urllib.parse.urlsplit(url).path))
        shard = await loader.open_shard(url, filename)
        weights = shard.file
        plan = [(shard, list(weights) if wanted is None else wanted)]
    for name in wanted or ():
        weights.info(name)          # MissingTensor before any tensor byte is fetched
    await loader.load(plan)
    weights.fetch_stats = loader.stats
    return weights


async def fetch_manifest(url: str, transport: Transport, *, retries: int = 3,
                         backoff: float = 0.25, sleep=asyncio.sleep) -> dict:
    """GET and validate a weights manifest (the format: buildtools/convert.py)."""
    loader = Loader(transport, retries=retries, backoff=backoff, sleep=sleep)
    body, _ = await loader.request(url)
    doc = parse_json(body, url, "manifest")
    check_manifest(doc, url)
    return doc
