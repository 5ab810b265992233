"""A development server for dist/ that behaves like a good static host (stdlib only).

Python's http.server has no Range support, and the page reads weights with
Range requests, so this serves files itself:

- single byte ranges (`bytes=a-b`, `bytes=a-`, `bytes=-n`): 206 with Content-Range;
  unsatisfiable: 416 with `Content-Range: bytes */size`; several ranges: the whole
  file with 200 (RFC 9110 lets a server ignore Range);
- HEAD, ETag with If-None-Match (304), `Cache-Control: no-cache` so rebuilds show;
- MIME types a browser insists on (application/wasm, JavaScript for .mjs);
- a build's precompressed copy (`<file>.br` or `<file>.gz`, buildtools/compress.py) with
  `Content-Encoding: br` / `gzip` when the browser accepts it and asks for the whole file, as
  nginx's brotli_static and gzip_static do;
  a Range request always gets the stored bytes (ranges address the body as stored), and
  nothing is compressed on the fly;
- CORS for every response (`Access-Control-Allow-Origin: *`, Range allowed, Content-Range,
  Content-Length, Accept-Ranges and ETag exposed; OPTIONS preflights answered 204), so a page on
  another origin can install the wheel and read the kernels, registry and weights by Range;
- cross-origin isolation headers unless turned off: COOP/COEP on every response, and
  `Cross-Origin-Resource-Policy` same-origin on HTML documents, cross-origin on everything else
  (public assets that an isolated page on another origin may embed too);
- no directory listings, no dot files, nothing outside the served folder.
"""
from __future__ import annotations

import email.utils
import mimetypes
import os
import re
import socket
import sys
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MIME_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".json": "application/json",
    ".wasm": "application/wasm",
    ".whl": "application/octet-stream",
    ".safetensors": "application/octet-stream",
    ".zip": "application/octet-stream",
    ".py": "text/x-python; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
    ".webp": "image/webp",
    ".jpg": "image/jpeg",
}
ISOLATION_HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
}
# Cross-Origin-Resource-Policy under isolation: our HTML stays ours; the rest is public
RESOURCE_POLICY = {True: "same-origin", False: "cross-origin"}          # keyed by "is an HTML document"
CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
    "Access-Control-Allow-Headers": "Range",
    # what a cross-origin fetch may read besides the safelisted headers: the loader's Range checks
    "Access-Control-Expose-Headers": "Content-Range, Content-Length, Accept-Ranges, ETag",
}
PREFLIGHT_MAX_AGE = "86400"                 # a browser may reuse a preflight's answer for a day
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def content_type(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    return MIME_TYPES.get(ext) or mimetypes.guess_type(path)[0] or "application/octet-stream"


def parse_range(header: str | None, size: int):
    """(first, last) of a single satisfiable range; "unsatisfiable"; or None: send it all."""
    if not header:
        return None
    match = _RANGE.fullmatch(header.strip().replace(" ", ""))
    if match is None:                       # several ranges, other units, bad syntax: ignore
        return None
    first, last = match.groups()
    if first == "" and last == "":
        return None
    if first == "":                         # the last n bytes
        n = int(last)
        return (max(0, size - n), size - 1) if n > 0 and size > 0 else "unsatisfiable"
    first = int(first)
    if last != "" and int(last) < first:
        return None                         # invalid range: RFC 9110 says ignore the header
    if first >= size:
        return "unsatisfiable"
    return first, size - 1 if last == "" else min(int(last), size - 1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"           # keep-alive: every response has an exact length
    server_version = "engine-devserver"

    def version_string(self) -> str:
        return self.server_version

    # set per server by make_server
    root: str = "."
    isolation: bool = True
    log_requests: bool = False

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_OPTIONS(self) -> None:
        """A CORS preflight (a Range the browser does not safelist, e.g. several ranges): 204."""
        self.send_response(HTTPStatus.NO_CONTENT)
        self._common_headers()
        self.send_header("Access-Control-Max-Age", PREFLIGHT_MAX_AGE)
        self.send_header("Content-Length", "0")
        self.end_headers()

    # --- helpers ------------------------------------------------------------------

    def _common_headers(self, html: bool = False) -> None:
        """The headers of every response; `html`: it is (or revalidates) an HTML document."""
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Vary", "Accept-Encoding")     # a .gz beside the file may answer instead
        self.send_header("Cache-Control", "no-cache")
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in CORS_HEADERS.items():
            self.send_header(name, value)
        if self.isolation:
            for name, value in ISOLATION_HEADERS.items():
                self.send_header(name, value)
            self.send_header("Cross-Origin-Resource-Policy", RESOURCE_POLICY[html])

    def _simple(self, status: HTTPStatus, body: bool, extra: dict | None = None) -> None:
        text = f"{status.value} {status.phrase}\n".encode()
        self.send_response(status)
        self._common_headers()
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        if body:
            self.wfile.write(text)

    def _resolve(self) -> str | None:
        """The file a URL path names inside root, or None (missing, a folder, or outside)."""
        raw = urllib.parse.urlsplit(self.path).path
        path = urllib.parse.unquote(raw, errors="strict") if "%" in raw else raw
        if "\x00" in path or "\\" in path or not path.startswith("/"):
            return None
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if any(p.startswith(".") for p in parts):
            return None                     # "..", and dot files such as the build's state
        if path.endswith("/"):
            parts.append("index.html")      # "/" -> index.html; never a listing
        root = os.path.realpath(self.root)
        full = os.path.realpath(os.path.join(root, *parts))
        if os.path.commonpath([root, full]) != root or not os.path.isfile(full):
            return None
        return full

    def _serve(self, body: bool) -> None:
        try:
            full = self._resolve()
        except UnicodeDecodeError:
            full = None
        if full is None:
            self._simple(HTTPStatus.NOT_FOUND, body)
            return
        try:
            f = open(full, "rb")
        except OSError:
            self._simple(HTTPStatus.NOT_FOUND, body)
            return
        encoded = self._precompressed(full)
        if encoded is not None:
            f.close()
            f = open(encoded[0], "rb")
        html = content_type(full).startswith("text/html")
        with f:
            st = os.fstat(f.fileno())
            size = st.st_size
            etag = f'"{st.st_mtime_ns:x}-{size:x}"'
            if self._matches(self.headers.get("If-None-Match"), etag):
                self.send_response(HTTPStatus.NOT_MODIFIED)
                self._common_headers(html)
                self.send_header("ETag", etag)
                self.end_headers()
                return
            wanted = parse_range(self.headers.get("Range"), size)
            if_range = self.headers.get("If-Range")
            if wanted is not None and if_range is not None and if_range.strip() != etag:
                wanted = None               # the client's copy is stale: send it all
            if wanted == "unsatisfiable":
                self._simple(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, body,
                             {"Content-Range": f"bytes */{size}"})
                return
            first, last = wanted if wanted else (0, size - 1)
            self.send_response(HTTPStatus.PARTIAL_CONTENT if wanted else HTTPStatus.OK)
            self._common_headers(html)
            self.send_header("Content-Type", content_type(full))
            if encoded is not None:
                self.send_header("Content-Encoding", encoded[1])
            self.send_header("Content-Length", str(last - first + 1))
            if wanted:
                self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
            self.end_headers()
            if body and last >= first:
                f.seek(first)
                self._copy(f, last - first + 1)

    def _precompressed(self, full: str) -> tuple[str, str] | None:
        """(`full`.br or .gz, its encoding) when the build made one, the client accepts that
        encoding and wants the whole file; brotli first (smaller)."""
        if self.headers.get("Range"):
            return None
        accepted = set()
        for token in (self.headers.get("Accept-Encoding") or "").lower().split(","):
            name, _, params = token.partition(";")
            if params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000"):
                accepted.add(name.strip())
        for encoding, suffix in (("br", ".br"), ("gzip", ".gz")):
            if encoding in accepted and os.path.isfile(full + suffix):
                return full + suffix, encoding
        return None

    @staticmethod
    def _matches(header: str | None, etag: str) -> bool:
        if not header:
            return False
        tags = [t.strip() for t in header.split(",")]
        return "*" in tags or any(t.removeprefix("W/") == etag for t in tags)

    def _copy(self, f, remaining: int) -> None:
        while remaining > 0:
            block = f.read(min(remaining, 1 << 20))
            if not block:
                break
            self.wfile.write(block)
            remaining -= len(block)

    def log_message(self, format: str, *args) -> None:
        pass                                # the one line per request is log_request's

    def log_request(self, code="-", size="-") -> None:
        if self.log_requests:
            code = getattr(code, "value", code)
            sys.stderr.write(f"{self.command} {urllib.parse.urlsplit(self.path).path} {code}\n")


class DevServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, TimeoutError)):
            return                          # a browser cancelled a download: not an error
        super().handle_error(request, client_address)


def make_server(root, host: str = "127.0.0.1", port: int = 0, isolation: bool = True,
                log_requests: bool = False) -> DevServer:
    """A server for `root`, not yet serving; `.server_port` is the bound port."""
    handler = type("BoundHandler", (Handler,), {"root": os.fspath(root), "isolation": isolation,
                                                 "log_requests": log_requests})
    server_class = type("DevServer6", (DevServer,), {"address_family": socket.AF_INET6}) if ":" in host else DevServer
    return server_class((host, port), handler)


def serve(root, host: str = "127.0.0.1", port: int = 8000, isolation: bool = True) -> None:
    """Serve `root` until interrupted, one log line per request."""
    if not Path(root, "index.html").is_file():
        print(f"note: {root} has no index.html yet; / will answer 404", file=sys.stderr)
    with make_server(root, host, port, isolation, log_requests=True) as server:
        shown = f"[{host}]" if ":" in host else host
        print(f"serving {root} at http://{shown}:{server.server_port}/ "
              f"({'cross-origin isolated' if isolation else 'no isolation headers'}); Ctrl-C stops",
              flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":                  # python -m buildtools.devserver [DIR] [--port N] [--no-isolation]
    import argparse
    ap = argparse.ArgumentParser(description="Serve a built site (dist/) as a good static host would.")
    ap.add_argument("dir", nargs="?", default="dist")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--no-isolation", action="store_true",
                    help="omit the COOP/COEP/CORP headers, as a host that cannot set them would "
                         "(the CORS headers stay)")
    args = ap.parse_args()
    serve(args.dir, args.host, args.port, isolation=not args.no_isolation)
