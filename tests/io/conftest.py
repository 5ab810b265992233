"""A Range-capable HTTP server on 127.0.0.1 for the byte-source tests.

`server.mode` makes it misbehave: "ignore_range" answers 200 with the whole file,
"short" sends 206 with half the body (and an honest Content-Length), "cut" promises
the full body and hangs up halfway. `server.fail_next = n` answers 503 n times.
"""
from __future__ import annotations

import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


class _RangeHandler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:      # keep pytest output clean
        pass

    def do_GET(self) -> None:
        server = self.server
        server.requests.append(self.headers.get("Range"))
        if server.fail_next > 0:
            server.fail_next -= 1
            return self._reply(503, b"busy")
        relative = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        path = Path(server.root) / relative
        if ".." in relative.split("/") or not path.is_file():
            return self._reply(404, b"not found")
        data = path.read_bytes()
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range") or "")
        if match is None or server.mode == "ignore_range":
            return self._reply(200, data)
        first, last = int(match[1]), min(int(match[2]), len(data) - 1)
        if first >= len(data):
            return self._reply(416, b"", {"Content-Range": f"bytes */{len(data)}"})
        body = data[first:last + 1]
        headers = {"Content-Range": f"bytes {first}-{last}/{len(data)}"}
        if server.mode == "short" and len(body) > 1:
            body = body[:len(body) // 2]
        if server.mode == "cut" and len(body) > 1:
            return self._reply(206, body[:len(body) // 2], headers, length=len(body))
        self._reply(206, body, headers)

    def _reply(self, status: int, body: bytes, headers=None, length=None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)


class RangeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path):
        super().__init__(("127.0.0.1", 0), _RangeHandler)
        self.root = root
        self.mode = "normal"
        self.fail_next = 0
        self.requests: list[str | None] = []

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{name}"


@pytest.fixture
def http_server(tmp_path):
    server = RangeServer(tmp_path)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()
