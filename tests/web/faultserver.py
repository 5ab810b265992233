"""A misbehaving static host for the browser tests.

buildtools' dev server (Range, MIME types, the isolation headers) serving a built dist/, with
faults injected by URL pattern from the test itself (the server runs in the test's process):

    server = start_fault_server(site, overlays={"/models/toy/": folder})    # .url, .stop()
    server.inject("status", r"/models/mnist_cnn/.*\\.safetensors$", status=503, times=2)
    server.clear()

A fault applies to the requests whose URL path matches its pattern (`re.search`): it lets the
first `after` of them through, then applies to `times` of them (None: to every one); the others
are served as a good host would. The first fault whose pattern matches decides. Kinds:

- "ignore-range": the whole file with 200, whatever Range asked (Python's http.server does so);
- "wrong-range": a 206 with other bytes: `claim="sent"` (default) those `shift` further on, named
  honestly in Content-Range; `claim="asked"` the file's bytes rotated by `shift` under the asked
  range's name (only the sha256 can tell);
- "status": an empty answer with HTTP `status` (416 with `Content-Range: bytes */size`);
- "reset": the headers and half the body, then a TCP reset;
- "trickle": the headers, then `chunk` bytes every `interval` seconds;
- "gzip": the file compressed on the fly (Content-Encoding: gzip), a Range addressing the
  compressed body, as a misconfigured host does;
- "body": `body` (bytes) instead of the file, with 200 (a manifest that says something else).

`server.log` records (method, path, Range header, status) of every request answered.
"""
from __future__ import annotations

import gzip
import re
import socket
import struct
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path

from buildtools.devserver import Handler, content_type, make_server, parse_range

KINDS = ("ignore-range", "wrong-range", "status", "reset", "trickle", "gzip", "body")


@dataclass
class Fault:
    kind: str
    pattern: str
    times: int | None = None
    after: int = 0
    params: dict = field(default_factory=dict)
    hits: int = 0                   # matching requests seen


class Faults:
    """The faults in force, thread-safe: the server's threads take them, the test sets them."""

    def __init__(self):
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def inject(self, kind: str, pattern: str, *, times: int | None = None, after: int = 0, **params) -> Fault:
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r}; one of {', '.join(KINDS)}")
        fault = Fault(kind, pattern, times, after, params)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def take(self, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if not re.search(fault.pattern, path):
                    continue
                fault.hits += 1
                applied = fault.hits - fault.after
                if applied > 0 and (fault.times is None or applied <= fault.times):
                    return fault
                return None
        return None


class FaultHandler(Handler):
    asked_range: str | None = None
    faults: Faults
    overlays: dict[str, str] = {}
    log: list

    def _resolve(self):
        path = urllib.parse.urlsplit(self.path).path
        for prefix, folder in self.overlays.items():
            if path.startswith(prefix):
                name = urllib.parse.unquote(path[len(prefix):])
                full = Path(folder, name)
                if "/" not in name and not name.startswith(".") and full.is_file():
                    return str(full)
                return None
        return super()._resolve()

    def log_request(self, code="-", size="-") -> None:
        self.log.append((self.command, urllib.parse.urlsplit(self.path).path, self.asked_range,
                         getattr(code, "value", code)))

    def _serve(self, body: bool) -> None:
        self.asked_range = self.headers.get("Range")
        fault = self.faults.take(urllib.parse.urlsplit(self.path).path)
        if fault is None:
            return super()._serve(body)
        if fault.kind == "ignore-range":
            del self.headers["Range"]
            return super()._serve(body)
        if fault.kind == "body":
            return self._send(HTTPStatus.OK, {"Content-Type": "application/json"}, fault.params["body"], body)
        full = self._resolve()
        if full is None:
            return self._simple(HTTPStatus.NOT_FOUND, body)
        data = Path(full).read_bytes()
        getattr(self, "_" + fault.kind.replace("-", "_"))(fault.params, data, full, body)

    # --- the faults ---------------------------------------------------------------------------
    def _send(self, status, headers: dict, data: bytes, body: bool) -> None:
        self.send_response(status)
        self._common_headers()
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _wanted(self, size: int) -> tuple[int, int]:
        wanted = parse_range(self.headers.get("Range"), size)
        return wanted if isinstance(wanted, tuple) else (0, size - 1)

    def _status(self, params, data, full, body) -> None:
        status = HTTPStatus(params["status"])
        extra = {"Content-Range": f"bytes */{len(data)}"} if status == 416 else {}
        self._simple(status, body, extra)

    def _wrong_range(self, params, data, full, body) -> None:
        first, last = self._wanted(len(data))
        shift = params.get("shift", 100)
        if params.get("claim", "sent") == "asked":          # other bytes under the asked range's name
            sent = (data[first:] + data[:first])
            sent = (sent[shift % len(sent):] + sent[:shift % len(sent)])[:last - first + 1]
            claimed = first, last
        else:                                               # an honest answer for another range
            if last + shift < len(data):
                a, b = first + shift, last + shift
            elif first >= shift:
                a, b = first - shift, last - shift
            else:
                a, b = first + 1, last                      # a range as long as the file: one byte short
            sent, claimed = data[a:b + 1], (a, b)
        self._send(HTTPStatus.PARTIAL_CONTENT, {"Content-Type": content_type(full),
                                                "Content-Range": f"bytes {claimed[0]}-{claimed[1]}/{len(data)}"},
                   sent, body)

    def _head(self, status, headers: dict, length: int) -> None:
        self.send_response(status)
        self._common_headers()
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.flush()

    def _ranged(self, data, full) -> tuple[int, dict, bytes]:
        """(status, headers, body) a good host would send for this request."""
        wanted = parse_range(self.headers.get("Range"), len(data))
        if not isinstance(wanted, tuple):
            return 200, {"Content-Type": content_type(full)}, data
        first, last = wanted
        return 206, {"Content-Type": content_type(full),
                     "Content-Range": f"bytes {first}-{last}/{len(data)}"}, data[first:last + 1]

    def _reset(self, params, data, full, body) -> None:
        status, headers, payload = self._ranged(data, full)
        self._head(status, headers, len(payload))
        if body:
            self.wfile.write(payload[:len(payload) // 2])
            self.wfile.flush()
        # SO_LINGER 0: close() sends a TCP reset instead of a clean end of stream
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _trickle(self, params, data, full, body) -> None:
        status, headers, payload = self._ranged(data, full)
        self._head(status, headers, len(payload))
        chunk, interval = params.get("chunk", 64), params.get("interval", 1.0)
        if not body:
            return
        for at in range(0, len(payload), chunk):
            try:
                self.wfile.write(payload[at:at + chunk])
                self.wfile.flush()
            except OSError:                 # the client gave up: the point of the fault
                self.close_connection = True
                return
            time.sleep(interval)

    def _gzip(self, params, data, full, body) -> None:
        packed = gzip.compress(data, mtime=0)
        headers = {"Content-Type": content_type(full), "Content-Encoding": "gzip"}
        wanted = parse_range(self.headers.get("Range"), len(packed))
        if wanted == "unsatisfiable":
            return self._simple(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, body,
                                {"Content-Range": f"bytes */{len(packed)}"})
        if wanted is None:
            return self._send(HTTPStatus.OK, headers, packed, body)
        first, last = wanted
        self._send(HTTPStatus.PARTIAL_CONTENT, {**headers, "Content-Range": f"bytes {first}-{last}/{len(packed)}"},
                   packed[first:last + 1], body)


class FaultServer:
    def __init__(self, root: Path, overlays: dict[str, Path] | None = None, isolation: bool = True):
        self.faults = Faults()
        self.log: list = []
        self._server = make_server(root, port=0, isolation=isolation)
        base = self._server.RequestHandlerClass
        self._server.RequestHandlerClass = type("Faulty", (FaultHandler, base), {
            "faults": self.faults, "log": self.log,
            "overlays": {prefix: str(folder) for prefix, folder in (overlays or {}).items()}})
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_port}/"
        self.root = root

    def inject(self, kind: str, pattern: str, **options) -> Fault:
        return self.faults.inject(kind, pattern, **options)

    def clear(self) -> None:
        self.faults.clear()

    def requests(self, pattern: str) -> list[tuple]:
        """The logged requests whose path matches `pattern`."""
        return [entry for entry in list(self.log) if re.search(pattern, entry[1])]

    def stop(self) -> None:
        self.faults.clear()
        self._server.shutdown()
        self._server.server_close()
