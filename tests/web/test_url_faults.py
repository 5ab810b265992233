"""Weights by URL in the page's worker (Pyodide): engine.load_safetensors / load_gguf / load_pth of a
URL fetched by the browser (engine.site.urls over JS fetch) instead of urllib, from the page's own
site and from another origin, blocking (through JSPI) and awaited; the same tensors as a native
read of the same files, and a second load served from the Cache API but for the header. Then the faults, each one error naming the URL, with nothing left in the
Cache API: a 404, a host that ignores Range, a host that sends no CORS headers, an HTML page
served instead of the weights; and a blocking load where Python cannot wait (NeedsAwait).

The other origin is a small host started here (127.0.0.1 on its own port), with or without CORS
headers, serving a folder of toy weights written by the test, plus two fault paths: /norange/
(every answer the whole file with 200) and /page/ (an HTML page with text/html, for any file).
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import write_weight_formats

PAGE = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>Sign in to continue</body></html>\n"
MNIST_INDEX = "models/mnist_cnn/model.safetensors.index.json"
SMOLLM = "models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_TENSOR = "blk.0.attn_norm.weight"

# defined once in the worker: a loaded file's tensors as sha256s of their bytes (what the test compares)
HELPERS = r"""
import hashlib, js
import numpy as np

def digests(weights, names=None):
    out = {}
    for name in (names or list(weights)):
        value = weights[name]
        array = value.raw if hasattr(value, "raw") else value.numpy()
        out[name] = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
    return out

def failure(e):
    return {"error": type(e).__name__, "message": str(e), "file": getattr(e, "file", None)}

async def cached_urls():
    found = []
    for name in await js.caches.keys():
        cache = await js.caches.open(name)
        found += [str(request.url) for request in await cache.keys()]
    return found
"""


def digests(weights, names=None) -> dict:
    """The worker's `digests`, natively."""
    out = {}
    for name in names or list(weights):
        value = weights[name]
        array = value.raw if hasattr(value, "raw") else value.numpy()
        out[name] = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
    return out


class _Host(BaseHTTPRequestHandler):
    """A static host of its own: byte ranges, CORS headers when the server says so, two fault paths."""

    def log_message(self, *args) -> None:
        pass

    def do_OPTIONS(self) -> None:
        self.send_response(204)
        self._cors()
        self.end_headers()

    def do_GET(self) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        self.server.log.append((path, self.headers.get("Range")))
        file = self.server.root / path.rsplit("/", 1)[-1]
        if not file.is_file():
            return self._reply(404, b"<!doctype html><title>Not found</title>", "text/html")
        if path.startswith("/page/"):
            return self._reply(200, PAGE, "text/html; charset=utf-8")
        data = file.read_bytes()
        version = {"ETag": f'"{hashlib.sha256(data).hexdigest()[:16]}"'}
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range") or "")
        if match is None or path.startswith("/norange/"):
            return self._reply(200, data, headers=version)
        first, last = int(match[1]), min(int(match[2]), len(data) - 1)
        self._reply(206, data[first:last + 1], headers={"Content-Range": f"bytes {first}-{last}/{len(data)}", **version})

    def _cors(self) -> None:
        if self.server.cors:
            self.send_header("Access-Control-Allow-Origin", "*")
            self.send_header("Access-Control-Allow-Headers", "Range")
            self.send_header("Access-Control-Expose-Headers", "Content-Range, Content-Length, Accept-Ranges, ETag")

    def _reply(self, status: int, body: bytes, content_type: str = "application/octet-stream", headers=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self._cors()
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):      # the browser stops reading an unwanted body
            pass


class Host(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, cors: bool):
        super().__init__(("127.0.0.1", 0), _Host)
        self.root, self.cors, self.log = root, cors, []
        self.thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{path}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    """model.safetensors, model.gguf (a header of ~150 kB: more than one request) and model.pth with
    the same tensors, and page.safetensors: an HTML page under a weights file's name."""
    root = tmp_path_factory.mktemp("weights")
    rng = np.random.default_rng(1)
    arrays = {"w": rng.standard_normal((64, 300)).astype(np.float32), "b": np.arange(7, dtype=np.float32),
              "h": rng.standard_normal((3, 5)).astype(np.float16)}
    write_weight_formats(root, arrays)
    (root / "page.safetensors").write_bytes(PAGE)
    return root


@pytest.fixture(scope="module")
def hosts(toy):
    """The toy folder on two more origins: one sending CORS headers, one sending none."""
    with_cors, without = Host(toy, cors=True), Host(toy, cors=False)
    yield with_cors, without
    with_cors.stop()
    without.stop()


@pytest.fixture
def worker(dev_server, session_factory):
    s = session_factory(dev_server.url)
    s.open()
    s.run(HELPERS)
    return s


LOADERS = {"model.safetensors": "load_safetensors", "model.gguf": "load_gguf", "model.pth": "load_pth"}


def test_weights_by_url_are_the_native_tensors(worker, dev_server, serve_folder, hosts, toy):
    """From the page's own site and from the same site on another origin (MNIST's sharded
    safetensors by its index and by its model folder, verified against the manifest; SmolLM2's
    98 MB GGUF, of which one tensor is read), and from a third origin (the toy files), blocking
    and awaited."""
    import engine
    s, (host, _) = worker, hosts
    native_mnist = digests(engine.load_safetensors(dev_server.root / MNIST_INDEX))
    native_smollm = engine.load_gguf(dev_server.root / SMOLLM)
    for site in (dev_server.url, serve_folder(dev_server.root).url):
        assert s.run(f"digests(engine.load_safetensors({json.dumps(site + MNIST_INDEX)}))") == native_mnist
        folder = json.dumps(site + MNIST_INDEX.rsplit("/", 1)[0] + "/")
        assert s.run(f"digests(await engine.load_safetensors_async({folder}))") == native_mnist
        before = len(s.responses)
        smollm = s.run(f"f = engine.load_gguf({json.dumps(site + SMOLLM)})\n"
                       f"[f.metadata['general.architecture'], digests(f, [{SMOLLM_TENSOR!r}])]")
        assert smollm == [native_smollm.metadata["general.architecture"], digests(native_smollm, [SMOLLM_TENSOR])]
        fetched = [r for r in s.responses[before:] if r.url == site + SMOLLM]
        assert 2 <= len(fetched) <= 12 and all(r.status == 206 for r in fetched)     # by Range, never whole
    assert len(native_mnist) >= 4
    for name, loader in LOADERS.items():
        want = digests(getattr(engine, loader)(toy / name))
        url = json.dumps(host.url(name))
        for form in (f"engine.{loader}({url})", f"await engine.{loader}_async({url})"):
            assert s.run(f"digests({form})") == want, (name, form)
            again = len(host.log)
            assert s.run(f"digests({form})") == want, (name, form)
            assert [path for path, _ in host.log[again:]] == ["/" + name], form   # the header; the rest was cached
    cached = s.run("await cached_urls()")
    for name in LOADERS:
        assert any(u.startswith(host.url(name) + "?engine-range=") for u in cached), name
    assert s.console_errors == []


FAULTS = [
    # (what, path on the host, cors, error type, the message's regex)
    ("404", "absent.safetensors", True, "SourceNotFound", r"not found \(HTTP 404\)"),
    ("no Range", "norange/model.safetensors", True, "FetchError",
     r"the server ignores HTTP Range requests \(it answered with the whole file, HTTP 200\); "
     r"serve it from a host with HTTP Range support"),
    ("no CORS", "model.safetensors", False, "FetchError",
     r"the browser gives no reason \(TypeError: Failed to fetch\); the likely cause is that "
     r"http://127\.0\.0\.1:\d+ does not allow cross-origin requests \(CORS\) from this page"),
    ("HTML by type", "page/model.gguf", True, "FetchError",
     r"the server sent an HTML page \(Content-Type: text/html\) instead of the file: is the URL right\?"),
    ("HTML by its bytes", "page.safetensors", True, "FetchError",
     r"the server sent an HTML page \(it begins with <!doctype html> or <html>\) instead of the file"),
]


def test_each_fault_is_one_error_naming_the_url(worker, hosts):
    """Every fault in one page, blocking and awaited: its one error (not one wrapped in another),
    the URL in it, and no Cache API entry for the host afterwards."""
    s = worker
    for what, path, cors, error, message in FAULTS:
        host = hosts[0 if cors else 1]
        url = host.url(path)
        loader = LOADERS.get(path.rsplit("/", 1)[-1], "load_safetensors")
        for form in (f"engine.{loader}(url)", f"await engine.{loader}_async(url)"):
            result = s.run(f"url = {json.dumps(url)}\n"
                           f"try:\n    weights = {form}\n    result = digests(weights)\n"
                           f"except Exception as e:\n    result = failure(e)\nresult")
            assert result.get("error") == error, (what, form, result)
            assert re.search(message, result["message"]), (what, form, result["message"])
            assert result["file"] == url and url in result["message"], (what, form, result)
            assert result["message"].count("(file ") == 1, (what, form, result)
    hosts_named = [host.url("") for host in hosts]
    assert not [u for u in s.run("await cached_urls()") if u.startswith(tuple(hosts_named))]


def test_a_blocking_load_where_python_cannot_wait_says_what_to_await(worker, hosts):
    """Python called back synchronously from JavaScript cannot block on a promise (no JSPI
    suspension there): the blocking form raises NeedsAwait naming the awaitable one."""
    url = json.dumps(hosts[0].url("model.gguf"))
    result = worker.run(f"""
from pyodide.ffi import create_proxy
def attempt():
    try:
        engine.load_gguf({url})
        return "loaded"
    except Exception as e:
        return type(e).__name__ + ": " + str(e)
call = create_proxy(attempt)
outcome = js.Function.new("f", "return f()")(call)
call.destroy()
outcome
""")
    assert result.startswith("NeedsAwait: this call cannot wait for the browser here (this runtime has no "
                             "JavaScript Promise Integration, or the call was not entered asynchronously): "
                             "use `await engine.load_gguf_async(url)` instead"), result
