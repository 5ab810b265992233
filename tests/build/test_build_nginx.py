"""deploy/nginx.conf serves the built site as the page needs: Range, MIME types, isolation, CORS."""
import http.client
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from buildtools.nginx import nginx_command, render_nginx_conf
from test_build_gguf import check_lazy_load

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/sbin/nginx") if os.path.exists(p)), None)
needs_nginx = pytest.mark.need(NGINX is not None, "the nginx binary is not installed "
                                "(apt-get install nginx; scripts/test.sh installs it)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(root):
    """nginx serving `root` on a free port: (port, stop)."""
    # world-traversable scratch: workers run as "nobody" when the master is root
    tmp = Path(tempfile.mkdtemp(prefix="engine-nginx-"))
    os.chmod(tmp, 0o755)
    conf = tmp / "nginx.conf"
    for attempt in range(3):                     # another process may take the port first
        port = _free_port()
        conf.write_text(render_nginx_conf(root, port, tmp))
        proc = subprocess.Popen(nginx_command(conf, tmp, NGINX), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        if proc.poll() is None:
            break
    else:
        log = (tmp / "error.log").read_text() if (tmp / "error.log").exists() else ""
        pytest.fail(f"nginx did not start: {proc.stderr.read().decode()} {log}")

    def stop():
        proc.terminate()                         # SIGTERM: fast shutdown of master and workers
        proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    return port, stop


@pytest.fixture(scope="module")
def nginx(dist):
    port, stop = _start(dist)
    yield port
    stop()


@pytest.fixture(scope="module")
def small_site():
    """A few files of each kind a site serves, in a world-readable folder (no build needed)."""
    root = Path(tempfile.mkdtemp(prefix="engine-nginx-site-"))
    os.chmod(root, 0o755)
    for rel, data in [("index.html", b"<!doctype html><title>home</title>"), ("registry.json", b"[]"),
                      ("kernels/k.simd.wasm", b"\0asm" + bytes(60)), ("pyodide/engine-0.1.0-py3-none-any.whl", bytes(300)),
                      ("models/m/model.safetensors", bytes(range(256))), ("worker.js", b"//"), ("lab/index.html", b"<p>")]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        os.chmod((root / rel).parent, 0o755)
        (root / rel).write_bytes(data)
        os.chmod(root / rel, 0o644)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def small_nginx(small_site):
    if NGINX is None:
        pytest.skip("nginx is not installed")
    port, stop = _start(small_site)
    yield port
    stop()


def request(port, path, method="GET", **headers):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request(method, path, headers=headers)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r, body


@needs_nginx
def test_range_on_a_weight_shard(nginx, dist):
    shard = dist / "models" / "mnist_cnn" / "model-00002-of-00003.safetensors"
    data = shard.read_bytes()
    r, body = request(nginx, "/models/mnist_cnn/model-00002-of-00003.safetensors",
                      Range="bytes=100-199", **{"Accept-Encoding": "gzip, br"})
    assert r.status == 206 and body == data[100:200]
    assert r.getheader("Content-Range") == f"bytes 100-199/{len(data)}"
    assert r.getheader("Content-Encoding") is None
    r, body = request(nginx, "/models/mnist_cnn/model-00002-of-00003.safetensors", Range="bytes=-8")
    assert r.status == 206 and body == data[-8:]
    r, _ = request(nginx, "/models/mnist_cnn/model-00002-of-00003.safetensors", Range=f"bytes={len(data)}-")
    assert r.status == 416


@needs_nginx
def test_precompressed_runtime(nginx, dist):
    """The build's .gz beside pyodide.asm.wasm goes out encoded (gzip_static), as wasm, to a
    browser that accepts gzip; without Accept-Encoding the stored file goes out; weights have
    no .gz (test_range_on_a_weight_shard asks for gzip and gets the stored bytes)."""
    import gzip
    stored = (dist / "pyodide" / "pyodide.asm.wasm").read_bytes()
    assert (dist / "pyodide" / "pyodide.asm.wasm.gz").is_file()
    assert not list((dist / "models").rglob("*.gz"))
    r, body = request(nginx, "/pyodide/pyodide.asm.wasm", **{"Accept-Encoding": "gzip, deflate"})
    assert r.status == 200 and r.getheader("Content-Encoding") == "gzip"
    assert r.getheader("Content-Type") == "application/wasm" and "Accept-Encoding" in r.getheader("Vary")
    assert len(body) < len(stored) / 2 and gzip.decompress(body) == stored
    r, body = request(nginx, "/pyodide/pyodide.asm.wasm")
    assert r.getheader("Content-Encoding") is None and body == stored
    # brotli where the browser accepts it (scripts/test.sh installs nginx's module and the brotli command)
    assert (dist / "pyodide" / "pyodide.asm.wasm.br").is_file()
    r, body = request(nginx, "/pyodide/pyodide.asm.wasm", **{"Accept-Encoding": "gzip, deflate, br"})
    assert r.getheader("Content-Encoding") == "br" and body == (dist / "pyodide" / "pyodide.asm.wasm.br").read_bytes()
    assert len(body) < len(stored) / 3


def test_rendered_config_without_the_brotli_module(tmp_path):
    """A host without nginx's brotli module gets a config without its lines: gzip only."""
    text = render_nginx_conf(tmp_path / "site", 8123, tmp_path / "run", brotli=False)
    assert [line for line in text.splitlines() if "brotli" in line.split("#")[0]] == []
    assert "gzip_static on;" in text
    assert "brotli_static on;" in render_nginx_conf(tmp_path / "site", 8123, tmp_path / "run", brotli=True)


@needs_nginx
def test_mime_types(nginx):
    for path, mime in [("/pyodide/pyodide.asm.wasm", "application/wasm"),
                       ("/pyodide/pyodide.mjs", "text/javascript"),
                       ("/pyodide/pyodide.js", "text/javascript"),
                       ("/pyodide/engine-0.1.0-py3-none-any.whl", "application/octet-stream"),
                       ("/models/mnist_cnn/model-00001-of-00003.safetensors", "application/octet-stream"),
                       ("/build-info.json", "application/json")]:
        r, _ = request(nginx, path, method="HEAD")
        assert r.status == 200, path
        assert r.getheader("Content-Type").split(";")[0] == mime, path


@needs_nginx
def test_isolation_headers_and_no_listing(nginx):
    for path, policy in (("/build-info.json", "cross-origin"), ("/pyodide/engine.json", "cross-origin"),
                         ("/", "same-origin"), ("/no-such-file", "same-origin")):    # nginx's 404 page is HTML
        r, _ = request(nginx, path)
        assert r.getheader("Cross-Origin-Opener-Policy") == "same-origin", path
        assert r.getheader("Cross-Origin-Embedder-Policy") == "require-corp", path
        assert r.getheader("Cross-Origin-Resource-Policy") == policy, path
    assert request(nginx, "/pyodide/")[0].status in (403, 404)              # no listing
    assert request(nginx, "/.build-state.json")[0].status == 404


@needs_nginx
def test_etag_revalidation(nginx):
    r, _ = request(nginx, "/build-info.json")
    etag = r.getheader("ETag")
    assert etag and request(nginx, "/build-info.json", **{"If-None-Match": etag})[0].status == 304


def test_rendered_config_fills_every_placeholder(tmp_path):
    text = render_nginx_conf(tmp_path / "site", 8123, tmp_path / "run", user="root")
    assert "@" not in text
    assert f"root {tmp_path / 'site'};" in text and "listen 127.0.0.1:8123;" in text
    assert f"error_log {tmp_path / 'run'}/error.log" in text and "\nuser root;\n" in text
    assert "user " not in render_nginx_conf(tmp_path / "site", 8123, tmp_path / "run")
    for folder in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        assert (tmp_path / "run" / folder).stat().st_mode & 0o777 == 0o777
    with pytest.raises(ValueError, match="quoting"):
        render_nginx_conf(tmp_path / "a site; evil", 8123, tmp_path / "run")


@needs_nginx
def test_smollm2_loads_lazily_through_nginx(nginx, smollm2_gguf):
    check_lazy_load(f"http://127.0.0.1:{nginx}/", smollm2_gguf)


CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
        "Access-Control-Allow-Headers": "Range",
        "Access-Control-Expose-Headers": "Content-Range, Content-Length, Accept-Ranges, ETag"}


@needs_nginx
@pytest.mark.parametrize("path, headers, status, policy", [
    ("/", {}, 200, "same-origin"), ("/index.html", {}, 200, "same-origin"), ("/lab/index.html", {}, 200, "same-origin"),
    ("/registry.json", {}, 200, "cross-origin"), ("/kernels/k.simd.wasm", {}, 200, "cross-origin"),
    ("/pyodide/engine-0.1.0-py3-none-any.whl", {}, 200, "cross-origin"), ("/worker.js", {}, 200, "cross-origin"),
    ("/models/m/model.safetensors", {"Range": "bytes=10-19"}, 206, "cross-origin"),
])
def test_cors_and_resource_policy(small_nginx, path, headers, status, policy):
    """Public assets are readable from any origin (CORS, by Range) and embeddable by an isolated
    page on another origin (CORP cross-origin); our HTML documents stay ours, and keep COOP/COEP,
    revalidated (304) too."""
    r, body = request(small_nginx, path, Origin="http://127.0.0.1:1", **headers)
    assert r.status == status, path
    assert {name: r.getheader(name) for name in CORS} == CORS, path
    assert r.getheader("Cross-Origin-Resource-Policy") == policy, path
    assert r.getheader("Cross-Origin-Embedder-Policy") == "require-corp", path
    assert r.getheader("Access-Control-Max-Age") is None
    if status == 206:
        assert body == bytes(range(10, 20)) and r.getheader("Content-Range") == "bytes 10-19/256"
    if status == 200:
        r, _ = request(small_nginx, path, **{"If-None-Match": r.getheader("ETag")})
        assert r.status == 304 and r.getheader("Cross-Origin-Resource-Policy") == policy, path
        assert r.getheader("Access-Control-Allow-Origin") == "*"


@needs_nginx
def test_preflight(small_nginx):
    r, body = request(small_nginx, "/models/m/model.safetensors", method="OPTIONS", Origin="http://127.0.0.1:1",
                      **{"Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "range"})
    assert r.status == 204 and body == b""
    assert {name: r.getheader(name) for name in CORS} == CORS
    assert r.getheader("Access-Control-Max-Age") == "86400"
