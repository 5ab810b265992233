"""Byte sources: random access to the bytes of a file, a buffer or a URL.

Parsers ask a source for byte ranges and never touch files or sockets, so the
same parser runs on a local file (mmap, zero-copy), in memory, over HTTP Range
requests natively, and in the browser, where a subclass of `RangeSource`
implements `_request` with JS fetch.
"""
from __future__ import annotations

import os
import re
import time
import urllib.parse

from .. import runtime
from ..errors import FetchError, SourceNotFound, TruncatedFile

try:                         # absent or partial on some Pyodide builds
    import mmap
except ImportError:          # pragma: no cover
    mmap = None


class ByteSource:
    """Random-access bytes. Subclasses implement `size` and `_read`."""

    name: str = "<source>"
    coalesce_gap = 64 * 1024  # read_many merges ranges at most this far apart

    def size(self) -> int:
        raise NotImplementedError

    def _read(self, offset: int, length: int):
        """Return a bytes-like object of `length` bytes; bounds already checked."""
        raise NotImplementedError

    def read(self, offset: int, length: int) -> memoryview:
        """Bytes [offset, offset + length) as a read-only-safe memoryview."""
        if offset < 0 or length < 0:
            raise ValueError(f"bad range offset={offset} length={length} in {self.name}")
        total = self.size()
        if offset + length > total:
            raise TruncatedFile(f"wanted bytes [{offset}, {offset + length}) but the source "
                                f"has only {total} bytes", file=self.name)
        if length == 0:
            return memoryview(b"")
        view = memoryview(self._read(offset, length)).cast("B")
        if view.nbytes != length:
            raise TruncatedFile(f"short read at offset {offset}: got {view.nbytes} of "
                                f"{length} bytes", file=self.name)
        return view

    def read_many(self, ranges: list[tuple[int, int]]) -> list[memoryview]:
        """Read several (offset, length) ranges with as few `read` calls as possible.

        Ranges closer than `coalesce_gap` are merged into one read and handed back
        as slices of it: over HTTP each read is a request, and requests, not
        bytes, dominate the cost of loading many small tensors.
        """
        order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
        spans: list[list] = []            # [start, end, indices]
        for i in order:
            offset, length = ranges[i]
            if spans and offset <= spans[-1][1] + self.coalesce_gap:
                spans[-1][1] = max(spans[-1][1], offset + length)
                spans[-1][2].append(i)
            else:
                spans.append([offset, offset + length, [i]])
        out: list = [None] * len(ranges)
        for start, end, indices in spans:
            view = self.read(start, end - start)
            for i in indices:
                offset, length = ranges[i]
                out[i] = view[offset - start:offset - start + length]
        return out

    def sibling(self, filename: str) -> "ByteSource":
        """The source for `filename` next to this one (shards named in an index)."""
        raise NotImplementedError(f"{type(self).__name__} cannot resolve sibling {filename!r}")

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class BytesSource(ByteSource):
    """An in-memory buffer (bytes, bytearray, memoryview, NumPy array)."""

    def __init__(self, data, name: str = "<bytes>"):
        self._view = memoryview(data).cast("B")
        self.name = name

    def size(self) -> int:
        return self._view.nbytes

    def _read(self, offset: int, length: int):
        return self._view[offset:offset + length]


class FileSource(ByteSource):
    """A local file, memory-mapped when possible so tensors are zero-copy views."""

    coalesce_gap = 0 if mmap is not None else 64 * 1024

    def __init__(self, path):
        self.path = os.fspath(path)
        self.name = self.path
        try:
            file = open(self.path, "rb")
        except FileNotFoundError:
            raise SourceNotFound("no such file", file=self.path) from None
        except OSError as e:               # a directory, no permission, a name too long...
            raise FetchError(f"cannot open: {e.strerror or e}", file=self.path) from None
        except ValueError:                 # NUL in the path, or text the file system cannot encode
            raise FetchError("not a usable file name", file=self.path) from None
        self._size = os.fstat(file.fileno()).st_size
        self._view = None
        self._map = None
        if mmap is not None and self._size > 0:    # mmap refuses empty files
            try:
                self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
                self._view = memoryview(self._map)
            except (OSError, ValueError):
                self._map = None
        if self._map is not None:
            file.close()                           # the map keeps its own handle
            self._file = None
        else:
            self._file = file

    def size(self) -> int:
        return self._size

    def _read(self, offset: int, length: int):
        if self._view is not None:
            return self._view[offset:offset + length]
        self._file.seek(offset)
        return self._file.read(length)

    def sibling(self, filename: str) -> "FileSource":
        return FileSource(os.path.join(os.path.dirname(self.path), filename))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._map is not None:
            self._view.release()
            try:
                self._map.close()
            except BufferError:
                pass    # arrays still view the map; it is unmapped when they go


CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)")
_HTML_START = re.compile(rb"\s*(<!doctype\s+html|<html[\s>])", re.IGNORECASE)


def html_page(headers: dict, body=b"", start: int | None = 0) -> str | None:
    """Why a reply is an HTML page (an error or login page, a site's index served for any path)
    instead of the file asked for, or None. `headers`: lower-case names; the body is looked at
    only when it begins the file (`start` 0 or None)."""
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type in ("text/html", "application/xhtml+xml"):
        return f"the server sent an HTML page (Content-Type: {content_type}) instead of the file"
    if start in (0, None) and _HTML_START.match(bytes(memoryview(body)[:256])):
        return "the server sent an HTML page (it begins with <!doctype html> or <html>) instead of the file"
    return None


class _Transient(Exception):
    """A failure worth retrying (network error, 5xx, short body)."""


class RangeSource(ByteSource):
    """A remote file read with HTTP Range requests; subclasses do the transport.

    The first request fetches the first `probe_bytes` and learns the size from
    Content-Range, so opening a safetensors file usually costs one request.
    Every response is checked: status 206, the exact Content-Range asked for,
    the exact body length. Transient failures are retried with backoff.
    """

    coalesce_gap = 256 * 1024
    probe_bytes = 64 * 1024

    def __init__(self, name: str, *, retries: int = 2, backoff: float = 0.25):
        self.name = name
        self.retries = retries
        self.backoff = backoff
        self._size: int | None = None
        self._prefix = b""

    def _request(self, start: int, end: int) -> tuple[int, str | None, bytes]:
        """GET with `Range: bytes=start-end` (inclusive) -> (status, Content-Range, body).

        Raise OSError for transport failures; the body may be empty unless 206.
        """
        raise NotImplementedError

    def size(self) -> int:
        if self._size is None:
            self._prefix = self._fetch(0, self.probe_bytes - 1, probe=True)
        return self._size

    def _read(self, offset: int, length: int):
        if offset + length <= len(self._prefix):
            return memoryview(self._prefix)[offset:offset + length]
        return self._fetch(offset, offset + length - 1)

    def _fetch(self, start: int, end: int, probe: bool = False) -> bytes:
        for attempt in range(self.retries + 1):
            try:
                return self._fetch_once(start, end, probe)
            except _Transient as e:
                failure = e
                if attempt < self.retries:
                    time.sleep(self.backoff * 2 ** attempt)
        raise FetchError(f"{failure} (gave up after {self.retries + 1} attempts)",
                         file=self.name)

    def _fetch_once(self, start: int, end: int, probe: bool) -> bytes:
        try:
            status, content_range, body = self._request(start, end)
        except OSError as e:
            raise _Transient(f"request for bytes {start}-{end} failed: {e}") from None
        if status in (404, 410):
            raise SourceNotFound(f"not found (HTTP {status})", file=self.name)
        if status in (408, 429) or status >= 500:
            raise _Transient(f"HTTP {status} for bytes {start}-{end}")
        match = CONTENT_RANGE.fullmatch((content_range or "").strip())
        if probe and status == 416 and match and match[1] is None and match[3] != "*":
            self._size = int(match[3])     # an empty file has no byte 0 to send
            return b""
        if status == 200:
            raise FetchError("the server ignores HTTP Range requests (it answered with the whole file, HTTP 200); "
                             "serve it from a host with HTTP Range support", file=self.name)
        if status != 206:
            raise FetchError(f"HTTP {status} for bytes {start}-{end}", file=self.name)
        if not match or match[1] is None or match[3] == "*":
            raise FetchError(f"bad Content-Range {content_range!r} for bytes {start}-{end}",
                             file=self.name)
        first, last, total = int(match[1]), int(match[2]), int(match[3])
        if probe:
            self._size = total
            end = min(end, total - 1)      # the server clamps a probe past the end
        if (first, last, total) != (start, end, self._size):
            raise FetchError(f"asked for bytes {start}-{end}/{self._size}, server sent "
                             f"Content-Range {content_range!r}", file=self.name)
        if len(body) != last - first + 1:
            raise _Transient(f"short body for bytes {start}-{end}: got {len(body)} of "
                             f"{last - first + 1} bytes")
        return body


class HttpSource(RangeSource):
    """A URL read natively with urllib."""

    def __init__(self, url: str, *, timeout: float = 60.0, retries: int = 2,
                 backoff: float = 0.25):
        super().__init__(url, retries=retries, backoff=backoff)
        self.url = url
        self.timeout = timeout

    def _request(self, start: int, end: int) -> tuple[int, str | None, bytes]:
        status, headers, body = runtime.http_get(self.url, start, end + 1, self.timeout)
        html = html_page(headers, body, start) if status in (200, 206) else None
        if html is not None:
            raise FetchError(f"{html}: is the URL right?", file=self.name)
        return status, headers.get("content-range"), body

    def sibling(self, filename: str) -> "HttpSource":
        url = urllib.parse.urljoin(self.url, urllib.parse.quote(filename))
        return type(self)(url, timeout=self.timeout, retries=self.retries,
                          backoff=self.backoff)


def is_url(location) -> bool:
    return isinstance(location, str) and location.startswith(("http://", "https://"))


_url_opener = None


def set_url_opener(opener) -> None:
    """Have `open_source` open URLs with `opener(url) -> ByteSource` instead of urllib: engine.site
    sets one in Pyodide, where the browser fetches (urllib there has no network to reach)."""
    global _url_opener
    _url_opener = opener


def open_source(location) -> ByteSource:
    """A ByteSource for a path, an http(s) URL, or an existing ByteSource."""
    if isinstance(location, ByteSource):
        return location
    if is_url(location):
        return HttpSource(location) if _url_opener is None else _url_opener(location)
    return FileSource(location)
