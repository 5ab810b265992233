"""One file's bytes over HTTP: what goes wrong on the way, handled once for every use.

A `Fetcher` GETs a URL, or a byte range of it, through a transport (engine.runtime.transport(): the
browser's fetch in Pyodide, urllib natively; or any object with the `Transport` protocol) and
checks the reply: failed and broken replies are retried with backoff, then a FetchError names the
file, the range and the cause; a host that cannot serve byte ranges as stored (it ignores Range,
or compresses on the fly) has each file read whole once, up to WHOLE_FILE_LIMIT bytes, and sliced;
a file served in byte parts is read span by span. Its cache (the `CacheStore` protocol: the
browser's Cache API) is only ever a help: a cache that fails is a miss, reported in
`stats["cache_error"]`, never a failed load.

engine.site.remote builds a checkpoint's prefetch on it (`Loader`).
"""
from __future__ import annotations

import asyncio
from typing import Protocol

from ..errors import FetchError, IntegrityError, SourceNotFound, WeightsError
from ..formats.sources import CONTENT_RANGE, html_page
from ..runtime import Unexplained

WHOLE_FILE_LIMIT = 128 << 20    # a host without byte ranges: files up to this size are read whole


class Transport(Protocol):
    async def get(self, url: str, start: int | None = None, end: int | None = None
                  ) -> tuple[int, dict[str, str], bytes]:
        """GET `url`, or bytes [start, end) with `Range: bytes=start-(end-1)`.

        Returns (status, headers with lower-case names, body); raises on network errors.
        """


class CacheStore(Protocol):
    async def get(self, key: str) -> bytes | None: ...
    async def put(self, key: str, data: bytes) -> None: ...
    async def delete(self, key: str) -> None: ...
    async def keys(self) -> list[str]: ...


class _Retry(Exception):
    """A failed reply worth another attempt."""


class _NoRanges(Exception):
    """The host answered a Range request with something other than those bytes as stored: the
    whole file (it ignores Range) or a compressed body (ranges then address the compressed
    bytes). `size`: the file's size where the reply tells it."""

    def __init__(self, reason: str, size: int | None = None):
        super().__init__(reason)
        self.size = size


def _describe(error: Exception) -> str:
    """An exception as a reason in a message: network errors speak for themselves."""
    if isinstance(error, (_Retry, _NoRanges, Unexplained)) or type(error) in (ConnectionError, TimeoutError) or \
            type(error).__name__ == "JsException":
        return str(error) or type(error).__name__
    return f"{type(error).__name__}: {error}"


def _encoding(headers) -> str | None:
    value = headers.get("content-encoding", "identity").strip().lower()
    return None if value in ("", "identity") else value


def _check_reply(url, start, end, probe, size, status, headers, body) -> tuple[bytes, int]:
    """(body, file size) of a good reply; raise a permanent WeightsError, _NoRanges or _Retry."""
    if status in (404, 410):
        raise SourceNotFound(f"not found (HTTP {status})", file=url)
    html = html_page(headers, body, start) if status in (200, 206) else None
    if html is not None:
        raise FetchError(f"{html}: is the URL right?", file=url)
    content_range = headers.get("content-range", "")
    match = CONTENT_RANGE.fullmatch(content_range.strip())
    if start is None:
        # a whole file; a 206 that covers all of it is one too (a cache on the way may send it);
        # a body the browser decoded (Content-Encoding) is longer than the range it came in
        whole = status == 206 and match and match[1] is not None and match[3] != "*" and \
            int(match[1]) == 0 and int(match[2]) + 1 == int(match[3]) and \
            (_encoding(headers) is not None or len(body) == int(match[3]))
        if status != 200 and not whole:
            raise _Retry(f"HTTP {status}")
        return body, len(body)
    if status == 200:
        length = headers.get("content-length", "")
        raise _NoRanges("the server ignores HTTP Range requests (it answered with the whole file, HTTP 200)",
                        int(length) if length.isdigit() and not _encoding(headers) else None)
    if status == 206 and _encoding(headers):
        raise _NoRanges(f"the server compresses this file on the fly (Content-Encoding: {_encoding(headers)}), "
                        f"so byte ranges address the compressed body, not the file")
    if status == 416 and match and match[1] is None and match[3] != "*":
        total = int(match[3])
        if probe and total <= start:
            return b"", total                # an empty file has no byte 0 to send
        raise _Retry(f"HTTP 416 (range not satisfiable: the server says the file has {total} bytes)")
    if status != 206:
        raise _Retry(f"HTTP {status}")
    if not match or match[1] is None or match[3] == "*":
        raise _Retry(f"bad Content-Range {content_range!r}")
    first, last, total = int(match[1]), int(match[2]), int(match[3])
    want_end = min(end, total) if probe else end           # a probe may pass the end
    if (first, last + 1) != (start, want_end) or (not probe and size is not None and total != size):
        raise _Retry(f"Content-Range {content_range!r} does not answer bytes={start}-{end - 1}")
    if len(body) != last + 1 - first:
        raise _Retry(f"body has {len(body)} of {last + 1 - first} bytes")
    return body, total


class Fetcher:
    """GETs through `transport`, at most `concurrency` at a time, each retried `retries` times
    (waiting `backoff`, doubled each time, through `sleep`); `whole_files=False`: a host without
    byte ranges is an error instead of read whole. `stats` counts requests and bytes."""

    def __init__(self, transport, cache=None, *, retries=3, backoff=0.25, sleep=asyncio.sleep, concurrency=4,
                 whole_files=True):
        self.transport, self.cache = transport, cache
        self.whole_files = whole_files           # False: a host without byte ranges is an error
        self.retries, self.backoff, self.sleep = retries, backoff, sleep
        self.concurrency, self._limits = concurrency, {}
        self.stats = {"requests": 0, "network_bytes": 0, "cache_bytes": 0, "runs": 0}
        self._no_ranges: dict[str, str] = {}     # url -> why its ranges are read from the whole file
        self._files: dict = {}                   # url -> the task downloading it whole
        self._probed: set[str] = set()           # urls whose headers were looked at after a failure
        self._cache_puts = True                  # False once the cache refused to store (quota)

    def _limit(self) -> asyncio.Semaphore:
        """The request limit of the running event loop (a lazy tensor fetched natively runs
        its own asyncio.run; a semaphore must not cross loops)."""
        loop = asyncio.get_running_loop()
        if loop not in self._limits:
            self._limits = {loop: asyncio.Semaphore(self.concurrency)}
        return self._limits[loop]

    async def request(self, url, start=None, end=None, *, probe=False, size=None):
        """(body, file size) of GET `url` or of its bytes [start, end), with retries. `size`: the
        file's size where known (checked, except for a `probe`, whose caller checks it).

        A host that cannot serve byte ranges as stored — it ignores Range (HTTP 200), or
        compresses on the fly so that ranges address the compressed body (the browser then
        fails to decode them: a network error, after which the plain file's headers tell) — has
        each file read whole once, up to WHOLE_FILE_LIMIT bytes, and sliced; every tensor is
        still checked against its sha256."""
        if start is not None and url in self._no_ranges:
            return await self._from_whole(url, start, end, probe, size, self._no_ranges[url])
        failure = None
        for attempt in range(self.retries + 1):
            if attempt:
                await self.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                async with self._limit():
                    self.stats["requests"] += 1
                    status, headers, body = await self.transport.get(url, start, end)
                self.stats["network_bytes"] += len(body)
                headers = {k.lower(): v for k, v in (headers or {}).items()}
                return _check_reply(url, start, end, probe, size, status, headers, bytes(body))
            except WeightsError:
                raise
            except _NoRanges as e:
                return await self._from_whole(url, start, end, probe, size if size is not None else e.size, str(e))
            except Exception as e:          # network errors and _Retry; not cancellation
                failure = _describe(e)
                if start is not None and not isinstance(e, _Retry):
                    reason = await self._compressed(url)
                    if reason is not None:
                        return await self._from_whole(url, start, end, probe, size, reason)
        what = "" if start is None else f" bytes [{start}, {end})"
        raise FetchError(f"could not fetch{what}: {failure} (gave up after "
                         f"{self.retries + 1} attempts)", file=url)

    async def _compressed(self, url) -> str | None:
        """Why ranges of `url` fail, when its plain GET says the host compresses it; else None.
        Asked once per file, after a network error (the transport must offer `head`)."""
        head = getattr(self.transport, "head", None)
        if head is None or url in self._probed:
            return None
        self._probed.add(url)
        try:
            async with self._limit():
                self.stats["requests"] += 1
                status, headers = await head(url)
        except Exception:
            return None
        encoding = _encoding({k.lower(): v for k, v in (headers or {}).items()})
        if status not in (200, 206) or encoding is None:
            return None
        return (f"the server compresses this file on the fly (Content-Encoding: {encoding}), so byte ranges "
                f"address the compressed body, which the browser cannot decode")

    async def _from_whole(self, url, start, end, probe, size, reason) -> tuple[bytes, int]:
        """Bytes [start, end) of `url` cut from the whole file, downloaded once (by whoever asks
        first) and kept until the end of the current load() (a row table's loader, which never
        loads, keeps it: its rows are cut from it as texts need them)."""
        if not self.whole_files:
            raise FetchError(f"{reason}; serve it from a host with HTTP Range support", file=url)
        self._no_ranges[url] = reason
        if size is not None and size > WHOLE_FILE_LIMIT:
            limit = f"{WHOLE_FILE_LIMIT >> 20} MiB" if WHOLE_FILE_LIMIT >= 1 << 20 else f"{WHOLE_FILE_LIMIT:,} bytes"
            raise FetchError(f"{reason}; reading it whole instead is refused for files over {limit} (it has "
                             f"{size:,} bytes): serve it with HTTP Range support and without compression", file=url)
        task = self._files.get(url)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = self._files[url] = asyncio.ensure_future(self.request(url))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())   # retrieved even if unawaited
        try:
            body, total = await asyncio.shield(task)
        except FetchError as e:
            raise FetchError(f"{reason}; reading it whole instead failed too: {e.args[0]}") from None
        if size is not None and total != size:
            raise IntegrityError(f"{reason}; the whole file has {total:,} bytes, the manifest says {size:,}",
                                 file=url)
        stop = min(end, total) if probe else end
        if stop > total:
            raise FetchError(f"{reason}; bytes [{start}, {end}) lie past its end ({total:,} bytes)", file=url)
        return body[start:stop], total

    async def fetch_span(self, parts, start: int, end: int, *, check_size: bool = False) -> bytes:
        """Bytes [start, end) of a file served as `parts` [(url, offset, size)]: one request per
        part the span touches (one for a file served whole). With `check_size` the server's
        size of each part must be the expected one (an IntegrityError otherwise)."""
        pieces = []
        for url, offset, size in parts:
            a, b = max(start, offset), min(end, offset + size)
            if a >= b:
                continue
            if check_size:
                body, total = await self.request(url, a - offset, b - offset, probe=True, size=size)
                if total != size:
                    raise IntegrityError(f"the manifest says {size} bytes, the server has {total}", file=url)
            else:
                body, _ = await self.request(url, a - offset, b - offset, size=size)
            pieces.append(body)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    # cache.<method>(*args), for the loader and engine.site.folders: a cache that fails (quota, private
    # mode) is a miss, never a failed load; the first failure is reported in stats["cache_error"],
    # and after a refused put nothing more is offered
    async def cache_call(self, method, *args):
        if method == "put" and not self._cache_puts:
            return None
        try:
            return await getattr(self.cache, method)(*args)
        except Exception as e:
            self.stats.setdefault("cache_error", f"{'storing in' if method == 'put' else 'reading'} the cache "
                                                 f"failed: {_describe(e)}")
            if method == "put":
                self._cache_puts = False
            return None
